/* moe_route.cuh: the router's softmax, top k and weights as one block computes them (internal,
 * device code). moe.cu's moe_route kernel and the fused router's routing block (moe_router.cu's
 * moe_router and moe_router_cl, moe_fuse bits 1 and 16) run this one function, hence the same
 * bits; mc_moe_route_warp computes the same for at most 32 experts in one warp (moe_fuse bit
 * 256). The formulas are cpu_moe.c's (memra/model_types.h defines them); the softmax sums in a
 * fixed tree. */
#ifndef MEMRA_CUDA_MOE_ROUTE_CUH
#define MEMRA_CUDA_MOE_ROUTE_CUH

#include "cuda_common.cuh"
#include "memra/model_types.h"

#define MC_ROUTE_THREADS 1024u /* MEMRA_MAX_EXPERTS: one thread per expert */

/* Called by every thread of a block of at least 32 * ceil(n / 32) threads (n <= NMAX), once the
 * logits are complete and visible to the block (they are read through L2: the fused router's last
 * block reads what the grid's other blocks wrote). Thread e < n holds expert e's logit:
 *   p = softmax(logits[0 .. n)): the max, exps of (logit - max), their sum (each warp's 32 in the
 *   xor tree, the sums of the ceil(n / 32) warps in index order), then p / sum;
 *   the top k of p in decreasing p, ties toward the lower index (the slot order): expert e takes
 *   slot #{e' : p[e'] > p[e] or (p[e'] == p[e] and e' < e)} when that is < k; a NaN p ranks
 *   below every number (so the ranks stay a permutation and every slot gets one expert);
 *   w_j = p[sel_j], divided by their sum (in slot order) when norm;
 *   with a shared expert (shexp) w_k = sigmoid(logits[n]) (its gate's logit, after the router's).
 * Writes sel[0 .. k) and w[0 .. k + shexp). slog: where given, the block's shared-memory copy of
 * logits[0 .. n) (the same values: the cluster router pushes them there), read in place of L2. */
template <uint32_t NMAX>
__device__ __forceinline__ void mc_moe_route_block(const float *logits, uint32_t n, uint32_t k, int norm, int shexp,
                                                   int32_t *sel, float *w, const float *slog = NULL) {
    __shared__ __align__(16) float p[NMAX]; /* the ranking keys: p, a NaN as -1 */
    __shared__ float part[NMAX / 32];
    __shared__ float wsl[MEMRA_MAX_EXPERTS_USED];
    __shared__ float stat[2];
    const uint32_t t = threadIdx.x, lane = t & 31, warp = t >> 5, nw = (n + 31) / 32;
    const float l = t < n ? (slog ? slog[t] : __ldcg(logits + t)) : -INFINITY;
    float m = l; /* the max (any order gives its bits) */
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(MC_FULL, m, o));
    if (lane == 0 && warp < nw)
        part[warp] = m;
    __syncthreads();
    if (t == 0) {
        float v = part[0];
        for (uint32_t i = 1; i < nw; i++)
            v = fmaxf(v, part[i]);
        stat[0] = v;
    }
    __syncthreads();
    const float ex = t < n ? expf(l - stat[0]) : 0.0f;
    const float s = mc_warp_sum(ex);
    __syncthreads(); /* part[] is read above before it is written again */
    if (lane == 0 && warp < nw)
        part[warp] = s;
    __syncthreads();
    if (t == 0) {
        float v = 0.0f;
        for (uint32_t i = 0; i < nw; i++)
            v += part[i];
        stat[1] = v;
    }
    __syncthreads();
    const float pe = ex / stat[1];
    const float key = pe == pe ? pe : -1.0f;
    if (t < n)
        p[t] = key;
    __syncthreads();
    if (t < n) {
        /* the count of keys ahead of this one, four at a time (one 16-byte broadcast load, four
         * independent counts: the last block runs this alone on its multiprocessor, where a chain
         * of one load and compare a key waited on each load) */
        uint32_t c0 = 0, c1 = 0, c2 = 0, c3 = 0, e = 0;
        for (; e + 4 <= n; e += 4) {
            const float4 q = *(const float4 *)(p + e);
            c0 += (q.x > key || (q.x == key && e < t)) ? 1u : 0u;
            c1 += (q.y > key || (q.y == key && e + 1 < t)) ? 1u : 0u;
            c2 += (q.z > key || (q.z == key && e + 2 < t)) ? 1u : 0u;
            c3 += (q.w > key || (q.w == key && e + 3 < t)) ? 1u : 0u;
        }
        for (; e < n; e++)
            c0 += (p[e] > key || (p[e] == key && e < t)) ? 1u : 0u;
        const uint32_t rank = (c0 + c1) + (c2 + c3);
        if (rank < k) {
            sel[rank] = (int32_t)t;
            wsl[rank] = pe;
        }
    }
    __syncthreads();
    if (t == 0) {
        float total = 0.0f;
        if (norm)
            for (uint32_t j = 0; j < k; j++)
                total += wsl[j];
        for (uint32_t j = 0; j < k; j++)
            w[j] = norm ? wsl[j] / total : wsl[j];
        if (shexp)
            w[k] = 1.0f / (1.0f + expf(-__ldcg(logits + n)));
    }
}

/* mc_moe_route_block's ids and weights for n <= 32 experts computed by one warp (every lane of it
 * calls this; the rest of the block need not), from the logits in shared memory (slog), with no
 * block barrier. The same operations in the same order, so the same bits: the max and the sum of
 * the exps are the one warp's xor trees, lane 0's values taken as the block's thread 0 takes
 * them (the block sums its warps' sums from 0.0f: here 0.0f plus the one warp's sum), p = ex / sum;
 * the ranks count the same keys (each lane's key by a shuffle from lane e); the weights are divided
 * by their sum in slot order, which every lane computes alike before lane j stores w_j; the shared
 * expert's gate logit is read from logits[n] as there. */
__device__ __forceinline__ void mc_moe_route_warp(const float *slog, const float *logits, uint32_t n, uint32_t k,
                                                  int norm, int shexp, int32_t *sel, float *w) {
    __shared__ float wsl[32];
    const uint32_t lane = threadIdx.x & 31;
    const float l = lane < n ? slog[lane] : -INFINITY;
    float m = l;
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(MC_FULL, m, o));
    m = __shfl_sync(MC_FULL, m, 0);
    const float ex = lane < n ? expf(l - m) : 0.0f;
    float total = 0.0f;
    total += __shfl_sync(MC_FULL, mc_warp_sum(ex), 0);
    const float pe = ex / total;
    const float key = pe == pe ? pe : -1.0f;
    uint32_t rank = 0;
    for (uint32_t e = 0; e < n; e++) {
        const float q = __shfl_sync(MC_FULL, key, e);
        rank += (q > key || (q == key && e < lane)) ? 1u : 0u;
    }
    if (lane < n && rank < k) {
        sel[rank] = (int32_t)lane;
        wsl[rank] = pe;
    }
    __syncwarp();
    float wt = 0.0f;
    if (norm)
        for (uint32_t j = 0; j < k; j++)
            wt += wsl[j];
    if (lane < k)
        w[lane] = norm ? wsl[lane] / wt : wsl[lane];
    if (shexp && lane == 0)
        w[k] = 1.0f / (1.0f + expf(-__ldcg(logits + n)));
}

#endif
