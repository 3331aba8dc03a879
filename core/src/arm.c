/* arm.c: the arm layer (memra/arm.h). Every caller reaches a backend through here: opening an arm
 * (parse, plugins, key check, plan, open, resolve), its states, a windowed step, digests,
 * restore, counters, memory and extensions. The checks every backend would otherwise repeat are
 * made here once, before the vtable call, and every message leaving the layer is prefixed here,
 * in one place (arm_prefix), with the arm's name. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/arm.h"
#include "memra/op.h"

const memra_option_spec memra_core_arm_keys[] = {
    {MEMRA_ARM_KEY_PLACEMENT, "default", "placement plugin that plans stages, devices and ranks"},
    {MEMRA_ARM_KEY_WINDOW, "1",
     "steps kept in flight (1 = serial; at most 64): a pipelined arm begins up to "
     "this many steps before it ends the oldest"},
    {MEMRA_ARM_KEY_PREFILL, "auto",
     "prompt positions per step when priming (1 = token by token; auto = the backend's best chunk, cpu 64; at "
     "most 4096): every value gives the bits of 1"},
};
const uint32_t memra_core_arm_key_count = sizeof memra_core_arm_keys / sizeof memra_core_arm_keys[0];

#define ARM_TEXT_MAX 512
#define ARM_LABEL_MAX 64
#define ARM_KEYS_MAX 96
#define ARM_WHY_MAX 512

struct memra_arm {
    char text[ARM_TEXT_MAX];
    char label[ARM_LABEL_MAX];
    char prefix[ARM_TEXT_MAX + ARM_LABEL_MAX + 16]; /* "arm a (TEXT)" or "arm 'TEXT'" */
    char backend_name[MEMRA_BACKEND_NAME_MAX];
    const memra_model *model;
    memra_options opts;
    memra_options resolved;
    const memra_plugin *plugin;
    const memra_plugin *placement;
    const memra_backend_vtable *vt;
    memra_backend *backend;
    memra_plan plan;
    memra_option_spec keys[ARM_KEYS_MAX];
    uint32_t n_keys;
    uint32_t window;
    uint32_t prefill; /* the resolved `prefill` key: positions per step_chunk call */
};

struct memra_arm_state {
    memra_arm *arm;
    memra_state *st;
    uint32_t capacity;
    uint32_t next_pos;                  /* the position the next step begins at */
    uint32_t in_flight;                 /* steps begun and not ended */
    uint32_t head;                      /* ring index of the oldest step in flight */
    bool sampled[MEMRA_ARM_MAX_WINDOW]; /* per step in flight: whether it samples */
    bool carry;                         /* the last step begun sampled (or the restored source's did) */
    bool quarantined;
    char why[ARM_WHY_MAX]; /* what quarantined it */
};

/* ------------------------------------------------------------------------------------------ */
/* Messages                                                                                    */

/* Removes a leading "PREFIX: " from msg when present, so a message that already names the arm
 * (memra_arm_parse and memra_options_check say "arm 'TEXT': ...", a callback may pass on a
 * message of this layer) is named once. */
