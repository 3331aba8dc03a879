/* cuda_backend.h: the entry points of the cuda backend, which cuda_plugin.c puts into the plugin's
 * vtable, extension tables and descriptor (internal); and, for its CUDA files only (cuda_state.cu,
 * cuda_weights.cu, cuda_forward.cu, cuda_step_end.cu, cuda_stages.cu, cuda_tp.cu, cuda_ext.cu), the design, the
 * weights, backend and state they share and the functions one of them calls in another. */
#ifndef MEMRA_CUDA_BACKEND_H
#define MEMRA_CUDA_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "memra/op.h"
#include "memra/ext.h"
#include "memra/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* memra_backend_vtable */
memra_status mc_device_count(const memra_host *host, const memra_options *opts, uint32_t *out, memra_error *err);
memra_status mc_open(const memra_host *host, const memra_model *m, const memra_plan *plan, const memra_options *opts,
                     memra_backend **out, memra_error *err);
void mc_close(memra_backend *b);
memra_status mc_state_new(memra_backend *b, uint32_t capacity, uint32_t max_inflight, memra_state **out,
                          memra_error *err);
void mc_state_free(memra_backend *b, memra_state *s);
memra_status mc_step_begin(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err);
memra_status mc_step_end(memra_backend *b, memra_state *s, float *logits, memra_step_result *out, memra_error *err);
memra_status mc_digest(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32], memra_error *err);
memra_status mc_state_restore(memra_backend *b, memra_state *dst, const memra_state *src, memra_error *err);
uint32_t mc_state_position(memra_backend *b, const memra_state *s);
memra_status mc_state_stats(memra_backend *b, const memra_state *s, memra_state_stats *out, memra_error *err);
memra_status mc_memory(memra_backend *b, memra_backend_memory *out, memra_error *err);
memra_status mc_resolve_options(const memra_host *host, const memra_options *opts, memra_options *resolved,
                                memra_error *err);
/* The cuda backends read every matrix through the model's source (vectors through their data
 * pointers), whatever the arm: cuda_weights.cu's chunked upload. */
bool mc_streams_weights(const memra_host *host, const memra_options *opts);
/* prefill (cuda_chunk.cu) */
uint32_t mc_prefill_chunk(const memra_host *host, const memra_options *opts);
memra_status mc_step_chunk(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t count, float *logits,
                           memra_error *err);

/* "memra.bench" v1 */
memra_status mc_device_name(memra_backend *b, char *buf, size_t size, memra_error *err);
memra_status mc_measure_ceiling(memra_backend *b, double *bytes_per_s, char *how, size_t how_size, memra_error *err);

/* "memra.tp" v1 (memra/ext.h) */
memra_status mc_tp_collective(memra_backend *b, char *name, size_t name_size, bool *refusals, memra_error *err);
memra_status mc_tp_arm_refusal(memra_backend *b, uint32_t stage, uint32_t rank, uint32_t layer, uint32_t which,
                               uint32_t position, int32_t word, memra_error *err);
memra_status mc_tp_clear_refusals(memra_backend *b, memra_error *err);
memra_status mc_tp_epochs(memra_backend *b, uint32_t stage, uint32_t rank, uint64_t *out, uint32_t n_blocks,
                          memra_error *err);
bool mc_is_tp(memra_backend *b);

/* "memra.cuda.graph" v1 (cuda_ext.h) */
memra_status mc_prepare(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err);
memra_status mc_body(memra_backend *b, memra_state *s, const memra_sample_cfg *sample, bool capture, memra_error *err);
memra_status mc_finish(memra_backend *b, memra_state *s, const memra_step_args *args, bool after_graph,
                       memra_error *err);
void *mc_ext_stream(memra_backend *b, memra_state *s);
int32_t mc_ext_device(memra_backend *b, memra_state *s);
void mc_quarantine(memra_backend *b, memra_state *s, const char *why);
const char *mc_kernel_family(const void *func);
void mc_on_abort(memra_backend *b, memra_state *s, void (*fn)(void *arg), void *arg);
bool mc_chunk_native(memra_backend *b, memra_state *s);
memra_status mc_chunk_prepare(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t count,
                              memra_error *err);
memra_status mc_chunk_body(memra_backend *b, memra_state *s, uint32_t count, memra_error *err);
memra_status mc_chunk_finish(memra_backend *b, memra_state *s, uint32_t count, float *logits, memra_error *err);

