/* pack.h -- the dtype of the recurrence's weight packs (pack_t) and how the step kernels read
 * them (LOAD_PACKV) and pack.cl writes them (STORE_PACKV). recurrence.cl includes this header
 * only: the pack kernels (pack.cl) are a program of their own, built per (weight dtype, REC_VW,
 * PACK_DTYPE) and shared by every layer, not one copy in each of the many recurrence programs
 * (cell x flags x tiles), which each compile them again (PoCL per launch size).
 *
 * PACK_DTYPE = the dtype of the packs (the codes of PYRNN_DTYPE): the compute dtype (default),
 * or 3/4, the layer's 16-bit weights as stored (the steps then stream half the bytes and convert
 * as they read; the tuning value REC_PACK16_BYTES chooses by R's size).
 */
#ifndef PYRNN_PACK_H
#define PYRNN_PACK_H
#include "common.h"

#ifndef PACK_DTYPE
#define PACK_DTYPE (PYRNN_DTYPE == 2 ? 2 : 1)
#endif
#define PACK_S16 (PACK_DTYPE == 3 || PACK_DTYPE == 4)

/* a pack's element; LOAD_PACKV reads REC_VW consecutive ones as a realV (the step kernels'
 * weight reads), STORE_PACKV writes them, PACK_STORE1(v, p) / PACK_STOREN(n, v, p) write one or
 * n (2, 4, 8, 16) of them (exact: a 16-bit pack stores values read from 16 bits) */
#if PACK_S16
typedef PYRNN_S16_T(PACK_DTYPE) pack_t;
#if REC_VW == 1
#define LOAD_PACKV(p) PYRNN_S16_LOAD(PACK_DTYPE, 0, p)
#else
#define LOAD_PACKV(p) PYRNN_S16_LOADN(PACK_DTYPE, REC_VW, p)
#endif
#if PACK_DTYPE == 3
#define PACK_STORE1(v, p) vstore_half_rte((v), 0, (p))
#define PACK_STOREN(n, v, p) PYRNN_CAT(PYRNN_CAT(vstore_half, n), _rte)((v), 0, (p))
#else
#define PACK_STORE1(v, p) (*(p) = (ushort)(as_uint(v) >> 16))
#define PACK_STOREN(n, v, p) PYRNN_CAT(vstore, n)( \
    PYRNN_CAT(convert_ushort, n)(PYRNN_CAT(as_uint, n)(v) >> 16), 0, (p))
#endif
#else
typedef real pack_t;
#define LOAD_PACKV(p) LOADV(p)
#define PACK_STORE1(v, p) (*(p) = (v))
#define PACK_STOREN(n, v, p) PYRNN_CAT(vstore, n)((v), 0, (p))
#endif
#if REC_VW == 1
#define STORE_PACKV(v, p) PACK_STORE1(v, p)
#else
#define STORE_PACKV(v, p) PACK_STOREN(REC_VW, v, p)
#endif

#endif /* PYRNN_PACK_H */
