/* test_kq_mma_bits.c: qdot=mma's weight fragments and the Q6_K prep's x' slots (backends/cuda/
 * kq_mma_bits.h, the header gemv_mma.cuh's mc_kq4_frag, mc_kq5_frag and mc_kq6_frag and gemv_mma.cu's
 * Q6_K prep run), checked on the host: no GPU needed, so it runs in CI.
 *
 * - Q4_K, Q5_K: for every pair of k-blocks of a super-block, lane t and half (low nibbles: the first
 *   k-block, high: the second), byte e of the lane's two quant words is the quant of column
 *   64c + 32h + 8t + e, as kquant_layout.h's mc_kq_elem decodes it (scales 1, mins 0, d 1: the
 *   element is its quant), over random quant bytes and fifth bits;
 * - Q6_K: for every unit, lane t and half, byte i of the quant word is the quant of element
 *   128 hf + 64 h + 16 q + 4t + i (mc_kq_elem with scales 1, d 1, plus the offset 32);
 * - the bf16 pairs: each half is 0x4300 | q, 128 + q exactly, the lower column in the low half;
 * - the Q6_K slots: a bijection of a k-block's 32 columns in which instruction m's 16 slots hold
 *   sub-block m alone, and lane t's slots 2t, 2t + 1, 2t + 8, 2t + 9 hold columns 4t .. 4t + 3 of it
 *   (the decode fragment's columns);
 * - negative controls: the Q5_K fifth bits of the wrong word, the Q6_K top bits of the wrong lane,
 *   and gemv=mma's column sets for Q6_K are caught by the same comparisons. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "kq_mma_bits.h"
#include "kquant_layout.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next32(void) {
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)(z ^ (z >> 31));
}
static uint32_t le32(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* One super-block in the upload layout (data, aux) whose elements are their quants: d 1, dmin 0,
 * every scale 1, every min 0 (Q6_K: the element is q - 32). */
typedef struct kq_block {
    uint8_t data[192], aux[32];
} kq_block;
static void kq_make(kq_block *b, uint32_t type) {
    memset(b, 0, sizeof *b);
    for (size_t i = 0; i < sizeof b->data; i++)
        b->data[i] = (uint8_t)next32();
    if (type == MEMRA_QTYPE_Q6_K) {
        for (int j = 0; j < 16; j++)
            b->aux[j] = 1;       /* int8 scales */
        b->aux[16] = 0x00, b->aux[17] = 0x3C; /* d = 1.0 (f16) */
        return;
    }
    b->aux[0] = 0x00, b->aux[1] = 0x3C; /* d = 1.0, dmin = 0 */
    for (int j = 0; j < 4; j++)
        b->aux[4 + j] = 1;   /* sc of sub-blocks 0 .. 3 = 1, their mins 0, top bits 0 */
    for (int j = 0; j < 4; j++)
        b->aux[12 + j] = 1;  /* sc of sub-blocks 4 .. 7 = 1 (low nibble), mins 0 (high nibble) */
}
static int kq_elem(const kq_block *b, uint32_t type, uint32_t col) {
    return (int)mc_kq_elem(type, b->data, b->aux, 1, col);
}

/* Mismatches of the Q4_K / Q5_K lane words (k_skew: a wrong word of fifth bits, the control). */
static int q45_mismatches(uint32_t type, uint32_t k_skew) {
    int bad = 0;
    for (int rep = 0; rep < 200; rep++) {
        kq_block b;
        kq_make(&b, type);
        for (uint32_t c = 0; c < 4; c++)
            for (uint32_t t = 0; t < 4; t++)
                for (uint32_t h = 0; h < 2; h++) {
                    const uint8_t *w = b.data + 32 * c + 8 * t;
                    const uint32_t W = le32(b.data + 128 + 4 * (2 * c + t / 2)); /* the unit's fifth bits */
                    const uint32_t k0 = 2 * (t & 1) + k_skew;
                    const uint32_t q[2] = {type == MEMRA_QTYPE_Q5_K ? mc_kqm_q5(le32(w), W, k0, h) : mc_kqm_q4(le32(w), h),
                                           type == MEMRA_QTYPE_Q5_K ? mc_kqm_q5(le32(w + 4), W, (k0 + 1) & 3, h)
                                                                    : mc_kqm_q4(le32(w + 4), h)};
                    for (uint32_t e = 0; e < 8; e++) {
                        const int got = (int)(q[e / 4] >> (8 * (e % 4)) & 0xFF);
                        bad += got != kq_elem(&b, type, 64 * c + 32 * h + 8 * t + e);
                    }
                }
    }
    return bad;
}

