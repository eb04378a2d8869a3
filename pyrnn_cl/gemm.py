"""Matrix multiply and row sums on an OpenCL device (kernels in ``cl/gemm.cl`` and
``cl/reduce.cl``).

Everything is row-major; offsets, leading dimensions and batch strides are counted in elements.
Both functions only enqueue work on ``device.queue`` and never wait on the host.

How ``gemm`` runs a product (``gemm.cl``):

* ``GEMM_LOCAL`` = 1 (derived for GPUs): every product, in every transposition, batched, with
  a bias or ``k_block``, is one launch of ``pyrnn_gemm_tiled``: a work-group computes a
  ``GEMM_LBM x GEMM_LBN`` block of C through local-memory chunks of ``GEMM_LBK`` k values,
  each work-item a ``GEMM_LTM x GEMM_LTN`` micro-tile. Nothing is packed: the kernel reads A
  and B through their strides, coalesced either way. Only a tile the device cannot run
  (:func:`pyrnn_cl.tuning.gemm_local_fits`: work-group or local memory too large, e.g. a
  tuning entry from another device) falls back to the kernels below.

Otherwise (CPUs; one register tile of C per work-item, vector types inside the work-item, no
local memory):

* large products (``m*n*k*batch >= GEMM_PACK_MIN``; NT products, whose unpacked kernel is the
  slower dot kernel, from ``GEMM_PACK_MIN_NT``): op(B) is first copied into tile panels
  ``[n/TN][k][TN]`` (``pyrnn_gemm_pack_q``, when ``m >= GEMM_PACK_MIN_M``, half that for NT)
  and op(A) into ``[m/TM][k][TM]`` when it is strided along k (``trans_a``, ``n >=
  GEMM_PACK_MIN_M``, ``pyrnn_gemm_pack_p``), so that
  ``pyrnn_gemm_outer`` reads both sequentially. The panels live in a per-thread, per-queue
  scratch buffer (:func:`release_scratch` frees it). 2-3 launches.
* products with few values on one side, whatever their size: NT over ``k < GEMM_DVW`` packs
  B as above (the dot kernel's sums would be mostly padding); TN and NN with ``n < GEMM_TN <=
  m`` run as ``C^T = op(B)^T op(A)^T``, the vectors along m (NN packing A, below half a tile
  and from ``GEMM_PACK_MIN_M`` rows; from half a tile NN packs B).
* otherwise one launch: NN/TN ``pyrnn_gemm_outer`` on A and B as stored; TT the same on
  ``C^T = B A``; NT ``pyrnn_gemm_dot`` (rows of A and B are both contiguous along k).

Tunables (``device.tuning("gemm")`` for float32, ``device.tuning("gemm_f64")`` for float64;
defaults derived from the device in :func:`pyrnn_cl.tuning.derive`, tuned by ``pyrnn-cl tune``;
the names and ranges are :data:`pyrnn_cl.tuning.SPACE`):

==================  ===========================================================================
``GEMM_TM``         rows of C per work-item (outer kernel)
``GEMM_TN``         columns of C per work-item, a multiple of ``GEMM_VW`` (outer kernel)
``GEMM_VW``         vector width along n (1, 2, 4, 8, 16)
``GEMM_DTM/DTN``    rows/columns of C per work-item in the dot kernel
``GEMM_DVW``        vector width along k in the dot kernel
``GEMM_FMA``        1: ``fma()``, 0: ``mad()`` for the multiply-adds
``GEMM_LOCAL``      1: the tiled kernel runs every product (GPUs), 0: the kernels above
``GEMM_LBM/LBN``    rows/columns of C per work-group of the tiled kernel
``GEMM_LBK``        k values per local-memory chunk of the tiled kernel
``GEMM_LTM/LTN``    rows/columns of C per work-item of the tiled kernel (divide LBM/LBN)
``GEMM_PACK_KC``    k values per work-item of the pack kernels
``GEMM_WG``         work-items per group along dimension 0 (host only)
``GEMM_PACK_WG``    the same for the pack kernels (host only)
``GEMM_PACK_MIN``   multiply-adds from which operands are packed (host only)
``GEMM_PACK_MIN_NT`` the same for NT products (host only)
``GEMM_PACK_MIN_M`` rows of C (columns, for packing A) from which packing pays (host only)
==================  ===========================================================================
"""

from __future__ import annotations

import functools
import threading
import weakref

import numpy as np
import pyopencl as cl

