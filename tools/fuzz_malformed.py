#!/usr/bin/env python3
"""Malformed-input fuzzer for every public pyrnn_cl op (pitfalls A26: crash-on-bad-input).

Each call is built from ``(seed, index)`` alone: a random *valid* call of one op on small shapes
is drawn, then exactly one *mutation* that makes it invalid is applied:

``dtype``      an array argument gets a non-float dtype (int, float16, complex, bool) or the other
               float dtype than the rest of the call -> ``TypeError``
``type``       an array argument becomes a list, tuple, number, string or dict -> ``TypeError``
``none``       a required array argument is ``None`` -> ``TypeError`` (``ValueError`` for
               ``input_c`` of an LSTM, which API.md documents)
``rank``       an array argument gets an extra axis, or loses one -> ``ShapeError``
``axis``       one constrained axis of an array argument grows or shrinks by one (batch sizes that
               disagree between inputs, widths that disagree with the weights, ``params`` of the
               wrong length, ...) -> ``ShapeError`` (``ValueError``)
``value``      a scalar argument or a descriptor field is out of range, of the wrong type or an
               unknown mode/activation string; ``sequence_lengths`` / ``seq_len_max`` out of
               ``[0, T]`` or not integers -> ``ValueError`` / ``TypeError``
``layout``     a device-array argument that is not contiguous, or lives in another OpenCL
               context -> ``ValueError``
``device``     ``device=`` of the wrong type or naming no device -> ``TypeError`` /
               ``DeviceNotFoundError``

A call *passes* when it raises an exception of the documented types (``ShapeError``,
``TypeError``, ``ValueError``, ``UnsupportedError``, ``DeviceNotFoundError``) of the kind its
mutation expects, names the offending argument in the message where the culprit is unambiguous,
and launched no kernel (validation happens on the host, before anything is enqueued). Anything
else is counted: ``crash`` (another exception type, a dead worker process, or a call still
running after ``--timeout`` seconds) or ``accepted`` (no exception at all: a silent result).

Usage (README, "Reliability notes")::

    python tools/fuzz_malformed.py --calls 10000 --seed 0

prints one summary line per outcome and the counts per exception type, and exits with status 1
unless every call passed. The calls run in a worker subprocess so that a hard crash (segfault)
of one call is counted, not fatal; ``--inline`` runs them in this process (the test-suite uses
:func:`make_call` and :func:`check_call` directly).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import pyrnn_cl as rc  # noqa: E402
from pyrnn_cl import layout as _layout  # noqa: E402
from pyrnn_cl.errors import DeviceNotFoundError, ShapeError, UnsupportedError  # noqa: E402

__all__ = ["ALLOWED", "OPS", "MUTATIONS", "Case", "NotApplicable", "make_call", "check_call",
           "run_inline", "main"]

#: The documented exception types (API.md §0).
ALLOWED = (ShapeError, TypeError, ValueError, UnsupportedError, DeviceNotFoundError)

#: Exception types each mutation kind may raise.
EXPECT = {
    "dtype": (TypeError,),
    "type": (TypeError,),
    "none": (TypeError, ValueError),
    "rank": (ValueError,),
    "axis": (ValueError,),
    "value": (TypeError, ValueError),
    "layout": (ValueError,),
    "device": (TypeError, DeviceNotFoundError),
}

_BAD_DTYPES = (np.int32, np.int64, np.float16, np.complex64, np.bool_, np.uint8)


@dataclass
class Arg:
    """One array argument of a call: its value and which of its axes another argument fixes."""

    value: object
    axes: tuple = ()          # axes whose size another argument determines
    required: bool = True
    mask: bool = False        # broadcastable argument: only grow axes / add leading axes
    integer: bool = False     # an integer array (sequence_lengths)
    can_drop_rank: bool = True
    ignored: bool = False     # accepted and not read (cuDNN input_c of a non-LSTM mode)


@dataclass
class Case:
    """A call: ``fn(*[args[n] for n in order], **kwargs)``, and what was done to it."""

    op: str
    fn: object
    order: list
    args: dict
    kwargs: dict = field(default_factory=dict)
    scalars: dict = field(default_factory=dict)   # kwarg or positional scalar -> bad values
    desc_fields: dict = field(default_factory=dict)
    mutation: str = ""
    target: str = ""
    detail: str = ""
    device_ok: bool = True

    def call(self):
        pos = [self.args[n].value if isinstance(self.args.get(n), Arg) else self.args.get(n)
               for n in self.order]
        return self.fn(*pos, **self.kwargs)

    def describe(self):
        return f"{self.op}: {self.mutation} of {self.target}: {self.detail}"


# ---- valid base calls -------------------------------------------------------------------------

def _sizes(rng):
    return (int(rng.integers(1, 5)), int(rng.integers(1, 5)), int(rng.integers(1, 5)),
            int(rng.integers(1, 5)))


def _arr(rng, shape, dtype):
    return (rng.standard_normal(shape) * 0.5).astype(dtype)


_DESC = {"rnn": rc.SingleGateRNNDescriptor, "lstm": rc.LSTMDescriptor, "gru": rc.GRUDescriptor}
_DESC_BOOLS = {
    "rnn": ("reverse", "bidirectional", "training"),
    "lstm": ("reverse", "bidirectional", "training", "produce_cell", "forget_gate_last"),
    "gru": ("reverse", "bidirectional", "training", "reset_gate_first", "reset_after", "flip_z"),
}
_DESC_ACTS = {
    "rnn": ("activation",),
    "lstm": ("input_gate_activation", "forget_gate_activation", "cell_gate_activation",
             "output_gate_activation", "activation"),
    "gru": ("update_gate_activation", "reset_gate_activation", "output_gate_activation"),
}
_MPS_FN = {("rnn", False): rc.single_gate_rnn, ("rnn", True): rc.single_gate_rnn_gradients,
           ("lstm", False): rc.lstm, ("lstm", True): rc.lstm_gradients,
           ("gru", False): rc.gru, ("gru", True): rc.gru_gradients}


def _mps(rng, dtype, kind, grads):
    T, N, I, H = _sizes(rng)
    D = int(rng.integers(1, 3))
    G = {"rnn": 1, "lstm": 4, "gru": 3}[kind]
    GH = G * H
    with_w = bool(rng.integers(0, 2))
    opt = lambda: bool(rng.integers(0, 2))  # noqa: E731
    a = {}
    # source: T and N are fixed by other arguments only when those are present (below)
    a["source"] = Arg(_arr(rng, (T, N, I if with_w else D * GH), dtype), axes=(2,))
    a["recurrent_weight"] = Arg(_arr(rng, (GH, H) if D == 1 else (2, GH, H), dtype),
                                axes=(0, 1) if D == 1 else (0, 1, 2))
    a["input_weight"] = Arg(_arr(rng, (D * GH, I), dtype), axes=(0, 1), required=False) \
        if with_w else None
    a["bias"] = Arg(_arr(rng, (D * GH,), dtype), axes=(0,), required=False) if opt() else None
    a["init_state"] = Arg(_arr(rng, (N, D * H), dtype), axes=(0, 1), required=False) \
        if opt() else None
    if kind == "lstm":
        a["init_cell"] = Arg(_arr(rng, (N, D * H), dtype), axes=(0, 1), required=False) \
            if opt() else None
    a["mask"] = Arg(_arr(rng, (T, N, D * H), dtype) + 2.0, axes=(0, 1, 2), required=False,
                    mask=True) if opt() else None
    if kind == "lstm":
        a["peephole"] = Arg(_arr(rng, (4 * H,) if D == 1 else (2, 4 * H), dtype),
                            axes=(0,) if D == 1 else (0, 1), required=False) if opt() else None
    if kind == "gru":
        a["secondary_bias"] = Arg(_arr(rng, (D * H,), dtype), axes=(0,), required=False) \
            if opt() else None
    if grads:
        # None means zero (as in the float64 reference), so it is not a required argument
        a["source_gradient"] = Arg(_arr(rng, (T, N, D * H), dtype), axes=(0, 1, 2),
                                   required=False)
        a["z_state"] = Arg(_arr(rng, (T, N, D * GH), dtype), axes=(0, 1, 2))
        if kind == "lstm":
            a["cell_output_fwd"] = Arg(_arr(rng, (T, N, D * H), dtype), axes=(0, 1, 2))
        if kind == "gru":
            a["output_fwd"] = Arg(_arr(rng, (T, N, D * H), dtype), axes=(0, 1, 2))
        a["state_gradient"] = Arg(_arr(rng, (N, D * H), dtype), axes=(0, 1), required=False) \
            if opt() else None
        if kind == "lstm":
            a["cell_gradient"] = Arg(_arr(rng, (N, D * H), dtype), axes=(0, 1), required=False) \
                if opt() else None
    # the source's T and N are fixed by any other [T, N, ...] / [N, ...] argument present (the
    # mask only where its axis is not 1: a size-1 axis broadcasts to any size)
    mask = a["mask"] is not None
    fixed_t = grads or (mask and T > 1)
    fixed_n = grads or (mask and N > 1) or any(a.get(n) is not None
                                               for n in ("init_state", "init_cell"))
    a["source"].axes = tuple(sorted(set((2,) + ((0,) if fixed_t else ()) +
                                        ((1,) if fixed_n else ()))))
    order = {
        ("rnn", False): ["source", "recurrent_weight", "input_weight", "bias", "init_state",
                         "mask"],
        ("rnn", True): ["source", "recurrent_weight", "source_gradient", "z_state",
                        "input_weight", "bias", "init_state", "mask", "state_gradient"],
        ("lstm", False): ["source", "recurrent_weight", "input_weight", "bias", "init_state",
                          "init_cell", "mask", "peephole"],
        ("lstm", True): ["source", "recurrent_weight", "source_gradient", "z_state",
                         "cell_output_fwd", "input_weight", "bias", "init_state", "init_cell",
                         "mask", "peephole", "state_gradient", "cell_gradient"],
        ("gru", False): ["source", "recurrent_weight", "input_weight", "bias", "init_state",
                         "mask", "secondary_bias"],
        ("gru", True): ["source", "recurrent_weight", "source_gradient", "z_state",
                        "output_fwd", "input_weight", "bias", "init_state", "mask",
                        "secondary_bias", "state_gradient"],
    }[(kind, grads)]
    desc = _DESC[kind](bidirectional=D == 2, reverse=bool(rng.integers(0, 2)))
    name = {"rnn": "single_gate_rnn", "lstm": "lstm", "gru": "gru"}[kind]
    name += "_gradients" if grads else ""
    case = Case(name, _MPS_FN[(kind, grads)], order, {k: v for k, v in a.items()},
                kwargs={"descriptor": desc})
    case.desc_fields = {"kind": kind}
    return case


def _tf_gru(rng, dtype, variant):
    _, N, I, H = _sizes(rng)
    a = {"x": Arg(_arr(rng, (N, I), dtype), axes=(0, 1)),
         "h_prev": Arg(_arr(rng, (N, H), dtype), axes=(0, 1))}
    if variant == "weight_grads":
        a["x"].axes = (0,)               # nothing else depends on I
        a["r"] = Arg(_arr(rng, (N, H), dtype), axes=(0, 1))
        a["d_c_bar"] = Arg(_arr(rng, (N, H), dtype), axes=(0, 1))
        a["d_r_bar_u_bar"] = Arg(_arr(rng, (N, 2 * H), dtype), axes=(0, 1))
        return Case("gru_block_cell_weight_grads", rc.gru_block_cell_weight_grads,
                    ["x", "h_prev", "r", "d_c_bar", "d_r_bar_u_bar"], a)
    a["w_ru"] = Arg(_arr(rng, (I + H, 2 * H), dtype), axes=(0, 1))
    a["w_c"] = Arg(_arr(rng, (I + H, H), dtype), axes=(0, 1))
    a["b_ru"] = Arg(_arr(rng, (2 * H,), dtype), axes=(0,))
    a["b_c"] = Arg(_arr(rng, (H,), dtype), axes=(0,))
    order = ["x", "h_prev", "w_ru", "w_c", "b_ru", "b_c"]
    if variant == "forward":
        return Case("gru_block_cell", rc.gru_block_cell, order, a)
    for n in ("r", "u", "c", "d_h"):
        a[n] = Arg(_arr(rng, (N, H), dtype), axes=(0, 1))
    return Case("gru_block_cell_grad", rc.gru_block_cell_grad, order + ["r", "u", "c", "d_h"], a)


_TF_SCALARS = {
    "forget_bias": [float("nan"), float("inf"), "1.0", None, [1.0]],
    "cell_clip": [float("nan"), float("-inf"), "3", None, (3.0,)],
    "use_peephole": [1, "yes", None, 0.0],
}


def _tf_lstm(rng, dtype, variant):
    T, N, I, H = _sizes(rng)
    seq = variant in ("block", "block_grad", "block_v2", "block_grad_v2")
    lead = (T, N) if seq else (N,)
    x_axes = (1, 2) if variant in ("block", "block_v2") else ((0, 1, 2) if seq else (0, 1))
    a = {"x": Arg(_arr(rng, lead + (I,), dtype), axes=x_axes),
         "cs_prev": Arg(_arr(rng, (N, H), dtype), axes=(0, 1)),
         "h_prev": Arg(_arr(rng, (N, H), dtype), axes=(0, 1))}
    if variant == "cell_weight_grads":
        a["w"] = Arg(_arr(rng, (I + H, 4 * H), dtype), axes=(0, 1))
        a["dicfo"] = Arg(_arr(rng, (N, 4 * H), dtype), axes=(0, 1))
        del a["cs_prev"]
        return Case("lstm_block_cell_weight_grads", rc.lstm_block_cell_weight_grads,
                    ["x", "h_prev", "w", "dicfo"], a)
    a["w"] = Arg(_arr(rng, (I + H, 4 * H), dtype), axes=(0, 1))
    for n in ("wci", "wcf", "wco"):
        a[n] = Arg(_arr(rng, (H,), dtype), axes=(0,))
    a["b"] = Arg(_arr(rng, (4 * H,), dtype), axes=(0,))
    order = ["x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b"]
    kwargs = {"use_peephole": bool(rng.integers(0, 2))}
    scalars = {"use_peephole": _TF_SCALARS["use_peephole"]}
    grad = variant in ("cell_grad", "block_grad", "block_grad_v2")
    if not grad:
        if variant != "block_v2":
            kwargs["forget_bias"] = float(rng.uniform(-1, 1))
            scalars["forget_bias"] = _TF_SCALARS["forget_bias"]
        kwargs["cell_clip"] = float(rng.uniform(-1, 3))
        scalars["cell_clip"] = _TF_SCALARS["cell_clip"]
    else:
        outs = ["i", "cs", "f", "o", "ci", "co"] + (["h"] if seq else [])
        for n in outs + ["cs_grad", "h_grad"]:
            a[n] = Arg(_arr(rng, lead + (H,), dtype), axes=tuple(range(len(lead) + 1)))
        order += outs + ["cs_grad", "h_grad"]
    if seq:
        a["seq_len_max"] = int(rng.integers(0, T + 1))
        order = ["seq_len_max"] + order
        scalars["seq_len_max"] = [-1, T + 1, 1.5, str(T), None, np.array([T]),
                                  np.float64(T), np.array(1.0)]
    fn, name = {
        "cell": (rc.lstm_block_cell, "lstm_block_cell"),
        "cell_grad": (rc.lstm_block_cell_grad, "lstm_block_cell_grad"),
        "block": (rc.block_lstm, "block_lstm"),
        "block_v2": (rc.block_lstm_v2, "block_lstm_v2"),
        "block_grad": (rc.block_lstm_grad, "block_lstm_grad"),
        "block_grad_v2": (rc.block_lstm_grad_v2, "block_lstm_grad_v2"),
    }[variant]
    return Case(name, fn, order, a, kwargs=kwargs, scalars=scalars)


_MODES = ("rnn_relu", "rnn_tanh", "lstm", "gru")
_G = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}


def _cudnn_config(rng):
    mode = _MODES[int(rng.integers(0, 4))]
    L, D = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    T, N, I, H = _sizes(rng)
    H += 1                                                # room for a projection
    P = int(rng.integers(0, H)) if mode == "lstm" and rng.integers(0, 2) else 0
    imode = ("linear_input", "skip_input", "auto_select")[int(rng.integers(0, 3))]
    if imode == "skip_input":
        I = H
    return dict(mode=mode, L=L, D=D, T=T, N=N, I=I, H=H, P=P, imode=imode)


def _cudnn_kw(c):
    return dict(rnn_mode=c["mode"], input_mode=c["imode"],
                direction="bidirectional" if c["D"] == 2 else "unidirectional",
                num_proj=c["P"])


def _cudnn_scalars(c, sizes=False):
    s = {
        "rnn_mode": ["LSTM", "lstm2", "", None, 4, b"lstm"],
        "input_mode": ["linear", "skip", None, 0],
        "direction": ["bi", "forward", None, 2],
        "num_proj": [-1, 1.5, "1", c["H"], c["H"] + 3] + ([] if c["mode"] == "lstm" else [1]),
    }
    if not sizes:
        s.update({
            "dropout": [-0.1, 1.5, float("nan"), "0.5", None, float("inf")],
            "seed": [1.5, "1", None, [1]],
            "seed2": [2.5, "2", None],
            "time_major": ["yes", None, 1, 0.0],
        })
    return s


def _cudnn_size_case(rng, dtype, which):
    c = _cudnn_config(rng)
    kw = _cudnn_kw(c)
    order = ["num_layers", "num_units", "input_size"]
    a = {"num_layers": c["L"], "num_units": c["H"], "input_size": c["I"]}
    scalars = _cudnn_scalars(c, sizes=True)
    scalars.update({"num_layers": [0, -1, 1.5, "2", None, True],
                    "num_units": [0, -3, 2.0, "4", None],
                    "input_size": [-1, 1.5, "3", None]})
    if c["imode"] == "skip_input":
        scalars["input_size"].append(c["H"] + 1)
    if which == "params_size":
        return Case("cudnn_rnn_params_size", rc.cudnn_rnn_params_size, order, a, kwargs=kw,
                    scalars=scalars, device_ok=False)
    if which == "reserve_size":
        a.update(seq_length=c["T"], batch_size=c["N"])
        scalars.update(seq_length=[-1, 1.5, "3", None], batch_size=[-2, 0.5, None],
                       dropout=[-0.1, 1.5, float("nan"), None], seed=[1.5, None])
        kw.update(dropout=0.0, seed=0)
        return Case("cudnn_rnn_reserve_space_size", rc.cudnn_rnn_reserve_space_size,
                    order + ["seq_length", "batch_size"], a, kwargs=kw, scalars=scalars,
                    device_ok=False)
    size = rc.cudnn_rnn_params_size(c["L"], c["H"], c["I"], **kw)
    if which == "to_canonical":
        a["params"] = Arg(_arr(rng, (size,), dtype), axes=(0,))
        return Case("cudnn_rnn_params_to_canonical", rc.cudnn_rnn_params_to_canonical,
                    order + ["params"], a, kwargs=kw, scalars=scalars, device_ok=False)
    w, b = rc.cudnn_rnn_params_to_canonical(c["L"], c["H"], c["I"], _arr(rng, (size,), dtype),
                                            **kw)
    a["weights"], a["biases"] = w, b
    case = Case("cudnn_rnn_canonical_to_params", rc.cudnn_rnn_canonical_to_params,
                order + ["weights", "biases"], a, kwargs=kw, scalars=scalars, device_ok=False)
    return case


def _cudnn_op(rng, dtype, backprop):
    c = _cudnn_config(rng)
    kw = _cudnn_kw(c)
    L, D, T, N, I, H, P = (c[k] for k in ("L", "D", "T", "N", "I", "H", "P"))
    R = P or H
    tm = bool(rng.integers(0, 2))
    lstm = c["mode"] == "lstm"
    size = rc.cudnn_rnn_params_size(L, H, I, **kw)
    seq = (lambda w: (T, N, w)) if tm else (lambda w: (N, T, w))
    n_axis = 1 if tm else 0
    a = {"input": Arg(_arr(rng, seq(I), dtype),
                      axes=(2, n_axis) if not backprop else (0, 1, 2)),
         "input_h": Arg(_arr(rng, (L * D, N, R), dtype), axes=(0, 1, 2)),
         "input_c": Arg(_arr(rng, (L * D, N, H), dtype), axes=(0, 1, 2), required=lstm)
         if lstm or rng.integers(0, 2) else None,
         "params": Arg(_arr(rng, (size,), dtype), axes=(0,))}
    if not lstm and a["input_c"] is not None:
        # ignored by non-LSTM modes (any array, even of another dtype, or None): only a
        # non-array is an error, so only the `type` mutation applies to it
        a["input_c"].axes = ()
        a["input_c"].ignored = True
    lens = None
    if rng.integers(0, 2):
        lens = Arg(rng.integers(0, T + 1, N).astype(np.int64 if rng.integers(0, 2) else np.int32),
                   axes=(0,), required=False, integer=True)
    a["sequence_lengths"] = lens
    order = ["input", "input_h", "input_c", "params", "sequence_lengths"]
    kwargs = dict(kw, time_major=tm, dropout=float(rng.choice([0.0, 0.3])),
                  seed=int(rng.integers(0, 100)), seed2=int(rng.integers(0, 100)))
    scalars = _cudnn_scalars(c)
    if not backprop:
        kwargs["is_training"] = bool(rng.integers(0, 2))
        scalars["is_training"] = ["no", None, 1]
        return Case("cudnn_rnn", rc.cudnn_rnn, order, a, kwargs=kwargs, scalars=scalars)
    if a["sequence_lengths"] is None:
        a["sequence_lengths"] = Arg(np.full(N, T, np.int32), axes=(0,), required=False,
                                    integer=True)
    lay = _layout.make_layout(L, H, I, **kw)
    drop = kwargs["dropout"] > 0 and L > 1
    host = _layout.host_signature(lay, np.dtype(dtype).itemsize, drop, kwargs["dropout"],
                                    kwargs["seed"], kwargs["seed2"])
    a["output"] = Arg(_arr(rng, seq(D * R), dtype), axes=(0, 1, 2), required=False) \
        if rng.integers(0, 2) else None
    a["output_h"] = Arg(_arr(rng, (L * D, N, R), dtype), axes=(0, 1, 2), required=False) \
        if rng.integers(0, 2) else None
    a["output_c"] = Arg(_arr(rng, (L * D, N, H), dtype), axes=(0, 1, 2), required=False) \
        if lstm and rng.integers(0, 2) else None
    a["output_backprop"] = Arg(_arr(rng, seq(D * R), dtype), axes=(0, 1, 2), required=False)
    a["output_h_backprop"] = Arg(_arr(rng, (L * D, N, R), dtype), axes=(0, 1, 2),
                                 required=False) if rng.integers(0, 2) else None
    a["output_c_backprop"] = Arg(_arr(rng, (L * D, N, H), dtype), axes=(0, 1, 2),
                                 required=False) if lstm and rng.integers(0, 2) else None
    a["reserve_space"] = Arg(_arr(rng, (lay.reserve_size(T, N, drop),), dtype), axes=(0,))
    a["host_reserved"] = Arg(host, axes=(0,), integer=True)
    order += ["output", "output_h", "output_c", "output_backprop", "output_h_backprop",
              "output_c_backprop", "reserve_space", "host_reserved"]
    return Case("cudnn_rnn_backprop", rc.cudnn_rnn_backprop, order, a, kwargs=kwargs,
                scalars=scalars)


#: Every public op (name -> builder(rng, dtype)).
OPS = {
    "single_gate_rnn": lambda r, d: _mps(r, d, "rnn", False),
    "single_gate_rnn_gradients": lambda r, d: _mps(r, d, "rnn", True),
    "lstm": lambda r, d: _mps(r, d, "lstm", False),
    "lstm_gradients": lambda r, d: _mps(r, d, "lstm", True),
    "gru": lambda r, d: _mps(r, d, "gru", False),
    "gru_gradients": lambda r, d: _mps(r, d, "gru", True),
    "gru_block_cell": lambda r, d: _tf_gru(r, d, "forward"),
    "gru_block_cell_grad": lambda r, d: _tf_gru(r, d, "grad"),
    "gru_block_cell_weight_grads": lambda r, d: _tf_gru(r, d, "weight_grads"),
    "lstm_block_cell": lambda r, d: _tf_lstm(r, d, "cell"),
    "lstm_block_cell_grad": lambda r, d: _tf_lstm(r, d, "cell_grad"),
    "lstm_block_cell_weight_grads": lambda r, d: _tf_lstm(r, d, "cell_weight_grads"),
    "block_lstm": lambda r, d: _tf_lstm(r, d, "block"),
    "block_lstm_v2": lambda r, d: _tf_lstm(r, d, "block_v2"),
    "block_lstm_grad": lambda r, d: _tf_lstm(r, d, "block_grad"),
    "block_lstm_grad_v2": lambda r, d: _tf_lstm(r, d, "block_grad_v2"),
    "cudnn_rnn_params_size": lambda r, d: _cudnn_size_case(r, d, "params_size"),
    "cudnn_rnn_reserve_space_size": lambda r, d: _cudnn_size_case(r, d, "reserve_size"),
    "cudnn_rnn_params_to_canonical": lambda r, d: _cudnn_size_case(r, d, "to_canonical"),
    "cudnn_rnn_canonical_to_params": lambda r, d: _cudnn_size_case(r, d, "to_params"),
    "cudnn_rnn": lambda r, d: _cudnn_op(r, d, False),
    "cudnn_rnn_backprop": lambda r, d: _cudnn_op(r, d, True),
}


# ---- mutations --------------------------------------------------------------------------------

def _arrays(case, float_only=False, ignored=False):
    return [n for n, a in case.args.items() if isinstance(a, Arg)
            and not (float_only and a.integer) and (ignored or not a.ignored)]


def _other_context():
    """A second OpenCL context on the default device (memoized)."""
    global _CTX2
    try:
        return _CTX2
    except NameError:
        import pyopencl as cl
        dev = rc.devices.get_device()
        ctx = cl.Context([dev.cl_device])
        _CTX2 = cl.CommandQueue(ctx)
        return _CTX2


def _to_device(value, queue):
    import pyopencl.array as cla
    return cla.to_device(queue, np.ascontiguousarray(value))


def _noncontiguous(value, queue):
    """A device array equal to ``value`` but not C-contiguous (every other row of a bigger
    array), or None when no such view exists for this shape."""
    import pyopencl.array as cla
    if value.ndim == 0 or value.size < 2:
        return None
    big = np.repeat(value, 2, axis=0)
    view = cla.to_device(queue, big)[::2]
    if view.flags.c_contiguous or view.shape != value.shape:
        return None
    return view


def _mutate_dtype(case, rng):
    names = _arrays(case)
    if case.op == "cudnn_rnn_canonical_to_params":
        k = "weights" if rng.integers(0, 2) else "biases"
        lst = list(case.args[k])
        i = int(rng.integers(0, len(lst)))
        dt = _BAD_DTYPES[int(rng.integers(0, len(_BAD_DTYPES)))]
        lst[i] = lst[i].astype(dt)
        case.args[k] = lst
        return f"{k}[{i}]", f"dtype {np.dtype(dt)}"
    if not names:
        return None
    n = names[int(rng.integers(0, len(names)))]
    arg = case.args[n]
    floats = [m for m in _arrays(case, float_only=True)]
    if arg.integer:
        dt = (np.float32, np.float64, np.complex64)[int(rng.integers(0, 3))]
        if n == "host_reserved":
            dt = (np.float32, np.float64)[int(rng.integers(0, 2))]
    elif len(floats) >= 2 and rng.integers(0, 3) == 0:
        dt = np.float64 if arg.value.dtype == np.float32 else np.float32
    else:
        dt = _BAD_DTYPES[int(rng.integers(0, len(_BAD_DTYPES)))]
    arg.value = arg.value.astype(dt)
    return n, f"dtype {np.dtype(dt)}"


def _mutate_type(case, rng):
    names = [n for n in _arrays(case, ignored=True) if n != "sequence_lengths"]
    if case.op == "cudnn_rnn_canonical_to_params":
        k = "weights" if rng.integers(0, 2) else "biases"
        choice = int(rng.integers(0, 3))
        if choice == 0:
            case.args[k] = np.zeros(3, np.float32)
        elif choice == 1:
            lst = list(case.args[k])
            lst[int(rng.integers(0, len(lst)))] = None
            case.args[k] = lst
        else:
            case.args[k] = 7
        return k, "not a list of arrays"
    if not names:
        return None
    n = names[int(rng.integers(0, len(names)))]
    v = case.args[n].value
    choices = [v.tolist(), tuple(np.ravel(v).tolist()), 3, 2.5, "array", {"a": 1}, object()]
    case.args[n].value = choices[int(rng.integers(0, len(choices)))]
    return n, f"a {type(case.args[n].value).__name__}"


def _mutate_none(case, rng):
    names = [n for n in _arrays(case) if case.args[n].required]
    if case.op == "cudnn_rnn_canonical_to_params":
        k = "weights" if rng.integers(0, 2) else "biases"
        case.args[k] = None
        return k, "None"
    if not names:
        return None
    n = names[int(rng.integers(0, len(names)))]
    case.args[n] = None
    return n, "None"


def _mutate_rank(case, rng):
    names = [n for n in _arrays(case) if case.args[n].axes or case.args[n].mask]
    if not names:
        return None
    n = names[int(rng.integers(0, len(names)))]
    arg = case.args[n]
    v = arg.value
    how = int(rng.integers(0, 3))
    if arg.mask or not arg.can_drop_rank or v.ndim == 0:
        how = int(rng.integers(0, 2))
    if how == 0:
        arg.value = np.stack([v, v])
        return n, f"extra leading axis: shape {list(arg.value.shape)}"
    if how == 1:
        arg.value = v[..., None]
        return n, f"extra trailing axis: shape {list(arg.value.shape)}"
    arg.value = v[..., 0].copy() if v.shape[-1] else v.reshape(v.shape[:-1])
    return n, f"one axis less: shape {list(arg.value.shape)}"


def _mutate_axis(case, rng):
    names = [n for n in _arrays(case) if case.args[n].axes]
    if case.op == "cudnn_rnn_canonical_to_params":
        k = "weights" if rng.integers(0, 2) else "biases"
        lst = list(case.args[k])
        if rng.integers(0, 2):
            i = int(rng.integers(0, len(lst)))
            a = lst[i]
            ax = int(rng.integers(0, a.ndim))
            shape = list(a.shape)
            shape[ax] += 1
            lst[i] = np.zeros(shape, a.dtype)
            case.args[k] = lst
            return f"{k}[{i}]", f"shape {shape}"
        if rng.integers(0, 2):
            del lst[int(rng.integers(0, len(lst)))]
        else:
            lst.append(lst[0].copy())
        case.args[k] = lst
        return k, f"{len(lst)} arrays"
    if not names:
        return None
    n = names[int(rng.integers(0, len(names)))]
    arg = case.args[n]
    ax = int(arg.axes[int(rng.integers(0, len(arg.axes)))])
    shape = list(arg.value.shape)
    grow = arg.mask or shape[ax] == 0 or rng.integers(0, 2)
    if n == "host_reserved" and not grow:
        shape[ax] -= 1
        arg.value = arg.value[:shape[ax]].copy()
        return n, f"shape {shape}"
    shape[ax] += 1 if grow else -1
    if arg.integer:
        arg.value = np.resize(arg.value, shape).astype(arg.value.dtype)
        if n == "sequence_lengths":
            arg.value = np.minimum(arg.value, 0)
    else:
        arg.value = _arr(rng, shape, arg.value.dtype) + (2.0 if arg.mask else 0.0)
    return n, f"axis {ax} -> shape {shape}"


def _mutate_value(case, rng):
    options = list(case.scalars)
    if "sequence_lengths" in case.args and case.args["sequence_lengths"] is not None:
        options.append("sequence_lengths")
    if "host_reserved" in case.args:
        options.append("host_reserved")
    if "descriptor" in case.kwargs:
        options += ["descriptor"] * 3
    if not options:
        return None
    n = options[int(rng.integers(0, len(options)))]
    if n == "sequence_lengths":
        arg = case.args[n]
        v = arg.value.copy()
        i = int(rng.integers(0, v.size))
        T = _time_steps(case)
        v[i] = (-1, T + 1, -(2 ** 31 - 1), 2 ** 31 - 1)[int(rng.integers(0, 4))]
        arg.value = v
        return n, f"value {v[i]} at index {i} (T = {T})"
    if n == "host_reserved":
        arg = case.args[n]
        v = arg.value.copy()
        i = int(rng.integers(0, 8))
        v[i] = np.int8((int(v[i]) + int(rng.integers(1, 100))) % 128)
        arg.value = v
        return n, f"byte {i} changed"
    if n == "descriptor":
        return _mutate_descriptor(case, rng)
    bad = case.scalars[n]
    value = bad[int(rng.integers(0, len(bad)))]
    if n in case.args:
        case.args[n] = value
    else:
        case.kwargs[n] = value
    return n, f"{value!r}"


def _time_steps(case):
    x = case.args["input"].value
    return x.shape[0] if case.kwargs.get("time_major", True) else x.shape[1]


def _mutate_descriptor(case, rng):
    kind = case.desc_fields["kind"]
    desc = case.kwargs["descriptor"]
    choice = int(rng.integers(0, 4))
    if choice == 0:
        other = [k for k in _DESC if k != kind][int(rng.integers(0, 2))]
        case.kwargs["descriptor"] = _DESC[other]()
        return "descriptor", f"a {_DESC[other].__name__}"
    if choice == 1:
        case.kwargs["descriptor"] = ({"training": True}, "lstm", 1)[int(rng.integers(0, 3))]
        return "descriptor", f"{case.kwargs['descriptor']!r}"
    if choice == 2:
        names = _DESC_BOOLS[kind]
        f = names[int(rng.integers(0, len(names)))]
        value = ("yes", 1, None, "False")[int(rng.integers(0, 4))]
        setattr(desc, f, value)
        return f"descriptor.{f}", f"{value!r}"
    names = _DESC_ACTS[kind]
    f = names[int(rng.integers(0, len(names)))]
    value = ("softplus", "", None, 3, "Tanh ")[int(rng.integers(0, 5))]
    setattr(desc, f, value)
    return f"descriptor.{f}", f"{value!r}"


def _mutate_layout(case, rng):
    names = [n for n in _arrays(case, float_only=True)]
    if not names:
        return None
    dev = rc.devices.get_device()
    q = dev.queue
    # every float array goes to the device (device arrays in, device arrays out)
    for n in names:
        case.args[n].value = _to_device(case.args[n].value, q)
    n = names[int(rng.integers(0, len(names)))]
    host = case.args[n].value.get()
    if rng.integers(0, 2):
        view = _noncontiguous(host, q)
        if view is not None:
            case.args[n].value = view
            return n, f"non-contiguous device array, strides {view.strides}"
    if len(names) < 2:
        return None
    case.args[n].value = _to_device(host, _other_context())
    return n, "device array of another OpenCL context"


def _mutate_device(case, rng):
    if not case.device_ok:
        return None
    value = (12345, object(), "no-such-opencl-device-xyz", 2.5, b"pocl")[int(rng.integers(0, 5))]
    case.kwargs["device"] = value
    return "device", f"{value!r}"


MUTATIONS = {"dtype": _mutate_dtype, "type": _mutate_type, "none": _mutate_none,
             "rank": _mutate_rank, "axis": _mutate_axis, "value": _mutate_value,
             "layout": _mutate_layout, "device": _mutate_device}
_WEIGHTS = {"dtype": 3, "type": 2, "none": 2, "rank": 3, "axis": 6, "value": 5, "layout": 1,
            "device": 1}


def _fp64():
    try:
        return bool(rc.devices.get_device().info.has_fp64)
    except Exception:  # noqa: BLE001 - no device: the calls raise DeviceNotFoundError anyway
        return False


class NotApplicable(LookupError):
    """No valid call of the op admits the mutation (e.g. a dtype change of an op without
    arrays)."""


class InvalidBaseCall(RuntimeError):
    """A valid base call, before any mutation, failed: a bug of the fuzzer's builders (a
    mutation of it could be refused for the wrong reason)."""


def make_call(seed: int, index: int, op: str | None = None, mutation: str | None = None,
              dtype=None, attempts: int = 100, check_base: bool = False) -> Case:
    """The malformed call number ``index`` of the run ``seed`` (deterministic): float32, or
    float64 for one call in three when the default device has fp64 and ``dtype`` is None.
    ``check_base``: first run the unmutated call, and raise :class:`InvalidBaseCall` if it
    fails."""
    rng = np.random.default_rng([int(seed), int(index)])
    if dtype is None:
        dtype = np.float64 if rng.integers(0, 3) == 0 and _fp64() else np.float32
    ops = sorted(OPS)
    kinds = sorted(MUTATIONS)
    weights = np.array([_WEIGHTS[k] for k in kinds], float)
    for _ in range(attempts):
        name = op or ops[int(rng.integers(0, len(ops)))]
        kind = mutation or kinds[int(rng.choice(len(kinds), p=weights / weights.sum()))]
        case = OPS[name](rng, dtype)
        if check_base:
            try:
                case.call()
            except Exception as exc:  # noqa: BLE001 - any failure of a valid call is the bug
                raise InvalidBaseCall(f"the valid base call of {name} failed: "
                                      f"{type(exc).__name__}: {exc}") from exc
        done = MUTATIONS[kind](case, rng)
        if done is not None:
            case.mutation, (case.target, case.detail) = kind, done
            return case
    raise NotApplicable(f"no applicable mutation for op={op!r} mutation={mutation!r}")


@dataclass
class Outcome:
    status: str          # "ok", "crash", "accepted", "wrong-type", "unnamed", "launched"
    exc_type: str
    message: str


def _named(case, message):
    """Whether the message names the mutated argument (or its base name)."""
    target = case.target
    base = target.split("[")[0].split(".")[0]
    return target in message or base in message or (
        case.mutation == "dtype")  # a mixed-dtype message names both arguments of the pair


def check_call(case: Case) -> Outcome:
    """Run the call and classify what happened (module docstring)."""
    from pyrnn_cl.programs import launch_count

    before = launch_count()
    try:
        case.call()
    except ALLOWED as exc:
        name = type(exc).__name__
        msg = str(exc)
        if launch_count() != before:
            return Outcome("launched", name, msg)
        if not isinstance(exc, EXPECT[case.mutation]):
            return Outcome("wrong-type", name, msg)
        if case.mutation in ("dtype", "type", "none", "value") and not _named(case, msg):
            return Outcome("unnamed", name, msg)
        return Outcome("ok", name, msg)
    except Exception as exc:  # noqa: BLE001 - this is what the fuzzer looks for
        return Outcome("crash", type(exc).__name__, str(exc)[:500])
    return Outcome("accepted", "", "")


# ---- driver -----------------------------------------------------------------------------------

def run_inline(seed, start, stop, out=sys.stdout, inject=None):
    """Run calls ``start .. stop-1``; one JSON line per call on ``out``. ``inject`` = (index,
    "segv" | "hang"): that call kills or blocks the process instead (to test the supervisor)."""
    for index in range(start, stop):
        if inject and index == inject[0]:
            if inject[1] == "hang":
                time.sleep(3600)
            import ctypes
            ctypes.string_at(0)       # a real segmentation fault
        case = make_call(seed, index, check_base=True)
        res = check_call(case)
        out.write(json.dumps({"i": index, "op": case.op, "mutation": case.mutation,
                              "target": case.target, "status": res.status,
                              "exc": res.exc_type, "detail": case.detail,
                              "message": res.message[:300] if res.status != "ok" else ""})
                  + "\n")
        out.flush()


def _worker_cmd(seed, start, stop, inject=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(seed),
           "--start", str(start), "--stop", str(stop)]
    if inject:
        cmd += ["--inject", f"{inject[0]}:{inject[1]}"]
    return cmd


def run_supervised(seed, calls, timeout, inject=None):
    """Run the calls in worker subprocesses; a dead or stuck worker counts its current call as a
    crash (``exit N`` / ``hang``) and a new worker continues after it."""
    records, start = [], 0
    while start < calls:
        proc = subprocess.Popen(_worker_cmd(seed, start, calls, inject), stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        fd, pending, current, failure = proc.stdout.fileno(), b"", start, None
        while True:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                proc.kill()
                failure = ("hang", f"no answer within {timeout} s")
                break
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                rec = json.loads(line)
                records.append(rec)
                current = rec["i"] + 1
        proc.wait()
        if failure is None and current < calls:
            failure = (f"exit {proc.returncode}", "the worker process died")
        if failure is not None:
            case = make_call(seed, current)
            records.append({"i": current, "op": case.op, "mutation": case.mutation,
                            "target": case.target, "status": "crash", "exc": failure[0],
                            "detail": case.detail, "message": failure[1]})
            current += 1
        start = current
    return records


def summarize(records, seed, elapsed):
    statuses = Counter(r["status"] for r in records)
    excs = Counter(r["exc"] for r in records if r["status"] == "ok")
    crashes = statuses.get("crash", 0)
    lines = []
    per = ", ".join(f"{k} {v}" for k, v in sorted(excs.items()))
    lines.append(f"fuzz_malformed: seed {seed}: {len(records)} malformed calls in "
                 f"{elapsed:.0f} s: {statuses.get('ok', 0)} raised the documented exception "
                 f"({per}); {crashes} crashes, {statuses.get('accepted', 0)} accepted, "
                 f"{statuses.get('wrong-type', 0)} wrong type, {statuses.get('unnamed', 0)} "
                 f"unnamed, {statuses.get('launched', 0)} launched a kernel")
    per_mut = Counter((r["mutation"], r["status"]) for r in records)
    lines.append("by mutation: " + ", ".join(
        f"{m} {per_mut[(m, 'ok')]}/{sum(v for (mm, _), v in per_mut.items() if mm == m)}"
        for m in sorted({r['mutation'] for r in records})))
    bad = [r for r in records if r["status"] != "ok"]
    for r in bad[:40]:
        lines.append(f"  FAIL #{r['i']} {r['op']}: {r['mutation']} of {r['target']} "
                     f"({r['detail']}): {r['status']} {r['exc']}: {r['message'][:200]}")
    return lines, not bad


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=10000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds without an answer before a call counts as a hang")
    p.add_argument("--inline", action="store_true", help="no worker process")
    p.add_argument("--json", help="write every call's record to this file")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--stop", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--inject", default=None, help=argparse.SUPPRESS)   # "INDEX:segv|hang"
    args = p.parse_args(argv)
    inject = None
    if args.inject:
        index, what = args.inject.split(":")
        inject = (int(index), what)
    if args.worker:
        run_inline(args.seed, args.start, args.stop, inject=inject)
        return 0
    t0 = time.time()
    if args.inline:
        import io
        buf = io.StringIO()
        run_inline(args.seed, 0, args.calls, buf)
        records = [json.loads(x) for x in buf.getvalue().splitlines()]
    else:
        records = run_supervised(args.seed, args.calls, args.timeout, inject)
    lines, ok = summarize(records, args.seed, time.time() - t0)
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(records, fh)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
