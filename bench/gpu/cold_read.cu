/* cold_read.cu: how long a launch takes to read B bytes when it learns where they are only from the
 * kernel before it (issue 29: a mixture of experts' GEMVs read the router's chosen experts), against
 * the same read whose addresses are known before the programmatic wait (a dense GEMV queues its
 * first weights before it waits). No memra code: a floor for any kernel of that shape.
 *
 * In a CUDA graph of L pairs, replayed: a one-warp kernel writes k region ids (an LCG a step, so the
 * regions change every step, among n regions of B / k bytes), then a programmatic dependent launch
 * reads the k regions with 16-byte streaming loads, U in flight a thread, one wave of blocks:
 *   dep   waits (griddepcontrol.wait), reads the ids, then the regions (the experts' case);
 *   pre   reads regions 0 .. k-1 (known at launch), its first U loads before the wait;
 *   ids   the id kernel alone (L launches), the chain without the reads.
 * Prints us a pair and, for dep and pre, B over (pair - ids) as GB/s: the read's effective rate.
 *
 *   memra_cuda_cold_read [replays]        exit 0, 2 on usage, 3 on a CUDA error */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_common.cuh"

#define CR_THREADS 256
#define CR_L 48      /* pairs a graph (48 layers) */

__global__ void cr_ids(int *ids, int k, int n) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (threadIdx.x < (unsigned)k)
        ids[threadIdx.x] = (int)(((unsigned)ids[threadIdx.x] * 1103515245u + 12345u + threadIdx.x * 977u) % (unsigned)n);
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* PRE 0: wait, then ids, then loads; PRE 1: regions 0 .. k-1, the first loads before the wait. */
template <int PRE, int CR_U>
__global__ void __launch_bounds__(CR_THREADS) cr_read(const uint4 *pool, uint32_t region16, const int *ids, int k,
                                                      unsigned *sink) {
    const uint32_t total = region16 * (uint32_t)k, nth = gridDim.x * blockDim.x;
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t acc = 0;
    uint4 v[CR_U];
    auto addr = [&](uint32_t idx) -> const uint4 * {
        const uint32_t j = idx / region16, off = idx - j * region16;
        const uint32_t r = PRE ? j : (uint32_t)ids[j];
        return pool + (size_t)r * region16 + off;
    };
    uint32_t base = t;
    if (PRE) {
#pragma unroll
        for (int u = 0; u < CR_U; u++) {
            const uint32_t idx = base + u * nth;
            if (idx < total)
                v[u] = __ldcs(addr(idx));
        }
        asm volatile("griddepcontrol.wait;" ::: "memory");
    } else {
        asm volatile("griddepcontrol.wait;" ::: "memory");
#pragma unroll
        for (int u = 0; u < CR_U; u++) {
            const uint32_t idx = base + u * nth;
            if (idx < total)
                v[u] = __ldcs(addr(idx));
        }
    }
    for (;;) {
#pragma unroll
        for (int u = 0; u < CR_U; u++)
            if (base + u * nth < total)
                acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
        base += CR_U * nth;
        if (base >= total)
            break;
#pragma unroll
        for (int u = 0; u < CR_U; u++) {
            const uint32_t idx = base + u * nth;
            if (idx < total)
                v[u] = __ldcs(addr(idx));
        }
    }
    if (acc == 0x9e3779b9u) /* never in practice: keeps the loads */
        sink[0] = acc;
}

typedef void (*cr_fn)(const uint4 *, uint32_t, const int *, int, unsigned *);

/* us a pair (or a launch of ids alone: mode 2) over a graph of CR_L, best of three timings of `replays`. */
static double time_graph(int mode, cr_fn fn, int blocks, const uint4 *pool, uint32_t region16, int *ids, int k, int n,
                         unsigned *sink, int replays) {
    cudaStream_t st;
    MC_BENCH_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    MC_BENCH_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < CR_L; l++) {
        mc_bench_launch_pdl(st, cr_ids, 1, 32, 0, ids, k, n);
        if (mode != 2)
            mc_bench_launch_pdl(st, fn, blocks, CR_THREADS, 0, pool, region16, (const int *)ids, k, sink);
    }
    MC_BENCH_CHECK(cudaStreamEndCapture(st, &g));
    MC_BENCH_CHECK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    MC_BENCH_CHECK(cudaEventCreate(&a));
    MC_BENCH_CHECK(cudaEventCreate(&b));
    double best = 1e30;
    for (int pass = 0; pass < 4; pass++) { /* pass 0 warms up */
        MC_BENCH_CHECK(cudaEventRecord(a, st));
        for (int r = 0; r < replays; r++)
            MC_BENCH_CHECK(cudaGraphLaunch(ge, st));
        MC_BENCH_CHECK(cudaEventRecord(b, st));
        MC_BENCH_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        MC_BENCH_CHECK(cudaEventElapsedTime(&ms, a, b));
        const double us = ms * 1000.0 / replays / CR_L;
        if (pass > 0 && us < best)
            best = us;
    }
    MC_BENCH_CHECK(cudaGraphExecDestroy(ge));
    MC_BENCH_CHECK(cudaGraphDestroy(g));
    MC_BENCH_CHECK(cudaEventDestroy(a));
    MC_BENCH_CHECK(cudaEventDestroy(b));
    MC_BENCH_CHECK(cudaStreamDestroy(st));
    return best;
}

