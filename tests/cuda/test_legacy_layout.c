/* test_legacy_layout.c: the cuda backend's upload layout of Q4_0, Q4_1, Q5_0 and Q5_1
 * (backends/cuda/legacy_layout.h, the code mc_qlayout_legacy / mc_qrepack_legacy and the kernels'
 * decoding run), checked on the host: no GPU needed, so it runs in CI.
 *
 * - the layout's sizes: 16 bytes of nibbles a block, the aux plane the file's other bytes, each
 *   plane padded to 16 bytes and no more; other types and partial blocks refused;
 * - the round trip: random blocks repacked and decoded element by element (mc_ll_elem, the
 *   decoding the embedding kernel runs) give memra/quant.h's floats bit for bit;
 * - the negative control: flipping any one bit of the used bytes of a repacked row (data or aux)
 *   changes some decoded element, so the round trip would catch a misplaced byte;
 * - mc_ll_words, the chunk kernel's int8 operands, and its integer identity (chunk_words). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "legacy_layout.h"
#include "memra/quant.h"

static const uint32_t types[] = {MEMRA_QTYPE_Q4_0, MEMRA_QTYPE_Q4_1, MEMRA_QTYPE_Q5_0, MEMRA_QTYPE_Q5_1};

static uint64_t next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 16;
}

/* A random finite f16 of modest magnitude (exponent 13..17 of 0..30: the minimum m is never lost in d q + m), random sign. */
static uint16_t f16_random(uint64_t *s) {
    const uint16_t e = (uint16_t)(13 + next(s) % 5), m = (uint16_t)(next(s) & 0x3ff), sg = (uint16_t)(next(s) & 1);
    return (uint16_t)(sg << 15 | e << 10 | m);
}

static void row_random(uint32_t t, uint8_t *dst, uint32_t nb, uint64_t *s) {
    const uint32_t bb = memra_quant_block_bytes(t);
    for (uint32_t b = 0; b < nb; b++) {
        uint8_t *blk = dst + b * bb;
        for (uint32_t i = 0; i < bb; i++)
            blk[i] = (uint8_t)next(s);
        const uint16_t d = f16_random(s), m = f16_random(s);
        memcpy(blk, &d, 2);
        if (t == MEMRA_QTYPE_Q4_1 || t == MEMRA_QTYPE_Q5_1)
            memcpy(blk + 2, &m, 2);
    }
}

/* Elements of the repacked row that differ in bits from quant.h's decoding of src. */
static int row_mismatches(uint32_t t, const uint8_t *src, uint64_t cols, const uint8_t *data, const uint8_t *aux) {
    int bad = 0;
    for (uint64_t b = 0; b < cols / 32; b++) {
        float want[MEMRA_QK_K]; /* room for any type's block: the call is typed at run time */
        cr_assert(memra_dequantize_block(t, src + b * memra_quant_block_bytes(t), want));
        for (uint32_t e = 0; e < 32; e++) {
            const float got = mc_ll_elem(t, data, aux, cols, 32 * b + e);
            bad += memcmp(&got, &want[e], 4) != 0;
        }
    }
    return bad;
}

Test(legacy_layout, sizes) {
    static const uint64_t cols[] = {32, 96, 288, 4096, 14336};
    for (size_t ti = 0; ti < 4; ti++) {
        const uint32_t t = types[ti], bb = memra_quant_block_bytes(t);
        for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++) {
            uint64_t dr = 0, ar = 0;
            cr_assert(mc_ll_layout(t, cols[ci], &dr, &ar));
            const uint64_t nb = cols[ci] / 32, aux_used = nb * (bb - 16);
            cr_assert_eq(dr, nb * 16, "type %u cols %llu", t, (unsigned long long)cols[ci]);
            cr_assert_eq(dr % 16, 0);
            cr_assert_eq(ar % 16, 0);
            cr_assert(ar >= aux_used && ar - aux_used < 16, "type %u cols %llu: aux %llu for %llu bytes", t,
                      (unsigned long long)cols[ci], (unsigned long long)ar, (unsigned long long)aux_used);
        }
        uint64_t dr, ar;
        cr_assert_not(mc_ll_layout(t, 0, &dr, &ar));
        cr_assert_not(mc_ll_layout(t, 48, &dr, &ar));
    }
    uint64_t dr, ar;
    cr_assert_not(mc_ll_layout(MEMRA_QTYPE_Q8_0, 32, &dr, &ar));
    cr_assert_not(mc_ll_layout(MEMRA_QTYPE_Q4_K, 256, &dr, &ar));
}

