r"""Tiny float64 NumPy forward references for ``pyrnn-cl selftest`` (written from the equations of
API.md / docs/semantics.md; shares no code with the kernels, the dialects or ``tests/``).

Forward passes only: ``pyrnn_cl.selftest`` checks the library's gradients with central finite
differences of these functions. Everything is float64 and readable rather than fast (a few small
fixed configurations). σ(x) = 1/(1+e^{-x}) (computed as ½(1+tanh(x/2)) to avoid overflow).

MPSGraph layers (one layer, time-major ``x [T,N,I]``; ``W [G·H, I]`` or None for a pre-projected
``x``; ``R [G·H, H]``; per direction ``d``; a bidirectional call runs direction 1 in reverse)::

    single gate:  h[t] = act(x'[t] + (h[t-1] m[t]) R^T)                     x' = x W^T + b
    LSTM [i,f,z,o] ([i,z,f,o] forget_gate_last):
        a = x'[t] + (h[t-1] m[t]) R^T + p c[t-1];  c[t] = f c[t-1] + i z;  h[t] = o g(c[t])
    GRU [z,r,o] ([r,z,o] reset_gate_first):
        z, r = f_z(x'_z + (h m) R_z^T), f_r(x'_r + (h m) R_r^T)
        c = (h r m) R_o^T  (reset_after=False)   |   c = ((h m) R_o^T + b2) r  (True)
        o = f_o(c + x'_o);   h = (1-z) h + z o  (flip_z=False)   |   z h + (1-z) o  (True)

TensorFlow block ops (``[x, h_prev] · w + b``; GRUBlockCell columns ``[r|u]``; LSTM ICFO, V2
IFCO)::

    GRU:  r, u = σ(.);  c = tanh([x, h r] w_c + b_c);  h = u h_prev + (1-u) c
    LSTM: i = σ(a_i + wci cs_prev);  f = σ(a_f + forget_bias + wcf cs_prev);  ci = tanh(a_ci)
          cs = clip(ci i + cs_prev f);  o = σ(a_o + wco cs);  co = tanh(cs);  h = co o

cuDNN (canonical per layer and direction: W_g [H, in], R_g [H, R], W_proj [P, H], bW_g, bR_g;
gate order LSTM (i,f,g,o), GRU (r,z,n)); ``skip_input``: layer 0's x enters every gate unweighted::

    RNN:  h = act(W x + bW + R h + bR)
    LSTM: c = f c + i g;  h = o tanh(c);  (projection: r = W_proj h is the output and the state)
    GRU:  n = tanh(W_n x + bW_n + r (R_n h + bR_n));  h = (1-z) n + z h
    lengths: row n runs t < len[n]; the reverse direction starts at len[n]-1; outputs past the
    length are 0; the final state is the last valid step's (the initial one for len 0).
"""

from __future__ import annotations

import numpy as np

from .cells import gates

__all__ = ["act", "mps_rnn", "mps_lstm", "mps_gru", "tf_gru_cell", "tf_lstm_cell", "tf_block_lstm",
           "cudnn_counts", "cudnn_unpack", "cudnn_forward"]


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def act(name, x):
    """none, relu, tanh, sigmoid, hard_sigmoid (clip(0.2 x + 0.5, 0, 1))."""
    if name == "none":
        return x
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "tanh":
        return np.tanh(x)
    if name == "sigmoid":
        return _sigmoid(x)
    if name == "hard_sigmoid":
        return np.clip(0.2 * x + 0.5, 0.0, 1.0)
    raise ValueError(f"unknown activation {name!r}")


# ---- MPSGraph -----------------------------------------------------------------------------------


def _mps_layer(step, G, x, R, W, b, h0, c0, mask, bidirectional, reverse):
    """Shared direction/packing loop. ``step(xp_t, h, c, m_t, d) -> (h, c)``."""
    T, N = x.shape[:2]
    D = 2 if bidirectional else 1
    H = R.shape[-1]
    GH = G * H
    hs = np.zeros((T, N, D * H))
    cs = np.zeros((T, N, D * H))
    for d in range(D):
        rows = slice(d * GH, (d + 1) * GH)
        xp = x[..., rows].copy() if W is None else x @ W[rows].T
        if b is not None:
            xp = xp + b[rows]
        cols = slice(d * H, (d + 1) * H)
        h = np.zeros((N, H)) if h0 is None else h0[:, cols].copy()
        c = np.zeros((N, H)) if c0 is None else c0[:, cols].copy()
        m = np.ones((T, N, H)) if mask is None else np.broadcast_to(mask, (T, N, D * H))[..., cols]
        backwards = d == 1 if bidirectional else reverse
        for t in (range(T - 1, -1, -1) if backwards else range(T)):
            h, c = step(xp[t], h, c, m[t], d)
            hs[t, :, cols], cs[t, :, cols] = h, c
    return hs, cs


