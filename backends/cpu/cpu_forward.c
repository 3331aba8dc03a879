/* cpu_forward.c: the `cpu` backend plugin, memra's reference: one-token decode of llama, qwen2,
 * qwen3 and gemma3 on the host, weights read in place from the mapped file. gemma3 adds: the
 * embedding times sqrtf(n_embd), the post-attention and post-FFN RMS norms (applied to the
 * all-reduced sum, before the residual add), GELU (tanh) in place of SiLU, the file's attention
 * scale, and on its local layers a sliding window (the last sliding_window positions) with their
 * own RoPE tables (base 10000, no position scaling).
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
 * float. The rotation itself is float.
 *
 * Tensor parallelism (tp=N): each stage has the plan's ranks (memra_rank_plan); with one rank the
 * slices are whole and the step is exactly the one-rank computation above. Rank r holds views of
 * its slices only, read in place from the mapping: the rows of wq/wk/wv (and the bq/bk/bv entries)
 * of its heads and kv heads, the rows of w_gate/w_up of its ffn rows (column-parallel), the
 * columns of wo of its heads and of w_down of its ffn rows (row-parallel; the models memra reads
 * have no bias on these, so nothing is added once per stage); its own KV cache of its kv heads
 * and its own activations, the whole hidden state included (every rank holds the same bits of
 * it). Per layer: each rank's attention partial (n_embd floats), one in-place sum all-reduce of
 * the partials through the stage's communicator (block layer*2), the residual added on every
 * rank; the same for the FFN (block layer*2+1). Norms run on every rank's whole vector; the
 * embedding is copied to every rank of stage 0; the final norm and the head run once, on rank 0
 * of the last stage. Each rank's compute runs in rank order on the calling thread, its rows split
 * over the pool as above; the n calls of one all-reduce run as one pool task of n items (one per
 * rank, on whichever thread; threads=1 makes all n in turn), joined before any status or buffer is
 * read. So the result does not depend on the thread count; it does differ from tp=1 in summation
 * order (a partial per rank, summed in rank order by the collective).
 *
 * The collective (`collective=`, default local) is loaded only when a stage has more than one
 * rank (with none, a given collective= is checked, plugin and keys, then refused: it would change
 * nothing); one communicator per such stage; the position and the status words it publishes are in
 * host memory (one word per rank per block of the stage, cleared at the start of each step).
 * Transaction: every layer runs; then every status word of the step is read, before the head and
 * before anything is committed; a nonzero one fails the step (MEMRA_E_REFUSED for a refusal
 * word), commits nothing and quarantines the state. The K and V rows of the new position are
 * written into each rank's cache slot at the uncommitted position, which the cache digest and a
 * restore do not cover and the next step at that position overwrites. Refusal cells (memra.tp)
 * are kept here and handed to the collective just before the step that reaches their position,
 * so clear_refusals can drop the ones not yet handed over. */
#include <math.h>
#include <stdio.h>
#include <fenv.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_kernels.h"
#include "cpu_pool.h"
#include "memra/quant.h"
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
    {.key = "collective",
     .default_value = "local",
     .help = "collective plugin that sums the ranks' partials when tp > 1 (refused with tp=1, where it has no effect)"},
};

/* The weights of one layer as the kernels read them. */
typedef struct cpu_layer {
    cpu_matrix wq, wk, wv, wo, w_gate, w_up, w_down;
    const float *attn_norm, *ffn_norm;
    const float *bq, *bk, *bv;                   /* NULL when absent */
    const float *q_norm, *k_norm;                /* NULL when absent */
    const float *post_attn_norm, *post_ffn_norm; /* gemma3; NULL when absent */
} cpu_layer;

/* One rank of a stage: its slices of each of the stage's layers (views into the mapping) and
 * its own activations. */
typedef struct cpu_rank {
    uint32_t h0, h1, g0, g1, f0, f1;              /* heads, kv heads, ffn rows */
    uint32_t q_dim, kv_dim, v_dim, att_dim, n_ff; /* the rank's widths */
    cpu_layer *layers;                            /* the stage's layers, sliced */
    float *x;                                     /* residual stream, n_embd (whole, on every rank) */
    float *xn;                                    /* normed input, then the partial sum, n_embd */
    float *q;                                     /* q_dim */
    float *k, *v;                                 /* the new position's K and V rows of its kv heads */
    float *att;                                   /* att_dim */
    float *gate, *up;                             /* n_ff */
} cpu_rank;

/* One stage's ranks and, with more than one, its communicator and status words. */
typedef struct cpu_stage {
    uint32_t layer_begin, layer_end;
    int32_t device;
    uint32_t n_ranks;
    cpu_rank ranks[MEMRA_MAX_RANKS];
    memra_collective *comm; /* NULL with one rank */
    int32_t *status;        /* [(layer - layer_begin) * 2 + which][rank] */
} cpu_stage;

/* A refusal cell armed through memra.tp and not yet handed to the collective. */
typedef struct cpu_cell {
    uint32_t stage, rank, layer, which, position;
    int32_t word;
    bool handed; /* handed to the collective for the step in progress */
} cpu_cell;

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
    float *rope_freq_swa; /* the sliding-window layers' (gemma3); equal to rope_freq otherwise */
    float *rope_cos_swa, *rope_sin_swa;
    uint32_t q_dim, kv_dim, v_dim, att_dim;
    uint64_t scratch_bytes;
    uint64_t live_cache_bytes, live_state_bytes;
    /* Tensor parallelism: the collective (NULL when every stage has one rank). */
    char collective_name[MEMRA_OPT_VALUE_MAX];
    const memra_collective_vtable *coll;
    int32_t position_word; /* the step's position, as the collective reads it */
    cpu_cell *cells;       /* armed and not yet fired (handed over ones only during a step) */
    uint32_t n_cells, cap_cells;
};

