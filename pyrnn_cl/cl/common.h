/* common.h -- scalar/vector types, activations and their derivatives, shared by every kernel.
 *
 * Compile-time parameters (the #define block prepended by pyrnn_cl.sources):
 *   PYRNN_DTYPE   1 = float32, 2 = float64 (needs cl_khr_fp64), 3 = float16 storage,
 *                 4 = bfloat16 storage (pyrnn_cl.sources.STORAGE_DTYPES)
 *   REC_VW        vector width of the recurrence kernels (1, 2, 4, 8 or 16 hidden units per work-item)
 *
 * `real` is the arithmetic type, and for codes 1 and 2 also the storage type; `realV` is a vector of
 * REC_VW reals (or `real` when REC_VW is 1). Every activation below works on both, because OpenCL's
 * built-ins are overloaded on vectors.
 *
 * 16-bit storage (codes 3 and 4): `real` is float and `storage` the 16-bit container (half, or
 * ushort holding a bfloat16); STORAGE_LOAD(i, p) reads element i of a `__global storage *` as a
 * float, STORAGE_STORE(v, i, p) writes float v rounded to nearest even, and the 8-wide forms do 8
 * consecutive elements. half uses vload_half/vstore_half_rte, core OpenCL C since 1.0: no
 * cl_khr_fp16 and no half arithmetic. bfloat16 is the top 16 bits of a float: a load shifts them
 * back, a store rounds the low 16 bits away to nearest even, NaN kept a (quiet) NaN.
 */
#ifndef PYRNN_COMMON_H
#define PYRNN_COMMON_H

#ifndef PYRNN_DTYPE
#define PYRNN_DTYPE 1
#endif
#ifndef REC_VW
#define REC_VW 1            /* hidden units per work-item in the recurrence kernels */
#endif

/* Functions are `static inline`: bare `inline` is not safe on every OpenCL compiler. */
#define PYRNN_FUNC static inline

#if PYRNN_DTYPE == 2
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define PYRNN_REAL double
#else
#define PYRNN_REAL float
#endif
typedef PYRNN_REAL real;

#define PYRNN_CAT_(a, b) a##b
#define PYRNN_CAT(a, b) PYRNN_CAT_(a, b)

/* Reading 16-bit storage into float, whatever PYRNN_DTYPE is (the kernels that read 16-bit
 * weights as stored: pack.cl, gemm.cl's GEMM_QS), by storage code c (3 float16, 4 bfloat16):
 * PYRNN_S16_T(c) the container, PYRNN_S16_LOAD(c, i, p) element i of p as a float,
 * PYRNN_S16_LOADN(c, n, p) the n (2, 4, 8, 16) elements from p as a floatn. bfloat16 is the top
 * half of a float: its bits shifted back. */
#define PYRNN_S16_CAT_(a, b) a##b
#define PYRNN_S16_CAT(a, b) PYRNN_S16_CAT_(a, b)
#define PYRNN_S16_T_3 half
#define PYRNN_S16_T_4 ushort
#define PYRNN_S16_LOAD_3(i, p) vload_half((i), (p))
#define PYRNN_S16_LOAD_4(i, p) as_float(((uint)(p)[i]) << 16)
#define PYRNN_S16_LOADN_3(n, p) PYRNN_CAT(vload_half, n)(0, (p))
#define PYRNN_S16_LOADN_4(n, p) \
    PYRNN_CAT(as_float, n)(PYRNN_CAT(convert_uint, n)(PYRNN_CAT(vload, n)(0, (p))) << 16)
#define PYRNN_S16_T(c) PYRNN_S16_CAT(PYRNN_S16_T_, c)
#define PYRNN_S16_LOAD(c, i, p) PYRNN_S16_CAT(PYRNN_S16_LOAD_, c)(i, p)
#define PYRNN_S16_LOADN(c, n, p) PYRNN_S16_CAT(PYRNN_S16_LOADN_, c)(n, p)

#if PYRNN_DTYPE == 3
typedef half storage;
#define STORAGE_LOAD(i, p) PYRNN_S16_LOAD(3, i, p)
#define STORAGE_STORE(v, i, p) vstore_half_rte((v), (i), (p))
#define STORAGE_LOAD8(i, p) PYRNN_S16_LOADN(3, 8, (p) + 8 * (i))
#define STORAGE_STORE8(v, i, p) vstore_half8_rte((v), (i), (p))
#elif PYRNN_DTYPE == 4
typedef ushort storage;

/* bfloat16 bits of x, rounded to nearest even: add 0x7fff plus the lowest kept bit, truncate.
 * Infinities stay infinite, finite values past the largest bfloat16 round to infinity; a NaN
 * keeps its sign and top payload bits with the quiet bit set (rounding could carry it into
 * infinity). */
