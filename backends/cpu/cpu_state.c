/* cpu_state.c: the cpu backend's states: allocation (each rank of each stage keeps its layers' K
 * and V caches in one block of its own), the logits, hidden and cache digests, restore (a
 * snapshot copy of the committed prefix) and the state's counters. */
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "memra/gguf.h"
#include "memra/sampling.h"

/* ------------------------------------------------------------------------------------------ */
/* States                                                                                       */

void cpu_state_free(memra_backend *b, memra_state *s) {
    if (!s)
        return;
    if (b) {
        b->live_cache_bytes -= s->cache_bytes;
        b->live_state_bytes -= s->other_bytes;
    }
    for (uint32_t i = 0; s->stage_cache && b && i < b->n_stages * MEMRA_MAX_RANKS; i++)
        free(s->stage_cache[i]);
    free(s->stage_cache);
    free(s->k_cache);
    free(s->v_cache);
    free(s->hidden);
    free(s->logits);
    free(s->scores);
    free(s->sample_scratch);
    for (uint32_t i = 0; s->ring && i < s->max_inflight; i++)
        free(s->ring[i].logits);
    free(s->ring);
    free(s);
}

memra_status cpu_state_new(memra_backend *b, uint32_t capacity, uint32_t max_inflight, memra_state **out,
                           memra_error *err) {
    *out = NULL;
    const memra_model *m = b->m;
    if (capacity == 0 || max_inflight == 0)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: a state needs capacity >= 1 and max_inflight >= 1 (got %u, %u)",
                          capacity, max_inflight);
    if (max_inflight > 1024)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: max_inflight %u is more than 1024", max_inflight);
    memra_state *s = calloc(1, sizeof *s);
    if (!s)
        return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for a state");
    s->capacity = capacity;
    s->max_inflight = max_inflight;
    s->carried_token = -1;
    s->stats.struct_size = sizeof s->stats;
    s->k_cache = calloc((size_t)m->n_layer * MEMRA_MAX_RANKS, sizeof *s->k_cache);
    s->v_cache = calloc((size_t)m->n_layer * MEMRA_MAX_RANKS, sizeof *s->v_cache);
    s->stage_cache = calloc((size_t)b->n_stages * MEMRA_MAX_RANKS, sizeof *s->stage_cache);
    s->ring = calloc(max_inflight, sizeof *s->ring);
    if (!s->k_cache || !s->v_cache || !s->stage_cache || !s->ring)
        goto nomem;
    /* Each rank of each stage keeps its layers' caches (its kv heads) in one block of its own. */
    for (uint32_t i = 0; i < b->n_stages; i++) {
        const cpu_stage *sg = &b->stages[i];
        size_t n_layers = sg->layer_end - sg->layer_begin;
        for (uint32_t r = 0; r < sg->n_ranks; r++) {
            const cpu_rank *rk = &sg->ranks[r];
            size_t per_layer = (size_t)capacity * ((size_t)rk->kv_dim + rk->v_dim);
            if (per_layer > SIZE_MAX / sizeof(float) / n_layers)
                goto nomem;
            float *block = calloc(per_layer * n_layers, sizeof(float));
            if (!block)
                goto nomem;
            s->stage_cache[(size_t)i * MEMRA_MAX_RANKS + r] = block;
            s->cache_bytes += per_layer * n_layers * sizeof(float);
            for (uint32_t il = sg->layer_begin; il < sg->layer_end; il++) {
                size_t at = (size_t)il * MEMRA_MAX_RANKS + r;
                s->k_cache[at] = block + (il - sg->layer_begin) * per_layer;
                s->v_cache[at] = s->k_cache[at] + (size_t)capacity * rk->kv_dim;
            }
        }
    }
    size_t scratch = memra_sample_scratch_bytes(m->n_vocab);
    s->hidden = calloc(m->n_embd, sizeof(float));
    s->logits = calloc(m->n_vocab, sizeof(float));
    s->scores = calloc((size_t)m->n_head * capacity, sizeof(float));
    s->sample_scratch = malloc(scratch ? scratch : 1);
    if (!s->hidden || !s->logits || !s->scores || !s->sample_scratch)
        goto nomem;
    for (uint32_t i = 0; i < max_inflight; i++)
        if (!(s->ring[i].logits = malloc((size_t)m->n_vocab * sizeof(float))))
            goto nomem;
    s->other_bytes =
        ((size_t)m->n_embd + m->n_vocab * (1 + (size_t)max_inflight) + (size_t)m->n_head * capacity) * sizeof(float) +
        scratch;
    b->live_cache_bytes += s->cache_bytes;
    b->live_state_bytes += s->other_bytes;
    *out = s;
    return MEMRA_OK;
