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
#include <stdint.h>

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

/* The planes of four values q0..q3 (each in [-QMAX - 32896, QMAX + 32639], where the digits of
 * mc_q8x_split fit): each plane's four digits of mc_q8x_split in a word, q0's in the low byte,
 * without the split's shifts and multiplies. q + 0x808080 lies in [0, 2^24) and its three low bytes
 * are the digits plus 128 (the digits of q in base 256, each in [-128, 127]: mc_q8x_split's), so a
 * plane's word is a permutation of the four words' bytes with each byte's top bit flipped (digit =
 * byte - 128 as an int8). test_q8x_quant checks it against mc_q8x_split over the whole range. */
#ifdef __CUDACC__
#define MC_Q8X_PERM(a, b, s) __byte_perm((a), (b), (s))
#define MC_Q8X_DEV __device__ __forceinline__ /* the kernels' (test_q8x_quant: the host's) */
#else
#define MC_Q8X_DEV static inline
static inline uint32_t mc_q8x_perm_host(uint32_t a, uint32_t b, uint32_t s) {
    const uint64_t ab = (uint64_t)a | (uint64_t)b << 32;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++)
        r |= (uint32_t)(ab >> (8 * ((s >> (4 * n)) & 7)) & 0xff) << (8 * n);
    return r;
}
#define MC_Q8X_PERM(a, b, s) mc_q8x_perm_host((a), (b), (s))
#endif
MC_Q8X_DEV void mc_q8x_planes4(int q0, int q1, int q2, int q3, uint32_t *h, uint32_t *m, uint32_t *l) {
    const uint32_t u0 = (uint32_t)q0 + 0x808080u, u1 = (uint32_t)q1 + 0x808080u;
    const uint32_t u2 = (uint32_t)q2 + 0x808080u, u3 = (uint32_t)q3 + 0x808080u;
    const uint32_t a = MC_Q8X_PERM(u0, u1, 0x5140u), b = MC_Q8X_PERM(u2, u3, 0x5140u); /* bytes 0, 1 */
    const uint32_t c = MC_Q8X_PERM(u0, u1, 0x0062u), d = MC_Q8X_PERM(u2, u3, 0x0062u); /* byte 2 */
    *l = MC_Q8X_PERM(a, b, 0x5410u) ^ 0x80808080u;
    *m = MC_Q8X_PERM(a, b, 0x7632u) ^ 0x80808080u;
    *h = MC_Q8X_PERM(c, d, 0x5410u) ^ 0x80808080u;
}

/* The multiplier x' -> q of a chunk (0 for an all-zero or non-finite chunk). */
MC_Q8X_HD float mc_q8x_inv(float amax, int finite) { return finite && amax > 0.0f ? MC_Q8X_QMAX / amax : 0.0f; }

/* The chunk's scale s (q * s approximates x'); NaN for a non-finite chunk. */
MC_Q8X_HD float mc_q8x_scale(float amax, int finite) { return finite ? amax / MC_Q8X_QMAX : nanf(""); }

#ifdef __CUDACC__
/* The staging of a chunk of x', in steps every staging shares (gemv_legacy.cu's decode kernels
 * and chunk_legacy_mma.cu's chunk preparation run a 32-column block by a lane pair, each lane 16
 * columns, through mc_q8x_load16 and mc_q8x_quant16 below: the same x' and sums).
 * mc_q8x_raw16: the 16 floats x[off ..] into v, as loaded. */
template <bool SM = false> /* SM: x is in shared memory (postnorm=prologue's x_new): plain loads */
__device__ __forceinline__ void mc_q8x_raw16(const float *x, size_t off, float (&v)[16]) {
#pragma unroll
    for (uint32_t i = 0; i < 4; i++) {
        const float4 a = SM ? ((const float4 *)(x + off))[i] : __ldg((const float4 *)(x + off) + i);
        v[4 * i] = a.x;
        v[4 * i + 1] = a.y;
        v[4 * i + 2] = a.z;
        v[4 * i + 3] = a.w;
    }
}
/* mc_q8x_norm16: with the norm (NORM 1, or NORM -1 and norm_w not NULL) each of v times
 * norm_w[off + i], its square first added to ss in column order, one fused multiply-add each (SS
 * 0: not added; gemv_q8.cu's 8-warp blocks sum the squares apart). NS: norm_w may be in shared
 * memory (postnorm=prologue's copy, post_norm.cuh's mc_pro_wfetch): plain loads. */