PYRNN_FUNC ushort float_to_bf16(float x)
{
    const uint u = as_uint(x);
    const uint rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (ushort)(isnan(x) ? ((u >> 16) | 0x40u) : rounded);
}
PYRNN_FUNC ushort8 float_to_bf16_8(float8 x)
{
    const uint8 u = as_uint8(x);
    const uint8 rounded = (u + (uint8)(0x7fffu) + ((u >> 16) & (uint8)(1u))) >> 16;
    return convert_ushort8(select(rounded, (u >> 16) | (uint8)(0x40u), isnan(x)));
}
#define STORAGE_LOAD(i, p) PYRNN_S16_LOAD(4, i, p)
#define STORAGE_STORE(v, i, p) ((p)[i] = float_to_bf16(v))
#define STORAGE_LOAD8(i, p) PYRNN_S16_LOADN(4, 8, (p) + 8 * (i))
#define STORAGE_STORE8(v, i, p) vstore8(float_to_bf16_8(v), (i), (p))
#endif


#if REC_VW == 1
typedef real realV;
#define LOADV(p) (*(p))
#define STOREV(v, p) (*(p) = (v))
#else
typedef PYRNN_CAT(PYRNN_REAL, REC_VW) realV;
#define LOADV(p) PYRNN_CAT(vload, REC_VW)(0, (p))
#define STOREV(v, p) PYRNN_CAT(vstore, REC_VW)((v), 0, (p))
#endif
/* select() needs an integer mask of the element size; scalars use the conditional operator. */
#if REC_VW == 1
#define VSELECT(a, b, c) ((c) ? (b) : (a))
#else
#define VSELECT(a, b, c) select((a), (b), (c))
#endif
#define VZERO ((realV)(0))
#define VONE ((realV)(1))

/* Activation codes (pyrnn_cl.cells.ACTIVATIONS). */
#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_TANH 2
#define ACT_SIGMOID 3
#define ACT_HARD_SIGMOID 4   /* clip(0.2 x + 0.5, 0, 1) */

/* NaN in, NaN out: fmax/clamp would silently turn NaN into a number. */
PYRNN_FUNC realV pyrnn_keep_nan(realV y, realV x) { return VSELECT(y, x, isnan(x)); }

PYRNN_FUNC realV pyrnn_sigmoid(realV x) { return VONE / (VONE + exp(-x)); }

/* tanh with exact saturation. OpenCL allows tanh a few ulp of error, and PoCL's float tanh stops
 * at 1 - 2^-24, so the derivative 1 - y^2 of a saturated unit would stay at 1.19e-7 instead of 0
 * and pass gradient on (times |x| ~ 1e6 in a weight gradient). From the first x whose correctly
 * rounded tanh is 1 (the smallest float/double x with tanh(x) >= 1 - 2^-25 / 1 - 2^-54, the
 * half-ulp point below 1, found with 60-digit arithmetic), y is +-1 exactly, as in PyTorch. */
#if PYRNN_DTYPE == 2
#define PYRNN_TANH_SATURATES 19.061547465398498
#else
#define PYRNN_TANH_SATURATES 9.010913848876953f
#endif
PYRNN_FUNC realV pyrnn_tanh(realV x)
{
    return VSELECT(tanh(x), copysign(VONE, x),
                   isgreaterequal(fabs(x), (realV)(PYRNN_TANH_SATURATES)));
}

/* y = act(x) */
PYRNN_FUNC realV pyrnn_act(int kind, realV x)
{
    switch (kind) {
    case ACT_RELU: return pyrnn_keep_nan(fmax(x, VZERO), x);
    case ACT_TANH: return pyrnn_tanh(x);
    case ACT_SIGMOID: return pyrnn_sigmoid(x);
    case ACT_HARD_SIGMOID:
        return pyrnn_keep_nan(clamp((realV)(0.2) * x + (realV)(0.5), VZERO, VONE), x);
    default: return x;
    }
}

/* act'(x) written in terms of the output y = act(x) (every activation here allows it), so backward
 * only needs the saved post-activation values. */
PYRNN_FUNC realV pyrnn_dact(int kind, realV y)
{
    switch (kind) {
    case ACT_RELU: return VSELECT(VZERO, VONE, isgreater(y, VZERO));
    case ACT_TANH: return VONE - y * y;
    case ACT_SIGMOID: return y * (VONE - y);
    case ACT_HARD_SIGMOID:
        return VSELECT(VZERO, (realV)(0.2), isgreater(y, VZERO) & isless(y, VONE));
    default: return VONE;
    }
}

#endif /* PYRNN_COMMON_H */
