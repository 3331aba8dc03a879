/* cuda_forward.cu: one token's step of the `cuda` backend, enqueued as prepare / body / finish
 * (cuda_ext.h, so cuda-graph can capture the body): per stage the input hidden (cuda_stages.cu:
 * the embedding, or the hand-off from the stage before), the layers (two all-reduces per layer
 * with ranks), the commit, the head and the sampler; the joins. The step's end (its wait and
 * readback) is cuda_step_end.cu. With taps on (memra.ops, cuda_taps.cu) each op's output is handed over
 * after it: `if (b->taps)`, a host branch, is all an ordinary step pays. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ext.h"
#include "cuda_kernels.h"
#include "cuda_backend.h"
#include "memra/ext.h"
#include "memra/gguf.h"
#include "memra/model.h"
#include "memra/numeric.h"
#include "memra/options.h"
#include "memra/plugin.h"
#include "memra/status.h"

/* ---- a step: prepare, body, finish -------------------------------------------------------- */

memra_status mc_prepare(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err) {
    memra_status st = MEMRA_OK;
    if (s->quarantined)
        return memra_fail(err, MEMRA_E_QUARANTINED, "cuda: the state failed earlier (%s); free it", s->why);
    if (s->position >= s->limit)
        return memra_fail(err, MEMRA_E_RANGE, "cuda: the state is full (%u positions)", s->limit);
    if (s->inflight >= s->max_inflight)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: %u steps already in flight (max_inflight %u)", s->inflight,
                          s->max_inflight);
    mc_stage_state *s0 = &s->st[0][0], *sl = &s->st[s->n_stages - 1][0];
    mc_slot *slot = &s->slots[(s->head + s->inflight) % s->max_inflight];
    if (args->token != MEMRA_TOKEN_FROM_DEVICE && (args->token < 0 || args->token >= (int64_t)b->m->n_vocab))
        return memra_fail(err, MEMRA_E_RANGE, "cuda: token %lld out of range [0, %u)", (long long)args->token,
                          b->m->n_vocab);
    if (args->token == MEMRA_TOKEN_FROM_DEVICE && !s->has_device_token)
        return memra_fail(err, MEMRA_E_INVALID,
                          "cuda: token from device, but no earlier step of this state sampled one");
    if (b->tp && b->n_cells && (st = mc_hand_cells(b, s, s->position, err)))
        return mc_quarantine_fail(s, err);
    /* The entry of the host's ring this step's sampler fills is not final until its tag is
     * written (mc_step_end's wait=ring): clear the tag an earlier step, or an earlier state at the
     * same position, left there, and the rest (wait=word writes it only for bad logits). */
    if (!b->tp)
        mc_ring_entry_clear(&s->res_ring[(s->position + 1) % s->max_inflight]);
    /* commit=handoff: the step reads its input from xe, which the previous step's sampler wrote
     * only if it folded (a tapped step does not); else a launch of its own writes it below */
    const bool xe_in = mc_embed_in_sampler(b, s);
    if (args->token == MEMRA_TOKEN_FROM_DEVICE) {
        MC_TRY(cudaSetDevice(s0->device), "cudaSetDevice");
        /* After an eager step, wait for the last stage's sampler. After a graph step the event was
         * recorded inside the capture (only an internal edge; waiting on it outside the capture is
         * an error), and no wait is needed: the whole graph ran on stage 0's stream, before this. */
        if (s->n_stages > 1 && s->sampled_ev_live)
            MC_TRY(cudaStreamWaitEvent(s0->stream, sl->sampled_ev, 0), "cudaStreamWaitEvent (sampled token)");
        if (s->n_stages == 1) {
            /* one stage: its sampler wrote the token into in_token itself (mc_stage_body) */
            if (xe_in && !s->xe_ready)
                MC_TRY(mc_embed(&b->w->stages[0][0].embd, s0->in_token, mc_embd_scale(b->m), s0->xe, s0->stream),
                       "launch of the embedding kernel (commit=handoff, after a step that did not fold it)");
        } else if (s0->device == sl->device) {
            MC_TRY(mc_copy_token(s0->in_token, sl->sampled, s0->stream), "launch of the token hand-over kernel");
        } else {
            MC_TRY(cudaMemcpyPeerAsync(s0->in_token, s0->device, sl->sampled, sl->device, 4, s0->stream),
                   "cudaMemcpyPeerAsync (sampled token)");
        }
        return MEMRA_OK;
    }
    *slot->host_token = (int32_t)args->token;
    MC_TRY(cudaSetDevice(s0->device), "cudaSetDevice");
    MC_TRY(cudaMemcpyAsync(s0->in_token, slot->host_token, 4, cudaMemcpyHostToDevice, s0->stream),
           "cudaMemcpyAsync (input token)");
    if (xe_in)
        MC_TRY(mc_embed(&b->w->stages[0][0].embd, s0->in_token, mc_embd_scale(b->m), s0->xe, s0->stream),
               "launch of the embedding kernel (commit=handoff, a token from the host)");
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

/* ---- op plugins (memra/op.h) at the GEMV sites ---------------------------------------------- */

/* Where a GEMV of the body sits, for the op plugins' context. */
typedef struct mc_op_at {
    const char *norm; /* the site of the norm it fuses (attn_norm, ffn_norm, output_norm), or NULL */
    const char *gemv; /* its own site (q for the fused qkv, ffn_gate for gate/up, attn_out, ...) */
    uint32_t layer, stage, rank, position;
    bool after_commit; /* the head: it runs after the step's commit has advanced the position word */
} mc_op_at;

/* One GEMV of the body. Without op plugins for it: the built-in fused kernel (the norm folded into
 * its loads; bias, residual or the gated activation glu (MC_GLU_SILU, MC_GLU_GELU; gate/up) applied
 * as it stores). With an op.rmsnorm plugin (for a
 * GEMV that fuses a norm), with norm=unfused (the same path with op_glue's norm: the built-in op
 * a plugin's norm is compared with exactly), or an op.gemv plugin for its weight type: the norm
 * first (the plugin's, or op_glue's kernel), into op_x; the GEMV (the plugin's into op_y, or the built-in without a
 * norm); then op_glue's store (bias, residual; or SwiGLU, GELU-gated). The plugins' launches go on the
 * rank's stream, so cuda-graph captures them with the rest of the token; their context carries
 * the position in device memory (pos). The unfused sequence rounds otherwise than the fused
 * kernel: such an arm is compared with the built-in fused one in nmse mode, with norm=unfused
 * exactly. */
