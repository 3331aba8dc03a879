/* test_cpu_sampler.c: the `cpu` sampler plugin, loaded through the registry: greedy ties,
 * refusal of non-finite logits, determinism in (seed, position), agreement with a second,
 * plain transcription of the algorithm in memra/sampling.h, and a chi-squared check of sampled
 * frequencies against the distribution the algorithm defines. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"
#include "memra/numeric.h"

static const memra_sampler_vtable *sampler(void) {
    memra_error err = {0};
    const memra_plugin *p = NULL;
    cr_assert_eq(memra_registry_load(ct_registry(), "cpu", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK, "%s", err.msg);
    return p->sampler;
}

static uint32_t draw(const float *z, uint32_t n, uint64_t pos, memra_sample_cfg cfg) {
    const memra_sampler_vtable *smp = sampler();
    void *scratch = malloc(smp->scratch_bytes(n));
    uint32_t token = UINT32_MAX;
    memra_error err = {0};
    cr_assert_eq(smp->sample(z, n, pos, &cfg, scratch, &token, &err), MEMRA_OK, "%s", err.msg);
    free(scratch);
    cr_assert_lt(token, n);
    return token;
}

/* A second transcription of the header's steps: selection sort, separate weight and
 * cumulative arrays, linear scans. Slow and plain on purpose. */
static uint32_t spec_sample(const float *z, uint32_t V, uint64_t p, memra_sample_cfg c) {
    if (c.temperature <= 0) {
        uint32_t best = 0;
        for (uint32_t i = 0; i < V; i++)
            if (z[i] > z[best])
                best = i;
        return best;
    }
    uint32_t *seq = malloc(V * sizeof *seq);
    float *w = malloc(V * sizeof *w), *C = malloc(V * sizeof *C);
    uint32_t n = V;
    for (uint32_t i = 0; i < V; i++)
        seq[i] = i;
    if (!((c.top_k == 0 || c.top_k >= V) && c.top_p >= 1)) {
        for (uint32_t i = 0; i < V; i++) { /* selection sort: z descending, index ascending */
            uint32_t best = i;
            for (uint32_t j = i + 1; j < V; j++)
                if (z[seq[j]] > z[seq[best]] || (z[seq[j]] == z[seq[best]] && seq[j] < seq[best]))
                    best = j;
            uint32_t t = seq[i];
            seq[i] = seq[best];
            seq[best] = t;
        }
        if (c.top_k > 0 && c.top_k < V)
            n = c.top_k;
    }
    float m = z[seq[0]];
    for (uint32_t j = 0; j < n; j++)
        m = fmaxf(m, z[seq[j]]);
    for (uint32_t j = 0; j < n; j++)
        w[j] = memra_expf(MEMRA_FDIV(MEMRA_FSUB(z[seq[j]], m), c.temperature));
    float P = 0;
    for (uint32_t k = 0; k * 256 < n; k++) {
        float partial = 0;
        for (uint32_t j = k * 256; j < n && j < k * 256 + 256; j++) {
            partial = MEMRA_FADD(partial, w[j]);
            C[j] = MEMRA_FADD(P, partial);
        }
        P = MEMRA_FADD(P, partial);
    }
    uint32_t keep = n;
    float S = P;
    if (c.top_p < 1) {
        uint32_t j = 0;
        while (j < n && !(C[j] >= MEMRA_FMUL(c.top_p, P)))
            j++;
        keep = j < n ? j + 1 : n;
        S = C[keep - 1];
    }
    float r = MEMRA_FMUL(memra_uniform(c.seed, p), S);
    uint32_t j = 0;
    while (j < keep && !(C[j] > r))
        j++;
    uint32_t token = seq[j < keep ? j : keep - 1];
    free(seq), free(w), free(C);
    return token;
}

Test(cpu_sampler, greedy_takes_the_lowest_index_among_maxima) {
    float z[6] = {1, 3, -2, 3, 0, 3};
    cr_assert_eq(draw(z, 6, 0, (memra_sample_cfg){.temperature = 0}), 1);
    cr_assert_eq(draw(z, 6, 9, (memra_sample_cfg){.temperature = -1, .seed = 5}), 1);
    z[0] = 3.5f;
    cr_assert_eq(draw(z, 6, 0, (memra_sample_cfg){.temperature = 0}), 0);
}

Test(cpu_sampler, non_finite_logits_are_refused) {
    const memra_sampler_vtable *smp = sampler();
    float z[4] = {0, 1, NAN, 2};
    uint32_t token;
    memra_error err = {0};
    char scratch[64];
    memra_sample_cfg cfg = {.temperature = 1};
    cr_assert_eq(smp->sample(z, 4, 0, &cfg, scratch, &token, &err), MEMRA_E_RANGE);
    cr_assert(strstr(err.msg, "logit 2 is nan"), "%s", err.msg);
    z[2] = -INFINITY;
    cfg.temperature = 0; /* greedy checks too */
    cr_assert_eq(smp->sample(z, 4, 0, &cfg, scratch, &token, &err), MEMRA_E_RANGE);
    cr_assert(strstr(err.msg, "logit 2 is -inf"), "%s", err.msg);
}

static void random_logits(float *z, uint32_t n, uint64_t seed, float spread, int ties) {
    for (uint32_t i = 0; i < n; i++) {
        z[i] = (memra_uniform(seed, i) - 0.5f) * spread;
        if (ties)
            z[i] = roundf(z[i]); /* many exact ties: the order's tie rule matters */
    }
}

