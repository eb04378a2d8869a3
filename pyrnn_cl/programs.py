"""Build, cache and launch OpenCL programs.

``get_program(device, "recurrence.cl", {"PYRNN_DTYPE": 1, ...})`` returns a :class:`Program`,
built at most once per (context, device, source, defines, options) in this process and at most
once per machine thanks to a disk cache of program binaries. ``enqueue`` is the one place where
the library launches kernels; it counts launches (``launch_count()``) so tests and ``selftest`` can
tell that work really ran on a device (pitfalls C14).

Disk cache (API.md §4, style.md §1.1/§1.7). One file per program,
``<cache_dir>/programs/<key>.clbin``. ``key`` is the SHA-256 of the expanded source (which holds
every included header and the ``#define`` block), the build options, the platform
vendor/name/version, the device vendor/name/version, the driver version, the pyrnn_cl version and
the cache format. The file is ``MAGIC``, the SHA-256 of the binary, a newline, and the binary, so
a truncated or corrupted file is detected. Files are written to a temporary name in the same
directory and moved into place with ``os.replace``, so readers never see half a file and
concurrent writers of one key simply race to the same content. Any unreadable entry, or one the
driver refuses (``CL_INVALID_BINARY`` after a driver/OS update, pitfalls C5), gives a
:class:`CacheWarning` and a rebuild from source; an unwritable cache directory gives one warning
and the process goes on with the in-memory memo only. Implementations that cache builds
themselves (PoCL: ``VendorProfile.keeps_build_cache``) get no entries: fetching their binaries
costs a compile of every kernel, and a rebuild from source hits their own cache.

pyopencl's own ``Program.build`` is bypassed: its binary cache would compile twice on PoCL
(inducer/pyopencl#731, pitfalls C15), it adds its include path and ``PYOPENCL_BUILD_OPTIONS``
outside our cache key, and it turns benign build logs into warnings (pitfalls D3). We build
pyopencl's underlying program object directly and route the log through ``logging``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyopencl as cl

from . import _env, sources
from ._version import __version__
from .errors import BuildError, CompilerWarning

__all__ = [
    "Program",
    "CacheWarning",
    "get_program",
    "enqueue",
    "launcher",
    "enqueue_on",
    "launch_count",
    "cache_key",
    "cache_stats",
    "clear_memo",
]

logger = logging.getLogger("pyrnn_cl")

#: Bump when the cache file layout or the key material changes.
CACHE_FORMAT = 1
_MAGIC = b"PYRNN_CL-BINARY %d\n" % CACHE_FORMAT
#: Build-log lines shown in ``str(BuildError)``; the whole log is in ``BuildError.log``.
LOG_LINES_IN_MESSAGE = 30
#: Free bytes below which the disk of PoCL's kernel cache gives a :class:`CacheWarning`: PoCL
#: kills the process when it cannot write there (``LLVM ERROR: IO failure ... No space left
#: on device``), so it is better to hear before its builds.
POCL_CACHE_MIN_FREE = 200 * 2**20


class CacheWarning(UserWarning):
    """The disk cache could not be used (bad entry or unwritable directory); never fatal."""


# {{{ pyopencl adapter
#
# pyopencl's public Program.build adds its own cache and options (module docstring). Its
# underlying ``_cl._Program`` is the plain OpenCL program object; ``_build`` is clBuildProgram
# without pyopencl's log-to-warning step. Both have been stable for many releases; if a future
# pyopencl renames them, the public calls below are the fallback.


def _raw_from_source(context, source: str):
    with driver_lock:
        raw_cls = getattr(getattr(cl, "_cl", None), "_Program", None)
        if raw_cls is not None:
            return raw_cls(context, source)
        return cl.Program(context, source)._get_prg()  # pragma: no cover - old/new pyopencl


def _raw_from_binary(context, cl_device, binary: bytes):
    with driver_lock:
        raw_cls = getattr(getattr(cl, "_cl", None), "_Program", None)
        if raw_cls is not None:
            return raw_cls(context, [cl_device], [binary])
        return cl.Program(context, [cl_device], [binary])._get_prg()  # pragma: no cover


def _raw_build(raw, options: Sequence[str], cl_device) -> None:
    """clBuildProgram; raises ``cl.Error`` on failure."""
    with driver_lock:
        options_bytes = " ".join(options).encode()
        if hasattr(raw, "_build"):
            raw._build(options=options_bytes, devices=[cl_device])
        else:  # pragma: no cover - pyopencl without the private entry point
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                raw.build(options_bytes, [cl_device])


def _build_log(raw, cl_device) -> str:
    try:
        return raw.get_build_info(cl_device, cl.program_build_info.LOG) or ""
    except Exception:  # noqa: BLE001 - the log is diagnostics; never hide the real error
        return ""


def _binary_of(raw, cl_device) -> bytes | None:
    """The program binary for ``cl_device`` (programs on multi-device contexts hold several)."""
    try:
        devices = raw.get_info(cl.program_info.DEVICES)
        binaries = raw.get_info(cl.program_info.BINARIES)
    except cl.Error:
        return None
    for dev, binary in zip(devices, binaries):
        if dev == cl_device and binary:
            return bytes(binary)
    return None


def _error_text(exc) -> str:
    code = getattr(exc, "code", None)
    try:
        name = cl.status_code.to_string(code)  # type: ignore[operator]  # (pyopencl's stub)
    except Exception:  # noqa: BLE001
        name = str(code)
    routine = getattr(exc, "routine", "") or "build"
    return f"{routine} returned {name}"

# }}}

# {{{ statistics and launch counting

_stats: Counter = Counter()
_stats_lock = threading.Lock()
_launches = 0
_launch_lock = threading.Lock()

#: Held across each program's creation and ``clBuildProgram``, and across each command pyrnn_cl
#: queues (launches, copies, fills, maps), never across a wait for the device: no command is
#: queued while a program builds. On NVIDIA's OpenCL a process whose threads queued commands
#: while another thread built a program crashed in a thread of the driver (the thread test run
#: beside the suite on an H200: 5 of 12 runs crashed; with builds exclusive against queueing,
#: 0 of 19, and 0 of 19 with every driver call serialised; docs/platforms.md). Uncontended it
#: costs a fraction of a microsecond per command; contended, other threads' commands wait while
#: a program builds (once per program and process).
driver_lock = threading.RLock()


def _count(event: str) -> None:
    with _stats_lock:
        _stats[event] += 1


def cache_stats() -> dict[str, int]:
    """Process-wide counters: ``source_builds``, ``disk_hits``, ``disk_rejects``,
    ``disk_writes``, ``memo_hits`` and ``build_retries`` (builds from source tried again after
    a failure without a compiler diagnostic)."""
    with _stats_lock:
        return {
            name: _stats[name]
            for name in ("source_builds", "disk_hits", "disk_rejects", "disk_writes", "memo_hits",
                         "build_retries")
        }


def launch_count() -> int:
    """How many kernels :func:`enqueue` has launched in this process."""
    with _launch_lock:
        return _launches

# }}}

# {{{ disk cache

_warned_dirs: set[str] = set()
_unwritable_dirs: set[str] = set()
_warn_lock = threading.Lock()


def cache_key(source: str, options: Sequence[str], info) -> str:
    """The disk-cache key (hex SHA-256) of ``source`` built with ``options`` for ``info``."""
    material = [
        f"pyrnn_cl-cache-format {CACHE_FORMAT}",
        f"pyrnn_cl {__version__}",
        "options " + " ".join(options),
        f"platform {info.platform_vendor} | {info.platform_name} | {info.platform_version}",
        f"device {info.vendor} | {info.name} | {info.version}",
        f"driver {info.driver_version}",
        "source",
        source,
    ]
    return hashlib.sha256("\n".join(material).encode("utf-8")).hexdigest()


def _programs_dir() -> Path:
    return _env.cache_dir() / "programs"


def entry_path(key: str) -> Path:
    """Where the binary of ``key`` is (or would be) stored."""
    return _programs_dir() / f"{key}.clbin"


def encode_entry(binary: bytes) -> bytes:
    """The cache file content for ``binary``: magic line, checksum line, binary."""
    return _MAGIC + hashlib.sha256(binary).hexdigest().encode("ascii") + b"\n" + binary


def decode_entry(data: bytes) -> bytes:
    """The binary in a cache file; ``ValueError`` if the file is not a valid entry."""
    if not data.startswith(_MAGIC):
        raise ValueError("not a pyrnn_cl cache entry (bad header)")
    rest = data[len(_MAGIC):]
    checksum, sep, binary = rest.partition(b"\n")
    if not sep or hashlib.sha256(binary).hexdigest().encode("ascii") != checksum:
        raise ValueError("checksum mismatch (truncated or corrupted file)")
    if not binary:
        raise ValueError("empty binary")
    return binary


def _warn_once(directory: Path, message: str) -> None:
    with _warn_lock:
        if str(directory) in _warned_dirs:
            return
        _warned_dirs.add(str(directory))
    warnings.warn(message, CacheWarning, stacklevel=4)


_pocl_checked: set[str] = set()


def _check_pocl_cache_space(device) -> None:
    """Warn once per directory (:class:`CacheWarning`) when PoCL's kernel cache, where PoCL
    writes during builds and first launches, is on a disk with less than
    :data:`POCL_CACHE_MIN_FREE` bytes free; PoCL aborts the process when a write there fails.
    Other runtimes (no ``build_cache_dir`` in their profile) are not checked."""
    directory = device.profile.build_cache_dir()
    if directory is None:
        return
    with _warn_lock:
        if str(directory) in _pocl_checked:
            return
        _pocl_checked.add(str(directory))
    existing = directory
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent                   # PoCL creates the directory later
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        return
    if free < POCL_CACHE_MIN_FREE:
        warnings.warn(
            f"pyrnn_cl: only {free / 2**20:.1f} MB free (below {POCL_CACHE_MIN_FREE // 2**20} MB) "
            f"on the disk of PoCL's kernel cache "
            f"{directory}; PoCL kills the process when a write there fails (\"LLVM ERROR: IO "
            "failure ... No space left on device\"). Free some space, set POCL_CACHE_DIR to "
            "a directory on a disk with room (README, Troubleshooting).", CacheWarning,
            stacklevel=4)


def _disk_read(key: str) -> bytes | None:
    path = entry_path(key)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None  # a miss; an unusable directory is reported once when writing
    except OSError as exc:
        _warn_once(path.parent, f"pyrnn_cl kernel cache {path.parent} is not readable ({exc}); "
                                "building kernels from source")
        return None
    try:
        return decode_entry(data)
    except ValueError as exc:
        _count("disk_rejects")
        warnings.warn(f"pyrnn_cl: ignoring invalid kernel cache entry {path}: {exc}; rebuilding",
                      CacheWarning, stacklevel=4)
        return None


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".tmp-", suffix=path.suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise


def _disk_write(key: str, binary: bytes) -> None:
    path = entry_path(key)
    directory = str(path.parent)
    if directory in _unwritable_dirs:
        return
    try:
        _write_atomically(path, encode_entry(binary))
    except OSError as exc:
        with _warn_lock:
            _unwritable_dirs.add(directory)
        _warn_once(path.parent, f"pyrnn_cl kernel cache {path.parent} is not writable ({exc}); "
                                "kernels are kept in memory for this process only. Set "
                                "PYRNN_CL_CACHE_DIR to a writable directory, or "
                                "PYRNN_CL_NO_CACHE=1 to silence this.")
        return
    _count("disk_writes")


def _dump_source(key: str, source: str) -> None:
    """``PYRNN_CL_DUMP_SOURCE=1``: keep every expanded source for inspection."""
    path = _env.cache_dir() / "source" / f"{key}.cl"
    try:
        _write_atomically(path, source.encode("utf-8"))
    except OSError:
        fd, name = tempfile.mkstemp(prefix="pyrnn_cl_", suffix=".cl")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(source)
        path = Path(name)
    logger.info("pyrnn_cl: expanded source written to %s", path)

# }}}

# {{{ Program


class Program:
    """A built program for one device, with per-thread kernel objects.

    ``kernel(name)`` gives each thread its own ``cl.Kernel`` (created once per thread and
    reused): ``clSetKernelArg`` on a kernel shared between threads races (pitfalls C17).
    """

    def __init__(self, raw, device, name: str, defines: Mapping, options: Sequence[str],
                 source: str, key: str, from_disk_cache: bool, build_seconds: float):
        self.cl_program = cl.Program(raw)
        # kernels are made from the raw program: cl.Kernel(cl.Program, name) would first look up
        # a "_source" kernel and make Oclgrind's API checker report a failing clCreateKernel
        self._raw = raw
        self.device = device
        self.name = name
        self.defines = dict(defines)
        self.options = list(options)
        self.source = source
        self.cache_key = key
        self.from_disk_cache = from_disk_cache
        self.build_seconds = build_seconds
        self._local = threading.local()
        self._wg_sizes: dict[str, int] = {}

    def kernel(self, name: str) -> cl.Kernel:
        """This thread's ``cl.Kernel`` for ``name``; ``KeyError`` if the program has none."""
        kernels = getattr(self._local, "kernels", None)
        if kernels is None:
            kernels = self._local.kernels = {}
        kernel = kernels.get(name)
        if kernel is None:
            try:
                kernel = cl.Kernel(self._raw, name)
            except cl.Error as exc:
                raise KeyError(
                    f"kernel {name!r} not found in {self.name} ({_error_text(exc)}); it has: "
                    f"{', '.join(self.kernel_names) or 'no kernels'}"
                ) from exc
            kernels[name] = kernel
        return kernel

    @functools.cached_property
    def kernel_names(self) -> list[str]:
        """Names of the kernels in this program (asked once: a built program's kernels do
        not change, and layers look at them on every call). The count is asked first: on
        NVIDIA's OpenCL, asking a program without kernels for their names crashes the process
        (a backward's helper part of ``cl/recurrence.cl`` has none)."""
        try:
            if not self.cl_program.get_info(cl.program_info.NUM_KERNELS):
                return []
            names = self.cl_program.get_info(cl.program_info.KERNEL_NAMES)
        except cl.Error:
            return []
        return [n for n in str(names).split(";") if n]

    def work_group_size(self, name: str) -> int:
        """``CL_KERNEL_WORK_GROUP_SIZE`` of kernel ``name`` on this device: the largest local
        size it can run with, which may be below the device's limit (pitfalls C3)."""
        size = self._wg_sizes.get(name)
        if size is None:
            size = int(self.kernel(name).get_work_group_info(
                cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device.cl_device))
            self._wg_sizes[name] = size
        return size

    def preferred_multiple(self, name: str) -> int:
        """``CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE`` of kernel ``name`` (SIMD width)."""
        return int(self.kernel(name).get_work_group_info(
            cl.kernel_work_group_info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE,
            self.device.cl_device))

    def __repr__(self) -> str:
        origin = "disk cache" if self.from_disk_cache else "source"
        return (f"<pyrnn_cl Program {self.name} on {self.device.info.name} "
                f"from {origin} in {self.build_seconds:.3f} s>")

