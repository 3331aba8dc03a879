/* runtime.c: loading a model (file or in-memory preset) and opening an arm on it: parse the arm,
 * load backend and placement plugins, check every key, plan, open. The one path that memra run,
 * memra bench and memra-gate share, so an arm means the same thing everywhere. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/arm.h"
#include "memra/digest.h"
#include "memra/runtime.h"
#include "memra/synth.h"

const memra_option_spec memra_core_arm_keys[] = {
    {MEMRA_ARM_KEY_PLACEMENT, "default", "placement plugin that plans stages, devices and ranks"},
};
const uint32_t memra_core_arm_key_count = sizeof memra_core_arm_keys / sizeof memra_core_arm_keys[0];

memra_status memra_model_load(const char *path, const char *preset, uint32_t type, uint64_t seed,
                              memra_loaded_model **out, memra_error *err) {
    if (!out)
        return memra_fail(err, MEMRA_E_INVALID, "memra_model_load: out is NULL");
    *out = NULL;
    memra_loaded_model *lm = calloc(1, sizeof *lm);
    if (!lm)
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory loading a model");
    memra_status st;
    if (path) {
        snprintf(lm->path, sizeof lm->path, "%s", path);
        snprintf(lm->label, sizeof lm->label, "%s", path);
        st = memra_gguf_open(path, &lm->gguf, err);
    } else {
        memra_synth_spec spec = {.preset = preset ? preset : "tiny", .type = type, .seed = seed};
        size_t size = 0;
        st = memra_synth_build_memory(&spec, &lm->buffer, &size, err);
        if (st == MEMRA_OK) {
            snprintf(lm->label, sizeof lm->label, "preset %s (%s, seed %llu, built in memory)", spec.preset,
                     memra_tensor_type_name(type), (unsigned long long)seed);
            st = memra_gguf_open_memory(lm->buffer, size, lm->label, &lm->gguf, err);
        }
    }
    if (st == MEMRA_OK)
        st = memra_model_describe(lm->gguf, &lm->model, err);
    if (st != MEMRA_OK) {
        memra_model_unload(lm);
        return st;
    }
    *out = lm;
    return MEMRA_OK;
}

void memra_model_unload(memra_loaded_model *lm) {
    if (!lm)
        return;
    memra_model_free(lm->model);
    memra_gguf_close(lm->gguf);
    free(lm->buffer);
    free(lm);
}

memra_status memra_model_digest(const memra_loaded_model *lm, uint8_t out[32], memra_error *err) {
    /* The bytes in use (the mapping), not the path: a file replaced since it was opened must not
     * lend its digest to the run. */
    memra_sha256(memra_gguf_file_data(lm->gguf), (size_t)memra_gguf_file_size(lm->gguf), out);
    return MEMRA_OK;
}

#define ARM_TEXT_MAX 512
#define ARM_KEYS_MAX 96

struct memra_arm {
    char text[ARM_TEXT_MAX];
    char backend_name[MEMRA_BACKEND_NAME_MAX];
    memra_options opts;
    memra_options resolved;
    const memra_plugin *plugin;
    const memra_plugin *placement;
    memra_backend *backend;
    memra_plan plan;
    memra_option_spec keys[ARM_KEYS_MAX];
    uint32_t n_keys;
};

static void add_keys(memra_arm *a, const memra_option_spec *specs, uint32_t n) {
    for (uint32_t i = 0; i < n && a->n_keys < ARM_KEYS_MAX; i++) {
        uint32_t k = 0;
        while (k < a->n_keys && strcmp(a->keys[k].key, specs[i].key) != 0)
            k++;
        if (k == a->n_keys)
            a->keys[a->n_keys++] = specs[i];
    }
}

/* Writes stages, splits, devices and tp as the plan has them, for keys the arm knows. */
static memra_status plan_keys(memra_arm *a, memra_error *err) {
    const memra_plan *p = &a->plan;
    char stages[16], splits[MEMRA_OPT_VALUE_MAX] = "", devices[MEMRA_OPT_VALUE_MAX] = "", tp[16];
    snprintf(stages, sizeof stages, "%u", p->n_stages);
    snprintf(tp, sizeof tp, "%u", p->n_stages ? p->stages[0].n_ranks : 1);
    size_t su = 0, du = 0;
    for (uint32_t i = 0; i < p->n_stages; i++) {
        if (i > 0 && su < sizeof splits)
            su += (size_t)snprintf(splits + su, sizeof splits - su, "%s%u", su ? "," : "", p->stages[i].layer_begin);
        if (du < sizeof devices)
            du += (size_t)snprintf(devices + du, sizeof devices - du, "%s%d", i ? "," : "", p->stages[i].device);
    }
    const char *keys[4] = {"stages", "splits", "devices", "tp"};
    const char *vals[4] = {stages, splits[0] ? splits : "none", devices, tp};
    for (int k = 0; k < 4; k++) {
        if (!memra_options_get(&a->resolved, keys[k]))
            continue; /* not a key of this arm's placement */
        memra_status st = memra_options_set(&a->resolved, keys[k], vals[k], err);
        if (st != MEMRA_OK)
            return st;
    }
    return MEMRA_OK;
}

