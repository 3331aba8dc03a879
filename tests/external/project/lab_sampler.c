/* lab_sampler.c: a third party's sampler plugin, built out of tree against the installed memra
 * headers. Greedy only: the first index of the largest logit. */
#include <math.h>

#include <memra/plugin.h>

static const memra_host *g_host;

static size_t lab_scratch_bytes(uint32_t n_vocab) { return 0; }

static memra_status lab_sample(const float *logits, uint32_t n_vocab, uint64_t position, const memra_sample_cfg *cfg,
                               void *scratch, uint32_t *token, memra_error *err) {
    if (n_vocab == 0)
        return g_host->fail(err, MEMRA_E_RANGE, "labsampler: no logits");
    uint32_t best = 0;
    for (uint32_t i = 0; i < n_vocab; i++) {
        if (!isfinite(logits[i]))
            return g_host->fail(err, MEMRA_E_RANGE, "labsampler: logit %u is not finite", i);
        if (logits[i] > logits[best])
            best = i;
    }
    *token = best;
    return MEMRA_OK;
}

static memra_status lab_init(const memra_host *host, memra_error *err) {
    g_host = host;
    host->log(MEMRA_LOG_INFO, "labsampler", "ready");
    return MEMRA_OK;
}

static const memra_sampler_vtable lab_vtable = {
    .struct_size = sizeof(memra_sampler_vtable),
    .scratch_bytes = lab_scratch_bytes,
    .sample = lab_sample,
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "labsampler",
    .kind = MEMRA_PLUGIN_SAMPLER,
    .version = "0.1.0",
    .description = "an out-of-tree greedy sampler (memra's packaging test)",
    .init = lab_init,
    .sampler = &lab_vtable,
};
