/* pack.cl -- the recurrence's weight packs: R (and W for the input product inside the sequence
 * kernel, and W_proj) from the user's layout into the layouts the step kernels stream.
 *
 * Compiled with PYRNN_DTYPE = the dtype the weight is *stored* in, REC_VW of the layer,
 * PACK_TB = the side of pyrnn_pack's register tile (below), and PACK_DTYPE = the dtype of the
 * packs (the codes of PYRNN_DTYPE). For float32/float64 source
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

/* The source weight's elements as reals: SRC_LOAD1(p) one, SRC_LOADN(n, p) n (2, 4, 8, 16)
 * consecutive ones; LOAD_SRCV(p) REC_VW of them as a realV. */
#if SRC_S16
typedef storage src_t;
#define SRC_LOAD1(p) PYRNN_S16_LOAD(PYRNN_DTYPE, 0, p)
#define SRC_LOADN(n, p) PYRNN_S16_LOADN(PYRNN_DTYPE, n, p)
#else
typedef real src_t;
#define SRC_LOAD1(p) (*(p))
#define SRC_LOADN(n, p) PYRNN_CAT(vload, n)(0, (p))
#endif
#if REC_VW == 1
#define LOAD_SRCV(p) SRC_LOAD1(p)
#else
#define LOAD_SRCV(p) SRC_LOADN(REC_VW, p)
#endif

/* pyrnn_pack's square tile: PACK_TB x PACK_TB values through registers (PACK_TB divides REC_VW;
 * the host's choice, engine._PACK_TILE). */
#if !defined(PACK_TB) || PACK_TB < 1 || REC_VW % PACK_TB != 0
#error "pack.cl: PACK_TB, a divisor of REC_VW"
#endif
/* tileV: a tile row; LOAD_TILEV reads one from the source, LOAD_COLV one from a private array,
 * STORE_TILEV writes one to the pack */
#if PACK_TB == 1
typedef real tileV;
#define LOAD_TILEV(p) SRC_LOAD1(p)
#define LOAD_COLV(a) ((a)[0])
#define STORE_TILEV(v, p) PACK_STORE1(v, p)
#else
typedef PYRNN_CAT(PYRNN_REAL, PACK_TB) tileV;
#define LOAD_TILEV(p) SRC_LOADN(PACK_TB, p)
#define LOAD_COLV(a) PYRNN_CAT(vload, PACK_TB)(0, (a))
#define STORE_TILEV(v, p) PACK_STOREN(PACK_TB, v, p)
#endif

/* On a kernel written with explicit vectors: tells a compiler that vectorises across
 * work-items (Intel's CPU runtime packs neighbours along dimension 0) that it is vectorised
 * already. Intel's runtime otherwise packed the pack kernels' in-register transposes across
 * work-items, 2.5-3x slower (LSTM H = 512: 1.45 -> 0.58 ms); PoCL is unchanged. (On the step and
 * GEMM kernels it changed nothing measurable.) */
#define PYRNN_VECTORISED(T) __attribute__((vec_type_hint(T)))

#ifndef PYRNN_UNROLL
#define PYRNN_UNROLL _Pragma("unroll")
#endif

/* Pack R [D][G*H][K] (user blocks) into rpk [D][HV][K][G][VW] (canonical slots, slot k from
 * user block blk_k), HV = ceil(H/VW): the units of a partial last vector past H are zeros
 * (REC_TAIL in recurrence.cl). Also packs W_proj with G = 1.
 *
 * Global size (chunks, HV*VW/PACK_TB, G*D), the host choosing chunks (a divisor of K/PACK_TB
 * when K is a multiple of PACK_TB): a work-item copies PACK_TB units of one gate over the whole
 * tiles' columns / chunks, a PACK_TB x PACK_TB tile at a time through registers (PACK_TB
 * contiguous row loads, PACK_TB contiguous stores); the last chunk's work-items also copy the
 * K % PACK_TB columns after the whole tiles, element by element (an input width I that is no
 * multiple of PACK_TB: W packed for the sequence kernel's input product). CPUs: one chunk, so
 * that each work-item streams its PACK_TB rows from start to end (the prefetchers
 * follow PACK_TB streams); one work-item per VW x VW tile of all G gates instead (4*VW rows read
 * 64 bytes at a time) was 1.5-2x slower on PoCL, from cache and from memory (LSTM H = 512-1024).
 * GPUs: K/PACK_TB chunks, so that neighbouring work-items read neighbouring columns. A tile
 * that crosses H (or lies past it) copies its units below H element by element and zeros the
 * rest. */
