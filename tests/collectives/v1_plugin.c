/* v1_plugin.c: test-only collective plugins whose vtable has an older, smaller shape than
 * memra/plugin.h's, to prove the registry's rule for appended members.
 *   "oldcoll"   (V1_FULL): the first ABI 1 shape, ending at `abort`, declared as its own struct:
 *               what a plugin built before bootstrap_id and create_rank declares. Must load.
 *   "tinycoll"  (V1_SHORT): a vtable that ends at `arm_refusal`, short of ABI 1's minimum.
 *               Must be refused ("struct too small"). */
#include <stdlib.h>

#include "memra/plugin.h"

/* memra_collective_vtable as ABI 1 first shaped it (before the appended members). */
typedef struct v1_vtable {
    uint32_t struct_size;
    const memra_option_spec *options;
    uint32_t n_options;
    memra_status (*create)(const memra_host *host, uint32_t n_ranks, const int32_t *devices, const memra_options *opts,
                           memra_collective **out, memra_error *err);
    void (*destroy)(memra_collective *c);
    memra_status (*all_reduce_sum_f32)(memra_collective *c, uint32_t rank, float *buf, size_t count, void *stream,
                                       uint32_t block, const int32_t *position_dev, int32_t *status_dev,
                                       memra_error *err);
    memra_status (*epochs)(memra_collective *c, uint32_t rank, uint64_t *out, uint32_t n_blocks, memra_error *err);
    memra_status (*arm_refusal)(memra_collective *c, uint32_t rank, uint32_t block, uint32_t position, int32_t word,
                                memra_error *err);
    void (*abort)(memra_collective *c);
} v1_vtable;

static memra_status v1_create(const memra_host *host, uint32_t n_ranks, const int32_t *devices,
                              const memra_options *opts, memra_collective **out, memra_error *err) {
    (void)host;
    (void)n_ranks;
    (void)devices;
    (void)opts;
    (void)err;
    *out = (memra_collective *)malloc(1);
    return *out ? MEMRA_OK : MEMRA_E_NOMEM;
}

static void v1_destroy(memra_collective *c) { free(c); }

static memra_status v1_all_reduce(memra_collective *c, uint32_t rank, float *buf, size_t count, void *stream,
                                  uint32_t block, const int32_t *position_dev, int32_t *status_dev, memra_error *err) {
    (void)c;
    (void)rank;
    (void)buf;
    (void)count;
    (void)stream;
    (void)block;
    (void)position_dev;
    (void)err;
    if (status_dev)
        *status_dev = 0;
    return MEMRA_OK;
}

static const v1_vtable vtable = {
#ifdef V1_SHORT
    .struct_size = (uint32_t)offsetof(v1_vtable, abort),
#else
    .struct_size = (uint32_t)sizeof(v1_vtable),
#endif
    .create = v1_create,
    .destroy = v1_destroy,
    .all_reduce_sum_f32 = v1_all_reduce,
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = V1_NAME,
    .kind = MEMRA_PLUGIN_COLLECTIVE,
    .version = "0.0.1",
    .description = "test-only: a collective vtable of an older shape",
    .collective = (const memra_collective_vtable *)&vtable,
};
