"""NumPy in, NumPy out on a device whose memory is the host's (PoCL's CPU devices,
``VendorProfile.shares_host_memory``): the weights are read where they lie (no upload) and the
results are mapped (no read-back copy). Held against the same calls on device arrays, which
take neither shortcut, and against what a user may do with the arrays afterwards."""

from __future__ import annotations

import gc

import numpy as np
import pyopencl.array as cla
import pytest

import pyrnn_cl as rc
from helpers import fuzz as FZ
from pyrnn_cl import _arrays
from pyrnn_cl._arrays import Call, shares_host_memory


@pytest.fixture
def shared(device):
    if not shares_host_memory(device):
        pytest.skip(f"{device.info.name}: memory not shared with the host")
    return device


def _lstm_inputs(seed=0, T=7, N=3, I=5, H=11):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((T, N, I)).astype(np.float32),
            "R": (0.3 * rng.standard_normal((4 * H, H))).astype(np.float32),
            "W": (0.3 * rng.standard_normal((4 * H, I))).astype(np.float32),
            "b": (0.1 * rng.standard_normal(4 * H)).astype(np.float32)}


def _on_device(device, d):
    return {k: cla.to_device(device.queue, v) for k, v in d.items()}


def test_numpy_results_mapped_and_equal(shared):
    """Forward and gradients with NumPy arrays give the device-array path's values exactly;
    the results are the device's memory mapped (their base is a pyopencl MemoryMap), writable,
    and stay valid after the buffers' other references are gone."""
    d = _lstm_inputs()
    desc = rc.LSTMDescriptor(training=True)
    outs = rc.lstm(d["x"], d["R"], d["W"], d["b"], descriptor=desc, device=shared)
    dd = _on_device(shared, d)
    want = [a.get() for a in rc.lstm(dd["x"], dd["R"], dd["W"], dd["b"], descriptor=desc)]
    for got, ref in zip(outs, want):
        assert type(got.base).__name__ == "MemoryMap"
        np.testing.assert_array_equal(got, ref)
    gc.collect()
    for got, ref in zip(outs, want):
        np.testing.assert_array_equal(got, ref)
    outs[0][...] = 0            # the caller's to change
    h, c, z = rc.lstm(d["x"], d["R"], d["W"], d["b"], descriptor=desc, device=shared)
    np.testing.assert_array_equal(h, want[0])
    dy = np.ones_like(h)
    grads = rc.lstm_gradients(d["x"], d["R"], dy, z, c, d["W"], d["b"], device=shared)
    dgrads = rc.lstm_gradients(dd["x"], dd["R"], cla.to_device(shared.queue, dy),
                               cla.to_device(shared.queue, z), cla.to_device(shared.queue, c),
                               dd["W"], dd["b"])
    for got, ref in zip(grads, dgrads):
        np.testing.assert_array_equal(got, ref.get())


def test_weights_read_in_place_only_during_the_call(shared):
    """A result never changes when the caller later edits the weight arrays the call read in
    place, and the next call sees the edit; the cuDNN dialect's params likewise."""
    d = _lstm_inputs(1)
    y1 = rc.lstm(d["x"], d["R"], d["W"], d["b"], device=shared)[0]
    keep = y1.copy()
    d["R"] *= -1.5
    d["W"][:] = 0
    y2 = rc.lstm(d["x"], d["R"], d["W"], d["b"], device=shared)[0]
    np.testing.assert_array_equal(y1, keep)
    assert not np.allclose(y2, keep)
    np.testing.assert_array_equal(y2, rc.lstm(*[cla.to_device(shared.queue, d[k])
                                                for k in "xRWb"])[0].get())
    L, H, I = 1, 11, 5
    params = np.random.default_rng(2).uniform(
        -0.3, 0.3, rc.cudnn_rnn_params_size(L, H, I, rnn_mode="gru")).astype(np.float32)
    h0 = np.zeros((1, 3, H), np.float32)
    out1 = rc.cudnn_rnn(d["x"], h0, None, params, rnn_mode="gru", device=shared)[0]
    keep = out1.copy()
    params[:] = 0
    out2 = rc.cudnn_rnn(d["x"], h0, None, params, rnn_mode="gru", device=shared)[0]
    np.testing.assert_array_equal(out1, keep)
    np.testing.assert_array_equal(out2, np.zeros_like(out2))    # zero weights and biases


