"""16-bit storage (API.md §6): float16 and, where ``ml_dtypes`` is installed, bfloat16 arrays in
every op of the three dialects, forward and gradients, NumPy and device arrays.

Oracles, never the library's own output:

* the independent float64 references of ``tests/reference/`` evaluated on the *same* inputs
  rounded to the storage dtype (so only what the library itself does differently is measured):
  every output and gradient within ``TOL`` = 2e-2 relative (2-norm of the difference over the
  2-norm of the reference), on prime-sized asymmetric shapes with non-zero initial states, at
  T = 200 and with saturated gates;
* PyTorch's CPU float16 ``nn.LSTM`` on the same inputs: pyrnn_cl's error against the float64
  reference is not larger than PyTorch's;
* the conversion kernels bit for bit against NumPy's float16 and ml_dtypes' bfloat16 casts
  (round to nearest even, overflow to infinity, NaN kept) over every float16 bit pattern.

Measured on PoCL and Intel's CPU runtime (November 2026, this file's shapes): float16 at most
2.7e-3 and bfloat16 at most 1.95e-2 relative (a GRU with one unit: its recurrent weight gradient
is three sums with cancellation); the largest errors are printed with ``-s`` (``MAX_ERR``).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import pyrnn_cl as rc
from helpers import shapes as S
from helpers.mps import (
    activated_z,
    default_flags,
    desc_of,
    forward,
    grad_names,
    lib_gradients,
    ref_gradients,
    training_desc,
)
from pyrnn_cl import _arrays, engine
from pyrnn_cl.errors import BuildError
from pyrnn_cl.programs import get_program
from pyrnn_cl.sources import dtype_code
from reference import cudnn_ref as CR
from reference import mps_ref as M
from reference import tf_ref as TR

HAS_TORCH = importlib.util.find_spec("torch") is not None
try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:    # NumPy has no bfloat16: those cases are skipped
    BF16 = None

F16 = pytest.param(np.dtype(np.float16), id="f16")
BF = pytest.param(BF16, id="bf16",
                  marks=pytest.mark.skipif(BF16 is None, reason="ml_dtypes is not installed"))
STORAGE = [F16, BF]
TOL = 2e-2

#: Largest relative error seen per storage dtype and part (printed at the end of the module).
MAX_ERR = {}


@pytest.fixture(scope="module", autouse=True)
def _report_errors():
    yield
    for key, value in sorted(MAX_ERR.items()):
        print(f"test_half {key} {value:.3e}")


def rel_norm(actual, expected):
    """||actual - expected||_2 / ||expected||_2 (absolute where expected is all zero)."""
    a = np.asarray(actual, np.float64).ravel()
    e = np.asarray(expected, np.float64).ravel()
    if a.size == 0:
        return 0.0
    scale = float(np.linalg.norm(e))
    return float(np.linalg.norm(a - e)) / (scale if scale > 0 else 1.0)


def check(actual, expected, dtype, what, part="forward", tol=TOL):
    """``actual`` has the storage ``dtype``, ``expected``'s shape, finite values and a relative
    error within ``tol``."""
    if isinstance(actual, cla.Array):
        actual = actual.get()
    assert isinstance(actual, np.ndarray), f"{what}: got {type(actual).__name__}"
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype} != {dtype}"
    assert actual.shape == np.shape(expected), f"{what}: {actual.shape} != {np.shape(expected)}"
    assert np.all(np.isfinite(np.asarray(actual, np.float64))), f"{what}: not finite"
    err = rel_norm(actual, expected)
    key = f"{dtype} {part}"
    MAX_ERR[key] = max(MAX_ERR.get(key, 0.0), err)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.0e}"
    return err


def check_each(actual, expected, dtype, what, part="forward"):
    """:func:`check` of each output of an op against the reference's, named ``what output k``."""
    for k, (a, e) in enumerate(zip(actual, expected)):
        check(a, e, dtype, f"{what} output {k}", part)


def host64(a):
    """``a`` (a device or NumPy array) as a float64 NumPy array."""
    return (a.get() if isinstance(a, cla.Array) else a).astype(np.float64)


def rounded(arrays, dtype):
    """Each array of a dict rounded to the storage dtype (the values every side then uses)."""
    return {k: np.asarray(v, np.float64).astype(dtype) for k, v in arrays.items()}


def f64(arrays):
    return {k: np.asarray(v, np.float64) for k, v in arrays.items()}


def to_device(device, a, offset=0):
    """``a`` on the device; with ``offset``, a view ``offset`` elements into a larger array
    whose first elements hold other values."""
    if a is None:
        return None
    if not offset:
        return cla.to_device(device.queue, a)
    flat = np.concatenate([np.full(offset, 7, a.dtype), a.reshape(-1)])
    return cla.to_device(device.queue, flat)[offset:].reshape(a.shape)


# =================================================================================================
# conversion kernels


@pytest.mark.oclgrind
def test_widen_float16_every_bit_pattern(device):
    """Every one of the 65536 float16 values widens to exactly NumPy's float32 (NaN to NaN)."""
    bits = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16)[3:]   # a size that is not 8k
    h = bits.view(np.float16)
    got = _arrays.widen(device, cla.to_device(device.queue, h), np.float16).get()
    want = h.astype(np.float32)
    nan = np.isnan(want)
    assert got.dtype == np.float32
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def _float32_cases(seed=0):
    """float32 values that stress rounding: random bit patterns, exact ties of float16 and
    bfloat16 (odd and even), their neighbours, overflow, subnormals, zeros, infinities, NaN."""
    rng = np.random.default_rng(seed)
    rand = rng.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    h = rng.integers(0, 2 ** 16, 4000, dtype=np.uint32).astype(np.uint16).view(np.float16)
    h = h[np.isfinite(h)].astype(np.float64)
    up = np.nextafter(h.astype(np.float16), np.float16(np.inf)).astype(np.float64)
    ties16 = ((h + up) / 2).astype(np.float32)             # exact float16 midpoints
    b = rng.integers(0, 2 ** 16, 4000, dtype=np.uint32) << 16
    ties_bf = (b | 0x8000).astype(np.uint32).view(np.float32)   # exact bfloat16 midpoints
    special = np.array([0.0, -0.0, 65504, 65519.99, 65520, 1e6, -1e6, 6e-8, 3e-8, 1e-45,
                        3.4e38, np.inf, -np.inf, np.nan, -np.nan], np.float32)
    with np.errstate(invalid="ignore"):       # nextafter of the NaN patterns
        vals = np.concatenate([rand, ties16, np.nextafter(ties16, np.float32(0)), ties_bf,
                               np.nextafter(ties_bf, np.float32(np.inf)), special])
    return vals[:len(vals) - 5]     # a size that is not a multiple of 8


@pytest.mark.oclgrind
@pytest.mark.parametrize("dtype", STORAGE)
def test_narrow_rounds_to_nearest_even(device, dtype):
    """float32 -> storage matches NumPy's (float16) / ml_dtypes' (bfloat16) round-to-nearest-even
    cast bit for bit; NaN stays NaN; a device array with an offset is read from its offset."""
    vals = _float32_cases()
    with np.errstate(over="ignore", invalid="ignore"):     # the overflow and NaN cases
        want = vals.astype(dtype)
    got = _arrays.narrow(device, cla.to_device(device.queue, vals), dtype).get()
    assert got.dtype == dtype
    nan = np.isnan(vals)
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    assert np.array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))
    # widening what was narrowed gives the narrowed values exactly
    back = _arrays.widen(device, cla.to_device(device.queue, got), dtype).get()
    assert np.array_equal(back[~nan], got[~nan].astype(np.float32))
    shifted = cla.to_device(device.queue, vals)[5:]
    got = _arrays.narrow(device, shifted, dtype).get()
    assert np.array_equal(got[~nan[5:]].view(np.uint16), want[5:][~nan[5:]].view(np.uint16))


