"""pyrnn_cl.gemm: ``gemm`` and ``sum_rows`` against NumPy (float64 reference).

Tolerances are relative Frobenius norms: 1e-5 for float32, 1e-12 for float64.
"""

from __future__ import annotations

import numpy as np
import pytest

cl = pytest.importorskip("pyopencl")
cla = pytest.importorskip("pyopencl.array")

import pyrnn_cl.gemm as gemm_module  # noqa: E402
from pyrnn_cl import programs  # noqa: E402
from pyrnn_cl.devices import Device, get_device  # noqa: E402
from pyrnn_cl.errors import DeviceNotFoundError, ShapeError, UnsupportedError  # noqa: E402
from pyrnn_cl.gemm import gemm, sum_rows  # noqa: E402
from pyrnn_cl.sources import STORAGE_DTYPES  # noqa: E402
from pyrnn_cl.tuning import derive  # noqa: E402

TOL = {np.float32: 1e-5, np.float64: 1e-12}
DTYPES = [np.float32, np.float64]
TRANS = [(False, False), (False, True), (True, False), (True, True)]

# (m, n, k): ones, primes, non-multiples of every tile size, long and short k, thin and wide
SHAPES = [
    (1, 1, 1), (1, 1, 7), (1, 7, 1), (7, 1, 1), (2, 3, 4), (3, 3, 3), (5, 17, 3), (13, 1, 29),
    (1, 33, 17), (33, 1, 64), (33, 33, 33), (31, 37, 41), (16, 16, 16), (17, 15, 16),
    (47, 53, 59), (64, 64, 64), (65, 63, 1), (6, 32, 100), (7, 33, 257), (12, 48, 5),
    (97, 31, 11), (1, 257, 3), (257, 1, 5), (100, 100, 1), (3, 200, 16), (127, 129, 13),
    (96, 64, 127), (2, 2, 1000), (61, 67, 71), (33, 257, 2), (11, 128, 64), (40, 47, 130),
]


#: the local-memory tiled kernel (GEMM_LOCAL = 1, the GPU path) forced on: with the default
#: tile, and with an odd one (blocks of 24 x 40, chunks of 5 k values, 3 x 5 micro-tiles: no size
#: divides another, and the 64 work-items do not divide a chunk's elements)
TILED = {
    "tiled": {"GEMM_LOCAL": 1},
    "tiled-odd": {"GEMM_LOCAL": 1, "GEMM_LBM": 24, "GEMM_LBN": 40, "GEMM_LBK": 5, "GEMM_LTM": 3,
                  "GEMM_LTN": 5},
}


@pytest.fixture(scope="module", params=["resolved", "derived", *TILED])
def dev(request):
    """The default device with its resolved tuning (tuned entries included), with the derived
    defaults only, and with the tiled kernel forced on (:data:`TILED`, float32 and float64)."""
    try:
        device = get_device()
    except DeviceNotFoundError as exc:
        pytest.skip(str(exc))
    if request.param == "resolved":
        return device
    plain = Device(device.cl_device, context=device.context, queue=device.queue, info=device.info)
    forced = TILED.get(request.param, {})

    def tuning(family):
        values = dict(derive(device.info, device.profile)[family])
        return dict(values, **forced) if family in ("gemm", "gemm_f64") else values

    plain.tuning = tuning
    return plain


def _tiled(dev) -> bool:
    """Whether ``dev`` runs its float32 products through the tiled kernel."""
    return bool(gemm_module._gemm_config(dev, 1)[0].get("GEMM_LOCAL"))


def _out_of_order(dev):
    """``dev`` with an out-of-order queue of its own (its tuning shared), or None where the
    device has none."""
    props = cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE
    if not dev.cl_device.queue_properties & props:
        return None
    queue = cl.CommandQueue(dev.context, dev.cl_device, properties=props)
    ooo = Device(dev.cl_device, context=dev.context, queue=queue, info=dev.info)
    ooo.tuning = dev.tuning
    return ooo


def _need(dev, dtype):
    try:
        dev.check_dtype(dtype)
    except UnsupportedError as exc:
        pytest.skip(str(exc))


def _rel(x, ref):
    den = np.linalg.norm(ref)
    return np.linalg.norm(np.asarray(x, np.float64) - ref) / (den if den > 0 else 1.0)


def _dev_array(q, x):
    """Device copy of ``x`` (at least one element: OpenCL has no empty buffers)."""
    x = np.ascontiguousarray(x)
    return cla.to_device(q, x if x.size else np.zeros(1, x.dtype))


def _op(x, t):
    return x.T if t else x


