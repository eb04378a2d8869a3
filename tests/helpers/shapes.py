"""Named awkward problem shapes for the layer tests (oneDNN style), and random inputs of them.

Every shape is a :class:`Shape` ``(name, T, N, I, H)``; use ``pytest.mark.parametrize("shape",
SHAPES, ids=ids(SHAPES))``. Sizes are chosen to expose indexing bugs, not for speed records:

* T != N != I != H everywhere (equal sizes hide transpositions, pitfalls A2);
* hidden sizes not divisible by any vector width (1, 3, 11, 33) and batch sizes not divisible by
  the engine's rows-per-work-item (1, 5, 13);
* degenerate T = 0 and N = 0 (correct empty shapes, never a crash, pitfalls A9).

:func:`layer_inputs` draws the arguments of one MPSGraph op (API.md §1) for a shape: non-zero,
*distinct* initial states per direction (pitfalls A3), masks away from zero, weights scaled so
that pre-activations are O(1) (every gradient path carries signal).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Shape", "SHAPES", "SMALL", "EMPTY", "PRIME", "ids", "GATES", "OPTIONAL",
           "layer_inputs"]


class Shape(NamedTuple):
    name: str
    T: int
    N: int
    I: int  # noqa: E741
    H: int

    def __str__(self):
        return f"{self.name}(T={self.T},N={self.N},I={self.I},H={self.H})"


#: Prime, pairwise different sizes: the default shape of the layer tests.
PRIME = Shape("prime", T=7, N=5, I=3, H=11)

SHAPES = [
    PRIME,
    Shape("tail_hidden", T=3, N=5, I=7, H=33),     # H = 32 + 1: a vector tail of one unit
    Shape("one_step", T=1, N=3, I=4, H=5),         # no recurrence at all: h0 feeds step 0 only
    Shape("hidden_1", T=6, N=4, I=2, H=1),         # one unit: R is [G, 1]
    Shape("batch_1", T=5, N=1, I=6, H=3),          # one row: N below every row block
    Shape("batch_13", T=4, N=13, I=2, H=3),        # 13 rows: not a multiple of 2, 3, 4 or 8
    Shape("input_1", T=4, N=3, I=1, H=7),          # one input feature
]

#: Degenerate sizes: correct empty results, gradients of the final state pass to the initial one.
EMPTY = [
    Shape("no_steps", T=0, N=3, I=4, H=5),
    Shape("no_rows", T=4, N=0, I=3, H=5),
    Shape("nothing", T=0, N=0, I=2, H=3),
]

#: Tiny shape for element-wise finite differences.
SMALL = Shape("small", T=3, N=4, I=2, H=3)

#: Gates per op kind.
GATES = {"rnn": 1, "lstm": 4, "gru": 3}

#: Optional inputs of every op, in signature order (``mask`` has no gradient output).
OPTIONAL = {
    "rnn": ("input_weight", "bias", "init_state", "mask"),
    "lstm": ("input_weight", "bias", "init_state", "init_cell", "mask", "peephole"),
    "gru": ("input_weight", "bias", "init_state", "mask", "secondary_bias"),
}


def ids(shapes):
    """Readable pytest ids: the shape names."""
    return [s.name for s in shapes]


def layer_inputs(kind, shape, *, bidirectional=False, present=None, seed=0, scale=None,
                 dtype=np.float64):
    """Random float arguments of one MPSGraph layer op, as a dict keyed by argument name.

    ``present`` lists the optional inputs to include (default: all of :data:`OPTIONAL`);
    without ``input_weight`` the source is pre-projected ``[T, N, D*G*H]``. ``scale`` defaults to
    ``1/sqrt(max(H, I))`` for the weights so pre-activations stay O(1) for every shape.
    """
    rng = np.random.default_rng(seed)
    T, N, I, H = shape.T, shape.N, shape.I, shape.H
    D = 2 if bidirectional else 1
    G = GATES[kind]
    GH = G * H
    present = OPTIONAL[kind] if present is None else tuple(present)
    unknown = set(present) - set(OPTIONAL[kind])
    if unknown:
        raise ValueError(f"{kind} has no optional inputs {sorted(unknown)}")
    w = (1.0 / np.sqrt(max(H, I, 1))) if scale is None else scale

    def normal(s, k=1.0):
        return k * rng.standard_normal(s)

    out = {}
    if "input_weight" in present:
        out["source"] = normal((T, N, I))
    else:
        out["source"] = normal((T, N, D * GH), 0.7)
    out["recurrent_weight"] = normal((GH, H) if D == 1 else (2, GH, H), w)
    if "input_weight" in present:
        out["input_weight"] = normal((D * GH, I), w)
    if "bias" in present:
        out["bias"] = normal((D * GH,), 0.3)
    if "init_state" in present:
        out["init_state"] = normal((N, D * H), 0.8)
    if "init_cell" in present:
        out["init_cell"] = normal((N, D * H), 0.8)
    if "mask" in present:
        # dropout-like values, some exact zeros and some scaled-up ones
        m = rng.uniform(0.5, 1.5, (T, N, D * H))
        m[rng.uniform(size=m.shape) < 0.15] = 0.0
        out["mask"] = m
    if "peephole" in present:
        out["peephole"] = normal((4 * H,) if D == 1 else (2, 4 * H), 0.5)
    if "secondary_bias" in present:
        out["secondary_bias"] = normal((D * H,), 0.5)
    return {k: np.asarray(v, dtype=dtype) for k, v in out.items()}
