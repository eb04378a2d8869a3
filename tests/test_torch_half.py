"""``pyrnn_cl.torch`` modules in float16 and bfloat16 (``.half()``, ``.to(torch.bfloat16)``).

Outputs and every gradient come back in the module's dtype. They are held against ``torch.nn``
in float64 evaluated on the same 16-bit-rounded weights, inputs and initial states (within 2e-2
relative, in norm), and against ``torch.nn`` itself in the same 16-bit dtype on the CPU:
pyrnn_cl must not be less accurate (its products and cell maths run in float32).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
rt = pytest.importorskip("pyrnn_cl.torch")

T, N, I, H = 23, 5, 7, 11      # asymmetric primes
DTYPES = [torch.float16, torch.bfloat16]


def _rel(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


def _run(module, x, state, dy):
    """Forward and backward of ``module``; returns the output and the gradients of the input,
    the initial state(s) and every parameter."""
    x = x.clone().requires_grad_(True)
    if isinstance(state, tuple):
        state = tuple(s.clone().requires_grad_(True) for s in state)
        leaves = [x, *state]
    else:
        state = state.clone().requires_grad_(True)
        leaves = [x, state]
    y = module(x, state)[0]
    grads = torch.autograd.grad(y, leaves + list(module.parameters()), dy)
    return y, grads


@pytest.mark.parametrize("dtype", DTYPES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_16_bit_modules_against_float64_and_torch(device, mode, dtype):
    if dtype not in rt._DTYPES:
        pytest.skip("torch.bfloat16 needs ml_dtypes")
    torch.manual_seed(1)
    kw = dict(num_layers=2, bidirectional=True)
    ours = getattr(rt, mode)(I, H, cl_device=device, **kw)
    ours = ours.half() if dtype == torch.float16 else ours.to(dtype)
    exact = getattr(torch.nn, mode)(I, H, **kw).double()
    exact.load_state_dict({k: v.double() for k, v in ours.state_dict().items()})
    same = getattr(torch.nn, mode)(I, H, **kw).to(dtype)
    same.load_state_dict(ours.state_dict())

    x = torch.randn(T, N, I).to(dtype)
    h0 = (0.5 * torch.randn(4, N, H)).to(dtype)
    state = (h0, (0.5 * torch.randn(4, N, H)).to(dtype)) if mode == "LSTM" else h0
    dy = torch.randn(T, N, 2 * H).to(dtype)

    def double(s):
        return tuple(t.double() for t in s) if isinstance(s, tuple) else s.double()

    y, grads = _run(ours, x, state, dy)
    y64, grads64 = _run(exact, x.double(), double(state), dy.double())
    y16, grads16 = _run(same, x, state, dy)
    assert y.dtype == dtype and all(g.dtype == dtype for g in grads)
    errors = [_rel(y, y64)] + [_rel(g, w) for g, w in zip(grads, grads64)]
    torch_errors = [_rel(y16, y64)] + [_rel(g, w) for g, w in zip(grads16, grads64)]
    assert max(errors) <= 2e-2, errors
    # no less accurate than torch.nn in the same dtype (a little slack for ties in rounding)
    for k, (e, te) in enumerate(zip(errors, torch_errors)):
        assert e <= max(1.1 * te, 2e-3), (k, e, te)


def test_module_half_then_float_round_trip(device):
    """``.half()`` then ``.float()`` gives a float32 module that runs, with the rounded weights."""
    m = rt.LSTM(I, H, cl_device=device).half()
    x = torch.randn(T, N, I)
    assert m(x.half())[0].dtype == torch.float16
    back = m.float()
    assert back(x)[0].dtype == torch.float32
    with pytest.raises(ValueError, match="dtype"):
        back(x.half())


_BF16_RUN = """
import sys
if {block}:
    sys.modules["ml_dtypes"] = None            # as if not installed: import fails
import torch, pyrnn_cl.sources as S, pyrnn_cl.torch as rt
assert (S.BFLOAT16 is None) == {block}
torch.manual_seed(3)
m = rt.GRU(7, 11, num_layers=2, bidirectional=True, cl_device={device!r}).to(torch.bfloat16)
x = torch.randn(23, 5, 7).to(torch.bfloat16).requires_grad_(True)
y = m(x)[0]
y.float().pow(2).sum().backward()
torch.save([y.detach(), x.grad] + [p.grad for p in m.parameters()], {path!r})
"""


def test_bfloat16_without_ml_dtypes(device, tmp_path):
    """torch.bfloat16 modules work without ml_dtypes (their bits travel in
    ``sources.BFLOAT16_BITS``), bit for bit as with it; NumPy users still need ml_dtypes."""
    results = []
    for block in (False, True):
        path = tmp_path / f"block{block}.pt"
        code = _BF16_RUN.format(block=block, device=device.info.index, path=str(path))
        subprocess.run([sys.executable, "-c", code], check=True, timeout=600)
        results.append(torch.load(path))
    assert all(t.dtype == torch.bfloat16 for t in results[1])
    for a, b in zip(*results):
        assert torch.equal(a, b)



def test_storage_names_without_ml_dtypes():
    """The error message lists what NumPy users can pass: not the bridge's bits container."""
    code = ("import sys; sys.modules['ml_dtypes'] = None; import pyrnn_cl.sources as S; "
            "print(S.storage_names())")
    out = subprocess.run([sys.executable, "-c", code], check=True, timeout=300,
                         capture_output=True, text=True).stdout.strip()
    assert out == "float32, float64 or float16"
