/* attention_mma.cuh: the device pieces of attention=mma (attention_mma.cu's kernels: a layer's
 * attention on tensor cores with one order for decode and a prefill chunk, issue 28): the tile
 * type, the MMA and ldmatrix wrappers, the staging of a span's K and V rows (kv=q8's stored rows
 * and their tiles), a span's reduction for a 16-row tile (scores, mask, softmax, P V: mc_amm_span
 * and its parts, which decode's warps share), a row's fold, decode's q tile and its merge of the
 * span (or tier) partials, and the shared-memory layouts. attention_mma.cu's header comment gives
 * the order every piece keeps. */
#ifndef MC_ATTENTION_MMA_CUH
#define MC_ATTENTION_MMA_CUH

#include "attention_common.cuh"

#define MC_AMM_SPAN 64u /* four pairs of n-tiles: mc_amm_sum's tree */
#define MC_AMM_WARPS 4u
#define MC_AMM_THREADS (32u * MC_AMM_WARPS)
#define MC_AMM_BLOCKS 32u /* decode blocks a kv head at most (a span each a round): llama-1b at a 7,900 prefix
                           * 669 tok/s against 631 with 128 (bench/RESULTS.md, twentieth session) */
#define MC_AMM_MERGE 64u   /* spans whose fold weights decode's merging block holds at once */
#define MC_AMM_TIER 4u     /* attfold=tier: spans a tier (256 positions) */

/* The tile type of a cache type: f16 for f16, bf16 otherwise. */
template <typename KT> struct mc_amm_mt {
    typedef __nv_bfloat16 T;
};
template <> struct mc_amm_mt<__half> {
    typedef __half T;
};

/* d += A B, m16n8k16, f32 accumulators (A: a 16 x 16 row-major fragment, B: 16 x 8 col-major). */
__device__ __forceinline__ void mc_amm_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                           __nv_bfloat16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mc_amm_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, __half) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 8 x 8 matrices of 16-bit values from shared memory (lane i: row i % 8 of matrix i / 8),
 * as they are (register j of lane (g, q): matrix j's row g, columns 2q, 2q + 1) or transposed
 * (matrix j's rows 2q, 2q + 1 of column g). */
__device__ __forceinline__ void mc_amm_ldsm4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((uint32_t)__cvta_generic_to_shared(p)));
}
__device__ __forceinline__ void mc_amm_ldsm4t(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((uint32_t)__cvta_generic_to_shared(p)));
}

/* Two floats as one register of the tile type (lo in the low half), each rounded as the cache's
 * writes round (mc_kv_put). */
template <typename MT> __device__ __forceinline__ uint32_t mc_amm_pack(float lo, float hi) {
    const MT l = mc_kv_put<MT>(lo), h = mc_kv_put<MT>(hi);
    return (uint32_t)(*(const uint16_t *)&l) | ((uint32_t)(*(const uint16_t *)&h) << 16);
}

/* A tile row's stride in values: 16 bytes past the row, so that ldmatrix's 8 rows fall in
 * distinct banks. */
template <uint32_t HD> inline constexpr uint32_t MC_AMM_LD = HD + 8;

/* kv=q8: bytes of a stored row (the scales, then the quants: 36, 72, 144; a multiple of 4, and 4
 * rows a multiple of 16, so a kv head's rows start 16-byte aligned when the state's capacity is a
 * multiple of 4, which kv=q8's states are: mc_state_new). */
template <uint32_t HD> inline constexpr uint32_t MC_AMM_RB = HD + HD / 8;

/* A piece of a q8 row (in shared memory) as stored: its block's scale and quants 8 c .. 8 c + 7. A
 * thread reads several pieces before it converts any, so that their reads are in flight at once. */
struct mc_amm_q8_raw {
    float d;
    uint32_t w0, w1;
};
template <uint32_t HD> __device__ __forceinline__ mc_amm_q8_raw mc_amm_q8_load(const uint8_t *row, uint32_t c) {
    mc_amm_q8_raw r;
    r.d = ((const float *)row)[c / 4];
    const int8_t *q = (const int8_t *)(row + HD / 8 + 8 * c);
    if constexpr (HD / 8 % 8 == 0) { /* 8-byte aligned */
        const uint2 u = *(const uint2 *)q;
        r.w0 = u.x;
        r.w1 = u.y;
    } else {
        r.w0 = *(const uint32_t *)q;
        r.w1 = *(const uint32_t *)(q + 4);
    }
    return r;
}

/* The piece's 8 values in the tile type: each memra_kv_q8_value (its block's scale times the
 * quant), then rounded as mc_kv_put rounds (mc_amm_pack). */
template <typename MT> __device__ __forceinline__ uint4 mc_amm_q8_make(const mc_amm_q8_raw &r) {
    float v[8];
#pragma unroll
    for (uint32_t j = 0; j < 4; j++) {
        v[j] = memra_kv_q8_value((int8_t)(r.w0 >> (8 * j)), r.d);
        v[4 + j] = memra_kv_q8_value((int8_t)(r.w1 >> (8 * j)), r.d);
    }
    return make_uint4(mc_amm_pack<MT>(v[0], v[1]), mc_amm_pack<MT>(v[2], v[3]), mc_amm_pack<MT>(v[4], v[5]),
                      mc_amm_pack<MT>(v[6], v[7]));
}

