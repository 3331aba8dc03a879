/* kquant_layout.h: the upload layout of the K-quants (Q4_K, Q5_K, Q6_K) on the cuda backend, shared
 * by the kernels (gemv_kquant.cu) and a host test (C), so the test checks the code the kernels run:
 * the row repack from the file's blocks, and the exact dequantization of one element of the
 * layout (memra/quant.h's arithmetic, which the embedding lookup runs on the device).
 *
 * A row of nb = cols / 256 blocks is split so that every load of the GEMV is an aligned vector and
 * the bytes stay the file's (no inflation to floats). The row is cut into units of 16 bytes of
 * 4-bit quants (32 weights: 16 of one sub-block in the low nibbles, 16 of another in the high
 * nibbles), 8 a block, unit n = 8 b + u; lane l of a warp takes unit l of 32 consecutive ones, so a
 * warp's load of units is one coalesced 512-byte line.
 *
 *  Q4_K (144 B a block): data = qs [nb][128] (the file's); aux = [nb][16]: d, dmin, scales[12]
 *    (the file's first 16 bytes). Unit u = 2c + h: qs bytes 32c + 16h + (0..15); low nibbles are
 *    elements 64c + 16h + (0..15) (sub-block 2c), high ones 64c + 32 + 16h + (0..15) (2c + 1).
 *  Q5_K (176 B): Q4_K's data and aux, and after the nb * 128 bytes of qs, the fifth bits as one
 *    32-bit word per unit (nb * 32 bytes): byte i, bit k (k < 4) is the fifth bit of the low
 *    nibble of qs byte 4k + i of the unit, bit 4 + k that of its high nibble.
 *  Q6_K (210 B): data = ql [nb][128] (the file's), then per unit two 32-bit words A, B of the top
 *    two bits (nb * 64 bytes): byte i, bits 2k, 2k + 1 of A (B) are those of the element in the low
 *    (high) nibble of ql byte 4k + i of the unit. aux = the sub-block scales per unit, [nb][8][2]
 *    (low nibbles' sub-block, high nibbles'), then d per block [nb] (f16), padded to 16 bytes.
 *    Unit u = 4 hf + q: ql bytes 64 hf + 16 q + (0..15); low nibbles are elements
 *    128 hf + 16 q + (0..15) (sub-block 8 hf + q), high ones 128 hf + 64 + 16 q + (0..15)
 *    (sub-block 8 hf + 4 + q). */
#ifndef MEMRA_CUDA_KQUANT_LAYOUT_H
#define MEMRA_CUDA_KQUANT_LAYOUT_H

#include <stdint.h>
#include <string.h>

#include "memra/quant.h"

/* Bytes per row of data and aux; 0 (both) for another type or cols not a positive multiple of
 * 256. */
MEMRA_HD int mc_kq_layout(uint32_t type, uint64_t cols, uint64_t *data_row, uint64_t *aux_row) {
    const uint64_t nb = cols / MEMRA_QK_K;
    *data_row = 0;
    *aux_row = 0;
    if (cols == 0 || cols % MEMRA_QK_K)
        return 0;
    switch (type) {
    case MEMRA_QTYPE_Q4_K: *data_row = 128 * nb, *aux_row = 16 * nb; return 1;
    case MEMRA_QTYPE_Q5_K: *data_row = 160 * nb, *aux_row = 16 * nb; return 1;
    case MEMRA_QTYPE_Q6_K: *data_row = 192 * nb, *aux_row = (18 * nb + 15) / 16 * 16; return 1;
    default: return 0;
    }
}

MEMRA_HD uint16_t mc_kq_u16(const uint8_t *p) { return (uint16_t)(p[0] | (uint16_t)p[1] << 8); }

/* One row of cols / 256 file blocks at src into the layout (dst_data, dst_aux of mc_kq_layout's
 * sizes, zeroed by the caller). */
