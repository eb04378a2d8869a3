"""Page faults and time per op call, per kind of input (a developer's tool).

    python tools/page_faults.py [--device SPEC] [--rounds N] CELL:HxIxNxT ...

For each shape, the MPSGraph-dialect forward (inference and training) and gradients, on NumPy
arrays and on device arrays, and ``pyrnn_cl.torch``'s forward+backward: the median time of
``--rounds`` calls after five warm ones, and the process's minor page faults per call
(``getrusage``; every thread's, the device's included). What it shows: memory that an
implementation gives back to the system when a buffer is released and faults in again when a
new buffer is first written (Intel's CPU runtime; docs/benchmarks.md, "Intel's runtime: results
from the pool"). A call whose buffers come from pyrnn_cl's pool makes none after its first.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time

import numpy as np


def _measure(fn, calls: int) -> tuple[float, float]:
    """(median seconds, minor faults per call) of ``calls`` calls of ``fn`` after five."""
    for _ in range(5):
        fn()
    times = []
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    return statistics.median(times), faults / calls


def _calls(cell: str, H: int, I: int, N: int, T: int, device):
    """``(label, function)`` pairs of the calls measured at one shape."""
    import pyopencl.array as cla

    import pyrnn_cl as rc

    q = device.queue
    rng = np.random.default_rng(0)
    G = {"lstm": 4, "gru": 3}.get(cell, 1)
    host = {name: (0.1 * rng.standard_normal(shape)).astype(np.float32) for name, shape in (
        ("x", (T, N, I)), ("R", (G * H, H)), ("W", (G * H, I)), ("b", (G * H,)),
        ("dy", (T, N, H)))}
    op, grad, desc = {
        "lstm": (rc.lstm, rc.lstm_gradients, rc.LSTMDescriptor),
        "gru": (rc.gru, rc.gru_gradients, rc.GRUDescriptor),
    }.get(cell, (rc.single_gate_rnn, rc.single_gate_rnn_gradients,
                 lambda training: rc.SingleGateRNNDescriptor(training=training,
                                                             activation="relu")))
    out = []
    for kind in ("NumPy", "device arrays"):
        a = host if kind == "NumPy" else {k: cla.to_device(q, v) for k, v in host.items()}
        x, R, W, b, dy = a["x"], a["R"], a["W"], a["b"], a["dy"]

        def forward(training, x=x, R=R, W=W, b=b):
            result = op(x, R, W, b, descriptor=desc(training=training), device=device)
            q.finish()
            return result

        saved = forward(True)

        def gradients(x=x, R=R, W=W, b=b, dy=dy, saved=saved):
            z, rest = saved[-1], saved[1:-1]
            args = (x, R, dy, z, *rest) if cell == "lstm" else (x, R, dy, z)
            if cell == "gru":
                args = (x, R, dy, z, saved[0])
            grad(*args, W, b, descriptor=desc(training=True), device=device)
            q.finish()

        out += [(f"{kind} forward", lambda f=forward: f(False)),
                (f"{kind} training forward", lambda f=forward: f(True)),
                (f"{kind} gradients", gradients)]
    try:
        import torch

        import pyrnn_cl.torch as rt
    except ImportError:
        return out
    module = {"lstm": rt.LSTM, "gru": rt.GRU}.get(cell)
    m = (module(I, H, cl_device=device) if module
         else rt.RNN(I, H, nonlinearity="relu", cl_device=device))
    xt, dyt = torch.from_numpy(host["x"]), torch.from_numpy(host["dy"])
    params = list(m.parameters())

    def bridge():
        xx = xt.detach().requires_grad_(True)
        torch.autograd.grad(m(xx)[0], [xx, *params], dyt)

    return out + [("pyrnn_cl.torch forward+backward", bridge)]


def _measure_shape(shape: str, device, calls: int) -> None:
    from pyrnn_cl.bench.configs import _shape_config

    cfg = _shape_config(shape)
    if cfg is None:
        raise SystemExit(f"not a shape: {shape!r} (CELL:HxIxNxT)")
    for label, fn in _calls(cfg.cell, cfg.H, cfg.I, cfg.N, cfg.T, device):
        seconds, faults = _measure(fn, calls)
        print(f"{shape:20s} {label:32s} {seconds * 1e3:9.3f} ms  {faults:8.0f} faults/call",
              flush=True)


if __name__ == "__main__":
    sys.path[:0] = [".", "tools"]
    from bridge_prepare_ab import shape_main

    raise SystemExit(shape_main(__doc__, _measure_shape))
