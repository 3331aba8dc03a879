/* cuda_backend.h: the entry points of the cuda backend (cuda_backend.cu), which cuda_plugin.c
 * puts into the plugin's vtable, extension tables and descriptor (internal). */
#ifndef MEMRA_CUDA_BACKEND_H
#define MEMRA_CUDA_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

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

#ifdef __cplusplus
}
#endif
#endif
