/* moe_router.cu: the fused router of a mixture of experts (the arm's moe_fuse bits 1, 4, 16 and 256):
 * the router GEMV with the ffn norm fused and its top k in one launch, on a ticket or on one
 * thread-block cluster (cuda_forward.cu's mc_moe_ffn_fused). Each computes the unfused router GEMV's
 * and moe_route's bits. Split from gemv_moe.cu (the kernels' PTX the same operations).
 * Measurements: bench/gpu/NOTES.md. */
#include <cooperative_groups.h>

#include "cuda_common.cuh"
#include "gemv_flat.cuh"
#include "moe_route.cuh"

namespace cg = cooperative_groups;

MC_DYNAMIC_SMEM_ANCHOR(mc_smem_anchor_moe_router)

/* moe_fuse bit 1: the router's GEMV (F32/F16/BF16, the ffn norm fused) and its top k in one
 * launch. Each block is one row group of 4 experts' logits, its 4 warps the 4 column parts (the
 * split mc_gemv_ksplit gives any matrix of at most 2112 rows, so the unfused router's): the
 * arithmetic of gemv_rowgroup and gemv_persistent, hence the logits' bits. Each block's writer
 * fences its logits and takes a ticket (an integer atomic, no float); the block with the last
 * ticket, which then sees every block's logits, runs moe_route.cuh's mc_moe_route_block (the
 * moe_route kernel's code: the same ids and weights) and resets the ticket for the next launch.
 * With po (moe_fuse bit 4, granite): the router reads x' = x + po * po_scale (moe_scale's residual
 * add, each element rounded as it rounds), and the last block writes x' into x, after every block
 * has read x. Per call: reads the router (n x cols), x, po and norm_w; writes n logits, sel, w. */
template <uint32_t T, int NC>
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS)
    moe_router(const mc_matrix w, float *x, const float *po, float po_scale, const float *norm_w, float eps,
               float *logits, uint32_t k, int wnorm, int shexp, int32_t *sel, float *wts, uint32_t *ticket) {
    __shared__ float red[MC_GEMV_WARPS][MC_GEMV_ROWS + 1];
    __shared__ uint32_t last;
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r0 = blockIdx.x * MC_GEMV_ROWS;
    float d[MC_GEMV_ROWS], ss = 0.0f;
    mc_rows_dot_flat<T, 1, MC_GEMV_WARPS, NC>(w, r0, x, po, po_scale, norm_w, lane, warp, MC_TRIGGER_GEMV, d, ss);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < MC_GEMV_ROWS; r++)
            red[warp][r] = d[r];
        red[warp][MC_GEMV_ROWS] = ss;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mc_parts_scale<MC_GEMV_WARPS, 1>(red, d, ss, w.cols, eps);
        mc_rows_store<0>(d, r0, w.rows, NULL, NULL, logits);
        __threadfence(); /* the logits reach every block before the ticket does */
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    if (po)
        for (uint32_t i = threadIdx.x; i < w.cols; i += blockDim.x)
            x[i] = __fadd_rn(x[i], __fmul_rn(po[i], po_scale));
    mc_moe_route_block<32 * MC_GEMV_WARPS>(logits, w.rows, k, wnorm, shexp, sel, wts);
    if (threadIdx.x == 0)
        *ticket = 0u;
}

#define MC_ROUTER_MAX (32u * MC_GEMV_WARPS) /* experts the fused router serves: one thread each */

