"""MPSGraph dialect (API.md §1): ``single_gate_rnn``, ``lstm``, ``gru`` and their gradients.

Oracles, never the library's own output:

* ``tests/reference/mps_ref.py`` (independent float64 NumPy, written from the equations): every
  forward output and every gradient output; float64 rel <= 1e-10, float32 rel <= 1e-5 forward and
  <= 1e-4 gradients (relative to max |expected|);
* central finite differences directly on the library (float64, ``tests/reference/fd.py``),
  <= 1e-6;
* PyTorch float64 ``nn.RNN/LSTM/GRU`` through the documented mapping (semantics.md §2.5);
* closed forms (flip_z one-step) and metamorphic identities of the library with itself
  (gate-block permutations for forget_gate_last / reset_gate_first, time reversal).

What each group guards against (pitfalls.md): every descriptor flag has a test that fails if its
handling is removed; bidirectional / reverse forward and backward, and flags interleaved in one
process (A1: a cache key missing a flag); T != N != I != H everywhere, so transpositions show (A2);
non-zero, distinct initial states per direction (A3); every subset of upstream gradients None
(A4); masks with zeros (dropout) in forward and backward, finite differences with a mask (A5);
batch > 1 (A7); full finite-difference gradchecks through time and per gate, GRU's direct path
for both update conventions (A11); three stacked bidirectional layers chained through the
gradient ops, and no input or output buffer ever overwritten (A16); T = 0 / N = 0 (A9); saturated
pre-activations and NaN (A21); array kinds, dtypes and shapes (A18, A26).

Kernels are compiled per configuration (cell, flags, dtype, vector width): the parametrizations
reuse a fixed set of configurations (``GRU_MATRIX``, ``LSTM_ACTS``...) so that the number of
programs stays small; new cases should pick from them.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pyopencl.array as cla
import pytest

import pyrnn_cl as rc
from helpers import shapes as S
from helpers.compare import F32, F64, FD_TOL, MAX_ERR, assert_close
from helpers.device import ONE_LANE, PER_STEP, WHOLE_SEQUENCE, needs_fp64, override_tuning
from helpers.mps import (
    ACTS,
    GRU_MATRIX,
    KINDS,
    LSTM_ACTS,
    activated_z,
    check_against_reference,
    default_flags,
    desc_of,
    forward,
    grad_names,
    gru_flags,
    gru_id,
    lib_gradients,
    ref_gradients,
    training_desc,
    upstream,
)
from reference import fd
from reference import mps_ref as M

DIRECTIONS = {"fwd": {}, "rev": {"reverse": True}, "bidi": {"bidirectional": True},
              "bidi+rev": {"bidirectional": True, "reverse": True}}

DTYPES = [F64, F32]


@pytest.fixture(scope="module", autouse=True)
def _report_errors():
    yield
    path = os.environ.get("PYRNN_CL_ERRLOG")
    if path:
        with open(path, "a") as fh:
            for key, value in sorted(MAX_ERR.items()):
                fh.write(f"test_mps {key} {value:.3e}\n")


def final_state(seq, desc, H):
    """MPSGraph final state: the forward direction at t = T-1, the reverse one at t = 0."""
    if desc.bidirectional:
        return np.concatenate([seq[-1, :, :H], seq[0, :, H:]], axis=-1)
    return seq[0] if desc.reverse else seq[-1]


# =================================================================================================
# Reference parity


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("direction", list(DIRECTIONS))
@pytest.mark.parametrize("kind", KINDS)
def test_reference_all_inputs(device, kind, direction, dtype):
    """Every optional input present, the prime shape T=7 N=5 I=3 H=11, every direction
    (bidirectional ignores reverse), every output and gradient."""
    desc = desc_of(kind, **DIRECTIONS[direction], **default_flags(kind))
    inputs = S.layer_inputs(kind, S.PRIME, bidirectional=desc.bidirectional, seed=1, dtype=dtype)
    check_against_reference(device, kind, desc, inputs, dtype)


@pytest.mark.parametrize("shape", S.SHAPES, ids=S.ids(S.SHAPES))
@pytest.mark.parametrize("kind", KINDS)
def test_reference_shapes(device, kind, shape):
    """Awkward sizes (H = 1 and 33, N = 1 and 13, T = 1, I = 1), bidirectional, all inputs."""
    needs_fp64(device)
    desc = desc_of(kind, bidirectional=True, **default_flags(kind))
    inputs = S.layer_inputs(kind, shape, bidirectional=True, seed=2)
    check_against_reference(device, kind, desc, inputs)


def _check_tiles(device, monkeypatch, kind, per_step, acc_max, seed):
    """A bidirectional layer of ``kind`` over N = 19 rows (ragged tiles) with REC_NB = 4 and
    ``acc_max`` (REC_ACC_MAX), whole-sequence or ``per_step``, against the float64 reference;
    returns its plan."""
    from pyrnn_cl.mps import _cell
    from pyrnn_cl.plan import LayerPlan

    needs_fp64(device)
    override_tuning(device, monkeypatch, REC_NB=4, REC_ACC_MAX=acc_max, **ONE_LANE,
                    **(PER_STEP if per_step else WHOLE_SEQUENCE))
    # wide whole-sequence tiles are taken only where every compute unit keeps a work-group
    # (2 x 3 groups here): a GPU's 132 units would keep REC_NB rows
    monkeypatch.setattr(device, "info", dataclasses.replace(device.info, compute_units=1))
    desc = desc_of(kind, bidirectional=True, **default_flags(kind))
    shape = S.Shape("tiles", T=4, N=19, I=3, H=9)
    plan = LayerPlan.for_device(_cell(kind, desc), np.float64,
                                device.tuning("recurrence"), device.info.compute_units,
                                T=shape.T, N=shape.N, H=shape.H, D=2)
    # (a GRU resetting before its product runs two kernels per step, never whole-sequence)
    assert plan.fused == (not per_step and not plan.cell.two_phase)
    inputs = S.layer_inputs(kind, shape, bidirectional=True, seed=seed)
    check_against_reference(device, kind, desc, inputs)
    return plan


@pytest.mark.parametrize("per_step", [False, True], ids=["whole-sequence", "per-step"])
@pytest.mark.parametrize("kind", KINDS)
def test_reference_wide_batch_tiles(device, kind, per_step, monkeypatch):
    """Tiles of 8 and 16 batch rows (REC_ACC_MAX = 24 from REC_NB = 4: a GRU 8, the vanilla
    cell 16, an LSTM 4), ragged over N = 19 rows, bidirectional, in the whole-sequence and the
    per-step kernels."""
    plan = _check_tiles(device, monkeypatch, kind, per_step, 24, seed=4)
    assert plan.nb == plan.fwd_nb == {"lstm": 4, "gru": 8, "rnn": 16}[kind]


@pytest.mark.parametrize("per_step", [False, True], ids=["whole-sequence", "per-step"])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_reference_forward_rows_below_the_backward_rows(device, kind, per_step, monkeypatch):
    """Forward tiles of fewer batch rows than the backward's (REC_ACC_MAX = 8 below REC_NB = 4:
    forward 2 rows, backward 4), ragged over N = 19 rows, bidirectional, in the whole-sequence
    and the per-step kernels: the backward reads what the forward's tiles saved."""
    plan = _check_tiles(device, monkeypatch, kind, per_step, 8, seed=5)
    assert (plan.fwd_nb, plan.nb) == (2, 4)


