/* check_arms.c: a self-contained gate for the cuda backends, through the plugin ABI only
 * (registry, memra_model_load, and the arm layer of memra/arm.h): arm A runs P prompt steps and N
 * generated steps (greedy, or sampled with position-keyed draws), recording logits and tokens;
 * arm B replays the same tokens (up to `window` steps in flight: --window W adds window=W to arm
 * B's text) and is compared at every step, bit for bit
 * (--exact) or by NMSE (--nmse X), with greedy-token agreement; then the cache, hidden and logits
 * digests (exact mode), and a second run of arm B must give the same digests. Prints one line.
 *
 *   check_arms --a cpu --b cuda [--model F | --preset P --dtype D] [--prime P] [--gen N]
 *              [--temp T --top-k K --top-p P --seed S] [--exact | --nmse X] [--window W]
 *   check_arms --a A --b B --chunk-repeat R ...: A's prefill of P steps once, B's R times on
 *              fresh states (each freed before the next), last logits and digests bit for bit
 *
 * bench/gpu/verify.sh runs it (nmse, sanitize); the arm-level Criterion test of tests/cuda
 * compiles it with MEMRA_CHECK_NO_MAIN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_checks.h"
#include "memra/arm.h"
#include "memra/digest.h"
#include "memra/numeric.h"
#include "memra/runtime.h"
#include "memra/synth.h"

static double check_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* What the step callback of memra_arm_run keeps: every step's logits at logits + step * V and
 * its sampled token. */
typedef struct check_sink {
    const float *buf; /* the run's logits buffer (V floats) */
    float *logits;
    int64_t *tokens;
    uint32_t V;
} check_sink;

static memra_status check_keep(void *user, uint32_t step, const float *logits, const memra_step_result *res,
                               bool drained, memra_error *err) {
    (void)drained;
    (void)err;
    check_sink *k = (check_sink *)user;
    memcpy(k->logits + (size_t)step * k->V, logits, (size_t)k->V * sizeof(float));
    if (k->tokens)
        k->tokens[step] = res->token;
    return MEMRA_OK;
}

/* One pass through the arm layer, up to the arm's window in flight: the prime steps take their
 * tokens from tokens_in (or the prompt), the generated steps from tokens_in (or the device). The
 * logits of step i land at logits + i * V, the tokens in tokens_out (may be NULL). */
static memra_status check_run_logits(memra_arm *arm, const check_arms_cfg *c, const uint32_t *prompt, uint32_t steps,
                                     const int64_t *tokens_in, int64_t *tokens_out, float *logits, uint32_t V,
                                     uint8_t digests[3][32], double *gen_s, memra_error *err) {
    memra_arm_state *s = NULL;
    int64_t *inputs = (int64_t *)calloc(steps ? steps : 1, sizeof *inputs);
    float *buf = (float *)malloc((size_t)V * sizeof(float));
    memra_status st = inputs && buf ? memra_arm_state_new(arm, steps, &s, err)
                                    : memra_fail(err, MEMRA_E_NOMEM, "out of host memory for %u steps", steps);
    if (st)
        goto out;
    for (uint32_t i = 0; i < steps; i++)
        inputs[i] = tokens_in ? tokens_in[i] : i < c->prime ? (int64_t)prompt[i] : MEMRA_TOKEN_FROM_DEVICE;
    memra_sample_cfg greedy = {0.0f, 0, 1.0f, 0};
    const memra_sample_cfg *sc = c->sampled ? &c->sample : &greedy;
    check_sink sink = {buf, logits, tokens_out, V};
    uint32_t prime = c->prime < steps ? c->prime : steps;
    st = memra_arm_run(s, inputs, 0, prime, sc, buf, check_keep, &sink, err);
    double t0 = check_now();
    if (!st && steps > prime)
        st = memra_arm_run(s, tokens_in ? inputs : NULL, prime, steps - prime, sc, buf, check_keep, &sink, err);
    *gen_s = check_now() - t0;
    if (!st)
        st = memra_arm_digests(s, digests[0], digests[1], digests[2], err);
out:
    memra_arm_state_free(s);
    free(inputs);
    free(buf);
    return st;
}

