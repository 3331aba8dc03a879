/* memra/plugin.h: the plugin ABI, version 1.
 *
 * A plugin is a shared object that exports one descriptor, `const memra_plugin memra_plugin_v1`,
 * whose symbol name carries the ABI version (a later core looks for memra_plugin_v2 first and
 * adapts a v1 descriptor). The core checks abi_version and struct_size of the descriptor and of
 * its vtable before it calls anything, and refuses a plugin with a message naming the file and
 * both versions.
 *
 * Rules of evolution (as NCCL's plugins and SQLite's VFS have them): every struct starts with its
 * size; members are only ever appended; a member past the struct_size a plugin declared, or a
 * NULL member, means "not supported" and the core refuses or falls back, never calls through it.
 *
 * Five kinds of vtable, one per kind of plugin (each member's contract is the comment above it;
 * `grep -n "typedef struct memra_backend_vtable" plugin.h` finds one):
 *   placement   memra_placement_vtable: model + arm options + devices -> plan (stages, devices,
 *               ranks, weight slices)
 *   backend     memra_backend_vtable: uploads a rank's weights; states; one step as a
 *               transaction; digests; snapshots
 *   collective  memra_collective_vtable: in-place sum all-reduce over ranks on device buffers,
 *               epochs, refusals, abort
 *   sampler     memra_sampler_vtable: logits + position + config -> token
 *   op          memra_op_vtable: one operation (rmsnorm, rope, attention, the GEMV of one weight
 *               type, the sampler's top-k) for one or more backend families, selected on the arm
 *               (`cpu:op.rmsnorm=NAME`; memra/op.h binds them for a backend)
 * The descriptor that names the one vtable of a plugin is `struct memra_plugin` (at the end).
 * A backend to copy, built and loaded by the tests: examples/backend-minimal (README: "Shipping
 * a backend as a plugin").
 *
 * What every vtable shares: `struct_size` first, set to sizeof the struct the plugin was built
 * with; `options`/`n_options`, where a kind has them, list the arm keys the plugin reads (key,
 * default as typed, one line of help: `memra plugins` and --help print them, and an arm with a
 * key that none of its plugins (backend, placement) nor the core takes is refused before any
 * call); "Never NULL" on a member means the registry refuses a plugin that leaves it NULL, "May
 * be NULL" that the core checks and does without.
 *
 * Every function returns memra_status and writes a message into its memra_error on failure.
 * Plugins never exit, abort or print; they log through the host table. */
#ifndef MEMRA_PLUGIN_H
#define MEMRA_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memra/model_types.h"
#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEMRA_ABI_VERSION 1u
#define MEMRA_PLUGIN_SYMBOL "memra_plugin_v1"

/* The size a struct must declare (its struct_size) to hold `member`: offset plus size. */
#define MEMRA_STRUCT_END(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))
/* Whether a struct a plugin (or the core) handed over is non-NULL and declares a struct_size
 * large enough to hold `member`. Every test of this kind is written with this macro; a member
 * it admits may still be NULL where its comment says "May be NULL". */
#define MEMRA_HAS_MEMBER(ptr, type, member) ((ptr) != NULL && (ptr)->struct_size >= MEMRA_STRUCT_END(type, member))

/* Extensions: optional tables a backend offers through its vtable's `extension` member, found by
 * name and version (memra_arm_extension checks their size). Those that exist:
 *   "memra.bench" v1        memra_ext_bench_v1 (memra/ext.h): the device's name and a measured
 *                           bandwidth ceiling. Offered by cpu and cuda; used by `memra bench`.
 *   "memra.census" v1       memra_ext_census_v1 (memra/ext.h): the kinds of node in a state's
 *                           captured graph, and DOT dumps. Offered by cuda-graph (and the test
 *                           backend faulty); used by memra-gate (census record, --dump-graphs).
 *   "memra.cuda.graph" v1   memra_cuda_graph_ext_v1 (backends/cuda/cuda_ext.h, private to the
 *                           cuda plugins): a step split in prepare, body and finish, so that the
 *                           body can be captured. Offered by cuda; used by cuda-graph.
 *   "memra.tp" v1           memra_ext_tp_v1 (memra/ext.h): a tensor-parallel backend's collective
 *                           sites: refusal cells and epochs. Offered by cpu when a stage has more
 *                           than one rank; used by memra-gate through memra/arm.h.
 *   "memra.ops" v1          memra_ext_ops_v1 (memra/ext.h): one step with taps after every op,
 *                           handing back each site's logical tensor. Offered by cpu (and the test
 *                           backend faulty); used by memra-gate's bisect through memra/arm.h.
 * A new extension is added to this list with its version, its table's header, who offers it and
 * who uses it; a changed table gets a new version (a _v2 struct), never new meanings. */

#if defined(__GNUC__)
#define MEMRA_EXPORT __attribute__((visibility("default")))
#else
#define MEMRA_EXPORT
#endif

