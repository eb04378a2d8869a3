r"""``pyrnn-cl bench``: time the public ops on one device against PyTorch, in the same run.

The configurations are the CPU tier of ``reference/performance.md`` §6.3 (DeepBench-style LSTM,
GRU and vanilla-ReLU layers, one 2-layer bidirectional LSTM, one GNMT layer). For each one:

* **ours**: the MPSGraph dialect (``rc.lstm`` / ``rc.gru`` / ``rc.single_gate_rnn`` and their
  ``*_gradients``) for single layers; the 2-layer bidirectional network goes through the cuDNN
  dialect (``rc.cudnn_rnn`` + ``rc.cudnn_rnn_backprop``) when the package has it, else two
  stacked MPSGraph layers. Every input is a ``pyopencl.array.Array`` already on the device, so
  host transfers are not timed (``--host-inputs``: NumPy arrays in and out, as a user's first
  call passes them, transfers timed); a repetition is one op call (or forward + gradients call)
  followed by ``queue.finish()``, i.e. everything the caller waits for: argument checks, weight
  packing, allocations, every kernel.
* **torch**: the same network (same weights) as ``torch.nn.LSTM/GRU/RNN`` on the CPU with
  ``torch.set_num_threads(threads)``: forward under ``torch.no_grad()``, forward+backward as
  forward + ``torch.autograd.grad`` of every parameter and the input.
* Warm-up calls first (program builds and PoCL's per-local-size specialisation are excluded),
  then ``repeat`` (default 5) timed repetitions: median and minimum are reported. The two sides
  take turns (:func:`_timed_blocks`): two untimed calls, then ``block`` (default 3) timed calls
  back to back, as a training loop calls an op; alternating turns keep a drifting background
  load on both sides.

FLOP convention (stated in the output too): per layer and direction,

.. math::  F_{fwd} = 2 \cdot G \cdot H \cdot N \cdot T \cdot (I_l + H), \qquad
           F_{fwd+bwd} = 3 F_{fwd}, \qquad F_{rec} = 2 \cdot G \cdot H^2 \cdot N \cdot T

(G = 4 LSTM, 3 GRU, 1 vanilla; ``I_l`` = input width of layer l; the input GEMM is included in
``F_fwd``; ``F_rec`` is DeepBench's recurrent-only count). ``% sgemm`` compares GFLOP/s with
NumPy's SGEMM 1024^3 measured in the same run with the same thread count. ``ratio`` is
PyTorch time / our time (> 1: we are faster), from the medians.

The memory columns are an estimate of the device bytes our engine allocates per call, from its
buffer shapes (:func:`memory_estimate`): inputs, *reserve* (what the forward keeps for backward:
saved gates, h and c sequences), forward workspace (packed weights), backward workspace that
does not grow with T (packs, one chunk of gate gradients, two-step rings), backward
temporaries that do grow with T (only the gradient passed between stacked layers), and the
gradient outputs.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import importlib
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["BenchConfig", "CONFIGS", "QUICK", "run_bench", "main", "format_table",
           "memory_estimate", "sgemm_gflops", "pin_pocl_workers"]

_GATES = {"lstm": 4, "gru": 3, "rnn_relu": 1}


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark network: ``layers`` x ``directions`` layers of ``cell`` with ``H`` hidden
    units over ``T`` steps of ``N`` rows, input width ``I``."""

    name: str
    cell: str            # "lstm", "gru" or "rnn_relu"
    H: int
    I: int
    N: int
    T: int
    layers: int = 1
    directions: int = 1
    why: str = ""

    @property
    def G(self) -> int:
        return _GATES[self.cell]

    def layer_inputs(self) -> list[int]:
        """Input width of every layer."""
        return [self.I] + [self.directions * self.H] * (self.layers - 1)

    def flops_forward(self) -> float:
        """2 G H N T (I_l + H) summed over layers and directions (input GEMM included)."""
        return float(sum(self.directions * 2 * self.G * self.H * self.N * self.T * (i + self.H)
                         for i in self.layer_inputs()))

    def flops_recurrent(self) -> float:
        """2 G H^2 N T per layer and direction (DeepBench's recurrent-only count)."""
        return float(self.layers * self.directions * 2 * self.G * self.H * self.H * self.N
                     * self.T)


#: The CPU tier of performance.md §6.3, plus GRUs at the 512/16 and 512/64 shapes.
CONFIGS: tuple[BenchConfig, ...] = (
    BenchConfig("tiny-latency", "lstm", 128, 64, 8, 100, why="launch and Python overhead"),
    BenchConfig("db-charlm", "lstm", 256, 256, 16, 150, why="DeepBench char-LM, long T"),
    BenchConfig("db-mt-512x16", "lstm", 512, 512, 16, 25, why="DeepBench MT, small batch"),
    BenchConfig("db-mt-512x64", "lstm", 512, 512, 64, 25, why="compute-bound, W_hh in cache"),
    BenchConfig("db-mt-1024x32", "lstm", 1024, 1024, 32, 25, why="W_hh 16 MB in L3"),
    BenchConfig("db-inf-1024x1", "lstm", 1024, 1024, 1, 25, why="batch-1, bandwidth-bound"),
    BenchConfig("db-inf-1024x4", "lstm", 1024, 1024, 4, 25, why="small-batch inference"),
    BenchConfig("db-rnn-1760x16", "rnn_relu", 1760, 1760, 16, 50, why="DeepSpeech vanilla ReLU"),
    BenchConfig("bi2-256x32", "lstm", 256, 128, 32, 50, layers=2, directions=2,
                why="layers and directions"),
    BenchConfig("gnmt-1024x64", "lstm", 1024, 1024, 64, 50, why="MLPerf GNMT layer"),
    BenchConfig("gru-512x16", "gru", 512, 512, 16, 25, why="GRU, small batch"),
    BenchConfig("gru-512x64", "gru", 512, 512, 64, 25, why="GRU, compute-bound"),
)

