"""Property-based fuzzing of every public op with Hypothesis (pitfalls A9, A17, A26).

(a) **Valid configurations**: random small shapes (including T = 0 and N = 0, hidden sizes that
    no vector width divides; sizes are drawn from a few classes so that the set of compiled
    programs stays small) and random flags / optional inputs of every op, in float64,
    compared with the independent float64 references of ``tests/reference/`` (forward outputs
    and every gradient).
(b) **Malformed calls**: one random mutation of a random valid call of a random op
    (``tests/helpers/fuzz.py``: wrong dtype, non-array, None, rank, axis size, value, layout,
    device) must raise the documented exception type for that mutation, naming the argument,
    before any kernel is launched: never a crash, hang or result.

CI runs a bounded, derandomized number of examples (the same every run):
``PYRNN_CL_FUZZ_EXAMPLES`` (default 5) valid configurations per op family and 25 times as many
malformed calls. The ≥ 10 000-call malformed run with crash/hang supervision is
``python tools/fuzz_malformed.py --calls 10000 --seed 0`` (README, "Reliability notes"); its
supervisor is tested here with an injected segmentation fault.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pyrnn_cl as rc
from helpers import fuzz as FZ
from helpers.device import needs_fp64
from reference import cudnn_ref as C
from reference import mps_ref as M
from reference import tf_ref as TF

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VALID = int(os.environ.get("PYRNN_CL_FUZZ_EXAMPLES", "5"))
FUZZ = settings(max_examples=VALID, derandomize=True, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])
F64 = np.float64
ACTS = ("none", "relu", "tanh", "sigmoid", "hard_sigmoid")


def close(ours, want, what, rtol=1e-8, atol=1e-10):
    ours, want = np.asarray(ours), np.asarray(want)
    assert ours.shape == want.shape, f"{what}: shape {ours.shape} != {want.shape}"
    np.testing.assert_allclose(ours, want, rtol=rtol, atol=atol, err_msg=what)


def normal(rng, shape, scale=1.0):
    return rng.standard_normal(shape) * scale


# ---- (a) valid configurations -------------------------------------------------------------

@st.composite
def mps_problems(draw):
    kind = draw(st.sampled_from(["rnn", "lstm", "gru"]))
    T, N = draw(st.integers(0, 5)), draw(st.sampled_from([0, 1, 3, 5]))
    I, H = draw(st.integers(1, 4)), draw(st.sampled_from([1, 3, 5]))
    D = draw(st.sampled_from([1, 2]))
    opt = {n: draw(st.booleans()) for n in ("input_weight", "bias", "init_state", "init_cell",
                                             "mask", "peephole", "secondary_bias")}
    desc = {"reverse": draw(st.booleans()), "bidirectional": D == 2, "training": True}
    if kind == "rnn":
        desc["activation"] = draw(st.sampled_from(["relu", "tanh", "sigmoid"]))
    elif kind == "lstm":
        desc["forget_gate_last"] = draw(st.booleans())
        for f in ("input_gate_activation", "cell_gate_activation", "activation"):
            if draw(st.booleans()):
                desc[f] = draw(st.sampled_from(ACTS))
    else:
        desc.update(reset_gate_first=draw(st.booleans()), reset_after=draw(st.booleans()),
                    flip_z=draw(st.booleans()))
        if draw(st.booleans()):
            desc["output_gate_activation"] = draw(st.sampled_from(ACTS))
    return kind, (T, N, I, H, D), opt, desc, draw(st.integers(0, 2 ** 31))


def _mps_inputs(kind, T, N, I, H, D, opt, seed):
    rng = np.random.default_rng(seed)
    G = {"rnn": 1, "lstm": 4, "gru": 3}[kind]
    w = 0.8 / np.sqrt(max(H, I))
    a = {"source": normal(rng, (T, N, I) if opt["input_weight"] else (T, N, D * G * H), 0.8),
         "recurrent_weight": normal(rng, (G * H, H) if D == 1 else (2, G * H, H), w)}
    if opt["input_weight"]:
        a["input_weight"] = normal(rng, (D * G * H, I), w)
    if opt["bias"]:
        a["bias"] = normal(rng, (D * G * H,), 0.3)
    if opt["init_state"]:
        a["init_state"] = normal(rng, (N, D * H), 0.7)
    if opt["init_cell"] and kind == "lstm":
        a["init_cell"] = normal(rng, (N, D * H), 0.7)
    if opt["mask"]:
        a["mask"] = rng.uniform(0.5, 1.5, (T, N, D * H)) * (rng.uniform(size=(T, N, D * H)) > .2)
    if opt["peephole"] and kind == "lstm":
        a["peephole"] = normal(rng, (4 * H,) if D == 1 else (2, 4 * H), 0.5)
    if opt["secondary_bias"] and kind == "gru":
        a["secondary_bias"] = normal(rng, (D * H,), 0.5)
    return a


_MPS = {"rnn": (rc.single_gate_rnn, rc.single_gate_rnn_gradients, rc.SingleGateRNNDescriptor,
                M.single_gate_rnn, M.single_gate_rnn_gradients),
        "lstm": (rc.lstm, rc.lstm_gradients, rc.LSTMDescriptor, M.lstm, M.lstm_gradients),
        "gru": (rc.gru, rc.gru_gradients, rc.GRUDescriptor, M.gru, M.gru_gradients)}


@FUZZ
@given(problem=mps_problems())
def test_mps_valid_configurations(device, problem):
    """Random MPSGraph-dialect calls (forward + gradients) against ``mps_ref``."""
    needs_fp64(device)
    kind, (T, N, I, H, D), opt, desc_kw, seed = problem
    fwd, grad, Desc, ref_fwd, ref_grad = _MPS[kind]
    a = _mps_inputs(kind, T, N, I, H, D, opt, seed)
    desc = Desc(**desc_kw)
    outs = fwd(**a, descriptor=desc, device=device)
    want = ref_fwd(**a, descriptor=desc)
    close(outs[0], want[0], "h")
    if kind == "lstm":
        close(outs[1], want[1], "c")
    rng = np.random.default_rng(seed + 1)
    dh = normal(rng, (T, N, D * H))
    extra = {"state_gradient": normal(rng, (N, D * H))} if rng.integers(0, 2) else {}
    if kind == "lstm" and rng.integers(0, 2):
        extra["cell_gradient"] = normal(rng, (N, D * H))
    order = [k for k in ("input_weight", "bias", "init_state", "init_cell", "mask", "peephole",
                         "secondary_bias") if k in a]
    pos = [a["source"], a["recurrent_weight"], dh, outs[-1]]
    ref_pos = [a["source"], a["recurrent_weight"], dh, None]
    if kind == "lstm":
        pos.append(outs[1])
        ref_pos.append(None)
    elif kind == "gru":
        pos.append(outs[0])
        ref_pos.append(None)
    kw = {k: a[k] for k in order}
    got = grad(*pos, **kw, **extra, descriptor=desc, device=device)
    want = ref_grad(*ref_pos, **kw, **extra, descriptor=desc)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        close(g, w, f"{kind} gradient output {k}", rtol=1e-7, atol=1e-9)


@st.composite
def tf_problems(draw):
    op = draw(st.sampled_from(["gru_cell", "lstm_cell", "block_lstm", "block_lstm_v2"]))
    T, N = draw(st.integers(0, 4)), draw(st.sampled_from([0, 1, 3, 5]))
    I, H = draw(st.integers(1, 4)), draw(st.sampled_from([1, 3, 5]))
    return dict(op=op, T=T, N=N, I=I, H=H, seq_len_max=draw(st.integers(0, T)),
                use_peephole=draw(st.booleans()),
                forget_bias=draw(st.sampled_from([0.0, 1.0, -0.5])),
                cell_clip=draw(st.sampled_from([0.0, 0.4, 3.0, -1.0])),
                seed=draw(st.integers(0, 2 ** 31)))


@FUZZ
@given(p=tf_problems())
def test_tf_valid_configurations(device, p):
    """Random TensorFlow block-op calls (forward, gradients, weight gradients) against
    ``tf_ref``."""
    needs_fp64(device)
    rng = np.random.default_rng(p["seed"])
    T, N, I, H = p["T"], p["N"], p["I"], p["H"]
    w = 0.8 / np.sqrt(I + H)
    if p["op"] == "gru_cell":
        args = [normal(rng, (N, I)), normal(rng, (N, H)), normal(rng, (I + H, 2 * H), w),
                normal(rng, (I + H, H), w), normal(rng, (2 * H,), .3), normal(rng, (H,), .3)]
        out = rc.gru_block_cell(*args, device=device)
        for k, (g, r) in enumerate(zip(out, TF.gru_block_cell(*args))):
            close(g, r, f"gru_block_cell output {k}")
        d_h = normal(rng, (N, H))
        grads = rc.gru_block_cell_grad(*args, *out[:3], d_h, device=device)
        for k, (g, r) in enumerate(zip(grads, TF.gru_block_cell_grad(*args, *out[:3], d_h))):
            close(g, r, f"gru_block_cell_grad output {k}")
        wg = rc.gru_block_cell_weight_grads(args[0], args[1], out[0], grads[2], grads[3],
                                            device=device)
        want = TF.gru_block_cell_weight_grads(args[0], args[1], out[0], grads[2], grads[3])
        for k, (g, r) in enumerate(zip(wg, want)):
            close(g, r, f"gru_block_cell_weight_grads output {k}")
        return
    seq = p["op"] != "lstm_cell"
    lead = (T, N) if seq else (N,)
    args = [normal(rng, lead + (I,)), normal(rng, (N, H)), normal(rng, (N, H)),
            normal(rng, (I + H, 4 * H), w), normal(rng, (H,), .5), normal(rng, (H,), .5),
            normal(rng, (H,), .5), normal(rng, (4 * H,), .3)]
    kw = dict(use_peephole=p["use_peephole"], cell_clip=p["cell_clip"])
    if p["op"] != "block_lstm_v2":
        kw["forget_bias"] = p["forget_bias"]
    fwd, ref_fwd, grad, ref_grad = {
        "lstm_cell": (rc.lstm_block_cell, TF.lstm_block_cell, rc.lstm_block_cell_grad,
                      TF.lstm_block_cell_grad),
        "block_lstm": (rc.block_lstm, TF.block_lstm, rc.block_lstm_grad, TF.block_lstm_grad),
        "block_lstm_v2": (rc.block_lstm_v2, TF.block_lstm_v2, rc.block_lstm_grad_v2,
                          TF.block_lstm_grad_v2),
    }[p["op"]]
    pre = [p["seq_len_max"]] if seq else []
    out = fwd(*pre, *args, **kw, device=device)
    for k, (g, r) in enumerate(zip(out, ref_fwd(*pre, *args, **kw))):
        close(g, r, f"{p['op']} output {k}")
    cs_grad, h_grad = normal(rng, lead + (H,)), normal(rng, lead + (H,))
    acts = list(out) if seq else list(out[:6])
    gkw = dict(use_peephole=p["use_peephole"])
    got = grad(*pre, *args, *acts, cs_grad, h_grad, **gkw, device=device)
    want = ref_grad(*pre, *args, *acts, cs_grad, h_grad, **gkw)
    for k, (g, r) in enumerate(zip(got, want)):
        close(g, r, f"{p['op']} gradient output {k}")
    if not seq:
        wg = rc.lstm_block_cell_weight_grads(args[0], args[2], args[3], got[1], device=device)
        for k, (g, r) in enumerate(zip(wg, TF.lstm_block_cell_weight_grads(args[0], args[2],
                                                                          args[3], got[1]))):
            close(g, r, f"lstm_block_cell_weight_grads output {k}")


@st.composite
def cudnn_problems(draw):
    mode = draw(st.sampled_from(["rnn_relu", "rnn_tanh", "lstm", "gru"]))
    L, D = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    T, N = draw(st.integers(0, 4)), draw(st.sampled_from([0, 1, 3, 5]))
    H = draw(st.sampled_from([3, 5]))
    imode = draw(st.sampled_from(["linear_input", "skip_input", "auto_select"]))
    I = H if imode == "skip_input" else draw(st.integers(1, 5))
    P = draw(st.integers(0, H - 1)) if mode == "lstm" else 0
    lens = draw(st.booleans())
    return dict(mode=mode, L=L, D=D, T=T, N=N, H=H, I=I, P=P, imode=imode, lens=lens,
                time_major=draw(st.booleans()), seed=draw(st.integers(0, 2 ** 31)),
                absent=draw(st.sets(st.sampled_from(["dy", "dh", "dc"]), max_size=2)))


@FUZZ
@given(p=cudnn_problems())
def test_cudnn_valid_configurations(device, p):
    """Random cuDNN-dialect calls (forward, backprop, params conversions) against
    ``cudnn_ref``."""
    needs_fp64(device)
    rng = np.random.default_rng(p["seed"])
    T, N, L, D, H, I, P = (p[k] for k in "T N L D H I P".split())
    R = P or H
    kw = dict(rnn_mode=p["mode"], input_mode=p["imode"], num_proj=P,
              direction="bidirectional" if D == 2 else "unidirectional")
    size = rc.cudnn_rnn_params_size(L, H, I, **kw)
    assert size == C.params_size(L, H, I, **kw)
    params = normal(rng, (size,), 0.6 / np.sqrt(H + I))
    w, b = rc.cudnn_rnn_params_to_canonical(L, H, I, params, **kw)
    wr, br = C.params_to_canonical(L, H, I, params, **kw)
    for k, (x, y) in enumerate(zip(w + b, wr + br)):
        close(x, y, f"canonical {k}", rtol=0, atol=0)
    close(rc.cudnn_rnn_canonical_to_params(L, H, I, w, b, **kw), params, "round trip", 0, 0)
    x = normal(rng, (T, N, I) if p["time_major"] else (N, T, I))
    h0, c0 = normal(rng, (L * D, N, R), .5), normal(rng, (L * D, N, H), .5)
    c0 = c0 if p["mode"] == "lstm" else None
    lens = rng.integers(0, T + 1, N).astype(np.int32) if p["lens"] else None
    kw["time_major"] = p["time_major"]
    y, hn, cn, res, host = rc.cudnn_rnn(x, h0, c0, params, lens, **kw, device=device)
    ry, rh, rcn = C.cudnn_rnn_forward(x, h0, c0, params, lens, **kw)
    close(y, ry, "output")
    close(hn, rh, "output_h")
    if c0 is not None:
        close(cn, rcn, "output_c")
    dy = None if "dy" in p["absent"] else normal(rng, y.shape)
    dh = None if "dh" in p["absent"] else normal(rng, hn.shape)
    dc = None if "dc" in p["absent"] or c0 is None else normal(rng, c0.shape)
    got = rc.cudnn_rnn_backprop(x, h0, c0, params, lens, y, hn, cn, dy, dh, dc, res, host, **kw,
                                device=device)
    want = C.cudnn_rnn_backward(x, h0, c0, params, lens, dy, dh, dc, **kw)
    for name, g, r in zip(("input_backprop", "input_h_backprop", "input_c_backprop",
                           "params_backprop"), got, want):
        if name == "input_c_backprop" and c0 is None:
            assert np.size(g) == 0
            continue
        close(g, r, name, rtol=1e-7, atol=1e-9)


# ---- (b) malformed calls -------------------------------------------------------------------

_PAIRS = []


def _applicable_pairs():
    """(op, mutation) pairs that some valid call of the op admits (computed once)."""
    if not _PAIRS:
        for op in sorted(FZ.OPS):
            for mutation in sorted(FZ.MUTATIONS):
                try:
                    FZ.make_call(0, 0, op, mutation, attempts=12)
                except FZ.NotApplicable:
                    continue
                _PAIRS.append((op, mutation))
    return _PAIRS


@settings(max_examples=25 * VALID, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_malformed_calls_raise_documented_errors(device, data):
    """Every op x every applicable mutation: the documented exception of that mutation,
    naming the argument, nothing launched (``FZ.check_call``)."""
    op, mutation = data.draw(st.sampled_from(_applicable_pairs()), label="op, mutation")
    seed = data.draw(st.integers(0, 2 ** 32 - 1), label="seed")
    try:
        case = FZ.make_call(seed, 0, op, mutation, attempts=12)
    except FZ.NotApplicable:
        assume(False)
    out = FZ.check_call(case)
    assert out.status == "ok", f"{case.describe()} -> {out.status}: {out.exc_type}: " \
                               f"{out.message}"


def test_every_base_call_is_valid(device, monkeypatch):
    """The unmutated call of every op's builder succeeds (one seed each, and for
    cudnn_rnn_backprop one with dropout between stacked layers, whose reserve_space holds the
    dropped inputs too): otherwise a mutation could be refused for the wrong reason."""
    from pyrnn_cl.devices import set_default_device

    def layered_dropout(case):
        layers = case.args["input_h"].value.shape[0]
        return case.kwargs["dropout"] > 0 and layers > (
            2 if case.kwargs.get("direction") == "bidirectional" else 1)

    cases = [FZ.OPS[op](np.random.default_rng([seed, 0]), np.float32)
             for op in sorted(FZ.OPS) for seed in (0,)]     # (each seed costs cold builds)
    cases.append(next(c for c in (FZ.OPS["cudnn_rnn_backprop"](np.random.default_rng([seed, 0]),
                                                                np.float32)
                                  for seed in range(200)) if layered_dropout(c)))
    set_default_device(device)
    try:
        for case in cases:
            case.call()
    finally:
        set_default_device(None)

    real = FZ.OPS["lstm"]

    def broken(rng, dtype):             # a builder whose valid call is not valid
        case = real(rng, dtype)
        case.args["source"].value = case.args["source"].value[:, :, :1]
        return case

    monkeypatch.setitem(FZ.OPS, "lstm", broken)
    with pytest.raises(FZ.InvalidBaseCall, match="base call of lstm"):
        FZ.make_call(0, 0, "lstm", "rank", check_base=True, dtype=np.float32)


def test_every_op_and_mutation_kind_is_fuzzed():
    """The catalogue is derived: every public function of ``pyrnn_cl.__all__`` is an op, each
    op's arguments come from its signature and every one of them has a base value (a shape or
    a scalar of the tables); every op admits some mutations, and each mutation kind applies to
    at least three ops."""
    public = {n for n in rc.__all__ if n[0].islower() and callable(getattr(rc, n))}
    assert set(FZ.OPS) == set(FZ.public_ops()) == public
    for op in sorted(FZ.OPS):
        assert FZ.unknown_arguments(op) == [], f"{op}: no base value for these arguments"
        case = FZ.OPS[op](np.random.default_rng([0, 0]), np.float32)
        params = inspect.signature(FZ.public_ops()[op]).parameters
        assert case.order == [p for p, v in params.items() if v.kind is v.POSITIONAL_OR_KEYWORD]
        assert case.device_ok == ("device" in params and op not in FZ._HOST_ONLY)
    pairs = _applicable_pairs()
    assert {op for op, _ in pairs} == set(FZ.OPS)
    for mutation in FZ.MUTATIONS:
        assert sum(m == mutation for _, m in pairs) >= 3, mutation


def test_fuzzer_counts_a_crash_and_continues():
    """The ≥ 10 000-call run's supervisor: a worker killed by a segmentation fault (injected at
    call 3) is one crash, the remaining calls still run, and the exit status is 1."""
    cmd = [sys.executable, os.path.join(ROOT, "tools", "fuzz_malformed.py"), "--calls", "8",
           "--seed", "5", "--inject", "3:segv"]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "8 malformed calls" in run.stdout and "7 raised the documented exception" in \
        run.stdout and "1 crashes" in run.stdout, run.stdout
    assert "#3 " in run.stdout and "exit -11" in run.stdout, run.stdout
