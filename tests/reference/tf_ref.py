r"""Float64 NumPy reference for TensorFlow's RNN block ops (API.md §2, semantics.md §3).

The maths is the kernels' (verified against autograd in semantics.md), **not** the public
docstrings, which carry errata (semantics.md §3.1 table).  Inputs may be any float dtype; every
computation and output is float64.  ``device=`` is accepted and ignored.  Gradient ops use the
forward activations they are handed (as TF's kernels do), they do not recompute them.

GRUBlockCell (columns of w_ru are ``[r | u]``; reset applied before the matmul)::

    [r̄ | ū] = [x, h_prev]·w_ru + b_ru ;  r = σ(r̄) ; u = σ(ū)
    c̄ = [x, h_prev⊙r]·w_c + b_c ;  c = tanh(c̄) ;  h = u⊙h_prev + (1−u)⊙c

LSTMBlockCell / BlockLSTM (gate columns ICFO = ``[i | ci | f | o]``; BlockLSTMV2: IFCO and no
forget_bias)::

    [ī, c̄i, f̄, ō] = [x, h_prev]·w + b
    i = σ(ī + wci⊙cs_prev) ;  f = σ(f̄ + forget_bias + wcf⊙cs_prev) ;  ci = tanh(c̄i)
    cs = ci⊙i + cs_prev⊙f ;  cs = clamp(cs, ±cell_clip) if cell_clip > 0
    o = σ(ō + wco⊙cs)     (peephole on the *new, clipped* cs) ;  co = tanh(cs) ;  h = co⊙o
    (peephole terms only when use_peephole)

Cell backward (straight-through clip: the clamp's derivative is taken as 1)::

    do = o(1−o)⊙h_grad⊙co ;  dcs = (1−co²)⊙h_grad⊙o + cs_grad [+ do⊙wco]
    dci = (1−ci²)⊙dcs⊙i ;  df = f(1−f)⊙dcs⊙cs_prev ;  di = i(1−i)⊙dcs⊙ci
    cs_prev_grad = dcs⊙f [+ di⊙wci + df⊙wcf]
    wci_grad = Σ_n di⊙cs_prev ;  wcf_grad = Σ_n df⊙cs_prev ;  wco_grad = Σ_n do⊙cs
    [x_grad | h_prev_grad] = dicfo·wᵀ ;  w_grad = [x, h_prev]ᵀ·dicfo ;  b_grad = Σ_n dicfo

BlockLSTM(V2) run t = 0 … seq_len_max−1 (cs_prev/h_prev of step t are cs[t−1]/h[t−1]); rows
t ≥ seq_len_max are zero in every output.  BlockLSTMGrad(V2) runs t = seq_len_max−1 … 0 with
``h_grad[t] + carried h_prev_grad`` and ``cs_grad[t] + carried cs_prev_grad`` as the step's
upstream; x_grad is zero for t ≥ seq_len_max.
"""
from __future__ import annotations

import numpy as np

from .mps_ref import sigmoid

__all__ = [
    "gru_block_cell", "gru_block_cell_grad", "gru_block_cell_weight_grads",
    "lstm_block_cell", "lstm_block_cell_grad", "lstm_block_cell_weight_grads",
    "block_lstm", "block_lstm_grad", "block_lstm_v2", "block_lstm_grad_v2",
]

ICFO = ("i", "c", "f", "o")  # LSTMBlockCell, BlockLSTM
IFCO = ("i", "f", "c", "o")  # BlockLSTMV2


def _f64(*arrays):
    return [np.asarray(a, dtype=np.float64) for a in arrays]


# ----------------------------------------------------------------------------------------------
# GRU block cell

def gru_block_cell(x, h_prev, w_ru, w_c, b_ru, b_c, *, device=None):
    """-> (r, u, c, h), each [N,H]."""
    x, h_prev, w_ru, w_c, b_ru, b_c = _f64(x, h_prev, w_ru, w_c, b_ru, b_c)
    H = h_prev.shape[1]
    ru = sigmoid(np.concatenate([x, h_prev], axis=1) @ w_ru + b_ru)
    r, u = ru[:, :H], ru[:, H:]
    c = np.tanh(np.concatenate([x, h_prev * r], axis=1) @ w_c + b_c)
    h = u * h_prev + (1 - u) * c
    return r, u, c, h


