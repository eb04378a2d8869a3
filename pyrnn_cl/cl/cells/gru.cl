/* cells/gru.cl -- GRU pointwise maths. Canonical gate slots: 0 = z (update), 1 = r (reset),
 * 2 = o (candidate; cuDNN's h', PyTorch's n, TF's c).
 *
 *   z = f_z(gx_z + gh_z)    r = f_r(gx_r + gh_r)        (ACT_0, ACT_1; default sigmoid)
 *   GRU_RESET_AFTER 1 (cuDNN / PyTorch / ONNX linear_before_reset):
 *       hn = (h[t-1] . m) R_o^T + b_h,o          o = f_o(gx_o + r . hn)
 *   GRU_RESET_AFTER 0 (TF GRUBlockCell, Keras reset_after=False):
 *       o = f_o(gx_o + (h[t-1] . r . m) R_o^T + b_h,o)
 *       -- needs all of r before the o-gate product: two fused kernels per step (a two-phase
 *       cell: CELL_LATE_GATE = r, o read late).
 *   GRU_FLIP_Z 1: h[t] = z . h[t-1] + (1 - z) . o   (cuDNN/PyTorch/TF)
 *   GRU_FLIP_Z 0: h[t] = (1 - z) . h[t-1] + z . o   (MPSGraph flipZ = NO)
 *
 * Saved for backward: z, r, o (post-activation). Reset-after backward gets hn recomputed by the
 * engine (it is not saved, so MPSGraph's z_state keeps its documented G.H width).
 */
#include "../common.h"

#ifndef GRU_RESET_AFTER
#define GRU_RESET_AFTER 1
#endif
#ifndef GRU_FLIP_Z
#define GRU_FLIP_Z 1
#endif
#ifndef ACT_0
#define ACT_0 ACT_SIGMOID
#endif
#ifndef ACT_1
#define ACT_1 ACT_SIGMOID
#endif
#ifndef ACT_2
#define ACT_2 ACT_TANH
#endif

/* the cell contract (recurrence.cl) */
#define CELL_G 3
#define CELL_STATES 1
#define CELL_USES_HPREV 1
#define CELL_BWD_NEEDS_Y 1  /* h[t] needs h[t-1]: the backward is given y */
#if GRU_RESET_AFTER
#define CELL_LATE_GATE -1
#define CELL_HN_SLOT 2      /* cell_bwd needs hn = (h[t-1] . m) R_o^T + b_h,o */
#else
#define CELL_LATE_GATE 1    /* z and r first; o, from h[t-1] . r . m, in cell_fwd_b */
#define CELL_HN_SLOT -1
#endif

/* h[t] from z, h[t-1], o and the three partial derivatives of that update. */
PYRNN_FUNC realV gru_update(realV z, realV h_prev, realV o)
{
#if GRU_FLIP_Z
    return z * h_prev + (VONE - z) * o;
#else
    return (VONE - z) * h_prev + z * o;
#endif
}

PYRNN_FUNC void gru_update_grad(realV z, realV h_prev, realV o, realV dh, realV *dz, realV *dhp,
                                realV *do_)
{
#if GRU_FLIP_Z
    *dz = dh * (h_prev - o);
    *dhp = dh * z;
    *do_ = dh * (VONE - z);
#else
    *dz = dh * (o - h_prev);
    *dhp = dh * (VONE - z);
    *do_ = dh * z;
#endif
}

/* Reset-after: the whole step. Reset-before: z and r only; *h receives h[t-1] . r . m, the input
 * of the o-gate product computed by the second kernel. */
PYRNN_FUNC void cell_fwd(const realV gx[CELL_G], const realV gh[CELL_G], realV h_prev, realV m,
                         realV c_prev, const realV peep[CELL_G], real clip, realV sav[CELL_G],
                         realV *h, realV *c)
{
    realV z = pyrnn_act(ACT_0, gx[0] + gh[0]);
    realV r = pyrnn_act(ACT_1, gx[1] + gh[1]);
    sav[0] = z;
    sav[1] = r;
#if GRU_RESET_AFTER
    realV o = pyrnn_act(ACT_2, gx[2] + r * gh[2]);
    sav[2] = o;
    *h = gru_update(z, h_prev, o);
#else
    *h = h_prev * m * r;
#endif
    *c = VZERO;
}

#if !GRU_RESET_AFTER
/* Second kernel of a reset-before step: gh_o = (h[t-1] . r . m) R_o^T + b_h,o. */
PYRNN_FUNC void cell_fwd_b(const realV sav[CELL_G], realV gx_o, realV gh_o, realV h_prev,
                           realV *o, realV *h)
{
    *o = pyrnn_act(ACT_2, gx_o + gh_o);
    *h = gru_update(sav[0], h_prev, *o);
}
#endif

/* Reset-after: all gate gradients; carry_h = the direct path dL/dh[t-1] (not through R).
 * Reset-before: z and o gradients only (r needs q = dgh_o R_o, see cell_bwd_b); carry_h = direct
 * path so far. */
PYRNN_FUNC void cell_bwd(const realV sav[CELL_G], realV h_prev, realV m, realV c_prev, realV c,
                         realV hn, const realV peep[CELL_G], real clip, realV dh, realV dc,
                         realV dgx[CELL_G], realV dgh[CELL_G], realV *carry_h, realV *carry_c)
{
    realV z = sav[0], r = sav[1], o = sav[2];
    realV dz, dhp, do_;
    gru_update_grad(z, h_prev, o, dh, &dz, &dhp, &do_);
    realV da_z = dz * pyrnn_dact(ACT_0, z);
    realV da_o = do_ * pyrnn_dact(ACT_2, o);
    dgx[0] = da_z; dgh[0] = da_z;
    dgx[2] = da_o;
#if GRU_RESET_AFTER
    realV da_r = da_o * hn * pyrnn_dact(ACT_1, r);
    dgx[1] = da_r; dgh[1] = da_r;
    dgh[2] = da_o * r;
#else
    dgx[1] = VZERO; dgh[1] = VZERO;
    dgh[2] = da_o;
#endif
    *carry_h = dhp;
    *carry_c = VZERO;
}

#if !GRU_RESET_AFTER
/* Second backward kernel of a reset-before step: q = dgh_o R_o (gradient of h[t-1] . r . m).
 * Adds r's path to its pre-activation gradient (zero from cell_bwd) and q . r . m to the direct
 * carry. */
PYRNN_FUNC void cell_bwd_b(realV r, realV h_prev, realV m, realV q, realV *da_r, realV *carry_h)
{
    *da_r += q * h_prev * m * pyrnn_dact(ACT_1, r);
    *carry_h += q * r * m;
}
#endif