/* Pieces a thread reads before converting them (mc_amm_q8_tiles, mc_amm_q8_tiles_warp). */
#define MC_AMM_Q8_BATCH 8u

/* kv=q8's second staging step, after the copies landed (and a barrier): rows [0, n) of the raw K
 * and V rows (rk, rv: MC_AMM_RB bytes a row) into tiles ks, vs of the tile type, rows n .. SPAN - 1
 * zero; threads tid, tid + nthr, ... of the caller's, each reading a batch of pieces (half K, half
 * V) before converting them. */
template <uint32_t HD, typename MT>
__device__ __forceinline__ void mc_amm_q8_tiles(MT *ks, MT *vs, const uint8_t *rk, const uint8_t *rv, uint32_t n,
                                                uint32_t tid, uint32_t nthr) {
    constexpr uint32_t LD = MC_AMM_LD<HD>, Q = HD / 8, RB = MC_AMM_RB<HD>, B = MC_AMM_Q8_BATCH / 2;
    for (uint32_t i0 = tid; i0 < MC_AMM_SPAN * Q; i0 += B * nthr) {
        mc_amm_q8_raw r[2][B];
#pragma unroll
        for (uint32_t b = 0; b < B; b++) {
            const uint32_t i = i0 + b * nthr, t = i / Q, c = i % Q;
            r[0][b] = r[1][b] = mc_amm_q8_raw{0.0f, 0u, 0u};
            if (i < MC_AMM_SPAN * Q && t < n) {
                r[0][b] = mc_amm_q8_load<HD>(rk + t * RB, c);
                r[1][b] = mc_amm_q8_load<HD>(rv + t * RB, c);
            }
        }
#pragma unroll
        for (uint32_t b = 0; b < B; b++) {
            const uint32_t i = i0 + b * nthr, t = i / Q, c = i % Q;
            if (i < MC_AMM_SPAN * Q) {
                const bool in = t < n;
                *(uint4 *)(ks + t * LD + 8 * c) = in ? mc_amm_q8_make<MT>(r[0][b]) : make_uint4(0, 0, 0, 0);
                *(uint4 *)(vs + t * LD + 8 * c) = in ? mc_amm_q8_make<MT>(r[1][b]) : make_uint4(0, 0, 0, 0);
            }
        }
    }
}

/* Queues cache rows [t0, t0 + n) of K and V (n <= MC_AMM_SPAN) into tiles ks, vs of the tile type
 * (16-bit caches by cp.async as they are; f32 values rounded by mc_kv_put), rows n .. SPAN - 1
 * zero; threads tid, tid + nthr, ... of the caller's. kv=q8: the stored rows by cp.async into raw
 * (K rows, then V rows, MC_AMM_RB bytes each), as they are; mc_amm_q8_tiles makes the tiles once
 * they landed. */
template <uint32_t HD, typename KT, typename MT>
__device__ __forceinline__ void mc_amm_stage(MT *ks, MT *vs, uint8_t *raw, const KT *kb, const KT *vb, uint32_t t0,
                                             uint32_t n, uint32_t tid, uint32_t nthr) {
    constexpr uint32_t LD = MC_AMM_LD<HD>, Q = HD / 8;
    if constexpr (mc_kv_is_q8<KT>) {
        /* rows [t0, t0 + n) of a plane are one byte range, 16-byte aligned at its start (t0 a
         * multiple of 64): 16-byte cp.async pieces through L2 alone, and its last n RB % 16 bytes
         * by 4-byte loads from L2 (a row is never read through L1, whose lines another block's
         * write of the next row could leave stale; and no byte past row t0 + n - 1 is read) */
        constexpr uint32_t RB = MC_AMM_RB<HD>;
        const uint8_t *gk = (const uint8_t *)kb + (size_t)t0 * RB, *gv = (const uint8_t *)vb + (size_t)t0 * RB;
        const uint32_t nb = n * RB, n16 = nb / 16;
        for (uint32_t i = tid; i < n16; i += nthr) {
            mc_cp_async16(raw + 16 * i, gk + 16 * i);
            mc_cp_async16(raw + MC_AMM_SPAN * RB + 16 * i, gv + 16 * i);
        }
        for (uint32_t i = 4 * n16 + tid; i < nb / 4; i += nthr) {
            ((uint32_t *)raw)[i] = __ldcg((const unsigned int *)gk + i);
            ((uint32_t *)(raw + MC_AMM_SPAN * RB))[i] = __ldcg((const unsigned int *)gv + i);
        }
        mc_cp_async_commit();
    } else {
        for (uint32_t i = tid; i < MC_AMM_SPAN * Q; i += nthr) {
            const uint32_t t = i / Q, c = i % Q;
            MT *kd = ks + t * LD + 8 * c, *vd = vs + t * LD + 8 * c;
            if (t < n) {
                const size_t off = (size_t)(t0 + t) * HD + 8 * c;
                if constexpr (sizeof(KT) == 2) {
                    mc_cp_async16(kd, kb + off);
                    mc_cp_async16(vd, vb + off);
                } else {
                    const float4 k0 = __ldcg((const float4 *)(kb + off)), k1 = __ldcg((const float4 *)(kb + off) + 1);
                    const float4 v0 = __ldcg((const float4 *)(vb + off)), v1 = __ldcg((const float4 *)(vb + off) + 1);
                    *(uint4 *)kd = make_uint4(mc_amm_pack<MT>(k0.x, k0.y), mc_amm_pack<MT>(k0.z, k0.w),
                                              mc_amm_pack<MT>(k1.x, k1.y), mc_amm_pack<MT>(k1.z, k1.w));
                    *(uint4 *)vd = make_uint4(mc_amm_pack<MT>(v0.x, v0.y), mc_amm_pack<MT>(v0.z, v0.w),
                                              mc_amm_pack<MT>(v1.x, v1.y), mc_amm_pack<MT>(v1.z, v1.w));
                }
            } else {
                *(uint4 *)kd = make_uint4(0, 0, 0, 0);
                *(uint4 *)vd = make_uint4(0, 0, 0, 0);
            }
        }
        mc_cp_async_commit();
    }
}

