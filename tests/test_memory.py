"""Device memory of whole dialect calls: what grows with the sequence length.

The performance target (issue 8) bounds device allocations by the reserve space (the saved
forward values a training forward returns) plus a workspace of O(N·H·G) that does not grow with
T. These tests count every device array a call allocates (``conftest.track_device_arrays``;
inputs are device arrays uploaded before counting, so nothing is copied in) and compare the
peak for T = 6 and T = 60 with the backward chunked at 2 steps: beyond the call's own T-sized
results (the source gradient, the outputs, the reserve space) the peak must not grow, i.e.
there is no hidden sequence-long temporary (one would add its T·N·H-sized bytes at T = 60).
"""

from __future__ import annotations

import gc

import numpy as np
import pyopencl.array as cla
import pytest

import pyrnn_cl as rc
from helpers import mps as TM
from helpers import shapes as S
from helpers.device import fresh_allocations, override_tuning, track_device_arrays

N, I, H = 5, 3, 8
SHORT, LONG = 6, 60


def _random(rng, *shape, scale=1.0, device=None):
    """float32 normal values of ``shape`` (times ``scale``), on ``device`` when given."""
    a = (scale * rng.standard_normal(shape)).astype(np.float32)
    return a if device is None else cla.to_device(device.queue, a)


def _on_device(device, arrays):
    return {k: (cla.to_device(device.queue, np.ascontiguousarray(v)) if v is not None else None)
            for k, v in arrays.items()}


@pytest.mark.parametrize("kind", ["lstm", "rnn", "gru"])
def test_mps_gradient_grows_only_by_its_source_gradient(device, monkeypatch, kind):
    """MPSGraph gradient ops (bidirectional, input weight, mask): nothing grows with T but
    the source gradient. The LSTM and RNN gradients are not given
    h; the engine computes h[t-1] per chunk from the saved gates instead of rebuilding the
    h sequence."""
    override_tuning(device, monkeypatch, REC_BWD_ROWS=2 * N)
    live = track_device_arrays(monkeypatch)
    extra = []
    for T in (SHORT, LONG):
        shape = S.Shape("mem", T=T, N=N, I=I, H=H)
        desc = TM.desc_of(kind, bidirectional=True, **TM.default_flags(kind), training=True)
        present = ("input_weight", "bias", "mask", "init_state") + (
            ("init_cell",) if kind == "lstm" else ())
        inputs = _on_device(device, S.layer_inputs(kind, shape, bidirectional=True, seed=5,
                                                   dtype=np.float32, present=present))
        saved = TM.forward(kind, inputs, TM.training_desc(kind, desc), device)
        dy, dhn, dcn = (None if a is None else cla.to_device(device.queue, a)
                        for a in TM.upstream(kind, T, N, H, 2, 7, np.float32))
        gc.collect()
        live.update(now=0, peak=0)
        out = TM.lib_gradients(kind, inputs, desc, device, dy, dhn, dcn, saved=saved)
        device.queue.finish()
        assert isinstance(out[0], cla.Array) and out[0].shape == (T, N, I)
        extra.append(live["peak"] - out[0].nbytes)     # beyond the source gradient
        del out
        gc.collect()
    assert extra[1] <= extra[0], extra


@pytest.mark.parametrize("mode,proj,dropout", [("lstm", 3, 0.4), ("gru", 0, 0.0),
                                               ("rnn_tanh", 0, 0.5)])