def _run(dev, dtype, m, n, k, ta, tb, alpha, beta, rng, nan_c=False, **kw):
    A = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    B = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    C0 = np.full((m, n), np.nan, dtype) if nan_c else rng.standard_normal((m, n)).astype(dtype)
    q = dev.queue
    a, b, c = _dev_array(q, A), _dev_array(q, B), _dev_array(q, C0)
    gemm(dev, dtype, m, n, k, a, b, c, trans_a=ta, trans_b=tb, alpha=alpha, beta=beta, **kw)
    ref = alpha * (_op(A, ta).astype(np.float64) @ _op(B, tb).astype(np.float64))
    if beta != 0:
        ref += beta * C0.astype(np.float64)
    return c.get()[: m * n].reshape(m, n), ref


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "NT", "TN", "TT"])
def test_gemm_k_blocks(dev, dtype, ta, tb):
    """``k_block``: the two-level k-sum (weight gradients) gives the product, with beta, a NaN C
    under beta = 0 (never read), k a multiple of the block and not, and a k of one block."""
    _need(dev, dtype)
    rng = np.random.default_rng(5)
    bad = []
    cases = [(7, 13, 64 * 3, 1.0, 0.0, True), (5, 70, 200, 0.75, -1.25, False),
             (33, 17, 129, -1.0, 1.0, False), (3, 5, 65, 2.0, 0.5, False)]
    for m, n, k, alpha, beta, nan_c in cases:
        out, ref = _run(dev, dtype, m, n, k, ta, tb, alpha, beta, rng, nan_c=nan_c, k_block=64)
        err = _rel(out, ref)
        if not err <= TOL[dtype]:
            bad.append(((m, n, k), err))
    assert not bad, f"relative error above {TOL[dtype]}: {bad}"


def test_gemm_k_blocks_sum_more_exactly(dev):
    """A float32 sum over k = 4096 rows, two-level (blocks of 64), is closer to float64 than the
    one-level sum: the reason weight gradients use it."""
    m, n, k = 8, 64, 4096
    errs = []
    for k_block in (0, 64):
        out, ref = _run(dev, np.float32, m, n, k, True, False, 1.0, 0.0,
                        np.random.default_rng(7), k_block=k_block)
        errs.append(float(np.abs(out - ref).max()))
    assert errs[1] < 0.6 * errs[0], errs


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "NT", "TN", "TT"])
def test_gemm_shapes(dev, dtype, ta, tb):
    _need(dev, dtype)
    rng = np.random.default_rng(1)
    bad = []
    for i, (m, n, k) in enumerate(SHAPES):
        alpha, beta = (1.0, 0.0) if i % 3 == 0 else (0.75, -1.25)
        out, ref = _run(dev, dtype, m, n, k, ta, tb, alpha, beta, rng)
        err = _rel(out, ref)
        if not err <= TOL[dtype]:
            bad.append(((m, n, k), err))
    assert not bad, f"relative error above {TOL[dtype]}: {bad}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "NT", "TN", "TT"])
def test_beta_zero_ignores_nan(dev, dtype, ta, tb):
    _need(dev, dtype)
    rng = np.random.default_rng(2)
    for m, n, k in [(33, 65, 17), (1, 1, 1), (70, 40, 0)]:
        out, ref = _run(dev, dtype, m, n, k, ta, tb, 1.5, 0.0, rng, nan_c=True)
        assert np.isfinite(out).all()
        assert _rel(out, ref) <= TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_empty_sizes(dev, dtype):
    _need(dev, dtype)
    q = dev.queue
    C0 = np.arange(12, dtype=dtype).reshape(3, 4)
    c = _dev_array(q, C0)
    before = programs.launch_count()
    gemm(dev, dtype, 0, 4, 5, None, None, c)
    gemm(dev, dtype, 3, 0, 5, None, None, c)
    gemm(dev, dtype, 3, 4, 5, None, None, c, batch=0)
    assert programs.launch_count() == before
    np.testing.assert_array_equal(c.get(), C0)
    gemm(dev, dtype, 3, 4, 0, None, None, c, beta=2.0)  # k == 0: C = beta * C
    np.testing.assert_array_equal(c.get(), 2 * C0)
    c = _dev_array(q, np.full((3, 4), np.nan, dtype))
    gemm(dev, dtype, 3, 4, 0, None, None, c, trans_b=True)  # beta == 0: C = 0
    np.testing.assert_array_equal(c.get(), np.zeros((3, 4), dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "NT", "TN", "TT"])
def test_offsets_leading_dims_batch(dev, dtype, ta, tb):
    """Sub-matrices of larger buffers, with offsets, padded leading dimensions and batch strides;
    A is passed as an Array view with its own offset, B and C as plain Buffers."""
    _need(dev, dtype)
    rng = np.random.default_rng(3)
    q = dev.queue
    m, n, k, batch = 37, 45, 29, 3
    a_rows, a_cols = (k, m) if ta else (m, k)
    b_rows, b_cols = (n, k) if tb else (k, n)
    lda, ldb, ldc = a_cols + 3, b_cols + 5, n + 2
    a_off, b_off, c_off = 7, 11, 5
    sa, sb, sc = a_rows * lda + 13, b_rows * ldb + 1, m * ldc + 9
    big_a = rng.standard_normal(a_off + batch * sa + 20).astype(dtype)
    big_b = rng.standard_normal(b_off + batch * sb).astype(dtype)
    big_c = rng.standard_normal(c_off + batch * sc + 4).astype(dtype)
    view_pad = 4  # the Array view starts 4 elements into its buffer
    a_arr = cla.to_device(q, big_a)[view_pad:]
    b_buf = cla.to_device(q, big_b).base_data
    c_arr = cla.to_device(q, big_c)
    alpha, beta = 0.5, 1.5
    gemm(dev, dtype, m, n, k, a_arr, b_buf, c_arr.base_data, trans_a=ta, trans_b=tb,
         alpha=alpha, beta=beta, a_offset=a_off - view_pad, lda=lda, b_offset=b_off, ldb=ldb,
         c_offset=c_off, ldc=ldc, batch=batch, stride_a=sa, stride_b=sb, stride_c=sc)
    got = c_arr.get()
    expect = big_c.astype(np.float64).copy()
    for i in range(batch):
        A = big_a[a_off + i * sa:][: a_rows * lda].reshape(a_rows, lda)[:, :a_cols]
        B = big_b[b_off + i * sb:][: b_rows * ldb].reshape(b_rows, ldb)[:, :b_cols]
        C = big_c[c_off + i * sc:][: m * ldc].reshape(m, ldc)[:, :n].astype(np.float64)
        ref = alpha * (_op(A, ta).astype(np.float64) @ _op(B, tb).astype(np.float64)) + beta * C
        view = expect[c_off + i * sc:][: m * ldc].reshape(m, ldc)
        view[:, :n] = ref
    # padding between rows and matrices must be untouched
    assert _rel(got, expect) <= TOL[dtype]
    mask = np.ones(big_c.size, bool)
    for i in range(batch):
        for r in range(m):
            start = c_off + i * sc + r * ldc
            mask[start:start + n] = False
    np.testing.assert_array_equal(got[mask], big_c[mask])