#: The GPU tier of performance.md §6.3 (``--tier gpu``): the DeepBench training subset, inference
#: shapes and the MLPerf GNMT layer, for a GPU against cuDNN through ``--torch-device cuda``.
#: Input width = H (DeepBench uses skip-input; here the input GEMM is included and timed).
GPU_CONFIGS: tuple[BenchConfig, ...] = (
    BenchConfig("gpu-lstm-512x16", "lstm", 512, 512, 16, 25, why="DeepBench, latency-bound"),
    BenchConfig("gpu-lstm-512x128", "lstm", 512, 512, 128, 25, why="DeepBench"),
    BenchConfig("gpu-lstm-1024x32", "lstm", 1024, 1024, 32, 25, why="DeepBench"),
    BenchConfig("gpu-lstm-2048x64", "lstm", 2048, 2048, 64, 25, why="DeepBench"),
    BenchConfig("gpu-lstm-4096x128", "lstm", 4096, 4096, 128, 25, why="DeepBench, compute-bound"),
    BenchConfig("gpu-lstm-1536x8", "lstm", 1536, 1536, 8, 50, why="DeepBench"),
    BenchConfig("gpu-lstm-256x64", "lstm", 256, 256, 64, 150, why="DeepBench, long T"),
    BenchConfig("gpu-gru-2816x32", "gru", 2816, 2816, 32, 1500, why="DeepBench, T = 1500"),
    BenchConfig("gpu-gru-1024x64", "gru", 1024, 1024, 64, 1500, why="DeepBench, T = 1500"),
    BenchConfig("gpu-gru-512x32", "gru", 512, 512, 32, 1, why="DeepBench, one step"),
    BenchConfig("gpu-rnn-1760x16", "rnn_relu", 1760, 1760, 16, 50, why="DeepBench vanilla"),
    BenchConfig("gpu-rnn-2560x128", "rnn_relu", 2560, 2560, 128, 50, why="DeepBench vanilla"),
    BenchConfig("gpu-inf-1024x1", "lstm", 1024, 1024, 1, 25, why="inference, batch 1"),
    BenchConfig("gpu-inf-1536x4", "lstm", 1536, 1536, 4, 50, why="inference, batch 4"),
    BenchConfig("gpu-inf-gru-2816x1", "gru", 2816, 2816, 1, 187, why="inference GRU"),
    BenchConfig("gpu-gnmt-1024x128", "lstm", 1024, 1024, 128, 50, why="MLPerf GNMT layer"),
)

#: ``--quick``: small configurations that finish in well under a minute.
QUICK = ("tiny-latency", "db-mt-512x16", "gru-512x16")

FLOP_CONVENTION = ("per layer and direction: forward = 2*G*H*N*T*(I_l+H) (input GEMM included), "
                   "fwd+bwd = 3x forward, recurrent-only = 2*G*H^2*N*T; G = 4 LSTM, 3 GRU, "
                   "1 vanilla")
TIMING_NOTE = ("one repetition = op call(s) + queue.finish(); warm-up excluded; the sides take "
               "turns (two untimed calls, then a block of timed calls back to back); ratio = "
               "torch time / our time from the medians (>1: pyrnn_cl faster)")


# {{{ threads and machine description

def _openblas_set_threads(n: int) -> bool:
    """Set the thread count of every OpenBLAS loaded in this process (NumPy's); True if one
    took it. Uses the exported ``*set_num_threads*`` entry points (no threadpoolctl needed)."""
    names = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
             "openblas_set_num_threads64_", "openblas_set_num_threads")
    done = False
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps
                     if "openblas" in line.lower() and ".so" in line.split()[-1]}
    except OSError:
        return False
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in names:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn(ctypes.c_int(n))
                done = True
                break
    return done


def _cpuinfo_value(*keys: str) -> str | None:
    """The value of the first ``/proc/cpuinfo`` line starting with one of ``keys``, or
    ``None`` (no such line, or no /proc)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(keys):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    return _cpuinfo_value("model name") or platform.processor() or "?"


#: SIMD extensions the bench names, widest first (x86-64, then Arm)
_ISA_FLAGS = ("avx512f", "avx512_bf16", "avx2", "fma", "avx", "sse4_2", "asimd", "sve")


def _cpu_isa() -> str:
    """The SIMD extensions of :data:`_ISA_FLAGS` the CPU reports (``/proc/cpuinfo`` flags),
    e.g. ``"avx512f avx2 fma"`` or ``"asimd"``; ``"?"`` where unknown."""
    flags = set((_cpuinfo_value("flags", "Features") or "").split())
    return " ".join(f for f in _ISA_FLAGS if f in flags) or "?"


def sgemm_gflops(size: int = 1024, repeat: int = 5) -> dict:
    """NumPy float32 ``size^3`` matmul rate: ``{"median": GFLOP/s, "max": GFLOP/s}``."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    c = np.empty((size, size), np.float32)
    np.matmul(a, b, out=c)
    times = []
    for _ in range(max(repeat, 1)):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        times.append(time.perf_counter() - t0)
    flops = 2.0 * size ** 3
    return {"median": flops / statistics.median(times) / 1e9, "max": flops / min(times) / 1e9}

# }}}

# {{{ weights (PyTorch layout, shared by both sides)


def _storage_dtype(name) -> np.dtype:
    """The NumPy dtype of a ``--dtype`` name (``TypeError`` listing the accepted ones)."""
    from .sources import STORAGE_DTYPES, storage_names

    for dt in STORAGE_DTYPES:
        if str(dt) == str(name) or dt == name:
            return dt
    raise TypeError(f"got {name!r}, expected {storage_names()}")


