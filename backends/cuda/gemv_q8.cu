/* gemv_q8.cu: the Q8_0 GEMV on integer dots (gemv_q8_0_int): x quantized per 16 columns into
 * shared memory, dp4a against the int8 weights; the RMSNorm of x, a bias, a residual or the
 * SwiGLU of interleaved gate/up rows fused in as in gemv.cu (whose row-group kernel is the float
 * path of Q8_0: q8=float, and the matrices this kernel does not serve). Measurements:
 * bench/gpu/NOTES.md. */
#include "cuda_common.cuh"
#include "post_norm.cuh"
#include "q8x_quant.h"

/* Q8_0 at batch 1 is bound by instructions and L1 traffic per weight byte (a float conversion
 * and an FMA per weight, 8 bytes of x and norm weight per 4 weight bytes). Here each block first
 * quantizes x' = x * norm_w into shared memory, per 16-column chunk c: s_c = max|x'| / QMAX and
 * q = rint(x' / s_c), |q| <= QMAX = 127 * 2^16, stored as three int8 planes (q = 2^16 hi + 2^8
 * mid + lo), so a chunk's dot with 16 int8 weights is exact in integers, three dp4a chains, and
 * costs one float FMA: acc += (2^16 dot_hi + (2^8 dot_mid + dot_lo)) * (d_w * s_c). x' keeps 23
 * bits relative to its chunk's largest element (16 bits were not enough: bench/gpu/NOTES.md).
 * The sum of squares of x for the norm is a block sum of fixed shape: 256 threads, each over
 * chunks tid, tid + 256, ..., then the 8 warps' sums in order. A warp takes 4 rows over column
 * part `part` of KS (chunks 32 part + lane, then every 32 KS-th), the parts of a row group added
 * in order; each block takes a contiguous, balanced range of row groups, its warps' loads
 * flattened over row groups so the next row group's first weights stream while the last chunk of
 * the current one is summed. Blocks of WARPS = 16 warps, one a multiprocessor (q8=auto: the
 * quantization of x, paid once per block, is paid half as often as with two blocks of 8, which
 * is what lets it pay on the down projection too) or of 8 warps, two a multiprocessor (q8=rows
 * and q8=int-8w). With 16 warps every thread quantizes, and the first 8 warps sum the squares in
 * the 8-warp order. The bits depend on the shapes alone (not on the grid or the block size).
 *
 * Per call (one matrix a token): reads rows x cols weight bytes and their f16 block scales
 * (streamed), x and norm_w (cols floats, once per block), bias and residual (rows floats);
 * writes y (rows floats; rows/2 with a GLU: SwiGLU or GELU-gated). */
#define MC_Q8X_WARPS 8u /* the sum of squares' shape (and the blocks of q8=rows, int-8w) */
#define MC_Q8X_UNROLL 2

/* Shared bytes of the quantized x of a matrix of `cols` columns. */
__host__ __device__ inline uint32_t mc_q8x_smem(uint32_t cols) { return cols / 16 * 52; }

