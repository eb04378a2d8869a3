"""The backward in chunks of steps (``REC_BWD_ROWS``): every dialect against its independent
float64 reference with the chunk forced small, on both kernel paths.

The backward keeps gate gradients only for a chunk of steps; the weight, bias, input,
projection and peephole gradients are sums over chunks, and the next step reads the previous
step's gate gradients from a two-step ring when that step lies in the chunk before. Everything
that can go wrong there shows with one step per chunk (every step crosses a chunk border) and
with 3 steps of T = 7 (uneven chunks: 3, 3, 1): directions whose chunks cover different times
(bidirectional), sequence lengths (rows idle at the border; the pseudo-step reading a reverse
row's first step from an earlier chunk), masks and GRU's reset-gate inputs (gathered per chunk),
projections, skip_input (dx as block sums), two-phase GRU and TensorFlow's per-step dc.

Oracles: ``tests/reference/cudnn_ref.py``, ``mps_ref.py`` and ``tf_ref.py`` (the same as the
dialect tests); the kernel path is either the whole-chunk kernel (``pyrnn_bwd_seq``) or one
launch per step (``REC_SEQ_BYTES = 0``).
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from helpers import cudnn as TC
from helpers import mps as TM
from helpers import shapes as S
from helpers import tf as TT
from helpers.compare import F64_TOL
from helpers.device import needs_fp64, override_tuning
from reference import cudnn_ref as C

T = 7


@pytest.fixture(params=[("seq", 1), ("seq", 3), ("step", 1), ("step", 3)],
                ids=["seq-1", "seq-3", "step-1", "step-3"])
def chunked(device, monkeypatch, request):
    """A function of N giving ``device`` backward chunks of 1 or 3 steps of N rows
    (``REC_BWD_ROWS = steps * N``), on the whole-chunk or the per-step path."""
    needs_fp64(device)
    path, steps = request.param
    extra = {"REC_SEQ_BYTES": 0} if path == "step" else {}
    return lambda N: override_tuning(device, monkeypatch, REC_BWD_ROWS=steps * N, **extra)


def _chunks_used(monkeypatch):
    """Records the chunk size of every backward, to prove the chunking happened."""
    from pyrnn_cl import engine

    seen = []
    original = engine.Recurrence.chunk_steps

    def chunk_steps(self, full=False):
        steps = original(self, full)
        seen.append((steps, self.T, full))
        return steps

    monkeypatch.setattr(engine.Recurrence, "chunk_steps", chunk_steps)
    return seen


@pytest.mark.parametrize("mode,D,lens,input_mode", [
    ("rnn_tanh", 2, None, "linear_input"),
    ("lstm", 1, [3, 0, 7, 1], "linear_input"),
    ("lstm", 2, [3, 0, 7, 1], "linear_input"),
    ("gru", 2, None, "linear_input"),
    ("gru", 2, [2, 7, 0, 5], "skip_input"),
    ("lstm_proj", 2, [3, 0, 7, 1], "linear_input"),
    ("lstm_proj", 1, None, "linear_input"),
])
def test_cudnn_chunked(device, chunked, monkeypatch, mode, D, lens, input_mode):
    """Two layers, unsorted lengths with 0 and T, every gradient vs cudnn_ref, with every new
    array of the ops poisoned with NaN: ``params_backprop`` gets no zero fill, every weight and
    bias gradient is written whole by its layer's first chunk, then added to."""
    P = TC.P_ if mode == "lstm_proj" else 0
    mode = "lstm" if mode == "lstm_proj" else mode
    N, H = 4, TC.H_
    I = H if input_mode == "skip_input" else TC.I_
    chunked(N)
    seen = _chunks_used(monkeypatch)
    TC.poison_new_arrays(monkeypatch)
    x, h0, c0, params, kw = TC.problem(mode, 2, D, P, I=I, T=T, N=N, seed=21,
                                       input_mode=input_mode)
    lens = None if lens is None else np.array(lens, np.int32)
    seq = (T, N, D * (P or H))
    up = TC.upstream([seq, h0.shape, c0.shape if mode == "lstm" else None], ())
    out, grads = TC.fwd_bwd(device, x, h0, c0, params, lens, up, kw)
    r_out = C.cudnn_rnn_forward(x, h0, c0, params, lens, **kw)
    r_grads = C.cudnn_rnn_backward(x, h0, c0, params, lens, *up, **kw)
    for i in range(3):
        TC.assert_rel(out[i], r_out[i], F64_TOL, f"output {i}")
    for i, name in enumerate(("input_backprop", "input_h_backprop", "input_c_backprop",
                              "params_backprop")):
        TC.assert_rel(grads[i], r_grads[i], F64_TOL, name)
    assert seen and all(steps < t for steps, t, _ in seen), seen   # several chunks ran


@pytest.mark.parametrize("kind,flags,present", [
    ("lstm", dict(bidirectional=True), ("mask", "peephole", "init_state", "init_cell")),
    ("lstm", dict(reverse=True), ("peephole", "init_state")),
    ("gru", dict(bidirectional=True, reset_after=True), ("mask", "secondary_bias", "init_state")),
    ("gru", dict(reverse=True, reset_after=False), ("mask", "init_state")),
    ("rnn", dict(bidirectional=True), ("mask",)),
])
def test_mps_chunked(device, chunked, monkeypatch, kind, flags, present):
    """MPSGraph gradients with input weights and biases (accumulated over chunks) vs mps_ref;
    T = 7, N = 5, I = 3, H = 11."""
    shape = S.Shape("chunks", T=T, N=5, I=3, H=11)
    chunked(shape.N)
    seen = _chunks_used(monkeypatch)
    desc = TM.desc_of(kind, **{**TM.default_flags(kind), **flags})
    inputs = S.layer_inputs(kind, shape, bidirectional=desc.bidirectional, seed=23,
                            present=("input_weight", "bias") + present)
    TM.check_against_reference(device, kind, desc, inputs)
    assert any(steps < t for steps, t, full in seen if not full), seen


