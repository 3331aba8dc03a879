/* cpu_step.c: the cpu backend's step as a transaction.
 *
 * A step is computed synchronously in step_begin and its result queued in a ring of
 * max_inflight slots that step_end drains in order. The step is a transaction: the KV rows of the
 * new position are written past the committed prefix, and position, hidden, logits and the carried
 * token change only once the head and the sampler have succeeded.
 *
 * A failed step quarantines the state: later steps on it and restores from or into it are refused. */
#include <fenv.h>
#include <string.h>

#include "cpu_backend.h"
#include "memra/gguf.h"
#include "memra/sampling.h"

static memra_status quarantine(memra_state *s, memra_status st, memra_error *err) {
    s->quarantined = true;
    const char *why = err ? err->msg : "a step failed";
    size_t n = strnlen(why, sizeof s->quarantine_reason - 1);
    memcpy(s->quarantine_reason, why, n);
    s->quarantine_reason[n] = '\0';
    return st;
}

memra_status cpu_check_not_quarantined(const memra_state *s, const char *what, memra_error *err) {
    if (s->quarantined)
        return memra_fail(err, MEMRA_E_QUARANTINED,
                          "cpu: %s on a quarantined state: an earlier step failed and left an unfinished transaction "
                          "(%s); free the state",
                          what, s->quarantine_reason);
    return MEMRA_OK;
}

memra_status cpu_step_begin(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err) {
    const memra_model *m = b->m;
    memra_status st = cpu_check_not_quarantined(s, "step", err);
    if (st != MEMRA_OK)
        return st;
    if (!MEMRA_HAS_MEMBER(args, memra_step_args, want_logits))
        return memra_fail(err, MEMRA_E_INVALID, "cpu: step arguments of %u bytes, expected at least %zu",
                          args ? args->struct_size : 0, MEMRA_STRUCT_END(memra_step_args, want_logits));
    if (s->ring_count == s->max_inflight)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: %u steps already in flight (the state's max_inflight)",
                          s->max_inflight);
    int64_t token = args->token;
    if (token == MEMRA_TOKEN_FROM_DEVICE) {
        if (s->carried_token < 0)
            return memra_fail(err, MEMRA_E_INVALID,
                              "cpu: token from device, but the state's previous step sampled no token");
        token = s->carried_token;
    }
    if (token < 0 || token >= (int64_t)m->n_vocab)
        return memra_fail(err, MEMRA_E_RANGE, "cpu: token %lld is out of range (n_vocab %u)", (long long)token,
                          m->n_vocab);
    uint32_t pos = s->position;
    if (pos >= s->capacity)
        return memra_fail(err, MEMRA_E_RANGE, "cpu: position %u is past the state's capacity of %u", pos, s->capacity);

    /* The step computes in the default floating-point environment (round to nearest, no
     * flush-to-zero), whatever the caller set: the bits must not depend on the host program's
     * settings, and the pool's workers run in that environment too (cpu_pool.c). */
    if (b->n_cells && (st = cpu_hand_cells(b, pos, err)) != MEMRA_OK) {
        cpu_drop_handed_cells(b);
        return quarantine(s, st, err);
    }
    fenv_t caller_env;
    fegetenv(&caller_env);
    fesetenv(FE_DFL_ENV);
    st = cpu_forward(b, s, (uint32_t)token, pos, err);
    if (st == MEMRA_OK)
        st = cpu_check_statuses(b, pos, err);
    cpu_drop_handed_cells(b);
    if (st != MEMRA_OK) {
        /* Nothing committed: the K/V rows written sit at the uncommitted position. */
        fesetenv(&caller_env);
        return quarantine(s, st, err);
    }
    cpu_head_forward(b);

    int64_t sampled = -1;
    uint32_t t = 0;
    if (args->sample && b->op_topk) /* the arm's op plugin sorts (op.topk) */
        st = memra_sample_sorted_by(b->head_out, m->n_vocab, (uint64_t)pos + 1, args->sample, s->sample_scratch,
                                    cpu_op_topk, b, &t, err);
    else if (args->sample)
        st = memra_sample(b->head_out, m->n_vocab, (uint64_t)pos + 1, args->sample, s->sample_scratch, &t, err);
    fesetenv(&caller_env);
    if (args->sample) {
        if (st != MEMRA_OK) {
            memra_error_prefix(err, "cpu: step at position %u", pos);
            return quarantine(s, st, err);
        }
        sampled = t;
    }

    /* Commit: position, hidden, logits and the carried token, then the result slot. */
    s->position = pos + 1;
    memcpy(s->hidden, cpu_last_hidden(b), (size_t)m->n_embd * sizeof(float));
    memcpy(s->logits, b->head_out, (size_t)m->n_vocab * sizeof(float));
    s->carried_token = sampled;
    s->stats.steps++;
    cpu_slot *slot = &s->ring[(s->ring_head + s->ring_count) % s->max_inflight];
    memcpy(slot->logits, b->head_out, (size_t)m->n_vocab * sizeof(float));
    slot->token = sampled;
    slot->position = pos + 1;
    s->ring_count++;
    return MEMRA_OK;
}

