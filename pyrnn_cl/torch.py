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

How it runs: one ``torch.autograd.Function`` per call packs the parameters into cuDNN
``params`` (:func:`pyrnn_cl.cudnn_rnn_canonical_to_params`, canonical order = torch's chunks),
calls :func:`pyrnn_cl.cudnn_rnn` (forward, with ``sequence_lengths`` for packed input) and
:func:`pyrnn_cl.cudnn_rnn_backprop` (backward), and maps ``params_backprop`` back to the
parameter gradients (:func:`pyrnn_cl.cudnn_rnn_params_to_canonical`). Tensors must live on the
CPU (they are copied to and from the OpenCL device through NumPy); dtypes float32 and float64
(float64 needs ``cl_khr_fp64``). Double backward is not supported.

``cl_device`` picks the OpenCL device: ``None`` (pyrnn_cl's default), a device spec string
(``"0:0"``, ``"pocl"``, ``"gpu"``, …), a :class:`pyrnn_cl.devices.Device` or a
``pyopencl.CommandQueue``. A spec string keeps the module picklable.

Dropout (``dropout > 0``, ``num_layers > 1``, training mode) is applied between layers as in
torch.nn, but the mask comes from pyrnn_cl's counter-based Philox generator keyed by two seeds
drawn from torch's RNG on each call (``torch.randint``), so it is reproducible with
``torch.manual_seed`` and identical on every OpenCL device — and **different from the mask
torch.nn would draw**. Forward and backward of one call use the same mask.

``import pyrnn_cl`` never imports this module (nor torch); ``import pyrnn_cl.torch`` does.
"""

from __future__ import annotations

import numpy as np

try:
    import torch
except ImportError as _exc:
    raise ImportError(f'pyrnn_cl.torch needs PyTorch ({_exc}): pip install "pyrnn_cl[torch]"',
                      name="torch") from _exc
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from . import cudnn as _cudnn
from .errors import ShapeError

__all__ = ["RNN", "LSTM", "GRU"]

_MODES = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}
_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
_DTYPES = (torch.float32, torch.float64)


class _Config:
    """Everything about one call that is not a tensor (sizes, flags, device, seeds)."""

    __slots__ = ("mode", "L", "H", "I", "D", "P", "bias", "dropout", "seed", "seed2", "device",
                 "lengths", "training")

    def kwargs(self):
        return dict(rnn_mode=self.mode,
                    direction="bidirectional" if self.D == 2 else "unidirectional",
                    dropout=self.dropout, seed=self.seed, seed2=self.seed2, num_proj=self.P,
                    device=self.device)

    def canonical_kwargs(self):
        return dict(rnn_mode=self.mode,
                    direction="bidirectional" if self.D == 2 else "unidirectional",
                    num_proj=self.P)

    def per_layer(self):
        """Number of parameter tensors of one pseudo-layer (torch's order: w_ih, w_hh,
        [b_ih, b_hh], [w_hr])."""
        return 2 + 2 * self.bias + (1 if self.P else 0)


def _host(t):
    return t.detach().contiguous().numpy()


def _to_params(cfg, flat):
    """Flat cuDNN params from torch's parameter tensors (canonical order = torch's chunks)."""
    G = _GATES[cfg.mode]
    weights, biases = [], []
    n = cfg.per_layer()
    for k in range(cfg.L * cfg.D):
        ps = [_host(p) for p in flat[k * n:(k + 1) * n]]
        w_ih, w_hh = ps[0], ps[1]
        weights += np.split(w_ih, G) + np.split(w_hh, G)
        if cfg.P:
            weights.append(ps[-1])
        if cfg.bias:
            biases += np.split(ps[2], G) + np.split(ps[3], G)
        else:
            biases += [np.zeros(cfg.H, w_ih.dtype)] * (2 * G)
    return _cudnn.cudnn_rnn_canonical_to_params(cfg.L, cfg.H, cfg.I, weights, biases,
                                                **cfg.canonical_kwargs())


def _from_params(cfg, dparams, needs):
    """Gradients of torch's parameter tensors from ``params_backprop`` (None where not
    needed)."""
    G = _GATES[cfg.mode]
    wg, bg = _cudnn.cudnn_rnn_params_to_canonical(cfg.L, cfg.H, cfg.I, dparams,
                                                  **cfg.canonical_kwargs())
    per_w = 2 * G + (1 if cfg.P else 0)
    out = []
    for k in range(cfg.L * cfg.D):
        ws, bs = wg[k * per_w:(k + 1) * per_w], bg[k * 2 * G:(k + 1) * 2 * G]
        grads = [np.concatenate(ws[:G]), np.concatenate(ws[G:2 * G])]
        if cfg.bias:
            grads += [np.concatenate(bs[:G]), np.concatenate(bs[G:])]
        if cfg.P:
            grads.append(ws[2 * G])
        out += grads
    return [torch.from_numpy(np.ascontiguousarray(g)) if need else None
            for g, need in zip(out, needs)]


class _CudnnRNNFunction(torch.autograd.Function):
    """``(x [T,N,I], h0, c0, *params) -> (output, h_n, c_n)`` through ``rc.cudnn_rnn``; backward
    through ``rc.cudnn_rnn_backprop``. ``c0``/``c_n`` are empty tensors for non-LSTM modes."""

    @staticmethod
    def forward(ctx, cfg, x, h0, c0, *flat):
        lstm = cfg.mode == "lstm"
        xs, h0s = _host(x), _host(h0)
        c0s = _host(c0) if lstm else None
        params = _to_params(cfg, flat)
        out, hn, cn, reserve, host = _cudnn.cudnn_rnn(
            xs, h0s, c0s, params, cfg.lengths, is_training=cfg.training, **cfg.kwargs())
        if cfg.training:
            ctx.cfg = cfg
            ctx.saved = (xs, h0s, c0s, params, out, hn, cn if lstm else None, reserve, host)
        ctx.set_materialize_grads(False)
        cn_t = torch.from_numpy(cn) if lstm else x.new_empty(0)
        return torch.from_numpy(out), torch.from_numpy(hn), cn_t

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dhn, dcn):
        if not hasattr(ctx, "saved"):
            raise RuntimeError("pyrnn_cl.torch: the forward ran without saving its state for "
                               "backward (grad mode was off)")
        cfg = ctx.cfg
        xs, h0s, c0s, params, out, hn, cn, reserve, host = ctx.saved
        lstm = cfg.mode == "lstm"
        dx, dh0, dc0, dparams = _cudnn.cudnn_rnn_backprop(
            xs, h0s, c0s, params, cfg.lengths, out, hn, cn,
            None if dout is None else _host(dout), None if dhn is None else _host(dhn),
            None if (dcn is None or not lstm) else _host(dcn), reserve, host, **cfg.kwargs())
        needs = ctx.needs_input_grad
        grads = [None,
                 torch.from_numpy(dx) if needs[1] else None,
                 torch.from_numpy(dh0) if needs[2] else None,
                 torch.from_numpy(dc0) if (needs[3] and lstm) else None]
        if any(needs[4:]):
            grads += _from_params(cfg, dparams, needs[4:])
        else:
            grads += [None] * (len(needs) - 4)
        return tuple(grads)


class _DeviceRef:
    """Holds ``cl_device``: shared (not copied) by ``copy.deepcopy``; pickled as its ``"P:D"``
    spec, because OpenCL contexts and queues cannot be pickled."""

    __slots__ = ("device",)

    def __init__(self, device):
        self.device = device

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


class _CLRNNMixin:
    """forward() of the three modules (the rest is torch.nn.RNNBase)."""

    def _cl_setup(self, cl_device):
        self._cl_device_ref = _DeviceRef(cl_device)

    @property
    def cl_device(self):
        """The OpenCL device of this module (``None``: pyrnn_cl's default device)."""
        return self._cl_device_ref.device

    @cl_device.setter
    def cl_device(self, value):
        self._cl_device_ref = _DeviceRef(value)

    def extra_repr(self):
        s = super().extra_repr()
        if self.cl_device is not None:
            s += f", cl_device={self.cl_device!r}"
        return s

    def _flat_parameters(self):
        names = []
        D = 2 if self.bidirectional else 1
        for l in range(self.num_layers):
            for d in range(D):
                sfx = f"_l{l}" + ("_reverse" if d else "")
                names += [f"weight_ih{sfx}", f"weight_hh{sfx}"]
                if self.bias:
                    names += [f"bias_ih{sfx}", f"bias_hh{sfx}"]
                if self.proj_size > 0:
                    names.append(f"weight_hr{sfx}")
        return [getattr(self, n) for n in names]

    def forward(self, input, hx=None):
        """``output, h_n`` (RNN, GRU) or ``output, (h_n, c_n)`` (LSTM), exactly as torch.nn."""
        lstm = self.mode == "LSTM"
        D = 2 if self.bidirectional else 1
        R = self.proj_size if self.proj_size > 0 else self.hidden_size
        flat = self._flat_parameters()
        dtype = flat[0].dtype
        packed = isinstance(input, PackedSequence)
        lengths = None
        if packed:
            x, lengths_t = pad_packed_sequence(input)     # [T, N, I], original batch order
            lengths = lengths_t.numpy().astype(np.int64)
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
            if batched and self.batch_first:
                x = x.transpose(0, 1)
        if x.device.type != "cpu":
            raise ValueError(f"input: pyrnn_cl.torch takes CPU tensors (got one on {x.device}); "
                             "the OpenCL device is chosen with cl_device")
        if x.dtype != dtype:
            raise TypeError(f"input: got dtype {x.dtype}, but the parameters are {dtype}")
        if dtype not in _DTYPES:
            raise TypeError(f"parameters: got dtype {dtype}, expected float32 or float64")
        if x.shape[-1] != self.input_size:
            raise ShapeError(f"input: got shape {list(x.shape)}, the last axis must be "
                             f"input_size={self.input_size}")
        N = x.shape[1]
        h0, c0 = self._initial_state(hx, lstm, batched, N, D, R, x)

        cfg = _Config()
        cfg.mode = _MODES[self.mode]
        cfg.L, cfg.H, cfg.I, cfg.D = self.num_layers, self.hidden_size, self.input_size, D
        cfg.P, cfg.bias = self.proj_size, bool(self.bias)
        cfg.device, cfg.lengths = self.cl_device, lengths
        drop = self.training and self.dropout > 0 and self.num_layers > 1
        cfg.dropout = float(self.dropout) if drop else 0.0
        cfg.seed, cfg.seed2 = ((int(s) for s in torch.randint(0, 2**31 - 1, (2,)))
                               if drop else (0, 0))
        needs_grad = torch.is_grad_enabled() and (
            x.requires_grad or h0.requires_grad or (lstm and c0.requires_grad)
            or any(p.requires_grad for p in flat))
        cfg.training = bool(needs_grad or drop)

        c0_arg = c0 if lstm else x.new_empty(0)
        out, hn, cn = _CudnnRNNFunction.apply(cfg, x, h0, c0_arg, *flat)

        if packed:
            if input.sorted_indices is not None:
                out = out.index_select(1, input.sorted_indices)
                lengths_t = lengths_t.index_select(0, input.sorted_indices.cpu())
            data = pack_padded_sequence(out, lengths_t, enforce_sorted=True).data
            output = PackedSequence(data, input.batch_sizes, input.sorted_indices,
                                    input.unsorted_indices)
        elif not batched:
            output, hn = out.squeeze(1), hn.squeeze(1)
            cn = cn.squeeze(1) if lstm else cn
        else:
            output = out.transpose(0, 1) if self.batch_first else out
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
                raise TypeError(f"hx: {name} has dtype {t.dtype}, expected {x.dtype}")
            if t.device.type != "cpu":
                raise ValueError(f"hx: {name} is on {t.device}; pyrnn_cl.torch takes CPU tensors")
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

    def __init__(self, *args, cl_device=None, **kwargs):
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

    def __init__(self, *args, cl_device=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._cl_setup(cl_device)


class GRU(_CLRNNMixin, nn.GRU):
    r"""``torch.nn.GRU`` on pyrnn_cl: :math:`r, z = \sigma(\cdot)`,
    :math:`n = \tanh(x_t W_{in}^T + b_{in} + r \odot (h_{t-1} W_{hn}^T + b_{hn}))`,
    :math:`h_t = (1 - z) \odot n + z \odot h_{t-1}`.

    Arguments: torch.nn.GRU's (``input_size, hidden_size, num_layers=1, bias=True,
    batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None``) plus
    ``cl_device``."""

    def __init__(self, *args, cl_device=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._cl_setup(cl_device)
