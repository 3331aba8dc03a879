/* gate_main.c: memra-gate, the heart of memra. Loads a model once, opens two arms on it, runs
 * the reference on A and the replay on B, compares every bit of every step, times both arms in
 * an interleaved schedule, and says pass or fail through JSON-line records, a summary table and
 * the exit code (0 pass, 1 mismatch or ineligible comparison, 2 usage, 3 runtime error). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate.h"

typedef struct gate_verdict {
    int exit;
    char reason[1400];
    int arms_identical; /* 1 or 0 once both arms are open; -1 before */
} gate_verdict;

static int exit_for(memra_status st) { return st == MEMRA_E_INVALID ? GATE_EXIT_USAGE : GATE_EXIT_RUNTIME; }

static void verdict_record(gate_json *j, const gate_config *cfg, const gate_verdict *v) {
    if (!j->f)
        return;
    gj_begin(j, "verdict");
    gj_bool(j, "pass", v->exit == GATE_EXIT_PASS);
    gj_u64(j, "exit", (uint64_t)v->exit);
    gj_str(j, "reason", v->reason);
    gj_str(j, "mode", cfg->compare_text[0] ? cfg->compare_text : "exact");
    if (v->arms_identical >= 0)
        gj_bool(j, "arms_identical", v->arms_identical);
    gj_end(j);
}

/* ------------------------------------------------------------------------------------------ */
/* Arms                                                                                        */

static bool registry_has(memra_registry *r, const char *name, memra_plugin_kind kind) {
    for (uint32_t i = 0; i < memra_registry_count(r); i++) {
        const memra_registry_entry *e = memra_registry_entry_at(r, i);
        if (e->kind == (uint32_t)kind && e->name && strcmp(e->name, name) == 0)
            return true;
    }
    return false;
}

/* No arms given: cuda against cuda-graph where a GPU and both plugins are present, otherwise cpu
 * against cpu:stages=2. */
static void pick_arms(memra_registry *r, gate_config *cfg) {
    cfg->auto_arms = true;
    const memra_plugin *cuda = NULL, *graph = NULL;
    memra_error err = {0};
    const char *why = "no 'cuda' backend plugin";
    if (registry_has(r, "cuda", MEMRA_PLUGIN_BACKEND) && registry_has(r, "cuda-graph", MEMRA_PLUGIN_BACKEND)) {
        uint32_t n = 0;
        memra_options none = {0};
        if (memra_registry_load(r, "cuda", MEMRA_PLUGIN_BACKEND, &cuda, &err) != MEMRA_OK ||
            memra_registry_load(r, "cuda-graph", MEMRA_PLUGIN_BACKEND, &graph, &err) != MEMRA_OK)
            why = err.msg;
        else if (cuda->backend->device_count(memra_registry_host(r), &none, &n, &err) != MEMRA_OK || n == 0)
            why = n == 0 && !err.msg[0] ? "no CUDA device" : err.msg;
        else
            why = NULL;
    } else if (registry_has(r, "cuda", MEMRA_PLUGIN_BACKEND)) {
        why = "no 'cuda-graph' backend plugin";
    }
    if (!why) {
        cfg->arm_a = "cuda";
        cfg->arm_b = "cuda-graph";
        snprintf(cfg->auto_reason, sizeof cfg->auto_reason, "a CUDA device and the cuda and cuda-graph plugins are present");
    } else {
        cfg->arm_a = "cpu";
        cfg->arm_b = "cpu:stages=2";
        snprintf(cfg->auto_reason, sizeof cfg->auto_reason, "cuda against cuda-graph unavailable (%.200s)", why);
    }
}

static memra_status precheck_arm(const char *name, const char *text, memra_error *err) {
    char backend[MEMRA_BACKEND_NAME_MAX];
    memra_options opts;
    uint32_t window;
    memra_status st = memra_arm_parse(text, backend, &opts, err);
    if (st != MEMRA_OK) {
        memra_error_prefix(err, "--%s", name);
        return st;
    }
    st = memra_options_u32(&opts, "window", 1, 1, GATE_MAX_WINDOW, &window, err);
    if (st != MEMRA_OK)
        memra_error_prefix(err, "--%s: arm '%s'", name, text);
    return st;
}

static memra_status open_arm(memra_registry *r, const memra_loaded_model *lm, const char *name, const char *text,
                             gate_arm *out, int *exit_code, memra_error *err) {
    out->name = name;
    memra_status st = memra_arm_open(r, lm->model, text, gate_caller_keys, gate_caller_key_count, &out->arm, err);
    if (st != MEMRA_OK) {
        char backend[MEMRA_BACKEND_NAME_MAX];
        memra_options opts;
        bool unknown = st == MEMRA_E_PLUGIN && memra_arm_parse(text, backend, &opts, NULL) == MEMRA_OK &&
                       !registry_has(r, backend, MEMRA_PLUGIN_BACKEND);
        *exit_code = unknown ? GATE_EXIT_USAGE : exit_for(st);
        memra_error_prefix(err, "--%s", name);
        return st;
    }
    out->vt = memra_arm_vtable(out->arm);
    out->be = memra_arm_backend(out->arm);
    out->mem_open.struct_size = sizeof out->mem_open;
    out->have_mem_open = out->vt->memory && out->vt->memory(out->be, &out->mem_open, NULL) == MEMRA_OK;
    st = memra_options_u32(memra_arm_options(out->arm), "window", 1, 1, GATE_MAX_WINDOW, &out->window, err);
    if (st != MEMRA_OK) {
        *exit_code = GATE_EXIT_USAGE;
        memra_error_prefix(err, "--%s", name);
    }
    return st;
}

