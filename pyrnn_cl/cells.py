"""Cell registry: what the engine needs to know about each cell (the maths is in ``cl/cells``).

Two levels:

* a :class:`CellKind` (the registry, :data:`CELLS`) describes a cell file once: its gate
  count, the roles of its canonical slots, its state count, its default activations and
  whether its backward needs the output sequence ``y``. Every gate count in the package is a
  lookup here (:func:`gates`). Built-in kinds are ``rnn``, ``lstm`` and ``gru``; more are
  added from outside the package with :func:`register_cell`.
* a :class:`CellSpec` fixes everything that changes the compiled code of a layer: the cell
  kind, where each canonical gate lives among the caller's weight blocks, the activations and
  the cell-specific switches.

Canonical gate slots of the built-in cells (the order inside ``cl/cells/<cell>.cl``):

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

Slot roles (the cell contract at the top of ``cl/recurrence.cl`` states what they mean to the
engine; the cell file declares the same values as ``CELL_*`` macros and the build checks them
against the registry's ``PYRNN_CELL_*`` defines, :meth:`CellSpec.defines`):

* ``late_gate`` (two-phase cells): the slot whose value multiplies ``h[t-1]`` in the recurrent
  product of the last slot, which is therefore read late: a second kernel per step
  (a reset-before GRU: r; its o is the late slot).
* ``hn_slot``: the slot whose recurrent pre-activation ``(h[t-1] . m) R_k^T + b_h,k`` the
  backward needs (recomputed, not saved; a reset-after GRU: o). Its hidden-side gate gradient
  differs from the input side's.
* ``peephole_slots`` / ``peephole_new_c``: the slots a peephole couples to ``c[t-1]`` (LSTM),
  and the one coupled to the new ``c[t]`` instead (TensorFlow's o), -1 for none.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path

__all__ = ["ACTIVATIONS", "PEEP_NONE", "PEEP_MPS", "PEEP_TF", "CellKind", "CellSpec", "CELLS",
           "CUDNN_MODES", "activation_code", "cell_kind", "gates", "register_cell"]

#: Activation names (API.md §1) and their codes in ``cl/common.h``.
ACTIVATIONS = {"none": 0, "relu": 1, "tanh": 2, "sigmoid": 3, "hard_sigmoid": 4}

#: Peephole modes of the LSTM cell.
PEEP_NONE, PEEP_MPS, PEEP_TF = 0, 1, 2

_A = ACTIVATIONS


def activation_code(name: str, argument: str = "activation") -> int:
    """The kernel code of an activation name; ``ValueError`` naming the argument otherwise."""
    try:
        return ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise ValueError(f"{argument}: unknown activation {name!r}; expected one of "
                         f"{', '.join(repr(a) for a in ACTIVATIONS)}") from None


@dataclass(frozen=True)
class CellKind:
    """One registered cell file (see the module docstring for the roles).

    ``source`` is the cell file: a path relative to ``pyrnn_cl/cl/`` for the built-in cells, an
    absolute path for registered ones. ``acts`` are the default activation codes per slot.
    ``variant``, for built-in cells only, maps a :class:`CellSpec` to its cell-specific
    ``#define``s and role overrides (a GRU's roles depend on ``reset_after``, an LSTM's peephole
    roles on its peephole mode).
    """

    name: str
    source: str
    gates: int
    slots: tuple
    acts: tuple
    states: int = 1
    late_gate: int = -1
    hn_slot: int = -1
    peephole_slots: tuple = ()
    peephole_new_c: int = -1
    bwd_needs_y: bool = False
    digest: str = ""
    variant: Callable | None = field(default=None, compare=False, repr=False)


def _lstm_variant(spec):
    defines = dict(ACT_CELL=spec.cell_act, LSTM_PEEP=spec.peephole, LSTM_CLIP=int(spec.clip))
    if spec.peephole == PEEP_MPS:
        roles = dict(peephole_slots=(0, 1, 2, 3), peephole_new_c=-1)
    elif spec.peephole == PEEP_TF:
        roles = dict(peephole_slots=(0, 1, 3), peephole_new_c=3)
    else:
        roles = dict(peephole_slots=(), peephole_new_c=-1)
    return defines, roles


def _gru_variant(spec):
    defines = dict(GRU_RESET_AFTER=int(spec.reset_after), GRU_FLIP_Z=int(spec.flip_z))
    if spec.reset_after:
        return defines, dict(late_gate=-1, hn_slot=2)
    return defines, dict(late_gate=1, hn_slot=-1)


_BUILTIN = (
    CellKind("rnn", "cells/rnn.cl", 1, ("a",), (_A["relu"],)),
    CellKind("lstm", "cells/lstm.cl", 4, ("i", "f", "g", "o"),
             (_A["sigmoid"], _A["sigmoid"], _A["tanh"], _A["sigmoid"]), states=2,
             variant=_lstm_variant),
    CellKind("gru", "cells/gru.cl", 3, ("z", "r", "o"), (_A["sigmoid"], _A["sigmoid"], _A["tanh"]),
             late_gate=1, hn_slot=2, bwd_needs_y=True, variant=_gru_variant),
)

#: The cell registry: kind name -> :class:`CellKind` (built-in cells first; :func:`register_cell`
#: adds to it).
CELLS: dict[str, CellKind] = {k.name: k for k in _BUILTIN}
_BUILTIN_NAMES = frozenset(CELLS)
_registry_lock = threading.Lock()

#: cuDNN's ``rnn_mode`` names: the cell kind and the activation of each (None: the kind's
#: defaults). The gate count of a mode is its kind's.
CUDNN_MODES = {"rnn_relu": ("rnn", _A["relu"]), "rnn_tanh": ("rnn", _A["tanh"]),
               "lstm": ("lstm", None), "gru": ("gru", None)}


def cell_kind(name: str) -> CellKind:
    """The registered :class:`CellKind` of ``name``; ``ValueError`` listing the known ones."""
    kind = CELLS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise ValueError(f"cell: unknown cell {name!r}; registered cells are "
                         f"{', '.join(repr(k) for k in CELLS)}")
    return kind


def gates(name: str) -> int:
    """Gates per hidden unit of a cell kind or a cuDNN ``rnn_mode`` (``"rnn_relu"``, ...)."""
    if name in CUDNN_MODES:
        name = CUDNN_MODES[name][0]
    return cell_kind(name).gates


_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def register_cell(name: str, source_path: str | os.PathLike[str], *, gates: int,
                  slots: Sequence[str] | None = None, activations: Sequence[str] | None = None,
                  states: int = 1, late_gate: int | None = None, hn_slot: int | None = None,
                  backward_needs_y: bool = True) -> CellKind:
    """Register the cell ``name`` whose pointwise maths is the OpenCL C file ``source_path``
    (README "Custom cells" states the contract the file follows). Returns its
    :class:`CellKind`; the cell is then reachable as :func:`pyrnn_cl.mps.rnn_layer` (...,
    ``descriptor=RNNLayerDescriptor(cell=name)``) and :func:`pyrnn_cl.mps.rnn_layer_gradients`.

    ``gates``: gates per hidden unit (weight blocks of ``H`` rows); ``slots``: their names
    (default ``("g0", "g1", ...)``); ``activations``: default activation name per slot
    (default ``"sigmoid"`` for every slot, the ``ACT_k`` defines the file receives);
    ``states``: 1 (h) or 2 (h and a cell state c); ``late_gate``: for a two-phase cell, the
    slot whose value multiplies ``h[t-1]`` in the last slot's recurrent product;
    ``hn_slot``: the slot whose recurrent pre-activation the backward needs;
    ``backward_needs_y``: whether ``cell_bwd`` needs h[t-1] (given the output sequence) rather
    than rebuilding it with ``cell_h`` from the saved gates.

    Registering a name again replaces the entry (and, since its file's digest is part of every
    program key, its programs); a built-in name cannot be replaced.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name: expected a lower-case identifier, got {name!r}")
    if name in _BUILTIN_NAMES or name in CUDNN_MODES:
        raise ValueError(f"name: {name!r} is a built-in cell")
    path = Path(source_path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"source_path: {str(source_path)!r} is not a file")
    if isinstance(gates, bool) or not isinstance(gates, int) or not 1 <= gates <= 4:
        raise ValueError(f"gates: expected an int from 1 to 4, got {gates!r}")
    slots = tuple(f"g{k}" for k in range(gates)) if slots is None else tuple(slots)
    if len(slots) != gates:
        raise ValueError(f"slots: expected {gates} names, got {len(slots)}")
    acts = ("sigmoid",) * gates if activations is None else tuple(activations)
    if len(acts) != gates:
        raise ValueError(f"activations: expected {gates} names, got {len(acts)}")
    codes = tuple(activation_code(a, "activations") for a in acts)
    if states not in (1, 2):
        raise ValueError(f"states: expected 1 or 2, got {states!r}")

    def slot(arg, value):
        if value is None:
            return -1
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < gates:
            raise ValueError(f"{arg}: expected a slot from 0 to {gates - 1} or None, "
                             f"got {value!r}")
        return value

    late, hn = slot("late_gate", late_gate), slot("hn_slot", hn_slot)
    if late >= 0 and (gates < 2 or late == gates - 1):
        raise ValueError("late_gate: a two-phase cell needs at least 2 gates and its late gate "
                         "must not be the last slot (the one read late)")
    if late >= 0 and hn >= 0:
        raise ValueError("late_gate and hn_slot: a cell has at most one of them")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    kind = CellKind(name, str(path), gates, slots, codes, states=states, late_gate=late,
                    hn_slot=hn, bwd_needs_y=bool(backward_needs_y), digest=digest)
    with _registry_lock:
        CELLS[name] = kind
    return kind


