r"""Tuning parameters of the kernel families: derived from the device, tuned on the device, stored.

Every kernel family (``gemm``, ``gemm_f64``, ``reduce``, ``recurrence``) reads its launch and
tiling parameters from ``device.tuning(family)``, which resolves them in this order, each step
updating the previous one:

1. **Derived defaults** (:func:`derive`): computed from the device's own OpenCL queries (native
   vector widths, compute units, work-group and work-item limits, lock-step width, cache size,
   registers where reported) and its profile's reasoned quirks
   (``VendorProfile.prefers_explicit_vectors``, ``specialises_per_local_size``,
   ``simd_width``). No CPU model or ISA is assumed: an AVX2 CPU reports 8 floats per native
   vector, an AVX-512 CPU 16, NEON 4, and the register tiles follow.
2. **The profile's table** (``VendorProfile.TUNING``): measured starting points of one
   implementation that its queries cannot express (PoCL's whole-sequence thresholds).
3. **A tuned entry** (unless ``PYRNN_CL_TUNING=0``): the result of ``pyrnn-cl tune`` on this
   device, from the user's database (``<cache dir>/tuning/``), else the read-only database
   shipped in the package (``pyrnn_cl/tuning_db/``). Entries are JSON, one file per device,
   keyed by platform, device and driver version, and holding per family the
   :func:`kernel_version` of the sources that family's parameters shape
   (:data:`FAMILY_SOURCES`): after a driver change the entry no longer applies, after a kernel
   change the families whose sources changed.

:func:`source` names, per family, where the values came from (``pyrnn-cl bench`` records it).

A corrupt, foreign or stale entry gives one :class:`~pyrnn_cl.errors.TuningWarning` and is
ignored; nothing else changes. ``PYRNN_CL_AUTOTUNE=1`` runs a short tune
(:mod:`pyrnn_cl.tuner`) on each device's first use when it has no tuned entry, like
``torch.backends.cudnn.benchmark``.

The parameter space (:data:`SPACE`) is also the validation of entries and the tuner's search
space; a value the kernels cannot take (a vector width OpenCL lacks, a tile that is not a
multiple of its vector) is never produced by :func:`derive` and never accepted from a file.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

from . import _env
from .errors import TuningWarning
from .sources import CL_DIR, expand_includes

__all__ = [
    "FAMILIES", "SPACE", "Param", "derive", "resolve", "source", "kernel_version",
    "FAMILY_SOURCES", "family_files",
    "entry_key", "entry_path", "shipped_path", "load_entry", "save_entry", "make_entry",
    "trial", "is_tuned", "valid_values", "clamp_work_group", "CPU_REC_BWD_ROWS",
    "GEMM_LOCAL_KEYS", "gemm_local_fits", "cpu_like",
]

FORMAT = 1  # version of the entry file format

_log = logging.getLogger(__name__)

VECTOR_WIDTHS = (1, 2, 4, 8, 16)
#: a byte threshold that nothing reaches ("never")
NEVER = 1 << 40

#: ``REC_BWD_ROWS`` derived for CPU-like devices (:func:`derive`): also the rows a layer plan
#: and the bench's memory model assume when no device says otherwise.
CPU_REC_BWD_ROWS = 2048


@dataclass(frozen=True)
class Param:
    """One tunable: its ``#define``/host name, the values the tuner tries (``choices``; the
    tuner also keeps the derived value) and the range a stored value must lie in."""

    name: str
    choices: tuple[int, ...]
    low: int
    high: int
    doc: str
    #: False for host-only values (launch sizes, thresholds): no rebuild when they change
    compiled: bool = True


def _gemm_space() -> tuple[Param, ...]:
    return (
        Param("GEMM_VW", VECTOR_WIDTHS, 1, 16, "outer kernel: vector width along n"),
        Param("GEMM_TN", (8, 16, 32, 64, 128), 1, 256,
              "outer kernel: columns of C per work-item (a multiple of GEMM_VW)"),
        Param("GEMM_TM", (1, 2, 4, 6, 8), 1, 16, "outer kernel: rows of C per work-item"),
        Param("GEMM_DVW", VECTOR_WIDTHS, 1, 16, "dot kernel: vector width along k"),
        Param("GEMM_DTM", (1, 2, 4, 8), 1, 16, "dot kernel: rows of C per work-item"),
        Param("GEMM_DTN", (1, 2, 4, 8), 1, 16, "dot kernel: columns of C per work-item"),
        Param("GEMM_PACK_KC", (4, 8, 16), 1, 16, "pack kernels: k values per work-item"),
        Param("GEMM_FMA", (0, 1), 0, 1, "1: fma(), 0: mad() for multiply-adds"),
        Param("GEMM_LOCAL", (0, 1), 0, 1,
              "1: every product runs the local-memory tiled kernel (GPUs), 0: the kernels above"),
        Param("GEMM_LBM", (32, 64, 128), 1, 256, "tiled kernel: rows of C per work-group"),
        Param("GEMM_LBN", (32, 64, 128), 1, 256, "tiled kernel: columns of C per work-group"),
        Param("GEMM_LBK", (8, 16, 32), 1, 64, "tiled kernel: k values per local-memory chunk"),
        Param("GEMM_LTM", (2, 4, 8), 1, 16,
              "tiled kernel: rows of C per work-item (divides GEMM_LBM)"),
        Param("GEMM_LTN", (2, 4, 8), 1, 16,
              "tiled kernel: columns of C per work-item (divides GEMM_LBN)"),
        Param("GEMM_WG", (1, 4, 8, 16, 32, 64, 128, 256), 1, 4096,
              "work-items per group along dimension 0", compiled=False),
        Param("GEMM_PACK_WG", (1, 4, 8, 16, 64, 128), 1, 4096,
              "work-items per group of the pack kernels", compiled=False),
        Param("GEMM_PACK_MIN", (1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30), 0, 1 << 40,
              "multiply-adds (m n k batch) from which operands are packed (NN, TN, TT)",
              compiled=False),
        Param("GEMM_PACK_MIN_NT", (1 << 18, 1 << 20, 1 << 22, 1 << 24), 0, 1 << 40,
              "the same for NT products (unpacked: the dot kernel)", compiled=False),
        Param("GEMM_PACK_MIN_M", (32, 64, 128, 256, 512), 0, 1 << 30,
              "rows of C from which packing pays", compiled=False),
        Param("GEMM_PACK_EDGE", (0, 1), 0, 1,
              "1: pack Q (from twice GEMM_PACK_MIN_M rows) where a vector of its last column "
              "tile crosses n, which the outer kernel otherwise gathers element by element",
              compiled=False),
    )


#: family -> its tunables (one place: derive, the entry check and the tuner use it)
SPACE: dict[str, tuple[Param, ...]] = {
    "gemm": _gemm_space(),
    "gemm_f64": _gemm_space(),
    "reduce": (
        Param("REDUCE_VW", VECTOR_WIDTHS, 1, 16, "vector width along the columns"),
        Param("REDUCE_NV", (1, 2, 4, 8), 1, 16, "vectors of columns per work-item"),
        Param("REDUCE_WG", (1, 4, 8, 16, 32, 64, 128, 256), 1, 4096,
              "work-items per group", compiled=False),
    ),
    "recurrence": (
        Param("REC_VW", VECTOR_WIDTHS, 1, 16, "float32 units per work-item (a vector)"),
        Param("REC_VW_F64", VECTOR_WIDTHS, 1, 16, "the same for float64"),
        Param("REC_NB", (1, 2, 4, 8), 1, 16, "batch rows per tile"),
        Param("REC_TILE_MAX", (0, 8, 16, 24, 32, 64), 0, 1024,
              "most accumulators (units x gates x batch rows) in one work-item's tile: the "
              "vector width halves until a cell's tile fits (0: no limit)", compiled=False),
        Param("REC_ACC_MAX", (0, 8, 12, 16, 24, 32), 0, 64,
              "most accumulator vectors (gates x batch rows) of a CPU work-item's tile: the "
              "rows per tile double from REC_NB (up to 16) while a cell's tile stays within it, "
              "the batch has the rows and no core loses its work-group; the forward's tile "
              "halves below REC_NB where REC_NB's rows do not fit (0: REC_NB rows)",
              compiled=False),
        Param("REC_KS", (1, 4, 8, 16, 32, 64), 1, 256,
              "work-items sharing a tile's products (a power of two; a work-group each)"),
        Param("REC_WG", (0, 1, 2, 4, 8, 16, 32, 64), 0, 4096,
              "work-items per group along the batch groups (0: the driver chooses)",
              compiled=False),
        Param("REC_SEQ_BYTES", (0, 1 << 16, 1 << 17, 1 << 18, 1 << 19, 1 << 20, 1 << 22,
                                1 << 23), 0, 1 << 31,
              "whole-sequence kernels when one direction's R has at most this many bytes",
              compiled=False),
        Param("REC_SEQ_LOOP", (0, 1), 0, 1,
              "whole-sequence kernels: one work-item per batch-row group and direction that runs "
              "every vector of units in turn (1), or a work-group of a work-item per vector (0)"),
        Param("REC_SEQ_MAX_BYTES", (0, 1 << 20, 1 << 21, 1 << 22, 1 << 23), 0, 1 << 31,
              "... and up to this many with a work-group per compute unit", compiled=False),
        Param("REC_SEQ_STREAM_BYTES", (1 << 23, 1 << 24, 1 << 25, 1 << 26), 0, 1 << 34,
              "... while groups x R stays below this many bytes", compiled=False),
        Param("REC_SEQ_SPLIT_BYTES", (0, 1 << 18, 1 << 19, 1 << 20, 1 << 21, 1 << 22), 0,
              1 << 31,
              "... but not for R over this many bytes whose share per compute unit is within "
              "them (per-step launches then keep each unit's slice of R in its own cache; "
              "0: no such band)", compiled=False),
        Param("REC_BWD_ROWS", (512, 1024, 2048, 4096, 8192), 1, 1 << 24,
              "rows (steps x N) of gate gradients per backward chunk", compiled=False),
        Param("REC_PACK16_BYTES", (0, 1 << 18, 1 << 20, 1 << 22, 1 << 24, NEVER), 0, NEVER,
              "16-bit weights are packed as stored (the steps stream half the bytes and widen "
              "as they read; the programs' PACK_DTYPE) when one direction's R has more than "
              "this many bytes in float32 (NEVER: never), else widened in the pack",
              compiled=False),
    ),
}
FAMILIES = tuple(SPACE)

# {{{ derived defaults


def _pow2_floor(value: int, choices=VECTOR_WIDTHS) -> int:
    """The largest of ``choices`` not above ``value`` (the smallest choice if none)."""
    fitting = [c for c in choices if c <= value]
    return max(fitting) if fitting else min(choices)


def clamp_work_group(info, size: int) -> int:
    """``size`` limited to the device's work-group and dimension-0 work-item limits (>= 1)."""
    limit = max(1, int(info.max_work_group_size or 1))
    if info.max_work_item_sizes:
        limit = min(limit, max(1, int(info.max_work_item_sizes[0])))
    return max(1, min(int(size), limit))


