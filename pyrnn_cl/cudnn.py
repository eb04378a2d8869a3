r"""cuDNN dialect (API.md §3, semantics.md §4): the fused multi-layer ``CudnnRNNV3`` op, its
backprop, and the conversions between the flat ``params`` buffer and the canonical form.

Per layer ``l`` and direction ``d`` (gate ``g`` as in PyTorch's chunks, double biases):

.. math::

    gx_g = x_t W_g^T + bW_g \quad(\text{skip\_input, layer 0: } gx_g = x_t + bW_g),\qquad
    gh_g = h_{t-1} R_g^T + bR_g

* ``rnn_relu`` / ``rnn_tanh``: :math:`h_t = act(gx + gh)`;
* ``lstm`` (i, f, g, o): :math:`i, f, o = \sigma(gx + gh)`, :math:`g = \tanh(gx_g + gh_g)`,
  :math:`c_t = f \odot c_{t-1} + i \odot g`, :math:`h_t = o \odot \tanh(c_t)`; with
  ``num_proj`` the emitted and recurrent state is :math:`r_t = h_t W_{proj}^T`;
* ``gru`` (r, z, n): :math:`r, z = \sigma(gx + gh)`, :math:`n = \tanh(gx_n + r \odot gh_n)`,
  :math:`h_t = (1 - z) \odot n + z \odot h_{t-1}`.

Layer ``l + 1`` reads layer ``l``'s output ``[T, N, D·R]`` (forward | backward units), after
inter-layer dropout in training. ``sequence_lengths``: steps ``t ≥ len`` output 0 and leave the
state alone; the reverse direction starts at each row's own last step.

Everything runs on the generic engine (:class:`pyrnn_cl.engine.Recurrence`), one call per layer
with both directions in one launch per step. The cuDNN cells map onto it as: RNN one gate; LSTM
canonical slots (i, f, g, o) = blocks (0, 1, 2, 3); GRU canonical (z, r, o) = PyTorch blocks
(1, 0, 2) with reset-after and ``h = z h + (1 - z) o``; ``bW`` enters through the input
projection and ``bR`` as the engine's hidden-side bias ``hb`` for every mode. Offsets into
``params``, the states, ``reserve_space`` and ``host_reserved`` are in :mod:`pyrnn_cl.layout`.

Dropout (semantics.md §4.5): each non-last layer's output is multiplied, before it feeds the
next layer, by a mask of kept values ``1/(1-p)`` and zeros drawn from Philox4x32-10 keyed by
``(seed, seed2) mod 2^32`` with counter (layer, t, n, unit) (``cl/dropout.cl``): reproducible on
every device, no state between calls, regenerated in backprop.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from . import engine
from ._arrays import (
    Call,
    Span,
    check_bool,
    check_choice,
    check_float,
    check_in_order,
    check_int,
    check_rank,
    check_shape,
    common_dtype,
    copied_at_creation,
    fill,
    is_array,
    narrow_many,
    sub_array,
    temporary,
    to_host,
    widen_many,
    widen_runs,
)
from ._lifecycle import entry_point
from ._types import Array, DeviceArg
from .cells import ACTIVATIONS, CellSpec
from .engine import Recurrence, StateView
from .errors import ShapeError
from .gemm import gemm
from .layout import (
    DIRECTIONS,
    HOST_RESERVED_SIZE,
    INPUT_MODES,
    RNN_MODES,
    SAVED_PARTS,
    Reserve,
    host_signature,
    make_layout,
    swap01_strides,
)
from .programs import driver_lock, enqueue_on, get_program, set_args
from .sources import compute_dtype, dtype_code

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = ["cudnn_rnn_params_size", "cudnn_rnn_canonical_to_params",
           "cudnn_rnn_params_to_canonical", "cudnn_rnn", "cudnn_rnn_backprop",
           "cudnn_rnn_reserve_space_size"]


@functools.cache
def _cell(mode) -> CellSpec:
    """The engine cell of an ``rnn_mode`` (canonical slots -> PyTorch gate blocks); one per
    mode (a new ``CellSpec`` per call costs its construction and first registry look-up)."""
    A = ACTIVATIONS
    if mode in ("rnn_relu", "rnn_tanh"):
        return CellSpec("rnn", (0,), (A["relu"] if mode == "rnn_relu" else A["tanh"],))
    if mode == "lstm":          # slots i, f, g, o = PyTorch chunks i, f, g, o
        return CellSpec("lstm", (0, 1, 2, 3), (A["sigmoid"], A["sigmoid"], A["tanh"],
                                               A["sigmoid"]))
    # slots z, r, o = PyTorch chunks (r, z, n) -> blocks (1, 0, 2)
    return CellSpec("gru", (1, 0, 2), (A["sigmoid"], A["sigmoid"], A["tanh"]), reset_after=True,
                    flip_z=True)


# ---- sizes and conversions ------------------------------------------------------------------

def cudnn_rnn_params_size(num_layers: int, num_units: int, input_size: int, *,
                          rnn_mode: str = "lstm", input_mode: str = "linear_input",
                          direction: str = "unidirectional", num_proj: int = 0) -> int:
    r"""Length of the flat ``params``:
    :math:`\sum_l D\,[G H\,in_l + G H R + P H + 2 G H]` (no ``G H in_0`` with skip_input) —
    PyTorch's parameter count of the same ``nn.RNN/LSTM/GRU``. Elements, whatever the dtype:
    the buffer takes this times the itemsize in bytes (float16/bfloat16: half of float32's,
    as cuDNN's byte size for half is)."""
    return make_layout(num_layers, num_units, input_size, rnn_mode=rnn_mode,
                       input_mode=input_mode, direction=direction, num_proj=num_proj).size


def cudnn_rnn_reserve_space_size(num_layers: int, num_units: int, input_size: int, seq_length: int,
                                 batch_size: int, *, rnn_mode: str = "lstm",
                                 input_mode: str = "linear_input",
                                 direction: str = "unidirectional", dropout: float = 0.0,
                                 seed: int = 0, seed2: int = 0, num_proj: int = 0,
                                 time_major: bool = True, is_training: bool = True) -> int:
    r"""Elements (of the op's dtype) of the ``reserve_space`` that :func:`cudnn_rnn` returns for
    these sizes, known before anything is allocated:
    :math:`L\,T\,N\,D\,(G H + R + [\text{lstm}]\,H + [P > 0]\,H)
    + [p > 0]\,(L - 1)\,T\,N\,D\,R` plus the padding that starts every part at a multiple of
    256 elements, 0 when not training (layout in :mod:`pyrnn_cl.layout`). The seeds and
    ``time_major`` do not change it."""
    lay = make_layout(num_layers, num_units, input_size, rnn_mode=rnn_mode,
                      input_mode=input_mode, direction=direction, num_proj=num_proj)
    T = check_int("seq_length", seq_length, 0)
    N = check_int("batch_size", batch_size, 0)
    check_float("dropout", dropout, 0.0, 1.0)
    check_int("seed", seed)
    check_int("seed2", seed2)
    check_bool("time_major", time_major)
    if not check_bool("is_training", is_training):
        return 0
    return lay.reserve_size(T, N, dropout_applied=dropout > 0 and lay.L > 1)


def _copy(queue, dst, dst_off, src, src_off, count):
    """Copy ``count`` elements between device arrays (element offsets, added to the arrays'
    own offsets)."""
    if count <= 0:
        return
    isz = dst.dtype.itemsize
    with driver_lock:
        cl.enqueue_copy(queue, dst.base_data, src.base_data, byte_count=count * isz,
                        src_offset=src.offset + src_off * isz,
                        dst_offset=dst.offset + dst_off * isz)


@entry_point
def cudnn_rnn_canonical_to_params(num_layers: int, num_units: int, input_size: int,
                                  weights: Sequence[Array], biases: Sequence[Array], *,
                                  rnn_mode: str = "lstm", input_mode: str = "linear_input",
                                  direction: str = "unidirectional", num_proj: int = 0,
                                  device: DeviceArg = None) -> Array:
    """Flat ``params`` from the canonical ``weights`` and ``biases`` lists (TF's order, API.md §3;
    PyTorch's ``weight_ih_l{l}.chunk(G)`` etc.). NumPy in, NumPy out (no device needed);
    device arrays in, a device array out."""
    lay = make_layout(num_layers, num_units, input_size, rnn_mode=rnn_mode,
                      input_mode=input_mode, direction=direction, num_proj=num_proj)
    wspec, bspec = lay.canonical()
    named = []
    for kind, arrays, spec in (("weights", weights, wspec), ("biases", biases, bspec)):
        if is_array(arrays) or not hasattr(arrays, "__len__"):
            raise TypeError(f"{kind}: expected a list of {len(spec)} arrays, got "
                            f"{type(arrays).__name__}")
        arrays = list(arrays)
        if len(arrays) != len(spec):
            raise ValueError(f"{kind}: got {len(arrays)} arrays, expected {len(spec)} for "
                             f"num_layers={lay.L}, rnn_mode={lay.mode!r}, D={lay.D}, "
                             f"skip_input={lay.skip}, num_proj={lay.P}")
        named += [(f"{kind}[{i}]", a, off, shape) for i, (a, (off, shape))
                  in enumerate(zip(arrays, spec))]
    dtype, _ = common_dtype((n, a) for n, a, _, _ in named)
    for name, a, _, shape in named:
        check_shape(name, a, shape)
    if isinstance(named[0][1], np.ndarray):
        params = np.empty(lay.size, dtype)
        for _, a, off, _shape in named:
            host = to_host(a) if isinstance(a, cla.Array) else a
            params[off:off + host.size] = np.asarray(host).reshape(-1)
        return params
    call = Call({n: a for n, a, _, _ in named}, device)
    params = call.empty((lay.size,))
    for name, a, off, _ in named:
        _copy(call.queue, params, off, call.dev(name, a), 0, a.size)
    return call.out(params)


@entry_point
def cudnn_rnn_params_to_canonical(num_layers: int, num_units: int, input_size: int, params: Array,
                                  *, rnn_mode: str = "lstm", input_mode: str = "linear_input",
                                  direction: str = "unidirectional", num_proj: int = 0,
                                  device: DeviceArg = None) -> tuple[list[Array], list[Array]]:
    """``(weights, biases)`` lists (canonical order, fresh copies) from the flat ``params``;
    the exact inverse of :func:`cudnn_rnn_canonical_to_params`."""
    lay = make_layout(num_layers, num_units, input_size, rnn_mode=rnn_mode,
                      input_mode=input_mode, direction=direction, num_proj=num_proj)
    common_dtype([("params", params)])
    check_rank("params", params, 1)
    if params.shape[0] != lay.size:
        raise ShapeError(f"params: got {params.shape[0]} elements, expected {lay.size} "
                         f"(cudnn_rnn_params_size for these arguments)")
    wspec, bspec = lay.canonical()
    if isinstance(params, np.ndarray):
        return ([params[o:o + math.prod(s)].reshape(s).copy() for o, s in wspec],
                [params[o:o + math.prod(s)].reshape(s).copy() for o, s in bspec])
    call = Call({"params": params}, device)
    p = call.dev("params", params)

    def take(off, shape):
        out = call.empty(shape)
        _copy(call.queue, out, 0, p, off, math.prod(shape))
        return call.out(out)

    return [take(o, s) for o, s in wspec], [take(o, s) for o, s in bspec]


# ---- the op ---------------------------------------------------------------------------------

def _dropout(device, dtype, dst, src, T, N, W, layer, p, seed, seed2):
    """Enqueue ``dst = src ⊙ mask`` for a time-major ``[T][N][W]`` layer output
    (``cl/dropout.cl``): kept where the Philox word is ``≥ ceil(p·2^32)``, scaled by
    ``1/(1-p)`` (0 when p = 1)."""
    if T * N * W == 0:
        return
    thr = min(1 << 32, math.ceil(p * 2.0 ** 32))
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    prog = get_program(device, "dropout.cl", {"PYRNN_DTYPE": dtype_code(dtype)})
    knl = prog.kernel("pyrnn_dropout")
    set_args(knl, dst.base_data, src.base_data, np.int32(N), np.int32(W),
             np.uint32(seed & 0xFFFFFFFF), np.uint32(seed2 & 0xFFFFFFFF), np.uint32(layer),
             np.uint64(thr), np.dtype(dtype).type(scale))
    enqueue_on(device, knl, ((W + 3) // 4, N, T))


@entry_point
def cudnn_dropout_mask(shape: Sequence[int], layer: int, dropout: float, *, seed: int = 0,
                       seed2: int = 0, dtype: DTypeLike = np.float32,
                       device: DeviceArg = None) -> np.ndarray:
    """The inter-layer dropout mask that :func:`cudnn_rnn` applies to layer ``layer``'s output
    (time-major ``shape = (T, N, D·R)``) for these ``dropout``/``seed``/``seed2``, as a NumPy
    array of ``1/(1-p)`` (kept) and 0 (dropped): for reproducing or inspecting a training run.
    With a 16-bit ``dtype`` the mask is computed in float32 (as the op applies it) and rounded."""
    from .devices import resolve_device

    T, N, W = (check_int(f"shape[{i}]", v, 0) for i, v in enumerate(shape))
    p = check_float("dropout", dropout, 0.0, 1.0)
    layer = check_int("layer", layer, 0, 2 ** 32 - 1)
    dev = resolve_device(device)
    check_in_order(dev)
    storage = np.dtype(dtype)
    dt = dev.check_dtype(compute_dtype(storage))
    if T * N * W == 0:
        return np.zeros((T, N, W), storage)
    ones = fill(temporary(dev, (T, N, W), dt), 1)      # (read back below: from the pool)
    _dropout(dev, dt, ones, ones, T, N, W, layer, p, check_int("seed", seed),
             check_int("seed2", seed2))
    return to_host(ones).astype(storage)


def _check_ignored(name, a, mode) -> None:
    """TypeError unless the c-state argument ``name``, which ``rnn_mode=mode`` ignores, is
    None or an array."""
    if a is not None and not is_array(a):
        raise TypeError(f"{name}: expected None or an array (ignored for rnn_mode={mode!r}), "
                        f"got {type(a).__name__}")


class _Net:
    """Validated sizes, device inputs and per-layer pieces of one cudnn_rnn(_backprop) call."""

    def __init__(self, arrays, attrs, device, *, training):
        mode = check_choice("rnn_mode", attrs["rnn_mode"], RNN_MODES)
        check_choice("input_mode", attrs["input_mode"], INPUT_MODES)
        check_choice("direction", attrs["direction"], DIRECTIONS)
        self.dropout = check_float("dropout", attrs["dropout"], 0.0, 1.0)
        self.seed = check_int("seed", attrs["seed"])
        self.seed2 = check_int("seed2", attrs["seed2"])
        self.time_major = check_bool("time_major", attrs["time_major"])
        self.mode, self.lstm = mode, mode == "lstm"
        if self.lstm and arrays.get("input_c") is None:
            raise ValueError("input_c: required for rnn_mode='lstm' (got None)")
        if not self.lstm:   # other modes ignore every c-state argument
            for name in ("input_c", "output_c", "output_c_backprop"):
                _check_ignored(name, arrays.pop(name, None), mode)
        self.call = call = Call(arrays, device)
        x, h0, params = arrays["input"], arrays["input_h"], arrays["params"]
        D = 2 if attrs["direction"] == "bidirectional" else 1
        check_rank("input", x, 3)
        check_rank("input_h", h0, 3)
        T, N = (x.shape[0], x.shape[1]) if self.time_major else (x.shape[1], x.shape[0])
        LD = h0.shape[0]
        if LD == 0 or LD % D:
            raise ShapeError(f"input_h: got shape {list(h0.shape)}, expected [L*D, N, R] with "
                             f"L*D a positive multiple of D={D}")
        L = LD // D
        if self.lstm:
            c0 = arrays["input_c"]
            check_rank("input_c", c0, 3)
            H = c0.shape[2]
        else:
            H = h0.shape[2]
        if H < 1:
            raise ShapeError(f"{'input_c' if self.lstm else 'input_h'}: got shape "
                             f"{list((arrays['input_c'] if self.lstm else h0).shape)}; the "
                             "number of units (last axis) must be at least 1")
        I = x.shape[2]
        self.lay = lay = make_layout(L, H, I, rnn_mode=mode, input_mode=attrs["input_mode"],
                                     direction=attrs["direction"], num_proj=attrs["num_proj"])
        K = lay.R
        try:
            check_shape("input_h", h0, (LD, N, K))
            if self.lstm:
                check_shape("input_c", arrays["input_c"], (LD, N, H))
        except ShapeError as exc:
            src = ("num_proj" if lay.P else "num_units, read from input_c") if self.lstm \
                else "num_units"
            raise ShapeError(f"{exc} (L*D = {LD} from input_h, N = {N} from input, "
                             f"R = {K} = {src})") from None
        check_rank("params", params, 1)
        if params.shape[0] != lay.size:
            raise ShapeError(f"params: got {params.shape[0]} elements, expected {lay.size} "
                             f"(cudnn_rnn_params_size({L}, {H}, {I}, rnn_mode={mode!r}, "
                             f"input_mode={attrs['input_mode']!r}, "
                             f"direction={attrs['direction']!r}, num_proj={lay.P}))")
        self.T, self.N, self.L, self.H, self.I, self.D, self.K = T, N, L, H, I, D, K
        self.G, self.GH = lay.G, lay.GH
        self.lens = None
        if attrs.get("sequence_lengths") is not None:
            lens = call.lengths("sequence_lengths", attrs["sequence_lengths"], N, T)
            host = call.host("sequence_lengths", attrs["sequence_lengths"])
            if not np.all(np.asarray(host) == T):
                self.lens = lens
        self.training = check_bool("is_training", training)
        self.drop = self.training and self.dropout > 0 and L > 1
        self.dev, self.dt, self.q = call.device, call.dtype, call.queue
        self._wide_b: cla.Array | None = None    # a 16-bit call's biases in float32 (widen16)

    # -- helpers ----------------------------------------------------------------------------

    @property
    def empty_run(self):
        return self.T == 0 or self.N == 0

    def seq_shape(self, width):
        """The shape of a sequence argument or result in the call's layout."""
        return (self.T, self.N, width) if self.time_major else (self.N, self.T, width)

    def to_time_major(self, src, width):
        """A ``[T][N][width]`` device array of a sequence argument on the device (``src``,
        in :meth:`seq_shape`)."""
        T, N = self.T, self.N
        if src is None or self.time_major:
            return src
        out = self.call.empty((T, N, width))
        ds, ss = swap01_strides(N, T, width)
        engine.copy3(self.dev, self.dt, out, 0, ds, src, 0, ss, (N, T, width))
        return out

    def seq_out(self, a, width):
        """``(array, shape)`` for :meth:`Call.outs` of a time-major ``[T][N][width]`` result, in
        the call's layout."""
        T, N = self.T, self.N
        if self.time_major:
            return a, (T, N, width)
        out = self.call.empty((N, T, width))
        ds, ss = swap01_strides(T, N, width)
        engine.copy3(self.dev, self.dt, out, 0, ds, a, 0, ss, (T, N, width))
        return out, None

    def layer_state(self, full, l, width):
        """Layer ``l``'s ``[D][N][width]`` slice of an ``[L·D, N, width]`` device state, to
        read: the same memory where the device can address it (:meth:`state_part`), else a
        copy."""
        part = self.state_part(full, l, width)
        if part is not None:
            return part
        out = self.call.empty((self.D, self.N, width), full.dtype)
        _copy(self.q, out, 0, full, self.lay.state_offset(l, self.N, width),
              self.D * self.N * width)
        return out

    def state_part(self, full, l, width):
        """Layer ``l``'s slice of ``full`` as a view on a sub-buffer (no copy, no queue
        command), or None where the device cannot address it so."""
        return sub_array(self.dev, full, self.lay.state_offset(l, self.N, width),
                         (self.D, self.N, width))

    def out_state(self, full, l, width):
        """``(array, in_place)``: where layer ``l`` writes its slice of the state ``full``: the
        slice itself, or (``in_place`` False) a new array for :meth:`put_state`."""
        part = self.state_part(full, l, width)
        if part is not None:
            return part, True
        return self.call.empty((self.D, self.N, width), full.dtype), False

    def put_state(self, full, l, part, width):
        _copy(self.q, full, self.lay.state_offset(l, self.N, width), part, 0,
              self.D * self.N * width)

    def view(self, a, width):
        return StateView(a, self.N * width, width)

    def gather(self, params, off, l, per_dir):
        """``[D][per_dir]`` from the runs of ``params`` at ``off`` in each pseudo-layer of ``l``
        (16-bit params widened on the way)."""
        out = self.call.empty((self.D * per_dir,))
        if params.dtype != self.dt:
            widen_runs(self.dev, params, off, self.lay.pseudo_size(l), per_dir, self.D, out)
            return out
        engine.copy3(self.dev, self.dt, out, 0, (per_dir, 0, 1), params, off,
                     (self.lay.pseudo_size(l), 0, 1), (self.D, 1, per_dir))
        return out

    def weights(self, params, l):
        """``(R, w_proj)`` of layer ``l`` as engine tensors (:class:`engine.Target`): where they
        lie in ``params`` (the packs read them in place, 16-bit params as stored); ``w_proj``
        None without a projection."""
        lay = self.lay
        stride = lay.pseudo_size(l)
        R = engine.Target(params, lay.off_r(l, 0), stride)
        wp = engine.Target(params, lay.off_proj(l, 0), stride) if lay.P else None
        return R, wp

    def biases(self, params, l):
        """``(bW, bR)`` of layer ``l``, each an :class:`engine.Target`: where they lie in
        ``params`` (direction ``d``'s ``G·H`` values one pseudo-layer apart), or for 16-bit
        params in the ``[L][D][2][G·H]`` float32 array :meth:`widen16` made (``bR`` follows
        ``bW`` in each pseudo-layer)."""
        GH = self.GH
        if params.dtype == self.dt:
            stride = self.lay.pseudo_size(l)
            return (engine.Target(params, self.lay.off_bw(l, 0), stride),
                    engine.Target(params, self.lay.off_br(l, 0), stride))
        assert self._wide_b is not None, "a 16-bit call widens its biases first (widen16)"
        base = l * self.D * 2 * GH
        return (engine.Target(self._wide_b, base, 2 * GH),
                engine.Target(self._wide_b, base + GH, 2 * GH))

    def widen16(self, params, arrays):
        """A 16-bit call's conversions at its start, together: one launch for up to
        :data:`CONVERT_SLOTS` arrays instead of one per layer and kind of input (on a GPU each
        launch costs more host time than its kernel; docs/benchmarks.md). Widens every
        layer's biases (one run of ``bW`` and ``bR`` per direction; kept for :meth:`biases`)
        and the 16-bit device arrays of the dict ``arrays`` (``None`` values skipped), into
        pooled arrays (:meth:`layer_state` takes each layer's part of the initial states as a
        sub-buffer, which ``sub_array`` makes of pooled memory too). Returns
        ``{name: float32 array}`` for those."""
        lay, L, D, GH = self.lay, self.L, self.D, self.GH
        self._wide_b = wide_b = self.call.empty((L * D * 2 * GH,))
        src, dst = [], []
        for l in range(L):
            for d in range(D):
                off, at = lay.off_bw(l, d), (l * D + d) * 2 * GH
                assert lay.off_br(l, d) == off + GH
                src.append(Span.of(params, off, 2 * GH))
                dst.append(Span.of(wide_b, at, 2 * GH))
        names = [name for name, a in arrays.items() if a is not None]
        out = [self.call.empty(arrays[name].shape) for name in names]
        widen_many(self.dev, src + [arrays[name] for name in names], self.call.storage,
                   out=dst + out)
        return dict(zip(names, out))

    def input_gates(self, params, l, x, bw, gx=None):
        r"""``gx [T][N][D][G][H] = x W_l^T + bW`` with both directions' ``W`` read from
        ``params`` in place (one GEMM per direction) and ``bW`` from the :class:`engine.Target`
        ``bw`` (:meth:`biases`); skip_input: x broadcast over the gates. Written into ``gx``
        when given (the reserve space's ``sav`` part)."""
        lay, T, N, D, H, GH = self.lay, self.T, self.N, self.D, self.H, self.GH
        rows = T * N
        if gx is None:
            gx = self.call.empty((T, N, D * GH))
        if not lay.has_w(l):
            engine.copy3(self.dev, self.dt, gx, 0, (D * GH, H, 1), x, 0, (H, 0, 1),
                         (rows, D * self.G, H))
            engine.add_rows(self.dev, self.dt, gx, rows, D * GH,
                            self.gather(params, lay.off_bw(l, 0), l, GH))
            return gx
        n_in = lay.in_size(l)
        for d in range(D):
            gemm(self.dev, self.dt, rows, GH, n_in, x, params, gx, trans_b=True,
                 b_offset=lay.off_w(l, d), ldb=n_in, c_offset=d * GH, ldc=D * GH,
                 bias=bw.array, bias_offset=bw.offset + d * bw.stride)
        return gx

    def layer_forward(self, rec, params, l, x, layer, bw, into):
        """Layer ``l``'s forward (:meth:`engine.Recurrence.forward`) on its input ``x``, into
        the reserve parts ``into``; ``bw``: its input bias (:meth:`biases`). Where the engine
        computes ``x W_l^T + bW`` inside its whole-sequence kernel (small layers: no GEMM
        launch, no gx round trip) it reads ``W_l`` in ``params`` in place; otherwise
        :meth:`input_gates` runs first. An inference forward stores no saved gates."""
        lay = self.lay
        dropped = () if self.training else ("sav",)
        if lay.has_w(l) and rec.projects_in_kernel(lay.in_size(l)):
            w = engine.Target(params, lay.off_w(l, 0), lay.pseudo_size(l))
            return rec.forward(None, layer, x=x, w=w, xb=bw, into=into, dropped=dropped)
        sav = into.sav if into.sav is not None and into.sav.dtype == self.dt else None
        return rec.forward(self.input_gates(params, l, x, bw, sav), layer, into=into,
                           dropped=dropped)

    def recurrence(self):
        return Recurrence.cached(self.dev, self.dt, _cell(self.lay.mode), T=self.T, N=self.N,
                                 H=self.H, D=self.D, P=self.lay.P,
                                 rev_mask=0b10 if self.D == 2 else 0,
                                 has_len=self.lens is not None, has_hb=True,
                                 weights=self.call.storage)   # (R and W_proj read in params)

    def apply_dropout(self, src, l, dst=None):
        """``dst = src ⊙ mask_l`` (kept values scaled by 1/(1-p)); ``l`` = the layer whose
        output ``src`` ``[T][N][D·K]`` is."""
        if dst is None:
            dst = self.call.empty(src.shape)
        _dropout(self.dev, self.dt, dst, src, self.T, self.N, self.D * self.K, l, self.dropout,
                 self.seed, self.seed2)
        return dst

    def reserve_views(self, reserve):
        """``(parts, views)``: per layer ``layout.reserve_parts``'s ``name -> (offset, size)``
        and a :class:`Reserve` holding every part of ``reserve`` as a ``[T][N][width]`` array on
        a sub-buffer of it, or None where the device cannot address that part in place (the
        caller then copies)."""
        parts = self.lay.reserve_parts(self.T, self.N, self.drop)
        return parts, [Reserve(**{name: sub_array(self.dev, reserve, off, self.part_shape(size))
                                  for name, (off, size) in layer.items()}) for layer in parts]

    def part_shape(self, size):
        """``[T][N][width]`` of a reserve part of ``size`` elements (T, N > 0)."""
        return self.T, self.N, size // (self.T * self.N)

    def signature(self):
        return host_signature(self.lay, self.call.storage.itemsize, self.drop, self.dropout,
                              self.seed, self.seed2)


def _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj, time_major,
           sequence_lengths):
    return dict(rnn_mode=rnn_mode, input_mode=input_mode, direction=direction, dropout=dropout,
                seed=seed, seed2=seed2, num_proj=num_proj, time_major=time_major,
                sequence_lengths=sequence_lengths)


@entry_point
def cudnn_rnn(input: Array, input_h: Array, input_c: Array | None, params: Array,
              sequence_lengths: Array | None = None, *, rnn_mode: str = "lstm",
              input_mode: str = "linear_input", direction: str = "unidirectional",
              dropout: float = 0.0, seed: int = 0, seed2: int = 0, num_proj: int = 0,
              time_major: bool = True, is_training: bool = True,
              device: DeviceArg = None) -> tuple[Array, Array, Array, Array, Array]:
    """Forward of the fused multi-layer RNN (``CudnnRNNV3``; module docstring for the maths).

    Returns ``(output, output_h, output_c, reserve_space, host_reserved)``: ``output``
    ``[T, N, D·R]`` (``[N, T, D·R]`` batch-major), ``output_h`` ``[L·D, N, R]``, ``output_c``
    ``[L·D, N, H]`` (LSTM; an empty array otherwise), and with ``is_training`` the
    ``reserve_space`` (1-D, this dtype) and ``host_reserved`` (int8) that
    :func:`cudnn_rnn_backprop` needs (both empty when not training). Layouts:
    :mod:`pyrnn_cl.layout`; size: :func:`cudnn_rnn_reserve_space_size`.
    """
    net = _Net(dict(input=input, input_h=input_h, input_c=input_c, params=params),
               _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj,
                      time_major, sequence_lengths), device, training=is_training)
    call, lay = net.call, net.lay
    T, N, L, D, H, K = net.T, net.N, net.L, net.D, net.H, net.K
    rec = None if net.empty_run else net.recurrence()   # memory check before any copy
    # a 16-bit call takes its source and initial states as stored, and widens them below
    # where no kernel reads them so
    states16 = call.converts and not net.empty_run
    h0_all, c0_all, x_in = call.inputs(
        ("input_h", input_h), ("input_c", input_c if net.lstm else None),
        ("input", None if net.empty_run else input, net.seq_shape(net.I)),
        stored=("input_h", "input_c", "input") if states16 else ())
    # a 16-bit call's final states are rounded by the kernel that writes them
    final = call.storage if states16 else None
    out_h = call.empty((L * D, N, K), final)
    out_c = call.empty((L * D, N, H), final) if net.lstm else call.empty((0,))
    res_size = lay.reserve_size(T, N, net.drop) if net.training else 0
    # a 16-bit training forward (no projection, no dropout) writes its 16-bit reserve parts
    # itself: the engine narrows y, c and the saved gates into them as its steps store them
    reserve16 = call.converts and net.training and not lay.P and not net.drop
    reserve = call.empty((res_size,), call.storage if reserve16 else None)
    if net.empty_run:
        y = call.zeros((T, N, D * K))
        _copy(net.q, out_h, 0, h0_all, 0, out_h.size)
        if net.lstm:
            _copy(net.q, out_c, 0, c0_all, 0, out_c.size)
    else:
        assert rec is not None      # built above: the run is not empty
        params_d = call.stored("params", params)    # 16-bit: read as stored
        if call.converts:
            # one conversion launch for the biases and for what no kernel reads as stored: the
            # whole-sequence kernels that compute the input product widen the initial states
            # themselves (pyrnn_final reads them as stored for rows of length 0), and the first
            # layer's kernel its source where that is time-major
            in_kernel = [lay.has_w(l) and rec.projects_in_kernel(lay.in_size(l))
                         for l in range(L)]
            wide = net.widen16(params_d, dict(
                x=None if net.time_major and in_kernel[0] else x_in,
                h0=None if all(in_kernel) else h0_all,
                c0=None if all(in_kernel) else c0_all))
            x_in, h0_all = wide.get("x", x_in), wide.get("h0", h0_all)
            c0_all = wide.get("c0", c0_all)
        x = net.to_time_major(x_in, net.I)
        # training: every layer writes its saved values straight into its reserve parts
        parts, views = (net.reserve_views(reserve) if net.training
                        else ([{}] * L, [Reserve()] * L))
        if call.converts and not net.training and net.time_major:
            # a 16-bit inference: the last layer rounds its output as it stores it
            views[L - 1] = Reserve(y=call.empty((T, N, D * K), call.storage))
        if net.training:
            _zero_gaps(net.q, reserve, parts)
        for l in range(L):
            R, wp = net.weights(params_d, l)
            bw, hb = net.biases(params_d, l)
            h0 = net.layer_state(h0_all, l, K)
            c0 = net.layer_state(c0_all, l, H) if net.lstm else None
            layer = engine.LayerInputs(R, net.view(h0, K),
                                       c0=net.view(c0, H) if net.lstm else None, hb=hb,
                                       lens=net.lens, w_proj=wp)
            fwd = net.layer_forward(rec, params_d, l, x, layer, bw, views[l])
            hn, in_place = net.out_state(out_h, l, K)
            rec.final_state(fwd.y, K, net.view(h0, K), net.view(hn, K), net.lens)
            if not in_place:
                net.put_state(out_h, l, hn, K)
            if net.lstm:
                cn, in_place = net.out_state(out_c, l, H)
                rec.final_state(fwd.cs, H, net.view(c0, H), net.view(cn, H), net.lens)
                if not in_place:
                    net.put_state(out_c, l, cn, H)
            written = Reserve(sav=fwd.sav, y=fwd.y, cs=fwd.cs, hs=fwd.hs, xd=x)
            for name, (off, size) in parts[l].items():     # parts the device cannot address
                if getattr(views[l], name) is None:
                    src = getattr(written, name)
                    if src.dtype != reserve.dtype:      # (float32 results of a 16-bit call)
                        narrow_many(net.dev, [src], reserve.dtype, out=[reserve[off:off + size]])
                    else:
                        _copy(net.q, reserve, off, src, 0, size)
            y = fwd.y
            if l < L - 1:
                x = net.apply_dropout(y, l, views[l + 1].xd) if net.drop else y
        if views[L - 1].y is not None and views[L - 1].y.dtype != net.dt and net.time_major:
            y = views[L - 1].y           # narrowed already
        if (net.training and views[L - 1].y is not None and net.time_major
                and not call.numpy_out):
            # the output must not alias reserve_space (a copy through the driver: pyopencl's
            # Array.copy costs ~40 us of host time more)
            y_own = call.empty(y.shape, y.dtype if y.dtype != net.dt else None)
            _copy(net.q, y_own, 0, y, 0, y.size)
            y = y_own
    host = net.signature() if net.training else np.zeros(0, np.int8)
    if not call.numpy_out:
        values = host
        host = copied_at_creation(net.q, values)
        if values.size:
            _remember_signature(host, values)
    return (*call.outs(net.seq_out(y, D * K), (out_h, None), (out_c, None), (reserve, None)),
            host)


def _zero_gaps(queue, reserve, parts):
    """Zero the padding between the parts of ``reserve`` (never read; zeroed so that the
    returned reserve_space is fully defined)."""
    isz, pos = reserve.dtype.itemsize, 0
    for off, size in sorted(v for layer in parts for v in layer.values()):
        if off > pos:
            with driver_lock:
                cl.enqueue_fill_buffer(queue, reserve.base_data, np.zeros(1, reserve.dtype),
                                       reserve.offset + pos * isz, (off - pos) * isz)
        pos = off + size


#: The values of the device ``host_reserved`` arrays this module made, by ``id`` while the
#: array lives (pyopencl arrays are not hashable), so that a backprop checks them without
#: reading them back: a blocking read there would hold the host until the forward had finished
#: instead of letting it enqueue the backward meanwhile.
_SIGNATURES: dict[int, tuple[weakref.ref, bytes]] = {}


def _remember_signature(array, values) -> None:
    key = id(array)

    def forget(_ref, key=key):
        _SIGNATURES.pop(key, None)

    _SIGNATURES[key] = (weakref.ref(array, forget), values.tobytes())


def _known_signature(array):
    """The values :func:`_remember_signature` kept for ``array`` (None: not one of ours)."""
    entry = _SIGNATURES.get(id(array))
    return entry[1] if entry is not None and entry[0]() is array else None


def _check_host_reserved(net, host_reserved, reserve_space):
    """ValueError unless ``host_reserved``/``reserve_space`` come from a matching training
    forward."""
    if host_reserved is None or reserve_space is None or np.size(host_reserved) == 0:
        what = "host_reserved: None" if host_reserved is None else (
            "reserve_space: None" if reserve_space is None else "reserve_space: empty")
        raise ValueError(f"{what}; reserve_space and host_reserved come from a forward with "
                         "is_training=True (is_training=False saves nothing for backprop)")
    if not is_array(host_reserved):
        raise TypeError(f"host_reserved: expected an int8 numpy.ndarray or pyopencl.array.Array, "
                        f"got {type(host_reserved).__name__}")
    if isinstance(host_reserved, cla.Array):
        known = _known_signature(host_reserved)
        host = (np.frombuffer(known, np.int8) if known is not None
                else to_host(host_reserved))
    else:
        host = host_reserved
    host = np.asarray(host)
    if host.dtype.kind not in "iu":
        raise TypeError(f"host_reserved: got dtype {host.dtype}, expected int8")
    want = net.signature()
    if host.shape != (HOST_RESERVED_SIZE,) or not np.array_equal(host.astype(np.int64),
                                                                 want.astype(np.int64)):
        raise ValueError("host_reserved: does not match this call; rnn_mode, input_mode, "
                         "direction, num_proj, the dtype, dropout, seed and seed2 must be those "
                         "of the forward call that produced reserve_space (and the same "
                         "reserve_space format: a pyrnn_cl of the same layout version)")
    check_rank("reserve_space", reserve_space, 1)
    size = net.lay.reserve_size(net.T, net.N, net.drop)
    if reserve_space.shape[0] != size:
        raise ShapeError(f"reserve_space: got {reserve_space.shape[0]} elements, expected {size} "
                         f"for T={net.T}, N={net.N}, num_layers={net.L}, num_units={net.H}")


@entry_point
def cudnn_rnn_backprop(input: Array, input_h: Array, input_c: Array | None, params: Array,
                       sequence_lengths: Array | None, output: Array, output_h: Array,
                       output_c: Array | None, output_backprop: Array | None,
                       output_h_backprop: Array | None, output_c_backprop: Array | None,
                       reserve_space: Array, host_reserved: Array, *, rnn_mode: str = "lstm",
                       input_mode: str = "linear_input", direction: str = "unidirectional",
                       dropout: float = 0.0, seed: int = 0, seed2: int = 0, num_proj: int = 0,
                       time_major: bool = True,
                       device: DeviceArg = None) -> tuple[Array, Array, Array, Array]:
    """Backprop of :func:`cudnn_rnn` (``CudnnRNNBackpropV3``) for the loss
    ``Σ output ⊙ output_backprop + Σ output_h ⊙ output_h_backprop + Σ output_c ⊙
    output_c_backprop``; each upstream gradient may be ``None`` (zero).

    Returns ``(input_backprop, input_h_backprop, input_c_backprop, params_backprop)`` shaped
    like ``input``, ``input_h``, ``input_c`` (an empty array for non-LSTM modes) and ``params``
    (same flat layout). ``output_backprop`` past each sequence length is ignored and
    ``input_backprop`` is 0 there. ``reserve_space``/``host_reserved`` are read, never changed:
    repeated calls give identical results. ``output``, ``output_h``, ``output_c`` are only
    shape-checked (everything needed is in ``reserve_space``).
    """
    net = _Net(dict(input=input, input_h=input_h, input_c=input_c, params=params, output=output,
                    output_h=output_h, output_c=output_c, output_backprop=output_backprop,
                    output_h_backprop=output_h_backprop, output_c_backprop=output_c_backprop,
                    reserve_space=reserve_space),
               _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj,
                      time_major, sequence_lengths), device, training=True)
    for name, a, shape in (("output", output, net.seq_shape(net.D * net.K)),
                           ("output_h", output_h, (net.L * net.D, net.N, net.K)),
                           ("output_c", output_c if net.lstm else None,
                            (net.L * net.D, net.N, net.H))):
        if a is not None:
            check_shape(name, a, shape)
    # the upstream gradients are checked before anything else is done (run need not again)
    output_c_backprop = _check_upstream(net, output_backprop, output_h_backprop,
                                        output_c_backprop)
    return _Backprop(net, input, input_h, input_c, params, reserve_space,
                     host_reserved).run(output_backprop, output_h_backprop, output_c_backprop,
                                        checked=True)


