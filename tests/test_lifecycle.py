"""Process lifecycle: fork, exit and interrupts (README, "Reliability notes").

Every scenario runs in a fresh Python process started with ``subprocess.run(timeout=...)``, so
that a regression (a child that waits forever, an abort at exit) fails its test instead of
hanging or killing the test session. Results are compared with the float64 NumPy reference
(``tests/reference/mps_ref.py``) or with an uninterrupted call in a fresh process.

* **fork**: a child forked after the parent used OpenCL devices through pyrnn_cl gets
  ``ForkError`` (a ``RuntimeError`` naming 'spawn' and 'forkserver') at its first call instead
  of hanging; a child forked before works; 'spawn' and 'forkserver' children work after the
  parent used the device; the same through a torch ``DataLoader(num_workers=2)``.
* **exit**: queued work on device arrays at exit, and daemon threads in the middle of ops
  at exit, both end with status 0.
* **interrupts**: a ``KeyboardInterrupt`` in the middle of a long call leaves the process
  usable (the next call gives the uninterrupted result) and the disk cache valid.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

#: Seconds a scenario may take before it counts as a hang (cold builds included).
TIMEOUT = 240

# The problem every scenario computes, and the float64 reference of its output.
_PROBLEM = textwrap.dedent("""
    import numpy as np
    T, N, I, H = 5, 3, 4, 6
    _rng = np.random.default_rng(21)
    x = (0.5 * _rng.standard_normal((T, N, I))).astype(np.float32)
    W = (0.5 * _rng.standard_normal((4 * H, I))).astype(np.float32)
    R = (0.5 * _rng.standard_normal((4 * H, H))).astype(np.float32)
""")


def _reference():
    from reference import mps_ref

    space: dict = {}
    exec(_PROBLEM, space)  # noqa: S102 - the problem text shared with the scripts
    return np.asarray(mps_ref.lstm(space["x"], space["R"], space["W"])[0], np.float64)


def _run(script: str, device, tmp_path, *, timeout=TIMEOUT, env=None):
    """Run ``script`` (written to a file, so that 'spawn' children can import it) in a fresh
    process on ``device``; the last line of its stdout is JSON."""
    path = tmp_path / "scenario.py"
    path.write_text(textwrap.dedent(script))
    full_env = dict(os.environ, PYRNN_CL_DEVICE=device.info.index,
                    PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH",
                                                                               "")]))
    full_env.update(env or {})
    try:
        done = subprocess.run([sys.executable, str(path)], env=full_env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the scenario did not end within {timeout} s (a hang): "
                    f"{(exc.stderr or b'')[-2000:]!r}")
    return done


def _result(done):
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _files(directory) -> set:
    """The entries of an implementation's own build cache: every file in a subdirectory of
    ``directory`` (PoCL keeps programs and kernels in ``XX/<hash>/...`` and leaves per-process
    ``tempfile_*`` scratch files at the top)."""
    root = Path(directory)
    return {p for p in root.rglob("*") if p.is_file() and p.parent != root}


def _assert_built_nothing(device, stats, own_cache_before, own_cache_after, *, loaded=None):
    """A warm start built nothing. Where the implementation caches builds itself (PoCL; then
    pyrnn_cl keeps no binaries and rebuilds from source, which hits that cache), its cache got no
    new file; elsewhere pyrnn_cl's counters show no source build (and ``loaded`` disk hits)."""
    assert stats["disk_rejects"] == 0, stats
    if device.profile.keeps_build_cache():
        assert own_cache_after == own_cache_before, sorted(map(str, own_cache_after -
                                                                own_cache_before))[:5]
    else:
        assert stats["source_builds"] == 0, stats
        if loaded is not None:
            assert stats["disk_hits"] == loaded, stats
        else:
            assert stats["disk_hits"] > 0, stats


# {{{ fork

_POOL = _PROBLEM + textwrap.dedent("""
    import json, multiprocessing, sys
    import pyrnn_cl as rc

    def child(k):
        try:
            return ["ok", rc.lstm(x, R, W)[0].astype(float).tolist()]
        except Exception as exc:
            return ["error", type(exc).__name__, isinstance(exc, RuntimeError), str(exc)]

    if __name__ == "__main__":
        method, parent_first = sys.argv[1], sys.argv[2] == "1"
        parent = rc.lstm(x, R, W)[0].astype(float).tolist() if parent_first else None
        with multiprocessing.get_context(method).Pool(2) as pool:
            children = pool.map(child, range(2))
        print(json.dumps({"parent": parent, "children": children}))
""")


