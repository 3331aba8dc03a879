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

/* The post norm's last block with the norm weights and the residual in registers (issue 27): a
 * thread takes partials threadIdx.x and threadIdx.x + blockDim.x (blocks of 128 threads or more)
 * and, of each, the elements i = p, p + 256, ... (at most MC_PN_CAP: n <= 1024), so the elements it
 * sums it also scales and adds; the tree's last five levels are warp 0's shuffles (the same pairs
 * as the shared-memory levels: lane l < s adds lane l + s). Every operation is mc_rmsnorm_block<1>'s,
 * on the same operands: its bits. What the chain after the ticket saves is the second round trip
 * to L2 (t again, w and out), and four barriers. */
#define MC_PN_CAP 4u
struct mc_pn_regs {
    float w[2][MC_PN_CAP], x[2][MC_PN_CAP];
};

__device__ __forceinline__ bool mc_pn_regs_serve(uint32_t n) {
    return blockDim.x >= MC_NORM_PARTS / 2 && n <= MC_NORM_PARTS * MC_PN_CAP;
}

/* Calls f(r, j, i) for the elements i = p + 256 j (i < n, j < MC_PN_CAP) of this thread's partials
 * p = threadIdx.x + r blockDim.x (p < 256, r < 2). */
template <typename F> __device__ __forceinline__ void mc_pn_each(uint32_t n, F f) {
#pragma unroll
    for (uint32_t r = 0; r < 2; r++) {
        const uint32_t p = threadIdx.x + r * blockDim.x;
#pragma unroll
        for (uint32_t j = 0; j < MC_PN_CAP; j++) {
            const uint32_t i = p + j * MC_NORM_PARTS;
            if (p < MC_NORM_PARTS && i < n)
                f(r, j, i);
        }
    }
}

/* w and out of the elements this thread will scale and add (before the ticket: no other block
 * writes them). */
__device__ __forceinline__ void mc_pn_preload(mc_pn_regs &R, const float *w, const float *out, uint32_t n) {
    mc_pn_each(n, [&](uint32_t r, uint32_t j, uint32_t i) {
        R.w[r][j] = w[i];
        R.x[r][j] = out[i];
    });
}

__device__ __forceinline__ void mc_rmsnorm_add_regs(const float *t, const mc_pn_regs &R, uint32_t n, float eps,
                                                    float *out, float *part, float *bscale) {
    float v[2][MC_PN_CAP];
    mc_pn_each(n, [&](uint32_t r, uint32_t j, uint32_t i) { v[r][j] = __ldcg(t + i); });
#pragma unroll
    for (uint32_t r = 0; r < 2; r++) {
        const uint32_t p = threadIdx.x + r * blockDim.x;
        if (p < MC_NORM_PARTS) {
            float acc = 0.0f;
#pragma unroll
            for (uint32_t j = 0; j < MC_PN_CAP; j++)
                if (p + j * MC_NORM_PARTS < n)
                    acc = __fadd_rn(acc, __fmul_rn(v[r][j], v[r][j]));
            part[p] = acc;
        }
    }
    __syncthreads();
    for (uint32_t s = MC_NORM_PARTS / 2; s > 16; s >>= 1) {
        for (uint32_t p = threadIdx.x; p < s; p += blockDim.x)
            part[p] = __fadd_rn(part[p], part[p + s]);
        __syncthreads();
    }
    if (threadIdx.x < 32) {
        float a = part[threadIdx.x];
#pragma unroll
        for (uint32_t s = 16; s > 0; s >>= 1)
            a = __fadd_rn(a, __shfl_down_sync(0xffffffffu, a, s));
        if (threadIdx.x == 0)
            *bscale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(a, (float)n), eps)));
    }
    __syncthreads();
    const float scale = *bscale;
    mc_pn_each(n, [&](uint32_t r, uint32_t j, uint32_t i) {
        out[i] = __fadd_rn(R.x[r][j], __fmul_rn(__fmul_rn(v[r][j], scale), R.w[r][j]));
    });
}

/* postnorm=fused: the tail of a GEMV grid that wrote y[0 .. n) (each block its rows), called by
 * every thread of every block after its stores. Each block fences its stores and takes a ticket
 * (an integer atomic); the block with the last ticket, which then sees every block's rows, runs
 * mc_rmsnorm_block<1>: pn.x[i] += RMSNorm(y)[i] * pn.w[i] (mc_op_rmsnorm_add's bits), and resets
 * the ticket for the next launch (the kernel boundary orders it). */