@pytest.mark.parametrize("direction", ["rev", "bidi"])
@pytest.mark.parametrize("key", list(GRU_MATRIX), ids=[gru_id(k) for k in GRU_MATRIX])
def test_gru_flag_matrix(device, key, direction):
    """reset_gate_first x reset_after x flip_z, five of them with every activation in every
    gate (GRU_MATRIX); asymmetric random weights make each flag matter."""
    needs_fp64(device)
    desc = desc_of("gru", **gru_flags(*key), **DIRECTIONS[direction])
    inputs = S.layer_inputs("gru", S.PRIME, bidirectional=desc.bidirectional, seed=3)
    check_against_reference(device, "gru", desc, inputs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("direction", ["fwd", "bidi"])
def test_lstm_forget_gate_last(device, direction, dtype):
    desc = desc_of("lstm", forget_gate_last=True, **DIRECTIONS[direction])
    inputs = S.layer_inputs("lstm", S.PRIME, bidirectional=desc.bidirectional, seed=4,
                            dtype=dtype)
    check_against_reference(device, "lstm", desc, inputs, dtype)


@pytest.mark.parametrize("k", range(5), ids=lambda k: "-".join(
    v if isinstance(v, str) else "fgl" for v in LSTM_ACTS[k].values() if v))
def test_lstm_per_gate_activations(device, k):
    """Every activation in every LSTM gate and in g(c); an ignored or misrouted activation
    changes the result."""
    needs_fp64(device)
    desc = desc_of("lstm", bidirectional=bool(k % 2), **LSTM_ACTS[k])
    inputs = S.layer_inputs("lstm", S.PRIME, bidirectional=desc.bidirectional, seed=6)
    check_against_reference(device, "lstm", desc, inputs)


@pytest.mark.parametrize("direction", ["rev", "bidi"])
@pytest.mark.parametrize("activation", ACTS)
def test_single_gate_activations(device, activation, direction):
    needs_fp64(device)
    desc = desc_of("rnn", activation=activation, **DIRECTIONS[direction])
    inputs = S.layer_inputs("rnn", S.PRIME, bidirectional=desc.bidirectional, seed=5)
    check_against_reference(device, "rnn", desc, inputs)


@pytest.mark.parametrize("activation", ["relu", "sigmoid", "hard_sigmoid"])
def test_single_gate_activations_float32(device, activation):
    desc = desc_of("rnn", activation=activation, bidirectional=True)
    inputs = S.layer_inputs("rnn", S.PRIME, bidirectional=True, seed=5, dtype=np.float32)
    check_against_reference(device, "rnn", desc, inputs, np.float32)


def test_lstm_float32_nondefault_everything(device):
    # an unbounded cell gate ("none") makes sums with cancellation: smaller weights keep the
    # float32 gradient error (~1.5e-5 here) well inside the tolerance on any device
    desc = desc_of("lstm", bidirectional=True, **LSTM_ACTS[3])
    inputs = S.layer_inputs("lstm", S.PRIME, bidirectional=True, seed=8, dtype=np.float32,
                            scale=0.15)
    check_against_reference(device, "lstm", desc, inputs, np.float32)


def test_gru_float32_reset_before_nondefault_everything(device):
    desc = desc_of("gru", bidirectional=True, **gru_flags(True, False, True))
    inputs = S.layer_inputs("gru", S.PRIME, bidirectional=True, seed=9, dtype=np.float32)
    check_against_reference(device, "gru", desc, inputs, np.float32)


# ---- optional inputs and upstream gradients -----------------------------------------------------


def _absent_cases():
    cases = []
    for kind in KINDS:
        opts = S.OPTIONAL[kind]
        cases.append(pytest.param(kind, (), id=f"{kind}-none"))
        for name in opts:
            cases.append(pytest.param(kind, tuple(o for o in opts if o != name),
                                      id=f"{kind}-no_{name}"))
    return cases


@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bidi"])
@pytest.mark.parametrize("kind,present", _absent_cases())
def test_optional_inputs(device, kind, present, bidirectional):
    """Each optional input absent in turn, and all absent: None means identity input weight
    (the source is pre-projected [T, N, D*G*H]), zero bias / state / cell / peephole / b2, an
    all-ones mask; the gradient list omits the entries of absent inputs, in the API order."""
    needs_fp64(device)
    desc = desc_of(kind, bidirectional=bidirectional, **default_flags(kind))
    inputs = S.layer_inputs(kind, S.PRIME, bidirectional=bidirectional, present=present,
                            seed=10)
    _, grads = check_against_reference(device, kind, desc, inputs)
    assert len(grads) == 2 + len([p for p in present if p != "mask"])
    _, T, N, I, H = S.PRIME
    D = 2 if bidirectional else 1
    if "input_weight" not in present:
        assert grads[0].shape == (T, N, D * S.GATES[kind] * H)


def _upstream_cases():
    cases = []
    for kind in KINDS:
        names = ("dy", "dhn", "dcn") if kind == "lstm" else ("dy", "dhn")
        for which in [(n,) for n in names] + [()]:
            cases.append(pytest.param(kind, which, id=f"{kind}-{'+'.join(which) or 'nothing'}"))
    return cases


@pytest.mark.parametrize("kind,which", _upstream_cases())
def test_upstream_gradient_subsets(device, kind, which):
    """source_gradient, state_gradient, cell_gradient may each be None (= zero; pitfall A4:
    a loss on h_n / c_n only); all given is every other test."""
    needs_fp64(device)
    desc = desc_of(kind, bidirectional=True, **default_flags(kind))
    inputs = S.layer_inputs(kind, S.PRIME, bidirectional=True, seed=11)
    _, grads = check_against_reference(device, kind, desc, inputs, which=which)
    if not which:
        for g in grads:
            assert not np.any(g), "no upstream gradient must give zero gradients"
    else:
        assert np.any(grads[1]), "the recurrent weight must receive a gradient"


# ---- masks -------------------------------------------------------------------------------------


def _mask_cases():
    _, T, N, I, H = S.PRIME
    return [
        pytest.param(False, (1, N, 1), id="uni-[1,N,1]"),
        pytest.param(False, (T, 1, H), id="uni-[T,1,H]"),
        pytest.param(False, (H,), id="uni-[H]"),
        pytest.param(False, (1,), id="uni-[1]"),
        pytest.param(False, (T, N, 1), id="uni-[T,N,1]"),
        pytest.param(True, (2 * H,), id="bidi-[2H]"),
        pytest.param(True, (T, 1, 2 * H), id="bidi-[T,1,2H]"),
        pytest.param(True, (1, N, 1), id="bidi-[1,N,1]"),
        pytest.param(True, (T, N, 2 * H), id="bidi-[T,N,2H]"),
    ]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bidirectional,mshape", _mask_cases())
def test_mask_broadcast(device, kind, bidirectional, mshape):
    """Masks broadcast to [T, N, D*H] (the same mask in forward and backward)."""
    needs_fp64(device)
    desc = desc_of(kind, bidirectional=bidirectional, **default_flags(kind))
    inputs = S.layer_inputs(kind, S.PRIME, bidirectional=bidirectional, seed=12)
    rng = np.random.default_rng(13)
    m = rng.uniform(0.0, 2.0, mshape)
    m[rng.uniform(size=mshape) < 0.2] = 0.0
    inputs["mask"] = m
    check_against_reference(device, kind, desc, inputs)


@pytest.mark.parametrize("kind", KINDS)
def test_mask_of_ones_is_no_mask(device, kind):
    """Dropout p = 0: an all-ones mask gives bit-identical outputs and input-side gradients to
    none; the recurrent weight gradient agrees to rounding (without a mask it is summed from y
    shifted by one step in two GEMMs, with one from the gathered masked inputs in one)."""
    needs_fp64(device)
    desc = desc_of(kind, bidirectional=True, **default_flags(kind))
    inputs = S.layer_inputs(kind, S.PRIME, bidirectional=True, seed=16)
    inputs.pop("mask")
    ones = dict(inputs, mask=np.ones((1, 1, 1)))
    a = forward(kind, inputs, training_desc(kind, desc), device)
    b = forward(kind, ones, training_desc(kind, desc), device)
    ups = upstream(kind, S.PRIME.T, S.PRIME.N, S.PRIME.H, 2, seed=17)
    ga = lib_gradients(kind, inputs, desc, device, *ups, saved=a)
    gb = lib_gradients(kind, ones, desc, device, *ups, saved=b)
    for x, y in zip(a + ga, b + gb):
        if x is ga[1]:      # d_recurrent_weight
            np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-13 * np.abs(y).max())
        else:
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("kind", KINDS)
def test_mask_not_broadcastable_names_mask(device, kind):
    inputs = S.layer_inputs(kind, S.PRIME, seed=14)
    inputs["mask"] = np.ones((S.PRIME.T, S.PRIME.N, S.PRIME.H + 1))
    with pytest.raises(rc.ShapeError, match="mask"):
        forward(kind, inputs, desc_of(kind), device)


