"""pyrnn_cl.torch's autograd contract and its device-side caches, against torch.nn and
gradcheck in float64.

* double backward raises as soon as ``create_graph=True`` reaches the module;
* modifying a saved tensor in place between forward and backward raises torch's
  version-counter error (torch.nn raises it for the same code);
* gradients for any subset of inputs that require grad;
* gradcheck for every module option;
* the device copy of the parameters is re-uploaded exactly when they change (including through
  ``.data``), and the reserve space kept on the device gives the same gradients as a rebuilt one;
* module behaviour: ``.to(dtype)``, ``state_dict`` through ``torch.save``, ``flatten_parameters``.
"""
import copy
import gc
import io
import itertools

import pytest

torch = pytest.importorskip("torch")
rt = pytest.importorskip("pyrnn_cl.torch")
from torch.nn.utils.rnn import pack_padded_sequence  # noqa: E402

from pyrnn_cl._arrays import shares_host_memory  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.fp64]

T, N, I, H = 4, 3, 5, 3
TOL = 1e-12
F64 = torch.float64


@pytest.fixture(params=["eager", "op"])
def path(request, monkeypatch):
    """Which way the modules' calls go: eager calls take ``_EagerRNN``; ``op`` forces the
    ``pyrnn_cl::rnn`` operators (what torch.compile/export trace) for the same eager code.
    Yields the name, and checks that the calls took that path."""
    taken = []
    eager = rt._eager

    def spy(tensors):
        taken.append(eager(tensors) and request.param == "eager")
        return taken[-1]

    monkeypatch.setattr(rt, "_eager", spy)
    yield request.param
    assert taken and all(t == (request.param == "eager") for t in taken)


def _pair(cls, device, input_size=I, **kw):
    torch.manual_seed(0)
    ref = getattr(torch.nn, cls)(input_size, H, dtype=F64, **kw)
    ours = getattr(rt, cls)(input_size, H, dtype=F64, cl_device=device, **kw)
    ours.load_state_dict(ref.state_dict(), strict=True)
    return ours, ref


def _err(a, b):
    return (a - b).abs().max().item() / max(1.0, b.abs().max().item())


def test_double_backward_raises(device, path):
    """A gradient penalty needs d(dL/dx)/dθ: create_graph=True must fail loudly, not drop it."""
    ours, _ = _pair("LSTM", device)
    x = torch.randn(T, N, I, dtype=F64, requires_grad=True)
    y, _ = ours(x)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)
    # without create_graph the same graph still differentiates
    (gx,) = torch.autograd.grad(ours(x)[0].pow(2).sum(), x)
    assert gx.abs().sum() > 0


def _modify_x_in_place(m, lstm):
    x = torch.randn(T, N, 2 * H, dtype=F64, requires_grad=True) * 1.0
    x += m(x)[0]                       # the output added into the saved input
    return x.sum()


def _scale_x(m, lstm):
    x = torch.randn(T, N, 2 * H, dtype=F64, requires_grad=True) * 1.0
    y = m(x)[0]
    x.mul_(100)
    return y.sum()


def _zero_h0(m, lstm):
    h0 = torch.randn(2, N, H, dtype=F64, requires_grad=True) * 1.0
    c0 = torch.randn(2, N, H, dtype=F64)
    y = m(torch.randn(T, N, 2 * H, dtype=F64), (h0, c0) if lstm else h0)[0]
    h0.zero_()
    return y.sum()


def _scale_weight(m, lstm):
    y = m(torch.randn(T, N, 2 * H, dtype=F64))[0]
    with torch.no_grad():
        m.weight_hh_l0_reverse.mul_(2)
    return y.sum()


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
@pytest.mark.parametrize("edit", [_modify_x_in_place, _scale_x, _zero_h0, _scale_weight],
                         ids=["x+=lstm(x)", "x.mul_", "h0.zero_", "weight.mul_"])