__device__ __forceinline__ void mc_post_norm_last(const mc_post_args &pn, const float *y, uint32_t n) {
    __shared__ float part[MC_NORM_PARTS];
    __shared__ uint32_t last;
    __shared__ float bscale;
    const bool regs = mc_pn_regs_serve(n);
    mc_pn_regs R;
    if (regs)
        mc_pn_preload(R, pn.w, pn.x, n);
    __threadfence(); /* this thread's rows are visible device-wide before the ticket counts them */
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(pn.ticket, 1u) == gridDim.x * gridDim.y * gridDim.z - 1 ? 1u : 0u;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    if (regs)
        mc_rmsnorm_add_regs(y, R, n, pn.eps, pn.x, part, &bscale);
    else
        mc_rmsnorm_block<1>(y, pn.w, n, pn.eps, pn.x, part);
    if (threadIdx.x == 0)
        *pn.ticket = 0u;
}

/* postnorm=prologue's weights before the wait: the post norm's pro.w and the reader's own norm_w
 * (NULL: none) into ws and nws (shared memory, n floats each) by 16-byte cp.async copies, issued
 * before griddepcontrol.wait (weights: no kernel of the step writes them). Read after the wait, the
 * reader's norm weights were a round trip of their own on every launch's chain, asked for only once
 * x_new was staged. mc_pro_wfetch_ok: whether the copies can be made (n a multiple of 4 and at most
 * MC_PRO_COLS, both sources 16-byte aligned): one answer for the whole block. mc_pro_wfetch_wait,
 * after the wait: each thread's copies land, then a barrier gives them to every thread. The same
 * floats, wherever they are read from: the bits do not change. */
__device__ __forceinline__ bool mc_pro_wfetch_ok(const mc_pro_args &pro, const float *norm_w, uint32_t n) {
    return n % 4 == 0 && n <= MC_PRO_COLS && ((uintptr_t)pro.w & 15u) == 0 && ((uintptr_t)norm_w & 15u) == 0;
}
__device__ __forceinline__ void mc_pro_wfetch(const mc_pro_args &pro, const float *norm_w, uint32_t n, float *ws,
                                              float *nws) {
    for (uint32_t i = 4 * threadIdx.x; i < n; i += 4 * blockDim.x) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((uint32_t)__cvta_generic_to_shared(ws + i)),
                     "l"(pro.w + i)
                     : "memory");
        if (norm_w)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((uint32_t)__cvta_generic_to_shared(nws + i)),
                         "l"(norm_w + i)
                         : "memory");
    }
}
__device__ __forceinline__ void mc_pro_wfetch_wait(void) {
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
}
/* A prologue reader's two sides of it. Before the wait: the copies into buf (2 MC_PRO_COLS floats,
 * the reader's own array: pro.w's, then norm_w's when NORM) where they can be made; returns buf, or
 * NULL (both then read from global memory). After the wait (ws: what start returned): the copies
 * landed for every thread, and norm_w points at its copy. */
template <int NORM>
__device__ __forceinline__ const float *mc_pro_wfetch_start(const mc_pro_args &pro, const float *norm_w, uint32_t n,
                                                            float *buf) {
    if (!mc_pro_wfetch_ok(pro, NORM ? norm_w : NULL, n))
        return NULL;
    mc_pro_wfetch(pro, NORM ? norm_w : NULL, n, buf, buf + MC_PRO_COLS);
    return buf;
}
template <int NORM> __device__ __forceinline__ void mc_pro_wfetch_land(const float *ws, const float *&norm_w) {
    if (!ws)
        return;
    mc_pro_wfetch_wait();
    if (NORM)
        norm_w = ws + MC_PRO_COLS;
}

/* postnorm=prologue's scale 1 / sqrt(sum po^2 / n + eps), by each lane of the calling warp (a whole
 * warp), from po in shared memory (pos, n <= MC_PRO_COLS floats): partial p (< 256) sums po[i]^2
 * over i = p + 256 j in increasing j; the tree adds partials p and p + s at s = 128, 64, 32 (lane t
 * holds partials t + 32 k, k < 8, so each of those pairs is within one lane: k and k + 4, k + 2,
 * k + 1), then lane l adds lane l + s at s = 16 .. 1 (__shfl_down), lane 0's sum is the norm's:
 * every operation mc_rmsnorm_add_regs's, on the same operands. */
