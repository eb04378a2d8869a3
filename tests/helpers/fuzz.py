"""Malformed-input fuzzer for every public pyrnn_cl op (pitfalls A26: crash-on-bad-input).

The ops are the public functions of ``pyrnn_cl.__all__``; each op's arguments (order,
positional or keyword, optional, ``device=``) come from its signature, and only what a signature
cannot say is tabled here: array shapes by argument name, valid and invalid scalar values.

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
    cd tests && python -m helpers.fuzz --calls 10000 --seed 0      # the same

prints one summary line per outcome and the counts per exception type, and exits with status 1
unless every call passed. The calls run in a worker subprocess so that a hard crash (segfault)
of one call is counted, not fatal; ``--inline`` runs them in this process (the test-suite uses
:func:`make_call` and :func:`check_call` directly).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import json
import os
import re
import select
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

import pyrnn_cl as rc
from pyrnn_cl import layout as _layout
from pyrnn_cl.cells import gates
from pyrnn_cl.errors import DeviceNotFoundError, ShapeError, UnsupportedError

#: The checkout (the worker subprocess finds pyrnn_cl there when it is not installed).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

__all__ = ["ALLOWED", "OPS", "MUTATIONS", "Case", "NotApplicable", "public_ops", "build",
           "make_call", "check_call", "run_inline", "main"]

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
#
# Which ops there are, each op's arguments in order, which are positional, which are keyword
# scalars and whether it takes ``device=`` all come from ``inspect.signature`` of the public
# functions (:func:`public_ops`). The tables below hold only what a signature cannot say: the
# shape of each array argument (by name, in the size symbols of its dialect), the valid and the
# invalid values of each scalar argument, and the few arguments whose value another argument
# determines (:func:`_special`).

def public_ops() -> dict:
    """Every public op: the functions named in ``pyrnn_cl.__all__`` (classes, exceptions and
    modules excepted), name -> function."""
    return {n: getattr(rc, n) for n in rc.__all__
            if n[0].islower() and inspect.isfunction(getattr(rc, n))}


def _sizes(rng):
    return (int(rng.integers(1, 5)), int(rng.integers(1, 5)), int(rng.integers(1, 5)),
            int(rng.integers(1, 5)))


def _arr(rng, shape, dtype):
    return (rng.standard_normal(shape) * 0.5).astype(dtype)


def _dialect(params) -> str:
    if "descriptor" in params:
        return "mps"
    if "rnn_mode" in params:
        return "cudnn"
    return "tf"


_DESC = {"rnn": rc.SingleGateRNNDescriptor, "lstm": rc.LSTMDescriptor, "gru": rc.GRUDescriptor}
_DESC_BOOLS = {k: tuple(f.name for f in dataclasses.fields(d) if f.type in ("bool", bool))
               for k, d in _DESC.items()}
_DESC_ACTS = {k: tuple(f.name for f in dataclasses.fields(d) if f.name.endswith("activation"))
              for k, d in _DESC.items()}

#: Shapes of the array arguments, by dialect and name, in the dialect's size symbols (T, N, I,
#: H; D directions, G gates, L layers, R = projection or H, S = params size, W = width of the
#: MPSGraph source). An argument of one spec per rank (recurrent_weight) has one per D.
SHAPES = {
    "mps": {
        "source": ("T", "N", "W"), "recurrent_weight": {1: ("G*H", "H"), 2: ("D", "G*H", "H")},
        "input_weight": ("D*G*H", "I"), "bias": ("D*G*H",), "init_state": ("N", "D*H"),
        "init_cell": ("N", "D*H"), "mask": ("T", "N", "D*H"),
        "peephole": {1: ("4*H",), 2: ("D", "4*H")}, "secondary_bias": ("D*H",),
        "source_gradient": ("T", "N", "D*H"), "z_state": ("T", "N", "D*G*H"),
        "cell_output_fwd": ("T", "N", "D*H"), "output_fwd": ("T", "N", "D*H"),
        "state_gradient": ("N", "D*H"), "cell_gradient": ("N", "D*H"),
    },
    "tf": {
        "x": ("*", "I"), "h_prev": ("N", "H"), "cs_prev": ("N", "H"),
        "w_ru": ("I+H", "2*H"), "w_c": ("I+H", "H"), "b_ru": ("2*H",), "b_c": ("H",),
        "r": ("N", "H"), "u": ("N", "H"), "c": ("N", "H"), "d_h": ("N", "H"),
        "d_c_bar": ("N", "H"), "d_r_bar_u_bar": ("N", "2*H"),
        "w": ("I+H", "4*H"), "wci": ("H",), "wcf": ("H",), "wco": ("H",), "b": ("4*H",),
        "dicfo": ("N", "4*H"), **{n: ("*", "H") for n in ("i", "cs", "f", "o", "ci", "co", "h",
                                                           "cs_grad", "h_grad")},
    },
    "cudnn": {
        "input": ("*", "I"), "input_h": ("L*D", "N", "R"), "input_c": ("L*D", "N", "H"),
        "params": ("S",), "sequence_lengths": ("N",), "output": ("*", "D*R"),
        "output_h": ("L*D", "N", "R"), "output_c": ("L*D", "N", "H"),
        "output_backprop": ("*", "D*R"), "output_h_backprop": ("L*D", "N", "R"),
        "output_c_backprop": ("L*D", "N", "H"),
    },
}
#: Size symbols that no array argument decides (the descriptor, the kind, params' layout do):
#: an axis of them is always checked.
_PINNED = {"mps": {"D", "G"}, "tf": set(), "cudnn": {"L", "D", "G", "H", "I", "R", "S", "Q"}}
#: Optional arguments (default None) that the base call always passes.
_ALWAYS = {"source_gradient", "output_backprop"}
#: Host-side conversions: ``device=`` is accepted and not used (no device mutation).
_HOST_ONLY = {"cudnn_rnn_params_to_canonical", "cudnn_rnn_canonical_to_params"}
#: Arguments that take None although their signature has no default (None means zero).
_NULLABLE = {"source_gradient", "sequence_lengths", "output", "output_h", "output_c",
             "output_backprop", "output_h_backprop", "output_c_backprop"}

#: Scalar arguments: a valid value (of the drawn configuration ``c``) and invalid ones.
_SCALARS = {
    "forget_bias": (lambda c, r: float(r.uniform(-1, 1)),
                    [float("nan"), float("inf"), "1.0", None, [1.0]]),
    "cell_clip": (lambda c, r: float(r.uniform(-1, 3)),
                  [float("nan"), float("-inf"), "3", None, (3.0,)]),
    "use_peephole": (lambda c, r: bool(r.integers(0, 2)), [1, "yes", None, 0.0]),
    "seq_len_max": (lambda c, r: int(r.integers(0, c["T"] + 1)),
                    lambda c: [-1, c["T"] + 1, 1.5, str(c["T"]), None, np.array([c["T"]]),
                               np.float64(c["T"]), np.array(1.0)]),
    "rnn_mode": (lambda c, r: c["mode"], ["LSTM", "lstm2", "", None, 4, b"lstm"]),
    "input_mode": (lambda c, r: c["imode"], ["linear", "skip", None, 0]),
    "direction": (lambda c, r: "bidirectional" if c["D"] == 2 else "unidirectional",
                  ["bi", "forward", None, 2]),
    "num_proj": (lambda c, r: c["P"],
                 lambda c: [-1, 1.5, "1", c["H"], c["H"] + 3] + ([] if c["mode"] == "lstm"
                                                                  else [1])),
    "dropout": (lambda c, r: float(r.choice([0.0, 0.3])),
                [-0.1, 1.5, float("nan"), "0.5", None, float("inf")]),
    "seed": (lambda c, r: int(r.integers(0, 100)), [1.5, "1", None, [1]]),
    "seed2": (lambda c, r: int(r.integers(0, 100)), [2.5, "2", None]),
    "time_major": (lambda c, r: c["tm"], ["yes", None, 1, 0.0]),
    "is_training": (lambda c, r: bool(r.integers(0, 2)), ["no", None, 1]),
    "num_layers": (lambda c, r: c["L"], [0, -1, 1.5, "2", None, True]),
    "num_units": (lambda c, r: c["H"], [0, -3, 2.0, "4", None]),
    "input_size": (lambda c, r: c["I"],
                   lambda c: [-1, 1.5, "3", None] + ([c["H"] + 1] if c["imode"] == "skip_input"
                                                     else [])),
    "seq_length": (lambda c, r: c["T"], [-1, 1.5, "3", None]),
    "batch_size": (lambda c, r: c["N"], [-2, 0.5, None]),
}


def _config(rng, dialect, params):
    """The sizes and modes of one valid call."""
    T, N, I, H = _sizes(rng)
    if dialect == "mps":
        kind = "lstm" if "init_cell" in params else "gru" if "secondary_bias" in params else "rnn"
        D = int(rng.integers(1, 3))
        with_w = bool(rng.integers(0, 2))
        return dict(kind=kind, T=T, N=N, I=I, H=H, D=D, G=gates(kind), with_w=with_w,
                    W="I" if with_w else "D*G*H")
    if dialect == "tf":
        return dict(T=T, N=N, I=I, H=H, seq="seq_len_max" in params)
    mode = ("rnn_relu", "rnn_tanh", "lstm", "gru")[int(rng.integers(0, 4))]
    L, D = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    H += 1                                                # room for a projection
    P = int(rng.integers(0, H)) if mode == "lstm" and rng.integers(0, 2) else 0
    imode = ("linear_input", "skip_input", "auto_select")[int(rng.integers(0, 3))]
    if imode == "skip_input":
        I = H
    c = dict(mode=mode, L=L, D=D, T=T, N=N, I=I, H=H, P=P, R=P or H, G=gates(mode), imode=imode,
             tm=bool(rng.integers(0, 2)))
    c["kw"] = dict(rnn_mode=mode, input_mode=imode, num_proj=P,
                   direction="bidirectional" if D == 2 else "unidirectional")
    c["S"] = rc.cudnn_rnn_params_size(L, H, I, **c["kw"])
    return c


def _expand(spec, c, dialect):
    """A shape spec of the configuration ``c`` -> (shape, symbol sets per axis)."""
    if isinstance(spec, dict):
        spec = spec[c["D"]]
    if spec and spec[0] == "*":                # leading axes: (T, N), (N, T) or (N,)
        if dialect == "cudnn":
            lead = ("T", "N") if c["tm"] else ("N", "T")
        else:
            lead = ("T", "N") if c["seq"] else ("N",)
        spec = lead + tuple(spec[1:])
    spec = tuple(e.replace("W", c["W"]) if dialect == "mps" else e for e in spec)
    shape = tuple(int(eval(e, {"__builtins__": {}}, c)) for e in spec)
    return shape, [set(re.findall(r"[A-Z]+", e)) for e in spec]


#: Arguments whose value :func:`_special` computes.
_SPECIAL = {"reserve_space", "host_reserved", "weights", "biases"}


def _special(case, c, rng, dtype):
    """Values that another argument decides: cuDNN's input_c of a non-LSTM mode (any value,
    ignored), the reserve space and host bytes of a backprop, canonical weights and biases."""
    a = case.args
    if "input_c" in a and c["mode"] != "lstm":
        if rng.integers(0, 2):
            a["input_c"].axes, a["input_c"].ignored, a["input_c"].required = (), True, False
        else:
            a["input_c"] = None
    for name in ("output_c", "output_c_backprop"):
        if name in a and c["mode"] != "lstm":
            a[name] = None
    if "reserve_space" in a:
        kw = case.kwargs
        lay = _layout.make_layout(c["L"], c["H"], c["I"], **c["kw"])
        drop = kw["dropout"] > 0 and c["L"] > 1
        host = _layout.host_signature(lay, np.dtype(dtype).itemsize, drop, kw["dropout"],
                                      kw["seed"], kw["seed2"])
        a["reserve_space"] = Arg(_arr(rng, (lay.reserve_size(c["T"], c["N"], drop),), dtype),
                                 axes=(0,))
        a["host_reserved"] = Arg(host, axes=(0,), integer=True)
    if "weights" in a:
        w, b = rc.cudnn_rnn_params_to_canonical(c["L"], c["H"], c["I"],
                                                _arr(rng, (c["S"],), dtype), **c["kw"])
        a["weights"], a["biases"] = w, b


def build(name, rng, dtype) -> Case:
    """A random valid call of the public op ``name``, built from its signature."""
    fn = public_ops()[name]
    params = inspect.signature(fn).parameters
    dialect = _dialect(params)
    c = _config(rng, dialect, params)
    shapes = SHAPES[dialect]
    order = [p for p, v in params.items() if v.kind is v.POSITIONAL_OR_KEYWORD]
    case = Case(name, fn, order, {}, device_ok="device" in params and name not in _HOST_ONLY)
    for p in order:
        if p in _SCALARS:
            valid, bad = _SCALARS[p]
            case.args[p] = valid(c, rng)
            case.scalars[p] = bad(c) if callable(bad) else bad
        elif p in shapes:
            optional = params[p].default is None or p in _NULLABLE
            always = p in _ALWAYS or (p == "sequence_lengths" and params[p].default is not None)
            if optional and not always and rng.integers(0, 2):
                case.args[p] = None
                continue
            shape, _ = _expand(shapes[p], c, dialect)
            if p == "sequence_lengths":
                value = rng.integers(0, c["T"] + 1, c["N"]).astype(
                    np.int64 if rng.integers(0, 2) else np.int32)
            else:
                value = _arr(rng, shape, dtype) + (2.0 if p == "mask" else 0.0)
            case.args[p] = Arg(value, required=not optional, mask=p == "mask",
                               integer=p == "sequence_lengths")
        else:
            case.args[p] = None                    # decided by _special below
    for p, v in params.items():
        if v.kind is v.KEYWORD_ONLY and p in _SCALARS:
            valid, bad = _SCALARS[p]
            case.kwargs[p] = valid(c, rng)
            case.scalars[p] = bad(c) if callable(bad) else bad
    if dialect == "mps":
        case.kwargs["descriptor"] = _DESC[c["kind"]](bidirectional=c["D"] == 2,
                                                     reverse=bool(rng.integers(0, 2)))
        case.desc_fields = {"kind": c["kind"]}
        if not c["with_w"]:
            case.args["input_weight"] = None
        elif case.args.get("input_weight") is None:
            case.args["input_weight"] = Arg(_arr(rng, (c["D"] * c["G"] * c["H"], c["I"]),
                                                 dtype), required=False)
    if dialect == "cudnn":
        _special(case, c, rng, dtype)
    _constrain(case, c, dialect)
    return case


def _constrain(case, c, dialect):
    """Each array's checked axes: those whose size symbols are pinned or also occur in another
    axis (of any present array; a broadcast mask's axes of size 1 do not count)."""
    shapes = SHAPES[dialect]
    present = {n: a for n, a in case.args.items()
               if isinstance(a, Arg) and n in shapes and not a.ignored}
    axes = {n: _expand(shapes[n], c, dialect)[1] for n in present}
    for n, arg in present.items():
        mine = []
        for k, syms in enumerate(axes[n]):
            others = set()
            for m, other in axes.items():
                for j, s in enumerate(other):
                    if (m, j) != (n, k) and not (present[m].mask and
                                                 present[m].value.shape[j] == 1):
                        others |= s
            if syms & (_PINNED[dialect] | others):
                mine.append(k)
        arg.axes = tuple(mine)


def unknown_arguments(name) -> list:
    """The arguments of the public op ``name`` that the tables give no valid value (empty for
    every op the fuzzer covers; a new op with a new argument name lists it here)."""
    params = inspect.signature(public_ops()[name]).parameters
    known = set(SHAPES[_dialect(params)]) | set(_SCALARS) | _SPECIAL | {"descriptor", "device"}
    return [p for p in params if p not in known]


def ops() -> dict:
    """name -> builder(rng, dtype) for every public op."""
    return {n: functools.partial(build, n) for n in public_ops()}


#: Every public op (name -> builder(rng, dtype)), derived from ``pyrnn_cl.__all__``.
OPS = ops()


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


def _worker_env():
    """The environment of a worker: this one, with the checkout first on PYTHONPATH."""
    path = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=ROOT + (os.pathsep + path if path else ""))


def run_supervised(seed, calls, timeout, inject=None):
    """Run the calls in worker subprocesses; a dead or stuck worker counts its current call as a
    crash (``exit N`` / ``hang``) and a new worker continues after it."""
    records, start = [], 0
    while start < calls:
        proc = subprocess.Popen(_worker_cmd(seed, start, calls, inject), stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=_worker_env())
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