typedef enum memra_plugin_kind {
    MEMRA_PLUGIN_PLACEMENT = 1,
    MEMRA_PLUGIN_BACKEND = 2,
    MEMRA_PLUGIN_COLLECTIVE = 3,
    MEMRA_PLUGIN_SAMPLER = 4,
    MEMRA_PLUGIN_OP = 5 /* appended: a descriptor of this kind sets `op` (below) */
} memra_plugin_kind;

/* "placement", "backend", "collective", "sampler", "op"; "unknown" otherwise. */
const char *memra_plugin_kind_name(uint32_t kind);
/* Parses one of the words above; false when it is none of them. */
bool memra_plugin_kind_parse(const char *word, memra_plugin_kind *out);

/* ------------------------------------------------------------------------------------------ */
/* Options: the key=value pairs of an arm (BACKEND[:key=value,...]).                           */

#define MEMRA_OPT_KEY_MAX 32
#define MEMRA_OPT_VALUE_MAX 128
#define MEMRA_OPT_MAX 32

typedef struct memra_option {
    char key[MEMRA_OPT_KEY_MAX];
    char value[MEMRA_OPT_VALUE_MAX];
} memra_option;

typedef struct memra_options {
    uint32_t n;
    memra_option items[MEMRA_OPT_MAX];
} memra_options;

/* A key a plugin accepts: its name, the default written as it would be typed ("" when the
 * default is computed, e.g. from the machine), and one line of help for --help. */
typedef struct memra_option_spec {
    const char *key;
    const char *default_value;
    const char *help;
} memra_option_spec;

/* ------------------------------------------------------------------------------------------ */
/* Plans: what placement decides and backends follow.                                          */

#define MEMRA_MAX_STAGES 64
#define MEMRA_MAX_RANKS 8

/* One rank of a stage: the device it runs on and the slices of each layer's weights it holds.
 * Heads [head_begin, head_end) of q (and their rows of wq, columns of wo), kv heads
 * [kv_head_begin, kv_head_end), ffn rows [ff_begin, ff_end) of gate/up (columns of down).
 * With one rank the slices are whole. */
typedef struct memra_rank_plan {
    int32_t device;
    uint32_t head_begin, head_end;
    uint32_t kv_head_begin, kv_head_end;
    uint32_t ff_begin, ff_end;
} memra_rank_plan;

/* One stage: layers [layer_begin, layer_end). Stage 0 also embeds the token; the last stage
 * also applies the final norm and the head. */
typedef struct memra_stage_plan {
    uint32_t layer_begin, layer_end;
    int32_t device; /* the device of rank 0 */
    uint32_t n_ranks;
    memra_rank_plan ranks[MEMRA_MAX_RANKS];
} memra_stage_plan;

typedef struct memra_plan {
    uint32_t struct_size;
    uint32_t n_stages;
    memra_stage_plan stages[MEMRA_MAX_STAGES];
} memra_plan;

/* ------------------------------------------------------------------------------------------ */
/* Sampling                                                                                    */

/* temperature <= 0 means greedy (argmax, lowest index on ties) and the other fields are unused.
 * top_k 0 means no top-k cut; top_p >= 1 means no nucleus cut. The draw is
 * memra_uniform(seed, position) (memra/numeric.h), position being the index the sampled token
 * will take in the sequence (the state's position after the step commits). The exact algorithm,
 * which every sampler and every device sampler follows bit for bit, is written in
 * memra/sampling.h (memra_sample is its host implementation, in libmemra). */
typedef struct memra_sample_cfg {
    float temperature;
    uint32_t top_k;
    float top_p;
    uint64_t seed;
} memra_sample_cfg;

/* ------------------------------------------------------------------------------------------ */
/* The host table: what the core hands each plugin at init.                                    */

typedef enum memra_log_level {
    MEMRA_LOG_ERROR = 0,
    MEMRA_LOG_WARN = 1,
    MEMRA_LOG_INFO = 2,
    MEMRA_LOG_DEBUG = 3
} memra_log_level;

typedef struct memra_plugin memra_plugin;
typedef struct memra_sha256_ctx memra_sha256_ctx;

typedef struct memra_host {
    uint32_t abi_version; /* MEMRA_ABI_VERSION of the core */
    uint32_t struct_size; /* sizeof(memra_host) of the core: test a member with MEMRA_HAS_MEMBER */
    /* Logs one line through the application's sink (silent unless the application set one). */
    void (*log)(memra_log_level level, const char *plugin, const char *fmt, ...);
    /* Looks up (and loads, if need be) a plugin by name and kind: how one plugin builds on
     * another (cuda-graph on cuda; a test backend on cpu). Never NULL. */
    memra_status (*find_plugin)(const char *name, memra_plugin_kind kind, const memra_plugin **out, memra_error *err);
    /* SHA-256: one shot, or incremental (new, update..., final frees the context). */
    void (*sha256)(const void *data, size_t n, uint8_t out[32]);
    memra_sha256_ctx *(*sha256_new)(void);
    void (*sha256_update)(memra_sha256_ctx *ctx, const void *data, size_t n);
    void (*sha256_final)(memra_sha256_ctx *ctx, uint8_t out[32]);
    /* Writes status and message into err; returns status (memra_fail). */
    memra_status (*fail)(memra_error *err, memra_status status, const char *fmt, ...);
} memra_host;

