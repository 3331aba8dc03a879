/* check_util.h: what the device check programs of tests/cuda share: a seeded generator (the same
 * sequence every check drew before this header) and a random Q8_0 matrix uploaded in the
 * backend's layout. Static inline: each program includes it once. */
#ifndef MEMRA_CHECK_UTIL_H
#define MEMRA_CHECK_UTIL_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "memra/numeric.h"

/* The next 64 random bits of state *s (splitmix64). */
static inline uint64_t mck_next(uint64_t *s) {
    *s = memra_mix64(*s + 0x9e3779b97f4a7c15ull);
    return *s;
}
static inline float mck_unit(uint64_t *s) { return (float)(mck_next(s) >> 40) * (1.0f / 16777216.0f); } /* [0, 1) */
static inline float mck_sym(uint64_t *s) { return 2.0f * mck_unit(s) - 1.0f; }                          /* [-1, 1) */

/* A random Q8_0 matrix in the upload layout (int8 rows of stride cols rounded up to 16, -128
 * included; f16 block scales of random sign and magnitude 0.002 to 0.022) on the device. */
static inline cudaError_t mck_q8_matrix(uint32_t rows, uint32_t cols, uint64_t *s, mc_matrix *w) {
    memset(w, 0, sizeof *w);
    w->type = MEMRA_TYPE_Q8_0;
    w->rows = rows;
    w->cols = cols;
    w->stride = (cols + 15) / 16 * 16;
    const size_t bytes = (size_t)rows * w->stride, ns = (size_t)rows * (cols / 32);
    int8_t *d = (int8_t *)calloc(1, bytes);
    uint16_t *sc = (uint16_t *)malloc(ns * 2);
    cudaError_t e = cudaErrorMemoryAllocation;
    if (!d || !sc)
        goto done;
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t c = 0; c < cols; c++)
            d[(size_t)r * w->stride + c] = (int8_t)((int)(mck_next(s) % 256) - 128);
    for (size_t i = 0; i < ns; i++)
        sc[i] = memra_f32_to_f16((mck_unit(s) < 0.5f ? -1.0f : 1.0f) * (0.002f + 0.02f * mck_unit(s)));
    if ((e = cudaMalloc(&w->data, bytes)) != cudaSuccess ||
        (e = cudaMemcpy(w->data, d, bytes, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMalloc((void **)&w->scales, ns * 2)) != cudaSuccess)
        goto done;
    e = cudaMemcpy(w->scales, sc, ns * 2, cudaMemcpyHostToDevice);
done:
    free(d);
    free(sc);
    return e;
}

#endif