static memra_status mc_gemv_site(memra_backend *b, mc_stage_state *ss, const mc_op_at *at, const mc_matrix *w,
                                 const float *x, const float *norm_w, const float *bias, const float *residual,
                                 float *y, int glu, cudaStream_t q, memra_error *err) {
    const mc_config *c = &b->cfg;
    const float eps = b->m->rms_eps;
    const memra_op_binding *gop = w->type < 64 ? b->op_gemv[w->type] : NULL;
    const memra_op_binding *nop = norm_w ? b->op_rmsnorm : NULL;
    /* norm=unfused (implied by an op.rmsnorm plugin): the norm on its own, as a plugin's runs */
    const bool unfused_norm = norm_w && (nop || c->norm == MC_NORM_UNFUSED);
    if (!gop && !unfused_norm) {
        if (glu)
            MC_RET(mc_gemv_glu(c, w, x, norm_w, eps, glu, y, q), "launch of the gate/up gemv (with the ffn norm)");
        else
            MC_RET(mc_gemv(c, w, x, norm_w, eps, bias, residual, y, q), "launch of a gemv");
        return MEMRA_OK;
    }
    memra_op_ctx ctx = {sizeof(memra_op_ctx), at->norm, at->norm,  at->layer, 0,
                        at->position,         at->rank, at->stage, ss->pos};
    if (at->after_commit) { /* the token's position, not the next one's (the commit advanced ss->pos) */
        MC_RET(mc_op_position_before(ss->pos, ss->op_pos, q), "launch of the op glue's position copy");
        ctx.position_dev = ss->op_pos;
    }
    const float *in = x;
    if (norm_w) {
        if (nop) {
            memra_status st =
                nop->vt->cuda_rmsnorm(nop->op, &ctx, x, norm_w, w->cols, 1, eps, ss->op_x, (void *)q, err);
            if (st) {
                memra_error_prefix(err, "cuda: op.rmsnorm=%s at %s", nop->name, at->norm);
                return st;
            }
        } else {
            MC_RET(mc_op_rmsnorm(x, norm_w, w->cols, eps, ss->op_x, q), "launch of the op glue's rmsnorm");
        }
        in = ss->op_x;
    }
    if (!gop) {
        if (glu)
            MC_RET(mc_gemv_glu(c, w, in, NULL, 0.0f, glu, y, q), "launch of the gate/up gemv");
        else
            MC_RET(mc_gemv(c, w, in, NULL, 0.0f, bias, residual, y, q), "launch of a gemv");
        return MEMRA_OK;
    }
    ctx.site = ctx.tensor = at->gemv;
    const size_t row_bytes = (size_t)w->stride * mc_type_elem_bytes(w->type);
    memra_status st =
        gop->vt->cuda_gemv(gop->op, &ctx, w->type, w->data, row_bytes, w->rows, w->cols, in, ss->op_y, (void *)q, err);
    if (st) {
        memra_error_prefix(err, "cuda: %s=%s at %s", gop->key, gop->name, at->gemv);
        return st;
    }
    if (glu == MC_GLU_GELU)
        MC_RET(mc_op_geglu(ss->op_y, w->rows, y, q), "launch of the op glue's geglu");
    else if (glu)
        MC_RET(mc_op_swiglu(ss->op_y, w->rows, y, q), "launch of the op glue's swiglu");
    else
        MC_RET(mc_op_store(ss->op_y, w->rows, bias, residual, y, q), "launch of the op glue's store");
    return MEMRA_OK;
}

/* gemma3's post norm of layer l (which: 0 attention, 1 FFN) on every rank of stage i, after the
 * all-reduce of po: x += RMSNorm(po) * post_norm (mc_op_rmsnorm_add), or with an op.rmsnorm
 * plugin its norm into op_x, then op_glue's store adds it to x (the same bits as the built-in when
 * the plugin's norm is mc_op_rmsnorm's). */
static memra_status mc_post_norm(memra_backend *b, memra_state *s, uint32_t i, uint32_t l, uint32_t which,
                                 memra_error *err) {
    const uint32_t R = mc_ranks(s, i), n = b->m->n_embd;
    const float eps = b->m->rms_eps;
    const memra_op_binding *nop = b->op_rmsnorm;
    for (uint32_t r = 0; r < R; r++) {
        mc_stage_state *ss = &s->st[i][r];
        const mc_stage_weights *sw = &b->w->stages[i][r];
        const mc_layer *L = &sw->layers[l];
        const float *w = which ? L->post_ffn_norm : L->post_attn_norm;
        cudaStream_t q = ss->stream;
        if (R > 1)
            MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
        if (!nop) {
            MC_RET(mc_op_rmsnorm_add(ss->po, w, n, eps, ss->x, q), "launch of a post norm (and residual add)");
            continue;
        }
        const char *site = which ? "post_ffn_norm" : "post_attn_norm";
        memra_op_ctx ctx = {sizeof(memra_op_ctx), site, site, sw->layer_begin + l, 0, s->position, r, i, ss->pos};
        memra_status st = nop->vt->cuda_rmsnorm(nop->op, &ctx, ss->po, w, n, 1, eps, ss->op_x, (void *)q, err);
        if (st) {
            memra_error_prefix(err, "cuda: op.rmsnorm=%s at %s", nop->name, site);
            return st;
        }
        MC_RET(mc_op_store(ss->op_x, n, NULL, ss->x, ss->x, q), "launch of the op glue's store (post norm)");
    }
    return MEMRA_OK;
}

/* Whether gemma3's post norm after the GEMV w (the output projection or down) of stage i folds into
 * that GEMV's launch (postnorm=fused: mc_gemv_post, its last block adds RMSNorm(po) * post_norm
 * to x, mc_op_rmsnorm_add's function): with one rank (with ranks the norm follows the all-reduce
 * of po), no op.rmsnorm plugin (its norm runs as a launch: mc_post_norm) and no op.gemv plugin
 * for w's type (the plugin's GEMV, then op_glue's store). The same bits as mc_post_norm's launch. */
static bool mc_post_folds(const memra_backend *b, const memra_state *s, uint32_t i, const mc_matrix *w) {
    return (b->cfg.postnorm == MC_POSTNORM_FUSED || b->cfg.postnorm == MC_POSTNORM_PROLOGUE) &&
           mc_ranks(s, i) == 1 && !b->op_rmsnorm && !(w->type < 64 && b->op_gemv[w->type]);
}

/* The output or down GEMV of a gemma3 layer with its post norm folded in (mc_post_folds): po = W in,
 * then x += RMSNorm(po) * post_w in the same launch (the ticket: the state's word `which`); x is the
 * residual stream's current buffer (ss->x, or ss->x2 under postnorm=prologue). */
static memra_status mc_gemv_post_site(memra_backend *b, mc_stage_state *ss, const mc_matrix *w, const float *in,
                                      const float *post_w, uint32_t which, float *x, cudaStream_t q,
                                      memra_error *err) {
    const mc_post_args pn = {post_w, x, ss->pn_ticket + which, b->m->rms_eps};
    MC_RET(mc_gemv_post(&b->cfg, w, in, ss->po, &pn, q), which ? "launch of the down gemv (with the post-FFN norm)"
                                                               : "launch of the output gemv (with the post norm)");
    return MEMRA_OK;
}

/* The q/k/v GEMV: one fused launch, or one per run of equal type (mc_layer) into consecutive rows
 * of qkv (each with its rows of the bias). */
static memra_status mc_qkv_site(memra_backend *b, mc_stage_state *ss, const mc_op_at *at, const mc_layer *L,
                                const float *x, float *qkv, cudaStream_t q, memra_error *err) {
    if (L->qkv_parts == 0)
        return mc_gemv_site(b, ss, at, &L->wqkv, x, L->attn_norm, L->bqkv, NULL, qkv, MC_GLU_NONE, q, err);
    /* qkvparts=merged: two parts in one launch where no op plugin or unfused norm takes either */
    if (L->qkv_parts == 2 && b->cfg.qkvparts == MC_QKVPARTS_MERGED && !L->bqkv && L->attn_norm && !b->op_rmsnorm &&
        b->cfg.norm == MC_NORM_FUSED && L->qkv_part[0].type < 64 && L->qkv_part[1].type < 64 &&
        !b->op_gemv[L->qkv_part[0].type] && !b->op_gemv[L->qkv_part[1].type]) {
        const cudaError_t e = mc_gemv_qkv2(&b->cfg, &L->qkv_part[0], &L->qkv_part[1], x, NULL, L->attn_norm,
                                           b->m->rms_eps, qkv, qkv + L->qkv_part[0].rows, q);
        if (e != cudaErrorNotSupported) {
            MC_RET(e, "launch of the merged q/k/v gemv parts");
            return MEMRA_OK;
        }
    }
    uint32_t off = 0;
    for (uint32_t p = 0; p < L->qkv_parts; p++) {
        memra_status st = mc_gemv_site(b, ss, at, &L->qkv_part[p], x, L->attn_norm, L->bqkv ? L->bqkv + off : NULL,
                                       NULL, qkv + off, MC_GLU_NONE, q, err);
        if (st)
            return st;
        off += L->qkv_part[p].rows;
    }
    return MEMRA_OK;
}

/* The gate/up GEMV and its GLU: one launch over interleaved rows, or (gate and up of different
 * types) gate and up into gu_pair, then the GLU. */
