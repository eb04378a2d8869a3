"""The networks' weights: PyTorch-layout float32 weights (shared by both sides, so they compute
the same network) and their MPSGraph-dialect arrays."""

from __future__ import annotations

import math

import numpy as np

from .configs import BenchConfig


def _make_weights(cfg: BenchConfig, seed: int = 0):
    """PyTorch-layout float32 weights ``[(W_ih, W_hh, b_ih, b_hh) per layer per direction]``,
    uniform in +-1/sqrt(H) like ``torch.nn.LSTM``'s default initialisation."""
    rng = np.random.default_rng(seed)
    k = 1.0 / math.sqrt(cfg.H)
    GH = cfg.G * cfg.H
    out = []
    for width in cfg.layer_inputs():
        for _ in range(cfg.directions):
            out.append(tuple(rng.uniform(-k, k, shape).astype(np.float32)
                             for shape in ((GH, width), (GH, cfg.H), (GH,), (GH,))))
    return out


def _mps_layer_arrays(cfg: BenchConfig, weights, layer: int):
    """MPSGraph arguments of one layer from PyTorch weights: ``(R, W, b, secondary_bias)``.

    LSTM: PyTorch's (i, f, g, o) is MPSGraph's default (i, f, z, o). GRU: PyTorch's (r, z, n)
    with ``reset_gate_first``, ``reset_after`` and ``flip_z``; ``b_hn`` becomes the secondary
    bias, the other hidden biases fold into ``b``. Vanilla: ``b = b_ih + b_hh``.
    """
    D, H = cfg.directions, cfg.H
    parts = weights[layer * D:(layer + 1) * D]
    Rs, Ws, bs, b2s = [], [], [], []
    for w_ih, w_hh, b_ih, b_hh in parts:
        Rs.append(w_hh)
        Ws.append(w_ih)
        if cfg.cell == "gru":
            b = b_ih.copy()
            b[:2 * H] += b_hh[:2 * H]
            bs.append(b)
            b2s.append(b_hh[2 * H:])
        else:
            bs.append(b_ih + b_hh)
    R = np.stack(Rs) if D == 2 else Rs[0]
    return (np.ascontiguousarray(R), np.ascontiguousarray(np.concatenate(Ws)),
            np.concatenate(bs), np.concatenate(b2s) if b2s else None)