/* ------------------------------------------------------------------------------------------ */
/* Placement                                                                                   */

typedef struct memra_placement_vtable {
    uint32_t struct_size; /* sizeof(memra_placement_vtable) the plugin was built with */
    /* Keys this placement reads from the arm's options (stages, splits, devices, tp, ...). */
    const memra_option_spec *options;
    uint32_t n_options;
    /* model + options + the devices the backend offers -> plan. An impossible plan (cuts out of
     * order or range, more stages than layers, heads not divisible by ranks, an unknown device)
     * is MEMRA_E_INVALID with a message naming the option. Never NULL. */
    memra_status (*plan)(const memra_model *m, const memra_options *opts, uint32_t n_devices, memra_plan *out,
                         memra_error *err);
} memra_placement_vtable;

/* ------------------------------------------------------------------------------------------ */
/* Collective                                                                                  */

typedef struct memra_collective memra_collective;

/* Status words a collective writes to status_dev besides 0 (ok) and an armed refusal's word.
 * Host ranks (`local`): every call writes PENDING to its own rank's status when it registers,
 * and the operation's last call overwrites every rank's status with the outcome, so an operation
 * that never completed (a rank's call failed, or the communicator aborted) reads nonzero, and a
 * backend that checks the status before it commits commits nothing. FAILED: the operation itself
 * failed (counts differ between ranks); the buffers are then untouched. Refusal words may not be
 * 0 nor either of these. */
#define MEMRA_COLLECTIVE_PENDING INT32_MIN
#define MEMRA_COLLECTIVE_FAILED (INT32_MIN + 1)
/* Device ranks: the communicator was aborted from the host (abort) before or while the operation
 * ran; every rank that saw it reads this. */
#define MEMRA_COLLECTIVE_ABORTED (INT32_MIN + 2)
/* Fault injection (device collectives that spin, e.g. oneshot): armed with arm_refusal as the
 * word, the rank's part of that operation is skipped: it never arrives, and its own status reads
 * this word; its peers time out. A collective that cannot inject it refuses it at arm_refusal. */
#define MEMRA_COLLECTIVE_ABSENT (INT32_MIN + 3)
/* A rank waited timeout_ms for `peer` (0..MEMRA_MAX_RANKS-1), which never arrived. After a
 * timeout the communicator is broken: every later operation of every rank completes at once
 * with MEMRA_COLLECTIVE_FAILED, without waiting. */
#define MEMRA_COLLECTIVE_TIMEOUT(peer) (INT32_MIN + 16 + (int32_t)(peer))
/* Words a refusal may not carry (every MEMRA_COLLECTIVE_ word lies here), besides 0. */
#define MEMRA_COLLECTIVE_RESERVED(word) ((word) >= INT32_MIN && (word) < INT32_MIN + 256)

/* The size of a bootstrap id (as NCCL's ncclUniqueId): opaque bytes made once, by rank 0's
 * process, with bootstrap_id, and handed to every rank by the launcher's rendezvous. */
#define MEMRA_COLLECTIVE_ID_BYTES 128

/* What one rank needs to join a communicator without a device list: how many ranks it has,
 * which one this is, its device, and the id that names this communicator (one id per
 * communicator: a pipeline of stages makes one id, so one communicator, per stage). */
typedef struct memra_collective_bootstrap {
    uint32_t struct_size; /* sizeof(memra_collective_bootstrap) the caller was built with */
    uint32_t n_ranks;     /* 1..MEMRA_MAX_RANKS */
    uint32_t rank;        /* 0..n_ranks-1 */
    int32_t device;       /* this rank's device; -1 for a host rank */
    uint8_t id[MEMRA_COLLECTIVE_ID_BYTES];
} memra_collective_bootstrap;

/* Device ranks (a collective of GPUs driven from one process: nccl, oneshot). `stream` is the
 * cudaStream_t of `rank`'s device on which the backend computes that rank; buf, *position_dev
 * and *status_dev are device memory of that rank's device (status_dev may also be host-mapped).
 * - One operation is the n calls of its ranks for one block, made from one host thread back to
 *   back in rank order 0..n-1, with nothing enqueued on those ranks' streams between them (so a
 *   collective may defer every rank's enqueue to the last call, as NCCL's grouped calls need).
 * - Each rank's part runs in its stream's order: work enqueued on that stream after the call
 *   sees the summed buf and the status. *position_dev is read when the part runs.
 * - Every part writes its rank's status: 0, the refusal word, or a MEMRA_COLLECTIVE_ word. A
 *   backend checks the statuses on the device before it commits (and reads them back).
 * - The calls may be captured into one CUDA graph with the rest of the step; each replay is a
 *   new operation: epochs, refusal cells and the collective's signals advance on the device, so
 *   nothing is reset between replays.
 * - epochs and arm_refusal are called with no operation of the communicator in flight (the
 *   caller synchronises the ranks' streams first); a cell takes effect for operations that
 *   run after arm_refusal returns, graph replays included.
 * - abort may be called from any thread at any time, also while parts spin on the device: they
 *   end with MEMRA_COLLECTIVE_ABORTED within about a millisecond.
 * - A collective that spins bounds every wait (its option timeout_ms) and then writes
 *   MEMRA_COLLECTIVE_TIMEOUT(peer); it never hangs the device.
 *
 * ABI rule for this vtable (as for every struct here): members are only appended, below the last
 * one, and MEMRA_ABI_VERSION stays 1 while they are. The registry's minimum size for a collective
 * vtable stays the end of `abort` (ABI 1's first shape), so a plugin built before a member was
 * appended still loads: it declares the smaller struct_size, and the core tests every appended
 * member with MEMRA_HAS_MEMBER and for NULL before it calls it. A changed meaning or signature
 * would be a new ABI version, never an edit here.
 *
 * A communicator is one stage's ranks: a pipeline creates one per stage, and their blocks and
 * epochs are counted apart. */
