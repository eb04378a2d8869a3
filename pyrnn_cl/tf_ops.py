r"""TensorFlow block-op dialect (API.md §2, semantics.md §3): GRUBlockCell, LSTMBlockCell,
BlockLSTM, BlockLSTMV2 and their gradients, with TensorFlow's inputs, outputs and gate layouts,
in float32 and float64, and float16/bfloat16 storage computed in float32 (README "Precision"),
on the generic engine (:mod:`pyrnn_cl.engine`).

Notation: ``x_h = [x, h_prev]`` (columns concatenated), ``·`` matrix product, ``⊙`` element-wise
(Hadamard) product, σ the logistic sigmoid. TensorFlow's weights are ``[in, out]`` and applied
as ``x_h · w`` (not ``x W^T``).

GRUBlockCell (``w_ru`` columns ``[r | u]``, reset applied *before* the candidate matmul)::

    [r̄ | ū] = x_h · w_ru + b_ru          r = σ(r̄)   u = σ(ū)
    c̄ = [x, h_prev ⊙ r] · w_c + b_c       c = tanh(c̄)
    h = u ⊙ h_prev + (1 − u) ⊙ c

Engine mapping: one step (T = 1) of a reset-before GRU with caller blocks ``[r | u | c]``
(``CellSpec("gru", gate_blocks=(1, 0, 2), reset_after=False, flip_z=True)``), input weights
``W = [w_ru[:I]ᵀ ; w_c[:I]ᵀ]`` ``[3H, I]``, recurrent weights ``R = [w_ru[I:]ᵀ ; w_c[I:]ᵀ]``
``[3H, H]`` (both transposed on the device) and input bias ``[b_ru, b_c]``.

LSTMBlockCell / BlockLSTM (gate columns ICFO ``[i | ci | f | o]``; BlockLSTMV2: IFCO
``[i | f | ci | o]`` and no ``forget_bias``)::

    [ī | c̄i | f̄ | ō] = x_h · w + b
    i = σ(ī + wci ⊙ cs_prev)      f = σ(f̄ + forget_bias + wcf ⊙ cs_prev)      ci = tanh(c̄i)
    cs = ci ⊙ i + cs_prev ⊙ f;    cs = clamp(cs, −cell_clip, cell_clip) when cell_clip > 0
    o = σ(ō + wco ⊙ cs)   (the new, clipped cs)      co = tanh(cs)      h = co ⊙ o

(the peephole terms only with ``use_peephole``). The sequence ops run this for
t = 0 … seq_len_max − 1 with ``cs_prev, h_prev = cs[t−1], h[t−1]``; steps t ≥ ``seq_len_max``
are **zero in every output** (TensorFlow leaves i, f, o, ci, co unwritten there). Engine mapping:
an LSTM with ``gate_blocks`` (0, 2, 1, 3) (ICFO) or (0, 1, 2, 3) (IFCO), ``W = w[:I]ᵀ``,
``R = w[I:]ᵀ``, bias ``b`` plus ``forget_bias`` on the f block, peepholes in TensorFlow mode
(``PEEP_TF``) and the engine's cell clip; ``seq_len_max`` becomes per-row lengths.

LSTM backward (TensorFlow's kernels; the clamp is **straight-through**: its derivative is taken
as 1, also where it is active)::

    do = o(1−o) ⊙ h_grad ⊙ co
    dcs = (1−co²) ⊙ h_grad ⊙ o + cs_grad [+ do ⊙ wco]
    dci = (1−ci²) ⊙ dcs ⊙ i      df = f(1−f) ⊙ dcs ⊙ cs_prev      di = i(1−i) ⊙ dcs ⊙ ci
    dicfo = [di | dci | df | do]   (IFCO order for V2)
    cs_prev_grad = dcs ⊙ f [+ di ⊙ wci + df ⊙ wcf]
    wci_grad = Σ_n di ⊙ cs_prev    wcf_grad = Σ_n df ⊙ cs_prev    wco_grad = Σ_n do ⊙ cs
    [x_grad | h_prev_grad] = dicfo · wᵀ     w_grad = x_hᵀ · dicfo     b_grad = Σ_n dicfo

The sequence gradients add the carried ``cs_prev_grad``/``h_prev_grad`` of step t+1 to
``cs_grad[t]``/``h_grad[t]`` and sum the weight gradients over the steps. The gradient ops take
the forward activations they are given; the engine recomputes ``co`` as ``tanh(cs)`` from the
given ``cs`` (``co`` is validated, not read), so pass the forward's own outputs.

Shapes are validated on the host before anything is enqueued: every argument against the batch
``N`` of ``x`` and the hidden size ``H`` of ``h_prev`` (TensorFlow silently misbehaves on a batch
mismatch; pitfalls A26), raising :class:`~pyrnn_cl.errors.ShapeError` naming both arguments.
"""

from __future__ import annotations

from typing import NamedTuple, Union

import numpy as np
import pyopencl.array as cla

from . import engine
from ._arrays import Call, check_float, check_int, check_rank, check_shape, copied_at_creation
from ._lifecycle import entry_point
from ._types import Array, DeviceArg
from .cells import ACTIVATIONS, PEEP_NONE, PEEP_TF, CellSpec
from .engine import Recurrence, StateView
from .errors import ShapeError
from .gemm import gemm, sum_rows

__all__ = [
    "gru_block_cell", "gru_block_cell_grad", "gru_block_cell_weight_grads",
    "lstm_block_cell", "lstm_block_cell_grad", "lstm_block_cell_weight_grads",
    "block_lstm", "block_lstm_grad", "block_lstm_v2", "block_lstm_grad_v2",
]

