/* test_cpu_tp.c: tensor parallelism of the cpu backend (cpu:tp=N through the `local` collective)
 * and the arm layer's tensor-parallel functions (memra_arm_ranks, _collective, _arm_refusal,
 * _clear_refusals, _epochs):
 *   - exact pairs, every step's logits and three digests bit for bit: tp=2 against tp=2,threads=1
 *     (and threads=3,grain=0, which puts the ranks' collective calls on several pool threads),
 *     tp=4 against tp=4,stages=2;
 *   - the tolerance pair cpu against cpu:tp=2 (teacher-forced, same tokens): NMSE of the logits
 *     below 1e-10, and not bit-identical (the negative control of the exact check);
 *   - refusal cells: the step that reaches one fails with a message naming rank, layer, block and
 *     position, commits nothing (position and digests unchanged), quarantines the state ("unfinished
 *     transaction" on the next step and on restore); a cell at a later position does not fire
 *     early; a cell at a position no step reaches leaves every step passing; cleared cells do not
 *     fire;
 *   - epochs: exactly one per block per step on every rank (refused operations included), 0 for
 *     the blocks of another stage's layers; the check itself catches a skip.
 * Presets: tiny and qwen3-tiny (4 heads, 2 kv heads, n_ff 192: tp=2) and small (8 heads, 4 kv
 * heads, n_ff 768, 6 layers: tp=4). */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"
#include "memra/arm.h"
#include "memra/ext.h"

#define TP_STEPS 24

typedef struct tp_run {
    uint32_t n, n_vocab;
    float *logits;                    /* n x n_vocab */
    uint8_t digests[TP_STEPS][3][32]; /* after each step: logits, cache, hidden */
    int64_t tokens[TP_STEPS];         /* the input of each step */
} tp_run;

static memra_arm *open_arm(const memra_model *m, const char *text) {
    memra_error err = {0};
    memra_arm *a = NULL;
    cr_assert_eq(memra_arm_open(ct_registry(), m, text, NULL, NULL, 0, &a, &err), MEMRA_OK, "open %s: %s", text,
                 err.msg);
    return a;
}

static memra_status try_step(memra_arm_state *s, int64_t token, int64_t *sampled, float *logits, memra_error *err) {
    memra_sample_cfg greedy = {.temperature = 0};
    memra_step_args args = {.struct_size = sizeof args, .token = token, .sample = &greedy, .want_logits = logits};
    memra_status st = memra_arm_step_begin(s, &args, err);
    if (st != MEMRA_OK)
        return st;
    memra_step_result r = {.struct_size = sizeof r};
    st = memra_arm_step_end(s, logits, &r, err);
    if (st == MEMRA_OK && sampled)
        *sampled = r.token;
    return st;
}

static int64_t step_ok(memra_arm_state *s, int64_t token, float *logits) {
    memra_error err = {0};
    int64_t t = -1;
    cr_assert_eq(try_step(s, token, &t, logits, &err), MEMRA_OK, "step at %u: %s", memra_arm_state_position(s),
                 err.msg);
    return t;
}

/* n greedy steps from token 1 (or the given inputs), recording every step. */
static void record(const memra_model *m, const char *text, uint32_t n, const int64_t *forced, tp_run *out) {
    memset(out, 0, sizeof *out);
    out->n = n;
    out->n_vocab = m->n_vocab;
    out->logits = malloc((size_t)n * m->n_vocab * sizeof(float));
    cr_assert_not_null(out->logits);
    memra_arm *a = open_arm(m, text);
    memra_arm_state *s = NULL;
    memra_error err = {0};
    cr_assert_eq(memra_arm_state_new(a, n, &s, &err), MEMRA_OK, "%s", err.msg);
    int64_t token = 1;
    for (uint32_t i = 0; i < n; i++) {
        out->tokens[i] = forced ? forced[i] : token;
        token = step_ok(s, out->tokens[i], out->logits + (size_t)i * m->n_vocab);
        cr_assert_eq(memra_arm_digests(s, out->digests[i][0], out->digests[i][1], out->digests[i][2], &err), MEMRA_OK,
                     "%s", err.msg);
    }
    memra_arm_state_free(s);
    memra_arm_close(a);
}