/* The kernels' body (gemv_q8_0_int, gemv_q8_0_int_post below), called by every thread of the block. */
template <int SWIGLU, int NORM, int KS, int WARPS, bool PRO = false>
__device__ __forceinline__ void gemv_q8_0_int_body(const mc_matrix w, const float *x, const float *norm_w, float eps,
                                                   const float *bias, const float *residual, float *y,
                                                   uint32_t n_groups, const mc_pro_args *pro = NULL) {
    extern __shared__ __align__(16) unsigned char q8sm[];
    __shared__ float red[2][WARPS][MC_GEMV_ROWS];
    __shared__ float bred[MC_Q8X_WARPS];
    constexpr uint32_t SLOTS = WARPS / KS, U = MC_Q8X_UNROLL, PER_IT = 32 * KS * U;
    const uint32_t nch = w.cols / 16, nsc = w.cols / MEMRA_Q8_0_BLOCK;
    uint4 *xh = (uint4 *)q8sm, *xm = xh + nch, *xl = xm + nch;
    float *xs = (float *)(xl + nch);
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, part = warp % KS, slot = warp / KS;
    const uint32_t g0 = (uint32_t)((uint64_t)n_groups * blockIdx.x / gridDim.x);
    const uint32_t g1 = (uint32_t)((uint64_t)n_groups * (blockIdx.x + 1) / gridDim.x);
    const uint32_t n_my = g0 + slot < g1 ? (g1 - g0 - slot + SLOTS - 1) / SLOTS : 0;
    const uint32_t niter = (nch + PER_IT - 1) / PER_IT, total = n_my * niter;
    const uint32_t first = lane + 32 * part;

    uint4 wv[U][MC_GEMV_ROWS];
    uint16_t sv[U][MC_GEMV_ROWS];
    /* loads of flat iteration (row group k, iteration i) */
    auto load = [&](uint32_t k, uint32_t i) {
        const uint32_t r0 = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS;
#pragma unroll
        for (uint32_t u = 0; u < U; u++) {
            const uint32_t idx = first + PER_IT * i + 32 * KS * u;
            if (idx < nch) {
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                    const uint32_t row = r0 + r < w.rows ? r0 + r : r0;
                    wv[u][r] =
                        __ldcs((const uint4 *)((const char *)w.data + (size_t)row * w.stride + (size_t)idx * 16));
                    sv[u][r] = __ldg(w.scales + (size_t)row * nsc + idx / 2);
                }
            }
        }
    };
    if (total > 0)
        load(0, 0);
    mc_wait_prior_grid(MC_TRIGGER_Q8); /* x (and the residual) come from earlier kernels */
    if constexpr (PRO) { /* postnorm=prologue: x is x_new, here in shared memory */
        __shared__ __align__(16) float xpro[MC_PRO_COLS];
        __shared__ float ppro[MC_PRO_COLS];
        mc_pro_stage(*pro, w.cols, xpro, ppro);
        x = xpro;
    }
    float ss = 0.0f;
    /* a chunk: x' quantized (16 warps sum the squares here; 8 below, in the 8-warp order) */
    auto stage = [&](uint32_t c, float (&v)[16]) {
        mc_q8x_norm16<NORM, WARPS == MC_Q8X_WARPS>(norm_w, (size_t)c * 16, v, ss);
        float amax;
        bool finite;
        mc_q8x_amax16(v, amax, finite);
        mc_q8x_planes16(v, mc_q8x_inv(amax, finite), xh[c], xm[c], xl[c]);
        xs[c] = mc_q8x_scale(amax, finite); /* NaN for a non-finite chunk: it stays visible */
    };
    /* two of a thread's chunks at a time, both loads in flight before either is staged (the down
     * projection's 14,336 columns: 896 chunks); the chunks and squares in the same order */
    for (uint32_t c = tid; c < nch; c += 2 * blockDim.x) {
        const uint32_t c1 = c + blockDim.x;
        float v0[16], v1[16];
        mc_q8x_raw16<PRO>(x, (size_t)c * 16, v0);
        if (c1 < nch)
            mc_q8x_raw16<PRO>(x, (size_t)c1 * 16, v1);
        stage(c, v0);
        if (c1 < nch)
            stage(c1, v1);
    }
    if (NORM && WARPS != MC_Q8X_WARPS && warp < MC_Q8X_WARPS) /* the 8-warp order: chunks tid, tid + 256, ... */
        for (uint32_t c = tid; c < nch; c += 32 * MC_Q8X_WARPS)
#pragma unroll
            for (uint32_t i = 0; i < 4; i++) {
                const float4 a = PRO ? ((const float4 *)(x + (size_t)c * 16))[i]
                                     : __ldg((const float4 *)(x + (size_t)c * 16) + i);
                ss = fmaf(a.x, a.x, ss);
                ss = fmaf(a.y, a.y, ss);
                ss = fmaf(a.z, a.z, ss);
                ss = fmaf(a.w, a.w, ss);
            }
    if (NORM && (WARPS == MC_Q8X_WARPS || warp < MC_Q8X_WARPS)) {
        ss = mc_warp_sum(ss);
        if (lane == 0)
            bred[warp] = ss;
    }
    __syncthreads(); /* the quantized x and the warps' sums of squares are visible */
    float rscale = 1.0f;
    if (NORM) { /* the block sum: the warps in order, mc_block_sum's order, by every thread */
        float t = 0.0f;
#pragma unroll
        for (uint32_t k = 0; k < MC_Q8X_WARPS; k++)
            t += bred[k];
        rscale = 1.0f / sqrtf(t / (float)w.cols + eps);
    }

    float acc[MC_GEMV_ROWS];