PYRNN_VECTORISED(tileV)
__kernel void pyrnn_pack(const int H, const int K, const int G, const int blk0, const int blk1,
                         const int blk2, const int blk3, __global const src_t *R,
                         const long r_off, const long r_dstride, __global pack_t *rpk)
{
    const int jt = get_global_id(1), k = get_global_id(2) % G, d = get_global_id(2) / G;
    const int full = K - K % PACK_TB;      /* columns in whole tiles */
    const int per = full / (int)get_global_size(0), m_start = get_global_id(0) * per;
    const int blk = k == 0 ? blk0 : k == 1 ? blk1 : k == 2 ? blk2 : blk3;
    const int j0 = jt * PACK_TB, jv = j0 / REC_VW;
    __global const src_t *src = R + r_off + d * r_dstride + ((long)blk * H + j0) * K;
    __global pack_t *dst = rpk + ((long)d * ((H + REC_VW - 1) / REC_VW) + jv) * K * G * REC_VW
                         + k * REC_VW + (j0 - jv * REC_VW);
    const int units = H - j0;     /* of this tile's PACK_TB units, those that exist */
    if (units < PACK_TB) {
        const int m_end = get_global_id(0) == get_global_size(0) - 1 ? K : m_start + per;
        for (int m = m_start; m < m_end; ++m)
            for (int i = 0; i < PACK_TB; ++i)
                PACK_STORE1(i < units ? SRC_LOAD1(src + (long)i * K + m) : (real)0,
                            dst + (long)m * G * REC_VW + i);
        return;
    }
    for (int m0 = m_start; m0 < m_start + per; m0 += PACK_TB) {
        real t[PACK_TB][PACK_TB];      /* t[unit][column] */
        PYRNN_UNROLL
        for (int i = 0; i < PACK_TB; ++i) {
            tileV row = LOAD_TILEV(src + (long)i * K + m0);
            PYRNN_UNROLL
            for (int c = 0; c < PACK_TB; ++c) t[i][c] = ((real *)&row)[c];
        }
        PYRNN_UNROLL
        for (int c = 0; c < PACK_TB; ++c) {
            real col[PACK_TB];
            PYRNN_UNROLL
            for (int i = 0; i < PACK_TB; ++i) col[i] = t[i][c];
            STORE_TILEV(LOAD_COLV(col), dst + (long)(m0 + c) * G * REC_VW);
        }
    }
    if (get_global_id(0) == get_global_size(0) - 1) {
        for (int m = full; m < K; ++m)
            for (int i = 0; i < PACK_TB; ++i)
                PACK_STORE1(SRC_LOAD1(src + (long)i * K + m), dst + (long)m * G * REC_VW + i);
    }
}

/* Transposed pack for the backward reductions: W [D][rows][cols] into wt [D][CV][rows][VW],
 * CV = ceil(cols/VW), wt[d][c][r][v] = W[d][r][c*VW + v], zero where c*VW + v >= cols (a partial
 * last vector, REC_TAIL) (R with rows = G*H in the user's block order; W_proj with
 * rows = P). Global size (CV, row chunks, D), the host choosing the chunks: a work-item
 * copies the vectors of ceil(rows / chunks) consecutive rows (one vector each was mostly
 * work-item overhead on CPUs). */
PYRNN_VECTORISED(realV)
__kernel void pyrnn_pack_t(const int rows, const int cols, __global const src_t *W,
                           const long w_off, const long w_dstride, __global pack_t *wt)
{
    const int c = get_global_id(0), d = get_global_id(2), chunks = (int)get_global_size(1);
    const int per = (rows + chunks - 1) / chunks, r0 = (int)get_global_id(1) * per;
    const int rn = min(per, rows - r0);
    const __global src_t *src = W + w_off + d * w_dstride + (long)r0 * cols + (long)c * REC_VW;
    __global pack_t *dst = wt + (((long)d * ((cols + REC_VW - 1) / REC_VW) + c) * rows + r0)
                              * REC_VW;
    const int nc = cols - c * REC_VW;      /* of this vector's columns, those that exist */
    if (nc < REC_VW) {
        for (int r = 0; r < rn; ++r)
            for (int v = 0; v < REC_VW; ++v)
                PACK_STORE1(v < nc ? SRC_LOAD1(src + (long)r * cols + v) : (real)0,
                            dst + r * REC_VW + v);
        return;
    }
    for (int r = 0; r < rn; ++r) STORE_PACKV(LOAD_SRCV(src + (long)r * cols), dst + r * REC_VW);
}
