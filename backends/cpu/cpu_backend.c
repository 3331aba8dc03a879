/* cpu_backend.c: the `cpu` backend plugin, memra's reference: one-token decode of llama, qwen2
 * and qwen3 on the host, weights read in place from the mapped file.
 *
 * Stages run in order on virtual devices: each stage has its own activations and its own KV
 * cache for its layers, and hands the hidden state to the next stage by an exact copy, so any
 * split gives the same bits as one stage. Work is split over output rows (attention: over heads)
 * by a persistent thread pool; each output element is computed by one thread in a fixed order
 * (cpu_kernels.h), so any thread count gives the same bits.
 *
 * A step is computed synchronously in step_begin and its result queued in a ring of
 * max_inflight slots that step_end drains in order. The step is a transaction: the KV rows of the
 * new position are written past the committed prefix, and position, hidden, logits and the carried
 * token change only once the head and the sampler have succeeded.
 *
 * Per token the backend reads every weight matrix once (the mapped file's weight bytes, the
 * embedding row only), and per layer reads K and V rows [0, pos] and writes one K and one V row.
 *
 * RoPE angles: theta_i = (pos / linear_factor) * freq_i computed in double from the float
 * freq_i of memra_model_rope_freq; cos and sin are taken in double (libm) and rounded once to
 * float. The rotation itself is float. */
#include <math.h>
#include <stdio.h>
#include <fenv.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_kernels.h"
#include "cpu_pool.h"
#include "memra/options.h"
#include "memra/ext.h"
#include "memra/gguf.h"
#include "memra/plugin.h"
#include "memra/sampling.h"

#define CPU_DEFAULT_VDEVICES 8u
#define CPU_MAX_VDEVICES 64u
#define CPU_MAX_THREADS 256u
#define CPU_DEFAULT_GRAIN 32768u

static const memra_option_spec cpu_options[] = {
    {.key = "threads",
     .default_value = "",
     .help = "worker threads (default: the online CPUs); results do not depend on it"},
    {.key = "vdevices",
     .default_value = "8",
     .help = "virtual devices offered to the placement (stages may sit on any of them)"},
    {.key = "grain",
     .default_value = "32768",
     .help = "multiply-adds below which a task runs on one thread; 0 splits every task"},
};

/* The weights of one layer as the kernels read them. */
typedef struct cpu_layer {
    cpu_matrix wq, wk, wv, wo, w_gate, w_up, w_down;
    const float *attn_norm, *ffn_norm;
    const float *bq, *bk, *bv;    /* NULL when absent */
    const float *q_norm, *k_norm; /* NULL when absent */
} cpu_layer;

/* One stage's activations: its own memory on its virtual device. */
typedef struct cpu_stage {
    uint32_t layer_begin, layer_end;
    int32_t device;
    float *x;         /* residual stream, n_embd */
    float *xn;        /* normed input, n_embd */
    float *q;         /* n_head * head_dim */
    float *k, *v;     /* the new position's K and V rows */
    float *att;       /* n_head * head_dim_v */
    float *gate, *up; /* n_ff */
} cpu_stage;

struct memra_backend {
    const memra_host *host;
    const memra_model *m;
    uint32_t n_threads, n_vdevices, grain;
    cpu_pool *pool;
    cpu_layer *layers;
    cpu_matrix tok_embd, output;
    const float *output_norm;
    uint32_t n_stages;
    cpu_stage *stages;
    float *head_in;   /* normed final hidden, n_embd */
    float *head_out;  /* logits before commit, n_vocab */
    float *rope_freq; /* head_dim / 2 */
    float *rope_cos, *rope_sin;
    uint32_t q_dim, kv_dim, v_dim, att_dim;
    uint64_t scratch_bytes;
    uint64_t live_cache_bytes, live_state_bytes;
};

typedef struct cpu_slot {
    float *logits;
    int64_t token;
    uint32_t position;
} cpu_slot;

struct memra_state {
    uint32_t capacity, max_inflight;
    uint32_t position;
    float **k_cache, **v_cache; /* per layer: capacity rows of kv_dim / v_dim floats */
    float **stage_cache;        /* per stage: the block its layers' caches live in */
    float *hidden, *logits;
    float *scores; /* n_head * capacity */
    void *sample_scratch;
    int64_t carried_token; /* -1 when the previous step did not sample */
    bool quarantined;
    char quarantine_reason[256];
    cpu_slot *ring;
    uint32_t ring_head, ring_count;
    memra_state_stats stats;
    uint64_t cache_bytes, other_bytes;
};

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                      */

