/* nvtx_probe.c: TEST-ONLY NVTX injection library. NVTX3 loads the library named by
 * NVTX_INJECTION64_PATH at the first NVTX call and calls its InitializeInjectionNvtx2; this one
 * takes over RangePushA and RangePop and writes one line per call ("push NAME", "pop") into the
 * file named by MEMRA_NVTX_PROBE_LOG, so a test can see exactly which ranges memra-gate opens
 * without a profiler. Built only where the CUDA toolkit (and its NVTX3 headers) was found. */
#include <stdio.h>
#include <stdlib.h>

#include <nvtx3/nvToolsExt.h>

static FILE *probe_log;

static int NVTX_API probe_push(const char *message) {
    if (probe_log) {
        fprintf(probe_log, "push %s\n", message ? message : "(null)");
        fflush(probe_log);
    }
    return 0;
}

static int NVTX_API probe_pop(void) {
    if (probe_log) {
        fputs("pop\n", probe_log);
        fflush(probe_log);
    }
    return 0;
}

__attribute__((visibility("default"))) int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || size <= NVTX_CBID_CORE_RangePop)
        return 0;
    const char *path = getenv("MEMRA_NVTX_PROBE_LOG");
    probe_log = path ? fopen(path, "w") : NULL;
    if (!probe_log)
        return 0;
    *table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)probe_push;
    *table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)probe_pop;
    return 1;
}
