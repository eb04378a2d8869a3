"""Call conventions shared by every public op (API.md §0): arrays in, arrays out, one dtype, the
device, and argument validation with messages that name the argument.

An op builds a :class:`Call` from its array arguments (in signature order). The first array
decides the output kind: NumPy in, NumPy out; ``pyopencl.array.Array`` in, device arrays out on
the same queue. Every floating array must share one dtype (float32, float64, float16, or
bfloat16 where ``ml_dtypes`` is installed: ``sources.STORAGE_DTYPES``); float64 needs
``cl_khr_fp64`` on the device.

float16 and bfloat16 are storage dtypes: :meth:`Call.dev` widens such an argument to float32 on
the device (:func:`widen`, exact), the engine computes in float32 as for float32 arrays, and
:meth:`Call.out` narrows each result back to the caller's dtype (:func:`narrow`, round to
nearest even), so every array the caller sees (outputs, saved state, reserve space, gradients)
is in the call's storage dtype.
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import weakref
from typing import NamedTuple

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.tools as cl_tools

from . import _env
from ._lifecycle import results_scope
from .devices import Device, resolve_device
from .errors import ShapeError, UnsupportedError
from .programs import driver_lock, enqueue_on, get_program, set_args
from .sources import STORAGE_DTYPES, compute_dtype, dtype_code, storage_names


def empty(queue, shape, dtype, allocator=None, data=None) -> cla.Array:
    """A new contiguous, zero-offset ``pyopencl.array.Array`` (what ``cla.empty`` returns), or
    with ``data`` (a buffer) one over that memory.

    Built through pyopencl's fast constructor path (the one its own ``reshape`` and slicing
    take): ~3 us of host time instead of ~18 us, which adds up over the thirty-odd buffers of a
    training step. Falls back to ``cla.empty`` / ``cla.Array`` on a pyopencl without that
    path."""
    global _FAST_ARRAY
    dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
    shape = tuple(map(int, shape))
    if _FAST_ARRAY:
        strides, size = _contiguous(shape, dtype.itemsize)
        try:
            if data is None and allocator and size:
                data = allocator(size * dtype.itemsize)
            return cla.Array(None, shape, dtype, strides=strides, _fast=True, _size=size,
                             _context=_asked_once(queue, "_pyrnn_context", _context_of),
                             _queue=queue, data=data)
        except TypeError:
            _FAST_ARRAY = False
    if data is not None:
        return cla.Array(queue, shape, dtype, data=data)
    return cla.empty(queue, shape, dtype, allocator=allocator)


_FAST_ARRAY = True


@functools.lru_cache(maxsize=1024)
def _contiguous(shape: tuple[int, ...], itemsize: int) -> tuple[tuple[int, ...], int]:
    """``(strides, size)`` of a C-contiguous array of ``shape`` (an op call makes the same
    shapes every time)."""
    strides, step, size = [], itemsize, 1
    for s in reversed(shape):
        strides.append(step)
        step *= max(1, s)
        size *= s
    return tuple(reversed(strides)), size


def _asked_once(obj, attr: str, query):
    """``query(obj)``, kept on ``obj`` as ``attr``: a driver query whose answer does not change
    (~1 us each, and an op call would ask dozens of times); asked again on an object that takes
    no attributes of its own."""
    value = getattr(obj, attr, None)
    if value is None:
        value = query(obj)
        try:
            setattr(obj, attr, value)
        except AttributeError:
            pass
    return value


def _context_of(queue):
    return queue.context


def _out_of_order_of(queue) -> bool:
    return bool(queue.properties & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE)


def _base_align_of(device) -> int:
    """``CL_DEVICE_MEM_BASE_ADDR_ALIGN`` in bytes."""
    return max(1, device.cl_device.mem_base_addr_align // 8)


def out_of_order(queue) -> bool:
    """Whether ``queue`` was created with ``OUT_OF_ORDER_EXEC_MODE_ENABLE``."""
    return _asked_once(queue, "_pyrnn_out_of_order", _out_of_order_of)


_POOLS: weakref.WeakKeyDictionary[Device, cl_tools.MemoryPool] = weakref.WeakKeyDictionary()


def shares_host_memory(device) -> bool:
    """Whether ``device``'s memory is the host's (``VendorProfile.shares_host_memory``: PoCL's
    CPU devices): a ``USE_HOST_PTR`` buffer then wraps host memory without a copy, and a map
    reads a result without one."""
    return device.info.type in device.profile.shares_host_memory


def wrap_host(queue, a: np.ndarray) -> cla.Array:
    """A read-only ``USE_HOST_PTR`` device array over the contiguous host array ``a`` (no copy,
    no queue command; the buffer holds ``a`` alive). Only where :func:`shares_host_memory`, for
    values that kernels only read, in calls that wait for those kernels before ``a`` may
    change (the caller's own memory)."""
    flags = cl.mem_flags.READ_ONLY | cl.mem_flags.USE_HOST_PTR
    return empty(queue, a.shape, a.dtype, data=cl.Buffer(queue.context, flags, hostbuf=a))


def copied_at_creation(queue, a: np.ndarray) -> cla.Array:
    """A new device array holding a copy of the small host array ``a``, made when its buffer
    is created (``COPY_HOST_PTR``): no queue command, where ``cla.to_device`` enqueues a
    write (about 40 us of host time on PoCL, on the path of every call that makes one)."""
    a = np.ascontiguousarray(a)
    if not a.size:
        return empty(queue, a.shape, a.dtype)
    flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
    return empty(queue, a.shape, a.dtype, data=cl.Buffer(queue.context, flags, hostbuf=a))


def read_host(queue, reads, in_place: bool, wait: bool = True) -> list[np.ndarray]:
    """Host arrays of regions of device arrays, ``reads`` = ``(array, element offset, shape)``
    each, every one read by a blocking copy, which waits for the commands queued before it
    with the GIL released. (A non-blocking copy waits all the same where its event is
    dropped, pyopencl's event then holding the GIL while it waits, so that no other thread
    can run Python meanwhile. On NVIDIA's OpenCL, threads sharing a queue while reads were
    waited for that way crashed the process in a thread of the driver; none did with
    blocking copies: docs/platforms.md.) Mapped arrays (below) are waited for once after
    every read is enqueued, unless a blocking copy came after the last of them (the queue is
    in order); ``wait=False``: not at all, the caller finishing ``queue`` before anything
    reads the arrays. Either way, with ``wait`` every command queued before the call is done
    when it returns.

    With ``in_place`` (the device's memory is the host's, :func:`shares_host_memory`) an array
    that owns its buffer (a result of the op, not pooled memory that a later call reuses) is
    mapped instead of copied: the host array is the device memory itself, and the buffer is
    released with it. Nothing writes to those buffers once the op has returned them."""
    outs = []
    pending = True      # commands possibly still running: none once a blocking copy returned
    for a, off, shape in reads:
        if not int(np.prod(shape)):
            host = np.zeros(shape, a.dtype)
        elif in_place and a.allocator is None:
            with driver_lock:
                host, _ = cl.enqueue_map_buffer(
                    queue, a.base_data,
                    cl.map_flags.READ | cl.map_flags.WRITE,  # type: ignore[arg-type]  # (| of the enum: int)
                    a.offset + off * a.dtype.itemsize, shape, a.dtype, is_blocking=False)
            pending = True
        else:
            host = _copy_to_host(queue, a, off, shape)
            pending = False
        outs.append(host)
    if wait and pending:
        queue.finish()
    return outs


def _copy_to_host(queue, a: cla.Array, off: int, shape, wait_for=None) -> np.ndarray:
    """A new host array of ``shape`` holding ``a``'s elements from element ``off`` on: one
    copy, queued under :data:`~pyrnn_cl.programs.driver_lock` and waited for outside it, with
    the GIL released (its event is done when it is dropped)."""
    host = np.empty(shape, a.dtype)
    with driver_lock:
        copied = cl.enqueue_copy(queue, host, a.base_data,
                                 src_offset=a.offset + off * a.dtype.itemsize,
                                 wait_for=wait_for, is_blocking=False)
    copied.wait()
    return host


def write_host(out: cla.Array, host: np.ndarray, wait: bool) -> cla.Array:
    """``out`` with the host array ``host`` copied into it, the copy queued under
    :data:`~pyrnn_cl.programs.driver_lock`. ``wait``: wait for it (outside the lock) before
    returning, where the caller may change ``host`` as soon as this returns; otherwise
    pyopencl holds ``host`` until the copy is done. (An empty array has nothing to copy.)"""
    if not host.size:
        return out
    with driver_lock:
        out.set(host, async_=True)
    if wait:
        out.finish()
    return out


def _upload(queue, a: np.ndarray, dtype, results_read: bool) -> cla.Array:
    """``a`` as a new device array of ``dtype``. The copy is enqueued without waiting when it
    reads a private converted copy of ``a``, or when the call reads its results back before it
    returns (``results_read``: NumPy out, whose read waits for every command, these copies
    included; pyopencl keeps ``a`` alive until its copy is done); from the caller's own memory
    in a call that returns device arrays it waits (the caller may change that memory as soon
    as the op returns, while a result is still being computed)."""
    host = np.ascontiguousarray(a, dtype=dtype)
    return write_host(empty(queue, host.shape, host.dtype), host,
                      wait=not results_read and np.may_share_memory(host, a))


def to_host(a: cla.Array, queue=None) -> np.ndarray:
    """``a.get(queue)``: the copy queued under :data:`~pyrnn_cl.programs.driver_lock` (after
    ``a``'s events) and waited for outside it."""
    queue = queue or a.queue
    if not a.flags.c_contiguous or not a.size or queue is None:
        with driver_lock:
            return a.get(queue=queue)
    return _copy_to_host(queue, a, 0, a.shape, wait_for=a.events)


def temporary(device, shape, dtype) -> cla.Array:
    """A device array for values that live inside one op call (packed weights, carries,
    gathered step inputs), never handed to the caller.

    Its memory comes from a per-device pool (``pyopencl.tools.MemoryPool``) and returns there
    when the array is dropped, so a call reuses the pages of the previous one instead of
    faulting in fresh ones (PoCL: ~0.1 ms per MiB, about 1 ms of a 12 ms LSTM forward at
    H = 512). Only the device's in-order queue uses these arrays, so memory released while
    its kernels are still queued goes only to commands queued after them; an out-of-order
    queue gets plain buffers. :func:`free_pools` gives the held memory back."""
    queue = device.queue
    if out_of_order(queue):
        return empty(queue, shape, dtype)
    try:
        pool = _POOLS.get(device)
        if pool is None:
            pool = _POOLS[device] = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))
    except TypeError:        # a device object that cannot be weakly referenced
        return empty(queue, shape, dtype)
    return empty(queue, shape, dtype, allocator=pool)


