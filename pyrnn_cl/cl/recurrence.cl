/* recurrence.cl -- the generic gate-recurrence engine: the only kernels that index RNN tensors.
 * A program is one cell file (cells/<cell>.cl, pure pointwise maths) followed by this file.
 *
 * Layouts (row-major, element offsets; D directions, G = CELL_G gates, K = recurrent width:
 * H, or P with an LSTM projection):
 *   gx   [T][N][D][G][H]   input projection x W^T + b_x, gate blocks in the USER's order; the forward
 *                          kernels overwrite it in place with the saved gates (MPSGraph's z_state)
 *   y    [T][N][D][K]      outputs h[t] (or r[t] = W_proj h[t]); zero where t >= len[n]
 *   cs   [T][N][D][H]      LSTM cell sequence;  hs [T][N][D][H] h before the projection
 *   R    [D][G*H][K]       recurrent weights, user layout (only the pack kernels read it)
 *   rpk  [D][HV][K][G][VW]  R packed per vector of VW hidden units, canonical gate slots (forward);
 *                          HV = ceil(H/VW), the padding units of a partial last vector zero
 *                          (REC_TAIL, below)
 *   rt   [D][KV][G*H][VW]   R transposed per vector of VW columns, user rows (backward dh = dgh R),
 *                          KV = ceil(K/VW); wt is W_proj [D][P][H] packed the same way
 *                          ([D][H/VW][P][VW]; a projection's P and H are multiples of VW)
 *   Packs (rpk, rt, wt and the W packs) hold pack_t: the compute dtype, or with PACK_DTYPE 3/4
 *   the 16-bit weights as stored, widened as the products read them (LOAD_PACKV, pack.h)
 *   h0, c0, dh0, dc0, final states: [D][N][K] addressed with explicit (direction, batch) strides
 * Canonical gate slot k lives in user block GATE_BLK_k. Direction d runs reversed when bit d of
 * rev_mask is set. Forward step s of direction d is time t = s, or T-1-s reversed. Rows with
 * t >= len[n] are skipped: zero outputs; h[t-1] of a row is y[t-1] if that step was valid, else h0.
 *
 * Work split of every step kernel: global (ceil(N/NB) * KS, D*ceil(W/VW)); a tile of VW consecutive
 * units of one direction for NB batch rows keeps NB x gates vector accumulators (the register
 * tile) while it streams its contiguous weight slab once. With REC_KS = 1 (CPUs) one work-item
 * owns a tile; with REC_KS > 1 (GPUs) a work-group of KS work-items, local size (KS, 1), shares
 * it: lane l takes the product's terms l, l + KS, ... (neighbouring lanes read neighbouring
 * weights and inputs), a tree in local memory sums the lanes' accumulators (lane_sum), and lane
 * 0 alone runs the cell maths and writes. Tunables (pyrnn_cl/tuning.py SPACE "recurrence"):
 * REC_VW vector width, REC_NB batch rows per tile, REC_KS lanes per tile, REC_WG work-items per
 * group along dimension 0 when REC_KS = 1 (host only).
 *
 * ---- The cell contract ------------------------------------------------------------------------
 * A cell file (cl/cells/<cell>.cl, or one registered with pyrnn_cl.register_cell) holds only
 * pointwise maths on vectors of VW units (realV, from common.h, which it includes). It declares
 *
 *   CELL_G            gates per unit, 1..4: canonical slots 0..G-1 (the weight blocks GATE_BLK_k)
 *   CELL_STATES       1 (h) or 2 (h and a cell state c, kept in cs)
 *   CELL_LATE_GATE    -1, or for a two-phase cell the slot whose value g multiplies h[t-1] in the
 *                     recurrent product of the last slot L = G-1, which is then read late:
 *                     gh_L = (h[t-1] . m . g) R_L^T + b_h,L, in a second kernel per step
 *   CELL_HN_SLOT      -1, or the slot whose recurrent pre-activation hn = (h[t-1] . m) R_k^T
 *                     + b_h,k cell_bwd needs (recomputed); its hidden-side gradient dgh_k may
 *                     differ from the input side's dgx_k
 *   CELL_PEEP_SLOTS   bitmask of the slots a peephole p_k couples to c[t-1] (default 0)
 *   CELL_PEEP_NEW_C   -1, or the slot whose peephole multiplies the new c[t] instead (default -1)
 *   CELL_BWD_NEEDS_Y  1: the backward is given y for h[t-1]; 0: the file defines cell_h, which
 *                     rebuilds h[t] from the saved gates (and c[t])
 *   CELL_USES_HPREV   1: cell_fwd / cell_bwd use h_prev (a direct path h[t-1] -> h[t], carry_h)
 *
 * and defines (a[k] = gx[k] + gh[k] is slot k's pre-activation, m the recurrent-input mask, the
 * activations ACT_k are defines; sav[k] is what the forward saves of slot k, post-activation or
 * pre-, the file's choice; the backward returns pre-activation gradients):
 *
 *   void cell_fwd(gx[G], gh[G], h_prev, m, c_prev, peep[G], clip, sav[G] out, *h, *c)
 *       gh[L] is zero in a two-phase cell, which saves slots 0..L-1 and returns in *h the input
 *       of the late product, h[t-1] . m . g
 *   void cell_bwd(sav[G], h_prev, m, c_prev, c, hn, peep[G], clip, dh, dc,
 *                 dgx[G] out, dgh[G] out, *carry_h, *carry_c)
 *       dh, dc: dL/dh[t] and dL/dc[t]; dgx / dgh: gradients of the input-side / hidden-side
 *       pre-activations; carry_h / carry_c: dL/dh[t-1] and dL/dc[t-1] not through R
 *   two-phase cells also:
 *   void cell_fwd_b(sav[G], gx_L, gh_L, h_prev, *s_L, *h)     slot L and h[t] (sav[0..L-1] given)
 *   void cell_bwd_b(g, h_prev, m, q, *da_g, *carry_h)       q = dL/d(h[t-1] . m . g): ADDS g's
 *       path to the late gate's pre-activation gradient *da_g (what cell_bwd wrote there) and
 *       to *carry_h
 *   realV cell_h(sav[G], c)   when CELL_BWD_NEEDS_Y is 0
 *
 * The host passes its registry's view of the cell as PYRNN_CELL_* defines (pyrnn_cl/cells.py);
 * every declaration above is checked against it here, so a cell file and its registration that
 * disagree do not build.
 */
#include "common.h"
#include "pack.h"            /* pack_t, LOAD_PACKV (the pack kernels: pack.cl, a program of its own) */

#ifndef CELL_G
#error "include a cells/<cell>.cl file before recurrence.cl"
#endif
#if !defined(CELL_STATES) || !defined(CELL_LATE_GATE) || !defined(CELL_HN_SLOT) || \
    !defined(CELL_BWD_NEEDS_Y) || !defined(CELL_USES_HPREV)
#error "a cell file declares CELL_G, CELL_STATES, CELL_LATE_GATE, CELL_HN_SLOT, CELL_BWD_NEEDS_Y and CELL_USES_HPREV"
#endif
#ifndef CELL_PEEP_SLOTS
#define CELL_PEEP_SLOTS 0
#endif
#ifndef CELL_PEEP_NEW_C
#define CELL_PEEP_NEW_C -1
#endif
#if CELL_G < 1 || CELL_G > 4
#error "cell contract: CELL_G must be 1..4"
#endif
#if CELL_STATES != 1 && CELL_STATES != 2
#error "cell contract: CELL_STATES must be 1 or 2"
#endif
#if CELL_LATE_GATE >= CELL_G - 1 || (CELL_LATE_GATE >= 0 && CELL_HN_SLOT >= 0)
#error "cell contract: CELL_LATE_GATE must precede the last slot, and excludes CELL_HN_SLOT"
#endif
#ifdef PYRNN_CELL_G
#if CELL_G != PYRNN_CELL_G
#error "cell file and cell registry disagree: gate count (CELL_G)"
#endif
#if CELL_STATES != PYRNN_CELL_STATES
#error "cell file and cell registry disagree: state count (CELL_STATES)"
#endif
#if CELL_LATE_GATE != PYRNN_CELL_LATE_GATE
#error "cell file and cell registry disagree: two-phase late gate (CELL_LATE_GATE)"
#endif
#if CELL_HN_SLOT != PYRNN_CELL_HN_SLOT
#error "cell file and cell registry disagree: hn slot (CELL_HN_SLOT)"
#endif
#if CELL_PEEP_SLOTS != PYRNN_CELL_PEEP_SLOTS || CELL_PEEP_NEW_C != PYRNN_CELL_PEEP_NEW_C
#error "cell file and cell registry disagree: peephole slots (CELL_PEEP_SLOTS, CELL_PEEP_NEW_C)"
#endif
#if CELL_BWD_NEEDS_Y != PYRNN_CELL_BWD_NEEDS_Y
#error "cell file and cell registry disagree: whether the backward needs y (CELL_BWD_NEEDS_Y)"
#endif
#endif

/* The last vector of units. A layer whose H is no multiple of REC_VW (REC_TAIL = 1, the host's
 * define) pads its units to whole vectors, ceil(H / REC_VW) of them (pyrnn_cl.plan: fewer, wider
 * vectors than the largest divisor of H allows; H = 100 takes 7 vectors of 16 rather than 25 of
 * 4). The packs hold zeros for the padding units, so the products compute them as they do the
 * others, and only the last vector of a row, where nu = H - j < REC_VW of its units exist, is read
 * (LOADU: the rest read as zero) and written (STOREU: the rest left alone) element by element. A
 * padding unit's value lives in registers only: it is never stored, and no unit reads another's.
 * With REC_TAIL = 0 LOADU and STOREU are LOADV and STOREV. The element loops stay loops (unroll
 * 1): unrolled, each of the ~40 call sites became REC_VW conditional accesses, and Intel's CPU
 * compiler took 2-4x as long over a program with a partial vector as over one without. */
#ifndef REC_TAIL
#define REC_TAIL 0
#endif
#if REC_TAIL && REC_VW > 1
PYRNN_FUNC realV load_units(__global const real *p, const int nu)
{
    if (nu >= REC_VW) return LOADV(p);
    real e[REC_VW];
    PYRNN_CAT(vstore, REC_VW)(VZERO, 0, e);
#pragma unroll 1
    for (int i = 0; i < nu; ++i) e[i] = p[i];
    return PYRNN_CAT(vload, REC_VW)(0, e);
}