#pragma unroll
    for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
        acc[r] = 0.0f;
    uint32_t k = 0, i = 0;
    float pre[MC_GEMV_ROWS];
    for (uint32_t j = 0; j < total; j++) {
        uint4 cur[U][MC_GEMV_ROWS];
        uint16_t cs[U][MC_GEMV_ROWS];
        if (i + 1 == niter && part == 0 && lane == 0) /* the residual (or bias) of the group, ahead */
            mc_rows_fetch<SWIGLU>(pre, (g0 + slot + SLOTS * k) * MC_GEMV_ROWS, w.rows, bias, residual);
#pragma unroll
        for (uint32_t u = 0; u < U; u++)
#pragma unroll
            for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                cur[u][r] = wv[u][r];
                cs[u][r] = sv[u][r];
            }
        if (j + 1 < total)
            load(i + 1 < niter ? k : k + 1, i + 1 < niter ? i + 1 : 0);
#pragma unroll
        for (uint32_t u = 0; u < U; u++) {
            const uint32_t idx = first + PER_IT * i + 32 * KS * u;
            if (idx < nch) {
                const uint4 h = xh[idx], md = xm[idx], lw = xl[idx];
                const float sx = xs[idx];
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                    const uint4 q = cur[u][r];
                    int dh = __dp4a((int)q.x, (int)h.x, 0);
                    dh = __dp4a((int)q.y, (int)h.y, dh);
                    dh = __dp4a((int)q.z, (int)h.z, dh);
                    dh = __dp4a((int)q.w, (int)h.w, dh);
                    int dm = __dp4a((int)q.x, (int)md.x, 0);
                    dm = __dp4a((int)q.y, (int)md.y, dm);
                    dm = __dp4a((int)q.z, (int)md.z, dm);
                    dm = __dp4a((int)q.w, (int)md.w, dm);
                    int dl = __dp4a((int)q.x, (int)lw.x, 0);
                    dl = __dp4a((int)q.y, (int)lw.y, dl);
                    dl = __dp4a((int)q.z, (int)lw.z, dl);
                    dl = __dp4a((int)q.w, (int)lw.w, dl);
                    const float dw = __half2float(__ushort_as_half(cs[u][r]));
                    const float dot = fmaf((float)dh, 65536.0f, (float)(dm * 256 + dl));
                    acc[r] = fmaf(dot, dw * sx, acc[r]);
                }
            }
        }
        if (++i < niter)
            continue;
        /* the row group's last iteration: sum, add the parts in order, write */
        float d[MC_GEMV_ROWS];
#pragma unroll
        for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
            d[r] = mc_warp_sum(acc[r]);
            acc[r] = 0.0f;
        }
        const uint32_t r0 = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS, par = k & 1;
        i = 0;
        k++;
        if (KS > 1) {
            if (lane == 0)
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                    red[par][warp][r] = d[r];
            asm volatile("bar.sync %0, %1;" ::"r"(1 + slot), "r"(32 * KS) : "memory");
            if (part != 0)
                continue;
            for (uint32_t p = 1; p < KS; p++)
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                    d[r] += red[par][warp + p][r];
        }
        if (lane != 0)
            continue;
#pragma unroll
        for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
            d[r] *= rscale;
        mc_rows_store_pre<SWIGLU>(d, pre, r0, w.rows, bias, residual, y);
    }
}

template <int SWIGLU, int NORM, int KS, int WARPS>
__global__ void __launch_bounds__(32 * WARPS, 16 / WARPS)
    gemv_q8_0_int(const mc_matrix w, const float *x, const float *norm_w, float eps, const float *bias,
                  const float *residual, float *y, uint32_t n_groups) {
    gemv_q8_0_int_body<SWIGLU, NORM, KS, WARPS>(w, x, norm_w, eps, bias, residual, y, n_groups);
}

/* experts=int: the chosen experts of a mixture of experts (gemv_experts' contract, gemv_moe.cu): block
 * row y is slot j on expert sel[j]'s rows of the stack (read after the wait: the kernel just
 * before wrote it), input x + j ldx, output y + j ldy, zeros for an id outside [e0, e1); each slot
 * runs gemv_q8_0_int's 16-warp body on its expert's rows at the column split of all k experts'
 * rows, so an expert's bits do not depend on its slot, rank or graph. Per call: k x rows_e rows of
 * int8 quants and their f16 scales, x, norm_w. */
