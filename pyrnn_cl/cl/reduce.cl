// =================================================================================================
// reduce.cl -- column sums of a row-major matrix (bias gradients: sum over the T*N rows)
//
//   out[c][j] = beta * out[c][j] + sum of rows c*rb .. min(rows, c*rb + rb) - 1 of A, column j
//                                                   A: [rows x cols], row i at a + i*lda
//                                                   (beta == 0: out is not read)
//
// One work-item per (strip of REDUCE_NV vectors of REDUCE_VW columns, chunk c of rb rows, batch
// entry): it reads a few contiguous cache lines per row over a short run of rows. (PoCL runs the
// work-items of a group one after another, so a work-item walking all rows of a narrow strip
// strides through memory: two passes - chunks into partial sums, then the partials with one
// chunk - were 2.5-3x faster for 1600 x 2048 on two cores.) The NV vectors are independent
// accumulation chains.
//
// Global dimension 0: column strips (rounded up to the work-group size), 1: chunks, 2: batch
// (A_b = a + a_off + b*a_batch, out_b = out + out_off + b*out_batch, chunk c at + c*out_chunk;
// strides in elements). A strip crossing cols runs a scalar loop. No barriers.
// =================================================================================================

#include "common.h"

#ifndef REDUCE_VW
#if PYRNN_DTYPE == 2
#define REDUCE_VW 8        // columns per vector (1, 2, 4, 8 or 16)
#else
#define REDUCE_VW 16
#endif
#endif
#ifndef REDUCE_NV
#define REDUCE_NV 4        // vectors per work-item
#endif

#if PYRNN_DTYPE == 2
#define REDUCE_T double
#else
#define REDUCE_T float
#endif
#define REDUCE_CAT_(a, b) a##b
#define REDUCE_CAT(a, b) REDUCE_CAT_(a, b)
#if REDUCE_VW == 1
#define REDUCE_V REDUCE_T
#define REDUCE_VLOAD(p) (*(p))
#define REDUCE_VSTORE(v, p) (*(p) = (v))
#else
#define REDUCE_V REDUCE_CAT(REDUCE_T, REDUCE_VW)
#define REDUCE_VLOAD(p) REDUCE_CAT(vload, REDUCE_VW)(0, p)
#define REDUCE_VSTORE(v, p) REDUCE_CAT(vstore, REDUCE_VW)(v, 0, p)
#endif

__kernel void pyrnn_sum_rows(const int rows, const int cols, const int rb, const REDUCE_T beta,
                             const __global REDUCE_T* restrict a, const long a_off, const long lda,
                             const long a_batch,
                             __global REDUCE_T* out, const long out_off, const long out_chunk,
                             const long out_batch) {
  const int j0 = get_global_id(0) * (REDUCE_VW * REDUCE_NV), c = get_global_id(1);
  if (j0 >= cols) return;
  const long bi = get_global_id(2);
  const int i0 = c * rb, i1 = min(rows, i0 + rb);
  a += a_off + bi * a_batch + j0;
  out += out_off + bi * out_batch + c * out_chunk + j0;

  if (j0 + REDUCE_VW * REDUCE_NV <= cols) {
    REDUCE_V acc[REDUCE_NV];
    #pragma unroll
    for (int v = 0; v < REDUCE_NV; ++v) acc[v] = (REDUCE_V)0;
    for (int i = i0; i < i1; ++i) {
      #pragma unroll
      for (int v = 0; v < REDUCE_NV; ++v) acc[v] += REDUCE_VLOAD(a + (long)i * lda + v * REDUCE_VW);
    }
    #pragma unroll
    for (int v = 0; v < REDUCE_NV; ++v) {
      __global REDUCE_T* o = out + v * REDUCE_VW;
      if (beta == (REDUCE_T)0) REDUCE_VSTORE(acc[v], o);
      else REDUCE_VSTORE(mad((REDUCE_V)beta, REDUCE_VLOAD(o), acc[v]), o);
    }
  } else {
    for (int e = 0; e < cols - j0; ++e) {
      REDUCE_T s = (REDUCE_T)0;
      for (int i = i0; i < i1; ++i) s += a[(long)i * lda + e];
      out[e] = (beta == (REDUCE_T)0) ? s : mad(beta, out[e], s);
    }
  }
}
