"""Kernel sanitising: one small, representative call of every kernel family, run under
Oclgrind's checkers by ``ci/oclgrind-tests.sh`` / ``tox -e oclgrind`` (marker ``oclgrind``):
out-of-bounds and invalid accesses, data races (``OCLGRIND_DATA_RACES=1``); the run fails on any
report. On other devices the same calls are ordinary correctness tests (float32, against the
float64 references or NumPy).

Sizes are chosen so that no work-group is full and no size divides a tile: hidden sizes
H = 1, 3, 33, 257 (vector width 1; a 33rd and a 257th unit past every power of two) and H = 8, 12
(vector widths 8 and 4, also with explicit work-groups of row blocks), batches
N = 1, 5 and 513 (one row past a multiple of every row block), GEMM sizes 1, 3, 33, 257 and
513 in every transposition, and widths that are not multiples of 4 (dropout) or of the
reduction's vector width.

Kernels covered (``cl/*.cl``): recurrence (``pyrnn_fwd``, ``pyrnn_fwd_b``, ``pyrnn_proj``,
``pyrnn_fwd_seq`` with the input product, ``pyrnn_bwd_seq``,
``pyrnn_bwd``, ``pyrnn_bwd_b``, ``pyrnn_bwd_proj``, ``pyrnn_pack``, ``pyrnn_pack_t``,
``pyrnn_final``, ``pyrnn_gather_hin``, ``pyrnn_peep_grad``) for the RNN, LSTM and both GRU
cells, also with products split over work-groups (``REC_KS``); gemm (outer-product, dot and
pack kernels in each launch mode, and the local-memory tiled kernel); ``pyrnn_sum_rows`` (one
and two passes); util (``pyrnn_add_rows``, ``pyrnn_copy3``, ``pyrnn_act_map``, ``pyrnn_mul``);
dropout (``pyrnn_dropout``, ``pyrnn_philox``); ``pyrnn_axpy`` (selfcheck).
"""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

import pyrnn_cl as rc
from helpers.device import PER_STEP, override_tuning
from pyrnn_cl import cudnn, gemm
from pyrnn_cl.programs import enqueue, get_program
from reference import cudnn_ref as C
from reference import mps_ref as M
from reference import tf_ref as TF

pytestmark = pytest.mark.oclgrind

F32 = np.float32


def _r(rng, *shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(F32)


def _close(ours, want, what, rtol=2e-4, atol=2e-5):
    np.testing.assert_allclose(np.asarray(ours, np.float64), np.asarray(want, np.float64),
                               rtol=rtol, atol=atol, err_msg=what)


def _all_close(ours, want, what):
    assert len(ours) == len(want), what
    for k, (a, b) in enumerate(zip(ours, want)):
        _close(a, b, f"{what} output {k}")


def _mps(kind, device, a, desc, dy_seed=1):
    """Forward + gradients of an MPSGraph op against ``mps_ref``."""
    fwd, grad, rfwd, rgrad = {
        "rnn": (rc.single_gate_rnn, rc.single_gate_rnn_gradients, M.single_gate_rnn,
                M.single_gate_rnn_gradients),
        "lstm": (rc.lstm, rc.lstm_gradients, M.lstm, M.lstm_gradients),
        "gru": (rc.gru, rc.gru_gradients, M.gru, M.gru_gradients)}[kind]
    outs = fwd(**a, descriptor=desc, device=device)
    want = rfwd(**a, descriptor=desc)
    _close(outs[0], want[0], f"{kind} h")
    rng = np.random.default_rng(dy_seed)
    dy = _r(rng, *outs[0].shape)
    opt = {k: v for k, v in a.items() if k not in ("source", "recurrent_weight")}
    pos = [a["source"], a["recurrent_weight"], dy, outs[-1]]
    rpos = [a["source"], a["recurrent_weight"], dy, None]
    if kind != "rnn":
        pos.append(outs[1] if kind == "lstm" else outs[0])
        rpos.append(None)
    extra = {"state_gradient": _r(rng, *a["init_state"].shape)} if "init_state" in a else {}
    got = grad(*pos, **opt, **extra, descriptor=desc, device=device)
    _all_close(got, rgrad(*rpos, **opt, **extra, descriptor=desc), f"{kind} gradients")


def test_rnn_hidden_257_batch_1(device):
    """Single-gate RNN, H = 257, N = 1, with a mask: fwd/bwd/pack/gather_hin (h from z)."""
    rng = np.random.default_rng(0)
    T, N, I, H = 2, 1, 2, 257
    a = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, H, H, scale=0.05),
             input_weight=_r(rng, H, I), bias=_r(rng, H), init_state=_r(rng, N, H),
             mask=(rng.uniform(size=(T, N, H)) > 0.3).astype(F32))
    _mps("rnn", device, a, rc.SingleGateRNNDescriptor(activation="tanh", training=True))