def simd_width(info, profile) -> int:
    """The device's lock-step width: reported (warp, wavefront, largest sub-group size) where
    the vendor extension says, else the profile's ``simd_width``."""
    return max(info.simd_widths) if info.simd_widths else int(profile.simd_width)


def _float_width(info, profile, double: bool) -> int:
    """Elements per explicit vector for a device that vectorises explicit vector types: its
    native width (AVX2 8 floats, AVX-512 16, NEON 4; halved for double when not reported)."""
    native = info.native_vector_width_double if double else info.native_vector_width_float
    if not native:
        native = info.preferred_vector_width_float // (2 if double else 1)
    if not native:
        native = 8 if not double else 4
    return _pow2_floor(max(1, native))


#: the tiled GEMM kernel's tile parameters (gemm.cl, ``pyrnn_gemm_tiled``)
GEMM_LOCAL_KEYS = ("GEMM_LBM", "GEMM_LBN", "GEMM_LBK", "GEMM_LTM", "GEMM_LTN")
#: most work-items a tiled GEMM work-group may have (what no device exceeds; :func:`valid_values`)
_GEMM_LOCAL_MAX_WG = 1024
#: tiled GEMM tiles (``GEMM_LOCAL_KEYS`` values), the preferred first: 128 x 128 blocks of
#: 8 x 8 micro-tiles (256 work-items, 64 accumulators each) is the classic fast SGEMM shape;
#: the smaller ones are for devices with smaller work-groups, local memory or register files
_GEMM_LOCAL_TILES = ((128, 128, 16, 8, 8), (64, 64, 16, 4, 4), (64, 64, 16, 8, 8),
                     (32, 32, 16, 4, 4), (32, 32, 16, 2, 2), (16, 16, 16, 2, 2), (8, 8, 8, 1, 1))