typedef struct cpu_slot {
    float *logits;
    int64_t token;
    uint32_t position;
} cpu_slot;

struct memra_state {
    uint32_t capacity, max_inflight;
    uint32_t position;
    /* per layer and rank (il * MEMRA_MAX_RANKS + r): capacity rows of the rank's kv_dim / v_dim */
    float **k_cache, **v_cache;
    float **stage_cache; /* per stage and rank (s * MEMRA_MAX_RANKS + r): the block its caches live in */
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
    const char *collective;
} cpu_config;

static memra_status read_options(const memra_options *opts, cpu_config *cfg, memra_error *err) {
    cfg->collective = memra_options_get(opts, "collective");
    if (!cfg->collective)
        cfg->collective = "local";
    if (!cfg->collective[0])
        return memra_fail(err, MEMRA_E_INVALID, "cpu: collective= is empty: expected a collective plugin's name");
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
    if ((st = memra_options_set(resolved, "grain", buf, err)) != MEMRA_OK)
        return st;
    return memra_options_set(resolved, "collective", cfg.collective, err);
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
    case MEMRA_TYPE_Q4_0:
    case MEMRA_TYPE_Q4_1:
    case MEMRA_TYPE_Q5_0:
    case MEMRA_TYPE_Q5_1:
    case MEMRA_TYPE_Q4_K:
    case MEMRA_TYPE_Q5_K:
    case MEMRA_TYPE_Q6_K:
        /* blocks are read by memcpy: any alignment */
        if (cols % memra_quant_block_elems(w->type) != 0)
            return memra_fail(err, MEMRA_E_FORMAT, "cpu: tensor '%s' is %s with %llu columns, not a multiple of %u",
                              w->name, memra_tensor_type_name(w->type), (unsigned long long)cols,
                              memra_quant_block_elems(w->type));
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
        (st = bind_vector(&src->k_norm, m->head_dim, true, &L->k_norm, err)) != MEMRA_OK ||
        (st = bind_vector(&src->post_attn_norm, m->n_embd, true, &L->post_attn_norm, err)) != MEMRA_OK ||
        (st = bind_vector(&src->post_ffn_norm, m->n_embd, true, &L->post_ffn_norm, err)) != MEMRA_OK) {
        memra_error_prefix(err, "layer %u", il);
        return st;
    }
    return MEMRA_OK;
}

static memra_status check_model(const memra_model *m, memra_error *err) {
    if (m->arch != MEMRA_ARCH_LLAMA && m->arch != MEMRA_ARCH_QWEN2 && m->arch != MEMRA_ARCH_QWEN3 &&
        m->arch != MEMRA_ARCH_GEMMA3)
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
    if (m->arch == MEMRA_ARCH_GEMMA3 &&
        (!(m->embd_scale > 0.0f) || !(m->attn_scale > 0.0f) || m->sliding_window == 0 || m->swa_period == 0))
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: gemma3 model without embedding scale, attention scale or window");
    if (!(m->rope_linear_factor > 0.0f))
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: rope linear factor %g is not positive",
                          (double)m->rope_linear_factor);
    return MEMRA_OK;
}

/* A stage's ranks must partition the heads (whole kv groups each: kv heads = heads / group) and
 * the ffn rows, in rank order. */
static memra_status check_ranks(const memra_model *m, const memra_stage_plan *sp, uint32_t s, uint32_t n_vdevices,
                                memra_error *err) {
    if (sp->n_ranks == 0 || sp->n_ranks > MEMRA_MAX_RANKS)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: stage %u has %u ranks (expected 1..%u)", s, sp->n_ranks,
                          (unsigned)MEMRA_MAX_RANKS);
    uint32_t group = m->n_head / m->n_head_kv, h = 0, f = 0;
    for (uint32_t r = 0; r < sp->n_ranks; r++) {
        const memra_rank_plan *rp = &sp->ranks[r];
        if (rp->head_begin != h || rp->head_end <= rp->head_begin || rp->head_end > m->n_head ||
            rp->head_begin % group != 0 || rp->head_end % group != 0 || rp->kv_head_begin != rp->head_begin / group ||
            rp->kv_head_end != rp->head_end / group)
            return memra_fail(err, MEMRA_E_INVALID,
                              "cpu: rank %u of stage %u holds heads [%u, %u) and kv heads [%u, %u); expected heads "
                              "from %u in whole groups of %u (of %u) and their kv heads",
                              r, s, rp->head_begin, rp->head_end, rp->kv_head_begin, rp->kv_head_end, h, group,
                              m->n_head);
        if (rp->ff_begin != f || rp->ff_end <= rp->ff_begin || rp->ff_end > m->n_ff)
            return memra_fail(err, MEMRA_E_INVALID,
                              "cpu: rank %u of stage %u holds ffn rows [%u, %u); expected rows from %u (of %u)", r, s,
                              rp->ff_begin, rp->ff_end, f, m->n_ff);
        if (sp->n_ranks > 1 && (rp->device < 0 || (uint32_t)rp->device >= n_vdevices))
            return memra_fail(err, MEMRA_E_INVALID,
                              "cpu: rank %u of stage %u is on device %d; the cpu backend offers %u virtual devices "
                              "(vdevices=)",
                              r, s, rp->device, n_vdevices);
        h = rp->head_end;
        f = rp->ff_end;
    }
    if (h != m->n_head || f != m->n_ff)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: the ranks of stage %u hold %u of %u heads and %u of %u ffn rows",
                          s, h, m->n_head, f, m->n_ff);
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
        memra_status st = check_ranks(m, sp, s, n_vdevices, err);
        if (st != MEMRA_OK)
            return st;
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
        cpu_stage *sg = &b->stages[s];
        if (sg->comm && b->coll)
            b->coll->destroy(sg->comm);
        free(sg->status);
        for (uint32_t r = 0; r < sg->n_ranks; r++) {
            cpu_rank *rk = &sg->ranks[r];
            free(rk->layers);
            free(rk->x);
            free(rk->xn);
            free(rk->q);
            free(rk->k);
            free(rk->v);
            free(rk->att);
            free(rk->gate);
            free(rk->up);
        }
    }
    free(b->stages);
    free(b->layers);
    free(b->cells);
    free(b->head_in);
    free(b->head_out);
    free(b->rope_freq);
    free(b->rope_cos);
    free(b->rope_sin);
    free(b->rope_freq_swa);
    free(b->rope_cos_swa);
    free(b->rope_sin_swa);
    free(b);
}

