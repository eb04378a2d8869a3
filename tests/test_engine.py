"""Edge cases of the recurrence engine (``pyrnn_cl/engine.py``, ``cl/recurrence.cl``,
``cl/cells/*.cl``) that no single dialect test pins down.

* hidden sizes that no vector width divides (1, 3, 33) and batch sizes that no rows-per-work-item
  count divides (1, 5, 13), float32 and float64, every cell (single gate, LSTM with peepholes,
  two-phase reset-before GRU, reset-after GRU with its hidden-side bias), bidirectional;
* the tuning knobs: ``REC_VW`` = 1 / 4 / 16, ``REC_NB`` = 1 / 3 / 8 and products split over
  ``REC_KS`` = 4 / 32 work-items (set through a patched ``device.tuning``) all give the float64
  reference's answer, and each other's;
* vector widths chosen by the default tuning (float32 8 and 2);
* per-row sequence lengths (``has_len``: 0, T and values between, unsorted) through the engine
  API itself, with final states, against the reference run row by row (pitfalls A7-A9);
* larger sizes: N = 37 and 600 rows (> 512, pitfall A17), T = 300 steps;
* launches: a whole sequence is O(T) kernel launches, both directions in one launch (D12), and
  every launch is counted (``programs.launch_count``, pitfall C14).

Layer-level results are checked through the MPSGraph dialect (a thin layer over the engine)
against ``tests/reference/mps_ref.py``, with the tolerances of ``test_mps`` (``helpers.compare``).
"""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import pyrnn_cl as rc
from helpers import shapes as S
from helpers.compare import F32, F64, assert_close
from helpers.device import ONE_LANE, PER_STEP, WHOLE_SEQUENCE, needs_fp64, override_tuning
from helpers.mps import check_against_reference, desc_of, grad_names, gru_flags, ref_gradients
from pyrnn_cl import engine, plan
from pyrnn_cl.cells import ACTIVATIONS, PEEP_MPS, CellSpec
from pyrnn_cl.programs import launch_count
from reference import mps_ref as M

#: The cells of these tests: configurations shared with test_mps (helpers.mps: programs reused).
CELLS = {
    "rnn": ("rnn", {"activation": "tanh"}),
    "lstm": ("lstm", {}),                                   # + peephole, mask
    "gru-before": ("gru", gru_flags(True, False, True)),    # two kernels a step
    "gru-after": ("gru", gru_flags(False, True, False)),    # + secondary bias
}


def _check(device, cell, shape, dtype, seed):
    kind, flags = CELLS[cell]
    desc = desc_of(kind, bidirectional=True, **flags)
    inputs = S.layer_inputs(kind, shape, bidirectional=True, seed=seed, dtype=dtype)
    return check_against_reference(device, kind, desc, inputs, dtype)


# =================================================================================================
# Sizes that no vector width / rows-per-work-item count divides


#: the (H, N) pairs of the fast suite: every size once, and the most ragged pair (the others
#: run in the full suite: each H is a compile of the whole-sequence kernels per program, so
#: the whole grid made this test the longest of a cold run, 133 of 1006 s on PoCL)
ODD_FAST = {(1, 13), (3, 1), (33, 5), (33, 13)}


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("H,N", [pytest.param(h, n, id=f"H{h}-N{n}",
                                              marks=[] if (h, n) in ODD_FAST else pytest.mark.slow)
                                 for h in (1, 3, 33) for n in (1, 5, 13)])
@pytest.mark.parametrize("cell", list(CELLS))
def test_odd_hidden_and_batch_sizes(device, cell, H, N, dtype):
    _check(device, cell, S.Shape("odd", T=4, N=N, I=3, H=H), dtype, seed=H * 100 + N)


@pytest.mark.parametrize("H,N", [(16, 5), (6, 13)], ids=["H16-N5", "H6-N13"])
@pytest.mark.parametrize("cell", list(CELLS))
def test_default_vector_widths_float32(device, monkeypatch, cell, H, N):
    """Hidden sizes the default tuning vectorises (float32: REC_VW units per work-item, H = 6
    in one partial vector; a device whose default is one unit, a GPU, is given 8 so the vector
    paths still run)."""
    if int(device.tuning("recurrence")["REC_VW"]) < 2:
        override_tuning(device, monkeypatch, REC_VW=8)
    rec = engine.Recurrence(device, np.float32, CellSpec("rnn", (0,), (2,)), T=1, N=N, H=H)
    assert rec.vw > 1, "this case must exercise a vector width > 1"
    assert rec.plan.tail == (H % rec.vw != 0)
    _check(device, cell, S.Shape("vec", T=5, N=N, I=4, H=H), np.float32, seed=H + N)


#: launch kinds of test_partial_last_vector_of_units: tuning values beside REC_VW = 8
TAIL_LAUNCHES = {
    "whole-sequence": dict(WHOLE_SEQUENCE, REC_SEQ_LOOP=1),
    "whole-sequence-groups": dict(WHOLE_SEQUENCE, REC_SEQ_LOOP=0),
    "per-step": dict(PER_STEP, **ONE_LANE),
    "per-step-split": dict(PER_STEP, REC_KS=4),
}


@pytest.mark.parametrize("launch", list(TAIL_LAUNCHES))
@pytest.mark.parametrize("cell", list(CELLS))
def test_partial_last_vector_of_units(device, monkeypatch, cell, launch):
    """H = 21 in vectors of 8 units: two whole ones and one of 5 (``REC_TAIL``: padded packs,
    the last vector read and written element by element), in the whole-sequence kernels (one
    work-item looping over the vectors, or one per vector), the per-step kernels and products
    split over 4 work-items: every cell bidirectional (peepholes and a mask on the LSTM),
    forward and gradients against the float64 reference. Wrong padding shows as a neighbouring
    gate's or row's values in the units past 21, or NaN from a pack's stale memory."""
    needs_fp64(device)
    override_tuning(device, monkeypatch, REC_VW=8, REC_VW_F64=8, REC_NB=3, REC_TILE_MAX=0,
                    REC_ACC_MAX=0, **TAIL_LAUNCHES[launch])
    rec = engine.Recurrence(device, np.float64, CellSpec("rnn", (0,), (2,)), T=5, N=7, H=21)
    assert (rec.vw, rec.plan.tail, rec.plan.unit_vectors) == (8, True, 3)
    assert rec.fused == launch.startswith("whole")
    _check(device, cell, S.Shape("tail", T=5, N=7, I=3, H=21), np.float64, seed=21)


# =================================================================================================
# Tuning overrides


TUNINGS = [  # (REC_VW, REC_NB, REC_WG, REC_KS): every VW of 1/4/16 and NB of 1/3/8 appears;
    (1, 3, 0, 1),  # KS = 4 splits each product in four, KS = 32 leaves lanes without a term
    (4, 8, 2, 1),   # (K = 16, and G*H = 48 rows of the backward's product)
    (16, 1, 0, 1),
    (4, 3, 0, 4),
    (2, 1, 0, 32),
]


