/* mem_latency.cu: the latency of one dependent load from each level of the memory system, and of a
 * graph of PDL-chained empty launches, on whichever card runs it: to tell whether the H200's
 * larger fixed cost a dependent launch (6.7 us a layer against an H100's 4.1, twenty-ninth session)
 * comes from its memory system rather than its clocks (which stay at their top under load:
 * clocks.sh, thirty-second session). No memra code.
 *
 * A pointer chase: one thread follows a random cycle through a buffer of S bytes, one 4-byte load
 * at a time, each address the value of the last load (so no load can start before the one before
 * it ends); each step lands on a new 128-byte line (and, in the largest buffers, mostly a new
 * page). ns a load over 2^20 loads after a warm pass of the same cycle:
 *   4 KiB    L1
 *   8 MiB    L2 (both cards have 50 or 60 MB; the near partition mostly)
 *   40 MiB   L2 far and near, more TLB reach
 *   2 GiB    HBM, TLB misses included: what a cold weight's first load pays
 * and three chains of K kernels of 132 blocks in a graph, each waiting for the one before (PDL), us a
 * kernel:
 *   empty    the wait and the trigger alone: what a dependent launch costs by itself
 *   handoff  each block's first thread reads the word one block of the kernel before wrote, and
 *            writes its own (a dependency through L2, as a layer's next GEMV reads its x)
 *   cold     the same read of an epoch word, then one load of a line no kernel has touched since
 *            the last replay (2 GiB, a line per block and kernel, moved each replay): the cold
 *            first load of a GEMV's weights; cold less handoff is HBM's latency inside the chain
 *
 *   memra_cuda_mem_latency        exit 0, 3 on a CUDA error */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_common.cuh"

#define ML_LINE 32u /* words a 128-byte line */

/* Follows the cycle from line 0: L1 loads through the L1 (__ldca), the others from L2 and below. */
template <bool L1> __global__ void ml_chase(const uint32_t *next, uint64_t steps, uint32_t *sink) {
    uint32_t at = 0;
    for (uint64_t i = 0; i < steps; i++)
        at = L1 ? __ldca(next + at) : __ldcg(next + at);
    *sink = at;
}

__global__ void ml_empty(void) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* A chain's kernel k (see the top): words holds a word a block and kernel; epoch (words' last
 * word) moves once a replay, so a cold load never meets its line in L2 again. */
template <bool COLD>
__global__ void ml_step(uint32_t *words, const uint32_t *cold, uint32_t cold_lines, uint32_t k, uint32_t nk) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (threadIdx.x != 0)
        return;
    const uint32_t g = gridDim.x, b = blockIdx.x;
    uint32_t v;
    if (COLD) {
        const uint32_t e = __ldcg(words + (size_t)nk * g);
        const uint32_t line = (uint32_t)(((uint64_t)(e * nk + k) * g + b) * 2654435761ull % cold_lines);
        v = __ldcg(cold + (size_t)line * ML_LINE);
        if (k == nk - 1 && b == 0)
            words[(size_t)nk * g] = e + 1;
    } else
        v = __ldcg(words + (size_t)(k ? k - 1 : nk - 1) * g + (b + 1) % g);
    words[(size_t)k * g + b] = v + 1;
}

/* A random cycle over the buffer's lines (Sattolo's shuffle, a fixed seed): word 0 of line i holds
 * the word index of the next line. */
static uint32_t *ml_cycle(size_t bytes) {
    const size_t lines = bytes / (ML_LINE * 4);
    uint32_t *perm = (uint32_t *)malloc(lines * sizeof *perm);
    uint32_t *host = (uint32_t *)calloc(bytes / 4, 4);
    if (!perm || !host) {
        fprintf(stderr, "out of host memory\n");
        exit(3);
    }
    for (size_t i = 0; i < lines; i++)
        perm[i] = (uint32_t)i;
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (size_t i = lines - 1; i > 0; i--) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        const size_t j = (size_t)(r % i);
        const uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < lines; i++) /* line i -> line perm[i], one cycle through them all */
        host[i * ML_LINE] = perm[i] * ML_LINE;
    free(perm);
    uint32_t *dev;
    MC_BENCH_CHECK(cudaMalloc(&dev, bytes));
    MC_BENCH_CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
    free(host);
    return dev;
}

