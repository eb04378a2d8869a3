"""Proof that the float64 reference (tests/reference) is right, against things we did not write:

(a) PyTorch float64 (CPU) for the cuDNN dialect: nn.RNN/LSTM/GRU forward and autograd gradients,
    packed sequences vs sequence_lengths, parameter counts, dropout via composed single layers;
(b) PyTorch for the MPSGraph dialect (documented weight mappings, semantics.md §2.5);
(c) central finite differences for every gradient output of every reference op and flag;
(d) closed forms and cross-dialect identities (cuDNN skip_input GRU value, TF GRU cell = MPS GRU
    step, BlockLSTM(V2) = MPS LSTM with mapped weights).

Runs without OpenCL and without pyrnn_cl.  Shapes are small asymmetric primes (T=5, N=3, I=7, H=4).
"""

import dataclasses

import numpy as np
import pytest

from reference import cudnn_ref as C
from reference import fd
from reference import mps_ref as M
from reference import tf_ref as TF

T, N, I, H = 5, 3, 7, 4
TOL = 1e-10  # reference vs torch float64


def _rng(seed):
    return np.random.default_rng(seed)


def _close(a, b, tol=TOL, what=""):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    err = float(np.max(np.abs(a - b))) if a.size else 0.0
    assert err <= tol * max(1.0, float(np.max(np.abs(b))) if b.size else 0.0), (
        f"{what}: max err {err:.3e}"
    )


# ================================================================================================
# fd.py itself


def test_fd_numeric_grad_on_known_function():
    x = _rng(0).standard_normal((3, 2))
    g = fd.numeric_grad(lambda v: float(np.sum(np.sin(v) * v)), x)
    _close(g, np.cos(x) * x + np.sin(x), 1e-8)
    x0 = x.copy()
    fd.numeric_grad(lambda v: float(np.sum(v**3)), x)
    assert np.array_equal(x, x0)  # restored


def test_fd_check_gradients_catches_a_wrong_gradient():
    inputs = {"a": _rng(1).standard_normal(4)}
    fwd = lambda i: [i["a"] ** 2]  # noqa: E731
    fd.check_gradients(fwd, inputs, lambda g: {"a": 2 * inputs["a"] * g[0]})
    fd.check_gradients(fwd, inputs, lambda g: {"a": 2 * inputs["a"] * g[0]}, directions=3)
    with pytest.raises(AssertionError):
        fd.check_gradients(fwd, inputs, lambda g: {"a": 2.001 * inputs["a"] * g[0]})
    with pytest.raises(AssertionError):
        fd.check_gradients(fwd, inputs, lambda g: {"a": 2.001 * inputs["a"] * g[0]}, directions=2)


# ================================================================================================
# MPSGraph dialect: helpers

GRAD_ORDER = {
    "rnn": ["source", "recurrent_weight", "input_weight", "bias", "init_state"],
    "lstm": [
        "source",
        "recurrent_weight",
        "input_weight",
        "bias",
        "peephole",
        "init_state",
        "init_cell",
    ],
    "gru": ["source", "recurrent_weight", "input_weight", "bias", "init_state", "secondary_bias"],
}
GATES = {"rnn": 1, "lstm": 4, "gru": 3}
FWD = {"rnn": M.single_gate_rnn, "lstm": M.lstm, "gru": M.gru}
GRAD = {"rnn": M.single_gate_rnn_gradients, "lstm": M.lstm_gradients, "gru": M.gru_gradients}
DESCRIPTORS = {"rnn": M.SingleGateRNNDescriptor, "lstm": M.LSTMDescriptor, "gru": M.GRUDescriptor}
OPTIONAL = {
    "rnn": ("input_weight", "bias", "init_state", "mask"),
    "lstm": ("input_weight", "bias", "init_state", "init_cell", "mask", "peephole"),
    "gru": ("input_weight", "bias", "init_state", "mask", "secondary_bias"),
}


def _mps_inputs(kind, desc, present, seed, scale=0.5, t=T):
    """Random inputs of one MPS op; ``present`` names the optional inputs to pass."""
    rng = _rng(seed)
    D = 2 if desc.bidirectional else 1
    GH = GATES[kind] * H
    r = lambda *s: scale * rng.standard_normal(s)  # noqa: E731
    out = {
        "source": r(t, N, I) if "input_weight" in present else r(t, N, D * GH),
        "recurrent_weight": r(GH, H) if D == 1 else r(2, GH, H),
    }
    shapes = {
        "input_weight": (D * GH, I),
        "bias": (D * GH,),
        "init_state": (N, D * H),
        "init_cell": (N, D * H),
        "peephole": (4 * H,) if D == 1 else (2, 4 * H),
        "secondary_bias": (D * H,),
    }
    for name in present:
        if name == "mask":
            out["mask"] = rng.uniform(0.5, 1.5, (t, N, D * H))
        else:
            out[name] = r(*shapes[name])
    return out


def _final(seq, desc):
    """MPS final state: fwd at t=T-1, bwd (or reverse) at t=0."""
    if seq.shape[0] == 0:
        return None
    if desc.bidirectional:
        return np.concatenate([seq[-1, :, :H], seq[0, :, H:]], axis=-1)
    return seq[0] if desc.reverse else seq[-1]


def _mps_forward(kind, desc, inputs):
    """Differentiable outputs: [h sequence, final h] (+ final c for LSTM)."""
    args = {k: v for k, v in inputs.items() if k not in ("source", "recurrent_weight")}
    if kind == "lstm":
        h, c = M.lstm(
            inputs["source"],
            inputs["recurrent_weight"],
            **args,
            descriptor=dataclasses.replace(desc, produce_cell=True, training=False),
        )
        return [h, _final(h, desc), _final(c, desc)]
    (h,) = FWD[kind](
        inputs["source"],
        inputs["recurrent_weight"],
        **args,
        descriptor=dataclasses.replace(desc, training=False),
    )
    return [h, _final(h, desc)]


def _mps_gradients(kind, desc, inputs, upstream):
    args = {k: v for k, v in inputs.items() if k not in ("source", "recurrent_weight")}
    extra = {"state_gradient": upstream[1]}
    if kind == "lstm":
        extra["cell_gradient"] = upstream[2]
    fwd_outputs = (None,) if kind == "rnn" else (None, None)  # z_state (+ cell / output): ignored
    out = GRAD[kind](
        inputs["source"],
        inputs["recurrent_weight"],
        upstream[0],
        *fwd_outputs,
        **args,
        **extra,
        descriptor=desc,
    )
    names = [n for n in GRAD_ORDER[kind] if n in inputs]
    assert len(out) == len(names), (len(out), names)
    return dict(zip(names, out))


def _mps_fd(kind, desc, present, seed=0, scale=0.5):
    inputs = _mps_inputs(kind, desc, present, seed, scale)
    mask = inputs.pop("mask", None)
    full = lambda i: dict(i, mask=mask) if mask is not None else i  # noqa: E731
    fd.check_gradients(
        lambda i: _mps_forward(kind, desc, full(i)),
        inputs,
        lambda g: _mps_gradients(kind, desc, full(inputs), g),
        seed=seed,
    )


DIRECTIONS = {
    "fwd": {},
    "rev": {"reverse": True},
    "bidi": {"bidirectional": True},
    "bidi+rev": {"bidirectional": True, "reverse": True},
}


# ================================================================================================
# (c) MPS finite differences


@pytest.mark.parametrize("direction", ["fwd", "rev", "bidi"])
@pytest.mark.parametrize("activation", M.ACTIVATIONS)
def test_fd_single_gate_all_inputs(direction, activation):
    desc = M.SingleGateRNNDescriptor(activation=activation, **DIRECTIONS[direction])
    _mps_fd("rnn", desc, OPTIONAL["rnn"], seed=11)


@pytest.mark.parametrize("direction", ["fwd", "rev", "bidi", "bidi+rev"])
@pytest.mark.parametrize("forget_gate_last", [False, True])
def test_fd_lstm_all_inputs(direction, forget_gate_last):
    desc = M.LSTMDescriptor(forget_gate_last=forget_gate_last, **DIRECTIONS[direction])
    _mps_fd("lstm", desc, OPTIONAL["lstm"], seed=12)


