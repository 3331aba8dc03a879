/* gemv_mma.cuh: what gemv=mma's chunk kernels share (gemv_mma.cu's mma.sync tiles and
 * gemv_wgmma.cu's warpgroup kernel): the parts of the k-blocks, a finished group's store, and the
 * epilogue from the table of part sums. One copy, so that every chunk kernel ends each output
 * element with decode's operations. */
#pragma once

#include "cuda_common.cuh"

/* The first k-block of part p of KS over nkb k-blocks. */
__device__ __forceinline__ uint32_t mc_mma_part(uint32_t nkb, uint32_t ks, uint32_t p) {
    return (uint32_t)((uint64_t)nkb * p / ks);
}

/* A finished group of 4 rows (the parts added): the 1/rms product, then mc_rows_store. */
template <int GLU>
__device__ __forceinline__ void mc_mma_store(float (&d)[MC_GEMV_ROWS], bool scaled, float scale, uint32_t r0,
                                             uint32_t rows, const float *bias, const float *residual, float *y) {
    if (scaled)
#pragma unroll
        for (uint32_t j = 0; j < MC_GEMV_ROWS; j++)
            d[j] = __fmul_rn(d[j], scale);
    mc_rows_store<GLU>(d, r0, rows, bias, residual, y);
}

/* A chunk block's outputs from its table f of part sums (row of x tok, weight row r at f[tok LD +
 * r]: BT rows of x by BR weight rows, complete and visible to the block): each (row of x, group of
 * 4 weight rows) of the block's rb .. and t0 .. through mc_mma_store with that row's 1/rms (rs,
 * when there is a norm), bias, residual. */
template <int GLU, uint32_t BR, uint32_t BT, uint32_t LD, uint32_t NTH>
__device__ __forceinline__ void mc_mma_epilogue(const float *f, uint32_t rb, uint32_t t0, uint32_t ntok, uint32_t rows,
                                                const float *rs, const float *bias, const float *res, uint32_t ldr,
                                                float *y, uint32_t ldy) {
    for (uint32_t k = threadIdx.x; k < BT * BR / 4; k += NTH) { /* (row of x, group of 4 weight rows) */
        const uint32_t grp = k % (BR / 4), tok = k / (BR / 4), r0 = rb + 4 * grp;
        if (tok >= ntok || r0 >= rows)
            continue;
        const float4 v = *(const float4 *)&f[tok * LD + 4 * grp];
        float d[MC_GEMV_ROWS] = {v.x, v.y, v.z, v.w};
        const size_t tt = (size_t)t0 + tok;
        mc_mma_store<GLU>(d, rs != NULL, rs ? rs[tt] : 1.0f, r0, rows, bias, res ? res + tt * ldr : NULL, y + tt * ldy);
    }
}