/* An arm's resolved configuration as text, without the gate's window key (how many steps are
 * kept in flight changes how the gate drives the arm, not what it computes). */
static void resolved_without_window(const gate_arm *a, char *buf, size_t size) {
    const memra_options *o = memra_arm_resolved(a->arm);
    memra_options kept = {0};
    for (uint32_t i = 0; o && i < o->n && i < MEMRA_OPT_MAX; i++)
        if (strcmp(o->items[i].key, "window") != 0)
            kept.items[kept.n++] = o->items[i];
    memra_arm_format(memra_arm_backend_name(a->arm), &kept, buf, size);
}

/* Whether both arms resolve to the same configuration (ignoring window): their comparison then
 * proves determinism, not the equivalence of two configurations. */
static bool arms_identical(const gate_arm *a, const gate_arm *b) {
    char ta[4096], tb[4096];
    resolved_without_window(a, ta, sizeof ta);
    resolved_without_window(b, tb, sizeof tb);
    return strcmp(ta, tb) == 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Prompt                                                                                      */

static memra_status read_prompt(const char *path, uint32_t n_vocab, uint32_t **ids, uint32_t *n, memra_error *err) {
    FILE *f = fopen(path, "r");
    if (!f)
        return memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s: cannot open: %s", path, strerror(errno));
    uint32_t cap = 256, count = 0;
    uint32_t *v = malloc(cap * sizeof *v);
    memra_status st = v ? MEMRA_OK : memra_fail(err, MEMRA_E_NOMEM, "out of memory for prompt ids");
    char word[64];
    int c = 0;
    while (st == MEMRA_OK && c != EOF) {
        size_t len = 0;
        while ((c = fgetc(f)) != EOF && (isspace(c) || c == ','))
            ;
        while (c != EOF && !isspace(c) && c != ',') {
            if (len + 1 < sizeof word)
                word[len++] = (char)c;
            else
                len = sizeof word; /* too long: reported below */
            c = fgetc(f);
        }
        if (len == 0)
            break;
        if (len >= sizeof word) {
            st = memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s: id %u is too long", path, count);
            break;
        }
        if (memchr(word, '\0', len)) {
            st = memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s: id %u holds a NUL byte", path, count);
            break;
        }
        word[len] = '\0';
        char *end = NULL;
        errno = 0;
        unsigned long long id = isdigit((unsigned char)word[0]) ? strtoull(word, &end, 10) : 0;
        if (!end || end != word + len || errno || id >= n_vocab) {
            st = memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s: id %u '%s' is not a token id below n_vocab %u", path,
                            count, word, n_vocab);
            break;
        }
        if (count == cap) {
            uint32_t *grown = cap < GATE_MAX_STEPS ? realloc(v, 2 * (size_t)cap * sizeof *v) : NULL;
            if (!grown) {
                st = memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s: more than %u ids", path, cap);
                break;
            }
            v = grown;
            cap *= 2;
        }
        v[count++] = (uint32_t)id;
    }
    if (st == MEMRA_OK && ferror(f))
        st = memra_fail(err, MEMRA_E_IO, "--prompt-ids %s: read error", path);
    if (st == MEMRA_OK && count == 0)
        st = memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s: no token ids in the file", path);
    fclose(f);
    if (st != MEMRA_OK) {
        free(v);
        return st;
    }
    *ids = v;
    *n = count;
    return MEMRA_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Records                                                                                     */

static void arm_json(gate_json *j, const gate_arm *a) {
    gj_obj(j, a->name);
    gj_str(j, "text", memra_arm_text(a->arm));
    gj_str(j, "backend", memra_arm_backend_name(a->arm));
    const memra_plugin *p = memra_arm_plugin(a->arm);
    gj_str(j, "backend_version", p && p->version ? p->version : "");
    gj_obj(j, "resolved");
    const memra_options *o = memra_arm_resolved(a->arm);
    for (uint32_t i = 0; o && i < o->n; i++)
        gj_str(j, o->items[i].key, o->items[i].value);
    gj_obj_end(j);
    char full[4096];
    memra_arm_format(memra_arm_backend_name(a->arm), o, full, sizeof full);
    gj_str(j, "resolved_text", full);
    gj_u64(j, "window", a->window);
    const memra_plan *plan = memra_arm_plan(a->arm);
    gj_arr(j, "stages");
    for (uint32_t s = 0; plan && s < plan->n_stages && s < MEMRA_MAX_STAGES; s++) {
        gj_obj(j, NULL);
        gj_u64(j, "layer_begin", plan->stages[s].layer_begin);
        gj_u64(j, "layer_end", plan->stages[s].layer_end);
        gj_i64(j, "device", plan->stages[s].device);
        gj_u64(j, "ranks", plan->stages[s].n_ranks);
        gj_obj_end(j);
    }
    gj_arr_end(j);
    memra_backend_memory mem = {.struct_size = sizeof mem};
    if (a->vt->memory && a->vt->memory(a->be, &mem, NULL) == MEMRA_OK) {
        gj_obj(j, "memory");
        gj_u64(j, "weight_bytes", mem.weight_bytes);
        gj_u64(j, "cache_bytes", mem.cache_bytes);
        gj_u64(j, "scratch_bytes", mem.scratch_bytes);
        gj_u64(j, "device_in_use", mem.device_in_use);
        gj_obj_end(j);
    }
    if (a->have_mem_open) {
        gj_obj(j, "memory_at_open"); /* read right after this arm opened (for a: before b opened) */
        gj_u64(j, "weight_bytes", a->mem_open.weight_bytes);
        gj_u64(j, "cache_bytes", a->mem_open.cache_bytes);
        gj_u64(j, "scratch_bytes", a->mem_open.scratch_bytes);
        gj_u64(j, "device_in_use", a->mem_open.device_in_use);
        gj_obj_end(j);
    }
    gj_obj_end(j);
}

/* Whether arm b's open uploaded weights of its own, from the device memory in use before and
 * after it opened: with --a cuda --b cuda-graph both arms share one upload, and b's open then
 * adds less than its weight bytes. Null where the backends report no device memory, or where
 * the weights are too small to tell from allocation rounding and scratch. */
#define GATE_SHARED_UPLOAD_MIN_BYTES (64ull << 20)

/* The devices an arm's plan uses, as a bit set (devices 0..63; others set bit 63 too). */
static uint64_t plan_devices(const gate_arm *a) {
    const memra_plan *plan = memra_arm_plan(a->arm);
    uint64_t set = 0;
    for (uint32_t s = 0; plan && s < plan->n_stages && s < MEMRA_MAX_STAGES; s++)
        for (uint32_t r = 0; r < plan->stages[s].n_ranks && r < MEMRA_MAX_RANKS; r++) {
            int32_t d = plan->stages[s].ranks[r].device;
            set |= 1ull << (d >= 0 && d < 63 ? d : 63);
        }
    return set;
}

static void shared_upload_json(gate_json *j, const gate_arm *a, const gate_arm *b) {
    gj_obj(j, "shared_upload");
    const char *why = NULL;
    if (!a->have_mem_open || !b->have_mem_open)
        why = "an arm reports no memory";
    else if (plan_devices(a) != plan_devices(b))
        why = "the arms use different devices: their device memory readings do not compare";
    else if (!a->mem_open.device_in_use || !b->mem_open.device_in_use)
        why = "no device memory reported (device_in_use 0): host backends read the weights in place from the one "
              "model mapping";
    if (why) {
        gj_null(j, "b_weights_shared");
        gj_str(j, "reason", why);
        gj_obj_end(j);
        return;
    }
    uint64_t before = a->mem_open.device_in_use, after = b->mem_open.device_in_use, w = b->mem_open.weight_bytes;
    int64_t added = (int64_t)(after - before);
    gj_u64(j, "device_in_use_after_a_open", before);
    gj_u64(j, "device_in_use_after_b_open", after);
    gj_i64(j, "b_open_added_bytes", added);
    gj_u64(j, "b_weight_bytes", w);
    if (w < GATE_SHARED_UPLOAD_MIN_BYTES) {
        gj_null(j, "b_weights_shared");
        gj_str(j, "reason", "weights under 64 MiB: allocation rounding and scratch could hide a second upload");
    } else {
        gj_bool(j, "b_weights_shared", added < (int64_t)w);
        gj_str(j, "reason", added < (int64_t)w ? "b's open added less device memory than its weight bytes"
                                               : "b's open added at least its weight bytes: a second upload");
    }
    gj_str(j, "note", "device_in_use is the whole device's, as the driver reports it: other processes count too");
    gj_obj_end(j);
}

/* The schedule as letters, a space between its quarters ("AAAAA BBBBB BBBBB AAAAA" for 20
 * rows), bounded by the buffer's length, not the row count: a schedule too long for it stops
 * and ends in "...". */
static const char *schedule_blocks(const gate_config *cfg, char *buf, size_t size) {
    size_t n = 0;
    buf[0] = '\0';
    for (uint32_t r = 0; r < cfg->rows; r++) {
        bool gap = r && (4ull * r) / cfg->rows != (4ull * (r - 1)) / cfg->rows; /* a new quarter */
        bool last = r + 1 == cfg->rows;
        /* this row's letters, then either the end or room for "..." and the terminator */
        if (n + gap + 1 + (last ? 0 : 3) + 1 > size) {
            if (n + 4 <= size)
                memcpy(buf + n, "...", 4);
            break;
        }
        if (gap)
            buf[n++] = ' ';
        buf[n++] = gate_schedule_arm(r, cfg->rows, cfg->baab) ? 'B' : 'A';
        buf[n] = '\0';
    }
    return buf;
}

static void protocol_record(gate_ctx *ctx, const uint8_t model_sha[32], const uint8_t prompt_sha[32]) {
    const gate_config *cfg = ctx->cfg;
    char blocks[512];
    const memra_model *m = ctx->lm->model;
    gate_json *j = &ctx->json;
    gj_begin(j, "protocol");
    gj_str(j, "tool", "memra-gate");
    gj_str(j, "memra_version", memra_version());
    gj_u64(j, "prime", cfg->prime);
    gj_u64(j, "gen", cfg->gen);
    gj_u64(j, "rows", cfg->rows);
    gj_str(j, "schedule", cfg->baab ? "BAAB" : "ABBA");
    gj_str(j, "blocks", schedule_blocks(cfg, blocks, sizeof blocks));
    gj_obj(j, "sampling");
    gj_str(j, "mode", cfg->sampled ? "sampled" : "greedy");
    if (cfg->sampled) {
        gj_f64(j, "temperature", cfg->sample.temperature);
        gj_u64(j, "top_k", cfg->sample.top_k);
        gj_f64(j, "top_p", cfg->sample.top_p);
        gj_u64(j, "seed", cfg->sample.seed);
        gj_str(j, "draw", "memra_uniform(seed, position)");
    }
    gj_obj_end(j);
    gj_str(j, "compare", cfg->compare_text);
    if (cfg->nmse)
        gj_f64(j, "nmse_tolerance", cfg->nmse_tol);
    gj_bool(j, "arms_identical", ctx->arms_identical);
    gj_bool(j, "auto_arms", cfg->auto_arms);
    if (cfg->auto_arms)
        gj_str(j, "auto_reason", cfg->auto_reason);
    gj_obj(j, "arms");
    arm_json(j, &ctx->a);
    arm_json(j, &ctx->b);
    gj_obj_end(j);
    shared_upload_json(j, &ctx->a, &ctx->b);
    /* What the timing rows' clock covers, and where a graph backend's first capture falls. */
    gj_str(j, "timing_scope", GATE_TIMING_SCOPE);
    if (cfg->rows) {
        gj_bool(j, "first_scored_capture_inside_timing", true);
        gj_str(j, "scored_state", "each arm's scored state is created before the rows and stepped only inside "
                                  "them: its first row starts fresh, so a graph capture falls inside that row's "
                                  "clock (measure records: stats_before all zero on each arm's first row)");
    } else {
        gj_null(j, "first_scored_capture_inside_timing"); /* no scored rows */
    }
    gj_str(j, "carry_check",
           cfg->rows ? "the timing rows: each takes its tokens from the device and is verified"
                     : "no timing rows: after a clean correctness phase, one untimed pass per arm from its prefix "
                       "snapshot with tokens carried on the device, verified as a row is");
    gj_bool(j, "profile", cfg->profile);
    if (cfg->profile) {
        gj_bool(j, "scored", false);
        gj_bool(j, "nvtx", gate_have_nvtx());
        gj_arr(j, "profile_windows");
        for (int i = 0; i < 2; i++) {
            gj_obj(j, NULL);
            gj_str(j, "arm", i ? "b" : "a");
            gj_u64(j, "steps", GATE_PROFILE_STEPS);
            gj_u64(j, "start_position", cfg->prime);
            gj_u64(j, "end_position", (uint64_t)cfg->prime + GATE_PROFILE_STEPS);
            gj_obj_end(j);
        }
        gj_arr_end(j);
        gj_str(j, "profile_order", "after the correctness passes, arm a's window then arm b's; each from a "
                                   "restore of the arm's prefix snapshot after one warm-up step from it, tokens "
                                   "carried on the device; no timing row and no ratio");
    }
    if (cfg->dump_dir)
        gj_str(j, "dump_graphs", cfg->dump_dir);
    else
        gj_null(j, "dump_graphs");
    gj_obj(j, "model");
    gj_str(j, "label", ctx->lm->label);
    gj_hex(j, "sha256", model_sha);
    gj_str(j, "arch", m->arch_name);
    gj_u64(j, "n_vocab", m->n_vocab);
    gj_u64(j, "n_layer", m->n_layer);
    gj_u64(j, "n_embd", m->n_embd);
    gj_i64(j, "eos_id", m->eos_id);
    gj_obj_end(j);
    gj_obj(j, "prompt");
    gj_str(j, "source", cfg->prompt_ids_path ? cfg->prompt_ids_path : "default: (100 + 7i mod 900) mod n_vocab");
    gj_hex(j, "sha256", prompt_sha);
    gj_obj_end(j);
    gj_str(j, "step_order", "forward, collective check, commit, head, sample, readback");
    gj_str(j, "replay_inputs", "the reference's tokens, explicit (never the device's)");
    gj_str(j, "digest_points", "every step of a serial arm; where a pipelined arm drains (end of prime, end of gen)");
    gj_str(j, "loop_rule", "last min(64, N) generated tokens periodic with a period p <= 16, repeated at least twice");
    gj_end(j);
}

/* What the first row of each arm saw of its scored state: the counters before the row (after
 * its restore) are all zero, and a graph backend's capture counts inside the row. */
static void first_capture_json(gate_ctx *ctx) {
    const gate_outcome *o = &ctx->out;
    gate_json *j = &ctx->json;
    bool any_capture = false, inside = true;
    gj_obj(j, "first_scored_row");
    for (int i = 0; i < 2; i++) {
        gj_obj(j, i ? "b" : "a");
        if (!o->first_row_seen[i]) {
            gj_null(j, "captures_before");
            gj_obj_end(j);
            continue;
        }
        const memra_state_stats *b = &o->first_row_before[i], *a = &o->first_row_after[i];
        gj_u64(j, "steps_before", b->steps);
        gj_u64(j, "captures_before", b->captures);
        gj_u64(j, "captures_in_row", a->captures - b->captures);
        gj_u64(j, "replays_in_row", a->replays - b->replays);
        gj_obj_end(j);
        if (a->captures) {
            any_capture = true;
            inside = inside && b->captures == 0 && b->steps == 0 && a->captures > b->captures;
        }
    }
    gj_obj_end(j);
    if (any_capture)
        gj_bool(j, "first_scored_capture_inside_timing", inside);
    else
        gj_null(j, "first_scored_capture_inside_timing"); /* neither arm captures graphs */
}

static void summary_record(gate_ctx *ctx) {
    const gate_outcome *o = &ctx->out;
    gate_json *j = &ctx->json;
    gj_begin(j, "summary");
    gj_u64(j, "steps", ctx->ref.steps);
    gj_u64(j, "steps_compared", o->steps_compared);
    gj_u64(j, "bad_steps", o->bad_steps);
    gj_u64(j, "nonfinite_steps", o->nonfinite_steps);
    if (o->have_first) {
        gj_obj(j, "first_mismatch");
        gj_u64(j, "step", o->first.step);
        gj_str(j, "phase", o->first.step < ctx->cfg->prime ? "prime" : "gen");
        gj_i64(j, "index", o->first.diff.first_index);
        gj_obj_end(j);
    } else {
        gj_null(j, "first_mismatch");
    }
    gj_f64(j, "max_nmse", o->max_nmse);
    gj_u64(j, "tokens_agree", o->token_agree);
    gj_u64(j, "tokens_compared", o->token_total);
    gj_f64(j, "token_agreement", o->token_total ? (double)o->token_agree / o->token_total : 1.0);
    gj_bool(j, "timing_done", o->timing_done);
    gj_u64(j, "rows", o->n_rows);
    gj_u64(j, "row_failures", o->row_failures);
    gj_u64(j, "rows_ineligible", o->rows_ineligible);
    if (o->timing_done) {
        gj_obj(j, "arms");
        for (int i = 0; i < 2; i++) {
            gj_obj(j, i ? "b" : "a");
            gj_u64(j, "eligible_rows", o->eligible[i]);
            gj_f64(j, "median_tok_s", o->median[i]);
            gj_f64(j, "min_tok_s", o->min[i]);
            gj_f64(j, "max_tok_s", o->max[i]);
            gj_obj_end(j);
        }
        gj_obj_end(j);
        gj_f64(j, "ratio_b_over_a", o->ratio);
        if (o->have_ratio) {
            gj_arr(j, "ratio_ci95");
            gj_f64(j, NULL, o->ratio_lo);
            gj_f64(j, NULL, o->ratio_hi);
            gj_arr_end(j);
        } else {
            gj_null(j, "ratio_ci95");
        }
        gj_obj(j, "bootstrap");
        gj_u64(j, "resamples", GATE_BOOTSTRAP_RESAMPLES);
        gj_u64(j, "seed", GATE_BOOTSTRAP_SEED);
        gj_str(j, "statistic", "median(b tok/s) / median(a tok/s); 2.5 and 97.5 percentiles");
        gj_obj_end(j);
        first_capture_json(ctx);
    }
    if (ctx->cfg->profile) {
        gj_obj(j, "profile");
        gj_bool(j, "done", o->profile_done);
        gj_bool(j, "verified", o->profile_done && o->profile_identical);
        gj_u64(j, "start_position", ctx->cfg->prime);
        gj_u64(j, "end_position", (uint64_t)ctx->cfg->prime + GATE_PROFILE_STEPS);
        gj_str(j, "failure", o->profile_failure[0] ? o->profile_failure : NULL);
        gj_obj_end(j);
    }
    gj_obj(j, "carry_check");
    gj_bool(j, "ran", o->carry_done);
    if (o->carry_done) {
        gj_bool(j, "verified", o->carry_failures == 0);
        gj_u64(j, "failures", o->carry_failures);
        gj_str(j, "failure", o->carry_failure[0] ? o->carry_failure : NULL);
    } else {
        gj_str(j, "reason", ctx->cfg->rows ? "the timing rows take their tokens from the device and are verified"
                                           : "not run (correctness failed first)");
    }
    gj_obj_end(j);
    gj_u64(j, "digest_steps", o->digest_steps);
    if (ctx->cfg->dump_dir) {
        gj_obj(j, "dump_graphs");
        gj_str(j, "dir", ctx->cfg->dump_dir);
        gj_u64(j, "files", o->dumped_files);
        gj_obj_end(j);
    }
    gj_end(j);
}

/* "logits, cache" etc.: what differed at a mismatching step. */
static void mismatch_what(const gate_mismatch *m, char *buf, size_t size) {
    const char *names[] = {"logits", "nmse over tolerance", "non-finite logits", "sampled token",
                           "cache digest", "hidden digest", "logits digest"};
    bool on[] = {m->logits, m->nmse_over, m->nonfinite, m->token, m->cache, m->hidden, m->digest_logits};
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof on / sizeof on[0] && used < size; i++)
        if (on[i])
            used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", names[i]);
}

