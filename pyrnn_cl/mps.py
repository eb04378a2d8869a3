r"""MPSGraph dialect (API.md §1): single-gate RNN, LSTM and GRU layers and their gradients.

One layer, time-major ``source`` ``[T, N, I]``, optionally bidirectional (outputs ``[fwd | bwd]``
on the feature axis) or reversed. Equations (``m`` is the optional recurrent-input mask, ``x W^T``
is replaced by ``source`` itself when ``input_weight is None``):

* single gate: :math:`z_t = x_t W^T + (h_{t-1} \odot m_t) R^T + b,\; h_t = act(z_t)`
  (``activation`` default ``"relu"`` as in MPSGraph).
* LSTM, gate blocks ``[i, f, z, o]`` (``[i, z, f, o]`` with ``forget_gate_last``):
  :math:`a = x_t W^T + b + (h_{t-1} \odot m_t) R^T + p \odot c_{t-1}` (peephole on all four gates),
  :math:`i, f, z, o = f_i(a_i), f_f(a_f), f_z(a_z), f_o(a_o)`,
  :math:`c_t = f \odot c_{t-1} + i \odot z,\; h_t = o \odot g(c_t)`.
* GRU, gate blocks ``[z, r, o]`` (``[r, z, o]`` with ``reset_gate_first``):
  :math:`z = f_z(\cdot),\ r = f_r(\cdot)`; ``reset_after=False``:
  :math:`c = (h_{t-1} \odot r \odot m_t) R_o^T`, ``True``: :math:`c = ((h_{t-1} \odot m_t) R_o^T
  + b_2) \odot r`; :math:`o = f_o(c + x_t W_o^T + b_o)`; ``flip_z=False``:
  :math:`h_t = (1-z) \odot h_{t-1} + z \odot o`, ``True``: :math:`h_t = z \odot h_{t-1} +
  (1-z) \odot o` (PyTorch/cuDNN).

``reverse=True`` runs t = T-1 .. 0 (output t is the state after x[t]); ``bidirectional`` ignores
``reverse`` and puts the backward direction's final state at output time 0.

:func:`rnn_layer` / :func:`rnn_layer_gradients` (:class:`RNNLayerDescriptor`) run the same
layer for any registered cell (:mod:`pyrnn_cl.cells`, including ones added with
``register_cell``), weight blocks in the cell's canonical slot order.

``z_state`` (returned when ``training``) is ``[T, N, G*H]`` (``[T, N, 2*G*H]`` bidirectional) in
the gate-block order of the weights, holding per step: single gate the pre-activation ``z``;
LSTM the post-activation gates ``i, f, z, o``; GRU the post-activation ``z, r, o``. Feed it back
to the matching ``*_gradients`` op unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyopencl.array as cla

from . import engine
from ._arrays import Call, check_rank, check_shape, read_only_zeros
from ._lifecycle import entry_point
from ._types import Array, DeviceArg
from .cells import PEEP_MPS, CellSpec, activation_code, cell_kind
from .engine import Recurrence, StateView
from .errors import ShapeError
from .programs import driver_lock

__all__ = ["SingleGateRNNDescriptor", "LSTMDescriptor", "GRUDescriptor", "RNNLayerDescriptor",
           "single_gate_rnn", "single_gate_rnn_gradients", "lstm", "lstm_gradients", "gru",
           "gru_gradients", "rnn_layer", "rnn_layer_gradients"]


@dataclass
class SingleGateRNNDescriptor:
    """MPSGraphSingleGateRNNDescriptor: ``activation`` default ``"relu"`` (as MPSGraph)."""

    reverse: bool = False
    bidirectional: bool = False
    training: bool = False
    activation: str = "relu"


@dataclass
class LSTMDescriptor:
    """MPSGraphLSTMDescriptor; gate order ``[i, f, z, o]``, or ``[i, z, f, o]`` with
    ``forget_gate_last``; ``activation`` is g() in ``h = o * g(c)``."""

    reverse: bool = False
    bidirectional: bool = False
    training: bool = False
    produce_cell: bool = False
    forget_gate_last: bool = False
    input_gate_activation: str = "sigmoid"
    forget_gate_activation: str = "sigmoid"
    cell_gate_activation: str = "tanh"
    output_gate_activation: str = "sigmoid"
    activation: str = "tanh"


@dataclass
class GRUDescriptor:
    """MPSGraphGRUDescriptor; gate order ``[z, r, o]``, or ``[r, z, o]`` with
    ``reset_gate_first``; ``flip_z=True`` is the PyTorch/cuDNN update ``z*h + (1-z)*o``."""

    reverse: bool = False
    bidirectional: bool = False
    training: bool = False
    reset_gate_first: bool = False
    reset_after: bool = False
    flip_z: bool = False
    update_gate_activation: str = "sigmoid"
    reset_gate_activation: str = "sigmoid"
    output_gate_activation: str = "tanh"


@dataclass
class RNNLayerDescriptor:
    """A layer of any registered cell (:data:`pyrnn_cl.cells.CELLS`: ``"rnn"``, ``"lstm"``,
    ``"gru"`` or one added with :func:`pyrnn_cl.cells.register_cell`), for :func:`rnn_layer`.
    Weight blocks are in the cell's canonical slot order; ``activations`` names one activation
    per slot (None: the cell's defaults). Built-in cells take their plain variants: an LSTM
    without peepholes, a reset-after GRU with ``h = z h + (1 - z) o`` and no second bias."""

    cell: str = "rnn"
    reverse: bool = False
    bidirectional: bool = False
    training: bool = False
    produce_cell: bool = False
    activations: tuple | None = None


_DESCRIPTORS = {"rnn": SingleGateRNNDescriptor, "lstm": LSTMDescriptor, "gru": GRUDescriptor,
                "layer": RNNLayerDescriptor}
#: The boolean fields of each descriptor (anything else there, e.g. 1 or "yes": TypeError).
_FLAGS = {"rnn": ("reverse", "bidirectional", "training"),
          "lstm": ("reverse", "bidirectional", "training", "produce_cell", "forget_gate_last"),
          "gru": ("reverse", "bidirectional", "training", "reset_gate_first", "reset_after",
                  "flip_z"),
          "layer": ("reverse", "bidirectional", "training", "produce_cell")}


def _descriptor(kind, descriptor):
    cls = _DESCRIPTORS[kind]
    if descriptor is None:
        return cls()
    if not isinstance(descriptor, cls):
        raise TypeError(f"descriptor: expected {cls.__name__} or None, got "
                        f"{type(descriptor).__name__}")
    for flag in _FLAGS[kind]:
        if not isinstance(getattr(descriptor, flag), (bool, np.bool_)):
            raise TypeError(f"descriptor.{flag}: expected a bool, got "
                            f"{getattr(descriptor, flag)!r}")
    return descriptor


def _layer_cell(desc) -> CellSpec:
    """The engine's cell for an :class:`RNNLayerDescriptor`: blocks in canonical slot order."""
    reg = cell_kind(desc.cell)
    if desc.activations is None:
        acts = reg.acts
    else:
        acts = tuple(desc.activations) if isinstance(desc.activations, (tuple, list)) else ()
        if len(acts) != reg.gates:
            raise ValueError(f"descriptor.activations: cell {desc.cell!r} has {reg.gates} gates "
                             f"{reg.slots}, got {desc.activations!r}")
        acts = tuple(activation_code(a, "descriptor.activations") for a in acts)
    return CellSpec(reg.name, tuple(range(reg.gates)), acts)


def _cell(kind, desc) -> CellSpec:
    """The engine's cell for a descriptor: canonical gate slots -> MPSGraph gate blocks."""
    if kind == "layer":
        return _layer_cell(desc)
    if kind == "rnn":
        return CellSpec("rnn", (0,), (activation_code(desc.activation, "descriptor.activation"),))
    if kind == "lstm":
        names: tuple[str, ...] = ("input_gate_activation", "forget_gate_activation",
                                  "cell_gate_activation", "output_gate_activation")
        acts = tuple(activation_code(getattr(desc, n), f"descriptor.{n}") for n in names)
        # slots i, f, g, o (a GRU below rebinds both tuples at length 3)
        blocks: tuple[int, ...] = (0, 2, 1, 3) if desc.forget_gate_last else (0, 1, 2, 3)
        return CellSpec("lstm", blocks, acts,
                        cell_act=activation_code(desc.activation, "descriptor.activation"),
                        peephole=PEEP_MPS)
    names = ("update_gate_activation", "reset_gate_activation", "output_gate_activation")
    acts = tuple(activation_code(getattr(desc, n), f"descriptor.{n}") for n in names)
    blocks = (1, 0, 2) if desc.reset_gate_first else (0, 1, 2)             # slots z, r, o
    return CellSpec("gru", blocks, acts, reset_after=bool(desc.reset_after),
                    flip_z=bool(desc.flip_z))


class _Layer:
    """Shapes, device copies and the engine of one MPSGraph call (forward or gradients)."""

    def __init__(self, kind, call: Call, desc, source, recurrent_weight, input_weight, bias,
                 init_state, init_cell, mask, peephole, secondary_bias, grads=None):
        self.kind, self.call, self.desc = kind, call, desc
        self.cell = _cell(kind, desc)
        G = self.cell.G
        D = 2 if desc.bidirectional else 1
        check_rank("recurrent_weight", recurrent_weight, 3 if D == 2 else 2)
        H = recurrent_weight.shape[-1]
        if H < 1:
            raise ShapeError(f"recurrent_weight: got shape {list(recurrent_weight.shape)}, the "
                             "hidden size (last axis) must be at least 1")
        check_shape("recurrent_weight", recurrent_weight, (2, G * H, H) if D == 2 else (G * H, H))
        check_rank("source", source, 3)
        T, N = source.shape[0], source.shape[1]
        if input_weight is None:
            check_shape("source", source, (T, N, D * G * H))
            I = D * G * H
        else:
            I = source.shape[2]
            check_shape("input_weight", input_weight, (D * G * H, I))
        if bias is not None:
            check_shape("bias", bias, (D * G * H,))
        for name, a in (("init_state", init_state), ("init_cell", init_cell)):
            if a is not None:
                check_shape(name, a, (N, D * H))
        if peephole is not None:
            check_shape("peephole", peephole, (2, 4 * H) if D == 2 else (4 * H,))
        if secondary_bias is not None:
            check_shape("secondary_bias", secondary_bias, (D * H,))
        for name, a in grads or ():   # gradient-op inputs, checked before anything runs
            if a is None and name in ("source_gradient", "state_gradient", "cell_gradient"):
                continue              # None: zero
            lead = (N,) if name in ("state_gradient", "cell_gradient") else (T, N)
            check_shape(name, a, lead + ((D * G * H) if name == "z_state" else (D * H),))
        self.T, self.N, self.I, self.H, self.D, self.G = T, N, I, H, D, G
        self.rev_mask = 0b10 if D == 2 else int(bool(desc.reverse))

        q = call
        # the engine's memory check first: a request too large for the device is refused
        # before any input is made contiguous or copied
        self.rec = Recurrence.cached(q.device, q.dtype, self.cell, T=T, N=N, H=H, D=D,
                                     rev_mask=self.rev_mask, has_mask=mask is not None,
                                     has_hb=self.cell.needs_hn and secondary_bias is not None,
                                     has_peep=peephole is not None,
                                     weights=q.storage)     # (the weights are read as stored)
        if grads is not None:
            self.rec.check_backward_memory(full=input_weight is None)
        self.R = q.stored("recurrent_weight", recurrent_weight)   # read by the packs only
        self.W = q.stored("input_weight", input_weight)   # read by the GEMMs and packs as stored
        b2 = secondary_bias if self.cell.needs_hn else None
        # 16-bit arrays go to the engine as they are where its kernels read or widen them
        # themselves (what they do not, the engine widens in one launch): a forward's source,
        # bias and initial states when it has an input weight (Recurrence.forward), and every
        # gradient-op array (Recurrence.backward; the bias is not read there, and the source
        # only with an input weight). The rest is widened here, CONVERT_SLOTS per launch.
        grads = list(grads or ())
        inputs = [("source", source), ("bias", bias), ("init_state", init_state),
                  ("init_cell", init_cell if self.cell.has_c else None)] + grads
        as_stored = q.converts and (bool(grads) or input_weight is not None)
        self.peep, b2, *rest = q.inputs(("peephole", peephole), ("secondary_bias", b2), *inputs,
                                        stored=[name for name, _ in inputs] if as_stored else ())
        self.x, self.b, h0, c0, *grad_d = rest
        self._grad_devs = {name: a for (name, _), a in zip(grads, grad_d)}
        # absent initial states: every (d, n) reads the same row of shared zeros
        zero = StateView(read_only_zeros(q.device, q.dtype, H), 0, 0)
        self.h0 = StateView(h0, H, D * H) if h0 is not None else zero
        self.c0 = None
        if self.cell.has_c:
            self.c0 = StateView(c0, H, D * H) if c0 is not None else zero
        self.mask = self._mask(mask)
        self.hb = None
        if b2 is not None:
            # hidden-side bias [D][G*H]: b2 in the hn slot's (o) block, zero elsewhere
            self.hb = q.zeros((D, G * H))
            o = self.cell.gate_blocks[self.cell.hn_slot] * H
            engine.copy3(q.device, q.dtype, self.hb, o, (G * H, 0, 1), b2, 0, (H, 0, 1),
                         (D, 1, H))

    def _mask(self, mask):
        if mask is None:
            return None
        full = (self.T, self.N, self.D * self.H)
        if isinstance(mask, cla.Array) and tuple(mask.shape) == full:
            return self.call.dev("mask", mask)      # used in place: no host round trip
        host = self.call.host("mask", mask)
        try:
            host = np.broadcast_to(host, full)
        except ValueError:
            raise ShapeError(f"mask: got shape {list(host.shape)}, expected a shape "
                             f"broadcastable to {list(full)}") from None
        return self.call.dev("mask", np.ascontiguousarray(host))

    def input_gates(self):
        """gx = x W^T + b for every step, or the pre-projected source (+ b)."""
        q, rows, width = self.call, self.T * self.N, self.D * self.G * self.H
        if self.W is not None:
            return engine.input_projection(q.device, q.dtype, self.x, rows, self.I, self.W, width,
                                           self.b).reshape((self.T, self.N, width))
        with driver_lock:
            gx = self.x.copy()      # the engine overwrites gx with the saved gates
        if self.b is not None:
            engine.add_rows(q.device, q.dtype, gx, rows, width, self.b)
        return gx

    def layer_inputs(self) -> engine.LayerInputs:
        """What the engine's forward and backward of this layer read besides the sequences."""
        return engine.LayerInputs(self.R, self.h0, c0=self.c0, hb=self.hb, peep=self.peep,
                                  mask=self.mask)

    def forward(self, narrow: tuple[str, ...] = (), dropped: tuple[str, ...] = ()
                ) -> engine.Saved:
        """The engine's forward; ``narrow``: results wanted only in a 16-bit call's dtype,
        ``dropped``: results not returned (:meth:`engine.Recurrence.forward`)."""
        if self.W is not None:      # the engine computes x W^T + b (in its kernel when small)
            return self.rec.forward(None, self.layer_inputs(), x=self.x, w=self.W, xb=self.b,
                                    narrow=narrow, dropped=dropped)
        return self.rec.forward(self.input_gates(), self.layer_inputs(), narrow=narrow,
                                dropped=dropped)

    def backward(self, fwd, dy, dhn, dcn):
        """The layer's gradients for the forward results ``fwd`` and the upstream gradients
        ``dy``, ``dhn``, ``dcn`` (from :meth:`gradient_inputs`)."""
        q, T, N, D, H = self.call, self.T, self.N, self.D, self.H
        dh0 = StateView(q.empty((N, D * H)), H, D * H)
        dc0 = StateView(q.empty((N, D * H)), H, D * H) if self.cell.has_c else None
        GH, I = self.G * H, self.I
        # without an input weight the source gradient is the gate gradient itself: one chunk
        full = self.W is None
        dx = None if full else q.empty((T, N, I))
        dW = q.empty((D * GH, I)) if self.W is not None else None
        db = q.empty((D * GH,)) if self.b is not None else None
        dhb = q.empty((D * GH,)) if self.hb is not None else None
        side = engine.InputSide(
            I, x=self.x, w=engine.Target(self.W, 0, GH * I) if self.W is not None else None,
            dx=dx, dw=engine.Target(dW, 0, GH * I) if dW is not None else None,
            db=engine.Target(db, 0, GH) if db is not None else None,
            dhb=engine.Target(dhb, 0, GH) if dhb is not None else None)
        upstream = engine.Upstream(
            dy=dy, dhn=StateView(dhn, H, D * H) if dhn is not None else None,
            dcn=StateView(dcn, H, D * H) if dcn is not None else None)
        grads = self.rec.backward(fwd, self.layer_inputs(), upstream,
                                  engine.GradTargets(dh0, dc0=dc0, inputs=side), full=full)
        if full:
            dx = grads.dgx
        return dict(dx=dx, dR=grads.dR, dW=dW, db=db, dhb=dhb, dh0=dh0.array,
                    dc0=dc0.array if dc0 else None, dpeep=grads.dpeep)

    def gradient_inputs(self):
        """``(fwd, dy, dhn, dcn)``: the engine's forward results (:class:`engine.Saved`) and the
        upstream gradients from the arrays the gradient op passed as ``grads`` (converted with
        the layer's inputs): ``z_state``, ``source_gradient``, ``state_gradient``,
        ``cell_gradient`` and, where the cell's backward reads them, ``output_fwd`` (y) and
        ``cell_output_fwd`` (c). An LSTM or RNN gradient is not given h: the engine computes
        h[t-1] from the saved gates (and c) chunk by chunk where it needs it, so no h sequence
        is rebuilt here."""
        g = self._grad_devs
        return (engine.Saved(sav=g["z_state"], y=g.get("output_fwd"), cs=g.get("cell_output_fwd")),
                g["source_gradient"], g["state_gradient"], g.get("cell_gradient"))


def _forward(kind, source, recurrent_weight, input_weight, bias, init_state, init_cell, mask,
             peephole, secondary_bias, descriptor, device):
    desc = _descriptor(kind, descriptor)
    call = Call(dict(source=source, recurrent_weight=recurrent_weight, input_weight=input_weight,
                     bias=bias, init_state=init_state, init_cell=init_cell, mask=mask,
                     peephole=peephole, secondary_bias=secondary_bias), device)
    layer = _Layer(kind, call, desc, source, recurrent_weight, input_weight, bias, init_state,
                   init_cell, mask, peephole, secondary_bias)
    wanted = ["y"]
    if layer.cell.has_c and (desc.training or desc.produce_cell):
        wanted.append("cs")
    if desc.training:
        wanted.append("sav")
    # results are returned only: a 16-bit call's whole-sequence kernel narrows them itself;
    # the saved gates and cell states an inference call does not return live in the pool
    fwd = layer.forward(narrow=tuple(wanted),
                        dropped=tuple(n for n in ("sav", "cs") if n not in wanted))
    T, N, D, H, G = layer.T, layer.N, layer.D, layer.H, layer.G
    width = {"y": D * H, "cs": D * H, "sav": D * G * H}
    return call.outs(*[(getattr(fwd, name), (T, N, width[name])) for name in wanted])


def _gradients(kind, source, recurrent_weight, source_gradient, z_state, fwd_seq, input_weight,
               bias, init_state, init_cell, mask, peephole, secondary_bias, state_gradient,
               cell_gradient, descriptor, device):
    desc = _descriptor(kind, descriptor)
    # dtype errors name the public argument: cell_output_fwd (LSTM) / output_fwd (GRU)
    seq_name = {"lstm": "cell_output_fwd", "gru": "output_fwd"}.get(kind, "fwd_seq")
    call = Call({"source": source, "recurrent_weight": recurrent_weight,
                 "source_gradient": source_gradient, "z_state": z_state, seq_name: fwd_seq,
                 "input_weight": input_weight, "bias": bias, "init_state": init_state,
                 "init_cell": init_cell, "mask": mask, "peephole": peephole,
                 "secondary_bias": secondary_bias, "state_gradient": state_gradient,
                 "cell_gradient": cell_gradient}, device)
    grads = [("source_gradient", source_gradient), ("z_state", z_state),
             ("state_gradient", state_gradient)]
    if kind != "rnn":
        grads.append(({"lstm": "cell_output_fwd", "gru": "output_fwd"}[kind], fwd_seq))
    if kind == "lstm":
        grads.append(("cell_gradient", cell_gradient))
    layer = _Layer(kind, call, desc, source, recurrent_weight, input_weight, bias, init_state,
                   init_cell, mask, peephole, secondary_bias, grads=grads)
    g = layer.backward(*layer.gradient_inputs())
    extra = []
    if kind == "gru" and secondary_bias is not None:
        extra.append((_secondary_bias_gradient(layer, g["dhb"]), tuple(secondary_bias.shape)))
    return _gradient_results(call, g, [
        ("dx", source), ("dR", recurrent_weight), ("dW", input_weight), ("db", bias),
        ("dpeep", peephole if kind == "lstm" else None), ("dh0", init_state),
        ("dc0", init_cell if kind == "lstm" else None)], extra)


def _gradient_results(call, g, wanted, extra=()) -> list:
    """The gradient op's results, in the API's order: ``g[key]`` shaped as its argument for
    each ``(key, argument)`` of ``wanted`` whose argument was given (not None), then the
    ``(array, shape)`` of ``extra``; narrowed together."""
    return call.outs(*[(g[key], tuple(arg.shape)) for key, arg in wanted if arg is not None],
                     *extra)


def _secondary_bias_gradient(layer, dhb):
    """d b2 = sum over steps and rows of the o block's hidden-side gradient: the o block of
    the hidden-side bias gradient ``dhb`` (reset-after only; b2 does not enter a reset-before
    GRU, where ``dhb`` is None)."""
    q, D, H, GH = layer.call, layer.D, layer.H, layer.G * layer.H
    out = q.zeros((D * H,))
    if dhb is not None:
        o = layer.cell.gate_blocks[layer.cell.hn_slot] * H
        engine.copy3(q.device, q.dtype, out, 0, (H, 0, 1), dhb, o, (GH, 0, 1), (D, 1, H))
    return out


@entry_point
def single_gate_rnn(source: Array, recurrent_weight: Array, input_weight: Array | None = None,
                    bias: Array | None = None, init_state: Array | None = None,
                    mask: Array | None = None, *,
                    descriptor: SingleGateRNNDescriptor | None = None,
                    device: DeviceArg = None) -> list[Array]:
    """Single-gate RNN layer: ``[h]``, plus ``z_state`` when ``descriptor.training``."""
    return _forward("rnn", source, recurrent_weight, input_weight, bias, init_state, None, mask,
                    None, None, descriptor, device)


@entry_point
def single_gate_rnn_gradients(source: Array, recurrent_weight: Array, source_gradient: Array,
                              z_state: Array, input_weight: Array | None = None,
                              bias: Array | None = None, init_state: Array | None = None,
                              mask: Array | None = None, state_gradient: Array | None = None, *,
                              descriptor: SingleGateRNNDescriptor | None = None,
                              device: DeviceArg = None) -> list[Array]:
    """Gradients ``[d_source, d_recurrent_weight, d_input_weight, d_bias, d_init_state]``, the
    entries of inputs passed as ``None`` omitted. ``source_gradient`` is dL/dh for every step,
    ``state_gradient`` dL/d(final h) (``[N, H]`` or ``[N, 2H]``)."""
    return _gradients("rnn", source, recurrent_weight, source_gradient, z_state, None,
                      input_weight, bias, init_state, None, mask, None, None, state_gradient,
                      None, descriptor, device)


@entry_point
def lstm(source: Array, recurrent_weight: Array, input_weight: Array | None = None,
         bias: Array | None = None, init_state: Array | None = None,
         init_cell: Array | None = None, mask: Array | None = None,
         peephole: Array | None = None, *, descriptor: LSTMDescriptor | None = None,
         device: DeviceArg = None) -> list[Array]:
    """LSTM layer: ``[h]``, then the cell sequence ``c`` when ``training or produce_cell``, then
    ``z_state`` when ``training``."""
    return _forward("lstm", source, recurrent_weight, input_weight, bias, init_state, init_cell,
                    mask, peephole, None, descriptor, device)


@entry_point
def lstm_gradients(source: Array, recurrent_weight: Array, source_gradient: Array,
                   z_state: Array, cell_output_fwd: Array, input_weight: Array | None = None,
                   bias: Array | None = None, init_state: Array | None = None,
                   init_cell: Array | None = None, mask: Array | None = None,
                   peephole: Array | None = None, state_gradient: Array | None = None,
                   cell_gradient: Array | None = None, *,
                   descriptor: LSTMDescriptor | None = None,
                   device: DeviceArg = None) -> list[Array]:
    """Gradients ``[d_source, d_recurrent_weight, d_input_weight, d_bias, d_peephole,
    d_init_state, d_init_cell]`` (entries of ``None`` inputs omitted). ``cell_output_fwd`` is
    the forward's cell sequence; ``cell_gradient`` is dL/d(final c)."""
    return _gradients("lstm", source, recurrent_weight, source_gradient, z_state,
                      cell_output_fwd, input_weight, bias, init_state, init_cell, mask, peephole,
                      None, state_gradient, cell_gradient, descriptor, device)


@entry_point
def gru(source: Array, recurrent_weight: Array, input_weight: Array | None = None,
        bias: Array | None = None, init_state: Array | None = None, mask: Array | None = None,
        secondary_bias: Array | None = None, *, descriptor: GRUDescriptor | None = None,
        device: DeviceArg = None) -> list[Array]:
    """GRU layer: ``[h]``, plus ``z_state`` when ``descriptor.training``."""
    return _forward("gru", source, recurrent_weight, input_weight, bias, init_state, None, mask,
                    None, secondary_bias, descriptor, device)


@entry_point
def gru_gradients(source: Array, recurrent_weight: Array, source_gradient: Array,
                  z_state: Array, output_fwd: Array, input_weight: Array | None = None,
                  bias: Array | None = None, init_state: Array | None = None,
                  mask: Array | None = None, secondary_bias: Array | None = None,
                  state_gradient: Array | None = None, *,
                  descriptor: GRUDescriptor | None = None,
                  device: DeviceArg = None) -> list[Array]:
    """Gradients ``[d_source, d_recurrent_weight, d_input_weight, d_bias, d_init_state,
    d_secondary_bias]`` (entries of ``None`` inputs omitted); ``output_fwd`` is the forward
    ``h``."""
    return _gradients("gru", source, recurrent_weight, source_gradient, z_state, output_fwd,
                      input_weight, bias, init_state, None, mask, None, secondary_bias,
                      state_gradient, None, descriptor, device)



@entry_point
def rnn_layer(source: Array, recurrent_weight: Array, input_weight: Array | None = None,
              bias: Array | None = None, init_state: Array | None = None,
              init_cell: Array | None = None, mask: Array | None = None, *,
              descriptor: RNNLayerDescriptor, device: DeviceArg = None) -> list[Array]:
    """A layer of the cell ``descriptor.cell`` (:class:`RNNLayerDescriptor`), MPSGraph-style:
    ``[h]``, then the cell sequence ``c`` (cells with a cell state, when ``training or
    produce_cell``), then ``z_state`` (what the forward saved, ``[T, N, D*G*H]``) when
    ``training``. Shapes as :func:`lstm` with ``G`` the cell's gate count; ``init_cell`` only
    for cells with a cell state."""
    desc = _descriptor("layer", descriptor)
    if init_cell is not None and not _layer_cell(desc).has_c:
        raise ValueError(f"init_cell: cell {desc.cell!r} has no cell state")
    return _forward("layer", source, recurrent_weight, input_weight, bias, init_state, init_cell,
                    mask, None, None, desc, device)


@entry_point
def rnn_layer_gradients(source: Array, recurrent_weight: Array, source_gradient: Array,
                        z_state: Array, output_fwd: Array | None = None,
                        cell_output_fwd: Array | None = None, input_weight: Array | None = None,
                        bias: Array | None = None, init_state: Array | None = None,
                        init_cell: Array | None = None, mask: Array | None = None,
                        state_gradient: Array | None = None, cell_gradient: Array | None = None,
                        *, descriptor: RNNLayerDescriptor,
                        device: DeviceArg = None) -> list[Array]:
    """Gradients of :func:`rnn_layer`: ``[d_source, d_recurrent_weight, d_input_weight,
    d_bias, d_init_state, d_init_cell]``, the entries of inputs passed as ``None`` omitted.
    ``output_fwd`` is the forward's ``h`` (required when the cell's backward needs y, e.g. a
    GRU), ``cell_output_fwd`` its cell sequence (required for cells with a cell state);
    ``cell_gradient`` is dL/d(final c)."""
    desc = _descriptor("layer", descriptor)
    cell = _layer_cell(desc)
    for name, a, needed in (("output_fwd", output_fwd, cell.bwd_needs_y),
                            ("cell_output_fwd", cell_output_fwd, cell.has_c)):
        if needed and a is None:
            raise ValueError(f"{name}: cell {desc.cell!r} needs it")
    for name, a in (("init_cell", init_cell), ("cell_gradient", cell_gradient)):
        if a is not None and not cell.has_c:
            raise ValueError(f"{name}: cell {desc.cell!r} has no cell state")
    call = Call({"source": source, "recurrent_weight": recurrent_weight,
                 "source_gradient": source_gradient, "z_state": z_state,
                 "output_fwd": output_fwd, "cell_output_fwd": cell_output_fwd,
                 "input_weight": input_weight, "bias": bias, "init_state": init_state,
                 "init_cell": init_cell, "mask": mask, "state_gradient": state_gradient,
                 "cell_gradient": cell_gradient}, device)
    grads = [("source_gradient", source_gradient), ("z_state", z_state),
             ("state_gradient", state_gradient)]
    if cell.bwd_needs_y:
        grads.append(("output_fwd", output_fwd))
    if cell.has_c:
        grads += [("cell_output_fwd", cell_output_fwd), ("cell_gradient", cell_gradient)]
    layer = _Layer("layer", call, desc, source, recurrent_weight, input_weight, bias, init_state,
                   init_cell, mask, None, None, grads=grads)
    g = layer.backward(*layer.gradient_inputs())
    return _gradient_results(call, g, [
        ("dx", source), ("dR", recurrent_weight), ("dW", input_weight), ("db", bias),
        ("dh0", init_state), ("dc0", init_cell)])
