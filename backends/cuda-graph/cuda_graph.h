/* cuda_graph.h: the entry points of the cuda-graph backend (cuda_graph.cu), which
 * cuda_graph_plugin.c puts into the plugin's vtable, census table and descriptor (internal). */
#ifndef MEMRA_CUDA_GRAPH_H
#define MEMRA_CUDA_GRAPH_H

#include <stdint.h>

#include "memra/ext.h"
#include "memra/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

memra_status cg_device_count(const memra_host *host, const memra_options *opts, uint32_t *out, memra_error *err);
memra_status cg_open(const memra_host *host, const memra_model *m, const memra_plan *plan, const memra_options *opts,
                     memra_backend **out, memra_error *err);
void cg_close(memra_backend *b);
memra_status cg_state_new(memra_backend *b, uint32_t capacity, uint32_t max_inflight, memra_state **out,
                          memra_error *err);
void cg_state_free(memra_backend *b, memra_state *s);
memra_status cg_step_begin(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err);
memra_status cg_step_end(memra_backend *b, memra_state *s, float *logits, memra_step_result *out, memra_error *err);
uint32_t cg_prefill_chunk(const memra_host *host, const memra_options *opts);
memra_status cg_step_chunk(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t count, float *logits,
                           memra_error *err);
memra_status cg_digest(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32], memra_error *err);
memra_status cg_state_restore(memra_backend *b, memra_state *dst, const memra_state *src, memra_error *err);
uint32_t cg_state_position(memra_backend *b, const memra_state *s);
memra_status cg_state_stats(memra_backend *b, const memra_state *s, memra_state_stats *out, memra_error *err);
memra_status cg_memory(memra_backend *b, memra_backend_memory *out, memra_error *err);
memra_status cg_resolve_options(const memra_host *host, const memra_options *opts, memra_options *resolved,
                                memra_error *err);
/* The cuda plugin's extension `name` on the inner backend, or NULL. */
const void *cg_inner_extension(memra_backend *b, const char *name, uint32_t version);

/* "memra.census" v1 */
memra_status cg_census(memra_backend *b, const memra_state *s, memra_census_row *rows, uint32_t max_rows,
                       uint32_t *n_rows, memra_error *err);
memra_status cg_dump_graphs(memra_backend *b, const memra_state *s, const char *dir, memra_error *err);

#ifdef __cplusplus
}
#endif
#endif
