/* kquant_dot.cuh: what the K-quant GEMV kernels under qdot=auto share (gemv_kquant.cu's 16-warp,
 * 4-warp and rows-split bodies; chunk_kq_mma.cu, the prefill chunk, for x', the quant words, the
 * scales, the chunk indices and the column split): the unit's loads and quant words, x' staged per
 * 16-column chunk, and the float chain that folds one unit's six integer dots into a lane's
 * accumulator, so every kernel computes them with one piece of code. Another kernel that computes
 * the same six integers (exact dot products, however they are summed) and folds them here, in
 * gemv_kquant's lane and tree order, gets its bits (the tensor-core attempt of branch kqmma,
 * bench/gpu/NOTES.md). */
#ifndef MEMRA_CUDA_KQUANT_DOT_CUH
#define MEMRA_CUDA_KQUANT_DOT_CUH

#include "cuda_common.cuh"
#include "q8x_quant.h"

/* One unit's loads for one row. */
struct mc_kq_unit {
    uint4 q; /* 16 bytes of 4-bit quants */
    uint4 a; /* Q4_K/Q5_K: d | dmin << 16, scales[0..3], [4..7], [8..11]; Q6_K: .x = the unit's two
                  * scales, .y = d */
    uint2 h; /* Q5_K: .x the fifth bits; Q6_K: A, B (the top two bits) */
};

/* The 8 quant words of a unit (4 low-nibble words, then 4 high-nibble words), 5th / 5th-6th bits
 * merged in (Q6_K without its offset of 32): the decode kernels' and the prefill chunk's
 * (chunk_kq_mma.cu) unpacking. */
template <uint32_t T> __device__ __forceinline__ void mc_kq_words(const mc_kq_unit &u, uint32_t (&q)[8]) {
    const uint32_t w[4] = {u.q.x, u.q.y, u.q.z, u.q.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        q[k] = w[k] & 0x0F0F0F0Fu;
        q[4 + k] = (w[k] >> 4) & 0x0F0F0F0Fu;
        if (T == MEMRA_TYPE_Q5_K) {
            q[k] |= (u.h.x << (4 - k)) & 0x10101010u;
            q[4 + k] |= (u.h.x >> k) & 0x10101010u;
        } else if (T == MEMRA_TYPE_Q6_K) {
            const uint32_t A = k <= 2 ? u.h.x << (4 - 2 * k) : u.h.x >> 2;
            const uint32_t B = k <= 2 ? u.h.y << (4 - 2 * k) : u.h.y >> 2;
            q[k] |= A & 0x30303030u;
            q[4 + k] |= B & 0x30303030u;
        }
    }
}

/* A 16-column chunk of x' (v) quantized as gemv_q8.cu does (q8x_quant.h: 23 bits relative to
 * the chunk's largest element) into the planes xh[c], xm[c], xl[c]: the decode kernels' staging
 * (mc_kq_stage) and the prefill chunk's prep (chunk_kq_mma.cu) alike, each then writing its meta
 * from the chunk's figures here. */
struct mc_kq_chunk {
    float amax, sum; /* the largest |x'|, the float sum of x' in column order */
    bool finite;
    int sh, sm, sl; /* each plane's integer sum */
};
__device__ __forceinline__ mc_kq_chunk mc_kq_quant16(const float (&v)[16], uint32_t c, uint4 *xh, uint4 *xm,
                                                     uint4 *xl) {
    mc_kq_chunk k;
    float sum = 0.0f;
#pragma unroll
    for (uint32_t i = 0; i < 16; i++)
        sum += v[i];
    mc_q8x_amax16(v, k.amax, k.finite);
    uint4 h, m, l;
    mc_q8x_planes16(v, mc_q8x_inv(k.amax, k.finite), h, m, l);
    xh[c] = h;
    xm[c] = m;
    xl[c] = l;
    k.sum = sum, k.sh = mc_q8x_bsum4(h, 0), k.sm = mc_q8x_bsum4(m, 0), k.sl = mc_q8x_bsum4(l, 0);
    return k;
}

/* Chunk c of x' (16 columns of x times norm_w, when given; its squares added to ss in column
 * order: mc_q8x_load16): with QF the 16 floats into xf[16 c ..]; else mc_kq_quant16 and meta[c] =
 * (scale, the float sum of x' (the mins of Q4_K and Q5_K), 32 times the hi plane's sum, 32 times
 * (256 mid + lo) sums (Q6_K's offset of 32)). The same whichever thread stages it. */