typedef struct memra_collective_vtable {
    uint32_t struct_size; /* sizeof(memra_collective_vtable) the plugin was built with */
    /* Keys this collective reads (`collective=NAME:key=value`, e.g. oneshot's timeout_ms). */
    const memra_option_spec *options;
    uint32_t n_options;
    /* Creates a communicator over n_ranks ranks on devices[0..n_ranks-1] (a collective of host
     * ranks ignores devices, which may then be NULL), all driven from this process. Never NULL. */
    memra_status (*create)(const memra_host *host, uint32_t n_ranks, const int32_t *devices, const memra_options *opts,
                           memra_collective **out, memra_error *err);
    /* Frees a communicator made by create or create_rank, after every operation of it has
     * completed or the communicator was aborted. Never NULL. */
    void (*destroy)(memra_collective *c);
    /* In-place sum of count floats at buf (device memory of `rank`), enqueued on `stream` (the
     * backend's stream for that rank; NULL for host threads). Every rank reduces in rank order
     * 0..n-1 from rank 0's value, so all ranks get the same bits.
     * Host ranks (stream NULL; buf, position_dev and status_dev are host memory): one operation is
     * the n calls of its ranks for one block, in any order and from any threads (one thread may
     * make all n in turn); a call never waits for the others; the operation is complete, every
     * rank's buffer and status written, when the last of its n calls has returned, which the
     * caller orders (a join) before it reads them. `block` names the reduction
     * site (layer*2 + 0 attention, + 1 ffn) and `position` the token, for refusal cells. The
     * status of the operation is published to `status_dev` (device int32, 0 = ok, else the
     * refusal word), which the backend checks before it commits. Never NULL. */
    memra_status (*all_reduce_sum_f32)(memra_collective *c, uint32_t rank, float *buf, size_t count, void *stream,
                                       uint32_t block, const int32_t *position_dev, int32_t *status_dev,
                                       memra_error *err);
    /* Epoch counters per block of one rank, out[0..n_blocks-1], for census checks: a rank's
     * counter of a block advances by one for each of its calls for that block that the
     * collective accepted (refused operations included), and only increases; a block never
     * called reads 0. May be NULL. */
    memra_status (*epochs)(memra_collective *c, uint32_t rank, uint64_t *out, uint32_t n_blocks, memra_error *err);
    /* Fault injection: the next operation of `block` whose position (*position_dev, read from
     * `rank`'s own call) equals `position` is refused with `word` (not 0, not a
     * MEMRA_COLLECTIVE_ word). The refusing rank still takes part (its call counts, epochs
     * advance) and at completion every rank's status reads the word, so all ranks agree on the
     * outcome; the collective says whether the buffers are then summed or untouched (the backend
     * commits nothing either way). A refusal that fired is disarmed; several may be armed at
     * once. May be NULL: the collective has no refusal cells. */
    memra_status (*arm_refusal)(memra_collective *c, uint32_t rank, uint32_t block, uint32_t position, int32_t word,
                                memra_error *err);
    /* Raises the abort flag: every spinning rank gives up with an error, and every later
     * all_reduce_sum_f32 fails until destroy. May be NULL. */
    void (*abort)(memra_collective *c);

    /* ---- appended after ABI 1's first shape (which ends at `abort`) ---- */

    /* Makes a fresh bootstrap id (id_size must be MEMRA_COLLECTIVE_ID_BYTES) naming one new
     * communicator; rank 0's process calls it and the launcher hands the bytes to every rank.
     * May be NULL: the collective works within one process only (use `create`). */
    memra_status (*bootstrap_id)(const memra_host *host, uint8_t *id, size_t id_size, memra_error *err);
    /* Creates one rank's handle on the communicator `boot` names: each of the n_ranks ranks
     * (processes, on one host or several) calls it with the same id and n_ranks and its own
     * rank and device. It may wait for the others to join. The handle is used with `rank` =
     * boot->rank and freed with destroy. May be NULL: the collective works within one process
     * only (use `create`). */
    memra_status (*create_rank)(const memra_host *host, const memra_collective_bootstrap *boot,
                                const memra_options *opts, memra_collective **out, memra_error *err);
    /* Disarms every refusal cell of every rank not yet fired (no operation in flight). May be
     * NULL: cells then stay armed until they fire (a backend hands a collective only the cells of
     * the step it is about to run). */
    memra_status (*clear_refusals)(memra_collective *c, memra_error *err);
} memra_collective_vtable;

