"""PyTorch's own RNN module tests (``test/test_nn.py``: the argument checks, initial states,
dropout changes, CPU-vs-cuDNN comparisons, variable-length sequences, weight norm, gradgrad),
rewritten for pyrnn_cl.torch.

Where upstream compares torch's CPU kernels with cuDNN, these compare torch.nn's CPU kernels
with pyrnn_cl (same weights) in float64; where upstream checks an error type, the type is the
one torch.nn raises, obtained by running torch.nn on the same arguments. Tests that need CUDA,
the ``*Cell`` classes or half precision are not ported.
"""
import itertools

import pytest

torch = pytest.importorskip("torch")
rt = pytest.importorskip("pyrnn_cl.torch")
from torch.nn.utils.rnn import pack_padded_sequence, pack_sequence, pad_packed_sequence  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.fp64]

F64 = torch.float64
TOL = 1e-12
MODES = ["RNN_TANH", "RNN_RELU", "LSTM", "GRU"]


def _make(lib, mode, *args, **kw):
    """``lib.RNN/LSTM/GRU`` for a torch mode name (RNN_RELU: nonlinearity='relu')."""
    if mode.startswith("RNN"):
        kw["nonlinearity"] = "relu" if mode == "RNN_RELU" else "tanh"
        return lib.RNN(*args, **kw)
    return getattr(lib, mode)(*args, **kw)


def _pair(mode, device, *args, seed=0, **kw):
    torch.manual_seed(seed)
    ref = _make(torch.nn, mode, *args, dtype=F64, **kw)
    ours = _make(rt, mode, *args, dtype=F64, cl_device=device, **kw)
    ours.load_state_dict(ref.state_dict(), strict=True)
    return ours, ref


def _err(a, b):
    return (a - b).abs().max().item() / max(1.0, b.abs().max().item())


def _raises_like_torch(ours_call, ref_call):
    with pytest.raises(Exception) as theirs:
        ref_call()
    with pytest.raises(Exception) as mine:
        ours_call()
    assert isinstance(mine.value, type(theirs.value)), (mine.value, theirs.value)


@pytest.mark.parametrize("mode", MODES)
def test_rnn_args_check(mode, device):
    """Every single wrong size of input, h0 (and c0) is refused as torch.nn refuses it."""
    I, H, T, N, L = 3, 5, 4, 6, 2
    ours, ref = _pair(mode, device, I, H, L)

    def call(m, x_shape, h_shape):
        x = torch.randn(*x_shape, dtype=F64)
        h = torch.randn(*h_shape, dtype=F64)
        return lambda: m(x, (h, h.clone()) if mode == "LSTM" else h)

    good_x, good_h = (T, N, I), (L, N, H)
    for k, bad in ((2, I + 1), (1, N + 1)):                  # input_size, batch
        x_shape = tuple(bad if i == k else s for i, s in enumerate(good_x))
        _raises_like_torch(call(ours, x_shape, good_h), call(ref, x_shape, good_h))
    for k in range(3):                                       # layers, batch, hidden
        h_shape = tuple(s + 1 if i == k else s for i, s in enumerate(good_h))
        _raises_like_torch(call(ours, good_x, h_shape), call(ref, good_x, h_shape))


def test_projections_lstm_args_check(device):
    """LSTM with proj_size: h0's last axis is proj_size, c0's is hidden_size; any other size of
    either is refused like torch.nn."""
    I, H, P, T, N, L = 3, 5, 2, 4, 6, 2
    ours, ref = _pair("LSTM", device, I, H, L, proj_size=P)
    x = torch.randn(T, N, I, dtype=F64)
    for h_shape, c_shape in (((L, N, H), (L, N, H)), ((L, N, P), (L, N, P)),
                             ((L + 1, N, P), (L, N, H)), ((L, N, P), (L, N + 1, H))):
        h, c = torch.randn(*h_shape, dtype=F64), torch.randn(*c_shape, dtype=F64)
        _raises_like_torch(lambda h=h, c=c: ours(x, (h, c)), lambda h=h, c=c: ref(x, (h, c)))
    h, c = torch.randn(L, N, P, dtype=F64), torch.randn(L, N, H, dtype=F64)
    with torch.no_grad():
        assert _err(ours(x, (h, c))[0], ref(x, (h, c))[0]) <= TOL