def test_cudnn_forward_and_backprop_grow_only_by_their_results(device, monkeypatch, mode, proj,
                                                                 dropout):
    """Two bidirectional layers (time-major). Training forward: nothing grows with T beyond
    the outputs and the reserve space: every layer's saved gates, outputs, cell states,
    pre-projection h and dropped inputs are written straight into their reserve parts (no
    copies beside it), and the next layer reads its input there. Backprop: nothing beyond
    its results and the one gradient passed between the layers; the reserve parts are read in
    place. Inference forward: nothing beyond its outputs and the reserve size of the training
    call."""
    override_tuning(device, monkeypatch, REC_BWD_ROWS=2 * N)
    L, D = 2, 2
    K = proj or H
    kw = dict(rnn_mode=mode, direction="bidirectional", num_proj=proj, dropout=dropout, seed=3)
    rng = np.random.default_rng(2)
    size = rc.cudnn_rnn_params_size(L, H, I, rnn_mode=mode, direction="bidirectional",
                                    num_proj=proj)
    params = _random(rng, size, scale=0.3, device=device)

    def arr(*shape):
        return _random(rng, *shape, device=device)

    def run(T, live):
        """Bytes beyond the results at the peak of the forward and of the backprop."""
        x, h0, c0 = arr(T, N, I), arr(L * D, N, K), arr(L * D, N, H)
        ups = arr(T, N, D * K), arr(L * D, N, K), arr(L * D, N, H)
        gc.collect()
        live.update(now=0, peak=0)
        out = rc.cudnn_rnn(x, h0, c0, params, **kw, device=device)
        device.queue.finish()
        assert out[3].size == rc.cudnn_rnn_reserve_space_size(L, H, I, T, N, **kw)
        fwd_extra = live["peak"] - sum(a.nbytes for a in out[:4])
        before = live["now"]
        live.update(peak=before)
        grads = rc.cudnn_rnn_backprop(x, h0, c0, params, None, *out[:3], *ups, *out[3:], **kw,
                                      device=device)
        device.queue.finish()
        assert grads[0].shape == (T, N, I)
        passed_down = T * N * D * K * 4      # layer 1's input gradient, layer 0's dy
        bwd_extra = live["peak"] - before - sum(g.nbytes for g in grads) - passed_down
        # inference: the buffers a training forward would return as reserve live only during
        # the call; beyond them and the outputs nothing grows either
        reserve_bytes = out[3].nbytes
        del out, grads
        gc.collect()
        live.update(now=0, peak=0)
        inf = rc.cudnn_rnn(x, h0, c0, params, **kw, is_training=False, device=device)
        device.queue.finish()
        assert inf[3].size == 0
        inf_extra = live["peak"] - reserve_bytes - sum(a.nbytes for a in inf[:3])
        return fwd_extra, bwd_extra, inf_extra

    run(SHORT, {})          # per-process caches (programs, shared zero buffers) made untracked
    live = track_device_arrays(monkeypatch)
    short, long = run(SHORT, live), run(LONG, live)
    assert all(b <= a for a, b in zip(short, long)), (short, long)


def test_cudnn_reserve_parts_the_device_cannot_address_are_copied(device, monkeypatch):
    """Where a reserve part cannot be a sub-buffer (``sub_array`` gives None: an alignment the
    device does not offer) the forward copies each part into reserve_space and backprop copies
    it out: the same reserve space and gradients as in place."""
    from pyrnn_cl import cudnn

    rng = np.random.default_rng(4)
    T, L = 5, 3
    kw = dict(rnn_mode="lstm", direction="bidirectional", num_proj=3, dropout=0.3, seed=9)
    size = rc.cudnn_rnn_params_size(L, H, I, rnn_mode="lstm", direction="bidirectional",
                                    num_proj=3)
    params = _random(rng, size, scale=0.3)
    x, h0, c0 = _random(rng, T, N, I), _random(rng, 2 * L, N, 3), _random(rng, 2 * L, N, H)
    ups = _random(rng, T, N, 6), _random(rng, 2 * L, N, 3), _random(rng, 2 * L, N, H)
    lens = np.array([5, 0, 3, 1, 4], np.int32)

    def run():
        out = rc.cudnn_rnn(x, h0, c0, params, lens, **kw, device=device)
        return out, rc.cudnn_rnn_backprop(x, h0, c0, params, lens, *out[:3], *ups, *out[3:],
                                          **kw, device=device)

    in_place = run()
    calls = []
    monkeypatch.setattr(cudnn, "sub_array", lambda *a: calls.append(a) and None)
    copied = run()
    assert len(calls) > 2 * 4 * L           # every part of both calls took the copy path
    for a, b in zip(in_place[0] + in_place[1], copied[0] + copied[1]):
        np.testing.assert_array_equal(a, b)