def results_stay(device) -> bool:
    """Whether the running op's results stay inside pyrnn_cl on ``device`` (``_lifecycle.
    results_scope``): an op with NumPy results on a device whose memory is not the host's
    (:class:`Call`), whose results are copied back before it returns and then dropped, or a
    block under :func:`results_inside`. Their buffers then come from the pool
    (:func:`temporary`) like the op's temporaries: a fresh buffer per result and call costs
    page faults where the implementation gives freed buffers' memory back to the system
    (Intel's CPU runtime: ~650 per tiny LSTM training forward, 1.7 ms of system time), and an
    allocation where it places them lazily (GPUs). Safe because nothing outside pyrnn_cl holds
    them: the pool hands their memory only to commands queued after theirs on the same
    in-order queue. Where the memory is the host's (PoCL's CPU device), results are mapped in
    place instead (:func:`read_host`), which needs buffers of their own."""
    return getattr(results_scope, "device", None) is device


def pools_results(device) -> bool:
    """Whether results returned as device arrays come from the pool (:func:`temporary`) too:
    on a device whose memory is not the host's (Intel's CPU runtime, GPUs), unless
    ``PYRNN_CL_POOL_RESULTS=0``. A fresh buffer per result costs page faults there (Intel's
    runtime gives a released buffer's pages back to the system: ~600 faults per tiny LSTM
    training forward; pooled, a tiny LSTM forward+backward on device arrays ran 1.27x faster,
    LSTM 512/16 1.17x). The caller holds a pooled result as long as it likes; dropped, its
    memory goes back to the pool and to the next command of the device's in-order queue, as
    PyTorch's caching allocator hands a freed CUDA tensor's memory to the next kernel on its
    stream. So a result used on *another* queue must be kept until that queue's commands
    finish (or the variable set to 0). Where the memory is the host's (PoCL's CPU device),
    results keep buffers of their own: nothing faults there, and NumPy results are mapped in
    place."""
    return not shares_host_memory(device) and _env.pool_results()


