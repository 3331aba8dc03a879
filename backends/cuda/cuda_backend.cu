/* cuda_backend.cu: the `cuda` backend plugin (eager): weights uploaded once per (model, plan) and
 * shared by every cuda-family backend on that load; states with per-stage streams, buffers and
 * KV caches; a step enqueued as prepare / body / finish (cuda_ext.h), so cuda-graph can capture
 * the body once and replay it.
 *
 * Exactness across placements: every stage owns every buffer it writes (hidden, norms, qkv,
 * attention partials, gate/up, KV cache, position), so no two stages in flight ever share
 * scratch; the hidden state crosses stages by an exact device copy ordered by events; a stage
 * overwrites its hidden only after the next stage has copied the previous token's. The math of
 * every kernel depends only on its inputs and launch shape, never on timing, so one stream or
 * several, one device or several, pipelined or not, give the same bits. (A same-device
 * multi-stream pipeline flakes exactly when some buffer is shared between stages in flight, or a
 * wait is missing: neither can happen here.)
 *
 * Tensor parallelism (a stage with ranks, tp=N): rank r of a stage holds, on its own device, its
 * heads' rows of wq/wk/wv (and biases), their columns of wo, its ffn rows of gate/up and their
 * columns of down, the norms whole, and on the last stage its rows of the head (split by
 * vocabulary). Every rank holds the whole residual x. Per layer each rank computes its partial of
 * the attention output and of the FFN output into x (rank 0 adds the residual, the others hold
 * only their partial), and one in-place all-reduce of x through the arm's collective (one
 * communicator per state and stage; the n calls back to back in rank order) leaves the new
 * residual, the same bits, on every rank: two all-reduces per layer, blocks layer*2 and
 * layer*2+1. The embedding is computed once (stage 0, rank 0) and copied to every rank; the last
 * stage's ranks gather their logits into rank 0's buffer, where the sampler runs. A step is a
 * transaction on the device: in an arm with ranks anywhere, each rank of every stage (plain ones
 * too) commits checked: every collective status of its step, every other rank's status of the
 * step's last all-reduce, the verdict of the stage before (copied with the hidden, before
 * `consumed`, so the next step cannot overwrite it first) and the state's poison word (set by
 * any failed verdict, so a step already queued behind a refused one commits nothing; cleared only
 * by a restore); it advances its position only when all are 0 and writes its verdict to
 * host-mapped memory, which step_end reads; the hidden and logits a step computed are published
 * to the state's committed copies only then. So a refused step changes nothing a digest or a
 * restore sees, and the state is quarantined. In cuda-graph the collectives are
 * captured with the rest of the token and every replay is a new operation (the collectives keep
 * their epochs and signals on the device). */
#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

#define MC_MAX_INFLIGHT 16u

/* ---- errors ----------------------------------------------------------------------------- */

static memra_status mc_cuda_fail(memra_error *err, cudaError_t e, const char *what) {
    return memra_fail(err, MEMRA_E_DEVICE, "cuda: %s failed: %s (%s)", what, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

#define MC_TRY(call, what)                                                                                             \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            st = mc_cuda_fail(err, e_, what);                                                                          \
            goto fail;                                                                                                 \
        }                                                                                                              \
    } while (0)

#define MC_RET(call, what)                                                                                             \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
            return mc_cuda_fail(err, e_, what);                                                                        \
    } while (0)

/* ---- weights ------------------------------------------------------------------------------ */

typedef struct mc_layer {
    float *attn_norm, *ffn_norm, *bqkv, *q_norm, *k_norm;
    mc_matrix wqkv, wo, wgu, wdown;
} mc_layer;

/* One rank's weights of one stage (with one rank: the stage's). */
typedef struct mc_stage_weights {
    int32_t device;
    uint32_t layer_begin, layer_end;
    mc_layer *layers; /* layer_end - layer_begin */
    mc_matrix embd;   /* stage 0 */
    float *out_norm;  /* last stage */
    mc_matrix head;   /* last stage */
    float *freqs;     /* head_dim/2 rope frequencies */
    void *arena;
    uint64_t bytes;
} mc_stage_weights;

typedef struct mc_weights {
    const memra_model *model;
    memra_plan plan;
    uint32_t refs;
    uint64_t bytes;
    mc_stage_weights stages[MEMRA_MAX_STAGES][MEMRA_MAX_RANKS];
    struct mc_weights *next;
} mc_weights;

static pthread_mutex_t mc_weights_lock = PTHREAD_MUTEX_INITIALIZER;
static mc_weights *mc_weights_list;

static bool mc_type_ok(uint32_t t) {
    return t == MEMRA_TYPE_F32 || t == MEMRA_TYPE_F16 || t == MEMRA_TYPE_BF16 || t == MEMRA_TYPE_Q8_0;
}

static memra_status mc_check_matrix(const memra_weight *w, memra_error *err) {
    if (!w->data)
        return memra_fail(err, MEMRA_E_FORMAT, "cuda: a required tensor is missing");
    if (!mc_type_ok(w->type))
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cuda: tensor '%s' has type %s, for which the cuda backend has no kernel (F32, F16, BF16, "
                          "Q8_0 only)",
                          w->name ? w->name : "?", memra_tensor_type_name(w->type));
    if (w->type == MEMRA_TYPE_Q8_0 && w->cols % MEMRA_Q8_0_BLOCK != 0)
        return memra_fail(err, MEMRA_E_FORMAT, "cuda: tensor '%s' is Q8_0 with %llu columns, not a multiple of 32",
                          w->name ? w->name : "?", (unsigned long long)w->cols);
    if (w->rows > 0xffffffffull / 2 || w->cols > 0x7fffffffull)
        return memra_fail(err, MEMRA_E_RANGE, "cuda: tensor '%s' is too large (%llu x %llu)", w->name ? w->name : "?",
                          (unsigned long long)w->rows, (unsigned long long)w->cols);
    return MEMRA_OK;
}

/* One element of a host weight, decoded (vectors: norms and biases). */
static float mc_host_elem(const memra_weight *w, uint64_t i) {
    const uint8_t *p = (const uint8_t *)w->data;
    uint16_t h;
    switch (w->type) {
    case MEMRA_TYPE_F32: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    case MEMRA_TYPE_F16: memcpy(&h, p + 2 * i, 2); return memra_f16_to_f32(h);
    case MEMRA_TYPE_BF16: memcpy(&h, p + 2 * i, 2); return memra_bf16_to_f32(h);
    default: {
        const uint8_t *blk = p + (i / 32) * MEMRA_Q8_0_BLOCK_BYTES;
        memcpy(&h, blk, 2);
        return (float)(int8_t)blk[2 + i % 32] * memra_f16_to_f32(h);
    }
    }
}

/* A bump allocator over one device arena (sizes rounded to 256 bytes). */
typedef struct mc_bump {
    char *base;
    uint64_t used, size;
} mc_bump;

static void *mc_take(mc_bump *b, uint64_t bytes) {
    void *p = b->base ? b->base + b->used : NULL;
    b->used += (bytes + 255) & ~(uint64_t)255;
    return p;
}

/* A source of an upload: rows [r0, r0 + nr) of a weight (nr 0: every row). */
typedef struct mc_src {
    const memra_weight *w;
    uint64_t r0, nr;
} mc_src;

/* Lays out the rows of `n` sources stacked (in order; interleave: rows alternate between the two
 * sources), columns [c0, c0 + nc) of each (nc 0: every column; a tensor-parallel rank's slice), in
 * the upload layout, and copies them to the device. With a sizing bump (base NULL) only counts. */
static memra_status mc_put_matrix(mc_bump *bump, const mc_src *srcs, uint32_t n, uint64_t c0, uint64_t nc,
                                  bool interleave, mc_matrix *out, memra_error *err) {
    const memra_weight *src[3];
    uint64_t r0[3], nr[3];
    if (n > 3)
        return memra_fail(err, MEMRA_E_INTERNAL, "cuda: %u matrices fused", n);
    for (uint32_t i = 0; i < n; i++) {
        src[i] = srcs[i].w;
        memra_status st = mc_check_matrix(src[i], err);
        if (st)
            return st;
        r0[i] = srcs[i].r0;
        nr[i] = srcs[i].nr ? srcs[i].nr : src[i]->rows - r0[i];
        if (r0[i] > src[i]->rows || nr[i] > src[i]->rows - r0[i])
            return memra_fail(err, MEMRA_E_INTERNAL, "cuda: rows [%llu, +%llu) of '%s' out of range",
                              (unsigned long long)r0[i], (unsigned long long)nr[i], src[i]->name);
    }
    uint32_t type = src[0]->type;
    const uint64_t full_cols = src[0]->cols;
    if (nc == 0)
        nc = full_cols - c0;
    if (c0 > full_cols || nc > full_cols - c0)
        return memra_fail(err, MEMRA_E_INTERNAL, "cuda: columns [%llu, +%llu) of '%s' out of range",
                          (unsigned long long)c0, (unsigned long long)nc, src[0]->name);
    if (type == MEMRA_TYPE_Q8_0 && (c0 % 32 || nc % 32))
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cuda: '%s' is Q8_0 and a rank's columns [%llu, %llu) do not fall on blocks of 32; choose a "
                          "tp that does",
                          src[0]->name, (unsigned long long)c0, (unsigned long long)(c0 + nc));
    const uint64_t cols = nc;
    uint64_t rows = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (src[i]->type != type || src[i]->cols != full_cols)
            return memra_fail(err, MEMRA_E_UNSUPPORTED,
                              "cuda: tensors '%s' and '%s' are fused on upload but differ in type or columns",
                              src[0]->name, src[i]->name);
        rows += nr[i];
    }
    if (interleave && (n != 2 || nr[0] != nr[1]))
        return memra_fail(err, MEMRA_E_INTERNAL, "cuda: gate/up interleave needs two equal matrices");
    const uint32_t eb = mc_type_elem_bytes(type);
    const uint64_t stride = mc_matrix_bytes(type, 1, cols) - (type == MEMRA_TYPE_Q8_0 ? cols / 32 * 2 : 0);
    const uint64_t stride_elems = stride / eb;
    const uint64_t q_bytes = rows * stride, s_bytes = type == MEMRA_TYPE_Q8_0 ? rows * (cols / 32) * 2 : 0;
    out->type = type;
    out->rows = (uint32_t)rows;
    out->cols = (uint32_t)cols;
    out->stride = (uint32_t)stride_elems;
    out->data = mc_take(bump, q_bytes);
    out->scales = s_bytes ? (uint16_t *)mc_take(bump, s_bytes) : NULL;
    if (!bump->base)
        return MEMRA_OK;

    uint8_t *host = (uint8_t *)calloc(1, q_bytes + s_bytes);
    if (!host)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: no host memory to stage %llu bytes of '%s'",
                          (unsigned long long)(q_bytes + s_bytes), src[0]->name);
    uint8_t *hs = host + q_bytes;
    uint64_t r = 0;
    const uint64_t src_row_bytes = type == MEMRA_TYPE_Q8_0 ? full_cols / 32 * MEMRA_Q8_0_BLOCK_BYTES : full_cols * eb;
    const uint64_t col_off = type == MEMRA_TYPE_Q8_0 ? c0 / 32 * MEMRA_Q8_0_BLOCK_BYTES : c0 * eb;
    for (uint64_t i = 0; i < rows; i++, r++) {
        const memra_weight *w;
        uint64_t sr;
        if (interleave) {
            w = src[i & 1];
            sr = r0[i & 1] + i / 2;
        } else {
            uint32_t k = 0;
            sr = i;
            while (sr >= nr[k])
                sr -= nr[k++];
            w = src[k];
            sr += r0[k];
        }
        const uint8_t *sp = (const uint8_t *)w->data + sr * src_row_bytes + col_off;
        uint8_t *dp = host + r * stride;
        if (type != MEMRA_TYPE_Q8_0) {
            memcpy(dp, sp, cols * eb);
            continue;
        }
        for (uint64_t bk = 0; bk < cols / 32; bk++) {
            const uint8_t *blk = sp + bk * MEMRA_Q8_0_BLOCK_BYTES;
            memcpy(hs + (r * (cols / 32) + bk) * 2, blk, 2);
            memcpy(dp + bk * 32, blk + 2, 32);
        }
    }
    cudaError_t e = cudaMemcpy(out->data, host, q_bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess && s_bytes)
        e = cudaMemcpy(out->scales, hs, s_bytes, cudaMemcpyHostToDevice);
    free(host);
    if (e != cudaSuccess)
        return mc_cuda_fail(err, e, "uploading a weight matrix (cudaMemcpy)");
    return MEMRA_OK;
}

/* Decodes vectors (norms, biases) to f32, stacked, and copies them to the device: elements
 * [r0, r0 + nr) of each (nr 0: all). NULL entries are skipped; all NULL gives NULL. */