static uint32_t online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        return 1;
    return n > (long)CPU_MAX_THREADS ? CPU_MAX_THREADS : (uint32_t)n;
}

typedef struct cpu_config {
    uint32_t threads, vdevices, grain;
} cpu_config;

static memra_status read_options(const memra_options *opts, cpu_config *cfg, memra_error *err) {
    memra_status st = memra_options_u32(opts, "threads", online_cpus(), 1, CPU_MAX_THREADS, &cfg->threads, err);
    if (st != MEMRA_OK)
        return st;
    st = memra_options_u32(opts, "vdevices", CPU_DEFAULT_VDEVICES, 1, CPU_MAX_VDEVICES, &cfg->vdevices, err);
    if (st != MEMRA_OK)
        return st;
    return memra_options_u32(opts, "grain", CPU_DEFAULT_GRAIN, 0, UINT32_MAX, &cfg->grain, err);
}

static memra_status cpu_device_count(const memra_host *host, const memra_options *opts, uint32_t *out,
                                     memra_error *err) {
    (void)host;
    cpu_config cfg;
    memra_status st = read_options(opts, &cfg, err);
    if (st != MEMRA_OK)
        return st;
    *out = cfg.vdevices;
    return MEMRA_OK;
}

static memra_status cpu_resolve_options(const memra_host *host, const memra_options *opts, memra_options *resolved,
                                        memra_error *err) {
    (void)host;
    cpu_config cfg;
    memra_status st = read_options(opts, &cfg, err);
    if (st != MEMRA_OK)
        return st;
    *resolved = *opts;
    char buf[16];
    snprintf(buf, sizeof buf, "%u", cfg.threads);
    if ((st = memra_options_set(resolved, "threads", buf, err)) != MEMRA_OK)
        return st;
    snprintf(buf, sizeof buf, "%u", cfg.vdevices);
    if ((st = memra_options_set(resolved, "vdevices", buf, err)) != MEMRA_OK)
        return st;
    snprintf(buf, sizeof buf, "%u", cfg.grain);
    return memra_options_set(resolved, "grain", buf, err);
}

/* ------------------------------------------------------------------------------------------ */
/* Open: bind weights in place, check the plan, allocate each stage's activations.             */

static memra_status bind_matrix(const memra_weight *w, uint64_t rows, uint64_t cols, cpu_matrix *out,
                                memra_error *err) {
    if (!w->data)
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: a required matrix is absent");
    if (w->rows != rows || w->cols != cols)
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: tensor '%s' is %llux%llu, expected %llux%llu", w->name,
                          (unsigned long long)w->rows, (unsigned long long)w->cols, (unsigned long long)rows,
                          (unsigned long long)cols);
    size_t align = 1;
    switch (w->type) {
    case MEMRA_TYPE_F32: align = 4; break;
    case MEMRA_TYPE_F16:
    case MEMRA_TYPE_BF16: align = 2; break;
    case MEMRA_TYPE_Q8_0:
        if (cols % MEMRA_Q8_0_BLOCK != 0)
            return memra_fail(err, MEMRA_E_FORMAT, "cpu: tensor '%s' is Q8_0 with %llu columns, not a multiple of 32",
                              w->name, (unsigned long long)cols);
        break;
    default:
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: tensor '%s' has type %s, which memra does not support yet",
                          w->name, memra_tensor_type_name(w->type));
    }
    if ((uintptr_t)w->data % align != 0)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: tensor '%s' (%s) is not %zu-byte aligned in the file",
                          w->name, memra_tensor_type_name(w->type), align);
    uint64_t row_bytes = 0;
    memra_status st = memra_tensor_row_bytes(w->type, cols, &row_bytes, err);
    if (st != MEMRA_OK)
        return st;
    if (rows > UINT32_MAX || cols > UINT32_MAX || row_bytes * rows > w->n_bytes)
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: tensor '%s' holds %llu bytes, too few for its shape", w->name,
                          (unsigned long long)w->n_bytes);
    out->data = w->data;
    out->type = w->type;
    out->rows = (uint32_t)rows;
    out->cols = (uint32_t)cols;
    out->row_bytes = (size_t)row_bytes;
    return MEMRA_OK;
}

