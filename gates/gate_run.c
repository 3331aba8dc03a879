/* gate_run.c: the three passes of a gate, all through the backend vtable (so a GPU arm needs no
 * change here):
 *   reference  P prime + N generated steps on arm A, every step's logits, digests and token kept;
 *   replay     the identical inputs on arm B (explicit tokens, never the device's), compared
 *              step by step while it runs;
 *   timing     rows in the ABBA schedule, each restored from a prefix snapshot, sampling on the
 *              backend with tokens kept on the device, verified before its time counts.
 * A pipelined arm (window W > 1) keeps up to W steps begun before it ends the oldest, and reads
 * its logits back late, in order. Digests need no step in flight, so a pipelined arm is digested
 * where its pipeline drains (the end of the prime and of the generated phase). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gate.h"

/* gate_step_fn (gate.h) is called after each step ends, in order. `drained`: no step is in
 * flight now. */

static const char *phase_name(const gate_ctx *ctx, uint32_t step) { return step < ctx->cfg->prime ? "prime" : "gen"; }

static uint32_t phase_index(const gate_ctx *ctx, uint32_t step) {
    return step < ctx->cfg->prime ? step : step - ctx->cfg->prime;
}

void gate_progress(gate_ctx *ctx, const char *what, uint32_t done, uint32_t total) {
    if (!ctx->progress || total == 0)
        return;
    uint32_t every = total / 50 ? total / 50 : 1;
    if (done != total && done % every != 0)
        return;
    const int width = 30;
    int fill = (int)((uint64_t)done * width / total);
    fprintf(stderr, "\r  %-28s [%.*s%*s] %u/%u", what, fill, "##############################", width - fill, "", done,
            total);
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

memra_status gate_trace_alloc(gate_trace *t, uint32_t steps, uint32_t n_vocab, bool keep_logits, memra_error *err) {
    memset(t, 0, sizeof *t);
    t->steps = steps;
    t->n_vocab = n_vocab;
    if (keep_logits && (uint64_t)steps * n_vocab > SIZE_MAX / sizeof(float))
        return memra_fail(err, MEMRA_E_NOMEM, "reference logits: %u steps x %u floats overflow", steps, n_vocab);
    if (keep_logits)
        t->logits = malloc((size_t)steps * n_vocab * sizeof(float));
    t->inputs = calloc(steps, sizeof *t->inputs);
    t->tokens = calloc(steps, sizeof *t->tokens);
    t->logits_sha = calloc(steps, sizeof *t->logits_sha);
    t->digest_logits = calloc(steps, sizeof *t->digest_logits);
    t->digest_cache = calloc(steps, sizeof *t->digest_cache);
    t->digest_hidden = calloc(steps, sizeof *t->digest_hidden);
    t->has_digest = calloc(steps, sizeof *t->has_digest);
    if ((keep_logits && !t->logits) || !t->inputs || !t->tokens || !t->logits_sha || !t->digest_logits ||
        !t->digest_cache || !t->digest_hidden || !t->has_digest) {
        gate_trace_free(t);
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory for a trace of %u steps x %u logits", steps, n_vocab);
    }
    return MEMRA_OK;
}

void gate_trace_free(gate_trace *t) {
    free(t->logits);
    free(t->inputs);
    free(t->tokens);
    free(t->logits_sha);
    free(t->digest_logits);
    free(t->digest_cache);
    free(t->digest_hidden);
    free(t->has_digest);
    memset(t, 0, sizeof *t);
}

memra_status gate_take_digests(const gate_arm *arm, memra_state *s, uint8_t logits[32], uint8_t cache[32],
                                 uint8_t hidden[32], memra_error *err) {
    memra_status st = arm->vt->digest(arm->be, s, MEMRA_DIGEST_LOGITS, logits, err);
    if (st == MEMRA_OK)
        st = arm->vt->digest(arm->be, s, MEMRA_DIGEST_CACHE, cache, err);
    if (st == MEMRA_OK)
        st = arm->vt->digest(arm->be, s, MEMRA_DIGEST_HIDDEN, hidden, err);
    if (st != MEMRA_OK)
        memra_error_prefix(err, "arm %s (%s): digest", arm->name, memra_arm_text(arm->arm));
    return st;
}

/* Steps first .. first+count-1 on s, up to arm->window in flight. inputs[step] is each step's
 * token, or inputs == NULL for the token the previous step sampled on the device. logits: a
 * host buffer of n_vocab floats to read each step's logits into, or NULL for none. */
memra_status gate_run_steps(gate_ctx *ctx, const gate_arm *arm, memra_state *s, const int64_t *inputs,
                              uint32_t first, uint32_t count, float *logits, gate_step_fn fn, void *user,
                              memra_error *err) {
    memra_step_args args = {.struct_size = sizeof args, .sample = &ctx->cfg->sample, .want_logits = logits != NULL};
    uint32_t begun = 0, ended = 0;
    memra_status st = MEMRA_OK;
    while (ended < count && st == MEMRA_OK) {
        while (begun < count && begun - ended < arm->window && st == MEMRA_OK) {
            args.token = inputs ? inputs[first + begun] : MEMRA_TOKEN_FROM_DEVICE;
            st = arm->vt->step_begin(arm->be, s, &args, err);
            if (st != MEMRA_OK)
                memra_error_prefix(err, "arm %s (%s): step %u begin", arm->name, memra_arm_text(arm->arm),
                                   first + begun);
            else
                begun++;
        }
        if (st != MEMRA_OK || ended == begun)
            break;
        memra_step_result res = {.struct_size = sizeof res, .token = -1};
        st = arm->vt->step_end(arm->be, s, logits, &res, err);
        if (st != MEMRA_OK) {
            memra_error_prefix(err, "arm %s (%s): step %u end", arm->name, memra_arm_text(arm->arm), first + ended);
            break;
        }
        ended++;
        if (res.token < 0 || res.token >= ctx->ref.n_vocab) {
            st = memra_fail(err, MEMRA_E_INTERNAL,
                            "arm %s (%s): step %u sampled token %" PRId64 ", outside the vocabulary [0, %u)",
                            arm->name, memra_arm_text(arm->arm), first + ended - 1, res.token, ctx->ref.n_vocab);
            break;
        }
        if (fn)
            st = fn(ctx, user, first + ended - 1, logits, &res, begun == ended, err);
    }
    /* On failure, end what is still in flight so the state can be freed cleanly. */
    while (st != MEMRA_OK && ended < begun) {
        memra_step_result res = {.struct_size = sizeof res};
        if (arm->vt->step_end(arm->be, s, NULL, &res, NULL) != MEMRA_OK)
            break;
        ended++;
    }
    return st;
}

memra_status gate_new_state(const gate_ctx *ctx, const gate_arm *arm, uint32_t capacity, memra_state **out,
                            memra_error *err) {
    (void)ctx;
    memra_status st = arm->vt->state_new(arm->be, capacity, arm->window, out, err);
    if (st != MEMRA_OK)
        memra_error_prefix(err, "arm %s (%s): a state of %u positions, %u in flight", arm->name,
                           memra_arm_text(arm->arm), capacity, arm->window);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Reference                                                                                   */

static memra_status reference_step(gate_ctx *ctx, void *user, uint32_t step, const float *logits,
                                   const memra_step_result *res, bool drained, memra_error *err) {
    gate_trace *t = &ctx->ref;
    memra_state *s = user;
    memcpy(t->logits + (size_t)step * t->n_vocab, logits, (size_t)t->n_vocab * sizeof(float));
    memra_sha256(logits, (size_t)t->n_vocab * sizeof(float), t->logits_sha[step]);
    t->tokens[step] = res->token;
    if (drained) {
        memra_status st = gate_take_digests(&ctx->a, s, t->digest_logits[step], t->digest_cache[step],
                                       t->digest_hidden[step], err);
        if (st != MEMRA_OK)
            return st;
        t->has_digest[step] = true;
    }
    gate_progress(ctx, "reference (arm a)", step + 1, t->steps);
    return MEMRA_OK;
}

memra_status gate_reference(gate_ctx *ctx, memra_error *err) {
    gate_trace *t = &ctx->ref;
    const uint32_t P = ctx->cfg->prime, N = ctx->cfg->gen;
    float *logits = malloc((size_t)t->n_vocab * sizeof(float));
    memra_state *s = NULL;
    memra_status st = logits ? gate_new_state(ctx, &ctx->a, ctx->cfg->prime + ctx->cfg->gen, &s, err)
                             : memra_fail(err, MEMRA_E_NOMEM, "out of memory for %u logits", t->n_vocab);
    if (st != MEMRA_OK)
        goto out;
    for (uint32_t i = 0; i < P; i++)
        t->inputs[i] = ctx->prompt[i];
    /* The prime inputs are known: they may be pipelined. */
    st = gate_run_steps(ctx, &ctx->a, s, t->inputs, 0, P, logits, reference_step, s, err);
    /* Each generated input is the token the previous step sampled: one step at a time. */
    for (uint32_t g = 0; g < N && st == MEMRA_OK; g++) {
        t->inputs[P + g] = t->tokens[P + g - 1];
        st = gate_run_steps(ctx, &ctx->a, s, t->inputs, P + g, 1, logits, reference_step, s, err);
    }
    if (st == MEMRA_OK)
        st = gate_census(ctx, &ctx->a, s, "correctness", err);
out:
    if (s)
        ctx->a.vt->state_free(ctx->a.be, s);
    free(logits);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Replay and comparison                                                                       */

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

static void mismatch_record(gate_ctx *ctx, const gate_mismatch *m, const gate_trace *rep) {
    gate_json *j = &ctx->json;
    const gate_trace *ref = &ctx->ref;
    uint32_t s = m->step;
    gj_begin(j, "mismatch");
    gj_str(j, "where", "replay");
    gj_u64(j, "step", s);
    gj_str(j, "phase", phase_name(ctx, s));
    gj_u64(j, "phase_step", phase_index(ctx, s));
    gj_i64(j, "input", ref->inputs[s]);
    gj_arr(j, "what");
    if (m->logits)
        gj_str(j, NULL, "logits");
    if (m->nmse_over)
        gj_str(j, NULL, "nmse");
    if (m->nonfinite)
        gj_str(j, NULL, "nonfinite");
    if (m->token)
        gj_str(j, NULL, "token");
    if (m->cache)
        gj_str(j, NULL, "cache");
    if (m->hidden)
        gj_str(j, NULL, "hidden");
    if (m->digest_logits)
        gj_str(j, NULL, "logits_digest");
    gj_arr_end(j);
    const gate_logit_diff *d = &m->diff;
    gj_u64(j, "differing_logits", d->n_diff);
    if (d->first_index >= 0) {
        gj_i64(j, "index", d->first_index);
        json_float(j, "ref", d->first_ref);
        json_float(j, "got", d->first_got);
    } else {
        gj_null(j, "index");
    }
    gj_u64(j, "max_ulp", d->max_ulp);
    gj_i64(j, "max_ulp_index", d->max_ulp_index);
    gj_f64(j, "nmse", d->nmse);
    gj_u64(j, "argmax_ref", d->argmax_ref);
    gj_u64(j, "argmax_got", d->argmax_got);
    gj_bool(j, "argmax_differs", d->argmax_ref != d->argmax_got);
    gj_u64(j, "nonfinite_ref", d->n_nonfinite_ref);
    gj_u64(j, "nonfinite_got", d->n_nonfinite_got);
    if (d->first_nonfinite_got >= 0)
        gj_i64(j, "first_nonfinite_got", d->first_nonfinite_got);
    if (d->first_nonfinite_ref >= 0)
        gj_i64(j, "first_nonfinite_ref", d->first_nonfinite_ref);
    gj_i64(j, "token_ref", m->token_ref);
    gj_i64(j, "token_got", m->token_got);
    bool dig = ref->has_digest[s] && rep->has_digest[s];
    gj_hex(j, "cache_ref", dig ? ref->digest_cache[s] : NULL);
    gj_hex(j, "cache_got", dig ? rep->digest_cache[s] : NULL);
    gj_hex(j, "hidden_ref", dig ? ref->digest_hidden[s] : NULL);
    gj_hex(j, "hidden_got", dig ? rep->digest_hidden[s] : NULL);
    gj_bool(j, "first", !ctx->out.have_first || ctx->out.first.step == s);
    gj_end(j);
}

static void step_record(gate_ctx *ctx, uint32_t s, const gate_logit_diff *d, bool ok, bool compared_digests) {
    gate_json *j = &ctx->json;
    const gate_trace *ref = &ctx->ref, *rep = &ctx->rep;
    gj_begin(j, "step");
    gj_u64(j, "step", s);
    gj_str(j, "phase", phase_name(ctx, s));
    gj_u64(j, "phase_step", phase_index(ctx, s));
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
    gj_bool(j, "digests_compared", compared_digests);
    gj_bool(j, "ok", ok);
    gj_end(j);
}

static memra_status replay_step(gate_ctx *ctx, void *user, uint32_t step, const float *logits,
                                const memra_step_result *res, bool drained, memra_error *err) {
    gate_trace *ref = &ctx->ref, *rep = &ctx->rep;
    gate_outcome *o = &ctx->out;
    memra_state *s = user;
    const bool nmse = ctx->cfg->nmse;
    rep->tokens[step] = res->token;
    memra_sha256(logits, (size_t)rep->n_vocab * sizeof(float), rep->logits_sha[step]);
    if (drained) {
        memra_status st = gate_take_digests(&ctx->b, s, rep->digest_logits[step], rep->digest_cache[step],
                                       rep->digest_hidden[step], err);
        if (st != MEMRA_OK)
            return st;
        rep->has_digest[step] = true;
    }

    gate_mismatch m = {.step = step, .token_ref = ref->tokens[step], .token_got = res->token};
    gate_compare_logits(ref->logits + (size_t)step * ref->n_vocab, logits, ref->n_vocab, &m.diff);
    m.nonfinite = m.diff.n_nonfinite_got || m.diff.n_nonfinite_ref;
    bool digests = !nmse && ref->has_digest[step] && rep->has_digest[step];
    if (!nmse) {
        m.logits = m.diff.n_diff > 0;
        m.token = m.token_ref != m.token_got;
    } else {
        m.nmse_over = !(m.diff.nmse <= ctx->cfg->nmse_tol);
    }
    if (digests) {
        m.cache = memcmp(ref->digest_cache[step], rep->digest_cache[step], 32) != 0;
        m.hidden = memcmp(ref->digest_hidden[step], rep->digest_hidden[step], 32) != 0;
        m.digest_logits = memcmp(ref->digest_logits[step], rep->digest_logits[step], 32) != 0;
    }
    bool bad = m.logits || m.nmse_over || m.nonfinite || m.token || m.cache || m.hidden || m.digest_logits;

    o->steps_compared++;
    o->digest_steps += digests;
    if (isfinite(m.diff.nmse) && m.diff.nmse > o->max_nmse)
        o->max_nmse = m.diff.nmse;
    if (!isfinite(m.diff.nmse))
        o->max_nmse = INFINITY;
    if (step >= ctx->cfg->prime) {
        o->token_total++;
        o->token_agree += m.token_ref == m.token_got;
    }
    if (m.nonfinite)
        o->nonfinite_steps++;
    if (bad) {
        if (!o->have_first) {
            o->have_first = true;
            o->first = m;
        }
        if (o->bad_steps < GATE_MISMATCH_RECORDS)
            mismatch_record(ctx, &m, rep);
        o->bad_steps++;
    }
    step_record(ctx, step, &m.diff, !bad, digests);
    gate_progress(ctx, "replay (arm b)", step + 1, rep->steps);
    return MEMRA_OK;
}

memra_status gate_replay(gate_ctx *ctx, memra_error *err) {
    gate_trace *rep = &ctx->rep;
    float *logits = malloc((size_t)rep->n_vocab * sizeof(float));
    memra_state *s = NULL;
    memra_status st = logits ? gate_new_state(ctx, &ctx->b, ctx->cfg->prime + ctx->cfg->gen, &s, err)
                             : memra_fail(err, MEMRA_E_NOMEM, "out of memory for %u logits", rep->n_vocab);
    if (st == MEMRA_OK) {
        /* Two runs, so a pipelined arm drains (and is digested) at the end of each phase too. */
        memcpy(rep->inputs, ctx->ref.inputs, (size_t)rep->steps * sizeof *rep->inputs);
        st = gate_run_steps(ctx, &ctx->b, s, rep->inputs, 0, ctx->cfg->prime, logits, replay_step, s, err);
        if (st == MEMRA_OK)
            st = gate_run_steps(ctx, &ctx->b, s, rep->inputs, ctx->cfg->prime, ctx->cfg->gen, logits, replay_step, s,
                                err);
    }
    if (st == MEMRA_OK)
        st = gate_census(ctx, &ctx->b, s, "correctness", err);
    if (s)
        ctx->b.vt->state_free(ctx->b.be, s);
    free(logits);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Census                                                                                      */

memra_state_stats gate_stats(const gate_arm *arm, const memra_state *s) {
    memra_state_stats stats = {.struct_size = sizeof stats};
    if (!arm->vt->state_stats || arm->vt->state_stats(arm->be, s, &stats, NULL) != MEMRA_OK) {
        memset(&stats, 0, sizeof stats);
        stats.struct_size = sizeof stats;
    }
    return stats;
}

static const memra_ext_census_v1 *census_ext(const gate_arm *arm) {
    const memra_ext_census_v1 *ext = NULL;
    if (arm->vt->struct_size >= offsetof(memra_backend_vtable, extension) + sizeof arm->vt->extension &&
        arm->vt->extension)
        ext = arm->vt->extension(arm->be, MEMRA_EXT_CENSUS, 1);
    return ext && ext->struct_size >= offsetof(memra_ext_census_v1, census) + sizeof ext->census ? ext : NULL;
}

memra_status gate_census(gate_ctx *ctx, gate_arm *arm, const memra_state *s, const char *scope, memra_error *err) {
    const memra_ext_census_v1 *ext = census_ext(arm);
    memra_status (*dump)(memra_backend *, const memra_state *, const char *, memra_error *) = NULL;
    if (ext && ext->struct_size >= offsetof(memra_ext_census_v1, dump_graphs) + sizeof ext->dump_graphs)
        dump = ext->dump_graphs;
    if (ctx->cfg->dump_dir && !dump && !arm->dump_told) {
        fprintf(stderr, "memra-gate: --dump-graphs: arm %c (%s) has no graphs to dump (%s)\n", arm->name[0] - 'a' + 'A',
                memra_arm_backend_name(arm->arm),
                ext ? "its memra.census extension has no dump_graphs" : "its backend offers no memra.census extension");
        arm->dump_told = true;
    }
    if (!ext || (!ext->census && !(dump && ctx->cfg->dump_dir)))
        return MEMRA_OK; /* not offered: no census record */
    memra_census_row rows[128];
    uint32_t n = 0;
    memra_error cerr = {0};
    memra_status cst = ext->census ? ext->census(arm->be, s, rows, 128, &n, &cerr) : MEMRA_OK;
    memra_state_stats stats = gate_stats(arm, s);
    gate_json *j = &ctx->json;
    gj_begin(j, "census");
    gj_str(j, "arm", arm->name);
    gj_str(j, "scope", scope);
    if (cst != MEMRA_OK) {
        gj_str(j, "error", cerr.msg);
    } else if (ext->census) {
        gj_arr(j, "rows");
        for (uint32_t i = 0; i < n && i < 128; i++) {
            gj_obj(j, NULL);
            rows[i].kind[sizeof rows[i].kind - 1] = '\0';
            gj_str(j, "kind", rows[i].kind);
            gj_u64(j, "count", rows[i].count);
            gj_obj_end(j);
        }
        gj_arr_end(j);
    }
    gj_u64(j, "steps", stats.steps);
    gj_u64(j, "captures", stats.captures);
    gj_u64(j, "replays", stats.replays);
    memra_status st = MEMRA_OK;
    if (ctx->cfg->dump_dir && dump)
        st = gate_dump_state(ctx, arm, s, scope, dump, err);
    gj_end(j);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Timing                                                                                      */

memra_status gate_row_step(gate_ctx *ctx, void *user, uint32_t step, const float *logits,
                             const memra_step_result *res, bool drained, memra_error *err) {
    gate_row_run *r = user;
    if (step >= ctx->cfg->prime)
        r->tokens[step - ctx->cfg->prime] = (uint32_t)res->token;
    else if (step + 1 == ctx->cfg->prime)
        r->prefix_token = res->token;
    return MEMRA_OK;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The prefix snapshot of one arm: P prime steps, the last one sampling the first generated
 * token, which stays in the state as its carried token. */
memra_status gate_make_prefix(gate_ctx *ctx, const gate_arm *arm, const gate_trace *trace, memra_state **prefix,
                                memra_error *err) {
    gate_row_run r = {0};
    memra_status st = gate_new_state(ctx, arm, ctx->cfg->prime + ctx->cfg->gen, prefix, err);
    if (st == MEMRA_OK)
        st = gate_run_steps(ctx, arm, *prefix, trace->inputs, 0, ctx->cfg->prime, NULL, gate_row_step, &r, err);
    uint32_t pos = st == MEMRA_OK ? arm->vt->state_position(arm->be, *prefix) : 0;
    if (st == MEMRA_OK && pos != ctx->cfg->prime)
        st = memra_fail(err, MEMRA_E_INTERNAL, "arm %s (%s): the prefix snapshot is at position %u after %u steps",
                        arm->name, memra_arm_text(arm->arm), pos, ctx->cfg->prime);
    if (st == MEMRA_OK && r.prefix_token != trace->tokens[ctx->cfg->prime - 1])
        st = memra_fail(err, MEMRA_E_INTERNAL,
                        "arm %s (%s): the prefix snapshot sampled token %" PRId64 " after its prime steps, but "
                        "the same arm sampled %" PRId64 " there in the correctness run (non-determinism)",
                        arm->name, memra_arm_text(arm->arm), r.prefix_token, trace->tokens[ctx->cfg->prime - 1]);
    return st;
}

/* Checks a finished row against the arm's correctness trace; false with the reason written. */
static bool verify_row(gate_ctx *ctx, const gate_arm *arm, memra_state *work, const gate_trace *trace,
                       const uint32_t *tokens, gate_timing_row *row, uint8_t final[3][32], memra_error *err,
                       memra_status *st) {
    const uint32_t P = ctx->cfg->prime, N = ctx->cfg->gen;
    *st = gate_take_digests(arm, work, final[0], final[1], final[2], err);
    if (*st != MEMRA_OK)
        return false;
    for (uint32_t i = 0; i < N; i++)
        if ((int64_t)tokens[i] != trace->tokens[P + i]) {
            snprintf(row->reason, sizeof row->reason,
                     "token stream differs from the correctness run at generated token %u: expected %" PRId64
                     ", got %u",
                     i, trace->tokens[P + i], tokens[i]);
            return false;
        }
    uint32_t pos = arm->vt->state_position(arm->be, work);
    if (pos != P + N) {
        snprintf(row->reason, sizeof row->reason, "final position %u, expected %u", pos, P + N);
        return false;
    }
    const uint32_t last = P + N - 1;
    const char *what = memcmp(final[0], trace->digest_logits[last], 32) ? "logits"
                       : memcmp(final[1], trace->digest_cache[last], 32) ? "cache"
                       : memcmp(final[2], trace->digest_hidden[last], 32) ? "hidden"
                                                                          : NULL;
    if (what) {
        snprintf(row->reason, sizeof row->reason, "final %s digest differs from the correctness run", what);
        return false;
    }
    return true;
}

/* A row's steps on work, just restored from the arm's prefix snapshot: the N generated steps
 * with tokens carried on the device, timed (row->wall_ns, tok_s), then verified (row->verified,
 * row->reason, the final digests). Shared by the timing rows and the carry check. */
static memra_status row_steps(gate_ctx *ctx, const gate_arm *arm, memra_state *work, const gate_trace *trace,
                              uint32_t *tokens, gate_timing_row *row, uint8_t final[3][32], memra_error *err) {
    const uint32_t N = ctx->cfg->gen;
    gate_row_run run = {.tokens = tokens};
    uint64_t t0 = now_ns();
    memra_status st = gate_run_steps(ctx, arm, work, NULL, ctx->cfg->prime, N, NULL, gate_row_step, &run, err);
    uint64_t t1 = now_ns();
    if (st != MEMRA_OK)
        return st;
    row->wall_ns = t1 - t0;
    row->tok_s = row->wall_ns ? (double)N * 1e9 / (double)row->wall_ns : INFINITY;
    row->verified = verify_row(ctx, arm, work, trace, tokens, row, final, err, &st);
    return st;
}

static void row_eligibility(gate_ctx *ctx, const uint32_t *tokens, int64_t first, gate_timing_row *row) {
    const uint32_t N = ctx->cfg->gen;
    int64_t eos = ctx->lm->model->eos_id;
    uint32_t period = gate_stream_period(tokens, N);
    row->eligible = true;
    if (eos >= 0 && first == eos) {
        row->eligible = false;
        snprintf(row->reason, sizeof row->reason, "early EOS: the first generated token (from the prefix) is EOS %" PRId64,
                 eos);
        return;
    }
    for (uint32_t i = 0; eos >= 0 && i + 1 < N; i++)
        if ((int64_t)tokens[i] == eos) {
            row->eligible = false;
            snprintf(row->reason, sizeof row->reason, "early EOS at generated token %u of %u", i + 1, N);
            return;
        }
    if (period) {
        row->eligible = false;
        snprintf(row->reason, sizeof row->reason, "the stream loops with period %u over its last %u tokens", period,
                 N < GATE_LOOP_WINDOW ? N : GATE_LOOP_WINDOW);
    }
}

static void stats_json(gate_json *j, const char *key, const memra_state_stats *s) {
    gj_obj(j, key);
    gj_u64(j, "steps", s->steps);
    gj_u64(j, "captures", s->captures);
    gj_u64(j, "replays", s->replays);
    gj_obj_end(j);
}

/* The digest of the correctness run's tokens [from, from + n), as memra_sha256_tokens forms a
 * row's; false (and no digest) when there is no memory for the copy. */
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

static void measure_record(gate_ctx *ctx, const gate_arm *arm, const gate_timing_row *row, const uint32_t *tokens,
                           const gate_trace *trace, uint8_t final[3][32], const memra_state_stats *before,
                           const memra_state_stats *stats, bool first_row) {
    const uint32_t P = ctx->cfg->prime, N = ctx->cfg->gen;
    uint8_t got[32], want[32];
    memra_sha256_tokens(tokens, N, got);
    const bool have_want = trace_tokens_sha(trace, P, N, want);
    gate_json *j = &ctx->json;
    gj_begin(j, "measure");
    gj_u64(j, "row", row->row);
    gj_str(j, "arm", arm->name);
    gj_str(j, "arm_text", memra_arm_text(arm->arm));
    gj_u64(j, "generated_tokens", N);
    gj_u64(j, "wall_ns", row->wall_ns);
    gj_f64(j, "tok_s", row->tok_s);
    gj_str(j, "timing_scope", GATE_TIMING_SCOPE);
    gj_bool(j, "first_row_of_arm", first_row);
    gj_bool(j, "verified", row->verified);
    gj_bool(j, "eligible", row->eligible);
    gj_str(j, "reason", row->reason[0] ? row->reason : NULL);
    gj_hex(j, "tokens_sha256", got);
    gj_hex(j, "expected_tokens_sha256", have_want ? want : NULL);
    gj_hex(j, "final_logits_sha256", final[0]);
    gj_hex(j, "final_cache_sha256", final[1]);
    gj_hex(j, "final_hidden_sha256", final[2]);
    /* the scored state's counters before the row (after its restore) and after it */
    stats_json(j, "stats_before", before);
    stats_json(j, "stats", stats);
    gj_end(j);
}

/* where: "timing" (a row; its number given) or "carry" (the carry check). */
static void row_mismatch_record(gate_ctx *ctx, const char *where, const gate_arm *arm, const gate_timing_row *row,
                                const uint32_t *tokens, const gate_trace *trace) {
    const uint32_t P = ctx->cfg->prime, N = ctx->cfg->gen;
    gate_json *j = &ctx->json;
    gj_begin(j, "mismatch");
    gj_str(j, "where", where);
    if (strcmp(where, "timing") == 0)
        gj_u64(j, "row", row->row);
    gj_str(j, "arm", arm->name);
    int64_t at = -1;
    for (uint32_t i = 0; i < N && at < 0; i++)
        if ((int64_t)tokens[i] != trace->tokens[P + i])
            at = i;
    if (at >= 0) {
        gj_i64(j, "token_index", at);
        gj_u64(j, "step", P + (uint32_t)at);
        gj_i64(j, "expected", trace->tokens[P + at]);
        gj_u64(j, "got", tokens[at]);
    }
    gj_str(j, "reason", row->reason);
    gj_end(j);
}

static void arm_summary(gate_ctx *ctx, int which, double *tok_s, uint32_t n) {
    gate_outcome *o = &ctx->out;
    o->eligible[which] = n;
    o->median[which] = gate_median(tok_s, n);
    qsort(tok_s, n, sizeof *tok_s, cmp_double);
    o->min[which] = n ? tok_s[0] : NAN;
    o->max[which] = n ? tok_s[n - 1] : NAN;
}

memra_status gate_timing(gate_ctx *ctx, memra_error *err) {
    const gate_config *cfg = ctx->cfg;
    const uint32_t N = cfg->gen, R = cfg->rows;
    gate_outcome *o = &ctx->out;
    gate_arm *arms[2] = {&ctx->a, &ctx->b};
    const gate_trace *traces[2] = {&ctx->ref, &ctx->rep};
    memra_state *prefix[2] = {NULL, NULL}, *work[2] = {NULL, NULL};
    uint32_t *tokens = malloc((size_t)N * sizeof *tokens);
    double *tok_s[2] = {malloc(R * sizeof(double)), malloc(R * sizeof(double))};
    uint32_t n_tok_s[2] = {0, 0};
    o->rows = calloc(R, sizeof *o->rows);
    memra_status st = MEMRA_OK;
    if (!tokens || !tok_s[0] || !tok_s[1] || !o->rows) {
        st = memra_fail(err, MEMRA_E_NOMEM, "out of memory for %u timing rows", R);
        goto out;
    }
    /* The scored states are made here and stepped only inside rows: the first row of each arm
     * starts from a fresh state, so a graph backend's capture falls inside that row's clock (the
     * protocol's first_scored_capture_inside_timing, checked at the row below). */
    for (int i = 0; i < 2 && st == MEMRA_OK; i++) {
        st = gate_make_prefix(ctx, arms[i], traces[i], &prefix[i], err);
        if (st == MEMRA_OK)
            st = gate_new_state(ctx, arms[i], ctx->cfg->prime + ctx->cfg->gen, &work[i], err);
    }
    for (uint32_t r = 0; r < R && st == MEMRA_OK; r++) {
        int which = gate_schedule_arm(r, R, cfg->baab);
        const gate_arm *arm = arms[which];
        gate_timing_row *row = &o->rows[o->n_rows++];
        row->row = r;
        row->arm = which;
        st = arm->vt->state_restore(arm->be, work[which], prefix[which], err);
        if (st != MEMRA_OK) {
            memra_error_prefix(err, "arm %s (%s): timing row %u: restore", arm->name, memra_arm_text(arm->arm), r);
            break;
        }
        memra_state_stats before = gate_stats(arm, work[which]);
        bool first_row = !o->first_row_seen[which];
        if (first_row && (before.steps || before.captures || before.replays)) {
            st = memra_fail(err, MEMRA_E_INTERNAL,
                            "arm %s (%s): the scored state was stepped before its first timing row (%llu steps, "
                            "%llu captures, %llu replays)",
                            arm->name, memra_arm_text(arm->arm), (unsigned long long)before.steps,
                            (unsigned long long)before.captures, (unsigned long long)before.replays);
            break;
        }
        uint8_t final[3][32] = {{0}};
        if ((st = row_steps(ctx, arm, work[which], traces[which], tokens, row, final, err)) != MEMRA_OK)
            break;
        if (row->verified)
            row_eligibility(ctx, tokens, traces[which]->inputs[cfg->prime], row);
        memra_state_stats stats = gate_stats(arm, work[which]);
        if (first_row) {
            o->first_row_seen[which] = true;
            o->first_row_before[which] = before;
            o->first_row_after[which] = stats;
        }
        measure_record(ctx, arm, row, tokens, traces[which], final, &before, &stats, first_row);
        if (!row->verified) {
            row_mismatch_record(ctx, "timing", arm, row, tokens, traces[which]);
            if (o->row_failures++ == 0)
                snprintf(o->row_failure, sizeof o->row_failure, "timing row %u (arm %s): %.256s", r, arm->name,
                         row->reason);
        } else if (!row->eligible) {
            if (o->rows_ineligible++ == 0)
                snprintf(o->ineligible, sizeof o->ineligible, "timing row %u (arm %s): %.256s", r, arm->name, row->reason);
        } else {
            tok_s[which][n_tok_s[which]++] = row->tok_s;
        }
        gate_progress(ctx, "timing rows", r + 1, R);
    }
    /* The scored states after their rows: census, and their graphs with --dump-graphs. */
    for (int i = 0; i < 2 && st == MEMRA_OK; i++)
        st = gate_census(ctx, arms[i], work[i], "timing", err);
    if (st == MEMRA_OK) {
        o->have_ratio = n_tok_s[0] && n_tok_s[1] &&
                        gate_bootstrap_ratio(tok_s[0], n_tok_s[0], tok_s[1], n_tok_s[1], GATE_BOOTSTRAP_RESAMPLES,
                                             GATE_BOOTSTRAP_SEED, &o->ratio_lo, &o->ratio_hi);
        arm_summary(ctx, 0, tok_s[0], n_tok_s[0]);
        arm_summary(ctx, 1, tok_s[1], n_tok_s[1]);
        o->ratio = o->median[1] / o->median[0];
        o->timing_done = true;
    }
out:
    for (int i = 0; i < 2; i++) {
        if (work[i])
            arms[i]->vt->state_free(arms[i]->be, work[i]);
        if (prefix[i])
            arms[i]->vt->state_free(arms[i]->be, prefix[i]);
        free(tok_s[i]);
    }
    free(tokens);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Carry check                                                                                 */

static void carry_record(gate_ctx *ctx, const gate_arm *arm, const gate_timing_row *row, const uint32_t *tokens,
                         const gate_trace *trace, uint8_t final[3][32]) {
    const uint32_t P = ctx->cfg->prime, N = ctx->cfg->gen;
    uint8_t got[32], want[32];
    memra_sha256_tokens(tokens, N, got);
    const bool have_want = trace_tokens_sha(trace, P, N, want);
    gate_json *j = &ctx->json;
    gj_begin(j, "carry_check");
    gj_str(j, "arm", arm->name);
    gj_str(j, "arm_text", memra_arm_text(arm->arm));
    gj_u64(j, "start_position", P);
    gj_u64(j, "generated_tokens", N);
    gj_bool(j, "timed", false);
    gj_str(j, "what", "from the arm's prefix snapshot, the generated steps with tokens carried on the device, as a "
                      "timing row runs them, verified against the arm's correctness run");
    gj_bool(j, "verified", row->verified);
    gj_str(j, "reason", row->reason[0] ? row->reason : NULL);
    gj_hex(j, "tokens_sha256", got);
    gj_hex(j, "expected_tokens_sha256", have_want ? want : NULL);
    gj_hex(j, "final_logits_sha256", final[0]);
    gj_hex(j, "final_cache_sha256", final[1]);
    gj_hex(j, "final_hidden_sha256", final[2]);
    gj_end(j);
}

memra_status gate_carry_check(gate_ctx *ctx, memra_error *err) {
    const uint32_t P = ctx->cfg->prime, N = ctx->cfg->gen;
    gate_outcome *o = &ctx->out;
    gate_arm *arms[2] = {&ctx->a, &ctx->b};
    const gate_trace *traces[2] = {&ctx->ref, &ctx->rep};
    uint32_t *tokens = calloc(N, sizeof *tokens);
    if (!tokens)
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory for the carry check's %u tokens", N);
    memra_status st = MEMRA_OK;
    for (int i = 0; i < 2 && st == MEMRA_OK; i++) {
        const gate_arm *arm = arms[i];
        memra_state *prefix = NULL, *work = NULL;
        gate_timing_row row = {.arm = i};
        uint8_t final[3][32] = {{0}};
        st = gate_make_prefix(ctx, arm, traces[i], &prefix, err);
        if (st == MEMRA_OK)
            st = gate_new_state(ctx, arm, P + N, &work, err);
        if (st == MEMRA_OK && (st = arm->vt->state_restore(arm->be, work, prefix, err)) != MEMRA_OK)
            memra_error_prefix(err, "arm %s (%s): carry check: restore", arm->name, memra_arm_text(arm->arm));
        if (st == MEMRA_OK)
            st = row_steps(ctx, arm, work, traces[i], tokens, &row, final, err);
        if (st == MEMRA_OK) {
            carry_record(ctx, arm, &row, tokens, traces[i], final);
            if (!row.verified) {
                row_mismatch_record(ctx, "carry", arm, &row, tokens, traces[i]);
                if (o->carry_failures++ == 0)
                    snprintf(o->carry_failure, sizeof o->carry_failure, "arm %s (%s): %.256s", arm->name,
                             memra_arm_text(arm->arm), row.reason);
            }
        }
        if (work)
            arm->vt->state_free(arm->be, work);
        if (prefix)
            arm->vt->state_free(arm->be, prefix);
    }
    free(tokens);
    if (st == MEMRA_OK)
        o->carry_done = true;
    return st;
}