# }}}

# {{{ building

_memo: dict = {}  # context -> {memo key -> Program}; holds the context so its address stays ours
_memo_lock = threading.Lock()
_build_locks: dict = {}  # (context, memo key) -> Lock: one build per key, others wait
# The arguments of a get_program call as given (the device's context, device and profile, the
# defines' items in the caller's order, unconverted) -> the Program _memo holds for them: a
# repeated call finds its program without building the sorted, stringified memo key (~10 us of
# host time, and an op call asks for several programs). Filled from _memo, cleared with it.
_fast: dict = {}


def clear_memo() -> None:
    """Forget every in-memory program (the disk cache stays); for tests and long sessions."""
    with _memo_lock:
        _memo.clear()
        _fast.clear()
        _build_locks.clear()


def _save_failed_source(name: str, source: str) -> str:
    stem = Path(name).stem.replace(os.sep, "_")
    fd, path = tempfile.mkstemp(prefix=f"pyrnn_cl_{stem}_", suffix=".cl")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(source)
    return path


#: Builds from source tried again when one fails without a compiler diagnostic.
BUILD_RETRIES = 2


def _has_diagnostic(log: str) -> bool:
    """Whether a build log holds a compiler error (``file:line:col: error: ...``): a failure
    that building again would repeat."""
    return "error:" in log.lower()


