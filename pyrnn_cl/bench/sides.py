"""The two sides a run times, with the same weights and inputs: ours (:class:`_Ours`, the
MPSGraph or cuDNN dialect on device or host arrays) and PyTorch's (:class:`_Torch`:
``torch.nn``; :class:`_Bridge`: the drop-in modules of ``pyrnn_cl.torch``)."""

from __future__ import annotations

import numpy as np

from .configs import BenchConfig, _storage_dtype
from .weights import _mps_layer_arrays


class _Ours:
    """Device arrays and the two timed callables (forward, forward+backward) for our ops."""

    def __init__(self, cfg: BenchConfig, weights, x, dy, device, use_cudnn: bool,
                 host_inputs: bool = False, dtype="float32"):
        import pyopencl.array as cla

        import pyrnn_cl as rc

        self.rc, self.cfg, self.device = rc, cfg, device
        q = device.queue
        self.queue = q
        # host_inputs: NumPy arrays in and out, as a user's first call passes them (every
        # transfer is then inside the timed call); else arrays already on the device. Every
        # call names `device` (NumPy arrays do not: without it they ran on the default device)
        # every floating argument in the storage dtype of the run (the reference weights and
        # inputs are float32; 16-bit runs round them once here, outside the timed calls)
        self.dtype = storage = _storage_dtype(dtype)

        def to_device(a):
            a = np.ascontiguousarray(np.asarray(a).astype(storage))
            return a if host_inputs else cla.to_device(q, a)

        self.to_device = to_device
        self.x = self.to_device(x)
        self.dy = self.to_device(dy)
        self.dialect = "mps"
        self.note = ""
        if use_cudnn:
            self.dialect = "cudnn"
            self._init_cudnn(weights)
        else:
            if cfg.layers > 1:
                self.dialect = "mps (stacked layers)"
            self.layers = []
            for layer in range(cfg.layers):
                R, W, b, b2 = _mps_layer_arrays(cfg, weights, layer)
                dev = {k: (None if v is None else self.to_device(v))
                       for k, v in dict(R=R, W=W, b=b, b2=b2).items()}
                self.layers.append(dev)

    # -- MPSGraph dialect ------------------------------------------------------------------

    def _desc(self, training):
        rc, cfg = self.rc, self.cfg
        bi = cfg.directions == 2
        if cfg.cell == "lstm":
            return rc.LSTMDescriptor(bidirectional=bi, training=training)
        if cfg.cell == "gru":
            return rc.GRUDescriptor(bidirectional=bi, training=training, reset_gate_first=True,
                                    reset_after=True, flip_z=True)
        return rc.SingleGateRNNDescriptor(bidirectional=bi, training=training, activation="relu")

    def _mps_forward_layer(self, src, p, training):
        rc, cell = self.rc, self.cfg.cell
        kw = dict(descriptor=self._desc(training), device=self.device)
        if cell == "lstm":
            return rc.lstm(src, p["R"], p["W"], p["b"], **kw)
        if cell == "gru":
            return rc.gru(src, p["R"], p["W"], p["b"], secondary_bias=p["b2"], **kw)
        return rc.single_gate_rnn(src, p["R"], p["W"], p["b"], **kw)

    def _mps_gradients_layer(self, src, p, dy, saved):
        rc, cell = self.rc, self.cfg.cell
        kw = dict(descriptor=self._desc(True), device=self.device)
        if cell == "lstm":
            y, cs, z = saved
            return rc.lstm_gradients(src, p["R"], dy, z, cs, p["W"], p["b"], **kw)
        if cell == "gru":
            y, z = saved
            return rc.gru_gradients(src, p["R"], dy, z, y, p["W"], p["b"],
                                    secondary_bias=p["b2"], **kw)
        y, z = saved
        return rc.single_gate_rnn_gradients(src, p["R"], dy, z, p["W"], p["b"], **kw)

    def _mps_forward(self, training):
        src, saved = self.x, []
        for p in self.layers:
            outs = self._mps_forward_layer(src, p, training)
            saved.append((src, outs))
            src = outs[0]
        return src, saved

    def _mps_fwd_bwd(self):
        _, saved = self._mps_forward(True)
        dy = self.dy
        grads = []
        for p, (src, outs) in zip(reversed(self.layers), reversed(saved)):
            g = self._mps_gradients_layer(src, p, dy, outs)
            grads.append(g)
            dy = g[0]
        return grads

    # -- cuDNN dialect ---------------------------------------------------------------------

    def _cudnn_kwargs(self):
        cfg = self.cfg
        mode = cfg.cell                     # a cuDNN rnn_mode
        return dict(rnn_mode=mode,
                    direction="bidirectional" if cfg.directions == 2 else "unidirectional")

    def _init_cudnn(self, weights):
        rc, cfg = self.rc, self.cfg
        G, H = cfg.G, cfg.H
        ws, bs = [], []
        for w_ih, w_hh, b_ih, b_hh in weights:        # canonical: W_0..W_{G-1}, R_0..R_{G-1}
            ws += [w_ih[g * H:(g + 1) * H] for g in range(G)]
            ws += [w_hh[g * H:(g + 1) * H] for g in range(G)]
            bs += [b_ih[g * H:(g + 1) * H] for g in range(G)]
            bs += [b_hh[g * H:(g + 1) * H] for g in range(G)]
        kw = self._cudnn_kwargs()
        params = rc.cudnn_rnn_canonical_to_params(cfg.layers, H, cfg.I, ws, bs, **kw)
        self.params = self.to_device(params)
        LD = cfg.layers * cfg.directions
        self.h0 = self.to_device(np.zeros((LD, cfg.N, H), np.float32))
        self.c0 = (self.to_device(np.zeros((LD, cfg.N, H), np.float32)) if cfg.cell == "lstm"
                   else None)

    def _cudnn_forward(self, training):
        return self.rc.cudnn_rnn(self.x, self.h0, self.c0, self.params, is_training=training,
                                 device=self.device, **self._cudnn_kwargs())

    def _cudnn_fwd_bwd(self):
        out, out_h, out_c, reserve, host_reserved = self._cudnn_forward(True)
        return self.rc.cudnn_rnn_backprop(
            self.x, self.h0, self.c0, self.params, None, out, out_h, out_c, self.dy, None, None,
            reserve, host_reserved, device=self.device, **self._cudnn_kwargs())

    # -- timed callables -------------------------------------------------------------------

    def forward_output(self):
        """The forward output ``[T, N, D*H]`` as NumPy (for the agreement check; not timed)."""
        if self.dialect == "cudnn":
            y = self._cudnn_forward(False)[0]
        else:
            y = self._mps_forward(False)[0]
        y = y if isinstance(y, np.ndarray) else y.get(queue=self.queue)
        return np.asarray(y, np.float32)

    def run_forward(self):
        if self.dialect == "cudnn":
            self._cudnn_forward(False)
        else:
            self._mps_forward(False)
        self.queue.finish()

    def run_fwd_bwd(self):
        if self.dialect == "cudnn":
            self._cudnn_fwd_bwd()
        else:
            self._mps_fwd_bwd()
        self.queue.finish()


