/* gemv_q8.cu: the Q8_0 GEMV on integer dots (gemv_q8_0_int): x quantized per 16 columns into
 * shared memory, dp4a against the int8 weights; the RMSNorm of x, a bias, a residual or the
 * SwiGLU of interleaved gate/up rows fused in as in gemv.cu (whose row-group kernel is the float
 * path of Q8_0: q8=float, and the matrices this kernel does not serve). Measurements:
 * bench/gpu/NOTES.md. */
#include "gemv_q8_body.cuh"

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

/* moe_fuse bit 2048 under experts=int (and int-gu): the gate/up of every slot in one wave of 16-warp
 * blocks (a block a multiprocessor, each a contiguous share of the k x G row groups, EXP of the
 * body), x' quantized once a block for all slots; each group's arithmetic is
 * gemv_q8_0_int_experts' at the same column split, so the same bits. Per call: what
 * gemv_q8_0_int_experts reads and writes. */
template <int KS>
__global__ void __launch_bounds__(32 * 16, 1)
    gemv_q8_0_int_experts_wave(const mc_matrix stack, const float *x, const float *norm_w, float eps, uint32_t n_groups,
                               const __grid_constant__ mc_q8x_exp ex) {
    gemv_q8_0_int_body<1, 1, KS, 16, false, 0, 1>(stack, x, norm_w, eps, NULL, NULL, NULL, n_groups, NULL, ~0u, 0,
                                                  nullptr, &ex);
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

/* commit=head (mc_gemv_q8_argmax): the head's GEMV (16-warp blocks at one column part, with the
 * output norm; with pro, postnorm=prologue's form) and greedy's argmax of its logits in one launch.
 * Per token: what gemv_q8_0_int (or gemv_q8_0_int_pro) reads and writes, and each block's part, the
 * ticket, and the last block's result, ring entry and embedding. */
__global__ void __launch_bounds__(32 * 16, 1)
    gemv_q8_0_int_argmax(const mc_matrix w, const float *x, const float *norm_w, float eps, float *y, uint32_t n_groups,
                         const __grid_constant__ mc_argmax_args a) {
    gemv_q8_0_int_body<0, 1, 1, 16, false, 1>(w, x, norm_w, eps, NULL, NULL, y, n_groups, NULL, ~0u, 0, &a);
}
__global__ void __launch_bounds__(32 * 16, 1)
    gemv_q8_0_int_pro_argmax(const mc_matrix w, const mc_pro_args pro, const float *norm_w, float eps, float *y,
                             uint32_t n_groups, const __grid_constant__ mc_argmax_args a) {
    gemv_q8_0_int_body<0, 1, 1, 16, true, 1>(w, pro.x, norm_w, eps, NULL, NULL, y, n_groups, &pro, ~0u, 0, &a);
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
    if ((e = cudaFuncSetAttribute(gemv_q8_0_int_argmax, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)MC_Q8X_SMEM_MAX)) != cudaSuccess ||
        (e = cudaFuncSetAttribute(gemv_q8_0_int_pro_argmax, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)MC_Q8X_SMEM_MAX)) != cudaSuccess)
        return e;
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

