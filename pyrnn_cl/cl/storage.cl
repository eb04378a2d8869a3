/* storage.cl -- conversions between a 16-bit storage dtype and float32, the engine's arithmetic
 * type for it (compiled with PYRNN_DTYPE 3 = float16 or 4 = bfloat16; common.h has the
 * conversions). An op that receives 16-bit arrays widens them to float32 on the device when it
 * starts and narrows its results when it ends (round to nearest even; NaN and infinities kept).
 *
 * One launch converts up to CONVERT_SLOTS arrays (an op's inputs at its start, its results at its
 * end: on PoCL each launch costs tens of microseconds, more than converting a small array). Slot k
 * converts src_k[so_k + i] into dst_k[do_k + i] for its n_k elements, in two launches for all
 * slots together: the *8 kernels, 8 consecutive elements per work-item (global size the largest
 * n_k / 8; slot k's work-items beyond n8_k do nothing for it), then the *1 kernels, one element
 * per work-item, for each slot's last n_k % 8 from element first_k (global size the largest
 * n_k % 8; skipped when every n_k is a multiple of 8). No kernel has a loop: a tail loop inside
 * the 8-wide kernel made Intel's CPU compiler 20x slower, and PoCL does not vectorise across
 * work-items. Offsets are in elements; an unused slot has n = 0.
 */
#include "common.h"

#if PYRNN_DTYPE != 3 && PYRNN_DTYPE != 4
#error "storage.cl converts 16-bit storage: compile it with PYRNN_DTYPE 3 or 4"
#endif

/* the slots EACH_SLOT_* below spell out; the host passes its own count (pyrnn_cl._arrays.
 * CONVERT_SLOTS), so the two cannot disagree silently */
#if CONVERT_SLOTS != 8
#error "storage.cl spells out 8 conversion slots: build it with -DCONVERT_SLOTS=8"
#endif

#define WIDEN8(i, s, d) vstore8(STORAGE_LOAD8((i), (s)), (i), (d))
#define WIDEN1(i, s, d) ((d)[i] = STORAGE_LOAD((i), (s)))
#define NARROW8(i, s, d) STORAGE_STORE8(vload8((i), (s)), (i), (d))
#define NARROW1(i, s, d) STORAGE_STORE((s)[i], (i), (d))

#define SLOT8(ST, DT, k) __global const ST *s##k, const long so##k, __global DT *d##k, \
                         const long do##k, const long n8_##k
#define SLOT1(ST, DT, k) __global const ST *s##k, const long so##k, __global DT *d##k, \
                         const long do##k, const long first##k, const long n1_##k
#define DO8(CONV, k) if (i < n8_##k) CONV(i, s##k + so##k, d##k + do##k)
#define DO1(CONV, k) if (i < n1_##k) CONV(first##k + i, s##k + so##k, d##k + do##k)

/* the CONVERT_SLOTS slots, spelled out once: a kernel's parameters and its statements */
#define EACH_SLOT_PARAM(SLOT, ST, DT) SLOT(ST, DT, 0), SLOT(ST, DT, 1), SLOT(ST, DT, 2), \
    SLOT(ST, DT, 3), SLOT(ST, DT, 4), SLOT(ST, DT, 5), SLOT(ST, DT, 6), SLOT(ST, DT, 7)
#define EACH_SLOT_DO(DO, CONV) DO(CONV, 0); DO(CONV, 1); DO(CONV, 2); DO(CONV, 3); \
    DO(CONV, 4); DO(CONV, 5); DO(CONV, 6); DO(CONV, 7)

#define CONVERT_KERNEL(NAME, SLOT, DO, ST, DT, CONV)                                            \
__kernel void NAME(EACH_SLOT_PARAM(SLOT, ST, DT))                                              \
{                                                                                              \
    const long i = get_global_id(0);                                                           \
    EACH_SLOT_DO(DO, CONV);                                                                    \
}
#define CONVERT_KERNELS(NAME, ST, DT, CONV8, CONV1)                                             \
    CONVERT_KERNEL(NAME##8, SLOT8, DO8, ST, DT, CONV8)                                         \
    CONVERT_KERNEL(NAME##1, SLOT1, DO1, ST, DT, CONV1)

/* pyrnn_widen8, pyrnn_widen1: float32 from storage; pyrnn_narrow8, pyrnn_narrow1: storage from
 * float32, rounded to nearest even */
CONVERT_KERNELS(pyrnn_widen, storage, float, WIDEN8, WIDEN1)
CONVERT_KERNELS(pyrnn_narrow, float, storage, NARROW8, NARROW1)

/* dst[r * n + i] = (float)src[src_off + r * src_stride + i]: `runs` runs of n elements each,
 * src_stride apart in the source (e.g. one bias per direction of a cuDNN params buffer).
 * Global size (n, runs). */
__kernel void pyrnn_widen_runs(__global const storage *src, const long src_off,
                               const long src_stride, const int n, __global float *dst)
{
    const int i = get_global_id(0), r = get_global_id(1);
    dst[(long)r * n + i] = STORAGE_LOAD(src_off + r * src_stride + i, src);
}
