/* test_op_plugin.c: the registry's op plugins, one per build variant: REGTEST_OPGOOD (serves cpu
 * rmsnorm and cpu gemv.f32, one key), REGTEST_OPSMALL (an op vtable of 8 bytes), REGTEST_OPTYPES
 * (gemv weight types without a gemv entry point), REGTEST_OPNOCREATE (create NULL),
 * REGTEST_OPOLD (kind op, but a descriptor of ABI 1's first shape, which ends before `op`),
 * REGTEST_OPFIRST (an op vtable of the first shape, ending at cuda_gemv, built before cpu_topk was
 * appended: its bytes past that size are not its own, here a cpu_topk the core must not see). */
#include <stdlib.h>

#include "memra/plugin.h"

struct memra_op {
    int unused;
};

__attribute__((unused)) static memra_status op_create(const memra_host *host, const char *family, memra_op_kind kind,
                                                      uint32_t type, const memra_options *opts, memra_op **out,
                                                      memra_error *err) {
    (void)family, (void)kind, (void)type, (void)opts;
    *out = calloc(1, sizeof **out);
    return *out ? MEMRA_OK : host->fail(err, MEMRA_E_NOMEM, "out of memory");
}

static void op_destroy(memra_op *op) { free(op); }

static void op_rmsnorm(memra_op *op, const memra_op_ctx *ctx, const float *x, const float *w, uint32_t n, float eps,
                       float *out) {
    (void)op, (void)ctx, (void)eps;
    for (uint32_t i = 0; i < n; i++)
        out[i] = x[i] * w[i];
}

__attribute__((unused)) static void op_gemv(memra_op *op, const memra_op_ctx *ctx, uint32_t type, const uint8_t *w,
                                            size_t row_bytes, uint32_t cols, const float *x, float *y, uint32_t r0,
                                            uint32_t r1) {
    (void)op, (void)ctx, (void)type, (void)w, (void)row_bytes, (void)cols, (void)x;
    for (uint32_t r = r0; r < r1; r++)
        y[r] = 0.0f;
}

static const memra_option_spec op_keys[] = {{.key = "block", .default_value = "256", .help = "a key"}};

__attribute__((unused)) static void op_topk(memra_op *op, const memra_op_ctx *ctx, const float *logits,
                                            uint32_t n_vocab, uint32_t k, uint32_t *seq) {
    (void)op, (void)ctx, (void)logits, (void)n_vocab;
    for (uint32_t i = 0; i < k; i++)
        seq[i] = i;
}

static const memra_op_vtable op_vtable = {
#if defined(REGTEST_OPSMALL)
    .struct_size = 8,
#elif defined(REGTEST_OPFIRST)
    .struct_size = MEMRA_STRUCT_END(memra_op_vtable, cuda_gemv),
#else
    .struct_size = sizeof(memra_op_vtable),
#endif
    .options = op_keys,
    .n_options = 1,
    .cpu_gemv_types = 1u, /* F32 */
#if !defined(REGTEST_OPNOCREATE)
    .create = op_create,
#endif
    .destroy = op_destroy,
    .cpu_rmsnorm = op_rmsnorm,
#if !defined(REGTEST_OPTYPES)
    .cpu_gemv = op_gemv,
#endif
#if defined(REGTEST_OPFIRST)
    .cpu_topk = op_topk,
#endif
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
#if defined(REGTEST_OPOLD)
    .struct_size = MEMRA_STRUCT_END(memra_plugin, sampler),
#else
    .struct_size = sizeof(memra_plugin),
#endif
    .name = REGTEST_NAME,
    .kind = MEMRA_PLUGIN_OP,
    .version = "0.0.1",
    .op = &op_vtable,
};