@pytest.mark.oclgrind
@pytest.mark.parametrize("dtype", STORAGE)
def test_conversions_batched_across_slots(device, dtype):
    """widen_many / narrow_many over more arrays than one launch has slots (two launches), of
    sizes 0, 1, 7, 8, 9, 61 and 1024 + 3, some read from an element offset: every value as
    NumPy's / ml_dtypes' cast (the 8-wide and the 1-wide kernels, unused slots idle). A
    storage program built with another slot count is refused."""
    rng = np.random.default_rng(5)
    sizes = [0, 1, 7, 8, 9, 61, 1027, 3, 16, 5, 33]
    assert len(sizes) > _arrays.CONVERT_SLOTS
    q = device.queue
    vals = [rng.standard_normal(n + 3).astype(np.float32) for n in sizes]
    wide = [cla.to_device(q, v)[3:] if k % 2 else cla.to_device(q, v[3:])
            for k, v in enumerate(vals)]
    narrow = _arrays.narrow_many(device, wide, dtype)
    stored = [v[3:].astype(dtype) for v in vals]
    for got, want in zip(narrow, stored):
        assert got.dtype == dtype and got.shape == want.shape
        assert np.array_equal(got.get().view(np.uint16), want.view(np.uint16))
    back = _arrays.widen_many(device, [cla.to_device(q, w) for w in stored], dtype)
    for got, want in zip(back, stored):
        assert np.array_equal(got.get(), want.astype(np.float32))
    with pytest.raises(BuildError, match="8 conversion slots"):
        get_program(device, "storage.cl", {"PYRNN_DTYPE": dtype_code(dtype), "CONVERT_SLOTS": 4})


def _conversion_launches(monkeypatch):
    """A list that records ``(kernel, shapes)`` of every conversion launch from now on (widening
    inputs or narrowing results, ``_arrays._convert``)."""
    launched = []
    real = _arrays._convert

    def recording(device, kernel, storage, pairs):
        shapes = [a.shape for a, _ in pairs if a.size]
        if shapes:
            launched.append((kernel, shapes))
        return real(device, kernel, storage, pairs)

    monkeypatch.setattr(_arrays, "_convert", recording)
    return launched


def _same_bits(got, want):
    """``got`` equals ``want`` bit for bit (16-bit arrays), any NaN matching any NaN."""
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    assert np.array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))


@pytest.mark.oclgrind
@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("vw, H, I", [(1, 7, 7), (4, 12, 12), (16, 32, 32)])
def test_whole_sequence_forward_converts_its_own_inputs_and_results(device, monkeypatch, dtype,
                                                                    vw, H, I):
    """A 16-bit forward on the whole-sequence kernel with the input product inside reads its
    16-bit source, bias and initial state and writes its 16-bit results itself (``s16``,
    ``widen_inputs`` and ``NARROW16`` in ``cl/recurrence.cl``), with no conversion
    launch before or after it; the results are rounded as NumPy (float16) and ml_dtypes
    (bfloat16) round float32, ties to even, overflow to infinity and NaN kept. A linear
    vanilla cell with R = 0 and W = I makes every result y[t] = x[t] + b, a float32 sum of
    16-bit values that often lies between (or halfway between) 16-bit values; NaN and
    overflow only at the last step (they would reach later steps through h R^T). ``vw``
    units per work-item (1: the scalar store), runs of 7 (no 8-wide widening), 12 and 32
    values; prime T and N."""
    from helpers.device import override_tuning
    override_tuning(device, monkeypatch, REC_VW=vw, REC_SEQ_BYTES=1 << 20)
    launched = _conversion_launches(monkeypatch)
    rng = np.random.default_rng(vw + H)
    T, N = 5, 3
    largest = np.array(0x7bff if dtype == np.float16 else 0x7f7f, np.uint16).view(dtype)
    scale = rng.choice([2.0 ** -20, 2.0 ** -9, 1.0, 2.0 ** 9, 2.0 ** 13], (T, N, I))
    x = (rng.standard_normal((T, N, I)) * scale).astype(dtype)
    x[T - 1, 0, :2] = largest                     # + b > 0: over the largest 16-bit value
    x[T - 1, N - 1, 0] = np.nan
    b = (rng.standard_normal(H) * rng.choice([2.0 ** -12, 1.0, 2.0 ** 8], H)).astype(dtype)
    b[:2] = largest
    h0 = rng.standard_normal((N, H)).astype(dtype)          # (times R = 0)
    R = np.zeros((H, H), dtype)
    W = np.eye(H, I, dtype=dtype)
    desc = rc.SingleGateRNNDescriptor(activation="none", training=True)
    y, z = rc.single_gate_rnn(x, R, W, b, h0, descriptor=desc, device=device)
    assert launched == [], f"conversion launches: {launched}"
    with np.errstate(over="ignore", invalid="ignore"):
        want = (x.astype(np.float32) + b.astype(np.float32)).astype(dtype)
    want[T - 1, N - 1] = np.nan         # (x W^T: the NaN times W's zeros reaches every unit)
    assert y.dtype == z.dtype == dtype
    assert np.isinf(want[T - 1, 0, :2]).all() and np.isnan(want[T - 1, N - 1, 0])
    _same_bits(y, want)
    _same_bits(z, want)


@pytest.mark.oclgrind
@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("kind, desc, present", [
    ("lstm", rc.LSTMDescriptor(training=True, bidirectional=True), None),
    ("lstm", rc.LSTMDescriptor(training=True, bidirectional=True),
     ("input_weight", "bias", "init_state", "init_cell")),
    ("lstm", rc.LSTMDescriptor(produce_cell=True, reverse=True), ("input_weight", "init_cell")),
    ("gru", rc.GRUDescriptor(training=True, reset_after=True), None),
    ("rnn", rc.SingleGateRNNDescriptor(activation="tanh"), ("input_weight", "init_state"))])
def test_whole_sequence_forward_results_are_the_float32_results_rounded(
        device, monkeypatch, dtype, kind, desc, present):
    """A 16-bit forward whose layer runs the whole-sequence kernel returns the float32 call's
    results on the same (16-bit) inputs, rounded by NumPy / ml_dtypes: the kernel's own
    conversions change no value. No conversion launch narrows the results, and one widens
    inputs only for what the kernel does not widen itself (mask, peepholes, the secondary
    bias: all inputs present)."""
    from helpers.device import override_tuning
    override_tuning(device, monkeypatch, REC_SEQ_BYTES=1 << 20)
    launched = _conversion_launches(monkeypatch)
    op = {"lstm": rc.lstm, "gru": rc.gru, "rnn": rc.single_gate_rnn}[kind]
    inputs = S.layer_inputs(kind, S.PRIME, bidirectional=desc.bidirectional, present=present)
    a = rounded(inputs, dtype)
    got = op(**a, descriptor=desc, device=device)
    assert all(k == "pyrnn_widen" for k, _ in launched), launched
    widened = {shape for _, shapes in launched for shape in shapes}
    kept = {a[name].shape for name in ("source", "bias", "init_state", "init_cell") if name in a}
    assert not widened & kept, launched
    assert bool(launched) == (present is None), launched
    wide = op(**{k: v.astype(np.float32) for k, v in a.items()}, descriptor=desc,
              device=device)
    assert len(got) == len(wide)
    for g, w in zip(got, wide):
        assert g.dtype == dtype
        _same_bits(g, w.astype(dtype))


@pytest.mark.oclgrind
@pytest.mark.parametrize("dtype", STORAGE)
def test_whole_sequence_forward_tiles_below_the_backward_rows(device, monkeypatch, dtype):
    """A 16-bit whole-sequence forward widens its bias into one copy per batch-row group
    (``xb_sg`` apart): with forward tiles of 2 rows and backward tiles of 4 (REC_ACC_MAX = 8,
    an LSTM's tiles on AVX2) the copies follow the forward's groups. Its results are the
    float32 call's, rounded."""
    from helpers.device import ONE_LANE, WHOLE_SEQUENCE, override_tuning
    from pyrnn_cl.mps import _cell
    from pyrnn_cl.plan import LayerPlan

    override_tuning(device, monkeypatch, REC_NB=4, REC_ACC_MAX=8, **ONE_LANE, **WHOLE_SEQUENCE)
    desc = rc.LSTMDescriptor(training=True, bidirectional=True)
    shape = S.Shape("rows", T=3, N=7, I=5, H=4)
    plan = LayerPlan.for_device(_cell("lstm", desc), np.float32, device.tuning("recurrence"),
                                device.info.compute_units, T=shape.T, N=shape.N, H=shape.H,
                                D=2)
    assert plan.fused and (plan.fwd_nb, plan.nb) == (2, 4)
    inputs = S.layer_inputs("lstm", shape, bidirectional=True,
                            present=("input_weight", "bias", "init_state", "init_cell"))
    a = rounded(inputs, dtype)
    got = rc.lstm(**a, descriptor=desc, device=device)
    wide = rc.lstm(**{k: v.astype(np.float32) for k, v in a.items()}, descriptor=desc,
                   device=device)
    for g, w in zip(got, wide):
        _same_bits(g, w.astype(dtype))


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("kind, desc, present, chunk_rows, whole", [
    ("lstm", rc.LSTMDescriptor(bidirectional=True),
     ("input_weight", "bias", "init_state", "init_cell"), 0, True),
    ("lstm", rc.LSTMDescriptor(reverse=True), ("input_weight", "init_cell", "peephole"), 1, True),
    ("lstm", rc.LSTMDescriptor(), ("init_state",), 0, True),
    # (Oclgrind runs these two: both paths, the kernel's widening of every kind of input, both
    # directions, peepholes and the h-gathering kernel, in 6-8 s each; chunks of one step take
    # 25 s there)
    pytest.param("gru", rc.GRUDescriptor(reset_after=True, bidirectional=True),
                 ("input_weight", "bias", "init_state"), 0, True, marks=pytest.mark.oclgrind),
    ("rnn", rc.SingleGateRNNDescriptor(activation="tanh"), ("input_weight", "init_state"), 0,
     True),
    pytest.param("lstm", rc.LSTMDescriptor(bidirectional=True),
                 ("input_weight", "bias", "init_state", "init_cell", "peephole"), 0, False,
                 marks=pytest.mark.oclgrind),
    ("gru", rc.GRUDescriptor(reset_after=True), ("input_weight", "init_state"), 0, False)],
    ids=["lstm-bidi", "lstm-reverse-peephole-chunks", "lstm-no-input-weight",
         "gru-bidi", "rnn", "lstm-bidi-peephole-steps", "gru-steps"])