def _make_weights(cfg: BenchConfig, seed: int = 0):
    """PyTorch-layout float32 weights ``[(W_ih, W_hh, b_ih, b_hh) per layer per direction]``,
    uniform in +-1/sqrt(H) like ``torch.nn.LSTM``'s default initialisation."""
    rng = np.random.default_rng(seed)
    k = 1.0 / math.sqrt(cfg.H)
    GH = cfg.G * cfg.H
    out = []
    for width in cfg.layer_inputs():
        for _ in range(cfg.directions):
            out.append(tuple(rng.uniform(-k, k, shape).astype(np.float32)
                             for shape in ((GH, width), (GH, cfg.H), (GH,), (GH,))))
    return out


def _mps_layer_arrays(cfg: BenchConfig, weights, layer: int):
    """MPSGraph arguments of one layer from PyTorch weights: ``(R, W, b, secondary_bias)``.

    LSTM: PyTorch's (i, f, g, o) is MPSGraph's default (i, f, z, o). GRU: PyTorch's (r, z, n)
    with ``reset_gate_first``, ``reset_after`` and ``flip_z``; ``b_hn`` becomes the secondary
    bias, the other hidden biases fold into ``b``. Vanilla: ``b = b_ih + b_hh``.
    """
    D, H = cfg.directions, cfg.H
    parts = weights[layer * D:(layer + 1) * D]
    Rs, Ws, bs, b2s = [], [], [], []
    for w_ih, w_hh, b_ih, b_hh in parts:
        Rs.append(w_hh)
        Ws.append(w_ih)
        if cfg.cell == "gru":
            b = b_ih.copy()
            b[:2 * H] += b_hh[:2 * H]
            bs.append(b)
            b2s.append(b_hh[2 * H:])
        else:
            bs.append(b_ih + b_hh)
    R = np.stack(Rs) if D == 2 else Rs[0]
    return (np.ascontiguousarray(R), np.ascontiguousarray(np.concatenate(Ws)),
            np.concatenate(bs), np.concatenate(b2s) if b2s else None)

# }}}

# {{{ our side


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
        # transfer is then inside the timed call); else arrays already on the device
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
        desc = self._desc(training)
        if cell == "lstm":
            return rc.lstm(src, p["R"], p["W"], p["b"], descriptor=desc)
        if cell == "gru":
            return rc.gru(src, p["R"], p["W"], p["b"], secondary_bias=p["b2"], descriptor=desc)
        return rc.single_gate_rnn(src, p["R"], p["W"], p["b"], descriptor=desc)

    def _mps_gradients_layer(self, src, p, dy, saved):
        rc, cell = self.rc, self.cfg.cell
        desc = self._desc(True)
        if cell == "lstm":
            y, cs, z = saved
            return rc.lstm_gradients(src, p["R"], dy, z, cs, p["W"], p["b"], descriptor=desc)
        if cell == "gru":
            y, z = saved
            return rc.gru_gradients(src, p["R"], dy, z, y, p["W"], p["b"],
                                    secondary_bias=p["b2"], descriptor=desc)
        y, z = saved
        return rc.single_gate_rnn_gradients(src, p["R"], dy, z, p["W"], p["b"],
                                            descriptor=desc)

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
        mode = {"lstm": "lstm", "gru": "gru", "rnn_relu": "rnn_relu"}[cfg.cell]
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
                                 **self._cudnn_kwargs())

    def _cudnn_fwd_bwd(self):
        out, out_h, out_c, reserve, host_reserved = self._cudnn_forward(True)
        return self.rc.cudnn_rnn_backprop(
            self.x, self.h0, self.c0, self.params, None, out, out_h, out_c, self.dy, None, None,
            reserve, host_reserved, **self._cudnn_kwargs())

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

# }}}

# {{{ PyTorch side


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

# }}}

# {{{ memory estimate


def memory_estimate(cfg: BenchConfig, itemsize: int = 4, bwd_rows: int = 2048,
                    dialect: str = "mps") -> dict:
    """Device bytes our engine allocates for one forward and one forward+backward of ``cfg``
    (per layer, summed), from the engine's buffer shapes; ``bwd_rows`` is the device's
    ``REC_BWD_ROWS`` (rows of gate gradients per backward chunk), ``dialect`` ``"mps"`` or
    ``"cudnn"``.

    ``inputs``: source, weights, biases, upstream gradient. ``reserve``: what the training
    forward returns for backward (saved gates ``[T][N][D*G*H]``, h ``[T][N][D*H]`` and the LSTM
    cell sequence). ``fwd_workspace``: the packed R (small layers also pack W: not counted).
    ``bwd_workspace``: the backward's
    temporaries that do not grow with T: the transposed pack of R (and for GRU the forward pack
    again), the gate gradients of one chunk of steps (two arrays for GRU), the two-step rings of
    gate gradients and carries, and (MPSGraph LSTM/RNN gradients, which are not given h) one
    chunk of h[t-1] computed from the saved gates. ``bwd_sequence``: temporaries that do grow
    with T: in the cuDNN dialect the gradient passed down between layers (the reserve space's
    parts are written and read in place); none in the MPSGraph dialect. ``grad_outputs``: dx,
    dW, dR, db.
    """
    T, N, H, D, G = cfg.T, cfg.N, cfg.H, cfg.directions, cfg.G
    lstm, gru = cfg.cell == "lstm", cfg.cell == "gru"
    from .engine import backward_chunk_steps

    steps = backward_chunk_steps(T, N, bwd_rows)
    out = dict.fromkeys(("inputs", "reserve", "fwd_workspace", "bwd_workspace", "bwd_sequence",
                         "grad_outputs"), 0)
    for l, width in enumerate(cfg.layer_inputs()):
        GH = D * G * H
        seq_h = T * N * D * H
        out["inputs"] += T * N * width + GH * width + D * G * H * H + GH + (D * H if gru else 0)
        out["reserve"] += T * N * GH + seq_h + (seq_h if lstm else 0)
        packed = D * G * H * H
        out["fwd_workspace"] += packed                             # R packed
        bwd = packed * (2 if gru else 1)                           # transposed pack (+ R)
        bwd += steps * N * GH * (2 if gru else 1)                  # one chunk of dgx (+ dgh)
        bwd += 2 * N * GH if steps < T else 0                      # gate-gradient ring
        bwd += 2 * N * D * H * (2 if lstm else 1)                  # carry ring (+ carry_c)
        if dialect != "cudnn" and not gru:
            bwd += steps * N * D * H                               # h[t-1] of one chunk
        out["bwd_workspace"] = max(out["bwd_workspace"], bwd)     # one layer at a time
        if dialect == "cudnn" and l:
            out["bwd_sequence"] = max(out["bwd_sequence"], T * N * width)  # dx passed down
        out["grad_outputs"] += GH * width + D * G * H * H + GH + (T * N * width if not l else 0)
    out["inputs"] += T * N * D * H                                 # dy of the last layer
    return {k: v * itemsize for k, v in out.items()}

