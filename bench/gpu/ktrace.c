/* ktrace.c: a CUPTI injection library that records every kernel's start and end on the device
 * (graph nodes included) and writes them, one tab-separated line a kernel, to the file named by
 * MEMRA_KTRACE (default ktrace.tsv) when the process exits. With the kernels of a decode token
 * in sequence (a CUDA graph with programmatic dependent launches), the time from one kernel's
 * end to the next one's end is what that kernel costs the token: ktrace.py sums it per kernel
 * over the graph replays. A measurement tool, loaded only by CUDA's injection hook
 * (CUDA_INJECTION64_PATH=.../libmemra_ktrace.so); memra itself never reads MEMRA_KTRACE, and the
 * tracer changes no launch and no computation (the activity API timestamps kernels without
 * serialising them).
 *
 *   CUDA_INJECTION64_PATH=$PWD/libmemra_ktrace.so MEMRA_KTRACE=t.tsv memra bench ...
 *   python3 bench/gpu/ktrace.py t.tsv
 *
 * InitializeInjection is the one exported symbol (the project builds with hidden visibility).
 * Columns: start end (ns, device clock) correlation graph_id graph_node grid block name. */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KT_BUF (8u << 20)

static FILE *kt_out;
static unsigned long long kt_records, kt_dropped;

static void CUPTIAPI kt_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, KT_BUF);
    *size = *buffer ? KT_BUF : 0;
    *max_records = 0;
}

static void CUPTIAPI kt_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *r = NULL;
    while (buffer && cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
        if (kt_out)
            fprintf(kt_out, "%llu\t%llu\t%u\t%u\t%llu\t%d\t%d\t%s\n", (unsigned long long)k->start,
                    (unsigned long long)k->end, k->correlationId, k->graphId, (unsigned long long)k->graphNodeId,
                    k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ, k->name ? k->name : "?");
        kt_records++;
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
        kt_dropped += dropped;
    free(buffer);
}

static void kt_finish(void) {
    cuptiActivityFlushAll(1);
    if (kt_out) {
        const int bad = fflush(kt_out) != 0 || ferror(kt_out);
        fclose(kt_out);
        fprintf(stderr, "ktrace: %llu kernels recorded, %llu dropped%s\n", kt_records, kt_dropped,
                bad ? "; WRITING THE TRACE FAILED" : "");
    }
}

__attribute__((visibility("default"))) int InitializeInjection(void) {
    const char *path = getenv("MEMRA_KTRACE");
    kt_out = fopen(path && *path ? path : "ktrace.tsv", "w");
    if (!kt_out) {
        fprintf(stderr, "ktrace: cannot open %s\n", path && *path ? path : "ktrace.tsv");
        return 0;
    }
    if (cuptiActivityRegisterCallbacks(kt_buffer_requested, kt_buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "ktrace: CUPTI refused the kernel activity\n");
        return 0;
    }
    atexit(kt_finish);
    return 1;
}
