/* tests/mgu.cl -- a minimal gated unit (MGU), registered from outside the package by
 * tests/test_custom_cell.py (pyrnn_cl.cells.register_cell). Canonical slots: 0 = f (forget),
 * 1 = n (candidate). A two-phase cell: n's recurrent product reads h[t-1] . f, so f is the late
 * gate and n the slot read late.
 *
 *   f = f_f(gx_f + (h[t-1] . m) R_f^T)                    (ACT_0, registered as sigmoid)
 *   n = f_n(gx_n + (h[t-1] . m . f) R_n^T)                (ACT_1, registered as tanh)
 *   h[t] = (1 - f) . h[t-1] + f . n
 *
 * Saved for backward: f, n (post-activation).
 */
#include "common.h"

#ifndef ACT_0
#define ACT_0 ACT_SIGMOID
#endif
#ifndef ACT_1
#define ACT_1 ACT_TANH
#endif

/* the cell contract (pyrnn_cl/cl/recurrence.cl) */
#define CELL_G 2
#define CELL_STATES 1
#define CELL_LATE_GATE 0
#define CELL_HN_SLOT -1
#define CELL_BWD_NEEDS_Y 1
#define CELL_USES_HPREV 1

/* first phase: f, and the input of n's recurrent product */
PYRNN_FUNC void cell_fwd(const realV gx[CELL_G], const realV gh[CELL_G], realV h_prev, realV m,
                         realV c_prev, const realV peep[CELL_G], real clip, realV sav[CELL_G],
                         realV *h, realV *c)
{
    realV f = pyrnn_act(ACT_0, gx[0] + gh[0]);
    sav[0] = f;
    *h = h_prev * m * f;
    *c = VZERO;
}

/* second phase: n from gh_n = (h[t-1] . m . f) R_n^T, then h[t] */
PYRNN_FUNC void cell_fwd_b(const realV sav[CELL_G], realV gx_n, realV gh_n, realV h_prev,
                           realV *n, realV *h)
{
    realV f = sav[0];
    *n = pyrnn_act(ACT_1, gx_n + gh_n);
    *h = (VONE - f) * h_prev + f * *n;
}

/* every path but f's through n's recurrent product (cell_bwd_b adds that one) */
PYRNN_FUNC void cell_bwd(const realV sav[CELL_G], realV h_prev, realV m, realV c_prev, realV c,
                         realV hn, const realV peep[CELL_G], real clip, realV dh, realV dc,
                         realV dgx[CELL_G], realV dgh[CELL_G], realV *carry_h, realV *carry_c)
{
    realV f = sav[0], n = sav[1];
    realV da_n = dh * f * pyrnn_dact(ACT_1, n);
    realV da_f = dh * (n - h_prev) * pyrnn_dact(ACT_0, f);
    dgx[0] = da_f; dgh[0] = da_f;
    dgx[1] = da_n; dgh[1] = da_n;
    *carry_h = dh * (VONE - f);
    *carry_c = VZERO;
}

/* q = dL/d(h[t-1] . m . f): f's share through n, and the h[t-1] path through it */
PYRNN_FUNC void cell_bwd_b(realV f, realV h_prev, realV m, realV q, realV *da_f, realV *carry_h)
{
    *da_f += q * h_prev * m * pyrnn_dact(ACT_0, f);
    *carry_h += q * f * m;
}
