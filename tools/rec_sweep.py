"""Sweep the recurrence's tile settings on a device (a developer's tool).

    python tools/rec_sweep.py [--device SPEC] [HxN ...]   (default 512x16 1024x32 1024x1 2048x64)

For every (REC_VW, REC_NB, REC_KS) of 1/2/4 x 2/4/8/16 x 8/16/32/64 it runs an LSTM forward and
backward (I = 1, so only the steps count; T = 8) through a profiling queue and prints the median
device time of one forward step (``pyrnn_fwd``) and one backward step (``pyrnn_bwd``) in
microseconds, then the five best settings per shape. The GPU defaults of ``tuning.derive`` came
from its run on an H100 (docs/benchmarks.md, "GPU tier"). Step kernels only run per step where
``REC_KS`` > 1 (GPUs); on a CPU device the whole-sequence kernels may take over.
"""

from __future__ import annotations

import argparse
import itertools
import sys

import numpy as np
import pyopencl.array as cla

SETTINGS = list(itertools.product((1, 2, 4), (2, 4, 8, 16), (8, 16, 32, 64)))


def main(argv=None) -> int:
    sys.path[:0] = [".", "tools"]
    from profiling import profiling_device

    import pyrnn_cl as rc
    from pyrnn_cl import tuning

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("shapes", nargs="*", default=["512x16", "1024x32", "1024x1", "2048x64"])
    p.add_argument("--device", default=None)
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes]
    device, events = profiling_device(args.device)
    queue = device.queue

    def step_us(name):
        times = [(e.profile.end - e.profile.start) * 1e-3 for n, e in events if n == name]
        return float(np.median(times)) if times else float("nan")

    start = device.tuning("recurrence")
    rows = []
    for vw, nb, ks in SETTINGS:
        values = dict(start, REC_VW=vw, REC_VW_F64=vw, REC_NB=nb, REC_KS=ks)
        result = []
        with tuning.trial(device, "recurrence", values):
            for H, N in shapes:
                T, rng = 8, np.random.default_rng(0)

                def dev(*shape, rng=rng):
                    return cla.to_device(queue, (rng.standard_normal(shape) * 0.1)
                                         .astype(np.float32))

                x, w, r, b = dev(T, N, 1), dev(4 * H, 1), dev(4 * H, H), dev(4 * H)
                h0, c0 = dev(N, H), dev(N, H)
                desc = rc.LSTMDescriptor(training=True)
                try:
                    for _ in range(3):
                        events.clear()
                        out = rc.lstm(x, r, w, b, h0, c0, descriptor=desc, device=device)
                        rc.lstm_gradients(x, r, out[0], out[2], out[1], w, b, h0, c0,
                                          descriptor=desc, device=device)
                        queue.finish()
                    result.append((step_us("pyrnn_fwd"), step_us("pyrnn_bwd")))
                except Exception as exc:  # noqa: BLE001 - a setting that fails is reported
                    result.append((float("nan"), float("nan")))
                    print(f"VW={vw} NB={nb} KS={ks} {H}x{N}: {type(exc).__name__}: "
                          f"{str(exc)[:200]}")
        rows.append(((vw, nb, ks), result))
        cells = "  ".join(f"{H}x{N}: {f:7.1f}/{bw:7.1f}" for (H, N), (f, bw) in zip(shapes, result))
        print(f"VW={vw} NB={nb:2d} KS={ks:2d}  {cells}", flush=True)
    print("\nbest per shape (forward / backward us per step):")
    for i, (H, N) in enumerate(shapes):
        best = sorted(rows, key=lambda row: row[1][i][0] + row[1][i][1])[:5]
        print(f"{H}x{N}: " + ", ".join(f"VW={k[0]} NB={k[1]} KS={k[2]} {v[i][0]:.1f}/{v[i][1]:.1f}"
                                       for k, v in best))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
