/* selfcheck.cl: the smallest kernel pyrnn_cl builds, used by tests of the program layer
 * (build, disk cache, threads) and by `pyrnn-cl devices`-style smoke checks.
 *
 * y[i] = alpha * x[i] + y[i] for i < n, in the scalar type chosen by PYRNN_DTYPE
 * (1 = float, 2 = double). The global size may exceed n (rounded up to the local size).
 */

#ifndef PYRNN_DTYPE
#define PYRNN_DTYPE 1
#endif

#if PYRNN_DTYPE == 2
typedef double real_t;
#else
typedef float real_t;
#endif

/* SELFCHECK_SCALE multiplies alpha; a define that tests vary to check cache invalidation. */
#ifndef SELFCHECK_SCALE
#define SELFCHECK_SCALE 1
#endif

__kernel void pyrnn_axpy(const int n, const real_t alpha, __global const real_t *x,
                         __global real_t *y)
{
    const int i = (int)get_global_id(0);
    if (i < n) {
        y[i] = (real_t)SELFCHECK_SCALE * alpha * x[i] + y[i];
    }
}