def test_16_bit_backward_reads_its_16_bit_inputs(device, monkeypatch, dtype, kind, desc, present,
                                                 chunk_rows, whole):
    """A 16-bit gradient op converts none of its saved gates, cell states and upstream
    gradient in a launch: the backward kernels read them as they are stored (``rd16``). With
    the whole-sequence backward (``whole``) the first chunk's launch widens the rest itself
    (``in16``: y, the final-state gradients, the initial states, the source), and only the
    peepholes are widened by a launch; with a launch per step (``whole`` False) the rest is
    widened by one launch. Its gradients are the float32 op's on the same 16-bit values,
    rounded by NumPy / ml_dtypes, bit for bit: reading 16-bit values changes no value.
    ``chunk_rows`` 1: a backward chunk per step (the later chunks' launches widen nothing, and
    the weight-gradient kernels after every chunk read the 16-bit saved values)."""
    from helpers.device import PER_STEP, override_tuning
    override_tuning(device, monkeypatch, **(dict(REC_SEQ_BYTES=1 << 20) if whole else PER_STEP),
                    **({"REC_BWD_ROWS": chunk_rows} if chunk_rows else {}))
    a = rounded(S.layer_inputs(kind, S.PRIME, bidirectional=desc.bidirectional,
                               present=present), dtype)
    T, N = a["source"].shape[:2]
    DH = (2 if desc.bidirectional else 1) * a["recurrent_weight"].shape[-1]
    rng = np.random.default_rng(11)
    dy = rng.standard_normal((T, N, DH)).astype(dtype)
    dhn = rng.standard_normal((N, DH)).astype(dtype)
    dcn = rng.standard_normal((N, DH)).astype(dtype) if kind == "lstm" else None
    saved = forward(kind, a, training_desc(kind, desc), device)
    launched = _conversion_launches(monkeypatch)
    got = lib_gradients(kind, a, desc, device, dy, dhn, dcn, saved=saved)
    widened = [shapes for name, shapes in launched if name == "pyrnn_widen"]
    peephole = [[a["peephole"].shape]] if "peephole" in a else []
    if whole:
        assert widened == peephole, launched
    else:   # one launch for what the kernels do not read as stored: y (GRU), states, source
        assert widened[:len(peephole)] == peephole and len(widened) == len(peephole) + 1
        shapes = widened[-1]
        assert saved[-1].shape not in shapes, launched          # the saved gates
        assert shapes.count(dy.shape) == (kind == "gru"), launched     # dy, cs: not; y: yes
    f32 = {k: v.astype(np.float32) for k, v in a.items()}
    wide = lib_gradients(kind, f32, desc, device, dy.astype(np.float32),
                         dhn.astype(np.float32), None if dcn is None else dcn.astype(np.float32),
                         saved=[s.astype(np.float32) for s in saved])
    assert len(got) == len(wide) == len(grad_names(kind, a))
    for g, w in zip(got, wide):
        assert g.dtype == dtype
        _same_bits(g, w.astype(dtype))


def test_16_bit_forwards_share_the_float32_programs(device, monkeypatch):
    """A 16-bit forward builds no engine program of its own: its conversions inside the
    whole-sequence kernel take the storage dtype as a kernel argument, so after a float32 call
    of a layer the float16 and bfloat16 calls of that layer reuse its programs (packs of the
    compute dtype: 16-bit packs, ``REC_PACK16_BYTES``, are programs of their own by design)."""
    from helpers.device import override_tuning
    from pyrnn_cl import engine
    override_tuning(device, monkeypatch, REC_SEQ_BYTES=1 << 20, REC_PACK16_BYTES=1 << 40)
    built = []
    real = engine.get_program

    def recording(dev, name, defines=None, **kw):
        built.append((name, tuple(sorted((defines or {}).items()))))
        return real(dev, name, defines, **kw)

    monkeypatch.setattr(engine, "get_program", recording)
    a = S.layer_inputs("lstm", S.PRIME, present=("input_weight", "bias", "init_state"))
    rc.lstm(**{k: v.astype(np.float32) for k, v in a.items()}, device=device)
    wide = {b for b in built if b[0] == "recurrence.cl"}
    assert wide, "the float32 call built no engine program"
    for dtype in [d for d in (np.dtype(np.float16), BF16) if d is not None]:
        built.clear()
        rc.lstm(**rounded(a, dtype), device=device)
        assert {b for b in built if b[0] == "recurrence.cl"} <= wide, dtype


# =================================================================================================
# MPSGraph dialect

def mps_case(kind, dtype, shape=S.PRIME, bidirectional=False, seed=0, scale=None):
    inputs = S.layer_inputs(kind, shape, bidirectional=bidirectional, seed=seed, scale=scale)
    return rounded(inputs, dtype)


def check_mps(device, kind, desc, inputs, dtype, device_arrays=False, seed=100, offset=0):
    """Forward outputs (h, c, z_state) and every gradient vs mps_ref on the rounded inputs;
    returns the arguments as passed (device arrays with ``device_arrays``, each ``offset``
    elements into its buffer, as are the gradient op's own inputs)."""
    T, N = inputs["source"].shape[:2]
    H = inputs["recurrent_weight"].shape[-1]
    D = 2 if desc.bidirectional else 1
    tdesc = training_desc(kind, desc)
    args = ({k: to_device(device, v, offset) for k, v in inputs.items()} if device_arrays
            else inputs)
    src, R = args["source"], args["recurrent_weight"]
    rest = {k: v for k, v in args.items() if k not in ("source", "recurrent_weight")}
    lib = {"rnn": rc.single_gate_rnn, "lstm": rc.lstm, "gru": rc.gru}[kind]
    out = lib(src, R, **rest, descriptor=tdesc, device=device)
    if device_arrays:
        assert all(isinstance(o, cla.Array) for o in out)
        out = [o.get() for o in out]
    ref = {"rnn": M.single_gate_rnn, "lstm": M.lstm, "gru": M.gru}[kind]
    fi = f64(inputs)
    want = ref(fi.pop("source"), fi.pop("recurrent_weight"), **fi,
               descriptor=_ref_desc(kind, tdesc))
    check(out[0], want[0], dtype, f"{kind} h")
    if kind == "lstm":
        check(out[1], want[1], dtype, "lstm c")
    check(out[-1], activated_z(kind, desc, want[-1], H), dtype, f"{kind} z_state")
    rng = np.random.default_rng(seed)
    dy = rng.standard_normal((T, N, D * H)).astype(dtype)
    dhn = rng.standard_normal((N, D * H)).astype(dtype)
    dcn = rng.standard_normal((N, D * H)).astype(dtype) if kind == "lstm" else None
    if device_arrays:
        saved = [to_device(device, o, offset) for o in out]
        got = lib_gradients(kind, args, desc, device, to_device(device, dy, offset),
                            to_device(device, dhn, offset), to_device(device, dcn, offset),
                            saved=saved)
        assert all(isinstance(g, cla.Array) for g in got)
    else:
        got = lib_gradients(kind, inputs, desc, device, dy, dhn, dcn, saved=out)
    exp = ref_gradients(kind, f64(inputs), desc, dy.astype(np.float64), dhn.astype(np.float64),
                        None if dcn is None else dcn.astype(np.float64))
    names = grad_names(kind, inputs)
    assert len(got) == len(exp) == len(names)
    for name, g, w in zip(names, got, exp):
        check(g, w, dtype, f"{kind} d_{name}", part="gradient")
    return args