def test_lstm_bidirectional_peephole_batch_5(device):
    """LSTM, H = 3, N = 5 (a row-block tail), bidirectional, peepholes, mask, both states:
    also ``pyrnn_peep_grad`` and ``pyrnn_gather_hin`` computing h from the saved gates."""
    rng = np.random.default_rng(1)
    T, N, I, H = 3, 5, 4, 3
    a = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, 2, 4 * H, H),
             input_weight=_r(rng, 8 * H, I), bias=_r(rng, 8 * H), init_state=_r(rng, N, 2 * H),
             init_cell=_r(rng, N, 2 * H), mask=rng.uniform(0.5, 1.5, (T, N, 2 * H)).astype(F32),
             peephole=_r(rng, 2, 4 * H))
    _mps("lstm", device, a, rc.LSTMDescriptor(bidirectional=True, training=True,
                                              forget_gate_last=True))


@pytest.mark.parametrize("H,N,reset_after", [(33, 5, True), (1, 1, False)])
def test_gru_both_reset_conventions(device, H, N, reset_after):
    """GRU reset-after (hidden-side bias from ``secondary_bias``) and reset-before (the
    two-phase ``pyrnn_fwd_b`` / ``pyrnn_bwd_b``), reversed."""
    rng = np.random.default_rng(2)
    T, I = 3, 2
    a = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, 3 * H, H, scale=0.3),
             input_weight=_r(rng, 3 * H, I), bias=_r(rng, 3 * H), init_state=_r(rng, N, H),
             secondary_bias=_r(rng, H))
    _mps("gru", device, a, rc.GRUDescriptor(reset_after=reset_after, reverse=True,
                                             training=True))


def test_vector_widths_and_explicit_work_groups(device, monkeypatch):
    """The vector paths of the step kernels (vload/vstore of REC_VW units): an LSTM with H = 8
    (8-wide vectors with the default tuning of most profiles), then a bidirectional reset-after
    GRU with H = 12 under REC_VW = 4, REC_NB = 3, REC_WG = 2: explicit work-groups of 2 row
    blocks, N = 11, so the last block's 12th row is idle; the same GRU in tiles of 8 rows
    (REC_ACC_MAX); an LSTM whose forward and backward tiles differ in rows."""
    rng = np.random.default_rng(7)
    T, N, I, H = 3, 3, 2, 8
    a = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, 4 * H, H, scale=0.3),
             input_weight=_r(rng, 4 * H, I), bias=_r(rng, 4 * H), init_state=_r(rng, N, H),
             init_cell=_r(rng, N, H))
    _mps("lstm", device, a, rc.LSTMDescriptor(training=True))
    override_tuning(device, monkeypatch, REC_VW=4, REC_VW_F64=4, REC_NB=3, REC_WG=2,
                    REC_ACC_MAX=0)
    T, N, H = 3, 11, 12
    g = dict(source=_r(rng, T, N, 6 * H), recurrent_weight=_r(rng, 2, 3 * H, H, scale=0.3),
             init_state=_r(rng, N, 2 * H), secondary_bias=_r(rng, 2 * H))
    gru = rc.GRUDescriptor(bidirectional=True, reset_after=True, flip_z=True, training=True)
    _mps("gru", device, g, gru)
    # tiles of 8 rows (REC_ACC_MAX: 8 x 3 gates), the second block 3 rows short
    override_tuning(device, monkeypatch, REC_VW=4, REC_VW_F64=4, REC_NB=4, REC_ACC_MAX=24)
    _mps("gru", device, g, gru)
    # an LSTM whose forward tiles have 2 rows and backward tiles 4 (REC_ACC_MAX = 8, as an
    # LSTM on AVX2), N = 5: the last tile of each short
    override_tuning(device, monkeypatch, REC_VW=4, REC_VW_F64=4, REC_NB=4, REC_ACC_MAX=8)
    T, N, I, H = 3, 5, 2, 8
    a = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, 4 * H, H, scale=0.3),
             input_weight=_r(rng, 4 * H, I), bias=_r(rng, 4 * H), init_state=_r(rng, N, H),
             init_cell=_r(rng, N, H))
    _mps("lstm", device, a, rc.LSTMDescriptor(training=True))


