"""The layer plan (``pyrnn_cl.plan.LayerPlan``): its byte counts are the engine's allocations.

Each configuration runs one forward and one backward through the engine while every buffer the
engine allocates (``Recurrence._new``, through which all of them go) is recorded by name, and
the recorded byte counts are compared with the plan's :meth:`forward_buffers` and
:meth:`backward_buffers` for that call.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyopencl.array as cla
import pytest

from helpers.device import override_tuning
from pyrnn_cl import engine
from pyrnn_cl.cells import ACTIVATIONS, PEEP_MPS, CellSpec
from pyrnn_cl.sources import BFLOAT16 as BF16

A = ACTIVATIONS
SIG, TANH = A["sigmoid"], A["tanh"]
CELLS = {
    "lstm": CellSpec("lstm", (0, 1, 2, 3), (SIG, SIG, TANH, SIG)),
    "lstm-peep": CellSpec("lstm", (0, 1, 2, 3), (SIG, SIG, TANH, SIG), peephole=PEEP_MPS),
    "gru-after": CellSpec("gru", (1, 0, 2), (SIG, SIG, TANH), reset_after=True, flip_z=True),
    "gru-before": CellSpec("gru", (0, 1, 2), (SIG, SIG, TANH)),
    "rnn": CellSpec("rnn", (0,), (TANH,)),
}

# (cell, T, N, H, D, P, REC_BWD_ROWS, options)
CONFIGS = {
    "lstm-bi-chunked": ("lstm", 7, 3, 8, 2, 0, 6, {}),
    "lstm-proj-bi-chunked-dR-given": ("lstm", 5, 2, 8, 2, 4, 4, {"dR_given": True}),
    "lstm-peep-mask-no-dy": ("lstm-peep", 4, 3, 4, 1, 0, 2048, {"mask": True, "dy": False}),
    "gru-after-x-chunked": ("gru-after", 6, 2, 8, 1, 0, 4, {"x": 5}),
    "gru-before-bi-mask-chunked": ("gru-before", 5, 3, 4, 2, 0, 6, {"mask": True}),
    "rnn-no-y-full-inputs": ("rnn", 6, 4, 8, 2, 0, 8, {"no_y": True, "full": True,
                                                       "inputs": 3}),
    "rnn-lens-no-dR": ("rnn", 4, 3, 4, 1, 0, 3, {"lens": True, "need_dR": False}),
    # float16 weights packed as stored (REC_PACK16_BYTES = 0): the packs take 2 bytes
    "lstm-proj-bi-f16-packs": ("lstm", 5, 2, 8, 2, 4, 4, {"w16": True}),
    "gru-after-x-f16-packs": ("gru-after", 6, 2, 8, 1, 0, 4, {"x": 8, "w16": True}),
}


def _record(monkeypatch):
    """``{name: [bytes, ...]}`` of every buffer the engine allocates from now on."""
    seen = defaultdict(list)
    real = engine.Recurrence._new

    def new(self, name, shape, pooled, zeros=False):
        a = real(self, name, shape, pooled, zeros)
        seen[name].append(a.nbytes)
        return a

    monkeypatch.setattr(engine.Recurrence, "_new", new)
    return seen


@pytest.mark.parametrize("name", list(CONFIGS))
def test_plan_bytes_are_the_engine_allocations(device, monkeypatch, name):
    kind, T, N, H, D, P, bwd_rows, opt = CONFIGS[name]
    w16 = bool(opt.get("w16"))
    override_tuning(device, monkeypatch, REC_BWD_ROWS=bwd_rows,
                    **({"REC_PACK16_BYTES": 0} if w16 else {}))
    cell = CELLS[kind]
    q, dt = device.queue, np.float32
    wdt = np.float16 if w16 else dt
    rng = np.random.default_rng(len(name))
    K, GH = P or H, cell.G * H

    def dev(*shape):
        return cla.to_device(q, rng.uniform(-0.5, 0.5, shape).astype(dt))

    def weight(*shape):     # (stored as the layer's weights are)
        return cla.to_device(q, rng.uniform(-0.5, 0.5, shape).astype(wdt))

    def view(a, width):
        return engine.StateView(a, width, D * width)

    peep = kind == "lstm-peep"
    rec = engine.Recurrence(device, dt, cell, T=T, N=N, H=H, D=D, P=P, rev_mask=0b10 * (D > 1),
                            has_mask=bool(opt.get("mask")), has_len=bool(opt.get("lens")),
                            has_peep=peep, weights=wdt)
    plan = rec.plan
    assert plan.pack16 == (3 if w16 else 0)
    assert (plan.T, plan.N, plan.H, plan.D, plan.P, plan.K) == (T, N, H, D, P, K)
    assert (plan.vw, plan.nb, plan.fused, plan.bwd_rows) == (rec.vw, rec.nb, rec.fused, bwd_rows)
    lens = None
    if opt.get("lens"):
        lens = cla.to_device(q, np.array([T, 1, T - 1][:N] + [T] * (N - 3), np.int32))
    layer = engine.LayerInputs(
        weight(D, GH, K), view(dev(N, D * K), K), c0=view(dev(N, D * H), H) if cell.has_c else None,
        peep=dev(D, GH) if peep else None,
        mask=cla.to_device(q, (rng.uniform(0, 1, (T, N, D * H)) > 0.3).astype(dt))
        if opt.get("mask") else None, lens=lens, w_proj=weight(D, P, H) if P else None)

    seen = _record(monkeypatch)
    I = opt.get("x")
    if I:
        fwd = rec.forward(None, layer, x=dev(T, N, I), w=weight(D * GH, I), xb=dev(D * GH))
    else:
        fwd = rec.forward(dev(T, N, D * GH), layer)
    in_kernel = "wpk_x" in seen
    assert not in_kernel or plan.fused
    want = plan.forward_buffers(x_width=I, in_kernel=in_kernel)
    assert {k: v for k, v in seen.items()} == {k: [v] for k, v in want.items()}

    seen.clear()
    if opt.get("no_y"):
        fwd = engine.Saved(sav=fwd.sav, cs=fwd.cs)
    full = bool(opt.get("full"))
    inputs = None
    if opt.get("inputs"):
        n_in = opt["inputs"]
        inputs = engine.InputSide(n_in, x=dev(T, N, n_in),
                                  w=engine.Target(dev(D * GH, n_in), 0, GH * n_in),
                                  dx=cla.empty(q, (T, N, n_in), dt),
                                  dw=engine.Target(cla.empty(q, (D * GH, n_in), dt), 0, GH * n_in),
                                  db=engine.Target(cla.empty(q, (D * GH,), dt), 0, GH))
    dR = engine.Target(cla.empty(q, (D, GH, K), dt), 0, GH * K) if opt.get("dR_given") else None
    need_dR = opt.get("need_dR", True)
    targets = engine.GradTargets(view(cla.empty(q, (N, D * K), dt), K),
                                 dc0=view(cla.empty(q, (N, D * H), dt), H) if cell.has_c else None,
                                 dR=dR, need_dR=need_dR, inputs=inputs)
    upstream = engine.Upstream(dy=dev(T, N, D * K) if opt.get("dy", True) else None,
                               dhn=view(dev(N, D * K), K))
    rec.backward(fwd, layer, upstream, targets, full=full)
    steps = rec.chunk_steps(full)
    assert (steps < T) == (not full and bwd_rows < T * N), "chunked as the configuration says"
    want = plan.backward_buffers(
        steps=steps, gathers=plan.gathers(y_given=fwd.y is not None, masked=bool(opt.get("mask")),
                                          lengths=lens is not None),
        dy_given=upstream.dy is not None, need_dR=need_dR, dR_given=dR is not None,
        peephole=peep)
    assert set(seen) == set(want)
    chunks = -(-T // steps)
    for k, sizes in seen.items():
        assert max(sizes) == want[k], k
        assert len(sizes) == (chunks if k in ("hin", "hr") else 1), k


def test_cell_roles_resolved_once_per_spec():
    """A built-in cell's registry entry, with its roles resolved for the spec's flags, is made
    once per spec (``cells._resolved``) and shared by equal specs made later, as the ops make
    them on every call; each equals the entry resolved afresh from its own flags."""
    from dataclasses import replace

    from pyrnn_cl import cells

    sig, tanh = ACTIVATIONS["sigmoid"], ACTIVATIONS["tanh"]
    specs = [CellSpec("gru", (1, 0, 2), (sig, sig, tanh), reset_after=ra, flip_z=fz)
             for ra in (False, True) for fz in (False, True)]
    specs += [CellSpec("lstm", (0, 1, 2, 3), (sig, sig, tanh, sig), peephole=p, clip=c)
              for p in (cells.PEEP_NONE, PEEP_MPS, cells.PEEP_TF) for c in (False, True)]
    for spec in specs:
        kind = cells.cell_kind(spec.kind)
        fresh = replace(kind, **kind.variant(spec)[1])
        again = replace(spec)                        # an equal spec, another object
        assert again is not spec
        assert spec.registry == fresh
        assert again.registry is spec.registry       # resolved once
    assert CellSpec("rnn", (0,), (tanh,)).registry is cells.cell_kind("rnn")


def test_16bit_packs_follow_the_weights_and_the_size_threshold():
    """Packs keep 16 bits only for 16-bit weights whose R (float32 bytes, one direction) is
    larger than REC_PACK16_BYTES; their buffers then take 2 bytes per element."""
    from pyrnn_cl.plan import LayerPlan
    from pyrnn_cl.tuning import NEVER

    cell = CELLS["lstm"]
    tuning = {"REC_VW": 8, "REC_VW_F64": 4, "REC_NB": 4, "REC_WG": 0,
              "REC_BWD_ROWS": 2048, "REC_PACK16_BYTES": 4 * 16 * 16 * 4}   # = R of H = 16
    for H, weights, want in ((16, np.float16, 0), (24, np.float16, 3), (24, None, 0),
                             (24, np.float32, 0)):
        plan = LayerPlan.for_device(cell, np.float32, tuning, 2, T=3, N=2, H=H, weights=weights)
        assert plan.pack16 == want, (H, weights)
        fwd = plan.forward_buffers()
        assert fwd["rpk"] == 4 * H * H * (2 if want else 4) and fwd["y"] == 3 * 2 * H * 4
    if BF16 is not None:
        plan = LayerPlan.for_device(cell, np.float32, tuning, 2, T=3, N=2, H=24, weights=BF16)
        assert plan.pack16 == 4
    never = dict(tuning, REC_PACK16_BYTES=NEVER)
    assert LayerPlan.for_device(cell, np.float32, never, 2, T=3, N=2, H=512,
                                weights=np.float16).pack16 == 0


def test_whole_sequence_layers_keep_one_work_item_per_tile():
    """With products split over lanes (REC_KS, GPUs), a layer that runs whole-sequence kernels
    (REC_SEQ_BYTES, e.g. from a GPU's tuned entry) takes one work-item per tile, since its
    work-group holds every unit of a direction; larger layers keep the split per-step kernels."""
    from pyrnn_cl.plan import LayerPlan

    cell = CELLS["lstm"]
    gpu = {"REC_VW": 1, "REC_VW_F64": 1, "REC_NB": 4, "REC_WG": 0, "REC_KS": 32,
           "REC_BWD_ROWS": 8192, "REC_SEQ_BYTES": 1 << 20, "REC_SEQ_MAX_BYTES": 0,
           "REC_SEQ_STREAM_BYTES": 0}
    small = LayerPlan.for_device(cell, np.float32, gpu, 132, T=5, N=16, H=256)   # R: 1 MiB
    large = LayerPlan.for_device(cell, np.float32, gpu, 132, T=5, N=16, H=512)   # R: 4 MiB
    assert (small.fused, small.ks) == (True, 1)
    assert (large.fused, large.ks) == (False, 32)
    off = LayerPlan.for_device(cell, np.float32, dict(gpu, REC_SEQ_BYTES=0), 132, T=5, N=16,
                               H=256)
    assert (off.fused, off.ks) == (False, 32)


def test_tile_limit_sets_units_per_work_item_by_cell():
    """REC_TILE_MAX bounds a work-item's accumulators (units x gates x batch rows): with the
    GPU defaults (REC_VW = 2, 24 accumulators) a GRU (2 x 3 x 4) and a vanilla cell keep two
    units and an LSTM (2 x 4 x 4 = 32) drops to one, and so does every cell with fewer rows
    than REC_NB; 0 sets no limit (CPUs, whose tile counts vectors)."""
    from helpers.fake_devices import AVX512_CPU, NVIDIA_H100
    from pyrnn_cl.devices import profile_for
    from pyrnn_cl.plan import LayerPlan
    from pyrnn_cl.tuning import derive

    gpu = derive(NVIDIA_H100, profile_for(NVIDIA_H100))["recurrence"]
    assert (gpu["REC_VW"], gpu["REC_TILE_MAX"]) == (2, 24)

    def vw(tuning, name, N=16, H=1024):
        return LayerPlan.for_device(CELLS[name], np.float32, tuning, 132, T=5, N=N, H=H).vw

    assert [vw(gpu, c) for c in ("lstm", "gru-after", "rnn")] == [1, 2, 2]
    # fewer rows than REC_NB: one unit, whatever the room (a step that streams R)
    assert vw(gpu, "gru-after", N=1) == vw(gpu, "rnn", N=2) == vw(gpu, "lstm", N=1) == 1
    assert vw(gpu, "rnn", N=4) == 2
    # a width that does not divide H pads the units (the last vector partial), where that
    # takes fewer vectors: H = 513 in 257 vectors of 2; a projection keeps a divisor of H and P
    assert vw(gpu, "gru-before", H=513) == 2
    assert vw(dict(gpu, REC_TILE_MAX=0), "lstm") == 2
    assert vw(dict(gpu, REC_TILE_MAX=4), "rnn") == 1
    cpu = derive(AVX512_CPU, profile_for(AVX512_CPU))["recurrence"]
    assert cpu["REC_TILE_MAX"] == 0 and vw(cpu, "lstm") == 16
    # H = 100 and 50: 7 and 4 vectors of 16, the last partial (25 of 4 and 2 before); H = 1:
    # one unit; a projection (P = 50) keeps the widest width dividing H and P
    assert vw(cpu, "lstm", H=100) == vw(cpu, "gru-after", H=50) == 16
    assert vw(cpu, "rnn", H=1) == 1
    lstm = CELLS["lstm"]
    proj = LayerPlan.for_device(lstm, np.float32, cpu, 2, T=5, N=16, H=100, P=50)
    assert (proj.vw, proj.tail) == (2, False)
    plain = LayerPlan.for_device(lstm, np.float32, cpu, 2, T=5, N=16, H=100)
    assert (plain.tail, plain.unit_vectors, plain.HP) == (True, 7, 112)
    # the packs hold the padded units: R's 4 x 112 rows of 100 columns, and its transpose's
    # 4 x 100 rows of 112 columns
    bwd = plain.backward_buffers(steps=5)
    assert plain.forward_buffers()["rpk"] == bwd["rt"] == 4 * 112 * 100 * 4


def test_cpu_batch_rows_grow_within_the_accumulator_budget():
    """REC_ACC_MAX (CPUs: 3/4 of the vector registers): a tile's rows double from REC_NB while
    gates x rows vectors fit, the batch has the rows, the launch kind stays and every core
    keeps a whole-sequence work-group. AVX-512 (24): LSTM 4 rows, GRU 8, vanilla 16; AVX2
    (12): LSTM and GRU 4, vanilla 8; GPUs (0): REC_NB."""
    from helpers.fake_devices import AVX2_CPU, AVX512_CPU, NVIDIA_H100
    from pyrnn_cl.devices import profile_for
    from pyrnn_cl.plan import LayerPlan
    from pyrnn_cl.tuning import derive

    def nb(info, name, N=16, H=2048, units=2, D=1):     # (H = 2048: per-step kernels)
        tuning = derive(info, profile_for(info))["recurrence"]
        return LayerPlan.for_device(CELLS[name], np.float32, tuning, units, T=5, N=N, H=H,
                                    D=D).nb

    cells = ("lstm", "gru-after", "gru-before", "rnn")
    assert [nb(AVX512_CPU, c) for c in cells] == [4, 8, 8, 16]
    assert [nb(AVX2_CPU, c) for c in cells] == [4, 4, 4, 8]
    assert [nb(NVIDIA_H100, c, units=132) for c in cells] == [4, 4, 4, 4]
    # the batch bounds the rows: N = 12 takes 8 rows of a vanilla cell, N = 3 four (its cover)
    assert nb(AVX512_CPU, "rnn", N=12) == 8 and nb(AVX512_CPU, "rnn", N=3) == 4
    # a whole-sequence layer (R 48 KiB) keeps a work-group per core: N = 8 on two cores stays
    # at 4 rows (two groups), on one core it takes 8; two directions make two groups of 8
    assert nb(AVX512_CPU, "gru-after", N=8, H=64) == 4
    # ... and stays whole-sequence: a vanilla H = 1024 (R 4 MiB, whole-sequence with four
    # groups of 4 rows) does not trade its one launch for per-step launches of 16 rows
    assert nb(AVX512_CPU, "rnn", H=1024) == 4
    assert nb(AVX512_CPU, "gru-after", N=8, H=64, units=1) == 8
    assert nb(AVX512_CPU, "gru-after", N=8, H=64, D=2) == 8


def test_cpu_forward_rows_fit_the_accumulator_budget():
    """The forward's tile halves its rows below REC_NB where gates x rows exceed REC_ACC_MAX
    (an LSTM's 4 x 4 on AVX2's budget of 12: 2 rows; its backward keeps 4); never where that
    would change the launch kind; no change where REC_NB's fit (AVX-512, GPUs)."""
    from helpers.fake_devices import AVX2_CPU, AVX512_CPU, NVIDIA_H100
    from pyrnn_cl.devices import profile_for
    from pyrnn_cl.plan import LayerPlan
    from pyrnn_cl.tuning import derive

    def rows(info, name, N=16, H=2048, units=2, **values):
        tuning = dict(derive(info, profile_for(info))["recurrence"], **values)
        plan = LayerPlan.for_device(CELLS[name], np.float32, tuning, units, T=5, N=N, H=H)
        return plan.fwd_nb, plan.nb

    cells = ("lstm", "gru-after", "gru-before", "rnn")
    assert [rows(AVX2_CPU, c) for c in cells] == [(2, 4), (4, 4), (4, 4), (8, 8)]
    assert [rows(AVX512_CPU, c) for c in cells] == [(4, 4), (8, 8), (8, 8), (16, 16)]
    assert [rows(NVIDIA_H100, c, units=132) for c in cells] == [(4, 4)] * 4
    # a budget below one row of gates leaves one row; REC_ACC_MAX = 0 leaves REC_NB
    assert rows(AVX2_CPU, "lstm", REC_ACC_MAX=3) == (1, 4)
    assert rows(AVX2_CPU, "lstm", REC_ACC_MAX=0) == (4, 4)
    # whole-sequence with 4 groups of 4 rows (LSTM H = 128, N = 16: R 256 KiB); 8 groups of 2
    # rows would stream R 8 times per step, past REC_SEQ_STREAM_BYTES = 1 MiB: per-step
    # kernels, so the forward keeps 4 rows and the one launch
    whole = dict(REC_SEQ_BYTES=0, REC_SEQ_MAX_BYTES=1 << 20, REC_SEQ_STREAM_BYTES=1 << 20)
    tuning = dict(derive(AVX2_CPU, profile_for(AVX2_CPU))["recurrence"], **whole)
    plan = LayerPlan.for_device(CELLS["lstm"], np.float32, tuning, 2, T=5, N=16, H=128)
    assert plan.fused and (plan.fwd_nb, plan.nb) == (4, 4)
    assert rows(AVX2_CPU, "lstm", N=16, H=128, **dict(whole, REC_SEQ_STREAM_BYTES=2 << 20)) \
        == (2, 4)
