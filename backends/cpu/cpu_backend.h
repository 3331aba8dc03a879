/* cpu_backend.h: what the files of the cpu backend share, inside the plugin only: the backend
 * and state structs, the stages and ranks of the plan, and the functions one file calls in
 * another. cpu_plugin.c is the plugin (descriptor, options, vtable); cpu_open.c binds the weights
 * and opens the backend; cpu_stages.c checks the plan's stages and ranks and slices the layers;
 * cpu_forward.c is the maths of one token; cpu_tp.c the collective of tensor parallelism;
 * cpu_state.c the states (allocation, digests, restore); cpu_step.c the step's transaction. */
#ifndef MEMRA_CPU_BACKEND_H
#define MEMRA_CPU_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu_kernels.h"
#include "cpu_pool.h"
#include "memra/ext.h"
#include "memra/op.h"
#include "memra/options.h"
#include "memra/plugin.h"

/* The weights of one layer as the kernels read them. */
typedef struct cpu_layer {
    cpu_matrix wq, wk, wv, wo, w_gate, w_up, w_down;
    const float *attn_norm, *ffn_norm;
    const float *bq, *bk, *bv;                   /* NULL when absent */
    const float *q_norm, *k_norm;                /* NULL when absent */
    const float *post_attn_norm, *post_ffn_norm; /* gemma3; NULL when absent */
    /* Mixture of experts (cpu_moe.c): the router, the stacked experts (expert e's gate/up rows
     * are [e n_ff, (e+1) n_ff), its down rows [e n_embd, (e+1) n_embd); a rank's layer holds the
     * stacks whole and down's columns already cut to its ffn rows), the shared expert (sliced like
     * a dense FFN) and its gate vector. */
    cpu_matrix gate_inp, gate_exps, up_exps, down_exps;
    cpu_matrix gate_shexp, up_shexp, down_shexp;
    const float *gate_inp_shexp;
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
    float *gate, *up;                             /* n_ff (MoE: the larger of n_ff and its shared slice) */
    /* Mixture of experts: the experts [e0, e1) this rank computes (all, without ep) and its rows
     * [s0, s1) of the shared expert; the router's logits and probabilities (n_expert), the chosen
     * experts and weights (slot order), and the slots' outputs: n_slots x n_embd (the k chosen,
     * then the shared expert), the buffer of the expert all-reduce. */
    uint32_t e0, e1, s0, s1;
    uint32_t x0, x1; /* the rows of each held expert it computes: [f0, f1) under tp, all under ep */
    float *router;
    uint32_t sel[MEMRA_MAX_EXPERTS_USED];
    float sel_w[MEMRA_MAX_EXPERTS_USED];
    float *slots;
    uint32_t n_slots;
    float sh_gate; /* the shared expert's gate logit, gate_inp_shexp . xn */
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
/* The sites of memra.ops, in the order a layer hands them over (cpu_taps.c). */
typedef enum cpu_site {
    CPU_SITE_ATTN_NORM,
    CPU_SITE_Q,
    CPU_SITE_K,
    CPU_SITE_V,
    CPU_SITE_QK_NORM_Q,
    CPU_SITE_QK_NORM_K,
    CPU_SITE_ROPE_Q,
    CPU_SITE_ROPE_K,
    CPU_SITE_ATTENTION,
    CPU_SITE_ATTN_OUT,
    CPU_SITE_ATTN_RES,
    CPU_SITE_FFN_NORM,
    CPU_SITE_FFN_GATE,
    CPU_SITE_FFN_UP,
    CPU_SITE_FFN_ACT,
    CPU_SITE_FFN_DOWN,
    CPU_SITE_FFN_RES,
    CPU_SITE_OUTPUT_NORM,
    CPU_SITE_LOGITS,
    CPU_SITE_COUNT
} cpu_site;
typedef struct cpu_taps cpu_taps;

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
    cpu_taps *taps; /* non-NULL during a tapped step only (memra.ops): the one branch per op */
    /* Op plugins the arm selects (op.KIND=NAME): each call site runs the bound plugin's entry
     * point instead of the built-in kernel; NULL: the built-in. */
    memra_op_set ops;
    const memra_op_binding *op_rmsnorm, *op_rope, *op_attention, *op_topk;
    const memra_op_binding *op_gemv[64]; /* by weight type */
    uint32_t op_position;                /* the step's position, for the ops' context */
    /* Prefill: rows the activations hold (the arm's `prefill`, CPU_DEFAULT_PREFILL for auto), and
     * the row of the last position of the step or chunk in progress (its hidden state). */
    uint32_t chunk, last_row;
    uint32_t kv;               /* cpu_kv: the rounding of the K and V rows written */
    uint32_t rope_pos;         /* the position rope_cos/rope_sin hold */
    const memra_options *opts; /* the arm's options, during cpu_open only */
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

/* The arm's options, read and checked (cpu_plugin.c). */
typedef struct cpu_config {
    uint32_t threads, vdevices, grain;
    uint32_t prefill; /* the core key `prefill` as the activations are sized: auto is CPU_DEFAULT_PREFILL */
    uint32_t kv;      /* cpu_kv: how the KV values are rounded as they are written */
    const char *collective;
} cpu_config;

/* The arm key `kv`: the K and V rows are rounded to this type as they are written (f32: not at
 * all), as a GPU that stores its cache in f16 or bf16 rounds them; the cache stays f32 in memory
 * (the op plugins' attention reads floats), so only the values change, not the bytes. */
typedef enum cpu_kv { CPU_KV_F32 = 0, CPU_KV_F16 = 1, CPU_KV_BF16 = 2, CPU_KV_Q8 = 3 } cpu_kv;

memra_status cpu_read_options(const memra_options *opts, cpu_config *cfg, memra_error *err);

/* cpu_open.c: the backend's lifecycle. */
memra_status cpu_open(const memra_host *host, const memra_model *m, const memra_plan *plan, const memra_options *opts,
                      memra_backend **out, memra_error *err);
void cpu_close(memra_backend *b);
/* n zeroed floats, counted in the backend's scratch bytes. */
void *cpu_alloc_floats(memra_backend *b, size_t n);

/* A bound weight as the kernels read it (checked: type, shape, bytes, alignment); a vector of n F32
 * values (NULL when absent and optional). */
memra_status cpu_bind_matrix(const memra_weight *w, uint64_t rows, uint64_t cols, cpu_matrix *out, memra_error *err);
memra_status cpu_bind_vector(const memra_weight *w, uint64_t n, bool optional, const float **out, memra_error *err);

/* cpu_stages.c: the plan's stages and their ranks. */
memra_status cpu_check_plan(const memra_model *m, const memra_plan *plan, uint32_t n_vdevices, memra_error *err);
/* Rows [r0, r1) of w; columns [c0, c1) of every row (on the type's blocks: else refused naming
 * the layer and what): views. */
cpu_matrix cpu_rows_of(const cpu_matrix *w, uint32_t r0, uint32_t r1);
memra_status cpu_cols_of(const cpu_matrix *w, uint32_t c0, uint32_t c1, const char *what, uint32_t il, cpu_matrix *out,
                         memra_error *err);
memra_status cpu_open_ranks(memra_backend *b, const memra_stage_plan *sp, cpu_stage *sg, memra_error *err);

/* cpu_forward.c: one token through every layer, then the final norm and the head. */
memra_status cpu_forward(memra_backend *b, memra_state *s, uint32_t token, uint32_t pos, memra_error *err);
/* A prefill chunk: nr (<= b->chunk) rows, tokens[j] at position pos0 + j (cpu_step_chunk). */
memra_status cpu_forward_rows(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t nr, uint32_t pos0,
                              memra_error *err);
void cpu_head_forward(memra_backend *b);
/* The sampler's sort through the arm's op.topk plugin (memra_sample_sort_fn; user is the backend). */
void cpu_op_topk(void *user, const float *logits, uint32_t n_vocab, uint32_t k, uint32_t *seq);
static inline const float *cpu_last_hidden(const memra_backend *b) {
    return b->stages[b->n_stages - 1].ranks[0].x + (size_t)b->last_row * b->m->n_embd;
}

/* cpu_moe.c: a mixture-of-experts FFN. cpu_moe_rank: rank r's router, top-k and its chosen
 * experts into its slots (zeros where another rank computes); cpu_moe_combine: the weighted sum in
 * slot order into every rank's xn. cpu_moe_open_rank: a rank's expert slices and buffers. */
void cpu_moe_rank(memra_backend *b, cpu_stage *sg, uint32_t r, uint32_t il);
void cpu_moe_combine(memra_backend *b, cpu_stage *sg, uint32_t il);
memra_status cpu_moe_bind_layer(const memra_model *m, uint32_t il, cpu_layer *L, memra_error *err);
memra_status cpu_moe_open_rank(memra_backend *b, cpu_stage *sg, uint32_t r, memra_error *err);
void cpu_moe_free_rank(cpu_rank *rk);

/* cpu_tp.c: the collective of tensor parallelism. */
memra_status cpu_open_collective(memra_backend *b, const memra_plan *plan, const cpu_config *cfg,
                                 const memra_options *opts, memra_error *err);
void cpu_collective_step_begin(memra_backend *b, uint32_t pos);
/* row: which row of the ranks' xn (a prefill chunk's; 0 for a step). */
memra_status cpu_all_reduce(memra_backend *b, cpu_stage *sg, uint32_t il, uint32_t which, uint32_t row,
                            memra_error *err);
memra_status cpu_hand_cells(memra_backend *b, uint32_t pos, memra_error *err);
void cpu_drop_handed_cells(memra_backend *b);
memra_status cpu_check_statuses(memra_backend *b, uint32_t pos, memra_error *err);
extern const memra_ext_tp_v1 cpu_tp_ext;

/* cpu_state.c: states. */
memra_status cpu_state_new(memra_backend *b, uint32_t capacity, uint32_t max_inflight, memra_state **out,
                           memra_error *err);
void cpu_state_free(memra_backend *b, memra_state *s);
memra_status cpu_digest(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32], memra_error *err);
memra_status cpu_state_restore(memra_backend *b, memra_state *dst, const memra_state *src, memra_error *err);
uint32_t cpu_state_position(memra_backend *b, const memra_state *s);
memra_status cpu_state_stats(memra_backend *b, const memra_state *s, memra_state_stats *out, memra_error *err);

