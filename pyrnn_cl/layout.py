r"""Layout arithmetic: every offset into the cuDNN dialect's flat buffers, in one place.

Nothing here touches a device; :mod:`pyrnn_cl.cudnn` turns these offsets into copies, GEMMs and
kernel arguments. Engine buffers (``gx``, ``y``, ``cs``, ``R``, states) are described in
``cl/recurrence.cl``; the cuDNN dialect's own buffers are:

**params** (API.md §3, semantics.md §4.3). ``L`` layers of ``D`` directions give ``L·D``
*pseudo-layers* ``k = l·D + d`` (forward direction first). Pseudo-layer ``k`` of layer ``l`` holds,
flattened row-major and in this order::

    W_0 .. W_{G-1}     [H, in_l]   input weights (absent for layer 0 with skip_input)
    R_0 .. R_{G-1}     [H, R]      recurrent weights
    W_proj             [P, H]      LSTM projection (num_proj = P > 0 only)
    bW_0 .. bW_{G-1}   [H]         input-side biases
    bR_0 .. bR_{G-1}   [H]         hidden-side biases

with ``in_0 = input_size``, ``in_l = D·R`` (``l ≥ 1``), ``R = P`` if ``P`` else ``H``. The gate
blocks of one kind are adjacent, so ``W_0..W_{G-1}`` *is* PyTorch's ``weight_ih_l{l}`` ``[G·H,
in_l]`` (likewise ``weight_hh``, ``bias_ih``, ``bias_hh``), and gate ``g`` is PyTorch's chunk
``g``: LSTM ``(i, f, g, o)``, GRU ``(r, z, n)``, RNN one block. Every pseudo-layer of layer ``l``
has the same size :meth:`CudnnLayout.pseudo_size`, so direction ``d`` of layer ``l`` starts at
``base(l) + d · pseudo_size(l)``::

    size = Σ_l D · [G·H·in_l (not layer 0 with skip_input) + G·H·R + P·H + 2·G·H]

which equals PyTorch's parameter count of the same ``nn.RNN/LSTM/GRU``.

**states** ``input_h``/``output_h`` ``[L·D, N, R]`` and ``input_c``/``output_c`` ``[L·D, N, H]``
in both time-major and batch-major calls: layer ``l``'s ``[D][N][W]`` slice is the contiguous run of
``D·N·W`` elements at :meth:`CudnnLayout.state_offset`.

**batch-major** sequences ``[N][T][W]`` are the transpose of the time-major ``[T][N][W]`` over the
first two axes; :func:`swap01_strides` gives the strides of that transposed copy.

**reserve_space** (1-D, the op's dtype) is what ``cudnn_rnn_backprop`` needs of a training
forward: for each layer ``l`` in order, time-major, ``K = R``::

    sav  [T][N][D][G][H]  the engine's saved gates (post-activation; RNN: pre-activation),
                          gate blocks in PyTorch order
    y    [T][N][D][K]     layer output before dropout (zero past each sequence length)
    cs   [T][N][D][H]     LSTM only: cell state c[t]
    hs   [T][N][D][H]     LSTM with num_proj only: h[t] before the projection
    xd   [T][N][D][K]     layers l >= 1 when dropout is applied: this layer's input, the
                          previous layer's y after dropout

Every part starts at a multiple of :data:`RESERVE_ALIGN` elements (the gaps are never read), so
the forward writes each part in place and backprop reads it in place, as OpenCL sub-buffers
(``_arrays.sub_array``): a device's ``CL_DEVICE_MEM_BASE_ADDR_ALIGN`` is far below 256 elements
(PoCL 1024 bits, NVIDIA 4096 bits). A layer's parts are the engine's own buffers, so no copy of
them exists beside the reserve space. :meth:`CudnnLayout.reserve_size` reports the length
before anything is allocated (``rc.cudnn_rnn_reserve_space_size``).

**host_reserved** (int8, :data:`HOST_RESERVED_SIZE` bytes): a signature of the forward call
that backprop checks against its own arguments: ``[format version 2, rnn_mode code, skip_input,
D, num_proj > 0, itemsize, dropout applied, 0]`` followed by an 8-byte digest of ``(dropout,
seed, seed2)`` (zeros when no dropout was applied). A forward with ``is_training=False``
returns it empty, like ``reserve_space``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from typing import Generic, TypeVar

import numpy as np

from ._arrays import check_choice, check_int
from .cells import CUDNN_MODES, gates

__all__ = ["RNN_MODES", "INPUT_MODES", "DIRECTIONS", "NUM_GATES", "CudnnLayout", "make_layout",
           "swap01_strides", "HOST_RESERVED_SIZE", "host_signature", "RESERVE_ALIGN", "Saved",
           "Reserve", "SAVED_PARTS", "RESERVE_PARTS"]

V = TypeVar("V")


@dataclass(frozen=True)
class Saved(Generic[V]):
    """What a layer's forward keeps for its backward, one field per sequence (``None``: absent):
    the engine's forward result (arrays), and the names and widths of a layer's reserve parts
    (:meth:`CudnnLayout.reserve_widths`). ``sav`` the saved gates ``[T][N][D*G*H]``, ``y`` the
    output ``[T][N][D*K]``, ``cs`` (LSTM) the cell states ``[T][N][D*H]``, ``hs`` (projection)
    h before it ``[T][N][D*H]``."""

    sav: V | None = None
    y: V | None = None
    cs: V | None = None
    hs: V | None = None


@dataclass(frozen=True)
class Reserve(Saved[V]):
    """A layer's part of the cuDNN dialect's reserve space: what its forward saves and, for layers
    after the first with dropout applied, ``xd``: its input after dropout."""

    xd: V | None = None


#: Names of :class:`Saved`'s fields, in reserve order: the one definition of those names.
SAVED_PARTS: tuple[str, ...] = tuple(f.name for f in fields(Saved))
#: Names of a layer's reserve parts, in order (:class:`Reserve`'s fields).
RESERVE_PARTS: tuple[str, ...] = tuple(f.name for f in fields(Reserve))

#: Gates per ``rnn_mode`` (a view of the cell registry, :func:`pyrnn_cl.cells.gates`).
NUM_GATES = {mode: gates(mode) for mode in CUDNN_MODES}
RNN_MODES = tuple(NUM_GATES)
INPUT_MODES = ("linear_input", "skip_input", "auto_select")
DIRECTIONS = ("unidirectional", "bidirectional")

#: Elements between the starts of reserve_space parts (module docstring).
RESERVE_ALIGN = 256

#: Length of ``host_reserved`` after a training forward.
HOST_RESERVED_SIZE = 16
_FORMAT_VERSION = 2     # 2: parts aligned to RESERVE_ALIGN, dropped inputs kept (xd)


@dataclass(frozen=True)
class CudnnLayout:
    """Sizes of one cuDNN-dialect configuration and the offsets they imply (module docstring).

    ``mode`` rnn_mode, ``L`` layers, ``H`` num_units, ``I`` input_size, ``D`` directions,
    ``skip`` whether layer 0 uses skip_input, ``P`` num_proj (0: none).
    """

    mode: str
    L: int
    H: int
    I: int
    D: int
    skip: bool
    P: int
    # sizes derived from the fields in __post_init__
    _G: int = field(init=False, repr=False, compare=False)
    _R: int = field(init=False, repr=False, compare=False)
    _pseudo: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _bases: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # every size below is asked for many times per op call (tens of property calls, a few
        # microseconds of host time each): computed once here, from the fields
        G = NUM_GATES[self.mode]
        R = self.P or self.H
        object.__setattr__(self, "_G", G)
        object.__setattr__(self, "_R", R)       # (w_size and GH read these two)
        pseudo = tuple(self.w_size(l) + self.GH * R + self.P * self.H + 2 * self.GH
                       for l in range(self.L))
        bases = [0]
        for size in pseudo:
            bases.append(bases[-1] + self.D * size)
        object.__setattr__(self, "_pseudo", pseudo)
        object.__setattr__(self, "_bases", tuple(bases))

    # -- sizes ------------------------------------------------------------------------------

    @property
    def G(self) -> int:
        return self._G

    @property
    def R(self) -> int:
        """Width of the recurrent state and of each direction's output: ``P`` or ``H``."""
        return self._R

    @property
    def GH(self) -> int:
        return self._G * self.H

    def in_size(self, l: int) -> int:
        """Input width of layer ``l``: ``input_size``, then ``D·R``."""
        return self.I if l == 0 else self.D * self.R

    def has_w(self, l: int) -> bool:
        """Whether layer ``l`` has input weights (not layer 0 with skip_input)."""
        return not (l == 0 and self.skip)

    def w_size(self, l: int) -> int:
        return self.GH * self.in_size(l) if self.has_w(l) else 0

    def pseudo_size(self, l: int) -> int:
        """Elements of one pseudo-layer (one direction) of layer ``l``: ``W`` (:meth:`w_size`),
        ``R`` (``G·H·R``), ``W_proj`` (``P·H``) and the two biases (``2·G·H``)."""
        return self._pseudo[l]

    def base(self, l: int) -> int:
        """Offset of layer ``l``'s first pseudo-layer (``D`` pseudo-layers per layer before it)."""
        return self._bases[l]

    @property
    def size(self) -> int:
        """Length of ``params``."""
        return self._bases[self.L]

    # -- params offsets (direction d of layer l; gate blocks of one kind are adjacent) ------

    def pseudo(self, l: int, d: int) -> int:
        return self.base(l) + d * self.pseudo_size(l)

    def off_w(self, l: int, d: int) -> int:
        """``W_0`` (``[G·H, in_l]`` block); only meaningful when :meth:`has_w`."""
        return self.pseudo(l, d)

    def off_r(self, l: int, d: int) -> int:
        """``R_0`` (``[G·H, R]`` block)."""
        return self.pseudo(l, d) + self.w_size(l)

    def off_proj(self, l: int, d: int) -> int:
        """``W_proj`` ``[P, H]``."""
        return self.off_r(l, d) + self.GH * self.R

    def off_bw(self, l: int, d: int) -> int:
        """``bW_0`` (``[G·H]`` block)."""
        return self.off_proj(l, d) + self.P * self.H

    def off_br(self, l: int, d: int) -> int:
        """``bR_0`` (``[G·H]`` block)."""
        return self.off_bw(l, d) + self.GH

    # -- canonical form ---------------------------------------------------------------------

    def canonical(self):
        """``(weights, biases)``: lists of ``(offset, shape)`` in canonical order (TF's), one
        entry per gate matrix / vector, each a contiguous row-major run of ``params``."""
        G, H, R, P = self.G, self.H, self.R, self.P
        weights, biases = [], []
        for l in range(self.L):
            n_in = self.in_size(l)
            for d in range(self.D):
                if self.has_w(l):
                    weights += [(self.off_w(l, d) + g * H * n_in, (H, n_in)) for g in range(G)]
                weights += [(self.off_r(l, d) + g * H * R, (H, R)) for g in range(G)]
                if P:
                    weights.append((self.off_proj(l, d), (P, H)))
                biases += [(self.off_bw(l, d) + g * H, (H,)) for g in range(G)]
                biases += [(self.off_br(l, d) + g * H, (H,)) for g in range(G)]
        return weights, biases

    # -- states -----------------------------------------------------------------------------

    def state_offset(self, l: int, N: int, width: int) -> int:
        """Offset of layer ``l``'s ``[D][N][width]`` slice of an ``[L·D, N, width]`` state."""
        return l * self.D * N * width

    # -- reserve space ----------------------------------------------------------------------

    def reserve_widths(self, l: int, dropout_applied: bool = False) -> Reserve[int]:
        """Per direction widths of layer ``l``'s reserve parts (``None``: absent): ``sav``, ``y``
        and (LSTM) ``cs``, (projection) ``hs``, (layers after the first, with dropout) ``xd``."""
        return Reserve(sav=self.GH, y=self.R, cs=self.H if self.mode == "lstm" else None,
                       hs=self.H if self.P else None,
                       xd=self.R if dropout_applied and l else None)

    def reserve_parts(self, T: int, N: int, dropout_applied: bool = False):
        """Per layer a dict ``name -> (offset, size)`` of its reserve parts
        (:meth:`reserve_widths`, in :data:`RESERVE_PARTS` order) inside ``reserve_space``;
        offsets are multiples of :data:`RESERVE_ALIGN`."""
        rows = T * N * self.D
        parts, pos = [], 0
        for l in range(self.L):
            widths = self.reserve_widths(l, dropout_applied)
            names = [(name, getattr(widths, name)) for name in RESERVE_PARTS]
            layer = {}
            for name, width in names:
                if width is None:
                    continue
                pos = -(-pos // RESERVE_ALIGN) * RESERVE_ALIGN
                layer[name] = (pos, rows * width)
                pos += rows * width
            parts.append(layer)
        return parts

    def reserve_size(self, T: int, N: int, dropout_applied: bool = False) -> int:
        """Length of ``reserve_space`` of a training forward over ``T`` steps of ``N`` rows
        (``dropout_applied``: dropout p > 0 between layers): the end of its last part."""
        last = self.reserve_parts(T, N, dropout_applied)[-1]
        return max(off + size for off, size in last.values())


def make_layout(num_layers, num_units, input_size, *, rnn_mode="lstm",
                input_mode="linear_input", direction="unidirectional", num_proj=0):
    """Validate a configuration (errors name the argument) and return its :class:`CudnnLayout`.

    ``auto_select`` means skip_input when ``input_size == num_units``; skip_input needs that
    equality. ``num_proj`` is LSTM-only and must satisfy ``0 ≤ num_proj < num_units`` (PyTorch's
    rule for ``proj_size``).
    """
    mode = check_choice("rnn_mode", rnn_mode, RNN_MODES)
    imode = check_choice("input_mode", input_mode, INPUT_MODES)
    check_choice("direction", direction, DIRECTIONS)
    L = check_int("num_layers", num_layers, 1)
    H = check_int("num_units", num_units, 1)
    I = check_int("input_size", input_size, 0)
    P = check_int("num_proj", 0 if num_proj is None else num_proj, 0)
    if P and mode != "lstm":
        raise ValueError(f"num_proj: got {P}, but a projection exists only for rnn_mode='lstm' "
                         f"(rnn_mode={mode!r}); pass num_proj=0")
    if P >= H and P:
        raise ValueError(f"num_proj: got {P}, expected a value in [0, num_units) = [0, {H})")
    if imode == "skip_input" and I != H:
        raise ValueError(f"input_mode: 'skip_input' needs input_size == num_units, got "
                         f"input_size={I} and num_units={H}")
    skip = imode == "skip_input" or (imode == "auto_select" and I == H)
    return CudnnLayout(mode, L, H, I, 2 if direction == "bidirectional" else 1, skip, P)


def swap01_strides(a: int, b: int, c: int):
    """``copy3`` strides that copy ``src [a][b][c]`` into ``dst [b][a][c]`` over the shape
    ``(a, b, c)``: returns ``(dst_strides, src_strides)``."""
    return (c, a * c, 1), (b * c, c, 1)


def host_signature(layout: CudnnLayout, itemsize: int, dropout_applied: bool, dropout: float,
                   seed: int, seed2: int) -> np.ndarray:
    """The int8 ``host_reserved`` of a training forward (module docstring)."""
    head = [_FORMAT_VERSION, RNN_MODES.index(layout.mode), int(layout.skip), layout.D,
            int(bool(layout.P)), int(itemsize), int(dropout_applied), 0]
    digest = bytes(8)
    if dropout_applied:
        key = f"{float(dropout)!r}/{int(seed) & 0xFFFFFFFF}/{int(seed2) & 0xFFFFFFFF}"
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return np.concatenate([np.array(head, np.int8), np.frombuffer(digest, np.int8)])