/* Logits that differ in any bit, plus digests that differ, over every step. */
static uint64_t mismatches(const tp_run *a, const tp_run *b, char *first, size_t first_size) {
    uint64_t bad = 0;
    first[0] = '\0';
    for (uint32_t i = 0; i < a->n; i++) {
        const float *la = a->logits + (size_t)i * a->n_vocab, *lb = b->logits + (size_t)i * b->n_vocab;
        for (uint32_t j = 0; j < a->n_vocab; j++)
            if (memcmp(&la[j], &lb[j], sizeof(float)) != 0) {
                if (!bad++)
                    snprintf(first, first_size, "step %u logit %u: %.9g vs %.9g", i, j, (double)la[j], (double)lb[j]);
            }
        for (int d = 0; d < 3; d++)
            if (memcmp(a->digests[i][d], b->digests[i][d], 32) != 0) {
                if (!bad++)
                    snprintf(first, first_size, "step %u: %s digest", i,
                             d == 0   ? "logits"
                             : d == 1 ? "cache"
                                      : "hidden");
            }
    }
    return bad;
}

static void assert_exact_pair(const char *preset, uint32_t type, const char *arm_a, const char *arm_b) {
    ct_model cm;
    ct_model_build(preset, type, &cm);
    tp_run a, b;
    record(cm.model, arm_a, TP_STEPS, NULL, &a);
    record(cm.model, arm_b, TP_STEPS, NULL, &b);
    char first[160];
    uint64_t bad = mismatches(&a, &b, first, sizeof first);
    cr_assert_eq(bad, 0, "%s: %s vs %s: %llu mismatches, first %s", preset, arm_a, arm_b, (unsigned long long)bad,
                 first);
    free(a.logits), free(b.logits);
    ct_model_free(&cm);
}

Test(cpu_tp, tp2_any_thread_count_is_exact) {
    assert_exact_pair("tiny", MEMRA_TYPE_F32, "cpu:tp=2", "cpu:tp=2,threads=1");
    assert_exact_pair("tiny", MEMRA_TYPE_Q8_0, "cpu:tp=2,threads=1", "cpu:tp=2,threads=3,grain=0");
    assert_exact_pair("qwen3-tiny", MEMRA_TYPE_F32, "cpu:tp=2", "cpu:tp=2,threads=1");
    assert_exact_pair("qwen3-tiny", MEMRA_TYPE_F16, "cpu:tp=2,threads=1", "cpu:tp=2,threads=3,grain=0");
    assert_exact_pair("qwen2-tiny", MEMRA_TYPE_BF16, "cpu:tp=2,threads=1", "cpu:tp=2,threads=2,grain=0");
    /* gemma3: the post norms run on the all-reduced sums */
    assert_exact_pair("gemma3-tiny", MEMRA_TYPE_F32, "cpu:tp=2,threads=1", "cpu:tp=2,stages=3,threads=3,grain=0");
}

Test(cpu_tp, tp4_any_stage_split_is_exact) {
    assert_exact_pair("small", MEMRA_TYPE_F32, "cpu:tp=4", "cpu:tp=4,stages=2");
    assert_exact_pair("small", MEMRA_TYPE_Q8_0, "cpu:tp=4,threads=1", "cpu:tp=4,stages=3,threads=2,grain=0");
    assert_exact_pair("tiny", MEMRA_TYPE_F32, "cpu:tp=2", "cpu:tp=2,stages=2,threads=1");
}

/* cpu against cpu:tp=2 differs in summation order: close, not exact. The same exact check that
 * passes above finds the difference (the negative control of the exact pairs). */
static void nmse_pair(const char *preset) {
    ct_model cm;
    ct_model_build(preset, MEMRA_TYPE_F32, &cm);
    tp_run a, b;
    record(cm.model, "cpu", TP_STEPS, NULL, &a);
    record(cm.model, "cpu:tp=2", TP_STEPS, a.tokens, &b); /* teacher-forced: the same inputs */
    double num = 0, den = 0;
    for (size_t i = 0; i < (size_t)TP_STEPS * cm.model->n_vocab; i++) {
        double d = (double)a.logits[i] - (double)b.logits[i];
        num += d * d;
        den += (double)a.logits[i] * (double)a.logits[i];
    }
    double nmse = num / den;
    cr_log_info("%s: cpu vs cpu:tp=2 over %d steps: NMSE %.3g", preset, TP_STEPS, nmse);
    cr_assert(nmse < 1e-10, "%s: NMSE %.3g", preset, nmse);
    char first[160];
    cr_assert_gt(mismatches(&a, &b, first, sizeof first), 0, "%s: cpu and cpu:tp=2 are bit-identical", preset);
    free(a.logits), free(b.logits);
    ct_model_free(&cm);
}

Test(cpu_tp, plain_against_tp2_is_close_not_exact) {
    nmse_pair("tiny");
    nmse_pair("qwen3-tiny");
    nmse_pair("gemma3-tiny");
}

