/* rmsnorm.c: an example op plugin, "example", to copy: it supplies RMSNorm (memra_op_vtable's
 * cpu_rmsnorm; cuda_rmsnorm too where the build found CUDA, rmsnorm_cuda.cu) to a backend whose
 * arm selects it, `cpu:op.rmsnorm=example` (core/include/memra/plugin.h: `grep -n
 * "memra_op_vtable" plugin.h` shows the vtable; each member's contract is the comment above it).
 *
 * It keeps the order of the cpu backend's built-in RMSNorm (backends/cpu/cpu_kernels.h): the sum
 * of squares in 8 accumulators, accumulator j over the elements i = j (mod 8) in increasing i,
 * added as ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)), then the tail (n mod 8) in order; mean = sum / n;
 * scale = 1 / sqrtf(mean + eps); out = (x * scale) * w, one IEEE operation each (built with
 * -ffp-contract=off: no fused multiply-add). So `memra-gate --a cpu --b cpu:op.rmsnorm=example`
 * passes exact. A kernel of your own that sums in another order gives other bits: gate it with
 * `--compare nmse:1e-6` (and exactly against itself, e.g. with another thread count).
 *
 * Rules every plugin follows (plugin.h): never exit, abort or print; a compute entry point
 * cannot fail, so check what can be checked in create. */
#include <math.h>
#include <stdlib.h>

#include "memra/plugin.h"

#ifdef EXAMPLE_HAVE_CUDA
memra_status example_cuda_rmsnorm(memra_op *op, const memra_op_ctx *ctx, const float *x, const float *w, uint32_t n,
                                  uint32_t rows, float eps, float *out, void *stream, memra_error *err);
#endif

/* An instance: this example keeps nothing but the host table (for messages). */
struct memra_op {
    const memra_host *host;
};

static memra_status example_create(const memra_host *host, const char *family, memra_op_kind kind, uint32_t type,
                                   const memra_options *opts, memra_op **out, memra_error *err) {
    (void)family, (void)kind, (void)type, (void)opts; /* one op, no keys of its own */
    memra_op *op = calloc(1, sizeof *op);
    if (!op)
        return host->fail(err, MEMRA_E_NOMEM, "example: out of memory");
    op->host = host;
    *out = op;
    return MEMRA_OK;
}

static void example_destroy(memra_op *op) { free(op); }

static void example_cpu_rmsnorm(memra_op *op, const memra_op_ctx *ctx, const float *x, const float *w, uint32_t n,
                                float eps, float *out) {
    (void)op, (void)ctx; /* the same maths at every site */
    float acc[8] = {0};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (uint32_t j = 0; j < 8; j++)
            acc[j] += x[i + j] * x[i + j];
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++)
        sum += x[i] * x[i];
    float scale = 1.0f / sqrtf(sum / (float)n + eps);
    for (i = 0; i < n; i++)
        out[i] = (x[i] * scale) * w[i];
}

static const memra_op_vtable example_vtable = {
    .struct_size = sizeof(memra_op_vtable),
    .create = example_create,
    .destroy = example_destroy,
    .cpu_rmsnorm = example_cpu_rmsnorm,
#ifdef EXAMPLE_HAVE_CUDA
    .cuda_rmsnorm = example_cuda_rmsnorm,
#endif
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "example",
    .kind = MEMRA_PLUGIN_OP,
    .version = "0.1.0",
    .description = "example op plugin: RMSNorm in the built-in's order (exact against it)",
    .op = &example_vtable,
};
