/* cuda_plugin.c: the `cuda` backend plugin's descriptor, vtable and extension tables, each filled
 * by member name (the entry points are declared in cuda_backend.h). */
#include <string.h>

#include "cuda_backend.h"
#include "cuda_ext.h"
#include "memra/ext.h"

static const memra_option_spec mc_options[] = {MEMRA_CUDA_OPTION_SPECS};

static const memra_ext_bench_v1 mc_bench_ext = {
    .struct_size = sizeof(memra_ext_bench_v1),
    .device_name = mc_device_name,
    .measure_ceiling = mc_measure_ceiling,
};

static const memra_cuda_graph_ext_v1 mc_graph_ext = {
    .struct_size = sizeof(memra_cuda_graph_ext_v1),
    .prepare = mc_prepare,
    .body = mc_body,
    .finish = mc_finish,
    .stream = mc_ext_stream,
    .device = mc_ext_device,
    .quarantine = mc_quarantine,
    .kernel_family = mc_kernel_family,
    .on_abort = mc_on_abort,
    .chunk_native = mc_chunk_native,
    .chunk_prepare = mc_chunk_prepare,
    .chunk_body = mc_chunk_body,
    .chunk_finish = mc_chunk_finish,
};

static const memra_ext_tp_v1 mc_tp_ext = {
    .struct_size = sizeof(memra_ext_tp_v1),
    .collective = mc_tp_collective,
    .arm_refusal = mc_tp_arm_refusal,
    .clear_refusals = mc_tp_clear_refusals,
    .epochs = mc_tp_epochs,
};

static const memra_ext_ops_v1 mc_ops_ext = {
    .struct_size = sizeof(memra_ext_ops_v1),
    .step_tapped = mc_step_tapped,
};

static const void *mc_extension(memra_backend *b, const char *name, uint32_t version) {
    if (strcmp(name, MEMRA_EXT_BENCH) == 0 && version == 1)
        return &mc_bench_ext;
    if (strcmp(name, MEMRA_EXT_CUDA_GRAPH) == 0 && version == 1)
        return &mc_graph_ext;
    if (strcmp(name, MEMRA_EXT_TP) == 0 && version == 1)
        return b && mc_is_tp(b) ? &mc_tp_ext : NULL;
    if (strcmp(name, MEMRA_EXT_OPS) == 0 && version == 1)
        return &mc_ops_ext;
    return NULL;
}

static const memra_backend_vtable mc_vtable = {
    .struct_size = sizeof(memra_backend_vtable),
    .options = mc_options,
    .n_options = sizeof mc_options / sizeof mc_options[0],
    .device_count = mc_device_count,
    .open = mc_open,
    .close = mc_close,
    .state_new = mc_state_new,
    .state_free = mc_state_free,
    .step_begin = mc_step_begin,
    .step_end = mc_step_end,
    .digest = mc_digest,
    .state_restore = mc_state_restore,
    .state_position = mc_state_position,
    .state_stats = mc_state_stats,
    .memory = mc_memory,
    .extension = mc_extension,
    .resolve_options = mc_resolve_options,
    .streams_weights = mc_streams_weights,
    .prefill_chunk = mc_prefill_chunk,
    .step_chunk = mc_step_chunk,
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "cuda",
    .kind = MEMRA_PLUGIN_BACKEND,
    .version = "0.1.0",
    .description = "eager CUDA decode: F32/F16/BF16/Q8_0 GEMVs, GQA attention, device sampler, stages on streams "
                   "and devices, tensor-parallel ranks through a collective (oneshot, nccl); prefill chunks "
                   "(prefill=, default 512) bit-identical to decode: batched F32/F16/BF16/Q8_0/K-quant/Q4_0..Q5_1 "
                   "GEMVs and chunk attention on one stage of one rank, the decode kernels row by row for the other "
                   "types, single steps with stages, ranks or op plugins (default prefill 1 there)",
    .backend = &mc_vtable,
};