/* "memra.ops" v1 (memra/ext.h; cuda_taps.cu) */
memra_status mc_step_tapped(memra_backend *b, memra_state *s, const memra_step_args *args, memra_op_tap_fn fn,
                            void *user, memra_error *err);

#ifdef __cplusplus
}
#endif

/* ---- internal: what the backend's CUDA files share (not seen by cuda_plugin.c) ---------------- */
#ifdef __CUDACC__

/* The design. The `cuda` backend plugin (eager): weights uploaded once per (model, plan) and
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
 * layer*2+1. gemma3's post norms need the whole sum before the residual add: there every rank
 * computes its partial into po (no residual), the all-reduce sums po, and every rank then adds
 * RMSNorm(po) * post_norm to its x (mc_op_rmsnorm_add: the same bits on every rank); granite's
 * residual scale likewise (po all-reduced, then x += residual_scale * po on every rank).
 *
 * A mixture of experts with ranks (cpu_moe.c's design): every rank computes the router whole
 * from its whole residual (the same bits everywhere), its chosen experts' outputs into their
 * slots of a k x n_embd buffer (zeros in the slots of experts it does not hold; the shared
 * expert's rows it holds into one slot more), then the expert all-reduce of the slots (block
 * layer*2+1, in place of the FFN's) and every rank adds the slots onto its x in slot order. With
 * ep=N rank r holds experts [r n/N, (r+1) n/N) whole, so every slot has one non-zero contributor
 * and ep=N has the bits of one rank; with tp each expert's rows are split (a slot sums the ranks'
 * partials: another order, by design). Under ep alone (tp=1) rank 0 holds the attention, the
 * shared expert and the head whole and the expert ranks none: their attention partial is zeros
 * (a memset), which the attention all-reduce adds to rank 0's exactly. The embedding is computed
 * once (stage 0, rank 0) and copied to every rank; the last
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

#include "cuda_kernels.h"
#include "memra/model.h"
#include "memra/plugin.h"

#define MC_MAX_INFLIGHT 16u

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

/* wqkv and wgu are fused uploads (q, k, v stacked; gate and up interleaved) when their parts share
 * a type. A file may mix types there (Q4_K_M: v in Q6_K, q and k in Q4_K): then qkv_parts > 0 and
 * qkv_part[0 .. qkv_parts) are the runs of equal type, in q, k, v order (one GEMV each, into
 * consecutive rows of the output), and gu_split is set, with gate and up in wg and wu (two GEMVs
 * into a scratch, then the GLU). */
typedef struct mc_layer {
    float *attn_norm, *ffn_norm, *bqkv, *q_norm, *k_norm;
    float *post_attn_norm, *post_ffn_norm; /* gemma3 (NULL elsewhere): RMSNorm of wo's, down's sums */
    mc_matrix wqkv, wo, wgu, wdown;
    mc_matrix qkv_part[3];
    uint32_t qkv_parts;
    bool gu_split;
    mc_matrix wg, wu;
    /* A mixture of experts (moe; memra/model_types.h): the router (n_expert rows), the experts'
     * gate and up stacks interleaved (expert e's 2 n_ff rows from row 2 e n_ff: gate row i at 2i,
     * up row i at 2i + 1), the down stack (expert e's n_embd rows from row e n_embd); with a
     * shared expert its gate (one F32 row) and its FFN in wgu (or wg, wu) and wdown above. */
    bool moe;
    mc_matrix router, gu_exps, down_exps, sh_gate;
} mc_layer;

/* What one rank holds of a mixture of experts (mc_moe_ranges, as cpu_moe.c cuts it): experts
 * [e0, e1) (all of them without ep; rank r's share, whole, with ep=N), rows [x0, x1) of each of
 * them (all with ep or one rank; the rank's ffn rows under tp alone), and the shared expert's rows
 * [s0, s1) (in proportion to the rank's ffn rows: whole on rank 0 and none elsewhere with ep
 * alone). */
typedef struct mc_moe_range {
    uint32_t e0, e1, x0, x1, s0, s1;
} mc_moe_range;

/* One rank's weights of one stage (with one rank: the stage's). */
typedef struct mc_stage_weights {
    int32_t device;
    uint32_t layer_begin, layer_end;
    mc_moe_range moe; /* a mixture of experts: this rank's experts and rows */
    mc_layer *layers; /* layer_end - layer_begin */
    mc_matrix embd;   /* stage 0 */
    float *out_norm;  /* last stage */
    mc_matrix head;   /* last stage */
    float *freqs;     /* head_dim/2 rope frequencies */
    float *freqs_swa; /* gemma3: those of the sliding-window layers (their own base); else freqs */
    void *arena;
    uint64_t bytes;
} mc_stage_weights;

