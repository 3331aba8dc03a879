/* test_arm.c: the arm layer (memra/arm.h). Each check the layer makes before the vtable call is
 * tested on the test backend "lax" (lax_plugin.c), which accepts what the layer refuses, with a
 * negative control calling lax's vtable directly (from the registry) to prove the layer, not the
 * backend, is what refused. Also: quarantine, the window, memra_arm_run, the message prefix, the
 * window key, extension size checks and optional vtable members left NULL ("laxnull"). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/arm.h"
#include "memra/gguf.h"
#include "memra/model.h"
#include "memra/registry.h"
#include "memra/synth.h"

typedef struct lax_calls_v1 { /* lax_plugin.c's "lax.calls" v1 */
    uint32_t struct_size;
    uint64_t (*step_begins)(void);
    uint64_t (*step_chunks)(void);
} lax_calls_v1;

typedef struct fixture {
    void *buffer;
    memra_gguf *gguf;
    memra_model *model;
    memra_registry *reg;
} fixture;

static fixture fx;

static void setup(void) {
    memra_error err = {0};
    memra_synth_spec spec = {.preset = "tiny", .type = MEMRA_TYPE_F32, .seed = 1};
    size_t size = 0;
    cr_assert_eq(memra_synth_build_memory(&spec, &fx.buffer, &size, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_gguf_open_memory(fx.buffer, size, "tiny", &fx.gguf, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_model_describe(fx.gguf, &fx.model, &err), MEMRA_OK, "%s", err.msg);
    const char *dirs[2] = {ARMTEST_PLUGIN_DIR, ARMTEST_BUILD_PLUGIN_DIR};
    cr_assert_eq(memra_registry_open_dirs(dirs, 2, &fx.reg, &err), MEMRA_OK, "%s", err.msg);
}

static void teardown(void) {
    memra_registry_close(fx.reg);
    memra_model_free(fx.model);
    memra_gguf_close(fx.gguf);
    free(fx.buffer);
    memset(&fx, 0, sizeof fx);
}

TestSuite(arm, .init = setup, .fini = teardown, .timeout = 60);

static memra_arm *open_arm(const char *text, const char *label) {
    memra_error err = {0};
    memra_arm *a = NULL;
    cr_assert_eq(memra_arm_open(fx.reg, fx.model, text, label, NULL, 0, &a, &err), MEMRA_OK, "%s: %s", text, err.msg);
    return a;
}

static memra_arm_state *new_state(memra_arm *a, uint32_t capacity) {
    memra_error err = {0};
    memra_arm_state *s = NULL;
    cr_assert_eq(memra_arm_state_new(a, capacity, &s, &err), MEMRA_OK, "%s", err.msg);
    return s;
}

static const memra_sample_cfg greedy = {.temperature = 0, .top_p = 1.0f};

static memra_status try_step(memra_arm_state *s, int64_t token, const memra_sample_cfg *sample, memra_error *err) {
    memra_step_args args = {.struct_size = sizeof args, .token = token, .sample = sample};
    memra_status st = memra_arm_step_begin(s, &args, err);
    if (st != MEMRA_OK)
        return st;
    memra_step_result r = {.struct_size = sizeof r};
    return memra_arm_step_end(s, NULL, &r, err);
}

static void step_ok(memra_arm_state *s, int64_t token, const memra_sample_cfg *sample) {
    memra_error err = {0};
    cr_assert_eq(try_step(s, token, sample, &err), MEMRA_OK, "step (token %lld): %s", (long long)token, err.msg);
}

/* step_begin calls that reached the lax plugin in this process (each test is its own process). */
static uint64_t lax_begins(memra_arm *a) {
    const lax_calls_v1 *c = memra_arm_extension(a, "lax.calls", 1, MEMRA_STRUCT_END(lax_calls_v1, step_begins));
    cr_assert_not_null(c, "lax.calls");
    return c->step_begins();
}

/* ---- The plugin's own vtable, from the registry: the negative controls ------------------- */

typedef struct raw_lax {
    const memra_backend_vtable *lax; /* the lax plugin's own vtable, from the registry */
    memra_backend *b;
    memra_state *s;
} raw_lax;

static void raw_open(const char *opts_text, uint32_t capacity, uint32_t max_inflight, raw_lax *out) {
    memra_error err = {0};
    const memra_plugin *lax = NULL, *placement = NULL;
    cr_assert_eq(memra_registry_load(fx.reg, "lax", MEMRA_PLUGIN_BACKEND, &lax, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_registry_load(fx.reg, "default", MEMRA_PLUGIN_PLACEMENT, &placement, &err), MEMRA_OK, "%s",
                 err.msg);
    char backend[MEMRA_BACKEND_NAME_MAX], text[128];
    memra_options opts;
    snprintf(text, sizeof text, "lax%s%s", *opts_text ? ":" : "", opts_text);
    cr_assert_eq(memra_arm_parse(text, backend, &opts, &err), MEMRA_OK, "%s", err.msg);
    const memra_host *host = memra_registry_host(fx.reg);
    uint32_t n_devices = 0;
    memra_plan plan = {.struct_size = sizeof plan};
    cr_assert_eq(lax->backend->device_count(host, &opts, &n_devices, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(placement->placement->plan(fx.model, &opts, n_devices, &plan, &err), MEMRA_OK, "%s", err.msg);
    out->lax = lax->backend;
    cr_assert_eq(lax->backend->open(host, fx.model, &plan, &opts, &out->b, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(out->lax->state_new(out->b, capacity, max_inflight, &out->s, &err), MEMRA_OK, "%s", err.msg);
}

static memra_status raw_begin(raw_lax *r, int64_t token, const memra_sample_cfg *sample) {
    memra_error err = {0};
    memra_step_args args = {.struct_size = sizeof args, .token = token, .sample = sample};
    return r->lax->step_begin(r->b, r->s, &args, &err);
}

static memra_status raw_end(raw_lax *r) {
    memra_error err = {0};
    memra_step_result res = {.struct_size = sizeof res};
    return r->lax->step_end(r->b, r->s, NULL, &res, &err);
}

static void raw_close(raw_lax *r) {
    r->lax->state_free(r->b, r->s);
    r->lax->close(r->b);
}

static uint64_t raw_begins(raw_lax *r) {
    const lax_calls_v1 *c = r->lax->extension(r->b, "lax.calls", 1);
    return c->step_begins();
}

/* ---- Tokens --------------------------------------------------------------------------------- */

Test(arm, token_out_of_range_refused_by_the_layer) {
    memra_arm *a = open_arm("lax", NULL);
    memra_arm_state *s = new_state(a, 8);
    memra_error err = {0};
    uint32_t V = fx.model->n_vocab;
    uint64_t calls = lax_begins(a);
    cr_assert_eq(try_step(s, V, NULL, &err), MEMRA_E_RANGE);
    cr_assert(strstr(err.msg, "outside the vocabulary") != NULL, "%s", err.msg);
    cr_assert_eq(try_step(s, -5, NULL, &err), MEMRA_E_RANGE);
    cr_assert_eq(lax_begins(a), calls, "a refused token reached the backend");
    cr_assert_not(memra_arm_state_quarantined(s), "a refused token quarantined the state");
    cr_assert_eq(memra_arm_state_position(s), 0);
    step_ok(s, V - 1, NULL); /* the last token of the vocabulary is in range */
    cr_assert_eq(memra_arm_state_position(s), 1);
    memra_arm_state_free(s);
    memra_arm_close(a);

    /* Negative control: lax itself takes both tokens. */
    raw_lax r;
    raw_open("", 8, 1, &r);
    calls = raw_begins(&r);
    cr_assert_eq(raw_begin(&r, V, NULL), MEMRA_OK, "lax refused an out-of-range token itself: the control is void");
    cr_assert_eq(raw_end(&r), MEMRA_OK);
    cr_assert_eq(raw_begin(&r, -5, NULL), MEMRA_OK);
    cr_assert_eq(raw_end(&r), MEMRA_OK);
    cr_assert_eq(raw_begins(&r), calls + 2);
    raw_close(&r);
}

Test(arm, token_from_device_needs_a_sampled_step) {
    memra_arm *a = open_arm("lax", NULL);
    memra_arm_state *s = new_state(a, 16), *t = new_state(a, 16), *u = new_state(a, 16);
    memra_error err = {0};
    cr_assert_eq(try_step(s, MEMRA_TOKEN_FROM_DEVICE, &greedy, &err), MEMRA_E_INVALID, "on a fresh state");
    cr_assert(strstr(err.msg, "sampled no token") != NULL, "%s", err.msg);
    step_ok(s, 3, NULL); /* not sampled: nothing to carry */
    cr_assert_eq(try_step(s, MEMRA_TOKEN_FROM_DEVICE, &greedy, &err), MEMRA_E_INVALID, "after an unsampled step");
    step_ok(s, 4, &greedy);
    step_ok(s, MEMRA_TOKEN_FROM_DEVICE, &greedy);
    cr_assert_not(memra_arm_state_quarantined(s));
    /* A restore carries the source's token, or its lack of one. */
    cr_assert_eq(memra_arm_state_restore(t, s, &err), MEMRA_OK, "%s", err.msg);
    step_ok(t, MEMRA_TOKEN_FROM_DEVICE, &greedy);
    step_ok(s, 5, NULL);
    cr_assert_eq(memra_arm_state_restore(u, s, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(try_step(u, MEMRA_TOKEN_FROM_DEVICE, &greedy, &err), MEMRA_E_INVALID,
                 "restored from a state whose last step did not sample");
    memra_arm_state_free(s), memra_arm_state_free(t), memra_arm_state_free(u);
    memra_arm_close(a);

    /* Negative control: lax takes a token from the device on a fresh state. */
    raw_lax r;
    raw_open("", 8, 1, &r);
    cr_assert_eq(raw_begin(&r, MEMRA_TOKEN_FROM_DEVICE, &greedy), MEMRA_OK);
    cr_assert_eq(raw_end(&r), MEMRA_OK);
    raw_close(&r);
}

/* ---- Capacity and window -------------------------------------------------------------------- */

Test(arm, capacity_refusal_does_not_quarantine) {
    memra_arm *a = open_arm("lax", NULL);
    memra_arm_state *s = new_state(a, 2), *copy = new_state(a, 4);
    memra_error err = {0};
    step_ok(s, 1, NULL);
    step_ok(s, 2, &greedy);
    uint64_t calls = lax_begins(a);
    cr_assert_eq(try_step(s, 3, NULL, &err), MEMRA_E_RANGE);
    cr_assert(strstr(err.msg, "capacity of 2") != NULL, "%s", err.msg);
    cr_assert_eq(lax_begins(a), calls, "a step past capacity reached the backend");
    cr_assert_not(memra_arm_state_quarantined(s), "a clean refusal at capacity quarantined the state");
    cr_assert_eq(memra_arm_state_position(s), 2);
    cr_assert_eq(memra_arm_state_restore(copy, s, &err), MEMRA_OK, "%s", err.msg);
    step_ok(copy, MEMRA_TOKEN_FROM_DEVICE, &greedy);
    /* A restore into a state too small for the source's position: a range error. */
    memra_arm_state *tiny = new_state(a, 1);
    cr_assert_eq(memra_arm_state_restore(tiny, copy, &err), MEMRA_E_RANGE);
    memra_arm_state_free(tiny), memra_arm_state_free(copy), memra_arm_state_free(s);
    memra_arm_close(a);

    /* Negative control: lax's state takes a third step at capacity 2. */
    raw_lax r;
    raw_open("", 2, 1, &r);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(raw_begin(&r, 1 + i, NULL), MEMRA_OK, "lax refused step %d itself", i);
        cr_assert_eq(raw_end(&r), MEMRA_OK);
    }
    raw_close(&r);
}

Test(arm, window_enforced) {
    memra_error err = {0};
    memra_step_args args = {.struct_size = sizeof args, .token = 1, .sample = &greedy};
    memra_step_result res = {.struct_size = sizeof res};
    /* The default window is 1: a second step begun before the first ended is refused. */
    memra_arm *a = open_arm("lax", NULL);
    cr_assert_eq(memra_arm_window(a), 1);
    memra_arm_state *s = new_state(a, 16);
    cr_assert_eq(memra_arm_step_begin(s, &args, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_arm_step_begin(s, &args, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "window=1") != NULL, "%s", err.msg);
    cr_assert_not(memra_arm_state_quarantined(s));
    cr_assert_eq(memra_arm_step_end(s, NULL, &res, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_arm_step_end(s, NULL, &res, &err), MEMRA_E_INVALID, "an end with nothing in flight");
    memra_arm_state_free(s);
    memra_arm_close(a);

    a = open_arm("lax:window=3", NULL);
    cr_assert_eq(memra_arm_window(a), 3);
    s = new_state(a, 16);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(memra_arm_step_begin(s, &args, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_arm_state_in_flight(s), 3);
    cr_assert_eq(memra_arm_step_begin(s, &args, &err), MEMRA_E_INVALID, "a 4th step in a window of 3");
    cr_assert_eq(memra_arm_step_end(s, NULL, &res, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(res.position, 1);
    cr_assert_eq(memra_arm_step_begin(s, &args, &err), MEMRA_OK, "%s", err.msg);
    /* A digest needs no step in flight; freeing ends what is in flight. */
    uint8_t d[32];
    cr_assert_eq(memra_arm_digest(s, MEMRA_DIGEST_CACHE, d, &err), MEMRA_E_INVALID);
    memra_arm_state_free(s);
    memra_arm_close(a);

    /* Negative control: lax's state (window 1 asked) takes two steps in flight. */
    raw_lax r;
    raw_open("", 16, 1, &r);
    cr_assert_eq(raw_begin(&r, 1, NULL), MEMRA_OK);
    cr_assert_eq(raw_begin(&r, 2, NULL), MEMRA_OK, "lax refused a second step in flight itself");
    cr_assert_eq(raw_end(&r), MEMRA_OK);
    cr_assert_eq(raw_end(&r), MEMRA_OK);
    raw_close(&r);
}

/* ---- Quarantine ----------------------------------------------------------------------------- */

Test(arm, failed_step_quarantines_step_and_restore) {
    memra_arm *a = open_arm("lax:fail_step=2", "a");
    memra_arm_state *s = new_state(a, 16), *other = new_state(a, 16);
    memra_error err = {0};
    step_ok(s, 1, NULL);
    step_ok(s, 2, &greedy);
    step_ok(other, 1, NULL);
    cr_assert_eq(try_step(s, 3, NULL, &err), MEMRA_E_DEVICE);
    cr_assert(strstr(err.msg, "injected failure at position 2") != NULL, "%s", err.msg);
    cr_assert(memra_arm_state_quarantined(s));
    cr_assert_eq(memra_arm_state_position(s), 2, "the failed step committed");
    cr_assert_eq(try_step(s, 3, NULL, &err), MEMRA_E_QUARANTINED);
    cr_assert(strstr(err.msg, "unfinished transaction") != NULL, "%s", err.msg);
    cr_assert(strncmp(err.msg, "arm a (lax:fail_step=2): ", 25) == 0, "%s", err.msg);
    cr_assert_eq(memra_arm_state_restore(other, s, &err), MEMRA_E_QUARANTINED, "restore from a quarantined state");
    cr_assert_eq(memra_arm_state_restore(s, other, &err), MEMRA_E_QUARANTINED, "restore into a quarantined state");
    cr_assert(strstr(err.msg, "restore into a quarantined state") != NULL, "%s", err.msg);
    cr_assert_not(memra_arm_state_quarantined(other));
    step_ok(other, 2, NULL);
    memra_arm_state_free(s), memra_arm_state_free(other);
    memra_arm_close(a);

    /* Negative control: lax does not quarantine; a step after its failure runs. */
    raw_lax r;
    raw_open("fail_step=1", 16, 1, &r);
    cr_assert_eq(raw_begin(&r, 1, NULL), MEMRA_OK);
    cr_assert_eq(raw_end(&r), MEMRA_OK);
    cr_assert_eq(raw_begin(&r, 1, NULL), MEMRA_E_DEVICE);
    cr_assert_eq(r.lax->state_position(r.b, r.s), 1);
    memra_error e2 = {0};
    memra_state *t = NULL;
    cr_assert_eq(r.lax->state_new(r.b, 4, 1, &t, &e2), MEMRA_OK);
    cr_assert_eq(r.lax->state_restore(r.b, t, r.s, &e2), MEMRA_OK, "lax refused a restore itself: %s", e2.msg);
    r.lax->state_free(r.b, t);
    raw_close(&r);
}

Test(arm, sampled_token_outside_the_vocabulary_quarantines) {
    memra_arm *a = open_arm("lax:bad_sample=1", NULL);
    memra_arm_state *s = new_state(a, 16);
    memra_error err = {0};
    step_ok(s, 1, &greedy);
    cr_assert_eq(try_step(s, 2, &greedy, &err), MEMRA_E_INTERNAL);
    cr_assert(strstr(err.msg, "outside the vocabulary") != NULL, "%s", err.msg);
    cr_assert(memra_arm_state_quarantined(s));
    cr_assert_eq(try_step(s, 2, NULL, &err), MEMRA_E_QUARANTINED);
    memra_arm_state_free(s);
    memra_arm_close(a);
    /* Unsampled, the same step is fine: only a sampled token is checked. */
    a = open_arm("lax:bad_sample=1", NULL);
    s = new_state(a, 16);
    step_ok(s, 1, NULL);
    step_ok(s, 2, NULL);
    memra_arm_state_free(s);
    memra_arm_close(a);
}

/* ---- memra_arm_run -------------------------------------------------------------------------- */

typedef struct run_log {
    uint32_t n, steps[32];
    bool drained[32];
    int64_t tokens[32];
    uint32_t fail_at; /* the callback fails at this step */
} run_log;

static memra_status log_step(void *user, uint32_t step, const float *logits, const memra_step_result *res, bool drained,
                             memra_error *err) {
    (void)logits;
    run_log *l = user;
    if (step == l->fail_at)
        return memra_fail(err, MEMRA_E_IO, "the callback could not write step %u", step);
    l->steps[l->n] = step;
    l->drained[l->n] = drained;
    l->tokens[l->n] = res->token;
    l->n++;
    return MEMRA_OK;
}

Test(arm, run_windowed_same_tokens_and_drained_flags) {
    int64_t inputs[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    run_log serial = {.fail_at = UINT32_MAX}, windowed = {.fail_at = UINT32_MAX};
    memra_error err = {0};
    memra_arm *a = open_arm("lax", NULL), *b = open_arm("lax:window=3", NULL);
    memra_arm_state *sa = new_state(a, 8), *sb = new_state(b, 8);
    cr_assert_eq(memra_arm_run(sa, inputs, 0, 6, &greedy, NULL, log_step, &serial, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_arm_run(sb, inputs, 0, 6, &greedy, NULL, log_step, &windowed, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(serial.n, 6);
    cr_assert_eq(windowed.n, 6);
    for (uint32_t i = 0; i < 6; i++) {
        cr_assert_eq(serial.steps[i], i);
        cr_assert_eq(windowed.steps[i], i);
        cr_assert_eq(serial.tokens[i], windowed.tokens[i], "step %u", i);
        cr_assert(serial.drained[i], "serial step %u not drained", i);
        cr_assert_eq(windowed.drained[i], i == 5, "windowed step %u drained=%d", i, windowed.drained[i]);
    }
    /* Continue from the device: inputs NULL. */
    run_log more = {.fail_at = UINT32_MAX};
    cr_assert_eq(memra_arm_run(sb, NULL, 6, 2, &greedy, NULL, log_step, &more, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(more.n, 2);
    cr_assert_eq(more.steps[0], 6);
    cr_assert_eq(memra_arm_state_position(sb), 8);
    memra_arm_state_free(sa), memra_arm_state_free(sb);
    memra_arm_close(a), memra_arm_close(b);
}

Test(arm, run_ends_in_flight_steps_on_failure_and_names_the_step) {
    int64_t inputs[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    memra_error err = {0};
    /* A failing begin at step 5, three steps in flight behind it. */
    memra_arm *a = open_arm("lax:window=4,fail_step=5", "b");
    memra_arm_state *s = new_state(a, 16);
    run_log log = {.fail_at = UINT32_MAX};
    cr_assert_eq(memra_arm_run(s, inputs, 0, 10, &greedy, NULL, log_step, &log, &err), MEMRA_E_DEVICE);
    cr_assert(strncmp(err.msg, "arm b (lax:window=4,fail_step=5): step 5 begin: ", 48) == 0, "%s", err.msg);
    cr_assert_eq(memra_arm_state_in_flight(s), 0, "the failed run left steps in flight");
    cr_assert(memra_arm_state_quarantined(s));
    memra_arm_state_free(s);
    memra_arm_close(a);

    /* A failing callback at step 3: named, drained, and the state is not quarantined. */
    a = open_arm("lax:window=4", NULL);
    s = new_state(a, 16);
    log = (run_log){.fail_at = 3};
    cr_assert_eq(memra_arm_run(s, inputs, 0, 10, &greedy, NULL, log_step, &log, &err), MEMRA_E_IO);
    cr_assert(strstr(err.msg, "step 3") != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, "could not write step 3") != NULL, "%s", err.msg);
    cr_assert_eq(memra_arm_state_in_flight(s), 0);
    cr_assert_not(memra_arm_state_quarantined(s));
    uint8_t d[3][32];
    cr_assert_eq(memra_arm_digests(s, d[0], d[1], d[2], &err), MEMRA_OK, "%s", err.msg);
    /* A refused token mid-run: the layer's own check, named, drained. */
    memra_arm_state *t = new_state(a, 16);
    int64_t bad[4] = {1, 2, 999999, 4};
    log = (run_log){.fail_at = UINT32_MAX};
    cr_assert_eq(memra_arm_run(t, bad, 0, 4, &greedy, NULL, log_step, &log, &err), MEMRA_E_RANGE);
    cr_assert(strstr(err.msg, "step 2 begin") != NULL, "%s", err.msg);
    cr_assert_eq(memra_arm_state_in_flight(t), 0);
    memra_arm_state_free(t), memra_arm_state_free(s);
    memra_arm_close(a);
}

/* ---- Messages, keys ------------------------------------------------------------------------- */

Test(arm, message_prefix_with_and_without_label) {
    memra_error err = {0};
    memra_arm *a = open_arm("lax:window=2", "a");
    cr_assert_str_eq(memra_arm_label(a), "a");
    memra_arm_state *s = new_state(a, 4);
    cr_assert_eq(try_step(s, -3, NULL, &err), MEMRA_E_RANGE);
    cr_assert(strncmp(err.msg, "arm a (lax:window=2): token -3", 30) == 0, "%s", err.msg);
    memra_arm_state_free(s);
    memra_arm_close(a);

    a = open_arm("lax:window=2", NULL);
    cr_assert_str_eq(memra_arm_label(a), "");
    s = new_state(a, 4);
    cr_assert_eq(try_step(s, -3, NULL, &err), MEMRA_E_RANGE);
    cr_assert(strncmp(err.msg, "arm 'lax:window=2': token -3", 28) == 0, "%s", err.msg);
    memra_arm_state_free(s);
    memra_arm_close(a);

    /* Opening: the arm is named once, whoever wrote the message. */
    memra_arm *refused = NULL;
    cr_assert_eq(memra_arm_open(fx.reg, fx.model, "cpu:threds=2", "b", NULL, 0, &refused, &err), MEMRA_E_INVALID);
    cr_assert(strncmp(err.msg, "arm b (cpu:threds=2): unknown key 'threds'", 42) == 0, "%s", err.msg);
    cr_assert_null(strstr(err.msg, "arm 'cpu"), "named twice: %s", err.msg);
    cr_assert_eq(memra_arm_open(fx.reg, fx.model, "cpu:threds=2", NULL, NULL, 0, &refused, &err), MEMRA_E_INVALID);
    cr_assert(strncmp(err.msg, "arm 'cpu:threds=2': unknown key 'threds'", 40) == 0, "%s", err.msg);
    cr_assert_eq(memra_arm_open(fx.reg, fx.model, "nosuchbackend", "a", NULL, 0, &refused, &err), MEMRA_E_PLUGIN);
    cr_assert(strncmp(err.msg, "arm a (nosuchbackend): ", 23) == 0, "%s", err.msg);
    cr_assert_eq(memra_arm_open(fx.reg, fx.model, "cpu:tp=2,collective=nosuch", "a", NULL, 0, &refused, &err),
                 MEMRA_E_PLUGIN);
    cr_assert(strncmp(err.msg, "arm a (cpu:tp=2,collective=nosuch): cpu: tensor parallelism", 59) == 0, "%s", err.msg);
    cr_assert_null(refused);
}

Test(arm, window_key_resolved_and_listed) {
    memra_error err = {0};
    memra_arm *a = open_arm("lax", NULL);
    cr_assert_str_eq(memra_options_get(memra_arm_resolved(a), "window"), "1");
    cr_assert_str_eq(memra_options_get(memra_arm_resolved(a), "placement"), "default");
    const memra_option_spec *keys[96];
    uint32_t n = memra_arm_known_keys(a, keys, 96);
    bool window = false, placement = false, fail_step = false, stages = false;
    for (uint32_t i = 0; i < n && i < 96; i++) {
        window |= strcmp(keys[i]->key, "window") == 0 && strcmp(keys[i]->default_value, "1") == 0;
        placement |= strcmp(keys[i]->key, "placement") == 0;
        fail_step |= strcmp(keys[i]->key, "fail_step") == 0;
        stages |= strcmp(keys[i]->key, "stages") == 0;
    }
    cr_assert(window && placement && fail_step && stages, "window %d placement %d fail_step %d stages %d", window,
              placement, fail_step, stages);
    memra_arm_close(a);
    bool core_window = false;
    for (uint32_t i = 0; i < memra_core_arm_key_count; i++)
        core_window |= strcmp(memra_core_arm_keys[i].key, MEMRA_ARM_KEY_WINDOW) == 0;
    cr_assert(core_window, "window is not a core arm key");

    a = open_arm("cpu:window=64", NULL);
    cr_assert_str_eq(memra_options_get(memra_arm_resolved(a), "window"), "64");
    cr_assert_eq(memra_arm_window(a), MEMRA_ARM_MAX_WINDOW);
    memra_arm_close(a);
    memra_arm *refused = NULL;
    cr_assert_eq(memra_arm_open(fx.reg, fx.model, "cpu:window=0", NULL, NULL, 0, &refused, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "window=0") != NULL, "%s", err.msg);
    cr_assert_eq(memra_arm_open(fx.reg, fx.model, "cpu:window=65", NULL, NULL, 0, &refused, &err), MEMRA_E_INVALID);
    cr_assert_null(refused);
}

/* ---- Extensions and optional members -------------------------------------------------------- */

Test(arm, extension_size_checked) {
    memra_error err = {0};
    memra_arm *a = open_arm("lax", NULL);
    memra_arm_state *s = new_state(a, 4);
    step_ok(s, 1, NULL);
    cr_assert_not_null(memra_arm_extension(a, MEMRA_EXT_CENSUS, 1, MEMRA_STRUCT_END(memra_ext_census_v1, census)));
    memra_census_row rows[4];
    uint32_t n = 0;
    cr_assert_eq(memra_arm_census(s, rows, 4, &n, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(n, 1);
    cr_assert_eq(rows[0].count, 1);
    cr_assert_null(memra_arm_extension(a, MEMRA_EXT_CENSUS, 2, 4), "a version not offered");
    cr_assert_null(memra_arm_extension(a, "memra.nothing", 1, 4));
    /* census is there, dump_graphs NULL: a clear refusal, not a call through NULL. */
    cr_assert_eq(memra_arm_dump_graphs(s, "/nonexistent", &err), MEMRA_E_UNSUPPORTED);
    memra_arm_state_free(s);
    memra_arm_close(a);

    a = open_arm("lax:ext_small=1", NULL);
    s = new_state(a, 4);
    cr_assert_null(memra_arm_extension(a, MEMRA_EXT_CENSUS, 1, MEMRA_STRUCT_END(memra_ext_census_v1, census)),
                   "a table of 4 bytes passed the size check");
    cr_assert_eq(memra_arm_census(s, rows, 4, &n, &err), MEMRA_E_UNSUPPORTED);
    cr_assert(strstr(err.msg, "census") != NULL, "%s", err.msg);
    memra_arm_state_free(s);
    memra_arm_close(a);

    /* Negative control: lax does hand out the small table. */
    raw_lax r;
    raw_open("ext_small=1", 4, 1, &r);
    const memra_ext_census_v1 *t = r.lax->extension(r.b, MEMRA_EXT_CENSUS, 1);
    cr_assert_not_null(t);
    cr_assert_eq(t->struct_size, 4);
    raw_close(&r);
}

Test(arm, optional_members_null) {
    memra_error err = {0};
    memra_arm *a = open_arm("laxnull:fail_step=100", NULL);
    memra_arm_state *s = new_state(a, 4);
    step_ok(s, 1, NULL);
    memra_state_stats stats = memra_arm_state_stats(s);
    cr_assert_eq(stats.steps, 0);
    cr_assert_eq(stats.struct_size, sizeof stats);
    memra_backend_memory mem;
    bool have = true;
    cr_assert_eq(memra_arm_memory(a, &mem, &have, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_not(have);
    cr_assert_null(memra_arm_extension(a, MEMRA_EXT_CENSUS, 1, 4));
    cr_assert_eq(memra_arm_device_name(a, (char[32]){0}, 32, &err), MEMRA_E_UNSUPPORTED);
    double bps = 0;
    char how[64];
    cr_assert_eq(memra_arm_measure_ceiling(a, &bps, how, sizeof how, &err), MEMRA_E_UNSUPPORTED);
    /* No resolve_options: the given keys and the specs' defaults. */
    cr_assert_str_eq(memra_options_get(memra_arm_resolved(a), "fail_step"), "100");
    cr_assert_str_eq(memra_options_get(memra_arm_resolved(a), "ext_small"), "0");
    memra_arm_state_free(s);
    memra_arm_close(a);

    /* The same through lax, which has them: the counters are the backend's. */
    a = open_arm("lax", NULL);
    s = new_state(a, 4);
    step_ok(s, 1, NULL);
    stats = memra_arm_state_stats(s);
    cr_assert_eq(stats.steps, 1);
    cr_assert_eq(memra_arm_memory(a, &mem, &have, &err), MEMRA_OK, "%s", err.msg);
    cr_assert(have);
    cr_assert_gt(mem.cache_bytes, 0);
    memra_arm_state_free(s);
    memra_arm_close(a);
}

/* collective= values (memra/options.h): the plugin's name, and the items after ':' as the
 * collective's own options; each malformed shape refused with MEMRA_E_INVALID. */
Test(arm, collective_values_parse_into_a_name_and_options) {
    char name[16];
    memra_options o = {0};
    memra_error err = {0};
    cr_assert_eq(memra_collective_value_parse("oneshot", name, sizeof name, &o, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_str_eq(name, "oneshot");
    cr_assert_eq(o.n, 0);
    cr_assert_eq(memra_collective_value_parse("nccl:allgather", name, sizeof name, &o, &err), MEMRA_OK);
    cr_assert_str_eq(name, "nccl");
    cr_assert_str_eq(memra_options_get(&o, "mode"), "allgather");
    memra_options o2 = {0};
    cr_assert_eq(memra_collective_value_parse("oneshot:timeout_ms=5,pdl=1,fast", name, sizeof name, &o2, &err),
                 MEMRA_OK);
    cr_assert_eq(o2.n, 3);
    cr_assert_str_eq(memra_options_get(&o2, "timeout_ms"), "5");
    cr_assert_str_eq(memra_options_get(&o2, "pdl"), "1");
    cr_assert_str_eq(memra_options_get(&o2, "mode"), "fast");
    static const char *const bad[] = {"",        ":mode",   "nccl:",   "nccl:a,,b",
                                      "nccl:=1", "nccl:k=", "nccl:a,", "averyveryverylongname"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memra_options ob = {0};
        cr_assert_eq(memra_collective_value_parse(bad[i], name, sizeof name, &ob, &err), MEMRA_E_INVALID, "'%s'",
                     bad[i]);
    }
}

/* The longest arm text memra_options can hold (MEMRA_OPT_MAX items of the longest key and value)
 * fits in MEMRA_ARM_TEXT_MAX, whole, and parses back to the same options; a buffer of the size the
 * gate used before (4096: a text past it was cut short, silently, in the records and in the
 * comparison of the two arms' configurations) is told so. */
Test(arm, the_longest_arm_text_fits_whole_and_a_short_buffer_is_told) {
    memra_options o = {0};
    memra_error err = {0};
    char backend[MEMRA_BACKEND_NAME_MAX];
    memset(backend, 'b', sizeof backend - 1);
    backend[sizeof backend - 1] = 0;
    for (uint32_t i = 0; i < MEMRA_OPT_MAX; i++) {
        char key[MEMRA_OPT_KEY_MAX], value[MEMRA_OPT_VALUE_MAX];
        memset(key, 'k', sizeof key - 1);
        snprintf(key, sizeof key, "%02u", i);
        key[2] = 'k'; /* "00kkk...": distinct keys of the longest length */
        key[sizeof key - 1] = 0;
        memset(value, 'v', sizeof value - 1);
        value[sizeof value - 1] = 0;
        cr_assert_eq(memra_options_set(&o, key, value, &err), MEMRA_OK, "%s", err.msg);
    }
    static char text[MEMRA_ARM_TEXT_MAX], cut[4096];
    cr_assert(memra_arm_format(backend, &o, text, sizeof text));
    cr_assert_eq(strlen(text), (size_t)MEMRA_ARM_TEXT_MAX - 1, "%zu", strlen(text));
    char back[MEMRA_BACKEND_NAME_MAX];
    memra_options o2;
    cr_assert_eq(memra_arm_parse(text, back, &o2, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_str_eq(back, backend);
    cr_assert_eq(o2.n, o.n);
    for (uint32_t i = 0; i < o.n; i++) {
        cr_assert_str_eq(o2.items[i].key, o.items[i].key);
        cr_assert_str_eq(o2.items[i].value, o.items[i].value);
    }
    cr_assert_not(memra_arm_format(backend, &o, cut, sizeof cut), "a cut text reported whole");
    cr_assert_eq(strlen(cut), sizeof cut - 1);
    cr_assert(memra_arm_format("cpu", NULL, cut, 4), "'cpu' fits in 4 bytes");
    cr_assert_not(memra_arm_format("cpu", NULL, cut, 3));
    cr_assert_not(memra_arm_format("cpu", NULL, cut, 0));
}

/* ---- Prefill (issue 28): step_chunk, the core's fallback, the prefill key ------------------ */

#define PF_STEPS 40u

/* What a pass leaves at each step it reports: the digests and the logits' hash. */
typedef struct pf_trace {
    bool seen[PF_STEPS];
    uint8_t cache[PF_STEPS][32], hidden[PF_STEPS][32], logits[PF_STEPS][32];
    float last_logits[64]; /* the first logits of the last report */
    memra_arm_state *s;
} pf_trace;

static memra_status pf_record(void *user, uint32_t step, const float *logits, const memra_step_result *res,
                              bool drained, memra_error *err) {
    pf_trace *t = user;
    cr_assert(drained);
    cr_assert_eq(res->token, -1);
    cr_assert_eq(res->position, step + 1);
    t->seen[step] = true;
    memcpy(t->last_logits, logits, sizeof t->last_logits);
    return memra_arm_digests(t->s, t->logits[step], t->cache[step], t->hidden[step], err);
}

static int64_t pf_token(uint32_t i) { return (int64_t)((i * 37u + 11u) % fx.model->n_vocab); }

/* Runs PF_STEPS prompt tokens through arm `text` with memra_arm_prefill_run into *t. */
static void pf_run(const char *text, pf_trace *t) {
    memset(t, 0, sizeof *t);
    memra_arm *a = open_arm(text, NULL);
    t->s = new_state(a, PF_STEPS + 1);
    int64_t in[PF_STEPS];
    for (uint32_t i = 0; i < PF_STEPS; i++)
        in[i] = pf_token(i);
    float *logits = malloc(fx.model->n_vocab * sizeof *logits);
    memra_error err = {0};
    cr_assert_eq(memra_arm_prefill_run(t->s, in, 0, PF_STEPS, logits, pf_record, t, &err), MEMRA_OK, "%s: %s", text,
                 err.msg);
    cr_assert_eq(memra_arm_state_position(t->s), PF_STEPS);
    /* no carried token after a prefill: the next step takes an explicit one */
    step_ok(t->s, pf_token(PF_STEPS), &greedy);
    free(logits);
    memra_arm_state_free(t->s);
    memra_arm_close(a);
}

/* The first step where chunked `got` differs from single-step `ref` (digests or logits), or -1;
 * every step `got` reports must be a step `ref` reports. */
static int pf_first_diff(const pf_trace *ref, const pf_trace *got) {
    for (uint32_t i = 0; i < PF_STEPS; i++) {
        if (!got->seen[i])
            continue;
        cr_assert(ref->seen[i]);
        if (memcmp(ref->cache[i], got->cache[i], 32) || memcmp(ref->hidden[i], got->hidden[i], 32) ||
            memcmp(ref->logits[i], got->logits[i], 32))
            return (int)i;
    }
    return -1;
}

static int pf_boundaries(const pf_trace *t) {
    int n = 0;
    for (uint32_t i = 0; i < PF_STEPS; i++)
        n += t->seen[i];
    return n;
}

/* Chunks of 7 (odd, ends mid-anything), 64 (the whole prompt in one) and 16 give the digests and
 * logits of single steps at every chunk boundary, on one stage, two stages and two ranks. */
Test(arm, prefill_chunks_are_single_steps_bit_for_bit) {
    static const char *const pairs[][2] = {
        {"cpu:prefill=1", "cpu:prefill=7"},
        {"cpu:prefill=1", "cpu:prefill=64"},
        {"cpu:prefill=1", "cpu:prefill=16,threads=1"},
        {"cpu:prefill=1", "cpu:stages=2,prefill=7"},
        {"cpu:tp=2,prefill=1", "cpu:tp=2,prefill=7"},
        {"cpu:tp=2,prefill=1", "cpu:tp=2,stages=2,prefill=64"},
    };
    static pf_trace ref, got;
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        pf_run(pairs[k][0], &ref);
        cr_assert_eq(pf_boundaries(&ref), (int)PF_STEPS, "prefill=1 reports every step");
        pf_run(pairs[k][1], &got);
        int want = strstr(pairs[k][1], "=64") ? 1 : strstr(pairs[k][1], "=16") ? 3 : 6;
        cr_assert_eq(pf_boundaries(&got), want, "%s", pairs[k][1]);
        cr_assert_eq(pf_first_diff(&ref, &got), -1, "%s against %s", pairs[k][1], pairs[k][0]);
    }
}

/* The negative control: lax runs the chunk holding position 10 with another token there; the
 * comparison must name that chunk's boundary (positions 7..13 with prefill=7: step 13) and no
 * earlier one. lax without the fault passes (the control is the fault, not lax). */
Test(arm, prefill_wrong_chunk_is_caught_at_its_boundary) {
    static pf_trace ref, got;
    pf_run("cpu:prefill=1", &ref);
    pf_run("lax:prefill=7", &got);
    cr_assert_eq(pf_first_diff(&ref, &got), -1);
    pf_run("lax:prefill=7,bad_chunk=10", &got);
    cr_assert_eq(pf_first_diff(&ref, &got), 13);
}

/* A backend built before step_chunk (laxold declares ABI 1's first vtable size, with traps past
 * it) and one that leaves it NULL (laxnull): the core runs each chunk as single steps, never reads
 * past the declared size, and the bits are those of prefill=1. */
Test(arm, prefill_falls_back_to_single_steps_without_step_chunk) {
    static pf_trace ref, got;
    pf_run("cpu:prefill=1", &ref);
    memra_arm *a = open_arm("laxold", NULL);
    const lax_calls_v1 *c = memra_arm_extension(a, "lax.calls", 1, MEMRA_STRUCT_END(lax_calls_v1, step_chunks));
    cr_assert_not_null(c);
    cr_assert_eq(memra_arm_prefill(a), 1, "auto on a backend without prefill_chunk is 1");
    cr_assert_not(memra_arm_prefill_native(a));
    cr_assert_str_eq(memra_options_get(memra_arm_resolved(a), "prefill"), "1");
    memra_arm_close(a);
    uint64_t begins = c->step_begins(), chunks = c->step_chunks();
    pf_run("laxold:prefill=64", &got);
    cr_assert_eq(pf_boundaries(&got), (int)PF_STEPS, "single steps: every one reported");
    cr_assert_eq(pf_first_diff(&ref, &got), -1);
    cr_assert_eq(c->step_begins() - begins, PF_STEPS + 1, "the chunk ran as single steps (and one step after)");
    cr_assert_eq(c->step_chunks(), chunks, "nothing past laxold's declared vtable size was called");
    cr_assert_eq(c->step_chunks(), 0);
    pf_run("laxnull:prefill=7", &got);
    cr_assert_eq(pf_boundaries(&got), (int)PF_STEPS);
    cr_assert_eq(pf_first_diff(&ref, &got), -1);
}

/* The prefill key: auto is the backend's (cpu 64, lax 16), resolved into the record; bad values
 * are usage errors naming the key. */
Test(arm, prefill_key) {
    memra_arm *a = open_arm("cpu", NULL);
    cr_assert_eq(memra_arm_prefill(a), 64);
    cr_assert(memra_arm_prefill_native(a));
    cr_assert_str_eq(memra_options_get(memra_arm_resolved(a), "prefill"), "64");
    memra_arm_close(a);
    a = open_arm("lax", NULL);
    cr_assert_eq(memra_arm_prefill(a), 16);
    memra_arm_close(a);
    a = open_arm("cpu:prefill=7", NULL);
    cr_assert_str_eq(memra_options_get(memra_arm_resolved(a), "prefill"), "7");
    memra_arm_close(a);
    static const char *const bad[] = {"cpu:prefill=0", "cpu:prefill=abc", "cpu:prefill=4097", "cpu:prefill=-1"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        memra_error err = {0};
        memra_arm *x = NULL;
        cr_assert_eq(memra_arm_open(fx.reg, fx.model, bad[k], NULL, NULL, 0, &x, &err), MEMRA_E_INVALID, "%s", bad[k]);
        cr_assert(strstr(err.msg, "prefill"), "%s: %s", bad[k], err.msg);
    }
}

/* A chunk is a transaction: past the capacity it is refused before the backend runs, and a
 * chunk's token outside the vocabulary is refused by the layer, nothing committed. */
Test(arm, prefill_checks) {
    memra_arm *a = open_arm("lax:prefill=8", NULL);
    memra_arm_state *s = new_state(a, 10);
    int64_t in[12];
    for (uint32_t i = 0; i < 12; i++)
        in[i] = pf_token(i);
    memra_error err = {0};
    cr_assert_eq(memra_arm_prefill_run(s, in, 0, 12, NULL, NULL, NULL, &err), MEMRA_E_RANGE, "%s", err.msg);
    cr_assert_eq(memra_arm_state_position(s), 8, "the first chunk committed, the second refused");
    cr_assert(strstr(err.msg, "capacity"), "%s", err.msg);
    memra_arm_state_free(s);
    s = new_state(a, 20);
    in[3] = (int64_t)fx.model->n_vocab + 5; /* lax would take it modulo n_vocab */
    cr_assert_eq(memra_arm_prefill_run(s, in, 0, 8, NULL, NULL, NULL, &err), MEMRA_E_RANGE);
    cr_assert(strstr(err.msg, "vocabulary"), "%s", err.msg);
    cr_assert_eq(memra_arm_state_position(s), 0);
    memra_arm_state_free(s);
    memra_arm_close(a);
}

/* ---- issue 27: streamed models ----------------------------------------------------------- */

#include <unistd.h>

#include "memra/runtime.h"

/* A tiny F32 model written to a private file; its path in buf. */
static void tiny_file(char *buf, size_t n) {
    char dir[] = "/tmp/memra-armstream-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    snprintf(buf, n, "%s/tiny.gguf", dir);
    memra_synth_spec spec = {.preset = "tiny", .type = MEMRA_TYPE_F32, .seed = 1};
    memra_error err = {0};
    cr_assert_eq(memra_synth_write_file(&spec, buf, &err), MEMRA_OK, "%s", err.msg);
}

static void tiny_file_remove(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    unlink(path);
    *strrchr(dir, '/') = '\0';
    rmdir(dir);
}

/* The cpu backend reads its weights through their data pointers: it does not stream, nor does a
 * backend built before the member existed (laxold); an arm of it on a streamed model is refused
 * naming the reason, and opens on the same file read whole (the control). */
Test(arm, streamed_model_refuses_a_backend_that_does_not_stream) {
    memra_error err = {0};
    bool streams = true;
    cr_assert_eq(memra_arm_streams_weights(fx.reg, "cpu:threads=2", &streams, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_not(streams);
    streams = true;
    cr_assert_eq(memra_arm_streams_weights(fx.reg, "laxold", &streams, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_not(streams, "a backend built before streams_weights reads data pointers");
    streams = true;
    cr_assert_eq(memra_arm_streams_weights(fx.reg, "nosuchbackend", &streams, &err), MEMRA_OK);
    cr_assert_not(streams);

    char path[4096];
    tiny_file(path, sizeof path);
    memra_loaded_model *lm = NULL;
    cr_assert_eq(memra_model_load_mode(path, NULL, 0, 1, MEMRA_LOAD_STREAMED, &lm, &err), MEMRA_OK, "%s", err.msg);
    cr_assert(lm->streamed && lm->model->streamed);
    memra_arm *a = NULL;
    cr_assert_eq(memra_arm_open(fx.reg, lm->model, "cpu", NULL, NULL, 0, &a, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "opened streamed"), "%s", err.msg);
    memra_model_unload(lm);

    cr_assert_eq(memra_model_load_mode(path, NULL, 0, 1, MEMRA_LOAD_WHOLE, &lm, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_not(lm->model->streamed);
    cr_assert_eq(memra_arm_open(fx.reg, lm->model, "cpu", NULL, NULL, 0, &a, &err), MEMRA_OK, "%s", err.msg);
    memra_arm_close(a);
    memra_model_unload(lm);
    tiny_file_remove(path);
}

/* The cpu arm keeps its guarantee: the file read whole, a rewrite or truncation of it on disk
 * during the run changes no logit (the same steps before and after agree bit for bit). */
Test(arm, cpu_arm_unchanged_by_the_file_changing) {
    char path[4096];
    tiny_file(path, sizeof path);
    memra_error err = {0};
    memra_loaded_model *lm = NULL;
    cr_assert_eq(memra_model_load_mode(path, NULL, 0, 1, MEMRA_LOAD_WHOLE, &lm, &err), MEMRA_OK, "%s", err.msg);
    memra_arm *a = NULL;
    cr_assert_eq(memra_arm_open(fx.reg, lm->model, "cpu:threads=2", NULL, NULL, 0, &a, &err), MEMRA_OK, "%s",
                 err.msg);
    const uint32_t V = lm->model->n_vocab;
    float *l1 = malloc(V * sizeof *l1), *l2 = malloc(V * sizeof *l2);
    cr_assert(l1 && l2);
    for (int pass = 0; pass < 2; pass++) {
        memra_arm_state *s = new_state(a, 8);
        for (int64_t t = 1; t <= 3; t++) {
            memra_step_args args = {.struct_size = sizeof args, .token = t, .want_logits = true};
            cr_assert_eq(memra_arm_step_begin(s, &args, &err), MEMRA_OK, "%s", err.msg);
            memra_step_result r = {.struct_size = sizeof r};
            cr_assert_eq(memra_arm_step_end(s, pass ? l2 : l1, &r, &err), MEMRA_OK, "%s", err.msg);
        }
        memra_arm_state_free(s);
        if (pass == 0) { /* rewrite every byte, then cut the file */
            FILE *f = fopen(path, "r+b");
            cr_assert_not_null(f);
            for (long i = 0; i < 1 << 20; i++)
                fputc(0x7f, f);
            cr_assert_eq(fclose(f), 0);
            cr_assert_eq(truncate(path, 100), 0);
        }
    }
    cr_assert_eq(memcmp(l1, l2, V * sizeof *l1), 0, "the cpu arm's logits changed with the file on disk");
    free(l1);
    free(l2);
    memra_arm_close(a);
    memra_model_unload(lm);
    tiny_file_remove(path);
}