/* The pieces of a span's reduction for a 16-row tile (the file's comment gives the order), shared
 * by the chunk's warp (mc_amm_span: the whole span) and decode's four warps (a quarter of the
 * positions each, attention_mma): every value is computed by the same operations whichever warp
 * holds it. Pair q of n-tiles is positions 16 q .. 16 q + 15 of the span. */

/* Scores of n-tile pairs q0 .. q0 + NQ - 1 into s[2 (q - q0) + i] (head dimensions in order from
 * +0), K rows of the span in ks, qa the tile's q fragments. */
template <uint32_t HD, typename MT, uint32_t NQ>
__device__ __forceinline__ void mc_amm_scores(float (&s)[2 * NQ][4], const MT *ks, const uint32_t (&qa)[HD / 16][4],
                                              uint32_t q0) {
    constexpr uint32_t LD = MC_AMM_LD<HD>, KS = HD / 16;
    const uint32_t lane = threadIdx.x & 31, mat = lane >> 3, mr = lane & 7;
#pragma unroll
    for (uint32_t j = 0; j < 2 * NQ; j++)
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (uint32_t kk = 0; kk < KS; kk++)
#pragma unroll
        for (uint32_t q = 0; q < NQ; q++) {
            uint32_t b[4]; /* K rows 16 (q0 + q) .. + 15 as B: dims 16 kk .. 16 kk + 15 */
            mc_amm_ldsm4(b, ks + (8 * (2 * (q0 + q) + (mat >> 1)) + mr) * LD + 16 * kk + 8 * (mat & 1));
            mc_amm_mma(s[2 * q], qa[kk], b[0], b[1], MT());
            mc_amm_mma(s[2 * q + 1], qa[kk], b[2], b[3], MT());
        }
}

/* s x scale (rounded) where the position (p0: the first of s) is in the lane's row's [rw, rp],
 * else -inf; the lane's max per row into mx (fmaxf: exact in any order). */
template <uint32_t NJ>
__device__ __forceinline__ void mc_amm_mask(float (&s)[NJ][4], const int32_t (&rw)[2], const int32_t (&rp)[2],
                                            int32_t p0, float scale, float (&mx)[2]) {
    const uint32_t tig = threadIdx.x & 3;
#pragma unroll
    for (uint32_t j = 0; j < NJ; j++)
#pragma unroll
        for (uint32_t c = 0; c < 4; c++) {
            const uint32_t h = c >> 1;
            const int32_t t = p0 + (int32_t)(8 * j + 2 * tig + (c & 1));
            s[j][c] = t >= rw[h] && t <= rp[h] ? __fmul_rn(s[j][c], scale) : -INFINITY;
            mx[h] = fmaxf(mx[h], s[j][c]);
        }
}

/* The row's max over the quad's lanes. */
__device__ __forceinline__ void mc_amm_quad_max(float (&mx)[2]) {
#pragma unroll
    for (uint32_t h = 0; h < 2; h++) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(MC_FULL, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(MC_FULL, mx[h], 2));
    }
}

/* p = expf(s - max) in place (max -inf: 0, so every p is an exact 0) and each pair's partial sum
 * per row: t[q][h] = ((p0 + p1) + p2) + p3, the lane's four values of the pair in position order. */