@pytest.mark.parametrize("cell", list(CELLS))
def test_tuning_overrides_give_the_same_answer(device, monkeypatch, cell):
    """REC_VW = 1 / 4 / 16, REC_NB = 1 / 3 / 8 (H = 16, N = 13: neither divides N) and REC_KS
    = 4 / 32 give the float64 reference's answer and agree with each other to 1e-12."""
    needs_fp64(device)
    results = []
    for vw, nb, wg, ks in TUNINGS:
        override_tuning(device, monkeypatch, REC_VW=vw, REC_VW_F64=vw, REC_NB=nb, REC_WG=wg,
                        REC_KS=ks, REC_TILE_MAX=0, REC_ACC_MAX=0, **(PER_STEP if ks > 1 else {}))
        rec = engine.Recurrence(device, np.float64, CellSpec("lstm", (0, 1, 2, 3), (3, 3, 2, 3)),
                                T=5, N=13, H=16)
        assert (rec.vw, rec.nb, rec.ks) == (vw, nb, ks), "the engine must use the tuning values"
        results.append(_check(device, cell, S.Shape("tuned", T=5, N=13, I=3, H=16),
                              np.float64, seed=7))
    override_tuning(device, monkeypatch)       # the profile's own values again
    (out0, grads0) = results[0]
    for (vw, nb, _, ks), (out, grads) in zip(TUNINGS[1:], results[1:]):
        for a, b in zip(out + grads, out0 + grads0):
            assert_close(a, b, what=f"REC_VW={vw} REC_NB={nb} REC_KS={ks} vs REC_VW=1", tol=1e-12)


def test_split_products_respect_the_kernels_work_group_limit(device, monkeypatch, caplog):
    """REC_KS = 32 where the step kernels allow work-groups of only 12 (a kernel's own
    CL_KERNEL_WORK_GROUP_SIZE, below the device's): the layer builds again with 8 lanes, says
    so in the log, and still gives the reference's answer."""
    import logging

    from pyrnn_cl import programs

    needs_fp64(device)
    override_tuning(device, monkeypatch, REC_KS=32, REC_VW=1, REC_VW_F64=1, REC_NB=2,
                    **PER_STEP)
    real = programs.Program.work_group_size

    def limited(self, name):
        return min(12, real(self, name)) if name in engine._SPLIT_STEP_KERNELS else \
            real(self, name)

    monkeypatch.setattr(programs.Program, "work_group_size", limited)
    rec = engine.Recurrence(device, np.float64, CellSpec("lstm", (0, 1, 2, 3), (3, 3, 2, 3)),
                            T=5, N=13, H=16)
    assert rec.ks == 32
    with caplog.at_level(logging.INFO, logger="pyrnn_cl"):
        prog = rec._program()
    assert rec.ks == 8 and prog.defines["REC_KS"] == 8
    assert any("not REC_KS = 32: using 8" in r.getMessage() for r in caplog.records)
    for cell in CELLS:
        _check(device, cell, S.Shape("limited", T=5, N=13, I=3, H=16), np.float64, seed=3)


# =================================================================================================
# Sequence lengths through the engine API


def _cell_spec(kind, desc):
    """The engine cell of an MPSGraph descriptor, written out (not the dialect's mapping)."""
    A = ACTIVATIONS
    if kind == "lstm":
        acts = tuple(A[getattr(desc, f)] for f in (
            "input_gate_activation", "forget_gate_activation", "cell_gate_activation",
            "output_gate_activation"))
        return CellSpec("lstm", (0, 2, 1, 3) if desc.forget_gate_last else (0, 1, 2, 3), acts,
                        cell_act=A[desc.activation], peephole=PEEP_MPS)
    acts = tuple(A[getattr(desc, f)] for f in (
        "update_gate_activation", "reset_gate_activation", "output_gate_activation"))
    return CellSpec("gru", (1, 0, 2) if desc.reset_gate_first else (0, 1, 2), acts,
                    reset_after=desc.reset_after, flip_z=desc.flip_z)