def test_a_call_holds_what_it_reads_in_place(shared, monkeypatch):
    """The host arrays a call wraps are held by the call, and dropping a call (as an exception
    does) waits for its kernels first: they must not read memory the caller then frees."""
    a = np.ones((4, 4), np.float32)
    call = Call({"x": a}, shared)
    wrapped = call.stored("x", a)
    assert call._in_place == [wrapped] and wrapped.base_data.hostbuf is not None
    finished = []
    monkeypatch.setattr(_arrays.Call, "__del__",
                        lambda self, original=_arrays.Call.__del__: (finished.append(1),
                                                                    original(self)))
    del call
    gc.collect()
    assert finished


def _float_arrays(case):
    """The floating NumPy arguments of ``case`` by name (``name[i]`` for those in a list)."""
    out = {}
    for n, a in case.args.items():
        value = a.value if isinstance(a, FZ.Arg) else a
        items = enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]
        for i, v in items:
            if isinstance(v, np.ndarray) and v.dtype.kind == "f":
                out[n if i is None else f"{n}[{i}]"] = v
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_every_op_reads_numpy_inputs_in_place_and_leaves_them(shared, monkeypatch, dtype):
    """Every public op (the fuzzer's valid base call of each, two seeds): with NumPy in and
    out, no floating argument is copied to the device (each is read where it lies; 16-bit
    ones widen on the device from there), every argument holds the same bytes after the call,
    and the results equal those of the same call with every argument copied (in-place reading
    switched off)."""
    from pyrnn_cl.devices import set_default_device

    uploads = []
    real_upload = Call._upload

    def recording_upload(self, a, to):
        if np.dtype(to).kind == "f":
            uploads.append(a.shape)
        return real_upload(self, a, to)

    checked: set = set()
    set_default_device(shared)
    try:
        for op in sorted(FZ.OPS):
            for seed in (0, 1):
                case = FZ.OPS[op](np.random.default_rng([seed, 0]), dtype)
                if case.device_ok:
                    case.kwargs["device"] = shared
                before = {n: a.copy() for n, a in _float_arrays(case).items()}
                if not before:          # (the size queries)
                    continue
                checked.add(op)
                monkeypatch.setattr(Call, "_upload", recording_upload)
                del uploads[:]
                got = case.call()
                monkeypatch.undo()
                if op not in FZ._HOST_ONLY:
                    assert not uploads, f"{op}: uploaded host arrays of shapes {uploads}"
                for n, a in _float_arrays(case).items():
                    np.testing.assert_array_equal(a, before[n], err_msg=f"{op}: {n} changed")
                monkeypatch.setattr(Call, "_reads_in_place", lambda self, a, dtype: False)
                want = case.call()
                monkeypatch.undo()
                got, want = (r if isinstance(r, (tuple, list)) else (r,) for r in (got, want))
                assert len(got) == len(want), op
                for g, w in zip(got, want):
                    for gi, wi in zip(*(x if isinstance(x, (tuple, list)) else (x,)
                                        for x in (g, w))):
                        np.testing.assert_array_equal(gi, wi, err_msg=op)
    finally:
        set_default_device(None)
    assert set(FZ.OPS) - checked == {"cudnn_rnn_params_size", "cudnn_rnn_reserve_space_size"}