PACKINGS = [(False, False), (True, True), (False, True), (True, False)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("pack", PACKINGS, ids=["direct", "packAB", "packB", "packA"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "NT", "TN", "TT"])
def test_every_path(dev, dtype, pack, ta, tb, monkeypatch):
    """Each way of running a product (direct kernels, one or both operands packed into tile
    panels first) on awkward shapes; large products pick a path by size, small ones are forced."""
    _need(dev, dtype)
    monkeypatch.setattr(gemm_module, "_FORCE_PACK", pack)
    rng = np.random.default_rng(8)
    for m, n, k in [(1, 1, 1), (7, 33, 257), (127, 129, 13), (33, 1, 64), (65, 63, 1), (2, 3, 40)]:
        for alpha, beta, nan_c in ((1.0, 0.0, True), (0.75, -1.25, False)):
            out, ref = _run(dev, dtype, m, n, k, ta, tb, alpha, beta, rng, nan_c=nan_c)
            assert _rel(out, ref) <= TOL[dtype], (m, n, k)


def _sixteen_bit(values, code):
    """``(stored, exact)``: ``values`` (float32) rounded to the 16-bit storage ``code``
    (``"f16"``, ``"bf16"``) as the array an op keeps (bfloat16 as its bits in the storage dtype
    pyrnn_cl accepts, with or without ml_dtypes), and their exact values in float64."""
    if code == "f16":
        stored = values.astype(np.float16)
        return stored, stored.astype(np.float64)
    bits = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)   # truncated
    exact = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    bf16 = next(dt for dt, (c, _) in STORAGE_DTYPES.items() if c == 4)
    return bits.view(bf16), exact


@pytest.mark.parametrize("code", ["f16", "bf16"])
@pytest.mark.parametrize("pack", PACKINGS, ids=["direct", "packAB", "packB", "packA"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "NT", "TN", "TT"])
def test_every_path_16bit_b(dev, code, pack, ta, tb, monkeypatch):
    """B stored in 16 bits (a half-precision weight) in a float32 product: every path reads it
    as stored (converted on load, GEMM_QS) and gives the product of its exact values, with an
    element offset, a padded leading dimension, k-blocks and a batch sharing B."""
    monkeypatch.setattr(gemm_module, "_FORCE_PACK", pack)
    rng = np.random.default_rng(10)
    q = dev.queue
    for m, n, k, k_block, batch in [(1, 1, 1, 0, 1), (7, 33, 257, 0, 1), (127, 129, 13, 0, 1),
                                    (33, 1, 64, 0, 1), (5, 70, 200, 64, 1), (21, 35, 18, 0, 3)]:
        b_rows, b_cols = (n, k) if tb else (k, n)
        ldb, off = b_cols + 3, 5
        A = rng.standard_normal((batch,) + ((k, m) if ta else (m, k))).astype(np.float32)
        stored, exact = _sixteen_bit(rng.standard_normal(off + b_rows * ldb).astype(np.float32),
                                     code)
        c = cla.to_device(q, np.full((batch, m, n), np.nan, np.float32))
        gemm(dev, np.float32, m, n, k, _dev_array(q, A), cla.to_device(q, stored), c,
             trans_a=ta, trans_b=tb, b_offset=off, ldb=ldb, batch=batch,
             stride_a=A[0].size, stride_c=m * n, k_block=k_block, alpha=0.5)
        B = exact[off:].reshape(b_rows, ldb)[:, :b_cols]
        for i in range(batch):
            ref = 0.5 * (_op(A[i], ta).astype(np.float64) @ _op(B, tb))
            assert _rel(c.get()[i], ref) <= TOL[np.float32], (m, n, k, i)


def test_16bit_b_only_into_float32(dev):
    """A 16-bit B in a float64 product is refused by name, not read as float64."""
    _need(dev, np.float64)
    q = dev.queue
    a = cla.zeros(q, (4, 4), np.float64)
    with pytest.raises(TypeError, match="b has dtype float16"):
        gemm(dev, np.float64, 4, 4, 4, a, cla.zeros(q, (4, 4), np.float16), a)


