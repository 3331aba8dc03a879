/* legacy_layout.h: the upload layout of the legacy quantized types (Q4_0, Q4_1, Q5_0, Q5_1: blocks
 * of 32) on the cuda backend, host code shared by gemv_legacy.cu (mc_qlayout_legacy,
 * mc_qrepack_legacy) and a host test (C, no GPU), so the test checks the code the upload runs.
 *
 * A row of `cols` columns (nb = cols / 32 blocks) is split into two planes, each padded to 16 bytes:
 *   data: nb * 16 bytes, block b's quant nibbles as the file has them (qs: byte j's low nibble is
 *         element j, its high nibble element 16 + j), so a lane reads a block with one 16-byte load;
 *   aux:  [qh' : nb u32, Q5 only] [d : nb f16] [m : nb f16, Q4_1 and Q5_1 only].
 * qh' is the file's 32 fifth bits rearranged so that a 32-bit word of nibbles unpacks with two
 * operations: element e's bit sits at bit 8 * (e % 4) + g, g = e / 4 for e < 16 (the low nibbles of
 * qs word g) and g = 4 + (e - 16) / 4 otherwise (the high nibbles of word g - 4); then
 * ((qh' >> g) & 0x01010101) << 4 are the fifth bits of group g's four bytes. Bytes per row: the
 * file's (18, 20, 22, 24 per block), up to the 16-byte padding of each plane. mc_ll_elem decodes
 * one element of the layout exactly as memra/quant.h dequantizes the file's block. */
#ifndef MEMRA_LEGACY_LAYOUT_H
#define MEMRA_LEGACY_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "memra/numeric.h"
#include "memra/quant.h"

#ifdef __CUDACC__
#define MC_LL_HD __host__ __device__ __forceinline__
#else
#define MC_LL_HD static inline
#endif

/* The widest row the legacy GEMVs take: the float path holds x' (cols floats) in shared memory
 * (at most 200 KiB a block); the integer path 72 bytes per block of 32. */
#define MC_LL_COLS_MAX 51200u

MC_LL_HD bool mc_ll_is(uint32_t t) {
    return t == MEMRA_QTYPE_Q4_0 || t == MEMRA_QTYPE_Q4_1 || t == MEMRA_QTYPE_Q5_0 || t == MEMRA_QTYPE_Q5_1;
}
MC_LL_HD bool mc_ll_has_m(uint32_t t) { return t == MEMRA_QTYPE_Q4_1 || t == MEMRA_QTYPE_Q5_1; }
MC_LL_HD bool mc_ll_has_h(uint32_t t) { return t == MEMRA_QTYPE_Q5_0 || t == MEMRA_QTYPE_Q5_1; }
MC_LL_HD uint64_t mc_ll_pad16(uint64_t n) { return (n + 15) / 16 * 16; }
/* Byte offsets of the d and m planes in an aux row of nb blocks. */
MC_LL_HD uint64_t mc_ll_d_off(uint32_t t, uint64_t nb) { return mc_ll_has_h(t) ? 4 * nb : 0; }
MC_LL_HD uint64_t mc_ll_m_off(uint32_t t, uint64_t nb) { return mc_ll_d_off(t, nb) + 2 * nb; }

/* Bytes per stored row of data and aux; false for another type or cols not a multiple of 32. */
MC_LL_HD bool mc_ll_layout(uint32_t t, uint64_t cols, uint64_t *data_row, uint64_t *aux_row) {
    if (!mc_ll_is(t) || cols == 0 || cols % MEMRA_QK != 0)
        return false;
    const uint64_t nb = cols / MEMRA_QK;
    *data_row = nb * 16;
    *aux_row = mc_ll_pad16(nb * (2u + (mc_ll_has_m(t) ? 2u : 0u) + (mc_ll_has_h(t) ? 4u : 0u)));
    return true;
}