@pytest.mark.parametrize("direction", ["fwd", "bidi"])
@pytest.mark.parametrize(
    "acts",
    [
        ("hard_sigmoid", "sigmoid", "relu", "hard_sigmoid", "none"),
        ("tanh", "hard_sigmoid", "none", "sigmoid", "relu"),
        ("sigmoid", "tanh", "sigmoid", "relu", "sigmoid"),
    ],
)
def test_fd_lstm_activations(direction, acts):
    names = (
        "input_gate_activation",
        "forget_gate_activation",
        "cell_gate_activation",
        "output_gate_activation",
        "activation",
    )
    desc = M.LSTMDescriptor(**dict(zip(names, acts)), **DIRECTIONS[direction])
    _mps_fd("lstm", desc, OPTIONAL["lstm"], seed=13, scale=0.8)


@pytest.mark.parametrize("direction", ["fwd", "rev", "bidi"])
@pytest.mark.parametrize("reset_after", [False, True])
@pytest.mark.parametrize("flip_z", [False, True])
@pytest.mark.parametrize("reset_gate_first", [False, True])
def test_fd_gru_all_inputs(direction, reset_after, flip_z, reset_gate_first):
    desc = M.GRUDescriptor(
        reset_after=reset_after,
        flip_z=flip_z,
        reset_gate_first=reset_gate_first,
        **DIRECTIONS[direction],
    )
    _mps_fd("gru", desc, OPTIONAL["gru"], seed=14)


@pytest.mark.parametrize(
    "acts",
    [
        ("hard_sigmoid", "sigmoid", "relu"),
        ("sigmoid", "hard_sigmoid", "none"),
        ("tanh", "relu", "sigmoid"),
    ],
)
@pytest.mark.parametrize("reset_after", [False, True])
def test_fd_gru_activations(acts, reset_after):
    desc = M.GRUDescriptor(
        reset_after=reset_after,
        update_gate_activation=acts[0],
        reset_gate_activation=acts[1],
        output_gate_activation=acts[2],
    )
    _mps_fd("gru", desc, OPTIONAL["gru"], seed=15, scale=0.8)


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
@pytest.mark.parametrize(
    "present",
    [
        (),
        ("input_weight",),
        ("bias", "mask"),
        ("init_state",),
        ("input_weight", "init_state", "init_cell", "secondary_bias"),
    ],
)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_fd_optional_inputs_absent(kind, present, bidirectional):
    """Every subset of optional inputs: omitted entries vanish from the gradient list, source is
    pre-projected [T,N,(2)GH] without input_weight (bias still added)."""
    present = tuple(p for p in present if p in OPTIONAL[kind])
    desc = DESCRIPTORS[kind](
        bidirectional=bidirectional, **({"activation": "tanh"} if kind == "rnn" else {})
    )
    if kind == "gru":
        desc = dataclasses.replace(desc, reset_after=True)
    _mps_fd(kind, desc, present, seed=16)


# ================================================================================================
# MPS forward semantics


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_mps_forward_output_lists_and_z_state_shapes(kind, bidirectional):
    D, G = 2 if bidirectional else 1, GATES[kind]
    inp = _mps_inputs(kind, DESCRIPTORS[kind](bidirectional=bidirectional), ("input_weight",), 0)
    for training in (False, True):
        for produce_cell in (False, True) if kind == "lstm" else (False,):
            extra = {"produce_cell": produce_cell} if kind == "lstm" else {}
            desc = DESCRIPTORS[kind](bidirectional=bidirectional, training=training, **extra)
            out = FWD[kind](
                inp["source"], inp["recurrent_weight"], inp["input_weight"], descriptor=desc
            )
            has_cell = kind == "lstm" and (training or produce_cell)
            assert len(out) == 1 + has_cell + training
            assert out[0].shape == (T, N, D * H)
            if has_cell:
                assert out[1].shape == (T, N, D * H)
            if training:
                assert out[-1].shape == (T, N, D * G * H)


def test_mps_descriptor_accepts_dict_and_foreign_objects():
    inp = _mps_inputs("gru", M.GRUDescriptor(), ("input_weight", "bias"), 3)

    class Foreign:  # e.g. the library's own descriptor: only attribute names matter
        reset_after = True
        flip_z = True

    a = M.gru(
        inp["source"],
        inp["recurrent_weight"],
        inp["input_weight"],
        inp["bias"],
        descriptor=M.GRUDescriptor(reset_after=True, flip_z=True),
    )[0]
    b = M.gru(
        inp["source"],
        inp["recurrent_weight"],
        inp["input_weight"],
        inp["bias"],
        descriptor={"reset_after": True, "flip_z": True},
    )[0]
    c = M.gru(
        inp["source"],
        inp["recurrent_weight"],
        inp["input_weight"],
        inp["bias"],
        descriptor=Foreign(),
    )[0]
    assert np.array_equal(a, b) and np.array_equal(a, c)
    with pytest.raises(ValueError):
        M.single_gate_rnn(
            inp["source"],
            np.zeros((H, H)),
            np.zeros((H, I)),
            descriptor=M.SingleGateRNNDescriptor(activation="gelu"),
        )


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_mps_reverse_is_flipped_forward(kind):
    Desc = DESCRIPTORS[kind]
    inp = _mps_inputs(kind, Desc(), OPTIONAL[kind], 4)
    args = {k: v for k, v in inp.items() if k not in ("source", "recurrent_weight", "mask")}
    fwd = FWD[kind](
        inp["source"][::-1],
        inp["recurrent_weight"],
        mask=inp["mask"][::-1],
        **args,
        descriptor=Desc(),
    )[0]
    rev = FWD[kind](
        inp["source"],
        inp["recurrent_weight"],
        mask=inp["mask"],
        **args,
        descriptor=Desc(reverse=True),
    )[0]
    _close(rev, fwd[::-1], 1e-14)
    # bidirectional = [forward | reverse] with the second direction's weights; reverse is ignored
    two = _mps_inputs(kind, Desc(bidirectional=True), OPTIONAL[kind], 5)
    targs = {k: v for k, v in two.items() if k not in ("source", "recurrent_weight")}
    bi = FWD[kind](
        two["source"], two["recurrent_weight"], **targs, descriptor=Desc(bidirectional=True)
    )[0]
    bi_r = FWD[kind](
        two["source"],
        two["recurrent_weight"],
        **targs,
        descriptor=Desc(bidirectional=True, reverse=True),
    )[0]
    assert np.array_equal(bi, bi_r)
    G = GATES[kind]

    def half(d):
        out = {}
        for k, v in targs.items():
            if k in ("input_weight", "bias"):
                out[k] = v[d * G * H : (d + 1) * G * H]
            elif k == "peephole":
                out[k] = v[d]
            elif k in ("init_state", "init_cell", "mask"):
                out[k] = v[..., d * H : (d + 1) * H]
            elif k == "secondary_bias":
                out[k] = v[d * H : (d + 1) * H]
        return out

    for d in (0, 1):
        one = FWD[kind](
            two["source"], two["recurrent_weight"][d], **half(d), descriptor=Desc(reverse=d == 1)
        )[0]
        _close(bi[..., d * H : (d + 1) * H], one, 1e-14)


def test_mps_gru_flip_z_and_gate_order_one_step():
    """R=0, W=0, b_z=+30: z≈1.  flip_z=False: h = (1−z)h_prev + z·o ≈ o; True: h ≈ h_prev."""
    h0 = np.array([[0.3, -0.2, 0.5, 0.1]])
    b_o = np.array([0.4, -0.7, 0.2, 0.9])
    for reset_gate_first in (False, True):
        b = {"z": np.full(H, 30.0), "r": np.zeros(H), "o": b_o}
        order = ("r", "z", "o") if reset_gate_first else ("z", "r", "o")
        bias = np.concatenate([b[g] for g in order])
        src = np.zeros((1, 1, 3 * H))
        for flip_z, want in ((False, np.tanh(b_o)[None]), (True, h0)):
            h = M.gru(
                src,
                np.zeros((3 * H, H)),
                None,
                bias,
                h0,
                descriptor=M.GRUDescriptor(flip_z=flip_z, reset_gate_first=reset_gate_first),
            )[0]
            _close(h[0], want, 1e-12)