template <int QF>
__device__ __forceinline__ void mc_kq_stage_v(float (&v)[16], const float *norm_w, uint32_t c, float &ss, uint4 *xh,
                                              uint4 *xm, uint4 *xl, int4 *meta, float *xf) {
    mc_q8x_norm16<-1>(norm_w, (size_t)c * 16, v, ss);
    if (QF) {
#pragma unroll
        for (uint32_t i = 0; i < 4; i++)
            ((float4 *)xf)[4 * c + i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
        return;
    }
    const mc_kq_chunk k = mc_kq_quant16(v, c, xh, xm, xl);
    /* the scale (NaN for a non-finite chunk: it stays visible), the sum of x' (the mins), and 32
     * times the plane sums (Q6_K's q - 32 = q, less 32 times the sum of x) */
    meta[c] = make_int4(__float_as_int(mc_q8x_scale(k.amax, k.finite)), __float_as_int(k.sum), 32 * k.sh,
                        32 * (256 * k.sm + k.sl));
}
/* mc_kq_stage_v on chunk c of x as loaded. */
template <int QF>
__device__ __forceinline__ void mc_kq_stage(const float *x, const float *norm_w, uint32_t c, float &ss, uint4 *xh,
                                            uint4 *xm, uint4 *xl, int4 *meta, float *xf) {
    float v[16];
    mc_q8x_raw16(x, (size_t)c * 16, v);
    mc_kq_stage_v<QF>(v, norm_w, c, ss, xh, xm, xl, meta, xf);
}

/* Q4_K/Q5_K: the 6-bit scales and mins of the unit's two sub-blocks (2c: low nibbles, 2c + 1: high
 * ones), memra_quant_scale_min_k4's decoding two at a time: byte t of sc and m is sub-block 2c + t. */
__device__ __forceinline__ void mc_kq_scales_k4(const uint4 &a, uint32_t c, uint32_t &sc, uint32_t &m) {
    const uint32_t sh = 16 * (c & 1);
    const uint32_t A = a.y >> sh, B = a.z >> sh, E = a.w >> sh;
    if (c < 2) {
        sc = A & 0x3F3Fu;
        m = B & 0x3F3Fu;
    } else {
        sc = (E & 0x0F0Fu) | ((A >> 2) & 0x3030u);
        m = ((E >> 4) & 0x0F0Fu) | ((B >> 2) & 0x3030u);
    }
}

/* One unit of one row folded into a lane's accumulator: dh, dm, dl the integer dots of the unit's
 * low (0) and high (1) nibbles with the three planes of their chunks (meta ma, mb), a the unit's
 * scales (Q4_K/Q5_K: d | dmin << 16, scales[0..11]; Q6_K: .x its two int8 scales, .y d), c4 the
 * unit's 64-element chunk in its block (Q4_K/Q5_K):
 *   Q4_K/Q5_K: acc + d (sc_lo D_lo s_lo + sc_hi D_hi s_hi) - dmin (m_lo S_lo + m_hi S_hi),
 *   Q6_K: acc + d (sc_lo D_lo s_lo + sc_hi D_hi s_hi) (D less 32 times the planes' sums),
 * D the chunk's integer dot as a float, s its scale, S its sum. */
template <uint32_t T>
__device__ __forceinline__ float mc_kq_fold(float acc, int dh0, int dm0, int dl0, int dh1, int dm1, int dl1,
                                            const int4 &ma, const int4 &mb, const uint4 &a, uint32_t c4) {
    if (T == MEMRA_TYPE_Q6_K) { /* q - 32 */
        dh0 -= ma.z, dh1 -= mb.z;
        dl0 -= ma.w, dl1 -= mb.w;
    }
    const float D0 = fmaf((float)dh0, 65536.0f, (float)(dm0 * 256 + dl0)) * __int_as_float(ma.x);
    const float D1 = fmaf((float)dh1, 65536.0f, (float)(dm1 * 256 + dl1)) * __int_as_float(mb.x);
    if (T == MEMRA_TYPE_Q6_K) {
        const float d = __half2float(__ushort_as_half((unsigned short)a.y));
        const float u = fmaf((float)(int8_t)(a.x >> 8), D1, (float)(int8_t)(a.x & 0xFF) * D0);
        return fmaf(d, u, acc);
    }
    const float d = __half2float(__ushort_as_half((unsigned short)(a.x & 0xFFFF)));
    const float dmin = __half2float(__ushort_as_half((unsigned short)(a.x >> 16)));
    uint32_t sc, m;
    mc_kq_scales_k4(a, c4, sc, m);
    const float u = fmaf((float)(sc >> 8), D1, (float)(sc & 0xFF) * D0);
    const float v = fmaf((float)(m >> 8), __int_as_float(mb.y), (float)(m & 0xFF) * __int_as_float(ma.y));
    return fmaf(-dmin, v, fmaf(d, u, acc));
}

/* Column parts: cuda_common.cuh's mc_ksplit_balance (a function of the row count). */
static inline uint32_t mc_kq_ksplit(uint32_t rows) { return mc_ksplit_balance(rows); }

/* The x chunks of unit n's low and high nibbles (kquant_layout.h). */
template <uint32_t T> __device__ __forceinline__ uint32_t mc_kq_clo(uint32_t n) {
    return T == MEMRA_TYPE_Q6_K ? 2 * n - (n & 3) : 2 * n - (n & 1);
}
template <uint32_t T> __device__ __forceinline__ uint32_t mc_kq_chi(uint32_t n) {
    return mc_kq_clo<T>(n) + (T == MEMRA_TYPE_Q6_K ? 4 : 2);
}

#endif