@pytest.mark.parametrize("seq_len_max", [T, 4], ids=["full", "short"])
def test_block_lstm_chunked(device, chunked, monkeypatch, seq_len_max):
    """TensorFlow BlockLSTMGrad (peepholes, cell clip, per-step dc) vs tf_ref."""
    p = TT.lstm_inputs(t=T, seed=29, scale=0.8)
    chunked(p["x"].shape[1])
    seen = _chunks_used(monkeypatch)
    kw = TT.block_kw(False, 1.0, 0.7, True)
    out, ref, grads, gref = TT.run_block(device, False, seq_len_max, p, kw)
    TT.close(out, ref, TT.TOL64, "block_lstm")
    TT.close(grads, gref, TT.TOL64, "block_lstm_grad")
    assert any(steps < t for steps, t, full in seen if not full), seen


def test_chunked_bidirectional_dx_is_zeroed_without_a_pyopencl_kernel(device, monkeypatch):
    """Both directions add into dx chunk by chunk, so it starts at zero; that fill must not
    build pyopencl's element-wise kernel (Intel's compiler prints a build log for it, which
    pyopencl turns into a warning on stderr): every backward here passes with
    ``Array.fill`` made to fail, and still equals the reference."""
    import pyopencl.array as cla

    def no_kernel_fill(self, *args, **kwargs):
        raise AssertionError("pyopencl's Array.fill (an element-wise kernel build) was called")

    needs_fp64(device)
    override_tuning(device, monkeypatch, REC_BWD_ROWS=3 * 5)
    monkeypatch.setattr(cla.Array, "fill", no_kernel_fill)
    seen = _chunks_used(monkeypatch)
    shape = S.Shape("chunks", T=T, N=5, I=3, H=11)
    desc = TM.desc_of("lstm", **{**TM.default_flags("lstm"), "bidirectional": True})
    inputs = S.layer_inputs("lstm", shape, bidirectional=True, seed=37,
                            present=("input_weight", "bias", "init_state"))
    TM.check_against_reference(device, "lstm", desc, inputs)
    assert any(steps < t for steps, t, full in seen if not full), seen


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fill_sets_exactly_the_view(device, dtype):
    """``_arrays.fill`` (clEnqueueFillBuffer) writes the value over a view at an offset and
    nothing beside it."""
    import pyopencl.array as cla

    from pyrnn_cl import _arrays

    if dtype == np.float64:
        needs_fp64(device)
    base = cla.to_device(device.queue, np.arange(23, dtype=dtype))
    _arrays.fill(base[5:16], np.nan)
    _arrays.fill(base[17:19], 0)
    want = np.arange(23, dtype=dtype)
    want[5:16] = np.nan
    want[17:19] = 0
    np.testing.assert_array_equal(base.get(), want)


def test_chunk_size_follows_rows(device, monkeypatch):
    """``chunk_steps``: about REC_BWD_ROWS rows per chunk, at least one step, at most T;
    every step with ``full``."""
    from pyrnn_cl import engine
    from pyrnn_cl.cells import CellSpec

    override_tuning(device, monkeypatch, REC_BWD_ROWS=100)
    spec = CellSpec("lstm", (0, 1, 2, 3), (3, 3, 2, 3))
    for (T_, N_), want in {(50, 8): 13, (50, 1): 50, (50, 200): 1, (5, 8): 5, (0, 8): 1}.items():
        rec = engine.Recurrence(device, np.float32, spec, T=T_, N=N_, H=4)
        assert rec.chunk_steps() == want, (T_, N_)
        assert rec.chunk_steps(full=True) == max(T_, 1)



@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_backward_temporaries_do_not_grow_with_T(device, monkeypatch, kind):
    """Every temporary the engine's backward takes (packs, the chunk of gate gradients, rings,
    gathered inputs) is the same size for T = 6 and T = 60: with REC_BWD_ROWS = 2 N the gate
    gradients of all steps never exist at once. (The forward's outputs, the reserve, are
    the caller's.)"""
    from pyrnn_cl import engine

    override_tuning(device, monkeypatch, REC_BWD_ROWS=2 * 5)
    live = {"now": 0, "peak": 0}
    real = engine.temporary

    def release(size):
        live["now"] -= size

    def temporary(dev, shape, dtype):
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        a = real(dev, shape, dtype)
        live["now"] += size
        live["peak"] = max(live["peak"], live["now"])
        weakref.finalize(a, release, size)
        return a

    monkeypatch.setattr(engine, "temporary", temporary)
    peaks = []
    for T_ in (6, 60):
        shape = S.Shape("grow", T=T_, N=5, I=3, H=8)
        desc = TM.desc_of(kind, bidirectional=True, **TM.default_flags(kind), training=True)
        inputs = S.layer_inputs(kind, shape, bidirectional=True, seed=31, dtype=np.float32,
                                present=("input_weight", "bias", "mask", "init_state"))
        out = TM.forward(kind, inputs, desc, device)
        gc.collect()
        live.update(now=0, peak=0)
        dy, dhn, dcn = TM.upstream(kind, T_, 5, 8, 2, 7, np.float32)
        TM.lib_gradients(kind, inputs, desc, device, dy, dhn, dcn, saved=out)
        peaks.append(live["peak"])
    # GRU, bidirectional, H = 8, N = 5: one chunk of 2 steps holds dgx and dgh
    assert peaks[0] >= 2 * (2 * 5 * 2 * 3 * 8 * 4) if kind == "gru" else peaks[0] > 0
    assert peaks[0] == peaks[1], peaks
