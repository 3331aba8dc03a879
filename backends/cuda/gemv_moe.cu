/* gemv_moe.cu: the mixture-of-experts GEMVs of F32/F16/BF16/Q8_0 stacks (the experts' row-group
 * GEMV, the flat and streamed gate/up variants, and the experts' down GEMV with the weighted
 * combination; the fused router is moe_router.cu's), the arm's moe_fuse key choosing among them
 * (cuda_forward.cu's mc_moe_ffn). Each computes the dense row-group GEMV's arithmetic
 * (gemv_body.cuh) on the chosen expert's rows, so the folds give the unfused launches' bits.
 * Split from gemv.cu (the kernels' PTX the same operations). Measurements: bench/gpu/NOTES.md. */
#include <cooperative_groups.h>

#include "cuda_common.cuh"
#include "gemv_body.cuh"
#include "gemv_quant.h"
#include "gemv_flat.cuh"
#include "moe_route.cuh"

namespace cg = cooperative_groups;

MC_DYNAMIC_SMEM_ANCHOR(mc_smem_anchor_gemv_moe)

/* Expert e's rows_e rows of an F32/F16/BF16/Q8_0 stack holding experts [e0, e1), e among them:
 * the matrix gemv_experts, gemv_experts_flat and gemv_experts_combine run on. */
template <uint32_t T>
__device__ __forceinline__ mc_matrix mc_expert_rows(const mc_matrix &stack, uint32_t e, uint32_t e0, uint32_t rows_e) {
    mc_matrix w = stack;
    const size_t first = (size_t)(e - e0) * rows_e;
    w.rows = rows_e;
    w.data = (char *)stack.data + first * stack.stride * (16 / mc_elems<T>::n);
    if (T == MEMRA_TYPE_Q8_0)
        w.scales = stack.scales + first * (stack.cols / MEMRA_Q8_0_BLOCK);
    return w;
}

/* A slot whose expert this rank does not hold (or no expert): zeros for the warp's row group. */
template <int SWIGLU>
__device__ __forceinline__ void mc_expert_zeros(bool live, uint32_t part, uint32_t lane, uint32_t r0, uint32_t rows_e,
                                                float *yj) {
    const float z[MC_GEMV_ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live && part == 0 && lane == 0)
        mc_rows_store<SWIGLU>(z, r0, rows_e, NULL, NULL, yj);
}

cudaError_t mc_gemv_moe_trigger_addr(void **p) { return cudaGetSymbolAddress(p, mc_trigger_mask); }

/* ---- gemv_experts: the row-group GEMV of a mixture of experts' chosen experts ---------------- */

/* Blocks (x: row groups of one expert, y: slot j) of the row-group GEMV above, on expert sel[j]'s
 * rows of a stack (expert e's rows_e rows start at row (e - e0) rows_e: the stack holds experts
 * [e0, e1), all of them without expert ranks), with the input x + j ldx and the output y + j ldy.
 * The ids are read from device memory (the router's kernel wrote them), so one launch serves any
 * choice and a captured graph every token; only the chosen experts' rows are read. An id outside
 * [e0, e1) (an expert another rank holds) writes zeros. Each row group's arithmetic is
 * gemv_rowgroup's (mc_rows_dot, mc_rows_store): a chosen expert's outputs have the bits of the
 * dense row-group GEMV on that expert alone. Launched in plain stream order (the ids come from
 * the kernel just before; with pdl it waits for it first). Per call: reads k x rows_e weight rows (and Q8_0 block scales), x
 * (k slices, or one with ldx 0) and norm_w; writes k slices of rows_e (rows_e / 2 with a GLU). */
template <uint32_t T, int SWIGLU, int NORM, int KS>
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS, T == MEMRA_TYPE_Q8_0 ? 3 : 4) /* Q8_0: 4 spilled */
    gemv_experts(const mc_matrix stack, uint32_t rows_e, const int32_t *sel, uint32_t e0, uint32_t e1, const float *x,
                 uint32_t ldx, const float *norm_w, float eps, float *y, uint32_t ldy, int early) {
    __shared__ float red[MC_GEMV_WARPS][MC_GEMV_ROWS + 1];
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % KS;
    const uint32_t r0 = (blockIdx.x * (MC_GEMV_WARPS / KS) + warp / KS) * MC_GEMV_ROWS;
    /* the ids come from the kernel just before: nothing is read before its results are complete
     * (with pdl this launch only overlaps that kernel's drain) */
    mc_wait_prior_grid(0);
    if (early) /* moe_fuse bit 32: the next launch may start (its pre-wait part reads only older data) */
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const uint32_t j = blockIdx.y, e = (uint32_t)sel[j]; /* the same for the whole block */
    float *yj = y + (size_t)j * ldy;
    const bool live = r0 < rows_e;
    if (e < e0 || e >= e1) { /* not this rank's expert (or no expert): zeros in its slice */
        mc_expert_zeros<SWIGLU>(live, part, lane, r0, rows_e, yj);
        return;
    }
    mc_matrix w = mc_expert_rows<T>(stack, e, e0, rows_e);
    const float *xj = x + (size_t)j * ldx;
    float d[MC_GEMV_ROWS], ss = 0.0f;
    if (live)
        mc_rows_dot<T, NORM, KS>(w, r0, xj, norm_w, lane, part, d, ss);
    mc_rowgroup_finish<SWIGLU, NORM, KS>(red, warp, lane, part, live, d, ss, w.cols, eps, r0, rows_e, NULL, NULL, yj);
}

