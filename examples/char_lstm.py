#!/usr/bin/env python
"""Character-level LSTM language model trained through ``pyrnn_cl.torch.LSTM``.

The LSTM's forward and backward run in pyrnn_cl's OpenCL kernels (any OpenCL device: a GPU, or
the CPU through PoCL); the embedding, the output layer, the loss and Adam are ordinary PyTorch.
It trains on the opening of *Alice's Adventures in Wonderland* (public domain, see
``examples/data/README.md``), prints the loss per epoch, can save the loss curve as a PNG, and
ends with a line of text sampled from the model.

    python examples/char_lstm.py                   # about a minute on 2 CPU cores with PoCL
    python examples/char_lstm.py --png loss.png    # also save the loss curve (matplotlib)
    python examples/char_lstm.py --quick           # a few seconds (used by the tests)
    python examples/char_lstm.py --device gpu      # any pyrnn_cl device spec

Needs PyTorch, and matplotlib for ``--png`` (tqdm, optional, draws a progress bar):
``pip install "pyrnn_cl[torch,examples]"``.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time

import numpy as np

try:
    import torch
    from torch import nn
except ImportError as exc:
    sys.exit(f'char_lstm.py needs PyTorch ({exc}): pip install "pyrnn_cl[torch,examples]"')

try:
    import pyrnn_cl.torch as rt
except ImportError:        # a source checkout that is not pip-installed: use the repository's
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    import pyrnn_cl.torch as rt

DATA = pathlib.Path(__file__).resolve().parent / "data" / "alice_ch1.txt"


class CharLM(nn.Module):
    """Embedding -> pyrnn_cl LSTM -> linear read-out over the character vocabulary."""

    def __init__(self, vocab, embed, hidden, layers, dropout, cl_device):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = rt.LSTM(embed, hidden, num_layers=layers, dropout=dropout,
                            batch_first=True, cl_device=cl_device)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx, state=None):
        y, state = self.lstm(self.embed(idx), state)
        return self.head(y), state


def progress(iterable, total, desc):
    """tqdm when it is installed, else a plain iterator (the epoch line is printed anyway)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, total=total, desc=desc, leave=False, ncols=80,
                disable=not sys.stderr.isatty())


def batches(data, seq, batch, steps, gen):
    """``steps`` batches of ``batch`` windows of ``seq + 1`` characters at random offsets."""
    for _ in range(steps):
        start = torch.randint(0, len(data) - seq - 1, (batch,), generator=gen)
        win = torch.stack([data[s:s + seq + 1] for s in start.tolist()])
        yield win[:, :-1], win[:, 1:]


@torch.no_grad()
def sample(model, stoi, itos, prime, length, temperature, gen):
    """Feed ``prime``, then draw ``length`` characters one step at a time (T = 1 calls that
    carry the LSTM state)."""
    model.eval()
    idx = torch.tensor([[stoi[c] for c in prime]])
    logits, state = model(idx)
    out = []
    for _ in range(length):
        probs = torch.softmax(logits[0, -1] / temperature, dim=-1)
        nxt = int(torch.multinomial(probs, 1, generator=gen))
        out.append(itos[nxt])
        logits, state = model(torch.tensor([[nxt]]), state)
    model.train()
    return prime + "".join(out)


def save_png(losses, steps_per_epoch, vocab, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    x = np.arange(1, len(losses) + 1) / steps_per_epoch
    ax.plot(x, losses, lw=0.8, label="batch loss")
    k = steps_per_epoch
    if len(losses) >= k:
        ax.plot(np.arange(1, len(losses) // k + 1),
                np.asarray(losses[:len(losses) // k * k]).reshape(-1, k).mean(1), "o-",
                label="epoch mean")
    ax.axhline(math.log(vocab), ls=":", c="gray", label="uniform guess")
    ax.set_xlabel("epoch")
    ax.set_ylabel("cross-entropy (nats/char)")
    ax.set_title("char-LSTM on pyrnn_cl")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--steps", type=int, default=25, help="batches per epoch")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--embed", type=int, default=32)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--seq", type=int, default=64, help="characters per training window")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="pyrnn_cl device spec (default: ranking)")
    p.add_argument("--png", default=None, help="save the loss curve to this PNG file")
    p.add_argument("--sample", type=int, default=120, help="characters to sample at the end")
    p.add_argument("--quick", action="store_true", help="tiny sizes, a few seconds")
    args = p.parse_args(argv)
    if args.png:
        try:        # before training, not after it
            import matplotlib  # noqa: F401
        except ImportError as exc:
            p.error(f'--png needs matplotlib ({exc}): pip install "pyrnn_cl[examples]"')
    if args.quick:
        args.epochs, args.steps, args.hidden, args.embed = 2, 4, 32, 16
        args.seq, args.batch, args.sample = 32, 8, 40
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    text = DATA.read_text()
    itos = sorted(set(text))
    stoi = {c: i for i, c in enumerate(itos)}
    data = torch.tensor([stoi[c] for c in text])
    model = CharLM(len(itos), args.embed, args.hidden, args.layers, args.dropout, args.device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    lossf = nn.CrossEntropyLoss()
    print(f"{len(text)} characters, vocabulary {len(itos)}; LSTM hidden {args.hidden}, "
          f"window {args.seq}, batch {args.batch}; {args.epochs} epochs x {args.steps} steps")

    losses, t0 = [], time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        epoch_losses = []
        it = batches(data, args.seq, args.batch, args.steps, gen)
        for x, y in progress(it, args.steps, f"epoch {epoch}"):
            logits, _ = model(x)
            loss = lossf(logits.reshape(-1, len(itos)), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            epoch_losses.append(loss.item())
        losses += epoch_losses
        print(f"epoch {epoch:2d}  loss {np.mean(epoch_losses):.3f}  "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
    elapsed = time.perf_counter() - t0

    line = sample(model, stoi, itos, "Alice ", args.sample, 0.8, gen)
    print(f"trained in {elapsed:.1f} s; final loss {np.mean(epoch_losses):.3f} "
          f"(uniform guess {math.log(len(itos)):.3f})")
    print("sample: " + line.replace("\n", " "))
    if args.png:
        save_png(losses, args.steps, len(itos), args.png)
        print(f"loss curve saved to {args.png}")
    return dict(losses=losses, final_loss=float(np.mean(epoch_losses)), seconds=elapsed,
                sample=line)


if __name__ == "__main__":
    main()
