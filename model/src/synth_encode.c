/* synth_encode.c: the synthetic models' rows encoded in their tensor type (synth.c makes the
 * floats): F32, F16 and BF16 by rounding, the quantized types by plain round-to-nearest per block,
 * with no search for better scales (each encoder below says how). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "memra/gguf.h"
#include "memra/numeric.h"
#include "memra/quant.h"
#include "synth_encode.h"

/* ---- round-to-nearest quantization, one block at a time ---- */

static int q_clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
static float q_inv(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

/* Q4_0/Q5_0 (ggml's reference quantizers): d = m / -2^(bits-1) where m is the element of largest
 * magnitude (with its sign), q = x / d rounded to nearest, offset by 2^(bits-1), clamped. */
static void quantize_sym(const float *x, int bits, uint16_t *d_out, int *q) {
    float amax = 0.0f, m = 0.0f;
    for (int j = 0; j < MEMRA_QK; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            m = x[j];
        }
    }
    int half = 1 << (bits - 1);
    float d = m / (float)-half, id = q_inv(d);
    *d_out = memra_f32_to_f16(d);
    for (int j = 0; j < MEMRA_QK; j++)
        q[j] = q_clamp((int)(x[j] * id + (float)half + 0.5f), 0, 2 * half - 1);
}

/* Q4_1/Q5_1: m = the block's minimum, d = (max - min) / (2^bits - 1), q = (x - m) / d rounded. */
static void quantize_affine(const float *x, int bits, uint16_t *d_out, uint16_t *m_out, int *q) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < MEMRA_QK; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    int top = (1 << bits) - 1;
    float d = (hi - lo) / (float)top, id = q_inv(d);
    *d_out = memra_f32_to_f16(d);
    *m_out = memra_f32_to_f16(lo);
    for (int j = 0; j < MEMRA_QK; j++)
        q[j] = q_clamp((int)((x[j] - lo) * id + 0.5f), 0, top);
}

static void pack_nibbles32(const int *q, uint8_t *qs, uint8_t *qh) {
    uint32_t h = 0;
    for (int j = 0; j < MEMRA_QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | (q[j + 16] & 0x0F) << 4);
        h |= (uint32_t)(q[j] >> 4 & 1) << j | (uint32_t)(q[j + 16] >> 4 & 1) << (j + 16);
    }
    if (qh)
        for (int k = 0; k < 4; k++)
            qh[k] = (uint8_t)(h >> (8 * k));
}

/* Q4_K/Q5_K: per sub-block of 32, min' = min(0, min x) and scale = (max - min') / (2^bits - 1);
 * the super-block's d = max scale / 63 and dmin = max(-min') / 63; each sub-block's 6-bit sc and
 * m are its scale / d and -min' / dmin rounded; q = (x + dmin m) / (d sc) rounded, clamped. */
static void quantize_k(const float *x, int bits, uint16_t *d_out, uint16_t *dmin_out, uint8_t scales[12], int *q) {
    float sub_scale[8], sub_min[8], max_scale = 0.0f, max_min = 0.0f;
    int top = (1 << bits) - 1;
    for (int s = 0; s < 8; s++) {
        float lo = 0.0f, hi = x[32 * s];
        for (int j = 0; j < 32; j++) {
            lo = fminf(lo, x[32 * s + j]);
            hi = fmaxf(hi, x[32 * s + j]);
        }
        sub_scale[s] = (hi - lo) / (float)top;
        sub_min[s] = -lo;
        max_scale = fmaxf(max_scale, sub_scale[s]);
        max_min = fmaxf(max_min, sub_min[s]);
    }
    uint16_t dh = memra_f32_to_f16(max_scale / 63.0f), mh = memra_f32_to_f16(max_min / 63.0f);
    float d = memra_f16_to_f32(dh), dmin = memra_f16_to_f32(mh);
    *d_out = dh;
    *dmin_out = mh;
    memset(scales, 0, 12);
    for (int s = 0; s < 8; s++) {
        int sc = q_clamp((int)(sub_scale[s] * q_inv(d) + 0.5f), 0, 63);
        int m = q_clamp((int)(sub_min[s] * q_inv(dmin) + 0.5f), 0, 63);
        if (s < 4) {
            scales[s] |= (uint8_t)sc;
            scales[s + 4] |= (uint8_t)m;
        } else {
            scales[s + 4] = (uint8_t)((sc & 0x0F) | (m & 0x0F) << 4);
            scales[s - 4] |= (uint8_t)((sc >> 4) << 6);
            scales[s] |= (uint8_t)((m >> 4) << 6);
        }
        float ds = d * (float)sc, dm = dmin * (float)m, ids = q_inv(ds);
        for (int j = 0; j < 32; j++)
            q[32 * s + j] = q_clamp((int)((x[32 * s + j] + dm) * ids + 0.5f), 0, top);
    }
}

static void encode_q4_k(const float *x, unsigned char *out) {
    memra_block_q4_k b;
    int q[MEMRA_QK_K];
    quantize_k(x, 4, &b.d, &b.dmin, b.scales, q);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b.qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
    memcpy(out, &b, sizeof b);
}

static void encode_q5_k(const float *x, unsigned char *out) {
    memra_block_q5_k b;
    int q[MEMRA_QK_K];
    quantize_k(x, 5, &b.d, &b.dmin, b.scales, q);
    memset(b.qh, 0, sizeof b.qh);
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
            b.qs[32 * c + l] = (uint8_t)((lo & 0x0F) | (hi & 0x0F) << 4);
            b.qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
        }
    }
    memcpy(out, &b, sizeof b);
}