def test_in_place_change_of_saved_tensor_raises(cls, edit, device, path):
    ours, ref = _pair(cls, device, input_size=2 * H, bidirectional=True)
    # torch.nn raises a RuntimeError for the same code (for h0 its own message: it unbinds h0)
    for m, message in ((ref, "inplace"), (ours, "modified by an inplace operation")):
        torch.manual_seed(1)
        loss = edit(m, cls == "LSTM")
        with pytest.raises(RuntimeError, match=message):
            loss.backward()


SUBSETS = [s for r in range(1, 5) for s in itertools.combinations(("x", "h0", "c0", "w"), r)]


@pytest.mark.parametrize("wanted", SUBSETS, ids=["+".join(s) for s in SUBSETS])
def test_gradients_for_any_subset(wanted, device, path):
    """Only what requires grad gets a gradient, equal to torch.nn's; parameters partly frozen."""
    ours, ref = _pair("LSTM", device, num_layers=2)
    g = torch.Generator().manual_seed(2)
    base = [torch.randn(*s, generator=g, dtype=F64) for s in ((T, N, I), (2, N, H), (2, N, H))]
    results = []
    for m in (ours, ref):
        m.zero_grad(set_to_none=True)
        for name, p in m.named_parameters():
            p.requires_grad_("w" in wanted and "l1" in name)     # layer 0 frozen
        x, h0, c0 = (t.clone().requires_grad_(k in wanted)
                     for t, k in zip(base, ("x", "h0", "c0")))
        y, (hn, cn) = m(x, (h0, c0))
        if not y.requires_grad:
            results.append(None)
            continue
        (y.pow(2).sum() + hn.sum() + 3 * cn.sum()).backward()
        results.append([x.grad, h0.grad, c0.grad] + [p.grad for p in m.parameters()])
    if results[1] is None:
        assert results[0] is None
        return
    for a, b in zip(*results):
        assert (a is None) == (b is None)
        if b is not None:
            assert _err(a, b) <= TOL


# every option of the three modules, with 2 layers (inter-layer paths) and small sizes
GRADCHECK = [
    ("RNN", dict(nonlinearity="tanh")),
    ("RNN", dict(nonlinearity="relu", bias=False, batch_first=True)),
    ("RNN", dict(bidirectional=True)),
    ("LSTM", dict()),
    ("LSTM", dict(bias=False, bidirectional=True, batch_first=True)),
    ("LSTM", dict(proj_size=2, bidirectional=True)),
    ("GRU", dict(batch_first=True)),
    ("GRU", dict(bias=False, bidirectional=True)),
]


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("cls,kw", GRADCHECK,
                         ids=[f"{c}-" + "-".join(f"{k}={v}" for k, v in kw.items())
                              for c, kw in GRADCHECK])
def test_gradcheck_every_option(cls, kw, packed, device, path):
    m = getattr(rt, cls)(2, 3, num_layers=2, dtype=F64, cl_device=device, **kw)
    names = [n for n, _ in m.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in m.parameters()]
    D, R = (2 if m.bidirectional else 1), (kw.get("proj_size") or 3)
    x = torch.randn(*((3, 4, 2) if m.batch_first else (4, 3, 2)), dtype=F64, requires_grad=True)
    h0 = torch.randn(2 * D, 3, R, dtype=F64, requires_grad=True)
    c0 = torch.randn(2 * D, 3, 3, dtype=F64, requires_grad=True)
    lengths = torch.tensor([2, 4, 3])

    def f(x, h0, c0, *ps):
        inp = pack_padded_sequence(x, lengths, batch_first=m.batch_first,
                                   enforce_sorted=False) if packed else x
        hx = (h0, c0) if cls == "LSTM" else h0
        y, hn = torch.func.functional_call(m, dict(zip(names, ps)), (inp, hx))
        return (y.data if packed else y,) + (tuple(hn) if cls == "LSTM" else (hn,))

    assert torch.autograd.gradcheck(f, (x, h0, c0, *params), eps=1e-6, atol=1e-8, rtol=1e-6,
                                    fast_mode=True)


