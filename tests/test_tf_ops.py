"""TensorFlow block-op dialect (API.md §2): GRUBlockCell, LSTMBlockCell, BlockLSTM(V2) and their
gradients against the float64 NumPy reference ``tests/reference/tf_ref.py`` (written from the
kernels' equations, semantics.md §3), against central finite differences of our own forward ops
(``tests/reference/fd.py``), and against the MPSGraph dialect with mapped weights.

Tolerances: float64 ≤ 1e-10 relative to the reference, finite differences ≤ 1e-6, float32
≤ 1e-5 (forward) and ≤ 1e-4 (gradients), all relative to ``max(1, max|expected|)``.

Gradient outputs that are not gradients of an op input (``d_c_bar``, ``d_r_bar_u_bar``,
``dicfo``: pre-activation gradients) are checked by finite differences through extra one-hot
input columns: ``x' = [x, E_N]`` with weight rows ``Z`` ``[N, G]`` for those columns (zero at the
checked point) adds ``Z[n]`` to row n's pre-activations, so dL/dZ is exactly that output.
"""
from __future__ import annotations

import numpy as np
import pytest

import pyrnn_cl as rc
from helpers.tf import (
    LSTM_ARGS,
    TOL64,
    H,
    I,
    N,
    T,
    block_kw,
    block_ops,
    close,
    lstm_inputs,
    pick,
    rng,
    run_block,
)
from pyrnn_cl import tf_ops
from reference import fd
from reference import tf_ref as TF

cla = pytest.importorskip("pyopencl.array")

TOL32 = {"fwd": 1e-5, "grad": 1e-4}
FD_TOL = 1e-6
DTYPES = [np.float32, pytest.param(np.float64, marks=pytest.mark.fp64)]


def _tol(dtype, kind):
    return TOL64 if dtype == np.float64 else TOL32[kind]


def _gru_inputs(n=N, i=I, h=H, seed=0, dtype=np.float64):
    g = rng(seed)
    s = 0.5
    return dict(x=g.standard_normal((n, i)), h_prev=g.standard_normal((n, h)) * 0.8,
                w_ru=g.standard_normal((i + h, 2 * h)) * s, w_c=g.standard_normal((i + h, h)) * s,
                b_ru=g.standard_normal(2 * h) * s, b_c=g.standard_normal(h) * s)


def _cast(d, dtype):
    return {k: np.asarray(v, dtype) for k, v in d.items()}


GRU_ARGS = ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c")


# ================================================================================================
# GRU block cell

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, i, h", [(3, 7, 4), (1, 2, 4)], ids=["N3_I7_H4", "batch1_I2_H4"])
def test_gru_cell_vs_reference(device, dtype, n, i, h):
    p = _cast(_gru_inputs(n, i, h), dtype)
    a = pick(p, GRU_ARGS)
    out = rc.gru_block_cell(*a, device=device)
    assert all(o.dtype == dtype and o.shape == (n, h) for o in out)
    ref = TF.gru_block_cell(*a)
    close(out, ref, _tol(dtype, "fwd"), "gru_block_cell")

    d_h = rng(1).standard_normal((n, h)).astype(dtype)
    rr = [o.astype(dtype) for o in ref[:3]]
    g = rc.gru_block_cell_grad(*a, *rr, d_h, device=device)
    assert [o.shape for o in g] == [(n, i), (n, h), (n, h), (n, 2 * h)]
    gref = TF.gru_block_cell_grad(*a, *rr, d_h)
    close(g, gref, _tol(dtype, "grad"), "gru_block_cell_grad")

    dcb, drbub = (o.astype(dtype) for o in gref[2:])
    wg = rc.gru_block_cell_weight_grads(p["x"], p["h_prev"], rr[0], dcb, drbub, device=device)
    assert [o.shape for o in wg] == [(i + h, 2 * h), (i + h, h), (2 * h,), (h,)]
    close(wg, TF.gru_block_cell_weight_grads(p["x"], p["h_prev"], rr[0], dcb, drbub),
           _tol(dtype, "grad"), "gru_block_cell_weight_grads")


