/* memra/quant.h: the GGUF quantized block layouts and their dequantization, shared by every
 * backend.
 *
 * Header-only and usable from CUDA (MEMRA_HD, from numeric.h, marks functions host and device),
 * like numeric.h. The layouts are ggml's (ggml-common.h) and each dequantization gives exactly the
 * floats ggml's dequantize_row_* and the gguf Python package's dequantize define: every product
 * and sum rounded once, in the order written (float arithmetic through MEMRA_FMUL and friends, so
 * a CUDA build does not contract them into fused operations). The f16 fields are decoded with
 * numeric.h's exact memra_f16_to_f32.
 *
 * Blocks are read through memcpy into a local copy, so a block may sit at any address (a file's
 * tensor data is aligned, but a block of 18 or 22 bytes inside a row is not 4-byte aligned). */
#ifndef MEMRA_QUANT_H
#define MEMRA_QUANT_H

#include <stdint.h>
#include <string.h>

#include "memra/numeric.h"

#ifdef __cplusplus
#define MEMRA_QUANT_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
extern "C" {
#else
#define MEMRA_QUANT_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#define MEMRA_QK 32    /* elements per block of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 */
#define MEMRA_QK_K 256 /* elements per block of the K-quants (Q4_K, Q5_K, Q6_K) */
#define MEMRA_K_SCALE_SIZE 12

/* ggml type numbers (memra_tensor_type in gguf.h spells the same numbers). */
#define MEMRA_QTYPE_Q4_0 2u
#define MEMRA_QTYPE_Q4_1 3u
#define MEMRA_QTYPE_Q5_0 6u
#define MEMRA_QTYPE_Q5_1 7u
#define MEMRA_QTYPE_Q8_0 8u
#define MEMRA_QTYPE_Q4_K 12u
#define MEMRA_QTYPE_Q5_K 13u
#define MEMRA_QTYPE_Q6_K 14u

/* Q4_0: w = d * (q - 8); low nibbles of qs are elements 0..15, high nibbles 16..31. */
typedef struct memra_block_q4_0 {
    uint16_t d; /* f16 */
    uint8_t qs[MEMRA_QK / 2];
} memra_block_q4_0;
MEMRA_QUANT_STATIC_ASSERT(sizeof(memra_block_q4_0) == 18, "Q4_0 block is 18 bytes");

/* Q4_1: w = d * q + m. */
typedef struct memra_block_q4_1 {
    uint16_t d, m; /* f16 */
    uint8_t qs[MEMRA_QK / 2];
} memra_block_q4_1;
MEMRA_QUANT_STATIC_ASSERT(sizeof(memra_block_q4_1) == 20, "Q4_1 block is 20 bytes");

/* Q5_0: w = d * (q - 16), q = nibble | fifth bit << 4; bit j of the little-endian 32-bit qh is
 * element j's fifth bit. */
typedef struct memra_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[MEMRA_QK / 2];
} memra_block_q5_0;
MEMRA_QUANT_STATIC_ASSERT(sizeof(memra_block_q5_0) == 22, "Q5_0 block is 22 bytes");

/* Q5_1: w = d * q + m. */
typedef struct memra_block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[MEMRA_QK / 2];
} memra_block_q5_1;
MEMRA_QUANT_STATIC_ASSERT(sizeof(memra_block_q5_1) == 24, "Q5_1 block is 24 bytes");

/* Q8_0: w = d * q. */
typedef struct memra_block_q8_0 {
    uint16_t d;
    int8_t qs[MEMRA_QK];
} memra_block_q8_0;
MEMRA_QUANT_STATIC_ASSERT(sizeof(memra_block_q8_0) == 34, "Q8_0 block is 34 bytes");

/* Q4_K: 8 sub-blocks of 32, each with a 6-bit scale and a 6-bit min packed in `scales`;
 * w = (d * sc) * q - (dmin * m). qs: for each 64 elements, 32 bytes whose low nibbles are the
 * first 32 and high nibbles the next 32. */
