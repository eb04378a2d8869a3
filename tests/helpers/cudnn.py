"""cuDNN dialect (API.md §3) test helpers: the inputs of one call, forward + backprop of the
library with the same arguments, random upstream gradients, relative comparison.

Default sizes ``T_, N_, I_, H_, P_`` are pairwise different (transpositions show).
"""

from __future__ import annotations

import numpy as np

import pyrnn_cl as rc
from reference import cudnn_ref as ref

T_, N_, I_, H_, P_ = 5, 3, 7, 4, 3


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def problem(mode, L, D, P=0, *, I=I_, H=H_, T=T_, N=N_, time_major=True, seed=0,
            input_mode="linear_input"):
    """float64 inputs of one call: x, h0, c0 (None unless LSTM), params, and the attrs."""
    rng = np.random.default_rng(seed)
    kw = dict(rnn_mode=mode, input_mode=input_mode, num_proj=P,
              direction="bidirectional" if D == 2 else "unidirectional")
    params = rng.uniform(-0.6, 0.6, ref.params_size(L, H, I, **kw))
    x = rng.standard_normal((T, N, I) if time_major else (N, T, I))
    h0 = rng.standard_normal((L * D, N, P or H))
    c0 = rng.standard_normal((L * D, N, H)) if mode == "lstm" else None
    return x, h0, c0, params, kw


def cast(dtype, *arrays):
    return [None if a is None else np.asarray(a, dtype) for a in arrays]


def fwd_bwd(device, x, h0, c0, params, lens, up, kw, dtype=np.float64, **extra):
    """Forward + backprop of the library; ``up`` = (dy, dh, dc) with None for absent."""
    xs, h0s, c0s, ps = cast(dtype, x, h0, c0, params)
    out = rc.cudnn_rnn(xs, h0s, c0s, ps, lens, device=device, **kw, **extra)
    ups = cast(dtype, *up)
    grads = rc.cudnn_rnn_backprop(xs, h0s, c0s, ps, lens, out[0], out[1], out[2], *ups, out[3],
                                  out[4], device=device, **kw, **extra)
    return out, grads


def upstream(out_shapes, absent, seed=1):
    rng = np.random.default_rng(seed)
    return [None if (i in absent or s is None) else rng.standard_normal(s)
            for i, s in enumerate(out_shapes)]


def assert_rel(ours, theirs, tol, what):
    err = rel(ours, theirs)
    assert err <= tol, f"{what}: rel error {err:.3e} > {tol:.0e}"
    return err


def poison_new_arrays(monkeypatch):
    """Every array an op makes with ``Call.empty`` from now on starts filled with NaN (a
    result element left unwritten then shows)."""
    real_empty = rc._arrays.Call.empty
    monkeypatch.setattr(rc._arrays.Call, "empty",
                        lambda self, shape, dtype=None: rc._arrays.fill(
                            real_empty(self, shape, dtype), np.nan))
