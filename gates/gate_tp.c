/* gate_tp.c: what memra-gate checks of a tensor-parallel arm (its backend offers memra.tp), all
 * through the arm layer:
 *   the epoch census  during each correctness pass, after every step where the arm drained: every
 *                     block of every rank advanced by exactly the steps since the last check (one
 *                     all-reduce after attention, block layer*2, and one after the FFN, block
 *                     layer*2+1, per layer per step), blocks of another stage's layers not at all;
 *   the refusal cells after the correctness passes: a refusal armed at (rank, layer, block,
 *                     position) on a work state restored from the arm's prefix must fail exactly
 *                     that step with MEMRA_E_REFUSED and a message naming the cell, leave position
 *                     and every digest as they were before it, and quarantine the state; the step
 *                     runs with the arm's window full: up to window - 1 steps issued before it
 *                     and window - 1 behind it, none of which may commit after it;
 *   differ by design  arms whose layers are split over other rank counts (or that run on other
 *                     device families) sum in another order: an exact comparison is expected to
 *                     fail, and the gate says so.
 * An arm without memra.tp has tp.on false and none of this runs for it. */
#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gate.h"

static const char *which_name(uint32_t which) { return which ? "ffn" : "attention"; }

static size_t tp_index(const gate_tp *t, uint32_t stage, uint32_t rank, uint32_t block) {
    return ((size_t)stage * MEMRA_MAX_RANKS + rank) * t->n_blocks + block;
}

/* The stage that holds layer l. */
static uint32_t stage_of(const memra_plan *plan, uint32_t layer) {
    for (uint32_t s = 0; s < plan->n_stages; s++)
        if (layer >= plan->stages[s].layer_begin && layer < plan->stages[s].layer_end)
            return s;
    return 0;
}

memra_status gate_tp_open(gate_ctx *ctx, gate_arm *arm, memra_error *err) {
    (void)ctx;
    gate_tp *t = &arm->tp;
    memset(t, 0, sizeof *t);
    memra_error e = {0};
    bool refusals = false;
    memra_status st = memra_arm_collective(arm->arm, t->collective, sizeof t->collective, &refusals, &e);
    if (st == MEMRA_E_UNSUPPORTED)
        return MEMRA_OK; /* no tensor-parallel stage: nothing of this file runs for the arm */
    if (st != MEMRA_OK) {
        *err = e;
        return st;
    }
    const memra_plan *plan = memra_arm_plan(arm->arm);
    t->n_layer = memra_arm_model(arm->arm)->n_layer;
    t->n_blocks = 2 * t->n_layer;
    t->n_stages = plan->n_stages;
    for (uint32_t s = 0; s < t->n_stages; s++)
        t->ranks[s] = plan->stages[s].n_ranks;
    size_t n = (size_t)t->n_stages * MEMRA_MAX_RANKS * t->n_blocks;
    t->last = calloc(n, sizeof *t->last);
    t->start = calloc(n, sizeof *t->start);
    t->expected = calloc(n, sizeof *t->expected);
    if (!t->last || !t->start || !t->expected) {
        gate_tp_close(arm);
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory for the epoch census of arm %s", arm->name);
    }
    t->on = true;
    t->refusals = refusals;
    return MEMRA_OK;
}

void gate_tp_close(gate_arm *arm) {
    gate_tp *t = &arm->tp;
    free(t->last);
    free(t->start);
    free(t->expected);
    t->last = t->start = t->expected = NULL;
    t->on = false;
}

/* ------------------------------------------------------------------------------------------ */
/* The epoch census                                                                            */

/* Every (stage, rank)'s epochs into out (indexed as tp_index). */
static memra_status read_epochs(gate_arm *arm, uint64_t *out, memra_error *err) {
    gate_tp *t = &arm->tp;
    for (uint32_t s = 0; s < t->n_stages; s++)
        for (uint32_t r = 0; r < t->ranks[s] && t->ranks[s] > 1 && r < MEMRA_MAX_RANKS; r++) {
            memra_status st = memra_arm_epochs(arm->arm, s, r, out + tp_index(t, s, r, 0), t->n_blocks, err);
            if (st != MEMRA_OK) {
                memra_error_prefix(err, "epoch census: stage %u rank %u", s, r);
                return st;
            }
        }
    return MEMRA_OK;
}

