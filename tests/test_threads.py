"""Thread safety (pitfalls C17): four host threads running *different* ops at the same time on
one device give exactly the results each op gives alone.

What makes it safe: every thread gets its own ``cl.Kernel`` objects
(``programs.Program.kernel`` is per thread, so ``clSetKernelArg`` never races), the program
memo builds each program once under a per-key lock, OpenCL queues are thread-safe for enqueues,
and each op keeps its buffers to itself. Both the device's shared in-order queue and a queue
per thread (``device=pyopencl.CommandQueue``) are tested. Marked ``threads``: Oclgrind 21.10
aborts when several host threads enqueue at once, so its run leaves these out.
"""

from __future__ import annotations

import importlib.util
import threading
import time

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import pyrnn_cl as rc
from pyrnn_cl import programs

pytestmark = pytest.mark.threads

F32 = np.float32
T, N, I, H = 6, 5, 4, 7


def _r(rng, *shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(F32)


def _mps_lstm(device):
    rng = np.random.default_rng(10)
    a = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, 4 * H, H),
             input_weight=_r(rng, 4 * H, I), bias=_r(rng, 4 * H), init_state=_r(rng, N, H),
             init_cell=_r(rng, N, H))
    desc = rc.LSTMDescriptor(training=True, forget_gate_last=True)
    h, c, z = rc.lstm(**a, descriptor=desc, device=device)
    g = rc.lstm_gradients(a["source"], a["recurrent_weight"], _r(rng, T, N, H), z, c,
                          a["input_weight"], a["bias"], a["init_state"], a["init_cell"],
                          descriptor=desc, device=device)
    return [h, c, z, *g]


def _mps_gru(device):
    rng = np.random.default_rng(11)
    a = dict(source=_r(rng, T, N, 6 * H), recurrent_weight=_r(rng, 2, 3 * H, H),
             init_state=_r(rng, N, 2 * H), mask=(rng.uniform(size=(T, N, 2 * H)) > .3).astype(F32))
    desc = rc.GRUDescriptor(bidirectional=True, training=True)
    h, z = rc.gru(**a, descriptor=desc, device=device)
    g = rc.gru_gradients(a["source"], a["recurrent_weight"], _r(rng, T, N, 2 * H), z, h,
                         init_state=a["init_state"], mask=a["mask"], descriptor=desc,
                         device=device)
    return [h, z, *g]


def _tf_block_lstm(device):
    rng = np.random.default_rng(12)
    args = (_r(rng, T, N, I), _r(rng, N, H), _r(rng, N, H), _r(rng, I + H, 4 * H), _r(rng, H),
            _r(rng, H), _r(rng, H), _r(rng, 4 * H))
    out = rc.block_lstm(T - 1, *args, use_peephole=True, cell_clip=0.5, device=device)
    g = rc.block_lstm_grad(T - 1, *args, *out, _r(rng, T, N, H), _r(rng, T, N, H),
                           use_peephole=True, device=device)
    cell = rc.gru_block_cell(args[0][0], args[2], _r(rng, I + H, 2 * H), _r(rng, I + H, H),
                             _r(rng, 2 * H), _r(rng, H), device=device)
    return [*out, *g, *cell]


def _cudnn(device):
    rng = np.random.default_rng(13)
    kw = dict(rnn_mode="lstm", direction="bidirectional", num_proj=3, dropout=0.3, seed=4)
    L = 2
    size = rc.cudnn_rnn_params_size(L, H, I, **{k: kw[k] for k in ("rnn_mode", "direction",
                                                                    "num_proj")})
    args = [_r(rng, T, N, I), _r(rng, 2 * L, N, 3), _r(rng, 2 * L, N, H),
            _r(rng, size, scale=0.3), np.array([T, 2, 0, 5, 1], np.int32)]
    y, hn, cn, res, host = rc.cudnn_rnn(*args, **kw, device=device)
    g = rc.cudnn_rnn_backprop(*args, y, hn, cn, _r(rng, *y.shape), _r(rng, *hn.shape), None,
                              res, host, **kw, device=device)
    return [y, hn, cn, res, *g]


OPS = [_mps_lstm, _mps_gru, _tf_block_lstm, _cudnn]