def _augment(x, w, z):
    """``x' = [x, E_N]`` and ``w'`` with the rows ``z`` ``[N, G]`` between the x and h rows."""
    n, i = x.shape
    return np.concatenate([x, np.eye(n)], axis=1), np.concatenate([w[:i], z, w[i:]], axis=0)


@pytest.mark.fp64
def test_gru_cell_gradients_finite_differences(device):
    p = _gru_inputs(seed=3)
    p["z_ru"], p["z_c"] = np.zeros((N, 2 * H)), np.zeros((N, H))

    def forward(q):
        x2, w_ru = _augment(q["x"], q["w_ru"], q["z_ru"])
        _, w_c = _augment(q["x"], q["w_c"], q["z_c"])
        return rc.gru_block_cell(x2, q["h_prev"], w_ru, w_c, q["b_ru"], q["b_c"],
                                 device=device)[3]

    def gradients(up):
        a = pick(p, GRU_ARGS)
        r, u, c, _ = rc.gru_block_cell(*a, device=device)
        d_x, d_hp, d_cb, d_rbub = rc.gru_block_cell_grad(*a, r, u, c, up[0], device=device)
        d_wru, d_wc, d_bru, d_bc = rc.gru_block_cell_weight_grads(p["x"], p["h_prev"], r, d_cb,
                                                                  d_rbub, device=device)
        return dict(x=d_x, h_prev=d_hp, w_ru=d_wru, w_c=d_wc, b_ru=d_bru, b_c=d_bc,
                    z_ru=d_rbub, z_c=d_cb)

    errs = fd.check_gradients(forward, p, gradients, tol=FD_TOL)
    assert set(errs) == set(p)


@pytest.mark.fp64
def test_gru_cell_is_one_mps_gru_step(device):
    """semantics.md §2.5: GRUBlockCell = one step of rc.gru with reset_gate_first, reset-before,
    flip_z; the forward, z_state and every gradient map onto each other."""
    p = _gru_inputs(seed=5)
    a = pick(p, GRU_ARGS)
    w_ru, w_c = p["w_ru"], p["w_c"]
    W = np.concatenate([w_ru[:I].T, w_c[:I].T])
    R = np.concatenate([w_ru[I:].T, w_c[I:].T])
    bias = np.concatenate([p["b_ru"], p["b_c"]])
    desc = rc.GRUDescriptor(training=True, reset_gate_first=True, reset_after=False, flip_z=True)
    h_mps, z_state = rc.gru(p["x"][None], R, W, bias, p["h_prev"], descriptor=desc, device=device)
    r, u, c, h = rc.gru_block_cell(*a, device=device)
    close([h, np.concatenate([r, u, c], axis=1)], [h_mps[0], z_state[0]], TOL64, "vs rc.gru")

    d_h = rng(6).standard_normal((N, H))
    d_x, d_hp, d_cb, d_rbub = rc.gru_block_cell_grad(*a, r, u, c, d_h, device=device)
    d_wru, d_wc, d_bru, d_bc = rc.gru_block_cell_weight_grads(p["x"], p["h_prev"], r, d_cb, d_rbub,
                                                              device=device)
    dsrc, dR, dW, db, dh0 = rc.gru_gradients(p["x"][None], R, d_h[None], z_state, h_mps, W, bias,
                                             p["h_prev"], descriptor=desc, device=device)
    close([d_x, d_hp, np.concatenate([d_wru[:I].T, d_wc[:I].T]),
            np.concatenate([d_wru[I:].T, d_wc[I:].T]), np.concatenate([d_bru, d_bc])],
           [dsrc[0], dh0, dW, dR, db], TOL64, "vs rc.gru_gradients")