/* The verdict from what the run found. */
static void judge(gate_ctx *ctx, gate_verdict *v) {
    const gate_outcome *o = &ctx->out;
    const gate_config *cfg = ctx->cfg;
    const uint64_t lost = memra_sha256_failures();
    if (lost) { /* before any comparison's result: none of them can be trusted */
        snprintf(v->reason, sizeof v->reason,
                 "%" PRIu64 " SHA-256 digest(s) could not be computed (OpenSSL failed, or a digest context could not "
                 "be made): no comparison of this run can be trusted",
                 lost);
        v->exit = GATE_EXIT_RUNTIME;
    } else if (o->bad_steps) {
        const gate_mismatch *m = &o->first;
        char what[256];
        mismatch_what(m, what, sizeof what);
        int n = snprintf(v->reason, sizeof v->reason, "%u of %u steps differ; first at step %u (%s %u): %s", o->bad_steps,
                         o->steps_compared, m->step, m->step < cfg->prime ? "prime" : "gen",
                         m->step < cfg->prime ? m->step : m->step - cfg->prime, what);
        if (m->diff.first_index >= 0 && n > 0 && (size_t)n < sizeof v->reason)
            snprintf(v->reason + n, sizeof v->reason - (size_t)n,
                     "; index %" PRId64 " ref %.9g got %.9g, max %" PRIu64 " ulp, nmse %.3g, argmax %s",
                     m->diff.first_index, m->diff.first_ref, m->diff.first_got, m->diff.max_ulp, m->diff.nmse,
                     m->diff.argmax_ref != m->diff.argmax_got ? "differs" : "same");
        v->exit = GATE_EXIT_FAIL;
    } else if (cfg->profile && !o->profile_identical) {
        snprintf(v->reason, sizeof v->reason, "profile window failed verification: %.1300s",
                 o->profile_failure[0] ? o->profile_failure : "the profile windows did not run");
        v->exit = GATE_EXIT_FAIL;
    } else if (o->carry_failures) {
        snprintf(v->reason, sizeof v->reason,
                 "device-carried token check failed (the untimed pass from the prefix snapshot, tokens carried on "
                 "the device): %s",
                 o->carry_failure);
        v->exit = GATE_EXIT_FAIL;
    } else if (o->row_failures) {
        snprintf(v->reason, sizeof v->reason, "%u timing row(s) failed verification; first: %s", o->row_failures,
                 o->row_failure);
        v->exit = GATE_EXIT_FAIL;
    } else if (o->ineligible[0] && cfg->rows) {
        snprintf(v->reason, sizeof v->reason, "ineligible comparison: %s", o->ineligible);
        v->exit = GATE_EXIT_FAIL;
    } else if (cfg->rows && (!o->timing_done || !o->eligible[0] || !o->eligible[1])) {
        snprintf(v->reason, sizeof v->reason, "ineligible comparison: an arm has no eligible timing row");
        v->exit = GATE_EXIT_FAIL;
    } else {
        const gate_arm *a = &ctx->a, *b = &ctx->b;
        int n;
        if (cfg->nmse)
            n = snprintf(v->reason, sizeof v->reason, "%u steps (%u prime + %u gen) within NMSE tolerance",
                         o->steps_compared, cfg->prime, cfg->gen);
        else if (a->window == 1 && b->window == 1)
            n = snprintf(v->reason, sizeof v->reason, "%u steps (%u prime + %u gen) bit-identical in logits, cache and hidden",
                         o->steps_compared, cfg->prime, cfg->gen);
        else { /* a pipelined arm is digested only where it drains: say so */
            bool both = a->window > 1 && b->window > 1;
            char who[96];
            if (both)
                snprintf(who, sizeof who, "arms a and b, windows %u and %u", a->window, b->window);
            else
                snprintf(who, sizeof who, "arm %s, window %u", a->window > 1 ? "a" : "b",
                         a->window > 1 ? a->window : b->window);
            n = snprintf(v->reason, sizeof v->reason,
                         "%u steps (%u prime + %u gen) bit-identical in logits and sampled tokens at every step; cache "
                         "and hidden digests compared at %u of them, only where %s pipeline drains (%s: the ends of "
                         "the prime and generated phases)",
                         o->steps_compared, cfg->prime, cfg->gen, o->digest_steps, both ? "either arm's" : "its", who);
        }
        if (cfg->nmse && n > 0 && (size_t)n < sizeof v->reason)
            n += snprintf(v->reason + n, sizeof v->reason - (size_t)n, " (max %.3g <= %g; tokens agree %u/%u)",
                          o->max_nmse, cfg->nmse_tol, o->token_agree, o->token_total);
        if (cfg->profile && n > 0 && (size_t)n < sizeof v->reason)
            n += snprintf(v->reason + n, sizeof v->reason - (size_t)n,
                          "; profile windows (positions %u..%u, unscored) identical on both arms", o->profile_start,
                          o->profile_end);
        if (o->carry_done && n > 0 && (size_t)n < sizeof v->reason)
            snprintf(v->reason + n, sizeof v->reason - (size_t)n,
                     "; device-carried tokens verified (one untimed pass per arm from its prefix snapshot)");
        v->exit = GATE_EXIT_PASS;
    }
}