def _build_error(exc, device, name, source, options, log) -> BuildError:
    saved = _save_failed_source(name, source)
    lines = log.rstrip().splitlines()
    head = "\n".join(lines[:LOG_LINES_IN_MESSAGE])
    if len(lines) > LOG_LINES_IN_MESSAGE:
        head += f"\n... ({len(lines) - LOG_LINES_IN_MESSAGE} more lines in BuildError.log)"
    message = (
        f"Building {name} failed on {device.info.describe()}: {_error_text(exc)}.\n"
        f"Options: {' '.join(options) or '(none)'}\n"
        f"Expanded source saved to {saved}\n"
        f"Build log:\n{head or '(empty)'}"
    )
    return BuildError(message, device=device.info.describe(), options=options, log=log,
                      source=source, saved_path=saved)


def _report_log(device, name: str, raw_log: str) -> None:
    log = device.profile.filter_log(raw_log)
    if not log:
        return
    logger.debug("pyrnn_cl: build log of %s on %s:\n%s", name, device.info.name, log)
    if _env.compiler_output():
        warnings.warn(f"build of {name} on {device.info.name} said:\n{log}", CompilerWarning,
                      stacklevel=4)


# {{{ the first-use notice

#: Compiling longer than this, one build or the builds of a process together, prints the notice.
NOTICE_AFTER_SECONDS = 2.0
#: While one build goes on past the notice, a progress line every this many seconds.
PROGRESS_EVERY_SECONDS = 10.0


