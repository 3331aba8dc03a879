/* memra/ext.h: optional extension tables a backend may offer through its vtable's `extension`
 * member, each named and versioned. A caller that gets NULL goes without (and says so).
 * memra/plugin.h lists every extension that exists (these two, and the cuda plugins' own), with
 * who offers it and who uses it. */
#ifndef MEMRA_EXT_H
#define MEMRA_EXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memra/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "memra.bench", version 1: what memra bench reports beyond tok/s. */
#define MEMRA_EXT_BENCH "memra.bench"
typedef struct memra_ext_bench_v1 {
    uint32_t struct_size;
    /* The device's name ("NVIDIA H200", "cpu (2 threads)"). */
    memra_status (*device_name)(memra_backend *b, char *buf, size_t size, memra_error *err);
    /* A measured bandwidth ceiling in bytes per second (e.g. a large device-to-device copy,
     * read plus write bytes over time), and how it was measured. May be NULL. */
    memra_status (*measure_ceiling)(memra_backend *b, double *bytes_per_s, char *how, size_t how_size,
                                    memra_error *err);
} memra_ext_bench_v1;

/* "memra.census", version 1: graph census of a state, for the gate's census record. */
#define MEMRA_EXT_CENSUS "memra.census"
typedef struct memra_census_row {
    char kind[32]; /* "kernel:gemv", "memcpy", "memset", "collective", "host", "unexpected:..." */
    uint64_t count;
} memra_census_row;
typedef struct memra_ext_census_v1 {
    uint32_t struct_size;
    /* Rows for the state's captured graph (per rank: rank index in the row order is the
     * backend's). *n_rows is 0 when nothing was captured. */
    memra_status (*census)(memra_backend *b, const memra_state *s, memra_census_row *rows, uint32_t max_rows,
                           uint32_t *n_rows, memra_error *err);
    /* Writes each captured graph of the state as DOT into dir. May be NULL. */
    memra_status (*dump_graphs)(memra_backend *b, const memra_state *s, const char *dir, memra_error *err);
} memra_ext_census_v1;

/* "memra.tp", version 1: a tensor-parallel backend's collective sites, for the gate's refusal
 * cells and epoch census. Offered by a backend whose plan has more than one rank in a stage.
 * A site is (stage, rank, layer, which): `layer` is the model's layer index (global, inside the
 * stage's range), `which` 0 for the all-reduce after attention, 1 after the FFN; its collective
 * block number is layer * 2 + which. */
#define MEMRA_EXT_TP "memra.tp"
typedef struct memra_ext_tp_v1 {
    uint32_t struct_size;
    /* The collective plugin's name ("local") and whether it has refusal cells (arm_refusal). */
    memra_status (*collective)(memra_backend *b, char *name, size_t name_size, bool *refusals, memra_error *err);
    /* Arms one refusal: the next all-reduce of that site at token `position` refuses with `word`
     * (!= 0) on that rank. MEMRA_E_UNSUPPORTED when the collective has no refusal cells;
     * MEMRA_E_RANGE for a site outside the plan. */
    memra_status (*arm_refusal)(memra_backend *b, uint32_t stage, uint32_t rank, uint32_t layer, uint32_t which,
                                uint32_t position, int32_t word, memra_error *err);
    /* Disarms every refusal not yet fired. */
    memra_status (*clear_refusals)(memra_backend *b, memra_error *err);
    /* The epoch counters of one rank of one stage, indexed by block (layer * 2 + which) over the
     * whole model (entries of other stages' layers read 0): out has n_blocks = 2 * n_layer. */
    memra_status (*epochs)(memra_backend *b, uint32_t stage, uint32_t rank, uint64_t *out, uint32_t n_blocks,
                           memra_error *err);
} memra_ext_tp_v1;

/* "memra.ops", version 1: one step run with taps on, handing back the logical tensor after each op
 * of every layer and of the head (the sites of the op vocabulary: README, "Reading a bisect"), for
 * the gate's bisect. Sites come in the model's order: per layer attn_norm, q, k, v, qk_norm (tensors
 * q then k), rope (q then k), attention, attn_out, attn_res, ffn_norm, ffn_gate, ffn_up, ffn_act,
 * ffn_down, ffn_res; then the head's output_norm and logits. A site an architecture lacks is
 * absent. With tp > 1 a site's tensor is the LOGICAL full tensor: the ranks' shards gathered in rank
 * order (heads, ffn rows), so a tp=1 and a tp=2 arm compare element by element; attn_out and
 * ffn_down are taken after the all-reduce; partial sums are not a site. */
#define MEMRA_EXT_OPS "memra.ops"
typedef struct memra_op_site {
    uint32_t struct_size;
    int32_t layer;      /* the model's layer index; -1 for the head */
    const char *site;   /* "attn_norm", ..., "ffn_res", "output_norm", "logits" */
    const char *tensor; /* "q" or "k" for qk_norm and rope; the site's name otherwise */
    uint32_t n;         /* elements of the logical tensor */
    uint32_t stage;     /* the stage that computed it */
    uint32_t n_ranks;   /* ranks of that stage */
    /* Rank r holds elements [begin[r], end[r]) of the tensor: [0, n) on every rank for a tensor
     * each rank computes whole (norms, residuals, all-reduced sums), [0, n) on one rank and empty
     * on the others for one computed once (the head), its shard for a sharded one. */
    uint32_t begin[MEMRA_MAX_RANKS], end[MEMRA_MAX_RANKS];
} memra_op_site;
/* Called once per site, in order, with the tensor's n floats in host memory (valid only during
 * the call). A non-OK return stops the step (which then fails and quarantines the state). */
typedef memra_status (*memra_op_tap_fn)(void *user, const memra_op_site *site, const float *data, memra_error *err);
typedef struct memra_ext_ops_v1 {
    uint32_t struct_size;
    /* One step of args->token at the state's position, as step_begin then step_end would run it
     * (committed the same way, nothing left in flight; the state must have none in flight), with
     * taps on: fn sees every site. Its logits (the last site) are the step's logits. Taps cost the
     * ordinary step nothing beyond a branch on a flag. */
    memra_status (*step_tapped)(memra_backend *b, memra_state *s, const memra_step_args *args, memra_op_tap_fn fn,
                                void *user, memra_error *err);
} memra_ext_ops_v1;

#ifdef __cplusplus
}
#endif
#endif