int main(int argc, char **argv) {
    int replays = 20;
    if (argc > 2 || (argc == 2 && (replays = atoi(argv[1])) <= 0)) {
        fprintf(stderr, "usage: memra_cuda_cold_read [replays]\n");
        return 2;
    }
    int dev = 0, sms = 0, per_sm = 0;
    MC_BENCH_CHECK(cudaGetDevice(&dev));
    MC_BENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    MC_BENCH_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cr_read<0, 8>, CR_THREADS, 0));
    if (per_sm > 4)
        per_sm = 4;
    const int blocks = sms * per_sm;
    const int k = 8, n = 128;
    /* region sizes (MB): k regions give the read; 3.34 MB = a qwen3moe-30b Q8_0 expert's gate/up */
    const double region_mb[] = {0.125, 0.5, 1.67, 3.34, 6.25, 12.5};
    const size_t max_region = (size_t)(12.5 * 1024 * 1024) / 16 * 16;
    uint4 *pool;
    int *ids;
    unsigned *sink;
    MC_BENCH_CHECK(cudaMalloc((void **)&pool, max_region * n));
    MC_BENCH_CHECK(cudaMemset(pool, 0x5a, max_region * n));
    MC_BENCH_CHECK(cudaMalloc((void **)&ids, 64 * sizeof(int)));
    int h_ids[64];
    for (int j = 0; j < 64; j++)
        h_ids[j] = j * 17 % n;
    MC_BENCH_CHECK(cudaMemcpy(ids, h_ids, sizeof h_ids, cudaMemcpyHostToDevice));
    MC_BENCH_CHECK(cudaMalloc((void **)&sink, 4));
    printf("%d multiprocessors, %d blocks of %d threads (%d a multiprocessor), %d loads of 16 bytes in flight a "
           "thread; %d pairs a graph, best of 3 x %d replays\n",
           sms, blocks, CR_THREADS, per_sm, 8, CR_L, replays);
    const double ids_us = time_graph(2, NULL, blocks, pool, 0, ids, k, n, sink, replays);
    printf("ids kernel alone: %.2f us a launch\n", ids_us);
    printf("| read MB | dep us a pair | pre us a pair | dep read us (GB/s) | pre read us (GB/s) |\n| --- | --- | --- | --- | --- |\n");
    for (size_t i = 0; i < sizeof region_mb / sizeof region_mb[0]; i++) {
        const uint32_t region16 = (uint32_t)(region_mb[i] * 1024 * 1024 / 16);
        const double mb = (double)region16 * 16 * k / 1e6;
        const double dep = time_graph(0, cr_read<0, 8>, blocks, pool, region16, ids, k, n, sink, replays);
        const double pre = time_graph(1, cr_read<1, 8>, blocks, pool, region16, ids, k, n, sink, replays);
        printf("| %.1f | %.2f | %.2f | %.2f (%.0f) | %.2f (%.0f) |\n", mb, dep, pre, dep - ids_us,
               mb * 1e6 / ((dep - ids_us) * 1e-6) / 1e9, pre - ids_us, mb * 1e6 / ((pre - ids_us) * 1e-6) / 1e9);
    }
    /* the dependent read of 28 MB by fewer or more bytes in flight: threads a multiprocessor x loads a thread */
    printf("\n| threads a multiprocessor | loads in flight a thread | KB in flight a multiprocessor | dep read us of 28 MB (GB/s) |\n| --- | --- | --- | --- |\n");
    const uint32_t r28 = (uint32_t)(3.34 * 1024 * 1024 / 16);
    const int tpm[] = {256, 512, 768, 1024};
    for (int a = 0; a < 4; a++)
        for (int u = 0; u < 3; u++) {
            const cr_fn fn = u == 0 ? cr_read<0, 4> : u == 1 ? cr_read<0, 8> : cr_read<0, 16>;
            const int lu = 4 << u, b = sms * tpm[a] / CR_THREADS;
            const double us = time_graph(0, fn, b, pool, r28, ids, k, n, sink, replays) - ids_us;
            printf("| %d | %d | %d | %.2f (%.0f) |\n", tpm[a], lu, tpm[a] * lu * 16 / 1024, us,
                   (double)r28 * 16 * k / (us * 1e-6) / 1e9);
        }
    MC_BENCH_CHECK(cudaFree(pool));
    MC_BENCH_CHECK(cudaFree(ids));
    MC_BENCH_CHECK(cudaFree(sink));
    return 0;
}
