"""Argument validation of every public op (API.md §0; pitfalls A9, A18, A26, D6).

Every rule is checked on the host before anything is enqueued: each invalid call below must
raise the documented type (``rc.ShapeError`` for shapes/ranks, ``TypeError`` for dtypes and
non-arrays, ``ValueError`` for values and mode strings, ``rc.UnsupportedError``,
``rc.DeviceNotFoundError``) with a message that names the argument, says what it got and what
was expected, and **no kernel may have been launched** (``programs.launch_count()`` unchanged).
NaN and Inf in the data are not errors: they propagate through the maths.

The random counterpart (thousands of malformed calls of every op) is ``tests/test_fuzz.py`` and
``tests/helpers/fuzz.py`` (command line: ``tools/fuzz_malformed.py``).
"""

from __future__ import annotations

import re

import numpy as np
import pyopencl.array as cla
import pytest

import pyrnn_cl as rc
from pyrnn_cl.cudnn import cudnn_dropout_mask
from pyrnn_cl.programs import launch_count
from reference import mps_ref as M

F32 = np.float32
RNG = np.random.default_rng(7)


def _r(*shape, dtype=F32, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def expect(exc, fn, *args, names=(), got=True, **kwargs):
    """Call ``fn`` and check: raises ``exc``, the message names each of ``names`` (and says
    'got'/'expected' when ``got``), and no kernel was launched. Returns the message."""
    before = launch_count()
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    for n in names:
        assert n in msg, f"message does not name {n!r}: {msg}"
    if got:
        assert re.search(r"\bgot\b", msg) and re.search(r"expect", msg), msg
    assert launch_count() == before, f"a kernel ran before the error: {msg}"
    return msg


# ---- valid arguments of each dialect (small, distinct sizes) ---------------------------------

T, N, I, H = 4, 5, 3, 7


def mps_args(kind="lstm", D=1, dtype=F32):
    G = {"rnn": 1, "lstm": 4, "gru": 3}[kind]
    a = dict(source=_r(T, N, I, dtype=dtype),
             recurrent_weight=_r(G * H, H, dtype=dtype) if D == 1 else _r(2, G * H, H,
                                                                           dtype=dtype),
             input_weight=_r(D * G * H, I, dtype=dtype), bias=_r(D * G * H, dtype=dtype),
             init_state=_r(N, D * H, dtype=dtype))
    if kind == "lstm":
        a["init_cell"] = _r(N, D * H, dtype=dtype)
    return a


def tf_lstm_args(seq=True, dtype=F32):
    lead = (T, N) if seq else (N,)
    return dict(x=_r(*lead, I, dtype=dtype), cs_prev=_r(N, H, dtype=dtype),
                h_prev=_r(N, H, dtype=dtype), w=_r(I + H, 4 * H, dtype=dtype),
                wci=_r(H, dtype=dtype), wcf=_r(H, dtype=dtype), wco=_r(H, dtype=dtype),
                b=_r(4 * H, dtype=dtype))


def tf_gru_args(dtype=F32):
    return dict(x=_r(N, I, dtype=dtype), h_prev=_r(N, H, dtype=dtype),
                w_ru=_r(I + H, 2 * H, dtype=dtype), w_c=_r(I + H, H, dtype=dtype),
                b_ru=_r(2 * H, dtype=dtype), b_c=_r(H, dtype=dtype))


def cudnn_args(mode="lstm", L=2, D=1, dtype=F32, P=0):
    direction = "bidirectional" if D == 2 else "unidirectional"
    kw = dict(rnn_mode=mode, direction=direction, num_proj=P)
    size = rc.cudnn_rnn_params_size(L, H, I, **kw)
    R = P or H
    return dict(input=_r(T, N, I, dtype=dtype), input_h=_r(L * D, N, R, dtype=dtype),
                input_c=_r(L * D, N, H, dtype=dtype) if mode == "lstm" else None,
                params=_r(size, dtype=dtype, scale=0.2)), kw


def block_lstm(**a):
    return rc.block_lstm(a.pop("seq_len_max", T), a.pop("x"), a.pop("cs_prev"), a.pop("h_prev"),
                         a.pop("w"), a.pop("wci"), a.pop("wcf"), a.pop("wco"), a.pop("b"), **a)


# ---- required arguments, ranks and shapes ------------------------------------------------------

@pytest.mark.parametrize("name", ["source", "recurrent_weight"])
def test_required_array_none(name):
    a = mps_args()
    a[name] = None
    expect(TypeError, rc.lstm, **a, names=[name], got=True)


def test_required_array_none_every_dialect():
    expect(TypeError, rc.lstm_gradients, *[_r(T, N, I), _r(4 * H, H), _r(T, N, H), None,
                                            _r(T, N, H)], input_weight=_r(4 * H, I),
           names=["z_state"])
    a = tf_gru_args()
    a["w_ru"] = None
    expect(TypeError, rc.gru_block_cell, **a, names=["w_ru"])
    a = tf_lstm_args()
    a["wco"] = None
    expect(TypeError, block_lstm, **a, names=["wco"])
    c, kw = cudnn_args()
    c["params"] = None
    expect(TypeError, rc.cudnn_rnn, **c, **kw, names=["params"])
    c, kw = cudnn_args()
    c["input_c"] = None
    expect(ValueError, rc.cudnn_rnn, **c, **kw, names=["input_c"], got=False)


@pytest.mark.parametrize("name,bad", [
    ("source", _r(T, N)),                      # rank 2
    ("source", _r(1, T, N, I)),                # rank 4
    ("recurrent_weight", _r(4 * H, H, 1)),
    ("input_weight", _r(4 * H, I + 1)),        # disagrees with the source's I
    ("bias", _r(4 * H + 1)),
    ("bias", _r(1, 4 * H)),
    ("init_state", _r(N + 1, H)),              # batch mismatch with the source (A26)
    ("init_cell", _r(N, H + 1)),
    ("recurrent_weight", _r(4 * H, H + 1)),    # not [G*H, H]
])
def test_mps_shapes(name, bad):
    a = mps_args()
    a[name] = bad
    msg = expect(rc.ShapeError, rc.lstm, **a, names=[name])
    assert str(list(bad.shape)) in msg, msg     # the shape received


def test_mps_shapes_bidirectional_and_gradients():
    a = mps_args(D=2)
    a["recurrent_weight"] = _r(4 * H, H)        # uni shape on a bidirectional call
    expect(rc.ShapeError, rc.lstm, **a, descriptor=rc.LSTMDescriptor(bidirectional=True),
           names=["recurrent_weight", "rank 3"])
    a = mps_args(kind="gru")
    a["mask"] = _r(T, N, H + 1)                 # not broadcastable to [T, N, H]
    expect(rc.ShapeError, rc.gru, **a, names=["mask", "broadcastable"])
    a = mps_args()
    desc = rc.LSTMDescriptor(training=True)
    h, c, z = rc.lstm(**a, descriptor=desc)
    for name, good in (("source_gradient", h), ("z_state", z), ("cell_output_fwd", c)):
        args = dict(source_gradient=h, z_state=z, cell_output_fwd=c)
        args[name] = good[:, :-1]               # batch mismatch
        expect(rc.ShapeError, rc.lstm_gradients, a["source"], a["recurrent_weight"],
               args["source_gradient"], args["z_state"], args["cell_output_fwd"],
               a["input_weight"], descriptor=desc, names=[name])
    expect(rc.ShapeError, rc.lstm_gradients, a["source"], a["recurrent_weight"], h, z, c,
           a["input_weight"], state_gradient=_r(N, H + 2), descriptor=desc,
           names=["state_gradient"])


def test_tf_shapes_and_batch_mismatch():
    a = tf_lstm_args()
    a["h_prev"] = _r(N + 1, H)                  # TF: silently wrong / CHECK-fail (A26)
    expect(rc.ShapeError, block_lstm, **a, names=["h_prev", "batch"])
    a = tf_lstm_args()
    a["x"] = _r(T, N, I)[0]                     # rank 2 x for a sequence op (A26)
    expect(rc.ShapeError, block_lstm, **a, names=["x", "rank 3"])
    a = tf_lstm_args()
    a["w"] = _r(I + H + 1, 4 * H)
    expect(rc.ShapeError, block_lstm, **a, names=["w", f"I = {I}", f"H = {H}"])
    a = tf_gru_args()
    a["b_c"] = _r(H, 1)
    expect(rc.ShapeError, rc.gru_block_cell, **a, names=["b_c"])
    a = tf_gru_args()
    a["h_prev"] = _r(N, 0)                      # zero cell size (A26)
    expect(rc.ShapeError, rc.gru_block_cell, **a, names=["h_prev", "got shape", "at least 1"],
           got=False)
    expect(rc.ShapeError, rc.lstm_block_cell_weight_grads, _r(N, I), _r(N, H),
           _r(I + H, 4 * H), _r(N + 2, 4 * H), names=["dicfo"])


def test_cudnn_shapes_and_params_length():
    c, kw = cudnn_args()
    c["params"] = c["params"][:-1].copy()
    expect(rc.ShapeError, rc.cudnn_rnn, **c, **kw, names=["params", "cudnn_rnn_params_size"])
    c, kw = cudnn_args()
    c["input_h"] = _r(2, N + 1, H)              # batch mismatch between input and input_h
    expect(rc.ShapeError, rc.cudnn_rnn, **c, **kw, names=["input_h", f"N = {N}"])
    c, kw = cudnn_args(D=2, mode="gru")
    c["input_h"] = _r(3, N, H)                  # L*D not a multiple of D = 2
    expect(rc.ShapeError, rc.cudnn_rnn, **c, **kw, names=["input_h", "multiple"])
    c, kw = cudnn_args()
    c["input"] = _r(T, N, I + 1)                # input_size disagrees with params
    expect(rc.ShapeError, rc.cudnn_rnn, **c, **kw, names=["params"])
    w, b = rc.cudnn_rnn_params_to_canonical(2, H, I, c["params"], **kw)
    expect(ValueError, rc.cudnn_rnn_canonical_to_params, 2, H, I, w[:-1], b, **kw,
           names=["weights"])
    w[3] = w[3][:, :-1].copy()
    expect(rc.ShapeError, rc.cudnn_rnn_canonical_to_params, 2, H, I, w, b, **kw,
           names=["weights[3]"])
    expect(rc.ShapeError, rc.cudnn_rnn_params_to_canonical, 2, H, I, c["params"][None], **kw,
           names=["params"])


# ---- dtypes --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.int32, np.complex64, np.bool_, np.longdouble])
def test_non_float_dtypes(dtype):
    a = mps_args()
    a["bias"] = a["bias"].astype(dtype)
    expect(TypeError, rc.lstm, **a, names=["bias", "float32, float64", "float16"], got=True)
    t = tf_lstm_args()
    t["x"] = t["x"].astype(dtype)
    expect(TypeError, block_lstm, **t, names=["x"])
    c, kw = cudnn_args()
    c["input_h"] = c["input_h"].astype(dtype)
    expect(TypeError, rc.cudnn_rnn, **c, **kw, names=["input_h"])


def test_mixed_float_dtypes(device):
    a = mps_args()
    a["init_state"] = a["init_state"].astype(np.float64)
    expect(TypeError, rc.lstm, **a, device=device, names=["init_state", "source", "float32"],
           got=False)
    c, kw = cudnn_args()
    c["params"] = c["params"].astype(np.float64)
    expect(TypeError, rc.cudnn_rnn, **c, **kw, device=device, names=["params", "input"],
           got=False)
    a = mps_args()        # float16 is a storage dtype: it may not be mixed with float32 either
    a["bias"] = a["bias"].astype(np.float16)
    expect(TypeError, rc.lstm, **a, device=device, names=["bias", "float16", "source", "float32"],
           got=False)


def test_integer_arguments_dtypes():
    c, kw = cudnn_args()
    expect(TypeError, rc.cudnn_rnn, **c, sequence_lengths=np.full(N, 2.0), **kw,
           names=["sequence_lengths", "int32 or int64"])
    for bad in (1.0, np.float32(2), np.array(2.0), "3"):
        expect(TypeError, block_lstm, **tf_lstm_args(), seq_len_max=bad, names=["seq_len_max"],
               got=False)
    expect(TypeError, block_lstm, **tf_lstm_args(), seq_len_max=np.array([2]),
           names=["seq_len_max", "scalar"], got=True)


def test_non_arrays():
    a = mps_args()
    a["source"] = a["source"].tolist()
    expect(TypeError, rc.lstm, **a, names=["source", "list"], got=True)
    t = tf_gru_args()
    t["h_prev"] = 3.0
    expect(TypeError, rc.gru_block_cell, **t, names=["h_prev"])
    c, kw = cudnn_args(mode="gru")
    c["input_c"] = "none"                      # ignored by GRU, but not an array
    expect(TypeError, rc.cudnn_rnn, **c, **kw, names=["input_c"])


# ---- contiguity and memory layout (A18) ----------------------------------------------------

def test_non_contiguous_numpy_is_copied(device):
    a = mps_args(kind="gru")
    ref = rc.gru(**a, device=device)[0]
    big = np.concatenate([a["init_state"], _r(N, 4)], axis=1)
    a["init_state"] = big[:, :H]               # hidden[:, :bs]-style view (A18)
    a["source"] = np.asfortranarray(a["source"])
    assert not a["init_state"].flags.c_contiguous
    np.testing.assert_array_equal(rc.gru(**a, device=device)[0], ref)


def test_numpy_inputs_may_change_once_the_call_returns(device):
    """An op with device-array outputs returns before the device has finished: an upload from
    the caller's own NumPy memory must have read it by then (the caller may reuse the buffer
    at once), while an upload from a private converted copy may still be in flight. An op with
    NumPy outputs queues its uploads without waiting; its read-back waits for them. Slow work
    queued first holds the uploads back."""
    from pyrnn_cl._arrays import _upload

    a = mps_args(kind="lstm")
    tb, nb, hb = 60, 32, 96
    big = {k: cla.to_device(device.queue, v) for k, v in dict(
        source=_r(tb, nb, hb), recurrent_weight=_r(4 * hb, hb), input_weight=_r(4 * hb, hb),
        bias=_r(4 * hb), init_state=_r(nb, hb), init_cell=_r(nb, hb)).items()}
    for user in (a["source"].copy(), np.asfortranarray(a["init_state"]),
                 a["bias"].astype(np.float64)):
        want = user.astype(F32)
        rc.lstm(**big)                              # queued, still running
        d = _upload(device.queue, user, F32, results_read=False)
        user[...] = np.nan                          # the caller reuses its buffer at once
        np.testing.assert_array_equal(d.get(), want)
    # and through an op
    ref = rc.lstm(**a, device=device)[0]
    rc.lstm(**big)
    mixed = {k: v.copy() for k, v in a.items()}
    mixed["source"] = cla.to_device(device.queue, a["source"])             # device out
    out = rc.lstm(**mixed)[0]
    for v in mixed.values():
        if isinstance(v, np.ndarray):
            v[...] = np.nan
    np.testing.assert_allclose(out.get(), ref, rtol=1e-6, atol=1e-6)
    rc.lstm(**big)
    numpy_in = {k: v.copy() for k, v in a.items()}
    out = rc.lstm(**numpy_in, device=device)[0]                            # NumPy out
    for v in numpy_in.values():
        v[...] = np.nan
    np.testing.assert_array_equal(out, ref)


def test_device_arrays_contiguity_and_context(device):
    import pyopencl as cl

    q = device.queue
    a = mps_args(kind="rnn")
    ref = rc.single_gate_rnn(**a, device=device)[0]
    d = {k: cla.to_device(q, v) for k, v in a.items()}
    # an offset view (a slice of a bigger buffer) is contiguous: accepted and copied
    big = cla.to_device(q, np.concatenate([np.zeros((1, N, I), F32), a["source"]]))
    d["source"] = big[1:]
    assert d["source"].offset
    out = rc.single_gate_rnn(**d)[0]
    assert isinstance(out, cla.Array)
    np.testing.assert_allclose(out.get(), ref, rtol=1e-6, atol=1e-6)
    # a strided view is rejected, never read as dense
    d["init_state"] = cla.to_device(q, np.repeat(a["init_state"], 2, axis=0))[::2]
    assert not d["init_state"].flags.c_contiguous
    expect(ValueError, rc.single_gate_rnn, **d, names=["init_state", "not contiguous"],
           got=False)
    # an array of another context (kept referenced while its queue is used: Intel's CPU
    # runtime frees a context whose pyopencl object is gone although a queue retains it)
    other_context = cl.Context([device.cl_device])
    other = cl.CommandQueue(other_context)
    d["init_state"] = cla.to_device(other, a["init_state"])
    expect(ValueError, rc.single_gate_rnn, **d, names=["init_state", "context"], got=False)


def test_out_of_order_queue_is_refused_and_in_order_ones_work(device):
    """The ops enqueue dependent kernels back to back and need in-order execution: a queue
    made with OUT_OF_ORDER_EXEC_MODE_ENABLE (given as ``device=`` or as the queue of the
    arrays) is refused with a ValueError naming the property before anything runs, in every
    dialect; an in-order queue of the user's, with profiling on, gives the default queue's
    answer."""
    import pyopencl as cl

    props = cl.command_queue_properties
    if not device.cl_device.queue_properties & props.OUT_OF_ORDER_EXEC_MODE_ENABLE:
        pytest.skip("the device has no out-of-order queues")
    ooo = cl.CommandQueue(device.context, device.cl_device,
                          properties=props.OUT_OF_ORDER_EXEC_MODE_ENABLE)
    names = ["device", "OUT_OF_ORDER_EXEC_MODE_ENABLE", "in-order"]
    a = mps_args()
    expect(ValueError, rc.lstm, **a, device=ooo, names=names, got=False)
    expect(ValueError, rc.lstm, **{k: cla.to_device(ooo, v) for k, v in a.items()},
           names=names, got=False)
    expect(ValueError, rc.gru_block_cell, **tf_gru_args(), device=ooo, names=names, got=False)
    expect(ValueError, block_lstm, **tf_lstm_args(), device=ooo, names=names, got=False)
    c, kw = cudnn_args()
    expect(ValueError, rc.cudnn_rnn, **c, **kw, device=ooo, names=names, got=False)
    expect(ValueError, cudnn_dropout_mask, (T, N, H), 0, 0.5, seed=1, device=ooo,
           names=names, got=False)


def test_queue_of_another_context_beside_device_arrays_is_refused(device):
    """``device=`` a queue of another context than the device arrays passed with it: a
    ValueError naming the first such array and the context, before anything runs, in every
    dialect."""
    import pyopencl as cl

    other_context = cl.Context([device.cl_device])      # kept referenced (Intel's runtime)
    other = cl.CommandQueue(other_context)
    names = ["context", "device="]
    a = {k: cla.to_device(device.queue, v) for k, v in mps_args().items()}
    expect(ValueError, rc.lstm, **a, device=other, names=["source", *names], got=False)
    t = {k: cla.to_device(device.queue, v) for k, v in tf_gru_args().items()}
    expect(ValueError, rc.gru_block_cell, **t, device=other, names=["x", *names], got=False)
    c, kw = cudnn_args()
    c = {k: cla.to_device(device.queue, v) if isinstance(v, np.ndarray) else v
         for k, v in c.items()}
    expect(ValueError, rc.cudnn_rnn, **c, **kw, device=other, names=["input", *names],
           got=False)


def test_profiling_queue_gives_the_same_result(device):
    """A queue made with PROFILING_ENABLE (in order) works like the device's own queue: one
    op, given the queue as ``device=`` or through device arrays made on it, gives bitwise the
    default queue's answer, which matches the float64 reference."""
    import pyopencl as cl

    profiling = cl.CommandQueue(device.context, device.cl_device,
                                properties=cl.command_queue_properties.PROFILING_ENABLE)
    a = mps_args()
    want = rc.lstm(**a, device=device)[0]
    np.testing.assert_allclose(want, M.lstm(**a)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(rc.lstm(**a, device=profiling)[0], want)
    on_queue = rc.lstm(**{k: cla.to_device(profiling, v) for k, v in a.items()})[0]
    assert on_queue.queue is profiling
    np.testing.assert_array_equal(on_queue.get(), want)


# ---- values, modes and descriptor fields ---------------------------------------------------

@pytest.mark.parametrize("lens,what", [
    ([0, 2, -1, 1, 1], "min -1"), ([0, T + 1, 1, 2, 0], f"max {T + 1}"),
    ([2 ** 31 - 1, 0, 0, 0, 0], "max"),
])
def test_sequence_lengths_range(lens, what):
    c, kw = cudnn_args()
    expect(ValueError, rc.cudnn_rnn, **c, sequence_lengths=np.array(lens, np.int64), **kw,
           names=["sequence_lengths", what, f"[0, {T}]"], got=False)


def test_sequence_lengths_shape():
    c, kw = cudnn_args()
    expect(rc.ShapeError, rc.cudnn_rnn, **c, sequence_lengths=np.full(N + 1, 1, np.int32), **kw,
           names=["sequence_lengths", f"[{N}]"])
    expect(rc.ShapeError, rc.cudnn_rnn, **c, sequence_lengths=np.full((1, N), 1, np.int32),
           **kw, names=["sequence_lengths"])


@pytest.mark.parametrize("bad,exc", [(-1, ValueError), (T + 1, ValueError), (2.5, TypeError),
                                     (None, TypeError), (True, TypeError)])
def test_seq_len_max(bad, exc):
    expect(exc, block_lstm, **tf_lstm_args(), seq_len_max=bad, names=["seq_len_max"], got=False)


@pytest.mark.parametrize("p,exc", [(-0.1, ValueError), (1.0001, ValueError),
                                   (float("nan"), ValueError), (float("inf"), ValueError),
                                   ("0.5", TypeError), (None, TypeError)])
def test_dropout_range(p, exc):
    c, kw = cudnn_args()
    expect(exc, rc.cudnn_rnn, **c, **kw, dropout=p, names=["dropout"])
    expect(exc, rc.cudnn_rnn_reserve_space_size, 2, H, I, T, N, dropout=p, names=["dropout"])


def test_dropout_bounds_are_valid(device):
    c, kw = cudnn_args()
    for p in (0.0, 1.0):                        # p = 1 gives zeros downstream, not NaN (A5)
        out = rc.cudnn_rnn(**c, **kw, dropout=p, device=device)
        assert np.all(np.isfinite(out[0]))


@pytest.mark.parametrize("arg,bad", [
    ("rnn_mode", "LSTM"), ("rnn_mode", "lstm "), ("rnn_mode", None), ("rnn_mode", 3),
    ("input_mode", "skip"), ("direction", "bi"), ("direction", b"bidirectional"),
])
def test_unknown_mode_strings(arg, bad):
    c, kw = cudnn_args()
    kw[arg] = bad
    expect(ValueError, rc.cudnn_rnn, **c, **kw, names=[arg, repr(bad), "expected one of"],
           got=True)
    expect(ValueError, rc.cudnn_rnn_params_size, 2, H, I, **kw, names=[arg])


@pytest.mark.parametrize("arg,bad,exc", [
    ("num_proj", -1, ValueError), ("num_proj", H, ValueError), ("num_proj", 1.5, TypeError),
    ("seed", 0.5, TypeError), ("seed2", "1", TypeError),
    ("time_major", "yes", TypeError), ("time_major", 1, TypeError),
    ("is_training", None, TypeError),
])
def test_cudnn_scalar_arguments(arg, bad, exc):
    c, kw = cudnn_args()
    kw[arg] = bad
    expect(exc, rc.cudnn_rnn, **c, **kw, names=[arg], got=False)


def test_cudnn_sizes_arguments():
    expect(ValueError, rc.cudnn_rnn_params_size, 0, H, I, names=["num_layers"])
    expect(ValueError, rc.cudnn_rnn_params_size, 1, 0, I, names=["num_units"])
    expect(TypeError, rc.cudnn_rnn_params_size, 1, "4", I, names=["num_units"], got=True)
    expect(ValueError, rc.cudnn_rnn_params_size, 1, H, I, input_mode="skip_input",
           names=["input_mode", "input_size == num_units", "got"], got=False)
    expect(ValueError, rc.cudnn_rnn_params_size, 1, H, I, rnn_mode="gru", num_proj=2,
           names=["num_proj", "got 2", "lstm"], got=False)


def test_cudnn_backprop_reserve_checks(device):
    c, kw = cudnn_args(mode="gru", L=2)
    fwd = rc.cudnn_rnn(**c, **kw, device=device)
    y, hn, _, res, host = fwd
    base = dict(c, sequence_lengths=None, output=y, output_h=hn, output_c=None,
                output_backprop=y, output_h_backprop=None, output_c_backprop=None,
                reserve_space=res, host_reserved=host)
    bad = dict(base, reserve_space=res[:-1])
    expect(rc.ShapeError, rc.cudnn_rnn_backprop, **bad, **kw, device=device,
           names=["reserve_space"])
    forged = host.copy()
    forged[1] ^= 1                              # another rnn_mode
    expect(ValueError, rc.cudnn_rnn_backprop, **dict(base, host_reserved=forged), **kw,
           device=device, names=["host_reserved"], got=False)
    inference = rc.cudnn_rnn(**c, **kw, is_training=False, device=device)
    expect(ValueError, rc.cudnn_rnn_backprop,
           **dict(base, reserve_space=inference[3], host_reserved=inference[4]), **kw,
           device=device, names=["reserve_space", "is_training"], got=False)
    expect(ValueError, rc.cudnn_rnn_backprop, **dict(base, host_reserved=None), **kw,
           device=device, names=["host_reserved"], got=False)


def test_descriptor_fields():
    a = mps_args()
    expect(TypeError, rc.lstm, **a, descriptor=rc.GRUDescriptor(),
           names=["descriptor", "LSTMDescriptor"], got=True)
    expect(TypeError, rc.lstm, **a, descriptor={"training": True}, names=["descriptor"])
    for field in ("reverse", "training", "produce_cell", "forget_gate_last"):
        expect(TypeError, rc.lstm, **a, descriptor=rc.LSTMDescriptor(**{field: "yes"}),
               names=[f"descriptor.{field}", "bool"], got=True)
    g = mps_args(kind="gru")
    for field in ("reset_after", "flip_z", "reset_gate_first"):
        expect(TypeError, rc.gru, **g, descriptor=rc.GRUDescriptor(**{field: 1}),
               names=[f"descriptor.{field}"])
    for field, bad in (("activation", "softplus"), ("cell_gate_activation", None),
                       ("input_gate_activation", "Sigmoid")):
        expect(ValueError, rc.lstm, **a, descriptor=rc.LSTMDescriptor(**{field: bad}),
               names=[f"descriptor.{field}", repr(bad), "expected one of"], got=False)
    r = mps_args(kind="rnn")
    expect(ValueError, rc.single_gate_rnn, **r,
           descriptor=rc.SingleGateRNNDescriptor(activation="gelu"),
           names=["descriptor.activation"], got=False)


@pytest.mark.parametrize("arg,bad,exc", [
    ("forget_bias", float("nan"), ValueError), ("forget_bias", "1", TypeError),
    ("cell_clip", float("inf"), ValueError), ("use_peephole", 1, TypeError),
    ("use_peephole", "True", TypeError),
])
def test_tf_scalar_arguments(arg, bad, exc):
    expect(exc, block_lstm, **tf_lstm_args(), **{arg: bad}, names=[arg], got=False)


def test_device_argument():
    expect(TypeError, rc.lstm, **mps_args(), device=3, names=["device"], got=False)
    expect(rc.DeviceNotFoundError, rc.lstm, **mps_args(), device="no-such-device-42",
           names=["no-such-device-42"], got=False)


# ---- NaN and Inf are data, not errors ------------------------------------------------------

def test_nan_and_inf_propagate(device):
    a = mps_args()
    a["source"][1, 0, 0] = np.nan               # row 0 from t = 1 on
    h = rc.lstm(**a, device=device)[0]
    assert np.all(np.isfinite(h[:1])) and np.all(np.isfinite(h[:, 1:]))
    assert np.all(np.isnan(h[1:, 0])), "NaN must propagate along row 0"
    # Inf saturates the LSTM gates exactly as the float64 reference does (no spurious NaN) ...
    a = mps_args()
    a["source"][2, 1, 0] = np.inf
    h = rc.lstm(**a, device=device)[0]
    want = M.lstm(**a)[0]
    np.testing.assert_allclose(h, want, rtol=1e-4, atol=1e-5, equal_nan=True)
    # ... and comes out unchanged through a ReLU RNN with positive weights
    r = {k: np.abs(v) for k, v in mps_args(kind="rnn").items()}
    r["source"][0, 2, 1] = np.inf
    h = rc.single_gate_rnn(**r, device=device)[0]
    assert np.all(np.isposinf(h[:, 2])) and np.all(np.isfinite(h[:, :2]))
    t = tf_lstm_args()
    t["x"][0, 2, :] = np.nan
    out = block_lstm(**t, device=device)
    assert np.all(np.isnan(out[6][:, 2])) and np.all(np.isfinite(out[6][:, :2]))
    c, kw = cudnn_args(mode="rnn_tanh", L=1)
    c["input"][0, 1, 0] = np.nan
    y = rc.cudnn_rnn(**c, **kw, device=device)[0]
    assert np.all(np.isnan(y[:, 1])) and np.all(np.isfinite(y[:, [0, 2]]))
