/* cuda_chunk.cu: a prefill chunk of the `cuda` backend (the vtable's step_chunk): count
 * consecutive prompt positions in one pass of the layers, bit-identical to count decode steps.
 *
 * Where the chunk kernels serve the state (mc_chunk_native: one stage of one rank, no op plugins,
 * no taps, no experts, no residual scale) the body runs on stage 0's stream: the rows' positions
 * (*pos + j), the rows' embeddings (times the model's embedding scale, as decode), per layer the
 * q/k/v GEMV of every row (chunk_gemv.cu: each element decode's operation sequence; F32, F16,
 * BF16 and Q8_0 layers, and Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1 under chunk=mma and
 * qdot=auto: see
 * mc_chunk_layers_batched), attention (attention_chunk.cu's chunk launch on the cluster path: every
 * row's k and v appended, then each row attended over [0, its position] with the decode step's
 * split at that position; on the other paths the decode launches row by row, each at its row's
 * position), the output GEMV onto the residual, gate/up with its GLU and down onto the residual
 * (gemma3: the output and down GEMVs into po, then per row x += RMSNorm(po) * post norm, the
 * function decode's post norm runs, fused or as its launch); then the commit (*pos += count), the
 * last row's hidden state into the state's, and the head (the decode GEMV) on it. Every launch in
 * the body is in plain stream order (pdl off: a decode kernel's pre-wait reads of the rows just
 * appended would race; pdl never changes the bits). The body branches on count and the shapes
 * only, never on the position, so cuda-graph captures it once per count and replays it anywhere.
 *
 * Elsewhere (stages, ranks, op plugins, experts, layers of the other weight types) a chunk runs
 * as count single steps: the same bits by definition, no faster. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_kernels.h"
#include "memra/model.h"
#include "memra/numeric.h"
#include "memra/options.h"
#include "memra/plugin.h"
#include "memra/status.h"

/* The default chunk where the chunk kernels serve (the `prefill` key's auto): 512 rows; its
 * activations on llama-8b are about 80 MB per state. */
#define MC_DEFAULT_PREFILL 512u
#define MC_MAX_PREFILL 4096u

struct mc_chunk_buf {
    uint32_t rows; /* the arm's prefill: every buffer holds this many rows */
    void *arena;
    uint64_t bytes;
    float *x, *qkv, *att, *gu, *pair,
        *po; /* [rows][n_embd], [rows][qkv], [rows][n_head hdv], [rows][n_ff], 2 [rows][n_ff]; [rows][n_embd]
              * (gemma3: the output and down GEMVs' sums before their post norms) */
    void *scratch;           /* the chunk GEMVs' x' or quantized x */
    int32_t *tok, *pos_rows; /* [rows] */
    int32_t *host_tok;       /* pinned, [rows] */
};

/* Whether an arm's keys alone say its chunks run as single steps (ranks, stages, op plugins,
 * norm=unfused): then its best chunk is 1. */
static bool mc_keys_step_only(const memra_options *opts) {
    const char *v;
    if ((v = memra_options_get(opts, "tp")) && strcmp(v, "1") != 0)
        return true;
    if ((v = memra_options_get(opts, "ep")) && strcmp(v, "1") != 0)
        return true;
    if ((v = memra_options_get(opts, "stages")) && strcmp(v, "1") != 0)
        return true;
    if ((v = memra_options_get(opts, "norm")) && strcmp(v, "unfused") == 0)
        return true;
    for (uint32_t i = 0; i < opts->n; i++)
        if (strncmp(opts->items[i].key, "op.", 3) == 0 && strcmp(opts->items[i].value, MEMRA_OP_BUILTIN) != 0)
            return true;
    return false;
}

uint32_t mc_prefill_chunk(const memra_host *host, const memra_options *opts) {
    (void)host;
    return opts && mc_keys_step_only(opts) ? 1u : MC_DEFAULT_PREFILL;
}

memra_status mc_read_prefill(const memra_options *opts, uint32_t *out, memra_error *err) {
    *out = mc_prefill_chunk(NULL, opts);
    const char *p = memra_options_get(opts, "prefill");
    if (p && strcmp(p, "auto") != 0) /* the core checked it; checked again for a direct caller */
        return memra_options_u32(opts, "prefill", MC_DEFAULT_PREFILL, 1, MC_MAX_PREFILL, out, err);
    return MEMRA_OK;
}

