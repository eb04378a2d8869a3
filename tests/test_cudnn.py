"""cuDNN dialect (API.md §3): ``cudnn_rnn``, ``cudnn_rnn_backprop``, the params conversions on
device arrays, dropout and validation.

Oracles, never the library's own output:

* ``tests/reference/cudnn_ref.py`` (independent float64 NumPy): forward, every gradient, lengths
  (incl. 0), projection, skip_input, explicit dropout masks;
* PyTorch float64 ``nn.RNN/LSTM/GRU`` (incl. ``proj_size`` and ``pack_padded_sequence``) mapped
  through semantics.md §4.3 (``torch_to_canonical``);
* central finite differences on the library itself (dropout with a fixed seed);
* a NumPy Philox4x32-10 written here from its definition, checked on Random123's known answers;
* closed forms (skip_input GRU: (1 - σ(1)) tanh(1), pitfalls A10b).

Pitfalls covered: bidirectional × layers × layout (A1, A2), distinct non-zero states per layer and
direction (A3), absent upstream gradients (A4), dropout forward = backward, p = 0 / 1, eval
(A5, A6), lengths incl. 0 and unsorted (A7–A9), ≥ 3 bidirectional layers (A16), projection
(A19), re-runnable backprop (A22), determinism (A23), backprop after eval (A24), sizes (A25).
Tolerances: float64 rel ≤ 1e-10; float32 rel ≤ 1e-5 forward, 1e-4 gradients.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import pyrnn_cl as rc
from helpers.compare import F32_TOL, F64_TOL
from helpers.cudnn import (
    H_,
    I_,
    N_,
    P_,
    T_,
    assert_rel,
    cast,
    fwd_bwd,
    poison_new_arrays,
    problem,
    rel,
    upstream,
)
from helpers.device import PER_STEP, needs_fp64, override_tuning
from pyrnn_cl.programs import get_program
from reference import cudnn_ref as ref
from reference import fd

HAS_TORCH = importlib.util.find_spec("torch") is not None
G = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}


# ---- PyTorch -----------------------------------------------------------------------------------

def _torch_module(mode, L, D, P, I, H, batch_first, seed):
    import torch

    torch.manual_seed(seed)
    common = dict(num_layers=L, bidirectional=D == 2, batch_first=batch_first,
                  dtype=torch.float64)
    if mode == "lstm":
        return torch.nn.LSTM(I, H, proj_size=P, **common)
    if mode == "gru":
        return torch.nn.GRU(I, H, **common)
    return torch.nn.RNN(I, H, nonlinearity=mode[4:], **common)


def _torch_to_canonical(m, G, grad=False):
    """semantics.md §4.3 mapping (on the parameters or their gradients)."""
    W, B = [], []
    for l in range(m.num_layers):
        for sfx in ([""] if not m.bidirectional else ["", "_reverse"]):
            def p(n, l=l, sfx=sfx):
                t = getattr(m, f"{n}_l{l}{sfx}")
                return (t.grad if grad else t).detach().numpy()
            W += list(np.split(p("weight_ih"), G)) + list(np.split(p("weight_hh"), G))
            if getattr(m, "proj_size", 0):
                W.append(p("weight_hr"))
            B += list(np.split(p("bias_ih"), G)) + list(np.split(p("bias_hh"), G))
    return W, B


def _torch_run(m, mode, x, h0, c0, up, lens=None, batch_first=False):
    """Outputs and gradients of PyTorch for loss Σ out⊙dy + Σ hn⊙dh + Σ cn⊙dc."""
    import torch
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    xt = torch.tensor(x, requires_grad=True)
    h0t = torch.tensor(h0, requires_grad=True)
    c0t = torch.tensor(c0, requires_grad=True) if c0 is not None else None
    inp = xt
    if lens is not None:
        inp = pack_padded_sequence(xt, torch.tensor(lens), batch_first=batch_first,
                                   enforce_sorted=False)
    hx = (h0t, c0t) if mode == "lstm" else h0t
    y, hn = m(inp, hx)
    if lens is not None:
        T = x.shape[1] if batch_first else x.shape[0]
        y, _ = pad_packed_sequence(y, batch_first=batch_first, total_length=T)
    hn, cn = (hn if mode == "lstm" else (hn, None))
    loss = 0
    for o, g in zip((y, hn, cn), up):
        if g is not None and o is not None:
            loss = loss + (o * torch.tensor(g)).sum()
    m.zero_grad()
    loss.backward()
    outs = [y.detach().numpy(), hn.detach().numpy(),
            cn.detach().numpy() if cn is not None else np.zeros(0)]
    gW, gB = _torch_to_canonical(m, G[mode], grad=True)
    grads = [xt.grad.numpy(), h0t.grad.numpy(),
             c0t.grad.numpy() if c0t is not None else np.zeros(0), gW, gB]
    return outs, grads


# ---- parity matrix -----------------------------------------------------------------------------

MATRIX = [(mode, L, D, tm) for mode in ("rnn_tanh", "rnn_relu", "lstm", "lstm_proj", "gru")
          for L in (1, 3) for D in (1, 2) for tm in (True, False)]


def _absent_for(index, lstm):
    """Which upstream gradients a matrix case leaves out (each subset shows up, pitfalls A4)."""
    patterns = [(), (0,), (1,), (2,), (0, 2), (1, 2), (0, 1)]
    pat = patterns[index % len(patterns)]
    if not lstm:
        pat = tuple(i for i in pat if i != 2)
        pat = (index % 2,) if pat == (0, 1) else pat
    return pat


@pytest.mark.parametrize("case", MATRIX, ids=[f"{m}-L{L}-D{D}-{'tm' if t else 'bm'}"
                                               for m, L, D, t in MATRIX])
def test_parity_float64(device, case):
    """Forward outputs and every gradient vs cudnn_ref, and vs PyTorch when installed."""
    needs_fp64(device)
    mode, L, D, tm = case
    P = P_ if mode == "lstm_proj" else 0
    mode = "lstm" if mode == "lstm_proj" else mode
    lstm = mode == "lstm"
    index = MATRIX.index(case)
    if HAS_TORCH:
        m = _torch_module(mode, L, D, P, I_, H_, not tm, seed=index)
        W, B = _torch_to_canonical(m, G[mode])
        kw = dict(rnn_mode=mode, num_proj=P, input_mode="linear_input",
                  direction="bidirectional" if D == 2 else "unidirectional")
        params = ref.canonical_to_params(L, H_, I_, W, B, **kw)
        x, h0, c0, _, _ = problem(mode, L, D, P, time_major=tm, seed=index)
    else:
        x, h0, c0, params, kw = problem(mode, L, D, P, time_major=tm, seed=index)
    K = P or H_
    seq = (T_, N_, D * K) if tm else (N_, T_, D * K)
    up = upstream([seq, h0.shape, c0.shape if lstm else None], _absent_for(index, lstm))
    out, grads = fwd_bwd(device, x, h0, c0, params, None, up, kw, time_major=tm)
    r_out = ref.cudnn_rnn_forward(x, h0, c0, params, time_major=tm, **kw)
    r_grads = ref.cudnn_rnn_backward(x, h0, c0, params, None, *up, time_major=tm, **kw)
    names = ("output", "output_h", "output_c")
    for i, name in enumerate(names):
        assert_rel(out[i], r_out[i], F64_TOL, f"{name} vs cudnn_ref")
    gnames = ("input_backprop", "input_h_backprop", "input_c_backprop", "params_backprop")
    for i, name in enumerate(gnames):
        assert_rel(grads[i], r_grads[i], F64_TOL, f"{name} vs cudnn_ref")
    if not lstm:
        assert out[2].shape == (0,) and grads[2].shape == (0,)
    if HAS_TORCH:
        t_out, t_grads = _torch_run(m, mode, x, h0, c0, up, batch_first=not tm)
        for i, name in enumerate(names):
            assert_rel(out[i], t_out[i], F64_TOL, f"{name} vs torch")
        for i, name in enumerate(gnames[:3]):
            assert_rel(grads[i], t_grads[i], F64_TOL, f"{name} vs torch")
        assert_rel(grads[3], ref.canonical_to_params(L, H_, I_, t_grads[3], t_grads[4], **kw),
                      F64_TOL, "params_backprop vs torch")


F32_CASES = [("lstm", 3, 2, True, 0), ("gru", 2, 2, False, 0), ("rnn_tanh", 2, 1, True, 0),
             ("lstm", 2, 2, False, P_)]


@pytest.mark.parametrize("mode,L,D,tm,P", F32_CASES)
def test_parity_float32(device, mode, L, D, tm, P):
    x, h0, c0, params, kw = problem(mode, L, D, P, time_major=tm, seed=7)
    lstm = mode == "lstm"
    seq = (T_, N_, D * (P or H_)) if tm else (N_, T_, D * (P or H_))
    up = upstream([seq, h0.shape, c0.shape if lstm else None], ())
    lens = np.array([5, 2, 4])
    out, grads = fwd_bwd(device, x, h0, c0, params, lens, up, kw, np.float32, time_major=tm)
    assert out[0].dtype == np.float32 and grads[3].dtype == np.float32
    assert out[3].dtype == np.float32 and out[4].dtype == np.int8
    r_out = ref.cudnn_rnn_forward(x, h0, c0, params, lens, time_major=tm, **kw)
    r_grads = ref.cudnn_rnn_backward(x, h0, c0, params, lens, *up, time_major=tm, **kw)
    for i in range(3):
        assert_rel(out[i], r_out[i], F32_TOL["forward"], f"forward output {i}")
    for i in range(4):
        assert_rel(grads[i], r_grads[i], F32_TOL["gradient"], f"gradient {i}")


def test_every_upstream_subset(device):
    """Backprop with any subset of (output, output_h, output_c) gradients absent (A4)."""
    needs_fp64(device)
    x, h0, c0, params, kw = problem("lstm", 2, 2, seed=3)
    out = rc.cudnn_rnn(x, h0, c0, params, device=device, **kw)
    full = upstream([out[0].shape, h0.shape, c0.shape], ())
    for mask in range(8):
        up = [g if mask >> i & 1 else None for i, g in enumerate(full)]
        g = rc.cudnn_rnn_backprop(x, h0, c0, params, None, *out[:3], *up, *out[3:],
                                  device=device, **kw)
        r = ref.cudnn_rnn_backward(x, h0, c0, params, None, *up, **kw)
        for i in range(4):
            assert_rel(g[i], r[i], F64_TOL, f"subset {mask:03b} gradient {i}")
        if mask == 0:
            assert all(not np.any(gi) for gi in g)


# ---- sequence lengths ----------------------------------------------------------------------------

def _fwd_bwd_vs_ref(device, x, h0, c0, params, lens, up, kw, tm, what):
    """Forward and backprop (float64) with ``lens`` and upstream gradients ``up``, each result
    checked against cudnn_ref; returns ``(outputs, gradients)``."""
    out, grads = fwd_bwd(device, x, h0, c0, params, lens, up, kw, time_major=tm)
    r_out = ref.cudnn_rnn_forward(x, h0, c0, params, lens, time_major=tm, **kw)
    r_grads = ref.cudnn_rnn_backward(x, h0, c0, params, lens, *up, time_major=tm, **kw)
    for i in range(3):
        assert_rel(out[i], r_out[i], F64_TOL, f"{what}: output {i}")
    for i in range(4):
        assert_rel(grads[i], r_grads[i], F64_TOL, f"{what}: gradient {i}")
    return out, grads



@pytest.mark.parametrize("mode,D,tm", [("lstm", 2, True), ("gru", 2, False), ("rnn_relu", 1, True),
                                       ("lstm_proj", 2, False)])
def test_lengths(device, mode, D, tm):
    """Unsorted lengths incl. 0 and T vs cudnn_ref; without 0, packed-sequence parity with torch:
    zeros past each length, final state at each row's own end, zero gradients past length."""
    needs_fp64(device)
    P = P_ if mode == "lstm_proj" else 0
    mode = "lstm" if mode == "lstm_proj" else mode
    lstm = mode == "lstm"
    L, N = 2, 4
    for lens, dtype in ((np.array([3, 0, 5, 1]), np.int64), (np.array([2, 5, 1, 4]), np.int32)):
        lens = lens.astype(dtype)
        if HAS_TORCH and 0 not in lens:
            m = _torch_module(mode, L, D, P, I_, H_, not tm, seed=11)
            W, B = _torch_to_canonical(m, G[mode])
            x, h0, c0, _, kw = problem(mode, L, D, P, N=N, time_major=tm, seed=5)
            params = ref.canonical_to_params(L, H_, I_, W, B, **kw)
        else:
            x, h0, c0, params, kw = problem(mode, L, D, P, N=N, time_major=tm, seed=5)
        seq = (T_, N, D * (P or H_)) if tm else (N, T_, D * (P or H_))
        up = upstream([seq, h0.shape, c0.shape if lstm else None], ())
        out, grads = _fwd_bwd_vs_ref(device, x, h0, c0, params, lens, up, kw, tm, f"lens {lens}")
        # direct checks of the semantics, independent of any oracle
        y = out[0] if tm else out[0].transpose(1, 0, 2)
        dx = grads[0] if tm else grads[0].transpose(1, 0, 2)
        for n, ln in enumerate(lens):
            assert not np.any(y[ln:, n]) and not np.any(dx[ln:, n])
            if ln == 0:
                np.testing.assert_array_equal(out[1][:, n], h0[:, n])
        if HAS_TORCH and 0 not in lens:
            t_out, t_grads = _torch_run(m, mode, x, h0, c0, up, lens=lens, batch_first=not tm)
            for i in range(3):
                assert_rel(out[i], t_out[i], F64_TOL, f"output {i} vs torch packed")
            for i in range(3):
                assert_rel(grads[i], t_grads[i], F64_TOL, f"gradient {i} vs torch packed")
            assert_rel(grads[3], ref.canonical_to_params(L, H_, I_, t_grads[3], t_grads[4],
                                                            **kw), F64_TOL, "params vs torch")