nomem:
    s->cache_bytes = s->other_bytes = 0;
    cpu_state_free(b, s); /* with its byte counts zeroed: frees what was allocated */
    return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for a state of capacity %u", capacity);
}

/* ------------------------------------------------------------------------------------------ */
/* Digests, restore, counters                                                                   */

memra_status cpu_digest(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32], memra_error *err) {
    const memra_model *m = b->m;
    if (s->ring_count != 0)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: digest with %u steps in flight", s->ring_count);
    switch (kind) {
    case MEMRA_DIGEST_LOGITS: b->host->sha256(s->logits, (size_t)m->n_vocab * sizeof(float), out); return MEMRA_OK;
    case MEMRA_DIGEST_HIDDEN: b->host->sha256(s->hidden, (size_t)m->n_embd * sizeof(float), out); return MEMRA_OK;
    case MEMRA_DIGEST_CACHE: {
        /* Layer by layer: K rows [0, pos), then V rows [0, pos), whatever the stage layout; with
         * several ranks each row is its ranks' kv heads in rank order, i.e. the whole row. */
        memra_sha256_ctx *ctx = b->host->sha256_new();
        if (!ctx)
            return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for a digest");
        for (uint32_t i = 0; i < b->n_stages; i++) {
            const cpu_stage *sg = &b->stages[i];
            for (uint32_t il = sg->layer_begin; il < sg->layer_end; il++)
                for (int kv = 0; kv < 2; kv++) {
                    float *const *cache = kv ? s->v_cache : s->k_cache;
                    if (sg->n_ranks == 1) {
                        uint32_t dim = kv ? sg->ranks[0].v_dim : sg->ranks[0].kv_dim;
                        b->host->sha256_update(ctx, cache[(size_t)il * MEMRA_MAX_RANKS],
                                               (size_t)s->position * dim * sizeof(float));
                        continue;
                    }
                    for (uint32_t t = 0; t < s->position; t++)
                        for (uint32_t r = 0; r < sg->n_ranks; r++) {
                            uint32_t dim = kv ? sg->ranks[r].v_dim : sg->ranks[r].kv_dim;
                            b->host->sha256_update(ctx, cache[(size_t)il * MEMRA_MAX_RANKS + r] + (size_t)t * dim,
                                                   (size_t)dim * sizeof(float));
                        }
                }
        }
        b->host->sha256_final(ctx, out);
        return MEMRA_OK;
    }
    }
    return memra_fail(err, MEMRA_E_INVALID, "cpu: unknown digest kind %d", (int)kind);
}

memra_status cpu_state_restore(memra_backend *b, memra_state *dst, const memra_state *src, memra_error *err) {
    const memra_model *m = b->m;
    memra_status st;
    if ((st = cpu_check_not_quarantined(src, "restore from", err)) != MEMRA_OK ||
        (st = cpu_check_not_quarantined(dst, "restore into", err)) != MEMRA_OK)
        return st;
    if (src->ring_count != 0 || dst->ring_count != 0)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: restore with steps in flight");
    if (dst->capacity < src->position)
        return memra_fail(err, MEMRA_E_RANGE, "cpu: restore of position %u into a state of capacity %u", src->position,
                          dst->capacity);
    if (dst == src)
        return MEMRA_OK;
    for (uint32_t i = 0; i < b->n_stages; i++) {
        const cpu_stage *sg = &b->stages[i];
        for (uint32_t il = sg->layer_begin; il < sg->layer_end; il++)
            for (uint32_t r = 0; r < sg->n_ranks; r++) {
                size_t at = (size_t)il * MEMRA_MAX_RANKS + r;
                memcpy(dst->k_cache[at], src->k_cache[at], (size_t)src->position * sg->ranks[r].kv_dim * sizeof(float));
                memcpy(dst->v_cache[at], src->v_cache[at], (size_t)src->position * sg->ranks[r].v_dim * sizeof(float));
            }
    }
    memcpy(dst->hidden, src->hidden, (size_t)m->n_embd * sizeof(float));
    memcpy(dst->logits, src->logits, (size_t)m->n_vocab * sizeof(float));
    dst->position = src->position;
    dst->carried_token = src->carried_token;
    return MEMRA_OK;
}

uint32_t cpu_state_position(memra_backend *b, const memra_state *s) {
    (void)b;
    return s->position;
}

memra_status cpu_state_stats(memra_backend *b, const memra_state *s, memra_state_stats *out, memra_error *err) {
    (void)b;
    (void)err;
    *out = s->stats;
    return MEMRA_OK;
}