from ._arrays import free_pools, out_of_order, temporary
from .devices import resolve_device
from .errors import ShapeError
from .programs import enqueue, get_program, set_args
from .sources import STORAGE_DTYPES, compute_dtype, dtype_code
from .tuning import GEMM_LOCAL_KEYS, gemm_local_fits, gemm_local_work_group

__all__ = ["gemm", "sum_rows", "release_scratch"]

# The host-only tunables (work-group sizes along dimension 0, packing thresholds in
# multiply-adds m*n*k*batch and rows m); the others are #defines of gemm.cl.
_HOST_KEYS = ("GEMM_WG", "GEMM_PACK_WG", "GEMM_PACK_MIN", "GEMM_PACK_MIN_NT", "GEMM_PACK_MIN_M",
              "GEMM_PACK_EDGE")
_FORCE_PACK = None  # (pack_p, pack_q) overrides the choice (tests and benchmarks)
_SCRATCH_KEEP = 64 << 20  # bytes of packing buffer kept per (thread, queue)
_KERNEL_KEYS = ("GEMM_TM", "GEMM_TN", "GEMM_VW", "GEMM_DTM", "GEMM_DTN", "GEMM_DVW", "GEMM_FMA",
                "GEMM_PACK_KC")
_VECTOR_WIDTHS = (1, 2, 4, 8, 16)
# launch modes of the pack kernels (gemm.cl's GEMM_PACK_CHUNKS, _TILES_FAST and _ROWS)
_PACK_CHUNKS, _PACK_TILES_FAST, _PACK_ROWS = 0, 1, 2

_REDUCE_CHUNK_ROWS = 64  # sum_rows: rows per first-pass chunk at least (two passes from 128 rows)
_REDUCE_CHUNKS = 16      # sum_rows: at most this many first-pass chunks

# Kernel signatures ("i" int, "l" long, "r" real, "B" buffer) for programs.set_args: declared
# types let pyopencl pack plain Python numbers quickly (untyped set_args was measured at ~1 ms
# per call on PoCL, ~10 us typed).
_SIGNATURES = {
    "pyrnn_gemm_outer": "iiiirrBlllllBlllilBlllliBlll",
    "pyrnn_gemm_dot": "iiiirrBlllBlllBlllliBlll",
    "pyrnn_gemm_tiled": "iiirrBllllBllllBlllliBlll",
    "pyrnn_gemm_pack_p": "iiiBllllBll",
    "pyrnn_gemm_pack_q": "iiiBllllBll",
    "pyrnn_sum_rows": "iiirBlllBlll",
}
_ARG_DTYPES: dict[str, np.dtype] = {"i": np.dtype(np.int32), "l": np.dtype(np.int64)}


@functools.cache
def _arg_dtypes(name: str, code: int) -> tuple:
    """The argument types of kernel ``name`` for dtype ``code`` (from :data:`_SIGNATURES`)."""
    real = np.dtype(np.float32 if code == 1 else np.float64)
    return tuple(None if c == "B" else _ARG_DTYPES.get(c, real) for c in _SIGNATURES[name])


def _set_args(prog, name: str, code: int, *args):
    """Kernel ``name`` of ``prog`` with ``args`` (plain Python numbers and buffers) set, typed by
    its signature (:func:`pyrnn_cl.programs.set_args`)."""
    kernel = prog.kernel(name)
    set_args(kernel, *args, dtypes=_arg_dtypes(name, code))
    return kernel



#: ``gemm(k_block=...)`` of the weight-gradient GEMMs: their float32 sums over T*N rows then
#: match or beat PyTorch's CPU float32 (TF's "large" training shape, tests/test_accuracy.py).
WEIGHT_GRADIENT_K_BLOCK = 64


#: device -> {(dtype code, its tuning values): (defines, host)}: what _gemm_config derives from
#: one set of tuning values, kept (a tuned entry, a trial or PYRNN_CL_TUNING gives other values,
#: hence another key). Read-only for the callers.
_CONFIGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CONFIGS_LOCK = threading.Lock()


def _gemm_config(device, code: int) -> tuple[dict, dict]:
    """(defines for gemm.cl, host tunables) for ``device`` and dtype ``code`` (not to be
    modified: the same pair serves every call with these tuning values)."""
    tuning = device.tuning("gemm" if code == 1 else "gemm_f64")
    key = (code, tuple(tuning.items()))
    try:
        table = _CONFIGS.get(device)
    except TypeError:           # a device object that cannot be weakly referenced
        return _derive_config(device, code, tuning)
    if table is not None:
        hit = table.get(key)
        if hit is not None:
            return hit
    config = _derive_config(device, code, tuning)
    with _CONFIGS_LOCK:
        table = _CONFIGS.setdefault(device, {})
        if len(table) >= 64:
            table.clear()
        table[key] = config
    return config


