/* faultyop.h: what faultyop.c (the plugin, its cpu ops) and faultyop_cuda.cu (its cuda ops) share:
 * the armed cell of an instance, and whether a call's site and layer are the armed ones (the
 * position is compared by the caller: on the host for cpu, in device memory for cuda). */
#ifndef MEMRA_TEST_FAULTYOP_H
#define MEMRA_TEST_FAULTYOP_H

#include <stdbool.h>
#include <string.h>

#include "memra/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct faultyop_cfg {
    bool armed;
    char site[32];
    uint32_t layer, pos, index, bit;
} faultyop_cfg;

const faultyop_cfg *faultyop_config(const memra_op *op);

static inline bool faultyop_site_hit(const faultyop_cfg *c, const memra_op_ctx *ctx) {
    return c->armed && ctx->layer == c->layer && ctx->site && strcmp(ctx->site, c->site) == 0;
}

#ifdef FAULTYOP_HAVE_CUDA
memra_status faultyop_cuda_rmsnorm(memra_op *op, const memra_op_ctx *ctx, const float *x, const float *w, uint32_t n,
                                   uint32_t rows, float eps, float *out, void *stream, memra_error *err);
memra_status faultyop_cuda_gemv(memra_op *op, const memra_op_ctx *ctx, uint32_t type, const void *w, size_t row_bytes,
                                uint32_t rows, uint32_t cols, const float *x, float *y, void *stream, memra_error *err);
#endif

#ifdef __cplusplus
}
#endif
#endif