cudaError_t mc_gemv_q8_argmax(const mc_config *c, const mc_matrix *w, const float *x, const mc_pro_args *pro,
                              const float *norm_w, float eps, float *y, const mc_argmax_args *a, cudaStream_t st) {
    if (w->type != MEMRA_TYPE_Q8_0)
        return cudaErrorNotSupported;
    if (!norm_w || !a || !a->parts || !a->ticket || !a->stats || !a->token_out || !a->result || !a->pos ||
        (a->ring && !a->ring_n) || (pro && (!pro->po || !pro->x || !pro->w)) || (!pro && !x))
        return cudaErrorInvalidValue;
    /* the kernel mc_gemv (or mc_gemv_pro) would launch must be the 16-warp body at one column part */
    if (w->rows == 0 || !(pro ? mc_gemv_q8_pro_serves(c, w, MC_GLU_NONE) : mc_gemv_q8_serves(c, w)) ||
        mc_q8x_warps(c) != 16 || mc_q8x_ksplit(w->rows) != 1)
        return cudaErrorNotSupported;
    cudaError_t e = mc_gemv_prepare();
    int dev = 0;
    if (e != cudaSuccess || (e = cudaGetDevice(&dev)) != cudaSuccess)
        return e;
    /* mc_q8x_t's grid for it: a block a multiprocessor that has a row group */
    const uint32_t n_groups = (w->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS, sm = (uint32_t)mc_sm_count[dev];
    const uint32_t grid = n_groups < sm ? n_groups : sm;
    if (grid > MC_AM_PARTS_CAP)
        return cudaErrorNotSupported;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(32 * 16);
    cfg.dynamicSmemBytes = mc_q8x_smem(w->cols);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    e = pro ? cudaLaunchKernelEx(&cfg, gemv_q8_0_int_pro_argmax, *w, *pro, norm_w, eps, y, n_groups, *a)
            : cudaLaunchKernelEx(&cfg, gemv_q8_0_int_argmax, *w, x, norm_w, eps, y, n_groups, *a);
    return e != cudaSuccess ? e : cudaGetLastError();
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

int mc_experts_int(const mc_config *c, const mc_matrix *w, int glu) {
    return (c->experts == MC_EXPERTS_INT || (c->experts == MC_EXPERTS_INT_GU && glu == MC_GLU_SILU)) &&
           w->type == MEMRA_TYPE_Q8_0 && w->cols % MEMRA_Q8_0_BLOCK == 0 && w->cols > 0 &&
           mc_q8x_smem(w->cols) <= MC_Q8X_SMEM_MAX;
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

template <int KS>
static cudaError_t mc_q8x_experts_wave_t(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                         uint32_t k, uint32_t e0, uint32_t e1, const float *x, const float *norm_w,
                                         float eps, float *y, uint32_t ldy, cudaStream_t st) {
    static int ready[MC_MAX_DEVICES]; /* this instantiation's shared-memory limit set on the device */
    cudaError_t e = mc_gemv_prepare();
    int dev = 0;
    if (e != cudaSuccess || (e = cudaGetDevice(&dev)) != cudaSuccess)
        return e;
    if (dev < 0 || dev >= MC_MAX_DEVICES || (uint64_t)(e1 - e0) * rows_e > w->rows)
        return cudaErrorInvalidValue;
    if (!ready[dev]) {
        if ((e = cudaFuncSetAttribute(gemv_q8_0_int_experts_wave<KS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)MC_Q8X_SMEM_MAX)) != cudaSuccess)
            return e;
        ready[dev] = 1;
    }
    mc_q8x_exp ex;
    ex.sel = sel;
    ex.y = y;
    ex.G = (uint32_t)(((uint64_t)rows_e + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS);
    ex.rows_e = rows_e;
    ex.e0 = e0;
    ex.e1 = e1;
    ex.ldy = ldy;
    const uint32_t n_groups = ex.G * k, sm = (uint32_t)mc_sm_count[dev]; /* < 2^32: the caller's bound */
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(n_groups < sm ? n_groups : sm);
    cfg.blockDim = dim3(32 * 16);
    cfg.dynamicSmemBytes = mc_q8x_smem(w->cols);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    e = cudaLaunchKernelEx(&cfg, gemv_q8_0_int_experts_wave<KS>, *w, x, norm_w, eps, n_groups, ex);
    return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t mc_gemv_experts_q8int(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                  uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                  const float *norm_w, float eps, int glu, float *y, uint32_t ldy, cudaStream_t st) {
    if (!mc_experts_int(c, w, glu) || !w->scales || (glu != MC_GLU_NONE && glu != MC_GLU_SILU) ||
        (glu != MC_GLU_NONE) != (norm_w != NULL) || k == 0 || k > 65535 || rows_e == 0 ||
        (glu && rows_e % 2)) /* the experts' range: mc_experts_go */
        return cudaErrorInvalidValue;
    /* the column split of a GEMV of all k experts' rows: experts=int's (mc_ksplit_fill), or under int-gu
     * mc_ksplit_balance (qwen3moe-30b's 3,072 gate/up row groups: KS 2, 3 half groups for the busiest
     * of 2,112 warps against 2 whole ones) */
    const uint64_t all = (uint64_t)rows_e * k;
    const uint32_t all32 = all < 0xffffffffu ? (uint32_t)all : 0xffffffffu;
    const uint32_t ks = c->experts == MC_EXPERTS_INT_GU ? mc_ksplit_balance(all32) : mc_q8x_ksplit(all32);
#define MC_Q8E(S, N)                                                                                                   \
    (ks == 1   ? mc_q8x_experts_t<S, N, 1>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st)             \
     : ks == 2 ? mc_q8x_experts_t<S, N, 2>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st)             \
               : mc_q8x_experts_t<S, N, 4>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st))
    /* bit 2048: the gate/up (one x for every slot) in one wave, the same bits */
    if (glu && ldx == 0 && (c->moe_fuse & MC_MOE_FUSE_IWAVE) && ((uint64_t)rows_e + 3) / 4 * k < 0x80000000ull)
        return ks == 1   ? mc_q8x_experts_wave_t<1>(c, w, rows_e, sel, k, e0, e1, x, norm_w, eps, y, ldy, st)
               : ks == 2 ? mc_q8x_experts_wave_t<2>(c, w, rows_e, sel, k, e0, e1, x, norm_w, eps, y, ldy, st)
                         : mc_q8x_experts_wave_t<4>(c, w, rows_e, sel, k, e0, e1, x, norm_w, eps, y, ldy, st);
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
            {(const void *)gemv_q8_0_int_argmax, "gemv"}, /* commit=head's head */
        {(const void *)gemv_q8_0_int_pro_argmax, "gemv_prologue"},
        {(const void *)gemv_q8_0_int_experts<0, 0, 1>, "gemv_experts"},
        {(const void *)gemv_q8_0_int_experts<0, 0, 2>, "gemv_experts"},
        {(const void *)gemv_q8_0_int_experts<0, 0, 4>, "gemv_experts"},
        {(const void *)gemv_q8_0_int_experts<1, 1, 1>, "gemv_experts"},
        {(const void *)gemv_q8_0_int_experts<1, 1, 2>, "gemv_experts"},
        {(const void *)gemv_q8_0_int_experts<1, 1, 4>, "gemv_experts"},
        {(const void *)gemv_q8_0_int_experts_wave<1>, "gemv_experts"},
        {(const void *)gemv_q8_0_int_experts_wave<2>, "gemv_experts"},
        {(const void *)gemv_q8_0_int_experts_wave<4>, "gemv_experts"},
    };
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
