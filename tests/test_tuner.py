"""The autotuner (pyrnn_cl/tuner.py): wrong candidates never win, failing ones are survived, the
result is stored and used, and PYRNN_CL_AUTOTUNE tunes once on first use. No timings are
asserted (speed belongs in the benchmark)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pyrnn_cl.bench as bench_module
from helpers.clock import simulate_clock
from pyrnn_cl import _arrays, tuner, tuning
from pyrnn_cl import gemm as gemm_module
from pyrnn_cl.bench import BenchConfig
from pyrnn_cl.errors import BuildError, TuningWarning

TINY = BenchConfig("tiny-test", "lstm", 8, 5, 3, 4)
TINY_GRU = BenchConfig("tiny-gru", "gru", 12, 7, 2, 3)


@pytest.fixture
def clock(monkeypatch):
    """The tuner's stopwatch made a simulated one that the fake workloads advance by their
    planted times (``clock.sleep``): what the tuner measures is exactly those. Deadlines still
    follow the real clock."""
    return simulate_clock(monkeypatch, tuner)


@pytest.fixture
def db(tmp_path, monkeypatch):
    monkeypatch.setenv("PYRNN_CL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYRNN_CL_AUTOTUNE", raising=False)
    monkeypatch.delenv("PYRNN_CL_TUNING", raising=False)
    monkeypatch.setattr(tuning, "shipped_dir", lambda: tmp_path / "none")
    return tmp_path


def _plant(monkeypatch, clock, device, planted, fault):
    """Replace ``gemm`` so that under GEMM_TM == ``planted`` it misbehaves (``fault``: "wrong"
    zeroes the result, which also makes it the fastest; "build" raises a BuildError), while
    every other candidate is slowed down."""
    real = gemm_module.gemm

    def gemm(dev, dtype, m, n, k, a, b, c, **kw):
        if device.tuning("gemm")["GEMM_TM"] == planted:
            if fault == "build":
                raise BuildError("planted build failure")
            _arrays.fill(c, 0)
            return None
        clock.sleep(0.002)
        return real(dev, dtype, m, n, k, a, b, c, **kw)

    monkeypatch.setattr(gemm_module, "gemm", gemm)


@pytest.mark.parametrize("fault", ["wrong", "build"])
def test_a_fast_wrong_or_failing_candidate_never_wins(device, db, clock, monkeypatch, fault):
    start = device.tuning("gemm")
    planted = next(v for v in (1, 2, 6, 8) if v != start["GEMM_TM"])
    _plant(monkeypatch, clock, device, planted, fault)
    work = tuner.workloads(device, "gemm", [TINY])
    result = tuner.tune_family(device, "gemm", work, budget=60, repeat=1, start=start,
                               names=["GEMM_TM"])
    assert result.best["GEMM_TM"] != planted
    bad = result.rejected if fault == "wrong" else result.failed
    assert [v["GEMM_TM"] for v, _ in bad] == [planted]
    assert ("error" in bad[0][1]) if fault == "wrong" else ("planted" in bad[0][1])
    assert result.tried >= 2            # the other values were still tried
    assert device.tuning("gemm") == start   # no trial values leak out


def test_tiled_gemm_candidates_are_checked(device, db):
    """The tuner's GEMM workloads pass with the tiled kernel forced on (the GPU path) at the
    tiles it may try, so a tune on a GPU compares correct candidates."""
    start = dict(device.tuning("gemm"), GEMM_LOCAL=1)
    work = tuner.workloads(device, "gemm", [TINY])
    for name in ("GEMM_LBK", "GEMM_LTN"):
        for value in tuner.choices(device, "gemm", name, start):
            candidate = dict(start, **{name: value})
            if tuner._valid("gemm", candidate):
                with tuning.trial(device, "gemm", candidate):
                    for w in work:
                        w.check()


def test_tune_checks_every_family_stores_and_is_used(device, db):
    results, path = tuner.tune(device, budget=20, configs=[TINY, TINY_GRU], repeat=1,
                               progress=False)
    assert [r.family for r in results] == list(tuner.DEFAULT_FAMILIES)
    for r in results:
        assert not r.rejected, r.rejected          # the real kernels are right for every value
        assert r.speedup >= 1.0
    entry = json.loads(path.read_text())
    assert set(entry["families"]) == set(tuner.DEFAULT_FAMILIES)
    assert entry["meta"]["gemm"]["configs"] == ["tiny-test", "tiny-gru"]
    assert tuning.is_tuned(device.info) == "user"
    for r in results:
        assert device.tuning(r.family) == dict(device.tuning(r.family), **r.best)
        assert device.tuning_source(r.family).startswith("tuned")
    assert device._tuning_trial is None


def test_a_spent_budget_tries_nothing(device, db):
    work = tuner.workloads(device, "reduce", [TINY])
    start = device.tuning("reduce")
    result = tuner.tune_family(device, "reduce", work, budget=0.0, repeat=1)
    assert result.tried == 0 and result.best == start and result.speedup == 1.0


def test_recurrence_candidates_are_checked_against_float64(device, db, monkeypatch):
    """A recurrence candidate whose forward differs from the float64 reference is rejected."""
    work = tuner.workloads(device, "recurrence", [TINY_GRU])
    start = device.tuning("recurrence")
    for w in work:
        w.check()                                 # the real kernels pass
    from pyrnn_cl import _selftest_ref

    real = _selftest_ref.mps_gru
    monkeypatch.setattr(_selftest_ref, "mps_gru", lambda *a, **k: real(*a, **k) + 0.1)
    bad = tuner.workloads(device, "recurrence", [TINY_GRU])
    with tuning.trial(device, "recurrence", start):
        with pytest.raises(tuner.CandidateError, match="forward"):
            bad[0].check()


def test_coupled_whole_sequence_thresholds_are_found_in_one_step(device, db, clock):
    """A layer that only gets faster with whole-sequence kernels needs REC_SEQ_MAX_BYTES and
    REC_SEQ_STREAM_BYTES raised together (neither does anything alone): from limits that keep
    it off, the search still finds a setting that turns it on."""
    from pyrnn_cl.plan import _whole_sequence_fits

    cus = 4     # the rule's inputs, not the device's: with 132 compute units no choice fits
    r_bytes = 1 << 20                       # above REC_SEQ_BYTES, a work-group per core
    start = dict(device.tuning("recurrence"), REC_SEQ_BYTES=1 << 18, REC_SEQ_MAX_BYTES=1 << 17,
                 REC_SEQ_STREAM_BYTES=1 << 20)
    assert not _whole_sequence_fits(start, cus, r_bytes, cus)

    def run():
        fits = _whole_sequence_fits(device.tuning("recurrence"), cus, r_bytes, cus)
        clock.sleep(0.001 if fits else 0.004)

    work = [tuner.Workload("fake layer", run, lambda: None)]
    result = tuner.tune_family(device, "recurrence", work, budget=30, repeat=1, start=start,
                               names=["REC_SEQ_MAX_BYTES", "REC_SEQ_STREAM_BYTES"])
    assert _whole_sequence_fits(result.best, cus, r_bytes, cus), result.best
    assert result.speedup > 1.5


@pytest.mark.parametrize("with_uniform_gain", [True, False])
def test_a_value_that_slows_one_workload_is_not_adopted(device, db, clock, with_uniform_gain):
    """An entry holds one value for every shape. A value that makes one workload 4x faster and
    another 1.4x slower wins on the geometric mean of the two, but is not adopted (it would be a
    regression for the second shape's users: tuner.MAX_LOSS); a value that is faster on both is,
    and with none such the starting values stay."""
    start = dict(device.tuning("recurrence"))
    name = "REC_BWD_ROWS"               # read by no workload here: only the planted times count
    others = [v for v in tuner.choices(device, "recurrence", name, start) if v != start[name]]
    mixed, uniform = others[0], others[-1]
    # seconds per workload: (small layer, large layer)
    times = {mixed: (0.001, 0.0056), uniform: (0.003, 0.0035)}

    def workload(i):
        def run():
            value = device.tuning("recurrence")[name]
            if value == uniform and not with_uniform_gain:
                value = start[name]
            clock.sleep(times.get(value, (0.004, 0.004))[i])
        return tuner.Workload(f"layer {i}", run, lambda: None)

    result = tuner.tune_family(device, "recurrence", [workload(0), workload(1)], budget=30,
                               repeat=3, start=start, names=[name])
    assert tuner._score(times[mixed], (0.004, 0.004)) < 0.65       # the mean alone would adopt it
    if with_uniform_gain:
        assert result.best[name] == uniform and result.speedup > 1.1, result.best[name]
    else:
        assert result.best == start and result.speedup == 1.0, result.best[name]


def test_a_one_off_slow_reading_does_not_block_a_gain(device, db, clock):
    """A workload that reads slow once under a candidate (a shared machine) is timed again
    before the candidate is refused for slowing it: a real gain elsewhere is still adopted."""
    start = dict(device.tuning("recurrence"))
    name = "REC_BWD_ROWS"
    good = [v for v in tuner.choices(device, "recurrence", name, start) if v != start[name]][-1]
    looks = []

    def workload(i):
        def run():
            t = 0.05
            if device.tuning("recurrence")[name] == good:
                t = 0.0125 if i == 0 else 0.05
                if i == 1:
                    looks.append(1)
                    t = 0.1 if len(looks) <= 2 else t    # its first warm-up and timed run
            clock.sleep(t)
        return tuner.Workload(f"layer {i}", run, lambda: None)

    result = tuner.tune_family(device, "recurrence", [workload(0), workload(1)], budget=30,
                               repeat=1, start=start, names=[name])
    assert result.best[name] == good and len(looks) > 2, (result.best[name], len(looks))


def test_candidates_are_timed_beside_the_best_on_a_drifting_host(device, db, clock):
    """The host slows down 2.5x after the starting values were timed (a shared machine): a
    candidate 30 % faster is still adopted, because it is timed beside the current best
    (tuner._evaluate_pair) rather than against the start's earlier times."""
    start = dict(device.tuning("recurrence"))
    name = "REC_BWD_ROWS"               # read by no workload here: only the planted times count
    faster = [v for v in tuner.choices(device, "recurrence", name, start)
              if v != start[name]][0]
    runs = []

    def run():
        runs.append(1)
        slow = 2.5 if len(runs) > 2 else 1.0         # after the start's warm-up and timed run
        value = device.tuning("recurrence")[name]
        clock.sleep(0.01 * slow * (0.7 if value == faster else 1.0))

    work = [tuner.Workload("layer", run, lambda: None)]
    result = tuner.tune_family(device, "recurrence", work, budget=30, repeat=2, start=start,
                               names=[name])
    assert result.best[name] == faster and result.speedup > 1.2, (result.best, result.speedup)


def test_float32_search_skips_float64_parameters_and_starts_with_whole_sequence(device, db,
                                                                               clock):
    """The recurrence's float32 workloads never vary REC_VW_F64 (only float64 calls read it)
    nor REC_PACK16_BYTES (its own float16 pass), and the whole-sequence thresholds are tried
    before any tile size, so that a short budget reaches them."""
    start = dict(device.tuning("recurrence"))
    seen = []

    def run():
        seen.append(dict(device.tuning("recurrence")))
        clock.sleep(0.001)

    work = [tuner.Workload("fake layer", run, lambda: None)]
    tuner.tune_family(device, "recurrence", work, budget=20, repeat=1, start=start)
    assert {v["REC_VW_F64"] for v in seen} == {start["REC_VW_F64"]}
    assert {v["REC_PACK16_BYTES"] for v in seen} == {start["REC_PACK16_BYTES"]}
    varied = [next(k for k in v if v[k] != start[k]) for v in seen if v != start]
    firsts = list(tuner.SEARCH_FIRST["recurrence"])
    assert varied and varied[0] in firsts, varied
    tiles = [i for i, k in enumerate(varied) if k in ("REC_VW", "REC_NB")]
    assert not tiles or all(i > varied.index(k) for k in firsts if k in varied for i in tiles)
    assert set(tuner.search_order("recurrence")) | {"REC_VW_F64", "REC_PACK16_BYTES"} == {
        p.name for p in tuning.SPACE["recurrence"]}


def test_tied_moves():
    best = {"GEMM_VW": 8, "GEMM_TN": 32, "REC_SEQ_MAX_BYTES": 1 << 17,
            "REC_SEQ_STREAM_BYTES": 1 << 20}
    assert tuner._tied(dict(best, GEMM_VW=16), "GEMM_VW", best)["GEMM_TN"] == 64
    up = tuner._tied(dict(best, REC_SEQ_MAX_BYTES=1 << 22), "REC_SEQ_MAX_BYTES", best)
    assert up["REC_SEQ_STREAM_BYTES"] == 1 << 25
    up = tuner._tied(dict(best, REC_SEQ_STREAM_BYTES=1 << 26), "REC_SEQ_STREAM_BYTES", best)
    assert up["REC_SEQ_MAX_BYTES"] == 1 << 23
    down = tuner._tied(dict(best, REC_SEQ_MAX_BYTES=0), "REC_SEQ_MAX_BYTES", best)
    assert down["REC_SEQ_STREAM_BYTES"] == 1 << 20          # lowering moves nothing else


def test_choices_respect_the_device(device):
    current = device.tuning("gemm")
    derived = tuning.derive(device.info, device.profile)
    for name in ("GEMM_VW", "GEMM_DVW"):
        values = tuner.choices(device, "gemm", name, current)
        assert current[name] in values
        if device.info.type == "cpu":
            assert max(values) <= max(4, derived["gemm"]["GEMM_VW"])
    for name in ("GEMM_WG", "GEMM_PACK_WG"):
        assert max(tuner.choices(device, "gemm", name, current)) <= \
            tuning.clamp_work_group(device.info, 1 << 20)
    # the tiled kernel: not offered to CPU-like devices, its tile only while it runs, and then
    # only tiles the device can run
    cpu_like = device.info.type == "cpu" or device.profile.prefers_explicit_vectors
    local = tuner.choices(device, "gemm", "GEMM_LOCAL", current)
    assert local == ([current["GEMM_LOCAL"]] if cpu_like else [0, 1])
    for name in tuning.GEMM_LOCAL_KEYS:
        assert tuner.choices(device, "gemm", name, dict(current, GEMM_LOCAL=0)) == [current[name]]
        forced = dict(current, GEMM_LOCAL=1)
        values = tuner.choices(device, "gemm", name, forced)
        assert len(values) > 1 and current[name] in values
        for value in values:
            assert tuning.gemm_local_fits(device.info, dict(forced, **{name: value}), 4) or \
                value == current[name]
    # combinations the tiled kernel cannot take are never tried
    assert not tuner._valid("gemm", dict(current, GEMM_LBM=64, GEMM_LTM=8, GEMM_LBN=48,
                                         GEMM_LTN=32))
    # a tile limit only narrows a CPU's vectors: not searched there
    rec = device.tuning("recurrence")
    tile = tuner.choices(device, "recurrence", "REC_TILE_MAX", rec)
    assert (tile == [rec["REC_TILE_MAX"]]) if cpu_like else (len(tile) > 1)


def test_16bit_parameters_are_tuned_on_float16_layers(device, db, clock, monkeypatch):
    """REC_PACK16_BYTES, which only 16-bit calls read, is searched on float16 workloads after
    the rest of the recurrence family (never with the float32 ones, which would time the same
    work for every value); the value that makes them faster is adopted and recorded."""
    derived = device.tuning("recurrence")["REC_PACK16_BYTES"]
    fast = tuning.NEVER if derived == 0 else 0
    seen = []

    def fake(dev, family, configs, dtype="float32"):
        def run():
            limit = dev.tuning("recurrence")["REC_PACK16_BYTES"]
            seen.append((dtype, limit))
            clock.sleep(0.001 if dtype == "float16" and limit == fast else 0.004)
        return [tuner.Workload(f"fake {dtype}", run, lambda: None)]

    monkeypatch.setattr(tuner, "workloads", fake)
    results, path = tuner.tune(device, budget=20, configs=["tiny-latency"],
                               families=["recurrence"], repeat=1, progress=False)
    r = results[0]
    assert r.best["REC_PACK16_BYTES"] == fast and r.speedup16 > 1.5
    assert {limit for dt, limit in seen if dt == "float32"} == {derived}
    assert {limit for dt, limit in seen if dt == "float16"} > {derived, fast}
    meta = json.loads(path.read_text())["meta"]["recurrence"]
    assert meta["speedup_float16"] > 1.5
    assert "on float16 layers" in tuner.format_results(device, results, path)


def test_autotune_runs_once_on_first_use(device, db, monkeypatch):
    calls = []
    monkeypatch.setattr(tuner, "tune", lambda dev, **kw: calls.append((dev, kw)))
    monkeypatch.setenv("PYRNN_CL_AUTOTUNE", "1")
    monkeypatch.setattr(device, "_autotuned", False, raising=False)
    device.tuning("gemm")
    device.tuning("recurrence")
    assert len(calls) == 1 and calls[0][0] is device
    assert calls[0][1]["budget"] == tuner.AUTOTUNE_BUDGET


def test_autotune_failure_warns_and_keeps_the_defaults(device, db, monkeypatch):
    def broken(dev, **kw):
        raise RuntimeError("no luck")

    monkeypatch.setattr(tuner, "tune", broken)
    monkeypatch.setenv("PYRNN_CL_AUTOTUNE", "1")
    monkeypatch.setattr(device, "_autotuned", False, raising=False)
    with pytest.warns(TuningWarning, match="no luck"):
        values = device.tuning("gemm")
    assert values == tuning.resolve(device.info, device.profile, "gemm")[0]


def test_autotune_is_skipped_when_tuned_or_disabled(device, db, monkeypatch):
    calls = []
    monkeypatch.setattr(tuner, "tune", lambda dev, **kw: calls.append(dev))
    tuning.save_entry(device.info, {"reduce": device.tuning("reduce")})
    monkeypatch.setenv("PYRNN_CL_AUTOTUNE", "1")
    monkeypatch.setattr(device, "_autotuned", False, raising=False)
    device.tuning("gemm")
    monkeypatch.setenv("PYRNN_CL_TUNING", "0")
    monkeypatch.setattr(device, "_autotuned", False, raising=False)
    device.tuning("gemm")
    assert calls == []


def test_cli_rejects_bad_arguments(device, db, capsys):
    assert tuner.main(["--device", device.info.index, "--families", "fft", "--no-save"]) == 2
    assert "fft" in capsys.readouterr().err
    assert tuner.main(["--device", device.info.index, "--configs", "nope", "--no-save"]) == 2
    assert "nope" in capsys.readouterr().err
    assert tuner.main(["--device", device.info.index, "--budget", "0", "--no-save"]) == 2


def test_cli_tunes_and_reports(device, db, capsys, monkeypatch):
    monkeypatch.setattr(bench_module, "CONFIGS", (TINY,) + bench_module.CONFIGS)
    assert tuner.main(["--device", device.info.index, "--configs", "tiny-test", "--budget", "8",
                       "--families", "reduce", "--repeat", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "reduce:" in out and "Saved to" in out
    assert tuning.is_tuned(device.info) == "user"


def test_gemm_workload_reference_is_float64(device):
    """The GEMM check is against NumPy float64, tight enough to catch one wrong element."""
    work = tuner.workloads(device, "gemm", [TINY])
    for w in work:
        w.check()
    real = gemm_module.gemm
    try:
        def off_by_one(dev, dtype, m, n, k, a, b, c, **kw):
            real(dev, dtype, m, n, k, a, b, c, **kw)
            host = c.get()
            host[0, 0] += 1e-3 * max(1.0, np.abs(host).max())
            c.set(host)

        gemm_module.gemm = off_by_one
        with pytest.raises(tuner.CandidateError):
            tuner.workloads(device, "gemm", [TINY])[0].check()
    finally:
        gemm_module.gemm = real