/* Whether every layer matrix has a batched chunk kernel (F32, F16, BF16, Q8_0; Q4_K, Q5_K, Q6_K
 * under chunk=mma (the default) and qdot=auto, chunk_kq_mma.cu, so the Q4_K and q4_k_m models
 * prime in chunks; Q4_0, Q4_1, Q5_0, Q5_1 likewise, chunk_legacy_mma.cu). A model with another
 * type (or the K-quants and Q4_0 ... Q5_1 under chunk=fma, chunk=mma-q8 or qdot=float) would
 * run those GEMVs row by row inside the chunk: no faster than decode eagerly, and slower under
 * cuda-graph, whose chunk graph then holds a launch per row and matrix (8B Q4_K on the H200: pp512
 * 365 tok/s against 503 decode), so its chunks run as single steps instead (the same bits either
 * way). */
static bool mc_chunk_layers_batched(const memra_backend *b) {
    const mc_stage_weights *sw = &b->w->stages[0][0];
    const mc_config *c = &b->cfg;
    for (uint32_t i = 0; i < sw->layer_end - sw->layer_begin; i++) {
        const mc_layer *L = &sw->layers[i];
        if (L->qkv_parts == 0 && !mc_gemv_chunk_batched(c, &L->wqkv))
            return false;
        for (uint32_t p = 0; p < L->qkv_parts; p++)
            if (!mc_gemv_chunk_batched(c, &L->qkv_part[p]))
                return false;
        if (!mc_gemv_chunk_batched(c, &L->wo) || !mc_gemv_chunk_batched(c, &L->wdown))
            return false;
        if (L->gu_split ? !mc_gemv_chunk_batched(c, &L->wg) || !mc_gemv_chunk_batched(c, &L->wu)
                        : !mc_gemv_chunk_batched(c, &L->wgu))
            return false;
    }
    return true;
}

bool mc_chunk_native(memra_backend *b, memra_state *s) {
    return s->n_stages == 1 && !b->tp && mc_ranks(s, 0) == 1 && !b->any_op && !b->taps && b->m->n_expert == 0 &&
           !mc_residual_scaled(b->m) && mc_chunk_layers_batched(b);
}

void mc_chunk_free(memra_state *s) {
    if (!s->chunk)
        return;
    if (s->chunk->arena)
        cudaFree(s->chunk->arena);
    if (s->chunk->host_tok)
        cudaFreeHost(s->chunk->host_tok);
    free(s->chunk);
    s->chunk = NULL;
}

/* The chunk's buffers for b->prefill rows, on stage 0's device (once per state; counted in its
 * scratch bytes). */
static memra_status mc_chunk_alloc(memra_backend *b, memra_state *s, memra_error *err) {
    memra_status st = MEMRA_OK;
    const memra_model *m = b->m;
    mc_stage_state *ss = &s->st[0][0];
    const uint64_t M = b->prefill, hd = m->head_dim, hdv = m->head_dim_v;
    const uint64_t qkv = (uint64_t)ss->n_head * hd + (uint64_t)ss->n_kv * (hd + hdv), att = (uint64_t)ss->n_head * hdv;
    uint64_t max_cols = m->n_embd > att ? m->n_embd : att;
    max_cols = max_cols > ss->n_ff ? max_cols : ss->n_ff;
    bool split = false, post = false; /* a layer whose gate and up differ in type; gemma3's post norms */
    for (uint32_t l = 0; l < b->w->stages[0][0].layer_end - b->w->stages[0][0].layer_begin; l++) {
        const mc_layer *L = &b->w->stages[0][0].layers[l];
        split = split || L->gu_split;
        post = post || L->post_attn_norm || L->post_ffn_norm;
    }
    mc_bump bp = {NULL, 0, 0};
    struct mc_chunk_buf *c = (struct mc_chunk_buf *)calloc(1, sizeof *c);
    if (!c)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
    for (int pass = 0; pass < 2; pass++) { /* a sizing pass, then the carving */
        bp.used = 0;
        c->x = (float *)mc_take(&bp, M * m->n_embd * 4);
        c->qkv = (float *)mc_take(&bp, M * qkv * 4);
        c->att = (float *)mc_take(&bp, M * att * 4);
        c->gu = (float *)mc_take(&bp, M * ss->n_ff * 4);
        c->pair = split ? (float *)mc_take(&bp, 2 * M * ss->n_ff * 4) : NULL;
        c->po = post ? (float *)mc_take(&bp, M * m->n_embd * 4) : NULL;
        c->scratch = mc_take(&bp, mc_gemv_chunk_scratch_bytes((uint32_t)max_cols, (uint32_t)M));
        c->tok = (int32_t *)mc_take(&bp, M * 4);
        c->pos_rows = (int32_t *)mc_take(&bp, M * 4);
        if (pass == 0) {
            MC_TRY(cudaSetDevice(ss->device), "cudaSetDevice");
            cudaError_t e = cudaMalloc(&c->arena, bp.used);
            if (e != cudaSuccess) {
                st = memra_fail(err, MEMRA_E_NOMEM,
                                "cuda: the prefill chunk's buffers (%llu MB for prefill=%u) do not fit on device %d "
                                "(%s); give a smaller prefill=",
                                (unsigned long long)(bp.used >> 20), b->prefill, ss->device, cudaGetErrorString(e));
                goto fail;
            }
            bp.base = (char *)c->arena;
            bp.size = bp.used;
        }
    }
    c->bytes = bp.used;
    c->rows = b->prefill;
    MC_TRY(cudaMallocHost((void **)&c->host_tok, M * 4), "cudaMallocHost (prefill tokens)");
    MC_TRY(mc_gemv_prepare(), "readying the GEMV kernels");
    MC_TRY(mc_attention_fused_prepare(&b->cfg, ss->n_head, ss->n_kv, m->head_dim, m->head_dim_v),
           "readying the attention kernels");
    s->chunk = c;
    s->scratch_bytes += c->bytes;
    pthread_mutex_lock(&b->lock);
    b->scratch_bytes += c->bytes;
    pthread_mutex_unlock(&b->lock);
    return MEMRA_OK;
fail:
    if (c->arena)
        cudaFree(c->arena);
    if (c->host_tok)
        cudaFreeHost(c->host_tok);
    free(c);
    return st;
}