/* ------------------------------------------------------------------------------------------ */
/* Backend                                                                                     */

typedef struct memra_backend memra_backend; /* one model on one plan: weights uploaded */
typedef struct memra_state memra_state;     /* one decode session of a backend */

typedef enum memra_digest_kind {
    MEMRA_DIGEST_LOGITS = 0, /* the last step's logits, float32 bits */
    MEMRA_DIGEST_CACHE = 1,  /* the KV cache over positions [0, pos), every layer, canonical order */
    MEMRA_DIGEST_HIDDEN = 2  /* the last step's final hidden state (before the final norm) */
} memra_digest_kind;

#define MEMRA_TOKEN_FROM_DEVICE (-1)

/* What one step takes. */
typedef struct memra_step_args {
    uint32_t struct_size;
    /* The input token, or MEMRA_TOKEN_FROM_DEVICE for the token this state's previous step
     * sampled (kept in device memory, so a replayed graph needs no host round trip). */
    int64_t token;
    /* Sample after the head with this config; NULL: do not sample (out->token is then -1). */
    const memra_sample_cfg *sample;
    /* Copy this step's logits to the host buffer given at step_end. */
    bool want_logits;
} memra_step_args;

/* What one step gives back, at step_end. */
typedef struct memra_step_result {
    uint32_t struct_size;
    int64_t token;     /* sampled token, or -1 when not sampled */
    uint32_t position; /* the state's position after the commit */
} memra_step_result;

/* Counters a backend keeps per state, for the gate's census and protocol records. */
typedef struct memra_state_stats {
    uint32_t struct_size;
    uint64_t steps;    /* steps committed */
    uint64_t captures; /* graph captures (0 for eager backends) */
    uint64_t replays;  /* graph replays */
} memra_state_stats;

/* Memory a backend holds, for bench and the protocol record. */
typedef struct memra_backend_memory {
    uint32_t struct_size;
    uint64_t weight_bytes;  /* weights held (shared uploads counted once per backend family) */
    uint64_t cache_bytes;   /* KV caches of live states */
    uint64_t scratch_bytes; /* activations, staging */
    uint64_t device_in_use; /* bytes in use on the devices as the driver reports them; 0 if n/a */
} memra_backend_memory;

