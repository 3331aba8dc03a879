/* test_kquant_layout.c: the K-quant upload layout of the cuda backend (backends/cuda/kquant_layout.h,
 * the header gemv_kquant.cu includes), checked on the host: no GPU needed, so it runs in CI.
 *
 * - sizes: per row the file's bytes (Q4_K 144, Q5_K 176 per block; Q6_K 210 plus at most 15 of
 *   padding), multiples of 16; columns not a positive multiple of 256 and other types refused;
 * - round trip: random file blocks repacked, every element decoded from the layout by
 *   mc_kq_elem (what the embedding kernel runs) has memra/quant.h's bits;
 * - negative controls: one flipped bit in the layout's fifth bits, top bits, scales or quants, or
 *   the fifth / top bits left out of the repack, is caught by the same comparison. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kquant_layout.h"

static const uint32_t types[3] = {MEMRA_QTYPE_Q4_K, MEMRA_QTYPE_Q5_K, MEMRA_QTYPE_Q6_K};

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next64(void) {
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* nb random file blocks; the f16 scales finite (random exponent) so every product is a number. */
static uint8_t *rand_row(uint32_t type, uint64_t nb) {
    const uint32_t bb = memra_quant_block_bytes(type);
    uint8_t *p = malloc(nb * bb);
    cr_assert_not_null(p);
    for (uint64_t i = 0; i < nb * bb; i++)
        p[i] = (uint8_t)next64();
    for (uint64_t b = 0; b < nb; b++) {
        uint8_t *blk = p + b * bb;
        const uint32_t at = type == MEMRA_QTYPE_Q6_K ? 208 : 0, n = type == MEMRA_QTYPE_Q6_K ? 1 : 2;
        for (uint32_t k = 0; k < n; k++)
            blk[at + 2 * k + 1] &= 0x7b; /* exponent < 31: finite */
    }
    return p;
}

typedef struct lay {
    uint64_t nb, dr, ar;
    uint8_t *data, *aux;
} lay;

static lay repack(uint32_t type, const uint8_t *file, uint64_t cols) {
    lay l = {cols / 256, 0, 0, NULL, NULL};
    cr_assert(mc_kq_layout(type, cols, &l.dr, &l.ar));
    l.data = calloc(1, l.dr);
    l.aux = calloc(1, l.ar);
    cr_assert(l.data && l.aux);
    mc_kq_repack(type, file, cols, l.data, l.aux);
    return l;
}

/* Elements whose decoded bits differ from quant.h's. */
static uint64_t mismatches(uint32_t type, const uint8_t *file, const lay *l) {
    const uint32_t bb = memra_quant_block_bytes(type);
    uint64_t bad = 0;
    float want[256];
    for (uint64_t b = 0; b < l->nb; b++) {
        memra_dequantize_block(type, file + b * bb, want);
        for (uint32_t e = 0; e < 256; e++) {
            const float got = mc_kq_elem(type, l->data, l->aux, l->nb, 256 * b + e);
            bad += memcmp(&got, &want[e], 4) != 0;
        }
    }
    return bad;
}

Test(kquant_layout, sizes_are_the_files_bytes) {
    for (int t = 0; t < 3; t++)
        for (uint64_t nb = 1; nb <= 64; nb++) {
            uint64_t dr, ar;
            cr_assert(mc_kq_layout(types[t], 256 * nb, &dr, &ar));
            const uint64_t file = nb * memra_quant_block_bytes(types[t]);
            cr_assert_eq(dr % 16, 0);
            cr_assert_eq(ar % 16, 0);
            cr_assert(dr + ar >= file && dr + ar <= file + (types[t] == MEMRA_QTYPE_Q6_K ? 15 : 0),
                      "type %u, %lu blocks: %lu bytes for the file's %lu", types[t], (unsigned long)nb,
                      (unsigned long)(dr + ar), (unsigned long)file);
        }
    uint64_t dr = 1, ar = 1;
    cr_assert(!mc_kq_layout(MEMRA_QTYPE_Q4_K, 0, &dr, &ar));
    cr_assert(!mc_kq_layout(MEMRA_QTYPE_Q5_K, 320, &dr, &ar));
    cr_assert(!mc_kq_layout(MEMRA_QTYPE_Q8_0, 256, &dr, &ar));
    cr_assert(!mc_kq_layout(MEMRA_QTYPE_Q4_0, 256, &dr, &ar));
    cr_assert_eq(dr + ar, 0);
}

Test(kquant_layout, round_trip_gives_quant_h_bits) {
    for (int t = 0; t < 3; t++)
        for (int rep = 0; rep < 20; rep++) {
            const uint64_t nb = 1 + next64() % 17;
            uint8_t *file = rand_row(types[t], nb);
            lay l = repack(types[t], file, 256 * nb);
            cr_assert_eq(mismatches(types[t], file, &l), 0, "type %u, %lu blocks", types[t], (unsigned long)nb);
            free(file);
            free(l.data);
            free(l.aux);
        }
}

Test(kquant_layout, a_flipped_bit_is_caught) {
    for (int t = 0; t < 3; t++) {
        const uint64_t nb = 3;
        uint8_t *file = rand_row(types[t], nb);
        lay l = repack(types[t], file, 256 * nb);
        cr_assert_eq(mismatches(types[t], file, &l), 0);
        /* a quant bit; then (Q5_K, Q6_K) a fifth / top bit; then a scale bit */
        const uint64_t at[3] = {128 + 37, 128 * nb + 40 + 5, 0};
        for (int k = 0; k < 3; k++) {
            if (k == 1 && types[t] == MEMRA_QTYPE_Q4_K)
                continue;
            uint8_t *p = k == 2 ? l.aux + 16 + 2 * (types[t] == MEMRA_QTYPE_Q6_K) + 4 : l.data + at[k];
            *p ^= 0x11;
            cr_assert_neq(mismatches(types[t], file, &l), 0, "type %u: flip %d not caught", types[t], k);
            *p ^= 0x11;
        }
        free(file);
        free(l.data);
        free(l.aux);
    }
}

Test(kquant_layout, high_bits_left_out_are_caught) {
    /* a repack that drops Q5_K's fifth bits or Q6_K's top two bits (zeroed words) */
    const uint32_t two[2] = {MEMRA_QTYPE_Q5_K, MEMRA_QTYPE_Q6_K};
    for (int t = 0; t < 2; t++) {
        const uint64_t nb = 2;
        uint8_t *file = rand_row(two[t], nb);
        lay l = repack(two[t], file, 256 * nb);
        memset(l.data + 128 * nb, 0, l.dr - 128 * nb);
        cr_assert_gt(mismatches(two[t], file, &l), 100, "type %u", two[t]);
        free(file);
        free(l.data);
        free(l.aux);
    }
}
