"""pyrnn_cl against ONNX's own node test cases for RNN, GRU and LSTM.

The ``onnx`` package ships the generators of its backend node tests
(``onnx/backend/test/case/node/{rnn,gru,lstm}.py``): each ``export_*`` builds a node, inputs and
the expected outputs (computed by ONNX's reference implementation) and hands them to
``expect``. We capture those calls and run the same problem through pyrnn_cl's MPSGraph dialect
(or, for ONNX's output-gate peephole on c[t], TensorFlow's BlockLSTMV2 semantics), mapping ONNX's
gate orders (LSTM iofc, GRU zrh) and layouts ([T, D, N, H] outputs) by hand here. Forward only
(ONNX has no gradient ops).
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import pyrnn_cl as rc  # noqa: E402


def _collect(op):
    """(name, attributes, named inputs, named outputs) of every ONNX node case of ``op``."""
    module = importlib.import_module(f"onnx.backend.test.case.node.{op.lower()}")
    cases = []

    def expect(node, inputs, outputs, name, **_):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        ins = {n: np.asarray(v) for n, v in zip(node.input, inputs) if n}
        outs = {n: np.asarray(v) for n, v in zip([o for o in node.output if o], outputs)}
        cases.append((name, attrs, ins, outs))

    original = module.expect
    module.expect = expect
    try:
        np.random.seed(0)
        cls = {"RNN": "RNN", "GRU": "GRU", "LSTM": "LSTM"}[op]
        exporter = getattr(module, cls)
        for attr in sorted(dir(exporter)):
            if attr.startswith("export"):
                getattr(exporter, attr)()
    finally:
        module.expect = original
    return cases


def _ids(cases):
    return [c[0] for c in cases]


def _split_bias(B, G, H, D):
    B = np.zeros((D, 2 * G * H), np.float32) if B is None else B
    return B[:, :G * H], B[:, G * H:]


def _stack_dirs(a):
    """[D, N, H] -> [N, D*H] (MPSGraph's [fwd | bwd])."""
    return np.concatenate(list(a), axis=-1)


def _onnx_outputs(h, T, N, D, H, layout, final):
    """pyrnn_cl's h [T, N, D*H] -> ONNX Y [T, D, N, H] (layout 1: [N, T, D, H]) and Y_h."""
    y = h.reshape(T, N, D, H).transpose(0, 2, 1, 3)
    if layout == 1:
        y = y.transpose(2, 0, 1, 3)
        final = final.transpose(1, 0, 2)
    return y, final


def _final(seq, D, H, reverse):
    """Final state of each direction from the output sequence [T, N, D*H] -> [D, N, H]."""
    outs = []
    for d in range(D):
        rev = d == 1 or reverse
        outs.append(seq[0 if rev else -1][:, d * H:(d + 1) * H])
    return np.stack(outs)


def _common(attrs, ins, G):
    layout = attrs.get("layout", 0)
    x = ins["X"]
    if layout == 1:
        x = x.transpose(1, 0, 2)
    T, N, _ = x.shape
    H = attrs["hidden_size"]
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    D = 2 if direction == "bidirectional" else 1
    reverse = direction == "reverse"
    assert "activations" not in attrs and "clip" not in attrs
    h0 = ins.get("initial_h")
    if h0 is not None and layout == 1:
        h0 = h0.transpose(1, 0, 2)
    c0 = ins.get("initial_c")
    if c0 is not None and layout == 1:
        c0 = c0.transpose(1, 0, 2)
    return x, T, N, H, D, reverse, layout, h0, c0


def _check(outs, y, final, cfinal=None, tol=1e-5):
    if "Y" in outs:
        np.testing.assert_allclose(y, outs["Y"], rtol=tol, atol=tol)
    if "Y_h" in outs:
        np.testing.assert_allclose(final, outs["Y_h"], rtol=tol, atol=tol)
    if "Y_c" in outs:
        np.testing.assert_allclose(cfinal, outs["Y_c"], rtol=tol, atol=tol)


RNN_CASES = _collect("RNN")
GRU_CASES = _collect("GRU")
LSTM_CASES = _collect("LSTM")


def test_cases_were_found():
    # onnx 1.19 (the last release for Python 3.9) ships 4 export_* cases per op, 1.23 ships 6
    assert len(RNN_CASES) >= 4 and len(GRU_CASES) >= 4 and len(LSTM_CASES) >= 4


@pytest.mark.parametrize("case", RNN_CASES, ids=_ids(RNN_CASES))
def test_onnx_rnn(case):
    """ONNX RNN: H_t = tanh(X W^T + H R^T + Wb + Rb)."""
    _, attrs, ins, outs = case
    x, T, N, H, D, reverse, layout, h0, _ = _common(attrs, ins, 1)
    W, R = ins["W"], ins["R"]
    wb, rb = _split_bias(ins.get("B"), 1, H, D)
    desc = rc.SingleGateRNNDescriptor(activation="tanh", reverse=reverse, bidirectional=D == 2)
    (h,) = rc.single_gate_rnn(x, R if D == 2 else R[0], W.reshape(D * H, -1),
                              (wb + rb).reshape(-1), None if h0 is None else _stack_dirs(h0),
                              descriptor=desc)
    y, final = _onnx_outputs(h, T, N, D, H, layout, _final(h, D, H, reverse))
    _check(outs, y, final)


@pytest.mark.parametrize("case", GRU_CASES, ids=_ids(GRU_CASES))
def test_onnx_gru(case):
    """ONNX GRU, gates zrh (= MPSGraph's default [z, r, o]); h = (1-z) h~ + z h[t-1], i.e.
    flip_z=True; linear_before_reset=1 is reset_after with secondary bias Rb_h."""
    _, attrs, ins, outs = case
    x, T, N, H, D, reverse, layout, h0, _ = _common(attrs, ins, 3)
    W, R = ins["W"], ins["R"]
    wb, rb = _split_bias(ins.get("B"), 3, H, D)
    lbr = bool(attrs.get("linear_before_reset", 0))
    if lbr:
        bias = np.concatenate([wb[:, :2 * H] + rb[:, :2 * H], wb[:, 2 * H:]], axis=1)
        b2 = rb[:, 2 * H:].reshape(-1)
    else:
        bias, b2 = wb + rb, None
    desc = rc.GRUDescriptor(reverse=reverse, bidirectional=D == 2, reset_after=lbr, flip_z=True)
    (h,) = rc.gru(x, R if D == 2 else R[0], W.reshape(D * 3 * H, -1), bias.reshape(-1),
                  None if h0 is None else _stack_dirs(h0), secondary_bias=b2, descriptor=desc)
    y, final = _onnx_outputs(h, T, N, D, H, layout, _final(h, D, H, reverse))
    _check(outs, y, final)


_IOFC_TO_IFCO = [0, 2, 3, 1]


def _blocks(a, order, H):
    """Reorder the gate blocks (H rows/columns each) of the last-but-one/last axis."""
    return np.concatenate([a[..., g * H:(g + 1) * H, :] if a.ndim > 1 and a.shape[-2] == 4 * H
                           else a[..., g * H:(g + 1) * H] for g in order],
                          axis=-2 if a.ndim > 1 and a.shape[-2] == 4 * H else -1)


@pytest.mark.parametrize("case", LSTM_CASES, ids=_ids(LSTM_CASES))
def test_onnx_lstm(case):
    """ONNX LSTM, gates iofc -> MPSGraph's [i, f, z, o]; with peepholes P (i, o, f) -- o on
    c[t] -- the problem is TensorFlow's BlockLSTMV2 (IFCO, peephole wco on the new c)."""
    _, attrs, ins, outs = case
    x, T, N, H, D, reverse, layout, h0, c0 = _common(attrs, ins, 4)
    W = _blocks(ins["W"], _IOFC_TO_IFCO, H)
    R = _blocks(ins["R"], _IOFC_TO_IFCO, H)
    wb, rb = _split_bias(ins.get("B"), 4, H, D)
    bias = _blocks(wb + rb, _IOFC_TO_IFCO, H)
    if "P" in ins:
        assert D == 1 and not reverse
        P = ins["P"][0]
        z = np.zeros((N, H), np.float32)
        w = np.concatenate([W[0].T, R[0].T], axis=0)
        outs_tf = rc.block_lstm_v2(T, x, z if c0 is None else c0[0], z if h0 is None else h0[0],
                                   w, P[:H], P[2 * H:], P[H:2 * H], bias[0], use_peephole=True)
        h, cs = outs_tf[6], outs_tf[1]
    else:
        desc = rc.LSTMDescriptor(reverse=reverse, bidirectional=D == 2, produce_cell=True)
        h, cs = rc.lstm(x, R if D == 2 else R[0], W.reshape(D * 4 * H, -1), bias.reshape(-1),
                        None if h0 is None else _stack_dirs(h0),
                        None if c0 is None else _stack_dirs(c0), descriptor=desc)
    y, final = _onnx_outputs(h, T, N, D, H, layout, _final(h, D, H, reverse))
    cfinal = _final(cs, D, H, reverse)
    if layout == 1:
        cfinal = cfinal.transpose(1, 0, 2)
    _check(outs, y, final, cfinal)
