"""The memory model: device bytes our engine allocates per call of a configuration, from its
buffer shapes (:func:`memory_estimate`)."""

from __future__ import annotations

from .configs import BenchConfig


def memory_estimate(cfg: BenchConfig, itemsize: int = 4, bwd_rows: int = 2048,
                    dialect: str = "mps") -> dict:
    """Device bytes our engine allocates for one forward and one forward+backward of ``cfg``
    (per layer, summed), from the engine's buffer shapes; ``bwd_rows`` is the device's
    ``REC_BWD_ROWS`` (rows of gate gradients per backward chunk), ``dialect`` ``"mps"`` or
    ``"cudnn"``.

    ``inputs``: source, weights, biases, upstream gradient. ``reserve``: what the training
    forward returns for backward (saved gates ``[T][N][D*G*H]``, h ``[T][N][D*H]`` and the LSTM
    cell sequence). ``fwd_workspace``: the packed R (small layers also pack W: not counted).
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
    lstm, gru = cfg.cell == "lstm", cfg.cell == "gru"
    from ..engine import backward_chunk_steps

    steps = backward_chunk_steps(T, N, bwd_rows)
    out = dict.fromkeys(("inputs", "reserve", "fwd_workspace", "bwd_workspace", "bwd_sequence",
                         "grad_outputs"), 0)
    for l, width in enumerate(cfg.layer_inputs()):
        GH = D * G * H
        seq_h = T * N * D * H
        out["inputs"] += T * N * width + GH * width + D * G * H * H + GH + (D * H if gru else 0)
        out["reserve"] += T * N * GH + seq_h + (seq_h if lstm else 0)
        packed = D * G * H * H
        out["fwd_workspace"] += packed                             # R packed
        bwd = packed * (2 if gru else 1)                           # transposed pack (+ R)
        bwd += steps * N * GH * (2 if gru else 1)                  # one chunk of dgx (+ dgh)
        bwd += 2 * N * GH if steps < T else 0                      # gate-gradient ring
        bwd += 2 * N * D * H * (2 if lstm else 1)                  # carry ring (+ carry_c)
        if dialect != "cudnn" and not gru:
            bwd += steps * N * D * H                               # h[t-1] of one chunk
        out["bwd_workspace"] = max(out["bwd_workspace"], bwd)     # one layer at a time
        if dialect == "cudnn" and l:
            out["bwd_sequence"] = max(out["bwd_sequence"], T * N * width)  # dx passed down
        out["grad_outputs"] += GH * width + D * G * H * H + GH + (T * N * width if not l else 0)
    out["inputs"] += T * N * D * H                                 # dy of the last layer
    return {k: v * itemsize for k, v in out.items()}
