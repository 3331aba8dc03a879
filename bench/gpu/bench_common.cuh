/* bench_common.cuh: what the device benches of bench/gpu share: the check of a CUDA call (the
 * bench exits 3 naming the call), and the deterministic fill of a buffer with hashed words (the
 * same bits on every run and machine, so two builds bench the same data). Bench code only: the
 * library never exits or prints. */
#ifndef MC_BENCH_COMMON_CUH
#define MC_BENCH_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define MC_BENCH_CHECK(x)                                                                                              \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                        \
            exit(3);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* p[i] = (hash(i) ^ seed-mixed & mask) | or_bits for the n words of p: a float or bf16 pattern of
 * bounded exponent (the mask and the or give the range). */
__global__ void mc_bench_fill_words(uint32_t *p, size_t n, uint32_t seed, uint32_t mask, uint32_t or_bits) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t z = (uint32_t)i * 2654435761u ^ seed;
        z ^= z >> 15;
        z *= 2246822519u;
        z ^= z >> 13;
        p[i] = (z & mask) | or_bits;
    }
}

/* The words of bytes / 4 of p filled so, on the default stream. */
static inline void mc_bench_fill(void *p, size_t bytes, uint32_t seed, uint32_t mask, uint32_t or_bits) {
    mc_bench_fill_words<<<1024, 256>>>((uint32_t *)p, bytes / 4, seed, mask, or_bits);
    MC_BENCH_CHECK(cudaGetLastError());
}

/* The copy ceiling in bytes a second: ten device-to-device copies of 1 GiB on st after a first,
 * read and write both counted. */
static inline double mc_bench_copy_ceiling(cudaStream_t st) {
    void *a, *b;
    const size_t n = (size_t)1 << 30;
    MC_BENCH_CHECK(cudaMalloc(&a, n));
    MC_BENCH_CHECK(cudaMalloc(&b, n));
    MC_BENCH_CHECK(cudaMemset(a, 1, n));
    MC_BENCH_CHECK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    cudaEvent_t e0, e1;
    MC_BENCH_CHECK(cudaEventCreate(&e0));
    MC_BENCH_CHECK(cudaEventCreate(&e1));
    MC_BENCH_CHECK(cudaEventRecord(e0, st));
    for (int i = 0; i < 10; i++)
        MC_BENCH_CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, st));
    MC_BENCH_CHECK(cudaEventRecord(e1, st));
    MC_BENCH_CHECK(cudaEventSynchronize(e1));
    float ms;
    MC_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    MC_BENCH_CHECK(cudaEventDestroy(e0));
    MC_BENCH_CHECK(cudaEventDestroy(e1));
    MC_BENCH_CHECK(cudaFree(a));
    MC_BENCH_CHECK(cudaFree(b));
    return 2.0 * n * 10 / (ms / 1e3);
}

/* One launch of fn<<<grid, block, smem, st>>>(args) with programmatic stream serialization (the
 * kernel's griddepcontrol.wait then waits for the launch before it on st). */
template <typename... P, typename... A>
static inline void mc_bench_launch_pdl(cudaStream_t st, void (*fn)(P...), unsigned grid, unsigned block, size_t smem,
                                       A... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute a[1];
    a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = a;
    cfg.numAttrs = 1;
    MC_BENCH_CHECK(cudaLaunchKernelEx(&cfg, fn, args...));
}

#endif