@pytest.mark.parametrize("pack", PACKINGS, ids=["direct", "packAB", "packB", "packA"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "NT", "TN", "TT"])
def test_every_path_batched(dev, pack, ta, tb, monkeypatch):
    """Batched products through each path, with padded leading dimensions; one operand is
    shared by every batch entry (batch stride 0), A in one call and B in the other."""
    monkeypatch.setattr(gemm_module, "_FORCE_PACK", pack)
    rng = np.random.default_rng(9)
    q = dev.queue
    m, n, k, batch = 21, 35, 18, 3
    a_rows, a_cols = (k, m) if ta else (m, k)
    b_rows, b_cols = (n, k) if tb else (k, n)
    lda, ldb = a_cols + 2, b_cols + 3
    for shared in ("a", "b"):
        As = rng.standard_normal((1 if shared == "a" else batch, a_rows, lda)).astype(np.float32)
        Bs = rng.standard_normal((1 if shared == "b" else batch, b_rows, ldb)).astype(np.float32)
        c = cla.zeros(q, (batch, m, n), np.float32)
        gemm(dev, np.float32, m, n, k, _dev_array(q, As), _dev_array(q, Bs), c, trans_a=ta,
             trans_b=tb, lda=lda, ldb=ldb, batch=batch,
             stride_a=0 if shared == "a" else a_rows * lda,
             stride_b=0 if shared == "b" else b_rows * ldb, stride_c=m * n)
        ref = np.stack([
            _op(As[i % len(As)][:, :a_cols], ta).astype(np.float64)
            @ _op(Bs[i % len(Bs)][:, :b_cols], tb) for i in range(batch)
        ])
        assert _rel(c.get(), ref) <= 1e-5, shared


def test_large_products_pick_packing(dev):
    """A product above the packing thresholds runs a pack kernel per packed operand, then the
    multiply; below them, one kernel."""
    rng = np.random.default_rng(10)
    q = dev.queue
    m, n, k = 200, 160, 150
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((n, k)).astype(np.float32)
    c = cla.zeros(q, (m, n), np.float32)
    before = programs.launch_count()
    gemm(dev, np.float32, m, n, k, _dev_array(q, A), _dev_array(q, B), c, trans_b=True)
    launches = programs.launch_count() - before
    _, host = gemm_module._gemm_config(dev, 1)
    pack_p, pack_q = gemm_module._choose_packing(host, m, n, k, 1, False, True)
    if _tiled(dev):
        assert launches == 1        # the tiled kernel reads A and B as stored
    else:
        assert launches == 1 + pack_p + pack_q
        if m * n * k >= host["GEMM_PACK_MIN_NT"] and m >= host["GEMM_PACK_MIN_M"]:
            assert pack_q
    assert _rel(c.get(), A.astype(np.float64) @ B.T) <= 1e-5


def test_packing_thresholds_per_orientation():
    """NN, TN and TT products are packed from GEMM_PACK_MIN multiply-adds, NT products (whose
    unpacked kernel is the slower dot kernel) from GEMM_PACK_MIN_NT and half the rows; A only
    where it is strided along k (TN, TT) and n reaches GEMM_PACK_MIN_M."""
    host = {"GEMM_PACK_MIN": 1 << 28, "GEMM_PACK_MIN_NT": 1 << 22, "GEMM_PACK_MIN_M": 128,
            "GEMM_TN": 64, "GEMM_VW": 16, "GEMM_DVW": 16, "GEMM_PACK_EDGE": 1}
    choose = gemm_module._choose_packing
    small, large = (512, 128, 800), (1024, 512, 800)       # 5.2e7 and 4.2e8 multiply-adds
    assert choose(host, *small, 1, True, False) == (False, False)     # TN: a weight gradient
    assert choose(host, *small, 1, False, False) == (False, False)    # NN
    assert choose(host, *small, 1, False, True) == (False, True)      # NT: packed Q
    assert choose(host, *large, 1, True, False) == (True, True)
    assert choose(host, *large, 1, False, False) == (False, True)
    assert choose(host, 100, 512, 128, 1, False, True) == (False, True)   # NT from m >= 64
    assert choose(host, 60, 1024, 128, 1, False, True) == (False, False)
    assert choose(host, *small, 8, True, False) == (True, True)       # the batch counts
    assert choose(host, 800, 512, 64, 1, True, True) == (False, False)    # TT below the bar
    # a Q of few values is packed whatever the size: NT over k < GEMM_DVW (x W^T of a layer
    # with few inputs), NN with n < GEMM_TN columns (its dx), from as many rows as above
    assert choose(host, 100, 512, 15, 1, False, True) == (False, True)
    assert choose(host, 100, 512, 16, 1, False, True) == (False, False)
    assert choose(host, 800, 63, 512, 1, False, False) == (False, True)
    assert choose(host, 800, 64, 512, 1, False, False) == (False, False)
    assert choose(host, 100, 8, 512, 1, False, False) == (False, False)
    assert choose(host, 60, 512, 1, 1, False, True) == (False, False)
    # a last column tile with a vector crossing n (n % GEMM_VW != 0), from twice those rows:
    # the weight gradients of H = 100 units; a whole-vector edge (n = 96) stays unpacked
    assert choose(host, 400, 100, 700, 1, True, False) == (False, True)
    assert choose(host, 800, 300, 400, 1, False, False) == (False, True)
    assert choose(host, 400, 96, 700, 1, True, False) == (False, False)
    assert choose(host, 255, 100, 700, 1, True, False) == (False, False)
    assert choose(host, 400, 100, 16, 1, False, True) == (False, False)   # NT: the dot kernel
    assert choose(dict(host, GEMM_PACK_EDGE=0), 400, 100, 700, 1, True, False) == (False, False)


