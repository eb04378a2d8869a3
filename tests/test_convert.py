"""pyrnn_cl.convert: every converter round-trips exactly, and each side of a conversion computes
the same forward pass as the other. The "other side" is never our own converter's output checked
against itself: it is torch.nn, the float64 references in tests/reference (cuDNN, MPSGraph, TF,
ONNX), or pyrnn_cl's other dialect running on the OpenCL device.

Shapes: T=5, N=3, I=7, H=4 (distinct, so a transposition cannot hide), non-zero initial states.
"""

import numpy as np
import pytest

import pyrnn_cl as rc
from pyrnn_cl import convert as cv
from reference import cudnn_ref as C
from reference import mps_ref as M
from reference import onnx_ref as O
from reference import tf_ref as TF

T, N, I, H = 5, 3, 7, 4
TOL = 1e-12          # float64 reference vs float64 reference / torch
DEV_TOL = 1e-10      # float64 OpenCL device vs float64 reference


def _rng(seed):
    return np.random.default_rng(seed)


def _close(a, b, tol=TOL, what=""):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    err = float(np.max(np.abs(a - b))) if a.size else 0.0
    assert err <= tol * max(1.0, float(np.max(np.abs(b)))), f"{what}: max err {err:.3e}"


def _same_lists(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(x, y)


def _randn(rng, *shape, scale=0.5):
    return scale * rng.standard_normal(shape)


# ================================================================================================
# PyTorch <-> canonical <-> params

TORCH_CASES = [
    # (class, kwargs, rnn_mode)
    ("LSTM", dict(num_layers=2, bidirectional=True, proj_size=3), "lstm"),
    ("LSTM", dict(num_layers=2, bias=False), "lstm"),
    ("GRU", dict(num_layers=2, bidirectional=True), "gru"),
    ("RNN", dict(num_layers=2, nonlinearity="relu"), "rnn_relu"),
    ("RNN", dict(num_layers=1, bidirectional=True), "rnn_tanh"),
]


def _torch_model(torch, cls, kw, seed=0):
    torch.manual_seed(seed)
    m = getattr(torch.nn, cls)(I, H, dtype=torch.float64, **kw)
    with torch.no_grad():      # biases far from zero so a dropped bias cannot hide
        for name, p in m.named_parameters():
            p.add_(0.3 * torch.randn_like(p) + (0.2 if "bias" in name else 0.0))
    return m


def _torch_inputs(torch, m, rng):
    D = 2 if m.bidirectional else 1
    R = m.proj_size or H
    x = _randn(rng, T, N, I)
    h0 = _randn(rng, m.num_layers * D, N, R)
    c0 = _randn(rng, m.num_layers * D, N, H)
    return x, h0, c0


def _torch_forward(torch, m, x, h0, c0):
    with torch.no_grad():
        hx = torch.from_numpy(h0)
        if isinstance(m, torch.nn.LSTM):
            hx = (hx, torch.from_numpy(c0))
        y, hn = m(torch.from_numpy(x), hx)
    if isinstance(m, torch.nn.LSTM):
        return y.numpy(), hn[0].numpy(), hn[1].numpy()
    return y.numpy(), hn.numpy(), None


def _kw(m, mode):
    return dict(rnn_mode=mode, direction="bidirectional" if m.bidirectional else "unidirectional",
                num_proj=getattr(m, "proj_size", 0))


@pytest.mark.torch
@pytest.mark.parametrize("cls,kw,mode", TORCH_CASES, ids=[f"{c[0]}-{i}" for i, c in
                                                          enumerate(TORCH_CASES)])
def test_torch_canonical_forward_and_round_trip(cls, kw, mode):
    torch = pytest.importorskip("torch")
    m = _torch_model(torch, cls, kw)
    x, h0, c0 = _torch_inputs(torch, m, _rng(1))
    y, hn, cn = _torch_forward(torch, m, x, h0, c0)

    weights, biases = cv.torch_to_canonical(m)
    ck = _kw(m, mode)
    # the canonical lists have the reference's shapes and run the reference's forward = torch
    ws, bs = C.canonical_shapes(m.num_layers, H, I, **ck)
    assert [w.shape for w in weights] == ws and [b.shape for b in biases] == bs
    out = C.cudnn_rnn_forward_canonical(x, h0, c0 if mode == "lstm" else None, weights, biases,
                                        **ck)
    _close(out[0], y, what="output")
    _close(out[1], hn, what="h_n")
    if mode == "lstm":
        _close(out[2], cn, what="c_n")

    # canonical -> state dict -> load into a fresh torch module, strict
    sd = cv.canonical_to_torch(weights, biases, num_layers=m.num_layers, num_units=H,
                               input_size=I, bias=m.bias, tensors=True, **ck)
    assert list(sd) == list(m.state_dict())
    fresh = getattr(torch.nn, cls)(I, H, dtype=torch.float64, **kw)
    fresh.load_state_dict(sd, strict=True)
    for k, v in m.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k


@pytest.mark.torch
@pytest.mark.fp64
@pytest.mark.parametrize("cls,kw,mode", TORCH_CASES[:3], ids=["lstm-proj", "lstm-nobias", "gru"])
def test_torch_params_round_trip_and_device_forward(cls, kw, mode, device):
    torch = pytest.importorskip("torch")
    m = _torch_model(torch, cls, kw, seed=3)
    x, h0, c0 = _torch_inputs(torch, m, _rng(4))
    y, hn, cn = _torch_forward(torch, m, x, h0, c0)

    params, ckw = cv.torch_to_params(m)
    assert ckw["rnn_mode"] == mode and ckw["num_layers"] == m.num_layers
    w, b = cv.torch_to_canonical(m.state_dict())
    ref_params = C.canonical_to_params(m.num_layers, H, I, w, b, **_kw(m, mode))
    np.testing.assert_array_equal(params, ref_params)      # the documented layout
    assert params.size == rc.cudnn_rnn_params_size(m.num_layers, H, I, **_kw(m, mode))

    out = rc.cudnn_rnn(x, h0, c0 if mode == "lstm" else None, params, rnn_mode=mode,
                       direction=ckw["direction"], num_proj=ckw["num_proj"], is_training=False,
                       device=device)
    _close(out[0], y, DEV_TOL, "device output")
    _close(out[1], hn, DEV_TOL, "device h_n")
    if mode == "lstm":
        _close(out[2], cn, DEV_TOL, "device c_n")

    sd = cv.params_to_torch(params, ckw["num_layers"], H, I, rnn_mode=mode,
                            direction=ckw["direction"], num_proj=ckw["num_proj"], bias=m.bias)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(sd[k], v.numpy())


@pytest.mark.torch
def test_torch_errors():
    torch = pytest.importorskip("torch")
    rnn = _torch_model(torch, "RNN", dict(num_layers=1))
    with pytest.raises(ValueError, match="nonlinearity"):
        cv.torch_to_params(rnn.state_dict())
    with pytest.raises(ValueError, match="rnn_mode"):
        cv.torch_to_params(rnn.state_dict(), rnn_mode="lstm")
    assert cv.torch_to_params(rnn)[1]["rnn_mode"] == "rnn_tanh"   # a module knows its mode
    lstm = _torch_model(torch, "LSTM", dict(num_layers=1))
    w, b = cv.torch_to_canonical(lstm)
    with pytest.raises(ValueError, match="non-zero biases"):
        cv.canonical_to_torch(w, b, rnn_mode="lstm", num_layers=1, num_units=H, input_size=I,
                              bias=False)
    with pytest.raises(rc.ShapeError, match=r"weights\[1\]"):
        cv.canonical_to_torch([w[0], w[0].T] + w[2:], b, rnn_mode="lstm", num_layers=1,
                              num_units=H, input_size=I)
    with pytest.raises(KeyError, match="weight_hh_l0"):
        sd = dict(lstm.state_dict())
        del sd["weight_hh_l0"]
        cv.torch_to_canonical(sd)


def test_torch_prefix_without_torch():
    """A plain dict of NumPy arrays with a prefix (e.g. a model's sub-module) works too."""
    rng = _rng(5)
    sd = {"enc.rnn.weight_ih_l0": _randn(rng, 3 * H, I),
          "enc.rnn.weight_hh_l0": _randn(rng, 3 * H, H),
          "enc.rnn.bias_ih_l0": _randn(rng, 3 * H), "enc.rnn.bias_hh_l0": _randn(rng, 3 * H),
          "enc.other.weight": np.zeros(2)}
    cfg = cv.torch_config(sd, prefix="enc.rnn.")
    assert cfg == dict(num_layers=1, num_units=H, input_size=I, direction="unidirectional",
                       num_proj=0, num_gates=3, bias=True)
    w, b = cv.torch_to_canonical(sd, prefix="enc.rnn.")
    back = cv.canonical_to_torch(w, b, rnn_mode="gru", num_layers=1, num_units=H, input_size=I,
                                 prefix="enc.rnn.")
    for k, v in back.items():
        np.testing.assert_array_equal(v, sd[k])


# ================================================================================================
# TensorFlow block ops <-> MPSGraph dialect / canonical

def _tf_lstm_inputs(seed):
    rng = _rng(seed)
    return (_randn(rng, I + H, 4 * H), _randn(rng, 4 * H), _randn(rng, T, N, I),
            _randn(rng, N, H), _randn(rng, N, H))


@pytest.mark.parametrize("gate_order,forget_bias", [("icfo", 0.7), ("icfo", 0.0), ("ifco", 0.0)])
def test_tf_lstm_to_mps_forward(gate_order, forget_bias):
    w, b, x, h0, c0 = _tf_lstm_inputs(6)
    z = np.zeros(H)
    if gate_order == "icfo":
        tf = TF.block_lstm(T, x, c0, h0, w, z, z, z, b, forget_bias=forget_bias, cell_clip=0.0)
    else:
        tf = TF.block_lstm_v2(T, x, c0, h0, w, z, z, z, b, cell_clip=0.0)
    W, R, bias = cv.tf_lstm_block_to_mps(w, b, forget_bias=forget_bias, gate_order=gate_order)
    h, c = M.lstm(x, R, W, bias, h0, c0, descriptor=M.LSTMDescriptor(produce_cell=True))
    _close(h, tf[6], what="h")
    _close(c, tf[1], what="cs")
    weights, biases = cv.tf_lstm_block_to_canonical(w, b, forget_bias=forget_bias,
                                                    gate_order=gate_order)
    y, hn, cn = C.cudnn_rnn_forward_canonical(x, h0[None], c0[None], weights, biases)
    _close(y, tf[6], what="cudnn h")
    _close(cn[0], tf[1][-1], what="cudnn c_n")


@pytest.mark.fp64
def test_tf_lstm_to_mps_device(device):
    """The TF block op and the MPSGraph dialect of pyrnn_cl agree through the converter."""
    w, b, x, h0, c0 = _tf_lstm_inputs(7)
    z = np.zeros(H)
    tf = rc.block_lstm(np.int64(T), x, c0, h0, w, z, z, z, b, forget_bias=0.7, cell_clip=0.0,
                       device=device)
    W, R, bias = cv.tf_lstm_block_to_mps(w, b, forget_bias=0.7)
    h, c = rc.lstm(x, R, W, bias, h0, c0, descriptor=rc.LSTMDescriptor(produce_cell=True),
                   device=device)
    _close(h, tf[6], DEV_TOL, "h")
    _close(c, tf[1], DEV_TOL, "cs")


def test_tf_lstm_round_trips():
    w, b, *_ = _tf_lstm_inputs(8)
    for order in ("icfo", "ifco"):
        back = cv.mps_to_tf_lstm_block(*cv.tf_lstm_block_to_mps(w, b, forget_bias=0.0,
                                                                gate_order=order),
                                       forget_bias=0.0, gate_order=order)
        _same_lists(back, [w, b])
        back = cv.canonical_to_tf_lstm_block(*cv.tf_lstm_block_to_canonical(
            w, b, forget_bias=0.0, gate_order=order), forget_bias=0.0, gate_order=order)
        _same_lists(back, [w, b])
    # folding forget_bias is exact for values on a coarse binary grid ...
    bq = np.round(b * 64) / 64
    _same_lists(cv.mps_to_tf_lstm_block(*cv.tf_lstm_block_to_mps(w, bq, forget_bias=1.0)),
                [w, bq])
    # ... and within one rounding of |b_f| + forget_bias otherwise
    w2, b2 = cv.mps_to_tf_lstm_block(*cv.tf_lstm_block_to_mps(w, b, forget_bias=1.0))
    np.testing.assert_array_equal(w2, w)
    np.testing.assert_allclose(b2, b, rtol=0, atol=4 * np.finfo(np.float64).eps)
    # float32 stays float32
    w32, b32 = w.astype(np.float32), b.astype(np.float32)
    out = cv.tf_lstm_block_to_mps(w32, b32, forget_bias=0.0)
    assert all(a.dtype == np.float32 for a in out)
    _same_lists(cv.mps_to_tf_lstm_block(*out, forget_bias=0.0), [w32, b32])


def test_tf_lstm_errors():
    w, b, *_ = _tf_lstm_inputs(9)
    with pytest.raises(ValueError, match="gate_order"):
        cv.tf_lstm_block_to_mps(w, b, gate_order="iofc")
    with pytest.raises(rc.ShapeError, match=r"w: got shape \[11, 15\]"):
        cv.tf_lstm_block_to_mps(w[:, :15], b)
    with pytest.raises(rc.ShapeError, match="b: got shape"):
        cv.tf_lstm_block_to_mps(w, b[:5])
    with pytest.raises(TypeError, match="floating"):
        cv.tf_lstm_block_to_mps(w.astype(np.int32), b)


def _tf_gru_inputs(seed):
    rng = _rng(seed)
    return (_randn(rng, I + H, 2 * H), _randn(rng, I + H, H), _randn(rng, 2 * H), _randn(rng, H),
            _randn(rng, T, N, I), _randn(rng, N, H))


def _tf_gru_sequence(w_ru, w_c, b_ru, b_c, x, h0, cell=TF.gru_block_cell, **kw):
    h, hs = h0, []
    for t in range(x.shape[0]):
        h = np.asarray(cell(x[t], h, w_ru, w_c, b_ru, b_c, **kw)[3], dtype=np.float64)
        hs.append(h)
    return np.stack(hs)


def test_tf_gru_to_mps_forward_and_round_trip():
    w_ru, w_c, b_ru, b_c, x, h0 = _tf_gru_inputs(10)
    want = _tf_gru_sequence(w_ru, w_c, b_ru, b_c, x, h0)
    W, R, b = cv.tf_gru_block_to_mps(w_ru, w_c, b_ru, b_c)
    (h,) = M.gru(x, R, W, b, h0, descriptor=M.GRUDescriptor(**cv.MPS_GRU_FLAGS_TF))
    _close(h, want, what="h")
    _same_lists(cv.mps_to_tf_gru_block(W, R, b), [w_ru, w_c, b_ru, b_c])


@pytest.mark.fp64
def test_tf_gru_to_mps_device(device):
    w_ru, w_c, b_ru, b_c, x, h0 = _tf_gru_inputs(11)
    want = _tf_gru_sequence(w_ru, w_c, b_ru, b_c, x, h0, cell=rc.gru_block_cell, device=device)
    W, R, b = cv.tf_gru_block_to_mps(w_ru, w_c, b_ru, b_c)
    (h,) = rc.gru(x, R, W, b, h0, descriptor=rc.GRUDescriptor(**cv.MPS_GRU_FLAGS_TF),
                  device=device)
    _close(h, want, DEV_TOL, "h")


# ================================================================================================
# ONNX <-> canonical

def _onnx_inputs(op, D, seed):
    G = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    rng = _rng(seed)
    return dict(X=_randn(rng, T, N, I), W=_randn(rng, D, G * H, I), R=_randn(rng, D, G * H, H),
                B=_randn(rng, D, 2 * G * H), initial_h=_randn(rng, D, N, H),
                initial_c=_randn(rng, D, N, H))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("D", [1, 2])
def test_onnx_to_canonical_forward_and_round_trip(op, D):
    a = _onnx_inputs(op, D, 12 + D)
    if op == "LSTM":
        Y, Yh, Yc = O.onnx_lstm(a["X"], a["W"], a["R"], a["B"], a["initial_h"], a["initial_c"])
    elif op == "GRU":
        Y, Yh = O.onnx_gru(a["X"], a["W"], a["R"], a["B"], a["initial_h"], linear_before_reset=1)
    else:
        Y, Yh = O.onnx_rnn(a["X"], a["W"], a["R"], a["B"], a["initial_h"])
    extra = dict(linear_before_reset=1) if op == "GRU" else {}
    weights, biases = cv.onnx_to_canonical(op, a["W"], a["R"], a["B"], **extra)
    mode = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn_tanh"}[op]
    direction = "bidirectional" if D == 2 else "unidirectional"
    y, hn, cn = C.cudnn_rnn_forward_canonical(
        a["X"], a["initial_h"], a["initial_c"] if op == "LSTM" else None, weights, biases,
        rnn_mode=mode, direction=direction)
    # ONNX Y is [T, D, N, H]; cuDNN's output is [T, N, D*H] (fwd | bwd)
    _close(y.reshape(T, N, D, H).transpose(0, 2, 1, 3), Y, what="Y")
    _close(hn, Yh, what="Y_h")
    if op == "LSTM":
        _close(cn, Yc, what="Y_c")

    node = cv.canonical_to_onnx(op, weights, biases)
    for k in "WRB":
        np.testing.assert_array_equal(node[k], a[k])
    assert node["attributes"]["hidden_size"] == H
    assert node["attributes"]["direction"] == ("bidirectional" if D == 2 else "forward")
    if op == "GRU":
        assert node["attributes"]["linear_before_reset"] == 1


def test_onnx_errors():
    a = _onnx_inputs("GRU", 1, 20)
    with pytest.raises(ValueError, match="linear_before_reset"):
        cv.onnx_to_canonical("GRU", a["W"], a["R"], a["B"])
    with pytest.raises(ValueError, match="linear_before_reset"):
        cv.onnx_to_canonical("GRU", a["W"], a["R"], a["B"], linear_before_reset=0)
    b = _onnx_inputs("LSTM", 1, 21)
    with pytest.raises(ValueError, match="peephole"):
        cv.onnx_to_canonical("LSTM", b["W"], b["R"], b["B"], P=np.ones((1, 3 * H)))
    w, _ = cv.onnx_to_canonical("LSTM", b["W"], b["R"], b["B"], P=np.zeros((1, 3 * H)))
    assert len(w) == 8
    with pytest.raises(rc.ShapeError, match="R: got shape"):
        cv.onnx_to_canonical("LSTM", b["W"], b["R"][:, :, :2], b["B"])
    with pytest.raises(ValueError, match="op: got 'GRUX'"):
        cv.onnx_to_canonical("GRUX", a["W"], a["R"], a["B"])


@pytest.mark.torch
def test_onnx_reference_against_torch():
    """Proof of tests/reference/onnx_ref.py: torch.nn with its weights re-sliced by hand into
    ONNX's gate blocks (LSTM i,f,g,o -> i,o,f,c; GRU r,z,n -> z,r,h) gives the same sequence."""
    torch = pytest.importorskip("torch")
    rng = _rng(22)
    x, h0, c0 = _randn(rng, T, N, I), _randn(rng, 1, N, H), _randn(rng, 1, N, H)
    for cls, order in (("LSTM", [0, 3, 1, 2]), ("GRU", [1, 0, 2])):
        m = _torch_model(torch, cls, dict(num_layers=1))
        sd = {k: v.numpy() for k, v in m.state_dict().items()}

        def onnx_blocks(a, order=order):
            return np.concatenate([a.reshape(len(order), H, -1)[k] for k in order]).reshape(
                a.shape)

        W = onnx_blocks(sd["weight_ih_l0"])[None]
        R = onnx_blocks(sd["weight_hh_l0"])[None]
        B = np.concatenate([onnx_blocks(sd["bias_ih_l0"]), onnx_blocks(sd["bias_hh_l0"])])[None]
        y, hn, cn = _torch_forward(torch, m, x, h0, c0)
        if cls == "LSTM":
            Y, Yh, Yc = O.onnx_lstm(x, W, R, B, h0, c0)
            _close(Yc, cn, what="Y_c")
        else:
            Y, Yh = O.onnx_gru(x, W, R, B, h0, linear_before_reset=1)
        _close(Y[:, 0], y, what=f"{cls} Y")
        _close(Yh, hn, what=f"{cls} Y_h")


# ================================================================================================
# Keras <-> canonical / MPSGraph

def _keras(G, seed, bias_shape):
    rng = _rng(seed)
    return (_randn(rng, I, G * H), _randn(rng, H, G * H), _randn(rng, *bias_shape),
            _randn(rng, T, N, I), _randn(rng, N, H), _randn(rng, N, H))


def test_keras_lstm_to_canonical():
    """Keras' LSTM kernels stacked [kernel; recurrent_kernel] are BlockLSTMV2's IFCO ``w``."""
    k, rk, b, x, h0, c0 = _keras(4, 23, (4 * H,))
    z = np.zeros(H)
    want = TF.block_lstm_v2(T, x, c0, h0, np.concatenate([k, rk]), z, z, z, b, cell_clip=0.0)
    weights, biases = cv.keras_lstm_to_canonical(k, rk, b)
    y, hn, cn = C.cudnn_rnn_forward_canonical(x, h0[None], c0[None], weights, biases)
    _close(y, want[6], what="h")
    _close(cn[0], want[1][-1], what="c_n")
    _same_lists(cv.canonical_to_keras_lstm(weights, biases), [k, rk, b])
    # a canonical list with both biases gives Keras their sum (Keras has one bias)
    bw = [np.full(H, 0.25) for _ in range(4)] + [np.zeros(H)] * 4
    _, _, kb = cv.canonical_to_keras_lstm(weights, bw)
    np.testing.assert_array_equal(kb, np.full(4 * H, 0.25))


@pytest.mark.torch
def test_keras_gru_reset_after_to_canonical():
    """Keras' reset_after GRU (blocks z,r,h) is MPSGraph's default-order reset-after GRU with
    b = input bias + recurrent bias of z and r, secondary bias = recurrent bias of h."""
    torch = pytest.importorskip("torch")
    k, rk, b, x, h0, _ = _keras(3, 24, (2, 3 * H))
    sec = b[1, 2 * H:]
    bias = b[0] + np.concatenate([b[1, :2 * H], np.zeros(H)])
    (want,) = M.gru(x, rk.T, k.T, bias, h0, secondary_bias=sec,
                    descriptor=M.GRUDescriptor(reset_after=True, flip_z=True))
    weights, biases = cv.keras_gru_to_canonical(k, rk, b)
    sd = cv.canonical_to_torch(weights, biases, rnn_mode="gru", num_layers=1, num_units=H,
                               input_size=I, tensors=True)
    m = torch.nn.GRU(I, H, dtype=torch.float64)
    m.load_state_dict(sd, strict=True)
    y, hn, _ = _torch_forward(torch, m, x, h0[None], None)
    _close(y, want, what="torch h")
    _same_lists(cv.canonical_to_keras_gru(weights, biases), [k, rk, b])


def test_keras_gru_reset_before_to_mps():
    """Keras' reset-before GRU = TF's GRUBlockCell with w_ru = [r | z] columns, w_c = h."""
    k, rk, b, x, h0, _ = _keras(3, 25, (3 * H,))
    kz, kr, kh = np.split(k, 3, 1)
    rz, rr, rh = np.split(rk, 3, 1)
    bz, br, bh = np.split(b, 3)
    want = _tf_gru_sequence(np.concatenate([np.concatenate([kr, kz], 1),
                                            np.concatenate([rr, rz], 1)]),
                            np.concatenate([kh, rh]), np.concatenate([br, bz]), bh, x, h0)
    W, R, bias = cv.keras_gru_to_mps(k, rk, b)
    (h,) = M.gru(x, R, W, bias, h0, descriptor=M.GRUDescriptor(**cv.MPS_GRU_FLAGS_KERAS))
    _close(h, want, what="h")
    _same_lists(cv.mps_to_keras_gru(W, R, bias), [k, rk, b])


@pytest.mark.fp64
def test_keras_gru_reset_before_device(device):
    k, rk, b, x, h0, _ = _keras(3, 26, (3 * H,))
    W, R, bias = cv.keras_gru_to_mps(k, rk, b)
    (want,) = M.gru(x, R, W, bias, h0, descriptor=M.GRUDescriptor(**cv.MPS_GRU_FLAGS_KERAS))
    (h,) = rc.gru(x, R, W, bias, h0, descriptor=rc.GRUDescriptor(**cv.MPS_GRU_FLAGS_KERAS),
                  device=device)
    _close(h, want, DEV_TOL, "h")


def test_keras_gru_variant_errors():
    k, rk, b, *_ = _keras(3, 27, (2, 3 * H))
    with pytest.raises(ValueError, match="keras_gru_to_mps"):
        cv.keras_gru_to_canonical(k, rk, b[0], reset_after=False)
    with pytest.raises(ValueError, match="keras_gru_to_canonical"):
        cv.keras_gru_to_mps(k, rk, b, reset_after=True)
    with pytest.raises(rc.ShapeError, match=r"bias: got shape \[12\], expected \[2, 12\]"):
        cv.keras_gru_to_canonical(k, rk, b[0])
    with pytest.raises(rc.ShapeError, match="recurrent_kernel"):
        cv.keras_gru_to_canonical(k, rk[:, :6], b)
    w, bb = cv.keras_gru_to_canonical(k, rk, b)
    with pytest.raises(rc.ShapeError, match="unidirectional"):
        cv.canonical_to_keras_gru(w + w, bb + bb)
