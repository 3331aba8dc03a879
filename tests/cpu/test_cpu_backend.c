/* test_cpu_backend.c: the cpu backend's exactness and state contracts: bit-identical results for
 * any thread count and any stage split, snapshot and restore, the transaction rules (capacity,
 * quarantine), in-flight windows, the carried token, and that greedy decoding of tiny does not
 * loop. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"
#include "memra/arm.h"

#define RUN_STEPS 32

/* A greedy run of n steps from token 1: every step's logits (n x n_vocab) and the final digests. */
typedef struct run_record {
    float *logits;
    uint8_t digests[3][32];
    uint32_t tokens[RUN_STEPS];
} run_record;

static void record_run(const memra_model *m, const char *opts, uint32_t n, run_record *out) {
    ct_arm arm;
    ct_arm_open(m, opts, &arm);
    memra_state *s = ct_state_new(&arm, n, 1);
    out->logits = malloc((size_t)n * m->n_vocab * sizeof(float));
    memra_sample_cfg greedy = {.temperature = 0};
    int64_t token = 1;
    for (uint32_t i = 0; i < n; i++) {
        out->tokens[i] = (uint32_t)token;
        token = ct_step(&arm, s, token, &greedy, out->logits + (size_t)i * m->n_vocab);
        cr_assert_eq(token, ct_argmax(out->logits + (size_t)i * m->n_vocab, m->n_vocab), "greedy token");
    }
    ct_digests(&arm, s, out->digests);
    arm.cpu->state_free(arm.b, s);
    ct_arm_close(&arm);
}

static void assert_same_run(const memra_model *m, const run_record *a, const run_record *b, const char *what) {
    for (uint32_t i = 0; i < RUN_STEPS; i++) {
        const float *la = a->logits + (size_t)i * m->n_vocab, *lb = b->logits + (size_t)i * m->n_vocab;
        if (memcmp(la, lb, m->n_vocab * sizeof(float)) == 0)
            continue;
        for (uint32_t j = 0; j < m->n_vocab; j++)
            cr_assert(memcmp(&la[j], &lb[j], 4) == 0, "%s: step %u logit %u: %.9g vs %.9g", what, i, j, la[j], lb[j]);
    }
    cr_assert(memcmp(a->digests[0], b->digests[0], 32) == 0, "%s: logits digest differs", what);
    cr_assert(memcmp(a->digests[1], b->digests[1], 32) == 0, "%s: cache digest differs", what);
    cr_assert(memcmp(a->digests[2], b->digests[2], 32) == 0, "%s: hidden digest differs", what);
}

static void check_variants(const char *preset, uint32_t type, const char *const *variants, int n_variants) {
    ct_model cm;
    ct_model_build(preset, type, &cm);
    run_record base;
    record_run(cm.model, "threads=1", RUN_STEPS, &base);
    for (int v = 0; v < n_variants; v++) {
        run_record other;
        record_run(cm.model, variants[v], RUN_STEPS, &other);
        char what[128];
        snprintf(what, sizeof what, "%s: threads=1 vs %s", preset, variants[v]);
        assert_same_run(cm.model, &base, &other, what);
        free(other.logits);
    }
    free(base.logits);
    ct_model_free(&cm);
}

/* grain=0 splits every task, however small, so tiny's products reach every worker. */
Test(cpu_backend, thread_count_invariance) {
    static const char *const variants[] = {"threads=2,grain=0", "threads=7,grain=0", "threads=3"};
    check_variants("tiny", MEMRA_TYPE_F32, variants, 3);
    check_variants("tiny", MEMRA_TYPE_Q8_0, variants, 3);
    check_variants("qwen3-tiny", MEMRA_TYPE_F16, variants, 3);
    check_variants("qwen2-tiny", MEMRA_TYPE_BF16, variants, 3);
    static const char *const gemma_variants[] = {"threads=2,grain=0", "threads=7,grain=0", "stages=3,threads=3"};
    check_variants("gemma3-tiny", MEMRA_TYPE_Q8_0, gemma_variants, 3);
}

/* With the default grain: `small` has matrices of 256 x 768 and a 4096-row head, big enough to
 * be split. */
