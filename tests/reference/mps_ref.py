r"""Float64 NumPy reference for the MPSGraph dialect (API.md §1, semantics.md §2).

Same names, argument order, defaults and output order as ``pyrnn_cl``'s public functions; written
from the equations only.  Notation: T steps, N batch, I input width, H units, G gates (1 / 4 / 3),
D directions, m the optional recurrent-input mask, ``x'[t] = x[t]·Wᵀ + b`` the projected input
(``x'[t] = source[t] + b`` when ``input_weight is None``: the source is already projected).

Single gate::

    z[t] = x'[t] + (h[t-1]⊙m[t])·Rᵀ ;   h[t] = act(z[t])

LSTM (gate blocks ``[i,f,z,o]``, or ``[i,z,f,o]`` with ``forget_gate_last``; p split the same way)::

    a[t]   = x'[t] + (h[t-1]⊙m[t])·Rᵀ + p⊙c[t-1]         (peephole added to all four gates)
    i,f,z,o = f_i(a_i), f_f(a_f), f_z(a_z), f_o(a_o)
    c[t]   = f⊙c[t-1] + i⊙z ;   h[t] = o⊙g(c[t])

GRU (gate blocks ``[z,r,o]``, or ``[r,z,o]`` with ``reset_gate_first``; b2 = secondary_bias)::

    z = f_z(x'_z + (h⊙m)·R_zᵀ) ;  r = f_r(x'_r + (h⊙m)·R_rᵀ)
    reset_after=False: c = (h⊙r⊙m)·R_oᵀ          reset_after=True: c = ((h⊙m)·R_oᵀ + b2)⊙r
    o = f_o(c + x'_o)
    flip_z=False: h[t] = (1−z)⊙h[t-1] + z⊙o       flip_z=True: h[t] = z⊙h[t-1] + (1−z)⊙o

Directions: ``reverse`` runs t = T−1 … 0 (output index t = state after consuming x[t]).
``bidirectional`` ignores ``reverse``; direction 0 runs forward, direction 1 in reverse; outputs are
``[fwd | bwd]`` on the feature axis, the backward final state sits at output time 0.  Bidirectional
packing: ``recurrent_weight`` [2,GH,H], ``input_weight`` [2GH,I] (fwd rows then bwd rows), ``bias``
[2GH], source without input weight [T,N,2GH], ``init_state``/``init_cell`` [N,2H], ``peephole``
[2,4H], ``secondary_bias`` [2H], ``mask`` broadcastable to [T,N,2H].

Forward outputs: single gate / GRU ``[h]`` (+ ``z_state`` when training); LSTM ``[h]`` (+ ``c`` when
training or produce_cell) (+ ``z_state`` when training).  **z_state here** is the gate
pre-activations ``[T,N,G·H]`` ([T,N,2GH] bidirectional, fwd block first, gate order of the
descriptor; GRU: ``[a_z, a_r, a_o]`` blocks in gate order with ``a_o = c + x'_o``).  The gradient
functions do **not** read ``z_state``, ``cell_output_fwd`` or ``output_fwd``: they recompute the
forward pass from the primal inputs, so a test may pass the library's own values, or ``None``.

Gradient outputs (omitting the entry of every optional input passed as ``None``):
single gate ``[d_source, d_recurrent_weight, d_input_weight, d_bias, d_init_state]``;
LSTM ``[d_source, d_recurrent_weight, d_input_weight, d_bias, d_peephole, d_init_state,
d_init_cell]``; GRU ``[d_source, d_recurrent_weight, d_input_weight, d_bias, d_init_state,
d_secondary_bias]``.
``source_gradient`` = dL/dh[t] for every t; ``state_gradient``/``cell_gradient`` = dL/d(final h / c)
([N,H] or [N,2H] = [fwd final | bwd final]); ``None`` means zero.
"""
from __future__ import annotations

import dataclasses

import numpy as np

__all__ = [
    "ACTIVATIONS", "sigmoid", "activate", "activate_grad",
    "SingleGateRNNDescriptor", "LSTMDescriptor", "GRUDescriptor",
    "single_gate_rnn", "single_gate_rnn_gradients", "lstm", "lstm_gradients",
    "gru", "gru_gradients",
]