typedef struct memra_block_q4_k {
    uint16_t d, dmin;
    uint8_t scales[MEMRA_K_SCALE_SIZE];
    uint8_t qs[MEMRA_QK_K / 2];
} memra_block_q4_k;
MEMRA_QUANT_STATIC_ASSERT(sizeof(memra_block_q4_k) == 144, "Q4_K block is 144 bytes");

/* Q5_K: Q4_K plus a fifth bit per element in qh (bit 2i for the low nibbles of 64-chunk i, bit
 * 2i + 1 for its high nibbles). */
typedef struct memra_block_q5_k {
    uint16_t d, dmin;
    uint8_t scales[MEMRA_K_SCALE_SIZE];
    uint8_t qh[MEMRA_QK_K / 8];
    uint8_t qs[MEMRA_QK_K / 2];
} memra_block_q5_k;
MEMRA_QUANT_STATIC_ASSERT(sizeof(memra_block_q5_k) == 176, "Q5_K block is 176 bytes");

/* Q6_K: 16 sub-blocks of 16 with int8 scales; w = (d * scale) * (q - 32), q = 4 bits of ql and
 * 2 bits of qh. */
typedef struct memra_block_q6_k {
    uint8_t ql[MEMRA_QK_K / 2];
    uint8_t qh[MEMRA_QK_K / 4];
    int8_t scales[MEMRA_QK_K / 16];
    uint16_t d;
} memra_block_q6_k;
MEMRA_QUANT_STATIC_ASSERT(sizeof(memra_block_q6_k) == 210, "Q6_K block is 210 bytes");

/* Elements and bytes per block of a quantized type; 0 for any other type. */
MEMRA_HD uint32_t memra_quant_block_elems(uint32_t type) {
    switch (type) {
    case MEMRA_QTYPE_Q4_0:
    case MEMRA_QTYPE_Q4_1:
    case MEMRA_QTYPE_Q5_0:
    case MEMRA_QTYPE_Q5_1:
    case MEMRA_QTYPE_Q8_0: return MEMRA_QK;
    case MEMRA_QTYPE_Q4_K:
    case MEMRA_QTYPE_Q5_K:
    case MEMRA_QTYPE_Q6_K: return MEMRA_QK_K;
    default: return 0;
    }
}

MEMRA_HD uint32_t memra_quant_block_bytes(uint32_t type) {
    switch (type) {
    case MEMRA_QTYPE_Q4_0: return (uint32_t)sizeof(memra_block_q4_0);
    case MEMRA_QTYPE_Q4_1: return (uint32_t)sizeof(memra_block_q4_1);
    case MEMRA_QTYPE_Q5_0: return (uint32_t)sizeof(memra_block_q5_0);
    case MEMRA_QTYPE_Q5_1: return (uint32_t)sizeof(memra_block_q5_1);
    case MEMRA_QTYPE_Q8_0: return (uint32_t)sizeof(memra_block_q8_0);
    case MEMRA_QTYPE_Q4_K: return (uint32_t)sizeof(memra_block_q4_k);
    case MEMRA_QTYPE_Q5_K: return (uint32_t)sizeof(memra_block_q5_k);
    case MEMRA_QTYPE_Q6_K: return (uint32_t)sizeof(memra_block_q6_k);
    default: return 0;
    }
}

MEMRA_HD void memra_dequantize_q4_0(const void *blk, float *y) {
    memra_block_q4_0 b;
    memcpy(&b, blk, sizeof b);
    float d = memra_f16_to_f32(b.d);
    for (int j = 0; j < MEMRA_QK / 2; j++) {
        y[j] = MEMRA_FMUL((float)((int)(b.qs[j] & 0x0F) - 8), d);
        y[j + MEMRA_QK / 2] = MEMRA_FMUL((float)((int)(b.qs[j] >> 4) - 8), d);
    }
}

MEMRA_HD void memra_dequantize_q4_1(const void *blk, float *y) {
    memra_block_q4_1 b;
    memcpy(&b, blk, sizeof b);
    float d = memra_f16_to_f32(b.d), m = memra_f16_to_f32(b.m);
    for (int j = 0; j < MEMRA_QK / 2; j++) {
        y[j] = MEMRA_FADD(MEMRA_FMUL((float)(b.qs[j] & 0x0F), d), m);
        y[j + MEMRA_QK / 2] = MEMRA_FADD(MEMRA_FMUL((float)(b.qs[j] >> 4), d), m);
    }
}

