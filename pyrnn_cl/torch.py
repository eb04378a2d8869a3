r"""PyTorch modules whose forward and backward run in pyrnn_cl's OpenCL kernels.

:class:`RNN`, :class:`LSTM` and :class:`GRU` are subclasses of ``torch.nn.RNN/LSTM/GRU``: same
constructor arguments (plus ``cl_device``), same parameters (``weight_ih_l{k}[_reverse]``,
``weight_hh_…``, ``bias_ih_…``, ``bias_hh_…``, ``weight_hr_…``), same initialisation, same
``state_dict`` (load one into the other with ``strict=True``, both ways), same inputs (a tensor
``[T, N, I]`` / ``[N, T, I]`` with ``batch_first`` / ``[T, I]`` unbatched, or a
``PackedSequence``, sorted or not) and the same outputs (``output, h_n`` or
``output, (h_n, c_n)``; a ``PackedSequence`` in gives a ``PackedSequence`` out). The maths is
torch.nn's, i.e. cuDNN's (API.md §3): LSTM gates (i, f, g, o), GRU (r, z, n) with
``n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))`` and ``h = (1 − z) ⊙ n + z ⊙ h_prev``.
Errors are instances of what torch.nn raises for the same mistake (``RuntimeError`` for shapes
and zero-length sequences, ``ValueError`` for an input dtype that differs from the parameters'):
:class:`pyrnn_cl.errors.ShapeError` and :class:`pyrnn_cl.errors.DTypeError` subclass both
pyrnn_cl's and torch's types.

**How it runs.** Two operators registered with ``torch.library.custom_op``:

* ``pyrnn_cl::rnn(x, h0, c0, params, lengths, seeds, …) -> (output, h_n, c_n, host_reserved)``
  calls :func:`pyrnn_cl.cudnn_rnn`;
* ``pyrnn_cl::rnn_backward(…, host_reserved, d_output, d_h_n, d_c_n, …) -> (dx, dh0, dc0,
  param_grads)`` calls :func:`pyrnn_cl.cudnn_rnn_backprop`; it is the first op's autograd
  formula (``register_autograd``).

Both have fake (meta) implementations that give the output shapes, so ``torch.compile`` (with
``fullgraph=True``: no graph break inside the modules) and ``torch.export`` trace through them,
and both pass ``torch.library.opcheck``. Their arguments and results are CPU tensors and plain
values only; the OpenCL device is named by a string (a device spec, or a key of this process's
table of ``cl_device`` objects). Their last argument, ``revision``, a digest of this file, keeps
torch's on-disk compile caches from reusing a graph traced through another version of it.

Plain eager calls skip the operators' Python layers (about 0.5 ms per forward+backward): they
run the same forward and backward bodies through a ``torch.autograd.Function``, with the same
saved tensors, and keep the device state on its context. Anything that traces or transforms
(``torch.compile``, ``torch.export``, ``torch.jit.trace``, dispatch and function modes,
functorch, tensor subclasses) takes the operators.

**What stays on the OpenCL device.**

* The flat cuDNN ``params`` buffer, built from the parameter tensors (each is one contiguous
  run of it: canonical order = torch's chunks) and uploaded again only when a parameter's
  identity (its storage), ``_version`` or values change, i.e. after an optimizer step or
  ``load_state_dict``. The values are compared with the host copy of the last upload (host
  memory only), because an in-place edit through ``.data`` (``gradcheck`` perturbs its inputs
  so) leaves the version counter alone.
* Between forward and backward, the reserve space and the device copies of ``x``, ``h_0``,
  ``c_0`` and the parameters (the backward uses the forward's: the saved tensors' version check
  guarantees they are current), in a side table keyed on the ``host_reserved`` tensor that the
  forward returns (a 16-byte int8 CPU tensor: the op's signature of cuDNN's
  ``host_reserved``). The autograd graph saves that tensor for backward, so the device state
  lives exactly as long as the graph: the entry is dropped when the tensor's storage is freed
  (a weak reference). This is correct under ``torch.compile`` and ``torch.export`` too, because
  the entry is an optimisation, never the only copy of anything: a backward whose
  ``host_reserved`` has no entry (a copied tensor, an exported program loaded elsewhere) runs
  the forward again on the device to rebuild the reserve space (the kernels are deterministic,
  dropout included), which gives the same gradients.
* The gradient of every parameter is downloaded once, from its run of the flat ``dparams``
  straight into a fresh tensor that autograd then takes as the parameter's ``.grad`` (no host
  copy); in eager calls the whole ``dparams`` comes in one transfer and the gradients are
  views of it, as torch's cuDNN RNN returns views of its flat gradient buffer.
* Where the device's memory is the host's (PoCL's CPU devices), results are mapped rather
  than copied: the output and gradient tensors are the device buffers themselves; inputs are
  wrapped in place; and the parameters, which ``flatten_parameters`` makes views of one flat
  tensor in the ``params`` layout (as torch.nn does for cuDNN), are read in place: no upload
  and no comparison of values.
* Initial states that the module makes (``hx=None``) are zeros kept on the device.

The transfers left per call are the input, the initial states and the outputs (forward) and
their gradients (backward): torch has no OpenCL device, so its tensors live on the CPU and
cross to the device and back once each.

**Autograd.** ``x``, ``h_0``, ``c_0`` and the parameters are saved with
``ctx.save_for_backward``, so modifying any of them in place between forward and backward
raises torch's usual version-counter ``RuntimeError``. Any subset may require gradients.
Double backward is not supported: a backward with ``create_graph=True`` raises a
``RuntimeError`` as soon as it reaches these modules (no term is dropped silently). The forward
keeps its state for backward in training mode and whenever a gradient is wanted (the op's
``training`` flag is a constant of a traced graph: a program exported from a module whose
parameters require grad keeps it, and keeps state it may not need); the gradient of an unused
output is not materialised (nothing is uploaded for it).

Tensors must live on the CPU (``cl_device`` picks the OpenCL device); dtypes float32, float64
(needs ``cl_khr_fp64``), float16 and bfloat16 (16-bit storage with float32 maths; bfloat16
needs no ml_dtypes here). ``cl_device``: ``None`` (pyrnn_cl's default), a device spec
string (``"0:0"``, ``"pocl"``, ``"gpu"``, …), a :class:`pyrnn_cl.devices.Device` or a
``pyopencl.CommandQueue``. A spec string keeps the module picklable and an exported program
valid in another process.

**torch.compile.** A ``PackedSequence`` input works, with graph breaks around it (Dynamo does
not trace ``pack_padded_sequence``). Dynamo graph-breaks on every instance of
``torch.nn.RNN/LSTM/GRU`` unless ``torch._dynamo.config.allow_rnn`` is set (its only effect),
and these modules are such instances; this module sets it to ``True`` when it still holds its
default, as soon as Dynamo's config is imported (this module does not import Dynamo itself: that
costs a second), which also lets Dynamo trace torch.nn's own RNN modules. Set it back to
``False`` to restore Dynamo's default (the modules then run outside the compiled graph,
correctly).

Dropout (``dropout > 0``, ``num_layers > 1``, training mode) is applied between layers as in
torch.nn, but the mask comes from pyrnn_cl's counter-based Philox generator keyed by two seeds
drawn from torch's RNG on each call (``torch.randint``), so it is reproducible with
``torch.manual_seed`` and identical on every OpenCL device — and **different from the mask
torch.nn would draw** (and, under ``torch.compile``, from the eager one: Inductor draws the
seeds with its own generator). Forward and backward of one call use the same mask.

``import pyrnn_cl`` never imports this module (nor torch); ``import pyrnn_cl.torch`` does.
"""