template <int SWIGLU, int NORM, int KS>
__global__ void __launch_bounds__(32 * 16, 1)
    gemv_q8_0_int_experts(const mc_matrix stack, uint32_t rows_e, const int32_t *sel, uint32_t e0, uint32_t e1,
                          const float *x, uint32_t ldx, const float *norm_w, float eps, float *y, uint32_t ldy,
                          uint32_t n_groups) {
    mc_matrix w;
    const float *xj;
    float *yj;
    if (mc_experts_slot<SWIGLU>(stack, rows_e, sel, e0, e1, x, ldx, y, ldy, n_groups, w, xj, yj))
        gemv_q8_0_int_body<SWIGLU, NORM, KS, 16>(w, xj, norm_w, eps, NULL, NULL, yj, n_groups);
}

/* postnorm=prologue (mc_gemv_pro): x_new = x + RMSNorm(po) * post_w first (mc_pro_stage), then the
 * kernel with its norm (no bias or residual). Per call: what gemv_q8_0_int reads and writes, and
 * po, x, post_w (cols floats each, from L2), x_new (cols floats, by the first block). */
template <int SWIGLU, int KS, int WARPS>
__global__ void __launch_bounds__(32 * WARPS, 16 / WARPS)
    gemv_q8_0_int_pro(const mc_matrix w, const mc_pro_args pro, const float *norm_w, float eps, float *y,
                      uint32_t n_groups) {
    gemv_q8_0_int_body<SWIGLU, 1, KS, WARPS, true>(w, pro.x, norm_w, eps, NULL, NULL, y, n_groups, &pro);
}

/* postnorm=fused (mc_gemv_post): the GEMV without a norm, bias, residual or GLU, then the grid's
 * last block folds gemma3's post norm and its residual add (post_norm.cuh). Per call: what
 * gemv_q8_0_int reads and writes, and the last block reads y, pn.w and pn.x and writes pn.x
 * (w.rows floats each). */
template <int KS, int WARPS>
__global__ void __launch_bounds__(32 * WARPS, 16 / WARPS)
    gemv_q8_0_int_post(const mc_matrix w, const float *x, float *y, uint32_t n_groups, const mc_post_args pn) {
    gemv_q8_0_int_body<0, 0, KS, WARPS>(w, x, NULL, 0.0f, NULL, NULL, y, n_groups);
    mc_post_norm_last(pn, y, w.rows);
}

/* ---- launch ------------------------------------------------------------------------------- */

#define MC_Q8X_SMEM_MAX (96u * 1024u)

/* q8=auto and int-8w: every Q8_0 matrix whose quantized x fits in shared memory (up to 30,240
 * columns). q8=rows, the rule before: only where a block of 8 warps has rows enough for the
 * quantization of x to pay (rows >= cols / 2: not a down projection, which takes the float
 * row-group kernel). */
int mc_gemv_q8_serves(const mc_config *c, const mc_matrix *w) {
    if (c->q8 != MC_Q8_AUTO && c->q8 != MC_Q8_ROWS && c->q8 != MC_Q8_INT8W)
        return 0;
    if (c->q8 == MC_Q8_ROWS && (uint64_t)w->rows * 2 < w->cols)
        return 0;
    return w->type == MEMRA_TYPE_Q8_0 && w->cols % MEMRA_Q8_0_BLOCK == 0 && w->cols > 0 &&
           mc_q8x_smem(w->cols) <= MC_Q8X_SMEM_MAX;
}

/* Warps a block: 16 (one block a multiprocessor) under q8=auto, 8 (two) under rows and int-8w. */
static uint32_t mc_q8x_warps(const mc_config *c) { return c->q8 == MC_Q8_AUTO ? 16u : MC_Q8X_WARPS; }

// clang-format off
#define MC_Q8X_EACH_W(F, W) \
    F(0, 0, 1, W) F(0, 0, 2, W) F(0, 0, 4, W) F(0, 1, 1, W) F(0, 1, 2, W) F(0, 1, 4, W) \
    F(1, 0, 1, W) F(1, 0, 2, W) F(1, 0, 4, W) F(1, 1, 1, W) F(1, 1, 2, W) F(1, 1, 4, W) \
    F(2, 0, 1, W) F(2, 0, 2, W) F(2, 0, 4, W) F(2, 1, 1, W) F(2, 1, 2, W) F(2, 1, 4, W)