#: ``seq_len_max``: an int, a NumPy integer or a 0-d integer array.
SeqLen = Union[int, np.integer, np.ndarray]
#: The ops' results: tuples of arrays, in the order each docstring gives.
_Arrays4 = tuple[Array, Array, Array, Array]
_Arrays5 = tuple[Array, Array, Array, Array, Array]
_Arrays7 = tuple[Array, Array, Array, Array, Array, Array, Array]
_Arrays8 = tuple[Array, Array, Array, Array, Array, Array, Array, Array]

_SIG, _TANH = ACTIVATIONS["sigmoid"], ACTIVATIONS["tanh"]

#: TF GRU caller blocks [r | u | c] -> canonical slots (z, r, o) = (u, r, c).
_GRU_CELL = CellSpec("gru", (1, 0, 2), (_SIG, _SIG, _TANH), reset_after=False, flip_z=True)

#: Block index of each TF LSTM gate, per layout.
_ICFO = {"i": 0, "c": 1, "f": 2, "o": 3}
_IFCO = {"i": 0, "f": 1, "c": 2, "o": 3}


# ----------------------------------------------------------------------------------------------
# validation and small device helpers

def _expect(name, a, shape, source):
    """``ShapeError`` naming ``name`` and the arguments its expected shape derives from."""
    try:
        check_shape(name, a, shape)
    except ShapeError as exc:
        raise ShapeError(f"{exc} ({source})") from None


def _sizes(x, h_prev, x_rank):
    """``(T or None, N, I, H)`` from ``x`` (rank ``x_rank``) and ``h_prev`` ``[N, H]``."""
    check_rank("x", x, x_rank)
    check_rank("h_prev", h_prev, 2)
    N, I = x.shape[-2], x.shape[-1]
    T = x.shape[0] if x_rank == 3 else None
    if h_prev.shape[0] != N:
        raise ShapeError(f"h_prev: got shape {list(h_prev.shape)}, expected [{N}, *]: the batch "
                         f"size must equal that of x (x has shape {list(x.shape)}, batch {N})")
    H = h_prev.shape[1]
    if H < 1:
        raise ShapeError(f"h_prev: got shape {list(h_prev.shape)}, the hidden size (last axis) "
                         "must be at least 1")
    return T, N, I, H


def _check_all(checks, N, I, H):
    """Run ``(name, array, shape)`` checks; the message says where N, I and H come from."""
    src = f"batch N = {N} and input width I = {I} from x, hidden size H = {H} from h_prev"
    for name, a, shape in checks:
        _expect(name, a, shape, src)


def _bool(name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__} ({value!r})")
    return bool(value)


def _seq_len_max(value, T):
    """``seq_len_max`` as an int in ``[0, T]`` (int, NumPy integer or 0-d integer array)."""
    if isinstance(value, np.ndarray) and value.ndim != 0:
        raise TypeError(f"seq_len_max: expected an integer scalar, got an array of shape "
                        f"{list(value.shape)}")
    if isinstance(value, np.ndarray) and value.dtype.kind not in "iu":
        raise TypeError(f"seq_len_max: expected an integer scalar, got a 0-d array of dtype "
                        f"{value.dtype}")
    return check_int("seq_len_max", value, 0, T)


def _copy_cols(call, dst, d_width, d_start, src, s_width, s_start, rows, count):
    """``dst[r][d_start + k] = src[r][s_start + k]`` for ``r < rows, k < count``."""
    engine.copy3(call.device, call.dtype, dst, d_start, (0, d_width, 1), src, s_start,
                 (0, s_width, 1), (1, rows, count))


class _Cols(NamedTuple):
    """Results that are column spans of one ``[rows][width]`` device array ``src``: columns
    ``[start, start + count)`` for each ``(start, count)`` of ``spans``, reshaped to
    ``shapes``."""

    src: cla.Array
    rows: int
    width: int
    spans: list
    shapes: list


def _results(call, *items) -> tuple:
    """An op's results in the caller's kind and storage dtype, converted and (NumPy out) read
    back together: one wait for the whole op. Each item is an ``(array, shape)`` (shape
    ``None``: as it is) or a :class:`_Cols`, which gives one result per span (NumPy out: its
    array read once and split on the host; device out: one strided copy per span)."""
    flat: list = []         # (array, shape) for call.outs
    plan: list = []         # per item: index into flat, or (index, _Cols) to split
    for item in items:
        if not isinstance(item, _Cols):
            plan.append(len(flat))
            flat.append(item)
        elif call.numpy_out:
            plan.append((len(flat), item))
            flat.append((item.src, (item.rows, item.width)))
        else:
            for (start, count), shape in zip(item.spans, item.shapes):
                out = call.empty((item.rows, count))
                _copy_cols(call, out, count, 0, item.src, item.width, start, item.rows, count)
                plan.append(len(flat))
                flat.append((out, shape))
    got = call.outs(*flat)
    results: list = []
    for p in plan:
        if isinstance(p, int):
            results.append(got[p])
        else:
            host, cols = got[p[0]], p[1]
            results += [np.ascontiguousarray(host[:, s:s + c]).reshape(shape)
                        for (s, c), shape in zip(cols.spans, cols.shapes)]
    return tuple(results)


def _transpose_into(call, dst, d_off, d_ld, src, s_off, s_ld, rows, cols):
    """``dst[d_off + c*d_ld + r] = src[s_off + r*s_ld + c]``: ``dst`` block = ``src`` blockᵀ,
    ``src`` block ``[rows][cols]``."""
    engine.copy3(call.device, call.dtype, dst, d_off, (0, 1, d_ld), src, s_off, (0, s_ld, 1),
                 (1, rows, cols))


def _tanh(call, a):
    out = call.empty(a.shape)
    engine.act_map(call.device, call.dtype, out, a, ACTIVATIONS["tanh"])
    return out


def _hadamard(call, a, b, rows, width):
    """``a ⊙ b`` of two ``[rows][width]`` arrays."""
    out = call.empty((rows, width))
    engine.multiply(call.device, call.dtype, out, a, b)
    return out