@pytest.mark.parametrize("method,parent_first", [
    ("fork", True), ("fork", False), ("forkserver", True), ("spawn", True)])
def test_pool_children(device, tmp_path, method, parent_first):
    """multiprocessing Pool(2) children each call ``rc.lstm``: after the parent used the
    device, 'fork' children get ForkError at once and never hang; a 'fork' child of a parent
    that never touched OpenCL, and 'spawn'/'forkserver' children, compute the reference."""
    script = _POOL.replace('sys.argv[1], sys.argv[2] == "1"',
                           f"{method!r}, {parent_first!r}")
    out = _result(_run(script, device, tmp_path))
    want = _reference()
    if parent_first:
        np.testing.assert_allclose(out["parent"], want, rtol=1e-5, atol=1e-5)
    for child in out["children"]:
        if method == "fork" and parent_first:
            assert child[:3] == ["error", "ForkError", True], child
            assert "'spawn' or 'forkserver'" in child[3] and "README" in child[3], child
        else:
            assert child[0] == "ok", child
            np.testing.assert_allclose(child[1], want, rtol=1e-5, atol=1e-5)
            if parent_first:      # same device, same kernels: bitwise the parent's answer
                assert child[1] == out["parent"]


_LOADER = _PROBLEM + textwrap.dedent("""
    import json, sys
    import torch
    from torch.utils.data import DataLoader, Dataset
    import pyrnn_cl as rc

    class Steps(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, k):
            return torch.from_numpy(rc.lstm(x, R, W)[0][k % T].copy())

    def load(**kw):
        try:
            rows = torch.cat(list(DataLoader(Steps(), batch_size=2, num_workers=2, **kw)))
            return ["ok", rows.double().tolist()]
        except Exception as exc:
            return ["error", type(exc).__name__, str(exc)]

    if __name__ == "__main__":
        out = {"fork_before": load()}                      # the parent has not used OpenCL
        out["parent"] = rc.lstm(x, R, W)[0].astype(float).tolist()
        out["fork_after"] = load()
        out["spawn_after"] = load(multiprocessing_context="spawn")
        print(json.dumps(out))
""")


@pytest.mark.torch
def test_torch_dataloader_workers(device, tmp_path):
    """A torch DataLoader(num_workers=2) whose Dataset calls an op: forked workers work when
    the parent has not used OpenCL yet; afterwards forked workers fail with the ForkError
    message (torch re-raises it in the parent) instead of hanging; 'spawn' workers work."""
    out = _result(_run(_LOADER, device, tmp_path))
    want = _reference()
    rows = np.concatenate([want[k % want.shape[0]][None] for k in range(4)])
    for key in ("fork_before", "spawn_after"):
        assert out[key][0] == "ok", (key, out[key])
        np.testing.assert_allclose(np.asarray(out[key][1]).reshape(rows.shape), rows,
                                   rtol=1e-5, atol=1e-5, err_msg=key)
    assert out["fork_after"][0] == "error", out["fork_after"]
    assert "ForkError" in out["fork_after"][2] and "'spawn' or 'forkserver'" in \
        out["fork_after"][2], out["fork_after"]

# }}}

# {{{ exit

_QUEUED_AT_EXIT = _PROBLEM + textwrap.dedent("""
    import pyopencl.array as cla
    import pyrnn_cl as rc
    from pyrnn_cl.devices import get_device

    dev = get_device()
    xd = cla.to_device(dev.queue, x)
    outs = [rc.lstm(xd, R, W)[0] for _ in range(20)]     # device arrays, never read back
    print("{}")
""")


def test_exit_with_queued_work(device, tmp_path):
    """Leaving the interpreter while ops on device arrays are still queued: status 0."""
    _result(_run(_QUEUED_AT_EXIT, device, tmp_path))


_DAEMONS_AT_EXIT = _PROBLEM + textwrap.dedent("""
    import threading, time
    import pyopencl.array as cla
    import pyrnn_cl as rc
    from pyrnn_cl.devices import get_device

    T = 300
    x = np.resize(x, (T, N, I))
    desc = rc.LSTMDescriptor(training=True)
    dev = get_device()
    h, c, z = rc.lstm(x, R, W, descriptor=desc)
    rc.lstm_gradients(x, R, h, z, c, W, descriptor=desc)          # every kernel built
    xd = cla.to_device(dev.queue, x)
    started = threading.Barrier(4)

    def work(k):
        started.wait()
        while True:
            if k % 2:
                h, c, z = rc.lstm(x, R, W, descriptor=desc)
                rc.lstm_gradients(x, R, h, z, c, W, descriptor=desc)
            else:
                rc.lstm(xd, R, W)

    for k in range(3):
        threading.Thread(target=work, args=(k,), daemon=True).start()
    started.wait()
    time.sleep(0.3)
    print("{}")
""")