def test_split_products_over_work_groups(device, monkeypatch):
    """Step kernels whose products are split over REC_KS = 4 work-items (a work-group per tile,
    sums through local memory with barriers: what GPUs run): a two-phase GRU (``pyrnn_fwd_b``,
    ``pyrnn_bwd_b``), H = 12 (K = 12 terms: three per lane), N = 5 (a row-block tail), and a
    bidirectional LSTM with a projection and lengths (``pyrnn_proj``, ``pyrnn_bwd_proj``)
    through the cuDNN dialect."""
    override_tuning(device, monkeypatch, REC_VW=2, REC_VW_F64=2, REC_NB=2, REC_KS=4,
                    **PER_STEP)
    rng = np.random.default_rng(9)
    T, N, I, H = 3, 5, 4, 12
    g = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, 3 * H, H, scale=0.3),
             input_weight=_r(rng, 3 * H, I), bias=_r(rng, 3 * H), init_state=_r(rng, N, H))
    _mps("gru", device, g, rc.GRUDescriptor(reset_after=False, training=True))
    L, D, H, P = 1, 2, 6, 4
    x = _r(rng, T, N, I)
    h0, c0 = _r(rng, L * D, N, P), _r(rng, L * D, N, H)
    params = _r(rng, cudnn.cudnn_rnn_params_size(L, H, I, rnn_mode="lstm", num_proj=P,
                                                direction="bidirectional"), scale=0.3)
    kw = dict(rnn_mode="lstm", num_proj=P, direction="bidirectional")
    lens = np.array([3, 1, 0, 2, 3])
    out = rc.cudnn_rnn(x, h0, c0, params, lens, device=device, **kw)
    _all_close(out[:3], C.cudnn_rnn_forward(x, h0, c0, params, lens, **kw), "cudnn_rnn proj")
    up = (_r(rng, T, N, D * P), _r(rng, L * D, N, P), _r(rng, L * D, N, H))
    got = rc.cudnn_rnn_backprop(x, h0, c0, params, lens, *out[:3], *up, *out[3:], device=device,
                                **kw)
    _all_close(got, C.cudnn_rnn_backward(x, h0, c0, params, lens, *up, **kw), "cudnn backprop")


@pytest.mark.parametrize("loop,I", [(0, 16), (1, 16), (1, 5)],
                         ids=["item-per-vector", "one-item-loop", "one-item-loop-I5"])
def test_whole_sequence_kernels_with_the_input_product(device, monkeypatch, loop, I):
    """``pyrnn_fwd_seq`` (with the input product x W^T + b in the kernel, ``HAS_XW``) and
    ``pyrnn_bwd_seq``, forced on with ``REC_SEQ_BYTES``: a bidirectional LSTM with a mask, H = 8,
    I = 16 (a multiple of the vector width) or 5 (W's last column packed alone), N = 5 (a
    row-block tail). Both work-group layouts: a work-item per vector of units (GPUs) and one
    work-item looping over them (``REC_SEQ_LOOP``, CPUs)."""
    override_tuning(device, monkeypatch, REC_VW=4, REC_VW_F64=4, REC_NB=2, REC_SEQ_BYTES=1 << 20,
                    REC_ACC_MAX=0, REC_SEQ_LOOP=loop)
    rng = np.random.default_rng(8)
    T, N, H = 3, 5, 8
    a = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, 2, 4 * H, H, scale=0.3),
             input_weight=_r(rng, 8 * H, I), bias=_r(rng, 8 * H), init_state=_r(rng, N, 2 * H),
             init_cell=_r(rng, N, 2 * H), mask=rng.uniform(0.5, 1.5, (T, N, 2 * H)).astype(F32))
    _mps("lstm", device, a, rc.LSTMDescriptor(bidirectional=True, training=True))


