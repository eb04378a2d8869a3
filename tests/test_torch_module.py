"""pyrnn_cl.torch: RNN/LSTM/GRU modules against torch.nn (the oracle: torch's own CPU kernels)
in float64, forward and every gradient; state_dict compatibility both ways; packed sequences
(sorted and unsorted); unbatched input; gradcheck; the deterministic dropout; errors.

Shapes T=5, N=3, I=7, H=4 (distinct so a transposition cannot hide), non-zero and distinct
initial states per layer and direction, upstream gradients on output *and* final states.
"""
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
rt = pytest.importorskip("pyrnn_cl.torch")
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence  # noqa: E402

import pyrnn_cl as rc  # noqa: E402

pytestmark = pytest.mark.torch

T, N, I, H = 5, 3, 7, 4
TOL64 = 1e-12
TOL32 = 2e-5

CASES = [
    ("LSTM", dict(num_layers=2, bidirectional=True, proj_size=3, batch_first=True)),
    ("LSTM", dict(num_layers=1, bias=False)),
    ("GRU", dict(num_layers=3, bidirectional=True)),
    ("GRU", dict(num_layers=1, batch_first=True)),
    ("RNN", dict(num_layers=2, bidirectional=True)),
    ("RNN", dict(num_layers=2, nonlinearity="relu")),
]
IDS = ["lstm-L2-bi-proj-bf", "lstm-nobias", "gru-L3-bi", "gru-bf", "rnn-tanh-L2-bi",
       "rnn-relu-L2"]


def _pair(cls, kw, device, dtype=torch.float64, seed=0):
    """(ours, torch.nn) with identical weights; ours loads torch's state dict, strict."""
    torch.manual_seed(seed)
    ref = getattr(torch.nn, cls)(I, H, dtype=dtype, **kw)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.add_(0.3 * torch.randn_like(p) + (0.1 if "bias" in name else 0.0))
    ours = getattr(rt, cls)(I, H, dtype=dtype, cl_device=device, **kw)
    ours.load_state_dict(ref.state_dict(), strict=True)
    return ours, ref


def _inputs(m, seed=1, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    D = 2 if m.bidirectional else 1
    R = m.proj_size if getattr(m, "proj_size", 0) else H
    shape = (N, T, I) if m.batch_first else (T, N, I)
    x = torch.randn(*shape, generator=g, dtype=dtype)
    h0 = torch.randn(m.num_layers * D, N, R, generator=g, dtype=dtype)
    c0 = torch.randn(m.num_layers * D, N, H, generator=g, dtype=dtype)
    return x, h0, c0


def _run(m, x, h0, c0, upstream_seed=2):
    """Forward + backward of L = Σ y⊙gy + Σ h_n⊙gh (+ Σ c_n⊙gc); returns outputs and grads."""
    x, h0, c0 = (t.clone().requires_grad_() for t in (x, h0, c0))
    m.zero_grad()
    lstm = isinstance(m, torch.nn.LSTM)
    y, hn = m(x, (h0, c0) if lstm else h0)
    outs = [y] + (list(hn) if lstm else [hn])
    g = torch.Generator().manual_seed(upstream_seed)
    loss = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in outs)
    loss.backward()
    grads = {"x": x.grad, "h0": h0.grad}
    if lstm:
        grads["c0"] = c0.grad
    grads.update({n: p.grad for n, p in m.named_parameters()})
    return [o.detach() for o in outs], grads


def _err(a, b):
    return (a - b).abs().max().item() / max(1.0, b.abs().max().item())


def _compare(ours, ref, x, h0, c0, tol):
    o1, g1 = _run(ours, x, h0, c0)
    o2, g2 = _run(ref, x, h0, c0)
    for k, (a, b) in enumerate(zip(o1, o2)):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert _err(a, b) <= tol, f"output {k}: {_err(a, b):.2e}"
    assert g1.keys() == g2.keys()
    for k in g2:
        assert g1[k] is not None, k
        assert _err(g1[k], g2[k]) <= tol, f"grad {k}: {_err(g1[k], g2[k]):.2e}"


def test_import_pyrnn_cl_does_not_import_torch():
    code = "import sys, pyrnn_cl; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.fp64
