"""Program layer: build and run on the real device, cache keys, the disk cache (fresh process,
corrupted entries, unwritable directory), build errors, threads and the launch counter."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pyrnn_cl import programs, sources
from pyrnn_cl.devices import list_devices, resolve_device
from pyrnn_cl.errors import BuildError, CompilerWarning
from pyrnn_cl.programs import CacheWarning, enqueue, get_program, launch_count

REPO_ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger(__name__)


@pytest.fixture
def device():
    """The default device; the test is skipped only when there is no OpenCL device at all."""
    if not list_devices():
        pytest.skip("no OpenCL device")
    return resolve_device()


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets its own empty disk cache and never touches the user's."""
    path = tmp_path / "cache"
    monkeypatch.setenv("PYRNN_CL_CACHE_DIR", str(path))
    for name in ("PYRNN_CL_NO_CACHE", "PYRNN_CL_COMPILER_OUTPUT", "PYRNN_CL_DUMP_SOURCE"):
        monkeypatch.delenv(name, raising=False)
    return path


def run_axpy(device, program, n=1000, dtype=np.float32, alpha=2.5, queue=None, seed=0):
    """Run ``pyrnn_axpy`` on ``n`` random values; return (result, numpy expectation)."""
    import pyopencl as cl

    queue = queue or device.queue
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    scale = int(program.defines.get("SELFCHECK_SCALE", 1))
    expected = scale * dtype(alpha) * x + y
    mf = cl.mem_flags
    x_buf = cl.Buffer(device.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    y_buf = cl.Buffer(device.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
    kernel = program.kernel("pyrnn_axpy")
    kernel.set_args(np.int32(n), dtype(alpha), x_buf, y_buf)
    local = min(64, program.work_group_size("pyrnn_axpy"))
    enqueue(queue, kernel, -(-n // local) * local, local)
    out = np.empty_like(y)
    cl.enqueue_copy(queue, out, y_buf)
    return out, expected


def assert_close(out, expected):
    """float32 axpy within rounding (the device may fuse the multiply-add)."""
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


# {{{ build and run


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_build_and_run(device, dtype):
    if dtype == np.float64 and not device.info.has_fp64:
        pytest.skip(f"{device.info.name} has no cl_khr_fp64")
    defines = {"PYRNN_DTYPE": sources.dtype_code(dtype), "SELFCHECK_SCALE": 3}
    program = get_program(device, "selfcheck.cl", defines)
    assert program.kernel_names == ["pyrnn_axpy"]
    assert 1 <= program.work_group_size("pyrnn_axpy") <= device.info.max_work_group_size
    assert program.preferred_multiple("pyrnn_axpy") >= 1
    out, expected = run_axpy(device, program, dtype=dtype)
    rtol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(out, expected, rtol=rtol, atol=rtol)
    log.info("%r", program)


def test_memo_and_per_thread_kernels(device):
    one = get_program(device, "selfcheck.cl", {"PYRNN_DTYPE": 1})
    assert get_program(None, "selfcheck.cl", {"PYRNN_DTYPE": 1}) is one
    assert get_program(device.info.index, "selfcheck.cl", {"PYRNN_DTYPE": 1}) is one
    assert get_program(device, "selfcheck.cl", {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 2}) is not one
    assert one.kernel("pyrnn_axpy") is one.kernel("pyrnn_axpy")
    other = []
    worker = threading.Thread(target=lambda: other.append(one.kernel("pyrnn_axpy")))
    worker.start()
    worker.join()
    assert other[0] is not one.kernel("pyrnn_axpy")
    with pytest.raises(KeyError, match="pyrnn_axpy"):
        one.kernel("no_such_kernel")


def test_memo_first_look_up(device):
    """The first look-up (the arguments as given) and the full one (sorted, stringified
    defines) give the same program; defines in another order or as strings find it too, and
    clear_memo forgets both."""
    defines = {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 2}
    one = get_program(device, "selfcheck.cl", defines)
    assert get_program(device, "selfcheck.cl", defines) is one                # first look-up
    assert get_program(device, "selfcheck.cl",
                       {"SELFCHECK_SCALE": "2", "PYRNN_DTYPE": 1}) is one      # full look-up
    assert get_program(device, "selfcheck.cl", {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 3}) \
        is not one
    programs.clear_memo()
    again = get_program(device, "selfcheck.cl", defines)
    assert again is not one
    assert get_program(device, "selfcheck.cl", defines) is again


def test_enqueue_counts_launches(device):
    import pyopencl as cl

    program = get_program(device, "selfcheck.cl", {"PYRNN_DTYPE": 1})
    before = launch_count()
    run_axpy(device, program, n=10)
    assert launch_count() == before + 1
    kernel = program.kernel("pyrnn_axpy")
    event = enqueue(device.queue, kernel, 0, 8)  # empty launch: nothing runs, nothing counted
    assert isinstance(event, cl.Event)
    event.wait()
    assert launch_count() == before + 1
    with pytest.raises(ValueError, match="multiple"):
        enqueue(device.queue, kernel, 10, 4)
    with pytest.raises(ValueError, match="rank"):
        enqueue(device.queue, kernel, (8, 8), 4)


def test_a_failed_launch_raises_the_opencl_error_with_a_note(device):
    """A launch the driver refuses raises its ``cl.Error`` carrying a note that names the
    kernel and sizes, on every Python: 3.9/3.10 have no ``BaseException.add_note`` (it used to
    turn the OpenCL error into an AttributeError there), so that case is forced too."""
    import pyopencl as cl

    from pyrnn_cl import programs

    program = get_program(device, "selfcheck.cl", {"PYRNN_DTYPE": 1})
    run_axpy(device, program, n=10)                   # the kernel's arguments are set
    kernel = program.kernel("pyrnn_axpy")
    too_big = 2 * max(device.info.max_work_group_size, 1)
    with pytest.raises(cl.Error) as caught:
        enqueue(device.queue, kernel, too_big, too_big)
    assert any("launching kernel pyrnn_axpy" in n for n in caught.value.__notes__)

    class OldError(Exception):          # an exception without add_note, as on Python < 3.11
        add_note = property(lambda self: (_ for _ in ()).throw(AttributeError("add_note")))

    old = OldError("driver said no")
    assert not hasattr(old, "add_note")
    programs._add_note(old, "first")
    programs._add_note(old, "second")
    assert old.__notes__ == ["first", "second"]

# }}}

# {{{ cache keys


def test_cache_key_stability_and_invalidation(device, tmp_path):
    info = device.info
    options = device.profile.build_options(info)
    (tmp_path / "k.cl").write_text('#include "k.h"\n__kernel void k(__global float *a) {}\n')
    (tmp_path / "k.h").write_text("#define K_HEADER 1\n")
    text = sources.build_source("k.cl", {"PYRNN_DTYPE": 1}, tmp_path)
    key = programs.cache_key(text, options, info)
    assert key == programs.cache_key(sources.build_source("k.cl", {"PYRNN_DTYPE": 1}, tmp_path),
                                     list(options), dataclasses.replace(info))
    assert len(key) == 64 and int(key, 16) >= 0

    changed = {
        "define": programs.cache_key(
            sources.build_source("k.cl", {"PYRNN_DTYPE": 2}, tmp_path), options, info),
        "option": programs.cache_key(text, [*options, "-DEXTRA"], info),
        "driver": programs.cache_key(
            text, options, dataclasses.replace(info, driver_version=info.driver_version + "1")),
        "device": programs.cache_key(
            text, options, dataclasses.replace(info, name=info.name + " II")),
        "platform": programs.cache_key(
            text, options, dataclasses.replace(info, platform_version="OpenCL 9.9")),
    }
    (tmp_path / "k.h").write_text("#define K_HEADER 2\n")  # an included header changes
    changed["header"] = programs.cache_key(
        sources.build_source("k.cl", {"PYRNN_DTYPE": 1}, tmp_path), options, info)
    assert all(value != key for value in changed.values()), changed
    assert len(set(changed.values())) == len(changed)


def test_cache_key_covers_library_version(device, monkeypatch):
    text = sources.build_source("selfcheck.cl", {"PYRNN_DTYPE": 1})
    key = programs.cache_key(text, [], device.info)
    monkeypatch.setattr(programs, "__version__", "999.0")
    assert programs.cache_key(text, [], device.info) != key

# }}}

# {{{ disk cache

_CHILD = textwrap.dedent("""
    import json, logging, sys, time
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    import numpy as np
    start = time.perf_counter()
    from pyrnn_cl import programs
    from pyrnn_cl.devices import resolve_device
    dev = resolve_device()
    prog = programs.get_program(dev, "selfcheck.cl", {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 5})
    seconds = time.perf_counter() - start
    print(json.dumps({"stats": programs.cache_stats(), "program_seconds": prog.build_seconds,
                      "total_seconds": seconds, "from_disk": prog.from_disk_cache}))
""")


@pytest.fixture
def binary_cache(device, monkeypatch):
    """pyrnn_cl's binary cache in use on ``device``, also where the implementation caches builds
    itself (PoCL), for the tests of that cache."""
    monkeypatch.setattr(device.profile, "keeps_build_cache", lambda: False)
    return device


def test_fresh_process_hits_disk_cache(device, cache_dir):
    env = dict(os.environ, PYRNN_CL_DEVICE=device.info.index,
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    if device.profile.keeps_build_cache():
        env["POCL_KERNEL_CACHE"] = "0"  # PoCL's cache off: pyrnn_cl's binary cache is used
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        runs.append((json.loads(done.stdout.strip().splitlines()[-1]), done.stderr))
    (first, first_log), (second, second_log) = runs
    assert first["stats"]["source_builds"] == 1 and first["stats"]["disk_writes"] == 1
    assert not first["from_disk"] and "built selfcheck.cl" in first_log
    assert second["stats"]["disk_hits"] == 1 and second["stats"]["source_builds"] == 0
    assert second["from_disk"] and "loaded from the disk cache" in second_log
    assert len(list((cache_dir / "programs").glob("*.clbin"))) == 1
    log.info("selfcheck.cl: source build %.3f s, disk-cache load %.3f s (process totals %.2f s "
             "and %.2f s)", first["program_seconds"], second["program_seconds"],
             first["total_seconds"], second["total_seconds"])


def test_implementation_with_its_own_build_cache_gets_no_entries(device, cache_dir,
                                                                  monkeypatch):
    """Fetching a program's binary from an implementation that caches builds itself (PoCL)
    compiles every kernel of it: pyrnn_cl never asks, and writes nothing."""
    def no_binaries(raw, cl_device):
        raise AssertionError("the binary of a program was fetched")

    monkeypatch.setattr(device.profile, "keeps_build_cache", lambda: True)
    monkeypatch.setattr(programs, "_binary_of", no_binaries)
    program = _fresh(device, {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 3})
    assert not program.from_disk_cache
    assert not (cache_dir / "programs").exists()
    out, expected = run_axpy(device, program)
    assert_close(out, expected)


def test_pocl_keeps_its_own_build_cache_unless_switched_off(monkeypatch):
    from pyrnn_cl.devices.pocl import PoclProfile

    monkeypatch.delenv("POCL_KERNEL_CACHE", raising=False)
    assert PoclProfile().keeps_build_cache()
    monkeypatch.setenv("POCL_KERNEL_CACHE", "0")
    assert not PoclProfile().keeps_build_cache()
    monkeypatch.setenv("POCL_KERNEL_CACHE", "1")
    assert PoclProfile().keeps_build_cache()


def _fresh(device, defines):
    """A program that is not memoized, so the disk cache is consulted."""
    programs.clear_memo()
    return get_program(device, "selfcheck.cl", defines)


@pytest.mark.parametrize("damage", ["truncated", "bad_header", "refused_binary"])
def test_bad_cache_entry_warns_and_rebuilds(binary_cache, damage):
    device = binary_cache
    defines = {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 7}
    first = _fresh(device, defines)
    path = programs.entry_path(first.cache_key)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[:-100])
    elif damage == "bad_header":
        path.write_bytes(b"garbage" + data)
    else:  # a well-formed entry whose binary the driver refuses (as after a driver update)
        path.write_bytes(programs.encode_entry(b"\x00not a binary\x00" * 64))
    before = programs.cache_stats()
    with pytest.warns(CacheWarning, match="rebuild"):
        again = _fresh(device, defines)
    after = programs.cache_stats()
    assert not again.from_disk_cache
    assert after["source_builds"] == before["source_builds"] + 1
    assert after["disk_rejects"] == before["disk_rejects"] + 1
    out, expected = run_axpy(device, again)
    assert_close(out, expected)
    assert programs.decode_entry(path.read_bytes())  # the entry was replaced by a good one
    assert _fresh(device, defines).from_disk_cache


def test_unwritable_cache_dir_warns_once(binary_cache, tmp_path, monkeypatch):
    device = binary_cache
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    # A path below a regular file cannot be created, even by root.
    monkeypatch.setenv("PYRNN_CL_CACHE_DIR", str(blocker / "cache"))
    programs.clear_memo()
    with pytest.warns(CacheWarning) as record:
        first = get_program(device, "selfcheck.cl", {"PYRNN_DTYPE": 1})
        second = get_program(device, "selfcheck.cl", {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 2})
    cache_warnings = [w for w in record if issubclass(w.category, CacheWarning)]
    assert len(cache_warnings) == 1
    assert "not writable" in str(cache_warnings[0].message)
    for program in (first, second):
        out, expected = run_axpy(device, program)
        assert_close(out, expected)


def test_low_space_for_pocls_cache_warns_once(device, tmp_path, monkeypatch):
    """PoCL kills the process when it cannot write its own kernel cache ("LLVM ERROR: IO
    failure ... No space left on device"): before its builds, a disk with less than
    ``POCL_CACHE_MIN_FREE`` bytes free under ``POCL_CACHE_DIR`` gives one ``CacheWarning``
    naming the directory and the fix; enough room, or another runtime, gives none."""
    import collections
    import types
    import warnings

    usage = collections.namedtuple("usage", "total used free")
    asked, free = [], [programs.POCL_CACHE_MIN_FREE - 1]

    def disk_usage(path):
        asked.append(Path(path))
        return usage(2**40, 2**40 - free[0], free[0])

    monkeypatch.setattr(programs.shutil, "disk_usage", disk_usage)
    monkeypatch.setattr(programs, "_pocl_checked", set())
    pocl_dir = tmp_path / "pocl" / "kcache"           # not created yet: its parent is asked
    monkeypatch.setenv("POCL_CACHE_DIR", str(pocl_dir))
    other = types.SimpleNamespace(profile=types.SimpleNamespace(build_cache_dir=lambda: None))
    programs._check_pocl_cache_space(other)
    assert not asked                                  # no cache of its own: not checked
    if device.profile.build_cache_dir() is None:
        pytest.skip(f"{device.info.describe()} keeps no build cache of its own")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for scale in (11, 12):
            _fresh(device, {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": scale})
    low = [w for w in record if issubclass(w.category, CacheWarning)]
    assert len(low) == 1 and asked == [tmp_path], (asked, [str(w.message) for w in record])
    message = str(low[0].message)
    assert str(pocl_dir) in message and "POCL_CACHE_DIR" in message, message
    assert "No space left on device" in message and "below 200 MB" in message, message
    monkeypatch.setattr(programs, "_pocl_checked", set())
    free[0] = programs.POCL_CACHE_MIN_FREE            # enough room
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        _fresh(device, {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 13})
    assert len(asked) == 2


def test_pocl_cache_dir_as_pocl_chooses_it(monkeypatch, tmp_path):
    from pyrnn_cl import _env

    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path / "p"))
    assert _env.pocl_cache_dir() == tmp_path / "p"
    monkeypatch.delenv("POCL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _env.pocl_cache_dir() == tmp_path / "xdg" / "pocl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _env.pocl_cache_dir() == tmp_path / "home" / ".cache" / "pocl"


def test_no_cache_and_dump_source(binary_cache, cache_dir, monkeypatch):
    device = binary_cache
    monkeypatch.setenv("PYRNN_CL_NO_CACHE", "1")
    monkeypatch.setenv("PYRNN_CL_DUMP_SOURCE", "1")
    program = _fresh(device, {"PYRNN_DTYPE": 1})
    assert not (cache_dir / "programs").exists()
    dumped = cache_dir / "source" / f"{program.cache_key}.cl"
    assert dumped.read_text() == program.source

# }}}

# {{{ errors and logs


def test_build_error_carries_everything(device, tmp_path):
    (tmp_path / "helper.h").write_text("#define HELPER 1\n")
    (tmp_path / "broken.cl").write_text(
        '#include "helper.h"\n'
        "__kernel void broken(__global float *a)\n"
        "{\n"
        "    a[0] = undefined_identifier_xyz;\n"
        "}\n")
    with pytest.raises(BuildError) as err:
        get_program(device, "broken.cl", {"PYRNN_DTYPE": 1}, source_dir=tmp_path)
    error = err.value
    message = str(error)
    assert device.info.name in error.device and device.info.name in message
    assert error.options == device.profile.build_options(device.info)
    assert "undefined_identifier_xyz" in error.log
    assert "broken.cl" in message and error.saved_path in message
    assert Path(error.saved_path).read_text() == error.source
    assert "#define PYRNN_DTYPE 1" in error.source
    if device.profile.name == "pocl":  # PoCL keeps the file name and line of #line markers
        assert "broken.cl:4" in error.log
    Path(error.saved_path).unlink()


@pytest.mark.parametrize("failures", [1, programs.BUILD_RETRIES + 1])
def test_build_failing_without_a_diagnostic_is_tried_again(device, monkeypatch, failures):
    """A build that fails with no compiler error in its log (PoCL 3.1, several processes
    filling one empty cache at once: "Device ... failed to build the program") is built
    again, up to BUILD_RETRIES times; one that keeps failing raises BuildError; one whose log
    holds a compiler error is not tried again."""
    import pyopencl as cl

    real, calls = programs._raw_build, []

    def flaky(raw, options, cl_device):
        calls.append(1)
        if len(calls) <= failures:
            raise cl.RuntimeError("clBuildProgram failed: BUILD_PROGRAM_FAILURE")
        real(raw, options, cl_device)

    monkeypatch.setattr(programs, "_raw_build", flaky)
    monkeypatch.setattr(programs, "_build_log",
                        lambda raw, d: "Device X failed to build the program\n")
    before = programs.cache_stats().get("build_retries", 0)
    defines = {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 3 + failures}
    if failures > programs.BUILD_RETRIES:
        with pytest.raises(BuildError, match="failed to build the program") as err:
            _fresh(device, defines)
        assert len(calls) == programs.BUILD_RETRIES + 1
        Path(err.value.saved_path).unlink()
    else:
        got, want = run_axpy(device, _fresh(device, defines))
        assert_close(got, want)
        assert len(calls) == failures + 1
    assert programs.cache_stats()["build_retries"] - before == min(failures,
                                                                   programs.BUILD_RETRIES)
    calls.clear()
    monkeypatch.setattr(programs, "_build_log", lambda raw, d: "x.cl:4:5: error: no such thing\n")
    with pytest.raises(BuildError, match="no such thing") as err:
        _fresh(device, dict(defines, SELFCHECK_SCALE=11))
    assert len(calls) == 1
    Path(err.value.saved_path).unlink()


def test_build_error_message_is_short(device):
    class FakeError(Exception):
        code, routine = -11, "clBuildProgram"

    long_log = "\n".join(f"log line {i}" for i in range(100))
    error = programs._build_error(FakeError(), device, "x.cl", "source", ["-cl-std=CL1.2"],
                                  long_log)
    message = str(error)
    assert "log line 29" in message and "log line 30" not in message
    assert "70 more lines" in message and error.log == long_log
    assert "BUILD_PROGRAM_FAILURE" in message and "-cl-std=CL1.2" in message
    Path(error.saved_path).unlink()


def test_success_log_goes_to_logging(device, tmp_path, monkeypatch, caplog):
    (tmp_path / "noisy.cl").write_text(
        '#warning "pyrnn_cl test warning"\n__kernel void noisy(__global float *a) { a[0] = 1; }\n')
    programs.clear_memo()
    with caplog.at_level(logging.DEBUG, logger="pyrnn_cl"):
        get_program(device, "noisy.cl", {"PYRNN_DTYPE": 1}, source_dir=tmp_path)
    if not any("pyrnn_cl test warning" in r.getMessage() for r in caplog.records):
        pytest.skip(f"{device.info.name} does not report #warning in its build log")
    assert any(r.levelno == logging.INFO and "built noisy.cl" in r.getMessage()
               for r in caplog.records)
    monkeypatch.setenv("PYRNN_CL_COMPILER_OUTPUT", "1")
    monkeypatch.setenv("PYRNN_CL_NO_CACHE", "1")
    programs.clear_memo()
    # (another define: a driver that keeps its own cache of builds, NVIDIA's, returns a cached
    # build of the same source and options with an empty log)
    with pytest.warns(CompilerWarning, match="pyrnn_cl test warning"):
        get_program(device, "noisy.cl", {"PYRNN_DTYPE": 1, "NOISY_AGAIN": 1}, source_dir=tmp_path)

# }}}

# {{{ threads


def test_threads_share_one_program(device):
    programs.clear_memo()
    before = programs.cache_stats()
    defines = {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 4}
    start = threading.Barrier(4)
    results, errors, seen = {}, [], {}

    def work(index):
        import pyopencl as cl

        try:
            queue = cl.CommandQueue(device.context, device.cl_device)
            start.wait()
            program = get_program(device, "selfcheck.cl", defines)
            seen[index] = (program, program.kernel("pyrnn_axpy"))
            worst = 0.0
            for round_ in range(25):
                out, expected = run_axpy(device, program, n=257 + index, queue=queue,
                                         seed=100 * index + round_)
                worst = max(worst, float(np.max(np.abs(out - expected))))
            results[index] = worst
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert all(worst < 1e-5 for worst in results.values()), results
    assert len({id(p) for p, _ in seen.values()}) == 1  # one program...
    assert len({id(k) for _, k in seen.values()}) == 4  # ...and a kernel object per thread
    after = programs.cache_stats()
    built = (after["source_builds"] - before["source_builds"]) + (
        after["disk_hits"] - before["disk_hits"])
    assert built == 1

# }}}


# {{{ the first-use notice


@pytest.fixture
def notice(monkeypatch):
    """A fresh notice state (the process-wide one may have spoken) and builds that take
    ``slow_build.seconds`` longer than they do."""
    monkeypatch.setattr(programs, "_notice", programs._CompileNotice())
    monkeypatch.delenv("PYRNN_CL_QUIET", raising=False)
    real_build = programs._raw_build

    def slow_build(raw, options, cl_device):
        time.sleep(slow_build.seconds)
        real_build(raw, options, cl_device)

    slow_build.seconds = 0.0
    monkeypatch.setattr(programs, "_raw_build", slow_build)
    return slow_build


def test_a_slow_build_prints_one_notice_with_progress(device, notice, capsys, monkeypatch):
    monkeypatch.setattr(programs, "NOTICE_AFTER_SECONDS", 0.2)
    monkeypatch.setattr(programs, "PROGRESS_EVERY_SECONDS", 0.3)
    notice.seconds = 1.0
    _fresh(device, {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 11})
    err = capsys.readouterr().err
    first = [line for line in err.splitlines() if "compiling OpenCL kernels for" in line]
    assert len(first) == 1 and device.info.name in first[0] and "first use" in first[0]
    assert "PYRNN_CL_QUIET" in first[0]
    assert "still compiling selfcheck.cl" in err
    _fresh(device, {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 12})   # once per process
    assert "compiling OpenCL kernels" not in capsys.readouterr().err


def test_short_builds_add_up_to_the_notice(device, capsys, monkeypatch):
    """Builds shorter than the threshold add up: the notice comes with the one that crosses it.
    (The notice's own context, with sleeps for builds: real build times vary with the load.)"""
    monkeypatch.setattr(programs, "NOTICE_AFTER_SECONDS", 0.6)
    monkeypatch.delenv("PYRNN_CL_QUIET", raising=False)
    notice = programs._CompileNotice()
    with notice.building(device, "first.cl"):
        time.sleep(0.2)
    assert "compiling OpenCL kernels" not in capsys.readouterr().err   # 0.2 s: silent
    with notice.building(device, "second.cl"):
        time.sleep(0.5)
    assert "compiling OpenCL kernels" in capsys.readouterr().err      # 0.7 s in all


def test_quiet_silences_the_notice(device, notice, capsys, monkeypatch):
    monkeypatch.setattr(programs, "NOTICE_AFTER_SECONDS", 0.1)
    monkeypatch.setenv("PYRNN_CL_QUIET", "1")
    notice.seconds = 0.4
    _fresh(device, {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 15})
    assert "pyrnn_cl" not in capsys.readouterr().err


def test_loads_from_the_memo_print_nothing(device, notice, capsys, monkeypatch):
    monkeypatch.setattr(programs, "NOTICE_AFTER_SECONDS", 0.0)
    get_program(device, "selfcheck.cl", {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 16})
    capsys.readouterr()
    monkeypatch.setattr(programs, "_notice", programs._CompileNotice())
    get_program(device, "selfcheck.cl", {"PYRNN_DTYPE": 1, "SELFCHECK_SCALE": 16})
    assert capsys.readouterr().err == ""

# }}}