@pytest.mark.parametrize("kind", KINDS)
def test_mask_zero_cuts_the_recurrent_input(device, kind):
    """An all-zero mask (dropout p = 1 on h[t-1]) cuts the recurrent product: no NaN from
    0 * anything, and a single-gate RNN becomes h[t] = act(x'[t]) (reference with R = 0)."""
    needs_fp64(device)
    desc = desc_of(kind, bidirectional=True, **default_flags(kind))
    inputs = S.layer_inputs(kind, S.PRIME, bidirectional=True, seed=15)
    inputs["mask"] = np.zeros((1,))
    out, grads = check_against_reference(device, kind, desc, inputs)
    assert all(np.all(np.isfinite(o)) for o in out + grads)
    if kind == "rnn":
        cut = dict(inputs, recurrent_weight=np.zeros_like(inputs["recurrent_weight"]))
        cut.pop("mask")
        assert_close(out[0], forward(kind, cut, desc, ref=True)[0], what="zero mask")
        assert not np.any(grads[1]), "a zero mask gives a zero recurrent-weight gradient"


# ---- output lists ------------------------------------------------------------------------------


@pytest.mark.parametrize("training,produce_cell,n_out", [
    (False, False, 1), (False, True, 2), (True, False, 3), (True, True, 3)],
    ids=["h", "h+c", "training", "training+cell"])
def test_lstm_output_lists(device, training, produce_cell, n_out):
    """LSTM outputs: [h]; [h, c] with produce_cell; [h, c, z_state] with training."""
    needs_fp64(device)
    desc = desc_of("lstm", training=training, produce_cell=produce_cell, bidirectional=True)
    inputs = S.layer_inputs("lstm", S.PRIME, bidirectional=True, seed=16)
    out = forward("lstm", inputs, desc, device)
    ref = forward("lstm", inputs, training_desc("lstm", desc), ref=True)
    _, T, N, I, H = S.PRIME
    assert len(out) == n_out
    assert_close(out[0], ref[0], what="h")
    if n_out >= 2:
        assert_close(out[1], ref[1], what="c")
    if n_out == 3:
        assert_close(out[2], activated_z("lstm", desc, ref[2], H), what="z_state")


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("kind", ["rnn", "gru"])
def test_single_gate_and_gru_output_lists(device, kind, training):
    """Single gate and GRU: [h], plus z_state [T, N, G*H] with training."""
    needs_fp64(device)
    desc = desc_of(kind, training=training, **default_flags(kind))
    inputs = S.layer_inputs(kind, S.PRIME, seed=17)
    out = forward(kind, inputs, desc, device)
    _, T, N, I, H = S.PRIME
    assert len(out) == 1 + training
    assert_close(out[0], forward(kind, inputs, desc, ref=True)[0], what="h")
    if training:
        assert out[1].shape == (T, N, S.GATES[kind] * H)


# ---- flags with closed forms and metamorphic identities ----------------------------------------


def _gru_closed_form_cases():
    cases = [pytest.param(k, np.float64, marks=pytest.mark.fp64, id=gru_id(k) + "-f64")
             for k in GRU_MATRIX]
    cases += [pytest.param(k, np.float32, id=gru_id(k) + "-f32")
              for k in ((True, False, True), (False, True, False))]
    return cases


@pytest.mark.parametrize("key,dtype", _gru_closed_form_cases())
def test_gru_flip_z_closed_form(device, key, dtype):
    """One step with R = 0, source 0, b_z = +10 (semantics.md §2.4): z = f_z(10) and
    o = f_o(b_o) exactly (r does not matter), so flip_z=False gives h = (1-z) h0 + z o (~ o for
    sigmoid) and flip_z=True gives h = z h0 + (1-z) o (~ h0): the two conventions differ by O(1)."""
    flags = gru_flags(*key)
    desc = desc_of("gru", **flags)
    H = 3
    h0 = np.array([[0.3, -0.2, 0.5], [-0.7, 0.9, 0.1], [0.25, 0.5, -0.5]])
    b = {"z": np.full(H, 10.0), "r": np.array([0.5, -1.0, 2.0]), "o": np.array([0.4, -0.7, 1.2])}
    order = ("r", "z", "o") if desc.reset_gate_first else ("z", "r", "o")
    bias = np.concatenate([b[g] for g in order])
    args = dict(mask=np.ones((1, 3, H), dtype))              # same programs as the other tests
    if desc.reset_after:
        args["secondary_bias"] = np.zeros(H, dtype)
    (h,) = rc.gru(np.zeros((1, 3, 3 * H), dtype), np.zeros((3 * H, H), dtype), None,
                  bias.astype(dtype), h0.astype(dtype), **args, descriptor=desc, device=device)
    z = M.activate(desc.update_gate_activation, b["z"])
    o = M.activate(desc.output_gate_activation, b["o"])
    want = z * h0 + (1 - z) * o if desc.flip_z else (1 - z) * h0 + z * o
    other = (1 - z) * h0 + z * o if desc.flip_z else z * h0 + (1 - z) * o
    assert np.max(np.abs(want - other)) > 0.5
    assert_close(h[0], want, dtype, "h", tol=1e-12 if dtype == np.float64 else 1e-6)