@pytest.mark.parametrize("cls,kw", CASES, ids=IDS)
def test_matches_torch_float64(cls, kw, device):
    ours, ref = _pair(cls, kw, device)
    assert isinstance(ours, getattr(torch.nn, cls))
    _compare(ours, ref, *_inputs(ours), TOL64)


@pytest.mark.parametrize("cls,kw", [CASES[0], CASES[2]], ids=[IDS[0], IDS[2]])
def test_matches_torch_float32(cls, kw, device):
    ours, ref = _pair(cls, kw, device, dtype=torch.float32)
    _compare(ours, ref, *_inputs(ours, dtype=torch.float32), TOL32)


@pytest.mark.fp64
def test_state_dict_both_ways(device):
    """Our state dict loads into torch.nn (strict) and back; names, order, shapes identical."""
    kw = dict(num_layers=2, bidirectional=True, proj_size=2)
    ours = rt.LSTM(I, H, dtype=torch.float64, cl_device=device, **kw)
    ref = torch.nn.LSTM(I, H, dtype=torch.float64, **kw)
    assert list(ours.state_dict()) == list(ref.state_dict())
    ref.load_state_dict(ours.state_dict(), strict=True)
    x, h0, c0 = _inputs(ours)
    with torch.no_grad():
        a, (ha, ca) = ours(x, (h0, c0))
        b, (hb, cb) = ref(x, (h0, c0))
    assert _err(a, b) <= TOL64 and _err(ha, hb) <= TOL64 and _err(ca, cb) <= TOL64
    # default (None) initial state
    with torch.no_grad():
        assert _err(ours(x)[0], ref(x)[0]) <= TOL64


@pytest.mark.fp64
@pytest.mark.parametrize("cls,kw", [("LSTM", dict(num_layers=2, bidirectional=True)),
                                    ("GRU", dict(num_layers=2, bidirectional=True)),
                                    ("RNN", dict(num_layers=1))], ids=["lstm", "gru", "rnn"])
@pytest.mark.parametrize("enforce_sorted", [False, True], ids=["unsorted", "sorted"])
def test_packed_sequence(cls, kw, enforce_sorted, device):
    ours, ref = _pair(cls, kw, device)
    lengths = torch.tensor([5, 4, 2] if enforce_sorted else [3, 5, 1])
    x, h0, c0 = _inputs(ours)
    results = []
    for m in (ours, ref):
        xs, h, c = (t.clone().requires_grad_() for t in (x, h0, c0))
        m.zero_grad()
        packed = pack_padded_sequence(xs, lengths, enforce_sorted=enforce_sorted)
        y, hn = m(packed, (h, c) if cls == "LSTM" else h)
        assert type(y) is type(packed)
        assert torch.equal(y.batch_sizes, packed.batch_sizes)
        for a in ("sorted_indices", "unsorted_indices"):
            ia, ib = getattr(y, a), getattr(packed, a)
            assert (ia is None and ib is None) or torch.equal(ia, ib)
        padded, lens = pad_packed_sequence(y)
        assert torch.equal(lens, lengths)
        finals = list(hn) if cls == "LSTM" else [hn]
        g = torch.Generator().manual_seed(3)
        loss = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum()
                   for o in [y.data] + finals)
        loss.backward()
        grads = [xs.grad, h.grad] + [p.grad for p in m.parameters()]
        results.append(([y.data, padded] + [f.detach() for f in finals], grads))
    (o1, g1), (o2, g2) = results
    for a, b in zip(o1, o2):
        assert _err(a, b) <= TOL64
    for a, b in zip(g1, g2):
        assert _err(a, b) <= TOL64


@pytest.mark.fp64
def test_unbatched_input(device):
    ours, ref = _pair("GRU", dict(num_layers=2, bidirectional=True), device)
    x = torch.randn(T, I, dtype=torch.float64)
    h0 = torch.randn(4, H, dtype=torch.float64)
    with torch.no_grad():
        a, ha = ours(x, h0)
        b, hb = ref(x, h0)
    assert a.shape == b.shape == (T, 2 * H) and ha.shape == hb.shape == (4, H)
    assert _err(a, b) <= TOL64 and _err(ha, hb) <= TOL64


