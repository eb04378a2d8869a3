// =================================================================================================
// gemm.cl -- matrix multiply for pyrnn_cl (row-major; offsets, strides in elements, all arguments)
//
//   C[m x n] = alpha * op(A)[m x k] * op(B)[k x n] + beta * C + bias     (beta == 0: C is not read)
//
// bias (has_bias != 0) is added to D[i][j] as bias[b_off + i * b_si + j * b_sj]: a row vector over the
// columns of C (b_si = 0, b_sj = 1), or over the rows of D when the host computes C^T.
//
// Kernels (the host, pyrnn_cl/gemm.py, picks them per call):
//   pyrnn_gemm_outer   D = alpha P Q + beta D, P and D through run-time strides, rows of Q
//                      contiguous (B as stored for NN/TN, A for TT computed as C^T = B A, or
//                      either operand packed into tile panels by the pack kernels below)
//   pyrnn_gemm_dot     D = alpha P Q^T + beta D with rows of P and Q contiguous along k (NT)
//   pyrnn_gemm_pack_p  X -> panels [rows/GEMM_TM][k][GEMM_TM]   (P of the outer kernel)
//   pyrnn_gemm_pack_q  X -> panels [cols/GEMM_TN][k][GEMM_TN]   (Q^T of the outer kernel)
//   pyrnn_gemm_tiled   D = alpha P Q + beta D, P, Q, D all through run-time strides (every
//                      transposition as stored): the GPU kernel (GEMM_LOCAL = 1, at the end)
//
//   outer: one work-item = GEMM_TM x GEMM_TN tile of D    dot: one work-item = GEMM_DTM x GEMM_DTN
//                 GEMM_TN = GEMM_TNV vectors of GEMM_VW                k (vectors of GEMM_DVW)
//              +-------------------+                       +------------------+
//            k | Q row kk: vloads  |                     n | Q rows: vloads   |  GEMM_DTN rows
//              +-------------------+                       +------------------+
//   +-------+  +-------------------+                     m +------------------+
//   | P     |  | acc[TM][TNV]      |  += P[i,kk] * Q[kk,:]  | P rows: vloads   |  GEMM_DTM rows
//   | TM x k|  | in registers      |                        +------------------+
//   +-------+  +-------------------+                  acc[DTM][DTN] vectors, summed at the end
//
// outer, dot: each work-item owns its register tile and runs the whole k loop: no local memory,
// no barriers (CPUs: GEMM_LOCAL = 0, the host never builds the tiled kernel). PoCL does not
// vectorise across work-items, so vector types inside the work-item are what makes this fast on
// CPUs (explicit float16 tiles: ~200 GFLOP/s on 2 Zen 4 cores). On a GPU the same design reads
// every operand from global memory once per work-item (~2.5-3 TFLOP/s on an H100);
// pyrnn_gemm_tiled instead shares GEMM_LBM x GEMM_LBK and GEMM_LBK x GEMM_LBN chunks of P and Q
// through local memory across a work-group (its own comment below). Global dimension 2 is the
// batch index. Edges (outer, dot): rows beyond m are clamped on load and masked on store; a
// column tile of an unpacked Q that crosses n takes an element-wise path; (tiled) zeros are
// loaded beyond m, n, k and stores masked. k == 0 gives D = beta * D (or 0), + bias.
// =================================================================================================

#include "common.h"

#ifndef GEMM_TM
#define GEMM_TM 6          // outer: rows of D per work-item
#endif
#ifndef GEMM_VW
#if PYRNN_DTYPE == 2
#define GEMM_VW 8          // outer: vector width along n (1, 2, 4, 8 or 16)
#else
#define GEMM_VW 16
#endif
#endif
#ifndef GEMM_TN
#define GEMM_TN (4 * GEMM_VW)  // outer: columns of D per work-item (a multiple of GEMM_VW)
#endif
#ifndef GEMM_DTM
#define GEMM_DTM 4         // dot: rows of P (rows of D) per work-item
#endif
#ifndef GEMM_DTN
#define GEMM_DTN 4         // dot: rows of Q (columns of D) per work-item
#endif
#ifndef GEMM_DVW
#if PYRNN_DTYPE == 2
#define GEMM_DVW 8         // dot: vector width along k (1, 2, 4, 8 or 16)
#else
#define GEMM_DVW 16
#endif
#endif
#ifndef GEMM_FMA
#define GEMM_FMA 1         // 1: multiply-add with fma() (one rounding, a single instruction where the
#endif                     //    hardware has FMA); 0: mad() (PoCL emits a separate multiply and add)
#ifndef GEMM_PACK_KC
#define GEMM_PACK_KC 16    // pack: k values per work-item
#endif
#ifndef GEMM_KBLK
#define GEMM_KBLK 0        // outer: > 0 sums k in blocks of GEMM_KBLK steps, each block's tile
#endif                     //    added to D (a two-level sum: error ~ GEMM_KBLK + k / GEMM_KBLK
                           //    terms instead of k); the host asks for it on weight gradients,
                           //    whose k is T*N rows. A second register tile would spill.