/* cpu_taps.c: the per-op taps (memra.ops). Called only while b->taps is set. A rank's piece of a
 * site: n floats at logical offset `at`; the rank holds [shard_begin, shard_end) of the tensor. */
void cpu_tap_rank(memra_backend *b, const cpu_stage *sg, uint32_t r, cpu_site site, uint32_t il, const float *x,
                  uint32_t n, uint32_t at, uint32_t shard_begin, uint32_t shard_end);
/* Hands over the gathered sites, in site order, once every rank of the stage ran its part. */
void cpu_tap_flush(memra_backend *b);
/* A tensor every rank of the stage holds whole (one_rank: rank 0 alone), handed over at once. */
void cpu_tap_whole(memra_backend *b, const cpu_stage *sg, cpu_site site, int32_t layer, const float *x, uint32_t n,
                   bool one_rank);
memra_status cpu_step_tapped(memra_backend *b, memra_state *s, const memra_step_args *args, memra_op_tap_fn fn,
                             void *user, memra_error *err);

/* cpu_step.c: the step's transaction. */
memra_status cpu_check_not_quarantined(const memra_state *s, const char *what, memra_error *err);
memra_status cpu_step_begin(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err);
memra_status cpu_step_end(memra_backend *b, memra_state *s, float *logits, memra_step_result *out, memra_error *err);
/* The backend's step_chunk (plugin.h): count positions as one transaction. */
memra_status cpu_step_chunk(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t count, float *logits,
                            memra_error *err);
/* The chunk the cpu runs best (prefill=auto), and how the backend reads the key. */
#define CPU_DEFAULT_PREFILL 64u
uint32_t cpu_prefill_chunk(const memra_host *host, const memra_options *opts);

#endif