def test_mps_lstm_peephole_hits_all_four_gates():
    """With W=R=0, b=0, c0≠0: every gate pre-activation equals p_g⊙c0."""
    c0 = np.array([[0.5, -1.0, 2.0, 0.25]])
    p = np.arange(1, 4 * H + 1) / 10.0
    h, c, z = M.lstm(
        np.zeros((1, 1, 4 * H)),
        np.zeros((4 * H, H)),
        None,
        None,
        None,
        c0,
        None,
        p,
        descriptor=M.LSTMDescriptor(training=True),
    )
    _close(z[0, 0], p * np.tile(c0[0], 4), 1e-15)
    i, f, g, o = (p[k * H : (k + 1) * H] * c0[0] for k in range(4))
    cc = M.sigmoid(f) * c0[0] + M.sigmoid(i) * np.tanh(g)
    _close(c[0, 0], cc, 1e-15)
    _close(h[0, 0], M.sigmoid(o) * np.tanh(cc), 1e-15)


def test_mps_hard_sigmoid_definition():
    a = np.array([-3.0, -2.5, -1.0, 0.0, 1.0, 2.5, 3.0])
    _close(M.activate("hard_sigmoid", a), np.clip(0.2 * a + 0.5, 0, 1), 0)


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_mps_degenerate_T0(kind):
    Desc = DESCRIPTORS[kind]
    desc = Desc(bidirectional=True)
    inp = _mps_inputs(kind, desc, OPTIONAL[kind], 6, t=0)
    args = {k: v for k, v in inp.items() if k not in ("source", "recurrent_weight")}
    out = FWD[kind](inp["source"], inp["recurrent_weight"], **args, descriptor=desc)
    assert out[0].shape == (0, N, 2 * H)
    sg = _rng(1).standard_normal((N, 2 * H))
    extra = {"state_gradient": sg}
    if kind == "lstm":
        extra["cell_gradient"] = 2 * sg
    fwd_outputs = (None,) if kind == "rnn" else (None, None)
    grads = GRAD[kind](
        inp["source"],
        inp["recurrent_weight"],
        np.zeros((0, N, 2 * H)),
        *fwd_outputs,
        **args,
        **extra,
        descriptor=desc,
    )
    named = dict(zip([n for n in GRAD_ORDER[kind] if n in inp], grads))
    assert np.array_equal(named["init_state"], sg)
    if kind == "lstm":
        assert np.array_equal(named["init_cell"], 2 * sg)
    assert not np.any(named["recurrent_weight"]) and named["source"].shape == (0, N, I)


# ================================================================================================
# (b) MPS vs PyTorch


def _torch():
    return pytest.importorskip("torch")


def _t(a, grad=False):
    torch = _torch()
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def _torch_rnn_module(
    torch, mode, input_size, hidden, layers=1, bidi=False, proj=0, batch_first=False, seed=0
):
    torch.manual_seed(seed)
    kw = dict(num_layers=layers, bidirectional=bidi, batch_first=batch_first)
    if mode == "lstm":
        m = torch.nn.LSTM(input_size, hidden, proj_size=proj, **kw)
    elif mode == "gru":
        m = torch.nn.GRU(input_size, hidden, **kw)
    else:
        m = torch.nn.RNN(input_size, hidden, nonlinearity=mode[4:], **kw)
    m = m.double()
    with torch.no_grad():  # a wider spread than torch's default init: more signal in every gradient
        for p in m.parameters():
            p.uniform_(-0.6, 0.6)
    return m


def _sfx(bidi):
    return ["", "_reverse"] if bidi else [""]


@pytest.mark.torch
@pytest.mark.parametrize("bidi", [False, True])
@pytest.mark.parametrize("kind", ["rnn_tanh", "rnn_relu", "lstm", "gru"])
def test_mps_matches_torch(kind, bidi):
    torch = _torch()
    m = _torch_rnn_module(torch, kind, I, H, bidi=bidi, seed=3)
    D = 2 if bidi else 1
    rng = _rng(7)
    x = _t(rng.standard_normal((T, N, I)), True)
    h0 = _t(rng.standard_normal((D, N, H)), True)
    c0 = _t(rng.standard_normal((D, N, H)), True)
    out, state = m(x, (h0, c0)) if kind == "lstm" else m(x, h0)
    hn, cn = state if kind == "lstm" else (state, None)
    g_out, g_hn, g_cn = (rng.standard_normal(tuple(v.shape)) for v in (out, hn, hn))
    loss = (
        (out * _t(g_out)).sum()
        + (hn * _t(g_hn)).sum()
        + ((cn * _t(g_cn)).sum() if cn is not None else 0)
    )
    loss.backward()

    p = {n: getattr(m, n) for n, _ in m.named_parameters()}
    sfx = _sfx(bidi)
    W = np.concatenate([p["weight_ih_l0" + s].detach().numpy() for s in sfx])
    R = [p["weight_hh_l0" + s].detach().numpy() for s in sfx]
    R = R[0] if D == 1 else np.stack(R)
    cat = lambda a: np.concatenate(list(a), axis=-1)  # [D,N,H] -> [N,D*H]  # noqa: E731
    bih = [p["bias_ih_l0" + s].detach().numpy() for s in sfx]
    bhh = [p["bias_hh_l0" + s].detach().numpy() for s in sfx]
    x_np, h0_np, c0_np = x.detach().numpy(), cat(h0.detach().numpy()), cat(c0.detach().numpy())
    if kind == "gru":
        b = np.concatenate(
            [np.concatenate([bi[: 2 * H] + bh[: 2 * H], bi[2 * H :]]) for bi, bh in zip(bih, bhh)]
        )
        b2 = np.concatenate([bh[2 * H :] for bh in bhh])
        desc = M.GRUDescriptor(
            bidirectional=bidi, reset_gate_first=True, reset_after=True, flip_z=True
        )
        h = M.gru(x_np, R, W, b, h0_np, None, b2, descriptor=desc)[0]
        grads = M.gru_gradients(
            x_np, R, g_out, None, None, W, b, h0_np, None, b2, cat(g_hn), descriptor=desc
        )
        dx, dR, dW, db, dh0, db2 = grads
    else:
        b = np.concatenate([bi + bh for bi, bh in zip(bih, bhh)])
        if kind == "lstm":
            desc = M.LSTMDescriptor(bidirectional=bidi)
            h = M.lstm(x_np, R, W, b, h0_np, c0_np, descriptor=desc)[0]
            dx, dR, dW, db, dh0, dc0 = M.lstm_gradients(
                x_np,
                R,
                g_out,
                None,
                None,
                W,
                b,
                h0_np,
                c0_np,
                None,
                None,
                cat(g_hn),
                cat(g_cn),
                descriptor=desc,
            )
            _close(dc0, cat(c0.grad.numpy()), what="d_init_cell")
        else:
            desc = M.SingleGateRNNDescriptor(bidirectional=bidi, activation=kind[4:])
            h = M.single_gate_rnn(x_np, R, W, b, h0_np, descriptor=desc)[0]
            dx, dR, dW, db, dh0 = M.single_gate_rnn_gradients(
                x_np, R, g_out, None, W, b, h0_np, None, cat(g_hn), descriptor=desc
            )
    _close(h, out.detach().numpy(), what="h")
    _close(_final(h, desc), cat(hn.detach().numpy()), what="final h")
    _close(dx, x.grad.numpy(), what="d_source")
    _close(dh0, cat(h0.grad.numpy()), what="d_init_state")
    tg = {n: v.grad.numpy() for n, v in p.items()}
    _close(dW, np.concatenate([tg["weight_ih_l0" + s] for s in sfx]), what="d_input_weight")
    tR = [tg["weight_hh_l0" + s] for s in sfx]
    _close(dR, tR[0] if D == 1 else np.stack(tR), what="d_recurrent_weight")
    if kind == "gru":
        want_b = np.concatenate(
            [tg["bias_ih_l0" + s] for s in sfx]
        )  # = d(b_ir+b_hr), d(b_iz+b_hz), d b_in
        _close(db, want_b, what="d_bias")
        _close(
            db2,
            np.concatenate([tg["bias_hh_l0" + s][2 * H :] for s in sfx]),
            what="d_secondary_bias",
        )
    else:
        _close(db, np.concatenate([tg["bias_ih_l0" + s] for s in sfx]), what="d_bias")
        _close(db, np.concatenate([tg["bias_hh_l0" + s] for s in sfx]), what="d_bias (hh)")