static memra_status check_drop(void *user, uint32_t step, const float *logits, const memra_step_result *res,
                               bool drained, memra_error *err) {
    (void)user, (void)step, (void)logits, (void)res, (void)drained, (void)err;
    return MEMRA_OK;
}

/* The prime steps of the prompt through memra_arm_prefill_run (the arm's prefill chunks) on a
 * fresh state, freed after: the last position's logits and the three digests. */
static memra_status check_prefill(memra_arm *arm, const uint32_t *prompt, uint32_t prime, float *logits,
                                  uint8_t d[3][32], memra_error *err) {
    memra_arm_state *s = NULL;
    int64_t *in = (int64_t *)calloc(prime ? prime : 1, sizeof *in);
    memra_status st =
        in ? memra_arm_state_new(arm, prime + 1, &s, err) : memra_fail(err, MEMRA_E_NOMEM, "out of host memory");
    for (uint32_t i = 0; in && i < prime; i++)
        in[i] = (int64_t)prompt[i];
    if (!st)
        st = memra_arm_prefill_run(s, in, 0, prime, logits, check_drop, NULL, err);
    if (!st)
        st = memra_arm_digests(s, d[0], d[1], d[2], err);
    memra_arm_state_free(s);
    free(in);
    return st;
}

/* --chunk-repeat R: arm A's prefill once, then arm B's R times, each on a fresh state after the
 * one before was freed (a cuda-graph arm updates the freed state's chunk graph to the new
 * state's capture instead of instantiating one): every B run's last logits and digests must be
 * A's, bit for bit. 0 pass, 1 a difference. */
static int check_chunk_repeat(const check_arms_cfg *c, memra_arm *A, memra_arm *B, const uint32_t *prompt, uint32_t V,
                              check_arms_result *res) {
    memra_error err;
    memset(&err, 0, sizeof err);
    float *la = (float *)malloc((size_t)V * 4), *lb = (float *)malloc((size_t)V * 4);
    uint8_t da[3][32], db[3][32];
    uint32_t differ = 0, r = 0;
    memra_status st = la && lb ? check_prefill(A, prompt, c->prime, la, da, &err)
                               : memra_fail(&err, MEMRA_E_NOMEM, "out of host memory");
    for (; !st && r < c->chunk_repeat; r++) {
        memset(lb, 0xff, (size_t)V * 4);
        if (!(st = check_prefill(B, prompt, c->prime, lb, db, &err)))
            differ += memcmp(la, lb, (size_t)V * 4) != 0 || memcmp(da, db, sizeof da) != 0;
    }
    if (st)
        snprintf(res->msg, sizeof res->msg, "ERROR %s vs %s (prefill run %u): %s", c->a, c->b, r, err.msg);
    else
        snprintf(res->msg, sizeof res->msg, "%s  A=%s B=%s prefill of %u steps, B %u times on fresh states: %u differ",
                 differ ? "FAIL" : "PASS", c->a, c->b, c->prime, c->chunk_repeat, differ);
    free(la);
    free(lb);
    return st ? 3 : differ ? 1 : 0;
}

/* arm_text with window=W added when W > 1 and the text does not set a window itself. */
static void check_arm_text(const char *arm_text, uint32_t window, char *buf, size_t size) {
    if (window <= 1 || strstr(arm_text, "window="))
        snprintf(buf, size, "%s", arm_text);
    else
        snprintf(buf, size, "%s%swindow=%u", arm_text, strchr(arm_text, ':') ? "," : ":", window);
}