typedef struct mc_weights {
    const memra_model *model;
    memra_plan plan;
    uint32_t ep; /* the arm's ep= (with the plan, what the upload depends on: tp=N and ep=N,tp=N plan alike) */
    uint32_t refs;
    uint64_t bytes;
    /* The upload (cuda_weights.cu): bytes read from the model's source, staging held at most,
     * seconds the chunked reads and copies took. */
    uint64_t load_bytes, load_staging;
    double load_s;
    mc_stage_weights stages[MEMRA_MAX_STAGES][MEMRA_MAX_RANKS];
    struct mc_weights *next;
} mc_weights;

/* A bump allocator over one device arena (sizes rounded to 256 bytes). */
typedef struct mc_uploads mc_uploads;
typedef struct mc_bump {
    char *base;
    uint64_t used, size;
    mc_uploads *up; /* with a real arena: the matrices queued for the chunked upload */
} mc_bump;

static inline void *mc_take(mc_bump *b, uint64_t bytes) {
    void *p = b->base ? b->base + b->used : NULL;
    b->used += (bytes + 255) & ~(uint64_t)255;
    return p;
}

/* ---- backend and states ------------------------------------------------------------------- */

/* The sites the cuda backend taps (memra.ops, cuda_taps.cu), in the order a layer hands them over. */
typedef enum mc_site {
    MC_SITE_Q,
    MC_SITE_K,
    MC_SITE_V,
    MC_SITE_ATTENTION,
    MC_SITE_ATTN_OUT, /* gemma3 (post norms): wo's sum before its norm (after the all-reduce) */
    MC_SITE_ATTN_RES,
    MC_SITE_FFN_ACT,
    MC_SITE_FFN_DOWN, /* gemma3: down's sum before its norm */
    MC_SITE_FFN_RES,
    MC_SITE_LOGITS,
    MC_SITE_COUNT
} mc_site;
typedef struct mc_taps mc_taps;

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
    /* Op plugins the arm selects (op.rmsnorm=NAME, op.gemv.TYPE=NAME; memra/op.h): the GEMVs
     * they touch run unfused (cuda_forward.cu, mc_gemv_site). NULL: the built-in. any_op: an op
     * plugin or norm=unfused (the stages carve op_x and op_y). */
    memra_op_set ops;
    const memra_op_binding *op_rmsnorm;
    const memra_op_binding *op_gemv[64]; /* by weight type */
    bool any_op;
    uint32_t ep;      /* ep=N: expert ranks (1: none); each stage then has N ranks (mc_open) */
    mc_taps *taps;    /* non-NULL during a tapped step only (memra.ops): one host branch per op */
    uint32_t prefill; /* the arm's prefill chunk (the core key, resolved at open): step_chunk's largest count */
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
    uint32_t *att_ticket;     /* attention=split: n_kv words (zeroed with the arena, left zero by every launch) */
    float *op_x, *op_y;       /* with op plugins: a normed input (n_embd), a GEMV's rows before its store */
    float *po;                /* gemma3 (post norms): wo's or down's sum (n_embd; all-reduced with ranks) before
                               * its norm and the residual add */
    float *x2;                /* gemma3, postnorm=prologue: the residual stream's other buffer (n_embd): a GEMV
                               * that adds a post norm to x writes x_new here while its blocks still read x */
    float *gu_pair;           /* gate rows then up rows (2 n_ff) where a layer's gate and up differ in type */
    /* A mixture of experts (cuda_forward.cu's mc_moe_ffn): the router's logits (n_expert, then
     * the shared expert's gate), the chosen ids (k) and weights (k, then the shared gate), the
     * chosen experts' activations (k x n_ff) and outputs, the slots (k x n_embd, then the shared
     * expert's). gu and gu_pair are as wide as the shared expert too. */
    float *moe_logits, *moe_w, *moe_act, *moe_slots;
    int32_t *moe_sel;
    uint32_t *moe_ticket;     /* the fused router's ticket (moe_fuse bit 1, moe_router.cu): zero between launches */
    uint32_t *pn_ticket;      /* gemma3, postnorm=fused: the output and down GEMVs' tickets (mc_gemv_post; words 0
                               * and 1): zeroed with the arena, left zero by every launch */
    int32_t *op_pos;          /* with op plugins: the token's position for the ops after the commit (the head) */
    float *xin;               /* tp, stage 0 rank 0: the embedding, copied by every rank */
    void *k_cache, *v_cache;  /* [layer][n_kv][capacity] rows of hd values of the arm's kv type (cfg.kv: float,
                               * 2-byte f16/bf16, or q8's scales and quants: mc_kv_row_bytes) of the rank's kv heads */
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
    float *xe; /* commit=handoff: the step's input hidden (mc_embed_in_sampler) */
    /* last stage, rank 0 */
    float *logits;
    int32_t *sampled;
    mc_sample_result *result;
    mc_sampler_scratch sampler;
    cudaEvent_t sampled_ev;
} mc_stage_state;

