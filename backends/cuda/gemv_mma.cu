/* gemv_mma.cu: gemv=mma, the BF16 GEMVs of decode and of a prefill chunk on one tensor-core
 * instruction, mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, so that a chunk of M tokens
 * gets decode's bits by construction (issue 28).
 *
 * The arithmetic of one output element (row r of W, one row of x). x' = x * norm_w (one rounded
 * product, decode's own) or x, rounded to bf16 once (nearest even, memra_f32_to_bf16: the cpu
 * backend's rounding). The columns go in k-blocks of 32 (the last one zero-filled past cols); a
 * k-block is two MMAs on one fixed permutation of its columns: lane (g, t) of the warp (g = lane
 * / 4, t = lane % 4) holds the 16 contiguous bytes of columns 32 kb + 8t .. + 7 of rows g and g + 8
 * of the tile (A: 16 weight rows) and of x' (B: 8 columns, the tokens); the first MMA takes their
 * first 4 columns, the second the last 4 (so every load is a 16-byte vector). The k-blocks are cut
 * into KS contiguous parts (KS = mc_gemv_mma_ksplit(rows, cols), a function of the shape alone);
 * a part is one accumulator chain from +0 over its k-blocks in order; the parts' results are added
 * in part order; then with a norm the product by 1/rms (__fmul_rn), and mc_rows_store's epilogue
 * (bias, residual, GLU); with postnorm=fused the grid's last block folds gemma3's post norm. The
 * sum of squares of x: per part, lane t's fmaf chain over its columns (k-blocks in order, 8
 * columns each in order), the four lanes added as (s0 + s2) + (s1 + s3), the parts in order.
 *
 * bench/gpu/mma_probe.cu measured on the H200 that an element of this MMA depends only on its row
 * of A, its column of B and its accumulator, not on the other rows and columns nor on its place in
 * the tile. So decode (one live column: the x row; the other 7 columns zero) and the chunk kernel
 * (up to 64 rows of x live, in n-tiles of 8) give each (row, token) the same bits.
 *
 * Decode (gemv_mma): a block of 8 warps; warp w takes tile 8/KS blockIdx.x + w / KS (16 rows) and
 * part w % KS, keeps MC_MMA_U k-blocks of its weights in flight in registers, reads x' staged in
 * shared memory once a block (the decode section says how), and the part-0 warp adds
 * the parts. Bound by the weight bytes, as the row-group kernel. Prefill (chunk_gemv_mma): a block
 * of 4 warps takes 128 rows and 64 rows of x (a warp 32 x 64: two m-tiles by eight n-tiles; the
 * tile is mc_mma_ch_tile); x' comes as bf16 from a prep kernel (chunk_mma_prep, a block a row of
 * x, with the 1/rms per row in decode's order); the k-blocks of weights and x' stream through
 * shared memory (cp.async, 3 stages of one k-block), each lane reading its fragments there as
 * decode reads them from memory, each part's chain in registers, the part sums in shared memory
 * (consecutive blocks share the weights in L2). On an sm_90 device the chunk runs gemv_wgmma.cu's
 * warpgroup kernel instead (the mmachunk key; the same bits, the probe's finding there). Served: BF16
 * matrices whose columns are a multiple of 8 (mc_gemv_mma_serves); every other type and shape
 * keeps its own kernels under gemv=mma.
 *
 * q8=mma runs Q8_0 matrices (columns a multiple of 32) on the same chain with one change: a k-block
 * is one Q8_0 block, and its two MMAs start from +0 on the block's int8 weights converted to bf16
 * (exact: mc_q8_frag) against x' as above; then acc = fmaf(the row's block scale, that sum, acc)
 * (mc_q8_step), acc from +0 a part, the parts added in order as above. Decode keeps 8 k-blocks in
 * flight (8 bytes a lane and row each, and the two rows' scales); the chunk is gemv_wgmma.cu's
 * chunk_gemv_wgmma_q8 (sm_90 only: elsewhere q8=mma's chunks run as single steps). Per call: rows x
 * cols weight bytes and rows x cols / 32 f16 scales (streamed), x, norm_w, bias, residual as above. */
#include "cuda_common.cuh"
#include "gemv_mma.cuh"
#include "kquant_layout.h"
#include "post_norm.cuh"

#include <type_traits>

#define MC_MMA_WARPS 8u /* decode block */
#define MC_MMA_XS_KQ (96u << 10) /* qdot=mma: staged x', x and S, at most (decode needs them staged) */

