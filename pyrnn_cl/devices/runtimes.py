"""OpenCL runtimes installed as Python packages, made visible to the ICD loader.

Intel's CPU runtime comes from PyPI (``pip install "pyrnn_cl[intel]"``: ``intel-opencl-rt``,
``intel-cmplr-lib-rt``, ``tbb``), but nothing finds it as installed: the wheel's
``<prefix>/etc/OpenCL/vendors/intel-cpu.icd`` names a placeholder path
(``/opt/anaconda1anaconda2anaconda3/lib/libintelocl.so``, rewritten only by conda), and the ICD
loaders read ``/etc/OpenCL/vendors`` (or ``OCL_ICD_VENDORS``), never the Python prefix.
pyopencl's wheels bundle ocl-icd 2.3.1, which reads ``/etc/OpenCL/vendors`` (or
``OCL_ICD_VENDORS``) and ``pyopencl/.libs``; it knows no ``OCL_ICD_FILENAMES``.

:func:`register` runs once per process, right before pyrnn_cl's first platform query
(``pyrnn_cl.devices``), and does nothing unless all of this holds:

* the ``intel-opencl-rt`` distribution is installed (``importlib.metadata``: a virtualenv, the
  user site, a ``--system-site-packages`` parent);
* ``PYRNN_CL_FIND_RUNTIMES`` is not set to a false word;
* the user configured no ICD loader search (``OCL_ICD_VENDORS``, ``OCL_ICD_FILENAMES``,
  ``OPENCL_VENDOR_PATH``): their choice stands (with a warning when the ICD files it points at
  name a missing Intel library, e.g. the wheel's own placeholder);
* no ICD file the loader reads by itself already names an existing ``libintelocl.so`` (a
  system install, conda's rewritten ICD): that one is used as it is.

Then it checks the libraries ``libintelocl.so`` needs (``libintlc``, ``libimf``, ``libsvml``,
``libirng``, ``libtbb``). They load through the library's ``RUNPATH=$ORIGIN`` when they sit in
its directory (the usual one-prefix install); one found in another installed distribution's
directory (pip split the packages between a virtualenv and its parent) is loaded first with
``ctypes`` and ``RTLD_GLOBAL``, so the dynamic linker finds it by its soname; a missing one gives
one :class:`~pyrnn_cl.errors.RuntimeInstallWarning` naming it and its package, and nothing is
registered. Finally a test ``dlopen`` of ``libintelocl.so`` (the loader would open it anyway),
then a vendors directory ``<cache dir>/icd/<hash>/`` holding the ICD files the loader would have
read (``/etc/OpenCL/vendors``; ``<prefix>/etc/OpenCL/vendors`` in a conda environment) plus one
naming the real ``libintelocl.so``, and ``OCL_ICD_VENDORS`` pointing at it. The directory is
named by its contents' hash and stays, so child processes (pytest-xdist workers) that inherit
the variable see the same platforms.

It must run before the ICD loader's first platform query in the process: a program that calls
``pyopencl.get_platforms()`` before pyrnn_cl's first device query calls :func:`register` first.

Threads: pyrnn_cl leaves the runtime's TBB worker count and placement at the runtime's defaults
(its workers follow the process's CPU set and sleep when idle), except inside a cgroup CPU quota
smaller than the CPU set, where ``CL_CONFIG_CPU_TBB_NUM_WORKERS`` is set to the quota
(:func:`thread_defaults`); a value the user set is never changed. docs/platforms.md has the
measurements.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import math
import os
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .. import _env
from ..errors import RuntimeInstallWarning

__all__ = ["IntelRuntime", "Registration", "find_intel_runtime", "register", "registration",
           "thread_defaults", "thread_settings", "pocl_thread_defaults", "INTEL_DIST",
           "INTEL_DEPENDENCIES"]

log = logging.getLogger(__name__)

#: The distribution holding ``libintelocl.so``.
INTEL_DIST = "intel-opencl-rt"
INTEL_LIBRARY = "libintelocl.so"
#: ``(soname, distribution)`` of what ``libintelocl.so`` needs beyond the system's libraries,
#: in load order (``libintlc`` first: the math libraries need it).
INTEL_DEPENDENCIES = (
    ("libintlc.so.5", "intel-cmplr-lib-rt"),
    ("libimf.so", "intel-cmplr-lib-rt"),
    ("libsvml.so", "intel-cmplr-lib-rt"),
    ("libirng.so", "intel-cmplr-lib-rt"),
    ("libtbb.so.12", "tbb"),
)
#: The name of the ICD file pyrnn_cl writes into its vendors directory.
ICD_NAME = "pyrnn_cl-intel-cpu.icd"
#: Thread and placement controls of Intel's CPU runtime that :func:`thread_settings` reports.
THREAD_VARIABLES = ("CL_CONFIG_CPU_TBB_NUM_WORKERS", "DPCPP_CPU_NUM_CUS", "DPCPP_CPU_CU_AFFINITY",
                    "DPCPP_CPU_PLACES", "DPCPP_CPU_SCHEDULE")

# {{{ finding the installed runtime


@dataclass
class IntelRuntime:
    """An installed ``intel-opencl-rt``: its library, version, and the state of its
    dependencies (``preload``: found outside the library's directory; ``missing``:
    ``(soname, distribution)`` found nowhere)."""

    library: Path
    version: str | None = None
    preload: list = field(default_factory=list)
    missing: list = field(default_factory=list)

    def problem(self) -> str | None:
        """What keeps the runtime from loading (one sentence naming each missing piece), or
        ``None``."""
        if not self.library.is_file():
            return (f"{INTEL_LIBRARY} is not at {self.library} (package {INTEL_DIST} "
                    f"{self.version or ''} is damaged; reinstall it)")
        if self.missing:
            names = ", ".join(f"{so} (package {dist})" for so, dist in self.missing)
            dists = " ".join(sorted({dist for _, dist in self.missing}))
            return (f"{INTEL_LIBRARY} in {self.library.parent} needs {names}, found in no "
                    f"installed package; `pip install {dists}` or "
                    '`pip install "pyrnn_cl[intel]"` installs it')
        return None


def _locate(dist_name: str, file_name: str) -> tuple[Path | None, str | None, bool]:
    """``(path, version, installed)`` of the file called ``file_name`` that the installed
    distribution ``dist_name`` lists (``path`` None when it lists none; ``installed`` False when
    the distribution is not installed). Replaced in tests."""
    from importlib import metadata

    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        return None, None, False
    for entry in dist.files or ():
        if entry.name == file_name:
            return Path(os.path.abspath(dist.locate_file(entry))), dist.version, True
    return None, dist.version, True


def find_intel_runtime() -> IntelRuntime | None:
    """The installed Intel CPU runtime and where its dependencies are, or ``None`` when
    ``intel-opencl-rt`` is not installed."""
    library, version, installed = _locate(INTEL_DIST, INTEL_LIBRARY)
    if not installed:
        return None
    if library is None:   # the distribution lists no library: report where it should be
        library = Path(sys.prefix) / "lib" / INTEL_LIBRARY
    runtime = IntelRuntime(library=library, version=version)
    for soname, dist_name in INTEL_DEPENDENCIES:
        if (library.parent / soname).exists():
            continue        # found through libintelocl.so's RUNPATH ($ORIGIN)
        path, _, _ = _locate(dist_name, soname)
        if path is not None and path.exists():
            runtime.preload.append(path)
        else:
            runtime.missing.append((soname, dist_name))
    return runtime

# }}}

# {{{ ICD files


def _icd_target(icd: Path) -> str | None:
    """The library an ICD file names (first non-empty line), or ``None`` if unreadable."""
    try:
        text = icd.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return None


def system_vendor_dirs() -> list[Path]:
    """The directories the ICD loader reads when ``OCL_ICD_VENDORS`` is unset:
    ``/etc/OpenCL/vendors``, or in a conda environment (whose ocl-icd is built for its prefix)
    ``<prefix>/etc/OpenCL/vendors``; pyopencl's wheels also read their ``pyopencl/.libs``."""
    conda = (Path(sys.prefix) / "conda-meta").is_dir()
    dirs = [Path(sys.prefix) / "etc" / "OpenCL" / "vendors" if conda
            else Path("/etc/OpenCL/vendors")]
    try:
        import importlib.util

        spec = importlib.util.find_spec("pyopencl")
        for location in (spec.submodule_search_locations or []) if spec else []:
            dirs.append(Path(location) / ".libs")
    except (ImportError, ValueError):
        pass
    return dirs