/* moe_fuse bit 16 (with bit 1): the fused router on one thread-block cluster, without the ticket.
 * Block b of the cluster holds GPB row groups (4 warps each: the group's 4 column parts, as
 * moe_router's block), group g = b GPB + warp / 4; each group's arithmetic is moe_router's (its
 * warps' mc_rows_dot_flat, the parts added in order by the group's first thread, the scale, the
 * store), so the same logits. Then a cluster barrier (arrive.release, wait.acquire: every block's
 * logits and its reads of x are done and visible to the cluster) and block 0 alone runs what the
 * ticket's last block ran: granite's x' into x, mc_moe_route_block. One barrier a few hundred
 * nanoseconds long in place of a fence, an atomic and the last block's wait on them.
 * With ds (moe_fuse bit 256): each group's first thread also pushes its logits into block 0's
 * shared memory (distributed shared memory: st.shared::cluster, made visible to block 0 by the
 * barrier's release and acquire) and stores them to global memory only after the barrier, so the
 * barrier waits on no store to L2; block 0 routes from its shared memory, not back through L2:
 * where n <= 32 its warp 0 alone (mc_moe_route_warp, no block barrier) while its other warps write
 * granite's x', elsewhere mc_moe_route_block. The same values in the same operations: the same
 * logits, ids, weights and x'. A cluster barrier's arrive at entry and its wait before the first
 * push make sure every block of the cluster has started before its shared memory is written.
 * Bit 512 launches it as one block of up to 8 groups where n <= 32 (mc_router_cl_shape): a cluster
 * of one, whose barriers span one multiprocessor. */
template <uint32_t T, int NC, int GPB>
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS * GPB)
    moe_router_cl(const mc_matrix w, float *x, const float *po, float po_scale, const float *norm_w, float eps,
                  float *logits, uint32_t k, int wnorm, int shexp, int32_t *sel, float *wts, int ds) {
    __shared__ float red[MC_GEMV_WARPS * GPB][MC_GEMV_ROWS + 1];
    __shared__ __align__(16) float slog[32 * MC_GEMV_WARPS * GPB]; /* block 0's: the logits, with ds */
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % MC_GEMV_WARPS;
    if (ds) /* the first phase of the cluster barrier: every block has started once it completes */
        asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    const uint32_t gl = warp / MC_GEMV_WARPS, r0 = (blockIdx.x * GPB + gl) * MC_GEMV_ROWS;
    const bool live = r0 < w.rows;
    float d[MC_GEMV_ROWS], ss = 0.0f;
    if (live)
        mc_rows_dot_flat<T, 1, MC_GEMV_WARPS, NC>(w, r0, x, po, po_scale, norm_w, lane, part, MC_TRIGGER_GEMV, d, ss);
    else
        mc_wait_prior_grid(MC_TRIGGER_GEMV);
    if (lane == 0 && live) {
#pragma unroll
        for (int r = 0; r < MC_GEMV_ROWS; r++)
            red[warp][r] = d[r];
        red[warp][MC_GEMV_ROWS] = ss;
    }
    __syncthreads();
    if (live && part == 0 && lane == 0) { /* the group's first thread: moe_router's thread 0 */
        mc_parts_scale<MC_GEMV_WARPS, 1>(red + gl * MC_GEMV_WARPS, d, ss, w.cols, eps);
        if (!ds)
            mc_rows_store<0>(d, r0, w.rows, NULL, NULL, logits);
    }
    if (ds) {
        asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
        if (live && part == 0 && lane == 0) {
            float *s0 = cg::this_cluster().map_shared_rank(slog, 0);
#pragma unroll
            for (int r = 0; r < MC_GEMV_ROWS; r++)
                if (r0 + r < w.rows)
                    s0[r0 + r] = d[r];
        }
    }
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (ds && live && part == 0 && lane == 0) /* the logits' global copy, off the barrier's path */
        mc_rows_store<0>(d, r0, w.rows, NULL, NULL, logits);
    if (blockIdx.x != 0) /* one cluster: block 0 is its rank 0 */
        return;
    if (ds && w.rows <= 32) {
        if (warp == 0)
            mc_moe_route_warp(slog, logits, w.rows, k, wnorm, shexp, sel, wts);
        else if (po)
            for (uint32_t i = threadIdx.x - 32; i < w.cols; i += blockDim.x - 32)
                x[i] = __fadd_rn(x[i], __fmul_rn(po[i], po_scale));
        return;
    }
    if (po)
        for (uint32_t i = threadIdx.x; i < w.cols; i += blockDim.x)
            x[i] = __fadd_rn(x[i], __fmul_rn(po[i], po_scale));
    mc_moe_route_block<32 * MC_GEMV_WARPS * GPB>(logits, w.rows, k, wnorm, shexp, sel, wts, ds ? slog : NULL);
}