// ---- scalar / vector types ---------------------------------------------------------------------
#if PYRNN_DTYPE == 2
#define GEMM_T double
#else
#define GEMM_T float
#endif
#define GEMM_CAT_(a, b) a##b
#define GEMM_CAT(a, b) GEMM_CAT_(a, b)
#define GEMM_TNV (GEMM_TN / GEMM_VW)  // outer: vectors of D columns per work-item
#define GEMM_NR (GEMM_TNV * GEMM_VW)   // = GEMM_TN

#if GEMM_VW == 1
#define GEMM_V GEMM_T
#define GEMM_VLOAD(p) (*(p))
#define GEMM_VSTORE(v, p) (*(p) = (v))
#else
#define GEMM_V GEMM_CAT(GEMM_T, GEMM_VW)
#define GEMM_VLOAD(p) GEMM_CAT(vload, GEMM_VW)(0, p)
#define GEMM_VSTORE(v, p) GEMM_CAT(vstore, GEMM_VW)(v, 0, p)
#endif

#if GEMM_DVW == 1
#define GEMM_DV GEMM_T
#define GEMM_DVLOAD(p) (*(p))
#else
#define GEMM_DV GEMM_CAT(GEMM_T, GEMM_DVW)
#define GEMM_DVLOAD(p) GEMM_CAT(vload, GEMM_DVW)(0, p)
#endif

// ---- Q's storage ---------------------------------------------------------------------------------
// GEMM_QS = 3 (float16) or 4 (bfloat16): the memory the kernels read as Q (op(B) of the host's
// NN/TN products and of the dot kernel, and the source of pyrnn_gemm_pack_q) holds 16-bit values,
// converted to float on load (exact); everything else stays GEMM_T. A 16-bit weight is then read as
// it is stored instead of after a widening pass. 0 (default): Q is GEMM_T.
#ifndef GEMM_QS
#define GEMM_QS 0
#endif
#if GEMM_QS == 3 || GEMM_QS == 4
#define GEMM_QT PYRNN_S16_T(GEMM_QS)
#define GEMM_QLOAD1(p, i) PYRNN_S16_LOAD(GEMM_QS, i, p)
#define GEMM_QLOADN(n, p) PYRNN_S16_LOADN(GEMM_QS, n, p)
#elif GEMM_QS == 0
#define GEMM_QT GEMM_T
#define GEMM_QLOAD1(p, i) ((p)[i])
#define GEMM_QLOADN(n, p) GEMM_CAT(vload, n)(0, (p))
#else
#error "GEMM_QS: 0, 3 (float16) or 4 (bfloat16)"
#endif
#if GEMM_QS != 0 && PYRNN_DTYPE != 1
#error "GEMM_QS: 16-bit Q is read into float32 products only"
#endif
#if GEMM_VW == 1
#define GEMM_QVLOAD(p) GEMM_QLOAD1(p, 0)
#else
#define GEMM_QVLOAD(p) GEMM_QLOADN(GEMM_VW, p)
#endif
#if GEMM_DVW == 1
#define GEMM_QDVLOAD(p) GEMM_QLOAD1(p, 0)
#else
#define GEMM_QDVLOAD(p) GEMM_QLOADN(GEMM_DVW, p)
#endif

#if GEMM_FMA
#define GEMM_MAD(a, b, c) fma(a, b, c)
#else
#define GEMM_MAD(a, b, c) mad(a, b, c)
#endif

// horizontal sum of a GEMM_DV vector
PYRNN_FUNC GEMM_T gemm_hsum(GEMM_DV v) {
#if GEMM_DVW == 1
  return v;
#else
  GEMM_T t[GEMM_DVW];
  GEMM_CAT(vstore, GEMM_DVW)(v, 0, t);
  GEMM_T s = (GEMM_T)0;
  #pragma unroll
  for (int e = 0; e < GEMM_DVW; ++e) s += t[e];
  return s;
#endif
}

// the bias term of D[i][j] (0 without a bias)
#define GEMM_BIAS1(i, j) (has_bias ? bias[(long)(i) * b_si + (long)(j) * b_sj] : (GEMM_T)0)

// stores one value of D with its bias term; beta == 0 never reads D (NaN-safe)
#define GEMM_STORE1(ptr, val, bv) \
  do { if (beta == (GEMM_T)0) *(ptr) = mad(alpha, (val), (bv)); \
       else *(ptr) = mad(beta, *(ptr), mad(alpha, (val), (bv))); } while (0)

