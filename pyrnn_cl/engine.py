"""The gate-recurrence engine shared by every dialect: one layer, one or two directions.

A layer is computed the way oneDNN and PyTorch do it (style.md §3.1):

1. **Input projection for all T steps at once** (:func:`input_projection`, one GEMM with the
   bias added in its store): ``gx = x W^T + b_x`` with ``gx`` laid out ``[T][N][D][G][H]``
   (gate blocks in the caller's order). Dialects without input weights fill ``gx`` themselves
   (MPSGraph ``input_weight=None``, cuDNN ``skip_input``). A layer that runs the whole sequence
   in one launch (:func:`pyrnn_cl.plan._whole_sequence_fits`), given ``x`` and ``W`` instead
   (:meth:`Recurrence.forward`), computes ``x[t] W^T + b_x`` inside that kernel from ``W``
   packed like ``R`` (``HAS_XW``): no GEMM launch, no gx round trip.
2. **One fused kernel per step** (``pyrnn_fwd`` in ``cl/recurrence.cl``): the recurrent product
   ``(h[t-1] . m) R^T + b_h`` from packed weights, the cell's pointwise maths (``cl/cells/*.cl``)
   and the values backward needs, written over ``gx`` in place (the *saved gates*). Both
   directions run in the same launch. A reset-before GRU needs a second kernel per step
   (``pyrnn_fwd_b``), an LSTM projection one more (``pyrnn_proj``).
3. Backward mirrors it: per step one fused kernel (``pyrnn_bwd``) reduces the next step's gate
   gradients through ``R`` into ``dh[t]`` and runs the cell backward. The steps run in chunks
   of about ``REC_BWD_ROWS`` rows (steps x N); after each chunk, large GEMMs over its rows add
   its share to the weight, bias and input gradients (:meth:`Recurrence.backward` with an
   :class:`InputSide`), so the gate gradients of all T steps never exist at once.

The whole sequence is enqueued on one in-order queue with kernel arguments set once; only the
step index changes between launches, and the host never waits inside the loop.

Buffers are :class:`pyopencl.array.Array` objects, contiguous, with zero offset; layouts are
described in :mod:`pyrnn_cl.layout`. A layer's shapes, launch choices and the size of every
buffer it allocates come from its :class:`pyrnn_cl.plan.LayerPlan`, computed once; every
allocation goes through :meth:`Recurrence._new` under the plan's name for it. Kernel arguments
are set by name (:mod:`pyrnn_cl.kernel_args`); a forward returns a :class:`Saved`, which a
backward takes with grouped inputs (:class:`LayerInputs`, :class:`Upstream`,
:class:`GradTargets`). Values that live only inside one call (packed weights,
carries, gathered step inputs) come from a per-device memory pool (``_arrays.temporary``);
absent inputs read one shared zero buffer (``_arrays.read_only_zeros``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ._arrays import (
    check_memory,
    fill,
    narrow_many,
    read_only_zeros,
    result_array,
    result_zeros,
    temporary,
    widen_many,
)
from .cells import CellSpec, cell_kind
from .gemm import WEIGHT_GRADIENT_K_BLOCK, gemm, sum_rows
from .kernel_args import KernelSignature, kernel_signature
from .layout import Saved
from .plan import PACKS, LayerPlan, _vector_width
from .programs import Program, enqueue, enqueue_on, get_program, launcher
from .sources import compute_dtype, dtype_code
from .tuning import cpu_like

__all__ = ["Recurrence", "StateView", "Target", "InputSide", "LayerInputs", "Upstream",
           "GradTargets", "Gradients", "Saved", "input_projection", "util_program", "copy3",
           "add_rows", "act_map", "multiply"]

_I32 = np.int32
_I64 = np.int64


@dataclass(frozen=True)
class StateView:
    """A ``[D][N][W]`` state tensor inside ``array`` at element ``(d, n, k)`` =
    ``d * sd + n * sn + k`` (MPSGraph ``[N, D*H]``: ``sd = H, sn = D*H``; cuDNN: ``sd = N*W``)."""

    array: cla.Array
    sd: int
    sn: int


@dataclass(frozen=True)
class Target:
    """A per-direction block of a gradient (or weight): direction ``d``'s block starts at
    element ``offset + d * stride`` of ``array`` (a matrix block row-major, rows packed)."""

    array: cla.Array
    offset: int
    stride: int


@dataclass(frozen=True)
class InputSide:
    """The input side ``gx = x W^T + b`` of a layer, whose gradients :meth:`Recurrence.backward`
    accumulates chunk by chunk (``None``: not wanted).

    ``x`` ``[T][N][I]`` (for ``dw``); ``w`` the ``[G*H][I]`` weight blocks (for ``dx``; without
    one, ``dx`` is the sum of every gate block: cuDNN ``skip_input``); ``dx`` ``[T][N][I]``;
    ``dw`` ``[G*H][I]`` and ``db`` ``[G*H]`` blocks; ``dhb`` the hidden-side bias ``[G*H]``
    (sums of ``dgh``: a GRU's recurrent bias, cuDNN's second bias)."""

    I: int
    x: cla.Array | None = None
    w: Target | None = None
    dx: cla.Array | None = None
    dw: Target | None = None
    db: Target | None = None
    dhb: Target | None = None


@dataclass(frozen=True)
class LayerInputs:
    """What a layer's forward and backward read besides its sequences: ``R`` ``[D][G*H][K]``,
    the initial states ``h0`` and (LSTM) ``c0``, the hidden-side bias ``hb`` and peepholes
    ``peep`` ``[D][G*H]``, ``mask`` ``[T][N][D*H]``, ``lens`` int32 ``[N]`` and the projection
    ``w_proj`` ``[D][P][H]`` (``None``: absent)."""

    R: cla.Array | Target
    h0: StateView
    c0: StateView | None = None
    hb: cla.Array | Target | None = None
    peep: cla.Array | None = None
    mask: cla.Array | None = None
    lens: cla.Array | None = None
    w_proj: cla.Array | Target | None = None


@dataclass(frozen=True)
class Upstream:
    """The upstream gradients of a backward (``None``: zero): ``dy`` ``[T][N][D*K]``,
    ``dhn``/``dcn`` those of the final states, ``dcs`` ``[T][N][D*H]`` the per-step gradients of
    c (TensorFlow)."""

    dy: cla.Array | None = None
    dhn: StateView | None = None
    dcn: StateView | None = None
    dcs: cla.Array | None = None


@dataclass(frozen=True)
class GradTargets:
    """Where a backward writes: ``dh0`` and (LSTM) ``dc0``; ``dR`` (or a new ``[D][G*H][K]``
    array; none without ``need_dR``), ``dwp`` (projection; or a new ``[D][P][H]`` array) and
    the input side's gradients ``inputs`` (:class:`InputSide`; ``None``: not wanted)."""

    dh0: StateView
    dc0: StateView | None = None
    dR: Target | None = None
    need_dR: bool = True
    dwp: Target | None = None
    inputs: InputSide | None = None


@dataclass(frozen=True)
class Gradients:
    """What :meth:`Recurrence.backward` returns: the gate gradients ``dgx``/``dgh`` (``None``
    unless ``full``), ``dR``, ``dwp`` (projection) and ``dpeep`` (peepholes), ``None`` where
    not computed."""

    dgx: cla.Array | None = None
    dgh: cla.Array | None = None
    dR: cla.Array | None = None
    dwp: cla.Array | None = None
    dpeep: cla.Array | None = None


def util_program(device, dtype, vw=1):
    """The program of ``cl/util.cl`` for ``dtype`` with ``vw`` elements per work-item in its
    vectorised kernels (``add_rows``, ``act_map``, ``multiply``)."""
    return get_program(device, "util.cl", {"PYRNN_DTYPE": dtype_code(dtype), "REC_VW": vw})


def _util_width(dtype, *sizes):
    """Elements per work-item of the vectorised util kernels: the widest vector dividing every
    size (float32 up to 16, float64 up to 8: one 512-bit register)."""
    return _vector_width(16 if np.dtype(dtype) == np.float32 else 8, *sizes)


