"""Timing: turns of timed calls (:func:`_timed_blocks`), their statistics and rates, and the
progress bar."""

from __future__ import annotations

import statistics
import sys
import time

from .configs import BenchConfig

TIMING_NOTE = ("one repetition = op call(s) + queue.finish(); warm-up excluded; the sides take "
               "turns (untimed calls, at least two and for at least 20 ms, then a block of timed "
               "calls back to back); ratio = torch time / our time from the medians "
               "(>1: pyrnn_cl faster)")


#: Untimed calls that open each turn of :func:`_timed_blocks`: at least this many ...
TURN_WARMUP = 2
#: ... and for at least this many seconds.
TURN_SETTLE_S = 0.02


def _timed_blocks(fns: dict, repeat: int, warmup: int, block: int = 3,
                  settle: float = TURN_SETTLE_S) -> dict:
    """``{name: [seconds] * repeat}``: every callable warmed up ``warmup`` times, then turns
    that alternate between the callables until each has ``repeat`` timings. A turn is untimed
    calls, at least :data:`TURN_WARMUP` of them and for at least ``settle`` seconds, followed
    by ``block`` timed calls back to back, as in a training loop; alternating turns spread a
    drifting background load over both sides.

    The untimed calls matter on a small CPU: right after the other side's turn, either side's
    first calls run up to 2x slower, which says nothing about either implementation. Measured
    on 2 cores (docs/benchmarks.md, "Intel's runtime: device-array results from the pool too"):
    after nine torch calls of a tiny LSTM, our next four forwards took 1.9-2.1 ms against 1.02
    alone, while the process burnt 0.5-0.8 of a CPU with nothing to do (torch's OpenMP workers
    spinning for work); after our turn torch's next calls took 1.78, 1.49, 1.45, 1.40 ms
    against 1.25 alone. Both last a few milliseconds, not a number of calls: two untimed calls
    of a 1 ms op did not cover them, hence ``settle``.
    ``block = 0``: single timed calls round-robin, no untimed calls."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    while any(len(v) < repeat for v in times.values()):
        for name, fn in fns.items():
            todo = min(max(block, 1), repeat - len(times[name]))
            if todo <= 0:
                continue
            if block:
                start, calls = time.perf_counter(), 0
                while calls < TURN_WARMUP or time.perf_counter() - start < settle:
                    fn()
                    calls += 1
            for _ in range(todo):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return times


def _paired_ratio(num: list[float], den: list[float]) -> float:
    """The median over rounds of ``num[i] / den[i]``: two sides whose timings were taken in
    turns one right after the other (:func:`_timed_blocks`, the sides next to each other in
    its ``fns``), so that each ratio compares calls made under the same load. A ratio of
    medians compares calls up to a round of every side apart, and drift between them enters
    it (measured on 2 cores: the torch bridge's medians at the large configurations read
    0.91-0.94 of the device-array calls', call-by-call interleaving 0.95-0.97 for the same
    work; docs/benchmarks.md)."""
    return statistics.median(a / b for a, b in zip(num, den))


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