static memra_status mc_put_vector(mc_bump *bump, const mc_src *srcs, uint32_t n, float **out, memra_error *err) {
    uint64_t len = 0;
    for (uint32_t i = 0; i < n; i++)
        if (srcs[i].w && srcs[i].w->data) {
            const memra_weight *w = srcs[i].w;
            if (!mc_type_ok(w->type))
                return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: tensor '%s' has type %s, which has no kernel",
                                  w->name, memra_tensor_type_name(w->type));
            const uint64_t all = w->rows * w->cols, k = srcs[i].nr ? srcs[i].nr : all - srcs[i].r0;
            if (srcs[i].r0 > all || k > all - srcs[i].r0)
                return memra_fail(err, MEMRA_E_INTERNAL, "cuda: elements of '%s' out of range", w->name);
            len += k;
        }
    *out = NULL;
    if (len == 0)
        return MEMRA_OK;
    *out = (float *)mc_take(bump, len * 4);
    if (!bump->base)
        return MEMRA_OK;
    float *host = (float *)malloc(len * 4);
    if (!host)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: no host memory for a vector");
    uint64_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (srcs[i].w && srcs[i].w->data) {
            const uint64_t all = srcs[i].w->rows * srcs[i].w->cols;
            const uint64_t end = srcs[i].nr ? srcs[i].r0 + srcs[i].nr : all;
            for (uint64_t j = srcs[i].r0; j < end; j++)
                host[k++] = mc_host_elem(srcs[i].w, j);
        }
    cudaError_t e = cudaMemcpy(*out, host, len * 4, cudaMemcpyHostToDevice);
    free(host);
    return e == cudaSuccess ? MEMRA_OK : mc_cuda_fail(err, e, "uploading a vector (cudaMemcpy)");
}

/* Rows [v0, v1) of the vocabulary that rank r of R holds of the head. */
static void mc_vocab_range(uint32_t V, uint32_t R, uint32_t r, uint32_t *v0, uint32_t *v1) {
    *v0 = (uint32_t)((uint64_t)V * r / R);
    *v1 = (uint32_t)((uint64_t)V * (r + 1) / R);
}

/* Lays out (or, with a real arena, uploads) one rank's weights of one stage: the heads
 * [head_begin, head_end) of q (rows of wq and its bias, columns of wo), kv heads [kv_head_begin,
 * kv_head_end) of k and v, ffn rows [ff_begin, ff_end) of gate and up (columns of down); norms
 * whole. Rank 0 of stage 0 holds the embedding; every rank of the last stage the final norm and
 * its rows of the head. With one rank every slice is whole. */
static memra_status mc_stage_layout(const memra_model *m, const memra_plan *plan, uint32_t si, uint32_t ri,
                                    mc_bump *bump, mc_stage_weights *sw, memra_error *err) {
    const memra_stage_plan *sp = &plan->stages[si];
    const memra_rank_plan *rp = &sp->ranks[ri];
    const bool whole = sp->n_ranks <= 1;
    const uint64_t hd = m->head_dim, hdv = m->head_dim_v;
    const uint64_t hb = whole ? 0 : rp->head_begin, he = whole ? m->n_head : rp->head_end;
    const uint64_t kb = whole ? 0 : rp->kv_head_begin, ke = whole ? m->n_head_kv : rp->kv_head_end;
    const uint64_t fb = whole ? 0 : rp->ff_begin, fe = whole ? m->n_ff : rp->ff_end;
    memra_status st;
    const uint32_t nl = sp->layer_end - sp->layer_begin;
    for (uint32_t i = 0; i < nl; i++) {
        const memra_layer *L = &m->layers[sp->layer_begin + i];
        mc_layer *dl = &sw->layers[i];
        const mc_src qkv[3] = {
            {&L->wq, hb * hd, (he - hb) * hd}, {&L->wk, kb * hd, (ke - kb) * hd}, {&L->wv, kb * hdv, (ke - kb) * hdv}};
        const mc_src bias[3] = {
            {&L->bq, hb * hd, (he - hb) * hd}, {&L->bk, kb * hd, (ke - kb) * hd}, {&L->bv, kb * hdv, (ke - kb) * hdv}};
        const mc_src gu[2] = {{&L->w_gate, fb, fe - fb}, {&L->w_up, fb, fe - fb}};
        if ((st = mc_put_matrix(bump, qkv, 3, 0, 0, false, &dl->wqkv, err)))
            return st;
        const bool any_bias = L->bq.data || L->bk.data || L->bv.data;
        for (int k = 0; k < 3 && any_bias; k++)
            if (!bias[k].w->data || bias[k].w->rows * bias[k].w->cols != qkv[k].w->rows)
                return memra_fail(err, MEMRA_E_FORMAT,
                                  "cuda: layer %u: q, k and v biases must be all present with one value per row "
                                  "('%s' is %s)",
                                  sp->layer_begin + i, qkv[k].w->name ? qkv[k].w->name : "?",
                                  bias[k].w->data ? "of the wrong length" : "missing its bias");
        if ((st = mc_put_vector(bump, bias, 3, &dl->bqkv, err)))
            return st;
        mc_src v1 = {&L->wo, 0, 0};
        if ((st = mc_put_matrix(bump, &v1, 1, hb * hdv, (he - hb) * hdv, false, &dl->wo, err)))
            return st;
        if ((st = mc_put_matrix(bump, gu, 2, 0, 0, true, &dl->wgu, err)))
            return st;
        v1 = (mc_src){&L->w_down, 0, 0};
        if ((st = mc_put_matrix(bump, &v1, 1, fb, fe - fb, false, &dl->wdown, err)))
            return st;
        v1 = (mc_src){&L->attn_norm, 0, 0};
        if ((st = mc_put_vector(bump, &v1, 1, &dl->attn_norm, err)))
            return st;
        v1 = (mc_src){&L->ffn_norm, 0, 0};
        if ((st = mc_put_vector(bump, &v1, 1, &dl->ffn_norm, err)))
            return st;
        v1 = (mc_src){&L->q_norm, 0, 0};
        if ((st = mc_put_vector(bump, &v1, 1, &dl->q_norm, err)))
            return st;
        v1 = (mc_src){&L->k_norm, 0, 0};
        if ((st = mc_put_vector(bump, &v1, 1, &dl->k_norm, err)))
            return st;
    }
    mc_src v1 = {&m->tok_embd, 0, 0};
    if (si == 0 && ri == 0 && (st = mc_put_matrix(bump, &v1, 1, 0, 0, false, &sw->embd, err)))
        return st;
    /* The head: whole on rank 0 with one rank; with several, split by vocabulary (rank r holds
     * rows [v0, v1); each computes its logits, and rank 0 gathers them). */
    if (si == plan->n_stages - 1 && (ri == 0 || !whole)) {
        uint32_t v0, v1r;
        mc_vocab_range(m->n_vocab, whole ? 1 : sp->n_ranks, whole ? 0 : ri, &v0, &v1r);
        v1 = (mc_src){&m->output_norm, 0, 0};
        if ((st = mc_put_vector(bump, &v1, 1, &sw->out_norm, err)))
            return st;
        if (m->tied_output && si == 0 && ri == 0) {
            sw->head = sw->embd; /* one upload serves both: rank 0's rows are its first */
            sw->head.rows = v1r - v0;
        } else {
            v1 = (mc_src){m->tied_output ? &m->tok_embd : &m->output, v0, v1r - v0};
            if ((st = mc_put_matrix(bump, &v1, 1, 0, 0, false, &sw->head, err)))
                return st;
        }
    }
    uint32_t half = m->head_dim / 2;
    sw->freqs = (float *)mc_take(bump, (uint64_t)half * 4);
    if (bump->base) {
        float *f = (float *)malloc((size_t)half * 4 + 4);
        if (!f)
            return memra_fail(err, MEMRA_E_NOMEM, "cuda: no host memory for rope frequencies");
        for (uint32_t i = 0; i < half; i++)
            f[i] = memra_model_rope_freq(m, i);
        cudaError_t e = cudaMemcpy(sw->freqs, f, (size_t)half * 4, cudaMemcpyHostToDevice);
        free(f);
        if (e != cudaSuccess)
            return mc_cuda_fail(err, e, "uploading rope frequencies");
    }
    return MEMRA_OK;
}

static void mc_weights_free(mc_weights *w) {
    for (uint32_t s = 0; s < w->plan.n_stages; s++)
        for (uint32_t r = 0; r < MEMRA_MAX_RANKS; r++) {
            mc_stage_weights *sw = &w->stages[s][r];
            if (sw->arena) {
                cudaSetDevice(sw->device);
                cudaFree(sw->arena);
            }
            free(sw->layers);
        }
    free(w);
}

static const char *mc_device_label(int32_t dev, char *buf, size_t n) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) == cudaSuccess)
        snprintf(buf, n, "device %d (%s)", dev, p.name);
    else
        snprintf(buf, n, "device %d", dev);
    return buf;
}

/* The weights of (model, plan): shared when another backend of this family already uploaded
 * them, else sized, checked against free device memory, and uploaded stage by stage. */
static memra_status mc_weights_acquire(const memra_model *m, const memra_plan *plan, mc_weights **out,
                                       memra_error *err) {
    memra_status st = MEMRA_OK;
    pthread_mutex_lock(&mc_weights_lock);
    for (mc_weights *w = mc_weights_list; w; w = w->next)
        if (w->model == m && memcmp(&w->plan, plan, sizeof *plan) == 0) {
            w->refs++;
            *out = w;
            pthread_mutex_unlock(&mc_weights_lock);
            return MEMRA_OK;
        }
    mc_weights *w = (mc_weights *)calloc(1, sizeof *w);
    if (!w) {
        pthread_mutex_unlock(&mc_weights_lock);
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
    }
    w->model = m;
    w->plan = *plan;
    w->refs = 1;
    for (uint32_t si = 0; si < plan->n_stages * MEMRA_MAX_RANKS && !st; si++) {
        const uint32_t s = si / MEMRA_MAX_RANKS, r = si % MEMRA_MAX_RANKS;
        const memra_stage_plan *sp = &plan->stages[s];
        if (r >= (sp->n_ranks ? sp->n_ranks : 1))
            continue;
        mc_stage_weights *sw = &w->stages[s][r];
        sw->device = sp->n_ranks > 1 ? sp->ranks[r].device : sp->device;
        sw->layer_begin = sp->layer_begin;
        sw->layer_end = sp->layer_end;
        sw->layers = (mc_layer *)calloc(sp->layer_end - sp->layer_begin + 1, sizeof(mc_layer));
        if (!sw->layers) {
            st = memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
            break;
        }
        mc_bump size = {NULL, 0, 0};
        if ((st = mc_stage_layout(m, plan, s, r, &size, sw, err)))
            break;
        cudaError_t e = cudaSetDevice(sw->device);
        size_t free_b = 0, total_b = 0;
        if (e == cudaSuccess)
            e = cudaMemGetInfo(&free_b, &total_b);
        if (e != cudaSuccess) {
            st = mc_cuda_fail(err, e, "cudaSetDevice/cudaMemGetInfo before the weight upload");
            break;
        }
        char label[300];
        if (size.used > free_b) {
            st = memra_fail(err, MEMRA_E_NOMEM,
                            "cuda: stage %u rank %u's weights need %.1f MiB on %s, but only %.1f MiB of %.1f MiB are "
                            "free",
                            s, r, size.used / 1048576.0, mc_device_label(sw->device, label, sizeof label),
                            free_b / 1048576.0, total_b / 1048576.0);
            break;
        }
        if ((e = cudaMalloc(&sw->arena, size.used)) != cudaSuccess) {
            st = memra_fail(err, MEMRA_E_NOMEM, "cuda: cudaMalloc of %.1f MiB for stage %u's weights on %s: %s",
                            size.used / 1048576.0, s, mc_device_label(sw->device, label, sizeof label),
                            cudaGetErrorString(e));
            sw->arena = NULL;
            break;
        }
        mc_bump real = {(char *)sw->arena, 0, size.used};
        if ((st = mc_stage_layout(m, plan, s, r, &real, sw, err)))
            break;
        /* cudaMemcpy from pageable memory may return before its DMA lands, and the states'
         * non-blocking streams do not wait for the legacy stream: finish the upload here. */
        if ((e = cudaDeviceSynchronize()) != cudaSuccess) {
            st = mc_cuda_fail(err, e, "cudaDeviceSynchronize after the weight upload");
            break;
        }
        sw->bytes = size.used;
        w->bytes += size.used;
    }
    if (st) {
        mc_weights_free(w);
        pthread_mutex_unlock(&mc_weights_lock);
        return st;
    }
    w->next = mc_weights_list;
    mc_weights_list = w;
    *out = w;
    pthread_mutex_unlock(&mc_weights_lock);
    return MEMRA_OK;
}