typedef struct memra_backend_vtable {
    uint32_t struct_size; /* sizeof(memra_backend_vtable) the plugin was built with */

    /* Keys this backend reads from the arm, besides the placement's (e.g. threads). */
    const memra_option_spec *options;
    uint32_t n_options;

    /* How many devices this backend can place stages and ranks on (virtual ones for cpu).
     * MEMRA_E_DEVICE when there is none ("no CUDA device: ..."). Never NULL. */
    memra_status (*device_count)(const memra_host *host, const memra_options *opts, uint32_t *out, memra_error *err);

    /* Uploads the weights the plan assigns to each rank and prepares streams and scratch.
     * Weights already uploaded for the same model by another backend instance of the same
     * family may be shared. Never NULL. */
    memra_status (*open)(const memra_host *host, const memra_model *m, const memra_plan *plan,
                         const memra_options *opts, memra_backend **out, memra_error *err);
    /* Frees what open made; every state of b is freed first (state_free). Never NULL. */
    void (*close)(memra_backend *b);

    /* A state with room for `capacity` positions and up to `max_inflight` steps begun and not
     * yet ended (1 for a serial caller; W for a window of W). Never NULL. */
    memra_status (*state_new)(memra_backend *b, uint32_t capacity, uint32_t max_inflight, memra_state **out,
                              memra_error *err);
    /* Frees a state (no step of it in flight; a quarantined one too). Never NULL. */
    void (*state_free)(memra_backend *b, memra_state *s);

    /* Begins one step at the state's position: forward through every stage, collective check,
     * commit (KV slot and position), head, sample, readback enqueued. A step is a transaction:
     * on any failure nothing is committed and the state is quarantined (every later step or
     * restore on it fails with MEMRA_E_QUARANTINED until it is freed). A position at capacity is
     * MEMRA_E_RANGE and quarantines nothing. Steps end in the order they began. Never NULL. */
    memra_status (*step_begin)(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err);
    /* Waits for the oldest step begun and not ended; writes its logits into `logits` (n_vocab
     * floats; may be NULL when the step did not want them) and its result. Never NULL. */
    memra_status (*step_end)(memra_backend *b, memra_state *s, float *logits, memra_step_result *out, memra_error *err);

    /* SHA-256 identity of a state (no step in flight). Equal arms of one family give equal
     * digests; see memra_digest_kind. Never NULL. */
    memra_status (*digest)(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32], memra_error *err);
    /* Makes dst an exact copy of src (position, cache up to position, hidden, logits, carried
     * token): how a prefix snapshot is restored. Both states of this backend, no step in
     * flight, dst's capacity >= src's position. Fails on a quarantined src or dst. Never NULL. */
    memra_status (*state_restore)(memra_backend *b, memra_state *dst, const memra_state *src, memra_error *err);
    /* The state's position (tokens committed). Never NULL. */
    uint32_t (*state_position)(memra_backend *b, const memra_state *s);

    /* Counters of a state. May be NULL (all zero). */
    memra_status (*state_stats)(memra_backend *b, const memra_state *s, memra_state_stats *out, memra_error *err);
    /* Memory held. May be NULL. */
    memra_status (*memory)(memra_backend *b, memra_backend_memory *out, memra_error *err);
    /* A backend-specific extension table by name and version (the tables that exist are listed
     * under "Extensions" above). NULL when not offered. May be NULL. */
    const void *(*extension)(memra_backend *b, const char *name, uint32_t version);
    /* Resolves every key of the arm, defaults included, as this backend will use them, into
     * `resolved` (for the protocol record). May be NULL: the core then lists the given keys
     * and the specs' defaults. */
    memra_status (*resolve_options)(const memra_host *host, const memra_options *opts, memra_options *resolved,
                                    memra_error *err);

    /* ---- appended after ABI 1's first shape (which ends at `resolve_options`) ----
     * The registry's minimum size stays the end of resolve_options, so a backend built before
     * these members loads as before; the core tests each with MEMRA_HAS_MEMBER and for NULL. */

    /* Prefill: the chunk of prompt positions this backend runs best per step_chunk call, for the
     * arm's options (the core key `prefill` defaults to it; 0 reads as 1). Called before open,
     * so it may depend on the arm's other keys alone. May be NULL: the default is then 1. */
    uint32_t (*prefill_chunk)(const memra_host *host, const memra_options *opts);
    /* Runs `count` consecutive positions of the state at once, tokens[0..count-1] known on the
     * host (a prompt chunk): one transaction, like `count` steps of step_begin + step_end made
     * without sampling. The core calls it with no step in flight, 1 <= count <= the arm's
     * resolved `prefill` value (read from the arm's options at open, so scratch and captured
     * graphs can be sized there: a cuda-graph backend captures one graph per chunk size it
     * replays, the full chunk and the tail), every token in [0, n_vocab), and position + count
     * <= capacity. On success it commits: the KV rows of every position, position += count,
     * the hidden state and logits of the last position (digests read them as after a step),
     * no carried token (a following MEMRA_TOKEN_FROM_DEVICE step is refused), steps += count in
     * the state's counters; `logits` (n_vocab floats, may be NULL) gets the last position's
     * logits. On any failure (a refused collective at any position of the chunk included) it
     * commits nothing (position and cache digest as before) and quarantines the state.
     * The backend must guarantee CHUNK INVARIANCE: the KV cache and hidden state after any
     * prefix, and the logits at the last position of each call, are bit-identical to `count`
     * single steps, for every count and wherever a chunk starts: no output element's reduction
     * order may depend on count or on the token's row in the chunk (a GEMM runs each element's
     * K loop as the decode GEMV does; attention attends each row causally over positions
     * [0, its own], split at fixed absolute positions as decode splits them). memra-gate proves
     * it: `--a B:prefill=1 --b B:prefill=M` is an exact pair, compared at every chunk boundary.
     * May be NULL: the core runs the chunk as `count` single steps (the same bits by
     * definition). */
    memra_status (*step_chunk)(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t count, float *logits,
                               memra_error *err);
    /* Whether the backend, with the arm's options, reads every matrix's bytes through the model's
     * source (memra_model.source, memra/source.h) and only vectors (rows == 1) through their data
     * pointers: then a tool whose arms all say so opens the model streamed (memra_model.streamed:
     * the matrices are never in host memory; a GPU backend reads them from the file in chunks
     * while it uploads). Called before the model is loaded. May be NULL: the backend reads data
     * pointers, so the whole file is read into memory (and an arm of it on a streamed model is
     * refused). */
    bool (*streams_weights)(const memra_host *host, const memra_options *opts);
} memra_backend_vtable;

/* ------------------------------------------------------------------------------------------ */
/* Sampler                                                                                     */

typedef struct memra_sampler_vtable {
    uint32_t struct_size; /* sizeof(memra_sampler_vtable) the plugin was built with */
    /* Bytes of scratch `sample` needs for n_vocab logits. Never NULL. */
    size_t (*scratch_bytes)(uint32_t n_vocab);
    /* logits (host, n_vocab floats) + position + config -> token. NaN or infinite logits are
     * MEMRA_E_RANGE. Never NULL. */
    memra_status (*sample)(const float *logits, uint32_t n_vocab, uint64_t position, const memra_sample_cfg *cfg,
                           void *scratch, uint32_t *token, memra_error *err);
} memra_sampler_vtable;

/* ------------------------------------------------------------------------------------------ */
/* Op: one operation of a backend, from a plugin                                               */

/* What an op plugin supplies: the arm key `op.KIND=NAME[:KEY=VALUE...]` names the plugin NAME for
 * KIND (below, as written in the key), e.g. `cpu:op.rmsnorm=mylab`, `cuda:op.gemv.q8_0=mylab`,
 * `cpu:op.rmsnorm=faultyop:site=ffn_norm:layer=1`; the items after NAME are the plugin's own keys
 * (its `options`), separated by ':' (or ','). With no such key the backend runs its built-in op.
 * The vocabulary of op kinds and sites is shared with the bisect (issue 30). */