# ================================================================================================
# cuDNN dialect: params layout


def _torch_to_canonical(m, G, attr=lambda p: p):
    """semantics.md §4.3 mapping; ``attr`` picks the tensor (or its .grad)."""
    W, B = [], []
    for l in range(m.num_layers):
        for s in _sfx(m.bidirectional):
            p = lambda n, l=l, s=s: attr(getattr(m, f"{n}_l{l}{s}")).detach().numpy()  # noqa: E731
            W += list(np.split(p("weight_ih"), G)) + list(np.split(p("weight_hh"), G))
            if getattr(m, "proj_size", 0):
                W.append(p("weight_hr"))
            B += list(np.split(p("bias_ih"), G)) + list(np.split(p("bias_hh"), G))
    return W, B


MODE_G = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}


def test_params_size_known_values():
    # semantics.md §4.2 (verified there against PyTorch)
    assert C.params_size(1, 2, 3, rnn_mode="lstm") == 56
    assert C.params_size(2, 4, 3, rnn_mode="lstm", direction="bidirectional") == 736
    assert C.params_size(2, 4, 3, rnn_mode="lstm", direction="bidirectional", num_proj=2) == 512
    assert C.params_size(3, 6, 5, rnn_mode="gru", direction="bidirectional") == 1908
    assert C.params_size(2, 3, 7, rnn_mode="rnn_tanh") == 60
    # skip_input drops exactly layer 0's input matrices (G·H·H per direction), keeps its biases
    for mode, G in MODE_G.items():
        lin = C.params_size(2, 4, 4, rnn_mode=mode, direction="bidirectional")
        skip = C.params_size(
            2, 4, 4, rnn_mode=mode, direction="bidirectional", input_mode="skip_input"
        )
        assert lin - skip == 2 * G * 4 * 4
        assert C.params_size(2, 4, 4, rnn_mode=mode, input_mode="auto_select") == C.params_size(
            2, 4, 4, rnn_mode=mode, input_mode="skip_input"
        )
    with pytest.raises(ValueError):
        C.params_size(1, 4, 5, input_mode="skip_input")
    with pytest.raises(ValueError):
        C.params_size(1, 4, 5, rnn_mode="gru", num_proj=2)


@pytest.mark.torch
@pytest.mark.parametrize("mode", list(MODE_G))
def test_params_size_equals_torch_count(mode):
    torch = _torch()
    for layers, bidi, proj in (
        (1, False, 0),
        (3, True, 0),
        (2, False, 0),
        (3, True, 3),
        (2, False, 2),
    ):
        if proj and mode != "lstm":
            continue
        m = _torch_rnn_module(torch, mode, I, H, layers, bidi, proj)
        n = sum(p.numel() for p in m.parameters())
        assert (
            C.params_size(
                layers,
                H,
                I,
                rnn_mode=mode,
                direction="bidirectional" if bidi else "unidirectional",
                num_proj=proj,
            )
            == n
        )


@pytest.mark.parametrize(
    "cfg",
    [
        dict(rnn_mode="lstm", num_proj=3, direction="bidirectional"),
        dict(rnn_mode="gru", input_mode="skip_input"),
        dict(rnn_mode="rnn_relu", direction="bidirectional", input_mode="skip_input"),
    ],
)
def test_canonical_params_roundtrip_and_layout(cfg):
    L, Hh, In = 3, 4, 4
    ws, bs = C.canonical_shapes(L, Hh, In, **cfg)
    rng = _rng(0)
    weights = [rng.standard_normal(s) for s in ws]
    biases = [rng.standard_normal(s) for s in bs]
    params = C.canonical_to_params(L, Hh, In, weights, biases, **cfg)
    assert params.shape == (C.params_size(L, Hh, In, **cfg),)
    w2, b2 = C.params_to_canonical(L, Hh, In, params, **cfg)
    assert all(np.array_equal(a, b) for a, b in zip(weights + biases, w2 + b2))
    assert np.array_equal(C.canonical_to_params(L, Hh, In, w2, b2, **cfg), params)
    # layout: pseudo-layer 0's weights, then its biases, then pseudo-layer 1 ...
    G = MODE_G[cfg["rnn_mode"]]
    D = 2 if cfg.get("direction") == "bidirectional" else 1
    k0 = len(C.canonical_shapes(1, Hh, In, **cfg)[0]) // D  # weights of pseudo-layer 0
    expect = np.concatenate(
        [w.reshape(-1) for w in weights[:k0]] + [b.reshape(-1) for b in biases[: 2 * G]]
    )
    assert np.array_equal(params[: expect.size], expect)
    if cfg.get("input_mode") == "skip_input":
        assert k0 == G  # layer 0 keeps only R_0..R_{G-1} (its biases stay)
    with pytest.raises(ValueError):
        C.params_to_canonical(L, Hh, In, params[:-1], **cfg)


# ================================================================================================
# (a) cuDNN dialect vs PyTorch


def _cudnn_vs_torch(mode, layers, bidi, proj=0, batch_first=False, lengths=None, seed=0):
    torch = _torch()
    m = _torch_rnn_module(torch, mode, I, H, layers, bidi, proj, batch_first, seed)
    D = 2 if bidi else 1
    Rr = proj or H
    rng = _rng(seed + 100)
    xshape = (N, T, I) if batch_first else (T, N, I)
    x = _t(rng.standard_normal(xshape), True)
    h0 = _t(rng.standard_normal((layers * D, N, Rr)), True)
    c0 = _t(rng.standard_normal((layers * D, N, H)), True)
    hx = (h0, c0) if mode == "lstm" else h0
    if lengths is None:
        out, state = m(x, hx)
    else:
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            x, torch.tensor(lengths), batch_first=batch_first, enforce_sorted=False
        )
        out_p, state = m(packed, hx)
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(
            out_p, batch_first=batch_first, total_length=T
        )
    hn, cn = state if mode == "lstm" else (state, None)
    g_out = rng.standard_normal(tuple(out.shape))
    g_hn = rng.standard_normal(tuple(hn.shape))
    g_cn = rng.standard_normal((layers * D, N, H))
    loss = (
        (out * _t(g_out)).sum()
        + (hn * _t(g_hn)).sum()
        + ((cn * _t(g_cn)).sum() if cn is not None else 0)
    )
    loss.backward()

    G = MODE_G[mode]
    W, B = _torch_to_canonical(m, G)
    kw = dict(
        rnn_mode=mode,
        direction="bidirectional" if bidi else "unidirectional",
        num_proj=proj,
        time_major=not batch_first,
    )
    args = (
        x.detach().numpy(),
        h0.detach().numpy(),
        c0.detach().numpy() if mode == "lstm" else None,
    )
    y, oh, oc = C.cudnn_rnn_forward_canonical(*args, W, B, lengths, **kw)
    _close(y, out.detach().numpy(), what="output")
    _close(oh, hn.detach().numpy(), what="output_h")
    if mode == "lstm":
        _close(oc, cn.detach().numpy(), what="output_c")
    else:
        assert oc.size == 0
    dx, dh, dc, dW, dB = C.cudnn_rnn_backward_canonical(
        *args, W, B, lengths, g_out, g_hn, g_cn if mode == "lstm" else None, **kw
    )
    _close(dx, x.grad.numpy(), what="input_backprop")
    _close(dh, h0.grad.numpy(), what="input_h_backprop")
    if mode == "lstm":
        _close(dc, c0.grad.numpy(), what="input_c_backprop")
    tW, tB = _torch_to_canonical(m, G, attr=lambda p: p.grad)
    assert len(dW) == len(tW) and len(dB) == len(tB)
    for k, (a, b) in enumerate(zip(dW, tW)):
        _close(a, b, what=f"weights[{k}]")
    for k, (a, b) in enumerate(zip(dB, tB)):
        _close(a, b, what=f"biases[{k}]")
    # the flat-params entry points agree with the canonical ones
    params = C.canonical_to_params(
        layers, H, I, W, B, **{k: v for k, v in kw.items() if k != "time_major"}
    )
    y2 = C.cudnn_rnn_forward(*args, params, lengths, **kw)[0]
    assert np.array_equal(y2, y)
    dp = C.cudnn_rnn_backward(
        *args, params, lengths, g_out, g_hn, g_cn if mode == "lstm" else None, **kw
    )[3]
    _close(
        dp,
        C.canonical_to_params(
            layers, H, I, dW, dB, **{k: v for k, v in kw.items() if k != "time_major"}
        ),
        0,
        "params_backprop",
    )
    return dx


