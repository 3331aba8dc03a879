/* sampling.c: the sampling algorithm of memra/sampling.h on the host, step by step (the step
 * numbers in the comments are the header's). The `cpu` sampler plugin and the cpu backend call
 * it; the device samplers are checked against it. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "memra/numeric.h"
#include "memra/sampling.h"

size_t memra_sample_scratch_bytes(uint32_t n_vocab) {
    /* seq (uint32) and the cumulative sums C (float), n_vocab each. */
    return (size_t)n_vocab * (sizeof(uint32_t) + sizeof(float));
}

/* Step 2's total order: z descending, then index ascending. qsort has no context argument, so
 * the logits travel through a thread-local pointer. */
static _Thread_local const float *sort_logits;

static int compare_desc(const void *pa, const void *pb) {
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    float za = sort_logits[a], zb = sort_logits[b];
    if (za > zb)
        return -1;
    if (za < zb)
        return 1;
    return a < b ? -1 : (a > b);
}

static uint32_t greedy(const float *z, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (z[i] > z[best]) /* strictly greater: the lowest index wins ties */
            best = i;
    return best;
}

memra_status memra_sample(const float *z, uint32_t n_vocab, uint64_t position, const memra_sample_cfg *cfg,
                          void *scratch, uint32_t *token, memra_error *err) {
    return memra_sample_sorted_by(z, n_vocab, position, cfg, scratch, NULL, NULL, token, err);
}

memra_status memra_sample_sorted_by(const float *z, uint32_t n_vocab, uint64_t position, const memra_sample_cfg *cfg,
                                    void *scratch, memra_sample_sort_fn sort, void *user, uint32_t *token,
                                    memra_error *err) {
    if (!z || !cfg || !token)
        return memra_fail(err, MEMRA_E_INVALID, "sampling: %s is NULL", !z ? "logits" : !cfg ? "cfg" : "token");
    if (n_vocab == 0)
        return memra_fail(err, MEMRA_E_INVALID, "sampling: no logits (n_vocab is 0)");
    for (uint32_t i = 0; i < n_vocab; i++) /* step 0 */
        if (!isfinite(z[i]))
            return memra_fail(err, MEMRA_E_RANGE, "sampling: logit %u is %s", i,
                              isnan(z[i]) ? "nan" : (z[i] > 0 ? "+inf" : "-inf"));
    if (!(cfg->temperature > 0.0f)) { /* step 1 */
        *token = greedy(z, n_vocab);
        return MEMRA_OK;
    }
    if (!scratch)
        return memra_fail(err, MEMRA_E_INVALID, "sampling: no scratch for a sampled (temperature > 0) draw");
    uint32_t *seq = scratch;
    float *cum = (float *)(seq + n_vocab);
    const float T = cfg->temperature;

    uint32_t n = n_vocab; /* step 2 */
    for (uint32_t i = 0; i < n_vocab; i++)
        seq[i] = i;
    bool cut_k = cfg->top_k != 0 && cfg->top_k < n_vocab;
    bool cut_p = cfg->top_p < 1.0f;
    if ((cut_k || cut_p) && sort) {
        n = cut_k ? cfg->top_k : n_vocab;
        sort(user, z, n_vocab, n, seq);
    } else if (cut_k || cut_p) {
        sort_logits = z;
        qsort(seq, n_vocab, sizeof *seq, compare_desc);
        if (cut_k)
            n = cfg->top_k;
    }

    float m = z[seq[0]]; /* step 3 */
    for (uint32_t j = 1; j < n; j++)
        if (z[seq[j]] > m)
            m = z[seq[j]];

    float prefix = 0.0f; /* steps 4 and 5: P_k, then C_j = P_k + partial_j */
    for (uint32_t k0 = 0; k0 < n; k0 += MEMRA_SAMPLE_CHUNK) {
        uint32_t k1 = n - k0 < MEMRA_SAMPLE_CHUNK ? n : k0 + MEMRA_SAMPLE_CHUNK;
        float partial = 0.0f;
        for (uint32_t j = k0; j < k1; j++) {
            float w = memra_expf(MEMRA_FDIV(MEMRA_FSUB(z[seq[j]], m), T));
            partial = MEMRA_FADD(partial, w);
            cum[j] = MEMRA_FADD(prefix, partial);
        }
        prefix = MEMRA_FADD(prefix, partial);
    }
    float total = prefix;

    uint32_t keep = n; /* step 6 */
    float kept_total = total;
    if (cut_p) {
        float bound = MEMRA_FMUL(cfg->top_p, total);
        for (uint32_t j = 0; j < n; j++)
            if (cum[j] >= bound) {
                keep = j + 1;
                break;
            }
        kept_total = cum[keep - 1];
    }

    float r = MEMRA_FMUL(memra_uniform(cfg->seed, position), kept_total); /* step 7 */

    uint32_t pick = seq[keep - 1]; /* step 8 */
    for (uint32_t j = 0; j < keep; j++)
        if (cum[j] > r) {
            pick = seq[j];
            break;
        }
    *token = pick;
    return MEMRA_OK;
}

