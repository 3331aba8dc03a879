/* q8x_quant.h: the activation quantization of the cuda backend's integer Q8_0 GEMV, shared by
 * the kernel (gemv_q8_0_int in gemv_q8.cu) and a host test (C), so the test checks the code the
 * kernel runs.
 *
 * Per 16-column chunk of x' (x times the norm weight): amax = max |x'|, scale s = amax / QMAX,
 * q = rint(x' / s) with |q| <= QMAX = 127 * 2^16, written as three int8 planes q = 2^16 hi + 2^8
 * mid + lo. A chunk's dot with 16 int8 weights is then exact in 32-bit integers (three dp4a
 * chains, each at most 16 * 128 * 128 in magnitude) and is scaled once: (2^16 dot_hi + (2^8
 * dot_mid + dot_lo)) * (d_w * s). A chunk with a non-finite element gets s = NaN and q = 0, so
 * the NaN reaches the output instead of vanishing in the integers. */
#ifndef MEMRA_Q8X_QUANT_H
#define MEMRA_Q8X_QUANT_H

#include <math.h>

#ifdef __CUDACC__
#define MC_Q8X_HD __host__ __device__ __forceinline__
#else
#define MC_Q8X_HD static inline
#endif

#define MC_Q8X_QMAX 8323072.0f /* 127 * 2^16 */

/* q in [-QMAX, QMAX] into hi, mid, lo, each in [-128, 127] (hi in [-127, 127]). */
MC_Q8X_HD void mc_q8x_split(int q, int *hi, int *mid, int *lo) {
    const int h = (q + 32896) >> 16; /* rounds q / 2^16 so the rest lies in [-32896, 32639] */
    const int rest = q - 65536 * h;
    const int m = (rest + 128) >> 8; /* in [-128, 127] */
    *hi = h;
    *mid = m;
    *lo = rest - 256 * m; /* in [-128, 127] */
}

/* The multiplier x' -> q of a chunk (0 for an all-zero or non-finite chunk). */
MC_Q8X_HD float mc_q8x_inv(float amax, int finite) { return finite && amax > 0.0f ? MC_Q8X_QMAX / amax : 0.0f; }

/* The chunk's scale s (q * s approximates x'); NaN for a non-finite chunk. */
MC_Q8X_HD float mc_q8x_scale(float amax, int finite) { return finite ? amax / MC_Q8X_QMAX : nanf(""); }

#ifdef __CUDACC__
/* The staging of a 32-column block of x' by a lane pair, each lane 16 columns (gemv_legacy.cu's
 * decode kernels and chunk_legacy_mma.cu's chunk preparation run these two: the same x' and sums).
 * mc_q8x_load16: the 16 floats x[off ..] into v; with the norm (NORM 1, or NORM -1 and norm_w not
 * NULL) each times norm_w[off + i], its square first added to ss in column order, one fused
 * multiply-add each (SS 0: not added; gemv_q8.cu's 8-warp blocks sum the squares apart). */
template <int NORM, int SS = 1>
__device__ __forceinline__ void mc_q8x_load16(const float *x, const float *norm_w, size_t off, float (&v)[16],
                                              float &ss) {
    const float *xc = x + off;
#pragma unroll
    for (uint32_t i = 0; i < 4; i++) {
        const float4 a = __ldg((const float4 *)xc + i);
        v[4 * i] = a.x;
        v[4 * i + 1] = a.y;
        v[4 * i + 2] = a.z;
        v[4 * i + 3] = a.w;
    }
    if (NORM == 1 || (NORM < 0 && norm_w)) {
#pragma unroll
        for (uint32_t i = 0; i < 4; i++) {
            const float4 g = __ldg((const float4 *)(norm_w + off) + i);
            if (SS) {
                ss = fmaf(v[4 * i], v[4 * i], ss);
                ss = fmaf(v[4 * i + 1], v[4 * i + 1], ss);
                ss = fmaf(v[4 * i + 2], v[4 * i + 2], ss);
                ss = fmaf(v[4 * i + 3], v[4 * i + 3], ss);
            }
            v[4 * i] *= g.x;
            v[4 * i + 1] *= g.y;
            v[4 * i + 2] *= g.z;
            v[4 * i + 3] *= g.w;
        }
    }
}

/* Four int8 values in a 32-bit word, a in the low byte (the planes' packing of every x' staging). */
__device__ __forceinline__ uint32_t mc_q8x_pack4(int a, int b, int c, int d) {
    return (uint32_t)(a & 0xff) | ((uint32_t)(b & 0xff) << 8) | ((uint32_t)(c & 0xff) << 16) | ((uint32_t)d << 24);
}

/* A plane's 16 int8 values of a chunk as one 16-byte word (mc_q8x_pack4 on each four). */
__device__ __forceinline__ uint4 mc_q8x_pack16(const int (&q)[16]) {
    return make_uint4(mc_q8x_pack4(q[0], q[1], q[2], q[3]), mc_q8x_pack4(q[4], q[5], q[6], q[7]),
                      mc_q8x_pack4(q[8], q[9], q[10], q[11]), mc_q8x_pack4(q[12], q[13], q[14], q[15]));
}

/* A lane's half of the block quantized (pair: the mask of the pass's live lanes, the partner
 * lane ^ 1 among them): the pair's absolute maximum and finiteness, the lane's words of the three
 * int8 planes, and the pair's integer sums of each plane. */
struct mc_q8x_half {
    uint32_t h[4], m[4], l[4];
    int sh, sm, sl;
    float amax;
    bool finite;
};
__device__ __forceinline__ void mc_q8x_quant16(const float (&v)[16], uint32_t pair, mc_q8x_half &q) {
    float amax = 0.0f;
    int fin = 1;
#pragma unroll
    for (uint32_t i = 0; i < 16; i++) {
        amax = fmaxf(amax, fabsf(v[i]));
        fin &= isfinite(v[i]) ? 1 : 0;
    }
    amax = fmaxf(amax, __shfl_xor_sync(pair, amax, 1)); /* the block's: the pair's maximum */
    fin &= __shfl_xor_sync(pair, fin, 1);
    q.finite = fin != 0;
    q.amax = amax;
    const float inv = mc_q8x_inv(amax, q.finite);
    int sh = 0, sm = 0, sl = 0;
#pragma unroll
    for (uint32_t i = 0; i < 4; i++) {
        uint32_t h = 0, md = 0, l = 0;
#pragma unroll
        for (uint32_t j = 0; j < 4; j++) {
            int qh, qm, ql;
            mc_q8x_split(__float2int_rn(v[4 * i + j] * inv), &qh, &qm, &ql);
            sh += qh;
            sm += qm;
            sl += ql;
            h |= (uint32_t)(qh & 0xff) << (8 * j);
            md |= (uint32_t)(qm & 0xff) << (8 * j);
            l |= (uint32_t)(ql & 0xff) << (8 * j);
        }
        q.h[i] = h;
        q.m[i] = md;
        q.l[i] = l;
    }
    q.sh = sh + __shfl_xor_sync(pair, sh, 1); /* integers: exact in either order */
    q.sm = sm + __shfl_xor_sync(pair, sm, 1);
    q.sl = sl + __shfl_xor_sync(pair, sl, 1);
}
#endif

#endif