# ================================================================================================
# LSTM block cell

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("use_peephole", [False, True], ids=["nopeep", "peep"])
@pytest.mark.parametrize("cell_clip", [0.0, 0.6], ids=["noclip", "clip"])
def test_lstm_cell_vs_reference(device, dtype, use_peephole, cell_clip):
    p = _cast(lstm_inputs(seq=False, seed=2, scale=0.9), dtype)
    a = pick(p, LSTM_ARGS)
    kw = dict(forget_bias=0.7, cell_clip=cell_clip, use_peephole=use_peephole)
    out = rc.lstm_block_cell(*a, **kw, device=device)
    assert all(o.dtype == dtype and o.shape == (N, H) for o in out)
    ref = TF.lstm_block_cell(*a, **kw)
    close(out, ref, _tol(dtype, "fwd"), "lstm_block_cell")
    if cell_clip:   # the clamp must be active somewhere, or this case tests nothing
        assert np.any(np.abs(ref[1]) == cell_clip)

    g = rng(4)
    cs_grad, h_grad = (g.standard_normal((N, H)).astype(dtype) for _ in range(2))
    fw = [o.astype(dtype) for o in ref[:6]]
    grads = rc.lstm_block_cell_grad(*a, *fw, cs_grad, h_grad, use_peephole=use_peephole,
                                    device=device)
    assert [o.shape for o in grads] == [(N, H), (N, 4 * H), (H,), (H,), (H,)]
    gref = TF.lstm_block_cell_grad(*a, *fw, cs_grad, h_grad, use_peephole=use_peephole)
    close(grads, gref, _tol(dtype, "grad"), "lstm_block_cell_grad")

    dicfo = gref[1].astype(dtype)
    wg = rc.lstm_block_cell_weight_grads(p["x"], p["h_prev"], p["w"], dicfo, device=device)
    assert [o.shape for o in wg] == [(N, I), (N, H), (I + H, 4 * H), (4 * H,)]
    close(wg, TF.lstm_block_cell_weight_grads(p["x"], p["h_prev"], p["w"], dicfo),
           _tol(dtype, "grad"), "lstm_block_cell_weight_grads")


@pytest.mark.fp64
@pytest.mark.parametrize("use_peephole", [False, True], ids=["nopeep", "peep"])
@pytest.mark.parametrize("cell_clip", [0.0, 50.0], ids=["noclip", "clip_inactive"])
def test_lstm_cell_gradients_finite_differences(device, use_peephole, cell_clip):
    p = lstm_inputs(seq=False, seed=7)
    p["z"] = np.zeros((N, 4 * H))
    kw = dict(forget_bias=0.4, cell_clip=cell_clip, use_peephole=use_peephole, device=device)

    def forward(q):
        x2, w2 = _augment(q["x"], q["w"], q["z"])
        out = rc.lstm_block_cell(x2, q["cs_prev"], q["h_prev"], w2, q["wci"], q["wcf"],
                                 q["wco"], q["b"], **kw)
        return [out[1], out[6]]     # cs, h

    def gradients(up):
        a = pick(p, LSTM_ARGS)
        fw = rc.lstm_block_cell(*a, **kw)
        cs_pg, dicfo, gci, gcf, gco = rc.lstm_block_cell_grad(
            *a, *fw[:6], up[0], up[1], use_peephole=use_peephole, device=device)
        x_g, h_g, w_g, b_g = rc.lstm_block_cell_weight_grads(p["x"], p["h_prev"], p["w"], dicfo,
                                                             device=device)
        return dict(x=x_g, cs_prev=cs_pg, h_prev=h_g, w=w_g, wci=gci, wcf=gcf, wco=gco, b=b_g,
                    z=dicfo)

    # every element for one case, random directions for the others (time)
    full = use_peephole and cell_clip == 0.0
    fd.check_gradients(forward, p, gradients, tol=FD_TOL, directions=None if full else 8)


# ================================================================================================
# BlockLSTM / BlockLSTMV2