def mps_rnn(x, R, W=None, b=None, h0=None, mask=None, *, activation="relu", bidirectional=False,
            reverse=False):
    """Single-gate RNN ``h [T, N, D·H]``."""
    def step(xp, h, c, m, d):
        Rd = R if R.ndim == 2 else R[d]
        return act(activation, xp + (h * m) @ Rd.T), c

    return _mps_layer(step, 1, x, R, W, b, h0, None, mask, bidirectional, reverse)[0]


def mps_lstm(x, R, W=None, b=None, h0=None, c0=None, mask=None, peephole=None, *,
             forget_gate_last=False, acts=("sigmoid", "sigmoid", "tanh", "sigmoid"),
             cell_act="tanh", bidirectional=False, reverse=False):
    """LSTM ``(h, c)``, each ``[T, N, D·H]``; ``acts`` = (input, forget, cell, output) gates."""
    order = ("i", "z", "f", "o") if forget_gate_last else ("i", "f", "z", "o")
    gate_act = dict(zip(("i", "f", "z", "o"), acts))

    def step(xp, h, c, m, d):
        Rd = R if R.ndim == 2 else R[d]
        H = Rd.shape[-1]
        a = xp + (h * m) @ Rd.T
        if peephole is not None:
            p = peephole if peephole.ndim == 1 else peephole[d]
            a = a + p * np.tile(c, 4)
        g = {k: act(gate_act[k], a[:, j * H:(j + 1) * H]) for j, k in enumerate(order)}
        c = g["f"] * c + g["i"] * g["z"]
        return g["o"] * act(cell_act, c), c

    return _mps_layer(step, 4, x, R, W, b, h0, c0, mask, bidirectional, reverse)


def mps_gru(x, R, W=None, b=None, h0=None, mask=None, secondary_bias=None, *,
            reset_gate_first=False, reset_after=False, flip_z=False,
            acts=("sigmoid", "sigmoid", "tanh"), bidirectional=False, reverse=False):
    """GRU ``h [T, N, D·H]``; ``acts`` = (update, reset, output) gates."""
    order = ("r", "z", "o") if reset_gate_first else ("z", "r", "o")

    def step(xp, h, c, m, d):
        Rd = R if R.ndim == 2 else R[d]
        H = Rd.shape[-1]
        blk = {k: slice(j * H, (j + 1) * H) for j, k in enumerate(order)}
        hm = h * m
        z = act(acts[0], xp[:, blk["z"]] + hm @ Rd[blk["z"]].T)
        r = act(acts[1], xp[:, blk["r"]] + hm @ Rd[blk["r"]].T)
        if reset_after:
            b2 = 0.0 if secondary_bias is None else secondary_bias[d * H:(d + 1) * H]
            cand = (hm @ Rd[blk["o"]].T + b2) * r
        else:
            cand = (hm * r) @ Rd[blk["o"]].T
        o = act(acts[2], cand + xp[:, blk["o"]])
        h = z * h + (1 - z) * o if flip_z else (1 - z) * h + z * o
        return h, c

    return _mps_layer(step, 3, x, R, W, b, h0, None, mask, bidirectional, reverse)[0]


# ---- TensorFlow block ops -----------------------------------------------------------------------


def tf_gru_cell(x, h_prev, w_ru, w_c, b_ru, b_c):
    """GRUBlockCell ``(r, u, c, h)``."""
    H = h_prev.shape[1]
    ru = _sigmoid(np.concatenate([x, h_prev], axis=1) @ w_ru + b_ru)
    r, u = ru[:, :H], ru[:, H:]
    c = np.tanh(np.concatenate([x, h_prev * r], axis=1) @ w_c + b_c)
    return r, u, c, u * h_prev + (1 - u) * c


def tf_lstm_cell(x, cs_prev, h_prev, w, wci, wcf, wco, b, *, forget_bias=1.0, cell_clip=3.0,
                 use_peephole=False, layout="icfo"):
    """LSTMBlockCell ``(i, cs, f, o, ci, co, h)``; layout "icfo" (V1) or "ifco" (V2)."""
    H = h_prev.shape[1]
    a = np.concatenate([x, h_prev], axis=1) @ w + b
    blk = {k: a[:, j * H:(j + 1) * H] for j, k in enumerate(layout.replace("c", "C"))}
    pi, pf, po = (wci, wcf, wco) if use_peephole else (0.0, 0.0, 0.0)
    i = _sigmoid(blk["i"] + pi * cs_prev)
    f = _sigmoid(blk["f"] + forget_bias + pf * cs_prev)
    ci = np.tanh(blk["C"])
    cs = ci * i + cs_prev * f
    if cell_clip > 0:
        cs = np.clip(cs, -cell_clip, cell_clip)
    o = _sigmoid(blk["o"] + po * cs)
    co = np.tanh(cs)
    return i, cs, f, o, ci, co, co * o


