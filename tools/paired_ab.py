"""Paired A/B of one set of tuning values against the device's own (a developer's tool).

    python tools/paired_ab.py [--device SPEC] [--rounds N] [--base JSON] FAMILY CONFIGS JSON

FAMILY is a tuning family (recurrence, gemm, gemm_f64, reduce), CONFIGS a comma list of
``pyrnn-cl bench`` configuration names or CELL:HxIxNxT shapes, JSON the values that variant B
changes, e.g. ``'{"REC_ACC_MAX": 0}'``; variant A is the device's own values
(``device.tuning``) with ``--base``'s where given (both variants take those: e.g. the vector
width of another CPU whose code PoCL generates here, ``POCL_KERNELLIB_NAME``). Each round times
one call of A and one of B back to back, alternating which goes first, and the tool prints, per
configuration and for the forward and the forward+backward (MPSGraph dialect, device arrays),
the median of the per-round ratios B / A, their interquartile range and in how many rounds B
was the faster. On a shared host whose
speed drifts by 2x within minutes, medians of separately timed variants (``tools/rec_ab.py``)
move with the drift; a ratio taken within each round does not (docs/benchmarks.md, "Register
tiles from the register file").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def main(argv=None) -> int:
    sys.path[:0] = [".", "tools"]
    from rec_ab import calls

    from pyrnn_cl import tuning
    from pyrnn_cl.devices import get_device

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("family", choices=tuning.FAMILIES)
    p.add_argument("configs")
    p.add_argument("values", metavar="JSON")
    p.add_argument("--device", default=None)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--base", default="{}", metavar="JSON",
                   help="values of FAMILY that both variants take")
    args = p.parse_args(argv)
    device = get_device(args.device)
    a_values = dict(device.tuning(args.family), **json.loads(args.base))
    b_values = dict(a_values, **json.loads(args.values))
    print(f"device: {device.info.name}; A: its {args.family} values with {args.base}, B: A "
          f"with {args.values}", flush=True)
    for cfg, label, fn in calls(args.configs, device):
        def run(values, fn=fn):
            with tuning.trial(device, args.family, values):
                t0 = time.perf_counter()
                fn()
                return time.perf_counter() - t0

        for values in (a_values, b_values, a_values, b_values):      # warm-up, builds
            run(values)
        times_a, times_b, ratios = [], [], []
        for r in range(args.rounds):
            if r % 2:
                b = run(b_values)
                a = run(a_values)
            else:
                a = run(a_values)
                b = run(b_values)
            times_a.append(a)
            times_b.append(b)
            ratios.append(b / a)
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        med_a, med_b = statistics.median(times_a), statistics.median(times_b)
        print(f"{cfg.name:22s} {label:8s} A {med_a * 1e3:8.2f} ms  B {med_b * 1e3:8.2f} ms"
              f"  B/A {statistics.median(ratios):.3f} (IQR {q1:.3f}-{q3:.3f}), B faster in "
              f"{sum(r < 1 for r in ratios)}/{args.rounds}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