class _CompileNotice:
    """One stderr line per process when compiling kernels on first use takes a while, so a cold
    first call does not look like a hang: ``pyrnn_cl: compiling OpenCL kernels for <device>
    (first use; cached in <dir>)``, then ``still compiling`` lines during one long build.
    ``PYRNN_CL_QUIET=1`` silences it. A watcher thread per source build only sleeps and prints
    (it never calls OpenCL), so it is harmless at interpreter exit."""

    def __init__(self):
        self._lock = threading.Lock()
        self._said = False
        self._total = 0.0  # seconds of source builds in this process

    def _say(self, device) -> None:
        with self._lock:
            if self._said:
                return
            self._said = True
        where = device.profile.build_cache_dir() or _programs_dir()
        print(f"pyrnn_cl: compiling OpenCL kernels for {device.info.name} (first use; cached "
              f"in {where}; PYRNN_CL_QUIET=1 silences this)", file=sys.stderr, flush=True)

    def _watch(self, device, name: str, start: float, done: threading.Event) -> None:
        with self._lock:
            wait = max(0.0, NOTICE_AFTER_SECONDS - self._total)
        if done.wait(wait):
            return
        self._say(device)
        while not done.wait(PROGRESS_EVERY_SECONDS):
            print(f"pyrnn_cl: still compiling {name} ({time.perf_counter() - start:.0f} s)",
                  file=sys.stderr, flush=True)

    @contextmanager
    def building(self, device, name: str):
        """Context of one source build of ``name`` on ``device``."""
        if self._said or _env.quiet():
            yield
            return
        start = time.perf_counter()
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(device, name, start, done),
                                   name="pyrnn_cl-compile-notice", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            done.set()
            with self._lock:
                self._total += time.perf_counter() - start
                late = self._total > NOTICE_AFTER_SECONDS
            if late:
                self._say(device)


