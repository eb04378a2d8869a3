/* storage.cl -- conversions between a 16-bit storage dtype and float32, the engine's arithmetic
 * type for it (compiled with PYRNN_DTYPE 3 = float16 or 4 = bfloat16; common.h has the
 * conversions). An op that receives 16-bit arrays widens them to float32 on the device when it
 * starts and narrows its results when it ends (round to nearest even; NaN and infinities kept).
 *
 * One work-item converts 8 consecutive elements (PoCL does not vectorise across work-items), the
 * last one of a size that is not a multiple of 8 fewer, one at a time. Offsets are in elements.
 * Global size ceil(n / 8).
 */
#include "common.h"

#if PYRNN_DTYPE != 3 && PYRNN_DTYPE != 4
#error "storage.cl converts 16-bit storage: compile it with PYRNN_DTYPE 3 or 4"
#endif

/* dst[i] = (float)src[src_off + i] for i < n */
__kernel void pyrnn_widen(const long n, __global const storage *src, const long src_off,
                          __global float *dst)
{
    const long i = (long)get_global_id(0) * 8;
    __global const storage *s = src + src_off + i;
    if (i + 8 <= n) {
        vstore8(STORAGE_LOAD8(0, s), 0, dst + i);
    } else {
        for (long k = 0; k < n - i; ++k) dst[i + k] = STORAGE_LOAD(k, s);
    }
}

/* dst[dst_off + i] = src[i] rounded to the storage type, for i < n */
__kernel void pyrnn_narrow(const long n, __global const float *src, __global storage *dst,
                           const long dst_off)
{
    const long i = (long)get_global_id(0) * 8;
    __global storage *d = dst + dst_off + i;
    if (i + 8 <= n) {
        STORAGE_STORE8(vload8(0, src + i), 0, d);
    } else {
        for (long k = 0; k < n - i; ++k) STORAGE_STORE(src[i + k], k, d);
    }
}
