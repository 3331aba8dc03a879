/* check_program.h: what the plain check programs of tests/cuda that count failures share (for
 * the device machine, where Criterion is not installed): CHECK, which prints the failing line and
 * counts it in the program's `failures`, and a monotonic clock. */
#ifndef MEMRA_CHECK_PROGRAM_H
#define MEMRA_CHECK_PROGRAM_H

#include <stdio.h>
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

static inline double check_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#endif