def _permute_blocks(a, perm, H, axis):
    """Reorder the gate blocks (H wide along ``axis``) of every direction: new k = old perm[k]."""
    blocks = np.split(a, a.shape[axis] // H, axis=axis)
    G = len(perm)
    out = []
    for start in range(0, len(blocks), G):
        out += [blocks[start + p] for p in perm]
    return np.concatenate(out, axis=axis)


def _permuted(inputs, perm, H):
    """Every gate-blocked argument with its blocks permuted (perm is an involution here)."""
    p = dict(inputs)
    p["recurrent_weight"] = _permute_blocks(p["recurrent_weight"], perm, H, -2)
    for name, axis in (("input_weight", 0), ("bias", 0), ("peephole", -1)):
        if name in p:
            p[name] = _permute_blocks(p[name], perm, H, axis)
    if "input_weight" not in inputs:
        p["source"] = _permute_blocks(p["source"], perm, H, -1)
    return p


@pytest.mark.parametrize("with_w", [True, False], ids=["W", "preprojected"])
@pytest.mark.parametrize("kind,flag,perm", [
    ("lstm", "forget_gate_last", (0, 2, 1, 3)),    # [i,f,z,o] <-> [i,z,f,o]
    ("gru", "reset_gate_first", (1, 0, 2)),        # [z,r,o]  <-> [r,z,o]
])
def test_gate_order_flag_is_a_block_permutation(device, kind, flag, perm, with_w):
    """flag=True on permuted weight blocks == flag=False on the original ones, forward and
    gradients (permuted back); flag=True on the original blocks differs, so the test fails if
    the flag were ignored. The library against itself only."""
    needs_fp64(device)
    present = S.OPTIONAL[kind] if with_w else tuple(
        o for o in S.OPTIONAL[kind] if o != "input_weight")
    flags = dict(bidirectional=True, **default_flags(kind))
    inputs = S.layer_inputs(kind, S.PRIME, bidirectional=True, present=present, seed=18)
    H = S.PRIME.H
    permuted = _permuted(inputs, perm, H)
    base = desc_of(kind, **flags)
    flagged = desc_of(kind, **dict(flags, **{flag: True}))
    a = forward(kind, inputs, training_desc(kind, base), device)
    b = forward(kind, permuted, training_desc(kind, flagged), device)
    for x, y in zip(a[:-1], b[:-1]):                     # h (and c)
        np.testing.assert_allclose(y, x, rtol=0, atol=1e-13)
    np.testing.assert_allclose(_permute_blocks(b[-1], perm, H, -1), a[-1], rtol=0, atol=1e-13)
    wrong = forward(kind, inputs, flagged, device)[0]
    assert np.max(np.abs(wrong - a[0])) > 1e-3
    dy, dhn, dcn = upstream(kind, S.PRIME.T, S.PRIME.N, H, 2, seed=19)
    ga = lib_gradients(kind, inputs, base, device, dy, dhn, dcn, saved=a)
    gb = lib_gradients(kind, permuted, flagged, device, dy, dhn, dcn, saved=b)
    back = _permuted(dict(zip(grad_names(kind, inputs), gb)), perm, H)
    for name, g in zip(grad_names(kind, inputs), ga):
        np.testing.assert_allclose(back[name], g, rtol=0, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("kind", KINDS)
def test_reverse_is_time_flipped_forward(device, kind):
    """reverse=True on x equals the forward direction on x[::-1], flipped back (the library
    against itself), and differs from the forward direction on x."""
    needs_fp64(device)
    inputs = S.layer_inputs(kind, S.PRIME, seed=20)
    flipped = dict(inputs, source=inputs["source"][::-1].copy(),
                   mask=inputs["mask"][::-1].copy())
    fl = default_flags(kind)
    rev = forward(kind, inputs, desc_of(kind, reverse=True, **fl), device)[0]
    fwd = forward(kind, flipped, desc_of(kind, **fl), device)[0]
    np.testing.assert_allclose(rev, fwd[::-1], rtol=0, atol=1e-14)
    assert np.max(np.abs(rev - forward(kind, inputs, desc_of(kind, **fl), device)[0])) > 1e-3


def test_flags_interleaved_in_one_process(device):
    """Configurations differing in one flag, interleaved: each one still matches the reference
    (pitfall A1: a graph cache keyed without a flag reused another configuration)."""
    needs_fp64(device)
    cases = [("lstm", {}), ("lstm", {"forget_gate_last": True}), ("lstm", {}),
             ("lstm", LSTM_ACTS[1]), ("lstm", {"bidirectional": True}),
             ("gru", gru_flags(False, True, False)), ("gru", gru_flags(False, False, False)),
             ("gru", gru_flags(True, True, False)), ("gru", gru_flags(False, True, False)),
             ("rnn", {"activation": "tanh"}), ("rnn", {"activation": "sigmoid"}),
             ("rnn", {"activation": "tanh", "reverse": True}), ("rnn", {"activation": "tanh"})]
    for kind, flags in cases:
        desc = desc_of(kind, **flags)
        inputs = S.layer_inputs(kind, S.SMALL, bidirectional=desc.bidirectional, seed=21)
        (h,) = forward(kind, inputs, desc, device)
        assert_close(h, forward(kind, inputs, desc, ref=True)[0], what=f"{kind} {flags}")


# ---- degenerate sizes ---------------------------------------------------------------------------


@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bidi"])
@pytest.mark.parametrize("shape", S.EMPTY, ids=S.ids(S.EMPTY))
@pytest.mark.parametrize("kind", KINDS)
def test_empty_sizes(device, kind, shape, bidirectional):
    """T = 0 / N = 0: correctly shaped empty outputs, never a crash; with T = 0 the final-state
    gradients pass straight to d_init_state / d_init_cell and every weight gradient is zero."""
    needs_fp64(device)
    desc = desc_of(kind, bidirectional=bidirectional, **default_flags(kind))
    inputs = S.layer_inputs(kind, shape, bidirectional=bidirectional, seed=22)
    T, N, H = shape.T, shape.N, shape.H
    D = 2 if bidirectional else 1
    G = S.GATES[kind]
    out = forward(kind, inputs, training_desc(kind, desc), device)
    assert [o.shape for o in out] == (
        [(T, N, D * H), (T, N, D * H), (T, N, D * G * H)] if kind == "lstm"
        else [(T, N, D * H), (T, N, D * G * H)])
    assert all(isinstance(o, np.ndarray) and o.dtype == np.float64 for o in out)
    dy, dhn, dcn = upstream(kind, T, N, H, D, seed=23)
    names = grad_names(kind, inputs)
    got = lib_gradients(kind, inputs, desc, device, dy, dhn, dcn, saved=out)
    assert len(got) == len(names)
    grads = dict(zip(names, got))
    for name, g in grads.items():
        assert g.shape == inputs[name].shape, name
        assert np.all(np.isfinite(g)), name
    weights = ("recurrent_weight", "input_weight", "bias", "peephole", "secondary_bias")
    for name in weights:
        if name in grads:
            assert not np.any(grads[name]), name
    if T == 0:
        np.testing.assert_array_equal(grads["init_state"], dhn)
        if kind == "lstm":
            np.testing.assert_array_equal(grads["init_cell"], dcn)
    for name, g, w in zip(names, got, ref_gradients(kind, inputs, desc, dy, dhn, dcn)):
        assert_close(g, w, what=f"d_{name}", part="gradient")


# =================================================================================================
# Finite differences directly on the library (float64)


def _fd_check(device, kind, desc, present, seed, shape=S.SMALL, directions=None):
    """L = sum(h * g0) + sum(h_final * g1) (+ sum(c_final * g2)), the mask held fixed: every
    gradient output of the library vs central differences of the library's forward."""
    inputs = S.layer_inputs(kind, shape, bidirectional=desc.bidirectional, present=present,
                            seed=seed)
    mask = inputs.pop("mask", None)
    H = shape.H
    fdesc = dataclasses.replace(desc, training=False)
    if kind == "lstm":
        fdesc = dataclasses.replace(fdesc, produce_cell=True)

    def full(i):
        return dict(i, mask=mask) if mask is not None else dict(i)

    def lib_forward(i):
        out = forward(kind, full(i), fdesc, device)
        res = [out[0], final_state(out[0], desc, H)]
        if kind == "lstm":
            res.append(final_state(out[1], desc, H))
        return res

    def lib_grads(g):
        got = lib_gradients(kind, full(inputs), desc, device, g[0], g[1],
                            g[2] if kind == "lstm" else None)
        names = grad_names(kind, inputs)
        assert len(got) == len(names)
        return dict(zip(names, got))

    errors = fd.check_gradients(lib_forward, inputs, lib_grads, seed=seed, tol=FD_TOL,
                                directions=directions)
    assert set(errors) == set(grad_names(kind, inputs))
    MAX_ERR["float64 finite-difference abs"] = max(
        [MAX_ERR.get("float64 finite-difference abs", 0.0), *errors.values()])


SMOOTH_LSTM = dict(input_gate_activation="tanh", forget_gate_activation="none",
                   cell_gate_activation="sigmoid", output_gate_activation="tanh",
                   activation="sigmoid")

FD_CASES = [
    pytest.param("rnn", dict(activation="tanh"), id="rnn-tanh-fwd"),
    pytest.param("rnn", dict(activation="sigmoid", reverse=True), id="rnn-sigmoid-rev"),
    pytest.param("rnn", dict(activation="none", bidirectional=True), id="rnn-none-bidi"),
    pytest.param("lstm", dict(), id="lstm-fwd"),
    pytest.param("lstm", dict(reverse=True, forget_gate_last=True), id="lstm-fgl-rev"),
    pytest.param("lstm", dict(bidirectional=True), id="lstm-bidi"),
    pytest.param("lstm", dict(bidirectional=True, forget_gate_last=True, **SMOOTH_LSTM),
                 id="lstm-fgl-tanh-none-sigmoid-tanh-sigmoid-bidi"),
    pytest.param("gru", dict(bidirectional=True, **gru_flags(False, False, False)),
                 id="gru-zro-before-z_new-bidi"),
    pytest.param("gru", dict(reverse=True, **gru_flags(False, True, False)),
                 id="gru-zro-after-z_new-rev"),
    pytest.param("gru", dict(bidirectional=True, **gru_flags(True, True, False)),
                 id="gru-rzo-after-z_new-bidi"),
    pytest.param("gru", dict(reverse=True, reset_gate_first=True, flip_z=True,
                             update_gate_activation="tanh", reset_gate_activation="none",
                             output_gate_activation="sigmoid"),
                 id="gru-rzo-before-flip_z-tanh-none-sigmoid-rev"),
    pytest.param("gru", dict(bidirectional=True, reset_after=True, flip_z=True),
                 id="gru-zro-after-flip_z-bidi"),
]


@pytest.mark.parametrize("kind,flags", FD_CASES)
def test_finite_differences_all_inputs(device, kind, flags):
    """Every gradient output (source, recurrent_weight, input_weight, bias, peephole,
    secondary_bias, init_state, init_cell) by central differences of the library's own forward,
    with h-sequence, final-h and final-c losses and a mask with zeros held fixed; every element.
    Smooth activations only (relu / hard_sigmoid kinks are checked against the reference)."""
    needs_fp64(device)
    _fd_check(device, kind, desc_of(kind, **flags), S.OPTIONAL[kind], seed=30)


@pytest.mark.parametrize("kind", KINDS)
def test_finite_differences_preprojected_source(device, kind):
    """input_weight None: d_source is the gradient of the pre-projected [T, N, 2*G*H] input."""
    needs_fp64(device)
    present = tuple(o for o in S.OPTIONAL[kind] if o != "input_weight")
    _fd_check(device, kind, desc_of(kind, bidirectional=True, **default_flags(kind)), present,
              seed=31)


@pytest.mark.parametrize("kind", KINDS)
def test_finite_differences_prime_shape(device, kind):
    """The prime shape (T=7, N=5, I=3, H=11), bidirectional: 16 random directions per input."""
    needs_fp64(device)
    _fd_check(device, kind, desc_of(kind, bidirectional=True, **default_flags(kind)),
              S.OPTIONAL[kind], seed=32, shape=S.PRIME, directions=16)


# =================================================================================================
# PyTorch parity (float64, semantics.md §2.5)


def _torch_module(torch, kind, I, H, bidi):
    torch.manual_seed(0)
    if kind == "lstm":
        m = torch.nn.LSTM(I, H, bidirectional=bidi)
    elif kind == "gru":
        m = torch.nn.GRU(I, H, bidirectional=bidi)
    else:
        m = torch.nn.RNN(I, H, nonlinearity=kind.split("_")[1], bidirectional=bidi)
    m = m.double()
    with torch.no_grad():
        for p in m.parameters():
            p.uniform_(-0.5, 0.5)
    return m


@pytest.mark.torch
@pytest.mark.parametrize("bidi", [False, True], ids=["uni", "bidi"])
@pytest.mark.parametrize("kind", ["rnn_tanh", "rnn_relu", "lstm", "gru"])
def test_pytorch_parity(device, kind, bidi):
    """nn.RNN (tanh, relu), nn.LSTM, nn.GRU in float64: W = weight_ih, R = weight_hh, b = b_ih
    + b_hh (GRU: reset_gate_first, reset_after, flip_z, b = [b_ir+b_hr, b_iz+b_hz, b_in],
    secondary_bias = b_hn); bidirectional weights packed [fwd; bwd]; forward, h_n, c_n and the
    gradient of every torch parameter and initial state."""
    torch = pytest.importorskip("torch")
    needs_fp64(device)
    _, T, N, I, H = S.PRIME
    D = 2 if bidi else 1
    m = _torch_module(torch, kind, I, H, bidi)
    rng = np.random.default_rng(40)
    x = torch.tensor(rng.standard_normal((T, N, I)), requires_grad=True)
    h0 = torch.tensor(rng.standard_normal((D, N, H)), requires_grad=True)
    c0 = torch.tensor(rng.standard_normal((D, N, H)), requires_grad=True)
    y, st = m(x, (h0, c0)) if kind == "lstm" else m(x, h0)
    hn, cn = st if kind == "lstm" else (st, None)
    g_y = rng.standard_normal(tuple(y.shape))
    g_hn = rng.standard_normal((D, N, H))
    g_cn = rng.standard_normal((D, N, H))
    loss = (y * torch.tensor(g_y)).sum() + (hn * torch.tensor(g_hn)).sum()
    if cn is not None:
        loss = loss + (cn * torch.tensor(g_cn)).sum()
    loss.backward()

    sfx = ["", "_reverse"] if bidi else [""]
    prm = dict(m.named_parameters())

    def get(name):
        return [prm[name + s].detach().numpy() for s in sfx]

    def grad(name):
        return [prm[name + s].grad.numpy() for s in sfx]

    def cat_state(a):                      # [D, N, H] -> [N, D*H] = [fwd | bwd]
        return np.concatenate(list(np.asarray(a)), axis=-1)

    R = get("weight_hh_l0")
    inputs = dict(source=x.detach().numpy(), recurrent_weight=R[0] if D == 1 else np.stack(R),
                  input_weight=np.concatenate(get("weight_ih_l0")),
                  init_state=cat_state(h0.detach().numpy()))
    bih, bhh = get("bias_ih_l0"), get("bias_hh_l0")
    if kind == "gru":
        inputs["bias"] = np.concatenate([np.concatenate([bi[:2 * H] + bh[:2 * H], bi[2 * H:]])
                                         for bi, bh in zip(bih, bhh)])
        inputs["secondary_bias"] = np.concatenate([bh[2 * H:] for bh in bhh])
        op, desc = "gru", desc_of("gru", bidirectional=bidi, reset_gate_first=True,
                                  reset_after=True, flip_z=True)
    else:
        inputs["bias"] = np.concatenate([bi + bh for bi, bh in zip(bih, bhh)])
        if kind == "lstm":
            inputs["init_cell"] = cat_state(c0.detach().numpy())
            op, desc = "lstm", desc_of("lstm", bidirectional=bidi)
        else:
            op, desc = "rnn", desc_of("rnn", bidirectional=bidi, activation=kind.split("_")[1])
    out = forward(op, inputs, training_desc(op, desc), device)
    assert_close(out[0], y.detach().numpy(), what="h vs torch output")
    assert_close(final_state(out[0], desc, H), cat_state(hn.detach().numpy()), what="h_n")
    if op == "lstm":
        assert_close(final_state(out[1], desc, H), cat_state(cn.detach().numpy()), what="c_n")
    g = dict(zip(grad_names(op, inputs),
                 lib_gradients(op, inputs, desc, device, g_y, cat_state(g_hn),
                               cat_state(g_cn) if op == "lstm" else None, saved=out)))

    def check(name, want):
        assert_close(g[name], want, what=f"d_{name}", part="gradient")

    check("source", x.grad.numpy())
    check("input_weight", np.concatenate(grad("weight_ih_l0")))
    gR = grad("weight_hh_l0")
    check("recurrent_weight", gR[0] if D == 1 else np.stack(gR))
    check("init_state", cat_state(h0.grad.numpy()))
    # the input-side biases enter unchanged: d b = d b_ih; b_hh's entries equal it, except
    # GRU's n entry, which is the secondary bias' gradient
    check("bias", np.concatenate(grad("bias_ih_l0")))
    if op == "gru":
        bhh_g = grad("bias_hh_l0")
        check("secondary_bias", np.concatenate([b[2 * H:] for b in bhh_g]))
        assert_close(np.concatenate([b[:2 * H] for b in np.split(g["bias"], D)]),
                     np.concatenate([b[:2 * H] for b in bhh_g]), what="d_b_hh[r, z]",
                     part="gradient")
    else:
        check("bias", np.concatenate(grad("bias_hh_l0")))
    if op == "lstm":
        check("init_cell", cat_state(c0.grad.numpy()))


# =================================================================================================
# Stacked bidirectional layers (pitfalls A3, A16): chain the library's layers and gradients


@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_three_stacked_bidirectional_layers(device, kind):
    """Three bidirectional layers, each with its own distinct h0 (c0) and mask: the forward
    chain and the backward chain (d_source of layer l is the source_gradient of layer l-1, plus
    per-layer final-state gradients) vs the reference chain."""
    needs_fp64(device)
    T, N, I, H = 5, 3, 4, 3
    desc = desc_of(kind, bidirectional=True, **default_flags(kind))
    layers, width = [], I
    for layer in range(3):
        layers.append(S.layer_inputs(kind, S.Shape("layer", T, N, width, H),
                                     bidirectional=True, seed=50 + layer))
        width = 2 * H
    rng = np.random.default_rng(59)
    x = rng.standard_normal((T, N, I))

    def run(ref):
        seq, saved = x, []
        for inp in layers:
            inp = dict(inp, source=seq)
            out = forward(kind, inp, training_desc(kind, desc), device, ref=ref)
            saved.append((inp, out))
            seq = out[0]
        return seq, saved

    y, saved = run(False)
    y_ref, saved_ref = run(True)
    assert_close(y, y_ref, what="top layer h")
    dy = rng.standard_normal(y.shape)
    dhn = [rng.standard_normal((N, 2 * H)) for _ in layers]
    g_lib = g_ref = dy
    for k in reversed(range(3)):
        dcn = 0.5 * dhn[k] if kind == "lstm" else None
        inp, out = saved[k]
        got = lib_gradients(kind, inp, desc, device, g_lib, dhn[k], dcn, saved=out)
        want = ref_gradients(kind, saved_ref[k][0], desc, g_ref, dhn[k], dcn)
        for name, g, w in zip(grad_names(kind, inp), got, want):
            assert_close(g, w, what=f"layer {k} d_{name}", part="gradient")
        g_lib, g_ref = got[0], want[0]


# =================================================================================================
# Numerical extremes (pitfall A21)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind,flags", [
    pytest.param("rnn", {"activation": "tanh"}, id="rnn-tanh"),
    pytest.param("rnn", {"activation": "sigmoid"}, id="rnn-sigmoid"),
    pytest.param("rnn", {"activation": "hard_sigmoid"}, id="rnn-hard_sigmoid"),
    pytest.param("lstm", {}, id="lstm"),
    pytest.param("gru", gru_flags(True, False, True), id="gru-before"),
    pytest.param("gru", gru_flags(False, True, False), id="gru-after")])