ACTIVATIONS = ("none", "relu", "tanh", "sigmoid", "hard_sigmoid")


def sigmoid(x):
    """Logistic σ(x) = 1/(1+e^−x), written as ½(1+tanh(x/2)) (no overflow for large |x|)."""
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def activate(name, a):
    """Activation ``name`` of pre-activation ``a``; hard_sigmoid(a) = clip(0.2·a + 0.5, 0, 1)."""
    if name == "none":
        return a
    if name == "relu":
        return np.maximum(a, 0.0)
    if name == "tanh":
        return np.tanh(a)
    if name == "sigmoid":
        return sigmoid(a)
    if name == "hard_sigmoid":
        return np.clip(0.2 * a + 0.5, 0.0, 1.0)
    raise ValueError(f"unknown activation {name!r}; expected one of {ACTIVATIONS}")


def activate_grad(name, a):
    """d act(a) / d a (elementwise); relu and hard_sigmoid use 0 at their kinks."""
    if name == "none":
        return np.ones_like(a)
    if name == "relu":
        return (a > 0).astype(np.float64)
    if name == "tanh":
        return 1.0 - np.tanh(a) ** 2
    if name == "sigmoid":
        s = sigmoid(a)
        return s * (1.0 - s)
    if name == "hard_sigmoid":
        return np.where(np.abs(a) < 2.5, 0.2, 0.0)
    raise ValueError(f"unknown activation {name!r}; expected one of {ACTIVATIONS}")


# ----------------------------------------------------------------------------------------------
# Descriptors (fields and defaults of API.md §1)

@dataclasses.dataclass
class SingleGateRNNDescriptor:
    reverse: bool = False
    bidirectional: bool = False
    training: bool = False
    activation: str = "relu"


@dataclasses.dataclass
class LSTMDescriptor:
    reverse: bool = False
    bidirectional: bool = False
    training: bool = False
    produce_cell: bool = False
    forget_gate_last: bool = False
    input_gate_activation: str = "sigmoid"
    forget_gate_activation: str = "sigmoid"
    cell_gate_activation: str = "tanh"
    output_gate_activation: str = "sigmoid"
    activation: str = "tanh"


@dataclasses.dataclass
class GRUDescriptor:
    reverse: bool = False
    bidirectional: bool = False
    training: bool = False
    reset_gate_first: bool = False
    reset_after: bool = False
    flip_z: bool = False
    update_gate_activation: str = "sigmoid"
    reset_gate_activation: str = "sigmoid"
    output_gate_activation: str = "tanh"


def _as_descriptor(cls, descriptor):
    """``None`` → defaults; a dict → ``cls(**dict)``; any other object (e.g. the library's own
    descriptor) → its attributes of the same names, defaults for missing ones."""
    if descriptor is None:
        desc = cls()
    elif isinstance(descriptor, dict):
        desc = cls(**descriptor)
    else:
        desc = cls(**{f.name: getattr(descriptor, f.name, f.default)
                      for f in dataclasses.fields(cls)})
    for f in dataclasses.fields(desc):
        if f.name.endswith("activation"):
            activate(getattr(desc, f.name), np.zeros(1))  # validates the name
    return desc


# ----------------------------------------------------------------------------------------------
# Shared plumbing: split the packed arguments into per-direction float64 pieces, and reassemble
# per-direction gradients into the packed shapes.

def _f64(a):
    return None if a is None else np.asarray(a, dtype=np.float64)