int mc_gemv_mma_serves(const mc_config *c, const mc_matrix *w) {
    if (w->rows == 0 || w->cols == 0)
        return 0;
    if (w->type == MEMRA_TYPE_Q8_0) /* q8=mma: the int8 weights as bf16, a block's scale after its MMAs */
        return c->q8 == MC_Q8_MMA && w->cols % MEMRA_Q8_0_BLOCK == 0;
    if (w->type == MEMRA_TYPE_Q4_K || w->type == MEMRA_TYPE_Q5_K || w->type == MEMRA_TYPE_Q6_K) { /* qdot=mma:
                                          * decode stages x', x and S (its limit with a norm) */
        uint64_t dr, ar;
        return c->qdot == MC_QDOT_MMA && mc_kq_layout(w->type, w->cols, &dr, &ar) && w->stride == dr &&
               w->aux_stride == ar && w->aux && (uint64_t)w->cols / 32u * 196u <= MC_MMA_XS_KQ;
    }
    return (c->gemv == MC_GEMV_MMA || c->gemv == MC_GEMV_MMA2) && w->type == MEMRA_TYPE_BF16 && w->cols % 8 == 0;
}

/* The largest of 8, 4, 2 parts whose decode grid (tiles x KS warps) fits one wave of 2 blocks of
 * 8 warps on each of 132 multiprocessors, with at least 4 k-blocks a part; else 1. A function of
 * the shape alone: every arm and device gets the same bits. */
uint32_t mc_gemv_mma_ksplit(uint32_t rows, uint32_t cols) {
    const uint64_t tiles = (rows + 15u) / 16u, nkb = (cols + 31u) / 32u;
    for (uint32_t ks = MC_MMA_WARPS; ks > 1; ks >>= 1)
        if (tiles * ks <= 2u * 132u * MC_MMA_WARPS && nkb >= 4u * ks)
            return ks;
    return 1;
}

/* qdot=mma's Q6_K decode: a round is half a super-block (units 4 hf .. 4 hf + 3, the sub-blocks 8 hf
 * .. 8 hf + 7) of the warp's rows g and g + 8: the lane's quant word t of each unit, the units' top
 * bits (A, B a unit), the 8 scale bytes and d (kquant_layout.h). */
struct mc_kq6_round {
    uint32_t qa[4], qb[4];
    uint4 ta0, ta1, tb0, tb1;
    uint2 sa, sb;
    uint16_t da, db;
};
__device__ __forceinline__ void mc_kq6_load(mc_kq6_round &R, const char *pa, const char *pb, const char *xa,
                                            const char *xb, uint32_t nsb, uint32_t r, uint32_t t) {
    const uint32_t sk = r / 2u, hf = r % 2u;
#pragma unroll
    for (uint32_t q = 0; q < 4; q++) {
        R.qa[q] = __ldcs((const uint32_t *)(pa + 128u * sk + 64u * hf + 16u * q) + t);
        R.qb[q] = __ldcs((const uint32_t *)(pb + 128u * sk + 64u * hf + 16u * q) + t);
    }
    const uint4 *ta = (const uint4 *)(pa + 128u * nsb + 64u * sk + 32u * hf);
    const uint4 *tb = (const uint4 *)(pb + 128u * nsb + 64u * sk + 32u * hf);
    R.ta0 = __ldcs(ta), R.ta1 = __ldcs(ta + 1), R.tb0 = __ldcs(tb), R.tb1 = __ldcs(tb + 1);
    R.sa = __ldg((const uint2 *)(xa + 16u * sk + 8u * hf));
    R.sb = __ldg((const uint2 *)(xb + 16u * sk + 8u * hf));
    R.da = __ldg((const uint16_t *)(xa + 16u * nsb) + sk);
    R.db = __ldg((const uint16_t *)(xb + 16u * nsb) + sk);
}
/* Unit q's top-bit word of a round's 32 bytes (A for H 0, B for H 1), and sub-block (q, H)'s scale byte. */
template <int H> __device__ __forceinline__ uint32_t mc_kq6_top(const uint4 &t0, const uint4 &t1, uint32_t q) {
    const uint4 &v = q < 2u ? t0 : t1;
    return (q & 1u) ? (H ? v.w : v.z) : (H ? v.y : v.x);
}
template <int H> __device__ __forceinline__ uint32_t mc_kq6_sc(uint2 sc, uint32_t q) {
    return (q < 2u ? sc.x : sc.y) >> (8u * ((2u * q + H) & 3u));
}

/* ---- decode ------------------------------------------------------------------------------- */