def test_saturated_preactivations(device, kind, flags, dtype):
    """Pre-activations of +-50 and +-100 (exp overflows in float32 for naive formulas): finite
    outputs and gradients, equal to the reference."""
    desc = desc_of(kind, bidirectional=True, **flags)
    present = tuple(o for o in S.OPTIONAL[kind] if o != "input_weight")
    inputs = S.layer_inputs(kind, S.PRIME, bidirectional=True, present=present, seed=60,
                            dtype=dtype)
    rng = np.random.default_rng(61)
    inputs["source"] = rng.choice([-100.0, -50.0, 50.0, 100.0],
                                  size=inputs["source"].shape).astype(dtype)
    out, grads = check_against_reference(device, kind, desc, inputs, dtype)
    for a in out + grads:
        assert np.all(np.isfinite(a))


@pytest.mark.parametrize("kind,flags", [
    pytest.param("rnn", {"activation": a}, id=f"rnn-{a}") for a in ACTS] + [
    pytest.param("lstm", {}, id="lstm"),
    pytest.param("gru", gru_flags(False, False, False), id="gru-before"),
    pytest.param("gru", gru_flags(False, True, False), id="gru-after")])
def test_nan_propagates(device, kind, flags):
    """A NaN in one row's input at t = 0 makes every output of that row NaN from then on (relu
    and hard_sigmoid too: no clamp may turn NaN into a number); the other rows are exact, also
    in d_source; the gradient op runs without raising."""
    needs_fp64(device)
    desc = desc_of(kind, **flags)
    inputs = S.layer_inputs(kind, S.PRIME, seed=62)
    inputs["mask"] = np.random.default_rng(64).uniform(0.5, 1.5, inputs["mask"].shape)
    inputs["source"][0, 1, 0] = np.nan
    out = forward(kind, inputs, training_desc(kind, desc), device)
    assert np.all(np.isnan(out[0][:, 1, :])), "NaN must reach every unit of the row"
    ok = [0, 2, 3, 4]

    def rows(d):
        return {k: (v[:, ok] if k in ("source", "mask") else v[ok]
                    if k in ("init_state", "init_cell") else v) for k, v in d.items()}

    assert_close(out[0][:, ok], forward(kind, rows(inputs), desc, ref=True)[0],
                 what="rows without NaN")
    dy, dhn, dcn = upstream(kind, S.PRIME.T, S.PRIME.N, S.PRIME.H, 1, seed=63)
    grads = lib_gradients(kind, inputs, desc, device, dy, dhn, dcn, saved=out)
    want = ref_gradients(kind, rows(inputs), desc, dy[:, ok], dhn[ok],
                         None if dcn is None else dcn[ok])
    assert_close(grads[0][:, ok], want[0], what="d_source of rows without NaN",
                 part="gradient")