@pytest.mark.parametrize("ta", [True, False], ids=["TN", "NN"])
def test_few_columns_run_transposed(dev, ta, monkeypatch):
    """TN and NN products with fewer columns than one tile (GEMM_TN) but many rows compute
    C^T = op(B)^T op(A)^T, so the vectors run along m: TN in one launch reading A as stored, NN
    (below half a tile, from GEMM_PACK_MIN_M rows) packing A first; correct with a batch, a
    bias, beta over NaN and offsets, also on an out-of-order queue (the pack, then the
    product, chained by events)."""
    if _tiled(dev):
        pytest.skip("the tiled kernel (GPUs) reads every operand through its strides")
    _, host = gemm_module._gemm_config(dev, 1)
    tn = host["GEMM_TN"]
    rng = np.random.default_rng(13)
    ooo = _out_of_order(dev)
    queues = [(dev, dev.queue)] + ([(ooo, ooo.queue)] if ooo is not None else [])
    m, k, batch = max(tn, host["GEMM_PACK_MIN_M"]) + 37, 29, 2
    shapes = []         # (rows, cols) of each product kernel's output D
    real_launch = gemm_module._launch
    monkeypatch.setattr(gemm_module, "_launch", lambda prog, code, queue, host, name, args, *r: (
        shapes.append(args[:2]), real_launch(prog, code, queue, host, name, args, *r))[1])
    for device, q in queues:
        for n in (1, 3, tn // 2 - 1, tn // 2):
            A = rng.standard_normal((batch,) + ((k, m) if ta else (m, k))).astype(np.float32)
            B = rng.standard_normal((batch, k, n)).astype(np.float32)
            bias = rng.standard_normal(n + 2).astype(np.float32)
            for beta in (0.0, 0.5):
                C0 = (rng.standard_normal((batch, m, n)) if beta
                      else np.full((batch, m, n), np.nan)).astype(np.float32)
                c = _dev_array(q, C0)
                a, b, bb = _dev_array(q, A), _dev_array(q, B), _dev_array(q, bias)
                q.finish()
                before = programs.launch_count()
                gemm(device, np.float32, m, n, k, a, b, c, trans_a=ta, beta=beta, batch=batch,
                     stride_a=A[0].size, stride_b=B[0].size, stride_c=m * n, bias=bb,
                     bias_offset=2)
                assert programs.launch_count() - before == (1 if ta else 2), n
                assert shapes[-1] == (n, m)       # D = C^T
                q.finish()
                ref = np.stack([_op(A[i], ta).astype(np.float64) @ B[i] for i in range(batch)])
                ref += bias[2:].astype(np.float64) + beta * np.nan_to_num(C0.astype(np.float64))
                out = c.get()[: batch * m * n].reshape(batch, m, n)
                assert _rel(out, ref) <= 1e-5, (n, beta)


@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "NT", "TN", "TT"])
def test_batch_broadcast_a(dev, ta, tb):
    """stride_a = 0: one A for every batch entry (e.g. shared weights)."""
    rng = np.random.default_rng(4)
    q = dev.queue
    m, n, k, batch = 19, 23, 35, 4
    A = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    Bs = rng.standard_normal((batch,) + ((n, k) if tb else (k, n))).astype(np.float32)
    c = cla.zeros(q, (batch, m, n), np.float32)
    gemm(dev, np.float32, m, n, k, _dev_array(q, A), _dev_array(q, Bs), c, trans_a=ta,
         trans_b=tb, batch=batch, stride_a=0, stride_b=Bs[0].size, stride_c=m * n)
    ref = np.stack([_op(A, ta).astype(np.float64) @ _op(B, tb) for B in Bs])
    assert _rel(c.get(), ref) <= 1e-5


def test_config_follows_the_tuning_values():
    """_gemm_config keeps what it derives per set of tuning values: a trial's values (the
    tuner's candidates) give their own defines, and the device's come back after it."""
    from pyrnn_cl import tuning
    try:
        dev = get_device()
    except DeviceNotFoundError as exc:
        pytest.skip(str(exc))
    base = gemm_module._gemm_config(dev, 1)
    assert gemm_module._gemm_config(dev, 1) is base         # kept
    values = dict(dev.tuning("gemm"))
    other = 1 if values["GEMM_DTM"] != 1 else 2
    with tuning.trial(dev, "gemm", dict(values, GEMM_DTM=other)):
        assert gemm_module._gemm_config(dev, 1)[0]["GEMM_DTM"] == other
    assert gemm_module._gemm_config(dev, 1) is base