typedef enum memra_op_kind {
    MEMRA_OP_RMSNORM = 1,   /* "rmsnorm": attn_norm, ffn_norm, output_norm, qk_norm, post norms */
    MEMRA_OP_ROPE = 2,      /* "rope": q and k of each head */
    MEMRA_OP_ATTENTION = 3, /* "attention": one head's attention over the cached positions */
    MEMRA_OP_GEMV = 4,      /* "gemv.TYPE" (gemv.f32, gemv.q8_0, ...): the GEMV of one weight type */
    MEMRA_OP_TOPK = 5       /* "topk": the sampler's sort (step 2 of memra/sampling.h) */
} memra_op_kind;

/* The layer of a call at the output head (output_norm, logits). */
#define MEMRA_OP_LAYER_HEAD UINT32_MAX

/* Where a call of an op sits, handed to every call (read-only, valid for the call only). The
 * site names are the bisect's: attn_norm, q, k, v, qk_norm, rope, attention, attn_out, ffn_norm,
 * ffn_gate, ffn_up, ffn_down, output_norm, logits (and post_attn_norm, post_ffn_norm for
 * gemma3's norms of the reduced sums). Test members with MEMRA_HAS_MEMBER (appended ones may be
 * missing from a core older than the plugin). */
typedef struct memra_op_ctx {
    uint32_t struct_size;
    const char *site;   /* the site, as above */
    const char *tensor; /* "q" or "k" at qk_norm and rope; the site's name elsewhere */
    uint32_t layer;     /* the model's layer index, or MEMRA_OP_LAYER_HEAD */
    uint32_t head;      /* the (model-wide) head index of a per-head call; 0 otherwise */
    uint32_t position;  /* the token's position as the host knows it when it issues the call */
    uint32_t rank;      /* the rank of its stage (0 without tensor parallelism) */
    uint32_t stage;
    /* cuda: the position in device memory (int32), what a kernel must read to act on the
     * position: a captured graph replays the launches with the capture's `position`, while this
     * word holds the replayed token's (at the head too, which runs after the step's commit has
     * advanced the state's own position word: the backend hands a copy). NULL on cpu. */
    const int32_t *position_dev;
} memra_op_ctx;

typedef struct memra_op memra_op; /* one instance of an op plugin, bound to one backend's arm */

/* An op plugin's vtable: one entry point per (backend family, op kind), typed for that family:
 * cpu members take host pointers and run on the calling thread; cuda members take device
 * pointers and enqueue on `stream` (a cudaStream_t passed as void *), kernels only, no
 * synchronisation, no allocation, nothing a CUDA graph capture forbids: cuda-graph captures the
 * launches with the rest of the token and replays them. A NULL entry point means "not supported":
 * a backend whose arm names this plugin for that (family, kind) refuses the arm with a usage error
 * naming both. A backend family is `cpu` or `cuda` (cuda-graph runs cuda's ops).
 *
 * Exactness: a backend's built-in op fixes an order of operations (cpu_kernels.h, the cuda
 * kernels' comments); a plugin that keeps that order gives the built-in's bits, so the gate of
 * the arm with and without it passes exact; one that changes it is compared with --compare nmse.
 * Every member must give the same bits on every call with the same inputs (no order that depends
 * on timing or on the thread that runs it).
 *
 * ABI rule: members are only appended (new op kinds, new families); the registry's minimum size
 * is the end of `cuda_gemv` (the first shape). A member past the plugin's struct_size is NULL. */