@pytest.mark.parametrize("cls,kw", GRADCHECK,
                         ids=[f"{c}-" + "-".join(f"{k}={v}" for k, v in kw.items())
                              for c, kw in GRADCHECK])
def test_prepared_backward_equals_unprepared(cls, kw, device, monkeypatch):
    """Where the device has cores of its own (a GPU: ``_prepares_backward``), a training forward
    prepares its backward while the device runs (``pyrnn_cl.cudnn._prepare_backprop``). Forced on
    and off here, the gradients equal those of the unprepared backward bit for bit, for every
    option, with dropout, lengths and given initial states; a second backward of a retained graph,
    whose plan is spent, computes its own (same values again)."""
    m = getattr(rt, cls)(I, H, num_layers=2, dropout=0.3, dtype=F64, cl_device=device, **kw)
    D, R = (2 if m.bidirectional else 1), (kw.get("proj_size") or H)
    g = torch.Generator().manual_seed(4)
    base = [torch.randn(*s, generator=g, dtype=F64)
            for s in ((N, T, I) if m.batch_first else (T, N, I), (2 * D, N, R), (2 * D, N, H))]
    lengths = torch.tensor([T, 2, 3][:N])
    results = {}
    for prepared in (False, True):
        monkeypatch.setattr(rt, "_prepares_backward", lambda dev, p=prepared: p)
        m.zero_grad(set_to_none=True)
        x, h0, c0 = (t.clone().requires_grad_() for t in base)
        torch.manual_seed(5)                               # the dropout masks' seeds
        inp = pack_padded_sequence(x, lengths, batch_first=m.batch_first, enforce_sorted=False)
        y, hn = m(inp, (h0, c0) if cls == "LSTM" else h0)
        loss = (y.data.pow(2).sum()
                + sum((k + 2) * t.sum() for k, t in enumerate(hn if cls == "LSTM" else [hn])))
        count = rt.STATS["backward_prepared"]
        loss.backward(retain_graph=True)
        assert rt.STATS["backward_prepared"] == count + prepared
        loss.backward()
        assert rt.STATS["backward_prepared"] == count + prepared        # (spent: not again)
        results[prepared] = [x.grad, h0.grad] + ([c0.grad] if cls == "LSTM" else []) + [
            p.grad for p in m.parameters()]
    for a, b in zip(results[True], results[False]):
        assert torch.equal(a, b)
    assert all(r.abs().sum() > 0 for r in results[True])


def test_backward_not_prepared_when_it_does_not_fit(device, monkeypatch):
    """A backward whose memory does not fit beside the forward's results when the forward runs
    is not prepared: the forward still succeeds, and the backward then runs unprepared."""
    ours, ref = _pair("GRU", device, num_layers=2)
    monkeypatch.setattr(rt, "_prepares_backward", lambda dev: True)

    def refuse(*args, **kwargs):
        raise rt.UnsupportedError("the backward of a test layer does not fit")

    monkeypatch.setattr(rt._cudnn, "_prepare_backprop", refuse)
    x = torch.randn(T, N, I, dtype=F64)
    count = rt.STATS["backward_prepared"]
    for m in (ours, ref):
        m(x)[0].pow(2).sum().backward()
    assert rt.STATS["backward_prepared"] == count
    for a, b in zip(ours.parameters(), ref.parameters()):
        assert _err(a.grad, b.grad) <= TOL