# ----------------------------------------------------------------------------------------------
# GRU block cell

def _gru_weights(call, w_ru, w_c, I, H):
    """``W [3H, I] = [w_ru[:I]ᵀ ; w_c[:I]ᵀ]`` and ``R [3H, H] = [w_ru[I:]ᵀ ; w_c[I:]ᵀ]``."""
    W, R = call.empty((3 * H, I)), call.empty((3 * H, H))
    _transpose_into(call, W, 0, I, w_ru, 0, 2 * H, I, 2 * H)
    _transpose_into(call, W, 2 * H * I, I, w_c, 0, H, I, H)
    _transpose_into(call, R, 0, H, w_ru, I * 2 * H, 2 * H, H, 2 * H)
    _transpose_into(call, R, 2 * H * H, H, w_c, I * H, H, H, H)
    return W, R


def _gru_check(x, h_prev, w_ru, w_c, b_ru, b_c, extra=()):
    _, N, I, H = _sizes(x, h_prev, 2)
    checks = [("w_ru", w_ru, (I + H, 2 * H)), ("w_c", w_c, (I + H, H)),
              ("b_ru", b_ru, (2 * H,)), ("b_c", b_c, (H,))]
    _check_all(checks + [(n, a, (N, w * H)) for n, a, w in extra], N, I, H)
    return N, I, H


@entry_point
def gru_block_cell(x: Array, h_prev: Array, w_ru: Array, w_c: Array, b_ru: Array, b_c: Array, *,
                   device: DeviceArg = None) -> _Arrays4:
    r"""TensorFlow ``GRUBlockCell``: one GRU step, reset gate applied before the candidate matmul.

    Shapes: ``x [N, I]``, ``h_prev [N, H]``, ``w_ru [I+H, 2H]`` (columns ``[r | u]``),
    ``w_c [I+H, H]``, ``b_ru [2H]``, ``b_c [H]``. Returns ``(r, u, c, h)``, each ``[N, H]``::

        [r̄ | ū] = [x, h_prev] · w_ru + b_ru       r = σ(r̄)    u = σ(ū)
        c̄ = [x, h_prev ⊙ r] · w_c + b_c            c = tanh(c̄)
        h = u ⊙ h_prev + (1 − u) ⊙ c

    ``w_ru`` and ``w_c`` are *vertical* stacks (rows for x, then rows for h); ``b_ru`` is one
    bias ``[b_r | b_u]`` (TF's docstring suggests ``[b_ru_x b_ru_h]``, there is no second bias).
    Unlike TensorFlow (float32 only), float64, float16 and bfloat16 work too.
    """
    call = Call(dict(x=x, h_prev=h_prev, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c), device)
    N, I, H = _gru_check(x, h_prev, w_ru, w_c, b_ru, b_c)
    q = call
    rec = Recurrence.cached(q.device, q.dtype, _GRU_CELL, T=1, N=N, H=H)   # memory check first
    xd, hd, wru, wc, bru, bc = q.devs(("x", x), ("h_prev", h_prev), ("w_ru", w_ru),
                                      ("w_c", w_c), ("b_ru", b_ru), ("b_c", b_c))
    W, R = _gru_weights(q, wru, wc, I, H)
    bias = q.empty((3 * H,))
    _copy_cols(q, bias, 3 * H, 0, bru, 2 * H, 0, 1, 2 * H)
    _copy_cols(q, bias, 3 * H, 2 * H, bc, H, 0, 1, H)
    gx = engine.input_projection(q.device, q.dtype, xd, N, I, W, 3 * H, bias)
    fwd = rec.forward(gx.reshape((1, N, 3 * H)), engine.LayerInputs(R, StateView(hd, N * H, H)))
    assert fwd.sav is not None      # a forward always saves its gates
    return _results(q, _Cols(fwd.sav, N, 3 * H, [(k * H, H) for k in range(3)], [(N, H)] * 3),
                    (fwd.y, (N, H)))


