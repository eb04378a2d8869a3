"""How close any torch bridge can come to device-array calls on a device (a developer's tool).

    python tools/bridge_floor.py [--device SPEC] [--rounds N] CELL:HxIxNxT ...

Times, interleaved call by call (the order rotating every round), forward+backward of:

* ``arrays``: the cuDNN-dialect calls on device arrays, results left on the device (the bench's
  bridge baseline);
* ``bridge``: ``pyrnn_cl.torch``'s module, as ``pyrnn-cl bench --bridge`` times it;
* ``floor``: a stripped bridge, a bare ``torch.autograd.Function`` around the same two calls
  that wraps the input and the output gradient in place, reads back only ``y``, ``dx`` and the
  flat parameter gradient (one wait each), hands autograd the parameters' gradients as views of
  that flat one (as the module does) and does nothing else: no argument checks, no parameter
  cache or version checks, no ``h_n``/``c_n``. What torch's autograd and the two inherent
  synchronisations (the forward's results are read before the backward can be called) cost on
  their own. (Leaving the parameters' gradients out of it changed nothing measurable: 0.998,
  150 rounds, tiny LSTM on PoCL.)

It prints the median time of each and its ratio to ``arrays``: where ``floor`` stays below a
target, no bridge reaches it on that device and shape.
"""

from __future__ import annotations

import time

import numpy as np
import pyopencl.array as cla


def _measure(shape: str, device, rounds: int) -> None:
    import torch
    from bridge_prepare_ab import setup

    import pyrnn_cl as rc
    from pyrnn_cl._arrays import read_host, shares_host_memory, wrap_host

    c = setup(shape, device)
    q, mode, m, params, x, dy = device.queue, c.mode, c.m, c.params, c.x, c.dy
    pd, h0, c0 = c.pd, c.h0, c.c0
    in_place = shares_host_memory(device)
    # the floor's parameters in the flat params' order, and where each lies in it
    flat_params, slots = m._flat_parameters(), m._param_slots()[1]

    def host_array(t):
        a = t.detach().contiguous().numpy()
        return wrap_host(q, a) if in_place else cla.to_device(q, a)

    class Floor(torch.autograd.Function):
        @staticmethod
        def forward(ctx, xx, *_params):
            xa = host_array(xx)
            y, _, _, res, host = rc.cudnn_rnn(xa, h0, c0, pd, rnn_mode=mode, device=device)
            out, = read_host(q, [(y, 0, y.shape)], in_place)
            ctx.state = (xa, res, host)
            return torch.from_numpy(out)

        @staticmethod
        def backward(ctx, g):
            xa, res, host = ctx.state
            ga = host_array(g)
            dx, _, _, dp = rc.cudnn_rnn_backprop(xa, h0, c0, pd, None, None, None, None, ga,
                                                 None, None, res, host, rnn_mode=mode,
                                                 device=device)
            gx, gp = read_host(q, [(dx, 0, dx.shape), (dp, 0, dp.shape)], in_place)
            flat = torch.from_numpy(gp)
            return (torch.from_numpy(gx),) + tuple(flat[off:off + n].view(p.shape)
                                                   for (off, n), p in zip(slots, flat_params))

    def bridge():
        xx = x.detach().requires_grad_(True)
        torch.autograd.grad(m(xx)[0], [xx, *params], dy)

    def floor():
        xx = x.detach().requires_grad_(True)
        torch.autograd.grad(Floor.apply(xx, *flat_params), [xx, *flat_params], dy)

    sides = {"arrays": c.arrays, "bridge": bridge, "floor": floor}
    times: dict = {k: [] for k in sides}
    names = list(sides)
    for r in range(rounds + 3):
        for k in names[r % 3:] + names[:r % 3]:
            t0 = time.perf_counter()
            sides[k]()
            if r >= 3:                          # (warm-up rounds)
                times[k].append(time.perf_counter() - t0)
    base = np.median(times["arrays"])
    print(f"{shape}: " + ", ".join(f"{k} {np.median(v) * 1e3:.3f} ms ({base / np.median(v):.3f})"
                                   for k, v in times.items()))


if __name__ == "__main__":
    from bridge_prepare_ab import shape_main

    raise SystemExit(shape_main(__doc__, _measure))
