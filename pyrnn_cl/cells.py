"""Cell registry: what the engine needs to know about each cell (the maths is in ``cl/cells``).

A :class:`CellSpec` fixes everything that changes the compiled code of a layer: the cell kind,
where each canonical gate lives among the caller's weight blocks, the activations and the
cell-specific switches. Canonical gate slots (the order inside ``cl/cells/<cell>.cl``):

=====  ==========================  ==============================================
cell   canonical slots             notes
=====  ==========================  ==============================================
rnn    (a,)                        h = act(a)
lstm   (i, f, g, o)                g is MPSGraph's z, TensorFlow's ci
gru    (z, r, o)                   o is cuDNN's h', PyTorch's n, TensorFlow's c
=====  ==========================  ==============================================

``gate_blocks[k]`` is the index of the weight block (of ``H`` rows) that holds canonical gate
``k`` in the caller's layout, e.g. MPSGraph's LSTM ``[i, z, f, o]`` (``forget_gate_last``) is
``(0, 2, 1, 3)`` and PyTorch's GRU ``(r, z, n)`` is ``(1, 0, 2)``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Activation names (API.md §1) and their codes in ``cl/common.h``.
ACTIVATIONS = {"none": 0, "relu": 1, "tanh": 2, "sigmoid": 3, "hard_sigmoid": 4}

#: Gates per cell kind.
GATES = {"rnn": 1, "lstm": 4, "gru": 3}

#: Peephole modes of the LSTM cell.
PEEP_NONE, PEEP_MPS, PEEP_TF = 0, 1, 2


def activation_code(name, argument="activation"):
    """The kernel code of an activation name; ``ValueError`` naming the argument otherwise."""
    try:
        return ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise ValueError(f"{argument}: unknown activation {name!r}; expected one of "
                         f"{', '.join(repr(a) for a in ACTIVATIONS)}") from None


@dataclass(frozen=True)
class CellSpec:
    """Compile-time description of a cell (see the module docstring)."""

    kind: str
    gate_blocks: tuple
    acts: tuple
    cell_act: int = ACTIVATIONS["tanh"]
    peephole: int = PEEP_NONE
    clip: bool = False
    reset_after: bool = True
    flip_z: bool = True

    @property
    def G(self) -> int:
        return GATES[self.kind]

    @property
    def has_c(self) -> bool:
        return self.kind == "lstm"

    @property
    def two_phase(self) -> bool:
        """A reset-before GRU needs all of r before its o-gate product: two kernels a step."""
        return self.kind == "gru" and not self.reset_after

    @property
    def needs_hn(self) -> bool:
        """A reset-after GRU's backward needs hn = (h m) R_o^T + b (recomputed, not saved)."""
        return self.kind == "gru" and self.reset_after

    def defines(self) -> dict:
        """The ``#define``s of this cell for ``cl/engine_<kind>.cl``."""
        d = {f"GATE_BLK_{k}": b for k, b in enumerate(self.gate_blocks)}
        d.update({f"ACT_{k}": a for k, a in enumerate(self.acts)})
        if self.kind == "lstm":
            d.update(ACT_CELL=self.cell_act, LSTM_PEEP=self.peephole, LSTM_CLIP=int(self.clip))
        if self.kind == "gru":
            d.update(GRU_RESET_AFTER=int(self.reset_after), GRU_FLIP_Z=int(self.flip_z))
        return d