def _icd_files(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.suffix == ".icd" and p.is_file())
    except OSError:
        return []


def registered_intel_icd(dirs=None) -> Path | None:
    """An ICD file in ``dirs`` (default :func:`system_vendor_dirs`) naming an Intel CPU runtime
    library that exists (a bare library name counts: the dynamic linker resolves it)."""
    for directory in system_vendor_dirs() if dirs is None else dirs:
        for icd in _icd_files(Path(directory)):
            target = _icd_target(icd)
            if target and "intelocl" in os.path.basename(target) and "emu" not in target:
                if not os.path.isabs(target) or os.path.exists(target):
                    return icd
    return None


def broken_intel_icds(dirs) -> list[tuple[Path, str]]:
    """``(icd file, library)`` for every ICD file in ``dirs`` (directories, or ``.icd`` files)
    naming an Intel CPU runtime library by an absolute path that does not exist (the wheel's
    own ``intel-cpu.icd`` with conda's placeholder, a moved install)."""
    found = []
    for entry in dirs:
        entry = Path(entry)
        files = [entry] if entry.suffix == ".icd" and entry.is_file() else _icd_files(entry)
        for icd in files:
            target = _icd_target(icd)
            if (target and "intelocl" in os.path.basename(target) and "emu" not in target
                    and os.path.isabs(target) and not os.path.exists(target)):
                found.append((icd, target))
    return found


