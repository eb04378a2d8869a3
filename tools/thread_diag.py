"""A pytest plugin that serialises parts of pyrnn_cl's driver use, to tell which concurrent calls
a multi-threaded crash needs (a developer's tool; see tools/thread_stress.sh).

    THREAD_DIAG=build,kernel,reads python -m pytest -p thread_diag tests/test_threads.py

with ``tools`` on ``PYTHONPATH``. ``THREAD_DIAG`` names any of:

* ``build``: every ``clBuildProgram`` (``programs._raw_build``) under one process-wide lock;
* ``kernel``: every kernel object's creation (``Program.kernel``, where pyopencl also generates
  and caches its argument-setting code in an SQLite store) and every declaration of its argument
  types (``programs.set_args``) under that lock;
* ``reads``: every device-to-host copy blocking (``pyopencl.enqueue_copy`` into a NumPy array).
  Since 2026-11-28 ``_arrays.read_host`` reads that way itself (with non-blocking reads the
  thread test crashed on NVIDIA's OpenCL under load, and pyopencl waited with the GIL held),
  so this now changes only reads made elsewhere (``pyopencl.array.Array.get`` blocks anyway);
* ``buildx``: program creation and ``clBuildProgram`` exclusive against every launch, copy, fill
  and map (all of them under that lock): whether the driver faults when a build runs while other
  threads queue work on the same context. (On an H200 beside the suite: 0 of 19 runs crashed,
  against 5 of 12 without; since then pyrnn_cl holds ``programs.driver_lock`` so itself, apart
  from waits, and this variant adds the waits of blocking copies and the commands queued
  outside pyrnn_cl, such as the tests' own uploads);
* ``serial``: ``buildx`` and ``kernel`` together: no two threads in the driver at once, except
  while waiting.

Unset or empty: nothing changes (the baseline of a comparison).
"""

from __future__ import annotations

import functools
import os
import sys

import numpy as np
import pyopencl as cl

import pyrnn_cl  # noqa: F401 - every module below imported, so that its names can be patched
from pyrnn_cl import programs

_LOCK = programs.driver_lock      # (the library's own: the variants extend what it covers)
_WHAT = {w.strip() for w in os.environ.get("THREAD_DIAG", "").split(",") if w.strip()}
_KNOWN = {"build", "kernel", "reads", "buildx", "serial"}
if "serial" in _WHAT:
    _WHAT |= {"buildx", "kernel"}
if _WHAT - _KNOWN:
    raise SystemExit(f"THREAD_DIAG: unknown {sorted(_WHAT - _KNOWN)}; known: {sorted(_KNOWN)}")


def _locked(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _LOCK:
            return fn(*args, **kwargs)
    return wrapper


if _WHAT & {"build", "buildx"}:
    programs._raw_build = _locked(programs._raw_build)
if "buildx" in _WHAT:
    programs._raw_from_source = _locked(programs._raw_from_source)
    programs._raw_from_binary = _locked(programs._raw_from_binary)
    for _name in ("enqueue_nd_range_kernel", "enqueue_copy", "enqueue_fill_buffer",
                  "enqueue_map_buffer", "enqueue_marker"):
        setattr(cl, _name, _locked(getattr(cl, _name)))
if "kernel" in _WHAT:
    programs.Program.kernel = _locked(programs.Program.kernel)
    _set_args = programs.set_args
    for _mod in list(sys.modules.values()):      # every pyrnn_cl module that imported it by name
        if getattr(_mod, "__name__", "").startswith("pyrnn_cl") and \
                getattr(_mod, "set_args", None) is _set_args:
            _mod.set_args = _locked(_set_args)
if "reads" in _WHAT:
    _copy = cl.enqueue_copy

    @functools.wraps(_copy)
    def _blocking_reads(queue, dest, src, **kwargs):
        if isinstance(dest, np.ndarray):
            kwargs["is_blocking"] = True
        return _copy(queue, dest, src, **kwargs)

    cl.enqueue_copy = _blocking_reads


def pytest_report_header(config):
    return f"thread_diag: serialised {sorted(_WHAT) or 'nothing'}"