memra_status gate_tp_epochs_begin(gate_ctx *ctx, gate_arm *arm, memra_error *err) {
    (void)ctx;
    gate_tp *t = &arm->tp;
    if (!t->on)
        return MEMRA_OK;
    size_t n = (size_t)t->n_stages * MEMRA_MAX_RANKS * t->n_blocks;
    memset(t->last, 0, n * sizeof *t->last);
    memset(t->expected, 0, n * sizeof *t->expected);
    t->pending = t->checks = t->steps = 0;
    memra_status st = read_epochs(arm, t->last, err);
    if (st != MEMRA_OK)
        return st;
    memcpy(t->start, t->last, n * sizeof *t->start);
    t->counting = true;
    return MEMRA_OK;
}

memra_status gate_tp_epochs_step(gate_ctx *ctx, gate_arm *arm, uint32_t step, bool drained, memra_error *err) {
    gate_tp *t = &arm->tp;
    if (!t->on || !t->counting)
        return MEMRA_OK;
    t->pending++;
    t->steps++;
    if (!drained)
        return MEMRA_OK; /* a pipelined arm: checked where it drains, for every step since */
    size_t n = (size_t)t->n_stages * MEMRA_MAX_RANKS * t->n_blocks;
    uint64_t *now = malloc(n * sizeof *now);
    if (!now)
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory for the epoch census");
    memset(now, 0, n * sizeof *now);
    memra_status st = read_epochs(arm, now, err);
    if (st != MEMRA_OK) {
        free(now);
        return st;
    }
    const memra_plan *plan = memra_arm_plan(arm->arm);
    gate_outcome *o = &ctx->out;
    for (uint32_t s = 0; s < t->n_stages; s++) {
        const memra_stage_plan *sp = &plan->stages[s];
        for (uint32_t r = 0; r < t->ranks[s] && t->ranks[s] > 1 && r < MEMRA_MAX_RANKS; r++) /* plain: no epochs */
            for (uint32_t b = 0; b < t->n_blocks; b++) {
                const size_t i = tp_index(t, s, r, b);
                const uint32_t layer = b / 2;
                const uint64_t want = layer >= sp->layer_begin && layer < sp->layer_end ? t->pending : 0;
                const uint64_t got = now[i] - t->last[i];
                t->expected[i] += want;
                if (got == want)
                    continue;
                if (t->failures++ == 0)
                    snprintf(t->failure, sizeof t->failure,
                             "arm %s (%.80s): epoch census: at step %u (%u step(s) since the last check), stage %u "
                             "rank %u block %u (layer %u %s) advanced by %" PRIu64 ", expected %" PRIu64,
                             arm->name, memra_arm_text(arm->arm), step, t->pending, s, r, b, layer, which_name(b % 2),
                             got, want);
                if (o->epoch_failures++ == 0)
                    snprintf(o->epoch_failure, sizeof o->epoch_failure, "%s", t->failure);
            }
    }
    memcpy(t->last, now, n * sizeof *now);
    free(now);
    t->pending = 0;
    t->checks++;
    return MEMRA_OK;
}

void gate_tp_epochs_end(gate_arm *arm) { arm->tp.counting = false; }

/* ------------------------------------------------------------------------------------------ */
/* Refusal cells                                                                               */

