/* cuda_taps.cu: the `cuda` backend's per-op taps (the memra.ops extension, memra/ext.h): one eager
 * step with taps on, handing the caller the logical tensor after each op the backend materialises.
 *
 * The cuda backend fuses ops, so it has fewer sites than cpu: the attention norm is inside the qkv
 * GEMV, q/k norms, RoPE and the KV append inside attention, the ffn norm and the SwiGLU inside the
 * gate/up GEMV, and the residual add inside the output and down GEMVs (rank 0 adds it; the
 * all-reduce then leaves the new residual on every rank). Its sites, per layer: q, k, v (the qkv
 * GEMV's output, biases included), attention, attn_res, ffn_act, ffn_res; then the head's logits.
 * gemma3 adds attn_out and ffn_down (the output and down GEMVs' sums after the all-reduce, before
 * the post norms, which it materialises); its q/k norms and RoPE stay inside attention (no
 * qk_norm or rope site), its post norms inside the residual add (their effect shows at attn_res,
 * ffn_res; with postnorm=fused they run in the output or down GEMV's last block, which writes po
 * all the same, so the sites and their tensors are the launch's). The gate compares only the sites both arms hand over.
 *
 * Off (b->taps NULL) a step pays one host-side branch per op. On (a tapped step, never captured),
 * after an op the rank's stream is synchronised and the op's output copied to the host: a rank's
 * share of a sharded tensor at its logical offset (its heads', kv heads' or ffn rows' range from
 * the plan), handed over in site order once every rank of the stage enqueued its part; a residual
 * after the all-reduce from rank 0 once every rank's stream is done. The copies read only: the
 * step's bits are the untapped step's. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "memra/ext.h"

struct mc_taps {
    memra_op_tap_fn fn;
    void *user;
    memra_status st; /* the first failure (a copy, or fn) */
    memra_error err;
    float *buf[MC_SITE_COUNT]; /* host gather buffers of the per-rank sites */
    bool have[MC_SITE_COUNT];
    memra_op_site info[MC_SITE_COUNT];
};

static const char *const mc_site_names[MC_SITE_COUNT] = {"q",        "k",       "v",        "attention", "attn_out",
                                                         "attn_res", "ffn_act", "ffn_down", "ffn_res",   "logits"};

static uint32_t site_total(const memra_model *m, mc_site site) {
    switch (site) {
    case MC_SITE_Q: return m->n_head * m->head_dim;
    case MC_SITE_K: return m->n_head_kv * m->head_dim;
    case MC_SITE_V: return m->n_head_kv * m->head_dim_v;
    case MC_SITE_ATTENTION: return m->n_head * m->head_dim_v;
    case MC_SITE_FFN_ACT: return m->n_ff;
    case MC_SITE_LOGITS: return m->n_vocab;
    default: return m->n_embd;
    }
}

static void tap_fail(mc_taps *t, cudaError_t e, const char *what) {
    if (t->st == MEMRA_OK)
        t->st = mc_cuda_fail(&t->err, e, what);
}

static void hand_over(mc_taps *t, const memra_op_site *info, const float *data) {
    if (t->st != MEMRA_OK)
        return;
    memra_error e = {};
    memra_status st = t->fn(t->user, info, data, &e);
    if (st != MEMRA_OK) {
        t->st = st;
        t->err = e;
    }
}

static void site_info(const memra_state *s, uint32_t stage, mc_site site, int32_t layer, uint32_t n,
                      memra_op_site *info) {
    memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
    info->layer = layer;
    info->site = mc_site_names[site];
    info->tensor = mc_site_names[site];
    info->n = n;
    info->stage = stage;
    info->n_ranks = mc_ranks(s, stage);
}

/* Rank r's piece of a sharded site: n floats at dev (on the rank's device and stream), at logical
 * offset `at`; the rank holds [sb, se). */