@pytest.mark.parametrize("ks", [4, 32])
@pytest.mark.parametrize("mode", ["lstm_proj", "gru", "rnn_tanh"])
def test_split_products(device, monkeypatch, mode, ks):
    """Every step kernel with its products split over REC_KS work-items (a GPU's default):
    the projection's forward and backward kernels, the reset-after GRU's hn product, lengths
    with a 0 and bidirectional layers give cudnn_ref's answer."""
    needs_fp64(device)
    override_tuning(device, monkeypatch, REC_KS=ks, REC_NB=2, REC_VW=2, REC_VW_F64=2,
                    **PER_STEP)
    P = P_ if mode == "lstm_proj" else 0
    mode = "lstm" if mode == "lstm_proj" else mode
    L, D, N = 2, 2, 5
    x, h0, c0, params, kw = problem(mode, L, D, P, N=N, time_major=True, seed=ks)
    lens = np.array([3, 0, 5, 1, 4])
    up = upstream([(T_, N, D * (P or H_)), h0.shape, c0.shape if mode == "lstm" else None], ())
    _fwd_bwd_vs_ref(device, x, h0, c0, params, lens, up, kw, True, f"REC_KS={ks}")


def test_output_backprop_ignored_past_length(device):
    needs_fp64(device)
    x, h0, c0, params, kw = problem("gru", 2, 2, seed=2)
    lens = np.array([2, 5, 0])
    out = rc.cudnn_rnn(x, h0, None, params, lens, device=device, **kw)
    dy = np.random.default_rng(0).standard_normal(out[0].shape)
    dy2 = dy.copy()
    for n, ln in enumerate(lens):
        dy2[ln:, n] = 1e3
    g1 = rc.cudnn_rnn_backprop(x, h0, None, params, lens, *out[:3], dy, None, None, *out[3:],
                               device=device, **kw)
    g2 = rc.cudnn_rnn_backprop(x, h0, None, params, lens, *out[:3], dy2, None, None, *out[3:],
                               device=device, **kw)
    for a, b in zip(g1, g2):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("T,N", [(0, 3), (5, 0), (0, 0)])
