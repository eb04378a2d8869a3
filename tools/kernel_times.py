"""Device time per kernel of one op call, from OpenCL profiling events (a developer's tool).

    python tools/kernel_times.py [--device SPEC] [--repeat N] [--dtype DTYPE] CELL:HxIxNxT ...

Runs the MPSGraph-dialect forward and forward+backward of each shape on device arrays through a
profiling command queue, and prints, per kernel name, launches and summed device time (the
median call of ``--repeat``), next to the call's wall time. What it shows: where a call's time
goes on the device (GEMMs, step kernels, packs) and how much is host time between launches.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import sys
import time

import numpy as np
import pyopencl.array as cla


def main(argv=None) -> int:
    sys.path[:0] = [".", "tools"]
    from profiling import profiling_device

    import pyrnn_cl as rc
    from pyrnn_cl.bench.configs import _shape_config, _storage_dtype

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("shapes", nargs="+")
    p.add_argument("--device", default=None)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--dtype", default="float32",
                   help="storage dtype of every array: float32 (default), float16, bfloat16")
    p.add_argument("--gaps", type=int, default=0, metavar="K",
                   help="also print the K longest idle gaps between kernels (median call), "
                        "with the kernels on either side")
    p.add_argument("--host-profile", type=int, default=0, metavar="K",
                   help="also profile the host (cProfile over the timed calls) and print the K "
                        "functions with the most time of their own")
    args = p.parse_args(argv)
    storage = _storage_dtype(args.dtype)
    device, events = profiling_device(args.device)
    queue = device.queue
    print(f"device: {device.info.name} ({device.info.platform_name})")

    def run_shape(shape):
        cfg = _shape_config(shape)
        rng = np.random.default_rng(0)
        G, T, N, I, H = cfg.G, cfg.T, cfg.N, cfg.I, cfg.H

        def dev(*s):
            return cla.to_device(queue, (rng.standard_normal(s) * 0.1).astype(storage))

        x, w, r, b, h0 = dev(T, N, I), dev(G * H, I), dev(G * H, H), dev(G * H), dev(N, H)
        c0 = dev(N, H)
        if cfg.cell == "lstm":
            desc = rc.LSTMDescriptor(training=True)
            fwd = lambda: rc.lstm(x, r, w, b, h0, c0, descriptor=desc, device=device)  # noqa: E731
            grad_fn = rc.lstm_gradients
        elif cfg.cell == "gru":
            desc = rc.GRUDescriptor(training=True, reset_after=True)
            fwd = lambda: rc.gru(x, r, w, b, h0, descriptor=desc, device=device)  # noqa: E731
            grad_fn = rc.gru_gradients
        else:
            desc = rc.SingleGateRNNDescriptor(training=True, activation="relu")
            fwd = lambda: rc.single_gate_rnn(x, r, w, b, h0, descriptor=desc,  # noqa: E731
                                             device=device)
            grad_fn = rc.single_gate_rnn_gradients

        def fwd_bwd():
            out = fwd()
            dy = out[0]
            if cfg.cell == "lstm":    # [h, c, z_state] -> (x, R, dy, z_state, c, W, b, h0, c0)
                return grad_fn(x, r, dy, out[2], out[1], w, b, h0, c0, descriptor=desc,
                               device=device)
            if cfg.cell == "gru":     # [h, z_state] -> (x, R, dy, z_state, h, W, b, h0)
                return grad_fn(x, r, dy, out[1], out[0], w, b, h0, descriptor=desc, device=device)
            return grad_fn(x, r, dy, out[1], w, b, h0, descriptor=desc, device=device)

        for what, fn in (("forward", fwd), ("forward+backward", fwd_bwd)):
            fn()
            queue.finish()
            runs = []
            prof = cProfile.Profile() if args.host_profile else None
            for _ in range(args.repeat):
                events.clear()
                if prof is not None:
                    prof.enable()
                t0 = time.perf_counter()
                fn()
                queue.finish()
                wall = time.perf_counter() - t0
                if prof is not None:
                    prof.disable()
                per = collections.defaultdict(lambda: [0, 0.0])
                for name, ev in events:
                    per[name][0] += 1
                    per[name][1] += (ev.profile.end - ev.profile.start) * 1e-6
                span = (max(e.profile.end for _, e in events)
                        - min(e.profile.start for _, e in events)) * 1e-6 if events else 0.0
                order = sorted(events, key=lambda ne: ne[1].profile.start)
                gaps = sorted((((b.profile.start - a.profile.end) * 1e-3, na, nb)
                               for (na, a), (nb, b) in zip(order, order[1:])), reverse=True)
                runs.append((wall * 1e3, span, dict(per), gaps))
            runs.sort(key=lambda r: r[0])
            wall, span, per, gaps = runs[len(runs) // 2]
            busy = sum(v[1] for v in per.values())
            print(f"\n{shape} {storage} {what}: wall {wall:.3f} ms, first start to last end "
                  f"{span:.3f} ms, kernels busy {busy:.3f} ms")
            for name, (n, ms) in sorted(per.items(), key=lambda kv: -kv[1][1]):
                print(f"  {name:28s} {n:5d} launches {ms:9.3f} ms  {1e3 * ms / n:8.1f} us each")
            for us, before, after in gaps[:args.gaps]:
                print(f"  idle {us:8.1f} us between {before} and {after}")
            if prof is not None:
                print(f"  host, {args.repeat} calls (cProfile, own time):")
                pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(
                    args.host_profile)

    for shape in args.shapes:
        run_shape(shape)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