/* Two things keep a decode warp's chain short. Its weights come in registers, MC_MMA_U k-blocks
 * ahead (16-byte ld.global.cs a lane and row: the weights are read once a token), the first ones
 * asked for before the wait on the kernel before. And x' (bf16, both planes with mma2) and, with a
 * norm, x itself (for the sum of squares) are staged in shared memory once a block, after the
 * wait, when they fit (mc_mmad_xs_bytes <= MC_MMA_XS_MAX; else each k-block loads its x from
 * global memory, as the first version did for all): a k-block then waits on no global load of x,
 * which measured as the warp's critical path (about 0.6 us a k-block on the H200, whatever the
 * weights in flight). memra_cuda_mma_decode_bench timed this against the first version and seven
 * cp.async rings (per-warp stages of 1 to 2 k-blocks, 4 to 8 deep, L2 evict-first and 256-byte
 * prefetch hints, row-segment fills), all with the same bits: this one was the fastest on 9 of
 * the 10 llama-8b and llama-1b shapes (sum 525.7 us against 569.3 for the best ring and 633.2 for
 * the first version; the 8B head at 102% of the 1 GiB copy's rate): bench/gpu/NOTES.md. The
 * arithmetic is the first version's: the same k-blocks in the same order, the same x' (x *
 * norm_w rounded once to bf16) and sum of squares, the same MMAs on the same fragments. */
#define MC_MMA_U 4u               /* k-blocks a warp has in flight */
#define MC_MMA_XS_MAX (40u << 10) /* staged x' and x, at most */

/* Bytes of the staged x: PL planes of x' (nkb * 64 bytes each), then with a norm x (nkb * 128). */
static uint32_t mc_mmad_xs_bytes(uint32_t cols, int pl, bool norm) {
    const uint32_t nkb = (cols + 31) / 32;
    return nkb * 64u * (uint32_t)pl + (norm ? nkb * 128u : 0u);
}

/* Per call: reads rows x cols weights (streamed), x and norm_w (cols floats), bias and residual;
 * writes y (rows floats, rows / 2 with a GLU); with POST the last block reads y, pn.w, pn.x and
 * writes pn.x. Dynamic shared memory: with xs, mc_mmad_xs_bytes. */
