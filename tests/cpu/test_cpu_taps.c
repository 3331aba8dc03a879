/* test_cpu_taps.c: the cpu backend's per-op taps (memra.ops, issue 30), through the arm layer
 * (memra_arm_step_tapped):
 *   - a tapped step is the untapped step: the same logits, cache and hidden digests after it, and
 *     the tapped logits site is the step's logits;
 *   - the sites, in the op vocabulary's order, each layer's then the head's (qk_norm only where
 *     the architecture has it);
 *   - with tp=2 every site is the LOGICAL tensor: each sharded site of tp=2 is tp=1's bit for bit
 *     up to the first all-reduce (attn_out), and the shards' ranges cover it in rank order;
 *   - a tap that fails fails the step and quarantines the state.
 * Presets: tiny (llama) and qwen3-tiny (q/k norms; 4 heads, 2 kv heads: tp=2 splits both). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"
#include "memra/arm.h"
#include "memra/digest.h"
#include "memra/ext.h"

#define MAX_SITES 256

typedef struct taps {
    uint32_t n;
    int32_t layer[MAX_SITES];
    char name[MAX_SITES][40]; /* "site.tensor" */
    memra_op_site info[MAX_SITES];
    float *data[MAX_SITES];
} taps;

static memra_status keep(void *user, const memra_op_site *s, const float *data, memra_error *err) {
    (void)err;
    taps *t = user;
    cr_assert_lt(t->n, MAX_SITES);
    uint32_t i = t->n++;
    t->layer[i] = s->layer;
    snprintf(t->name[i], sizeof t->name[i], "%s.%s", s->site, s->tensor);
    t->info[i] = *s;
    t->data[i] = malloc((size_t)s->n * sizeof(float));
    cr_assert_not_null(t->data[i]);
    memcpy(t->data[i], data, (size_t)s->n * sizeof(float));
    return MEMRA_OK;
}

static void taps_free(taps *t) {
    for (uint32_t i = 0; i < t->n; i++)
        free(t->data[i]);
}

static memra_arm *open_arm(const memra_model *m, const char *text) {
    memra_error err = {0};
    memra_arm *a = NULL;
    cr_assert_eq(memra_arm_open(ct_registry(), m, text, NULL, NULL, 0, &a, &err), MEMRA_OK, "open %s: %s", text,
                 err.msg);
    return a;
}