@pytest.mark.torch
@pytest.mark.parametrize("layers,bidi", [(1, False), (1, True), (3, False), (3, True)])
@pytest.mark.parametrize("mode", list(MODE_G))
def test_cudnn_matches_torch(mode, layers, bidi):
    _cudnn_vs_torch(mode, layers, bidi, seed=layers + 2 * bidi)


@pytest.mark.torch
@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_cudnn_matches_torch_batch_first(mode):
    _cudnn_vs_torch(mode, 2, True, batch_first=True, seed=5)


@pytest.mark.torch
@pytest.mark.parametrize("layers,bidi", [(1, False), (3, True)])
def test_cudnn_lstm_projection_matches_torch(layers, bidi):
    _cudnn_vs_torch("lstm", layers, bidi, proj=3, seed=6)


@pytest.mark.torch
@pytest.mark.parametrize("mode", list(MODE_G))
@pytest.mark.parametrize("batch_first", [False, True])
def test_cudnn_sequence_lengths_match_torch_packed(mode, batch_first):
    lengths = [3, T, 1]  # unsorted, includes T
    dx = _cudnn_vs_torch(
        mode,
        2,
        True,
        proj=2 if mode == "lstm" else 0,
        batch_first=batch_first,
        lengths=lengths,
        seed=8,
    )
    dx_tm = dx if not batch_first else dx.transpose(1, 0, 2)
    for n, ln in enumerate(lengths):
        assert not np.any(dx_tm[ln:, n]), "input_backprop must be 0 past each length"


@pytest.mark.torch
def test_cudnn_dropout_matches_composed_torch_layers():
    """Dropout masks between layers == running single torch layers with the mask applied between."""
    torch = _torch()
    rng = _rng(9)
    L, D = 3, 2
    mods = [
        _torch_rnn_module(torch, "lstm", I if l == 0 else D * H, H, 1, True, seed=20 + l)
        for l in range(L)
    ]
    x = _t(rng.standard_normal((T, N, I)), True)
    h0 = _t(rng.standard_normal((L * D, N, H)), True)
    c0 = _t(rng.standard_normal((L * D, N, H)), True)
    p = 0.4
    masks = [(rng.uniform(size=(T, N, D * H)) > p) / (1 - p) for _ in range(L - 1)]
    inp, hs, cs = x, [], []
    for l, m in enumerate(mods):
        y, (hn, cn) = m(inp, (h0[l * D : (l + 1) * D], c0[l * D : (l + 1) * D]))
        hs.append(hn), cs.append(cn)
        inp = y * _t(masks[l]) if l < L - 1 else y
    hn, cn = torch.cat(hs), torch.cat(cs)
    g = [rng.standard_normal(tuple(v.shape)) for v in (y, hn, cn)]
    ((y * _t(g[0])).sum() + (hn * _t(g[1])).sum() + (cn * _t(g[2])).sum()).backward()
    W, B = [], []
    for m in mods:
        w, b = _torch_to_canonical(m, 4)
        W, B = W + w, B + b
    args = (x.detach().numpy(), h0.detach().numpy(), c0.detach().numpy())
    kw = dict(direction="bidirectional", dropout_masks=masks)
    out, oh, oc = C.cudnn_rnn_forward_canonical(*args, W, B, **kw)
    _close(out, y.detach().numpy(), what="output")
    _close(oh, hn.detach().numpy(), what="output_h")
    _close(oc, cn.detach().numpy(), what="output_c")
    dx, dh, dc, dW, dB = C.cudnn_rnn_backward_canonical(*args, W, B, None, *g, **kw)
    _close(dx, x.grad.numpy(), what="dx")
    _close(dh, h0.grad.numpy(), what="dh0")
    _close(dc, c0.grad.numpy(), what="dc0")
    tW, tB = [], []
    for m in mods:
        w, b = _torch_to_canonical(m, 4, attr=lambda q: q.grad)
        tW, tB = tW + w, tB + b
    for a, b in zip(dW + dB, tW + tB):
        _close(a, b, what="param grad")
    # all-ones masks == no dropout; stacked-array form == list form; p = 1 (zeros) gives no NaN
    ones = C.cudnn_rnn_forward_canonical(
        *args, W, B, direction="bidirectional", dropout_masks=np.ones((L - 1, T, N, D * H))
    )
    none = C.cudnn_rnn_forward_canonical(*args, W, B, direction="bidirectional")
    assert all(np.array_equal(a, b) for a, b in zip(ones, none))
    zeros = C.cudnn_rnn_forward_canonical(
        *args, W, B, direction="bidirectional", dropout_masks=[0.0, 0.0]
    )
    assert np.all(np.isfinite(zeros[0]))


# ================================================================================================
# cuDNN semantics without torch


def _cudnn_inputs(
    mode, layers, bidi, proj=0, skip=False, seed=0, in_size=None, tt=T, batch_first=False
):
    rng = _rng(seed)
    D = 2 if bidi else 1
    in_size = H if skip else (in_size or I)
    cfg = dict(
        rnn_mode=mode,
        direction="bidirectional" if bidi else "unidirectional",
        num_proj=proj,
        input_mode="skip_input" if skip else "linear_input",
    )
    ws, bs = C.canonical_shapes(layers, H, in_size, **cfg)
    W = [0.5 * rng.standard_normal(s) for s in ws]
    B = [0.5 * rng.standard_normal(s) for s in bs]
    xshape = (N, tt, in_size) if batch_first else (tt, N, in_size)
    x = rng.standard_normal(xshape)
    h0 = rng.standard_normal((layers * D, N, proj or H))
    c0 = rng.standard_normal((layers * D, N, H)) if mode == "lstm" else None
    return cfg, x, h0, c0, W, B


def test_cudnn_lengths_equal_per_row_truncation():
    """Every row with its own length (0 and T included) equals the same row run alone on x[:len]:
    the reverse direction starts at its own end, the final state is at its own end."""
    for mode in MODE_G:
        cfg, x, h0, c0, W, B = _cudnn_inputs(mode, 2, True, proj=2 if mode == "lstm" else 0, seed=3)
        lengths = np.array([2, 0, T])
        y, oh, oc = C.cudnn_rnn_forward_canonical(x, h0, c0, W, B, lengths, **cfg)
        for n, ln in enumerate(lengths):
            assert not np.any(y[ln:, n])
            cn = None if c0 is None else c0[:, n : n + 1]
            if ln == 0:
                _close(oh[:, n], h0[:, n], 0)
                if c0 is not None:
                    _close(oc[:, n], c0[:, n], 0)
                continue
            y1, oh1, oc1 = C.cudnn_rnn_forward_canonical(
                x[:ln, n : n + 1], h0[:, n : n + 1], cn, W, B, **cfg
            )
            _close(y[:ln, n], y1[:, 0], 1e-14)
            _close(oh[:, n], oh1[:, 0], 1e-14)
            if c0 is not None:
                _close(oc[:, n], oc1[:, 0], 1e-14)


