/* gate_run.c: the passes of a gate, all through the core's arm layer (so a GPU arm needs no
 * change here):
 *   reference  P prime + N generated steps on arm A, every step's logits, digests and token kept;
 *   replay     the identical inputs on arm B (explicit tokens, never the device's), compared
 *              step by step while it runs;
 *   timing     rows in the ABBA schedule, each a pass from the arm's prefix (gate_pass.c),
 *              verified before its time counts;
 *   carry      without timing rows, one untimed pass from the prefix per arm.
 * A pipelined arm (window W > 1) keeps up to W steps begun before it ends the oldest, and reads
 * its logits back late, in order (memra_arm_run). Digests need no step in flight, so a pipelined
 * arm is digested where its pipeline drains (the end of the prime and of the generated phase). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gate.h"
#include "memra/fileio.h"

/* Bytes of a cpu-style host state of `capacity` positions: K and V caches of every layer, and the
 * attention scores (an estimate of what a host backend allocates for one state). */
static uint64_t host_state_bytes(const memra_model *m, uint64_t capacity) {
    uint64_t kv = (uint64_t)m->n_head_kv * ((uint64_t)m->head_dim + m->head_dim_v);
    return capacity * ((uint64_t)m->n_layer * kv + m->n_head) * sizeof(float);
}

/* Whether an arm keeps its states in host memory: its backend reports no device memory. */
static bool host_arm(const gate_arm *a) { return !a->have_mem_open || a->mem_open.device_in_use == 0; }