/* Rows [r0, r1) of w: a view. */
static cpu_matrix rows_of(const cpu_matrix *w, uint32_t r0, uint32_t r1) {
    cpu_matrix out = *w;
    out.data = w->data + (size_t)r0 * w->row_bytes;
    out.rows = r1 - r0;
    return out;
}

/* Columns [c0, c1) of every row of w: a view with the same row stride. */
static memra_status cols_of(const cpu_matrix *w, uint32_t c0, uint32_t c1, const char *what, uint32_t il,
                            cpu_matrix *out, memra_error *err) {
    size_t offset = 0;
    switch (w->type) {
    case MEMRA_TYPE_F32: offset = (size_t)c0 * 4; break;
    case MEMRA_TYPE_F16:
    case MEMRA_TYPE_BF16: offset = (size_t)c0 * 2; break;
    case MEMRA_TYPE_Q8_0:
    case MEMRA_TYPE_Q4_0:
    case MEMRA_TYPE_Q4_1:
    case MEMRA_TYPE_Q5_0:
    case MEMRA_TYPE_Q5_1:
    case MEMRA_TYPE_Q4_K:
    case MEMRA_TYPE_Q5_K:
    case MEMRA_TYPE_Q6_K: {
        uint32_t qk = memra_quant_block_elems(w->type);
        if (c0 % qk != 0 || c1 % qk != 0)
            return memra_fail(err, MEMRA_E_UNSUPPORTED,
                              "cpu: layer %u: the %s columns [%u, %u) of a rank do not fall on %s blocks of %u; "
                              "choose a tp that does",
                              il, what, c0, c1, memra_tensor_type_name(w->type), qk);
        offset = (size_t)(c0 / qk) * memra_quant_block_bytes(w->type);
        break;
    }
    default: return memra_fail(err, MEMRA_E_INTERNAL, "cpu: layer %u: %s has an unexpected type", il, what);
    }
    *out = *w;
    out->data = w->data + offset;
    out->cols = c1 - c0;
    return MEMRA_OK;
}

/* A rank's slices of layer il (whole with one rank). */
static memra_status slice_layer(const memra_backend *b, const cpu_rank *rk, uint32_t il, cpu_layer *out,
                                memra_error *err) {
    const memra_model *m = b->m;
    const cpu_layer *L = &b->layers[il];
    *out = *L;
    out->wq = rows_of(&L->wq, rk->h0 * m->head_dim, rk->h1 * m->head_dim);
    out->wk = rows_of(&L->wk, rk->g0 * m->head_dim, rk->g1 * m->head_dim);
    out->wv = rows_of(&L->wv, rk->g0 * m->head_dim_v, rk->g1 * m->head_dim_v);
    out->w_gate = rows_of(&L->w_gate, rk->f0, rk->f1);
    out->w_up = rows_of(&L->w_up, rk->f0, rk->f1);
    out->bq = L->bq ? L->bq + (size_t)rk->h0 * m->head_dim : NULL;
    out->bk = L->bk ? L->bk + (size_t)rk->g0 * m->head_dim : NULL;
    out->bv = L->bv ? L->bv + (size_t)rk->g0 * m->head_dim_v : NULL;
    memra_status st =
        cols_of(&L->wo, rk->h0 * m->head_dim_v, rk->h1 * m->head_dim_v, "attention output", il, &out->wo, err);
    if (st == MEMRA_OK)
        st = cols_of(&L->w_down, rk->f0, rk->f1, "ffn down", il, &out->w_down, err);
    return st;
}

/* The stage's ranks: slices and activations. */
static memra_status open_ranks(memra_backend *b, const memra_stage_plan *sp, cpu_stage *sg, memra_error *err) {
    const memra_model *m = b->m;
    sg->n_ranks = sp->n_ranks;
    uint32_t n_layers = sg->layer_end - sg->layer_begin;
    for (uint32_t r = 0; r < sg->n_ranks; r++) {
        const memra_rank_plan *rp = &sp->ranks[r];
        cpu_rank *rk = &sg->ranks[r];
        rk->h0 = rp->head_begin, rk->h1 = rp->head_end;
        rk->g0 = rp->kv_head_begin, rk->g1 = rp->kv_head_end;
        rk->f0 = rp->ff_begin, rk->f1 = rp->ff_end;
        rk->q_dim = (rk->h1 - rk->h0) * m->head_dim;
        rk->kv_dim = (rk->g1 - rk->g0) * m->head_dim;
        rk->v_dim = (rk->g1 - rk->g0) * m->head_dim_v;
        rk->att_dim = (rk->h1 - rk->h0) * m->head_dim_v;
        rk->n_ff = rk->f1 - rk->f0;
        rk->layers = calloc(n_layers, sizeof *rk->layers);
        rk->x = alloc_floats(b, m->n_embd);
        rk->xn = alloc_floats(b, m->n_embd);
        rk->q = alloc_floats(b, rk->q_dim);
        rk->k = alloc_floats(b, rk->kv_dim);
        rk->v = alloc_floats(b, rk->v_dim);
        rk->att = alloc_floats(b, rk->att_dim);
        rk->gate = alloc_floats(b, rk->n_ff);
        rk->up = alloc_floats(b, rk->n_ff);
        if (!rk->layers || !rk->x || !rk->xn || !rk->q || !rk->k || !rk->v || !rk->att || !rk->gate || !rk->up)
            return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for the model's activations");
        for (uint32_t il = sg->layer_begin; il < sg->layer_end; il++) {
            memra_status st = slice_layer(b, rk, il, &rk->layers[il - sg->layer_begin], err);
            if (st != MEMRA_OK)
                return st;
        }
    }
    if (sg->n_ranks == 1)
        return MEMRA_OK;
    sg->status = calloc((size_t)n_layers * 2 * sg->n_ranks, sizeof *sg->status);
    if (!sg->status)
        return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for the collective's status words");
    return MEMRA_OK;
}

