/* nccl_kernels.cu: the `nccl` collective's kernels around NCCL's own: pack (buf into the staging
 * buffer with the refusal trailer; epochs; refusal cells) and finish (the result back into buf,
 * summed in rank order for allgather mode; the status). Built with -fmad=false; the sums use
 * __fadd_rn, which is never contracted. */
#include "memra/plugin.h"
#include "nccl_kernels.h"

#define NCCL_THREADS 256
#define NCCL_MAX_BLOCKS 1024

size_t nccl_stride(size_t count, uint32_t n_global) {
    size_t n = count + 2u * (size_t)n_global;
    return (n + 63u) / 64u * 64u;
}

static unsigned grid_for(size_t n) {
    size_t blocks = (n + NCCL_THREADS - 1) / NCCL_THREADS;
    if (blocks < 1)
        blocks = 1;
    if (blocks > NCCL_MAX_BLOCKS)
        blocks = NCCL_MAX_BLOCKS;
    return (unsigned)blocks;
}

__global__ void nccl_pack_kernel(const float *buf, float *staging, size_t count, size_t stride, uint32_t rank,
                                 uint32_t block, const int32_t *position, int32_t *status, unsigned long long *epochs,
                                 nccl_cells *cells) {
    size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step)
        staging[i] = buf[i];
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    epochs[block] += 1ull;
    int32_t word = 0;
    volatile nccl_cells *vc = cells;
    if (position && vc->n_armed) {
        uint32_t pos = (uint32_t)*position;
        for (uint32_t k = 0; k < NCCL_MAX_CELLS; k++) {
            volatile nccl_cell *cell = &vc->cells[k];
            if (cell->armed && cell->block == block && cell->position == pos) {
                word = cell->word;
                cell->armed = 0;
                vc->n_armed = vc->n_armed - 1;
                break;
            }
        }
    }
    for (size_t i = count; i < stride; i++)
        staging[i] = 0.0f;
    uint32_t bits = (uint32_t)word;
    staging[count + 2u * rank] = (float)(bits & 0xffffu);
    staging[count + 2u * rank + 1u] = (float)(bits >> 16);
    *status = MEMRA_COLLECTIVE_PENDING;
}

__global__ void nccl_finish_kernel(float *buf, const float *src, size_t count, size_t stride, uint32_t n_src,
                                   uint32_t n_global, int32_t *status, const int *abort_flag) {
    size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step) {
        float s = src[i];
        for (uint32_t r = 1; r < n_src; r++)
            s = __fadd_rn(s, src[(size_t)r * stride + i]);
        buf[i] = s;
    }
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    if (*(volatile const int *)abort_flag) {
        *status = MEMRA_COLLECTIVE_ABORTED;
        return;
    }
    int32_t word = 0;
    for (uint32_t r = 0; r < n_global && word == 0; r++) {
        /* Rank r's slots, in its own row when gathered, else in the one all-reduced row. */
        const float *t = src + (n_src > 1 ? (size_t)r * stride : 0) + count + 2u * r;
        uint32_t lo = (uint32_t)t[0], hi = (uint32_t)t[1];
        word = (int32_t)((hi << 16) | (lo & 0xffffu));
    }
    *status = word;
}

__global__ void nccl_set_status_kernel(int32_t *status, int32_t word) { *status = word; }

extern "C" cudaError_t nccl_launch_pack(cudaStream_t stream, const float *buf, float *staging, size_t count,
                                        uint32_t n_global, uint32_t rank, uint32_t block, const int32_t *position,
                                        int32_t *status, unsigned long long *epochs, nccl_cells *cells) {
    nccl_pack_kernel<<<grid_for(count), NCCL_THREADS, 0, stream>>>(buf, staging, count, nccl_stride(count, n_global),
                                                                   rank, block, position, status, epochs, cells);
    return cudaGetLastError();
}

extern "C" cudaError_t nccl_launch_finish(cudaStream_t stream, float *buf, const float *src, size_t count,
                                          size_t stride, uint32_t n_src, uint32_t n_global, int32_t *status,
                                          const int *abort_flag) {
    nccl_finish_kernel<<<grid_for(count), NCCL_THREADS, 0, stream>>>(buf, src, count, stride, n_src, n_global, status,
                                                                     abort_flag);
    return cudaGetLastError();
}

extern "C" cudaError_t nccl_launch_set_status(cudaStream_t stream, int32_t *status, int32_t word) {
    nccl_set_status_kernel<<<1, 1, 0, stream>>>(status, word);
    return cudaGetLastError();
}