def _ref_desc(kind, desc):
    import dataclasses
    cls = {"rnn": M.SingleGateRNNDescriptor, "lstm": M.LSTMDescriptor,
           "gru": M.GRUDescriptor}[kind]
    return cls(**{f.name: getattr(desc, f.name) for f in dataclasses.fields(cls)})


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("bidirectional", [False, True], ids=["fwd", "bidi"])
@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_mps_every_input(device, kind, bidirectional, dtype):
    """Every optional input (mask with zeros, peepholes, secondary bias, initial states)."""
    desc = desc_of(kind, bidirectional=bidirectional, **default_flags(kind))
    check_mps(device, kind, desc, mps_case(kind, dtype, bidirectional=bidirectional), dtype)


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("shape", S.SHAPES[1:], ids=S.ids(S.SHAPES[1:]))
@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_mps_shapes(device, kind, shape, dtype):
    """The layer tests' awkward shapes (vector tails, one unit, one row, 13 rows, one step)."""
    desc = desc_of(kind, **default_flags(kind))
    check_mps(device, kind, desc, mps_case(kind, dtype, shape, seed=7), dtype)


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_mps_device_arrays_at_an_offset(device, kind, dtype):
    """Device arrays that start 5 elements into their buffers (views of larger arrays): every
    input, forward and gradient, is read from its view's start, also where a kernel widens it
    itself (an input weight: the whole-sequence kernels), and where it is read as stored."""
    desc = desc_of(kind, bidirectional=True, **default_flags(kind))
    inputs = mps_case(kind, dtype, seed=4, bidirectional=True)
    check_mps(device, kind, desc, inputs, dtype, device_arrays=True, offset=5)


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_mps_device_arrays(device, kind, dtype):
    """pyopencl arrays in, pyopencl arrays of the storage dtype out, same values; no input
    array is written (the float32 copies are the op's own)."""
    desc = desc_of(kind, reverse=True, **default_flags(kind))
    inputs = mps_case(kind, dtype, seed=3)
    args = check_mps(device, kind, desc, inputs, dtype, device_arrays=True)
    for k, v in inputs.items():
        assert np.array_equal(args[k].get().view(np.uint16), v.view(np.uint16)), k


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("kind", ["rnn", "lstm", "gru"])
def test_mps_long_sequence(device, kind, dtype):
    """T = 200: rounding does not pile up through time (outputs and gradients)."""
    shape = S.Shape("long", T=200, N=5, I=3, H=11)
    desc = desc_of(kind, **default_flags(kind))
    check_mps(device, kind, desc, mps_case(kind, dtype, shape, seed=5), dtype)


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_mps_saturated_gates(device, kind, dtype):
    """Weights 6x larger than usual: most gates saturate; still within the tolerance."""
    desc = desc_of(kind, bidirectional=True, **default_flags(kind))
    inputs = mps_case(kind, dtype, seed=11, bidirectional=True, scale=2.0)
    check_mps(device, kind, desc, inputs, dtype)


@pytest.mark.oclgrind
def test_mps_lstm_float16_small(device):
    """A small float16 LSTM forward and backward (the oclgrind run's 16-bit op path)."""
    desc = desc_of("lstm", bidirectional=True)
    check_mps(device, "lstm", desc, mps_case("lstm", np.dtype(np.float16), S.SMALL, True),
              np.dtype(np.float16))


# =================================================================================================
# TensorFlow block ops

def _tf_inputs(rng, dtype, T, N, I, H, cell=False):
    w = 1.0 / np.sqrt(I + H)
    d = {"x": rng.standard_normal((N, I) if cell else (T, N, I)),
         "cs_prev": 0.8 * rng.standard_normal((N, H)), "h_prev": 0.8 * rng.standard_normal((N, H)),
         "w": w * rng.standard_normal((I + H, 4 * H)), "wci": 0.5 * rng.standard_normal(H),
         "wcf": 0.5 * rng.standard_normal(H), "wco": 0.5 * rng.standard_normal(H),
         "b": 0.3 * rng.standard_normal(4 * H)}
    return rounded(d, dtype)


def _args(d, names, device=None):
    return [to_device(device, d[n]) if device is not None else d[n] for n in names]


LSTM_IN = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")


@pytest.mark.parametrize("device_arrays", [False, True], ids=["numpy", "device"])
@pytest.mark.parametrize("dtype", STORAGE)
def test_tf_gru_block_cell(device, dtype, device_arrays):
    rng = np.random.default_rng(21)
    N, I, H = 5, 3, 7
    d = rounded({"x": rng.standard_normal((N, I)), "h_prev": 0.8 * rng.standard_normal((N, H)),
                 "w_ru": 0.4 * rng.standard_normal((I + H, 2 * H)),
                 "w_c": 0.4 * rng.standard_normal((I + H, H)),
                 "b_ru": 0.3 * rng.standard_normal(2 * H), "b_c": 0.3 * rng.standard_normal(H),
                 "d_h": rng.standard_normal((N, H))}, dtype)
    dev = device if device_arrays else None
    names = ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c")
    out = rc.gru_block_cell(*_args(d, names, dev), device=device)
    want = TR.gru_block_cell(*_args(f64(d), names))
    check_each(out, want, dtype, "gru_block_cell")
    r, u, c = out[:3]
    grads = rc.gru_block_cell_grad(*_args(d, names, dev), r, u, c, *_args(d, ["d_h"], dev),
                                   device=device)
    host = [host64(o) for o in out[:3]]
    want = TR.gru_block_cell_grad(*_args(f64(d), names), *host, f64(d)["d_h"])
    check_each(grads, want, dtype, "gru_block_cell_grad", "gradient")
    wg = rc.gru_block_cell_weight_grads(*_args(d, ("x", "h_prev"), dev), r, grads[2], grads[3],
                                        device=device)
    want = TR.gru_block_cell_weight_grads(f64(d)["x"], f64(d)["h_prev"], host[0],
                                          host64(grads[2]), host64(grads[3]))
    check_each(wg, want, dtype, "gru_block_cell_weight_grads", "gradient")


@pytest.mark.parametrize("device_arrays", [False, True], ids=["numpy", "device"])
@pytest.mark.parametrize("dtype", STORAGE)
def test_tf_lstm_block_cell(device, dtype, device_arrays):
    rng = np.random.default_rng(22)
    N, I, H = 5, 3, 7
    d = _tf_inputs(rng, dtype, 1, N, I, H, cell=True)
    d.update(rounded({"cs_grad": rng.standard_normal((N, H)),
                      "h_grad": rng.standard_normal((N, H))}, dtype))
    dev = device if device_arrays else None
    kw = dict(forget_bias=0.7, cell_clip=1.5, use_peephole=True)
    out = rc.lstm_block_cell(*_args(d, LSTM_IN, dev), **kw, device=device)
    want = TR.lstm_block_cell(*_args(f64(d), LSTM_IN), **kw)
    check_each(out, want, dtype, "lstm_block_cell")
    i, cs, f, o, ci, co, _ = out
    grads = rc.lstm_block_cell_grad(*_args(d, LSTM_IN, dev), i, cs, f, o, ci, co,
                                    *_args(d, ("cs_grad", "h_grad"), dev), use_peephole=True,
                                    device=device)
    host = [host64(a) for a in out[:6]]
    want = TR.lstm_block_cell_grad(*_args(f64(d), LSTM_IN), *host,
                                   *_args(f64(d), ("cs_grad", "h_grad")), use_peephole=True)
    check_each(grads, want, dtype, "lstm_block_cell_grad", "gradient")
    dicfo = grads[1]
    wg = rc.lstm_block_cell_weight_grads(*_args(d, ("x", "h_prev", "w"), dev), dicfo,
                                         device=device)
    dh = host64(dicfo)
    want = TR.lstm_block_cell_weight_grads(*_args(f64(d), ("x", "h_prev", "w")), dh)
    check_each(wg, want, dtype, "lstm_block_cell_weight_grads", "gradient")