/* Loads the collective the arm names and creates one communicator per stage with more than one
 * rank. The collective reads only its own keys of the arm. */
static memra_status open_collective(memra_backend *b, const memra_plan *plan, const cpu_config *cfg,
                                    const memra_options *opts, memra_error *err) {
    bool any = false;
    for (uint32_t s = 0; s < b->n_stages; s++)
        any = any || b->stages[s].n_ranks > 1;
    /* collective=NAME, NAME:MODE (mode=MODE) or NAME:KEY=VALUE (one of the collective's keys) */
    char name[MEMRA_OPT_VALUE_MAX];
    memra_options own = {0};
    memra_status st = memra_collective_value_parse(cfg->collective, name, sizeof name, &own, err);
    if (st != MEMRA_OK) {
        memra_error_prefix(err, "cpu");
        return st;
    }
    const char *given = memra_options_get(opts, "collective");
    if (!any && !given)
        return MEMRA_OK;
    if (!any) {
        /* tp=1: the value is checked as it would be with ranks (the plugin, its keys), then
         * refused, since it changes nothing: two arms that differ only by it compute alike. */
        const memra_plugin *p = NULL;
        if ((st = b->host->find_plugin(name, MEMRA_PLUGIN_COLLECTIVE, &p, err)) != MEMRA_OK) {
            memra_error_prefix(err, "cpu: collective=%.100s", given);
            return st;
        }
        const memra_collective_vtable *vt = p ? p->collective : NULL;
        if (vt && own.n) {
            const memra_option_spec *lists[1] = {vt->options};
            const uint32_t counts[1] = {vt->options ? vt->n_options : 0};
            if ((st = memra_options_check(&own, lists, counts, 1, given, err)) != MEMRA_OK) {
                memra_error_prefix(err, "cpu: collective=%.100s: the collective '%.60s'", given, name);
                return st;
            }
        }
        return memra_fail(err, MEMRA_E_INVALID,
                          "cpu: collective=%.100s has no effect: no stage of this arm has more than one rank (tp=1); "
                          "drop it, or give tp=N",
                          given);
    }
    snprintf(b->collective_name, sizeof b->collective_name, "%s", name);
    const memra_plugin *p = NULL;
    st = b->host->find_plugin(name, MEMRA_PLUGIN_COLLECTIVE, &p, err);
    if (st != MEMRA_OK) {
        memra_error_prefix(err, "cpu: tensor parallelism (tp=%u) needs the collective '%.60s' (collective=)",
                           b->stages[0].n_ranks, cfg->collective);
        return st;
    }
    const memra_collective_vtable *vt = p ? p->collective : NULL;
    if (!MEMRA_HAS_MEMBER(vt, memra_collective_vtable, abort) || !vt->create || !vt->destroy || !vt->all_reduce_sum_f32)
        return memra_fail(err, MEMRA_E_PLUGIN, "cpu: the collective '%.60s' has no usable all-reduce", cfg->collective);
    for (uint32_t i = 0; opts && i < opts->n; i++)
        for (uint32_t k = 0; vt->options && k < vt->n_options; k++)
            if (strcmp(opts->items[i].key, vt->options[k].key) == 0 &&
                (st = memra_options_set(&own, opts->items[i].key, opts->items[i].value, err)) != MEMRA_OK)
                return st;
    b->coll = vt;
    for (uint32_t s = 0; s < b->n_stages; s++) {
        cpu_stage *sg = &b->stages[s];
        if (sg->n_ranks < 2)
            continue;
        int32_t devices[MEMRA_MAX_RANKS];
        for (uint32_t r = 0; r < sg->n_ranks; r++)
            devices[r] = plan->stages[s].ranks[r].device;
        st = vt->create(b->host, sg->n_ranks, devices, &own, &sg->comm, err);
        if (st != MEMRA_OK) {
            sg->comm = NULL;
            memra_error_prefix(err, "cpu: the collective '%.60s' for the %u ranks of stage %u", cfg->collective,
                               sg->n_ranks, s);
            return st;
        }
    }
    return MEMRA_OK;
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
    b->rope_freq_swa = alloc_floats(b, half);
    b->rope_cos_swa = alloc_floats(b, half);
    b->rope_sin_swa = alloc_floats(b, half);
    b->head_in = alloc_floats(b, m->n_embd);
    b->head_out = alloc_floats(b, m->n_vocab);
    if (!b->rope_freq || !b->rope_cos || !b->rope_sin || !b->rope_freq_swa || !b->rope_cos_swa || !b->rope_sin_swa ||
        !b->head_in || !b->head_out)
        goto fail_nomem;
    for (uint32_t i = 0; i < half; i++)
        b->rope_freq[i] = memra_model_rope_freq(m, i);
    /* the local layers' frequencies: the first layer that is one (any: they are all alike) */
    for (uint32_t i = 0; i < half; i++)
        b->rope_freq_swa[i] = m->sliding_window ? memra_model_layer_rope_freq(m, 0, i) : b->rope_freq[i];

    b->n_stages = plan->n_stages;
    b->stages = calloc(plan->n_stages, sizeof *b->stages);
    if (!b->stages)
        goto fail_nomem;
    for (uint32_t s = 0; s < plan->n_stages; s++) {
        cpu_stage *sg = &b->stages[s];
        sg->layer_begin = plan->stages[s].layer_begin;
        sg->layer_end = plan->stages[s].layer_end;
        sg->device = plan->stages[s].device;
        if ((st = open_ranks(b, &plan->stages[s], sg, err)) != MEMRA_OK)
            goto fail;
    }
    if ((st = open_collective(b, plan, &cfg, opts, err)) != MEMRA_OK)
        goto fail;
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
    const cpu_rank *rk;
    const float *q, *k_cache, *v_cache;
    float *scores, *out;
    uint32_t n_pos, capacity;
    float scale;
} attention_task;