static memra_status mc_gu_site(memra_backend *b, mc_stage_state *ss, const mc_op_at *at, const mc_layer *L,
                               const float *x, float *y, int glu, cudaStream_t q, memra_error *err) {
    if (!L->gu_split)
        return mc_gemv_site(b, ss, at, &L->wgu, x, L->ffn_norm, NULL, NULL, y, glu, q, err);
    const uint32_t n = L->wg.rows;
    memra_status st = mc_gemv_site(b, ss, at, &L->wg, x, L->ffn_norm, NULL, NULL, ss->gu_pair, MC_GLU_NONE, q, err);
    if (!st)
        st = mc_gemv_site(b, ss, at, &L->wu, x, L->ffn_norm, NULL, NULL, ss->gu_pair + n, MC_GLU_NONE, q, err);
    if (st)
        return st;
    MC_RET(mc_glu_pair(ss->gu_pair, ss->gu_pair + n, n, glu, y, q), "launch of the gate/up glu");
    return MEMRA_OK;
}

/* ---- postnorm=prologue: gemma3's post norms in the GEMVs that read their output ---------------- */

/* Whether stage i's post norms may go into their consumers' launches: postnorm=prologue, gemma3,
 * one stage (the head is this stage's and the step's hidden ends in x) of one rank, no taps and no
 * op plugin (their sites see the tensors of the launched or fused path). */
static bool mc_pro_on(const memra_backend *b, const memra_state *s, uint32_t i) {
    if (b->cfg.postnorm != MC_POSTNORM_PROLOGUE || b->m->arch != MEMRA_ARCH_GEMMA3 || s->n_stages != 1 ||
        mc_ranks(s, i) != 1 || b->tp || b->taps || b->op_rmsnorm || !s->st[i][0].x2)
        return false;
    for (uint32_t t = 0; t < 64; t++)
        if (b->op_gemv[t])
            return false;
    return true;
}

/* Whether every GEMV that reads the output of layer l's producer (`which` 0: the output projection,
 * read by the gate/up GEMV; 1: down, read by the next layer's q/k/v GEMVs or, after the last layer,
 * the head) has the prologue (mc_gemv_pro_serves). */
static bool mc_pro_consumers(const memra_backend *b, const mc_stage_weights *sw, uint32_t nl, uint32_t l,
                             uint32_t which, int glu) {
    const mc_config *c = &b->cfg;
    if (which == 0) {
        const mc_layer *L = &sw->layers[l];
        if (L->moe)
            return false;
        return L->gu_split ? mc_gemv_pro_serves(c, &L->wg, MC_GLU_NONE) && mc_gemv_pro_serves(c, &L->wu, MC_GLU_NONE)
                           : mc_gemv_pro_serves(c, &L->wgu, glu);
    }
    if (l + 1 == nl)
        return sw->out_norm && mc_gemv_pro_serves(c, &sw->head, MC_GLU_NONE);
    const mc_layer *N = &sw->layers[l + 1];
    if (N->bqkv || N->moe)
        return false;
    if (N->qkv_parts == 0)
        return mc_gemv_pro_serves(c, &N->wqkv, MC_GLU_NONE);
    for (uint32_t p = 0; p < N->qkv_parts; p++)
        if (!mc_gemv_pro_serves(c, &N->qkv_part[p], MC_GLU_NONE))
            return false;
    return true;
}

/* Which producer keeps its post norm fused although its consumers serve: the producers (index 2l +
 * which) whose post norm goes into the consumers are every one whose consumers serve, less the last
 * of them when their count is odd (each moves the residual to the other buffer once, so an even
 * count ends the step in x, where the digests and the restore have it). from_xe (commit=handoff:
 * the residual starts in xe, and the first move takes it to x): less the last when the count is
 * even, so an odd count ends the step in x. Returns that last producer's index, or ~0 for none. */
static uint32_t mc_pro_drop(const memra_backend *b, const mc_stage_weights *sw, uint32_t nl, int glu, bool from_xe) {
    uint32_t n = 0, lastp = ~0u;
    for (uint32_t l = 0; l < nl; l++)
        for (uint32_t which = 0; which < 2; which++) {
            const mc_layer *L = &sw->layers[l];
            const bool post = which ? L->post_ffn_norm && !L->moe : L->post_attn_norm != NULL;
            if (post && mc_pro_consumers(b, sw, nl, l, which, glu)) {
                n++;
                lastp = 2 * l + which;
            }
        }
    const uint32_t parity = from_xe ? 1u : 0u; /* of the count of moves that ends the step in x */
    return n % 2 == parity ? ~0u : lastp;
}

/* commit=handoff or head on state s (cuda_backend.h says what it changes). Under postnorm=prologue
 * (gemma3) the first layer's post-attention norm must go into its gate/up GEMV's prologue, which
 * adds it to xe (mc_stage_body starts the residual there; mc_pro_drop keeps the count of moves
 * odd, so the step still ends in x). */
bool mc_embed_in_sampler(const memra_backend *b, const memra_state *s) {
    const mc_stage_weights *sw = &b->w->stages[0][0];
    if (!(b->cfg.commit == MC_COMMIT_HANDOFF || b->cfg.commit == MC_COMMIT_HEAD) || b->tp || s->n_stages != 1 ||
        mc_ranks(s, 0) != 1 || b->taps || sw->layer_end <= sw->layer_begin || mc_residual_scaled(b->m))
        return false;
    if (!mc_pro_on(b, s, 0))
        return sw->layers[0].post_attn_norm == NULL;
    const int glu = b->m->ffn_act == MEMRA_FFN_GELU_TANH ? MC_GLU_GELU : MC_GLU_SILU;
    return sw->layers[0].post_attn_norm != NULL && mc_pro_consumers(b, sw, sw->layer_end - sw->layer_begin, 0, 0, glu);
}

/* The q/k/v GEMVs with the prologue: x_new = pro->x + RMSNorm(pro->po) * pro->w into pro->out by the
 * first launch (the later parts compute it again from the same inputs, storing nothing). */
static memra_status mc_qkv_site_pro(memra_backend *b, const mc_layer *L, const mc_pro_args *pro, float *qkv,
                                    cudaStream_t q, memra_error *err) {
    const float eps = b->m->rms_eps;
    if (L->qkv_parts == 0) {
        MC_RET(mc_gemv_pro(&b->cfg, &L->wqkv, pro, L->attn_norm, eps, MC_GLU_NONE, qkv, q),
               "launch of the q/k/v gemv (with the post-FFN norm before it)");
        return MEMRA_OK;
    }
    if (L->qkv_parts == 2 && b->cfg.qkvparts == MC_QKVPARTS_MERGED && !L->bqkv) {
        const cudaError_t e = mc_gemv_qkv2(&b->cfg, &L->qkv_part[0], &L->qkv_part[1], NULL, pro, L->attn_norm, eps, qkv,
                                           qkv + L->qkv_part[0].rows, q);
        if (e != cudaErrorNotSupported) {
            MC_RET(e, "launch of the merged q/k/v gemv parts (with the post-FFN norm before them)");
            return MEMRA_OK;
        }
        /* no form for these parts (nothing was launched): a launch each below */
    }
    uint32_t off = 0;
    for (uint32_t p = 0; p < L->qkv_parts; p++) {
        mc_pro_args pp = *pro;
        if (p > 0)
            pp.out = NULL;
        MC_RET(mc_gemv_pro(&b->cfg, &L->qkv_part[p], &pp, L->attn_norm, eps, MC_GLU_NONE, qkv + off, q),
               "launch of a q/k/v gemv part (with the post-FFN norm before it)");
        off += L->qkv_part[p].rows;
    }
    return MEMRA_OK;
}