/* Q6_K: per sub-block of 16, scale = amax / 31; d = max scale / 127; sc = scale / d rounded
 * (int8); q = x / (d sc) rounded, clamped to [-32, 31], stored + 32. */
static void encode_q6_k(const float *x, unsigned char *out) {
    memra_block_q6_k b;
    float sub_scale[16], max_scale = 0.0f;
    for (int s = 0; s < 16; s++) {
        float amax = 0.0f;
        for (int j = 0; j < 16; j++)
            amax = fmaxf(amax, fabsf(x[16 * s + j]));
        sub_scale[s] = amax / 31.0f;
        max_scale = fmaxf(max_scale, sub_scale[s]);
    }
    b.d = memra_f32_to_f16(max_scale / 127.0f);
    float d = memra_f16_to_f32(b.d);
    int q[MEMRA_QK_K];
    for (int s = 0; s < 16; s++) {
        int sc = q_clamp((int)(sub_scale[s] * q_inv(d) + 0.5f), 0, 127);
        b.scales[s] = (int8_t)sc;
        float ids = q_inv(d * (float)sc);
        for (int j = 0; j < 16; j++)
            q[16 * s + j] = q_clamp((int)lrintf(x[16 * s + j] * ids), -32, 31) + 32;
    }
    for (int h = 0; h < 2; h++) {
        const int *qh = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            int q1 = qh[l], q2 = qh[l + 32], q3 = qh[l + 64], q4 = qh[l + 96];
            b.ql[64 * h + l] = (uint8_t)((q1 & 0x0F) | (q3 & 0x0F) << 4);
            b.ql[64 * h + l + 32] = (uint8_t)((q2 & 0x0F) | (q4 & 0x0F) << 4);
            b.qh[32 * h + l] = (uint8_t)((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
        }
    }
    memcpy(out, &b, sizeof b);
}

static void encode_block32(uint32_t type, const float *x, unsigned char *out) {
    int q[MEMRA_QK];
    switch (type) {
    case MEMRA_TYPE_Q4_0: {
        memra_block_q4_0 b;
        quantize_sym(x, 4, &b.d, q);
        pack_nibbles32(q, b.qs, NULL);
        memcpy(out, &b, sizeof b);
        break;
    }
    case MEMRA_TYPE_Q4_1: {
        memra_block_q4_1 b;
        quantize_affine(x, 4, &b.d, &b.m, q);
        pack_nibbles32(q, b.qs, NULL);
        memcpy(out, &b, sizeof b);
        break;
    }
    case MEMRA_TYPE_Q5_0: {
        memra_block_q5_0 b;
        quantize_sym(x, 5, &b.d, q);
        pack_nibbles32(q, b.qs, b.qh);
        memcpy(out, &b, sizeof b);
        break;
    }
    case MEMRA_TYPE_Q5_1: {
        memra_block_q5_1 b;
        quantize_affine(x, 5, &b.d, &b.m, q);
        pack_nibbles32(q, b.qs, b.qh);
        memcpy(out, &b, sizeof b);
        break;
    }
    default: break;
    }
}

/* Encodes n floats into type at dst (n a multiple of the type's block). Q8_0 as ggml's
 * quantize_row_q8_0_ref: d = amax/127, q = round(x * (1/d)), d stored as f16. */
void synth_encode_row(uint32_t type, const float *x, uint64_t n, unsigned char *dst) {
    switch (type) {
    case MEMRA_TYPE_F32: memcpy(dst, x, n * sizeof(float)); break;
    case MEMRA_TYPE_F16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = memra_f32_to_f16(x[i]);
            memcpy(dst + 2 * i, &h, 2);
        }
        break;
    case MEMRA_TYPE_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = memra_f32_to_bf16(x[i]);
            memcpy(dst + 2 * i, &h, 2);
        }
        break;
    case MEMRA_TYPE_Q8_0:
        for (uint64_t b = 0; b < n / MEMRA_Q8_0_BLOCK; b++) {
            const float *xb = x + b * MEMRA_Q8_0_BLOCK;
            unsigned char *out = dst + b * MEMRA_Q8_0_BLOCK_BYTES;
            float amax = 0.0f;
            for (uint32_t j = 0; j < MEMRA_Q8_0_BLOCK; j++)
                amax = fmaxf(amax, fabsf(xb[j]));
            float d = amax / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            uint16_t dh = memra_f32_to_f16(d);
            memcpy(out, &dh, 2);
            for (uint32_t j = 0; j < MEMRA_Q8_0_BLOCK; j++)
                out[2 + j] = (unsigned char)(int8_t)roundf(xb[j] * id);
        }
        break;
    case MEMRA_TYPE_Q4_0:
    case MEMRA_TYPE_Q4_1:
    case MEMRA_TYPE_Q5_0:
    case MEMRA_TYPE_Q5_1:
        for (uint64_t b = 0; b < n / MEMRA_QK; b++)
            encode_block32(type, x + b * MEMRA_QK, dst + b * memra_quant_block_bytes(type));
        break;
    case MEMRA_TYPE_Q4_K:
    case MEMRA_TYPE_Q5_K:
    case MEMRA_TYPE_Q6_K:
        for (uint64_t b = 0; b < n / MEMRA_QK_K; b++) {
            unsigned char *out = dst + b * memra_quant_block_bytes(type);
            if (type == MEMRA_TYPE_Q4_K)
                encode_q4_k(x + b * MEMRA_QK_K, out);
            else if (type == MEMRA_TYPE_Q5_K)
                encode_q5_k(x + b * MEMRA_QK_K, out);
            else
                encode_q6_k(x + b * MEMRA_QK_K, out);
        }
        break;
    }
}

