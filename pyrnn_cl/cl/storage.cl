/* storage.cl -- conversions between a 16-bit storage dtype and float32, the engine's arithmetic
 * type for it (compiled with PYRNN_DTYPE 3 = float16 or 4 = bfloat16; common.h has the
 * conversions). An op that receives 16-bit arrays widens them to float32 on the device when it
 * starts and narrows its results when it ends (round to nearest even; NaN and infinities kept).
 *
 * n elements are converted by two launches: the *8 kernels, 8 consecutive elements per
 * work-item (global size n / 8), then the *1 kernels, one element per work-item, for the last
 * n % 8 (global size n % 8, from element `first`). Neither has a branch: a tail loop inside the
 * 8-wide kernel made Intel's CPU compiler 20x slower, and PoCL does not vectorise across
 * work-items. Offsets are in elements.
 */
#include "common.h"

#if PYRNN_DTYPE != 3 && PYRNN_DTYPE != 4
#error "storage.cl converts 16-bit storage: compile it with PYRNN_DTYPE 3 or 4"
#endif

/* dst[i] = (float)src[src_off + i] */
__kernel void pyrnn_widen8(__global const storage *src, const long src_off, __global float *dst)
{
    const size_t i = get_global_id(0);
    vstore8(STORAGE_LOAD8(i, src + src_off), i, dst);
}

__kernel void pyrnn_widen1(__global const storage *src, const long src_off, __global float *dst,
                           const long first)
{
    const long i = first + (long)get_global_id(0);
    dst[i] = STORAGE_LOAD(i, src + src_off);
}

/* dst[dst_off + i] = src[i] rounded to the storage type */
__kernel void pyrnn_narrow8(__global const float *src, __global storage *dst, const long dst_off)
{
    const size_t i = get_global_id(0);
    STORAGE_STORE8(vload8(i, src), i, dst + dst_off);
}

__kernel void pyrnn_narrow1(__global const float *src, __global storage *dst, const long dst_off,
                            const long first)
{
    const long i = first + (long)get_global_id(0);
    STORAGE_STORE(src[i], i, dst + dst_off);
}

/* dst[r * n + i] = (float)src[src_off + r * src_stride + i]: `runs` runs of n elements each,
 * src_stride apart in the source (e.g. one bias per direction of a cuDNN params buffer).
 * Global size (n, runs). */
__kernel void pyrnn_widen_runs(__global const storage *src, const long src_off,
                               const long src_stride, const int n, __global float *dst)
{
    const int i = get_global_id(0), r = get_global_id(1);
    dst[(long)r * n + i] = STORAGE_LOAD(src_off + r * src_stride + i, src);
}