@entry_point
def gru_block_cell_grad(x: Array, h_prev: Array, w_ru: Array, w_c: Array, b_ru: Array, b_c: Array,
                        r: Array, u: Array, c: Array, d_h: Array, *,
                        device: DeviceArg = None) -> _Arrays4:
    r"""TensorFlow ``GRUBlockCellGrad`` with the kernel's (correct) maths, not its docstring's.

    Inputs: the forward's inputs, its outputs ``r, u, c`` ``[N, H]`` and ``d_h`` = dL/dh
    ``[N, H]``. Returns ``(d_x [N, I], d_h_prev [N, H], d_c_bar [N, H], d_r_bar_u_bar [N, 2H])``
    (``b_ru``, ``b_c`` are validated, not used)::

        d_c̄ = d_h ⊙ (1 − u) ⊙ (1 − c ⊙ c)
        d_ū = d_h ⊙ (h_prev − c) ⊙ u ⊙ (1 − u)
        [d_x2 | d_hr] = d_c̄ · w_cᵀ                        (split the columns at I)
        d_r̄ = d_hr ⊙ h_prev ⊙ r ⊙ (1 − r)
        [d_x1 | d_hp1] = [d_r̄ | d_ū] · w_ruᵀ
        d_x = d_x1 + d_x2
        d_h_prev = d_hp1 + d_hr ⊙ r + d_h ⊙ u
        d_r_bar_u_bar = [d_r̄ | d_ū]

    Errata of TensorFlow's docstring (``api_def_GRUBlockCellGrad.pbtxt``; semantics.md §3.1):

    1. ``d_x_component_1 = d_r_bar * w_r_x^T + d_u_bar * w_r_x^T``: the second term uses
       **w_u_x** (the u columns of w_ru), i.e. ``d_x1 = d_r̄·w_r_xᵀ + d_ū·w_u_xᵀ``.
    2. ``d_h_prev_componenet_1 = d_r_bar * w_r_h_prev^T + d_u_bar * w_r_h_prev^T``: the second
       term uses **w_u_h_prev** (same GEMM as 1; "componenet" is a typo).
    3. ``d_h_prev = d_h_prev_component_1 + d_h_prevr ∘ r + u``: the last term is
       **d_h ∘ u**, not ``u``.
    4. ``d_u_bar = d_h ∘ (h − c) ∘ u ∘ (1 − u)`` with h the new state: it is **h_prev − c**.
    5. ``d_w_ru = x_h_prevr^T * d_c_bar`` and ``d_w_c = x_h_prev^T * d_r_bar_u_bar``: the two
       are **swapped** (see :func:`gru_block_cell_weight_grads`).
    6. ``b_ru = [b_ru_x b_ru_h]``, ``b_c = [b_c_x b_c_h]``: there is a single bias; ``b_ru`` is
       ``[b_r | b_u]`` split by gate.
    7. ``w_c = [w_c_x w_c_h_prevr]`` written side by side: it is a vertical stack ``[I+H, H]``.
    8. ``d_r_bar`` is never defined: ``d_r̄ = d_hr ⊙ h_prev ⊙ r ⊙ (1 − r)``.
    9. "Element-wise dot product" means the Hadamard product.
    10. The weight gradients were computed by the TF1 contrib Python wrapper, which TF2 no longer
        has: here they are :func:`gru_block_cell_weight_grads`.
    """
    call = Call(dict(x=x, h_prev=h_prev, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c, r=r, u=u, c=c,
                     d_h=d_h), device)
    N, I, H = _gru_check(x, h_prev, w_ru, w_c, b_ru, b_c,
                         [("r", r, 1), ("u", u, 1), ("c", c, 1), ("d_h", d_h, 1)])
    q = call
    rec = Recurrence.cached(q.device, q.dtype, _GRU_CELL, T=1, N=N, H=H)
    rec.check_backward_memory(full=True)              # before anything is copied
    hd, wru, wc, rd, ud, cd, dhd = q.devs(("h_prev", h_prev), ("w_ru", w_ru), ("w_c", w_c),
                                          ("r", r), ("u", u), ("c", c), ("d_h", d_h))
    W, R = _gru_weights(q, wru, wc, I, H)
    sav = q.empty((1, N, 3 * H))                      # saved gates, blocks [r | u | c]
    for k, a in enumerate((rd, ud, cd)):
        _copy_cols(q, sav, 3 * H, k * H, a, H, 0, N, H)
    fwd = engine.Saved(sav=sav, y=hd)   # y is not read when T = 1
    dh0 = q.empty((N, H))
    d_x = q.empty((N, I))
    grads = rec.backward(fwd, engine.LayerInputs(R, StateView(hd, N * H, H)),
                         engine.Upstream(dy=dhd),
                         engine.GradTargets(StateView(dh0, N * H, H), need_dR=False,
                                            inputs=engine.InputSide(
                                                I, w=engine.Target(W, 0, 3 * H * I), dx=d_x)),
                         full=True)
    assert grads.dgx is not None    # full=True: the gate gradients are kept
    return _results(q, (d_x, (N, I)), (dh0, (N, H)),
                    _Cols(grads.dgx, N, 3 * H, [(2 * H, H), (0, 2 * H)], [(N, H), (N, 2 * H)]))


@entry_point
def gru_block_cell_weight_grads(x: Array, h_prev: Array, r: Array, d_c_bar: Array,
                                d_r_bar_u_bar: Array, *, device: DeviceArg = None) -> _Arrays4:
    r"""Weight and bias gradients of ``GRUBlockCell`` from :func:`gru_block_cell_grad`'s outputs.

    Returns ``(d_w_ru [I+H, 2H], d_w_c [I+H, H], d_b_ru [2H], d_b_c [H])``::

        d_w_ru = [x, h_prev]ᵀ · [d_r̄ | d_ū]        d_b_ru = Σ_n [d_r̄ | d_ū]
        d_w_c  = [x, h_prev ⊙ r]ᵀ · d_c̄           d_b_c  = Σ_n d_c̄

    (TensorFlow's docstring swaps the two weight formulas — ``d_w_ru = x_h_prevr^T * d_c_bar``,
    ``d_w_c = x_h_prev^T * d_r_bar_u_bar`` — whose shapes do not even fit.)
    """
    call = Call(dict(x=x, h_prev=h_prev, r=r, d_c_bar=d_c_bar, d_r_bar_u_bar=d_r_bar_u_bar),
                device)
    _, N, I, H = _sizes(x, h_prev, 2)
    _check_all([("r", r, (N, H)), ("d_c_bar", d_c_bar, (N, H)),
                ("d_r_bar_u_bar", d_r_bar_u_bar, (N, 2 * H))], N, I, H)
    q, dev, dt = call, call.device, call.dtype
    xd, hd, dc, dru, rd = q.devs(("x", x), ("h_prev", h_prev), ("d_c_bar", d_c_bar),
                                 ("d_r_bar_u_bar", d_r_bar_u_bar), ("r", r))
    hr = _hadamard(q, hd, rd, N, H)
    d_w_ru, d_w_c = q.empty((I + H, 2 * H)), q.empty((I + H, H))
    gemm(dev, dt, I, 2 * H, N, xd, dru, d_w_ru, trans_a=True)
    gemm(dev, dt, H, 2 * H, N, hd, dru, d_w_ru, trans_a=True, c_offset=I * 2 * H)
    gemm(dev, dt, I, H, N, xd, dc, d_w_c, trans_a=True)
    gemm(dev, dt, H, H, N, hr, dc, d_w_c, trans_a=True, c_offset=I * H)
    d_b_ru, d_b_c = q.empty((2 * H,)), q.empty((H,))
    sum_rows(dev, dt, N, 2 * H, dru, d_b_ru)
    sum_rows(dev, dt, N, H, dc, d_b_c)
    return _results(q, (d_w_ru, None), (d_w_c, None), (d_b_ru, None), (d_b_c, None))


