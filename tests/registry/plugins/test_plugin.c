/* test_plugin.c: the registry's test plugins, one per build variant (REGTEST_<VARIANT>). The
 * good ones are minimal but complete; every other variant breaks exactly one rule the registry
 * checks, so each refusal message can be tested on its own. */
/* Stubs: each takes its vtable member's arguments and ignores most of them. */
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <stdint.h>
#include <string.h>

#include "memra/plugin.h"

/* Each variant uses only some of the pieces below. */
#define UNUSED __attribute__((unused))

static const memra_host *g_host;

/* ---- a minimal sampler: argmax, lowest index on ties ---- */

UNUSED static size_t sampler_scratch_bytes(uint32_t n_vocab) { return 0; }

UNUSED static memra_status sampler_sample(const float *logits, uint32_t n_vocab, uint64_t position,
                                          const memra_sample_cfg *cfg, void *scratch, uint32_t *token,
                                          memra_error *err) {
    if (n_vocab == 0)
        return g_host ? g_host->fail(err, MEMRA_E_RANGE, "test sampler: no logits") : MEMRA_E_RANGE;
    uint32_t best = 0;
    for (uint32_t i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best])
            best = i;
    *token = best;
    return MEMRA_OK;
}

UNUSED static const memra_sampler_vtable sampler_vtable = {
#if defined(REGTEST_SMALLVTABLE)
    .struct_size = 4,
#else
    .struct_size = sizeof(memra_sampler_vtable),
#endif
    .scratch_bytes = sampler_scratch_bytes,
#if !defined(REGTEST_NULLMEMBER)
    .sample = sampler_sample,
#endif
};

/* ---- a minimal backend: every mandatory member present, none of them does real work ---- */

static memra_status be_device_count(const memra_host *host, const memra_options *opts, uint32_t *out,
                                    memra_error *err) {
    *out = 1;
    return MEMRA_OK;
}
static memra_status be_open(const memra_host *host, const memra_model *m, const memra_plan *plan,
                            const memra_options *opts, memra_backend **out, memra_error *err) {
    return host->fail(err, MEMRA_E_UNSUPPORTED, "test backend: open is not implemented");
}
static void be_close(memra_backend *b) {}
static memra_status be_state_new(memra_backend *b, uint32_t capacity, uint32_t max_inflight, memra_state **out,
                                 memra_error *err) {
    return MEMRA_E_UNSUPPORTED;
}
static void be_state_free(memra_backend *b, memra_state *s) {}
static memra_status be_step_begin(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err) {
    return MEMRA_E_UNSUPPORTED;
}
static memra_status be_step_end(memra_backend *b, memra_state *s, float *logits, memra_step_result *out,
                                memra_error *err) {
    return MEMRA_E_UNSUPPORTED;
}
static memra_status be_digest(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32],
                              memra_error *err) {
    return MEMRA_E_UNSUPPORTED;
}
static memra_status be_state_restore(memra_backend *b, memra_state *dst, const memra_state *src, memra_error *err) {
    return MEMRA_E_UNSUPPORTED;
}
static uint32_t be_state_position(memra_backend *b, const memra_state *s) { return 0; }

static const memra_option_spec be_options[] = {
    {.key = "threads", .default_value = "1", .help = "worker threads (ignored by the test backend)"},
};

UNUSED static const memra_backend_vtable backend_vtable = {
    .struct_size = sizeof(memra_backend_vtable),
    .options = be_options,
    .n_options = 1,
    .device_count = be_device_count,
    .open = be_open,
    .close = be_close,
    .state_new = be_state_new,
    .state_free = be_state_free,
    .step_begin = be_step_begin,
    .step_end = be_step_end,
    .digest = be_digest,
    .state_restore = be_state_restore,
    .state_position = be_state_position,
};

/* ---- init and fini: log through the host, and for some variants load another plugin ---- */

static memra_status plugin_init(const memra_host *host, memra_error *err) {
    g_host = host;
#if defined(REGTEST_INITFAIL)
    return host->fail(err, MEMRA_E_DEVICE, "no test device here");
#elif defined(REGTEST_NEEDY)
    const memra_plugin *dep;
    return host->find_plugin("absent", MEMRA_PLUGIN_BACKEND, &dep, err);
#elif defined(REGTEST_SELFISH)
    const memra_plugin *dep;
    return host->find_plugin(REGTEST_NAME, MEMRA_PLUGIN_SAMPLER, &dep, err);
#elif defined(REGTEST_GOODBACKEND)
    /* Builds on the good sampler through the host, the way cuda-graph builds on cuda. */
    const memra_plugin *first, *again;
    memra_status st = host->find_plugin("good", MEMRA_PLUGIN_SAMPLER, &first, err);
    if (st != MEMRA_OK)
        return st;
    st = host->find_plugin("good", MEMRA_PLUGIN_SAMPLER, &again, err);
    if (st != MEMRA_OK)
        return st;
    if (first != again || !first->sampler || strcmp(first->name, "good") != 0)
        return host->fail(err, MEMRA_E_INTERNAL, "find_plugin gave two different descriptors for 'good'");
    uint8_t digest[32];
    host->sha256("abc", 3, digest);
    if (digest[0] != 0xba || digest[31] != 0xad) /* SHA-256("abc") = ba7816bf...f20015ad */
        return host->fail(err, MEMRA_E_INTERNAL, "host sha256 gave a wrong digest");
    host->log(MEMRA_LOG_INFO, REGTEST_NAME, "found good at %p", (const void *)first);
    return MEMRA_OK;
#else
    host->log(MEMRA_LOG_INFO, REGTEST_NAME, "init %s", REGTEST_NAME);
    return MEMRA_OK;
#endif
}

static void plugin_fini(void) {
    if (g_host)
        g_host->log(MEMRA_LOG_INFO, REGTEST_NAME, "fini %s", REGTEST_NAME);
}

/* ---- the descriptor ---- */

#if defined(REGTEST_NOENTRY)
#define REGTEST_SYMBOL memra_plugin_v0 /* wrong name: the registry must not find an entry */
#else
#define REGTEST_SYMBOL memra_plugin_v1
#endif

#if defined(REGTEST_GOODBACKEND) || defined(REGTEST_KINDMIX)
#define REGTEST_KIND MEMRA_PLUGIN_BACKEND
#else
#define REGTEST_KIND MEMRA_PLUGIN_SAMPLER
#endif

#if defined(REGTEST_NAMEMIX)
#define REGTEST_DESCRIPTOR_NAME "othername"
#else
#define REGTEST_DESCRIPTOR_NAME REGTEST_NAME
#endif

MEMRA_EXPORT const memra_plugin REGTEST_SYMBOL = {
#if defined(REGTEST_ABI99)
    .abi_version = 99,
#else
    .abi_version = MEMRA_ABI_VERSION,
#endif
#if defined(REGTEST_SMALL)
    .struct_size = 16,
#else
    .struct_size = sizeof(memra_plugin),
#endif
    .name = REGTEST_DESCRIPTOR_NAME,
    .kind = REGTEST_KIND,
    .version = "1.2.3-test",
    .description = "a registry test plugin",
    .init = plugin_init,
    .fini = plugin_fini,
#if defined(REGTEST_GOODBACKEND)
    .backend = &backend_vtable,
#elif defined(REGTEST_TWOVTABLES)
    .sampler = &sampler_vtable,
    .backend = &backend_vtable,
#else
    .sampler = &sampler_vtable,
#endif
};
