/* check_program.h: what the plain check programs (tests/cuda, tests/collectives) that count
 * failures share, for the device machine, where Criterion is not installed: CHECK, which prints
 * the failing line and counts it in the program's `failures`; CHECK_CUDA, which ends the program
 * on a CUDA error (include cuda_runtime.h first); and a monotonic clock. */
#ifndef MEMRA_CHECK_PROGRAM_H
#define MEMRA_CHECK_PROGRAM_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            failures++;                                                                                                \
            printf("  FAIL %s:%d: ", __FILE__, __LINE__);                                                              \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
        }                                                                                                              \
    } while (0)

#define CHECK_CUDA(call)                                                                                               \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            printf("  FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));                       \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static inline double check_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#endif
