"""The memory model: device bytes our engine allocates per call of a configuration, from its
buffer shapes (:func:`memory_estimate`)."""

from __future__ import annotations

from ..layout import SAVED_PARTS
from ..tuning import CPU_REC_BWD_ROWS
from .configs import BenchConfig


def memory_estimate(cfg: BenchConfig, itemsize: int = 4, bwd_rows: int = CPU_REC_BWD_ROWS,
                    dialect: str = "mps") -> dict:
    """Device bytes our engine allocates for one forward and one forward+backward of ``cfg``
    (per layer, summed), from the engine's buffer shapes; ``bwd_rows`` is the device's
    ``REC_BWD_ROWS`` (rows of gate gradients per backward chunk), ``dialect`` ``"mps"`` or
    ``"cudnn"``.

    The engine's buffers come from its layer plan (:class:`pyrnn_cl.plan.LayerPlan`, the one
    the engine allocates by). ``inputs``: source, weights, biases, upstream gradient.
    ``reserve``: what the training forward returns for backward (saved gates ``[T][N][D*G*H]``,
    h ``[T][N][D*H]`` and the LSTM cell sequence). ``fwd_workspace``: the packed R (small
    layers also pack W: not counted).
    ``bwd_workspace``: the backward's
    temporaries that do not grow with T: the transposed pack of R (and for GRU the forward pack
    again), the gate gradients of one chunk of steps (two arrays for GRU), the two-step rings of
    gate gradients and carries, and (MPSGraph LSTM/RNN gradients, which are not given h) one
    chunk of h[t-1] computed from the saved gates. ``bwd_sequence``: temporaries that do grow
    with T: in the cuDNN dialect the gradient passed down between layers (the reserve space's
    parts are written and read in place); none in the MPSGraph dialect. ``grad_outputs``: dx,
    dW, dR, db.
    """
    T, N, H, D, G = cfg.T, cfg.N, cfg.H, cfg.directions, cfg.G
    gru = cfg.cell == "gru"
    from ..cudnn import _cell
    from ..plan import LayerPlan

    # the engine's buffers from its layer plan (one model of them); the inputs, the gradient
    # outputs and the gradient the cuDNN dialect passes down are the dialects' own arrays
    plan = LayerPlan(_cell(cfg.cell), T, N, H, D, itemsize=itemsize, bwd_rows=bwd_rows)
    # the MPSGraph gradient ops are given y only where the cell needs it (GRU)
    y_given = dialect == "cudnn" or plan.cell.bwd_needs_y
    results = ("dR", "dwp", "dpeep", "dy")       # gradient outputs and given inputs
    out = dict.fromkeys(("inputs", "reserve", "fwd_workspace", "bwd_workspace", "bwd_sequence",
                         "grad_outputs"), 0)
    for l, width in enumerate(cfg.layer_inputs()):
        GH = D * G * H
        fwd = plan.forward_buffers(x_width=width)
        bwd = plan.backward_buffers(steps=plan.chunk_steps(), gathers=plan.gathers(
            y_given=y_given), dR_given=True, dwp_given=True)
        out["inputs"] += (T * N * width + GH * width + D * G * H * H + GH
                          + (D * H if gru else 0)) * itemsize
        out["reserve"] += sum(fwd.get(name, 0) for name in SAVED_PARTS)
        out["fwd_workspace"] += sum(v for name, v in fwd.items()          # the packs
                                    if name not in SAVED_PARTS and name != "wpk_x")
        out["bwd_workspace"] = max(out["bwd_workspace"],                  # one layer at a time
                                   sum(v for name, v in bwd.items() if name not in results))
        if dialect == "cudnn" and l:
            out["bwd_sequence"] = max(out["bwd_sequence"],
                                      T * N * width * itemsize)           # dx passed down
        out["grad_outputs"] += (GH * width + D * G * H * H + GH
                                + (T * N * width if not l else 0)) * itemsize
    out["inputs"] += T * N * D * H * itemsize                             # dy of the last layer
    return out