/* The file's qh (bit e: element e's fifth bit) into qh' (above). */
MC_LL_HD uint32_t mc_ll_qh_permute(uint32_t qh) {
    uint32_t out = 0;
    for (uint32_t e = 0; e < 32; e++)
        if (qh >> e & 1u) {
            const uint32_t g = e < 16 ? e / 4 : 4 + (e - 16) / 4;
            out |= 1u << (8 * (e % 4) + g);
        }
    return out;
}

/* One row of nb = cols / 32 blocks of the file's encoding at src into the two planes (zeroed by
 * the caller; the padding stays zero). */
MC_LL_HD void mc_ll_repack(uint32_t t, const uint8_t *src, uint64_t cols, uint8_t *data, uint8_t *aux) {
    const uint64_t nb = cols / MEMRA_QK, bb = memra_quant_block_bytes(t);
    const bool hm = mc_ll_has_m(t), hh = mc_ll_has_h(t);
    for (uint64_t b = 0; b < nb; b++) {
        const uint8_t *blk = src + b * bb;
        /* every block starts with d (and m for the _1 types), then qh for Q5, then qs */
        const uint32_t head = 2u + (hm ? 2u : 0u);
        memcpy(aux + mc_ll_d_off(t, nb) + 2 * b, blk, 2);
        if (hm)
            memcpy(aux + mc_ll_m_off(t, nb) + 2 * b, blk + 2, 2);
        if (hh) {
            const uint32_t qh = memra_quant_qh32(blk + head), p = mc_ll_qh_permute(qh);
            memcpy(aux + 4 * b, &p, 4);
        }
        memcpy(data + 16 * b, blk + head + (hh ? 4u : 0u), 16);
    }
}

/* A stored block's quants as int8 bytes (4 bits, or 5 with the fifth merged; the zero point not
 * subtracted): q[k] holds elements 4k .. 4k+3 (the low nibbles), q[4 + k] elements 16 + 4k ..
 * (the high ones), byte j of a word element j of its four. qs: the block's 16 data bytes as four
 * little-endian words; qh: its qh' (Q5; ignored otherwise). gemv_legacy.cu's dp4a operands and
 * chunk_legacy_mma.cu's MMA operands. */
MC_LL_HD void mc_ll_words(uint32_t t, const uint32_t qs[4], uint32_t qh, uint32_t q[8]) {
    for (uint32_t k = 0; k < 4; k++) {
        q[k] = qs[k] & 0x0F0F0F0Fu;
        q[4 + k] = (qs[k] >> 4) & 0x0F0F0F0Fu;
        if (mc_ll_has_h(t)) {
            q[k] |= ((qh >> k) & 0x01010101u) << 4;
            q[4 + k] |= ((qh >> (k + 4)) & 0x01010101u) << 4;
        }
    }
}

/* Element c of a stored row (data and aux planes of a row of cols columns), decoded exactly as
 * memra/quant.h decodes the file's block. */
MC_LL_HD float mc_ll_elem(uint32_t t, const uint8_t *data, const uint8_t *aux, uint64_t cols, uint64_t c) {
    const uint64_t nb = cols / MEMRA_QK, b = c / MEMRA_QK;
    const uint32_t e = (uint32_t)(c % MEMRA_QK);
    const uint8_t byte = data[16 * b + (e & 15)];
    int q = e < 16 ? byte & 0x0F : byte >> 4;
    uint16_t h16;
    memcpy(&h16, aux + mc_ll_d_off(t, nb) + 2 * b, 2);
    const float d = memra_f16_to_f32(h16);
    if (mc_ll_has_h(t)) {
        uint32_t p;
        memcpy(&p, aux + 4 * b, 4);
        const uint32_t g = e < 16 ? e / 4 : 4 + (e - 16) / 4;
        q |= (int)((p >> (8 * (e % 4) + g)) & 1u) << 4;
    }
    if (!mc_ll_has_m(t))
        return MEMRA_FMUL((float)(q - (mc_ll_has_h(t) ? 16 : 8)), d);
    memcpy(&h16, aux + mc_ll_m_off(t, nb) + 2 * b, 2);
    return MEMRA_FADD(MEMRA_FMUL((float)q, d), memra_f16_to_f32(h16));
}

#endif
