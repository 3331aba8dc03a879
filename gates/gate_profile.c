/* gate_profile.c: --profile. After the correctness passes, one profile-only window per arm:
 * from the arm's prefix snapshot (position P) a warm-up step, so that a graph backend captures
 * outside the window; a restore; then GATE_PROFILE_STEPS steps with tokens carried on the
 * device, inside NVTX ranges a profiler (nsys) can cut on. Nothing here is timed or scored: a
 * profile run has no timing rows and no ratio. The windows are verified like rows: the arms'
 * tokens (and, in exact mode, final logits, cache and hidden digests) must be identical, and
 * agree with the correctness run where it reaches; any difference is exit 1.
 *
 * NVTX comes from the CUDA toolkit's header-only NVTX3 C API, compiled in where the build found
 * the toolkit (MEMRA_HAVE_NVTX); without it the windows still run and are verified. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gate.h"

#ifdef MEMRA_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

bool gate_have_nvtx(void) {
#ifdef MEMRA_HAVE_NVTX
    return true;
#else
    return false;
#endif
}

static void range_push(const char *name) {
#ifdef MEMRA_HAVE_NVTX
    nvtxRangePushA(name);
#else
    (void)name;
#endif
}

static void range_pop(void) {
#ifdef MEMRA_HAVE_NVTX
    nvtxRangePop();
#endif
}

#define PROFILE_RANGE "memra-gate:profile"

/* One arm's window. */
typedef struct profile_window {
    uint32_t tokens[GATE_PROFILE_STEPS];
    uint8_t tokens_sha[32];
    uint8_t final[3][32]; /* logits, cache, hidden after the window */
    uint32_t end;         /* the state's position after the window */
    int64_t warmup_token; /* what the warm-up step sampled, and what the correctness run did there */
    int64_t warmup_expected;
    uint32_t compared;    /* window tokens compared with the correctness run: min(N, steps) */
    int64_t first_disagreement; /* with the correctness run; -1: none */
    memra_state_stats before, after;
    char range[200];
} profile_window;

static memra_status run_window(gate_ctx *ctx, gate_arm *arm, const gate_trace *trace, profile_window *w,
                               memra_error *err) {
    const uint32_t P = ctx->cfg->prime, N = ctx->cfg->gen, S = GATE_PROFILE_STEPS;
    memra_state *prefix = NULL, *work = NULL;
    snprintf(w->range, sizeof w->range, "memra-gate:profile arm %s (%s) positions %u..%u", arm->name,
             memra_arm_text(arm->arm), P, P + S);
    memra_status st = gate_make_prefix(ctx, arm, trace, &prefix, err);
    if (st == MEMRA_OK)
        st = gate_new_state(ctx, arm, P + S, &work, err);
    /* The warm-up: any capture of a fresh state happens here, outside the window. */
    if (st == MEMRA_OK && (st = arm->vt->state_restore(arm->be, work, prefix, err)) != MEMRA_OK)
        memra_error_prefix(err, "arm %s (%s): profile warm-up: restore", arm->name, memra_arm_text(arm->arm));
    gate_row_run run = {.tokens = w->tokens};
    if (st == MEMRA_OK)
        st = gate_run_steps(ctx, arm, work, NULL, P, 1, NULL, gate_row_step, &run, err);
    w->warmup_token = st == MEMRA_OK ? (int64_t)w->tokens[0] : -1;
    w->warmup_expected = trace->tokens[P];
    if (st == MEMRA_OK && (st = arm->vt->state_restore(arm->be, work, prefix, err)) != MEMRA_OK)
        memra_error_prefix(err, "arm %s (%s): profile window: restore", arm->name, memra_arm_text(arm->arm));
    if (st == MEMRA_OK) {
        w->before = gate_stats(arm, work);
        range_push(PROFILE_RANGE);
        range_push(w->range);
        st = gate_run_steps(ctx, arm, work, NULL, P, S, NULL, gate_row_step, &run, err);
        range_pop();
        range_pop();
        w->after = gate_stats(arm, work);
    }
    if (st == MEMRA_OK) {
        w->end = arm->vt->state_position(arm->be, work);
        st = gate_take_digests(arm, work, w->final[0], w->final[1], w->final[2], err);
    }
    if (st == MEMRA_OK) {
        memra_sha256_tokens(w->tokens, S, w->tokens_sha);
        w->compared = N < S ? N : S;
        w->first_disagreement = -1;
        for (uint32_t i = 0; i < w->compared && w->first_disagreement < 0; i++)
            if ((int64_t)w->tokens[i] != trace->tokens[P + i])
                w->first_disagreement = i;
    }
    if (work)
        arm->vt->state_free(arm->be, work);
    if (prefix)
        arm->vt->state_free(arm->be, prefix);
    return st;
}

/* identical: the arms' windows agree (tokens, and digests in exact mode); verified: that, and
 * every other check of the windows (warm-up, end position, the correctness run) passed. */
