/* gate_records.c: every JSON-line record memra-gate writes, in one place: protocol, step,
 * mismatch (one shape for the replay, a timing row, the carry check and a profile window),
 * census, refusal, measure, carry_check, profile, summary, verdict. gates/RECORDS.md documents each field
 * and when each record is written; tests/gate (gate_records) checks that every field a run
 * writes is documented there and that no other file of gates/ begins a record. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gate.h"
#include "memra_commit.h"

/* ------------------------------------------------------------------------------------------ */
/* protocol                                                                                    */

static void memory_json(gate_json *j, const char *key, const memra_backend_memory *mem) {
    gj_obj(j, key);
    gj_u64(j, "weight_bytes", mem->weight_bytes);
    gj_u64(j, "cache_bytes", mem->cache_bytes);
    gj_u64(j, "scratch_bytes", mem->scratch_bytes);
    gj_u64(j, "device_in_use", mem->device_in_use);
    gj_obj_end(j);
}

/* One plugin's provenance as the registry recorded it when it loaded the file. */
static void provenance_json(gate_json *j, const char *key, const memra_registry *r, const memra_plugin *p) {
    const memra_loaded_plugin *lp = r && p ? memra_registry_provenance(r, p) : NULL;
    if (!lp) {
        gj_null(j, key);
        return;
    }
    gj_obj(j, key);
    gj_str(j, "name", lp->name ? lp->name : "");
    gj_str(j, "version", lp->version ? lp->version : "");
    gj_str(j, "path", lp->path ? lp->path : "");
    gj_hex(j, "sha256", lp->sha256);
    gj_obj_end(j);
}