class _Problem:
    """Per-direction views of one call.  ``d`` = 0 forward, 1 backward (bidirectional only)."""

    def __init__(self, source, recurrent_weight, input_weight, bias, G, desc):
        self.x = _f64(source)
        self.R = _f64(recurrent_weight)
        self.W = _f64(input_weight)
        self.b = _f64(bias)
        self.D = 2 if desc.bidirectional else 1
        self.G = G
        if self.x.ndim != 3:
            raise ValueError(f"source must be [T,N,*], got {self.x.shape}")
        self.T, self.N = self.x.shape[:2]
        self.H = self.R.shape[-1]
        GH, D = G * self.H, self.D
        want_R = (GH, self.H) if D == 1 else (2, GH, self.H)
        if self.R.shape != want_R:
            raise ValueError(f"recurrent_weight shape {self.R.shape}, expected {want_R}")
        if self.W is None:
            if self.x.shape[2] != D * GH:
                raise ValueError(f"source shape {self.x.shape}, expected [T,N,{D * GH}] "
                                 "without input_weight")
        elif self.W.shape != (D * GH, self.x.shape[2]):
            raise ValueError(f"input_weight shape {self.W.shape}, "
                             f"expected {(D * GH, self.x.shape[2])}")
        if self.b is not None and self.b.shape != (D * GH,):
            raise ValueError(f"bias shape {self.b.shape}, expected {(D * GH,)}")
        # direction 1 of a bidirectional call always runs backward in time
        self.reversed = [bool(desc.reverse)] if D == 1 else [False, True]

    def steps(self, d):
        return range(self.T - 1, -1, -1) if self.reversed[d] else range(self.T)

    def Rd(self, d):
        return self.R if self.D == 1 else self.R[d]

    def xp(self, d):
        """Projected input x'[t] = x[t]·W_dᵀ + b_d, shape [T,N,G·H]."""
        GH = self.G * self.H
        rows = slice(d * GH, (d + 1) * GH)
        xp = self.x[..., rows].copy() if self.W is None else self.x @ self.W[rows].T
        if self.b is not None:
            xp += self.b[rows]
        return xp

    def state(self, s, d, name):
        """Slice [N,H] of an initial state (zeros when None)."""
        if s is None:
            return np.zeros((self.N, self.H))
        s = _f64(s)
        if s.shape != (self.N, self.D * self.H):
            raise ValueError(f"{name} shape {s.shape}, expected {(self.N, self.D * self.H)}")
        return s[:, d * self.H:(d + 1) * self.H]

    def mask(self, m, d):
        """Mask slice [T,N,H] for direction d (ones when None)."""
        if m is None:
            return np.ones((self.T, self.N, self.H))
        full = np.broadcast_to(_f64(m), (self.T, self.N, self.D * self.H))
        return full[..., d * self.H:(d + 1) * self.H]

    def grad_slice(self, g, d, width):
        """Slice [.., width] of a packed [.., D·width] upstream gradient (zeros when None)."""
        if g is None:
            return None
        g = _f64(g)
        return g[..., d * width:(d + 1) * width]

    def input_grads(self, dxp):
        """From per-direction dL/dx' [T,N,GH]: d_source, d_input_weight, d_bias (packed)."""
        x2 = self.x.reshape(-1, self.x.shape[2])
        if self.W is None:
            d_source = np.concatenate(dxp, axis=-1)
            d_W = None
        else:
            GH = self.G * self.H
            d_source = sum(dxp[d] @ self.W[d * GH:(d + 1) * GH] for d in range(self.D))
            d_W = np.concatenate([dxp[d].reshape(-1, GH).T @ x2 for d in range(self.D)], axis=0)
        d_b = np.concatenate([g.sum(axis=(0, 1)) for g in dxp])
        return d_source, d_W, d_b

    def pack_R(self, dR):
        return dR[0] if self.D == 1 else np.stack(dR)


def _upstream(prob, source_gradient):
    if source_gradient is None:
        return np.zeros((prob.T, prob.N, prob.D * prob.H))
    g = _f64(source_gradient)
    want = (prob.T, prob.N, prob.D * prob.H)
    if g.shape != want:
        raise ValueError(f"source_gradient shape {g.shape}, expected {want}")
    return g


def _blocks(a, H, n):
    return [a[..., k * H:(k + 1) * H] for k in range(n)]


# ----------------------------------------------------------------------------------------------
# Single-gate RNN

def _single_dir_forward(prob, d, desc, init_state, mask):
    xp, R, m = prob.xp(d), prob.Rd(d), prob.mask(mask, d)
    h = prob.state(init_state, d, "init_state")
    T, N, H = prob.T, prob.N, prob.H
    hs, zs, hprev = np.zeros((T, N, H)), np.zeros((T, N, H)), np.zeros((T, N, H))
    for t in prob.steps(d):
        hprev[t] = h
        z = xp[t] + (h * m[t]) @ R.T
        h = activate(desc.activation, z)
        zs[t], hs[t] = z, h
    return dict(h=hs, z=zs, hprev=hprev, m=m, R=R)


