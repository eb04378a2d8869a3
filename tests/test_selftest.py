"""``pyrnn-cl selftest`` (``pyrnn_cl/selftest.py``) and its private reference
(``pyrnn_cl/_selftest_ref.py``).

* The selftest's own float64 reference agrees with the test-suite's independent references
  (``tests/reference``: mps_ref, tf_ref, cudnn_ref) on every configuration family it covers, so
  a passing selftest means the device matches the documented maths.
* ``main``: exit status 0 when everything matches; 1 on a wrong result, on an op that raises and
  when no kernel ran (nothing tested, pitfalls C14); absent ops are listed, not failed; the CLI
  dispatches to it.
"""

from __future__ import annotations

import numpy as np
import pytest

import pyrnn_cl as rc
from pyrnn_cl import _selftest_ref as ST
from pyrnn_cl import cli, selftest
from reference import cudnn_ref as C
from reference import mps_ref as M
from reference import tf_ref as TF

TOL = 1e-12


def _close(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape
    assert np.max(np.abs(a - b), initial=0.0) <= TOL * max(1.0, np.max(np.abs(b), initial=0.0))


def _r(seed):
    g = np.random.default_rng(seed)
    return lambda *s, k=1.0: k * g.standard_normal(s)


# ---- the selftest reference against tests/reference ------------------------------------------


@pytest.mark.parametrize("bidi,rev,with_w", [(False, False, True), (False, True, False),
                                             (True, False, True), (True, True, False)])
def test_reference_mps_single_gate_and_lstm(bidi, rev, with_w):
    r = _r(0)
    T, N, I, H = 5, 3, 2, 4
    D = 2 if bidi else 1
    for G in (1, 4):
        x = r(T, N, I) if with_w else r(T, N, D * G * H)
        R = r(G * H, H, k=0.5) if D == 1 else r(2, G * H, H, k=0.5)
        W = r(D * G * H, I, k=0.5) if with_w else None
        b, h0, c0 = r(D * G * H), r(N, D * H), r(N, D * H)
        mask = np.random.default_rng(1).uniform(0, 2, (T, N, D * H))
        if G == 1:
            for a in M.ACTIVATIONS:
                mine = ST.mps_rnn(x, R, W, b, h0, mask, activation=a, bidirectional=bidi,
                                  reverse=rev)
                want = M.single_gate_rnn(x, R, W, b, h0, mask, descriptor=M.SingleGateRNNDescriptor(
                    activation=a, bidirectional=bidi, reverse=rev))[0]
                _close(mine, want)
        else:
            p = r(4 * H) if D == 1 else r(2, 4 * H)
            for fgl, acts, cell in ((False, ("sigmoid", "sigmoid", "tanh", "sigmoid"), "tanh"),
                                    (True, ("tanh", "hard_sigmoid", "sigmoid", "relu"), "none")):
                h, c = ST.mps_lstm(x, R, W, b, h0, c0, mask, p, forget_gate_last=fgl, acts=acts,
                                   cell_act=cell, bidirectional=bidi, reverse=rev)
                desc = M.LSTMDescriptor(bidirectional=bidi, reverse=rev, produce_cell=True,
                                        forget_gate_last=fgl, input_gate_activation=acts[0],
                                        forget_gate_activation=acts[1],
                                        cell_gate_activation=acts[2],
                                        output_gate_activation=acts[3], activation=cell)
                want = M.lstm(x, R, W, b, h0, c0, mask, p, descriptor=desc)
                _close(h, want[0])
                _close(c, want[1])


@pytest.mark.parametrize("bidi", [False, True])
@pytest.mark.parametrize("rgf,ra,fz", [(False, False, False), (True, True, True),
                                       (True, False, True), (False, True, False)])
def test_reference_mps_gru(rgf, ra, fz, bidi):
    r = _r(2)
    T, N, I, H = 4, 3, 2, 3
    D = 2 if bidi else 1
    x, W = r(T, N, I), r(D * 3 * H, I, k=0.5)
    R = r(3 * H, H, k=0.5) if D == 1 else r(2, 3 * H, H, k=0.5)
    b, h0, b2 = r(D * 3 * H), r(N, D * H), r(D * H)
    mask = np.random.default_rng(3).uniform(0, 2, (T, N, D * H))
    acts = ("tanh", "sigmoid", "relu") if rgf else ("sigmoid", "sigmoid", "tanh")
    mine = ST.mps_gru(x, R, W, b, h0, mask, b2, reset_gate_first=rgf, reset_after=ra, flip_z=fz,
                      acts=acts, bidirectional=bidi)
    desc = M.GRUDescriptor(bidirectional=bidi, reset_gate_first=rgf, reset_after=ra, flip_z=fz,
                           update_gate_activation=acts[0], reset_gate_activation=acts[1],
                           output_gate_activation=acts[2])
    _close(mine, M.gru(x, R, W, b, h0, mask, b2, descriptor=desc)[0])


def test_reference_tf_ops():
    r = _r(4)
    T, N, I, H = 5, 3, 2, 4
    args = (r(N, I), r(N, H), r(I + H, 2 * H), r(I + H, H), r(2 * H), r(H))
    for a, b in zip(ST.tf_gru_cell(*args), TF.gru_block_cell(*args)):
        _close(a, b)
    cell = (r(N, I), r(N, H), r(N, H), r(I + H, 4 * H, k=0.5), r(H), r(H), r(H), r(4 * H))
    for kw in (dict(forget_bias=1.0, cell_clip=0.5, use_peephole=True),
               dict(forget_bias=0.3, cell_clip=0.0, use_peephole=False)):
        for a, b in zip(ST.tf_lstm_cell(*cell, **kw), TF.lstm_block_cell(*cell, **kw)):
            _close(a, b)
    seq = (r(T, N, I),) + cell[1:]
    for slm in (T, 2, 0):
        kw = dict(forget_bias=1.0, cell_clip=3.0, use_peephole=True)
        for a, b in zip(ST.tf_block_lstm(slm, *seq, **kw), TF.block_lstm(slm, *seq, **kw)):
            _close(a, b)
        kw = dict(cell_clip=0.7, use_peephole=True)
        for a, b in zip(ST.tf_block_lstm(slm, *seq, forget_bias=0.0, layout="ifco", **kw),
                        TF.block_lstm_v2(slm, *seq, **kw)):
            _close(a, b)


@pytest.mark.parametrize("mode,L,D,P,skip,lengths", [
    ("lstm", 2, 2, 0, False, [4, 0, 2]), ("lstm", 2, 1, 2, False, None),
    ("gru", 3, 2, 0, False, [1, 4, 3]), ("rnn_tanh", 1, 2, 0, True, None),
    ("rnn_relu", 2, 1, 0, False, [0, 4, 4])])
def test_reference_cudnn(mode, L, D, P, skip, lengths):
    r = _r(5)
    T, N, H = 4, 3, 3
    I = H if skip else 2
    kw = dict(rnn_mode=mode, input_mode="skip_input" if skip else "linear_input",
              direction="bidirectional" if D == 2 else "unidirectional", num_proj=P)
    ws, bs = ST.cudnn_counts(L, H, I, mode, D, P, skip)
    assert (ws, bs) == tuple([list(map(tuple, s)) for s in C.canonical_shapes(L, H, I, **kw)])
    params = r(C.params_size(L, H, I, **kw), k=0.5)
    x, h0, c0 = r(T, N, I), r(L * D, N, P or H), r(L * D, N, H)
    lens = None if lengths is None else np.array(lengths)
    mine = ST.cudnn_forward(x, h0, c0 if mode == "lstm" else None, params, lens, L=L, H=H,
                            mode=mode, D=D, P=P, skip=skip)
    want = C.cudnn_rnn_forward(x, h0, c0 if mode == "lstm" else None, params, lens, **kw)
    _close(mine[0], want[0])
    _close(mine[1], want[1])
    if mode == "lstm":
        _close(mine[2], want[2])
    # the unpacking is the documented layout: C's canonical conversion agrees
    weights, biases = C.params_to_canonical(L, H, I, params, **kw)
    layers = ST.cudnn_unpack(params, L, H, I, mode, D, P, skip)
    mine_w = [w for row in layers for p in row for w in
              (p["W"] or []) + p["R"] + ([p["Wp"]] if P else [])]
    mine_b = [b for row in layers for p in row for b in p["bW"] + p["bR"]]
    assert len(mine_w + mine_b) == len(weights + biases)
    for a, b in zip(mine_w + mine_b, weights + biases):
        _close(a, b)


# ---- main ----------------------------------------------------------------------------------------


def test_selftest_passes_on_the_device(device, capsys):
    status = selftest.main(["--device", device.info.index, "--only", "single_gate_rnn",
                            "--only", "block_lstm_v2"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "single_gate_rnn" in out and "block_lstm_v2" in out and out.rstrip().endswith("OK")
    assert out.count(" ok") == 3


def test_selftest_fails_on_a_wrong_forward(device, capsys, monkeypatch):
    real = rc.single_gate_rnn

    def wrong(*args, **kwargs):
        out = real(*args, **kwargs)
        out[0] = out[0] * (1 + 1e-6)
        return out

    monkeypatch.setattr(rc, "single_gate_rnn", wrong)
    status = selftest.main(["--device", device.info.index, "--only", "single_gate_rnn"])
    out = capsys.readouterr().out
    assert status == 1
    assert "FAIL" in out and "did not match" in out


def test_selftest_fails_on_a_wrong_gradient_and_on_errors(device, capsys, monkeypatch):
    real = rc.single_gate_rnn_gradients

    def wrong(*args, **kwargs):
        out = real(*args, **kwargs)
        out[1] = out[1] * 1.001
        return out

    def broken(*args, **kwargs):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(rc, "single_gate_rnn_gradients", wrong)
    results = selftest.run_checks(device, np.float32, only=["single_gate_rnn"])
    assert [r.status for r in results] == ["FAIL", "FAIL"]
    monkeypatch.setattr(rc, "single_gate_rnn_gradients", broken)
    status = selftest.main(["--device", device.info.index, "--only", "single_gate_rnn"])
    out = capsys.readouterr().out
    assert status == 1
    assert "ERROR" in out and "kernel exploded" in out


def test_selftest_absent_ops_are_listed_not_failed(device, monkeypatch):
    monkeypatch.delattr(rc, "block_lstm_grad_v2")
    results = selftest.run_checks(device, np.float32, only=["block_lstm"])
    status = {r.check.op: r.status for r in results}
    assert status == {"block_lstm": "ok", "block_lstm_v2": "absent"}


def test_selftest_fails_when_no_kernel_ran(device, capsys, monkeypatch):
    import pyrnn_cl.programs

    monkeypatch.setattr(pyrnn_cl.programs, "launch_count", lambda: 7)
    status = selftest.main(["--device", device.info.index, "--only", "single_gate_rnn"])
    out = capsys.readouterr().out
    assert status == 1 and "no kernel ran" in out


def test_selftest_float16(device, capsys):
    """Every op in float16 storage against the float64 reference on the unrounded inputs."""
    status = selftest.main(["--device", device.info.index, "--dtype", "float16"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "dtype: float16" in out and "FAIL" not in out and "ERROR" not in out


def test_selftest_usage_errors(capsys):
    assert selftest.main(["--device", "no-such-device-xyz"]) == 2
    with pytest.raises(SystemExit):
        selftest.main(["--dtype", "int8"])


def test_cli_dispatches_to_selftest(device, capsys):
    status = cli.main(["selftest", "--device", device.info.index, "--dtype", "float32",
                       "--only", "gru_block_cell"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "dtype: float32" in out and "gru_block_cell" in out