# }}}

# {{{ running


#: Untimed calls that open each turn of :func:`_timed_blocks`.
TURN_WARMUP = 2


def _timed_blocks(fns: dict, repeat: int, warmup: int, block: int = 3) -> dict:
    """``{name: [seconds] * repeat}``: every callable warmed up ``warmup`` times, then turns
    that alternate between the callables until each has ``repeat`` timings. A turn is
    :data:`TURN_WARMUP` untimed calls followed by ``block`` timed calls back to back, as in a
    training loop; alternating turns spread a drifting background load over both sides.

    The untimed calls matter on a small CPU: right after the other side's turn, the first one
    or two calls of either side were measured up to 2x slower, which says nothing about either
    implementation (likely causes, not isolated: the other side's threads still spinning -
    libgomp's OpenMP workers spin after a parallel region - and this side's pool asleep).
    ``block = 0``: single timed calls round-robin, no untimed calls."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    while any(len(v) < repeat for v in times.values()):
        for name, fn in fns.items():
            todo = min(max(block, 1), repeat - len(times[name]))
            if todo <= 0:
                continue
            for _ in range(TURN_WARMUP if block else 0):
                fn()
            for _ in range(todo):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return times


def _stats(times: list[float]) -> dict:
    return {"median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3,
            "all_ms": [t * 1e3 for t in times]}


def _rates(cfg: BenchConfig, fwd: dict, fb: dict, sgemm: float) -> dict:
    f, r = cfg.flops_forward(), cfg.flops_recurrent()
    tf, tb = fwd["median_ms"] * 1e-3, fb["median_ms"] * 1e-3
    return {
        "us_per_step_fwd": tf / cfg.T * 1e6,
        "us_per_step_fwd_bwd": tb / cfg.T * 1e6,
        "gflops_fwd": f / tf / 1e9,
        "gflops_fwd_bwd": 3 * f / tb / 1e9,
        "gflops_rec_fwd": r / tf / 1e9,
        "pct_sgemm_fwd": 100 * f / tf / 1e9 / sgemm if sgemm else None,
        "pct_sgemm_fwd_bwd": 100 * 3 * f / tb / 1e9 / sgemm if sgemm else None,
    }


def _resolve_configs(configs) -> list[BenchConfig]:
    by_name = {c.name: c for c in CONFIGS + GPU_CONFIGS}
    out = []
    for c in configs:
        if isinstance(c, BenchConfig):
            out.append(c)
        elif c in by_name:
            out.append(by_name[c])
        else:
            raise ValueError(f"configs: unknown configuration {c!r}; known: "
                             f"{', '.join(by_name)}")
    return out


class _Progress:
    """tqdm when importable, else one stderr line per step."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.done, self.bar = total, 0, None
        self.enabled = enabled
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="config", file=sys.stderr, leave=False)
            except ImportError:
                pass

    def start(self, name: str):
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_description(name)
        else:
            print(f"[{self.done + 1}/{self.total}] {name} ...", file=sys.stderr, flush=True)

    def step(self):
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def pin_pocl_workers(threads: int | None = None) -> bool:
    """Ask PoCL to pin its worker threads, worker i to CPU i (``POCL_AFFINITY=1``, read when
    PoCL first opens, so call this before any OpenCL use). Returns whether it was set.

    Why: PoCL's workers sleep between kernels. A whole-sequence kernel runs one long
    work-group per core; on two cores, Linux often wakes the second worker onto the CPU where
    the first worker or the Python thread runs, and leaves it queued there while the other
    CPU idles, so one core runs both work-groups and the call takes twice as long (measured
    with the tiny LSTM forward: 10-55 % of calls at 2x unpinned, 0-2 % pinned). PyTorch's
    OpenMP workers spin between parallel regions and stay on their CPUs.

    Not set when the user set ``POCL_AFFINITY`` already, or when the process may not run on
    every CPU ``0 .. threads-1`` (``threads``: PoCL's thread count, default the CPU count;
    PoCL would pin outside the allowed set).
    """
    if threads is not None and int(threads) < 1:
        raise ValueError(f"threads: got {threads}, expected a value >= 1 (or None)")
    if "POCL_AFFINITY" in os.environ:
        return False
    n = int(threads or os.cpu_count() or 1)
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return False
    if not set(range(n)) <= allowed:
        return False
    os.environ["POCL_AFFINITY"] = "1"
    return True


def intel_runtime_report() -> dict:
    """Intel's CPU runtime as this process has it (:mod:`pyrnn_cl.devices.runtimes`): how it
    was registered and its thread controls (``None``: the runtime's default; docs/platforms.md
    measures them), which of them pyrnn_cl set, the process's CPUs and cgroup CPU quota."""
    from .devices import runtimes

    state = runtimes.registration()
    return {"registration": state.state if state else None, **runtimes.thread_settings()}