template <uint32_t NQ>
__device__ __forceinline__ void mc_amm_probs(float (&s)[2 * NQ][4], const float (&mx)[2], float (&t)[NQ][2]) {
    const float ref[2] = {mx[0] == -INFINITY ? 0.0f : mx[0], mx[1] == -INFINITY ? 0.0f : mx[1]};
#pragma unroll
    for (uint32_t j = 0; j < 2 * NQ; j++)
#pragma unroll
        for (uint32_t c = 0; c < 4; c++)
            s[j][c] = expf(__fsub_rn(s[j][c], ref[c >> 1])); /* a masked position: exactly 0 */
#pragma unroll
    for (uint32_t q = 0; q < NQ; q++)
#pragma unroll
        for (uint32_t h = 0; h < 2; h++)
            t[q][h] = __fadd_rn(__fadd_rn(__fadd_rn(s[2 * q][2 * h], s[2 * q][2 * h + 1]), s[2 * q + 1][2 * h]),
                                s[2 * q + 1][2 * h + 1]);
}

/* The row's sum: the four pairs' partials in order, then lanes tig ^ 1, tig ^ 2. */
__device__ __forceinline__ float mc_amm_sum(float t0, float t1, float t2, float t3) {
    float v = __fadd_rn(__fadd_rn(__fadd_rn(t0, t1), t2), t3);
    v = __fadd_rn(v, __shfl_xor_sync(MC_FULL, v, 1));
    return __fadd_rn(v, __shfl_xor_sync(MC_FULL, v, 2));
}

/* Pair q's p as an A fragment of the tile type (positions 16 q .. 16 q + 15 as k). */
__device__ __forceinline__ void mc_amm_pfrag_of(uint32_t (&pa)[4], const float (&s0)[4], const float (&s1)[4],
                                                __nv_bfloat16) {
    pa[0] = mc_amm_pack<__nv_bfloat16>(s0[0], s0[1]);
    pa[1] = mc_amm_pack<__nv_bfloat16>(s0[2], s0[3]);
    pa[2] = mc_amm_pack<__nv_bfloat16>(s1[0], s1[1]);
    pa[3] = mc_amm_pack<__nv_bfloat16>(s1[2], s1[3]);
}
__device__ __forceinline__ void mc_amm_pfrag_of(uint32_t (&pa)[4], const float (&s0)[4], const float (&s1)[4], __half) {
    pa[0] = mc_amm_pack<__half>(s0[0], s0[1]);
    pa[1] = mc_amm_pack<__half>(s0[2], s0[3]);
    pa[2] = mc_amm_pack<__half>(s1[0], s1[1]);
    pa[3] = mc_amm_pack<__half>(s1[2], s1[3]);
}

/* out's n-tile pairs n0 .. n0 + NN - 1 (dims 16 n .. 16 n + 15) = P V over the span's four
 * position pairs in order from +0 (pa[kk]: pair kk's fragment), V rows in vs. */