/* The gate/up GEMV (and its GLU) with the prologue, as mc_qkv_site_pro. */
static memra_status mc_gu_site_pro(memra_backend *b, mc_stage_state *ss, const mc_layer *L, const mc_pro_args *pro,
                                   float *y, int glu, cudaStream_t q, memra_error *err) {
    const float eps = b->m->rms_eps;
    if (!L->gu_split) {
        MC_RET(mc_gemv_pro(&b->cfg, &L->wgu, pro, L->ffn_norm, eps, glu, y, q),
               "launch of the gate/up gemv (with the post-attention norm before it)");
        return MEMRA_OK;
    }
    const uint32_t n = L->wg.rows;
    mc_pro_args pu = *pro;
    pu.out = NULL;
    MC_RET(mc_gemv_pro(&b->cfg, &L->wg, pro, L->ffn_norm, eps, MC_GLU_NONE, ss->gu_pair, q),
           "launch of the gate gemv (with the post-attention norm before it)");
    MC_RET(mc_gemv_pro(&b->cfg, &L->wu, &pu, L->ffn_norm, eps, MC_GLU_NONE, ss->gu_pair + n, q),
           "launch of the up gemv (with the post-attention norm before it)");
    MC_RET(mc_glu_pair(ss->gu_pair, ss->gu_pair + n, n, glu, y, q), "launch of the gate/up glu");
    return MEMRA_OK;
}

/* Layer `layer`'s attention arguments for stage state ss (its heads, the state's capacity, the
 * layer's RoPE tables and scale, its q/k norms, the sliding window of a local layer, the split
 * path's scratch): one place for the decode step and the prefill chunk, so both attend alike. */
mc_rope_args mc_layer_rope_args(const memra_model *m, const mc_stage_state *ss, const mc_stage_weights *sw,
                                const mc_layer *L, uint32_t layer, uint32_t capacity, uint32_t kv) {
    const bool swa = memra_model_layer_is_swa(m, layer);
    mc_rope_args ra = {ss->n_head,
                       ss->n_kv,
                       m->head_dim,
                       m->head_dim_v,
                       capacity,
                       m->rope_pairing == MEMRA_ROPE_NEOX,
                       1.0f / memra_model_layer_rope_linear_factor(m, layer),
                       swa ? sw->freqs_swa : sw->freqs,
                       L->q_norm,
                       L->k_norm,
                       m->rms_eps,
                       swa ? m->sliding_window : 0,
                       m->arch == MEMRA_ARCH_GEMMA3 || m->arch == MEMRA_ARCH_GRANITEMOE ? m->attn_scale : 0.0f,
                       kv,
                       ss->att_partial,
                       ss->att_ticket};
    return ra;
}

/* The parts of a mixture-of-experts layer that the arm's moe_fuse key folds together on stage i
 * (MC_MOE_FUSE_* bits 1, 2, 4, cuda_kernels.h; bit 8 is the gate/up launcher's own choice,
 * gemv_moe.cu): only with one rank holding every expert, each where its kernel serves the layer's
 * shapes; granite's attention scale (4) only with the fused router, no shared expert and no taps
 * (the attention's residual is tapped before the router runs). The same bits with any of them. */
static uint32_t mc_moe_fused(const memra_backend *b, const memra_state *s, uint32_t i, const mc_layer *L) {
    const memra_model *m = b->m;
    const uint32_t want = b->cfg.moe_fuse;
    uint32_t f = 0;
    if (!L->moe || mc_ranks(s, i) != 1)
        return 0;
    if ((want & MC_MOE_FUSE_ROUTE) && mc_moe_router_serves(&L->router))
        f |= MC_MOE_FUSE_ROUTE;
    if ((want & MC_MOE_FUSE_COMBINE) && mc_experts_combine_serves(&L->down_exps, m->n_embd, m->n_expert_used) &&
        !mc_experts_int(&b->cfg, &L->down_exps, MC_GLU_NONE)) /* experts=int: the combine stays a launch of its own */
        f |= MC_MOE_FUSE_COMBINE;
    if ((want & MC_MOE_FUSE_SCALE) && (f & MC_MOE_FUSE_ROUTE) && mc_residual_scaled(m) && m->n_ff_shexp == 0 &&
        !b->taps)
        f |= MC_MOE_FUSE_SCALE;
    /* the router in the gate/up launch: with the fused router and combine, no shared expert, no taps,
     * and granite's residual add folded (the combine then adds it) */
    if ((want & MC_MOE_FUSE_ROUTED) && (f & MC_MOE_FUSE_ROUTE) && (f & MC_MOE_FUSE_COMBINE) && m->n_ff_shexp == 0 &&
        !b->taps && (!mc_residual_scaled(m) || (f & MC_MOE_FUSE_SCALE)) &&
        mc_experts_routed_serves(&L->router, &L->gu_exps, 2 * m->n_ff, m->n_expert_used) &&
        L->router.rows == m->n_expert && !mc_experts_int(&b->cfg, &L->gu_exps, MC_GLU_SILU)) /* its own float gate/up */
        f |= MC_MOE_FUSE_ROUTED;
    return f;
}

/* mc_moe_ffn with the parts `fused` folds (one rank holding every expert): the top k in the router
 * GEMV's launch (the shared gate's GEMV first: the route reads its logit), with bit 4 granite's
 * attention residual add x += residual_scale * po too (mc_stage_body skips its own); the weighted
 * sum in the down GEMV's launch (the shared expert first: the sum reads its slot). Three launches
 * in place of five (six with granite's scale), the same bits: each kernel computes what the
 * unfused ones do, in their order. Bit 1024: two launches, the router in every cluster of the
 * gate/up's (mc_gemv_experts_routed), granite's residual add in the down/combine's. */
static memra_status mc_moe_ffn_fused(memra_backend *b, memra_state *s, uint32_t i, uint32_t l, uint32_t fused,
                                     memra_error *err) {
    const memra_model *m = b->m;
    const mc_config *c = &b->cfg;
    mc_stage_state *ss = &s->st[i][0];
    const mc_layer *L = &b->w->stages[i][0].layers[l];
    cudaStream_t q = ss->stream;
    const float eps = m->rms_eps;
    const uint32_t E = m->n_embd, F = m->n_ff, k = m->n_expert_used, ne = m->n_expert;
    const int shexp = m->n_ff_shexp > 0;
    const float scale = mc_residual_scaled(m) ? m->residual_scale : 1.0f;
    if (fused & MC_MOE_FUSE_ROUTED) { /* no shared expert: mc_moe_fused */
        const int sc = (fused & MC_MOE_FUSE_SCALE) != 0;
        MC_RET(mc_gemv_experts_routed(c, &L->router, &L->gu_exps, 2 * F, k, m->expert_weights_norm, ss->x,
                                      sc ? ss->po : NULL, sc ? m->residual_scale : 0.0f, L->ffn_norm, eps,
                                      ss->moe_logits, ss->moe_sel, ss->moe_w, ss->moe_act, F, q),
               "launch of the experts' gate/up gemv with the router");
        MC_RET(mc_gemv_experts_combine(c, &L->down_exps, E, ss->moe_sel, k, 0, ne, ss->moe_act, F, ss->moe_w, NULL,
                                       scale, ss->x, sc ? ss->po : NULL, sc ? m->residual_scale : 0.0f, 1, q),
               "launch of the experts' down gemv with the combine (and granite's residual)");
        return MEMRA_OK;
    }
    if (shexp)
        MC_RET(mc_gemv(c, &L->sh_gate, ss->x, L->ffn_norm, eps, NULL, NULL, ss->moe_logits + ne, q),
               "launch of the shared expert's gate gemv");
    if (fused & MC_MOE_FUSE_ROUTE) {
        const int sc = (fused & MC_MOE_FUSE_SCALE) != 0;
        MC_RET(mc_moe_router(c, &L->router, ss->x, sc ? ss->po : NULL, sc ? m->residual_scale : 0.0f, L->ffn_norm, eps,
                             ss->moe_logits, k, m->expert_weights_norm, shexp, ss->moe_sel, ss->moe_w, ss->moe_ticket,
                             q),
               "launch of the fused router (gemv with the ffn norm, top-k)");
    } else {
        MC_RET(mc_gemv(c, &L->router, ss->x, L->ffn_norm, eps, NULL, NULL, ss->moe_logits, q),
               "launch of the router gemv (with the ffn norm)");
        MC_RET(mc_moe_route(c, ss->moe_logits, ne, k, m->expert_weights_norm, shexp, ss->moe_sel, ss->moe_w, q),
               "launch of the router's top-k kernel");
    }
    MC_RET(mc_gemv_experts(c, &L->gu_exps, 2 * F, ss->moe_sel, k, 0, ne, ss->x, 0, L->ffn_norm, eps, MC_GLU_SILU,
                           ss->moe_act, F, q),
           "launch of the experts' gate/up gemv");
    if (shexp) {
        const mc_op_at gu_at = {"ffn_norm", "ffn_gate_shexp", l + b->w->stages[i][0].layer_begin, i, 0, s->position};
        memra_status st = mc_gu_site(b, ss, &gu_at, L, ss->x, ss->gu, MC_GLU_SILU, q, err);
        if (st)
            return st;
        MC_RET(mc_gemv(c, &L->wdown, ss->gu, NULL, 0.0f, NULL, NULL, ss->moe_slots + (size_t)k * E, q),
               "launch of the shared expert's down gemv");
    }
    if (fused & MC_MOE_FUSE_COMBINE) {
        MC_RET(mc_gemv_experts_combine(c, &L->down_exps, E, ss->moe_sel, k, 0, ne, ss->moe_act, F, ss->moe_w,
                                       shexp ? ss->moe_slots + (size_t)k * E : NULL, scale, ss->x, NULL, 0.0f, 0, q),
               "launch of the experts' down gemv with the combine");
        return MEMRA_OK;
    }
    MC_RET(mc_gemv_experts(c, &L->down_exps, E, ss->moe_sel, k, 0, ne, ss->moe_act, F, NULL, 0.0f, MC_GLU_NONE,
                           ss->moe_slots, E, q),
           "launch of the experts' down gemv");
    MC_RET(mc_moe_combine(c, ss->moe_slots, ss->moe_w, E, k, shexp, scale, ss->x, q),
           "launch of the experts' combine kernel");
    return MEMRA_OK;
}