def test_cudnn_backprop_reads_a_reserve_space_in_pooled_memory(device):
    """A reserve_space the caller keeps in pooled memory (``pyopencl.tools.MemoryPool``: no
    sub-buffers) or at an odd element offset (copied to a fresh buffer on entry) gives the
    same gradients as the one the forward returned."""
    import pyopencl.tools as cl_tools

    rng = np.random.default_rng(6)
    T, L = 4, 2
    kw = dict(rnn_mode="gru", direction="bidirectional", dropout=0.25, seed=1)
    size = rc.cudnn_rnn_params_size(L, H, I, rnn_mode="gru", direction="bidirectional")

    x, h0 = _random(rng, T, N, I, device=device), _random(rng, 2 * L, N, H, device=device)
    params = _random(rng, size, scale=0.3, device=device)
    ups = (_random(rng, T, N, 2 * H, device=device), _random(rng, 2 * L, N, H, device=device),
           None)
    y, hn, cn, res, host = rc.cudnn_rnn(x, h0, None, params, **kw, device=device)
    want = rc.cudnn_rnn_backprop(x, h0, None, params, None, y, hn, cn, *ups, res, host, **kw,
                                 device=device)
    pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(device.queue))
    pooled = cla.empty(device.queue, res.shape, res.dtype, allocator=pool)
    pooled[:] = res
    shifted = cla.empty(device.queue, (res.size + 3,), res.dtype)
    shifted[3:] = res
    for other in (pooled, shifted[3:]):
        got = rc.cudnn_rnn_backprop(x, h0, None, params, None, y, hn, cn, *ups, other, host,
                                    **kw, device=device)
        for a, b in zip(want, got):
            np.testing.assert_array_equal(a.get(), b.get())


# ---- results that stay inside pyrnn_cl come from the pool -------------------------------------

def _dialect_calls(dialect, device, on_device=False):
    """A function running forward and backward of ``dialect`` on NumPy arrays (a two-layer
    bidirectional LSTM with lengths; an LSTM layer; BlockLSTM with peepholes) and returning
    every result; ``on_device``: on device arrays instead."""
    rng = np.random.default_rng(12)
    T, L = 5, 2

    def rand(*shape, scale=1.0):
        a = _random(rng, *shape, scale=scale)
        return cla.to_device(device.queue, a) if on_device else a

    x, h0, c0 = rand(T, N, I), rand(2 * L, N, H), rand(2 * L, N, H)
    ups = rand(T, N, 2 * H), rand(2 * L, N, H), rand(2 * L, N, H)
    dy, dcell = rand(T, N, H), rand(T, N, H)
    if dialect == "cudnn":
        kw = dict(rnn_mode="lstm", direction="bidirectional")
        params = rand(rc.cudnn_rnn_params_size(L, H, I, **kw), scale=0.3)
        lens = np.array([5, 2, 0, 3, 1], np.int32)

        def run():
            out = rc.cudnn_rnn(x, h0, c0, params, lens, **kw, device=device)
            return list(out) + list(rc.cudnn_rnn_backprop(x, h0, c0, params, lens, *out[:3],
                                                          *ups, *out[3:], **kw, device=device))
    elif dialect == "mps":
        R, W, b = rand(4 * H, H, scale=0.3), rand(4 * H, I, scale=0.3), rand(4 * H)
        desc = rc.LSTMDescriptor(training=True)

        def run():
            out = rc.lstm(x, R, W, b, h0[0], c0[0], descriptor=desc, device=device)
            return out + rc.lstm_gradients(x, R, dy, out[2], out[1], W, b, h0[0], c0[0],
                                           descriptor=desc, device=device)
    else:
        w, b = rand(I + H, 4 * H, scale=0.3), rand(4 * H)
        peep = [rand(H) for _ in range(3)]

        def run():
            out = rc.block_lstm(T - 1, x, h0[0], c0[0], w, *peep, b, forget_bias=0.5,
                                use_peephole=True, device=device)
            return list(out) + list(rc.block_lstm_grad(
                T - 1, x, h0[0], c0[0], w, *peep, b, *out, dy, dcell, use_peephole=True,
                device=device))
    return run


