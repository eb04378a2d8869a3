"""pyrnn_cl.torch modules under torch.nn.parallel.DistributedDataParallel (gloo backend, two
processes on this machine, each with its own OpenCL context), eagerly and under torch.compile
(the compiled DDP model).

Each rank trains the same model (same initial weights) for 3 SGD steps on its own data. DDP
averages the gradients, so afterwards both replicas must hold identical parameters, different
from the initial ones — and equal to plain full-batch training of a torch.nn model with the same
initial weights on both ranks' data (the oracle; float32 tolerance).
"""
import os
import socket
import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

pytestmark = [pytest.mark.torch]

WORLD, STEPS, LR = 2, 3, 0.5
T, N, I, H = 6, 4, 5, 8
TIMEOUT_S = 300            # the compiled run compiles in each process


class Net(torch.nn.Module):
    """A 2-layer bidirectional LSTM (ours or torch.nn's) and a linear read-out."""

    def __init__(self, lstm_cls):
        super().__init__()
        self.rnn = lstm_cls(I, H, num_layers=2, bidirectional=True)
        self.head = torch.nn.Linear(2 * H, 1)

    def forward(self, x):
        y, (hn, _) = self.rnn(x)
        return self.head(y).squeeze(-1), hn


def _data(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(T, N, I, generator=g), torch.randn(T, N, generator=g)


def _loss(net, x, target):
    y, hn = net(x)
    return ((y - target) ** 2).mean() + 0.1 * hn.pow(2).mean()


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, port, out_dir, compiled):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP

        import pyrnn_cl.torch as rt

        torch.manual_seed(0)          # same initial weights on every rank (DDP broadcasts too)
        net = Net(rt.LSTM)
        init = {k: v.clone() for k, v in net.state_dict().items()}
        ddp = DDP(net)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        model = torch.compile(ddp) if compiled else ddp
        for step in range(STEPS):
            opt.zero_grad()
            _loss(model, *_data(rank, step)).backward()
            opt.step()
        torch.save({"init": init, "final": net.state_dict()},
                   os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "torch.compile"])
def test_ddp_two_processes_agree(compiled, tmp_path):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    ctx = mp.start_processes(_worker, args=(_free_port(), str(tmp_path), compiled), nprocs=WORLD,
                             join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                raise AssertionError(f"DDP workers did not finish within {TIMEOUT_S} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
    res = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for k, v in res[0]["final"].items():
        assert torch.equal(v, res[1]["final"][k]), f"replicas differ in {k}"
        assert torch.equal(res[0]["init"][k], res[1]["init"][k]), k
        assert not torch.equal(v, res[0]["init"][k]), f"{k} did not change"

    # oracle: torch.nn, full batch of both ranks' data, gradient = mean of the ranks' gradients
    ref = Net(torch.nn.LSTM)
    ref.load_state_dict(res[0]["init"], strict=True)
    opt = torch.optim.SGD(ref.parameters(), lr=LR)
    for step in range(STEPS):
        opt.zero_grad()
        (sum(_loss(ref, *_data(r, step)) for r in range(WORLD)) / WORLD).backward()
        opt.step()
    for k, v in ref.state_dict().items():
        err = (v - res[0]["final"][k]).abs().max().item()
        assert err < 1e-5, f"{k}: DDP result differs from full-batch torch.nn by {err:.2e}"