MEMRA_HD uint32_t memra_quant_qh32(const uint8_t *qh) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

MEMRA_HD void memra_dequantize_q5_0(const void *blk, float *y) {
    memra_block_q5_0 b;
    memcpy(&b, blk, sizeof b);
    float d = memra_f16_to_f32(b.d);
    uint32_t qh = memra_quant_qh32(b.qh);
    for (int j = 0; j < MEMRA_QK / 2; j++) {
        int h0 = (int)((qh >> j) << 4 & 0x10u), h1 = (int)(qh >> (j + 12) & 0x10u);
        y[j] = MEMRA_FMUL((float)(((b.qs[j] & 0x0F) | h0) - 16), d);
        y[j + MEMRA_QK / 2] = MEMRA_FMUL((float)(((b.qs[j] >> 4) | h1) - 16), d);
    }
}

MEMRA_HD void memra_dequantize_q5_1(const void *blk, float *y) {
    memra_block_q5_1 b;
    memcpy(&b, blk, sizeof b);
    float d = memra_f16_to_f32(b.d), m = memra_f16_to_f32(b.m);
    uint32_t qh = memra_quant_qh32(b.qh);
    for (int j = 0; j < MEMRA_QK / 2; j++) {
        int h0 = (int)((qh >> j) << 4 & 0x10u), h1 = (int)(qh >> (j + 12) & 0x10u);
        y[j] = MEMRA_FADD(MEMRA_FMUL((float)((b.qs[j] & 0x0F) | h0), d), m);
        y[j + MEMRA_QK / 2] = MEMRA_FADD(MEMRA_FMUL((float)((b.qs[j] >> 4) | h1), d), m);
    }
}

