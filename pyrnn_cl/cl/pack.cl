/* pack.cl -- the recurrence's weight packs: R (and W for the input product inside the sequence
 * kernel, and W_proj) from the user's layout into the layouts the step kernels stream.
 *
 * Compiled with PYRNN_DTYPE = the dtype the weight is *stored* in and REC_VW of the layer. For
 * 16-bit storage (3 float16, 4 bfloat16) the kernels read the 16-bit values and write float32
 * packs (exact), so a 16-bit call never widens its weights in a separate pass: the pack is the
 * one pass over them that every call makes anyway. For float32/float64 source and pack share
 * the dtype.
 *
 * Direction d's weight starts at element src_off + d * src_dstride of the source buffer, so a
 * pack reads a weight where it lies, e.g. inside a cuDNN params buffer (the directions'
 * pseudo-layers apart), without a gathering copy first.
 *
 * recurrence.cl includes this file, so a layer whose weights are in its compute dtype packs with
 * kernels of its own program; a 16-bit weight takes this file built on its own for its storage.
 */
#ifndef PYRNN_PACK_CL
#define PYRNN_PACK_CL
#include "common.h"

#if PYRNN_DTYPE == 3 || PYRNN_DTYPE == 4
typedef storage src_t;
#if REC_VW == 1
#define LOAD_SRCV(p) PYRNN_S16_LOAD(PYRNN_DTYPE, 0, p)
#else
#define LOAD_SRCV(p) PYRNN_S16_LOADN(PYRNN_DTYPE, REC_VW, p)
#endif
#else
typedef real src_t;
#define LOAD_SRCV(p) LOADV(p)
#endif

#ifndef PYRNN_UNROLL
#define PYRNN_UNROLL _Pragma("unroll")
#endif

/* Pack R [D][G*H][K] (user blocks) into rpk [D][H/VW][K][G][VW] (canonical slots, slot k from user
 * block blk_k). Also packs W_proj with G = 1. Global size (K/VW, G*H/VW, D): one work-item
 * transposes a VW x VW block (VW units of one gate x VW columns m): VW contiguous row loads into
 * registers, VW contiguous vector stores (K is a multiple of VW: the engine picks VW so). */
__kernel void pyrnn_pack(const int H, const int K, const int G, const int blk0, const int blk1,
                         const int blk2, const int blk3, __global const src_t *R,
                         const long r_off, const long r_dstride, __global real *rpk)
{
    const int mv = get_global_id(0), kv = get_global_id(1), d = get_global_id(2);
    const int HV = H / REC_VW, k = kv / HV, jv = kv % HV, m0 = mv * REC_VW;
    const int blk = k == 0 ? blk0 : k == 1 ? blk1 : k == 2 ? blk2 : blk3;
    __global const src_t *src = R + r_off + d * r_dstride + ((long)blk * H + jv * REC_VW) * K + m0;
    __global real *dst = rpk + (((long)d * HV + jv) * K + m0) * G * REC_VW + k * REC_VW;
    real t[REC_VW][REC_VW];            /* t[unit][column] */
    PYRNN_UNROLL
    for (int i = 0; i < REC_VW; ++i) STOREV(LOAD_SRCV(src + (long)i * K), t[i]);
    PYRNN_UNROLL
    for (int c = 0; c < REC_VW; ++c) {
        real col[REC_VW];
        PYRNN_UNROLL
        for (int i = 0; i < REC_VW; ++i) col[i] = t[i][c];
        STOREV(LOADV(col), dst + (long)c * G * REC_VW);
    }
}

/* Transposed pack for the backward reductions: W [D][rows][cols] into wt [D][cols/VW][rows][VW],
 * wt[d][c][r][v] = W[d][r][c*VW + v] (R with rows = G*H in the user's block order; W_proj with
 * rows = P). Global size (cols/VW, rows, D); one vector copied per work-item. */
__kernel void pyrnn_pack_t(const int rows, const int cols, __global const src_t *W,
                           const long w_off, const long w_dstride, __global real *wt)
{
    const int c = get_global_id(0), r = get_global_id(1), d = get_global_id(2);
    const long src = w_off + d * w_dstride + (long)r * cols + (long)c * REC_VW;
    const long dst = (((long)d * (cols / REC_VW) + c) * rows + r) * REC_VW;
    STOREV(LOAD_SRCV(W + src), wt + dst);
}

#endif /* PYRNN_PACK_CL */
