/* sampler_cpu.c: the `cpu` sampler plugin: the core's sampling algorithm (memra/sampling.h)
 * offered as a sampler vtable, for callers that choose their sampler by name. */
#include "memra/plugin.h"
#include "memra/sampling.h"

static const memra_sampler_vtable sampler_vtable = {
    .struct_size = sizeof(memra_sampler_vtable),
    .scratch_bytes = memra_sample_scratch_bytes,
    .sample = memra_sample,
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "cpu",
    .kind = MEMRA_PLUGIN_SAMPLER,
    .version = "0.1.0",
    .description = "greedy, temperature, top-k and top-p sampling keyed by (seed, position), on the host "
                   "(memra/sampling.h)",
    .sampler = &sampler_vtable,
};