@pytest.mark.parametrize("v2", [False, True], ids=["block_lstm", "block_lstm_v2"])
@pytest.mark.parametrize("dtype", STORAGE)
def test_tf_block_lstm(device, dtype, v2):
    """BlockLSTM(V2) and their gradients, seq_len_max < T, peepholes, clip (v1), T = 200."""
    rng = np.random.default_rng(23)
    T, N, I, H = 200, 5, 3, 7
    d = _tf_inputs(rng, dtype, T, N, I, H)
    d.update(rounded({"cs_grad": rng.standard_normal((T, N, H)),
                      "h_grad": rng.standard_normal((T, N, H))}, dtype))
    if v2:
        fwd, ref_fwd, grad, ref_grad = (rc.block_lstm_v2, TR.block_lstm_v2,
                                        rc.block_lstm_grad_v2, TR.block_lstm_grad_v2)
        kw = dict(cell_clip=0.0, use_peephole=True)
    else:
        fwd, ref_fwd, grad, ref_grad = (rc.block_lstm, TR.block_lstm, rc.block_lstm_grad,
                                        TR.block_lstm_grad)
        kw = dict(forget_bias=0.5, cell_clip=2.0, use_peephole=True)
    out = fwd(T - 3, *_args(d, LSTM_IN), **kw, device=device)
    want = ref_fwd(T - 3, *_args(f64(d), LSTM_IN), **kw)
    check_each(out, want, dtype, fwd.__name__)
    gkw = {"use_peephole": True}
    grads = grad(T - 3, *_args(d, LSTM_IN), *out, *_args(d, ("cs_grad", "h_grad")), **gkw,
                 device=device)
    want = ref_grad(T - 3, *_args(f64(d), LSTM_IN), *[o.astype(np.float64) for o in out],
                    *_args(f64(d), ("cs_grad", "h_grad")), **gkw)
    check_each(grads, want, dtype, grad.__name__, "gradient")


# =================================================================================================
# cuDNN dialect

def _cudnn_problem(mode, L, D, P, dtype, *, T=7, N=5, I=3, H=11, time_major=True, seed=0):
    rng = np.random.default_rng(seed)
    kw = dict(rnn_mode=mode, num_proj=P, direction="bidirectional" if D == 2 else
              "unidirectional")
    d = {"params": rng.uniform(-0.35, 0.35, CR.params_size(L, H, I, **kw)),
         "x": rng.standard_normal((T, N, I) if time_major else (N, T, I)),
         "h0": 0.8 * rng.standard_normal((L * D, N, P or H)),
         "c0": 0.8 * rng.standard_normal((L * D, N, H))}
    return rounded(d, dtype), kw


CUDNN_CASES = [("lstm", 2, 2, 0, True), ("lstm", 2, 1, 5, False), ("gru", 2, 2, 0, False),
               ("rnn_tanh", 1, 2, 0, True), ("rnn_relu", 2, 1, 0, True), ("lstm", 1, 2, 4, True)]


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("mode,L,D,P,tm", CUDNN_CASES,
                         ids=[f"{m}-L{L}-D{D}-P{P}-{'tm' if t else 'bm'}"
                              for m, L, D, P, t in CUDNN_CASES])
def test_cudnn(device, dtype, mode, L, D, P, tm):
    """cudnn_rnn and cudnn_rnn_backprop with lengths, every upstream gradient, half reserve."""
    check_cudnn(device, dtype, mode, L, D, P, tm)


@pytest.mark.oclgrind
def test_cudnn_float16_projection_small(device):
    """A two-layer LSTM with a projection in float16 (the oclgrind run's cuDNN-dialect 16-bit
    path: R and W_proj packed, W multiplied and the biases widened straight from the params
    buffer as stored)."""
    check_cudnn(device, np.dtype(np.float16), "lstm", 2, 1, 5, False)


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_cudnn_input_product_in_the_sequence_kernel(device, monkeypatch, dtype, mode):
    """16-bit params of small layers (input width a multiple of the vector width): the
    whole-sequence kernel computes x W_l^T + bW itself, W_l read from the params as stored and
    bW widened (no GEMM launch); two bidirectional layers against the reference."""
    names, fwd_names = [], []
    real, real_fwd = cl.enqueue_nd_range_kernel, rc.cudnn_rnn
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel",
                        lambda q, k, *a, **kw_: (names.append(k.function_name),
                                                 real(q, k, *a, **kw_))[1])

    def forward(*args, **kwargs):       # the forward's launches
        names.clear()
        out = real_fwd(*args, **kwargs)
        fwd_names.extend(names)
        return out

    monkeypatch.setattr(rc, "cudnn_rnn", forward)
    check_cudnn(device, dtype, mode, 2, 2, 0, False, I=32, H=16)
    # packs of 8 KiB at most: in the kernel wherever whole-sequence kernels run
    in_kernel = int(device.tuning("recurrence").get("REC_SEQ_BYTES", 0)) > 0
    assert (not [n for n in fwd_names if n.startswith("pyrnn_gemm")]) == in_kernel, fwd_names


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("mode,tm,per_step", [("lstm", True, False), ("gru", True, False),
                                              ("lstm", False, False), ("lstm", True, True),
                                              ("gru", True, "split")])
def test_cudnn_reserve_stays_16_bit(device, monkeypatch, dtype, mode, tm, per_step):
    """A 16-bit training cudnn_rnn (without projection or dropout) writes its 16-bit reserve
    space itself (the steps narrow as they store, whole-sequence or per step, with the
    products split over work-items too), and cudnn_rnn_backprop hands it to the engine as
    stored, with its initial states, final-state gradients and (time-major) source and
    output_backprop: nothing widens the reserve or a layer's saved gates (the kernels read
    them, and the cell states and dy, in 16 bits), and where the whole-sequence kernels run on
    time-major arrays nothing is widened before them at all. Both ops' results
    are, bit for bit, the float32 ops' on the same 16-bit values rounded by NumPy /
    ml_dtypes; the backprop changes neither the reserve nor dy."""
    from helpers.device import PER_STEP, override_tuning
    if per_step:        # "split": the step kernels' products over REC_KS work-items (GPUs)
        override_tuning(device, monkeypatch, **PER_STEP, **(
            dict(REC_KS=4, REC_NB=2, REC_VW=2) if per_step == "split" else {}))
    L, D, T, N, H = 2, 2, 7, 5, 11
    d, kw = _cudnn_problem(mode, L, D, 0, dtype, time_major=tm, seed=12, T=T, N=N, H=H)
    lstm = mode == "lstm"
    lens = np.array([7, 3, 6, 7, 1])
    dev = {k: cla.to_device(device.queue, v) for k, v in d.items()}
    c0 = dev["c0"] if lstm else None
    narrowed = []
    real_narrow = _arrays.narrow_many
    monkeypatch.setattr(_arrays, "narrow_many", lambda dv, arrays, st: (
        narrowed.extend(a.size for a in arrays), real_narrow(dv, arrays, st))[1])
    out = rc.cudnn_rnn(dev["x"], dev["h0"], c0, dev["params"], lens, time_major=tm, **kw,
                       device=device)
    assert out[3].size not in narrowed, narrowed      # (the output y: batch-major only)
    rng = np.random.default_rng(3)
    up = [cla.to_device(device.queue, rng.standard_normal(o.shape).astype(dtype))
          for o in out[:3 if lstm else 2]] + ([] if lstm else [None])
    reserve, dy = out[3].get(), up[0].get()
    widened = []
    for module in (_arrays, engine):
        real = module.widen_many
        monkeypatch.setattr(module, "widen_many",
                            lambda dv, arrays, st, real=real: (
                                widened.extend(a.size for a in arrays), real(dv, arrays, st))[1])
    grads = rc.cudnn_rnn_backprop(dev["x"], dev["h0"], c0, dev["params"], lens, *out[:3], *up,
                                  out[3], out[4], time_major=tm, **kw, device=device)
    sav_size = T * N * D * (4 if lstm else 3) * H
    assert reserve.size not in widened and sav_size not in widened, widened
    if tm and not per_step and int(device.tuning("recurrence").get("REC_SEQ_BYTES", 0)):
        assert widened == [], widened       # the whole-sequence kernel widens the rest
    assert np.array_equal(out[3].get().view(np.uint16), reserve.view(np.uint16))
    assert np.array_equal(up[0].get().view(np.uint16), dy.view(np.uint16))
    # the float32 op on the same values: its own host_reserved, the 16-bit reserve widened
    f32 = {k: v.astype(np.float32) for k, v in d.items()}
    out32 = rc.cudnn_rnn(f32["x"], f32["h0"], f32["c0"] if lstm else None, f32["params"], lens,
                         time_major=tm, **kw, device=device)
    want = rc.cudnn_rnn_backprop(
        f32["x"], f32["h0"], f32["c0"] if lstm else None, f32["params"], lens,
        *[o.get().astype(np.float32) for o in out[:3]],
        *[None if u is None else u.get().astype(np.float32) for u in up],
        reserve.astype(np.float32), out32[4], time_major=tm, **kw, device=device)
    for k, (g, w) in enumerate(zip(grads, want)):
        assert np.array_equal(g.get().view(np.uint16), w.astype(dtype).view(np.uint16)), k
    for k in range(4 if lstm else 2):
        assert np.array_equal(out[k].get().view(np.uint16),
                              out32[k].astype(dtype).view(np.uint16)), f"forward result {k}"


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("mode,tm,per_step", [("lstm", True, True), ("gru", False, True),
                                              ("lstm", False, False), ("gru", True, False)])
