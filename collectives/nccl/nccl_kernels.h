/* nccl_kernels.h: the `nccl` collective's own kernels (nccl_kernels.cu), launched from C. */
#ifndef MEMRA_NCCL_KERNELS_H
#define MEMRA_NCCL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Refusal cells of one rank, in host-mapped pinned memory (cudaHostAlloc mapped | portable): the
 * host arms a cell (no operation in flight), the rank's pack kernel fires and disarms it. */
#define NCCL_MAX_CELLS 64
typedef struct nccl_cell {
    uint32_t armed; /* 1: armed; the kernel writes 0 when it fires */
    uint32_t block;
    uint32_t position;
    int32_t word;
} nccl_cell;
typedef struct nccl_cells {
    uint32_t n_armed; /* cells armed; 0 lets the kernel skip the scan */
    uint32_t pad[3];
    nccl_cell cells[NCCL_MAX_CELLS];
} nccl_cells;

/* The floats a rank stages for count floats of n_global ranks: count, then the trailer of two
 * floats per rank (its refusal word's 16-bit halves), rounded up to a multiple of 64 floats. */
size_t nccl_stride(size_t count, uint32_t n_global);

/* Copies buf into staging[0..count), advances epochs[block], reads *position (when not NULL)
 * and fires a matching armed cell, writes the trailer (this rank's word in slots 2*rank and
 * 2*rank+1, zero elsewhere and in the padding) and writes MEMRA_COLLECTIVE_PENDING to *status. */
cudaError_t nccl_launch_pack(cudaStream_t stream, const float *buf, float *staging, size_t count, uint32_t n_global,
                             uint32_t rank, uint32_t block, const int32_t *position, int32_t *status,
                             unsigned long long *epochs, nccl_cells *cells);
/* Writes the result into buf and the status into *status: from `src`, which holds n_src rows of
 * `stride` floats (1 row: an all-reduced staging buffer, copied; n_global rows: gathered
 * staging buffers, summed in rank order from row 0 in float32). The status is
 * MEMRA_COLLECTIVE_ABORTED when *abort_flag is set, else the word of the lowest refusing rank,
 * else 0. */
cudaError_t nccl_launch_finish(cudaStream_t stream, float *buf, const float *src, size_t count, size_t stride,
                               uint32_t n_src, uint32_t n_global, int32_t *status, const int *abort_flag);
/* Writes `word` into *status (one thread): the status of an operation that failed on the host. */
cudaError_t nccl_launch_set_status(cudaStream_t stream, int32_t *status, int32_t word);

#ifdef __cplusplus
}
#endif
#endif