@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "NT", "TN", "TT"])
def test_other_tile_configs(dev, ta, tb, monkeypatch):
    """The kernels are correct for tunables other than the defaults (scalar and narrow vectors,
    odd tiles and pack chunks), on every path."""
    rng = np.random.default_rng(5)
    for tuning in (
        {"GEMM_TM": 3, "GEMM_TN": 8, "GEMM_VW": 4, "GEMM_DTM": 3, "GEMM_DTN": 2, "GEMM_DVW": 4,
         "GEMM_WG": 3, "GEMM_PACK_KC": 5, "GEMM_PACK_WG": 2},
        {"GEMM_TM": 1, "GEMM_TN": 1, "GEMM_VW": 1, "GEMM_DTM": 1, "GEMM_DTN": 1, "GEMM_DVW": 1,
         "GEMM_FMA": 0, "GEMM_WG": 1, "GEMM_PACK_KC": 1, "GEMM_PACK_WG": 1},
        # what an AVX2 CPU derives (tuning.cpu_gemm_tiles for 16 registers)
        {"GEMM_TM": 6, "GEMM_TN": 16, "GEMM_VW": 8, "GEMM_DTM": 3, "GEMM_DTN": 3, "GEMM_DVW": 8,
         "GEMM_PACK_KC": 8},
    ):
        other = Device(dev.cl_device, context=dev.context, queue=dev.queue, info=dev.info)
        monkeypatch.setattr(other, "tuning", lambda family, t=tuning: dict(dev.tuning(family), **t))
        for pack in PACKINGS:
            monkeypatch.setattr(gemm_module, "_FORCE_PACK", pack)
            for m, n, k in [(1, 1, 1), (13, 17, 19), (40, 9, 33)]:
                out, ref = _run(other, np.float32, m, n, k, ta, tb, 1.25, 0.5, rng)
                assert _rel(out, ref) <= 1e-5, (tuning, pack, m, n, k)


@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "NT", "TN", "TT"])
def test_every_pack_mode(dev, ta, tb, monkeypatch):
    """The pack kernels' launch modes for operands stored along k (each work-item streaming
    GEMM_PACK_KC rows over all of k) and along the rows (tiles fast) pack right: row counts
    that are not multiples of the tile (zero rows after them), k with a tail after its last
    square block, padded leading dimensions and a batch. Tiles of 8 with 4-wide squares, so
    that both panels can stream; the modes the packs took are recorded and must be the ones
    their strides call for. (The third mode, chunks of k, runs where GEMM_PACK_KC is no vector
    width: test_other_tile_configs.)"""
    tuning = {"GEMM_TM": 8, "GEMM_TN": 8, "GEMM_VW": 4, "GEMM_PACK_KC": 4, "GEMM_LOCAL": 0}
    other = Device(dev.cl_device, context=dev.context, queue=dev.queue, info=dev.info)
    monkeypatch.setattr(other, "tuning", lambda family: dict(dev.tuning(family), **tuning))
    monkeypatch.setattr(gemm_module, "_FORCE_PACK", (True, True))
    modes = set()
    real_set_args = gemm_module._set_args

    def spy(prog, name, code, *args):
        if "pack" in name:
            modes.add(args[2])
        return real_set_args(prog, name, code, *args)

    monkeypatch.setattr(gemm_module, "_set_args", spy)
    rng = np.random.default_rng(10)
    for m, n, k in [(13, 21, 19), (8, 16, 8), (3, 5, 2), (17, 9, 33)]:
        out, ref = _run(other, np.float32, m, n, k, ta, tb, 1.0, 0.0, rng)
        assert _rel(out, ref) <= 1e-5, (m, n, k)
    q = dev.queue
    m, n, k, batch = 11, 19, 23, 2
    a_rows, a_cols = (k, m) if ta else (m, k)
    b_rows, b_cols = (n, k) if tb else (k, n)
    lda, ldb = a_cols + 3, b_cols + 1
    As = rng.standard_normal((batch, a_rows, lda)).astype(np.float32)
    Bs = rng.standard_normal((batch, b_rows, ldb)).astype(np.float32)
    c = cla.zeros(q, (batch, m, n), np.float32)
    gemm(other, np.float32, m, n, k, _dev_array(q, As), _dev_array(q, Bs), c, trans_a=ta,
         trans_b=tb, lda=lda, ldb=ldb, batch=batch, stride_a=a_rows * lda,
         stride_b=b_rows * ldb, stride_c=m * n)
    ref = np.stack([_op(As[i][:, :a_cols], ta).astype(np.float64) @ _op(Bs[i][:, :b_cols], tb)
                    for i in range(batch)])
    assert _rel(c.get(), ref) <= 1e-5
    # op(A) is stored along k unless trans_a, op(B)^T unless not trans_b: the streamed mode
    # for the operand whose rows run along k, tiles fast for the other
    expect = {gemm_module._PACK_ROWS if not ta or tb else None,
              gemm_module._PACK_TILES_FAST if ta or not tb else None} - {None}
    assert modes == expect, (modes, expect)


def test_out_of_order_queue(dev, monkeypatch):
    """On an out-of-order queue the packs, the multiply and the next call's packs (which reuse
    the packing buffer) are chained by events; ``wait_for`` is honoured."""
    ooo = _out_of_order(dev)
    if ooo is None:
        pytest.skip("device has no out-of-order queues")
    queue = ooo.queue
    monkeypatch.setattr(gemm_module, "_FORCE_PACK", (True, True))
    rng = np.random.default_rng(11)
    m, n, k = 45, 70, 33
    results = []
    for _i in range(4):
        A = rng.standard_normal((k, m)).astype(np.float32)
        B = rng.standard_normal((n, k)).astype(np.float32)
        a = cla.to_device(queue, A)
        b = cla.to_device(queue, B)
        c = cla.empty(queue, (m, n), np.float32)
        queue.finish()
        gemm(ooo, np.float32, m, n, k, a, b, c, trans_a=True, trans_b=True,
             wait_for=[cl.enqueue_marker(queue)])
        results.append((c, A.T.astype(np.float64) @ B.T))
    queue.finish()
    for c, ref in results:
        assert _rel(c.get(), ref) <= 1e-5


