"""MPSGraph dialect (API.md §1) test helpers: the configurations the layer tests share (each
one is a compiled program: reuse them), calling the library and the float64 reference
``tests/reference/mps_ref.py`` with the same arguments, and :func:`check_against_reference`
(every forward output and every gradient output against the reference).
"""

from __future__ import annotations

import dataclasses

import numpy as np

import pyrnn_cl as rc
from helpers import shapes as S
from helpers.compare import assert_close
from reference import mps_ref as M

KINDS = ("rnn", "lstm", "gru")
LIB_FWD = {"rnn": rc.single_gate_rnn, "lstm": rc.lstm, "gru": rc.gru}
LIB_GRAD = {"rnn": rc.single_gate_rnn_gradients, "lstm": rc.lstm_gradients,
            "gru": rc.gru_gradients}
REF_FWD = {"rnn": M.single_gate_rnn, "lstm": M.lstm, "gru": M.gru}
REF_GRAD = {"rnn": M.single_gate_rnn_gradients, "lstm": M.lstm_gradients,
            "gru": M.gru_gradients}
DESC = {"rnn": rc.SingleGateRNNDescriptor, "lstm": rc.LSTMDescriptor, "gru": rc.GRUDescriptor}
REF_DESC = {"rnn": M.SingleGateRNNDescriptor, "lstm": M.LSTMDescriptor,
            "gru": M.GRUDescriptor}
#: Gradient outputs in API order (entries of inputs passed as None are omitted).
GRAD_ORDER = {
    "rnn": ("source", "recurrent_weight", "input_weight", "bias", "init_state"),
    "lstm": ("source", "recurrent_weight", "input_weight", "bias", "peephole", "init_state",
             "init_cell"),
    "gru": ("source", "recurrent_weight", "input_weight", "bias", "init_state",
            "secondary_bias"),
}
ACTS = M.ACTIVATIONS  # none, relu, tanh, sigmoid, hard_sigmoid


# =================================================================================================
# Configurations (each one is a compiled program: reuse them)


def _latin(fields, shift):
    """Field k gets ACTS[(k + shift) % 5]: the five shifts give every activation to every
    field, and every shift differs from the defaults in every field that has one."""
    return {f: ACTS[(k + shift) % len(ACTS)] for k, f in enumerate(fields)}


LSTM_ACT_FIELDS = ("input_gate_activation", "forget_gate_activation", "cell_gate_activation",
                   "output_gate_activation", "activation")
GRU_ACT_FIELDS = ("update_gate_activation", "reset_gate_activation", "output_gate_activation")

#: GRU (reset_gate_first, reset_after, flip_z) -> activations (default or a Latin shift).
GRU_MATRIX = {
    (False, False, False): {},
    (False, True, False): {},
    (True, True, False): {},
    (True, False, False): _latin(GRU_ACT_FIELDS, 0),
    (False, False, True): _latin(GRU_ACT_FIELDS, 1),
    (True, False, True): _latin(GRU_ACT_FIELDS, 2),
    (False, True, True): _latin(GRU_ACT_FIELDS, 3),
    (True, True, True): _latin(GRU_ACT_FIELDS, 4),
}


def gru_flags(rgf, ra, fz):
    return dict(reset_gate_first=rgf, reset_after=ra, flip_z=fz, **GRU_MATRIX[(rgf, ra, fz)])


def gru_id(key):
    rgf, ra, fz = key
    acts = GRU_MATRIX[key]
    return "-".join(["rzo" if rgf else "zro", "after" if ra else "before",
                     "flip_z" if fz else "z_new"] + (list(acts.values()) if acts else []))


#: LSTM activation settings: the five Latin shifts (forget_gate_last on shifts 1 and 3).
LSTM_ACTS = [dict(_latin(LSTM_ACT_FIELDS, k), forget_gate_last=k in (1, 3)) for k in range(5)]


def default_flags(kind):
    """The configuration used where a test is about something else (smooth, all paths)."""
    if kind == "rnn":
        return {"activation": "tanh"}
    if kind == "gru":
        return gru_flags(False, True, False)
    return {}


def desc_of(kind, **flags):
    return DESC[kind](**flags)


def training_desc(kind, desc):
    """The forward descriptor whose outputs feed the gradient op: [h, c, z] / [h, z]."""
    extra = {"produce_cell": True} if kind == "lstm" else {}
    return dataclasses.replace(desc, training=True, **extra)




# Calling the library and the reference


def ref_desc(kind, desc):
    """The reference's descriptor with the library descriptor's field values."""
    cls = REF_DESC[kind]
    return cls(**{f.name: getattr(desc, f.name) for f in dataclasses.fields(cls)})


def split(inputs):
    args = dict(inputs)
    return args.pop("source"), args.pop("recurrent_weight"), args


