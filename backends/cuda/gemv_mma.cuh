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

/* q8=mma: a Q8_0 weight as a bf16, exactly (an int8 has at most 8 significant bits). p holds two
 * weights, one in the low byte of each 16-bit half; 0x4300 | (q & 127) is the bf16 128 + (q & 127),
 * 0x4300 | (q & 128) is 128 or 256 (the sign bit's weight plus 128), and their difference is q: one
 * fma.rn (m - s, an integer of at most 8 bits: exact). Decode (gemv_mma.cu) and the chunk
 * (gemv_wgmma.cu) convert with this one function. */
__device__ __forceinline__ uint32_t mc_s8_bf16x2(uint32_t p) {
    const uint32_t m = (p & 0x007F007Fu) | 0x43004300u, s = (p & 0x00800080u) | 0x43004300u;
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(s), "r"(0xBF80BF80u), "r"(m));
    return d;
}
/* Four int8 weights (columns c .. c + 3, c in the low byte) as bf16 pairs: .x columns c, c + 1; .y
 * c + 2, c + 3 (the lower column in the low half, as a BF16 row's pairs). */
__device__ __forceinline__ uint2 mc_q8_bf16x4(uint32_t w) {
    return make_uint2(mc_s8_bf16x2(__byte_perm(w, 0u, 0x4140u)), mc_s8_bf16x2(__byte_perm(w, 0u, 0x4342u)));
}
/* A lane's 8 int8 columns of a Q8_0 row (8t .. 8t + 7 of a k-block) as the uint4 of bf16 pairs a
 * BF16 row's 16 bytes give (.x columns 0, 1 .. .w 6, 7). */
__device__ __forceinline__ uint4 mc_q8_frag(uint2 v) {
    const uint2 a = mc_q8_bf16x4(v.x), b = mc_q8_bf16x4(v.y);
    return make_uint4(a.x, a.y, b.x, b.y);
}
/* A k-block's chain step under q8=mma for one accumulator: acc + scale * D, D the block's two MMAs from
 * +0 (fmaf: one rounding). */
__device__ __forceinline__ float mc_q8_scale(uint16_t scale) { return __half2float(__ushort_as_half(scale)); }
__device__ __forceinline__ float mc_q8_stepf(float acc, float scale, float d) { return fmaf(scale, d, acc); }
__device__ __forceinline__ float mc_q8_step(float acc, uint16_t scale, float d) {
    return mc_q8_stepf(acc, mc_q8_scale(scale), d);
}