/* ------------------------------------------------------------------------------------------ */
/* Refusal cells and the transaction                                                          */

static void digests(memra_arm_state *s, uint8_t out[3][32]) {
    memra_error err = {0};
    cr_assert_eq(memra_arm_digests(s, out[0], out[1], out[2], &err), MEMRA_OK, "%s", err.msg);
}

/* A state restored from the snapshot. */
static memra_arm_state *from_snapshot(memra_arm *a, const memra_arm_state *snap, uint32_t capacity) {
    memra_error err = {0};
    memra_arm_state *s = NULL;
    cr_assert_eq(memra_arm_state_new(a, capacity, &s, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_arm_state_restore(s, snap, &err), MEMRA_OK, "%s", err.msg);
    return s;
}

/* The step at the state's position refuses with exactly `expect` (after the arm's name), and
 * leaves position and digests as they were, and the state quarantined. */
static void expect_refused(memra_arm_state *s, const memra_arm_state *snap, const char *expect) {
    memra_error err = {0};
    uint32_t pos = memra_arm_state_position(s);
    uint8_t before[3][32], after[3][32];
    digests(s, before);
    cr_assert_eq(try_step(s, 3, NULL, NULL, &err), MEMRA_E_REFUSED, "%s", err.msg);
    cr_assert(strstr(err.msg, expect) != NULL, "expected '%s' in: %s", expect, err.msg);
    cr_assert_eq(memra_arm_state_position(s), pos, "a refused step moved the position");
    cr_assert(memra_arm_state_quarantined(s));
    /* The digests of a quarantined state still read: nothing was committed. */
    digests(s, after);
    cr_assert(memcmp(before, after, sizeof before) == 0, "a refused step changed the state's digests");
    cr_assert_eq(try_step(s, 3, NULL, NULL, &err), MEMRA_E_QUARANTINED);
    cr_assert(strstr(err.msg, "unfinished transaction") != NULL, "%s", err.msg);
    cr_assert_eq(memra_arm_state_restore(s, snap, &err), MEMRA_E_QUARANTINED);
    cr_assert(strstr(err.msg, "unfinished transaction") != NULL, "%s", err.msg);
    memra_arm_state *other = from_snapshot(memra_arm_state_arm(s), snap, 32);
    cr_assert_eq(memra_arm_state_restore(other, s, &err), MEMRA_E_QUARANTINED);
    cr_assert(strstr(err.msg, "unfinished transaction") != NULL, "%s", err.msg);
    memra_arm_state_free(other);
}

static void refusal_cells(const char *preset, const char *text) {
    ct_model cm;
    ct_model_build(preset, MEMRA_TYPE_F32, &cm);
    memra_arm *a = open_arm(cm.model, text);
    memra_error err = {0};
    char name[32];
    bool refusals = false;
    cr_assert_eq(memra_arm_collective(a, name, sizeof name, &refusals, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_str_eq(name, "local");
    cr_assert(refusals);
    uint32_t last = memra_arm_plan(a)->n_stages - 1, n_layer = cm.model->n_layer;
    cr_assert_eq(memra_arm_ranks(a, 0), 2);
    cr_assert_eq(memra_arm_ranks(a, last + 1), 0);

    /* The prefix: 5 steps, a snapshot at position 5. */
    memra_arm_state *snap = NULL;
    cr_assert_eq(memra_arm_state_new(a, 32, &snap, &err), MEMRA_OK, "%s", err.msg);
    for (int i = 0; i < 5; i++)
        step_ok(snap, 1 + i, NULL);

    /* Cells: rank 1, last layer, ffn, position 5; rank 0, layer 0, attention, position 7. */
    cr_assert_eq(memra_arm_arm_refusal(a, last, 1, n_layer - 1, 1, 5, 0x5a, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_arm_arm_refusal(a, 0, 0, 0, 0, 7, 0x77, &err), MEMRA_OK, "%s", err.msg);
    memra_arm_state *s = from_snapshot(a, snap, 32);
    char expect[160];
    snprintf(expect, sizeof expect,
             "cpu: the all-reduce after ffn of layer %u refused on rank 1 at position 5 (word 0x0000005a)",
             n_layer - 1);
    expect_refused(s, snap, expect);
    memra_arm_state_free(s);

    /* The cell at 7 did not fire at 5 nor 6; it fires at 7. */
    s = from_snapshot(a, snap, 32);
    step_ok(s, 9, NULL);
    step_ok(s, 10, NULL);
    expect_refused(s, snap,
                   "cpu: the all-reduce after attention of layer 0 refused on rank 0 at position 7 "
                   "(word 0x00000077)");
    memra_arm_state_free(s);

    /* Negative control: a cell at a position no step reaches leaves every step passing; a cleared
     * cell does not fire. */
    cr_assert_eq(memra_arm_arm_refusal(a, 0, 1, 1, 0, 31, 0x31, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_arm_arm_refusal(a, 0, 1, 1, 1, 6, 0x66, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_arm_clear_refusals(a, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_arm_arm_refusal(a, 0, 1, 1, 0, 31, 0x31, &err), MEMRA_OK, "%s", err.msg);
    s = from_snapshot(a, snap, 32);
    for (int i = 0; i < 8; i++)
        step_ok(s, 20 + i, NULL);
    memra_arm_state_free(s);
    cr_assert_eq(memra_arm_clear_refusals(a, &err), MEMRA_OK, "%s", err.msg);

    /* Sites outside the plan. */
    cr_assert_eq(memra_arm_arm_refusal(a, 0, 2, 0, 0, 5, 1, &err), MEMRA_E_RANGE);
    cr_assert(strncmp(err.msg, "arm '", 5) == 0, "%s", err.msg);
    cr_assert_eq(memra_arm_arm_refusal(a, 0, 0, n_layer, 0, 5, 1, &err), MEMRA_E_RANGE);
    cr_assert_eq(memra_arm_arm_refusal(a, 0, 0, 0, 2, 5, 1, &err), MEMRA_E_RANGE);
    cr_assert_eq(memra_arm_arm_refusal(a, last + 1, 0, 0, 0, 5, 1, &err), MEMRA_E_RANGE);
    cr_assert_eq(memra_arm_arm_refusal(a, 0, 0, 0, 0, 5, 0, &err), MEMRA_E_INVALID);
    memra_arm_state_free(snap);
    memra_arm_close(a);
    ct_model_free(&cm);
}

Test(cpu_tp, refusal_cells_fail_cleanly_and_quarantine) {
    refusal_cells("tiny", "cpu:tp=2");
    refusal_cells("qwen3-tiny", "cpu:tp=2,stages=2,threads=2,grain=0");
}

/* The plugin's own contract, without the arm layer: the cpu state quarantines itself too. */
Test(cpu_tp, backend_quarantines_its_own_state) {
    ct_model cm;
    ct_model_build("tiny", MEMRA_TYPE_F32, &cm);
    ct_arm arm;
    ct_arm_open(cm.model, "tp=2,stages=2", &arm);
    const memra_ext_tp_v1 *tp = arm.cpu->extension(arm.b, MEMRA_EXT_TP, 1);
    cr_assert_not_null(tp);
    memra_state *s = ct_state_new(&arm, 16, 1), *other = ct_state_new(&arm, 16, 1);
    for (int i = 0; i < 3; i++)
        ct_step(&arm, s, 4 + i, NULL, NULL);
    memra_error err = {0};
    cr_assert_eq(tp->arm_refusal(arm.b, 1, 0, 2, 0, 3, -7, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(tp->arm_refusal(arm.b, 1, 0, 1, 0, 3, 5, &err), MEMRA_E_RANGE); /* layer 1 is stage 0's */
    uint8_t before[3][32], after[3][32];
    ct_digests(&arm, s, before);
    memra_step_args args = {.struct_size = sizeof args, .token = 8};
    cr_assert_eq(arm.cpu->step_begin(arm.b, s, &args, &err), MEMRA_E_REFUSED, "%s", err.msg);
    cr_assert_str_eq(
        err.msg, "cpu: the all-reduce after attention of layer 2 refused on rank 0 at position 3 (word 0xfffffff9)");
    cr_assert_eq(arm.cpu->state_position(arm.b, s), 3);
    ct_digests(&arm, s, after);
    cr_assert(memcmp(before, after, sizeof before) == 0, "a refused step changed the state");
    cr_assert_eq(arm.cpu->step_begin(arm.b, s, &args, &err), MEMRA_E_QUARANTINED);
    cr_assert(strstr(err.msg, "unfinished transaction"), "%s", err.msg);
    cr_assert_eq(arm.cpu->state_restore(arm.b, other, s, &err), MEMRA_E_QUARANTINED);
    cr_assert(strstr(err.msg, "unfinished transaction"), "%s", err.msg);
    cr_assert_eq(arm.cpu->state_restore(arm.b, s, other, &err), MEMRA_E_QUARANTINED);
    /* Another state steps on: the backend is not poisoned. */
    ct_step(&arm, other, 1, NULL, NULL);
    arm.cpu->state_free(arm.b, s), arm.cpu->state_free(arm.b, other);
    ct_arm_close(&arm);
    ct_model_free(&cm);
}

/* ------------------------------------------------------------------------------------------ */
/* Epochs                                                                                      */

/* Whether every block of [lo, hi) advanced by exactly one and every other block stayed 0. */
static bool advanced_by_one(const uint64_t *before, const uint64_t *after, uint32_t n, uint32_t lo, uint32_t hi,
                            char *why, size_t why_size) {
    for (uint32_t k = 0; k < n; k++) {
        uint64_t want = k >= lo && k < hi ? before[k] + 1 : 0;
        if (after[k] != want) {
            snprintf(why, why_size, "block %u: %llu, expected %llu", k, (unsigned long long)after[k],
                     (unsigned long long)want);
            return false;
        }
    }
    return true;
}

Test(cpu_tp, epochs_advance_by_one_per_block_per_step) {
    ct_model cm;
    ct_model_build("tiny", MEMRA_TYPE_F32, &cm);
    memra_arm *a = open_arm(cm.model, "cpu:tp=2,stages=2");
    const memra_plan *plan = memra_arm_plan(a);
    uint32_t n = cm.model->n_layer * 2;
    uint64_t before[2][2][64], after[2][2][64];
    memra_error err = {0};
    cr_assert_leq(n, 64);
    for (uint32_t st = 0; st < 2; st++)
        for (uint32_t r = 0; r < 2; r++) {
            cr_assert_eq(memra_arm_epochs(a, st, r, before[st][r], n, &err), MEMRA_OK, "%s", err.msg);
            for (uint32_t k = 0; k < n; k++)
                cr_assert_eq(before[st][r][k], 0);
        }
    memra_arm_state *s = NULL;
    cr_assert_eq(memra_arm_state_new(a, 16, &s, &err), MEMRA_OK, "%s", err.msg);
    char why[128];
    for (int step = 0; step < 6; step++) {
        if (step == 5) /* a refused step's operations count too */
            cr_assert_eq(memra_arm_arm_refusal(a, 1, 1, 3, 0, 5, 9, &err), MEMRA_OK, "%s", err.msg);
        memra_status st = try_step(s, 2 + step, NULL, NULL, &err);
        cr_assert_eq(st, step == 5 ? MEMRA_E_REFUSED : MEMRA_OK, "step %d: %s", step, err.msg);
        for (uint32_t sg = 0; sg < 2; sg++)
            for (uint32_t r = 0; r < 2; r++) {
                cr_assert_eq(memra_arm_epochs(a, sg, r, after[sg][r], n, &err), MEMRA_OK, "%s", err.msg);
                uint32_t lo = plan->stages[sg].layer_begin * 2, hi = plan->stages[sg].layer_end * 2;
                cr_assert(advanced_by_one(before[sg][r], after[sg][r], n, lo, hi, why, sizeof why),
                          "step %d, stage %u, rank %u: %s", step, sg, r, why);
                /* Negative control: the same check catches a skipped epoch. */
                uint64_t skipped[64];
                memcpy(skipped, after[sg][r], sizeof skipped);
                skipped[lo]++;
                cr_assert(!advanced_by_one(before[sg][r], skipped, n, lo, hi, why, sizeof why));
                memcpy(before[sg][r], after[sg][r], sizeof after[sg][r]);
            }
    }
    cr_assert_eq(memra_arm_epochs(a, 0, 2, after[0][0], n, &err), MEMRA_E_RANGE);
    cr_assert_eq(memra_arm_epochs(a, 0, 0, after[0][0], n - 1, &err), MEMRA_E_INVALID);
    memra_arm_state_free(s);
    memra_arm_close(a);

    /* Without tensor parallelism: one rank, no collective, no memra.tp. */
    a = open_arm(cm.model, "cpu");
    cr_assert_eq(memra_arm_ranks(a, 0), 1);
    char name[16];
    bool refusals = true;
    cr_assert_eq(memra_arm_collective(a, name, sizeof name, &refusals, &err), MEMRA_E_UNSUPPORTED);
    cr_assert(strncmp(err.msg, "arm 'cpu': ", 11) == 0, "%s", err.msg);
    cr_assert(!refusals);
    cr_assert_eq(memra_arm_epochs(a, 0, 0, after[0][0], n, &err), MEMRA_E_UNSUPPORTED);
    cr_assert_eq(memra_arm_arm_refusal(a, 0, 0, 0, 0, 1, 1, &err), MEMRA_E_UNSUPPORTED);
    cr_assert_eq(memra_arm_clear_refusals(a, &err), MEMRA_E_UNSUPPORTED);
    memra_arm_close(a);
    ct_model_free(&cm);
}