/* A vector (norm weight, bias) of n F32 values, or NULL when absent and optional. */
static memra_status bind_vector(const memra_weight *w, uint64_t n, bool optional, const float **out, memra_error *err) {
    *out = NULL;
    if (!w->data) {
        if (optional)
            return MEMRA_OK;
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: a required vector is absent");
    }
    if (w->type != MEMRA_TYPE_F32)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: vector '%s' has type %s; the cpu backend reads F32 vectors",
                          w->name, memra_tensor_type_name(w->type));
    if (w->rows * w->cols != n || w->n_bytes < n * sizeof(float))
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: vector '%s' has %llu elements, expected %llu", w->name,
                          (unsigned long long)(w->rows * w->cols), (unsigned long long)n);
    if ((uintptr_t)w->data % 4 != 0)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: vector '%s' is not 4-byte aligned in the file", w->name);
    *out = w->data;
    return MEMRA_OK;
}

static memra_status bind_layer(const memra_model *m, uint32_t il, cpu_layer *L, memra_error *err) {
    const memra_layer *src = &m->layers[il];
    uint32_t q_dim = m->n_head * m->head_dim, kv_dim = m->n_head_kv * m->head_dim;
    uint32_t v_dim = m->n_head_kv * m->head_dim_v, att_dim = m->n_head * m->head_dim_v;
    memra_status st;
    if ((st = bind_matrix(&src->wq, q_dim, m->n_embd, &L->wq, err)) != MEMRA_OK ||
        (st = bind_matrix(&src->wk, kv_dim, m->n_embd, &L->wk, err)) != MEMRA_OK ||
        (st = bind_matrix(&src->wv, v_dim, m->n_embd, &L->wv, err)) != MEMRA_OK ||
        (st = bind_matrix(&src->wo, m->n_embd, att_dim, &L->wo, err)) != MEMRA_OK ||
        (st = bind_matrix(&src->w_gate, m->n_ff, m->n_embd, &L->w_gate, err)) != MEMRA_OK ||
        (st = bind_matrix(&src->w_up, m->n_ff, m->n_embd, &L->w_up, err)) != MEMRA_OK ||
        (st = bind_matrix(&src->w_down, m->n_embd, m->n_ff, &L->w_down, err)) != MEMRA_OK ||
        (st = bind_vector(&src->attn_norm, m->n_embd, false, &L->attn_norm, err)) != MEMRA_OK ||
        (st = bind_vector(&src->ffn_norm, m->n_embd, false, &L->ffn_norm, err)) != MEMRA_OK ||
        (st = bind_vector(&src->bq, q_dim, true, &L->bq, err)) != MEMRA_OK ||
        (st = bind_vector(&src->bk, kv_dim, true, &L->bk, err)) != MEMRA_OK ||
        (st = bind_vector(&src->bv, v_dim, true, &L->bv, err)) != MEMRA_OK ||
        (st = bind_vector(&src->q_norm, m->head_dim, true, &L->q_norm, err)) != MEMRA_OK ||
        (st = bind_vector(&src->k_norm, m->head_dim, true, &L->k_norm, err)) != MEMRA_OK) {
        memra_error_prefix(err, "layer %u", il);
        return st;
    }
    return MEMRA_OK;
}

static memra_status check_model(const memra_model *m, memra_error *err) {
    if (m->arch != MEMRA_ARCH_LLAMA && m->arch != MEMRA_ARCH_QWEN2 && m->arch != MEMRA_ARCH_QWEN3)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: architecture '%s' is not supported",
                          m->arch_name ? m->arch_name : "?");
    if (m->n_layer == 0 || m->n_embd == 0 || m->n_vocab == 0 || m->n_head == 0 || m->n_head_kv == 0 ||
        m->head_dim == 0 || m->head_dim_v == 0 || m->n_ff == 0)
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: the model has a zero dimension");
    if (m->n_head % m->n_head_kv != 0)
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: n_head %u is not a multiple of n_head_kv %u", m->n_head,
                          m->n_head_kv);
    if (m->head_dim % 2 != 0)
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: head_dim %u is odd; RoPE rotates pairs", m->head_dim);
    if (!(m->rope_linear_factor > 0.0f))
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: rope linear factor %g is not positive",
                          (double)m->rope_linear_factor);
    return MEMRA_OK;
}

