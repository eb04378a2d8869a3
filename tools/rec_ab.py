"""A/B of tuning values (recurrence by default) on bench configurations (a developer's tool).

    python tools/rec_ab.py [--device SPEC] [--repeat N] [--family F] CONFIGS NAME=JSON [...]

CONFIGS is a comma list of ``pyrnn-cl bench`` configuration names (or CELL:HxIxNxT shapes).
Each NAME=JSON is a variant: the device's own values of the family (``--family``: recurrence,
gemm, gemm_f64 or reduce; ``device.tuning``) updated
by the JSON object, e.g. ``vw1='{"REC_VW": 1}'``; the device's values themselves are always
the first variant, ``device``. Every configuration's forward and forward+backward (MPSGraph
dialect, device arrays) are timed in alternating turns of the variants (the bench's
``_timed_blocks``) under :func:`pyrnn_cl.tuning.trial`, and the medians printed with each
variant's time over the first's. What it is for: deciding a derived default or a rule from
measurements on one machine in one process (docs/benchmarks.md quotes its runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np


def calls(configs: str, device):
    """``(config, "fwd" | "fwd+bwd", call)`` for each configuration of the comma list
    ``configs`` (bench names or CELL:HxIxNxT shapes): the MPSGraph-dialect forward and
    forward+backward on device arrays, as the bench times them."""
    from pyrnn_cl.bench.configs import _resolve_configs
    from pyrnn_cl.bench.sides import _Ours
    from pyrnn_cl.bench.weights import _make_weights

    for cfg in _resolve_configs(configs.split(",")):
        rng = np.random.default_rng(1)
        x = rng.uniform(-1, 1, (cfg.T, cfg.N, cfg.I)).astype(np.float32)
        dy = rng.uniform(-1, 1, (cfg.T, cfg.N, cfg.directions * cfg.H)).astype(np.float32)
        ours = _Ours(cfg, _make_weights(cfg), x, dy, device, use_cudnn=False)
        yield cfg, "fwd", ours.run_forward
        yield cfg, "fwd+bwd", ours.run_fwd_bwd


def main(argv=None) -> int:
    sys.path[:0] = ["."]
    from pyrnn_cl import tuning
    from pyrnn_cl.bench.timing import _timed_blocks
    from pyrnn_cl.devices import get_device

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("configs")
    p.add_argument("variants", nargs="+", metavar="NAME=JSON")
    p.add_argument("--device", default=None)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--family", default="recurrence", choices=tuning.FAMILIES)
    args = p.parse_args(argv)
    device = get_device(args.device)
    base = dict(device.tuning(args.family))
    variants = {"device": base}
    for spec in args.variants:
        name, _, text = spec.partition("=")
        variants[name] = dict(base, **json.loads(text))
    print(f"device: {device.info.name}; its {args.family} values: {base}", flush=True)
    for cfg, label, fn in calls(args.configs, device):
        def under(values, fn=fn):
            def call():
                with tuning.trial(device, args.family, values):
                    fn()
            return call

        times = _timed_blocks({k: under(v) for k, v in variants.items()},
                              repeat=args.repeat, warmup=2)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        first = med["device"]
        print(f"{cfg.name:22s} {label:8s} " + "  ".join(
            f"{k} {m:.2f} ms ({m / first:.3f})" for k, m in med.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