int memra_cuda_check_arms(const check_arms_cfg *c, check_arms_result *res) {
    memset(res, 0, sizeof *res);
    memra_error err;
    memset(&err, 0, sizeof err);
    memra_loaded_model *lm = NULL;
    memra_registry *reg = NULL;
    memra_arm *A = NULL, *B = NULL;
    float *la = NULL, *lb = NULL;
    int64_t *ta = NULL, *tin = NULL, *tb = NULL;
    uint32_t *prompt = NULL;
    int rc = 3;
    const uint32_t steps = c->prime + c->gen;
    uint8_t da[3][32], db[3][32], db2[3][32];
    double ga = 0, gb = 0, gb2 = 0;
    memra_status st = memra_model_load(c->model, c->model ? NULL : c->preset, c->dtype, 1, &lm, &err);
    if (!st)
        st = memra_registry_open(&reg, &err);
    char text_b[600];
    check_arm_text(c->b, c->window, text_b, sizeof text_b);
    if (!st)
        st = memra_arm_open(reg, lm->model, c->a, "a", NULL, 0, &A, &err);
    if (!st)
        st = memra_arm_open(reg, lm->model, text_b, "b", NULL, 0, &B, &err);
    if (st)
        goto out;
    {
        const uint32_t V = lm->model->n_vocab;
        la = (float *)malloc((size_t)steps * V * 4);
        lb = (float *)malloc((size_t)steps * V * 4);
        ta = (int64_t *)calloc(steps, 8);
        tin = (int64_t *)calloc(steps, 8);
        tb = (int64_t *)calloc(steps, 8);
        prompt = (uint32_t *)calloc(steps + 1, 4);
        if (!la || !lb || !ta || !tb || !tin || !prompt) {
            snprintf(res->msg, sizeof res->msg, "out of host memory");
            goto out;
        }
        uint64_t z = 12345;
        for (uint32_t i = 0; i < steps; i++) {
            z = memra_mix64(z + i);
            prompt[i] = (uint32_t)(z % V);
        }
        if (c->chunk_repeat) {
            rc = check_chunk_repeat(c, A, B, prompt, V, res);
            goto out;
        }
        if ((st = check_run_logits(A, c, prompt, steps, NULL, ta, la, V, da, &ga, &err)))
            goto out;
        for (uint32_t i = 0; i < steps; i++) /* B's inputs: the prompt, then A's sampled tokens */
            tin[i] = i < c->prime ? (int64_t)prompt[i] : ta[i - 1];
        if (c->perturb_step >= 0 && (uint32_t)c->perturb_step < steps)
            tin[c->perturb_step] = (tin[c->perturb_step] + 1) % V;
        if ((st = check_run_logits(B, c, prompt, steps, tin, tb, lb, V, db, &gb, &err)))
            goto out;
        if ((st = check_run_logits(B, c, prompt, steps, tin, NULL, lb, V, db2, &gb2, &err)))
            goto out; /* the repeat overwrites lb with the same bits, or the digests differ */
        res->steps = steps;
        res->first_bad = 0xffffffffu;
        for (uint32_t i = 0; i < steps; i++) {
            const float *x = la + (size_t)i * V, *y = lb + (size_t)i * V;
            bool bad;
            if (c->exact) {
                bad = memcmp(x, y, (size_t)V * 4) != 0;
            } else {
                double num = 0, den = 0;
                for (uint32_t j = 0; j < V; j++) {
                    double d = (double)x[j] - y[j];
                    num += d * d;
                    den += (double)x[j] * x[j];
                }
                double nmse = den > 0 ? num / den : num;
                if (!(nmse <= res->worst_nmse))
                    res->worst_nmse = nmse;
                bad = !(nmse <= c->nmse_tol);
                if (getenv("CHECK_VERBOSE") && (bad || i % 16 == 0))
                    fprintf(stderr, "step %u nmse %.3g tokens %lld %lld\n", i, nmse, (long long)ta[i],
                            (long long)tb[i]);
            }
            if (bad) {
                res->bad_steps++;
                if (res->first_bad == 0xffffffffu)
                    res->first_bad = i;
            }
            if (ta[i] == tb[i])
                res->token_agree++;
        }
        res->digests_equal = memcmp(da, db, sizeof da) == 0;
        res->repeat_equal = memcmp(db, db2, sizeof db) == 0;
        res->b_tok_s = c->gen / (gb2 > 0 ? gb2 : 1e-9);
        const uint64_t lost = memra_sha256_failures(); /* a failed digest equals nothing: say so */
        bool pass = res->bad_steps == 0 && res->repeat_equal && (!c->exact || res->digests_equal) &&
                    (!c->exact || res->token_agree == steps) && lost == 0;
        if (lost)
            fprintf(stderr, "check_arms: %llu SHA-256 digest(s) could not be computed\n", (unsigned long long)lost);
        char hex[65];
        memra_sha256_hex(db[1], hex);
        snprintf(res->msg, sizeof res->msg,
                 "%s  A=%s B=%s steps=%u bad=%u first_bad=%d worst_nmse=%.3g tokens_agree=%u/%u digests_equal=%d "
                 "repeat_equal=%d cache=%.16s B_gen_tok/s=%.1f",
                 pass ? "PASS" : "FAIL", c->a, c->b, steps, res->bad_steps,
                 res->first_bad == 0xffffffffu ? -1 : (int)res->first_bad, res->worst_nmse, res->token_agree, steps,
                 res->digests_equal, res->repeat_equal, hex, res->b_tok_s);
        rc = pass ? 0 : 1;
    }
out:
    if (st)
        snprintf(res->msg, sizeof res->msg, "ERROR %s vs %s: %s", c->a, c->b, err.msg);
    free(la);
    free(lb);
    free(ta);
    free(tb);
    free(tin);
    free(prompt);
    if (B)
        memra_arm_close(B);
    if (A)
        memra_arm_close(A);
    if (reg)
        memra_registry_close(reg);
    if (lm)
        memra_model_unload(lm);
    return rc;
}