def results_pooled(device) -> bool:
    """Whether the running op's results (and uploads of its host arguments) on ``device`` come
    from the pool: its results stay inside pyrnn_cl (:func:`results_stay`) or the device pools
    results (:func:`pools_results`)."""
    return results_stay(device) or pools_results(device)


def result_array(device, shape, dtype) -> cla.Array:
    """A new device array for a result of the running op: from the pool where
    :func:`results_pooled`, else a buffer of its own."""
    if results_pooled(device):
        return temporary(device, shape, dtype)
    return empty(device.queue, shape, dtype)


def result_zeros(device, shape, dtype) -> cla.Array:
    """:func:`result_array`, filled with zeros."""
    if results_pooled(device):
        return fill(temporary(device, shape, dtype), 0)
    return fill(empty(device.queue, shape, dtype), 0)


@contextlib.contextmanager
def results_inside(device):
    """Within the block, ops on ``device`` in this thread allocate their results from the pool
    (:func:`results_stay`): for callers inside pyrnn_cl (the torch bridge) that read every
    result on the device's queue and drop it, and hold none beyond their own use."""
    outer = getattr(results_scope, "device", None)
    results_scope.device = device
    try:
        yield
    finally:
        results_scope.device = outer


def free_pools() -> None:
    """Release the memory the pools of :func:`temporary` hold (arrays in use keep theirs)."""
    for pool in list(_POOLS.values()):
        pool.free_held()


def sub_array(device, a, offset, shape):
    """Elements ``offset ..`` of the device array ``a`` as a new zero-offset array of
    ``shape`` on an OpenCL sub-buffer (the same memory: writes show in ``a``), or None where
    the device cannot address that start as a sub-buffer (its byte address not a multiple of
    ``CL_DEVICE_MEM_BASE_ADDR_ALIGN``, or ``a`` not a buffer): the caller then copies.
    ``a`` itself where that is the whole of it.

    An array from the pool (:func:`temporary`) is addressed through its buffer object, and
    the sub-array holds ``a``'s pooled buffer: the pool would hand that memory to its next
    allocation once nothing holds it (an OpenCL sub-buffer keeps only the buffer object alive,
    which the pool keeps anyway), e.g. while a layer still reads its initial states through
    a part of an input uploaded into pooled memory."""
    if not offset and not a.offset and tuple(a.shape) == tuple(shape):
        return a            # the whole array: itself (no sub-buffer to make)
    size = math.prod(int(n) for n in shape)
    start = a.offset + int(offset) * a.dtype.itemsize
    align = _asked_once(device, "_pyrnn_align", _base_align_of)
    base = a.base_data
    if size == 0 or start % align or base is None:
        return None
    nbytes = size * a.dtype.itemsize
    if start + nbytes > base.size:
        raise ValueError(f"sub_array: elements [{offset}, {offset + size}) lie outside an array "
                         f"of {a.size}")
    pooled = None
    if not isinstance(base, cl.Buffer):       # (pyopencl's PooledBuffer: no sub-regions)
        try:
            pooled, base = base, cl.Buffer.from_int_ptr(base.int_ptr, retain=True)
        except (AttributeError, TypeError, cl.Error):
            return None
    part = empty(device.queue, shape, a.dtype, data=base.get_sub_region(start, nbytes))
    if pooled is not None:
        part._pyrnn_pooled = pooled           # (the memory stays out of the pool meanwhile)
    return part


