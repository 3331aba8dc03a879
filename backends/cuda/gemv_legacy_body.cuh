/* gemv_legacy_body.cuh: the body of the Q4_0 .. Q5_1 GEMVs of gemv_legacy.cu (its head comment says
 * what it computes and in which order), in a header of its own so that the file of kernels and
 * launchers stays readable; included by gemv_legacy.cu alone. */
#ifndef MEMRA_CUDA_GEMV_LEGACY_BODY_CUH
#define MEMRA_CUDA_GEMV_LEGACY_BODY_CUH

#include "cuda_common.cuh"
#include "legacy_layout.h"
#include "q8x_quant.h"

#define MC_LL_WARPS 16u
#define MC_LL_STAGE_WARPS 8u /* the warps that stage x and sum its squares (their order is the bits') */
#define MC_LL_SMALL 4u /* the warps of a block under qblock=4 (and auto on narrow matrices) */
#define MC_LL_U 2u
#define MC_LL_SMEM_MAX (200u * 1024u)

/* Shared bytes of a block's staged x: QD 1: per block of 32 columns 7 uint4 (the hi, mid and lo
 * planes, two uint4 each, then the planes' sums and the scale); QD 0: cols floats. */
__host__ __device__ static inline uint32_t mc_ll_smem(uint32_t cols, int qd) {
    return qd ? cols / 32 * 112 : cols * 4;
}

/* int8 byte i of u (0 .. 255 as unsigned) to float without the integer conversion: 2^23 + byte,
 * less `bias` (2^23 + the quant's offset): exact. */
__device__ __forceinline__ float mc_ll_byte(uint32_t u, uint32_t i, float bias) {
    return __int_as_float(__byte_perm(u, 0x4B000000u, 0x7650u | i)) - bias;
}

/* The 4 words of low-nibble quants (elements 4k .. 4k+3) and high (16 + 4k ..) of a block, fifth
 * bits merged for Q5. */
template <uint32_t T>
__device__ __forceinline__ void mc_ll_unpack(const uint4 q, uint32_t qh, uint32_t (&lo)[4], uint32_t (&hi)[4]) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (uint32_t k = 0; k < 4; k++) {
        lo[k] = w[k] & 0x0F0F0F0Fu;
        hi[k] = (w[k] >> 4) & 0x0F0F0F0Fu;
        if (T == MEMRA_TYPE_Q5_0 || T == MEMRA_TYPE_Q5_1) {
            lo[k] |= ((qh >> k) & 0x01010101u) << 4;
            hi[k] |= ((qh >> (k + 4)) & 0x01010101u) << 4;
        }
    }
}

/* The staging of x' by a half block (thread c2 of a pass: block c = c2 / 2, columns 16 half ..):
 * mc_ll_load16 reads its 16 columns of x (times norm_w when NORM), mc_ll_quant16 quantizes the
 * lane pair's block (q8x_quant.h's mc_q8x_load16 and mc_q8x_quant16, which the chunk's preparation
 * runs too) into xq: the three planes' halves and, from half 0, the planes' integer sums and the
 * scale (NaN for a non-finite block). Every staging loop of this file runs these two: the same x'
 * and sums whichever thread stages a block. */
template <int NORM, bool SM = false>
__device__ __forceinline__ void mc_ll_load16(const float *x, const float *norm_w, uint32_t c, uint32_t half,
                                             float (&v)[16], float &ss) {
    mc_q8x_load16<NORM, 1, SM>(x, norm_w, (size_t)c * 32 + 16 * half, v, ss);
}

__device__ __forceinline__ void mc_ll_quant16(const float (&v)[16], uint32_t pair, uint32_t c, uint32_t half,
                                              uint4 *xq) {
    mc_q8x_half q;
    mc_q8x_quant16(v, pair, q);
    uint4 *o = xq + 7 * (size_t)c;
    o[half] = make_uint4(q.h[0], q.h[1], q.h[2], q.h[3]);
    o[2 + half] = make_uint4(q.m[0], q.m[1], q.m[2], q.m[3]);
    o[4 + half] = make_uint4(q.l[0], q.l[1], q.l[2], q.l[3]);
    if (half == 0) /* the scale is NaN for a non-finite block: it stays visible */
        o[6] =
            make_uint4((uint32_t)q.sh, (uint32_t)q.sm, (uint32_t)q.sl, __float_as_uint(mc_q8x_scale(q.amax, q.finite)));
}