def _machine(device, threads: int, torch_version) -> dict:
    from .devices.info import parse_version

    from .tuning import FAMILIES

    info = device.info
    pocl = parse_version(info.platform_version, "PoCL")
    llvm = parse_version(info.platform_version, "LLVM")
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "device": info.name,
        "platform": info.platform_name,
        "platform_version": info.platform_version,
        "pocl_version": ".".join(map(str, pocl)) if pocl else None,
        "llvm_version": ".".join(map(str, llvm)) if llvm else None,
        "compute_units": info.compute_units,
        "cpu": _cpu_model(),
        "isa": _cpu_isa(),
        "threads": threads,
        # per kernel family: the values used and where they came from (pyrnn_cl.tuning)
        "tuning": {f: {"values": device.tuning(f), "source": device.tuning_source(f)}
                   for f in FAMILIES},
        "pocl_threads_env": os.environ.get("POCL_MAX_PTHREAD_COUNT"),
        "pocl_affinity_env": os.environ.get("POCL_AFFINITY"),
        "intel_cpu_runtime": intel_runtime_report(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch_version,
    }


def run_bench(configs=None, *, device=None, repeat: int = 5, warmup: int = 2,
              threads: int | None = None, compare_torch: bool = True, check: bool = True,
              progress: bool = False, use_cudnn: bool | None = None, block: int = 3,
              torch_device: str = "cpu", host_inputs: bool = False,
              bridge: bool = False, dtype="float32") -> dict:
    """Benchmark ``configs`` (names of :data:`CONFIGS` or :class:`BenchConfig` objects; default
    all) on ``device`` and return the results as a JSON-ready dict.

    ``threads``: thread count for NumPy's BLAS and torch (default: the device's compute units
    for a CPU device, else ``os.cpu_count()``); PoCL's own thread count is fixed when the
    platform is first opened (``POCL_MAX_PTHREAD_COUNT``, which :func:`main` sets from
    ``--threads``). ``compare_torch``: also time PyTorch when it is installed. ``check``:
    compare our forward output with PyTorch's once (not timed). ``use_cudnn``: None picks the
    cuDNN dialect for multi-layer configurations when ``pyrnn_cl`` has it. ``block``: timed
    calls per turn (:func:`_timed_blocks`; 0: single calls round-robin). ``torch_device``:
    where PyTorch runs (``"cuda"``: cuDNN on an NVIDIA GPU, for the GPU tier).
    ``host_inputs``: our ops get NumPy arrays (inputs, weights, states), as in a user's first
    call, so every host-device transfer is timed; default: arrays already on the device.
    ``bridge``: also time forward+backward through ``pyrnn_cl.torch`` (needs torch; PyTorch on
    the CPU), against our side run with the cuDNN dialect for every configuration (what the
    bridge calls): ``ratio_bridge_fwd_bwd`` is our time / the bridge's (1.0: no overhead).
    ``dtype``: the storage dtype of our ops' arrays (``"float32"``, ``"float16"``,
    ``"bfloat16"`` where ml_dtypes is installed; ``sources.STORAGE_DTYPES``); PyTorch always
    runs float32, so the ratios of a 16-bit run compare it with PyTorch's float32.
    """
    import pyrnn_cl as rc
    from .devices import resolve_device

    if repeat < 1:
        raise ValueError(f"repeat: got {repeat}, expected a value >= 1")
    if block < 0:
        raise ValueError(f"block: got {block}, expected a value >= 0")
    cfgs = _resolve_configs(CONFIGS if configs is None else configs)
    storage = _storage_dtype(dtype)
    dev = resolve_device(device)
    if threads is None:
        threads = dev.info.compute_units if dev.info.type == "cpu" else (os.cpu_count() or 1)
    threads = int(threads)
    blas_set = _openblas_set_threads(threads)
    torch_mod = None
    if compare_torch:
        try:
            import torch as torch_mod
        except ImportError:
            torch_mod = None
    if torch_mod is not None:
        torch_mod.set_num_threads(threads)
    have_cudnn = hasattr(rc, "cudnn_rnn") and hasattr(rc, "cudnn_rnn_backprop")
    if bridge and use_cudnn is None:
        use_cudnn = have_cudnn           # the bridge runs the cuDNN dialect: compare like with like

    sgemm = sgemm_gflops()
    result = {
        "machine": _machine(dev, threads, getattr(torch_mod, "__version__", None)),
        "numpy_sgemm_1024_gflops": sgemm,
        "numpy_blas_threads_set": blas_set,
        "flop_convention": FLOP_CONVENTION,
        "timing": TIMING_NOTE,
        "repeat": repeat,
        "warmup": warmup,
        "block": block,
        "torch_device": torch_device,
        "host_inputs": bool(host_inputs),
        "bridge": bool(bridge),
        "dtype": str(storage),
        "configs": [],
    }
    bar = _Progress(len(cfgs), progress)
    try:
        for cfg in cfgs:
            bar.start(cfg.name)
            result["configs"].append(_bench_one(cfg, dev, repeat, warmup, threads, torch_mod,
                                                check, sgemm["median"], have_cudnn, use_cudnn,
                                                block, torch_device, host_inputs,
                                                storage, bridge))
            bar.step()
    finally:
        bar.close()
    result["summary"] = _summary(result["configs"])
    return result


