/* gate_pass.c: the pass from a prefix, the one helper behind the timing rows, the carry check
 * and the --profile windows. An arm's prefix snapshot is made once: a copy of its correctness run
 * taken right after the P prime steps (gate_prefix_keep), or, for a later user, P prime steps
 * again, checked against the correctness run; each pass restores it into a work state, runs generated
 * steps with tokens carried on the device (the sampled token of one step is the input of the
 * next, never read back and fed again), times them, and verifies what it produced against the
 * arm's correctness run. */
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "gate.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

memra_status gate_new_state(gate_arm *arm, uint32_t capacity, memra_arm_state **out, memra_error *err) {
    return memra_arm_state_new(arm->arm, capacity, out, err);
}

/* The steps of a pass: generated tokens land in tokens[step - P]; the last prime step's token
 * in prefix_token. */
typedef struct pass_steps {
    const gate_ctx *ctx;
    uint32_t prime;
    uint32_t *tokens;
    int64_t prefix_token;
} pass_steps;

static memra_status pass_step(void *user, uint32_t step, const float *logits, const memra_step_result *res,
                              bool drained, memra_error *err) {
    (void)logits, (void)drained;
    pass_steps *p = user;
    if (step >= p->prime)
        p->tokens[step - p->prime] = (uint32_t)res->token;
    else if (step + 1 == p->prime)
        p->prefix_token = res->token;
    return gate_check_stop(p->ctx, err);
}

/* ---- Priming (gate.h: gate_prime) ---- */

typedef struct prime_chunks {
    gate_trace *trace;
    memra_arm_step_fn fn;
    gate_inner_fn inner;
    void *user;
    uint32_t next; /* the first step of the chunk in progress */
} prime_chunks;

static memra_status prime_boundary(void *user, uint32_t step, const float *logits, const memra_step_result *res,
                                   bool drained, memra_error *err) {
    prime_chunks *p = user;
    for (uint32_t k = p->next; k < step; k++) {
        if (p->trace)
            p->trace->tokens[k] = -1;
        memra_status st = p->inner ? p->inner(p->user, k, err) : MEMRA_OK;
        if (st != MEMRA_OK)
            return st;
    }
    p->next = step + 1;
    return p->fn ? p->fn(p->user, step, logits, res, drained, err) : MEMRA_OK;
}

memra_status gate_prime(gate_ctx *ctx, gate_arm *arm, gate_trace *trace, memra_arm_state *s, const int64_t *inputs,
                        const memra_sample_cfg *sample, float *logits, memra_arm_step_fn fn, gate_inner_fn inner,
                        void *user, memra_error *err) {
    const uint32_t P = ctx->cfg->prime;
    if (memra_arm_prefill(arm->arm) <= 1 || !memra_arm_prefill_native(arm->arm) || P < 2)
        return memra_arm_run(s, inputs, 0, P, sample, logits, fn, user, err);
    prime_chunks pc = {.trace = trace, .fn = fn, .inner = inner, .user = user};
    memra_status st = memra_arm_prefill_run(s, inputs, 0, P - 1, logits, prime_boundary, &pc, err);
    if (st == MEMRA_OK)
        st = memra_arm_run(s, inputs, P - 1, 1, sample, logits, fn, user, err);
    return st;
}

memra_status gate_prefix_open(gate_ctx *ctx, gate_arm *arm, const gate_trace *trace, uint32_t capacity, gate_prefix *p,
                              memra_error *err) {
    const uint32_t P = ctx->cfg->prime;
    memset(p, 0, sizeof *p);
    p->arm = arm;
    p->trace = trace;
    pass_steps run = {.ctx = ctx, .prime = P, .prefix_token = -1};
    memra_status st;
    if (arm->prefix) { /* the correctness run's own state at P: nothing to prime or check again */
        p->snapshot = arm->prefix;
        arm->prefix = NULL;
        if (memra_arm_state_position(p->snapshot) != P)
            st = memra_fail(err, MEMRA_E_INTERNAL, "arm %s (%s): the kept prefix is at position %u, expected %u",
                            arm->name, memra_arm_text(arm->arm), memra_arm_state_position(p->snapshot), P);
        else
            st = gate_new_state(arm, capacity, &p->work, err);
        if (st != MEMRA_OK)
            gate_prefix_close(p);
        return st;
    }
    st = gate_new_state(arm, ctx->cfg->prime + ctx->cfg->gen, &p->snapshot, err);
    if (st == MEMRA_OK)
        st =
            gate_prime(ctx, arm, NULL, p->snapshot, trace->inputs, &ctx->cfg->sample, NULL, pass_step, NULL, &run, err);
    uint32_t pos = st == MEMRA_OK ? memra_arm_state_position(p->snapshot) : 0;
    if (st == MEMRA_OK && pos != P)
        st = memra_fail(err, MEMRA_E_INTERNAL, "arm %s (%s): the prefix snapshot is at position %u after %u steps",
                        arm->name, memra_arm_text(arm->arm), pos, P);
    if (st == MEMRA_OK && run.prefix_token != trace->tokens[P - 1])
        st = memra_fail(err, MEMRA_E_INTERNAL,
                        "arm %s (%s): the prefix snapshot sampled token %" PRId64 " after its prime steps, but "
                        "the same arm sampled %" PRId64 " there in the correctness run (non-determinism)",
                        arm->name, memra_arm_text(arm->arm), run.prefix_token, trace->tokens[P - 1]);
    if (st == MEMRA_OK)
        st = gate_new_state(arm, capacity, &p->work, err);
    if (st != MEMRA_OK)
        gate_prefix_close(p);
    return st;
}