def _run_concurrently(device, own_queue, rounds=3):
    results, errors = {}, []
    start = threading.Barrier(len(OPS))

    def work(k):
        try:
            target = cl.CommandQueue(device.context, device.cl_device) if own_queue else device
            start.wait()
            results[k] = [OPS[k](target) for _ in range(rounds)]
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append((OPS[k].__name__, exc))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(OPS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    assert not errors, errors
    return results


@pytest.mark.parametrize("own_queue", [False, True], ids=["shared-queue", "queue-per-thread"])
def test_four_threads_different_ops(device, own_queue):
    alone = [op(device) for op in OPS]               # each op by itself, first
    programs.clear_memo()                            # the threads race to (re)load programs
    before = programs.cache_stats()
    results = _run_concurrently(device, own_queue)
    for k, op in enumerate(OPS):
        for r, outs in enumerate(results[k]):
            assert len(outs) == len(alone[k])
            for j, (got, want) in enumerate(zip(outs, alone[k])):
                assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), \
                    f"{op.__name__} round {r} output {j} differs from the single-thread run"
    # one build (or disk load) per program despite four threads asking for it at once
    after = programs.cache_stats()
    loads = (after["source_builds"] - before["source_builds"]) + (after["disk_hits"] -
                                                                  before["disk_hits"])
    memo = programs._memo.get(device.context, {})
    assert loads == len(memo), (loads, len(memo))


def test_other_threads_run_python_while_results_are_read(device):
    """Reading results back waits for the device with the GIL released: another thread keeps
    running Python meanwhile. (A non-blocking copy whose event is dropped makes pyopencl wait
    with the GIL held: one thread's read then stopped every other thread's Python for as long
    as the device worked, and on NVIDIA's OpenCL, threads sharing a queue while reads were
    waited for that way crashed in a thread of the driver; docs/platforms.md.)"""
    from pyrnn_cl._arrays import read_host
    from pyrnn_cl.gemm import gemm

    rng = np.random.default_rng(3)

    def product_time(n):
        """A product's device time: the shortest of three after a first one that builds the
        kernels (the shortest: a reading slowed by the other test processes would queue too
        little work below)."""
        a = cla.to_device(device.queue, rng.standard_normal((n, n)).astype(np.float32))
        c = cla.empty(device.queue, (n, n), np.float32)
        times = []
        for _ in range(4):
            device.queue.finish()
            start = time.perf_counter()
            gemm(device, np.float32, n, n, n, a, a, c)
            device.queue.finish()
            times.append(time.perf_counter() - start)
        return min(times[1:]), a, c

    # products long enough that the device falls behind the host's launches (on a GPU one of
    # 384^2 is shorter than its launch): the queued work is then device time, not host time
    n = 384
    seconds, a, c = product_time(n)
    while seconds < 2e-3 and n < 4096:
        n *= 2
        seconds, a, c = product_time(n)
    stop, stamps = threading.Event(), []

    def tick():
        while not stop.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0.001)

    # device work of a known length: enough of those products queued
    launches = max(4, int(0.6 / seconds))
    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.02)
    for _ in range(launches):
        gemm(device, np.float32, n, n, n, a, a, c)
    start = time.perf_counter()
    read_host(device.queue, [(c, 0, c.shape)], in_place=False)
    waited = time.perf_counter() - start
    stop.set()
    ticker.join()
    during = [t for t in stamps if start <= t <= start + waited]
    gaps = np.diff([start, *during, start + waited])
    assert waited > 0.1, f"the read waited {waited:.3f} s: too little device work to tell"
    assert gaps.max() < waited / 2, \
        f"no Python ran for {gaps.max():.3f} s of the read's {waited:.3f} s wait"


#: the pyopencl calls that queue commands, as pyrnn_cl and pyopencl.array call them
_QUEUEING = ("enqueue_nd_range_kernel", "enqueue_copy", "enqueue_fill_buffer",
             "enqueue_map_buffer", "enqueue_marker")


def _lock_spy(monkeypatch):
    """Spies on every queueing call and on ``clBuildProgram``: returns ``(seen, unlocked,
    raw_program)``, the names of the calls made and those made without holding
    ``programs.driver_lock`` (with where from)."""
    unlocked, seen = [], []

    def spy(name, real):
        def call(*args, **kwargs):
            seen.append(name)
            if not programs.driver_lock._is_owned():
                import traceback
                unlocked.append((name, "".join(traceback.format_stack(limit=6)[:-1])))
            return real(*args, **kwargs)
        return call

    for name in _QUEUEING:
        monkeypatch.setattr(cl, name, spy(name, getattr(cl, name)))
    raw_program = getattr(getattr(cl, "_cl", None), "_Program", None)
    if raw_program is not None and hasattr(raw_program, "_build"):   # (clBuildProgram)
        monkeypatch.setattr(raw_program, "_build", spy("build", raw_program._build))
    return seen, unlocked, raw_program


