/* op_glue.cu: the kernels the cuda backend runs around an op plugin (memra/op.h) where its own
 * fused kernels cannot take the plugin in: the RMSNorm a GEMV otherwise fuses, as a kernel of its
 * own (when an op.gemv plugin needs a normed input and no op.rmsnorm plugin gives it), and the
 * epilogues the fused GEMVs apply as they store (bias and residual; SwiGLU of interleaved gate/up
 * rows; GELU-gated for gemma3), with the same formulas as mc_rows_store; and gemma3's post norms
 * with their residual add (mc_op_rmsnorm_add: its norm is mc_op_rmsnorm's, so a plugin's post
 * norm compares exactly; run where the post norm is not folded into the GEMV before it:
 * postnorm=launch, ranks, an op plugin at the norm or that GEMV). With norm=unfused its rmsnorm is the built-in
 * op at every norm site (the one an op.rmsnorm plugin is gated against exactly: the example's
 * cuda flavour keeps its order). Otherwise not used by an arm without op plugins and with norm=fused.
 *
 * Per call: mc_op_rmsnorm reads n floats of x and of w and writes n; the epilogues read and write
 * their rows once. */
#include <cuda_runtime.h>

#include "cuda_common.cuh"
#include "cuda_kernels.h"
#include "post_norm.cuh"

/* One block of 256 threads: thread t sums x[i]^2 over i = t (mod 256) in increasing i; the 256
 * partial sums are added by a fixed tree in shared memory (pairs at distance 128, 64, ..., 1);
 * out[i] = (x[i] * scale) * w[i], scale = 1 / sqrtf(sum / n + eps). Every multiply and add
 * rounded on its own (no fused multiply-add): the same bits on every run. post_norm.cuh's
 * mc_rmsnorm_block, which a GEMV with postnorm=fused runs in its last block: the same bits. */
template <int ADD> /* 1: out[i] = out[i] + the normed value (gemma3's post norms and their residual add) */
__global__ void op_rmsnorm_kernel(const float *x, const float *w, uint32_t n, float eps, float *out) {
    __shared__ float part[MC_NORM_PARTS];
    mc_rmsnorm_block<ADD>(x, w, n, eps, out, part);
}

cudaError_t mc_op_rmsnorm(const float *x, const float *w, uint32_t n, float eps, float *out, cudaStream_t st) {
    op_rmsnorm_kernel<0><<<1, MC_NORM_PARTS, 0, st>>>(x, w, n, eps, out);
    return cudaGetLastError();
}

/* x = x + RMSNorm(t) * w (one block, as mc_op_rmsnorm). */
cudaError_t mc_op_rmsnorm_add(const float *t, const float *w, uint32_t n, float eps, float *x, cudaStream_t st) {
    op_rmsnorm_kernel<1><<<1, MC_NORM_PARTS, 0, st>>>(t, w, n, eps, x);
    return cudaGetLastError();
}

/* Row blockIdx.x of a chunk: the one block of op_rmsnorm_kernel<1> on that row (the same bits). */
__global__ void op_rmsnorm_add_rows_kernel(const float *t, const float *w, uint32_t n, float eps, float *x) {
    __shared__ float part[MC_NORM_PARTS];
    const size_t o = (size_t)blockIdx.x * n;
    mc_rmsnorm_block<1>(t + o, w, n, eps, x + o, part);
}

cudaError_t mc_op_rmsnorm_add_rows(const float *t, const float *w, uint32_t n, float eps, float *x, uint32_t M,
                                   cudaStream_t st) {
    if (M == 0)
        return cudaSuccess;
    op_rmsnorm_add_rows_kernel<<<M, MC_NORM_PARTS, 0, st>>>(t, w, n, eps, x);
    return cudaGetLastError();
}

/* y[r] = residual[r] + (t[r] + bias[r]) (bias, residual may be NULL; residual may be y). */
__global__ void op_store_kernel(const float *t, uint32_t rows, const float *bias, const float *residual, float *y) {
    const uint32_t r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    float v = t[r];
    if (bias)
        v = __fadd_rn(v, bias[r]);
    if (residual)
        v = __fadd_rn(residual[r], v);
    y[r] = v;
}

cudaError_t mc_op_store(const float *t, uint32_t rows, const float *bias, const float *residual, float *y,
                        cudaStream_t st) {
    op_store_kernel<<<(rows + 255) / 256, 256, 0, st>>>(t, rows, bias, residual, y);
    return cudaGetLastError();
}

/* y[p] = silu(t[2p]) * t[2p + 1], p < rows / 2 (gate and up interleaved, as mc_gemv_swiglu). */
__global__ void op_swiglu_kernel(const float *t, uint32_t rows, float *y) {
    const uint32_t p = blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * p + 1 >= rows)
        return;
    const float g = t[2 * p];
    y[p] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), t[2 * p + 1]);
}

cudaError_t mc_op_swiglu(const float *t, uint32_t rows, float *y, cudaStream_t st) {
    op_swiglu_kernel<<<(rows / 2 + 255) / 256, 256, 0, st>>>(t, rows, y);
    return cudaGetLastError();
}

/* y[p] = gelu_tanh(t[2p]) * t[2p + 1]: mc_glu's formula, the one the fused GEMVs store with. */
__global__ void op_geglu_kernel(const float *t, uint32_t rows, float *y) {
    const uint32_t p = blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * p + 1 >= rows)
        return;
    y[p] = mc_glu<MC_GLU_GELU>(t[2 * p], t[2 * p + 1]);
}

cudaError_t mc_op_geglu(const float *t, uint32_t rows, float *y, cudaStream_t st) {
    op_geglu_kernel<<<(rows / 2 + 255) / 256, 256, 0, st>>>(t, rows, y);
    return cudaGetLastError();
}

template <int GLU> __global__ void glu_pair_kernel(const float *g, const float *u, uint32_t n, float *y) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = mc_glu<GLU>(g[i], u[i]);
}

cudaError_t mc_glu_pair(const float *g, const float *u, uint32_t n, int glu, float *y, cudaStream_t st) {
    if (glu == MC_GLU_SILU)
        glu_pair_kernel<MC_GLU_SILU><<<(n + 255) / 256, 256, 0, st>>>(g, u, n, y);
    else if (glu == MC_GLU_GELU)
        glu_pair_kernel<MC_GLU_GELU><<<(n + 255) / 256, 256, 0, st>>>(g, u, n, y);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

/* The head runs after its step's commit advanced the position word: the ops there read this copy. */
__global__ void op_position_before_kernel(const int32_t *pos, int32_t *out) {
    out[0] = pos[0] - 1;
}

cudaError_t mc_op_position_before(const int32_t *pos, int32_t *out, cudaStream_t st) {
    op_position_before_kernel<<<1, 1, 0, st>>>(pos, out);
    return cudaGetLastError();
}

const char *mc_op_glue_family(const void *f) {
    if (f == (const void *)op_rmsnorm_kernel<0>)
        return "op_norm";
    if (f == (const void *)op_rmsnorm_kernel<1>)
        return "post_norm";
    if (f == (const void *)op_store_kernel || f == (const void *)op_swiglu_kernel || f == (const void *)op_geglu_kernel ||
        f == (const void *)glu_pair_kernel<MC_GLU_SILU> || f == (const void *)glu_pair_kernel<MC_GLU_GELU>)
        return "op_store";
    return NULL;
}