@pytest.mark.fp64
@pytest.mark.parametrize("use_peephole", [False, True], ids=["nopeep", "peep"])
@pytest.mark.parametrize("forget_bias", [0.0, 1.0], ids=["fb0", "fb1"])
@pytest.mark.parametrize("cell_clip", [0.0, -1.0, 0.7], ids=["clip0", "clip_neg", "clip"])
@pytest.mark.parametrize("seq_len_max", [T, 3], ids=["full", "short"])
def test_block_lstm_combinations(device, use_peephole, forget_bias, cell_clip, seq_len_max):
    p = lstm_inputs(seed=13, scale=0.8)
    kw = block_kw(False, forget_bias, cell_clip, use_peephole)
    out, ref, grads, gref = run_block(device, False, seq_len_max, p, kw)
    if cell_clip > 0:
        assert np.any(np.abs(ref[1][:seq_len_max]) == cell_clip)   # the clamp is active
    close(out, ref, TOL64, "block_lstm")
    close(grads, gref, TOL64, "block_lstm_grad")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("seq_len_max", [T, 3, 0], ids=["full", "short", "zero"])
def test_block_lstm_vs_reference(device, dtype, v2, seq_len_max):
    p = _cast(lstm_inputs(seed=17, scale=0.7), dtype)
    kw = block_kw(v2, 1.0, 0.8 if v2 else 3.0, True)
    out, ref, grads, gref = run_block(device, v2, seq_len_max, p, kw, dtype=dtype)
    assert all(o.dtype == dtype and o.shape == (T, N, H) for o in out)
    assert [g.shape for g in grads] == [(T, N, I), (N, H), (N, H), (I + H, 4 * H), (H,), (H,),
                                        (H,), (4 * H,)]
    close(out, ref, _tol(dtype, "fwd"), "block_lstm")
    close(grads, gref, _tol(dtype, "grad"), "block_lstm_grad")
    # rows t >= seq_len_max: zero in every output (TF leaves i, f, o, ci, co unwritten), zero x_grad
    for o in out:
        assert np.all(o[seq_len_max:] == 0)
    assert np.all(grads[0][seq_len_max:] == 0)
    if seq_len_max == 0:
        assert all(np.all(g == 0) for g in grads)


@pytest.mark.fp64
@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("use_peephole", [False, True], ids=["nopeep", "peep"])
@pytest.mark.parametrize("cell_clip, seq_len_max", [(0.0, T), (50.0, 3)],
                         ids=["noclip_full", "clip_inactive_short"])
def test_block_lstm_gradients_finite_differences(device, v2, use_peephole, cell_clip,
                                                 seq_len_max):
    fn, gfn = block_ops(v2)[:2]
    p = lstm_inputs(seed=19)
    kw = block_kw(v2, 0.6, cell_clip, use_peephole)

    def forward(q):
        out = fn(seq_len_max, *pick(q, LSTM_ARGS), **kw, device=device)
        return [out[1], out[6]]     # cs, h: the outputs BlockLSTMGrad takes gradients of

    def gradients(up):
        a = pick(p, LSTM_ARGS)
        fw = fn(seq_len_max, *a, **kw, device=device)
        g = gfn(seq_len_max, *a, *fw, up[0], up[1], use_peephole=use_peephole, device=device)
        return dict(zip(("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b"), g))

    # every element for one case, random directions for the others (time)
    full = not v2 and use_peephole and cell_clip == 0.0
    fd.check_gradients(forward, p, gradients, tol=FD_TOL, directions=None if full else 6)