template <int GLU, int NORM, int POST, int PL, int Q8 = 0, int KQ = 0>
__global__ void __launch_bounds__(32 * MC_MMA_WARPS, 2)
    gemv_mma(const mc_matrix w, uint32_t ks, uint32_t xs, const float *x, const float *norm_w, float eps,
             const float *bias, const float *residual, float *y, const mc_post_args pn) {
    extern __shared__ uint4 mc_mmad_smem[]; /* with xs: x' (PL planes), then with a norm x */
    __shared__ float red[MC_MMA_WARPS][17];
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const uint32_t part = warp % ks, r0 = (blockIdx.x * (MC_MMA_WARPS / ks) + warp / ks) * 16;
    const bool live = r0 < w.rows;
    const uint32_t nkb = (w.cols + 31) / 32, kb0 = mc_mma_part(nkb, ks, part), kb1 = mc_mma_part(nkb, ks, part + 1);
    const uint32_t ra = r0 + g, rb = r0 + g + 8;
    /* a lane's 8 columns of a row: 16 bytes of BF16, 8 of Q8_0 (int8, stride in bytes), with q8=mma the
     * rows' block scales beside them */
    typedef typename std::conditional<Q8 != 0, uint2, uint4>::type wvec;
    constexpr uint32_t U = Q8 ? 2u * MC_MMA_U : MC_MMA_U; /* Q8_0: as many weight bytes in flight */
    const size_t eb = Q8 ? 1u : 2u;
    const wvec *pa = (const wvec *)((const char *)w.data + (size_t)(ra < w.rows ? ra : r0) * w.stride * eb);
    const wvec *pb = (const wvec *)((const char *)w.data + (size_t)(rb < w.rows ? rb : r0) * w.stride * eb);
    const uint32_t nsc = w.cols / 32;
    const uint16_t *qa = Q8 ? w.scales + (size_t)(ra < w.rows ? ra : r0) * nsc : NULL;
    const uint16_t *qb = Q8 ? w.scales + (size_t)(rb < w.rows ? rb : r0) * nsc : NULL;
    const uint32_t nq = w.cols / 8; /* 8-column pieces of a row */
    uint4 *xh = mc_mmad_smem, *xlo = xh + nkb * 4, *xf = xh + PL * nkb * 4;
    float *xS = (float *)(xf + (NORM ? nkb * 8 : 0)); /* qdot=mma: S of each k-block */
    /* qdot=mma (Q4_K): the parts are ranges of super-blocks (8 k-blocks); a round is one super-block:
     * a lane's 8 quant bytes of each of its 4 pairs and the 16 aux bytes, for rows ra and rb */
    const uint32_t nsb = w.cols / 256u, sb0 = mc_mma_part(nsb, ks, part), sb1 = mc_mma_part(nsb, ks, part + 1);
    const char *kpa = (const char *)w.data + (size_t)(ra < w.rows ? ra : r0) * w.stride;
    const char *kpb = (const char *)w.data + (size_t)(rb < w.rows ? rb : r0) * w.stride;
    const uint4 *aa = KQ ? (const uint4 *)((const char *)w.aux + (size_t)(ra < w.rows ? ra : r0) * w.aux_stride) : NULL;
    const uint4 *ab = KQ ? (const uint4 *)((const char *)w.aux + (size_t)(rb < w.rows ? rb : r0) * w.aux_stride) : NULL;
    uint2 kwa[KQ ? 4 : 1], kwb[KQ ? 4 : 1];
    uint32_t kha[KQ == 2 ? 4 : 1], khb[KQ == 2 ? 4 : 1]; /* Q5_K: the fifth bits' word of the lane's unit */
    uint4 kaa = make_uint4(0, 0, 0, 0), kab = kaa;
    auto kload = [&](uint32_t sk) {
#pragma unroll
        for (uint32_t c = 0; c < (KQ ? 4u : 1u); c++) {
            kwa[c] = __ldcs((const uint2 *)(kpa + 128u * sk + 32u * c) + t);
            kwb[c] = __ldcs((const uint2 *)(kpb + 128u * sk + 32u * c) + t);
            if (KQ == 2) { /* after the row's nsb * 128 quant bytes: a word a unit (2c + t / 2 of the super-block) */
                kha[KQ == 2 ? c : 0] = __ldcs((const uint32_t *)(kpa + 128u * nsb + 32u * sk) + 2u * c + (t >> 1));
                khb[KQ == 2 ? c : 0] = __ldcs((const uint32_t *)(kpb + 128u * nsb + 32u * sk) + 2u * c + (t >> 1));
            }
        }
        kaa = __ldg(aa + sk);
        kab = __ldg(ab + sk);
    };
    wvec na[U], nb[U];
    uint16_t sa[Q8 ? U : 1], sb[Q8 ? U : 1];
    auto load = [&](uint32_t kb) {
#pragma unroll
        for (uint32_t u = 0; u < U; u++) {
            const uint32_t q = (kb + u) * 4 + t;
            na[u] = nb[u] = wvec{};
            if (kb + u < kb1 && q < nq) {
                na[u] = __ldcs(pa + q);
                nb[u] = __ldcs(pb + q);
            }
            if (Q8) {
                sa[Q8 ? u : 0] = sb[Q8 ? u : 0] = 0;
                if (kb + u < kb1) {
                    sa[Q8 ? u : 0] = __ldg(qa + kb + u);
                    sb[Q8 ? u : 0] = __ldg(qb + kb + u);
                }
            }
        }
    };
    mc_kq6_round k6n; /* Q6_K (KQ 3): the next round */
    if constexpr (KQ == 3) {
        if (live && sb0 < sb1)
            mc_kq6_load(k6n, kpa, kpb, (const char *)aa, (const char *)ab, nsb, 2u * sb0, t);
    } else if constexpr (KQ != 0) {
        if (live && sb0 < sb1)
            kload(sb0);
    } else {
        if (live)
            load(kb0);
    }
    mc_wait_prior_grid(NORM ? MC_TRIGGER_GEMV6 : MC_TRIGGER_GEMV6_RES); /* x comes from earlier kernels */
    if (xs) { /* 8 columns a thread: x' (and its low plane), with a norm x */
        for (uint32_t i = threadIdx.x; i < nkb * 4; i += 32 * MC_MMA_WARPS) {
            const uint32_t c = 8 * i;
            float4 v0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v1 = v0;
            uint4 hb = make_uint4(0, 0, 0, 0), lb = hb;
            if (c < w.cols) {
                v0 = __ldg((const float4 *)(x + c));
                v1 = __ldg((const float4 *)(x + c) + 1);
                float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
                if (NORM) {
                    const float4 g0 = __ldg((const float4 *)(norm_w + c)), g1 = __ldg((const float4 *)(norm_w + c) + 1);
                    const float gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
                    for (uint32_t e = 0; e < 8; e++)
                        v[e] = __fmul_rn(v[e], gv[e]);
                }
                hb = make_uint4(mc_mma_pack(v[0], v[1]), mc_mma_pack(v[2], v[3]), mc_mma_pack(v[4], v[5]),
                                mc_mma_pack(v[6], v[7]));
                if (PL == 2)
                    lb = make_uint4(mc_mma_pack_low(v[0], v[1]), mc_mma_pack_low(v[2], v[3]),
                                    mc_mma_pack_low(v[4], v[5]), mc_mma_pack_low(v[6], v[7]));
            }
            xh[i] = hb;
            if constexpr (KQ == 1 || KQ == 2) { /* the k-block's S: its 4 pieces are lanes 4k .. 4k + 3 (cols: a
                                                * multiple of 256) */
                const float sk = mc_mma_ss4(mc_kq4_psum(hb.x, hb.y, hb.z, hb.w));
                if ((i & 3u) == 0)
                    xS[i / 4] = sk;
            }
            if (PL == 2)
                xlo[i] = lb;
            if (NORM) {
                ((float4 *)xf)[2 * i] = v0;
                ((float4 *)xf)[2 * i + 1] = v1;
            }
        }
        __syncthreads();
    }
    if constexpr (KQ != 0) {
    if (live) { /* qdot=mma: x' (and S) staged (mc_gemv_mma_serves' limit) */
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, ss = 0.0f;
        if constexpr (KQ == 3) { /* Q6_K: a sub-block's MMA from +0, then fmaf by d * sc */
        for (uint32_t r = 2u * sb0; r < 2u * sb1; r++) {
            const mc_kq6_round R = k6n;
            if (r + 1 < 2u * sb1)
                mc_kq6_load(k6n, kpa, kpb, (const char *)aa, (const char *)ab, nsb, r + 1, t);
#pragma unroll
            for (uint32_t h = 0; h < 2; h++)
#pragma unroll
                for (uint32_t q = 0; q < 4; q++) {
                    const uint32_t j = 8u * (r % 2u) + 4u * h + q, col0 = 256u * (r / 2u) + 16u * j; /* sub-block */
                    if (NORM && j % 2u == 0) /* the sum of squares by k-blocks, as every qdot=mma type */
                        ss = mc_mma_ss8((const float4 *)xf, col0 + 8u * t, ss);
                    const uint2 xv = ((const uint2 *)xh)[(col0 + 4u * t) / 4u];
                    const uint2 xb = g == 0 ? xv : make_uint2(0, 0);
                    const uint2 fa = h ? mc_kq6_frag<1>(R.qa[q], mc_kq6_top<1>(R.ta0, R.ta1, q), t)
                                       : mc_kq6_frag<0>(R.qa[q], mc_kq6_top<0>(R.ta0, R.ta1, q), t);
                    const uint2 fb = h ? mc_kq6_frag<1>(R.qb[q], mc_kq6_top<1>(R.tb0, R.tb1, q), t)
                                       : mc_kq6_frag<0>(R.qb[q], mc_kq6_top<0>(R.tb0, R.tb1, q), t);
                    const float Aa = mc_kq6_coef(R.da, h ? mc_kq6_sc<1>(R.sa, q) : mc_kq6_sc<0>(R.sa, q));
                    const float Ab = mc_kq6_coef(R.db, h ? mc_kq6_sc<1>(R.sb, q) : mc_kq6_sc<0>(R.sb, q));
                    float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    mc_mma_bf16(e, fa.x, fb.x, fa.y, fb.y, xb.x, xb.y);
                    d[0] = fmaf(Aa, e[0], d[0]);
                    d[1] = fmaf(Aa, e[1], d[1]);
                    d[2] = fmaf(Ab, e[2], d[2]);
                    d[3] = fmaf(Ab, e[3], d[3]);
                }
        }
        } else { /* Q4_K, Q5_K */
        for (uint32_t sk = sb0; sk < sb1; sk++) {
            uint2 cwa[KQ ? 4 : 1], cwb[KQ ? 4 : 1];
            uint32_t cha[KQ == 2 ? 4 : 1], chb[KQ == 2 ? 4 : 1];
#pragma unroll
            for (uint32_t c = 0; c < (KQ ? 4u : 1u); c++) {
                cwa[c] = kwa[c], cwb[c] = kwb[c];
                if (KQ == 2)
                    cha[KQ == 2 ? c : 0] = kha[KQ == 2 ? c : 0], chb[KQ == 2 ? c : 0] = khb[KQ == 2 ? c : 0];
            }
            const uint4 caa = kaa, cab = kab;
            if (sk + 1 < sb1)
                kload(sk + 1);
#pragma unroll
            for (uint32_t c = 0; c < 4; c++) {
                float Aa[2], Na[2], Ab[2], Nb[2];
                mc_kq4_coef(caa, c, Aa, Na);
                mc_kq4_coef(cab, c, Ab, Nb);
#pragma unroll
                for (uint32_t h = 0; h < 2; h++) {
                    const uint32_t k = 8u * sk + 2u * c + h, col = 32u * k + 8u * t;
                    if (NORM)
                        ss = mc_mma_ss8((const float4 *)xf, col, ss);
                    const uint4 xv = xh[col / 8];
                    const uint4 xb = g == 0 ? xv : make_uint4(0, 0, 0, 0);
                    const float S = xS[k];
                    float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    const uint32_t ci = KQ ? c : 0, hi5 = KQ == 2 ? c : 0;
                    if (KQ == 2 && h)
                        mc_mma_kblock(e, mc_kq5_frag<1>(cwa[ci], cha[hi5], t), mc_kq5_frag<1>(cwb[ci], chb[hi5], t), xb);
                    else if (KQ == 2)
                        mc_mma_kblock(e, mc_kq5_frag<0>(cwa[ci], cha[hi5], t), mc_kq5_frag<0>(cwb[ci], chb[hi5], t), xb);
                    else if (h)
                        mc_mma_kblock(e, mc_kq4_frag<1>(cwa[ci]), mc_kq4_frag<1>(cwb[ci]), xb);
                    else
                        mc_mma_kblock(e, mc_kq4_frag<0>(cwa[ci]), mc_kq4_frag<0>(cwb[ci]), xb);
                    d[0] = mc_kq4_step(d[0], Aa[h], Na[h], e[0], S);
                    d[1] = mc_kq4_step(d[1], Aa[h], Na[h], e[1], S);
                    d[2] = mc_kq4_step(d[2], Ab[h], Nb[h], e[2], S);
                    d[3] = mc_kq4_step(d[3], Ab[h], Nb[h], e[3], S);
                }
            }
        }
        }
        if (NORM)
            ss = mc_mma_ss4(ss);
        if (t == 0) {
            red[warp][g] = d[0];
            red[warp][g + 8] = d[2];
        }
        if (lane == 0)
            red[warp][16] = ss;
    }
    } else {
    if (live) {
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, ss = 0.0f;
        for (uint32_t k0 = kb0; k0 < kb1; k0 += U) {
            wvec ca[U], cb[U];
            uint16_t csa[Q8 ? U : 1], csb[Q8 ? U : 1];
#pragma unroll
            for (uint32_t u = 0; u < U; u++) {
                ca[u] = na[u];
                cb[u] = nb[u];
                if (Q8)
                    csa[Q8 ? u : 0] = sa[Q8 ? u : 0], csb[Q8 ? u : 0] = sb[Q8 ? u : 0];
            }
            if (k0 + U < kb1)
                load(k0 + U);
            if constexpr (Q8 != 0) {
                if (xs && k0 + U <= kb1) { /* a whole round from staged x': no branch between its blocks, so
                                            * their conversions and MMAs interleave (the same operations: every
                                            * lane reads x' and lane groups g > 0 zero it; their sums of squares
                                            * go unused) */
#pragma unroll
                    for (uint32_t u = 0; u < U; u++) {
                        const uint32_t c = (k0 + u) * 32 + 8 * t;
                        if (NORM)
                            ss = mc_mma_ss8((const float4 *)xf, c, ss);
                        const uint4 xv = xh[c / 8];
                        const uint4 xb = g == 0 ? xv : make_uint4(0, 0, 0, 0);
                        mc_q8_kblock(d, ca[u], cb[u], xb, csa[u], csb[u]);
                    }
                    continue;
                }
            }
#pragma unroll
            for (uint32_t u = 0; u < U; u++) {
                const uint32_t kb = k0 + u;
                if (kb >= kb1)
                    break;
                const uint32_t c = kb * 32 + 8 * t;
                uint4 xb = make_uint4(0, 0, 0, 0), xl = make_uint4(0, 0, 0, 0);
                if (g == 0 && c < w.cols) {
                    if (xs) {
                        if (NORM)
                            ss = mc_mma_ss8((const float4 *)xf, c, ss);
                        xb = xh[c / 8];
                        if (PL == 2)
                            xl = xlo[c / 8];
                    } else {
                        const float4 v0 = __ldg((const float4 *)(x + c)), v1 = __ldg((const float4 *)(x + c) + 1);
                        float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
                        if (NORM) {
                            const float4 g0 = __ldg((const float4 *)(norm_w + c)),
                                         g1 = __ldg((const float4 *)(norm_w + c) + 1);
                            const float gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
                            for (uint32_t e = 0; e < 8; e++) {
                                ss = fmaf(v[e], v[e], ss);
                                v[e] = __fmul_rn(v[e], gv[e]);
                            }
                        }
                        xb = make_uint4(mc_mma_pack(v[0], v[1]), mc_mma_pack(v[2], v[3]), mc_mma_pack(v[4], v[5]),
                                        mc_mma_pack(v[6], v[7]));
                        if (PL == 2)
                            xl = make_uint4(mc_mma_pack_low(v[0], v[1]), mc_mma_pack_low(v[2], v[3]),
                                            mc_mma_pack_low(v[4], v[5]), mc_mma_pack_low(v[6], v[7]));
                    }
                }
                if constexpr (Q8 != 0)
                    mc_q8_kblock(d, ca[u], cb[u], xb, csa[u], csb[u]);
                else if (PL == 2)
                    mc_mma_kblock2(d, ca[u], cb[u], xb, xl);
                else
                    mc_mma_kblock(d, ca[u], cb[u], xb);
            }
        }
        if (NORM)
            ss = mc_mma_ss4(ss);
        if (t == 0) { /* column 0 of D: rows g (d[0]) and g + 8 (d[2]) */
            red[warp][g] = d[0];
            red[warp][g + 8] = d[2];
        }
        if (lane == 0)
            red[warp][16] = ss;
    }
    }
    __syncthreads();
    if (live && part == 0 && lane < 4) { /* lane q: rows r0 + 4q .. + 3, the parts added in order */
        float dd[MC_GEMV_ROWS], sst = red[warp][16];
#pragma unroll
        for (uint32_t j = 0; j < MC_GEMV_ROWS; j++)
            dd[j] = red[warp][4 * lane + j];
        for (uint32_t p = 1; p < ks; p++) {
#pragma unroll
            for (uint32_t j = 0; j < MC_GEMV_ROWS; j++)
                dd[j] = __fadd_rn(dd[j], red[warp + p][4 * lane + j]);
            sst = __fadd_rn(sst, red[warp + p][16]);
        }
        const uint32_t rq = r0 + 4 * lane;
        if (rq < w.rows)
            mc_mma_store<GLU>(dd, NORM != 0, NORM ? mc_mma_rscale(sst, w.cols, eps) : 1.0f, rq, w.rows, bias, residual,
                              y);
    }
    if (POST)
        mc_post_norm_last(pn, y, w.rows);
}