def test_degenerate_sizes(device, T, N):
    """T = 0 / N = 0: empty outputs, final state = initial state, pass-through state grads."""
    needs_fp64(device)
    x, h0, c0, params, kw = problem("lstm", 2, 2, T=T, N=N, seed=4)
    out = rc.cudnn_rnn(x, h0, c0, params, np.zeros(N, np.int32), device=device, **kw)
    assert out[0].shape == (T, N, 2 * H_)
    np.testing.assert_array_equal(out[1], h0)
    np.testing.assert_array_equal(out[2], c0)
    assert out[3].size == rc.cudnn_rnn_reserve_space_size(2, H_, I_, T, N, **kw) == 0
    dh, dc = np.ones_like(h0) * 2, np.ones_like(c0) * 3
    g = rc.cudnn_rnn_backprop(x, h0, c0, params, None, *out[:3], np.ones(out[0].shape), dh, dc,
                              *out[3:], device=device, **kw)
    assert g[0].shape == x.shape
    np.testing.assert_array_equal(g[1], dh)
    np.testing.assert_array_equal(g[2], dc)
    assert g[3].shape == params.shape and not np.any(g[3])


# ---- skip_input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("input_mode", ["skip_input", "auto_select"])
def test_skip_input_closed_form(device, input_mode):
    """GRU, all params 0, x = 1, h0 = 0 -> (1 - σ(1)) tanh(1) = 0.2048242 (pitfalls A10b)."""
    H = 4
    kw = dict(rnn_mode="gru", input_mode=input_mode)
    n = rc.cudnn_rnn_params_size(1, H, H, **kw)
    assert n == 2 * 3 * H + 3 * H * H                 # no input matrices, biases kept
    out = rc.cudnn_rnn(np.ones((1, 2, H), np.float32), np.zeros((1, 2, H), np.float32), None,
                       np.zeros(n, np.float32), device=device, **kw)
    want = (1 - 1 / (1 + np.exp(-1.0))) * np.tanh(1.0)
    assert abs(want - 0.2048242) < 1e-7
    np.testing.assert_allclose(out[0], want, rtol=1e-6)
    np.testing.assert_allclose(out[1], want, rtol=1e-6)


@pytest.mark.parametrize("mode,D", [("lstm", 2), ("rnn_tanh", 1)])
def test_skip_input_gradients(device, mode, D):
    needs_fp64(device)
    x, h0, c0, params, kw = problem(mode, 2, D, I=H_, input_mode="skip_input", seed=6)
    up = upstream([(T_, N_, D * H_), h0.shape, c0.shape if c0 is not None else None], ())
    out, grads = fwd_bwd(device, x, h0, c0, params, np.array([5, 3, 1]), up, kw)
    r_out = ref.cudnn_rnn_forward(x, h0, c0, params, np.array([5, 3, 1]), **kw)
    r_grads = ref.cudnn_rnn_backward(x, h0, c0, params, np.array([5, 3, 1]), *up, **kw)
    for i in range(3):
        assert_rel(out[i], r_out[i], F64_TOL, f"output {i}")
    for i in range(4):
        assert_rel(grads[i], r_grads[i], F64_TOL, f"gradient {i}")