# ----------------------------------------------------------------------------------------------
# LSTM block cell and BlockLSTM(V2): one shared layer

class _LSTM:
    """Validation, device copies and the engine of one LSTM block op (cell: ``T = 1``)."""

    def __init__(self, call, layout, seq, x, cs_prev, h_prev, w, wci, wcf, wco, b, *,
                 seq_len_max=None, use_peephole=False, forget_bias=0.0, cell_clip=0.0,
                 extra=(), need_w=True, need_b=True):
        T, N, I, H = _sizes(x, h_prev, 3 if seq else 2)
        T = T if seq else 1
        checks = [("cs_prev", cs_prev, (N, H)), ("w", w, (I + H, 4 * H)), ("wci", wci, (H,)),
                  ("wcf", wcf, (H,)), ("wco", wco, (H,)), ("b", b, (4 * H,))]
        shape = (T, N, H) if seq else (N, H)
        _check_all(checks + [(name, a, shape) for name, a in extra], N, I, H)
        self.use_peephole = _bool("use_peephole", use_peephole)
        self.forget_bias = check_float("forget_bias", forget_bias)
        self.cell_clip = check_float("cell_clip", cell_clip)
        self.n_valid = _seq_len_max(seq_len_max, T) if seq else 1
        self.call, self.layout = call, layout
        self.T, self.N, self.I, self.H = T, N, I, H
        q, GH = call, 4 * H
        # the engine (and its memory check) first: a request too large for the device is
        # refused before any input is made contiguous or copied
        blocks = (layout["i"], layout["f"], layout["c"], layout["o"])   # slots i, f, g, o
        clip = self.cell_clip > 0
        cell = CellSpec("lstm", blocks, (_SIG, _SIG, _TANH, _SIG),
                        peephole=PEEP_TF if self.use_peephole else PEEP_NONE, clip=clip)
        self.rec = Recurrence.cached(q.device, q.dtype, cell, T=T, N=N, H=H,
                                     has_len=self.n_valid < T, has_peep=self.use_peephole,
                                     clip=self.cell_clip if clip else 0.0)
        if extra:     # a gradient op
            self.rec.check_backward_memory()
        peeps = (("wci", wci), ("wcf", wcf), ("wco", wco)) if self.use_peephole else ()
        self.x, h0, c0, wd, bd, *peep_d = q.devs(
            ("x", x), ("h_prev", h_prev), ("cs_prev", cs_prev), ("w", w),
            ("b", b if need_b else None), *peeps)
        self.h0 = StateView(h0, N * H, H)
        self.c0 = StateView(c0, N * H, H)
        self.wd = wd
        self.W = None
        if need_w:   # W = w[:I]ᵀ [4H, I]
            self.W = q.empty((GH, I))
            _transpose_into(q, self.W, 0, I, wd, 0, GH, I, GH)
        self.R = q.empty((GH, H))   # R = w[I:]ᵀ [4H, H]
        _transpose_into(q, self.R, 0, H, wd, I * GH, GH, H, GH)
        self.bias = None
        if need_b:   # b with forget_bias added to the f block
            self.bias = bd
            if self.forget_bias != 0.0:
                if q.is_callers(bd, b):     # never modify an input: add into a copy
                    self.bias = q.empty((GH,))
                    _copy_cols(q, self.bias, GH, 0, bd, GH, 0, 1, GH)
                fb = copied_at_creation(q.queue, np.full(1, self.forget_bias, q.dtype))
                engine.copy3(q.device, q.dtype, self.bias, layout["f"] * H, (0, 0, 1), fb, 0,
                             (0, 0, 0), (1, 1, H), beta=1.0)
        self.peep = None
        if self.use_peephole:   # [1][4H] in block order: wci on i, wcf on f, wco on o, 0 on ci
            self.peep = q.zeros((GH,))
            for gate, a in zip("ifo", peep_d):
                _copy_cols(q, self.peep, GH, layout[gate] * H, a, H, 0, 1, H)
        self.lens = None
        if self.n_valid < T:
            self.lens = copied_at_creation(q.queue, np.full(max(N, 1), self.n_valid, np.int32))

    # -- forward ----------------------------------------------------------------------------

    def forward(self, shape):
        """``(i, cs, f, o, ci, co, h)`` in the caller's kind, each of ``shape``."""
        q, T, N, H, GH = self.call, self.T, self.N, self.H, 4 * self.H
        gx = engine.input_projection(q.device, q.dtype, self.x, T * N, self.I, self.W, GH,
                                     self.bias).reshape((T, N, GH))
        fwd = self.rec.forward(gx, self.layer_inputs())
        i, f, o, ci, cs, co, h = _results(
            q, _Cols(fwd.sav, T * N, GH, [(self.layout[g] * H, H) for g in "ifoc"], [shape] * 4),
            (fwd.cs, shape), (_tanh(q, fwd.cs), shape), (fwd.y, shape))
        return i, cs, f, o, ci, co, h

    def layer_inputs(self) -> engine.LayerInputs:
        """What the engine's forward and backward of this layer read besides the sequences."""
        return engine.LayerInputs(self.R, self.h0, c0=self.c0, peep=self.peep, lens=self.lens)

    # -- backward ---------------------------------------------------------------------------

    def backward(self, gates, cs, h, cs_grad, h_grad, *, need_dR=True, inputs=None, full=False):
        """Engine backward from the given forward outputs; returns (engine ``Saved``,
        ``Gradients``, dh0, dc0). ``gates`` maps ``i, f, c, o`` to ``(name, array)``;
        ``need_dR``, ``inputs`` (:class:`engine.InputSide`) and ``full`` go to
        :meth:`Recurrence.backward`."""
        q, T, N, H, GH = self.call, self.T, self.N, self.H, 4 * self.H
        sav = q.empty((T, N, GH))
        *gate_d, hd, csd, h_grad_d, cs_grad_d = q.devs(
            *gates.values(), ("h", h), ("cs", cs), ("h_grad", h_grad), ("cs_grad", cs_grad))
        for g, a in zip(gates, gate_d):
            _copy_cols(q, sav, GH, self.layout[g] * H, a, H, 0, T * N, H)
        y = self.h0.array if h is None else hd   # y is not read when T = 1
        fwd = engine.Saved(sav=sav, y=y, cs=csd)
        dh0, dc0 = StateView(q.empty((N, H)), N * H, H), StateView(q.empty((N, H)), N * H, H)
        upstream = engine.Upstream(dy=h_grad_d, dcs=cs_grad_d)
        targets = engine.GradTargets(dh0, dc0=dc0, need_dR=need_dR, inputs=inputs)
        grads = self.rec.backward(fwd, self.layer_inputs(), upstream, targets, full=full)
        return fwd, grads, dh0.array, dc0.array

    def peephole_grads(self, grads) -> tuple:
        """``wci_grad, wcf_grad, wco_grad`` as items of :func:`_results` (zeros without
        peepholes)."""
        q, H = self.call, self.H
        dpeep = grads.dpeep if self.use_peephole else None
        if dpeep is None:
            return tuple((q.zeros((H,)), None) for _ in range(3))
        return (_Cols(dpeep, 1, 4 * H, [(self.layout[g] * H, H) for g in "ifo"], [(H,)] * 3),)