static void strip_leading(char *msg, const char *prefix) {
    size_t n = strlen(prefix);
    if (strncmp(msg, prefix, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
        memmove(msg, msg + n + 2, strlen(msg + n + 2) + 1);
}

/* The one place a message of the layer gets the arm's name: "arm a (TEXT): [where: ]message".
 * `where` may be NULL. Returns st. */
static memra_status arm_prefix(const memra_arm *a, memra_status st, memra_error *err, const char *where) {
    if (!err)
        return st;
    char plain[ARM_TEXT_MAX + 8];
    snprintf(plain, sizeof plain, "arm '%s'", a->text);
    strip_leading(err->msg, a->prefix);
    strip_leading(err->msg, plain);
    if (where)
        memra_error_prefix(err, "%s: %s", a->prefix, where);
    else
        memra_error_prefix(err, "%s", a->prefix);
    err->status = st;
    return st;
}

/* Fails with a message of the layer itself, prefixed. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static memra_status
arm_fail(const memra_arm *a, memra_error *err, memra_status status, const char *fmt, ...) {
    if (!err)
        return status;
    char msg[MEMRA_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memra_fail(err, status, "%s", msg);
    return arm_prefix(a, status, err, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* Opening                                                                                     */

static void add_keys(memra_arm *a, const memra_option_spec *specs, uint32_t n) {
    for (uint32_t i = 0; specs && i < n && a->n_keys < ARM_KEYS_MAX; i++) {
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

/* Given values win; every other known key gets its spec's default; the backend's
 * resolve_options, when it has one, says what it will use. An op.KIND key not given is left out:
 * its default is the built-in op (a backend offers one such key per op kind and weight type, more
 * than an options list holds beside the others), and the record lists only the op plugins used. */
static memra_status resolve(memra_arm *a, const memra_host *host, memra_error *err) {
    const memra_backend_vtable *vt = a->vt;
    memra_options from_backend = {0};
    bool have_backend = false;
    if (MEMRA_HAS_MEMBER(vt, memra_backend_vtable, resolve_options) && vt->resolve_options) {
        memra_status st = vt->resolve_options(host, &a->opts, &from_backend, err);
        if (st != MEMRA_OK)
            return st;
        have_backend = true;
    }
    a->resolved = (memra_options){0};
    for (uint32_t k = 0; k < a->n_keys; k++) {
        const char *key = a->keys[k].key;
        if (strncmp(key, MEMRA_OP_KEY_PREFIX, strlen(MEMRA_OP_KEY_PREFIX)) == 0 && !memra_options_get(&a->opts, key))
            continue;
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
    /* The window and the prefill chunk in force, as the layer reads them. */
    char window[16];
    snprintf(window, sizeof window, "%u", a->window);
    if ((st = memra_options_set(&a->resolved, MEMRA_ARM_KEY_WINDOW, window, err)) != MEMRA_OK)
        return st;
    snprintf(window, sizeof window, "%u", a->prefill);
    if ((st = memra_options_set(&a->resolved, MEMRA_ARM_KEY_PREFILL, window, err)) != MEMRA_OK)
        return st;
    for (uint32_t i = 0; have_backend && i < from_backend.n; i++) /* keys only the backend knows */
        if (!memra_options_get(&a->resolved, from_backend.items[i].key)) {
            st = memra_options_set(&a->resolved, from_backend.items[i].key, from_backend.items[i].value, err);
            if (st != MEMRA_OK)
                return st;
        }
    return MEMRA_OK;
}

/* An op.KIND key the backend does not take: an unknown op kind, or one this backend does not let
 * a plugin replace. Said with the op kind, the plugin and the op kinds the backend does take
 * (memra_options_check would only say "unknown key"). */
static memra_status check_op_keys(const memra_arm *a, const char *arm_text, memra_error *err) {
    for (uint32_t i = 0; i < a->opts.n; i++) {
        const memra_option *o = &a->opts.items[i];
        if (strncmp(o->key, MEMRA_OP_KEY_PREFIX, strlen(MEMRA_OP_KEY_PREFIX)) != 0)
            continue;
        bool known = false;
        char list[384] = "";
        size_t used = 0;
        for (uint32_t k = 0; k < a->n_keys; k++) {
            if (strncmp(a->keys[k].key, MEMRA_OP_KEY_PREFIX, strlen(MEMRA_OP_KEY_PREFIX)) != 0)
                continue;
            known = known || strcmp(a->keys[k].key, o->key) == 0;
            if (used < sizeof list)
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "",
                                         a->keys[k].key + strlen(MEMRA_OP_KEY_PREFIX));
        }
        if (known)
            continue;
        const char *op_kind = o->key + strlen(MEMRA_OP_KEY_PREFIX);
        return memra_fail(err, MEMRA_E_INVALID, "arm '%s': %s=%.60s: %s op kind '%s'; the %s backend takes: %s",
                          arm_text, o->key, o->value,
                          memra_op_key_parse(o->key, NULL, NULL) ? "unsupported" : "unknown", op_kind, a->backend_name,
                          list[0] ? list : "no op plugins");
    }
    return MEMRA_OK;
}

/* The `prefill` key: a count, or "auto" (or absent) for the backend's best chunk (1 when the
 * backend does not say). */
static memra_status read_prefill(memra_arm *a, const memra_host *host, memra_error *err) {
    const char *v = memra_options_get(&a->opts, MEMRA_ARM_KEY_PREFILL);
    if (v && strcmp(v, "auto") != 0)
        return memra_options_u32(&a->opts, MEMRA_ARM_KEY_PREFILL, 1, 1, MEMRA_ARM_MAX_PREFILL, &a->prefill, err);
    uint32_t best = 1;
    if (MEMRA_HAS_MEMBER(a->vt, memra_backend_vtable, prefill_chunk) && a->vt->prefill_chunk)
        best = a->vt->prefill_chunk(host, &a->opts);
    a->prefill = best < 1 ? 1 : best > MEMRA_ARM_MAX_PREFILL ? MEMRA_ARM_MAX_PREFILL : best;
    return MEMRA_OK;
}

static bool backend_streams(const memra_backend_vtable *vt, const memra_host *host, const memra_options *opts) {
    return MEMRA_HAS_MEMBER(vt, memra_backend_vtable, streams_weights) && vt->streams_weights &&
           vt->streams_weights(host, opts);
}

memra_status memra_arm_streams_weights(memra_registry *r, const char *arm_text, bool *streams, memra_error *err) {
    if (!streams || !r || !arm_text)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_streams_weights: NULL argument");
    *streams = false;
    char backend[MEMRA_BACKEND_NAME_MAX];
    memra_options opts;
    const memra_plugin *p = NULL;
    if (memra_arm_parse(arm_text, backend, &opts, NULL) != MEMRA_OK ||
        memra_registry_load(r, backend, MEMRA_PLUGIN_BACKEND, &p, NULL) != MEMRA_OK || !p || !p->backend)
        return MEMRA_OK;
    *streams = backend_streams(p->backend, memra_registry_host(r), &opts);
    return MEMRA_OK;
}

/* What memra_arm_open checks before it asks the backend for devices, none of which needs the model:
 * the arm parses, its plugins load, its keys are known and its window and prefill read. */
static memra_status arm_keys(memra_registry *r, memra_arm *a, const char *arm_text,
                             const memra_option_spec *caller_keys, uint32_t n_caller_keys, memra_error *err) {
    const memra_host *host = memra_registry_host(r);
    memra_status st = memra_arm_parse(arm_text, a->backend_name, &a->opts, err);
    if (st != MEMRA_OK)
        return st;
    st = memra_registry_load(r, a->backend_name, MEMRA_PLUGIN_BACKEND, &a->plugin, err);
    if (st != MEMRA_OK)
        return st;
    const char *placement_name = memra_options_get(&a->opts, MEMRA_ARM_KEY_PLACEMENT);
    st =
        memra_registry_load(r, placement_name ? placement_name : "default", MEMRA_PLUGIN_PLACEMENT, &a->placement, err);
    if (st != MEMRA_OK)
        return st;
    a->vt = a->plugin->backend;
    const memra_placement_vtable *pv = a->placement->placement;
    add_keys(a, pv->options, pv->n_options);
    add_keys(a, a->vt->options, a->vt->n_options);
    add_keys(a, memra_core_arm_keys, memra_core_arm_key_count);
    add_keys(a, caller_keys, n_caller_keys);
    const memra_option_spec *lists[1] = {a->keys};
    uint32_t counts[1] = {a->n_keys};
    st = check_op_keys(a, arm_text, err);
    if (st != MEMRA_OK)
        return st;
    st = memra_options_check(&a->opts, lists, counts, 1, arm_text, err);
    if (st != MEMRA_OK)
        return st;
    st = memra_options_u32(&a->opts, MEMRA_ARM_KEY_WINDOW, 1, 1, MEMRA_ARM_MAX_WINDOW, &a->window, err);
    if (st != MEMRA_OK)
        return st;
    return read_prefill(a, host, err);
}

/* The arm's text, label and the prefix its messages get: "arm LABEL (TEXT)", or "arm 'TEXT'". */
static void arm_name(memra_arm *a, const char *arm_text, const char *label) {
    snprintf(a->text, sizeof a->text, "%s", arm_text);
    snprintf(a->label, sizeof a->label, "%s", label ? label : "");
    if (label)
        snprintf(a->prefix, sizeof a->prefix, "arm %s (%s)", a->label, a->text);
    else
        snprintf(a->prefix, sizeof a->prefix, "arm '%s'", a->text);
}

memra_status memra_arm_precheck(memra_registry *r, const char *arm_text, const char *label, memra_error *err) {
    if (!r || !arm_text)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_precheck: NULL argument");
    if (strlen(arm_text) >= ARM_TEXT_MAX || (label && strlen(label) >= ARM_LABEL_MAX))
        return MEMRA_OK; /* memra_arm_open says what is wrong */
    memra_arm *a = calloc(1, sizeof *a);
    if (!a)
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory checking arm '%s'", arm_text);
    arm_name(a, arm_text, label);
    memra_error e = {0};
    memra_status st = arm_keys(r, a, arm_text, NULL, 0, &e), out = MEMRA_OK;
    if (st == MEMRA_E_INVALID) { /* the arm's text or keys: a usage error, said first */
        out = arm_prefix(a, st, &e, NULL);
    } else if (st == MEMRA_OK) {
        uint32_t n = 0;
        st = a->vt->device_count(memra_registry_host(r), &a->opts, &n, &e);
        if (st == MEMRA_E_DEVICE || st == MEMRA_E_INVALID) /* no device; a value the backend refuses */
            out = arm_prefix(a, st, &e, NULL);
    } /* other failures (a plugin that does not load, a device_count that fails otherwise) are
       * memra_arm_open's to report, with the model */
    if (out != MEMRA_OK && err)
        *err = e;
    free(a);
    return out;
}

memra_status memra_arm_open(memra_registry *r, const memra_model *m, const char *arm_text, const char *label,
                            const memra_option_spec *caller_keys, uint32_t n_caller_keys, memra_arm **out,
                            memra_error *err) {
    if (!out)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_open: out is NULL");
    *out = NULL;
    if (!r || !m || !arm_text)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_open: the registry, model or arm text is NULL");
    if (strlen(arm_text) >= ARM_TEXT_MAX)
        return memra_fail(err, MEMRA_E_INVALID, "arm '%.40s...' is longer than %d characters", arm_text,
                          ARM_TEXT_MAX - 1);
    if (label && strlen(label) >= ARM_LABEL_MAX)
        return memra_fail(err, MEMRA_E_INVALID, "arm '%s': its label '%.40s...' is longer than %d characters", arm_text,
                          label, ARM_LABEL_MAX - 1);
    memra_arm *a = calloc(1, sizeof *a);
    if (!a)
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory opening arm '%s'", arm_text);
    arm_name(a, arm_text, label);
    a->model = m;
    const memra_host *host = memra_registry_host(r);

    memra_status st = arm_keys(r, a, arm_text, caller_keys, n_caller_keys, err);
    if (st != MEMRA_OK)
        goto fail;
    const memra_placement_vtable *pv = a->placement->placement;

    uint32_t n_devices = 0;
    st = a->vt->device_count(host, &a->opts, &n_devices, err);
    if (st != MEMRA_OK)
        goto fail;
    a->plan.struct_size = sizeof a->plan;
    st = pv->plan(m, &a->opts, n_devices, &a->plan, err);
    if (st != MEMRA_OK)
        goto fail;
    st = resolve(a, host, err);
    if (st != MEMRA_OK)
        goto fail;
    if (m->streamed && !backend_streams(a->vt, host, &a->opts)) {
        st = memra_fail(err, MEMRA_E_INVALID,
                        "backend '%s' reads the weights from host memory, but the model was opened streamed "
                        "(its matrices are not in memory): open it whole (an arm list whose every arm streams)",
                        a->backend_name);
        goto fail;
    }
    st = a->vt->open(host, m, &a->plan, &a->opts, &a->backend, err);
    if (st != MEMRA_OK)
        goto fail;
    *out = a;
    return MEMRA_OK;

fail:
    arm_prefix(a, st, err, NULL);
    free(a);
    return st;
}

void memra_arm_close(memra_arm *a) {
    if (!a)
        return;
    if (a->backend)
        a->vt->close(a->backend);
    free(a);
}

const char *memra_arm_text(const memra_arm *a) { return a->text; }
const char *memra_arm_label(const memra_arm *a) { return a->label; }
const char *memra_arm_backend_name(const memra_arm *a) { return a->backend_name; }
const memra_plugin *memra_arm_plugin(const memra_arm *a) { return a->plugin; }
const memra_plugin *memra_arm_placement_plugin(const memra_arm *a) { return a->placement; }
const memra_plan *memra_arm_plan(const memra_arm *a) { return &a->plan; }
const memra_model *memra_arm_model(const memra_arm *a) { return a->model; }
const memra_options *memra_arm_options(const memra_arm *a) { return &a->opts; }
const memra_options *memra_arm_resolved(const memra_arm *a) { return &a->resolved; }
uint32_t memra_arm_window(const memra_arm *a) { return a->window; }
uint32_t memra_arm_prefill(const memra_arm *a) { return a->prefill; }
bool memra_arm_prefill_native(const memra_arm *a) {
    return MEMRA_HAS_MEMBER(a->vt, memra_backend_vtable, step_chunk) && a->vt->step_chunk != NULL;
}

uint32_t memra_arm_known_keys(const memra_arm *a, const memra_option_spec **out, uint32_t max) {
    uint32_t n = a->n_keys < max ? a->n_keys : max;
    for (uint32_t i = 0; out && i < n; i++)
        out[i] = &a->keys[i];
    return a->n_keys;
}

memra_status memra_arm_memory(memra_arm *a, memra_backend_memory *out, bool *have, memra_error *err) {
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    if (have)
        *have = false;
    if (!MEMRA_HAS_MEMBER(a->vt, memra_backend_vtable, memory) || !a->vt->memory)
        return MEMRA_OK;
    memra_backend_memory got = {.struct_size = sizeof got};
    memra_status st = a->vt->memory(a->backend, &got, err);
    if (st != MEMRA_OK)
        return arm_prefix(a, st, err, "memory");
    /* A backend built against an older plugin.h fills only the members it knows; the rest stay 0. */
    *out = got;
    out->struct_size = sizeof *out;
    if (have)
        *have = true;
    return MEMRA_OK;
}

const void *memra_arm_extension(memra_arm *a, const char *name, uint32_t version, size_t min_size) {
    if (!a || !name || !MEMRA_HAS_MEMBER(a->vt, memra_backend_vtable, extension) || !a->vt->extension)
        return NULL;
    const void *table = a->vt->extension(a->backend, name, version);
    if (!table)
        return NULL;
    uint32_t size;
    memcpy(&size, table, sizeof size); /* every extension table starts with its struct_size */
    if (min_size < sizeof size)
        min_size = sizeof size;
    return size >= min_size ? table : NULL;
}

memra_status memra_arm_device_name(memra_arm *a, char *buf, size_t size, memra_error *err) {
    const memra_ext_bench_v1 *ext =
        memra_arm_extension(a, MEMRA_EXT_BENCH, 1, MEMRA_STRUCT_END(memra_ext_bench_v1, device_name));
    if (!ext || !ext->device_name)
        return arm_fail(a, err, MEMRA_E_UNSUPPORTED, "the backend offers no device name (%s v1)", MEMRA_EXT_BENCH);
    memra_status st = ext->device_name(a->backend, buf, size, err);
    return st == MEMRA_OK ? st : arm_prefix(a, st, err, "device name");
}

memra_status memra_arm_measure_ceiling(memra_arm *a, double *bytes_per_s, char *how, size_t how_size,
                                       memra_error *err) {
    const memra_ext_bench_v1 *ext =
        memra_arm_extension(a, MEMRA_EXT_BENCH, 1, MEMRA_STRUCT_END(memra_ext_bench_v1, measure_ceiling));
    if (!ext || !ext->measure_ceiling)
        return arm_fail(a, err, MEMRA_E_UNSUPPORTED, "the backend offers no measured ceiling (%s v1)", MEMRA_EXT_BENCH);
    memra_status st = ext->measure_ceiling(a->backend, bytes_per_s, how, how_size, err);
    return st == MEMRA_OK ? st : arm_prefix(a, st, err, "measuring the ceiling");
}

/* ------------------------------------------------------------------------------------------ */
/* States                                                                                      */

memra_status memra_arm_state_new(memra_arm *a, uint32_t capacity, memra_arm_state **out, memra_error *err) {
    if (!out)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_state_new: out is NULL");
    *out = NULL;
    if (!a)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_state_new: the arm is NULL");
    if (capacity == 0)
        return arm_fail(a, err, MEMRA_E_INVALID, "a state needs a capacity of at least 1 position");
    memra_arm_state *s = calloc(1, sizeof *s);
    if (!s)
        return arm_fail(a, err, MEMRA_E_NOMEM, "out of memory for a state");
    memra_status st = a->vt->state_new(a->backend, capacity, a->window, &s->st, err);
    if (st != MEMRA_OK) {
        free(s);
        char where[96];
        snprintf(where, sizeof where, "a state of %u positions, %u in flight", capacity, a->window);
        return arm_prefix(a, st, err, where);
    }
    s->arm = a;
    s->capacity = capacity;
    s->next_pos = a->vt->state_position(a->backend, s->st);
    *out = s;
    return MEMRA_OK;
}

/* Ends the oldest step in flight through the backend; the layer's bookkeeping only. */
static memra_status end_raw(memra_arm_state *s, float *logits, memra_step_result *res, bool *sampled,
                            memra_error *err) {
    memra_arm *a = s->arm;
    memra_step_result r = {.struct_size = sizeof r, .token = -1};
    memra_status st = a->vt->step_end(a->backend, s->st, logits, &r, err);
    *sampled = s->sampled[s->head];
    s->head = (s->head + 1) % MEMRA_ARM_MAX_WINDOW;
    s->in_flight--;
    if (res) {
        *res = r;
        res->struct_size = sizeof *res;
        if (!*sampled && st == MEMRA_OK)
            res->token = -1;
    }
    return st;
}

void memra_arm_state_free(memra_arm_state *s) {
    if (!s)
        return;
    while (s->in_flight > 0) {
        bool sampled;
        if (end_raw(s, NULL, NULL, &sampled, NULL) != MEMRA_OK)
            break; /* the backend frees what it still holds */
    }
    s->arm->vt->state_free(s->arm->backend, s->st);
    free(s);
}

memra_arm *memra_arm_state_arm(const memra_arm_state *s) { return s->arm; }
uint32_t memra_arm_state_position(const memra_arm_state *s) {
    return s->arm->vt->state_position(s->arm->backend, s->st);
}
uint32_t memra_arm_state_capacity(const memra_arm_state *s) { return s->capacity; }
uint32_t memra_arm_state_in_flight(const memra_arm_state *s) { return s->in_flight; }
bool memra_arm_state_quarantined(const memra_arm_state *s) { return s->quarantined; }

static void quarantine(memra_arm_state *s, const char *what, const memra_error *err) {
    if (s->quarantined)
        return;
    s->quarantined = true;
    snprintf(s->why, sizeof s->why, "%s: %.440s", what, err && err->msg[0] ? err->msg : "failed");
}

/* MEMRA_E_QUARANTINED when the state may not be used (unprefixed: the caller prefixes). */
static memra_status check_usable(const memra_arm_state *s, const char *what, memra_error *err) {
    if (!s->quarantined)
        return MEMRA_OK;
    return memra_fail(err, MEMRA_E_QUARANTINED,
                      "%s a quarantined state: an earlier step failed and left an unfinished transaction (%s); "
                      "free the state and start a new one",
                      what, s->why);
}

/* The checks of step_begin, in the layer's words (the caller adds the arm's name). */
static memra_status begin_raw(memra_arm_state *s, const memra_step_args *args, bool name_position, memra_error *err) {
    memra_arm *a = s->arm;
    if (!MEMRA_HAS_MEMBER(args, memra_step_args, want_logits))
        return memra_fail(err, MEMRA_E_INVALID, "step arguments of %u bytes, expected at least %zu",
                          args ? args->struct_size : 0, MEMRA_STRUCT_END(memra_step_args, want_logits));
    memra_status st = check_usable(s, "step on", err);
    if (st != MEMRA_OK)
        return st;
    if (s->in_flight >= a->window)
        return memra_fail(err, MEMRA_E_INVALID,
                          "%u steps already in flight, the arm's window (window=%u): end one before beginning another",
                          s->in_flight, a->window);
    if ((uint64_t)s->next_pos >= s->capacity)
        return memra_fail(err, MEMRA_E_RANGE, "position %u is past the state's capacity of %u positions", s->next_pos,
                          s->capacity);
    uint32_t n_vocab = a->model->n_vocab;
    if (args->token == MEMRA_TOKEN_FROM_DEVICE) {
        if (!s->carry)
            return memra_fail(err, MEMRA_E_INVALID,
                              "token from the device at position %u, but the state's previous step sampled no "
                              "token (and it was not restored from a state whose last step did)",
                              s->next_pos);
    } else if (args->token < 0 || args->token >= (int64_t)n_vocab) {
        return memra_fail(err, MEMRA_E_RANGE, "token %" PRId64 " at position %u is outside the vocabulary [0, %u)",
                          args->token, s->next_pos, n_vocab);
    }
    memra_step_args copy = {
        .struct_size = sizeof copy, .token = args->token, .sample = args->sample, .want_logits = args->want_logits};
    st = a->vt->step_begin(a->backend, s->st, &copy, err);
    if (st != MEMRA_OK) {
        if (name_position) /* memra_arm_run names the step itself */
            memra_error_prefix(err, "step at position %u", s->next_pos);
        quarantine(s, "a step begin failed", err);
        return st;
    }
    s->sampled[(s->head + s->in_flight) % MEMRA_ARM_MAX_WINDOW] = args->sample != NULL;
    s->in_flight++;
    s->next_pos++;
    s->carry = args->sample != NULL;
    return MEMRA_OK;
}

memra_status memra_arm_step_begin(memra_arm_state *s, const memra_step_args *args, memra_error *err) {
    if (!s)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_step_begin: the state is NULL");
    memra_error local; /* a quarantine keeps its reason even when the caller passes no err */
    if (!err)
        err = &local;
    memra_status st = begin_raw(s, args, true, err);
    return st == MEMRA_OK ? st : arm_prefix(s->arm, st, err, NULL);
}

static memra_status end_checked(memra_arm_state *s, float *logits, memra_step_result *out, memra_error *err) {
    if (s->in_flight == 0)
        return memra_fail(err, MEMRA_E_INVALID, "step end with no step in flight");
    uint32_t at = s->next_pos - s->in_flight; /* the position the oldest step began at */
    memra_step_result res;
    bool sampled;
    memra_status st = end_raw(s, logits, &res, &sampled, err);
    if (st != MEMRA_OK) {
        memra_error_prefix(err, "step end at position %u", at);
        quarantine(s, "a step end failed", err);
        return st;
    }
    uint32_t n_vocab = s->arm->model->n_vocab;
    if (sampled && (res.token < 0 || res.token >= (int64_t)n_vocab)) {
        memra_fail(err, MEMRA_E_INTERNAL,
                   "the step at position %u sampled token %" PRId64 ", outside the vocabulary [0, %u)", at, res.token,
                   n_vocab);
        quarantine(s, "a step sampled a token outside the vocabulary", err);
        return MEMRA_E_INTERNAL;
    }
    if (out)
        *out = res;
    return MEMRA_OK;
}

memra_status memra_arm_step_end(memra_arm_state *s, float *logits, memra_step_result *out, memra_error *err) {
    if (!s)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_step_end: the state is NULL");
    memra_error local;
    if (!err)
        err = &local;
    memra_status st = end_checked(s, logits, out, err);
    return st == MEMRA_OK ? st : arm_prefix(s->arm, st, err, NULL);
}

memra_status memra_arm_run(memra_arm_state *s, const int64_t *inputs, uint32_t first, uint32_t count,
                           const memra_sample_cfg *sample, float *logits, memra_arm_step_fn fn, void *user,
                           memra_error *err) {
    if (!s)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_run: the state is NULL");
    memra_error local;
    if (!err)
        err = &local;
    memra_arm *a = s->arm;
    if (s->in_flight != 0)
        return arm_fail(a, err, MEMRA_E_INVALID, "a run of steps %u..%u begun with %u steps already in flight", first,
                        first + count - 1, s->in_flight);
    memra_step_args args = {.struct_size = sizeof args, .sample = sample, .want_logits = logits != NULL};
    uint32_t begun = 0, ended = 0;
    memra_status st = MEMRA_OK;
    char where[64] = "";
    while (ended < count && st == MEMRA_OK) {
        while (begun < count && begun - ended < a->window && st == MEMRA_OK) {
            args.token = inputs ? inputs[first + begun] : MEMRA_TOKEN_FROM_DEVICE;
            st = begin_raw(s, &args, false, err);
            if (st != MEMRA_OK)
                snprintf(where, sizeof where, "step %u begin", first + begun);
            else
                begun++;
        }
        if (st != MEMRA_OK || ended == begun)
            break;
        memra_step_result res;
        st = end_checked(s, logits, &res, err);
        if (st != MEMRA_OK) {
            snprintf(where, sizeof where, "step %u end", first + ended);
            break;
        }
        ended++;
        if (fn) {
            st = fn(user, first + ended - 1, logits, &res, begun == ended, err);
            if (st != MEMRA_OK)
                snprintf(where, sizeof where, "step %u (after it ended)", first + ended - 1);
        }
    }
    /* On failure, end what is still in flight (their results are dropped), so the state can be
     * freed or, when it is not quarantined, used again. */
    while (st != MEMRA_OK && s->in_flight > 0) {
        memra_step_result res;
        bool sampled;
        memra_error ignored;
        if (end_raw(s, NULL, &res, &sampled, &ignored) != MEMRA_OK)
            quarantine(s, "a step end failed while a failed run drained", &ignored);
    }
    return st == MEMRA_OK ? st : arm_prefix(a, st, err, where);
}

/* One chunk through the backend's step_chunk, with the layer's checks first. */
static memra_status chunk_raw(memra_arm_state *s, const int64_t *tokens, uint32_t count, float *logits,
                              memra_error *err) {
    memra_arm *a = s->arm;
    memra_status st = check_usable(s, "prefill on", err);
    if (st != MEMRA_OK)
        return st;
    if ((uint64_t)s->next_pos + count > s->capacity)
        return memra_fail(err, MEMRA_E_RANGE, "positions %u..%u are past the state's capacity of %u positions",
                          s->next_pos, s->next_pos + count - 1, s->capacity);
    for (uint32_t i = 0; i < count; i++)
        if (tokens[i] < 0 || tokens[i] >= (int64_t)a->model->n_vocab)
            return memra_fail(err, MEMRA_E_RANGE, "token %" PRId64 " at position %u is outside the vocabulary [0, %u)",
                              tokens[i], s->next_pos + i, a->model->n_vocab);
    st = a->vt->step_chunk(a->backend, s->st, tokens, count, logits, err);
    if (st != MEMRA_OK) {
        quarantine(s, "a prefill chunk failed", err);
        return st;
    }
    uint32_t pos = a->vt->state_position(a->backend, s->st);
    if (pos != s->next_pos + count) {
        memra_fail(err, MEMRA_E_INTERNAL, "a chunk of %u positions from %u left the state at position %u", count,
                   s->next_pos, pos);
        quarantine(s, "a prefill chunk committed the wrong position", err);
        return MEMRA_E_INTERNAL;
    }
    s->next_pos += count;
    s->carry = false;
    return MEMRA_OK;
}

memra_status memra_arm_prefill_run(memra_arm_state *s, const int64_t *inputs, uint32_t first, uint32_t count,
                                   float *logits, memra_arm_step_fn fn, void *user, memra_error *err) {
    if (!s || !inputs)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_prefill_run: the state or the inputs are NULL");
    memra_error local;
    if (!err)
        err = &local;
    memra_arm *a = s->arm;
    if (s->in_flight != 0)
        return arm_fail(a, err, MEMRA_E_INVALID, "a prefill of steps %u..%u begun with %u steps already in flight",
                        first, first + count - 1, s->in_flight);
    const uint32_t M = a->prefill;
    /* token by token, or a backend without step_chunk (the core runs its chunks as single steps,
     * which have every step's logits): exactly memra_arm_run, fn after every step */
    if (M <= 1 || !memra_arm_prefill_native(a))
        return memra_arm_run(s, inputs, first, count, NULL, logits, fn, user, err);
    memra_status st = MEMRA_OK;
    char where[96] = "";
    for (uint32_t done = 0; done < count && st == MEMRA_OK;) {
        uint32_t n = count - done < M ? count - done : M;
        uint32_t at = s->next_pos;
        st = chunk_raw(s, inputs + first + done, n, logits, err);
        if (st != MEMRA_OK) {
            snprintf(where, sizeof where, "prefill chunk of steps %u..%u (positions %u..%u)", first + done,
                     first + done + n - 1, at, at + n - 1);
            break;
        }
        done += n;
        if (st == MEMRA_OK && fn) {
            memra_step_result res = {.struct_size = sizeof res, .token = -1, .position = s->next_pos};
            st = fn(user, first + done - 1, logits, &res, true, err);
            if (st != MEMRA_OK)
                snprintf(where, sizeof where, "step %u (after its chunk ended)", first + done - 1);
        }
    }
    return st == MEMRA_OK ? st : arm_prefix(a, st, err, where);
}

memra_status memra_arm_digest(memra_arm_state *s, memra_digest_kind kind, uint8_t out[32], memra_error *err) {
    if (!s)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_digest: the state is NULL");
    memra_arm *a = s->arm;
    if (s->in_flight != 0)
        return arm_fail(a, err, MEMRA_E_INVALID, "digest with %u steps in flight (end them first)", s->in_flight);
    if (kind != MEMRA_DIGEST_LOGITS && kind != MEMRA_DIGEST_CACHE && kind != MEMRA_DIGEST_HIDDEN)
        return arm_fail(a, err, MEMRA_E_INVALID, "unknown digest kind %d", (int)kind);
    memra_status st = a->vt->digest(a->backend, s->st, kind, out, err);
    static const char *const names[3] = {"logits digest", "cache digest", "hidden digest"};
    return st == MEMRA_OK ? st : arm_prefix(a, st, err, names[kind]);
}

memra_status memra_arm_digests(memra_arm_state *s, uint8_t logits[32], uint8_t cache[32], uint8_t hidden[32],
                               memra_error *err) {
    memra_status st = memra_arm_digest(s, MEMRA_DIGEST_LOGITS, logits, err);
    if (st == MEMRA_OK)
        st = memra_arm_digest(s, MEMRA_DIGEST_CACHE, cache, err);
    if (st == MEMRA_OK)
        st = memra_arm_digest(s, MEMRA_DIGEST_HIDDEN, hidden, err);
    return st;
}

memra_status memra_arm_state_restore(memra_arm_state *dst, const memra_arm_state *src, memra_error *err) {
    if (!dst || !src)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_state_restore: a state is NULL");
    memra_error local;
    if (!err)
        err = &local;
    memra_arm *a = dst->arm;
    if (src->arm != a)
        return arm_fail(a, err, MEMRA_E_INVALID, "restore from a state of another arm (%s)", src->arm->prefix);
    memra_status st;
    if ((st = check_usable(src, "restore from", err)) != MEMRA_OK ||
        (st = check_usable(dst, "restore into", err)) != MEMRA_OK)
        return arm_prefix(a, st, err, NULL);
    if (src->in_flight != 0 || dst->in_flight != 0)
        return arm_fail(a, err, MEMRA_E_INVALID, "restore with steps in flight (%u in the source, %u in the target)",
                        src->in_flight, dst->in_flight);
    uint32_t pos = memra_arm_state_position(src);
    if (pos > dst->capacity)
        return arm_fail(a, err, MEMRA_E_RANGE, "restore of position %u into a state of capacity %u", pos,
                        dst->capacity);
    if (dst == src)
        return MEMRA_OK;
    st = a->vt->state_restore(a->backend, dst->st, src->st, err);
    if (st != MEMRA_OK) {
        memra_error_prefix(err, "restore");
        quarantine(dst, "a restore into it failed", err);
        return arm_prefix(a, st, err, NULL);
    }
    dst->next_pos = a->vt->state_position(a->backend, dst->st);
    dst->carry = src->carry;
    return MEMRA_OK;
}

memra_state_stats memra_arm_state_stats(const memra_arm_state *s) {
    memra_state_stats out = {.struct_size = sizeof out};
    const memra_arm *a = s->arm;
    if (!MEMRA_HAS_MEMBER(a->vt, memra_backend_vtable, state_stats) || !a->vt->state_stats)
        return out;
    memra_state_stats got = {.struct_size = sizeof got};
    if (a->vt->state_stats(a->backend, s->st, &got, NULL) != MEMRA_OK)
        return out;
    out = got; /* members an older backend does not know stay 0 */
    out.struct_size = sizeof out;
    return out;
}

memra_status memra_arm_census(memra_arm_state *s, memra_census_row *rows, uint32_t max_rows, uint32_t *n_rows,
                              memra_error *err) {
    if (n_rows)
        *n_rows = 0;
    memra_arm *a = s->arm;
    const memra_ext_census_v1 *ext =
        memra_arm_extension(a, MEMRA_EXT_CENSUS, 1, MEMRA_STRUCT_END(memra_ext_census_v1, census));
    if (!ext || !ext->census)
        return arm_fail(a, err, MEMRA_E_UNSUPPORTED, "the backend offers no graph census (%s v1)", MEMRA_EXT_CENSUS);
    memra_status st = ext->census(a->backend, s->st, rows, max_rows, n_rows, err);
    return st == MEMRA_OK ? st : arm_prefix(a, st, err, "census");
}

memra_status memra_arm_dump_graphs(memra_arm_state *s, const char *dir, memra_error *err) {
    memra_arm *a = s->arm;
    const memra_ext_census_v1 *ext =
        memra_arm_extension(a, MEMRA_EXT_CENSUS, 1, MEMRA_STRUCT_END(memra_ext_census_v1, dump_graphs));
    if (!ext || !ext->dump_graphs)
        return arm_fail(a, err, MEMRA_E_UNSUPPORTED, "the backend offers no graph dump (%s v1 dump_graphs)",
                        MEMRA_EXT_CENSUS);
    memra_status st = ext->dump_graphs(a->backend, s->st, dir, err);
    return st == MEMRA_OK ? st : arm_prefix(a, st, err, "dumping graphs");
}

/* ------------------------------------------------------------------------------------------ */
/* Tensor parallelism (the backend's memra.tp extension)                                       */

uint32_t memra_arm_ranks(const memra_arm *a, uint32_t stage) {
    if (!a || stage >= a->plan.n_stages)
        return 0;
    uint32_t n = a->plan.stages[stage].n_ranks;
    return n ? n : 1;
}

static const memra_ext_tp_v1 *tp_ext(memra_arm *a) {
    return memra_arm_extension(a, MEMRA_EXT_TP, 1, MEMRA_STRUCT_END(memra_ext_tp_v1, epochs));
}

static memra_status tp_absent(memra_arm *a, memra_error *err) {
    return arm_fail(a, err, MEMRA_E_UNSUPPORTED,
                    "the arm has no tensor-parallel stage (tp=1), or its backend offers no %s v1", MEMRA_EXT_TP);
}

/* The layer's checks of a site against the plan (the caller prefixes). */
static memra_status tp_check_site(const memra_arm *a, uint32_t stage, uint32_t rank, memra_error *err) {
    if (stage >= a->plan.n_stages)
        return memra_fail(err, MEMRA_E_RANGE, "stage %u: the plan has %u stages", stage, a->plan.n_stages);
    if (rank >= memra_arm_ranks(a, stage))
        return memra_fail(err, MEMRA_E_RANGE, "rank %u of stage %u: the stage has %u ranks", rank, stage,
                          memra_arm_ranks(a, stage));
    return MEMRA_OK;
}

memra_status memra_arm_collective(memra_arm *a, char *name, size_t name_size, bool *refusals, memra_error *err) {
    if (!a)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_collective: the arm is NULL");
    if (name && name_size)
        name[0] = '\0';
    if (refusals)
        *refusals = false;
    const memra_ext_tp_v1 *ext = tp_ext(a);
    if (!ext || !ext->collective)
        return tp_absent(a, err);
    memra_status st = ext->collective(a->backend, name, name_size, refusals, err);
    return st == MEMRA_OK ? st : arm_prefix(a, st, err, "collective");
}

memra_status memra_arm_arm_refusal(memra_arm *a, uint32_t stage, uint32_t rank, uint32_t layer, uint32_t which,
                                   uint32_t position, int32_t word, memra_error *err) {
    if (!a)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_arm_refusal: the arm is NULL");
    char where[160];
    snprintf(where, sizeof where, "refusal cell (stage %u, rank %u, layer %u, %s, position %u)", stage, rank, layer,
             which == 0   ? "attention"
             : which == 1 ? "ffn"
                          : "block ?",
             position);
    const memra_ext_tp_v1 *ext = tp_ext(a);
    if (!ext || !ext->arm_refusal)
        return tp_absent(a, err);
    memra_status st = tp_check_site(a, stage, rank, err);
    if (st == MEMRA_OK && (layer < a->plan.stages[stage].layer_begin || layer >= a->plan.stages[stage].layer_end))
        st = memra_fail(err, MEMRA_E_RANGE, "layer %u is not in stage %u's layers [%u, %u)", layer, stage,
                        a->plan.stages[stage].layer_begin, a->plan.stages[stage].layer_end);
    if (st == MEMRA_OK && which > 1)
        st = memra_fail(err, MEMRA_E_RANGE, "block %u: 0 is the all-reduce after attention, 1 after the ffn", which);
    if (st == MEMRA_OK && word == 0)
        st = memra_fail(err, MEMRA_E_INVALID, "a refusal word may not be 0");
    if (st == MEMRA_OK)
        st = ext->arm_refusal(a->backend, stage, rank, layer, which, position, word, err);
    return st == MEMRA_OK ? st : arm_prefix(a, st, err, where);
}

memra_status memra_arm_clear_refusals(memra_arm *a, memra_error *err) {
    if (!a)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_clear_refusals: the arm is NULL");
    const memra_ext_tp_v1 *ext = tp_ext(a);
    if (!ext || !ext->clear_refusals)
        return tp_absent(a, err);
    memra_status st = ext->clear_refusals(a->backend, err);
    return st == MEMRA_OK ? st : arm_prefix(a, st, err, "clearing refusal cells");
}

memra_status memra_arm_epochs(memra_arm *a, uint32_t stage, uint32_t rank, uint64_t *out, uint32_t n_blocks,
                              memra_error *err) {
    if (!a)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_epochs: the arm is NULL");
    char where[96];
    snprintf(where, sizeof where, "epochs of stage %u, rank %u", stage, rank);
    const memra_ext_tp_v1 *ext = tp_ext(a);
    if (!ext || !ext->epochs)
        return tp_absent(a, err);
    memra_status st = tp_check_site(a, stage, rank, err);
    if (st == MEMRA_OK && (!out || n_blocks != a->model->n_layer * 2))
        st = memra_fail(err, MEMRA_E_INVALID, "%u blocks%s; the model has %u (2 per layer)", n_blocks,
                        out ? "" : " into a NULL buffer", a->model->n_layer * 2);
    if (st == MEMRA_OK)
        st = ext->epochs(a->backend, stage, rank, out, n_blocks, err);
    return st == MEMRA_OK ? st : arm_prefix(a, st, err, where);
}

/* ------------------------------------------------------------------------------------------ */
/* Per-op taps (the backend's memra.ops extension)                                             */

static const memra_ext_ops_v1 *ops_ext(memra_arm *a) {
    return memra_arm_extension(a, MEMRA_EXT_OPS, 1, MEMRA_STRUCT_END(memra_ext_ops_v1, step_tapped));
}

bool memra_arm_has_taps(memra_arm *a) {
    const memra_ext_ops_v1 *ext = ops_ext(a);
    return ext && ext->step_tapped;
}

memra_status memra_arm_step_tapped(memra_arm_state *s, int64_t token, memra_op_tap_fn fn, void *user,
                                   memra_error *err) {
    if (!s || !fn)
        return memra_fail(err, MEMRA_E_INVALID, "memra_arm_step_tapped: the state or the tap is NULL");
    memra_error local;
    if (!err)
        err = &local;
    memra_arm *a = s->arm;
    const memra_ext_ops_v1 *ext = ops_ext(a);
    if (!ext || !ext->step_tapped)
        return arm_fail(a, err, MEMRA_E_UNSUPPORTED, "the backend offers no per-op taps (%s v1)", MEMRA_EXT_OPS);
    memra_status st = check_usable(s, "tapped step on", err);
    if (st == MEMRA_OK && s->in_flight)
        st = memra_fail(err, MEMRA_E_INVALID, "tapped step with %u steps in flight", s->in_flight);
    if (st == MEMRA_OK && (uint64_t)s->next_pos >= s->capacity)
        st = memra_fail(err, MEMRA_E_RANGE, "position %u is past the state's capacity of %u positions", s->next_pos,
                        s->capacity);
    if (st == MEMRA_OK && (token < 0 || token >= (int64_t)a->model->n_vocab))
        st = memra_fail(err, MEMRA_E_RANGE, "token %" PRId64 " at position %u is outside the vocabulary [0, %u)", token,
                        s->next_pos, a->model->n_vocab);
    if (st != MEMRA_OK)
        return arm_prefix(a, st, err, NULL);
    memra_step_args args = {.struct_size = sizeof args, .token = token, .sample = NULL, .want_logits = true};
    st = ext->step_tapped(a->backend, s->st, &args, fn, user, err);
    if (st != MEMRA_OK) {
        memra_error_prefix(err, "tapped step at position %u", s->next_pos);
        quarantine(s, "a tapped step failed", err);
        return arm_prefix(a, st, err, NULL);
    }
    s->next_pos++;
    s->carry = false;
    return MEMRA_OK;
}