@pytest.mark.parametrize("mode", MODES)
def test_rnn_initial_hidden_state(mode, device):
    """hx=None is the same as zero initial states."""
    m = _make(rt, mode, 4, 6, 2, dtype=F64, cl_device=device)
    x = torch.randn(5, 3, 4, dtype=F64)
    h = torch.zeros(2, 3, 6, dtype=F64)
    with torch.no_grad():
        a, ha = m(x)
        b, hb = m(x, (h, h) if mode == "LSTM" else h)
    assert torch.equal(a, b)
    if mode == "LSTM":
        assert torch.equal(ha[0], hb[0]) and torch.equal(ha[1], hb[1])
    else:
        assert torch.equal(ha, hb)


def test_rnn_change_dropout(device):
    """Assigning ``module.dropout`` takes effect on the next call: p = 0 and p = 1 (the two
    masks every implementation shares) equal torch.nn in training mode, eval ignores it."""
    ours, ref = _pair("RNN_RELU", device, 4, 6, 3)
    x = torch.randn(5, 3, 4, dtype=F64)
    for train, p in itertools.product((True, False), (0.0, 0.3, 1.0, 0.0)):
        ours.train(train)
        ref.train(train)
        ours.dropout = ref.dropout = p
        with torch.no_grad():
            a, b = ours(x)[0], ref(x)[0]
        if not train or p in (0.0, 1.0):
            assert _err(a, b) <= TOL, (train, p)
        if train and p == 1.0:            # the last layer sees zeros: rows equal at each step
            assert torch.allclose(a, a[:, :1].expand_as(a))


def test_rnn_dropout_values(device):
    """Upstream's dropout test, mask-independent: with unit weights, zero biases and relu, each
    layer-1 unit is the input sum I; after dropout it is 0 or I/(1-p); the next layer sums the
    kept ones, so every output is k·I/(1-p) with k kept units out of H, and about (1-p)·H are
    kept on average."""
    I, H, p = 10, 100, 0.3
    m = rt.RNN(I, H, 2, nonlinearity="relu", dropout=p, dtype=F64, cl_device=device)
    with torch.no_grad():
        for name, w in m.named_parameters():
            w.fill_(0.0 if "bias" in name else 1.0)
    m.train()
    x = torch.ones(1, 1, I, dtype=F64)
    kept = []
    for seed in range(20):
        torch.manual_seed(seed)
        with torch.no_grad():
            y = m(x)[0]
        k = y / (I / (1 - p))
        assert torch.allclose(k, k.round(), atol=1e-9) and torch.all(k == k[0, 0, 0])
        kept.append(k[0, 0, 0].item())
    mean = sum(kept) / len(kept)
    assert abs(mean - (1 - p) * H) < 5 * (p * (1 - p) * H / len(kept)) ** 0.5 + 1