def forward(kind, inputs, desc, device=None, *, ref=False):
    src, R, args = split(inputs)
    if ref:
        return REF_FWD[kind](src, R, **args, descriptor=ref_desc(kind, desc))
    return LIB_FWD[kind](src, R, **args, descriptor=desc, device=device)


def lib_gradients(kind, inputs, desc, device, source_gradient, state_gradient=None,
                  cell_gradient=None, saved=None):
    """The library's gradient op fed with its own forward's saved values (``saved`` = the
    training forward's outputs, computed here when None); returns the output list."""
    src, R, args = split(inputs)
    if saved is None:
        saved = forward(kind, inputs, training_desc(kind, desc), device)
    extra = {"state_gradient": state_gradient}
    if kind == "lstm":
        h, c, z = saved
        pos = (z, c)
        extra["cell_gradient"] = cell_gradient
    elif kind == "gru":
        h, z = saved
        pos = (z, h)
    else:
        h, z = saved
        pos = (z,)
    return LIB_GRAD[kind](src, R, source_gradient, *pos, **args, **extra, descriptor=desc,
                          device=device)


def ref_gradients(kind, inputs, desc, source_gradient, state_gradient=None, cell_gradient=None):
    src, R, args = split(inputs)
    extra = {"state_gradient": state_gradient}
    if kind == "lstm":
        extra["cell_gradient"] = cell_gradient
    pos = (None,) if kind == "rnn" else (None, None)
    return REF_GRAD[kind](src, R, source_gradient, *pos, **args, **extra,
                          descriptor=ref_desc(kind, desc))


def grad_names(kind, inputs):
    return [n for n in GRAD_ORDER[kind] if n in inputs]


def upstream(kind, T, N, H, D, seed=100, dtype=np.float64, which=("dy", "dhn", "dcn")):
    """Random upstream gradients (source_gradient, state_gradient, cell_gradient); the names
    not in ``which`` (and cell_gradient for non-LSTM ops) are None."""
    rng = np.random.default_rng(seed)
    dy = rng.standard_normal((T, N, D * H)).astype(dtype) if "dy" in which else None
    dhn = rng.standard_normal((N, D * H)).astype(dtype) if "dhn" in which else None
    dcn = (rng.standard_normal((N, D * H)).astype(dtype)
           if "dcn" in which and kind == "lstm" else None)
    return dy, dhn, dcn


def activated_z(kind, desc, z_pre, H):
    """Reference pre-activations -> the library's documented z_state (pyrnn_cl.mps): the
    pre-activation for single gate, post-activation gates for LSTM and GRU."""
    if kind == "rnn":
        return z_pre
    if kind == "lstm":
        order = ("i", "z", "f", "o") if desc.forget_gate_last else ("i", "f", "z", "o")
        acts = {"i": desc.input_gate_activation, "f": desc.forget_gate_activation,
                "z": desc.cell_gate_activation, "o": desc.output_gate_activation}
    else:
        order = ("r", "z", "o") if desc.reset_gate_first else ("z", "r", "o")
        acts = {"z": desc.update_gate_activation, "r": desc.reset_gate_activation,
                "o": desc.output_gate_activation}
    out = np.empty_like(z_pre)
    for blk in range(z_pre.shape[-1] // H):
        g = order[blk % len(order)]
        out[..., blk * H:(blk + 1) * H] = M.activate(acts[g], z_pre[..., blk * H:(blk + 1) * H])
    return out


def check_against_reference(device, kind, desc, inputs, dtype=np.float64, seed=100,
                            which=("dy", "dhn", "dcn")):
    """Every forward output (training: [h, c, z] / [h, z]) and every gradient output vs mps_ref,
    the gradient op fed with the library's own saved values. Returns (outputs, gradients)."""
    T, N = inputs["source"].shape[:2]
    H = inputs["recurrent_weight"].shape[-1]
    D = 2 if desc.bidirectional else 1
    G = S.GATES[kind]
    tdesc = training_desc(kind, desc)
    out = forward(kind, inputs, tdesc, device)
    ref = forward(kind, inputs, tdesc, ref=True)
    assert len(out) == len(ref) == (3 if kind == "lstm" else 2)
    assert_close(out[0], ref[0], dtype, f"{kind} h")
    if kind == "lstm":
        assert_close(out[1], ref[1], dtype, "lstm c")
    assert out[-1].shape == (T, N, D * G * H)
    assert_close(out[-1], activated_z(kind, desc, ref[-1], H), dtype, f"{kind} z_state")
    dy, dhn, dcn = upstream(kind, T, N, H, D, seed, dtype, which)
    got = lib_gradients(kind, inputs, desc, device, dy, dhn, dcn, saved=out)
    want = ref_gradients(kind, inputs, desc, dy, dhn, dcn)
    names = grad_names(kind, inputs)
    assert len(got) == len(want) == len(names), (len(got), names)
    for name, g, w in zip(names, got, want):
        assert_close(g, w, dtype, f"{kind} d_{name}", part="gradient")
    return out, got