static void mc_weights_release(mc_weights *w) {
    pthread_mutex_lock(&mc_weights_lock);
    if (--w->refs == 0) {
        for (mc_weights **pp = &mc_weights_list; *pp; pp = &(*pp)->next)
            if (*pp == w) {
                *pp = w->next;
                break;
            }
        mc_weights_free(w);
    }
    pthread_mutex_unlock(&mc_weights_lock);
}

/* ---- backend and states ------------------------------------------------------------------- */

/* A refusal cell armed through memra.tp, handed to a state's communicator just before the step
 * that reaches its position (so it fires in the state that runs that step, and in no other). */
typedef struct mc_tp_cell {
    uint32_t stage, rank, layer, which, position;
    int32_t word;
    bool handed;
} mc_tp_cell;

struct memra_backend {
    const memra_host *host;
    const memra_model *m;
    memra_plan plan;
    mc_weights *w;
    uint64_t cache_bytes, scratch_bytes; /* of live states */
    mc_config cfg;                       /* the arm's keys: kernel choices and launch settings */
    /* Tensor parallelism (some stage has more than one rank): the collective, whose communicators
     * are per state and stage (operations of two states never interleave on one communicator). */
    bool tp;
    char coll_name[MEMRA_OPT_VALUE_MAX]; /* the collective= key: plugin name */
    memra_options coll_opts;             /* the collective's own keys (mode, max_count) */
    const memra_collective_vtable *coll;
    uint32_t step_timeout_ms; /* step_timeout_ms=: the watchdog of a step's wait (tp) */
    uint32_t stall_us;        /* stall_us=: fault injection, stages > 0 sleep after taking the hidden */
    pthread_mutex_t lock;     /* the list of live states, the cells, retired epochs */
    memra_state *states;      /* live states */
    uint64_t *retired;        /* [stage][rank][2 * n_layer]: epochs of freed states' communicators */
    mc_tp_cell *cells;
    uint32_t n_cells, cap_cells;
};

typedef struct mc_stage_state {
    int32_t device;
    cudaStream_t stream;
    cudaEvent_t done;     /* rank 0: this stage's hidden for the current step is ready */
    cudaEvent_t consumed; /* this rank has copied its input hidden for the current step */
    cudaEvent_t ready;    /* tp, stage 0 rank 0: the embedded token (xin) is ready */
    cudaEvent_t fin;      /* this rank's part of the step, to its end (the joins) */
    void *arena;
    float *x, *qkv, *att_partial, *att_out, *gu; /* the norms are fused into the GEMVs */
    float *xin;                                  /* tp, stage 0 rank 0: the embedding, copied by every rank */
    float *k_cache, *v_cache;                    /* [layer][n_kv][capacity][hd] (the rank's kv heads) */
    int32_t *pos;
    int32_t *status;             /* tp: [local layer][which] the collective's statuses of the step */
    int32_t *verdict;            /* checked: this rank's verdict of the step (0: committed) */
    int32_t *vin;                /* checked, stage > 0: the previous stage's verdict of this step, copied with
                                  * the hidden (a live read could see the next step's) */
    int32_t *poison;             /* checked: the first failed verdict of the state; 0 until then (restore clears) */
    int32_t *peer_last;          /* tp: [rank] the other ranks' statuses of the step's last all-reduce, copied
                                  * after it: a commit needs every rank's success, not only its own */
    cudaEvent_t lastop;          /* tp: this rank's last all-reduce of the step is done (its status written) */
    int32_t *dpos;               /* the host's position, for the cache digest */
    float *xc, *lg;              /* tp, last stage: rank 0's committed hidden; the step's logits before publishing
                     * (rank 0: all of them, gathered; rank r > 0: its rows of the vocabulary) */
    uint32_t v0, v1;             /* the rank's rows of the vocabulary (of the head, on the last stage) */
    cudaEvent_t head_ev;         /* tp, last stage, rank r > 0: its logits are in rank 0's lg */
    cudaEvent_t pub_ev;          /* tp, last stage, rank 0: lg read (sampled, published); ranks r > 0 wait
                                  * for it before gathering the next step's rows into lg */
    mc_verdict *ring;            /* tp: host-mapped verdicts of this rank's checked commits */
    unsigned long long *hashes;  /* digest scratch: [2][layers][n_kv][chunks] */
    uint32_t n_head, n_kv, n_ff; /* the rank's widths */
    /* stage 0, rank 0 */
    int32_t *in_token;
    /* last stage, rank 0 */
    float *logits;
    int32_t *sampled;
    mc_sample_result *result;
    mc_sampler_scratch sampler;
    cudaEvent_t sampled_ev;
} mc_stage_state;

typedef struct mc_slot {
    cudaEvent_t ev;             /* on the last stage's device: recorded after an eager step */
    cudaEvent_t ev_first;       /* on stage 0's device: recorded after a graph launch (stage 0's stream) */
    cudaEvent_t pending;        /* the one recorded for the step in this slot */
    float *host_logits;         /* pinned, n_vocab */
    mc_sample_result *host_res; /* pinned */
    int32_t *host_token;        /* pinned */
    bool want_logits, sampled;
    uint32_t position;
} mc_slot;

struct memra_state {
    uint32_t capacity, max_inflight, n_stages;
    uint32_t position;       /* host mirror: positions of steps begun */
    uint32_t inflight, head; /* slots begun and not ended; the oldest's index */
    bool has_device_token;   /* a previous step sampled (the token lives on the device) */
    bool sampled_ev_live;    /* the last stage's sampled_ev was last recorded eagerly (not in a capture) */
    bool quarantined;
    char why[MEMRA_ERROR_MSG_MAX];
    memra_state_stats stats;
    uint64_t cache_bytes, scratch_bytes;
    uint32_t n_ranks[MEMRA_MAX_STAGES];
    memra_collective *comm[MEMRA_MAX_STAGES]; /* tp: one communicator per stage with ranks */
    void *rings;                              /* tp: host-mapped verdict rings */
    void (*on_abort)(void *);                 /* called before the watchdog aborts the communicators */
    void *on_abort_arg;
    memra_state *next;                        /* the backend's live states */
    mc_slot slots[MC_MAX_INFLIGHT];
    void *pinned;
    mc_stage_state st[MEMRA_MAX_STAGES][MEMRA_MAX_RANKS]; /* [stage][rank] */
};

/* The arm's keys (MEMRA_CUDA_OPTION_SPECS) read into a configuration: a malformed value is
 * MEMRA_E_INVALID naming the key and the values it takes. */
static memra_status mc_read_options(const memra_options *opts, mc_config *c, memra_error *err) {
    *c = mc_config_default;
    memra_status st = memra_options_u32(opts, "pdl", 1, 0, 1, &c->pdl, err);
    if (st)
        return st;
    if ((st = memra_options_u32(opts, "trigger", MC_TRIGGER_DEFAULT, 0, MC_TRIGGER_ALL, &c->trigger, err)))
        return st;
    static const char *const choices[] = {"gemv", "q8", "attention"};
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++) {
        const char *v = memra_options_get(opts, choices[i]);
        const char *allowed = v ? mc_config_choice(c, choices[i], v) : NULL;
        if (allowed)
            return memra_fail(err, MEMRA_E_INVALID, "%s=%s: expected one of %s", choices[i], v, allowed);
    }
    uint32_t step_timeout = 0, stall = 0;
    if ((st = memra_options_u32(opts, "step_timeout_ms", 30000, 100, 3600000, &step_timeout, err)))
        return st;
    if ((st = memra_options_u32(opts, "stall_us", 0, 0, 1000000, &stall, err)))
        return st;
    const char *coll = memra_options_get(opts, "collective");
    if (coll && (!coll[0] || coll[0] == ':'))
        return memra_fail(err, MEMRA_E_INVALID,
                          "collective=%s: expected a collective plugin's name, e.g. oneshot, nccl or nccl:allgather",
                          coll);
    return MEMRA_OK;
}

memra_status mc_resolve_options(const memra_host *host, const memra_options *opts, memra_options *resolved,
                                memra_error *err) {
    mc_config c;
    memra_status st = mc_read_options(opts, &c, err);
    if (st)
        return st;
    *resolved = *opts;
    char buf[16];
    snprintf(buf, sizeof buf, "%u", c.pdl);
    if ((st = memra_options_set(resolved, "pdl", buf, err)))
        return st;
    snprintf(buf, sizeof buf, "%u", c.trigger);
    if ((st = memra_options_set(resolved, "trigger", buf, err)))
        return st;
    static const char *const choices[] = {"gemv", "q8", "attention"};
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++)
        if ((st = memra_options_set(resolved, choices[i], mc_config_choice_name(&c, choices[i]), err)))
            return st;
    const char *tp = memra_options_get(opts, "tp"); /* the tensor-parallel keys resolve where they are used */
    if (tp && strcmp(tp, "1") != 0) {
        if (!memra_options_get(opts, "collective") && (st = memra_options_set(resolved, "collective", "oneshot", err)))
            return st;
        if (!memra_options_get(opts, "step_timeout_ms") &&
            (st = memra_options_set(resolved, "step_timeout_ms", "30000", err)))
            return st;
    }
    return MEMRA_OK;
}

memra_status mc_device_count(const memra_host *host, const memra_options *opts, uint32_t *out, memra_error *err) {
    mc_config c; /* the arm's options are checked before any device is asked for */
    memra_status st = mc_read_options(opts, &c, err);
    if (st)
        return st;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return memra_fail(err, MEMRA_E_DEVICE,
                          "no NVIDIA GPU found (or its driver is not loaded): cudaGetDeviceCount: %s",
                          cudaGetErrorString(e));
    if (n <= 0)
        return memra_fail(err, MEMRA_E_DEVICE,
                          "no NVIDIA GPU found (or its driver is not loaded): cudaGetDeviceCount found none");
    *out = (uint32_t)n;
    return MEMRA_OK;
}

static int32_t mc_rank_device(const memra_stage_plan *sp, uint32_t r) {
    return sp->n_ranks > 1 ? sp->ranks[r].device : sp->device;
}

/* Peer access from device `to` to memory of device `from`, where the two differ and the pair can. */
static memra_status mc_enable_peer(int to, int from, memra_error *err) {
    int can = 0;
    if (to == from || cudaDeviceCanAccessPeer(&can, to, from) != cudaSuccess || !can)
        return MEMRA_OK;
    cudaError_t e = cudaSetDevice(to);
    if (e != cudaSuccess)
        return mc_cuda_fail(err, e, "cudaSetDevice (peer access)");
    e = cudaDeviceEnablePeerAccess(from, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled)
        cudaGetLastError();
    else if (e != cudaSuccess)
        return mc_cuda_fail(err, e, "cudaDeviceEnablePeerAccess");
    return MEMRA_OK;
}

