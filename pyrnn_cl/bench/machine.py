"""The machine a run measures and its threads: CPU model and ISA (``/proc/cpuinfo``), NumPy's
SGEMM rate, the BLAS thread count, pinning PoCL's workers, Intel's CPU runtime's thread
controls, and the ``machine`` record of a result."""

from __future__ import annotations

import ctypes
import datetime
import os
import platform
import statistics
import time

import numpy as np


def _openblas_set_threads(n: int) -> bool:
    """Set the thread count of every OpenBLAS loaded in this process (NumPy's); True if one
    took it. Uses the exported ``*set_num_threads*`` entry points (no threadpoolctl needed)."""
    names = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
             "openblas_set_num_threads64_", "openblas_set_num_threads")
    done = False
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps
                     if "openblas" in line.lower() and ".so" in line.split()[-1]}
    except OSError:
        return False
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in names:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn(ctypes.c_int(n))
                done = True
                break
    return done


def _cpuinfo_value(*keys: str) -> str | None:
    """The value of the first ``/proc/cpuinfo`` line starting with one of ``keys``, or
    ``None`` (no such line, or no /proc)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(keys):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    return _cpuinfo_value("model name") or platform.processor() or "?"


#: SIMD extensions the bench names, widest first (x86-64, then Arm)
_ISA_FLAGS = ("avx512f", "avx512_bf16", "avx2", "fma", "avx", "sse4_2", "asimd", "sve")


def _cpu_isa() -> str:
    """The SIMD extensions of :data:`_ISA_FLAGS` the CPU reports (``/proc/cpuinfo`` flags),
    e.g. ``"avx512f avx2 fma"`` or ``"asimd"``; ``"?"`` where unknown."""
    flags = set((_cpuinfo_value("flags", "Features") or "").split())
    return " ".join(f for f in _ISA_FLAGS if f in flags) or "?"


def sgemm_gflops(size: int = 1024, repeat: int = 5) -> dict:
    """NumPy float32 ``size^3`` matmul rate: ``{"median": GFLOP/s, "max": GFLOP/s}``."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    c = np.empty((size, size), np.float32)
    np.matmul(a, b, out=c)
    times = []
    for _ in range(max(repeat, 1)):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        times.append(time.perf_counter() - t0)
    flops = 2.0 * size ** 3
    return {"median": flops / statistics.median(times) / 1e9, "max": flops / min(times) / 1e9}


def pin_pocl_workers(threads: int | None = None) -> bool:
    """Ask PoCL to pin its worker threads, worker i to CPU i, before any OpenCL use (what
    pyrnn_cl does by default at its first device query:
    :func:`pyrnn_cl.devices.runtimes.pocl_thread_defaults`, whose docstring says why and when
    not), for ``threads`` workers (default PoCL's own count). Returns whether it was set."""
    from ..devices import runtimes

    if threads is not None and int(threads) < 1:
        raise ValueError(f"threads: got {threads}, expected a value >= 1 (or None)")
    return bool(runtimes.pocl_thread_defaults(threads))


def intel_runtime_report() -> dict:
    """Intel's CPU runtime as this process has it (:mod:`pyrnn_cl.devices.runtimes`): how it
    was registered and its thread controls (``None``: the runtime's default; docs/platforms.md
    measures them), which of them pyrnn_cl set, the process's CPUs and cgroup CPU quota."""
    from ..devices import runtimes

    state = runtimes.registration()
    return {"registration": state.state if state else None, **runtimes.thread_settings()}


def _machine(device, threads: int, torch_version) -> dict:
    from ..devices.info import parse_version
    from ..tuning import FAMILIES

    info = device.info
    pocl = parse_version(info.platform_version, "PoCL")
    llvm = parse_version(info.platform_version, "LLVM")
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "device": info.name,
        "platform": info.platform_name,
        "platform_version": info.platform_version,
        "pocl_version": ".".join(map(str, pocl)) if pocl else None,
        "llvm_version": ".".join(map(str, llvm)) if llvm else None,
        "compute_units": info.compute_units,
        "cpu": _cpu_model(),
        "isa": _cpu_isa(),
        "threads": threads,
        # per kernel family: the values used and where they came from (pyrnn_cl.tuning)
        "tuning": {f: {"values": device.tuning(f), "source": device.tuning_source(f)}
                   for f in FAMILIES},
        "pocl_threads_env": os.environ.get("POCL_MAX_PTHREAD_COUNT"),
        "pocl_affinity_env": os.environ.get("POCL_AFFINITY"),
        "intel_cpu_runtime": intel_runtime_report(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch_version,
    }