# ---- dropout -------------------------------------------------------------------------------------

_M32 = np.uint64(0xFFFFFFFF)


def _philox_np(ctr, key):
    """Philox4x32-10 (Salmon et al., SC'11) in NumPy: ``ctr`` [n, 4] uint32, key (k0, k1)."""
    x = [ctr[:, i].astype(np.uint64) for i in range(4)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(0x9E3779B9)) & _M32, (k1 + np.uint64(0xBB67AE85)) & _M32
        p0, p1 = np.uint64(0xD2511F53) * x[0], np.uint64(0xCD9E8D57) * x[2]
        x = [(p1 >> np.uint64(32)) ^ x[1] ^ k0, p1 & _M32, (p0 >> np.uint64(32)) ^ x[3] ^ k1,
             p0 & _M32]
    return np.stack(x, axis=1).astype(np.uint32)


KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
       ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
       ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


def _np_mask(layer, T, N, W, p, seed, seed2):
    """The documented mask (cl/dropout.cl) from the NumPy Philox."""
    t, n, u = np.meshgrid(np.arange(T), np.arange(N), np.arange(W), indexing="ij")
    ctr = np.stack([u.ravel() // 4, n.ravel(), t.ravel(), np.full(u.size, layer)], 1)
    words = _philox_np(ctr.astype(np.uint32), (seed & 0xFFFFFFFF, seed2 & 0xFFFFFFFF))
    word = words[np.arange(u.size), u.ravel() % 4].astype(np.uint64)
    keep = word >= np.uint64(min(1 << 32, int(np.ceil(p * 2.0 ** 32))))
    return np.where(keep, 1.0 / (1.0 - p) if p < 1 else 0.0, 0.0).reshape(T, N, W)


def test_philox_known_answers(device):
    """The device generator and the NumPy one give Random123's known-answer vectors."""
    prog = get_program(device, "dropout.cl", {"PYRNN_DTYPE": 1})
    for ctr, key, want in KAT:
        np.testing.assert_array_equal(_philox_np(np.array([ctr], np.uint32), key)[0], want)
        c = cla.to_device(device.queue, np.array([ctr], np.uint32))
        o = cla.empty(device.queue, (4,), np.uint32)
        knl = prog.kernel("pyrnn_philox")
        knl.set_args(o.data, c.data, np.uint32(key[0]), np.uint32(key[1]))
        from pyrnn_cl.programs import enqueue
        enqueue(device.queue, knl, (1,))
        np.testing.assert_array_equal(o.get(), want)


def _drop_kw(**kw):
    return dict(dict(dropout=0.4, seed=12345, seed2=-7), **kw)


def test_dropout_matches_documented_mask(device):
    """Forward and backprop equal cudnn_ref with the masks of the documented generator (so
    backprop uses the very mask of the forward, A5), bidirectional, 3 layers, batch-major."""
    needs_fp64(device)
    x, h0, c0, params, kw = problem("lstm", 3, 2, time_major=False, seed=8)
    lens = np.array([5, 4, 2])
    dk = _drop_kw()
    masks = [_np_mask(l, T_, N_, 2 * H_, dk["dropout"], dk["seed"], dk["seed2"])
             for l in range(2)]
    assert 0.3 < np.mean(masks[0] == 0) < 0.5
    up = upstream([(N_, T_, 2 * H_), h0.shape, c0.shape], ())
    out, grads = fwd_bwd(device, x, h0, c0, params, lens, up, kw, time_major=False, **dk)
    r_out = ref.cudnn_rnn_forward(x, h0, c0, params, lens, time_major=False, dropout_masks=masks,
                                  **kw)
    r_grads = ref.cudnn_rnn_backward(x, h0, c0, params, lens, *up, time_major=False,
                                     dropout_masks=masks, **kw)
    for i in range(3):
        assert_rel(out[i], r_out[i], F64_TOL, f"output {i}")
    for i in range(4):
        assert_rel(grads[i], r_grads[i], F64_TOL, f"gradient {i}")
    plain = ref.cudnn_rnn_forward(x, h0, c0, params, lens, time_major=False, **kw)
    assert rel(out[0], plain[0]) > 1e-3          # dropout did something


def test_dropout_determinism_and_seeds(device):
    """Same seeds -> bitwise-equal forward and backprop; either seed changed -> other mask."""
    x, h0, c0, params, kw = problem("gru", 2, 1, seed=9)
    x, h0, params = cast(np.float32, x, h0, params)
    up = upstream([(T_, N_, H_), h0.shape, None], ())
    a_out, a_g = fwd_bwd(device, x, h0, None, params, None, up, kw, np.float32, **_drop_kw())
    b_out, b_g = fwd_bwd(device, x, h0, None, params, None, up, kw, np.float32, **_drop_kw())
    for a, b in zip(list(a_out) + list(a_g), list(b_out) + list(b_g)):
        np.testing.assert_array_equal(a, b)
    for change in (dict(seed=12346), dict(seed2=-8)):
        c_out = rc.cudnn_rnn(x, h0, None, params, device=device, **kw, **_drop_kw(**change))
        assert not np.array_equal(c_out[0], a_out[0])


def test_dropout_no_effect_cases(device):
    """p = 0, eval mode and a single layer: dropout changes nothing (A5, A6)."""
    x, h0, c0, params, kw = problem("lstm", 2, 2, seed=10)
    x, h0, c0, params = cast(np.float32, x, h0, c0, params)
    plain = rc.cudnn_rnn(x, h0, c0, params, device=device, **kw)
    zero = rc.cudnn_rnn(x, h0, c0, params, device=device, **kw, **_drop_kw(dropout=0.0))
    evaluation = rc.cudnn_rnn(x, h0, c0, params, device=device, is_training=False, **kw,
                              **_drop_kw())
    for i in range(3):
        np.testing.assert_array_equal(zero[i], plain[i])
        np.testing.assert_array_equal(evaluation[i], plain[i])
    assert evaluation[3].size == 0 and evaluation[4].size == 0
    x1, h1, c1, p1, kw1 = problem("lstm", 1, 2, seed=10)
    x1, h1, c1, p1 = cast(np.float32, x1, h1, c1, p1)
    one = rc.cudnn_rnn(x1, h1, c1, p1, device=device, **kw1)
    one_d = rc.cudnn_rnn(x1, h1, c1, p1, device=device, **kw1, **_drop_kw(dropout=0.9))
    for i in range(4):
        np.testing.assert_array_equal(one_d[i], one[i])


def test_dropout_finite_differences(device):
    """Gradients with dropout (seed fixed, so the mask is fixed) vs central differences."""
    needs_fp64(device)
    x, h0, c0, params, kw = problem("lstm", 2, 2, T=4, N=2, I=3, seed=12)
    lens = np.array([4, 3])
    dk = _drop_kw(dropout=0.5)
    inputs = {"x": x, "h0": h0, "c0": c0, "params": params}

    def forward(v):
        return rc.cudnn_rnn(v["x"], v["h0"], v["c0"], v["params"], lens, device=device,
                            **kw, **dk)[:3]

    def gradients(up):
        v = inputs
        out = rc.cudnn_rnn(v["x"], v["h0"], v["c0"], v["params"], lens, device=device, **kw,
                           **dk)
        g = rc.cudnn_rnn_backprop(v["x"], v["h0"], v["c0"], v["params"], lens, *out[:3], *up,
                                  *out[3:], device=device, **kw, **dk)
        return dict(zip(("x", "h0", "c0", "params"), g))

    fd.check_gradients(forward, inputs, gradients, tol=1e-7, directions=12)


def test_dropout_keep_rate_and_p1(device):
    """Keep rate ≈ 1 - p on a large tensor; p = 1 gives finite outputs, and the layer above
    sees zeros (vs cudnn_ref with all-zero masks)."""
    from pyrnn_cl.cudnn import cudnn_dropout_mask

    for p in (0.1, 0.5, 0.8):
        m = cudnn_dropout_mask((64, 32, 64), 1, p, seed=3, seed2=4, device=device)
        kept = m != 0
        n = m.size
        assert abs(kept.mean() - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n)
        np.testing.assert_allclose(m[kept], 1 / (1 - p), rtol=1e-6)
    small = cudnn_dropout_mask((T_, N_, 5), 2, 0.3, seed=-1, seed2=2 ** 40 + 5, device=device)
    want = _np_mask(2, T_, N_, 5, 0.3, -1, 2 ** 40 + 5)
    np.testing.assert_array_equal(small == 0, want == 0)
    np.testing.assert_allclose(small, want, rtol=1e-7)
    x, h0, c0, params, kw = problem("gru", 3, 2, seed=13)
    x, h0, params = cast(np.float32, x, h0, params)
    up = upstream([(T_, N_, 2 * H_), h0.shape, None], ())
    out, grads = fwd_bwd(device, x, h0, None, params, None, up, kw, np.float32,
                      **_drop_kw(dropout=1.0))
    zeros = [np.zeros((T_, N_, 2 * H_))] * 2
    r_out = ref.cudnn_rnn_forward(x, h0, None, params, dropout_masks=zeros, **kw)
    r_grads = ref.cudnn_rnn_backward(x, h0, None, params, None, *up, dropout_masks=zeros, **kw)
    for a in list(out[:2]) + list(grads):
        assert np.all(np.isfinite(a))
    for i in range(2):
        assert_rel(out[i], r_out[i], F32_TOL["forward"], f"p=1 output {i}")
    for i in (0, 1, 3):
        assert_rel(grads[i], r_grads[i], F32_TOL["gradient"], f"p=1 gradient {i}")


# ---- reserve space, determinism, array kinds -----------------------------------------------------

def test_reserve_space_and_repeated_backprop(device):
    """Reserve size known up front; backprop twice gives identical results and leaves the
    reserve unchanged (A22); backprop after an eval forward raises (A24)."""
    x, h0, c0, params, kw = problem("lstm", 3, 2, P=P_, seed=14)
    x, h0, c0, params = cast(np.float32, x, h0, c0, params)
    out = rc.cudnn_rnn(x, h0, c0, params, device=device, **kw)
    n = rc.cudnn_rnn_reserve_space_size(3, H_, I_, T_, N_, **kw)
    rows = T_ * N_ * 2

    def padded(layers):      # parts in order, each starting at a multiple of 256 elements
        pos = 0
        for widths in layers:
            for w in widths:
                pos = -(-pos // 256) * 256 + rows * w
        return pos

    assert out[3].shape == (n,) and n == padded([[4 * H_, P_, H_, H_]] * 3)
    assert rc.cudnn_rnn_reserve_space_size(3, H_, I_, T_, N_, dropout=0.5, **kw) == padded(
        [[4 * H_, P_, H_, H_]] + [[4 * H_, P_, H_, H_, P_]] * 2)     # + dropped inputs
    assert rc.cudnn_rnn_reserve_space_size(3, H_, I_, T_, N_, is_training=False, **kw) == 0
    assert out[4].dtype == np.int8 and out[4].ndim == 1
    saved = out[3].copy()
    up = upstream([out[0].shape, h0.shape, c0.shape], ())
    up = cast(np.float32, *up)
    g1 = rc.cudnn_rnn_backprop(x, h0, c0, params, None, *out[:3], *up, *out[3:], device=device,
                               **kw)
    g2 = rc.cudnn_rnn_backprop(x, h0, c0, params, None, *out[:3], *up, *out[3:], device=device,
                               **kw)
    for a, b in zip(g1, g2):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(out[3], saved)
    ev = rc.cudnn_rnn(x, h0, c0, params, device=device, is_training=False, **kw)
    with pytest.raises(ValueError, match="is_training=False"):
        rc.cudnn_rnn_backprop(x, h0, c0, params, None, *ev[:3], *up, *ev[3:], device=device,
                              **kw)
    with pytest.raises(ValueError, match="host_reserved"):     # another seed than the forward
        d = rc.cudnn_rnn(x, h0, c0, params, device=device, **kw, **_drop_kw())
        rc.cudnn_rnn_backprop(x, h0, c0, params, None, *d[:3], *up, *d[3:], device=device,
                              **kw, **_drop_kw(seed=1))
    with pytest.raises(rc.ShapeError, match="reserve_space"):
        rc.cudnn_rnn_backprop(x, h0, c0, params, None, *out[:3], *up, out[3][:-1], out[4],
                              device=device, **kw)


def test_device_arrays(device):
    """Device arrays in -> device arrays out (no host round trip), same numbers as NumPy in;
    the params conversions on device arrays are exact inverses."""
    x, h0, c0, params, kw = problem("gru", 2, 2, time_major=False, seed=15)
    x, h0, params = cast(np.float32, x, h0, params)
    q = device.queue
    host_out = rc.cudnn_rnn(x, h0, None, params, np.array([5, 1, 3]), device=device,
                            time_major=False, **kw)
    d = [cla.to_device(q, a) for a in (x, h0, params)]
    dev_out = rc.cudnn_rnn(d[0], d[1], None, d[2], np.array([5, 1, 3]), time_major=False, **kw)
    assert all(isinstance(a, cla.Array) for a in dev_out)
    for a, b in zip(dev_out, host_out):
        np.testing.assert_array_equal(a.get(), b)
    up = cast(np.float32, *upstream([host_out[0].shape, h0.shape], ()))
    g_host = rc.cudnn_rnn_backprop(x, h0, None, params, np.array([5, 1, 3]), *host_out[:3], *up,
                                   None, *host_out[3:], device=device, time_major=False, **kw)
    g_dev = rc.cudnn_rnn_backprop(*d[:2], None, d[2], np.array([5, 1, 3]), *dev_out[:3],
                                  *[cla.to_device(q, u) for u in up], None, *dev_out[3:],
                                  time_major=False, **kw)
    for a, b in zip(g_dev, g_host):
        assert isinstance(a, cla.Array)
        np.testing.assert_array_equal(a.get(), b)
    conv = dict(kw, num_proj=0)
    w, b = rc.cudnn_rnn_params_to_canonical(2, H_, I_, d[2], **conv)
    assert all(isinstance(a, cla.Array) for a in w + b)
    wr, br = ref.params_to_canonical(2, H_, I_, params, **conv)
    for a, r in zip(w + b, wr + br):
        np.testing.assert_array_equal(a.get(), r)
    back = rc.cudnn_rnn_canonical_to_params(2, H_, I_, w, b, **conv)
    assert isinstance(back, cla.Array)
    np.testing.assert_array_equal(back.get(), params)


@pytest.mark.parametrize("mode,L,D,P,tm,drop", [
    ("lstm", 2, 2, 0, True, 0.4), ("lstm", 2, 1, 2, False, 0.0), ("gru", 3, 2, 0, False, 0.3),
    ("rnn_relu", 1, 1, 0, True, 0.0)])
def test_prepared_backprop_equals_backprop(device, monkeypatch, mode, L, D, P, tm, drop):
    """``_prepare_backprop`` (what the torch bridge runs while its training forward computes)
    then ``_run_backprop`` give ``cudnn_rnn_backprop``'s results bit for bit, with lengths,
    dropout and every upstream gradient, and every new array of the ops poisoned with NaN; a
    plan runs once, and its upstream gradients are checked as the one-call op checks them."""
    poison_new_arrays(monkeypatch)
    x, h0, c0, params, kw = problem(mode, L, D, P, time_major=tm, seed=23)
    kw = dict(kw, dropout=drop, seed=5, seed2=7, time_major=tm)
    q = device.queue
    x, h0, c0, params = (None if a is None else cla.to_device(q, a.astype(np.float32))
                         for a in (x, h0, c0, params))
    lens = np.array([T_, 1, T_ - 2, 0, 3][:N_])
    out = rc.cudnn_rnn(x, h0, c0, params, lens, **kw)
    up = [cla.to_device(q, a.astype(np.float32)) for a in
          upstream([out[0].shape, out[1].shape] + ([out[2].shape] if c0 is not None else []),
                   ())]
    up += [None] * (3 - len(up))
    want = rc.cudnn_rnn_backprop(x, h0, c0, params, lens, *out[:3], *up, *out[3:], **kw)
    plan = rc.cudnn._prepare_backprop(x, h0, c0, params, lens, out[3], out[4], **kw)
    got = rc.cudnn._run_backprop(plan, *up)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.get(), b.get())
    with pytest.raises(RuntimeError, match="runs once"):
        rc.cudnn._run_backprop(plan, *up)
    plan = rc.cudnn._prepare_backprop(x, h0, c0, params, lens, out[3], out[4], **kw)
    with pytest.raises(TypeError, match="output_backprop: got dtype float64"):
        rc.cudnn._run_backprop(plan, cla.to_device(q, up[0].get().astype(np.float64)), *up[1:])
    wrong = cla.zeros(q, (L * D, N_ + 1, P or H_), np.float32)
    with pytest.raises(ValueError, match="output_h_backprop: got shape"):
        rc.cudnn._run_backprop(plan, up[0], wrong, up[2])
    got = rc.cudnn._run_backprop(plan, *up)          # (a refused call leaves the plan usable)
    np.testing.assert_array_equal(got[3].get(), want[3].get())


def test_device_host_reserved_checked_without_a_read(device, monkeypatch):
    """The device ``host_reserved`` of a forward holds the NumPy forward's values and is made
    without a queue command. A backprop given it checks it from the values
    kept at the forward, without reading it back (a blocking read would stall the host until
    the forward ends); a device array of other values is read and refused, and one of ours
    from a forward with another seed is refused from its kept values."""
    x, h0, c0, params, kw = problem("gru", 2, 1, seed=19)
    kw = dict(kw, dropout=0.5, seed=3)
    host_x, host_h0, host_params = cast(np.float32, x, h0, params)
    x, h0, params = (cla.to_device(device.queue, a) for a in (host_x, host_h0, host_params))
    writes = []
    real_copy = cl.enqueue_copy
    monkeypatch.setattr(cl, "enqueue_copy", lambda *a, **k: (writes.append(a[1:3]),
                                                             real_copy(*a, **k))[1])
    out = rc.cudnn_rnn(x, h0, None, params, **kw)
    # host_reserved holds the NumPy forward's values, copied when its buffer was made (no
    # queue command: none of the forward's copies reads host memory)
    assert not any(isinstance(src, np.ndarray) for _, src in writes)
    monkeypatch.setattr(cl, "enqueue_copy", real_copy)
    np.testing.assert_array_equal(
        out[4].get(), rc.cudnn_rnn(host_x, host_h0, None, host_params, **kw)[4])
    reads = []
    cudnn_module = importlib.import_module("pyrnn_cl.cudnn")
    real_read = cudnn_module.to_host
    monkeypatch.setattr(cudnn_module, "to_host", lambda a: (reads.append(a.dtype),
                                                            real_read(a))[1])
    rc.cudnn_rnn_backprop(x, h0, None, params, None, *out[:3], *out[:2], None, *out[3:], **kw)
    assert np.dtype(np.int8) not in reads
    foreign = cla.to_device(device.queue, np.zeros(out[4].shape, np.int8))
    with pytest.raises(ValueError, match="host_reserved: does not match"):
        rc.cudnn_rnn_backprop(x, h0, None, params, None, *out[:3], *out[:2], None, out[3],
                              foreign, **kw)
    assert np.dtype(np.int8) in reads
    other = rc.cudnn_rnn(x, h0, None, params, **dict(kw, seed=7))[4]
    with pytest.raises(ValueError, match="host_reserved: does not match"):
        rc.cudnn_rnn_backprop(x, h0, None, params, None, *out[:3], *out[:2], None, out[3],
                              other, **kw)


@pytest.mark.parametrize("mode,L,D,P", [("lstm", 2, 2, 0), ("gru", 2, 1, 0),
                                         ("lstm", 1, 2, 3), ("rnn_tanh", 3, 1, 0)])
def test_every_result_element_written(device, monkeypatch, mode, L, D, P):
    """Results and their parts are made without zero fills where the layers write them whole
    (the initial-state gradients): with every new array of an op poisoned with NaN, forward and
    backprop give exactly the numbers of a normal run (lengths, every upstream gradient)."""
    x, h0, c0, params, kw = problem(mode, L, D, P, seed=23)
    lens = np.array([T_, 1, T_ - 2, 3, T_][:N_])
    up = upstream([(T_, N_, D * (P or H_)), (L * D, N_, P or H_),
                   (L * D, N_, H_) if mode == "lstm" else None], ())
    want = fwd_bwd(device, x, h0, c0, params, lens, up, kw, np.float32)
    poison_new_arrays(monkeypatch)
    got = fwd_bwd(device, x, h0, c0, params, lens, up, kw, np.float32)
    for g, w in zip(got[0][:4] + got[1], want[0][:4] + want[1]):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_biases_read_where_they_lie(device, monkeypatch, mode):
    """float32 params: the input-side bias is added by the input GEMM from its place in
    ``params`` and the hidden-side bias read there by the recurrence kernels (direction ``d``
    one pseudo-layer further), so a forward gathers nothing (no ``pyrnn_copy3``); the backward
    gathers nothing either (a reset-after GRU reads b_h in place to rebuild hn; an LSTM layer's
    second bias gradient is one copy3 of its first), and the numbers match the reference."""
    x, h0, c0, params, kw = problem(mode, 2, 2, seed=29)
    x, h0, c0, params = cast(np.float32, x, h0, c0, params)
    up = cast(np.float32, *upstream([(T_, N_, 2 * H_), (4, N_, H_),
                                     (4, N_, H_) if mode == "lstm" else None], ()))
    d = [None if a is None else cla.to_device(device.queue, a) for a in (x, h0, c0, params)]
    names = []
    real = cl.enqueue_nd_range_kernel
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel",
                        lambda q, k, *a, **kw_: (names.append(k.function_name),
                                                 real(q, k, *a, **kw_))[1])
    out = rc.cudnn_rnn(*d, **kw)
    fwd_names, names[:] = list(names), []
    grads = rc.cudnn_rnn_backprop(*d, None, *out[:3],
                                  *[None if u is None else cla.to_device(device.queue, u)
                                    for u in up], *out[3:], **kw)
    assert "pyrnn_copy3" not in fwd_names, fwd_names
    assert names.count("pyrnn_copy3") == (2 if mode == "lstm" else 0), names   # 2 layers
    want = ref.cudnn_rnn_backward(x, h0, c0, params, None, *up, **kw)
    for g, w in zip(grads, want):
        if w is not None:
            assert_rel(g.get(), w, F32_TOL["gradient"], "backprop")
    for a, w in zip(out[:3], ref.cudnn_rnn_forward(x, h0, c0, params, None, **kw)):
        if w is not None:
            assert_rel(a.get(), w, F32_TOL["forward"], "forward")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("mode", ["rnn_tanh", "rnn_relu", "lstm", "gru"])
def test_input_product_in_the_sequence_kernel(device, monkeypatch, mode, dtype):
    """Small layers (input width a multiple of the vector width, packs within
    ``REC_SEQ_BYTES``) compute ``x W_l^T + bW`` inside the whole-sequence kernel, reading
    ``W_l`` and ``bW`` in ``params`` in place: the forward launches no GEMM and gathers nothing
    (on a device without whole-sequence kernels, the GEMM runs). Two bidirectional layers (the
    second reads the first's output in the reserve space), batch-major, lengths, every
    upstream gradient: forward and backprop against the reference, and against PyTorch."""
    if dtype == np.float64:
        needs_fp64(device)
    L, D, H, I = 2, 2, 16, 32                    # the second layer's input: D * H = I
    x, h0, c0, params, kw = problem(mode, L, D, I=I, H=H, time_major=False, seed=41)
    lstm = mode == "lstm"
    lens = np.array([T_, 1, T_ - 2])
    up = upstream([(N_, T_, D * H), h0.shape, c0.shape if lstm else None], ())
    names = []
    real = cl.enqueue_nd_range_kernel
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel",
                        lambda q, k, *a, **kw_: (names.append(k.function_name),
                                                 real(q, k, *a, **kw_))[1])
    xs, h0s, c0s, ps = cast(dtype, x, h0, c0, params)
    out = rc.cudnn_rnn(xs, h0s, c0s, ps, lens, time_major=False, device=device, **kw)
    fwd_names = list(names)
    grads = rc.cudnn_rnn_backprop(xs, h0s, c0s, ps, lens, *out[:3], *cast(dtype, *up), *out[3:],
                                  time_major=False, device=device, **kw)
    seq_bytes = int(device.tuning("recurrence").get("REC_SEQ_BYTES", 0))
    in_kernel = 0 < G[mode] * H * I * np.dtype(dtype).itemsize <= seq_bytes
    gemms = [n for n in fwd_names if n.startswith("pyrnn_gemm")]
    assert (not gemms) == in_kernel, fwd_names
    # copies: the batch-major source and output transposed, nothing gathered
    assert fwd_names.count("pyrnn_copy3") == 2, fwd_names
    tol = F64_TOL if dtype == np.float64 else F32_TOL["forward"]
    gtol = F64_TOL if dtype == np.float64 else F32_TOL["gradient"]
    want = ref.cudnn_rnn_forward(x, h0, c0, params, lens, time_major=False, **kw)
    for i in range(3 if lstm else 2):
        assert_rel(out[i], want[i], tol, f"output {i}")
    want = ref.cudnn_rnn_backward(x, h0, c0, params, lens, *up, time_major=False, **kw)
    for i in range(4 if lstm else 2):
        assert_rel(grads[i], want[i], gtol, f"gradient {i}")
    assert_rel(grads[3], want[3], gtol, "params gradient")
    if HAS_TORCH:
        m = _torch_module(mode, L, D, 0, I, H, True, seed=41)
        W, B = _torch_to_canonical(m, G[mode])
        params = ref.canonical_to_params(L, H, I, W, B, **kw)
        xs, h0s, c0s, ps = cast(dtype, x, h0, c0, params)
        out = rc.cudnn_rnn(xs, h0s, c0s, ps, lens, time_major=False, device=device, **kw)
        t_out, _ = _torch_run(m, mode, x, h0, c0, up, lens, batch_first=True)
        for i in range(3 if lstm else 2):
            assert_rel(out[i], t_out[i], tol, f"output {i} vs torch")