@pytest.mark.fp64
def test_block_lstm_v2_equals_mps_lstm(device):
    """BlockLSTMV2 (IFCO, no forget bias, no clip, no peephole) = rc.lstm with W = w[:I]ᵀ,
    R = w[I:]ᵀ; z_state holds [i | f | ci | o]; gradients map the same way (cs_grad = 0)."""
    p = lstm_inputs(seed=23)
    a = pick(p, LSTM_ARGS)
    w = p["w"]
    W, R = w[:I].T.copy(), w[I:].T.copy()
    desc = rc.LSTMDescriptor(training=True)
    h_m, c_m, z_m = rc.lstm(p["x"], R, W, p["b"], p["h_prev"], p["cs_prev"], descriptor=desc,
                            device=device)
    i, cs, f, o, ci, co, h = rc.block_lstm_v2(T, *a, device=device)
    close([h, cs, np.concatenate([i, f, ci, o], axis=2)], [h_m, c_m, z_m], TOL64, "vs rc.lstm")

    h_grad = rng(29).standard_normal((T, N, H))
    g = rc.block_lstm_grad_v2(T, *a, i, cs, f, o, ci, co, h, np.zeros((T, N, H)), h_grad,
                              device=device)
    dx, dR, dW, db, dh0, dc0 = rc.lstm_gradients(p["x"], R, h_grad, z_m, c_m, W, p["b"],
                                                 p["h_prev"], p["cs_prev"], descriptor=desc,
                                                 device=device)
    close([g[0], g[3][:I].T, g[3][I:].T, g[7], g[2], g[1]], [dx, dW, dR, db, dh0, dc0], TOL64,
           "vs rc.lstm_gradients")


@pytest.mark.fp64
def test_block_lstm_batch_1_and_input_ne_hidden(device):
    p = lstm_inputs(t=4, n=1, i=2, h=4, seed=31)
    out, ref, grads, gref = run_block(device, False, 4, p,
                                       block_kw(False, 1.0, 3.0, True))
    close(out, ref, TOL64, "block_lstm N=1")
    close(grads, gref, TOL64, "block_lstm_grad N=1")


@pytest.mark.fp64
@pytest.mark.parametrize("t, n", [(0, 3), (4, 0), (0, 0)], ids=["T0", "N0", "T0N0"])
def test_block_lstm_degenerate(device, t, n):
    p = lstm_inputs(t=t, n=n, seed=37)
    kw = block_kw(False, 1.0, 3.0, True)
    out, ref, grads, gref = run_block(device, False, 0, p, kw)
    assert all(o.shape == (t, n, H) for o in out)
    close(out, ref, TOL64, "block_lstm degenerate")
    close(grads, gref, TOL64, "block_lstm_grad degenerate")


@pytest.mark.fp64
def test_device_arrays_in_device_arrays_out(device):
    """API.md §0: pyopencl arrays in give pyopencl arrays out, same values; inputs unchanged."""
    q = device.queue
    p = lstm_inputs(seed=41)
    dp = {k: cla.to_device(q, v) for k, v in p.items()}
    out = rc.block_lstm(3, *pick(dp, LSTM_ARGS), use_peephole=True, device=device)
    assert all(isinstance(o, cla.Array) for o in out)
    ref = TF.block_lstm(3, *pick(p, LSTM_ARGS), use_peephole=True)
    close([o.get() for o in out], ref, TOL64, "device block_lstm")
    up = [cla.to_device(q, rng(43).standard_normal((T, N, H))) for _ in range(2)]
    grads = rc.block_lstm_grad(3, *pick(dp, LSTM_ARGS), *out, *up, use_peephole=True)
    assert all(isinstance(g, cla.Array) for g in grads)
    gref = TF.block_lstm_grad(3, *pick(p, LSTM_ARGS), *ref, *(u.get() for u in up),
                              use_peephole=True)
    close([g.get() for g in grads], gref, TOL64, "device block_lstm_grad")
    for k, v in p.items():
        assert np.array_equal(dp[k].get(), v), f"{k} was modified"

    g = _gru_inputs(seed=47)
    dg = {k: cla.to_device(q, v) for k, v in g.items()}
    out = rc.gru_block_cell(*pick(dg, GRU_ARGS))
    assert all(isinstance(o, cla.Array) for o in out)
    close([o.get() for o in out], TF.gru_block_cell(*pick(g, GRU_ARGS)), TOL64, "device gru")


