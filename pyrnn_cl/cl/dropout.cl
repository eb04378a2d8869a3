/* dropout.cl -- inter-layer dropout of the cuDNN dialect (API.md §3, semantics.md §4.5).
 *
 * Element (t, n, u) of a time-major [T][N][W] layer output, for the layer boundary `layer`, keeps
 * its value scaled by 1/(1-p) when the Philox4x32-10 word drawn for it is >= thr = ceil(p 2^32)
 * and becomes 0 otherwise (so p = 1 drops everything, never 0 * inf):
 *
 *     words = philox4x32_10(counter = (u / 4, n, t, layer), key = (seed, seed2) mod 2^32)
 *     keep(t, n, u) = words[u % 4] >= thr
 *
 * The mask is a pure function of the seeds and the counter: no generator state between calls,
 * the same mask in backprop (which multiplies the upstream gradient by the same kept/scaled
 * values) and on every device. One work-item per 4 consecutive units: one Philox call each.
 */
#include "common.h"
#include "philox.h"

/* dst = dropout(src) (dst may be src). Global size (ceil(W/4), N, T). */
__kernel void pyrnn_dropout(__global real *dst, __global const real *src, const int N,
                            const int W, const uint key0, const uint key1, const uint layer,
                            const ulong thr, const real scale)
{
    const int q = get_global_id(0), n = get_global_id(1), t = get_global_id(2);
    const uint4 r = philox4x32_10((uint4)((uint)q, (uint)n, (uint)t, layer), (uint2)(key0, key1));
    const uint words[4] = {r.s0, r.s1, r.s2, r.s3};
    const long row = ((long)t * N + n) * W;
    for (int k = 0; k < 4; ++k) {
        const int u = 4 * q + k;
        if (u >= W) break;
        dst[row + u] = (ulong)words[k] >= thr ? src[row + u] * scale : (real)0;
    }
}

/* out[i] = philox4x32_10(ctr[i], (key0, key1)): the raw generator, for known-answer tests.
 * Global size (n). */
__kernel void pyrnn_philox(__global uint4 *out, __global const uint4 *ctr, const uint key0,
                           const uint key1)
{
    const int i = get_global_id(0);
    out[i] = philox4x32_10(ctr[i], (uint2)(key0, key1));
}