void gate_prefix_keep(gate_arm *arm, memra_arm_state *s, uint32_t capacity) {
    memra_arm_state_free(arm->prefix);
    arm->prefix = NULL;
    memra_error e = {0};
    memra_arm_state *copy = NULL;
    if (memra_arm_state_new(arm->arm, capacity, &copy, &e) != MEMRA_OK)
        return;
    if (memra_arm_state_restore(copy, s, &e) != MEMRA_OK) {
        memra_arm_state_free(copy);
        return;
    }
    arm->prefix = copy;
}

void gate_prefix_drop(gate_ctx *ctx) {
    memra_arm_state_free(ctx->a.prefix);
    memra_arm_state_free(ctx->b.prefix);
    ctx->a.prefix = ctx->b.prefix = NULL;
}

void gate_prefix_close(gate_prefix *p) {
    memra_arm_state_free(p->work);
    memra_arm_state_free(p->snapshot);
    p->work = p->snapshot = NULL;
}

/* Checks a finished pass against the arm's correctness run; false with pass->miss filled. */
static bool verify(gate_ctx *ctx, const gate_prefix *p, gate_pass *pass) {
    const uint32_t P = ctx->cfg->prime, N = ctx->cfg->gen;
    const gate_trace *trace = p->trace;
    gate_mismatch *m = &pass->miss;
    pass->compared = pass->steps < N ? pass->steps : N;
    for (uint32_t i = 0; i < pass->compared; i++)
        if ((int64_t)pass->tokens[i] != trace->tokens[P + i]) {
            m->token = true;
            m->step = P + i;
            m->input = trace->inputs[P + i];
            m->token_ref = trace->tokens[P + i];
            m->token_got = pass->tokens[i];
            snprintf(m->reason, sizeof m->reason,
                     "token stream differs from the correctness run at generated token %u: expected %" PRId64
                     ", got %u",
                     i, trace->tokens[P + i], pass->tokens[i]);
            return false;
        }
    if (pass->end != P + pass->steps) {
        m->position = true;
        snprintf(m->reason, sizeof m->reason, "final position %u, expected %u", pass->end, P + pass->steps);
        return false;
    }
    if (pass->steps != N)
        return true; /* the correctness run has no digests where this pass ends */
    const uint32_t last = P + N - 1;
    m->have_digests = true;
    memcpy(m->cache_ref, trace->digest_cache[last], 32);
    memcpy(m->cache_got, pass->final[1], 32);
    memcpy(m->hidden_ref, trace->digest_hidden[last], 32);
    memcpy(m->hidden_got, pass->final[2], 32);
    m->digest_logits = memcmp(pass->final[0], trace->digest_logits[last], 32) != 0;
    m->cache = memcmp(pass->final[1], trace->digest_cache[last], 32) != 0;
    m->hidden = memcmp(pass->final[2], trace->digest_hidden[last], 32) != 0;
    const char *what = m->digest_logits ? "logits" : m->cache ? "cache" : m->hidden ? "hidden" : NULL;
    if (what)
        snprintf(m->reason, sizeof m->reason, "final %s digest differs from the correctness run", what);
    return what == NULL;
}

memra_status gate_pass_run(gate_ctx *ctx, gate_prefix *p, gate_pass *pass, memra_error *err) {
    const uint32_t P = ctx->cfg->prime;
    pass->miss = (gate_mismatch){.arm = p->arm->name,
                                 .against = "correctness",
                                 .row = -1,
                                 .step = -1,
                                 .input = -1,
                                 .token_ref = -1,
                                 .token_got = -1};
    pass->verified = false;
    memra_status st = memra_arm_state_restore(p->work, p->snapshot, err);
    if (st != MEMRA_OK)
        return st;
    pass->before = memra_arm_state_stats(p->work);
    pass_steps run = {.ctx = ctx, .prime = P, .tokens = pass->tokens};
    if (pass->hook)
        pass->hook(pass->hook_user, true);
    uint64_t t0 = now_ns();
    st = memra_arm_run(p->work, NULL, P, pass->steps, &ctx->cfg->sample, NULL, pass_step, &run, err);
    uint64_t t1 = now_ns();
    if (pass->hook)
        pass->hook(pass->hook_user, false);
    if (st != MEMRA_OK)
        return st;
    pass->wall_ns = t1 - t0;
    pass->tok_s = pass->wall_ns ? (double)pass->steps * 1e9 / (double)pass->wall_ns : INFINITY;
    pass->after = memra_arm_state_stats(p->work);
    pass->end = memra_arm_state_position(p->work);
    st = memra_arm_digests(p->work, pass->final[0], pass->final[1], pass->final[2], err);
    if (st != MEMRA_OK)
        return st;
    pass->verified = verify(ctx, p, pass);
    return MEMRA_OK;
}