static memra_status check_plan(const memra_model *m, const memra_plan *plan, uint32_t n_vdevices, memra_error *err) {
    if (plan->n_stages == 0 || plan->n_stages > MEMRA_MAX_STAGES)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: the plan has %u stages", plan->n_stages);
    uint32_t next = 0;
    for (uint32_t s = 0; s < plan->n_stages; s++) {
        const memra_stage_plan *sp = &plan->stages[s];
        if (sp->layer_begin != next || sp->layer_end <= sp->layer_begin || sp->layer_end > m->n_layer)
            return memra_fail(err, MEMRA_E_INVALID,
                              "cpu: stage %u covers layers [%u, %u), expected to start at %u "
                              "and end after it, within %u layers",
                              s, sp->layer_begin, sp->layer_end, next, m->n_layer);
        next = sp->layer_end;
        if (sp->n_ranks > 1)
            return memra_fail(err, MEMRA_E_UNSUPPORTED,
                              "cpu: tensor parallelism (tp=%u) needs a collective, which comes with the collectives "
                              "issue",
                              sp->n_ranks);
        if (sp->device < 0 || (uint32_t)sp->device >= n_vdevices)
            return memra_fail(err, MEMRA_E_INVALID,
                              "cpu: stage %u is on device %d; the cpu backend offers %u "
                              "virtual devices (vdevices=)",
                              s, sp->device, n_vdevices);
    }
    if (next != m->n_layer)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: the plan's stages end at layer %u of %u", next, m->n_layer);
    return MEMRA_OK;
}

static void *alloc_floats(memra_backend *b, size_t n) {
    void *p = calloc(n ? n : 1, sizeof(float));
    if (p)
        b->scratch_bytes += n * sizeof(float);
    return p;
}

static void cpu_close(memra_backend *b) {
    if (!b)
        return;
    cpu_pool_free(b->pool);
    for (uint32_t s = 0; b->stages && s < b->n_stages; s++) {
        cpu_stage *st = &b->stages[s];
        free(st->x);
        free(st->xn);
        free(st->q);
        free(st->k);
        free(st->v);
        free(st->att);
        free(st->gate);
        free(st->up);
    }
    free(b->stages);
    free(b->layers);
    free(b->head_in);
    free(b->head_out);
    free(b->rope_freq);
    free(b->rope_cos);
    free(b->rope_sin);
    free(b);
}