memra_status mc_chunk_prepare(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t count,
                              memra_error *err) {
    memra_status st = MEMRA_OK;
    if (s->quarantined)
        return memra_fail(err, MEMRA_E_QUARANTINED, "cuda: the state failed earlier (%s); free it", s->why);
    if (s->inflight != 0)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: a prefill chunk with %u steps in flight", s->inflight);
    if (!tokens || count == 0 || count > b->prefill)
        return memra_fail(err, MEMRA_E_INVALID,
                          "cuda: a prefill chunk of %u positions: expected 1 to %u (the arm's prefill), with tokens",
                          count, b->prefill);
    if ((uint64_t)s->position + count > s->limit)
        return memra_fail(err, MEMRA_E_RANGE, "cuda: positions %u..%u are past the state's capacity of %u", s->position,
                          s->position + count - 1, s->limit);
    for (uint32_t j = 0; j < count; j++)
        if (tokens[j] < 0 || tokens[j] >= (int64_t)b->m->n_vocab)
            return memra_fail(err, MEMRA_E_RANGE, "cuda: token %lld at position %u is out of range (n_vocab %u)",
                              (long long)tokens[j], s->position + j, b->m->n_vocab);
    if (!s->chunk && (st = mc_chunk_alloc(b, s, err)))
        return st;
    mc_stage_state *ss = &s->st[0][0];
    for (uint32_t j = 0; j < count; j++)
        s->chunk->host_tok[j] = (int32_t)tokens[j];
    MC_TRY(cudaSetDevice(ss->device), "cudaSetDevice");
    MC_TRY(cudaMemcpyAsync(s->chunk->tok, s->chunk->host_tok, (size_t)count * 4, cudaMemcpyHostToDevice, ss->stream),
           "cudaMemcpyAsync (prefill tokens)");
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

memra_status mc_chunk_body(memra_backend *b, memra_state *s, uint32_t count, memra_error *err) {
    memra_status st = MEMRA_OK;
    const memra_model *m = b->m;
    mc_config cc = b->cfg;
    cc.pdl = 0; /* plain stream order: see the top of this file */
    const mc_config *c = &cc;
    mc_stage_state *ss = &s->st[0][0];
    const mc_stage_weights *sw = &b->w->stages[0][0];
    struct mc_chunk_buf *cb = s->chunk;
    cudaStream_t q = ss->stream;
    const uint32_t M = count, hd = m->head_dim, hdv = m->head_dim_v, E = m->n_embd, F = ss->n_ff;
    const uint32_t QKV = ss->n_head * hd + ss->n_kv * (hd + hdv), ATT = ss->n_head * hdv;
    const float eps = m->rms_eps;
    const int glu = m->ffn_act == MEMRA_FFN_GELU_TANH ? MC_GLU_GELU : MC_GLU_SILU;
    const bool fused = mc_attention_path(c, ss->n_head, ss->n_kv, hd, hdv) != MC_ATT_PATH_UNFUSED;
    const uint32_t nl = sw->layer_end - sw->layer_begin;
    if (!cb || M == 0 || M > cb->rows)
        return memra_fail(err, MEMRA_E_INTERNAL, "cuda: a prefill chunk body of %u rows without its buffers", M);
    MC_TRY(cudaSetDevice(ss->device), "cudaSetDevice");
    MC_TRY(mc_chunk_positions(ss->pos, cb->pos_rows, M, q), "launch of the chunk's positions");
    MC_TRY(mc_embed_rows(&sw->embd, cb->tok, M, mc_embd_scale(m), cb->x, E, q), "launch of the chunk's embeddings");
    for (uint32_t l = 0; l < nl; l++) {
        const uint32_t layer = sw->layer_begin + l;
        const mc_layer *L = &sw->layers[l];
        const uint32_t kv_plane = ss->n_kv * s->capacity;
        /* the arm's kv type: its row bytes */
        char *kc = (char *)ss->k_cache + (size_t)l * kv_plane * mc_kv_row_bytes(c->kv, hd);
        char *vc = (char *)ss->v_cache + (size_t)l * kv_plane * mc_kv_row_bytes(c->kv, hdv);
        mc_rope_args ra = mc_layer_rope_args(m, ss, sw, L, layer, s->capacity, c->kv);
        /* q, k, v of every row (one GEMV, or one per run of equal type into its rows) */
        if (L->qkv_parts == 0) {
            MC_TRY(mc_gemv_chunk(c, &L->wqkv, cb->x, E, L->attn_norm, eps, L->bqkv, NULL, 0, cb->qkv, QKV, 0, M,
                                 cb->scratch, q),
                   "launch of the chunk's q/k/v gemv");
        } else {
            uint32_t off = 0;
            for (uint32_t p = 0; p < L->qkv_parts; p++) {
                MC_TRY(mc_gemv_chunk(c, &L->qkv_part[p], cb->x, E, L->attn_norm, eps, L->bqkv ? L->bqkv + off : NULL,
                                     NULL, 0, cb->qkv + off, QKV, 0, M, cb->scratch, q),
                       "launch of the chunk's q/k/v gemv");
                off += L->qkv_part[p].rows;
            }
        }
        /* attention: the chunk launch, or the decode launches row by row at each row's position */
        cudaError_t e =
            fused ? mc_attention_chunk(c, &ra, cb->qkv, kc, vc, cb->att, ss->pos, M, q) : cudaErrorNotSupported;
        if (e == cudaErrorNotSupported) {
            e = cudaSuccess;
            for (uint32_t j = 0; j < M && e == cudaSuccess; j++) {
                float *qr = cb->qkv + (size_t)j * QKV, *ar = cb->att + (size_t)j * ATT;
                if (fused) {
                    e = mc_attention_fused(c, &ra, qr, kc, vc, ar, cb->pos_rows + j, q);
                } else {
                    e = mc_rope_kv(&ra, qr, kc, vc, cb->pos_rows + j, q);
                    if (e == cudaSuccess)
                        e = mc_attention(qr, kc, vc, ss->att_partial, ar, ss->n_head, ss->n_kv, hd, hdv, s->capacity,
                                         cb->pos_rows + j, ra.window, ra.scale, ra.kv, q);
                }
            }
        }
        MC_TRY(e, "launch of the chunk's attention");
        if (L->post_attn_norm) { /* gemma3: po = W att, then x += RMSNorm(po) * post_attn_norm, row by row */
            MC_TRY(mc_gemv_chunk(c, &L->wo, cb->att, ATT, NULL, 0.0f, NULL, NULL, 0, cb->po, E, 0, M, cb->scratch, q),
                   "launch of the chunk's output gemv");
            MC_TRY(mc_op_rmsnorm_add_rows(cb->po, L->post_attn_norm, E, eps, cb->x, M, q),
                   "launch of the chunk's post-attention norms");
        } else {
            MC_TRY(mc_gemv_chunk(c, &L->wo, cb->att, ATT, NULL, 0.0f, NULL, cb->x, E, cb->x, E, 0, M, cb->scratch, q),
                   "launch of the chunk's output gemv");
        }
        if (!L->gu_split) {
            MC_TRY(
                mc_gemv_chunk(c, &L->wgu, cb->x, E, L->ffn_norm, eps, NULL, NULL, 0, cb->gu, F, glu, M, cb->scratch, q),
                "launch of the chunk's gate/up gemv");
        } else { /* gate rows of every row, then up rows of every row, then the GLU elementwise */
            float *up = cb->pair + (size_t)M * F;
            MC_TRY(
                mc_gemv_chunk(c, &L->wg, cb->x, E, L->ffn_norm, eps, NULL, NULL, 0, cb->pair, F, 0, M, cb->scratch, q),
                "launch of the chunk's gate gemv");
            MC_TRY(mc_gemv_chunk(c, &L->wu, cb->x, E, L->ffn_norm, eps, NULL, NULL, 0, up, F, 0, M, cb->scratch, q),
                   "launch of the chunk's up gemv");
            MC_TRY(mc_glu_pair(cb->pair, up, M * F, glu, cb->gu, q), "launch of the chunk's glu");
        }
        if (L->post_ffn_norm) {
            MC_TRY(mc_gemv_chunk(c, &L->wdown, cb->gu, F, NULL, 0.0f, NULL, NULL, 0, cb->po, E, 0, M, cb->scratch, q),
                   "launch of the chunk's down gemv");
            MC_TRY(mc_op_rmsnorm_add_rows(cb->po, L->post_ffn_norm, E, eps, cb->x, M, q),
                   "launch of the chunk's post-FFN norms");
        } else {
            MC_TRY(mc_gemv_chunk(c, &L->wdown, cb->gu, F, NULL, 0.0f, NULL, cb->x, E, cb->x, E, 0, M, cb->scratch, q),
                   "launch of the chunk's down gemv");
        }
    }
    MC_TRY(mc_chunk_commit(ss->pos, M, q), "launch of the chunk's commit");
    MC_TRY(cudaMemcpyAsync(ss->x, cb->x + (size_t)(M - 1) * E, (size_t)E * 4, cudaMemcpyDeviceToDevice, q),
           "cudaMemcpyAsync (the chunk's last hidden state)");
    MC_TRY(mc_gemv(c, &sw->head, ss->x, sw->out_norm, eps, NULL, NULL, ss->logits, q), "launch of the head gemv");
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

memra_status mc_chunk_finish(memra_backend *b, memra_state *s, uint32_t count, float *logits, memra_error *err) {
    memra_status st = MEMRA_OK;
    mc_stage_state *ss = &s->st[0][0];
    mc_slot *slot = &s->slots[s->head]; /* no step in flight: its pinned buffer is free */
    MC_TRY(cudaSetDevice(ss->device), "cudaSetDevice");
    if (logits)
        MC_TRY(cudaMemcpyAsync(slot->host_logits, ss->logits, (size_t)b->m->n_vocab * 4, cudaMemcpyDeviceToHost,
                               ss->stream),
               "cudaMemcpyAsync (logits readback)");
    MC_TRY(cudaStreamSynchronize(ss->stream), "the prefill chunk (cudaStreamSynchronize)");
    if (logits)
        memcpy(logits, slot->host_logits, (size_t)b->m->n_vocab * 4);
    s->position += count;
    s->has_device_token = false;
    s->xe_ready = false;
    s->sampled_ev_live = false;
    s->stats.steps += count;
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

/* Where the chunk kernels do not serve: count single steps, unsampled, the last one's logits. */
static memra_status mc_chunk_steps(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t count,
                                   float *logits, memra_error *err) {
    for (uint32_t j = 0; j < count; j++) {
        memra_step_args a;
        memset(&a, 0, sizeof a);
        a.struct_size = sizeof a;
        a.token = tokens[j];
        a.want_logits = logits != NULL && j + 1 == count;
        memra_status st = mc_step_begin(b, s, &a, err);
        if (!st)
            st = mc_step_end(b, s, a.want_logits ? logits : NULL, NULL, err);
        if (st) {
            if (!s->quarantined)
                mc_quarantine(b, s, err ? err->msg : "a step of a prefill chunk failed");
            return st;
        }
    }
    return MEMRA_OK;
}

memra_status mc_step_chunk(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t count, float *logits,
                           memra_error *err) {
    if (!mc_chunk_native(b, s)) {
        memra_status st = s->quarantined ? memra_fail(err, MEMRA_E_QUARANTINED,
                                                      "cuda: the state failed earlier (%s); free it", s->why)
                          : !tokens || count == 0 || count > b->prefill
                              ? memra_fail(err, MEMRA_E_INVALID,
                                           "cuda: a prefill chunk of %u positions: expected 1 to %u (the arm's "
                                           "prefill), with tokens",
                                           count, b->prefill)
                              : MEMRA_OK;
        return st ? st : mc_chunk_steps(b, s, tokens, count, logits, err);
    }
    memra_status st = mc_chunk_prepare(b, s, tokens, count, err); /* a refusal changes nothing */
    if (st)
        return st;
    if ((st = mc_chunk_body(b, s, count, err)))
        return st;
    return mc_chunk_finish(b, s, count, logits, err);
}
