"""Saturated activations pass no gradient, exactly.

A unit whose pre-activation is far beyond tanh's or the sigmoid's saturation point has derivative 0
in exact arithmetic, and the correctly rounded tanh/sigmoid is exactly +-1 (or 0) there, so PyTorch
returns weight gradients of exactly 0. OpenCL's tanh may stop one ulp short of 1 (PoCL's float tanh
gives 1 - 2^-24), which made 1 - y^2 = 1.19e-7 per unit and, times inputs of ~1e6, weight
gradients of ~4 where torch's are 0. Every gate of these problems is saturated at every step, so
every gradient that flows through a gate derivative (input, input weight, recurrent weight, biases)
must be exactly 0, in float32 and float64, in every cell and dialect.
"""

from __future__ import annotations

import numpy as np
import pytest

import pyrnn_cl as rc
from helpers.device import needs_fp64

T, N, H = 6, 3, 5
GATES = {"rnn": 1, "lstm": 4, "gru": 3}


def _saturated_problem(kind, dtype, scale=1e6, seed=0):
    """Inputs of size I = 1 with |x| >= scale/2 and weights with |W| >= 1/2: every pre-activation
    has magnitude >= scale/4 - |recurrent part|, far past saturation."""
    rng = np.random.default_rng(seed)
    G = GATES[kind]
    sign = lambda *shape: rng.choice([-1.0, 1.0], size=shape)  # noqa: E731
    x = (sign(T, N, 1) * rng.uniform(0.5, 1.0, (T, N, 1)) * scale).astype(dtype)
    W = (sign(G * H, 1) * rng.uniform(0.5, 1.0, (G * H, 1))).astype(dtype)
    R = rng.uniform(-0.3, 0.3, (G * H, H)).astype(dtype)
    b = rng.uniform(-0.3, 0.3, (2 * G * H,)).astype(dtype)
    h0 = rng.uniform(-0.5, 0.5, (N, H)).astype(dtype)
    c0 = rng.uniform(-0.5, 0.5, (N, H)).astype(dtype)
    dy = rng.uniform(-1, 1, (T, N, H)).astype(dtype)
    return x, W, R, b, h0, c0, dy


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_mps_gradients_of_a_saturated_network_are_exactly_zero(device, kind, dtype):
    if dtype == np.float64:
        needs_fp64(device)
    x, W, R, b, h0, c0, dy = _saturated_problem(kind, dtype)
    G = GATES[kind]
    if kind == "rnn":
        desc = rc.SingleGateRNNDescriptor(activation="tanh", training=True)
        (y, z) = rc.single_gate_rnn(x, R, W, bias=b[:G * H], init_state=h0, descriptor=desc,
                                    device=device)
        grads = rc.single_gate_rnn_gradients(x, R, dy, _host(z), W, bias=b[:G * H],
                                             init_state=h0, descriptor=desc, device=device)
        names = ["source", "recurrent_weight", "input_weight", "bias"]
    elif kind == "lstm":
        desc = rc.LSTMDescriptor(training=True, produce_cell=True)
        y, c, z = rc.lstm(x, R, W, bias=b[:G * H], init_state=h0, init_cell=c0,
                          descriptor=desc, device=device)
        grads = rc.lstm_gradients(x, R, dy, _host(z), _host(c), W, bias=b[:G * H],
                                  init_state=h0, init_cell=c0, descriptor=desc, device=device)
        names = ["source", "recurrent_weight", "input_weight", "bias"]
    else:
        desc = rc.GRUDescriptor(training=True, reset_after=True)
        y, z = rc.gru(x, R, W, bias=b[:G * H], init_state=h0, secondary_bias=b[G * H:G * H + H],
                      descriptor=desc, device=device)
        grads = rc.gru_gradients(x, R, dy, _host(z), _host(y), W, bias=b[:G * H],
                                 init_state=h0, secondary_bias=b[G * H:G * H + H], descriptor=desc,
                                 device=device)
        names = ["source", "recurrent_weight", "input_weight", "bias"]
    for name, g in zip(names, grads):
        g = _host(g)
        assert np.isfinite(g).all(), name
        assert np.count_nonzero(g) == 0, (
            f"{kind} {np.dtype(dtype).name}: d{name} has {np.count_nonzero(g)} non-zero "
            f"elements (max |.| {np.abs(g).max():.3g}) through saturated gates")


def test_tanh_saturation_point_matches_the_correctly_rounded_tanh(device):
    """Around the float32 saturation point the kernels' tanh is +-1 exactly where the correctly
    rounded tanh is, and the same float below it: a single-gate tanh RNN with R = 0, W = 1."""
    edge = np.float32(9.010913848876953)
    below = [np.nextafter(edge, np.float32(0)), np.float32(9.0), np.float32(8.0)]
    values = np.array([edge, np.nextafter(edge, np.float32(100)), 1e30, *below],
                      dtype=np.float32)
    values = np.concatenate([values, -values])
    x = values.reshape(1, -1, 1)
    W = np.ones((1, 1), np.float32)
    R = np.zeros((1, 1), np.float32)
    (y,) = rc.single_gate_rnn(x, R, W, descriptor=rc.SingleGateRNNDescriptor(activation="tanh"),
                              device=device)
    y = _host(y).reshape(-1)
    exact = np.tanh(values.astype(np.float64)).astype(np.float32)  # correctly rounded
    saturated = np.abs(exact) == 1
    assert saturated.sum() == 6 and np.all(np.abs(y[saturated]) == 1)
    assert np.all(np.abs(y[~saturated]) < 1), y


@pytest.mark.parametrize("mode", ["RNN", "LSTM", "GRU"])
def test_bridge_matches_torch_on_a_saturated_network(device, mode):
    """The issue's repro: |x| ~ 1e6 through pyrnn_cl.torch and torch.nn (float32, same weights):
    the input-weight gradient is torch's, exactly 0."""
    torch_mod = pytest.importorskip("torch")
    import pyrnn_cl.torch as rt

    torch_mod.manual_seed(0)
    ref = getattr(torch_mod.nn, mode)(1, H)
    ours = getattr(rt, mode)(1, H, cl_device=device)
    ours.load_state_dict(ref.state_dict())
    sign = torch_mod.randint(0, 2, (T, N, 1)) * 2.0 - 1.0
    x = sign * (0.5 + torch_mod.rand(T, N, 1)) * 1e6
    for module in (ref, ours):
        out = module(x)[0]
        out.sum().backward()
    g_ref, g_ours = ref.weight_ih_l0.grad, ours.weight_ih_l0.grad
    assert torch_mod.count_nonzero(g_ref) == 0
    assert torch_mod.equal(g_ours, g_ref), g_ours.abs().max()