memra_status gate_memory_check(const gate_ctx *ctx, memra_error *err) {
    const gate_config *cfg = ctx->cfg;
    const memra_model *m = ctx->lm->model;
    const uint64_t steps = (uint64_t)cfg->prime + cfg->gen, V = m->n_vocab;
    /* a trace's per-step members: inputs, tokens, four digests, has_digest */
    const uint64_t per_step = 2 * sizeof(int64_t) + 4 * 32 + 2 * sizeof(bool);
    uint64_t need = steps * V * sizeof(float) /* the reference's logits */
                    + 2 * steps * per_step    /* both traces */
                    + 4 * V * sizeof(float)   /* logits read back, the comparison's copy */
                    + (uint64_t)cfg->rows * (sizeof(gate_timing_row) + 2 * sizeof(double)) +
                    2 * steps * sizeof(uint32_t); /* pass tokens, the prompt, digests of token runs */
    /* Host states: at most two live per arm (the timing rows' prefix snapshot and work state). */
    uint64_t states = 0;
    const gate_arm *arms[2] = {&ctx->a, &ctx->b};
    for (int i = 0; i < 2; i++)
        if (host_arm(arms[i]))
            states += 2 * host_state_bytes(m, steps);
    need += states;
    uint64_t avail = 0;
    char how[256] = "";
    memra_error e = {0};
    if (memra_memory_available(&avail, how, sizeof how, &e) != MEMRA_OK)
        return MEMRA_OK; /* not measurable here: the allocations themselves say when they fail */
    if (need <= avail)
        return MEMRA_OK;
    /* the largest P + N that fits, for the message */
    const uint64_t fixed = 4 * V * sizeof(float) + (uint64_t)cfg->rows * (sizeof(gate_timing_row) + 16);
    const uint64_t per = V * sizeof(float) + 2 * per_step + 2 * sizeof(uint32_t) +
                         (host_arm(&ctx->a) ? 2 * host_state_bytes(m, 1) : 0) +
                         (host_arm(&ctx->b) ? 2 * host_state_bytes(m, 1) : 0);
    const uint64_t fit = avail > fixed ? (avail - fixed) / per : 0;
    return memra_fail(err, MEMRA_E_NOMEM,
                      "--prime %u + --gen %u = %llu steps need %.1f MiB (the reference trace: %llu steps x %llu "
                      "logits as floats, %.1f MiB; host KV caches %.1f MiB), more than the %.1f MiB available (%s): "
                      "lower --prime and --gen to %llu steps together at most",
                      cfg->prime, cfg->gen, (unsigned long long)steps, need / 1048576.0, (unsigned long long)steps,
                      (unsigned long long)V, steps * V * 4.0 / 1048576.0, states / 1048576.0, avail / 1048576.0,
                      how[0] ? how : "memory available", (unsigned long long)fit);
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
    t->has_logits = calloc(steps, sizeof *t->has_logits);
    if ((keep_logits && !t->logits) || !t->inputs || !t->tokens || !t->logits_sha || !t->digest_logits ||
        !t->digest_cache || !t->digest_hidden || !t->has_digest || !t->has_logits) {
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
    free(t->has_logits);
    memset(t, 0, sizeof *t);
}

/* Each inner step of a chunk of arm a's or b's prime: counted for the epoch census (a chunk's
 * position runs every all-reduce once, as a step does). */
static memra_status inner_epochs(void *user, uint32_t step, memra_error *err);

/* ------------------------------------------------------------------------------------------ */
/* Reference                                                                                   */

typedef struct trace_run {
    gate_ctx *ctx;
    gate_arm *arm;
    memra_arm_state *s;
} trace_run;

static memra_status inner_epochs(void *user, uint32_t step, memra_error *err) {
    trace_run *run = user;
    return gate_tp_epochs_step(run->ctx, run->arm, step, false, err);
}

static memra_status reference_step(void *user, uint32_t step, const float *logits, const memra_step_result *res,
                                   bool drained, memra_error *err) {
    trace_run *run = user;
    gate_trace *t = &run->ctx->ref;
    memcpy(t->logits + (size_t)step * t->n_vocab, logits, (size_t)t->n_vocab * sizeof(float));
    memra_sha256(logits, (size_t)t->n_vocab * sizeof(float), t->logits_sha[step]);
    t->has_logits[step] = true;
    t->tokens[step] = res->token;
    if (drained) {
        memra_status st =
            memra_arm_digests(run->s, t->digest_logits[step], t->digest_cache[step], t->digest_hidden[step], err);
        if (st != MEMRA_OK)
            return st;
        t->has_digest[step] = true;
    }
    memra_status st = gate_tp_epochs_step(run->ctx, &run->ctx->a, step, drained, err);
    if (st != MEMRA_OK)
        return st;
    gate_progress(run->ctx, "reference (arm a)", step + 1, t->steps);
    return gate_check_stop(run->ctx, err);
}

memra_status gate_reference(gate_ctx *ctx, memra_error *err) {
    gate_trace *t = &ctx->ref;
    const uint32_t P = ctx->cfg->prime, N = ctx->cfg->gen;
    const memra_sample_cfg *sample = &ctx->cfg->sample;
    float *logits = malloc((size_t)t->n_vocab * sizeof(float));
    trace_run run = {.ctx = ctx, .arm = &ctx->a};
    memra_status st = logits ? gate_new_state(&ctx->a, P + N, &run.s, err)
                             : memra_fail(err, MEMRA_E_NOMEM, "out of memory for %u logits", t->n_vocab);
    if (st != MEMRA_OK)
        goto out;
    for (uint32_t i = 0; i < P; i++)
        t->inputs[i] = ctx->prompt[i];
    if ((st = gate_tp_epochs_begin(ctx, &ctx->a, err)) != MEMRA_OK)
        goto out;
    /* The prime inputs are known: they may be pipelined, or run in the arm's prefill chunks. */
    st = gate_prime(ctx, &ctx->a, t, run.s, t->inputs, sample, logits, reference_step, inner_epochs, &run, err);
    if (st == MEMRA_OK) /* the prefix the carry check or the timing rows start from */
        gate_prefix_keep(&ctx->a, run.s, P + N);
    /* Each generated input is the token the previous step sampled: one step at a time. */
    for (uint32_t g = 0; g < N && st == MEMRA_OK; g++) {
        t->inputs[P + g] = t->tokens[P + g - 1];
        st = memra_arm_run(run.s, t->inputs, P + g, 1, sample, logits, reference_step, &run, err);
    }
    gate_tp_epochs_end(&ctx->a);
    if (st == MEMRA_OK)
        st = gate_census(ctx, &ctx->a, run.s, "correctness", err);
out:
    memra_arm_state_free(run.s);
    free(logits);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Replay and comparison                                                                       */

/* Compares replay step `step` (its logits just read back) with the reference. */
static void compare_step(gate_ctx *ctx, uint32_t step, const float *logits, gate_mismatch *m, bool *digests) {
    const gate_trace *ref = &ctx->ref, *rep = &ctx->rep;
    const bool nmse = ctx->cfg->nmse;
    *m = (gate_mismatch){.where = "replay",
                         .arm = "b",
                         .against = "a",
                         .row = -1,
                         .step = step,
                         .input = ref->inputs[step],
                         .have_diff = true,
                         .token_ref = ref->tokens[step],
                         .token_got = rep->tokens[step]};
    /* Where arm a primed in chunks, its inner prime steps have no logits: only the steps both
     * arms read back are compared (every chunk boundary of b that is one of a's too). */
    if (ref->has_logits[step])
        gate_compare_logits(ref->logits + (size_t)step * ref->n_vocab, logits, ref->n_vocab, &m->diff);
    m->nonfinite = m->diff.n_nonfinite_got || m->diff.n_nonfinite_ref;
    *digests = !nmse && ref->has_digest[step] && rep->has_digest[step];
    /* a chunk samples nothing: a prime step's token is compared where both arms sampled it (the
     * last prime step always is, and every generated one) */
    const bool tokens = step + 1 >= ctx->cfg->prime || (m->token_ref >= 0 && m->token_got >= 0);
    if (!nmse) {
        m->logits = m->diff.n_diff > 0;
        m->token = tokens && m->token_ref != m->token_got;
    } else {
        m->nmse_over = !(m->diff.nmse <= ctx->cfg->nmse_tol);
    }
    if (ref->has_digest[step] && rep->has_digest[step]) {
        m->have_digests = true;
        memcpy(m->cache_ref, ref->digest_cache[step], 32);
        memcpy(m->cache_got, rep->digest_cache[step], 32);
        memcpy(m->hidden_ref, ref->digest_hidden[step], 32);
        memcpy(m->hidden_got, rep->digest_hidden[step], 32);
    }
    if (*digests) {
        m->cache = memcmp(ref->digest_cache[step], rep->digest_cache[step], 32) != 0;
        m->hidden = memcmp(ref->digest_hidden[step], rep->digest_hidden[step], 32) != 0;
        m->digest_logits = memcmp(ref->digest_logits[step], rep->digest_logits[step], 32) != 0;
    }
}

static memra_status replay_step(void *user, uint32_t step, const float *logits, const memra_step_result *res,
                                bool drained, memra_error *err) {
    trace_run *run = user;
    gate_ctx *ctx = run->ctx;
    gate_trace *rep = &ctx->rep;
    gate_outcome *o = &ctx->out;
    rep->tokens[step] = res->token;
    memra_sha256(logits, (size_t)rep->n_vocab * sizeof(float), rep->logits_sha[step]);
    rep->has_logits[step] = true;
    if (drained) {
        memra_status st =
            memra_arm_digests(run->s, rep->digest_logits[step], rep->digest_cache[step], rep->digest_hidden[step], err);
        if (st != MEMRA_OK)
            return st;
        rep->has_digest[step] = true;
    }
    memra_status est = gate_tp_epochs_step(ctx, &ctx->b, step, drained, err);
    if (est != MEMRA_OK)
        return est;

    /* an inner step of arm a's prefill chunk: a has nothing of it to compare (no record) */
    if (!ctx->ref.has_logits[step] && !ctx->ref.has_digest[step])
        return gate_check_stop(ctx, err);
    gate_mismatch m;
    bool digests;
    compare_step(ctx, step, logits, &m, &digests);
    bool bad = m.logits || m.nmse_over || m.nonfinite || m.token || m.cache || m.hidden || m.digest_logits;
    o->steps_compared++;
    o->logit_steps += ctx->ref.has_logits[step];
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
        char what[256];
        gate_mismatch_what(&m, what, sizeof what);
        snprintf(m.reason, sizeof m.reason, "step %u (%s %u) differs from arm a's: %s", step,
                 gate_phase_name(ctx->cfg, step), gate_phase_index(ctx->cfg, step), what);
        m.first = !o->have_first;
        if (!o->have_first) {
            o->have_first = true;
            o->first = m;
        }
        if (o->bad_steps < GATE_MISMATCH_RECORDS)
            gate_rec_mismatch(ctx, &m);
        o->bad_steps++;
    }
    gate_rec_step(ctx, step, &m.diff, !bad, digests);
    gate_progress(ctx, "replay (arm b)", step + 1, rep->steps);
    return gate_check_stop(ctx, err);
}

memra_status gate_replay(gate_ctx *ctx, memra_error *err) {
    gate_trace *rep = &ctx->rep;
    const uint32_t P = ctx->cfg->prime, N = ctx->cfg->gen;
    const memra_sample_cfg *sample = &ctx->cfg->sample;
    float *logits = malloc((size_t)rep->n_vocab * sizeof(float));
    trace_run run = {.ctx = ctx, .arm = &ctx->b};
    memra_status st = logits ? gate_new_state(&ctx->b, P + N, &run.s, err)
                             : memra_fail(err, MEMRA_E_NOMEM, "out of memory for %u logits", rep->n_vocab);
    if (st == MEMRA_OK) {
        /* Two runs, so a pipelined arm drains (and is digested) at the end of each phase too. */
        memcpy(rep->inputs, ctx->ref.inputs, (size_t)rep->steps * sizeof *rep->inputs);
        st = gate_tp_epochs_begin(ctx, &ctx->b, err);
        if (st == MEMRA_OK)
            st =
                gate_prime(ctx, &ctx->b, rep, run.s, rep->inputs, sample, logits, replay_step, inner_epochs, &run, err);
        if (st == MEMRA_OK)
            gate_prefix_keep(&ctx->b, run.s, P + N);
        if (st == MEMRA_OK)
            st = memra_arm_run(run.s, rep->inputs, P, N, sample, logits, replay_step, &run, err);
        gate_tp_epochs_end(&ctx->b);
    }
    if (st == MEMRA_OK)
        st = gate_census(ctx, &ctx->b, run.s, "correctness", err);
    memra_arm_state_free(run.s);
    free(logits);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Census                                                                                      */

memra_status gate_census(gate_ctx *ctx, gate_arm *arm, memra_arm_state *s, const char *scope, memra_error *err) {
    const memra_ext_census_v1 *ext =
        memra_arm_extension(arm->arm, MEMRA_EXT_CENSUS, 1, MEMRA_STRUCT_END(memra_ext_census_v1, census));
    bool has_census = ext && ext->census;
    bool has_dump = MEMRA_HAS_MEMBER(ext, memra_ext_census_v1, dump_graphs) && ext->dump_graphs;
    bool dumping = ctx->cfg->dump_dir && has_dump;
    if (ctx->cfg->dump_dir && !has_dump && !arm->dump_told) {
        fprintf(stderr, "memra-gate: --dump-graphs: arm %c (%s) has no graphs to dump (%s)\n", arm->name[0] - 'a' + 'A',
                memra_arm_backend_name(arm->arm),
                ext ? "its memra.census extension has no dump_graphs" : "its backend offers no memra.census extension");
        arm->dump_told = true;
    }
    const bool epochs = arm->tp.on && strcmp(scope, "correctness") == 0;
    if (!has_census && !dumping && !epochs)
        return MEMRA_OK; /* not offered: no census record */
    memra_census_row rows[GATE_CENSUS_ROWS];
    uint32_t n = 0;
    memra_error cerr = {0};
    memra_status cst = has_census ? memra_arm_census(s, rows, GATE_CENSUS_ROWS, &n, &cerr) : MEMRA_OK;
    if (n > GATE_CENSUS_ROWS)
        n = GATE_CENSUS_ROWS;
    memra_state_stats stats = memra_arm_state_stats(s);
    gate_dump_result dump = {0};
    memra_status st = dumping ? gate_dump_state(ctx, arm, s, scope, &dump, err) : MEMRA_OK;
    gate_rec_census(ctx, arm, scope, has_census && cst == MEMRA_OK ? rows : NULL, n, cst != MEMRA_OK ? cerr.msg : NULL,
                    &stats, dumping ? &dump : NULL);
    ctx->out.dumped_files += dump.n_files;
    gate_dump_result_free(&dump);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Timing                                                                                      */

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Whether id is one of the model's end-of-generation tokens. */
static bool gate_is_eog(const gate_ctx *ctx, int64_t id) {
    for (uint32_t i = 0; i < ctx->n_eog; i++)
        if (ctx->eog[i] == id)
            return true;
    return false;
}

static void row_eligibility(gate_ctx *ctx, const uint32_t *tokens, int64_t first, gate_timing_row *row) {
    const uint32_t N = ctx->cfg->gen;
    uint32_t period = gate_stream_period(tokens, N);
    row->eligible = true;
    if (gate_is_eog(ctx, first)) {
        row->eligible = false;
        snprintf(row->reason, sizeof row->reason,
                 "early EOS: the first generated token (from the prefix) is end-of-generation token %" PRId64, first);
        return;
    }
    for (uint32_t i = 0; i + 1 < N; i++)
        if (gate_is_eog(ctx, tokens[i])) {
            row->eligible = false;
            snprintf(row->reason, sizeof row->reason, "early EOS (token %u) at generated token %u of %u", tokens[i],
                     i + 1, N);
            return;
        }
    if (period) {
        row->eligible = false;
        snprintf(row->reason, sizeof row->reason, "the stream loops with period %u over its last %u tokens", period,
                 N < GATE_LOOP_WINDOW ? N : GATE_LOOP_WINDOW);
    }
}

static void arm_summary(gate_ctx *ctx, int which, double *tok_s, uint32_t n) {
    gate_outcome *o = &ctx->out;
    o->eligible[which] = n;
    o->median[which] = gate_median(tok_s, n);
    qsort(tok_s, n, sizeof *tok_s, cmp_double);
    o->min[which] = n ? tok_s[0] : NAN;
    o->max[which] = n ? tok_s[n - 1] : NAN;
}

/* One timing row r on arm `which`: a pass from its prefix, its measure record, and what it
 * adds to the outcome. */
static memra_status timing_row(gate_ctx *ctx, uint32_t r, int which, gate_prefix *p, uint32_t *tokens, double *tok_s,
                               uint32_t *n_tok_s, memra_error *err) {
    gate_outcome *o = &ctx->out;
    gate_arm *arm = p->arm;
    gate_timing_row *row = &o->rows[o->n_rows++];
    row->row = r;
    row->arm = which;
    const bool first_row = !o->first_row_seen[which];
    gate_pass pass = {.steps = ctx->cfg->gen, .tokens = tokens};
    memra_status st = gate_pass_run(ctx, p, &pass, err);
    if (st != MEMRA_OK) {
        memra_error_prefix(err, "timing row %u", r);
        return st;
    }
    const memra_state_stats *b = &pass.before; /* after the restore, before the row's steps */
    if (first_row && (b->steps || b->captures || b->replays))
        return memra_fail(err, MEMRA_E_INTERNAL,
                          "arm %s (%s): the scored state was stepped before its first timing row (%llu steps, "
                          "%llu captures, %llu replays)",
                          arm->name, memra_arm_text(arm->arm), (unsigned long long)b->steps,
                          (unsigned long long)b->captures, (unsigned long long)b->replays);
    row->wall_ns = pass.wall_ns;
    row->tok_s = pass.tok_s;
    row->verified = pass.verified;
    if (!pass.verified)
        snprintf(row->reason, sizeof row->reason, "%.250s", pass.miss.reason);
    else
        row_eligibility(ctx, tokens, p->trace->inputs[ctx->cfg->prime], row);
    if (first_row) {
        o->first_row_seen[which] = true;
        o->first_row_before[which] = pass.before;
        o->first_row_after[which] = pass.after;
    }
    gate_rec_measure(ctx, arm, row, &pass, p->trace, first_row);
    if (!row->verified) {
        pass.miss.where = "timing";
        pass.miss.row = r;
        pass.miss.first = o->row_failures == 0;
        gate_rec_mismatch(ctx, &pass.miss);
        if (o->row_failures++ == 0)
            snprintf(o->row_failure, sizeof o->row_failure, "timing row %u (arm %s): %.256s", r, arm->name,
                     row->reason);
    } else if (!row->eligible) {
        if (o->rows_ineligible++ == 0)
            snprintf(o->ineligible, sizeof o->ineligible, "timing row %u (arm %s): %.256s", r, arm->name, row->reason);
    } else {
        tok_s[(*n_tok_s)++] = row->tok_s;
    }
    return MEMRA_OK;
}

memra_status gate_timing(gate_ctx *ctx, memra_error *err) {
    const gate_config *cfg = ctx->cfg;
    const uint32_t N = cfg->gen, R = cfg->rows;
    gate_outcome *o = &ctx->out;
    gate_arm *arms[2] = {&ctx->a, &ctx->b};
    const gate_trace *traces[2] = {&ctx->ref, &ctx->rep};
    gate_prefix prefix[2] = {{0}, {0}};
    uint32_t *tokens = malloc((size_t)N * sizeof *tokens);
    double *tok_s[2] = {malloc(R * sizeof(double)), malloc(R * sizeof(double))};
    uint32_t n_tok_s[2] = {0, 0};
    o->rows = calloc(R, sizeof *o->rows);
    memra_status st = MEMRA_OK;
    if (!tokens || !tok_s[0] || !tok_s[1] || !o->rows) {
        st = memra_fail(err, MEMRA_E_NOMEM, "out of memory for %u timing rows", R);
        goto out;
    }
    /* The scored (work) states are made here and stepped only inside rows: the first row of each
     * arm starts from a fresh state, so a graph backend's capture falls inside that row's clock
     * (the protocol's first_scored_capture_inside_timing, checked at the row). */
    for (int i = 0; i < 2 && st == MEMRA_OK; i++)
        st = gate_prefix_open(ctx, arms[i], traces[i], cfg->prime + cfg->gen, &prefix[i], err);
    for (uint32_t r = 0; r < R && st == MEMRA_OK; r++) {
        int which = gate_schedule_arm(r, R, cfg->baab);
        st = timing_row(ctx, r, which, &prefix[which], tokens, tok_s[which], &n_tok_s[which], err);
        if (st == MEMRA_OK)
            st = gate_check_stop(ctx, err);
        gate_progress(ctx, "timing rows", r + 1, R);
    }
    /* The scored states after their rows: census, and their graphs with --dump-graphs. */
    for (int i = 0; i < 2 && st == MEMRA_OK; i++)
        st = gate_census(ctx, arms[i], prefix[i].work, "timing", err);
    if (st == MEMRA_OK) {
        /* An interval needs at least two eligible rows an arm: one row each resamples to itself. */
        o->have_ratio = n_tok_s[0] >= 2 && n_tok_s[1] >= 2 &&
                        gate_bootstrap_ratio(tok_s[0], n_tok_s[0], tok_s[1], n_tok_s[1], GATE_BOOTSTRAP_RESAMPLES,
                                             GATE_BOOTSTRAP_SEED, &o->ratio_lo, &o->ratio_hi);
        arm_summary(ctx, 0, tok_s[0], n_tok_s[0]);
        arm_summary(ctx, 1, tok_s[1], n_tok_s[1]);
        o->ratio = o->median[1] / o->median[0];
        o->timing_done = true;
    }
out:
    for (int i = 0; i < 2; i++) {
        gate_prefix_close(&prefix[i]);
        free(tok_s[i]);
    }
    free(tokens);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Carry check                                                                                 */

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
        gate_arm *arm = arms[i];
        gate_prefix p;
        gate_pass pass = {.steps = N, .tokens = tokens};
        st = gate_prefix_open(ctx, arm, traces[i], P + N, &p, err);
        if (st == MEMRA_OK && (st = gate_pass_run(ctx, &p, &pass, err)) != MEMRA_OK)
            memra_error_prefix(err, "carry check");
        if (st == MEMRA_OK) {
            gate_rec_carry_check(ctx, arm, &pass, traces[i]);
            if (!pass.verified) {
                pass.miss.where = "carry";
                pass.miss.first = o->carry_failures == 0;
                gate_rec_mismatch(ctx, &pass.miss);
                if (o->carry_failures++ == 0)
                    snprintf(o->carry_failure, sizeof o->carry_failure, "arm %s (%s): %.256s", arm->name,
                             memra_arm_text(arm->arm), pass.miss.reason);
            }
        }
        gate_prefix_close(&p);
        if (st == MEMRA_OK)
            st = gate_check_stop(ctx, err);
    }
    free(tokens);
    if (st == MEMRA_OK)
        o->carry_done = true;
    return st;
}