def test_cudnn_backward_ignores_output_backprop_past_length():
    cfg, x, h0, c0, W, B = _cudnn_inputs("lstm", 2, True, seed=4)
    lengths = np.array([3, 0, T])
    rng = _rng(5)
    g = rng.standard_normal((T, N, 2 * H))
    gh, gc = rng.standard_normal(h0.shape), rng.standard_normal(c0.shape)
    base = C.cudnn_rnn_backward_canonical(x, h0, c0, W, B, lengths, g, gh, gc, **cfg)
    g2 = g.copy()
    for n, ln in enumerate(lengths):
        g2[ln:, n] = 1e3
    other = C.cudnn_rnn_backward_canonical(x, h0, c0, W, B, lengths, g2, gh, gc, **cfg)
    for a, b in zip(base[:3] + tuple(base[3] + base[4]), other[:3] + tuple(other[3] + other[4])):
        assert np.array_equal(a, b)
    # len 0: the initial state is the final state, so its gradient passes straight through
    _close(base[1][:, 1], gh[:, 1], 0)
    _close(base[2][:, 1], gc[:, 1], 0)
    assert not np.any(base[0][:, 1])


def test_cudnn_skip_input_equals_identity_input_weights():
    for mode, G in MODE_G.items():
        cfg, x, h0, c0, W, B = _cudnn_inputs(mode, 2, True, skip=True, seed=6)
        lin = dict(cfg, input_mode="linear_input")
        W_lin = []  # the same weights with identity input matrices inserted for layer 0
        k = 0
        for l in range(2):
            for _d in range(2):
                if l == 0:
                    W_lin += [np.eye(H)] * G
                    n = G  # R_0..R_{G-1}
                else:
                    n = 2 * G
                W_lin += W[k : k + n]
                k += n
        assert k == len(W)
        a = C.cudnn_rnn_forward_canonical(x, h0, c0, W, B, **cfg)
        b = C.cudnn_rnn_forward_canonical(x, h0, c0, W_lin, B, **lin)
        for u, v in zip(a, b):
            _close(u, v, 1e-14)


@pytest.mark.parametrize("mode", list(MODE_G))
def test_cudnn_degenerate_sizes(mode):
    """T = 0 or N = 0: empty outputs, final state = initial state, its gradient passes through."""
    for tt, nn in ((0, N), (T, 0)):
        cfg, _, _, _, W, B = _cudnn_inputs(mode, 2, True, seed=7)
        x = np.zeros((tt, nn, I))
        h0 = _rng(8).standard_normal((4, nn, H))
        c0 = _rng(9).standard_normal((4, nn, H)) if mode == "lstm" else None
        y, oh, oc = C.cudnn_rnn_forward_canonical(x, h0, c0, W, B, **cfg)
        assert y.shape == (tt, nn, 2 * H)
        assert np.array_equal(oh, h0) and (mode != "lstm" or np.array_equal(oc, c0))
        dx, dh, dc, dW, dB = C.cudnn_rnn_backward_canonical(
            x, h0, c0, W, B, None, np.zeros(y.shape), 2 * h0, None if c0 is None else 3 * c0, **cfg
        )
        assert dx.shape == x.shape and np.array_equal(dh, 2 * h0)
        assert mode != "lstm" or np.array_equal(dc, 3 * c0)
        assert not any(np.any(g) for g in dW + dB)


def test_cudnn_gru_skip_input_closed_form():
    """tensorflow/tensorflow#8311: all params 0, x = 1, h0 = 0 -> (1−σ(1))·tanh(1) = 0.2048242."""
    ws, bs = C.canonical_shapes(1, H, H, rnn_mode="gru", input_mode="skip_input")
    W, B = [np.zeros(s) for s in ws], [np.zeros(s) for s in bs]
    y, oh, _ = C.cudnn_rnn_forward_canonical(
        np.ones((1, 2, H)), np.zeros((1, 2, H)), None, W, B, rnn_mode="gru", input_mode="skip_input"
    )
    want = (1 - M.sigmoid(1.0)) * np.tanh(1.0)
    assert abs(want - 0.2048242) < 1e-7
    _close(y, np.full((1, 2, H), want), 1e-15)
    _close(oh[0], y[0], 0)
    # auto_select picks skip_input when input_size == num_units
    y2 = C.cudnn_rnn_forward_canonical(
        np.ones((1, 2, H)),
        np.zeros((1, 2, H)),
        None,
        W,
        B,
        rnn_mode="gru",
        input_mode="auto_select",
    )[0]
    assert np.array_equal(y, y2)


# ------------------------------------------------------------------------------------------------
# (c) cuDNN finite differences


def _cudnn_fd(
    mode,
    layers,
    bidi,
    proj=0,
    skip=False,
    lengths=None,
    masks=None,
    batch_first=False,
    seed=0,
    directions=None,
):
    cfg, x, h0, c0, W, B = _cudnn_inputs(
        mode, layers, bidi, proj, skip, seed, batch_first=batch_first
    )
    cfg["time_major"] = not batch_first
    inputs = {"x": x, "h0": h0}
    if c0 is not None:
        inputs["c0"] = c0
    inputs.update({f"w{k}": w for k, w in enumerate(W)})
    inputs.update({f"b{k}": b for k, b in enumerate(B)})
    lstm = mode == "lstm"

    def unpack(i):
        return ([i[f"w{k}"] for k in range(len(W))], [i[f"b{k}"] for k in range(len(B))])

    def forward(i):
        w, b = unpack(i)
        y, oh, oc = C.cudnn_rnn_forward_canonical(
            i["x"], i["h0"], i.get("c0"), w, b, lengths, dropout_masks=masks, **cfg
        )
        return [y, oh, oc] if lstm else [y, oh]

    def grads(g):
        w, b = unpack(inputs)
        dx, dh, dc, dW, dB = C.cudnn_rnn_backward_canonical(
            inputs["x"],
            inputs["h0"],
            inputs.get("c0"),
            w,
            b,
            lengths,
            g[0],
            g[1],
            g[2] if lstm else None,
            dropout_masks=masks,
            **cfg,
        )
        out = {"x": dx, "h0": dh}
        if lstm:
            out["c0"] = dc
        out.update({f"w{k}": a for k, a in enumerate(dW)})
        out.update({f"b{k}": a for k, a in enumerate(dB)})
        return out

    fd.check_gradients(forward, inputs, grads, seed=seed, directions=directions)


@pytest.mark.parametrize("bidi", [False, True])
@pytest.mark.parametrize("mode", list(MODE_G))
def test_fd_cudnn_single_layer(mode, bidi):
    _cudnn_fd(mode, 1, bidi, seed=21)


@pytest.mark.parametrize("mode", list(MODE_G))
def test_fd_cudnn_two_layers_lengths_dropout(mode):
    rng = _rng(22)
    masks = [(rng.uniform(size=(T, N, 2 * H)) > 0.3) / 0.7]
    _cudnn_fd(mode, 2, True, lengths=np.array([2, 0, T]), masks=masks, seed=22)


@pytest.mark.parametrize("mode", list(MODE_G))
def test_fd_cudnn_skip_input(mode):
    _cudnn_fd(mode, 2, True, skip=True, lengths=np.array([T, 4, 1]), seed=23)


@pytest.mark.parametrize("bidi", [False, True])
def test_fd_cudnn_projection(bidi):
    rng = _rng(24)
    masks = [rng.uniform(0.0, 2.0, (T, N, (2 if bidi else 1) * 3))]
    _cudnn_fd("lstm", 2, bidi, proj=3, lengths=np.array([3, T, 0]), masks=masks, seed=24)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_fd_cudnn_batch_major(mode):
    _cudnn_fd(mode, 2, True, lengths=np.array([4, 1, T]), batch_first=True, seed=25, directions=3)


