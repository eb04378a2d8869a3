"""TensorFlow block ops (API.md §2) test helpers: inputs of the LSTM ops, BlockLSTM(V2) forward
and gradient of the library and of ``tests/reference/tf_ref.py`` with the same arguments, and
the comparison ``max|got - want| <= tol * max(1, max|want|)``.

Default sizes ``T, N, I, H`` are pairwise different (transpositions show).
"""

from __future__ import annotations

import numpy as np

import pyrnn_cl as rc
from reference import tf_ref as TF

T, N, I, H = 5, 3, 7, 4  # noqa: E741
TOL64 = 1e-10
LSTM_ARGS = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")


def rng(seed):
    return np.random.default_rng(seed)


def max_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, f"shape {a.shape} != {b.shape}"
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def close(got, want, tol, what=""):
    """``max|got − want| ≤ tol · max(1, max|want|)`` for every pair; returns the max error."""
    worst = 0.0
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        err = max_err(g, w)
        scale = max(1.0, float(np.max(np.abs(w))) if np.size(w) else 0.0)
        assert err <= tol * scale, f"{what} output {k}: max err {err:.3e} (tol {tol * scale:.1e})"
        worst = max(worst, err)
    return worst


def lstm_inputs(t=T, n=N, i=I, h=H, seed=0, seq=True, scale=0.5):
    g = rng(seed)
    x = g.standard_normal((t, n, i) if seq else (n, i))
    return dict(x=x, cs_prev=g.standard_normal((n, h)), h_prev=g.standard_normal((n, h)) * 0.8,
                w=g.standard_normal((i + h, 4 * h)) * scale, wci=g.standard_normal(h) * 0.5,
                wcf=g.standard_normal(h) * 0.5, wco=g.standard_normal(h) * 0.5,
                b=g.standard_normal(4 * h) * scale)


def pick(d, names):
    return [d[k] for k in names]


def block_ops(v2):
    if v2:
        return rc.block_lstm_v2, rc.block_lstm_grad_v2, TF.block_lstm_v2, TF.block_lstm_grad_v2
    return rc.block_lstm, rc.block_lstm_grad, TF.block_lstm, TF.block_lstm_grad


def block_kw(v2, forget_bias, cell_clip, use_peephole):
    kw = dict(cell_clip=cell_clip, use_peephole=use_peephole)
    if not v2:
        kw["forget_bias"] = forget_bias
    return kw


def run_block(device, v2, n, p, kw, seed=11, dtype=np.float64):
    fn, gfn, rfn, rgfn = block_ops(v2)
    a = pick(p, LSTM_ARGS)
    out = fn(n, *a, **kw, device=device)
    ref = rfn(n, *a, **kw)
    g = rng(seed)
    cs_grad, h_grad = (g.standard_normal(p["x"].shape[:2] + (p["h_prev"].shape[1],))
                       .astype(dtype) for _ in range(2))
    fw = [o.astype(dtype) for o in ref]
    grads = gfn(n, *a, *fw, cs_grad, h_grad, use_peephole=kw["use_peephole"], device=device)
    gref = rgfn(n, *a, *fw, cs_grad, h_grad, use_peephole=kw["use_peephole"])
    return out, ref, grads, gref