/* Tensor parallelism: the ranks' slices (whole kv groups, in order), the collective loaded. */
static memra_status mc_open_tp(memra_backend *b, const memra_options *opts, uint32_t n_dev, memra_error *err) {
    const memra_model *m = b->m;
    for (uint32_t s = 0; s < b->plan.n_stages; s++) {
        const memra_stage_plan *sp = &b->plan.stages[s];
        if (sp->n_ranks == 0 || sp->n_ranks > MEMRA_MAX_RANKS)
            return memra_fail(err, MEMRA_E_INVALID, "cuda: stage %u has %u ranks (expected 1..%u)", s, sp->n_ranks,
                              (unsigned)MEMRA_MAX_RANKS);
        if (sp->n_ranks == 1)
            continue;
        b->tp = true;
        uint32_t h = 0, k = 0, f = 0;
        for (uint32_t r = 0; r < sp->n_ranks; r++) {
            const memra_rank_plan *rp = &sp->ranks[r];
            if (rp->device < 0 || (uint32_t)rp->device >= n_dev)
                return memra_fail(err, MEMRA_E_INVALID,
                                  "cuda: rank %u of stage %u is on device %d, but there are %u "
                                  "devices",
                                  r, s, rp->device, n_dev);
            const uint32_t nh = rp->head_end - rp->head_begin, nk = rp->kv_head_end - rp->kv_head_begin;
            if (rp->head_begin != h || rp->kv_head_begin != k || rp->ff_begin != f || nh == 0 || nk == 0 ||
                nh * m->n_head_kv != nk * m->n_head || rp->ff_end <= rp->ff_begin)
                return memra_fail(err, MEMRA_E_INVALID,
                                  "cuda: rank %u of stage %u holds heads [%u, %u), kv heads [%u, %u) and ffn rows "
                                  "[%u, %u); expected whole kv groups and rows in rank order",
                                  r, s, rp->head_begin, rp->head_end, rp->kv_head_begin, rp->kv_head_end, rp->ff_begin,
                                  rp->ff_end);
            h = rp->head_end;
            k = rp->kv_head_end;
            f = rp->ff_end;
        }
        if (h != m->n_head || k != m->n_head_kv || f != m->n_ff)
            return memra_fail(err, MEMRA_E_INVALID,
                              "cuda: the ranks of stage %u hold %u of %u heads and %u of %u ffn "
                              "rows",
                              s, h, m->n_head, f, m->n_ff);
    }
    if (!b->tp)
        return MEMRA_OK;
    const char *coll = memra_options_get(opts, "collective");
    memra_status st =
        memra_collective_value_parse(coll ? coll : "oneshot", b->coll_name, sizeof b->coll_name, &b->coll_opts, err);
    if (st)
        return st;
    if ((st = memra_options_u32(opts, "step_timeout_ms", 30000, 100, 3600000, &b->step_timeout_ms, err)))
        return st;
    const memra_plugin *p = NULL;
    if ((st = b->host->find_plugin(b->coll_name, MEMRA_PLUGIN_COLLECTIVE, &p, err))) {
        memra_error_prefix(err, "cuda: tensor parallelism needs the collective '%.60s' (collective=)", b->coll_name);
        return st;
    }
    const memra_collective_vtable *vt = p ? p->collective : NULL;
    if (!MEMRA_HAS_MEMBER(vt, memra_collective_vtable, abort) || !vt->create || !vt->destroy || !vt->all_reduce_sum_f32)
        return memra_fail(err, MEMRA_E_PLUGIN, "cuda: the collective '%.60s' has no usable all-reduce", b->coll_name);
    b->coll = vt;
    /* Buffers sized for this model's vectors up front (the collective's own keys, where it has
     * them: oneshot's max_count, nccl's prealloc_count), so nothing grows inside a capture. */
    for (uint32_t i = 0; i < vt->n_options; i++)
        if (vt->options &&
            (strcmp(vt->options[i].key, "max_count") == 0 || strcmp(vt->options[i].key, "prealloc_count") == 0)) {
            char buf[24];
            snprintf(buf, sizeof buf, "%u", m->n_embd);
            if ((st = memra_options_set(&b->coll_opts, vt->options[i].key, buf, err)))
                return st;
        }
    const size_t n = (size_t)b->plan.n_stages * MEMRA_MAX_RANKS * 2 * m->n_layer;
    b->retired = (uint64_t *)calloc(n, sizeof *b->retired);
    if (!b->retired)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
    return MEMRA_OK;
}

/* With no stage of more than one rank, the tensor-parallel keys change nothing: a collective=
 * given is checked as it would be with ranks (its value, the plugin, the plugin's own keys),
 * then refused, as step_timeout_ms= is, so two arms that differ only by such a key never look
 * like two configurations. */
static memra_status mc_check_idle_tp_keys(const memra_host *host, const memra_plan *plan, const memra_options *opts,
                                          memra_error *err) {
    for (uint32_t s = 0; s < plan->n_stages; s++)
        if (plan->stages[s].n_ranks > 1)
            return MEMRA_OK;
    const char *coll = memra_options_get(opts, "collective");
    if (coll) {
        char name[MEMRA_OPT_VALUE_MAX];
        memra_options own = {};
        memra_status st = memra_collective_value_parse(coll, name, sizeof name, &own, err);
        if (st) {
            memra_error_prefix(err, "cuda");
            return st;
        }
        const memra_plugin *p = NULL;
        if ((st = host->find_plugin(name, MEMRA_PLUGIN_COLLECTIVE, &p, err))) {
            memra_error_prefix(err, "cuda: collective=%.100s", coll);
            return st;
        }
        const memra_collective_vtable *vt = p ? p->collective : NULL;
        if (vt && own.n) {
            const memra_option_spec *lists[1] = {vt->options};
            const uint32_t counts[1] = {vt->options ? vt->n_options : 0};
            if ((st = memra_options_check(&own, lists, counts, 1, coll, err))) {
                memra_error_prefix(err, "cuda: collective=%.100s: the collective '%.60s'", coll, name);
                return st;
            }
        }
    }
    const char *key = coll ? "collective" : memra_options_get(opts, "step_timeout_ms") ? "step_timeout_ms" : NULL;
    if (!key)
        return MEMRA_OK;
    return memra_fail(err, MEMRA_E_INVALID,
                      "cuda: %s=%.100s has no effect: no stage of this arm has more than one rank (tp=1); drop it, or "
                      "give tp=N",
                      key, memra_options_get(opts, key));
}

memra_status mc_open(const memra_host *host, const memra_model *m, const memra_plan *plan, const memra_options *opts,
                     memra_backend **out, memra_error *err) {
    uint32_t n_dev = 0;
    if (m->arch != MEMRA_ARCH_LLAMA && m->arch != MEMRA_ARCH_QWEN2 && m->arch != MEMRA_ARCH_QWEN3)
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cuda: architecture '%s' is not supported by the cuda backend (it runs llama, qwen2 and "
                          "qwen3; the cpu backend runs %s)",
                          m->arch_name ? m->arch_name : "?", m->arch_name ? m->arch_name : "it");
    mc_config cfg;
    memra_status st = mc_read_options(opts, &cfg, err);
    if (st)
        return st;
    if ((st = mc_check_idle_tp_keys(host, plan, opts, err)))
        return st;
    uint32_t stall_us = 0;
    if ((st = memra_options_u32(opts, "stall_us", 0, 0, 1000000, &stall_us, err)))
        return st;
    if (memra_options_get(opts, "stall_us") && plan->n_stages < 2)
        return memra_fail(err, MEMRA_E_INVALID,
                          "cuda: stall_us=%.20s has no effect: this arm has one stage (it delays the stages after the "
                          "first); drop it, or give stages=N",
                          memra_options_get(opts, "stall_us"));
    if ((st = mc_device_count(host, opts, &n_dev, err)))
        return st;
    if (plan->n_stages == 0 || plan->n_stages > MEMRA_MAX_STAGES)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: plan has %u stages", plan->n_stages);
    for (uint32_t s = 0; s < plan->n_stages; s++) {
        const memra_stage_plan *sp = &plan->stages[s];
        if (sp->device < 0 || (uint32_t)sp->device >= n_dev)
            return memra_fail(err, MEMRA_E_INVALID, "cuda: stage %u is placed on device %d, but there are %u devices",
                              s, sp->device, n_dev);
        if (sp->layer_end <= sp->layer_begin || sp->layer_end > m->n_layer)
            return memra_fail(err, MEMRA_E_INVALID, "cuda: stage %u has layers [%u, %u) of %u", s, sp->layer_begin,
                              sp->layer_end, m->n_layer);
    }
    if (m->head_dim % 2 || m->n_head % m->n_head_kv || m->head_dim > 1024)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: head_dim %u / heads %u / kv heads %u not supported",
                          m->head_dim, m->n_head, m->n_head_kv);
    memra_backend *b = (memra_backend *)calloc(1, sizeof *b);
    if (!b)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
    b->host = host;
    b->m = m;
    b->plan = *plan;
    b->cfg = cfg;
    b->stall_us = stall_us;
    pthread_mutex_init(&b->lock, NULL);
    if ((st = mc_open_tp(b, opts, n_dev, err)))
        goto fail;
    /* Peer copies: between the devices of consecutive stages (the hidden hand-off) and within a
     * stage (the embedding and hand-off reach every rank). */
    for (uint32_t s = 0; s < plan->n_stages; s++) {
        const memra_stage_plan *sp = &plan->stages[s];
        for (uint32_t r = 0; r < (sp->n_ranks ? sp->n_ranks : 1); r++) {
            const int to = mc_rank_device(sp, r);
            if ((st = mc_enable_peer(to, s > 0 ? plan->stages[s - 1].device : sp->device, err)))
                goto fail;
        }
    }
    if ((st = mc_weights_acquire(m, plan, &b->w, err)))
        goto fail;
    *out = b;
    return MEMRA_OK;
fail:
    free(b->retired);
    pthread_mutex_destroy(&b->lock);
    free(b);
    return st;
}

