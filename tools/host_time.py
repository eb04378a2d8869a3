"""Python host work of op calls, with the driver's kernel launches stubbed out (a developer's tool).

    python tools/host_time.py [--device SPEC] [--rounds N] [--calls N] CELL:HxIxNxT ...

For each shape, the cuDNN-dialect training forward (``cudnn_rnn``) and its backprop
(``cudnn_rnn_backprop``) on device arrays, float32: the host time per call with every kernel
launch replaced by a no-op (``programs._launch``: only Python and the driver's other calls run,
so the device's speed and its threads do not enter), as the best of ``--rounds`` rounds of
``--calls`` calls, and the number of Python function calls per call (``cProfile``: a count that
does not move with the host's load, for before/after comparisons of host-side changes). With
``PYRNN_CL_PROFILE=nvidia`` the GPU's derived values run on a CPU device, so the GPU's host path
is measured without a GPU. What it shows: the per-call cost that bounds small calls on a GPU
(docs/benchmarks.md, "The cuDNN dialect's 16-bit calls on the H100").
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np


def _calls(fn, n: int) -> int:
    """Python function calls per call of ``fn`` (``n`` calls profiled)."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(n):
        fn()
    profile.disable()
    return sum(v[1] for v in pstats.Stats(profile).stats.values()) // n


def _measure(shape: str, device, rounds: int, calls: int) -> None:
    import pyopencl.array as cla

    import pyrnn_cl as rc
    from pyrnn_cl import programs
    from pyrnn_cl.bench.configs import _shape_config

    cfg = _shape_config(shape)
    mode = {"lstm": "lstm", "gru": "gru"}.get(cfg.cell, "rnn_relu")
    T, N, I, H = cfg.T, cfg.N, cfg.I, cfg.H
    q = device.queue
    rng = np.random.default_rng(0)
    size = int(rc.cudnn_rnn_params_size(1, H, I, rnn_mode=mode))
    x, h0, c0, p, dy = (cla.to_device(q, a.astype(np.float32)) for a in (
        rng.standard_normal((T, N, I)), rng.standard_normal((1, N, H)),
        rng.standard_normal((1, N, H)), 0.05 * rng.standard_normal(size),
        rng.standard_normal((T, N, H))))
    c0 = c0 if mode == "lstm" else None
    out = rc.cudnn_rnn(x, h0, c0, p, rnn_mode=mode, device=device)
    q.finish()
    ops = {
        "cudnn_rnn (training)": lambda: rc.cudnn_rnn(x, h0, c0, p, rnn_mode=mode, device=device),
        "cudnn_rnn_backprop": lambda: rc.cudnn_rnn_backprop(
            x, h0, c0, p, None, *out[:3], dy, None, None, out[3], out[4], rnn_mode=mode,
            device=device),
    }
    real = programs._launch
    programs._launch = lambda *args, **kwargs: None
    try:
        for name, fn in ops.items():
            for _ in range(20):
                fn()
            best = float("inf")
            for _ in range(rounds):
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                best = min(best, (time.perf_counter() - t0) / calls)
            print(f"{shape} {name}: {best * 1e6:.0f} us of host time, "
                  f"{_calls(fn, 50)} Python calls per call")
    finally:
        programs._launch = real
        q.finish()


def main(argv=None) -> int:
    from pyrnn_cl.devices import get_device

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("shapes", nargs="+")
    p.add_argument("--device", default=None)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=200)
    args = p.parse_args(argv)
    device = get_device(args.device)
    print(f"device: {device.info.name} ({device.info.platform_name}), profile "
          f"{device.profile.name}")
    for shape in args.shapes:
        _measure(shape, device, args.rounds, args.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