@pytest.mark.oclgrind
def test_input_product_in_the_sequence_kernel_whole_sequence(device, monkeypatch):
    """The case above for a float32 LSTM with whole-sequence kernels on (Oclgrind's profile
    runs per step): the input bias read in params by the kernel."""
    override_tuning(device, monkeypatch, REC_SEQ_BYTES=1 << 20)
    test_input_product_in_the_sequence_kernel(device, monkeypatch, "lstm", np.float32)


def test_inputs_not_modified(device):
    needs_fp64(device)
    x, h0, c0, params, kw = problem("lstm", 2, 2, seed=16)
    copies = [a.copy() for a in (x, h0, c0, params)]
    out = rc.cudnn_rnn(x, h0, c0, params, device=device, **kw, **_drop_kw())
    up = upstream([out[0].shape, h0.shape, c0.shape], ())
    upc = [u.copy() for u in up]
    rc.cudnn_rnn_backprop(x, h0, c0, params, None, *out[:3], *up, *out[3:], device=device, **kw,
                          **_drop_kw())
    for a, b in zip([x, h0, c0, params] + up, copies + upc):
        np.testing.assert_array_equal(a, b)


# ---- validation ----------------------------------------------------------------------------------

def _bad_calls():
    x, h0, c0, params, kw = problem("lstm", 2, 1, seed=17)
    x, h0, c0, params = cast(np.float32, x, h0, c0, params)
    g_x, g_h0, _, g_params, g_kw = problem("gru", 1, 1, seed=17)
    g_x, g_h0, g_params = cast(np.float32, g_x, g_h0, g_params)
    cases = [
        (dict(rnn_mode="lstmx"), ValueError, "rnn_mode"),
        (dict(input_mode="skip"), ValueError, "input_mode"),
        (dict(direction="both"), ValueError, "direction"),
        (dict(dropout=1.5), ValueError, "dropout"),
        (dict(dropout=-0.1), ValueError, "dropout"),
        (dict(seed=1.5), TypeError, "seed"),
        (dict(input_mode="skip_input"), ValueError, "input_size == num_units"),
        (dict(params=params[:-1]), rc.ShapeError, r"params: got .* expected"),
        (dict(params=params.reshape(1, -1)), rc.ShapeError, "params"),
        (dict(input_h=h0[:, :2]), rc.ShapeError, "input_h"),
        (dict(input_h=h0[:1]), rc.ShapeError, "input_[hc]"),
        (dict(input_c=c0[..., :3]), rc.ShapeError, "input_c"),
        (dict(input_c=None), ValueError, "input_c"),
        (dict(input=x[0]), rc.ShapeError, "input"),
        (dict(sequence_lengths=np.array([1, 2])), rc.ShapeError, "sequence_lengths"),
        (dict(sequence_lengths=np.array([1, 2, 6])), ValueError, "sequence_lengths"),
        (dict(sequence_lengths=np.array([1, -1, 2])), ValueError, "sequence_lengths"),
        (dict(sequence_lengths=np.array([1.0, 2.0, 2.0])), TypeError, "sequence_lengths"),
        (dict(num_proj=2), rc.ShapeError, "input_h"),
        (dict(num_proj=H_, input_h=np.zeros((2, N_, H_), np.float32)), ValueError, "num_proj"),
        (dict(input_h=h0.astype(np.float64)), TypeError, "dtype"),
        (dict(rnn_mode="gru", input=g_x, input_h=g_h0, params=g_params, num_proj=2),
         ValueError, "num_proj"),
    ]
    base = dict(input=x, input_h=h0, input_c=c0, params=params, sequence_lengths=None, **kw)
    return base, cases