def _bench_one(cfg, dev, repeat, warmup, threads, torch_mod, check, sgemm, have_cudnn,
               use_cudnn, block=3, torch_device="cpu", host_inputs=False,
               dtype="float32", bridge=False) -> dict:
    rng = np.random.default_rng(1)
    weights = _make_weights(cfg)
    x = rng.uniform(-1, 1, (cfg.T, cfg.N, cfg.I)).astype(np.float32)
    dy = rng.uniform(-1, 1, (cfg.T, cfg.N, cfg.directions * cfg.H)).astype(np.float32)
    entry = {"config": asdict(cfg), "flops": {"forward": cfg.flops_forward(),
                                              "fwd_bwd": 3 * cfg.flops_forward(),
                                              "recurrent_forward": cfg.flops_recurrent()},
             "memory_bytes": memory_estimate(cfg), "ours": None, "torch": None,
             "ratio_fwd": None, "ratio_fwd_bwd": None, "max_abs_diff_vs_torch": None,
             "bridge": None, "ratio_bridge_fwd_bwd": None, "note": "", "error": None}
    want_cudnn = have_cudnn and cfg.layers > 1 if use_cudnn is None else bool(use_cudnn)
    try:
        ours = None
        if want_cudnn:
            try:
                ours = _Ours(cfg, weights, x, dy, dev, use_cudnn=True, host_inputs=host_inputs,
                             dtype=dtype)
                ours.run_fwd_bwd()
            except Exception as exc:  # noqa: BLE001 - fall back, and say so
                entry["note"] = f"cuDNN dialect failed ({type(exc).__name__}: {exc}); "
                ours = None
        if ours is None:
            ours = _Ours(cfg, weights, x, dy, dev, use_cudnn=False, host_inputs=host_inputs,
                         dtype=dtype)
        if cfg.layers > 1 and ours.dialect != "cudnn":
            entry["note"] += "two stacked MPSGraph layers (no cuDNN dialect)"
        entry["dialect"] = ours.dialect
        rows = int(dev.tuning("recurrence").get("REC_BWD_ROWS", 2048))
        entry["memory_bytes"] = memory_estimate(
            cfg, bwd_rows=rows, dialect="cudnn" if ours.dialect == "cudnn" else "mps")
        y_ours = ours.forward_output() if check and torch_mod is not None else None
        tm = (_Torch(cfg, weights, x, dy, threads, torch_device) if torch_mod is not None
              else None)
        if y_ours is not None:
            entry["max_abs_diff_vs_torch"] = float(np.max(np.abs(y_ours - tm.forward_output())))
        # Alternating turns: the machine may be shared, so both sides see the same load.
        fns = {"fwd": ours.run_forward, "fwd_bwd": ours.run_fwd_bwd}
        if tm is not None:
            fns.update(torch_fwd=tm.run_forward, torch_fwd_bwd=tm.run_fwd_bwd)
        if bridge and torch_mod is not None and not tm.cuda:
            fns.update(bridge_fwd_bwd=_Bridge(cfg, tm, dev, dtype).run_fwd_bwd)
        times = _timed_blocks(fns, repeat, warmup, block)
        fwd, fb = _stats(times["fwd"]), _stats(times["fwd_bwd"])
        entry["ours"] = {"fwd": fwd, "fwd_bwd": fb, **_rates(cfg, fwd, fb, sgemm)}
        if tm is not None:
            tfwd, tfb = _stats(times["torch_fwd"]), _stats(times["torch_fwd_bwd"])
            entry["torch"] = {"fwd": tfwd, "fwd_bwd": tfb, **_rates(cfg, tfwd, tfb, sgemm)}
            entry["ratio_fwd"] = tfwd["median_ms"] / fwd["median_ms"]
            entry["ratio_fwd_bwd"] = tfb["median_ms"] / fb["median_ms"]
            entry["ratio_fwd_min"] = tfwd["min_ms"] / fwd["min_ms"]
            entry["ratio_fwd_bwd_min"] = tfb["min_ms"] / fb["min_ms"]
        if "bridge_fwd_bwd" in times:
            bfb = _stats(times["bridge_fwd_bwd"])
            entry["bridge"] = {"fwd_bwd": bfb}
            entry["ratio_bridge_fwd_bwd"] = fb["median_ms"] / bfb["median_ms"]
            entry["ratio_bridge_fwd_bwd_min"] = fb["min_ms"] / bfb["min_ms"]
    except Exception as exc:  # noqa: BLE001 - one broken config must not hide the others
        entry["error"] = f"{type(exc).__name__}: {exc}"
    return entry


def _geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _summary(entries) -> dict:
    rf = [e["ratio_fwd"] for e in entries if e.get("ratio_fwd")]
    rb = [e["ratio_fwd_bwd"] for e in entries if e.get("ratio_fwd_bwd")]
    rbr = [e["ratio_bridge_fwd_bwd"] for e in entries if e.get("ratio_bridge_fwd_bwd")]
    return {"geomean_ratio_fwd": _geomean(rf), "geomean_ratio_fwd_bwd": _geomean(rb),
            "geomean_ratio_bridge_fwd_bwd": _geomean(rbr),
            "min_ratio_fwd": min(rf) if rf else None, "min_ratio_fwd_bwd": min(rb) if rb else None,
            "errors": sum(1 for e in entries if e.get("error"))}

# }}}

# {{{ output


def _f(v, fmt="{:.1f}"):
    return "-" if v is None else fmt.format(v)


def _ratio(entry, key):
    if entry.get(key) is None:
        return "-"
    return f"{entry[key]:.2f} ({entry[key + '_min']:.2f})"


def _mib(b):
    return f"{b / 2**20:.1f}"