template <int NORM, int SS = 1, bool NS = false>
__device__ __forceinline__ void mc_q8x_norm16(const float *norm_w, size_t off, float (&v)[16], float &ss) {
    if (NORM == 1 || (NORM < 0 && norm_w)) {
#pragma unroll
        for (uint32_t i = 0; i < 4; i++) {
            const float4 g = NS ? ((const float4 *)(norm_w + off))[i] : __ldg((const float4 *)(norm_w + off) + i);
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
/* mc_q8x_load16: mc_q8x_raw16, then mc_q8x_norm16 (SM: x and norm_w both by plain loads). */
template <int NORM, int SS = 1, bool SM = false>
__device__ __forceinline__ void mc_q8x_load16(const float *x, const float *norm_w, size_t off, float (&v)[16],
                                              float &ss) {
    mc_q8x_raw16<SM>(x, off, v);
    mc_q8x_norm16<NORM, SS, SM>(norm_w, off, v, ss);
}

/* The largest |v| of 16 values and whether all are finite, from the bits: a finite float's
 * magnitude orders as its bits without the sign do, so this is fmaxf over fabsf of each (from 0,
 * -0 as 0) wherever every value is finite; a non-finite one (bits past 0x7f800000's) clears
 * finite, and its chunk's amax is then never used (mc_q8x_inv gives 0, mc_q8x_scale NaN). */
__device__ __forceinline__ void mc_q8x_amax16(const float (&v)[16], float &amax, bool &finite) {
    uint32_t b = 0;
#pragma unroll
    for (uint32_t i = 0; i < 16; i++)
        b = max(b, __float_as_uint(v[i]) & 0x7fffffffu);
    finite = b < 0x7f800000u;
    amax = __uint_as_float(b);
}

/* The three planes of 16 values of x' times inv, rounded (mc_q8x_planes4 on each four, a plane's
 * 16 int8 values in one 16-byte word, the first in the low byte). */
__device__ __forceinline__ void mc_q8x_planes16(const float (&v)[16], float inv, uint4 &h, uint4 &m, uint4 &l) {
    uint32_t H[4], M[4], L[4];
#pragma unroll
    for (uint32_t i = 0; i < 4; i++)
        mc_q8x_planes4(__float2int_rn(v[4 * i] * inv), __float2int_rn(v[4 * i + 1] * inv),
                       __float2int_rn(v[4 * i + 2] * inv), __float2int_rn(v[4 * i + 3] * inv), &H[i], &M[i], &L[i]);
    h = make_uint4(H[0], H[1], H[2], H[3]);
    m = make_uint4(M[0], M[1], M[2], M[3]);
    l = make_uint4(L[0], L[1], L[2], L[3]);
}

/* The sum of a plane word's four int8 values, added to s (exact). */
__device__ __forceinline__ int mc_q8x_bsum4(const uint4 &w, int s) {
    s = __dp4a((int)w.x, 0x01010101, s);
    s = __dp4a((int)w.y, 0x01010101, s);
    s = __dp4a((int)w.z, 0x01010101, s);
    return __dp4a((int)w.w, 0x01010101, s);
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
    float amax;
    bool fin;
    mc_q8x_amax16(v, amax, fin);
    amax = fmaxf(amax, __shfl_xor_sync(pair, amax, 1)); /* the block's: the pair's maximum */
    q.finite = (__shfl_xor_sync(pair, fin ? 1 : 0, 1) & (fin ? 1 : 0)) != 0;
    q.amax = amax;
    uint4 h, m, l;
    mc_q8x_planes16(v, mc_q8x_inv(amax, q.finite), h, m, l);
    q.h[0] = h.x, q.h[1] = h.y, q.h[2] = h.z, q.h[3] = h.w;
    q.m[0] = m.x, q.m[1] = m.y, q.m[2] = m.z, q.m[3] = m.w;
    q.l[0] = l.x, q.l[1] = l.y, q.l[2] = l.z, q.l[3] = l.w;
    const int sh = mc_q8x_bsum4(h, 0), sm = mc_q8x_bsum4(m, 0), sl = mc_q8x_bsum4(l, 0);
    q.sh = sh + __shfl_xor_sync(pair, sh, 1); /* integers: exact in either order */
    q.sm = sm + __shfl_xor_sync(pair, sm, 1);
    q.sl = sl + __shfl_xor_sync(pair, sl, 1);
}
#endif

#endif