@pytest.mark.parametrize("cell", ["lstm", "gru-before", "gru-after"])
def test_sequence_lengths(device, cell):
    """Per-row lengths [T, 0, 3, 1, T-1, 2] (unsorted, 0 and T included), bidirectional:
    outputs and gates zero past each length, the reverse direction starts at each row's own
    end, final states are the last valid step (the initial state for length 0), gradients past
    the length are zero; every row equals the reference run on its own valid prefix."""
    needs_fp64(device)
    kind, flags = CELLS[cell]
    desc = desc_of(kind, bidirectional=True, **flags)
    T, N, H, D = 6, 6, 5, 2
    G = S.GATES[kind]
    shape = S.Shape("lens", T=T, N=N, I=1, H=H)
    present = tuple(o for o in S.OPTIONAL[kind] if o != "input_weight")
    inputs = S.layer_inputs(kind, shape, bidirectional=True, present=present, seed=40)
    lens = np.array([T, 0, 3, 1, T - 1, 2], np.int32)
    rng = np.random.default_rng(41)
    dy = rng.standard_normal((T, N, D * H))
    dhn = rng.standard_normal((N, D * H))
    dcn = rng.standard_normal((N, D * H)) if kind == "lstm" else None

    # ---- the engine
    q = device.queue
    dt = np.float64

    def dev(a):
        return cla.to_device(q, np.ascontiguousarray(a, dtype=dt))

    def view(a):
        return engine.StateView(a, H, D * H)

    spec = _cell_spec(kind, desc)
    src, R = inputs["source"], inputs["recurrent_weight"]
    gx = dev(src + inputs["bias"])
    hb = None
    if kind == "gru" and desc.reset_after:
        hbh = np.zeros((D, G * H))
        o = spec.gate_blocks[2] * H
        hbh[:, o:o + H] = inputs["secondary_bias"].reshape(D, H)
        hb = dev(hbh)
    peep = dev(inputs["peephole"].reshape(D, 4 * H)) if kind == "lstm" else None
    mask, R_d, lens_d = dev(inputs["mask"]), dev(R), cla.to_device(q, lens)
    h0 = view(dev(inputs["init_state"]))
    c0 = view(dev(inputs["init_cell"])) if kind == "lstm" else None
    rec = engine.Recurrence(device, dt, spec, T=T, N=N, H=H, D=D, rev_mask=0b10, has_mask=True,
                            has_len=True, has_hb=hb is not None, has_peep=peep is not None)
    layer = engine.LayerInputs(R_d, h0, c0=c0, hb=hb, peep=peep, mask=mask, lens=lens_d)
    fwd = rec.forward(gx, layer)
    hn = view(cla.empty(q, (N, D * H), dt))
    rec.final_state(fwd.y, H, h0, hn, lens=lens_d)
    if kind == "lstm":
        cn = view(cla.empty(q, (N, D * H), dt))
        rec.final_state(fwd.cs, H, c0, cn, lens=lens_d)
    dh0 = view(cla.empty(q, (N, D * H), dt))
    dc0 = view(cla.empty(q, (N, D * H), dt)) if kind == "lstm" else None
    upstream = engine.Upstream(dy=dev(dy), dhn=view(dev(dhn)),
                               dcn=view(dev(dcn)) if dcn is not None else None)
    grads = rec.backward(fwd, layer, upstream, engine.GradTargets(dh0, dc0=dc0), full=True)
    dR = grads.dR

    # ---- the reference, row by row on the valid prefix
    y_ref = np.zeros((T, N, D * H))
    c_ref = np.zeros((T, N, D * H))
    hn_ref, cn_ref = np.zeros((N, D * H)), np.zeros((N, D * H))
    dgx_ref = np.zeros((T, N, D * G * H))
    dR_ref = np.zeros_like(R)
    dpeep_ref = np.zeros((D, 4 * H))
    dh0_ref, dc0_ref = np.zeros((N, D * H)), np.zeros((N, D * H))
    ref_desc = (M.LSTMDescriptor(bidirectional=True, produce_cell=True) if kind == "lstm"
                else M.GRUDescriptor(**{**flags, "bidirectional": True}))
    for n, L in enumerate(lens):
        row = {k: (v[:L, n:n + 1] if k in ("source", "mask") else v[n:n + 1]
                   if k in ("init_state", "init_cell") else v) for k, v in inputs.items()}
        args = {k: v for k, v in row.items() if k not in ("source", "recurrent_weight")}
        out = (M.lstm if kind == "lstm" else M.gru)(row["source"], R, **args,
                                                    descriptor=ref_desc)
        y_ref[:L, n] = out[0][:, 0]
        if kind == "lstm":
            c_ref[:L, n] = out[1][:, 0]
        finals = [(out[0], hn_ref, "init_state")]
        if kind == "lstm":
            finals.append((out[1], cn_ref, "init_cell"))
        for seq, dst, init in finals:
            if L == 0:
                dst[n] = row[init][0]          # length 0: the initial state is the final one
            else:
                dst[n, :H] = seq[L - 1, 0, :H]  # forward: the row's last valid step
                dst[n, H:] = seq[0, 0, H:]      # reverse: after t = 0
        g = dict(zip(grad_names(kind, row), ref_gradients(
            kind, row, desc, dy[:L, n:n + 1], dhn[n:n + 1],
            dcn[n:n + 1] if dcn is not None else None)))
        dgx_ref[:L, n] = g["source"][:, 0]
        dR_ref += g["recurrent_weight"]
        dh0_ref[n] = g["init_state"][0]
        if kind == "lstm":
            dpeep_ref += g["peephole"]
            dc0_ref[n] = g["init_cell"][0]

    assert_close(fwd.y.get(), y_ref, what="y")
    assert_close(hn.array.get(), hn_ref, what="final h")
    assert_close(grads.dgx.get(), dgx_ref, what="dgx", part="gradient")
    assert_close(dR.get().reshape(dR_ref.shape), dR_ref, what="dR", part="gradient")
    assert_close(dh0.array.get(), dh0_ref, what="dh0", part="gradient")
    if kind == "lstm":
        assert_close(fwd.cs.get(), c_ref, what="c")
        assert_close(cn.array.get(), cn_ref, what="final c")
        assert_close(grads.dpeep.get().reshape(D, 4 * H), dpeep_ref, what="dpeep",
                     part="gradient")
        assert_close(dc0.array.get(), dc0_ref, what="dc0", part="gradient")


# =================================================================================================
# Larger sizes


LARGE = [
    pytest.param(S.Shape("wide", T=19, N=37, I=5, H=19), np.float32, id="T19-N37-H19-f32"),
    pytest.param(S.Shape("batch_600", T=2, N=600, I=3, H=3), np.float64, marks=pytest.mark.fp64,
                 id="T2-N600-H3-f64"),
    pytest.param(S.Shape("long", T=300, N=3, I=2, H=5), np.float64, marks=pytest.mark.fp64,
                 id="T300-N3-H5-f64"),
]


@pytest.mark.parametrize("shape,dtype", LARGE)
@pytest.mark.parametrize("cell", list(CELLS))
def test_larger_sizes(device, cell, shape, dtype):
    """Realistic batch sizes (> 512 rows) and long sequences (no drift over 300 steps)."""
    _check(device, cell, shape, dtype, seed=shape.N + shape.T)


# =================================================================================================
# Launches


@pytest.mark.parametrize("cell", list(CELLS))
def test_launches_are_counted_and_linear_in_T(device, cell):
    """Every kernel goes through programs.enqueue (launch_count grows); one sequence is at most
    two step kernels per step (reset-before GRU) plus a constant, for both directions at once."""
    kind, flags = CELLS[cell]
    desc = desc_of(kind, bidirectional=True, **flags)
    T = 9
    inputs = S.layer_inputs(kind, S.Shape("launch", T=T, N=5, I=3, H=11), bidirectional=True,
                            seed=50, dtype=np.float32)
    src, R = inputs.pop("source"), inputs.pop("recurrent_weight")
    op = {"rnn": rc.single_gate_rnn, "lstm": rc.lstm, "gru": rc.gru}[kind]
    op(src, R, **inputs, descriptor=desc, device=device)          # compile outside the count
    before = launch_count()
    op(src, R, **inputs, descriptor=desc, device=device)
    launched = launch_count() - before
    steps = 2 if cell == "gru-before" else 1
    assert 1 <= launched <= steps * T + 12, f"{launched} launches for T={T}"


