/* kq_mma_bits.h: the integer part of qdot=mma's weight fragments (gemv_mma.cuh's mc_kq4_frag,
 * mc_kq5_frag, mc_kq6_frag) and of the Q6_K prep's x' slots (gemv_mma.cu), shared with a host test
 * (tests/cuda/test_kq_mma_bits.c, C) so that the test checks the code the kernels run: which quant
 * value each byte of a lane's words holds, and which column each x' slot holds, against
 * kquant_layout.h's element decoding.
 *
 * A lane's quant word holds 4 quants (0 .. 63), the first in the low byte; a k-block's fragment then
 * pairs its bytes into bf16 halves 0x4300 | q (mc_kqm_pair: 128 + q, exact for q <= 127), from which
 * one fma.rn.bf16x2 takes 128 (Q4_K, Q5_K) or 160 (Q6_K, whose quants carry an offset of 32). */
#ifndef MEMRA_CUDA_KQ_MMA_BITS_H
#define MEMRA_CUDA_KQ_MMA_BITS_H

#include <stdint.h>

#include "q8x_quant.h" /* MC_Q8X_PERM, MC_Q8X_DEV: __byte_perm on the device, its emulation on the host */

/* Q4_K: a word of 4 quant bytes, its low nibbles (h 0) or high ones (h 1). */
MC_Q8X_DEV uint32_t mc_kqm_q4(uint32_t w, uint32_t h) { return (h ? w >> 4 : w) & 0x0F0F0F0Fu; }
/* Q5_K: word k (0 .. 3) of a unit's 16 quant bytes with the unit's fifth bits W merged
 * (kquant_layout.h: byte i, bit k of W is the fifth bit of byte 4k + i's low nibble, bit 4 + k its
 * high nibble's). */
MC_Q8X_DEV uint32_t mc_kqm_q5(uint32_t w, uint32_t W, uint32_t k, uint32_t h) {
    return h ? ((w >> 4) & 0x0F0F0F0Fu) | ((W >> k) & 0x10101010u) : (w & 0x0F0F0F0Fu) | ((W << (4u - k)) & 0x10101010u);
}
/* Q6_K: word t (0 .. 3) of a unit's 16 quant bytes with the top two bits of hb (A for the low nibbles,
 * B for the high ones: byte i, bits 2t, 2t + 1 belong to byte 4t + i). */
MC_Q8X_DEV uint32_t mc_kqm_q6(uint32_t ql, uint32_t hb, uint32_t t, uint32_t h) {
    const uint32_t top = t <= 2u ? hb << (4u - 2u * t) : hb >> 2;
    return ((h ? ql >> 4 : ql) & 0x0F0F0F0Fu) | (top & 0x30303030u);
}
/* Bytes 2p, 2p + 1 of a quant word (p 0 or 1) as the bf16 pair (128 + q0, 128 + q1). */
MC_Q8X_DEV uint32_t mc_kqm_pair(uint32_t q, uint32_t p) {
    return MC_Q8X_PERM(q, 0u, p ? 0x4342u : 0x4140u) | 0x43004300u;
}
/* The Q6_K prep's x' layout: column c (0 .. 31) of a k-block goes to element 16 m + s of its 32,
 * m = c / 16 the instruction, s the slot the decode lane t = c % 16 / 4 gives it: 2t + e for e =
 * c % 4 < 2, else 2t + 8 + e - 2. */
MC_Q8X_DEV uint32_t mc_kqm_q6_slot(uint32_t c) {
    const uint32_t m = c / 16u, t = c % 16u / 4u, e = c % 4u;
    return 16u * m + (e < 2u ? 2u * t + e : 2u * t + 8u + e - 2u);
}

#endif
