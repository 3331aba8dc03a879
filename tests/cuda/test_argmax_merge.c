/* test_argmax_merge.c: the merge rule of the cuda device sampler's argmax
 * (backends/cuda/argmax_merge.h, the header sample_argmax includes), checked on the host: no GPU
 * needed, so it runs in CI.
 *
 * The single-launch argmax lets whichever block finishes last merge the per-block parts, so its
 * bits are only fixed if the merge gives one answer in every order and tree. Checked on small
 * sets with ties (-0 and +0 among them): every permutation merged in sequence and random merge
 * trees give the winner by definition (the largest value, of equal values the lowest index), to
 * the bit. The negative control: the same check catches a rule that lets a later equal value
 * win. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "argmax_merge.h"

typedef void (*merge_fn)(float *best, uint32_t *besti, float ov, uint32_t oi);

static void merge_kernel(float *best, uint32_t *besti, float ov, uint32_t oi) { mc_best_merge(best, besti, ov, oi); }

/* Order-dependent on ties: a later equal value replaces the earlier one. */
static void merge_later_wins(float *best, uint32_t *besti, float ov, uint32_t oi) {
    if (oi != MC_AM_NONE && (*besti == MC_AM_NONE || ov >= *best)) {
        *best = ov;
        *besti = oi;
    }
}

#define MAXN 6

typedef struct cand {
    float v;
    uint32_t i;
} cand;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* The winner by definition. */
static cand reference(const cand *c, int n) {
    cand w = c[0];
    for (int k = 1; k < n; k++)
        if (c[k].v > w.v || (c[k].v == w.v && c[k].i < w.i))
            w = c[k];
    return w;
}

static int same(cand a, cand b) { return a.i == b.i && memcmp(&a.v, &b.v, sizeof a.v) == 0; }

/* A random merge tree over c[0, n): each half merged from "none", then the two results. */
static cand tree(merge_fn f, const cand *c, int n) {
    if (n == 1) {
        cand r = {0.0f, MC_AM_NONE};
        f(&r.v, &r.i, c[0].v, c[0].i);
        return r;
    }
    const int cut = 1 + (int)(next_u32() % (uint32_t)(n - 1));
    cand a = tree(f, c, cut), b = tree(f, c + cut, n - cut);
    if (next_u32() & 1) {
        cand t = a;
        a = b;
        b = t;
    }
    f(&a.v, &a.i, b.v, b.i);
    return a;
}

/* Orders (every permutation in sequence, and random trees) whose result differs from the
 * definition, over `sets` random sets. */
static long disagreements(merge_fn f, int sets) {
    static const float pool[] = {-2.0f, -1.0f, -0.0f, 0.0f, 1.0f, 3.5f};
    long bad = 0;
    for (int s = 0; s < sets; s++) {
        const int n = 1 + (int)(next_u32() % MAXN);
        cand c[MAXN];
        for (int k = 0; k < n; k++) {
            c[k].v = pool[next_u32() % 6];
            for (;;) { /* distinct indices */
                c[k].i = next_u32() % 100;
                int dup = 0;
                for (int j = 0; j < k; j++)
                    dup |= c[j].i == c[k].i;
                if (!dup)
                    break;
            }
        }
        const cand want = reference(c, n);
        int perm[MAXN];
        for (int k = 0; k < n; k++)
            perm[k] = k;
        for (;;) { /* every permutation, in lexicographic order */
            cand r = {0.0f, MC_AM_NONE};
            for (int k = 0; k < n; k++)
                f(&r.v, &r.i, c[perm[k]].v, c[perm[k]].i);
            bad += !same(r, want);
            int a = n - 2;
            while (a >= 0 && perm[a] > perm[a + 1])
                a--;
            if (a < 0)
                break;
            int b = n - 1;
            while (perm[b] < perm[a])
                b--;
            int t = perm[a];
            perm[a] = perm[b];
            perm[b] = t;
            for (int l = a + 1, r = n - 1; l < r; l++, r--) {
                t = perm[l];
                perm[l] = perm[r];
                perm[r] = t;
            }
        }
        for (int t = 0; t < 16; t++)
            bad += !same(tree(f, c, n), want);
    }
    return bad;
}

Test(argmax_merge, every_order_and_tree_gives_the_defined_winner) {
    const long bad = disagreements(merge_kernel, 4000);
    cr_assert_eq(bad, 0, "%ld merge orders disagree with the definition", bad);
}

Test(argmax_merge, signed_zeros_tie_by_index) {
    cand r = {0.0f, MC_AM_NONE};
    mc_best_merge(&r.v, &r.i, -0.0f, 3);
    mc_best_merge(&r.v, &r.i, 0.0f, 1);
    cand s = {0.0f, MC_AM_NONE};
    mc_best_merge(&s.v, &s.i, 0.0f, 1);
    mc_best_merge(&s.v, &s.i, -0.0f, 3);
    const cand want = {0.0f, 1};
    cr_assert(same(r, want) && same(s, want), "the +0 at index 1 must win in both orders");
}

Test(argmax_merge, the_check_catches_an_order_dependent_rule) {
    /* the negative control: ties resolved by arrival order show up as disagreements */
    cr_assert_gt(disagreements(merge_later_wins, 4000), 0);
}