def format_table(result: dict) -> str:
    """The results as Markdown: a header, the timing table, the memory table, the summary."""
    m = result["machine"]
    s = result["numpy_sgemm_1024_gflops"]
    lines = [
        f"pyrnn_cl bench - {m['date']} - device: {m['device']} ({m['platform_version']})",
        f"CPU: {m['cpu']} ({m.get('isa', '?')}); threads: {m['threads']} (compute units "
        f"{m['compute_units']}, "
        f"POCL_MAX_PTHREAD_COUNT={m['pocl_threads_env'] or 'unset'}, "
        f"POCL_AFFINITY={m.get('pocl_affinity_env') or 'unset'}); numpy {m['numpy']}, "
        f"torch {m['torch'] or 'not installed'}",
        "Tuning: " + "; ".join(f"{f} {t['source']}" for f, t in m["tuning"].items()),
        f"NumPy SGEMM 1024^3 ({m['threads']} threads): {s['median']:.1f} GFLOP/s median, "
        f"{s['max']:.1f} best",
        f"FLOPs: {result['flop_convention']}.",
        f"Timing: {result['timing']}; {result['repeat']} repetitions after {result['warmup']} "
        f"warm-up calls; PyTorch on {result.get('torch_device', 'cpu')}; our inputs: "
        + ("NumPy arrays (host transfers timed)" if result.get("host_inputs")
           else "pyopencl.array.Array on the device (host transfers not timed)")
        + f", {result.get('dtype', 'float32')} (PyTorch float32).",
        "",
        "| config | cell | H | I | N | T | L x D | fwd ms med (min) | fwd us/step | fwd GFLOP/s "
        "(rec-only) | % sgemm fwd | torch fwd ms med | ratio fwd med (min) | fwd+bwd ms med "
        "(min) | fwd+bwd GFLOP/s | % sgemm f+b | torch f+b ms med | ratio f+b med (min) |",
        "|" + "---|" * 18,
    ]
    intel = m.get("intel_cpu_runtime")
    if intel and m.get("platform") == "Intel(R) OpenCL":
        lines.insert(2, "Intel CPU runtime threads: " + ", ".join(
            f"{k}={v or 'unset'}" for k, v in intel["variables"].items())
            + f" (process CPUs {intel['process_cpus']}, cgroup quota "
            f"{intel['cgroup_cpu_limit'] or 'none'}; set by pyrnn_cl: "
            f"{intel['set_by_pyrnn_cl'] or 'nothing'})")
    for e in result["configs"]:
        c = e["config"]
        head = (f"| {c['name']} | {c['cell']} | {c['H']} | {c['I']} | {c['N']} | {c['T']} | "
                f"{c['layers']}x{c['directions']} |")
        if e.get("error") or e["ours"] is None:
            lines.append(head + f" error: {e.get('error')} |" + " |" * 10)
            continue
        o, t = e["ours"], e["torch"]
        lines.append(
            head
            + f" {o['fwd']['median_ms']:.2f} ({o['fwd']['min_ms']:.2f}) |"
            f" {o['us_per_step_fwd']:.1f} | {o['gflops_fwd']:.1f} ({o['gflops_rec_fwd']:.1f}) |"
            f" {_f(o['pct_sgemm_fwd'], '{:.0f}')} |"
            f" {_f(t and t['fwd']['median_ms'], '{:.2f}')} | {_ratio(e, 'ratio_fwd')} |"
            f" {o['fwd_bwd']['median_ms']:.2f} ({o['fwd_bwd']['min_ms']:.2f}) |"
            f" {o['gflops_fwd_bwd']:.1f} | {_f(o['pct_sgemm_fwd_bwd'], '{:.0f}')} |"
            f" {_f(t and t['fwd_bwd']['median_ms'], '{:.2f}')} |"
            f" {_ratio(e, 'ratio_fwd_bwd')} |")
    sm = result["summary"]
    lines += [
        "",
        f"Geometric mean ratio (torch time / ours): forward {_f(sm['geomean_ratio_fwd'], '{:.2f}')}"
        f", forward+backward {_f(sm['geomean_ratio_fwd_bwd'], '{:.2f}')}; lowest: forward "
        f"{_f(sm['min_ratio_fwd'], '{:.2f}')}, forward+backward "
        f"{_f(sm['min_ratio_fwd_bwd'], '{:.2f}')}.",
        "",
    ]
    if any(e.get("bridge") for e in result["configs"]):
        lines += [
            "Torch bridge: forward+backward through pyrnn_cl.torch (CPU tensors in and out) "
            "against the same cuDNN-dialect calls on device arrays; ratio = device-array time / "
            "bridge time (1.00: no overhead):",
            "",
            "| config | device arrays f+b ms med | bridge f+b ms med (min) | ratio med (min) |",
            "|" + "---|" * 4,
        ]
        for e in result["configs"]:
            if e.get("bridge"):
                b = e["bridge"]["fwd_bwd"]
                lines.append(
                    f"| {e['config']['name']} | {e['ours']['fwd_bwd']['median_ms']:.2f} | "
                    f"{b['median_ms']:.2f} ({b['min_ms']:.2f}) | "
                    f"{_ratio(e, 'ratio_bridge_fwd_bwd')} |")
        lines += ["", "Geometric mean bridge ratio: "
                  f"{_f(sm.get('geomean_ratio_bridge_fwd_bwd'), '{:.2f}')}.", ""]
    lines += [
        "Device memory per call, MiB (estimate from the engine's buffers):",
        "",
        "| config | dialect | inputs | reserve (saved for backward) | fwd workspace | "
        "bwd workspace (not growing with T) | bwd temporaries growing with T | "
        "gradient outputs | max abs diff vs torch (fwd y) | note |",
        "|" + "---|" * 10,
    ]
    for e in result["configs"]:
        mb = e["memory_bytes"]
        lines.append(
            f"| {e['config']['name']} | {e.get('dialect', '-')} | {_mib(mb['inputs'])} | "
            f"{_mib(mb['reserve'])} | {_mib(mb['fwd_workspace'])} | {_mib(mb['bwd_workspace'])} "
            f"| {_mib(mb.get('bwd_sequence', 0))} | {_mib(mb.get('grad_outputs', 0))} "
            f"| {_f(e['max_abs_diff_vs_torch'], '{:.1e}')} | {e['note'] or ''} |")
    return "\n".join(lines)


