"""Smoke tests of ``pyrnn-cl bench`` (pyrnn_cl/bench/): result structure, FLOP counts,
weight mapping to PyTorch (the forward outputs must agree), command-line options.

No timing assertions: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import statistics
import sys

import numpy as np
import pytest

from helpers.clock import simulate_clock
from pyrnn_cl import bench
from pyrnn_cl.bench import BenchConfig
from pyrnn_cl.bench import timing as bench_timing

HAS_TORCH = importlib.util.find_spec("torch") is not None

TINY = [
    BenchConfig("smoke-lstm", "lstm", H=16, I=8, N=3, T=4),
    BenchConfig("smoke-gru", "gru", H=8, I=5, N=2, T=3),
    BenchConfig("smoke-relu", "rnn_relu", H=8, I=8, N=2, T=3),
    BenchConfig("smoke-bi2", "lstm", H=8, I=4, N=2, T=3, layers=2, directions=2),
]


def test_flop_counts():
    """2 G H N T (I_l + H) per layer and direction; layer 2 of a bidirectional net reads 2H."""
    c = BenchConfig("x", "lstm", H=16, I=8, N=2, T=3)
    assert c.flops_forward() == 2 * 4 * 16 * 2 * 3 * (8 + 16)
    assert c.flops_recurrent() == 2 * 4 * 16 * 16 * 2 * 3
    b = BenchConfig("y", "gru", H=8, I=4, N=2, T=3, layers=2, directions=2)
    per = 2 * 3 * 8 * 2 * 3
    assert b.flops_forward() == 2 * per * (4 + 8) + 2 * per * (16 + 8)
    assert b.flops_recurrent() == 4 * 2 * 3 * 8 * 8 * 2 * 3


def test_config_names_unique_and_quick_known():
    names = [c.name for c in bench.CONFIGS]
    assert len(names) == len(set(names))
    assert set(bench.QUICK) <= set(names)
    with pytest.raises(ValueError, match="unknown configuration"):
        bench.run_bench(["no-such-config"], compare_torch=False)


def test_configs_by_shape():
    """``CELL:HxIxNxT`` names a one-layer configuration; anything else is refused with the
    accepted forms named."""
    (cfg,) = bench._resolve_configs(["gru:13x7x5x3"])
    assert (cfg.cell, cfg.H, cfg.I, cfg.N, cfg.T, cfg.layers, cfg.directions) == (
        "gru", 13, 7, 5, 3, 1, 1)
    assert cfg.G == 3 and bench._resolve_configs(["rnn_relu:4x4x1x1"])[0].G == 1
    for bad in ("tanh:4x4x1x1", "lstm:4x4x1", "lstm:0x4x1x1", "lstm:4x4x1x1x1"):
        with pytest.raises(ValueError, match="CELL:HxIxNxT"):
            bench._resolve_configs([bad])


def test_gpu_tier_configs():
    """The GPU tier (performance.md §6.3) resolves by name and is listed; names are unique."""
    names = [c.name for c in bench.CONFIGS + bench.GPU_CONFIGS]
    assert len(names) == len(set(names)) and len(bench.GPU_CONFIGS) >= 15
    assert bench._resolve_configs(["gpu-lstm-4096x128"])[0].H == 4096
    assert bench._parser().parse_args(["--tier", "gpu"]).tier == "gpu"


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_torch_device_without_cuda_is_reported(device):
    """``torch_device="cuda"`` on a torch without CUDA: the configuration records a clear error
    (no crash, no silent CPU timing)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    result = bench.run_bench(TINY[:1], device=device, repeat=1, warmup=0, threads=1,
                             torch_device="cuda")
    entry = result["configs"][0]
    assert "CUDA" in entry["error"] and result["summary"]["errors"] == 1
    assert result["torch_device"] == "cuda"


