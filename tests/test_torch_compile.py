"""pyrnn_cl.torch under torch.compile (fullgraph) and torch.export, and its torch.library ops
under torch.library.opcheck.

The oracle is torch.nn with the same weights (its CPU kernels), in float64: outputs, the final
states and every gradient (input, initial states, parameters) within 1e-9 relative.
"""
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
rt = pytest.importorskip("pyrnn_cl.torch")

pytestmark = [pytest.mark.torch, pytest.mark.fp64]

T, N, I, H = 5, 3, 4, 6
TOL = 1e-9
KW = dict(num_layers=2, bidirectional=True, batch_first=True, dtype=torch.float64)


def _pair(cls, device, **kw):
    torch.manual_seed(0)
    kw = {**KW, **kw}
    ref = getattr(torch.nn, cls)(I, H, **kw)
    ours = getattr(rt, cls)(I, H, cl_device=device, **kw)
    ours.load_state_dict(ref.state_dict(), strict=True)
    return ours, ref


def _inputs(cls, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, T, I, generator=g, dtype=torch.float64)
    h0 = torch.randn(4, N, H, generator=g, dtype=torch.float64)
    c0 = torch.randn(4, N, H, generator=g, dtype=torch.float64)
    return (x, (h0, c0)) if cls == "LSTM" else (x, h0)


def _leaves(args):
    """The tensors of ``(x, hx)``, cloned as leaves that require grad, in the same structure."""
    x, hx = args
    x = x.clone().requires_grad_()
    if isinstance(hx, tuple):
        return x, tuple(t.clone().requires_grad_() for t in hx)
    return x, hx.clone().requires_grad_()


def _flat(args):
    x, hx = args
    return [x] + (list(hx) if isinstance(hx, tuple) else [hx])


def _results(fn, params, args):
    """Outputs of ``fn(*args)`` and the gradients of a fixed random loss w.r.t. the inputs and
    ``params`` (name -> tensor)."""
    args = _leaves(args)
    for p in params.values():
        p.grad = None
    y, hn = fn(*args)
    outs = [y] + (list(hn) if isinstance(hn, tuple) else [hn])
    g = torch.Generator().manual_seed(7)
    loss = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in outs)
    loss.backward()
    grads = [t.grad for t in _flat(args)] + [params[k].grad for k in sorted(params)]
    return [o.detach() for o in outs], grads


def _assert_close(got, want):
    (o1, g1), (o2, g2) = got, want
    assert len(o1) == len(o2) and len(g1) == len(g2)
    for a, b in zip(o1 + g1, o2 + g2):
        assert a is not None and a.shape == b.shape
        err = (a - b).abs().max().item() / max(1e-300, b.abs().max().item())
        assert err <= TOL, f"relative error {err:.2e}"


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
def test_compile_fullgraph_matches_torch_nn(cls, device):
    ours, ref = _pair(cls, device)
    args = _inputs(cls)
    compiled = torch.compile(ours, fullgraph=True)
    want = _results(ref, dict(ref.named_parameters()), args)
    _assert_close(_results(compiled, dict(ours.named_parameters()), args), want)
    # a second call reuses the compiled graph, the device copy of the parameters and, from
    # forward to backward, the reserve space on the device (found, not recomputed)
    uploads, hits = rt.STATS["params_uploads"], rt.STATS["reserve_hits"]
    recomputes = rt.STATS["reserve_recomputes"]
    _assert_close(_results(compiled, dict(ours.named_parameters()), args), want)
    assert rt.STATS["params_uploads"] == uploads
    assert rt.STATS["reserve_hits"] == hits + 1
    assert rt.STATS["reserve_recomputes"] == recomputes


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
def test_export_matches_torch_nn(cls, device):
    ours, ref = _pair(cls, device)
    args = _inputs(cls)
    ep = torch.export.export(ours, args)
    calls = [n for n in ep.graph.nodes if n.target == torch.ops.pyrnn_cl.rnn.default]
    assert len(calls) == 1
    assert calls[0].args[-1] == rt._REVISION      # keys torch's compile caches on our version
    mod = ep.module()
    params = dict(mod.named_parameters())
    assert sorted(params) == sorted(dict(ref.named_parameters()))
    want = _results(ref, dict(ref.named_parameters()), args)
    _assert_close(_results(mod, params, args), want)


def test_exported_program_saved_and_loaded(device):
    """An ExportedProgram of a module built with a device spec string survives
    torch.export.save/load (the ops are found by name once pyrnn_cl.torch is imported)."""
    import io

    torch.manual_seed(0)
    ref = torch.nn.GRU(I, H, **KW)
    ours = rt.GRU(I, H, cl_device=device.info.index, **KW)
    ours.load_state_dict(ref.state_dict(), strict=True)
    x, h0 = _inputs("GRU")
    buf = io.BytesIO()
    torch.export.save(torch.export.export(ours, (x, h0)), buf)
    buf.seek(0)
    loaded = torch.export.load(buf).module()
    with torch.no_grad():
        y, hn = loaded(x, h0)
        y_ref, hn_ref = ref(x, h0)
    assert (y - y_ref).abs().max().item() <= TOL and (hn - hn_ref).abs().max().item() <= TOL