def test_one_launch_per_call(dev, monkeypatch):
    monkeypatch.setattr(gemm_module, "_FORCE_PACK", (False, False))
    q = dev.queue
    a = cla.zeros(q, (64, 64), np.float32)
    c = cla.zeros(q, (64, 64), np.float32)
    gemm(dev, np.float32, 64, 64, 64, a, a, c)
    before = programs.launch_count()
    for ta, tb in TRANS:
        gemm(dev, np.float32, 64, 64, 64, a, a, c, trans_a=ta, trans_b=tb, batch=1)
    sum_rows(dev, np.float32, 64, 64, a, c)
    assert programs.launch_count() == before + 5


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("pack", PACKINGS, ids=["direct", "packAB", "packB", "packA"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "NT", "TN", "TT"])
def test_bias_every_path(dev, dtype, pack, ta, tb, monkeypatch):
    """``bias``: ``C = alpha op(A) op(B) + beta C + bias[j]`` through each kernel path (the TT
    path computes C^T, so the bias runs along the rows of its output), with a bias offset, a
    batch sharing one bias, and k = 0 (C = beta C + bias)."""
    _need(dev, dtype)
    monkeypatch.setattr(gemm_module, "_FORCE_PACK", pack)
    rng = np.random.default_rng(10)
    q = dev.queue
    for m, n, k, batch in [(1, 1, 1, 1), (7, 33, 257, 1), (127, 129, 13, 2), (33, 1, 64, 1),
                           (65, 63, 1, 1), (2, 3, 40, 3), (5, 19, 0, 1), (64, 64, 16, 1)]:
        for alpha, beta, nan_c in ((1.0, 0.0, True), (0.75, -1.25, False)):
            A = rng.standard_normal((batch,) + ((k, m) if ta else (m, k))).astype(dtype)
            B = rng.standard_normal((batch,) + ((n, k) if tb else (k, n))).astype(dtype)
            C0 = (np.full((batch, m, n), np.nan, dtype) if nan_c
                  else rng.standard_normal((batch, m, n)).astype(dtype))
            bias = rng.standard_normal(n + 5).astype(dtype)
            c = _dev_array(q, C0)
            gemm(dev, dtype, m, n, k, _dev_array(q, A), _dev_array(q, B), c, trans_a=ta,
                 trans_b=tb, alpha=alpha, beta=beta, batch=batch, stride_a=A[0].size,
                 stride_b=B[0].size, stride_c=m * n, bias=_dev_array(q, bias), bias_offset=5)
            ref = np.stack([alpha * (_op(A[i], ta).astype(np.float64) @ _op(B[i], tb))
                            for i in range(batch)]) + bias[5:].astype(np.float64)
            if beta != 0:
                ref += beta * C0.astype(np.float64)
            out = c.get()[: batch * m * n].reshape(batch, m, n)
            assert np.isfinite(out).all(), (m, n, k)
            assert _rel(out, ref) <= TOL[dtype], (m, n, k, batch)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "NT", "TN", "TT"])
def test_edge_sizes_batch_bias(dev, dtype, ta, tb):
    """Sizes 1, 3, 33, 257 and 513 (one past a multiple of every block and chunk) in each role,
    batched (2, with padded strides), beta != 0 and beta = 0 over NaN, a bias, k = 0 and
    k-blocks; on the tiled kernel (the GPU path) with edge blocks in m, n and k at once."""
    _need(dev, dtype)
    rng = np.random.default_rng(12)
    q = dev.queue
    for m, n, k, k_block in [(513, 3, 33, 0), (3, 513, 257, 64), (33, 257, 513, 0),
                             (257, 33, 3, 0), (1, 1, 1, 0), (513, 1, 0, 0), (1, 257, 33, 16)]:
        for alpha, beta in ((0.5, 2.0), (1.0, 0.0)):
            batch = 2
            A = rng.standard_normal((batch,) + ((k, m) if ta else (m, k))).astype(dtype)
            B = rng.standard_normal((batch,) + ((n, k) if tb else (k, n))).astype(dtype)
            C0 = (rng.standard_normal((batch, m, n)) if beta else
                  np.full((batch, m, n), np.nan)).astype(dtype)
            bias = rng.standard_normal(n).astype(dtype)
            c = _dev_array(q, C0)
            gemm(dev, dtype, m, n, k, _dev_array(q, A), _dev_array(q, B), c, trans_a=ta,
                 trans_b=tb, alpha=alpha, beta=beta, batch=batch, stride_a=A[0].size,
                 stride_b=B[0].size, stride_c=m * n, bias=_dev_array(q, bias), k_block=k_block)
            ref = np.stack([alpha * (_op(A[i], ta).astype(np.float64) @ _op(B[i], tb))
                            for i in range(batch)]) + bias.astype(np.float64)
            if beta:
                ref += beta * C0.astype(np.float64)
            out = c.get()[: batch * m * n].reshape(batch, m, n)
            assert np.isfinite(out).all(), (m, n, k)
            assert _rel(out, ref) <= TOL[dtype], (m, n, k, alpha, beta)