typedef struct memra_op_vtable {
    uint32_t struct_size; /* sizeof(memra_op_vtable) the plugin was built with */
    /* The plugin's own keys, given after its name (`op.rmsnorm=NAME:KEY=VALUE`). A key not
     * listed is refused by the backend before create. */
    const memra_option_spec *options;
    uint32_t n_options;
    /* The weight types `cpu_gemv` / `cuda_gemv` serve: bit (1 << memra_tensor_type) for each
     * (MEMRA_TYPE_F32 = bit 0, MEMRA_TYPE_Q8_0 = bit 8, MEMRA_TYPE_BF16 = bit 30). 0 with NULL. */
    uint64_t cpu_gemv_types;
    uint64_t cuda_gemv_types;

    /* An instance for one backend arm, one (family, kind) (`type` the weight type for
     * MEMRA_OP_GEMV, else 0): opts holds the plugin's own keys of the arm, already checked
     * against `options`. A bad value is MEMRA_E_INVALID naming the key. The backend calls the
     * entry points of this family and kind on the instance until destroy. Never NULL. */
    memra_status (*create)(const memra_host *host, const char *family, memra_op_kind kind, uint32_t type,
                           const memra_options *opts, memra_op **out, memra_error *err);
    /* Frees an instance (no call of it in flight). Never NULL. */
    void (*destroy)(memra_op *op);

    /* ---- cpu: host pointers; may be called from several threads at once (the backend's pool)
     *      for disjoint outputs; they cannot fail (check in create what can be checked) ---- */

    /* out[i] = x[i] * (1 / sqrt(mean(x^2) + eps)) * w[i], i < n. out may equal x. */
    void (*cpu_rmsnorm)(memra_op *op, const memra_op_ctx *ctx, const float *x, const float *w, uint32_t n, float eps,
                        float *out);
    /* Rotates one head (ctx->head) of head_dim floats in place: pair i is (2i, 2i+1), or
     * (i, i + head_dim/2) when neox, by the angle whose cosine and sine are cos_t[i], sin_t[i]. */
    void (*cpu_rope)(memra_op *op, const memra_op_ctx *ctx, float *x, uint32_t head_dim, int neox, const float *cos_t,
                     const float *sin_t);
    /* One head (ctx->head) over n_pos cached positions: q (head_dim), k rows k_stride floats
     * apart, v rows v_stride apart; softmax(q . k_t * scale) weights the v rows into out
     * (head_dim_v). scores: n_pos floats of scratch. */
    void (*cpu_attention)(memra_op *op, const memra_op_ctx *ctx, const float *q, const float *k, size_t k_stride,
                          const float *v, size_t v_stride, uint32_t head_dim, uint32_t head_dim_v, uint32_t n_pos,
                          float scale, float *scores, float *out);
    /* y[r] = W[r] . x for rows r in [r0, r1) of W (rows of `cols` elements of weight `type`,
     * row_bytes apart, as the GGUF file stores them; w points at row 0). Calls for disjoint row
     * ranges of one product may run at once. */
    void (*cpu_gemv)(memra_op *op, const memra_op_ctx *ctx, uint32_t type, const uint8_t *w, size_t row_bytes,
                     uint32_t cols, const float *x, float *y, uint32_t r0, uint32_t r1);

    /* ---- cuda: device pointers, enqueued on stream; MEMRA_E_DEVICE when a launch fails ---- */

    /* rows rows of n floats: out[j*n + i] = x[j*n + i] * (1 / sqrt(mean(x_j^2) + eps)) * w[i].
     * out may equal x. */
    memra_status (*cuda_rmsnorm)(memra_op *op, const memra_op_ctx *ctx, const float *x, const float *w, uint32_t n,
                                 uint32_t rows, float eps, float *out, void *stream, memra_error *err);
    /* y[r] = W[r] . x for every row r < rows: rows of `cols` elements, row_bytes apart (rows
     * padded to 16 bytes), in the GGUF encoding of F32, F16 or BF16 (the only types the cuda
     * backend hands over: cuda_gemv_types names no other). The cuda backend stacks some products:
     * site "q" is the q, k and v rows in that order (qwen2's biases added after), site "ffn_gate"
     * the gate and up rows interleaved (2p gate, 2p+1 up; SwiGLU applied after); the residual
     * adds of attn_out and ffn_down come after too. */
    memra_status (*cuda_gemv)(memra_op *op, const memra_op_ctx *ctx, uint32_t type, const void *w, size_t row_bytes,
                              uint32_t rows, uint32_t cols, const float *x, float *y, void *stream, memra_error *err);

    /* ---- appended after the first shape (which ends at `cuda_gemv`): test with
     *      MEMRA_HAS_MEMBER ---- */

    /* The sampler's step 2 (memra/sampling.h) on the host, for a sampled draw that cuts by top-k or
     * top-p: seq[0..k) = the first k indices of logits[0..n_vocab) in the order z descending, ties
     * by index ascending (k = top_k, or n_vocab when top-p needs the whole order). seq has room
     * for n_vocab indices; those past k are scratch. ctx: site "topk", layer MEMRA_OP_LAYER_HEAD,
     * the step's position. */
    void (*cpu_topk)(memra_op *op, const memra_op_ctx *ctx, const float *logits, uint32_t n_vocab, uint32_t k,
                     uint32_t *seq);
} memra_op_vtable;

/* ------------------------------------------------------------------------------------------ */
/* The descriptor                                                                              */

struct memra_plugin {
    uint32_t abi_version;    /* MEMRA_ABI_VERSION the plugin was built against */
    uint32_t struct_size;    /* sizeof(memra_plugin) the plugin was built with */
    const char *name;        /* matches the manifest's name */
    uint32_t kind;           /* memra_plugin_kind; matches the manifest's kind */
    const char *version;     /* the plugin's own version string */
    const char *description; /* one line, for listings; may be NULL */
    /* Called once after loading, before any vtable call. May be NULL. */
    memra_status (*init)(const memra_host *host, memra_error *err);
    /* Called once before unloading. May be NULL. */
    void (*fini)(void);
    /* Exactly the one matching `kind` is non-NULL (`op` counts only where struct_size holds it). */
    const memra_placement_vtable *placement;
    const memra_backend_vtable *backend;
    const memra_collective_vtable *collective;
    const memra_sampler_vtable *sampler;
    /* ---- appended after ABI 1's first shape (which ends at `sampler`) ---- */
    const memra_op_vtable *op; /* kind MEMRA_PLUGIN_OP; a descriptor that ends before it has none */
};

#ifdef __cplusplus
}
#endif
#endif