_notice = _CompileNotice()

# }}}


def _build(device, name, defines, options, source) -> Program:
    """Load from the disk cache or build from source; raises :class:`BuildError`."""
    key = cache_key(source, options, device.info)
    context, cl_device = device.context, device.cl_device
    _check_pocl_cache_space(device)
    use_disk = _env.cache_enabled() and not device.profile.keeps_build_cache()
    if _env.dump_source():
        _dump_source(key, source)

    if use_disk:
        binary = _disk_read(key)
        if binary is not None:
            start = time.perf_counter()
            try:
                raw = _raw_from_binary(context, cl_device, binary)
                _raw_build(raw, options, cl_device)
            except Exception as exc:  # noqa: BLE001 - any failure means: rebuild from source
                _count("disk_rejects")
                warnings.warn(
                    f"pyrnn_cl: cached binary {entry_path(key)} was refused by "
                    f"{device.info.name} ({exc.__class__.__name__}: {str(exc).splitlines()[0]}"
                    "); rebuilding from source", CacheWarning, stacklevel=3)
            else:
                seconds = time.perf_counter() - start
                _count("disk_hits")
                logger.debug("pyrnn_cl: %s for %s loaded from the disk cache in %.3f s",
                             name, device.info.name, seconds)
                return Program(raw, device, name, defines, options, source, key, True, seconds)

    start = time.perf_counter()
    for attempt in range(1 + BUILD_RETRIES):
        raw = _raw_from_source(context, source)
        try:
            with _notice.building(device, name):
                _raw_build(raw, options, cl_device)
            break
        except cl.Error as exc:
            log = _build_log(raw, cl_device)
            if attempt == BUILD_RETRIES or _has_diagnostic(log):
                raise _build_error(exc, device, name, source, options, log) from None
            # a failure without a compiler diagnostic: transient (PoCL 3.1, several processes
            # building the same kernels into one empty cache at once); build again
            _count("build_retries")
            logger.info("pyrnn_cl: building %s on %s failed without a diagnostic (%s); "
                        "building again", name, device.info.name, log.strip() or "empty log")
            time.sleep(0.05 * (attempt + 1))
    seconds = time.perf_counter() - start
    _count("source_builds")
    logger.info("pyrnn_cl: built %s for %s in %.2f s", name, device.info.name, seconds)
    _report_log(device, name, _build_log(raw, cl_device))
    if use_disk:
        binary = _binary_of(raw, cl_device)
        if binary:
            _disk_write(key, binary)
    return Program(raw, device, name, defines, options, source, key, False, seconds)