static void summary_table(gate_ctx *ctx, const uint8_t model_sha[32], const gate_verdict *v) {
    const gate_outcome *o = &ctx->out;
    const gate_config *cfg = ctx->cfg;
    char hex[MEMRA_SHA256_HEX];
    memra_sha256_hex(model_sha, hex);
    FILE *f = stderr;
    fprintf(f, "\nmemra-gate summary\n");
    fprintf(f, "  model        %s (sha256 %.16s)\n", ctx->lm->label, hex);
    fprintf(f, "  arm a        %s (window %u)\n", memra_arm_text(ctx->a.arm), ctx->a.window);
    fprintf(f, "  arm b        %s (window %u)\n", memra_arm_text(ctx->b.arm), ctx->b.window);
    fprintf(f, "  compare      %s; %s\n", cfg->compare_text, cfg->sampled ? "sampled" : "greedy");
    fprintf(f, "  steps        %u compared (%u prime + %u gen), %u bad\n", o->steps_compared, cfg->prime, cfg->gen,
            o->bad_steps);
    if (o->have_first) {
        const gate_mismatch *m = &o->first;
        char what[256];
        mismatch_what(m, what, sizeof what);
        fprintf(f, "  first bad    step %u (%s %u): %s\n", m->step, m->step < cfg->prime ? "prime" : "gen",
                m->step < cfg->prime ? m->step : m->step - cfg->prime, what);
        if (m->diff.first_index >= 0)
            fprintf(f, "               index %" PRId64 " ref %.9g got %.9g; %u logits differ, max %" PRIu64
                       " ulp, nmse %.3g, argmax %s\n",
                    m->diff.first_index, m->diff.first_ref, m->diff.first_got, m->diff.n_diff, m->diff.max_ulp,
                    m->diff.nmse, m->diff.argmax_ref != m->diff.argmax_got ? "differs" : "same");
        if (m->token)
            fprintf(f, "               sampled token ref %" PRId64 " got %" PRId64 "\n", m->token_ref, m->token_got);
    }
    fprintf(f, "  tokens       %u/%u generated tokens agree; max NMSE %.3g\n", o->token_agree, o->token_total,
            o->max_nmse);
    if (o->timing_done) {
        fprintf(f, "  rows         %u run (%s), %u failed verification, %u ineligible\n", o->n_rows,
                cfg->baab ? "BAAB" : "ABBA", o->row_failures, o->rows_ineligible);
        for (int i = 0; i < 2; i++)
            fprintf(f, "  tok/s %s      %.1f median (%.1f .. %.1f), %u eligible row(s)\n", i ? "b" : "a", o->median[i],
                    o->min[i], o->max[i], o->eligible[i]);
        if (o->have_ratio)
            fprintf(f, "  ratio b/a    %.4f (95%% CI %.4f .. %.4f)\n", o->ratio, o->ratio_lo, o->ratio_hi);
    } else if (cfg->rows) {
        fprintf(f, "  timing       not run (correctness failed first)\n");
    }
    if (cfg->profile && o->profile_done)
        fprintf(f, "  profile      2 windows of %u steps at positions %u..%u (unscored, NVTX %s): %s\n",
                GATE_PROFILE_STEPS, o->profile_start, o->profile_end, gate_have_nvtx() ? "ranges" : "not built in",
                o->profile_identical ? "identical" : o->profile_failure);
    else if (cfg->profile)
        fprintf(f, "  profile      not run (correctness failed first)\n");
    if (o->carry_done)
        fprintf(f, "  carry check  one untimed pass per arm, tokens carried on the device: %s\n",
                o->carry_failures ? o->carry_failure : "verified");
    if (cfg->dump_dir)
        fprintf(f, "  graphs       %u file(s) dumped under %s\n", o->dumped_files, cfg->dump_dir);
    fprintf(f, "  verdict      %s (exit %d): %s\n\n", v->exit == 0 ? "PASS" : "FAIL", v->exit, v->reason);
}