# =================================================================================================
# Array kinds, dtypes, shapes (API.md §0)


def _to_device(inputs, queue):
    return {k: cla.to_device(queue, np.ascontiguousarray(v)) for k, v in inputs.items()}


@pytest.mark.parametrize("kind", KINDS)
def test_device_arrays_in_device_arrays_out(device, kind):
    """pyopencl arrays in -> pyopencl arrays out on the caller's queue, bit-equal to the NumPy
    path; no input, forward output or upstream gradient is ever written (pitfall A16)."""
    needs_fp64(device)
    desc = desc_of(kind, bidirectional=True, **default_flags(kind))
    for present in (S.OPTIONAL[kind],
                    tuple(o for o in S.OPTIONAL[kind] if o != "input_weight")):
        inputs = S.layer_inputs(kind, S.PRIME, bidirectional=True, present=present, seed=70)
        d_inputs = _to_device(inputs, device.queue)
        tdesc = training_desc(kind, desc)
        out = forward(kind, d_inputs, tdesc, device)
        host = forward(kind, inputs, tdesc, device)
        assert all(isinstance(o, cla.Array) and o.queue == device.queue for o in out)
        for a, b in zip(out, host):
            np.testing.assert_array_equal(a.get(), b)
        ups = upstream(kind, S.PRIME.T, S.PRIME.N, S.PRIME.H, 2, seed=71)
        d_ups = [None if u is None else cla.to_device(device.queue, u) for u in ups]
        out_before = [o.get() for o in out]
        grads = lib_gradients(kind, d_inputs, desc, device, *d_ups, saved=out)
        host_grads = lib_gradients(kind, inputs, desc, device, *ups, saved=host)
        assert len(grads) == len(host_grads)
        assert all(isinstance(g, cla.Array) and g.queue == device.queue for g in grads)
        for a, b in zip(grads, host_grads):
            np.testing.assert_array_equal(a.get(), b)
        for k, v in d_inputs.items():     # after the forward and the gradient op
            np.testing.assert_array_equal(v.get(), inputs[k], err_msg=f"{k} was written")
        for o, b in zip(out, out_before):
            np.testing.assert_array_equal(o.get(), b, err_msg="a forward output was written")
        for u, h in zip(d_ups, ups):
            if u is not None:
                np.testing.assert_array_equal(u.get(), h, err_msg="an upstream grad was written")