def test_tiled_kernel_runs_where_forced(dev):
    """GEMM_LOCAL = 1 runs the tiled kernel (its tiles fit these devices), one launch per
    product in every transposition, also at a size the other kernels pack operands for."""
    assert _tiled(dev) == bool(dev.tuning("gemm")["GEMM_LOCAL"])
    if not _tiled(dev):
        return
    q = dev.queue
    a = cla.zeros(q, (200, 200), np.float32)
    for ta, tb in TRANS:
        before = programs.launch_count()
        gemm(dev, np.float32, 200, 200, 200, a, a, a, trans_a=ta, trans_b=tb)
        assert programs.launch_count() == before + 1


def test_argument_errors(dev):
    q = dev.queue
    a = cla.zeros(q, (8, 8), np.float32)
    with pytest.raises(ShapeError):
        gemm(dev, np.float32, 9, 8, 8, a, a, a)  # A and C too small
    with pytest.raises(ShapeError):
        gemm(dev, np.float32, 4, 4, 4, a, a, a, lda=3)  # lda below the row length
    with pytest.raises(ShapeError):
        gemm(dev, np.float32, 2, 2, 2, a, a, a, batch=2, stride_a=4, stride_b=4, stride_c=0)
    with pytest.raises(TypeError):
        gemm(dev, np.float16, 2, 2, 2, a, a, a)
    with pytest.raises(TypeError):
        gemm(dev, np.float64, 2, 2, 2, a, a, a)  # Array dtype differs from dtype
    with pytest.raises(ShapeError):
        sum_rows(dev, np.float32, 9, 8, a, a)
    with pytest.raises(ShapeError, match="bias"):
        gemm(dev, np.float32, 2, 8, 2, a, a, a, bias=a, bias_offset=60)  # bias runs past the end
    with pytest.raises(TypeError, match="bias"):
        gemm(dev, np.float32, 2, 2, 2, a, a, a, bias=cla.zeros(q, (2,), np.float64))


# ---- sum_rows --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_sum_rows(dev, dtype):
    _need(dev, dtype)
    rng = np.random.default_rng(6)
    q = dev.queue
    for rows, cols in [(1, 1), (3, 5), (1600, 2048), (7, 33), (300, 17), (5, 16), (64, 100)]:
        for beta in (0.0, 0.5):
            A = rng.standard_normal((rows, cols)).astype(dtype)
            O0 = (np.full(cols, np.nan, dtype) if beta == 0
                  else rng.standard_normal(cols).astype(dtype))
            out = _dev_array(q, O0)
            sum_rows(dev, dtype, rows, cols, _dev_array(q, A), out, beta=beta)
            ref = A.astype(np.float64).sum(0) + (beta * O0 if beta else 0)
            assert _rel(out.get(), ref) <= TOL[dtype], (rows, cols, beta)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_sum_rows_offsets_batch_empty(dev, dtype):
    _need(dev, dtype)
    rng = np.random.default_rng(7)
    q = dev.queue
    # 45 rows: one pass; 301 rows: partial sums of row chunks first (the last chunk short),
    # 67 columns: one full strip of 64 and a scalar edge
    for rows, cols in ((45, 37), (301, 67)):
        lda, batch = cols + 4, 3
        a_off, o_off, sa, so = 3, 2, rows * lda + 6, cols + 3
        big_a = rng.standard_normal(a_off + batch * sa).astype(dtype)
        big_o = rng.standard_normal(o_off + batch * so).astype(dtype)
        o = _dev_array(q, big_o)
        sum_rows(dev, dtype, rows, cols, _dev_array(q, big_a), o, a_offset=a_off, lda=lda,
                 out_offset=o_off, beta=1.0, batch=batch, stride_a=sa, stride_out=so)
        expect = big_o.astype(np.float64).copy()
        for i in range(batch):
            A = big_a[a_off + i * sa:][: rows * lda].reshape(rows, lda)[:, :cols]
            expect[o_off + i * so:][:cols] += A.astype(np.float64).sum(0)
        assert _rel(o.get(), expect) <= TOL[dtype], rows
    # rows == 0: out = beta * out; cols == 0: nothing
    o = _dev_array(q, np.arange(5, dtype=dtype))
    sum_rows(dev, dtype, 0, 5, None, o, beta=3.0)
    np.testing.assert_array_equal(o.get(), 3 * np.arange(5, dtype=dtype))
    sum_rows(dev, dtype, 0, 5, None, o)
    np.testing.assert_array_equal(o.get(), np.zeros(5, dtype))
    sum_rows(dev, dtype, 4, 0, None, o)


def test_sources_compile_with_defaults(dev):
    """Each .cl file builds with no tunables (its #ifndef defaults) in both dtypes."""
    for dtype in DTYPES:
        try:
            code = 1 if dev.check_dtype(dtype) == np.float32 else 2
        except UnsupportedError:
            continue
        for name, kernels in (("gemm.cl", ("pyrnn_gemm_outer", "pyrnn_gemm_dot")),
                              ("reduce.cl", ("pyrnn_sum_rows",))):
            prog = programs.get_program(dev, name, {"PYRNN_DTYPE": code})
            for kernel in kernels:
                prog.kernel(kernel)
