/* oneshot_kernel.h: the device side of the `oneshot` collective (oneshot_kernel.cu), called from
 * the plugin's C host side (oneshot.c). Internal to the plugin. */
#ifndef MEMRA_ONESHOT_KERNEL_H
#define MEMRA_ONESHOT_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "memra/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OS_MAX_CELLS 32u   /* refusal cells armed at once, per rank */
#define OS_MAX_SITES 4096u /* collective blocks (layer * 2 + which) a communicator counts epochs for */

/* Shared by every rank, in host-mapped pinned memory (portable): set by the host (abort); read
 * once by block 0 as the kernel starts, and polled while a block waits. */
typedef struct os_ctl {
    volatile int32_t abort;
} os_ctl;

/* A refusal cell in the rank's device memory. fired is the sync epoch of the operation that
 * fired it (0: not yet): every grid block of that operation sees it, later ones ignore it. */
typedef struct os_cell {
    int32_t armed;
    uint32_t site;
    int32_t position;
    int32_t word;
    unsigned long long fired;
} os_cell;

/* One rank's view of the communicator: its own buffers and every rank's peer-visible ones. */
typedef struct os_rank_view {
    uint32_t n_ranks, rank;
    uint32_t max_grid;            /* the most blocks an operation launches */
    uint32_t target;              /* floats per block aimed at: grid = ceil(count / target) */
    uint32_t region;              /* floats per block per parity in each data buffer */
    uint32_t acqrel;              /* sync=acqrel: release/acquire flags; 0 (sync=fence): system fences */
    uint32_t pdl;                 /* pdl=1: programmatic dependent launch (starts while the kernel before drains) */
    float *data[MEMRA_MAX_RANKS]; /* [2][max_grid][region] on each rank's device */
    unsigned long long *start[MEMRA_MAX_RANKS]; /* [2][max_grid][n_ranks] on each rank's device */
    int32_t *words[MEMRA_MAX_RANKS];            /* [2][n_ranks] words, [2][n_ranks] counts, then the broken flag */
    unsigned long long *cnt[MEMRA_MAX_RANKS];   /* [2][max_grid][n_ranks]: (e mod 2^32) << 32 | count, by block */
    unsigned long long *seq;                    /* this rank's operations so far (one counter) */
    unsigned long long *census;                 /* [OS_MAX_SITES]: this rank's epochs per site */
    os_cell *cells;                             /* [OS_MAX_CELLS] */
    int32_t *outcome;                           /* [max_grid] */
    unsigned int *done;                         /* 1 counter */
    os_ctl *ctl;                                /* host-mapped, shared */
    unsigned long long timeout_ns;
} os_rank_view;

/* Enqueues one rank's part of an all-reduce on `stream` (a cudaStream_t). Returns a cudaError_t
 * as int (0 = launched). */
int os_launch(const os_rank_view *v, float *buf, uint32_t count, uint32_t site, const int32_t *position_dev,
              int32_t *status_dev, void *stream);

/* Threads per block of the kernel. */
#define OS_THREADS 512u

#ifdef __cplusplus
}
#endif
#endif