def test_fd_cudnn_flat_params():
    cfg, x, h0, c0, W, B = _cudnn_inputs("gru", 2, True, seed=26)
    inputs = {"x": x, "h0": h0, "params": C.canonical_to_params(2, H, I, W, B, **cfg)}
    lengths = np.array([T, 2, 3])
    fd.check_gradients(
        lambda i: list(C.cudnn_rnn_forward(i["x"], i["h0"], None, i["params"], lengths, **cfg)[:2]),
        inputs,
        lambda g: dict(
            zip(
                ("x", "h0", "params"),
                (lambda r: (r[0], r[1], r[3]))(
                    C.cudnn_rnn_backward(
                        inputs["x"],
                        inputs["h0"],
                        None,
                        inputs["params"],
                        lengths,
                        g[0],
                        g[1],
                        None,
                        **cfg,
                    )
                ),
            )
        ),
        seed=26,
    )


# ================================================================================================
# TF block ops


def _tf_lstm_inputs(seed, steps=None, scale=0.4):
    """LSTMBlockCell inputs (x [N,I]), or BlockLSTM inputs (x [steps,N,I])."""
    rng = _rng(seed)
    r = lambda *s: scale * rng.standard_normal(s)  # noqa: E731
    return dict(
        x=r(N, I) if steps is None else r(steps, N, I),
        cs_prev=r(N, H),
        h_prev=r(N, H),
        w=r(I + H, 4 * H),
        wci=r(H),
        wcf=r(H),
        wco=r(H),
        b=r(4 * H),
    )


LSTM_ARGS = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")


@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("cell_clip", [0.0, 3.0])
def test_fd_lstm_block_cell(use_peephole, cell_clip):
    inputs = _tf_lstm_inputs(31)
    kw = dict(forget_bias=0.7, cell_clip=cell_clip, use_peephole=use_peephole)

    def forward(i):
        out = TF.lstm_block_cell(*(i[k] for k in LSTM_ARGS), **kw)
        return [out[1], out[6]]  # cs, h

    assert np.max(np.abs(forward(inputs)[0])) < 3.0  # clip inactive

    def grads(g):
        fw = TF.lstm_block_cell(*(inputs[k] for k in LSTM_ARGS), **kw)
        cs_prev_grad, dicfo, wci_g, wcf_g, wco_g = TF.lstm_block_cell_grad(
            *(inputs[k] for k in LSTM_ARGS), *fw[:6], g[0], g[1], use_peephole=use_peephole
        )
        x_g, h_g, w_g, b_g = TF.lstm_block_cell_weight_grads(
            inputs["x"], inputs["h_prev"], inputs["w"], dicfo
        )
        out = dict(
            x=x_g, cs_prev=cs_prev_grad, h_prev=h_g, w=w_g, b=b_g, wci=wci_g, wcf=wcf_g, wco=wco_g
        )
        if not use_peephole:
            assert not (np.any(wci_g) or np.any(wcf_g) or np.any(wco_g))
        return out

    fd.check_gradients(forward, inputs, grads, seed=31)
    # dicfo row n = dL/db of row n alone (cells are row-independent), ICFO order
    rng = _rng(32)
    gcs, gh = rng.standard_normal((N, H)), rng.standard_normal((N, H))
    fw = TF.lstm_block_cell(*(inputs[k] for k in LSTM_ARGS), **kw)
    dicfo = TF.lstm_block_cell_grad(
        *(inputs[k] for k in LSTM_ARGS), *fw[:6], gcs, gh, use_peephole=use_peephole
    )[1]
    for n in range(N):
        row = {
            k: (v[n : n + 1] if k in ("x", "cs_prev", "h_prev") else v) for k, v in inputs.items()
        }

        def loss(b, row=row, n=n):
            out = TF.lstm_block_cell(*(row[k] if k != "b" else b for k in LSTM_ARGS), **kw)
            return float(np.sum(out[1] * gcs[n]) + np.sum(out[6] * gh[n]))

        _close(dicfo[n], fd.numeric_grad(loss, row["b"].copy()), 1e-7, "dicfo row")


def test_lstm_block_cell_forward_equations():
    """ICFO layout, forget_bias on f, peephole wco on the *clipped new* cs, cell clip on cs."""
    i_ = _tf_lstm_inputs(33, scale=1.5)
    i_["b"][2 * H : 3 * H] += 3.0  # push cs beyond the clip
    i, cs, f, o, ci, co, h = TF.lstm_block_cell(
        *(i_[k] for k in LSTM_ARGS), forget_bias=0.5, cell_clip=1.0, use_peephole=True
    )
    a = np.concatenate([i_["x"], i_["h_prev"]], 1) @ i_["w"] + i_["b"]
    ai, ac, af, ao = (a[:, k * H : (k + 1) * H] for k in range(4))
    _close(i, M.sigmoid(ai + i_["wci"] * i_["cs_prev"]), 1e-15)
    _close(f, M.sigmoid(af + 0.5 + i_["wcf"] * i_["cs_prev"]), 1e-15)
    _close(ci, np.tanh(ac), 1e-15)
    want_cs = np.clip(ci * i + i_["cs_prev"] * f, -1.0, 1.0)
    assert np.any(np.abs(ci * i + i_["cs_prev"] * f) > 1.0)
    _close(cs, want_cs, 1e-15)
    _close(o, M.sigmoid(ao + i_["wco"] * want_cs), 1e-15)
    _close(co, np.tanh(want_cs), 1e-15)
    _close(h, co * o, 1e-15)
    # without use_peephole the peephole weights are ignored
    a1 = TF.lstm_block_cell(*(i_[k] for k in LSTM_ARGS))
    i_["wci"], i_["wcf"], i_["wco"] = 9 * i_["wci"], 9 * i_["wcf"], 9 * i_["wco"]
    a2 = TF.lstm_block_cell(*(i_[k] for k in LSTM_ARGS))
    assert all(np.array_equal(p, q) for p, q in zip(a1, a2))


@pytest.mark.parametrize("v2", [False, True])
@pytest.mark.parametrize("seq_len_max", [T, 3, 0])
@pytest.mark.parametrize("use_peephole", [False, True])
def test_fd_block_lstm(v2, seq_len_max, use_peephole):
    inputs = _tf_lstm_inputs(41, steps=T)
    fwd_op, grad_op = (
        (TF.block_lstm_v2, TF.block_lstm_grad_v2) if v2 else (TF.block_lstm, TF.block_lstm_grad)
    )
    kw = dict(cell_clip=0.0 if v2 else 3.0, use_peephole=use_peephole)
    if not v2:
        kw["forget_bias"] = 1.0

    def forward(i):
        out = fwd_op(seq_len_max, *(i[k] for k in LSTM_ARGS), **kw)
        return [out[1], out[6]]

    outs = fwd_op(seq_len_max, *(inputs[k] for k in LSTM_ARGS), **kw)
    assert np.max(np.abs(outs[1])) < 3.0
    for o in outs:
        assert o.shape == (T, N, H) and not np.any(o[seq_len_max:])

    def grads(g):
        fw = fwd_op(seq_len_max, *(inputs[k] for k in LSTM_ARGS), **kw)
        res = grad_op(
            seq_len_max, *(inputs[k] for k in LSTM_ARGS), *fw, g[0], g[1], use_peephole=use_peephole
        )
        assert not np.any(res[0][seq_len_max:])
        return dict(zip(("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b"), res))

    fd.check_gradients(forward, inputs, grads, seed=41)


@pytest.mark.torch
def test_block_lstm_clip_active_is_straight_through():
    """Active cell_clip: forward clamps cs, gradient treats the clamp as identity (TF's kernel)."""
    torch = _torch()
    inp = _tf_lstm_inputs(42, steps=T, scale=1.2)
    inp["b"][H : 2 * H] += 2.0
    inp["b"][2 * H : 3 * H] += 3.0  # f≈1, i·ci large -> cs grows past the clip
    clip = 1.5
    out = TF.block_lstm(
        T, *(inp[k] for k in LSTM_ARGS), forget_bias=1.0, cell_clip=clip, use_peephole=True
    )
    assert np.max(np.abs(out[1])) == clip
    rng = _rng(43)
    g_cs, g_h = rng.standard_normal((T, N, H)), rng.standard_normal((T, N, H))
    res = TF.block_lstm_grad(T, *(inp[k] for k in LSTM_ARGS), *out, g_cs, g_h, use_peephole=True)

    tt = {k: _t(v, True) for k, v in inp.items()}
    cs, h = tt["cs_prev"], tt["h_prev"]
    loss = 0
    for t in range(T):
        a = torch.cat([tt["x"][t], h], 1) @ tt["w"] + tt["b"]
        ai, ac, af, ao = a.split(H, 1)
        i = torch.sigmoid(ai + tt["wci"] * cs)
        f = torch.sigmoid(af + 1.0 + tt["wcf"] * cs)
        raw = torch.tanh(ac) * i + cs * f
        cs = raw + (raw.clamp(-clip, clip) - raw).detach()  # straight-through clamp
        o = torch.sigmoid(ao + tt["wco"] * cs)
        h = torch.tanh(cs) * o
        _close(h.detach().numpy(), out[6][t], 1e-13, "h")
        loss = loss + (cs * _t(g_cs[t])).sum() + (h * _t(g_h[t])).sum()
    loss.backward()
    for name, got in zip(("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b"), res):
        _close(got, tt[name].grad.numpy(), 1e-12, name)