/* A mixture-of-experts FFN of layer l on rank r of stage i (memra/model_types.h, cpu_moe.c):
 * the router's logits (its GEMV with the ffn norm fused, as the dense gate/up; then the shared
 * expert's gate), the softmax, top k and weights in one block, the chosen experts' gate/up rows
 * with their SwiGLU in one launch and their down rows in another (both read the chosen ids from
 * device memory: no host round trip, so a captured graph serves every token; only the chosen
 * experts' rows are read; a slot whose expert the rank does not hold gets zeros), the shared
 * expert's rows the rank holds as a dense FFN into the last slot (zeros where it holds none);
 * then, with combine (one rank; with ranks it follows the expert all-reduce: mc_moe_add), the
 * weighted sum in slot order onto the residual (times granite's residual scale). Every rank
 * computes the router whole from its whole residual: the same ids and weights everywhere. The
 * arm's moe_fuse folds some of these launches together on one rank (mc_moe_ffn_fused). */
static memra_status mc_moe_ffn(memra_backend *b, memra_state *s, uint32_t i, uint32_t r, uint32_t l, bool combine,
                               memra_error *err) {
    const memra_model *m = b->m;
    const mc_config *c = &b->cfg;
    mc_stage_state *ss = &s->st[i][r];
    const mc_stage_weights *sw = &b->w->stages[i][r];
    const mc_layer *L = &sw->layers[l];
    const mc_moe_range *rg = &sw->moe;
    cudaStream_t q = ss->stream;
    const float eps = m->rms_eps;
    const uint32_t E = m->n_embd, F = rg->x1 - rg->x0, k = m->n_expert_used, ne = m->n_expert;
    const int shexp = m->n_ff_shexp > 0;
    const uint32_t fused = combine ? mc_moe_fused(b, s, i, L) : 0; /* the arm's moe_fuse (one rank) */
    if (fused)
        return mc_moe_ffn_fused(b, s, i, l, fused, err);
    MC_RET(mc_gemv(c, &L->router, ss->x, L->ffn_norm, eps, NULL, NULL, ss->moe_logits, q),
           "launch of the router gemv (with the ffn norm)");
    if (shexp)
        MC_RET(mc_gemv(c, &L->sh_gate, ss->x, L->ffn_norm, eps, NULL, NULL, ss->moe_logits + ne, q),
               "launch of the shared expert's gate gemv");
    MC_RET(mc_moe_route(c, ss->moe_logits, ne, k, m->expert_weights_norm, shexp, ss->moe_sel, ss->moe_w, q),
           "launch of the router's top-k kernel");
    MC_RET(mc_gemv_experts(c, &L->gu_exps, 2 * F, ss->moe_sel, k, rg->e0, rg->e1, ss->x, 0, L->ffn_norm, eps,
                           MC_GLU_SILU, ss->moe_act, F, q),
           "launch of the experts' gate/up gemv");
    MC_RET(mc_gemv_experts(c, &L->down_exps, E, ss->moe_sel, k, rg->e0, rg->e1, ss->moe_act, F, NULL, 0.0f, MC_GLU_NONE,
                           ss->moe_slots, E, q),
           "launch of the experts' down gemv");
    if (shexp && rg->s1 > rg->s0) {
        const mc_op_at gu_at = {"ffn_norm", "ffn_gate_shexp", l + sw->layer_begin, i, r, s->position};
        memra_status st = mc_gu_site(b, ss, &gu_at, L, ss->x, ss->gu, MC_GLU_SILU, q, err);
        if (st)
            return st;
        MC_RET(mc_gemv(c, &L->wdown, ss->gu, NULL, 0.0f, NULL, NULL, ss->moe_slots + (size_t)k * E, q),
               "launch of the shared expert's down gemv");
    } else if (shexp) { /* an expert rank of ep alone: the shared expert is rank 0's */
        MC_RET(cudaMemsetAsync(ss->moe_slots + (size_t)k * E, 0, (size_t)E * 4, q),
               "cudaMemsetAsync (the shared expert's slot)");
    }
    if (combine)
        MC_RET(mc_moe_combine(c, ss->moe_slots, ss->moe_w, E, k, shexp,
                              mc_residual_scaled(m) ? m->residual_scale : 1.0f, ss->x, q),
               "launch of the experts' combine kernel");
    return MEMRA_OK;
}

/* With ranks, after the expert all-reduce of layer l: every rank adds the slots (now every rank's
 * sum) onto its x in slot order, the same bits on every rank. */
static memra_status mc_moe_add(memra_backend *b, memra_state *s, uint32_t i, memra_error *err) {
    const memra_model *m = b->m;
    for (uint32_t r = 0; r < mc_ranks(s, i); r++) {
        mc_stage_state *ss = &s->st[i][r];
        MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
        MC_RET(mc_moe_combine(&b->cfg, ss->moe_slots, ss->moe_w, m->n_embd, m->n_expert_used, m->n_ff_shexp > 0,
                              mc_residual_scaled(m) ? m->residual_scale : 1.0f, ss->x, ss->stream),
               "launch of the experts' combine kernel");
    }
    return MEMRA_OK;
}

/* One stage's part of the body: [embed | receive hidden], layers (each rank its slices, two
 * all-reduces per layer with more than one rank), commit, [head, sample] on rank 0. gemma3 adds
 * per layer: the sliding window and its RoPE frequencies on its local layers, the file's attention
 * scale, GELU in place of SiLU, and the post norms (the output and down GEMVs write their sums to
 * po without the residual; all-reduced with ranks; then mc_post_norm, or with postnorm=fused and
 * one rank the norm and residual add in the GEMV's own launch: mc_post_folds). */