def _lstm_cell_call(x, cs_prev, h_prev, w, wci, wcf, wco, b, device, **more):
    return Call(dict(x=x, cs_prev=cs_prev, h_prev=h_prev, w=w, wci=wci, wcf=wcf, wco=wco, b=b,
                     **more), device)


@entry_point
def lstm_block_cell(x: Array, cs_prev: Array, h_prev: Array, w: Array, wci: Array, wcf: Array,
                    wco: Array, b: Array, *, forget_bias: float = 1.0, cell_clip: float = 3.0,
                    use_peephole: bool = False, device: DeviceArg = None) -> _Arrays7:
    r"""TensorFlow ``LSTMBlockCell``: one LSTM step, gate columns ICFO ``[i | ci | f | o]``.

    Shapes: ``x [N, I]``, ``cs_prev, h_prev [N, H]``, ``w [I+H, 4H]`` (rows for x, then h),
    ``wci, wcf, wco [H]`` (peepholes, read only with ``use_peephole``), ``b [4H]``. Returns
    ``(i, cs, f, o, ci, co, h)``, each ``[N, H]``::

        [ī | c̄i | f̄ | ō] = [x, h_prev] · w + b
        i = σ(ī + wci ⊙ cs_prev)    f = σ(f̄ + forget_bias + wcf ⊙ cs_prev)    ci = tanh(c̄i)
        cs = ci ⊙ i + cs_prev ⊙ f ;  cs = clamp(cs, −cell_clip, cell_clip) if cell_clip > 0
        o = σ(ō + wco ⊙ cs)  (new, clipped cs)     co = tanh(cs)     h = co ⊙ o

    ``cell_clip ≤ 0`` disables the clamp. ``cs`` is the cell before the tanh, ``co`` after it.
    """
    call = _lstm_cell_call(x, cs_prev, h_prev, w, wci, wcf, wco, b, device)
    layer = _LSTM(call, _ICFO, False, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                  use_peephole=use_peephole, forget_bias=forget_bias, cell_clip=cell_clip)
    return layer.forward((layer.N, layer.H))


@entry_point
def lstm_block_cell_grad(x: Array, cs_prev: Array, h_prev: Array, w: Array, wci: Array, wcf: Array,
                         wco: Array, b: Array, i: Array, cs: Array, f: Array, o: Array, ci: Array,
                         co: Array, cs_grad: Array, h_grad: Array, *, use_peephole: bool = False,
                         device: DeviceArg = None) -> _Arrays5:
    r"""TensorFlow ``LSTMBlockCellGrad``: gradients of one ``LSTMBlockCell`` step.

    Inputs: the forward's inputs and outputs ``i, cs, f, o, ci, co`` ``[N, H]``, and
    ``cs_grad``, ``h_grad`` = dL/dcs, dL/dh of this step ``[N, H]``. Returns
    ``(cs_prev_grad [N, H], dicfo [N, 4H], wci_grad, wcf_grad, wco_grad [H])``; ``dicfo`` is
    the gradient of the ICFO pre-activations, peephole gradients are zeros without
    ``use_peephole``::

        do = o(1−o) ⊙ h_grad ⊙ co
        dcs = (1−co²) ⊙ h_grad ⊙ o + cs_grad [+ do ⊙ wco]
        dci = (1−ci²) ⊙ dcs ⊙ i     df = f(1−f) ⊙ dcs ⊙ cs_prev     di = i(1−i) ⊙ dcs ⊙ ci
        dicfo = [di | dci | df | do]
        cs_prev_grad = dcs ⊙ f [+ di ⊙ wci + df ⊙ wcf]
        wci_grad = Σ_n di ⊙ cs_prev   wcf_grad = Σ_n df ⊙ cs_prev   wco_grad = Σ_n do ⊙ cs

    The clamp of ``cell_clip`` is straight-through (TensorFlow's behaviour): its derivative is
    taken as 1 even where it was active. ``co`` is recomputed as ``tanh(cs)``; ``b`` is
    validated, not used. The input and weight gradients are
    :func:`lstm_block_cell_weight_grads`.
    """
    call = _lstm_cell_call(x, cs_prev, h_prev, w, wci, wcf, wco, b, device, i=i, cs=cs, f=f,
                           o=o, ci=ci, co=co, cs_grad=cs_grad, h_grad=h_grad)
    extra = [("i", i), ("cs", cs), ("f", f), ("o", o), ("ci", ci), ("co", co),
             ("cs_grad", cs_grad), ("h_grad", h_grad)]
    layer = _LSTM(call, _ICFO, False, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                  use_peephole=use_peephole, extra=extra, need_w=False, need_b=False)
    gates = {"i": ("i", i), "f": ("f", f), "c": ("ci", ci), "o": ("o", o)}
    _, grads, _, dc0 = layer.backward(gates, cs, None, cs_grad, h_grad, need_dR=False,
                                      full=True)
    N, H = layer.N, layer.H
    return _results(call, (dc0, (N, H)), (grads.dgx, (N, 4 * H)), *layer.peephole_grads(grads))