# ================================================================================================
# validation (pitfalls A26: TF CHECK-fails or silently misbehaves on these)

def _f32(shape):
    return np.zeros(shape, np.float32)


def _lstm32(t=T, n=N, i=I, h=H):
    return dict(x=_f32((t, n, i)), cs_prev=_f32((n, h)), h_prev=_f32((n, h)),
                w=_f32((i + h, 4 * h)), wci=_f32(h), wcf=_f32(h), wco=_f32(h), b=_f32(4 * h))


@pytest.mark.parametrize("name, shape", [
    ("h_prev", (N + 1, H)), ("cs_prev", (N + 1, H)), ("cs_prev", (N, H + 1)),
    ("w", (I + H, 3 * H)), ("w", (I + H + 1, 4 * H)), ("wci", (H + 1,)), ("wco", (1, H)),
    ("b", (4 * H + 1,)),
])
def test_block_lstm_shape_errors(device, name, shape):
    p = _lstm32()
    p[name] = _f32(shape)
    with pytest.raises(rc.ShapeError, match=name) as exc:
        rc.block_lstm(T, *pick(p, LSTM_ARGS), device=device)
    src = "h_prev" if name != "h_prev" else "x"
    assert src in str(exc.value) and "x" in str(exc.value)


@pytest.mark.parametrize("name", ["i", "cs", "f", "o", "ci", "co", "h", "cs_grad", "h_grad"])
def test_block_lstm_grad_batch_mismatch(device, name):
    p = _lstm32()
    fw = {k: _f32((T, N, H)) for k in ("i", "cs", "f", "o", "ci", "co", "h", "cs_grad", "h_grad")}
    fw[name] = _f32((T, N + 1, H))
    msg = rf"{name}: got shape \[5, 4, 4\], expected \[5, 3, 4\]"
    with pytest.raises(rc.ShapeError, match=msg):
        rc.block_lstm_grad(T, *pick(p, LSTM_ARGS), *fw.values(), device=device)


def test_cell_batch_mismatch_names_both(device):
    g = {k: v.astype(np.float32) for k, v in _gru_inputs().items()}
    g["h_prev"] = _f32((N + 2, H))
    with pytest.raises(rc.ShapeError, match="h_prev.*batch size.*x"):
        rc.gru_block_cell(*pick(g, GRU_ARGS), device=device)
    g = {k: v.astype(np.float32) for k, v in _gru_inputs().items()}
    bad = [_f32((N, H))] * 3 + [_f32((N + 1, H))]
    with pytest.raises(rc.ShapeError, match="d_h"):
        rc.gru_block_cell_grad(*pick(g, GRU_ARGS), *bad, device=device)
    with pytest.raises(rc.ShapeError, match="d_r_bar_u_bar"):
        rc.gru_block_cell_weight_grads(g["x"], g["h_prev"], _f32((N, H)), _f32((N, H)),
                                       _f32((N, H)), device=device)
    p = _lstm32()
    p["x"] = _f32((N, I))
    p["cs_prev"] = _f32((N - 1, H))
    with pytest.raises(rc.ShapeError, match="cs_prev.*N = 3.*x"):
        rc.lstm_block_cell(*pick(p, LSTM_ARGS), device=device)
    with pytest.raises(rc.ShapeError, match="dicfo"):
        rc.lstm_block_cell_weight_grads(p["x"], p["h_prev"], p["w"], _f32((N + 1, 4 * H)),
                                        device=device)