def check_in_order(device) -> None:
    """``ValueError`` naming the property when ``device``'s queue executes out of order.

    Every op enqueues dependent commands back to back (kernel arguments set once, step after
    step, pooled temporaries reused by the next command) and relies on the queue running them
    in order; on an out-of-order queue they would race and give wrong answers silently (seen on
    PoCL and on Intel's CPU runtime), so such a queue is refused before anything is enqueued."""
    if out_of_order(device.queue):
        raise ValueError(
            "device: the command queue was created with OUT_OF_ORDER_EXEC_MODE_ENABLE; pyrnn_cl's "
            "ops enqueue dependent kernels back to back and need an in-order queue: pass "
            "pyopencl.CommandQueue(context, device) without that property (profiling is fine)")


def fill(a: cla.Array, value) -> cla.Array:
    """Set every element of ``a`` to ``value`` with ``clEnqueueFillBuffer``: no kernel to build.
    pyopencl's ``Array.fill`` compiles an element-wise kernel, and some compilers (Intel's CPU
    runtime) print a non-empty build log for it, which pyopencl turns into a warning on stderr.
    A non-contiguous view falls back to ``Array.fill``."""
    if a.size and a.flags.forc:
        pattern = np.full(1, value, dtype=a.dtype)
        # (an array with elements has a queue and a buffer; pyopencl types both optional)
        with driver_lock:
            a.add_event(cl.enqueue_fill_buffer(a.queue, a.base_data, pattern, a.offset,  # type: ignore[arg-type]
                                               a.nbytes))
    elif a.size:
        with driver_lock:
            a.fill(value)
    return a


def read_only_zeros(device, dtype, n) -> cla.Array:
    """A shared device array of at least ``n`` zeros of ``dtype`` (at least one element), for
    inputs a kernel only reads: absent optional buffers, zero initial states seen through a
    stride-0 ``StateView``, zero rows. One per device and dtype, grown on demand, filled once;
    nothing may write into it."""
    dtype = np.dtype(dtype)
    cache = device.__dict__.setdefault("_pyrnn_zeros", {})
    z = cache.get(dtype)
    if z is None or z.size < n:
        size = max(int(n), 2 * z.size if z is not None else 256)
        z = fill(empty(device.queue, (size,), dtype), 0)
        cache[dtype] = z
    return z


def is_array(a) -> bool:
    return isinstance(a, (np.ndarray, cla.Array))


def _need_shape(name, a):
    """``TypeError`` naming ``name`` when a required array argument is not an array (``None``,
    a list, a number, ...): before anything reads its shape."""
    if getattr(a, "shape", None) is None:
        raise TypeError(f"{name}: expected a numpy.ndarray or pyopencl.array.Array, got "
                        f"{type(a).__name__}")


def check_shape(name, a, expected):
    """``ShapeError`` naming ``name`` unless ``a.shape == expected`` (``None`` entries: any);
    ``TypeError`` when ``a`` is not an array (a required argument given as ``None``)."""
    _need_shape(name, a)
    shape = tuple(a.shape)
    ok = len(shape) == len(expected) and all(e is None or e == s
                                             for s, e in zip(shape, expected))
    if not ok:
        want = "[" + ", ".join("*" if e is None else str(e) for e in expected) + "]"
        raise ShapeError(f"{name}: got shape {list(shape)}, expected {want}")


def check_rank(name, a, rank):
    _need_shape(name, a)
    if len(a.shape) != rank:
        raise ShapeError(f"{name}: got shape {list(a.shape)} (rank {len(a.shape)}), expected "
                         f"rank {rank}")


def check_choice(name, value, choices):
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}: got {value!r}, expected one of "
                         f"{', '.join(repr(c) for c in choices)}")
    return value


def check_int(name, value, low=None, high=None):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu":
            value = int(value)
        else:
            raise TypeError(f"{name}: expected an integer, got {type(value).__name__} "
                            f"({value!r})")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise ValueError(f"{name}: got {value}, expected a value in [{lo}, {hi}]")
    return value