def test_arguments_off_the_usual_alignment_read_in_place(shared, monkeypatch):
    """NumPy arguments that start 4 bytes past a 16-byte boundary (a view one element into a
    buffer) are read in place and give the results of aligned copies, forward and gradients:
    the kernels need only the element's alignment."""
    def off_by_one(a):
        buf = np.empty(a.size + 1, a.dtype)
        view = buf[1:].reshape(a.shape)
        view[...] = a
        return view

    d = _lstm_inputs(5, T=9, N=5, I=7, H=13)
    odd = {k: off_by_one(v) for k, v in d.items()}
    assert all(v.ctypes.data % 16 != 0 for v in odd.values())
    desc = rc.LSTMDescriptor(training=True)
    monkeypatch.setattr(Call, "_upload", lambda self, a, to: pytest.fail(
        f"uploaded an array of shape {a.shape}"))
    got = rc.lstm(odd["x"], odd["R"], odd["W"], odd["b"], descriptor=desc, device=shared)
    want = rc.lstm(d["x"], d["R"], d["W"], d["b"], descriptor=desc, device=shared)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    dy = np.random.default_rng(6).standard_normal(want[0].shape).astype(np.float32)
    got = rc.lstm_gradients(odd["x"], odd["R"], off_by_one(dy), off_by_one(want[2]),
                            off_by_one(want[1]), odd["W"], odd["b"], device=shared)
    want = rc.lstm_gradients(d["x"], d["R"], dy, want[2], want[1], d["W"], d["b"],
                             device=shared)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_aliased_numpy_arguments(device):
    """Arguments that are views of one NumPy array (the weights sliced from one flat buffer,
    the same array as initial state and initial cell, the initial state a view of the input)
    give the results of separate copies, forward and gradients: each read where it lies on a
    device sharing the host's memory, each uploaded elsewhere."""
    shared = device
    T, N, I, H = 6, 3, 5, 7
    rng = np.random.default_rng(8)
    flat = (0.3 * rng.standard_normal(4 * H * (H + I) + 4 * H)).astype(np.float32)
    R = flat[:4 * H * H].reshape(4 * H, H)
    W = flat[4 * H * H:4 * H * (H + I)].reshape(4 * H, I)
    b = flat[4 * H * (H + I):]
    buf = rng.standard_normal(T * N * I + N * H).astype(np.float32)
    x = buf[:T * N * I].reshape(T, N, I)
    h = buf[T * N * I - N * H:T * N * I].reshape(N, H)     # overlaps the input's last step
    desc = rc.LSTMDescriptor(training=True)
    got = rc.lstm(x, R, W, b, init_state=h, init_cell=h, descriptor=desc, device=shared)
    copies = [a.copy() for a in (x, R, W, b, h, h)]
    want = rc.lstm(*copies[:4], init_state=copies[4], init_cell=copies[5], descriptor=desc,
                   device=shared)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    dy = rng.standard_normal(want[0].shape).astype(np.float32)
    got = rc.lstm_gradients(x, R, dy, want[2], want[1], W, b, init_state=h, init_cell=h,
                            descriptor=desc, device=shared)
    want = rc.lstm_gradients(*copies[:2], dy, want[2].copy(), want[1].copy(), *copies[2:4],
                             init_state=copies[4], init_cell=copies[5], descriptor=desc,
                             device=shared)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_read_only_numpy_arguments(device, tmp_path):
    """Read-only arrays (``writeable=False``) and read-only memory-mapped files
    (``np.load(..., mmap_mode="r")``) are valid arguments: read in place where the device's
    memory is the host's (nothing writes to them), uploaded elsewhere; the results equal those
    of writable copies, forward and gradients."""
    d = _lstm_inputs(9)
    frozen = {}
    for k, v in d.items():
        if k == "x":
            np.save(tmp_path / "x.npy", v)
            frozen[k] = np.load(tmp_path / "x.npy", mmap_mode="r")
        else:
            frozen[k] = v.copy()
            frozen[k].flags.writeable = False
    assert not any(v.flags.writeable for v in frozen.values())
    desc = rc.LSTMDescriptor(training=True)
    got = rc.lstm(frozen["x"], frozen["R"], frozen["W"], frozen["b"], descriptor=desc,
                  device=device)
    want = rc.lstm(d["x"], d["R"], d["W"], d["b"], descriptor=desc, device=device)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    dy = np.random.default_rng(10).standard_normal(want[0].shape).astype(np.float32)
    z, c = want[2].copy(), want[1].copy()
    for a in (dy, z, c):
        a.flags.writeable = False
    got = rc.lstm_gradients(frozen["x"], frozen["R"], dy, z, c, frozen["W"], frozen["b"],
                            device=device)
    want = rc.lstm_gradients(d["x"], d["R"], dy.copy(), z.copy(), c.copy(), d["W"], d["b"],
                             device=device)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
