/* faultyop_cuda.cu: the cuda flavour of the TEST-ONLY op plugin faultyop (faultyop.c): RMSNorm of
 * `rows` rows (one block of 256 threads a row, a fixed tree) and the F32 GEMV (one warp a row, lane
 * j over columns j (mod 32), a fixed butterfly), deterministic, with one bit of one output flipped
 * when the call's site and layer are the armed ones and the position word in device memory
 * (ctx->position_dev, what a graph replay updates) equals the armed position. */
#include <cuda_runtime.h>
#include <string.h>

#include "faultyop.h"

__device__ static void flip_if(float *y, bool armed, const int32_t *pos_dev, uint32_t pos, uint32_t bit) {
    if (armed && pos_dev && (uint32_t)*pos_dev == pos)
        *y = __uint_as_float(__float_as_uint(*y) ^ (1u << bit));
}

__global__ void faultyop_rmsnorm_kernel(const float *x, const float *w, uint32_t n, float eps, float *out, bool armed,
                                        const int32_t *pos_dev, uint32_t pos, uint32_t index, uint32_t bit) {
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
    for (uint32_t i = t; i < n; i += 256) {
        outr[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
        if (blockIdx.x == 0 && i == index)
            flip_if(&outr[i], armed, pos_dev, pos, bit);
    }
}

__global__ void faultyop_gemv_kernel(const float *w, size_t row_floats, uint32_t rows, uint32_t cols, const float *x,
                                     float *y, bool armed, const int32_t *pos_dev, uint32_t pos, uint32_t index,
                                     uint32_t bit) {
    const uint32_t row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    const float *wr = w + (size_t)row * row_floats;
    float acc = 0.0f;
    for (uint32_t c = lane; c < cols; c += 32)
        acc = __fadd_rn(acc, __fmul_rn(wr[c], x[c]));
    for (uint32_t d = 16; d > 0; d >>= 1)
        acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, d));
    if (lane == 0) {
        y[row] = acc;
        if (row == index)
            flip_if(&y[row], armed, pos_dev, pos, bit);
    }
}

static memra_status launched(memra_error *err, const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return memra_fail(err, MEMRA_E_DEVICE, "faultyop: launch of the %s kernel: %s", what, cudaGetErrorString(e));
    return MEMRA_OK;
}

extern "C" memra_status faultyop_cuda_rmsnorm(memra_op *op, const memra_op_ctx *ctx, const float *x, const float *w,
                                              uint32_t n, uint32_t rows, float eps, float *out, void *stream,
                                              memra_error *err) {
    if (rows == 0 || n == 0)
        return MEMRA_OK;
    const faultyop_cfg *c = faultyop_config(op);
    faultyop_rmsnorm_kernel<<<rows, 256, 0, (cudaStream_t)stream>>>(x, w, n, eps, out, faultyop_site_hit(c, ctx),
                                                                    ctx->position_dev, c->pos, c->index, c->bit);
    return launched(err, "rmsnorm");
}

extern "C" memra_status faultyop_cuda_gemv(memra_op *op, const memra_op_ctx *ctx, uint32_t type, const void *w,
                                           size_t row_bytes, uint32_t rows, uint32_t cols, const float *x, float *y,
                                           void *stream, memra_error *err) {
    (void)type; /* F32 only (cuda_gemv_types) */
    if (rows == 0)
        return MEMRA_OK;
    const faultyop_cfg *c = faultyop_config(op);
    faultyop_gemv_kernel<<<(rows + 7) / 8, 256, 0, (cudaStream_t)stream>>>((const float *)w, row_bytes / sizeof(float),
                                                                           rows, cols, x, y, faultyop_site_hit(c, ctx),
                                                                           ctx->position_dev, c->pos, c->index, c->bit);
    return launched(err, "gemv");
}
