"""A cell registered from outside the package: a minimal gated unit (MGU) whose maths lives only
in ``tests/mgu.cl``, added with one ``register_cell`` call and run through the generic layer op
``pyrnn_cl.mps.rnn_layer`` / ``rnn_layer_gradients`` (README "Custom cells").

    f = sigmoid(x W_f^T + b_f + (h[t-1] . m) R_f^T)
    n = tanh(x W_n^T + b_n + (h[t-1] . m . f) R_n^T)       (two-phase: n reads f, the late gate)
    h[t] = (1 - f) . h[t-1] + f . n

Oracles: the forward against a NumPy float64 loop; every gradient (source, input and recurrent
weights, bias, initial state) against central finite differences of the device forward in
float64, for a forward, a reversed and a bidirectional layer, with a mask, and with the backward
in chunks of 1 and 3 steps (``REC_BWD_ROWS``). Shapes are prime and asymmetric, the initial
state nonzero.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from helpers.device import needs_fp64, override_tuning
from pyrnn_cl import engine
from pyrnn_cl import mps as rc
from pyrnn_cl.cells import register_cell
from pyrnn_cl.errors import BuildError

HERE = pathlib.Path(__file__).resolve().parent
MGU = register_cell("mgu", HERE / "mgu.cl", gates=2, slots=("f", "n"),
                    activations=("sigmoid", "tanh"), late_gate=0, backward_needs_y=True)

T, N, I, H = 7, 3, 5, 2
# (prime, all different)
G = 2


def _sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a))


def mgu_reference(x, W, R, b, h0, mask, D, reverse):
    """The MGU layer in NumPy float64 (MPSGraph layout: W [D*G*H, I], R [D][G*H][H])."""
    gx = x @ W.T + b
    y = np.zeros((T, N, D * H))
    for d in range(D):
        rev = d == 1 if D == 2 else reverse
        Rd = R[d] if D == 2 else R
        g = gx[..., d * G * H:(d + 1) * G * H]
        h = h0[:, d * H:(d + 1) * H].copy()
        for t in (range(T - 1, -1, -1) if rev else range(T)):
            m = 1.0 if mask is None else mask[t, :, d * H:(d + 1) * H]
            f = _sigmoid(g[t, :, :H] + (h * m) @ Rd[:H].T)
            n = np.tanh(g[t, :, H:] + (h * m * f) @ Rd[H:].T)
            h = (1 - f) * h + f * n
            y[t, :, d * H:(d + 1) * H] = h
    return y


def _final(y, D, reverse):
    if D == 2:
        return np.concatenate([y[-1, :, :H], y[0, :, H:]], axis=-1)
    return y[0] if reverse else y[-1]


def _problem(D, with_mask, seed=0):
    rng = np.random.default_rng(seed)
    p = dict(x=rng.standard_normal((T, N, I)),
             W=0.5 * rng.standard_normal((D * G * H, I)),
             R=0.5 * rng.standard_normal((D, G * H, H) if D == 2 else (G * H, H)),
             b=0.3 * rng.standard_normal(D * G * H),
             h0=0.8 * rng.standard_normal((N, D * H)))
    mask = rng.uniform(0.2, 1.5, (T, N, D * H)) if with_mask else None
    U = rng.standard_normal((T, N, D * H))          # dL/dy
    V = rng.standard_normal((N, D * H))             # dL/d(final h)
    return p, mask, U, V


def _forward(device, p, mask, desc):
    return rc.rnn_layer(p["x"], p["R"], p["W"], p["b"], p["h0"], mask=mask, descriptor=desc,
                        device=device)


CASES = {
    "forward": dict(D=1, reverse=False, mask=False),
    "reverse": dict(D=1, reverse=True, mask=False),
    "bidirectional": dict(D=2, reverse=False, mask=False),
    "bidirectional-mask": dict(D=2, reverse=False, mask=True),
    "reverse-mask": dict(D=1, reverse=True, mask=True),
}


def _check(device, D, reverse, with_mask):
    needs_fp64(device)
    p, mask, U, V = _problem(D, with_mask)
    desc = rc.RNNLayerDescriptor(cell="mgu", bidirectional=D == 2, reverse=reverse,
                                 training=True)
    y, z_state = _forward(device, p, mask, desc)
    np.testing.assert_allclose(y, mgu_reference(p["x"], p["W"], p["R"], p["b"], p["h0"], mask,
                                                D, reverse), rtol=1e-12, atol=1e-12)
    assert z_state.shape == (T, N, D * G * H)
    grads = rc.rnn_layer_gradients(p["x"], p["R"], U, z_state, output_fwd=y,
                                   input_weight=p["W"], bias=p["b"], init_state=p["h0"],
                                   mask=mask, state_gradient=V, descriptor=desc, device=device)
    analytic = dict(zip(("x", "R", "W", "b", "h0"), grads))
    assert len(grads) == 5

    plain = rc.RNNLayerDescriptor(cell="mgu", bidirectional=D == 2, reverse=reverse)

    def loss(q):
        (yy,) = _forward(device, q, mask, plain)
        return float(np.sum(U * yy) + np.sum(V * _final(yy, D, reverse)))

    eps = 1e-6
    for name, value in p.items():
        fd = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            q = {k: v.copy() for k, v in p.items()}
            q[name][idx] = value[idx] + eps
            up = loss(q)
            q[name][idx] = value[idx] - eps
            fd[idx] = (up - loss(q)) / (2 * eps)
        np.testing.assert_allclose(analytic[name], fd, rtol=1e-6, atol=1e-8, err_msg=name)


@pytest.mark.parametrize("case", list(CASES))
def test_mgu_forward_and_gradients(device, case):
    c = CASES[case]
    _check(device, c["D"], c["reverse"], c["mask"])


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("case", ["reverse", "bidirectional-mask"])
def test_mgu_chunked_backward(device, monkeypatch, case, steps):
    """The backward in chunks of ``steps`` steps (every step a chunk border with 1; uneven
    chunks 3, 3, 1 with 3), one launch per step."""
    override_tuning(device, monkeypatch, REC_BWD_ROWS=steps * N, REC_SEQ_BYTES=0)
    seen = []
    original = engine.Recurrence.chunk_steps

    def chunk_steps(self, full=False):
        seen.append(original(self, full))
        return seen[-1]

    monkeypatch.setattr(engine.Recurrence, "chunk_steps", chunk_steps)
    c = CASES[case]
    _check(device, c["D"], c["reverse"], c["mask"])
    assert steps in seen and max(seen) < T


def test_registration_is_checked_by_building(device, tmp_path):
    """A registration that disagrees with its file's declarations does not build, and a
    re-registered file builds anew (its digest keys the programs)."""
    needs_fp64(device)
    p, _, _, _ = _problem(1, False)
    src = tmp_path / "cell.cl"
    src.write_text((HERE / "mgu.cl").read_text())
    register_cell("mgu_wrong", src, gates=2, late_gate=None)
    desc = rc.RNNLayerDescriptor(cell="mgu_wrong")
    with pytest.raises(BuildError, match="disagree: two-phase late gate"):
        _forward(device, p, None, desc)
    register_cell("mgu_wrong", src, gates=2, activations=("sigmoid", "tanh"), late_gate=0)
    (y,) = _forward(device, p, None, desc)
    np.testing.assert_allclose(y, mgu_reference(p["x"], p["W"], p["R"], p["b"], p["h0"], None,
                                                1, False), rtol=1e-12, atol=1e-12)
    # the same name, another file: n = sigmoid instead of tanh
    src.write_text((HERE / "mgu.cl").read_text().replace("pyrnn_act(ACT_1,", "pyrnn_act(3,"))
    register_cell("mgu_wrong", src, gates=2, activations=("sigmoid", "tanh"), late_gate=0)
    (y2,) = _forward(device, p, None, desc)
    assert not np.allclose(y, y2)


def test_the_package_does_not_name_the_test_cell():
    root = HERE.parent / "pyrnn_cl"
    named = [str(path) for path in root.rglob("*") if path.is_file()
             and path.suffix in (".py", ".cl", ".h", ".md")
             and "mgu" in path.read_text(encoding="utf-8", errors="replace").lower()]
    assert not named


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
def test_builtin_cells_through_the_generic_op(device, cell):
    """The generic op on a built-in cell is that cell's MPSGraph op in its plain variant
    (forward and every gradient)."""
    needs_fp64(device)
    import pyrnn_cl as pc

    rng = np.random.default_rng(3)
    Gc, D = {"rnn": 1, "lstm": 4, "gru": 3}[cell], 2
    x = rng.standard_normal((T, N, I))
    W = 0.4 * rng.standard_normal((D * Gc * H, I))
    R = 0.4 * rng.standard_normal((D, Gc * H, H))
    b = 0.2 * rng.standard_normal(D * Gc * H)
    h0, c0 = rng.standard_normal((N, D * H)), rng.standard_normal((N, D * H))
    U, V, Vc = (rng.standard_normal((T, N, D * H)), rng.standard_normal((N, D * H)),
                rng.standard_normal((N, D * H)))
    generic = rc.RNNLayerDescriptor(cell=cell, bidirectional=True, training=True)
    if cell == "lstm":
        desc = pc.LSTMDescriptor(bidirectional=True, training=True)
        y, c, z = pc.lstm(x, R, W, b, h0, c0, descriptor=desc, device=device)
        want = pc.lstm_gradients(x, R, U, z, c, W, b, h0, c0, state_gradient=V,
                                 cell_gradient=Vc, descriptor=desc, device=device)
        got_fwd = rc.rnn_layer(x, R, W, b, h0, c0, descriptor=generic, device=device)
        got = rc.rnn_layer_gradients(x, R, U, z, cell_output_fwd=c, input_weight=W, bias=b,
                                     init_state=h0, init_cell=c0, state_gradient=V,
                                     cell_gradient=Vc, descriptor=generic, device=device)
        want_fwd = (y, c, z)
    else:
        if cell == "gru":
            desc = pc.GRUDescriptor(bidirectional=True, training=True, reset_after=True,
                                    flip_z=True)
            y, z = pc.gru(x, R, W, b, h0, descriptor=desc, device=device)
            want = pc.gru_gradients(x, R, U, z, y, W, b, h0, state_gradient=V,
                                    descriptor=desc, device=device)
        else:
            desc = pc.SingleGateRNNDescriptor(bidirectional=True, training=True)
            y, z = pc.single_gate_rnn(x, R, W, b, h0, descriptor=desc, device=device)
            want = pc.single_gate_rnn_gradients(x, R, U, z, W, b, h0, state_gradient=V,
                                                descriptor=desc, device=device)
        got_fwd = rc.rnn_layer(x, R, W, b, h0, descriptor=generic, device=device)
        got = rc.rnn_layer_gradients(x, R, U, z, output_fwd=y, input_weight=W, bias=b,
                                     init_state=h0, state_gradient=V, descriptor=generic,
                                     device=device)
        want_fwd = (y, z)
    assert len(got_fwd) == len(want_fwd) and len(got) == len(want)
    for g, w in zip(list(got_fwd) + list(got), list(want_fwd) + list(want)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