@pytest.mark.parametrize("launch", ["whole-sequence", "per-step-split"])
def test_partial_last_vector_of_units(device, monkeypatch, launch):
    """A last vector of units that is partial (``REC_TAIL``: H no multiple of REC_VW = 4): its
    element-wise loads and stores, and the packs' zero padding (``pyrnn_pack``,
    ``pyrnn_pack_t``), must stay inside every buffer. A bidirectional LSTM with peepholes and
    a mask, H = 11 (vectors of 4, 4 and 3 units), I = 5, N = 5; and a reset-before GRU (the
    two-phase ``pyrnn_fwd_b`` / ``pyrnn_bwd_b``), H = 7. Whole-sequence kernels (one
    work-item looping over the vectors, the input product inside the forward) or per-step
    kernels with the products split over 2 work-items."""
    kinds = {"whole-sequence": dict(REC_SEQ_BYTES=1 << 20, REC_SEQ_LOOP=1),
             "per-step-split": dict(PER_STEP, REC_KS=2)}
    override_tuning(device, monkeypatch, REC_VW=4, REC_VW_F64=4, REC_NB=2, REC_ACC_MAX=0,
                    REC_TILE_MAX=0, **kinds[launch])
    rng = np.random.default_rng(12)
    T, N, I, H = 3, 5, 5, 11
    a = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, 2, 4 * H, H, scale=0.3),
             input_weight=_r(rng, 8 * H, I), bias=_r(rng, 8 * H), init_state=_r(rng, N, 2 * H),
             init_cell=_r(rng, N, 2 * H), mask=rng.uniform(0.5, 1.5, (T, N, 2 * H)).astype(F32),
             peephole=_r(rng, 2, 4 * H))
    _mps("lstm", device, a, rc.LSTMDescriptor(bidirectional=True, training=True))
    H = 7
    g = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, 3 * H, H, scale=0.3),
             input_weight=_r(rng, 3 * H, I), bias=_r(rng, 3 * H), init_state=_r(rng, N, H))
    _mps("gru", device, g, rc.GRUDescriptor(reset_after=False, training=True))


def test_tf_block_ops(device):
    """BlockLSTM with seq_len_max < T, TF peepholes and the cell clip (lengths, ``dcs``),
    its gradient; GRUBlockCell and its gradients (``pyrnn_act_map``, ``pyrnn_copy3``)."""
    rng = np.random.default_rng(3)
    T, N, I, H = 4, 2, 3, 3
    args = (_r(rng, T, N, I), _r(rng, N, H), _r(rng, N, H), _r(rng, I + H, 4 * H), _r(rng, H),
            _r(rng, H), _r(rng, H), _r(rng, 4 * H))
    kw = dict(use_peephole=True, cell_clip=0.3)
    out = rc.block_lstm(T - 1, *args, **kw, device=device)
    _all_close(out, TF.block_lstm(T - 1, *args, **kw), "block_lstm")
    up = (_r(rng, T, N, H), _r(rng, T, N, H))
    got = rc.block_lstm_grad(T - 1, *args, *out, *up, use_peephole=True, device=device)
    _all_close(got, TF.block_lstm_grad(T - 1, *args, *out, *up, use_peephole=True),
               "block_lstm_grad")
    g = (_r(rng, N, I), _r(rng, N, H), _r(rng, I + H, 2 * H), _r(rng, I + H, H),
         _r(rng, 2 * H), _r(rng, H))
    cell = rc.gru_block_cell(*g, device=device)
    _all_close(cell, TF.gru_block_cell(*g), "gru_block_cell")
    d_h = _r(rng, N, H)
    grads = rc.gru_block_cell_grad(*g, *cell[:3], d_h, device=device)
    _all_close(grads, TF.gru_block_cell_grad(*g, *cell[:3], d_h), "gru_block_cell_grad")
    wg = rc.gru_block_cell_weight_grads(g[0], g[1], cell[0], grads[2], grads[3], device=device)
    _all_close(wg, TF.gru_block_cell_weight_grads(g[0], g[1], cell[0], grads[2], grads[3]),
               "gru_block_cell_weight_grads")


