/* cpu_plugin.c: the `cpu` backend as a plugin: its descriptor, its arm keys (threads, vdevices,
 * grain, collective) and how they are read and resolved, its vtable and extensions (memra.bench,
 * memra.tp, memra.ops), and the memory it reports. The maths of a token is in cpu_forward.c. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cpu_backend.h"

#define CPU_DEFAULT_VDEVICES 8u
#define CPU_MAX_VDEVICES 64u
#define CPU_MAX_THREADS 256u
#define CPU_DEFAULT_GRAIN 32768u

static const memra_option_spec cpu_options[] = {
    {.key = "threads",
     .default_value = "",
     .help = "worker threads (default: the online CPUs); results do not depend on it"},
    {.key = "vdevices",
     .default_value = "8",
     .help = "virtual devices offered to the placement (stages may sit on any of them)"},
    {.key = "grain",
     .default_value = "32768",
     .help = "multiply-adds below which a task runs on one thread; 0 splits every task"},
    {.key = "kv",
     .default_value = "f32",
     .help = "KV cache values: f32, or rounded to f16 or bf16 as they are written, or q8 (each block of 32 values of a "
             "row as 8-bit integers and a scale, amax / 127; head sizes a multiple of 32), as a GPU cache of that "
             "type stores them; this backend keeps them in f32 memory. Exact pairs hold within one kv type"},
    {.key = "collective",
     .default_value = "local",
     .help = "collective plugin that sums the ranks' partials when tp > 1 (refused with tp=1, where it has no effect)"},
    /* Op plugins (memra/op.h): NAME[:KEY=VALUE...]; the default, builtin, is the built-in kernel. */
    {.key = "op.rmsnorm",
     .default_value = MEMRA_OP_BUILTIN,
     .help = "op plugin (NAME[:KEY=VALUE...]) for RMSNorm: every norm"},
    {.key = "op.rope", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for RoPE of q and k"},
    {.key = "op.attention", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for one head's attention"},
    {.key = "op.gemv.f32", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for the GEMV of F32 weights"},
    {.key = "op.gemv.f16", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for the GEMV of F16 weights"},
    {.key = "op.gemv.bf16", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for the GEMV of BF16 weights"},
    {.key = "op.gemv.q8_0", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for the GEMV of Q8_0 weights"},
    {.key = "op.gemv.q4_0", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for the GEMV of Q4_0 weights"},
    {.key = "op.gemv.q4_1", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for the GEMV of Q4_1 weights"},
    {.key = "op.gemv.q5_0", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for the GEMV of Q5_0 weights"},
    {.key = "op.gemv.q5_1", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for the GEMV of Q5_1 weights"},
    {.key = "op.gemv.q4_k", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for the GEMV of Q4_K weights"},
    {.key = "op.gemv.q5_k", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for the GEMV of Q5_K weights"},
    {.key = "op.gemv.q6_k", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for the GEMV of Q6_K weights"},
    {.key = "op.topk", .default_value = MEMRA_OP_BUILTIN, .help = "op plugin for the sampler's top-k sort"},
};

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                      */

static uint32_t online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        return 1;
    return n > (long)CPU_MAX_THREADS ? CPU_MAX_THREADS : (uint32_t)n;
}

memra_status cpu_read_options(const memra_options *opts, cpu_config *cfg, memra_error *err) {
    cfg->collective = memra_options_get(opts, "collective");
    if (!cfg->collective)
        cfg->collective = "local";
    if (!cfg->collective[0])
        return memra_fail(err, MEMRA_E_INVALID, "cpu: collective= is empty: expected a collective plugin's name");
    memra_status st = memra_options_u32(opts, "threads", online_cpus(), 1, CPU_MAX_THREADS, &cfg->threads, err);
    if (st != MEMRA_OK)
        return st;
    st = memra_options_u32(opts, "vdevices", CPU_DEFAULT_VDEVICES, 1, CPU_MAX_VDEVICES, &cfg->vdevices, err);
    if (st != MEMRA_OK)
        return st;
    st = memra_options_u32(opts, "grain", CPU_DEFAULT_GRAIN, 0, UINT32_MAX, &cfg->grain, err);
    if (st != MEMRA_OK)
        return st;
    const char *kv = memra_options_get(opts, "kv");
    if (!kv || strcmp(kv, "f32") == 0)
        cfg->kv = CPU_KV_F32;
    else if (strcmp(kv, "f16") == 0)
        cfg->kv = CPU_KV_F16;
    else if (strcmp(kv, "bf16") == 0)
        cfg->kv = CPU_KV_BF16;
    else if (strcmp(kv, "q8") == 0)
        cfg->kv = CPU_KV_Q8;
    else
        return memra_fail(err, MEMRA_E_INVALID, "cpu: kv=%.40s: expected one of f32, f16, bf16, q8", kv);
    cfg->prefill = cpu_prefill_chunk(NULL, opts);
    const char *p = memra_options_get(opts, "prefill");
    if (p && strcmp(p, "auto") != 0) /* the core checked it; checked again for a direct caller */
        st = memra_options_u32(opts, "prefill", CPU_DEFAULT_PREFILL, 1, 4096, &cfg->prefill, err);
    return st;
}

/* 64 rows: a tile of weights (16 KiB, cpu_forward.c) dotted with 64 inputs is read from memory
 * once per 64 tokens, which already makes a chunk compute-bound on the cores (the weights' bytes
 * per token fall 64-fold; more rows gain little and cost activations: 64 rows of llama-1b's are
 * about 7 MiB), while the attention of a row stays the single step's. */
uint32_t cpu_prefill_chunk(const memra_host *host, const memra_options *opts) {
    (void)host;
    (void)opts;
    return CPU_DEFAULT_PREFILL;
}

static memra_status cpu_device_count(const memra_host *host, const memra_options *opts, uint32_t *out,
                                     memra_error *err) {
    (void)host;
    cpu_config cfg;
    memra_status st = cpu_read_options(opts, &cfg, err);
    if (st != MEMRA_OK)
        return st;
    *out = cfg.vdevices;
    return MEMRA_OK;
}

static memra_status cpu_resolve_options(const memra_host *host, const memra_options *opts, memra_options *resolved,
                                        memra_error *err) {
    (void)host;
    cpu_config cfg;
    memra_status st = cpu_read_options(opts, &cfg, err);
    if (st != MEMRA_OK)
        return st;
    *resolved = *opts;
    char buf[16];
    snprintf(buf, sizeof buf, "%u", cfg.threads);
    if ((st = memra_options_set(resolved, "threads", buf, err)) != MEMRA_OK)
        return st;
    snprintf(buf, sizeof buf, "%u", cfg.vdevices);
    if ((st = memra_options_set(resolved, "vdevices", buf, err)) != MEMRA_OK)
        return st;
    snprintf(buf, sizeof buf, "%u", cfg.grain);
    if ((st = memra_options_set(resolved, "grain", buf, err)) != MEMRA_OK)
        return st;
    static const char *const kv_names[] = {"f32", "f16", "bf16", "q8"};
    if ((st = memra_options_set(resolved, "kv", kv_names[cfg.kv], err)) != MEMRA_OK)
        return st;
    return memra_options_set(resolved, "collective", cfg.collective, err);
}

/* ------------------------------------------------------------------------------------------ */
/* Counters and extensions                                                                      */

static memra_status cpu_memory(memra_backend *b, memra_backend_memory *out, memra_error *err) {
    (void)err;
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->weight_bytes = b->m->weight_bytes; /* read in place from the mapping */
    out->cache_bytes = b->live_cache_bytes;
    out->scratch_bytes = b->scratch_bytes + b->live_state_bytes;
    return MEMRA_OK;
}

static memra_status cpu_device_name(memra_backend *b, char *buf, size_t size, memra_error *err) {
    (void)err;
    snprintf(buf, size, "cpu (%u thread%s)", b->n_threads, b->n_threads == 1 ? "" : "s");
    return MEMRA_OK;
}

static const memra_ext_bench_v1 cpu_bench_ext = {
    .struct_size = sizeof(memra_ext_bench_v1),
    .device_name = cpu_device_name,
};

static const memra_ext_ops_v1 cpu_ops_ext = {
    .struct_size = sizeof(memra_ext_ops_v1),
    .step_tapped = cpu_step_tapped,
};

static const void *cpu_extension(memra_backend *b, const char *name, uint32_t version) {
    if (strcmp(name, MEMRA_EXT_BENCH) == 0 && version == 1)
        return &cpu_bench_ext;
    if (strcmp(name, MEMRA_EXT_TP) == 0 && version == 1 && b && b->coll)
        return &cpu_tp_ext;
    if (strcmp(name, MEMRA_EXT_OPS) == 0 && version == 1)
        return &cpu_ops_ext;
    return NULL;
}

static const memra_backend_vtable cpu_vtable = {
    .struct_size = sizeof(memra_backend_vtable),
    .options = cpu_options,
    .n_options = sizeof cpu_options / sizeof cpu_options[0],
    .device_count = cpu_device_count,
    .open = cpu_open,
    .close = cpu_close,
    .state_new = cpu_state_new,
    .state_free = cpu_state_free,
    .step_begin = cpu_step_begin,
    .step_end = cpu_step_end,
    .digest = cpu_digest,
    .state_restore = cpu_state_restore,
    .state_position = cpu_state_position,
    .state_stats = cpu_state_stats,
    .memory = cpu_memory,
    .extension = cpu_extension,
    .resolve_options = cpu_resolve_options,
    .prefill_chunk = cpu_prefill_chunk,
    .step_chunk = cpu_step_chunk,
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "cpu",
    .kind = MEMRA_PLUGIN_BACKEND,
    .version = "0.1.0",
    .description = "reference decode of llama, qwen2, qwen3 and gemma3 on the host; deterministic for any thread count",
    .backend = &cpu_vtable,
};