def _derive_config(device, code: int, tuning: dict) -> tuple[dict, dict]:
    """:func:`_gemm_config` from the tuning values ``tuning`` of the dtype's family."""
    defines = {key: int(tuning[key]) for key in _KERNEL_KEYS}
    # Keep the combination valid whatever the table says: vector widths OpenCL has, and GEMM_TN
    # a positive multiple of GEMM_VW.
    for key in ("GEMM_VW", "GEMM_DVW"):
        if defines[key] not in _VECTOR_WIDTHS:
            defines[key] = max(w for w in _VECTOR_WIDTHS if w <= max(1, defines[key]))
    defines["GEMM_TN"] = max(1, defines["GEMM_TN"] // defines["GEMM_VW"]) * defines["GEMM_VW"]
    for key in ("GEMM_TM", "GEMM_DTM", "GEMM_DTN", "GEMM_PACK_KC"):
        defines[key] = max(1, defines[key])
    defines["PYRNN_DTYPE"] = code
    # the tiled kernel is compiled (GEMM_LOCAL=1 with its tile) only where it runs
    tile = {key: int(tuning[key]) for key in GEMM_LOCAL_KEYS}
    if int(tuning["GEMM_LOCAL"]) and gemm_local_fits(device.info, tile, 4 * code):
        defines.update(tile, GEMM_LOCAL=1)
    host = {key: int(tuning[key]) for key in _HOST_KEYS}
    host["GEMM_WG"] = max(1, host["GEMM_WG"])
    host["GEMM_PACK_WG"] = max(1, host["GEMM_PACK_WG"])
    for key in ("GEMM_PACK_KC", "GEMM_TN", "GEMM_VW", "GEMM_DVW"):   # (_choose_packing's)
        host[key] = defines[key]
    return defines, host


def _choose_packing(host, m, n, k, batch, trans_a, trans_b) -> tuple[bool, bool]:
    """(pack op(A), pack op(B)): packing copies an operand into tile panels ([tiles][k][tile])
    so that the outer kernel reads it sequentially; worth it once the multiply is large."""
    if _FORCE_PACK is not None:
        pack_p, pack_q = _FORCE_PACK
    else:
        # packing B costs ~k*n copies and saves work on each of the m rows of C (and vice versa);
        # A is packed only when it is strided along k (trans_a): its rows are sequential otherwise
        # (an NT product's fallback, the dot kernel, is slower: there packing pays from m / 2,
        # and from fewer multiply-adds)
        nt = trans_b and not trans_a
        big = m * n * k * batch >= host["GEMM_PACK_MIN_NT" if nt else "GEMM_PACK_MIN"]
        min_m = host["GEMM_PACK_MIN_M"] // (2 if nt else 1)
        # a Q of few values, which the unpacked kernels would spend most of their work on: an
        # NT product over fewer k than one vector of the dot kernel (its sums are mostly
        # padding; x W^T of a layer with I < GEMM_DVW inputs), or an NN product with fewer
        # columns than one tile (read element by element; dx = dgx W of such a layer). Its
        # pack is n*k copies, and the outer kernel then reads whole zero-padded tiles: 800 x
        # 512 x 1 NT 1050 -> 145 us, 800 x 8 x 512 NN 1600 -> 420 us (PoCL, Zen 4). With
        # GEMM_PACK_EDGE, likewise where n's last column tile has a vector crossing n (n no
        # multiple of GEMM_VW), which the outer kernel gathers element by element every k
        # step, from twice the rows at which a pack pays otherwise (at 128 rows its launch
        # cost what it saved; measurements: tuning.derive)
        few_k = nt and k < host["GEMM_DVW"]
        few_n = not trans_a and not trans_b and n < host["GEMM_TN"]
        edge_n = (host["GEMM_PACK_EDGE"] and not trans_b and n % host["GEMM_VW"] != 0
                  and m >= 2 * min_m)
        pack_q = (big or few_k or few_n or edge_n) and m >= min_m
        pack_p = big and trans_a and n >= host["GEMM_PACK_MIN_M"]
    if pack_p and trans_b:
        pack_q = True  # the outer kernel reads an unpacked Q only along contiguous rows
    return pack_p, pack_q


def _pack(prog, code, queue, host, name, rows, k, tile, x, x_off, x_sr, x_sk, x_batch, batch, dst,
          dst_off, events):
    """Enqueue pack kernel ``name``:
    dst[dst_off + b*panel + (t*k + kk)*tile + r] = X_b[t*tile + r, kk]
    with X[r, kk] = x[x_off + r*x_sr + kk*x_sk] and panel = tiles*tile*k."""
    tiles = -(-rows // tile)
    panel = tiles * tile * k
    nb = batch if x_batch else 1
    kc = host["GEMM_PACK_KC"]
    chunks = -(-k // kc)
    # the launch modes of gemm.cl's pack kernels (their comment): neighbouring work-items read
    # neighbouring memory (tiles fast when x_sr == 1), or each streams kc rows along k
    if x_sr == 1:
        mode, g0, g1 = _PACK_TILES_FAST, tiles, chunks
    elif x_sk == 1 and kc in _VECTOR_WIDTHS[1:] and tile % kc == 0:
        mode, g0, g1 = _PACK_ROWS, tile // kc, tiles
    else:
        mode, g0, g1 = _PACK_CHUNKS, chunks, tiles
    kernel = _set_args(prog, name, code, int(rows), int(k), mode, x, int(x_off), int(x_sr),
                       int(x_sk), int(x_batch), dst, int(dst_off), int(panel))
    wg = max(1, min(host["GEMM_PACK_WG"], prog.work_group_size(name)))
    return enqueue(queue, kernel, (_round_up(g0, wg), g1, nb), (wg, 1, 1), wait_for=events or None)


class _Scratch:
    """Packing buffer, one per (thread, queue) and grown on demand, so concurrent threads never
    share one; requests above ``_SCRATCH_KEEP`` bytes get a buffer of their own (freed by
    OpenCL once the kernels using it are done). ``last_event`` is the last launch that read it
    (waited for by the next pack on an out-of-order queue)."""

    _local = threading.local()

    def __init__(self, buf, nbytes, queue):
        self.buf, self.nbytes, self.queue, self.last_event = buf, nbytes, queue, None

    @classmethod
    def get(cls, device, nbytes):
        queue = device.queue
        nbytes = max(64, int(nbytes))
        if nbytes > _SCRATCH_KEEP:
            return cls(cl.Buffer(device.context, cl.mem_flags.READ_WRITE, nbytes), nbytes, queue)
        table = getattr(cls._local, "table", None)
        if table is None:
            table = cls._local.table = {}
        key = queue.int_ptr
        entry = table.get(key)
        if entry is None or entry.queue is not queue and entry.queue != queue:
            entry = None
        if entry is None or entry.nbytes < nbytes:
            size = max(nbytes, 2 * entry.nbytes if entry is not None else 0)
            size = min(max(size, nbytes), _SCRATCH_KEEP)
            entry = cls(cl.Buffer(device.context, cl.mem_flags.READ_WRITE, size), size, queue)
            if len(table) >= 4 and key not in table:
                table.pop(next(iter(table)))
            table[key] = entry
        return entry


def release_scratch() -> None:
    """Drop this thread's packing buffers (they are re-created on the next large ``gemm``) and
    the memory the engine's pools hold for temporaries (``_arrays.free_pools``)."""
    _Scratch._local.table = {}
    free_pools()


def _buffer(x, name: str, itemsize: int, dtype) -> tuple[cl.MemoryObjectHolder, int]:
    """(Buffer, extra element offset) of a pyopencl Buffer or Array ``x``."""
    if isinstance(x, cl.MemoryObjectHolder) and not hasattr(x, "base_data"):
        return x, 0
    base = getattr(x, "base_data", None)
    if base is None:
        raise TypeError(f"{name} must be a pyopencl Buffer or Array, got {type(x).__name__}")
    if getattr(x, "dtype", dtype) != dtype:
        raise TypeError(f"{name} has dtype {x.dtype}, expected {np.dtype(dtype)}")
    offset = int(getattr(x, "offset", 0))
    if offset % itemsize:
        raise ShapeError(f"{name}: byte offset {offset} is not a multiple of the item size "
                         f"{itemsize}")
    return base, offset // itemsize


def _b_dtype(b, dtype) -> np.dtype:
    """The dtype ``b`` is stored in: ``dtype``, or for a float32 product a 16-bit storage dtype
    (an Array's own; a plain Buffer is taken as ``dtype``)."""
    dtype = np.dtype(dtype)
    stored = np.dtype(getattr(b, "dtype", dtype))
    if stored != dtype and stored in STORAGE_DTYPES and compute_dtype(stored) == dtype \
            and stored.itemsize == 2:
        return stored
    return dtype


def _check_extent(name, buf, itemsize, offset, rows, cols, ld, batch, stride):
    """Raise ShapeError unless a [rows x cols] matrix with leading dimension ``ld`` at ``offset``
    (and ``batch`` of them ``stride`` apart) lies inside ``buf``."""
    if ld < cols:
        raise ShapeError(f"{name}: leading dimension {ld} is smaller than the row length {cols}")
    if offset < 0 or stride < 0:
        raise ShapeError(f"{name}: offset {offset} and batch stride {stride} must be >= 0")
    if rows == 0 or cols == 0 or batch == 0:
        return
    last = offset + (batch - 1) * stride + (rows - 1) * ld + cols
    size = buf.size // itemsize
    if last > size:
        raise ShapeError(
            f"{name}: [{rows} x {cols}] (ld {ld}, offset {offset}, batch {batch}, stride {stride}) "
            f"needs {last} elements, the buffer holds {size}"
        )


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def gemm(device, dtype, m, n, k, a, b, c, *, trans_a=False, trans_b=False, alpha=1.0, beta=0.0,
         a_offset=0, lda=None, b_offset=0, ldb=None, c_offset=0, ldc=None,
         batch=1, stride_a=0, stride_b=0, stride_c=0, bias=None, bias_offset=0, wait_for=None,
         k_block=0):
    """Enqueue ``C = alpha * op(A) @ op(B) + beta * C (+ bias)`` on ``device.queue``; returns None.

    ``op(A)`` is ``[m x k]`` (A stored ``[k x m]`` when ``trans_a``), ``op(B)`` is ``[k x n]``
    (B stored ``[n x k]`` when ``trans_b``), C is ``[m x n]``; all row-major. ``a``, ``b``, ``c``
    are pyopencl Buffers or Arrays (an Array's ``offset`` is added to the element offset).
    Offsets, leading dimensions (default: the stored row length) and batch strides are in
    elements; with ``batch > 1``, ``C_i = alpha op(A_i) op(B_i) + beta C_i`` where
    ``A_i = a + a_offset + i * stride_a`` (likewise B, C). ``beta == 0`` never reads C (NaN-safe).
    ``bias`` (a Buffer or Array, ``n`` elements from ``bias_offset``) is added to every row of
    C in the same launch (``C[i][j] += bias[j]``; input projections ``x W^T + b``), the same
    vector for every batch entry.
    ``m == 0`` or ``n == 0``: nothing; ``k == 0``: ``C = beta * C (+ bias)``.
    ``b`` may be an Array of a 16-bit storage dtype (float16, bfloat16) in a float32 product:
    its values are read as they are stored and converted on load (``GEMM_QS``), never widened in
    a pass of their own (16-bit weights). ``b_offset``/``ldb``/``stride_b`` count its elements.
    ``k_block > 0``: where the outer-product or the tiled kernel runs, the k-sum is two-level,
    in blocks of ``k_block`` steps each added to C (the tiled kernel: to a second register
    tile, each block ending with the ``GEMM_LBK`` chunk it ends in; float32 error grows with
    about ``k_block + k / k_block`` terms instead of ``k``); for weight gradients, whose ``k``
    is every step's rows (:data:`WEIGHT_GRADIENT_K_BLOCK`). Another program; not used when
    ``k <= k_block``.
    """
    device = resolve_device(device)
    code = dtype_code(device.check_dtype(dtype))    # float32 or float64
    dtype = np.dtype(dtype)
    m, n, k, batch = int(m), int(n), int(k), int(batch)
    if min(m, n, k, batch) < 0:
        raise ShapeError(f"sizes must be >= 0, got m={m} n={n} k={k} batch={batch}")
    if m == 0 or n == 0 or batch == 0:
        return None
    itemsize = dtype.itemsize
    c_buf, c_extra = _buffer(c, "c", itemsize, dtype)
    ldc = n if ldc is None else int(ldc)
    c_off, stride_c = int(c_offset) + c_extra, int(stride_c)
    if batch > 1 and stride_c == 0:
        raise ShapeError(f"c: batch stride 0 with batch {batch} makes the results overwrite "
                         "each other")
    _check_extent("c", c_buf, itemsize, c_off, m, n, ldc, batch, stride_c)
    if bias is None:
        bias_buf, bias_off, has_bias = c_buf, 0, 0
    else:
        bias_buf, bias_extra = _buffer(bias, "bias", itemsize, dtype)
        bias_off, has_bias = int(bias_offset) + bias_extra, 1
        _check_extent("bias", bias_buf, itemsize, bias_off, 1, n, n, 1, 0)
    if k == 0:
        # C = beta * C: the kernels' k loops are empty, A and B are never read (may be None)
        a_buf, b_buf, a_off, b_off = c_buf, c_buf, c_off, c_off
        lda, ldb, stride_a, stride_b = 1, 1, 0, 0
    else:
        a_buf, a_extra = _buffer(a, "a", itemsize, dtype)
        b_dtype = _b_dtype(b, dtype)
        b_buf, b_extra = _buffer(b, "b", b_dtype.itemsize, b_dtype)
        a_rows, a_cols = (k, m) if trans_a else (m, k)
        b_rows, b_cols = (n, k) if trans_b else (k, n)
        lda = a_cols if lda is None else int(lda)
        ldb = b_cols if ldb is None else int(ldb)
        a_off, b_off = int(a_offset) + a_extra, int(b_offset) + b_extra
        stride_a, stride_b = int(stride_a), int(stride_b)
        _check_extent("a", a_buf, itemsize, a_off, a_rows, a_cols, lda, batch, stride_a)
        _check_extent("b", b_buf, b_dtype.itemsize, b_off, b_rows, b_cols, ldb, batch,
                      stride_b)

    alpha, beta = float(alpha), float(beta)
    defines, host = _gemm_config(device, code)
    if 0 < int(k_block) < k:
        defines = dict(defines, GEMM_KBLK=int(k_block))
    prog = get_program(device, "gemm.cl", defines)
    # the program whose kernels read Q (B as stored) in B's own dtype
    prog_q = prog
    if k and b_dtype != dtype:
        prog_q = get_program(device, "gemm.cl", dict(defines, GEMM_QS=dtype_code(b_dtype)))
    queue = device.queue
    if defines.get("GEMM_LOCAL"):
        # one launch of the tiled kernel, A and B through their strides (B as stored: prog_q)
        a_si, a_sk = (1, lda) if trans_a else (lda, 1)
        b_sk, b_sj = (1, ldb) if trans_b else (ldb, 1)
        args = (m, n, k, alpha, beta, a_buf, a_off, a_si, a_sk, stride_a, b_buf, b_off, b_sk,
                b_sj, stride_b, c_buf, c_off, ldc, 1, stride_c, has_bias, bias_buf, bias_off, 0, 1)
        kernel = _set_args(prog_q, "pyrnn_gemm_tiled", code, *args)
        wg0, wg1 = gemm_local_work_group(defines)
        blocks = (-(-n // defines["GEMM_LBN"]), -(-m // defines["GEMM_LBM"]))
        enqueue(queue, kernel, (blocks[0] * wg0, blocks[1] * wg1, batch), (wg0, wg1, 1),
                wait_for=wait_for or None)
        return None
    tm, tn = defines["GEMM_TM"], defines["GEMM_TN"]
    # in-order queues (the default) run launches in order; on an out-of-order queue every
    # dependency (user events, packs, the previous user of the packing buffer) becomes an event
    in_order = not out_of_order(queue)
    events = list(wait_for or [])

    # Fewer columns than one tile of C and many rows (the gradients of a layer with few
    # inputs: dW = dgx^T x, TN; dx = dgx W, NN): C^T = op(B)^T op(A)^T, whose columns are C's
    # rows, so that the kernel's vectors run along m instead of gathering n < GEMM_TN columns
    # element by element. The same product with the operands' roles exchanged, D written
    # transposed (below): TN stays TN, reading A as stored ([k x m]); NN becomes TT with A
    # packed as Q (m*k copies), which pays below half a tile and from GEMM_PACK_MIN_M rows,
    # as every pack (from half a tile on packing B does better: _choose_packing). PoCL, Zen 4:
    # 512 x 8 x 800 TN 1430 -> 200 us, 800 x 8 x 512 NN 1600 -> 270 us (B packed: 410 us).
    swap = (k and not trans_b and n < tn <= m and prog_q is prog and _FORCE_PACK is None
            and (trans_a or (2 * n <= tn and m >= host["GEMM_PACK_MIN_M"])))
    if swap:
        m, n, trans_a, trans_b = n, m, not trans_b, not trans_a
        a_buf, a_off, lda, stride_a, b_buf, b_off, ldb, stride_b = (
            b_buf, b_off, ldb, stride_b, a_buf, a_off, lda, stride_a)
        pack_p, pack_q = False, trans_b
    else:
        pack_p, pack_q = _choose_packing(host, m, n, k, batch, trans_a, trans_b)
    if prog_q is not prog and trans_a and trans_b:
        pack_q = True   # unpacked TT reads B as P, which is GEMM_T only
    scratch = None
    # op(A)[i, kk] = a[i*a_si + kk*a_sk], op(B)[kk, j] = b[kk*b_sk + j*b_sj]
    a_si, a_sk = (1, lda) if trans_a else (lda, 1)
    b_sk, b_sj = (1, ldb) if trans_b else (ldb, 1)

    if pack_p or pack_q:
        # Pack into tile panels [tiles][k][tile] (one per batch entry unless the stride is 0):
        # op(A) rows with tile GEMM_TM at element 0, op(B)^T rows with tile GEMM_TN after it.
        mt, nt = -(-m // tm), -(-n // tn)
        p_panel, q_panel = mt * tm * k, nt * tn * k
        p_size = _round_up(p_panel * (batch if stride_a else 1), 16) if pack_p else 0
        q_size = q_panel * (batch if stride_b else 1) if pack_q else 0
        scratch = _Scratch.get(device, (p_size + q_size) * itemsize)
        if not in_order and scratch.last_event is not None:
            events.append(scratch.last_event)
        pack_events = []
        if pack_p:
            pack_events.append(_pack(prog, code, queue, host, "pyrnn_gemm_pack_p", m, k, tm,
                                     a_buf, a_off, a_si, a_sk, stride_a, batch, scratch.buf, 0,
                                     events))
            p = (scratch.buf, 0, k * tm, 1, tm, p_panel if stride_a else 0)
        else:
            p = (a_buf, a_off, tm * a_si, a_si, a_sk, stride_a)
        if pack_q:
            pack_events.append(_pack(prog_q, code, queue, host, "pyrnn_gemm_pack_q", n, k, tn,
                                     b_buf, b_off, b_sj, b_sk, stride_b, batch, scratch.buf,
                                     p_size, events))
            q = (scratch.buf, p_size, k * tn, tn, nt * tn, q_panel if stride_b else 0)
        else:
            q = (b_buf, b_off, tn, b_sk, n, stride_b)
        outer = prog if pack_q else prog_q      # Q: float panels, or B as stored
        if not in_order:
            events += pack_events
        rows, cols, d, mfast, bs = m, n, (c_off, ldc, 1), 1, (0, 1)
    elif not trans_b:
        # NN, TN: P = op(A) through its strides, Q = B (rows contiguous). A work-group (dimension
        # 0) runs consecutive row tiles sharing their Q panel, except for TN, where A is read
        # across k with a stride: then consecutive column tiles share the P panel.
        p = (a_buf, a_off, tm * a_si, a_si, a_sk, stride_a)
        q = (b_buf, b_off, tn, ldb, n, stride_b)
        rows, cols, d, mfast, bs = m, n, (c_off, ldc, 1), 0 if trans_a else 1, (0, 1)
        outer = prog_q      # Q = B as stored
    elif trans_a:
        # TT: C^T = B A with P = B (stored [n x k]), Q = A (stored [k x m]), C written transposed
        p = (b_buf, b_off, tm * ldb, ldb, 1, stride_b)
        q = (a_buf, a_off, tn, lda, m, stride_a)
        rows, cols, d, mfast, bs = n, m, (c_off, 1, ldc), 1, (1, 0)   # bias along D's rows
        outer = prog        # Q = A (a 16-bit B packs instead: above)
    else:
        # NT: rows of A and of B are both contiguous along k -> dot-product kernel
        name = "pyrnn_gemm_dot"
        args = (m, n, k, 1, alpha, beta, a_buf, a_off, lda, stride_a, b_buf, b_off, ldb, stride_b,
                c_buf, c_off, ldc, 1, stride_c, has_bias, bias_buf, bias_off, 0, 1)
        tiles = (-(-m // defines["GEMM_DTM"]), -(-n // defines["GEMM_DTN"]))
        _launch(prog_q, code, queue, host, name, args, tiles, batch, events)
        return None

    if swap:    # D = C^T: its few rows along dimension 1, the bias along them
        d, bs, mfast = (d[0], d[2], d[1]), bs[::-1], 0
    args = (rows, cols, k, mfast, alpha, beta, *p, *q, c_buf, *d, stride_c, has_bias, bias_buf,
            bias_off, *bs)
    tiles = (-(-rows // tm), -(-cols // tn))
    event = _launch(outer, code, queue, host, "pyrnn_gemm_outer", args,
                    tiles if mfast else tiles[::-1],
                    batch, events)
    if scratch is not None:
        scratch.last_event = event
    return None


def _launch(prog, code, queue, host, name, args, groups, batch, events):
    """Set ``args`` on kernel ``name`` and enqueue it over (groups[0] rounded up to the
    work-group size, groups[1], batch) with local size (GEMM_WG, 1, 1)."""
    kernel = _set_args(prog, name, code, *args)
    wg = max(1, min(host["GEMM_WG"], prog.work_group_size(name)))
    return enqueue(queue, kernel, (_round_up(groups[0], wg), groups[1], batch), (wg, 1, 1),
                   wait_for=events or None)


def sum_rows(device, dtype, rows, cols, a, out, *, a_offset=0, lda=None, out_offset=0, beta=0.0,
             batch=1, stride_a=0, stride_out=0, wait_for=None):
    """Enqueue ``out[j] = beta * out[j] + sum_i A[i, j]`` for a row-major ``[rows x cols]`` A
    (bias gradients: the sum over T*N rows); returns None.

    Offsets, ``lda`` (default ``cols``) and batch strides are in elements; with ``batch > 1``,
    ``out_b = a sum over A_b`` with ``A_b = a + a_offset + b * stride_a`` and
    ``out_b = out + out_offset + b * stride_out``. ``beta == 0`` never reads ``out``;
    ``rows == 0`` gives ``out = beta * out``.
    """
    device = resolve_device(device)
    code = dtype_code(device.check_dtype(dtype))    # float32 or float64
    dtype = np.dtype(dtype)
    rows, cols, batch = int(rows), int(cols), int(batch)
    if min(rows, cols, batch) < 0:
        raise ShapeError(f"sizes must be >= 0, got rows={rows} cols={cols} batch={batch}")
    if cols == 0 or batch == 0:
        return None
    itemsize = dtype.itemsize
    o_buf, o_extra = _buffer(out, "out", itemsize, dtype)
    o_off, stride_out = int(out_offset) + o_extra, int(stride_out)
    if batch > 1 and stride_out == 0:
        raise ShapeError(f"out: batch stride 0 with batch {batch} makes the sums overwrite "
                         "each other")
    _check_extent("out", o_buf, itemsize, o_off, 1, cols, cols, batch, stride_out)
    if rows == 0:
        # out = beta * out: the kernel's row loop is empty, A is never read (may be None)
        a_buf, a_off, lda, stride_a = o_buf, o_off, cols, 0
    else:
        a_buf, a_extra = _buffer(a, "a", itemsize, dtype)
        lda = cols if lda is None else int(lda)
        a_off, stride_a = int(a_offset) + a_extra, int(stride_a)
        _check_extent("a", a_buf, itemsize, a_off, rows, cols, lda, batch, stride_a)

    tuning = device.tuning("reduce")
    defines = {key: int(tuning[key]) for key in ("REDUCE_VW", "REDUCE_NV")}
    if defines["REDUCE_VW"] not in _VECTOR_WIDTHS:
        defines["REDUCE_VW"] = 1
    if code == 2:   # the same register bytes as float32
        defines["REDUCE_VW"] = max(1, defines["REDUCE_VW"] // 2)
    defines["REDUCE_NV"] = max(1, defines["REDUCE_NV"])
    defines["PYRNN_DTYPE"] = code
    prog = get_program(device, "reduce.cl", defines)
    name = "pyrnn_sum_rows"
    wg = max(1, min(int(tuning["REDUCE_WG"]), prog.work_group_size(name)))
    strips = _round_up(-(-cols // (defines["REDUCE_VW"] * defines["REDUCE_NV"])), wg)

    def run(rows, rb, chunks, beta, a_buf, a_off, lda, stride_a, out, out_off, out_chunk,
            out_batch, wait_for):
        kernel = _set_args(prog, name, code, rows, cols, rb, beta, a_buf, a_off, lda, stride_a,
                           out, out_off, out_chunk, out_batch)
        return enqueue(device.queue, kernel, (strips, chunks, batch), (wg, 1, 1),
                       wait_for=wait_for)

    if rows >= 2 * _REDUCE_CHUNK_ROWS:
        # first pass: partial sums of row chunks (at most _REDUCE_CHUNKS of them); the second
        # sums the partials as one chunk
        rb = max(_REDUCE_CHUNK_ROWS, -(-rows // _REDUCE_CHUNKS))
        chunks = -(-rows // rb)
        part = temporary(device, (batch * chunks * cols,), dtype)
        event = run(rows, rb, chunks, 0.0, a_buf, a_off, lda, stride_a, part.base_data, 0, cols,
                    chunks * cols, wait_for)
        rows, a_buf, a_off, lda, stride_a = chunks, part.base_data, 0, cols, chunks * cols
        wait_for = [event]
    run(rows, max(rows, 1), 1, float(beta), a_buf, a_off, lda, stride_a, o_buf, o_off, 0,
        stride_out, wait_for)
    return None
