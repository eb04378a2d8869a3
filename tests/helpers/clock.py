"""A simulated stopwatch for code that times callables with ``time.perf_counter``."""

from __future__ import annotations

import time
import types


class SimulatedClock:
    """A ``perf_counter`` that only :meth:`sleep` advances: fake workloads "take" exactly their
    planted time, however loaded the machine (real sleeps overshot on a busy CI host and made
    a 1 ms workload read slower than a 4 ms one)."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def simulate_clock(monkeypatch, module) -> SimulatedClock:
    """Give ``module`` (which does ``import time``) a ``time`` whose ``perf_counter`` is a new
    :class:`SimulatedClock`'s; every other name (``monotonic`` for deadlines, ``strftime``) is
    the real one. Returns the clock."""
    sim = SimulatedClock()
    real = {k: getattr(time, k) for k in dir(time) if not k.startswith("_")}
    monkeypatch.setattr(module, "time",
                        types.SimpleNamespace(**dict(real, perf_counter=sim.perf_counter)))
    return sim