/* The cells of an arm (--cells some or all) into cells; returns how many. */
static uint32_t make_cells(const gate_ctx *ctx, const gate_arm *arm, gate_cell *cells, uint32_t max) {
    const uint32_t P = ctx->cfg->prime, N = ctx->cfg->gen, L = arm->tp.n_layer;
    const memra_plan *plan = memra_arm_plan(arm->arm);
    /* the first, middle and last layer of those on stages with ranks (a plain stage of a mixed
     * plan has no collective, so no cell) */
    uint32_t T = 0;
    for (uint32_t l = 0; l < L; l++)
        T += plan->stages[stage_of(plan, l)].n_ranks > 1;
    const uint32_t want[3] = {0, T / 2, T ? T - 1 : 0};
    uint32_t layers[3] = {0, L / 2, L - 1}, positions[3] = {P, P + (N - 1) / 2, P + N - 1};
    for (uint32_t i = 0, k = 0, l = 0; l < L && i < 3; l++)
        if (plan->stages[stage_of(plan, l)].n_ranks > 1) {
            while (i < 3 && want[i] == k)
                layers[i++] = l;
            k++;
        }
    uint32_t n_layers = 0, n_pos = 0;
    for (uint32_t i = 0; i < 3; i++) { /* distinct, in order (a model of 1 or 2 layers, N of 1 or 2) */
        if (!n_layers || layers[i] != layers[n_layers - 1])
            layers[n_layers++] = layers[i];
        if (!n_pos || positions[i] != positions[n_pos - 1])
            positions[n_pos++] = positions[i];
    }
    uint32_t n = 0;
    if (ctx->cfg->cells == GATE_CELLS_ALL) {
        uint32_t max_ranks = 0;
        for (uint32_t s = 0; s < plan->n_stages; s++)
            if (plan->stages[s].n_ranks > max_ranks)
                max_ranks = plan->stages[s].n_ranks;
        for (uint32_t r = 0; r < max_ranks; r++)
            for (uint32_t l = 0; l < n_layers; l++) {
                uint32_t s = stage_of(plan, layers[l]);
                if (r >= plan->stages[s].n_ranks)
                    continue;
                for (uint32_t w = 0; w < 2; w++)
                    for (uint32_t p = 0; p < n_pos && n < max; p++)
                        cells[n++] = (gate_cell){
                            .stage = s, .rank = r, .layer = layers[l], .which = w, .position = positions[p]};
            }
    } else {
        /* six, like the seed's: rank 0 and the last rank; the first, middle and last layer at the
         * first, middle and last position; attention and FFN alternating */
        for (uint32_t k = 0; k < 2; k++)
            for (uint32_t i = 0; i < 3 && n < max; i++) {
                uint32_t layer = layers[i < n_layers ? i : n_layers - 1];
                uint32_t s = stage_of(plan, layer);
                uint32_t rank = k ? plan->stages[s].n_ranks - 1 : 0;
                cells[n++] = (gate_cell){.stage = s,
                                         .rank = rank,
                                         .layer = layer,
                                         .which = (i + k) % 2,
                                         .position = positions[i < n_pos ? i : n_pos - 1]};
            }
    }
    for (uint32_t i = 0; i < n; i++) {
        cells[i].index = i;
        cells[i].block = cells[i].layer * 2 + cells[i].which;
        cells[i].word = (int32_t)(0x6d650000u + i); /* "me" and the cell: distinctive */
        snprintf(cells[i].expected, sizeof cells[i].expected,
                 "MEMRA_E_REFUSED at the step of position %u, naming rank %u, layer %u, block %u (%s) and position "
                 "%u",
                 cells[i].position, cells[i].rank, cells[i].layer, cells[i].block, which_name(cells[i].which),
                 cells[i].position);
    }
    return n;
}

/* Whether msg holds `word` followed by the number v as a whole number ("rank 1", not "rank 10"). */
static bool names_number(const char *msg, const char *word, uint32_t v) {
    char want[64];
    int len = snprintf(want, sizeof want, "%s %u", word, v);
    for (const char *p = msg; (p = strstr(p, want)) != NULL; p++)
        if (!isdigit((unsigned char)p[len]))
            return true;
    return false;
}

static bool names_cell(const char *msg, const gate_cell *c) {
    char lower[sizeof c->message];
    size_t i = 0;
    for (; msg[i] && i + 1 < sizeof lower; i++)
        lower[i] = (char)tolower((unsigned char)msg[i]);
    lower[i] = '\0';
    bool block = names_number(lower, "block", c->block) || strstr(lower, c->which ? "ffn" : "attention");
    return names_number(lower, "rank", c->rank) && names_number(lower, "layer", c->layer) && block &&
           names_number(lower, "position", c->position);
}

static memra_status stop_cb(void *user, uint32_t step, const float *logits, const memra_step_result *res, bool drained,
                            memra_error *err) {
    (void)step, (void)logits, (void)res, (void)drained;
    return gate_check_stop(user, err);
}

static void cell_reason(gate_cell *c, const char *fmt, const char *detail) {
    if (!c->reason[0])
        snprintf(c->reason, sizeof c->reason, fmt, detail);
}

/* The digests (logits, cache, hidden) and position of the arm's state after the steps before
 * the cell's position, on a state of their own restored from snap, drained: what the refused
 * step must leave. Taken before the cell is armed (a backend may hand a cell to the state whose
 * window can reach it). A step that fails is the cell's failure (c->reason), not a runtime error. */