def test_exit_with_daemon_threads_in_ops(device, tmp_path):
    """Daemon threads in the middle of ops when the interpreter exits: status 0 (without
    pyrnn_cl's exit hook, 20 of 20 such runs aborted with SIGABRT on PoCL and on Intel's
    runtime; with it, 0 of 65 on each)."""
    for _ in range(3):
        _result(_run(_DAEMONS_AT_EXIT, device, tmp_path))


_QUEUED_AT_EXIT = _PROBLEM + textwrap.dedent("""
    import atexit, json
    import pyopencl as cl

    seen = {}

    def after_pyrnn_cl():                        # (atexit: registered first, runs last)
        seen["status"] = marker.command_execution_status
        print(json.dumps(seen))

    atexit.register(after_pyrnn_cl)
    import pyopencl.array as cla
    import pyrnn_cl as rc
    from pyrnn_cl.devices import get_device

    dev = get_device()
    T = 20000
    xd = cla.to_device(dev.queue, np.resize(x, (T, N, I)))
    rc.lstm(xd, R, W)                            # (built, then queued again below)
    dev.queue.finish()
    rc.lstm(xd, R, W)                            # device arrays: returns with its work queued
    marker = cl.enqueue_marker(dev.queue)
    seen["queued"] = marker.command_execution_status
""")


def test_exit_finishes_the_queued_commands(device, tmp_path):
    """The exit hook, once the ops have ended, waits for the commands still queued on the
    devices pyrnn_cl chose, so that none is running when the runtime tears itself down after
    the interpreter: a marker queued behind a long device-array op, still pending when the
    script ends, is complete when later exit hooks run."""
    out = _result(_run(_QUEUED_AT_EXIT, device, tmp_path))
    assert out["queued"] != cl.command_execution_status.COMPLETE, out   # (the op was long)
    assert out["status"] == cl.command_execution_status.COMPLETE, out

# }}}

# {{{ interrupts

_INTERRUPTED = _PROBLEM + textwrap.dedent("""
    import _thread, hashlib, json, os, signal, sys, threading, time
    import pyrnn_cl as rc
    from pyrnn_cl import programs

    T = 10000                                   # a long call: about a second on a CPU
    x = np.resize(x, (T, N, I))
    desc = rc.LSTMDescriptor(training=True)
    state = {"in_call": False}

    def call():
        state["in_call"] = True
        h, c, z = rc.lstm(x, R, W, descriptor=desc)
        grads = rc.lstm_gradients(x, R, h, z, c, W, descriptor=desc)
        state["in_call"] = False
        digest = hashlib.sha256()
        for a in (h, c, z, *grads):
            digest.update(np.ascontiguousarray(a).tobytes())
        return digest.hexdigest()

    def interrupt(how):
        if how == "signal":
            os.kill(os.getpid(), signal.SIGINT)        # what Ctrl-C sends
        else:
            _thread.interrupt_main()

    out = {"during": 0, "after": 0}
    # Ctrl-C's handler, as in an interactive session: a process started in the background by a
    # non-interactive shell inherits SIGINT ignored, and then neither interrupt reaches Python
    # (the suite run beside a load on a GPU machine counted 0 interrupts, during or after)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if sys.argv[1] == "interrupt":
        for k, delay in enumerate([0.0, 0.02, 0.05, 0.1, 0.2, 0.5]):
            timer = threading.Timer(delay, interrupt, ["signal" if k % 2 else "main"])
            try:
                timer.start()
                call()
                timer.join()
                time.sleep(0.2)                    # the interrupt lands here at the latest
            except KeyboardInterrupt:
                out["during" if state["in_call"] else "after"] += 1
            state["in_call"] = False
    out["digest"] = call()
    out["stats"] = programs.cache_stats()
    print(json.dumps(out))
""")