Test(cpu_backend, thread_count_invariance_small, .timeout = 300) {
    static const char *const variants[] = {"threads=2", "threads=7"};
    check_variants("small", MEMRA_TYPE_Q8_0, variants, 2);
}

Test(cpu_backend, stage_split_invariance) {
    static const char *const variants[] = {
        "stages=2",
        "stages=3",
        "stages=4",
        "splits=1,3",
        "splits=3,devices=0,5",
        "stages=4,devices=1,2,3,7,threads=3,grain=0",
    };
    check_variants("tiny", MEMRA_TYPE_F32, variants, 6);
    check_variants("qwen3-tiny", MEMRA_TYPE_Q8_0, variants, 6);
}

Test(cpu_backend, snapshot_restore_identical_continuation) {
    ct_model cm;
    ct_model_build("qwen3-tiny", MEMRA_TYPE_F16, &cm);
    const memra_model *m = cm.model;
    ct_arm arm;
    ct_arm_open(m, "stages=2", &arm);
    memra_error err = {0};
    memra_sample_cfg greedy = {.temperature = 0};
    memra_state *a = ct_state_new(&arm, 64, 1), *snap = ct_state_new(&arm, 8, 1), *b = ct_state_new(&arm, 64, 1);
    int64_t token = 5;
    for (int i = 0; i < 8; i++)
        token = ct_step(&arm, a, token, &greedy, NULL);
    cr_assert_eq(arm.cpu->state_restore(arm.b, snap, a, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(arm.cpu->state_position(arm.b, snap), 8);
    uint8_t da[3][32], ds[3][32];
    ct_digests(&arm, a, da);
    ct_digests(&arm, snap, ds);
    cr_assert(memcmp(da, ds, sizeof da) == 0, "snapshot digests differ from the source");

    /* Continue a; then restore b from the snapshot and continue it: same logits at every step. */
    float *la = malloc(16 * m->n_vocab * sizeof(float)), *lb = malloc(16 * m->n_vocab * sizeof(float));
    int64_t ta = token, tb = token;
    for (int i = 0; i < 16; i++)
        ta = ct_step(&arm, a, ta, &greedy, la + (size_t)i * m->n_vocab);
    /* b first wanders off elsewhere, so the restore has to overwrite real content. */
    for (int i = 0; i < 12; i++)
        ct_step(&arm, b, 100 + i, NULL, NULL);
    cr_assert_eq(arm.cpu->state_restore(arm.b, b, snap, &err), MEMRA_OK, "%s", err.msg);
    for (int i = 0; i < 16; i++)
        tb = ct_step(&arm, b, tb, &greedy, lb + (size_t)i * m->n_vocab);
    cr_assert(memcmp(la, lb, 16 * m->n_vocab * sizeof(float)) == 0, "continuations after restore differ");
    cr_assert_eq(ta, tb);
    uint8_t db[3][32];
    ct_digests(&arm, a, da);
    ct_digests(&arm, b, db);
    cr_assert(memcmp(da, db, sizeof da) == 0, "digests after the continuations differ");

    /* Restore into a state too small for the source's position: a range error. */
    memra_state *small = ct_state_new(&arm, 4, 1);
    cr_assert_eq(arm.cpu->state_restore(arm.b, small, a, &err), MEMRA_E_RANGE);
    arm.cpu->state_free(arm.b, small);
    free(la), free(lb);
    arm.cpu->state_free(arm.b, a), arm.cpu->state_free(arm.b, snap), arm.cpu->state_free(arm.b, b);
    ct_arm_close(&arm);
    ct_model_free(&cm);
}

Test(cpu_backend, position_past_capacity_is_a_clear_error) {
    ct_model cm;
    ct_model_build("tiny", MEMRA_TYPE_F32, &cm);
    ct_arm arm;
    ct_arm_open(cm.model, "", &arm);
    memra_state *s = ct_state_new(&arm, 4, 1);
    for (int i = 0; i < 4; i++)
        ct_step(&arm, s, 1 + i, NULL, NULL);
    uint8_t before[3][32], after[3][32];
    ct_digests(&arm, s, before);
    memra_error err = {0};
    memra_step_args args = {.struct_size = sizeof args, .token = 7};
    cr_assert_eq(arm.cpu->step_begin(arm.b, s, &args, &err), MEMRA_E_RANGE);
    cr_assert_str_eq(err.msg, "cpu: position 4 is past the state's capacity of 4");
    cr_assert_eq(arm.cpu->state_position(arm.b, s), 4);
    ct_digests(&arm, s, after);
    cr_assert(memcmp(before, after, sizeof before) == 0, "a refused step changed the state");
    /* Not quarantined: a restore from it still works. */
    memra_state *copy = ct_state_new(&arm, 8, 1);
    cr_assert_eq(arm.cpu->state_restore(arm.b, copy, s, &err), MEMRA_OK, "%s", err.msg);
    arm.cpu->state_free(arm.b, copy);
    arm.cpu->state_free(arm.b, s);
    ct_arm_close(&arm);
    ct_model_free(&cm);
}

/* A NaN in the head's weights makes a NaN logit; the sampler refuses it inside the step, so the
 * step fails, commits nothing and quarantines the state. */
Test(cpu_backend, failed_step_quarantines) {
    ct_model cm;
    ct_model_build("tiny", MEMRA_TYPE_F32, &cm);
    const memra_model *m = cm.model;
    cr_assert_eq(m->output.type, MEMRA_TYPE_F32);
    float nan = NAN;
    memcpy((void *)m->output.data, &nan, sizeof nan); /* row 0, column 0: the buffer is ours */
    ct_arm arm;
    ct_arm_open(m, "", &arm);
    memra_state *s = ct_state_new(&arm, 8, 1), *other = ct_state_new(&arm, 8, 1);
    ct_step(&arm, s, 1, NULL, NULL); /* unsampled: a NaN logit is just returned */
    uint8_t before[3][32], after[3][32];
    ct_digests(&arm, s, before);
    memra_error err = {0};
    memra_sample_cfg greedy = {.temperature = 0};
    memra_step_args args = {.struct_size = sizeof args, .token = 2, .sample = &greedy};
    cr_assert_eq(arm.cpu->step_begin(arm.b, s, &args, &err), MEMRA_E_RANGE, "%s", err.msg);
    cr_assert(strstr(err.msg, "logit 0 is nan") != NULL, "message: %s", err.msg);
    cr_assert_eq(arm.cpu->state_position(arm.b, s), 1, "a failed step committed its position");
    ct_digests(&arm, s, after);
    cr_assert(memcmp(before, after, sizeof before) == 0, "a failed step changed the state");
    args.sample = NULL;
    cr_assert_eq(arm.cpu->step_begin(arm.b, s, &args, &err), MEMRA_E_QUARANTINED);
    cr_assert_eq(arm.cpu->state_restore(arm.b, other, s, &err), MEMRA_E_QUARANTINED);
    cr_assert_eq(arm.cpu->state_restore(arm.b, s, other, &err), MEMRA_E_QUARANTINED);
    arm.cpu->state_free(arm.b, s), arm.cpu->state_free(arm.b, other);
    ct_arm_close(&arm);
    ct_model_free(&cm);
}

Test(cpu_backend, token_from_device_and_inflight_window) {
    ct_model cm;
    ct_model_build("tiny", MEMRA_TYPE_F16, &cm);
    const memra_model *m = cm.model;
    ct_arm arm;
    ct_arm_open(m, "", &arm);
    memra_error err = {0};
    memra_sample_cfg cfg = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 42};
    /* Serial, explicit tokens. */
    memra_state *a = ct_state_new(&arm, 16, 1);
    float *la = malloc(6 * m->n_vocab * sizeof(float)), *lb = malloc(6 * m->n_vocab * sizeof(float));
    int64_t ta[6], token = 3;
    for (int i = 0; i < 6; i++)
        token = ta[i] = ct_step(&arm, a, token, &cfg, la + (size_t)i * m->n_vocab);
    /* A window of 3, tokens carried on the device. */
    memra_state *b = ct_state_new(&arm, 16, 3);
    memra_step_args first = {.struct_size = sizeof first, .token = 3, .sample = &cfg, .want_logits = true};
    memra_step_args next = {
        .struct_size = sizeof next, .token = MEMRA_TOKEN_FROM_DEVICE, .sample = &cfg, .want_logits = true};
    cr_assert_eq(arm.cpu->step_begin(arm.b, b, &first, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(arm.cpu->step_begin(arm.b, b, &next, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(arm.cpu->step_begin(arm.b, b, &next, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(arm.cpu->step_begin(arm.b, b, &next, &err), MEMRA_E_INVALID, "a 4th step in a window of 3");
    for (int i = 0; i < 6; i++) {
        memra_step_result res = {.struct_size = sizeof res};
        cr_assert_eq(arm.cpu->step_end(arm.b, b, lb + (size_t)i * m->n_vocab, &res, &err), MEMRA_OK, "%s", err.msg);
        cr_assert_eq(res.token, ta[i], "step %d: token %lld, serial %lld", i, (long long)res.token, (long long)ta[i]);
        cr_assert_eq(res.position, (uint32_t)i + 1);
        if (i + 3 < 6)
            cr_assert_eq(arm.cpu->step_begin(arm.b, b, &next, &err), MEMRA_OK, "%s", err.msg);
    }
    cr_assert_eq(arm.cpu->step_end(arm.b, b, NULL, NULL, &err), MEMRA_E_INVALID, "step_end with nothing in flight");
    cr_assert(memcmp(la, lb, 6 * m->n_vocab * sizeof(float)) == 0, "windowed logits differ from serial");
    /* A step that did not sample leaves no token to carry. */
    ct_step(&arm, b, 4, NULL, NULL);
    cr_assert_eq(arm.cpu->step_begin(arm.b, b, &next, &err), MEMRA_E_INVALID);
    free(la), free(lb);
    arm.cpu->state_free(arm.b, a), arm.cpu->state_free(arm.b, b);
    ct_arm_close(&arm);
    ct_model_free(&cm);
}

Test(cpu_backend, options_and_refusals) {
    ct_model cm;
    ct_model_build("tiny", MEMRA_TYPE_F32, &cm);
    ct_arm arm;
    memra_error err = {0};
    /* tp=2 loads the collective the arm names: an unknown one is a clear error naming it. */
    cr_assert_eq(ct_arm_try_open(cm.model, "tp=2,collective=nosuch", &arm, &err), MEMRA_E_PLUGIN, "%s", err.msg);
    cr_assert(strncmp(err.msg, "cpu: tensor parallelism (tp=2) needs the collective 'nosuch' (collective=): ", 76) == 0,
              "%s", err.msg);
    cr_assert_eq(ct_arm_try_open(cm.model, "threads=0", &arm, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "threads=0") != NULL, "%s", err.msg);
    cr_assert_eq(ct_arm_try_open(cm.model, "stages=2,devices=0,8", &arm, &err), MEMRA_E_INVALID);
    cr_assert_eq(ct_arm_try_open(cm.model, "stages=2,devices=0,9,vdevices=10", &arm, &err), MEMRA_OK, "%s", err.msg);
    ct_arm_close(&arm);
    /* resolve_options fills the defaults. */
    const memra_plugin *cpu = NULL;
    cr_assert_eq(memra_registry_load(ct_registry(), "cpu", MEMRA_PLUGIN_BACKEND, &cpu, &err), MEMRA_OK);
    memra_options given = {0}, resolved;
    cr_assert_eq(cpu->backend->resolve_options(memra_registry_host(ct_registry()), &given, &resolved, &err), MEMRA_OK);
    cr_assert_eq(resolved.n, 5);
    cr_assert_str_eq(resolved.items[0].key, "threads");
    cr_assert(atoi(resolved.items[0].value) >= 1);
    cr_assert_str_eq(resolved.items[1].value, "8");
    cr_assert_str_eq(resolved.items[2].value, "32768");
    cr_assert_str_eq(resolved.items[3].key, "kv");
    cr_assert_str_eq(resolved.items[3].value, "f32");
    cr_assert_str_eq(resolved.items[4].key, "collective");
    cr_assert_str_eq(resolved.items[4].value, "local");
    ct_model_free(&cm);
}

/* The loop rule of the gate: the last 64 tokens periodic with some period <= 16. */
static int loop_period(const uint32_t *t, uint32_t n) {
    for (int p = 1; p <= 16; p++) {
        bool periodic = true;
        for (uint32_t i = n - 64; i + p < n && periodic; i++)
            periodic = t[i] == t[i + p];
        if (periodic)
            return p;
    }
    return 0;
}

Test(cpu_backend, greedy_tiny_does_not_loop) {
    ct_model cm;
    ct_model_build("tiny", MEMRA_TYPE_F32, &cm);
    ct_arm arm;
    ct_arm_open(cm.model, "", &arm);
    memra_state *s = ct_state_new(&arm, 256, 1);
    memra_sample_cfg greedy = {.temperature = 0};
    uint32_t tokens[256];
    int64_t token = cm.model->bos_id >= 0 ? cm.model->bos_id : 1;
    for (int i = 0; i < 256; i++)
        tokens[i] = (uint32_t)(token = ct_step(&arm, s, token, &greedy, NULL));
    int period = loop_period(tokens, 256);
    cr_assert_eq(period, 0, "greedy decoding of tiny loops with period %d within 256 tokens", period);
    arm.cpu->state_free(arm.b, s);
    ct_arm_close(&arm);
    ct_model_free(&cm);
}

/* Through the arm layer, as memra run and the gate open arms: keys checked, plan made, options
 * resolved, and the same bits as the helper's direct path to the plugin. */
Test(cpu_backend, opens_through_the_arm_layer) {
    ct_model cm;
    ct_model_build("tiny", MEMRA_TYPE_Q8_0, &cm);
    memra_error err = {0};
    memra_arm *arm = NULL;
    cr_assert_eq(memra_arm_open(ct_registry(), cm.model, "cpu:splits=1,threads=2", NULL, NULL, 0, &arm, &err), MEMRA_OK,
                 "%s", err.msg);
    const memra_options *res = memra_arm_resolved(arm);
    cr_assert_str_eq(memra_options_get(res, "threads"), "2");
    cr_assert_str_eq(memra_options_get(res, "vdevices"), "8");
    cr_assert_str_eq(memra_options_get(res, "collective"), "local");
    cr_assert_str_eq(memra_options_get(res, "stages"), "2");
    cr_assert_str_eq(memra_options_get(res, "window"), "1");
    cr_assert_eq(memra_arm_plan(arm)->stages[1].layer_begin, 1);
    run_record a, b;
    record_run(cm.model, "", RUN_STEPS, &a);
    memra_arm_state *s = NULL;
    cr_assert_eq(memra_arm_state_new(arm, RUN_STEPS, &s, &err), MEMRA_OK, "%s", err.msg);
    b.logits = malloc((size_t)RUN_STEPS * cm.model->n_vocab * sizeof(float));
    memra_sample_cfg greedy = {.temperature = 0};
    int64_t token = 1;
    for (uint32_t i = 0; i < RUN_STEPS; i++) {
        memra_step_args args = {.struct_size = sizeof args, .token = token, .sample = &greedy, .want_logits = true};
        cr_assert_eq(memra_arm_step_begin(s, &args, &err), MEMRA_OK, "%s", err.msg);
        memra_step_result r = {.struct_size = sizeof r};
        cr_assert_eq(memra_arm_step_end(s, b.logits + (size_t)i * cm.model->n_vocab, &r, &err), MEMRA_OK, "%s",
                     err.msg);
        token = r.token;
    }
    cr_assert_eq(memra_arm_digests(s, b.digests[0], b.digests[1], b.digests[2], &err), MEMRA_OK, "%s", err.msg);
    assert_same_run(cm.model, &a, &b, "direct vs memra_arm_open(cpu:splits=1,threads=2)");
    memra_arm_state_free(s);
    memra_arm_close(arm);
    memra_arm *refused = NULL;
    cr_assert_eq(memra_arm_open(ct_registry(), cm.model, "cpu:tp=2,collective=nosuch", NULL, NULL, 0, &refused, &err),
                 MEMRA_E_PLUGIN);
    cr_assert(strstr(err.msg, "tensor parallelism (tp=2) needs the collective 'nosuch'"), "%s", err.msg);
    cr_assert_eq(memra_arm_open(ct_registry(), cm.model, "cpu:threds=2", NULL, NULL, 0, &refused, &err),
                 MEMRA_E_INVALID);
    cr_assert_null(refused);
    free(a.logits), free(b.logits);
    ct_model_free(&cm);
}