def test_fd_gru_block_cell():
    rng = _rng(51)
    r = lambda *s: 0.5 * rng.standard_normal(s)  # noqa: E731
    inputs = dict(
        x=r(N, I), h_prev=r(N, H), w_ru=r(I + H, 2 * H), w_c=r(I + H, H), b_ru=r(2 * H), b_c=r(H)
    )
    names = ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c")

    def grads(g):
        rr, u, c, _ = TF.gru_block_cell(*(inputs[k] for k in names))
        d_x, d_h_prev, d_c_bar, d_rbub = TF.gru_block_cell_grad(
            *(inputs[k] for k in names), rr, u, c, g[0]
        )
        d_w_ru, d_w_c, d_b_ru, d_b_c = TF.gru_block_cell_weight_grads(
            inputs["x"], inputs["h_prev"], rr, d_c_bar, d_rbub
        )
        return dict(x=d_x, h_prev=d_h_prev, w_ru=d_w_ru, w_c=d_w_c, b_ru=d_b_ru, b_c=d_b_c)

    fd.check_gradients(
        lambda i: [TF.gru_block_cell(*(i[k] for k in names))[3]], inputs, grads, seed=51
    )
    # d_c_bar / d_r_bar_u_bar rows = dL/db_c, dL/db_ru of that row alone
    d_h = _rng(52).standard_normal((N, H))
    rr, u, c, _ = TF.gru_block_cell(*(inputs[k] for k in names))
    _, _, d_c_bar, d_rbub = TF.gru_block_cell_grad(*(inputs[k] for k in names), rr, u, c, d_h)

    def row_loss(n, b_ru, b_c):
        x, h_prev = inputs["x"][n : n + 1], inputs["h_prev"][n : n + 1]
        h = TF.gru_block_cell(x, h_prev, inputs["w_ru"], inputs["w_c"], b_ru, b_c)[3]
        return float(np.sum(h * d_h[n]))

    for n in range(N):
        lc = lambda b, n=n: row_loss(n, inputs["b_ru"], b)  # noqa: E731
        lru = lambda b, n=n: row_loss(n, b, inputs["b_c"])  # noqa: E731
        _close(d_c_bar[n], fd.numeric_grad(lc, inputs["b_c"].copy()), 1e-7, "d_c_bar")
        _close(d_rbub[n], fd.numeric_grad(lru, inputs["b_ru"].copy()), 1e-7, "d_r_bar_u_bar")


# ------------------------------------------------------------------------------------------------
# (d) cross-dialect identities


def test_tf_gru_block_cell_is_one_mps_gru_step():
    """GRUBlockCell = MPS GRU(reset_gate_first, reset_after=False, flip_z=True) with
    W = [w_ru[:I]ᵀ; w_c[:I]ᵀ], R = [w_ru[I:]ᵀ; w_c[I:]ᵀ], b = [b_ru, b_c] (semantics.md §2.5)."""
    rng = _rng(61)
    x, h_prev = rng.standard_normal((N, I)), rng.standard_normal((N, H))
    w_ru, w_c = rng.standard_normal((I + H, 2 * H)), rng.standard_normal((I + H, H))
    b_ru, b_c = rng.standard_normal(2 * H), rng.standard_normal(H)
    r, u, c, h = TF.gru_block_cell(x, h_prev, w_ru, w_c, b_ru, b_c)
    W = np.concatenate([w_ru[:I].T, w_c[:I].T])
    R = np.concatenate([w_ru[I:].T, w_c[I:].T])
    b = np.concatenate([b_ru, b_c])
    desc = M.GRUDescriptor(reset_gate_first=True, reset_after=False, flip_z=True)
    hm = M.gru(x[None], R, W, b, h_prev, descriptor=desc)[0]
    _close(hm[0], h, 1e-14)
    d_h = rng.standard_normal((N, H))
    d_x, d_h_prev, d_c_bar, d_rbub = TF.gru_block_cell_grad(
        x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h
    )
    d_w_ru, d_w_c, d_b_ru, d_b_c = TF.gru_block_cell_weight_grads(x, h_prev, r, d_c_bar, d_rbub)
    ds, dR, dW, db, dh0 = M.gru_gradients(
        x[None], R, d_h[None], None, None, W, b, h_prev, descriptor=desc
    )
    _close(ds[0], d_x, 1e-13)
    _close(dh0, d_h_prev, 1e-13)
    _close(dW, np.concatenate([d_w_ru[:I].T, d_w_c[:I].T]), 1e-13)
    _close(dR, np.concatenate([d_w_ru[I:].T, d_w_c[I:].T]), 1e-13)
    _close(db, np.concatenate([d_b_ru, d_b_c]), 1e-13)


@pytest.mark.parametrize("v2", [False, True])
def test_block_lstm_is_mps_lstm(v2):
    """BlockLSTMV2 (IFCO, clip 0, no peephole) = MPS LSTM [i,f,z,o] with W = w[:I]ᵀ, R = w[I:]ᵀ;
    BlockLSTM (ICFO) = MPS LSTM forget_gate_last [i,z,f,o] with forget_bias folded into b_f."""
    inp = _tf_lstm_inputs(71, steps=T, scale=0.6)
    g_h = _rng(72).standard_normal((T, N, H))
    g_cT = _rng(73).standard_normal((N, H))
    if v2:
        out = TF.block_lstm_v2(T, *(inp[k] for k in LSTM_ARGS))
        b = inp["b"]
        desc = M.LSTMDescriptor(produce_cell=True)
    else:
        out = TF.block_lstm(T, *(inp[k] for k in LSTM_ARGS), forget_bias=1.0, cell_clip=0.0)
        b = inp["b"] + np.concatenate([np.zeros(2 * H), np.ones(H), np.zeros(H)])
        desc = M.LSTMDescriptor(produce_cell=True, forget_gate_last=True)
    W, R = inp["w"][:I].T, inp["w"][I:].T
    h, c = M.lstm(inp["x"], R, W, b, inp["h_prev"], inp["cs_prev"], descriptor=desc)
    _close(h, out[6], 1e-14)
    _close(c, out[1], 1e-14)
    # gradients: dL/dh[t] for all t, dL/dcs at the last step only (MPS has only a final-cell grad)
    g_cs = np.zeros((T, N, H))
    g_cs[-1] = g_cT
    grad_op = TF.block_lstm_grad_v2 if v2 else TF.block_lstm_grad
    x_g, cs_g, h_g, w_g, _, _, _, b_g = grad_op(T, *(inp[k] for k in LSTM_ARGS), *out, g_cs, g_h)
    ds, dR, dW, db, dh0, dc0 = M.lstm_gradients(
        inp["x"],
        R,
        g_h,
        None,
        None,
        W,
        b,
        inp["h_prev"],
        inp["cs_prev"],
        cell_gradient=g_cT,
        descriptor=desc,
    )
    _close(ds, x_g, 1e-13)
    _close(dh0, h_g, 1e-13)
    _close(dc0, cs_g, 1e-13)
    _close(np.concatenate([dW.T, dR.T]), w_g, 1e-13)
    _close(db, b_g, 1e-13)
