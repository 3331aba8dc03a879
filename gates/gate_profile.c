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

/* One arm's window: the warm-up pass (one step) and the window's pass. */
typedef struct profile_window {
    uint32_t warmup_token[1];
    uint32_t tokens[GATE_PROFILE_STEPS];
    gate_pass warmup, window;
    char range[200];
} profile_window;

/* Inside the pass's clock: the window's NVTX ranges. */
static void ranges(void *user, bool begin) {
    profile_window *w = user;
    if (begin) {
        range_push(PROFILE_RANGE);
        range_push(w->range);
    } else {
        range_pop();
        range_pop();
    }
}

static memra_status run_window(gate_ctx *ctx, gate_arm *arm, const gate_trace *trace, profile_window *w,
                               memra_error *err) {
    const uint32_t P = ctx->cfg->prime, S = GATE_PROFILE_STEPS;
    snprintf(w->range, sizeof w->range, "memra-gate:profile arm %s (%s) positions %u..%u", arm->name,
             memra_arm_text(arm->arm), P, P + S);
    w->warmup = (gate_pass){.steps = 1, .tokens = w->warmup_token};
    w->window = (gate_pass){.steps = S, .tokens = w->tokens, .hook = ranges, .hook_user = w};
    gate_prefix p;
    memra_status st = gate_prefix_open(ctx, arm, trace, P + S, &p, err);
    /* The warm-up: any capture of a fresh state happens here, outside the window. */
    if (st == MEMRA_OK && (st = gate_pass_run(ctx, &p, &w->warmup, err)) != MEMRA_OK)
        memra_error_prefix(err, "profile warm-up");
    if (st == MEMRA_OK && (st = gate_pass_run(ctx, &p, &w->window, err)) != MEMRA_OK)
        memra_error_prefix(err, "profile window");
    gate_prefix_close(&p);
    return st;
}

/* Why the windows fail, in the order the checks are made (empty: they pass); `m` says where. */
static void judge_windows(gate_ctx *ctx, const profile_window *w, int64_t differ, const char *digest_differs, char *why,
                          size_t size, gate_mismatch *m) {
    const uint32_t P = ctx->cfg->prime, S = GATE_PROFILE_STEPS;
    const gate_arm *arms[2] = {&ctx->a, &ctx->b};
    const gate_trace *traces[2] = {&ctx->ref, &ctx->rep};
    why[0] = '\0';
    *m = (gate_mismatch){.where = "profile",
                         .arm = "b",
                         .against = "a",
                         .row = -1,
                         .step = -1,
                         .input = -1,
                         .token_ref = -1,
                         .token_got = -1,
                         .first = true};
    for (int i = 0; i < 2 && !why[0]; i++) {
        const char *arm = m->arm = arms[i]->name;
        m->against = "correctness";
        const gate_pass *win = &w[i].window, *up = &w[i].warmup;
        if (win->end != P + S) {
            m->position = true;
            snprintf(why, size, "arm %s's profile window ended at position %u, expected %u", arm, win->end, P + S);
        } else if (up->miss.token) {
            m->warmup = m->token = true;
            m->step = P;
            m->input = traces[i]->inputs[P];
            m->token_ref = up->miss.token_ref;
            m->token_got = up->miss.token_got;
            snprintf(why, size,
                     "arm %s's profile warm-up step sampled %" PRId64 " at position %u; the correctness run "
                     "sampled %" PRId64,
                     arm, m->token_got, P, m->token_ref);
        }
    }
    if (!why[0] && differ >= 0) {
        *m = (gate_mismatch){.where = "profile",
                             .arm = "b",
                             .against = "a",
                             .row = -1,
                             .step = P + differ,
                             .input = -1,
                             .token = true,
                             .token_ref = w[0].tokens[differ],
                             .token_got = w[1].tokens[differ],
                             .first = true};
        snprintf(why, size,
                 "profile windows differ at window step %" PRId64 " (the step at position %" PRIu64
                 "): arm a sampled %u, arm b %u",
                 differ, P + (uint64_t)differ, w[0].tokens[differ], w[1].tokens[differ]);
    } else if (!why[0] && digest_differs) {
        *m = (gate_mismatch){.where = "profile",
                             .arm = "b",
                             .against = "a",
                             .row = -1,
                             .step = -1,
                             .input = -1,
                             .token_ref = -1,
                             .token_got = -1,
                             .have_digests = true,
                             .first = true};
        m->digest_logits = memcmp(w[0].window.final[0], w[1].window.final[0], 32) != 0;
        m->cache = memcmp(w[0].window.final[1], w[1].window.final[1], 32) != 0;
        m->hidden = memcmp(w[0].window.final[2], w[1].window.final[2], 32) != 0;
        memcpy(m->cache_ref, w[0].window.final[1], 32);
        memcpy(m->cache_got, w[1].window.final[1], 32);
        memcpy(m->hidden_ref, w[0].window.final[2], 32);
        memcpy(m->hidden_got, w[1].window.final[2], 32);
        snprintf(why, size, "profile windows end with different %s digests (position %u)", digest_differs, P + S);
    }
    for (int i = 0; i < 2 && !why[0]; i++)
        if (!w[i].window.verified) { /* against the arm's own correctness run */
            *m = w[i].window.miss;
            m->where = "profile";
            m->first = true;
            if (m->token)
                snprintf(why, size,
                         "arm %s's profile window differs from the correctness run at generated token %" PRId64
                         ": %" PRId64 ", expected %" PRId64,
                         arms[i]->name, m->step - P, m->token_got, m->token_ref);
            else
                snprintf(why, size, "arm %s's profile window: %.300s", arms[i]->name, m->reason);
        }
    if (why[0])
        snprintf(m->reason, sizeof m->reason, "%s", why);
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
        if (memcmp(w[0].window.final[k], w[1].window.final[k], 32) != 0)
            digest_differs = names[k];
    bool identical = differ < 0 && !digest_differs;
    gate_mismatch m;
    judge_windows(ctx, w, differ, digest_differs, o->profile_failure, sizeof o->profile_failure, &m);
    o->profile_identical = !o->profile_failure[0];
    o->profile_done = true;
    for (int i = 0; i < 2; i++)
        gate_rec_profile(ctx, arms[i], &w[i].warmup, &w[i].window, w[i].range, differ < 0, !digest_differs, identical,
                         o->profile_identical);
    if (o->profile_failure[0])
        gate_rec_mismatch(ctx, &m);
    for (int i = 0; i < 2; i++) {
        const gate_pass *win = &w[i].window;
        if (win->after.captures != win->before.captures && !ctx->cfg->quiet)
            fprintf(stderr, "memra-gate: --profile: arm %s captured %llu graph(s) inside its window\n", arms[i]->name,
                    (unsigned long long)(win->after.captures - win->before.captures));
    }
    free(w);
    return MEMRA_OK;
}