template <uint32_t T, int SWIGLU, int NORM, int KS>
static cudaError_t mc_gemv_experts_t(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                     uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                     const float *norm_w, float eps, float *y, uint32_t ldy, cudaStream_t st) {
    const uint32_t per_block = MC_GEMV_WARPS / KS * MC_GEMV_ROWS;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((rows_e + per_block - 1) / per_block, k);
    cfg.blockDim = dim3(32 * MC_GEMV_WARPS);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    const int early = SWIGLU && NORM && (c->moe_fuse & MC_MOE_FUSE_EARLY) != 0; /* the gate/up launch */
    cudaError_t e = cudaLaunchKernelEx(&cfg, gemv_experts<T, SWIGLU, NORM, KS>, *w, rows_e, sel, e0, e1, x, ldx, norm_w,
                                       eps, y, ldy, early);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

template <int SWIGLU, int NORM, int KS>
static cudaError_t mc_gemv_experts_ks(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel, uint32_t k, uint32_t e0,
                                      uint32_t e1, const float *x, uint32_t ldx, const float *norm_w, float eps,
                                      float *y, uint32_t ldy, cudaStream_t st) {
#define MC_E(T) mc_gemv_experts_t<T, SWIGLU, NORM, KS>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st)
    switch (w->type) {
    case MEMRA_TYPE_F32: return MC_E(MEMRA_TYPE_F32);
    case MEMRA_TYPE_F16: return MC_E(MEMRA_TYPE_F16);
    case MEMRA_TYPE_BF16: return MC_E(MEMRA_TYPE_BF16);
    case MEMRA_TYPE_Q8_0: return MC_E(MEMRA_TYPE_Q8_0);
    default: return cudaErrorInvalidValue;
    }
#undef MC_E
}

/* The rows of all k experts' GEMV (saturated): the column split of gemv_experts is
 * mc_gemv_ksplit of it. */
static uint32_t mc_experts_rows(uint32_t rows_e, uint32_t k) {
    const uint64_t r = (uint64_t)rows_e * k;
    return r < 0xffffffffu ? (uint32_t)r : 0xffffffffu;
}

template <int SWIGLU, int NORM>
static cudaError_t mc_gemv_experts_n(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel, uint32_t k, uint32_t e0,
                                     uint32_t e1, const float *x, uint32_t ldx, const float *norm_w, float eps,
                                     float *y, uint32_t ldy, cudaStream_t st) {
    /* the column split of a GEMV of all k experts' rows: a function of the shapes alone */
    switch (mc_gemv_ksplit(mc_experts_rows(rows_e, k))) {
    case 1: return mc_gemv_experts_ks<SWIGLU, NORM, 1>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
    case 2: return mc_gemv_experts_ks<SWIGLU, NORM, 2>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
    default: return mc_gemv_experts_ks<SWIGLU, NORM, 4>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
    }
}

/* The gate/up launch of moe_fuse bit 8 (gemv_experts_flat, below): cudaErrorNotSupported where it
 * does not serve the shape (the loop kernel then runs). */
static cudaError_t mc_gemv_experts_flat(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                        uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                        const float *norm_w, float eps, float *y, uint32_t ldy, cudaStream_t st);
static cudaError_t mc_gemv_experts_stream(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                          uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                          const float *norm_w, float eps, float *y, uint32_t ldy, cudaStream_t st);

cudaError_t mc_gemv_experts(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel, uint32_t k, uint32_t e0,
                            uint32_t e1, const float *x, uint32_t ldx, const float *norm_w, float eps, int glu,
                            float *y, uint32_t ldy, cudaStream_t st) {
    if (k == 0 || k > 65535 || rows_e == 0 || (glu && rows_e % 2) || e1 < e0 || ldx % 4 != 0 ||
        (uint64_t)(e1 - e0) * rows_e > w->rows)
        return cudaErrorInvalidValue;
    switch (w->type) { /* the quantized families beyond Q8_0: their own kernels (gemv_quant.h) */
    case MEMRA_TYPE_Q4_0:
    case MEMRA_TYPE_Q4_1:
    case MEMRA_TYPE_Q5_0:
    case MEMRA_TYPE_Q5_1:
        return mc_gemv_experts_legacy(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, glu, y, ldy, st);
    case MEMRA_TYPE_Q4_K:
    case MEMRA_TYPE_Q5_K:
    case MEMRA_TYPE_Q6_K:
        return mc_gemv_experts_kquant(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, glu, y, ldy, st);
    default: break;
    }
    if (mc_experts_int(c, w, glu)) /* experts=int (int-gu: the gate/up alone) */
        return mc_gemv_experts_q8int(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, glu, y, ldy, st);
    /* the experts' gate/up, one wave: bit 64 for Q8_0 experts, 128 for the 16- and 32-bit float ones */
    if (glu == MC_GLU_SILU && norm_w &&
        (c->moe_fuse & (w->type == MEMRA_TYPE_Q8_0 ? MC_MOE_FUSE_STREAM : MC_MOE_FUSE_STREAM16))) {
        const cudaError_t e = mc_gemv_experts_stream(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
        if (e != cudaErrorNotSupported)
            return e;
    }
    if (glu == MC_GLU_SILU && norm_w && (c->moe_fuse & MC_MOE_FUSE_FLAT)) { /* the experts' gate/up */
        const cudaError_t e = mc_gemv_experts_flat(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
        if (e != cudaErrorNotSupported)
            return e;
    }
    if (glu == MC_GLU_SILU)
        return norm_w ? mc_gemv_experts_n<MC_GLU_SILU, 1>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st)
                      : mc_gemv_experts_n<MC_GLU_SILU, 0>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
    if (glu != MC_GLU_NONE)
        return cudaErrorInvalidValue;
    return norm_w ? mc_gemv_experts_n<MC_GLU_NONE, 1>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st)
                  : mc_gemv_experts_n<MC_GLU_NONE, 0>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
}

/* ---- the fused mixture-of-experts kernels (the arm's moe_fuse key; cuda_forward.cu's mc_moe_ffn) */

#define MC_COMBINE_WARPS 8u /* warps of a fused down/combine block: k x KS of them at most */
/* Blocks a multiprocessor of gemv_experts_flat (its register cap: 65536 / (128 x MC_FLAT_MINB)),
 * the most that compile without spills (ptxas -v): Q8_0 with 4 chunks a lane 4 (128 registers),
 * the others 5 (96). */
#define MC_FLAT_MINB(T, NC) ((T) == MEMRA_TYPE_Q8_0 && (NC) == 4 ? 4 : 5)

/* moe_fuse bit 8: gemv_experts (blocks: x row groups of one expert, y slot j; 4 warps, KS column
 * parts) with mc_rows_dot_flat in place of mc_rows_dot: every chunk of a lane in flight at once
 * and no double buffer, so fewer registers and more blocks a multiprocessor (MC_FLAT_MINB: 30B's
 * Q8_0 gate/up 4 blocks of 128 registers, where the loop kernel takes 165 and 3 blocks; granite's
 * 5 of 96); the same bits (the same chunks in the same order, the same trees and epilogue). */
template <uint32_t T, int SWIGLU, int NORM, int KS, int NC>
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS, MC_FLAT_MINB(T, NC))
    gemv_experts_flat(const mc_matrix stack, uint32_t rows_e, const int32_t *sel, uint32_t e0, uint32_t e1,
                      const float *x, uint32_t ldx, const float *norm_w, float eps, float *y, uint32_t ldy) {
    __shared__ float red[MC_GEMV_WARPS][MC_GEMV_ROWS + 1];
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % KS;
    const uint32_t r0 = (blockIdx.x * (MC_GEMV_WARPS / KS) + warp / KS) * MC_GEMV_ROWS;
    mc_wait_prior_grid(0); /* the ids come from the kernel just before */
    const uint32_t j = blockIdx.y, e = (uint32_t)sel[j];
    float *yj = y + (size_t)j * ldy;
    const bool live = r0 < rows_e;
    if (e < e0 || e >= e1) { /* not this rank's expert (or no expert): zeros in its slice */
        mc_expert_zeros<SWIGLU>(live, part, lane, r0, rows_e, yj);
        return;
    }
    mc_matrix w = mc_expert_rows<T>(stack, e, e0, rows_e);
    float d[MC_GEMV_ROWS], ss = 0.0f;
    if (live)
        mc_rows_dot_flat<T, NORM, KS, NC>(w, r0, x + (size_t)j * ldx, NULL, 0.0f, norm_w, lane, part,
                                          NORM                   ? MC_TRIGGER_GEMV6
                                          : T == MEMRA_TYPE_Q8_0 ? MC_TRIGGER_GEMV6_RES_Q8
                                                                 : MC_TRIGGER_GEMV6_RES,
                                          d, ss);
    mc_rowgroup_finish<SWIGLU, NORM, KS>(red, warp, lane, part, live, d, ss, w.cols, eps, r0, rows_e, NULL, NULL, yj);
}

