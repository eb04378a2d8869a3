r"""Float64 NumPy reference for the cuDNN dialect (API.md §3, semantics.md §4).

Per layer l, direction d (pseudo-layer k = l·D + d), gate g: W_g [H, in_l] (in_0 = input_size,
in_l = D·R), R_g [H, R], optional W_proj [P, H] (LSTM, ``num_proj`` = P; R = P else R = H), biases
bW_g, bR_g [H].  With ``gx_g = x·W_gᵀ + bW_g`` (``skip_input``, layer 0: ``gx_g = x + bW_g``, x of
width H enters every gate) and ``gh_g = h[t-1]·R_gᵀ + bR_g``:

    rnn_relu / rnn_tanh:  h = act(gx + gh)
    lstm (i,f,g,o):       i,f,o = σ(gx+gh) ; g = tanh(gx_g+gh_g) ; c = f⊙c[t-1] + i⊙g
                          h = o⊙tanh(c) ; with num_proj: h ← h·W_projᵀ (fed to next step and layer)
    gru (r,z,n):          r,z = σ(gx+gh) ; n = tanh(gx_n + r⊙gh_n) ; h = (1−z)⊙n + z⊙h[t-1]

Layers: the input of layer l+1 is layer l's output [T,N,D·R] (fwd | bwd), multiplied by
``dropout_masks[l]`` when given (never after the last layer, never on recurrent connections).
``sequence_lengths`` [N]: a step t is *active* for row b iff t < len_b; inactive steps leave the
state untouched and output 0 — so the forward direction's final state is the one at len_b−1, the
reverse direction starts at len_b−1 from the initial state and ends after t = 0, and len_b = 0
returns the initial state.  Backward ignores output_backprop on inactive steps and gives 0
input_backprop there.

Canonical order (TF's): for each pseudo-layer k: weights ``W_0..W_{G-1}`` (absent for layer 0 with
skip_input), ``R_0..R_{G-1}``, ``W_proj`` if num_proj; biases ``bW_0..bW_{G-1}, bR_0..bR_{G-1}``;
``weights``/``biases`` are flat lists.  ``params`` (1-D) = for each k: its weights then its biases,
each flattened row-major.

**Dropout masks**: ``dropout_masks`` is ``None`` or a list (or stacked array) of L−1 float arrays,
entry l multiplying layer l's output before it feeds layer l+1; each is broadcastable to the
**time-major** shape [T, N, D·R] (also when ``time_major=False``) and already holds the kept
values' 1/(1−p) scaling (e.g. {0, 1/(1−p)}).

Shapes: input [T,N,I] ([N,T,I] if not time_major); input_h/output_h [L·D,N,R]; input_c/output_c
[L·D,N,H] (LSTM; other modes ignore input_c and return empty arrays); output [T,N,D·R] ([N,T,D·R]).
L, H and the input size are read from input_h, input_c (LSTM) / input_h (others) and input.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .mps_ref import sigmoid

__all__ = [
    "params_size", "canonical_shapes", "canonical_to_params", "params_to_canonical",
    "cudnn_rnn_params_size", "cudnn_rnn_canonical_to_params", "cudnn_rnn_params_to_canonical",
    "cudnn_rnn_forward", "cudnn_rnn_backward",
    "cudnn_rnn_forward_canonical", "cudnn_rnn_backward_canonical",
]

NUM_GATES = {"rnn_relu": 1, "rnn_tanh": 1, "gru": 3, "lstm": 4}


@dataclasses.dataclass(frozen=True)
class _Config:
    mode: str
    L: int
    H: int
    I: int
    D: int
    skip: bool
    P: int

    @property
    def G(self):
        return NUM_GATES[self.mode]

    @property
    def R(self):
        return self.P if self.P else self.H

    def in_size(self, l):
        return self.I if l == 0 else self.D * self.R

    def layer_shapes(self, l):
        """(weight shapes, bias shapes) of one pseudo-layer of layer l, canonical order."""
        G, H = self.G, self.H
        w = [] if (l == 0 and self.skip) else [(H, self.in_size(l))] * G
        w = w + [(H, self.R)] * G
        if self.P:
            w.append((self.P, H))
        return w, [(H,)] * (2 * G)


def _config(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj):
    if rnn_mode not in NUM_GATES:
        raise ValueError(f"rnn_mode must be one of {tuple(NUM_GATES)}, got {rnn_mode!r}")
    if direction not in ("unidirectional", "bidirectional"):
        raise ValueError(f"direction must be unidirectional or bidirectional, got {direction!r}")
    if input_mode == "auto_select":
        skip = input_size == num_units
    elif input_mode in ("linear_input", "skip_input"):
        skip = input_mode == "skip_input"
    else:
        raise ValueError("input_mode must be linear_input, skip_input or auto_select, "
                         f"got {input_mode!r}")
    if skip and input_size != num_units:
        raise ValueError(f"skip_input needs input_size == num_units ({input_size} != {num_units})")
    num_proj = int(num_proj or 0)
    if num_proj and rnn_mode != "lstm":
        raise ValueError("num_proj is only valid for rnn_mode='lstm'")
    if num_layers < 1 or num_units < 1 or input_size < 0 or num_proj < 0:
        raise ValueError("num_layers and num_units must be >= 1, input_size and num_proj >= 0")
    return _Config(rnn_mode, int(num_layers), int(num_units), int(input_size),
                   2 if direction == "bidirectional" else 1, skip, num_proj)


def canonical_shapes(num_layers, num_units, input_size, *, rnn_mode="lstm",
                     input_mode="linear_input", direction="unidirectional", num_proj=0):
    """(list of weight shapes, list of bias shapes) in canonical order."""
    cfg = _config(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj)
    ws, bs = [], []
    for l in range(cfg.L):
        for _ in range(cfg.D):
            w, b = cfg.layer_shapes(l)
            ws += w
            bs += b
    return ws, bs


def params_size(num_layers, num_units, input_size, *, rnn_mode="lstm", input_mode="linear_input",
                direction="unidirectional", num_proj=0):
    """Length of the flat params vector: Σ_l D·[G·H·in_l (not layer 0 with skip_input) + G·H·R
    + P·H + 2·G·H]."""
    ws, bs = canonical_shapes(num_layers, num_units, input_size, rnn_mode=rnn_mode,
                              input_mode=input_mode, direction=direction, num_proj=num_proj)
    return int(sum(int(np.prod(s)) for s in ws + bs))


def canonical_to_params(num_layers, num_units, input_size, weights, biases, *, rnn_mode="lstm",
                        input_mode="linear_input", direction="unidirectional", num_proj=0):
    """Flat params: for each pseudo-layer, its weights then its biases, row-major (float64)."""
    cfg = _config(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj)
    ws, bs = list(weights), list(biases)
    parts, iw, ib = [], 0, 0
    for l in range(cfg.L):
        for _ in range(cfg.D):
            wshapes, bshapes = cfg.layer_shapes(l)
            for shapes, src, pos, kind in ((wshapes, ws, iw, "weights"),
                                           (bshapes, bs, ib, "biases")):
                for j, s in enumerate(shapes):
                    if pos + j >= len(src):
                        raise ValueError(f"too few {kind}: need more than {len(src)}")
                    a = np.asarray(src[pos + j], dtype=np.float64)
                    if a.shape != s:
                        raise ValueError(f"{kind}[{pos + j}] has shape {a.shape}, expected {s}")
                    parts.append(a.reshape(-1))
            iw += len(wshapes)
            ib += len(bshapes)
    if iw != len(ws) or ib != len(bs):
        raise ValueError(f"expected {iw} weights and {ib} biases, got {len(ws)} and {len(bs)}")
    return np.concatenate(parts) if parts else np.zeros(0)


def params_to_canonical(num_layers, num_units, input_size, params, *, rnn_mode="lstm",
                        input_mode="linear_input", direction="unidirectional", num_proj=0):
    """Inverse of ``canonical_to_params``: -> (weights list, biases list) of float64 copies."""
    cfg = _config(num_layers, num_units, input_size, rnn_mode, input_mode, direction, num_proj)
    p = np.asarray(params, dtype=np.float64).reshape(-1)
    want = params_size(num_layers, num_units, input_size, rnn_mode=rnn_mode, input_mode=input_mode,
                       direction=direction, num_proj=num_proj)
    if p.size != want:
        raise ValueError(f"params has {p.size} elements, expected {want}")
    weights, biases, pos = [], [], 0
    for l in range(cfg.L):
        for _ in range(cfg.D):
            wshapes, bshapes = cfg.layer_shapes(l)
            for shapes, out in ((wshapes, weights), (bshapes, biases)):
                for s in shapes:
                    n = int(np.prod(s))
                    out.append(p[pos:pos + n].reshape(s).copy())
                    pos += n
    return weights, biases


# API-named aliases, so a test can call the reference exactly like the library
cudnn_rnn_params_size = params_size
cudnn_rnn_canonical_to_params = canonical_to_params
cudnn_rnn_params_to_canonical = params_to_canonical


# ----------------------------------------------------------------------------------------------
# Forward / backward

def _unpack(cfg, weights, biases):
    """Per pseudo-layer dict: W (list of G arrays, or None with skip), R (list of G), Wp, bW, bR."""
    ws = [np.asarray(w, dtype=np.float64) for w in weights]
    bs = [np.asarray(b, dtype=np.float64) for b in biases]
    layers, iw, ib = [], 0, 0
    for l in range(cfg.L):
        for _ in range(cfg.D):
            wshapes, bshapes = cfg.layer_shapes(l)
            mine = ws[iw:iw + len(wshapes)]
            if len(mine) != len(wshapes) or any(a.shape != s for a, s in zip(mine, wshapes)):
                raise ValueError(f"weights for layer {l}: got {[a.shape for a in mine]}, "
                                 f"expected {wshapes}")
            iw += len(wshapes)
            bmine = bs[ib:ib + 2 * cfg.G]
            if len(bmine) != len(bshapes) or any(a.shape != s for a, s in zip(bmine, bshapes)):
                raise ValueError(f"biases for layer {l}: got {[a.shape for a in bmine]}, "
                                 f"expected {bshapes}")
            ib += 2 * cfg.G
            skip = l == 0 and cfg.skip
            k = 0 if skip else cfg.G
            layers.append(dict(W=None if skip else mine[:cfg.G], R=mine[k:k + cfg.G],
                               Wp=mine[k + cfg.G] if cfg.P else None,
                               bW=bmine[:cfg.G], bR=bmine[cfg.G:]))
    if iw != len(ws) or ib != len(bs):
        raise ValueError(f"expected {iw} weights and {ib} biases, got {len(ws)} and {len(bs)}")
    return layers


class _Run:
    """Normalised inputs of one call (time-major float64) plus the config."""

    def __init__(self, input, input_h, input_c, sequence_lengths, rnn_mode, input_mode, direction,
                 num_proj, time_major, dropout_masks):
        x = np.asarray(input, dtype=np.float64)
        if x.ndim != 3:
            raise ValueError(f"input must be rank 3, got {x.shape}")
        self.time_major = bool(time_major)
        self.x = x if self.time_major else x.transpose(1, 0, 2)
        T, N, I = self.x.shape
        D = 2 if direction == "bidirectional" else 1
        h0 = np.asarray(input_h, dtype=np.float64)
        if h0.ndim != 3 or h0.shape[0] % D or h0.shape[1] != N:
            raise ValueError(f"input_h shape {h0.shape} is not [L·D, {N}, R]")
        L, R = h0.shape[0] // D, h0.shape[2]
        self.is_lstm = rnn_mode == "lstm"
        if self.is_lstm:
            c0 = np.asarray(input_c, dtype=np.float64)
            H = c0.shape[2] if c0.ndim == 3 else -1
            if c0.shape != (L * D, N, H):
                raise ValueError(f"input_c shape {c0.shape} is not [{L * D}, {N}, H]")
        else:
            H, c0 = R, None
        self.cfg = _config(L, H, I, rnn_mode, input_mode, direction, num_proj)
        if R != self.cfg.R:
            raise ValueError(f"input_h last dim {R}, expected {self.cfg.R}")
        self.h0, self.c0 = h0, c0
        self.T, self.N = T, N
        if sequence_lengths is None:
            lengths = np.full(N, T)
        else:
            lengths = np.asarray(sequence_lengths).astype(np.int64).reshape(-1)
            if lengths.shape != (N,) or (lengths < 0).any() or (lengths > T).any():
                raise ValueError(f"sequence_lengths must be [N] with 0 <= len <= {T}, "
                                 f"got {lengths}")
        # active[t, n, 0] is True iff step t is inside row n's sequence
        self.active = (np.arange(T)[:, None] < lengths[None, :])[..., None]
        masks = [] if dropout_masks is None else list(dropout_masks)
        if masks and len(masks) != L - 1:
            raise ValueError(f"dropout_masks needs {L - 1} entries (one per layer boundary), "
                             f"got {len(masks)}")
        shape = (T, N, D * self.cfg.R)
        self.masks = [np.broadcast_to(np.asarray(m, dtype=np.float64), shape) for m in masks]

    def steps(self, d):
        return range(self.T - 1, -1, -1) if d == 1 else range(self.T)

    def to_layout(self, y):
        return y if self.time_major else y.transpose(1, 0, 2)


def _act(mode):
    if mode == "rnn_relu":
        return (lambda a: np.maximum(a, 0.0)), (lambda a: (a > 0).astype(np.float64))
    return np.tanh, (lambda a: 1.0 - np.tanh(a) ** 2)


def _dir_forward(run, prm, x, h0, c0, d):
    """One direction of one layer.  Returns (y [T,N,R], final h, final c, cache)."""
    mode, G = run.cfg.mode, run.cfg.G
    T, N = run.T, run.N
    gx = [(x if prm["W"] is None else x @ prm["W"][g].T) + prm["bW"][g] for g in range(G)]
    h, c = h0, c0
    y = np.zeros((T, N, h0.shape[1]))
    cache = {}
    for t in run.steps(d):
        gh = [h @ prm["R"][g].T + prm["bR"][g] for g in range(G)]
        st = {"h_prev": h, "c_prev": c}
        if mode in ("rnn_relu", "rnn_tanh"):
            st["a"] = gx[0][t] + gh[0]
            h_new, c_new = _act(mode)[0](st["a"]), None
        elif mode == "lstm":
            i, f = sigmoid(gx[0][t] + gh[0]), sigmoid(gx[1][t] + gh[1])
            g, o = np.tanh(gx[2][t] + gh[2]), sigmoid(gx[3][t] + gh[3])
            c_new = f * c + i * g
            hf = o * np.tanh(c_new)
            h_new = hf if prm["Wp"] is None else hf @ prm["Wp"].T
            st.update(i=i, f=f, g=g, o=o, c=c_new, hf=hf)
        else:  # gru
            r, z = sigmoid(gx[0][t] + gh[0]), sigmoid(gx[1][t] + gh[1])
            n = np.tanh(gx[2][t] + r * gh[2])
            h_new, c_new = (1 - z) * n + z * h, None
            st.update(r=r, z=z, n=n, ghn=gh[2])
        act = run.active[t]
        y[t] = np.where(act, h_new, 0.0)
        h = np.where(act, h_new, h)
        if c_new is not None:
            c = np.where(act, c_new, c)
        cache[t] = st
    return y, h, c, cache


def _dir_backward(run, prm, x, cache, dy, dh, dc, d):
    """Backward of one direction of one layer.  dy [T,N,R] (already masked by activity), dh/dc the
    gradients of the final state.  Returns dx, dh0, dc0, and a dict of parameter grads."""
    mode, G = run.cfg.mode, run.cfg.G
    T, N = run.T, run.N
    H = run.cfg.H
    dgx = [np.zeros((T, N, H)) for _ in range(G)]
    gR = [np.zeros_like(r) for r in prm["R"]]
    gbR = [np.zeros(H) for _ in range(G)]
    gWp = None if prm["Wp"] is None else np.zeros_like(prm["Wp"])
    for t in reversed(run.steps(d)):
        act = run.active[t].astype(np.float64)
        st = cache[t]
        dh_t = (dh + dy[t]) * act  # inactive rows: no gradient enters the step ...
        if mode in ("rnn_relu", "rnn_tanh"):
            da = [dh_t * _act(mode)[1](st["a"])]
            dgh, dh_dir, dc_prev = da, 0.0, None
        elif mode == "lstm":
            dc_t = dc * act
            if gWp is not None:
                gWp += dh_t.T @ st["hf"]
                dhf = dh_t @ prm["Wp"]
            else:
                dhf = dh_t
            tc = np.tanh(st["c"])
            i, f, g, o = st["i"], st["f"], st["g"], st["o"]
            dc_t = dc_t + dhf * o * (1 - tc * tc)
            da = [dc_t * g * i * (1 - i), dc_t * st["c_prev"] * f * (1 - f),
                  dc_t * i * (1 - g * g), dhf * tc * o * (1 - o)]
            dgh, dh_dir = da, 0.0
            dc_prev = dc_t * f + dc * (1 - act)  # ... and the carried gradient passes through
        else:  # gru
            r, z, n = st["r"], st["z"], st["n"]
            dan = dh_t * (1 - z) * (1 - n * n)
            dar = dan * st["ghn"] * r * (1 - r)
            daz = dh_t * (st["h_prev"] - n) * z * (1 - z)
            da = [dar, daz, dan]
            dgh = [dar, daz, dan * r]
            dh_dir, dc_prev = dh_t * z, None
        for k in range(G):
            dgx[k][t] = da[k]
            gR[k] += dgh[k].T @ st["h_prev"]
            gbR[k] += dgh[k].sum(axis=0)
        dh = dh_dir + sum(dgh[k] @ prm["R"][k] for k in range(G)) + dh * (1 - act)
        dc = dc_prev
    x2 = x.reshape(T * N, x.shape[-1])
    if prm["W"] is None:
        dx = sum(dgx)
        gW = None
    else:
        dx = sum(dgx[k] @ prm["W"][k] for k in range(G))
        gW = [dgx[k].reshape(T * N, H).T @ x2 for k in range(G)]
    grads = dict(W=gW, R=gR, Wp=gWp, bW=[g.sum(axis=(0, 1)) for g in dgx], bR=gbR)
    return dx, dh, dc, grads


def _forward(run, layers):
    cfg = run.cfg
    L, D = cfg.L, cfg.D
    out_h = np.zeros_like(run.h0)
    out_c = np.zeros_like(run.c0) if run.is_lstm else None
    inp, caches = run.x, []
    for l in range(L):
        ys, layer_cache = [], []
        for d in range(D):
            k = l * D + d
            c0 = run.c0[k] if run.is_lstm else None
            y, hT, cT, cache = _dir_forward(run, layers[k], inp, run.h0[k], c0, d)
            ys.append(y)
            out_h[k] = hT
            if run.is_lstm:
                out_c[k] = cT
            layer_cache.append(cache)
        caches.append((inp, layer_cache))
        y = np.concatenate(ys, axis=-1)
        inp = y * run.masks[l] if (l < L - 1 and run.masks) else y
    return y, out_h, out_c, caches


def _empty():
    return np.zeros(0)


def cudnn_rnn_forward_canonical(input, input_h, input_c, weights, biases, sequence_lengths=None,
                                *, rnn_mode="lstm", input_mode="linear_input",
                                direction="unidirectional", num_proj=0, time_major=True,
                                dropout_masks=None, device=None):
    """-> (output, output_h, output_c) from canonical weight/bias lists (see module docstring)."""
    run = _Run(input, input_h, input_c, sequence_lengths, rnn_mode, input_mode, direction, num_proj,
               time_major, dropout_masks)
    y, out_h, out_c, _ = _forward(run, _unpack(run.cfg, weights, biases))
    return run.to_layout(y), out_h, (out_c if run.is_lstm else _empty())


def cudnn_rnn_backward_canonical(input, input_h, input_c, weights, biases, sequence_lengths,
                                 output_backprop, output_h_backprop, output_c_backprop, *,
                                 rnn_mode="lstm", input_mode="linear_input",
                                 direction="unidirectional", num_proj=0, time_major=True,
                                 dropout_masks=None, device=None):
    """-> (input_backprop, input_h_backprop, input_c_backprop, weights_backprop list,
    biases_backprop list) for L = Σ output⊙output_backprop + Σ output_h⊙output_h_backprop
    + Σ output_c⊙output_c_backprop.  Any of the three backprops may be None (zero); output_backprop
    on inactive steps (t ≥ len) is ignored; input_backprop is 0 there."""
    run = _Run(input, input_h, input_c, sequence_lengths, rnn_mode, input_mode, direction, num_proj,
               time_major, dropout_masks)
    cfg = run.cfg
    L, D, R = cfg.L, cfg.D, cfg.R
    layers = _unpack(cfg, weights, biases)
    _, _, _, caches = _forward(run, layers)
    T, N = run.T, run.N
    if output_backprop is None:
        dY = np.zeros((T, N, D * R))
    else:
        dY = np.asarray(output_backprop, dtype=np.float64)
        dY = dY if run.time_major else dY.transpose(1, 0, 2)
        if dY.shape != (T, N, D * R):
            raise ValueError(f"output_backprop has time-major shape {dY.shape}, "
                             f"expected {(T, N, D * R)}")
    if output_h_backprop is None:
        dhT = np.zeros_like(run.h0)
    else:
        dhT = np.asarray(output_h_backprop, dtype=np.float64)
    if run.is_lstm and output_c_backprop is not None and np.size(output_c_backprop):
        dcT = np.asarray(output_c_backprop, dtype=np.float64)
    else:
        dcT = np.zeros_like(run.c0) if run.is_lstm else None
    dh0 = np.zeros_like(run.h0)
    dc0 = np.zeros_like(run.c0) if run.is_lstm else None
    grads = [None] * (L * D)
    for l in range(L - 1, -1, -1):
        inp, layer_cache = caches[l]
        dX = np.zeros_like(inp)
        for d in range(D):
            k = l * D + d
            dy = dY[..., d * R:(d + 1) * R] * run.active
            dc_in = dcT[k] if run.is_lstm else None
            dx, dh_k, dc_k, grads[k] = _dir_backward(run, layers[k], inp, layer_cache[d], dy,
                                                     dhT[k], dc_in, d)
            dX += dx
            dh0[k] = dh_k
            if run.is_lstm:
                dc0[k] = dc_k
        dY = dX * run.masks[l - 1] if (l > 0 and run.masks) else dX
    dW, dB = [], []
    for g in grads:
        if g["W"] is not None:
            dW += g["W"]
        dW += g["R"]
        if g["Wp"] is not None:
            dW.append(g["Wp"])
        dB += g["bW"] + g["bR"]
    return run.to_layout(dY), dh0, (dc0 if run.is_lstm else _empty()), dW, dB


def cudnn_rnn_forward(input, input_h, input_c, params, sequence_lengths=None, *, rnn_mode="lstm",
                      input_mode="linear_input", direction="unidirectional", num_proj=0,
                      time_major=True, dropout_masks=None, device=None):
    """-> (output, output_h, output_c) from the flat ``params`` (``canonical_to_params`` layout)."""
    kw = dict(rnn_mode=rnn_mode, input_mode=input_mode, direction=direction, num_proj=num_proj)
    cfg = _Run(input, input_h, input_c, None, rnn_mode, input_mode, direction, num_proj,
               time_major, None).cfg
    w, b = params_to_canonical(cfg.L, cfg.H, cfg.I, params, **kw)
    return cudnn_rnn_forward_canonical(input, input_h, input_c, w, b, sequence_lengths,
                                       time_major=time_major, dropout_masks=dropout_masks, **kw)


def cudnn_rnn_backward(input, input_h, input_c, params, sequence_lengths, output_backprop,
                       output_h_backprop, output_c_backprop, *, rnn_mode="lstm",
                       input_mode="linear_input", direction="unidirectional", num_proj=0,
                       time_major=True, dropout_masks=None, device=None):
    """-> (input_backprop, input_h_backprop, input_c_backprop, params_backprop) — the API's
    backprop outputs; params_backprop is flat, in the layout of ``canonical_to_params``."""
    kw = dict(rnn_mode=rnn_mode, input_mode=input_mode, direction=direction, num_proj=num_proj)
    cfg = _Run(input, input_h, input_c, None, rnn_mode, input_mode, direction, num_proj,
               time_major, None).cfg
    w, b = params_to_canonical(cfg.L, cfg.H, cfg.I, params, **kw)
    dx, dh, dc, dw, db = cudnn_rnn_backward_canonical(
        input, input_h, input_c, w, b, sequence_lengths, output_backprop, output_h_backprop,
        output_c_backprop, time_major=time_major, dropout_masks=dropout_masks, **kw)
    return dx, dh, dc, canonical_to_params(cfg.L, cfg.H, cfg.I, dw, db, **kw)