@pytest.mark.parametrize("in_kernel", [True, False])
@pytest.mark.parametrize("I", [8, 1, 19])
def test_whole_sequence_forward_with_and_without_the_input_product_inside(device, monkeypatch,
                                                                          in_kernel, I):
    """A whole-sequence layer computes ``x W^T + b`` inside its kernel only while its packs fit
    ``REC_SEQ_BYTES`` (``LayerPlan.projects_in_kernel``); a larger one runs the input GEMM first
    and the same whole-sequence kernel on its gates. Both give the reference's answer, forward
    and gradients, for every cell that runs whole-sequence kernels, and for input widths that
    are no multiple of the pack's tile (I = 1, 19: W's last columns packed one by one)."""
    needs_fp64(device)
    seq_bytes = (1 << 20) if in_kernel else 256          # 4 x 16 x 16 x 8 bytes > 256
    override_tuning(device, monkeypatch, REC_SEQ_BYTES=seq_bytes, REC_SEQ_MAX_BYTES=1 << 30,
                    REC_SEQ_STREAM_BYTES=1 << 40)
    # (a work-group per compute unit, which larger whole-sequence layers need: N rows over
    # REC_NB rows per tile)
    H = 16
    N = int(device.tuning("recurrence")["REC_NB"]) * device.info.compute_units + 1
    ran = []
    for cell in ("lstm", "gru-after", "rnn"):
        kind, flags = CELLS[cell]
        rec = engine.Recurrence(device, np.float64, CellSpec(kind, *(
            ((0, 1, 2, 3), (3, 3, 2, 3)) if kind == "lstm" else
            ((1, 0, 2), (3, 3, 2)) if kind == "gru" else ((0,), (2,)))), T=5, N=N, H=H)
        if not rec.plan.fused:
            continue                # (a cell whose step is two kernels: per step either way)
        assert rec.plan.projects_in_kernel(I) == in_kernel
        desc = desc_of(kind, **flags)
        inputs = S.layer_inputs(kind, S.Shape("xw", T=5, N=N, I=I, H=H), seed=71,
                                dtype=np.float64)
        check_against_reference(device, kind, desc, inputs, np.float64)
        ran.append(cell)
    assert "lstm" in ran and "rnn" in ran, ran


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_whole_sequence_work_group_as_one_loop_or_a_work_item_per_unit_vector(device,
                                                                             monkeypatch, dtype):
    """A whole-sequence work-group holds every unit of its direction either as one work-item
    that runs the vectors of units in turn (``REC_SEQ_LOOP`` = 1, CPUs) or as a work-item per
    vector (0, GPUs). Each unit's arithmetic is the same either way, so a two-layer
    bidirectional call with ragged lengths (three vectors of units per direction, batch rows
    over several groups; 16-bit storage widened and narrowed inside the kernels) gives the same
    bits forward and backward, for every cell that runs whole-sequence kernels; and the layers
    did run them, in the mode asked for."""
    dt = np.dtype(dtype)
    T, I = 7, 5
    N = int(device.tuning("recurrence")["REC_NB"]) * device.info.compute_units + 3
    vw = plan._vector_width(int(device.tuning("recurrence")["REC_VW"]), 24)
    H = 3 * vw                              # three vectors of units
    rng = np.random.default_rng(5)
    lens = np.array([T, 1, 0, T - 2, 3] * N, np.int32)[:N]
    for mode in ("lstm", "gru", "rnn_tanh"):
        size = rc.cudnn_rnn_params_size(2, H, I, rnn_mode=mode, direction="bidirectional")

        def arr(*shape):
            return cla.to_device(device.queue, (0.4 * rng.standard_normal(shape)).astype(dt))

        x, h0, c0, params, dy, dhn = (arr(T, N, I), arr(4, N, H), arr(4, N, H), arr(size),
                                      arr(T, N, 2 * H), arr(4, N, H))
        c0 = c0 if mode == "lstm" else None
        dcn = arr(4, N, H) if mode == "lstm" else None
        lengths = cla.to_device(device.queue, lens)
        results = {}
        for loop in (1, 0):
            override_tuning(device, monkeypatch, REC_SEQ_LOOP=loop, **WHOLE_SEQUENCE)
            getattr(device, "_pyrnn_layers", {}).clear()
            kw = dict(rnn_mode=mode, direction="bidirectional", device=device)
            y, hn, cn, reserve, host = rc.cudnn_rnn(x, h0, c0, params, lengths, **kw)
            grads = rc.cudnn_rnn_backprop(x, h0, c0, params, lengths, y, hn, cn, dy, dhn, dcn,
                                          reserve, host, **kw)
            used = [layer for layer in getattr(device, "_pyrnn_layers", {}).values()
                    if layer.N == N]
            assert used and all(layer.fused and layer.seq_loop == bool(loop) for layer in used)
            results[loop] = [a.get() for a in (y, hn, cn, *grads) if a is not None and a.size]
        for a, b in zip(results[1], results[0]):
            np.testing.assert_array_equal(a, b, err_msg=f"{mode} {dtype}")
        assert np.isfinite(np.concatenate([a.ravel().astype(np.float64) for a in results[1]])).all()


def test_step_launcher_checks_once_and_counts_every_launch(device):
    """``programs.launcher`` (the step loop's launches): the sizes are checked when it is made
    (the same ValueErrors as ``enqueue``), every call launches and is counted, and an empty
    global size launches nothing."""
    from pyrnn_cl import programs

    knl = engine.util_program(device, np.float32).kernel("pyrnn_mul")
    with pytest.raises(ValueError, match="not a multiple of local size"):
        programs.launcher(device.queue, knl, (6,), (4,))
    with pytest.raises(ValueError, match="differ in rank"):
        programs.launcher(device.queue, knl, (4, 1), (4,))
    a = cla.to_device(device.queue, np.arange(8, dtype=np.float32))
    b = cla.to_device(device.queue, np.full(8, 3, np.float32))
    y = cla.zeros(device.queue, 8, np.float32)
    knl.set_args(y.base_data, a.base_data, b.base_data)
    before = launch_count()
    programs.launcher(device.queue, knl, (0,))()
    assert launch_count() == before
    launch = programs.launcher(device.queue, knl, (8,), (4,))
    launch()
    launch()
    assert launch_count() == before + 2
    assert np.array_equal(y.get(), np.arange(8) * 3.0)


# =================================================================================================
# Programs by part: a layer builds the kernels it runs


#: (BWD_PROGRAM, REC_PART) of the recurrence programs an LSTM's forward and gradients build, by
#: launch kind (engine.KERNEL_PARTS: 1 step kernels, 2 whole-sequence, 3 helpers, 0 all)
PARTS_BUILT = {
    "whole-sequence": {(0, 2), (0, 3), (1, 2)},
    "per-step": {(0, 1), (0, 3), (1, 1)},
    "per-step-split": {(0, 1), (0, 3), (1, 0)},    # (a backward with lanes: one program)
}


@pytest.mark.parametrize("at_launch", [False, True], ids=["at-build", "at-launch"])
@pytest.mark.parametrize("launch", list(PARTS_BUILT))
def test_a_layer_builds_only_the_parts_it_runs(device, monkeypatch, launch, at_launch):
    """A layer's recurrence programs are built per part of ``cl/recurrence.cl``, on the first
    use of one of the part's kernels: a whole-sequence layer never compiles the step kernels
    (nor a per-step layer the whole-sequence ones), and the helpers come in a program of their
    own. An implementation that compiles every kernel of a program at build time (Intel's CPU
    runtime, GPU drivers) compiled all of them for each layer. One that compiles kernels at
    their first launch (``compiles_kernels_at_launch``: PoCL) gets one program per direction,
    as each build costs a front end there (either profile value on any device: the programs
    built are what is checked)."""
    kinds = {"whole-sequence": dict(WHOLE_SEQUENCE, REC_SEQ_LOOP=1),
             "per-step": dict(PER_STEP, **ONE_LANE),
             "per-step-split": dict(PER_STEP, REC_KS=4)}
    override_tuning(device, monkeypatch, REC_VW=4, REC_NB=2, **kinds[launch])
    monkeypatch.setattr(device.profile, "compiles_kernels_at_launch", at_launch)
    monkeypatch.setattr(device, "_pyrnn_layers", None, raising=False)   # (fresh layers)
    asked, programs = [], []
    real = engine.get_program

    def spy(dev, source, defines=None, **kw):
        if source == "recurrence.cl":
            asked.append((int(defines.get("BWD_PROGRAM", 0)), int(defines["REC_PART"])))
            programs.append(tuple(sorted(defines.items())))
        return real(dev, source, defines, **kw)

    monkeypatch.setattr(engine, "get_program", spy)
    rng = np.random.default_rng(5)
    T, N, I, H = 3, 5, 4, 8
    x, R, W = (rng.standard_normal(s).astype(np.float32)
               for s in ((T, N, I), (4 * H, H), (4 * H, I)))
    desc = rc.LSTMDescriptor(training=True)
    y, cs, z = rc.lstm(x, R, W, descriptor=desc, device=device)
    rc.lstm_gradients(x, R, np.ones_like(y), z, cs, W, descriptor=desc, device=device)
    assert set(asked) == ({(0, 0), (1, 0)} if at_launch else PARTS_BUILT[launch])
    assert len(programs) == len(set(programs)), "each program is asked for once per layer"