@pytest.mark.parametrize("dialect", ["cudnn", "mps", "tf"])
def test_numpy_calls_allocate_from_the_pool_where_memory_is_not_the_hosts(device, monkeypatch,
                                                                           dialect):
    """On a device whose memory is not the host's (forced here; Intel's CPU runtime, GPUs), an
    op on NumPy arrays copies every result back before it returns, so its uploads, results
    and reserve space come from the pool (``_arrays.results_stay``): after a first call, a
    forward and its backward allocate no device buffer of their own (a fresh buffer per result
    and call cost Intel's CPU runtime ~650 page faults and 1.7 ms of system time per tiny LSTM
    training forward), with exactly the numbers of a run on fresh buffers."""
    from pyrnn_cl import _arrays

    monkeypatch.setattr(_arrays, "shares_host_memory", lambda dev: False)
    run = _dialect_calls(dialect, device)
    run()                                   # (fills the pool)
    fresh = fresh_allocations(monkeypatch)
    got = run()
    assert fresh == [], fresh
    monkeypatch.setattr(_arrays, "results_stay", lambda dev: False)
    monkeypatch.setenv("PYRNN_CL_POOL_RESULTS", "0")
    want = run()
    assert fresh, "the run on fresh buffers allocated none: the check above proves nothing"
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_pooled_results_end_with_the_op(device, monkeypatch):
    """The scope of an op on NumPy arrays ends with it: after one (pooled, forced as above) and
    after one that raised once it had begun, an op on device arrays, with the pooling of
    device-array results off (``PYRNN_CL_POOL_RESULTS=0``), returns results in buffers of their
    own, which the caller may keep and use anywhere."""
    import pyopencl as cl

    from pyrnn_cl import _arrays
    from pyrnn_cl.errors import ShapeError

    monkeypatch.setattr(_arrays, "shares_host_memory", lambda dev: False)
    monkeypatch.setenv("PYRNN_CL_POOL_RESULTS", "0")
    rng = np.random.default_rng(13)
    T = 4
    args = [_random(rng, T, N, I), _random(rng, 4 * H, H), _random(rng, 4 * H, I),
            _random(rng, 4 * H), _random(rng, N, H), _random(rng, N, H)]
    desc = rc.LSTMDescriptor(training=True)
    rc.lstm(*args, descriptor=desc, device=device)
    assert not _arrays.results_stay(device)
    with pytest.raises(ShapeError):
        rc.lstm(*args[:3], _random(rng, 3 * H), *args[4:], descriptor=desc, device=device)
    assert not _arrays.results_stay(device)
    out = rc.lstm(*[cla.to_device(device.queue, a) for a in args], descriptor=desc,
                  device=device)
    assert all(isinstance(a.base_data, cl.Buffer) for a in out), [type(a.base_data) for a in out]