static void profile_record(gate_ctx *ctx, const gate_arm *arm, const profile_window *w, bool tokens_same,
                           bool digests_same, bool identical, bool verified) {
    const uint32_t P = ctx->cfg->prime;
    gate_json *j = &ctx->json;
    gj_begin(j, "profile");
    gj_str(j, "arm", arm->name);
    gj_str(j, "arm_text", memra_arm_text(arm->arm));
    gj_u64(j, "steps", GATE_PROFILE_STEPS);
    gj_u64(j, "start_position", P);
    gj_u64(j, "end_position", w->end);
    gj_bool(j, "scored", false);
    gj_hex(j, "tokens_sha256", w->tokens_sha);
    gj_bool(j, "tokens_identical", tokens_same);
    if (ctx->cfg->nmse)
        gj_null(j, "digests_identical"); /* not compared across families */
    else
        gj_bool(j, "digests_identical", digests_same);
    gj_bool(j, "identical", identical);
    gj_bool(j, "verified", verified);
    gj_u64(j, "compared_with_correctness_run", w->compared);
    gj_bool(j, "agrees_with_correctness_run", w->first_disagreement < 0);
    gj_hex(j, "final_logits_sha256", w->final[0]);
    gj_hex(j, "final_cache_sha256", w->final[1]);
    gj_hex(j, "final_hidden_sha256", w->final[2]);
    gj_obj(j, "warmup");
    gj_u64(j, "position", P);
    gj_i64(j, "token", w->warmup_token);
    gj_i64(j, "expected", w->warmup_expected);
    gj_bool(j, "ok", w->warmup_token == w->warmup_expected);
    gj_obj_end(j);
    gj_u64(j, "captures_in_window", w->after.captures - w->before.captures);
    gj_u64(j, "replays_in_window", w->after.replays - w->before.replays);
    gj_bool(j, "capture_outside_window", w->after.captures == w->before.captures);
    gj_bool(j, "nvtx", gate_have_nvtx());
    gj_str(j, "nvtx_range", w->range);
    gj_end(j);
}

static void profile_mismatch_record(gate_ctx *ctx, const char *arm, int64_t index, const char *reason) {
    gate_json *j = &ctx->json;
    gj_begin(j, "mismatch");
    gj_str(j, "where", "profile");
    gj_str(j, "arm", arm);
    if (index >= 0) {
        gj_i64(j, "window_index", index);
        gj_u64(j, "position", ctx->cfg->prime + (uint64_t)index);
    }
    gj_str(j, "reason", reason);
    gj_end(j);
}

memra_status gate_profile(gate_ctx *ctx, memra_error *err) {
    const uint32_t P = ctx->cfg->prime, S = GATE_PROFILE_STEPS;
    gate_outcome *o = &ctx->out;
    profile_window *w = calloc(2, sizeof *w);
    if (!w)
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory for the profile windows");
    gate_arm *arms[2] = {&ctx->a, &ctx->b};
    const gate_trace *traces[2] = {&ctx->ref, &ctx->rep};
    memra_status st = MEMRA_OK;
    for (int i = 0; i < 2 && st == MEMRA_OK; i++)
        st = run_window(ctx, arms[i], traces[i], &w[i], err);
    if (st != MEMRA_OK) {
        free(w);
        return st;
    }
    o->profile_start = P;
    o->profile_end = P + S;
    int64_t differ = -1;
    for (uint32_t i = 0; i < S && differ < 0; i++)
        if (w[0].tokens[i] != w[1].tokens[i])
            differ = i;
    const char *names[3] = {"logits", "cache", "hidden"};
    const char *digest_differs = NULL;
    for (int k = 0; k < 3 && !ctx->cfg->nmse && !digest_differs; k++)
        if (memcmp(w[0].final[k], w[1].final[k], 32) != 0)
            digest_differs = names[k];
    bool identical = differ < 0 && !digest_differs;
    char *why = o->profile_failure;
    const size_t size = sizeof o->profile_failure;
    why[0] = '\0';
    int64_t at = -1;
    const char *arm = "b";
    for (int i = 0; i < 2 && !why[0]; i++) {
        arm = arms[i]->name;
        if (w[i].end != P + S)
            snprintf(why, size, "arm %s's profile window ended at position %u, expected %u", arm, w[i].end, P + S);
        else if (w[i].warmup_token != w[i].warmup_expected)
            snprintf(why, size,
                     "arm %s's profile warm-up step sampled %" PRId64 " at position %u; the correctness run "
                     "sampled %" PRId64,
                     arm, w[i].warmup_token, P, w[i].warmup_expected);
    }
    if (!why[0] && differ >= 0) {
        at = differ;
        arm = "b";
        snprintf(why, size,
                 "profile windows differ at window step %" PRId64 " (the step at position %" PRIu64
                 "): arm a sampled %u, arm b %u",
                 differ, P + (uint64_t)differ, w[0].tokens[differ], w[1].tokens[differ]);
    } else if (!why[0] && digest_differs) {
        arm = "b";
        snprintf(why, size, "profile windows end with different %s digests (position %u)", digest_differs, P + S);
    }
    for (int i = 0; i < 2 && !why[0]; i++)
        if (w[i].first_disagreement >= 0) {
            at = w[i].first_disagreement;
            arm = arms[i]->name;
            snprintf(why, size,
                     "arm %s's profile window differs from the correctness run at generated token %" PRId64
                     ": %u, expected %" PRId64,
                     arms[i]->name, at, w[i].tokens[at], traces[i]->tokens[P + at]);
        }
    o->profile_identical = !why[0];
    o->profile_done = true;
    for (int i = 0; i < 2; i++)
        profile_record(ctx, arms[i], &w[i], differ < 0, !digest_differs, identical, o->profile_identical);
    if (why[0])
        profile_mismatch_record(ctx, arm, at, why);
    for (int i = 0; i < 2; i++)
        if (w[i].after.captures != w[i].before.captures && !ctx->cfg->quiet)
            fprintf(stderr, "memra-gate: --profile: arm %s captured %llu graph(s) inside its window\n", arms[i]->name,
                    (unsigned long long)(w[i].after.captures - w[i].before.captures));
    free(w);
    return MEMRA_OK;
}
