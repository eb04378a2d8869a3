/* common.h -- scalar/vector types, activations and their derivatives, shared by every kernel.
 *
 * Compile-time parameters (the #define block prepended by pyrnn_cl.sources):
 *   PYRNN_DTYPE   1 = float32, 2 = float64 (needs cl_khr_fp64)
 *   REC_VW        vector width of the recurrence kernels (1, 2, 4, 8 or 16 hidden units per work-item)
 *
 * `real` is the storage and arithmetic type; `realV` is a vector of REC_VW reals (or `real` when REC_VW
 * is 1). Every activation below works on both, because OpenCL's built-ins are overloaded on vectors.
 */
#ifndef PYRNN_COMMON_H
#define PYRNN_COMMON_H

#ifndef PYRNN_DTYPE
#define PYRNN_DTYPE 1
#endif
#ifndef REC_VW
#define REC_VW 1            /* hidden units per work-item in the recurrence kernels */
#endif

#if PYRNN_DTYPE == 2
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define PYRNN_REAL double
#else
#define PYRNN_REAL float
#endif
typedef PYRNN_REAL real;

/* Functions are `static inline`: bare `inline` is not safe on every OpenCL compiler. */
#define PYRNN_FUNC static inline

#define PYRNN_CAT_(a, b) a##b
#define PYRNN_CAT(a, b) PYRNN_CAT_(a, b)

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