@lru_cache(maxsize=256)
def _resolved(spec: CellSpec) -> CellKind:
    """A built-in cell's registry entry with its roles resolved for ``spec``, made once per
    spec: the ops make a new ``CellSpec`` on every call, and resolving one (``replace`` of the
    entry) took about 5 us of that call's host time. Only built-in kinds have a ``variant``,
    and they cannot be registered again, so the spec alone is the key."""
    kind = cell_kind(spec.kind)
    assert kind.variant is not None and kind.name in _BUILTIN_NAMES, kind.name
    return replace(kind, **kind.variant(spec)[1])


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

    @cached_property
    def registry(self) -> CellKind:
        """The registry entry of this cell with its roles resolved for this spec."""
        kind = cell_kind(self.kind)
        if kind.variant is None:
            return kind
        return _resolved(self)

    @property
    def G(self) -> int:
        return cell_kind(self.kind).gates

    @property
    def has_c(self) -> bool:
        """The cell has a second state c (an LSTM)."""
        return cell_kind(self.kind).states == 2

    @property
    def two_phase(self) -> bool:
        """The last slot's recurrent product needs all of the late gate first (a reset-before
        GRU's o needs r): two kernels a step."""
        return self.registry.late_gate >= 0

    @property
    def needs_hn(self) -> bool:
        """The backward needs the recurrent pre-activation of the hn slot (a reset-after GRU's
        hn = (h m) R_o^T + b; recomputed, not saved)."""
        return self.registry.hn_slot >= 0

    @property
    def hn_slot(self) -> int:
        return self.registry.hn_slot

    @property
    def late_slot(self) -> int:
        """The slot read late by a two-phase cell: the last one."""
        return self.G - 1

    @property
    def separate_dgh(self) -> bool:
        """Whether hidden-side gate gradients are kept apart from the input side's (cells with
        an hn slot or two phases)."""
        return self.two_phase or self.needs_hn

    @property
    def bwd_needs_y(self) -> bool:
        """The backward needs the output sequence y (h[t] cannot be rebuilt from the saved
        gates)."""
        return cell_kind(self.kind).bwd_needs_y

    @property
    def source(self) -> str:
        return cell_kind(self.kind).source

    @property
    def digest(self) -> str:
        """Digest of a registered cell's file ("" for built-in cells, whose files are fixed)."""
        return cell_kind(self.kind).digest

    def defines(self) -> dict:
        """The ``#define``s of this cell: gate blocks, activations, the registry's view of the
        cell (``PYRNN_CELL_*``, checked against the cell file's ``CELL_*`` declarations when it
        builds, see the cell contract in ``cl/recurrence.cl``) and the cell-specific
        switches."""
        reg = self.registry
        d = {f"GATE_BLK_{k}": b for k, b in enumerate(self.gate_blocks)}
        d.update({f"ACT_{k}": a for k, a in enumerate(self.acts)})
        d.update(PYRNN_CELL_G=reg.gates, PYRNN_CELL_STATES=reg.states,
                 PYRNN_CELL_LATE_GATE=reg.late_gate, PYRNN_CELL_HN_SLOT=reg.hn_slot,
                 PYRNN_CELL_PEEP_SLOTS=sum(1 << k for k in reg.peephole_slots),
                 PYRNN_CELL_PEEP_NEW_C=reg.peephole_new_c,
                 PYRNN_CELL_BWD_NEEDS_Y=int(reg.bwd_needs_y))
        if reg.digest:      # a registered file: its programs are keyed by its contents
            d["PYRNN_CELL_DIGEST"] = reg.digest[:32]
        if reg.variant is not None:
            d.update(reg.variant(self)[0])
        return d