def _rnn_module(namespace, cfg: BenchConfig, **kw):
    """``namespace.LSTM/GRU/RNN`` (``torch.nn``, or ``pyrnn_cl.torch`` with its ``cl_device``)
    for ``cfg``'s cell, sizes, layers and directions (the vanilla RNN is ReLU's)."""
    kw.update(num_layers=cfg.layers, bidirectional=cfg.directions == 2)
    if cfg.cell == "lstm":
        return namespace.LSTM(cfg.I, cfg.H, **kw)
    if cfg.cell == "gru":
        return namespace.GRU(cfg.I, cfg.H, **kw)
    return namespace.RNN(cfg.I, cfg.H, nonlinearity="relu", **kw)


class _Torch:
    """The same network in ``torch.nn`` with our weights, on the CPU or on ``device`` (a CUDA
    device: cuDNN; every timed call then ends with ``torch.cuda.synchronize()``)."""

    def __init__(self, cfg: BenchConfig, weights, x, dy, threads: int, device: str = "cpu"):
        import torch

        self.torch = torch
        torch.set_num_threads(threads)
        mod = _rnn_module(torch.nn, cfg)
        with torch.no_grad():
            i = 0
            for layer in range(cfg.layers):
                for d in range(cfg.directions):
                    sfx = f"_l{layer}" + ("_reverse" if d else "")
                    for name, value in zip(("weight_ih", "weight_hh", "bias_ih", "bias_hh"),
                                           weights[i]):
                        getattr(mod, name + sfx).copy_(torch.from_numpy(value))
                    i += 1
        self.cuda = str(device).startswith("cuda")
        if self.cuda and not torch.cuda.is_available():
            raise RuntimeError(f"torch device {device!r}: this torch has no CUDA device "
                               f"(torch {torch.__version__})")
        self.mod = mod.to(device)
        self.x = torch.from_numpy(x).to(device)
        self.dy = torch.from_numpy(dy).to(device)
        self.params = list(self.mod.parameters())

    def _sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def forward_output(self):
        with self.torch.no_grad():
            return self.mod(self.x)[0].cpu().numpy()

    def run_forward(self):
        with self.torch.no_grad():
            self.mod(self.x)
        self._sync()

    def run_fwd_bwd(self):
        x = self.x.detach().requires_grad_(True)
        out = self.mod(x)[0]
        self.torch.autograd.grad(out, [x, *self.params], self.dy)
        self._sync()


class _Bridge(_Torch):
    """The same network through ``pyrnn_cl.torch`` (the drop-in modules) on ``device``, with the
    weights of ``reference`` (a CPU :class:`_Torch`) in the run's storage dtype ``dtype`` (as
    :class:`_Ours` has them): what a PyTorch user runs. Its forward and backward are the
    cuDNN-dialect calls of :class:`_Ours` plus what torch on the CPU makes inherent (the input,
    output and their gradients cross to and from the device) and autograd's own work."""

    def __init__(self, cfg: BenchConfig, reference: _Torch, device, dtype="float32"):
        import pyrnn_cl.torch as rt

        storage = _storage_dtype(dtype)
        tdtype = next(t for t, n in rt._NUMPY_DTYPES.items() if n == storage)
        self.torch, self.cuda = reference.torch, False
        mod = _rnn_module(rt, cfg, cl_device=device)
        mod.load_state_dict(reference.mod.state_dict())
        self.mod = mod.to(tdtype)
        self.x, self.dy = reference.x.to(tdtype), reference.dy.to(tdtype)
        self.params = list(self.mod.parameters())
