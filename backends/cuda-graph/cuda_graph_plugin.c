/* cuda_graph_plugin.c: the `cuda-graph` backend plugin's descriptor, vtable and census table, each
 * filled by member name (the entry points are cuda_graph.cu's, declared in cuda_graph.h). It
 * takes the cuda plugin's keys, which the cuda plugin resolves. */
#include <string.h>

#include "cuda_ext.h"
#include "cuda_graph.h"

static const memra_option_spec cg_options[] = {MEMRA_CUDA_OPTION_SPECS};

static const memra_ext_census_v1 cg_census_ext = {
    .struct_size = sizeof(memra_ext_census_v1),
    .census = cg_census,
    .dump_graphs = cg_dump_graphs,
};

static const void *cg_extension(memra_backend *b, const char *name, uint32_t version) {
    if (strcmp(name, MEMRA_EXT_CENSUS) == 0 && version == 1)
        return &cg_census_ext;
    if (strcmp(name, MEMRA_EXT_CUDA_GRAPH) == 0)
        return NULL; /* steps of a cuda-graph state go through its graph */
    return cg_inner_extension(b, name, version);
}

/* Its weights are the cuda plugin's: it streams them when that plugin does. */
static bool cg_streams_weights(const memra_host *host, const memra_options *opts) {
    const memra_plugin *p = NULL;
    if (host->find_plugin("cuda", MEMRA_PLUGIN_BACKEND, &p, NULL) != MEMRA_OK || !p)
        return false;
    return MEMRA_HAS_MEMBER(p->backend, memra_backend_vtable, streams_weights) && p->backend->streams_weights &&
           p->backend->streams_weights(host, opts);
}

static const memra_backend_vtable cg_vtable = {
    .struct_size = sizeof(memra_backend_vtable),
    .options = cg_options,
    .n_options = sizeof cg_options / sizeof cg_options[0],
    .device_count = cg_device_count,
    .open = cg_open,
    .close = cg_close,
    .state_new = cg_state_new,
    .state_free = cg_state_free,
    .step_begin = cg_step_begin,
    .step_end = cg_step_end,
    .digest = cg_digest,
    .state_restore = cg_state_restore,
    .state_position = cg_state_position,
    .state_stats = cg_state_stats,
    .memory = cg_memory,
    .extension = cg_extension,
    .resolve_options = cg_resolve_options,
    .streams_weights = cg_streams_weights,
    .prefill_chunk = cg_prefill_chunk,
    .step_chunk = cg_step_chunk,
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "cuda-graph",
    .kind = MEMRA_PLUGIN_BACKEND,
    .version = "0.1.0",
    .description = "full-token CUDA graph capture (once per state) and replay at any position, on the cuda plugin's "
                   "kernels; prefill chunks as the cuda plugin's, one graph per chunk count (the full chunk and the "
                   "tail: at most two per state)",
    .backend = &cg_vtable,
};