def _profile_options(device) -> tuple[str, ...]:
    """The device profile's build options, computed once per (device, profile): they parse
    version strings, and every op call asks for several programs."""
    cached = getattr(device, "_pyrnn_options", None)
    if cached is None or cached[0] is not device.profile:
        cached = (device.profile, tuple(device.profile.build_options(device.info)))
        try:
            device._pyrnn_options = cached
        except AttributeError:
            pass
    return cached[1]


def get_program(
    device,
    source: str,
    defines: Mapping[str, int | str] | None = None,
    *,
    options: Sequence[str] | None = None,
    source_dir: str | Path | Sequence[str | Path] | None = None,
    prelude: Sequence[str] = (),
) -> Program:
    """The built program of ``source`` (a path relative to ``pyrnn_cl/cl/``, or to
    ``source_dir``) with ``defines`` on ``device`` (anything ``resolve_device`` accepts).

    ``defines`` become a sorted ``#define`` block in front of the include-expanded source
    (:func:`pyrnn_cl.sources.build_source`); the ``prelude`` files are expanded before
    ``source`` (the engine's cell file, see :mod:`pyrnn_cl.cells`). Build options are the
    device profile's plus ``options``. Memoized per (context, device, source, prelude,
    defines, options, source_dir);
    thread-safe (concurrent callers of one key wait for a single build).

    Raises :class:`~pyrnn_cl.errors.BuildError` when the compiler rejects the source.
    """
    from .devices import resolve_device

    device = resolve_device(device)
    fast_key = None
    if source_dir is None or isinstance(source_dir, (str, Path)):
        fast_key = (device.context, device.cl_device.int_ptr, device.profile, source,
                    tuple(defines.items()) if defines else (),
                    tuple(options) if options else (), tuple(prelude), source_dir)
        try:
            program = _fast.get(fast_key)
        except TypeError:       # an unhashable define value: the full look-up only
            program, fast_key = None, None
        if program is not None:
            _count("memo_hits")
            return program
    program = _get_program(device, source, defines, options, source_dir, prelude)
    if fast_key is not None:
        with _memo_lock:
            if len(_fast) >= 4096:
                _fast.clear()
            _fast[fast_key] = program
    return program


def _get_program(device, source, defines, options, source_dir, prelude) -> Program:
    """:func:`get_program` past its first look-up."""
    defines = dict(defines or {})
    all_options = list(_profile_options(device)) + list(options or [])
    if isinstance(source_dir, (str, Path)) or source_dir is None:
        dir_key: tuple[str, ...] | None = None if source_dir is None else (str(source_dir),)
    else:
        dir_key = tuple(str(d) for d in source_dir)
    memo_key = (
        device.cl_device.int_ptr,
        source,
        tuple(prelude),
        dir_key,
        tuple(sorted((k, str(v)) for k, v in defines.items())),
        tuple(all_options),
    )
    context = device.context
    with _memo_lock:
        programs = _memo.setdefault(context, {})
        program = programs.get(memo_key)
        if program is None:
            lock = _build_locks.setdefault((context, memo_key), threading.Lock())
    if program is not None:
        _count("memo_hits")
        return program
    with lock:
        with _memo_lock:
            program = _memo.setdefault(context, {}).get(memo_key)
        if program is not None:
            _count("memo_hits")
            return program
        text = sources.build_source(source, defines, source_dir, prelude)
        program = _build(device, source, defines, all_options, text)
        with _memo_lock:
            _memo.setdefault(context, {})[memo_key] = program
        return program

# }}}

# {{{ launching


def _as_size(size) -> tuple[int, ...]:
    if isinstance(size, int):
        return (size,)
    return tuple(map(int, size))