void mc_close(memra_backend *b) {
    if (!b)
        return;
    mc_weights_release(b->w);
    free(b->retired);
    free(b->cells);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

static uint32_t mc_ranks(const memra_state *s, uint32_t i) { return s->n_ranks[i]; }

static void mc_state_destroy(memra_state *s) {
    for (uint32_t i = 0; i < s->n_stages; i++)
        for (uint32_t r = 0; r < mc_ranks(s, i); r++) {
            mc_stage_state *ss = &s->st[i][r];
            cudaSetDevice(ss->device);
            if (ss->stream)
                cudaStreamSynchronize(ss->stream);
            cudaEvent_t evs[8] = {ss->done,       ss->consumed, ss->ready,  ss->fin,
                                  ss->sampled_ev, ss->head_ev,  ss->pub_ev, ss->lastop};
            for (int k = 0; k < 8; k++)
                if (evs[k])
                    cudaEventDestroy(evs[k]);
            if (ss->stream)
                cudaStreamDestroy(ss->stream);
            if (ss->arena)
                cudaFree(ss->arena);
        }
    for (uint32_t k = 0; k < MC_MAX_INFLIGHT; k++) {
        if (s->slots[k].ev)
            cudaEventDestroy(s->slots[k].ev);
        if (s->slots[k].ev_first)
            cudaEventDestroy(s->slots[k].ev_first);
    }
    if (s->pinned)
        cudaFreeHost(s->pinned);
    if (s->rings)
        cudaFreeHost(s->rings);
    free(s);
}

/* Carves a rank's buffers (a sizing pass with base NULL counts bytes). */
static void mc_stage_carve(const memra_model *m, uint32_t nl, bool first, bool last, uint32_t rank, bool tp,
                           bool checked, uint32_t capacity, mc_bump *bp, mc_stage_state *ss, uint64_t *cache_bytes) {
    const uint32_t hd = m->head_dim, hdv = m->head_dim_v;
    const uint64_t qkv = (uint64_t)ss->n_head * hd + (uint64_t)ss->n_kv * (hd + hdv);
    ss->x = (float *)mc_take(bp, (uint64_t)m->n_embd * 4);
    ss->qkv = (float *)mc_take(bp, qkv * 4);
    ss->att_partial = (float *)mc_take(bp, mc_att_partial_floats(ss->n_head, hdv, capacity) * 4);
    ss->att_out = (float *)mc_take(bp, (uint64_t)ss->n_head * hdv * 4);
    ss->gu = (float *)mc_take(bp, (uint64_t)ss->n_ff * 4);
    ss->pos = (int32_t *)mc_take(bp, 16);
    uint64_t chunks = (capacity + MC_DIGEST_ROWS - 1) / MC_DIGEST_ROWS;
    ss->hashes = (unsigned long long *)mc_take(bp, 2ull * nl * ss->n_kv * chunks * 8);
    if (tp) {
        ss->status = (int32_t *)mc_take(bp, 2ull * nl * 4);
        ss->peer_last = (int32_t *)mc_take(bp, MEMRA_MAX_RANKS * 4);
    }
    if (checked) {
        ss->verdict = (int32_t *)mc_take(bp, 16);
        ss->vin = (int32_t *)mc_take(bp, 16);
        ss->poison = (int32_t *)mc_take(bp, 16);
    }
    ss->dpos = (int32_t *)mc_take(bp, 16);
    uint64_t before = bp->used;
    ss->k_cache = (float *)mc_take(bp, (uint64_t)nl * ss->n_kv * capacity * hd * 4);
    ss->v_cache = (float *)mc_take(bp, (uint64_t)nl * ss->n_kv * capacity * hdv * 4);
    *cache_bytes += bp->used - before;
    if (first && rank == 0) {
        ss->in_token = (int32_t *)mc_take(bp, 16);
        if (tp)
            ss->xin = (float *)mc_take(bp, (uint64_t)m->n_embd * 4);
    }
    if (last && rank > 0 && tp)
        ss->lg = (float *)mc_take(bp, (uint64_t)(ss->v1 - ss->v0) * 4);
    if (last && rank == 0) {
        ss->logits = (float *)mc_take(bp, (uint64_t)m->n_vocab * 4);
        if (checked) {
            ss->lg = (float *)mc_take(bp, (uint64_t)m->n_vocab * 4);
            ss->xc = (float *)mc_take(bp, (uint64_t)m->n_embd * 4);
        }
        ss->sampled = (int32_t *)mc_take(bp, 16);
        ss->result = (mc_sample_result *)mc_take(bp, sizeof(mc_sample_result));
        void *sc = mc_take(bp, mc_sampler_scratch_bytes(m->n_vocab));
        if (bp->base)
            mc_sampler_scratch_init(&ss->sampler, sc, m->n_vocab);
    }
}

/* One rank's buffers, stream and events. */
static memra_status mc_rank_new(memra_backend *b, memra_state *s, uint32_t i, uint32_t r, memra_error *err) {
    const memra_model *m = b->m;
    const memra_stage_plan *sp = &b->plan.stages[i];
    mc_stage_state *ss = &s->st[i][r];
    const bool tp = sp->n_ranks > 1;
    ss->device = mc_rank_device(sp, r);
    ss->n_head = tp ? sp->ranks[r].head_end - sp->ranks[r].head_begin : m->n_head;
    ss->n_kv = tp ? sp->ranks[r].kv_head_end - sp->ranks[r].kv_head_begin : m->n_head_kv;
    ss->n_ff = tp ? sp->ranks[r].ff_end - sp->ranks[r].ff_begin : m->n_ff;
    mc_vocab_range(m->n_vocab, tp ? sp->n_ranks : 1, tp ? r : 0, &ss->v0, &ss->v1);
    const uint32_t nl = sp->layer_end - sp->layer_begin;
    const bool first = i == 0, last = i == s->n_stages - 1;
    mc_bump size = {NULL, 0, 0};
    uint64_t cache = 0;
    mc_stage_carve(m, nl, first, last, r, tp, b->tp, s->capacity, &size, ss, &cache);
    MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
    size_t free_b = 0, total_b = 0;
    MC_RET(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    if (size.used > free_b) {
        char label[300];
        return memra_fail(err, MEMRA_E_NOMEM,
                          "cuda: a state of %u positions needs %.1f MiB on %s for stage %u rank %u (KV cache %.1f "
                          "MiB), but only %.1f MiB are free",
                          s->capacity, size.used / 1048576.0, mc_device_label(ss->device, label, sizeof label), i, r,
                          cache / 1048576.0, free_b / 1048576.0);
    }
    MC_RET(cudaMalloc(&ss->arena, size.used), "cudaMalloc of a state's buffers");
    {
        mc_bump real = {(char *)ss->arena, 0, size.used};
        cache = 0;
        mc_stage_carve(m, nl, first, last, r, tp, b->tp, s->capacity, &real, ss, &cache);
    }
    s->cache_bytes += cache;
    s->scratch_bytes += size.used - cache;
    if (mc_attention_path(&b->cfg, ss->n_head, ss->n_kv, m->head_dim, m->head_dim_v) != MC_ATT_PATH_UNFUSED)
        MC_RET(mc_attention_fused_prepare(&b->cfg, ss->n_head, ss->n_kv, m->head_dim, m->head_dim_v),
               "setting the fused attention kernel's shared-memory limit");
    MC_RET(mc_gemv_prepare(), "readying the GEMV kernels (multiprocessor count, shared-memory limit)");
    if (b->cfg.trigger != MC_TRIGGER_DEFAULT)
        MC_RET(mc_trigger_prepare(), "readying the trigger mask copies");
    MC_RET(cudaStreamCreateWithFlags(&ss->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    /* Zero on the state's own stream and wait: a plain cudaMemset goes to the legacy default
     * stream, which a cudaStreamNonBlocking stream does not wait for, so the first step's
     * input-token copy (or its kernels) could land before the zeroing and be overwritten. */
    MC_RET(cudaMemsetAsync(ss->arena, 0, size.used, ss->stream), "cudaMemsetAsync of a state's buffers");
    MC_RET(cudaStreamSynchronize(ss->stream), "cudaStreamSynchronize (state zeroing)");
    MC_RET(cudaEventCreateWithFlags(&ss->done, cudaEventDisableTiming), "cudaEventCreate");
    MC_RET(cudaEventCreateWithFlags(&ss->consumed, cudaEventDisableTiming), "cudaEventCreate");
    MC_RET(cudaEventCreateWithFlags(&ss->ready, cudaEventDisableTiming), "cudaEventCreate");
    MC_RET(cudaEventCreateWithFlags(&ss->fin, cudaEventDisableTiming), "cudaEventCreate");
    MC_RET(cudaEventCreateWithFlags(&ss->head_ev, cudaEventDisableTiming), "cudaEventCreate");
    MC_RET(cudaEventCreateWithFlags(&ss->pub_ev, cudaEventDisableTiming), "cudaEventCreate");
    MC_RET(cudaEventCreateWithFlags(&ss->lastop, cudaEventDisableTiming), "cudaEventCreate");
    if (last && r == 0)
        MC_RET(cudaEventCreateWithFlags(&ss->sampled_ev, cudaEventDisableTiming), "cudaEventCreate");
    return MEMRA_OK;
}

/* The state's communicators (one per stage with ranks) and verdict rings. */
static memra_status mc_state_tp(memra_backend *b, memra_state *s, memra_error *err) {
    memra_status st = MEMRA_OK;
    size_t n_rings = 0;
    for (uint32_t i = 0; i < s->n_stages; i++)
        if (mc_ranks(s, i) > 1)
            n_rings += mc_ranks(s, i);
    if (!n_rings)
        return MEMRA_OK;
    MC_TRY(cudaHostAlloc(&s->rings, n_rings * MC_VERDICT_RING * sizeof(mc_verdict),
                         cudaHostAllocMapped | cudaHostAllocPortable),
           "cudaHostAlloc of the commit verdicts");
    memset(s->rings, 0xff, n_rings * MC_VERDICT_RING * sizeof(mc_verdict)); /* position -1: none yet */
    {
        mc_verdict *ring = (mc_verdict *)s->rings;
        for (uint32_t i = 0; i < s->n_stages; i++) {
            if (mc_ranks(s, i) < 2)
                continue;
            int32_t devices[MEMRA_MAX_RANKS];
            for (uint32_t r = 0; r < mc_ranks(s, i); r++) {
                s->st[i][r].ring = ring;
                ring += MC_VERDICT_RING;
                devices[r] = s->st[i][r].device;
            }
            st = b->coll->create(b->host, mc_ranks(s, i), devices, &b->coll_opts, &s->comm[i], err);
            if (st) {
                s->comm[i] = NULL;
                memra_error_prefix(err, "cuda: the collective '%.60s' for the %u ranks of stage %u", b->coll_name,
                                   mc_ranks(s, i), i);
                return st;
            }
        }
    }
    return MEMRA_OK;
fail:
    return st;
}

/* Adds a state's communicators' epochs to the backend's retired counts and destroys them. */
static void mc_state_retire(memra_backend *b, memra_state *s) {
    const uint32_t nb = 2 * b->m->n_layer;
    uint64_t *tmp = (uint64_t *)calloc(nb, sizeof *tmp);
    for (uint32_t i = 0; i < s->n_stages; i++) {
        if (!s->comm[i])
            continue;
        for (uint32_t r = 0; r < mc_ranks(s, i) && tmp && b->coll->epochs; r++) {
            memra_error e = {};
            cudaSetDevice(s->st[i][r].device);
            cudaStreamSynchronize(s->st[i][r].stream);
            if (b->coll->epochs(s->comm[i], r, tmp, nb, &e) == MEMRA_OK)
                for (uint32_t k = 0; k < nb; k++)
                    b->retired[((size_t)i * MEMRA_MAX_RANKS + r) * nb + k] += tmp[k];
        }
        b->coll->destroy(s->comm[i]);
        s->comm[i] = NULL;
    }
    free(tmp);
}

memra_status mc_state_new(memra_backend *b, uint32_t capacity, uint32_t max_inflight, memra_state **out,
                          memra_error *err) {
    const memra_model *m = b->m;
    memra_status st = MEMRA_OK;
    if (capacity == 0 || capacity > 0x7fffffffu)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: state capacity %u out of range", capacity);
    if (max_inflight == 0 || max_inflight > MC_MAX_INFLIGHT)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: max_inflight %u: expected 1 to %u", max_inflight,
                          MC_MAX_INFLIGHT);
    memra_state *s = (memra_state *)calloc(1, sizeof *s);
    if (!s)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
    s->capacity = capacity;
    s->max_inflight = max_inflight;
    s->n_stages = b->plan.n_stages;
    s->stats.struct_size = sizeof s->stats;
    for (uint32_t i = 0; i < s->n_stages; i++)
        s->n_ranks[i] = b->plan.stages[i].n_ranks > 1 ? b->plan.stages[i].n_ranks : 1;
    for (uint32_t i = 0; i < s->n_stages; i++)
        for (uint32_t r = 0; r < mc_ranks(s, i); r++)
            if ((st = mc_rank_new(b, s, i, r, err)))
                goto fail;
    if (b->tp && (st = mc_state_tp(b, s, err)))
        goto fail;
    {
        const size_t per = ((size_t)m->n_vocab * 4 + sizeof(mc_sample_result) + 16 + 255) & ~(size_t)255;
        MC_TRY(cudaSetDevice(s->st[s->n_stages - 1][0].device), "cudaSetDevice");
        MC_TRY(cudaMallocHost(&s->pinned, per * max_inflight), "cudaMallocHost of readback buffers");
        for (uint32_t k = 0; k < max_inflight; k++) {
            char *p = (char *)s->pinned + per * k;
            s->slots[k].host_logits = (float *)p;
            s->slots[k].host_res = (mc_sample_result *)(p + (size_t)m->n_vocab * 4);
            s->slots[k].host_token = (int32_t *)(p + (size_t)m->n_vocab * 4 + sizeof(mc_sample_result));
            MC_TRY(cudaEventCreateWithFlags(&s->slots[k].ev, cudaEventDisableTiming), "cudaEventCreate");
        }
        /* An event can only be recorded on a stream of the device it was created on. */
        MC_TRY(cudaSetDevice(s->st[0][0].device), "cudaSetDevice");
        for (uint32_t k = 0; k < max_inflight; k++)
            MC_TRY(cudaEventCreateWithFlags(&s->slots[k].ev_first, cudaEventDisableTiming), "cudaEventCreate");
    }
    pthread_mutex_lock(&b->lock);
    b->cache_bytes += s->cache_bytes;
    b->scratch_bytes += s->scratch_bytes;
    s->next = b->states;
    b->states = s;
    pthread_mutex_unlock(&b->lock);
    *out = s;
    return MEMRA_OK;
fail:
    if (b->tp)
        mc_state_retire(b, s);
    mc_state_destroy(s);
    return st;
}

void mc_state_free(memra_backend *b, memra_state *s) {
    if (!s)
        return;
    pthread_mutex_lock(&b->lock);
    for (memra_state **pp = &b->states; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    b->cache_bytes -= s->cache_bytes;
    b->scratch_bytes -= s->scratch_bytes;
    if (b->tp)
        mc_state_retire(b, s);
    pthread_mutex_unlock(&b->lock);
    mc_state_destroy(s);
}

void mc_quarantine(memra_backend *b, memra_state *s, const char *why) {
    if (!s->quarantined)
        snprintf(s->why, sizeof s->why, "%s", why);
    s->quarantined = true;
}

static memra_status mc_quarantine_fail(memra_state *s, memra_error *err) {
    if (!s->quarantined) {
        s->quarantined = true;
        snprintf(s->why, sizeof s->why, "%s", err ? err->msg : "a device call failed");
    }
    return err ? err->status : MEMRA_E_DEVICE;
}

static memra_status mc_sync_all(memra_state *s, memra_error *err);

/* Hands the state's communicators the refusal cells armed for the steps at positions
 * [position, position + max_inflight): handed before the first step of a window that can reach
 * them (arming needs no operation in flight), so the steps before a cell's may still be in flight
 * when it fires. A cell fires only at its position. */
static memra_status mc_hand_cells(memra_backend *b, memra_state *s, uint32_t position, memra_error *err) {
    memra_status st = MEMRA_OK;
    pthread_mutex_lock(&b->lock);
    bool any = false;
    for (uint32_t k = 0; k < b->n_cells; k++)
        any = any || (!b->cells[k].handed && b->cells[k].position >= position &&
                      b->cells[k].position - position < s->max_inflight);
    if (any && (st = mc_sync_all(s, err)) == MEMRA_OK) { /* no operation in flight while arming */
        for (uint32_t k = 0; k < b->n_cells && !st; k++) {
            mc_tp_cell *c = &b->cells[k];
            if (c->handed || c->position < position || c->position - position >= s->max_inflight || !s->comm[c->stage])
                continue;
            st = b->coll->arm_refusal(s->comm[c->stage], c->rank, c->layer * 2 + c->which, c->position, c->word, err);
            if (st)
                memra_error_prefix(err, "cuda: arming the refusal cell of layer %u (%s) on rank %u at position %u",
                                   c->layer, c->which ? "ffn" : "attention", c->rank, c->position);
            c->handed = true;
        }
    }
    pthread_mutex_unlock(&b->lock);
    return st;
}

/* ---- a step: prepare, body, finish -------------------------------------------------------- */

memra_status mc_prepare(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err) {
    memra_status st = MEMRA_OK;
    if (s->quarantined)
        return memra_fail(err, MEMRA_E_QUARANTINED, "cuda: the state failed earlier (%s); free it", s->why);
    if (s->position >= s->capacity)
        return memra_fail(err, MEMRA_E_RANGE, "cuda: the state is full (%u positions)", s->capacity);
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
    if (args->token == MEMRA_TOKEN_FROM_DEVICE) {
        MC_TRY(cudaSetDevice(s0->device), "cudaSetDevice");
        /* After an eager step, wait for the last stage's sampler. After a graph step the event was
         * recorded inside the capture (only an internal edge; waiting on it outside the capture is
         * an error), and no wait is needed: the whole graph ran on stage 0's stream, before this. */
        if (s->n_stages > 1 && s->sampled_ev_live)
            MC_TRY(cudaStreamWaitEvent(s0->stream, sl->sampled_ev, 0), "cudaStreamWaitEvent (sampled token)");
        if (s0->device == sl->device) {
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
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

/* One all-reduce of a stage's ranks: the n calls back to back, in rank order (plugin.h). */
static memra_status mc_all_reduce(memra_backend *b, memra_state *s, uint32_t i, uint32_t l, uint32_t which,
                                  memra_error *err) {
    const uint32_t layer = b->plan.stages[i].layer_begin + l;
    for (uint32_t r = 0; r < mc_ranks(s, i); r++) {
        mc_stage_state *ss = &s->st[i][r];
        MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
        memra_status st = b->coll->all_reduce_sum_f32(s->comm[i], r, ss->x, b->m->n_embd, (void *)ss->stream,
                                                      layer * 2 + which, ss->pos, &ss->status[l * 2 + which], err);
        if (st) {
            memra_error_prefix(err, "cuda: the all-reduce after %s of layer %u on rank %u", which ? "ffn" : "attention",
                               layer, r);
            return st;
        }
    }
    return MEMRA_OK;
}

/* One stage's part of the body: [embed | receive hidden], layers (each rank its slices, two
 * all-reduces per layer with more than one rank), commit, [head, sample] on rank 0. */
static memra_status mc_stage_body(memra_backend *b, memra_state *s, uint32_t i, const memra_sample_cfg *sample,
                                  bool capture, memra_error *err) {
    const memra_model *m = b->m;
    const uint32_t R = mc_ranks(s, i);
    const bool last = i == s->n_stages - 1, tp = R > 1;
    const uint32_t hd = m->head_dim, hdv = m->head_dim_v;
    const bool own_trigger = b->cfg.trigger != MC_TRIGGER_DEFAULT;
    const mc_config *c = &b->cfg;
    mc_stage_state *r0 = &s->st[i][0];
    /* Every rank's input hidden. */
    for (uint32_t r = 0; r < R; r++) {
        mc_stage_state *ss = &s->st[i][r];
        cudaStream_t q = ss->stream;
        MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
        /* Rank 0's hidden is read by the next stage's ranks' copies of the previous step: wait. */
        if (!capture && !last && r == 0)
            for (uint32_t k = 0; k < mc_ranks(s, i + 1); k++)
                MC_RET(cudaStreamWaitEvent(q, s->st[i + 1][k].consumed, 0), "cudaStreamWaitEvent (hidden consumed)");
        if (i == 0 && r == 0) {
            if (tp && !capture) /* xin is read by the other ranks' copies of the previous step */
                for (uint32_t k = 1; k < R; k++)
                    MC_RET(cudaStreamWaitEvent(q, s->st[0][k].consumed, 0), "cudaStreamWaitEvent (embedding consumed)");
            if (own_trigger)
                MC_RET(mc_trigger_enqueue(b->cfg.trigger, q), "enqueueing the arm's trigger mask");
            MC_RET(mc_embed(&b->w->stages[0][0].embd, ss->in_token, tp ? ss->xin : ss->x, q),
                   "launch of the embedding kernel");
            if (tp) {
                MC_RET(cudaEventRecord(ss->ready, q), "cudaEventRecord (embedding ready)");
                MC_RET(cudaMemcpyAsync(ss->x, ss->xin, (size_t)m->n_embd * 4, cudaMemcpyDeviceToDevice, q),
                       "cudaMemcpyAsync (embedding)");
            }
            continue;
        }
        /* Wait for the source first (in a capture, that joins this stream to it), then copy. */
        const mc_stage_state *src = i == 0 ? r0 : &s->st[i - 1][0];
        MC_RET(cudaStreamWaitEvent(q, i == 0 ? r0->ready : src->done, 0), "cudaStreamWaitEvent (hidden ready)");
        if (own_trigger)
            MC_RET(mc_trigger_enqueue(b->cfg.trigger, q), "enqueueing the arm's trigger mask");
        /* Same device: a device copy; across devices: a peer copy through unified addressing
         * (cudaMemcpyPeerAsync cannot be captured into a graph). */
        MC_RET(cudaMemcpyAsync(ss->x, i == 0 ? src->xin : src->x, (size_t)m->n_embd * 4, cudaMemcpyDefault, q),
               "cudaMemcpyAsync (hidden hand-off)");
        /* The previous stage's verdict of this step travels with its hidden: once `consumed` is
         * recorded that stage may run (and judge) the next step. */
        if (i > 0 && b->tp)
            MC_RET(cudaMemcpyAsync(ss->vin, src->verdict, 4, cudaMemcpyDefault, q),
                   "cudaMemcpyAsync (verdict hand-off)");
        MC_RET(cudaEventRecord(ss->consumed, q), "cudaEventRecord (hidden consumed)");
        if (i > 0 && b->stall_us) /* fault injection (stall_us=): the stage before runs ahead */
            MC_RET(mc_stall(b->stall_us, q), "launch of the stall kernel (stall_us=)");
    }
    const mc_stage_weights *sw0 = &b->w->stages[i][0];
    const uint32_t nl = sw0->layer_end - sw0->layer_begin;
    const bool fused = mc_attention_path(c, r0->n_head, r0->n_kv, hd, hdv) != MC_ATT_PATH_UNFUSED;
    for (uint32_t l = 0; l < nl; l++) {
        for (uint32_t r = 0; r < R; r++) {
            mc_stage_state *ss = &s->st[i][r];
            const mc_stage_weights *sw = &b->w->stages[i][r];
            const mc_layer *L = &sw->layers[l];
            cudaStream_t q = ss->stream;
            const uint32_t kv_plane = ss->n_kv * s->capacity;
            float *kc = ss->k_cache + (size_t)l * kv_plane * hd, *vc = ss->v_cache + (size_t)l * kv_plane * hdv;
            mc_rope_args ra = {ss->n_head,
                               ss->n_kv,
                               hd,
                               hdv,
                               s->capacity,
                               m->rope_pairing == MEMRA_ROPE_NEOX,
                               1.0f / m->rope_linear_factor,
                               sw->freqs,
                               L->q_norm,
                               L->k_norm,
                               m->rms_eps};
            if (tp)
                MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
            MC_RET(mc_gemv(c, &L->wqkv, ss->x, L->attn_norm, m->rms_eps, L->bqkv, NULL, ss->qkv, q),
                   "launch of the qkv gemv (with the attention norm)");
            if (fused) {
                MC_RET(mc_attention_fused(c, &ra, ss->qkv, kc, vc, ss->att_out, ss->pos, q),
                       "launch of attention (fused q/k norm, rope, kv append)");
            } else {
                MC_RET(mc_rope_kv(&ra, ss->qkv, kc, vc, ss->pos, q), "launch of rope/kv append");
                MC_RET(mc_attention(ss->qkv, kc, vc, ss->att_partial, ss->att_out, ss->n_head, ss->n_kv, hd, hdv,
                                    s->capacity, ss->pos, q),
                       "launch of attention");
            }
            /* Rank 0 adds its partial to the residual; the others hold only theirs; the
             * all-reduce then leaves the new residual on every rank. */
            MC_RET(mc_gemv(c, &L->wo, ss->att_out, NULL, 0.0f, NULL, r == 0 ? ss->x : NULL, ss->x, q),
                   "launch of the output-projection gemv");
        }
        if (tp) {
            memra_status st = mc_all_reduce(b, s, i, l, 0, err);
            if (st)
                return st;
        }
        for (uint32_t r = 0; r < R; r++) {
            mc_stage_state *ss = &s->st[i][r];
            const mc_layer *L = &b->w->stages[i][r].layers[l];
            cudaStream_t q = ss->stream;
            if (tp)
                MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
            MC_RET(mc_gemv_swiglu(c, &L->wgu, ss->x, L->ffn_norm, m->rms_eps, ss->gu, q),
                   "launch of the gate/up gemv (with the ffn norm)");
            MC_RET(mc_gemv(c, &L->wdown, ss->gu, NULL, 0.0f, NULL, r == 0 ? ss->x : NULL, ss->x, q),
                   "launch of the down gemv");
        }
        if (tp) {
            memra_status st = mc_all_reduce(b, s, i, l, 1, err);
            if (st)
                return st;
        }
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
        else
            MC_RET(mc_commit(ss->pos, q), "launch of the commit kernel");
        if (!last || (r > 0 && !tp))
            continue;
        const mc_stage_weights *sw = &b->w->stages[i][r];
        float *out = b->tp ? ss->lg : ss->logits; /* checked: published below, when the step committed */
        MC_RET(mc_gemv(c, &sw->head, ss->x, sw->out_norm, m->rms_eps, NULL, NULL, out, q),
               "launch of the head gemv (with the final norm)");
        if (r > 0) { /* rank r's rows into rank 0's buffer, which rank 0 reads after this event */
            if (!capture) /* rank 0 has read the previous step's (in a graph: the replay before) */
                MC_RET(cudaStreamWaitEvent(q, r0->pub_ev, 0), "cudaStreamWaitEvent (logits published)");
            MC_RET(cudaMemcpyAsync(r0->lg + ss->v0, ss->lg, (size_t)(ss->v1 - ss->v0) * 4, cudaMemcpyDefault, q),
                   "cudaMemcpyAsync (logits gather)");
            MC_RET(cudaEventRecord(ss->head_ev, q), "cudaEventRecord (logits gathered)");
        }
    }
    for (uint32_t r = 0; r < R; r++) {
        mc_stage_state *ss = &s->st[i][r];
        cudaStream_t q = ss->stream;
        MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
        if (r == 0 && last && tp)
            for (uint32_t k = 1; k < R; k++)
                MC_RET(cudaStreamWaitEvent(q, s->st[i][k].head_ev, 0), "cudaStreamWaitEvent (logits gathered)");
        if (own_trigger)
            MC_RET(mc_trigger_enqueue(MC_TRIGGER_DEFAULT, q), "enqueueing the default trigger mask");
        float *lg = b->tp ? ss->lg : ss->logits;
        if (r == 0 && last && sample) {
            MC_RET(mc_sample(lg, &ss->sampler, sample, ss->pos, ss->sampled, ss->result, q),
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
    if (args->sample)
        MC_TRY(cudaMemcpyAsync(slot->host_res, sl->result, sizeof(mc_sample_result), cudaMemcpyDeviceToHost, q),
               "cudaMemcpyAsync (sample readback)");
    slot->pending = after_graph ? slot->ev_first : slot->ev;
    MC_TRY(cudaEventRecord(slot->pending, q), "cudaEventRecord (step done)");
    slot->want_logits = args->want_logits;
    slot->sampled = args->sample != NULL;
    s->position++;
    slot->position = s->position;
    s->inflight++;
    s->has_device_token = args->sample != NULL;
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

/* What a collective status word says on rank r, for a message. */
static void mc_word_text(int32_t word, uint32_t r, char *buf, size_t n) {
    if (word == MEMRA_COLLECTIVE_PENDING)
        snprintf(buf, n, "did not complete on rank %u", r);
    else if (word == MEMRA_COLLECTIVE_FAILED)
        snprintf(buf, n, "failed on rank %u (the communicator is broken, or the ranks' counts differ)", r);
    else if (word == MEMRA_COLLECTIVE_ABORTED)
        snprintf(buf, n, "was aborted on rank %u", r);
    else if (word == MEMRA_COLLECTIVE_ABSENT)
        snprintf(buf, n, "never saw rank %u arrive (an injected absence: rank %u skipped it)", r, r);
    else if (word >= MEMRA_COLLECTIVE_TIMEOUT(0) && word < MEMRA_COLLECTIVE_TIMEOUT(MEMRA_MAX_RANKS))
        snprintf(buf, n, "timed out waiting for rank %d on rank %u", (int)(word - MEMRA_COLLECTIVE_TIMEOUT(0)), r);
    else
        snprintf(buf, n, "refused on rank %u", r);
}

/* How much a word says about the cause (the ranks of one failed operation may read different
 * words: the waiting rank a timeout, the missing one its absence, a third the broken state). */
static int mc_word_rank(int32_t word) {
    if (word >= MEMRA_COLLECTIVE_TIMEOUT(0) && word < MEMRA_COLLECTIVE_TIMEOUT(MEMRA_MAX_RANKS))
        return 5;
    if (word == MEMRA_COLLECTIVE_ABSENT)
        return 4;
    if (!MEMRA_COLLECTIVE_RESERVED(word))
        return 3; /* a refusal: every rank reads it */
    if (word == MEMRA_COLLECTIVE_ABORTED)
        return 2;
    return 1;
}

/* The collective check of a finished step: every tp rank's commit verdict for position p. Per
 * stage, the first failed all-reduce of the step (the lowest site index over the ranks) is
 * reported with the word that says most about it; a refusal names the rank whose handed cell
 * fired there. */
static memra_status mc_check_verdicts(memra_backend *b, memra_state *s, uint32_t p, memra_error *err) {
    bool uncommitted = false; /* some rank did not commit because an earlier stage failed */
    uint32_t u_stage = 0, u_rank = 0;
    for (uint32_t i = 0; i < s->n_stages; i++) {
        if (mc_ranks(s, i) < 2)
            continue;
        int32_t best_index = -1, word = 0;
        uint32_t who = 0;
        for (uint32_t r = 0; r < mc_ranks(s, i); r++) {
            const volatile mc_verdict *v = &s->st[i][r].ring[p % MC_VERDICT_RING];
            if (v->position != (int32_t)p)
                return memra_fail(err, MEMRA_E_DEVICE,
                                  "cuda: rank %u of stage %u has no commit verdict for position %u (its step did not "
                                  "run to the end)",
                                  r, i, p);
            const int32_t idx = v->index, w = v->word;
            if (idx < -1 && !uncommitted) { /* an earlier stage failed: it must say so below */
                uncommitted = true;
                u_stage = i;
                u_rank = r;
            }
            if (idx < 0) /* committed, or an earlier stage failed (reported there) */
                continue;
            if (best_index < 0 || idx < best_index || (idx == best_index && mc_word_rank(w) > mc_word_rank(word))) {
                best_index = idx;
                word = w;
                who = r;
            }
        }
        if (best_index < 0)
            continue;
        const uint32_t layer = b->plan.stages[i].layer_begin + (uint32_t)best_index / 2, which = best_index % 2;
        pthread_mutex_lock(&b->lock);
        for (uint32_t k = 0; k < b->n_cells; k++) {
            const mc_tp_cell *c = &b->cells[k];
            if (c->handed && c->stage == i && c->layer == layer && c->which == which && c->position == p &&
                c->word == word)
                who = c->rank;
        }
        pthread_mutex_unlock(&b->lock);
        char text[160];
        mc_word_text(word, who, text, sizeof text);
        const bool refused = !MEMRA_COLLECTIVE_RESERVED(word);
        return memra_fail(err, refused ? MEMRA_E_REFUSED : MEMRA_E_DEVICE,
                          "cuda: the all-reduce (%s) after %s of layer %u %s at position %u (stage %u, block %u, "
                          "word %d = 0x%08x); nothing was committed",
                          b->coll_name, which ? "ffn" : "attention", layer, text, p, i, layer * 2 + which, (int)word,
                          (unsigned)word);
    }
    /* Never a success that some rank did not commit. */
    if (uncommitted)
        return memra_fail(err, MEMRA_E_DEVICE,
                          "cuda: rank %u of stage %u did not commit the step at position %u (its verdict says an "
                          "earlier stage failed it), but no stage reports a failed all-reduce; nothing is trusted",
                          u_rank, u_stage, p);
    return MEMRA_OK;
}

static double mc_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* A tensor-parallel step's wait, bounded: past step_timeout_ms the state's communicators are
 * aborted (a collective spinning for a rank that never arrives gives up at once; NCCL's kernels
 * end with ncclCommAbort), the step fails naming the timeout and the state is quarantined. If the
 * device still does not finish within a further 10 s the step fails all the same (the state must
 * then not be used; freeing it waits for its streams). */
static memra_status mc_wait_step(memra_backend *b, memra_state *s, mc_slot *slot, memra_error *err) {
    const double t0 = mc_now_s(), limit = b->step_timeout_ms / 1000.0;
    cudaError_t e;
    while ((e = cudaEventQuery(slot->pending)) == cudaErrorNotReady) {
        if (mc_now_s() - t0 > limit)
            break;
        sched_yield();
    }
    if (e == cudaSuccess)
        return MEMRA_OK;
    if (e != cudaErrorNotReady) {
        memra_status st = mc_cuda_fail(err, e, "the step (cudaEventQuery)");
        mc_quarantine_fail(s, err);
        return st;
    }
    if (s->on_abort) /* cuda-graph: its graph destroyed first (it may hold the communicators) */
        s->on_abort(s->on_abort_arg);
    for (uint32_t i = 0; i < s->n_stages; i++)
        if (s->comm[i] && b->coll->abort)
            b->coll->abort(s->comm[i]);
    const double t1 = mc_now_s();
    while ((e = cudaEventQuery(slot->pending)) == cudaErrorNotReady && mc_now_s() - t1 < 10.0)
        sched_yield();
    memra_status st =
        memra_fail(err, MEMRA_E_DEVICE,
                   "cuda: the step at position %u did not finish within step_timeout_ms=%u (a collective of "
                   "'%s' waited too long); the state's communicators were aborted%s",
                   slot->position - 1, b->step_timeout_ms, b->coll_name,
                   e == cudaSuccess ? "" : ", and the device had still not finished 10 s later");
    mc_quarantine(b, s, err ? err->msg : "a step timed out");
    s->position = slot->position - 1;
    return st;
}

memra_status mc_step_end(memra_backend *b, memra_state *s, float *logits, memra_step_result *out, memra_error *err) {
    memra_status st = MEMRA_OK;
    if (s->inflight == 0)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: step_end with no step in flight");
    mc_slot *slot = &s->slots[s->head];
    s->head = (s->head + 1) % s->max_inflight;
    s->inflight--;
    if (b->tp) {
        if ((st = mc_wait_step(b, s, slot, err)))
            return st;
    } else {
        MC_TRY(cudaEventSynchronize(slot->pending), "the step (cudaEventSynchronize)");
    }
    if (s->quarantined)
        return memra_fail(err, MEMRA_E_QUARANTINED, "cuda: the state failed earlier (%s); free it", s->why);
    if (b->tp && (st = mc_check_verdicts(b, s, slot->position - 1, err))) {
        mc_quarantine(b, s, err ? err->msg : "a collective failed");
        s->position = slot->position - 1; /* the step did not commit; later ones are void */
        return st;
    }
    if (slot->sampled && slot->host_res->bad_index >= 0) {
        float f;
        memcpy(&f, &slot->host_res->bad_bits, 4);
        st = memra_fail(err, MEMRA_E_RANGE, "cuda: logit %d is %s", slot->host_res->bad_index,
                        f != f ? "nan" : (f > 0 ? "+inf" : "-inf"));
        mc_quarantine(b, s, err ? err->msg : "non-finite logits");
        return st;
    }
    if (logits && slot->want_logits)
        memcpy(logits, slot->host_logits, (size_t)b->m->n_vocab * 4);
    if (out) {
        out->token = slot->sampled ? slot->host_res->token : -1;
        out->position = slot->position;
    }
    s->stats.steps++;
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

/* ---- digests, restore ------------------------------------------------------------------------ */

static memra_status mc_sync_all(memra_state *s, memra_error *err) {
    memra_status st = MEMRA_OK;
    for (uint32_t i = 0; i < s->n_stages; i++)
        for (uint32_t r = 0; r < mc_ranks(s, i); r++) {
            MC_TRY(cudaSetDevice(s->st[i][r].device), "cudaSetDevice");
            MC_TRY(cudaStreamSynchronize(s->st[i][r].stream), "cudaStreamSynchronize");
        }
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

memra_status mc_digest(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32], memra_error *err) {
    memra_status st = MEMRA_OK;
    const memra_model *m = b->m;
    /* A quarantined state may still be observed (what a failed step left committed: nothing). */
    if (s->inflight)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: digest with %u steps in flight", s->inflight);
    if ((st = mc_sync_all(s, err)))
        return st;
    mc_stage_state *sl = &s->st[s->n_stages - 1][0];
    if (kind == MEMRA_DIGEST_LOGITS || kind == MEMRA_DIGEST_HIDDEN) {
        size_t n = kind == MEMRA_DIGEST_LOGITS ? m->n_vocab : m->n_embd;
        float *h = (float *)malloc(n * 4);
        if (!h)
            return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
        MC_TRY(cudaSetDevice(sl->device), "cudaSetDevice");
        const float *src = kind == MEMRA_DIGEST_LOGITS ? sl->logits : (sl->xc ? sl->xc : sl->x);
        cudaError_t e = cudaMemcpy(h, src, n * 4, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess)
            b->host->sha256(h, n * 4, out);
        free(h);
        MC_TRY(e, "cudaMemcpy (digest readback)");
        return MEMRA_OK;
    }
    if (kind != MEMRA_DIGEST_CACHE)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: unknown digest kind %d", (int)kind);
    {
        /* Per rank: hashes of K and V chunks on the device; the host hashes them layer by layer
         * (K of every rank's kv heads in rank order, then V), so any split of the layers or of the
         * kv heads gives the same digest. */
        const uint64_t chunks = (s->capacity + MC_DIGEST_ROWS - 1) / MC_DIGEST_ROWS;
        memra_sha256_ctx *ctx = b->host->sha256_new();
        if (!ctx)
            return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
        uint32_t pos = s->position;
        b->host->sha256_update(ctx, &pos, 4);
        unsigned long long *h[MEMRA_MAX_RANKS] = {NULL};
        for (uint32_t i = 0; i < s->n_stages && !st; i++) {
            const mc_stage_weights *sw = &b->w->stages[i][0];
            const uint32_t nl = sw->layer_end - sw->layer_begin, R = mc_ranks(s, i);
            for (uint32_t r = 0; r < R && !st; r++) {
                mc_stage_state *ss = &s->st[i][r];
                const uint64_t per_layer = (uint64_t)ss->n_kv * chunks, n = 2 * nl * per_layer;
                free(h[r]);
                h[r] = (unsigned long long *)malloc(n * 8);
                if (!h[r]) {
                    st = memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
                    break;
                }
                /* rows [0, the host's position): the committed steps (a stage whose part of a failed
                 * step committed before a later stage refused covers one row more on the device) */
                const int32_t hp = (int32_t)s->position;
                cudaError_t e = cudaSetDevice(ss->device);
                if (e == cudaSuccess)
                    e = cudaMemcpyAsync(ss->dpos, &hp, 4, cudaMemcpyHostToDevice, ss->stream);
                if (e == cudaSuccess)
                    e = mc_digest_planes(ss->k_cache, nl * ss->n_kv, s->capacity, m->head_dim, ss->dpos, ss->hashes,
                                         ss->stream);
                if (e == cudaSuccess)
                    e = mc_digest_planes(ss->v_cache, nl * ss->n_kv, s->capacity, m->head_dim_v, ss->dpos,
                                         ss->hashes + nl * per_layer, ss->stream);
                if (e == cudaSuccess)
                    e = cudaMemcpyAsync(h[r], ss->hashes, n * 8, cudaMemcpyDeviceToHost, ss->stream);
                if (e == cudaSuccess)
                    e = cudaStreamSynchronize(ss->stream);
                if (e != cudaSuccess)
                    st = mc_cuda_fail(err, e, "the cache digest");
            }
            for (uint32_t l = 0; l < nl && !st; l++) {
                for (uint32_t r = 0; r < R; r++) {
                    const uint64_t per_layer = (uint64_t)s->st[i][r].n_kv * chunks;
                    b->host->sha256_update(ctx, h[r] + l * per_layer, per_layer * 8);
                }
                for (uint32_t r = 0; r < R; r++) {
                    const uint64_t per_layer = (uint64_t)s->st[i][r].n_kv * chunks;
                    b->host->sha256_update(ctx, h[r] + (nl + l) * per_layer, per_layer * 8);
                }
            }
        }
        for (uint32_t r = 0; r < MEMRA_MAX_RANKS; r++)
            free(h[r]);
        b->host->sha256_final(ctx, out);
        if (st)
            return mc_quarantine_fail(s, err);
    }
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

memra_status mc_state_restore(memra_backend *b, memra_state *dst, const memra_state *src, memra_error *err) {
    memra_status st = MEMRA_OK;
    const memra_model *m = b->m;
    if (src->quarantined || dst->quarantined)
        return memra_fail(err, MEMRA_E_QUARANTINED, "cuda: restore from or into a state that failed earlier (%s)",
                          src->quarantined ? src->why : dst->why);
    if (src->inflight || dst->inflight)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: restore with steps in flight");
    if (src->n_stages != dst->n_stages)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: restore between states of different plans");
    if (dst->capacity < src->position)
        return memra_fail(err, MEMRA_E_RANGE, "cuda: restore of %u positions into a state of capacity %u",
                          src->position, dst->capacity);
    if ((st = mc_sync_all((memra_state *)src, err)))
        return st;
    if ((st = mc_sync_all(dst, err)))
        return st;
    for (uint32_t i = 0; i < dst->n_stages; i++) {
        const mc_stage_weights *sw = &b->w->stages[i][0];
        const uint32_t nl = sw->layer_end - sw->layer_begin;
        for (uint32_t r = 0; r < mc_ranks(dst, i); r++) {
            const mc_stage_state *a = &src->st[i][r];
            mc_stage_state *d = &dst->st[i][r];
            const uint32_t planes = nl * d->n_kv;
            cudaStream_t q = d->stream;
            MC_TRY(cudaSetDevice(d->device), "cudaSetDevice");
            MC_TRY(cudaMemcpyAsync(d->pos, a->pos, 4, cudaMemcpyDeviceToDevice, q), "restore: position");
            MC_TRY(cudaMemcpyAsync(d->x, a->x, (size_t)m->n_embd * 4, cudaMemcpyDeviceToDevice, q), "restore: hidden");
            if (d->poison)
                MC_TRY(cudaMemsetAsync(d->poison, 0, 4, q), "restore: clearing the poison");
            if (src->position > 0) {
                MC_TRY(cudaMemcpy2DAsync(d->k_cache, (size_t)dst->capacity * m->head_dim * 4, a->k_cache,
                                         (size_t)src->capacity * m->head_dim * 4,
                                         (size_t)src->position * m->head_dim * 4, planes, cudaMemcpyDeviceToDevice, q),
                       "restore: K cache");
                MC_TRY(cudaMemcpy2DAsync(d->v_cache, (size_t)dst->capacity * m->head_dim_v * 4, a->v_cache,
                                         (size_t)src->capacity * m->head_dim_v * 4,
                                         (size_t)src->position * m->head_dim_v * 4, planes, cudaMemcpyDeviceToDevice,
                                         q),
                       "restore: V cache");
            }
            if (i == 0 && r == 0)
                MC_TRY(cudaMemcpyAsync(d->in_token, a->in_token, 4, cudaMemcpyDeviceToDevice, q), "restore: token");
            if (i == dst->n_stages - 1 && r == 0) {
                MC_TRY(cudaMemcpyAsync(d->logits, a->logits, (size_t)m->n_vocab * 4, cudaMemcpyDeviceToDevice, q),
                       "restore: logits");
                if (d->xc)
                    MC_TRY(cudaMemcpyAsync(d->xc, a->xc, (size_t)m->n_embd * 4, cudaMemcpyDeviceToDevice, q),
                           "restore: committed hidden");
                MC_TRY(cudaMemcpyAsync(d->sampled, a->sampled, 4, cudaMemcpyDeviceToDevice, q),
                       "restore: sampled token");
                MC_TRY(cudaMemcpyAsync(d->result, a->result, sizeof(mc_sample_result), cudaMemcpyDeviceToDevice, q),
                       "restore: sample result");
            }
            MC_TRY(cudaStreamSynchronize(q), "restore (cudaStreamSynchronize)");
        }
    }
    dst->position = src->position;
    dst->has_device_token = src->has_device_token;
    dst->sampled_ev_live = false; /* the sampled token was copied on dst's stream and synchronised */
    return MEMRA_OK;
fail:
    mc_quarantine_fail(dst, err);
    return st;
}

/* ---- memra.tp ------------------------------------------------------------------------------- */

bool mc_is_tp(memra_backend *b) { return b->tp; }

memra_status mc_tp_collective(memra_backend *b, char *name, size_t name_size, bool *refusals, memra_error *err) {
    if (!b->tp)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: no stage has more than one rank");
    snprintf(name, name_size, "%s", b->coll_name);
    if (refusals)
        *refusals = b->coll->arm_refusal != NULL;
    return MEMRA_OK;
}

memra_status mc_tp_arm_refusal(memra_backend *b, uint32_t stage, uint32_t rank, uint32_t layer, uint32_t which,
                               uint32_t position, int32_t word, memra_error *err) {
    if (!b->tp)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: no stage has more than one rank");
    if (!b->coll->arm_refusal)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: the collective '%s' has no refusal cells", b->coll_name);
    if (stage >= b->plan.n_stages || b->plan.stages[stage].n_ranks < 2 || rank >= b->plan.stages[stage].n_ranks ||
        layer < b->plan.stages[stage].layer_begin || layer >= b->plan.stages[stage].layer_end || which > 1)
        return memra_fail(err, MEMRA_E_RANGE, "cuda: no collective site at stage %u, rank %u, layer %u, which %u",
                          stage, rank, layer, which);
    if (word == 0 || (MEMRA_COLLECTIVE_RESERVED(word) && word != MEMRA_COLLECTIVE_ABSENT))
        return memra_fail(err, MEMRA_E_INVALID, "cuda: refusal word %d is reserved", (int)word);
    pthread_mutex_lock(&b->lock);
    memra_status st = MEMRA_OK;
    if (b->n_cells == b->cap_cells) {
        uint32_t cap = b->cap_cells ? b->cap_cells * 2 : 8;
        mc_tp_cell *c = (mc_tp_cell *)realloc(b->cells, cap * sizeof *c);
        if (!c)
            st = memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
        else {
            b->cells = c;
            b->cap_cells = cap;
        }
    }
    if (!st)
        b->cells[b->n_cells++] = (mc_tp_cell){stage, rank, layer, which, position, word, false};
    pthread_mutex_unlock(&b->lock);
    return st;
}

memra_status mc_tp_clear_refusals(memra_backend *b, memra_error *err) {
    memra_status st = MEMRA_OK;
    pthread_mutex_lock(&b->lock);
    bool handed = false;
    for (uint32_t k = 0; k < b->n_cells; k++)
        handed = handed || b->cells[k].handed;
    b->n_cells = 0;
    if (handed && b->coll && MEMRA_HAS_MEMBER(b->coll, memra_collective_vtable, clear_refusals) &&
        b->coll->clear_refusals)
        for (memra_state *s = b->states; s && !st; s = s->next) {
            memra_error e = {};
            if (mc_sync_all(s, &e))
                continue; /* a quarantined state steps no more */
            for (uint32_t i = 0; i < s->n_stages && !st; i++)
                if (s->comm[i])
                    st = b->coll->clear_refusals(s->comm[i], err);
        }
    pthread_mutex_unlock(&b->lock);
    return st;
}

memra_status mc_tp_epochs(memra_backend *b, uint32_t stage, uint32_t rank, uint64_t *out, uint32_t n_blocks,
                          memra_error *err) {
    if (!b->tp)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: no stage has more than one rank");
    if (stage >= b->plan.n_stages || rank >= (b->plan.stages[stage].n_ranks ? b->plan.stages[stage].n_ranks : 1))
        return memra_fail(err, MEMRA_E_RANGE, "cuda: no rank %u in stage %u", rank, stage);
    const uint32_t nb = 2 * b->m->n_layer;
    memset(out, 0, (size_t)n_blocks * sizeof *out);
    if (b->plan.stages[stage].n_ranks < 2 || !b->coll->epochs)
        return MEMRA_OK;
    uint64_t *tmp = (uint64_t *)calloc(nb, sizeof *tmp);
    if (!tmp)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
    memra_status st = MEMRA_OK;
    pthread_mutex_lock(&b->lock);
    for (uint32_t k = 0; k < n_blocks && k < nb; k++)
        out[k] = b->retired[((size_t)stage * MEMRA_MAX_RANKS + rank) * nb + k];
    for (memra_state *s = b->states; s && !st; s = s->next) {
        if (!s->comm[stage])
            continue;
        memra_error e = {};
        memset(tmp, 0, (size_t)nb * sizeof *tmp);
        if (mc_sync_all(s, &e) == MEMRA_OK)
            st = b->coll->epochs(s->comm[stage], rank, tmp, nb, err);
        for (uint32_t k = 0; k < n_blocks && k < nb && !st; k++)
            out[k] += tmp[k];
    }
    pthread_mutex_unlock(&b->lock);
    free(tmp);
    return st;
}

uint32_t mc_state_position(memra_backend *b, const memra_state *s) { return s->position; }

memra_status mc_state_stats(memra_backend *b, const memra_state *s, memra_state_stats *out, memra_error *err) {
    uint32_t size = out->struct_size && out->struct_size < sizeof *out ? out->struct_size : sizeof *out;
    memcpy(out, &s->stats, size);
    out->struct_size = size;
    return MEMRA_OK;
}

memra_status mc_memory(memra_backend *b, memra_backend_memory *out, memra_error *err) {
    memra_backend_memory mem;
    memset(&mem, 0, sizeof mem);
    mem.struct_size = sizeof mem;
    mem.weight_bytes = b->w->bytes;
    mem.cache_bytes = b->cache_bytes;
    mem.scratch_bytes = b->scratch_bytes;
    bool seen[64] = {false};
    for (uint32_t k = 0; k < b->plan.n_stages * MEMRA_MAX_RANKS; k++) {
        const memra_stage_plan *sp = &b->plan.stages[k / MEMRA_MAX_RANKS];
        if (k % MEMRA_MAX_RANKS >= (sp->n_ranks ? sp->n_ranks : 1))
            continue;
        int32_t d = mc_rank_device(sp, k % MEMRA_MAX_RANKS);
        if (d < 0 || d >= 64 || seen[d])
            continue;
        seen[d] = true;
        size_t f = 0, t = 0;
        cudaError_t e = cudaSetDevice(d);
        if (e == cudaSuccess)
            e = cudaMemGetInfo(&f, &t);
        if (e != cudaSuccess)
            return mc_cuda_fail(err, e, "cudaMemGetInfo");
        mem.device_in_use += t - f;
    }
    uint32_t size = out->struct_size && out->struct_size < sizeof mem ? out->struct_size : sizeof mem;
    memcpy(out, &mem, size);
    out->struct_size = size;
    return MEMRA_OK;
}

/* ---- extensions ------------------------------------------------------------------------------ */

memra_status mc_device_name(memra_backend *b, char *buf, size_t size, memra_error *err) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, b->plan.stages[0].device);
    if (e != cudaSuccess)
        return mc_cuda_fail(err, e, "cudaGetDeviceProperties");
    snprintf(buf, size, "%s", p.name);
    return MEMRA_OK;
}

/* A 1 GiB device-to-device copy, 10 times after a warm-up, timed with events; read plus write
 * bytes over the time. */
memra_status mc_measure_ceiling(memra_backend *b, double *bytes_per_s, char *how, size_t how_size, memra_error *err) {
    memra_status st = MEMRA_OK;
    const size_t n = (size_t)1 << 30;
    const int reps = 10;
    void *a = NULL, *c = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms = 0;
    MC_TRY(cudaSetDevice(b->plan.stages[0].device), "cudaSetDevice");
    MC_TRY(cudaMalloc(&a, n), "cudaMalloc (ceiling buffers)");
    MC_TRY(cudaMalloc(&c, n), "cudaMalloc (ceiling buffers)");
    MC_TRY(cudaMemset(a, 1, n), "cudaMemset");
    MC_TRY(cudaEventCreate(&e0), "cudaEventCreate");
    MC_TRY(cudaEventCreate(&e1), "cudaEventCreate");
    MC_TRY(cudaMemcpy(c, a, n, cudaMemcpyDeviceToDevice), "cudaMemcpy (warm-up)");
    MC_TRY(cudaEventRecord(e0, 0), "cudaEventRecord");
    for (int i = 0; i < reps; i++)
        MC_TRY(cudaMemcpyAsync(i & 1 ? a : c, i & 1 ? c : a, n, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync");
    MC_TRY(cudaEventRecord(e1, 0), "cudaEventRecord");
    MC_TRY(cudaEventSynchronize(e1), "cudaEventSynchronize");
    MC_TRY(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    *bytes_per_s = 2.0 * n * reps / (ms / 1e3);
    if (how)
        snprintf(how, how_size,
                 "cudaMemcpy device-to-device of 1 GiB x %d after a warm-up, read+write bytes / "
                 "event time",
                 reps);
fail:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(c);
    return st;
}

void mc_on_abort(memra_backend *b, memra_state *s, void (*fn)(void *arg), void *arg) {
    (void)b;
    s->on_abort = fn;
    s->on_abort_arg = arg;
}
void *mc_ext_stream(memra_backend *b, memra_state *s) { return (void *)s->st[0][0].stream; }
int32_t mc_ext_device(memra_backend *b, memra_state *s) { return s->st[0][0].device; }
