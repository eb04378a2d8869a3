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
  take turns (:func:`_timed_blocks`): untimed calls (at least two, for at least 20 ms: the
  other side's threads settle), then ``block`` (default 3) timed calls back to back, as a
  training loop calls an op; alternating turns keep a drifting background load on both sides.

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

The package, one job per module (imports run one way: ``cli`` and ``report`` -> ``run`` ->
``sides``, ``timing``, ``memory``, ``machine``, ``weights`` -> ``configs``):

* :mod:`.configs`: the networks (:class:`BenchConfig`, the CPU and GPU tiers, ``--quick``),
  name resolution, the FLOP convention and the storage dtypes;
* :mod:`.machine`: the machine and its threads (CPU model and ISA, NumPy SGEMM, BLAS threads,
  pinning PoCL's workers, Intel's CPU runtime);
* :mod:`.weights`: the weights both sides share, in PyTorch's layout and MPSGraph's;
* :mod:`.sides`: the two sides (ours in the MPSGraph or cuDNN dialect; torch.nn and the
  ``pyrnn_cl.torch`` bridge);
* :mod:`.memory`: the device-memory model (:func:`memory_estimate`);
* :mod:`.timing`: turns of timed calls, statistics, rates, the progress bar;
* :mod:`.run`: one run over the configurations (:func:`run_bench`);
* :mod:`.report`: the Markdown table and the PNG chart;
* :mod:`.cli`: ``pyrnn-cl bench``'s options and :func:`main`.

This module only re-exports what callers use.
"""

# what callers use today (pyrnn_cl.cli, pyrnn_cl.tuner, tools/, tests/): the public names of
# __all__, and private ones re-exported for them
from .cli import _parser, main  # noqa: F401
from .configs import (  # noqa: F401
    CONFIGS,
    FLOP_CONVENTION,
    GPU_CONFIGS,
    QUICK,
    BenchConfig,
    _resolve_configs,
    _storage_dtype,
)
from .machine import (  # noqa: F401
    _cpu_isa,
    _cpu_model,
    intel_runtime_report,
    pin_pocl_workers,
    sgemm_gflops,
)
from .memory import memory_estimate
from .report import format_table, write_png  # noqa: F401
from .run import run_bench
from .sides import _Bridge, _Ours, _Torch  # noqa: F401
from .timing import (  # noqa: F401
    TIMING_NOTE,
    TURN_SETTLE_S,
    TURN_WARMUP,
    _Progress,
    _timed_blocks,
)
from .weights import _make_weights, _mps_layer_arrays  # noqa: F401

__all__ = ["BenchConfig", "CONFIGS", "QUICK", "run_bench", "main", "format_table",
           "memory_estimate", "sgemm_gflops", "pin_pocl_workers"]