static void step(memra_arm_state *s, int64_t token, float *logits) {
    memra_error err = {0};
    memra_step_args args = {.struct_size = sizeof args, .token = token, .want_logits = logits != NULL};
    cr_assert_eq(memra_arm_step_begin(s, &args, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_arm_step_end(s, logits, NULL, &err), MEMRA_OK, "%s", err.msg);
}

/* Steps 0..3 untapped, step 4 tapped into t; the state's digests after it into d. */
static void run_tapped(const memra_model *m, const char *text, taps *t, uint8_t d[3][32]) {
    static const int64_t in[5] = {3, 17, 99, 250, 7};
    memra_arm *a = open_arm(m, text);
    cr_assert(memra_arm_has_taps(a), "%s offers no memra.ops", text);
    memra_arm_state *s = NULL;
    memra_error err = {0};
    cr_assert_eq(memra_arm_state_new(a, 8, &s, &err), MEMRA_OK, "%s", err.msg);
    for (int i = 0; i < 4; i++)
        step(s, in[i], NULL);
    memset(t, 0, sizeof *t);
    cr_assert_eq(memra_arm_step_tapped(s, in[4], keep, t, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_arm_state_position(s), 5);
    cr_assert_eq(memra_arm_digests(s, d[0], d[1], d[2], &err), MEMRA_OK, "%s", err.msg);
    memra_arm_state_free(s);
    memra_arm_close(a);
}

static void run_plain(const memra_model *m, const char *text, float *logits, uint8_t d[3][32]) {
    static const int64_t in[5] = {3, 17, 99, 250, 7};
    memra_arm *a = open_arm(m, text);
    memra_arm_state *s = NULL;
    memra_error err = {0};
    cr_assert_eq(memra_arm_state_new(a, 8, &s, &err), MEMRA_OK, "%s", err.msg);
    for (int i = 0; i < 5; i++)
        step(s, in[i], i == 4 ? logits : NULL);
    cr_assert_eq(memra_arm_digests(s, d[0], d[1], d[2], &err), MEMRA_OK, "%s", err.msg);
    memra_arm_state_free(s);
    memra_arm_close(a);
}

static const char *const llama_layer[] = {"attn_norm.attn_norm",
                                          "q.q",
                                          "k.k",
                                          "v.v",
                                          "rope.q",
                                          "rope.k",
                                          "attention.attention",
                                          "attn_out.attn_out",
                                          "attn_res.attn_res",
                                          "ffn_norm.ffn_norm",
                                          "ffn_gate.ffn_gate",
                                          "ffn_up.ffn_up",
                                          "ffn_act.ffn_act",
                                          "ffn_down.ffn_down",
                                          "ffn_res.ffn_res"};

static void check_order(const memra_model *m, const taps *t, bool qk_norm) {
    uint32_t per = 15 + (qk_norm ? 2 : 0);
    cr_assert_eq(t->n, m->n_layer * per + 2, "%u sites", t->n);
    for (uint32_t il = 0; il < m->n_layer; il++) {
        uint32_t k = il * per;
        for (uint32_t j = 0; j < 15; j++) {
            if (qk_norm && j == 4) {
                cr_assert_str_eq(t->name[k++], "qk_norm.q");
                cr_assert_str_eq(t->name[k++], "qk_norm.k");
            }
            cr_assert_eq(t->layer[k], (int32_t)il);
            cr_assert_str_eq(t->name[k], llama_layer[j], "layer %u site %u", il, j);
            k++;
        }
    }
    cr_assert_str_eq(t->name[t->n - 2], "output_norm.output_norm");
    cr_assert_str_eq(t->name[t->n - 1], "logits.logits");
    cr_assert_eq(t->layer[t->n - 1], -1);
    cr_assert_eq(t->info[t->n - 1].n, m->n_vocab);
}

static void tapped_is_untapped(const char *preset, const char *text, bool qk_norm) {
    ct_model cm;
    ct_model_build(preset, MEMRA_TYPE_F32, &cm);
    taps t;
    uint8_t dt[3][32], dp[3][32];
    float *logits = malloc((size_t)cm.model->n_vocab * sizeof(float));
    run_tapped(cm.model, text, &t, dt);
    run_plain(cm.model, text, logits, dp);
    cr_assert_arr_eq(dt, dp, sizeof dt, "%s %s: the tapped step changed the state's bits", preset, text);
    check_order(cm.model, &t, qk_norm);
    cr_assert_arr_eq(t.data[t.n - 1], logits, (size_t)cm.model->n_vocab * sizeof(float),
                     "the logits site is not the step's logits");
    free(logits);
    taps_free(&t);
    ct_model_free(&cm);
}

Test(cpu_taps, tapped_step_is_the_step_llama) { tapped_is_untapped("tiny", "cpu", false); }
Test(cpu_taps, tapped_step_is_the_step_qwen3) { tapped_is_untapped("qwen3-tiny", "cpu", true); }
Test(cpu_taps, tapped_step_is_the_step_tp2_stages2) { tapped_is_untapped("qwen3-tiny", "cpu:tp=2,stages=2", true); }

/* tp=2's sites are the logical tensors: tp=1's bits up to the first all-reduce, shards in rank
 * order; after it every rank holds the whole sum. */
Test(cpu_taps, tp2_sites_are_logical_tensors) {
    ct_model cm;
    ct_model_build("qwen3-tiny", MEMRA_TYPE_F32, &cm);
    taps one, two;
    uint8_t d[3][32];
    run_tapped(cm.model, "cpu", &one, d);
    run_tapped(cm.model, "cpu:tp=2", &two, d);
    cr_assert_eq(one.n, two.n);
    uint32_t i = 0;
    for (; i < one.n && strcmp(one.name[i], "attn_out.attn_out") != 0; i++) {
        cr_assert_str_eq(one.name[i], two.name[i]);
        cr_assert_eq(one.info[i].n, two.info[i].n, "%s", one.name[i]);
        cr_assert_arr_eq(one.data[i], two.data[i], one.info[i].n * sizeof(float), "%s differs", one.name[i]);
        const memra_op_site *s = &two.info[i];
        cr_assert_eq(s->n_ranks, 2);
        bool whole = s->begin[0] == 0 && s->end[0] == s->n && s->begin[1] == 0 && s->end[1] == s->n;
        bool sharded = s->begin[0] == 0 && s->end[0] == s->begin[1] && s->end[1] == s->n && s->end[0] > 0;
        cr_assert(whole || sharded, "%s: ranks hold [%u, %u) and [%u, %u) of %u", one.name[i], s->begin[0], s->end[0],
                  s->begin[1], s->end[1], s->n);
        bool norm = strstr(one.name[i], "attn_norm") != NULL;
        cr_assert(norm ? whole : sharded, "%s", one.name[i]);
    }
    cr_assert_lt(i, one.n);
    const memra_op_site *s = &two.info[i];
    cr_assert(s->begin[0] == 0 && s->end[0] == s->n && s->begin[1] == 0 && s->end[1] == s->n,
              "attn_out after the all-reduce is held whole by every rank");
    cr_assert(memcmp(one.data[i], two.data[i], one.info[i].n * sizeof(float)) != 0,
              "attn_out: tp=1 and tp=2 sum in another order, so their bits differ (the control)");
    taps_free(&one);
    taps_free(&two);
    ct_model_free(&cm);
}

static memra_status refuse(void *user, const memra_op_site *s, const float *data, memra_error *err) {
    (void)user, (void)data;
    if (s->layer == 1 && strcmp(s->site, "ffn_up") == 0)
        return memra_fail(err, MEMRA_E_IO, "refused at layer 1 ffn_up");
    return MEMRA_OK;
}

/* A tap that fails fails the step and quarantines the state; a state with a step in flight is
 * refused. */
Test(cpu_taps, failing_tap_quarantines) {
    ct_model cm;
    ct_model_build("tiny", MEMRA_TYPE_F32, &cm);
    memra_arm *a = open_arm(cm.model, "cpu:window=2");
    memra_arm_state *s = NULL;
    memra_error err = {0};
    cr_assert_eq(memra_arm_state_new(a, 8, &s, &err), MEMRA_OK, "%s", err.msg);
    memra_step_args args = {.struct_size = sizeof args, .token = 5};
    cr_assert_eq(memra_arm_step_begin(s, &args, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_arm_step_tapped(s, 5, refuse, NULL, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "in flight"), "%s", err.msg);
    cr_assert_eq(memra_arm_step_end(s, NULL, NULL, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_arm_step_tapped(s, 5, refuse, NULL, &err), MEMRA_E_IO);
    cr_assert(strstr(err.msg, "refused at layer 1 ffn_up"), "%s", err.msg);
    cr_assert(memra_arm_state_quarantined(s));
    memra_arm_state_free(s);
    memra_arm_close(a);
    ct_model_free(&cm);
}