def test_memory_estimate_counts_buffers():
    c = BenchConfig("x", "lstm", H=16, I=8, N=2, T=3)
    m = bench.memory_estimate(c)
    # reserve = saved gates [T][N][4H] + h and c sequences [T][N][H], float32
    assert m["reserve"] == 4 * (3 * 2 * 64 + 2 * 3 * 2 * 16)
    assert m["bwd_sequence"] == 0        # a single layer's backward: nothing grows with T
    assert all(isinstance(v, int) and v > 0 for k, v in m.items() if k != "bwd_sequence")
    # two stacked bidirectional layers (cuDNN dialect): the gradient passed down [T][N][2H]
    two = BenchConfig("y", "lstm", H=16, I=8, N=2, T=3, layers=2, directions=2)
    assert bench.memory_estimate(two, dialect="cudnn")["bwd_sequence"] == 4 * 3 * 2 * 32
    # past REC_BWD_ROWS = 2048 rows (1024 steps of N = 2) the backward workspace stops growing
    ws = [bench.memory_estimate(BenchConfig("z", "lstm", H=16, I=8, N=2, T=T, layers=2,
                                            directions=2), dialect=d)["bwd_workspace"]
          for d in ("cudnn", "mps") for T in (1100, 3000)]
    assert ws[0] == ws[1] and ws[2] == ws[3] and ws[2] > ws[0]    # (mps: a chunk of h[t-1])