def _check_upstream(net, output_backprop, output_h_backprop, output_c_backprop):
    """Check the upstream gradients of a backprop against ``net`` (type, dtype, device,
    shape); returns ``output_c_backprop``, or None where ``rnn_mode`` ignores it."""
    if not net.lstm:
        _check_ignored("output_c_backprop", output_c_backprop, net.mode)
        output_c_backprop = None
    net.call.check_more((("output_backprop", output_backprop),
                         ("output_h_backprop", output_h_backprop),
                         ("output_c_backprop", output_c_backprop)))
    LD, N = net.L * net.D, net.N
    for name, a, shape in (("output_backprop", output_backprop, net.seq_shape(net.D * net.K)),
                           ("output_h_backprop", output_h_backprop, (LD, N, net.K)),
                           ("output_c_backprop", output_c_backprop, (LD, N, net.H))):
        if a is not None:
            check_shape(name, a, shape)
    return output_c_backprop


@entry_point
def _prepare_backprop(input: Array, input_h: Array, input_c: Array | None, params: Array,
                     sequence_lengths: Array | None, reserve_space: Array, host_reserved: Array,
                     *, rnn_mode: str = "lstm", input_mode: str = "linear_input",
                     direction: str = "unidirectional", dropout: float = 0.0, seed: int = 0,
                     seed2: int = 0, num_proj: int = 0, time_major: bool = True,
                     device: DeviceArg = None) -> _Backprop:
    """:func:`cudnn_rnn_backprop` up to where the upstream gradients enter, as a
    :class:`_Backprop` whose :func:`_run_backprop` does the rest, once (the torch bridge makes
    it while its training forward still runs, on a device with cores of its own: that host
    work then overlaps the device's instead of holding the backward's first kernel). Device
    arrays only; the arguments as :func:`cudnn_rnn_backprop`'s, which checks them the same
    way."""
    net = _Net(dict(input=input, input_h=input_h, input_c=input_c, params=params,
                    reserve_space=reserve_space),
               _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj,
                      time_major, sequence_lengths), device, training=True)
    return _Backprop(net, input, input_h, input_c, params, reserve_space, host_reserved)