def gru_block_cell_grad(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h, *, device=None):
    """-> (d_x [N,I], d_h_prev [N,H], d_c_bar [N,H], d_r_bar_u_bar [N,2H])::

        d_c̄ = d_h⊙(1−u)⊙(1−c²) ;  d_ū = d_h⊙(h_prev − c)⊙u⊙(1−u)
        [d_x2 | d_hr] = d_c̄·w_cᵀ ;  d_r̄ = d_hr⊙h_prev⊙r⊙(1−r)
        [d_x1 | d_hp1] = [d_r̄ | d_ū]·w_ruᵀ
        d_x = d_x1 + d_x2 ;  d_h_prev = d_hp1 + d_hr⊙r + d_h⊙u
    """
    x, h_prev, w_ru, w_c, r, u, c, d_h = _f64(x, h_prev, w_ru, w_c, r, u, c, d_h)
    I = x.shape[1]
    d_c_bar = d_h * (1 - u) * (1 - c * c)
    d_u_bar = d_h * (h_prev - c) * u * (1 - u)
    g2 = d_c_bar @ w_c.T
    d_x2, d_hr = g2[:, :I], g2[:, I:]
    d_r_bar = d_hr * h_prev * r * (1 - r)
    d_r_bar_u_bar = np.concatenate([d_r_bar, d_u_bar], axis=1)
    g1 = d_r_bar_u_bar @ w_ru.T
    d_x = g1[:, :I] + d_x2
    d_h_prev = g1[:, I:] + d_hr * r + d_h * u
    return d_x, d_h_prev, d_c_bar, d_r_bar_u_bar


def gru_block_cell_weight_grads(x, h_prev, r, d_c_bar, d_r_bar_u_bar, *, device=None):
    """-> (d_w_ru [I+H,2H], d_w_c [I+H,H], d_b_ru [2H], d_b_c [H])::

        d_w_ru = [x, h_prev]ᵀ·[d_r̄ | d_ū] ;  d_w_c = [x, h_prev⊙r]ᵀ·d_c̄ ;  biases: Σ over the batch
    """
    x, h_prev, r, d_c_bar, d_r_bar_u_bar = _f64(x, h_prev, r, d_c_bar, d_r_bar_u_bar)
    d_w_ru = np.concatenate([x, h_prev], axis=1).T @ d_r_bar_u_bar
    d_w_c = np.concatenate([x, h_prev * r], axis=1).T @ d_c_bar
    return d_w_ru, d_w_c, d_r_bar_u_bar.sum(axis=0), d_c_bar.sum(axis=0)


# ----------------------------------------------------------------------------------------------
# LSTM block cell (shared by the sequence ops)

def _split4(a, layout):
    H = a.shape[-1] // 4
    return {g: a[..., k * H:(k + 1) * H] for k, g in enumerate(layout)}


def _join4(parts, layout):
    return np.concatenate([parts[g] for g in layout], axis=-1)


def _lstm_step(x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias, cell_clip, use_peephole,
               layout):
    a = _split4(np.concatenate([x, h_prev], axis=1) @ w + b, layout)
    pi = wci * cs_prev if use_peephole else 0.0
    pf = wcf * cs_prev if use_peephole else 0.0
    i = sigmoid(a["i"] + pi)
    f = sigmoid(a["f"] + forget_bias + pf)
    ci = np.tanh(a["c"])
    cs = ci * i + cs_prev * f
    if cell_clip > 0:
        cs = np.clip(cs, -cell_clip, cell_clip)
    o = sigmoid(a["o"] + (wco * cs if use_peephole else 0.0))
    co = np.tanh(cs)
    return i, cs, f, o, ci, co, co * o


def _lstm_step_grad(cs_prev, wci, wcf, wco, i, cs, f, o, ci, co, cs_grad, h_grad, use_peephole,
                    layout):
    do = o * (1 - o) * h_grad * co
    dcs = (1 - co * co) * h_grad * o + cs_grad
    if use_peephole:
        dcs = dcs + do * wco
    dci = (1 - ci * ci) * dcs * i
    df = f * (1 - f) * dcs * cs_prev
    di = i * (1 - i) * dcs * ci
    cs_prev_grad = dcs * f
    if use_peephole:
        cs_prev_grad = cs_prev_grad + di * wci + df * wcf
        wci_grad = (di * cs_prev).sum(axis=0)
        wcf_grad = (df * cs_prev).sum(axis=0)
        wco_grad = (do * cs).sum(axis=0)
    else:
        H = cs.shape[1]
        wci_grad, wcf_grad, wco_grad = np.zeros(H), np.zeros(H), np.zeros(H)
    dgates = _join4({"i": di, "c": dci, "f": df, "o": do}, layout)
    return cs_prev_grad, dgates, wci_grad, wcf_grad, wco_grad


def lstm_block_cell(x, cs_prev, h_prev, w, wci, wcf, wco, b, *, forget_bias=1.0, cell_clip=3.0,
                    use_peephole=False, device=None):
    """-> (i, cs, f, o, ci, co, h), each [N,H]; ICFO gate columns."""
    args = _f64(x, cs_prev, h_prev, w, wci, wcf, wco, b)
    return _lstm_step(*args, float(forget_bias), float(cell_clip), use_peephole, ICFO)


def lstm_block_cell_grad(x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, cs_grad,
                         h_grad, *, use_peephole=False, device=None):
    """-> (cs_prev_grad [N,H], dicfo [N,4H] (ICFO, pre-activation grads), wci_grad, wcf_grad,
    wco_grad [H]); peephole grads are zeros without use_peephole."""
    cs_prev, wci, wcf, wco, i, cs, f, o, ci, co, cs_grad, h_grad = _f64(
        cs_prev, wci, wcf, wco, i, cs, f, o, ci, co, cs_grad, h_grad)
    return _lstm_step_grad(cs_prev, wci, wcf, wco, i, cs, f, o, ci, co, cs_grad, h_grad,
                           use_peephole, ICFO)


