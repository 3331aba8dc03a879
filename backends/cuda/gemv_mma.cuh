/* gemv_mma.cuh: what gemv=mma's chunk kernels share (gemv_mma.cu's mma.sync tiles and
 * gemv_wgmma.cu's warpgroup kernel): the parts of the k-blocks, a finished group's store, and the
 * epilogue from the table of part sums. One copy, so that every chunk kernel ends each output
 * element with decode's operations. */
#pragma once

#include "cuda_common.cuh"
#include "kq_mma_bits.h"
#include "kquant_dot.cuh"

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

/* qdot=mma (Q4_K and Q5_K on this chain; gemv_mma.cu's decode and gemv_wgmma.cu's chunk convert and
 * scale with these functions alone). A k-block is one sub-block of 32 columns: its two MMAs start
 * from +0 on the 4-bit (5-bit) quants as bf16 (exact: q <= 31) against x', then
 *   acc = fmaf(N, S, fmaf(A, D, acc)),  A = d * sc, N = -(dmin * m) (each product rounded once),
 * D the MMAs' sum, S the sum of the k-block's 32 values of x' (as bf16) in mc_kq4_psum's order. A
 * pair of k-blocks (sub-blocks 2c, 2c + 1 of a super-block) shares 32 quant bytes: lane t's 8 bytes
 * 8t .. 8t + 7 hold columns 8t .. 8t + 7 of both, the low nibbles the first, the high the second
 * (kquant_layout.h), which is decode's fragment of each (gemv=mma's permutation). */
__device__ __forceinline__ uint32_t mc_kq4_bf16x2(uint32_t p) { /* 128 + q in each half, less 128: exact */
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(p), "r"(0x3F803F80u), "r"(0xC300C300u));
    return d;
}
/* 8 quants (bytes of value <= 127: columns 8t .. 8t + 7 of a k-block, the lower column in the
 * lower byte) as the uint4 of bf16 pairs a BF16 row's 16 bytes give. */
__device__ __forceinline__ uint4 mc_kqb_frag(uint2 q) {
    return make_uint4(mc_kq4_bf16x2(mc_kqm_pair(q.x, 0)), mc_kq4_bf16x2(mc_kqm_pair(q.x, 1)),
                      mc_kq4_bf16x2(mc_kqm_pair(q.y, 0)), mc_kq4_bf16x2(mc_kqm_pair(q.y, 1)));
}
/* Q4_K: H 0 the low nibbles of the lane's 8 quant bytes (columns 8t .. 8t + 7 of the pair's first
 * k-block), H 1 the high ones (the second k-block's). */
template <int H> __device__ __forceinline__ uint4 mc_kq4_frag(uint2 w) {
    return mc_kqb_frag(make_uint2(mc_kqm_q4(w.x, H), mc_kqm_q4(w.y, H)));
}
/* Q5_K: the same with the fifth bits merged, W the unit's word of them (kquant_layout.h: byte i, bit
 * k of the low nibble of qs byte 4k + i, bit 4 + k of the high one); the lane's 8 bytes are the
 * unit's words 2 (t & 1) and 2 (t & 1) + 1 (kquant_dot.cuh's mc_kq_words, two words of it). */
template <int H> __device__ __forceinline__ uint4 mc_kq5_frag(uint2 w, uint32_t W, uint32_t t) {
    const uint32_t k0 = 2u * (t & 1u);
    return mc_kqb_frag(make_uint2(mc_kqm_q5(w.x, W, k0, H), mc_kqm_q5(w.y, W, k0 + 1u, H)));
}
/* Q6_K (a k-block of 32 columns is two sub-blocks of 16, each one MMA from +0, each followed by
 * acc = fmaf(d * sc, D, acc); no min): the quants less 32 as bf16 (exact: |q - 32| <= 32). Each
 * MMA's column set is its sub-block: lane t holds columns 4t .. 4t + 3 of it, the first two in the
 * slots 2t, 2t + 1, the last two in 2t + 8, 2t + 9 (gemv_mma.cu's prep writes x' so for the chunk).
 * ql: the unit's quant word t (bytes 4t .. 4t + 3), hb: the unit's word of top bits (A for the low
 * nibbles' sub-block, H 0, B for the high ones', H 1: kquant_layout.h), as kquant_dot.cuh's
 * mc_kq_words merges them; the result's .x holds columns 4t, 4t + 1, .y 4t + 2, 4t + 3. */
