"""pyrnn_cl's TensorFlow dialect against TensorFlow's own raw ops (float32).

TensorFlow is not a test dependency: the ops run in a separate interpreter that has it
(``PYRNN_CL_TF_PYTHON``, default ``/opt/tfvenv/bin/python``; see ``tests/external/tf_oracle.py``)
and the test skips when there is none. Gradient ops get the same forward activations on both
sides (ours), so each op is compared on identical inputs. TF leaves i, f, o, ci, co of BlockLSTM
uninitialised past ``seq_len_max``; there only cs and h (zero on both sides) are compared.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pyrnn_cl as rc

TF_PYTHON = os.environ.get("PYRNN_CL_TF_PYTHON", "/opt/tfvenv/bin/python")
ORACLE = Path(__file__).parent / "external" / "tf_oracle.py"

T, N, I, H, SEQ = 6, 3, 5, 4, 4
LSTM_ATTRS = [(1.0, 3.0, False), (0.5, 0.0, True), (0.0, 0.4, True)]   # forget_bias, clip, peep


def _have_tf():
    if not os.path.exists(TF_PYTHON):
        return False
    probe = subprocess.run([TF_PYTHON, "-c", "import tensorflow"], capture_output=True)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not _have_tf(), reason=f"no TensorFlow interpreter at "
                                                         f"{TF_PYTHON} (PYRNN_CL_TF_PYTHON)")


def _problems():
    """Inputs of every case, our outputs, and the arguments TF gets."""
    rng = np.random.default_rng(7)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    tf_in, ours = {}, {}

    x1, h1 = f32(N, I), f32(N, H)
    w_ru, w_c, b_ru, b_c = f32(I + H, 2 * H) * 0.5, f32(I + H, H) * 0.5, f32(2 * H), f32(H)
    fwd = rc.gru_block_cell(x1, h1, w_ru, w_c, b_ru, b_c)
    d_h = f32(N, H)
    ours["GRUBlockCell.0"] = fwd
    tf_in["GRUBlockCell.0"] = dict(x=x1, h_prev=h1, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c)
    ours["GRUBlockCellGrad.0"] = rc.gru_block_cell_grad(x1, h1, w_ru, w_c, b_ru, b_c, *fwd[:3],
                                                        d_h)
    tf_in["GRUBlockCellGrad.0"] = dict(tf_in["GRUBlockCell.0"], r=fwd[0], u=fwd[1], c=fwd[2],
                                       d_h=d_h)

    w, b = f32(I + H, 4 * H) * 0.5, f32(4 * H)
    wci, wcf, wco = f32(H), f32(H), f32(H)
    cs1 = f32(N, H)
    for k, (fb, clip, peep) in enumerate(LSTM_ATTRS):
        args = dict(x=x1, cs_prev=cs1, h_prev=h1, w=w, wci=wci, wcf=wcf, wco=wco, b=b)
        cell = rc.lstm_block_cell(*args.values(), forget_bias=fb, cell_clip=clip,
                                  use_peephole=peep)
        ours[f"LSTMBlockCell.{k}"] = cell
        tf_in[f"LSTMBlockCell.{k}"] = dict(args, attr_forget_bias=np.float32(fb),
                                           attr_cell_clip=np.float32(clip),
                                           attr_use_peephole=np.bool_(peep))
        cs_grad, h_grad = f32(N, H), f32(N, H)
        ours[f"LSTMBlockCellGrad.{k}"] = rc.lstm_block_cell_grad(
            *args.values(), *cell[:6], cs_grad, h_grad, use_peephole=peep)
        tf_in[f"LSTMBlockCellGrad.{k}"] = dict(
            args, i=cell[0], cs=cell[1], f=cell[2], o=cell[3], ci=cell[4], co=cell[5],
            cs_grad=cs_grad, h_grad=h_grad, attr_use_peephole=np.bool_(peep))

    x = f32(T, N, I)
    for v2, op in ((False, "BlockLSTM"), (True, "BlockLSTMV2")):
        for k, (fb, clip, peep) in enumerate(LSTM_ATTRS):
            args = dict(seq_len_max=np.int64(SEQ), x=x, cs_prev=cs1, h_prev=h1, w=w, wci=wci,
                        wcf=wcf, wco=wco, b=b)
            kw = dict(cell_clip=clip, use_peephole=peep)
            attrs = dict(attr_cell_clip=np.float32(clip), attr_use_peephole=np.bool_(peep))
            if not v2:
                kw["forget_bias"] = fb
                attrs["attr_forget_bias"] = np.float32(fb)
            fwd = (rc.block_lstm_v2 if v2 else rc.block_lstm)(*args.values(), **kw)
            ours[f"{op}.{k}"] = fwd
            tf_in[f"{op}.{k}"] = dict(args, **attrs)
            cs_grad, h_grad = f32(T, N, H), f32(T, N, H)
            grad = rc.block_lstm_grad_v2 if v2 else rc.block_lstm_grad
            ours[f"{op.replace('LSTM', 'LSTMGrad')}.{k}"] = grad(
                *args.values(), *fwd, cs_grad, h_grad, use_peephole=peep)
            tf_in[f"{op.replace('LSTM', 'LSTMGrad')}.{k}"] = dict(
                args, i=fwd[0], cs=fwd[1], f=fwd[2], o=fwd[3], ci=fwd[4], co=fwd[5], h=fwd[6],
                cs_grad=cs_grad, h_grad=h_grad, attr_use_peephole=np.bool_(peep))
    return tf_in, ours


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tf_in, ours = _problems()
    tmp = tmp_path_factory.mktemp("tf")
    src, dst = tmp / "in.npz", tmp / "out.npz"
    np.savez(src, **{f"{case}/{k}": v for case, a in tf_in.items() for k, v in a.items()})
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    run = subprocess.run([TF_PYTHON, str(ORACLE), str(src), str(dst)], capture_output=True,
                         text=True, env=env, timeout=600)
    if run.returncode:
        print(run.stderr, file=sys.stderr)
    assert run.returncode == 0, run.stderr[-3000:]
    got = np.load(dst)
    theirs = {}
    for key in got.files:
        case, i = key.rsplit("/", 1)
        theirs.setdefault(case, {})[int(i)] = got[key]
    return ours, {c: [v[i] for i in sorted(v)] for c, v in theirs.items()}


CASES = (["GRUBlockCell.0", "GRUBlockCellGrad.0"]
         + [f"{op}.{k}" for op in ("LSTMBlockCell", "LSTMBlockCellGrad", "BlockLSTM",
                                   "BlockLSTMGrad", "BlockLSTMV2", "BlockLSTMGradV2")
            for k in range(len(LSTM_ATTRS))])


@pytest.mark.parametrize("case", CASES)
def test_matches_tensorflow(results, case):
    ours, theirs = results
    mine, tf_out = ours[case], theirs[case]
    assert len(mine) == len(tf_out)
    op = case.split(".")[0]
    for idx, (a, b) in enumerate(zip(mine, tf_out)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, (case, idx, a.shape, b.shape)
        if op in ("BlockLSTM", "BlockLSTMV2") and idx in (0, 2, 3, 4, 5):
            a, b = a[:SEQ], b[:SEQ]     # TF leaves these uninitialised past seq_len_max
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5 * scale,
                                   err_msg=f"{case} output {idx}")