#define MC_Q8X_EACH(F) MC_Q8X_EACH_W(F, 8) MC_Q8X_EACH_W(F, 16)
/* the postnorm=prologue kernels: (GLU none or GELU, KS, warps) */
#define MC_Q8X_PRO_W(F, W) F(0, 1, W) F(0, 2, W) F(0, 4, W) F(2, 1, W) F(2, 2, W) F(2, 4, W)
#define MC_Q8X_PRO_EACH(F) MC_Q8X_PRO_W(F, 8) MC_Q8X_PRO_W(F, 16)
// clang-format on

cudaError_t mc_gemv_q8_prepare(void) {
    cudaError_t e = cudaSuccess;
#define MC_Q8X_SET(S, N, K, W)                                                                                         \
    if ((e = cudaFuncSetAttribute(gemv_q8_0_int<S, N, K, W>, cudaFuncAttributeMaxDynamicSharedMemorySize,              \
                                  (int)MC_Q8X_SMEM_MAX)) != cudaSuccess)                                               \
        return e;
    MC_Q8X_EACH(MC_Q8X_SET)
#undef MC_Q8X_SET
#define MC_Q8X_SET_PRO(S, K, W)                                                                                        \
    if ((e = cudaFuncSetAttribute(gemv_q8_0_int_pro<S, K, W>, cudaFuncAttributeMaxDynamicSharedMemorySize,             \
                                  (int)MC_Q8X_SMEM_MAX)) != cudaSuccess)                                               \
        return e;
    MC_Q8X_PRO_EACH(MC_Q8X_SET_PRO)
#undef MC_Q8X_SET_PRO
    static const void *const posts[] = {(const void *)gemv_q8_0_int_post<1, 8>,  (const void *)gemv_q8_0_int_post<2, 8>,
                                        (const void *)gemv_q8_0_int_post<4, 8>,  (const void *)gemv_q8_0_int_post<1, 16>,
                                        (const void *)gemv_q8_0_int_post<2, 16>, (const void *)gemv_q8_0_int_post<4, 16>};
    for (size_t k = 0; k < sizeof posts / sizeof posts[0]; k++) {
        const void *f = posts[k];
        if ((e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MC_Q8X_SMEM_MAX)) !=
            cudaSuccess)
            return e;
    }
    return e;
}