__device__ __forceinline__ uint32_t mc_kq6_bf16x2(uint32_t p) { /* 128 + q in each half, less 160 */
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(p), "r"(0x3F803F80u), "r"(0xC320C320u));
    return d;
}
template <int H> __device__ __forceinline__ uint2 mc_kq6_frag(uint32_t ql, uint32_t hb, uint32_t t) {
    const uint32_t q = mc_kqm_q6(ql, hb, t, H);
    return make_uint2(mc_kq6_bf16x2(mc_kqm_pair(q, 0)), mc_kq6_bf16x2(mc_kqm_pair(q, 1)));
}
/* A Q6_K sub-block's coefficient: d * sc (an f16 by an int8, rounded once: exact). */
__device__ __forceinline__ float mc_kq6_coef(uint16_t d, uint32_t sc_byte) {
    return __fmul_rn(__half2float(__ushort_as_half(d)), (float)(int8_t)(sc_byte & 0xFFu));
}

/* The coefficients of pair c (0 .. 3) of a super-block from its 16 aux bytes (d, dmin, scales[12]):
 * A[h], N[h] of sub-block 2c + h. */
__device__ __forceinline__ void mc_kq4_coef(const uint4 &a, uint32_t c, float (&A)[2], float (&N)[2]) {
    const float d = __half2float(__ushort_as_half((unsigned short)(a.x & 0xFFFFu)));
    const float dmin = __half2float(__ushort_as_half((unsigned short)(a.x >> 16)));
    uint32_t sc, m;
    mc_kq_scales_k4(a, c, sc, m);
    A[0] = __fmul_rn(d, (float)(sc & 0xFFu)), A[1] = __fmul_rn(d, (float)(sc >> 8));
    N[0] = -__fmul_rn(dmin, (float)(m & 0xFFu)), N[1] = -__fmul_rn(dmin, (float)(m >> 8));
}
/* The same for sub-block j (0 .. 7) alone: A, N. */
__device__ __forceinline__ void mc_kq4_coef1(const uint4 &a, uint32_t j, float &A, float &N) {
    float Ah[2], Nh[2];
    mc_kq4_coef(a, j / 2u, Ah, Nh);
    A = j & 1u ? Ah[1] : Ah[0];
    N = j & 1u ? Nh[1] : Nh[0];
}
__device__ __forceinline__ float mc_kq4_step(float acc, float A, float N, float D, float S) {
    return fmaf(N, S, fmaf(A, D, acc));
}
/* One 8-column piece's part of S: its bf16 values (packed as x' is: p01 .. p67) added in column order
 * from +0; a k-block's S is then the 4 pieces' (s0 + s2) + (s1 + s3) (mc_mma_ss4's shape). */
__device__ __forceinline__ float mc_kq4_psum(uint32_t p01, uint32_t p23, uint32_t p45, uint32_t p67) {
    const uint32_t p[4] = {p01, p23, p45, p67};
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s = __fadd_rn(s, __uint_as_float(p[i] << 16));
        s = __fadd_rn(s, __uint_as_float(p[i] & 0xFFFF0000u));
    }
    return s;
}

/* gemv_wgmma.cu: qdot=mma's chunk GEMV after gemv_mma.cu's prep (x' permuted, S: nkb rows of lds
 * floats; bt as mc_gemv_wgmma_launch's). */
cudaError_t mc_gemv_wgmma_kq_launch(const mc_matrix *w, uint32_t ks, const uint16_t *xo, const float *xs,
                                    uint32_t lds, const float *rsp, const float *bias, const float *residual,
                                    uint32_t ldr, float *y, uint32_t ldy, int glu, uint32_t M, uint32_t bt,
                                    cudaStream_t st);

/* ---- device helpers (gemv_mma.cu's decode and gemv_mma_chunk.cu's chunk run these, hence the same
 * bits) ---------------------------------------------------------------------------------------- */

__device__ __forceinline__ void mc_mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* One k-block: lo, hi the lane's 8 columns of rows g and g + 8, xb the same 8 columns of x' (as
 * bf16 pairs, the lower column in the low half) for column g of B. */