PYRNN_FUNC void store_units(const realV v, __global real *p, const int nu)
{
    if (nu >= REC_VW) {
        STOREV(v, p);
        return;
    }
    real e[REC_VW];
    PYRNN_CAT(vstore, REC_VW)(v, 0, e);
#pragma unroll 1
    for (int i = 0; i < nu; ++i) p[i] = e[i];
}
#define LOADU(p, nu) load_units((p), (nu))
#define STOREU(v, p, nu) store_units((v), (p), (nu))
#else
#define LOADU(p, nu) LOADV(p)
#define STOREU(v, p, nu) STOREV((v), (p))
#endif

#if REC_TAIL && HAS_PROJ
#error "a projection's P and H are multiples of REC_VW (no partial vector of units)"
#endif

/* Derived: gates whose recurrent product the first fused kernel computes (all but the late slot
 * of a two-phase cell), a cell state, cell_h available, hn needed. */
#define CELL_GA (CELL_LATE_GATE >= 0 ? CELL_G - 1 : CELL_G)
#define CELL_HAS_C (CELL_STATES == 2)
#define CELL_H_SAVED (!CELL_BWD_NEEDS_Y)
#define CELL_NEEDS_HN (CELL_HN_SLOT >= 0)

#ifndef REC_NB
#define REC_NB 4            /* batch rows per work-item */
#endif
#ifndef REC_SEQ_LOOP
#define REC_SEQ_LOOP 1      /* whole-sequence kernels: 1, one work-item per batch-row group and
                             * direction that loops over the vectors of units (CPUs, where a
                             * work-group runs on one thread anyway); 0, a work-group of one
                             * work-item per vector of units (GPUs) */
#endif
#ifndef REC_KS
#define REC_KS 1            /* work-items sharing a tile's products (a power of two) */
#endif
#if REC_KS < 1 || (REC_KS & (REC_KS - 1))
#error "REC_KS must be a power of two"
#endif
#ifndef GATE_BLK_0
#define GATE_BLK_0 0        /* user block holding canonical gate slot 0 */
#endif
#ifndef GATE_BLK_1
#define GATE_BLK_1 1
#endif
#ifndef GATE_BLK_2
#define GATE_BLK_2 2
#endif
#ifndef GATE_BLK_3
#define GATE_BLK_3 3
#endif
#ifndef HAS_MASK
#define HAS_MASK 0          /* recurrent-input mask m [T][N][D][H] multiplies h[t-1] */
#endif
#ifndef HAS_LEN
#define HAS_LEN 0           /* per-row sequence lengths */
#endif
#ifndef HAS_HB
#define HAS_HB 0            /* hidden-side bias b_h added to the recurrent product: direction d's
                               G*H values at hb + hb_off + d * hb_sd */
#endif
#ifndef HAS_PEEP
#define HAS_PEEP 0          /* per-unit cell parameters [D][G*H] (LSTM peepholes) */
#endif
#ifndef HAS_PROJ
#define HAS_PROJ 0          /* LSTM projection r = W_proj h (K = P) */
#endif
#ifndef HAS_XW
#define HAS_XW 0            /* forward: the input product x[t] W^T (+ b_x) computed in the step
                             * kernel from the source and packed W (small layers) instead of a
                             * precomputed gx; gx then only receives the saved gates */
#endif
/* HAS_XW: direction d's input bias b_x (G*H values) as this work-group reads it: where it lies
 * (xb_off, one direction xb_sd further: a [D][G*H] array, or the cuDNN dialect's params), or in
 * the group's own widened copy of a 16-bit one (xb_sg apart, widen_inputs) */