static memra_status cpu_open(const memra_host *host, const memra_model *m, const memra_plan *plan,
                             const memra_options *opts, memra_backend **out, memra_error *err) {
    *out = NULL;
    cpu_kernels_init();
    memra_backend *b = calloc(1, sizeof *b);
    if (!b)
        return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory");
    b->host = host;
    b->m = m;
    cpu_config cfg;
    memra_status st = read_options(opts, &cfg, err);
    if (st != MEMRA_OK)
        goto fail;
    b->n_threads = cfg.threads;
    b->n_vdevices = cfg.vdevices;
    b->grain = cfg.grain;
    if ((st = check_model(m, err)) != MEMRA_OK || (st = check_plan(m, plan, b->n_vdevices, err)) != MEMRA_OK)
        goto fail;
    b->q_dim = m->n_head * m->head_dim;
    b->kv_dim = m->n_head_kv * m->head_dim;
    b->v_dim = m->n_head_kv * m->head_dim_v;
    b->att_dim = m->n_head * m->head_dim_v;

    st = MEMRA_E_NOMEM;
    b->layers = calloc(m->n_layer, sizeof *b->layers);
    if (!b->layers)
        goto fail_nomem;
    for (uint32_t il = 0; il < m->n_layer; il++)
        if ((st = bind_layer(m, il, &b->layers[il], err)) != MEMRA_OK)
            goto fail;
    if ((st = bind_matrix(&m->tok_embd, m->n_vocab, m->n_embd, &b->tok_embd, err)) != MEMRA_OK ||
        (st = bind_matrix(&m->output, m->n_vocab, m->n_embd, &b->output, err)) != MEMRA_OK ||
        (st = bind_vector(&m->output_norm, m->n_embd, false, &b->output_norm, err)) != MEMRA_OK)
        goto fail;

    uint32_t half = m->head_dim / 2;
    b->rope_freq = alloc_floats(b, half);
    b->rope_cos = alloc_floats(b, half);
    b->rope_sin = alloc_floats(b, half);
    b->head_in = alloc_floats(b, m->n_embd);
    b->head_out = alloc_floats(b, m->n_vocab);
    if (!b->rope_freq || !b->rope_cos || !b->rope_sin || !b->head_in || !b->head_out)
        goto fail_nomem;
    for (uint32_t i = 0; i < half; i++)
        b->rope_freq[i] = memra_model_rope_freq(m, i);

    b->n_stages = plan->n_stages;
    b->stages = calloc(plan->n_stages, sizeof *b->stages);
    if (!b->stages)
        goto fail_nomem;
    for (uint32_t s = 0; s < plan->n_stages; s++) {
        cpu_stage *sg = &b->stages[s];
        sg->layer_begin = plan->stages[s].layer_begin;
        sg->layer_end = plan->stages[s].layer_end;
        sg->device = plan->stages[s].device;
        sg->x = alloc_floats(b, m->n_embd);
        sg->xn = alloc_floats(b, m->n_embd);
        sg->q = alloc_floats(b, b->q_dim);
        sg->k = alloc_floats(b, b->kv_dim);
        sg->v = alloc_floats(b, b->v_dim);
        sg->att = alloc_floats(b, b->att_dim);
        sg->gate = alloc_floats(b, m->n_ff);
        sg->up = alloc_floats(b, m->n_ff);
        if (!sg->x || !sg->xn || !sg->q || !sg->k || !sg->v || !sg->att || !sg->gate || !sg->up)
            goto fail_nomem;
    }
    if ((st = cpu_pool_new(b->n_threads, b->grain, &b->pool, err)) != MEMRA_OK)
        goto fail;
    *out = b;
    return MEMRA_OK;

fail_nomem:
    st = memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for the model's activations");
fail:
    cpu_close(b);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* States                                                                                       */

static void cpu_state_free(memra_backend *b, memra_state *s) {
    if (!s)
        return;
    if (b) {
        b->live_cache_bytes -= s->cache_bytes;
        b->live_state_bytes -= s->other_bytes;
    }
    for (uint32_t i = 0; s->stage_cache && b && i < b->n_stages; i++)
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

static memra_status cpu_state_new(memra_backend *b, uint32_t capacity, uint32_t max_inflight, memra_state **out,
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
    s->k_cache = calloc(m->n_layer, sizeof *s->k_cache);
    s->v_cache = calloc(m->n_layer, sizeof *s->v_cache);
    s->stage_cache = calloc(b->n_stages, sizeof *s->stage_cache);
    s->ring = calloc(max_inflight, sizeof *s->ring);
    if (!s->k_cache || !s->v_cache || !s->stage_cache || !s->ring)
        goto nomem;
    /* Each stage's layers keep their caches in one block of that stage's memory. */
    size_t per_layer = (size_t)capacity * ((size_t)b->kv_dim + b->v_dim);
    for (uint32_t i = 0; i < b->n_stages; i++) {
        const cpu_stage *sg = &b->stages[i];
        size_t n_layers = sg->layer_end - sg->layer_begin;
        if (per_layer > SIZE_MAX / sizeof(float) / n_layers)
            goto nomem;
        s->stage_cache[i] = calloc(per_layer * n_layers, sizeof(float));
        if (!s->stage_cache[i])
            goto nomem;
        s->cache_bytes += per_layer * n_layers * sizeof(float);
        for (uint32_t il = sg->layer_begin; il < sg->layer_end; il++) {
            s->k_cache[il] = s->stage_cache[i] + (il - sg->layer_begin) * per_layer;
            s->v_cache[il] = s->k_cache[il] + (size_t)capacity * b->kv_dim;
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
    cpu_state_free(NULL, s);
    return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for a state of capacity %u", capacity);
}

/* ------------------------------------------------------------------------------------------ */
/* The forward pass                                                                             */

/* Up to three matrix-vector products sharing one input, run as one task over their rows. */
typedef struct matvec_task {
    const cpu_matrix *w[3];
    float *y[3];
    const float *x;
    uint32_t n;
} matvec_task;

static void matvec_run(void *ctx, uint32_t begin, uint32_t end) {
    const matvec_task *t = ctx;
    uint32_t base = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        uint32_t rows = t->w[i]->rows;
        uint32_t lo = begin > base ? begin - base : 0;
        uint32_t hi = end - base < rows ? end - base : rows;
        if (end > base && lo < hi)
            cpu_matvec_rows(t->w[i], t->x, t->y[i], lo, hi);
        base += rows;
    }
}

static void matvec(memra_backend *b, const float *x, uint32_t n, const cpu_matrix *w0, float *y0, const cpu_matrix *w1,
                   float *y1, const cpu_matrix *w2, float *y2) {
    matvec_task t = {.w = {w0, w1, w2}, .y = {y0, y1, y2}, .x = x, .n = n};
    uint32_t rows = 0;
    for (uint32_t i = 0; i < n; i++)
        rows += t.w[i]->rows;
    cpu_pool_run(b->pool, rows, w0->cols, matvec_run, &t);
}

typedef struct attention_task {
    const memra_backend *b;
    const float *q, *k_cache, *v_cache;
    float *scores, *out;
    uint32_t n_pos, capacity;
    float scale;
} attention_task;

static void attention_run(void *ctx, uint32_t begin, uint32_t end) {
    const attention_task *t = ctx;
    const memra_model *m = t->b->m;
    uint32_t group = m->n_head / m->n_head_kv;
    for (uint32_t h = begin; h < end; h++) {
        uint32_t g = h / group;
        cpu_attention_head(t->q + (size_t)h * m->head_dim, t->k_cache + (size_t)g * m->head_dim, t->b->kv_dim,
                           t->v_cache + (size_t)g * m->head_dim_v, t->b->v_dim, m->head_dim, m->head_dim_v, t->n_pos,
                           t->scale, t->scores + (size_t)h * t->capacity, t->out + (size_t)h * m->head_dim_v);
    }
}

static void add_bias(float *y, const float *bias, uint32_t n) {
    if (bias)
        for (uint32_t i = 0; i < n; i++)
            y[i] += bias[i];
}

/* Per-head RMSNorm (qwen3) and RoPE of n_heads heads of q or k. */
static void norm_and_rope(const memra_backend *b, float *x, uint32_t n_heads, const float *norm) {
    const memra_model *m = b->m;
    for (uint32_t h = 0; h < n_heads; h++) {
        float *head = x + (size_t)h * m->head_dim;
        if (norm)
            cpu_rmsnorm(head, norm, m->head_dim, m->rms_eps, head);
        cpu_rope_head(head, m->head_dim, m->rope_pairing == MEMRA_ROPE_NEOX, b->rope_cos, b->rope_sin);
    }
}

/* One layer at position pos: reads the layer's weights once and K/V rows [0, pos], writes the
 * K and V rows of pos (past the committed prefix until the step commits). */
static void layer_forward(memra_backend *b, cpu_stage *sg, memra_state *s, uint32_t il, uint32_t pos) {
    const memra_model *m = b->m;
    const cpu_layer *L = &b->layers[il];
    cpu_rmsnorm(sg->x, L->attn_norm, m->n_embd, m->rms_eps, sg->xn);
    matvec(b, sg->xn, 3, &L->wq, sg->q, &L->wk, sg->k, &L->wv, sg->v);
    add_bias(sg->q, L->bq, b->q_dim);
    add_bias(sg->k, L->bk, b->kv_dim);
    add_bias(sg->v, L->bv, b->v_dim);
    norm_and_rope(b, sg->q, m->n_head, L->q_norm);
    norm_and_rope(b, sg->k, m->n_head_kv, L->k_norm);
    memcpy(s->k_cache[il] + (size_t)pos * b->kv_dim, sg->k, (size_t)b->kv_dim * sizeof(float));
    memcpy(s->v_cache[il] + (size_t)pos * b->v_dim, sg->v, (size_t)b->v_dim * sizeof(float));

    attention_task at = {.b = b,
                         .q = sg->q,
                         .k_cache = s->k_cache[il],
                         .v_cache = s->v_cache[il],
                         .scores = s->scores,
                         .out = sg->att,
                         .n_pos = pos + 1,
                         .capacity = s->capacity,
                         .scale = 1.0f / sqrtf((float)m->head_dim)};
    cpu_pool_run(b->pool, m->n_head, (uint64_t)(pos + 1) * (m->head_dim + m->head_dim_v), attention_run, &at);

    matvec(b, sg->att, 1, &L->wo, sg->xn, NULL, NULL, NULL, NULL);
    for (uint32_t i = 0; i < m->n_embd; i++)
        sg->x[i] += sg->xn[i];

    cpu_rmsnorm(sg->x, L->ffn_norm, m->n_embd, m->rms_eps, sg->xn);
    matvec(b, sg->xn, 2, &L->w_gate, sg->gate, &L->w_up, sg->up, NULL, NULL);
    for (uint32_t i = 0; i < m->n_ff; i++) {
        float g = sg->gate[i];
        sg->gate[i] = g / (1.0f + expf(-g)) * sg->up[i];
    }
    matvec(b, sg->gate, 1, &L->w_down, sg->xn, NULL, NULL, NULL, NULL);
    for (uint32_t i = 0; i < m->n_embd; i++)
        sg->x[i] += sg->xn[i];
}

static void rope_tables(memra_backend *b, uint32_t pos) {
    const memra_model *m = b->m;
    double p = (double)pos / (double)m->rope_linear_factor;
    for (uint32_t i = 0; i < m->head_dim / 2; i++) {
        double theta = p * (double)b->rope_freq[i];
        b->rope_cos[i] = (float)cos(theta);
        b->rope_sin[i] = (float)sin(theta);
    }
}

/* Embedding, every stage in order (each handing its hidden to the next by a copy), final norm
 * and head into b->head_out. */
static void forward(memra_backend *b, memra_state *s, uint32_t token, uint32_t pos) {
    const memra_model *m = b->m;
    rope_tables(b, pos);
    cpu_matrix_row(&b->tok_embd, token, b->stages[0].x);
    for (uint32_t i = 0; i < b->n_stages; i++) {
        cpu_stage *sg = &b->stages[i];
        if (i > 0)
            memcpy(sg->x, b->stages[i - 1].x, (size_t)m->n_embd * sizeof(float));
        for (uint32_t il = sg->layer_begin; il < sg->layer_end; il++)
            layer_forward(b, sg, s, il, pos);
    }
    const float *last = b->stages[b->n_stages - 1].x;
    cpu_rmsnorm(last, b->output_norm, m->n_embd, m->rms_eps, b->head_in);
    matvec(b, b->head_in, 1, &b->output, b->head_out, NULL, NULL, NULL, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* Steps                                                                                        */

static memra_status quarantine(memra_state *s, memra_status st, memra_error *err) {
    s->quarantined = true;
    const char *why = err ? err->msg : "a step failed";
    size_t n = strnlen(why, sizeof s->quarantine_reason - 1);
    memcpy(s->quarantine_reason, why, n);
    s->quarantine_reason[n] = '\0';
    return st;
}

static memra_status check_not_quarantined(const memra_state *s, const char *what, memra_error *err) {
    if (s->quarantined)
        return memra_fail(err, MEMRA_E_QUARANTINED, "cpu: %s on a quarantined state (an earlier step failed: %s)", what,
                          s->quarantine_reason);
    return MEMRA_OK;
}

static memra_status cpu_step_begin(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err) {
    const memra_model *m = b->m;
    memra_status st = check_not_quarantined(s, "step", err);
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
    fenv_t caller_env;
    fegetenv(&caller_env);
    fesetenv(FE_DFL_ENV);
    forward(b, s, (uint32_t)token, pos);

    int64_t sampled = -1;
    uint32_t t = 0;
    if (args->sample)
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
    memcpy(s->hidden, b->stages[b->n_stages - 1].x, (size_t)m->n_embd * sizeof(float));
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

static memra_status cpu_step_end(memra_backend *b, memra_state *s, float *logits, memra_step_result *out,
                                 memra_error *err) {
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

/* ------------------------------------------------------------------------------------------ */
/* Digests, restore, counters                                                                   */

static memra_status cpu_digest(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32],
                               memra_error *err) {
    const memra_model *m = b->m;
    if (s->ring_count != 0)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: digest with %u steps in flight", s->ring_count);
    switch (kind) {
    case MEMRA_DIGEST_LOGITS: b->host->sha256(s->logits, (size_t)m->n_vocab * sizeof(float), out); return MEMRA_OK;
    case MEMRA_DIGEST_HIDDEN: b->host->sha256(s->hidden, (size_t)m->n_embd * sizeof(float), out); return MEMRA_OK;
    case MEMRA_DIGEST_CACHE: {
        /* Layer by layer: K rows [0, pos), then V rows [0, pos), whatever the stage layout. */
        memra_sha256_ctx *ctx = b->host->sha256_new();
        if (!ctx)
            return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for a digest");
        for (uint32_t il = 0; il < m->n_layer; il++) {
            b->host->sha256_update(ctx, s->k_cache[il], (size_t)s->position * b->kv_dim * sizeof(float));
            b->host->sha256_update(ctx, s->v_cache[il], (size_t)s->position * b->v_dim * sizeof(float));
        }
        b->host->sha256_final(ctx, out);
        return MEMRA_OK;
    }
    }
    return memra_fail(err, MEMRA_E_INVALID, "cpu: unknown digest kind %d", (int)kind);
}

static memra_status cpu_state_restore(memra_backend *b, memra_state *dst, const memra_state *src, memra_error *err) {
    const memra_model *m = b->m;
    memra_status st;
    if ((st = check_not_quarantined(src, "restore from", err)) != MEMRA_OK ||
        (st = check_not_quarantined(dst, "restore into", err)) != MEMRA_OK)
        return st;
    if (src->ring_count != 0 || dst->ring_count != 0)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: restore with steps in flight");
    if (dst->capacity < src->position)
        return memra_fail(err, MEMRA_E_RANGE, "cpu: restore of position %u into a state of capacity %u", src->position,
                          dst->capacity);
    if (dst == src)
        return MEMRA_OK;
    for (uint32_t il = 0; il < m->n_layer; il++) {
        memcpy(dst->k_cache[il], src->k_cache[il], (size_t)src->position * b->kv_dim * sizeof(float));
        memcpy(dst->v_cache[il], src->v_cache[il], (size_t)src->position * b->v_dim * sizeof(float));
    }
    memcpy(dst->hidden, src->hidden, (size_t)m->n_embd * sizeof(float));
    memcpy(dst->logits, src->logits, (size_t)m->n_vocab * sizeof(float));
    dst->position = src->position;
    dst->carried_token = src->carried_token;
    return MEMRA_OK;
}

static uint32_t cpu_state_position(memra_backend *b, const memra_state *s) {
    (void)b;
    return s->position;
}

static memra_status cpu_state_stats(memra_backend *b, const memra_state *s, memra_state_stats *out, memra_error *err) {
    (void)b;
    (void)err;
    *out = s->stats;
    return MEMRA_OK;
}

static memra_status cpu_memory(memra_backend *b, memra_backend_memory *out, memra_error *err) {
    (void)err;
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->weight_bytes = b->m->weight_bytes; /* read in place from the mapping */
    out->cache_bytes = b->live_cache_bytes;
    out->scratch_bytes = b->scratch_bytes + b->live_state_bytes;
    return MEMRA_OK;
}

static memra_status cpu_device_name(memra_backend *b, char *buf, size_t size, memra_error *err) {
    (void)err;
    snprintf(buf, size, "cpu (%u thread%s)", b->n_threads, b->n_threads == 1 ? "" : "s");
    return MEMRA_OK;
}

static const memra_ext_bench_v1 cpu_bench_ext = {
    .struct_size = sizeof(memra_ext_bench_v1),
    .device_name = cpu_device_name,
};

static const void *cpu_extension(memra_backend *b, const char *name, uint32_t version) {
    (void)b;
    if (strcmp(name, MEMRA_EXT_BENCH) == 0 && version == 1)
        return &cpu_bench_ext;
    return NULL;
}

static const memra_backend_vtable cpu_vtable = {
    .struct_size = sizeof(memra_backend_vtable),
    .options = cpu_options,
    .n_options = sizeof cpu_options / sizeof cpu_options[0],
    .device_count = cpu_device_count,
    .open = cpu_open,
    .close = cpu_close,
    .state_new = cpu_state_new,
    .state_free = cpu_state_free,
    .step_begin = cpu_step_begin,
    .step_end = cpu_step_end,
    .digest = cpu_digest,
    .state_restore = cpu_state_restore,
    .state_position = cpu_state_position,
    .state_stats = cpu_state_stats,
    .memory = cpu_memory,
    .extension = cpu_extension,
    .resolve_options = cpu_resolve_options,
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "cpu",
    .kind = MEMRA_PLUGIN_BACKEND,
    .version = "0.1.0",
    .description = "reference decode of llama, qwen2 and qwen3 on the host; deterministic for any thread count",
    .backend = &cpu_vtable,
};
