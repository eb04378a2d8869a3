"""One layer's plan, computed once (oneDNN's ``rnn_conf_t``): its shapes, the launch choices
(units and batch rows per work-item, whole-sequence or per-step kernels, backward chunk steps)
and the size of every buffer the engine allocates for it.

:class:`pyrnn_cl.engine.Recurrence` makes its launches and allocations from a plan
(:meth:`LayerPlan.for_device`), and :func:`pyrnn_cl.bench.memory_estimate` reports its byte
counts from plans: one model of the buffers. Nothing here touches a device.

Buffer names (elements of ``dtype``; ``K`` = ``P`` or ``H``, ``GH`` = ``G*H``, ``rows`` the
steps of one backward chunk, at most ``T``; the packs ``rpk``, ``wpk_x``, ``wpk_proj``, ``rt`` and
``wt`` hold 16-bit elements instead where the plan says so, :attr:`LayerPlan.pack16`):

forward
    ``sav`` ``[T][N][D*GH]`` (the saved gates; allocated when the forward projects ``x``
    itself), ``y`` ``[T][N][D*K]``, ``cs`` ``[T][N][D*H]`` (LSTM), ``hs`` ``[T][N][D*H]``
    (projection; a two-phase cell instead has ``hs_step`` ``[D*N*H]``), the packs ``rpk`` of
    ``R`` ``[D*G*HP*K]``, ``wpk_x`` of ``W`` ``[D*G*HP*I]`` (input projection inside the
    whole-sequence kernel) and ``wpk_proj`` of ``W_proj`` ``[D*P*H]``; ``HP`` is ``H`` padded
    to whole vectors of units (:attr:`LayerPlan.HP`).
backward
    ``dgx`` ``[rows][N][D*GH]`` and (``CellSpec.separate_dgh``) ``dgh``, ``dr``
    ``[rows][N][D*P]``, the ring ``gring`` ``[2][N][D*GH]`` (more than one chunk), the carries
    ``carry_h``/``carry_c`` ``[2][N][D*H]``, the packs ``rpk`` (cells that recompute hn), ``rt``
    ``[D*GH*KP]`` (``KP``: ``K`` padded like ``HP``) and ``wt`` ``[D*P*H]``, per chunk the
    gathered ``hin``/``hr`` ``[max(steps, 1)][N][D*K]`` (:meth:`LayerPlan.gathers`), the
    results ``dR`` ``[D*GH*K]``,
    ``dwp`` ``[D*P*H]``, ``dpeep`` ``[D*GH]`` when the caller gives no place for them, and
    ``dy`` ``[T][N][D*K]`` (zeros) when no output gradient is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .cells import CellSpec
from .sources import DTYPE_BFLOAT16, DTYPE_FLOAT16, dtype_code
from .tuning import CPU_REC_BWD_ROWS, NEVER

__all__ = ["LayerPlan", "backward_chunk_steps", "PACKS"]

#: the buffers holding packed weights (``cl/pack.cl``): 16-bit where ``LayerPlan.pack16`` is set
PACKS = frozenset({"rpk", "wpk_x", "wpk_proj", "rt", "wt"})


def _vector_width(limit, *sizes):
    """The largest of 16, 8, 4, 2, 1 not above ``limit`` that divides every size."""
    for vw in (16, 8, 4, 2, 1):
        if vw <= limit and all(s % vw == 0 for s in sizes):
            return vw
    return 1


def _unit_width(limit, H, P):
    """Units per work-item of a layer of ``H`` units (``P``: its projection, 0 without): the
    widest vector within ``limit`` (of 16, 8, 4, 2, 1) where that takes fewer vectors than the
    widest that divides ``H``, the last vector then partial (``REC_TAIL`` in ``cl/recurrence.cl``:
    the packs pad the units to whole vectors with zeros); a vector of units costs about the
    same whatever its width up to the device's native one, which ``REC_VW`` is. An LSTM of
    H = 100 on AVX-512 so runs 7 vectors of 16 rather than 25 of 4, H = 50 4 of 16 rather than
    25 of 2 (0.33 of torch before, on a Zen 4 with PoCL). The widest also won where a narrower
    one divides H (paired on that Zen 4, PoCL: LSTM 200 in vectors of 8 1.08x the time of 13
    vectors of 16 forward+backward; level on Intel's runtime). A projection's P and H keep a
    common divisor (its kernels have no partial vectors)."""
    exact = _vector_width(limit, H, *((P,) if P else ()))
    widest = _vector_width(limit)
    if P or -(-H // widest) >= H // exact:
        return exact
    return widest


def backward_chunk_steps(T, N, rows):
    """Steps per backward chunk for ``rows`` (``REC_BWD_ROWS``) rows of gate gradients of
    ``N`` rows each: ``ceil(rows / N)``, at least one, at most ``T``."""
    return max(1, min(T, -(-rows // max(N, 1))))


def _whole_sequence_fits(tuning, compute_units, r_bytes, groups):
    """Whether a layer whose step is one kernel runs the whole sequence in one launch (one
    work-group per ``REC_NB`` batch rows and direction, holding every unit; a barrier between
    steps) instead of one launch per step. Tuning values (0: off):

    * ``REC_SEQ_BYTES``: always when one direction's ``R`` has at most this many bytes; such
      layers are bound by launch and host time.
    * ``REC_SEQ_MAX_BYTES`` and ``REC_SEQ_STREAM_BYTES``: a larger ``R``, up to
      ``REC_SEQ_MAX_BYTES``, when the launch still has a work-group per compute unit and
      ``groups x R`` (what the groups stream from cache every step: each reads all of its
      direction's ``R``, where per-step launches let neighbouring batch groups share a slab)
      is at most ``REC_SEQ_STREAM_BYTES``;
    * ``REC_SEQ_SPLIT_BYTES`` (a core's private cache): except an ``R`` over it whose share per
      compute unit (``R / compute_units``) is within it, which per-step launches keep in the
      units' own caches, a slice each.
    """
    if r_bytes <= 0:
        return False
    if r_bytes <= int(tuning.get("REC_SEQ_BYTES", 0)):
        return True
    split = int(tuning.get("REC_SEQ_SPLIT_BYTES", 0))
    if split and split < r_bytes <= split * max(1, compute_units):
        return False
    return (r_bytes <= int(tuning.get("REC_SEQ_MAX_BYTES", 0)) and groups >= compute_units
            and groups * r_bytes <= int(tuning.get("REC_SEQ_STREAM_BYTES", 0)))


@dataclass(frozen=True)
class LayerPlan:
    """Shapes, launch choices and buffer sizes of one layer of ``D`` directions of ``cell``
    over ``T`` steps of ``N`` rows (module docstring). The launch choices (``vw``, ``nb``,
    ``fwd_nb``, ``wg``, ``fused``, ``seq_loop``) come from a device's tuning
    (:meth:`for_device`); they change no buffer size, so a plan built without a device (the
    defaults) sizes buffers just the same."""

    cell: CellSpec
    T: int
    N: int
    H: int
    D: int = 1
    P: int = 0
    itemsize: int = 4
    bwd_rows: int = CPU_REC_BWD_ROWS  # REC_BWD_ROWS: rows (steps x N) of gate gradients a chunk
    vw: int = 1              # units per work-item
    nb: int = 1              # batch rows per work-item (the backward's kernels)
    fwd_nb: int = 1          # batch rows per work-item of the forward's kernels
    wg: int = 0              # work-items per group along the batch groups (0: the driver's)
    ks: int = 1              # work-items sharing a tile's products (a work-group each when > 1)
    fused: bool = False      # whole-sequence kernels (where a work-group holds a direction)
    #: a whole-sequence work-group is one work-item that runs the vectors of units in turn
    #: (``REC_SEQ_LOOP``; else one work-item per vector of units). A define of every program
    #: of the layer, fused or not, so that both kinds of launch share their programs
    seq_loop: bool = False
    #: the weights' 16-bit storage code (3 float16, 4 bfloat16) when the packs keep it
    #: (``REC_PACK16_BYTES``: the steps stream 16-bit weights and convert as they read), else 0
    pack16: int = 0
    #: ``REC_SEQ_BYTES`` of a whole-sequence layer (else 0): the packs up to which the kernel
    #: also computes ``x[t] W^T + b`` (:meth:`projects_in_kernel`)
    small_bytes: int = 0

    @classmethod
    def for_device(cls, cell: CellSpec, dtype, tuning: Mapping, compute_units: int, *, T: int,
                   N: int, H: int, D: int = 1, P: int = 0, weights=None) -> LayerPlan:
        """The plan of a layer on a device with recurrence ``tuning`` and ``compute_units``,
        computing in ``dtype``; ``weights``: the dtype its weights are stored in (default
        ``dtype``): 16-bit weights are packed as they are when one direction's ``R`` has more
        than ``REC_PACK16_BYTES`` bytes in float32."""
        dtype = np.dtype(dtype)
        T, N, H, D, P = int(T), int(N), int(H), int(D), int(P)
        K = P or H
        code = dtype_code(weights) if weights is not None else 0
        r32 = cell.G * H * K * 4
        sixteen = code in (DTYPE_FLOAT16, DTYPE_BFLOAT16)
        pack16 = code if sixteen and r32 > int(tuning.get("REC_PACK16_BYTES", NEVER)) else 0
        pack_itemsize = 2 if pack16 else dtype.itemsize
        limit = int(tuning["REC_VW"] if dtype == np.float32 else tuning["REC_VW_F64"])
        # batch rows per work-item: REC_NB, or the power of two covering N when N is smaller
        nb = min(max(1, int(tuning["REC_NB"])), 1 << max(0, N - 1).bit_length())
        # units per work-item (_unit_width): within REC_VW, and keeping the tile's
        # accumulators (units x gates x rows) within REC_TILE_MAX (0: no limit); under a
        # limit, a tile of fewer rows than REC_NB (a smaller batch) takes one unit: such a
        # step streams R and wants every lane it can have (H200, GRU 2816, N = 1: two units
        # 8-20 % slower)
        tile_max = int(tuning.get("REC_TILE_MAX", 0))
        if tile_max and nb < int(tuning["REC_NB"]):
            limit = 1
        while tile_max and limit > 1 and limit * cell.G * nb > tile_max:
            limit //= 2
        vw = _unit_width(limit, H, P)
        r_bytes = cell.G * H * K * pack_itemsize

        def whole_sequence(rows):
            return (not P and not cell.two_phase
                    and _whole_sequence_fits(tuning, compute_units, r_bytes, D * -(-N // rows)))

        fused = whole_sequence(nb)
        # CPUs (REC_ACC_MAX, one work-item per tile): more rows per tile for cells with fewer
        # gates, while the tile's gates x rows vectors fit the accumulator budget and N has
        # the rows; not where that would turn whole-sequence kernels off, or leave a core
        # without a whole-sequence work-group. Wider tiles may turn them on: half the groups
        # stream R each step (GRU 512/64 on a Zen 4, R 3 MiB: 8-row tiles within
        # REC_SEQ_STREAM_BYTES where 4-row ones were not, 3 % faster than 8-row tiles per step)
        acc_max = int(tuning.get("REC_ACC_MAX", 0)) if int(tuning.get("REC_KS", 1)) <= 1 else 0
        wide = nb
        while acc_max and wide < 16 and 2 * wide * cell.G <= acc_max and 2 * wide <= N:
            wide *= 2
        wide_fused = wide > nb and whole_sequence(wide)
        if wide > nb and (wide_fused or not fused) and (
                not wide_fused or D * -(-N // wide) >= compute_units):
            nb, fused = wide, wide_fused
        # the forward's tile (gates x rows accumulators beside a weight vector per gate) has
        # fewer rows where REC_NB's do not fit REC_ACC_MAX (an LSTM's 4 x 4 on AVX2's 16
        # registers: spilled); the backward's keeps them, each of its weight vectors serving
        # every row (two rows there measured slower), as does a change of launch kind
        fwd_nb = nb
        while acc_max and fwd_nb > 1 and fwd_nb * cell.G > acc_max:
            fwd_nb //= 2
        if whole_sequence(fwd_nb) != fused:
            fwd_nb = nb
        # products split over REC_KS lanes (a work-group per tile) are for per-step kernels: a
        # whole-sequence work-group holds every unit of a direction, one work-item per tile
        ks = 1 if fused else max(1, int(tuning.get("REC_KS", 1)))
        return cls(cell, T, N, H, D, P, dtype.itemsize,
                   bwd_rows=max(1, int(tuning["REC_BWD_ROWS"])), vw=vw, nb=nb, fwd_nb=fwd_nb,
                   wg=max(0, int(tuning["REC_WG"])), ks=ks, fused=fused,
                   seq_loop=bool(int(tuning.get("REC_SEQ_LOOP", 0))), pack16=pack16,
                   small_bytes=int(tuning.get("REC_SEQ_BYTES", 0)) if fused else 0)

    # -- shapes -----------------------------------------------------------------------------

    @property
    def K(self) -> int:
        """Width of the recurrent state: ``P`` or ``H``."""
        return self.P or self.H

    @property
    def G(self) -> int:
        return self.cell.G

    @property
    def unit_vectors(self) -> int:
        """Vectors of ``vw`` units a direction's ``H`` units take (the last one partial when
        :attr:`tail`)."""
        return -(-self.H // self.vw)

    @property
    def tail(self) -> bool:
        """Whether ``H`` is no multiple of ``vw``: the kernels' last vector of units is partial
        and the packs hold zeros past ``H`` (``REC_TAIL``)."""
        return self.H % self.vw != 0

    @property
    def HP(self) -> int:
        """``H`` padded to whole vectors of ``vw`` units: the rows per gate of the packs
        ``rpk`` and ``wpk_x``, and the columns of ``rt`` (``K`` = ``H`` wherever there is
        padding)."""
        return self.unit_vectors * self.vw

    @property
    def GH(self) -> int:
        return self.cell.G * self.H

    def chunk_steps(self, full: bool = False) -> int:
        """Steps per backward chunk: enough for ``bwd_rows`` rows (T*N) of gate gradients, at
        least one; every step when ``full``."""
        if full:
            return max(self.T, 1)
        return backward_chunk_steps(self.T, self.N, self.bwd_rows)

    def gathers(self, *, y_given: bool, masked: bool = False, lengths: bool = False) -> bool:
        """Whether the recurrent weight gradient reads gathered inputs ``hin`` (and ``hr``)
        rather than ``y`` shifted by a step: with a mask, lengths, a two-phase cell or no
        ``y``."""
        return masked or lengths or self.cell.two_phase or not y_given

    def projects_in_kernel(self, I: int) -> bool:
        """Whether the whole-sequence forward computes ``x[t] W^T + b`` itself for an input
        width ``I`` (no GEMM launch, no gx round trip): for small layers only, whose ``R`` and
        ``W`` packs each fit ``REC_SEQ_BYTES`` (launch-bound: tiny LSTM 128/64/8/100 forward
        25-30 % faster). A larger layer running whole-sequence kernels does better with the
        GEMM first: every work-group would read ``W`` beside ``R`` each step, at the step
        kernel's speed rather than the GEMM's (LSTM 256/256/16/150 forward 15 % and
        256/128/32/50 28 % faster with the GEMM, 2-vCPU Xeon, PoCL)."""
        return (self.fused and I > 0
                and self.G * self.H * max(self.K, I) * self.pack_itemsize() <= self.small_bytes)

    # -- buffers (bytes, by name) -----------------------------------------------------------

    def pack_itemsize(self) -> int:
        """Bytes per element of the packed weights (:data:`PACKS`)."""
        return 2 if self.pack16 else self.itemsize

    def _bytes(self, elements: dict[str, int]) -> dict[str, int]:
        return {name: n * (self.pack_itemsize() if name in PACKS else self.itemsize)
                for name, n in elements.items()}

    def forward_buffers(self, *, x_width: int | None = None, in_kernel: bool = False,
                        given: frozenset[str] = frozenset()) -> dict[str, int]:
        """Bytes of every buffer a forward allocates: ``x_width`` the input width when the
        forward projects ``x`` itself (``in_kernel``: inside the whole-sequence kernel),
        ``given`` the names of the results the caller provides (``y``, ``cs``, ``hs``)."""
        T, N, H, D, P, K, GH = self.T, self.N, self.H, self.D, self.P, self.K, self.GH
        out: dict[str, int] = {}
        if x_width is not None:
            out["sav"] = T * N * D * GH
        if "y" not in given:
            out["y"] = T * N * D * K
        if self.cell.has_c and "cs" not in given:
            out["cs"] = T * N * D * H
        if P:
            if "hs" not in given:
                out["hs"] = T * N * D * H
        elif self.cell.two_phase:
            out["hs_step"] = D * N * H
        if T and N:
            out["rpk"] = D * self.G * self.HP * K
            if in_kernel:
                out["wpk_x"] = D * self.G * self.HP * int(x_width or 0)
            if P:
                out["wpk_proj"] = D * P * H
        return self._bytes(out)

    def backward_buffers(self, *, steps: int, gathers: bool = False, dy_given: bool = True,
                         need_dR: bool = True, dR_given: bool = False, dwp_given: bool = False,
                         peephole: bool = False) -> dict[str, int]:
        """Bytes of every buffer a backward in chunks of ``steps`` (:meth:`chunk_steps`)
        allocates (``hin``/``hr``: those of the largest chunk, allocated once per chunk):
        ``gathers`` (:meth:`gathers`), whether the caller gives ``dy`` and the places of
        ``dR``/``dwp``, whether ``dR`` is wanted, ``peephole`` a peephole gradient."""
        T, N, H, D, P, K, GH = self.T, self.N, self.H, self.D, self.P, self.K, self.GH
        rows = min(steps, T)
        out: dict[str, int] = {"dgx": rows * N * D * GH}
        if self.cell.separate_dgh:
            out["dgh"] = rows * N * D * GH
        if P:
            out["dr"] = rows * N * D * P
        if steps < T:
            out["gring"] = 2 * N * D * GH
        if need_dR and not dR_given:
            out["dR"] = D * GH * K
        if P and not dwp_given:
            out["dwp"] = D * P * H
        if peephole:
            out["dpeep"] = D * GH
        if not dy_given and T and N:
            out["dy"] = T * N * D * K
        out["carry_h"] = 2 * N * D * H
        if self.cell.has_c:
            out["carry_c"] = 2 * N * D * H
        if self.cell.needs_hn and T and N:
            out["rpk"] = D * self.G * self.HP * K
        if N:
            out["rt"] = D * GH * (self.HP if not P else K)
            if P:
                out["wt"] = D * P * H
        if gathers and need_dR:
            out["hin"] = max(rows, 1) * N * D * K
            if self.cell.two_phase:
                out["hr"] = max(rows, 1) * N * D * K
        return self._bytes(out)

    def checked_buffers(self, backward: bool, steps: int = 0) -> list[int]:
        """Bytes of the buffers the engine's memory check counts (``_arrays.check_memory``):
        the sequences of a forward (saved gates, y, c, h before the projection) and R's pack;
        for a backward in chunks of ``steps`` also a chunk's gate gradients (both kinds), its
        ``dr`` and gathered inputs, the carries and the ring."""
        fwd = self.forward_buffers(x_width=0)
        out = [fwd[n] for n in ("sav", "y", "cs", "hs", "rpk") if n in fwd]
        if backward:
            bwd = self.backward_buffers(steps=steps, gathers=True)
            out += [bwd[n] for n in ("dgx", "dgh", "dr", "gring", "carry_h", "carry_c", "hin")
                    if n in bwd]
        return out