/* Layer `layer`'s attention arguments on stage state ss (cuda_forward.cu): the decode step's and
 * the prefill chunk's, from one place; kv is the arm's cache storage (mc_config's kv). */
mc_rope_args mc_layer_rope_args(const memra_model *m, const mc_stage_state *ss, const mc_stage_weights *sw,
                                const mc_layer *L, uint32_t layer, uint32_t capacity, uint32_t kv);

typedef struct mc_slot {
    cudaEvent_t ev;             /* on the last stage's device: recorded after an eager step */
    cudaEvent_t ev_first;       /* on stage 0's device: recorded after a graph launch (stage 0's stream) */
    cudaEvent_t pending;        /* the one recorded for the step in this slot */
    float *host_logits;         /* pinned, n_vocab */
    mc_sample_result *host_res; /* pinned: the readback's destination (with ranks) */
    int32_t *host_token;        /* pinned */
    const mc_sample_result *res; /* the step's result: host_res, or its entry of the state's res_ring */
    bool want_logits, sampled;
    uint32_t position;
} mc_slot;

struct memra_state {
    uint32_t capacity;       /* rows a kv head's cache holds (its stride): limit, under kv=q8 rounded up to a
                              * multiple of 4 so that each kv head's rows start 16-byte aligned */
    uint32_t limit;          /* the positions the state was made for: steps, chunks and restores past it fail */
    uint32_t max_inflight, n_stages;
    uint32_t position;       /* host mirror: positions of steps begun */
    uint32_t inflight, head; /* slots begun and not ended; the oldest's index */
    bool has_device_token;   /* a previous step sampled (the token lives on the device) */
    bool xe_ready;           /* the last step begun folded the next input's embedding into xe */
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
    /* max_inflight results the last stage's sampler writes itself (pinned, device-visible), at the
     * committed position % max_inflight: no readback copy between two steps (without ranks) */
    mc_sample_result *res_ring;
    struct mc_chunk_buf *chunk; /* a prefill chunk's buffers (cuda_chunk.cu), made by its first chunk */
    mc_stage_state st[MEMRA_MAX_STAGES][MEMRA_MAX_RANKS]; /* [stage][rank] */
};

static inline uint32_t mc_ranks(const memra_state *s, uint32_t i) { return s->n_ranks[i]; }

/* granitemoe: each sublayer's output is scaled before the residual add (0: a description from
 * elsewhere, unscaled, as the cpu backend reads it). */
static inline bool mc_residual_scaled(const memra_model *m) {
    return m->residual_scale > 0.0f && m->residual_scale != 1.0f;
}

/* commit=handoff or head on state s (cuda_forward.cu): one stage of one rank, no taps, no residual
 * scale, and a first layer whose attention output goes into the residual as it is (no post norm),
 * or, under postnorm=prologue (gemma3), through a post norm that its gate/up GEMV's prologue adds.
 * Then the step's input hidden is stage 0's xe, written by the previous step's sampler (under
 * commit=head, a greedy step's head) or by a launch of its own before the body (mc_prepare); the
 * first layer reads it and writes the residual stream to x (the wo GEMV, or the gate/up prologue's
 * x_new), so x ends the step with its last hidden as under the other commits. */
bool mc_embed_in_sampler(const memra_backend *b, const memra_state *s);
/* The embedding's scale (gemma3's sqrt(n_embd) from the file, granitemoe's multiplier; else 1), as
 * the cpu backend applies it: decode (cuda_stages.cu) and a prefill chunk (cuda_chunk.cu). */