static memra_status mc_stage_body(memra_backend *b, memra_state *s, uint32_t i, const memra_sample_cfg *sample,
                                  bool capture, memra_error *err) {
    const memra_model *m = b->m;
    const uint32_t R = mc_ranks(s, i);
    const bool last = i == s->n_stages - 1, tp = R > 1;
    const uint32_t hd = m->head_dim, hdv = m->head_dim_v;
    const bool own_trigger = b->cfg.trigger != MC_TRIGGER_DEFAULT;
    const mc_config *c = &b->cfg;
    /* commit=sampler: the sampler's argmax pass advances the position (one stage, one rank, no
     * taps: nothing between the last layer and the sampler reads the word then) */
    const bool commit_in_sampler =
        c->commit != MC_COMMIT_LAUNCH && sample && last && !b->tp && s->n_stages == 1 && !b->taps;
    /* commit=handoff: the first layer reads its input from xe; the sampler folds the next one there */
    const bool xe_in = i == 0 && mc_embed_in_sampler(b, s);
    bool head_argmax = false; /* commit=head: the head's launch ran greedy's argmax */
    mc_stage_state *r0 = &s->st[i][0];
    memra_status st0 = mc_stage_input(b, s, i, capture, err);
    if (st0)
        return st0;
    const mc_stage_weights *sw0 = &b->w->stages[i][0];
    const uint32_t nl = sw0->layer_end - sw0->layer_begin;
    const bool fused = mc_attention_path(c, r0->n_head, r0->n_kv, hd, hdv) != MC_ATT_PATH_UNFUSED;
    const int glu = m->ffn_act == MEMRA_FFN_GELU_TANH ? MC_GLU_GELU : MC_GLU_SILU;
    const bool scaled = mc_residual_scaled(m);
    /* postnorm=prologue (one rank): the residual's current buffer, and the post norm whose
     * consumers add it (its weights; po holds its input) */
    const bool pro_on = mc_pro_on(b, s, i);
    const uint32_t pro_drop = pro_on ? mc_pro_drop(b, sw0, nl, glu, xe_in) : ~0u;
    float *xcur = pro_on && xe_in ? r0->xe : r0->x; /* commit=handoff: the step's input, in xe */
    const float *pend_w = NULL;
    for (uint32_t l = 0; l < nl; l++) {
        const uint32_t layer = sw0->layer_begin + l;
        const bool post_a = sw0->layers[l].post_attn_norm != NULL, post_f = sw0->layers[l].post_ffn_norm != NULL;
        /* gemma3's post norms in their consumers' launches (postnorm=prologue), or in the output and
         * down GEMVs' launches (postnorm=fused, or prologue where a consumer lacks it; one rank) */
        const bool pro_a = pro_on && post_a && 2 * l != pro_drop && mc_pro_consumers(b, sw0, nl, l, 0, glu);
        const bool pro_f = pro_on && post_f && !sw0->layers[l].moe && 2 * l + 1 != pro_drop &&
                           mc_pro_consumers(b, sw0, nl, l, 1, glu);
        const bool fold_a = post_a && !pro_a && mc_post_folds(b, s, i, &sw0->layers[l].wo);
        const bool fold_f = post_f && !pro_f && !sw0->layers[l].moe && mc_post_folds(b, s, i, &sw0->layers[l].wdown);
        for (uint32_t r = 0; r < R; r++) {
            mc_stage_state *ss = &s->st[i][r];
            const mc_stage_weights *sw = &b->w->stages[i][r];
            const mc_layer *L = &sw->layers[l];
            cudaStream_t q = ss->stream;
            const uint32_t kv_plane = ss->n_kv * s->capacity;
            /* the arm's kv type: its row bytes */
            char *kc = (char *)ss->k_cache + (size_t)l * kv_plane * mc_kv_row_bytes(c->kv, hd);
            char *vc = (char *)ss->v_cache + (size_t)l * kv_plane * mc_kv_row_bytes(c->kv, hdv);
            mc_rope_args ra = mc_layer_rope_args(m, ss, sw, L, layer, s->capacity, c->kv);
            if (tp)
                MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
            if (ss->n_head == 0) { /* an expert rank of ep alone: its attention partial is zeros */
                MC_RET(cudaMemsetAsync(post_a || scaled ? ss->po : ss->x, 0, (size_t)m->n_embd * 4, q),
                       "cudaMemsetAsync (an expert rank's attention partial)");
                continue;
            }
            const mc_op_at qkv_at = {"attn_norm", "q", layer, i, r, s->position};
            float *xr = pro_on ? xcur : ss->x; /* the residual stream's buffer */
            if (l == 0 && xe_in)               /* the step's input: the wo GEMV below adds it, into x */
                xr = ss->xe;
            memra_status st;
            if (pend_w) { /* the previous layer's post-FFN norm, in these GEMVs (postnorm=prologue) */
                float *xo = xcur == ss->x ? ss->x2 : ss->x;
                const mc_pro_args pro = {ss->po, xcur, pend_w, xo, m->rms_eps};
                st = mc_qkv_site_pro(b, L, &pro, ss->qkv, q, err);
                xcur = xr = xo;
                pend_w = NULL;
            } else
                st = mc_qkv_site(b, ss, &qkv_at, L, xr, ss->qkv, q, err);
            if (st)
                return st;
            if (b->taps)
                mc_tap_qkv(b, s, i, r, (int32_t)layer);
            if (fused) {
                MC_RET(mc_attention_fused(c, &ra, ss->qkv, kc, vc, ss->att_out, ss->pos, q),
                       "launch of attention (fused q/k norm, rope, kv append)");
            } else {
                MC_RET(mc_rope_kv(&ra, ss->qkv, kc, vc, ss->pos, q), "launch of rope/kv append");
                MC_RET(mc_attention(ss->qkv, kc, vc, ss->att_partial, ss->att_out, ss->n_head, ss->n_kv, hd, hdv,
                                    s->capacity, ss->pos, ra.window, ra.scale, ra.kv, q),
                       "launch of attention");
            }
            if (b->taps)
                mc_tap_attention(b, s, i, r, (int32_t)layer);
            /* Rank 0 adds its partial to the residual; the others hold only theirs; the
             * all-reduce then leaves the new residual on every rank. With a post norm every
             * rank's partial goes to po, without the residual. */
            const mc_op_at wo_at = {NULL, "attn_out", layer, i, r, s->position};
            if (fold_a)
                st = mc_gemv_post_site(b, ss, &L->wo, ss->att_out, L->post_attn_norm, 0, xr, q, err);
            else
                st = mc_gemv_site(b, ss, &wo_at, &L->wo, ss->att_out, NULL, NULL,
                                  post_a || scaled || r > 0 ? NULL
                                  : l == 0 && xe_in         ? ss->xe
                                                            : ss->x,
                                  post_a || scaled ? ss->po : ss->x, MC_GLU_NONE, q, err);
            if (st)
                return st;
            /* granitemoe: x += residual_scale * wo's output (with ranks: its sum, later; with
             * moe_fuse bit 4 on one rank, in the MoE router's launch) */
            if (scaled && !tp && !(mc_moe_fused(b, s, i, L) & MC_MOE_FUSE_SCALE))
                MC_RET(mc_scale_add(c, ss->po, m->n_embd, m->residual_scale, ss->x, q),
                       "launch of the residual scale (attention)");
        }
        if (b->taps)
            mc_tap_flush(b);
        if (tp) {
            memra_status st = mc_all_reduce(b, s, i, l, 0, post_a || scaled ? MC_REDUCE_PO : MC_REDUCE_X, err);
            if (st)
                return st;
        }
        for (uint32_t r = 0; scaled && tp && r < R; r++) { /* every rank: x += residual_scale * the sum */
            mc_stage_state *ss = &s->st[i][r];
            MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
            MC_RET(mc_scale_add(c, ss->po, m->n_embd, m->residual_scale, ss->x, ss->stream),
                   "launch of the residual scale (attention)");
        }
        if (post_a) {
            if (b->taps)
                mc_tap_residual(b, s, i, MC_SITE_ATTN_OUT, (int32_t)layer);
            if (pro_a)
                pend_w = sw0->layers[l].post_attn_norm; /* in the gate/up GEMV's launch */
            memra_status st = fold_a || pro_a ? MEMRA_OK : mc_post_norm(b, s, i, l, 0, err);
            if (st)
                return st;
        }
        if (b->taps)
            mc_tap_residual(b, s, i, MC_SITE_ATTN_RES, (int32_t)layer);
        for (uint32_t r = 0; r < R; r++) {
            mc_stage_state *ss = &s->st[i][r];
            const mc_layer *L = &b->w->stages[i][r].layers[l];
            cudaStream_t q = ss->stream;
            if (tp)
                MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
            if (L->moe) { /* with ranks the slots are combined after the expert all-reduce */
                memra_status st = mc_moe_ffn(b, s, i, r, l, !tp, err);
                if (st)
                    return st;
                continue;
            }
            const mc_op_at gu_at = {"ffn_norm", "ffn_gate", layer, i, r, s->position};
            const mc_op_at down_at = {NULL, "ffn_down", layer, i, r, s->position};
            float *xr = pro_on ? xcur : ss->x;
            memra_status st;
            if (pend_w) { /* this layer's post-attention norm, in the gate/up GEMV (postnorm=prologue) */
                float *xo = xcur == ss->x ? ss->x2 : ss->x;
                const mc_pro_args pro = {ss->po, xcur, pend_w, xo, m->rms_eps};
                st = mc_gu_site_pro(b, ss, L, &pro, ss->gu, glu, q, err);
                xcur = xr = xo;
                pend_w = NULL;
            } else
                st = mc_gu_site(b, ss, &gu_at, L, xr, ss->gu, glu, q, err);
            if (st)
                return st;
            if (b->taps)
                mc_tap_ffn_act(b, s, i, r, (int32_t)layer);
            if (fold_f)
                st = mc_gemv_post_site(b, ss, &L->wdown, ss->gu, L->post_ffn_norm, 1, xr, q, err);
            else
                st = mc_gemv_site(b, ss, &down_at, &L->wdown, ss->gu, NULL, NULL, post_f || r > 0 ? NULL : ss->x,
                                  post_f ? ss->po : ss->x, MC_GLU_NONE, q, err);
            if (st)
                return st;
        }
        if (b->taps)
            mc_tap_flush(b);
        const bool moe = sw0->layers[l].moe;
        if (tp) {
            memra_status st = mc_all_reduce(b, s, i, l, 1,
                                            moe      ? MC_REDUCE_SLOTS
                                            : post_f ? MC_REDUCE_PO
                                                     : MC_REDUCE_X,
                                            err);
            if (!st && moe)
                st = mc_moe_add(b, s, i, err);
            if (st)
                return st;
        }
        if (post_f) {
            if (b->taps)
                mc_tap_residual(b, s, i, MC_SITE_FFN_DOWN, (int32_t)layer);
            if (pro_f) /* in the next layer's q/k/v GEMVs' launches, or the head's */
                pend_w = sw0->layers[l].post_ffn_norm;
            memra_status st = fold_f || pro_f ? MEMRA_OK : mc_post_norm(b, s, i, l, 1, err);
            if (st)
                return st;
        }
        if (b->taps)
            mc_tap_residual(b, s, i, MC_SITE_FFN_RES, (int32_t)layer);
    }
    /* Every rank's status of the step's last all-reduce, once written, reaches every other rank
     * before its commit: after a timeout or an abort the ranks of one operation may read different
     * words, and one must not commit what another refuses (a failed operation before the last
     * breaks the communicator, so the last one fails on every rank too). */
    for (uint32_t r = 0; tp && r < R; r++) {
        MC_RET(cudaSetDevice(s->st[i][r].device), "cudaSetDevice");
        MC_RET(cudaEventRecord(s->st[i][r].lastop, s->st[i][r].stream), "cudaEventRecord (last all-reduce done)");
    }
    for (uint32_t r = 0; tp && r < R; r++) {
        mc_stage_state *ss = &s->st[i][r];
        MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
        for (uint32_t q = 0; q < R; q++) {
            if (q == r)
                continue;
            const mc_stage_state *sq = &s->st[i][q];
            MC_RET(cudaStreamWaitEvent(ss->stream, sq->lastop, 0), "cudaStreamWaitEvent (a peer's last all-reduce)");
            MC_RET(cudaMemcpyAsync(ss->peer_last + q, sq->status + (2 * nl - 1), 4, cudaMemcpyDefault, ss->stream),
                   "cudaMemcpyAsync (a peer's status)");
        }
    }
    /* Commit; on the last stage the head (each rank its rows of the vocabulary with more than
     * one rank, gathered into rank 0's buffer); then rank 0 samples and publishes. */
    for (uint32_t r = 0; r < R; r++) {
        mc_stage_state *ss = &s->st[i][r];
        cudaStream_t q = ss->stream;
        MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
        /* In an arm with ranks anywhere every stage commits only when every all-reduce of its step
         * succeeded, the stage before it committed this step (its verdict, handed over with the
         * hidden) and no earlier step of the state failed (the poison). */
        if (b->tp)
            MC_RET(mc_commit_checked(ss->pos, tp ? ss->status : NULL, tp ? 2 * nl : 0, tp ? ss->peer_last : NULL,
                                     tp ? R : 0, r, i > 0 ? ss->vin : NULL, ss->verdict, ss->poison, ss->ring, q),
                   "launch of the checked commit kernel");
        else if (!commit_in_sampler)
            MC_RET(mc_commit(ss->pos, b->cfg.pdl != 0, q), "launch of the commit kernel");
        if (!last || (r > 0 && !tp) || ss->v1 == ss->v0) /* (an expert rank of ep alone holds no head) */
            continue;
        const mc_stage_weights *sw = &b->w->stages[i][r];
        float *out = b->tp ? ss->lg : ss->logits; /* checked: published below, when the step committed */
        const mc_op_at head_at = {"output_norm", "logits", MEMRA_OP_LAYER_HEAD, i, r, s->position, true};
        float *xo = xcur == ss->x ? ss->x2 : ss->x;
        const mc_pro_args pro = {ss->po, xcur, pend_w, xo, m->rms_eps}; /* (pend_w: postnorm=prologue) */
        /* commit=head: a greedy step's argmax in the head's launch, where the head's GEMV is the
         * built-in fused one (no op plugin, no unfused norm, no logit scale) and its kernel takes
         * it (mc_gemv_head_argmax: a K-quant head, or a Q8_0 one with or without the last layer's
         * post-FFN norm; cudaErrorNotSupported: the launches below) */
        if (c->commit == MC_COMMIT_HEAD && commit_in_sampler && !(sample->temperature > 0.0f) && !tp &&
            !(m->logit_scale > 0.0f && m->logit_scale != 1.0f) && sw->head.type < 64 && !b->op_gemv[sw->head.type] &&
            !b->op_rmsnorm && c->norm != MC_NORM_UNFUSED) {
            const mc_embed_next next = {b->w->stages[0][0].embd, mc_embd_scale(m), s->st[0][0].xe};
            const mc_argmax_args a =
                mc_argmax_args_of(&ss->sampler, ss->pos, s->n_stages == 1 ? ss->in_token : ss->sampled, ss->result,
                                  s->res_ring, s->max_inflight, true, c->wait == MC_WAIT_WORD, xe_in ? &next : NULL);
            const cudaError_t e = mc_gemv_head_argmax(c, &sw->head, pro_on ? xcur : ss->x, pend_w ? &pro : NULL,
                                                      sw->out_norm, m->rms_eps, out, &a, q);
            if (e != cudaErrorNotSupported)
                MC_RET(e, "launch of the head gemv with greedy's argmax (commit=head)");
            head_argmax = e == cudaSuccess;
        }
        if (pend_w) { /* the last layer's post-FFN norm, in the head's launch (postnorm=prologue) */
            if (!head_argmax)
                MC_RET(mc_gemv_pro(c, &sw->head, &pro, sw->out_norm, m->rms_eps, MC_GLU_NONE, out, q),
                       "launch of the head gemv (with the post-FFN norm before it)");
            xcur = xo;
            pend_w = NULL;
        } else if (!head_argmax) {
            const memra_status st = mc_gemv_site(b, ss, &head_at, &sw->head, pro_on ? xcur : ss->x, sw->out_norm, NULL,
                                                 NULL, out, MC_GLU_NONE, q, err);
            if (st)
                return st;
        }
        if (m->logit_scale > 0.0f && m->logit_scale != 1.0f) /* granitemoe: times 1 / logit_scale, as the cpu */
            MC_RET(mc_scale_add(c, out, sw->head.rows, 1.0f / m->logit_scale, NULL, q), "launch of the logit scale");
        if (r > 0) {      /* rank r's rows into rank 0's buffer, which rank 0 reads after this event */
            if (!capture) /* rank 0 has read the previous step's (in a graph: the replay before) */
                MC_RET(cudaStreamWaitEvent(q, r0->pub_ev, 0), "cudaStreamWaitEvent (logits published)");
            MC_RET(cudaMemcpyAsync(r0->lg + ss->v0, ss->lg, (size_t)(ss->v1 - ss->v0) * 4, cudaMemcpyDefault, q),
                   "cudaMemcpyAsync (logits gather)");
            MC_RET(cudaEventRecord(ss->head_ev, q), "cudaEventRecord (logits gathered)");
        }
    }
    if (pro_on && (xcur != r0->x || pend_w)) /* mc_pro_drop keeps the count's parity: never */
        return memra_fail(err, MEMRA_E_INTERNAL, "cuda: postnorm=prologue left the step's hidden outside x");
    for (uint32_t r = 0; r < R; r++) {
        mc_stage_state *ss = &s->st[i][r];
        cudaStream_t q = ss->stream;
        MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
        if (r == 0 && last && tp)
            for (uint32_t k = 1; k < R; k++)
                if (s->st[i][k].v1 > s->st[i][k].v0)
                    MC_RET(cudaStreamWaitEvent(q, s->st[i][k].head_ev, 0), "cudaStreamWaitEvent (logits gathered)");
        if (own_trigger)
            MC_RET(mc_trigger_enqueue(MC_TRIGGER_DEFAULT, q), "enqueueing the default trigger mask");
        float *lg = b->tp ? ss->lg : ss->logits;
        if (r == 0 && last && sample) {
            /* With one stage the embedding of the next step reads its token where this one is
             * sampled (the same stream, after this step: no hand-over launch). */
            /* commit=handoff: the next step's input, from the token chosen (stage 0 is this one) */
            const mc_embed_next next = {b->w->stages[0][0].embd, mc_embd_scale(m), s->st[0][0].xe};
            if (!head_argmax) /* (commit=head: the head's launch sampled) */
                MC_RET(mc_sample(lg, &ss->sampler, sample, ss->pos, s->n_stages == 1 ? ss->in_token : ss->sampled,
                                 ss->result, b->tp ? NULL : s->res_ring, s->max_inflight, b->cfg.pdl && !b->tp,
                                 commit_in_sampler, b->cfg.wait == MC_WAIT_WORD, xe_in ? &next : NULL, q),
                       "launch of the device sampler");
            MC_RET(cudaEventRecord(ss->sampled_ev, q), "cudaEventRecord (sampled)");
        }
        if (r == 0 && last && b->tp)
            MC_RET(mc_tp_publish(ss->verdict, ss->x, ss->xc, m->n_embd, ss->lg, ss->logits, m->n_vocab, q),
                   "launch of the publish kernel");
        if (r == 0 && last && tp && !capture)
            MC_RET(cudaEventRecord(ss->pub_ev, q), "cudaEventRecord (logits published)");
        if (r == 0 && !last)
            MC_RET(cudaEventRecord(ss->done, q), "cudaEventRecord (hidden ready)");
        if (r > 0 || (capture && last))
            MC_RET(cudaEventRecord(ss->fin, q), "cudaEventRecord (rank done)");
    }
    return MEMRA_OK;
}