/* Heads [begin, end) of the rank (local indices); its kv heads are local too. */
static void attention_run(void *ctx, uint32_t begin, uint32_t end) {
    const attention_task *t = ctx;
    const memra_model *m = t->b->m;
    const cpu_rank *rk = t->rk;
    uint32_t group = m->n_head / m->n_head_kv;
    for (uint32_t hl = begin; hl < end; hl++) {
        uint32_t h = rk->h0 + hl, gl = h / group - rk->g0;
        cpu_attention_head(t->q + (size_t)hl * m->head_dim, t->k_cache + (size_t)gl * m->head_dim, rk->kv_dim,
                           t->v_cache + (size_t)gl * m->head_dim_v, rk->v_dim, m->head_dim, m->head_dim_v, t->n_pos,
                           t->scale, t->scores + (size_t)h * t->capacity, t->out + (size_t)hl * m->head_dim_v);
    }
}

static void add_bias(float *y, const float *bias, uint32_t n) {
    if (bias)
        for (uint32_t i = 0; i < n; i++)
            y[i] += bias[i];
}

/* Per-head RMSNorm (qwen3, gemma3) and RoPE of n_heads heads of q or k; swa: the tables of the
 * sliding-window layers. */
static void norm_and_rope(const memra_backend *b, float *x, uint32_t n_heads, const float *norm, bool swa) {
    const memra_model *m = b->m;
    for (uint32_t h = 0; h < n_heads; h++) {
        float *head = x + (size_t)h * m->head_dim;
        if (norm)
            cpu_rmsnorm(head, norm, m->head_dim, m->rms_eps, head);
        cpu_rope_head(head, m->head_dim, m->rope_pairing == MEMRA_ROPE_NEOX, swa ? b->rope_cos_swa : b->rope_cos,
                      swa ? b->rope_sin_swa : b->rope_sin);
    }
}

/* Rank r's attention partial of layer il at position pos into rk->xn (n_embd): reads its slices
 * once and its K/V rows [0, pos], writes its K and V rows of pos (past the committed prefix until
 * the step commits). With one rank this is the whole attention output. */
static void rank_attention(memra_backend *b, cpu_stage *sg, uint32_t r, memra_state *s, uint32_t il, uint32_t pos) {
    const memra_model *m = b->m;
    cpu_rank *rk = &sg->ranks[r];
    const cpu_layer *L = &rk->layers[il - sg->layer_begin];
    float *k_cache = s->k_cache[(size_t)il * MEMRA_MAX_RANKS + r];
    float *v_cache = s->v_cache[(size_t)il * MEMRA_MAX_RANKS + r];
    cpu_rmsnorm(rk->x, L->attn_norm, m->n_embd, m->rms_eps, rk->xn);
    matvec(b, rk->xn, 3, &L->wq, rk->q, &L->wk, rk->k, &L->wv, rk->v);
    add_bias(rk->q, L->bq, rk->q_dim);
    add_bias(rk->k, L->bk, rk->kv_dim);
    add_bias(rk->v, L->bv, rk->v_dim);
    bool swa = memra_model_layer_is_swa(m, il);
    norm_and_rope(b, rk->q, rk->h1 - rk->h0, L->q_norm, swa);
    norm_and_rope(b, rk->k, rk->g1 - rk->g0, L->k_norm, swa);
    memcpy(k_cache + (size_t)pos * rk->kv_dim, rk->k, (size_t)rk->kv_dim * sizeof(float));
    memcpy(v_cache + (size_t)pos * rk->v_dim, rk->v, (size_t)rk->v_dim * sizeof(float));

    /* A sliding-window layer attends to positions t with pos - t < sliding_window (llama.cpp's
     * LLAMA_SWA_TYPE_STANDARD masks p1 - p0 >= n_swa). */
    uint32_t t0 = swa && pos + 1 > m->sliding_window ? pos + 1 - m->sliding_window : 0;
    attention_task at = {.b = b,
                         .rk = rk,
                         .q = rk->q,
                         .k_cache = k_cache + (size_t)t0 * rk->kv_dim,
                         .v_cache = v_cache + (size_t)t0 * rk->v_dim,
                         .scores = s->scores,
                         .out = rk->att,
                         .n_pos = pos + 1 - t0,
                         .capacity = s->capacity,
                         /* a description from elsewhere may leave it 0: the usual scale then */
                         .scale = m->attn_scale > 0.0f ? m->attn_scale : 1.0f / sqrtf((float)m->head_dim)};
    cpu_pool_run(b->pool, rk->h1 - rk->h0, (uint64_t)(pos + 1 - t0) * (m->head_dim + m->head_dim_v), attention_run,
                 &at);
    matvec(b, rk->att, 1, &L->wo, rk->xn, NULL, NULL, NULL, NULL);
}

