/* rmsnorm_cuda.cu: the cuda flavour of the example op plugin (rmsnorm.c's vtable names it when
 * the build found CUDA): memra_op_vtable's cuda_rmsnorm, device pointers, enqueued on the
 * backend's stream. One block of 256 threads per row: thread t sums x[i]^2 over i = t (mod 256)
 * in increasing i, the partial sums are added by a fixed tree (distance 128, 64, ..., 1), then
 * out[i] = (x[i] * scale) * w[i], scale = 1 / sqrtf(sum / n + eps), each operation rounded on its
 * own: the same bits on every run and in a CUDA graph replay. This is, operation for operation,
 * the order of the cuda backend's built-in unfused norm (backends/cuda/op_glue.cu,
 * mc_op_rmsnorm: 256 threads, strided partial sums in increasing i, the same fixed tree, the
 * same __fadd_rn/__fmul_rn/__fdiv_rn/__fsqrt_rn; keep the two in step): `cuda:norm=unfused`
 * against `cuda:norm=unfused,op.rmsnorm=example` (and cuda-graph) is exact. The default
 * `cuda` (norm=fused) folds the norm into the next GEMV (the scale applied after the dot
 * product), other bits: gate it against `cuda` with --compare nmse:1e-6. */
#include <cuda_runtime.h>

#include "memra/plugin.h"

__global__ void example_rmsnorm_kernel(const float *x, const float *w, uint32_t n, float eps, float *out) {
    __shared__ float part[256];
    const uint32_t t = threadIdx.x;
    const float *xr = x + (size_t)blockIdx.x * n;
    float *outr = out + (size_t)blockIdx.x * n;
    float acc = 0.0f;
    for (uint32_t i = t; i < n; i += 256)
        acc = __fadd_rn(acc, __fmul_rn(xr[i], xr[i]));
    part[t] = acc;
    __syncthreads();
    for (uint32_t s = 128; s > 0; s >>= 1) {
        if (t < s)
            part[t] = __fadd_rn(part[t], part[t + s]);
        __syncthreads();
    }
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(part[0], (float)n), eps)));
    /* out may be x: each thread writes only the elements it reads */
    for (uint32_t i = t; i < n; i += 256)
        outr[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
}

extern "C" memra_status example_cuda_rmsnorm(memra_op *op, const memra_op_ctx *ctx, const float *x, const float *w,
                                             uint32_t n, uint32_t rows, float eps, float *out, void *stream,
                                             memra_error *err) {
    (void)op, (void)ctx;
    if (rows == 0 || n == 0)
        return MEMRA_OK;
    example_rmsnorm_kernel<<<rows, 256, 0, (cudaStream_t)stream>>>(x, w, n, eps, out);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return memra_fail(err, MEMRA_E_DEVICE, "example: launch of the rmsnorm kernel: %s", cudaGetErrorString(e));
    return MEMRA_OK;
}