Test(kq_mma_bits, q4_k_words_hold_the_lanes_columns) { cr_assert_eq(q45_mismatches(MEMRA_QTYPE_Q4_K, 0), 0); }
Test(kq_mma_bits, q5_k_words_hold_the_lanes_columns) { cr_assert_eq(q45_mismatches(MEMRA_QTYPE_Q5_K, 0), 0); }
Test(kq_mma_bits, q5_k_control_wrong_fifth_bits_word_caught) { cr_assert_gt(q45_mismatches(MEMRA_QTYPE_Q5_K, 1), 0); }

static int q6_mismatches(uint32_t t_skew) {
    int bad = 0;
    for (int rep = 0; rep < 200; rep++) {
        kq_block b;
        kq_make(&b, MEMRA_QTYPE_Q6_K);
        for (uint32_t u = 0; u < 8; u++)
            for (uint32_t t = 0; t < 4; t++)
                for (uint32_t h = 0; h < 2; h++) {
                    const uint32_t hf = u / 4, q = u % 4;
                    const uint32_t ql = le32(b.data + 64 * hf + 16 * q + 4 * t);
                    const uint32_t top = le32(b.data + 128 + 8 * u + 4 * h); /* A (h 0) or B (h 1) */
                    const uint32_t w = mc_kqm_q6(ql, top, (t + t_skew) & 3, h);
                    for (uint32_t i = 0; i < 4; i++) {
                        const int got = (int)(w >> (8 * i) & 0xFF) - 32;
                        bad += got != kq_elem(&b, MEMRA_QTYPE_Q6_K, 128 * hf + 64 * h + 16 * q + 4 * t + i);
                    }
                }
    }
    return bad;
}

Test(kq_mma_bits, q6_k_words_hold_the_lanes_columns) { cr_assert_eq(q6_mismatches(0), 0); }
Test(kq_mma_bits, q6_k_control_wrong_lanes_top_bits_caught) { cr_assert_gt(q6_mismatches(1), 0); }

Test(kq_mma_bits, pairs_are_128_plus_q_in_column_order) {
    for (int rep = 0; rep < 1000; rep++) {
        const uint32_t q = next32() & 0x3F3F3F3Fu; /* quants of up to 6 bits */
        for (uint32_t p = 0; p < 2; p++) {
            const uint32_t v = mc_kqm_pair(q, p);
            for (uint32_t half = 0; half < 2; half++) {
                const uint32_t bits = v >> (16 * half) & 0xFFFF, qb = q >> (8 * (2 * p + half)) & 0xFF;
                float f;
                const uint32_t f32 = bits << 16;
                memcpy(&f, &f32, 4);
                cr_assert_eq(f, 128.0f + (float)qb, "pair %u half %u of %08x: %g", p, half, q, (double)f);
            }
        }
    }
}

/* Whether a slot map puts sub-block m alone in instruction m and lane t's slots on columns
 * 4t .. 4t + 3 of it; slot(c) for c in 0 .. 31. */
static int q6_slots_ok(uint32_t (*slot)(uint32_t)) {
    uint32_t seen = 0;
    for (uint32_t c = 0; c < 32; c++) {
        const uint32_t s = slot(c);
        if (s >= 32 || (seen >> s & 1u) || s / 16 != c / 16)
            return 0;
        seen |= 1u << s;
        const uint32_t t = c % 16 / 4, e = c % 4, want[4] = {2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9};
        if (s % 16 != want[e])
            return 0;
    }
    return seen == 0xFFFFFFFFu;
}
static uint32_t q6_slot(uint32_t c) { return mc_kqm_q6_slot(c); }
/* gemv=mma's prep layout (gemv_mma.cu's mc_mma_store8: columns 8q + j to 16 (j / 4) + slot): the
 * control, whose instructions mix the two sub-blocks. */
static uint32_t mma_slot(uint32_t c) {
    const uint32_t q = c / 8, j = c % 8, s4[4] = {2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9};
    return 16 * (j / 4) + s4[j % 4];
}

Test(kq_mma_bits, q6_k_slots_give_each_instruction_its_sub_block) { cr_assert(q6_slots_ok(q6_slot)); }
Test(kq_mma_bits, q6_k_control_gemv_mma_slots_refused) { cr_assert_not(q6_slots_ok(mma_slot)); }
