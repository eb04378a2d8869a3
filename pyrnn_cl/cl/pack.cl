/* pack.cl -- the recurrence's weight packs: R (and W for the input product inside the sequence
 * kernel, and W_proj) from the user's layout into the layouts the step kernels stream.
 *
 * Compiled with PYRNN_DTYPE = the dtype the weight is *stored* in and REC_VW of the layer, and
 * PACK_DTYPE = the dtype of the packs (the codes of PYRNN_DTYPE). For float32/float64 source
 * and pack share the dtype. A 16-bit weight (3 float16, 4 bfloat16) is read as stored and
 * packed either to float32 (PACK_DTYPE 1, exact: the pack is the one pass over the weights
 * that every call makes anyway, so a 16-bit call never widens them in a separate pass) or as
 * it is (PACK_DTYPE = PYRNN_DTYPE: the steps then stream half the bytes and convert as they
 * read, LOAD_PACKV; the tuning value REC_PACK16_BYTES chooses by R's size).
 *
 * Direction d's weight starts at element src_off + d * src_dstride of the source buffer, so a
 * pack reads a weight where it lies, e.g. inside a cuDNN params buffer (the directions'
 * pseudo-layers apart), without a gathering copy first.
 *
 * This file is a program of its own (engine.Recurrence._pack_kernel), shared by every layer of a
 * (storage dtype, REC_VW, PACK_DTYPE); recurrence.cl includes only pack.h.
 */
#include "pack.h"

#define SRC_S16 (PYRNN_DTYPE == 3 || PYRNN_DTYPE == 4)
#if PACK_S16 && PACK_DTYPE != PYRNN_DTYPE
#error "pack.cl: a 16-bit pack holds the weight's own 16-bit dtype (PACK_DTYPE = PYRNN_DTYPE)"
#endif

/* the source weight's element and REC_VW consecutive ones as a realV */
#if SRC_S16
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

/* On a kernel written with explicit vectors of REC_VW: tells a compiler that vectorises across
 * work-items (Intel's CPU runtime packs neighbours along dimension 0) that it is vectorised
 * already. Intel's runtime otherwise packed the pack kernels' in-register VW x VW transposes
 * across work-items, 2.5-3x slower (LSTM H = 512: 1.45 -> 0.58 ms); PoCL is unchanged. (On the
 * step and GEMM kernels it changed nothing measurable.) */
#define PYRNN_VECTORISED __attribute__((vec_type_hint(realV)))

#ifndef PYRNN_UNROLL
#define PYRNN_UNROLL _Pragma("unroll")
#endif

/* Pack R [D][G*H][K] (user blocks) into rpk [D][H/VW][K][G][VW] (canonical slots, slot k from user
 * block blk_k). Also packs W_proj with G = 1. Global size (K/VW, H/VW, D): one work-item
 * transposes the G blocks of VW x VW (VW units of one gate x VW columns m) of one vector of units
 * and columns, each through registers (VW contiguous row loads, VW contiguous vector stores), so
 * that it writes G * VW * VW contiguous values (K is a multiple of VW: the engine picks VW so).
 * One work-item per gate instead wrote VW-value pieces G * VW apart: 1.4-2.2x slower on PoCL
 * (LSTM H = 256-1024). */
PYRNN_VECTORISED
__kernel void pyrnn_pack(const int H, const int K, const int G, const int blk0, const int blk1,
                         const int blk2, const int blk3, __global const src_t *R,
                         const long r_off, const long r_dstride, __global pack_t *rpk)
{
    const int mv = get_global_id(0), jv = get_global_id(1), d = get_global_id(2);
    const int HV = H / REC_VW, m0 = mv * REC_VW;
    __global pack_t *dst = rpk + (((long)d * HV + jv) * K + m0) * G * REC_VW;
    for (int k = 0; k < G; ++k) {
        const int blk = k == 0 ? blk0 : k == 1 ? blk1 : k == 2 ? blk2 : blk3;
        __global const src_t *src = R + r_off + d * r_dstride + ((long)blk * H + jv * REC_VW) * K + m0;
        real t[REC_VW][REC_VW];        /* t[unit][column] */
        PYRNN_UNROLL
        for (int i = 0; i < REC_VW; ++i) STOREV(LOAD_SRCV(src + (long)i * K), t[i]);
        PYRNN_UNROLL
        for (int c = 0; c < REC_VW; ++c) {
            real col[REC_VW];
            PYRNN_UNROLL
            for (int i = 0; i < REC_VW; ++i) col[i] = t[i][c];
            STORE_PACKV(LOADV(col), dst + (long)c * G * REC_VW + k * REC_VW);
        }
    }
}

/* Transposed pack for the backward reductions: W [D][rows][cols] into wt [D][cols/VW][rows][VW],
 * wt[d][c][r][v] = W[d][r][c*VW + v] (R with rows = G*H in the user's block order; W_proj with
 * rows = P). Global size (cols/VW, row chunks, D), the host choosing the chunks: a work-item
 * copies the vectors of ceil(rows / chunks) consecutive rows (one vector each was mostly
 * work-item overhead on CPUs). */
PYRNN_VECTORISED
__kernel void pyrnn_pack_t(const int rows, const int cols, __global const src_t *W,
                           const long w_off, const long w_dstride, __global pack_t *wt)
{
    const int c = get_global_id(0), d = get_global_id(2), chunks = (int)get_global_size(1);
    const int per = (rows + chunks - 1) / chunks, r0 = (int)get_global_id(1) * per;
    const int rn = min(per, rows - r0);
    const __global src_t *src = W + w_off + d * w_dstride + (long)r0 * cols + (long)c * REC_VW;
    __global pack_t *dst = wt + (((long)d * (cols / REC_VW) + c) * rows + r0) * REC_VW;
    for (int r = 0; r < rn; ++r) STORE_PACKV(LOAD_SRCV(src + (long)r * cols), dst + r * REC_VW);
}