@pytest.mark.parametrize("block,repeat", [(3, 7), (1, 4), (0, 5), (4, 2)])
def test_timed_blocks_alternates_turns(block, repeat):
    """Each side: ``warmup`` calls, then turns of TURN_WARMUP untimed calls (none with block 0)
    and up to ``block`` timed calls, alternating, until ``repeat`` timings each."""
    log = []
    fns = {name: (lambda name=name: log.append(name)) for name in ("a", "b")}
    times = bench._timed_blocks(fns, repeat, warmup=2, block=block, settle=0)
    assert {k: len(v) for k, v in times.items()} == {"a": repeat, "b": repeat}
    turns = -(-repeat // max(block, 1))
    per_side = 2 + repeat + (turns * bench.TURN_WARMUP if block else 0)
    assert log.count("a") == log.count("b") == per_side
    body = log[4:]                       # after the warm-up calls
    size = min(block, repeat) + bench.TURN_WARMUP if block else 1
    assert body[:size] == ["a"] * size and body[size] == "b"   # a whole turn of one side first
    switches = sum(1 for x, y in zip(body, body[1:]) if x != y)
    assert switches == 2 * turns - 1


def test_timed_blocks_settle_for_a_time_not_a_count(monkeypatch):
    """A turn's untimed calls last at least ``settle`` seconds (the other side's threads spin
    for milliseconds, not calls): with calls of 1 ms on a simulated clock and the default
    settle, every turn opens with exactly as many untimed calls as fill it; with calls longer
    than it, TURN_WARMUP calls."""
    from pyrnn_cl.bench import timing

    clock = simulate_clock(monkeypatch, timing)
    for seconds in (0.001, 0.05):
        log = []

        def call(name, seconds=seconds, log=log):
            log.append(name)
            clock.sleep(seconds)

        fns = {name: (lambda name=name: call(name)) for name in ("a", "b")}
        bench._timed_blocks(fns, 3, warmup=0, block=3)
        untimed = max(bench.TURN_WARMUP, math.ceil(round(bench.TURN_SETTLE_S / seconds, 6)))
        assert log == ["a"] * (untimed + 3) + ["b"] * (untimed + 3), (seconds, len(log))


def test_run_bench_structure(device):
    result = bench.run_bench(TINY, device=device, repeat=1, warmup=1, threads=1)
    assert result["machine"]["device"] == device.info.name
    assert result["numpy_sgemm_1024_gflops"]["median"] > 0
    assert len(result["configs"]) == len(TINY)
    for entry, cfg in zip(result["configs"], TINY):
        assert entry["error"] is None, entry["error"]
        assert entry["config"]["name"] == cfg.name
        ours = entry["ours"]
        for key in ("fwd", "fwd_bwd"):
            assert len(ours[key]["all_ms"]) == 1
            assert ours[key]["min_ms"] > 0
        assert ours["gflops_fwd"] > 0 and ours["us_per_step_fwd"] > 0
        assert entry["flops"]["fwd_bwd"] == 3 * entry["flops"]["forward"]
        if HAS_TORCH:
            assert entry["ratio_fwd"] > 0 and entry["ratio_fwd_bwd"] > 0
            # same weights on both sides: the forward outputs agree (float32)
            assert entry["max_abs_diff_vs_torch"] < 1e-4, cfg.name
        else:
            assert entry["torch"] is None and entry["ratio_fwd"] is None
    assert result["summary"]["errors"] == 0
    table = bench.format_table(result)
    for cfg in TINY:
        assert cfg.name in table
    json.dumps(result)     # JSON-ready
    # an SGEMM median far below its best is reported as a busy host, a steady one is not
    best = result["numpy_sgemm_1024_gflops"]["max"]
    for median, busy in ((0.5 * best, True), (0.95 * best, False)):
        result["numpy_sgemm_1024_gflops"]["median"] = median
        assert ("the host was busy" in bench.format_table(result)) == busy, median


def test_run_bench_host_inputs(device, monkeypatch):
    """``host_inputs``: our ops get NumPy arrays (never a device array), in both dialects, and
    still compute the network PyTorch computes, on the bench's device: every op call names it
    (NumPy arrays carry no device; without ``device=`` the calls ran on the default device,
    PoCL, whatever ``--device`` said)."""
    import pyopencl.array as cla

    from pyrnn_cl import _arrays

    calls = []
    real_call = _arrays.Call.__init__

    def named(self, arrays, device_arg=None):
        calls.append(device_arg)
        real_call(self, arrays, device_arg)

    monkeypatch.setattr(_arrays.Call, "__init__", named)
    seen = []
    real = bench._Ours._mps_forward_layer

    def spy(self, src, p, training):
        seen.append((type(src), {type(v) for v in p.values() if v is not None}))
        return real(self, src, p, training)

    monkeypatch.setattr(bench._Ours, "_mps_forward_layer", spy)
    result = bench.run_bench([TINY[0], TINY[3]], device=device, repeat=1, warmup=0, threads=1,
                             host_inputs=True)
    assert result["host_inputs"] is True and result["summary"]["errors"] == 0
    assert seen and all(t is np.ndarray and kinds == {np.ndarray} for t, kinds in seen), seen
    assert [e["dialect"] for e in result["configs"]] == ["mps", "cudnn"]
    for entry in result["configs"]:
        if HAS_TORCH:
            assert entry["max_abs_diff_vs_torch"] < 1e-4, entry["config"]["name"]
    assert "NumPy arrays (host transfers timed)" in bench.format_table(result)
    assert calls and all(d is device for d in calls), calls
    assert not any(isinstance(v, cla.Array) for v in vars(bench._Ours(
        TINY[3], bench._make_weights(TINY[3]), np.zeros((3, 2, 4), np.float32),
        np.zeros((3, 2, 16), np.float32), device, use_cudnn=True, host_inputs=True)).values())


def test_run_bench_bridge(device, monkeypatch):
    """``bridge``: forward+backward through pyrnn_cl.torch is timed beside the cuDNN-dialect
    calls on device arrays (our side then uses that dialect for every configuration), with the
    weights the torch.nn side has, and the bridge's gradients are torch.nn's."""
    torch = pytest.importorskip("torch")
    grads = {}   # input shape -> the bridge's gradients (the configurations' shapes differ)
    real = bench._Bridge.run_fwd_bwd

    def spy(self):
        x = self.x.detach().requires_grad_(True)
        out = self.mod(x)[0]
        grads[tuple(x.shape)] = torch.autograd.grad(out, [x, *self.params], self.dy)
        return real(self)

    monkeypatch.setattr(bench._Bridge, "run_fwd_bwd", spy)
    turns = []      # which side ran, call by call

    def logged(cls, name, side):
        method = getattr(cls, name)
        monkeypatch.setattr(cls, name, lambda self: (turns.append(side), method(self))[1])

    logged(bench._Ours, "run_fwd_bwd", "arrays")
    logged(bench._Bridge, "run_fwd_bwd", "bridge")
    logged(bench._Torch, "run_fwd_bwd", "torch")
    cfgs = [TINY[0], TINY[2]]
    result = bench.run_bench(cfgs, device=device, repeat=4, warmup=0, threads=1, bridge=True)
    assert result["bridge"] is True and result["summary"]["errors"] == 0
    # the bridge's turns come right after the device-array calls' (their ratio pairs them)
    runs = [side for i, side in enumerate(turns) if i == 0 or turns[i - 1] != side]
    assert runs.count("bridge") >= 2 * len(cfgs), runs
    assert all(runs[i - 1] == "arrays" for i, side in enumerate(runs) if side == "bridge"), runs
    for entry in result["configs"]:
        assert entry["dialect"] == "cudnn"
        assert entry["bridge"]["fwd_bwd"]["min_ms"] > 0
        assert entry["ratio_bridge_fwd_bwd"] > 0
    assert result["summary"]["geomean_ratio_bridge_fwd_bwd"] > 0
    assert "Torch bridge" in bench.format_table(result)
    # the bridge computed what torch.nn computes with the same weights
    for cfg in cfgs:
        got = grads[(cfg.T, cfg.N, cfg.I)]
        weights = bench._make_weights(cfg)
        rng = np.random.default_rng(1)
        x = rng.uniform(-1, 1, (cfg.T, cfg.N, cfg.I)).astype(np.float32)
        dy = rng.uniform(-1, 1, (cfg.T, cfg.N, cfg.directions * cfg.H)).astype(np.float32)
        ref = bench._Torch(cfg, weights, x, dy, threads=1)
        xr = ref.x.detach().requires_grad_(True)
        want = torch.autograd.grad(ref.mod(xr)[0], [xr, *ref.params], ref.dy)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_run_bench_bridge_without_timing_torch(device, monkeypatch):
    """``bridge`` with PyTorch not timed (``--bridge --no-torch``) still times the bridge, its
    weights from an untimed CPU torch.nn module: no torch turn runs and no torch ratio is
    reported. Without torch installed, ``bridge`` raises an ImportError naming it (before, the
    column was left out without a word)."""
    pytest.importorskip("torch")
    turns = []
    for cls, side in ((bench._Bridge, "bridge"), (bench._Torch, "torch")):
        method = cls.run_fwd_bwd
        monkeypatch.setattr(cls, "run_fwd_bwd",
                            lambda self, m=method, s=side: (turns.append(s), m(self))[1])
    result = bench.run_bench([TINY[0]], device=device, repeat=2, warmup=0, threads=1,
                             bridge=True, compare_torch=False)
    entry, = result["configs"]
    assert entry["ratio_bridge_fwd_bwd"] > 0 and entry["torch"] is None, entry
    assert "bridge" in turns and "torch" not in turns, turns
    monkeypatch.setitem(sys.modules, "torch", None)            # (import torch fails)
    with pytest.raises(ImportError, match="bridge.*PyTorch"):
        bench.run_bench([TINY[0]], device=device, repeat=1, warmup=0, bridge=True,
                        compare_torch=False)


def test_paired_ratio_is_the_median_of_ratios_within_rounds():
    """The bridge ratio is taken within rounds, not from each side's median: a round in which
    both sides ran slower (the host's load drifting) leaves it where it is."""
    arrays, bridge = [1.0, 2.0, 3.0], [1.0, 4.0, 3.0]
    assert bench_timing._paired_ratio(arrays, bridge) == 1.0
    assert statistics.median(arrays) / statistics.median(bridge) < 0.7
    assert bench_timing._paired_ratio([2.0, 4.0, 8.0], [4.0, 8.0, 16.0]) == 0.5


@pytest.mark.parametrize("dtype", ["float16", pytest.param("bfloat16", marks=pytest.mark.skipif(
    importlib.util.find_spec("ml_dtypes") is None, reason="ml_dtypes is not installed"))])
def test_run_bench_16bit(device, dtype):
    """``dtype``: our ops get arrays of that storage dtype (both dialects) and compute the
    network PyTorch computes in float32, to 16-bit rounding."""
    result = bench.run_bench([TINY[0], TINY[3]], device=device, repeat=1, warmup=0, threads=1,
                             dtype=dtype)
    assert result["dtype"] == dtype and result["summary"]["errors"] == 0
    assert [e["dialect"] for e in result["configs"]] == ["mps", "cudnn"]
    for entry in result["configs"]:
        if HAS_TORCH:
            # outputs |y| < 1 rounded to 16 bits: half an ulp at 1 is 2^-11 / 2^-8
            assert 0 < entry["max_abs_diff_vs_torch"] < 2e-2, entry["config"]["name"]
    table = bench.format_table(result)
    assert f"{dtype} (PyTorch float32)" in table
    # our float32 calls timed in the same turns: a ratio per configuration and its summary
    for entry in result["configs"]:
        for part in ("fwd", "fwd_bwd"):
            assert 0 < entry[f"vs_float32_{part}"] < 100, entry["config"]["name"]
    assert result["summary"]["max_vs_float32_fwd"] >= result["summary"]["geomean_vs_float32_fwd"]
    assert f"{dtype} storage against float32" in table
    ours = bench._Ours(TINY[3], bench._make_weights(TINY[3]), np.zeros((3, 2, 4), np.float32),
                       np.zeros((3, 2, 16), np.float32), device, use_cudnn=True, dtype=dtype)
    assert {str(a.dtype) for a in (ours.x, ours.dy, ours.params, ours.h0, ours.c0)} == {dtype}


def test_bridge_runs_in_the_storage_dtype(device):
    """With a 16-bit ``dtype`` the bridge's module and tensors are in it, as our side's arrays
    are, so the bridge ratio compares like with like."""
    torch = pytest.importorskip("torch")
    cfg = TINY[0]
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (cfg.T, cfg.N, cfg.I)).astype(np.float32)
    dy = rng.uniform(-1, 1, (cfg.T, cfg.N, cfg.directions * cfg.H)).astype(np.float32)
    ref = bench._Torch(cfg, bench._make_weights(cfg), x, dy, threads=1)
    side = bench._Bridge(cfg, ref, device, "float16")
    assert {p.dtype for p in side.params} == {torch.float16}
    assert side.x.dtype == side.dy.dtype == torch.float16
    side.run_fwd_bwd()