@pytest.mark.parametrize("dialect", ["cudnn", "mps", "tf"])
def test_device_array_results_from_the_pool_where_memory_is_not_the_hosts(device, monkeypatch,
                                                                            dialect):
    """On a device whose memory is not the host's (forced here; Intel's CPU runtime, GPUs), the
    results an op returns as device arrays come from the pool too (``_arrays.pools_results``):
    after a first call a forward and its backward allocate no device buffer of their own. The
    caller's results stay intact however many calls follow (the pool hands out only memory
    whose array was dropped), and equal bit for bit those of a run with
    ``PYRNN_CL_POOL_RESULTS=0``, which allocates them afresh. Where the memory is the host's
    (PoCL's CPU device) results keep buffers of their own."""
    import pyopencl as cl

    from pyrnn_cl import _arrays

    run = _dialect_calls(dialect, device, on_device=True)
    out = run()
    assert all(isinstance(a.base_data, cl.Buffer) for a in out
               if a.size) == (not _arrays.pools_results(device))
    monkeypatch.setattr(_arrays, "shares_host_memory", lambda dev: False)
    run()                                   # (fills the pool)
    fresh = fresh_allocations(monkeypatch)
    held = run()
    assert fresh == [], fresh
    assert any(not isinstance(a.base_data, cl.Buffer) for a in held)
    for _ in range(3):                      # calls that would reuse any memory still held
        run()
    monkeypatch.setenv("PYRNN_CL_POOL_RESULTS", "0")
    want = run()
    assert fresh, "the run on fresh buffers allocated none: the check above proves nothing"
    assert all(isinstance(a.base_data, cl.Buffer) for a in want if a.size)
    assert len(held) == len(want)
    for a, b in zip(held, want):
        np.testing.assert_array_equal(a.get(), b.get())


def test_sub_array_of_pooled_memory(device):
    """``sub_array`` addresses a part of a pooled array (``pyopencl.tools.MemoryPool``'s
    buffers have no sub-regions of their own) in place: writes through the part show in the
    array; and the part keeps that memory out of the pool once the array is dropped (as a
    backprop's layers read their initial states through parts of an uploaded input: handed
    to the next allocation, they were overwritten)."""
    from pyrnn_cl import _arrays

    step = _arrays._base_align_of(device) // 4          # elements per alignment unit
    a = _arrays.temporary(device, (4 * step,), np.float32)
    a.set(np.arange(4 * step, dtype=np.float32))
    part = _arrays.sub_array(device, a, step, (2 * step,))
    assert part is not None
    np.testing.assert_array_equal(part.get(), np.arange(step, 3 * step, dtype=np.float32))
    part.fill(-1.0)
    want = np.arange(4 * step, dtype=np.float32)
    want[step:3 * step] = -1.0
    np.testing.assert_array_equal(a.get(), want)
    del a
    others = [_arrays.temporary(device, (4 * step,), np.float32) for _ in range(4)]
    for other in others:
        other.fill(7.0)
    np.testing.assert_array_equal(part.get(), np.full(2 * step, -1.0, np.float32))


def test_host_arguments_of_a_device_array_call_are_read_before_it_returns(device, monkeypatch):
    """A call on device arrays may return while its kernels are still queued, and the caller
    may then change its own host arguments (here the sequence lengths, given as a NumPy
    array): the call's copy of them is taken before it returns, pooled or not (forced onto a
    device whose memory is not the host's, where such uploads come from the pool). The queue
    is kept busy with large products while the call is made, so what it queued has not run
    when the lengths change."""
    from pyrnn_cl import _arrays
    from pyrnn_cl.gemm import gemm

    monkeypatch.setattr(_arrays, "shares_host_memory", lambda dev: False)
    rng = np.random.default_rng(14)
    T, L = 5, 1
    kw = dict(rnn_mode="lstm", direction="unidirectional")
    q = device.queue
    x, h0, c0 = (cla.to_device(q, _random(rng, *s)) for s in ((T, N, I), (L, N, H), (L, N, H)))
    params = cla.to_device(q, _random(rng, rc.cudnn_rnn_params_size(L, H, I, **kw), scale=0.3))
    want = rc.cudnn_rnn(x, h0, c0, params, np.array([5, 2, 0, 3, 1], np.int32), **kw,
                        device=device)[0].get()
    big = cla.to_device(q, _random(rng, 1024, 1024))
    busy = cla.empty(q, (1024, 1024), np.float32)
    q.finish()
    for _ in range(8):                      # (tens to hundreds of milliseconds of device work)
        gemm(device, np.float32, 1024, 1024, 1024, big, big, busy)
    lens = np.array([5, 2, 0, 3, 1], np.int32)
    y = rc.cudnn_rnn(x, h0, c0, params, lens, **kw, device=device)[0]
    lens[:] = T                             # the caller's array, changed after the call
    np.testing.assert_array_equal(y.get(), want)
