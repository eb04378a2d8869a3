"""Matrix multiply and row sums on an OpenCL device (kernels in ``cl/gemm.cl`` and ``cl/reduce.cl``).

Everything is row-major; offsets, leading dimensions and batch strides are counted in elements.
Both functions only enqueue work on ``device.queue`` (in order) and never wait on the host.

``gemm`` maps the four transpositions onto two kernels of ``gemm.cl``:

=========  ==================================================================================
NN, TN     ``pyrnn_gemm_outer``: op(A) read through strides, rows of B loaded as vectors
TT         ``pyrnn_gemm_outer`` on C^T = B A (B as P, A as Q), C written through strides
NT         ``pyrnn_gemm_dot``: rows of A and B are both contiguous along k
=========  ==================================================================================

Tunables (``device.tuning("gemm")`` for float32, ``device.tuning("gemm_f64")`` for float64; keys
missing there keep the ``#ifndef`` defaults of ``gemm.cl``): ``GEMM_TM`` rows and ``GEMM_TN``
columns of C per work-item in the outer kernel (``GEMM_TN`` is a multiple of ``GEMM_VW``, the
vector width along n), ``GEMM_DTM``/``GEMM_DTN``/``GEMM_DVW`` the same for the dot kernel (vector
along k), ``GEMM_MFAST`` (global dimension 0 runs over row tiles) and ``GEMM_WG`` (work-items per
group along dimension 0; host only).
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from .errors import ShapeError

__all__ = ["gemm", "sum_rows"]

# Defaults of the host-only tunables; kernel tunables default in the .cl files.
_DEFAULT_WG = 8
_DEFAULT_KERNEL = {1: {"GEMM_TM": 6, "GEMM_TN": 32, "GEMM_VW": 16}, 2: {"GEMM_TM": 6, "GEMM_TN": 16, "GEMM_VW": 8}}
_DEFAULT_DOT = {1: {"GEMM_DTM": 4, "GEMM_DTN": 4, "GEMM_DVW": 16}, 2: {"GEMM_DTM": 4, "GEMM_DTN": 4, "GEMM_DVW": 8}}
_KERNEL_KEYS = ("GEMM_TM", "GEMM_TN", "GEMM_VW", "GEMM_DTM", "GEMM_DTN", "GEMM_DVW", "GEMM_MFAST", "GEMM_FMA")
_VECTOR_WIDTHS = (1, 2, 4, 8, 16)

_REDUCE_DEFAULT = {"REDUCE_VW": 16}
_REDUCE_WG = 8

_I32 = np.int32
_I64 = np.int64


def _dtype_code(dtype) -> int:
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return 1
    if dtype == np.float64:
        return 2
    raise TypeError(f"dtype must be float32 or float64, got {dtype}")


def _gemm_config(device, code: int) -> tuple[dict, int]:
    """(defines for gemm.cl, work-group size along dimension 0) for ``device`` and dtype ``code``."""
    tuning = dict(device.tuning("gemm" if code == 1 else "gemm_f64") or {})
    defines = dict(_DEFAULT_KERNEL[code])
    defines.update(_DEFAULT_DOT[code])
    defines.update({key: int(tuning[key]) for key in _KERNEL_KEYS if key in tuning})
    wg = int(tuning.get("GEMM_WG", _DEFAULT_WG))
    # Keep the combination valid whatever the table says: vector widths OpenCL has, and GEMM_TN
    # a positive multiple of GEMM_VW.
    for key in ("GEMM_VW", "GEMM_DVW"):
        if defines[key] not in _VECTOR_WIDTHS:
            defines[key] = max(w for w in _VECTOR_WIDTHS if w <= max(1, defines[key]))
    defines["GEMM_TN"] = max(1, defines["GEMM_TN"] // defines["GEMM_VW"]) * defines["GEMM_VW"]
    for key in ("GEMM_TM", "GEMM_DTM", "GEMM_DTN"):
        defines[key] = max(1, defines[key])
    defines["PYRNN_DTYPE"] = code
    return defines, max(1, wg)


def _buffer(x, name: str, itemsize: int, dtype) -> tuple[cl.MemoryObject, int]:
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
        raise ShapeError(f"{name}: byte offset {offset} is not a multiple of the item size {itemsize}")
    return base, offset // itemsize


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
         batch=1, stride_a=0, stride_b=0, stride_c=0, wait_for=None):
    """Enqueue ``C = alpha * op(A) @ op(B) + beta * C`` on ``device.queue``; returns None.

    ``op(A)`` is ``[m x k]`` (A stored ``[k x m]`` when ``trans_a``), ``op(B)`` is ``[k x n]``
    (B stored ``[n x k]`` when ``trans_b``), C is ``[m x n]``; all row-major. ``a``, ``b``, ``c``
    are pyopencl Buffers or Arrays (an Array's ``offset`` is added to the element offset).
    Offsets, leading dimensions (default: the stored row length) and batch strides are in
    elements; with ``batch > 1``, ``C_i = alpha op(A_i) op(B_i) + beta C_i`` where
    ``A_i = a + a_offset + i * stride_a`` (likewise B, C). ``beta == 0`` never reads C (NaN-safe).
    ``m == 0`` or ``n == 0``: nothing; ``k == 0``: ``C = beta * C``.
    """
    from .devices import resolve_device
    from .programs import enqueue, get_program

    device = resolve_device(device)
    device.check_dtype(dtype)
    code = _dtype_code(dtype)
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
        raise ShapeError(f"c: batch stride 0 with batch {batch} makes the results overwrite each other")
    _check_extent("c", c_buf, itemsize, c_off, m, n, ldc, batch, stride_c)
    if k == 0:
        # C = beta * C: the kernels' k loops are empty, A and B are never read (may be None)
        a_buf, b_buf, a_off, b_off, lda, ldb, stride_a, stride_b = c_buf, c_buf, c_off, c_off, 1, 1, 0, 0
    else:
        a_buf, a_extra = _buffer(a, "a", itemsize, dtype)
        b_buf, b_extra = _buffer(b, "b", itemsize, dtype)
        a_rows, a_cols = (k, m) if trans_a else (m, k)
        b_rows, b_cols = (n, k) if trans_b else (k, n)
        lda = a_cols if lda is None else int(lda)
        ldb = b_cols if ldb is None else int(ldb)
        a_off, b_off = int(a_offset) + a_extra, int(b_offset) + b_extra
        stride_a, stride_b = int(stride_a), int(stride_b)
        _check_extent("a", a_buf, itemsize, a_off, a_rows, a_cols, lda, batch, stride_a)
        _check_extent("b", b_buf, itemsize, b_off, b_rows, b_cols, ldb, batch, stride_b)

    defines, wg = _gemm_config(device, code)
    prog = get_program(device, "gemm.cl", defines)
    alpha_v, beta_v = dtype.type(alpha), dtype.type(beta)

    if trans_b and not trans_a:
        # NT: C[i, j] = sum_k A[i, k] B[j, k]
        name = "pyrnn_gemm_dot"
        rows, cols, tm, tn = m, n, defines["GEMM_DTM"], defines["GEMM_DTN"]
        args = (
            _I32(m), _I32(n), _I32(k), alpha_v, beta_v,
            a_buf, _I64(a_off), _I64(lda), _I64(stride_a),
            b_buf, _I64(b_off), _I64(ldb), _I64(stride_b),
            c_buf, _I64(c_off), _I64(ldc), _I64(1), _I64(stride_c),
        )
    else:
        name = "pyrnn_gemm_outer"
        tm, tn = defines["GEMM_TM"], defines["GEMM_TN"]
        if not trans_b:
            # NN / TN: P = op(A) through strides, Q = B, D = C
            rows, cols = m, n
            p_si, p_sk = (1, lda) if trans_a else (lda, 1)
            args = (
                _I32(m), _I32(n), _I32(k), alpha_v, beta_v,
                a_buf, _I64(a_off), _I64(p_si), _I64(p_sk), _I64(stride_a),
                b_buf, _I64(b_off), _I64(ldb), _I64(stride_b),
                c_buf, _I64(c_off), _I64(ldc), _I64(1), _I64(stride_c),
            )
        else:
            # TT: C^T[j, i] = sum_k B[j, k] A[k, i]; P = B (stored [n x k]), Q = A (stored [k x m])
            rows, cols = n, m
            args = (
                _I32(n), _I32(m), _I32(k), alpha_v, beta_v,
                b_buf, _I64(b_off), _I64(ldb), _I64(1), _I64(stride_b),
                a_buf, _I64(a_off), _I64(lda), _I64(stride_a),
                c_buf, _I64(c_off), _I64(1), _I64(ldc), _I64(stride_c),
            )

    tiles_r, tiles_c = -(-rows // tm), -(-cols // tn)
    if not defines.get("GEMM_MFAST", 1):
        tiles_r, tiles_c = tiles_c, tiles_r
    wg = max(1, min(wg, prog.work_group_size(name)))
    kernel = prog.kernel(name)
    kernel.set_args(*args)
    enqueue(device.queue, kernel, (_round_up(tiles_r, wg), tiles_c, batch), (wg, 1, 1), wait_for=wait_for)
    return None


def sum_rows(device, dtype, rows, cols, a, out, *, a_offset=0, lda=None, out_offset=0, beta=0.0,
             batch=1, stride_a=0, stride_out=0, wait_for=None):
    """Enqueue ``out[j] = beta * out[j] + sum_i A[i, j]`` for a row-major ``[rows x cols]`` A
    (bias gradients: the sum over T*N rows); returns None.

    Offsets, ``lda`` (default ``cols``) and batch strides are in elements; with ``batch > 1``,
    ``out_b = a sum over A_b`` with ``A_b = a + a_offset + b * stride_a`` and
    ``out_b = out + out_offset + b * stride_out``. ``beta == 0`` never reads ``out``;
    ``rows == 0`` gives ``out = beta * out``.
    """
    from .devices import resolve_device
    from .programs import enqueue, get_program

    device = resolve_device(device)
    device.check_dtype(dtype)
    code = _dtype_code(dtype)
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
        raise ShapeError(f"out: batch stride 0 with batch {batch} makes the sums overwrite each other")
    _check_extent("out", o_buf, itemsize, o_off, 1, cols, cols, batch, stride_out)
    if rows == 0:
        # out = beta * out: the kernel's row loop is empty, A is never read (may be None)
        a_buf, a_off, lda, stride_a = o_buf, o_off, cols, 0
    else:
        a_buf, a_extra = _buffer(a, "a", itemsize, dtype)
        lda = cols if lda is None else int(lda)
        a_off, stride_a = int(a_offset) + a_extra, int(stride_a)
        _check_extent("a", a_buf, itemsize, a_off, rows, cols, lda, batch, stride_a)

    tuning = dict(device.tuning("reduce") or {})
    defines = dict(_REDUCE_DEFAULT)
    defines.update({key: int(v) for key, v in tuning.items() if key in ("REDUCE_VW", "REDUCE_ACC")})
    if defines["REDUCE_VW"] not in _VECTOR_WIDTHS:
        defines["REDUCE_VW"] = 1
    if code == 2 and "REDUCE_VW" not in tuning:
        defines["REDUCE_VW"] = 8
    defines["PYRNN_DTYPE"] = code
    wg = int(tuning.get("REDUCE_WG", _REDUCE_WG))
    prog = get_program(device, "reduce.cl", defines)
    name = "pyrnn_sum_rows"
    kernel = prog.kernel(name)
    kernel.set_args(
        _I32(rows), _I32(cols), dtype.type(beta),
        a_buf, _I64(a_off), _I64(lda), _I64(stride_a),
        o_buf, _I64(o_off), _I64(stride_out),
    )
    wg = max(1, min(wg, prog.work_group_size(name)))
    groups = -(-cols // defines["REDUCE_VW"])
    enqueue(device.queue, kernel, (_round_up(groups, wg), batch), (wg, 1), wait_for=wait_for)
    return None
