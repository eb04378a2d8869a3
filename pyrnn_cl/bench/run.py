"""A run: every configuration's sides built, timed and compared (:func:`run_bench`), as a
JSON-ready dict with the machine, the settings and a summary."""

from __future__ import annotations

import math
import os
from dataclasses import asdict
from typing import Any

import numpy as np

from ..tuning import CPU_REC_BWD_ROWS
from .configs import FLOP_CONVENTION, _resolve_configs, _storage_dtype, _tiers
from .machine import _machine, _openblas_set_threads, sgemm_gflops
from .memory import memory_estimate
from .sides import _Bridge, _Ours, _Torch
from .timing import TIMING_NOTE, _paired_ratio, _Progress, _rates, _stats, _timed_blocks
from .weights import _make_weights


def run_bench(configs=None, *, device=None, repeat: int = 5, warmup: int = 2,
              threads: int | None = None, compare_torch: bool = True, check: bool = True,
              progress: bool = False, use_cudnn: bool | None = None, block: int = 3,
              torch_device: str = "cpu", host_inputs: bool = False,
              bridge: bool = False, dtype="float32") -> dict:
    """Benchmark ``configs`` (names of :data:`CONFIGS` or :class:`BenchConfig` objects; default
    all) on ``device`` and return the results as a JSON-ready dict.

    ``threads``: thread count for NumPy's BLAS and torch (default: the device's compute units
    for a CPU device, else ``os.cpu_count()``); PoCL's own thread count is fixed when the
    platform is first opened (``POCL_MAX_PTHREAD_COUNT``, which :func:`main` sets from
    ``--threads``). ``compare_torch``: also time PyTorch when it is installed. ``check``:
    compare our forward output with PyTorch's once (not timed). ``use_cudnn``: None picks the
    cuDNN dialect for multi-layer configurations when ``pyrnn_cl`` has it. ``block``: timed
    calls per turn (:func:`_timed_blocks`; 0: single calls round-robin). ``torch_device``:
    where PyTorch runs (``"cuda"``: cuDNN on an NVIDIA GPU, for the GPU tier).
    ``host_inputs``: our ops get NumPy arrays (inputs, weights, states), as in a user's first
    call, so every host-device transfer is timed; default: arrays already on the device.
    ``bridge``: also time forward+backward through ``pyrnn_cl.torch`` (needs torch, whether
    PyTorch is timed or not, on the CPU or on CUDA), against our side run with the cuDNN
    dialect for every configuration (what the bridge calls), the bridge's turns right after
    ours: ``ratio_bridge_fwd_bwd`` is the median over those pairs of turns of our time / the
    bridge's (1.0: no overhead).
    ``dtype``: the storage dtype of our ops' arrays (``"float32"``, ``"float16"``,
    ``"bfloat16"`` where ml_dtypes is installed; ``sources.STORAGE_DTYPES``); PyTorch always
    runs float32, so the ratios of a 16-bit run compare it with PyTorch's float32. A 16-bit run
    also times our float32 calls in the same turns: ``vs_float32_fwd`` / ``vs_float32_fwd_bwd``
    are 16-bit time / float32 time (< 1: the 16-bit storage is faster), measured side by side
    because separate runs on a shared machine differ by more than what is measured.
    """
    import pyrnn_cl as rc

    from ..devices import resolve_device

    if repeat < 1:
        raise ValueError(f"repeat: got {repeat}, expected a value >= 1")
    if block < 0:
        raise ValueError(f"block: got {block}, expected a value >= 0")
    cfgs = _resolve_configs(_tiers()[0] if configs is None else configs)
    storage = _storage_dtype(dtype)
    dev = resolve_device(device)
    if threads is None:
        threads = dev.info.compute_units if dev.info.type == "cpu" else (os.cpu_count() or 1)
    threads = int(threads)
    blas_set = _openblas_set_threads(threads)
    torch_mod: Any = None
    if compare_torch or bridge:
        try:
            import torch
            torch_mod = torch
        except ImportError as exc:
            if bridge:
                raise ImportError(f"bridge: timing pyrnn_cl.torch needs PyTorch ({exc}): pip "
                                  'install "pyrnn_cl[torch]"', name="torch") from exc
            torch_mod = None
    if torch_mod is not None:
        torch_mod.set_num_threads(threads)
    have_cudnn = hasattr(rc, "cudnn_rnn") and hasattr(rc, "cudnn_rnn_backprop")
    if bridge and use_cudnn is None:
        use_cudnn = have_cudnn           # the bridge runs the cuDNN dialect: compare like with like

    sgemm = sgemm_gflops()
    result: dict[str, Any] = {
        "machine": _machine(dev, threads, getattr(torch_mod, "__version__", None)),
        "numpy_sgemm_1024_gflops": sgemm,
        "numpy_blas_threads_set": blas_set,
        "flop_convention": FLOP_CONVENTION,
        "timing": TIMING_NOTE,
        "repeat": repeat,
        "warmup": warmup,
        "block": block,
        "torch_device": torch_device,
        "host_inputs": bool(host_inputs),
        "bridge": bool(bridge),
        "dtype": str(storage),
        "configs": [],
    }
    bar = _Progress(len(cfgs), progress)
    try:
        for cfg in cfgs:
            bar.start(cfg.name)
            result["configs"].append(_bench_one(cfg, dev, repeat, warmup, threads,
                                                torch_mod if compare_torch else None,
                                                check, sgemm["median"], have_cudnn, use_cudnn,
                                                block, torch_device, host_inputs,
                                                storage, bridge))
            bar.step()
    finally:
        bar.close()
    result["summary"] = _summary(result["configs"])
    return result