MEMRA_HD void memra_dequantize_q8_0(const void *blk, float *y) {
    memra_block_q8_0 b;
    memcpy(&b, blk, sizeof b);
    float d = memra_f16_to_f32(b.d);
    for (int j = 0; j < MEMRA_QK; j++)
        y[j] = MEMRA_FMUL(d, (float)b.qs[j]);
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block: sub-blocks 0..3 keep
 * theirs in the low 6 bits of bytes j and j + 4; 4..7 have their low 4 bits in the nibbles of
 * byte j + 4 and their top 2 bits in the top bits of bytes j - 4 (scale) and j (min). */
MEMRA_HD void memra_quant_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = (uint8_t)(q[j] & 63);
        *m = (uint8_t)(q[j + 4] & 63);
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

MEMRA_HD void memra_dequantize_q4_k(const void *blk, float *y) {
    memra_block_q4_k b;
    memcpy(&b, blk, sizeof b);
    float d = memra_f16_to_f32(b.d), dmin = memra_f16_to_f32(b.dmin);
    const uint8_t *q = b.qs;
    for (int c = 0; c < 4; c++) { /* 64 elements a chunk: sub-blocks 2c (low nibbles), 2c + 1 (high) */
        uint8_t sc, m;
        memra_quant_scale_min_k4(2 * c, b.scales, &sc, &m);
        float d1 = MEMRA_FMUL(d, (float)sc), m1 = MEMRA_FMUL(dmin, (float)m);
        memra_quant_scale_min_k4(2 * c + 1, b.scales, &sc, &m);
        float d2 = MEMRA_FMUL(d, (float)sc), m2 = MEMRA_FMUL(dmin, (float)m);
        for (int l = 0; l < 32; l++)
            y[64 * c + l] = MEMRA_FSUB(MEMRA_FMUL(d1, (float)(q[l] & 0x0F)), m1);
        for (int l = 0; l < 32; l++)
            y[64 * c + 32 + l] = MEMRA_FSUB(MEMRA_FMUL(d2, (float)(q[l] >> 4)), m2);
        q += 32;
    }
}

MEMRA_HD void memra_dequantize_q5_k(const void *blk, float *y) {
    memra_block_q5_k b;
    memcpy(&b, blk, sizeof b);
    float d = memra_f16_to_f32(b.d), dmin = memra_f16_to_f32(b.dmin);
    const uint8_t *ql = b.qs;
    for (int c = 0; c < 4; c++) {
        uint8_t sc, m;
        memra_quant_scale_min_k4(2 * c, b.scales, &sc, &m);
        float d1 = MEMRA_FMUL(d, (float)sc), m1 = MEMRA_FMUL(dmin, (float)m);
        memra_quant_scale_min_k4(2 * c + 1, b.scales, &sc, &m);
        float d2 = MEMRA_FMUL(d, (float)sc), m2 = MEMRA_FMUL(dmin, (float)m);
        uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
        for (int l = 0; l < 32; l++)
            y[64 * c + l] = MEMRA_FSUB(MEMRA_FMUL(d1, (float)((ql[l] & 0x0F) + (b.qh[l] & u1 ? 16 : 0))), m1);
        for (int l = 0; l < 32; l++)
            y[64 * c + 32 + l] = MEMRA_FSUB(MEMRA_FMUL(d2, (float)((ql[l] >> 4) + (b.qh[l] & u2 ? 16 : 0))), m2);
        ql += 32;
    }
}

MEMRA_HD void memra_dequantize_q6_k(const void *blk, float *y) {
    memra_block_q6_k b;
    memcpy(&b, blk, sizeof b);
    float d = memra_f16_to_f32(b.d);
    for (int h = 0; h < 2; h++) { /* two halves of 128: ql 64 bytes, qh 32 bytes, scales 8 each */
        const uint8_t *ql = b.ql + 64 * h, *qh = b.qh + 32 * h;
        const int8_t *sc = b.scales + 8 * h;
        float *yh = y + 128 * h;
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int)((ql[l] & 0x0F) | ((qh[l] >> 0 & 3) << 4)) - 32;
            int q2 = (int)((ql[l + 32] & 0x0F) | ((qh[l] >> 2 & 3) << 4)) - 32;
            int q3 = (int)((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
            int q4 = (int)((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
            yh[l] = MEMRA_FMUL(MEMRA_FMUL(d, (float)sc[is]), (float)q1);
            yh[l + 32] = MEMRA_FMUL(MEMRA_FMUL(d, (float)sc[is + 2]), (float)q2);
            yh[l + 64] = MEMRA_FMUL(MEMRA_FMUL(d, (float)sc[is + 4]), (float)q3);
            yh[l + 96] = MEMRA_FMUL(MEMRA_FMUL(d, (float)sc[is + 6]), (float)q4);
        }
    }
}

/* One block of a quantized type into memra_quant_block_elems(type) floats; false (y untouched)
 * for any other type. */
MEMRA_HD int memra_dequantize_block(uint32_t type, const void *blk, float *y) {
    switch (type) {
    case MEMRA_QTYPE_Q4_0: memra_dequantize_q4_0(blk, y); return 1;
    case MEMRA_QTYPE_Q4_1: memra_dequantize_q4_1(blk, y); return 1;
    case MEMRA_QTYPE_Q5_0: memra_dequantize_q5_0(blk, y); return 1;
    case MEMRA_QTYPE_Q5_1: memra_dequantize_q5_1(blk, y); return 1;
    case MEMRA_QTYPE_Q8_0: memra_dequantize_q8_0(blk, y); return 1;
    case MEMRA_QTYPE_Q4_K: memra_dequantize_q4_k(blk, y); return 1;
    case MEMRA_QTYPE_Q5_K: memra_dequantize_q5_k(blk, y); return 1;
    case MEMRA_QTYPE_Q6_K: memra_dequantize_q6_k(blk, y); return 1;
    default: return 0;
    }
}

/* Row dequantization (model/src/quant.c): n elements of type at src into dst. type is F32, F16,
 * BF16 or one of the quantized types above, n a multiple of its block; returns 0 (dst untouched)
 * for another type or a partial block, 1 otherwise. */
int memra_dequantize_row(uint32_t type, const void *src, uint64_t n, float *dst);
#ifdef __cplusplus
}
#endif
#endif
