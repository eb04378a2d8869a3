"""Determinism (pitfalls A22, A23, A24): on one device the same call gives bitwise-identical
results, dropout included, and backprop can be re-run from the same saved state.

Why it holds (README, "Reliability notes"): every kernel computes each output element in one
work-item with a fixed summation order (no atomics, no reductions whose order depends on
scheduling), the GEMM tiles and their k-loops are fixed by the shapes, and the cuDNN dialect's
dropout mask is a pure function of (seed, seed2, layer, step, row, unit) drawn with Philox
(``cl/dropout.cl``): no generator state between calls. Backprop only reads ``reserve_space``.
"""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import pyrnn_cl as rc
from pyrnn_cl import programs

F32 = np.float32


def _same(a, b, what):
    """Bitwise equality (NaN-safe: compares the bytes)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, what
    assert a.tobytes() == b.tobytes(), f"{what}: not bitwise identical " \
        f"(max |diff| {np.nanmax(np.abs(a.astype(float) - b.astype(float)))})"


def _all_same(xs, ys, what):
    assert len(xs) == len(ys)
    for k, (x, y) in enumerate(zip(xs, ys)):
        _same(x, y, f"{what} output {k}")


def _rng(seed=0):
    return np.random.default_rng(seed)


def _r(rng, *shape, scale=0.5, dtype=F32):
    return (rng.standard_normal(shape) * scale).astype(dtype)


T, N, I, H = 9, 5, 7, 11


def test_mps_forward_and_gradients_bitwise(device):
    rng = _rng(1)
    a = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, 2, 4 * H, H),
             input_weight=_r(rng, 8 * H, I), bias=_r(rng, 8 * H), init_state=_r(rng, N, 2 * H),
             init_cell=_r(rng, N, 2 * H), mask=rng.uniform(0.5, 1.5, (T, N, 2 * H)).astype(F32),
             peephole=_r(rng, 2, 4 * H))
    desc = rc.LSTMDescriptor(bidirectional=True, training=True, forget_gate_last=True)
    first = rc.lstm(**a, descriptor=desc, device=device)
    second = rc.lstm(**a, descriptor=desc, device=device)
    _all_same(first, second, "lstm")
    dy = _r(rng, T, N, 2 * H)
    h, c, z = first
    pos = (a["source"], a["recurrent_weight"], dy, z, c)
    kw = {k: a[k] for k in ("input_weight", "bias", "init_state", "init_cell", "mask",
                            "peephole")}
    g1 = rc.lstm_gradients(*pos, **kw, descriptor=desc, device=device)
    g2 = rc.lstm_gradients(*pos, **kw, descriptor=desc, device=device)
    _all_same(g1, g2, "lstm_gradients")
    # the same with device arrays in (results stay on the device) and after the in-process
    # program memo is dropped (programs come back from the disk cache or a rebuild)
    programs.clear_memo()
    q = device.queue
    d = {k: cla.to_device(q, v) for k, v in a.items()}
    third = rc.lstm(**d, descriptor=desc)
    _all_same([x.get() for x in third], first, "lstm (device arrays, fresh programs)")


def test_gru_and_tf_ops_bitwise(device):
    rng = _rng(2)
    g = dict(source=_r(rng, T, N, 3 * H), recurrent_weight=_r(rng, 3 * H, H),
             init_state=_r(rng, N, H), secondary_bias=_r(rng, H))
    desc = rc.GRUDescriptor(reset_after=True, training=True, reverse=True)
    _all_same(rc.gru(**g, descriptor=desc, device=device),
              rc.gru(**g, descriptor=desc, device=device), "gru")
    x = _r(rng, T, N, I)
    args = (x, _r(rng, N, H), _r(rng, N, H), _r(rng, I + H, 4 * H), _r(rng, H), _r(rng, H),
            _r(rng, H), _r(rng, 4 * H))
    out = rc.block_lstm(T - 2, *args, use_peephole=True, device=device)
    _all_same(out, rc.block_lstm(T - 2, *args, use_peephole=True, device=device), "block_lstm")
    grads = [_r(rng, T, N, H), _r(rng, T, N, H)]
    _all_same(rc.block_lstm_grad(T - 2, *args, *out, *grads, use_peephole=True, device=device),
              rc.block_lstm_grad(T - 2, *args, *out, *grads, use_peephole=True, device=device),
              "block_lstm_grad")


def _cudnn(rng, mode="lstm", L=3, D=2, P=0):
    kw = dict(rnn_mode=mode, direction="bidirectional" if D == 2 else "unidirectional",
              num_proj=P)
    size = rc.cudnn_rnn_params_size(L, H, I, **kw)
    R = P or H
    args = [_r(rng, T, N, I), _r(rng, L * D, N, R), _r(rng, L * D, N, H) if mode == "lstm"
            else None, _r(rng, size, scale=0.3), np.array([T, 3, 0, 7, 5], np.int32)]
    return args, kw


@pytest.mark.parametrize("mode,P", [("lstm", 5), ("gru", 0)])
def test_cudnn_dropout_forward_and_repeated_backprop(device, mode, P):
    """Dropout with fixed seeds: the same mask every call (bitwise-identical outputs); backprop
    called twice with the same reserve gives identical gradients and leaves the reserve
    untouched (A22); another seed gives another mask (A23)."""
    rng = _rng(3)
    args, kw = _cudnn(rng, mode, P=P)
    kw.update(dropout=0.4, seed=1234, seed2=99)
    first = rc.cudnn_rnn(*args, **kw, device=device)
    second = rc.cudnn_rnn(*args, **kw, device=device)
    _all_same(first, second, "cudnn_rnn with dropout")
    y, hn, cn, res, host = first
    res_before = res.copy()
    up = [_r(rng, *y.shape), _r(rng, *hn.shape), _r(rng, *cn.shape) if mode == "lstm" else None]
    b1 = rc.cudnn_rnn_backprop(*args, y, hn, cn, *up, res, host, **kw, device=device)
    b2 = rc.cudnn_rnn_backprop(*args, y, hn, cn, *up, res, host, **kw, device=device)
    _all_same(b1, b2, "cudnn_rnn_backprop (same reserve twice)")
    _same(res, res_before, "reserve_space after backprop")
    # the dropout really acts (a different seed changes the output), and with new seeds
    # the same call is again reproducible
    other = rc.cudnn_rnn(*args, **dict(kw, seed=1235), device=device)
    assert not np.array_equal(other[0], y), "another seed must give another mask"
    _same(other[0], rc.cudnn_rnn(*args, **dict(kw, seed=1235), device=device)[0], "seed 1235")
    assert np.array_equal(rc.cudnn_rnn(*args, **dict(kw, dropout=0.0), device=device)[0],
                          rc.cudnn_rnn(*args, **dict(kw, dropout=0.0, seed=7),
                                       device=device)[0]), "p = 0: the seed must not matter"


def test_cudnn_device_arrays_backprop_rerun(device):
    """Device-array reserve: backprop three times from the same reserve, identical results."""
    rng = _rng(4)
    args, kw = _cudnn(rng, "rnn_tanh", L=2, D=1)
    q = device.queue
    dargs = [cla.to_device(q, a) if a is not None else None for a in args[:4]] + [args[4]]
    y, hn, cn, res, host = rc.cudnn_rnn(*dargs, **kw, dropout=0.5, seed=5)
    dy = cla.to_device(q, _r(rng, *y.shape))
    runs = [rc.cudnn_rnn_backprop(*dargs, y, hn, cn, dy, None, None, res, host, **kw,
                                  dropout=0.5, seed=5) for _ in range(3)]
    for k in (1, 2):
        _all_same([np.asarray(x.get()) for x in runs[k]], [x.get() for x in runs[0]],
                  f"backprop run {k}")