def test_cudnn_projection_dropout_lengths_batch_major(device):
    """Two bidirectional LSTM layers with a projection, dropout between them, lengths (one 0),
    batch-major: ``pyrnn_proj``, ``pyrnn_bwd_proj``, ``pyrnn_final``, ``pyrnn_dropout`` and the
    strided copies of the layouts; forward and backprop against ``cudnn_ref``."""
    rng = np.random.default_rng(4)
    T, N, I, H, P, L = 3, 3, 2, 3, 2, 2
    kw = dict(rnn_mode="lstm", direction="bidirectional", num_proj=P, time_major=False)
    params = _r(rng, rc.cudnn_rnn_params_size(L, H, I, **{k: v for k, v in kw.items()
                                                           if k != "time_major"}))
    x, h0, c0 = _r(rng, N, T, I), _r(rng, 2 * L, N, P), _r(rng, 2 * L, N, H)
    lens = np.array([3, 0, 2], np.int32)
    drop = dict(dropout=0.5, seed=7, seed2=3)
    y, hn, cn, res, host = rc.cudnn_rnn(x, h0, c0, params, lens, **kw, **drop, device=device)
    masks = [cudnn.cudnn_dropout_mask((T, N, 2 * P), 0, 0.5, seed=7, seed2=3, device=device)]
    want = C.cudnn_rnn_forward(x, h0, c0, params, lens, **kw, dropout_masks=masks)
    _all_close((y, hn, cn), want, "cudnn_rnn")
    up = (_r(rng, *y.shape), _r(rng, *hn.shape), _r(rng, *cn.shape))
    got = rc.cudnn_rnn_backprop(x, h0, c0, params, lens, y, hn, cn, *up, res, host, **kw,
                                **drop, device=device)
    _all_close(got, C.cudnn_rnn_backward(x, h0, c0, params, lens, *up, **kw,
                                         dropout_masks=masks), "cudnn_rnn_backprop")


@pytest.mark.parametrize("seq_bytes", [0, 1 << 20], ids=["per-step", "whole-sequence"])
def test_cudnn_gru_biases_in_params(device, monkeypatch, seq_bytes):
    """A bidirectional two-layer reset-after GRU of the cuDNN dialect: the input bias added by
    the input GEMM at its offset in ``params``, the hidden bias read there by the forward and
    backward kernels (direction ``d`` one pseudo-layer further: ``hb_off + d * hb_sd``), on the
    per-step and the whole-sequence kernels."""
    override_tuning(device, monkeypatch, REC_SEQ_BYTES=seq_bytes)
    rng = np.random.default_rng(13)
    T, N, I, H, L = 3, 2, 5, 3, 2
    kw = dict(rnn_mode="gru", direction="bidirectional")
    params = _r(rng, rc.cudnn_rnn_params_size(L, H, I, **kw))
    x, h0 = _r(rng, T, N, I), _r(rng, 2 * L, N, H)
    y, hn, _, res, host = rc.cudnn_rnn(x, h0, None, params, **kw, device=device)
    _all_close((y, hn), C.cudnn_rnn_forward(x, h0, None, params, **kw)[:2], "cudnn gru")
    up = (_r(rng, *y.shape), _r(rng, *hn.shape))
    got = rc.cudnn_rnn_backprop(x, h0, None, params, None, y, hn, None, *up, None, res, host,
                                **kw, device=device)
    want = C.cudnn_rnn_backward(x, h0, None, params, None, *up, None, **kw)
    _all_close([got[0], got[1], got[3]], [want[0], want[1], want[3]], "cudnn gru backprop")


