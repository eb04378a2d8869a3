/* cells/rnn.cl -- single-gate RNN pointwise maths (no indexing; the engine in recurrence.cl calls it).
 *
 *   pre[t] = gx[t] + gh[t]          gx = x W^T + b_x (input side), gh = (h[t-1] . m) R^T + b_h
 *   h[t]   = act(pre[t])            act = ACT_0 (none, relu, tanh, sigmoid, hard_sigmoid)
 *
 * Saved for backward: the pre-activation `pre` (slot 0). Backward: dpre = dh . act'(pre); the
 * recurrent path dh[t-1] += (dpre R) . m is the engine's reduction.
 */
#include "../common.h"

/* the cell contract (recurrence.cl) */
#define CELL_G 1            /* gates per hidden unit */
#define CELL_STATES 1       /* no cell state */
#define CELL_LATE_GATE -1   /* one phase */
#define CELL_HN_SLOT -1
#define CELL_USES_HPREV 0   /* h[t-1] only enters through the recurrent product */
#define CELL_BWD_NEEDS_Y 0  /* h[t] follows from the saved pre-activation: cell_h */

#ifndef ACT_0
#define ACT_0 ACT_RELU
#endif

PYRNN_FUNC void cell_fwd(const realV gx[CELL_G], const realV gh[CELL_G], realV h_prev, realV m,
                         realV c_prev, const realV peep[CELL_G], real clip, realV sav[CELL_G],
                         realV *h, realV *c)
{
    realV pre = gx[0] + gh[0];
    sav[0] = pre;
    *h = pyrnn_act(ACT_0, pre);
    *c = VZERO;
}

/* h[t] from what the forward saved (an MPSGraph gradient receives z_state, not h). */
PYRNN_FUNC realV cell_h(const realV sav[CELL_G], realV c)
{
    return pyrnn_act(ACT_0, sav[0]);
}

PYRNN_FUNC void cell_bwd(const realV sav[CELL_G], realV h_prev, realV m, realV c_prev, realV c,
                         realV hn, const realV peep[CELL_G], real clip, realV dh, realV dc,
                         realV dgx[CELL_G], realV dgh[CELL_G], realV *carry_h, realV *carry_c)
{
    realV dpre = dh * pyrnn_dact(ACT_0, pyrnn_act(ACT_0, sav[0]));
    dgx[0] = dpre;
    dgh[0] = dpre;
    *carry_h = VZERO;
    *carry_c = VZERO;
}
