"""The one place where pyrnn_cl reads environment variables.

Every variable is read through a function, at call time, with a default, so tests can change
``os.environ`` (``monkeypatch.setenv``) and see the effect at once. No other module reads
``os.environ`` for a ``PYRNN_CL_*`` name (style.md §1.1: pyopencl's ``cache.py`` once did
``os.environ["PYOPENCL_CACHE_FAILURE_FATAL"]`` and raised ``KeyError`` wherever CI did not set it).

Variables (unset or empty means the default):

``PYRNN_CL_DEVICE``
    Device spec of the default device: ``"0:1"``, ``"pocl"``, ``"gpu"``, a name substring (see
    ``pyrnn_cl.devices``).
``PYOPENCL_CTX``
    pyopencl's own choice (``"0"``, ``"0:1"``, ``"AMD:0"``, substrings), parsed as pyopencl
    parses it; used when ``PYRNN_CL_DEVICE`` is unset.
``PYRNN_CL_PROFILE``
    Force one vendor profile (``"pocl"``, ``"generic"``, ...) on every device, e.g. to work
    around a mis-detection.
``PYRNN_CL_CACHE_DIR``
    Directory of the on-disk kernel binary cache (default: the user cache directory, below).
``PYRNN_CL_NO_CACHE``
    ``1`` disables the disk cache (the in-memory memo stays).
``PYRNN_CL_QUIET``
    ``1``: no notice on stderr when compiling kernels on first use takes more than about 2 s
    (``pyrnn_cl: compiling OpenCL kernels for <device> (first use; cached in <dir>)``).
``PYRNN_CL_COMPILER_OUTPUT``
    ``1`` turns non-empty build logs into ``CompilerWarning`` (they are always logged at DEBUG).
``PYRNN_CL_DUMP_SOURCE``
    ``1`` writes every expanded kernel source to ``<cache dir>/source/<key>.cl``.
``PYRNN_CL_TUNING``
    ``0`` ignores every tuned entry (user and shipped databases): the derived defaults and the
    profiles' tables only. Default: on.
``PYRNN_CL_AUTOTUNE``
    ``1`` runs a short tune (``pyrnn_cl.tuner.autotune``) on each device's first use when it has
    no tuned entry, and stores the result, like ``torch.backends.cudnn.benchmark``.
``PYRNN_CL_TEST``
    Device filter for the test-suite, in ``PYOPENCL_TEST`` syntax (``"0:0,1;intel:i5"``);
    ``pyrnn_cl.devices.select_devices`` parses it.
``PYRNN_CL_REQUIRE_DEVICE``
    ``1``: a test session fails if no kernel ran on a device (pitfalls C14).
``PYRNN_CL_FIND_RUNTIMES``
    ``0`` leaves the ICD loader alone: no search for OpenCL runtimes installed as Python
    packages (Intel's CPU runtime, the ``intel`` extra; ``pyrnn_cl.devices.runtimes``).
    Default: on.
``PYRNN_CL_POOL_RESULTS``
    ``0`` gives every result an op returns as a device array a buffer of its own. Default: on,
    where a device's memory is not the host's (Intel's CPU runtime, GPUs), such results come
    from pyrnn_cl's per-device memory pool and go back to it when the caller drops them, as
    PyTorch's CUDA tensors do (``pyrnn_cl._arrays.pools_results``).
``POCL_CACHE_DIR``
    PoCL's own kernel cache directory (read, never changed; default ``$XDG_CACHE_HOME/pocl``,
    ``~/.cache/pocl`` when unset); pyrnn_cl checks the free space there before PoCL builds,
    and names it in the first-use notice (:func:`pocl_cache_dir`).
``OCL_ICD_VENDORS``, ``OCL_ICD_FILENAMES``, ``OPENCL_VENDOR_PATH``
    The ICD loaders' own search settings (read, never changed, when the user set them): with
    any of them set, pyrnn_cl registers no runtime. When it registers Intel's CPU runtime it
    sets ``OCL_ICD_VENDORS`` itself (:func:`set_icd_vendors`).
``POCL_KERNEL_CACHE``
    PoCL's switch for its own build cache (read, never changed): unless it is ``0``, PoCL
    caches builds itself and pyrnn_cl keeps no binaries of PoCL programs
    (``PoclProfile.keeps_build_cache``); PoCL's cache directory is named in the notice.
``CL_CONFIG_CPU_TBB_NUM_WORKERS`` and ``DPCPP_CPU_*``
    Intel's CPU runtime's worker count and placement; read for ``pyrnn-cl bench``'s report, and
    the worker count set by pyrnn_cl only when unset and a cgroup CPU quota is smaller than the
    process's CPU set (:func:`set_default`).

Boolean variables are false when unset, empty, ``0``, ``false``, ``no`` or ``off``.

The user cache directory is ``$XDG_CACHE_HOME/pyrnn_cl`` (``~/.cache/pyrnn_cl`` when unset) on
Linux and other Unixes, ``~/Library/Caches/pyrnn_cl`` on macOS and
``%LOCALAPPDATA%\\pyrnn_cl\\Cache`` on Windows.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

_FALSE_WORDS = frozenset({"", "0", "false", "no", "off"})

# os.environ's own storage (CPython's ``os._Environ``: a dict of encoded names and values,
# updated in place by every change made through ``os.environ``), read directly by _raw
_ENVIRON = os.environ
_DATA = getattr(_ENVIRON, "_data", None)
_ENCODE = getattr(_ENVIRON, "encodekey", None)
_DECODE = getattr(_ENVIRON, "decodevalue", None)
_KEYS: dict[str, object] = {}


def _raw(name: str) -> str | None:
    """``os.environ.get(name)`` in about a tenth of its time: ops read several variables on
    every call (the tuning, the default device), and ``Mapping.get`` costs 0.5-0.8 us per read
    (an unset variable most: it raises and catches ``KeyError``). Falls back to
    ``os.environ.get`` where ``os.environ`` is not CPython's usual mapping, or was replaced."""
    if _DATA is None or _ENCODE is None or _DECODE is None or os.environ is not _ENVIRON:
        return os.environ.get(name)
    key = _KEYS.get(name)
    if key is None:
        key = _KEYS[name] = _ENCODE(name)
    value = _DATA.get(key)
    return None if value is None else _DECODE(value)