def test_compile_model_without_graph_break(device):
    """A model with a pyrnn_cl LSTM between torch layers compiles into one graph, and trains:
    its parameters after two SGD steps equal those of the same model on torch.nn."""

    class Net(torch.nn.Module):
        def __init__(self, lstm_cls, **kw):
            super().__init__()
            self.inp = torch.nn.Linear(3, I, dtype=torch.float64)
            self.rnn = lstm_cls(I, H, **KW, **kw)
            self.out = torch.nn.Linear(2 * H, 1, dtype=torch.float64)

        def forward(self, x):
            y, (hn, _) = self.rnn(torch.tanh(self.inp(x)))
            return self.out(y).sum() + hn.pow(2).sum()

    torch.manual_seed(0)
    ref = Net(torch.nn.LSTM)
    ours = Net(rt.LSTM, cl_device=device)
    ours.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(N, T, 3, dtype=torch.float64)

    explanation = torch._dynamo.explain(ours)(x)
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0

    compiled = torch.compile(ours, fullgraph=True)
    for model, fn in ((ref, ref), (ours, compiled)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            fn(x).backward()
            opt.step()
    for (name, a), b in zip(ours.named_parameters(), ref.parameters()):
        assert (a - b).abs().max().item() <= TOL * max(1.0, b.abs().max().item()), name


def test_torch_nn_lstm_still_compiles_correctly():
    """Importing pyrnn_cl.torch sets Dynamo's allow_rnn (so that our subclasses of
    torch.nn.LSTM are traced); torch.nn's own LSTM, now traced too, gives its eager results."""
    assert torch._dynamo.config.allow_rnn
    torch.manual_seed(0)
    ref = torch.nn.LSTM(I, H, num_layers=2, dtype=torch.float64)
    x = torch.randn(T, N, I, dtype=torch.float64)
    want = ref(x)[0]
    got = torch.compile(ref)(x)[0]
    assert (got - want).abs().max().item() <= TOL


def _python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True).stdout.split()


def test_import_leaves_dynamo_unloaded_and_sets_allow_rnn_on_its_import():
    """``import pyrnn_cl.torch`` does not import Dynamo (a second of import time); Dynamo's
    config gets ``allow_rnn`` when it is imported, unless the user has set it."""
    loaded, flag = _python("import sys, pyrnn_cl.torch; print('torch._dynamo' in sys.modules); "
                           "import torch._dynamo.config as c; print(c.allow_rnn)")
    assert (loaded, flag) == ("False", "True")
    # Dynamo imported first, and the user's own choice kept
    assert _python("import torch._dynamo.config as c; import pyrnn_cl.torch; "
                   "print(c.allow_rnn)") == ["True"]
    assert _python("import torch._dynamo.config as c; c.allow_rnn = False; "
                   "import pyrnn_cl.torch; print(c.allow_rnn)") == ["False"]


def test_jit_trace_runs(device):
    ours, ref = _pair("GRU", device)
    x, h0 = _inputs("GRU")
    traced = torch.jit.trace(ours, (x, h0))
    y, hn = traced(x, h0)
    y_ref, hn_ref = ref(x, h0)
    assert (y - y_ref).abs().max().item() <= TOL and (hn - hn_ref).abs().max().item() <= TOL


def _op_samples(device):
    """Argument tuples of pyrnn_cl::rnn for opcheck: each mode, with and without the
    things that change the op's path (projection, sequence lengths, dropout, batch-first)."""
    samples = []
    key = rt._device_key(device)
    configs = [("lstm", 2, True, 2, True, 0.0, False, None),
               ("lstm", 1, False, 0, False, 0.0, True, torch.tensor([5, 2, 3])),
               ("gru", 2, True, 0, True, 0.5, False, None),
               ("rnn_tanh", 1, False, 0, True, 0.0, True, None),
               ("rnn_relu", 2, False, 0, False, 0.0, False, torch.tensor([1, 5, 4]))]
    for mode, L, bi, P, bias, dropout, bf, lengths in configs:
        cls = {"lstm": "LSTM", "gru": "GRU"}.get(mode, "RNN")
        kw = dict(num_layers=L, bidirectional=bi, bias=bias, dtype=torch.float64)
        if P:
            kw["proj_size"] = P
        if mode == "rnn_relu":
            kw["nonlinearity"] = "relu"
        torch.manual_seed(3)
        m = getattr(rt, cls)(I, H, **kw)
        params = [p.detach().clone().requires_grad_() for p in m._flat_parameters()]
        D, R = (2 if bi else 1), (P or H)
        x = torch.randn(*((N, T, I) if bf else (T, N, I)), dtype=torch.float64,
                        requires_grad=True)
        h0 = torch.randn(L * D, N, R, dtype=torch.float64, requires_grad=True)
        c0 = (torch.randn(L * D, N, H, dtype=torch.float64, requires_grad=True)
              if mode == "lstm" else torch.empty(0, dtype=torch.float64))
        seeds = torch.tensor([11, 12])
        samples.append((x, h0, c0, params, lengths, seeds, mode, L, I, H, bi, P, bias,
                        dropout, bf, True, key, rt._REVISION))
    return samples


def test_opcheck_forward_and_autograd(device):
    for args in _op_samples(device):
        torch.library.opcheck(torch.ops.pyrnn_cl.rnn.default, args)


def test_opcheck_backward(device):
    for args in _op_samples(device):
        x, h0, c0, params, lengths, seeds, mode, *attrs = args
        attrs, key, revision = attrs[:-3], attrs[-2], attrs[-1]      # less `training`
        with torch.no_grad():
            out, hn, cn, host = torch.ops.pyrnn_cl.rnn(*args)
        grads = (torch.randn_like(out), torch.randn_like(hn),
                 torch.randn_like(cn) if mode == "lstm" else None)
        bargs = tuple(a.detach() if isinstance(a, torch.Tensor) else a
                      for a in (x, h0, c0)) + (
            [p.detach() for p in params], lengths, seeds, host, *grads, mode, *attrs, key, True,
            revision)
        torch.library.opcheck(torch.ops.pyrnn_cl.rnn_backward.default, bargs)