#ifndef MEMRA_CHECK_NO_MAIN
int main(int argc, char **argv) {
    check_arms_cfg c;
    memset(&c, 0, sizeof c);
    c.a = "cpu";
    c.b = "cuda";
    c.preset = "tiny";
    c.dtype = 0;
    c.prime = 16;
    c.gen = 16;
    c.window = 1;
    c.exact = true;
    c.sample = (memra_sample_cfg){1.0f, 0, 1.0f, 42};
    c.perturb_step = -1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        memra_error err;
        if (!strcmp(o, "--a"))
            c.a = v, i++;
        else if (!strcmp(o, "--b"))
            c.b = v, i++;
        else if (!strcmp(o, "--model"))
            c.model = v, i++;
        else if (!strcmp(o, "--preset"))
            c.preset = v, i++;
        else if (!strcmp(o, "--dtype")) {
            if (memra_synth_parse_dtype(v, &c.dtype, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 2;
            }
            i++;
        } else if (!strcmp(o, "--prime"))
            c.prime = (uint32_t)atoi(v), i++;
        else if (!strcmp(o, "--gen"))
            c.gen = (uint32_t)atoi(v), i++;
        else if (!strcmp(o, "--window"))
            c.window = (uint32_t)atoi(v), i++;
        else if (!strcmp(o, "--temp"))
            c.sampled = true, c.sample.temperature = (float)atof(v), i++;
        else if (!strcmp(o, "--top-k"))
            c.sample.top_k = (uint32_t)atoi(v), i++;
        else if (!strcmp(o, "--top-p"))
            c.sample.top_p = (float)atof(v), i++;
        else if (!strcmp(o, "--seed"))
            c.sample.seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(o, "--exact"))
            c.exact = true;
        else if (!strcmp(o, "--perturb-step"))
            c.perturb_step = atoi(v), i++;
        else if (!strcmp(o, "--nmse"))
            c.exact = false, c.nmse_tol = atof(v), i++;
        else if (!strcmp(o, "--chunk-repeat"))
            c.chunk_repeat = (uint32_t)atoi(v), i++;
        else {
            fprintf(stderr, "check_arms: unknown option %s\n", o);
            return 2;
        }
    }
    check_arms_result r;
    int rc = memra_cuda_check_arms(&c, &r);
    printf("%s\n", r.msg);
    return rc;
}
#endif