def test_main_list_and_bad_arguments(capsys):
    assert bench.main(["--list"]) == 0
    assert "tiny-latency" in capsys.readouterr().out
    assert bench.main(["--list", "--no-pin", "--host-inputs"]) == 0
    with pytest.raises(SystemExit) as exc:
        bench.main(["--configs", "nope"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        bench.main(["--repeat", "0"])
    with pytest.raises(SystemExit):
        bench.main(["--block", "-1"])
    with pytest.raises(SystemExit) as exc:
        bench.main(["--dtype", "int8"])
    assert exc.value.code == 2
    assert "--dtype: got 'int8', expected float32, float64, float16" in capsys.readouterr().err


def test_pin_pocl_workers(monkeypatch):
    """POCL_AFFINITY=1 only when unset, not switched off (PYRNN_CL_PIN_POCL=0) and the process
    may run on CPUs 0..threads-1."""
    env = {}
    monkeypatch.setattr(os, "environ", env)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert bench.pin_pocl_workers(2) and env == {"POCL_AFFINITY": "1"}
    env["POCL_AFFINITY"] = "0"                      # the user's choice stays
    assert not bench.pin_pocl_workers(2) and env == {"POCL_AFFINITY": "0"}
    env.clear()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 3})
    assert not bench.pin_pocl_workers(2) and env == {}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert not bench.pin_pocl_workers(None) and env == {}     # 4 CPUs, 2 allowed
    assert bench.pin_pocl_workers(2) and env == {"POCL_AFFINITY": "1"}
    with pytest.raises(ValueError, match="threads: got 0"):
        bench.pin_pocl_workers(0)
    env.clear()
    env["PYRNN_CL_PIN_POCL"] = "0"                  # the library's switch holds here too
    assert not bench.pin_pocl_workers(2) and "POCL_AFFINITY" not in env


def test_main_writes_json_and_png(device, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bench, "CONFIGS", (TINY[0],))
    # main sets POCL_AFFINITY (too late for this process's PoCL): keep it out of os.environ
    monkeypatch.setattr(os, "environ", dict(os.environ))
    out = tmp_path / "r.json"
    argv = ["--configs", "smoke-lstm", "--repeat", "1", "--json", str(out), "--no-progress",
            "--device", f"{device.info.index}"]
    png = None
    if importlib.util.find_spec("matplotlib") is not None:
        png = tmp_path / "r.png"
        argv += ["--png", str(png)]
    assert bench.main(argv) == 0
    assert "smoke-lstm" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["configs"][0]["config"]["name"] == "smoke-lstm"
    if png is not None and HAS_TORCH:
        assert png.stat().st_size > 0