static memra_status cell_before(gate_ctx *ctx, gate_arm *arm, const gate_trace *trace, memra_arm_state *snap,
                                gate_cell *c, memra_error *err) {
    const uint32_t P = ctx->cfg->prime, N = ctx->cfg->gen, W = arm->window ? arm->window : 1;
    memra_arm_state *ref = NULL;
    /* the work state's capacity: a backend's cache digest may depend on it (cuda's does) */
    memra_status st = gate_new_state(arm, P + N + W, &ref, err);
    if (st == MEMRA_OK)
        st = memra_arm_state_restore(ref, snap, err);
    if (st != MEMRA_OK) {
        memra_arm_state_free(ref);
        return st;
    }
    c->start_position = memra_arm_state_position(ref);
    memra_error e = {0};
    memra_status pre = c->position > c->start_position
                           ? memra_arm_run(ref, trace->inputs, c->start_position, c->position - c->start_position,
                                           &ctx->cfg->sample, NULL, stop_cb, ctx, &e)
                           : MEMRA_OK;
    if ((st = gate_check_stop(ctx, err)) == MEMRA_OK) {
        if (pre != MEMRA_OK) {
            c->status = pre;
            snprintf(c->message, sizeof c->message, "%s", e.msg);
            cell_reason(c, "a step before the cell's position failed: %.400s", e.msg);
        } else {
            c->position_before = memra_arm_state_position(ref);
            c->have_before = memra_arm_digests(ref, c->before[0], c->before[1], c->before[2], &e) == MEMRA_OK;
            if (!c->have_before)
                cell_reason(c, "the digests before the cell's step could not be taken: %.400s", e.msg);
        }
    }
    memra_arm_state_free(ref);
    return st;
}

/* One cell on a fresh work state restored from snap, with the arm's window full around the
 * refused step: up to window - 1 steps issued before it (still in flight when it runs, so a
 * stage may be busy with the step before while the next judges it) and window - 1 issued
 * behind it, which must commit nothing either (the state is poisoned by the refusal). A runtime
 * error (arming, restoring, a signal) is returned; a cell that misbehaves is c->pass false with
 * c->reason. */
