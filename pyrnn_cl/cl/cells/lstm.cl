/* cells/lstm.cl -- LSTM pointwise maths. Canonical gate slots: 0 = i (input), 1 = f (forget),
 * 2 = g (cell candidate, MPSGraph's "z", TF's "ci"), 3 = o (output). Where each gate lives in the
 * user's weight blocks is the engine's business (GATE_BLK_k); here only slots are used.
 *
 *   a_k   = gx_k + gh_k [+ peephole]            gx = x W^T + b_x,  gh = (h[t-1] . m) R^T + b_h
 *   i = f_i(a_i)   f = f_f(a_f)   g = f_g(a_g)   (ACT_0..ACT_2, defaults sigmoid, sigmoid, tanh)
 *   c[t] = f . c[t-1] + i . g                    then clamp to [-clip, clip] when LSTM_CLIP
 *   o = f_o(a_o)   (ACT_3)          h[t] = o . act_c(c[t])   (ACT_CELL, default tanh)
 *
 * Peephole modes (LSTM_PEEP): 0 none; 1 MPSGraph: p_k . c[t-1] added to all four gates;
 * 2 TensorFlow: p_i . c[t-1] to i, p_f . c[t-1] to f and p_o . c[t] (the new, clipped c) to o.
 * The clamp's gradient is straight-through (TensorFlow's behaviour).
 *
 * Saved for backward: i, f, g, o (post-activation); c[t] and c[t-1] come from the cell sequence.
 */
#include "../common.h"

/* the cell contract (recurrence.cl) */
#define CELL_G 4
#define CELL_STATES 2        /* h and c */
#define CELL_LATE_GATE -1
#define CELL_HN_SLOT -1
#define CELL_USES_HPREV 0
#define CELL_BWD_NEEDS_Y 0   /* h[t] follows from the saved gates and c[t]: cell_h */

#ifndef ACT_0
#define ACT_0 ACT_SIGMOID
#endif
#ifndef ACT_1
#define ACT_1 ACT_SIGMOID
#endif
#ifndef ACT_2
#define ACT_2 ACT_TANH
#endif
#ifndef ACT_3
#define ACT_3 ACT_SIGMOID
#endif
#ifndef ACT_CELL
#define ACT_CELL ACT_TANH
#endif
#ifndef LSTM_PEEP
#define LSTM_PEEP 0         /* 0 none, 1 MPSGraph (all gates, c[t-1]), 2 TensorFlow (o uses c[t]) */
#endif
#ifndef LSTM_CLIP
#define LSTM_CLIP 0         /* 1: clamp c[t] to [-clip, clip] */
#endif

/* peephole roles: MPSGraph couples every gate to c[t-1]; TensorFlow i and f to c[t-1], o to the
 * new c[t], g to nothing */
#if LSTM_PEEP == 1
#define CELL_PEEP_SLOTS 0xF
#define CELL_PEEP_NEW_C -1
#elif LSTM_PEEP == 2
#define CELL_PEEP_SLOTS 0xB
#define CELL_PEEP_NEW_C 3
#else
#define CELL_PEEP_SLOTS 0
#define CELL_PEEP_NEW_C -1
#endif

PYRNN_FUNC void cell_fwd(const realV gx[CELL_G], const realV gh[CELL_G], realV h_prev, realV m,
                         realV c_prev, const realV peep[CELL_G], real clip, realV sav[CELL_G],
                         realV *h, realV *c)
{
    realV a[CELL_G];
    for (int k = 0; k < CELL_G; ++k) a[k] = gx[k] + gh[k];
#if LSTM_PEEP == 1
    for (int k = 0; k < CELL_G; ++k) a[k] += peep[k] * c_prev;
#elif LSTM_PEEP == 2
    a[0] += peep[0] * c_prev;
    a[1] += peep[1] * c_prev;
#endif
    realV i = pyrnn_act(ACT_0, a[0]);
    realV f = pyrnn_act(ACT_1, a[1]);
    realV g = pyrnn_act(ACT_2, a[2]);
    realV cn = f * c_prev + i * g;
#if LSTM_CLIP
    cn = pyrnn_keep_nan(clamp(cn, (realV)(-clip), (realV)(clip)), cn);
#endif
#if LSTM_PEEP == 2
    a[3] += peep[3] * cn;
#endif
    realV o = pyrnn_act(ACT_3, a[3]);
    sav[0] = i;
    sav[1] = f;
    sav[2] = g;
    sav[3] = o;
    *c = cn;
    *h = o * pyrnn_act(ACT_CELL, cn);
}

/* h[t] from what the forward saved (an MPSGraph gradient receives the gates and c, not h). */
PYRNN_FUNC realV cell_h(const realV sav[CELL_G], realV c)
{
    return sav[3] * pyrnn_act(ACT_CELL, c);
}

/* dh, dc: total gradients reaching h[t] and c[t] (from the loss and from step t+1). */
PYRNN_FUNC void cell_bwd(const realV sav[CELL_G], realV h_prev, realV m, realV c_prev, realV c,
                         realV hn, const realV peep[CELL_G], real clip, realV dh, realV dc,
                         realV dgx[CELL_G], realV dgh[CELL_G], realV *carry_h, realV *carry_c)
{
    realV i = sav[0], f = sav[1], g = sav[2], o = sav[3];
    realV ac = pyrnn_act(ACT_CELL, c);
    realV da_o = dh * ac * pyrnn_dact(ACT_3, o);
    realV dcn = dc + dh * o * pyrnn_dact(ACT_CELL, ac);
#if LSTM_PEEP == 2
    dcn += da_o * peep[3];
#endif
    realV da_i = dcn * g * pyrnn_dact(ACT_0, i);
    realV da_f = dcn * c_prev * pyrnn_dact(ACT_1, f);
    realV da_g = dcn * i * pyrnn_dact(ACT_2, g);
    realV dcp = dcn * f;
#if LSTM_PEEP == 1
    dcp += da_i * peep[0] + da_f * peep[1] + da_g * peep[2] + da_o * peep[3];
#elif LSTM_PEEP == 2
    dcp += da_i * peep[0] + da_f * peep[1];
#endif
    dgx[0] = da_i; dgx[1] = da_f; dgx[2] = da_g; dgx[3] = da_o;
    for (int k = 0; k < CELL_G; ++k) dgh[k] = dgx[k];
    *carry_h = VZERO;
    *carry_c = dcp;
}