def test_cudnn_16_bit_forward_converts_in_one_launch(device, monkeypatch, dtype, mode, tm,
                                                     per_step):
    """A 16-bit cudnn_rnn widens everything its kernels do not read as stored in one
    conversion launch: every layer's biases, and where a layer runs per step (GPUs, large
    layers) the source and the initial states too (two bidirectional layers: 4 bias runs, x,
    h0, c0 fit the 8 slots of one launch; it used to be one launch for x, one per layer for
    the biases and one per layer for the states). Its results are, bit for bit, the float32
    op's on the same 16-bit values."""
    from helpers.device import PER_STEP, override_tuning
    if per_step:
        override_tuning(device, monkeypatch, **PER_STEP)
    d, kw = _cudnn_problem(mode, 2, 2, 0, dtype, time_major=tm, seed=31)
    lstm = mode == "lstm"
    lens = np.array([7, 3, 6, 7, 1])
    launches = []
    real = _arrays._convert
    monkeypatch.setattr(_arrays, "_convert", lambda dv, kernel, st, pairs: (
        launches.append((kernel, [a.size for a, _ in pairs])), real(dv, kernel, st, pairs))[1])
    dev = {k: cla.to_device(device.queue, v) for k, v in d.items()}
    for training in (True, False):
        launches.clear()
        out = rc.cudnn_rnn(dev["x"], dev["h0"], dev["c0"] if lstm else None, dev["params"],
                           lens, is_training=training, time_major=tm, **kw, device=device)
        widened = [sizes for kernel, sizes in launches if kernel == "pyrnn_widen"]
        assert len(widened) == 1, launches
        runs = sorted(widened[0])[:4]       # the bias runs: bW and bR of each layer and direction
        assert runs == [2 * (4 if lstm else 3) * 11] * 4, widened
        f32 = {k: v.astype(np.float32) for k, v in d.items()}
        want = rc.cudnn_rnn(f32["x"], f32["h0"], f32["c0"] if lstm else None, f32["params"],
                            lens, is_training=training, time_major=tm, **kw, device=device)
        for k in range(3 if lstm else 2):
            assert np.array_equal(out[k].get().view(np.uint16),
                                  want[k].astype(dtype).view(np.uint16)), (training, k)


@pytest.mark.parametrize("dtype", STORAGE)
@pytest.mark.parametrize("mode,D,per_step", [("lstm", 2, False), ("gru", 1, False),
                                             ("lstm", 1, True), ("gru", 2, True)])
def test_cudnn_16_bit_skip_input(device, monkeypatch, dtype, mode, D, per_step):
    """skip_input in 16 bits (layer 0 adds its input bias to the source itself, with no input
    weight; the other layers' biases come from the call's one widening): cudnn_rnn and
    cudnn_rnn_backprop give, bit for bit, the float32 ops' results on the same 16-bit values,
    whole-sequence and per step."""
    from helpers.device import PER_STEP, override_tuning
    if per_step:
        override_tuning(device, monkeypatch, **PER_STEP)
    L, T, N, H = 2, 5, 3, 7
    lstm = mode == "lstm"
    kw = dict(rnn_mode=mode, input_mode="skip_input",
              direction="bidirectional" if D == 2 else "unidirectional")
    rng = np.random.default_rng(17)
    d = rounded({"params": rng.uniform(-0.4, 0.4, CR.params_size(L, H, H, **kw)),
                 "x": rng.standard_normal((T, N, H)),
                 "h0": 0.8 * rng.standard_normal((L * D, N, H)),
                 "c0": 0.8 * rng.standard_normal((L * D, N, H))}, dtype)
    up = rounded({"dy": rng.standard_normal((T, N, D * H)),
                  "dh": rng.standard_normal((L * D, N, H)),
                  "dc": rng.standard_normal((L * D, N, H))}, dtype)
    f32 = {k: v.astype(np.float32) for k, v in d.items()}
    c0, c0_32 = (d["c0"], f32["c0"]) if lstm else (None, None)
    out = rc.cudnn_rnn(d["x"], d["h0"], c0, d["params"], **kw, device=device)
    want = rc.cudnn_rnn(f32["x"], f32["h0"], c0_32, f32["params"], **kw, device=device)
    for k in range(3 if lstm else 2):
        assert np.array_equal(out[k].view(np.uint16), want[k].astype(dtype).view(np.uint16)), k
    grads = rc.cudnn_rnn_backprop(d["x"], d["h0"], c0, d["params"], None, *out[:3], up["dy"],
                                  up["dh"], up["dc"] if lstm else None, out[3], out[4], **kw,
                                  device=device)
    want = rc.cudnn_rnn_backprop(
        f32["x"], f32["h0"], c0_32, f32["params"], None,
        *[o.astype(np.float32) for o in out[:3]], up["dy"].astype(np.float32),
        up["dh"].astype(np.float32), up["dc"].astype(np.float32) if lstm else None,
        out[3].astype(np.float32), want[4], **kw, device=device)
    for k, (g, w) in enumerate(zip(grads, want)):
        assert np.array_equal(g.view(np.uint16), w.astype(dtype).view(np.uint16)), k


@pytest.mark.parametrize("dtype", STORAGE)
def test_cudnn_16_bit_parts_the_device_cannot_address(device, monkeypatch, dtype):
    """Where no reserve part or state slice can be a sub-buffer (``sub_array`` gives None: an
    alignment the device does not offer), a 16-bit training forward narrows each part into
    reserve_space, state slices are copied in their own dtype and backprop copies the parts
    out in 16 bits: the same results, bit for bit, as in place."""
    from pyrnn_cl import cudnn

    d, kw = _cudnn_problem("lstm", 2, 2, 0, dtype, seed=21)
    lens = np.array([7, 3, 6, 7, 1])
    rng = np.random.default_rng(5)
    up = [rng.standard_normal(shape).astype(dtype) for shape in ((7, 5, 22), (4, 5, 11),
                                                                  (4, 5, 11))]

    def run():
        out = rc.cudnn_rnn(d["x"], d["h0"], d["c0"], d["params"], lens, **kw, device=device)
        return list(out) + list(rc.cudnn_rnn_backprop(
            d["x"], d["h0"], d["c0"], d["params"], lens, *out[:3], *up, *out[3:], **kw,
            device=device))

    in_place = run()
    calls = []
    monkeypatch.setattr(cudnn, "sub_array", lambda *a: calls.append(a) and None)
    copied = run()
    assert len(calls) > 2 * 3 * 2           # every part of both calls took the copy path
    for k, (a, b) in enumerate(zip(in_place, copied)):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), k


@pytest.mark.oclgrind
def test_cudnn_float16_gru_in_the_sequence_kernel(device, monkeypatch):
    """Under Oclgrind: the case above for a float16 GRU with whole-sequence kernels on
    (Oclgrind's profile runs per step): the 16-bit reserve parts, output and final states
    written by the kernels that compute them."""
    from helpers.device import override_tuning
    override_tuning(device, monkeypatch, REC_SEQ_BYTES=1 << 20)
    test_cudnn_input_product_in_the_sequence_kernel(device, monkeypatch, np.dtype(np.float16),
                                                    "gru")


def check_cudnn(device, dtype, mode, L, D, P, tm, I=3, H=11):
    d, kw = _cudnn_problem(mode, L, D, P, dtype, time_major=tm, seed=L + D, I=I, H=H)
    lstm = mode == "lstm"
    c0 = d["c0"] if lstm else None
    lens = np.array([7, 3, 6, 7, 1])
    out = rc.cudnn_rnn(d["x"], d["h0"], c0, d["params"], lens, time_major=tm, **kw,
                       device=device)
    assert out[3].dtype == dtype and out[3].size > 0 and out[4].dtype == np.int8
    fd = f64(d)
    c0d = fd["c0"] if lstm else None
    want = CR.cudnn_rnn_forward(fd["x"], fd["h0"], c0d, fd["params"], lens, time_major=tm,
                                **kw)
    for k in range(3 if lstm else 2):
        check(out[k], want[k], dtype, f"cudnn_rnn output {k}")
    # inference: the same results, bit for bit
    inf = rc.cudnn_rnn(d["x"], d["h0"], c0, d["params"], lens, time_major=tm, **kw,
                       is_training=False, device=device)
    for k in range(3 if lstm else 2):
        assert inf[k].dtype == dtype
        assert np.array_equal(inf[k].view(np.uint16), out[k].view(np.uint16)), k
    rng = np.random.default_rng(9)
    up = [rng.standard_normal(np.shape(o)).astype(dtype) for o in out[:3]]
    if not lstm:
        up[2] = None
    grads = rc.cudnn_rnn_backprop(d["x"], d["h0"], c0, d["params"], lens, *out[:3], *up,
                                  out[3], out[4], time_major=tm, **kw, device=device)
    want = CR.cudnn_rnn_backward(fd["x"], fd["h0"], c0d, fd["params"], lens,
                                 *[None if u is None else u.astype(np.float64) for u in up],
                                 time_major=tm, **kw)
    for k in range(4):
        if k == 2 and not lstm:
            assert grads[2].shape == (0,) and grads[2].dtype == dtype
            continue
        check(grads[k], want[k], dtype, f"cudnn_rnn_backprop output {k}", "gradient")