def check_bool(name, value):
    """``value`` as a bool; ``TypeError`` naming ``name`` for anything but a Python/NumPy bool
    (``1``, ``"yes"``, ``None`` would otherwise be silently truthy or falsy)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__} ({value!r})")
    return bool(value)


def check_float(name, value, low=None, high=None):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} ({value!r})")
    value = float(value)
    if not np.isfinite(value) or (low is not None and value < low) or (
            high is not None and value > high):
        raise ValueError(f"{name}: got {value}, expected a finite value in "
                         f"[{low if low is not None else '-inf'}, "
                         f"{high if high is not None else 'inf'}]")
    return value


def _device_limits(device):
    """``(global memory, largest single allocation)`` of a device in bytes (0: unknown)."""
    limits = getattr(device, "_pyrnn_mem_limits", None)
    if limits is None:
        glob = int(getattr(device.info, "global_mem_size", 0) or 0)
        try:
            alloc = int(device.cl_device.max_mem_alloc_size)
        except Exception:  # noqa: BLE001 - a stub device or a driver that does not answer
            alloc = 0
        limits = (glob, alloc)
        try:
            device._pyrnn_mem_limits = limits
        except AttributeError:
            pass
    return limits


def check_memory(device, what, buffers):
    """``UnsupportedError`` naming the bytes needed when ``buffers`` (sizes in bytes of the
    buffers one step of an op holds at the same time) cannot fit ``device``: one of them is
    above the device's largest allocation (``CL_DEVICE_MAX_MEM_ALLOC_SIZE``) or together they
    are above its global memory. Called before anything is allocated, so a request that is too
    large gives this clear error instead of an opaque OpenCL one (``INVALID_BUFFER_SIZE``,
    ``MEM_OBJECT_ALLOCATION_FAILURE``) or a driver crash (pitfalls D9)."""
    sizes = [int(b) for b in buffers]
    if not sizes:
        return
    glob, alloc = _device_limits(device)
    total, largest = sum(sizes), max(sizes)
    name = getattr(device.info, "name", "the device")
    if alloc and largest > alloc:
        raise UnsupportedError(
            f"{what}: needs a buffer of {largest} bytes ({largest / 2**30:.2f} GiB), above the "
            f"largest allocation of {name!r} ({alloc} bytes, {alloc / 2**30:.2f} GiB); use "
            "fewer steps or a smaller batch per call, or a device with more memory")
    if glob and total > glob:
        raise UnsupportedError(
            f"{what}: needs {total} bytes ({total / 2**30:.2f} GiB) of device memory, above the "
            f"global memory of {name!r} ({glob} bytes, {glob / 2**30:.2f} GiB); use fewer steps "
            "or a smaller batch per call, or a device with more memory")


#: Arrays one conversion launch handles (the slots ``cl/storage.cl`` spells out; it refuses to
#: build with another count). An op's inputs or results rarely number more: the LSTM gradient
#: widens seven arrays at its start.
CONVERT_SLOTS = 8


def _storage_program(device, storage):
    return get_program(device, "storage.cl", {"PYRNN_DTYPE": dtype_code(storage),
                                              "CONVERT_SLOTS": CONVERT_SLOTS})


#: the argument types of the conversion kernels (buffers None): per slot the source, its
#: offset, the destination, its offset, then n8 (the *8 kernels) or first, n1 (the *1 kernels);
#: declared so that set_args packs plain ints without inspecting 40 arguments per launch
_SLOT_TYPES = {8: (None, np.int64, None, np.int64, np.int64) * CONVERT_SLOTS,
               1: (None, np.int64, None, np.int64, np.int64, np.int64) * CONVERT_SLOTS}


class Span(NamedTuple):
    """``size`` elements of a device array from element ``start``, for :func:`widen_many` and
    :func:`narrow_many` (which read only these fields): a run inside a larger array without
    building a pyopencl view (its slicing costs ~40 us of host time)."""

    base_data: object
    offset: int         # in bytes, as an Array's
    size: int
    dtype: np.dtype

    @classmethod
    def of(cls, a: cla.Array, start: int, size: int) -> Span:
        return cls(a.base_data, a.offset + int(start) * a.dtype.itemsize, int(size), a.dtype)


def _convert(device, kernel, storage, pairs) -> None:
    """Enqueue conversion ``kernel`` (``pyrnn_widen`` or ``pyrnn_narrow`` of
    ``cl/storage.cl``) for every ``(src, dst)`` of ``pairs`` (contiguous device arrays of one
    size; their offsets are honoured), :data:`CONVERT_SLOTS` pairs per launch: the 8-wide
    kernel over each pair's first ``n - n % 8`` elements, the 1-wide one over the rest."""
    pairs = [(a, b) for a, b in pairs if a.size]
    if not pairs:
        return
    prog = _storage_program(device, storage)
    for start in range(0, len(pairs), CONVERT_SLOTS):
        group = pairs[start:start + CONVERT_SLOTS]
        slots = [(a.base_data, a.offset // a.dtype.itemsize, b.base_data,
                  b.offset // b.dtype.itemsize, int(a.size)) for a, b in group]
        slots += [slots[0][:4] + (0,)] * (CONVERT_SLOTS - len(slots))    # unused: n = 0
        wide = max(n // 8 for *_, n in slots)
        if wide:
            knl = prog.kernel(kernel + "8")
            set_args(knl, *[v for *buffers, n in slots for v in (*buffers, n // 8)],
                     dtypes=_SLOT_TYPES[8])
            enqueue_on(device, knl, (wide,))
        tail = max(n % 8 for *_, n in slots)
        if tail:
            knl = prog.kernel(kernel + "1")
            set_args(knl, *[v for *buffers, n in slots for v in (*buffers, n - n % 8, n % 8)],
                     dtypes=_SLOT_TYPES[1])
            enqueue_on(device, knl, (tail,))


def widen_many(device, arrays, storage, out=None) -> list[cla.Array]:
    """Float32 device arrays with the values of the contiguous device arrays ``arrays`` of a
    16-bit storage dtype (exact: every float16 and bfloat16 is a float32), converted
    :data:`CONVERT_SLOTS` per launch. They live inside one op call (:func:`temporary`: pooled
    memory, reused by the next call instead of faulting in fresh pages, ~1 ms per million
    elements on Intel's CPU runtime); results are narrowed into arrays of their own. ``out``:
    contiguous float32 arrays (of the same sizes; their offsets are honoured) to widen into
    instead, e.g. views into one array; ``arrays`` and ``out`` may hold :class:`Span` objects."""
    outs = ([temporary(device, a.shape, np.float32) for a in arrays] if out is None
            else list(out))
    assert all(o.size == a.size for a, o in zip(arrays, outs))
    _convert(device, "pyrnn_widen", storage, list(zip(arrays, outs)))
    return outs


def widen(device, a, storage) -> cla.Array:
    """:func:`widen_many` of one array."""
    return widen_many(device, [a], storage)[0]


def widen_runs(device, a, offset, stride, n, runs, out) -> None:
    """``out[r * n + i] = a[offset + r * stride + i]`` widened to float32, for ``runs`` runs of
    ``n`` elements of the 16-bit device array ``a`` (element offsets; ``out`` a float32 device
    array of at least ``runs * n`` elements): one launch."""
    if n == 0 or runs == 0:
        return
    storage = np.dtype(a.dtype)
    knl = _storage_program(device, storage).kernel("pyrnn_widen_runs")
    set_args(knl, a.base_data, np.int64(a.offset // storage.itemsize + offset), np.int64(stride),
             np.int32(n), out.base_data)
    enqueue_on(device, knl, (n, runs))


def narrow_many(device, arrays, storage, out=None) -> list[cla.Array]:
    """Device arrays of the 16-bit ``storage`` dtype with the values of the contiguous float32
    device arrays ``arrays`` rounded to nearest even (overflow to infinity, NaN kept),
    converted :data:`CONVERT_SLOTS` per launch: new ones, or the contiguous arrays ``out`` (of
    the same sizes; their offsets are honoured)."""
    outs = [empty(device.queue, a.shape, storage) for a in arrays] if out is None else list(out)
    assert all(o.size == a.size for a, o in zip(arrays, outs))
    _convert(device, "pyrnn_narrow", storage, list(zip(arrays, outs)))
    return outs


def narrow(device, a, storage) -> cla.Array:
    """:func:`narrow_many` of one array."""
    return narrow_many(device, [a], storage)[0]


def common_dtype(named):
    """``(dtype, first array)`` of ``(name, array)`` pairs that must share one float dtype
    (one of ``sources.STORAGE_DTYPES``); ``TypeError`` naming the culprit for a non-array, a
    non-float dtype or a mix."""
    dtype = first = first_name = None
    for name, a in named:
        if not is_array(a):
            raise TypeError(f"{name}: expected a numpy.ndarray or pyopencl.array.Array, got "
                            f"{type(a).__name__}")
        dt = np.dtype(a.dtype)
        if dt not in STORAGE_DTYPES:
            raise TypeError(f"{name}: got dtype {dt}, expected {storage_names()}")
        if dtype is None:
            dtype, first, first_name = dt, a, name
        elif dt != dtype:
            raise TypeError(f"{name}: got dtype {dt}, but {first_name} is {dtype}; all "
                            "floating arrays of one call must share one dtype")
    return dtype, first


def _zero_offset(queue, a: cla.Array) -> cla.Array:
    """``a``, or a copy of its values in a buffer of its own where it starts at an offset into
    its buffer (kernels take buffers, not offsets)."""
    if not a.offset:
        return a
    b = cla.empty(queue, a.shape, a.dtype)
    if a.size:
        with driver_lock:
            cl.enqueue_copy(queue, b.base_data, a.base_data, src_offset=a.offset,
                            byte_count=a.nbytes)
    return b


class Call:
    """Device, dtype and output kind of one op call.

    ``arrays`` maps argument names to the floating array arguments (``None`` for absent
    optional ones), in signature order. ``storage`` is their dtype, ``dtype`` the one the
    kernels compute in (``sources.compute_dtype``: float32 for 16-bit storage); every array
    made by :meth:`zeros`, :meth:`empty` and :meth:`dev` has ``dtype``, and :meth:`out` turns
    a result into ``storage``.
    """

    def __init__(self, arrays: dict, device=None):
        dtype, first = common_dtype((n, a) for n, a in arrays.items() if a is not None)
        if first is None:
            raise TypeError("no array argument given")
        self.numpy_out = isinstance(first, np.ndarray)
        if device is None and isinstance(first, cla.Array):
            device = first.queue
        self.device = resolve_device(device)
        check_in_order(self.device)
        self.storage = dtype
        self.dtype = self.device.check_dtype(compute_dtype(dtype))
        self.queue = self.device.queue
        if self.numpy_out and not shares_host_memory(self.device):
            results_scope.device = self.device      # (until the op returns: entry_point)
        #: the caller's host arrays read in place (:meth:`stored`), held until the call ends
        self._in_place: list[cla.Array] = []
        # device arrays are checked here, before any argument is copied or any kernel runs
        for name, a in arrays.items():
            if isinstance(a, cla.Array):
                self._check_device_array(name, a)

    def check_more(self, named) -> None:
        """Check arrays given after the call was made (``(name, array or None)`` pairs) as
        the constructor checks its own: arrays of the call's storage dtype, device arrays of
        its context and contiguous."""
        for name, a in named:
            if a is None:
                continue
            dtype, _ = common_dtype(((name, a),))
            if dtype != self.storage:
                raise TypeError(f"{name}: got dtype {dtype}, but the call's other arrays are "
                                f"{self.storage}; all floating arrays of one call must share "
                                "one dtype")
            if isinstance(a, cla.Array):
                self._check_device_array(name, a)

    def _check_device_array(self, name, a):
        if a.context != self.device.context:
            raise ValueError(f"{name}: the array lives in another OpenCL context than the "
                             f"device {self.device.info.name!r} of this call (its device= or "
                             "its first array's queue); pass arrays and queues of one context")
        if not a.flags.c_contiguous:
            raise ValueError(f"{name}: the device array is not contiguous (shape "
                             f"{list(a.shape)}, strides {a.strides}); pass a contiguous array")

    def __del__(self):
        # kernels may still read the caller's memory wrapped in place when a call ends by an
        # exception: wait for them before that memory can change or be freed
        if getattr(self, "_in_place", None):
            try:
                self.queue.finish()
            except Exception:  # noqa: BLE001 - (interpreter shutdown, a lost device)
                pass

    # -- inputs -----------------------------------------------------------------------------

    @property
    def converts(self) -> bool:
        """Whether the call's arrays are stored in another dtype than the kernels compute in."""
        return self.storage != self.dtype

    def dev(self, name, a, shape=None):
        """``a`` as a contiguous, zero-offset device array of the compute dtype (copied, and
        for 16-bit storage widened to float32, when needed; a NumPy array read where it lies
        where :meth:`_reads_in_place` says so)."""
        return self.devs((name, a, shape))[0]

    def devs(self, *items):
        """:meth:`dev` of each ``(name, array[, shape])`` (``None`` for an absent array); the
        16-bit ones are widened together, :data:`CONVERT_SLOTS` arrays per launch."""
        outs: list = []
        pending: list[tuple[int, cla.Array]] = []       # (index, 16-bit array to widen)
        for i, (name, a, *shape) in enumerate(items):
            if a is not None and shape and shape[0] is not None:
                check_shape(name, a, shape[0])
            out, to_widen = self._dev_one(name, a)
            outs.append(out)
            if to_widen:
                pending.append((i, out))
        if pending:
            widened = widen_many(self.device, [a for _, a in pending], self.storage)
            for (i, _), w in zip(pending, widened):
                outs[i] = w
        return outs

    def _dev_one(self, name, a) -> tuple:
        """``(array, to_widen)``: :meth:`dev` of one checked array, or with ``to_widen`` the
        16-bit device array still to widen."""
        if a is None:
            return None, False
        if self.converts:
            # 16-bit values travel as they are (half the bytes) and widen on the device, which
            # is ~20x faster than NumPy's float16 -> float32 cast
            if isinstance(a, cla.Array):
                self._check_device_array(name, a)
            check_memory(self.device, name, [a.size * self.dtype.itemsize])
            if a.size == 0:
                return cla.empty(self.queue, a.shape, self.dtype), False
            if isinstance(a, np.ndarray):
                a = self._from_host(a, self.storage)
            return a, True
        if isinstance(a, np.ndarray):
            check_memory(self.device, name, [a.size * self.dtype.itemsize])
            if a.size == 0:
                return cla.empty(self.queue, a.shape, self.dtype), False
            return self._from_host(a, self.dtype), False
        self._check_device_array(name, a)
        return _zero_offset(self.queue, a), False

    def inputs(self, *items, stored=()):
        """:meth:`devs` of each ``(name, array[, shape])``, but :meth:`stored` of those whose
        name is in ``stored`` (their 16-bit values handed to kernels that read or widen them
        themselves)."""
        wide = self.devs(*[item if item[0] not in stored else (item[0], None)
                           for item in items])
        return [self.stored(*item) if item[0] in stored else w
                for item, w in zip(items, wide)]

    def stored(self, name, a, shape=None):
        """``a`` on the device in the call's *storage* dtype: as :meth:`dev`, but a 16-bit
        array goes to the device as it is and is not widened (read in place or uploaded:
        :meth:`_from_host`). For arguments that kernels only read, and read in their storage
        dtype themselves (the weights: the recurrence's packs, ``cl/pack.cl``, and the
        GEMMs)."""
        if a is not None and shape is not None:
            check_shape(name, a, shape)
        if a is None or not self.converts:
            return self.dev(name, a)
        if isinstance(a, cla.Array):
            self._check_device_array(name, a)
            # kernels take a buffer without an offset (the whole-sequence forward's and
            # backward's 16-bit arguments): a view into a larger array is copied out
            return _zero_offset(self.queue, a)
        check_memory(self.device, name, [a.nbytes])
        if a.size == 0:
            return cla.empty(self.queue, a.shape, self.storage)
        return self._from_host(a, self.storage)

    def _from_host(self, a: np.ndarray, dtype) -> cla.Array:
        """The non-empty host array ``a`` on the device as ``dtype``: read where it lies
        (:func:`wrap_host`, held by the call until it ends) where :meth:`_reads_in_place`,
        else uploaded (:meth:`_upload`)."""
        if not self._reads_in_place(a, dtype):
            return self._upload(a, dtype)
        wrapped = wrap_host(self.queue, a)
        self._in_place.append(wrapped)
        return wrapped

    def is_callers(self, a: cla.Array, given) -> bool:
        """Whether ``a``, what :meth:`dev` (or :meth:`devs`, :meth:`stored`) made of the
        argument ``given``, is the caller's own memory: the caller's device array itself, or
        its NumPy array read in place (:meth:`_from_host`). Never write into such an array;
        an upload or a widened copy is the call's own."""
        return a is given or any(a is w for w in self._in_place)

    def _reads_in_place(self, a: np.ndarray, dtype) -> bool:
        """Whether the kernels read the host array ``a`` where it lies (:meth:`_from_host`)
        instead of a device copy of ``dtype``: NumPy in and out on a device sharing the host's
        memory (:func:`shares_host_memory`), ``a`` already of ``dtype``, contiguous and
        aligned. The call reads its results back before it returns, so its kernels are done
        with ``a`` by then; a call that raises first waits for them when it is dropped
        (``__del__``). Every array argument is one that kernels only read, as they read a
        caller's device array (``tests/test_host_memory.py`` holds every dialect to that)."""
        return (self.numpy_out and a.dtype == dtype and a.flags.c_contiguous
                and a.flags.aligned and shares_host_memory(self.device))

    def _upload(self, a: np.ndarray, dtype) -> cla.Array:
        """The host array ``a`` as a new device array of ``dtype``: from the pool where the
        call's results are (:func:`results_pooled`; also a host argument of a call on device
        arrays, such as sequence lengths), else :func:`_upload`'s. As there, the copy is
        enqueued without waiting where the call reads its results back before it returns or
        where it reads a private converted copy (pyopencl holds that until it is copied), and
        waits where it reads the caller's own memory in a call that returns device arrays (the
        caller may change it as soon as the op returns)."""
        if results_pooled(self.device) and a.size:
            host = np.ascontiguousarray(a, dtype=dtype)
            return write_host(temporary(self.device, host.shape, host.dtype), host,
                              wait=not self.numpy_out and np.may_share_memory(host, a))
        return _upload(self.queue, a, dtype, self.numpy_out)

    def host(self, name, a):
        """``a`` as a NumPy array (a device array is read back)."""
        if a is None:
            return None
        return to_host(a, self.queue) if isinstance(a, cla.Array) else np.asarray(a)

    def zeros(self, shape):
        self._check_alloc(shape)
        return result_zeros(self.device, shape, self.dtype)

    def empty(self, shape, dtype=None):
        """A new device array of the compute dtype for a result. In a call that converts, every
        such result is narrowed into an array of its own (:meth:`outs`) and then dropped, so it
        comes from the pool (:func:`temporary`) instead of a fresh buffer per result and call,
        freed with its narrowing still queued (measured on CPU devices: page faults; on NVIDIA's
        OpenCL the idle gaps around the 16-bit conversions stayed: they are host launch work,
        docs/benchmarks.md). ``dtype``: the call's storage dtype instead, for a result that
        kernels write narrowed themselves (a new array, returned as it is), or for a copy of
        part of a stored argument. Where :func:`results_pooled`, every result comes from the
        pool (:func:`sub_array` addresses parts of pooled arrays too)."""
        if dtype is not None and np.dtype(dtype) != self.dtype:
            assert np.dtype(dtype) == self.storage, dtype
            dtype = self.storage
        else:
            dtype = self.dtype
        self._check_alloc(shape, dtype)
        if self.converts and dtype == self.dtype:
            return temporary(self.device, shape, dtype)
        return result_array(self.device, shape, dtype)

    def _check_alloc(self, shape, dtype=None):
        check_memory(self.device, f"an array of shape {list(shape)}",
                     [math.prod(int(n) for n in shape) * (dtype or self.dtype).itemsize])

    def lengths(self, name, a, n, high):
        """An int32 device array of sequence lengths ``[n]`` with values in ``[0, high]``."""
        host = self.host(name, a)
        if host.dtype.kind not in "iu":
            raise TypeError(f"{name}: got dtype {host.dtype}, expected int32 or int64")
        check_shape(name, host, (n,))
        if host.size and (host.min() < 0 or host.max() > high):
            raise ValueError(f"{name}: values must lie in [0, {high}], got min {host.min()} "
                             f"and max {host.max()}")
        return self._upload(host, np.int32)

    # -- outputs ----------------------------------------------------------------------------

    def out(self, a, shape=None):
        """An output in the caller's kind (NumPy or device array) and storage dtype, reshaped
        to ``shape``."""
        return self.outs((a, shape))[0]

    def outs(self, *items) -> list:
        """:meth:`out` of each ``(array, shape)`` (shape ``None``: as it is); results of the
        compute dtype are narrowed together, :data:`CONVERT_SLOTS` per launch."""
        arrays = [a if shape is None or tuple(a.shape) == tuple(shape) else a.reshape(shape)
                  for a, shape in items]
        if self.converts:
            wide = [i for i, a in enumerate(arrays) if a.dtype != self.storage]
            for i, a in zip(wide, narrow_many(self.device, [arrays[i] for i in wide],
                                              self.storage)):
                arrays[i] = a
        if self.numpy_out:     # (mapped where the device's memory is the host's: no copy)
            return read_host(self.queue, [(a, 0, a.shape) for a in arrays],
                             shares_host_memory(self.device))
        return arrays
