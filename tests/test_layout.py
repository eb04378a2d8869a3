"""pyrnn_cl.layout and the cuDNN params conversions on NumPy arrays (no device needed).

Oracles: ``tests/reference/cudnn_ref.py`` (independent size formula and canonical <-> params
conversions), PyTorch's parameter count (pitfalls A25), the values semantics.md §4.2 verified on
PyTorch, and plain NumPy slicing for the state / batch-major / reserve arithmetic.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import pyrnn_cl as rc
from pyrnn_cl import layout as LY
from reference import cudnn_ref as ref

MODES = ("rnn_relu", "rnn_tanh", "lstm", "gru")
CONFIGS = [
    # (mode, L, H, I, direction, input_mode, P)
    (m, L, H, I, d, im, P)
    for m in MODES for L in (1, 3) for d in LY.DIRECTIONS
    for (H, I, im, P) in ((4, 7, "linear_input", 0), (5, 5, "skip_input", 0),
                          (5, 5, "auto_select", 0), (5, 3, "auto_select", 0),
                          (6, 2, "linear_input", 3), (4, 4, "skip_input", 2))
    if not (P and m != "lstm")
]


def _kw(mode, direction, input_mode, P):
    return dict(rnn_mode=mode, direction=direction, input_mode=input_mode, num_proj=P)


@pytest.mark.parametrize("mode,L,H,I,direction,input_mode,P", CONFIGS)
def test_size_and_round_trip(mode, L, H, I, direction, input_mode, P):
    """Size = the reference formula; conversions equal the reference's and are exact inverses in
    both dtypes; the canonical entries tile params exactly once."""
    kw = _kw(mode, direction, input_mode, P)
    size = rc.cudnn_rnn_params_size(L, H, I, **kw)
    assert size == ref.params_size(L, H, I, **kw)
    rng = np.random.default_rng(L * 100 + H)
    wshapes, bshapes = ref.canonical_shapes(L, H, I, **kw)
    for dtype in (np.float32, np.float64):
        w = [rng.standard_normal(s).astype(dtype) for s in wshapes]
        b = [rng.standard_normal(s).astype(dtype) for s in bshapes]
        params = rc.cudnn_rnn_canonical_to_params(L, H, I, w, b, **kw)
        assert params.dtype == dtype and params.shape == (size,)
        np.testing.assert_array_equal(params, ref.canonical_to_params(L, H, I, w, b, **kw))
        w2, b2 = rc.cudnn_rnn_params_to_canonical(L, H, I, params, **kw)
        assert [a.shape for a in w2] == wshapes and [a.shape for a in b2] == bshapes
        for x, y in zip(w + b, w2 + b2):
            assert y.dtype == dtype
            np.testing.assert_array_equal(x, y)
        again = rc.cudnn_rnn_canonical_to_params(L, H, I, w2, b2, **kw)
        np.testing.assert_array_equal(again, params)
    lay = LY.make_layout(L, H, I, **kw)
    cover = np.zeros(size, int)
    for off, shape in sum(lay.canonical(), []):
        cover[off:off + int(np.prod(shape))] += 1
    assert np.all(cover == 1)


def test_size_matches_semantics_and_torch():
    """The values semantics.md §4.2 verified on PyTorch, then PyTorch's count itself (A25)."""
    assert rc.cudnn_rnn_params_size(1, 2, 3) == 56
    assert rc.cudnn_rnn_params_size(2, 4, 3, direction="bidirectional") == 736
    assert rc.cudnn_rnn_params_size(2, 4, 3, direction="bidirectional", num_proj=2) == 512
    assert rc.cudnn_rnn_params_size(3, 6, 5, rnn_mode="gru", direction="bidirectional") == 1908
    assert rc.cudnn_rnn_params_size(2, 3, 7, rnn_mode="rnn_tanh") == 60
    torch = pytest.importorskip("torch")
    for mode, L, H, I, bi, P in itertools.product(MODES, (1, 2, 3), (3, 8), (1, 6), (0, 1),
                                                  (0, 2)):
        if P and mode != "lstm":
            continue
        common = dict(num_layers=L, bidirectional=bool(bi))
        if mode == "lstm":
            m = torch.nn.LSTM(I, H, proj_size=P, **common)
        elif mode == "gru":
            m = torch.nn.GRU(I, H, **common)
        else:
            m = torch.nn.RNN(I, H, nonlinearity=mode[4:], **common)
        want = sum(p.numel() for p in m.parameters())
        got = rc.cudnn_rnn_params_size(L, H, I, rnn_mode=mode, num_proj=P,
                                       direction=LY.DIRECTIONS[bi])
        assert got == want, (mode, L, H, I, bi, P)