import contextlib
import functools
import hashlib
import importlib.abc
import importlib.machinery
import sys
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Union

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

try:
    import torch
except ImportError as _exc:
    raise ImportError(f'pyrnn_cl.torch needs PyTorch ({_exc}): pip install "pyrnn_cl[torch]"',
                      name="torch") from _exc
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from . import cudnn as _cudnn
from . import sources as _sources
from ._arrays import (
    empty,
    fill,
    read_host,
    results_inside,
    shares_host_memory,
    temporary,
    wrap_host,
    write_host,
)
from ._types import DeviceArg
from .devices import resolve_device
from .errors import DTypeError, ShapeError, TensorDeviceError, UnsupportedError
from .layout import HOST_RESERVED_SIZE, make_layout

__all__ = ["RNN", "LSTM", "GRU"]

_MODES = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}
#: torch dtypes the modules run in, and NumPy's dtype for each (the storage dtypes of the
#: cuDNN dialect; torch.bfloat16 maps to ml_dtypes.bfloat16 where installed, which the ``torch``
#: extra does, and otherwise to the container of its bits, ``sources.BFLOAT16_BITS``).
_NUMPY_DTYPES = {torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64),
                 torch.float16: np.dtype(np.float16),
                 torch.bfloat16: (_sources.BFLOAT16 if _sources.BFLOAT16 is not None
                                  else _sources.BFLOAT16_BITS)}
_DTYPES = tuple(_NUMPY_DTYPES)
_LOCK = threading.Lock()

# Counters of the device-side caches (read by the tests): parameter uploads, calls that read the
# parameters in place, reserve spaces found in the side table by a backward, and forwards re-run
# by a backward that found none, and backwards that ran what their forward prepared.
STATS = {"params_uploads": 0, "params_in_place": 0, "reserve_hits": 0,
         "reserve_recomputes": 0, "backward_prepared": 0}


# ---- the OpenCL device of an op call ---------------------------------------------------------

# "#<n>" -> a cl_device object (Device or CommandQueue) of this process
_DEVICE_OBJECTS: dict[str, Any] = {}


def _device_key(cl_device) -> str:
    """The string that names ``cl_device`` in an op call: ``""`` for the default device, the spec
    string itself, or ``"#<n>"`` for an object (kept in this process's table)."""
    if cl_device is None:
        return ""
    if isinstance(cl_device, str):
        return cl_device
    key = f"#{id(cl_device)}"
    with _LOCK:
        _DEVICE_OBJECTS.setdefault(key, cl_device)
    return key


def _device(key: str):
    if not key:
        return resolve_device(None)
    if key.startswith("#"):
        obj = _DEVICE_OBJECTS.get(key)
        if obj is None:
            raise RuntimeError(f"pyrnn_cl.torch: device {key!r} names a cl_device object of "
                               "another process; build the module with a device spec string "
                               "(cl_device='0:0', 'pocl', ...) to run it in another process")
        return resolve_device(obj)
    return resolve_device(key)


# ---- layout of torch's parameters in the flat cuDNN params ------------------------------------

@functools.lru_cache(maxsize=256)
def _slots(mode, L, I, H, D, P, bias):
    """``(layout, [(offset, numel)])``: where each of torch's parameter tensors (order
    ``w_ih, w_hh, [b_ih, b_hh], [w_hr]`` per layer and direction) lies in the flat params. Each is
    one contiguous run (semantics.md §3: W_0..W_{G-1}, R_0..R_{G-1}, W_proj, bW, bR per
    pseudo-layer)."""
    lay = make_layout(L, H, I, rnn_mode=mode,
                      direction="bidirectional" if D == 2 else "unidirectional", num_proj=P)
    GH = lay.GH
    slots = []
    for l in range(L):
        for d in range(D):
            slots += [(lay.off_w(l, d), lay.w_size(l)), (lay.off_r(l, d), GH * lay.R)]
            if bias:
                slots += [(lay.off_bw(l, d), GH), (lay.off_br(l, d), GH)]
            if P:
                slots.append((lay.off_proj(l, d), P * H))
    return lay, slots


def _numpy(t: Tensor) -> np.ndarray:
    """``t``'s values as a NumPy array (no copy where possible); a bfloat16 tensor, which NumPy
    cannot take directly, goes through its bits."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(_NUMPY_DTYPES[torch.bfloat16])
    return t.numpy()


def _tensor(a: np.ndarray) -> Tensor:
    """The CPU tensor sharing ``a``'s memory (bfloat16 through its bits)."""
    if a.dtype == _NUMPY_DTYPES[torch.bfloat16]:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _upload(dev, t: Optional[Tensor]):
    """``t`` on the device. Where the device's memory is the host's
    (``VendorProfile.shares_host_memory``), a read-only ``USE_HOST_PTR`` buffer over ``t``'s
    own memory (no copy, no queue command; the buffer holds the memory alive, and the autograd
    graph's version check keeps saved inputs unchanged until backward); elsewhere a copy into
    memory of the device's pool (:func:`pyrnn_cl._arrays.temporary`: no fresh pages to fault
    in on every call), enqueued without waiting (pyopencl keeps the host array alive until it
    is done)."""
    if t is None:
        return None
    a = _numpy(t)
    if a.size == 0:
        return cla.empty(dev.queue, a.shape, a.dtype)
    if shares_host_memory(dev):
        # (the caller keeps the array until the commands that read it have finished: pyopencl
        # holds ``a`` only as long as the buffer object lives, not until the device is done)
        return wrap_host(dev.queue, a)
    return write_host(temporary(dev, a.shape, a.dtype), a, wait=False)


# (device key, shape, dtype) -> a device array of zeros, never written
_ZEROS: dict[tuple, cla.Array] = {}