def add_rows(device, dtype, a, rows, cols, b):
    """``a[i][j] += b[j]`` for a contiguous ``[rows][cols]`` array ``a``."""
    if rows == 0 or cols == 0:
        return
    vw = _util_width(dtype, cols)
    knl = util_program(device, dtype, vw).kernel("pyrnn_add_rows")
    _util_sig("pyrnn_add_rows").set(knl, a=a.base_data, cols=_I32(cols), b=b.base_data)
    enqueue_on(device, knl, (cols // vw, rows))


def act_map(device, dtype, y, x, kind):
    """``y = act(x)`` element-wise (``kind``: an activation code of ``cells.ACTIVATIONS``)."""
    if y.size == 0:
        return
    vw = _util_width(dtype, y.size)
    knl = util_program(device, dtype, vw).kernel("pyrnn_act_map")
    _util_sig("pyrnn_act_map").set(knl, y=y.base_data, x=x.base_data, kind=_I32(kind))
    enqueue_on(device, knl, (y.size // vw,))


def multiply(device, dtype, y, a, b):
    """``y = a ⊙ b`` element-wise for arrays of one size (the Hadamard product of the
    TensorFlow ops)."""
    if y.size == 0:
        return
    vw = _util_width(dtype, y.size)
    knl = util_program(device, dtype, vw).kernel("pyrnn_mul")
    _util_sig("pyrnn_mul").set(knl, y=y.base_data, a=a.base_data, b=b.base_data)
    enqueue_on(device, knl, (y.size // vw,))


def copy3(device, dtype, dst, d_off, d_strides, src, s_off, s_strides, shape, alpha=1.0,
          beta=0.0):
    """``dst[i0,i1,i2] = alpha * src[i0,i1,i2] + beta * dst`` through element strides."""
    if 0 in shape:
        return
    knl = util_program(device, dtype).kernel("pyrnn_copy3")
    real = np.dtype(dtype).type
    ds0, ds1, ds2 = (_I64(s) for s in d_strides)
    ss0, ss1, ss2 = (_I64(s) for s in s_strides)
    _util_sig("pyrnn_copy3").set(knl, dst=dst.base_data, d_off=_I64(d_off), ds0=ds0, ds1=ds1,
                                 ds2=ds2, src=src.base_data, s_off=_I64(s_off), ss0=ss0,
                                 ss1=ss1, ss2=ss2, alpha=real(alpha), beta=real(beta))
    enqueue_on(device, knl, (shape[2], shape[1], shape[0]))


def input_projection(device, dtype, x, rows, width, weight, out_width, bias=None, out=None):
    """``gx = x W^T (+ b)``: ``x`` ``[rows][width]``, ``weight`` ``[out_width][width]``, bias
    ``[out_width]``; returns a new ``[rows][out_width]`` array, or ``out`` (one GEMM for every
    step, the bias added in its store)."""
    gx = result_array(device, (rows, out_width), dtype) if out is None else out
    gemm(device, dtype, rows, out_width, width, x, weight, gx, trans_b=True, bias=bias)
    return gx


_log = logging.getLogger("pyrnn_cl")

#: The step kernels of ``cl/recurrence.cl`` that split their products over ``REC_KS``
#: work-items (a work-group each); the whole-sequence kernels never run with ``REC_KS`` > 1.
_SPLIT_STEP_KERNELS = ("pyrnn_fwd", "pyrnn_fwd_b", "pyrnn_proj", "pyrnn_bwd", "pyrnn_bwd_b",
                       "pyrnn_bwd_proj")

#: The part of ``cl/recurrence.cl`` (its ``REC_PART``) that holds each kernel: 1 the step
#: kernels, 2 the whole-sequence kernels, 3 the helpers around the time loop (forward program).
#: A layer's program is one per part (:class:`_Parts`), each built on the first use of one of
#: its kernels: a layer runs either the step or the whole-sequence kernels, and an
#: implementation that compiles a whole program at build time (Intel's CPU runtime, GPU drivers)
#: compiled both. On Intel's runtime a forward program held 0.4-0.6 s of step kernels, 0.7-1.1 s
#: of whole-sequence kernel and 0.2-0.5 s of helpers (LSTM, H = 13).
KERNEL_PARTS = {**dict.fromkeys(_SPLIT_STEP_KERNELS, 1), "pyrnn_fwd_seq": 2, "pyrnn_bwd_seq": 2,
                "pyrnn_final": 3, "pyrnn_gather_hin": 3, "pyrnn_peep_grad": 3}


class _Parts:
    """The programs of one set of ``cl/recurrence.cl`` defines, one per part of the source
    (:data:`KERNEL_PARTS`), each built the first time one of its kernels is asked for. Stands
    in for a :class:`~pyrnn_cl.programs.Program` where the engine uses one: ``kernel``,
    ``work_group_size``, ``defines``."""

    __slots__ = ("device", "defines", "prelude", "parts", "whole")

    def __init__(self, device, defines: dict, prelude: tuple[str, ...]):
        self.device, self.defines, self.prelude = device, defines, prelude
        self.parts: dict[int, Program] = {}
        #: one program of every kernel of the direction (part 0): where the implementation
        #: compiles kernels at their first launch (PoCL), and for a backward with lanes
        self.whole = bool(device.profile.compiles_kernels_at_launch or (
            defines.get("BWD_PROGRAM") and int(defines.get("REC_KS", 1)) > 1))

    def part(self, kernel: str) -> Program:
        """The program that holds ``kernel`` (built now if it is not yet). All the direction's
        kernels are in one (part 0) on an implementation that compiles kernels at their
        first launch (``VendorProfile.compiles_kernels_at_launch``), and in a backward with
        its products split over lanes (``REC_KS`` > 1, GPUs): PoCL 3.1 computed wrong
        gradients of a reset-after GRU from that step kernel built alone (``REC_KS`` = 4 or
        8; right ones beside ``pyrnn_bwd_seq``, and on Intel's runtime and Oclgrind, which
        reported no race, either way)."""
        part = 0 if self.whole else KERNEL_PARTS[kernel]
        prog = self.parts.get(part)
        if prog is None:
            prog = self.parts[part] = get_program(self.device, "recurrence.cl",
                                                  dict(self.defines, REC_PART=part),
                                                  prelude=self.prelude)
        return prog

    def kernel(self, name: str) -> cl.Kernel:
        return self.part(name).kernel(name)

    def work_group_size(self, name: str) -> int:
        return self.part(name).work_group_size(name)


#: a 16-bit call's whole-sequence forward converts its inputs and results itself
#: (``cl/recurrence.cl``: ``widen_inputs``, and ``NARROW16`` in its steps): the inputs it widens
#: and the results it narrows, by their bit in the kernel's ``in16`` and ``out16`` arguments
_WIDEN_BITS = {"x": 1, "xb": 2, "h0": 4, "c0": 8}
_NARROW_BITS = {"y": 1, "cs": 2, "sav": 4}
#: ... and its backward the inputs its kernels read in 16 bits (bits of ``rd16``), and those its
#: whole-sequence kernel widens first (``widen_grad_inputs``, bits of ``in16``)
_BWD_READ_BITS = {"sav": 1, "cs": 2, "dy": 4}
_BWD_WIDEN_BITS = {"y": 1, "dhn": 2, "dcn": 4, "h0": 8, "c0": 16, "x": 32}


def _sig(kernel: str) -> KernelSignature:
    """The signature of ``kernel`` of ``cl/recurrence.cl`` (arguments by name)."""
    return kernel_signature("recurrence.cl", kernel)


def _pack_sig(kernel: str) -> KernelSignature:
    """The signature of ``kernel`` of ``cl/pack.cl``."""
    return kernel_signature("pack.cl", kernel)


def _util_sig(kernel: str) -> KernelSignature:
    """The signature of ``kernel`` of ``cl/util.cl``."""
    return kernel_signature("util.cl", kernel)


@functools.cache
def _state_keys(name: str) -> tuple[str, str, str]:
    return name, f"{name}_sd", f"{name}_sn"


def _state_args(name: str, view: StateView) -> dict[str, object]:
    """The three kernel arguments of state ``name``: its buffer and ``name_sd``/``name_sn``."""
    a, sd, sn = _state_keys(name)
    return {a: view.array.base_data, sd: _I64(view.sd), sn: _I64(view.sn)}


def _bias_args(bias: cla.Array | Target | None, width: int, dummy,
               name: str = "hb") -> dict[str, object]:
    """The kernel arguments ``hb, hb_off, hb_sd`` of a hidden-side bias (or those of another
    bias ``name``: ``xb``, the input bias of the in-kernel product): direction ``d``'s
    ``width`` values at element ``hb_off + d * hb_sd`` (a ``[D][width]`` array, or a
    :class:`Target` where the values lie, e.g. in the cuDNN dialect's params; absent: the
    dummy, never read)."""
    if bias is None:
        buf, off, sd = dummy.base_data, 0, 0
    elif isinstance(bias, Target):
        a = bias.array
        buf, off, sd = a.base_data, a.offset // a.dtype.itemsize + bias.offset, bias.stride
    else:
        buf, off, sd = bias.base_data, bias.offset // bias.dtype.itemsize, width
    return {name: buf, f"{name}_off": _I64(off), f"{name}_sd": _I64(sd)}


def _dummy(device, dtype):
    """A buffer passed for absent optional inputs (kernels never read it)."""
    return read_only_zeros(device, dtype, 1)


def _int_arg_setter(knl, index):
    """A function setting int32 argument ``index`` of ``knl`` (the step loop's only per-launch
    argument, found by name: :meth:`KernelSignature.position`). pyopencl's ``Kernel.set_arg``
    first dispatches on the argument's Python type, measured at 18-57 us a call on PoCL (more
    than the launch itself); the buffer entry point it ends in (``_set_arg_buf``, the one
    pyopencl's generated ``set_args`` uses) takes < 1 us.
    Falls back to ``set_arg`` on a pyopencl without it."""
    fast = getattr(knl, "_set_arg_buf", None)
    if fast is None:
        return lambda value: knl.set_arg(index, _I32(value))
    return lambda value: fast(index, _I32(value))


#: How many layers :meth:`Recurrence.cached` keeps per device.
_LAYER_CACHE_SIZE = 64

#: rows of the transposed pack (``pyrnn_pack_t``) per work-item on CPU-like devices: the launch
#: has ceil(rows / 16) row chunks and the kernel takes ceil(rows / chunks) rows each, the last
#: chunk fewer. One row per work-item was mostly work-item overhead there (PoCL 1.0-1.8x, Intel
#: 1.1-2.2x faster with 16); a GPU keeps one row per work-item (16 were 0.70-0.99x on an H100).
_PACK_T_ROWS = 16

#: side of the square tile ``pyrnn_pack`` moves through registers (``PACK_TB``, at most ``REC_VW``):
#: 8 x 8 rather than REC_VW = 16, whose 256 values outgrow the registers (the pack of an LSTM
#: 512's R 1.5-2x slower on PoCL with AVX-512, from cache and from memory).
_PACK_TILE = 8


class Recurrence:
    """One layer of ``D`` directions of a cell over ``T`` steps of ``N`` rows.

    Parameters fix everything that changes the compiled program (cell, flags, dtype); sizes are
    kernel arguments. ``K`` is the width of the recurrent state (``H``, or ``P`` with an LSTM
    projection), ``rev_mask`` has bit ``d`` set for every direction that runs backwards in time.
    """

    def __init__(self, device, dtype, cell: CellSpec, *, T, N, H, D=1, P=0, rev_mask=0,
                 has_mask=False, has_len=False, has_hb=False, has_peep=False, clip=0.0,
                 weights=None):
        self.device, self.dtype, self.cell = device, np.dtype(dtype), cell
        #: the dtype every weight this layer packs is stored in (the compute dtype, or a
        #: 16-bit storage dtype that the packs read as stored)
        self.weights = np.dtype(weights if weights is not None else dtype)
        #: shapes, launch choices and buffer sizes, computed once (:class:`LayerPlan`)
        self.plan = plan = LayerPlan.for_device(cell, self.dtype, device.tuning("recurrence"),
                                                device.info.compute_units, T=T, N=N, H=H, D=D,
                                                P=P, weights=self.weights)
        self.T, self.N, self.H, self.D, self.P = plan.T, plan.N, plan.H, plan.D, plan.P
        self.K, self.G = plan.K, plan.G
        self.rev_mask = int(rev_mask)
        self.flags = dict(HAS_MASK=int(has_mask), HAS_LEN=int(has_len), HAS_HB=int(has_hb),
                          HAS_PEEP=int(has_peep), HAS_PROJ=int(bool(P)))
        self.clip = float(clip)
        # units and batch rows per work-item, work-items per group along the batch-group
        # dimension (0: the driver chooses), whole-sequence kernels, rows (steps x N) of gate
        # gradients per backward chunk
        self.vw, self.nb, self.wg, self.fused = plan.vw, plan.nb, plan.wg, plan.fused
        self._pack_tile = math.gcd(self.vw, _PACK_TILE)
        self.seq_loop = plan.seq_loop
        self.fwd_nb = plan.fwd_nb
        self.ks = plan.ks
        self.bwd_rows = plan.bwd_rows
        self._programs: dict[tuple, _Parts] = {}
        self._packs: dict[np.dtype, Program] = {}     # by the weights' storage dtype
        # (backward, steps) -> what the memory check names and the buffer sizes it counts
        self._memory: dict[tuple, tuple[str, list[int]]] = {}
        self._check_memory(backward=False)
        self._dummy = _dummy(device, dtype)

    @classmethod
    def cached(cls, device, dtype, cell: CellSpec, **kw) -> Recurrence:
        """The layer that ``Recurrence(device, dtype, cell, **kw)`` would make, made once per
        device, arguments, cell registration and recurrence tuning and then reused (the last
        :data:`_LAYER_CACHE_SIZE` of each device): its plan, memory check and memoized programs
        cost about a tenth of a small layer's call in host time, which on a CPU device takes
        cores from the kernels. A layer holds no per-call state (kernels are per thread, every
        buffer is allocated per call), so sharing it is safe; the memory check runs on every
        call as before."""
        tuning = device.tuning("recurrence")
        # (the registry entry too: a cell registered again under its name is another cell)
        key = (np.dtype(dtype).str, cell, cell_kind(cell.kind), tuple(sorted(kw.items())),
               tuple(sorted(tuning.items())))
        layers = getattr(device, "_pyrnn_layers", None)
        if layers is None:
            layers = device._pyrnn_layers = OrderedDict()
        layer = layers.get(key)
        if layer is None:
            layer = cls(device, dtype, cell, **kw)
            layers[key] = layer
            while len(layers) > _LAYER_CACHE_SIZE:
                layers.popitem(last=False)
        else:
            layers.move_to_end(key)
            layer._check_memory(backward=False)     # (the device's limits are read each call)
        return layer

    def check_backward_memory(self, full=False):
        """:meth:`backward`'s memory check (forward buffers and one chunk of
        :meth:`chunk_steps`), for a gradient op to call before it copies its inputs: a request
        too large for the device is refused before anything is copied."""
        self._check_memory(backward=True, steps=self.chunk_steps(full))

    def _check_memory(self, backward, steps=0):
        """A clear ``UnsupportedError`` naming the bytes needed (``_arrays.check_memory``) when
        the sequence buffers of a forward (or forward + backward with chunks of ``steps``)
        cannot fit the device. The sizes are worked out once per layer (it runs on every call
        of a reused layer), the device's limits read each time."""
        key = (backward, steps)
        memo = self._memory.get(key)
        if memo is None:
            T, N, H, D, P = self.T, self.N, self.H, self.D, self.P
            memo = self._memory[key] = (
                f"{self.cell.kind} layer with T={T}, N={N}, H={H}, D={D}"
                f"{f', P={P}' if P else ''} ({'backward' if backward else 'forward'})",
                self.plan.checked_buffers(backward, steps))
        check_memory(self.device, *memo)

    def _new(self, name: str, shape, pooled: bool, zeros: bool = False) -> cla.Array:
        """Every buffer this layer allocates, by its :class:`LayerPlan` name: from the pool
        (``_arrays.temporary``: values that live inside the call), new (``empty``: handed to
        the caller) or new and zeroed. Packs (:data:`~pyrnn_cl.plan.PACKS`) are of
        :attr:`pack_dtype`, everything else of the compute dtype.

        A layer of 16-bit weights serves a 16-bit call, whose results the dialect narrows into
        arrays of their own (``_arrays.Call.outs``): its float32 results live inside the call
        too, so they come from the pool as well, and so do any op's results where
        ``_arrays.results_pooled`` (NumPy results and the torch bridge's on a device whose
        memory is not the host's, and there device-array results too by default)."""
        dt = self.pack_dtype if name in PACKS else self.dtype
        if zeros:
            return result_zeros(self.device, shape, dt)
        if pooled or self.weights != self.dtype:
            return temporary(self.device, shape, dt)
        return result_array(self.device, shape, dt)

    @property
    def pack_dtype(self) -> np.dtype:
        """The dtype of the packed weights: the weights' own 16-bit dtype where the plan keeps
        it (``LayerPlan.pack16``), else the compute dtype."""
        return self.weights if self.plan.pack16 else self.dtype

    # -- programs ---------------------------------------------------------------------------

    def _program(self, **extra) -> _Parts:
        """The engine programs of this layer's cell, flags and ``extra`` defines, one per part
        of the source (:class:`_Parts`; memoized per layer: a forward asks up to four times,
        each lookup ~15 us of host time). Their tiles have the forward's batch rows unless
        ``extra`` sets ``REC_NB`` (the backward's); launches take the rows from the programs
        (:meth:`_row_groups`)."""
        key = tuple(sorted(extra.items()))
        prog = self._programs.get(key)
        if prog is None:
            defines = {"PYRNN_DTYPE": dtype_code(self.dtype), "REC_VW": self.vw,
                       "REC_NB": self.fwd_nb}
            if self.plan.tail:
                defines["REC_TAIL"] = 1
            if self.plan.pack16:
                defines["PACK_DTYPE"] = self.plan.pack16
            if self.ks > 1:
                defines["REC_KS"] = self.ks
            if not self.seq_loop:     # (the source's default is 1)
                defines["REC_SEQ_LOOP"] = 0
            defines.update(self.cell.defines())
            defines.update(self.flags)
            defines.update(extra)
            prog = self._programs[key] = _Parts(self.device, defines, (self.cell.source,))
            if self.ks > 1 and self._fewer_lanes(prog):
                return self._program(**extra)
        return prog

    def _fewer_lanes(self, prog) -> bool:
        """With products split over ``ks`` work-items, each step kernel is launched with local
        size ``(ks, 1)``, which a kernel's own ``CL_KERNEL_WORK_GROUP_SIZE`` may not allow (a
        register-heavy kernel on some GPUs, pitfalls C3). Then take the largest power of two it
        allows, forget the programs built for ``ks`` and return True (the caller builds
        again); else False. (Builds the step kernels of ``prog``'s direction: with ``ks`` > 1,
        a GPU's, they run.)"""
        prog = prog.part("pyrnn_bwd" if prog.defines.get("BWD_PROGRAM") else "pyrnn_fwd")
        names = set(prog.kernel_names) & set(_SPLIT_STEP_KERNELS)
        limit = min((prog.work_group_size(n) for n in names), default=self.ks)
        if limit >= self.ks:
            return False
        ks = 1 << (max(1, limit).bit_length() - 1)
        _log.info("pyrnn_cl: %s allows work-groups of %d, not REC_KS = %d: using %d",
                  self.device.info.name, limit, self.ks, ks)
        self.ks = ks
        self._programs.clear()
        return True

    def _or_dummy(self, a):
        return self._dummy.base_data if a is None else a.base_data

    def _row_groups(self, prog) -> int:
        """The groups of batch rows the N rows make in tiles of ``prog``'s kernels (its
        ``REC_NB`` rows each: the forward's or the backward's)."""
        return -(-self.N // int(prog.defines["REC_NB"]))

    def _step_grid(self, width, groups):
        """``(global, local)`` of a step kernel over ``width`` units: dimension 0 runs over
        the ``groups`` of batch rows (:meth:`_row_groups`), dimension 1 over vectors of ``vw``
        units of every direction. Work-items of one group share the weight slab of their
        units. With ``ks`` > 1 each tile is a work-group of ``ks`` work-items along dimension 0
        that split its products (``REC_KS`` in ``cl/recurrence.cl``)."""
        grid = (groups * self.ks, self.D * -(-width // self.vw))
        if self.ks > 1:
            return grid, (self.ks, 1)
        if not self.wg:
            return grid, self.device.profile.local_size(grid)
        wg0 = max(d for d in range(1, min(self.wg, groups) + 1) if groups % d == 0)
        return grid, (wg0, 1)

    def _whole_sequence(self, prog, name):
        """Whether this layer runs kernel ``name`` of ``prog`` over the whole sequence in one
        launch: it uses whole-sequence kernels and one work-group holds every unit of a
        direction (always, where one work-item runs them all: ``seq_loop``)."""
        return self.fused and (self.seq_loop
                               or self.plan.unit_vectors <= prog.work_group_size(name))

    def _fused_launch(self, prog, name, args: dict[str, object]) -> bool:
        """Launch the whole-sequence kernel ``name`` with ``args`` (every argument by name) when
        :meth:`_whole_sequence` allows; returns whether it did (else the caller runs the step
        loop)."""
        if not self._whole_sequence(prog, name):
            return False
        knl = prog.kernel(name)
        _sig(name).set(knl, **args)
        groups = self._row_groups(prog)
        if self.seq_loop:       # a work-item per batch-row group and direction
            enqueue(self.device.queue, knl, (groups, self.D), (1, 1))
        else:                   # a work-item per vector of units
            grid, _ = self._step_grid(self.H, groups)
            enqueue(self.device.queue, knl, grid, (1, self.plan.unit_vectors))
        return True

    def _step_kernel(self, prog, name, width, args: dict[str, object]):
        """``(kernel, step argument position, (global, local))``: step kernel ``name`` with
        ``args`` set by name (``s``, the step, set per launch by :meth:`_run_steps`), over
        ``width`` units."""
        knl, sig = prog.kernel(name), _sig(name)
        sig.set(knl, s=_I32(0), **args)
        return knl, sig.position("s"), self._step_grid(width, self._row_groups(prog))

    def _run_steps(self, kernels, steps):
        """Enqueue ``kernels`` (list of :meth:`_step_kernel`'s triples) for every step in
        ``steps``; only the step index argument changes between launches."""
        q = self.device.queue
        plan = [(_int_arg_setter(knl, index), launcher(q, knl, grid, local))
                for knl, index, (grid, local) in kernels]
        for s in steps:
            for set_step, launch in plan:
                set_step(s)
                launch()

    def _pack_kernel(self, name: str, weight: cla.Array | Target, per_dir: int):
        """Kernel ``name`` of ``cl/pack.cl`` for ``weight`` (an array ``[D][...]`` or a
        :class:`Target` inside a larger buffer) compiled for the dtype the weight is stored in
        (a 16-bit weight is read as it is, no widening pass, and packed to :attr:`pack_dtype`:
        float32, or its own 16 bits where the plan keeps them), and the weight as ``(buffer,
        element offset, direction stride)``. The pack kernels are a program
        of their own per (storage dtype, ``REC_VW``, pack dtype), shared by every layer: in each
        recurrence program (cell x flags x tiles) they were compiled again, by PoCL once per
        launch size, 36 % of the kernels a cold test suite compiled."""
        w = weight if isinstance(weight, Target) else Target(weight, 0, per_dir)
        storage = np.dtype(w.array.dtype)
        assert compute_dtype(storage) == self.dtype, (storage, self.dtype)
        # (a layer with 16-bit packs is made for weights of that dtype: Recurrence(weights=))
        assert not self.plan.pack16 or storage == self.weights, (storage, self.weights)
        prog = self._packs.get(storage)
        if prog is None:
            prog = self._packs[storage] = get_program(
                self.device, "pack.cl",
                {"PYRNN_DTYPE": dtype_code(storage), "REC_VW": self.vw,
                 "PACK_TB": self._pack_tile, "PACK_DTYPE": dtype_code(self.pack_dtype)})
        offset = w.offset + w.array.offset // storage.itemsize
        return prog.kernel(name), (w.array.base_data, _I64(offset), _I64(w.stride))

    def pack(self, weight, rows, width, G, blocks, name: str = "rpk"):
        """Pack a ``[D][G*rows][width]`` weight (an array, or a :class:`Target` inside another
        buffer, of the compute dtype or a 16-bit storage dtype) into
        ``[D][ceil(rows/VW)][width][G][VW]`` (the forward product's layout: per column, the G
        gate vectors of VW units side by side; zeros for the units of a partial last vector
        past ``rows``); ``name``: the pack's buffer in the plan."""
        padded = -(-rows // self.vw) * self.vw
        packed = self._new(name, (self.D * G * padded * width,), pooled=True)
        knl, (buf, off, stride) = self._pack_kernel("pyrnn_pack", weight, G * rows * width)
        blk0, blk1, blk2, blk3 = (_I32(b) for b in list(blocks) + [0] * (4 - len(blocks)))
        _pack_sig("pyrnn_pack").set(knl, H=_I32(rows), K=_I32(width), G=_I32(G), blk0=blk0,
                                    blk1=blk1, blk2=blk2, blk3=blk3, R=buf, r_off=off,
                                    r_dstride=stride, rpk=packed.base_data)
        # CPUs: one column chunk (each work-item streams its rows); others: one per tile, so that
        # neighbouring work-items read neighbouring columns (the kernel's comment)
        tb = self._pack_tile
        chunks = 1 if cpu_like(self.device.info, self.device.profile) else max(1, width // tb)
        enqueue_on(self.device, knl, (chunks, padded // tb, G * self.D))
        return packed

    def pack_t(self, weight, rows, cols, name: str = "rt"):
        """Transposed pack of a ``[D][rows][cols]`` weight (as for :meth:`pack`) into
        ``[D][ceil(cols/VW)][rows][VW]`` (the backward reductions' layout: each work-item streams
        one contiguous slab; zeros past ``cols`` in a partial last vector)."""
        vectors = -(-cols // self.vw)
        packed = self._new(name, (self.D * rows * vectors * self.vw,), pooled=True)
        knl, (buf, off, stride) = self._pack_kernel("pyrnn_pack_t", weight, rows * cols)
        _pack_sig("pyrnn_pack_t").set(knl, rows=_I32(rows), cols=_I32(cols), W=buf, w_off=off,
                                      w_dstride=stride, wt=packed.base_data)
        per = _PACK_T_ROWS if cpu_like(self.device.info, self.device.profile) else 1
        enqueue_on(self.device, knl, (vectors, -(-rows // per), self.D))
        return packed

    # -- forward ----------------------------------------------------------------------------

    def forward(self, gx, layer: LayerInputs, *, x=None, w=None, xb=None,
                into: Saved | None = None, narrow: tuple[str, ...] = (),
                dropped: tuple[str, ...] = ()) -> Saved:
        """Run the layer. ``gx`` ``[T][N][D*G*H]`` is overwritten with the saved gates.

        ``layer``: the weights, initial states, mask and lengths (:class:`LayerInputs`). Returns
        a :class:`Saved` with ``sav`` (= ``gx``), ``y`` ``[T][N][D*K]``, ``cs`` (LSTM) and
        ``hs`` (projection: h before it).

        Instead of ``gx`` (None), the source ``x`` ``[T][N][I]``, the input weight ``w``
        ``[D][G*H][I]`` and the input bias ``xb`` ``[D][G*H]`` (or None) may be given: a layer
        with whole-sequence kernels then computes ``x[t] W^T + b`` inside them (no GEMM launch
        and no gx round trip; tiny LSTM forward 25-30 % faster) where
        :meth:`LayerPlan.projects_in_kernel` says so, any other one runs
        :func:`input_projection` first. ``sav`` is then a new array.

        ``into``: arrays to write ``y``, ``cs`` and ``hs`` (and, given ``x``, ``sav``) into (a
        :class:`Saved` with any of those fields, e.g. parts of the cuDNN dialect's reserve
        space) instead of new ones; a 16-bit one there (a 16-bit call's) receives its result
        narrowed, as ``narrow`` below, but ``y`` and ``cs`` still come back in float32 and
        ``sav`` in 16 bits (narrowed by the steps as they store, or for a two-phase cell or a
        projection on the per-step path after them in one launch).
        ``w``, and a float32 ``xb``, may each be a :class:`Target`
        inside another buffer (the cuDNN dialect's ``params``) where
        :meth:`projects_in_kernel` holds.
        ``dropped``: results among ``"sav"`` and ``"cs"`` the caller does not keep (e.g. an
        inference forward's saved gates): their memory comes from the pool instead of fresh
        pages on every call, and dropped saved gates of a single-phase cell are not stored at
        all (``keep_sav`` in ``cl/recurrence.cl``: ``sav`` then holds what the steps read, not
        the gates).

        A 16-bit call (the layer's weights of a 16-bit storage dtype) converts in the
        whole-sequence kernel where it runs with the input product inside (``widen_inputs``
        and ``NARROW16`` in ``cl/recurrence.cl``: no conversion launch before or after it):

        * ``x``, ``xb`` and the initial states ``layer.h0``, ``layer.c0`` may be given in the
          16-bit dtype; that kernel widens them itself, any other path widens them first (one
          launch for all);
        * ``narrow``: the results among ``"y"``, ``"cs"`` and ``"sav"`` that the caller needs
          only in the 16-bit dtype. The steps write them narrowed as they store them (the
          saved gates in 16 bits only) and the returned :class:`Saved` holds those 16-bit
          arrays: that kernel's steps, and the step kernels of single-phase cells without
          projection; otherwise they come back in float32, for the caller to narrow
          (``_arrays.Call.outs`` narrows only what is not narrowed yet).
        """
        T, N, H, D, K, G = self.T, self.N, self.H, self.D, self.K, self.G
        dt = self.dtype
        into = into or Saved()
        # 16-bit arrays given for y, cs or sav: written narrowed, beside float32 results
        into16 = {name: getattr(into, name) for name in _NARROW_BITS
                  if getattr(into, name) is not None and getattr(into, name).dtype != dt}
        into = dataclasses.replace(into, **{name: None for name in into16})
        in_kernel = None
        if x is not None:
            I = int(x.shape[-1])
            if self.projects_in_kernel(I):
                in_kernel = (self._program(HAS_XW=1), I)
            assert in_kernel is not None or not isinstance(w, Target), \
                "a weight inside another buffer is read by the in-kernel product only"
        inputs16 = self._inputs16(x, xb, layer)
        if inputs16 and in_kernel is None:      # read as float32: widened first
            x, xb, layer = self._widen_inputs(inputs16, x, xb, layer)
            inputs16 = {}
        R, h0, hb, lens = layer.R, layer.h0, layer.hb, layer.lens
        if x is not None:
            if in_kernel is None:
                out = (into.sav.reshape((T * N, D * G * H)) if into.sav is not None
                       else self._new("sav", (T * N, D * G * H), pooled="sav" in dropped))
                gx = input_projection(self.device, dt, x, T * N, I, w, D * G * H, xb,
                                      out=out).reshape((T, N, D * G * H))
            else:
                gx = into.sav if into.sav is not None else self._new(
                    "sav", (T, N, D * G * H), pooled="sav" in dropped)

        def result(name, given, width):
            if given is None:
                return self._new(name, (T, N, width), pooled=name in dropped)
            assert given.shape == (T, N, width) and given.dtype == dt, given.shape
            return given

        y = result("y", into.y, D * K)
        cs = result("cs", into.cs, D * H) if self.cell.has_c else None
        hs = None
        if self.P:
            hs = result("hs", into.hs, D * H)
        elif self.cell.two_phase:    # the second kernel's input: one step, not saved
            hs = self._new("hs_step", (D * N * H,), pooled=False)
        out = Saved(sav=gx, y=y, cs=cs, hs=hs if self.P else None)
        if T == 0 or N == 0:
            return out
        prog = self._program()
        rpk = self.pack(R, H, K, G, self.cell.gate_blocks)
        c0 = layer.c0 or StateView(self._dummy, 0, 0)
        # the input projection inside the kernel (HAS_XW), or absent
        dummy = self._dummy.base_data
        xargs = dict(xs=dummy, xs_sd=_I64(0), wpk=dummy, **_bias_args(None, 0, self._dummy, "xb"),
                     xb_sg=_I64(0), I=_I32(0))
        seq16 = self._bit_args("in16", _WIDEN_BITS, {})
        if in_kernel is not None:
            prog, I = in_kernel
            wpk = self.pack(w, H, I, G, self.cell.gate_blocks, name="wpk_x")
            bias = xb if xb is not None else read_only_zeros(self.device, dt, D * G * H)
            assert x.offset == 0, "the kernel reads the source from its buffer's start"
            xargs = dict(xs=x.base_data, xs_sd=_I64(0), wpk=wpk.base_data,
                         **_bias_args(bias, G * H, self._dummy, "xb"), xb_sg=_I64(0),
                         I=_I32(I))
            if inputs16:
                h0, c0, xargs, seq16 = self._inputs16_args(inputs16, h0, c0, xargs, I,
                                                           self._row_groups(prog))
        base = dict(T=_I32(T), N=_I32(N), H=_I32(H), rev_mask=_I32(self.rev_mask))
        lens_arg = self._or_dummy(lens)
        args = dict(base, K=_I32(K), gx=gx.base_data, rpk=rpk.base_data,
                    **_bias_args(hb, G * H, self._dummy),
                    peep=self._or_dummy(layer.peep), y=y.base_data, cs=self._or_dummy(cs),
                    hs=self._or_dummy(hs), **_state_args("h0", h0), **_state_args("c0", c0),
                    mask=self._or_dummy(layer.mask), lens=lens_arg, clip=dt.type(self.clip),
                    keep_sav=_I32("sav" not in dropped or self.cell.two_phase), **xargs)
        # the steps narrow as they store: the whole-sequence kernel, or the step kernel where
        # it stores every result (not a two-phase cell's y, nor a projection's)
        narrows = (self._whole_sequence(prog, "pyrnn_fwd_seq")
                   or not (self.cell.two_phase or self.P))
        narrowed = self._narrowed(out, tuple(narrow) + tuple(into16), into16) if narrows else {}
        s16 = dtype_code(self.weights) if self.weights != dt else 0    # 16-bit call: 3 or 4
        args.update(self._bit_args("out16", _NARROW_BITS, narrowed), s16=_I32(s16))
        # what comes back narrowed: the ``narrow`` results, and ``sav`` (never stored in
        # float32 when narrowed); y and cs given in ``into16`` come back in float32 too
        back = {name: a for name, a in narrowed.items() if name not in into16 or name == "sav"}
        if self._fused_launch(prog, "pyrnn_fwd_seq", dict(args, steps=_I32(T), **seq16)):
            return dataclasses.replace(out, **back)     # (always, with in_kernel)
        kernels = [self._step_kernel(prog, "pyrnn_fwd", H, args)]
        if self.cell.two_phase:
            assert hs is not None       # a two-phase cell's step buffer (or the projection's)
            kernels.append(self._step_kernel(
                prog, "pyrnn_fwd_b", H,
                dict(base, gx=gx.base_data, rpk=rpk.base_data,
                     **_bias_args(hb, G * H, self._dummy), y=y.base_data, hs=hs.base_data,
                     **_state_args("h0", h0), lens=lens_arg)))
        if self.P:
            assert hs is not None       # saved with a projection
            wpk = self.pack(layer.w_proj, self.P, H, 1, (0,), name="wpk_proj")
            kernels.append(self._step_kernel(
                prog, "pyrnn_proj", self.P,
                dict(base, P=_I32(self.P), hs=hs.base_data, wpk=wpk.base_data, y=y.base_data,
                     lens=lens_arg)))
        self._run_steps(kernels, range(T))
        if into16 and not narrowed:     # the step kernels did not narrow: one launch after
            narrow_many(self.device, [getattr(out, name) for name in into16], self.weights,
                        out=list(into16.values()))
            out = dataclasses.replace(out, sav=into16.get("sav", out.sav))
        return dataclasses.replace(out, **back)

    def projects_in_kernel(self, I: int) -> bool:
        """Whether :meth:`forward` given the source ``x`` of width ``I`` computes
        ``x[t] W^T + b`` inside its whole-sequence kernel (:meth:`LayerPlan.projects_in_kernel`,
        and the kernel runs whole-sequence). Only then may its ``w`` be a :class:`Target`
        inside another buffer (the cuDNN dialect's ``params``)."""
        return bool(self.T and self.N and self.plan.projects_in_kernel(I)
                    and self._whole_sequence(self._program(HAS_XW=1), "pyrnn_fwd_seq"))

    def _inputs16(self, x, xb, layer: LayerInputs) -> dict[str, cla.Array]:
        """The forward's inputs given in the layer's 16-bit storage dtype, by their names in
        ``pyrnn_fwd_seq`` (:data:`_WIDEN_BITS`)."""
        given = dict(x=x, xb=None if isinstance(xb, Target) else xb,     # (a Target: float32)
                     h0=layer.h0.array if layer.h0 is not None else None,
                     c0=layer.c0.array if layer.c0 is not None else None)
        out = {name: a for name, a in given.items() if a is not None and a.dtype != self.dtype}
        assert all(a.dtype == self.weights for a in out.values()), "inputs of another dtype"
        return out

    def _widen_inputs(self, inputs16, x, xb, layer: LayerInputs):
        """``(x, xb, layer)`` with the 16-bit inputs ``inputs16`` widened (one launch)."""
        names = list(inputs16)
        wide = dict(zip(names, widen_many(self.device, [inputs16[n] for n in names],
                                          self.weights)))
        states = {name: dataclasses.replace(getattr(layer, name), array=wide[name])
                  for name in ("h0", "c0") if name in wide}
        return (wide.get("x", x), wide.get("xb", xb),
                dataclasses.replace(layer, **states) if states else layer)

    def _inputs16_args(self, inputs16, h0: StateView, c0: StateView, xargs, I, groups):
        """``(h0, c0, xargs, seq16)``: the float32 buffers the whole-sequence kernel widens
        the 16-bit ``inputs16`` into (pooled; the source one per direction, the bias one per
        batch-row group of the launching program, ``groups`` of them, the states in their own
        layout) in place of ``h0``, ``c0`` and
        ``xargs``' source and bias, and ``pyrnn_fwd_seq``'s 16-bit input arguments."""
        T, N, D, GH = self.T, self.N, self.D, self.G * self.H
        seq16 = self._bit_args("in16", _WIDEN_BITS, inputs16)
        xargs = dict(xargs)
        if "x" in inputs16:
            xargs.update(xs=temporary(self.device, (D * T * N * I,), self.dtype).base_data,
                         xs_sd=_I64(T * N * I))
        if "xb" in inputs16:
            xargs.update(xb=temporary(self.device, (groups * D * GH,), self.dtype).base_data,
                         xb_off=_I64(0), xb_sd=_I64(GH), xb_sg=_I64(D * GH))
        if "h0" in inputs16:
            h0 = dataclasses.replace(h0, array=temporary(self.device, h0.array.shape, self.dtype))
        if "c0" in inputs16:
            c0 = dataclasses.replace(c0, array=temporary(self.device, c0.array.shape, self.dtype))
        return h0, c0, xargs, seq16

    def _narrowed(self, out: Saved, names, given) -> dict[str, cla.Array]:
        """Arrays of the weights' 16-bit dtype for the results ``names`` of ``out`` that exist
        (:meth:`forward`'s ``narrow`` and 16-bit ``into``): those ``given`` by name, new ones
        for the rest; none outside a 16-bit call."""
        if self.weights == self.dtype:
            return {}
        return {name: given[name] if name in given
                else result_array(self.device, getattr(out, name).shape, self.weights)
                for name in names if getattr(out, name) is not None}

    def _bit_args(self, mask: str, bits: dict[str, int], arrays: dict[str, cla.Array]
                  ) -> dict[str, object]:
        """A whole-sequence kernel's 16-bit arguments of one side (``pyrnn_fwd_seq``'s inputs:
        ``in16`` and :data:`_WIDEN_BITS`, its results: ``out16`` and :data:`_NARROW_BITS`;
        ``pyrnn_bwd_seq``'s inputs: ``in16`` and :data:`_BWD_WIDEN_BITS`): the bit mask
        ``mask`` of the ``arrays`` given (by name), and the buffer ``<name>16`` of each name of
        ``bits`` (the dummy where not given)."""
        args: dict[str, object] = {f"{name}16": arrays[name].base_data if name in arrays
                                   else self._dummy.base_data for name in bits}
        return dict(args, **{mask: _I32(sum(bits[name] for name in arrays))})

    def final_state(self, seq, width, init: StateView, out: StateView, lens=None):
        """``out[d][n] = seq[t_last][n][d]`` (``init`` where a row has length 0); ``init`` and
        ``out`` may each be of the layer's 16-bit storage dtype (read, and rounded, as
        stored)."""
        T, N, D = self.T, self.N, self.D
        if N == 0 or width == 0:
            return
        knl = self._program().kernel("pyrnn_final")
        src = self._dummy if seq is None or T == 0 else seq
        init16, out16 = (a.array.dtype != self.dtype for a in (init, out))
        assert all(a.array.dtype in (self.dtype, self.weights) for a in (init, out))
        dummy = self._dummy.base_data
        _sig("pyrnn_final").set(knl, T=_I32(T), N=_I32(N), W=_I32(width),
                                rev_mask=_I32(self.rev_mask), src=src.base_data,
                                init=dummy if init16 else init.array.base_data,
                                i_sd=_I64(init.sd), i_sn=_I64(init.sn),
                                out=dummy if out16 else out.array.base_data,
                                o_sd=_I64(out.sd), o_sn=_I64(out.sn), lens=self._or_dummy(lens),
                                s16=_I32(dtype_code(self.weights) if init16 or out16 else 0),
                                io16=_I32(init16 + 2 * out16),
                                init16=init.array.base_data if init16 else dummy,
                                out16=out.array.base_data if out16 else dummy)
        enqueue_on(self.device, knl, (width, N, D))

    # -- backward ---------------------------------------------------------------------------

    def chunk_steps(self, full=False):
        """Steps per backward chunk: enough for ``REC_BWD_ROWS`` rows (T*N) of gate gradients in
        the weight-gradient GEMMs of one chunk, at least one; every step when ``full``."""
        return self.plan.chunk_steps(full)

    def backward(self, fwd: Saved, layer: LayerInputs, upstream: Upstream,
                 targets: GradTargets, *, full=False) -> Gradients:
        """Backward through time from the forward results ``fwd`` (:meth:`forward`'s
        :class:`Saved`), with the weight gradients accumulated as it goes. ``fwd.y`` may be None
        for an LSTM or RNN without projection: h[t-1] is then computed per chunk from the saved
        gates (and c), where the recurrent weight gradient needs it.

        ``layer``: the forward's :class:`LayerInputs`; ``upstream``: the gradients of the
        outputs (:class:`Upstream`); ``targets``: where the gradients go (:class:`GradTargets`).
        Writes ``dh0``/``dc0``.

        The steps run in chunks of :meth:`chunk_steps` (from the last step down); after each
        chunk, GEMMs over its rows add that chunk's share to the weight gradients:
        ``dR[d] = sum_t dgh[t, d]^T (h[t-1] . m[t])`` (into ``dR``, or a new ``[D][G*H][K]``
        array; skipped without ``need_dR``), ``dW_proj[d] = sum_t dr[t, d]^T hs[t, d]`` (into
        ``dwp``, or a new ``[D][P][H]`` array), the peephole gradient, and the gradients of
        the input side ``gx = x W^T + b`` described by ``targets.inputs``. The gate gradients
        of all steps never exist at once: the workspace is bounded by the chunk, not by T.

        ``full``: one chunk of every step, and the gate gradients ``dgx`` (input side,
        ``[T][N][D*G*H]``) and ``dgh`` (hidden side; the same array unless the cell keeps them
        apart: ``CellSpec.separate_dgh``, a GRU) are returned. Returns :class:`Gradients`.

        A 16-bit call (the layer's weights of a 16-bit storage dtype) may give the saved
        sequences (``fwd.sav``, ``fwd.y``, ``fwd.cs``), the upstream gradients (``dy``,
        ``dhn``, ``dcn``), the initial states and the source ``targets.inputs.x`` in that
        dtype: the kernels read the saved gates, the cell states and ``dy`` as they are, and
        the whole-sequence kernel's first launch widens the rest, or one launch before the
        others (:meth:`_grad_inputs`).
        """
        T, N, H, D, K, G = self.T, self.N, self.H, self.D, self.K, self.G
        dt, dev = self.dtype, self.device
        steps = self.chunk_steps(full)
        self._check_memory(backward=True, steps=steps)
        # Absent upstream gradients are passed as zeros rather than compiled out: one backward
        # program per cell configuration instead of one per subset of given gradients (each
        # PoCL build costs seconds); the zero fill is cheap next to the recurrence.
        if upstream.dy is None and T and N:
            upstream = dataclasses.replace(
                upstream, dy=self._new("dy", (T, N, D * K), pooled=False, zeros=True))
        flags = dict(HAS_DY=int(upstream.dy is not None), HAS_DHN=1,
                     HAS_DCN=int(self.cell.has_c), HAS_DCS=int(upstream.dcs is not None),
                     REC_NB=self.nb, BWD_PROGRAM=1)
        prog = self._program(**flags)
        fwd, layer, upstream, inputs, read16, seq16 = self._grad_inputs(
            fwd, layer, upstream, targets.inputs,
            in_kernel=bool(T and N) and self._whole_sequence(prog, "pyrnn_bwd_seq"))
        R, h0, c0, hb, peep = layer.R, layer.h0, layer.c0, layer.hb, layer.peep
        mask, lens, w_proj = layer.mask, layer.lens, layer.w_proj
        dy, dhn, dcn, dcs = upstream.dy, upstream.dhn, upstream.dcn, upstream.dcs
        dh0, dc0, dR, dwp = targets.dh0, targets.dc0, targets.dR, targets.dwp
        GH, P = G * H, self.P
        ring = steps < T
        rows = min(steps, T)     # (T = 0: empty buffers)
        dgx = self._new("dgx", (rows, N, D * GH), pooled=not full)   # (full: returned)
        dgh = self._new("dgh", (rows, N, D * GH), pooled=True) if self.cell.separate_dgh else dgx
        dr = self._new("dr", (rows, N, D * P), pooled=True) if P else None
        gring = self._new("gring", (2, N, D * GH), pooled=True) if ring else self._dummy
        dR_out = dwp_out = dpeep = None
        if targets.need_dR:
            dR_out = dR.array if dR is not None else self._new("dR", (D, GH, K), pooled=False)
            dR = dR or Target(dR_out, 0, GH * K)
        else:
            dR = None
        if P:
            dwp_out = dwp.array if dwp is not None else self._new("dwp", (D, P, H), pooled=False)
            dwp = dwp or Target(dwp_out, 0, P * H)
        if self.flags["HAS_PEEP"]:
            dpeep = self._new("dpeep", (D * GH,), pooled=False)
        if inputs is not None and inputs.dx is not None and D > 1 and ring:
            fill(inputs.dx, 0)    # both directions add to every step, in different chunks
        if dhn is None:     # every (d, n) reads the same row of zeros
            dhn = StateView(read_only_zeros(dev, dt, K), 0, 0)
        if dcn is None and self.cell.has_c:
            dcn = StateView(read_only_zeros(dev, dt, H), 0, 0)
        c0 = c0 or StateView(self._dummy, 0, 0)
        dc0 = dc0 or StateView(self._dummy, 0, 0)
        dcn_v = dcn or StateView(self._dummy, 0, 0)
        # the direct-path carries between consecutive steps: a ring of two steps
        carry_h = self._new("carry_h", (2, N, D * H), pooled=True)
        carry_c = self._new("carry_c", (2, N, D * H), pooled=True) if self.cell.has_c else None
        rpk = None
        if self.cell.needs_hn and T and N:
            rpk = self.pack(R, H, K, G, self.cell.gate_blocks)
        # transposed packs for the reductions dh = dgh R (and dh = dr W_proj); rows that add
        # nothing read the zero row
        rt = wt = None
        if N:
            rt = self.pack_t(R, G * H, K)
            wt = self.pack_t(w_proj, P, H, name="wt") if P else rt
        zrow = read_only_zeros(dev, dt, max(GH, K))
        if fwd.y is None and (self.cell.bwd_needs_y or P):
            raise ValueError(f"Recurrence.backward: fwd.y is needed for a {self.cell.kind} "
                             "cell or a projection (h cannot be rebuilt from the saved gates)")
        y = fwd.y if T and fwd.y is not None else self._dummy

        # every argument by name but the chunk's steps (s_lo, s_hi) and the step s (no rows:
        # no step kernels)
        bwd = bwd_b = proj = None
        if N:
            assert rt is not None and wt is not None    # packed above whenever N
            assert fwd.sav is not None      # a forward always saves the gates
            base = dict(T=_I32(T), N=_I32(N), H=_I32(H), rev_mask=_I32(self.rev_mask),
                        ring=_I32(ring), gring=gring.base_data, lens=self._or_dummy(lens))
            if P:
                assert dr is not None       # allocated above whenever P
                proj = dict(base, P=_I32(P), dgh=dgh.base_data, rt=rt.base_data,
                            zrow=zrow.base_data, dy=self._or_dummy(dy), dr=dr.base_data,
                            **_state_args("dhn", dhn), **_state_args("dh0", dh0))
            bwd = dict(base, K=_I32(K), sav=fwd.sav.base_data, dgx=dgx.base_data,
                       dgh=dgh.base_data, wt=wt.base_data, zrow=zrow.base_data,
                       rpk=self._or_dummy(rpk), **_bias_args(hb, G * H, self._dummy),
                       peep=self._or_dummy(peep),
                       y=y.base_data, cs=self._or_dummy(fwd.cs if T else None),
                       dy=self._or_dummy(dr if P else dy), **_state_args("dhn", dhn),
                       **_state_args("dcn", dcn_v), dcs=self._or_dummy(dcs),
                       carry_h=carry_h.base_data, carry_c=self._or_dummy(carry_c),
                       **_state_args("dh0", dh0), **_state_args("dc0", dc0),
                       **_state_args("h0", h0), **_state_args("c0", c0),
                       mask=self._or_dummy(mask), clip=dt.type(self.clip), **read16)
            if self.cell.two_phase:
                bwd_b = dict(base, sav=fwd.sav.base_data, dgx=dgx.base_data, dgh=dgh.base_data,
                             rt=rt.base_data, zrow=zrow.base_data, y=y.base_data,
                             carry_h=carry_h.base_data, **_state_args("h0", h0),
                             mask=self._or_dummy(mask))

        # chunks from the last step down (T = 0: one empty chunk, for the pseudo-step and the
        # zero weight gradients)
        bounds = [(max(0, hi - steps), hi) for hi in range(T, 0, -steps)] or [(0, 0)]
        for s_lo, s_hi in bounds:
            if N:
                assert bwd is not None      # built above whenever N
                self._backward_chunk(prog, s_lo, s_hi, bwd, bwd_b, proj, seq16)
                seq16 = dict(seq16, in16=_I32(0))      # (widened by the first chunk's launch)
            chunk = _Chunk(s_lo, s_hi, s_hi == T, dgx, dgh, dr)
            self._chunk_weight_gradients(chunk, fwd, dpeep, dR, dwp, h0=h0, c0=c0, mask=mask,
                                         lens=lens, read16=read16)
            if inputs is not None:
                self._chunk_input_gradients(chunk, inputs)
        return Gradients(dgx=dgx if full else None, dgh=dgh if full else None, dR=dR_out,
                         dwp=dwp_out, dpeep=dpeep)

    def _backward_chunk(self, prog, s_lo, s_hi, bwd: dict[str, object],
                        bwd_b: dict[str, object] | None, proj: dict[str, object] | None,
                        seq16: dict[str, object]):
        """Enqueue the steps ``s_hi-1 .. s_lo`` of the backward (and, in the last chunk, the
        pseudo-step -1 that writes the gradients of h0 and c0): one launch for the chunk when
        :meth:`_whole_sequence` allows, else per step the projection, cell and second GRU
        kernels. ``bwd``, ``bwd_b`` (two-phase cells) and ``proj`` (projection): the arguments
        of those kernels by name, but the steps; ``seq16``: the whole-sequence kernel's 16-bit
        arguments (:meth:`_grad_inputs`)."""
        H, last = self.H, s_lo == 0
        span = dict(s_lo=_I32(s_lo), s_hi=_I32(s_hi))
        if self._fused_launch(prog, "pyrnn_bwd_seq",
                              dict(bwd, s_last=_I32(-1 if last else s_lo), **span, **seq16)):
            return
        kernels = []
        if proj is not None:
            kernels.append(self._step_kernel(prog, "pyrnn_bwd_proj", self.P, dict(proj, **span)))
        kernels.append(self._step_kernel(prog, "pyrnn_bwd", H, dict(bwd, **span)))
        first_phase = list(kernels)
        if bwd_b is not None:
            kernels.append(self._step_kernel(prog, "pyrnn_bwd_b", H, dict(bwd_b, **span)))
        self._run_steps(kernels, range(s_hi - 1, s_lo - 1, -1))
        if last:   # pseudo-step -1: gradients of h0 and c0 (no second GRU phase there)
            self._run_steps(first_phase, [-1])

    def _grad_inputs(self, fwd: Saved, layer: LayerInputs, upstream: Upstream,
                     inputs: InputSide | None, in_kernel: bool):
        """``(fwd, layer, upstream, inputs, read16, seq16)``: the backward's arguments without
        16-bit arrays (:meth:`backward`), and the 16-bit arguments of its kernels (``read16``:
        the step, ``pyrnn_gather_hin`` and ``pyrnn_peep_grad`` kernels; ``seq16``:
        ``pyrnn_bwd_seq``'s own).

        The kernels read the saved gates, the cell states and ``dy`` as they are
        (:data:`_BWD_READ_BITS`; the dummy stands in their float32 place), except for a
        two-phase cell or a projection. With ``in_kernel`` (the whole-sequence kernel runs)
        ``pyrnn_bwd_seq`` widens the rest (:data:`_BWD_WIDEN_BITS`) into pooled float32 arrays
        of the same shapes; otherwise they are widened here, in one launch. The source counts
        only where the input weight's gradient reads it."""
        x = inputs.x if inputs is not None and inputs.dw is not None else None
        given = dict(sav=fwd.sav, cs=fwd.cs, y=fwd.y, dy=upstream.dy,
                     dhn=upstream.dhn.array if upstream.dhn is not None else None,
                     dcn=upstream.dcn.array if upstream.dcn is not None else None,
                     h0=layer.h0.array, c0=layer.c0.array if layer.c0 is not None else None,
                     x=x)
        arrays16 = {name: a for name, a in given.items()
                    if a is not None and a.dtype != self.dtype}
        assert all(a.dtype == self.weights for a in arrays16.values()), "inputs of another dtype"
        # (the second kernel of a two-phase cell and the projection's read sav and dy in float32)
        direct = not self.cell.two_phase and not self.P
        read = {n: a for n, a in arrays16.items() if n in _BWD_READ_BITS} if direct else {}
        widened = {n: a for n, a in arrays16.items() if n not in read}
        s16 = _I32(dtype_code(self.weights) if arrays16 else 0)
        read16 = dict(self._bit_args("rd16", _BWD_READ_BITS, read), s16=s16)
        seq16 = dict(self._bit_args("in16", _BWD_WIDEN_BITS, widened if in_kernel else {}),
                     I=_I32(0), xs=self._dummy.base_data)
        if not arrays16:
            return fwd, layer, upstream, inputs, read16, seq16
        names = list(widened)
        if in_kernel:
            wide = {name: temporary(self.device, widened[name].shape, self.dtype)
                    for name in names}
            if inputs is not None and "x" in wide:
                seq16.update(I=_I32(inputs.I), xs=wide["x"].base_data)
        else:
            wide = dict(zip(names, widen_many(self.device, [widened[n] for n in names],
                                              self.weights)))
        wide.update({name: self._dummy for name in read})

        def state(view, name):
            return dataclasses.replace(view, array=wide[name]) if name in wide else view

        fwd = dataclasses.replace(fwd, **{n: wide[n] for n in ("sav", "cs", "y") if n in wide})
        upstream = dataclasses.replace(upstream, dy=wide.get("dy", upstream.dy),
                                       dhn=state(upstream.dhn, "dhn"),
                                       dcn=state(upstream.dcn, "dcn"))
        layer = dataclasses.replace(layer, h0=state(layer.h0, "h0"), c0=state(layer.c0, "c0"))
        if inputs is not None and "x" in wide:
            inputs = dataclasses.replace(inputs, x=wide["x"])
        return fwd, layer, upstream, inputs, read16, seq16

    def _chunk_times(self, chunk, d):
        """``(t0, t1)``: the times of direction ``d`` in ``chunk`` (row 0 holds ``t0``)."""
        if (self.rev_mask >> d) & 1:
            return self.T - chunk.s_hi, self.T - chunk.s_lo
        return chunk.s_lo, chunk.s_hi

    def _chunk_weight_gradients(self, chunk, fwd: Saved, dpeep, dR, dwp, *, h0, c0, mask, lens,
                                read16):
        """Add ``chunk``'s share to ``dR``, ``dW_proj`` and the peephole gradient (the first
        chunk overwrites them). ``read16``: the 16-bit arguments (:meth:`_grad_inputs`)."""
        T, N, H, D, K, G = self.T, self.N, self.H, self.D, self.K, self.G
        GH, P, n = G * H, self.P, chunk.steps
        dt, dev = self.dtype, self.device
        beta = 0.0 if chunk.first else 1.0
        rows = n * N
        if dR is not None:
            if mask is None and lens is None and not self.cell.two_phase \
                    and fwd.y is not None:
                # h[t-1] is y at the previous step (h0 at the first one): GEMMs on y shifted
                # by one step, no gathered copy
                for d in range(D):
                    t0, t1 = self._chunk_times(chunk, d)
                    rev = (self.rev_mask >> d) & 1
                    if rev:     # t reads y[t+1], t = T-1 reads h0
                        ya, yb, t_h0, shift = t0, min(t1, T - 1), T - 1, 1
                    else:       # t reads y[t-1], t = 0 reads h0
                        ya, yb, t_h0, shift = max(t0, 1), t1, 0, -1
                    c_off = dR.offset + d * dR.stride
                    gemm(dev, dt, GH, K, max(yb - ya, 0) * N, chunk.dgh, fwd.y, dR.array,
                         trans_a=True, a_offset=(ya - t0) * N * D * GH + d * GH, lda=D * GH,
                         b_offset=max(ya + shift, 0) * N * D * K + d * K, ldb=D * K,
                         c_offset=c_off, beta=beta, k_block=WEIGHT_GRADIENT_K_BLOCK)
                    if t0 <= t_h0 < t1 and (h0.sd or h0.sn):  # (stride 0: the zero state)
                        gemm(dev, dt, GH, K, N, chunk.dgh, h0.array, dR.array, trans_a=True,
                             a_offset=(t_h0 - t0) * N * D * GH + d * GH, lda=D * GH,
                             b_offset=d * h0.sd, ldb=h0.sn, c_offset=c_off, beta=1.0)
            else:
                hin, hr = self._gather_hin(chunk, fwd, h0, mask, lens, read16)
                # gate rows [lo, hi) and their input; a two-phase cell's late block reads hr
                parts = [(0, GH, hin)]
                if hr is not None:
                    o = self.cell.gate_blocks[self.cell.late_slot] * H
                    parts = [(0, o, hin), (o, o + H, hr), (o + H, GH, hin)]
                for d in range(D):
                    c_off = dR.offset + d * dR.stride
                    for lo, hi, src in parts:
                        gemm(dev, dt, hi - lo, K, rows, chunk.dgh, src, dR.array, trans_a=True,
                             a_offset=d * GH + lo, lda=D * GH, b_offset=d * K, ldb=D * K,
                             c_offset=c_off + lo * K, beta=beta,
                             k_block=WEIGHT_GRADIENT_K_BLOCK)
        if P:
            for d in range(D):
                t0, _ = self._chunk_times(chunk, d)
                gemm(dev, dt, P, H, rows, chunk.dr, fwd.hs, dwp.array, trans_a=True,
                     a_offset=d * P, lda=D * P, b_offset=t0 * N * D * H + d * H, ldb=D * H,
                     c_offset=dwp.offset + d * dwp.stride, beta=beta,
                     k_block=WEIGHT_GRADIENT_K_BLOCK)
        if dpeep is not None:
            pg = self._program().kernel("pyrnn_peep_grad")
            _sig("pyrnn_peep_grad").set(
                pg, T=_I32(T), N=_I32(N), H=_I32(H), rev_mask=_I32(self.rev_mask),
                s_lo=_I32(chunk.s_lo), s_hi=_I32(chunk.s_hi), beta=dt.type(beta),
                dgx=chunk.dgx.base_data, cs=self._or_dummy(fwd.cs if T else None),
                **_state_args("c0", c0), lens=self._or_dummy(lens), dpeep=dpeep.base_data,
                s16=read16["s16"], rd16=read16["rd16"], cs16=read16["cs16"])
            enqueue_on(dev, pg, (H, G, D))

    def _gather_hin(self, chunk, fwd: Saved, h0, mask, lens, read16):
        """``hin = h[t-1] . m[t]`` for the steps of ``chunk`` (``[steps][N][D*K]``) and for a
        two-phase cell ``hr = hin . g`` (g its late gate, a GRU's r): the right-hand sides of
        the recurrent weight gradient where lengths, a mask or the late gate make them differ
        from y, or where ``fwd`` has no ``y`` (LSTM, RNN: h computed from the saved gates and
        c)."""
        N, D, K, n = self.N, self.D, self.K, chunk.steps
        dev = self.device
        hin = self._new("hin", (max(n, 1), N, D * K), pooled=True)
        hr = self._new("hr", (max(n, 1), N, D * K), pooled=True) if self.cell.two_phase else None
        if n and N:
            assert fwd.sav is not None      # a forward always saves the gates
            knl = self._program().kernel("pyrnn_gather_hin")
            _sig("pyrnn_gather_hin").set(
                knl, T=_I32(self.T), N=_I32(N), K=_I32(K), rev_mask=_I32(self.rev_mask),
                s_lo=_I32(chunk.s_lo), s_hi=_I32(chunk.s_hi), y=self._or_dummy(fwd.y),
                **_state_args("h0", h0), mask=self._or_dummy(mask), lens=self._or_dummy(lens),
                sav=fwd.sav.base_data, cs=self._or_dummy(fwd.cs), from_sav=_I32(fwd.y is None),
                hin=hin.base_data, hr=self._or_dummy(hr),
                **{k: read16[k] for k in ("s16", "rd16", "sav16", "cs16")})
            enqueue_on(dev, knl, (-(-K // self.vw), N, n * D))
        return hin, hr

    def _chunk_input_gradients(self, chunk, side: InputSide):
        """Add ``chunk``'s share to the gradients of ``gx = x W^T + b``: ``dx`` rows of the
        chunk's times (``dgx W``, or the sum of every gate block without ``W``), ``dW``, ``db``
        and ``dhb`` (the first chunk overwrites them)."""
        N, H, D, G = self.N, self.H, self.D, self.G
        GH, I, n = G * H, side.I, chunk.steps
        dt, dev = self.dtype, self.device
        beta = 0.0 if chunk.first else 1.0
        rows = n * N
        whole = n == self.T      # one chunk: every direction covers the same times
        if side.dx is not None and side.w is not None:
            if whole and D > 1 and side.w.stride == GH * I:    # W of both directions stacked
                gemm(dev, dt, rows, I, D * GH, chunk.dgx, side.w.array, side.dx,
                     b_offset=side.w.offset)
            else:
                for d in range(D):
                    t0, _ = self._chunk_times(chunk, d)
                    gemm(dev, dt, rows, I, GH, chunk.dgx, side.w.array, side.dx,
                         a_offset=d * GH, lda=D * GH, b_offset=side.w.offset + d * side.w.stride,
                         c_offset=t0 * N * I, beta=float(d > 0 if whole else D > 1))
        elif side.dx is not None:   # skip input: dx = the sum of every gate block
            if whole:
                sum_rows(dev, dt, D * G, H, chunk.dgx, side.dx, batch=rows, stride_a=D * GH,
                         stride_out=H)
            else:       # (two directions: dx was zeroed, each adds its times)
                for d in range(D):
                    t0, _ = self._chunk_times(chunk, d)
                    sum_rows(dev, dt, G, H, chunk.dgx, side.dx, a_offset=d * GH, batch=rows,
                             stride_a=D * GH, out_offset=t0 * N * H, stride_out=H,
                             beta=float(D > 1))
        if side.dw is not None:
            for d in range(D):
                t0, _ = self._chunk_times(chunk, d)
                gemm(dev, dt, GH, I, rows, chunk.dgx, side.x, side.dw.array, trans_a=True,
                     a_offset=d * GH, lda=D * GH, b_offset=t0 * N * I, ldb=I,
                     c_offset=side.dw.offset + d * side.dw.stride, ldc=I, beta=beta,
                     k_block=WEIGHT_GRADIENT_K_BLOCK)
        # with one kind of gate gradient both biases get the same sums: dhb copies db's once
        # every chunk is in
        copy_dhb = side.dhb is not None and side.db is not None and chunk.dgh is chunk.dgx
        sums = [(side.db, chunk.dgx), (None if copy_dhb else side.dhb, chunk.dgh)]
        for target, grads in sums:
            if target is not None:
                sum_rows(dev, dt, rows, GH, grads, target.array, lda=D * GH,
                         out_offset=target.offset, batch=D, stride_a=GH, stride_out=target.stride,
                         beta=beta)
        if copy_dhb and chunk.s_lo == 0:      # the last chunk
            assert side.dhb is not None and side.db is not None     # copy_dhb says so
            copy3(dev, dt, side.dhb.array, side.dhb.offset, (side.dhb.stride, 0, 1),
                  side.db.array, side.db.offset, (side.db.stride, 0, 1), (D, 1, GH))


@dataclass(frozen=True)
class _Chunk:
    """Steps ``s_lo .. s_hi-1`` of a backward, their gate gradients in the chunk buffers."""

    s_lo: int
    s_hi: int
    first: bool
    dgx: cla.Array
    dgh: cla.Array
    dr: cla.Array | None

    @property
    def steps(self):
        return self.s_hi - self.s_lo