@pytest.mark.parametrize("seq_bytes", [0, 1 << 20], ids=["per-step", "whole-chunk"])
def test_backward_in_chunks(device, monkeypatch, seq_bytes):
    """The backward in chunks of one step (``REC_BWD_ROWS = N``): the gate-gradient ring, chunk
    offsets of the cell, projection and second GRU kernels, ``pyrnn_gather_hin`` and
    ``pyrnn_peep_grad`` per chunk. A bidirectional LSTM layer pair with lengths (one 0) and a
    projection (per-step kernels only), then a reversed reset-before GRU with a mask and a
    bidirectional LSTM with peepholes, on the per-step or the whole-chunk kernels."""
    override_tuning(device, monkeypatch, REC_BWD_ROWS=1, REC_SEQ_BYTES=seq_bytes)
    rng = np.random.default_rng(9)
    T, N, I, H, P, L = 3, 3, 2, 3, 2, 2
    kw = dict(rnn_mode="lstm", direction="bidirectional", num_proj=P)
    params = _r(rng, rc.cudnn_rnn_params_size(L, H, I, **kw))
    x, h0, c0 = _r(rng, T, N, I), _r(rng, 2 * L, N, P), _r(rng, 2 * L, N, H)
    lens = np.array([2, 0, 3], np.int32)
    y, hn, cn, res, host = rc.cudnn_rnn(x, h0, c0, params, lens, **kw, device=device)
    up = (_r(rng, *y.shape), _r(rng, *hn.shape), _r(rng, *cn.shape))
    got = rc.cudnn_rnn_backprop(x, h0, c0, params, lens, y, hn, cn, *up, res, host, **kw,
                                device=device)
    _all_close(got, C.cudnn_rnn_backward(x, h0, c0, params, lens, *up, **kw), "chunked cudnn")
    H = 4
    a = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, 3 * H, H, scale=0.3),
             input_weight=_r(rng, 3 * H, I), bias=_r(rng, 3 * H), init_state=_r(rng, N, H),
             mask=rng.uniform(0.5, 1.5, (T, N, H)).astype(F32))
    _mps("gru", device, a, rc.GRUDescriptor(reset_after=False, reverse=True, training=True))
    a = dict(source=_r(rng, T, N, I), recurrent_weight=_r(rng, 2, 4 * H, H),
             input_weight=_r(rng, 8 * H, I), bias=_r(rng, 8 * H), init_state=_r(rng, N, 2 * H),
             init_cell=_r(rng, N, 2 * H), peephole=_r(rng, 2, 4 * H))
    _mps("lstm", device, a, rc.LSTMDescriptor(bidirectional=True, training=True))


def test_cudnn_skip_input_batch_513(device):
    """ReLU RNN with skip_input (the broadcast copy of x over the gates, the batched
    ``pyrnn_sum_rows`` of dx), N = 513, H = I = 1."""
    rng = np.random.default_rng(5)
    T, N, H = 2, 513, 1
    kw = dict(rnn_mode="rnn_relu", input_mode="skip_input")
    params = _r(rng, rc.cudnn_rnn_params_size(1, H, H, **kw))
    x, h0 = _r(rng, T, N, H), _r(rng, 1, N, H)
    y, hn, _, res, host = rc.cudnn_rnn(x, h0, None, params, **kw, device=device)
    _all_close((y, hn), C.cudnn_rnn_forward(x, h0, None, params, **kw)[:2], "skip_input")
    dy = _r(rng, *y.shape)
    got = rc.cudnn_rnn_backprop(x, h0, None, params, None, y, hn, None, dy, None, None, res,
                                host, **kw, device=device)
    want = C.cudnn_rnn_backward(x, h0, None, params, None, dy, None, None, **kw)
    for k in (0, 1, 3):
        _close(got[k], want[k], f"skip_input backprop {k}")


@pytest.mark.parametrize("m,n,k", [(33, 257, 3), (1, 1, 1), (513, 3, 33), (3, 33, 257),
                                   (65, 20, 3)])