def test_rank_and_dtype_errors(device):
    p = _lstm32()
    with pytest.raises(rc.ShapeError, match="x"):      # rank-1 x CHECK-fails in TF
        rc.lstm_block_cell(_f32(I), *pick(p, LSTM_ARGS)[1:], device=device)
    with pytest.raises(rc.ShapeError, match="x"):
        rc.block_lstm(T, _f32((N, I)), *pick(p, LSTM_ARGS)[1:], device=device)
    with pytest.raises(rc.ShapeError, match="h_prev"):   # zero cell size CHECK-fails in TF
        q = _lstm32(h=0)
        rc.block_lstm(T, *pick(q, LSTM_ARGS), device=device)
    p["b"] = p["b"].astype(np.float64)
    with pytest.raises(TypeError, match="b"):
        rc.block_lstm(T, *pick(p, LSTM_ARGS), device=device)
    p = _lstm32()
    p["w"] = p["w"].astype(np.int32)
    with pytest.raises(TypeError, match="w"):
        rc.block_lstm(T, *pick(p, LSTM_ARGS), device=device)
    p = _lstm32()
    with pytest.raises(TypeError, match="use_peephole"):
        rc.block_lstm(T, *pick(p, LSTM_ARGS), use_peephole=1, device=device)
    with pytest.raises(TypeError, match="forget_bias"):
        rc.block_lstm(T, *pick(p, LSTM_ARGS), forget_bias="1", device=device)
    with pytest.raises(ValueError, match="cell_clip"):
        rc.block_lstm(T, *pick(p, LSTM_ARGS), cell_clip=float("nan"), device=device)


@pytest.mark.parametrize("value, exc", [
    (-1, ValueError), (T + 1, ValueError), (np.array([2]), TypeError), (2.0, TypeError),
    (np.array(2.0), TypeError), (True, TypeError), ("3", TypeError), (None, TypeError),
])
@pytest.mark.parametrize("op", ["block_lstm", "block_lstm_grad_v2"])
def test_seq_len_max_errors(device, value, exc, op):
    p = _lstm32()
    extra = [_f32((T, N, H))] * 9 if op.endswith("grad_v2") else []
    with pytest.raises(exc, match="seq_len_max"):
        getattr(rc, op)(value, *pick(p, LSTM_ARGS), *extra, device=device)


@pytest.mark.parametrize("value", [3, np.int64(3), np.int32(3), np.array(3), np.array(3, np.int64)])
def test_seq_len_max_integer_kinds(device, value):
    p = _lstm32()
    p["x"][:] = 1.0
    p["b"][:] = 1.0
    out = rc.block_lstm(value, *pick(p, LSTM_ARGS), device=device)
    assert np.all(out[6][3:] == 0) and np.any(out[6][:3] != 0)


# ================================================================================================
# documentation: the TF docstring errata are stated where they apply

def test_docstrings_state_the_errata():
    doc = rc.gru_block_cell_grad.__doc__
    for text in ("w_u_x", "w_u_h_prev", "d_h ∘ u", "h_prev − c", "swapped", "single bias",
                 "vertical stack", "Hadamard", "d_r̄ = d_hr ⊙ h_prev ⊙ r ⊙ (1 − r)",
                 "d_h_prev = d_hp1 + d_hr ⊙ r + d_h ⊙ u", "d_ū = d_h ⊙ (h_prev − c) ⊙ u ⊙ (1 − u)"):
        assert text in doc, text
    assert "swap" in rc.gru_block_cell_weight_grads.__doc__
    assert "d_w_c  = [x, h_prev ⊙ r]ᵀ · d_c̄" in rc.gru_block_cell_weight_grads.__doc__
    assert "straight-through" in rc.lstm_block_cell_grad.__doc__
    assert "zero in **every** output" in rc.block_lstm.__doc__
    doc_v2 = rc.block_lstm_grad_v2.__doc__
    assert "IFCO" in doc_v2 and "wrong gradients" in doc_v2
    for name in tf_ops.__all__:
        assert getattr(rc, name) is getattr(tf_ops, name)
        assert "seq_len_max" in getattr(rc, name).__doc__ or "block_lstm" not in name
