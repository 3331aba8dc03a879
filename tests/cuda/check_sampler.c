/* check_sampler.c: the device sampler against the cpu sampler, token for token, on logits built
 * to be hard: exact ties (also between -0 and +0), near-ties one ulp apart, flat logits, a
 * llama-sized vocabulary, and every branch of the algorithm (greedy, index order, top-k, top-p,
 * both, top_p 0, top_k V-1). A non-finite logit must be reported, with its index.
 *
 * Built twice: as a plain program (main below) for the device machine, where Criterion is not
 * installed, and into tests/cuda's Criterion test with MEMRA_CHECK_NO_MAIN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_checks.h"
#include "cuda_kernels.h"
#include "memra/numeric.h"
#include "memra/sampling.h"

/* Whether the host's ring entry got is the device's result dev, tagged with the position the step
 * was sampled at (the tag wait=ring waits for, written last). */
static int check_entry(const mc_sample_result *got, const mc_sample_result *dev, uint32_t pos) {
    return got->token == dev->token && got->bad_index == dev->bad_index && got->bad_bits == dev->bad_bits &&
           got->seq == (int32_t)pos;
}

/* Deterministic pseudo-random normal-ish values (sum of uniforms). */
static float check_noise(uint64_t *state) {
    float s = 0.0f;
    for (int i = 0; i < 4; i++) {
        *state = memra_mix64(*state + 0x9e3779b97f4a7c15ull);
        s += (float)(*state >> 40) * (1.0f / 16777216.0f);
    }
    return (s - 2.0f) * 1.7f;
}

/* Fills z for case `kind`; returns its name. */
static const char *check_fill(int kind, float *z, uint32_t n, uint64_t seed) {
    uint64_t st = seed * 7919 + (uint64_t)kind;
    switch (kind) {
    case 0:
        for (uint32_t i = 0; i < n; i++)
            z[i] = check_noise(&st) * 3.0f;
        return "random";
    case 1: /* few distinct values: ties everywhere, the maximum many times */
        for (uint32_t i = 0; i < n; i++)
            z[i] = roundf(check_noise(&st) * 2.0f) * 0.5f;
        return "coarse ties";
    case 2:
        for (uint32_t i = 0; i < n; i++)
            z[i] = 1.25f;
        return "all equal";
    case 3: /* near-ties: values one ulp apart around a few centres */
        for (uint32_t i = 0; i < n; i++) {
            float c = (float)(int)(check_noise(&st) * 1.5f);
            int k = (int)((memra_mix64(st + i) >> 60) & 7) - 3;
            float v = c;
            for (; k > 0; k--)
                v = nextafterf(v, INFINITY);
            for (; k < 0; k++)
                v = nextafterf(v, -INFINITY);
            z[i] = v;
        }
        return "near ties (ulps)";
    case 4: /* signed zeros at the top, equal as floats */
        for (uint32_t i = 0; i < n; i++)
            z[i] = -fabsf(check_noise(&st)) - 0.5f;
        for (uint32_t i = 3; i < n; i += n / 7 + 1)
            z[i] = (i / 3) % 2 ? -0.0f : 0.0f;
        return "signed zeros";
    default: /* sharp: one dominant logit, the rest far below (weights underflow) */
        for (uint32_t i = 0; i < n; i++)
            z[i] = check_noise(&st) - 120.0f;
        z[n / 3] = 5.0f;
        return "sharp";
    }
}

#define CHECK_CASES 6

/* Negative control: the checker must see a difference between the cpu sampler and a sampler that
 * breaks greedy ties by the highest index, on the tie cases: proof that the cases hold ties. */
static int check_ties_are_exercised(void) {
    const uint32_t V = 4099;
    float *z = (float *)malloc((size_t)V * 4);
    int differ = 0;
    if (!z)
        return 0;
    for (int kind = 1; kind <= 2; kind++) {
        check_fill(kind, z, V, V);
        uint32_t lowest = 0, highest = 0;
        for (uint32_t i = 1; i < V; i++) {
            if (z[i] > z[lowest])
                lowest = i;
            if (z[i] >= z[highest])
                highest = i;
        }
        differ += lowest != highest;
    }
    free(z);
    return differ == 2;
}

/* Runs every case and configuration; returns the number of disagreements (and of errors), and
 * writes a table line per configuration into `out` when it is non-NULL. */