Test(cpu_sampler, matches_the_written_algorithm_and_is_deterministic) {
    static const memra_sample_cfg cfgs[] = {
        {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 1},
        {.temperature = 0.7f, .top_k = 40, .top_p = 1.0f, .seed = 2},
        {.temperature = 1.3f, .top_k = 0, .top_p = 0.9f, .seed = 3},
        {.temperature = 0.5f, .top_k = 300, .top_p = 0.5f, .seed = 4},
        {.temperature = 2.0f, .top_k = 1, .top_p = 1.0f, .seed = 5},
        {.temperature = 1.0f, .top_k = 0, .top_p = 0.0f, .seed = 6},
        {.temperature = 0.9f, .top_k = 5000, .top_p = 0.99f, .seed = 7},
    };
    uint32_t sizes[] = {1, 7, 256, 257, 1000};
    float *z = malloc(1000 * sizeof(float));
    for (unsigned c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++)
        for (unsigned s = 0; s < 5; s++)
            for (int ties = 0; ties < 2; ties++) {
                random_logits(z, sizes[s], 100 + c * 10 + s, ties ? 6.0f : 20.0f, ties);
                for (uint64_t pos = 0; pos < 20; pos++) {
                    uint32_t got = draw(z, sizes[s], pos, cfgs[c]);
                    uint32_t want = spec_sample(z, sizes[s], pos, cfgs[c]);
                    cr_assert_eq(got, want, "cfg %u, V %u, ties %d, pos %llu: token %u, the algorithm says %u", c,
                                 sizes[s], ties, (unsigned long long)pos, got, want);
                    cr_assert_eq(draw(z, sizes[s], pos, cfgs[c]), got, "not deterministic");
                }
            }
    free(z);
}

Test(cpu_sampler, top_k_and_top_p_cut_the_right_tokens) {
    float z[8] = {0.0f, 3.0f, 1.0f, 2.9f, -1.0f, 2.0f, 0.5f, 2.95f};
    memra_sample_cfg k2 = {.temperature = 1, .top_k = 2, .top_p = 1, .seed = 9};
    for (uint64_t p = 0; p < 500; p++) {
        uint32_t t = draw(z, 8, p, k2);
        cr_assert(t == 1 || t == 7, "top_k=2 drew %u", t);
    }
    memra_sample_cfg p_small = {.temperature = 1, .top_k = 0, .top_p = 0.01f, .seed = 9};
    for (uint64_t p = 0; p < 100; p++)
        cr_assert_eq(draw(z, 8, p, p_small), 1, "top_p=0.01 keeps only the maximum");
}

/* Chi-squared: 8 tokens with probabilities softmax(z / T); 40000 draws at positions 0..39999.
 * The critical value of chi-squared with 7 degrees of freedom at p = 0.001 is 24.32: a correct
 * sampler fails this with probability 0.1% (and deterministically: the draws are fixed). */
static void chi_squared_case(memra_sample_cfg cfg, const float *z, uint32_t n, const double *want_p) {
    enum { DRAWS = 40000 };
    const memra_sampler_vtable *smp = sampler();
    void *scratch = malloc(smp->scratch_bytes(n));
    uint32_t counts[16] = {0};
    memra_error err = {0};
    for (uint64_t p = 0; p < DRAWS; p++) {
        uint32_t t;
        cr_assert_eq(smp->sample(z, n, p, &cfg, scratch, &t, &err), MEMRA_OK);
        counts[t]++;
    }
    double chi2 = 0;
    int dof = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (want_p[i] == 0) {
            cr_assert_eq(counts[i], 0, "token %u has probability 0 but was drawn %u times", i, counts[i]);
            continue;
        }
        double e = DRAWS * want_p[i];
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
        dof++;
    }
    static const double crit[] = {10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32}; /* p = 0.001, dof 1..7 */
    cr_assert(dof >= 1 && dof <= 7);
    fprintf(stderr, "chi-squared %.2f with %d degrees of freedom (critical %.2f)\n", chi2, dof, crit[dof - 1]);
    cr_assert(chi2 < crit[dof - 1], "chi-squared %.2f >= %.2f (dof %d)", chi2, crit[dof - 1], dof);
    free(scratch);
}

Test(cpu_sampler, chi_squared_frequencies) {
    const float z[8] = {1.0f, 0.0f, 2.0f, -0.5f, 1.5f, 0.3f, -1.0f, 0.8f};
    const float T = 0.8f;
    double p[8], sum = 0;
    for (int i = 0; i < 8; i++)
        sum += (p[i] = exp(z[i] / T));
    for (int i = 0; i < 8; i++)
        p[i] /= sum;
    chi_squared_case((memra_sample_cfg){.temperature = T, .top_k = 0, .top_p = 1, .seed = 1234}, z, 8, p);

    /* top_k = 4: the four largest (indices 2, 4, 0, 7), renormalised. */
    double pk[8] = {0}, sk = 0;
    int top4[4] = {2, 4, 0, 7};
    for (int i = 0; i < 4; i++)
        sk += (pk[top4[i]] = exp(z[top4[i]] / T));
    for (int i = 0; i < 4; i++)
        pk[top4[i]] /= sk;
    chi_squared_case((memra_sample_cfg){.temperature = T, .top_k = 4, .top_p = 1, .seed = 99}, z, 8, pk);
}