def test_validation(device):
    base, cases = _bad_calls()
    for change, exc, pattern in cases:
        args = dict(base, **change)
        with pytest.raises(exc, match=pattern):
            rc.cudnn_rnn(args.pop("input"), args.pop("input_h"), args.pop("input_c"),
                         args.pop("params"), args.pop("sequence_lengths"), device=device, **args)


def test_backprop_validation(device):
    needs_fp64(device)
    x, h0, c0, params, kw = problem("lstm", 1, 2, seed=18)
    out = rc.cudnn_rnn(x, h0, c0, params, device=device, **kw)
    with pytest.raises(rc.ShapeError, match="output_backprop"):
        rc.cudnn_rnn_backprop(x, h0, c0, params, None, *out[:3], out[0][:2], None, None,
                              *out[3:], device=device, **kw)
    with pytest.raises(rc.ShapeError, match="output_c_backprop"):
        rc.cudnn_rnn_backprop(x, h0, c0, params, None, *out[:3], None, None, c0[:1], *out[3:],
                              device=device, **kw)
    with pytest.raises(ValueError, match="host_reserved"):
        rc.cudnn_rnn_backprop(x, h0, c0, params, None, *out[:3], None, None, None, out[3],
                              np.zeros_like(out[4]), device=device, **kw)
    with pytest.raises(TypeError, match="host_reserved"):
        rc.cudnn_rnn_backprop(x, h0, c0, params, None, *out[:3], None, None, None, out[3],
                              out[4].astype(np.float32), device=device, **kw)


def test_non_lstm_ignores_c(device):
    """Non-LSTM modes accept input_c / output_c_backprop as None or empty and return empty c."""
    needs_fp64(device)
    x, h0, _, params, kw = problem("rnn_tanh", 2, 1, seed=19)
    a = rc.cudnn_rnn(x, h0, None, params, device=device, **kw)
    b = rc.cudnn_rnn(x, h0, np.zeros(0), params, device=device, **kw)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[2].shape == (0,) and a[2].dtype == x.dtype
    g = rc.cudnn_rnn_backprop(x, h0, np.zeros(0), params, None, *a[:3], np.ones(a[0].shape),
                              None, np.zeros(0), *a[3:], device=device, **kw)
    assert g[2].shape == (0,)