/* The decode kernels' shared-memory limit (mc_gemv_mma_prepare: once per device, outside any
 * capture). */
cudaError_t mc_mmad_prepare(void) {
    cudaError_t e = cudaSuccess;
    const int n = (int)MC_MMA_XS_MAX;
#define MC_SET(G, N, P)                                                                                                \
    if (e == cudaSuccess)                                                                                              \
        e = cudaFuncSetAttribute(gemv_mma<G, N, P, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, n);                \
    if (e == cudaSuccess)                                                                                              \
        e = cudaFuncSetAttribute(gemv_mma<G, N, P, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, n);            \
    if (e == cudaSuccess)                                                                                              \
        e = cudaFuncSetAttribute(gemv_mma<G, N, P, 1, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, n);            \
    if (e == cudaSuccess) /* qdot=mma: its larger staging */                                                          \
        e = cudaFuncSetAttribute(gemv_mma<G, N, P, 1, 0, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,              \
                                 (int)MC_MMA_XS_KQ);                                                                   \
    if (e == cudaSuccess)                                                                                              \
        e = cudaFuncSetAttribute(gemv_mma<G, N, P, 1, 0, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,              \
                                 (int)MC_MMA_XS_KQ);                                                                   \
    if (e == cudaSuccess)                                                                                              \
        e = cudaFuncSetAttribute(gemv_mma<G, N, P, 1, 0, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize,              \
                                 (int)MC_MMA_XS_KQ);
    MC_SET(MC_GLU_NONE, 0, 0)
    MC_SET(MC_GLU_NONE, 1, 0)
    MC_SET(MC_GLU_SILU, 0, 0)
    MC_SET(MC_GLU_SILU, 1, 0)
    MC_SET(MC_GLU_GELU, 0, 0)
    MC_SET(MC_GLU_GELU, 1, 0)
    MC_SET(MC_GLU_NONE, 0, 1)
#undef MC_SET
    return e;
}