/* Rank r's FFN partial of layer il into rk->xn. */
static void rank_ffn(memra_backend *b, cpu_stage *sg, uint32_t r, uint32_t il) {
    const memra_model *m = b->m;
    cpu_rank *rk = &sg->ranks[r];
    const cpu_layer *L = &rk->layers[il - sg->layer_begin];
    cpu_rmsnorm(rk->x, L->ffn_norm, m->n_embd, m->rms_eps, rk->xn);
    matvec(b, rk->xn, 2, &L->w_gate, rk->gate, &L->w_up, rk->up, NULL, NULL);
    if (m->ffn_act == MEMRA_FFN_GELU_TANH) {
        for (uint32_t i = 0; i < rk->n_ff; i++) {
            float g = rk->gate[i];
            rk->gate[i] = 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * rk->up[i];
        }
    } else {
        for (uint32_t i = 0; i < rk->n_ff; i++) {
            float g = rk->gate[i];
            rk->gate[i] = g / (1.0f + expf(-g)) * rk->up[i];
        }
    }
    matvec(b, rk->gate, 1, &L->w_down, rk->xn, NULL, NULL, NULL, NULL);
}

/* The n calls of one all-reduce, one pool item per rank. */
typedef struct reduce_task {
    memra_backend *b;
    cpu_stage *sg;
    uint32_t block, local; /* the collective's block; the stage's (layer - layer_begin) * 2 + which */
    memra_status st[MEMRA_MAX_RANKS];
    memra_error err[MEMRA_MAX_RANKS];
} reduce_task;

static void reduce_run(void *ctx, uint32_t begin, uint32_t end) {
    reduce_task *t = ctx;
    for (uint32_t r = begin; r < end; r++)
        t->st[r] = t->b->coll->all_reduce_sum_f32(t->sg->comm, r, t->sg->ranks[r].xn, t->b->m->n_embd, NULL, t->block,
                                                  &t->b->position_word,
                                                  &t->sg->status[(size_t)t->local * t->sg->n_ranks + r], &t->err[r]);
}

/* Sums the ranks' partials (in rk->xn) through the collective, then (gemma3) RMS-normalises the
 * sum with the layer's post-attention or post-FFN norm and adds it to every rank's residual
 * stream. A call that fails (not a refusal: that is a status word, read before the
 * commit) fails the step. */
static memra_status reduce_and_add(memra_backend *b, cpu_stage *sg, uint32_t il, uint32_t which, memra_error *err) {
    const memra_model *m = b->m;
    if (sg->n_ranks > 1) {
        reduce_task t = {.b = b, .sg = sg, .block = il * 2 + which, .local = (il - sg->layer_begin) * 2 + which};
        /* A cost past any grain: the calls run on the pool's threads whenever it has several. */
        cpu_pool_run(b->pool, sg->n_ranks, UINT32_MAX, reduce_run, &t);
        for (uint32_t r = 0; r < sg->n_ranks; r++)
            if (t.st[r] != MEMRA_OK) {
                if (err)
                    *err = t.err[r];
                memra_error_prefix(err, "cpu: the all-reduce after %s of layer %u failed on rank %u",
                                   which ? "ffn" : "attention", il, r);
                return t.st[r];
            }
    }
    for (uint32_t r = 0; r < sg->n_ranks; r++) {
        cpu_rank *rk = &sg->ranks[r];
        const cpu_layer *L = &rk->layers[il - sg->layer_begin];
        const float *post = which ? L->post_ffn_norm : L->post_attn_norm;
        if (post)
            cpu_rmsnorm(rk->xn, post, m->n_embd, m->rms_eps, rk->xn);
        for (uint32_t i = 0; i < m->n_embd; i++)
            rk->x[i] += rk->xn[i];
    }
    return MEMRA_OK;
}

/* One layer at position pos on every rank of the stage. */
static memra_status layer_forward(memra_backend *b, cpu_stage *sg, memra_state *s, uint32_t il, uint32_t pos,
                                  memra_error *err) {
    for (uint32_t r = 0; r < sg->n_ranks; r++)
        rank_attention(b, sg, r, s, il, pos);
    memra_status st = reduce_and_add(b, sg, il, 0, err);
    if (st != MEMRA_OK)
        return st;
    for (uint32_t r = 0; r < sg->n_ranks; r++)
        rank_ffn(b, sg, r, il);
    return reduce_and_add(b, sg, il, 1, err);
}

static void rope_tables(memra_backend *b, uint32_t pos) {
    const memra_model *m = b->m;
    double p = (double)pos / (double)m->rope_linear_factor;
    for (uint32_t i = 0; i < m->head_dim / 2; i++) {
        double theta = p * (double)b->rope_freq[i];
        b->rope_cos[i] = (float)cos(theta);
        b->rope_sin[i] = (float)sin(theta);
    }
    if (!m->sliding_window)
        return;
    double p_swa = (double)pos / (double)memra_model_layer_rope_linear_factor(m, 0);
    for (uint32_t i = 0; i < m->head_dim / 2; i++) {
        double theta = p_swa * (double)b->rope_freq_swa[i];
        b->rope_cos_swa[i] = (float)cos(theta);
        b->rope_sin_swa[i] = (float)sin(theta);
    }
}

/* Embedding, then every stage in order, each handing its hidden state to every rank of the next
 * by a copy. The final norm and the head are separate (head_forward): they run after the
 * collective check. */
