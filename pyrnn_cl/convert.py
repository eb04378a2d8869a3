r"""Weight converters between other frameworks' RNN parameter formats and pyrnn_cl's dialects.

Every function is plain NumPy (no device, no torch import): it reorders and transposes blocks,
so a round trip gives back exactly the arrays it started from, in their own dtype (the three
exceptions are said where they occur: TF's ``forget_bias`` folded into a bias, and Keras' single
LSTM bias, which holds ``b_W + b_R``). Inputs may be NumPy arrays, anything ``numpy.asarray``
takes, or torch tensors (detached and copied to host). Outputs are new C-contiguous arrays.

Formats (G = gates, H = hidden units, I = input width; docs/semantics.md has the full tables):

=============================  ======================================  ====================
format                          arrays                                 gate order
=============================  ======================================  ====================
cuDNN canonical (API.md §3)    per layer, per direction: W_g [H,in],    LSTM i,f,g,o
                               R_g [H,R], W_proj [P,H]; bW_g, bR_g [H]  GRU r,z,h'
PyTorch ``nn.LSTM/GRU/RNN``    weight_ih_l{k}[_reverse] [G·H, in],     = cuDNN
                               weight_hh [G·H, R], bias_ih/hh [G·H],
                               weight_hr [P, H]
MPSGraph (``rc.lstm/gru``)     input_weight [G·H, I], recurrent_weight  LSTM i,f,z,o
                               [G·H, H], bias [G·H]                     GRU z,r,o / r,z,o
TF LSTMBlockCell / BlockLSTM   w [I+H, 4H] (rows x then h), b [4H],     i,ci,f,o (V2: i,f,ci,o)
                               forget_bias
TF GRUBlockCell                w_ru [I+H, 2H], w_c [I+H, H],            r,u | c
                               b_ru [2H], b_c [H]
ONNX LSTM/GRU/RNN              W [D, G·H, I], R [D, G·H, H],            LSTM i,o,f,c
                               B [D, 2·G·H] = [Wb | Rb]                 GRU z,r,h
Keras LSTM/GRU                 kernel [I, G·H], recurrent_kernel        LSTM i,f,c,o
                               [H, G·H], bias [G·H] (GRU reset_after:   GRU z,r,h
                               [2, 3H] = [input; recurrent])
=============================  ======================================  ====================

GRU variants: the cuDNN/PyTorch GRU applies the reset gate *after* the recurrent matmul
(``h' = tanh(W_h x + b_Wh + r ⊙ (R_h h + b_Rh))``, ONNX ``linear_before_reset=1``, Keras
``reset_after=True``); TF's GRUBlockCell, Keras ``reset_after=False`` and ONNX
``linear_before_reset=0`` apply it *before* (``tanh(W_h x + (r ⊙ h) R_hᵀ + b)``). A reset-before
GRU has no cuDNN form: those converters target the MPSGraph GRU (``reset_after=False``) instead
and the cuDNN ones raise ``ValueError`` for it. Every GRU here updates
``h = z ⊙ h_prev + (1 − z) ⊙ h'`` (MPSGraph ``flip_z=True``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union, cast

import numpy as np

from ._arrays import check_choice
from .errors import ShapeError
from .layout import DIRECTIONS, NUM_GATES, RNN_MODES

if TYPE_CHECKING:
    import torch
    from numpy.typing import ArrayLike

#: A ``torch.nn.RNN/GRU/LSTM`` state dict (names to tensors or arrays) or the module itself.
StateDict = Union[Mapping[str, Any], "torch.nn.Module"]
#: cuDNN canonical ``(weights, biases)`` lists (API.md §3), NumPy arrays.
Canonical = tuple[list[np.ndarray], list[np.ndarray]]
_Arrays2 = tuple[np.ndarray, np.ndarray]
_Arrays3 = tuple[np.ndarray, np.ndarray, np.ndarray]
_Arrays4 = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

__all__ = [
    "GATES", "MPS_GRU_FLAGS_TF", "MPS_GRU_FLAGS_KERAS",
    "torch_config", "torch_to_canonical", "canonical_to_torch", "torch_to_params",
    "params_to_torch",
    "tf_lstm_block_to_mps", "mps_to_tf_lstm_block", "tf_lstm_block_to_canonical",
    "canonical_to_tf_lstm_block", "tf_gru_block_to_mps", "mps_to_tf_gru_block",
    "onnx_to_canonical", "canonical_to_onnx",
    "keras_lstm_to_canonical", "canonical_to_keras_lstm", "keras_gru_to_canonical",
    "canonical_to_keras_gru", "keras_gru_to_mps", "mps_to_keras_gru",
]

#: Gates per cuDNN ``rnn_mode`` (``layout.NUM_GATES``, a view of the cell registry).
GATES = NUM_GATES

#: ``rc.GRUDescriptor`` flags for the GRU of :func:`tf_gru_block_to_mps` (blocks ``[r, u, c]``).
MPS_GRU_FLAGS_TF = dict(reset_gate_first=True, reset_after=False, flip_z=True)
#: ``rc.GRUDescriptor`` flags for the GRU of :func:`keras_gru_to_mps` (blocks ``[z, r, h]``).
MPS_GRU_FLAGS_KERAS = dict(reset_gate_first=False, reset_after=False, flip_z=True)

_LAYOUTS = {"icfo": "icfo", "ifco": "ifco"}
_CANONICAL_LSTM = "ifco"      # cuDNN / PyTorch / MPSGraph default (c = g = z)


# ----------------------------------------------------------------------------------------------
# helpers

def _np(name, a, rank=None):
    """``a`` as a fresh NumPy float array (torch tensors are detached and copied)."""
    if a is None:
        raise TypeError(f"{name}: expected an array, got None")
    if hasattr(a, "detach") and hasattr(a, "cpu"):
        a = a.detach().cpu().numpy()
    a = np.array(a, copy=True)
    if a.dtype.kind != "f":
        raise TypeError(f"{name}: expected a floating array, got dtype {a.dtype}")
    if rank is not None and a.ndim != rank:
        raise ShapeError(f"{name}: got shape {list(a.shape)} (rank {a.ndim}), expected rank "
                         f"{rank}")
    return a


def _expect(name, a, shape):
    if tuple(a.shape) != tuple(shape):
        raise ShapeError(f"{name}: got shape {list(a.shape)}, expected {list(shape)}")


def _c(a):
    return np.ascontiguousarray(a)


def _mode(rnn_mode):
    """Gates of a cuDNN ``rnn_mode`` (validated as the cuDNN dialect validates it)."""
    return GATES[check_choice("rnn_mode", rnn_mode, RNN_MODES)]


def _directions(direction):
    return 2 if check_choice("direction", direction, DIRECTIONS) == "bidirectional" else 1


def _layer_shapes(G, H, in_size, P):
    """Canonical weight and bias shapes of one pseudo-layer (linear_input)."""
    R = P or H
    w = [(H, in_size)] * G + [(H, R)] * G + ([(P, H)] if P else [])
    return w, [(H,)] * (2 * G)


def _split_canonical(weights, biases, G, H, I, L, D, P):
    """Per pseudo-layer ``(W list, R list, W_proj|None, bW list, bR list)``, shapes checked."""
    weights, biases = list(weights), list(biases)
    out, iw, ib = [], 0, 0
    for l in range(L):
        for _d in range(D):
            wsh, bsh = _layer_shapes(G, H, I if l == 0 else D * (P or H), P)
            if iw + len(wsh) > len(weights) or ib + len(bsh) > len(biases):
                raise ShapeError(f"weights/biases: got {len(weights)} weights and "
                                 f"{len(biases)} biases, expected {L * D * len(wsh)} and "
                                 f"{L * D * len(bsh)}")
            ws = [_np(f"weights[{iw + j}]", weights[iw + j]) for j in range(len(wsh))]
            bs = [_np(f"biases[{ib + j}]", biases[ib + j]) for j in range(len(bsh))]
            for j, (a, s) in enumerate(zip(ws, wsh)):
                _expect(f"weights[{iw + j}]", a, s)
            for j, (a, s) in enumerate(zip(bs, bsh)):
                _expect(f"biases[{ib + j}]", a, s)
            out.append((ws[:G], ws[G:2 * G], ws[2 * G] if P else None, bs[:G], bs[G:]))
            iw, ib = iw + len(wsh), ib + len(bsh)
    if iw != len(weights) or ib != len(biases):
        raise ShapeError(f"weights/biases: got {len(weights)} weights and {len(biases)} biases, "
                         f"expected {iw} and {ib}")
    return out


def _single_layer_canonical(weights, biases, G):
    """Infer (H, I, D) of a one-layer, projection-free canonical list and split it."""
    weights = list(weights)
    if len(weights) not in (2 * G, 4 * G):
        raise ShapeError(f"weights: got {len(weights)} matrices, expected {2 * G} (one "
                         f"direction) or {4 * G} (bidirectional) for a one-layer model")
    D = len(weights) // (2 * G)
    W0 = _np("weights[0]", weights[0], rank=2)
    H, I = W0.shape
    return _split_canonical(weights, biases, G, H, I, 1, D, 0), H, I, D


def _reorder(blocks, src, dst):
    """Blocks given in gate order ``src`` (a string of gate letters) put into order ``dst``."""
    return [blocks[src.index(g)] for g in dst]


# ----------------------------------------------------------------------------------------------
# PyTorch  (torch.nn.RNN / GRU / LSTM state_dict)  <->  cuDNN canonical / params

def _sd_get(state_dict, key):
    try:
        return state_dict[key]
    except KeyError:
        raise KeyError(f"state_dict: missing {key!r}") from None


def torch_config(state_dict: StateDict, prefix: str = "") -> dict[str, Any]:
    """Sizes of a ``torch.nn.RNN/GRU/LSTM`` state dict (or module), read from its keys and shapes.

    Returns a dict ``num_layers, num_units (H), input_size, direction, num_proj, num_gates,
    bias`` (whether ``bias_*`` entries exist). The nonlinearity of ``nn.RNN`` is not stored in a
    state dict; ``torch_to_params`` asks for it.
    """
    if hasattr(state_dict, "state_dict") and callable(state_dict.state_dict):
        state_dict = state_dict.state_dict()
    keys = [k[len(prefix):] for k in state_dict if k.startswith(prefix)]
    L = 0
    while f"weight_ih_l{L}" in keys:
        L += 1
    if L == 0:
        raise KeyError(f"state_dict: no {prefix}weight_ih_l0 entry (keys: {list(state_dict)[:8]})")
    D = 2 if "weight_ih_l0_reverse" in keys else 1
    w_ih = _np(prefix + "weight_ih_l0", _sd_get(state_dict, prefix + "weight_ih_l0"), rank=2)
    w_hh = _np(prefix + "weight_hh_l0", _sd_get(state_dict, prefix + "weight_hh_l0"), rank=2)
    P = 0
    if "weight_hr_l0" in keys:
        w_hr = _np(prefix + "weight_hr_l0", state_dict[prefix + "weight_hr_l0"], rank=2)
        P, H = w_hr.shape
    else:
        H = w_hh.shape[1]
    if H < 1 or w_ih.shape[0] % H or w_ih.shape[0] // H not in (1, 3, 4):
        raise ShapeError(f"{prefix}weight_ih_l0: got shape {list(w_ih.shape)}, expected "
                         f"[G*{H}, input_size] with G in 1, 3, 4")
    return dict(num_layers=L, num_units=H, input_size=w_ih.shape[1],
                direction="bidirectional" if D == 2 else "unidirectional", num_proj=P,
                num_gates=w_ih.shape[0] // H, bias="bias_ih_l0" in keys)


def _torch_names(l, d):
    sfx = f"_l{l}" + ("_reverse" if d else "")
    return [n + sfx for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")]


def torch_to_canonical(state_dict: StateDict, prefix: str = "") -> Canonical:
    """``torch.nn.RNN/GRU/LSTM`` state dict (or the module) -> cuDNN canonical ``(weights,
    biases)`` (semantics.md §4.3): per layer and direction, ``weight_ih`` split into its G row
    blocks ``W_g``, ``weight_hh`` into ``R_g``, then ``weight_hr`` (``W_proj``); biases
    ``bias_ih`` -> ``bW_g``, ``bias_hh`` -> ``bR_g`` (zeros when the model has ``bias=False``).
    PyTorch's gate order is cuDNN's, so no gate is permuted."""
    if hasattr(state_dict, "state_dict") and callable(state_dict.state_dict):
        state_dict = state_dict.state_dict()
    cfg = torch_config(state_dict, prefix)
    L, H, G, P = cfg["num_layers"], cfg["num_units"], cfg["num_gates"], cfg["num_proj"]
    D = 2 if cfg["direction"] == "bidirectional" else 1
    weights, biases = [], []
    for l in range(L):
        in_l = cfg["input_size"] if l == 0 else D * (P or H)
        for d in range(D):
            w_ih, w_hh, b_ih, b_hh, w_hr = (prefix + n for n in _torch_names(l, d))
            a = _np(w_ih, _sd_get(state_dict, w_ih))
            _expect(w_ih, a, (G * H, in_l))
            r = _np(w_hh, _sd_get(state_dict, w_hh))
            _expect(w_hh, r, (G * H, P or H))
            weights += [_c(x) for x in np.split(a, G)] + [_c(x) for x in np.split(r, G)]
            if P:
                p = _np(w_hr, _sd_get(state_dict, w_hr))
                _expect(w_hr, p, (P, H))
                weights.append(p)
            if cfg["bias"]:
                for name in (b_ih, b_hh):
                    b = _np(name, _sd_get(state_dict, name))
                    _expect(name, b, (G * H,))
                    biases += [_c(x) for x in np.split(b, G)]
            else:
                biases += [np.zeros(H, a.dtype) for _ in range(2 * G)]
    return weights, biases


def canonical_to_torch(weights: Sequence[ArrayLike], biases: Sequence[ArrayLike], *, rnn_mode: str,
                       num_layers: int, num_units: int, input_size: int,
                       direction: str = "unidirectional", num_proj: int = 0, bias: bool = True,
                       prefix: str = "", tensors: bool = False) -> OrderedDict[str, Any]:
    """Inverse of :func:`torch_to_canonical`: an ordered state dict with torch.nn's keys and
    order (``load_state_dict(..., strict=True)`` ready when ``tensors=True``, which returns torch
    tensors; NumPy arrays otherwise). ``bias=False`` drops the bias entries and raises
    ``ValueError`` if a canonical bias is not zero (the model could not represent it)."""
    G = _mode(rnn_mode)
    D = _directions(direction)
    if num_proj and G != 4:
        raise ValueError(f"num_proj: got {num_proj}, but projection exists only for 'lstm'")
    layers = _split_canonical(weights, biases, G, num_units, input_size, num_layers, D, num_proj)
    sd = OrderedDict()
    for l in range(num_layers):
        for d in range(D):
            W, R, Wp, bW, bR = layers[l * D + d]
            w_ih, w_hh, b_ih, b_hh, w_hr = (prefix + n for n in _torch_names(l, d))
            sd[w_ih] = np.concatenate(W, 0)
            sd[w_hh] = np.concatenate(R, 0)
            if bias:
                sd[b_ih] = np.concatenate(bW)
                sd[b_hh] = np.concatenate(bR)
            elif any(np.any(b != 0) for b in bW + bR):
                raise ValueError(f"biases: layer {l} direction {d} has non-zero biases, which a "
                                 "bias=False model cannot hold")
            if num_proj:
                sd[w_hr] = Wp
    if tensors:
        import torch
        sd = OrderedDict((k, torch.from_numpy(v)) for k, v in sd.items())
    return sd


def _infer_mode(cfg, rnn_mode):
    if rnn_mode is not None:
        if _mode(rnn_mode) != cfg["num_gates"]:
            raise ValueError(f"rnn_mode: {rnn_mode!r} has {GATES[rnn_mode]} gates, but the "
                             f"state dict holds {cfg['num_gates']}")
        return rnn_mode
    if cfg["num_gates"] == 1:
        raise ValueError("rnn_mode: a torch.nn.RNN state dict does not record its nonlinearity; "
                         "pass rnn_mode='rnn_tanh' or 'rnn_relu'")
    return {3: "gru", 4: "lstm"}[cfg["num_gates"]]


def torch_to_params(state_dict: StateDict, *, rnn_mode: str | None = None,
                    prefix: str = "") -> tuple[np.ndarray, dict[str, Any]]:
    """State dict (or ``torch.nn`` module) -> ``(params, kwargs)`` for :func:`pyrnn_cl.cudnn_rnn`.

    ``kwargs`` holds ``num_layers, num_units, input_size, rnn_mode, direction, num_proj``; pass
    ``rnn_mode`` for ``nn.RNN`` state dicts (a module gives it from its ``mode``)."""
    if hasattr(state_dict, "mode") and hasattr(state_dict, "state_dict"):
        if rnn_mode is None:
            rnn_mode = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh",
                        "RNN_RELU": "rnn_relu"}[state_dict.mode]
        state_dict = state_dict.state_dict()
    from . import cudnn

    cfg = torch_config(state_dict, prefix)
    mode = _infer_mode(cfg, rnn_mode)
    weights, biases = torch_to_canonical(state_dict, prefix)
    kw = dict(num_layers=cfg["num_layers"], num_units=cfg["num_units"],
              input_size=cfg["input_size"], rnn_mode=mode, direction=cfg["direction"],
              num_proj=cfg["num_proj"])
    params = cudnn.cudnn_rnn_canonical_to_params(
        kw["num_layers"], kw["num_units"], kw["input_size"], weights, biases, rnn_mode=mode,
        direction=kw["direction"], num_proj=kw["num_proj"])
    return cast(np.ndarray, params), kw     # NumPy canonical lists in: a NumPy array out


def params_to_torch(params: ArrayLike, num_layers: int, num_units: int, input_size: int, *,
                    rnn_mode: str = "lstm", direction: str = "unidirectional", num_proj: int = 0,
                    bias: bool = True, prefix: str = "",
                    tensors: bool = False) -> OrderedDict[str, Any]:
    """Flat cuDNN ``params`` (``input_mode='linear_input'``) -> torch.nn state dict (see
    :func:`canonical_to_torch`)."""
    from . import cudnn

    weights, biases = cudnn.cudnn_rnn_params_to_canonical(
        num_layers, num_units, input_size, params, rnn_mode=rnn_mode, direction=direction,
        num_proj=num_proj)
    return canonical_to_torch(weights, biases, rnn_mode=rnn_mode, num_layers=num_layers,
                              num_units=num_units, input_size=input_size, direction=direction,
                              num_proj=num_proj, bias=bias, prefix=prefix, tensors=tensors)


# ----------------------------------------------------------------------------------------------
# TensorFlow block ops  <->  MPSGraph dialect / canonical

def _layout(gate_order):
    try:
        return _LAYOUTS[gate_order]
    except (KeyError, TypeError):
        raise ValueError(f"gate_order: got {gate_order!r}, expected 'icfo' (LSTMBlockCell, "
                         "BlockLSTM) or 'ifco' (BlockLSTMV2)") from None


def _tf_lstm_split(w, b, gate_order):
    w = _np("w", w, rank=2)
    if w.shape[1] % 4 or w.shape[1] == 0:
        raise ShapeError(f"w: got shape {list(w.shape)}, expected [input_size + H, 4*H]")
    H = w.shape[1] // 4
    I = w.shape[0] - H
    if I < 0:
        raise ShapeError(f"w: got shape {list(w.shape)}, expected [input_size + {H}, {4 * H}]")
    b = np.zeros(4 * H, w.dtype) if b is None else _np("b", b)
    _expect("b", b, (4 * H,))
    order = _layout(gate_order)
    # column blocks in TF's order -> dict gate letter -> (W_g [H, I], R_g [H, H], b_g [H])
    blocks = {}
    for k, g in enumerate(order):
        cols = slice(k * H, (k + 1) * H)
        blocks[g] = (w[:I, cols].T, w[I:, cols].T, b[cols])
    return blocks, H, I


def tf_lstm_block_to_mps(w: ArrayLike, b: ArrayLike | None = None, *, forget_bias: float = 1.0,
                         gate_order: str = "icfo") -> _Arrays3:
    """TF ``LSTMBlockCell``/``BlockLSTM`` weights -> ``(input_weight [4H,I], recurrent_weight
    [4H,H], bias [4H])`` for :func:`pyrnn_cl.lstm` with the default descriptor (blocks
    ``[i, f, z, o]``).

    TF computes ``[ī, c̄i, f̄, ō] = [x, h]·w + b`` (columns ICFO; ``gate_order='ifco'`` for
    BlockLSTMV2) and adds ``forget_bias`` to f̄; here ``forget_bias`` is folded into the f block of
    ``bias``. The outputs then agree with TF's ``h`` and ``cs`` when ``cell_clip <= 0`` and
    ``use_peephole=False`` (TF's clip and its peephole on the new cs have no MPSGraph form)."""
    blocks, H, I = _tf_lstm_split(w, b, gate_order)
    gates = [blocks[g] for g in _CANONICAL_LSTM]
    bias = np.concatenate([g[2] for g in gates])
    bias[H:2 * H] += np.asarray(forget_bias, bias.dtype)
    return (_c(np.concatenate([g[0] for g in gates], 0)),
            _c(np.concatenate([g[1] for g in gates], 0)), bias)


def mps_to_tf_lstm_block(input_weight: ArrayLike, recurrent_weight: ArrayLike,
                         bias: ArrayLike | None = None, *, forget_bias: float = 1.0,
                         gate_order: str = "icfo") -> _Arrays2:
    """Inverse of :func:`tf_lstm_block_to_mps`: ``(w [I+H, 4H], b [4H])``; ``forget_bias`` is
    subtracted from the f block (exact when it is 0; otherwise within one rounding of
    ``|b_f| + forget_bias``)."""
    R = _np("recurrent_weight", recurrent_weight, rank=2)
    H = R.shape[1]
    _expect("recurrent_weight", R, (4 * H, H))
    W = _np("input_weight", input_weight, rank=2)
    if W.shape[0] != 4 * H:
        raise ShapeError(f"input_weight: got shape {list(W.shape)}, expected [{4 * H}, I]")
    b = np.zeros(4 * H, R.dtype) if bias is None else _np("bias", bias)
    _expect("bias", b, (4 * H,))
    b = b.copy()
    b[H:2 * H] -= np.asarray(forget_bias, b.dtype)
    order = _layout(gate_order)
    rows = {g: slice(k * H, (k + 1) * H) for k, g in enumerate(_CANONICAL_LSTM)}
    w = np.concatenate([np.concatenate([W[rows[g]].T, R[rows[g]].T], 0) for g in order], 1)
    return _c(w), _c(np.concatenate([b[rows[g]] for g in order]))


def tf_lstm_block_to_canonical(w: ArrayLike, b: ArrayLike | None = None, *,
                               forget_bias: float = 1.0, gate_order: str = "icfo") -> Canonical:
    """TF ``LSTMBlockCell``/``BlockLSTM`` weights -> cuDNN canonical ``(weights, biases)`` of a
    one-layer unidirectional ``'lstm'`` (Keras' convention: ``bW = 0``, ``bR = b`` with
    ``forget_bias`` folded into ``bR_f``). Same caveats as :func:`tf_lstm_block_to_mps`."""
    blocks, H, I = _tf_lstm_split(w, b, gate_order)
    gates = [blocks[g] for g in _CANONICAL_LSTM]
    bR = [_c(g[2]) for g in gates]
    bR[1] = bR[1] + np.asarray(forget_bias, bR[1].dtype)
    return ([_c(g[0]) for g in gates] + [_c(g[1]) for g in gates],
            [np.zeros(H, bR[0].dtype) for _ in range(4)] + bR)


def canonical_to_tf_lstm_block(weights: Sequence[ArrayLike], biases: Sequence[ArrayLike], *,
                               forget_bias: float = 1.0, gate_order: str = "icfo") -> _Arrays2:
    """Inverse of :func:`tf_lstm_block_to_canonical`: ``(w, b)`` with ``b = bW + bR`` (minus
    ``forget_bias`` on f); TF has one bias, so only ``bW + bR`` survives."""
    layers, H, I, D = _single_layer_canonical(weights, biases, 4)
    if D != 1:
        raise ShapeError("weights: TF's LSTMBlockCell is unidirectional; got a bidirectional "
                         "canonical list")
    W, R, _, bW, bR = layers[0]
    b = np.concatenate([x + y for x, y in zip(bW, bR)])
    return mps_to_tf_lstm_block(np.concatenate(W, 0), np.concatenate(R, 0), b,
                                forget_bias=forget_bias, gate_order=gate_order)


def tf_gru_block_to_mps(w_ru: ArrayLike, w_c: ArrayLike, b_ru: ArrayLike | None = None,
                        b_c: ArrayLike | None = None) -> _Arrays3:
    """TF ``GRUBlockCell`` weights -> ``(input_weight [3H,I], recurrent_weight [3H,H],
    bias [3H])`` for :func:`pyrnn_cl.gru` with ``GRUDescriptor(**MPS_GRU_FLAGS_TF)``
    (``reset_gate_first=True, reset_after=False, flip_z=True``; blocks ``[r, u, c]``).

    TF: ``[r̄|ū] = [x, h]·w_ru + b_ru``, ``c = tanh([x, r⊙h]·w_c + b_c)``,
    ``h' = u⊙h + (1−u)⊙c`` — MPSGraph's reset-before GRU with the update gate u = z."""
    w_ru = _np("w_ru", w_ru, rank=2)
    if w_ru.shape[1] % 2 or w_ru.shape[1] == 0:
        raise ShapeError(f"w_ru: got shape {list(w_ru.shape)}, expected [input_size + H, 2*H]")
    H = w_ru.shape[1] // 2
    I = w_ru.shape[0] - H
    if I < 0:
        raise ShapeError(f"w_ru: got shape {list(w_ru.shape)}, expected [input_size + {H}, "
                         f"{2 * H}]")
    w_c = _np("w_c", w_c)
    _expect("w_c", w_c, (I + H, H))
    b_ru = np.zeros(2 * H, w_ru.dtype) if b_ru is None else _np("b_ru", b_ru)
    _expect("b_ru", b_ru, (2 * H,))
    b_c = np.zeros(H, w_ru.dtype) if b_c is None else _np("b_c", b_c)
    _expect("b_c", b_c, (H,))
    w = np.concatenate([w_ru, w_c], 1)          # columns r | u | c
    return _c(w[:I].T), _c(w[I:].T), np.concatenate([b_ru, b_c])


def mps_to_tf_gru_block(input_weight: ArrayLike, recurrent_weight: ArrayLike,
                        bias: ArrayLike | None = None) -> _Arrays4:
    """Inverse of :func:`tf_gru_block_to_mps`: ``(w_ru, w_c, b_ru, b_c)`` from the tensors of an
    MPSGraph GRU with ``MPS_GRU_FLAGS_TF`` (blocks ``[r, z, o]``)."""
    R = _np("recurrent_weight", recurrent_weight, rank=2)
    H = R.shape[1]
    _expect("recurrent_weight", R, (3 * H, H))
    W = _np("input_weight", input_weight, rank=2)
    if W.shape[0] != 3 * H:
        raise ShapeError(f"input_weight: got shape {list(W.shape)}, expected [{3 * H}, I]")
    b = np.zeros(3 * H, R.dtype) if bias is None else _np("bias", bias)
    _expect("bias", b, (3 * H,))
    w = np.concatenate([W.T, R.T], 0)
    return _c(w[:, :2 * H]), _c(w[:, 2 * H:]), _c(b[:2 * H]), _c(b[2 * H:])


# ----------------------------------------------------------------------------------------------
# ONNX  <->  canonical

_ONNX = {"lstm": ("iofc", "ifco", 4), "gru": ("zrh", "rzh", 3), "rnn": ("a", "a", 1)}


def _onnx_op(op):
    key = str(op).lower()
    if key not in _ONNX:
        raise ValueError(f"op: got {op!r}, expected 'LSTM', 'GRU' or 'RNN'")
    return key, _ONNX[key]


def onnx_to_canonical(op: str, W: ArrayLike, R: ArrayLike, B: ArrayLike | None = None, *,
                      linear_before_reset: int | None = None,
                      P: ArrayLike | None = None) -> Canonical:
    """ONNX ``LSTM``/``GRU``/``RNN`` initializers -> cuDNN canonical ``(weights, biases)`` of a
    one-layer model (``direction='bidirectional'`` when ``W.shape[0] == 2``; ONNX's
    ``direction='reverse'`` alone has no cuDNN form).

    ``W [D, G·H, I]``, ``R [D, G·H, H]``, ``B [D, 2·G·H] = [Wb | Rb]`` (zeros when None); gate
    blocks LSTM ``i,o,f,c`` -> ``i,f,g,o``, GRU ``z,r,h`` -> ``r,z,h'``. A GRU must have
    ``linear_before_reset=1`` (the cuDNN GRU); 0 raises ``ValueError``. LSTM peepholes ``P``
    have no cuDNN form: a non-zero ``P`` raises ``ValueError``. Default activations only (ONNX's
    ``activations`` attribute is not representable either)."""
    kind, (src, dst, G) = _onnx_op(op)
    if kind == "gru" and linear_before_reset != 1:
        raise ValueError(f"linear_before_reset: got {linear_before_reset!r}; only an ONNX GRU with "
                         "linear_before_reset=1 is a cuDNN GRU. A reset-before GRU "
                         "(linear_before_reset=0) matches pyrnn_cl.gru with reset_after=False "
                         "instead")
    if P is not None and np.any(_np("P", P) != 0):
        raise ValueError("P: ONNX LSTM peepholes have no cuDNN form (cuDNN LSTMs have none)")
    W = _np("W", W, rank=3)
    D = W.shape[0]
    if D not in (1, 2) or W.shape[1] % G or W.shape[1] == 0:
        raise ShapeError(f"W: got shape {list(W.shape)}, expected [1 or 2, {G}*H, input_size]")
    H = W.shape[1] // G
    R = _np("R", R)
    _expect("R", R, (D, G * H, H))
    B = np.zeros((D, 2 * G * H), W.dtype) if B is None else _np("B", B)
    _expect("B", B, (D, 2 * G * H))
    weights, biases = [], []
    for d in range(D):
        for a in (W[d], R[d]):
            weights += [_c(x) for x in _reorder(np.split(a, G), src, dst)]
        for b in np.split(B[d], 2):
            biases += [_c(x) for x in _reorder(np.split(b, G), src, dst)]
    return weights, biases


def canonical_to_onnx(op: str, weights: Sequence[ArrayLike],
                      biases: Sequence[ArrayLike]) -> dict[str, Any]:
    """Inverse of :func:`onnx_to_canonical` for a one-layer canonical list: a dict with ``W``,
    ``R``, ``B`` and ``attributes`` (``hidden_size``, ``direction``; GRU:
    ``linear_before_reset=1``) for an ONNX node."""
    kind, (src, dst, G) = _onnx_op(op)
    layers, H, I, D = _single_layer_canonical(weights, biases, G)
    W = np.stack([np.concatenate(_reorder(lay[0], dst, src), 0) for lay in layers])
    R = np.stack([np.concatenate(_reorder(lay[1], dst, src), 0) for lay in layers])
    B = np.stack([np.concatenate(_reorder(lay[3], dst, src) + _reorder(lay[4], dst, src))
                  for lay in layers])
    attrs = dict(hidden_size=H, direction="bidirectional" if D == 2 else "forward")
    if kind == "gru":
        attrs["linear_before_reset"] = 1
    return dict(W=W, R=R, B=B, attributes=attrs)


# ----------------------------------------------------------------------------------------------
# Keras  <->  canonical / MPSGraph

def _keras_kernels(kernel, recurrent_kernel, G):
    k = _np("kernel", kernel, rank=2)
    if k.shape[1] % G or k.shape[1] == 0:
        raise ShapeError(f"kernel: got shape {list(k.shape)}, expected [input_size, {G}*units]")
    H = k.shape[1] // G
    rk = _np("recurrent_kernel", recurrent_kernel)
    _expect("recurrent_kernel", rk, (H, G * H))
    return k, rk, H


def keras_lstm_to_canonical(kernel: ArrayLike, recurrent_kernel: ArrayLike,
                            bias: ArrayLike | None = None) -> Canonical:
    """Keras ``LSTM`` weights (``kernel [I, 4H]``, ``recurrent_kernel [H, 4H]``, ``bias [4H]``,
    column blocks ``i, f, c, o``) -> canonical ``(weights, biases)`` of a one-layer ``'lstm'``:
    ``W_g = kernel[:, g]ᵀ``, ``R_g = recurrent_kernel[:, g]ᵀ``, ``bW = 0``, ``bR = bias`` (what
    Keras feeds cuDNN). The Keras activations must be the defaults (tanh, sigmoid)."""
    k, rk, H = _keras_kernels(kernel, recurrent_kernel, 4)
    b = np.zeros(4 * H, k.dtype) if bias is None else _np("bias", bias)
    _expect("bias", b, (4 * H,))
    return ([_c(x.T) for x in np.split(k, 4, 1)] + [_c(x.T) for x in np.split(rk, 4, 1)],
            [np.zeros(H, k.dtype) for _ in range(4)] + [_c(x) for x in np.split(b, 4)])


def canonical_to_keras_lstm(weights: Sequence[ArrayLike], biases: Sequence[ArrayLike]) -> _Arrays3:
    """Canonical one-layer unidirectional ``'lstm'`` -> Keras ``(kernel, recurrent_kernel,
    bias)`` with ``bias = bW + bR`` (Keras has one bias; exact inverse of
    :func:`keras_lstm_to_canonical`, whose ``bW`` is 0)."""
    layers, H, I, D = _single_layer_canonical(weights, biases, 4)
    if D != 1:
        raise ShapeError("weights: a Keras LSTM layer is unidirectional (wrap it in "
                         "Bidirectional and convert each direction); got two directions")
    W, R, _, bW, bR = layers[0]
    return (_c(np.concatenate([w.T for w in W], 1)), _c(np.concatenate([r.T for r in R], 1)),
            np.concatenate([x + y for x, y in zip(bW, bR)]))


def keras_gru_to_canonical(kernel: ArrayLike, recurrent_kernel: ArrayLike,
                           bias: ArrayLike | None = None, *, reset_after: bool = True) -> Canonical:
    """Keras ``GRU(reset_after=True)`` weights (``kernel [I, 3H]``, ``recurrent_kernel [H, 3H]``,
    column blocks ``z, r, h``; ``bias [2, 3H]`` = input bias, recurrent bias) -> canonical
    ``(weights, biases)`` of a one-layer ``'gru'`` (blocks ``r, z, h'``).

    ``reset_after=False`` (reset before the recurrent matmul) is not a cuDNN GRU: it raises
    ``ValueError``; convert it with :func:`keras_gru_to_mps` instead."""
    if not reset_after:
        raise ValueError("reset_after: a Keras GRU with reset_after=False applies the reset gate "
                         "before the recurrent matmul, which no cuDNN GRU does; use "
                         "keras_gru_to_mps (MPSGraph GRU, reset_after=False)")
    k, rk, H = _keras_kernels(kernel, recurrent_kernel, 3)
    b = np.zeros((2, 3 * H), k.dtype) if bias is None else _np("bias", bias)
    _expect("bias", b, (2, 3 * H))
    weights = [_c(x.T) for x in _reorder(np.split(k, 3, 1), "zrh", "rzh")]
    weights += [_c(x.T) for x in _reorder(np.split(rk, 3, 1), "zrh", "rzh")]
    biases = [_c(x) for row in b for x in _reorder(np.split(row, 3), "zrh", "rzh")]
    return weights, biases


def canonical_to_keras_gru(weights: Sequence[ArrayLike], biases: Sequence[ArrayLike]) -> _Arrays3:
    """Inverse of :func:`keras_gru_to_canonical`: ``(kernel, recurrent_kernel, bias [2, 3H])``
    for ``keras.layers.GRU(reset_after=True)``."""
    layers, H, I, D = _single_layer_canonical(weights, biases, 3)
    if D != 1:
        raise ShapeError("weights: a Keras GRU layer is unidirectional; got two directions")
    W, R, _, bW, bR = layers[0]
    return (_c(np.concatenate([w.T for w in _reorder(W, "rzh", "zrh")], 1)),
            _c(np.concatenate([r.T for r in _reorder(R, "rzh", "zrh")], 1)),
            np.stack([np.concatenate(_reorder(bW, "rzh", "zrh")),
                      np.concatenate(_reorder(bR, "rzh", "zrh"))]))


def keras_gru_to_mps(kernel: ArrayLike, recurrent_kernel: ArrayLike, bias: ArrayLike | None = None,
                     *, reset_after: bool = False) -> _Arrays3:
    """Keras ``GRU(reset_after=False)`` weights (bias ``[3H]``) -> ``(input_weight [3H,I],
    recurrent_weight [3H,H], bias [3H])`` for :func:`pyrnn_cl.gru` with
    ``GRUDescriptor(**MPS_GRU_FLAGS_KERAS)`` (Keras' ``z, r, h`` blocks are MPSGraph's default
    ``[z, r, o]``). Keras 3's ``hard_sigmoid`` (x/6 + 1/2) is not MPSGraph's (0.2x + 1/2):
    keep ``recurrent_activation='sigmoid'``. ``reset_after=True`` raises ``ValueError``: use
    :func:`keras_gru_to_canonical`."""
    if reset_after:
        raise ValueError("reset_after: a Keras GRU with reset_after=True is the cuDNN GRU; use "
                         "keras_gru_to_canonical")
    k, rk, H = _keras_kernels(kernel, recurrent_kernel, 3)
    b = np.zeros(3 * H, k.dtype) if bias is None else _np("bias", bias)
    _expect("bias", b, (3 * H,))
    return _c(k.T), _c(rk.T), b


def mps_to_keras_gru(input_weight: ArrayLike, recurrent_weight: ArrayLike,
                     bias: ArrayLike | None = None) -> _Arrays3:
    """Inverse of :func:`keras_gru_to_mps`: ``(kernel, recurrent_kernel, bias [3H])``."""
    R = _np("recurrent_weight", recurrent_weight, rank=2)
    H = R.shape[1]
    _expect("recurrent_weight", R, (3 * H, H))
    W = _np("input_weight", input_weight, rank=2)
    if W.shape[0] != 3 * H:
        raise ShapeError(f"input_weight: got shape {list(W.shape)}, expected [{3 * H}, I]")
    b = np.zeros(3 * H, R.dtype) if bias is None else _np("bias", bias)
    _expect("bias", b, (3 * H,))
    return _c(W.T), _c(R.T), b