@entry_point
def lstm_block_cell_weight_grads(x: Array, h_prev: Array, w: Array, dicfo: Array, *,
                                 device: DeviceArg = None) -> _Arrays4:
    r"""Input, state, weight and bias gradients of ``LSTMBlockCell`` from the gate gradients
    ``dicfo`` ``[N, 4H]`` of :func:`lstm_block_cell_grad`. Returns
    ``(x_grad [N, I], h_prev_grad [N, H], w_grad [I+H, 4H], b_grad [4H])``::

        [x_grad | h_prev_grad] = dicfo · wᵀ      w_grad = [x, h_prev]ᵀ · dicfo
        b_grad = Σ_n dicfo
    """
    call = Call(dict(x=x, h_prev=h_prev, w=w, dicfo=dicfo), device)
    _, N, I, H = _sizes(x, h_prev, 2)
    GH = 4 * H
    _check_all([("w", w, (I + H, GH)), ("dicfo", dicfo, (N, GH))], N, I, H)
    q, dev, dt = call, call.device, call.dtype
    xd, hd, wd, dg = q.devs(("x", x), ("h_prev", h_prev), ("w", w), ("dicfo", dicfo))
    x_grad, h_grad = q.empty((N, I)), q.empty((N, H))
    gemm(dev, dt, N, I, GH, dg, wd, x_grad, trans_b=True)
    gemm(dev, dt, N, H, GH, dg, wd, h_grad, trans_b=True, b_offset=I * GH)
    w_grad, b_grad = q.empty((I + H, GH)), q.empty((GH,))
    gemm(dev, dt, I, GH, N, xd, dg, w_grad, trans_a=True)
    gemm(dev, dt, H, GH, N, hd, dg, w_grad, trans_a=True, c_offset=I * GH)
    sum_rows(dev, dt, N, GH, dg, b_grad)
    return _results(q, (x_grad, None), (h_grad, None), (w_grad, None), (b_grad, None))


def _block_lstm(layout, seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias,
                cell_clip, use_peephole, device):
    call = _lstm_cell_call(x, cs_prev, h_prev, w, wci, wcf, wco, b, device)
    layer = _LSTM(call, layout, True, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                  seq_len_max=seq_len_max, use_peephole=use_peephole, forget_bias=forget_bias,
                  cell_clip=cell_clip)
    return layer.forward((layer.T, layer.N, layer.H))


def _block_lstm_grad(layout, seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o,
                     ci, co, h, cs_grad, h_grad, use_peephole, device):
    call = _lstm_cell_call(x, cs_prev, h_prev, w, wci, wcf, wco, b, device, i=i, cs=cs, f=f,
                           o=o, ci=ci, co=co, h=h, cs_grad=cs_grad, h_grad=h_grad)
    extra = [("i", i), ("cs", cs), ("f", f), ("o", o), ("ci", ci), ("co", co), ("h", h),
             ("cs_grad", cs_grad), ("h_grad", h_grad)]
    layer = _LSTM(call, layout, True, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                  seq_len_max=seq_len_max, use_peephole=use_peephole, extra=extra,
                  need_b=False)
    q, T, N, I, H, GH = call, layer.T, layer.N, layer.I, layer.H, 4 * layer.H
    gates = {"i": ("i", i), "f": ("f", f), "c": ("ci", ci), "o": ("o", o)}
    x_grad, dW, db = q.empty((T, N, I)), q.empty((GH, I)), q.empty((GH,))
    side = engine.InputSide(I, x=layer.x, w=engine.Target(layer.W, 0, GH * I), dx=x_grad,
                            dw=engine.Target(dW, 0, GH * I), db=engine.Target(db, 0, GH))
    _, grads, dh0, dc0 = layer.backward(gates, cs, h, cs_grad, h_grad, inputs=side)
    dR = grads.dR
    w_grad = q.empty((I + H, GH))   # [dWᵀ ; dRᵀ]
    _transpose_into(q, w_grad, 0, GH, dW, 0, I, GH, I)
    _transpose_into(q, w_grad, I * GH, GH, dR, 0, H, GH, H)
    return _results(q, (x_grad, (T, N, I)), (dc0, (N, H)), (dh0, (N, H)), (w_grad, None),
                    *layer.peephole_grads(grads), (db, None))


_SEQ_DOC = r"""

    Shapes: ``x [T, N, I]``, ``cs_prev, h_prev [N, H]``, ``w [I+H, 4H]``, ``wci, wcf, wco
    [H]``, ``b [4H]``; ``seq_len_max`` an integer scalar in ``[0, T]`` (int, NumPy integer or
    0-d integer array; ``TypeError``/``ValueError`` naming it otherwise) — one length for the
    whole batch."""