#: the tile CPU-like devices carry with ``GEMM_LOCAL`` = 0 (gemm.cl's defaults; used when a
#: test or a tuning entry turns the tiled kernel on)
_GEMM_CPU_TILE = dict(zip(GEMM_LOCAL_KEYS, (64, 64, 16, 4, 4)))


def gemm_local_work_group(values) -> tuple[int, int]:
    """The tiled GEMM kernel's local size (dimension 0 along n, dimension 1 along m)."""
    return values["GEMM_LBN"] // values["GEMM_LTN"], values["GEMM_LBM"] // values["GEMM_LTM"]


def gemm_local_fits(info, values, itemsize: int) -> bool:
    """Whether the tiled GEMM kernel with ``values`` can run on ``info``: its work-group within
    the device's limits, its two local chunks (``GEMM_LBK`` rows of ``GEMM_LBM`` + 1 and
    ``GEMM_LBN`` + 1 elements of ``itemsize`` bytes, gemm.cl) within the local memory (32 KiB,
    the OpenCL minimum, when not reported)."""
    wg0, wg1 = gemm_local_work_group(values)
    if wg0 * wg1 > max(1, int(info.max_work_group_size or 1)):
        return False
    sizes = info.max_work_item_sizes
    if len(sizes) >= 2 and (wg0 > sizes[0] or wg1 > sizes[1]):
        return False
    local = itemsize * values["GEMM_LBK"] * (values["GEMM_LBM"] + values["GEMM_LBN"] + 2)
    return local <= (int(info.local_mem_size or 0) or 32 << 10)