Test(legacy_layout, round_trip_bit_exact) {
    uint64_t s = 12345;
    const uint64_t cols = 320;
    for (size_t ti = 0; ti < 4; ti++) {
        const uint32_t t = types[ti];
        uint64_t dr, ar;
        cr_assert(mc_ll_layout(t, cols, &dr, &ar));
        uint8_t src[10 * 24];
        for (int rep = 0; rep < 200; rep++) {
            uint8_t data[160], aux[96];
            memset(data, 0, sizeof data);
            memset(aux, 0, sizeof aux);
            row_random(t, src, (uint32_t)(cols / 32), &s);
            mc_ll_repack(t, src, cols, data, aux);
            cr_assert_eq(row_mismatches(t, src, cols, data, aux), 0, "type %u, row %d", t, rep);
            for (uint64_t i = (cols / 32) * (memra_quant_block_bytes(t) - 16); i < ar; i++)
                cr_assert_eq(aux[i], 0, "type %u: padding byte %llu written", t, (unsigned long long)i);
        }
    }
}

Test(legacy_layout, every_used_bit_matters) {
    uint64_t s = 99;
    const uint64_t cols = 96;
    for (size_t ti = 0; ti < 4; ti++) {
        const uint32_t t = types[ti];
        uint8_t src[3 * 24], data[48], aux[32];
        memset(data, 0, sizeof data);
        memset(aux, 0, sizeof aux);
        row_random(t, src, 3, &s);
        mc_ll_repack(t, src, cols, data, aux);
        cr_assert_eq(row_mismatches(t, src, cols, data, aux), 0);
        const uint64_t aux_used = 3 * (memra_quant_block_bytes(t) - 16);
        int missed = 0;
        for (uint64_t i = 0; i < sizeof data + aux_used; i++)
            for (int bit = 0; bit < 8; bit++) {
                uint8_t *p = i < sizeof data ? data + i : aux + (i - sizeof data);
                *p ^= (uint8_t)(1u << bit);
                missed += row_mismatches(t, src, cols, data, aux) == 0;
                *p ^= (uint8_t)(1u << bit);
            }
        cr_assert_eq(missed, 0, "type %u: %d flipped bits of the layout went unseen", t, missed);
    }
}

/* mc_ll_words (the int8 operands of the chunk's MMAs, backends/cuda/chunk_legacy_mma.cu) on random
 * repacked blocks with d = 1 and m = 0: byte e of the words less the zero point o (8 Q4_0, 16
 * Q5_0, 0 the _1 types) is element e as mc_ll_elem decodes it (so quant.h's q - o), every byte
 * 0..31; and the kernel's integer identity: the MMA accumulator started at 0x4B400000 less o times
 * the x plane's sum, plus the plain dot of the bytes with the plane, read as a float less 1.5 *
 * 2^23, is the exact dot of (q - o) with the plane. Negative control: the same check with the fifth
 * bits left out (the Q4 reading of a Q5 block) must fail. */
static int words_mismatches(uint32_t t, uint32_t as_t, uint64_t *s) {
    const uint64_t cols = 64;
    uint8_t src[2 * 24], data[32], aux[32];
    memset(data, 0, sizeof data);
    memset(aux, 0, sizeof aux);
    row_random(t, src, 2, s);
    const uint32_t bb = memra_quant_block_bytes(t);
    for (uint32_t b = 0; b < 2; b++) {
        const uint16_t one = 0x3c00, zero = 0;
        memcpy(src + b * bb, &one, 2);
        if (mc_ll_has_m(t))
            memcpy(src + b * bb + 2, &zero, 2);
    }
    mc_ll_repack(t, src, cols, data, aux);
    const int o = mc_ll_has_m(t) ? 0 : mc_ll_has_h(t) ? 16 : 8;
    int bad = 0;
    for (uint32_t b = 0; b < 2; b++) {
        uint32_t qs[4], qh = 0, q[8];
        memcpy(qs, data + 16 * b, 16);
        if (mc_ll_has_h(t))
            memcpy(&qh, aux + 4 * b, 4);
        mc_ll_words(as_t, qs, qh, q);
        int32_t dot = 0, sum = 0, exact = 0;
        for (uint32_t e = 0; e < 32; e++) {
            const int qe = (int)(q[e / 4] >> (8 * (e % 4)) & 0xFFu), x = (int)(next(s) % 256) - 128;
            bad += qe > 31 || (float)(qe - o) != mc_ll_elem(t, data, aux, cols, 32 * b + e);
            dot += qe * x, sum += x, exact += (qe - o) * x;
        }
        const int32_t acc = 0x4B400000 - o * sum + dot;
        float f;
        memcpy(&f, &acc, 4);
        bad += f - 12582912.0f != (float)exact;
    }
    return bad;
}

Test(legacy_layout, chunk_words) {
    uint64_t s = 4242;
    for (size_t ti = 0; ti < 4; ti++)
        for (int rep = 0; rep < 500; rep++)
            cr_assert_eq(words_mismatches(types[ti], types[ti], &s), 0, "type %u, rep %d", types[ti], rep);
    int caught = 0;
    for (int rep = 0; rep < 20; rep++)
        caught += words_mismatches(MEMRA_QTYPE_Q5_0, MEMRA_QTYPE_Q4_0, &s) != 0;
    cr_assert_eq(caught, 20, "the Q4 reading of Q5 blocks went unseen %d times of 20", 20 - caught);
}