static void arm_json(gate_json *j, const gate_arm *a, const memra_registry *r) {
    gj_obj(j, a->name);
    gj_str(j, "text", memra_arm_text(a->arm));
    gj_str(j, "backend", memra_arm_backend_name(a->arm));
    const memra_plugin *p = memra_arm_plugin(a->arm);
    gj_str(j, "backend_version", p && p->version ? p->version : "");
    gj_obj(j, "provenance");
    provenance_json(j, "backend", r, p);
    provenance_json(j, "placement", r, memra_arm_placement_plugin(a->arm));
    gj_obj_end(j);
    gj_obj(j, "resolved");
    const memra_options *o = memra_arm_resolved(a->arm);
    for (uint32_t i = 0; o && i < o->n; i++)
        gj_str(j, o->items[i].key, o->items[i].value);
    gj_obj_end(j);
    char full[MEMRA_ARM_TEXT_MAX]; /* holds every resolved text whole */
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
    bool have = false;
    if (memra_arm_memory(a->arm, &mem, &have, NULL) == MEMRA_OK && have)
        memory_json(j, "memory", &mem);
    if (a->have_mem_open) /* read right after this arm opened (for a: before b opened) */
        memory_json(j, "memory_at_open", &a->mem_open);
    if (a->tp.on) {
        gj_obj(j, "tp");
        gj_str(j, "collective", a->tp.collective);
        gj_bool(j, "refusals", a->tp.refusals);
        gj_obj_end(j);
    } else {
        gj_null(j, "tp");
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
        gj_str(j, "reason",
               added < (int64_t)w ? "b's open added less device memory than its weight bytes"
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

static void sampling_json(gate_json *j, const gate_config *cfg) {
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
}

/* What the timing rows' clock covers, where a graph backend's first capture falls, what checks
 * the device-carried tokens, and --profile's windows. */
static void passes_json(gate_json *j, const gate_config *cfg) {
    gj_str(j, "timing_scope", GATE_TIMING_SCOPE);
    if (cfg->rows) {
        gj_bool(j, "first_scored_capture_inside_timing", true);
        gj_str(j, "scored_state",
               "each arm's scored state is created before the rows and stepped only inside "
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
        gj_str(j, "profile_order",
               "after the correctness passes, arm a's window then arm b's; each from a "
               "restore of the arm's prefix snapshot after one warm-up step from it, tokens "
               "carried on the device; no timing row and no ratio");
    }
}

/* Every plugin the run's registry loaded (the arms' backends, placements and samplers, and those
 * one plugin loaded through the host table), with the file's SHA-256; and the registry's
 * warnings about its search. */
static void plugins_json(gate_json *j, const memra_registry *r) {
    gj_arr(j, "plugins");
    for (uint32_t i = 0; r && i < memra_registry_loaded_count(r); i++) {
        const memra_loaded_plugin *p = memra_registry_loaded_at(r, i);
        if (!p)
            continue;
        gj_obj(j, NULL);
        gj_str(j, "name", p->name ? p->name : "");
        gj_str(j, "kind", memra_plugin_kind_name(p->kind));
        gj_str(j, "version", p->version ? p->version : "");
        gj_str(j, "path", p->path ? p->path : "");
        gj_hex(j, "sha256", p->sha256);
        gj_bool(j, "from_env", p->from_env);
        gj_bool(j, "shadows", p->shadows);
        gj_obj_end(j);
    }
    gj_arr_end(j);
    gj_arr(j, "plugin_warnings");
    for (uint32_t i = 0; r && i < memra_registry_warning_count(r); i++)
        gj_str(j, NULL, memra_registry_warning_at(r, i));
    gj_arr_end(j);
}

void gate_rec_protocol(gate_ctx *ctx) {
    const gate_config *cfg = ctx->cfg;
    char blocks[512];
    const memra_model *m = ctx->lm->model;
    gate_json *j = &ctx->json;
    gj_begin(j, "protocol");
    gj_str(j, "tool", "memra-gate");
    gj_str(j, "memra_version", memra_version());
    gj_str(j, "commit", MEMRA_GIT_COMMIT); /* as memra bench's records carry it */
    gj_u64(j, "prime", cfg->prime);
    gj_u64(j, "gen", cfg->gen);
    gj_u64(j, "rows", cfg->rows);
    gj_str(j, "schedule", cfg->baab ? "BAAB" : "ABBA");
    gj_str(j, "blocks", schedule_blocks(cfg, blocks, sizeof blocks));
    sampling_json(j, cfg);
    gj_str(j, "compare", cfg->compare_text);
    if (cfg->nmse)
        gj_f64(j, "nmse_tolerance", cfg->nmse_tol);
    gj_bool(j, "arms_identical", ctx->arms_identical);
    gj_str(j, "differ_by_design", ctx->by_design[0] ? ctx->by_design : NULL);
    gj_str(j, "cells", cfg->cells == GATE_CELLS_NONE ? "none" : cfg->cells == GATE_CELLS_ALL ? "all" : "some");
    gj_bool(j, "auto_arms", cfg->auto_arms);
    if (cfg->auto_arms)
        gj_str(j, "auto_reason", cfg->auto_reason);
    gj_obj(j, "arms");
    arm_json(j, &ctx->a, ctx->reg);
    arm_json(j, &ctx->b, ctx->reg);
    gj_obj_end(j);
    shared_upload_json(j, &ctx->a, &ctx->b);
    plugins_json(j, ctx->reg);
    passes_json(j, cfg);
    if (cfg->dump_dir)
        gj_str(j, "dump_graphs", cfg->dump_dir);
    else
        gj_null(j, "dump_graphs");
    gj_obj(j, "model");
    gj_str(j, "label", ctx->lm->label);
    gj_str(j, "name", m->name ? m->name : "");
    gj_hex(j, "sha256", ctx->model_sha);
    gj_str(j, "arch", m->arch_name);
    gj_u64(j, "n_vocab", m->n_vocab);
    gj_u64(j, "n_layer", m->n_layer);
    gj_u64(j, "n_embd", m->n_embd);
    gj_i64(j, "eos_id", m->eos_id);
    gj_u64(j, "context_length", m->n_ctx_train);
    gj_arr(j, "eog_ids");
    for (uint32_t i = 0; i < ctx->n_eog; i++)
        gj_i64(j, NULL, ctx->eog[i]);
    gj_arr_end(j);
    gj_obj_end(j);
    gj_obj(j, "load");
    gj_str(j, "mode", ctx->lm->streamed ? "streamed" : "whole");
    gj_f64(j, "seconds", ctx->lm->open_s + ctx->a.open_s + ctx->b.open_s);
    gj_f64(j, "model_open_s", ctx->lm->open_s);
    gj_f64(j, "a_open_s", ctx->a.open_s);
    gj_f64(j, "b_open_s", ctx->b.open_s);
    gj_u64(j, "resident_bytes", memra_gguf_resident_bytes(ctx->lm->gguf));
    gj_u64(j, "file_bytes", memra_gguf_file_size(ctx->lm->gguf));
    gj_obj_end(j);
    gj_bool(j, "past_context", (uint64_t)cfg->prime + cfg->gen > m->n_ctx_train);
    gj_bool(j, "allow_past_context", cfg->past_context);
    gj_obj(j, "prompt");
    gj_str(j, "source",
           cfg->prompt_text       ? "--prompt"
           : cfg->prompt_file     ? "--prompt-file"
           : cfg->prompt_ids_path ? cfg->prompt_ids_path
                                  : "default: (100 + 7i mod 900) mod n_vocab");
    if (cfg->prompt_text) {
        gj_str(j, "text", cfg->prompt_text);
        gj_u64(j, "n_tokens", cfg->prompt_tokens);
    }
    if (cfg->prompt_file) {
        gj_str(j, "file", cfg->prompt_file);
        gj_u64(j, "text_bytes", cfg->prompt_file_bytes);
        gj_u64(j, "n_tokens", cfg->prompt_tokens);
    }
    gj_hex(j, "sha256", ctx->prompt_sha);
    gj_obj_end(j);
    gj_str(j, "step_order", "forward, collective check, commit, head, sample, readback");
    gj_str(j, "replay_inputs", "the reference's tokens, explicit (never the device's)");
    gj_str(j, "digest_points", "every step of a serial arm; where a pipelined arm drains (end of prime, end of gen)");
    gj_str(j, "loop_rule", "last min(64, N) generated tokens periodic with a period p <= 16, repeated at least twice");
    gj_end(j);
}

/* ------------------------------------------------------------------------------------------ */
/* step                                                                                        */

void gate_rec_step(gate_ctx *ctx, uint32_t s, const gate_logit_diff *d, bool ok, bool digests_compared) {
    gate_json *j = &ctx->json;
    const gate_trace *ref = &ctx->ref, *rep = &ctx->rep;
    gj_begin(j, "step");
    gj_u64(j, "step", s);
    gj_str(j, "phase", gate_phase_name(ctx->cfg, s));
    gj_u64(j, "phase_step", gate_phase_index(ctx->cfg, s));
    gj_i64(j, "input", ref->inputs[s]);
    gj_i64(j, "token", ref->tokens[s]);
    gj_i64(j, "b_token", rep->tokens[s]);
    gj_hex(j, "logits_sha256", ref->logits_sha[s]);
    gj_hex(j, "b_logits_sha256", rep->logits_sha[s]);
    gj_hex(j, "cache_sha256", ref->has_digest[s] ? ref->digest_cache[s] : NULL);
    gj_hex(j, "b_cache_sha256", rep->has_digest[s] ? rep->digest_cache[s] : NULL);
    gj_hex(j, "hidden_sha256", ref->has_digest[s] ? ref->digest_hidden[s] : NULL);
    gj_hex(j, "b_hidden_sha256", rep->has_digest[s] ? rep->digest_hidden[s] : NULL);
    gj_u64(j, "differing_logits", d->n_diff);
    gj_u64(j, "max_ulp", d->max_ulp);
    gj_f64(j, "nmse", d->nmse);
    gj_bool(j, "digests_compared", digests_compared);
    gj_bool(j, "ok", ok);
    gj_end(j);
}

/* ------------------------------------------------------------------------------------------ */
/* mismatch: one shape for the replay, a timing row, the carry check and a profile window      */

static void json_float(gate_json *j, const char *key, float v) {
    char bits[16];
    snprintf(bits, sizeof bits, "0x%08" PRIx32, memra_f32_to_bits(v));
    gj_obj(j, key);
    gj_f64(j, "value", v);
    gj_str(j, "bits", bits);
    if (!isfinite(v))
        gj_str(j, "class", isnan(v) ? "nan" : v > 0 ? "+inf" : "-inf");
    gj_obj_end(j);
}

static void opt_i64(gate_json *j, const char *key, int64_t v) {
    if (v >= 0)
        gj_i64(j, key, v);
    else
        gj_null(j, key);
}

/* The logit comparison's members: values where the logits were compared, null elsewhere. */
static void diff_json(gate_json *j, const gate_mismatch *m) {
    static const char *const keys[] = {"differing_logits",
                                       "index",
                                       "ref",
                                       "got",
                                       "max_ulp",
                                       "max_ulp_index",
                                       "nmse",
                                       "argmax_ref",
                                       "argmax_got",
                                       "argmax_differs",
                                       "nonfinite_ref",
                                       "nonfinite_got",
                                       "first_nonfinite_got",
                                       "first_nonfinite_ref"};
    if (!m->have_diff) {
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            gj_null(j, keys[i]);
        return;
    }
    const gate_logit_diff *d = &m->diff;
    gj_u64(j, "differing_logits", d->n_diff);
    if (d->first_index >= 0) {
        gj_i64(j, "index", d->first_index);
        json_float(j, "ref", d->first_ref);
        json_float(j, "got", d->first_got);
    } else {
        gj_null(j, "index");
        gj_null(j, "ref");
        gj_null(j, "got");
    }
    gj_u64(j, "max_ulp", d->max_ulp);
    opt_i64(j, "max_ulp_index", d->max_ulp_index);
    gj_f64(j, "nmse", d->nmse);
    gj_u64(j, "argmax_ref", d->argmax_ref);
    gj_u64(j, "argmax_got", d->argmax_got);
    gj_bool(j, "argmax_differs", d->argmax_ref != d->argmax_got);
    gj_u64(j, "nonfinite_ref", d->n_nonfinite_ref);
    gj_u64(j, "nonfinite_got", d->n_nonfinite_got);
    opt_i64(j, "first_nonfinite_got", d->first_nonfinite_got);
    opt_i64(j, "first_nonfinite_ref", d->first_nonfinite_ref);
}

void gate_rec_mismatch(gate_ctx *ctx, const gate_mismatch *m) {
    gate_json *j = &ctx->json;
    gj_begin(j, "mismatch");
    gj_str(j, "where", m->where);
    gj_str(j, "arm", m->arm);
    gj_str(j, "against", m->against);
    opt_i64(j, "row", m->row);
    opt_i64(j, "step", m->step);
    if (m->step >= 0) {
        gj_str(j, "phase", gate_phase_name(ctx->cfg, (uint32_t)m->step));
        gj_u64(j, "phase_step", gate_phase_index(ctx->cfg, (uint32_t)m->step));
    } else {
        gj_null(j, "phase");
        gj_null(j, "phase_step");
    }
    opt_i64(j, "input", m->input);
    gj_arr(j, "what");
    const struct {
        bool on;
        const char *name;
    } what[] = {{m->logits, "logits"}, {m->nmse_over, "nmse"}, {m->nonfinite, "nonfinite"},
                {m->token, "token"},   {m->warmup, "warmup"},  {m->position, "position"},
                {m->cache, "cache"},   {m->hidden, "hidden"},  {m->digest_logits, "logits_digest"}};
    for (size_t i = 0; i < sizeof what / sizeof what[0]; i++)
        if (what[i].on)
            gj_str(j, NULL, what[i].name);
    gj_arr_end(j);
    gj_str(j, "reason", m->reason);
    opt_i64(j, "token_ref", m->token_ref);
    opt_i64(j, "token_got", m->token_got);
    diff_json(j, m);
    gj_hex(j, "cache_ref", m->have_digests ? m->cache_ref : NULL);
    gj_hex(j, "cache_got", m->have_digests ? m->cache_got : NULL);
    gj_hex(j, "hidden_ref", m->have_digests ? m->hidden_ref : NULL);
    gj_hex(j, "hidden_got", m->have_digests ? m->hidden_got : NULL);
    gj_bool(j, "first", m->first);
    gj_end(j);
}

/* ------------------------------------------------------------------------------------------ */
/* bisect                                                                                      */

static void bisect_arm_json(gate_json *j, const char *key, const gate_bisect *b, int i) {
    const gate_bisect_arm *a = &b->arm[i];
    gj_obj(j, key);
    gj_bool(j, "reproduced", a->reproduced);
    gj_u64(j, "sites", a->sites);
    if (b->found) {
        float v = i ? b->diff.first_got : b->diff.first_ref;
        json_float(j, "value", v);
        gj_u64(j, "stage", a->stage);
        gj_u64(j, "ranks", a->n_ranks);
        if (a->rank >= 0)
            gj_i64(j, "rank", a->rank);
        else
            gj_null(j, "rank");
        gj_hex(j, "tensor_sha256", a->sha);
    } else {
        gj_null(j, "value");
        gj_null(j, "stage");
        gj_null(j, "ranks");
        gj_null(j, "rank");
        gj_null(j, "tensor_sha256");
    }
    gj_obj_end(j);
}

void gate_rec_bisect(gate_ctx *ctx, const gate_bisect *b) {
    gate_json *j = &ctx->json;
    gj_begin(j, "bisect");
    opt_i64(j, "step", b->step);
    opt_i64(j, "input", b->input);
    gj_str(j, "from",
           "fresh states of both arms fed the reference's inputs 0..step-1 as each ran them (a chunked prime in its "
           "chunks), then the step with taps on");
    gj_str(j, "criterion", ctx->cfg->nmse ? "nmse" : "exact");
    gj_bool(j, "available", b->available);
    gj_bool(j, "done", b->done);
    gj_bool(j, "found", b->found);
    gj_u64(j, "agreed", b->agreed);
    gj_str(j, "last_agreed", b->prev[0] ? b->prev : NULL);
    if (b->found) {
        if (b->layer >= 0)
            gj_i64(j, "layer", b->layer);
        else
            gj_str(j, "layer", "head");
        gj_str(j, "site", b->site);
        gj_str(j, "tensor", b->tensor);
        gj_u64(j, "elements", b->n);
        gj_u64(j, "differing", b->diff.n_diff);
        opt_i64(j, "index", b->diff.first_index);
        gj_u64(j, "ulp", b->ulp);
        gj_f64(j, "nmse", b->diff.nmse);
    } else {
        const char *absent[] = {"layer", "site", "tensor", "elements", "differing", "index", "ulp", "nmse"};
        for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
            gj_null(j, absent[i]);
    }
    bisect_arm_json(j, "a", b, 0);
    bisect_arm_json(j, "b", b, 1);
    gj_str(j, "cause", b->cause[0] ? b->cause : NULL);
    gj_str(j, "note", b->note[0] ? b->note : NULL);
    gj_end(j);
}

/* ------------------------------------------------------------------------------------------ */
/* census                                                                                      */

/* The epoch census of a tensor-parallel arm's correctness pass: per (stage, rank) the epochs at the
 * end and what they were expected to be (those at the start plus the steps counted, for the
 * blocks of the stage's layers). */
static void epochs_json(gate_json *j, const gate_arm *arm) {
    const gate_tp *t = &arm->tp;
    gj_obj(j, "epochs");
    gj_str(j, "collective", t->collective);
    gj_u64(j, "steps", t->steps);
    gj_u64(j, "checks", t->checks);
    gj_u64(j, "per_step", 1);
    gj_u64(j, "failures", t->failures);
    gj_str(j, "failure", t->failures ? t->failure : NULL);
    gj_arr(j, "ranks");
    for (uint32_t s = 0; s < t->n_stages; s++)
        for (uint32_t r = 0; r < t->ranks[s] && r < MEMRA_MAX_RANKS; r++) {
            const size_t base = ((size_t)s * MEMRA_MAX_RANKS + r) * t->n_blocks;
            gj_obj(j, NULL);
            gj_u64(j, "stage", s);
            gj_u64(j, "rank", r);
            gj_arr(j, "epochs");
            for (uint32_t b = 0; b < t->n_blocks; b++)
                gj_u64(j, NULL, t->last[base + b]);
            gj_arr_end(j);
            gj_arr(j, "expected");
            for (uint32_t b = 0; b < t->n_blocks; b++)
                gj_u64(j, NULL, t->start[base + b] + t->expected[base + b]);
            gj_arr_end(j);
            gj_obj_end(j);
        }
    gj_arr_end(j);
    gj_obj_end(j);
}

void gate_rec_census(gate_ctx *ctx, const gate_arm *arm, const char *scope, const memra_census_row *rows,
                     uint32_t n_rows, const char *error, const memra_state_stats *stats, const gate_dump_result *dump) {
    gate_json *j = &ctx->json;
    gj_begin(j, "census");
    gj_str(j, "arm", arm->name);
    gj_str(j, "scope", scope);
    if (error) {
        gj_str(j, "error", error);
    } else if (rows) {
        gj_arr(j, "rows");
        for (uint32_t i = 0; i < n_rows; i++) {
            char kind[sizeof rows[i].kind];
            memcpy(kind, rows[i].kind, sizeof kind);
            kind[sizeof kind - 1] = '\0';
            gj_obj(j, NULL);
            gj_str(j, "kind", kind);
            gj_u64(j, "count", rows[i].count);
            gj_obj_end(j);
        }
        gj_arr_end(j);
    }
    gj_u64(j, "steps", stats->steps);
    gj_u64(j, "captures", stats->captures);
    gj_u64(j, "replays", stats->replays);
    if (dump) {
        gj_str(j, "dump_dir", dump->dir);
        if (dump->failed) {
            gj_str(j, "dump_error", dump->error);
        } else {
            gj_arr(j, "dumped");
            for (uint32_t i = 0; i < dump->n_files; i++)
                gj_str(j, NULL, dump->files[i]);
            gj_arr_end(j);
            gj_u64(j, "dumped_count", dump->n_files);
        }
    }
    if (arm->tp.on && strcmp(scope, "correctness") == 0)
        epochs_json(j, arm);
    gj_end(j);
}

/* ------------------------------------------------------------------------------------------ */
/* refusal                                                                                     */

static void digests_json(gate_json *j, const char *key, const uint8_t d[3][32], bool have) {
    if (!have) {
        gj_null(j, key);
        return;
    }
    gj_obj(j, key);
    gj_hex(j, "logits_sha256", d[0]);
    gj_hex(j, "cache_sha256", d[1]);
    gj_hex(j, "hidden_sha256", d[2]);
    gj_obj_end(j);
}

void gate_rec_refusal(gate_ctx *ctx, const gate_arm *arm, const gate_cell *c) {
    gate_json *j = &ctx->json;
    gj_begin(j, "refusal");
    gj_str(j, "arm", arm->name);
    gj_str(j, "arm_text", memra_arm_text(arm->arm));
    gj_str(j, "collective", arm->tp.collective);
    gj_obj(j, "cell");
    gj_u64(j, "index", c->index);
    gj_u64(j, "stage", c->stage);
    gj_u64(j, "rank", c->rank);
    gj_u64(j, "layer", c->layer);
    gj_str(j, "which", c->which ? "ffn" : "attention");
    gj_u64(j, "block", c->block);
    gj_u64(j, "position", c->position);
    gj_obj_end(j);
    gj_i64(j, "word", c->word);
    gj_obj(j, "expected");
    gj_str(j, "status", memra_status_name(MEMRA_E_REFUSED));
    gj_str(j, "message", c->expected);
    gj_obj_end(j);
    gj_obj(j, "observed");
    gj_str(j, "status", memra_status_name(c->status));
    gj_str(j, "message", c->message);
    gj_bool(j, "names_cell", c->names_cell);
    gj_bool(j, "names_word", c->names_word);
    gj_obj_end(j);
    gj_u64(j, "start_position", c->start_position);
    gj_u64(j, "position_before", c->position_before);
    gj_u64(j, "position_after", c->position_after);
    digests_json(j, "digests_before", c->before, c->have_before);
    digests_json(j, "digests_after", c->after, c->have_after);
    gj_bool(j, "digests_unchanged", c->digests_unchanged);
    gj_obj(j, "quarantine");
    gj_bool(j, "quarantined", c->quarantined);
    gj_str(j, "next_step", memra_status_name(c->next_step));
    gj_str(j, "restore", memra_status_name(c->restore));
    gj_obj_end(j);
    gj_bool(j, "quarantine_observed", c->quarantine_observed);
    gj_bool(j, "pass", c->pass);
    gj_str(j, "reason", c->pass ? NULL : c->reason);
    gj_end(j);
}

/* ------------------------------------------------------------------------------------------ */
/* measure, carry_check                                                                        */

static void stats_json(gate_json *j, const char *key, const memra_state_stats *s) {
    gj_obj(j, key);
    gj_u64(j, "steps", s->steps);
    gj_u64(j, "captures", s->captures);
    gj_u64(j, "replays", s->replays);
    gj_obj_end(j);
}

/* The digest of the correctness run's tokens [from, from + n), as memra_sha256_tokens forms a
 * pass's; false (and no digest) when there is no memory for the copy. */
static bool trace_tokens_sha(const gate_trace *trace, uint32_t from, uint32_t n, uint8_t out[32]) {
    uint32_t *t = malloc((size_t)n * sizeof *t + 1); /* + 1: never a request of 0 bytes */
    if (!t)
        return false;
    for (uint32_t i = 0; i < n; i++)
        t[i] = (uint32_t)trace->tokens[from + i];
    memra_sha256_tokens(t, n, out);
    free(t);
    return true;
}

/* The members a measure and a carry_check record share: the pass's tokens and final digests. */
static void pass_digests_json(gate_ctx *ctx, const gate_pass *pass, const gate_trace *trace) {
    gate_json *j = &ctx->json;
    uint8_t got[32], want[32];
    memra_sha256_tokens(pass->tokens, pass->steps, got);
    const bool have_want = trace_tokens_sha(trace, ctx->cfg->prime, pass->steps, want);
    gj_hex(j, "tokens_sha256", got);
    gj_hex(j, "expected_tokens_sha256", have_want ? want : NULL);
    gj_hex(j, "final_logits_sha256", pass->final[0]);
    gj_hex(j, "final_cache_sha256", pass->final[1]);
    gj_hex(j, "final_hidden_sha256", pass->final[2]);
}

void gate_rec_measure(gate_ctx *ctx, const gate_arm *arm, const gate_timing_row *row, const gate_pass *pass,
                      const gate_trace *trace, bool first_row) {
    gate_json *j = &ctx->json;
    gj_begin(j, "measure");
    gj_u64(j, "row", row->row);
    gj_str(j, "arm", arm->name);
    gj_str(j, "arm_text", memra_arm_text(arm->arm));
    gj_u64(j, "generated_tokens", pass->steps);
    gj_u64(j, "wall_ns", row->wall_ns);
    gj_f64(j, "tok_s", row->tok_s);
    gj_str(j, "timing_scope", GATE_TIMING_SCOPE);
    gj_bool(j, "first_row_of_arm", first_row);
    gj_bool(j, "verified", row->verified);
    gj_bool(j, "eligible", row->eligible);
    gj_str(j, "reason", row->reason[0] ? row->reason : NULL);
    pass_digests_json(ctx, pass, trace);
    /* the scored state's counters before the row (after its restore) and after it */
    stats_json(j, "stats_before", &pass->before);
    stats_json(j, "stats", &pass->after);
    gj_end(j);
}

void gate_rec_carry_check(gate_ctx *ctx, const gate_arm *arm, const gate_pass *pass, const gate_trace *trace) {
    gate_json *j = &ctx->json;
    gj_begin(j, "carry_check");
    gj_str(j, "arm", arm->name);
    gj_str(j, "arm_text", memra_arm_text(arm->arm));
    gj_u64(j, "start_position", ctx->cfg->prime);
    gj_u64(j, "generated_tokens", pass->steps);
    gj_bool(j, "timed", false);
    gj_str(j, "what",
           "from the arm's prefix snapshot, the generated steps with tokens carried on the device, as a "
           "timing row runs them, verified against the arm's correctness run");
    gj_bool(j, "verified", pass->verified);
    gj_str(j, "reason", pass->verified ? NULL : pass->miss.reason);
    pass_digests_json(ctx, pass, trace);
    gj_end(j);
}

/* ------------------------------------------------------------------------------------------ */
/* profile                                                                                     */

void gate_rec_profile(gate_ctx *ctx, const gate_arm *arm, const gate_pass *warmup, const gate_pass *w,
                      const char *range, bool tokens_same, bool digests_same, bool identical, bool verified) {
    const uint32_t P = ctx->cfg->prime;
    const gate_trace *trace = arm == &ctx->a ? &ctx->ref : &ctx->rep;
    uint8_t tokens_sha[32];
    memra_sha256_tokens(w->tokens, w->steps, tokens_sha);
    gate_json *j = &ctx->json;
    gj_begin(j, "profile");
    gj_str(j, "arm", arm->name);
    gj_str(j, "arm_text", memra_arm_text(arm->arm));
    gj_u64(j, "steps", w->steps);
    gj_u64(j, "start_position", P);
    gj_u64(j, "end_position", w->end);
    gj_bool(j, "scored", false);
    gj_hex(j, "tokens_sha256", tokens_sha);
    gj_bool(j, "tokens_identical", tokens_same);
    if (ctx->cfg->nmse)
        gj_null(j, "digests_identical"); /* not compared across families */
    else
        gj_bool(j, "digests_identical", digests_same);
    gj_bool(j, "identical", identical);
    gj_bool(j, "verified", verified);
    gj_u64(j, "compared_with_correctness_run", w->compared);
    gj_bool(j, "agrees_with_correctness_run", !w->miss.token);
    gj_hex(j, "final_logits_sha256", w->final[0]);
    gj_hex(j, "final_cache_sha256", w->final[1]);
    gj_hex(j, "final_hidden_sha256", w->final[2]);
    gj_obj(j, "warmup");
    gj_u64(j, "position", P);
    gj_i64(j, "token", warmup->tokens[0]);
    gj_i64(j, "expected", trace->tokens[P]);
    gj_bool(j, "ok", (int64_t)warmup->tokens[0] == trace->tokens[P]);
    gj_obj_end(j);
    gj_u64(j, "captures_in_window", w->after.captures - w->before.captures);
    gj_u64(j, "replays_in_window", w->after.replays - w->before.replays);
    gj_bool(j, "capture_outside_window", w->after.captures == w->before.captures);
    gj_bool(j, "nvtx", gate_have_nvtx());
    gj_str(j, "nvtx_range", range);
    gj_end(j);
}

/* ------------------------------------------------------------------------------------------ */
/* summary                                                                                     */

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

static void timing_summary_json(gate_ctx *ctx) {
    const gate_outcome *o = &ctx->out;
    gate_json *j = &ctx->json;
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

void gate_rec_summary(gate_ctx *ctx) {
    const gate_outcome *o = &ctx->out;
    const gate_config *cfg = ctx->cfg;
    gate_json *j = &ctx->json;
    gj_begin(j, "summary");
    gj_u64(j, "steps", ctx->ref.steps);
    gj_u64(j, "steps_compared", o->steps_compared);
    gj_u64(j, "bad_steps", o->bad_steps);
    gj_u64(j, "nonfinite_steps", o->nonfinite_steps);
    if (o->have_first) {
        gj_obj(j, "first_mismatch");
        gj_u64(j, "step", (uint64_t)o->first.step);
        gj_str(j, "phase", gate_phase_name(cfg, (uint32_t)o->first.step));
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
    gj_str(j, "speed", o->speed);
    gj_u64(j, "rows", o->n_rows);
    gj_u64(j, "row_failures", o->row_failures);
    gj_u64(j, "rows_ineligible", o->rows_ineligible);
    if (o->timing_done)
        timing_summary_json(ctx);
    if (cfg->profile) {
        gj_obj(j, "profile");
        gj_bool(j, "done", o->profile_done);
        gj_bool(j, "verified", o->profile_done && o->profile_identical);
        gj_u64(j, "start_position", cfg->prime);
        gj_u64(j, "end_position", (uint64_t)cfg->prime + GATE_PROFILE_STEPS);
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
        gj_str(j, "reason",
               cfg->rows ? "the timing rows take their tokens from the device and are verified"
                         : "not run (correctness failed first)");
    }
    gj_obj_end(j);
    gj_u64(j, "digest_steps", o->digest_steps);
    gj_obj(j, "refusal_cells");
    gj_bool(j, "ran", o->cells_done);
    gj_u64(j, "cells", o->cells_run);
    gj_u64(j, "failed", o->cells_failed);
    gj_str(j, "failure", o->cells_failed ? o->cell_failure : NULL);
    gj_obj_end(j);
    gj_obj(j, "epoch_census");
    gj_bool(j, "ran", ctx->a.tp.on || ctx->b.tp.on);
    gj_u64(j, "failures", o->epoch_failures);
    gj_str(j, "failure", o->epoch_failures ? o->epoch_failure : NULL);
    gj_obj_end(j);
    if (cfg->dump_dir) {
        gj_obj(j, "dump_graphs");
        gj_str(j, "dir", cfg->dump_dir);
        gj_u64(j, "files", o->dumped_files);
        gj_obj_end(j);
    }
    gj_end(j);
}

/* ------------------------------------------------------------------------------------------ */
/* verdict                                                                                     */

void gate_rec_verdict(gate_json *j, const gate_config *cfg, const gate_verdict *v) {
    if (!gj_open(j))
        return;
    j->closing = true; /* the final record: tried even after a failed one */
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
/* interrupted                                                                                 */

void gate_rec_interrupted(gate_ctx *ctx, int sig, const gate_verdict *v) {
    gate_json *j = &ctx->json;
    if (!gj_open(j))
        return;
    j->closing = true; /* the final record */
    gj_begin(j, "interrupted");
    gj_str(j, "signal", gate_signal_name(sig));
    gj_i64(j, "signal_number", sig);
    gj_u64(j, "exit", (uint64_t)v->exit);
    gj_str(j, "phase", ctx->phase ? ctx->phase : "setup");
    gj_str(j, "reason", v->reason);
    gj_u64(j, "steps_compared", ctx->out.steps_compared);
    gj_u64(j, "rows", ctx->out.n_rows);
    gj_bool(j, "records_complete", !j->failed);
    gj_end(j);
}
