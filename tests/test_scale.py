"""Scale and failure (pitfalls A9, A17, B10, C11, C16, D5, D9).

* **Long sequences**: T = 10 000 steps (cuDNN fails above 65 535, MPS gradients went wrong past
  32 768 elements) forward and backward, against the float64 references.
* **Wide batches**: N = 513 (MIOpen was wrong above 100 and failed above ~583; 513 is one row
  past a multiple of every row block).
* **Too large for the device**: a request whose buffers exceed the device's largest allocation
  or its global memory raises ``rc.UnsupportedError`` naming the bytes needed, before anything
  is allocated (instead of OpenCL's ``INVALID_BUFFER_SIZE`` / ``MEM_OBJECT_ALLOCATION_FAILURE``).
* **No platform**: ``rc.DeviceNotFoundError`` with the install hint, from any op.
* **Past 2^31 elements** (opt-in, ``slow``; needs a device with ≥ 12 GiB per allocation): rows
  whose element offsets exceed 2^31 are right, so no kernel index wraps in 32 bits.

The unwritable cache directory (one ``CacheWarning``, in-memory caching) and kernel build
failures (``BuildError`` with device, options and the full log) are tested at the program layer
in ``tests/test_programs.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import pyrnn_cl as rc
from pyrnn_cl import _arrays, devices
from reference import cudnn_ref as C
from reference import mps_ref as M

F32 = np.float32


def _r(rng, *shape, scale=0.5, dtype=F32):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _close(ours, want, what, rtol=2e-4, atol=2e-5):
    np.testing.assert_allclose(np.asarray(ours, np.float64), want, rtol=rtol, atol=atol,
                               err_msg=what)


# ---- long sequences -------------------------------------------------------------------------

def test_lstm_ten_thousand_steps(device):
    """T = 10 000, one direction, float32: every step of h and c, and every gradient, against
    the float64 reference."""
    rng = np.random.default_rng(0)
    T, N, I, H = 10_000, 3, 3, 5
    a = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, 4 * H, H, scale=0.4),
             input_weight=_r(rng, 4 * H, I, scale=0.4), bias=_r(rng, 4 * H, scale=0.2),
             init_state=_r(rng, N, H), init_cell=_r(rng, N, H))
    desc = rc.LSTMDescriptor(training=True)
    h, c, z = rc.lstm(**a, descriptor=desc, device=device)
    want_h, want_c = M.lstm(**a, descriptor=desc)[:2]
    _close(h, want_h, "h")
    _close(c, want_c, "c")
    dy, dhn = _r(rng, T, N, H, scale=0.1), _r(rng, N, H)
    kw = {k: a[k] for k in ("input_weight", "bias", "init_state", "init_cell")}
    got = rc.lstm_gradients(a["source"], a["recurrent_weight"], dy, z, c, **kw,
                            state_gradient=dhn, descriptor=desc, device=device)
    want = M.lstm_gradients(a["source"], a["recurrent_weight"], dy, None, None, **kw,
                            state_gradient=dhn, descriptor=desc)
    names = ["d_source", "d_recurrent_weight", "d_input_weight", "d_bias", "d_init_state",
             "d_init_cell"]
    for name, g, w in zip(names, got, want):
        scale = max(1.0, float(np.max(np.abs(w))))   # sums over 10 000 steps: relative to size
        _close(np.asarray(g) / scale, w / scale, name, rtol=1e-3, atol=1e-4)


def test_cudnn_gru_ten_thousand_steps_with_lengths(device):
    """cuDNN-dialect GRU, T = 10 000, rows of lengths T, 1 and 6 001, time-major: outputs, final
    states and backprop against ``cudnn_ref``."""
    rng = np.random.default_rng(1)
    T, N, I, H = 10_000, 3, 2, 3
    kw = dict(rnn_mode="gru")
    params = _r(rng, rc.cudnn_rnn_params_size(1, H, I, **kw), scale=0.4)
    x, h0 = _r(rng, T, N, I), _r(rng, 1, N, H)
    lens = np.array([T, 1, 6001], np.int32)
    y, hn, _, res, host = rc.cudnn_rnn(x, h0, None, params, lens, **kw, device=device)
    ry, rh, _ = C.cudnn_rnn_forward(x, h0, None, params, lens, **kw)
    _close(y, ry, "output")
    _close(hn, rh, "output_h")
    assert not np.any(y[1:, 1]) and not np.any(y[6001:, 2]), "zeros past each length"
    dy = _r(rng, T, N, H, scale=0.1)
    got = rc.cudnn_rnn_backprop(x, h0, None, params, lens, y, hn, None, dy, None, None, res,
                                host, **kw, device=device)
    want = C.cudnn_rnn_backward(x, h0, None, params, lens, dy, None, None, **kw)
    for name, g, w in zip(("input_backprop", "input_h_backprop", "params_backprop"),
                          (got[0], got[1], got[3]), (want[0], want[1], want[3])):
        scale = max(1.0, float(np.max(np.abs(w))))
        _close(np.asarray(g) / scale, w / scale, name, rtol=1e-3, atol=1e-4)


# ---- wide batches ---------------------------------------------------------------------------

@pytest.mark.parametrize("H", [3, 33])
def test_batch_513(device, H):
    """N = 513 rows (one past 512): bidirectional cuDNN LSTM forward + backprop and the MPS GRU
    gradients, against the references."""
    rng = np.random.default_rng(2)
    T, N, I = 3, 513, 5
    kw = dict(rnn_mode="lstm", direction="bidirectional")
    params = _r(rng, rc.cudnn_rnn_params_size(2, H, I, **kw), scale=0.3)
    x, h0, c0 = _r(rng, T, N, I), _r(rng, 4, N, H), _r(rng, 4, N, H)
    lens = rng.integers(0, T + 1, N).astype(np.int32)
    y, hn, cn, res, host = rc.cudnn_rnn(x, h0, c0, params, lens, **kw, device=device)
    for name, g, w in zip(("output", "output_h", "output_c"), (y, hn, cn),
                          C.cudnn_rnn_forward(x, h0, c0, params, lens, **kw)):
        _close(g, w, name)
    dy, dh = _r(rng, *y.shape), _r(rng, *hn.shape)
    got = rc.cudnn_rnn_backprop(x, h0, c0, params, lens, y, hn, cn, dy, dh, None, res, host,
                                **kw, device=device)
    for name, g, w in zip(("dx", "dh0", "dc0", "dparams"), got,
                          C.cudnn_rnn_backward(x, h0, c0, params, lens, dy, dh, None, **kw)):
        _close(g, w, name, rtol=1e-3, atol=1e-4)
    g = dict(source=_r(rng, T, N, 3 * H), recurrent_weight=_r(rng, 3 * H, H),
             init_state=_r(rng, N, H))
    desc = rc.GRUDescriptor(training=True, reset_after=True, flip_z=True)
    h, z = rc.gru(**g, descriptor=desc, device=device)
    _close(h, M.gru(**g, descriptor=desc)[0], "gru h")
    dy = _r(rng, T, N, H)
    got = rc.gru_gradients(g["source"], g["recurrent_weight"], dy, z, h,
                           init_state=g["init_state"], descriptor=desc, device=device)
    want = M.gru_gradients(g["source"], g["recurrent_weight"], dy, None, None,
                           init_state=g["init_state"], descriptor=desc)
    for k, (x1, w1) in enumerate(zip(got, want)):
        _close(x1, w1, f"gru gradient {k}", rtol=1e-3, atol=1e-4)


# ---- too large for the device ---------------------------------------------------------------

def _limits(device):
    glob, alloc = _arrays._device_limits(device)
    if not glob or not alloc:
        pytest.skip(f"{device.info.describe()} does not report its memory limits")
    return glob, alloc


def test_request_above_device_memory_names_the_bytes(device):
    """An LSTM whose gate buffer ``[T, N, 4H]`` alone exceeds the largest allocation: a clear
    ``UnsupportedError`` with the bytes needed, raised before the buffer is allocated."""
    from pyrnn_cl.programs import launch_count

    glob, alloc = _limits(device)
    N, H = 1000, 256
    T = alloc // (N * 4 * H * 4) + 2                  # gx = T*N*4H floats > the allocation limit
    rng = np.random.default_rng(3)
    x = np.ones((T, N, 1), F32)                       # small: T*N floats
    before = launch_count()
    with pytest.raises(rc.UnsupportedError) as info:
        rc.lstm(x, _r(rng, 4 * H, H), _r(rng, 4 * H, 1), device=device)
    msg = str(info.value)
    need = T * N * 4 * H * 4
    assert f"{need} bytes" in msg and str(alloc) in msg and f"T={T}" in msg, msg
    assert launch_count() == before
    # a host array too large for the device, in a layer whose own buffers fit (I > 4H), is
    # refused before it is copied (no host copy of the broadcast view is attempted)
    T3, N3, H3 = 1024, 1024, 16
    I3 = alloc // (T3 * N3 * 4) + 1
    huge = np.broadcast_to(np.float32(1), (T3, N3, I3))
    with pytest.raises(rc.UnsupportedError,
                       match=f"source: needs a buffer of {huge.size * 4} bytes"):
        rc.lstm(huge, _r(rng, 4 * H3, H3), _r(rng, 4 * H3, I3), device=device)
    # the cuDNN dialect's reserve space (T*N*(G*H + H + H) per layer)
    kw = dict(rnn_mode="lstm")
    size = rc.cudnn_rnn_params_size(1, H, 1, **kw)
    T2 = alloc // (N * 6 * H * 4) + 2
    with pytest.raises(rc.UnsupportedError, match="bytes"):
        rc.cudnn_rnn(np.ones((T2, N, 1), F32), np.zeros((1, N, H), F32),
                     np.zeros((1, N, H), F32), np.zeros(size, F32), device=device)


def test_refused_request_copies_nothing(device, monkeypatch):
    """A request too large for the device is refused by the engine's memory check before any
    input is made contiguous or copied to the device, in every dialect, forward and gradients:
    the inputs are stride-0 broadcast views (a host copy would need gigabytes) and
    ``Call.dev``, the one path that copies an input, fails on anything larger than a weight."""
    from pyrnn_cl import layout

    glob, alloc = _limits(device)
    N, H, I = 1000, 16, 1
    T = max(glob, alloc) // (N * 4 * H * 4) + 2        # gx [T, N, 4H] above both limits
    copied = []
    dev = _arrays.Call.dev

    def no_big_copy(self, name, a, shape=None):
        if isinstance(a, np.ndarray) and a.size > 4 * H * (H + I) + 4 * H:
            copied.append(name)
            raise AssertionError(f"{name} ({a.size} elements) copied before the memory check")
        return dev(self, name, a, shape)

    monkeypatch.setattr(_arrays.Call, "dev", no_big_copy)

    def big(*shape):
        return np.broadcast_to(np.float32(0.5), shape)

    small = np.full((4 * H, H), 0.1, F32)
    calls = {
        "lstm": lambda: rc.lstm(big(T, N, I), small, np.ones((4 * H, I), F32), device=device),
        "lstm_gradients": lambda: rc.lstm_gradients(
            big(T, N, I), small, big(T, N, H), big(T, N, 4 * H), big(T, N, H),
            np.ones((4 * H, I), F32), descriptor=rc.LSTMDescriptor(training=True),
            device=device),
        "gru": lambda: rc.gru(big(T, N, 3 * H), np.full((3 * H, H), 0.1, F32),
                              device=device),
        "block_lstm": lambda: rc.block_lstm(
            T, big(T, N, I), big(N, H), big(N, H), np.ones((I + H, 4 * H), F32),
            *[np.zeros(H, F32)] * 3, np.zeros(4 * H, F32), device=device),
        "block_lstm_grad": lambda: rc.block_lstm_grad(
            T, big(T, N, I), big(N, H), big(N, H), np.ones((I + H, 4 * H), F32),
            *[np.zeros(H, F32)] * 3, np.zeros(4 * H, F32), *[big(T, N, H)] * 9,
            device=device),
    }
    size = rc.cudnn_rnn_params_size(1, H, I, rnn_mode="lstm")
    cudnn_in = (big(T, N, I), np.zeros((1, N, H), F32), np.zeros((1, N, H), F32),
                np.zeros(size, F32))
    calls["cudnn_rnn"] = lambda: rc.cudnn_rnn(*cudnn_in, device=device)
    lay = layout.make_layout(1, H, I, rnn_mode="lstm")
    host = layout.host_signature(lay, 4, False, 0.0, 0, 0)
    calls["cudnn_rnn_backprop"] = lambda: rc.cudnn_rnn_backprop(
        *cudnn_in, None, big(T, N, H), np.zeros((1, N, H), F32), np.zeros((1, N, H), F32),
        big(T, N, H), None, None, big(lay.reserve_size(T, N, False)), host, device=device)
    for op, call in calls.items():
        with pytest.raises(rc.UnsupportedError, match=r"needs .*GiB") as info:
            call()
        assert f"T={T}" in str(info.value), (op, str(info.value))
        assert not copied, (op, copied)


def test_check_memory_global_limit(device):
    """Buffers each below the allocation limit but together above the global memory."""
    glob, alloc = _limits(device)
    k = glob // alloc + 1
    with pytest.raises(rc.UnsupportedError, match=f"needs {k * alloc} bytes .* global memory"):
        _arrays.check_memory(device, "test", [alloc] * k)
    _arrays.check_memory(device, "test", [alloc // 2, alloc // 4])    # fits: no error


# ---- no platform ----------------------------------------------------------------------------

def test_missing_platform_gives_install_hint(monkeypatch):
    monkeypatch.setattr(devices, "_enumerate", lambda: [])
    for var in ("PYRNN_CL_DEVICE", "PYOPENCL_CTX"):
        monkeypatch.delenv(var, raising=False)
    devices.clear_cache()
    try:
        rng = np.random.default_rng(4)
        with pytest.raises(rc.DeviceNotFoundError) as info:
            rc.gru(_r(rng, 2, 2, 6), _r(rng, 6, 2))
        assert devices.INSTALL_HINT in str(info.value)
        assert 'pip install "pyrnn_cl[pocl]"' in str(info.value)
        assert rc.devices.list_devices() == []
    finally:
        monkeypatch.undo()
        devices.clear_cache()


# ---- past 2^31 elements (opt-in) ------------------------------------------------------------

@pytest.mark.slow
def test_offsets_past_two_to_the_31(device):
    """A layer whose gate buffer holds more than 2^31 elements (8.6 GB in float32): the rows
    stored past element 2^31 are right (compared row by row with the reference), so no kernel
    index wraps. Needs a device allowing one ~9 GB allocation; skipped otherwise."""
    glob, alloc = _limits(device)
    T, N, I, H = 33, 2 ** 16 + 1, 1, 256               # gx: T*N*4H > 2^31 elements
    need = T * N * 4 * H * 4
    if alloc < need or glob < 2.2 * need:
        pytest.skip(f"needs one {need / 2**30:.1f} GiB allocation; {device.info.name} allows "
                    f"{alloc / 2**30:.1f} GiB")
    assert T * N * 4 * H > 2 ** 31
    rng = np.random.default_rng(5)
    x = _r(rng, T, N, I)
    R, W = _r(rng, 4 * H, H, scale=0.1), _r(rng, 4 * H, I)
    h = rc.lstm(x, R, W, device=device)[0]
    for n in (0, N // 2, N - 1):                        # row N-1 at t = T-1: offset ~ 2^31
        want = M.lstm(x[:, n:n + 1], R, W)[0]
        _close(h[:, n:n + 1], want, f"row {n}")