static inline void mc_kq_repack(uint32_t type, const uint8_t *src, uint64_t cols, uint8_t *data, uint8_t *aux) {
    const uint64_t nb = cols / MEMRA_QK_K;
    const uint32_t bb = memra_quant_block_bytes(type);
    for (uint64_t b = 0; b < nb; b++) {
        const uint8_t *blk = src + b * bb;
        if (type == MEMRA_QTYPE_Q4_K || type == MEMRA_QTYPE_Q5_K) {
            const uint8_t *qs = blk + (type == MEMRA_QTYPE_Q4_K ? 16 : 48), *qh = blk + 16;
            memcpy(data + 128 * b, qs, 128);
            memcpy(aux + 16 * b, blk, 16);
            if (type == MEMRA_QTYPE_Q5_K)
                for (uint32_t u = 0; u < 8; u++) {
                    const uint32_t c = u / 2, h = u % 2;
                    uint8_t *o = data + 128 * nb + 32 * b + 4 * u;
                    for (uint32_t k = 0; k < 4; k++)
                        for (uint32_t i = 0; i < 4; i++) {
                            const uint8_t f = qh[16 * h + 4 * k + i]; /* bit 2c: element 64c + l; 2c+1: +32 */
                            o[i] |= (uint8_t)(((f >> (2 * c)) & 1u) << k | ((f >> (2 * c + 1)) & 1u) << (4 + k));
                        }
                }
        } else { /* Q6_K: ql[128], qh[64], scales[16], d */
            const uint8_t *ql = blk, *qh = blk + 128;
            const int8_t *sc = (const int8_t *)(blk + 192);
            memcpy(data + 128 * b, ql, 128);
            aux[16 * nb + 2 * b] = blk[208];
            aux[16 * nb + 2 * b + 1] = blk[209];
            for (uint32_t u = 0; u < 8; u++) {
                const uint32_t hf = u / 4, q = u % 4;
                uint8_t *o = data + 128 * nb + 64 * b + 8 * u;
                for (uint32_t k = 0; k < 4; k++)
                    for (uint32_t i = 0; i < 4; i++) {
                        const uint32_t j = 16 * q + 4 * k + i; /* ql byte of the half: elements j, 64 + j */
                        for (uint32_t t = 0; t < 2; t++) {
                            const uint32_t e = j + 64 * t;
                            const uint32_t top = (uint32_t)(qh[32 * hf + e % 32] >> (2 * (e / 32))) & 3u;
                            o[4 * t + i] |= (uint8_t)(top << (2 * k));
                        }
                    }
                aux[16 * b + 2 * u] = (uint8_t)sc[8 * hf + q];
                aux[16 * b + 2 * u + 1] = (uint8_t)sc[8 * hf + 4 + q];
            }
        }
    }
}

/* Element `col` of a row in the layout (data, aux of a row of nb blocks), dequantized exactly as
 * memra/quant.h does (the same products and sums, each rounded once). */
MEMRA_HD float mc_kq_elem(uint32_t type, const uint8_t *data, const uint8_t *aux, uint64_t nb, uint64_t col) {
    const uint64_t b = col / MEMRA_QK_K;
    const uint32_t e = (uint32_t)(col % MEMRA_QK_K);
    if (type == MEMRA_QTYPE_Q4_K || type == MEMRA_QTYPE_Q5_K) {
        const uint32_t c = e / 64, hi = e % 64 / 32, l = e % 32;
        const uint8_t byte = data[128 * b + 32 * c + l];
        uint32_t q = hi ? byte >> 4 : byte & 15u;
        if (type == MEMRA_QTYPE_Q5_K) {
            const uint32_t u = 2 * c + l / 16, k = l % 16 / 4, i = l % 4;
            const uint8_t f = data[128 * nb + 32 * b + 4 * u + i];
            q += (f >> (hi ? 4 + k : k) & 1u) ? 16 : 0;
        }
        const uint8_t *a = aux + 16 * b;
        uint8_t sc, m;
        memra_quant_scale_min_k4((int)(2 * c + hi), a + 4, &sc, &m);
        const float d = memra_f16_to_f32(mc_kq_u16(a)), dmin = memra_f16_to_f32(mc_kq_u16(a + 2));
        const float d1 = MEMRA_FMUL(d, (float)sc), m1 = MEMRA_FMUL(dmin, (float)m);
        return MEMRA_FSUB(MEMRA_FMUL(d1, (float)q), m1);
    }
    /* Q6_K */
    const uint32_t hf = e / 128, eh = e % 128, j = eh % 64, hi = eh / 64;
    const uint8_t byte = data[128 * b + 64 * hf + j];
    const uint32_t u = 4 * hf + j / 16, k = j % 16 / 4, i = j % 4;
    const uint8_t top = data[128 * nb + 64 * b + 8 * u + 4 * hi + i];
    const int q = (int)((hi ? byte >> 4 : byte & 15u) | ((uint32_t)(top >> (2 * k)) & 3u) << 4) - 32;
    const float d = memra_f16_to_f32(mc_kq_u16(aux + 16 * nb + 2 * b));
    const float sc = (float)(int8_t)aux[16 * b + 2 * u + hi];
    return MEMRA_FMUL(MEMRA_FMUL(d, sc), (float)q);
}

#endif