def _zeros_on(dev, dkey, t: Tensor):
    """A device array of zeros shaped as ``t`` (an initial state the module made because
    ``hx`` was None), made once per shape: the ops only read their initial states, and an
    upload costs a device command (~50 µs on PoCL) for every call."""
    a = _numpy(t)
    key = (dkey, a.shape, a.dtype)
    z = _ZEROS.get(key)
    if z is None:
        z = fill(empty(dev.queue, a.shape, a.dtype), 0)
        with _LOCK:
            if len(_ZEROS) >= 16:
                _ZEROS.clear()
            _ZEROS[key] = z
    return z


def _read(dev, reads, wait=True) -> list:
    """New CPU tensors from regions of device arrays, ``reads`` = ``(array, element offset,
    shape)`` each (:func:`pyrnn_cl._arrays.read_host`: results mapped, not copied, where the
    device's memory is the host's). ``wait=False``: mapped tensors hold their values only
    once ``dev.queue`` is finished, which the caller does before anything reads them (copied
    ones are complete on return: the copies block)."""
    return [_tensor(h) for h in read_host(dev.queue, reads, shares_host_memory(dev), wait)]


def _ops_inside(dev):
    """Around the bridge's calls of the cuDNN-dialect ops: their results come from the pool
    (``_arrays.results_inside``) on a device whose memory is not the host's, where the bridge
    copies every result into a tensor (or keeps it for the backward) and drops it; where the
    memory is the host's, results are mapped into tensors in place and keep buffers of their
    own."""
    return contextlib.nullcontext() if shares_host_memory(dev) else results_inside(dev)


class _ParamsEntry:
    """A cached upload: the flat host copy, its device array, the parameters' storages (weak)
    and versions, and per parameter ``(its data pointer, its run of the host copy, bytes)``
    for the value check (``None`` for a non-contiguous parameter)."""

    __slots__ = ("refs", "versions", "host", "array", "runs")


# key -> _ParamsEntry (the device params of one set of parameters)
_PARAMS: dict[tuple, "_ParamsEntry"] = {}


def _storage_key(p):
    return (id(p.untyped_storage()), p.storage_offset(), tuple(p.shape), tuple(p.stride()))


def _drop_params(key, ref):
    with _LOCK:
        entry = _PARAMS.get(key)
        if entry is not None and any(r is ref for r in entry.refs):
            del _PARAMS[key]