__device__ __forceinline__ void mc_mma_kblock(float (&d)[4], uint4 lo, uint4 hi, uint4 xb) {
    mc_mma_bf16(d, lo.x, hi.x, lo.y, hi.y, xb.x, xb.y);
    mc_mma_bf16(d, lo.z, hi.z, lo.w, hi.w, xb.z, xb.w);
}
/* q8=mma: one Q8_0 block of rows g (wa) and g + 8 (wb), a lane's 8 int8 columns of each, against x'
 * (xb): the block's two MMAs from +0 on the weights as bf16, then each element's chain step by its
 * row's scale (sa, sb). */
__device__ __forceinline__ void mc_q8_kblock(float (&d)[4], uint2 wa, uint2 wb, uint4 xb, uint16_t sa, uint16_t sb) {
    float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mc_mma_kblock(e, mc_q8_frag(wa), mc_q8_frag(wb), xb);
    d[0] = mc_q8_step(d[0], sa, e[0]);
    d[1] = mc_q8_step(d[1], sa, e[1]);
    d[2] = mc_q8_step(d[2], sb, e[2]);
    d[3] = mc_q8_step(d[3], sb, e[3]);
}
/* gemv=mma2: x' as two bf16 planes (xh = bf16(x'), xl = bf16(x' - xh)); each MMA of the k-block
 * runs on xh, then on xl. */
__device__ __forceinline__ void mc_mma_kblock2(float (&d)[4], uint4 lo, uint4 hi, uint4 xh, uint4 xl) {
    mc_mma_bf16(d, lo.x, hi.x, lo.y, hi.y, xh.x, xh.y);
    mc_mma_bf16(d, lo.x, hi.x, lo.y, hi.y, xl.x, xl.y);
    mc_mma_bf16(d, lo.z, hi.z, lo.w, hi.w, xh.z, xh.w);
    mc_mma_bf16(d, lo.z, hi.z, lo.w, hi.w, xl.z, xl.w);
}

__device__ __forceinline__ uint32_t mc_mma_pack(float a, float b) {
    return (uint32_t)memra_f32_to_bf16(a) | ((uint32_t)memra_f32_to_bf16(b) << 16);
}
/* The low plane of mma2: the remainder x' - bf16(x') (exact in fp32), rounded to bf16. */
__device__ __forceinline__ uint16_t mc_mma_low(float v) {
    return memra_f32_to_bf16(__fsub_rn(v, memra_bf16_to_f32(memra_f32_to_bf16(v))));
}
__device__ __forceinline__ uint32_t mc_mma_pack_low(float a, float b) {
    return (uint32_t)mc_mma_low(a) | ((uint32_t)mc_mma_low(b) << 16);
}

/* 1/rms from the sum of squares (decode and the chunk's prep). */
__device__ __forceinline__ float mc_mma_rscale(float ss, uint32_t cols, float eps) {
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)cols), eps)));
}

/* The 4 lanes' sums of squares of a part, as lane 0 (and every lane of the group) sees them:
 * (s0 + s2) + (s1 + s3). Every lane of the warp calls it. */
__device__ __forceinline__ float mc_mma_ss4(float s) {
    s = __fadd_rn(s, __shfl_xor_sync(MC_FULL, s, 2));
    return __fadd_rn(s, __shfl_xor_sync(MC_FULL, s, 1));
}

/* A lane's squares of x in its 8 columns from col on (staged x), in column order: decode's chain. */
__device__ __forceinline__ float mc_mma_ss8(const float4 *xf, uint32_t col, float ss) {
    const float4 v0 = xf[col / 4], v1 = xf[col / 4 + 1];
    const float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
    for (uint32_t e = 0; e < 8; e++)
        ss = fmaf(v[e], v[e], ss);
    return ss;
}


/* gemv_mma.cu: the decode kernels' shared-memory limits (once per device, outside any capture; called
 * by gemv_mma_chunk.cu's mc_gemv_mma_prepare). gemv_mma_chunk.cu: the census of its kernels, then
 * gemv_wgmma.cu's (NULL for another). */
cudaError_t mc_mmad_prepare(void);
const char *mc_gemv_mma_chunk_family(const void *f);