/* The cluster router's blocks and groups a block for n experts: at most 8 blocks (a portable
 * cluster), 1, 2 or 4 groups each; with one (moe_fuse bit 512, n <= 32) a single block of 1, 2, 4
 * or 8 groups (up to 32 warps, 8 only where a lane holds at most 2 chunks: NC 4 spills at 1024
 * threads), the cluster a block alone. */
static void mc_router_cl_shape(uint32_t n, int one, int nc, uint32_t *blocks, uint32_t *gpb) {
    const uint32_t groups = (n + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS;
    if (one && (groups <= 4 || (groups <= 8 && nc <= 2))) {
        *gpb = groups <= 1 ? 1 : groups <= 2 ? 2 : groups <= 4 ? 4 : 8;
        *blocks = 1;
        return;
    }
    const uint32_t g = (groups + 7) / 8;
    *gpb = g <= 1 ? 1 : g <= 2 ? 2 : 4;
    *blocks = (groups + *gpb - 1) / *gpb;
}

template <uint32_t T, int NC, int GPB>
static cudaError_t mc_moe_router_cl_t(const mc_config *c, const mc_matrix *w, float *x, const float *po, float po_scale,
                                      const float *norm_w, float eps, float *logits, uint32_t k, int wnorm, int shexp,
                                      int32_t *sel, float *wts, uint32_t blocks, cudaStream_t st) {
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(32 * MC_GEMV_WARPS * GPB);
    cfg.stream = st;
    cudaLaunchAttribute attr[2];
    mc_launch_attrs_cluster(&cfg, attr, blocks, c->pdl != 0);
    const int ds = (c->moe_fuse & MC_MOE_FUSE_DSMEM) != 0;
    cudaError_t e = cudaLaunchKernelEx(&cfg, moe_router_cl<T, NC, GPB>, *w, x, po, po_scale, norm_w, eps, logits, k,
                                       wnorm, shexp, sel, wts, ds);
    return e != cudaSuccess ? e : cudaGetLastError();
}

template <uint32_t T, int NC>
static cudaError_t mc_moe_router_cl(const mc_config *c, const mc_matrix *w, float *x, const float *po, float po_scale,
                                    const float *norm_w, float eps, float *logits, uint32_t k, int wnorm, int shexp,
                                    int32_t *sel, float *wts, cudaStream_t st) {
    uint32_t blocks, gpb;
    mc_router_cl_shape(w->rows, (c->moe_fuse & MC_MOE_FUSE_ONEBLOCK) != 0, NC, &blocks, &gpb);
#define MC_RC(G)                                                                                                       \
    mc_moe_router_cl_t<T, NC, G>(c, w, x, po, po_scale, norm_w, eps, logits, k, wnorm, shexp, sel, wts, blocks, st)
    switch (gpb) {
    case 1: return MC_RC(1);
    case 2: return MC_RC(2);
    case 4: return MC_RC(4);
    default:
        if constexpr (NC <= 2)
            return MC_RC(8);
        else
            return cudaErrorInvalidValue; /* mc_router_cl_shape gives no 8 at NC 4 */
    }
#undef MC_RC
}

int mc_moe_router_serves(const mc_matrix *w) {
    return (w->type == MEMRA_TYPE_F32 || w->type == MEMRA_TYPE_F16 || w->type == MEMRA_TYPE_BF16) && w->rows > 0 &&
           w->rows <= MC_ROUTER_MAX && mc_gemv_ksplit(w->rows) == MC_GEMV_WARPS &&
           mc_flat_nc(w->type, w->cols, MC_GEMV_WARPS) != 0 && mc_flat_fits(w->type, w->rows, w->cols);
}

template <uint32_t T, int NC>
static cudaError_t mc_moe_router_t(const mc_config *c, const mc_matrix *w, float *x, const float *po, float po_scale,
                                   const float *norm_w, float eps, float *logits, uint32_t k, int wnorm, int shexp,
                                   int32_t *sel, float *wts, uint32_t *ticket, cudaStream_t st) {
    if (c->moe_fuse & MC_MOE_FUSE_CLUSTER)
        return mc_moe_router_cl<T, NC>(c, w, x, po, po_scale, norm_w, eps, logits, k, wnorm, shexp, sel, wts, st);
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((w->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS);
    cfg.blockDim = dim3(32 * MC_GEMV_WARPS);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    cudaError_t e = cudaLaunchKernelEx(&cfg, moe_router<T, NC>, *w, x, po, po_scale, norm_w, eps, logits, k, wnorm,
                                       shexp, sel, wts, ticket);
    return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t mc_moe_router(const mc_config *c, const mc_matrix *w, float *x, const float *po, float po_scale,
                          const float *norm_w, float eps, float *logits, uint32_t k, int wnorm, int shexp, int32_t *sel,
                          float *wts, uint32_t *ticket, cudaStream_t st) {
    if (!mc_moe_router_serves(w) || !norm_w || !ticket || k == 0 || k > w->rows || k > MEMRA_MAX_EXPERTS_USED ||
        w->cols % 4 != 0)
        return cudaErrorInvalidValue;
#define MC_R(T, NC)                                                                                                    \
    mc_moe_router_t<T, NC>(c, w, x, po, po_scale, norm_w, eps, logits, k, wnorm, shexp, sel, wts, ticket, st)
#define MC_R_NC(T)                                                                                                     \
    switch (mc_flat_nc(w->type, w->cols, MC_GEMV_WARPS)) {                                                             \
    case 1: return MC_R(T, 1);                                                                                         \
    case 2: return MC_R(T, 2);                                                                                         \
    default: return MC_R(T, 4);                                                                                        \
    }
    switch (w->type) {
    case MEMRA_TYPE_F32: MC_R_NC(MEMRA_TYPE_F32)
    case MEMRA_TYPE_F16: MC_R_NC(MEMRA_TYPE_F16)
    default: MC_R_NC(MEMRA_TYPE_BF16)
    }
#undef MC_R_NC
#undef MC_R
}

/* "moe_router" for a kernel of this file (ktrace's and the op families' names), else NULL. */
const char *mc_moe_router_family(const void *f) {
#define MC_ROUTER_NC(T) (const void *)moe_router<T, 1>, (const void *)moe_router<T, 2>, (const void *)moe_router<T, 4>
    static const void *const routers[] = {MC_ROUTER_NC(MEMRA_TYPE_F32), MC_ROUTER_NC(MEMRA_TYPE_F16),
                                          MC_ROUTER_NC(MEMRA_TYPE_BF16)};
#undef MC_ROUTER_NC
    for (size_t i = 0; i < sizeof routers / sizeof routers[0]; i++)
        if (routers[i] == f)
            return "moe_router";
#define MC_ROUTER_CL_G(T, NC)                                                                                          \
    (const void *)moe_router_cl<T, NC, 1>, (const void *)moe_router_cl<T, NC, 2>, (const void *)moe_router_cl<T, NC, 4>
#define MC_ROUTER_CL(T)                                                                                                \
    MC_ROUTER_CL_G(T, 1), MC_ROUTER_CL_G(T, 2), MC_ROUTER_CL_G(T, 4), (const void *)moe_router_cl<T, 1, 8>,              \
        (const void *)moe_router_cl<T, 2, 8> /* bit 512's one block */
    static const void *const cl_routers[] = {MC_ROUTER_CL(MEMRA_TYPE_F32), MC_ROUTER_CL(MEMRA_TYPE_F16),
                                             MC_ROUTER_CL(MEMRA_TYPE_BF16)}; /* moe_fuse bit 16 */
#undef MC_ROUTER_CL
#undef MC_ROUTER_CL_G
    for (size_t i = 0; i < sizeof cl_routers / sizeof cl_routers[0]; i++)
        if (cl_routers[i] == f)
            return "moe_router";
    return NULL;
}
