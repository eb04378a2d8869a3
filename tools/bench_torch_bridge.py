"""Overhead of the torch bridge: forward + backward of one ``pyrnn_cl.torch`` module against
the same ``rc.cudnn_rnn`` + ``rc.cudnn_rnn_backprop`` calls on device arrays (what the bridge
runs, without torch and without host transfers).

Usage: ``python tools/bench_torch_bridge.py [--device pocl] [--mode lstm] [--hidden 256]
[--input 256] [--batch 32] [--steps 50] [--repeat 20]``. Prints the median time of each
(calls interleaved) and their ratio (device-array time / bridge time: 1.0 means no overhead).
The bridge's time includes what cannot be avoided with torch on the CPU: uploading the input
and initial states, downloading the outputs, uploading their gradients and downloading the
input, state and parameter gradients.
"""
import argparse
import statistics
import time

import numpy as np
import pyopencl.array as cla
import torch

import pyrnn_cl as rc
import pyrnn_cl.torch as rt
from pyrnn_cl.devices import get_device

CLASSES = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN"}


def _medians_ms(fns, repeat):
    """Median wall time of each function, called in turn ``repeat`` times (interleaved, so that
    a change in the machine's load affects all of them alike), after two warm-up rounds
    (kernel builds, pools, caches)."""
    for fn in fns:
        fn()
        fn()
    times = [[] for _ in fns]
    for _ in range(repeat):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [1e3 * statistics.median(ts) for ts in times]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="pocl")
    ap.add_argument("--mode", default="lstm", choices=sorted(CLASSES))
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--input", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args(argv)
    dev = get_device(a.device)
    T, N, I, H = a.steps, a.batch, a.input, a.hidden
    torch.manual_seed(0)
    m = getattr(rt, CLASSES[a.mode])(I, H, cl_device=a.device)
    x = torch.randn(T, N, I, requires_grad=True)
    gy = torch.randn(T, N, H)

    def bridge():
        m.zero_grad(set_to_none=True)
        x.grad = None
        y, _ = m(x)
        y.backward(gy)
        return x.grad

    lstm = a.mode == "lstm"
    q = dev.queue
    params = cla.to_device(q, torch.cat([p.detach().reshape(-1) for p in m.parameters()])
                           .numpy()[:rc.cudnn_rnn_params_size(1, H, I, rnn_mode=a.mode)])
    x_d = cla.to_device(q, x.detach().numpy())
    h0 = cla.zeros(q, (1, N, H), np.float32)
    c0 = cla.zeros(q, (1, N, H), np.float32) if lstm else None
    gy_d = cla.to_device(q, gy.numpy())

    def direct():
        y, hn, cn, res, host = rc.cudnn_rnn(x_d, h0, c0, params, rnn_mode=a.mode, device=dev)
        dx, dh0, dc0, dp = rc.cudnn_rnn_backprop(x_d, h0, c0, params, None, y, hn,
                                                 cn if lstm else None, gy_d, None, None, res,
                                                 host, rnn_mode=a.mode, device=dev)
        q.finish()
        return dx

    t_direct, t_bridge = _medians_ms((direct, bridge), a.repeat)
    print(f"{a.mode} I={I} H={H} N={N} T={T} on {dev.info.name} ({a.device}), fwd+bwd, median "
          f"of {a.repeat}")
    print(f"  rc.cudnn_rnn + backprop on device arrays: {t_direct:8.2f} ms")
    print(f"  pyrnn_cl.torch module:                    {t_bridge:8.2f} ms")
    print(f"  ratio device-array / bridge:              {t_direct / t_bridge:8.3f}")


if __name__ == "__main__":
    main()
