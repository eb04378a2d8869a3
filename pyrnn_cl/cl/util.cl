/* util.cl -- small element-wise kernels used around the recurrence: bias broadcast, strided copies
 * (layout changes such as batch-major <-> time-major, slices of layer states) and activations.
 * Sizes, offsets and strides are arguments (elements). pyrnn_add_rows, pyrnn_act_map and
 * pyrnn_mul handle REC_VW consecutive elements per work-item (the host compiles this file with
 * the widest REC_VW dividing the row length: PoCL does not vectorise across work-items); pyrnn_copy3
 * moves one element per work-item.
 */
#include "common.h"

/* a[i][j] += b[j] for a row-major [rows][cols] a. Global size (cols / REC_VW, rows). */
__kernel void pyrnn_add_rows(__global real *a, const int cols, __global const real *b)
{
    const int j = get_global_id(0) * REC_VW;
    __global real *p = a + get_global_id(1) * (long)cols + j;
    STOREV(LOADV(p) + LOADV(b + j), p);
}

/* dst[i0][i1][i2] = alpha * src[i0][i1][i2] + beta * dst (beta == 0: dst not read), through
 * arbitrary element strides (a stride of 0 broadcasts). Global size (n2, n1, n0). */
__kernel void pyrnn_copy3(__global real *dst, const long d_off, const long ds0, const long ds1,
                          const long ds2, __global const real *src, const long s_off,
                          const long ss0, const long ss1, const long ss2, const real alpha,
                          const real beta)
{
    const long i2 = get_global_id(0), i1 = get_global_id(1), i0 = get_global_id(2);
    const long di = d_off + i0 * ds0 + i1 * ds1 + i2 * ds2;
    const real v = alpha * src[s_off + i0 * ss0 + i1 * ss1 + i2 * ss2];
    dst[di] = beta == 0 ? v : v + beta * dst[di];
}

/* y[i] = act(x[i]) with a run-time activation code (common.h). Global size (n / REC_VW). */
__kernel void pyrnn_act_map(__global real *y, __global const real *x, const int kind)
{
    const long i = get_global_id(0) * REC_VW;
    STOREV(pyrnn_act(kind, LOADV(x + i)), y + i);
}

/* y[i] = a[i] * b[i] (a Hadamard product). Global size (n / REC_VW). */
__kernel void pyrnn_mul(__global real *y, __global const real *a, __global const real *b)
{
    const long i = get_global_id(0) * REC_VW;
    STOREV(LOADV(a + i) * LOADV(b + i), y + i);
}