cudaError_t mc_gemv_mma(const mc_config *c, int glu, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                        const float *bias, const float *residual, float *y, cudaStream_t st, const mc_post_args *pn) {
    if (!mc_gemv_mma_serves(c, w) || (glu && w->rows % 2) || (pn && (glu || norm_w || bias || residual)))
        return cudaErrorInvalidValue;
    cudaError_t e = mc_gemv_prepare(); /* the shared-memory limit (once per device) */
    if (e != cudaSuccess)
        return e;
    const bool two = c->gemv == MC_GEMV_MMA2 && w->type == MEMRA_TYPE_BF16, q8 = w->type == MEMRA_TYPE_Q8_0;
    const bool kq = w->type == MEMRA_TYPE_Q4_K || w->type == MEMRA_TYPE_Q5_K || w->type == MEMRA_TYPE_Q6_K;
    const bool k5 = w->type == MEMRA_TYPE_Q5_K, k6 = w->type == MEMRA_TYPE_Q6_K; /* qdot=mma: x', x, S staged */
    const uint32_t ks = mc_gemv_mma_ksplit(w->rows, w->cols), per_block = MC_MMA_WARPS / ks;
    const uint32_t tiles = (w->rows + 15) / 16,
                   xb = mc_mmad_xs_bytes(w->cols, two ? 2 : 1, norm_w != NULL) + (kq ? (w->cols + 31) / 32 * 4 : 0);
    const uint32_t xs = xb <= (kq ? MC_MMA_XS_KQ : MC_MMA_XS_MAX) ? 1u : 0u;
    if (kq && !xs)
        return cudaErrorInvalidValue;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((tiles + per_block - 1) / per_block);
    cfg.blockDim = dim3(32 * MC_MMA_WARPS);
    cfg.dynamicSmemBytes = xs ? xb : 0;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    const mc_post_args none = {NULL, NULL, NULL, 0.0f};
#define MC_L(G, N, P)                                                                                                  \
    (two  ? cudaLaunchKernelEx(&cfg, gemv_mma<G, N, P, 2>, *w, ks, xs, x, norm_w, eps, bias, residual, y,              \
                               pn ? *pn : none)                                                                        \
     : k6 ? cudaLaunchKernelEx(&cfg, gemv_mma<G, N, P, 1, 0, 3>, *w, ks, xs, x, norm_w, eps, bias, residual, y,        \
                               pn ? *pn : none)                                                                        \
     : k5 ? cudaLaunchKernelEx(&cfg, gemv_mma<G, N, P, 1, 0, 2>, *w, ks, xs, x, norm_w, eps, bias, residual, y,        \
                               pn ? *pn : none)                                                                        \
     : kq ? cudaLaunchKernelEx(&cfg, gemv_mma<G, N, P, 1, 0, 1>, *w, ks, xs, x, norm_w, eps, bias, residual, y,        \
                               pn ? *pn : none)                                                                        \
     : q8 ? cudaLaunchKernelEx(&cfg, gemv_mma<G, N, P, 1, 1>, *w, ks, xs, x, norm_w, eps, bias, residual, y,           \
                               pn ? *pn : none)                                                                        \
          : cudaLaunchKernelEx(&cfg, gemv_mma<G, N, P, 1>, *w, ks, xs, x, norm_w, eps, bias, residual, y,              \
                               pn ? *pn : none))
    if (pn)
        e = MC_L(MC_GLU_NONE, 0, 1);
    else if (glu == MC_GLU_SILU)
        e = norm_w ? MC_L(MC_GLU_SILU, 1, 0) : MC_L(MC_GLU_SILU, 0, 0);
    else if (glu == MC_GLU_GELU)
        e = norm_w ? MC_L(MC_GLU_GELU, 1, 0) : MC_L(MC_GLU_GELU, 0, 0);
    else
        e = norm_w ? MC_L(MC_GLU_NONE, 1, 0) : MC_L(MC_GLU_NONE, 0, 0);
#undef MC_L
    return e != cudaSuccess ? e : cudaGetLastError();
}