@pytest.mark.fp64
def test_gradient_from_final_state_only(device):
    """Pitfall A4: a loss on h_n/c_n alone (no output gradient) must backpropagate."""
    ours, ref = _pair("LSTM", dict(num_layers=2), device)
    x, h0, c0 = _inputs(ours)
    grads = []
    for m in (ours, ref):
        xs = x.clone().requires_grad_()
        _, (hn, cn) = m(xs, (h0, c0))
        (cn.sum() + 2 * hn[0].sum()).backward()
        grads.append(xs.grad)
    assert _err(*grads) <= TOL64


@pytest.mark.fp64
def test_gradcheck_full(device):
    """torch.autograd.gradcheck (every input and parameter, central differences)."""
    m = rt.GRU(2, 2, num_layers=1, bidirectional=True, dtype=torch.float64, cl_device=device)
    names = [n for n, _ in m.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in m.parameters()]
    x = torch.randn(3, 2, 2, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 2, 2, dtype=torch.float64, requires_grad=True)

    def f(x, h0, *ps):
        y, hn = torch.func.functional_call(m, dict(zip(names, ps)), (x, h0))
        return y, hn

    assert torch.autograd.gradcheck(f, (x, h0, *params), eps=1e-6, atol=1e-8, rtol=1e-6)


