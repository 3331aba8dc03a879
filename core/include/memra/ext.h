/* memra/ext.h: optional extension tables a backend may offer through its vtable's `extension`
 * member, each named and versioned. A caller that gets NULL goes without (and says so).
 * memra/plugin.h lists every extension that exists (these two, and the cuda plugins' own), with
 * who offers it and who uses it. */
#ifndef MEMRA_EXT_H
#define MEMRA_EXT_H

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

#ifdef __cplusplus
}
#endif
#endif
