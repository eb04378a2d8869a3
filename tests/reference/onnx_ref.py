r"""Float64 NumPy reference for the ONNX ``RNN``, ``GRU`` and ``LSTM`` operators (opset 22, default
activations, ``layout=0``, no ``clip``, no ``sequence_lens``), written from the equations of the
ONNX operator documentation, used to test ``pyrnn_cl.convert``'s ONNX converters.

Inputs ``X [T,N,I]``, ``W [D, G·H, I]``, ``R [D, G·H, H]``, ``B [D, 2·G·H] = [Wb | Rb]``,
``initial_h``/``initial_c [D,N,H]``, LSTM peephole ``P [D, 3H]`` (order i, o, f).
Outputs ``Y [T, D, N, H]``, ``Y_h [D,N,H]`` (and ``Y_c``). Direction 0 runs forward (or reverse
when ``direction='reverse'``), direction 1 of a bidirectional node in reverse.

    RNN  (gate a):       H_t = tanh(X_t·Wiᵀ + H_{t-1}·Riᵀ + Wbi + Rbi)
    GRU  (blocks z,r,h): z = σ(X·Wzᵀ + H·Rzᵀ + Wbz + Rbz) ;  r = σ(X·Wrᵀ + H·Rrᵀ + Wbr + Rbr)
                         lbr=0: h̃ = tanh(X·Whᵀ + (r⊙H)·Rhᵀ + Rbh + Wbh)
                         lbr≠0: h̃ = tanh(X·Whᵀ + r⊙(H·Rhᵀ + Rbh) + Wbh)
                         H_t = (1 − z)⊙h̃ + z⊙H_{t-1}
    LSTM (blocks i,o,f,c): i = σ(X·Wiᵀ + H·Riᵀ + Pi⊙C_{t-1} + Wbi + Rbi)
                         f = σ(X·Wfᵀ + H·Rfᵀ + Pf⊙C_{t-1} + Wbf + Rbf)
                         c = tanh(X·Wcᵀ + H·Rcᵀ + Wbc + Rbc) ;  C_t = f⊙C_{t-1} + i⊙c
                         o = σ(X·Woᵀ + H·Roᵀ + Po⊙C_t + Wbo + Rbo) ;  H_t = o⊙tanh(C_t)
"""
from __future__ import annotations

import numpy as np

from .mps_ref import sigmoid

__all__ = ["onnx_rnn", "onnx_gru", "onnx_lstm"]


def _prep(X, W, R, B, initial_h, G):
    X, W, R = (np.asarray(a, dtype=np.float64) for a in (X, W, R))
    D, GH, _ = W.shape
    H = GH // G
    N = X.shape[1]
    B = np.zeros((D, 2 * GH)) if B is None else np.asarray(B, dtype=np.float64)
    h0 = np.zeros((D, N, H)) if initial_h is None else np.asarray(initial_h, dtype=np.float64)
    return X, W, R, B, h0, D, H


def _steps(T, d, direction):
    rev = d == 1 or direction == "reverse"
    return range(T - 1, -1, -1) if rev else range(T)


def _blocks(a, G):
    return np.split(a, G, axis=0)


def onnx_rnn(X, W, R, B=None, initial_h=None, *, direction="forward"):
    """-> (Y [T,D,N,H], Y_h [D,N,H]); activation tanh."""
    X, W, R, B, h0, D, H = _prep(X, W, R, B, initial_h, 1)
    T, N = X.shape[:2]
    Y = np.zeros((T, D, N, H))
    Yh = np.zeros((D, N, H))
    for d in range(D):
        h = h0[d]
        for t in _steps(T, d, direction):
            h = np.tanh(X[t] @ W[d].T + h @ R[d].T + B[d, :H] + B[d, H:])
            Y[t, d] = h
        Yh[d] = h
    return Y, Yh


def onnx_gru(X, W, R, B=None, initial_h=None, *, linear_before_reset=0, direction="forward"):
    """-> (Y [T,D,N,H], Y_h [D,N,H]); gate blocks z, r, h."""
    X, W, R, B, h0, D, H = _prep(X, W, R, B, initial_h, 3)
    T, N = X.shape[:2]
    Y = np.zeros((T, D, N, H))
    Yh = np.zeros((D, N, H))
    for d in range(D):
        Wz, Wr, Wh = _blocks(W[d], 3)
        Rz, Rr, Rh = _blocks(R[d], 3)
        Wbz, Wbr, Wbh, Rbz, Rbr, Rbh = np.split(B[d], 6)
        h = h0[d]
        for t in _steps(T, d, direction):
            x = X[t]
            z = sigmoid(x @ Wz.T + h @ Rz.T + Wbz + Rbz)
            r = sigmoid(x @ Wr.T + h @ Rr.T + Wbr + Rbr)
            if linear_before_reset:
                ht = np.tanh(x @ Wh.T + r * (h @ Rh.T + Rbh) + Wbh)
            else:
                ht = np.tanh(x @ Wh.T + (r * h) @ Rh.T + Rbh + Wbh)
            h = (1 - z) * ht + z * h
            Y[t, d] = h
        Yh[d] = h
    return Y, Yh


def onnx_lstm(X, W, R, B=None, initial_h=None, initial_c=None, P=None, *, direction="forward"):
    """-> (Y [T,D,N,H], Y_h [D,N,H], Y_c [D,N,H]); gate blocks i, o, f, c; P blocks i, o, f."""
    X, W, R, B, h0, D, H = _prep(X, W, R, B, initial_h, 4)
    T, N = X.shape[:2]
    c0 = np.zeros((D, N, H)) if initial_c is None else np.asarray(initial_c, dtype=np.float64)
    P = np.zeros((D, 3 * H)) if P is None else np.asarray(P, dtype=np.float64)
    Y = np.zeros((T, D, N, H))
    Yh = np.zeros((D, N, H))
    Yc = np.zeros((D, N, H))
    for d in range(D):
        Wi, Wo, Wf, Wc = _blocks(W[d], 4)
        Ri, Ro, Rf, Rc = _blocks(R[d], 4)
        Wbi, Wbo, Wbf, Wbc, Rbi, Rbo, Rbf, Rbc = np.split(B[d], 8)
        Pi, Po, Pf = np.split(P[d], 3)
        h, c = h0[d], c0[d]
        for t in _steps(T, d, direction):
            x = X[t]
            i = sigmoid(x @ Wi.T + h @ Ri.T + Pi * c + Wbi + Rbi)
            f = sigmoid(x @ Wf.T + h @ Rf.T + Pf * c + Wbf + Rbf)
            ct = np.tanh(x @ Wc.T + h @ Rc.T + Wbc + Rbc)
            c = f * c + i * ct
            o = sigmoid(x @ Wo.T + h @ Ro.T + Po * c + Wbo + Rbo)
            h = o * np.tanh(c)
            Y[t, d] = h
        Yh[d], Yc[d] = h, c
    return Y, Yh, Yc