template <uint32_t HD, typename MT, uint32_t NN>
__device__ __forceinline__ void mc_amm_pv(float (&o)[2 * NN][4], const uint32_t (&pa)[MC_AMM_SPAN / 16][4],
                                          const MT *vs, uint32_t n0) {
    constexpr uint32_t LD = MC_AMM_LD<HD>;
    const uint32_t lane = threadIdx.x & 31, mat = lane >> 3, mr = lane & 7;
#pragma unroll
    for (uint32_t n = 0; n < 2 * NN; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
#pragma unroll
    for (uint32_t kk = 0; kk < MC_AMM_SPAN / 16; kk++)
#pragma unroll
        for (uint32_t n = 0; n < NN; n++) {
            uint32_t b[4]; /* V rows 16 kk .. 16 kk + 15 as B (transposed): dims 16 (n0 + n) .. + 15 */
            mc_amm_ldsm4t(b, vs + (16 * kk + 8 * (mat & 1) + mr) * LD + 8 * (2 * (n0 + n) + (mat >> 1)));
            mc_amm_mma(o[2 * n], pa[kk], b[0], b[1], MT());
            mc_amm_mma(o[2 * n + 1], pa[kk], b[2], b[3], MT());
        }
}

/* One span of a warp's 16-row tile by that warp alone (a chunk's rows): K and V rows of positions
 * p0 .. p0 + 63 in ks, vs; the lane's rows gid and gid + 8 attend to [rw[k], rp[k]] (rp -1: none).
 * Returns per row the span's max (-inf where no position is attended), its sum (the same on the
 * row's 4 lanes) and the lane's out elements (row gid: o[n][0..1], dims 8 n + 2 tig + 0..1; row
 * gid + 8: o[n][2..3]). Every operation an explicit rounding or an MMA: no contraction choice can
 * differ between callers. */
template <uint32_t HD, typename MT>
__device__ __forceinline__ void mc_amm_span(const MT *ks, const MT *vs, const uint32_t (&qa)[HD / 16][4],
                                            const int32_t (&rw)[2], const int32_t (&rp)[2], int32_t p0, float scale,
                                            float (&m)[2], float (&l)[2], float (&o)[HD / 8][4]) {
    constexpr uint32_t NQ = MC_AMM_SPAN / 16;
    float s[2 * NQ][4], mx[2] = {-INFINITY, -INFINITY}, t[NQ][2];
    mc_amm_scores<HD, MT, NQ>(s, ks, qa, 0);
    mc_amm_mask<2 * NQ>(s, rw, rp, p0, scale, mx);
    mc_amm_quad_max(mx);
    mc_amm_probs<NQ>(s, mx, t);
#pragma unroll
    for (uint32_t h = 0; h < 2; h++) {
        m[h] = mx[h];
        l[h] = mc_amm_sum(t[0][h], t[1][h], t[2][h], t[3][h]);
    }
    uint32_t pa[NQ][4];
#pragma unroll
    for (uint32_t q = 0; q < NQ; q++)
        mc_amm_pfrag_of(pa[q], s[2 * q], s[2 * q + 1], MT());
    mc_amm_pv<HD, MT, HD / 16>(o, pa, vs, 0);
}

/* Row h of a chunk warp's tile (the lane's rows gid and gid + 8: h 0, 1) folds (m, l, o) into its
 * (M, L, F): set to them where first, else mc_spl_fold's operations (the weights once, then each
 * of the lane's out elements of the row). */
template <uint32_t ND>
__device__ __forceinline__ void mc_amm_row_fold(float &M, float &L, float (&F)[ND][4], float m, float l,
                                                const float (&o)[ND][4], uint32_t h, bool first) {
    if (first) {
        M = m;
        L = l;
#pragma unroll
        for (uint32_t n = 0; n < ND; n++) {
            F[n][2 * h] = o[n][2 * h];
            F[n][2 * h + 1] = o[n][2 * h + 1];
        }
    } else {
        float wa, wb;
        mc_spl_fold_row(M, L, m, l, wa, wb);
#pragma unroll
        for (uint32_t n = 0; n < ND; n++) {
            F[n][2 * h] = mc_spl_fold_elem(F[n][2 * h], o[n][2 * h], wa, wb);
            F[n][2 * h + 1] = mc_spl_fold_elem(F[n][2 * h + 1], o[n][2 * h + 1], wa, wb);
        }
    }
}

/* Shared memory of attention_mma (bytes): the q tiles (decode: one, the block's; a chunk: one a
 * warp), then two pairs of K and V tiles (double-buffered; decode's merge stages a batch of out
 * partials there), under kv=q8 two buffers of the stored rows the tiles are made from, then
 * decode's new row (kn, vn: stored values), its merge's fold weights
 * (MC_AMM_MERGE spans of 8 heads: a, b; then 1 / sum a head; then the running max before each
 * span, later its sum) and the merge flag. */
struct mc_amm_layout {
    uint32_t kv, raw, kn, vn, wab, flag, total;
};
__host__ __device__ inline mc_amm_layout mc_amm_layout_of(uint32_t hd, uint32_t kv, bool chunk) {
    const uint32_t tile = MC_AMM_SPAN * (hd + 8) * 2, qt = 16 * (hd + 8) * 2, rb = mc_kv_row_bytes(kv, hd);
    mc_amm_layout L;
    L.kv = (chunk ? MC_AMM_WARPS : 1u) * qt;
    L.raw = L.kv + 2u * 2 * tile; /* kv=q8: two buffers of raw K and V rows */
    L.kn = L.raw + (kv == MC_KV_Q8 ? (2u * 2 * MC_AMM_SPAN * rb + 15) / 16 * 16 : 0u);
    L.vn = L.kn + (rb + 15) / 16 * 16;
    L.wab = L.vn + (rb + 15) / 16 * 16;
    L.flag = L.wab + (chunk ? 0u : (MC_AMM_MERGE * 24 + 8) * 4);
    L.total = L.flag + 16;
    return L;
}

/* Decode's q tile (a chunk's: its warp's rows) and, with has_new, the new k and v row (kn, vn: the
 * stored values): rows zw .. of the nq rows (z1 the block's end), one call site for decode and the
 * chunk, so the same instructions give the same q bits. The warp's lanes; the caller's barrier
 * publishes the tile. */
template <uint32_t HD, uint32_t G, typename KT, typename MT>
__device__ __forceinline__ void mc_amm_q_rows(MT *qt, const mc_rope_args &a, const float *qkv, uint32_t g,
                                              const float (&fr)[MC_ATC_DPL<HD>], int32_t p00, uint32_t zw,
                                              uint32_t z1, uint32_t nq, bool has_new, KT *kn, KT *vn, KT *k_cache,
                                              KT *v_cache, uint32_t lane) {
    constexpr uint32_t LD = MC_AMM_LD<HD>, DPL = MC_ATC_DPL<HD>;
    for (uint32_t i = lane; i < 16 * LD / 8; i += 32)
        ((uint4 *)qt)[i] = make_uint4(0, 0, 0, 0);
    __syncwarp();
    for (uint32_t i = 0; i < nq; i += 2) {
        const uint32_t ir = i + (lane >> 4), zr = min(zw + min(ir, nq - 1), z1 - 1);
        const int32_t pr = p00 + (int32_t)zr;
        mc_atc_cs<HD> cs;
        mc_atc_rope_prep<HD>(cs, fr, a, pr);
        float q[G][DPL];
        mc_atc_q_and_row<HD, G, KT>(q, a, qkv + (size_t)zr * ((a.n_head + 2 * a.n_kv) * HD), g, g, cs, has_new, true,
                                    kn, vn, k_cache, v_cache, pr);
        if (ir < nq && zw + ir < z1)
#pragma unroll
            for (uint32_t h = 0; h < G; h++)
#pragma unroll
                for (uint32_t k = 0; k < DPL; k++)
                    qt[(ir * G + h) * LD + mc_atc_dim<HD>(lane & 15, k)] = mc_kv_put<MT>(q[h][k]);
    }
}

/* The lane's q fragments of the tile qt, and the positions its rows gid, gid + 8 attend to:
 * [rw, rp] (rp -1: a padding row). */
template <uint32_t HD, uint32_t G, typename MT>
__device__ __forceinline__ void mc_amm_q_frags(uint32_t (&qa)[HD / 16][4], int32_t (&rw)[2], int32_t (&rp)[2],
                                               const MT *qt, const mc_rope_args &a, int32_t p00, uint32_t zw,
                                               uint32_t z1, uint32_t nq, uint32_t lane) {
    constexpr uint32_t LD = MC_AMM_LD<HD>, KS = HD / 16;
    const uint32_t gid = lane >> 2;
#pragma unroll
    for (uint32_t kk = 0; kk < KS; kk++)
        mc_amm_ldsm4(qa[kk], qt + ((lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 16 * kk + 8 * (lane >> 4));
#pragma unroll
    for (uint32_t h = 0; h < 2; h++) {
        const uint32_t r = gid + 8 * h, ir = r / G;
        const bool ok = r < nq * G && zw + ir < z1;
        const int32_t pr = p00 + (int32_t)(zw + ir);
        rp[h] = ok ? pr : -1;
        rw[h] = ok ? (int32_t)mc_att_first_position(a.window, (uint32_t)pr) : 0;
    }
}

/* Decode's end, once the block's partials are written: whether this block is the last of the
 * n_act blocks of kv head g to finish (the one that merges; the layout's flag). */
__device__ __forceinline__ bool mc_amm_last(const mc_rope_args &a, uint32_t g, uint32_t n_act, unsigned char *smb,
                                            const mc_amm_layout &L, uint32_t tid) {
    uint32_t *flag = (uint32_t *)(smb + L.flag);
    __syncthreads(); /* every thread's partial stores come before thread 0's release (a CTA barrier) */
    if (tid == 0) {
        /* release: this block's partials before its ticket; acquire: the other blocks' partials
         * (ordered by their own release) before the merge reads them, which the barrier below
         * orders after this acquire for every thread of the block */
        uint32_t prev;
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(prev) : "l"(a.ticket + g) : "memory");
        flag[0] = prev == n_act - 1 ? 1u : 0u;
    }
    __syncthreads();
    return flag[0] != 0;
}

/* The last block's merge (after mc_amm_last): units ul .. uh's partials (po: out [head][unit][hd],
 * pml: (max, sum) [head][unit][2], NS units a head) folded in order into out, in the tiles' space
 * (4 TILE 2-byte values at tiles) and the layout's wab; the ticket reset for the next launch. */
template <uint32_t HD, uint32_t G, typename MT>
__device__ __forceinline__ void mc_amm_merge(const mc_rope_args &a, uint32_t g, uint32_t ul, uint32_t uh, uint32_t NS,
                                             const float *po, const float *pml, MT *tiles, unsigned char *smb,
                                             const mc_amm_layout &L, float *out, uint32_t tid) {
    constexpr uint32_t NT = MC_AMM_THREADS, TILE = MC_AMM_SPAN * MC_AMM_LD<HD>;
    static_assert(NT == 128 && G <= 8 && MC_AMM_MERGE <= 64, "the running max's scan: 4 warps, two heads a warp");
    /* mc_spl_fold's operations in span order, batch by batch (as many spans as the tiles'
     * space holds, at most MC_AMM_MERGE): the batch's out partials staged by cp.async, its
     * (max, sum) read at once; thread h the running max before each span (a chain of fmaxf);
     * every thread some spans' weights a, b (mc_spl_fold_row's expressions); thread h the
     * sum's chain and every element its own (mc_spl_fold_elem) from shared memory */
    float *wab = (float *)(smb + L.wab), *bo = (float *)tiles;
    /* a batch: the two tile pairs' space (4 TILE 2-byte values) as floats [head][span][hd] */
    constexpr uint32_t EPT = (G * HD + NT - 1) / NT, NB0 = 2 * TILE / (G * HD),
                       NB = NB0 < MC_AMM_MERGE ? NB0 : MC_AMM_MERGE;
    static_assert(NB >= 4, "a batch of at least 4 spans");
    float Mc[2] = {0.0f, 0.0f}, Lh = 0.0f, O[EPT]; /* Mc: warp w's heads w, w + 4: the running max so far */
    for (uint32_t sb = ul; sb <= uh; sb += NB) {
        const uint32_t nb = min(NB, uh + 1 - sb), q4 = nb * HD / 4;
        __syncthreads(); /* the batch before is read */
#pragma unroll
        for (uint32_t h = 0; h < G; h++) { /* out [head][span][hd] of the batch: a head's spans are one range */
            float *dst = bo + (size_t)h * nb * HD;
            const float *src = po + ((size_t)(g * G + h) * NS + sb) * HD;
            for (uint32_t r = tid; r < q4; r += NT) /* no division a copy (q4 is known only at run time) */
                mc_cp_async16(dst + 4 * r, src + 4 * r);
        }
        mc_cp_async_commit();
        for (uint32_t i = tid; i < nb * G; i += NT) { /* the batch's (max, sum), at once */
            const uint32_t j = i / G, h = i % G;
            const float2 v = __ldcg((const float2 *)(pml + ((size_t)(g * G + h) * NS + sb + j) * 2));
            wab[(j * 8 + h) * 2] = v.x;
            wab[(j * 8 + h) * 2 + 1] = v.y;
        }
        __syncthreads();
        float *mp = wab + MC_AMM_MERGE * 16 + 8; /* [span][8]: the running max before the span */
        /* mp[j][h]: the running max before span j, as the chain M = first ? m : fmaxf(M, m) gives
         * it, by a scan within a warp (fmaxf is exact and, with NaN as an absent value, associative
         * and commutative: any tree gives the chain's value); the first span's entry is 0 (unused) */
        {
            const uint32_t w = tid >> 5, ln = tid & 31;
#pragma unroll
            for (uint32_t k = 0; k < 2; k++) {
                const uint32_t h = w + 4 * k;
                if (h >= G)
                    break;
                for (uint32_t c0 = 0; c0 < nb; c0 += 32) {
                    const uint32_t j = c0 + ln, last = min(nb - c0, 32u) - 1;
                    const bool first = sb + c0 == ul; /* the merge's first span is lane 0 of this chunk */
                    float v = j < nb ? wab[(j * 8 + h) * 2] : 0.0f;
#pragma unroll
                    for (uint32_t d = 1; d < 32; d <<= 1) {
                        const float up = __shfl_up_sync(0xffffffffu, v, d);
                        if (ln >= d)
                            v = fmaxf(up, v);
                    }
                    const float ex = __shfl_up_sync(0xffffffffu, v, 1), in = __shfl_sync(0xffffffffu, v, last);
                    if (j < nb)
                        mp[j * 8 + h] = ln == 0 ? Mc[k] : first ? ex : fmaxf(Mc[k], ex);
                    Mc[k] = first ? in : fmaxf(Mc[k], in);
                }
            }
        }
        __syncthreads();
        for (uint32_t i = tid; i < nb * G; i += NT) { /* in place: (max, sum) become (a, b) */
            const uint32_t j = i / G, h = i % G;
            const float ms = wab[(j * 8 + h) * 2], M0 = mp[j * 8 + h], mn = fmaxf(M0, ms);
            float wa = 0.0f, wb = 1.0f;
            if (sb + j != ul) {
                wa = expf(__fsub_rn(M0, mn));
                wb = expf(__fsub_rn(ms, mn));
            }
            mp[j * 8 + h] = wab[(j * 8 + h) * 2 + 1]; /* the span's sum, for thread h's chain */
            wab[(j * 8 + h) * 2] = wa;
            wab[(j * 8 + h) * 2 + 1] = wb;
        }
        mc_cp_async_wait(0);
        __syncthreads();
        if (tid < G) {
#pragma unroll 8
            for (uint32_t j = 0; j < nb; j++) {
                const float ls = mp[j * 8 + tid];
                Lh = sb + j == ul ? ls
                                  : fmaf(ls, wab[(j * 8 + tid) * 2 + 1], __fmul_rn(Lh, wab[(j * 8 + tid) * 2]));
            }
            if (sb + nb > uh)
                wab[MC_AMM_MERGE * 16 + tid] = 1.0f / Lh;
        }
#pragma unroll
        for (uint32_t i = 0; i < EPT; i++) {
            const uint32_t e = tid + i * NT, h = e / HD;
            if (e >= G * HD)
                break;
            const float *oh = bo + (size_t)h * nb * HD + e % HD;
            float v = sb == ul ? oh[0] : O[i];
#pragma unroll 8
            for (uint32_t j = sb == ul ? 1 : 0; j < nb; j++)
                v = mc_spl_fold_elem(v, oh[(size_t)j * HD], wab[(j * 8 + h) * 2], wab[(j * 8 + h) * 2 + 1]);
            O[i] = v;
        }
    }
    __syncthreads();
#pragma unroll
    for (uint32_t i = 0; i < EPT; i++) {
        const uint32_t e = tid + i * NT;
        if (e < G * HD)
            out[(size_t)(g * G + e / HD) * HD + e % HD] = O[i] * wab[MC_AMM_MERGE * 16 + e / HD];
    }
    if (tid == 0)
        a.ticket[g] = 0; /* for the next launch (the kernel boundary orders it) */
}

/* attdec=warp: decode's shared memory (bytes): the q tile, then a pair of K and V tiles a warp
 * (kv=q8: the warp's stored rows in the last 2 S RB bytes of its V tile, made into tiles in place
 * by mc_amm_q8_tiles_warp), then the new row (kn, vn), the merge's fold weights and its flag, as
 * mc_amm_layout_of's decode; the merge's batches and the tier's exchange use the tiles' space. */
__host__ __device__ inline mc_amm_layout mc_amm_wd_layout_of(uint32_t hd, uint32_t kv) {
    const uint32_t tile = MC_AMM_SPAN * (hd + 8) * 2, qt = 16 * (hd + 8) * 2, rb = mc_kv_row_bytes(kv, hd);
    mc_amm_layout L;
    L.kv = qt;
    L.raw = L.kv + 2u * MC_AMM_WARPS * tile;
    L.kn = L.raw;
    L.vn = L.kn + (rb + 15) / 16 * 16;
    L.wab = L.vn + (rb + 15) / 16 * 16;
    L.flag = L.wab + (MC_AMM_MERGE * 24 + 8) * 4;
    L.total = L.flag + 16;
    return L;
}
/* Whether attdec=warp serves head size hd with cache type kv: kv=q8's stored rows (hd / 32 scales
 * and hd quants, RB bytes) must fit within a V tile's space (RB <= LD: hd 32 and 64); the other
 * types every head size attention=mma serves. */
__host__ __device__ constexpr inline int mc_amm_wd_ok(uint32_t hd, uint32_t kv) {
    return kv != MC_KV_Q8 || hd + hd / 8 <= hd + 8;
}

/* attdec=warp, kv=q8: a warp's stored rows [0, n) (raw: S K rows, then S V rows, MC_AMM_RB bytes
 * each, in the last 2 S RB bytes of the V tile's space) into its tiles ks, vs of the tile type (the
 * values mc_amm_q8_tiles makes), rows n .. S - 1 zero. K first (its tile lies elsewhere), a batch of
 * pieces a lane read before any is converted; then V in groups of GR rows (a batch a lane: hd 64 32
 * rows, hd 32 all 64), each group's stored rows read into registers before its tile rows are
 * written: group c's tile rows end at byte 2 GR (c + 1) LD of the V tile and the stored rows of the
 * groups after it start at 2 S LD - S RB + GR (c + 1) RB, no lower since GR (c + 1) <= S and
 * RB <= 2 LD. */
template <uint32_t HD, typename MT>
__device__ __forceinline__ void mc_amm_q8_tiles_warp(MT *ks, MT *vs, const uint8_t *raw, uint32_t n, uint32_t lane) {
    constexpr uint32_t LD = MC_AMM_LD<HD>, Q = HD / 8, RB = MC_AMM_RB<HD>, B = MC_AMM_Q8_BATCH, GR = 32 * B / Q;
    static_assert(RB <= LD && MC_AMM_SPAN % GR == 0, "the stored rows fit the V tile's space (hd 32, 64)");
    mc_amm_q8_raw r[B];
    for (uint32_t i0 = lane; i0 < MC_AMM_SPAN * Q; i0 += 32 * B) { /* K: a batch read, then converted */
#pragma unroll
        for (uint32_t b = 0; b < B; b++) {
            const uint32_t t = (i0 + 32 * b) / Q, c = (i0 + 32 * b) % Q;
            r[b] = t < n ? mc_amm_q8_load<HD>(raw + t * RB, c) : mc_amm_q8_raw{0.0f, 0u, 0u};
        }
#pragma unroll
        for (uint32_t b = 0; b < B; b++) {
            const uint32_t t = (i0 + 32 * b) / Q, c = (i0 + 32 * b) % Q;
            *(uint4 *)(ks + t * LD + 8 * c) = t < n ? mc_amm_q8_make<MT>(r[b]) : make_uint4(0, 0, 0, 0);
        }
    }
    __syncwarp(); /* the stored K rows are read: the V tile's first rows cover them */
    const uint8_t *rv = raw + MC_AMM_SPAN * RB;
    for (uint32_t t0 = 0; t0 < MC_AMM_SPAN; t0 += GR) { /* V: groups of GR rows (a batch a lane) */
#pragma unroll
        for (uint32_t b = 0; b < B; b++) {
            const uint32_t i = lane + 32 * b, t = t0 + i / Q, c = i % Q;
            r[b] = t < n ? mc_amm_q8_load<HD>(rv + t * RB, c) : mc_amm_q8_raw{0.0f, 0u, 0u};
        }
        __syncwarp(); /* the group's stored rows are read before its tile rows cover them */
#pragma unroll
        for (uint32_t b = 0; b < B; b++) {
            const uint32_t i = lane + 32 * b, t = t0 + i / Q, c = i % Q;
            *(uint4 *)(vs + t * LD + 8 * c) = t < n ? mc_amm_q8_make<MT>(r[b]) : make_uint4(0, 0, 0, 0);
        }
    }
}

#endif