def test_gemm_every_transposition(device, m, n, k):
    """GEMM with sizes that divide no tile, every transposition, a batch of 2 with strides and
    offsets, beta != 0; ``sum_rows`` with a column tail. (513, 3, 33) runs TN and NN as C^T
    (few columns, many rows), (65, 20, 3) packs the NT product's Q (few k)."""
    rng = np.random.default_rng(6)
    q = device.queue
    for ta in (False, True):
        for tb in (False, True):
            a = _r(rng, 2, *((k, m) if ta else (m, k)))
            b = _r(rng, 2, *((n, k) if tb else (k, n)))
            c0 = _r(rng, 2, m, n)
            c = cla.to_device(q, c0)
            # k > 32: the outer kernel sums in blocks of 32 (weight gradients' two-level sum)
            gemm.gemm(device, F32, m, n, k, cla.to_device(q, a), cla.to_device(q, b), c,
                      trans_a=ta, trans_b=tb, alpha=0.5, beta=2.0, batch=2,
                      stride_a=a[0].size, stride_b=b[0].size, stride_c=m * n, k_block=32)
            opa = np.swapaxes(a, 1, 2) if ta else a
            opb = np.swapaxes(b, 1, 2) if tb else b
            _close(c.get(), 0.5 * opa.astype(float) @ opb + 2.0 * c0, f"gemm {ta} {tb}",
                   rtol=1e-4, atol=1e-4)
    rows = _r(rng, m, n)
    out = cla.to_device(q, np.ones(n, F32))
    gemm.sum_rows(device, F32, m, n, cla.to_device(q, rows), out, beta=1.0)
    _close(out.get(), rows.astype(float).sum(axis=0) + 1, "sum_rows", rtol=1e-4, atol=1e-4)


def test_gemm_pack_kernels(device, monkeypatch):
    """The pack kernels (``pyrnn_gemm_pack_p`` / ``_q``) forced on, in each launch mode: tiles
    of 8 with 4-wide squares, so that the operand stored along k streams its rows
    (``GEMM_PACK_ROWS``) and the other runs tiles fast; then 3-value chunks of k, no vector
    width (``GEMM_PACK_CHUNKS``'s element path). Sizes that fill no tile and leave a k tail,
    every transposition, a batch of 2 with strides."""
    monkeypatch.setattr(gemm, "_FORCE_PACK", (True, True))
    rng = np.random.default_rng(16)
    q = device.queue
    m, n, k = 11, 19, 23
    for values in ({"GEMM_TM": 8, "GEMM_TN": 8, "GEMM_VW": 4, "GEMM_PACK_KC": 4},
                   {"GEMM_TM": 3, "GEMM_TN": 8, "GEMM_VW": 4, "GEMM_PACK_KC": 3}):
        override_tuning(device, monkeypatch, family="gemm", GEMM_LOCAL=0, **values)
        for ta in (False, True):
            for tb in (False, True):
                a = _r(rng, 2, *((k, m) if ta else (m, k)))
                b = _r(rng, 2, *((n, k) if tb else (k, n)))
                c = cla.zeros(q, (2, m, n), F32)
                gemm.gemm(device, F32, m, n, k, cla.to_device(q, a), cla.to_device(q, b), c,
                          trans_a=ta, trans_b=tb, batch=2, stride_a=a[0].size,
                          stride_b=b[0].size, stride_c=m * n)
                opa = np.swapaxes(a, 1, 2) if ta else a
                opb = np.swapaxes(b, 1, 2) if tb else b
                _close(c.get(), opa.astype(float) @ opb, f"packed gemm {values} {ta} {tb}",
                       rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tile", [(16, 24, 5, 2, 3), (64, 64, 16, 4, 4)],
                         ids=["odd-tile", "default-tile"])