@pytest.mark.parametrize("mode", MODES)
def test_rnn_cpu_vs_pyrnn_cl(mode, device):
    """Upstream's CPU-vs-cuDNN comparison with pyrnn_cl in cuDNN's place: every combination of
    bias, batch_first, bidirectional, contiguous or not, padded or variable-length (lengths as
    a list or a tensor), with and without an initial state; outputs, final states and the
    gradients of input, initial states and every weight."""
    I, H, L, T, N = 4, 5, 2, 6, 3
    lengths = [6, 4, 2]
    opts = itertools.product((True, False), (True, False), (True, False), (True, False),
                             ("padded", "list", "tensor"), (True, False))
    for bias, batch_first, bidirectional, contiguous, lens, with_hx in opts:
        ours, ref = _pair(mode, device, I, H, L, bias=bias, batch_first=batch_first,
                          bidirectional=bidirectional)
        D = 2 if bidirectional else 1
        g = torch.Generator().manual_seed(5)
        x = torch.randn(*((N, T, I) if batch_first else (T, N, I)), generator=g, dtype=F64)
        if not contiguous:        # same values, transposed memory
            x = x.transpose(0, 1).contiguous().transpose(0, 1)
            assert not x.is_contiguous()
        h0 = torch.randn(L * D, N, H, generator=g, dtype=F64)
        c0 = torch.randn(L * D, N, H, generator=g, dtype=F64)
        results = []
        for m in (ours, ref):
            m.zero_grad()
            xs, hs, cs = (t.clone().requires_grad_() for t in (x, h0, c0))
            inp = xs
            if lens != "padded":
                ls = lengths if lens == "list" else torch.tensor(lengths)
                inp = pack_padded_sequence(xs, ls, batch_first=batch_first)
            hx = ((hs, cs) if mode == "LSTM" else hs) if with_hx else None
            y, hn = m(inp, hx)
            if lens != "padded":
                y = pad_packed_sequence(y, batch_first=batch_first)[0]
            finals = list(hn) if mode == "LSTM" else [hn]
            loss = y.pow(2).sum() + sum((f * (k + 1)).sum() for k, f in enumerate(finals))
            loss.backward()
            grads = [xs.grad] + ([hs.grad] + ([cs.grad] if mode == "LSTM" else [])
                                 if with_hx else [])
            results.append([y.detach()] + [f.detach() for f in finals] + grads
                           + [w.grad for w in m.parameters()])
        case = (bias, batch_first, bidirectional, contiguous, lens, with_hx)
        for a, b in zip(*results):
            assert a.shape == b.shape and _err(a, b) <= TOL, case


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_variable_sequence(mode, device):
    """A packed batch of sequences of different lengths gives, for each sequence, what that
    sequence gives alone (unpadded), and the same gradients."""
    I, H, L = 3, 4, 2
    m = _make(rt, mode, I, H, L, bidirectional=True, dtype=F64, cl_device=device)
    lengths = [7, 5, 5, 2, 1]
    seqs = [torch.randn(n, I, dtype=F64, requires_grad=True) for n in lengths]
    packed = pack_sequence(seqs)
    y, _ = m(packed)
    padded, _ = pad_packed_sequence(y)
    padded.pow(2).sum().backward()
    batch_grads = [s.grad.clone() for s in seqs]
    for k, s in enumerate(seqs):
        s.grad = None
        alone, _ = m(s)                                  # unbatched [n, I]
        assert _err(padded[:lengths[k], k], alone) <= TOL
        assert not padded[lengths[k]:, k].any()          # zeros past the end
        alone.pow(2).sum().backward()
        assert _err(s.grad, batch_grads[k]) <= TOL


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_rnn_weight_norm(mode, device):
    """A weight-normed recurrent weight (a tensor recomputed on every call, not a leaf) gives
    torch.nn's outputs and gradients of the parametrization's g and v."""
    from torch.nn.utils.parametrizations import weight_norm

    ours, ref = _pair(mode, device, 3, 4, 2)
    ours = weight_norm(ours, "weight_hh_l0")
    ref = weight_norm(ref, "weight_hh_l0")
    x = torch.randn(5, 2, 3, dtype=F64)
    for _step in range(2):             # the second call must see the step's new weights
        grads = []
        for m in (ours, ref):
            m.zero_grad()
            y = m(x)[0]
            y.pow(2).sum().backward()
            grads.append((y.detach(), [p.grad.clone() for p in m.parameters()]))
        (ya, ga), (yb, gb) = grads
        assert _err(ya, yb) <= TOL
        for a, b in zip(ga, gb):
            assert _err(a, b) <= TOL
        with torch.no_grad():
            for m in (ours, ref):
                for p in m.parameters():
                    p.sub_(0.1 * p.grad)


def test_lstm_grad_and_gradgrad(device):
    """Upstream's test_LSTM_grad_and_gradgrad: gradcheck passes; gradgradcheck, which needs
    double backward, raises a RuntimeError instead of reporting wrong second derivatives."""
    m = rt.LSTM(2, 3, 2, dtype=F64, cl_device=device)
    names = [n for n, _ in m.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in m.parameters()]
    x = torch.randn(4, 2, 2, dtype=F64, requires_grad=True)
    h0 = torch.randn(2, 2, 3, dtype=F64, requires_grad=True)
    c0 = torch.randn(2, 2, 3, dtype=F64, requires_grad=True)

    def f(x, h0, c0, *ps):
        y, (hn, cn) = torch.func.functional_call(m, dict(zip(names, ps)), (x, (h0, c0)))
        return y, hn, cn

    args = (x, h0, c0, *params)
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-8, rtol=1e-6, fast_mode=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.gradgradcheck(f, args, eps=1e-6, atol=1e-8, rtol=1e-6, fast_mode=True)


def test_rnn_nonlinearity_and_invalid_arguments(device):
    """Constructor checks are torch.nn's own (inherited): same attributes and errors."""
    assert rt.RNN(1, 10, cl_device=device).nonlinearity == "tanh"
    assert rt.RNN(1, 10, nonlinearity="relu", cl_device=device).nonlinearity == "relu"
    for kw in (dict(nonlinearity="garbage"), dict(dropout=-0.1), dict(dropout=1.5),
               dict(num_layers=0), dict(proj_size=-1)):
        cls = "LSTM" if "proj_size" in kw else "RNN"
        _raises_like_torch(lambda cls=cls, kw=kw: getattr(rt, cls)(3, 4, cl_device=device, **kw),
                           lambda cls=cls, kw=kw: getattr(torch.nn, cls)(3, 4, **kw))