/* ---- the sampling options of every tool ------------------------------------------------------ */

memra_status memra_sample_option(const char *opt, const char *text, memra_sample_cfg *cfg, memra_error *err) {
    if (!opt || !cfg)
        return memra_fail(err, MEMRA_E_INVALID, "memra_sample_option: a NULL argument");
    const char *s = text ? text : "";
    bool is_temp = strcmp(opt, "--temp") == 0, is_top_p = strcmp(opt, "--top-p") == 0;
    if (strcmp(opt, "--top-k") == 0 || strcmp(opt, "--seed") == 0) {
        bool top_k = opt[2] == 't';
        uint64_t max = top_k ? UINT32_MAX : UINT64_MAX;
        char *end = NULL;
        errno = 0;
        unsigned long long v = (*s >= '0' && *s <= '9') ? strtoull(s, &end, 10) : 0;
        if (!end || errno || *end || v > max)
            return memra_fail(err, MEMRA_E_INVALID, "%s %s: expected an integer from 0 to %llu", opt, s,
                              (unsigned long long)max);
        if (top_k)
            cfg->top_k = (uint32_t)v;
        else
            cfg->seed = v;
        return MEMRA_OK;
    }
    if (!is_temp && !is_top_p)
        return memra_fail(err, MEMRA_E_INVALID, "memra_sample_option: unknown option %s", opt);
    double max = is_temp ? MEMRA_SAMPLE_MAX_TEMP : 1.0;
    char *end = NULL;
    errno = 0;
    double d = *s ? strtod(s, &end) : NAN;
    if (!end || *end || errno || !isfinite(d) || !(d > 0.0) || d > max)
        return memra_fail(err, MEMRA_E_INVALID, "%s %s: expected a number > 0 and <= %g%s", opt, s, max,
                          is_temp ? " (greedy: give no --temp)" : "");
    /* As the 32-bit float the sampler gets: a normal positive float (--temp 1e-46 would become 0,
     * greedy, while the records say sampled), and a top-p below 1 stays below 1 (0.99999999 would
     * become 1, which turns the cut off). */
    float f = (float)d;
    if (!(f >= FLT_MIN))
        return memra_fail(
            err, MEMRA_E_INVALID,
            "%s %s: becomes %g as a 32-bit float, below the smallest normal float %g: give a larger value", opt, s,
            (double)f, (double)FLT_MIN);
    if (is_top_p && d < 1.0 && !((double)f < 1.0))
        return memra_fail(err, MEMRA_E_INVALID,
                          "%s %s: rounds to %g as a 32-bit float, which the sampler would take as 1 itself: give 1, or "
                          "a value below %.9g",
                          opt, s, (double)f, (double)nextafterf(1.0f, 0.0f));
    if (is_temp)
        cfg->temperature = f;
    else
        cfg->top_p = f;
    return MEMRA_OK;
}