def _train_step(m, x, opt=None):
    y, _ = m(x)
    y.pow(2).sum().backward()
    if opt is not None:
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("compare_first", [True, False], ids=["compare-first", "compare-after"])
def test_params_uploaded_only_when_changed(device, path, compare_first, monkeypatch):
    """The cached upload (the parameters not read in place): also with the values compared
    while the forward runs (as on a GPU), where a changed value makes the forward run again."""
    monkeypatch.setattr(rt, "_host_shares_cores", lambda dev: compare_first)
    monkeypatch.setattr(rt, "_in_place_params", lambda *args: None)
    ours, ref = _pair("GRU", device, num_layers=2)
    x = torch.randn(T, N, I, dtype=F64)
    _train_step(ours, x)
    start = rt.STATS["params_uploads"]
    for _ in range(3):                  # no change: no upload, forward or backward
        _train_step(ours, x)
    assert rt.STATS["params_uploads"] == start
    ours.zero_grad()
    opt = torch.optim.SGD(ours.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    _train_step(ours, x, opt)
    _train_step(ref, x, ref_opt)
    assert rt.STATS["params_uploads"] == start          # the step came after its forward
    with torch.no_grad():               # the step's new values are used
        assert _err(ours(x)[0], ref(x)[0]) <= TOL
    assert rt.STATS["params_uploads"] == start + 1
    # an edit through .data leaves _version alone; it is still seen
    version = ours.weight_ih_l1._version
    ours.weight_ih_l1.data.mul_(0.5)
    ref.weight_ih_l1.data.mul_(0.5)
    assert ours.weight_ih_l1._version == version
    with torch.no_grad():
        assert _err(ours(x)[0], ref(x)[0]) <= TOL
    # load_state_dict copies in place (version bump): seen
    ref2 = torch.nn.GRU(I, H, num_layers=2, dtype=F64)
    ours.load_state_dict(ref2.state_dict())
    with torch.no_grad():
        assert _err(ours(x)[0], ref2(x)[0]) <= TOL


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "op"])
def test_params_read_in_place(device, eager, monkeypatch):
    """Where the device's memory is the host's, the parameters are views of one flat tensor
    (flatten_parameters, on construction) that the kernels read in place: no upload ever, and
    every change (optimizer step, ``.data`` edit, load_state_dict) is seen at once; a parameter
    replaced by another tensor falls back to the checked upload."""
    ours, ref = _pair("GRU", device, num_layers=2)
    lay_size = rt._slots("gru", 2, I, H, 1, 0, True)[0].size
    storages = {p.untyped_storage().data_ptr() for p in ours.parameters()}
    assert len(storages) == 1 and ours.weight_ih_l0.untyped_storage().nbytes() == lay_size * 8
    if not shares_host_memory(device):
        pytest.skip(f"{device.info.name}: memory not shared with the host")
    if not eager:
        monkeypatch.setattr(rt, "_eager", lambda tensors: False)
    x = torch.randn(T, N, I, dtype=F64)
    uploads, in_place = rt.STATS["params_uploads"], rt.STATS["params_in_place"]
    opt = torch.optim.SGD(ours.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(2):
        _train_step(ours, x, opt)
        _train_step(ref, x, ref_opt)
    with torch.no_grad():
        assert _err(ours(x)[0], ref(x)[0]) <= TOL
        ours.weight_hh_l1.data.mul_(0.5)
        ref.weight_hh_l1.data.mul_(0.5)
        assert _err(ours(x)[0], ref(x)[0]) <= TOL
        ref2 = torch.nn.GRU(I, H, num_layers=2, dtype=F64)
        ours.load_state_dict(ref2.state_dict())
        assert _err(ours(x)[0], ref2(x)[0]) <= TOL
    assert rt.STATS["params_uploads"] == uploads
    assert rt.STATS["params_in_place"] >= in_place + 5      # one per forward
    # a parameter that is no longer a view of the flat tensor: the checked upload
    ours.weight_ih_l0.data = ours.weight_ih_l0.data.clone().mul_(2.0)
    ref2.weight_ih_l0.data.mul_(2.0)
    with torch.no_grad():
        assert _err(ours(x)[0], ref2(x)[0]) <= TOL
    assert rt.STATS["params_uploads"] == uploads + 1
    # .to(dtype) flattens again (torch.nn calls flatten_parameters after _apply)
    half = ours.float()
    assert len({p.untyped_storage().data_ptr() for p in half.parameters()}) == 1


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_bridge_results_from_the_pool_where_memory_is_not_the_hosts(device, path, monkeypatch,
                                                                      cls):
    """On a device whose memory is not the host's (forced here; Intel's CPU runtime, GPUs) the
    bridge copies every result of its cuDNN-dialect calls into tensors (or keeps the reserve
    space for its backward) and drops it, so those results come from the pool
    (``_arrays.results_inside``): after a first step, forward and backward allocate no device
    buffer of their own, and the gradients still equal torch.nn's, over three training steps
    with two layers, bidirectional, h0 and c0 given."""
    from helpers.device import fresh_allocations
    from pyrnn_cl import _arrays

    for module in (_arrays, rt):
        monkeypatch.setattr(module, "shares_host_memory", lambda dev: False)
    ours, ref = _pair(cls, device, num_layers=2, bidirectional=True)
    x = torch.randn(T, N, I, dtype=F64)
    states = [torch.randn(4, N, H, dtype=F64) for _ in range(2 if cls == "LSTM" else 1)]

    def step(m):
        xx = x.clone().requires_grad_(True)
        hx = tuple(s.clone().requires_grad_(True) for s in states)
        y, _ = m(xx, hx if cls == "LSTM" else hx[0])
        grads = torch.autograd.grad(y.pow(2).sum(), [xx, *hx, *m.parameters()])
        return [y.detach(), *grads]

    step(ours)                                  # (fills the pool and the parameter cache)
    fresh = fresh_allocations(monkeypatch)
    for _ in range(3):
        got, want = step(ours), step(ref)
        for a, b in zip(got, want):
            assert _err(a, b) <= TOL
    assert fresh == [], fresh


def test_reserve_kept_on_device_equals_rebuilt(device, monkeypatch):
    """Through the operators, the backward reads the forward's reserve space from the device
    (no recompute); a backward that finds none rebuilds it by running the forward again: same
    gradients, bit for bit."""
    monkeypatch.setattr(rt, "_eager", lambda tensors: False)
    ours, _ = _pair("LSTM", device, num_layers=2, dropout=0.4)
    x = torch.randn(T, N, I, dtype=F64)
    grads = []
    for drop_entry in (False, True):
        ours.zero_grad()
        torch.manual_seed(3)
        y, _ = ours(x)
        hits, recomputes = rt.STATS["reserve_hits"], rt.STATS["reserve_recomputes"]
        if drop_entry:
            rt._RESERVES.clear()
        y.pow(2).sum().backward()
        assert rt.STATS["reserve_hits"] == hits + (not drop_entry)
        assert rt.STATS["reserve_recomputes"] == recomputes + drop_entry
        grads.append([p.grad.clone() for p in ours.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads))
    # the device state lives as long as the graph: freed with it
    y, (hn, cn) = ours(x)
    assert len(rt._RESERVES) == 1
    del y, hn, cn
    assert len(rt._RESERVES) == 0


def test_training_forward_reads_only_its_results(device, path, monkeypatch):
    """A training forward reads the output and final states from the device, not
    ``host_reserved`` (its values are known on the host: one device command fewer per call),
    and the backward that follows still finds the forward's state and matches torch.nn."""
    ours, ref = _pair("LSTM", device)
    read = []
    real = rt.read_host
    monkeypatch.setattr(rt, "read_host", lambda q, reads, in_place, wait=True: (
        read.extend(a.dtype for a, _, _ in reads), real(q, reads, in_place, wait))[1])
    x = torch.randn(T, N, I, dtype=F64)
    y, (hn, cn) = ours(x)
    assert [str(d) for d in read] == ["float64"] * 3      # output, h_n, c_n
    hits = rt.STATS["reserve_hits"]
    (y.sum() + hn.pow(2).sum() + cn.sum()).backward()
    assert rt.STATS["reserve_hits"] == hits + 1
    y_ref, (hn_ref, cn_ref) = ref(x)
    (y_ref.sum() + hn_ref.pow(2).sum() + cn_ref.sum()).backward()
    for p, q in zip(ours.parameters(), ref.parameters()):
        assert _err(p.grad, q.grad) < 1e-12


def test_retain_graph_backward_twice(device, path):
    ours, ref = _pair("GRU", device, bidirectional=True)
    x = torch.randn(T, N, I, dtype=F64)
    for m in (ours, ref):
        m.zero_grad()
        y, _ = m(x)
        loss = y.pow(2).sum()
        loss.backward(retain_graph=True)
        loss.backward()
    for a, b in zip(ours.parameters(), ref.parameters()):
        assert _err(a.grad, b.grad) <= TOL


def test_to_dtype_state_dict_and_flatten(device, tmp_path):
    ours, ref = _pair("LSTM", device, num_layers=2)
    ours32, ref32 = ours.to(torch.float32), copy.deepcopy(ref).to(torch.float32)
    assert all(p.dtype == torch.float32 for p in ours32.parameters())
    x = torch.randn(T, N, I)
    with torch.no_grad():
        assert _err(ours32(x)[0], ref32(x)[0]) <= 1e-5
    ours.to(F64)
    path = tmp_path / "sd.pt"
    torch.save(ours.state_dict(), path)
    fresh = rt.LSTM(I, H, num_layers=2, dtype=F64, cl_device=device)
    fresh.load_state_dict(torch.load(path, weights_only=True), strict=True)
    ref.load_state_dict(torch.load(path, weights_only=True), strict=True)
    x = x.double()
    with torch.no_grad():
        assert _err(fresh(x)[0], ref(x)[0]) <= TOL
    # the whole module through torch.save (a spec string pickles as itself)
    m = rt.GRU(I, H, dtype=F64, cl_device=device.info.index)
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=False)
    with torch.no_grad():
        assert torch.equal(back(x)[0], m(x)[0])
    # flatten_parameters: the parameters become views of one flat tensor again and any device
    # copy is dropped; the next call reads them in place (memory shared with the host) or
    # uploads again; same result
    fresh.weight_hh_l0.data = fresh.weight_hh_l0.data.clone()    # no longer a view
    with torch.no_grad():
        before = fresh(x)[0]
    uploads = rt.STATS["params_uploads"]
    fresh.flatten_parameters()
    assert len({p.untyped_storage().data_ptr() for p in fresh.parameters()}) == 1
    with torch.no_grad():
        assert torch.equal(fresh(x)[0], before)
    assert rt.STATS["params_uploads"] == uploads + (not shares_host_memory(device))


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("given_state", [False, True], ids=["hx-none", "hx-given"])
def test_eager_path_equals_operators(cls, given_state, device, monkeypatch):
    """Eager calls (``_EagerRNN``: cached zero states, only the wanted gradients read, the
    parameters' gradients as views of one flat read, mapped results where the device's memory
    is the host's) give the operators' outputs and gradients bit for bit, in float32."""
    torch.manual_seed(1)
    m = getattr(rt, cls)(7, 5, num_layers=2, bidirectional=True, cl_device=device)
    x = torch.randn(11, 3, 7)
    h0 = torch.randn(4, 3, 5, requires_grad=True)
    hx = ((h0, torch.randn(4, 3, 5, requires_grad=True)) if cls == "LSTM" else h0)
    results = []
    for eager in (True, False):
        monkeypatch.setattr(rt, "_eager", lambda tensors, e=eager: e)
        m.zero_grad()
        for t in (h0, *(hx if cls == "LSTM" else ())):
            t.grad = None
        xi = x.clone().requires_grad_(True)
        y, state = m(xi, hx) if given_state else m(xi)
        flat = list(state) if cls == "LSTM" else [state]
        (y.sum() + sum(s.pow(2).sum() for s in flat)).backward()
        grads = [xi.grad] + [p.grad for p in m.parameters()]
        if given_state:
            grads += [h0.grad] + ([hx[1].grad] if cls == "LSTM" else [])
        results.append([y, *flat, *grads])
    assert all(g is not None for g in results[0])
    for a, b in zip(*results):
        assert torch.equal(a, b)
    # the gradients (mapped device memory on PoCL) stay valid after the module and its device
    # state are gone
    grads = [p.grad for p in m.parameters()]
    kept = [g.clone() for g in grads]
    del m, results
    gc.collect()
    assert all(torch.equal(g, k) for g, k in zip(grads, kept))