def single_gate_rnn(source, recurrent_weight, input_weight=None, bias=None, init_state=None,
                    mask=None, *, descriptor=None, device=None):
    """``[h]`` (+ ``z_state`` = pre-activations z when training);
    z[t] = x'[t] + (h[t-1]⊙m)Rᵀ, h[t] = act(z[t])."""
    desc = _as_descriptor(SingleGateRNNDescriptor, descriptor)
    prob = _Problem(source, recurrent_weight, input_weight, bias, 1, desc)
    fw = [_single_dir_forward(prob, d, desc, init_state, mask) for d in range(prob.D)]
    out = [np.concatenate([f["h"] for f in fw], axis=-1)]
    if desc.training:
        out.append(np.concatenate([f["z"] for f in fw], axis=-1))
    return out


def single_gate_rnn_gradients(source, recurrent_weight, source_gradient, z_state, input_weight=None,
                              bias=None, init_state=None, mask=None, state_gradient=None, *,
                              descriptor=None, device=None):
    """``[d_source, d_recurrent_weight, d_input_weight?, d_bias?, d_init_state?]`` by BPTT::

        dz = (dL/dh[t] + carried) ⊙ act'(z[t]);   dR += dzᵀ(h[t-1]⊙m);   carried = (dz·R)⊙m
    ``z_state`` is ignored (the forward pass is recomputed).
    """
    desc = _as_descriptor(SingleGateRNNDescriptor, descriptor)
    prob = _Problem(source, recurrent_weight, input_weight, bias, 1, desc)
    g_seq = _upstream(prob, source_gradient)
    dxp, dR, dh0 = [], [], []
    for d in range(prob.D):
        f = _single_dir_forward(prob, d, desc, init_state, mask)
        R, m = f["R"], f["m"]
        dh = prob.grad_slice(state_gradient, d, prob.H)
        dh = np.zeros((prob.N, prob.H)) if dh is None else dh.copy()
        gx, gR = np.zeros((prob.T, prob.N, prob.H)), np.zeros_like(R)
        for t in reversed(prob.steps(d)):
            dh = dh + g_seq[t, :, d * prob.H:(d + 1) * prob.H]
            dz = dh * activate_grad(desc.activation, f["z"][t])
            gx[t] = dz
            gR += dz.T @ (f["hprev"][t] * m[t])
            dh = (dz @ R) * m[t]
        dxp.append(gx), dR.append(gR), dh0.append(dh)
    d_source, d_W, d_b = prob.input_grads(dxp)
    out = [d_source, prob.pack_R(dR)]
    if input_weight is not None:
        out.append(d_W)
    if bias is not None:
        out.append(d_b)
    if init_state is not None:
        out.append(np.concatenate(dh0, axis=-1))
    return out


# ----------------------------------------------------------------------------------------------
# LSTM

def _lstm_order(desc):
    return ("i", "z", "f", "o") if desc.forget_gate_last else ("i", "f", "z", "o")


def _lstm_acts(desc):
    return {"i": desc.input_gate_activation, "f": desc.forget_gate_activation,
            "z": desc.cell_gate_activation, "o": desc.output_gate_activation}


def _peephole(prob, peephole, d):
    if peephole is None:
        return None
    p = _f64(peephole)
    want = (4 * prob.H,) if prob.D == 1 else (2, 4 * prob.H)
    if p.shape != want:
        raise ValueError(f"peephole shape {p.shape}, expected {want}")
    return p if prob.D == 1 else p[d]