def _gemm_local(info, itemsize: int) -> dict[str, int]:
    """``GEMM_LOCAL`` = 1 with the first of ``_GEMM_LOCAL_TILES`` that fits ``info``
    (:func:`gemm_local_fits`) with the accumulators and operands (about twice the micro-tile,
    in 32-bit registers) of every work-item of a group within the registers it reports;
    ``GEMM_LOCAL`` = 0 (with :data:`_GEMM_CPU_TILE`) when none fits."""
    for tile in _GEMM_LOCAL_TILES:
        values = dict(zip(GEMM_LOCAL_KEYS, tile))
        wg0, wg1 = gemm_local_work_group(values)
        registers = wg0 * wg1 * 2 * tile[3] * tile[4] * (itemsize // 4)
        if gemm_local_fits(info, values, itemsize) and (
                not info.registers_per_group or registers <= info.registers_per_group):
            return dict(values, GEMM_LOCAL=1)
    return dict(_GEMM_CPU_TILE, GEMM_LOCAL=0)


def vector_registers(info) -> int:
    """Vector registers a CPU-like device's work-item can keep its register tile in, from its
    native float width: 32 where a native vector holds 16 floats (AVX-512, SVE-512: 32
    registers), else 16 (AVX and AVX2 have 16; NEON's 32 are counted as 16: a smaller tile
    never spills, a larger one does)."""
    return 32 if _float_width(info, None, double=False) >= 16 else 16


def cpu_gemm_tiles(registers: int) -> tuple[int, int, int]:
    """``(rows, vectors, dot)``: the register tiles of the outer-product and dot kernels for
    ``registers`` vector registers: ``GEMM_TM`` = 6 rows by ``GEMM_TN`` / ``GEMM_VW`` =
    (registers - 4) // 6 vectors (at most 4): the accumulators plus one row of Q's vectors and a
    broadcast of P within the file, the classic 6 x 4-vector tile of AVX-512 (24 accumulators of
    32) and 6 x 2 of AVX2 (12 of 16); the dot kernel's ``GEMM_DTM`` = ``GEMM_DTN`` = the largest
    d with d * d accumulators plus 2d operand vectors within the file (4 on 32 registers, 3 on
    16). Measured on PoCL 3.1 (docs/benchmarks.md, "Register tiles from the register file"):
    AVX2 code, 6 x 2 against the 4 x 4 it replaces (16 accumulators: spilled), 1.35x on the LSTM
    256/16/150 input product and 1.6x on its weight gradient; AVX-512 code, 6 x 4 against 4 x 4
    up to 1.2x on the best of 21 runs."""
    tnv = max(1, min(4, (registers - 4) // 6))
    dot = max(d for d in (1, 2, 3, 4) if d * d + 2 * d <= registers)
    return 6, tnv, dot


def cpu_like(info, profile) -> bool:
    """Whether ``info`` is tuned as a CPU (a CPU device, or a profile that prefers explicit
    vectors): wide vectors per work-item, no local-memory tiles, no split products."""
    return info.type == "cpu" or bool(profile.prefers_explicit_vectors)


def derive(info, profile) -> dict[str, dict[str, int]]:
    """Default tuning of every family for ``info`` (a :class:`DeviceInfo`) and its ``profile``.

    CPU-like devices (``profile.prefers_explicit_vectors`` or a CPU): one native vector per
    register, so ``VW`` = the native width, GEMM register tiles sized to the vector register
    file (:func:`vector_registers`, :func:`cpu_gemm_tiles`: 6 rows x 4 vectors on AVX-512,
    6 x 2 on AVX2; dot tiles 4 x 4 and 3 x 3), recurrence tiles of ``REC_NB`` = 4 batch
    rows x G gates, more rows for cells with fewer gates within ``REC_ACC_MAX`` = 3/4 of the
    register file, fewer in the forward's tile where 4 do not fit (an LSTM on AVX2: 2 rows;
    :meth:`pyrnn_cl.plan.LayerPlan.for_device`). Fixed local sizes where the
    implementation compiles a work-group function per local size
    (``specialises_per_local_size``).

    GPUs: GEMM through the local-memory tiled kernel (``GEMM_LOCAL`` = 1): the largest of
    128 x 128 blocks of 8 x 8 micro-tiles (256 work-items), 64 x 64 of 4 x 4, ... down to 8 x 8
    of 1 x 1 whose work-group fits ``max_work_group_size`` and ``max_work_item_sizes``, whose
    two local chunks fit ``local_mem_size`` (float32 and float64 each), and whose group's
    accumulators and operands fit the reported registers (``GEMM_LOCAL`` = 0 when none does:
    a device reporting work-groups of fewer than 64 work-items); the non-tiled kernels' values
    (used when the tiled kernel is turned off) are work-groups of a few lock-step widths
    (reported warp/wavefront/sub-group size, else the profile's), 4-wide vector loads,
    register tiles small enough for a group within the reported registers. Whole-sequence
    recurrence kernels off (one work-group would hold a direction's units and run on one
    multiprocessor).

    Every work-group size is within the device's ``max_work_group_size`` and ``max_work_item
    _sizes[0]``; only the tiled GEMM kernel (GPUs) and the split recurrence (``REC_KS`` > 1)
    use local memory.
    """
    if cpu_like(info, profile):
        vw = _float_width(info, profile, double=False)
        vwd = _float_width(info, profile, double=True)
        fixed = bool(profile.specialises_per_local_size)
        # (GEMM_PACK_KC is also the pack kernels' vector width: a wider one than the native
        # width changes the calling convention and the compiler says so on stderr)
        registers = vector_registers(info)
        tm, tnv, dot = cpu_gemm_tiles(registers)
        gemm = {"GEMM_VW": vw, "GEMM_TN": tnv * vw, "GEMM_TM": tm, "GEMM_DVW": vw,
                "GEMM_DTM": dot, "GEMM_DTN": dot,
                "GEMM_PACK_KC": max(4, vw), "GEMM_FMA": 1,
                "GEMM_WG": clamp_work_group(info, 16), "GEMM_PACK_WG": clamp_work_group(info, 8),
                # packing an operand costs a launch and a pass over it, and pays where the
                # strided reads it replaces miss the caches: below 2^28 multiply-adds the NN and
                # TN products ran 3-33 % faster unpacked on PoCL and Intel's runtime alike (the
                # weight gradients of a tiny LSTM, 52M: 501 against 692 us), from 4.2e8 on
                # packed and unpacked were level or packing won (1024 x 256 x 1600 A^T B:
                # 7-22 %). An NT product's unpacked kernel (dot) is 1.2-4x slower than the
                # packed one from 2.6e7 on (m >= 64): its threshold stays low. docs/
                # benchmarks.md, "Packing only large products"
                "GEMM_PACK_MIN": 1 << 28, "GEMM_PACK_MIN_NT": 1 << 22, "GEMM_PACK_MIN_M": 128,
                # a vector of the last column tile that crosses n is gathered element by
                # element each k step unless Q is packed: on PoCL that cost more than the pack
                # (the weight gradients of a layer of H = 100 or 200 units, paired on a Zen 4:
                # TN 400 x 100 x 700 0.93, 400 x 200 x 700 0.74, 512 x 100 x 800 0.70 of the
                # unpacked time; a whole-vector edge, n = 96, 1.21, and is not packed); Intel's
                # CPU runtime gathers it cheaply (its profile turns this off)
                "GEMM_PACK_EDGE": 1, "GEMM_LOCAL": 0, **_GEMM_CPU_TILE}
        gemm64 = dict(gemm, GEMM_VW=vwd, GEMM_TN=tnv * vwd, GEMM_DVW=vwd,
                      GEMM_PACK_KC=max(4, vwd))
        # the last-level cache: what OpenCL reports as the global cache on PoCL, where Intel's
        # runtime reports the level 2 (2 MiB on a Xeon with 300 MiB of L3: whole-sequence
        # kernels then stopped at R = 256 KiB, and bi2-256x32 and db-charlm ran 6-10 %
        # slower forward, paired, than with the Xeon's L3); a CPU device's host says its own
        cache = max(int(info.global_mem_cache_size or 0), info.last_cache_size)
        recurrence = {
            # (a work-item's tile is G x NB vectors, whatever their width: no tile limit)
            "REC_VW": vw, "REC_VW_F64": vwd, "REC_NB": 4, "REC_KS": 1, "REC_TILE_MAX": 0,
            # wider batch tiles for cells with fewer gates, within 3/4 of the register file
            # (the rest holds a row of weight vectors and a broadcast): on AVX-512 a GRU's
            # 8 rows x 3 gates and the vanilla cell's 16 x 1 (24 and 16 of 32 registers) ran
            # GRU 512/16 22 % faster forward and 6 % forward+backward, a ReLU RNN 1760/16 7 %
            # (paired rounds, docs/benchmarks.md); an LSTM's 4 x 4 stays
            "REC_ACC_MAX": registers * 3 // 4,
            # one work-item per group: one local size, one specialisation per kernel
            "REC_WG": 1 if fixed else 0,
            # whole-sequence kernels for R within a core's private cache (256 KiB: the smallest
            # L2 of current server cores; OpenCL reports only the last level), and larger R up
            # to 1/8 of the last-level cache (at most 4 MiB) while every core has a group and
            # what the groups stream per step fits that cache. Each work-group of a
            # whole-sequence launch reads all of R every step, while per-step launches split R
            # over the cores: where the host says how large the level-2 cache a worker reads
            # through is (core_cache_size), an R beyond it whose share per core fits it runs
            # per step (each core keeps its slice in its own cache: on a Xeon with 2 MiB L2 per
            # core, LSTM 512/16 forward, R 4 MiB, ran 26.9 ms whole-sequence and 14.5 ms per
            # step). Beyond that band both kinds stream R from the shared level, and the
            # whole-sequence launch saves the per-step launches and barriers: on a Zen 4 (1 MiB
            # L2, 2 cores) LSTM and GRU 512 layers ran 2-6 % faster whole-sequence, paired
            # (docs/benchmarks.md, "Whole-sequence kernels beyond the per-core slices")
            "REC_SEQ_BYTES": 1 << 18,
            # a whole-sequence work-group runs on one thread of a CPU device either way; as one
            # work-item looping over the units it skips the work-item loops around each step's
            # barrier and is one compiled work-group function whatever H is (paired on PoCL,
            # Zen 4: LSTM 256/256 N = 16 forward 2 % faster, the tiny LSTM and bi2-256x32
            # level; Intel's runtime level; docs/benchmarks.md)
            "REC_SEQ_LOOP": 1,
            "REC_SEQ_MAX_BYTES": min(1 << 22, cache // 8) if cache else 0,
            "REC_SEQ_STREAM_BYTES": cache,
            "REC_SEQ_SPLIT_BYTES": info.core_cache_size or 0,
            "REC_BWD_ROWS": CPU_REC_BWD_ROWS,
            # 16-bit packs where R streams from beyond the cache each step (more than a
            # quarter of the last level reported): there halving its bytes pays for the
            # conversions; an R the cache holds runs faster from a float32 pack (PoCL 3.1 and
            # Intel's runtime on a Zen 4, docs/benchmarks.md)
            "REC_PACK16_BYTES": cache // 4 if cache else NEVER,
        }
        reduce = {"REDUCE_VW": vw, "REDUCE_NV": 4, "REDUCE_WG": clamp_work_group(info, 8)}
    else:
        simd = max(1, simd_width(info, profile))
        wg = clamp_work_group(info, 4 * simd)
        tm, tn = 4, 8
        if info.registers_per_group:
            # accumulators + operands (about twice the tile) of every work-item of a group
            while tm * tn > 4 and wg * 2 * tm * tn > info.registers_per_group:
                tn, tm = (tn // 2, tm) if tn >= tm else (tn, tm // 2)
        vw = min(4, tn)
        gemm = {"GEMM_VW": vw, "GEMM_TN": tn, "GEMM_TM": tm, "GEMM_DVW": 4, "GEMM_DTM": 2,
                "GEMM_DTN": 2, "GEMM_PACK_KC": 4, "GEMM_FMA": 1, "GEMM_WG": wg,
                "GEMM_PACK_WG": wg, "GEMM_PACK_MIN": 1 << 40, "GEMM_PACK_MIN_NT": 1 << 40,
                "GEMM_PACK_MIN_M": 1 << 30, "GEMM_PACK_EDGE": 0,
                **_gemm_local(info, 4)}
        gemm64 = dict(gemm, GEMM_VW=min(2, vw), GEMM_DVW=2, **_gemm_local(info, 8))
        # a tile's products split over one lock-step width of work-items (REC_KS), so a step
        # has enough work-items to fill the device; four batch rows sharing each weight read,
        # and one or two units per tile (a lane's G gate weights are contiguous and the
        # lock-step lanes read consecutive ones). Measured on an H100 (NVIDIA's OpenCL, LSTM
        # H = 512..2048, N = 1..64; docs/benchmarks.md): 1 unit x 4 rows made 2-3x faster LSTM
        # steps than 4 units x 2 rows, within 10 % of the best of 48 (VW, NB, KS) settings at
        # every shape but N = 1. Two units where the tile stays within 24 accumulators
        # (REC_TILE_MAX: a GRU's 2 units x 3 gates x 4 rows, the vanilla cell's 2 x 1 x 4; an
        # LSTM's 2 x 4 x 4 = 32 keeps one unit): REC_VW = 2 for every cell made GRU 2816/32
        # forward 473 -> 396 ms, GRU 1024/64 139 -> 114 and ReLU RNN 2560/128 23.7 -> 16.7,
        # and LSTM steps at H >= 1024 1.5-1.9x slower
        recurrence = {"REC_VW": 2, "REC_VW_F64": 1, "REC_NB": 4, "REC_WG": 0, "REC_TILE_MAX": 24,
                      "REC_ACC_MAX": 0,
                      "REC_KS": _pow2_floor(clamp_work_group(info, simd), (1, 2, 4, 8, 16, 32, 64)),
                      "REC_SEQ_BYTES": 0, "REC_SEQ_MAX_BYTES": 0, "REC_SEQ_STREAM_BYTES": 0,
                      "REC_SEQ_SPLIT_BYTES": 0,
                      # (a GPU that a tune gives whole-sequence kernels runs a direction's units
                      # on the lanes of one work-group)
                      "REC_SEQ_LOOP": 0,
                      "REC_BWD_ROWS": 8192,
                      # 16-bit weights streamed as stored: the steps of small batches are bound
                      # by reading R, and a GPU converts for free
                      "REC_PACK16_BYTES": 0}
        reduce = {"REDUCE_VW": 4, "REDUCE_NV": 1, "REDUCE_WG": clamp_work_group(info, 2 * simd)}
    return {"gemm": gemm, "gemm_f64": gemm64, "reduce": reduce, "recurrence": recurrence}


def valid_values(family: str, values: dict) -> dict[str, int]:
    """``values`` checked against :data:`SPACE` (``ValueError`` naming the first bad one):
    known names, integers in range, vector widths OpenCL has, ``GEMM_TN`` a multiple of
    ``GEMM_VW``, the tiled GEMM's blocks multiples of its micro-tiles and its work-group at
    most 1024 work-items."""
    if family not in SPACE:
        raise ValueError(f"unknown kernel family {family!r}; known: {', '.join(FAMILIES)}")
    params = {p.name: p for p in SPACE[family]}
    out = {}
    for name, value in values.items():
        param = params.get(name)
        if param is None:
            raise ValueError(f"{family}: unknown parameter {name!r}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{family}.{name}: expected an integer, got {value!r}")
        if not param.low <= value <= param.high:
            raise ValueError(f"{family}.{name}: {value} is outside [{param.low}, {param.high}]")
        if name == "REC_KS" and value & (value - 1):
            raise ValueError(f"{family}.{name}: {value} is not a power of two")
        if param.choices == VECTOR_WIDTHS and value not in VECTOR_WIDTHS:
            raise ValueError(f"{family}.{name}: {value} is not a vector width {VECTOR_WIDTHS}")
        out[name] = value
    if "GEMM_TN" in out and out["GEMM_TN"] % out.get("GEMM_VW", 1):
        raise ValueError(f"{family}: GEMM_TN {out['GEMM_TN']} is not a multiple of GEMM_VW "
                         f"{out.get('GEMM_VW')}")
    for block, micro in (("GEMM_LBM", "GEMM_LTM"), ("GEMM_LBN", "GEMM_LTN")):
        if block in out and micro in out and out[block] % out[micro]:
            raise ValueError(f"{family}: {block} {out[block]} is not a multiple of {micro} "
                             f"{out[micro]}")
    if all(key in out for key in GEMM_LOCAL_KEYS):
        wg0, wg1 = gemm_local_work_group(out)
        if wg0 * wg1 > _GEMM_LOCAL_MAX_WG:
            raise ValueError(f"{family}: the tiled GEMM work-group {wg0} x {wg1} has more than "
                             f"{_GEMM_LOCAL_MAX_WG} work-items")
    return out

# }}}

# {{{ the database


#: the kernel sources that read each family's compiled parameters (their ``#include``s are
#: followed; a directory stands for its files): a change to them makes that family's tuned
#: values stale, and no other family's. ``tests/test_tuning.py`` checks that every source naming
#: a family's parameter is covered.
FAMILY_SOURCES: dict[str, tuple[str, ...]] = {
    "gemm": ("gemm.cl",),
    "gemm_f64": ("gemm.cl",),
    "reduce": ("reduce.cl",),
    "recurrence": ("recurrence.cl", "pack.cl", "util.cl", "cells"),
}

def family_files(family: str) -> list[Path]:
    """The source files of ``family`` (:data:`FAMILY_SOURCES`) and every file they include
    (:func:`pyrnn_cl.sources.expand_includes`, the loader the programs are built with), sorted."""
    root = CL_DIR
    names: list[str] = []
    for name in FAMILY_SOURCES[family]:
        path = root / name
        names += ([p.relative_to(root).as_posix() for p in sorted(path.glob("*.cl"))]
                  if path.is_dir() else [name])
    return sorted({root / used for name in names for used in expand_includes(name)[1]})


@functools.cache
def kernel_version(family: str | None = None) -> str:
    """A hash of the kernel sources (``pyrnn_cl/cl``): of every file, or of ``family``'s
    (:func:`family_files`). Tuned values apply to the sources they were tuned on: an entry
    stores the version of each family it holds."""
    root = CL_DIR
    if family is None:
        files = sorted(p.resolve() for p in root.rglob("*") if p.suffix in (".cl", ".h"))
    else:
        files = family_files(family)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def entry_key(info) -> dict:
    """What identifies a device's entry: platform, device and driver, and the compute units
    and native float vector width it reports. The last two tell machines apart that share a
    name: Intel's CPU runtime names the device by the CPU's brand ("AMD EPYC") on an AVX2 and
    an AVX-512 CPU alike (native width 8 or 16), and on 2 or 64 cores."""
    return {"platform": info.platform_name, "platform_version": info.platform_version,
            "device": info.name, "driver_version": info.driver_version,
            "compute_units": int(info.compute_units),
            "native_vector_width_float": int(info.native_vector_width_float)}


def _file_name(info) -> str:
    key = entry_key(info)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    slug = re.sub(r"[^a-z0-9]+", "-", f"{info.platform_name} {info.name}".lower()).strip("-")
    return f"{slug[:60]}-{digest}.json"


def user_dir() -> Path:
    """The user's tuning database: ``<PYRNN_CL_CACHE_DIR or the cache dir>/tuning``."""
    return _env.cache_dir() / "tuning"


def shipped_dir() -> Path:
    """The read-only database shipped in the package."""
    return Path(__file__).parent / "tuning_db"


def entry_path(info) -> Path:
    """Where ``pyrnn-cl tune`` writes ``info``'s entry."""
    return user_dir() / _file_name(info)


def shipped_path(info) -> Path:
    """Where the package's own entry for ``info`` would be."""
    return shipped_dir() / _file_name(info)


_WARNED: set = set()
_LOCK = threading.RLock()
_GENERATION = [0]   # bumped by save_entry: resolved values are recomputed
_ENTRIES: dict = {}  # (path, mtime_ns, size) -> entry or None


def _warn_once(path: Path, why: str) -> None:
    with _LOCK:
        if str(path) in _WARNED:
            return
        _WARNED.add(str(path))
    warnings.warn(f"pyrnn_cl: ignoring tuning entry {path}: {why}; using the derived defaults "
                  "(re-run `pyrnn-cl tune` to replace it)", TuningWarning, stacklevel=4)


class _Stale(ValueError):
    """An entry tuned for other kernel sources."""


def _stale_families(data, families) -> list[str]:
    """The families of an entry tuned for other kernel sources than these. An entry stores
    each family's version (``kernel_versions``); one written before that, only the version of
    all sources, which then decides for every family."""
    versions = data.get("kernel_versions")
    if versions is None:
        return [] if data.get("kernel_version") == kernel_version() else list(families)
    if not isinstance(versions, dict):
        raise ValueError("'kernel_versions' is not an object")
    return [f for f in families if versions.get(f) != kernel_version(f)]


def _check_entry(data, info, path) -> tuple[dict, str]:
    """``(families, stale)`` of a parsed entry: its checked families that apply to these
    kernels, and why others do not (empty if all apply); ``ValueError`` saying why the entry
    does not apply at all (``_Stale`` when every family was tuned for other kernels)."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("format") != FORMAT:
        raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
    if data.get("device") != entry_key(info):
        raise ValueError(f"it belongs to another device or driver ({data.get('device')!r})")
    families = data.get("families")
    if not isinstance(families, dict):
        raise ValueError("no 'families' object")
    checked = {family: valid_values(family, values if isinstance(values, dict) else {"?": values})
               for family, values in families.items()}
    stale = _stale_families(data, checked)
    why = ""
    if stale:
        stored = data.get("kernel_versions") or {f: data.get("kernel_version") for f in stale}
        why = "; ".join(f"{f} tuned for other kernels (version {stored.get(f)!r}, these are "
                        f"{kernel_version(f)!r})" for f in stale)
        if len(stale) == len(checked):
            raise _Stale(why)
    return {f: v for f, v in checked.items() if f not in stale}, why


def load_entry(path: Path, info, warn_stale: bool = True) -> dict | None:
    """The checked families of the entry at ``path`` for ``info`` that apply to these kernels;
    ``None`` when there is no file, and (after one warning) when it is unreadable, corrupt,
    foreign or stale. Families tuned for other kernel sources are left out (one warning; the
    others still apply). With ``warn_stale=False`` (the shipped database) staleness is logged
    at DEBUG level only: the user did nothing wrong and cannot fix it."""
    try:
        stat = path.stat()
    except OSError:
        return None
    cache_key = (str(path), stat.st_mtime_ns, stat.st_size, info)
    with _LOCK:
        if cache_key in _ENTRIES:
            return _ENTRIES[cache_key]
    stale = ""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        families, stale = _check_entry(data, info, path)
    except _Stale as exc:
        families, stale = None, str(exc)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        _warn_once(path, str(exc) or type(exc).__name__)
        families = None
    if stale:
        if warn_stale:
            _warn_once(path, stale)
        else:
            _log.debug("shipped tuning entry %s: skipped %s", path, stale)
    with _LOCK:
        _ENTRIES[cache_key] = families
    return families


def read_raw(path: Path) -> dict | None:
    """An entry file's JSON as stored (``None`` if missing or unreadable), for merging."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def make_entry(info, families: dict, meta: dict | None = None) -> dict:
    """A new entry for ``info`` holding ``families`` (``{family: {NAME: value}}``)."""
    from ._version import __version__

    return {"format": FORMAT, "kernel_version": kernel_version(), "pyrnn_cl": __version__,
            "kernel_versions": {f: kernel_version(f) for f in families},
            "device": entry_key(info),
            "families": {f: valid_values(f, dict(v)) for f, v in families.items()},
            "meta": dict(meta or {})}


def save_entry(info, families: dict, meta: dict | None = None, path: Path | None = None) -> Path:
    """Merge ``families`` into ``info``'s entry in the user database (written atomically):
    families tuned now replace the stored ones, the others are kept when the stored entry is
    valid for this device and kernel version. Returns the path."""
    path = Path(path) if path is not None else entry_path(info)
    merged_families: dict = {}
    merged_meta: dict = {}
    old = read_raw(path)
    if old is not None:
        try:
            merged_families = _check_entry(old, info, path)[0]
            merged_meta = dict(old.get("meta") or {})
        except ValueError:
            merged_families, merged_meta = {}, {}
    merged_families.update({f: dict(v) for f, v in families.items()})
    for family, value in (meta or {}).items():
        merged_meta[family] = value
    entry = make_entry(info, merged_families, merged_meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    with _LOCK:
        _GENERATION[0] += 1
        _WARNED.discard(str(path))
    return path

# }}}

# {{{ resolution


def _tuned(info) -> list[tuple[str, dict]]:
    """``[(label, families)]`` of the tuned entries that apply to ``info``, user first."""
    found = []
    for label, path in (("tuned", entry_path(info)), ("shipped", shipped_path(info))):
        families = load_entry(path, info, warn_stale=label == "tuned")
        if families:
            found.append((f"{label} ({path})", families))
    return found


def is_tuned(info) -> str:
    """``"user"``, ``"shipped"`` or ``""``: whether a tuned entry applies to ``info``."""
    for label, _ in _tuned(info):
        return label.split()[0].replace("tuned", "user")
    return ""


_RESOLVED: dict = {}


def resolve(info, profile, family: str) -> tuple[dict[str, int], str]:
    """``(values, source)`` of ``family`` for ``info``: derived defaults, updated by the
    profile's table, updated by a tuned entry unless ``PYRNN_CL_TUNING=0``. ``source`` is
    ``"derived"``, ``"derived+profile"``, or ``"tuned (<path>)"`` / ``"shipped (<path>)"``."""
    use_tuned = _env.use_tuned()
    # (the cache directory, not user_dir(): the same Path object while the variables stay)
    key = (info, profile.name, family, use_tuned, _GENERATION[0], _env.cache_dir())
    with _LOCK:
        hit = _RESOLVED.get(key)
    if hit is not None:
        return dict(hit[0]), hit[1]
    values = dict(derive(info, profile).get(family, {}))
    origin = "derived"
    table = profile.table_tuning(info, family)
    if table:
        values.update(table)
        origin = "derived+profile"
    if use_tuned:
        for label, families in _tuned(info):
            if family in families:
                values.update(families[family])
                origin = label
                break
    with _LOCK:
        if len(_RESOLVED) > 256:
            _RESOLVED.clear()
        _RESOLVED[key] = (dict(values), origin)
    return values, origin


def source(device, family: str) -> str:
    """Where ``device``'s values of ``family`` come from (see :func:`resolve`)."""
    trials = getattr(device, "_tuning_trial", None)
    if trials and family in trials:
        return "trial"
    return resolve(device.info, device.profile, family)[1]


@contextlib.contextmanager
def trial(device, family: str, values: dict):
    """Within the block, ``device.tuning(family)`` returns ``values`` (the tuner's candidates;
    one thread at a time per device)."""
    trials = dict(getattr(device, "_tuning_trial", None) or {})
    previous = dict(trials)
    trials[family] = dict(values)
    device._tuning_trial = trials
    try:
        yield
    finally:
        device._tuning_trial = previous or None


def device_tuning(device, family: str) -> dict[str, int]:
    """``Device.tuning``: a trial's values, else :func:`resolve`'s; runs the first-use tune
    when ``PYRNN_CL_AUTOTUNE`` is set."""
    trials = device._tuning_trial
    if trials and family in trials:
        return dict(trials[family])
    if _env.autotune() and not getattr(device, "_autotuned", False):
        device._autotuned = True
        if _env.use_tuned() and not is_tuned(device.info):
            from . import tuner

            tuner.autotune(device)
    return resolve(device.info, device.profile, family)[0]

# }}}