@pytest.mark.fp64
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_gradcheck_lstm_proj_fast(packed, device):
    """gradcheck (fast mode: random projections) of a 2-layer bidirectional LSTMP, also through
    an unsorted PackedSequence (sequence_lengths in the kernel)."""
    kw = dict(num_layers=2, bidirectional=True, proj_size=2)
    m = rt.LSTM(3, 3, dtype=torch.float64, cl_device=device, **kw)
    names = [n for n, _ in m.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in m.parameters()]
    x = torch.randn(4, 3, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(4, 3, 2, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(4, 3, 3, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([2, 4, 3])

    def f(x, h0, c0, *ps):
        inp = pack_padded_sequence(x, lengths, enforce_sorted=False) if packed else x
        y, (hn, cn) = torch.func.functional_call(m, dict(zip(names, ps)), (inp, (h0, c0)))
        return (y.data if packed else y), hn, cn

    assert torch.autograd.gradcheck(f, (x, h0, c0, *params), eps=1e-6, atol=1e-8, rtol=1e-6,
                                    fast_mode=True)


@pytest.mark.fp64
def test_dropout_deterministic_and_consistent(device):
    kw = dict(num_layers=3, dropout=0.5)
    ours, ref = _pair("GRU", kw, device)
    x, h0, _ = _inputs(ours)
    ours.train()
    with torch.no_grad():
        torch.manual_seed(5)
        a = ours(x, h0)[0]
        torch.manual_seed(5)
        b = ours(x, h0)[0]
        torch.manual_seed(6)
        c = ours(x, h0)[0]
        ours.eval()
        ref.eval()
        e = ours(x, h0)[0]
        assert _err(e, ref(x, h0)[0]) <= TOL64          # eval: no dropout, = torch.nn
    assert torch.equal(a, b)                             # same torch seed -> same mask
    assert _err(a, c) > 1e-3 and _err(a, e) > 1e-3       # new seed -> new mask; != eval

    # forward and backward of one call share the mask: gradcheck with a fixed torch seed
    ours.train()
    names = [n for n, _ in ours.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in ours.parameters()]
    xs = x[:3, :2].clone().requires_grad_()

    def f(x, *ps):
        torch.manual_seed(7)
        return torch.func.functional_call(ours, dict(zip(names, ps)), (x,))[0]

    assert torch.autograd.gradcheck(f, (xs, *params), eps=1e-6, atol=1e-8, rtol=1e-6,
                                    fast_mode=True)


@pytest.mark.fp64
def test_dropout_one_equals_torch(device):
    """p = 1 drops every inter-layer unit (zeros, not NaN) — the one mask torch.nn shares."""
    ours, ref = _pair("LSTM", dict(num_layers=2, dropout=1.0), device)
    _compare(ours.train(), ref.train(), *_inputs(ours), TOL64)


def test_errors(device):
    m = rt.LSTM(I, H, cl_device=device)
    x = torch.randn(T, N, I)
    with pytest.raises(TypeError, match="dtype"):
        m(x.double())
    with pytest.raises(rc.ShapeError, match="input_size=7"):
        m(torch.randn(T, N, I + 1))
    with pytest.raises(rc.ShapeError, match=r"h_0 has shape \[1, 2, 4\], expected \[1, 3, 4\]"):
        m(x, (torch.zeros(1, 2, H), torch.zeros(1, N, H)))
    with pytest.raises(TypeError, match="tuple"):
        m(x, torch.zeros(1, N, H))
    with pytest.raises(rc.ShapeError, match="3-D"):
        m(torch.randn(2, T, N, I))
    # a parameter dtype pyrnn_cl cannot store (16-bit ones work: tests/test_torch_half.py)
    odd = rt.GRU(I, H, dtype=torch.complex64, cl_device=device)
    with pytest.raises(TypeError, match="float32, torch.float64"):
        odd(x.to(torch.complex64))
    # no gradient needed: nothing is saved, and the result is still right
    with torch.no_grad():
        y, _ = m(x)
    assert not y.requires_grad
    assert "cl_device" in repr(m)


# (id, module class, constructor args, call args): mistakes that torch.nn refuses
MISTAKES = [
    ("hidden-batch", "RNN", (3, 5), lambda: (torch.randn(6, 4, 3), torch.randn(1, 7, 5))),
    ("hidden-layers", "GRU", (3, 5), lambda: (torch.randn(6, 4, 3), torch.randn(2, 4, 5))),
    ("c0-shape", "LSTM", (3, 5), lambda: (torch.randn(6, 4, 3),
                                          (torch.randn(1, 4, 5), torch.randn(1, 4, 6)))),
    ("zero-length", "LSTM", (3, 5), lambda: (torch.randn(0, 4, 3),)),
    ("input-size", "RNN", (3, 5), lambda: (torch.randn(6, 4, 4),)),
    ("rank-4", "GRU", (3, 5), lambda: (torch.randn(2, 6, 4, 3),)),
    ("input-dtype", "RNN", (3, 5), lambda: (torch.randn(6, 4, 3, dtype=torch.float64),)),
    ("hx-dtype", "LSTM", (3, 5), lambda: (torch.randn(6, 4, 3),
                                          (torch.randn(1, 4, 5),
                                           torch.randn(1, 4, 5, dtype=torch.float64)))),
    ("unbatched-3d-hx", "LSTM", (3, 5), lambda: (torch.randn(6, 3),
                                                 (torch.randn(1, 4, 5), torch.randn(1, 4, 5)))),
]


@pytest.mark.parametrize("cls,args,make", [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_errors_are_torch_types(cls, args, make, device):
    """Each mistake raises, in ours, an instance of the type torch.nn raises for it (found by
    running torch.nn, not written down), with a message that names the argument."""
    torch.manual_seed(0)
    call = make()
    with pytest.raises(Exception) as theirs:
        getattr(torch.nn, cls)(*args)(*call)
    with pytest.raises(Exception) as mine:
        getattr(rt, cls)(*args, cl_device=device)(*call)
    assert isinstance(mine.value, type(theirs.value)), (type(mine.value), type(theirs.value))
    assert str(mine.value).split(":")[0] in ("input", "hx"), str(mine.value)


def test_deepcopy_shares_device_and_pickle_uses_spec(device):
    import copy
    import io

    m = rt.GRU(I, H, num_layers=2, cl_device=device)
    twin = copy.deepcopy(m)
    assert twin.cl_device is device                      # OpenCL objects are shared, not copied
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=False)
    assert back.cl_device == device.info.index           # pickled as its "P:D" spec
    x = torch.randn(T, N, I)
    with torch.no_grad():
        assert torch.equal(back(x)[0], m(x)[0]) and torch.equal(twin(x)[0], m(x)[0])


@pytest.mark.fp64
def test_empty_sizes(device):
    """N = 0 works as in torch.nn; T = 0 is refused with a RuntimeError, as torch.nn does."""
    ours, ref = _pair("LSTM", dict(num_layers=2, bidirectional=True), device)
    x = torch.randn(T, 0, I, dtype=torch.float64)
    with torch.no_grad():
        a, (ha, _) = ours(x)
        b, (hb, _) = ref(x)
    assert a.shape == b.shape and ha.shape == hb.shape
    x = torch.randn(0, N, I, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="larger than 0"):
        ref(x)
    with pytest.raises(RuntimeError, match="larger than 0"):
        ours(x)