__device__ __forceinline__ float mc_pro_scale(const float *pos, uint32_t n, float eps) {
    const uint32_t lane = threadIdx.x & 31;
    constexpr uint32_t K = MC_NORM_PARTS / 32, J = MC_PRO_COLS / MC_NORM_PARTS;
    float P[K];
#pragma unroll
    for (uint32_t k = 0; k < K; k++) {
        float acc = 0.0f;
#pragma unroll
        for (uint32_t j = 0; j < J; j++) {
            const uint32_t i = lane + 32 * k + MC_NORM_PARTS * j;
            if (i < n) {
                const float v = pos[i];
                acc = __fadd_rn(acc, __fmul_rn(v, v));
            }
        }
        P[k] = acc;
    }
#pragma unroll
    for (uint32_t k = 0; k < 4; k++) /* s = 128 */
        P[k] = __fadd_rn(P[k], P[k + 4]);
#pragma unroll
    for (uint32_t k = 0; k < 2; k++) /* s = 64 */
        P[k] = __fadd_rn(P[k], P[k + 2]);
    float a = __fadd_rn(P[0], P[1]); /* s = 32 */
#pragma unroll
    for (uint32_t s = 16; s > 0; s >>= 1)
        a = __fadd_rn(a, __shfl_down_sync(0xffffffffu, a, s));
    a = __shfl_sync(0xffffffffu, a, 0);
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(a, (float)n), eps)));
}

/* postnorm=prologue: x_new = x + RMSNorm(po) * w into xs (shared memory, n floats), by every thread
 * of a block of 256 threads or more, n <= MC_PRO_COLS (1024), after the block's wait (po and x come
 * from earlier kernels); block (0, 0, 0) also stores it to out (if not NULL). Every operation is
 * mc_rmsnorm_add_regs's on the same operands, so x_new has the bits that postnorm=fused and launch
 * store (the scale: mc_pro_scale). The block reads po, x and w once (each thread its
 * elements, all loads at once), po through shared memory (pos, n floats) to every warp, which
 * computes the scale itself: two barriers. (Every warp reading all of po from L2 instead measured
 * 2-3 us a launch: a grid's warps on the same few lines.) ws: the post norm's
 * weights in shared memory (mc_pro_wfetch), or NULL to read pro.w. */
__device__ __forceinline__ void mc_pro_stage(const mc_pro_args &pro, uint32_t n, float *xs, float *pos,
                                             const float *ws = NULL) {
    constexpr uint32_t E = MC_PRO_COLS / 256; /* elements a thread takes (blocks of 256 threads or more) */
    float ex[E], ew[E], ep[E];
#pragma unroll
    for (uint32_t e = 0; e < E; e++) {
        const uint32_t i = threadIdx.x + e * blockDim.x;
        if (i < n) {
            ex[e] = __ldcg(pro.x + i);
            ew[e] = ws ? ws[i] : __ldg(pro.w + i);
            ep[e] = __ldcg(pro.po + i);
        }
    }
#pragma unroll
    for (uint32_t e = 0; e < E; e++) {
        const uint32_t i = threadIdx.x + e * blockDim.x;
        if (i < n)
            pos[i] = ep[e];
    }
    __syncthreads(); /* po in shared memory */
    const float scale = mc_pro_scale(pos, n, pro.eps);
    const bool first = blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && pro.out;
#pragma unroll
    for (uint32_t e = 0; e < E; e++) {
        const uint32_t i = threadIdx.x + e * blockDim.x;
        if (i < n) {
            const float o = __fadd_rn(ex[e], __fmul_rn(__fmul_rn(ep[e], scale), ew[e]));
            xs[i] = o;
            if (first)
                pro.out[i] = o;
        }
    }
    __syncthreads(); /* xs complete */
}