def test_keyboard_interrupt_leaves_the_process_usable(device, tmp_path):
    """KeyboardInterrupts (SIGINT and ``_thread.interrupt_main``) at six moments of a
    T = 10 000 LSTM forward and gradients, from an empty disk cache, so that the first ones land
    around the builds: the next call gives bitwise the result of an uninterrupted call in a
    fresh process (with the session's own cache), and the disk cache the interrupted process
    wrote loads in a later process with no rebuild and no rejected or half-written entry."""
    cache = tmp_path / "cache"
    env = {"PYRNN_CL_CACHE_DIR": str(cache), "POCL_CACHE_DIR": str(tmp_path / "pocl")}
    interrupted = _result(_run(_INTERRUPTED.replace("sys.argv[1]", '"interrupt"'), device,
                               tmp_path, env=env))
    assert interrupted["during"] >= 3, interrupted      # most interrupts land inside the call
    reference = _result(_run(_INTERRUPTED.replace("sys.argv[1]", '"plain"'), device, tmp_path))
    assert interrupted["digest"] == reference["digest"]
    assert not list(cache.rglob(".tmp-*")), list(cache.rglob("*"))
    before = _files(tmp_path / "pocl")
    warm = _result(_run(_INTERRUPTED.replace("sys.argv[1]", '"plain"'), device, tmp_path,
                        env=dict(env, PYTHONWARNINGS="error::UserWarning")))
    assert warm["digest"] == reference["digest"]
    _assert_built_nothing(device, warm["stats"], before, _files(tmp_path / "pocl"))

# }}}

# {{{ processes sharing the caches

_TINY = textwrap.dedent("""
    import json, sys
    import numpy as np
    import pyrnn_cl as rc
    from pyrnn_cl import programs

    x = (np.arange(2 * 1 * 8, dtype=np.float32).reshape(2, 1, 8) - 7.5) / 8
    R = (np.arange(8 * 2, dtype=np.float32).reshape(8, 2) - 7.5) / 16
    if sys.argv[1:] == ["announce"]:            # say when the build starts
        build = programs._raw_build

        def announced(*args):
            print("building", flush=True)
            return build(*args)

        programs._raw_build = announced
    y = rc.lstm(x, R)[0]                        # one small op: TINY_PROGRAMS to build
    print(json.dumps({"y": y.astype(float).tolist(), "stats": programs.cache_stats()}))
""")


#: the programs the tiny op builds: the recurrence's and the weight packs'
TINY_PROGRAMS = 2


def _tiny_reference():
    from reference import mps_ref

    x = (np.arange(2 * 1 * 8, dtype=np.float64).reshape(2, 1, 8) - 7.5) / 8
    R = (np.arange(8 * 2, dtype=np.float64).reshape(8, 2) - 7.5) / 16
    return np.asarray(mps_ref.lstm(x, R)[0], np.float64)


def _tiny_env(device, tmp_path):
    env = dict(os.environ, PYRNN_CL_DEVICE=device.info.index,
               PYRNN_CL_CACHE_DIR=str(tmp_path / "pyrnn_cl-cache"),
               POCL_CACHE_DIR=str(tmp_path / "pocl-cache"),
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("PYRNN_CL_NO_CACHE", None)
    (tmp_path / "tiny.py").write_text(_TINY)
    return env


def _tiny(env, tmp_path, *args):
    return subprocess.Popen([sys.executable, str(tmp_path / "tiny.py"), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, cwd=tmp_path)


def _finish(proc):
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"a process did not end within {TIMEOUT} s (a hang)")
    assert proc.returncode == 0, (proc.returncode, out[-2000:], err[-3000:])
    return json.loads(out.strip().splitlines()[-1])


def _warm_start_builds_nothing(device, env, tmp_path):
    before = _files(tmp_path / "pocl-cache")
    warm = _finish(_tiny(env, tmp_path))
    np.testing.assert_allclose(warm["y"], _tiny_reference(), rtol=1e-5, atol=1e-6)
    _assert_built_nothing(device, warm["stats"], before, _files(tmp_path / "pocl-cache"),
                          loaded=TINY_PROGRAMS)


def test_concurrent_cold_starts_share_the_caches(device, tmp_path):
    """Four processes start at once against the same empty pyrnn_cl and PoCL caches: all
    four give the reference, the cache ends with one valid entry per program (none on PoCL,
    which caches builds itself) and no temporary file, and a later process builds nothing."""
    env = _tiny_env(device, tmp_path)
    runs = [_finish(p) for p in [_tiny(env, tmp_path) for _ in range(4)]]
    want = _tiny_reference()
    for run in runs:
        np.testing.assert_allclose(run["y"], want, rtol=1e-5, atol=1e-6)
        assert run["stats"]["disk_rejects"] == 0, run
    programs_dir = tmp_path / "pyrnn_cl-cache" / "programs"
    # one binary per program, or none where the implementation caches builds itself
    entries = 0 if device.profile.keeps_build_cache() else TINY_PROGRAMS
    assert len(list(programs_dir.glob("*.clbin"))) == entries
    assert not list(programs_dir.glob(".tmp-*"))
    _warm_start_builds_nothing(device, env, tmp_path)


def test_process_killed_during_a_cold_build(device, tmp_path):
    """A process killed with SIGKILL in the middle of its cold build leaves nothing that
    breaks the next start, which gives the reference; a start after that builds nothing."""
    import signal

    env = _tiny_env(device, tmp_path)
    victim = _tiny(env, tmp_path, "announce")
    assert victim.stdout.readline().strip() == "building"     # clBuildProgram has begun
    programs_dir = tmp_path / "pyrnn_cl-cache" / "programs"
    assert victim.poll() is None and not list(programs_dir.glob("*.clbin")), \
        "the build ended before the kill: nothing was tested"
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=60)
    assert victim.returncode == -signal.SIGKILL
    after = _finish(_tiny(env, tmp_path))
    np.testing.assert_allclose(after["y"], _tiny_reference(), rtol=1e-5, atol=1e-6)
    assert after["stats"]["source_builds"] == TINY_PROGRAMS, after
    assert after["stats"]["disk_rejects"] == 0, after
    _warm_start_builds_nothing(device, env, tmp_path)