static memra_status forward(memra_backend *b, memra_state *s, uint32_t token, uint32_t pos, memra_error *err) {
    const memra_model *m = b->m;
    rope_tables(b, pos);
    b->position_word = (int32_t)pos;
    for (uint32_t i = 0; i < b->n_stages; i++) {
        cpu_stage *sg = &b->stages[i];
        if (sg->status)
            memset(sg->status, 0, (size_t)(sg->layer_end - sg->layer_begin) * 2 * sg->n_ranks * sizeof *sg->status);
    }
    cpu_matrix_row(&b->tok_embd, token, b->stages[0].ranks[0].x);
    if (m->arch == MEMRA_ARCH_GEMMA3)
        for (uint32_t i = 0; i < m->n_embd; i++)
            b->stages[0].ranks[0].x[i] *= m->embd_scale;
    for (uint32_t i = 0; i < b->n_stages; i++) {
        cpu_stage *sg = &b->stages[i];
        const float *in = i > 0 ? b->stages[i - 1].ranks[0].x : b->stages[0].ranks[0].x;
        for (uint32_t r = 0; r < sg->n_ranks; r++)
            if (sg->ranks[r].x != in)
                memcpy(sg->ranks[r].x, in, (size_t)m->n_embd * sizeof(float));
        for (uint32_t il = sg->layer_begin; il < sg->layer_end; il++) {
            memra_status st = layer_forward(b, sg, s, il, pos, err);
            if (st != MEMRA_OK)
                return st;
        }
    }
    return MEMRA_OK;
}

static const float *last_hidden(const memra_backend *b) { return b->stages[b->n_stages - 1].ranks[0].x; }

static void head_forward(memra_backend *b) {
    const memra_model *m = b->m;
    cpu_rmsnorm(last_hidden(b), b->output_norm, m->n_embd, m->rms_eps, b->head_in);
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
        return memra_fail(err, MEMRA_E_QUARANTINED,
                          "cpu: %s on a quarantined state: an earlier step failed and left an unfinished transaction "
                          "(%s); free the state",
                          what, s->quarantine_reason);
    return MEMRA_OK;
}

/* Hands the collective the refusal cells armed for position pos (before the step's forward). */
static memra_status hand_cells(memra_backend *b, uint32_t pos, memra_error *err) {
    for (uint32_t i = 0; i < b->n_cells; i++) {
        cpu_cell *c = &b->cells[i];
        if (c->handed || c->position != pos)
            continue;
        cpu_stage *sg = &b->stages[c->stage];
        memra_status st = b->coll->arm_refusal(sg->comm, c->rank, c->layer * 2 + c->which, pos, c->word, err);
        if (st != MEMRA_OK) {
            memra_error_prefix(err, "cpu: arming the refusal cell of layer %u (%s) on rank %u at position %u", c->layer,
                               c->which ? "ffn" : "attention", c->rank, pos);
            return st;
        }
        c->handed = true;
    }
    return MEMRA_OK;
}

/* Drops the cells handed over for the step that just ran (the collective fired them: the step
 * made every operation of its position once). */
static void drop_handed_cells(memra_backend *b) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->n_cells; i++)
        if (!b->cells[i].handed)
            b->cells[n++] = b->cells[i];
    b->n_cells = n;
}

/* The collective check: every rank's status of every all-reduce of the step, in (stage, layer,
 * block, rank) order; the first nonzero one fails the step. The refusing rank is the one whose
 * cell fired there, if this backend handed one over; else the first rank reading the word. */