static inline float mc_embd_scale(const memra_model *m) {
    return (m->arch == MEMRA_ARCH_GEMMA3 || m->arch == MEMRA_ARCH_GRANITEMOE) && m->embd_scale > 0.0f ? m->embd_scale
                                                                                                      : 1.0f;
}

/* cuda_state.cu */
memra_status mc_cuda_fail(memra_error *err, cudaError_t e, const char *what);
memra_status mc_quarantine_fail(memra_state *s, memra_error *err);
memra_status mc_sync_all(memra_state *s, memra_error *err);

/* cuda_taps.cu: the per-op taps of a tapped step (memra.ops), called only while b->taps is set:
 * rank r's q, k, v (after the qkv GEMV), attention output, ffn activation; the stage's gathered
 * sites in order; the residual after an all-reduce (or the residual-adding GEMV); with gemma3's
 * post norms (site MC_SITE_ATTN_OUT, MC_SITE_FFN_DOWN) the sum before the norm, rank 0's po. */
void mc_tap_qkv(memra_backend *b, memra_state *s, uint32_t i, uint32_t r, int32_t layer);
void mc_tap_attention(memra_backend *b, memra_state *s, uint32_t i, uint32_t r, int32_t layer);
void mc_tap_ffn_act(memra_backend *b, memra_state *s, uint32_t i, uint32_t r, int32_t layer);
void mc_tap_flush(memra_backend *b);
void mc_tap_residual(memra_backend *b, memra_state *s, uint32_t i, mc_site site, int32_t layer);

/* cuda_weights.cu */
void mc_vocab_range(uint32_t V, uint32_t R, uint32_t r, uint32_t *v0, uint32_t *v1);
/* The rows [v0, v1) of the vocabulary (of the head, on the last stage) that rank r of a stage
 * holds: split over the ranks that hold heads; under ep alone rank 0 holds every row and the
 * expert ranks none (the head's GEMV then has the bits of one rank's). */
void mc_rank_vocab(const memra_model *m, const memra_stage_plan *sp, uint32_t r, uint32_t *v0, uint32_t *v1);
/* Rank r's share of a mixture of experts (mc_moe_range), checked: the shared expert cut on whole
 * rows, each expert's rows a multiple of 4 (gemv_experts' 16-byte loads) and the down stacks'
 * columns on whole quant blocks. ep: the arm's ep= (1 or the stage's rank count). */
memra_status mc_moe_ranges(const memra_model *m, const memra_stage_plan *sp, uint32_t r, uint32_t ep, mc_moe_range *out,
                           memra_error *err);
const char *mc_device_label(int32_t dev, char *buf, size_t n);
memra_status mc_weights_acquire(const memra_model *m, const memra_plan *plan, uint32_t ep, mc_weights **out,
                                memra_error *err);
void mc_weights_release(mc_weights *w);

/* cuda_chunk.cu */
memra_status mc_read_prefill(const memra_options *opts, uint32_t *out, memra_error *err);
void mc_chunk_free(memra_state *s);

/* cuda_stages.cu */
memra_status mc_enable_peer(int to, int from, memra_error *err);
memra_status mc_stage_input(memra_backend *b, memra_state *s, uint32_t i, bool capture, memra_error *err);

/* cuda_tp.cu */
memra_status mc_open_tp(memra_backend *b, const memra_options *opts, uint32_t n_dev, memra_error *err);
memra_status mc_check_idle_tp_keys(const memra_host *host, const memra_plan *plan, const memra_options *opts,
                                   memra_error *err);
memra_status mc_state_tp(memra_backend *b, memra_state *s, memra_error *err);
memra_status mc_hand_cells(memra_backend *b, memra_state *s, uint32_t position, memra_error *err);
/* What an all-reduce sums in place on every rank: its x (the residual with rank 0's partial and
 * the others'), its po (gemma3's post norms, granite's residual scale: the partials before the
 * norm or the scale), or its slots (the expert all-reduce of a mixture of experts: k x n_embd,
 * then the shared expert's n_embd). */
typedef enum mc_reduce_buf { MC_REDUCE_X, MC_REDUCE_PO, MC_REDUCE_SLOTS } mc_reduce_buf;
memra_status mc_all_reduce(memra_backend *b, memra_state *s, uint32_t i, uint32_t l, uint32_t which, mc_reduce_buf what,
                           memra_error *err);
memra_status mc_check_verdicts(memra_backend *b, memra_state *s, uint32_t p, memra_error *err);

#endif /* __CUDACC__ */
#endif