@pytest.mark.parametrize("cell", ["lstm-peep-proj", "gru-before"])
def test_kernel_parts_match_the_source(device, cell):
    """``engine.KERNEL_PARTS`` and the ``REC_PART`` guards of ``cl/recurrence.cl`` agree: each
    part's program holds exactly the kernels the table gives it, and together the parts hold
    every kernel of the whole program (an LSTM with peepholes and a projection: pyrnn_proj,
    pyrnn_bwd_proj and pyrnn_peep_grad; a reset-before GRU: pyrnn_fwd_b and pyrnn_bwd_b)."""
    from pyrnn_cl.programs import get_program

    if cell == "gru-before":
        spec = CellSpec("gru", (0, 1, 2), (2, 2, 3), reset_after=False)
        rec = engine.Recurrence(device, np.float32, spec, T=3, N=2, H=8)
    else:
        spec = CellSpec("lstm", (0, 1, 2, 3), (2, 2, 3, 2), peephole=PEEP_MPS)
        rec = engine.Recurrence(device, np.float32, spec, T=3, N=2, H=8, P=4, has_peep=True)
    backward = dict(HAS_DY=1, HAS_DHN=1, HAS_DCN=int(spec.kind == "lstm"), REC_NB=rec.nb,
                    BWD_PROGRAM=1)

    def kernels(defines, part):
        return set(get_program(device, "recurrence.cl", dict(defines, REC_PART=part),
                               prelude=(rec.cell.source,)).kernel_names)

    for extra in ({}, backward):
        defines = rec._program(**extra).defines
        whole = kernels(defines, 0)
        assert whole and whole <= set(engine.KERNEL_PARTS)
        for part in (1, 2, 3):
            assert kernels(defines, part) == {k for k in whole
                                              if engine.KERNEL_PARTS[k] == part}, part
    # a backward's helper part holds no kernel: a program without kernels says so (asking one
    # for its kernels' names crashed the process on NVIDIA's OpenCL)
    assert kernels(dict(defines, BWD_PROGRAM=1), 3) == set()


# =================================================================================================
# Host-side helpers of the engine (per-call costs)


def test_shared_zeros_are_never_written(device):
    """Absent initial states, final-state gradients and zero rows read one shared zero buffer
    (``_arrays.read_only_zeros``) through stride-0 views: after forward and gradient ops of every
    cell without initial states and without state gradients, the buffer is still all zeros, and
    the results still match the reference."""
    from pyrnn_cl._arrays import read_only_zeros

    for cell in CELLS:
        kind, flags = CELLS[cell]
        desc = desc_of(kind, bidirectional=True, **flags)
        inputs = S.layer_inputs(kind, S.Shape("zeros", T=4, N=3, I=5, H=7), bidirectional=True,
                                seed=60, dtype=np.float32)
        for name in ("init_state", "init_cell"):
            inputs.pop(name, None)
        check_against_reference(device, kind, desc, inputs, np.float32, which=("dy",))
    zeros = read_only_zeros(device, np.float32, 1)
    assert zeros.size >= 4 * 7
    assert not np.any(zeros.get())


def test_empty_arrays_are_plain_pyopencl_arrays(device):
    """``_arrays.empty`` (pyopencl's fast constructor path) gives what ``cla.empty`` gives."""
    from pyrnn_cl._arrays import empty

    for shape in [(3, 0, 2), (5,), (2, 3, 7), ()]:
        a, b = empty(device.queue, shape, np.float64), cla.empty(device.queue, shape, np.float64)
        assert (a.shape, a.strides, a.size, a.nbytes, a.dtype, a.offset) == \
            (b.shape, b.strides, b.size, b.nbytes, b.dtype, b.offset)
        assert a.flags.c_contiguous and a.queue is device.queue
        if a.size:
            a.fill(2.5)
            assert np.all(a.get() == 2.5)


def test_set_args_declares_scalar_types(device):
    """``programs.set_args`` declares the scalar types from the values (int32/int64/real) once
    per kernel object and again when they change; the kernel sees the values."""
    from pyrnn_cl.programs import enqueue, set_args

    q = device.queue
    knl = engine.util_program(device, np.float32).kernel("pyrnn_copy3")
    src = cla.to_device(q, np.arange(12, dtype=np.float32))
    dst = cla.zeros(q, (12,), np.float32)
    i64, f32 = np.int64, np.float32
    set_args(knl, dst.base_data, i64(0), i64(0), i64(0), i64(1), src.base_data, i64(2), i64(0),
             i64(0), i64(1), f32(2.0), f32(0.0))
    assert knl._pyrnn_sig[1] == np.dtype(np.int64) and knl._pyrnn_sig[0] is None
    enqueue(q, knl, (5, 1, 1))
    assert np.array_equal(dst.get()[:5], 2 * np.arange(2, 7))
    set_args(knl, dst.base_data, i64(6), i64(0), i64(0), i64(1), src.base_data, i64(0), i64(0),
             i64(0), i64(1), f32(1.0), f32(1.0))
    enqueue(q, knl, (3, 1, 1))
    assert np.array_equal(dst.get()[6:9], np.arange(3))


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("H", [1, 6, 12, 32, 48])
def test_vectorised_util_kernels(device, dtype, H):
    """``add_rows``, ``act_map`` and ``multiply`` (util.cl, compiled with the widest vector
    dividing the row length: 1, 2, 4, 16 or 16/8 here) against NumPy, every activation."""
    if dtype == F64:
        needs_fp64(device)
    rng = np.random.default_rng(H)
    q = device.queue
    rows, D, G = 5, 2, 4
    a = rng.standard_normal((rows, D, G * H)).astype(dtype)
    c = rng.standard_normal((rows, D, H)).astype(dtype)
    cd = cla.to_device(q, c)
    for name, code in ACTIVATIONS.items():
        act = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0), "tanh": np.tanh,
               "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
               "hard_sigmoid": lambda v: np.clip(0.2 * v + 0.5, 0, 1)}[name]
        z = cla.empty(q, c.shape, dtype)
        engine.act_map(device, dtype, z, cd, code)
        np.testing.assert_allclose(z.get(), act(c.astype(np.float64)), rtol=1e-6, atol=1e-6,
                                   err_msg=name)
    y = cla.empty(q, c.shape, dtype)
    engine.multiply(device, dtype, y, cd, cla.to_device(q, a[:, :, 3 * H:].copy()))
    np.testing.assert_allclose(y.get(), a[:, :, 3 * H:] * c.astype(np.float64), rtol=1e-6,
                               atol=1e-6)
    b = rng.standard_normal(G * H).astype(dtype)
    m = cla.to_device(q, a.reshape(rows * D, G * H))
    engine.add_rows(device, dtype, m, rows * D, G * H, cla.to_device(q, b))
    np.testing.assert_allclose(m.get(), a.reshape(rows * D, G * H) + b, rtol=1e-6, atol=1e-6)


