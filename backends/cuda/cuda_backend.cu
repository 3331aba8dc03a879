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
 * wait is missing: neither can happen here.) */
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
    mc_stage_weights stages[MEMRA_MAX_STAGES];
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

/* Lays out `n` source matrices stacked (rows in order; interleave: rows alternate between the two
 * sources) in the upload layout, and copies them to the device. With a sizing bump (base NULL)
 * only counts. */
static memra_status mc_put_matrix(mc_bump *bump, const memra_weight *const *src, uint32_t n, bool interleave,
                                  mc_matrix *out, memra_error *err) {
    uint32_t type = src[0]->type;
    uint64_t cols = src[0]->cols, rows = 0;
    for (uint32_t i = 0; i < n; i++) {
        memra_status st = mc_check_matrix(src[i], err);
        if (st)
            return st;
        if (src[i]->type != type || src[i]->cols != cols)
            return memra_fail(err, MEMRA_E_UNSUPPORTED,
                              "cuda: tensors '%s' and '%s' are fused on upload but differ in type or columns",
                              src[0]->name, src[i]->name);
        rows += src[i]->rows;
    }
    if (interleave && (n != 2 || src[0]->rows != src[1]->rows))
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
    uint64_t src_row_bytes = type == MEMRA_TYPE_Q8_0 ? cols / 32 * MEMRA_Q8_0_BLOCK_BYTES : cols * eb;
    for (uint64_t i = 0; i < rows; i++, r++) {
        const memra_weight *w;
        uint64_t sr;
        if (interleave) {
            w = src[i & 1];
            sr = i / 2;
        } else {
            uint32_t k = 0;
            sr = i;
            while (sr >= src[k]->rows)
                sr -= src[k++]->rows;
            w = src[k];
        }
        const uint8_t *sp = (const uint8_t *)w->data + sr * src_row_bytes;
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

/* Decodes vectors (norms, biases) to f32, stacked, and copies them to the device. NULL entries
 * are skipped; all NULL gives NULL. */
static memra_status mc_put_vector(mc_bump *bump, const memra_weight *const *src, uint32_t n, float **out,
                                  memra_error *err) {
    uint64_t len = 0;
    for (uint32_t i = 0; i < n; i++)
        if (src[i] && src[i]->data) {
            if (!mc_type_ok(src[i]->type))
                return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: tensor '%s' has type %s, which has no kernel",
                                  src[i]->name, memra_tensor_type_name(src[i]->type));
            len += src[i]->rows * src[i]->cols;
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
        if (src[i] && src[i]->data)
            for (uint64_t j = 0; j < src[i]->rows * src[i]->cols; j++)
                host[k++] = mc_host_elem(src[i], j);
    cudaError_t e = cudaMemcpy(*out, host, len * 4, cudaMemcpyHostToDevice);
    free(host);
    return e == cudaSuccess ? MEMRA_OK : mc_cuda_fail(err, e, "uploading a vector (cudaMemcpy)");
}

/* Lays out (or, with a real arena, uploads) one stage's weights. */
static memra_status mc_stage_layout(const memra_model *m, const memra_plan *plan, uint32_t si, mc_bump *bump,
                                    mc_stage_weights *sw, memra_error *err) {
    const memra_stage_plan *sp = &plan->stages[si];
    memra_status st;
    const uint32_t nl = sp->layer_end - sp->layer_begin;
    for (uint32_t i = 0; i < nl; i++) {
        const memra_layer *L = &m->layers[sp->layer_begin + i];
        mc_layer *dl = &sw->layers[i];
        const memra_weight *qkv[3] = {&L->wq, &L->wk, &L->wv};
        const memra_weight *bias[3] = {&L->bq, &L->bk, &L->bv};
        const memra_weight *gu[2] = {&L->w_gate, &L->w_up};
        const memra_weight *v1;
        if ((st = mc_put_matrix(bump, qkv, 3, false, &dl->wqkv, err)))
            return st;
        const bool any_bias = L->bq.data || L->bk.data || L->bv.data;
        for (int k = 0; k < 3 && any_bias; k++)
            if (!bias[k]->data || bias[k]->rows * bias[k]->cols != qkv[k]->rows)
                return memra_fail(err, MEMRA_E_FORMAT,
                                  "cuda: layer %u: q, k and v biases must be all present with one value per row "
                                  "('%s' is %s)",
                                  sp->layer_begin + i, qkv[k]->name ? qkv[k]->name : "?",
                                  bias[k]->data ? "of the wrong length" : "missing its bias");
        if ((st = mc_put_vector(bump, bias, 3, &dl->bqkv, err)))
            return st;
        v1 = &L->wo;
        if ((st = mc_put_matrix(bump, &v1, 1, false, &dl->wo, err)))
            return st;
        if ((st = mc_put_matrix(bump, gu, 2, true, &dl->wgu, err)))
            return st;
        v1 = &L->w_down;
        if ((st = mc_put_matrix(bump, &v1, 1, false, &dl->wdown, err)))
            return st;
        v1 = &L->attn_norm;
        if ((st = mc_put_vector(bump, &v1, 1, &dl->attn_norm, err)))
            return st;
        v1 = &L->ffn_norm;
        if ((st = mc_put_vector(bump, &v1, 1, &dl->ffn_norm, err)))
            return st;
        v1 = &L->q_norm;
        if ((st = mc_put_vector(bump, &v1, 1, &dl->q_norm, err)))
            return st;
        v1 = &L->k_norm;
        if ((st = mc_put_vector(bump, &v1, 1, &dl->k_norm, err)))
            return st;
    }
    const memra_weight *v1 = &m->tok_embd;
    if (si == 0 && (st = mc_put_matrix(bump, &v1, 1, false, &sw->embd, err)))
        return st;
    if (si == plan->n_stages - 1) {
        v1 = &m->output_norm;
        if ((st = mc_put_vector(bump, &v1, 1, &sw->out_norm, err)))
            return st;
        if (m->tied_output && si == 0) {
            sw->head = sw->embd; /* one upload serves both */
        } else {
            v1 = &m->output;
            if ((st = mc_put_matrix(bump, &v1, 1, false, &sw->head, err)))
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
    for (uint32_t s = 0; s < w->plan.n_stages; s++) {
        mc_stage_weights *sw = &w->stages[s];
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
    for (uint32_t s = 0; s < plan->n_stages && !st; s++) {
        const memra_stage_plan *sp = &plan->stages[s];
        mc_stage_weights *sw = &w->stages[s];
        sw->device = sp->device;
        sw->layer_begin = sp->layer_begin;
        sw->layer_end = sp->layer_end;
        sw->layers = (mc_layer *)calloc(sp->layer_end - sp->layer_begin + 1, sizeof(mc_layer));
        if (!sw->layers) {
            st = memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
            break;
        }
        mc_bump size = {NULL, 0, 0};
        if ((st = mc_stage_layout(m, plan, s, &size, sw, err)))
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
                            "cuda: stage %u's weights need %.1f MiB on %s, but only %.1f MiB of %.1f MiB are free", s,
                            size.used / 1048576.0, mc_device_label(sw->device, label, sizeof label), free_b / 1048576.0,
                            total_b / 1048576.0);
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
        if ((st = mc_stage_layout(m, plan, s, &real, sw, err)))
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

struct memra_backend {
    const memra_host *host;
    const memra_model *m;
    memra_plan plan;
    mc_weights *w;
    uint64_t cache_bytes, scratch_bytes; /* of live states */
    mc_config cfg;                       /* the arm's keys: kernel choices and launch settings */
};

typedef struct mc_stage_state {
    int32_t device;
    cudaStream_t stream;
    cudaEvent_t done;     /* this stage's hidden for the current step is ready */
    cudaEvent_t consumed; /* this stage has copied its input hidden for the current step */
    void *arena;
    float *x, *qkv, *att_partial, *att_out, *gu; /* the norms are fused into the GEMVs */
    float *k_cache, *v_cache;                    /* [layer][n_kv][capacity][hd] */
    int32_t *pos;
    unsigned long long *hashes; /* digest scratch: [2][layers][n_kv][chunks] */
    /* stage 0 */
    int32_t *in_token;
    /* last stage */
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
    mc_stage_state st[MEMRA_MAX_STAGES];
    mc_slot slots[MC_MAX_INFLIGHT];
    void *pinned;
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
        return memra_fail(err, MEMRA_E_DEVICE, "no CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(e));
    if (n <= 0)
        return memra_fail(err, MEMRA_E_DEVICE, "no CUDA device: cudaGetDeviceCount found none");
    *out = (uint32_t)n;
    return MEMRA_OK;
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
    if ((st = mc_device_count(host, opts, &n_dev, err)))
        return st;
    if (plan->n_stages == 0 || plan->n_stages > MEMRA_MAX_STAGES)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: plan has %u stages", plan->n_stages);
    for (uint32_t s = 0; s < plan->n_stages; s++) {
        const memra_stage_plan *sp = &plan->stages[s];
        if (sp->device < 0 || (uint32_t)sp->device >= n_dev)
            return memra_fail(err, MEMRA_E_INVALID, "cuda: stage %u is placed on device %d, but there are %u devices",
                              s, sp->device, n_dev);
        if (sp->n_ranks > 1)
            return memra_fail(err, MEMRA_E_UNSUPPORTED,
                              "cuda: stage %u has %u ranks; tensor parallelism needs a "
                              "collective, which the cuda backend does not use yet",
                              s, sp->n_ranks);
        if (sp->layer_end <= sp->layer_begin || sp->layer_end > m->n_layer)
            return memra_fail(err, MEMRA_E_INVALID, "cuda: stage %u has layers [%u, %u) of %u", s, sp->layer_begin,
                              sp->layer_end, m->n_layer);
    }
    if (m->head_dim % 2 || m->n_head % m->n_head_kv || m->head_dim > 1024)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: head_dim %u / heads %u / kv heads %u not supported",
                          m->head_dim, m->n_head, m->n_head_kv);
    for (uint32_t s = 0; s + 1 < plan->n_stages; s++) { /* peer copies between stages' devices */
        int a = plan->stages[s].device, b = plan->stages[s + 1].device, can = 0;
        if (a == b)
            continue;
        if (cudaDeviceCanAccessPeer(&can, b, a) == cudaSuccess && can) {
            cudaError_t e = cudaSetDevice(b);
            if (e != cudaSuccess)
                return mc_cuda_fail(err, e, "cudaSetDevice (peer access)");
            e = cudaDeviceEnablePeerAccess(a, 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled)
                cudaGetLastError();
            else if (e != cudaSuccess)
                return mc_cuda_fail(err, e, "cudaDeviceEnablePeerAccess");
        }
    }
    memra_backend *b = (memra_backend *)calloc(1, sizeof *b);
    if (!b)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
    b->host = host;
    b->m = m;
    b->plan = *plan;
    b->cfg = cfg;
    if ((st = mc_weights_acquire(m, plan, &b->w, err))) {
        free(b);
        return st;
    }
    *out = b;
    return MEMRA_OK;
}

void mc_close(memra_backend *b) {
    if (!b)
        return;
    mc_weights_release(b->w);
    free(b);
}

static void mc_state_destroy(memra_state *s) {
    for (uint32_t i = 0; i < s->n_stages; i++) {
        mc_stage_state *ss = &s->st[i];
        cudaSetDevice(ss->device);
        if (ss->stream)
            cudaStreamSynchronize(ss->stream);
        if (ss->done)
            cudaEventDestroy(ss->done);
        if (ss->consumed)
            cudaEventDestroy(ss->consumed);
        if (ss->sampled_ev)
            cudaEventDestroy(ss->sampled_ev);
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
    free(s);
}

/* Carves a stage's buffers (a sizing pass with base NULL counts bytes). */
static void mc_stage_carve(const memra_model *m, uint32_t nl, bool first, bool last, uint32_t capacity, mc_bump *bp,
                           mc_stage_state *ss, uint64_t *cache_bytes) {
    const uint32_t hd = m->head_dim, hdv = m->head_dim_v;
    const uint64_t qkv = (uint64_t)m->n_head * hd + (uint64_t)m->n_head_kv * (hd + hdv);
    ss->x = (float *)mc_take(bp, (uint64_t)m->n_embd * 4);
    ss->qkv = (float *)mc_take(bp, qkv * 4);
    ss->att_partial = (float *)mc_take(bp, mc_att_partial_floats(m->n_head, hdv, capacity) * 4);
    ss->att_out = (float *)mc_take(bp, (uint64_t)m->n_head * hdv * 4);
    ss->gu = (float *)mc_take(bp, (uint64_t)m->n_ff * 4);
    ss->pos = (int32_t *)mc_take(bp, 16);
    uint64_t chunks = (capacity + MC_DIGEST_ROWS - 1) / MC_DIGEST_ROWS;
    ss->hashes = (unsigned long long *)mc_take(bp, 2ull * nl * m->n_head_kv * chunks * 8);
    uint64_t before = bp->used;
    ss->k_cache = (float *)mc_take(bp, (uint64_t)nl * m->n_head_kv * capacity * hd * 4);
    ss->v_cache = (float *)mc_take(bp, (uint64_t)nl * m->n_head_kv * capacity * hdv * 4);
    *cache_bytes += bp->used - before;
    if (first)
        ss->in_token = (int32_t *)mc_take(bp, 16);
    if (last) {
        ss->logits = (float *)mc_take(bp, (uint64_t)m->n_vocab * 4);
        ss->sampled = (int32_t *)mc_take(bp, 16);
        ss->result = (mc_sample_result *)mc_take(bp, sizeof(mc_sample_result));
        void *sc = mc_take(bp, mc_sampler_scratch_bytes(m->n_vocab));
        if (bp->base)
            mc_sampler_scratch_init(&ss->sampler, sc, m->n_vocab);
    }
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
    for (uint32_t i = 0; i < s->n_stages; i++) {
        const memra_stage_plan *sp = &b->plan.stages[i];
        mc_stage_state *ss = &s->st[i];
        ss->device = sp->device;
        const uint32_t nl = sp->layer_end - sp->layer_begin;
        const bool first = i == 0, last = i == s->n_stages - 1;
        mc_bump size = {NULL, 0, 0};
        uint64_t cache = 0;
        mc_stage_carve(m, nl, first, last, capacity, &size, ss, &cache);
        MC_TRY(cudaSetDevice(ss->device), "cudaSetDevice");
        size_t free_b = 0, total_b = 0;
        MC_TRY(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
        if (size.used > free_b) {
            char label[300];
            st = memra_fail(err, MEMRA_E_NOMEM,
                            "cuda: a state of %u positions needs %.1f MiB on %s for stage %u (KV cache %.1f MiB), but "
                            "only %.1f MiB are free",
                            capacity, size.used / 1048576.0, mc_device_label(ss->device, label, sizeof label), i,
                            cache / 1048576.0, free_b / 1048576.0);
            goto fail;
        }
        MC_TRY(cudaMalloc(&ss->arena, size.used), "cudaMalloc of a state's buffers");
        mc_bump real = {(char *)ss->arena, 0, size.used};
        cache = 0;
        mc_stage_carve(m, nl, first, last, capacity, &real, ss, &cache);
        s->cache_bytes += cache;
        s->scratch_bytes += size.used - cache;
        if (mc_attention_path(&b->cfg, m->n_head, m->n_head_kv, m->head_dim, m->head_dim_v) != MC_ATT_PATH_UNFUSED)
            MC_TRY(mc_attention_fused_prepare(&b->cfg, m->n_head, m->n_head_kv, m->head_dim, m->head_dim_v),
                   "setting the fused attention kernel's shared-memory limit");
        MC_TRY(mc_gemv_prepare(), "readying the GEMV kernels (multiprocessor count, shared-memory limit)");
        if (b->cfg.trigger != MC_TRIGGER_DEFAULT)
            MC_TRY(mc_trigger_prepare(), "readying the trigger mask copies");
        MC_TRY(cudaStreamCreateWithFlags(&ss->stream, cudaStreamNonBlocking), "cudaStreamCreate");
        /* Zero on the state's own stream and wait: a plain cudaMemset goes to the legacy default
         * stream, which a cudaStreamNonBlocking stream does not wait for, so the first step's
         * input-token copy (or its kernels) could land before the zeroing and be overwritten. */
        MC_TRY(cudaMemsetAsync(ss->arena, 0, size.used, ss->stream), "cudaMemsetAsync of a state's buffers");
        MC_TRY(cudaStreamSynchronize(ss->stream), "cudaStreamSynchronize (state zeroing)");
        MC_TRY(cudaEventCreateWithFlags(&ss->done, cudaEventDisableTiming), "cudaEventCreate");
        MC_TRY(cudaEventCreateWithFlags(&ss->consumed, cudaEventDisableTiming), "cudaEventCreate");
        if (last)
            MC_TRY(cudaEventCreateWithFlags(&ss->sampled_ev, cudaEventDisableTiming), "cudaEventCreate");
    }
    {
        const size_t per = ((size_t)m->n_vocab * 4 + sizeof(mc_sample_result) + 16 + 255) & ~(size_t)255;
        MC_TRY(cudaSetDevice(s->st[s->n_stages - 1].device), "cudaSetDevice");
        MC_TRY(cudaMallocHost(&s->pinned, per * max_inflight), "cudaMallocHost of readback buffers");
        for (uint32_t k = 0; k < max_inflight; k++) {
            char *p = (char *)s->pinned + per * k;
            s->slots[k].host_logits = (float *)p;
            s->slots[k].host_res = (mc_sample_result *)(p + (size_t)m->n_vocab * 4);
            s->slots[k].host_token = (int32_t *)(p + (size_t)m->n_vocab * 4 + sizeof(mc_sample_result));
            MC_TRY(cudaEventCreateWithFlags(&s->slots[k].ev, cudaEventDisableTiming), "cudaEventCreate");
        }
        /* An event can only be recorded on a stream of the device it was created on. */
        MC_TRY(cudaSetDevice(s->st[0].device), "cudaSetDevice");
        for (uint32_t k = 0; k < max_inflight; k++)
            MC_TRY(cudaEventCreateWithFlags(&s->slots[k].ev_first, cudaEventDisableTiming), "cudaEventCreate");
    }
    b->cache_bytes += s->cache_bytes;
    b->scratch_bytes += s->scratch_bytes;
    *out = s;
    return MEMRA_OK;
fail:
    mc_state_destroy(s);
    return st;
}

void mc_state_free(memra_backend *b, memra_state *s) {
    if (!s)
        return;
    b->cache_bytes -= s->cache_bytes;
    b->scratch_bytes -= s->scratch_bytes;
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
    mc_stage_state *s0 = &s->st[0], *sl = &s->st[s->n_stages - 1];
    mc_slot *slot = &s->slots[(s->head + s->inflight) % s->max_inflight];
    if (args->token == MEMRA_TOKEN_FROM_DEVICE) {
        if (!s->has_device_token)
            return memra_fail(err, MEMRA_E_INVALID,
                              "cuda: token from device, but no earlier step of this state sampled one");
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
    if (args->token < 0 || args->token >= (int64_t)b->m->n_vocab)
        return memra_fail(err, MEMRA_E_RANGE, "cuda: token %lld out of range [0, %u)", (long long)args->token,
                          b->m->n_vocab);
    *slot->host_token = (int32_t)args->token;
    MC_TRY(cudaSetDevice(s0->device), "cudaSetDevice");
    MC_TRY(cudaMemcpyAsync(s0->in_token, slot->host_token, 4, cudaMemcpyHostToDevice, s0->stream),
           "cudaMemcpyAsync (input token)");
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

/* One stage's part of the body: [embed | receive hidden], layers, commit, [head, sample]. */
static memra_status mc_stage_body(memra_backend *b, memra_state *s, uint32_t i, const memra_sample_cfg *sample,
                                  bool capture, memra_error *err) {
    const memra_model *m = b->m;
    const mc_stage_weights *sw = &b->w->stages[i];
    mc_stage_state *ss = &s->st[i];
    cudaStream_t q = ss->stream;
    const bool last = i == s->n_stages - 1;
    const uint32_t hd = m->head_dim, hdv = m->head_dim_v;
    MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
    /* Our hidden is read by the next stage's copy of the previous step: wait for it. */
    if (!capture && !last)
        MC_RET(cudaStreamWaitEvent(q, s->st[i + 1].consumed, 0), "cudaStreamWaitEvent (hidden consumed)");
    /* An arm whose trigger mask is not the default sets it for this stage's kernels and puts the
     * default back after them (stream-ordered copies, captured with the body). */
    const bool own_trigger = b->cfg.trigger != MC_TRIGGER_DEFAULT;
    if (own_trigger)
        MC_RET(mc_trigger_enqueue(b->cfg.trigger, q), "enqueueing the arm's trigger mask");
    if (i == 0) {
        MC_RET(mc_embed(&sw->embd, ss->in_token, ss->x, q), "launch of the embedding kernel");
    } else {
        mc_stage_state *prev = &s->st[i - 1];
        MC_RET(cudaStreamWaitEvent(q, prev->done, 0), "cudaStreamWaitEvent (hidden ready)");
        /* Same device: a device copy; across devices: a peer copy through unified addressing
         * (cudaMemcpyPeerAsync cannot be captured into a graph). */
        MC_RET(cudaMemcpyAsync(ss->x, prev->x, (size_t)m->n_embd * 4, cudaMemcpyDefault, q),
               "cudaMemcpyAsync (hidden hand-off)");
        MC_RET(cudaEventRecord(ss->consumed, q), "cudaEventRecord (hidden consumed)");
    }
    const uint32_t nl = sw->layer_end - sw->layer_begin;
    const uint32_t kv_plane = m->n_head_kv * s->capacity;
    const mc_config *c = &b->cfg;
    const bool fused = mc_attention_path(c, m->n_head, m->n_head_kv, hd, hdv) != MC_ATT_PATH_UNFUSED;
    for (uint32_t l = 0; l < nl; l++) {
        const mc_layer *L = &sw->layers[l];
        float *kc = ss->k_cache + (size_t)l * kv_plane * hd, *vc = ss->v_cache + (size_t)l * kv_plane * hdv;
        mc_rope_args ra = {m->n_head,
                           m->n_head_kv,
                           hd,
                           hdv,
                           s->capacity,
                           m->rope_pairing == MEMRA_ROPE_NEOX,
                           1.0f / m->rope_linear_factor,
                           sw->freqs,
                           L->q_norm,
                           L->k_norm,
                           m->rms_eps};
        MC_RET(mc_gemv(c, &L->wqkv, ss->x, L->attn_norm, m->rms_eps, L->bqkv, NULL, ss->qkv, q),
               "launch of the qkv gemv (with the attention norm)");
        if (fused) {
            MC_RET(mc_attention_fused(c, &ra, ss->qkv, kc, vc, ss->att_out, ss->pos, q),
                   "launch of attention (fused q/k norm, rope, kv append)");
        } else {
            MC_RET(mc_rope_kv(&ra, ss->qkv, kc, vc, ss->pos, q), "launch of rope/kv append");
            MC_RET(mc_attention(ss->qkv, kc, vc, ss->att_partial, ss->att_out, m->n_head, m->n_head_kv, hd, hdv,
                                s->capacity, ss->pos, q),
                   "launch of attention");
        }
        MC_RET(mc_gemv(c, &L->wo, ss->att_out, NULL, 0.0f, NULL, ss->x, ss->x, q),
               "launch of the output-projection gemv");
        MC_RET(mc_gemv_swiglu(c, &L->wgu, ss->x, L->ffn_norm, m->rms_eps, ss->gu, q),
               "launch of the gate/up gemv (with the ffn norm)");
        MC_RET(mc_gemv(c, &L->wdown, ss->gu, NULL, 0.0f, NULL, ss->x, ss->x, q), "launch of the down gemv");
    }
    MC_RET(mc_commit(ss->pos, q), "launch of the commit kernel");
    if (!last) {
        if (own_trigger)
            MC_RET(mc_trigger_enqueue(MC_TRIGGER_DEFAULT, q), "enqueueing the default trigger mask");
        MC_RET(cudaEventRecord(ss->done, q), "cudaEventRecord (hidden ready)");
        return MEMRA_OK;
    }
    MC_RET(mc_gemv(c, &sw->head, ss->x, sw->out_norm, m->rms_eps, NULL, NULL, ss->logits, q),
           "launch of the head gemv (with the final norm)");
    if (own_trigger)
        MC_RET(mc_trigger_enqueue(MC_TRIGGER_DEFAULT, q), "enqueueing the default trigger mask");
    if (sample) {
        MC_RET(mc_sample(ss->logits, &ss->sampler, sample, ss->pos, ss->sampled, ss->result, q),
               "launch of the device sampler");
        MC_RET(cudaEventRecord(ss->sampled_ev, q), "cudaEventRecord (sampled)");
    }
    return MEMRA_OK;
}

memra_status mc_body(memra_backend *b, memra_state *s, const memra_sample_cfg *sample, bool capture, memra_error *err) {
    memra_status st = MEMRA_OK;
    for (uint32_t i = 0; i < s->n_stages; i++)
        if ((st = mc_stage_body(b, s, i, sample, capture, err)))
            return mc_quarantine_fail(s, err);
    if (capture && s->n_stages > 1) { /* join every forked stream back into stage 0's */
        mc_stage_state *sl = &s->st[s->n_stages - 1];
        MC_TRY(cudaSetDevice(sl->device), "cudaSetDevice");
        MC_TRY(cudaEventRecord(sl->done, sl->stream), "cudaEventRecord (join)");
        MC_TRY(cudaSetDevice(s->st[0].device), "cudaSetDevice");
        MC_TRY(cudaStreamWaitEvent(s->st[0].stream, sl->done, 0), "cudaStreamWaitEvent (join)");
    }
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

memra_status mc_finish(memra_backend *b, memra_state *s, const memra_step_args *args, bool after_graph,
                       memra_error *err) {
    memra_status st = MEMRA_OK;
    mc_stage_state *sl = &s->st[s->n_stages - 1];
    cudaStream_t q = after_graph ? s->st[0].stream : sl->stream;
    int32_t dev = after_graph ? s->st[0].device : sl->device;
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

memra_status mc_step_end(memra_backend *b, memra_state *s, float *logits, memra_step_result *out, memra_error *err) {
    memra_status st = MEMRA_OK;
    if (s->inflight == 0)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: step_end with no step in flight");
    mc_slot *slot = &s->slots[s->head];
    s->head = (s->head + 1) % s->max_inflight;
    s->inflight--;
    MC_TRY(cudaEventSynchronize(slot->pending), "the step (cudaEventSynchronize)");
    if (s->quarantined)
        return memra_fail(err, MEMRA_E_QUARANTINED, "cuda: the state failed earlier (%s); free it", s->why);
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
    for (uint32_t i = 0; i < s->n_stages; i++) {
        MC_TRY(cudaSetDevice(s->st[i].device), "cudaSetDevice");
        MC_TRY(cudaStreamSynchronize(s->st[i].stream), "cudaStreamSynchronize");
    }
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

memra_status mc_digest(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32], memra_error *err) {
    memra_status st = MEMRA_OK;
    const memra_model *m = b->m;
    if (s->quarantined)
        return memra_fail(err, MEMRA_E_QUARANTINED, "cuda: the state failed earlier (%s); free it", s->why);
    if (s->inflight)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: digest with %u steps in flight", s->inflight);
    if ((st = mc_sync_all(s, err)))
        return st;
    mc_stage_state *sl = &s->st[s->n_stages - 1];
    if (kind == MEMRA_DIGEST_LOGITS || kind == MEMRA_DIGEST_HIDDEN) {
        size_t n = kind == MEMRA_DIGEST_LOGITS ? m->n_vocab : m->n_embd;
        float *h = (float *)malloc(n * 4);
        if (!h)
            return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
        MC_TRY(cudaSetDevice(sl->device), "cudaSetDevice");
        cudaError_t e = cudaMemcpy(h, kind == MEMRA_DIGEST_LOGITS ? sl->logits : sl->x, n * 4, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess)
            b->host->sha256(h, n * 4, out);
        free(h);
        MC_TRY(e, "cudaMemcpy (digest readback)");
        return MEMRA_OK;
    }
    if (kind != MEMRA_DIGEST_CACHE)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: unknown digest kind %d", (int)kind);
    {
        /* Per stage: hashes of K and V chunks on the device; the host hashes them layer by layer
         * (K then V), so any split of the layers gives the same digest. */
        const uint64_t chunks = (s->capacity + MC_DIGEST_ROWS - 1) / MC_DIGEST_ROWS;
        memra_sha256_ctx *ctx = b->host->sha256_new();
        if (!ctx)
            return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
        uint32_t pos = s->position;
        b->host->sha256_update(ctx, &pos, 4);
        unsigned long long *h = NULL;
        for (uint32_t i = 0; i < s->n_stages && !st; i++) {
            mc_stage_state *ss = &s->st[i];
            const mc_stage_weights *sw = &b->w->stages[i];
            const uint32_t nl = sw->layer_end - sw->layer_begin;
            const uint64_t per_layer = (uint64_t)m->n_head_kv * chunks;
            const uint64_t n = 2 * nl * per_layer;
            free(h);
            h = (unsigned long long *)malloc(n * 8);
            if (!h) {
                st = memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
                break;
            }
            cudaError_t e = cudaSetDevice(ss->device);
            if (e == cudaSuccess)
                e = mc_digest_planes(ss->k_cache, nl * m->n_head_kv, s->capacity, m->head_dim, ss->pos, ss->hashes,
                                     ss->stream);
            if (e == cudaSuccess)
                e = mc_digest_planes(ss->v_cache, nl * m->n_head_kv, s->capacity, m->head_dim_v, ss->pos,
                                     ss->hashes + nl * per_layer, ss->stream);
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(h, ss->hashes, n * 8, cudaMemcpyDeviceToHost, ss->stream);
            if (e == cudaSuccess)
                e = cudaStreamSynchronize(ss->stream);
            if (e != cudaSuccess) {
                st = mc_cuda_fail(err, e, "the cache digest");
                break;
            }
            for (uint32_t l = 0; l < nl; l++) {
                b->host->sha256_update(ctx, h + l * per_layer, per_layer * 8);
                b->host->sha256_update(ctx, h + (nl + l) * per_layer, per_layer * 8);
            }
        }
        free(h);
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
    for (uint32_t i = 0; i < dst->n_stages; i++) {
        const mc_stage_state *a = &src->st[i];
        mc_stage_state *d = &dst->st[i];
        const mc_stage_weights *sw = &b->w->stages[i];
        const uint32_t nl = sw->layer_end - sw->layer_begin, planes = nl * m->n_head_kv;
        cudaStream_t q = d->stream;
        MC_TRY(cudaSetDevice(d->device), "cudaSetDevice");
        MC_TRY(cudaMemcpyAsync(d->pos, a->pos, 4, cudaMemcpyDeviceToDevice, q), "restore: position");
        MC_TRY(cudaMemcpyAsync(d->x, a->x, (size_t)m->n_embd * 4, cudaMemcpyDeviceToDevice, q), "restore: hidden");
        if (src->position > 0) {
            MC_TRY(cudaMemcpy2DAsync(d->k_cache, (size_t)dst->capacity * m->head_dim * 4, a->k_cache,
                                     (size_t)src->capacity * m->head_dim * 4, (size_t)src->position * m->head_dim * 4,
                                     planes, cudaMemcpyDeviceToDevice, q),
                   "restore: K cache");
            MC_TRY(cudaMemcpy2DAsync(d->v_cache, (size_t)dst->capacity * m->head_dim_v * 4, a->v_cache,
                                     (size_t)src->capacity * m->head_dim_v * 4,
                                     (size_t)src->position * m->head_dim_v * 4, planes, cudaMemcpyDeviceToDevice, q),
                   "restore: V cache");
        }
        if (i == 0)
            MC_TRY(cudaMemcpyAsync(d->in_token, a->in_token, 4, cudaMemcpyDeviceToDevice, q), "restore: token");
        if (i == dst->n_stages - 1) {
            MC_TRY(cudaMemcpyAsync(d->logits, a->logits, (size_t)m->n_vocab * 4, cudaMemcpyDeviceToDevice, q),
                   "restore: logits");
            MC_TRY(cudaMemcpyAsync(d->sampled, a->sampled, 4, cudaMemcpyDeviceToDevice, q), "restore: sampled token");
            MC_TRY(cudaMemcpyAsync(d->result, a->result, sizeof(mc_sample_result), cudaMemcpyDeviceToDevice, q),
                   "restore: sample result");
        }
        MC_TRY(cudaStreamSynchronize(q), "restore (cudaStreamSynchronize)");
    }
    dst->position = src->position;
    dst->has_device_token = src->has_device_token;
    dst->sampled_ev_live = false; /* the sampled token was copied on dst's stream and synchronised */
    return MEMRA_OK;
fail:
    mc_quarantine_fail(dst, err);
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
    for (uint32_t i = 0; i < b->plan.n_stages; i++) {
        int32_t d = b->plan.stages[i].device;
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

void *mc_ext_stream(memra_backend *b, memra_state *s) { return (void *)s->st[0].stream; }
int32_t mc_ext_device(memra_backend *b, memra_state *s) { return s->st[0].device; }