@pytest.mark.parametrize("dtype", STORAGE)
def test_cudnn_device_arrays_and_params(device, dtype):
    """Device arrays through cudnn_rnn/backprop; the params conversions exact in 16 bits."""
    d, kw = _cudnn_problem("gru", 1, 2, 0, dtype, seed=4)
    L, H, I = 1, 11, 3
    n = rc.cudnn_rnn_params_size(L, H, I, **kw)
    assert n == d["params"].size      # elements: the dtype's bytes per element times this
    weights, biases = rc.cudnn_rnn_params_to_canonical(L, H, I, d["params"], **kw)
    assert all(w.dtype == dtype for w in weights + biases)
    back = rc.cudnn_rnn_canonical_to_params(L, H, I, weights, biases, **kw)
    assert back.dtype == dtype and np.array_equal(back.view(np.uint16),
                                                  d["params"].view(np.uint16))
    pd = to_device(device, d["params"])
    dw, db = rc.cudnn_rnn_params_to_canonical(L, H, I, pd, **kw, device=device)
    assert all(isinstance(a, cla.Array) and a.dtype == dtype for a in dw + db)
    for a, b in zip(dw + db, weights + biases):
        assert np.array_equal(a.get().view(np.uint16), b.view(np.uint16))
    pback = rc.cudnn_rnn_canonical_to_params(L, H, I, dw, db, **kw, device=device)
    assert pback.dtype == dtype and np.array_equal(pback.get().view(np.uint16),
                                                   d["params"].view(np.uint16))
    x, h0 = to_device(device, d["x"]), to_device(device, d["h0"])
    out = rc.cudnn_rnn(x, h0, None, pd, **kw, device=device)
    assert all(isinstance(o, cla.Array) and o.dtype == dtype for o in out[:4])
    host = rc.cudnn_rnn(d["x"], d["h0"], None, d["params"], **kw, device=device)
    for o, h in zip(out[:4], host[:4]):
        assert np.array_equal(o.get().view(np.uint16), h.view(np.uint16))
    dy = to_device(device, np.ones(out[0].shape, dtype))
    grads = rc.cudnn_rnn_backprop(x, h0, None, pd, None, *out[:3], dy, None, None, out[3],
                                  out[4], **kw, device=device)
    assert all(isinstance(g, cla.Array) and g.dtype == dtype for g in grads)


def test_cudnn_dropout_mask_float16(device):
    """The documented mask in float16: the float32 mask's values rounded."""
    from pyrnn_cl.cudnn import cudnn_dropout_mask
    m16 = cudnn_dropout_mask((4, 3, 5), 0, 0.3, seed=2, dtype=np.float16, device=device)
    m32 = cudnn_dropout_mask((4, 3, 5), 0, 0.3, seed=2, dtype=np.float32, device=device)
    assert m16.dtype == np.float16
    assert np.array_equal(m16, m32.astype(np.float16))
    assert set(np.unique(m32)) <= {0.0, np.float32(1 / 0.7)}


# =================================================================================================
# PyTorch's float16 LSTM


@pytest.mark.torch
@pytest.mark.parametrize("T", [7, 200])
def test_not_less_accurate_than_torch_float16(device, T):
    """On the same float16 inputs, pyrnn_cl's LSTM (forward, input/state/weight gradients) is
    at least as close to the float64 reference as PyTorch's CPU float16 nn.LSTM."""
    import torch

    torch.manual_seed(0)
    I, H, N, L = 3, 11, 5, 2
    m = torch.nn.LSTM(I, H, num_layers=L, bidirectional=True)
    for p in m.parameters():
        torch.nn.init.uniform_(p, -0.35, 0.35)
    m = m.half()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((T, N, I)).astype(np.float16)
    h0 = (0.8 * rng.standard_normal((2 * L, N, H))).astype(np.float16)
    c0 = (0.8 * rng.standard_normal((2 * L, N, H))).astype(np.float16)
    dy = rng.standard_normal((T, N, 2 * H)).astype(np.float16)
    W, B = [], []
    for layer in range(L):
        for sfx in ("", "_reverse"):
            def p(n, layer=layer, sfx=sfx):
                return getattr(m, f"{n}_l{layer}{sfx}").detach().numpy()
            W += list(np.split(p("weight_ih"), 4)) + list(np.split(p("weight_hh"), 4))
            B += list(np.split(p("bias_ih"), 4)) + list(np.split(p("bias_hh"), 4))
    kw = dict(rnn_mode="lstm", direction="bidirectional")
    params = rc.cudnn_rnn_canonical_to_params(L, H, I, W, B, **kw)
    assert params.dtype == np.float16
    # float64 reference on the same (float16) values
    p64 = params.astype(np.float64)
    want = CR.cudnn_rnn_forward(x.astype(np.float64), h0.astype(np.float64),
                                c0.astype(np.float64), p64, **kw)
    wgrad = CR.cudnn_rnn_backward(x.astype(np.float64), h0.astype(np.float64),
                                  c0.astype(np.float64), p64, None, dy.astype(np.float64),
                                  None, None, **kw)
    # pyrnn_cl
    out = rc.cudnn_rnn(x, h0, c0, params, **kw, device=device)
    grads = rc.cudnn_rnn_backprop(x, h0, c0, params, None, *out[:3], dy, None, None, out[3],
                                  out[4], **kw, device=device)
    # torch float16
    xt = torch.tensor(x, requires_grad=True)
    h0t, c0t = torch.tensor(h0, requires_grad=True), torch.tensor(c0, requires_grad=True)
    y, _ = m(xt, (h0t, c0t))
    m.zero_grad()
    (y * torch.tensor(dy)).sum().backward()
    gW, gB = [], []
    for layer in range(L):
        for sfx in ("", "_reverse"):
            def g(n, layer=layer, sfx=sfx):
                return getattr(m, f"{n}_l{layer}{sfx}").grad.numpy()
            gW += list(np.split(g("weight_ih"), 4)) + list(np.split(g("weight_hh"), 4))
            gB += list(np.split(g("bias_ih"), 4)) + list(np.split(g("bias_hh"), 4))
    t_params = CR.canonical_to_params(L, H, I, [a.astype(np.float64) for a in gW],
                                      [a.astype(np.float64) for a in gB], **kw)
    pairs = [("output", out[0], y.detach().numpy(), want[0]),
             ("input_backprop", grads[0], xt.grad.numpy(), wgrad[0]),
             ("input_h_backprop", grads[1], h0t.grad.numpy(), wgrad[1]),
             ("input_c_backprop", grads[2], c0t.grad.numpy(), wgrad[2]),
             ("params_backprop", grads[3], t_params, wgrad[3])]
    for name, ours, theirs, ref in pairs:
        e_ours, e_torch = rel_norm(ours, ref), rel_norm(theirs, ref)
        print(f"T={T} {name}: pyrnn_cl {e_ours:.2e}, torch float16 {e_torch:.2e}")
        assert ours.dtype == np.float16
        assert e_ours <= e_torch, f"{name}: pyrnn_cl {e_ours:.3e} > torch {e_torch:.3e}"


# =================================================================================================
# validation