def _lstm_dir_forward(prob, d, desc, init_state, init_cell, mask, peephole):
    xp, R, m, p = prob.xp(d), prob.Rd(d), prob.mask(mask, d), _peephole(prob, peephole, d)
    h = prob.state(init_state, d, "init_state")
    c = prob.state(init_cell, d, "init_cell")
    T, N, H = prob.T, prob.N, prob.H
    order, acts = _lstm_order(desc), _lstm_acts(desc)
    hs, cs, hprev, cprev = (np.zeros((T, N, H)) for _ in range(4))
    a_seq = np.zeros((T, N, 4 * H))
    for t in prob.steps(d):
        hprev[t], cprev[t] = h, c
        a = xp[t] + (h * m[t]) @ R.T
        if p is not None:
            a = a + p * np.tile(c, 4)  # p_g ⊙ c[t-1] in every gate block
        gate = {g: activate(acts[g], blk) for g, blk in zip(order, _blocks(a, H, 4))}
        c = gate["f"] * c + gate["i"] * gate["z"]
        h = gate["o"] * activate(desc.activation, c)
        a_seq[t], hs[t], cs[t] = a, h, c
    return dict(h=hs, c=cs, a=a_seq, hprev=hprev, cprev=cprev, m=m, R=R, p=p)


def lstm(source, recurrent_weight, input_weight=None, bias=None, init_state=None, init_cell=None,
         mask=None, peephole=None, *, descriptor=None, device=None):
    """``[h]`` (+ ``c`` when training or produce_cell) (+ ``z_state`` = pre-activations a[t]
    when training)."""
    desc = _as_descriptor(LSTMDescriptor, descriptor)
    prob = _Problem(source, recurrent_weight, input_weight, bias, 4, desc)
    fw = [_lstm_dir_forward(prob, d, desc, init_state, init_cell, mask, peephole)
          for d in range(prob.D)]
    out = [np.concatenate([f["h"] for f in fw], axis=-1)]
    if desc.training or desc.produce_cell:
        out.append(np.concatenate([f["c"] for f in fw], axis=-1))
    if desc.training:
        out.append(np.concatenate([f["a"] for f in fw], axis=-1))
    return out


def lstm_gradients(source, recurrent_weight, source_gradient, z_state, cell_output_fwd,
                   input_weight=None, bias=None, init_state=None, init_cell=None, mask=None,
                   peephole=None, state_gradient=None, cell_gradient=None, *, descriptor=None,
                   device=None):
    """``[d_source, d_recurrent_weight, d_input_weight?, d_bias?, d_peephole?, d_init_state?,
    d_init_cell?]`` by BPTT (``z_state`` and ``cell_output_fwd`` are ignored)::

        dh = dL/dh[t] + carried_h ;  dc = carried_c + dh⊙o⊙g'(c[t])
        do = dh⊙g(c[t]) ; di = dc⊙z ; dz = dc⊙i ; df = dc⊙c[t-1]
        da_g = d_g ⊙ f_g'(a_g) ;  carried_c = dc⊙f + Σ_g p_g⊙da_g ;  dp += Σ_n da⊙c[t-1]
        dR += daᵀ(h[t-1]⊙m) ;  carried_h = (da·R)⊙m ;  dx'[t] = da
    """
    desc = _as_descriptor(LSTMDescriptor, descriptor)
    prob = _Problem(source, recurrent_weight, input_weight, bias, 4, desc)
    g_seq = _upstream(prob, source_gradient)
    order, acts = _lstm_order(desc), _lstm_acts(desc)
    T, N, H = prob.T, prob.N, prob.H
    dxp, dR, dP, dh0, dc0 = [], [], [], [], []
    for d in range(prob.D):
        f = _lstm_dir_forward(prob, d, desc, init_state, init_cell, mask, peephole)
        R, m, p = f["R"], f["m"], f["p"]
        dh = prob.grad_slice(state_gradient, d, H)
        dc = prob.grad_slice(cell_gradient, d, H)
        dh = np.zeros((N, H)) if dh is None else dh.copy()
        dc = np.zeros((N, H)) if dc is None else dc.copy()
        gx, gR, gP = np.zeros((T, N, 4 * H)), np.zeros_like(R), np.zeros(4 * H)
        for t in reversed(prob.steps(d)):
            a, c, c_prev = f["a"][t], f["c"][t], f["cprev"][t]
            pre = dict(zip(order, _blocks(a, H, 4)))
            gate = {g: activate(acts[g], pre[g]) for g in order}
            dh = dh + g_seq[t, :, d * H:(d + 1) * H]
            dc = dc + dh * gate["o"] * activate_grad(desc.activation, c)
            dgate = {"o": dh * activate(desc.activation, c), "i": dc * gate["z"],
                     "z": dc * gate["i"], "f": dc * c_prev}
            da = np.concatenate([dgate[g] * activate_grad(acts[g], pre[g]) for g in order], axis=-1)
            dc = dc * gate["f"]
            if p is not None:
                dc = dc + sum(_blocks(da * p, H, 4))
                gP += (da * np.tile(c_prev, 4)).sum(axis=0)
            gx[t] = da
            gR += da.T @ (f["hprev"][t] * m[t])
            dh = (da @ R) * m[t]
        dxp.append(gx), dR.append(gR), dP.append(gP), dh0.append(dh), dc0.append(dc)
    d_source, d_W, d_b = prob.input_grads(dxp)
    out = [d_source, prob.pack_R(dR)]
    if input_weight is not None:
        out.append(d_W)
    if bias is not None:
        out.append(d_b)
    if peephole is not None:
        out.append(dP[0] if prob.D == 1 else np.stack(dP))
    if init_state is not None:
        out.append(np.concatenate(dh0, axis=-1))
    if init_cell is not None:
        out.append(np.concatenate(dc0, axis=-1))
    return out