/* One launch: gemv_q8_0_int, or with pn gemv_q8_0_int_post (no GLU, no norm). */
template <int SWIGLU, int NORM, int KS, int WARPS>
static cudaError_t mc_q8x_t(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                            const float *bias, const float *residual, float *y, cudaStream_t st,
                            const mc_post_args *pn = NULL, const mc_pro_args *pro = NULL) {
    cudaError_t e = mc_gemv_prepare();
    if (e != cudaSuccess)
        return e;
    int dev = 0;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess)
        return e;
    const uint32_t n_groups = (w->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS, slots = WARPS / KS;
    const uint32_t cap = 16 / WARPS * mc_sm_count[dev];
    /* 8 warps: the fewest blocks that give each warp slot a row group; 16: a block on every
     * multiprocessor that has a row group (qkv's 1,536 row groups in 16 slots would leave 36 of
     * 132 idle), some slots empty. The bits do not depend on the grid. */
    const uint32_t need = WARPS == 16 ? n_groups : (n_groups + slots - 1) / slots;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(need < cap ? need : cap);
    cfg.blockDim = dim3(32 * WARPS);
    cfg.dynamicSmemBytes = mc_q8x_smem(w->cols);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    if (pro) {
        if constexpr (NORM == 1 && SWIGLU != 1)
            e = pn || bias || residual ? cudaErrorInvalidValue
                                       : cudaLaunchKernelEx(&cfg, gemv_q8_0_int_pro<SWIGLU, KS, WARPS>, *w, *pro, norm_w,
                                                            eps, y, n_groups);
        else
            e = cudaErrorInvalidValue;
    } else if (pn && SWIGLU == 0 && NORM == 0)
        e = cudaLaunchKernelEx(&cfg, gemv_q8_0_int_post<KS, WARPS>, *w, x, y, n_groups, *pn);
    else if (pn)
        e = cudaErrorInvalidValue;
    else
        e = cudaLaunchKernelEx(&cfg, gemv_q8_0_int<SWIGLU, NORM, KS, WARPS>, *w, x, norm_w, eps, bias, residual, y,
                               n_groups);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

/* Column parts: cuda_common.cuh's mc_ksplit_fill (2112 warp slots: 16 warps in one block, or 8 in
 * two, on each of 132 multiprocessors); a function of the row count alone. */
uint32_t mc_q8x_ksplit(uint32_t rows) { return mc_ksplit_fill(rows); }

template <int SWIGLU, int NORM, int WARPS>
static cudaError_t mc_q8x_w(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                            const float *bias, const float *residual, float *y, cudaStream_t st,
                            const mc_post_args *pn, const mc_pro_args *pro = NULL) {
    switch (mc_q8x_ksplit(w->rows)) {
    case 1: return mc_q8x_t<SWIGLU, NORM, 1, WARPS>(c, w, x, norm_w, eps, bias, residual, y, st, pn, pro);
    case 2: return mc_q8x_t<SWIGLU, NORM, 2, WARPS>(c, w, x, norm_w, eps, bias, residual, y, st, pn, pro);
    default: return mc_q8x_t<SWIGLU, NORM, 4, WARPS>(c, w, x, norm_w, eps, bias, residual, y, st, pn, pro);
    }
}

template <int SWIGLU, int NORM>
static cudaError_t mc_q8x_any(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                              const float *bias, const float *residual, float *y, cudaStream_t st,
                              const mc_post_args *pn = NULL) {
    return mc_q8x_warps(c) == 16 ? mc_q8x_w<SWIGLU, NORM, 16>(c, w, x, norm_w, eps, bias, residual, y, st, pn)
                                 : mc_q8x_w<SWIGLU, NORM, 8>(c, w, x, norm_w, eps, bias, residual, y, st, pn);
}

cudaError_t mc_gemv_q8_post(const mc_config *c, const mc_matrix *w, const float *x, float *y, const mc_post_args *pn,
                            cudaStream_t st) {
    if (!mc_gemv_q8_serves(c, w) || !pn)
        return cudaErrorInvalidValue;
    return mc_q8x_any<0, 0>(c, w, x, NULL, 0.0f, NULL, NULL, y, st, pn);
}

/* postnorm=prologue: the integer kernel with its norm (GLU none or GELU) and the prologue. */
bool mc_gemv_q8_pro_serves(const mc_config *c, const mc_matrix *w, int glu) {
    return mc_gemv_q8_serves(c, w) && w->cols <= MC_PRO_COLS && (glu == MC_GLU_NONE || glu == MC_GLU_GELU) &&
           (glu == MC_GLU_NONE || w->rows % 2 == 0);
}

cudaError_t mc_gemv_q8_pro(const mc_config *c, int glu, const mc_matrix *w, const mc_pro_args *pro,
                           const float *norm_w, float eps, float *y, cudaStream_t st) {
    if (!pro || !pro->po || !pro->x || !pro->w || !norm_w || !mc_gemv_q8_pro_serves(c, w, glu))
        return cudaErrorInvalidValue;
    const bool w16 = mc_q8x_warps(c) == 16;
    if (glu == MC_GLU_GELU)
        return w16 ? mc_q8x_w<MC_GLU_GELU, 1, 16>(c, w, pro->x, norm_w, eps, NULL, NULL, y, st, NULL, pro)
                   : mc_q8x_w<MC_GLU_GELU, 1, 8>(c, w, pro->x, norm_w, eps, NULL, NULL, y, st, NULL, pro);
    return w16 ? mc_q8x_w<0, 1, 16>(c, w, pro->x, norm_w, eps, NULL, NULL, y, st, NULL, pro)
               : mc_q8x_w<0, 1, 8>(c, w, pro->x, norm_w, eps, NULL, NULL, y, st, NULL, pro);
}

cudaError_t mc_gemv_q8(const mc_config *c, int glu, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                       const float *bias, const float *residual, float *y, cudaStream_t st) {
    if (glu == MC_GLU_GELU)
        return norm_w ? mc_q8x_any<MC_GLU_GELU, 1>(c, w, x, norm_w, eps, bias, residual, y, st)
                      : mc_q8x_any<MC_GLU_GELU, 0>(c, w, x, norm_w, eps, bias, residual, y, st);
    if (glu)
        return norm_w ? mc_q8x_any<1, 1>(c, w, x, norm_w, eps, bias, residual, y, st)
                      : mc_q8x_any<1, 0>(c, w, x, norm_w, eps, bias, residual, y, st);
    return norm_w ? mc_q8x_any<0, 1>(c, w, x, norm_w, eps, bias, residual, y, st)
                  : mc_q8x_any<0, 0>(c, w, x, norm_w, eps, bias, residual, y, st);
}

int mc_experts_int(const mc_config *c, const mc_matrix *w) {
    return c->experts == MC_EXPERTS_INT && w->type == MEMRA_TYPE_Q8_0 && w->cols % MEMRA_Q8_0_BLOCK == 0 &&
           w->cols > 0 && mc_q8x_smem(w->cols) <= MC_Q8X_SMEM_MAX;
}

template <int SWIGLU, int NORM, int KS>
static cudaError_t mc_q8x_experts_t(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                    uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                    const float *norm_w, float eps, float *y, uint32_t ldy, cudaStream_t st) {
    static int ready[MC_MAX_DEVICES]; /* this instantiation's shared-memory limit set on the device */
    const cudaError_t e = mc_gemv_prepare();
    return e != cudaSuccess ? e
                            : mc_experts_go(c, gemv_q8_0_int_experts<SWIGLU, NORM, KS>, ready, (int)MC_Q8X_SMEM_MAX, 16u,
                                            KS, mc_q8x_smem(w->cols), w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps,
                                            y, ldy, st);
}

cudaError_t mc_gemv_experts_q8int(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                  uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                  const float *norm_w, float eps, int glu, float *y, uint32_t ldy, cudaStream_t st) {
    if (!mc_experts_int(c, w) || !w->scales || (glu != MC_GLU_NONE && glu != MC_GLU_SILU) ||
        (glu != MC_GLU_NONE) != (norm_w != NULL) || k == 0 || k > 65535 || rows_e == 0 ||
        (glu && rows_e % 2)) /* the experts' range: mc_experts_go */
        return cudaErrorInvalidValue;
    const uint64_t all = (uint64_t)rows_e * k; /* the column split of a GEMV of all k experts' rows */
    const uint32_t ks = mc_q8x_ksplit(all < 0xffffffffu ? (uint32_t)all : 0xffffffffu);
#define MC_Q8E(S, N)                                                                                                   \
    (ks == 1   ? mc_q8x_experts_t<S, N, 1>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st)             \
     : ks == 2 ? mc_q8x_experts_t<S, N, 2>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st)             \
               : mc_q8x_experts_t<S, N, 4>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st))
    return glu ? MC_Q8E(1, 1) : MC_Q8E(0, 0);