static memra_status run_cell(gate_ctx *ctx, gate_arm *arm, const gate_trace *trace, memra_arm_state *snap, gate_cell *c,
                             memra_error *err) {
    const uint32_t P = ctx->cfg->prime, N = ctx->cfg->gen, W = arm->window ? arm->window : 1;
    const memra_sample_cfg *sample = &ctx->cfg->sample;
    memra_status st = cell_before(ctx, arm, trace, snap, c, err);
    if (st != MEMRA_OK)
        return st;
    if (c->reason[0])
        return MEMRA_OK; /* a step before the cell failed: c->pass stays false */
    /* The inputs, with room for the steps behind the last position (any token: they must not
     * commit). */
    int64_t *inputs = malloc(((size_t)P + N + W) * sizeof *inputs);
    if (!inputs)
        return memra_fail(err, MEMRA_E_NOMEM, "refusal cell %u: out of memory", c->index);
    memcpy(inputs, trace->inputs, ((size_t)P + N) * sizeof *inputs);
    for (uint32_t i = P + N; i < P + N + W; i++)
        inputs[i] = trace->inputs[P + N - 1];
    memra_arm_state *work = NULL;
    st = gate_new_state(arm, P + N + W, &work, err);
    if (st == MEMRA_OK)
        st = memra_arm_state_restore(work, snap, err);
    const uint32_t S = c->start_position;
    const uint32_t before = c->position - S < W - 1 ? c->position - S : W - 1; /* issued before the cell's step */
    memra_error e = {0};
    memra_status pre = MEMRA_OK;
    if (st == MEMRA_OK && c->position - before > S)
        pre = memra_arm_run(work, inputs, S, c->position - before - S, sample, NULL, stop_cb, ctx, &e);
    if (st == MEMRA_OK && (st = gate_check_stop(ctx, err)) == MEMRA_OK && pre == MEMRA_OK) {
        st = memra_arm_arm_refusal(arm->arm, c->stage, c->rank, c->layer, c->which, c->position, c->word, err);
        if (st != MEMRA_OK)
            memra_error_prefix(err, "refusal cell %u: arming", c->index);
    }
    if (st != MEMRA_OK) {
        memra_arm_state_free(work);
        free(inputs);
        return st;
    }
    if (pre != MEMRA_OK) {
        c->status = pre;
        snprintf(c->message, sizeof c->message, "%s", e.msg);
        cell_reason(c, "a step before the cell's position failed: %.400s", e.msg);
        goto probe;
    }
    memra_error_clear(&e);
    /* one run: `before` steps, the cell's, and W - 1 behind it, W in flight at a time */
    c->status = memra_arm_run(work, inputs, c->position - before, before + W, sample, NULL, stop_cb, ctx, &e);
    snprintf(c->message, sizeof c->message, "%s", c->status == MEMRA_OK ? "" : e.msg);
    if ((st = gate_check_stop(ctx, err)) != MEMRA_OK)
        goto out;
    c->names_cell = c->status != MEMRA_OK && names_cell(c->message, c);
    char word[32];
    snprintf(word, sizeof word, "%" PRId32, c->word);
    char hexword[32];
    snprintf(hexword, sizeof hexword, "0x%08" PRIx32, (uint32_t)c->word);
    c->names_word = c->status != MEMRA_OK && (strstr(c->message, word) || strstr(c->message, hexword));
    if (c->status == MEMRA_OK)
        cell_reason(c, "%s", "the step at the cell's position did not fail: the refusal committed");
    else if (c->status != MEMRA_E_REFUSED)
        cell_reason(c, "the step failed with another status than MEMRA_E_REFUSED: %.400s", c->message);
    else if (!c->names_cell)
        cell_reason(c, "the refusal's message does not name rank, layer, block and position: %.400s", c->message);
probe:
    c->position_after = memra_arm_state_position(work);
    memra_error_clear(&e);
    c->have_after = memra_arm_digests(work, c->after[0], c->after[1], c->after[2], &e) == MEMRA_OK;
    c->digests_unchanged = c->have_before && c->have_after && memcmp(c->before, c->after, sizeof c->before) == 0;
    char behind[96];
    snprintf(behind, sizeof behind, "the refused step (or one of the %u step(s) issued behind it)", W - 1);
    if (c->status != MEMRA_OK && c->position_after != c->position_before)
        cell_reason(c, "%s moved the position", behind);
    else if (c->status != MEMRA_OK && c->have_before && !c->digests_unchanged)
        cell_reason(c, c->have_after ? "a digest changed across %s: something was committed" : "%s",
                    c->have_after ? behind : "the digests after the refused step could not be taken");
    c->quarantined = memra_arm_state_quarantined(work);
    if (c->status != MEMRA_OK) {
        /* no retry may run, no restore may clean the state */
        uint32_t at = c->position_after < P + N ? c->position_after : P + N - 1;
        c->next_step = memra_arm_run(work, trace->inputs, at, 1, sample, NULL, stop_cb, ctx, NULL);
        c->restore = memra_arm_state_restore(work, snap, NULL);
        c->quarantine_observed =
            c->quarantined && c->next_step == MEMRA_E_QUARANTINED && c->restore == MEMRA_E_QUARANTINED;
        if (!c->quarantine_observed)
            cell_reason(c, "%s",
                        "the state was not quarantined (a step or a restore after the refusal did not fail with "
                        "MEMRA_E_QUARANTINED)");
        else if (memra_arm_state_position(work) != c->position_after)
            cell_reason(c, "%s", "a step after the refusal moved the position (a retry ran)");
    } else {
        c->next_step = c->restore = MEMRA_OK;
    }
    c->pass = !c->reason[0];
out:
    memra_arm_state_free(work);
    free(inputs);
    memra_error ce = {0};
    memra_status cst = memra_arm_clear_refusals(arm->arm, &ce);
    if (st == MEMRA_OK && cst != MEMRA_OK) {
        *err = ce;
        st = cst;
    }
    return st;
}

static memra_status arm_cells(gate_ctx *ctx, gate_arm *arm, const gate_trace *trace, memra_error *err) {
    gate_outcome *o = &ctx->out;
    gate_cell *cells = calloc(GATE_TP_MAX_CELLS, sizeof *cells);
    if (!cells)
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory for the refusal cells");
    const uint32_t n = make_cells(ctx, arm, cells, GATE_TP_MAX_CELLS);
    gate_prefix p;
    memra_status st = gate_prefix_open(ctx, arm, trace, ctx->cfg->prime + ctx->cfg->gen, &p, err);
    /* each cell makes its own work state (a refused one stays quarantined): the prefix's is not used */
    memra_arm_state_free(p.work);
    p.work = NULL;
    for (uint32_t i = 0; i < n && st == MEMRA_OK; i++) {
        gate_cell *c = &cells[i];
        if ((st = run_cell(ctx, arm, trace, p.snapshot, c, err)) != MEMRA_OK)
            break;
        o->cells_run++;
        gate_rec_refusal(ctx, arm, c);
        if (!c->pass && o->cells_failed++ == 0)
            snprintf(o->cell_failure, sizeof o->cell_failure,
                     "arm %s (%.80s): refusal cell %u (rank %u, layer %u, %s, position %u): %.400s", arm->name,
                     memra_arm_text(arm->arm), c->index, c->rank, c->layer, which_name(c->which), c->position,
                     c->reason);
        gate_progress(ctx, "refusal cells", i + 1, n);
        st = gate_check_stop(ctx, err);
    }
    gate_prefix_close(&p);
    free(cells);
    return st;
}