def lstm_block_cell_weight_grads(x, h_prev, w, dicfo, *, device=None):
    """-> (x_grad [N,I], h_prev_grad [N,H], w_grad [I+H,4H], b_grad [4H]) from the gate grads."""
    x, h_prev, w, dicfo = _f64(x, h_prev, w, dicfo)
    I = x.shape[1]
    xh_grad = dicfo @ w.T
    w_grad = np.concatenate([x, h_prev], axis=1).T @ dicfo
    return xh_grad[:, :I], xh_grad[:, I:], w_grad, dicfo.sum(axis=0)


# ----------------------------------------------------------------------------------------------
# BlockLSTM / BlockLSTMV2 and their gradients

def _seq_len(seq_len_max, T):
    n = int(np.asarray(seq_len_max).reshape(()))
    if not 0 <= n <= T:
        raise ValueError(f"seq_len_max must be in [0, {T}], got {n}")
    return n


def _block_lstm(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias, cell_clip,
                use_peephole, layout):
    x, cs_prev, h_prev, w, wci, wcf, wco, b = _f64(x, cs_prev, h_prev, w, wci, wcf, wco, b)
    T, N = x.shape[:2]
    H = cs_prev.shape[1]
    n = _seq_len(seq_len_max, T)
    outs = [np.zeros((T, N, H)) for _ in range(7)]  # i, cs, f, o, ci, co, h
    cs, h = cs_prev, h_prev
    for t in range(n):
        step = _lstm_step(x[t], cs, h, w, wci, wcf, wco, b, forget_bias, cell_clip, use_peephole,
                          layout)
        for seq, val in zip(outs, step):
            seq[t] = val
        cs, h = step[1], step[6]
    return tuple(outs)


def _block_lstm_grad(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h,
                     cs_grad, h_grad, use_peephole, layout):
    (x, cs_prev, h_prev, w, wci, wcf, wco, i, cs, f, o, ci, co, h, cs_grad, h_grad) = _f64(
        x, cs_prev, h_prev, w, wci, wcf, wco, i, cs, f, o, ci, co, h, cs_grad, h_grad)
    T, N, I = x.shape
    H = cs_prev.shape[1]
    n = _seq_len(seq_len_max, T)
    x_grad = np.zeros((T, N, I))
    w_grad, b_grad = np.zeros_like(w), np.zeros(4 * H)
    wci_grad, wcf_grad, wco_grad = np.zeros(H), np.zeros(H), np.zeros(H)
    dcs_carry, dh_carry = np.zeros((N, H)), np.zeros((N, H))
    for t in range(n - 1, -1, -1):
        cs_p = cs_prev if t == 0 else cs[t - 1]
        h_p = h_prev if t == 0 else h[t - 1]
        dcs_carry, dg, gci, gcf, gco = _lstm_step_grad(
            cs_p, wci, wcf, wco, i[t], cs[t], f[t], o[t], ci[t], co[t],
            cs_grad[t] + dcs_carry, h_grad[t] + dh_carry, use_peephole, layout)
        xh = dg @ w.T
        x_grad[t], dh_carry = xh[:, :I], xh[:, I:]
        w_grad += np.concatenate([x[t], h_p], axis=1).T @ dg
        b_grad += dg.sum(axis=0)
        wci_grad += gci
        wcf_grad += gcf
        wco_grad += gco
    return x_grad, dcs_carry, dh_carry, w_grad, wci_grad, wcf_grad, wco_grad, b_grad


def block_lstm(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, *, forget_bias=1.0,
               cell_clip=3.0, use_peephole=False, device=None):
    """-> (i, cs, f, o, ci, co, h), each [T,N,H]; ICFO; zeros at t ≥ seq_len_max."""
    return _block_lstm(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, float(forget_bias),
                       float(cell_clip), use_peephole, ICFO)


def block_lstm_v2(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, *, cell_clip=0.0,
                  use_peephole=False, device=None):
    """-> (i, cs, f, o, ci, co, h), each [T,N,H]; IFCO, no forget_bias; zeros at t ≥ seq_len_max."""
    return _block_lstm(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, 0.0, float(cell_clip),
                       use_peephole, IFCO)


def block_lstm_grad(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h,
                    cs_grad, h_grad, *, use_peephole=False, device=None):
    """-> (x_grad, cs_prev_grad, h_prev_grad, w_grad, wci_grad, wcf_grad, wco_grad, b_grad); ICFO.
    ``cs_grad``/``h_grad`` [T,N,H] are dL/dcs[t], dL/dh[t] for every step."""
    return _block_lstm_grad(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci,
                            co, h, cs_grad, h_grad, use_peephole, ICFO)


def block_lstm_grad_v2(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h,
                       cs_grad, h_grad, *, use_peephole=False, device=None):
    """As ``block_lstm_grad`` with IFCO gate columns (w_grad, b_grad in IFCO)."""
    return _block_lstm_grad(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci,
                            co, h, cs_grad, h_grad, use_peephole, IFCO)