int memra_cuda_check_sampler(FILE *out, int *n_checked) {
    static const uint32_t vocabs[] = {1000, 4099, 128256};
    const memra_sample_cfg cfgs[] = {
        {0.0f, 0, 1.0f, 1},  {1.0f, 0, 1.0f, 7},  {0.7f, 40, 1.0f, 11}, {1.0f, 0, 0.9f, 13}, {0.8f, 50, 0.95f, 17},
        {1.5f, 1, 1.0f, 19}, {1.0f, 0, 0.0f, 23}, {1.0f, 0, 1.0f, 29},  {2.0f, 0, 0.5f, 31}, {1.0f, 999, 1.0f, 37},
    };
    const uint32_t n_cfgs = sizeof cfgs / sizeof cfgs[0];
    int bad = 0, checked = 0;
    for (uint32_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++) {
        const uint32_t V = vocabs[vi];
        float *z = (float *)malloc((size_t)V * 4);
        void *scratch = malloc(memra_sample_scratch_bytes(V));
        if (!z || !scratch) {
            free(z);
            free(scratch);
            return -1;
        }
        for (int kind = 0; kind < CHECK_CASES; kind++) {
            const char *name = check_fill(kind, z, V, V);
            for (uint32_t ci = 0; ci < n_cfgs; ci++) {
                memra_sample_cfg cfg = cfgs[ci];
                if (cfg.top_k == 999)
                    cfg.top_k = V - 1;
                int disagree = 0;
                for (uint32_t pos = 1; pos <= 12; pos++) {
                    uint32_t want = 0;
                    mc_sample_result got, dev;
                    memra_error err;
                    if (memra_sample(z, V, pos, &cfg, scratch, &want, &err) != MEMRA_OK) {
                        if (out)
                            fprintf(out, "cpu sampler failed: %s\n", err.msg);
                        bad++;
                        continue;
                    }
                    /* odd positions commit in the sampler (commit=sampler): the word must end at pos;
                     * positions 2, 3, 6, 7, 10, 11 hand the entry over as wait=word does */
                    const bool commit = pos % 2 == 1, word = pos % 4 >= 2;
                    /* positions 3, 6, 9, 12 fold the next input's embedding (commit=handoff) */
                    const uint32_t ecols = pos % 3 == 0 ? 100 : 0;
                    int32_t after = -1;
                    int embed_ok = 1;
                    cudaError_t e = mc_sample_host(z, V, pos, &cfg, commit, word, ecols, &got, &dev, &after, &embed_ok);
                    if (e != cudaSuccess) {
                        if (out)
                            fprintf(out, "device sampler failed: %s\n", cudaGetErrorString(e));
                        bad++;
                        continue;
                    }
                    checked++;
                    if (after != (int32_t)pos) {
                        disagree++;
                        if (out)
                            fprintf(out, "MISMATCH V=%u %s pos=%u: position word %d after the step (commit %d)\n", V,
                                    name, pos, after, (int)commit);
                    } else if (!check_entry(&got, &dev, pos)) { /* the host's ring entry is the device's result */
                        disagree++;
                        if (out)
                            fprintf(out,
                                    "MISMATCH V=%u %s pos=%u: ring entry (%d, %d, tag %d) against the device's (%d, "
                                    "%d; word %d)\n",
                                    V, name, pos, got.token, got.bad_index, got.seq, dev.token, dev.bad_index,
                                    (int)word);
                    } else if (!embed_ok) {
                        disagree++;
                        if (out)
                            fprintf(out, "MISMATCH V=%u %s pos=%u: the folded embedding is not row %d doubled\n", V,
                                    name, pos, got.token);
                    } else if (got.bad_index >= 0 || got.token != (int32_t)want) {
                        disagree++;
                        if (out && disagree == 1)
                            fprintf(out, "MISMATCH V=%u %s T=%g k=%u p=%g pos=%u: cpu %u, device %d\n", V, name,
                                    cfg.temperature, cfg.top_k, cfg.top_p, pos, want, got.token);
                    }
                }
                bad += disagree;
            }
        }
        /* A NaN and an infinity must be reported, the lowest index first. */
        check_fill(0, z, V, 5);
        z[V / 2] = INFINITY;
        z[V / 3] = NAN;
        /* greedy and sampled, each way of handing the entry over */
        uint32_t nan_bits;
        memcpy(&nan_bits, &z[V / 3], 4);
        for (int k = 0; k < 4; k++) {
            memra_sample_cfg g = {k & 2 ? 1.0f : 0.0f, 0, 1.0f, 0};
            mc_sample_result got, dev;
            int32_t after = -1;
            int embed_ok = 0; /* bad logits: the fold leaves x as it was */
            cudaError_t e = mc_sample_host(z, V, 1, &g, true, k & 1, 64, &got, &dev, &after, &embed_ok);
            checked++;
            if (e != cudaSuccess || got.bad_index != (int32_t)(V / 3) || got.token != -1 || got.bad_bits != nan_bits ||
                !check_entry(&got, &dev, 1) || after != 1 || !embed_ok) {
                if (out)
                    fprintf(out,
                            "MISMATCH V=%u (T %g, word %d): NaN at %u reported as %d, bits 0x%08x (token %d; position "
                            "word %d, want 1; x %s)\n",
                            V, g.temperature, k & 1, V / 3, got.bad_index, got.bad_bits, got.token, after,
                            embed_ok ? "untouched" : "written");
                bad++;
            }
        }
        free(z);
        free(scratch);
    }
    if (!check_ties_are_exercised()) {
        if (out)
            fprintf(out, "negative control failed: the tie cases hold no ties\n");
        bad++;
    }
    if (n_checked)
        *n_checked = checked;
    return bad;
}

#ifndef MEMRA_CHECK_NO_MAIN
MEMRA_CHECK_MAIN("check_sampler", memra_cuda_check_sampler, "draws compared", "disagreements")
#endif