#undef MC_Q8E
}

cudaError_t mc_gemv_q8_trigger_addr(void **p) { return cudaGetSymbolAddress(p, mc_trigger_mask); }

const char *mc_gemv_q8_family(const void *f) {
    static const mc_family_row table[] = {
#define MC_Q8X_ROW(S, N, K, W)                                                                                         \
    {(const void *)gemv_q8_0_int<S, N, K, W>, (S) == MC_GLU_GELU ? "gemv_geglu" : (S) ? "gemv_swiglu" : "gemv"},
        MC_Q8X_EACH(MC_Q8X_ROW)
#undef MC_Q8X_ROW
            {(const void *)gemv_q8_0_int_post<1, 8>, "gemv_postnorm"},
        {(const void *)gemv_q8_0_int_post<2, 8>, "gemv_postnorm"},
        {(const void *)gemv_q8_0_int_post<4, 8>, "gemv_postnorm"},
        {(const void *)gemv_q8_0_int_post<1, 16>, "gemv_postnorm"},
        {(const void *)gemv_q8_0_int_post<2, 16>, "gemv_postnorm"},
        {(const void *)gemv_q8_0_int_post<4, 16>, "gemv_postnorm"},
#define MC_Q8X_ROW_PRO(S, K, W) {(const void *)gemv_q8_0_int_pro<S, K, W>, (S) ? "gemv_prologue_glu" : "gemv_prologue"},
        MC_Q8X_PRO_EACH(MC_Q8X_ROW_PRO)
#undef MC_Q8X_ROW_PRO
        {(const void *)gemv_q8_0_int_experts<0, 0, 1>, "gemv_experts"},
        {(const void *)gemv_q8_0_int_experts<0, 0, 2>, "gemv_experts"},
        {(const void *)gemv_q8_0_int_experts<0, 0, 4>, "gemv_experts"},
        {(const void *)gemv_q8_0_int_experts<1, 1, 1>, "gemv_experts"},
        {(const void *)gemv_q8_0_int_experts<1, 1, 2>, "gemv_experts"},
        {(const void *)gemv_q8_0_int_experts<1, 1, 4>, "gemv_experts"},
    };
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
