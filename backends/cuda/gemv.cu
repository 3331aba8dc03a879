/* gemv.cu: the F32/F16/BF16 GEMVs (and the float path of Q8_0), with the RMSNorm of x, a bias,
 * a residual or the SwiGLU of interleaved gate/up rows fused in.
 *
 * Decode at batch 1 is bound by the bytes it reads, so the GEMVs carry the weight: one warp per
 * four output rows (gate/up interleaved, so SwiGLU is the epilogue), 16-byte streaming loads, two
 * chunks of each row in flight and the next two prefetched, each x chunk loaded once for the four
 * rows, the RMSNorm of x fused in (its sum of squares accumulated along the way), fp32
 * accumulation in a fixed lane order and a fixed xor-shuffle tree, and programmatic dependent
 * launch so a GEMV's first weights stream while the kernel before it drains. Matrices of few
 * rows split their columns over 2 or 4 warps (parts added in order). Two kernels with the same
 * arithmetic per row group, hence the same bits: gemv_rowgroup (each warp one row group) and
 * gemv_persistent (a grid of at most 4 blocks per multiprocessor whose warps stream row group
 * after row group, for short rows). The mixture-of-experts GEMVs built on the same row groups are
 * in gemv_moe.cu. Measurements: bench/gpu/NOTES.md. */
#include "cuda_common.cuh"
#include "gemv_body.cuh" /* the helpers and gemv_persistent_body */
#include "gemv_quant.h"
#include "post_norm.cuh"

MC_DYNAMIC_SMEM_ANCHOR(mc_smem_anchor_gemv)

uint32_t mc_sm_count[MC_MAX_DEVICES];

uint32_t mc_type_elem_bytes(uint32_t type) {
    switch (type) {
    case MEMRA_TYPE_F32: return 4;
    case MEMRA_TYPE_F16:
    case MEMRA_TYPE_BF16: return 2;
    case MEMRA_TYPE_Q8_0: return 1;
    default: return 0;
    }
}

static uint64_t mc_stride_of(uint32_t type, uint64_t cols) {
    uint64_t per16 = 16 / mc_type_elem_bytes(type);
    return (cols + per16 - 1) / per16 * per16;
}

uint64_t mc_matrix_bytes(uint32_t type, uint64_t rows, uint64_t cols) {
    uint64_t data_row = 0, aux_row = 0;
    if (mc_qlayout_legacy(type, cols, &data_row, &aux_row) || mc_qlayout_kquant(type, cols, &data_row, &aux_row))
        return rows * (data_row + aux_row);
    uint64_t eb = mc_type_elem_bytes(type);
    if (eb == 0)
        return 0;
    uint64_t bytes = rows * mc_stride_of(type, cols) * eb;
    if (type == MEMRA_TYPE_Q8_0)
        bytes += rows * (cols / MEMRA_Q8_0_BLOCK) * 2;
    return bytes;
}

/* ---- gemv_rowgroup: one warp (or KS warps) per group of 4 rows -------------------------------- */

/* Per call (one matrix a token): reads rows x stride weight bytes (streamed), x (cols floats,
 * cached), norm_w (cols floats), bias and residual (rows floats); writes y (rows floats; rows/2
 * for swiglu: y[p] = silu(row 2p) * row 2p+1). The float path of Q8_0 too (T = Q8_0: the weight
 * bytes and their f16 block scales). */
template <uint32_t T, int SWIGLU, int NORM, int KS>
__device__ __forceinline__ void gemv_rowgroup_body(const mc_matrix w, const float *x, const float *norm_w, float eps,
                                                   const float *bias, const float *residual, float *y) {
    __shared__ float red[MC_GEMV_WARPS][MC_GEMV_ROWS + 1];
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % KS;
    const uint32_t r0 = (blockIdx.x * (MC_GEMV_WARPS / KS) + warp / KS) * MC_GEMV_ROWS;
    const bool live = r0 < w.rows;
    float d[MC_GEMV_ROWS], ss = 0.0f;
    if (live)
        mc_rows_dot<T, NORM, KS>(w, r0, x, norm_w, lane, part, d, ss);
    mc_rowgroup_finish<SWIGLU, NORM, KS>(red, warp, lane, part, live, d, ss, w.cols, eps, r0, w.rows, bias, residual,
                                         y);
}

template <uint32_t T, int SWIGLU, int NORM, int KS>
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS, 4)
    gemv_rowgroup(const mc_matrix w, const float *x, const float *norm_w, float eps, const float *bias,
                  const float *residual, float *y) {
    gemv_rowgroup_body<T, SWIGLU, NORM, KS>(w, x, norm_w, eps, bias, residual, y);
}