// =================================================================================================
// outer-product kernel: acc[i][v] += P[i, kk] * Q[kk, j0 + v*VW .. +VW]
//
// Row tile mt of P starts at p + mt*p_st; its row i at + i*p_si, element kk at + kk*p_sk.
// Column tile nt of Q starts at q + nt*q_st; its row kk at + kk*q_sk, columns contiguous.
//   plain P: p_st = GEMM_TM*p_si          packed P ([tiles][k][GEMM_TM]): p_st = k*GEMM_TM, p_si = 1, p_sk = GEMM_TM
//   plain Q: q_st = GEMM_TN, q_sk = ldq   packed Q ([tiles][k][GEMM_TN]): q_st = k*GEMM_TN, q_sk = GEMM_TN
// Columns j < nq of Q are readable (nq = n for plain Q, n rounded up to GEMM_TN for packed Q).
// mfast != 0: global dimension 0 runs over row tiles (a work-group shares its Q panel).
// =================================================================================================
__kernel void pyrnn_gemm_outer(const int m, const int n, const int k, const int mfast,
                               const GEMM_T alpha, const GEMM_T beta,
                               const __global GEMM_T* restrict p, const long p_off, const long p_st,
                               const long p_si, const long p_sk, const long p_batch,
                               const __global GEMM_QT* restrict q, const long q_off, const long q_st,
                               const long q_sk, const int nq, const long q_batch,
                               __global GEMM_T* d, const long d_off, const long d_si, const long d_sj,
                               const long d_batch, const int has_bias,
                               const __global GEMM_T* restrict bias, const long b_off,
                               const long b_si, const long b_sj) {
  const int g0 = get_global_id(0), g1 = get_global_id(1);
  const int mt = mfast ? g0 : g1, nt = mfast ? g1 : g0;
  const int i0 = mt * GEMM_TM, j0 = nt * GEMM_NR;
  if (i0 >= m || j0 >= n) return;
  const long bi = get_global_id(2);
  p += p_off + bi * p_batch + mt * p_st;
  q += q_off + bi * q_batch + nt * q_st;
  d += d_off + bi * d_batch;
  bias += b_off;

  // row pointers of P (rows beyond m clamped to m - 1: loaded, never stored)
  const __global GEMM_T* prow[GEMM_TM];
  #pragma unroll
  for (int i = 0; i < GEMM_TM; ++i) prow[i] = p + min(i, m - 1 - i0) * p_si;

  const __global GEMM_QT* qk = q;
#if GEMM_KBLK
  // blocks of GEMM_KBLK k-steps: the first stores beta * D + bias + alpha * its sum, the later
  // ones add theirs (k == 0: one pass storing beta * D + bias)
  const GEMM_T beta_in = beta;
  const int bias_in = has_bias;
  for (int kb = 0; kb < k || kb == 0; kb += GEMM_KBLK) {
  const int ke = min(k, kb + GEMM_KBLK);
  const GEMM_T beta = kb == 0 ? beta_in : (GEMM_T)1;
  const int has_bias = kb == 0 ? bias_in : 0;
#else
  {
  const int kb = 0, ke = k;
#endif
  GEMM_V acc[GEMM_TM][GEMM_TNV];
  #pragma unroll
  for (int i = 0; i < GEMM_TM; ++i) {
    #pragma unroll
    for (int v = 0; v < GEMM_TNV; ++v) acc[i][v] = (GEMM_V)0;
  }

  if (j0 + GEMM_NR <= nq) {
    // full column tile: contiguous vector loads of Q
    for (int kk = kb; kk < ke; ++kk) {
      GEMM_V bv[GEMM_TNV];
      #pragma unroll
      for (int v = 0; v < GEMM_TNV; ++v) bv[v] = GEMM_QVLOAD(qk + v * GEMM_VW);
      const long po = kk * p_sk;
      #pragma unroll
      for (int i = 0; i < GEMM_TM; ++i) {
        const GEMM_V av = (GEMM_V)(prow[i][po]);
        #pragma unroll
        for (int v = 0; v < GEMM_TNV; ++v) acc[i][v] = GEMM_MAD(av, bv[v], acc[i][v]);
      }
      qk += q_sk;
    }
  } else {
    // column tile crossing n: vector loads for the vectors inside n, element-wise loads with a
    // clamped column index for the one crossing it, zeros past it (all element-wise, an edge
    // tile cost ten times a full one: TN 512 x 100 x 800 ran at 24 GFLOP/s on PoCL, Zen 4)
    const int vfull = (n - j0) / GEMM_VW, vused = (n - j0 + GEMM_VW - 1) / GEMM_VW;
    for (int kk = kb; kk < ke; ++kk) {
      GEMM_V bv[GEMM_TNV];
      #pragma unroll
      for (int v = 0; v < GEMM_TNV; ++v) {
        if (v < vfull) {
          bv[v] = GEMM_QVLOAD(qk + v * GEMM_VW);
        } else if (v < vused) {
          GEMM_T t[GEMM_VW];
          for (int e = 0; e < GEMM_VW; ++e)
            t[e] = GEMM_QLOAD1(qk, min(v * GEMM_VW + e, n - 1 - j0));
#if GEMM_VW == 1
          bv[v] = t[0];
#else
          bv[v] = GEMM_CAT(vload, GEMM_VW)(0, t);
#endif
        } else {
          bv[v] = (GEMM_V)0;
        }
      }
      const long po = kk * p_sk;
      #pragma unroll
      for (int i = 0; i < GEMM_TM; ++i) {
        const GEMM_V av = (GEMM_V)(prow[i][po]);
        #pragma unroll
        for (int v = 0; v < GEMM_TNV; ++v) acc[i][v] = GEMM_MAD(av, bv[v], acc[i][v]);
      }
      qk += q_sk;
    }
  }

  // ---- store -------------------------------------------------------------------------------------
  if (d_sj == 1 && j0 + GEMM_NR <= n && i0 + GEMM_TM <= m) {
    #pragma unroll
    for (int i = 0; i < GEMM_TM; ++i) {
      __global GEMM_T* drow = d + (long)(i0 + i) * d_si + j0;
      #pragma unroll
      for (int v = 0; v < GEMM_TNV; ++v) {
        __global GEMM_T* dp = drow + v * GEMM_VW;
        const int j = j0 + v * GEMM_VW;
        GEMM_V val = alpha * acc[i][v];
        if (has_bias) {
          const __global GEMM_T* bp = bias + (long)(i0 + i) * b_si + (long)j * b_sj;
          val += b_sj ? GEMM_VLOAD(bp) : (GEMM_V)(*bp);
        }
        if (beta == (GEMM_T)0) GEMM_VSTORE(val, dp);
        else GEMM_VSTORE(mad((GEMM_V)beta, GEMM_VLOAD(dp), val), dp);
      }
    }
  } else {
    #pragma unroll
    for (int i = 0; i < GEMM_TM; ++i) {
      if (i0 + i >= m) break;
      __global GEMM_T* drow = d + (long)(i0 + i) * d_si;
      #pragma unroll
      for (int v = 0; v < GEMM_TNV; ++v) {
        GEMM_T t[GEMM_VW];
#if GEMM_VW == 1
        t[0] = acc[i][v];
#else
        GEMM_CAT(vstore, GEMM_VW)(acc[i][v], 0, t);
#endif
        for (int e = 0; e < GEMM_VW; ++e) {
          const int j = j0 + v * GEMM_VW + e;
          if (j < n) GEMM_STORE1(drow + (long)j * d_sj, t[e], GEMM_BIAS1(i0 + i, j));
        }
      }
    }
  }
  }  // k blocks
}

// =================================================================================================
// dot-product kernel: acc[i][j] += P[i, kk .. kk+DVW] * Q[j, kk .. kk+DVW], summed at the end
// =================================================================================================
__kernel void pyrnn_gemm_dot(const int m, const int n, const int k, const int mfast,
                             const GEMM_T alpha, const GEMM_T beta,
                             const __global GEMM_T* restrict p, const long p_off, const long ldp,
                             const long p_batch,
                             const __global GEMM_QT* restrict q, const long q_off, const long ldq,
                             const long q_batch,
                             __global GEMM_T* d, const long d_off, const long d_si, const long d_sj,
                             const long d_batch, const int has_bias,
                             const __global GEMM_T* restrict bias, const long b_off,
                             const long b_si, const long b_sj) {
  const int g0 = get_global_id(0), g1 = get_global_id(1);
  const int mt = mfast ? g0 : g1, nt = mfast ? g1 : g0;
  const int i0 = mt * GEMM_DTM, j0 = nt * GEMM_DTN;
  if (i0 >= m || j0 >= n) return;
  const long bi = get_global_id(2);
  p += p_off + bi * p_batch;
  q += q_off + bi * q_batch;
  d += d_off + bi * d_batch;
  bias += b_off;

  const __global GEMM_T* prow[GEMM_DTM];
  const __global GEMM_QT* qrow[GEMM_DTN];
  #pragma unroll
  for (int i = 0; i < GEMM_DTM; ++i) prow[i] = p + (long)min(i0 + i, m - 1) * ldp;
  #pragma unroll
  for (int j = 0; j < GEMM_DTN; ++j) qrow[j] = q + (long)min(j0 + j, n - 1) * ldq;

  GEMM_DV acc[GEMM_DTM][GEMM_DTN];
  #pragma unroll
  for (int i = 0; i < GEMM_DTM; ++i) {
    #pragma unroll
    for (int j = 0; j < GEMM_DTN; ++j) acc[i][j] = (GEMM_DV)0;
  }
  int kk = 0;
  for (; kk + GEMM_DVW <= k; kk += GEMM_DVW) {
    GEMM_DV av[GEMM_DTM], bv[GEMM_DTN];
    #pragma unroll
    for (int i = 0; i < GEMM_DTM; ++i) av[i] = GEMM_DVLOAD(prow[i] + kk);
    #pragma unroll
    for (int j = 0; j < GEMM_DTN; ++j) bv[j] = GEMM_QDVLOAD(qrow[j] + kk);
    #pragma unroll
    for (int i = 0; i < GEMM_DTM; ++i) {
      #pragma unroll
      for (int j = 0; j < GEMM_DTN; ++j) acc[i][j] = GEMM_MAD(av[i], bv[j], acc[i][j]);
    }
  }

  GEMM_T s[GEMM_DTM][GEMM_DTN];
  #pragma unroll
  for (int i = 0; i < GEMM_DTM; ++i) {
    #pragma unroll
    for (int j = 0; j < GEMM_DTN; ++j) s[i][j] = gemm_hsum(acc[i][j]);
  }
  for (; kk < k; ++kk) {   // k tail (k % GEMM_DVW elements)
    #pragma unroll
    for (int i = 0; i < GEMM_DTM; ++i) {
      #pragma unroll
      for (int j = 0; j < GEMM_DTN; ++j) s[i][j] = GEMM_MAD(prow[i][kk], GEMM_QLOAD1(qrow[j], kk), s[i][j]);
    }
  }

  #pragma unroll
  for (int i = 0; i < GEMM_DTM; ++i) {
    if (i0 + i >= m) break;
    __global GEMM_T* drow = d + (long)(i0 + i) * d_si;
    #pragma unroll
    for (int j = 0; j < GEMM_DTN; ++j) {
      if (j0 + j < n) GEMM_STORE1(drow + (long)(j0 + j) * d_sj, s[i][j], GEMM_BIAS1(i0 + i, j0 + j));
    }
  }
}

// =================================================================================================
// pack kernels: xp[b][t][kk][TW] = X_b[t*TW + r, kk] (0 for rows >= rows), X[r, kk] = x[r*x_sr + kk*x_sk]
// pyrnn_gemm_pack_p packs P with TW = GEMM_TM, pyrnn_gemm_pack_q packs Q^T with TW = GEMM_TN.
// Global, by mode (the host's choice, gemm._pack):
//   GEMM_PACK_CHUNKS: (ceil(k / GEMM_PACK_KC), tiles, batch), a work-item packs GEMM_PACK_KC
//     values of k of a tile's TW rows;
//   GEMM_PACK_TILES_FAST: (tiles, ceil(k / GEMM_PACK_KC), batch), the same with work-items next
//     to each other reading neighbouring tiles (right when x_sr == 1);
//   GEMM_PACK_ROWS (x_sk == 1, GEMM_PACK_KC a vector width dividing TW): (TW / GEMM_PACK_KC,
//     tiles, batch), a work-item packs GEMM_PACK_KC rows of a tile over all of k, one square
//     GEMM_PACK_KC x GEMM_PACK_KC block at a time through registers: it streams its rows from
//     start to end, which the prefetchers follow. The chunked work-items (TW rows read 64 bytes
//     at a time, the same square transposes) packed an LSTM 512-1024's W 1.5-2x slower on PoCL
//     (AVX-512), from cache and from memory; scalar stores TW apart instead of the squares'
//     vector stores, 2-3x slower still.
// Packed operands make every load of the outer kernel sequential (no power-of-two strides, no TLB
// misses) and need no edge handling.
// =================================================================================================
#define GEMM_PACK_CHUNKS 0
#define GEMM_PACK_TILES_FAST 1
#define GEMM_PACK_ROWS 2
#if GEMM_PACK_KC == 2 || GEMM_PACK_KC == 4 || GEMM_PACK_KC == 8 || GEMM_PACK_KC == 16
#define GEMM_PACK_VEC 1
#define GEMM_PV GEMM_CAT(GEMM_T, GEMM_PACK_KC)
#else
#define GEMM_PACK_VEC 0
#endif

// ST: the source's element type, LOAD1(p, i): element i of a source pointer as GEMM_T, LOADROW:
// GEMM_PACK_KC consecutive source elements as a GEMM_PV vector (Q may be 16-bit: GEMM_QS).
#define GEMM_PACK_KERNEL(NAME, TW, ST, LOAD1, LOADROW)                                            \
__kernel void NAME(const int rows, const int k, const int mode,                                   \
                   const __global ST* restrict x, const long x_off, const long x_sr,                \
                   const long x_sk, const long x_batch,                                             \
                   __global GEMM_T* restrict xp, const long xp_off, const long xp_batch) {          \
  const int g0 = get_global_id(0), g1 = get_global_id(1);                                          \
  const long bi = get_global_id(2);                                                                \
  GEMM_PACK_ROWS_MODE(TW, ST, LOAD1, LOADROW)                                                      \
  const int tfast = mode == GEMM_PACK_TILES_FAST;                                                  \
  const int k0 = (tfast ? g1 : g0) * GEMM_PACK_KC, t = tfast ? g0 : g1;                            \
  if (k0 >= k || t * (TW) >= rows) return;                                                         \
  x += x_off + bi * x_batch + (long)k0 * x_sk + (long)t * (TW) * x_sr;                             \
  xp += xp_off + bi * xp_batch + ((long)t * k + k0) * (TW);                                        \
  const int kn = min(GEMM_PACK_KC, k - k0), rv = min((TW), rows - t * (TW));                       \
  if (x_sr == 1 && rv == (TW)) {                                                                   \
    /* tile rows contiguous in memory: copy TW values per kk */                                    \
    for (int kk = 0; kk < kn; ++kk) {                                                              \
      _Pragma("unroll")                                                                            \
      for (int r = 0; r < (TW); ++r) xp[kk * (TW) + r] = LOAD1(x, r);                              \
      x += x_sk;                                                                                   \
    }                                                                                              \
  } else if (GEMM_PACK_VEC && x_sk == 1 && kn == GEMM_PACK_KC) {                                   \
    /* rows contiguous along k: one vector per row, scattered into the panel (where TW is a   */  \
    /* whole number of vectors the host launches GEMM_PACK_ROWS instead)                       */  \
    _Pragma("unroll")                                                                              \
    for (int r = 0; r < (TW); ++r) {                                                               \
      GEMM_T tmp[GEMM_PACK_KC];                                                                    \
      GEMM_PACK_STOREROW(tmp, x + min(r, rv - 1) * x_sr, r < rv, LOAD1, LOADROW);                  \
      _Pragma("unroll")                                                                            \
      for (int kk = 0; kk < GEMM_PACK_KC; ++kk) xp[kk * (TW) + r] = tmp[kk];                       \
    }                                                                                              \
  } else {                                                                                         \
    for (int r = 0; r < (TW); ++r) {                                                               \
      const __global ST* xr = x + min(r, rv - 1) * x_sr;                                           \
      if (r < rv) { for (int kk = 0; kk < kn; ++kk) xp[kk * (TW) + r] = LOAD1(xr, kk * x_sk); }    \
      else { for (int kk = 0; kk < kn; ++kk) xp[kk * (TW) + r] = (GEMM_T)0; }                      \
    }                                                                                              \
  }                                                                                                \
}

#if GEMM_PACK_VEC
// GEMM_PACK_ROWS (the comment above): KC rows r0.. of tile g1 (block g0) over all of k, the tail
// of k (k % KC values) element by element; rows from `rows` on are zeros
#define GEMM_PACK_ROWS_MODE(TW, ST, LOAD1, LOADROW)                                                \
  if (mode == GEMM_PACK_ROWS) {                                                                    \
    if (g0 * GEMM_PACK_KC >= (TW)) return;                                                         \
    const int r0 = g1 * (TW) + g0 * GEMM_PACK_KC, rv = rows - r0;                                  \
    const __global ST* xr = x + x_off + bi * x_batch;                                              \
    __global GEMM_T* xq = xp + xp_off + bi * xp_batch + (long)g1 * k * (TW) + g0 * GEMM_PACK_KC;   \
    int kb = 0;                                                                                    \
    for (; kb + GEMM_PACK_KC <= k; kb += GEMM_PACK_KC) {                                           \
      GEMM_T sq[GEMM_PACK_KC][GEMM_PACK_KC];                                                       \
      _Pragma("unroll")                                                                            \
      for (int r = 0; r < GEMM_PACK_KC; ++r)                                                       \
        GEMM_PACK_STOREROW(sq[r], xr + (long)min(r0 + r, rows - 1) * x_sr + kb, r < rv, LOAD1,     \
                           LOADROW);                                                               \
      _Pragma("unroll")                                                                            \
      for (int kk = 0; kk < GEMM_PACK_KC; ++kk) {                                                  \
        GEMM_T col[GEMM_PACK_KC];                                                                  \
        _Pragma("unroll")                                                                          \
        for (int r = 0; r < GEMM_PACK_KC; ++r) col[r] = sq[r][kk];                                 \
        GEMM_PACK_STORECOL(col, xq + (long)(kb + kk) * (TW));                                      \
      }                                                                                            \
    }                                                                                              \
    for (; kb < k; ++kb)                                                                           \
      for (int r = 0; r < GEMM_PACK_KC; ++r)                                                       \
        xq[(long)kb * (TW) + r] = r < rv ? LOAD1(xr + (long)(r0 + r) * x_sr, kb) : (GEMM_T)0;     \
    return;                                                                                        \
  }
#define GEMM_PACK_STOREROW(tmp, src, valid, LOAD1, LOADROW)                                        \
  GEMM_CAT(vstore, GEMM_PACK_KC)((valid) ? LOADROW(src) : (GEMM_PV)0, 0, tmp)
#define GEMM_PACK_STORECOL(col, p) GEMM_CAT(vstore, GEMM_PACK_KC)(GEMM_CAT(vload, GEMM_PACK_KC)(0, col), 0, p)
#else
#define GEMM_PACK_ROWS_MODE(TW, ST, LOAD1, LOADROW)  // the host asks for it only with vector KC
#define GEMM_PACK_STOREROW(tmp, src, valid, LOAD1, LOADROW)                                        \
  for (int e = 0; e < GEMM_PACK_KC; ++e) tmp[e] = (valid) ? LOAD1(src, e) : (GEMM_T)0
#define GEMM_PACK_STORECOL(col, p) for (int e = 0; e < GEMM_PACK_KC; ++e) (p)[e] = (col)[e]
#endif
#define GEMM_TLOAD1(p, i) ((p)[i])
#define GEMM_TLOADROW(p) GEMM_CAT(vload, GEMM_PACK_KC)(0, (p))
#define GEMM_QLOADROW(p) GEMM_QLOADN(GEMM_PACK_KC, p)

GEMM_PACK_KERNEL(pyrnn_gemm_pack_p, GEMM_TM, GEMM_T, GEMM_TLOAD1, GEMM_TLOADROW)
GEMM_PACK_KERNEL(pyrnn_gemm_pack_q, GEMM_TN, GEMM_QT, GEMM_QLOAD1, GEMM_QLOADROW)

// =================================================================================================
// tiled kernel (GPUs): D = alpha P Q + beta D (+ bias), P[i, kk] = p[i*p_si + kk*p_sk],
// Q[kk, j] = q[kk*q_sk + j*q_sj] (Q may be 16-bit: GEMM_QS), D[i, j] = d[i*d_si + j*d_sj]; any
// strides, so every transposition runs as it is stored (nothing packed, no C^T).
//
// A work-group of GEMM_LRN x GEMM_LRM work-items computes a GEMM_LBM x GEMM_LBN block of D. Per
// chunk of GEMM_LBK k values it copies P[block rows, chunk] and Q[chunk, block columns] into local
// memory (each element read once, consecutive work-items reading consecutive addresses: along k
// when that stride is 1, along the rows/columns otherwise; zeros beyond m, n, k), waits at a
// barrier, and each work-item accumulates its GEMM_LTM x GEMM_LTN register micro-tile from local
// memory: rows ly + r*GEMM_LRM, columns lx + s*GEMM_LRN (strided, so that neighbouring work-items
// read neighbouring local words and store neighbouring columns of D). Local rows are padded by one
// element: a chunk copied along k writes local words GEMM_LBM + 1 apart (no bank conflicts).
// GEMM_KBLK > 0: the k sum is two-level (a second register tile adds each block's sum).
// Compiled only with GEMM_LOCAL = 1 (the host routes every product here then, pyrnn_cl/gemm.py).
// Global: (column blocks * GEMM_LRN, row blocks * GEMM_LRM, batch), local (GEMM_LRN, GEMM_LRM, 1).
// =================================================================================================
#ifndef GEMM_LOCAL
#define GEMM_LOCAL 0       // 1: compile pyrnn_gemm_tiled (the host's GPU path)
#endif
#ifndef GEMM_LBM
#define GEMM_LBM 64        // tiled: rows of D per work-group
#endif
#ifndef GEMM_LBN
#define GEMM_LBN 64        // tiled: columns of D per work-group
#endif
#ifndef GEMM_LBK
#define GEMM_LBK 16        // tiled: k values per local-memory chunk
#endif
#ifndef GEMM_LTM
#define GEMM_LTM 4         // tiled: rows of D per work-item (divides GEMM_LBM)
#endif
#ifndef GEMM_LTN
#define GEMM_LTN 4         // tiled: columns of D per work-item (divides GEMM_LBN)
#endif

#if GEMM_LOCAL
#if GEMM_LBM % GEMM_LTM || GEMM_LBN % GEMM_LTN
#error "GEMM_LTM must divide GEMM_LBM and GEMM_LTN GEMM_LBN"
#endif
#define GEMM_LRM (GEMM_LBM / GEMM_LTM)   // work-items along m
#define GEMM_LRN (GEMM_LBN / GEMM_LTN)   // work-items along n
#define GEMM_LWG (GEMM_LRM * GEMM_LRN)   // work-items per group
#define GEMM_LPE ((GEMM_LBM * GEMM_LBK + GEMM_LWG - 1) / GEMM_LWG)   // P elements per work-item
#define GEMM_LQE ((GEMM_LBN * GEMM_LBK + GEMM_LWG - 1) / GEMM_LWG)   // Q elements per work-item

__kernel __attribute__((reqd_work_group_size(GEMM_LRN, GEMM_LRM, 1)))
void pyrnn_gemm_tiled(const int m, const int n, const int k, const GEMM_T alpha, const GEMM_T beta,
                      const __global GEMM_T* restrict p, const long p_off, const long p_si,
                      const long p_sk, const long p_batch,
                      const __global GEMM_QT* restrict q, const long q_off, const long q_sk,
                      const long q_sj, const long q_batch,
                      __global GEMM_T* d, const long d_off, const long d_si, const long d_sj,
                      const long d_batch, const int has_bias,
                      const __global GEMM_T* restrict bias, const long b_off,
                      const long b_si, const long b_sj) {
  __local GEMM_T ps[GEMM_LBK][GEMM_LBM + 1];
  __local GEMM_T qs[GEMM_LBK][GEMM_LBN + 1];
  const int lx = get_local_id(0), ly = get_local_id(1), tid = ly * GEMM_LRN + lx;
  const int j0 = get_group_id(0) * GEMM_LBN, i0 = get_group_id(1) * GEMM_LBM;
  const long bi = get_global_id(2);
  p += p_off + bi * p_batch;
  q += q_off + bi * q_batch;
  d += d_off + bi * d_batch;
  bias += b_off;
  // which index of a chunk runs fastest across work-items: the one with unit stride
  const int p_kfast = p_sk == 1, q_kfast = q_sk == 1 && q_sj != 1;

  GEMM_T acc[GEMM_LTM][GEMM_LTN];
#if GEMM_KBLK
  GEMM_T tot[GEMM_LTM][GEMM_LTN];
#endif
  #pragma unroll
  for (int r = 0; r < GEMM_LTM; ++r) {
    #pragma unroll
    for (int s = 0; s < GEMM_LTN; ++s) {
      acc[r][s] = (GEMM_T)0;
#if GEMM_KBLK
      tot[r][s] = (GEMM_T)0;
#endif
    }
  }

  for (int k0 = 0; k0 < k; k0 += GEMM_LBK) {
    // ---- chunk -> local memory (zeros outside the matrices) --------------------------------------
    #pragma unroll
    for (int l = 0; l < GEMM_LPE; ++l) {
      const int e = tid + l * GEMM_LWG;
      if ((GEMM_LBM * GEMM_LBK) % GEMM_LWG == 0 || e < GEMM_LBM * GEMM_LBK) {
        const int r = p_kfast ? e / GEMM_LBK : e % GEMM_LBM;
        const int c = p_kfast ? e % GEMM_LBK : e / GEMM_LBM;
        const int i = i0 + r, kk = k0 + c;
        ps[c][r] = (i < m && kk < k) ? p[(long)i * p_si + (long)kk * p_sk] : (GEMM_T)0;
      }
    }
    #pragma unroll
    for (int l = 0; l < GEMM_LQE; ++l) {
      const int e = tid + l * GEMM_LWG;
      if ((GEMM_LBN * GEMM_LBK) % GEMM_LWG == 0 || e < GEMM_LBN * GEMM_LBK) {
        const int s = q_kfast ? e / GEMM_LBK : e % GEMM_LBN;
        const int c = q_kfast ? e % GEMM_LBK : e / GEMM_LBN;
        const int j = j0 + s, kk = k0 + c;
        qs[c][s] = (j < n && kk < k) ? GEMM_QLOAD1(q, (long)kk * q_sk + (long)j * q_sj)
                                     : (GEMM_T)0;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // ---- register micro-tile from local memory ----------------------------------------------------
    #pragma unroll
    for (int c = 0; c < GEMM_LBK; ++c) {
      GEMM_T av[GEMM_LTM], bv[GEMM_LTN];
      #pragma unroll
      for (int r = 0; r < GEMM_LTM; ++r) av[r] = ps[c][ly + r * GEMM_LRM];
      #pragma unroll
      for (int s = 0; s < GEMM_LTN; ++s) bv[s] = qs[c][lx + s * GEMM_LRN];
      #pragma unroll
      for (int r = 0; r < GEMM_LTM; ++r) {
        #pragma unroll
        for (int s = 0; s < GEMM_LTN; ++s) acc[r][s] = GEMM_MAD(av[r], bv[s], acc[r][s]);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

#if GEMM_KBLK
    // a block of GEMM_KBLK k values ends in this chunk: add its sum to the total
    if ((k0 + GEMM_LBK) / GEMM_KBLK != k0 / GEMM_KBLK) {
      #pragma unroll
      for (int r = 0; r < GEMM_LTM; ++r) {
        #pragma unroll
        for (int s = 0; s < GEMM_LTN; ++s) { tot[r][s] += acc[r][s]; acc[r][s] = (GEMM_T)0; }
      }
    }
#endif
  }

  // ---- store: beta == 0 never reads D ------------------------------------------------------------
  #pragma unroll
  for (int r = 0; r < GEMM_LTM; ++r) {
    const int i = i0 + ly + r * GEMM_LRM;
    if (i >= m) break;
    __global GEMM_T* drow = d + (long)i * d_si;
    #pragma unroll
    for (int s = 0; s < GEMM_LTN; ++s) {
      const int j = j0 + lx + s * GEMM_LRN;
#if GEMM_KBLK
      const GEMM_T sum = tot[r][s] + acc[r][s];
#else
      const GEMM_T sum = acc[r][s];
#endif
      if (j < n) GEMM_STORE1(drow + (long)j * d_sj, sum, GEMM_BIAS1(i, j));
    }
  }
}
#endif  // GEMM_LOCAL