def test_every_command_is_queued_under_the_driver_lock(device, monkeypatch):
    """No command is queued while another thread builds a program: every launch, copy, fill and
    map of each dialect's forward and gradients (the four ops of the thread test, with NumPy
    arguments and with device arrays, and the torch bridge's modules) is queued holding
    ``programs.driver_lock``, which each build holds too (NVIDIA's OpenCL crashed in a thread of
    the driver when one thread built a program while others queued commands;
    docs/platforms.md)."""
    rng = np.random.default_rng(1)
    xd, Rd, Wd, xd2 = (cla.to_device(device.queue, _r(rng, *s))
                       for s in ((T, N, I), (4 * H, H), (4 * H, I), (T, N, I)))
    device.queue.finish()
    seen, unlocked, raw_program = _lock_spy(monkeypatch)
    programs.clear_memo()                 # (builds too: they take the lock themselves)
    for op in OPS:
        op(device)
    desc = rc.LSTMDescriptor(training=True)
    y, cs, z = rc.lstm(xd, Rd, Wd, descriptor=desc, device=device)
    rc.lstm_gradients(xd2, Rd, y, z, cs, Wd, descriptor=desc, device=device)
    if importlib.util.find_spec("torch") is not None:     # the torch bridge's own commands
        import torch

        import pyrnn_cl.torch as rt

        for module in (rt.LSTM(I, H, num_layers=2, bidirectional=True, cl_device=device),
                       rt.GRU(I, H, batch_first=True, cl_device=device)):
            xt = torch.randn(T, N, I, requires_grad=True)
            h0 = torch.randn(module.num_layers * (1 + module.bidirectional), T, H,
                             requires_grad=True)
            out = module(xt, h0 if isinstance(module, rt.GRU) else None)[0]
            out.square().sum().backward()
    device.queue.finish()
    assert {"enqueue_nd_range_kernel", "enqueue_copy"} <= set(seen), sorted(set(seen))
    assert raw_program is None or "build" in seen, "no build seen: the spy missed them"
    assert not unlocked, unlocked[:5]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_every_public_op_queues_under_the_driver_lock(device, monkeypatch, dtype):
    """Every public op (the fuzzer's valid base call of each), with NumPy arguments and with its
    floating arguments as device arrays, queues every command holding
    ``programs.driver_lock``."""
    from helpers import fuzz as FZ

    calls = 0
    for op in sorted(FZ.OPS):
        for on_device in (False, True):
            case = FZ.OPS[op](np.random.default_rng([3, 0]), dtype)
            if not case.device_ok:
                continue
            case.kwargs["device"] = device
            if on_device:
                for arg in case.args.values():
                    value = getattr(arg, "value", None)
                    if (isinstance(value, np.ndarray) and value.dtype.kind == "f"
                            and value.size):
                        arg.value = cla.to_device(device.queue, value)
                device.queue.finish()
            with monkeypatch.context() as m:
                seen, unlocked, _ = _lock_spy(m)
                case.call()
                device.queue.finish()
            assert not unlocked, f"{op} (device arrays: {on_device}): {unlocked[:2]}"
            calls += bool(seen)
    assert calls > 20, calls      # (the ops queued commands: the spy saw them)


def test_a_launch_waits_for_the_driver_lock(device):
    """While one thread holds ``programs.driver_lock`` (as a build does), another thread's kernel
    launch waits for it."""
    from pyrnn_cl.programs import enqueue, get_program
    from pyrnn_cl.sources import dtype_code

    knl = get_program(device, "util.cl", {"PYRNN_DTYPE": dtype_code(np.float32),
                                          "REC_VW": 1}).kernel("pyrnn_mul")
    y = cla.zeros(device.queue, 8, np.float32)
    knl.set_args(y.base_data, y.base_data, y.base_data)
    device.queue.finish()
    done = threading.Event()

    def work():
        enqueue(device.queue, knl, (8,))
        done.set()

    with programs.driver_lock:
        worker = threading.Thread(target=work)
        worker.start()
        assert not done.wait(0.3), "the launch did not wait for the driver lock"
    worker.join(timeout=120)
    assert done.is_set()
    device.queue.finish()