def test_numpy_inputs_never_written(device):
    needs_fp64(device)
    for kind in KINDS:
        desc = desc_of(kind, bidirectional=True, **default_flags(kind))
        for present in (S.OPTIONAL[kind], ("mask",)):
            inputs = S.layer_inputs(kind, S.PRIME, bidirectional=True, present=present,
                                    seed=72)
            copies = {k: v.copy() for k, v in inputs.items()}
            ups = upstream(kind, S.PRIME.T, S.PRIME.N, S.PRIME.H, 2, seed=73)
            lib_gradients(kind, inputs, desc, device, *ups)
            for k in inputs:
                np.testing.assert_array_equal(inputs[k], copies[k], err_msg=k)


def test_device_array_with_offset_is_read_correctly(device):
    """A contiguous slice of a bigger device array (non-zero offset) is a valid input."""
    needs_fp64(device)
    inputs = S.layer_inputs("lstm", S.PRIME, seed=74)
    big = np.concatenate([np.full((2,) + inputs["source"].shape[1:], 1e3), inputs["source"]])
    d_src = cla.to_device(device.queue, big)[2:]
    assert d_src.offset > 0
    d_inputs = dict(_to_device(inputs, device.queue), source=d_src)
    out = forward("lstm", d_inputs, desc_of("lstm"), device)[0].get()
    assert_close(out, forward("lstm", inputs, desc_of("lstm"), ref=True)[0], what="h")


@pytest.mark.parametrize("name", ["source", "recurrent_weight", "input_weight", "init_state",
                                  "mask"])
def test_non_contiguous_device_array_raises(device, name):
    """A strided device array raises ValueError naming the argument (never read as dense)."""
    inputs = S.layer_inputs("gru", S.PRIME, seed=75, dtype=np.float32)
    d_inputs = _to_device(inputs, device.queue)
    wide = cla.to_device(device.queue, np.repeat(inputs[name], 2, axis=-1))
    view = wide[..., ::2]
    assert not view.flags.c_contiguous
    d_inputs[name] = view
    with pytest.raises(ValueError, match=name):
        forward("gru", d_inputs, desc_of("gru"), device)


def test_non_contiguous_numpy_is_accepted(device):
    """Fortran-ordered and strided NumPy inputs give bit-identical results."""
    needs_fp64(device)
    for kind in KINDS:
        desc = desc_of(kind, bidirectional=True, **default_flags(kind))
        inputs = S.layer_inputs(kind, S.PRIME, bidirectional=True, seed=76)
        strided = {k: np.asfortranarray(v) if v.ndim >= 2 else np.repeat(v, 2)[::2]
                   for k, v in inputs.items()}
        strided["source"] = np.repeat(inputs["source"], 3, axis=1)[:, ::3]
        assert not any(v.flags.c_contiguous for v in strided.values())
        a = forward(kind, inputs, desc, device)
        b = forward(kind, strided, desc, device)
        np.testing.assert_array_equal(a[0], b[0])
        dy, dhn, dcn = upstream(kind, S.PRIME.T, S.PRIME.N, S.PRIME.H, 2, seed=77)
        ga = lib_gradients(kind, inputs, desc, device, dy, dhn, dcn)
        gb = lib_gradients(kind, strided, desc, device, np.asfortranarray(dy),
                           np.asfortranarray(dhn), None if dcn is None else dcn[:, ::-1][:, ::-1])
        for x, y in zip(ga, gb):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("kind", KINDS)
def test_mixed_dtypes_raise_type_error(device, kind):
    """One float64 argument among float32 ones: TypeError naming it; integer source too."""
    inputs = S.layer_inputs(kind, S.PRIME, seed=78, dtype=np.float32)
    for name in inputs:
        if name == "source":
            continue
        bad = dict(inputs, **{name: inputs[name].astype(np.float64)})
        with pytest.raises(TypeError, match=name):
            forward(kind, bad, desc_of(kind), device)
    with pytest.raises(TypeError, match="source"):
        forward(kind, dict(inputs, source=inputs["source"].astype(np.int32)), desc_of(kind),
                device)


@pytest.mark.parametrize("kind", KINDS)
def test_mixed_dtypes_in_gradients_raise_type_error(device, kind):
    desc = desc_of(kind, **default_flags(kind))
    inputs = S.layer_inputs(kind, S.PRIME, seed=79, dtype=np.float32)
    saved = [o.copy() for o in forward(kind, inputs, training_desc(kind, desc), device)]
    dy, dhn, dcn = upstream(kind, S.PRIME.T, S.PRIME.N, S.PRIME.H, 1, seed=80, dtype=np.float32)

    def f64(a):
        return a.astype(np.float64)

    with pytest.raises(TypeError, match="source_gradient"):
        lib_gradients(kind, inputs, desc, device, f64(dy), dhn, dcn, saved=saved)
    with pytest.raises(TypeError, match="state_gradient"):
        lib_gradients(kind, inputs, desc, device, dy, f64(dhn), dcn, saved=saved)
    with pytest.raises(TypeError, match="z_state"):
        lib_gradients(kind, inputs, desc, device, dy, dhn, dcn,
                      saved=[*saved[:-1], f64(saved[-1])])
    if kind == "lstm":
        with pytest.raises(TypeError, match="cell_gradient"):
            lib_gradients(kind, inputs, desc, device, dy, dhn, f64(dcn), saved=saved)
        with pytest.raises(TypeError, match="cell_output_fwd"):
            lib_gradients(kind, inputs, desc, device, dy, dhn, dcn,
                          saved=[saved[0], f64(saved[1]), saved[2]])
    if kind == "gru":
        with pytest.raises(TypeError, match="output_fwd"):
            lib_gradients(kind, inputs, desc, device, dy, dhn, dcn,
                          saved=[f64(saved[0]), saved[1]])