#define XB_AT(d) (xb + xb_off + row_group() * xb_sg + (d) * xb_sd)
#ifndef HAS_DY
#define HAS_DY 1            /* upstream gradient of y */
#endif
#ifndef HAS_DHN
#define HAS_DHN 0           /* gradient of the final h */
#endif
#ifndef HAS_DCN
#define HAS_DCN 0           /* gradient of the final c */
#endif
#ifndef HAS_DCS
#define HAS_DCS 0           /* per-step gradient of c[t] (TensorFlow's cs_grad) */
#endif
#ifndef BWD_PROGRAM
#define BWD_PROGRAM 0       /* which kernels the program holds: 0 the forward's (and the helpers
                             * pyrnn_final, pyrnn_gather_hin, pyrnn_peep_grad, which the backward
                             * takes from the forward's program), 1 the backward's. The backward's
                             * defines differ anyway (HAS_DY, HAS_DHN, REC_NB), so each layer had
                             * two programs holding every kernel: an implementation that compiles
                             * a whole program at once (Intel's) compiled each kernel twice */
#endif
#ifndef REC_PART
#define REC_PART 0          /* and which of those: 0 all; 1 the step kernels; 2 the whole-sequence
                             * kernel; 3 the helpers (forward program). The engine builds a part
                             * on the first use of one of its kernels (pyrnn_cl.engine.KERNEL_PARTS):
                             * a layer runs either the step or the whole-sequence kernels, and
                             * Intel's runtime and GPU drivers compile every kernel of a program */
#endif
#define STEP_PART (REC_PART == 0 || REC_PART == 1)
#define SEQ_PART (REC_PART == 0 || REC_PART == 2)
#define HELPER_PART (REC_PART == 0 || REC_PART == 3)

/* Register tiles: the small loops over batch rows and gates must be unrolled so the accumulators
 * live in registers (clang's loop pragma; harmless where a compiler ignores it). Without it PoCL
 * kept the tile in memory and the step ran about 8x slower. */
#ifndef PYRNN_UNROLL
#define PYRNN_UNROLL _Pragma("unroll")
#endif

/* `n`, in a form the compiler cannot prove equal on every work-item (the comparison is never true).
 * In a kernel with barriers, PoCL turns each loop with a provably uniform trip count into a
 * barrier region, to vectorise it across work-items; the register tile of the product loops then
 * moves to per-work-item memory (measured 2.5-5x slower in pyrnn_fwd_seq). */
PYRNN_FUNC int wi_bound(int n)
{
    return get_local_id(0) > (size_t)0x7fffffff ? 0 : n;
}

/* The vectors of REC_VW units that hold H units: the last one partial under REC_TAIL. */
PYRNN_FUNC int unit_vectors(const int H)
{
    return (H + REC_VW - 1) / REC_VW;
}

/* Direction d of this work-item, the first unit j of its vector of units, and D, the number of
 * directions. Dimension 1 of a step launch has a work-item per vector of units of every direction
 * (D * HV), but in a whole-sequence launch with REC_SEQ_LOOP one work-item per direction, which
 * runs every vector of units in turn (`loop` 1, the vector `uv`). */
PYRNN_FUNC void step_unit(const int H, const int loop, const int uv, int *D, int *d, int *j)
{
    const int HV = unit_vectors(H);
    *D = loop ? (int)get_global_size(1) : (int)get_global_size(1) / HV;
    *d = loop ? (int)get_global_id(1) : (int)get_global_id(1) / HV;
    *j = (loop ? uv : (int)get_global_id(1) % HV) * REC_VW;
}

/* The tile's batch-row group (dimension 0 counts REC_KS work-items per group) and this
 * work-item's lane in it: the first term of the product it sums, in steps of REC_KS. */
PYRNN_FUNC int row_group(void)
{
    return REC_KS > 1 ? (int)(get_global_id(0) / REC_KS) : (int)get_global_id(0);
}

PYRNN_FUNC int k_lane(void)
{
    return REC_KS > 1 ? (int)(get_local_id(0) % REC_KS) : 0;
}

#if REC_KS > 1
/* The local buffer a kernel passes to lane_sum: room for the largest tile, REC_NB x gates
 * vectors of each of the REC_KS lanes (a work-group is one tile). */
#define LANE_BUF __local realV lane_buf[REC_NB * CELL_G * REC_KS]
#define LANE_SUM(v, count) lane_sum(v, count, lane_buf)

/* v[0 .. count) summed over the lanes of the tile; every lane gets the sums. A fixed tree (the
 * result does not depend on timing); count is a constant after inlining, so v stays in
 * registers. Every lane of the work-group must call it. */
PYRNN_FUNC void lane_sum(realV *v, const int count, __local realV *buf)
{
    const int lane = k_lane();
    PYRNN_UNROLL
    for (int i = 0; i < count; ++i) buf[i * REC_KS + lane] = v[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = REC_KS / 2; w > 0; w >>= 1) {
        if (lane < w) {
            PYRNN_UNROLL
            for (int i = 0; i < count; ++i) buf[i * REC_KS + lane] += buf[i * REC_KS + lane + w];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    PYRNN_UNROLL
    for (int i = 0; i < count; ++i) v[i] = buf[i * REC_KS];
    barrier(CLK_LOCAL_MEM_FENCE);       /* the buffer may be used again */
}

/* lane_sum of a tile's accumulators a[REC_NB][CELL_G]: through a flat copy (constant indices
 * after unrolling: registers), since indexing a[0] past its CELL_G vectors, as a flat pointer
 * would, reads and writes outside that row (Oclgrind: "Index (4) exceeds static array size") */
PYRNN_FUNC void lane_sum_tile(realV a[REC_NB][CELL_G], __local realV *buf)
{
    realV f[REC_NB * CELL_G];
    PYRNN_UNROLL
    for (int b = 0; b < REC_NB; ++b) {
        PYRNN_UNROLL
        for (int k = 0; k < CELL_G; ++k) f[b * CELL_G + k] = a[b][k];
    }
    lane_sum(f, REC_NB * CELL_G, buf);
    PYRNN_UNROLL
    for (int b = 0; b < REC_NB; ++b) {
        PYRNN_UNROLL
        for (int k = 0; k < CELL_G; ++k) a[b][k] = f[b * CELL_G + k];
    }
}
#define LANE_SUM_TILE(a) lane_sum_tile(a, lane_buf)
#define LANE_PARAM , __local realV *lane_buf
#define LANE_ARG , lane_buf
/* lanes other than 0 leave after the last sum (a helper's return: the caller's barriers stay) */
#define LANES_DONE() if (k_lane() != 0) return
#else
#define LANE_BUF
#define LANE_SUM(v, count)
#define LANE_SUM_TILE(a)
#define LANE_PARAM
#define LANE_ARG
#define LANES_DONE()
#endif

PYRNN_FUNC int gate_blk(int k)
{
    return k == 0 ? GATE_BLK_0 : k == 1 ? GATE_BLK_1 : k == 2 ? GATE_BLK_2 : GATE_BLK_3;
}

PYRNN_FUNC int row_len(__global const int *lens, int n, int T)
{
#if HAS_LEN
    return min(lens[n], T);
#else
    return T;
#endif
}

/* Offset of element (t, n, d, 0) in a [T][N][D][W] tensor. */
PYRNN_FUNC long seq_off(int t, int n, int d, int N, int D, int W)
{
    return ((long)t * N + n) * (long)D * W + (long)d * W;
}

/* Offset of (n, d) of step t in a two-step ring [2][N][D][W]: step t writes slot t % 2, the next
 * step processed (t -+ 1) reads it. The backward keeps its carries (dL/dh[t-1] and dL/dc[t-1] not
 * through R, W = H) and, across chunks, its hidden-side gate gradients (gring, W = G*H) so. */
PYRNN_FUNC long ring_off(int t, int n, int d, int N, int D, int W)
{
    return seq_off(t & 1, n, d, N, D, W);
}

/* The backward writes gate gradients (and dr) in chunks of steps: a chunk buffer [s_hi - s_lo][N]
 * [D][W] holds the steps s_lo .. s_hi-1 of every direction, each direction's earliest time of the
 * chunk in row 0 (time s_lo; reversed, T - s_hi). The weight-gradient GEMMs consume a chunk before
 * the next one overwrites it, so the workspace does not grow with T. With `ring` set the hidden-side
 * gate gradients of the last two steps are also kept in gring [2][N][D][G*H] (slot t % 2), where
 * the next step reads them (they may lie in the previous chunk); without, the one chunk holds
 * every step and is read directly. */
#define CHUNK_PARAMS const int s_lo, const int s_hi, const int ring, __global real *gring
#define CHUNK_ARGS s_lo, s_hi, ring, gring

/* The time in row 0 of a chunk buffer for a direction (reversed: the chunk's steps are times
 * T - s_hi .. T - s_lo - 1). */
PYRNN_FUNC int chunk_t0(int rev, int T, int s_lo, int s_hi)
{
    return rev ? T - s_hi : s_lo;
}

PYRNN_FUNC long chunk_off(int t, int n, int d, int rev, int T, int s_lo, int s_hi, int N, int D,
                          int W)
{
    return seq_off(t - chunk_t0(rev, T, s_lo, s_hi), n, d, N, D, W);
}

/* The hidden-side gate gradients [G*H] of (tn, n, d), a step processed before the current one. */
PYRNN_FUNC __global const real *prev_gates(__global const real *dgh, int tn, int n, int d,
                                           int rev, int T, int N, int D, int GH, CHUNK_PARAMS)
{
    return ring ? gring + ring_off(tn, n, d, N, D, GH)
                : dgh + chunk_off(tn, n, d, rev, T, s_lo, s_hi, N, D, GH);
}

/* The per-unit inputs of the cell maths for units j .. j+VW of one row (nu of them exist): h[t-1]
 * (when the cell reads it), the mask m[t] (ones without one) and c[t-1] (zero without a cell
 * state). Shared by the forward and backward step. */
PYRNN_FUNC void unit_inputs(__global const real *hrow, __global const real *mrow,
                            __global const real *crow, int j, int nu, realV *hp, realV *mv,
                            realV *cp)
{
#if CELL_USES_HPREV
    *hp = LOADU(hrow + j, nu);
#else
    *hp = VZERO;
#endif
#if HAS_MASK
    *mv = LOADU(mrow + j, nu);
#else
    *mv = VONE;
#endif
#if CELL_HAS_C
    *cp = LOADU(crow + j, nu);
#else
    *cp = VZERO;
#endif
}

/* Time whose output is h[t-1] of time t in a direction; -1 when that is h0. */
PYRNN_FUNC int prev_time(int t, int rev, int len, int T)
{
    int tp = rev ? t + 1 : t - 1;
    return (tp >= 0 && tp < T && tp < len) ? tp : -1;
}

/* acc[b][k] += sum_{m < K} (h_b[m] . mask_b[m]) * W[m][k0 + k] for k < ng: the forward product
 * through packed weights; slab = rpk at (direction, vector of units). `masked` = 0: rows are
 * used as they are (the input product x[t] W^T of HAS_XW).
 * The register tile (REC_NB x ng vectors) is a local array indexed only inside unrolled loops
 * with constant bounds (ng is a constant after inlining), so it lives in registers; the caller's
 * `acc` may then be indexed freely. */
PYRNN_FUNC void packed_product(realV acc[REC_NB][CELL_G], __global const real *const rows[REC_NB],
                               __global const real *const mrows[REC_NB],
                               __global const pack_t *slab, int K, int k0, int ng, int masked)
{
    realV a[REC_NB][CELL_G];
    __global const real *r[REC_NB];
    __global const real *mr[REC_NB];
    PYRNN_UNROLL
    for (int b = 0; b < REC_NB; ++b) {
        r[b] = rows[b];
        mr[b] = mrows[b];
        PYRNN_UNROLL
        for (int k = 0; k < CELL_G; ++k) a[b][k] = VZERO;
    }
    const int m_end = wi_bound(K);
    for (int m = k_lane(); m < m_end; m += REC_KS) {
        realV w[CELL_G];
        PYRNN_UNROLL
        for (int k = 0; k < CELL_G; ++k)
            if (k < ng) w[k] = LOAD_PACKV(slab + ((long)m * CELL_G + k0 + k) * REC_VW);
        PYRNN_UNROLL
        for (int b = 0; b < REC_NB; ++b) {
#if HAS_MASK
            const realV x = (realV)(masked ? r[b][m] * mr[b][m] : r[b][m]);
#else
            const realV x = (realV)(r[b][m]);
#endif
            PYRNN_UNROLL
            for (int k = 0; k < CELL_G; ++k)
                if (k < ng) a[b][k] = fma(x, w[k], a[b][k]);
        }
    }
    PYRNN_UNROLL
    for (int b = 0; b < REC_NB; ++b) {
        PYRNN_UNROLL
        for (int k = 0; k < CELL_G; ++k)
            if (k < ng) acc[b][k] += a[b][k];
    }
}

/* acc[b] += sum_{i < nrows} src_b[soff + i] * Wt[i][0 .. VW): the backward reduction through a
 * transposed pack (pyrnn_pack_t); slab = the pack at (direction, vector of output units, first row).
 * Rows that must not contribute point `src` at a zero row (kernel argument `zrow`), so the loop has
 * no branches. Two interleaved accumulator sets give every vector FMA pipe independent chains. */
PYRNN_FUNC void column_product(realV acc[REC_NB], __global const real *const src[REC_NB], int soff,
                               __global const pack_t *slab, int nrows)
{
    realV a0[REC_NB], a1[REC_NB];
    __global const real *x[REC_NB];
    PYRNN_UNROLL
    for (int b = 0; b < REC_NB; ++b) {
        x[b] = src[b] + soff;
        a0[b] = VZERO;
        a1[b] = VZERO;
    }
    const int pairs = wi_bound(nrows / 2);
    for (int i = k_lane(); i < pairs; i += REC_KS) {
        const realV w0 = LOAD_PACKV(slab + (long)(2 * i) * REC_VW);
        const realV w1 = LOAD_PACKV(slab + (long)(2 * i + 1) * REC_VW);
        PYRNN_UNROLL
        for (int b = 0; b < REC_NB; ++b) {
            a0[b] = fma((realV)(x[b][2 * i]), w0, a0[b]);
            a1[b] = fma((realV)(x[b][2 * i + 1]), w1, a1[b]);
        }
    }
    if ((nrows & 1) && k_lane() == 0) {
        const realV w0 = LOAD_PACKV(slab + (long)(nrows - 1) * REC_VW);
        PYRNN_UNROLL
        for (int b = 0; b < REC_NB; ++b) a0[b] = fma((realV)(x[b][nrows - 1]), w0, a0[b]);
    }
    PYRNN_UNROLL
    for (int b = 0; b < REC_NB; ++b) acc[b] += a0[b] + a1[b];
}

/* ---- 16-bit inputs and results of the whole-sequence kernels ----------------------------------
 * A call whose arrays are float16 or bfloat16 computes in float32. Its whole-sequence forward
 * converts what it reads and writes itself, instead of a conversion launch before it and one
 * after it: on a CPU device each launch costs tens of microseconds, a tenth of a small layer's
 * forward (an LSTM 128/64, N = 8, T = 100: 12 % of its time for the launch before it alone).
 * The storage code s16 (3 float16, 4 bfloat16, 0 a float32 call) is a kernel argument, so
 * 16-bit calls run the programs of float32 calls (fixing it at build time measured 1-3 %
 * faster, at one more build per layer and 16-bit dtype).
 *   Inputs (widen_inputs, before the first step): the source x, the input bias b and the initial
 *   states h0, c0, each where its bit of `in16` is set (1, 2, 4, 8), are read from x16, xb16,
 *   h016, c016 and widened into the float32 buffers the steps then read (xs, xb, h0, c0). Each
 *   work-group widens what it reads, so no group waits for another: x into its direction's copy
 *   (xs + d * xs_sd), b into its batch-row group's copy (XB_AT(d): xb_sg apart), and the
 *   rows of h0 and c0 it owns (the same layout and strides as the 16-bit arrays). Every value
 *   of a 16-bit dtype is a float32: the widening is exact.
 *   Results (NARROW16 in fwd_step, as each step stores them): y, cs and the saved gates, each
 *   where its bit of `out16` is set (1, 2, 4), rounded to nearest even into y16, cs16, sav16 (NaN
 *   kept) from the registers that hold them: no pass over the sequences after the last step (one
 *   work-group does its rows, so such a pass took 10-20 % of a small training forward). The
 *   float32 y and cs stay the recurrence's state (h[t-1] and c[t-1] are read from them), and
 *   narrowed saved gates are not stored in float32 at all; the values are those the conversion
 *   kernels (cl/storage.cl) would give. The per-step kernel pyrnn_fwd narrows the same way
 *   (fwd_step is shared) where it stores every result: not a two-phase cell's y (pyrnn_fwd_b
 *   writes it) nor a projection's (pyrnn_proj). */
#define PYRNN_IO16 (PYRNN_DTYPE == 1)      /* (16-bit calls compute in float32) */

#if PYRNN_IO16
/* dst[i] = src[i] widened, i < n: work-item l of L takes 8 consecutive values at a time (one
 * vector conversion), then one of the last n % 8 */
PYRNN_FUNC void widen_run(const int s16, __global real *dst, __global const ushort *src,
                          const long n, const int l, const int L)
{
    __global const half *h = (__global const half *)src;
    const long n8 = n / 8;
    if (s16 == 3) {
        for (long c = l; c < n8; c += L) vstore8(PYRNN_S16_LOADN(3, 8, h + 8 * c), c, dst);
        for (long i = 8 * n8 + l; i < n; i += L) dst[i] = PYRNN_S16_LOAD(3, i, h);
    } else {
        for (long c = l; c < n8; c += L) vstore8(PYRNN_S16_LOADN(4, 8, src + 8 * c), c, dst);
        for (long i = 8 * n8 + l; i < n; i += L) dst[i] = PYRNN_S16_LOAD(4, i, src);
    }
}

/* The value (load16) and the REC_VW values (load16v) at p of a 16-bit array (storage code s16). */
PYRNN_FUNC real load16(const int s16, __global const ushort *p)
{
    return s16 == 3 ? PYRNN_S16_LOAD(3, 0, (__global const half *)p) : PYRNN_S16_LOAD(4, 0, p);
}

PYRNN_FUNC realV load16v(const int s16, __global const ushort *p)
{
#if REC_VW == 1
    return load16(s16, p);
#else
    return s16 == 3 ? PYRNN_S16_LOADN(3, REC_VW, (__global const half *)p)
                    : PYRNN_S16_LOADN(4, REC_VW, p);
#endif
}

/* load16v of the nu units that exist (LOADU's partial last vector) */
#if REC_TAIL && REC_VW > 1
PYRNN_FUNC realV load16u(const int s16, __global const ushort *p, const int nu)
{
    if (nu >= REC_VW) return load16v(s16, p);
    real e[REC_VW];
    PYRNN_CAT(vstore, REC_VW)(VZERO, 0, e);
#pragma unroll 1
    for (int i = 0; i < nu; ++i) e[i] = load16(s16, p + i);
    return PYRNN_CAT(vload, REC_VW)(0, e);
}
#else
#define load16u(s16, p, nu) load16v((s16), (p))
#endif

/* Rows n0 .. n0+rows-1 of direction d of the steps t0, t0 + dt, .. < T of a [T][N][D][X] sequence
 * (seq_off's layout) widened from src into dst: a run of rows * X values a step where D = 1, of X
 * values a row otherwise; the work-group's work-items split each run. */
PYRNN_FUNC void widen_seq_rows(const int s16, __global real *dst, __global const ushort *src,
                               const int T, const int t0, const int dt, const int N, const int D,
                               const int X, const int d, const int n0, const int rows,
                               const int l, const int L)
{
    const int runs = D == 1 ? 1 : rows;
    const long len = D == 1 ? (long)rows * X : X;
    for (int t = t0; t < wi_bound(T); t += dt)
        for (int b = 0; b < runs; ++b) {
            const long o = seq_off(t, n0 + b, d, N, D, X);
            widen_run(s16, dst + o, src + o, len, l, L);
        }
}

/* Rows n0 .. n0+rows-1 of direction d of a [D][N] state of X values a row (strides sd, sn). */
PYRNN_FUNC void widen_state_rows(const int s16, __global real *dst, __global const ushort *src,
                                 const long sd, const long sn, const int X, const int d,
                                 const int n0, const int rows, const int l, const int L)
{
    for (int b = 0; b < rows; ++b) {
        const long o = d * sd + (n0 + b) * sn;
        widen_run(s16, dst + o, src + o, X, l, L);
    }
}

/* The forward's inputs this work-group reads, widened (see above). A float32 destination is
 * passed as the steps' read-only pointer. */
PYRNN_FUNC void widen_inputs(const int T, const int N, const int H, const int I, const int s16,
                             const int in16,
                             __global const ushort *x16, __global const real *xs,
                             const long xs_sd, __global const ushort *xb16,
                             __global const real *xb, const long xb_off, const long xb_sd,
                             const long xb_sg,
                             __global const ushort *h016, __global const real *h0,
                             const long h0_sd, const long h0_sn, __global const ushort *c016,
                             __global const real *c0, const long c0_sd, const long c0_sn)
{
    const int GH = CELL_G * H;
    int D, d, j;
    step_unit(H, REC_SEQ_LOOP, 0, &D, &d, &j);
    const int l = get_local_id(1), L = get_local_size(1);
    const int n0 = row_group() * REC_NB, rows = min(REC_NB, N - n0);
    if (in16 & 1)            /* x [T][N][I]: this group's rows of every step, into d's copy */
        widen_seq_rows(s16, (__global real *)xs + d * xs_sd, x16, T, 0, 1, N, 1, I, 0, n0, rows,
                       l, L);
    if (in16 & 2)            /* b [D][G*H]: direction d's, into this group's copy */
        widen_run(s16, (__global real *)XB_AT(d), xb16 + d * GH, GH,
                  l, L);
    if (in16 & 4) widen_state_rows(s16, (__global real *)h0, h016, h0_sd, h0_sn, H, d, n0, rows,
                                   l, L);
    if (in16 & 8) widen_state_rows(s16, (__global real *)c0, c016, c0_sd, c0_sn, H, d, n0, rows,
                                   l, L);
}

#if REC_VW == 1
typedef uint uintV;
#define AS_UINTV as_uint
#else
typedef PYRNN_CAT(uint, REC_VW) uintV;
#define AS_UINTV PYRNN_CAT(as_uint, REC_VW)
#endif
/* v rounded to nearest even into the 16-bit value (store16) or the REC_VW values (store16v) at p
 * (storage code s16). bfloat16: add 0x7fff plus the lowest
 * kept bit and truncate; a NaN keeps its sign and top payload bits with the quiet bit set (as
 * common.h's float_to_bf16 does for the storage programs). */
PYRNN_FUNC void store16(const int s16, const real v, __global ushort *p)
{
    if (s16 == 3) {
        vstore_half_rte(v, 0, (__global half *)p);
        return;
    }
    const uint u = as_uint(v);
    *p = (ushort)(isnan(v) ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

PYRNN_FUNC void store16v(const int s16, const realV v, __global ushort *p)
{
#if REC_VW == 1
    store16(s16, v, p);
#else
    if (s16 == 3) {
        PYRNN_CAT(PYRNN_CAT(vstore_half, REC_VW), _rte)(v, 0, (__global half *)p);
        return;
    }
    const uintV u = AS_UINTV(v);
    const uintV rounded = (u + (uintV)(0x7fffu) + ((u >> 16) & (uintV)(1u))) >> 16;
    const uintV nan = (u >> 16) | (uintV)(0x40u);
    PYRNN_CAT(vstore, REC_VW)(PYRNN_CAT(convert_ushort, REC_VW)(select(rounded, nan, isnan(v))),
                              0, p);
#endif
}

/* store16v of the nu units that exist (STOREU's partial last vector) */
#if REC_TAIL && REC_VW > 1
PYRNN_FUNC void store16u(const int s16, const realV v, __global ushort *p, const int nu)
{
    if (nu >= REC_VW) {
        store16v(s16, v, p);
        return;
    }
    real e[REC_VW];
    PYRNN_CAT(vstore, REC_VW)(v, 0, e);
#pragma unroll 1
    for (int i = 0; i < nu; ++i) store16(s16, e[i], p + i);
}
#else
#define store16u(s16, v, p, nu) store16v((s16), (v), (p))
#endif

/* v (nu units) narrowed into name16 at element o where bit `bit` of out16 is set */
#define NARROW16(bit, v, name, o, nu) if (out16 & (bit)) store16u(s16, (v), name##16 + (o), (nu))
#else
#define NARROW16(bit, v, name, o, nu)
#endif

/* ---- forward ----------------------------------------------------------------------------- */

/* Arguments of the forward step kernels after (T, N, H, K, rev_mask, s). */
#define FWD_PARAMS __global real *gx, __global const pack_t *rpk, \
    __global const real *hb, const long hb_off, const long hb_sd, __global const real *peep, \
    __global real *y, __global real *cs, __global real *hs, \
    __global const real *h0, const long h0_sd, const long h0_sn, \
    __global const real *c0, const long c0_sd, const long c0_sn, \
    __global const real *mask, __global const int *lens, const real clip, \
    __global const real *xs, const long xs_sd, __global const pack_t *wpk, \
    __global const real *xb, const long xb_off, const long xb_sd, const long xb_sg, const int I, \
    const int s16, const int out16, \
    __global ushort *y16, __global ushort *cs16, __global ushort *sav16, const int keep_sav
#define FWD_ARGS gx, rpk, hb, hb_off, hb_sd, peep, y, cs, hs, h0, h0_sd, h0_sn, c0, c0_sd, c0_sn, \
    mask, lens, clip, xs, xs_sd, wpk, xb, xb_off, xb_sd, xb_sg, I, s16, out16, y16, cs16, sav16, \
    keep_sav

/* Forward step s: h[t] (and c[t]) of every row and unit of this work-item from h[t-1]. The saved
 * gates overwrite gx unless keep_sav is 0 (an inference forward of a single-phase cell, whose
 * caller drops them: 6-8 % of a step's time on PoCL); a 16-bit one is narrowed per out16. */
PYRNN_FUNC void fwd_step(const int T, const int N, const int H, const int K, const int rev_mask,
                         const int s, const int loop, const int uv, FWD_PARAMS LANE_PARAM)
{
    const int HV = unit_vectors(H), GH = CELL_G * H;
    int D, d, j;
    step_unit(H, loop, uv, &D, &d, &j);
    const int nu = H - j;                /* units of this vector that exist (REC_TAIL) */
    const int rev = (rev_mask >> d) & 1;
    const int t = rev ? T - 1 - s : s;

    __global const real *hrow[REC_NB];   /* h[t-1] (y row or h0) */
    __global const real *mrows[REC_NB];  /* mask row (HAS_MASK) */
    __global const real *crow[REC_NB];   /* c[t-1] (cs row or c0) */
    int nrow[REC_NB], valid[REC_NB];
    for (int b = 0; b < REC_NB; ++b) {
        const int n = row_group() * REC_NB + b, nn = min(n, N - 1), len = row_len(lens, nn, T);
        const int tp = prev_time(t, rev, len, T);
        nrow[b] = n;
        valid[b] = n < N && t < len;
        hrow[b] = tp >= 0 ? y + seq_off(tp, nn, d, N, D, K) : h0 + d * h0_sd + nn * h0_sn;
        crow[b] = tp >= 0 ? cs + seq_off(tp, nn, d, N, D, H) : c0 + d * c0_sd + nn * c0_sn;
        mrows[b] = mask + seq_off(t, nn, d, N, D, H);
    }

    realV acc[REC_NB][CELL_G];
    for (int b = 0; b < REC_NB; ++b)
        for (int k = 0; k < CELL_G; ++k) acc[b][k] = VZERO;
    __global const pack_t *slab = rpk + (long)(d * HV + j / REC_VW) * K * CELL_G * REC_VW;
    packed_product(acc, hrow, mrows, slab, K, 0, CELL_GA, 1);
    LANE_SUM_TILE(acc);
#if HAS_XW
    /* the input side x[t] W^T of every gate, from the source rows [T][N][I] and W packed like R
     * (its own accumulators: a GRU keeps the input and hidden sides apart) */
    realV accx[REC_NB][CELL_G];
    __global const real *xrow[REC_NB];
    for (int b = 0; b < REC_NB; ++b) {
        xrow[b] = xs + d * xs_sd + ((long)t * N + min(nrow[b], N - 1)) * I;
        for (int k = 0; k < CELL_G; ++k) accx[b][k] = VZERO;
    }
    packed_product(accx, xrow, mrows, wpk + (long)(d * HV + j / REC_VW) * I * CELL_G * REC_VW, I,
                   0, CELL_G, 0);
    LANE_SUM_TILE(accx);
#endif
    LANES_DONE();

    for (int b = 0; b < REC_NB; ++b) {
        const int n = nrow[b];
        if (n >= N) continue;
        const long g_off = seq_off(t, n, d, N, D, GH);
        const long c_off = seq_off(t, n, d, N, D, H) + j, y_off = seq_off(t, n, d, N, D, K) + j;
        if (!valid[b]) {
            for (int k = 0; k < CELL_G; ++k) {
                if (keep_sav) STOREU(VZERO, gx + g_off + gate_blk(k) * H + j, nu);
                if (k < CELL_GA) NARROW16(4, VZERO, sav, g_off + gate_blk(k) * H + j, nu);
            }
#if CELL_HAS_C
            STOREU(VZERO, cs + c_off, nu);
            NARROW16(2, VZERO, cs, c_off, nu);
#endif
#if HAS_PROJ
            STOREV(VZERO, hs + c_off);
#else
            STOREU(VZERO, y + y_off, nu);
            NARROW16(1, VZERO, y, y_off, nu);
#endif
            continue;
        }
        realV gxv[CELL_G], ghv[CELL_G], pv[CELL_G], sav[CELL_G], h, c;
        for (int k = 0; k < CELL_G; ++k) {
            const int blk = gate_blk(k) * H + j;
#if HAS_XW
            gxv[k] = accx[b][k] + LOADU(XB_AT(d) + blk, nu);
#else
            gxv[k] = LOADU(gx + g_off + blk, nu);
#endif
            ghv[k] = k < CELL_GA ? acc[b][k] : VZERO;
#if HAS_HB
            if (k < CELL_GA) ghv[k] += LOADU(hb + hb_off + d * hb_sd + blk, nu);
#endif
#if HAS_PEEP
            pv[k] = LOADU(peep + d * GH + blk, nu);
#else
            pv[k] = VZERO;
#endif
            sav[k] = VZERO;
        }
        realV hp, mv, cp;
        unit_inputs(hrow[b], mrows[b], crow[b], j, nu, &hp, &mv, &cp);
        cell_fwd(gxv, ghv, hp, mv, cp, pv, clip, sav, &h, &c);
        for (int k = 0; k < CELL_GA; ++k) {
            const long o = g_off + gate_blk(k) * H + j;
            NARROW16(4, sav[k], sav, o, nu);
            if (keep_sav && !(out16 & 4))   /* (narrowed: nothing reads float32 ones) */
                STOREU(sav[k], gx + o, nu);
        }
#if CELL_HAS_C
        STOREU(c, cs + c_off, nu);
        NARROW16(2, c, cs, c_off, nu);
#endif
#if CELL_GA < CELL_G
        STOREU(h, hs + ((long)d * N + n) * H + j, nu);  /* h[t-1] . r . m for pyrnn_fwd_b */
#elif HAS_PROJ
        STOREV(h, hs + c_off);                          /* projected by pyrnn_proj */
#else
        STOREU(h, y + y_off, nu);
        NARROW16(1, h, y, y_off, nu);
#endif
    }
}

#if !BWD_PROGRAM     /* the forward program's kernels (BWD_PROGRAM below) */

#if STEP_PART
/* One step per launch (the host enqueues the T steps back to back). */
__kernel void pyrnn_fwd(const int T, const int N, const int H, const int K, const int rev_mask,
                        const int s, FWD_PARAMS)
{
    LANE_BUF;
    fwd_step(T, N, H, K, rev_mask, s, 0, 0, FWD_ARGS LANE_ARG);
}
#endif

#if SEQ_PART
/* The whole sequence in one launch (steps 0 .. steps-1): a work-group holds every unit of one
 * direction for its batch rows, so the barrier after each step is the only synchronisation h[t]
 * needs; work-groups never wait for each other. With REC_SEQ_LOOP the work-group is one
 * work-item that runs the vectors of units in turn (global (row groups, D), local (1, 1)), else
 * one work-item per vector (local size (1, ceil(H/VW))). For small layers, where a
 * launch per step would cost more than the step (no projection, single-phase cells). In a 16-bit
 * call (s16), the 16-bit inputs (in16) are widened first and the 16-bit results (out16) narrowed
 * as the steps store them (see "16-bit inputs and results" above; the 16-bit pointers are unused
 * otherwise). */
__kernel void pyrnn_fwd_seq(const int T, const int N, const int H, const int K, const int rev_mask,
                            const int steps, FWD_PARAMS, const int in16,
                            __global const ushort *x16, __global const ushort *xb16,
                            __global const ushort *h016, __global const ushort *c016)
{
    LANE_BUF;
#if PYRNN_IO16
    if (in16)
        widen_inputs(T, N, H, I, s16, in16, x16, xs, xs_sd, xb16, xb, xb_off, xb_sd, xb_sg, h016,
                     h0, h0_sd, h0_sn, c016, c0, c0_sd, c0_sn);
    barrier(CLK_GLOBAL_MEM_FENCE);
#endif
    const int uvs = REC_SEQ_LOOP ? wi_bound(unit_vectors(H)) : 1;
    for (int s = 0; s < steps; ++s) {
        for (int uv = 0; uv < uvs; ++uv)
            fwd_step(T, N, H, K, rev_mask, s, REC_SEQ_LOOP, uv, FWD_ARGS LANE_ARG);
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}
#endif

#if CELL_GA < CELL_G && STEP_PART
/* Second kernel of a two-phase step (e.g. GRU reset-before): the late slot L (o) from
 * (h[t-1] . m . g) R_L^T, g the late gate (r). */
__kernel void pyrnn_fwd_b(const int T, const int N, const int H, const int rev_mask, const int s,
                          __global real *gx, __global const pack_t *rpk,
                          __global const real *hb, const long hb_off, const long hb_sd,
                          __global real *y, __global const real *hs,
                          __global const real *h0, const long h0_sd, const long h0_sn,
                          __global const int *lens)
{
    const int HV = unit_vectors(H), GH = CELL_G * H;
    int D, d, j;
    step_unit(H, 0, 0, &D, &d, &j);
    const int nu = H - j;
    const int rev = (rev_mask >> d) & 1;
    const int t = rev ? T - 1 - s : s;

    __global const real *rrow[REC_NB];
    __global const real *hrow[REC_NB];
    int nrow[REC_NB], valid[REC_NB];
    for (int b = 0; b < REC_NB; ++b) {
        const int n = row_group() * REC_NB + b, nn = min(n, N - 1), len = row_len(lens, nn, T);
        const int tp = prev_time(t, rev, len, T);
        nrow[b] = n;
        valid[b] = n < N && t < len;
        rrow[b] = hs + ((long)d * N + nn) * H;
        hrow[b] = tp >= 0 ? y + seq_off(tp, nn, d, N, D, H) : h0 + d * h0_sd + nn * h0_sn;
    }
    LANE_BUF;
    realV acc[REC_NB];
    for (int b = 0; b < REC_NB; ++b) acc[b] = VZERO;
    __global const pack_t *slab = rpk + (long)(d * HV + j / REC_VW) * H * CELL_G * REC_VW;
    /* hs already holds h[t-1] . r . m */
    for (int m = k_lane(); m < H; m += REC_KS) {
        const realV w = LOAD_PACKV(slab + ((long)m * CELL_G + CELL_GA) * REC_VW);
        for (int b = 0; b < REC_NB; ++b) acc[b] = fma((realV)(rrow[b][m]), w, acc[b]);
    }
    LANE_SUM(acc, REC_NB);
    LANES_DONE();
    for (int b = 0; b < REC_NB; ++b) {
        const int n = nrow[b];
        if (n >= N || !valid[b]) continue;
        const long g_off = seq_off(t, n, d, N, D, GH);
        const int blk_o = gate_blk(CELL_GA) * H + j;
        realV gh_o = acc[b];
#if HAS_HB
        gh_o += LOADU(hb + hb_off + d * hb_sd + blk_o, nu);
#endif
        realV sv[CELL_G], o, h;
        for (int k = 0; k < CELL_G; ++k)
            sv[k] = k < CELL_GA ? LOADU(gx + g_off + gate_blk(k) * H + j, nu) : VZERO;
        cell_fwd_b(sv, LOADU(gx + g_off + blk_o, nu), gh_o, LOADU(hrow[b] + j, nu), &o, &h);
        STOREU(o, gx + g_off + blk_o, nu);
        STOREU(h, y + seq_off(t, n, d, N, D, H) + j, nu);
    }
}
#endif

#if HAS_PROJ && STEP_PART
/* LSTM projection of step t: y[t] = hs[t] W_proj^T, packed W_proj [D][P/VW][H][1][VW]. */
__kernel void pyrnn_proj(const int T, const int N, const int H, const int P, const int rev_mask,
                         const int s, __global const real *hs, __global const pack_t *wpk,
                         __global real *y, __global const int *lens)
{
    const int PV = P / REC_VW;
    const int D = get_global_size(1) / PV;
    const int d = get_global_id(1) / PV, p = (get_global_id(1) % PV) * REC_VW;
    const int rev = (rev_mask >> d) & 1;
    const int t = rev ? T - 1 - s : s;
    LANE_BUF;
    realV acc[REC_NB];
    __global const real *hrow[REC_NB];
    for (int b = 0; b < REC_NB; ++b) {
        acc[b] = VZERO;
        hrow[b] = hs + seq_off(t, min((int)(row_group() * REC_NB + b), N - 1), d, N, D, H);
    }
    __global const pack_t *slab = wpk + (long)(d * PV + p / REC_VW) * H * REC_VW;
    for (int m = k_lane(); m < H; m += REC_KS) {
        const realV w = LOAD_PACKV(slab + (long)m * REC_VW);
        for (int b = 0; b < REC_NB; ++b) acc[b] = fma((realV)(hrow[b][m]), w, acc[b]);
    }
    LANE_SUM(acc, REC_NB);
    LANES_DONE();
    for (int b = 0; b < REC_NB; ++b) {
        const int n = row_group() * REC_NB + b;
        if (n >= N) continue;
        const int valid = t < row_len(lens, n, T);
        STOREV(valid ? acc[b] : VZERO, y + seq_off(t, n, d, N, D, P) + p);
    }
}
#endif
#endif /* !BWD_PROGRAM */

/* ---- backward ---------------------------------------------------------------------------- */
/* Backward step s runs the forward step s of every direction in reverse (s = S-1 .. 0); the extra
 * pseudo-step s = -1 writes the gradients of h0 and c0. Per row, "next" is the time processed
 * after t in the forward pass (t+1, or t-1 reversed; for s = -1 the row's first valid time); its
 * gate gradients reach h[t] through R (column_product) and through carry_h / carry_c, the
 * pointwise paths saved by that step. */

/* Per-row bookkeeping of a backward step. */
typedef struct {
    int n, valid, len, tn, last;   /* tn: next time (-1: none); last: t is the row's final step */
} bwd_row;

PYRNN_FUNC bwd_row bwd_row_info(int b, int s, int t, int rev, int N, int T,
                                __global const int *lens)
{
    bwd_row r;
    r.n = row_group() * REC_NB + b;
    r.len = row_len(lens, min(r.n, N - 1), T);
    if (s < 0) {
        r.valid = r.n < N;
        r.tn = r.len > 0 ? (rev ? r.len - 1 : 0) : -1;
        r.last = r.len == 0;      /* h0 is the final state */
    } else {
        r.valid = r.n < N && t < r.len;
        const int tn = rev ? t - 1 : t + 1;
        r.tn = (tn >= 0 && tn < r.len) ? tn : -1;
        r.last = rev ? t == 0 : t == r.len - 1;
    }
    return r;
}

/* ---- 16-bit inputs of the backward ----------------------------------------------------------
 * In a 16-bit call the backward kernels read the largest inputs, the saved gates (sav), the cell
 * states (cs) and the upstream gradient dy, from the caller's 16-bit arrays (sav16, cs16, dy16),
 * each where its bit of `rd16` is set (1, 2, 4): no conversion pass, half the bytes. The whole-
 * sequence kernel widens the rest first (widen_grad_inputs: one work-group does its rows, so a
 * pass over the large arrays there measured slower than the conversion launch it replaces).
 * RD16(name, bit, o, nu): REC_VW values (nu of them units that exist, LOADU) at element o of
 * input `name`, read from name16 where its bit is set. */
#if PYRNN_IO16
#define RD16(name, bit, o, nu) \
    ((rd16 & (bit)) ? load16u(s16, name##16 + (o), (nu)) : LOADU(name + (o), (nu)))
#define RD16_1(name, bit, o) ((rd16 & (bit)) ? load16(s16, name##16 + (o)) : name[o])
#else
#define RD16(name, bit, o, nu) LOADU(name + (o), (nu))
#define RD16_1(name, bit, o) name[o]
#endif
#define RD16_SAV 1
#define RD16_CS 2
#define RD16_DY 4

#if BWD_PROGRAM      /* the backward program's kernels, to the end of the section */

#if HAS_PROJ && STEP_PART
/* Projection backward of step s: dr[t] = dy[t] + dL/dr[t] through R of the next step (+ the final
 * state gradient); for s = -1 it writes dh0 (h0 is P wide). Runs before pyrnn_bwd of the same s. */
__kernel void pyrnn_bwd_proj(const int T, const int N, const int H, const int P,
                             const int rev_mask, const int s, __global const real *dgh,
                             __global const pack_t *rt, __global const real *zrow,
                             __global const real *dy, __global real *dr,
                             __global const real *dhn, const long dhn_sd, const long dhn_sn,
                             __global real *dh0, const long dh0_sd, const long dh0_sn,
                             __global const int *lens, CHUNK_PARAMS)
{
    const int PV = P / REC_VW, GH = CELL_G * H;
    const int D = get_global_size(1) / PV;
    const int d = get_global_id(1) / PV, p = (get_global_id(1) % PV) * REC_VW;
    const int rev = (rev_mask >> d) & 1;
    const int t = s < 0 ? -1 : (rev ? T - 1 - s : s);
    LANE_BUF;
    bwd_row row[REC_NB];
    __global const real *src[REC_NB];
    int ok[REC_NB];
    realV acc[REC_NB];
    for (int b = 0; b < REC_NB; ++b) {
        row[b] = bwd_row_info(b, s, t, rev, N, T, lens);
        ok[b] = row[b].valid && row[b].tn >= 0;
        src[b] = ok[b] ? prev_gates(dgh, row[b].tn, row[b].n, d, rev, T, N, D, GH, CHUNK_ARGS)
                       : zrow;
        acc[b] = VZERO;
    }
    column_product(acc, src, 0, rt + (long)(d * PV + p / REC_VW) * GH * REC_VW, GH);
    LANE_SUM(acc, REC_NB);
    LANES_DONE();
    for (int b = 0; b < REC_NB; ++b) {
        const int n = row[b].n;
        if (n >= N) continue;
        realV g = acc[b];
#if HAS_DHN
        if (row[b].last) g += LOADV(dhn + d * dhn_sd + n * dhn_sn + p);
#endif
        if (s < 0) {
            STOREV(g, dh0 + d * dh0_sd + n * dh0_sn + p);
            continue;
        }
#if HAS_DY
        if (row[b].valid) g += LOADV(dy + seq_off(t, n, d, N, D, P) + p);
#endif
        STOREV(row[b].valid ? g : VZERO, dr + chunk_off(t, n, d, rev, T, s_lo, s_hi, N, D, P) + p);
    }
}
#endif

/* Arguments of the backward step kernels after (T, N, H, K, rev_mask, s). */
#define BWD_PARAMS __global const real *sav, __global real *dgx, __global real *dgh, \
    __global const pack_t *wt, __global const real *zrow, __global const pack_t *rpk, \
    __global const real *hb, const long hb_off, const long hb_sd, __global const real *peep, \
    __global const real *y, __global const real *cs, __global const real *dy, \
    __global const real *dhn, const long dhn_sd, const long dhn_sn, \
    __global const real *dcn, const long dcn_sd, const long dcn_sn, \
    __global const real *dcs, __global real *carry_h, __global real *carry_c, \
    __global real *dh0, const long dh0_sd, const long dh0_sn, \
    __global real *dc0, const long dc0_sd, const long dc0_sn, \
    __global const real *h0, const long h0_sd, const long h0_sn, \
    __global const real *c0, const long c0_sd, const long c0_sn, \
    __global const real *mask, __global const int *lens, const real clip, const int s16, \
    const int rd16, __global const ushort *sav16, __global const ushort *cs16, \
    __global const ushort *dy16, CHUNK_PARAMS
#define BWD_ARGS sav, dgx, dgh, wt, zrow, rpk, hb, hb_off, hb_sd, peep, y, cs, dy, dhn, dhn_sd, \
    dhn_sn, dcn, dcn_sd, dcn_sn, dcs, carry_h, carry_c, dh0, dh0_sd, dh0_sn, dc0, dc0_sd, dc0_sn, \
    h0, h0_sd, h0_sn, c0, c0_sd, c0_sn, mask, lens, clip, s16, rd16, sav16, cs16, dy16, CHUNK_ARGS

/* The cell backward of step s: dh[t] and dc[t] in, gate gradients dgx (input side) and dgh (hidden
 * side; differs for GRU) and the pointwise carries out; for s = -1 the gradients of h0 and c0. */
PYRNN_FUNC void bwd_step(const int T, const int N, const int H, const int K, const int rev_mask,
                         const int s, const int loop, const int uv, BWD_PARAMS LANE_PARAM)
{
    const int HV = unit_vectors(H), GH = CELL_G * H;
    int D, d, j;
    step_unit(H, loop, uv, &D, &d, &j);
    const int nu = H - j;                /* units of this vector that exist (REC_TAIL) */
    const int rev = (rev_mask >> d) & 1;
    const int t = s < 0 ? -1 : (rev ? T - 1 - s : s);

    bwd_row row[REC_NB];
    __global const real *src[REC_NB];
    int ok[REC_NB];
    realV acc[REC_NB];
    for (int b = 0; b < REC_NB; ++b) {
        row[b] = bwd_row_info(b, s, t, rev, N, T, lens);
        const int nn = min(row[b].n, N - 1);
        acc[b] = VZERO;
#if HAS_PROJ
        /* dh[t] = dr[t] W_proj  (W = W_proj [D][P][H], `dy` holds the chunk of dr) */
        ok[b] = s >= 0 && row[b].valid;
        src[b] = ok[b] ? dy + chunk_off(t, nn, d, rev, T, s_lo, s_hi, N, D, K) : zrow;
#else
        ok[b] = row[b].valid && row[b].tn >= 0;
        src[b] = ok[b] ? prev_gates(dgh, row[b].tn, nn, d, rev, T, N, D, GH, CHUNK_ARGS) : zrow;
#endif
    }
    /* this direction's slab of the transposed pack: [rows][VW] for units j .. j+VW */
    __global const pack_t *slab = wt + (long)(d * HV + j / REC_VW) * (HAS_PROJ ? K : GH) * REC_VW;
#if HAS_PROJ
    column_product(acc, src, 0, slab, K);
#elif CELL_GA == CELL_G
    column_product(acc, src, 0, slab, GH);
#else
    /* the slots before the late one of a two-phase cell (the late slot's gradient reaches h[t-1]
     * through the late gate in pyrnn_bwd_b and carry_h) */
    for (int k = 0; k < CELL_GA; ++k)
        column_product(acc, src, gate_blk(k) * H, slab + (long)gate_blk(k) * H * REC_VW, H);
#endif
    LANE_SUM(acc, REC_NB);

    /* h[t-1] of each row: input of the recurrent product (for GRU's hn and its direct path) */
    __global const real *hrow[REC_NB];
    __global const real *mrows[REC_NB];
    __global const real *crow[REC_NB];
    for (int b = 0; b < REC_NB; ++b) {
        const int nn = min(row[b].n, N - 1);
        const int tp = s < 0 ? -1 : prev_time(t, rev, row[b].len, T);
        hrow[b] = tp >= 0 ? y + seq_off(tp, nn, d, N, D, K) : h0 + d * h0_sd + nn * h0_sn;
        /* (c[t-1] of a 16-bit cs is read below; the zero row stands in here) */
        crow[b] = tp < 0 ? c0 + d * c0_sd + nn * c0_sn
                         : (rd16 & RD16_CS) ? zrow : cs + seq_off(tp, nn, d, N, D, H);
        mrows[b] = mask + seq_off(max(t, 0), nn, d, N, D, H);
    }
#if CELL_NEEDS_HN
    realV hn[REC_NB][CELL_G];
    for (int b = 0; b < REC_NB; ++b)
        for (int k = 0; k < CELL_G; ++k) hn[b][k] = VZERO;
    if (s >= 0) {    /* (s is the same on every lane: all or none call lane_sum) */
        packed_product(hn, hrow, mrows, rpk + (long)(d * HV + j / REC_VW) * K * CELL_G * REC_VW,
                       K, CELL_HN_SLOT, 1, 1);
        LANE_SUM_TILE(hn);
    }
#endif
    LANES_DONE();

    for (int b = 0; b < REC_NB; ++b) {
        const int n = row[b].n;
        if (n >= N) continue;
        const int tn = row[b].tn;
        /* what step tn sent back to h[t] and c[t] */
        realV dh = VZERO, dc = VZERO;
#if !HAS_PROJ
        if (tn >= 0) {
#if HAS_MASK
            dh = acc[b] * LOADU(mask + seq_off(tn, n, d, N, D, H) + j, nu);
#else
            dh = acc[b];
#endif
#if CELL_USES_HPREV
            dh += LOADU(carry_h + ring_off(tn, n, d, N, D, H) + j, nu);
#endif
        }
#endif
#if CELL_HAS_C
        if (tn >= 0) dc = LOADU(carry_c + ring_off(tn, n, d, N, D, H) + j, nu);
#endif
        if (row[b].last) {
#if HAS_DHN && !HAS_PROJ
            dh += LOADU(dhn + d * dhn_sd + n * dhn_sn + j, nu);
#endif
#if HAS_DCN
            dc += LOADU(dcn + d * dcn_sd + n * dcn_sn + j, nu);
#endif
        }
        if (s < 0) {
#if !HAS_PROJ
            STOREU(dh, dh0 + d * dh0_sd + n * dh0_sn + j, nu);
#endif
#if CELL_HAS_C
            STOREU(dc, dc0 + d * dc0_sd + n * dc0_sn + j, nu);
#endif
            continue;
        }
        const long g_off = seq_off(t, n, d, N, D, GH), h_off = seq_off(t, n, d, N, D, H);
        const long gc_off = chunk_off(t, n, d, rev, T, s_lo, s_hi, N, D, GH);
        const long c_off = ring_off(t, n, d, N, D, H);
        if (!row[b].valid) {
            /* past the row's length: zero gate gradients (the weight-gradient GEMMs sum every
             * row); nothing in the rings: nothing reads a step of an invalid time, and their
             * slots may hold the row's first step, still to be read by the pseudo-step */
            for (int k = 0; k < CELL_G; ++k) {
                STOREU(VZERO, dgx + gc_off + gate_blk(k) * H + j, nu);
                STOREU(VZERO, dgh + gc_off + gate_blk(k) * H + j, nu);
            }
            continue;
        }
#if HAS_PROJ
        dh = acc[b];
#elif HAS_DY
        dh += RD16(dy, RD16_DY, seq_off(t, n, d, N, D, K) + j, nu);
#endif
#if HAS_DCS
        dc += LOADU(dcs + h_off + j, nu);
#endif
        realV sv[CELL_G], pv[CELL_G], dx[CELL_G], dhh[CELL_G], ch, cc;
        for (int k = 0; k < CELL_G; ++k) {
            sv[k] = RD16(sav, RD16_SAV, g_off + gate_blk(k) * H + j, nu);
#if HAS_PEEP
            pv[k] = LOADU(peep + d * GH + gate_blk(k) * H + j, nu);
#else
            pv[k] = VZERO;
#endif
        }
        realV hp, mv, cp;
        unit_inputs(hrow[b], mrows[b], crow[b], j, nu, &hp, &mv, &cp);
#if CELL_HAS_C
        if (rd16 & RD16_CS) {
            const int tp = prev_time(t, rev, row[b].len, T);
            if (tp >= 0) cp = RD16(cs, RD16_CS, seq_off(tp, n, d, N, D, H) + j, nu);
        }
        const realV cv = RD16(cs, RD16_CS, h_off + j, nu);
#else
        const realV cv = VZERO;
#endif
#if CELL_NEEDS_HN
        realV hnv = hn[b][0];
#if HAS_HB
        hnv += LOADU(hb + hb_off + d * hb_sd + gate_blk(CELL_HN_SLOT) * H + j, nu);
#endif
#else
        const realV hnv = VZERO;
#endif
        cell_bwd(sv, hp, mv, cp, cv, hnv, pv, clip, dh, dc, dx, dhh, &ch, &cc);
        for (int k = 0; k < CELL_G; ++k) {
            STOREU(dx[k], dgx + gc_off + gate_blk(k) * H + j, nu);
            STOREU(dhh[k], dgh + gc_off + gate_blk(k) * H + j, nu);
            if (ring) STOREU(dhh[k], gring + ring_off(t, n, d, N, D, GH) + gate_blk(k) * H + j, nu);
        }
        STOREU(ch, carry_h + c_off + j, nu);
#if CELL_HAS_C
        STOREU(cc, carry_c + c_off + j, nu);
#endif
    }
}

#if STEP_PART
__kernel void pyrnn_bwd(const int T, const int N, const int H, const int K, const int rev_mask,
                        const int s, BWD_PARAMS)
{
    LANE_BUF;
    bwd_step(T, N, H, K, rev_mask, s, 0, 0, BWD_ARGS LANE_ARG);
}
#endif

#if PYRNN_IO16
/* The backward's 16-bit inputs it does not read directly (see "16-bit inputs of the backward"),
 * each where its bit of `in16` is set: y (1), dh[T] (2), dc[T] (4), h0 (8), c0 (16) and the
 * source x (32), read from <name>16 and widened into the float32 buffers of the same names (x
 * into xs), in the same layouts. Each work-group widens its batch rows of its direction, which
 * only it reads; so no group waits for another. The source, which only the weight-gradient
 * GEMMs after the kernel read, is split between the directions of a batch-row group by step
 * (t = d, d + D, ..). */
PYRNN_FUNC void widen_grad_inputs(const int T, const int N, const int H, const int K,
                                  const int I, const int s16, const int in16,
                                  __global const ushort *y16, __global const real *y,
                                  __global const ushort *dhn16, __global const real *dhn,
                                  const long dhn_sd, const long dhn_sn,
                                  __global const ushort *dcn16, __global const real *dcn,
                                  const long dcn_sd, const long dcn_sn,
                                  __global const ushort *h016, __global const real *h0,
                                  const long h0_sd, const long h0_sn,
                                  __global const ushort *c016, __global const real *c0,
                                  const long c0_sd, const long c0_sn,
                                  __global const ushort *x16, __global real *xs)
{
    int D, d, j;
    step_unit(H, REC_SEQ_LOOP, 0, &D, &d, &j);
    const int l = get_local_id(1), L = get_local_size(1);
    const int n0 = row_group() * REC_NB, rows = min(REC_NB, N - n0);
    if (in16 & 1) widen_seq_rows(s16, (__global real *)y, y16, T, 0, 1, N, D, K, d, n0, rows,
                                 l, L);
    if (in16 & 2) widen_state_rows(s16, (__global real *)dhn, dhn16, dhn_sd, dhn_sn, K, d, n0,
                                   rows, l, L);
    if (in16 & 4) widen_state_rows(s16, (__global real *)dcn, dcn16, dcn_sd, dcn_sn, H, d, n0,
                                   rows, l, L);
    if (in16 & 8) widen_state_rows(s16, (__global real *)h0, h016, h0_sd, h0_sn, K, d, n0, rows,
                                   l, L);
    if (in16 & 16) widen_state_rows(s16, (__global real *)c0, c016, c0_sd, c0_sn, H, d, n0,
                                    rows, l, L);
    if (in16 & 32) widen_seq_rows(s16, xs, x16, T, d, D, N, 1, I, 0, n0, rows, l, L);
}
#endif

#if SEQ_PART
/* A chunk of the backward in one launch: steps s_hi-1 .. s_last (s_lo, or -1 in the last chunk:
 * the pseudo-step that writes the gradients of h0 and c0); work split and barriers as in
 * pyrnn_fwd_seq. In a 16-bit call (s16) the first chunk's launch widens the 16-bit inputs of in16
 * first (widen_grad_inputs; 0 in the other chunks' launches); the pointers are unused otherwise. */
__kernel void pyrnn_bwd_seq(const int T, const int N, const int H, const int K, const int rev_mask,
                            const int s_last, BWD_PARAMS, const int in16,
                            __global const ushort *y16, __global const ushort *dhn16,
                            __global const ushort *dcn16, __global const ushort *h016,
                            __global const ushort *c016, const int I,
                            __global const ushort *x16, __global real *xs)
{
    LANE_BUF;
#if PYRNN_IO16
    if (in16)
        widen_grad_inputs(T, N, H, K, I, s16, in16, y16, y, dhn16, dhn, dhn_sd, dhn_sn, dcn16, dcn,
                          dcn_sd, dcn_sn, h016, h0, h0_sd, h0_sn, c016, c0, c0_sd, c0_sn, x16,
                          xs);
    barrier(CLK_GLOBAL_MEM_FENCE);
#endif
    const int uvs = REC_SEQ_LOOP ? wi_bound(unit_vectors(H)) : 1;
    for (int s = s_hi - 1; s >= s_last; --s) {
        for (int uv = 0; uv < uvs; ++uv)
            bwd_step(T, N, H, K, rev_mask, s, REC_SEQ_LOOP, uv, BWD_ARGS LANE_ARG);
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}
#endif

#if CELL_GA < CELL_G && STEP_PART
/* Second backward kernel of a two-phase step: q = dgh_L R_L gives the late gate's share of its
 * gradient (added to what pyrnn_bwd wrote) and the h[t-1] . m . g path of carry_h. */
__kernel void pyrnn_bwd_b(const int T, const int N, const int H, const int rev_mask, const int s,
                          __global const real *sav, __global real *dgx, __global real *dgh,
                          __global const pack_t *rt, __global const real *zrow,
                          __global const real *y,
                          __global real *carry_h,
                          __global const real *h0, const long h0_sd, const long h0_sn,
                          __global const real *mask, __global const int *lens, CHUNK_PARAMS)
{
    const int HV = unit_vectors(H), GH = CELL_G * H;
    int D, d, j;
    step_unit(H, 0, 0, &D, &d, &j);
    const int nu = H - j;
    const int rev = (rev_mask >> d) & 1;
    const int t = rev ? T - 1 - s : s;
    LANE_BUF;
    bwd_row row[REC_NB];
    __global const real *src[REC_NB];
    int ok[REC_NB];
    realV q[REC_NB];
    for (int b = 0; b < REC_NB; ++b) {
        row[b] = bwd_row_info(b, s, t, rev, N, T, lens);
        ok[b] = row[b].valid;
        src[b] = ok[b] ? dgh + chunk_off(t, row[b].n, d, rev, T, s_lo, s_hi, N, D, GH) : zrow;
        q[b] = VZERO;
    }
    const int blk_o = gate_blk(CELL_GA) * H;
    column_product(q, src, blk_o, rt + ((long)(d * HV + j / REC_VW) * GH + blk_o) * REC_VW, H);
    LANE_SUM(q, REC_NB);
    LANES_DONE();
    for (int b = 0; b < REC_NB; ++b) {
        if (!ok[b]) continue;
        const int n = row[b].n;
        const int tp = prev_time(t, rev, row[b].len, T);
        const realV hp = LOADU((tp >= 0 ? y + seq_off(tp, n, d, N, D, H)
                                        : h0 + d * h0_sd + n * h0_sn) + j, nu);
#if HAS_MASK
        const realV mv = LOADU(mask + seq_off(t, n, d, N, D, H) + j, nu);
#else
        const realV mv = VONE;
#endif
        const long g_off = seq_off(t, n, d, N, D, GH), c_off = ring_off(t, n, d, N, D, H);
        const long gc_off = chunk_off(t, n, d, rev, T, s_lo, s_hi, N, D, GH);
        const int blk_r = gate_blk(CELL_LATE_GATE) * H + j;
        realV da_r = LOADU(dgx + gc_off + blk_r, nu), ch = LOADU(carry_h + c_off + j, nu);
        cell_bwd_b(LOADU(sav + g_off + blk_r, nu), hp, mv, q[b], &da_r, &ch);
        STOREU(da_r, dgx + gc_off + blk_r, nu);
        STOREU(da_r, dgh + gc_off + blk_r, nu);
        if (ring) STOREU(da_r, gring + ring_off(t, n, d, N, D, GH) + blk_r, nu);
        STOREU(ch, carry_h + c_off + j, nu);
    }
}
#endif

#endif /* BWD_PROGRAM */

/* ---- helpers around the time loop (one work-item per element) ----------------------------- */
#if !BWD_PROGRAM && HELPER_PART    /* (in the forward program: the backward takes them
                                     * from there) */

/* Final state of each row: out[d][n][k] = src[t_last][n][d][k] (t_last = len-1, or 0 reversed), or
 * init[d][n][k] when len = 0. A 16-bit call (storage code s16) may give init in 16 bits (bit 1
 * of io16: read from init16) and want out in 16 bits (bit 2: rounded into out16), so that no
 * conversion launch comes before or after. Global size (W, N, D). */
__kernel void pyrnn_final(const int T, const int N, const int W, const int rev_mask,
                          __global const real *src, __global const real *init, const long i_sd,
                          const long i_sn, __global real *out, const long o_sd, const long o_sn,
                          __global const int *lens, const int s16, const int io16,
                          __global const ushort *init16, __global ushort *out16)
{
    const int k = get_global_id(0), n = get_global_id(1), d = get_global_id(2);
    const int D = get_global_size(2);
    const int len = row_len(lens, n, T);
    const int t_last = ((rev_mask >> d) & 1) ? 0 : len - 1;
    const long i = d * i_sd + n * i_sn + k, o = d * o_sd + n * o_sn + k;
#if PYRNN_IO16
    const real v = len > 0 ? src[seq_off(t_last, n, d, N, D, W) + k]
                           : (io16 & 1) ? load16(s16, init16 + i) : init[i];
    if (io16 & 2) {
        store16(s16, v, out16 + o);
        return;
    }
#else
    const real v = len > 0 ? src[seq_off(t_last, n, d, N, D, W) + k] : init[i];
#endif
    out[o] = v;
}

/* Inputs of the recurrent product for the steps s_lo .. s_hi-1 (a backward chunk), for the
 * weight-gradient GEMM: hin[t][n][d][k] = h[t-1] . m[t] (zero past len); with a two-phase GRU
 * also hr[t][n][d][k] = hin . r[t]; both laid out as the chunk buffers. h[t-1] is read from y, or
 * with `from_sav` (cells with CELL_H_SAVED, K = H) computed by cell_h from the saved gates sav and
 * the cell sequence cs: the MPSGraph gradients receive those, not h, and the h sequence is then
 * never rebuilt whole. Global size (ceil(K/VW), N, (s_hi - s_lo)*D): VW elements per work-item. */
__kernel void pyrnn_gather_hin(const int T, const int N, const int K, const int rev_mask,
                               const int s_lo, const int s_hi,
                               __global const real *y, __global const real *h0, const long h0_sd,
                               const long h0_sn, __global const real *mask,
                               __global const int *lens, __global const real *sav,
                               __global const real *cs, const int from_sav,
                               __global real *hin, __global real *hr, const int s16,
                               const int rd16, __global const ushort *sav16,
                               __global const ushort *cs16)
{
    const int k = get_global_id(0) * REC_VW, n = get_global_id(1), nu = K - k;
    const int D = get_global_size(2) / (s_hi - s_lo);
    const int i = get_global_id(2) / D, d = get_global_id(2) % D;
    const int rev = (rev_mask >> d) & 1;
    const int t = i + chunk_t0(rev, T, s_lo, s_hi);
    const int len = row_len(lens, n, T);
    const int tp = prev_time(t, rev, len, T);
    realV v = VZERO;
    if (t < len) {
        if (tp < 0) {
            v = LOADU(h0 + d * h0_sd + n * h0_sn + k, nu);
#if CELL_H_SAVED
        } else if (from_sav) {
            realV g[CELL_G];
            for (int q = 0; q < CELL_G; ++q)
                g[q] = RD16(sav, RD16_SAV,
                            seq_off(tp, n, d, N, D, CELL_G * K) + gate_blk(q) * K + k, nu);
            realV c = VZERO;
#if CELL_HAS_C
            c = RD16(cs, RD16_CS, seq_off(tp, n, d, N, D, K) + k, nu);
#endif
            v = cell_h(g, c);
#endif
        } else {
            v = LOADU(y + seq_off(tp, n, d, N, D, K) + k, nu);
        }
#if HAS_MASK
        v *= LOADU(mask + seq_off(t, n, d, N, D, K) + k, nu);
#endif
    }
    STOREU(v, hin + seq_off(i, n, d, N, D, K) + k, nu);
#if CELL_GA < CELL_G
    STOREU(v * RD16(sav, RD16_SAV, seq_off(t, n, d, N, D, CELL_G * K)
                                   + gate_blk(CELL_LATE_GATE) * K + k, nu),
           hr + seq_off(i, n, d, N, D, K) + k, nu);
#endif
}

#if HAS_PEEP
/* Peephole gradients: dpeep[d][blk_k*H + j] = beta * dpeep + the sum over valid (t, n) of the
 * steps s_lo .. s_hi-1 of da_k . c, with c = c[t-1] for the slots of CELL_PEEP_SLOTS, c[t] for
 * CELL_PEEP_NEW_C (TensorFlow's output gate), 0 for the others, and da_k from the chunk buffer
 * dgx. Global size (H, CELL_G, D). */
__kernel void pyrnn_peep_grad(const int T, const int N, const int H, const int rev_mask,
                              const int s_lo, const int s_hi, const real beta,
                              __global const real *dgx, __global const real *cs,
                              __global const real *c0, const long c0_sd, const long c0_sn,
                              __global const int *lens, __global real *dpeep, const int s16,
                              const int rd16, __global const ushort *cs16)
{
    const int j = get_global_id(0), k = get_global_id(1), d = get_global_id(2);
    const int D = get_global_size(2), GH = CELL_G * H;
    const int rev = (rev_mask >> d) & 1, blk = gate_blk(k) * H + j;
    const int t0 = chunk_t0(rev, T, s_lo, s_hi), t1 = t0 + s_hi - s_lo;
    real acc = 0;
    for (int n = 0; n < N; ++n) {
        const int len = row_len(lens, n, T);
        for (int t = t0; t < min(t1, len); ++t) {
            const int tp = prev_time(t, rev, len, T);
            real c = tp >= 0 ? RD16_1(cs, RD16_CS, seq_off(tp, n, d, N, D, H) + j)
                             : c0[d * c0_sd + n * c0_sn + j];
            if (k == CELL_PEEP_NEW_C) c = RD16_1(cs, RD16_CS, seq_off(t, n, d, N, D, H) + j);
            else if (!((CELL_PEEP_SLOTS >> k) & 1)) c = 0;
            acc += dgx[chunk_off(t, n, d, rev, T, s_lo, s_hi, N, D, GH) + blk] * c;
        }
    }
    if (beta != 0) acc += beta * dpeep[d * GH + blk];
    dpeep[d * GH + blk] = acc;
}
#endif

#endif /* !BWD_PROGRAM */