/* ---- census and trigger ------------------------------------------------------------------- */

const char *mc_gemv_mma_family(const void *f) {
/* the 7 variants (GLU, norm, post norm) of one instantiation family (planes, q8=mma, qdot=mma's type) */
#define MC_FAM(PL, Q8, KQ)                                                                                             \
    {(const void *)gemv_mma<MC_GLU_NONE, 0, 0, PL, Q8, KQ>, "gemv"},                                                   \
        {(const void *)gemv_mma<MC_GLU_NONE, 1, 0, PL, Q8, KQ>, "gemv"},                                               \
        {(const void *)gemv_mma<MC_GLU_SILU, 0, 0, PL, Q8, KQ>, "gemv_swiglu"},                                        \
        {(const void *)gemv_mma<MC_GLU_SILU, 1, 0, PL, Q8, KQ>, "gemv_swiglu"},                                        \
        {(const void *)gemv_mma<MC_GLU_GELU, 0, 0, PL, Q8, KQ>, "gemv_geglu"},                                         \
        {(const void *)gemv_mma<MC_GLU_GELU, 1, 0, PL, Q8, KQ>, "gemv_geglu"},                                         \
        {(const void *)gemv_mma<MC_GLU_NONE, 0, 1, PL, Q8, KQ>, "gemv_postnorm"},
    static const mc_family_row table[] = {MC_FAM(1, 0, 0) MC_FAM(2, 0, 0) MC_FAM(1, 1, 0) MC_FAM(1, 0, 1) MC_FAM(1, 0, 2) MC_FAM(1, 0, 3)};
#undef MC_FAM
    const char *fam0 = mc_family_find(table, sizeof table / sizeof table[0], f);
    if (fam0)
        return fam0;
    return mc_gemv_mma_chunk_family(f); /* gemv_mma_chunk.cu's, then gemv_wgmma.cu's */
}

cudaError_t mc_gemv_mma_trigger_addr(void **p) { return cudaGetSymbolAddress(p, mc_trigger_mask); }