template <uint32_t T, int KS, int NC>
static cudaError_t mc_gemv_experts_flat_t(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                          uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                          const float *norm_w, float eps, float *y, uint32_t ldy, cudaStream_t st) {
    const uint32_t per_block = MC_GEMV_WARPS / KS * MC_GEMV_ROWS;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((rows_e + per_block - 1) / per_block, k);
    cfg.blockDim = dim3(32 * MC_GEMV_WARPS);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    cudaError_t e = cudaLaunchKernelEx(&cfg, gemv_experts_flat<T, MC_GLU_SILU, 1, KS, NC>, *w, rows_e, sel, e0, e1, x,
                                       ldx, norm_w, eps, y, ldy);
    return e != cudaSuccess ? e : cudaGetLastError();
}

template <uint32_t T, int KS>
static cudaError_t mc_gemv_experts_flat_nc(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                           uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                           const float *norm_w, float eps, float *y, uint32_t ldy, cudaStream_t st) {
    switch (mc_flat_nc(w->type, w->cols, KS)) {
    case 1: return mc_gemv_experts_flat_t<T, KS, 1>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
    case 2: return mc_gemv_experts_flat_t<T, KS, 2>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
    case 4: return mc_gemv_experts_flat_t<T, KS, 4>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
    default: return cudaErrorNotSupported;
    }
}

template <uint32_t T>
static cudaError_t mc_gemv_experts_flat_ks(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                           uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                           const float *norm_w, float eps, float *y, uint32_t ldy, cudaStream_t st) {
    switch (mc_gemv_ksplit(mc_experts_rows(rows_e, k))) { /* gemv_experts' column split */
    case 1: return mc_gemv_experts_flat_nc<T, 1>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
    case 2: return mc_gemv_experts_flat_nc<T, 2>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
    default: return mc_gemv_experts_flat_nc<T, 4>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
    }
}

static cudaError_t mc_gemv_experts_flat(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                        uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                        const float *norm_w, float eps, float *y, uint32_t ldy, cudaStream_t st) {
    if (!mc_flat_fits(w->type, rows_e, w->cols))
        return cudaErrorNotSupported;
#define MC_F(T) mc_gemv_experts_flat_ks<T>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st)
    switch (w->type) {
    case MEMRA_TYPE_F32: return MC_F(MEMRA_TYPE_F32);
    case MEMRA_TYPE_F16: return MC_F(MEMRA_TYPE_F16);
    case MEMRA_TYPE_BF16: return MC_F(MEMRA_TYPE_BF16);
    case MEMRA_TYPE_Q8_0: return MC_F(MEMRA_TYPE_Q8_0);
    default: return cudaErrorNotSupported;
    }
#undef MC_F
}

/* ---- moe_fuse bit 64: the experts' gate/up GEMV streamed by one wave of warps ----------------- */

/* gemv_experts gives each warp one row group and each block one expert's 16 rows: a warp queues
 * two iterations of its group's loads, sums and exits, and 30B's 768 blocks take two waves, so
 * the bytes in flight sag at every group's start and end (an H200 read kernel that learns its 28
 * MB of addresses after the wait moves them in 7.3 us, bench/gpu/cold_read.cu; this launch took
 * 15.8). Here one wave of warps (the blocks that fit, 4 warps each) takes the row groups of every
 * slot, task t = warp + n x warps (slot t / G, group t % G of G = rows_e / 4), and streams them
 * back to back as gemv_persistent_body does: the next iteration's chunks (the next group's first
 * ones at a group's end) are queued while the current ones are summed. The column split must be
 * 1 (each group one warp) and x one vector for every slot (ldx 0, the gate/up's case); x' = x *
 * norm_w and the sum of squares are computed once a block into shared memory (gemv_experts' warps
 * each computed them again, through dependent loads inside the dot loop). A group's arithmetic is
 * gemv_experts' (mc_rows_dot's chunks, order, x' and sum of squares, tail, trees, 1/rms and
 * mc_rows_store): the same bits. A slot whose expert this rank does not hold writes zeros. Per
 * call: reads what gemv_experts reads. */
struct mc_stream_task {
    uint32_t j, r0; /* slot, first row */
    uint32_t first; /* the expert's first row in the stack (w.rows is 32 bits) */
    bool held;
};

/* x' = x * norm_w (x + po * po_scale first, each rounded as mc_x_chunk_po rounds it, where po is
 * given: granite's attention residual) into xs[0 .. cols), every thread of the block a share, and
 * the sum of squares into xs[cols] as every warp of gemv_experts computes it (lane l: chunks l,
 * l + 32, ..., in element order, the tail on lane nfull % 32, then the tree), by warp 0: the
 * stream kernels' x' and 1/rms, the same for every group. The caller's barrier follows. */
template <uint32_t T>
__device__ __forceinline__ void mc_stream_stage(const float *x, const float *po, float po_scale, const float *norm_w,
                                                uint32_t cols, float *xs) {
    constexpr uint32_t E = mc_elems<T>::n;
    const uint32_t lane = threadIdx.x & 31, nfull = cols / E;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x)
        xs[c] = (po ? __fadd_rn(x[c], __fmul_rn(po[c], po_scale)) : x[c]) * norm_w[c];
    if (threadIdx.x < 32) {
        float ss = 0.0f;
        for (uint32_t idx = lane; idx < nfull; idx += 32) {
            float4 xv[E / 4];
            mc_x_chunk_po<T, 1>(x, po, po_scale, norm_w, idx, xv, ss);
        }
        if (nfull * E < cols && lane == (nfull & 31))
            for (uint32_t c = nfull * E; c < cols; c++) {
                const float xc = po ? __fadd_rn(x[c], __fmul_rn(po[c], po_scale)) : x[c];
                ss = fmaf(xc, xc, ss);
            }
        ss = mc_warp_sum(ss);
        if (lane == 0)
            xs[cols] = ss;
    }
}

