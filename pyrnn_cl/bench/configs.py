"""The benchmark networks: :class:`BenchConfig` (sizes and FLOP counts), the CPU and GPU tiers
(:data:`CONFIGS`, :data:`GPU_CONFIGS`, :data:`QUICK`), name resolution (names, or a shape
:data:`SHAPE_SPEC`), and the storage dtypes a run accepts (``--dtype``)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import numpy as np

from ..cells import gates

#: The cells the benchmark runs, as cuDNN modes (the vanilla RNN is ReLU's, as DeepBench's).
_CELLS = ("lstm", "gru", "rnn_relu")


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
        return gates(self.cell)

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


def _tiers() -> tuple[tuple[BenchConfig, ...], tuple[BenchConfig, ...]]:
    """``(CONFIGS, GPU_CONFIGS)`` as :mod:`pyrnn_cl.bench` exports them now: a caller (or a
    test) that replaces ``pyrnn_cl.bench.CONFIGS`` changes what names resolve to and what a run
    without configurations times, as it did when bench was one module."""
    package = sys.modules.get(__package__)
    return (getattr(package, "CONFIGS", CONFIGS), getattr(package, "GPU_CONFIGS", GPU_CONFIGS))


#: An ad-hoc configuration by shape: ``CELL:HxIxNxT``, one unidirectional layer (e.g.
#: ``lstm:256x256x32x50``).
SHAPE_SPEC = "CELL:HxIxNxT"
_SHAPE = re.compile(r"([a-z_]+):(\d+)x(\d+)x(\d+)x(\d+)")


def _shape_config(spec: str) -> BenchConfig | None:
    """The one-layer :class:`BenchConfig` of a :data:`SHAPE_SPEC` string, or ``None``."""
    m = _SHAPE.fullmatch(spec)
    if m is None or m.group(1) not in _CELLS:
        return None
    H, I, N, T = (int(v) for v in m.groups()[1:])
    if min(H, I, N, T) < 1:
        return None
    return BenchConfig(spec, m.group(1), H, I, N, T, why="shape given on the command line")


def _shape_help() -> str:
    """How :data:`SHAPE_SPEC` reads, for messages and ``--help``."""
    return f"a shape {SHAPE_SPEC} (one layer; CELL: {', '.join(_CELLS)})"


def _resolve_configs(configs) -> list[BenchConfig]:
    cpu, gpu = _tiers()
    by_name = {c.name: c for c in cpu + gpu}
    out = []
    for c in configs:
        if isinstance(c, BenchConfig):
            out.append(c)
        elif c in by_name:
            out.append(by_name[c])
        elif (shaped := _shape_config(c)) is not None:
            out.append(shaped)
        else:
            raise ValueError(f"configs: unknown configuration {c!r}; known: "
                             f"{', '.join(by_name)}; or {_shape_help()}")
    return out


def _storage_dtype(name) -> np.dtype:
    """The NumPy dtype of a ``--dtype`` name (``TypeError`` listing the accepted ones)."""
    from ..sources import STORAGE_DTYPES, storage_names

    for dt in STORAGE_DTYPES:
        if str(dt) == str(name) or dt == name:
            return dt
    raise TypeError(f"got {name!r}, expected {storage_names()}")