def test_temporaries_come_from_a_pool_on_in_order_queues(device):
    """``_arrays.temporary``: pooled memory on the device's in-order queue (a dropped array's
    memory is handed to the next request of that size), plain buffers on an out-of-order queue;
    ``release_scratch`` frees what the pools hold."""
    import pyopencl as cl

    from pyrnn_cl._arrays import temporary
    from pyrnn_cl.devices import Device
    from pyrnn_cl.gemm import release_scratch

    a = temporary(device, (1000, 3), np.float32)
    assert type(a.base_data).__name__ == "PooledBuffer" and a.shape == (1000, 3)
    ptr = a.base_data.int_ptr
    del a
    b = temporary(device, (3000,), np.float32)
    assert b.base_data.int_ptr == ptr          # the same memory, reused
    b.fill(1.0)
    assert np.all(b.get() == 1.0)
    release_scratch()
    ooo = cl.CommandQueue(device.context, device.cl_device,
                          properties=cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE)
    other = Device(device.cl_device, context=device.context, queue=ooo, info=device.info)
    c = temporary(other, (10,), np.float32)
    assert isinstance(c.base_data, cl.Buffer) and type(c.base_data).__name__ != "PooledBuffer"


def test_layers_are_reused_per_arguments_and_tuning(device, monkeypatch):
    """``Recurrence.cached``: the same layer for the same device, dtype, cell, sizes and
    tuning (what the dialects call per op); a new one when a size, a flag or the recurrence
    tuning differs; and the memory check still runs on a reused layer (a device whose limits
    are lower now refuses it)."""
    from pyrnn_cl.errors import UnsupportedError

    cell = CellSpec("lstm", (0, 1, 2, 3), (3, 3, 2, 3))
    kw = dict(T=7, N=5, H=11)
    first = engine.Recurrence.cached(device, np.float32, cell, **kw)
    assert engine.Recurrence.cached(device, np.float32, cell, **kw) is first
    assert engine.Recurrence.cached(device, np.float32, cell, **dict(kw, N=6)) is not first
    assert engine.Recurrence.cached(device, np.float32, cell, has_len=True, **kw) is not first
    override_tuning(device, monkeypatch, REC_NB=3, REC_ACC_MAX=0)
    tuned = engine.Recurrence.cached(device, np.float32, cell, **kw)
    assert tuned is not first and tuned.nb == 3
    override_tuning(device, monkeypatch)
    assert engine.Recurrence.cached(device, np.float32, cell, **kw) is first
    monkeypatch.setattr(device, "_pyrnn_mem_limits", (1000, 1000), raising=False)
    with pytest.raises(UnsupportedError, match="T=7, N=5, H=11"):
        engine.Recurrence.cached(device, np.float32, cell, **kw)


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("cell", list(CELLS))
def test_input_product_in_the_sequence_kernel(device, monkeypatch, cell, dtype):
    """A small layer whose input width is a multiple of its vector width computes x W^T + b in
    the whole-sequence kernel (``HAS_XW``: no input GEMM); bidirectional, with the mask and
    peepholes of ``layer_inputs``, float32 and float64, against the reference. Layers that
    cannot (two-phase GRU, or a device without whole-sequence kernels) still run the GEMM."""
    if dtype == F64:
        needs_fp64(device)
    kind, flags = CELLS[cell]
    calls = []
    real_projection = engine.input_projection

    def counting(*args, **kwargs):
        calls.append(1)
        return real_projection(*args, **kwargs)

    monkeypatch.setattr(engine, "input_projection", counting)
    desc = desc_of(kind, bidirectional=True, **flags)
    H = 16
    inputs = S.layer_inputs(kind, S.Shape("xw", T=6, N=5, I=32, H=H), bidirectional=True,
                            seed=70, dtype=dtype)
    check_against_reference(device, kind, desc, inputs, dtype)
    G = S.GATES[kind]
    seq_bytes = int(device.tuning("recurrence").get("REC_SEQ_BYTES", 0))
    in_kernel = cell != "gru-before" and 0 < G * H * H * np.dtype(dtype).itemsize <= seq_bytes
    # the training forward and the gradient op's own forward-free path: no GEMM when in-kernel
    assert (len(calls) == 0) == in_kernel, (cell, len(calls))


def test_whole_sequence_rule():
    """Which layers run the whole sequence in one launch (``plan._whole_sequence_fits``), from
    the three tuning values as documented: small R always; a larger R (up to the maximum) only
    with a work-group per compute unit and at most the streamed-bytes limit per step."""
    fits = plan._whole_sequence_fits
    t = {"REC_SEQ_BYTES": 256, "REC_SEQ_MAX_BYTES": 4096, "REC_SEQ_STREAM_BYTES": 16384}
    assert fits(t, 2, 256, 1)                  # small: always, even one group on two units
    assert not fits(t, 2, 0, 4)                # no weights (H = 0): never
    assert not fits(t, 2, 257, 1)              # larger, fewer groups than compute units
    assert fits(t, 2, 257, 2)
    assert fits(t, 2, 4096, 4)                 # 4 x 4096 = the stream limit
    assert not fits(t, 2, 4096, 5)             # over the stream limit
    assert not fits(t, 1, 4097, 1)             # over the maximum
    assert not fits({"REC_SEQ_BYTES": 256}, 1, 257, 8)   # no maximum given: small layers only
    assert not fits({}, 1, 1, 1)                         # no values: never
    # a split size: R over it whose share per compute unit fits it runs per step (a slice in
    # each unit's cache), larger R whole-sequence again; small R is unaffected
    t = dict(t, REC_SEQ_SPLIT_BYTES=1024)
    assert fits(t, 2, 256, 1) and fits(t, 2, 1024, 2)
    assert not fits(t, 2, 1025, 2) and not fits(t, 2, 2048, 2)
    assert fits(t, 2, 2049, 2) and fits(t, 2, 4096, 2)
    assert not fits(t, 4, 4096, 4)                       # 4 units: 4096 / 4 fits a unit's cache
    assert fits(dict(t, REC_SEQ_BYTES=4096), 4, 4096, 4)  # (small still wins)