static void tap_piece(memra_backend *b, memra_state *s, uint32_t i, uint32_t r, mc_site site, int32_t layer,
                      const float *dev, uint32_t n, uint32_t at, uint32_t sb, uint32_t se) {
    mc_taps *t = b->taps;
    uint32_t total = site_total(b->m, site);
    if (t->st != MEMRA_OK)
        return;
    if (!t->have[site]) {
        site_info(s, i, site, layer, total, &t->info[site]);
        t->have[site] = true;
    }
    t->info[site].begin[r] = sb;
    t->info[site].end[r] = se;
    if (at > total || n > total - at)
        return;
    const mc_stage_state *ss = &s->st[i][r];
    cudaError_t e = cudaSetDevice(ss->device);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(ss->stream);
    if (e == cudaSuccess)
        e = cudaMemcpy(t->buf[site] + at, dev, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        tap_fail(t, e, "a tap's copy (memra.ops)");
}

/* The rank's slices, from the plan (the whole tensor with one rank). */
static void rank_range(const memra_backend *b, const memra_state *s, uint32_t i, uint32_t r, uint32_t *h0, uint32_t *g0,
                       uint32_t *f0) {
    const memra_rank_plan *rp = mc_ranks(s, i) > 1 ? &b->plan.stages[i].ranks[r] : NULL;
    *h0 = rp ? rp->head_begin : 0;
    *g0 = rp ? rp->kv_head_begin : 0;
    *f0 = rp ? rp->ff_begin : 0;
}

void mc_tap_qkv(memra_backend *b, memra_state *s, uint32_t i, uint32_t r, int32_t layer) {
    const memra_model *m = b->m;
    const mc_stage_state *ss = &s->st[i][r];
    uint32_t h0, g0, f0, hd = m->head_dim, hv = m->head_dim_v;
    rank_range(b, s, i, r, &h0, &g0, &f0);
    const uint32_t nq = ss->n_head * hd, nk = ss->n_kv * hd, nv = ss->n_kv * hv;
    tap_piece(b, s, i, r, MC_SITE_Q, layer, ss->qkv, nq, h0 * hd, h0 * hd, h0 * hd + nq);
    tap_piece(b, s, i, r, MC_SITE_K, layer, ss->qkv + nq, nk, g0 * hd, g0 * hd, g0 * hd + nk);
    tap_piece(b, s, i, r, MC_SITE_V, layer, ss->qkv + nq + nk, nv, g0 * hv, g0 * hv, g0 * hv + nv);
}

void mc_tap_attention(memra_backend *b, memra_state *s, uint32_t i, uint32_t r, int32_t layer) {
    const mc_stage_state *ss = &s->st[i][r];
    uint32_t h0, g0, f0, hv = b->m->head_dim_v, n = ss->n_head * hv;
    rank_range(b, s, i, r, &h0, &g0, &f0);
    tap_piece(b, s, i, r, MC_SITE_ATTENTION, layer, ss->att_out, n, h0 * hv, h0 * hv, h0 * hv + n);
}

void mc_tap_ffn_act(memra_backend *b, memra_state *s, uint32_t i, uint32_t r, int32_t layer) {
    const mc_stage_state *ss = &s->st[i][r];
    uint32_t h0, g0, f0;
    rank_range(b, s, i, r, &h0, &g0, &f0);
    tap_piece(b, s, i, r, MC_SITE_FFN_ACT, layer, ss->gu, ss->n_ff, f0, f0, f0 + ss->n_ff);
}

void mc_tap_flush(memra_backend *b) {
    mc_taps *t = b->taps;
    for (int k = 0; k < MC_SITE_COUNT; k++)
        if (t->have[k]) {
            hand_over(t, &t->info[k], t->buf[k]);
            t->have[k] = false;
        }
}

/* The residual stream of stage i after an all-reduce (or the residual-adding GEMV with one rank),
 * or at attn_out and ffn_down (gemma3) the sum before the post norm (po): every rank holds it
 * whole; rank 0's is handed over once every rank's stream is done. */
void mc_tap_residual(memra_backend *b, memra_state *s, uint32_t i, mc_site site, int32_t layer) {
    mc_taps *t = b->taps;
    if (t->st != MEMRA_OK)
        return;
    cudaError_t e = cudaSuccess;
    for (uint32_t r = 0; r < mc_ranks(s, i) && e == cudaSuccess; r++) {
        e = cudaSetDevice(s->st[i][r].device);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(s->st[i][r].stream);
    }
    float *buf = t->buf[site];
    if (e == cudaSuccess)
        e = cudaSetDevice(s->st[i][0].device);
    if (e == cudaSuccess)
        e = cudaMemcpy(buf, site == MC_SITE_ATTN_OUT || site == MC_SITE_FFN_DOWN ? s->st[i][0].po : s->st[i][0].x,
                       (size_t)b->m->n_embd * sizeof(float), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        tap_fail(t, e, "a tap's copy of the residual (memra.ops)");
        return;
    }
    memra_op_site info;
    site_info(s, i, site, layer, b->m->n_embd, &info);
    for (uint32_t r = 0; r < info.n_ranks && r < MEMRA_MAX_RANKS; r++) {
        info.begin[r] = 0;
        info.end[r] = b->m->n_embd;
    }
    hand_over(t, &info, buf);
}

static void taps_free(mc_taps *t) {
    for (int k = 0; t && k < MC_SITE_COUNT; k++)
        free(t->buf[k]);
    free(t);
}

/* memra.ops step_tapped: the ordinary eager step (step_begin, step_end) with b->taps set, then the
 * logits it read back, as the head's site (computed on the last stage's rank 0; with ranks, each
 * rank's rows of the vocabulary gathered there). */
extern "C" memra_status mc_step_tapped(memra_backend *b, memra_state *s, const memra_step_args *args,
                                       memra_op_tap_fn fn, void *user, memra_error *err) {
    if (!fn || !MEMRA_HAS_MEMBER(args, memra_step_args, want_logits))
        return memra_fail(err, MEMRA_E_INVALID, "cuda: a tapped step needs a tap and step arguments");
    if (s->inflight)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: a tapped step with %u steps in flight", s->inflight);
    mc_taps *t = (mc_taps *)calloc(1, sizeof *t);
    bool ok = t != NULL;
    for (int k = 0; ok && k < MC_SITE_COUNT; k++)
        ok = (t->buf[k] = (float *)calloc(site_total(b->m, (mc_site)k), sizeof(float))) != NULL;
    if (!ok) {
        taps_free(t);
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of memory for the taps of a step");
    }
    t->fn = fn;
    t->user = user;
    memra_step_args a = *args;
    a.struct_size = sizeof a;
    a.want_logits = true;
    b->taps = t;
    memra_status st = mc_step_begin(b, s, &a, err);
    b->taps = NULL;
    float *logits = t->buf[MC_SITE_LOGITS];
    if (st == MEMRA_OK)
        st = mc_step_end(b, s, logits, NULL, err);
    if (st == MEMRA_OK && t->st == MEMRA_OK) {
        const uint32_t last = s->n_stages - 1;
        memra_op_site info;
        site_info(s, last, MC_SITE_LOGITS, -1, b->m->n_vocab, &info);
        for (uint32_t r = 0; r < info.n_ranks && r < MEMRA_MAX_RANKS; r++) {
            info.begin[r] = info.n_ranks > 1 ? s->st[last][r].v0 : 0;
            info.end[r] = info.n_ranks > 1 ? s->st[last][r].v1 : b->m->n_vocab;
        }
        hand_over(t, &info, logits);
    }
    if (st == MEMRA_OK && t->st != MEMRA_OK) {
        if (err)
            *err = t->err;
        st = t->st;
        mc_quarantine(b, s, err ? err->msg : "a tapped step failed");
    }
    taps_free(t);
    return st;
}
