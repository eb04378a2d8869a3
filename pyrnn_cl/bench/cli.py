"""``pyrnn-cl bench [options]``: the argument parser and :func:`main` (run, print the table,
write JSON and PNG)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from .configs import QUICK, _resolve_configs, _shape_help, _storage_dtype, _tiers
from .machine import pin_pocl_workers
from .report import format_table, write_png
from .run import run_bench


def _parser() -> argparse.ArgumentParser:
    cpu, gpu = _tiers()
    p = argparse.ArgumentParser(
        prog="pyrnn-cl bench",
        description="Time LSTM/GRU/RNN forward and forward+backward on an OpenCL device against "
                    "PyTorch (same run, same thread count).")
    p.add_argument("--configs", metavar="NAMES", action="append",
                   help="comma-separated configuration names (repeatable); default: all. "
                        "Known: " + ", ".join(c.name for c in cpu) + "; or " + _shape_help()
                        + ", e.g. lstm:256x256x32x50")
    p.add_argument("--tier", choices=("cpu", "gpu"), default="cpu",
                   help="configuration set when --configs is not given: the CPU tier (default) "
                        "or the GPU tier of performance.md §6.3 (" + str(len(gpu))
                        + " DeepBench-style shapes)")
    p.add_argument("--torch-device", default="cpu", metavar="DEV",
                   help="where PyTorch runs: cpu (default) or cuda (cuDNN, same GPU)")
    p.add_argument("--quick", action="store_true",
                   help="only a few small configurations (" + ", ".join(QUICK) + ")")
    p.add_argument("--list", action="store_true", help="list the configurations and exit")
    p.add_argument("--device", metavar="SPEC", help="device spec (as PYRNN_CL_DEVICE)")
    p.add_argument("--json", metavar="PATH", help="write the full results as JSON")
    p.add_argument("--png", metavar="PATH", help="write a bar chart of the ratios (matplotlib)")
    p.add_argument("--repeat", type=int, default=5, metavar="N",
                   help="timed repetitions per measurement (default 5; median and min reported)")
    p.add_argument("--block", type=int, default=3, metavar="B",
                   help="timed calls per turn: each side runs untimed calls (at least two, "
                        "for at least 20 ms), then B timed calls back to back, turns "
                        "alternating (default 3); 0: single calls round-robin")
    p.add_argument("--threads", type=int, metavar="N",
                   help="threads for PoCL (POCL_MAX_PTHREAD_COUNT), NumPy's BLAS and torch "
                        "(default: the device's compute units)")
    p.add_argument("--no-pin", action="store_true",
                   help="leave PoCL's worker threads unpinned (PYRNN_CL_PIN_POCL=0; default: "
                        "POCL_AFFINITY=1, one "
                        "worker per CPU, when the process may run on CPUs 0..N-1 and "
                        "POCL_AFFINITY is not set already)")
    p.add_argument("--host-inputs", action="store_true",
                   help="pass our ops NumPy arrays (a user's first call: transfers timed) "
                        "instead of arrays already on the device")
    p.add_argument("--bridge", action="store_true",
                   help="also time forward+backward through pyrnn_cl.torch against the same "
                        "cuDNN-dialect calls on device arrays (the bridge's overhead); our side "
                        "then uses the cuDNN dialect for every configuration. Needs torch; "
                        "works with --no-torch and with --torch-device cuda too")
    p.add_argument("--dtype", default="float32",
                   help="storage dtype of our ops' arrays: float32 (default), float16, or "
                        "bfloat16 where ml_dtypes is installed (PyTorch runs float32)")
    p.add_argument("--no-torch", action="store_true", help="do not time PyTorch")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _importable(module: str) -> bool:
    """True when ``module`` (an optional package) imports."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """``pyrnn-cl bench [options]``; returns the exit status (0 ok, 1 a configuration failed,
    2 bad arguments)."""
    parser = _parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.list:
        cpu, gpu = _tiers()
        for c in cpu + gpu:
            print(f"{c.name:16s} {c.cell:8s} H={c.H:<5d} I={c.I:<5d} N={c.N:<3d} T={c.T:<4d} "
                  f"{c.layers}x{c.directions}  {c.why}")
        return 0
    if args.png and not _importable("matplotlib"):
        parser.error('--png needs matplotlib, which is not installed: '
                     'pip install "pyrnn_cl[examples]"')
    if not args.no_torch and not _importable("torch"):
        print('note: PyTorch is not installed, so there is no torch column to compare with '
              '(pip install "pyrnn_cl[torch]"; --no-torch silences this)', file=sys.stderr)
    if args.repeat < 1:
        parser.error(f"--repeat: got {args.repeat}, expected >= 1")
    if args.block < 0:
        parser.error(f"--block: got {args.block}, expected >= 0")
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads: got {args.threads}, expected >= 1")
        # read by PoCL when the platform is first opened (PoCL >= 4 also reads the new name)
        os.environ["POCL_MAX_PTHREAD_COUNT"] = str(args.threads)
        os.environ["POCL_CPU_MAX_CU_COUNT"] = str(args.threads)
    if args.no_pin:
        # (pyrnn_cl pins PoCL's workers at its first device query unless told not to)
        os.environ["PYRNN_CL_PIN_POCL"] = "0"
    else:
        pin_pocl_workers(args.threads)
    names = None
    if args.configs:
        names = [n.strip() for group in args.configs for n in group.split(",") if n.strip()]
    elif args.quick:
        names = list(QUICK)
    try:
        cpu, gpu = _tiers()
        default = gpu if args.tier == "gpu" else cpu
        configs = _resolve_configs(names) if names else list(default)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        _storage_dtype(args.dtype)
    except TypeError as exc:
        parser.error(f"--dtype: {exc}")
    if args.repeat < 5:
        print(f"note: --repeat {args.repeat} is below the 5 repetitions the methodology asks "
              "for", file=sys.stderr)
    result = run_bench(configs, device=args.device, repeat=args.repeat, threads=args.threads,
                       compare_torch=not args.no_torch, progress=not args.no_progress,
                       block=args.block, torch_device=args.torch_device,
                       host_inputs=args.host_inputs, dtype=args.dtype, bridge=args.bridge)
    print(format_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.png:
        write_png(result, args.png)
    return 1 if result["summary"]["errors"] else 0
