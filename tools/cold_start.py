#!/usr/bin/env python
"""Cold and warm first-call times: what a PyTorch user meets on their first line.

Runs, in fresh interpreters, ``import pyrnn_cl.torch`` and the first forward and backward of a
2-layer ``pyrnn_cl.torch.LSTM(16, 32)`` (T = 7, N = 3) twice: first with empty kernel caches (a
new ``POCL_CACHE_DIR`` and ``PYRNN_CL_CACHE_DIR``), then again with the caches the first run
filled. Prints the import, forward and backward seconds of each, the programs built, and the
machine (CPU model, ISA and load average, since these machines are shared)::

    python tools/cold_start.py [--device pocl] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from pyrnn_cl import bench  # noqa: E402  (the CPU model and ISA, as bench reports them)

CHILD = r"""
import json, time
t0 = time.perf_counter()
import torch
import pyrnn_cl.torch as rt
from pyrnn_cl import programs
t1 = time.perf_counter()
torch.manual_seed(0)
m = rt.LSTM(16, 32, num_layers=2)
x = torch.randn(7, 3, 16, requires_grad=True)
t2 = time.perf_counter()
y, _ = m(x)
t3 = time.perf_counter()
y.sum().backward()
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "forward": t3 - t2, "backward": t4 - t3,
                  "total": (t1 - t0) + (t4 - t2), "cache": programs.cache_stats()}))
"""


def run_once(env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"cold_start: the measured process failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="pyrnn_cl device spec (default: ranking)")
    p.add_argument("--repeat", type=int, default=1, help="cold/warm pairs to run")
    args = p.parse_args(argv)
    print(f"{bench._cpu_model()} ({bench._cpu_isa()}), {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, "
          f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="pyrnn_cl-cold-") as tmp:
            env = dict(os.environ, POCL_CACHE_DIR=str(Path(tmp) / "pocl"),
                       PYRNN_CL_CACHE_DIR=str(Path(tmp) / "pyrnn_cl"), PYRNN_CL_QUIET="1",
                       PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
            if args.device:
                env["PYRNN_CL_DEVICE"] = args.device
            for label in ("cold", "warm"):
                r = run_once(env)
                print(f"{label}: import {r['import']:.2f} s, forward {r['forward']:.2f} s, "
                      f"backward {r['backward']:.2f} s, total {r['total']:.2f} s "
                      f"({r['cache']['source_builds']} source builds, "
                      f"{r['cache']['disk_hits']} from pyrnn_cl's cache)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