def _find_memcmp():
    """The C library's ``memcmp`` through ctypes (``None`` where there is none): it compares
    8 MiB of parameters in about two thirds of ``np.array_equal``'s time, and allocates
    nothing."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or ctypes.util.find_library("msvcrt"))
        fn = libc.memcmp
    except (OSError, AttributeError, TypeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return fn


_MEMCMP = _find_memcmp()


def _same_bits(p, host) -> bool:
    """Whether parameter ``p`` holds exactly the bits of the flat host copy ``host`` (bytes,
    not values: exact for NaNs and signed zeros; NumPy's comparison and ``torch.equal`` are
    several times slower next to busy OpenCL threads)."""
    a = _numpy(p).reshape(-1)
    if a.nbytes != host.nbytes:
        return False
    if _MEMCMP is not None:
        return _MEMCMP(a.ctypes.data, host.ctypes.data, a.nbytes) == 0
    ints: np.dtype = np.dtype(f"i{a.dtype.itemsize}")
    return np.array_equal(a.view(ints), host.view(ints))


def _device_params(dev, dkey, slots, size, params, check_values=True):
    """``(entry, uploaded)``: the cached upload (:class:`_ParamsEntry`) of the flat params of
    ``params`` on ``dev``, and whether this call uploaded it.

    Uploaded again only when a parameter's storage, ``_version`` or values differ from the
    cached upload's. The values are compared with the host copy that was uploaded (a read of
    host memory, no transfer): an in-place edit through ``.data`` (as ``gradcheck`` makes, or
    weight clipping with ``p.data.clamp_``) leaves the version counter alone. With
    ``check_values=False`` the caller compares them later, with :func:`_params_current`."""
    key = (dkey, str(params[0].dtype), size, tuple(_storage_key(p) for p in params))
    versions = tuple(p._version for p in params)
    entry = _PARAMS.get(key)
    if (entry is not None and entry.versions == versions
            and all(r() is p.untyped_storage() for r, p in zip(entry.refs, params))
            and (not check_values or _params_current(entry, slots, params))):
        return entry, False
    flat = torch.zeros(size, dtype=params[0].dtype)
    for (off, n), p in zip(slots, params):
        flat[off:off + n] = p.detach().reshape(-1)
    entry = _ParamsEntry()
    entry.host, entry.versions = _numpy(flat), versions
    entry.array = write_host(empty(dev.queue, entry.host.shape, entry.host.dtype), entry.host,
                             wait=True)
    isz = entry.host.dtype.itemsize
    entry.runs = [(p.data_ptr(), entry.host.ctypes.data + off * isz, n * isz)
                  if p.is_contiguous() else None for (off, n), p in zip(slots, params)]
    entry.refs = [weakref.ref(p.untyped_storage(), functools.partial(_drop_params, key))
                  for p in params]
    with _LOCK:
        _PARAMS[key] = entry
        STATS["params_uploads"] += 1
    return entry, True


def _flat_view(slots, size, params):
    """The storage of which ``params`` are, each at its slot, contiguous views (what
    ``flatten_parameters`` makes), or ``None``."""
    storage = params[0].untyped_storage()
    isz = params[0].element_size()
    if storage.nbytes() < size * isz:
        return None
    base = storage.data_ptr()
    for (off, n), p in zip(slots, params):
        if (p.dtype != params[0].dtype or p.numel() != n or not p.is_contiguous()
                or p.storage_offset() != off or p.untyped_storage().data_ptr() != base):
            return None
    return storage


def _in_place_params(dev, slots, size, params):
    """Where the device's memory is the host's: the flat tensor the parameters are views of
    (:meth:`_CLRNNMixin.flatten_parameters`), wrapped in place by :func:`_upload` per call
    (about 12 us: the call's state holds it, so it outlives the commands reading it; a cached
    one would keep the module's memory alive); ``None`` when they are not such views."""
    if not shares_host_memory(dev):
        return None
    storage = _flat_view(slots, size, params)
    if storage is None:
        return None
    STATS["params_in_place"] += 1
    return _upload(dev, torch.empty(0, dtype=params[0].dtype).set_(storage, 0, (size,)))


def _host_shares_cores(dev) -> bool:
    """Whether the device's threads run on the host's cores (a CPU device), so that host work
    done while the device runs slows the kernels: there the parameters' values are compared
    before the forward is launched (a comparison meanwhile slowed the forward by more than it
    took), elsewhere while it runs."""
    return dev.info.type == "cpu"


def _prepares_backward(dev) -> bool:
    """Whether a training forward that a backward will follow prepares that backward while the
    device runs (:func:`_forward`'s ``prepare``): where the device has cores of its own. On a
    CPU device the work only moves: on PoCL (2-core Zen 4, pinned workers), timed call by call
    against not preparing with the order alternating (tools/bridge_prepare_ab.py), LSTM
    128/64 N=8 T=100 forward+backward 5.64 against 5.70 ms and LSTM 512/16 32.0 against
    31.8 ms (the forward grew by what the gap before the backward lost), so it does not
    prepare there and holds no backward arrays from its forward."""
    return not _host_shares_cores(dev)


def _params_current(entry, slots, params) -> bool:
    """Whether ``params`` hold exactly the values of ``entry``'s upload: ``memcmp`` of the
    recorded pointers while a parameter's data pointer is the recorded one (no tensor call),
    else :func:`_same_bits`."""
    for (off, n), p, run in zip(slots, params, entry.runs):
        if run is not None and _MEMCMP is not None and p.data_ptr() == run[0]:
            if _MEMCMP(*run) != 0:
                return False
        elif not _same_bits(p, entry.host[off:off + n]):
            return False
    return True


def _forget_params(params):
    """Drop every cached upload that uses one of ``params``' storages."""
    ids = {id(p.untyped_storage()) for p in params}
    with _LOCK:
        for key in [k for k, e in _PARAMS.items() if any(id(r()) in ids for r in e.refs)]:
            del _PARAMS[key]


# ---- the reserve space between forward and backward -------------------------------------------

class _Reserve:
    """Device state of one forward: the inputs and parameters as uploaded, and the reserve
    space; ``ref`` (once kept) is a weak reference to the storage of the ``host_reserved``
    tensor the forward returned."""

    __slots__ = ("ref", "x", "h0", "c0", "params", "reserve", "plan")


# id(storage of host_reserved) -> _Reserve
_RESERVES: dict[int, "_Reserve"] = {}


def _drop_reserve(key, ref):
    with _LOCK:
        entry = _RESERVES.get(key)
        if entry is not None and entry.ref is ref:
            del _RESERVES[key]


def _keep_reserve(host_t, entry):
    storage = host_t.untyped_storage()
    key = id(storage)
    entry.ref = weakref.ref(storage, functools.partial(_drop_reserve, key))
    with _LOCK:
        _RESERVES[key] = entry


def _find_reserve(host_t):
    storage = host_t.untyped_storage()
    entry = _RESERVES.get(id(storage))
    if entry is not None and entry.ref() is storage:
        return entry
    return None


# ---- the operators ----------------------------------------------------------------------------

#: The last argument of both ops: a digest of this file. torch's persistent compile caches
#: (AOTAutograd's and Inductor's, on disk) key a compiled graph on the traced graph, which holds
#: the ops by name but not the autograd formula or the fake implementations traced through them;
#: with this constant in the graph, a graph traced through another version of this file is
#: never reused. The ops accept any value (an exported program of another version runs).
_REVISION = hashlib.blake2b(Path(__file__).read_bytes(), digest_size=8).hexdigest()

class _Attrs(NamedTuple):
    """The non-tensor arguments of both ops, in their schemas' order."""

    mode: str
    num_layers: int
    input_size: int
    hidden_size: int
    bidirectional: bool
    proj_size: int
    bias: bool
    dropout: float
    batch_first: bool

    def slots(self):
        return _slots(self.mode, self.num_layers, self.input_size, self.hidden_size,
                      2 if self.bidirectional else 1, self.proj_size, self.bias)

    def kwargs(self, seeds, dev):
        seed, seed2 = (int(s) for s in seeds.tolist())
        return dict(rnn_mode=self.mode,
                    direction="bidirectional" if self.bidirectional else "unidirectional",
                    dropout=self.dropout, seed=seed, seed2=seed2, num_proj=self.proj_size,
                    time_major=not self.batch_first, device=dev)


def _lengths(lengths):
    return None if lengths is None else lengths.numpy().astype(np.int64)


def _run_forward(x, h0, c0, params, lengths, seeds, attrs, training, device,
                 zero_state=False):
    """The device side of ``pyrnn_cl::rnn``: ``(state, output, h_n, c_n, host_reserved)``, the
    last four as :func:`pyrnn_cl.cudnn_rnn` returns them, ``state`` a :class:`_Reserve`.
    ``zero_state``: ``h0`` and ``c0`` are zeros made by the module (no upload)."""
    dev = _device(device)
    lay, slots = attrs.slots()
    lstm = attrs.mode == "lstm"
    st = _Reserve()
    st.plan = None
    st.x = _upload(dev, x)
    if zero_state:
        st.h0, st.c0 = _zeros_on(dev, device, h0), (_zeros_on(dev, device, c0) if lstm else None)
    else:
        st.h0, st.c0 = _upload(dev, h0), (_upload(dev, c0) if lstm else None)

    def run():
        with _ops_inside(dev):
            return _cudnn.cudnn_rnn(st.x, st.h0, st.c0, st.params, _lengths(lengths),
                                    is_training=training, **attrs.kwargs(seeds, dev))

    st.params = _in_place_params(dev, slots, lay.size, params)
    if st.params is not None:                   # the parameters' own memory: always current
        out, hn, cn, st.reserve, host = run()
        return st, out, hn, cn, host
    # The parameters' values are compared with the cached upload's before the launch where
    # the device's threads share the host's cores (a comparison meanwhile slowed the forward
    # by more than it took), and while the device runs elsewhere; parameters changed behind
    # torch's version counter then make the forward run again, after an upload.
    check_first = _host_shares_cores(dev)
    entry, uploaded = _device_params(dev, device, slots, lay.size, params, check_first)
    st.params = entry.array
    out, hn, cn, st.reserve, host = run()
    if not (check_first or uploaded or _params_current(entry, slots, params)):
        st.params = _device_params(dev, device, slots, lay.size, params)[0].array
        out, hn, cn, st.reserve, host = run()
    return st, out, hn, cn, host


def _forward(x, h0, c0, params, lengths, seeds, attrs, training, device, zero_state=False,
             wait=True, prepare=False):
    """:func:`_run_forward` with its results read into CPU tensors: ``(state, output, h_n,
    c_n, host_reserved)``. ``wait=False``: mapped reads are enqueued, not waited for (see
    :func:`_read`). ``prepare`` (a training forward that a backward will follow; see
    :func:`_prepares_backward`): the backward's host work up to the upstream gradients is done
    now, while the device runs the forward (:func:`pyrnn_cl.cudnn._prepare_backprop`, kept on
    ``state``), not between the forward's end and the backward's first kernel, where the
    device would wait for it. Its result arrays are then held from the forward on."""
    state, *results = _run_forward(x, h0, c0, params, lengths, seeds, attrs, training, device,
                                   zero_state)
    host_d = results[-1]
    # host_reserved's values are known on the host (no read: one device command fewer)
    known = _cudnn._known_signature(host_d)
    if known is not None:
        results.pop()
    dev = _device(device)
    got = _read(dev, [(a, 0, a.shape) for a in results], wait)
    if known is not None:
        got.append(_tensor(np.frombuffer(known, np.int8).copy()))
    if prepare and training and _prepares_backward(dev):
        try:
            with _ops_inside(dev):
                state.plan = _cudnn._prepare_backprop(state.x, state.h0, state.c0,
                                                     state.params, _lengths(lengths),
                                                     state.reserve, host_d,
                                                     **attrs.kwargs(seeds, dev))
        except (UnsupportedError, cl.MemoryError):
            # the backward's memory does not fit beside the forward's results now: the forward
            # still succeeds, and the backward, if one comes, builds its plan (or says so) then
            pass
    return (state, *got)


def _backward(st, x, h0, c0, params, lengths, seeds, host_reserved, d_output, d_h_n, d_c_n,
              attrs, device, params_grad, grad_views=False, wanted=(True, True, True)):
    """The device side of ``pyrnn_cl::rnn_backward``: ``(dx, dh0, dc0, param_grads)`` as CPU
    tensors, for the forward whose device state is ``st`` (a :class:`_Reserve`; ``None``: run
    that forward again to rebuild it). With ``grad_views`` the parameters' gradients are views
    of one tensor, read in one transfer (as torch's cuDNN RNN returns views of its flat
    gradient buffer); an operator may not return aliasing outputs, so its are separate.
    ``wanted``: which of ``dx, dh0, dc0`` to read (``None`` in their place otherwise)."""
    if st is None:
        st = _run_forward(x, h0, c0, params, lengths, seeds, attrs, True, device)[0]
        STATS["reserve_recomputes"] += 1
    else:
        STATS["reserve_hits"] += 1
    dev = _device(device)
    # the uploads stay referenced until the results are read: an upload that wraps the
    # tensor's own memory (_upload) must outlive the commands that read it
    uploads = (_upload(dev, d_output), _upload(dev, d_h_n),
               _upload(dev, d_c_n) if attrs.mode == "lstm" else None)
    plan, st.plan = st.plan, None           # (a prepared backprop runs once)
    if plan is not None:
        STATS["backward_prepared"] += 1
        with _ops_inside(dev):
            dx, dh0, dc0, dparams = _cudnn._run_backprop(plan, *uploads)
    else:
        with _ops_inside(dev):
            dx, dh0, dc0, dparams = _cudnn.cudnn_rnn_backprop(
                st.x, st.h0, st.c0, st.params, _lengths(lengths), None, None, None, *uploads,
                st.reserve, _numpy(host_reserved), **attrs.kwargs(seeds, dev))
    # each parameter's gradient is its run of dparams
    slots = attrs.slots()[1]
    if not params_grad:
        runs = []
    elif grad_views:
        runs = [(dparams, 0, dparams.shape)]
    else:
        runs = [(dparams, off, p.shape) for (off, _), p in zip(slots, params)]
    inputs = [a for a, want in zip((dx, dh0, dc0), wanted) if want]
    # mapped result tensors are made while the device still runs, then one wait (_read)
    got = _read(dev, [(a, 0, a.shape) for a in inputs] + runs, wait=False)
    (dx, dh0, dc0), grads = ([got.pop(0) if want else None for want in wanted],
                             got)
    if grad_views and grads:
        grads = [grads[0][off:off + n].view(p.shape) for (off, n), p in zip(slots, params)]
    dev.queue.finish()
    del uploads
    return dx, dh0, dc0, grads


@torch.library.custom_op("pyrnn_cl::rnn", mutates_args=())
def _rnn_op(x: Tensor, h0: Tensor, c0: Tensor, params: list[Tensor], lengths: Optional[Tensor],
            seeds: Tensor, mode: str, num_layers: int, input_size: int, hidden_size: int,
            bidirectional: bool, proj_size: int, bias: bool, dropout: float, batch_first: bool,
            training: bool, device: str,
            revision: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``rc.cudnn_rnn`` on CPU tensors: ``x`` ``[T, N, I]`` (``[N, T, I]`` with
    ``batch_first``), ``h0`` ``[L·D, N, R]``, ``c0`` ``[L·D, N, H]`` (LSTM; empty otherwise),
    ``params`` torch's parameter tensors in ``_flat_parameters`` order, ``lengths`` int64
    ``[N]`` or None, ``seeds`` int64 ``[2]`` (dropout). Returns ``output``, ``h_n``, ``c_n``
    (empty for non-LSTM modes) and ``host_reserved`` (int8 ``[16]``; empty unless
    ``training``), which keys the device state that ``pyrnn_cl::rnn_backward`` reads."""
    attrs = _Attrs(mode, num_layers, input_size, hidden_size, bidirectional, proj_size, bias,
                   dropout, batch_first)
    state, out, hn, cn, host_t = _forward(x, h0, c0, params, lengths, seeds, attrs, training,
                                          device)
    if training:
        _keep_reserve(host_t, state)
    return out, hn, cn, host_t


@_rnn_op.register_fake
def _rnn_fake(x, h0, c0, params, lengths, seeds, *attrs_training_device_revision):
    a = _Attrs(*attrs_training_device_revision[:len(_Attrs._fields)])
    training = attrs_training_device_revision[len(_Attrs._fields)]
    D, R = 2 if a.bidirectional else 1, a.proj_size or a.hidden_size
    T, N = (x.shape[1], x.shape[0]) if a.batch_first else (x.shape[0], x.shape[1])
    out = x.new_empty((N, T, D * R) if a.batch_first else (T, N, D * R))
    hn = x.new_empty((a.num_layers * D, N, R))
    cn = x.new_empty((a.num_layers * D, N, a.hidden_size) if a.mode == "lstm" else (0,))
    host = x.new_empty((HOST_RESERVED_SIZE if training else 0,), dtype=torch.int8)
    return out, hn, cn, host


@torch.library.custom_op("pyrnn_cl::rnn_backward", mutates_args=())
def _rnn_backward_op(x: Tensor, h0: Tensor, c0: Tensor, params: list[Tensor],
                     lengths: Optional[Tensor], seeds: Tensor, host_reserved: Tensor,
                     d_output: Optional[Tensor], d_h_n: Optional[Tensor],
                     d_c_n: Optional[Tensor], mode: str, num_layers: int, input_size: int,
                     hidden_size: int, bidirectional: bool, proj_size: int, bias: bool,
                     dropout: float, batch_first: bool, device: str, params_grad: bool,
                     revision: str) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
    """``rc.cudnn_rnn_backprop`` for a training forward of ``pyrnn_cl::rnn`` with these
    arguments; ``d_*`` may be None (zero). Returns ``dx``, ``dh0``, ``dc0`` (empty for non-LSTM
    modes) and the gradient of each tensor of ``params`` (an empty list unless
    ``params_grad``)."""
    attrs = _Attrs(mode, num_layers, input_size, hidden_size, bidirectional, proj_size, bias,
                   dropout, batch_first)
    if host_reserved.numel() == 0:
        raise RuntimeError("pyrnn_cl::rnn_backward: host_reserved is empty (the forward ran "
                           "with training=False and saved nothing for backward)")
    # the forward's device state: its inputs and parameters as uploaded (the saved tensors'
    # version check guarantees they are still current) and its reserve space; none kept for
    # this forward: rebuilt, same result
    return _backward(_find_reserve(host_reserved), x, h0, c0, params, lengths, seeds,
                     host_reserved, d_output, d_h_n, d_c_n, attrs, device, params_grad)


@_rnn_backward_op.register_fake
def _rnn_backward_fake(x, h0, c0, params, lengths, seeds, host_reserved, d_output, d_h_n, d_c_n,
                       *attrs_device_grad_revision):
    a = _Attrs(*attrs_device_grad_revision[:len(_Attrs._fields)])
    params_grad = attrs_device_grad_revision[-2]
    dc0 = torch.empty_like(c0) if a.mode == "lstm" else x.new_empty(0)
    return (torch.empty_like(x), torch.empty_like(h0), dc0,
            [p.new_empty(p.shape) for p in params] if params_grad else [])


_TENSOR_ARGS = 6      # x, h0, c0, params, lengths, seeds; then _Attrs, training, device, revision


def _setup_context(ctx, inputs, output):
    x, h0, c0, params, lengths, seeds = inputs[:_TENSOR_ARGS]
    ctx.save_for_backward(x, h0, c0, lengths, seeds, output[3], *params)
    ctx.attrs = _Attrs(*inputs[_TENSOR_ARGS:_TENSOR_ARGS + len(_Attrs._fields)])
    ctx.device = inputs[-2]
    ctx.set_materialize_grads(False)       # an unused output's gradient stays None: no upload


def _refuse_double_backward():
    """Raise when a backward runs with ``create_graph=True`` (grad mode on inside backward):
    ours is not differentiable, and a graph without its terms would be silently wrong."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            "pyrnn_cl.torch: double backward is not supported (a backward with "
            "create_graph=True reached an RNN/LSTM/GRU of pyrnn_cl, whose backward is not "
            "differentiable); use torch.nn's module where second derivatives are needed")


def _wanted_grads(grads, need) -> list:
    """The parameters' gradients for autograd: each where its flag in ``need`` is set, else
    None (all None when none was computed)."""
    return [g if n else None for g, n in zip(grads, need)] if grads else [None] * len(need)


def _rnn_autograd(ctx, d_output, d_h_n, d_c_n, _d_host):
    _refuse_double_backward()
    x, h0, c0, lengths, seeds, host, *params = ctx.saved_tensors
    needs = ctx.needs_input_grad
    need_p = list(needs[3])
    dx, dh0, dc0, grads = torch.ops.pyrnn_cl.rnn_backward(
        x, h0, c0, params, lengths, seeds, host, d_output, d_h_n, d_c_n, *ctx.attrs,
        ctx.device, any(need_p), _REVISION)
    pgrads = _wanted_grads(grads, need_p)
    lstm = ctx.attrs.mode == "lstm"
    return ((dx if needs[0] else None, dh0 if needs[1] else None,
             dc0 if (needs[2] and lstm) else None, pgrads)
            + (None,) * (len(needs) - 4))


_rnn_op.register_autograd(_rnn_autograd, setup_context=_setup_context)


# ---- eager calls: the same bodies without the operator machinery ------------------------------

class _EagerRNN(torch.autograd.Function):
    """What ``pyrnn_cl::rnn`` and its autograd formula do, for plain eager calls.

    The operators' Python layers (schema checks, Dynamo's ``disable`` wrapper, the autograd
    wrapper of ``custom_op``) cost about 0.5 ms per forward+backward, a tenth of a small LSTM's
    time; this Function calls the same :func:`_forward` and :func:`_backward` with the same
    saved tensors (so the same version-counter checks) and keeps the device state on its
    context. :func:`_eager` decides which path a call takes: tracing, compiling, exporting,
    tensor subclasses and dispatch modes all take the operators."""

    @staticmethod
    def forward(ctx, attrs, training, device, zero_state, x, h0, c0, lengths, seeds, *params):
        # mapped results not waited for: the caller finishes the queue (_eager_rnn), after
        # autograd's bookkeeping, which then overlaps the device's work
        state, out, hn, cn, host = _forward(x, h0, c0, params, lengths, seeds, attrs, training,
                                            device, zero_state, wait=False,
                                            prepare=any(ctx.needs_input_grad))
        ctx.attrs, ctx.device = attrs, device
        ctx.state, ctx.lengths, ctx.seeds, ctx.host = (state if training else None), lengths, \
            seeds, host
        ctx.save_for_backward(x, h0, c0, *params)
        ctx.set_materialize_grads(False)   # an unused output's gradient stays None: no upload
        return out, hn, cn

    @staticmethod
    def backward(ctx, d_output, d_h_n, d_c_n):
        _refuse_double_backward()
        if ctx.state is None:
            raise RuntimeError("pyrnn_cl.torch: backward through a forward that ran with "
                               "training=False and saved nothing for backward")
        x, h0, c0, *params = ctx.saved_tensors
        needs = ctx.needs_input_grad[4:]
        need_p = needs[5:]
        lstm = ctx.attrs.mode == "lstm"
        dx, dh0, dc0, grads = _backward(ctx.state, x, h0, c0, params, ctx.lengths, ctx.seeds,
                                        ctx.host, d_output, d_h_n, d_c_n, ctx.attrs,
                                        ctx.device, any(need_p), grad_views=True,
                                        wanted=(needs[0], needs[1], needs[2] and lstm))
        return (None, None, None, None, dx, dh0, dc0, None, None,
                *_wanted_grads(grads, need_p))


_PLAIN = (torch.Tensor, nn.Parameter)


def _eager(tensors) -> bool:
    """Whether a call may take :class:`_EagerRNN`: plain CPU tensors (no subclass: fake,
    functional and functorch-wrapped tensors are traced), and nothing tracing or transforming
    (Dynamo, ``torch.export``, ``torch.jit.trace``, dispatch or function modes, functorch)."""
    return (all(type(t) in _PLAIN for t in tensors if t is not None)
            and not torch.compiler.is_compiling()
            and not torch.jit.is_tracing()
            and torch._C._len_torch_dispatch_stack() == 0
            and not torch._C._is_torch_function_mode_enabled()
            and not torch._C._are_functorch_transforms_active())


_DYNAMO_CONFIG = "torch._dynamo.config"


def _allow_rnn(dynamo_config):
    """Let Dynamo trace instances of ``torch.nn.RNN/LSTM/GRU`` (module docstring), unless the
    user has set ``torch._dynamo.config.allow_rnn`` already."""
    is_default = getattr(dynamo_config, "_is_default", None)
    if is_default is not None and is_default("allow_rnn"):
        dynamo_config.allow_rnn = True


class _OnDynamoConfigImport(importlib.abc.MetaPathFinder):
    """Calls :func:`_allow_rnn` as soon as Dynamo's config module has been imported.

    Importing it here would cost a second (it imports all of Dynamo), in every process that
    imports this module, whether it compiles or not; Dynamo reads the flag only when it traces,
    and ``torch.compile``/``torch.export`` import the config first. This finder stands first
    in ``sys.meta_path`` until that import, then removes itself and wraps the module's loader
    (the module is found and loaded by the usual finders)."""

    def find_spec(self, name, path, target=None):
        if name != _DYNAMO_CONFIG:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            _allow_rnn(module)

        spec.loader.exec_module = exec_module
        return spec


if _DYNAMO_CONFIG in sys.modules:
    _allow_rnn(sys.modules[_DYNAMO_CONFIG])
elif not any(isinstance(f, _OnDynamoConfigImport) for f in sys.meta_path):
    sys.meta_path.insert(0, _OnDynamoConfigImport())


# ---- the modules ------------------------------------------------------------------------------

class _DeviceRef:
    """Holds ``cl_device`` and its op key: shared (not copied) by ``copy.deepcopy``; pickled as
    its ``"P:D"`` spec, because OpenCL contexts and queues cannot be pickled."""

    __slots__ = ("device", "key")

    def __init__(self, device):
        self.device = device
        self.key = _device_key(device)

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        d = self.device
        if d is None or isinstance(d, str):
            return (_DeviceRef, (d,))
        index = getattr(getattr(d, "info", None), "index", None)
        if isinstance(index, str) and "?" not in index:
            return (_DeviceRef, (index,))
        raise TypeError(f"cl_device: {type(d).__name__} cannot be pickled; construct the module "
                        "with a device spec string (e.g. cl_device='0:0') to save it whole")


if TYPE_CHECKING:
    # for the type checker only: the mixin's methods read (and extend) torch.nn.RNNBase's
    from torch.nn import RNNBase as _RNNBase
else:
    _RNNBase = object


@functools.cache
def _flat_parameter_names(num_layers: int, bidirectional: bool, bias: bool,
                          proj: bool) -> tuple:
    """torch.nn's parameter names in ``_flat_parameters`` order (per layer, per direction:
    ``weight_ih``, ``weight_hh``, the biases, ``weight_hr``)."""
    names = []
    for l in range(num_layers):
        for d in range(2 if bidirectional else 1):
            sfx = f"_l{l}" + ("_reverse" if d else "")
            names += [f"weight_ih{sfx}", f"weight_hh{sfx}"]
            if bias:
                names += [f"bias_ih{sfx}", f"bias_hh{sfx}"]
            if proj:
                names.append(f"weight_hr{sfx}")
    return tuple(names)


class _CLRNNMixin(_RNNBase):
    """forward() of the three modules (the rest is torch.nn.RNNBase)."""

    def _cl_setup(self, cl_device: DeviceArg) -> None:
        self._cl_device_ref = _DeviceRef(cl_device)

    @property
    def cl_device(self) -> DeviceArg:
        """The OpenCL device of this module (``None``: pyrnn_cl's default device)."""
        return self._cl_device_ref.device

    @cl_device.setter
    def cl_device(self, value: DeviceArg) -> None:
        self._cl_device_ref = _DeviceRef(value)

    def extra_repr(self) -> str:
        s = super().extra_repr()
        if self.cl_device is not None:
            s += f", cl_device={self.cl_device!r}"
        return s

    def flatten_parameters(self) -> None:
        """Make the parameters views of one flat CPU tensor laid out as the cuDNN dialect's
        ``params`` (as torch.nn's version does for cuDNN), and forget any device copy of them.
        torch.nn calls it on construction, after ``.to()``/``.half()`` and on unpickling.

        Where the device's memory is the host's (``VendorProfile.shares_host_memory``) the
        kernels then read that tensor in place: no upload, and no comparison of the values with
        an uploaded copy. A parameter that stops being such a view (``p.data = ...``, a
        parametrization) makes the calls fall back to the cached upload, checked on every call;
        correctness never depends on this."""
        params = self._flat_parameters()
        if "_cl_device_ref" in self.__dict__:
            _forget_params(params)
        if not params or any(p.device.type != "cpu" or p.dtype != params[0].dtype
                             for p in params):
            return
        lay, slots = self._param_slots()
        if _flat_view(slots, lay.size, params) is not None:
            return
        with torch.no_grad():
            flat = torch.zeros(lay.size, dtype=params[0].dtype)
            for (off, n), p in zip(slots, params):
                flat[off:off + n] = p.reshape(-1)
            for (off, _), p in zip(slots, params):
                p.set_(flat.untyped_storage(), off, p.shape, p.stride())

    def _param_slots(self):
        """:func:`_slots` of this module: the flat params' layout, and where each tensor of
        :meth:`_flat_parameters` lies in it."""
        return _slots(_MODES[self.mode], self.num_layers, self.input_size, self.hidden_size,
                      2 if self.bidirectional else 1, self.proj_size, bool(self.bias))

    def _flat_parameters(self):
        names = _flat_parameter_names(self.num_layers, self.bidirectional, bool(self.bias),
                                      self.proj_size > 0)
        return [getattr(self, n) for n in names]

    def forward(self, input: Union[Tensor, PackedSequence],
                hx: Union[Tensor, tuple[Tensor, Tensor], None] = None,
                ) -> tuple[Union[Tensor, PackedSequence], Union[Tensor, tuple[Tensor, Tensor]]]:
        """``output, h_n`` (RNN, GRU) or ``output, (h_n, c_n)`` (LSTM), exactly as torch.nn."""
        lstm = self.mode == "LSTM"
        D = 2 if self.bidirectional else 1
        R = self.proj_size if self.proj_size > 0 else self.hidden_size
        flat = self._flat_parameters()
        dtype = flat[0].dtype
        packed = isinstance(input, PackedSequence)
        lengths = None
        batch_first = False
        if packed:
            x, lengths = pad_packed_sequence(input)     # [T, N, I], original batch order
            batched = True
        else:
            if not isinstance(input, torch.Tensor):
                raise TypeError(f"input: expected a torch.Tensor or PackedSequence, got "
                                f"{type(input).__name__}")
            if input.dim() not in (2, 3):
                raise ShapeError(f"input: got shape {list(input.shape)}, expected a 3-D "
                                 f"(batched) or 2-D (unbatched) tensor")
            batched = input.dim() == 3
            x = input if batched else input.unsqueeze(1)
            batch_first = batched and self.batch_first
        if x.device.type != "cpu":
            raise TensorDeviceError(f"input: pyrnn_cl.torch takes CPU tensors (got one on "
                                    f"{x.device}); the OpenCL device is chosen with cl_device")
        if x.dtype != dtype:
            raise DTypeError(f"input: got dtype {x.dtype}, but the parameters are {dtype} "
                             f"(convert the input with input.to({dtype}) or the module with "
                             f"module.to({x.dtype}))")
        if dtype not in _DTYPES:
            raise TypeError(f"parameters: got dtype {dtype}, expected one of "
                            f"{', '.join(str(d) for d in _DTYPES)}")
        if x.shape[-1] != self.input_size:
            raise ShapeError(f"input: got shape {list(x.shape)}, the last axis must be "
                             f"input_size={self.input_size}")
        T, N = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
        if T == 0:
            raise ShapeError(f"input: got shape {list(x.shape)}; expected sequence length to "
                             "be larger than 0 in RNN (as torch.nn)")
        h0, c0 = self._initial_state(hx, lstm, batched, N, D, R, x)

        drop = self.training and self.dropout > 0 and self.num_layers > 1
        seeds = (torch.randint(0, 2**31 - 1, (2,)) if drop
                 else torch.zeros(2, dtype=torch.int64))
        # saved for backward in training mode, and when a gradient is wanted in eval mode (the
        # flag does not follow grad mode alone: a graph traced by torch.jit.trace, whose check
        # reruns it without grad, would differ)
        needs_grad = torch.is_grad_enabled() and (
            x.requires_grad or h0.requires_grad or (lstm and c0.requires_grad)
            or any(p.requires_grad for p in flat))
        c0 = c0 if lstm else x.new_empty(0)
        attrs = _Attrs(_MODES[self.mode], self.num_layers, self.input_size, self.hidden_size,
                       self.bidirectional, self.proj_size, bool(self.bias),
                       float(self.dropout) if drop else 0.0, batch_first)
        training, device = bool(needs_grad or self.training), self._cl_device_ref.key
        if _eager((x, h0, c0, *flat)):
            out, hn, cn = _EagerRNN.apply(attrs, training, device, hx is None, x, h0, c0,
                                          lengths, seeds, *flat)
            _device(device).queue.finish()     # (the results' reads: _EagerRNN.forward)
        else:
            out, hn, cn, _ = torch.ops.pyrnn_cl.rnn(x, h0, c0, flat, lengths, seeds, *attrs,
                                                    training, device, _REVISION)

        if packed:
            assert lengths is not None      # (pad_packed_sequence's)
            if input.sorted_indices is not None:
                out = out.index_select(1, input.sorted_indices)
                lengths = lengths.index_select(0, input.sorted_indices.cpu())
            data = pack_padded_sequence(out, lengths, enforce_sorted=True).data
            output = PackedSequence(data, input.batch_sizes, input.sorted_indices,
                                    input.unsorted_indices)
        elif not batched:
            output, hn = out.squeeze(1), hn.squeeze(1)
            cn = cn.squeeze(1) if lstm else cn
        else:
            output = out
        return (output, (hn, cn)) if lstm else (output, hn)

    def _initial_state(self, hx, lstm, batched, N, D, R, x):
        LD, H = self.num_layers * D, self.hidden_size
        if hx is None:
            h0 = x.new_zeros(LD, N, R)
            return h0, (x.new_zeros(LD, N, H) if lstm else None)
        if lstm:
            if not (isinstance(hx, (tuple, list)) and len(hx) == 2):
                raise TypeError("hx: an LSTM takes a tuple (h_0, c_0)")
            h0, c0 = hx
        else:
            if not isinstance(hx, torch.Tensor):
                raise TypeError(f"hx: expected a tensor h_0, got {type(hx).__name__}")
            h0, c0 = hx, None
        rank = 3 if batched else 2
        for name, t, width in (("h_0", h0, R), ("c_0", c0, H)):
            if t is None:
                continue
            want = (LD, N, width) if batched else (LD, width)
            if t.dim() != rank or tuple(t.shape) != want:
                raise ShapeError(f"hx: {name} has shape {list(t.shape)}, expected {list(want)}")
            if t.dtype != x.dtype:
                raise DTypeError(f"hx: {name} has dtype {t.dtype}, expected {x.dtype}")
            if t.device.type != "cpu":
                raise TensorDeviceError(f"hx: {name} is on {t.device}; pyrnn_cl.torch takes "
                                        "CPU tensors")
        if not batched:
            h0 = h0.unsqueeze(1)
            c0 = c0.unsqueeze(1) if c0 is not None else None
        return h0, c0


class RNN(_CLRNNMixin, nn.RNN):
    r"""``torch.nn.RNN`` on pyrnn_cl: :math:`h_t = act(x_t W_{ih}^T + b_{ih} + h_{t-1}
    W_{hh}^T + b_{hh})`, act = ``nonlinearity`` (``'tanh'`` or ``'relu'``).

    Arguments: torch.nn.RNN's (``input_size, hidden_size, num_layers=1, nonlinearity='tanh',
    bias=True, batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None``)
    plus ``cl_device`` (the OpenCL device; module docstring)."""

    def __init__(self, *args: Any, cl_device: DeviceArg = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cl_setup(cl_device)


class LSTM(_CLRNNMixin, nn.LSTM):
    r"""``torch.nn.LSTM`` on pyrnn_cl: gates :math:`(i, f, g, o)` = chunks of
    :math:`x_t W_{ih}^T + b_{ih} + h_{t-1} W_{hh}^T + b_{hh}`,
    :math:`c_t = \sigma(f) c_{t-1} + \sigma(i) \tanh(g)`, :math:`h_t = \sigma(o) \tanh(c_t)`
    (times :math:`W_{hr}^T` when ``proj_size > 0``).

    Arguments: torch.nn.LSTM's (``input_size, hidden_size, num_layers=1, bias=True,
    batch_first=False, dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None``)
    plus ``cl_device``."""

    def __init__(self, *args: Any, cl_device: DeviceArg = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cl_setup(cl_device)


class GRU(_CLRNNMixin, nn.GRU):
    r"""``torch.nn.GRU`` on pyrnn_cl: :math:`r, z = \sigma(\cdot)`,
    :math:`n = \tanh(x_t W_{in}^T + b_{in} + r \odot (h_{t-1} W_{hn}^T + b_{hn}))`,
    :math:`h_t = (1 - z) \odot n + z \odot h_{t-1}`.

    Arguments: torch.nn.GRU's (``input_size, hidden_size, num_layers=1, bias=True,
    batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None``) plus
    ``cl_device``."""

    def __init__(self, *args: Any, cl_device: DeviceArg = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cl_setup(cl_device)