/* The kernels' body (gemv_legacy, gemv_legacy_post below), called by every thread of the block. */
template <uint32_t T, int GLU, int NORM, int KS, int QD, uint32_t W>
__device__ __forceinline__ void gemv_legacy_body(const mc_matrix w, const float *x, const float *norm_w, float eps,
                                                 const float *bias, const float *residual, float *y,
                                                 uint32_t n_groups) {
    extern __shared__ __align__(16) unsigned char llsm[];
    __shared__ float red[2][W][MC_GEMV_ROWS];
    __shared__ float bred[W > MC_LL_STAGE_WARPS ? W : MC_LL_STAGE_WARPS];
    __shared__ float4 pres[W]; /* a warp's group residual, fetched ahead (mc_rows_fetch_async) */
    constexpr bool HM = T == MEMRA_TYPE_Q4_1 || T == MEMRA_TYPE_Q5_1, HH = T == MEMRA_TYPE_Q5_0 || T == MEMRA_TYPE_Q5_1;
    constexpr uint32_t SLOTS = W / KS, U = T == MEMRA_TYPE_Q4_0 ? MC_LL_U : 1, PER_IT = 32 * KS * U;
    const uint32_t nb = w.cols / 32;
    uint4 *xq = (uint4 *)llsm;   /* QD 1: block b at xq[7b ..]: hi, hi, mid, mid, lo, lo, {sums, scale} */
    float *xf = (float *)llsm; /* QD 0 */
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, part = warp % KS, slot = warp / KS;
    const uint32_t g0 = (uint32_t)((uint64_t)n_groups * blockIdx.x / gridDim.x);
    const uint32_t g1 = (uint32_t)((uint64_t)n_groups * (blockIdx.x + 1) / gridDim.x);
    const uint32_t n_my = g0 + slot < g1 ? (g1 - g0 - slot + SLOTS - 1) / SLOTS : 0;
    const uint32_t niter = (nb + PER_IT - 1) / PER_IT, total = n_my * niter;
    const uint32_t first = lane + 32 * part;
    const uint32_t d_off = (uint32_t)mc_ll_d_off(T, nb), m_off = (uint32_t)mc_ll_m_off(T, nb);

    uint4 wv[U][MC_GEMV_ROWS];
    uint16_t dv[U][MC_GEMV_ROWS], mv[U][MC_GEMV_ROWS];
    uint32_t hv[U][MC_GEMV_ROWS];
    auto load = [&](uint32_t k, uint32_t i) {
        const uint32_t r0 = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS;
#pragma unroll
        for (uint32_t u = 0; u < U; u++) {
            const uint32_t idx = first + PER_IT * i + 32 * KS * u;
            if (idx < nb) {
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                    const uint32_t row = r0 + r < w.rows ? r0 + r : r0;
                    const char *ar = (const char *)w.aux + (size_t)row * w.aux_stride;
                    wv[u][r] = __ldcs((const uint4 *)((const char *)w.data + (size_t)row * w.stride) + idx);
                    dv[u][r] = __ldcs((const unsigned short *)(ar + d_off) + idx);
                    if (HM)
                        mv[u][r] = __ldcs((const unsigned short *)(ar + m_off) + idx);
                    if (HH)
                        hv[u][r] = __ldcs((const unsigned int *)ar + idx);
                }
            }
        }
    };
    if (total > 0)
        load(0, 0);
    mc_wait_prior_grid(MC_TRIGGER_Q8); /* x (and the residual) come from earlier kernels */

    /* stage x' (and sum the squares of x): two neighbouring lanes a block of 32, 16 columns each
     * (x' per block of 32 columns is the same whichever thread stages it; the sum of squares takes
     * the 8-warp order: thread t of the 8 stage warps sums half blocks c2 = t, t + 256, ..., then
     * its warp's tree, then the 8 warps in order; blocks of fewer warps play those threads in
     * MC_LL_STAGE_WARPS / W rounds, thread t as t, t + 32 W, ...) */
    float ss = 0.0f;
    if constexpr (!NORM && QD && W > MC_LL_STAGE_WARPS) {
        /* no sum of squares to keep in the 8-warp order: every thread stages, two half blocks at a
         * time with both loads in flight (down's 14,336 columns: 896 half blocks on 512 threads, one
         * round trip to L2 instead of four); each block's x' is the same whichever lanes stage it */
        for (uint32_t c2 = tid; c2 < 2 * nb; c2 += 64 * W) {
            const uint32_t c2b = c2 + 32 * W;
            float v0[16], v1[16];
            mc_q8x_raw16(x, (size_t)c2 * 16, v0);
            if (c2b < 2 * nb)
                mc_q8x_raw16(x, (size_t)c2b * 16, v1);
            const uint32_t live = 2 * nb - (c2 - lane);
            mc_ll_quant16(v0, live >= 32 ? MC_FULL : (1u << live) - 1u, c2 >> 1, c2 & 1, xq);
            if (c2b < 2 * nb) {
                const uint32_t liveb = 2 * nb - (c2b - lane);
                mc_ll_quant16(v1, liveb >= 32 ? MC_FULL : (1u << liveb) - 1u, c2b >> 1, c2b & 1, xq);
            }
        }
    } else if constexpr (W >= MC_LL_STAGE_WARPS) { /* the 16-warp kernel's staging */
        for (uint32_t c2 = tid; tid < 32 * MC_LL_STAGE_WARPS && c2 < 2 * nb; c2 += 32 * MC_LL_STAGE_WARPS) {
            /* the warp's lanes in this pass: a prefix of it, whole pairs (2 nb and the stride are even) */
            const uint32_t live = 2 * nb - (c2 - lane), pair = live >= 32 ? MC_FULL : (1u << live) - 1u;
            const uint32_t c = c2 >> 1, half = c2 & 1;
            float v[16];
            mc_ll_load16<NORM>(x, norm_w, c, half, v, ss);
            if (!QD) {
#pragma unroll
                for (uint32_t i = 0; i < 4; i++)
                    ((float4 *)(xf + (size_t)c * 32 + 16 * half))[i] =
                        make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
                continue;
            }
            mc_ll_quant16(v, pair, c, half, xq);
        }
    } else { /* the same per pass, into one sum per played thread */
        auto stage = [&](uint32_t c2, float &ss) {
            /* the warp's lanes in this pass: a prefix of it, whole pairs (2 nb and the stride are even) */
            const uint32_t live = 2 * nb - (c2 - lane), pair = live >= 32 ? MC_FULL : (1u << live) - 1u;
            const uint32_t c = c2 >> 1, half = c2 & 1;
            float v[16];
            mc_ll_load16<NORM>(x, norm_w, c, half, v, ss);
            if (!QD) {
#pragma unroll
                for (uint32_t i = 0; i < 4; i++)
                    ((float4 *)(xf + (size_t)c * 32 + 16 * half))[i] =
                        make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
                return;
            }
            mc_ll_quant16(v, pair, c, half, xq);
        };
        constexpr uint32_t V = MC_LL_STAGE_WARPS / W;
#pragma unroll
        for (uint32_t v = 0; v < V; v++) {
            float sv = 0.0f;
            for (uint32_t c2 = tid + 32 * W * v; c2 < 2 * nb; c2 += 32 * MC_LL_STAGE_WARPS)
                stage(c2, sv);
            if (NORM) {
                sv = mc_warp_sum(sv);
                if (lane == 0)
                    bred[warp + W * v] = sv;
            }
        }
    }
    if (NORM && W >= MC_LL_STAGE_WARPS && warp < MC_LL_STAGE_WARPS) {
        ss = mc_warp_sum(ss);
        if (lane == 0)
            bred[warp] = ss;
    }
    __syncthreads(); /* the staged x and the warps' sums of squares are visible */
    float rscale = 1.0f;
    if (NORM) { /* the staging warps in order, by every thread */
        float t = 0.0f;
#pragma unroll
        for (uint32_t k = 0; k < MC_LL_STAGE_WARPS; k++)
            t += bred[k];
        rscale = 1.0f / sqrtf(t / (float)w.cols + eps);
    }

    /* offsets: 2^23 plus the quant's zero point */
    constexpr float BIAS = HM ? 8388608.0f : HH ? 8388624.0f : 8388616.0f;
    constexpr int OFF = HM ? 0 : HH ? 16 : 8;
    float acc[MC_GEMV_ROWS];