def test_mixed_storage_dtypes_name_the_argument(device):
    inputs = mps_case("lstm", np.dtype(np.float16))
    R = inputs["recurrent_weight"]
    with pytest.raises(TypeError, match=r"recurrent_weight: got dtype float32, but source is "
                                        r"float16"):
        rc.lstm(inputs["source"], R.astype(np.float32), device=device)
    with pytest.raises(TypeError, match=r"init_state: got dtype float64, but source is float16"):
        rc.lstm(inputs["source"], R, init_state=np.zeros((5, 11)), device=device)
    if BF16 is not None:
        with pytest.raises(TypeError, match=r"input_h: got dtype bfloat16, but input is float16"):
            rc.cudnn_rnn(np.zeros((2, 1, 3), np.float16), np.zeros((1, 1, 4), BF16),
                         None, np.zeros(rc.cudnn_rnn_params_size(1, 4, 3, rnn_mode="gru"),
                                        np.float16), rnn_mode="gru", device=device)


def test_unsupported_dtype_lists_the_storage_dtypes(device):
    x = np.zeros((2, 1, 3), np.int16)
    with pytest.raises(TypeError, match=r"source: got dtype int16, expected float32, float64, "
                                        r"float16"):
        rc.gru(x, np.zeros((3, 3), np.int16), device=device)


def test_reserve_space_of_another_dtype_is_refused(device):
    """A float16 forward's reserve space does not pass for a float32 backprop."""
    d, kw = _cudnn_problem("gru", 1, 1, 0, np.dtype(np.float16), seed=2)
    out = rc.cudnn_rnn(d["x"], d["h0"], None, d["params"], **kw, device=device)
    f32 = {k: v.astype(np.float32) for k, v in d.items()}
    with pytest.raises(ValueError, match="host_reserved: does not match"):
        rc.cudnn_rnn_backprop(f32["x"], f32["h0"], None, f32["params"], None,
                              *[o.astype(np.float32) for o in out[:3]],
                              np.ones(out[0].shape, np.float32), None, None,
                              out[3].astype(np.float32), out[4], **kw, device=device)


@pytest.mark.parametrize("device_arrays", [False, True], ids=["numpy", "device"])
@pytest.mark.parametrize("shape", S.EMPTY, ids=S.ids(S.EMPTY))
def test_empty_sizes(device, shape, device_arrays):
    """T = 0 / N = 0 in float16: empty outputs of the storage dtype; the final-state gradient
    passes to the initial state unchanged (exactly: no rounding on the way)."""
    dtype = np.dtype(np.float16)
    inputs = mps_case("gru", dtype, shape, seed=8)
    desc = desc_of("gru", training=True)
    args = {k: to_device(device, v) if device_arrays and v.size else v
            for k, v in inputs.items()}
    src, R = args.pop("source"), args.pop("recurrent_weight")
    h, z = rc.gru(src, R, **args, descriptor=desc, device=device)
    for o, width in ((h, shape.H), (z, 3 * shape.H)):
        assert o.dtype == dtype and o.shape == (shape.T, shape.N, width)
    dhn = np.random.default_rng(0).standard_normal((shape.N, shape.H)).astype(dtype)
    got = rc.gru_gradients(src, R, h, z, h, **args, state_gradient=dhn,
                           descriptor=desc_of("gru"), device=device)
    got = [g.get() if isinstance(g, cla.Array) else g for g in got]
    assert all(g.dtype == dtype for g in got)
    d_init = got[grad_names("gru", inputs).index("init_state")]
    if shape.T == 0:
        assert np.array_equal(d_init, dhn)


# =================================================================================================
# 16-bit packs (REC_PACK16_BYTES): the steps read the weights as stored

#: recurrence tunings that reach every step kernel's weight reads: the whole-sequence kernels
#: with the device's vector width, per-step kernels with 2-unit vectors, and per-step kernels
#: whose products are split over 4 work-items of one unit each (the GPU layout, REC_KS)
PACK16_TUNINGS = {
    "seq": {},
    "steps-vw2": {"REC_VW": 2, "REC_TILE_MAX": 0, "REC_SEQ_BYTES": 0, "REC_SEQ_MAX_BYTES": 0},
    "split-ks4": {"REC_VW": 1, "REC_KS": 4, "REC_SEQ_BYTES": 0, "REC_SEQ_MAX_BYTES": 0},
}


#: the cuDNN-dialect layers of :func:`_run_all_ops`: (mode, layers, directions, projection)
PACK16_CUDNN = (("lstm", 2, 1, 4), ("gru", 1, 2, 0), ("rnn_relu", 1, 1, 0))


def _run_all_ops(device, dtype, cudnn=PACK16_CUDNN, mps=True):
    """Forward and gradients, as raw bits, of a cuDNN-dialect LSTM with a projection (2 layers),
    a bidirectional GRU (two-phase cell, hn rebuilt in the backward) and a ReLU RNN, and of a
    bidirectional MPSGraph LSTM (input product inside the whole-sequence kernel), the last
    with H = 11: a partial last vector of units, whose padding the packs fill."""
    bits = []
    for mode, L, D, P in cudnn:
        d, kw = _cudnn_problem(mode, L, D, P, dtype, H=8, I=6, seed=3)
        c0 = d["c0"] if mode == "lstm" else None
        out = rc.cudnn_rnn(d["x"], d["h0"], c0, d["params"], **kw, device=device)
        rng = np.random.default_rng(5)
        up = [rng.standard_normal(np.shape(o)).astype(dtype) for o in out[:3]]
        grads = rc.cudnn_rnn_backprop(d["x"], d["h0"], c0, d["params"], None, *out[:3],
                                      *(up if c0 is not None else up[:2] + [None]), out[3],
                                      out[4], **kw, device=device)
        bits += [np.asarray(a).view(np.uint8) for a in list(out[:4]) + list(grads)]
    if not mps:
        return bits
    inputs = mps_case("lstm", dtype, shape=S.Shape("pack16", T=5, N=3, I=8, H=11),
                      bidirectional=True)
    desc = desc_of("lstm", bidirectional=True, **default_flags("lstm"))
    src, R = inputs["source"], inputs["recurrent_weight"]
    rest = {k: v for k, v in inputs.items() if k not in ("source", "recurrent_weight")}
    out = rc.lstm(src, R, **rest, descriptor=training_desc("lstm", desc), device=device)
    rng = np.random.default_rng(6)
    dy = rng.standard_normal(out[0].shape).astype(dtype)
    got = lib_gradients("lstm", inputs, desc, device, dy, None, None, saved=out)
    bits += [np.asarray(a).view(np.uint8) for a in list(out) + list(got) if a is not None]
    return bits


def _compare_packs(device, dtype, tune, **ops):
    from pyrnn_cl import tuning

    base = dict(device.tuning("recurrence"), **PACK16_TUNINGS[tune])
    results = {}
    for pack16 in (0, 1):
        limit = 0 if pack16 else tuning.NEVER
        with tuning.trial(device, "recurrence", dict(base, REC_PACK16_BYTES=limit)):
            getattr(device, "_pyrnn_layers", {}).clear()    # (only this run's layers below)
            results[pack16] = _run_all_ops(device, dtype, **ops)
            packs = {layer.plan.pack16 for layer in device._pyrnn_layers.values()
                     if layer.weights == dtype}
        assert (dtype_code(dtype) in packs) == bool(pack16), packs    # the path ran (or not)
    assert len(results[0]) == len(results[1]) > 5
    for k, (a, b) in enumerate(zip(results[0], results[1])):
        assert np.array_equal(a, b), f"result {k} differs with 16-bit packs"


#: (the per-step kernels with 2-unit vectors and bfloat16 through the split layout are left to
#: the slow run: the fast suite keeps float16 over all three layouts and bfloat16's loads)
_PACK16_CASES = [pytest.param(dt, tune, id=f"{name}-{tune}",
                              marks=[pytest.mark.slow] if (tune == "steps-vw2" or (
                                  name == "bf16" and tune == "split-ks4")) else [])
                 for name, dt in (("f16", np.dtype(np.float16)), ("bf16", BF16))
                 for tune in PACK16_TUNINGS if dt is not None]


@pytest.mark.parametrize("dtype,tune", _PACK16_CASES)
def test_16bit_packs_give_the_widened_packs_results(device, dtype, tune):
    """16-bit weights packed as stored and widened in the step kernels as they read them
    (``REC_PACK16_BYTES`` = 0; derived for GPUs, and for CPUs where R outgrows the cache) give
    bit for bit the results of packs widened to float32 (``NEVER``), over every step kernel
    that reads a pack: the values and the order of every product are the same. The oracle
    tests above check the results themselves."""
    _compare_packs(device, dtype, tune)


@pytest.mark.oclgrind
def test_16bit_packs_small(device):
    """The Oclgrind run's 16-bit packs: a float16 LSTM with a projection (R and W_proj packed
    as stored, both transposed packs) through the GPU layout of split products."""
    _compare_packs(device, np.dtype(np.float16), "split-ks4", cudnn=(("lstm", 1, 1, 4),),
                   mps=False)