/* The task loop of the stream kernels: warp wid of nw takes tasks wid, wid + nw, ... of the G x k
 * row groups (slot t / G, group t % G, G = ceil(rows_e / 4)) and streams them back to back (the
 * next iteration's chunks queued while the current ones are summed, across task ends), summing
 * against x' in shared memory (xs, sst its sum of squares: mc_stream_stage) in gemv_experts'
 * order. sel may be device or shared memory. */
template <uint32_t T>
__device__ __forceinline__ void mc_stream_tasks(const mc_matrix &stack, uint32_t rows_e, const int32_t *sel, uint32_t k,
                                                uint32_t e0, uint32_t e1, const float *xs, float sst, float eps,
                                                float *y, uint32_t ldy, uint32_t wid, uint32_t nw) {
    constexpr uint32_t U = MC_GEMV_UNROLL, PER_IT = 32 * U, E = mc_elems<T>::n, EB = 16 / E;
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t G = (rows_e + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS, n_tasks = G * k;
    const uint32_t n_my = wid < n_tasks ? (n_tasks - wid + nw - 1) / nw : 0;
    const uint32_t nfull = stack.cols / E, niter = (nfull + PER_IT - 1) / PER_IT, total = n_my * niter;
    const char *const data = (const char *)stack.data;
    const size_t row_bytes = (size_t)stack.stride * EB, row_scales = stack.cols / MEMRA_Q8_0_BLOCK;
    if (total == 0)
        return;
    auto at = [&](uint32_t n) {
        mc_stream_task tk;
        const uint32_t t = wid + n * nw, e = (uint32_t)sel[t / G];
        tk.j = t / G;
        tk.r0 = t % G * MC_GEMV_ROWS;
        tk.held = e >= e0 && e < e1;
        tk.first = tk.held ? (e - e0) * rows_e : 0;
        return tk;
    };
    uint4 wv[U][MC_GEMV_ROWS];
    uint16_t sv[U][MC_GEMV_ROWS];
    auto load = [&](const mc_stream_task &tk, uint32_t i) {
        if (!tk.held)
            return;
#pragma unroll
        for (uint32_t u = 0; u < U; u++) {
            const uint32_t idx = lane + PER_IT * i + 32 * u;
            if (idx < nfull) {
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                    const size_t row = tk.first + (tk.r0 + r < rows_e ? tk.r0 + r : tk.r0); /* < w.rows */
                    wv[u][r] = __ldcs((const uint4 *)(data + row * row_bytes) + idx);
                    if (T == MEMRA_TYPE_Q8_0)
                        sv[u][r] = __ldg(stack.scales + row * row_scales + idx / 2);
                }
            }
        }
    };
    mc_stream_task lt = at(0), ct = lt; /* the task being loaded, the one being summed */
    load(lt, 0);
    float acc[MC_GEMV_ROWS];
#pragma unroll
    for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
        acc[r] = 0.0f;
    uint32_t n = 0, i = 0;
    for (uint32_t s = 0; s < total; s++) {
        uint4 cur[U][MC_GEMV_ROWS];
        uint16_t cs[U][MC_GEMV_ROWS];
#pragma unroll
        for (uint32_t u = 0; u < U; u++)
#pragma unroll
            for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                cur[u][r] = wv[u][r];
                cs[u][r] = sv[u][r];
            }
        if (s + 1 < total) {
            if (i + 1 < niter)
                load(lt, i + 1);
            else {
                lt = at(n + 1);
                load(lt, 0);
            }
        }
        if (ct.held) {
#pragma unroll
            for (uint32_t u = 0; u < U; u++) {
                const uint32_t idx = lane + PER_IT * i + 32 * u;
                if (idx < nfull) {
                    float4 xv[E / 4];
#pragma unroll
                    for (uint32_t q = 0; q < E / 4; q++)
                        xv[q] = ((const float4 *)(xs + (size_t)idx * E))[q];
#pragma unroll
                    for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                        acc[r] += mc_dot_chunk<T>(cur[u][r], xv,
                                                  T == MEMRA_TYPE_Q8_0 ? __half2float(__ushort_as_half(cs[u][r])) : 1.0f);
                }
            }
        }
        if (++i < niter)
            continue;
        /* the group's last iteration: the tail columns, the trees, 1/rms, the store */
        float *yj = y + (size_t)ct.j * ldy;
        if (!ct.held) {
            mc_expert_zeros<MC_GLU_SILU>(true, 0, lane, ct.r0, rows_e, yj);
        } else {
            if (nfull * E < stack.cols && lane == (nfull & 31)) {
                for (uint32_t c = nfull * E; c < stack.cols; c++) {
                    const float xc = xs[c];
#pragma unroll
                    for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                        const size_t row = ct.first + (ct.r0 + r < rows_e ? ct.r0 + r : ct.r0);
                        acc[r] = fmaf(mc_elem<T>(data + row * row_bytes, c), xc, acc[r]);
                    }
                }
            }
            float d[MC_GEMV_ROWS];
#pragma unroll
            for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                d[r] = mc_warp_sum(acc[r]);
            if (lane == 0) {
                const float scale = 1.0f / sqrtf(sst / (float)stack.cols + eps);
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                    d[r] *= scale;
                mc_rows_store<MC_GLU_SILU>(d, ct.r0, rows_e, NULL, NULL, yj);
            }
        }
#pragma unroll
        for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
            acc[r] = 0.0f;
        i = 0;
        n++;
        ct = lt;
    }
}

template <uint32_t T>
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS, 4)
    gemv_experts_stream(const mc_matrix stack, uint32_t rows_e, const int32_t *sel, uint32_t k, uint32_t e0,
                        uint32_t e1, const float *x, uint32_t ldx, const float *norm_w, float eps, float *y,
                        uint32_t ldy, int early) {
    const uint32_t nw = gridDim.x * MC_GEMV_WARPS, wid = blockIdx.x * MC_GEMV_WARPS + (threadIdx.x >> 5);
    mc_wait_prior_grid(0); /* the ids come from the kernel just before */
    /* moe_fuse bit 32, as gemv_experts */
    if (early)
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    extern __shared__ __align__(16) float xs[]; /* cols floats, then the sum of squares */
    mc_stream_stage<T>(x, NULL, 0.0f, norm_w, stack.cols, xs);
    __syncthreads();
    mc_stream_tasks<T>(stack, rows_e, sel, k, e0, e1, xs, xs[stack.cols], eps, y, ldy, wid, nw);
}

/* Blocks a multiprocessor of gemv_experts_stream<T> on each device (0: not yet asked). */
static int mc_stream_per_sm[MC_MAX_DEVICES][4];