# }}}

# {{{ the lifecycle module itself (in this process, its state patched)


@pytest.fixture
def lifecycle(monkeypatch):
    """``pyrnn_cl._lifecycle`` with fresh state, restored afterwards (so that this test
    session's own exit and later tests are unaffected)."""
    import threading

    from pyrnn_cl import _lifecycle

    monkeypatch.setattr(_lifecycle, "_state", {"opened": False, "forked": False})
    monkeypatch.setattr(_lifecycle, "_running", {"calls": 0, "exiting": False})
    monkeypatch.setattr(_lifecycle, "_never", threading.Event())
    return _lifecycle


def test_fork_flag(lifecycle):
    """A child forked before OpenCL was used keeps working; after, every entry refuses."""
    from pyrnn_cl.errors import ForkError

    lifecycle._after_fork_in_child()
    lifecycle.check_not_forked()                        # parent never used OpenCL: fine
    lifecycle.mark_opencl_used()
    lifecycle._after_fork_in_child()
    with pytest.raises(ForkError, match="'spawn' or 'forkserver'") as info:
        lifecycle.entry_point(lambda: None)()
    assert isinstance(info.value, RuntimeError)


def test_exit_hook_waits_for_running_ops_and_parks_new_ones(lifecycle):
    """The exit hook waits for an op running in another thread (nested ops count once);
    afterwards an op called from another thread does not start (it is parked), while the main
    thread's ops still run."""
    import threading
    import time

    ran = []

    @lifecycle.entry_point
    def op(tag, seconds=0.0):
        time.sleep(seconds)
        ran.append(tag)
        return tag

    @lifecycle.entry_point
    def outer(seconds=0.0):
        return op("inner", seconds)

    slow = threading.Thread(target=outer, args=(0.3,))
    slow.start()
    time.sleep(0.05)
    assert lifecycle._running["calls"] == 1                  # outer and inner count once
    start = time.perf_counter()
    assert lifecycle._drain(timeout=10) is True
    assert ran == ["inner"] and time.perf_counter() - start < 5
    late = threading.Thread(target=op, args=("late",), daemon=True)
    late.start()
    late.join(timeout=0.3)
    assert late.is_alive() and "late" not in ran            # parked before the op
    assert outer() == "inner" and lifecycle._running["calls"] == 0   # main thread still runs
    assert ran == ["inner", "inner"]
    lifecycle._never.set()                  # (only a test lets a parked thread go)
    late.join(timeout=10)
    assert not late.is_alive()


def test_exit_hook_gives_up_after_its_timeout(lifecycle):
    import threading
    import time

    release = threading.Event()
    stuck = threading.Thread(target=lifecycle.entry_point(release.wait), daemon=True)
    stuck.start()
    deadline = time.monotonic() + 10
    while lifecycle._running["calls"] == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert lifecycle._running["calls"] == 1
    assert lifecycle._drain(timeout=0.1) is False           # never waits forever
    release.set()
    stuck.join(timeout=10)

# }}}
