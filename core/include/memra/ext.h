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

#ifdef __cplusplus
}
#endif
#endif