memra_status gate_tp_cells(gate_ctx *ctx, memra_error *err) {
    if (ctx->cfg->cells == GATE_CELLS_NONE)
        return MEMRA_OK;
    gate_arm *arms[2] = {&ctx->a, &ctx->b};
    const gate_trace *traces[2] = {&ctx->ref, &ctx->rep};
    memra_status st = MEMRA_OK;
    for (int i = 0; i < 2 && st == MEMRA_OK; i++)
        if (arms[i]->tp.on && arms[i]->tp.refusals) {
            st = arm_cells(ctx, arms[i], traces[i], err);
            ctx->out.cells_done = true;
        }
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Differ by design                                                                            */

/* The device family of a backend: cuda and cuda-graph are one (a name starting "cuda"); every
 * other backend runs on the host (cpu, and test backends built on it). */
static const char *family(const gate_arm *a) {
    return strncmp(memra_arm_backend_name(a->arm), "cuda", 4) == 0 ? "cuda" : "host";
}

/* The ranks of a stage that hold a share of the heads: those whose partials are summed. Expert
 * ranks (ep=N alone) that hold no heads and no ffn rows only add zeros to rank 0's sums, and
 * their experts' slots each have one contributor, so they change no bit. */
static uint32_t summing_ranks(const memra_stage_plan *sp) {
    uint32_t n = 0;
    for (uint32_t r = 0; r < sp->n_ranks; r++)
        n += sp->ranks[r].head_end > sp->ranks[r].head_begin;
    return n;
}

void gate_tp_by_design(gate_ctx *ctx) {
    ctx->by_design[0] = '\0';
    const gate_arm *a = &ctx->a, *b = &ctx->b;
    const char *fa = family(a), *fb = family(b);
    if (strcmp(fa, fb) != 0) {
        snprintf(ctx->by_design, sizeof ctx->by_design,
                 "arms a (%.60s) and b (%.60s) run on different device families (%s, %s): their kernels sum in "
                 "different orders",
                 memra_arm_text(a->arm), memra_arm_text(b->arm), fa, fb);
        return;
    }
    const memra_plan *pa = memra_arm_plan(a->arm), *pb = memra_arm_plan(b->arm);
    const uint32_t L = memra_arm_model(a->arm)->n_layer;
    for (uint32_t l = 0; l < L; l++) {
        uint32_t ra = summing_ranks(&pa->stages[stage_of(pa, l)]), rb = summing_ranks(&pb->stages[stage_of(pb, l)]);
        if (ra != rb) {
            snprintf(ctx->by_design, sizeof ctx->by_design,
                     "arms a (%.60s) and b (%.60s) split layer %u over %u and %u tensor-parallel ranks: their "
                     "partial sums are added in different orders",
                     memra_arm_text(a->arm), memra_arm_text(b->arm), l, ra, rb);
            return;
        }
    }
    /* Mixture of experts: with tp > 1 and no ep every expert's rows are split over the ranks (a
     * slot sums their partials); with ep each expert is whole on one rank. */
    const memra_model *m = memra_arm_model(a->arm);
    const char *ea = memra_options_get(memra_arm_options(a->arm), "ep"), *eb = memra_options_get(memra_arm_options(b->arm), "ep");
    bool split_a = pa->stages[0].n_ranks > 1 && (!ea || strcmp(ea, "1") == 0);
    bool split_b = pb->stages[0].n_ranks > 1 && (!eb || strcmp(eb, "1") == 0);
    if (m->n_expert > 0 && split_a != split_b)
        snprintf(ctx->by_design, sizeof ctx->by_design,
                 "arms a (%.60s) and b (%.60s) split the experts differently (rows over tensor-parallel ranks, or whole "
                 "experts on expert ranks): their partial sums are added in different orders",
                 memra_arm_text(a->arm), memra_arm_text(b->arm));
}