# ----------------------------------------------------------------------------------------------
# GRU

def _gru_order(desc):
    return ("r", "z", "o") if desc.reset_gate_first else ("z", "r", "o")


def _secondary(prob, secondary_bias, d):
    if secondary_bias is None:
        return np.zeros(prob.H)
    b2 = _f64(secondary_bias)
    if b2.shape != (prob.D * prob.H,):
        raise ValueError(f"secondary_bias shape {b2.shape}, expected {(prob.D * prob.H,)}")
    return b2[d * prob.H:(d + 1) * prob.H]


def _gru_dir_forward(prob, d, desc, init_state, mask, secondary_bias):
    xp, R, m = prob.xp(d), prob.Rd(d), prob.mask(mask, d)
    b2 = _secondary(prob, secondary_bias, d)
    h = prob.state(init_state, d, "init_state")
    T, N, H = prob.T, prob.N, prob.H
    order = _gru_order(desc)
    Rg = dict(zip(order, _blocks(R.T, H, 3)))  # Rg[g] = R_gᵀ, [H,H]
    hs, hprev = np.zeros((T, N, H)), np.zeros((T, N, H))
    a_seq = np.zeros((T, N, 3 * H))
    for t in prob.steps(d):
        hprev[t] = h
        x = dict(zip(order, _blocks(xp[t], H, 3)))
        hm = h * m[t]
        az, ar = x["z"] + hm @ Rg["z"], x["r"] + hm @ Rg["r"]
        z, r = activate(desc.update_gate_activation, az), activate(desc.reset_gate_activation, ar)
        c = (hm @ Rg["o"] + b2) * r if desc.reset_after else (hm * r) @ Rg["o"]
        ao = c + x["o"]
        o = activate(desc.output_gate_activation, ao)
        h = z * h + (1 - z) * o if desc.flip_z else (1 - z) * h + z * o
        pre = {"z": az, "r": ar, "o": ao}
        a_seq[t] = np.concatenate([pre[g] for g in order], axis=-1)
        hs[t] = h
    return dict(h=hs, a=a_seq, hprev=hprev, m=m, Rg=Rg, b2=b2)


def gru(source, recurrent_weight, input_weight=None, bias=None, init_state=None, mask=None,
        secondary_bias=None, *, descriptor=None, device=None):
    """``[h]`` (+ ``z_state`` = pre-activations [a_z,a_r,a_o] in gate order when training)."""
    desc = _as_descriptor(GRUDescriptor, descriptor)
    prob = _Problem(source, recurrent_weight, input_weight, bias, 3, desc)
    fw = [_gru_dir_forward(prob, d, desc, init_state, mask, secondary_bias) for d in range(prob.D)]
    out = [np.concatenate([f["h"] for f in fw], axis=-1)]
    if desc.training:
        out.append(np.concatenate([f["a"] for f in fw], axis=-1))
    return out