#pragma unroll
    for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
        acc[r] = 0.0f;
    uint32_t k = 0, i = 0;
    for (uint32_t j = 0; j < total; j++) {
        if (i + 1 == niter && part == 0 && lane == 0) /* the group's residual (or bias), ahead */
            mc_rows_fetch_async<GLU>(&pres[warp], (g0 + slot + SLOTS * k) * MC_GEMV_ROWS, w.rows, bias, residual);
        uint4 cur[U][MC_GEMV_ROWS];
        uint16_t cd[U][MC_GEMV_ROWS], cm[U][MC_GEMV_ROWS];
        uint32_t ch[U][MC_GEMV_ROWS];
#pragma unroll
        for (uint32_t u = 0; u < U; u++)
#pragma unroll
            for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                cur[u][r] = wv[u][r];
                cd[u][r] = dv[u][r];
                cm[u][r] = HM ? mv[u][r] : 0;
                ch[u][r] = HH ? hv[u][r] : 0;
            }
        if (j + 1 < total)
            load(i + 1 < niter ? k : k + 1, i + 1 < niter ? i + 1 : 0);
#pragma unroll
        for (uint32_t u = 0; u < U; u++) {
            const uint32_t idx = first + PER_IT * i + 32 * KS * u;
            if (idx >= nb)
                continue;
            if (QD) {
                const uint4 *xb = xq + 7 * (size_t)idx;
                uint32_t P[3][8];
#pragma unroll
                for (uint32_t p = 0; p < 3; p++) {
                    const uint4 a = xb[2 * p], b = xb[2 * p + 1];
                    P[p][0] = a.x, P[p][1] = a.y, P[p][2] = a.z, P[p][3] = a.w;
                    P[p][4] = b.x, P[p][5] = b.y, P[p][6] = b.z, P[p][7] = b.w;
                }
                const uint4 meta = xb[6];
                const float sx = __uint_as_float(meta.w);
                float sumx = 0.0f;
                if (HM)
                    sumx = fmaf((float)(int)meta.x, 65536.0f, (float)((int)meta.y * 256 + (int)meta.z));
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                    uint32_t lo[4], hi[4];
                    mc_ll_unpack<T>(cur[u][r], ch[u][r], lo, hi);
                    int dp[3];
#pragma unroll
                    for (uint32_t p = 0; p < 3; p++) {
                        int a = 0;
#pragma unroll
                        for (uint32_t q = 0; q < 4; q++) {
                            a = __dp4a((int)lo[q], (int)P[p][q], a);
                            a = __dp4a((int)hi[q], (int)P[p][4 + q], a);
                        }
                        dp[p] = a;
                    }
                    if (OFF) {
                        dp[0] -= OFF * (int)meta.x;
                        dp[1] -= OFF * (int)meta.y;
                        dp[2] -= OFF * (int)meta.z;
                    }
                    const float dot = fmaf((float)dp[0], 65536.0f, (float)(dp[1] * 256 + dp[2]));
                    const float d = __half2float(__ushort_as_half(cd[u][r]));
                    acc[r] = fmaf(dot, d * sx, acc[r]);
                    if (HM)
                        acc[r] = fmaf(sumx, __half2float(__ushort_as_half(cm[u][r])) * sx, acc[r]);
                }
            } else {
                float4 xv[8];
#pragma unroll
                for (uint32_t q = 0; q < 8; q++)
                    xv[q] = ((const float4 *)(xf + (size_t)idx * 32))[q];
                const float *xe = (const float *)xv;
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                    uint32_t lo[4], hi[4];
                    mc_ll_unpack<T>(cur[u][r], ch[u][r], lo, hi);
                    const float d = __half2float(__ushort_as_half(cd[u][r]));
                    const float m = HM ? __half2float(__ushort_as_half(cm[u][r])) : 0.0f;
                    float a = acc[r];
#pragma unroll
                    for (uint32_t e = 0; e < 32; e++) { /* element order */
                        const uint32_t word = e < 16 ? lo[(e & 15) / 4] : hi[(e & 15) / 4];
                        const float q = mc_ll_byte(word, e % 4, BIAS);
                        const float wt = HM ? __fadd_rn(__fmul_rn(q, d), m) : __fmul_rn(q, d);
                        a = fmaf(wt, xe[e], a);
                    }
                    acc[r] = a;
                }
            }
        }
        if (++i < niter)
            continue;
        /* the row group's last iteration: sum, add the parts in order, write */
        float dsum[MC_GEMV_ROWS];
#pragma unroll
        for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
            dsum[r] = mc_warp_sum(acc[r]);
            acc[r] = 0.0f;
        }
        const uint32_t r0 = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS, par = k & 1;
        i = 0;
        k++;
        if (KS > 1) {
            if (lane == 0)
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                    red[par][warp][r] = dsum[r];
            asm volatile("bar.sync %0, %1;" ::"r"(1 + slot), "r"(32 * KS) : "memory");
            if (part != 0)
                continue;
            for (uint32_t p = 1; p < KS; p++)
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                    dsum[r] += red[par][warp + p][r];
        }
        if (lane != 0)
            continue;
#pragma unroll
        for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
            dsum[r] *= rscale;
        mc_rows_store_async<GLU>(dsum, &pres[warp], r0, w.rows, bias, residual, y);
    }
}

#endif
