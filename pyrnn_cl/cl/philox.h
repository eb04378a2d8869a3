/* philox.h -- the Philox4x32-10 counter-based generator, written from its definition in
 * J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw, "Parallel random numbers: as easy as 1, 2, 3"
 * (SC'11), section 3.3.
 *
 * A bijection of a 128-bit counter X = (x0, x1, x2, x3) under a 64-bit key K = (k0, k1): ten rounds
 * of
 *     (hi0, lo0) = M0 * x0 (full 64-bit product),  (hi1, lo1) = M1 * x2
 *     X <- (hi1 ^ x1 ^ k0, lo1, hi0 ^ x3 ^ k1, lo0)
 * with the key bumped by the Weyl constants (W0, W1) between rounds. The same (counter, key)
 * gives the same four 32-bit words on every device: integer arithmetic only.
 * Known answers (Random123's kat_vectors): counter 0, key 0 -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8.
 */
#ifndef PYRNN_PHILOX_H
#define PYRNN_PHILOX_H

#include "common.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u   /* golden ratio */
#define PHILOX_W1 0xBB67AE85u   /* sqrt(3) - 1 */

/* One round: the S-box of the paper's Philox-4x32. */
PYRNN_FUNC uint4 philox4x32_round(uint4 x, uint2 k)
{
    const uint hi0 = mul_hi(PHILOX_M0, x.s0), lo0 = PHILOX_M0 * x.s0;
    const uint hi1 = mul_hi(PHILOX_M1, x.s2), lo1 = PHILOX_M1 * x.s2;
    return (uint4)(hi1 ^ x.s1 ^ k.s0, lo1, hi0 ^ x.s3 ^ k.s1, lo0);
}

/* Philox4x32-10 of counter x under key k. */
PYRNN_FUNC uint4 philox4x32_10(uint4 x, uint2 k)
{
    for (int r = 0; r < 10; ++r) {
        if (r) k += (uint2)(PHILOX_W0, PHILOX_W1);
        x = philox4x32_round(x, k);
    }
    return x;
}

#endif