def _get(name: str) -> str | None:
    """The stripped value of ``name``; ``None`` when unset or empty."""
    value = _raw(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _flag(name: str) -> bool:
    """A boolean variable: unset, empty, ``0``, ``false``, ``no`` and ``off`` mean False."""
    value = _raw(name) or ""
    return value.strip().lower() not in _FALSE_WORDS


def device_spec() -> str | None:
    """``PYRNN_CL_DEVICE``: the user's device spec, or ``None``."""
    return _get("PYRNN_CL_DEVICE")


def pyopencl_ctx() -> str | None:
    """``PYOPENCL_CTX``: pyopencl's device choice, honoured when ``PYRNN_CL_DEVICE`` is unset."""
    return _get("PYOPENCL_CTX")


def forced_profile() -> str | None:
    """``PYRNN_CL_PROFILE``: a profile name forced on every device, or ``None``."""
    value = _get("PYRNN_CL_PROFILE")
    return value.lower() if value else None


def default_cache_dir() -> Path:
    """The per-user cache directory for pyrnn_cl (not created here)."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser(r"~\AppData\Local")
        return Path(base) / "pyrnn_cl" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "pyrnn_cl"
    base = _get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pyrnn_cl"


def cache_dir() -> Path:
    """``PYRNN_CL_CACHE_DIR``, else :func:`default_cache_dir` (not created here).

    Ops ask for it on every call (the tuning database lives there): the path is built once per
    combination of the variables it depends on, which are still read each time."""
    return _cache_dir(_get("PYRNN_CL_CACHE_DIR"), _raw("XDG_CACHE_HOME"), _raw("HOME"),
                      _raw("LOCALAPPDATA"), _raw("USERPROFILE"))


@functools.lru_cache(maxsize=16)
def _cache_dir(value, *_depends_on) -> Path:
    return Path(os.path.expanduser(value)) if value else default_cache_dir()


def cache_enabled() -> bool:
    """False when ``PYRNN_CL_NO_CACHE`` is set to a true value."""
    return not _flag("PYRNN_CL_NO_CACHE")


def quiet() -> bool:
    """``PYRNN_CL_QUIET``: no notice on stderr while kernels compile on first use."""
    return _flag("PYRNN_CL_QUIET")


def pocl_kernel_cache() -> bool:
    """``POCL_KERNEL_CACHE`` (PoCL's own variable): PoCL caches builds on disk unless it is 0."""
    return (_get("POCL_KERNEL_CACHE") or "1").strip() != "0"


def compiler_output() -> bool:
    """``PYRNN_CL_COMPILER_OUTPUT``: show non-empty build logs as ``CompilerWarning``."""
    return _flag("PYRNN_CL_COMPILER_OUTPUT")


def dump_source() -> bool:
    """``PYRNN_CL_DUMP_SOURCE``: write every expanded kernel source next to the cache."""
    return _flag("PYRNN_CL_DUMP_SOURCE")


def use_tuned() -> bool:
    """``PYRNN_CL_TUNING``: apply tuned entries (true unless set to a false word)."""
    return _get("PYRNN_CL_TUNING") is None or _flag("PYRNN_CL_TUNING")


def autotune() -> bool:
    """``PYRNN_CL_AUTOTUNE``: tune a device without a tuned entry on its first use."""
    return _flag("PYRNN_CL_AUTOTUNE")


def test_filter() -> str | None:
    """``PYRNN_CL_TEST``: the device filter for the test-suite (PYOPENCL_TEST syntax)."""
    return _get("PYRNN_CL_TEST")


def require_device() -> bool:
    """``PYRNN_CL_REQUIRE_DEVICE``: a test session must run at least one kernel."""
    return _flag("PYRNN_CL_REQUIRE_DEVICE")


def find_runtimes() -> bool:
    """``PYRNN_CL_FIND_RUNTIMES``: register OpenCL runtimes installed as Python packages
    (true unless set to a false word)."""
    return _get("PYRNN_CL_FIND_RUNTIMES") is None or _flag("PYRNN_CL_FIND_RUNTIMES")


def pool_results() -> bool:
    """``PYRNN_CL_POOL_RESULTS``: device-array results from the memory pool where a device's
    memory is not the host's (true unless set to a false word)."""
    return _get("PYRNN_CL_POOL_RESULTS") is None or _flag("PYRNN_CL_POOL_RESULTS")


def pin_pocl() -> bool:
    """``PYRNN_CL_PIN_POCL``: ask PoCL to pin its worker threads (``POCL_AFFINITY=1``) before
    the first platform query, where the user set no ``POCL_AFFINITY`` (true unless set to a
    false word; :func:`pyrnn_cl.devices.runtimes.pocl_thread_defaults`)."""
    return _get("PYRNN_CL_PIN_POCL") is None or _flag("PYRNN_CL_PIN_POCL")


def pocl_threads() -> int | None:
    """``POCL_MAX_PTHREAD_COUNT`` as PoCL reads it: its worker count (``None``: unset or not a
    positive integer, PoCL's default of one per CPU)."""
    value = _get("POCL_MAX_PTHREAD_COUNT")
    try:
        count = int(value) if value is not None else 0
    except ValueError:
        return None
    return count if count > 0 else None


def pocl_cache_dir() -> Path:
    """PoCL's kernel cache directory: ``POCL_CACHE_DIR``, else ``$XDG_CACHE_HOME/pocl``, else
    ``~/.cache/pocl`` (as PoCL chooses it; not created here)."""
    value = _get("POCL_CACHE_DIR")
    if value:
        return Path(os.path.expanduser(value))
    base = _get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pocl"


#: The ICD loaders' search variables (ocl-icd and the Khronos loader).
ICD_LOADER_VARIABLES = ("OCL_ICD_VENDORS", "OCL_ICD_FILENAMES", "OPENCL_VENDOR_PATH")


def icd_loader_settings() -> dict[str, str]:
    """The ICD loader search variables that are set (non-empty), by name."""
    return {name: value for name in ICD_LOADER_VARIABLES
            if (value := _get(name)) is not None}


def set_icd_vendors(path: str) -> None:
    """Point the ICD loader at a vendors directory (``OCL_ICD_VENDORS``); read by the loader at
    the process's first platform query, and inherited by child processes."""
    os.environ["OCL_ICD_VENDORS"] = str(path)


def raw(name: str) -> str | None:
    """The stripped value of any variable, ``None`` when unset or empty (for reports)."""
    return _get(name)


def set_default(name: str, value: str) -> bool:
    """Set ``name`` to ``value`` unless it is set already (even to an empty string: the user's
    choice); return whether it was set."""
    if name in os.environ:
        return False
    os.environ[name] = str(value)
    return True