/* postnorm=fused (mc_gemv_post): the row-group GEMV without a norm, bias, residual or GLU, then
 * the grid's last block folds gemma3's post norm and its residual add (post_norm.cuh). Per call:
 * what gemv_rowgroup reads and writes, and the last block reads y, pn.w and pn.x and writes pn.x
 * (w.rows floats each). */
template <uint32_t T, int KS>
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS, 4)
    gemv_rowgroup_post(const mc_matrix w, const float *x, float *y, const mc_post_args pn) {
    gemv_rowgroup_body<T, 0, 0, KS>(w, x, NULL, 0.0f, NULL, NULL, y);
    mc_post_norm_last(pn, y, w.rows);
}

/* gemv_persistent: gemv_persistent_body (gemv_body.cuh) over this launch's grid. */
template <uint32_t T, int SWIGLU, int NORM, int KS>
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS, 4)
    gemv_persistent(const mc_matrix w, const float *x, const float *norm_w, float eps, const float *bias,
                    const float *residual, float *y, uint32_t n_groups) {
    gemv_persistent_body<T, SWIGLU, NORM, KS>(w, x, norm_w, eps, bias, residual, y, n_groups, blockIdx.x, gridDim.x,
                                              mc_pdl_wait{MC_TRIGGER_GEMV});
}

/* postnorm=fused on the persistent kernel (as gemv_rowgroup_post). */
template <uint32_t T, int KS>
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS, 4)
    gemv_persistent_post(const mc_matrix w, const float *x, float *y, uint32_t n_groups, const mc_post_args pn) {
    gemv_persistent_body<T, 0, 0, KS>(w, x, NULL, 0.0f, NULL, NULL, y, n_groups, blockIdx.x, gridDim.x,
                                      mc_pdl_wait{MC_TRIGGER_GEMV});
    mc_post_norm_last(pn, y, w.rows);
}

/* ---- launch ------------------------------------------------------------------------------- */

/* Warps per row group (the columns split KS ways, parts added in order): matrices of few rows
 * would leave most of the GPU idle with one warp per 4 rows. The largest KS whose grid still fits
 * one wave of 4 blocks on each of 132 multiprocessors (rows * KS / 16 <= 528): a second, partial
 * wave costs more than the split gains. A function of the row count alone, so every arm gets the
 * same bits. */
uint32_t mc_gemv_ksplit(uint32_t rows) {
    const uint32_t wave_rows = 528u * (MC_GEMV_WARPS * MC_GEMV_ROWS); /* 8448 */
    return (uint64_t)rows * 4 <= wave_rows ? 4 : (uint64_t)rows * 2 <= wave_rows ? 2 : 1;
}

