"""The torch bridge's forward+backward with and without the prepared backward (a developer's tool).

    python tools/bridge_prepare_ab.py [--device SPEC] [--rounds N] CELL:HxIxNxT ...

A training forward through ``pyrnn_cl.torch`` prepares its backward while the device runs
(``pyrnn_cl.cudnn._prepare_backprop``) where ``pyrnn_cl.torch._prepares_backward`` says so (devices
with cores of their own). This times both ways on the chosen device, interleaved call by call, next
to the same cuDNN-dialect calls on device arrays (the bench's bridge baseline), and prints medians:
forward (module call, results on the host), forward+backward, and the bridge ratio (device-array
time / bridge time) of each way.
"""

from __future__ import annotations

import argparse
import time
import types

import numpy as np


def setup(shape: str, device) -> types.SimpleNamespace:
    """The bench's bridge comparison at ``shape`` (CELL:HxIxNxT) on ``device``: ``m``, a
    ``pyrnn_cl.torch`` module (``params`` its parameters), CPU tensors ``x`` and ``dy``, the
    same sizes as device arrays (``xd``, ``dyd``, flat params ``pd``, zero ``h0``/``c0``) with
    ``mode`` (the cuDNN dialect's ``rnn_mode``), and ``arrays()``: the cuDNN-dialect forward and
    backward on them, results left on the device (the baseline)."""
    import pyopencl.array as cla
    import torch

    import pyrnn_cl as rc
    import pyrnn_cl.torch as rt
    from pyrnn_cl.bench.configs import _shape_config

    queue = device.queue
    cfg = _shape_config(shape)
    H, I, N, T = cfg.H, cfg.I, cfg.N, cfg.T
    mode = {"lstm": "lstm", "gru": "gru"}.get(cfg.cell, "rnn_relu")
    m = {"lstm": rt.LSTM, "gru": rt.GRU}[mode](I, H, cl_device=device) if mode != "rnn_relu" \
        else rt.RNN(I, H, nonlinearity="relu", cl_device=device)
    x, dy = torch.randn(T, N, I), torch.randn(T, N, H)
    size = rc.cudnn_rnn_params_size(1, H, I, rnn_mode=mode)
    pd = cla.to_device(queue, (0.05 * np.random.default_rng(0).standard_normal(size))
                       .astype(np.float32))
    xd, dyd = cla.to_device(queue, x.numpy()), cla.to_device(queue, dy.numpy())
    h0 = cla.zeros(queue, (1, N, H), np.float32)
    c0 = cla.zeros(queue, (1, N, H), np.float32) if mode == "lstm" else None

    def arrays():
        y, hn, cn, res, host = rc.cudnn_rnn(xd, h0, c0, pd, rnn_mode=mode, device=device)
        rc.cudnn_rnn_backprop(xd, h0, c0, pd, None, None, None, None, dyd, None, None, res, host,
                              rnn_mode=mode, device=device)
        queue.finish()

    return types.SimpleNamespace(mode=mode, m=m, params=list(m.parameters()), x=x, dy=dy,
                                 pd=pd, xd=xd, dyd=dyd, h0=h0, c0=c0, arrays=arrays)


def _measure(shape: str, device, rounds: int) -> None:
    """Print the medians of ``rounds`` interleaved rounds at ``shape`` (CELL:HxIxNxT)."""
    import torch

    import pyrnn_cl.torch as rt

    c = setup(shape, device)
    m, params, x, dy = c.m, c.params, c.x, c.dy

    def arrays():
        t0 = time.perf_counter()
        c.arrays()
        return 0.0, time.perf_counter() - t0

    def bridge(prepared):
        default, rt._prepares_backward = rt._prepares_backward, lambda dev: prepared
        try:
            xx = x.detach().requires_grad_(True)
            t0 = time.perf_counter()
            out = m(xx)[0]
            t1 = time.perf_counter()
            torch.autograd.grad(out, [xx, *params], dy)
            return t1 - t0, time.perf_counter() - t0
        finally:
            rt._prepares_backward = default

    sides = {"arrays": arrays, False: lambda: bridge(False), True: lambda: bridge(True)}
    times: dict = {k: [] for k in sides}
    for r in range(rounds + 4):
        # the two bridge ways swap places every round: neither always follows the other
        for k in ("arrays", False, True) if r % 2 else ("arrays", True, False):
            got = sides[k]()
            if r >= 4:                          # (warm-up rounds)
                times[k].append(got)
    base = np.median([t for _, t in times["arrays"]])
    print(f"{shape}: device arrays f+b {base * 1e3:.3f} ms")
    for prepared in (False, True):
        fwd = np.median([f for f, _ in times[prepared]])
        fb = np.median([t for _, t in times[prepared]])
        print(f"  bridge, {'prepared  ' if prepared else 'unprepared'}: forward {fwd * 1e3:.3f} "
              f"ms, f+b {fb * 1e3:.3f} ms, ratio {base / fb:.3f}")


def shape_main(doc: str, measure, argv=None) -> int:
    """The command line of these bridge tools: SHAPE ... [--device SPEC] [--rounds N], then
    ``measure(shape, device, rounds)`` per shape (``doc``: the tool's docstring)."""
    from pyrnn_cl.devices import get_device

    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("shapes", nargs="+")
    p.add_argument("--device", default=None)
    p.add_argument("--rounds", type=int, default=60)
    args = p.parse_args(argv)
    device = get_device(args.device)
    print(f"device: {device.info.name} ({device.info.platform_name})")
    for shape in args.shapes:
        measure(shape, device, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(shape_main(__doc__, _measure))