static memra_status check_statuses(memra_backend *b, uint32_t pos, memra_error *err) {
    for (uint32_t i = 0; i < b->n_stages; i++) {
        const cpu_stage *sg = &b->stages[i];
        if (!sg->status)
            continue;
        for (uint32_t il = sg->layer_begin; il < sg->layer_end; il++)
            for (uint32_t which = 0; which < 2; which++) {
                const int32_t *w = &sg->status[(size_t)((il - sg->layer_begin) * 2 + which) * sg->n_ranks];
                uint32_t r = 0;
                while (r < sg->n_ranks && w[r] == 0)
                    r++;
                if (r == sg->n_ranks)
                    continue;
                int32_t word = w[r];
                const char *block = which ? "ffn" : "attention";
                if (word == MEMRA_COLLECTIVE_PENDING || word == MEMRA_COLLECTIVE_FAILED)
                    return memra_fail(err, MEMRA_E_INTERNAL,
                                      "cpu: the all-reduce after %s of layer %u %s on rank %u at position %u (word "
                                      "0x%08x)",
                                      block, il, word == MEMRA_COLLECTIVE_PENDING ? "never completed" : "failed", r,
                                      pos, (unsigned)word);
                for (uint32_t c = 0; c < b->n_cells; c++) {
                    const cpu_cell *k = &b->cells[c];
                    if (k->handed && k->stage == i && k->layer == il && k->which == which && k->word == word) {
                        r = k->rank;
                        break;
                    }
                }
                return memra_fail(err, MEMRA_E_REFUSED,
                                  "cpu: the all-reduce after %s of layer %u refused on rank %u at position %u (word "
                                  "0x%08x)",
                                  block, il, r, pos, (unsigned)word);
            }
    }
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
    if (b->n_cells && (st = hand_cells(b, pos, err)) != MEMRA_OK) {
        drop_handed_cells(b);
        return quarantine(s, st, err);
    }
    fenv_t caller_env;
    fegetenv(&caller_env);
    fesetenv(FE_DFL_ENV);
    st = forward(b, s, (uint32_t)token, pos, err);
    if (st == MEMRA_OK)
        st = check_statuses(b, pos, err);
    drop_handed_cells(b);
    if (st != MEMRA_OK) {
        /* Nothing committed: the K/V rows written sit at the uncommitted position. */
        fesetenv(&caller_env);
        return quarantine(s, st, err);
    }
    head_forward(b);

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
    memcpy(s->hidden, last_hidden(b), (size_t)m->n_embd * sizeof(float));
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

/* ---- memra.tp ---- */

static memra_status tp_collective(memra_backend *b, char *name, size_t name_size, bool *refusals, memra_error *err) {
    if (!b->coll)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: no stage has more than one rank (tp=1): no collective");
    if (name && name_size)
        snprintf(name, name_size, "%s", b->collective_name);
    if (refusals)
        *refusals = b->coll->arm_refusal != NULL;
    return MEMRA_OK;
}

/* The stage and rank of a site, checked against the plan. */
static memra_status tp_site(memra_backend *b, uint32_t stage, uint32_t rank, const char *what, memra_error *err) {
    if (!b->coll)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: no stage has more than one rank (tp=1): no collective");
    if (stage >= b->n_stages)
        return memra_fail(err, MEMRA_E_RANGE, "cpu: %s of stage %u: the plan has %u stages", what, stage, b->n_stages);
    const cpu_stage *sg = &b->stages[stage];
    if (!sg->comm)
        return memra_fail(err, MEMRA_E_RANGE, "cpu: %s of stage %u: the stage has one rank and no collective", what,
                          stage);
    if (rank >= sg->n_ranks)
        return memra_fail(err, MEMRA_E_RANGE, "cpu: %s of rank %u of stage %u: the stage has %u ranks", what, rank,
                          stage, sg->n_ranks);
    return MEMRA_OK;
}

static memra_status tp_arm_refusal(memra_backend *b, uint32_t stage, uint32_t rank, uint32_t layer, uint32_t which,
                                   uint32_t position, int32_t word, memra_error *err) {
    memra_status st = tp_site(b, stage, rank, "a refusal cell", err);
    if (st != MEMRA_OK)
        return st;
    if (!b->coll->arm_refusal)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: the collective '%s' has no refusal cells",
                          b->collective_name);
    const cpu_stage *sg = &b->stages[stage];
    if (layer < sg->layer_begin || layer >= sg->layer_end || which > 1)
        return memra_fail(err, MEMRA_E_RANGE,
                          "cpu: a refusal cell at layer %u, block %u: stage %u holds layers [%u, %u), blocks are 0 "
                          "(attention) and 1 (ffn)",
                          layer, which, stage, sg->layer_begin, sg->layer_end);
    if (word == 0 || word == MEMRA_COLLECTIVE_PENDING || word == MEMRA_COLLECTIVE_FAILED)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: a refusal word may not be 0 nor a MEMRA_COLLECTIVE_ word (%d)",
                          (int)word);
    for (uint32_t i = 0; i < b->n_cells; i++) {
        cpu_cell *c = &b->cells[i];
        if (c->stage == stage && c->rank == rank && c->layer == layer && c->which == which && c->position == position) {
            c->word = word; /* as the collective does: arming it again replaces the word */
            return MEMRA_OK;
        }
    }
    if (b->n_cells == b->cap_cells) {
        uint32_t cap = b->cap_cells ? b->cap_cells * 2 : 16;
        cpu_cell *cells = cap > b->cap_cells ? realloc(b->cells, (size_t)cap * sizeof *cells) : NULL;
        if (!cells)
            return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for refusal cells");
        b->cells = cells;
        b->cap_cells = cap;
    }
    b->cells[b->n_cells++] =
        (cpu_cell){.stage = stage, .rank = rank, .layer = layer, .which = which, .position = position, .word = word};
    return MEMRA_OK;
}

static memra_status tp_clear_refusals(memra_backend *b, memra_error *err) {
    if (!b->coll)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: no stage has more than one rank (tp=1): no collective");
    b->n_cells = 0; /* none is handed over between steps */
    return MEMRA_OK;
}

static memra_status tp_epochs(memra_backend *b, uint32_t stage, uint32_t rank, uint64_t *out, uint32_t n_blocks,
                              memra_error *err) {
    memra_status st = tp_site(b, stage, rank, "epochs", err);
    if (st != MEMRA_OK)
        return st;
    uint32_t want = b->m->n_layer * 2;
    if (!out || n_blocks != want)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: epochs into %u blocks (%s); the model has %u (2 per layer)",
                          n_blocks, out ? "given" : "out is NULL", want);
    if (!b->coll->epochs)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: the collective '%s' keeps no epochs", b->collective_name);
    const cpu_stage *sg = &b->stages[stage];
    st = b->coll->epochs(sg->comm, rank, out, n_blocks, err);
    if (st != MEMRA_OK) {
        memra_error_prefix(err, "cpu: epochs of rank %u of stage %u", rank, stage);
        return st;
    }
    for (uint32_t k = 0; k < n_blocks; k++)
        if (k < sg->layer_begin * 2 || k >= sg->layer_end * 2)
            out[k] = 0;
    return MEMRA_OK;
}

static const memra_ext_tp_v1 cpu_tp_ext = {
    .struct_size = sizeof(memra_ext_tp_v1),
    .collective = tp_collective,
    .arm_refusal = tp_arm_refusal,
    .clear_refusals = tp_clear_refusals,
    .epochs = tp_epochs,
};

static const void *cpu_extension(memra_backend *b, const char *name, uint32_t version) {
    if (strcmp(name, MEMRA_EXT_BENCH) == 0 && version == 1)
        return &cpu_bench_ext;
    if (strcmp(name, MEMRA_EXT_TP) == 0 && version == 1 && b && b->coll)
        return &cpu_tp_ext;
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
    .description = "reference decode of llama, qwen2, qwen3 and gemma3 on the host; deterministic for any thread count",
    .backend = &cpu_vtable,
};