template <uint32_t T>
static cudaError_t mc_gemv_experts_stream_t(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                            uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                            const float *norm_w, float eps, float *y, uint32_t ldy, cudaStream_t st,
                                            int ti) {
    cudaError_t e = mc_gemv_prepare();
    int dev = 0;
    if (e != cudaSuccess || (e = cudaGetDevice(&dev)) != cudaSuccess)
        return e;
    if (!mc_stream_per_sm[dev][ti]) {
        int per_sm = 0;
        if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_experts_stream<T>, 32 * MC_GEMV_WARPS,
                                                               32 * 1024)) != cudaSuccess) /* x' at most */
            return e;
        mc_stream_per_sm[dev][ti] = per_sm > 0 ? per_sm : 1;
    }
    const uint64_t groups = (uint64_t)(rows_e + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS * k;
    const uint64_t need = (groups + MC_GEMV_WARPS - 1) / MC_GEMV_WARPS,
                   cap = (uint64_t)mc_stream_per_sm[dev][ti] * mc_sm_count[dev];
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((uint32_t)(need < cap ? need : cap));
    cfg.blockDim = dim3(32 * MC_GEMV_WARPS);
    cfg.dynamicSmemBytes = ((size_t)w->cols + 1) * sizeof(float);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    const int early = (c->moe_fuse & MC_MOE_FUSE_EARLY) != 0;
    e = cudaLaunchKernelEx(&cfg, gemv_experts_stream<T>, *w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, early);
    return e != cudaSuccess ? e : cudaGetLastError();
}

/* The gate/up launch of moe_fuse bits 64 and 128 (gemv_experts_stream): cudaErrorNotSupported where it does
 * not serve (a column split above 1, or more groups than 32 bits count: the next variant runs). */