def test_offsets_are_pytorch_blocks():
    """Each pseudo-layer's W_0..W_{G-1} is PyTorch's weight_ih ([G·H, in]), R the weight_hh,
    then W_proj, then bias_ih, bias_hh; directions follow each other."""
    lay = LY.make_layout(2, 4, 3, rnn_mode="lstm", direction="bidirectional", num_proj=2)
    G, H, P = 4, 4, 2
    pos = 0
    for l in range(2):
        n_in = 3 if l == 0 else 2 * P
        for d in range(2):
            assert lay.pseudo(l, d) == pos == lay.off_w(l, d)
            assert lay.off_r(l, d) == pos + G * H * n_in
            assert lay.off_proj(l, d) == lay.off_r(l, d) + G * H * P
            assert lay.off_bw(l, d) == lay.off_proj(l, d) + P * H
            assert lay.off_br(l, d) == lay.off_bw(l, d) + G * H
            pos = lay.off_br(l, d) + G * H
    assert pos == lay.size
    skip = LY.make_layout(2, 4, 4, rnn_mode="gru", input_mode="skip_input")
    assert not skip.has_w(0) and skip.has_w(1) and skip.w_size(0) == 0
    assert skip.off_r(0, 0) == 0


def test_states_batch_major_and_reserve():
    """State slices, the batch-major transpose strides and the reserve layout, vs NumPy."""
    lay = LY.make_layout(3, 5, 2, rnn_mode="lstm", direction="bidirectional", num_proj=3)
    N, W = 4, lay.R
    full = np.arange(3 * 2 * N * W).reshape(6, N, W)
    for l in range(3):
        off = lay.state_offset(l, N, W)
        np.testing.assert_array_equal(full.reshape(-1)[off:off + 2 * N * W].reshape(2, N, W),
                                      full[2 * l:2 * l + 2])
    a, b, c = 3, 4, 5
    src = np.arange(a * b * c, dtype=float)
    dst = np.zeros(a * b * c)
    ds, ss = LY.swap01_strides(a, b, c)
    for i, j, k in itertools.product(range(a), range(b), range(c)):
        dst[i * ds[0] + j * ds[1] + k * ds[2]] = src[i * ss[0] + j * ss[1] + k * ss[2]]
    np.testing.assert_array_equal(dst.reshape(b, a, c), src.reshape(a, b, c).transpose(1, 0, 2))
    T = 7
    parts = lay.reserve_parts(T, N)
    rows = T * N * 2
    spans = sorted(v for layer in parts for v in layer.values())
    assert [set(layer) for layer in parts] == [{"sav", "y", "cs", "hs"}] * 3
    assert parts[0]["sav"] == (0, rows * 4 * 5) and parts[0]["y"][1] == rows * 3
    # parts in order, each at the first multiple of RESERVE_ALIGN after the one before
    assert LY.RESERVE_ALIGN == 256
    assert all(o % 256 == 0 for o, _ in spans)
    assert all(o2 == -(-(o1 + s1) // 256) * 256 for (o1, s1), (o2, _) in zip(spans, spans[1:]))
    assert spans[-1][0] + spans[-1][1] == lay.reserve_size(T, N)
    assert rc.cudnn_rnn_reserve_space_size(3, 5, 2, T, N, rnn_mode="lstm",
                                           direction="bidirectional", num_proj=3) == \
        lay.reserve_size(T, N) >= 3 * rows * (20 + 3 + 5 + 5)
    assert lay.reserve_size(T, N) < 3 * rows * (20 + 3 + 5 + 5) + 12 * 256
    # with dropout between layers, layers 1 and 2 also keep their dropped input [T][N][D*R]
    drop = lay.reserve_parts(T, N, dropout_applied=True)
    assert [set(layer) for layer in drop] == [{"sav", "y", "cs", "hs"}] + [
        {"sav", "y", "cs", "hs", "xd"}] * 2
    assert drop[1]["xd"][1] == rows * 3
    assert rc.cudnn_rnn_reserve_space_size(3, 5, 2, T, N, rnn_mode="lstm", dropout=0.3,
                                           direction="bidirectional", num_proj=3) == \
        lay.reserve_size(T, N, dropout_applied=True) == max(o + n for o, n in drop[2].values())
    gru = LY.make_layout(2, 5, 2, rnn_mode="gru")
    assert [set(layer) for layer in gru.reserve_parts(T, N)] == [{"sav", "y"}] * 2
    assert rc.cudnn_rnn_reserve_space_size(2, 5, 2, T, N, rnn_mode="gru",
                                           is_training=False) == 0


def test_host_signature():
    lay = LY.make_layout(2, 4, 3)
    a = LY.host_signature(lay, 4, True, 0.5, 1, 2)
    assert a.dtype == np.int8 and a.shape == (LY.HOST_RESERVED_SIZE,)
    # format 2: the reserve layout with aligned parts and kept dropped inputs
    assert list(a[:8]) == [2, LY.RNN_MODES.index("lstm"), 0, 1, 0, 4, 1, 0]
    assert not np.array_equal(a, LY.host_signature(lay, 4, True, 0.5, 1, 3))
    assert not np.array_equal(a, LY.host_signature(lay, 4, True, 0.25, 1, 2))
    assert not np.array_equal(a, LY.host_signature(lay, 8, True, 0.5, 1, 2))
    np.testing.assert_array_equal(LY.host_signature(lay, 4, False, 0.5, 1, 2),
                                  LY.host_signature(lay, 4, False, 0.0, 7, 9))


@pytest.mark.parametrize("kwargs,exc,pattern", [
    (dict(rnn_mode="LSTM"), ValueError, "rnn_mode"),
    (dict(input_mode="linear"), ValueError, "input_mode"),
    (dict(direction="bi"), ValueError, "direction"),
    (dict(num_layers=0), ValueError, "num_layers"),
    (dict(num_units=0), ValueError, "num_units"),
    (dict(input_size=-1), ValueError, "input_size"),
    (dict(num_layers=1.5), TypeError, "num_layers"),
    (dict(num_proj=2, rnn_mode="gru"), ValueError, "num_proj"),
    (dict(num_proj=4), ValueError, "num_proj"),
    (dict(num_proj=-1), ValueError, "num_proj"),
    (dict(input_mode="skip_input"), ValueError, "input_size == num_units"),
])
def test_config_validation(kwargs, exc, pattern):
    args = dict(num_layers=2, num_units=4, input_size=3)
    args.update(kwargs)
    with pytest.raises(exc, match=pattern):
        rc.cudnn_rnn_params_size(args.pop("num_layers"), args.pop("num_units"),
                                 args.pop("input_size"), **args)


def test_conversion_validation():
    w, b = ref.canonical_shapes(1, 3, 2, rnn_mode="gru")
    ws = [np.zeros(s) for s in w]
    bs = [np.zeros(s) for s in b]
    kw = dict(rnn_mode="gru")
    with pytest.raises(ValueError, match="weights: got 5 arrays, expected 6"):
        rc.cudnn_rnn_canonical_to_params(1, 3, 2, ws[:-1], bs, **kw)
    with pytest.raises(rc.ShapeError, match=r"weights\[0\]"):
        rc.cudnn_rnn_canonical_to_params(1, 3, 2, [np.zeros((3, 3))] + ws[1:], bs, **kw)
    with pytest.raises(TypeError, match=r"biases\[2\]"):
        rc.cudnn_rnn_canonical_to_params(1, 3, 2, ws, bs[:2] + [bs[2].astype(np.float32)]
                                         + bs[3:], **kw)
    with pytest.raises(TypeError, match="weights"):
        rc.cudnn_rnn_canonical_to_params(1, 3, 2, np.zeros(5), bs, **kw)
    with pytest.raises(rc.ShapeError, match="params: got 10 elements, expected"):
        rc.cudnn_rnn_params_to_canonical(1, 3, 2, np.zeros(10), **kw)
    with pytest.raises(TypeError, match="params"):
        rc.cudnn_rnn_params_to_canonical(1, 3, 2, np.zeros(54, np.int32), **kw)


def test_reserve_part_names_are_the_engine_fields():
    """The reserve parts are named by the fields of the engine's forward result (one
    definition: ``layout.Saved``), ``xd`` added by ``layout.Reserve``."""
    from pyrnn_cl import engine

    assert engine.Saved is LY.Saved
    assert LY.SAVED_PARTS == ("sav", "y", "cs", "hs")
    assert LY.RESERVE_PARTS == LY.SAVED_PARTS + ("xd",)
    lay = LY.make_layout(2, 5, 2, rnn_mode="lstm", num_proj=3)
    for l, layer in enumerate(lay.reserve_parts(3, 2, dropout_applied=True)):
        widths = lay.reserve_widths(l, dropout_applied=True)
        assert list(layer) == [n for n in LY.RESERVE_PARTS if getattr(widths, n) is not None]