def gru_gradients(source, recurrent_weight, source_gradient, z_state, output_fwd, input_weight=None,
                  bias=None, init_state=None, mask=None, secondary_bias=None, state_gradient=None,
                  *, descriptor=None, device=None):
    """``[d_source, d_recurrent_weight, d_input_weight?, d_bias?, d_init_state?,
    d_secondary_bias?]`` by BPTT (``z_state`` and ``output_fwd`` are ignored).  With dh the total
    dL/dh[t]::

        flip_z=False: dz = dh⊙(o − h[t-1]), do = dh⊙z,     direct = dh⊙(1−z)
        flip_z=True:  dz = dh⊙(h[t-1] − o), do = dh⊙(1−z), direct = dh⊙z
        da_o = do⊙f_o'(a_o) = dc
        reset_after=False: q = dc·R_o ; dR_o += dcᵀ(hm⊙r) ; dr = q⊙hm ; dhm += q⊙r
        reset_after=True:  u = hm·R_oᵀ + b2 ; dr = dc⊙u ; du = dc⊙r ; dR_o += duᵀhm ;
                           db2 += Σ du ; dhm += du·R_o
        da_r = dr⊙f_r'(a_r), da_z = dz⊙f_z'(a_z) ; dR_{r,z} += da_{r,z}ᵀhm ;
        dhm += da_r·R_r + da_z·R_z
        carried = direct + dhm⊙m            (hm = h[t-1]⊙m)
    """
    desc = _as_descriptor(GRUDescriptor, descriptor)
    prob = _Problem(source, recurrent_weight, input_weight, bias, 3, desc)
    g_seq = _upstream(prob, source_gradient)
    order = _gru_order(desc)
    T, N, H = prob.T, prob.N, prob.H
    dxp, dR, dh0, db2 = [], [], [], []
    for d in range(prob.D):
        f = _gru_dir_forward(prob, d, desc, init_state, mask, secondary_bias)
        Rg, m, b2 = f["Rg"], f["m"], f["b2"]
        dh = prob.grad_slice(state_gradient, d, H)
        dh = np.zeros((N, H)) if dh is None else dh.copy()
        gx = np.zeros((T, N, 3 * H))
        gR = {g: np.zeros((H, H)) for g in order}  # gradient of R_g ([H,H], row-major [out,in])
        gb2 = np.zeros(H)
        for t in reversed(prob.steps(d)):
            pre = dict(zip(order, _blocks(f["a"][t], H, 3)))
            h_prev = f["hprev"][t]
            hm = h_prev * m[t]
            z = activate(desc.update_gate_activation, pre["z"])
            r = activate(desc.reset_gate_activation, pre["r"])
            o = activate(desc.output_gate_activation, pre["o"])
            dh = dh + g_seq[t, :, d * H:(d + 1) * H]
            if desc.flip_z:
                dz, do, direct = dh * (h_prev - o), dh * (1 - z), dh * z
            else:
                dz, do, direct = dh * (o - h_prev), dh * z, dh * (1 - z)
            dao = do * activate_grad(desc.output_gate_activation, pre["o"])
            if desc.reset_after:
                u = hm @ Rg["o"] + b2
                dr, du = dao * u, dao * r
                gR["o"] += du.T @ hm
                gb2 += du.sum(axis=0)
                dhm = du @ Rg["o"].T
            else:
                q = dao @ Rg["o"].T
                gR["o"] += dao.T @ (hm * r)
                dr = q * hm
                dhm = q * r
            dar = dr * activate_grad(desc.reset_gate_activation, pre["r"])
            daz = dz * activate_grad(desc.update_gate_activation, pre["z"])
            gR["r"] += dar.T @ hm
            gR["z"] += daz.T @ hm
            dhm = dhm + dar @ Rg["r"].T + daz @ Rg["z"].T
            da = {"z": daz, "r": dar, "o": dao}
            gx[t] = np.concatenate([da[g] for g in order], axis=-1)
            dh = direct + dhm * m[t]
        dxp.append(gx), dh0.append(dh), db2.append(gb2)
        dR.append(np.concatenate([gR[g] for g in order], axis=0))
    d_source, d_W, d_b = prob.input_grads(dxp)
    out = [d_source, prob.pack_R(dR)]
    if input_weight is not None:
        out.append(d_W)
    if bias is not None:
        out.append(d_b)
    if init_state is not None:
        out.append(np.concatenate(dh0, axis=-1))
    if secondary_bias is not None:
        out.append(np.concatenate(db2))
    return out