def test_gemm_tiled(device, monkeypatch, tile):
    """The local-memory tiled GEMM kernel (the GPU path, forced): blocks and chunks that no size
    divides (an odd tile whose 64 work-items do not divide a chunk), every transposition, a
    batch of 2, beta != 0, a bias, k-blocks, a 16-bit B and k = 0; Oclgrind checks the local
    chunks for races between the copy and the micro-tile reads (two barriers a chunk)."""
    override_tuning(device, monkeypatch, family="gemm", GEMM_LOCAL=1,
                    **dict(zip(("GEMM_LBM", "GEMM_LBN", "GEMM_LBK", "GEMM_LTM", "GEMM_LTN"), tile)))
    rng = np.random.default_rng(7)
    q = device.queue
    m, n, k = 33, 37, 21
    for ta in (False, True):
        for tb in (False, True):
            a = _r(rng, 2, *((k, m) if ta else (m, k)))
            b = _r(rng, 2, *((n, k) if tb else (k, n)))
            c0, bias = _r(rng, 2, m, n), _r(rng, n)
            c = cla.to_device(q, c0)
            gemm.gemm(device, F32, m, n, k, cla.to_device(q, a), cla.to_device(q, b), c,
                      trans_a=ta, trans_b=tb, alpha=0.5, beta=2.0, batch=2,
                      stride_a=a[0].size, stride_b=b[0].size, stride_c=m * n,
                      bias=cla.to_device(q, bias), k_block=8)
            opa = np.swapaxes(a, 1, 2) if ta else a
            opb = np.swapaxes(b, 1, 2) if tb else b
            _close(c.get(), 0.5 * opa.astype(float) @ opb + 2.0 * c0 + bias, f"tiled {ta} {tb}",
                   rtol=1e-4, atol=1e-4)
    # a float16 B (NT: the input projection of a half-precision weight), beta = 0 over NaN
    a, b = _r(rng, m, k), _r(rng, n, k).astype(np.float16)
    c = cla.to_device(q, np.full((m, n), np.nan, F32))
    gemm.gemm(device, F32, m, n, k, cla.to_device(q, a), cla.to_device(q, b), c, trans_b=True)
    _close(c.get(), a.astype(float) @ b.astype(float).T, "tiled float16 B", rtol=1e-4, atol=1e-4)
    # k = 0: C = beta C
    c = cla.to_device(q, c0[0])
    gemm.gemm(device, F32, m, n, 0, None, None, c, beta=3.0)
    _close(c.get(), 3.0 * c0[0], "tiled k = 0")


def test_dropout_philox_and_selfcheck_kernels(device):
    """The dropout mask for a width that is not a multiple of 4, the raw Philox generator
    against its known answer (Random123's kat_vectors), and ``pyrnn_axpy``."""
    mask = cudnn.cudnn_dropout_mask((2, 3, 5), 1, 0.25, seed=11, seed2=12, device=device)
    assert set(np.unique(mask)) <= {0.0, np.float32(1 / 0.75)}
    q = device.queue
    prog = get_program(device, "dropout.cl", {"PYRNN_DTYPE": 1})
    ctr = np.array([[0, 0, 0, 0], [0xFFFFFFFF] * 4, [0x243F6A88, 0x85A308D3, 0x13198A2E,
                                                    0x03707344]], np.uint32)
    key = [(0, 0), (0xFFFFFFFF, 0xFFFFFFFF), (0xA4093822, 0x299F31D0)]
    want = [[0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8],
            [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD],
            [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]]
    for c, (k0, k1), w in zip(ctr, key, want):
        out, cd = cla.empty(q, (1, 4), np.uint32), cla.to_device(q, c[None])
        knl = prog.kernel("pyrnn_philox")
        knl.set_args(out.base_data, cd.base_data, np.uint32(k0), np.uint32(k1))
        enqueue(q, knl, (1,))         # (the buffers must outlive the launch: names kept)
        assert out.get()[0].tolist() == w
    axpy = get_program(device, "selfcheck.cl", {"PYRNN_DTYPE": 1}).kernel("pyrnn_axpy")
    n = 257
    x, y = np.arange(n, dtype=F32), np.ones(n, F32)
    xd, yd = cla.to_device(q, x), cla.to_device(q, y)
    axpy.set_args(np.int32(n), F32(2), xd.base_data, yd.base_data)
    enqueue(q, axpy, (n,))
    _close(yd.get(), 2 * x + 1, "axpy")