static cudaError_t mc_gemv_experts_stream(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                          uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                          const float *norm_w, float eps, float *y, uint32_t ldy, cudaStream_t st) {
    if (ldx != 0 || ((uint64_t)w->cols + 1) * sizeof(float) > 32 * 1024 || mc_gemv_ksplit(mc_experts_rows(rows_e, k)) != 1 ||
        (uint64_t)(rows_e + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS * k >= 0x80000000ull)
        return cudaErrorNotSupported;
#define MC_S(T, I) mc_gemv_experts_stream_t<T>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st, I)
    switch (w->type) {
    case MEMRA_TYPE_F32: return MC_S(MEMRA_TYPE_F32, 0);
    case MEMRA_TYPE_F16: return MC_S(MEMRA_TYPE_F16, 1);
    case MEMRA_TYPE_BF16: return MC_S(MEMRA_TYPE_BF16, 2);
    case MEMRA_TYPE_Q8_0: return MC_S(MEMRA_TYPE_Q8_0, 3);
    default: return cudaErrorNotSupported;
    }
#undef MC_S
}

/* ---- moe_fuse bit 1024: the router computed in the experts' gate/up launch ------------------ */

#define MC_ROUTED_WARPS 16u /* warps of a gemv_experts_routed block: one block a multiprocessor */
#define MC_ROUTED_CL 4u     /* blocks of its thread-block clusters: each computes the router once */

/* The fused router of n <= 32 experts (moe_router_cl's logits under bits 16 and 256, then
 * mc_moe_route_warp's ids and weights) computed by every thread-block cluster of the experts'
 * gate/up launch, whose blocks then stream their share of the chosen experts' row groups as
 * gemv_experts_stream does (mc_stream_tasks: the loop kernel's bits). The router's launch and its
 * grid boundary go, and the ids come from the block's own shared memory, not back through L2.
 *   - Block b of a cluster of 4 takes the router's row groups b and b + 4 (n <= 32: at most 8),
 *     warps 4 i .. 4 i + 3 the 4 column parts of its i-th: moe_router_cl's group arithmetic
 *     (mc_rows_dot_flat with the F32 router's rows queued before the wait, the parts added in
 *     order by the group's first thread, the scale), hence its logits.
 *   - The group's first thread pushes its logits into every block of the cluster (distributed
 *     shared memory, after a first cluster-barrier phase has proved every block started); a
 *     second phase (arrive.release, wait.acquire) makes them visible; warp 0 of every block then
 *     routes them (mc_moe_route_warp) into its shared memory, and the grid's block 0 stores the
 *     logits, ids and weights that the down/combine launch reads after its own wait.
 *   - x' for the experts (mc_stream_stage, with po) is staged by every block while its groups sum.
 *   - Granite's x + po * po_scale is never written into x here (other blocks still read x): the
 *     down/combine launch adds it, in moe_scale's operations, before its own sum.
 * Per call: reads the router (n x cols F32: once a cluster), x, po, norm_w and k x rows_e gate/up
 * rows; writes n logits, k ids, k weights and k slices of rows_e / 2. */
template <uint32_t T, int NCR>
__global__ void __launch_bounds__(32 * MC_ROUTED_WARPS, 1)
    gemv_experts_routed(const mc_matrix router, const mc_matrix stack, uint32_t rows_e, uint32_t k, int wnorm,
                        const float *x, const float *po, float po_scale, const float *norm_w, float eps, float *logits,
                        int32_t *sel, float *wts, float *y, uint32_t ldy, int early) {
    __shared__ float red[MC_ROUTED_WARPS][MC_GEMV_ROWS + 1];
    __shared__ __align__(16) float slog[32];
    __shared__ int32_t ssel[32];
    __shared__ float swts[32];
    extern __shared__ __align__(16) float xs[]; /* stack.cols floats, then the sum of squares */
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n = router.rows;
    const uint32_t rank = blockIdx.x % MC_ROUTED_CL, part = warp % MC_GEMV_WARPS;
    const uint32_t g = rank + MC_ROUTED_CL * (warp / MC_GEMV_WARPS), r0 = g * MC_GEMV_ROWS;
    const bool live = warp < 2 * MC_GEMV_WARPS && r0 < n;
    /* the first phase of the cluster barrier: every block has started once it completes */
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    float d[MC_GEMV_ROWS], ss = 0.0f;
    if (live)
        mc_rows_dot_flat<MEMRA_TYPE_F32, 1, MC_GEMV_WARPS, NCR>(router, r0, x, po, po_scale, norm_w, lane, part, 0u, d,
                                                                ss);
    else
        mc_wait_prior_grid(0); /* x and po come from the kernels before */
    mc_stream_stage<T>(x, po, po_scale, norm_w, stack.cols, xs);
    if (live && lane == 0) {
#pragma unroll
        for (int r = 0; r < MC_GEMV_ROWS; r++)
            red[warp][r] = d[r];
        red[warp][MC_GEMV_ROWS] = ss;
    }
    __syncthreads();
    if (live && part == 0 && lane == 0) /* the group's first thread: moe_router_cl's */
        mc_parts_scale<MC_GEMV_WARPS, 1>(red + warp, d, ss, router.cols, eps);
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    if (live && part == 0 && lane == 0) {
        cg::cluster_group cl = cg::this_cluster();
        for (uint32_t b = 0; b < MC_ROUTED_CL; b++) {
            float *sb = cl.map_shared_rank(slog, b);
#pragma unroll
            for (int r = 0; r < MC_GEMV_ROWS; r++)
                if (r0 + r < n)
                    sb[r0 + r] = d[r];
        }
    }
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (warp == 0) {
        mc_moe_route_warp(slog, logits, n, k, wnorm, 0, ssel, swts);
        __syncwarp();
        if (blockIdx.x == 0) { /* the copies the down/combine launch reads */
            if (lane < n)
                logits[lane] = slog[lane];
            if (lane < k) {
                sel[lane] = ssel[lane];
                wts[lane] = swts[lane];
            }
        }
    }
    __syncthreads(); /* ssel and x' for every warp */
    /* moe_fuse bit 32: the down/combine launch may start (it reads the ids after its wait) */
    if (early)
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    mc_stream_tasks<T>(stack, rows_e, ssel, k, 0, n, xs, xs[stack.cols], eps, y, ldy,
                       blockIdx.x * MC_ROUTED_WARPS + warp, gridDim.x * MC_ROUTED_WARPS);
}

int mc_experts_routed_serves(const mc_matrix *router, const mc_matrix *gu, uint32_t rows_e, uint32_t k) {
    const uint32_t t = gu->type;
    return router->type == MEMRA_TYPE_F32 && mc_moe_router_serves(router) && router->rows <= 32 &&
           router->cols == gu->cols && k >= 1 && k <= router->rows && k <= MEMRA_MAX_EXPERTS_USED &&
           router->cols % 4 == 0 &&
           (t == MEMRA_TYPE_F32 || t == MEMRA_TYPE_F16 || t == MEMRA_TYPE_BF16 || t == MEMRA_TYPE_Q8_0) && rows_e > 0 &&
           rows_e % 2 == 0 && (uint64_t)router->rows * rows_e <= gu->rows &&
           mc_gemv_ksplit(mc_experts_rows(rows_e, k)) == 1 &&
           (uint64_t)(rows_e + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS * k < 0x80000000ull &&
           ((uint64_t)gu->cols + 1) * sizeof(float) <= 32 * 1024;
}

static int mc_routed_clusters[MC_MAX_DEVICES][12]; /* clusters that fit at once (0: not yet asked) */

template <uint32_t T, int NCR>
static cudaError_t mc_gemv_experts_routed_t(const mc_config *c, const mc_matrix *router, const mc_matrix *gu,
                                            uint32_t rows_e, uint32_t k, int wnorm, const float *x, const float *po,
                                            float po_scale, const float *norm_w, float eps, float *logits, int32_t *sel,
                                            float *wts, float *y, uint32_t ldy, cudaStream_t st, int ti) {
    cudaError_t e = mc_gemv_prepare();
    int dev = 0;
    if (e != cudaSuccess || (e = cudaGetDevice(&dev)) != cudaSuccess)
        return e;
    if (!mc_routed_clusters[dev][ti]) { /* the clusters that fit the device at once */
        cudaLaunchConfig_t q;
        memset(&q, 0, sizeof q);
        q.gridDim = dim3(MC_ROUTED_CL * mc_sm_count[dev]);
        q.blockDim = dim3(32 * MC_ROUTED_WARPS);
        q.dynamicSmemBytes = 32 * 1024;
        cudaLaunchAttribute a[1];
        a[0].id = cudaLaunchAttributeClusterDimension;
        a[0].val.clusterDim.x = MC_ROUTED_CL, a[0].val.clusterDim.y = 1, a[0].val.clusterDim.z = 1;
        q.attrs = a, q.numAttrs = 1;
        int clusters = 0;
        if ((e = cudaOccupancyMaxActiveClusters(&clusters, gemv_experts_routed<T, NCR>, &q)) != cudaSuccess)
            return e;
        mc_routed_clusters[dev][ti] = clusters > 0 ? clusters : 1;
    }
    const uint64_t groups = (uint64_t)(rows_e + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS * k;
    const uint64_t per_cl = (uint64_t)MC_ROUTED_CL * MC_ROUTED_WARPS, cap = (uint64_t)mc_routed_clusters[dev][ti];
    const uint64_t need = (groups + per_cl - 1) / per_cl; /* clusters */
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((uint32_t)(MC_ROUTED_CL * (need < cap ? need : cap)));
    cfg.blockDim = dim3(32 * MC_ROUTED_WARPS);
    cfg.dynamicSmemBytes = ((size_t)gu->cols + 1) * sizeof(float);
    cfg.stream = st;
    cudaLaunchAttribute attr[2];
    mc_launch_attrs_cluster(&cfg, attr, MC_ROUTED_CL, c->pdl != 0);
    const int early = (c->moe_fuse & MC_MOE_FUSE_EARLY) != 0;
    e = cudaLaunchKernelEx(&cfg, gemv_experts_routed<T, NCR>, *router, *gu, rows_e, k, wnorm, x, po, po_scale, norm_w,
                           eps, logits, sel, wts, y, ldy, early);
    return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t mc_gemv_experts_routed(const mc_config *c, const mc_matrix *router, const mc_matrix *gu, uint32_t rows_e,
                                   uint32_t k, int wnorm, const float *x, const float *po, float po_scale,
                                   const float *norm_w, float eps, float *logits, int32_t *sel, float *wts, float *y,
                                   uint32_t ldy, cudaStream_t st) {
    if (!mc_experts_routed_serves(router, gu, rows_e, k) || !x || !norm_w || !logits || !sel || !wts || !y)
        return cudaErrorInvalidValue;
#define MC_RT(T, I)                                                                                                    \
    switch (mc_flat_nc(MEMRA_TYPE_F32, router->cols, MC_GEMV_WARPS)) {                                                 \
    case 1:                                                                                                            \
        return mc_gemv_experts_routed_t<T, 1>(c, router, gu, rows_e, k, wnorm, x, po, po_scale, norm_w, eps, logits,   \
                                              sel, wts, y, ldy, st, 3 * (I));                                          \
    case 2:                                                                                                            \
        return mc_gemv_experts_routed_t<T, 2>(c, router, gu, rows_e, k, wnorm, x, po, po_scale, norm_w, eps, logits,   \
                                              sel, wts, y, ldy, st, 3 * (I) + 1);                                      \
    default:                                                                                                           \
        return mc_gemv_experts_routed_t<T, 4>(c, router, gu, rows_e, k, wnorm, x, po, po_scale, norm_w, eps, logits,   \
                                              sel, wts, y, ldy, st, 3 * (I) + 2);                                      \
    }
    switch (gu->type) {
    case MEMRA_TYPE_F32: MC_RT(MEMRA_TYPE_F32, 0)
    case MEMRA_TYPE_F16: MC_RT(MEMRA_TYPE_F16, 1)
    case MEMRA_TYPE_BF16: MC_RT(MEMRA_TYPE_BF16, 2)
    default: MC_RT(MEMRA_TYPE_Q8_0, 3)
    }
#undef MC_RT
}

/* moe_fuse bit 2: the experts' down GEMV and the weighted combination in one launch, for one rank
 * holding the stack's experts [e0, e1). Each block is one row group (4 rows) of every slot: warp
 * (j, p) computes slot j's rows over column part p of KS (mc_gemv_ksplit of k rows_e rows, as
 * gemv_experts), with all of its chunks in flight (mc_rows_dot_flat: gemv_experts' bits), an id
 * outside [e0, e1) giving zeros; the parts are added in order in shared memory, then one thread a
 * row runs moe_combine's sum: from 0.0f, w_j * slot_j in slot order, [w_k * shslot (the shared
 * expert's output, computed before)], times scale when not 1, onto x; products and sums each
 * rounded. The same bits as gemv_experts then moe_combine, without writing the slots. With po
 * (moe_fuse bit 1024: granite's attention residual, which the routed gate/up launch did not write
 * into x) x[i] + po[i] * po_scale first, in moe_scale's operations, as the fused router would have
 * stored it. late: the ids come from the launch just before (bit 1024's routed gate/up), so they
 * are read after the wait. Per call: reads k x rows_e weight rows (cols each), act (k slices of
 * ldx), sel, w, shslot, x and po; writes x. */
template <uint32_t T, int KS, int NC>
__global__ void __launch_bounds__(32 * MC_COMBINE_WARPS, NC <= 2 ? 4 : 2) /* 64 registers: one wave of 30B's down */
    gemv_experts_combine(const mc_matrix stack, uint32_t rows_e, const int32_t *sel, uint32_t e0, uint32_t e1,
                         const float *act, uint32_t ldx, const float *wts, uint32_t k, const float *shslot, float scale,
                         float *x, const float *po, float po_scale, int late) {
    __shared__ float red[MC_COMBINE_WARPS][MC_GEMV_ROWS];
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, j = warp / KS, part = warp % KS;
    const uint32_t r0 = blockIdx.x * MC_GEMV_ROWS;
    /* The ids are the router's, two or more launches back (the experts' gate/up launch, and with a
     * shared expert its GEMVs, come between): complete before this grid could start (cuda_common.cuh:
     * a grid lets the next one launch only after its own wait). So the id is read before the wait,
     * through L2, and the expert's weights are queued (mc_rows_dot_flat) while the launch before
     * drains; act, wts, shslot and x only after the wait. With late, the ids are the launch
     * before's: read after the wait (the second wait, in mc_rows_dot_flat, returns at once). */
    if (late)
        mc_wait_prior_grid(0);
    const uint32_t e = (uint32_t)__ldcg(sel + j);
    float d[MC_GEMV_ROWS] = {0.0f, 0.0f, 0.0f, 0.0f}, ss;
    if (e < e0 || e >= e1)
        mc_wait_prior_grid(0);
    else {
        mc_matrix w = mc_expert_rows<T>(stack, e, e0, rows_e);
        mc_rows_dot_flat<T, 0, KS, NC>(w, r0, act + (size_t)j * ldx, NULL, 0.0f, NULL, lane, part,
                                       T == MEMRA_TYPE_Q8_0 ? MC_TRIGGER_GEMV6_RES_Q8 : MC_TRIGGER_GEMV6_RES, d, ss);
    }
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < MC_GEMV_ROWS; r++)
            red[warp][r] = d[r];
    }
    __syncthreads();
    const uint32_t r = threadIdx.x, i = r0 + r;
    if (r >= MC_GEMV_ROWS || i >= rows_e)
        return;
    float acc = 0.0f;
    for (uint32_t s = 0; s < k; s++) {
        float v = red[s * KS][r];
        for (uint32_t p = 1; p < KS; p++)
            v += red[s * KS + p][r];
        acc = __fadd_rn(acc, __fmul_rn(wts[s], v));
    }
    if (shslot)
        acc = __fadd_rn(acc, __fmul_rn(wts[k], shslot[i]));
    if (scale != 1.0f)
        acc = __fmul_rn(acc, scale);
    const float xi = po ? __fadd_rn(x[i], __fmul_rn(po[i], po_scale)) : x[i];
    x[i] = __fadd_rn(xi, acc);
}

int mc_experts_combine_serves(const mc_matrix *w, uint32_t rows_e, uint32_t k) {
    if (k == 0 || k > MC_COMBINE_WARPS || rows_e == 0 || mc_type_elem_bytes(w->type) == 0)
        return 0;
    const uint32_t ks = mc_gemv_ksplit(mc_experts_rows(rows_e, k));
    return k * ks <= MC_COMBINE_WARPS && mc_flat_nc(w->type, w->cols, ks) != 0 &&
           mc_flat_fits(w->type, rows_e, w->cols);
}

template <uint32_t T, int KS, int NC>
static cudaError_t mc_experts_combine_t(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                        uint32_t k, uint32_t e0, uint32_t e1, const float *act, uint32_t ldx,
                                        const float *wts, const float *shslot, float scale, float *x, const float *po,
                                        float po_scale, int late, cudaStream_t st) {
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((rows_e + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS);
    cfg.blockDim = dim3(32 * k * KS);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    cudaError_t e = cudaLaunchKernelEx(&cfg, gemv_experts_combine<T, KS, NC>, *w, rows_e, sel, e0, e1, act, ldx, wts, k,
                                       shslot, scale, x, po, po_scale, late);
    return e != cudaSuccess ? e : cudaGetLastError();
}

template <uint32_t T, int KS>
static cudaError_t mc_experts_combine_nc(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                         uint32_t k, uint32_t e0, uint32_t e1, const float *act, uint32_t ldx,
                                         const float *wts, const float *shslot, float scale, float *x, const float *po,
                                         float po_scale, int late, cudaStream_t st) {
    switch (mc_flat_nc(w->type, w->cols, KS)) {
    case 1:
        return mc_experts_combine_t<T, KS, 1>(c, w, rows_e, sel, k, e0, e1, act, ldx, wts, shslot, scale, x, po,
                                              po_scale, late, st);
    case 2:
        return mc_experts_combine_t<T, KS, 2>(c, w, rows_e, sel, k, e0, e1, act, ldx, wts, shslot, scale, x, po,
                                              po_scale, late, st);
    default:
        return mc_experts_combine_t<T, KS, 4>(c, w, rows_e, sel, k, e0, e1, act, ldx, wts, shslot, scale, x, po,
                                              po_scale, late, st);
    }
}

template <uint32_t T>
static cudaError_t mc_experts_combine_ks(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                         uint32_t k, uint32_t e0, uint32_t e1, const float *act, uint32_t ldx,
                                         const float *wts, const float *shslot, float scale, float *x, const float *po,
                                         float po_scale, int late, cudaStream_t st) {
    switch (mc_gemv_ksplit(mc_experts_rows(rows_e, k))) {
    case 1:
        return mc_experts_combine_nc<T, 1>(c, w, rows_e, sel, k, e0, e1, act, ldx, wts, shslot, scale, x, po, po_scale,
                                           late, st);
    case 2:
        return mc_experts_combine_nc<T, 2>(c, w, rows_e, sel, k, e0, e1, act, ldx, wts, shslot, scale, x, po, po_scale,
                                           late, st);
    default:
        return mc_experts_combine_nc<T, 4>(c, w, rows_e, sel, k, e0, e1, act, ldx, wts, shslot, scale, x, po, po_scale,
                                           late, st);
    }
}

cudaError_t mc_gemv_experts_combine(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                    uint32_t k, uint32_t e0, uint32_t e1, const float *act, uint32_t ldx,
                                    const float *wts, const float *shslot, float scale, float *x, const float *po,
                                    float po_scale, int late, cudaStream_t st) {
    if (!mc_experts_combine_serves(w, rows_e, k) || e1 < e0 || ldx % 4 != 0 || (uint64_t)(e1 - e0) * rows_e > w->rows)
        return cudaErrorInvalidValue;
    switch (w->type) {
    case MEMRA_TYPE_F32:
        return mc_experts_combine_ks<MEMRA_TYPE_F32>(c, w, rows_e, sel, k, e0, e1, act, ldx, wts, shslot, scale, x, po,
                                                     po_scale, late, st);
    case MEMRA_TYPE_F16:
        return mc_experts_combine_ks<MEMRA_TYPE_F16>(c, w, rows_e, sel, k, e0, e1, act, ldx, wts, shslot, scale, x, po,
                                                     po_scale, late, st);
    case MEMRA_TYPE_BF16:
        return mc_experts_combine_ks<MEMRA_TYPE_BF16>(c, w, rows_e, sel, k, e0, e1, act, ldx, wts, shslot, scale, x, po,
                                                      po_scale, late, st);
    default:
        return mc_experts_combine_ks<MEMRA_TYPE_Q8_0>(c, w, rows_e, sel, k, e0, e1, act, ldx, wts, shslot, scale, x, po,
                                                      po_scale, late, st);
    }
}

const char *mc_gemv_experts_family(const void *f) {
#define MC_EXP_KS(T, S, N) (const void *)gemv_experts<T, S, N, 1>, (const void *)gemv_experts<T, S, N, 2>, \
                           (const void *)gemv_experts<T, S, N, 4>
#define MC_EXP_SN(T) MC_EXP_KS(T, 0, 0), MC_EXP_KS(T, 0, 1), MC_EXP_KS(T, 1, 0), MC_EXP_KS(T, 1, 1)
    static const void *const table[] = {MC_EXP_SN(MEMRA_TYPE_F32), MC_EXP_SN(MEMRA_TYPE_F16),
                                        MC_EXP_SN(MEMRA_TYPE_BF16), MC_EXP_SN(MEMRA_TYPE_Q8_0)};
#undef MC_EXP_SN
#undef MC_EXP_KS
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i] == f)
            return "gemv_experts";
#define MC_FLAT_NC(T, KS)                                                                                              \
    (const void *)gemv_experts_flat<T, MC_GLU_SILU, 1, KS, 1>,                                                         \
        (const void *)gemv_experts_flat<T, MC_GLU_SILU, 1, KS, 2>,                                                     \
        (const void *)gemv_experts_flat<T, MC_GLU_SILU, 1, KS, 4>
#define MC_FLAT_KS(T) MC_FLAT_NC(T, 1), MC_FLAT_NC(T, 2), MC_FLAT_NC(T, 4)
    static const void *const flats[] = {MC_FLAT_KS(MEMRA_TYPE_F32), MC_FLAT_KS(MEMRA_TYPE_F16),
                                        MC_FLAT_KS(MEMRA_TYPE_BF16), MC_FLAT_KS(MEMRA_TYPE_Q8_0)};
#undef MC_FLAT_KS
#undef MC_FLAT_NC
    for (size_t i = 0; i < sizeof flats / sizeof flats[0]; i++)
        if (flats[i] == f)
            return "gemv_experts";
    static const void *const streams[] = {(const void *)gemv_experts_stream<MEMRA_TYPE_F32>,
                                          (const void *)gemv_experts_stream<MEMRA_TYPE_F16>,
                                          (const void *)gemv_experts_stream<MEMRA_TYPE_BF16>,
                                          (const void *)gemv_experts_stream<MEMRA_TYPE_Q8_0>}; /* moe_fuse bit 64 */
    for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++)
        if (streams[i] == f)
            return "gemv_experts";
#define MC_ROUTED_NC(T)                                                                                                \
    (const void *)gemv_experts_routed<T, 1>, (const void *)gemv_experts_routed<T, 2>,                                  \
        (const void *)gemv_experts_routed<T, 4>
    static const void *const routed[] = {MC_ROUTED_NC(MEMRA_TYPE_F32), MC_ROUTED_NC(MEMRA_TYPE_F16),
                                         MC_ROUTED_NC(MEMRA_TYPE_BF16), MC_ROUTED_NC(MEMRA_TYPE_Q8_0)}; /* bit 1024 */
#undef MC_ROUTED_NC
    for (size_t i = 0; i < sizeof routed / sizeof routed[0]; i++)
        if (routed[i] == f)
            return "gemv_experts";
    if (mc_moe_router_family(f))
        return "moe_router";
#define MC_COMB_NC(T, KS)                                                                                              \
    (const void *)gemv_experts_combine<T, KS, 1>, (const void *)gemv_experts_combine<T, KS, 2>,                        \
        (const void *)gemv_experts_combine<T, KS, 4>
#define MC_COMB_KS(T) MC_COMB_NC(T, 1), MC_COMB_NC(T, 2), MC_COMB_NC(T, 4)
    static const void *const combines[] = {MC_COMB_KS(MEMRA_TYPE_F32), MC_COMB_KS(MEMRA_TYPE_F16),
                                           MC_COMB_KS(MEMRA_TYPE_BF16), MC_COMB_KS(MEMRA_TYPE_Q8_0)};
#undef MC_COMB_KS
#undef MC_COMB_NC
    for (size_t i = 0; i < sizeof combines / sizeof combines[0]; i++)
        if (combines[i] == f)
            return "gemv_experts_combine";
    return NULL;
}