memra_status mc_body(memra_backend *b, memra_state *s, const memra_sample_cfg *sample, bool capture, memra_error *err) {
    memra_status st = MEMRA_OK;
    for (uint32_t i = 0; i < s->n_stages; i++)
        if ((st = mc_stage_body(b, s, i, sample, capture, err)))
            return mc_quarantine_fail(s, err);
    /* Joins: in a capture every other stream back into stage 0's (rank 0); eagerly, with ranks,
     * every other rank into the last stage's rank 0, where the step's completion is recorded. */
    mc_stage_state *into = capture ? &s->st[0][0] : &s->st[s->n_stages - 1][0];
    if (!capture && !b->tp)
        return MEMRA_OK;
    MC_TRY(cudaSetDevice(into->device), "cudaSetDevice");
    for (uint32_t i = 0; i < s->n_stages; i++)
        for (uint32_t r = 0; r < mc_ranks(s, i); r++) {
            mc_stage_state *ss = &s->st[i][r];
            /* rank 0 of an earlier stage is joined through the hand-offs to the last stage's */
            if (ss == into || (r == 0 && !(capture && i == s->n_stages - 1)))
                continue;
            MC_TRY(cudaStreamWaitEvent(into->stream, ss->fin, 0), "cudaStreamWaitEvent (join)");
        }
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

memra_status mc_finish(memra_backend *b, memra_state *s, const memra_step_args *args, bool after_graph,
                       memra_error *err) {
    memra_status st = MEMRA_OK;
    mc_stage_state *sl = &s->st[s->n_stages - 1][0];
    cudaStream_t q = after_graph ? s->st[0][0].stream : sl->stream;
    int32_t dev = after_graph ? s->st[0][0].device : sl->device;
    mc_slot *slot = &s->slots[(s->head + s->inflight) % s->max_inflight];
    MC_TRY(cudaSetDevice(dev), "cudaSetDevice");
    if (args->want_logits)
        MC_TRY(cudaMemcpyAsync(slot->host_logits, sl->logits, (size_t)b->m->n_vocab * 4, cudaMemcpyDeviceToHost, q),
               "cudaMemcpyAsync (logits readback)");
    /* With ranks the result is copied back (a refused step does not advance the position the
     * ring is indexed by); without, the sampler wrote the ring's entry itself. */
    if (args->sample && b->tp)
        MC_TRY(cudaMemcpyAsync(slot->host_res, sl->result, sizeof(mc_sample_result), cudaMemcpyDeviceToHost, q),
               "cudaMemcpyAsync (sample readback)");
    slot->pending = after_graph ? slot->ev_first : slot->ev;
    MC_TRY(cudaEventRecord(slot->pending, q), "cudaEventRecord (step done)");
    slot->want_logits = args->want_logits;
    slot->sampled = args->sample != NULL;
    s->position++;
    slot->position = s->position;
    /* the sampler runs after the commit: *pos is this step's s->position there */
    slot->res = b->tp ? slot->host_res : &s->res_ring[s->position % s->max_inflight];
    s->inflight++;
    s->has_device_token = args->sample != NULL;
    s->xe_ready = args->sample != NULL && mc_embed_in_sampler(b, s); /* its sampler folded the next input */
    s->sampled_ev_live = args->sample != NULL && !after_graph;
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

memra_status mc_step_begin(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err) {
    if (!MEMRA_HAS_MEMBER(args, memra_step_args, want_logits))
        return memra_fail(err, MEMRA_E_INVALID, "cuda: step args missing or too small");
    memra_status st = mc_prepare(b, s, args, err);
    if (st)
        return st;
    if ((st = mc_body(b, s, args->sample, false, err)))
        return st;
    return mc_finish(b, s, args, false, err);
}