def write_vendors_dir(library: Path, base_dirs=None, root: Path | None = None) -> Path:
    """A vendors directory holding the ICD files of ``base_dirs`` (default: the loader's own,
    less pyopencl's ``.libs`` which it reads in any case) plus one naming ``library``; named
    by the hash of its contents under ``root`` (default ``<cache dir>/icd``), made atomically,
    reused when it exists."""
    if base_dirs is None:
        base_dirs = system_vendor_dirs()[:1]
    files = {}
    for directory in base_dirs:
        for icd in _icd_files(Path(directory)):
            target = _icd_target(icd)
            if target is not None and icd.name not in files:
                files[icd.name] = target + "\n"
    files[ICD_NAME] = str(library) + "\n"
    digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
    root = Path(root) if root is not None else _env.cache_dir() / "icd"
    final = root / digest
    if all((final / name).is_file() for name in files):
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    for name, text in files.items():
        (tmp / name).write_text(text)
    try:
        os.rename(tmp, final)
    except OSError:   # another process made it first (same contents: same name)
        for name in files:
            (tmp / name).unlink()
        tmp.rmdir()
    return final

# }}}

# {{{ threads


def _cgroup_cpu_limit() -> float | None:
    """CPUs allowed by the cgroup CPU quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), or
    ``None`` without a quota. Replaced in tests."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_defaults() -> dict[str, str]:
    """Set the thread defaults pyrnn_cl gives Intel's CPU runtime, where the user set none;
    return what was set.

    Intel's runtime starts one TBB worker per CPU of the process's CPU set. Inside a cgroup CPU
    quota smaller than that set (a container given 2 CPUs of a 64-core host), that many
    workers time-share the quota with PyTorch's and NumPy's threads: the worker count is set
    to the quota (rounded up). Otherwise nothing is set (measured in docs/platforms.md: fewer
    workers only slow our kernels, and the workers sleep when idle).
    """
    limit = _cgroup_cpu_limit()
    cpus = _usable_cpus()
    done = {}
    if limit is not None and math.ceil(limit) < cpus:
        value = str(max(1, math.ceil(limit)))
        if _env.set_default("CL_CONFIG_CPU_TBB_NUM_WORKERS", value):
            done["CL_CONFIG_CPU_TBB_NUM_WORKERS"] = value
    return done


def pocl_thread_defaults(workers: int | None = None) -> dict[str, str]:
    """Ask PoCL to pin its worker threads, worker i to CPU i (``POCL_AFFINITY=1``, which PoCL
    reads when it first opens: :func:`pyrnn_cl.devices._enumerate` calls this right before its
    first platform query); return what was set.

    Why: PoCL's workers sleep between kernels. A whole-sequence kernel runs one long
    work-group per core; on two cores, Linux often wakes the second worker onto the CPU where
    the first worker or the Python thread runs, and leaves it queued there while the other CPU
    idles, so one core runs both work-groups and the call takes twice as long (the tiny LSTM
    forward: 10-55 % of calls at 2x unpinned, 0-2 % pinned; with NumPy inputs its forward
    ratio to PyTorch 0.62-0.74 unpinned, 0.86-0.96 pinned, docs/benchmarks.md). PyTorch's
    OpenMP workers spin between parallel regions and stay on their CPUs.

    Nothing is set when ``PYRNN_CL_PIN_POCL`` is a false word, when the user set
    ``POCL_AFFINITY`` (even empty), or when the process may not run on every CPU
    ``0 .. n-1`` for PoCL's ``n`` workers (``workers``, else ``POCL_MAX_PTHREAD_COUNT``, else
    one per CPU): PoCL would pin outside the process's CPU set (``taskset``, a cgroup
    cpuset). A PoCL opened
    before pyrnn_cl's first device query (the program queried platforms itself) keeps its
    threads as they are.
    """
    if workers is not None and int(workers) < 1:
        raise ValueError(f"workers: got {workers}, expected a value >= 1 (or None)")
    if not _env.pin_pocl():
        return {}
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return {}
    workers = int(workers or _env.pocl_threads() or os.cpu_count() or 1)
    if not set(range(workers)) <= allowed:
        return {}
    return {"POCL_AFFINITY": "1"} if _env.set_default("POCL_AFFINITY", "1") else {}


def thread_settings() -> dict:
    """The Intel CPU runtime's thread controls as this process has them (``None``: unset, the
    runtime's default), which of them pyrnn_cl set, and the CPUs of the process, for
    ``pyrnn-cl bench``."""
    state = registration()
    return {
        "variables": {name: _env.raw(name) for name in THREAD_VARIABLES},
        "set_by_pyrnn_cl": dict(state.thread_defaults) if state else {},
        "process_cpus": _usable_cpus(),
        "cgroup_cpu_limit": _cgroup_cpu_limit(),
    }

# }}}

# {{{ registration


@dataclass
class Registration:
    """What :func:`register` did: ``state`` is one of ``"registered"``, ``"not-installed"``,
    ``"off"``, ``"user-configured"``, ``"system"`` (an ICD the loader reads names it already),
    ``"broken"`` (warned); ``detail`` says more (the vendors directory, the ICD file, the
    problem)."""

    state: str
    detail: str = ""
    runtime: IntelRuntime | None = None
    thread_defaults: dict = field(default_factory=dict)


_LOCK = threading.Lock()
_DONE: list = []   # [Registration] once register() ran in this process


def registration() -> Registration | None:
    """What :func:`register` did in this process, ``None`` before it ran."""
    return _DONE[0] if _DONE else None


def _warn(message: str) -> None:
    warnings.warn(f"Intel's OpenCL CPU runtime is installed but not usable: {message}. "
                  "pyrnn_cl continues with the other OpenCL devices.",
                  RuntimeInstallWarning, stacklevel=4)


def _register() -> Registration:
    if not _env.find_runtimes():
        return Registration("off", "PYRNN_CL_FIND_RUNTIMES is off")
    if not sys.platform.startswith("linux"):
        # (Windows' wheel ships intelocl64.dll, found through the registry, not ICD files)
        return Registration("off", f"ICD files and libintelocl.so are Linux's ({sys.platform})")
    runtime = find_intel_runtime()
    if runtime is None:
        return Registration("not-installed")
    configured = _env.icd_loader_settings()
    inherited = configured.get("OCL_ICD_VENDORS")
    if inherited and (Path(inherited) / ICD_NAME).is_file():
        # set by pyrnn_cl in a parent process (pytest-xdist workers, subprocesses)
        return Registration("registered", f"{inherited} (inherited)", runtime)
    if configured:
        names = ", ".join(f"{k}={v}" for k, v in configured.items())
        # the user's loader settings stand; but an ICD they point at that names a missing
        # library (the wheel's own intel-cpu.icd, say) would hide the device without a word
        given = [configured[k] for k in ("OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH")
                 if k in configured]
        broken = broken_intel_icds(given)
        if broken and registered_intel_icd(given) is None:
            icd, target = broken[0]
            _warn(f"{icd} (read through {names}) names {target}, which does not exist; the "
                  f"library is at {runtime.library}. Unset the variable to let pyrnn_cl "
                  "register it, or write that path into the ICD file")
            return Registration("user-configured", f"left as set: {names}; {icd} is broken",
                                runtime)
        return Registration("user-configured", f"left as set: {names}", runtime)
    registered = registered_intel_icd()
    if registered is not None:
        return Registration("system", f"{registered} names it", runtime)
    problem = runtime.problem()
    if problem:
        _warn(problem)
        return Registration("broken", problem, runtime)
    try:
        for path in runtime.preload:
            ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        ctypes.CDLL(str(runtime.library))
    except OSError as exc:
        problem = f"loading {runtime.library} failed: {exc}"
        _warn(problem)
        return Registration("broken", problem, runtime)
    try:
        vendors = write_vendors_dir(runtime.library)
    except OSError as exc:   # read-only cache directory: a directory for this process
        log.debug("vendors directory in the cache failed (%s); using a temporary one", exc)
        vendors = write_vendors_dir(runtime.library, root=Path(tempfile.mkdtemp(
            prefix="pyrnn-cl-icd-")))
    _env.set_icd_vendors(str(vendors))
    done = Registration("registered", str(vendors), runtime, thread_defaults())
    log.debug("Intel CPU runtime %s registered: OCL_ICD_VENDORS=%s", runtime.library, vendors)
    return done


def register(force: bool = False) -> Registration:
    """Make an installed Intel CPU runtime visible to the ICD loader (module docstring), once
    per process (``force``: again, for tests); returns what was done. Never raises for a
    broken install: it warns once and the other devices stay usable."""
    with _LOCK:
        if _DONE and not force:
            return _DONE[0]
        try:
            result = _register()
        except Exception as exc:  # noqa: BLE001 - discovery must never break device listing
            _warn(f"{type(exc).__name__}: {exc}")
            result = Registration("broken", f"{type(exc).__name__}: {exc}")
        _DONE[:] = [result]
        return result

# }}}
