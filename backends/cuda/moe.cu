/* moe.cu: the small kernels of a mixture-of-experts FFN on the cuda backend (the experts' GEMVs
 * are gemv_moe.cu's gemv_experts): the router's softmax, top-k and weights in one block; the weighted
 * combination of the slots onto the residual; and granite's residual and logit scales. The
 * formulas are cpu_moe.c's and cpu_forward.c's (memra/model_types.h defines them); the sums of the
 * softmax run in a fixed tree (the cpu backend sums in increasing expert order: cpu against cuda
 * is an nmse comparison, as for every kernel), everything else in the cpu's order. No float
 * atomics; the bits depend on the inputs and the model's shapes alone. */
#include "cuda_common.cuh"
#include "moe_route.cuh"

MC_DYNAMIC_SMEM_ANCHOR(mc_smem_anchor_moe)

/* One block of 32 * ceil(n / 32) threads: moe_route.cuh's mc_moe_route_block (the softmax, the
 * top k with ties toward the lower index, the weights; the fused router GEMV's last block runs the
 * same function). Writes sel[0 .. k) and w[0 .. k + shexp). */
__global__ void __launch_bounds__(MC_ROUTE_THREADS)
    moe_route(const float *logits, uint32_t n, uint32_t k, int norm, int shexp, int32_t *sel, float *w) {
    mc_wait_prior_grid(0); /* with pdl: the logits are complete (nothing is read before) */
    mc_moe_route_block<MC_ROUTE_THREADS>(logits, n, k, norm, shexp, sel, w);
}

/* x[i] = x[i] + scale * (sum_j w_j slots[j][i] (j in slot order, from 0) [+ w_k slots[k][i]]),
 * the scale applied only when it is not 1 (granite's residual scale), as cpu_moe_combine and
 * cpu_forward.c's residual add round: a product, then a sum, each rounded. */
__global__ void moe_combine(const float *slots, const float *w, uint32_t n_embd, uint32_t k, int shexp, float scale,
                            float *x) {
    mc_wait_prior_grid(0); /* with pdl: the slots are complete */
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_embd)
        return;
    float acc = 0.0f;
    for (uint32_t j = 0; j < k; j++)
        acc = __fadd_rn(acc, __fmul_rn(w[j], slots[(size_t)j * n_embd + i]));
    if (shexp)
        acc = __fadd_rn(acc, __fmul_rn(w[k], slots[(size_t)k * n_embd + i]));
    if (scale != 1.0f)
        acc = __fmul_rn(acc, scale);
    x[i] = __fadd_rn(x[i], acc);
}

/* x[i] = x[i] + t[i] * scale (granite's attention output onto the residual), or with x == NULL
 * t[i] = t[i] * scale (its logits times 1 / logit_scale). */
__global__ void moe_scale(float *t, uint32_t n, float scale, float *x) {
    mc_wait_prior_grid(0); /* with pdl: t is complete */
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    if (x)
        x[i] = __fadd_rn(x[i], __fmul_rn(t[i], scale));
    else
        t[i] = __fmul_rn(t[i], scale);
}

/* A launch in stream order, or with the arm's pdl key overlapping the previous kernel's drain
 * (each kernel here waits for it before reading anything: the same bits either way). */
template <typename... P, typename... A>
static cudaError_t mc_moe_launch(const mc_config *c, void (*k)(P...), dim3 grid, dim3 block, cudaStream_t st,
                                 A... args) {
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    cudaError_t e = cudaLaunchKernelEx(&cfg, k, args...);
    return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t mc_moe_route(const mc_config *c, const float *logits, uint32_t n, uint32_t k, int norm, int shexp,
                         int32_t *sel, float *w, cudaStream_t st) {
    if (n == 0 || n > MC_ROUTE_THREADS || k == 0 || k > n || k > MEMRA_MAX_EXPERTS_USED)
        return cudaErrorInvalidValue;
    return mc_moe_launch(c, moe_route, dim3(1), dim3((n + 31) / 32 * 32), st, logits, n, k, norm, shexp, sel, w);
}

cudaError_t mc_moe_combine(const mc_config *c, const float *slots, const float *w, uint32_t n_embd, uint32_t k,
                           int shexp, float scale, float *x, cudaStream_t st) {
    if (n_embd == 0)
        return cudaErrorInvalidValue;
    return mc_moe_launch(c, moe_combine, dim3((n_embd + 255) / 256), dim3(256), st, slots, w, n_embd, k, shexp, scale,
                         x);
}

cudaError_t mc_scale_add(const mc_config *c, float *t, uint32_t n, float scale, float *x, cudaStream_t st) {
    if (n == 0)
        return cudaErrorInvalidValue;
    return mc_moe_launch(c, moe_scale, dim3((n + 255) / 256), dim3(256), st, t, n, scale, x);
}

const char *mc_moe_family(const void *f) {
    if (f == (const void *)moe_route)
        return "moe_route";
    if (f == (const void *)moe_combine)
        return "moe_combine";
    if (f == (const void *)moe_scale)
        return "scale";
    return mc_gemv_experts_family(f);
}