@pytest.mark.parametrize("cell", list(CELLS))
def test_whole_sequence_kernels_at_mid_sizes(device, monkeypatch, cell):
    """A layer whose R is over ``REC_SEQ_BYTES`` (H = 272: 296 KiB for the vanilla cell, up to
    1.2 MiB for the LSTM), bidirectional, with a work-group per compute unit: forward and
    gradients against the reference with the device's own tuning, and on a device whose
    tuning gives such layers the whole-sequence kernels (PoCL), they ran."""
    kind, _ = CELLS[cell]
    launched = []
    real = engine.Recurrence._fused_launch

    def recording(self, prog, name, args):
        ran = real(self, prog, name, args)
        launched.append((name, ran))
        return ran

    monkeypatch.setattr(engine.Recurrence, "_fused_launch", recording)
    cu = max(1, device.info.compute_units)
    N = 4 * ((cu + 1) // 2) + 1            # 2 x ceil(N/4) >= compute units (REC_NB = 4)
    _check(device, cell, S.Shape("mid", T=5, N=N, I=32, H=272), np.float32, seed=272)
    G = S.GATES[kind]
    tuning = device.tuning("recurrence")
    nb = min(int(tuning.get("REC_NB", 4)), 1 << max(0, N - 1).bit_length())
    expect = cell != "gru-before" and plan._whole_sequence_fits(
        tuning, cu, G * 272 * 272 * 4, 2 * ((N + nb - 1) // nb))
    assert launched, "no layer ran"
    assert all(ran == expect for _, ran in launched), (launched, expect)
    assert {name for name, _ in launched} == {"pyrnn_fwd_seq", "pyrnn_bwd_seq"}


@pytest.mark.parametrize("host", [False, True], ids=["device-arrays", "numpy"])
@pytest.mark.parametrize("training", [False, True])
def test_results_an_inference_forward_drops_come_from_the_pool(device, monkeypatch, training,
                                                               host):
    """An MPSGraph LSTM forward that returns only h (inference) takes the saved gates and the
    cell states it does not return from the pool (fresh pages per call cost Intel's CPU
    runtime 0.7-0.9 ms of a 3 ms tiny LSTM forward); a training forward on device arrays,
    which returns them, gets arrays of its own where the device's memory is the host's, and
    pooled ones elsewhere (``_arrays.pools_results``). With NumPy arrays on a device whose
    memory is not the host's, every result is copied back before the call returns, so they all
    come from the pool (``_arrays.results_stay``; where the memory is the host's, results are
    mapped in place and keep buffers of their own). h and c equal the float64 reference each
    way (the saved gates are the implementation's own)."""
    pooled = []
    real = engine.temporary

    def recording(dev, shape, dtype):
        pooled.append(tuple(shape))
        return real(dev, shape, dtype)

    for module in (engine, rc._arrays):       # (the engine's and its results' pool requests)
        monkeypatch.setattr(module, "temporary", recording)
    T, N, I, H = 7, 5, 3, 11
    a = S.layer_inputs("lstm", S.Shape("p", T=T, N=N, I=I, H=H),
                       present=("input_weight", "bias", "init_state", "init_cell"))
    args = {k: v.astype(np.float32) for k, v in a.items()}
    if not host:
        args = {k: cla.to_device(device.queue, v) for k, v in args.items()}
    got = rc.lstm(**args, descriptor=rc.LSTMDescriptor(training=training), device=device)
    got = [g if isinstance(g, np.ndarray) else g.get() for g in got]
    all_pooled = ((host and not rc._arrays.shares_host_memory(device))
                  or rc._arrays.pools_results(device))
    sav, cs = {(T, N, 4 * H), (T * N, 4 * H)}, (T, N, H)
    assert bool(sav & set(pooled)) == (all_pooled or not training), pooled
    assert (cs in pooled) == (all_pooled or not training), pooled
    assert ((T, N, H) in pooled) == (all_pooled or not training), pooled
    want = M.lstm(**a, descriptor=rc.LSTMDescriptor(training=training))
    assert len(got) == len(want) == (3 if training else 1)
    for k, (g, w) in enumerate(zip(got[:2], want[:2])):
        assert_close(g, w, np.float32, f"lstm forward result {k}")


@pytest.mark.parametrize("per_step", [False, True], ids=["whole-sequence", "per-step"])
@pytest.mark.parametrize("kind", ["lstm", "gru-after", "gru-before"])
def test_inference_forward_stores_no_saved_gates(device, monkeypatch, kind, per_step):
    """A forward whose caller drops the saved gates (an inference call) does not store them:
    ``gx`` keeps the input projection the steps read, and y and c are those of a forward that
    stores them, N = 5 in tiles of 4 rows (a padded tile). A two-phase cell (a GRU resetting
    before its product), whose second kernel reads them, still stores them."""
    override_tuning(device, monkeypatch, **(PER_STEP if per_step else WHOLE_SEQUENCE))
    cell = kind.split("-")[0]
    flags = {"gru-after": {"reset_after": True}, "gru-before": {"reset_after": False}}
    spec = _cell_spec(cell, desc_of(cell, **flags.get(kind, {})))
    q, dt = device.queue, np.float32
    T, N, H = 4, 5, 8
    rng = np.random.default_rng(11)
    g = rng.standard_normal((T, N, spec.G * H)).astype(dt)
    R = cla.to_device(q, (0.3 * rng.standard_normal((spec.G * H, H))).astype(dt))
    h0 = engine.StateView(cla.to_device(q, rng.standard_normal((N, H)).astype(dt)), H, H)
    c0 = (engine.StateView(cla.to_device(q, rng.standard_normal((N, H)).astype(dt)), H, H)
          if spec.has_c else None)
    rec = engine.Recurrence(device, dt, spec, T=T, N=N, H=H)
    assert rec.fused == (not per_step and not spec.two_phase)
    layer = engine.LayerInputs(R, h0, c0=c0)
    kept, dropped = cla.to_device(q, g), cla.to_device(q, g)
    a = rec.forward(kept, layer)
    b = rec.forward(dropped, layer, dropped=("sav",))
    assert np.array_equal(a.y.get(), b.y.get())
    if spec.has_c:
        assert np.array_equal(a.cs.get(), b.cs.get())
    assert not np.array_equal(kept.get(), g)                  # the saved gates
    assert np.array_equal(dropped.get(), g) != spec.two_phase


@pytest.mark.parametrize("H,K", [(16, 32), (13, 29)], ids=["whole", "partial"])
@pytest.mark.parametrize("tile", [8, 2, 1])
@pytest.mark.parametrize("rows_per_item", [16, 1, 7], ids=["cpu-chunks", "one-row", "ragged"])
def test_weight_packs_match_their_layouts(device, monkeypatch, rows_per_item, tile, H, K):
    """``Recurrence.pack`` and ``pack_t`` against their layouts written out in NumPy, two
    directions, gates in a permuted block order: ``rpk[d][j][m][k][v] = R[d][blk_k*H + j*VW +
    v][m]`` and ``wt[d][c][r][v] = W[d][r][c*VW + v]``, zero where ``j*VW + v`` is past H (or
    ``c*VW + v`` past the columns): H = 13 and 29 columns in vectors of 16 (or 8), whose last
    vectors are partial, the padding written over a pooled buffer's stale values. The pack
    through register tiles of 8, 2 and 1 values square (``PACK_TB``; tiles past H of nothing
    but zeros), each work-item over every column (CPUs) or one tile's (GPUs); the transposed
    pack with its rows split over work-items in chunks of 16 (CPUs), 1 (GPUs) and 7 (rows not
    a multiple of it)."""
    monkeypatch.setattr(engine, "_PACK_T_ROWS", rows_per_item)
    monkeypatch.setattr(engine, "_PACK_TILE", tile)
    monkeypatch.setattr(engine, "cpu_like", lambda *a: rows_per_item != 1)
    if int(device.tuning("recurrence")["REC_VW"]) < 8:
        override_tuning(device, monkeypatch, REC_VW=8, REC_TILE_MAX=0)
    spec = _cell_spec("gru", desc_of("gru"))
    D, G = 2, 3
    rec = engine.Recurrence(device, np.float32, spec, T=3, N=2, H=H, D=D)
    vw, q = rec.vw, device.queue
    assert rec._pack_tile == min(tile, vw) and vw >= 8
    assert rec.plan.tail == (H == 13)
    rng = np.random.default_rng(3)
    padded = -(-H // vw) * vw
    for _ in range(2):                # (the second pack may reuse the first one's pooled buffer)
        R = rng.standard_normal((D, G * H, K)).astype(np.float32)
        blocks = (2, 0, 1)
        got = rec.pack(cla.to_device(q, R.ravel()), H, K, G, blocks).get()
        Rp = np.zeros((D, G, padded, K), np.float32)
        Rp[:, :, :H] = R.reshape(D, G, H, K)
        want = Rp.reshape(D, G, padded // vw, vw, K)[:, list(blocks)].transpose(0, 2, 4, 1, 3)
        assert np.array_equal(got, want.ravel())
        rows, cols = G * H + 5, K     # (a projection's P rows need not be whole chunks)
        W = rng.standard_normal((D, rows, cols)).astype(np.float32)
        got = rec.pack_t(cla.to_device(q, W.ravel()), rows, cols).get()
        Wp = np.zeros((D, rows, -(-cols // vw) * vw), np.float32)
        Wp[..., :cols] = W
        want = Wp.reshape(D, rows, -1, vw).transpose(0, 2, 1, 3)
        assert np.array_equal(got, want.ravel())


@pytest.mark.parametrize("gemm", ["device's", "tiled"])
def test_launches_on_a_per_local_size_compiler_name_a_fixed_few_local_sizes(device, monkeypatch,
                                                                            gemm):
    """Where an implementation compiles a work-group function per local size (PoCL; here any
    device told so), no launch leaves the local size to the driver, whose pick follows the
    shape (one compile per shape), and the launches that need no particular one take the
    profile's few: a float16 two-layer bidirectional LSTM with a projection, lengths and
    dropout (forward and backward: packs, conversions, final states, input gathers, copies),
    and a peephole BlockLSTM, at two shapes that no power of two divides alike. With the
    device's GEMM, and with the tiled GEMM of GPUs forced on (its work-group is its tile's)."""
    import pyrnn_cl.programs as programs
    monkeypatch.setattr(device.profile, "specialises_per_local_size", True)
    if gemm == "tiled":
        override_tuning(device, monkeypatch, "gemm", GEMM_LOCAL=1)
    launches = []
    real = programs._launch

    def launch(queue, kernel, global_size, local_size, wait_for=None):
        launches.append((kernel.function_name, global_size, local_size))
        return real(queue, kernel, global_size, local_size, wait_for)

    monkeypatch.setattr(programs, "_launch", launch)
    rng = np.random.default_rng(5)
    q = device.queue
    for T, N, H, I in ((3, 5, 7, 3), (4, 6, 12, 5)):
        L, P = 2, H - 2
        h = cla.to_device(q, rng.standard_normal((2 * L, N, P)).astype(np.float16))
        c = cla.to_device(q, rng.standard_normal((2 * L, N, H)).astype(np.float16))
        x = cla.to_device(q, rng.standard_normal((T, N, I)).astype(np.float16))
        size = rc.cudnn_rnn_params_size(L, H, I, direction="bidirectional", num_proj=P)
        w = cla.to_device(q, (0.3 * rng.standard_normal(size)).astype(np.float16))
        lens = cla.to_device(q, np.array([T] + [1] * (N - 1), np.int32))
        kw = dict(direction="bidirectional", num_proj=P, dropout=0.5, seed=3, device=device)
        y, hn, cn, res, host = rc.cudnn_rnn(x, h, c, w, lens, **kw)
        rc.cudnn_rnn_backprop(x, h, c, w, lens, y, hn, cn, y, hn, cn, res, host, **kw)
        x4 = cla.to_device(q, rng.standard_normal((T, N, I)).astype(np.float32))
        s4 = cla.to_device(q, rng.standard_normal((N, H)).astype(np.float32))
        w4 = cla.to_device(q, rng.standard_normal((I + H, 4 * H)).astype(np.float32))
        p4 = cla.to_device(q, rng.standard_normal(H).astype(np.float32))
        b4 = cla.to_device(q, rng.standard_normal(4 * H).astype(np.float32))
        rc.block_lstm(T, x4, s4, s4, w4, p4, p4, p4, b4, use_peephole=True, device=device)
    q.finish()
    names = {name for name, _, _ in launches}
    assert {"pyrnn_pack", "pyrnn_pack_t", "pyrnn_final", "pyrnn_narrow8"} <= names, names
    free = [(n, g) for n, g, local in launches if local is None]
    assert not free, f"launches leaving the local size to the driver: {free}"
    # (the step kernels' work-groups follow the tiles: REC_WG rows, a direction's units; the
    # tiled GEMM's (GEMM_LOCAL, the GPUs') is its tuning's one work-group, whatever the shape)
    steps = ("pyrnn_fwd", "pyrnn_bwd", "pyrnn_proj", "pyrnn_gemm_tiled")
    other = [(n, g, local) for n, g, local in launches
             if not n.startswith(steps) and local != device.profile.local_size(g)]
    assert not other, other
    tiled = {local for n, _, local in launches if n == "pyrnn_gemm_tiled"}
    assert len(tiled) == 1 if gemm == "tiled" else len(tiled) <= 1, tiled