def _bench_one(cfg, dev, repeat, warmup, threads, torch_mod, check, sgemm, have_cudnn,
               use_cudnn, block=3, torch_device="cpu", host_inputs=False,
               dtype="float32", bridge=False) -> dict:
    rng = np.random.default_rng(1)
    weights = _make_weights(cfg)
    x = rng.uniform(-1, 1, (cfg.T, cfg.N, cfg.I)).astype(np.float32)
    dy = rng.uniform(-1, 1, (cfg.T, cfg.N, cfg.directions * cfg.H)).astype(np.float32)
    entry: dict[str, Any] = {"config": asdict(cfg), "flops": {"forward": cfg.flops_forward(),
                                              "fwd_bwd": 3 * cfg.flops_forward(),
                                              "recurrent_forward": cfg.flops_recurrent()},
             "memory_bytes": memory_estimate(cfg), "ours": None, "torch": None,
             "ratio_fwd": None, "ratio_fwd_bwd": None, "max_abs_diff_vs_torch": None,
             "bridge": None, "ratio_bridge_fwd_bwd": None, "vs_float32_fwd": None,
             "vs_float32_fwd_bwd": None, "note": "", "error": None}
    want_cudnn = have_cudnn and cfg.layers > 1 if use_cudnn is None else bool(use_cudnn)
    try:
        ours = None
        if want_cudnn:
            try:
                ours = _Ours(cfg, weights, x, dy, dev, use_cudnn=True, host_inputs=host_inputs,
                             dtype=dtype)
                ours.run_fwd_bwd()
            except Exception as exc:  # noqa: BLE001 - fall back, and say so
                entry["note"] = f"cuDNN dialect failed ({type(exc).__name__}: {exc}); "
                ours = None
        if ours is None:
            ours = _Ours(cfg, weights, x, dy, dev, use_cudnn=False, host_inputs=host_inputs,
                         dtype=dtype)
        if cfg.layers > 1 and ours.dialect != "cudnn":
            entry["note"] += "two stacked MPSGraph layers (no cuDNN dialect)"
        entry["dialect"] = ours.dialect
        rows = int(dev.tuning("recurrence").get("REC_BWD_ROWS", CPU_REC_BWD_ROWS))
        entry["memory_bytes"] = memory_estimate(
            cfg, bwd_rows=rows, dialect="cudnn" if ours.dialect == "cudnn" else "mps")
        y_ours = ours.forward_output() if check and torch_mod is not None else None
        tm = (_Torch(cfg, weights, x, dy, threads, torch_device) if torch_mod is not None
              else None)
        if y_ours is not None and tm is not None:     # (tm is there when y_ours is)
            entry["max_abs_diff_vs_torch"] = float(np.max(np.abs(y_ours - tm.forward_output())))
        # Alternating turns: the machine may be shared, so both sides see the same load.
        fns = {"fwd": ours.run_forward, "fwd_bwd": ours.run_fwd_bwd}
        if bridge:
            # (its turns right after our forward+backward's: the ratio pairs them; its weights
            # from a CPU torch.nn module, the timed one where PyTorch is timed on the CPU)
            reference = (tm if tm is not None and not tm.cuda
                         else _Torch(cfg, weights, x, dy, threads, "cpu"))
            fns.update(bridge_fwd_bwd=_Bridge(cfg, reference, dev, dtype).run_fwd_bwd)
        if tm is not None:
            fns.update(torch_fwd=tm.run_forward, torch_fwd_bwd=tm.run_fwd_bwd)
        if np.dtype(dtype).itemsize == 2:      # 16-bit storage: float32 in the same turns
            f32 = _Ours(cfg, weights, x, dy, dev, use_cudnn=ours.dialect == "cudnn",
                        host_inputs=host_inputs)
            fns.update(f32_fwd=f32.run_forward, f32_fwd_bwd=f32.run_fwd_bwd)
        times = _timed_blocks(fns, repeat, warmup, block)
        fwd, fb = _stats(times["fwd"]), _stats(times["fwd_bwd"])
        entry["ours"] = {"fwd": fwd, "fwd_bwd": fb, **_rates(cfg, fwd, fb, sgemm)}
        if tm is not None:
            tfwd, tfb = _stats(times["torch_fwd"]), _stats(times["torch_fwd_bwd"])
            entry["torch"] = {"fwd": tfwd, "fwd_bwd": tfb, **_rates(cfg, tfwd, tfb, sgemm)}
            entry["ratio_fwd"] = tfwd["median_ms"] / fwd["median_ms"]
            entry["ratio_fwd_bwd"] = tfb["median_ms"] / fb["median_ms"]
            entry["ratio_fwd_min"] = tfwd["min_ms"] / fwd["min_ms"]
            entry["ratio_fwd_bwd_min"] = tfb["min_ms"] / fb["min_ms"]
        if "f32_fwd" in times:
            entry["vs_float32_fwd"] = fwd["median_ms"] / _stats(times["f32_fwd"])["median_ms"]
            entry["vs_float32_fwd_bwd"] = (fb["median_ms"]
                                           / _stats(times["f32_fwd_bwd"])["median_ms"])
        if "bridge_fwd_bwd" in times:
            bfb = _stats(times["bridge_fwd_bwd"])
            entry["bridge"] = {"fwd_bwd": bfb}
            entry["ratio_bridge_fwd_bwd"] = _paired_ratio(times["fwd_bwd"],
                                                          times["bridge_fwd_bwd"])
            entry["ratio_bridge_fwd_bwd_min"] = fb["min_ms"] / bfb["min_ms"]
    except Exception as exc:  # noqa: BLE001 - one broken config must not hide the others
        entry["error"] = f"{type(exc).__name__}: {exc}"
    return entry


def _geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _summary(entries) -> dict:
    rf = [e["ratio_fwd"] for e in entries if e.get("ratio_fwd")]
    rb = [e["ratio_fwd_bwd"] for e in entries if e.get("ratio_fwd_bwd")]
    rbr = [e["ratio_bridge_fwd_bwd"] for e in entries if e.get("ratio_bridge_fwd_bwd")]
    v16 = {k: [e[k] for e in entries if e.get(k)] for k in ("vs_float32_fwd", "vs_float32_fwd_bwd")}
    return {"geomean_ratio_fwd": _geomean(rf), "geomean_ratio_fwd_bwd": _geomean(rb),
            "geomean_ratio_bridge_fwd_bwd": _geomean(rbr),
            **{f"geomean_{k}": _geomean(v) for k, v in v16.items()},
            **{f"max_{k}": max(v) if v else None for k, v in v16.items()},
            "min_ratio_fwd": min(rf) if rf else None, "min_ratio_fwd_bwd": min(rb) if rb else None,
            "errors": sum(1 for e in entries if e.get("error"))}