def _bad_shape_cases():
    cases = []
    for kind in KINDS:
        for name in ("source", "recurrent_weight", *S.OPTIONAL[kind]):
            if name != "mask":
                cases.append(pytest.param(kind, name, id=f"{kind}-{name}"))
    return cases


@pytest.mark.parametrize("kind,name", _bad_shape_cases())
def test_wrong_shape_raises_shape_error_naming_argument(device, kind, name):
    """ShapeError (a ValueError) naming the argument and the shape received."""
    desc = desc_of(kind, bidirectional=True, **default_flags(kind))
    inputs = S.layer_inputs(kind, S.PRIME, bidirectional=True, seed=81, dtype=np.float32)
    a = inputs[name]
    # the source's last axis is I: cutting it is input_weight's mismatch (checked below)
    bads = (a[None], a[0]) if name == "source" else (a[..., :-1], a[None])
    for bad in bads:
        with pytest.raises(rc.ShapeError, match=name) as info:
            forward(kind, dict(inputs, **{name: np.ascontiguousarray(bad)}), desc, device)
        assert isinstance(info.value, ValueError)
        assert str(list(bad.shape)) in str(info.value)
    if name == "source":
        with pytest.raises(rc.ShapeError, match="input_weight"):
            forward(kind, dict(inputs, source=np.ascontiguousarray(a[..., :-1])), desc, device)


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_gradient_shapes_raise_shape_error(device, kind):
    desc = desc_of(kind, bidirectional=True, **default_flags(kind))
    inputs = S.layer_inputs(kind, S.PRIME, bidirectional=True, seed=82, dtype=np.float32)
    saved = [o.copy() for o in forward(kind, inputs, training_desc(kind, desc), device)]
    dy, dhn, dcn = upstream(kind, S.PRIME.T, S.PRIME.N, S.PRIME.H, 2, seed=83,
                            dtype=np.float32)
    with pytest.raises(rc.ShapeError, match="source_gradient"):
        lib_gradients(kind, inputs, desc, device, dy[:, :, :-1], dhn, dcn, saved=saved)
    with pytest.raises(rc.ShapeError, match="state_gradient"):
        lib_gradients(kind, inputs, desc, device, dy, dhn[:-1], dcn, saved=saved)
    with pytest.raises(rc.ShapeError, match="z_state"):
        lib_gradients(kind, inputs, desc, device, dy, dhn, dcn,
                      saved=[*saved[:-1], saved[-1][:, :, 1:]])
    if kind == "lstm":
        with pytest.raises(rc.ShapeError, match="cell_gradient"):
            lib_gradients(kind, inputs, desc, device, dy, dhn, dcn[:, 1:], saved=saved)
        with pytest.raises(rc.ShapeError, match="cell_output_fwd"):
            lib_gradients(kind, inputs, desc, device, dy, dhn, dcn,
                          saved=[saved[0], saved[1][1:], saved[2]])
    if kind == "gru":
        with pytest.raises(rc.ShapeError, match="output_fwd"):
            lib_gradients(kind, inputs, desc, device, dy, dhn, dcn,
                          saved=[saved[0][:, 1:], saved[1]])


def test_bidirectional_weight_rank_is_checked(device):
    """A unidirectional [G*H, H] recurrent weight with bidirectional=True is a ShapeError."""
    inputs = S.layer_inputs("lstm", S.PRIME, seed=84, dtype=np.float32)
    with pytest.raises(rc.ShapeError, match="recurrent_weight"):
        forward("lstm", inputs, desc_of("lstm", bidirectional=True), device)


def test_descriptor_validation(device):
    inputs = S.layer_inputs("rnn", S.PRIME, seed=85, dtype=np.float32)
    with pytest.raises(TypeError, match="descriptor"):
        forward("rnn", inputs, desc_of("lstm"), device)
    with pytest.raises(ValueError, match="activation"):
        forward("rnn", inputs, desc_of("rnn", activation="gelu"), device)
    with pytest.raises(ValueError, match="forget_gate_activation"):
        forward("lstm", S.layer_inputs("lstm", S.PRIME, seed=85, dtype=np.float32),
                desc_of("lstm", forget_gate_activation="softsign"), device)
    with pytest.raises(ValueError, match="reset_gate_activation"):
        forward("gru", S.layer_inputs("gru", S.PRIME, seed=85, dtype=np.float32),
                desc_of("gru", reset_gate_activation="Sigmoid"), device)
    with pytest.raises(TypeError, match="bidirectional"):
        forward("rnn", inputs, desc_of("rnn", bidirectional="yes"), device)


def test_descriptor_defaults_are_mpsgraph_defaults(device):
    assert rc.SingleGateRNNDescriptor().activation == "relu"
    d = rc.LSTMDescriptor()
    assert (d.forget_gate_last, d.produce_cell, d.cell_gate_activation, d.activation) == (
        False, False, "tanh", "tanh")
    g = rc.GRUDescriptor()
    assert (g.reset_gate_first, g.reset_after, g.flip_z) == (False, False, False)
    # the default single-gate activation really is relu: negative pre-activations give 0
    (h,) = rc.single_gate_rnn(np.full((2, 1, 1), -1.0, np.float32), np.ones((1, 1), np.float32),
                              device=device)
    assert np.array_equal(h, np.zeros((2, 1, 1), np.float32))


# =================================================================================================
# Re-runnable, deterministic (pitfall A22); the device argument


@pytest.mark.parametrize("kind", KINDS)
def test_gradients_are_rerunnable_and_deterministic(device, kind):
    needs_fp64(device)
    desc = desc_of(kind, bidirectional=True, **default_flags(kind))
    inputs = S.layer_inputs(kind, S.PRIME, bidirectional=True, seed=90)
    saved = forward(kind, inputs, training_desc(kind, desc), device)
    for a, b in zip(saved, forward(kind, inputs, training_desc(kind, desc), device)):
        np.testing.assert_array_equal(a, b)
    ups = upstream(kind, S.PRIME.T, S.PRIME.N, S.PRIME.H, 2, seed=91)
    g1 = lib_gradients(kind, inputs, desc, device, *ups, saved=saved)
    g2 = lib_gradients(kind, inputs, desc, device, *ups, saved=saved)
    for a, b in zip(g1, g2):
        np.testing.assert_array_equal(a, b)


def test_device_argument_forms(device):
    """device= accepts a Device, a queue and a "P:D" spec string; results are identical."""
    needs_fp64(device)
    inputs = S.layer_inputs("gru", S.PRIME, seed=92)
    desc = desc_of("gru", **default_flags("gru"))
    base = forward("gru", inputs, desc, device)[0]
    specs = [device.queue] + ([device.info.index] if device.info.platform_index >= 0 else [])
    for spec in specs:
        np.testing.assert_array_equal(forward("gru", inputs, desc, spec)[0], base)