def write_png(result: dict, path: str) -> None:
    """Bar chart of the ratios (torch time / ours) per configuration (matplotlib, Agg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = [e for e in result["configs"] if e.get("ratio_fwd")]
    names = [e["config"]["name"] for e in entries]
    xs = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(names) + 2), 4.5))
    ax.bar(xs - 0.2, [e["ratio_fwd"] for e in entries], 0.4, label="forward")
    ax.bar(xs + 0.2, [e["ratio_fwd_bwd"] for e in entries], 0.4, label="forward+backward")
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xticks(xs)
    ax.set_xticklabels(names, rotation=35, ha="right")
    ax.set_ylabel("PyTorch time / pyrnn_cl time")
    m = result["machine"]
    ax.set_title(f"pyrnn_cl vs torch {m['torch']}, {m['threads']} threads, {m['device']}",
                 fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

# }}}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pyrnn-cl bench",
        description="Time LSTM/GRU/RNN forward and forward+backward on an OpenCL device against "
                    "PyTorch (same run, same thread count).")
    p.add_argument("--configs", metavar="NAMES", action="append",
                   help="comma-separated configuration names (repeatable); default: all. "
                        "Known: " + ", ".join(c.name for c in CONFIGS))
    p.add_argument("--tier", choices=("cpu", "gpu"), default="cpu",
                   help="configuration set when --configs is not given: the CPU tier (default) "
                        "or the GPU tier of performance.md §6.3 (" + str(len(GPU_CONFIGS))
                        + " DeepBench-style shapes)")
    p.add_argument("--torch-device", default="cpu", metavar="DEV",
                   help="where PyTorch runs: cpu (default) or cuda (cuDNN, same GPU)")
    p.add_argument("--quick", action="store_true",
                   help="only a few small configurations (" + ", ".join(QUICK) + ")")
    p.add_argument("--list", action="store_true", help="list the configurations and exit")
    p.add_argument("--device", metavar="SPEC", help="device spec (as PYRNN_CL_DEVICE)")
    p.add_argument("--json", metavar="PATH", help="write the full results as JSON")
    p.add_argument("--png", metavar="PATH", help="write a bar chart of the ratios (matplotlib)")
    p.add_argument("--repeat", type=int, default=5, metavar="N",
                   help="timed repetitions per measurement (default 5; median and min reported)")
    p.add_argument("--block", type=int, default=3, metavar="B",
                   help="timed calls per turn: each side runs two untimed calls, then B timed "
                        "calls back to back, turns alternating (default 3); 0: single calls "
                        "round-robin")
    p.add_argument("--threads", type=int, metavar="N",
                   help="threads for PoCL (POCL_MAX_PTHREAD_COUNT), NumPy's BLAS and torch "
                        "(default: the device's compute units)")
    p.add_argument("--no-pin", action="store_true",
                   help="leave PoCL's worker threads unpinned (default: POCL_AFFINITY=1, one "
                        "worker per CPU, when the process may run on CPUs 0..N-1 and "
                        "POCL_AFFINITY is not set already)")
    p.add_argument("--host-inputs", action="store_true",
                   help="pass our ops NumPy arrays (a user's first call: transfers timed) "
                        "instead of arrays already on the device")
    p.add_argument("--bridge", action="store_true",
                   help="also time forward+backward through pyrnn_cl.torch against the same "
                        "cuDNN-dialect calls on device arrays (the bridge's overhead); our side "
                        "then uses the cuDNN dialect for every configuration")
    p.add_argument("--dtype", default="float32",
                   help="storage dtype of our ops' arrays: float32 (default), float16, or "
                        "bfloat16 where ml_dtypes is installed (PyTorch runs float32)")
    p.add_argument("--no-torch", action="store_true", help="do not time PyTorch")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _importable(module: str) -> bool:
    """True when ``module`` (an optional package) imports."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """``pyrnn-cl bench [options]``; returns the exit status (0 ok, 1 a configuration failed,
    2 bad arguments)."""
    parser = _parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.list:
        for c in CONFIGS + GPU_CONFIGS:
            print(f"{c.name:16s} {c.cell:8s} H={c.H:<5d} I={c.I:<5d} N={c.N:<3d} T={c.T:<4d} "
                  f"{c.layers}x{c.directions}  {c.why}")
        return 0
    if args.png and not _importable("matplotlib"):
        parser.error('--png needs matplotlib, which is not installed: '
                     'pip install "pyrnn_cl[examples]"')
    if not args.no_torch and not _importable("torch"):
        print('note: PyTorch is not installed, so there is no torch column to compare with '
              '(pip install "pyrnn_cl[torch]"; --no-torch silences this)', file=sys.stderr)
    if args.repeat < 1:
        parser.error(f"--repeat: got {args.repeat}, expected >= 1")
    if args.block < 0:
        parser.error(f"--block: got {args.block}, expected >= 0")
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads: got {args.threads}, expected >= 1")
        # read by PoCL when the platform is first opened (PoCL >= 4 also reads the new name)
        os.environ["POCL_MAX_PTHREAD_COUNT"] = str(args.threads)
        os.environ["POCL_CPU_MAX_CU_COUNT"] = str(args.threads)
    if not args.no_pin:
        pin_pocl_workers(args.threads)
    names = None
    if args.configs:
        names = [n.strip() for group in args.configs for n in group.split(",") if n.strip()]
    elif args.quick:
        names = list(QUICK)
    try:
        default = GPU_CONFIGS if args.tier == "gpu" else CONFIGS
        configs = _resolve_configs(names) if names else list(default)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        _storage_dtype(args.dtype)
    except TypeError as exc:
        parser.error(f"--dtype: {exc}")
    if args.repeat < 5:
        print(f"note: --repeat {args.repeat} is below the 5 repetitions the methodology asks "
              "for", file=sys.stderr)
    result = run_bench(configs, device=args.device, repeat=args.repeat, threads=args.threads,
                       compare_torch=not args.no_torch, progress=not args.no_progress,
                       block=args.block, torch_device=args.torch_device,
                       host_inputs=args.host_inputs, dtype=args.dtype, bridge=args.bridge)
    print(format_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.png:
        write_png(result, args.png)
    return 1 if result["summary"]["errors"] else 0