@entry_point
def block_lstm(seq_len_max: SeqLen, x: Array, cs_prev: Array, h_prev: Array, w: Array, wci: Array,
               wcf: Array, wco: Array, b: Array, *, forget_bias: float = 1.0,
               cell_clip: float = 3.0, use_peephole: bool = False,
               device: DeviceArg = None) -> _Arrays7:
    return _block_lstm(_ICFO, seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias,
                       cell_clip, use_peephole, device)


block_lstm.__doc__ = r"""TensorFlow ``BlockLSTM``: :func:`lstm_block_cell` (ICFO gate columns
    ``[i | ci | f | o]``, ``forget_bias`` on f, ``cell_clip``, TF peepholes) over ``T`` steps.""" \
    + _SEQ_DOC + r"""

    Returns ``(i, cs, f, o, ci, co, h)``, each ``[T, N, H]``: step t runs the cell on
    ``x[t]`` with ``cs_prev, h_prev = cs[t−1], h[t−1]`` (the given states at t = 0) for
    t < ``seq_len_max``; rows t ≥ ``seq_len_max`` are zero in **every** output (TensorFlow
    zeroes only cs and h there and leaves the others unwritten)::

        [ī | c̄i | f̄ | ō] = [x[t], h[t−1]] · w + b
        i = σ(ī + wci ⊙ cs[t−1])    f = σ(f̄ + forget_bias + wcf ⊙ cs[t−1])    ci = tanh(c̄i)
        cs[t] = clamp(ci ⊙ i + cs[t−1] ⊙ f, ±cell_clip)   (no clamp when cell_clip ≤ 0)
        o = σ(ō + wco ⊙ cs[t])    co = tanh(cs[t])    h[t] = co ⊙ o
    """


@entry_point
def block_lstm_v2(seq_len_max: SeqLen, x: Array, cs_prev: Array, h_prev: Array, w: Array,
                  wci: Array, wcf: Array, wco: Array, b: Array, *, cell_clip: float = 0.0,
                  use_peephole: bool = False, device: DeviceArg = None) -> _Arrays7:
    return _block_lstm(_IFCO, seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, 0.0,
                       cell_clip, use_peephole, device)


block_lstm_v2.__doc__ = r"""TensorFlow ``BlockLSTMV2``: :func:`block_lstm` with IFCO gate
    columns ``[i | f | ci | o]``, **no** ``forget_bias`` (0) and ``cell_clip`` default 0.0
    (no clamp).""" + _SEQ_DOC + r"""

    Returns ``(i, cs, f, o, ci, co, h)``, each ``[T, N, H]``, zero at t ≥ ``seq_len_max``.
    """


@entry_point
def block_lstm_grad(seq_len_max: SeqLen, x: Array, cs_prev: Array, h_prev: Array, w: Array,
                    wci: Array, wcf: Array, wco: Array, b: Array, i: Array, cs: Array, f: Array,
                    o: Array, ci: Array, co: Array, h: Array, cs_grad: Array, h_grad: Array, *,
                    use_peephole: bool = False, device: DeviceArg = None) -> _Arrays8:
    return _block_lstm_grad(_ICFO, seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs,
                            f, o, ci, co, h, cs_grad, h_grad, use_peephole, device)


_GRAD_DOC = r"""

    Also takes the seven forward outputs ``i, cs, f, o, ci, co, h`` ``[T, N, H]`` and the
    per-step upstream gradients ``cs_grad``, ``h_grad`` ``[T, N, H]`` (dL/dcs[t], dL/dh[t]).
    Returns ``(x_grad [T, N, I], cs_prev_grad [N, H], h_prev_grad [N, H], w_grad [I+H, 4H],
    wci_grad, wcf_grad, wco_grad [H], b_grad [4H])``. For t = seq_len_max−1 … 0 the cell
    gradient (:func:`lstm_block_cell_grad`, straight-through clip) runs with
    ``cs_grad[t] + (cs_prev_grad of step t+1)`` and ``h_grad[t] + (h_prev_grad of step t+1)``;
    ``[x_grad[t] | h_prev_grad] = dgates[t] · wᵀ``, ``w_grad = Σ_t [x[t], h[t−1]]ᵀ · dgates[t]``,
    ``b_grad = Σ_{t,n} dgates``, peephole gradients summed over t and n. ``x_grad`` is zero at
    t ≥ ``seq_len_max`` and the upstream gradients there are ignored. ``co`` is recomputed as
    ``tanh(cs)``; ``b`` is validated, not used."""


block_lstm_grad.__doc__ = r"""TensorFlow ``BlockLSTMGrad``: gradients of :func:`block_lstm`
    (ICFO).""" + _SEQ_DOC + _GRAD_DOC + "\n    "


@entry_point
def block_lstm_grad_v2(seq_len_max: SeqLen, x: Array, cs_prev: Array, h_prev: Array, w: Array,
                       wci: Array, wcf: Array, wco: Array, b: Array, i: Array, cs: Array, f: Array,
                       o: Array, ci: Array, co: Array, h: Array, cs_grad: Array, h_grad: Array, *,
                       use_peephole: bool = False, device: DeviceArg = None) -> _Arrays8:
    return _block_lstm_grad(_IFCO, seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs,
                            f, o, ci, co, h, cs_grad, h_grad, use_peephole, device)


block_lstm_grad_v2.__doc__ = r"""TensorFlow ``BlockLSTMGradV2``: gradients of
    :func:`block_lstm_v2` (IFCO: ``w_grad``, ``b_grad`` columns ``[i | f | ci | o]``). Call this
    directly: TensorFlow's tape registers the ICFO ``BlockLSTMGrad`` for ``BlockLSTMV2`` too,
    which gives wrong gradients (semantics.md §3.3).""" + _SEQ_DOC + _GRAD_DOC + "\n    "