def set_args(kernel, *args, dtypes=None):
    """``kernel.set_args(*args)`` with the scalar argument types declared once per kernel object:
    ``dtypes`` (one per argument, ``None`` for a buffer; plain Python numbers may then be
    passed), else taken from ``args`` (a NumPy scalar gives its dtype, a buffer ``None``).
    pyopencl's untyped path inspects every argument on each call: ~75 us for a dozen arguments
    on PoCL, more than the launch itself; the typed path packs them in ~3 us. Kernel objects are
    per thread (:meth:`Program.kernel`), so the declaration never races."""
    if dtypes is None:      # (a list comprehension: cheaper per argument than a generator)
        sig = tuple([a.dtype if isinstance(a, np.generic) else None for a in args])
    else:
        sig = tuple(dtypes)
    if getattr(kernel, "_pyrnn_sig", None) != sig:
        kernel.set_scalar_arg_dtypes(list(sig))
        kernel._pyrnn_sig = sig
    kernel.set_args(*args)


def _add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``; on Python < 3.11, which has no ``add_note``, the note goes to
    ``__notes__`` as 3.11 would keep it (tracebacks there do not print it, but the original
    exception still propagates instead of an ``AttributeError``)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:
        exc.__notes__ = [*getattr(exc, "__notes__", ()), note]  # type: ignore[attr-defined]


def _checked_sizes(global_size, local_size):
    """``(global, local)`` as tuples (``local`` may be None), checked as :func:`enqueue` says."""
    global_size = _as_size(global_size)
    local_size = None if local_size is None else _as_size(local_size)
    if local_size is not None:
        if len(local_size) != len(global_size):
            raise ValueError(f"local size {local_size} and global size {global_size} differ in "
                             "rank")
        if any([l <= 0 or g % l for g, l in zip(global_size, local_size)]):
            raise ValueError(f"global size {global_size} is not a multiple of local size "
                             f"{local_size}")
    return global_size, local_size


def _launch(queue, kernel, global_size, local_size, wait_for=None):
    """The driver's launch of checked sizes, counted; a failure names the kernel and sizes."""
    global _launches
    try:
        with driver_lock:
            event = cl.enqueue_nd_range_kernel(queue, kernel, global_size, local_size,
                                               wait_for=wait_for)
    except cl.Error as exc:
        try:
            kernel_name = kernel.function_name
        except Exception:  # noqa: BLE001
            kernel_name = "?"
        _add_note(exc, f"pyrnn_cl: launching kernel {kernel_name} with global size "
                       f"{global_size}, local size {local_size}")
        raise
    with _launch_lock:
        _launches += 1
    return event


def enqueue(queue, kernel, global_size, local_size=None, *, wait_for=None):
    """Launch ``kernel`` (arguments already set) and count the launch.

    ``global_size``/``local_size`` are ints or tuples. Every global size must be a multiple of
    the local size (OpenCL 1.2 has no partial work-groups); a ``ValueError`` says so before the
    driver's ``INVALID_WORK_GROUP_SIZE`` would. A launch with an empty global size runs nothing
    and returns a marker event, so callers need no special case for T = 0 or N = 0. Returns the
    ``cl.Event``.
    """
    global_size, local_size = _checked_sizes(global_size, local_size)
    if 0 in global_size:
        with driver_lock:
            return cl.enqueue_marker(queue, wait_for=wait_for)
    return _launch(queue, kernel, global_size, local_size, wait_for)


def enqueue_on(device, kernel, global_size, *, wait_for=None):
    """:func:`enqueue` on ``device``'s queue of a kernel that needs no particular local size:
    the device profile's choice (:meth:`~pyrnn_cl.devices.base.VendorProfile.local_size`, a
    fixed few on PoCL, which compiles a work-group function per local size)."""
    return enqueue(device.queue, kernel, global_size, device.profile.local_size(global_size),
                   wait_for=wait_for)


def launcher(queue, kernel, global_size, local_size=None):
    """A function of no arguments that launches ``kernel`` as ``enqueue(queue, kernel,
    global_size, local_size)`` would (sizes checked once, here; an empty global size launches
    nothing): for a kernel launched many times with the same sizes, e.g. once per step. The
    checks cost 3-6 us of Python per launch, as much as the driver's launch on PoCL."""
    global_size, local_size = _checked_sizes(global_size, local_size)
    if 0 in global_size:
        return lambda: None
    return lambda: _launch(queue, kernel, global_size, local_size)

# }}}