memra_status cpu_step_end(memra_backend *b, memra_state *s, float *logits, memra_step_result *out, memra_error *err) {
    if (s->ring_count == 0)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: step_end with no step in flight");
    if (out && out->struct_size != 0 && !MEMRA_HAS_MEMBER(out, memra_step_result, position))
        return memra_fail(err, MEMRA_E_INVALID, "cpu: step result of %u bytes, expected at least %zu", out->struct_size,
                          MEMRA_STRUCT_END(memra_step_result, position));
    cpu_slot *slot = &s->ring[s->ring_head];
    if (logits)
        memcpy(logits, slot->logits, (size_t)b->m->n_vocab * sizeof(float));
    if (out) {
        out->struct_size = sizeof *out;
        out->token = slot->token;
        out->position = slot->position;
    }
    s->ring_head = (s->ring_head + 1) % s->max_inflight;
    s->ring_count--;
    return MEMRA_OK;
}

/* A prefill chunk (plugin.h's step_chunk): count positions through cpu_forward_rows, then the
 * head on the last row, committed at once. Refusal cells armed at any of its positions are
 * handed over first; the all-reduces of each row run at that row's position and are checked at
 * once (cpu_forward.c), so a refusal anywhere fails the chunk and nothing is committed. */
memra_status cpu_step_chunk(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t count, float *logits,
                            memra_error *err) {
    const memra_model *m = b->m;
    memra_status st = cpu_check_not_quarantined(s, "prefill chunk", err);
    if (st != MEMRA_OK)
        return st;
    if (s->ring_count != 0)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: a prefill chunk with %u steps in flight", s->ring_count);
    if (!tokens || count == 0 || count > b->chunk)
        return memra_fail(err, MEMRA_E_INVALID,
                          "cpu: a prefill chunk of %u positions: expected 1 to %u (the arm's prefill), with tokens",
                          count, b->chunk);
    const uint32_t pos = s->position;
    if ((uint64_t)pos + count > s->capacity)
        return memra_fail(err, MEMRA_E_RANGE, "cpu: positions %u..%u are past the state's capacity of %u", pos,
                          pos + count - 1, s->capacity);
    for (uint32_t j = 0; j < count; j++)
        if (tokens[j] < 0 || tokens[j] >= (int64_t)m->n_vocab)
            return memra_fail(err, MEMRA_E_RANGE, "cpu: token %lld at position %u is out of range (n_vocab %u)",
                              (long long)tokens[j], pos + j, m->n_vocab);
    for (uint32_t j = 0; b->n_cells && j < count && st == MEMRA_OK; j++)
        st = cpu_hand_cells(b, pos + j, err);
    if (st != MEMRA_OK) {
        cpu_drop_handed_cells(b);
        return quarantine(s, st, err);
    }
    fenv_t caller_env;
    fegetenv(&caller_env);
    fesetenv(FE_DFL_ENV);
    st = cpu_forward_rows(b, s, tokens, count, pos, err);
    if (st == MEMRA_OK)
        st = cpu_check_statuses(b, pos + count - 1, err);
    cpu_drop_handed_cells(b);
    if (st != MEMRA_OK) {
        fesetenv(&caller_env);
        memra_error_prefix(err, "cpu: prefill chunk at positions %u..%u", pos, pos + count - 1);
        return quarantine(s, st, err);
    }
    b->op_position = pos + count - 1; /* the head's, for the ops' context */
    cpu_head_forward(b);
    fesetenv(&caller_env);
    s->position = pos + count;
    memcpy(s->hidden, cpu_last_hidden(b), (size_t)m->n_embd * sizeof(float));
    memcpy(s->logits, b->head_out, (size_t)m->n_vocab * sizeof(float));
    s->carried_token = -1;
    s->stats.steps += count;
    if (logits)
        memcpy(logits, b->head_out, (size_t)m->n_vocab * sizeof(float));
    return MEMRA_OK;
}
