/* post_norm.cuh: the standalone RMSNorm of op_glue.cu and gemma3's post norm with its residual
 * add, as one block computes them (internal, device code). op_glue's kernels (the norm as a launch
 * of its own: an op plugin's glue, norm=unfused, postnorm=launch) and the last block of a GEMV
 * that folds the post norm into its launch (postnorm=fused: gemv.cu, gemv_q8.cu, gemv_legacy.cu,
 * gemv_kquant.cu) run this one function, hence the same bits.
 *
 * Determinism: the sum of squares has one fixed shape (256 partials, then a fixed tree), every
 * multiply and add rounded on its own (no fused multiply-add); the fused GEMV's last block is
 * elected by an integer ticket (no float atomics), and what it computes does not depend on which
 * block it is. */
#ifndef MEMRA_CUDA_POST_NORM_CUH
#define MEMRA_CUDA_POST_NORM_CUH

#include "cuda_common.cuh"

#define MC_NORM_PARTS 256u /* the partial sums of squares (a thread of op_glue's block each) */

/* out[i] = (t[i] * scale) * w[i] (ADD 0) or out[i] = out[i] + (t[i] * scale) * w[i] (ADD 1), i < n,
 * scale = 1 / sqrtf(sum / n + eps), where partial p (< 256) sums t[i]^2 over i = p (mod 256) in
 * increasing i, and the 256 partials are added by a fixed tree in shared memory (pairs at distance
 * 128, 64, ..., 1). Called by every thread of a block of any size (a thread takes partials
 * threadIdx.x, + blockDim.x, ..., and elements likewise): the same bits whatever the block size.
 * t is read through L2 (__ldcg: a fused GEMV's last block reads what the grid's other blocks
 * wrote). part: MC_NORM_PARTS floats of shared memory. */
template <int ADD>
__device__ __forceinline__ void mc_rmsnorm_block(const float *t, const float *w, uint32_t n, float eps, float *out,
                                                 float *part) {
    const uint32_t nt = blockDim.x;
    for (uint32_t p = threadIdx.x; p < MC_NORM_PARTS; p += nt) {
        float acc = 0.0f;
        for (uint32_t i = p; i < n; i += MC_NORM_PARTS) {
            const float v = __ldcg(t + i);
            acc = __fadd_rn(acc, __fmul_rn(v, v));
        }
        part[p] = acc;
    }
    __syncthreads();
    for (uint32_t s = MC_NORM_PARTS / 2; s > 0; s >>= 1) {
        for (uint32_t p = threadIdx.x; p < s; p += nt)
            part[p] = __fadd_rn(part[p], part[p + s]);
        __syncthreads();
    }
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(part[0], (float)n), eps)));
    for (uint32_t i = threadIdx.x; i < n; i += nt) {
        const float v = __fmul_rn(__fmul_rn(__ldcg(t + i), scale), w[i]);
        out[i] = ADD ? __fadd_rn(out[i], v) : v;
    }
}

/* postnorm=fused: the tail of a GEMV grid that wrote y[0 .. n) (each block its rows), called by
 * every thread of every block after its stores. Each block fences its stores and takes a ticket
 * (an integer atomic); the block with the last ticket, which then sees every block's rows, runs
 * mc_rmsnorm_block<1>: pn.x[i] += RMSNorm(y)[i] * pn.w[i] (mc_op_rmsnorm_add's bits), and resets
 * the ticket for the next launch (the kernel boundary orders it). */
__device__ __forceinline__ void mc_post_norm_last(const mc_post_args &pn, const float *y, uint32_t n) {
    __shared__ float part[MC_NORM_PARTS];
    __shared__ uint32_t last;
    __threadfence(); /* this thread's rows are visible device-wide before the ticket counts them */
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(pn.ticket, 1u) == gridDim.x * gridDim.y * gridDim.z - 1 ? 1u : 0u;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    mc_rmsnorm_block<1>(y, pn.w, n, pn.eps, pn.x, part);
    if (threadIdx.x == 0)
        *pn.ticket = 0u;
}

#endif