/* postnorm=prologue by the staging threads (no key: the same bits as mc_pro_stage, which it replaces):
 * thread t < n / 16 of the block loads x and po of columns [16 t, 16 t + 16) from L2 itself, puts its
 * po into pos for the scale, and after one barrier computes its 16 columns of x_new into v, each
 * element mc_pro_stage's expression on the same operands; block (0, 0, 0) stores them to out (if
 * not NULL). So x_new never goes through shared memory, and the barrier that gave the weights'
 * copies to every thread is the one that gives po: two barriers fewer than mc_pro_stage and
 * mc_pro_wfetch_land. Called by every thread after the wait, in place of both, where
 * mc_pro_direct_ok: the weights' copies made (ws: mc_pro_wfetch_start's buffer, post weights
 * first), n a multiple of 16 and at most MC_PRO_COLS (so n / 16 <= 64 threads: the first staging
 * warps), x, po and out 16-byte aligned. A warp with no such thread skips the scale. */
__device__ __forceinline__ bool mc_pro_direct_ok(const mc_pro_args &pro, uint32_t n, const float *ws) {
    return ws && n % 16 == 0 && n <= MC_PRO_COLS &&
           (((uintptr_t)pro.x | (uintptr_t)pro.po | (uintptr_t)pro.out) & 15u) == 0;
}
__device__ __forceinline__ void mc_pro_direct(const mc_pro_args &pro, uint32_t n, const float *ws, float *pos,
                                              float (&v)[16]) {
    const uint32_t t = threadIdx.x, nt = n / 16;
    float p[16];
    asm volatile("cp.async.wait_all;" ::: "memory"); /* this thread's weight copies (the barrier: everyone's) */
    if (t < nt) {
#pragma unroll
        for (uint32_t i = 0; i < 4; i++) {
            const float4 a = __ldcg((const float4 *)(pro.x + 16 * t) + i),
                         b = __ldcg((const float4 *)(pro.po + 16 * t) + i);
            v[4 * i] = a.x, v[4 * i + 1] = a.y, v[4 * i + 2] = a.z, v[4 * i + 3] = a.w;
            p[4 * i] = b.x, p[4 * i + 1] = b.y, p[4 * i + 2] = b.z, p[4 * i + 3] = b.w;
        }
#pragma unroll
        for (uint32_t i = 0; i < 4; i++)
            ((float4 *)(pos + 16 * t))[i] = make_float4(p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3]);
    }
    __syncthreads(); /* po in shared memory, and every thread's weight copies */
    if ((t & ~31u) >= nt)
        return;
    const float scale = mc_pro_scale(pos, n, pro.eps);
    if (t >= nt)
        return;
    const bool first = blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && pro.out;
#pragma unroll
    for (uint32_t i = 0; i < 16; i++)
        v[i] = __fadd_rn(v[i], __fmul_rn(__fmul_rn(p[i], scale), ws[16 * t + i]));
    if (first)
#pragma unroll
        for (uint32_t i = 0; i < 4; i++)
            ((float4 *)(pro.out + 16 * t))[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
}

/* A prologue reader's x_new after the wait: mc_pro_direct where mc_pro_direct_ok and the reader
 * allows it (direct: its staging takes thread t's 16 columns from v; norm_w then points at its
 * copy), else mc_pro_wfetch_land and mc_pro_stage (x then points at x_new in shared memory).
 * Returns whether it took the direct path. ws: mc_pro_wfetch_start's buffer (or NULL). Its shared
 * arrays are this function's: one pair a kernel, which gemv_qkv2's two parts share (a block runs
 * one part). Measured with the arrays in each body instead: gemma3-270m 1.1% slower on an H100
 * (bench/gpu/NOTES.md, thirty-ninth session). */
template <int NORM>
__device__ __forceinline__ bool mc_pro_begin(const mc_pro_args &pro, uint32_t n, const float *ws, bool allow,
                                             const float *&x, const float *&norm_w, float (&v)[16]) {
    __shared__ __align__(16) float xpro[MC_PRO_COLS];
    __shared__ __align__(16) float ppro[MC_PRO_COLS];
    if (allow && mc_pro_direct_ok(pro, n, ws)) {
        if (NORM)
            norm_w = ws + MC_PRO_COLS; /* its copy, read by plain loads */
        mc_pro_direct(pro, n, ws, ppro, v);
        return true;
    }
    mc_pro_wfetch_land<NORM>(ws, norm_w); /* norm_w: its copy, read by plain loads */
    mc_pro_stage(pro, n, xpro, ppro, ws);
    x = xpro;
    return false;
}

#endif