/* One launch: gemv_rowgroup, or with pn gemv_rowgroup_post (no GLU, no norm). */
template <uint32_t T, int SWIGLU, int NORM, int KS>
static cudaError_t mc_gemv_rowgroup_t(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w,
                                      float eps, const float *bias, const float *residual, float *y, cudaStream_t st,
                                      const mc_post_args *pn) {
    const uint32_t per_block = MC_GEMV_WARPS / KS * MC_GEMV_ROWS;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((w->rows + per_block - 1) / per_block);
    cfg.blockDim = dim3(32 * MC_GEMV_WARPS);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    cudaError_t e;
    if (pn && SWIGLU == 0 && NORM == 0)
        e = cudaLaunchKernelEx(&cfg, gemv_rowgroup_post<T, KS>, *w, x, y, *pn);
    else if (pn)
        e = cudaErrorInvalidValue;
    else
        e = cudaLaunchKernelEx(&cfg, gemv_rowgroup<T, SWIGLU, NORM, KS>, *w, x, norm_w, eps, bias, residual, y);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

/* Whether an F32/F16/BF16 GEMV uses gemv_persistent: with gemv=auto, for short rows (at most 4
 * iterations of a warp per row group: llama-1b, 2048 columns; llama-8b's wo), where the row-group
 * kernel pays its start and drain per row group; on long rows it is the slower one. gemv=rowgroup
 * or gemv=persistent takes one everywhere: the same bits. */
static int mc_gemv_persistent_on(const mc_config *c, const mc_matrix *w, uint32_t ks) {
    if (c->gemv != MC_GEMV_AUTO && c->gemv != MC_GEMV_MMA) /* mma: auto's choice where it does not serve */
        return c->gemv == MC_GEMV_PERSISTENT;
    const uint64_t nfull = w->cols / (16 / mc_type_elem_bytes(w->type));
    return (nfull + 64 * ks - 1) / (64 * ks) <= 4;
}

template <uint32_t T, int SWIGLU, int NORM, int KS>
static cudaError_t mc_gemv_persistent_t(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w,
                                        float eps, const float *bias, const float *residual, float *y, cudaStream_t st,
                                        const mc_post_args *pn) {
    cudaError_t e = mc_gemv_prepare();
    if (e != cudaSuccess)
        return e;
    int dev = 0;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess)
        return e;
    const uint32_t n_groups = (w->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS, slots = MC_GEMV_WARPS / KS;
    const uint32_t need = (n_groups + slots - 1) / slots, cap = 4 * mc_sm_count[dev];
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(need < cap ? need : cap);
    cfg.blockDim = dim3(32 * MC_GEMV_WARPS);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    if (pn && SWIGLU == 0 && NORM == 0)
        e = cudaLaunchKernelEx(&cfg, gemv_persistent_post<T, KS>, *w, x, y, n_groups, *pn);
    else if (pn)
        e = cudaErrorInvalidValue;
    else
        e = cudaLaunchKernelEx(&cfg, gemv_persistent<T, SWIGLU, NORM, KS>, *w, x, norm_w, eps, bias, residual, y,
                               n_groups);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

template <int SWIGLU, int NORM, int KS>
static cudaError_t mc_gemv_typed_ks(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w,
                                    float eps, const float *bias, const float *residual, float *y, cudaStream_t st,
                                    const mc_post_args *pn) {
#define MC_P(T) mc_gemv_persistent_t<T, SWIGLU, NORM, KS>(c, w, x, norm_w, eps, bias, residual, y, st, pn)
#define MC_R(T) mc_gemv_rowgroup_t<T, SWIGLU, NORM, KS>(c, w, x, norm_w, eps, bias, residual, y, st, pn)
    if (w->type != MEMRA_TYPE_Q8_0 && mc_gemv_persistent_on(c, w, KS))
        switch (w->type) {
        case MEMRA_TYPE_F32: return MC_P(MEMRA_TYPE_F32);
        case MEMRA_TYPE_F16: return MC_P(MEMRA_TYPE_F16);
        case MEMRA_TYPE_BF16: return MC_P(MEMRA_TYPE_BF16);
        default: return cudaErrorInvalidValue;
        }
    switch (w->type) {
    case MEMRA_TYPE_F32: return MC_R(MEMRA_TYPE_F32);
    case MEMRA_TYPE_F16: return MC_R(MEMRA_TYPE_F16);
    case MEMRA_TYPE_BF16: return MC_R(MEMRA_TYPE_BF16);
    case MEMRA_TYPE_Q8_0: return MC_R(MEMRA_TYPE_Q8_0);
    default: return cudaErrorInvalidValue;
    }
#undef MC_P
#undef MC_R
}

template <int SWIGLU, int NORM>
static cudaError_t mc_gemv_typed(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                                 const float *bias, const float *residual, float *y, cudaStream_t st,
                                 const mc_post_args *pn = NULL) {
    switch (mc_gemv_ksplit(w->rows)) {
    case 1: return mc_gemv_typed_ks<SWIGLU, NORM, 1>(c, w, x, norm_w, eps, bias, residual, y, st, pn);
    case 2: return mc_gemv_typed_ks<SWIGLU, NORM, 2>(c, w, x, norm_w, eps, bias, residual, y, st, pn);
    default: return mc_gemv_typed_ks<SWIGLU, NORM, 4>(c, w, x, norm_w, eps, bias, residual, y, st, pn);
    }
}

template <int SWIGLU>
static cudaError_t mc_gemv_any(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                               const float *bias, const float *residual, float *y, cudaStream_t st) {
    switch (w->type) { /* the quantized families beyond Q8_0 (gemv_quant.h) */
    case MEMRA_TYPE_Q4_0:
    case MEMRA_TYPE_Q4_1:
    case MEMRA_TYPE_Q5_0:
    case MEMRA_TYPE_Q5_1: return mc_gemv_legacy(c, SWIGLU, w, x, norm_w, eps, bias, residual, y, st);
    case MEMRA_TYPE_Q4_K:
    case MEMRA_TYPE_Q5_K:
    case MEMRA_TYPE_Q6_K:
        if (mc_gemv_mma_serves(c, w)) /* qdot=mma: gemv=mma's chain */
            return mc_gemv_mma(c, SWIGLU, w, x, norm_w, eps, bias, residual, y, st, NULL);
        return mc_gemv_kquant(c, SWIGLU, w, x, norm_w, eps, bias, residual, y, st);
    default: break;
    }
    if (mc_gemv_q8_serves(c, w))
        return mc_gemv_q8(c, SWIGLU, w, x, norm_w, eps, bias, residual, y, st);
    if (mc_gemv_mma_serves(c, w))
        return mc_gemv_mma(c, SWIGLU, w, x, norm_w, eps, bias, residual, y, st, NULL);
    return norm_w ? mc_gemv_typed<SWIGLU, 1>(c, w, x, norm_w, eps, bias, residual, y, st)
                  : mc_gemv_typed<SWIGLU, 0>(c, w, x, norm_w, eps, bias, residual, y, st);
}

cudaError_t mc_gemv(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                    const float *bias, const float *residual, float *y, cudaStream_t st) {
    return mc_gemv_any<0>(c, w, x, norm_w, eps, bias, residual, y, st);
}

cudaError_t mc_gemv_post(const mc_config *c, const mc_matrix *w, const float *x, float *y, const mc_post_args *pn,
                         cudaStream_t st) {
    if (!pn || !pn->w || !pn->x || !pn->ticket || w->rows == 0)
        return cudaErrorInvalidValue;
    switch (w->type) { /* the kernel mc_gemv would choose, with the fold */
    case MEMRA_TYPE_Q4_0:
    case MEMRA_TYPE_Q4_1:
    case MEMRA_TYPE_Q5_0:
    case MEMRA_TYPE_Q5_1: return mc_gemv_legacy_post(c, w, x, y, pn, st);
    case MEMRA_TYPE_Q4_K:
    case MEMRA_TYPE_Q5_K:
    case MEMRA_TYPE_Q6_K:
        if (mc_gemv_mma_serves(c, w))
            return mc_gemv_mma(c, MC_GLU_NONE, w, x, NULL, 0.0f, NULL, NULL, y, st, pn);
        return mc_gemv_kquant_post(c, w, x, y, pn, st);
    default: break;
    }
    if (mc_gemv_q8_serves(c, w))
        return mc_gemv_q8_post(c, w, x, y, pn, st);
    if (mc_gemv_mma_serves(c, w))
        return mc_gemv_mma(c, MC_GLU_NONE, w, x, NULL, 0.0f, NULL, NULL, y, st, pn);
    return mc_gemv_typed<0, 0>(c, w, x, NULL, 0.0f, NULL, NULL, y, st, pn);
}

bool mc_gemv_pro_serves(const mc_config *c, const mc_matrix *w, int glu) {
    switch (w->type) { /* the kernel mc_gemv would choose */
    case MEMRA_TYPE_Q4_0:
    case MEMRA_TYPE_Q4_1:
    case MEMRA_TYPE_Q5_0:
    case MEMRA_TYPE_Q5_1: return mc_gemv_legacy_pro_serves(c, w, glu);
    case MEMRA_TYPE_Q8_0: return mc_gemv_q8_pro_serves(c, w, glu);
    default: return false;
    }
}

cudaError_t mc_gemv_pro(const mc_config *c, const mc_matrix *w, const mc_pro_args *pro, const float *norm_w, float eps,
                        int glu, float *y, cudaStream_t st) {
    if (!mc_gemv_pro_serves(c, w, glu))
        return cudaErrorInvalidValue;
    return w->type == MEMRA_TYPE_Q8_0 ? mc_gemv_q8_pro(c, glu, w, pro, norm_w, eps, y, st)
                                      : mc_gemv_legacy_pro(c, glu, w, pro, norm_w, eps, y, st);
}

cudaError_t mc_gemv_head_argmax(const mc_config *c, const mc_matrix *w, const float *x, const mc_pro_args *pro,
                                const float *norm_w, float eps, float *y, const mc_argmax_args *a, cudaStream_t st) {
    switch (w->type) {
    case MEMRA_TYPE_Q4_K:
    case MEMRA_TYPE_Q5_K:
    case MEMRA_TYPE_Q6_K: return pro ? cudaErrorNotSupported : mc_gemv_kquant_argmax(c, w, x, norm_w, eps, y, a, st);
    case MEMRA_TYPE_Q8_0: return mc_gemv_q8_argmax(c, w, x, pro, norm_w, eps, y, a, st);
    default: return cudaErrorNotSupported;
    }
}

cudaError_t mc_gemv_swiglu(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                           float *y, cudaStream_t st) {
    return mc_gemv_glu(c, w, x, norm_w, eps, MC_GLU_SILU, y, st);
}

cudaError_t mc_gemv_glu(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps, int glu,
                        float *y, cudaStream_t st) {
    if (w->rows % 2)
        return cudaErrorInvalidValue;
    if (glu == MC_GLU_SILU)
        return mc_gemv_any<MC_GLU_SILU>(c, w, x, norm_w, eps, NULL, NULL, y, st);
    if (glu == MC_GLU_GELU)
        return mc_gemv_any<MC_GLU_GELU>(c, w, x, norm_w, eps, NULL, NULL, y, st);
    return cudaErrorInvalidValue;
}

cudaError_t mc_gemv_prepare(void) {
    int dev = 0, n = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    if (dev < 0 || dev >= MC_MAX_DEVICES)
        return cudaErrorInvalidDevice;
    if (mc_sm_count[dev])
        return cudaSuccess;
    if ((e = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
        return e;
    if ((e = mc_gemv_q8_prepare()) != cudaSuccess || (e = mc_gemv_legacy_prepare()) != cudaSuccess ||
        (e = mc_gemv_mma_prepare()) != cudaSuccess)
        return e;
    mc_sm_count[dev] = n > 0 ? (uint32_t)n : 1;
    return cudaSuccess;
}

cudaError_t mc_gemv_trigger_addr(void **p) { return cudaGetSymbolAddress(p, mc_trigger_mask); }

/* ---- census ------------------------------------------------------------------------------- */

#define MC_GEMV_EACH_KS(F, T, S, N) F(T, S, N, 1) F(T, S, N, 2) F(T, S, N, 4)
#define MC_GEMV_EACH_SN(F, T)                                                                                          \
    MC_GEMV_EACH_KS(F, T, 0, 0)                                                                                        \
    MC_GEMV_EACH_KS(F, T, 0, 1) MC_GEMV_EACH_KS(F, T, 1, 0) MC_GEMV_EACH_KS(F, T, 1, 1) MC_GEMV_EACH_KS(F, T, 2, 0)    \
        MC_GEMV_EACH_KS(F, T, 2, 1)
/* The census family of a GEMV by its GLU (MC_GLU_*). */
#define MC_GLU_FAMILY(S) ((S) == MC_GLU_GELU ? "gemv_geglu" : (S) ? "gemv_swiglu" : "gemv")

const char *mc_gemv_family(const void *f) {
    static const mc_family_row table[] = {
#define MC_ROW_R(T, S, N, K) {(const void *)gemv_rowgroup<T, S, N, K>, MC_GLU_FAMILY(S)},
#define MC_ROW_P(T, S, N, K) {(const void *)gemv_persistent<T, S, N, K>, MC_GLU_FAMILY(S)},
        MC_GEMV_EACH_SN(MC_ROW_R, MEMRA_TYPE_F32) MC_GEMV_EACH_SN(MC_ROW_R, MEMRA_TYPE_F16)
            MC_GEMV_EACH_SN(MC_ROW_R, MEMRA_TYPE_BF16) MC_GEMV_EACH_SN(MC_ROW_R, MEMRA_TYPE_Q8_0)
                MC_GEMV_EACH_SN(MC_ROW_P, MEMRA_TYPE_F32) MC_GEMV_EACH_SN(MC_ROW_P, MEMRA_TYPE_F16)
                    MC_GEMV_EACH_SN(MC_ROW_P, MEMRA_TYPE_BF16)
#undef MC_ROW_R
#undef MC_ROW_P
// clang-format off
#define MC_POST_R(T) {(const void *)gemv_rowgroup_post<T, 1>, "gemv_postnorm"}, \
    {(const void *)gemv_rowgroup_post<T, 2>, "gemv_postnorm"}, {(const void *)gemv_rowgroup_post<T, 4>, "gemv_postnorm"},
#define MC_POST_P(T) {(const void *)gemv_persistent_post<T, 1>, "gemv_postnorm"}, \
    {(const void *)gemv_persistent_post<T, 2>, "gemv_postnorm"}, {(const void *)gemv_persistent_post<T, 4>, "gemv_postnorm"},
        MC_POST_R(MEMRA_TYPE_F32) MC_POST_R(MEMRA_TYPE_F16) MC_POST_R(MEMRA_TYPE_BF16) MC_POST_R(MEMRA_TYPE_Q8_0)
        MC_POST_P(MEMRA_TYPE_F32) MC_POST_P(MEMRA_TYPE_F16) MC_POST_P(MEMRA_TYPE_BF16)
// clang-format on
#undef MC_POST_R
#undef MC_POST_P
    };
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