def tf_block_lstm(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, *, forget_bias=1.0,
                  cell_clip=3.0, use_peephole=False, layout="icfo"):
    """BlockLSTM(V2): the cell over t < seq_len_max; every output is 0 at later steps."""
    T, N = x.shape[:2]
    H = h_prev.shape[1]
    outs = [np.zeros((T, N, H)) for _ in range(7)]
    cs, h = cs_prev, h_prev
    for t in range(min(int(seq_len_max), T)):
        step = tf_lstm_cell(x[t], cs, h, w, wci, wcf, wco, b, forget_bias=forget_bias,
                            cell_clip=cell_clip, use_peephole=use_peephole, layout=layout)
        for k in range(7):
            outs[k][t] = step[k]
        cs, h = step[1], step[6]
    return tuple(outs)


# ---- cuDNN --------------------------------------------------------------------------------------



def cudnn_counts(L, H, I, mode, D, P=0, skip=False):
    """Shapes of the canonical weights and biases, in order (API.md §3)."""
    G = gates(mode)
    Rw = P or H
    ws, bs = [], []
    for layer in range(L):
        width = I if layer == 0 else D * Rw
        for _ in range(D):
            if not (skip and layer == 0):
                ws += [(H, width)] * G
            ws += [(H, Rw)] * G
            if P:
                ws.append((P, H))
            bs += [(H,)] * (2 * G)
    return ws, bs


def cudnn_unpack(params, L, H, I, mode, D, P=0, skip=False):
    """Split flat ``params`` into per (layer, direction) dicts: W (list or None), R, Wp, bW, bR.
    Layout: per pseudo-layer, its weights then its biases, each flattened row-major."""
    G = gates(mode)
    Rw = P or H
    out, pos = [], 0

    def take(shape):
        nonlocal pos
        size = int(np.prod(shape))
        a = params[pos:pos + size].reshape(shape)
        pos += size
        return a

    for layer in range(L):
        width = I if layer == 0 else D * Rw
        row = []
        for _ in range(D):
            W = None if (skip and layer == 0) else [take((H, width)) for _ in range(G)]
            R = [take((H, Rw)) for _ in range(G)]
            Wp = take((P, H)) if P else None
            bW = [take((H,)) for _ in range(G)]
            bR = [take((H,)) for _ in range(G)]
            row.append(dict(W=W, R=R, Wp=Wp, bW=bW, bR=bR))
        out.append(row)
    if pos != params.size:
        raise ValueError(f"params has {params.size} values, the layout {pos}")
    return out


def cudnn_forward(x, h0, c0, params, lengths, *, L, H, mode, D, P=0, skip=False):
    """Time-major multi-layer forward: ``(output [T,N,D·R], output_h [L·D,N,R], output_c)``."""
    T, N, I = x.shape
    Rw = P or H
    layers = cudnn_unpack(params, L, H, I, mode, D, P, skip)
    lengths = np.full(N, T) if lengths is None else np.asarray(lengths)
    hn = np.zeros((L * D, N, Rw))
    cn = np.zeros((L * D, N, H))
    inp = x
    for layer in range(L):
        out = np.zeros((T, N, D * Rw))
        for d in range(D):
            p = layers[layer][d]
            k = layer * D + d
            for n in range(N):
                h = h0[k, n].copy()
                c = c0[k, n].copy() if c0 is not None else np.zeros(H)
                steps = range(lengths[n] - 1, -1, -1) if d == 1 else range(lengths[n])
                for t in steps:
                    xt = inp[t, n]
                    wx = [xt if p["W"] is None else p["W"][g] @ xt for g in range(len(p["R"]))]
                    pre = [wx[g] + p["bW"][g] for g in range(len(p["R"]))]
                    rec = [p["R"][g] @ h + p["bR"][g] for g in range(len(p["R"]))]
                    if mode == "lstm":
                        i, f = _sigmoid(pre[0] + rec[0]), _sigmoid(pre[1] + rec[1])
                        g_, o = np.tanh(pre[2] + rec[2]), _sigmoid(pre[3] + rec[3])
                        c = f * c + i * g_
                        h = o * np.tanh(c)
                        if P:
                            h = p["Wp"] @ h
                    elif mode == "gru":
                        r, z = _sigmoid(pre[0] + rec[0]), _sigmoid(pre[1] + rec[1])
                        nn = np.tanh(pre[2] + r * rec[2])
                        h = (1 - z) * nn + z * h
                    else:
                        h = act("relu" if mode == "rnn_relu" else "tanh", pre[0] + rec[0])
                    out[t, n, d * Rw:(d + 1) * Rw] = h
                hn[k, n] = h
                cn[k, n] = c
        inp = out
    return inp, hn, cn