@entry_point
def _run_backprop(plan: _Backprop, output_backprop: Array | None,
                 output_h_backprop: Array | None,
                 output_c_backprop: Array | None) -> tuple[Array, Array, Array, Array]:
    """The rest of :func:`cudnn_rnn_backprop` for ``plan`` (:func:`_prepare_backprop`): its
    results for these upstream gradients (each may be ``None``: zero)."""
    return plan.run(output_backprop, output_h_backprop, output_c_backprop)


class _LayerBackprop(NamedTuple):
    """What :class:`_Backprop` prepares for layer ``l``: its input weights (None without W),
    its forward's inputs, and where its initial-state gradients go (in place in the result, or
    a new array copied there after the layer)."""

    l: int
    w: engine.Target | None
    layer: engine.LayerInputs
    dh0: cla.Array
    dh0_in_place: bool
    dc0: cla.Array | None
    dc0_in_place: bool


class _Backprop:
    """One :func:`cudnn_rnn_backprop` in two parts. The constructor does what the upstream
    gradients do not enter: the checks of ``reserve_space`` and ``host_reserved``, the memory
    check, the results' arrays, the reserve's views, and each layer's weights, states and
    gradient targets. :meth:`run` checks the upstream gradients and launches the backward
    through time, layer by layer from the last; it runs once.

    The constructor enqueues nothing where the device addresses the reserve's parts and the
    inputs in place (an empty run's zero results aside); ``params_backprop`` is written whole
    by :meth:`run`'s layers."""

    def __init__(self, net, input, input_h, input_c, params, reserve_space, host_reserved):
        self.net, self.done = net, False
        call, lay = net.call, net.lay
        N, L, D, H, K = net.N, net.L, net.D, net.H, net.K
        _check_host_reserved(net, host_reserved, reserve_space)
        self.rec = None
        if not net.empty_run:        # the memory checks before any input is copied
            self.rec = net.recurrence()
            self.rec.check_backward_memory()
        # every layer writes all of its initial-state gradients and its whole run of dparams
        # (each weight and bias gradient is overwritten by the GEMM or row sum of the layer's
        # first backward chunk, a GEMM over no rows writing zeros): no zero fill but for an
        # empty run. (A fill of dparams cost 100 us of PoCL's time per 0.4 MB.)
        fresh = call.zeros if net.empty_run else call.empty
        self.dparams = fresh((lay.size,))
        self.dh0_all = fresh((L * D, N, K))
        self.dc0_all = fresh((L * D, N, H)) if net.lstm else call.empty((0,))
        self.layers: list[_LayerBackprop] = []     # from the last layer down
        self.res = None
        if net.empty_run:
            return
        params_d = call.stored("params", params)    # 16-bit: read as stored
        # a 16-bit reserve stays as stored (but with a projection, whose h before it the
        # engine reads in float32): the engine's kernels read its saved gates and cell
        # states in 16 bits and widen the layers' inputs themselves (Recurrence.backward)
        reserve16 = call.converts and not lay.P
        # ... and so do the initial states and a time-major source
        x16 = reserve16 and net.time_major
        self.res, h0_all, c0_all, x0 = call.inputs(
            ("reserve_space", reserve_space), ("input_h", input_h),
            ("input_c", input_c if net.lstm else None), ("input", input, net.seq_shape(net.I)),
            stored=(("reserve_space", "input_h", "input_c") if reserve16 else ())
            + (("input",) if x16 else ()))
        self.x0 = net.to_time_major(x0, net.I)
        if call.converts and self.rec.cell.needs_hn:
            net.widen16(params_d, {})       # the hidden-side biases, for the loop below
        self.parts, self.views = net.reserve_views(self.res)   # in place where addressable
        for l in range(L - 1, -1, -1):
            R, wp = net.weights(params_d, l)
            # the backward reads the hidden-side bias only to rebuild a reset-after GRU's hn
            hb = net.biases(params_d, l)[1] if self.rec.cell.needs_hn else None
            h0 = net.layer_state(h0_all, l, K)
            c0 = net.layer_state(c0_all, l, H) if net.lstm else None
            dh0, dh0_in_place = net.out_state(self.dh0_all, l, K)
            dc0, dc0_in_place = (net.out_state(self.dc0_all, l, H) if net.lstm
                                 else (None, True))
            self.layers.append(_LayerBackprop(
                l, (engine.Target(params_d, lay.off_w(l, 0), lay.pseudo_size(l))
                    if lay.has_w(l) else None),
                engine.LayerInputs(R, net.view(h0, K),
                                   c0=net.view(c0, H) if c0 is not None else None, hb=hb,
                                   lens=net.lens, w_proj=wp),
                dh0, dh0_in_place, dc0, dc0_in_place))

    def _saved(self, l, name):
        """Reserve part ``name`` (a :class:`Reserve` field) of layer ``l``: in place, or a copy
        (made when the layer runs: no more memory held at once than one layer's)."""
        view = getattr(self.views[l], name)
        if view is not None:
            return view
        off, size = self.parts[l][name]
        out = self.net.call.empty(self.net.part_shape(size), self.res.dtype)
        _copy(self.net.q, out, 0, self.res, off, size)
        return out

    def run(self, output_backprop, output_h_backprop, output_c_backprop, checked=False):
        """The results for these upstream gradients (``checked``: :func:`_check_upstream`
        has passed them already)."""
        if self.done:
            raise RuntimeError("pyrnn_cl: a prepared backprop runs once (its params_backprop "
                               "holds the sums of its run)")
        net, rec = self.net, self.rec
        call, lay = net.call, net.lay
        T, N, L, D, H, K = net.T, net.N, net.L, net.D, net.H, net.K
        if not checked:
            output_c_backprop = _check_upstream(net, output_backprop, output_h_backprop,
                                                output_c_backprop)
        self.done = True
        dparams, dh0_all, dc0_all = self.dparams, self.dh0_all, self.dc0_all
        # with the reserve as stored, the final-state gradients and a time-major dy too (the
        # kernels read dy so, and widen the others)
        stored = self.res is not None and self.res.dtype != net.dt
        dy_stored = stored and net.time_major
        dy, dhn_all, dcn_all = call.inputs(
            ("output_backprop", None if net.empty_run else output_backprop),
            ("output_h_backprop", output_h_backprop), ("output_c_backprop", output_c_backprop),
            stored=(("output_h_backprop", "output_c_backprop") if stored else ())
            + (("output_backprop",) if dy_stored else ()))
        if net.empty_run:
            dx = call.zeros((T, N, net.I))
            if dhn_all is not None:
                _copy(net.q, dh0_all, 0, dhn_all, 0, dh0_all.size)
            if dcn_all is not None:
                _copy(net.q, dc0_all, 0, dcn_all, 0, dc0_all.size)
            return self._results(dx)
        assert rec is not None      # built by __init__: the run is not empty
        dy = net.to_time_major(dy, D * K)
        for plan in self.layers:
            l = plan.l
            fwd = engine.Saved(**{name: self._saved(l, name) for name in SAVED_PARTS
                                  if name in self.parts[l]})
            # the layer's input: the source, the layer below's output or, with dropout, that
            # output after dropout as the forward stored it
            x = (self.x0 if l == 0 else self._saved(l, "xd") if net.drop
                 else self._saved(l - 1, "y"))
            if l < L - 1 and net.drop:
                net.apply_dropout(dy, l, dst=dy)       # the gradient through layer l's dropout
            dhn = net.layer_state(dhn_all, l, K) if dhn_all is not None else None
            dcn = net.layer_state(dcn_all, l, H) if dcn_all is not None else None
            # every gradient straight into its place in dparams (pseudo-layers `stride`
            # apart); without W (skip_input) dx is the sum of the gate gradients of every
            # direction and gate
            stride, n_in = lay.pseudo_size(l), lay.in_size(l)
            dx = call.empty((T, N, n_in))
            side = engine.InputSide(
                n_in, x=x, w=plan.w, dx=dx,
                dw=engine.Target(dparams, lay.off_w(l, 0), stride) if lay.has_w(l) else None,
                db=engine.Target(dparams, lay.off_bw(l, 0), stride),
                dhb=engine.Target(dparams, lay.off_br(l, 0), stride))
            upstream = engine.Upstream(dy=dy, dhn=net.view(dhn, K) if dhn is not None else None,
                                       dcn=net.view(dcn, H) if dcn is not None else None)
            dh0, dc0 = plan.dh0, plan.dc0
            targets = engine.GradTargets(
                net.view(dh0, K), dc0=net.view(dc0, H) if dc0 is not None else None,
                dR=engine.Target(dparams, lay.off_r(l, 0), stride),
                dwp=engine.Target(dparams, lay.off_proj(l, 0), stride) if lay.P else None,
                inputs=side)
            rec.backward(fwd, plan.layer, upstream, targets)
            if not plan.dh0_in_place:
                net.put_state(dh0_all, l, dh0, K)
            if not plan.dc0_in_place:
                net.put_state(dc0_all, l, dc0, H)
            dy = dx
        return self._results(dy)

    def _results(self, dx):
        net = self.net
        return tuple(net.call.outs(net.seq_out(dx, net.I), (self.dh0_all, None),
                                   (self.dc0_all, None), (self.dparams, None)))
