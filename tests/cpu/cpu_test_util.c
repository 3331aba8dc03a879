/* cpu_test_util.c: see cpu_test_util.h. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"
#include "memra/options.h"
#include "memra/synth.h"

void ct_model_build(const char *preset, uint32_t type, ct_model *out) {
    memra_error err = {0};
    memset(out, 0, sizeof *out);
    memra_synth_spec spec = {.preset = preset, .type = type, .seed = 1};
    memra_status st = memra_synth_build_memory(&spec, &out->buffer, &out->size, &err);
    cr_assert_eq(st, MEMRA_OK, "synth %s: %s", preset, err.msg);
    st = memra_gguf_open_memory(out->buffer, out->size, preset, &out->gguf, &err);
    cr_assert_eq(st, MEMRA_OK, "gguf %s: %s", preset, err.msg);
    st = memra_model_describe(out->gguf, &out->model, &err);
    cr_assert_eq(st, MEMRA_OK, "describe %s: %s", preset, err.msg);
}

void ct_model_free(ct_model *cm) {
    memra_model_free(cm->model);
    memra_gguf_close(cm->gguf);
    free(cm->buffer);
    memset(cm, 0, sizeof *cm);
}

memra_registry *ct_registry(void) {
    static memra_registry *r;
    if (!r) {
        memra_error err = {0};
        memra_status st = memra_registry_open(&r, &err);
        cr_assert_eq(st, MEMRA_OK, "registry: %s", err.msg);
    }
    return r;
}

memra_status ct_arm_try_open(const memra_model *m, const char *opts_text, ct_arm *out, memra_error *err) {
    memset(out, 0, sizeof *out);
    char text[512];
    snprintf(text, sizeof text, "cpu%s%s", opts_text && *opts_text ? ":" : "", opts_text ? opts_text : "");
    char backend[MEMRA_BACKEND_NAME_MAX];
    memra_options opts;
    memra_status st = memra_arm_parse(text, backend, &opts, err);
    if (st != MEMRA_OK)
        return st;
    const memra_plugin *cpu = NULL, *placement = NULL;
    memra_registry *r = ct_registry();
    if ((st = memra_registry_load(r, "cpu", MEMRA_PLUGIN_BACKEND, &cpu, err)) != MEMRA_OK ||
        (st = memra_registry_load(r, "default", MEMRA_PLUGIN_PLACEMENT, &placement, err)) != MEMRA_OK)
        return st;
    const memra_host *host = memra_registry_host(r);
    uint32_t n_devices = 0;
    if ((st = cpu->backend->device_count(host, &opts, &n_devices, err)) != MEMRA_OK)
        return st;
    if ((st = placement->placement->plan(m, &opts, n_devices, &out->plan, err)) != MEMRA_OK)
        return st;
    out->cpu = cpu->backend;
    return cpu->backend->open(host, m, &out->plan, &opts, &out->b, err);
}

void ct_arm_open(const memra_model *m, const char *opts_text, ct_arm *out) {
    memra_error err = {0};
    memra_status st = ct_arm_try_open(m, opts_text, out, &err);
    cr_assert_eq(st, MEMRA_OK, "open cpu:%s: %s", opts_text, err.msg);
}

void ct_arm_close(ct_arm *a) {
    if (a->b)
        a->cpu->close(a->b);
    a->b = NULL;
}

memra_state *ct_state_new(ct_arm *a, uint32_t capacity, uint32_t max_inflight) {
    memra_error err = {0};
    memra_state *s = NULL;
    memra_status st = a->cpu->state_new(a->b, capacity, max_inflight, &s, &err);
    cr_assert_eq(st, MEMRA_OK, "state_new: %s", err.msg);
    return s;
}

int64_t ct_step(ct_arm *a, memra_state *s, int64_t token, const memra_sample_cfg *sample, float *logits) {
    memra_error err = {0};
    memra_step_args args = {
        .struct_size = sizeof args, .token = token, .sample = sample, .want_logits = logits != NULL};
    memra_status st = a->cpu->step_begin(a->b, s, &args, &err);
    cr_assert_eq(st, MEMRA_OK, "step_begin (token %lld): %s", (long long)token, err.msg);
    memra_step_result res = {.struct_size = sizeof res};
    st = a->cpu->step_end(a->b, s, logits, &res, &err);
    cr_assert_eq(st, MEMRA_OK, "step_end: %s", err.msg);
    return res.token;
}

uint32_t ct_argmax(const float *x, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

void ct_digests(ct_arm *a, memra_state *s, uint8_t out[3][32]) {
    static const memra_digest_kind kinds[3] = {MEMRA_DIGEST_LOGITS, MEMRA_DIGEST_CACHE, MEMRA_DIGEST_HIDDEN};
    for (int i = 0; i < 3; i++) {
        memra_error err = {0};
        memra_status st = a->cpu->digest(a->b, s, kinds[i], out[i], &err);
        cr_assert_eq(st, MEMRA_OK, "digest %d: %s", i, err.msg);
    }
}
