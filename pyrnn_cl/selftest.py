"""``pyrnn-cl selftest``: run every op of this installation on one device against an independent
float64 reference, and say whether the device computes them right.

For a few small fixed configurations of every op that exists (MPSGraph ``single_gate_rnn``,
``lstm``, ``gru``; TensorFlow ``gru_block_cell``, ``lstm_block_cell``, ``block_lstm(_v2)``; cuDNN
``cudnn_rnn`` and the params conversions; each found with ``hasattr``, so a build without a
dialect simply lists it as absent):

* the **forward** outputs are compared with :mod:`pyrnn_cl._selftest_ref`, a tiny float64 NumPy
  implementation written from the equations (it shares no code with the kernels or dialects);
* the **gradients** of the op's gradient functions are compared with central finite
  differences of that reference (loss ``L = sum_i <out_i, g_i>`` with fixed random ``g_i``).

Tolerances (relative to ``max(1, max|expected|)``): float64 forward 1e-10 and gradients 1e-6
(the finite-difference error); float32 forward 1e-5 and gradients 1e-4; the 16-bit storage
dtypes, whose inputs are the reference's rounded (so the errors include that rounding), float16
1e-2 and bfloat16 5e-2 for both (measured on PoCL: at most 1.5e-3 and 1.5e-2). The dtype is
float64 when the device has ``cl_khr_fp64``, else float32 (``--dtype`` chooses).

Exit status: 0 when every check passed, 1 when any check failed or raised, or when no kernel ran
on the device (``pyrnn_cl.programs.launch_count()`` did not move: nothing was tested), 2 for
usage errors and when no device matches.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import _selftest_ref as ref
from .cells import gates
from .sources import BFLOAT16

__all__ = ["main", "run_checks", "CHECKS"]

TOLERANCES = {np.dtype(np.float64): (1e-10, 1e-6), np.dtype(np.float32): (1e-5, 1e-4),
              np.dtype(np.float16): (1e-2, 1e-2)}
if BFLOAT16 is not None:      # ml_dtypes installed
    TOLERANCES[BFLOAT16] = (5e-2, 5e-2)
_EPS = 1e-6


# ---- helpers -------------------------------------------------------------------------------------


def _err(got, want):
    """max |got - want| / max(1, max|want|); inf for a shape mismatch, nan stays nan."""
    g = np.asarray(got, dtype=np.float64)
    w = np.asarray(want, dtype=np.float64)
    if g.shape != w.shape:
        return float("inf")
    if g.size == 0:
        return 0.0
    diff = np.abs(g - w)
    if np.isnan(diff).any():
        return float("nan")
    return float(diff.max() / max(1.0, float(np.abs(w).max())))


def _max_err(pairs):
    errs = [_err(g, w) for g, w in pairs]
    if any(np.isnan(e) for e in errs):
        return float("nan")
    return max(errs, default=0.0)


def _numeric(loss, inputs, names):
    """Central differences of ``loss(inputs)`` w.r.t. each float64 array ``inputs[name]``."""
    grads = {}
    for name in names:
        x = inputs[name]
        g = np.zeros_like(x)
        flat, gflat = x.reshape(-1), g.reshape(-1)
        for k in range(flat.size):
            v = flat[k]
            flat[k] = v + _EPS
            up = loss(inputs)
            flat[k] = v - _EPS
            down = loss(inputs)
            flat[k] = v
            gflat[k] = (up - down) / (2 * _EPS)
        grads[name] = g
    return grads


def _dot(outs, ups):
    return float(sum(np.sum(o * u) for o, u in zip(outs, ups) if u is not None))


def _host(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


class _Rng:
    def __init__(self, seed):
        self.g = np.random.default_rng(seed)

    def __call__(self, *shape, scale=1.0):
        return scale * self.g.standard_normal(shape)


@dataclass
class Check:
    """One row of the table: ``run(rc, device, dtype) -> (forward error, gradient error)``."""

    op: str
    config: str
    needs: tuple
    run: Callable


# ---- MPSGraph -----------------------------------------------------------------------------------


def _mps_final(seq, bidirectional, reverse, H):
    if bidirectional:
        return np.concatenate([seq[-1, :, :H], seq[0, :, H:]], axis=-1)
    return seq[0] if reverse else seq[-1]


def _mps_check(kind, flags, *, with_w=True, seed=0):
    """A check of rc.single_gate_rnn / lstm / gru and their *_gradients."""
    T, N, I, H = 4, 3, 2, 3
    G = gates(kind)
    bidi = flags.get("bidirectional", False)
    rev = flags.get("reverse", False)
    D = 2 if bidi else 1

    def run(rc, device, dtype):
        r = _Rng(seed)
        p = {"source": r(T, N, I) if with_w else r(T, N, D * G * H, scale=0.7),
             "recurrent_weight": r(G * H, H, scale=0.5) if D == 1 else r(2, G * H, H, scale=0.5)}
        if with_w:
            p["input_weight"] = r(D * G * H, I, scale=0.5)
        p["bias"] = r(D * G * H, scale=0.3)
        p["init_state"] = r(N, D * H, scale=0.8)
        if kind == "lstm":
            p["init_cell"] = r(N, D * H, scale=0.8)
            p["peephole"] = r(4 * H, scale=0.5) if D == 1 else r(2, 4 * H, scale=0.5)
        if kind == "gru":
            p["secondary_bias"] = r(D * H, scale=0.5)
        mask = r.g.uniform(0.5, 1.5, (T, N, D * H))
        dy, dhn, dcn = r(T, N, D * H), r(N, D * H), r(N, D * H)

        def ref_forward(q):
            kw = dict(bidirectional=bidi, reverse=rev)
            W = q.get("input_weight")
            if kind == "rnn":
                h = ref.mps_rnn(q["source"], q["recurrent_weight"], W, q["bias"],
                                q["init_state"], mask, activation=flags["activation"], **kw)
                return [h, _mps_final(h, bidi, rev, H)]
            if kind == "lstm":
                acts = tuple(flags.get(f, dflt) for f, dflt in (
                    ("input_gate_activation", "sigmoid"), ("forget_gate_activation", "sigmoid"),
                    ("cell_gate_activation", "tanh"), ("output_gate_activation", "sigmoid")))
                h, c = ref.mps_lstm(q["source"], q["recurrent_weight"], W, q["bias"],
                                    q["init_state"], q["init_cell"], mask, q["peephole"],
                                    forget_gate_last=flags.get("forget_gate_last", False),
                                    acts=acts, cell_act=flags.get("activation", "tanh"), **kw)
                return [h, _mps_final(h, bidi, rev, H), _mps_final(c, bidi, rev, H)]
            h = ref.mps_gru(q["source"], q["recurrent_weight"], W, q["bias"], q["init_state"],
                            mask, q["secondary_bias"],
                            reset_gate_first=flags.get("reset_gate_first", False),
                            reset_after=flags.get("reset_after", False),
                            flip_z=flags.get("flip_z", False), **kw)
            return [h, _mps_final(h, bidi, rev, H)]

        desc_cls = {"rnn": rc.SingleGateRNNDescriptor, "lstm": rc.LSTMDescriptor,
                    "gru": rc.GRUDescriptor}[kind]
        extra = {"produce_cell": True} if kind == "lstm" else {}
        desc = desc_cls(training=True, **extra, **flags)
        cast = {k: v.astype(dtype) for k, v in p.items()}
        args = {k: v for k, v in cast.items() if k not in ("source", "recurrent_weight")}
        fwd = {"rnn": rc.single_gate_rnn, "lstm": rc.lstm, "gru": rc.gru}[kind]
        out = [_host(o) for o in fwd(cast["source"], cast["recurrent_weight"], **args,
                                     mask=mask.astype(dtype), descriptor=desc, device=device)]
        want = ref_forward(p)
        pairs = [(out[0], want[0])]
        if kind == "lstm":
            pairs.append((_mps_final(out[1], bidi, rev, H), want[2]))
        f_err = _max_err(pairs)

        ups = [dy, dhn] + ([dcn] if kind == "lstm" else [])
        c = lambda a: a.astype(dtype)  # noqa: E731
        if kind == "rnn":
            grads = rc.single_gate_rnn_gradients(
                cast["source"], cast["recurrent_weight"], c(dy), c(out[-1]), **args,
                mask=c(mask), state_gradient=c(dhn), descriptor=desc, device=device)
            names = ["source", "recurrent_weight", "input_weight", "bias", "init_state"]
        elif kind == "lstm":
            grads = rc.lstm_gradients(
                cast["source"], cast["recurrent_weight"], c(dy), c(out[2]), c(out[1]), **args,
                mask=c(mask), state_gradient=c(dhn), cell_gradient=c(dcn), descriptor=desc,
                device=device)
            names = ["source", "recurrent_weight", "input_weight", "bias", "peephole",
                     "init_state", "init_cell"]
        else:
            grads = rc.gru_gradients(
                cast["source"], cast["recurrent_weight"], c(dy), c(out[1]), c(out[0]), **args,
                mask=c(mask), state_gradient=c(dhn), descriptor=desc, device=device)
            names = ["source", "recurrent_weight", "input_weight", "bias", "init_state",
                     "secondary_bias"]
        names = [n for n in names if n in p]
        if len(grads) != len(names):
            raise AssertionError(f"{len(grads)} gradient outputs, expected {len(names)}")
        num = _numeric(lambda q: _dot(ref_forward(q), ups), p, names)
        g_err = _max_err((_host(g), num[n]) for g, n in zip(grads, names))
        return f_err, g_err

    label = ", ".join(f"{k}={v}" for k, v in flags.items()) + ("" if with_w else
                                                              ", input_weight=None")
    fn = {"rnn": "single_gate_rnn", "lstm": "lstm", "gru": "gru"}[kind]
    return Check(fn, label, (fn, fn + "_gradients"), run)


# ---- TensorFlow block ops -----------------------------------------------------------------------


def _tf_gru_check():
    N, I, H = 3, 2, 3

    def run(rc, device, dtype):
        r = _Rng(10)
        p = dict(x=r(N, I), h_prev=r(N, H, scale=0.8), w_ru=r(I + H, 2 * H, scale=0.5),
                 w_c=r(I + H, H, scale=0.5), b_ru=r(2 * H, scale=0.5), b_c=r(H, scale=0.5))
        d_h = r(N, H)
        names = list(p)
        c = {k: v.astype(dtype) for k, v in p.items()}
        out = [_host(o) for o in rc.gru_block_cell(*(c[k] for k in names), device=device)]
        f_err = _max_err(zip(out, ref.tf_gru_cell(*(p[k] for k in names))))
        d_x, d_hp, d_cb, d_rbub = (_host(o) for o in rc.gru_block_cell_grad(
            *(c[k] for k in names), *(o.astype(dtype) for o in out[:3]), d_h.astype(dtype),
            device=device))
        wg = [_host(o) for o in rc.gru_block_cell_weight_grads(
            c["x"], c["h_prev"], out[0].astype(dtype), d_cb.astype(dtype),
            d_rbub.astype(dtype), device=device)]
        num = _numeric(lambda q: _dot([ref.tf_gru_cell(*(q[k] for k in names))[3]], [d_h]), p,
                       names)
        g_err = _max_err([(d_x, num["x"]), (d_hp, num["h_prev"]), (wg[0], num["w_ru"]),
                          (wg[1], num["w_c"]), (wg[2], num["b_ru"]), (wg[3], num["b_c"])])
        return f_err, g_err

    return Check("gru_block_cell", "cell, grad, weight grads", (
        "gru_block_cell", "gru_block_cell_grad", "gru_block_cell_weight_grads"), run)


def _tf_lstm_inputs(r, N, I, H, T=None):
    x = r(T, N, I) if T else r(N, I)
    return dict(x=x, cs_prev=r(N, H, scale=0.5), h_prev=r(N, H, scale=0.8),
                w=r(I + H, 4 * H, scale=0.4), wci=r(H, scale=0.5), wcf=r(H, scale=0.5),
                wco=r(H, scale=0.5), b=r(4 * H, scale=0.3))


def _tf_lstm_cell_check():
    N, I, H = 3, 2, 3
    kw = dict(forget_bias=1.0, cell_clip=3.0, use_peephole=True)

    def run(rc, device, dtype):
        r = _Rng(11)
        p = _tf_lstm_inputs(r, N, I, H)
        names = list(p)
        cs_grad, h_grad = r(N, H), r(N, H)
        c = {k: v.astype(dtype) for k, v in p.items()}
        out = [_host(o) for o in rc.lstm_block_cell(*(c[k] for k in names), **kw,
                                                      device=device)]
        want = ref.tf_lstm_cell(*(p[k] for k in names), **kw)
        f_err = _max_err(zip(out, want))
        if np.max(np.abs(want[1])) >= kw["cell_clip"]:
            raise AssertionError("the configuration must not clip (finite differences)")
        cs_prev_grad, dicfo, wci_g, wcf_g, wco_g = (_host(o) for o in rc.lstm_block_cell_grad(
            *(c[k] for k in names), *(o.astype(dtype) for o in out[:6]), cs_grad.astype(dtype),
            h_grad.astype(dtype), use_peephole=True, device=device))
        x_g, hp_g, w_g, b_g = (_host(o) for o in rc.lstm_block_cell_weight_grads(
            c["x"], c["h_prev"], c["w"], dicfo.astype(dtype), device=device))

        def loss(q):
            o = ref.tf_lstm_cell(*(q[k] for k in names), **kw)
            return _dot([o[1], o[6]], [cs_grad, h_grad])

        num = _numeric(loss, p, names)
        g_err = _max_err([(cs_prev_grad, num["cs_prev"]), (wci_g, num["wci"]),
                          (wcf_g, num["wcf"]), (wco_g, num["wco"]), (x_g, num["x"]),
                          (hp_g, num["h_prev"]), (w_g, num["w"]), (b_g, num["b"])])
        return f_err, g_err

    return Check("lstm_block_cell", "peephole, forget_bias=1, cell_clip=3", (
        "lstm_block_cell", "lstm_block_cell_grad", "lstm_block_cell_weight_grads"), run)


def _tf_block_lstm_check(v2):
    T, N, I, H = 4, 3, 2, 3
    seq_len_max = T if v2 else T - 1
    kw = dict(cell_clip=0.0, use_peephole=False) if v2 else dict(forget_bias=1.0, cell_clip=3.0,
                                                                 use_peephole=True)
    layout = "ifco" if v2 else "icfo"

    def run(rc, device, dtype):
        r = _Rng(12 + v2)
        p = _tf_lstm_inputs(r, N, I, H, T)
        names = list(p)
        cs_grad, h_grad = r(T, N, H), r(T, N, H)
        c = {k: v.astype(dtype) for k, v in p.items()}
        fwd = rc.block_lstm_v2 if v2 else rc.block_lstm
        grad = rc.block_lstm_grad_v2 if v2 else rc.block_lstm_grad
        out = [_host(o) for o in fwd(seq_len_max, *(c[k] for k in names), **kw, device=device)]

        def reference(q):
            ref_kw = dict(kw, forget_bias=0.0) if v2 else kw
            return ref.tf_block_lstm(seq_len_max, *(q[k] for k in names), **ref_kw,
                                     layout=layout)

        f_err = _max_err(zip(out, reference(p)))
        grads = [_host(o) for o in grad(seq_len_max, *(c[k] for k in names),
                                        *(o.astype(dtype) for o in out),
                                        cs_grad.astype(dtype), h_grad.astype(dtype),
                                        use_peephole=kw["use_peephole"], device=device)]
        order = ["x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b"]
        num = _numeric(lambda q: _dot([reference(q)[1], reference(q)[6]], [cs_grad, h_grad]),
                       p, order)
        if not kw["use_peephole"]:
            num.update({k: np.zeros_like(p[k]) for k in ("wci", "wcf", "wco")})
        return f_err, _max_err(zip(grads, (num[k] for k in order)))

    name = "block_lstm_v2" if v2 else "block_lstm"
    config = ("IFCO, seq_len_max=T" if v2 else
              "ICFO, peephole, forget_bias=1, cell_clip=3, seq_len_max=T-1")
    return Check(name, config, (name, "block_lstm_grad_v2" if v2 else "block_lstm_grad"), run)


# ---- cuDNN --------------------------------------------------------------------------------------


def _cudnn_check(mode, L, D, *, P=0, skip=False, lengths=None, seed=20):
    T, N, H = 4, 3, 3
    I = H if skip else 2
    Rw = P or H
    kw = dict(rnn_mode=mode, input_mode="skip_input" if skip else "linear_input",
              direction="bidirectional" if D == 2 else "unidirectional", num_proj=P)

    def run(rc, device, dtype):
        r = _Rng(seed)
        ws, bs = ref.cudnn_counts(L, H, I, mode, D, P, skip)
        weights = [r(*s, scale=0.5) for s in ws]
        biases = [r(*s, scale=0.3) for s in bs]
        # params: per pseudo-layer its weights, then its biases (layer 0 has no W_g with
        # skip_input), each flattened row-major
        G = gates(mode)
        params, wi, bi = [], 0, 0
        for layer in range(L):
            for _ in range(D):
                nw = (0 if skip and layer == 0 else G) + G + (1 if P else 0)
                params += [w.reshape(-1) for w in weights[wi:wi + nw]]
                params += [b.reshape(-1) for b in biases[bi:bi + 2 * G]]
                wi, bi = wi + nw, bi + 2 * G
        p = dict(input=r(T, N, I), input_h=r(L * D, N, Rw, scale=0.8),
                 params=np.concatenate(params))
        lstm = mode == "lstm"
        if lstm:
            p["input_c"] = r(L * D, N, H, scale=0.8)
        lens = None if lengths is None else np.asarray(lengths, np.int32)
        dy, dhn, dcn = r(T, N, D * Rw), r(L * D, N, Rw), r(L * D, N, H)

        def reference(q):
            return ref.cudnn_forward(q["input"], q["input_h"], q.get("input_c"), q["params"],
                                     lens, L=L, H=H, mode=mode, D=D, P=P, skip=skip)

        if rc.cudnn_rnn_params_size(L, H, I, **kw) != p["params"].size:
            raise AssertionError(f"cudnn_rnn_params_size = "
                                 f"{rc.cudnn_rnn_params_size(L, H, I, **kw)}, expected "
                                 f"{p['params'].size}")
        c = {k: v.astype(dtype) for k, v in p.items()}
        out = rc.cudnn_rnn(c["input"], c["input_h"], c.get("input_c"), c["params"], lens,
                           **kw, device=device)
        want = reference(p)
        pairs = [(_host(out[0]), want[0]), (_host(out[1]), want[1])]
        if lstm:
            pairs.append((_host(out[2]), want[2]))
        f_err = _max_err(pairs)
        back = rc.cudnn_rnn_backprop(
            c["input"], c["input_h"], c.get("input_c"), c["params"], lens, *out[:3],
            dy.astype(dtype), dhn.astype(dtype), dcn.astype(dtype) if lstm else None, *out[3:5],
            **kw, device=device)
        names = ["input", "input_h"] + (["input_c"] if lstm else []) + ["params"]
        got = [_host(back[0]), _host(back[1])] + ([_host(back[2])] if lstm else []) + [
            _host(back[3])]
        ups = [dy, dhn] + ([dcn] if lstm else [])
        num = _numeric(lambda q: _dot(reference(q)[:3 if lstm else 2], ups), p, names)
        return f_err, _max_err(zip(got, (num[n] for n in names)))

    config = f"L={L}, D={D}" + (f", num_proj={P}" if P else "") + (
        ", skip_input" if skip else "") + (f", lengths={list(lengths)}" if lengths else "")
    return Check("cudnn_rnn", f"{mode}, {config}", ("cudnn_rnn", "cudnn_rnn_backprop",
                                                   "cudnn_rnn_params_size"), run)


def _cudnn_params_check():
    def run(rc, device, dtype):
        L, H, I, D = 2, 3, 2, 2
        kw = dict(rnn_mode="gru", direction="bidirectional")
        r = _Rng(30)
        ws, bs = ref.cudnn_counts(L, H, I, "gru", D)
        weights = [r(*s).astype(dtype) for s in ws]
        biases = [r(*s).astype(dtype) for s in bs]
        params = _host(rc.cudnn_rnn_canonical_to_params(L, H, I, weights, biases, **kw,
                                                        device=device))
        layers = ref.cudnn_unpack(np.asarray(params, np.float64), L, H, I, "gru", D)
        again = []
        for layer in layers:
            for p in layer:
                again += p["W"] + p["R"]
        bias_again = [b for layer in layers for p in layer for b in p["bW"] + p["bR"]]
        err = _max_err(list(zip(again, weights)) + list(zip(bias_again, biases)))
        w2, b2 = rc.cudnn_rnn_params_to_canonical(L, H, I, params, **kw, device=device)
        err = max(err, _max_err(list(zip((_host(w) for w in w2), weights)) +
                                list(zip((_host(b) for b in b2), biases))))
        return err, 0.0

    return Check("cudnn_rnn_params", "gru, L=2, D=2: canonical <-> params", (
        "cudnn_rnn_canonical_to_params", "cudnn_rnn_params_to_canonical"), run)


CHECKS = [
    _mps_check("rnn", dict(activation="tanh", bidirectional=True), seed=1),
    _mps_check("rnn", dict(activation="sigmoid", reverse=True), with_w=False, seed=2),
    _mps_check("lstm", dict(bidirectional=True), seed=3),
    _mps_check("lstm", dict(forget_gate_last=True, reverse=True, cell_gate_activation="sigmoid"),
               with_w=False, seed=4),
    _mps_check("gru", dict(bidirectional=True, reset_gate_first=True, reset_after=True,
                           flip_z=True), seed=5),
    _mps_check("gru", dict(reverse=True), seed=6),
    _tf_gru_check(),
    _tf_lstm_cell_check(),
    _tf_block_lstm_check(False),
    _tf_block_lstm_check(True),
    _cudnn_check("lstm", 2, 2, lengths=[4, 0, 2], seed=20),
    _cudnn_check("lstm", 1, 1, P=2, seed=21),
    _cudnn_check("gru", 2, 1, seed=22),
    _cudnn_check("rnn_tanh", 1, 2, skip=True, seed=23),
    _cudnn_check("rnn_relu", 1, 1, lengths=[1, 4, 3], seed=24),
    _cudnn_params_check(),
]


# ---- running -------------------------------------------------------------------------------------


@dataclass
class Result:
    check: Check
    status: str            # "ok", "FAIL", "ERROR", "absent"
    forward: float = float("nan")
    gradient: float = float("nan")
    seconds: float = 0.0
    message: str = ""
    trace: str = ""


def run_checks(device, dtype, checks=None, *, only=None) -> list[Result]:
    """Run ``checks`` (default :data:`CHECKS`) on ``device`` in ``dtype``."""
    import pyrnn_cl as rc

    f_tol, g_tol = TOLERANCES[np.dtype(dtype)]
    results = []
    for chk in CHECKS if checks is None else checks:
        if only and not any(o in chk.op for o in only):
            continue
        if not all(hasattr(rc, name) for name in chk.needs):
            missing = [n for n in chk.needs if not hasattr(rc, n)]
            results.append(Result(chk, "absent", message="not in this build: " +
                                  ", ".join(missing)))
            continue
        start = time.perf_counter()
        try:
            f_err, g_err = chk.run(rc, device, np.dtype(dtype))
        except Exception as exc:  # noqa: BLE001 - reported in the table, never fatal
            results.append(Result(chk, "ERROR", seconds=time.perf_counter() - start,
                                  message=f"{type(exc).__name__}: {exc}",
                                  trace=traceback.format_exc()))
            continue
        ok = f_err <= f_tol and g_err <= g_tol     # False for NaN
        results.append(Result(chk, "ok" if ok else "FAIL", f_err, g_err,
                              time.perf_counter() - start))
    return results


def _fmt(e):
    return "nan" if e != e else f"{e:.1e}"


def format_table(results) -> str:
    header = ("op", "configuration", "forward", "gradient", "time", "status")
    rows = []
    for r in results:
        if r.status == "absent" or r.status == "ERROR":
            rows.append((r.check.op, r.check.config, "-", "-",
                         f"{r.seconds:.1f}s" if r.seconds else "-", r.status))
        else:
            rows.append((r.check.op, r.check.config, _fmt(r.forward), _fmt(r.gradient),
                         f"{r.seconds:.1f}s", r.status))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
             for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _parser():
    p = argparse.ArgumentParser(
        prog="pyrnn-cl selftest",
        description="Run every op on one OpenCL device against an independent float64 "
                    "reference (forward) and its finite differences (gradients).")
    p.add_argument("--device", metavar="SPEC", default=None,
                   help='device spec ("P:D", profile name, gpu, cpu or a name substring); '
                        "default: the default device")
    p.add_argument("--dtype", choices=("auto", *(dt.name for dt in TOLERANCES)),
                   default="auto",
                   help="auto: float64 when the device has cl_khr_fp64, else float32; "
                        "float16 (and bfloat16 with ml_dtypes) check the 16-bit storage")
    p.add_argument("--only", metavar="OP", action="append",
                   help="run only ops whose name contains OP (repeatable)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print the traceback of every check that raised")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``pyrnn-cl selftest``; returns the exit status (module docstring)."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    from . import devices
    from .errors import DeviceNotFoundError
    from .programs import launch_count

    try:
        device = devices.get_device(args.device)
    except DeviceNotFoundError as exc:
        print(f"pyrnn-cl selftest: {exc}", file=sys.stderr)
        return 2
    if args.dtype == "auto":
        dtype = np.float64 if device.info.has_fp64 else np.float32
    else:
        dtype = next(dt for dt in TOLERANCES if dt.name == args.dtype).type
    if dtype == np.float64 and not device.info.has_fp64:
        print(f"pyrnn-cl selftest: {device.info.describe()} has no cl_khr_fp64; use "
              "--dtype float32", file=sys.stderr)
        return 2
    f_tol, g_tol = TOLERANCES[np.dtype(dtype)]
    print(f"device: {device.info.describe()} (profile {device.profile.name})")
    print(f"dtype: {np.dtype(dtype).name}; tolerances: forward {f_tol:.0e}, gradients "
          f"{g_tol:.0e} (relative to max(1, |reference|))")
    print()
    before = launch_count()
    start = time.perf_counter()
    results = run_checks(device, dtype, only=args.only)
    launches = launch_count() - before
    print(format_table(results))
    print()
    bad = [r for r in results if r.status in ("FAIL", "ERROR")]
    for r in results:
        if r.status == "ERROR":
            print(f"{r.check.op} ({r.check.config}): {r.message}")
            if args.verbose:
                print(r.trace)
        if r.status == "absent":
            print(f"{r.check.op}: {r.message}")
    ran = [r for r in results if r.status != "absent"]
    print(f"{len(ran) - len(bad)}/{len(ran)} checks passed, {launches} kernel launches, "
          f"{time.perf_counter() - start:.1f} s")
    if launches == 0:
        print("FAILED: no kernel ran on the device (pyrnn_cl.programs.launch_count() did not "
              "move): nothing was tested.")
        return 1
    if bad:
        print(f"FAILED: {len(bad)} check(s) did not match the reference.")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