/* ------------------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
    gate_config cfg;
    gate_ctx ctx = {0};
    gate_verdict v = {.exit = GATE_EXIT_PASS, .arms_identical = -1};
    memra_error err = {0};
    memra_registry *reg = NULL;
    memra_loaded_model *lm = NULL;
    uint32_t *prompt = NULL, n_prompt = 0;
    uint8_t model_sha[32] = {0}, prompt_sha[32] = {0};
    bool timing_ok = true;
    ctx.cfg = &cfg;
    ctx.json.f = stdout;

    memra_status st = gate_cli_parse(argc, argv, &cfg, &err);
    if (st != MEMRA_OK) {
        v.exit = GATE_EXIT_USAGE;
        if (cfg.jsonl_path) /* the verdict goes where the records were asked to go */
            ctx.json.f = fopen(cfg.jsonl_path, "w");
        goto fail;
    }
    if (cfg.help) {
        if (memra_registry_open(&reg, &err) != MEMRA_OK)
            reg = NULL;
        gate_cli_help(stdout, reg);
        goto done;
    }
    if (cfg.jsonl_path && !(ctx.json.f = fopen(cfg.jsonl_path, "w"))) {
        ctx.json.f = NULL;
        st = memra_fail(&err, MEMRA_E_IO, "--jsonl %s: cannot open for writing: %s", cfg.jsonl_path, strerror(errno));
        v.exit = GATE_EXIT_RUNTIME;
        goto fail;
    }
    ctx.progress = !cfg.quiet && isatty(STDERR_FILENO);
    /* Before any model is loaded: a dump directory that cannot be written fails now. */
    if (cfg.dump_dir && (st = gate_dump_prepare(cfg.dump_dir, &err)) != MEMRA_OK) {
        v.exit = exit_for(st);
        goto fail;
    }
    if (cfg.profile && !gate_have_nvtx())
        fprintf(stderr, "memra-gate: --profile: this build has no NVTX (the CUDA toolkit was not found when it was "
                        "built): the profile windows run and are verified, but no NVTX ranges are emitted\n");

    if ((st = memra_registry_open(&reg, &err)) != MEMRA_OK) {
        v.exit = GATE_EXIT_RUNTIME;
        goto fail;
    }
    if (!cfg.arm_a) {
        pick_arms(reg, &cfg);
        if (!cfg.quiet)
            fprintf(stderr, "memra-gate: no arms given: --a %s --b %s (%s)\n", cfg.arm_a, cfg.arm_b, cfg.auto_reason);
    }
    /* Syntax and the gate's own key first, before a model is loaded or weights uploaded. */
    if ((st = precheck_arm("a", cfg.arm_a, &err)) != MEMRA_OK || (st = precheck_arm("b", cfg.arm_b, &err)) != MEMRA_OK) {
        v.exit = GATE_EXIT_USAGE;
        goto fail;
    }

    st = memra_model_load(cfg.model_path, cfg.model_path ? NULL : cfg.preset, cfg.dtype, 1, &lm, &err);
    if (st != MEMRA_OK) {
        v.exit = exit_for(st);
        goto fail;
    }
    ctx.lm = lm;
    if ((st = memra_model_digest(lm, model_sha, &err)) != MEMRA_OK) {
        v.exit = GATE_EXIT_RUNTIME;
        goto fail;
    }
    const uint32_t n_vocab = lm->model->n_vocab;
    if (cfg.prompt_ids_path) {
        if ((st = read_prompt(cfg.prompt_ids_path, n_vocab, &prompt, &n_prompt, &err)) != MEMRA_OK) {
            v.exit = exit_for(st);
            goto fail;
        }
        if (!cfg.prime_given)
            cfg.prime = n_prompt;
        if (n_prompt < cfg.prime) {
            st = memra_fail(&err, MEMRA_E_INVALID, "--prompt-ids %s holds %u ids, fewer than --prime %u",
                            cfg.prompt_ids_path, n_prompt, cfg.prime);
            v.exit = GATE_EXIT_USAGE;
            goto fail;
        }
        /* The file may have set prime after the command line's step limit was checked. */
        if ((uint64_t)cfg.prime + cfg.gen > GATE_MAX_STEPS) {
            st = memra_fail(&err, MEMRA_E_INVALID, "--prompt-ids %s sets --prime %u: plus --gen %u is more than %u steps",
                            cfg.prompt_ids_path, cfg.prime, cfg.gen, GATE_MAX_STEPS);
            v.exit = GATE_EXIT_USAGE;
            goto fail;
        }
    } else {
        prompt = malloc((size_t)cfg.prime * sizeof *prompt);
        if (!prompt) {
            st = memra_fail(&err, MEMRA_E_NOMEM, "out of memory for %u prompt ids", cfg.prime);
            v.exit = GATE_EXIT_RUNTIME;
            goto fail;
        }
        for (uint32_t i = 0; i < cfg.prime; i++)
            prompt[i] = (uint32_t)((100u + (7ull * i) % 900u) % n_vocab);
    }
    memra_sha256_tokens(prompt, cfg.prime, prompt_sha);
    ctx.prompt = prompt;

    if ((st = open_arm(reg, lm, "a", cfg.arm_a, &ctx.a, &v.exit, &err)) != MEMRA_OK ||
        (st = open_arm(reg, lm, "b", cfg.arm_b, &ctx.b, &v.exit, &err)) != MEMRA_OK)
        goto fail;
    ctx.arms_identical = arms_identical(&ctx.a, &ctx.b);
    v.arms_identical = ctx.arms_identical;
    if (ctx.arms_identical && !cfg.quiet) /* --quiet: the records say it ("arms_identical") */
        fprintf(stderr, "memra-gate: warning: arms a and b resolve to the same configuration: the comparison proves "
                        "determinism only (%s)\n",
                memra_arm_text(ctx.a.arm));

    const uint32_t steps = cfg.prime + cfg.gen;
    if ((st = gate_trace_alloc(&ctx.ref, steps, n_vocab, true, &err)) != MEMRA_OK ||
        (st = gate_trace_alloc(&ctx.rep, steps, n_vocab, false, &err)) != MEMRA_OK) {
        v.exit = GATE_EXIT_RUNTIME;
        goto fail;
    }
    protocol_record(&ctx, model_sha, prompt_sha);
    if ((st = gate_reference(&ctx, &err)) != MEMRA_OK || (st = gate_replay(&ctx, &err)) != MEMRA_OK) {
        v.exit = exit_for(st) == GATE_EXIT_USAGE ? GATE_EXIT_RUNTIME : exit_for(st);
        goto fail;
    }
    /* Time only what was verified: no timing after a mismatch, and in nmse mode only when both
     * arms produce the same stream (otherwise the rows would time different work). */
    if (cfg.profile && ctx.out.bad_steps == 0 && (st = gate_profile(&ctx, &err)) != MEMRA_OK) {
        v.exit = GATE_EXIT_RUNTIME;
        goto fail;
    }
    /* Without timing rows no pass would take its tokens from the device: the carry check does. */
    if (cfg.rows == 0 && ctx.out.bad_steps == 0 && (st = gate_carry_check(&ctx, &err)) != MEMRA_OK) {
        v.exit = GATE_EXIT_RUNTIME;
        goto fail;
    }
    if (cfg.rows && ctx.out.bad_steps == 0) {
        if (cfg.nmse && ctx.out.token_agree != ctx.out.token_total) {
            snprintf(ctx.out.ineligible, sizeof ctx.out.ineligible,
                     "the arms' generated tokens agree at %u of %u steps: their rows would time different work",
                     ctx.out.token_agree, ctx.out.token_total);
            timing_ok = false;
        }
        if (timing_ok && (st = gate_timing(&ctx, &err)) != MEMRA_OK) {
            v.exit = GATE_EXIT_RUNTIME;
            goto fail;
        }
    }
    summary_record(&ctx);
    judge(&ctx, &v);
    verdict_record(&ctx.json, &cfg, &v);
    if (!cfg.quiet)
        summary_table(&ctx, model_sha, &v);
    goto done;

fail:
    snprintf(v.reason, sizeof v.reason, "%s", err.msg[0] ? err.msg : memra_status_name(st));
    fprintf(stderr, "memra-gate: %s: %s\n", v.exit == GATE_EXIT_USAGE ? "usage error" : "error", v.reason);
    if (v.exit == GATE_EXIT_USAGE)
        fprintf(stderr, "memra-gate: see memra-gate --help\n");
    verdict_record(&ctx.json, &cfg, &v);
done:
    gate_trace_free(&ctx.ref);
    gate_trace_free(&ctx.rep);
    free(ctx.out.rows);
    if (ctx.b.arm)
        memra_arm_close(ctx.b.arm);
    if (ctx.a.arm)
        memra_arm_close(ctx.a.arm);
    free(prompt);
    if (lm)
        memra_model_unload(lm);
    if (reg)
        memra_registry_close(reg);
    if (ctx.json.f && ctx.json.f != stdout)
        fclose(ctx.json.f);
    return v.exit;
}