/* Given values win; every other known key gets its spec's default. */
static memra_status resolve(memra_arm *a, const memra_host *host, memra_error *err) {
    const memra_backend_vtable *vt = a->plugin->backend;
    memra_options from_backend = {0};
    int have_backend = 0;
    if (vt->resolve_options) {
        memra_status st = vt->resolve_options(host, &a->opts, &from_backend, err);
        if (st != MEMRA_OK)
            return st;
        have_backend = 1;
    }
    a->resolved = (memra_options){0};
    for (uint32_t k = 0; k < a->n_keys; k++) {
        const char *key = a->keys[k].key;
        const char *v = have_backend ? memra_options_get(&from_backend, key) : NULL;
        if (!v)
            v = memra_options_get(&a->opts, key);
        if (!v)
            v = a->keys[k].default_value ? a->keys[k].default_value : "";
        memra_status st = memra_options_set(&a->resolved, key, v, err);
        if (st != MEMRA_OK)
            return st;
    }
    /* The plan is the truth for the placement's keys: "splits=3" alone means two stages. */
    memra_status st = plan_keys(a, err);
    if (st != MEMRA_OK)
        return st;
    for (uint32_t i = 0; have_backend && i < from_backend.n; i++) /* keys only the backend knows */
        if (!memra_options_get(&a->resolved, from_backend.items[i].key)) {
            memra_status st =
                memra_options_set(&a->resolved, from_backend.items[i].key, from_backend.items[i].value, err);
            if (st != MEMRA_OK)
                return st;
        }
    return MEMRA_OK;
}

memra_status memra_arm_open(memra_registry *r, const memra_model *m, const char *arm_text,
                            const memra_option_spec *caller_keys, uint32_t n_caller_keys, memra_arm **out,
                            memra_error *err) {
    if (!r || !m || !arm_text || !out)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_open: the registry, model, arm text or out is NULL");
    *out = NULL;
    if (strlen(arm_text) >= ARM_TEXT_MAX)
        return memra_fail(err, MEMRA_E_INVALID, "arm '%.40s...' is longer than %d characters", arm_text,
                          ARM_TEXT_MAX - 1);
    memra_arm *a = calloc(1, sizeof *a);
    if (!a)
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory opening arm '%s'", arm_text);
    snprintf(a->text, sizeof a->text, "%s", arm_text);
    const memra_host *host = memra_registry_host(r);

    memra_status st = memra_arm_parse(arm_text, a->backend_name, &a->opts, err);
    if (st != MEMRA_OK)
        goto err_free;
    st = memra_registry_load(r, a->backend_name, MEMRA_PLUGIN_BACKEND, &a->plugin, err);
    if (st != MEMRA_OK)
        goto err_free;
    const char *placement_name = memra_options_get(&a->opts, MEMRA_ARM_KEY_PLACEMENT);
    st = memra_registry_load(r, placement_name ? placement_name : "default", MEMRA_PLUGIN_PLACEMENT, &a->placement,
                             err);
    if (st != MEMRA_OK)
        goto err_free;

    const memra_backend_vtable *vt = a->plugin->backend;
    const memra_placement_vtable *pv = a->placement->placement;
    add_keys(a, pv->options, pv->n_options);
    add_keys(a, vt->options, vt->n_options);
    add_keys(a, memra_core_arm_keys, memra_core_arm_key_count);
    add_keys(a, caller_keys, n_caller_keys);
    const memra_option_spec *lists[1] = {a->keys};
    uint32_t counts[1] = {a->n_keys};
    st = memra_options_check(&a->opts, lists, counts, 1, arm_text, err);
    if (st != MEMRA_OK)
        goto err_free;

    uint32_t n_devices = 0;
    st = vt->device_count(host, &a->opts, &n_devices, err);
    if (st != MEMRA_OK)
        goto err_prefix;
    a->plan.struct_size = sizeof a->plan;
    st = pv->plan(m, &a->opts, n_devices, &a->plan, err);
    if (st != MEMRA_OK)
        goto err_prefix;
    st = resolve(a, host, err);
    if (st != MEMRA_OK)
        goto err_prefix;
    st = vt->open(host, m, &a->plan, &a->opts, &a->backend, err);
    if (st != MEMRA_OK)
        goto err_prefix;
    *out = a;
    return MEMRA_OK;

err_prefix:
    memra_error_prefix(err, "arm '%s'", arm_text);
err_free:
    free(a);
    return st;
}

void memra_arm_close(memra_arm *a) {
    if (!a)
        return;
    if (a->backend)
        a->plugin->backend->close(a->backend);
    free(a);
}

const char *memra_arm_text(const memra_arm *a) { return a->text; }
const char *memra_arm_backend_name(const memra_arm *a) { return a->backend_name; }
const memra_plugin *memra_arm_plugin(const memra_arm *a) { return a->plugin; }
const memra_backend_vtable *memra_arm_vtable(const memra_arm *a) { return a->plugin->backend; }
memra_backend *memra_arm_backend(const memra_arm *a) { return a->backend; }
const memra_plan *memra_arm_plan(const memra_arm *a) { return &a->plan; }
const memra_options *memra_arm_options(const memra_arm *a) { return &a->opts; }
const memra_options *memra_arm_resolved(const memra_arm *a) { return &a->resolved; }

uint32_t memra_arm_known_keys(const memra_arm *a, const memra_option_spec **out, uint32_t max) {
    uint32_t n = a->n_keys < max ? a->n_keys : max;
    for (uint32_t i = 0; i < n; i++)
        out[i] = &a->keys[i];
    return a->n_keys;
}