/* ms that what fn enqueues on st takes, between two events. */
template <typename F> static float ml_elapsed_ms(cudaStream_t st, F fn) {
    cudaEvent_t e0, e1;
    MC_BENCH_CHECK(cudaEventCreate(&e0));
    MC_BENCH_CHECK(cudaEventCreate(&e1));
    MC_BENCH_CHECK(cudaEventRecord(e0, st));
    fn();
    MC_BENCH_CHECK(cudaEventRecord(e1, st));
    MC_BENCH_CHECK(cudaEventSynchronize(e1));
    MC_BENCH_CHECK(cudaGetLastError());
    float ms;
    MC_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    MC_BENCH_CHECK(cudaEventDestroy(e0));
    MC_BENCH_CHECK(cudaEventDestroy(e1));
    return ms;
}

/* ns a load of the chase, after a warm pass of the same cycle. */
static double ml_time_ns(bool l1, const uint32_t *next, uint64_t steps, uint32_t *sink) {
    void (*k)(const uint32_t *, uint64_t, uint32_t *) = l1 ? ml_chase<true> : ml_chase<false>;
    k<<<1, 1>>>(next, steps, sink);
    return ml_elapsed_ms(0, [&] { k<<<1, 1>>>(next, steps, sink); }) * 1e6 / (double)steps;
}

/* us a kernel of a replayed graph of k kernels of the chain (0 empty, 1 handoff, 2 cold). */
static double ml_chain_us(int k, int form, uint32_t *words, const uint32_t *cold, uint32_t cold_lines,
                          cudaStream_t st) {
    cudaLaunchAttribute at = {};
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(132);
    cfg.blockDim = dim3(128);
    cfg.stream = st;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    cudaGraph_t g;
    cudaGraphExec_t x;
    MC_BENCH_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < k; i++) {
        if (form == 0)
            MC_BENCH_CHECK(cudaLaunchKernelEx(&cfg, ml_empty));
        else
            MC_BENCH_CHECK(cudaLaunchKernelEx(&cfg, form == 2 ? ml_step<true> : ml_step<false>, words, cold,
                                              cold_lines, (uint32_t)i, (uint32_t)k));
    }
    MC_BENCH_CHECK(cudaStreamEndCapture(st, &g));
    MC_BENCH_CHECK(cudaGraphInstantiate(&x, g, 0));
    for (int i = 0; i < 20; i++)
        MC_BENCH_CHECK(cudaGraphLaunch(x, st));
    const int reps = 200;
    const float ms = ml_elapsed_ms(st, [&] {
        for (int i = 0; i < reps; i++)
            MC_BENCH_CHECK(cudaGraphLaunch(x, st));
    });
    MC_BENCH_CHECK(cudaGraphExecDestroy(x));
    MC_BENCH_CHECK(cudaGraphDestroy(g));
    return ms * 1e3 / reps / k;
}

int main(void) {
    cudaDeviceProp p;
    MC_BENCH_CHECK(cudaGetDeviceProperties(&p, 0));
    printf("device: %s, L2 %d MiB\n", p.name, p.l2CacheSize >> 20);
    uint32_t *sink;
    MC_BENCH_CHECK(cudaMalloc(&sink, 4));
    static const struct {
        const char *what;
        size_t bytes;
        bool l1;
    } rows[] = {{"L1 (4 KiB)", 4u << 10, true},
                {"L2 (8 MiB)", 8u << 20, false},
                {"L2 far (40 MiB)", 40u << 20, false},
                {"HBM (2 GiB)", (size_t)2 << 30, false}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint32_t *next = ml_cycle(rows[i].bytes);
        const uint64_t steps = 1u << 20;
        const double a = ml_time_ns(rows[i].l1, next, steps, sink);
        const double b = ml_time_ns(rows[i].l1, next, steps, sink);
        printf("chase %-16s %8.1f %8.1f ns a load\n", rows[i].what, a, b);
        MC_BENCH_CHECK(cudaFree(next));
    }
    cudaStream_t st;
    MC_BENCH_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const size_t cold_bytes = (size_t)2 << 30;
    const uint32_t cold_lines = (uint32_t)(cold_bytes / (ML_LINE * 4));
    uint32_t *cold, *words;
    MC_BENCH_CHECK(cudaMalloc(&cold, cold_bytes));
    MC_BENCH_CHECK(cudaMemset(cold, 0, cold_bytes));
    MC_BENCH_CHECK(cudaMalloc(&words, (64 * 132 + 1) * 4));
    MC_BENCH_CHECK(cudaMemset(words, 0, (64 * 132 + 1) * 4));
    static const char *forms[] = {"empty", "handoff", "cold"};
    for (int f = 0; f < 3; f++)
        for (int k = 8; k <= 64; k *= 8)
            printf("%-7s PDL chain, %2d kernels of 132 blocks: %.2f us a kernel\n", forms[f], k,
                   ml_chain_us(k, f, words, cold, cold_lines, st));
    return 0;
}
