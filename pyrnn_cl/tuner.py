"""``pyrnn-cl tune``: search each kernel family's parameters on the device, keep what is faster
and correct, and store it in the tuning database (:mod:`pyrnn_cl.tuning`).

How a family is tuned (``gemm``, ``reduce``, ``recurrence``; ``gemm_f64`` on request):

* **Workloads** come from the benchmark's configurations (``--configs``, default
  :data:`DEFAULT_CONFIGS`): for ``gemm`` the three products a layer runs (the input projection
  ``x W^T``, the input gradient ``dG W`` and the weight gradient ``dG^T x``), for ``reduce`` the
  bias gradient's row sums, for ``recurrence`` the whole layer forward and forward + backward.
  Parameters that only 16-bit calls read (:data:`SIXTEEN_BIT_PARAMS`: which recurrent weights
  are streamed as stored) are searched last, on the same layers in float16.
* **Correctness first.** Before a candidate is timed, its results are compared with a
  reference: GEMM and sums with NumPy in float64; a recurrence's forward output with the float64
  NumPy reference of :mod:`pyrnn_cl._selftest_ref`, and its gradients with those computed under
  the derived defaults (the configuration the test-suite checks against independent oracles).
  A candidate that differs is rejected, however fast; one that fails to build or launch is
  skipped.
* **Search.** Coordinate descent from the current values: one parameter at a time over its
  :data:`pyrnn_cl.tuning.SPACE` choices that suit the device (vector widths up to the native
  width on CPUs, work-groups within the device's limits), in :func:`search_order` (the
  whole-sequence thresholds first; parameters only float64 calls read are not searched on
  float32 workloads), adopting a value when the geometric mean of the workloads' times
  improves on the current best by more than :data:`MIN_GAIN` and no workload is slower than
  with the starting values by more than :data:`MAX_LOSS` (timed again before it counts as
  slower); passes repeat until nothing changes or the family's share of the budget is spent.
  A candidate is timed beside the current best (:func:`_evaluate_pair`: per workload, rounds
  that run both back to back, alternating which goes first), each the best of ``repeat`` runs:
  a shared machine only ever adds time, and both sides see the same load.
* **Confirmation.** The winner and the starting values are timed side by side again, and the
  winner is kept only if it is still faster, on average and within :data:`MAX_LOSS` on every
  workload.

:func:`autotune` is the short first-use tune of ``PYRNN_CL_AUTOTUNE=1``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import tuning
from .errors import TuningWarning

__all__ = ["tune", "autotune", "main", "DEFAULT_CONFIGS", "GPU_CONFIGS", "DEFAULT_BUDGET",
           "AUTOTUNE_BUDGET", "default_configs"]

DEFAULT_BUDGET = 300.0
AUTOTUNE_BUDGET = 60.0
#: the benchmark configurations tuned on by default: latency-bound (R within REC_SEQ_BYTES),
#: a mid-size LSTM (R of 1 MiB: where the whole-sequence limits decide), small-batch LSTM, GRU,
#: and a large LSTM (H = 1024), so that a value that helps small layers and hurts large ones is
#: not adopted (an entry holds one value per device for every shape)
DEFAULT_CONFIGS = ("tiny-latency", "db-charlm", "db-mt-512x16", "gru-512x16", "db-mt-1024x32")
#: ... on a GPU: shapes of the GPU tier from latency-bound (one step, batch 1) to H = 1024, N = 32
GPU_CONFIGS = ("gpu-lstm-512x16", "gpu-lstm-1024x32", "gpu-gru-512x32", "gpu-inf-1024x1")
AUTOTUNE_CONFIGS = ("tiny-latency", "gru-512x16")
#: parameters only 16-bit calls read: searched after the rest of their family, with its
#: workloads in float16 (the float32 ones would time the same work for every value)
SIXTEEN_BIT_PARAMS = {"recurrence": ("REC_PACK16_BYTES",)}
#: parameters only float64 calls read: not searched on the float32 workloads (every value would
#: time the same work; four candidates of the recurrence's budget went to REC_VW_F64 alone)
FLOAT64_PARAMS = {"recurrence": ("REC_VW_F64",)}
#: searched first in their family: whether a layer runs whole-sequence kernels or a launch per
#: step decides more than any tile size, and a budget spent on the tiles never reached them (an
#: Intel Xeon with a 300 MiB L3 whose cores stream it slowly: LSTM 512/16 forward 24 ms with
#: whole-sequence kernels for its 4 MiB R, 12 ms per step; docs/benchmarks.md)
SEARCH_FIRST = {"recurrence": ("REC_SEQ_MAX_BYTES", "REC_SEQ_STREAM_BYTES", "REC_SEQ_BYTES",
                                "REC_SEQ_SPLIT_BYTES")}
#: share of a family's budget spent on its 16-bit pass
SIXTEEN_BIT_SHARE = 0.2
DEFAULT_FAMILIES = ("gemm", "reduce", "recurrence")
#: share of the budget per family (what one family leaves unused goes to the next)
BUDGET_SHARE = {"gemm": 0.35, "gemm_f64": 0.2, "reduce": 0.05, "recurrence": 0.6}
#: a candidate must be this much faster (geometric mean of the workloads) to be adopted
MIN_GAIN = 0.03
#: ... and no single workload may be slower than with the starting values by more than this:
#: an entry holds one value per device for every shape, so a value that wins on average while
#: one shape loses (on the H100, REC_VW=2: GRUs 10-20 % faster, LSTM H >= 1024 steps 1.5-1.9x
#: slower, docs/benchmarks.md) would be a regression for that shape's users
MAX_LOSS = 0.10


class CandidateError(Exception):
    """A candidate gave wrong results."""


class CandidateFailed(RuntimeError):
    """A candidate failed to build or to launch (any exception while it ran, wrapped: the
    search goes on without it)."""


# {{{ workloads


@dataclass
class Workload:
    """One timed piece of work of a family: ``run()`` enqueues it and waits; ``check()`` raises
    :class:`CandidateError` when the results differ from the reference."""

    name: str
    run: Callable[[], object]
    check: Callable[[], object]


def _rel_err(out, ref) -> float:
    ref = np.asarray(ref, np.float64)
    scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
    return float(np.max(np.abs(np.asarray(out, np.float64) - ref))) / scale if ref.size else 0.0


def _gemm_workloads(device, configs, dtype):
    """The three products of each configuration's first layer (shapes of the engine's calls)."""
    import pyopencl.array as cla

    from ._arrays import fill
    from .gemm import gemm

    queue = device.queue
    rng = np.random.default_rng(1)
    out, seen = [], set()
    for cfg in configs:
        GH, rows, I = cfg.G * cfg.H, cfg.T * cfg.N, cfg.I
        # (name, m, n, k, trans_a, trans_b): C[m, n] = op(A) op(B)
        for name, m, n, k, ta, tb in (
            ("x W^T", rows, GH, I, False, True),
            ("dG W", rows, I, GH, False, False),
            ("dG^T x", GH, I, rows, True, False),
        ):
            if (m, n, k, ta, tb) in seen:
                continue
            seen.add((m, n, k, ta, tb))
            a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
            b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
            ref = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
            da, db = cla.to_device(queue, a), cla.to_device(queue, b)
            dc = cla.empty(queue, (m, n), dtype)
            tol = 1e-5 * math.sqrt(k) * (1 if dtype == np.float32 else 1e-8)

            def run(m=m, n=n, k=k, ta=ta, tb=tb, da=da, db=db, dc=dc):
                gemm(device, dtype, m, n, k, da, db, dc, trans_a=ta, trans_b=tb)
                queue.finish()

            def check(run=run, dc=dc, ref=ref, tol=tol, name=name):
                fill(dc, np.nan)
                run()
                err = _rel_err(dc.get(), ref)
                if not err <= tol:
                    raise CandidateError(f"{name}: error {err:.2e} > {tol:.1e}")

            out.append(Workload(f"{cfg.name} {name} [{m}x{n}x{k}]", run, check))
    return out


def _reduce_workloads(device, configs):
    import pyopencl.array as cla

    from ._arrays import fill
    from .gemm import sum_rows

    queue = device.queue
    rng = np.random.default_rng(2)
    out, seen = [], set()
    for cfg in configs:
        rows, cols = cfg.T * cfg.N, cfg.G * cfg.H
        if (rows, cols) in seen:
            continue
        seen.add((rows, cols))
        a = rng.standard_normal((rows, cols)).astype(np.float32)
        ref = a.astype(np.float64).sum(axis=0)
        da, dout = cla.to_device(queue, a), cla.empty(queue, (cols,), np.float32)

        def run(rows=rows, cols=cols, da=da, dout=dout):
            sum_rows(device, np.float32, rows, cols, da, dout)
            queue.finish()

        def check(run=run, dout=dout, ref=ref, rows=rows):
            fill(dout, np.nan)
            run()
            err = _rel_err(dout.get(), ref)
            if not err <= 1e-6 * rows:
                raise CandidateError(f"row sums: error {err:.2e}")

        out.append(Workload(f"{cfg.name} sum [{rows}x{cols}]", run, check))
    return out


def _reference_forward(cfg, weights, x):
    """The float64 NumPy forward of a benchmark network (MPSGraph layers, stacked)."""
    from . import _selftest_ref as ref
    from .bench import _mps_layer_arrays

    src = x.astype(np.float64)
    bi = cfg.directions == 2
    for layer in range(cfg.layers):
        R, W, b, b2 = (None if v is None else v.astype(np.float64)
                       for v in _mps_layer_arrays(cfg, weights, layer))
        if cfg.cell == "lstm":
            src = ref.mps_lstm(src, R, W, b, bidirectional=bi)[0]
        elif cfg.cell == "gru":
            src = ref.mps_gru(src, R, W, b, secondary_bias=b2, reset_gate_first=True,
                              reset_after=True, flip_z=True, bidirectional=bi)
        else:
            src = ref.mps_rnn(src, R, W, b, activation="relu", bidirectional=bi)
    return src


def _recurrence_workloads(device, configs, derived_values, dtype="float32"):
    """Forward and forward + backward of each configuration (bench's device-array runner), its
    arrays stored in ``dtype`` (float32, or float16 for :data:`SIXTEEN_BIT_PARAMS`; the
    forward is then held against the float64 reference of the float32 inputs within 1e-2,
    what half storage allows, and the gradients against the derived values' within 1e-2: one
    rounding of a 16-bit result may differ with the order of a sum)."""
    from .bench import _make_weights, _Ours

    rng = np.random.default_rng(3)
    tol = 1e-4 if np.dtype(dtype) == np.float32 else 1e-2
    out = []
    for cfg in configs:
        weights = _make_weights(cfg)
        x = rng.uniform(-1, 1, (cfg.T, cfg.N, cfg.I)).astype(np.float32)
        dy = rng.uniform(-1, 1, (cfg.T, cfg.N, cfg.directions * cfg.H)).astype(np.float32)
        ours = _Ours(cfg, weights, x, dy, device, use_cudnn=False, dtype=dtype)
        y_ref = _reference_forward(cfg, weights, x)

        def gradients(ours=ours):
            return [np.concatenate([a.get().ravel() for a in grads if a is not None])
                    for grads in ours._mps_fwd_bwd()]

        with tuning.trial(device, "recurrence", derived_values):
            g_ref = gradients()

        def check_forward(ours=ours, y_ref=y_ref, name=cfg.name):
            err = _rel_err(ours.forward_output(), y_ref)
            if not err <= tol:
                raise CandidateError(f"{name} forward: error {err:.2e} against float64")

        def check_backward(gradients=gradients, g_ref=g_ref, name=cfg.name):
            for got, want in zip(gradients(), g_ref):
                err = _rel_err(got, want)
                if not err <= tol:
                    raise CandidateError(f"{name} gradients: error {err:.2e}")

        label = cfg.name if np.dtype(dtype) == np.float32 else f"{cfg.name} {dtype}"
        out.append(Workload(f"{label} forward", ours.run_forward, check_forward))
        out.append(Workload(f"{label} fwd+bwd", ours.run_fwd_bwd, check_backward))
    return out


def workloads(device, family, configs, dtype="float32"):
    """The workloads of ``family`` for benchmark ``configs`` on ``device`` (``dtype``: the
    storage of the recurrence's layers, float16 for its 16-bit pass)."""
    if family in ("gemm", "gemm_f64"):
        return _gemm_workloads(device, configs,
                               np.float32 if family == "gemm" else np.float64)
    if family == "reduce":
        return _reduce_workloads(device, configs)
    if family == "recurrence":
        return _recurrence_workloads(device, configs,
                                     tuning.derive(device.info, device.profile)["recurrence"],
                                     dtype)
    raise ValueError(f"families: unknown kernel family {family!r}; known: "
                     f"{', '.join(tuning.FAMILIES)}")

# }}}

# {{{ candidates


def _cpu_like(device) -> bool:
    return tuning.cpu_like(device.info, device.profile)


def choices(device, family: str, name: str, current: dict) -> list[int]:
    """The values of ``name`` worth trying on ``device`` with the other values ``current``."""
    info = device.info
    param = {p.name: p for p in tuning.SPACE[family]}[name]
    values = set(param.choices) | {current[name]}
    if param.choices == tuning.VECTOR_WIDTHS or name == "GEMM_PACK_KC":
        if _cpu_like(device):
            # wider than the native vector: no gain, and the compiler warns on stderr
            native = tuning.derive(info, device.profile)["gemm"]["GEMM_VW"]
            if name.endswith("F64") or family == "gemm_f64":
                native = tuning.derive(info, device.profile)["gemm_f64"]["GEMM_VW"]
            values = {v for v in values if v <= max(4, native)}
    if name == "GEMM_TN":
        vw = current["GEMM_VW"]
        values = {vw * f for f in (1, 2, 4, 8)} | {current[name]}
    if name.endswith("_WG") or name == "REC_WG":
        values = {v for v in values if v <= tuning.clamp_work_group(info, v)}
    if name == "REC_KS":
        # a work-group per tile with barriers between lanes: for devices that run lock-step
        # lanes (GPUs); a CPU work-item already streams its slab with whole vectors
        values = ({1} if _cpu_like(device) else
                  {v for v in values if v <= tuning.clamp_work_group(info, v)}) | {current[name]}
    if name == "REC_TILE_MAX" and _cpu_like(device):
        # a CPU work-item's tile is G x NB vectors whatever their width: a limit would only
        # narrow the vectors
        values = {current[name]}
    if name == "REC_ACC_MAX" and not _cpu_like(device):
        # a GPU's tile is bounded by REC_TILE_MAX (units x gates x rows of scalar lanes)
        values = {current[name]}
    if name == "REC_WG" and device.profile.specialises_per_local_size:
        values &= {0, 1, current[name]}
    if name == "GEMM_LOCAL" and _cpu_like(device):
        # the tiled kernel is for lock-step work-groups with fast local memory; on a CPU it
        # runs (tests force it) but the register-tile kernels are the fast ones
        values = {current[name]}
    if name in tuning.GEMM_LOCAL_KEYS:
        if not current.get("GEMM_LOCAL"):
            values = {current[name]}        # the tile of a kernel that does not run
        else:
            itemsize = 8 if family == "gemm_f64" else 4
            values = {v for v in values
                      if tuning.gemm_local_fits(info, dict(current, **{name: v}), itemsize)
                      } | {current[name]}
    return sorted(v for v in values if param.low <= v <= param.high)


def _tied(candidate: dict, name: str, best: dict) -> dict:
    """``candidate`` (``best`` with ``name`` changed) with the parameters that only act
    together with ``name`` moved along, so that one coordinate step can reach what needs both:

    * ``GEMM_VW``: ``GEMM_TN`` keeps the tile's vector count;
    * ``REC_SEQ_MAX_BYTES`` and ``REC_SEQ_STREAM_BYTES`` gate the same whole-sequence rule
      (``plan._whole_sequence_fits``: R up to the first while groups x R stays within the
      second), so raising one alone changes nothing while the other blocks: raising the size
      limit raises the stream limit to 8x it at least, and raising the stream limit raises the
      size limit to 1/8 of it at least (8x: the pair measured with PoCL on a Zen 4, 4 and 32 MiB).
    """
    if name == "GEMM_VW":
        candidate["GEMM_TN"] = candidate["GEMM_VW"] * max(1, best["GEMM_TN"] // best["GEMM_VW"])
    elif name == "REC_SEQ_MAX_BYTES" and candidate[name] > best[name]:
        candidate["REC_SEQ_STREAM_BYTES"] = max(best["REC_SEQ_STREAM_BYTES"], 8 * candidate[name])
    elif name == "REC_SEQ_STREAM_BYTES" and candidate[name] > best[name]:
        candidate["REC_SEQ_MAX_BYTES"] = max(best["REC_SEQ_MAX_BYTES"], candidate[name] // 8)
    return candidate


def _valid(family, values) -> bool:
    try:
        tuning.valid_values(family, values)
    except ValueError:
        return False
    if "GEMM_TN" in values and values["GEMM_TN"] // values["GEMM_VW"] > 16:
        return False       # more vectors than registers on any device
    if "GEMM_TM" in values and values["GEMM_TM"] * values["GEMM_TN"] > 512:
        return False
    if "GEMM_LTM" in values and values["GEMM_LTM"] * values["GEMM_LTN"] > 64:
        return False       # tiled kernel: more accumulators than a GPU's registers hold
    return True

# }}}

# {{{ timing


def _time(work: list[Workload], repeat: int, deadline: float | None = None) -> list[float]:
    """Best-of-``repeat`` seconds of each workload (after one warm-up run)."""
    out = []
    for w in work:
        w.run()
        best = math.inf
        for _ in range(repeat):
            t0 = time.perf_counter()
            w.run()
            best = min(best, time.perf_counter() - t0)
            if deadline is not None and time.monotonic() > deadline:
                break
        out.append(best)
    return out


def _score(times, base) -> float:
    """Geometric mean of ``times / base`` (1.0 = as fast as the starting values)."""
    return math.exp(sum(math.log(t / b) for t, b in zip(times, base)) / len(times))


def _losing(times, base) -> list[int]:
    """The workloads whose time is more than :data:`MAX_LOSS` above their time in ``base``."""
    return [i for i, (t, b) in enumerate(zip(times, base)) if t > b * (1 + MAX_LOSS)]


def _recheck_losses(device, family, start, candidate, work, repeat, times, base) -> bool:
    """Whether no workload loses (:func:`_losing`) after a second look: the workloads that seem
    to lose are timed again under ``start`` and ``candidate`` side by side
    (:func:`_evaluate_pair`, twice), and the best of all their times counts (a millisecond
    workload on a shared machine can read 1.5x slow once; a real loss stays). Updates
    ``times`` and ``base`` in place."""
    losing = _losing(times, base)
    if not losing:
        return True
    sub = [work[i] for i in losing]
    for _ in range(2):
        t_start, t_cand = _evaluate_pair(device, family, start, candidate, sub, repeat, None)
        for i, ts, tc in zip(losing, t_start, t_cand):
            base[i] = min(base[i], ts)
            times[i] = min(times[i], tc)
    return not _losing(times, base)


@dataclass
class FamilyResult:
    family: str
    start: dict
    best: dict
    speedup: float = 1.0          # starting time / best time (geometric mean), confirmed
    tried: int = 0
    rejected: list = field(default_factory=list)   # (values, why): wrong results
    failed: list = field(default_factory=list)     # (values, why): build or launch failures
    seconds: float = 0.0
    #: the 16-bit pass (:data:`SIXTEEN_BIT_PARAMS`), confirmed speedup on the float16
    #: workloads; None where the family has none or it did not run
    speedup16: float | None = None

    def add_pass(self, other: FamilyResult) -> None:
        """Take the result of a further pass over some of the parameters (started from this
        one's best): its best values, counts and time; its speedup as :attr:`speedup16`."""
        self.best = dict(other.best)
        self.tried += other.tried
        self.rejected += other.rejected
        self.failed += other.failed
        self.seconds += other.seconds
        self.speedup16 = other.speedup

    @property
    def changed(self) -> dict:
        return {k: v for k, v in self.best.items() if self.start.get(k) != v}


class _Bar:
    """A progress bar over the budget's seconds: tqdm when importable, else stderr lines."""

    def __init__(self, budget: float, enabled: bool):
        self.bar, self.enabled, self.budget, self.t0 = None, enabled, budget, time.monotonic()
        self._last_line = 0.0
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=int(budget), unit="s", file=sys.stderr, leave=False,
                                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total} s")
            except ImportError:
                pass

    def update(self, text: str):
        if not self.enabled:
            return
        elapsed = min(self.budget, time.monotonic() - self.t0)
        if self.bar is not None:
            self.bar.set_description_str(text, refresh=False)
            self.bar.n = int(elapsed)
            self.bar.refresh()
        elif time.monotonic() - self._last_line >= 5 or not self._last_line:
            self._last_line = time.monotonic()
            print(f"[tune {100 * elapsed / self.budget:3.0f}%] {text}", file=sys.stderr,
                  flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _evaluate(device, family, values, work, repeat, deadline):
    """Times of ``work`` under ``values``, after checking every result."""
    def checked_times():
        _check(work)
        return _time(work, repeat, deadline)

    return _under(device, family, values, checked_times)


def _check(work) -> None:
    """Every workload's result checked (:class:`CandidateError` when one is wrong)."""
    for w in work:
        w.check()


def _under(device, family, values, fn):
    """``fn()`` with ``values`` on trial: a wrong result raises :class:`CandidateError`, any
    build or launch failure :class:`CandidateFailed`."""
    with tuning.trial(device, family, values):
        try:
            return fn()
        except CandidateError:
            raise
        except Exception as exc:   # noqa: BLE001 - any build/launch failure skips the candidate
            raise CandidateFailed(f"{type(exc).__name__}: {exc}") from exc
        finally:
            device.queue.finish()


def _run_under(device, family, values, w: Workload) -> float:
    """Seconds of one run of ``w`` under ``values`` (:func:`_under`)."""
    def timed():
        t0 = time.perf_counter()
        w.run()
        return time.perf_counter() - t0

    return _under(device, family, values, timed)


def _evaluate_pair(device, family, reference, candidate, work, repeat, deadline):
    """``(reference times, candidate times)`` of ``work``: the candidate's results checked
    first, then per workload one warm-up run of each and ``repeat`` rounds that run both back
    to back, alternating which goes first; best of each. Timed side by side, both see the same
    load: on a shared host whose speed drifts by 2x within minutes, a reference timed once at
    the start of a search makes later candidates look slower or faster than they are."""
    _under(device, family, candidate, lambda: _check(work))
    ref_times, cand_times = [], []
    sides = ((0, reference), (1, candidate))
    for w in work:
        best = [math.inf, math.inf]             # reference, candidate
        for _, values in sides:
            _run_under(device, family, values, w)
        for r in range(repeat):
            for k, values in sides[::-1] if r % 2 else sides:
                best[k] = min(best[k], _run_under(device, family, values, w))
            if deadline is not None and time.monotonic() > deadline:
                break
        ref_times.append(best[0])
        cand_times.append(best[1])
    return ref_times, cand_times


def search_order(family: str) -> list[str]:
    """The parameters of ``family`` that its float32 workloads search, in the order searched:
    :data:`SEARCH_FIRST`, then the rest as :data:`pyrnn_cl.tuning.SPACE` lists them, without
    :data:`SIXTEEN_BIT_PARAMS` (a pass of their own) and :data:`FLOAT64_PARAMS`."""
    skip = set(SIXTEEN_BIT_PARAMS.get(family, ())) | set(FLOAT64_PARAMS.get(family, ()))
    names = [p.name for p in tuning.SPACE[family] if p.name not in skip]
    first = [n for n in SEARCH_FIRST.get(family, ()) if n in names]
    return first + [n for n in names if n not in first]


def tune_family(device, family, work, budget, *, repeat=3, bar=None, start=None,
                names=None) -> FamilyResult:
    """Coordinate descent over ``family``'s parameters (or only ``names``) within ``budget``
    seconds; a candidate is started only while its expected cost (that of the starting
    values) fits, and the confirmation's cost is kept aside from the start."""
    t0 = time.monotonic()
    start = dict(start if start is not None else device.tuning(family))
    result = FamilyResult(family, dict(start), dict(start))
    _evaluate(device, family, start, work, repeat, None)
    # a candidate, timed beside the current best, costs about twice this (plus builds)
    cost = 2 * (time.monotonic() - t0)
    deadline = t0 + budget - 2 * cost             # the confirmation: two paired evaluations
    # per workload, the best values' time over the starting values' (the paired ratios of the
    # values adopted so far): what turns a candidate's times beside the best into a loss check
    # against the start
    rel = [1.0] * len(work)
    order = list(names) if names else search_order(family)
    seen = {tuple(sorted(start.items()))}
    changed = True
    while changed and time.monotonic() + cost < deadline:
        changed = False
        for name in order:
            for value in choices(device, family, name, result.best):
                if value == result.best[name] or time.monotonic() + cost >= deadline:
                    continue
                candidate = _tied(dict(result.best, **{name: value}), name, result.best)
                key = tuple(sorted(candidate.items()))
                if key in seen or not _valid(family, candidate):
                    continue
                seen.add(key)
                result.tried += 1
                if bar is not None:
                    gain = 1 / _score(rel, [1.0] * len(rel))
                    bar.update(f"{family}: {name}={value} (best {gain:.2f}x)")
                try:
                    t_best, times = _evaluate_pair(device, family, result.best, candidate, work,
                                                   repeat, deadline)
                    # the starting values' times, as the ratios so far give them
                    base = [t / r for t, r in zip(t_best, rel)]
                    better = (_score(times, t_best) < 1 - MIN_GAIN
                              and _recheck_losses(device, family, start, candidate, work,
                                                  repeat, times, base))
                except CandidateError as exc:
                    result.rejected.append((candidate, str(exc)))
                    continue
                except CandidateFailed as exc:
                    result.failed.append((candidate, str(exc)))
                    continue
                if better:
                    rel = [t / b for t, b in zip(times, base)]
                    result.best, changed = candidate, True
    if result.best != start:
        # confirm: the two side by side again, the best of two paired evaluations
        pairs = [_evaluate_pair(device, family, start, result.best, work, repeat, None)
                 for _ in range(2)]
        s_start = [min(p[0][i] for p in pairs) for i in range(len(work))]
        s_best = [min(p[1][i] for p in pairs) for i in range(len(work))]
        gain = 1 / _score(s_best, s_start)
        if gain > 1 + MIN_GAIN / 2 and _recheck_losses(device, family, start, result.best,
                                                       work, repeat, s_best, s_start):
            result.speedup = gain
        else:
            result.best, result.speedup = dict(start), 1.0
    result.seconds = time.monotonic() - t0
    return result


def default_configs(device) -> tuple[str, ...]:
    """The configurations tuned on when none are named: :data:`GPU_CONFIGS` on a GPU, else
    :data:`DEFAULT_CONFIGS`."""
    return GPU_CONFIGS if device.info.type == "gpu" else DEFAULT_CONFIGS


def tune(device=None, *, budget: float = DEFAULT_BUDGET, configs=None, families=None,
         repeat: int = 3, progress: bool = True, save: bool = True):
    """Tune ``families`` (default :data:`DEFAULT_FAMILIES`) of ``device`` on benchmark
    ``configs`` (names; default :func:`default_configs`) within about ``budget`` seconds, store
    the result in the user database when ``save``, and return ``(results, path)``."""
    from .bench import _resolve_configs
    from .devices import resolve_device

    device = resolve_device(device)
    cfgs = _resolve_configs(configs or default_configs(device))
    families = tuple(families or DEFAULT_FAMILIES)
    for family in families:
        if family not in tuning.SPACE:
            raise ValueError(f"families: unknown kernel family {family!r}; known: "
                             f"{', '.join(tuning.FAMILIES)}")
    if budget <= 0:
        raise ValueError(f"budget: expected a positive number of seconds, got {budget}")
    if "gemm_f64" in families and not device.info.has_fp64:
        families = tuple(f for f in families if f != "gemm_f64")
    bar = _Bar(budget, progress)
    t_end = time.monotonic() + budget
    results = []
    try:
        shares = [BUDGET_SHARE.get(f, 0.2) for f in families]
        for i, family in enumerate(families):
            left = t_end - time.monotonic()
            share = left * shares[i] / sum(shares[i:])
            bar.update(f"{family}: preparing workloads")
            # the previous families' winners apply while this one is tuned
            family_end = time.monotonic() + share
            work = workloads(device, family, cfgs)
            sixteen = SIXTEEN_BIT_PARAMS.get(family, ())
            main_share = share * (1 - SIXTEEN_BIT_SHARE) if sixteen else share
            results.append(tune_family(device, family, work, max(1.0, main_share),
                                       repeat=repeat, bar=bar))
            r = results[-1]
            if sixteen:     # then the 16-bit parameters, from the values just found
                bar.update(f"{family}: preparing float16 workloads")
                work16 = workloads(device, family, cfgs, dtype="float16")
                r.add_pass(tune_family(device, family, work16,
                                       max(1.0, family_end - time.monotonic()), repeat=repeat,
                                       bar=bar, start=r.best, names=sixteen))
            device._tuning_trial = dict(device._tuning_trial or {}, **{family: r.best})
    finally:
        device._tuning_trial = None
        bar.close()
    path = None
    if save:
        meta = {r.family: {"speedup": round(r.speedup, 3), "tried": r.tried,
                           **({} if r.speedup16 is None else
                              {"speedup_float16": round(r.speedup16, 3)}),
                           "rejected": len(r.rejected), "failed": len(r.failed),
                           "seconds": round(r.seconds, 1), "configs": [c.name for c in cfgs],
                           "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
                for r in results}
        path = tuning.save_entry(device.info, {r.family: r.best for r in results}, meta)
    return results, path


def autotune(device) -> None:
    """The first-use tune of ``PYRNN_CL_AUTOTUNE=1``: short, on small configurations; a failure
    gives a :class:`TuningWarning` and leaves the derived defaults."""
    print(f"pyrnn_cl: tuning {device.info.describe()} once (PYRNN_CL_AUTOTUNE=1, about "
          f"{AUTOTUNE_BUDGET:.0f} s; `pyrnn-cl tune` does a longer one)", file=sys.stderr,
          flush=True)
    try:
        tune(device, budget=AUTOTUNE_BUDGET, configs=AUTOTUNE_CONFIGS, progress=True)
    except Exception as exc:   # noqa: BLE001 - the user's call must go on with the defaults
        warnings.warn(f"pyrnn_cl: autotune of {device.info.describe()} failed ({exc}); using "
                      "the derived defaults", TuningWarning, stacklevel=3)

# }}}

# {{{ command line


def format_results(device, results, path) -> str:
    lines = [f"Tuned {device.info.describe()} (kernel version {tuning.kernel_version()})"]
    for r in results:
        half = "" if r.speedup16 is None else f" ({r.speedup16:.2f}x on float16 layers)"
        lines.append(f"  {r.family}: {r.speedup:.2f}x over the starting values{half}; "
                     f"{r.tried} candidates in {r.seconds:.0f} s ({len(r.rejected)} rejected as "
                     f"wrong, {len(r.failed)} failed to build or run)")
        if r.changed:
            lines.append("    " + ", ".join(f"{k}={v}" for k, v in sorted(r.changed.items())))
        for _values, why in r.rejected[:3]:
            lines.append(f"    rejected: {why}")
    if path is not None:
        lines.append(f"Saved to {path}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    from .bench import CONFIGS

    p = argparse.ArgumentParser(prog="pyrnn-cl tune", description=(
        "Search the kernels' tuning parameters on a device (every candidate checked against "
        "a reference before it is timed) and store the best in the tuning database."))
    p.add_argument("--device", default=None, help="device spec (default: the default device)")
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET,
                   help=f"seconds to spend in all (default {DEFAULT_BUDGET:.0f})")
    p.add_argument("--configs", default=None,
                   help="comma-separated benchmark configurations to tune on (default: "
                        + ", ".join(DEFAULT_CONFIGS) + "; on a GPU " + ", ".join(GPU_CONFIGS)
                        + "); known: " + ", ".join(c.name for c in CONFIGS))
    p.add_argument("--families", default=",".join(DEFAULT_FAMILIES),
                   help="kernel families to tune: " + ", ".join(tuning.FAMILIES))
    p.add_argument("--repeat", type=int, default=3, help="timed runs per workload (best kept)")
    p.add_argument("--no-save", action="store_true", help="print the result, store nothing")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv=None) -> int:
    from .devices import get_device

    args = _parser().parse_args(argv)
    device = get_device(args.device)
    split = [c.strip() for c in (args.configs or "").split(",") if c.strip()] or None
    fams = [f.strip() for f in args.families.split(",") if f.strip()]
    try:
        results, path = tune(device, budget=args.budget, configs=split, families=fams,
                             repeat=max(1, args.repeat), progress=not args.no_progress,
                             save=not args.no_save)
    except ValueError as exc:
        print(f"pyrnn-cl tune: {exc}", file=sys.stderr)
        return 2
    print(format_results(device, results, path))
    return 0

# }}}
