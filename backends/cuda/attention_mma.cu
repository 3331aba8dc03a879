/* attention_mma.cu: attention=mma, a layer's attention on tensor cores with one order for decode
 * and for a prefill chunk's rows (issue 28). One kernel, attention_mma, serves both: decode
 * (rows 0) spreads fixed spans over many blocks and the last block of a kv head folds them in
 * span order (flash-decoding, as attention_split); a chunk (rows = M, after attention_chunk_append
 * wrote every row's k and v) gives each block 4 R rows (R = 16 / G) and walks their spans in
 * order, folding as it goes. mc_attention_path (attention.cu) picks the path.
 *
 * Decode: block x of a kv head takes spans lo + x, lo + x + X, ... (X = the state's spans, at most
 * MC_AMM_BLOCKS, so several spans a block past 2,048 positions); its 128 threads stage each span one
 * ahead (two tile pairs) and its 4 warps reduce it (warp w: the scores of
 * positions 16 w .. 16 w + 15, then a quarter of the out elements), exchanging the rows' maxes,
 * partial sums and P through shared memory: the same operations as a chunk's warp, which holds
 * the whole span (mc_amm_span).
 *
 * The order. The positions a query at p attends to, [w0, p], are cut at fixed absolute positions
 * into spans of MC_AMM_SPAN (span s: [64 s, 64 s + 64)). A span is reduced by one warp for a tile
 * of 16 query rows (decode: the G q heads of the kv head; a chunk: R rows x G heads), the same
 * instructions whatever the tile's other rows hold (mc_amm_span):
 *  - the scores by mma.sync m16n8k16 (f32 accumulate; A: q rounded to the tile type, bf16, or f16
 *    under kv=f16; B: the span's K rows in the tile type, an f32 cache's values rounded to bf16),
 *    head dimensions in order from +0: an element of an MMA's result depends only on its row of
 *    A, its column of B and its accumulator, so a row's scores are the same in any tile;
 *  - s x scale (rounded), positions outside [w0, p] -inf; the row's max (exact in any order);
 *    p = expf(s - max); the sum: a lane's 16 values in position order, then lanes tig ^ 1, ^ 2;
 *  - out = P V by mma.sync (P rounded to the tile type; V rows as B), positions in order from +0.
 * A row's span results (max, sum, out) are folded in increasing span order by mc_spl_fold
 * (attention_common.cuh), from the row's first span on; out = O x (1 / L). Decode writes each
 * span's results to the partials and the last block folds them with the same function, in the
 * same order: a chunk's rows and M decode steps give the same bits. A masked position's p is
 * exactly 0, so its V row adds exact zeros (a position after p is a zero row in decode and the
 * chunk's own later row in a chunk: only a non-finite V there, a NaN the model already made,
 * would show).
 *
 * Serves hd == hdv in {32, 64, 128}, G = n_head / n_kv in {1, 2, 3, 4, 8}, every kv type. Per
 * layer and token (decode): reads qkv (one token), freqs, norms, *pos, this layer's K and V rows
 * [64 floor(w0 / 64), p) (each once), writes the K and V rows at p, the partials of the spans
 * (G (hd + 2) floats per span, read back once by the merging block) and out[n_head][hd]. */
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

/* kv=q8: bytes of a stored row (the scales, then the quants) and of the cp.async pieces a row is
 * copied in (9 a row: 4, 8 or 16 bytes, each aligned so in the cache and in shared memory). */
template <uint32_t HD> inline constexpr uint32_t MC_AMM_RB = HD + HD / 8;
template <uint32_t HD> inline constexpr uint32_t MC_AMM_CB = HD / 8;

/* A cp.async of CB bytes (4, 8: through L1, as cp.async allows them; 16: L2 only). */
template <uint32_t CB> __device__ __forceinline__ void mc_amm_cp_async(void *smem, const void *gmem) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    if constexpr (CB == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(s), "l"(gmem), "n"(CB) : "memory");
}

/* Values 8 c .. 8 c + 7 of a q8 row (in shared memory) in the tile type: each memra_kv_q8_value
 * (its block's scale times the quant), then rounded as mc_kv_put rounds (mc_amm_pack). */
template <uint32_t HD, typename MT> __device__ __forceinline__ uint4 mc_amm_q8_piece(const uint8_t *row, uint32_t c) {
    const float d = ((const float *)row)[c / 4];
    const int8_t *q = (const int8_t *)(row + HD / 8 + 8 * c);
    uint32_t w0, w1;
    if constexpr (HD / 8 % 8 == 0) { /* 8-byte aligned */
        const uint2 u = *(const uint2 *)q;
        w0 = u.x;
        w1 = u.y;
    } else {
        w0 = *(const uint32_t *)q;
        w1 = *(const uint32_t *)(q + 4);
    }
    float v[8];
#pragma unroll
    for (uint32_t j = 0; j < 4; j++) {
        v[j] = memra_kv_q8_value((int8_t)(w0 >> (8 * j)), d);
        v[4 + j] = memra_kv_q8_value((int8_t)(w1 >> (8 * j)), d);
    }
    return make_uint4(mc_amm_pack<MT>(v[0], v[1]), mc_amm_pack<MT>(v[2], v[3]), mc_amm_pack<MT>(v[4], v[5]),
                      mc_amm_pack<MT>(v[6], v[7]));
}

/* kv=q8's second staging step, after the copies landed (and a barrier): rows [0, n) of the raw K
 * and V rows (rk, rv: MC_AMM_RB bytes a row) into tiles ks, vs of the tile type, rows n .. SPAN - 1
 * zero; threads tid, tid + nthr, ... of the caller's. */
template <uint32_t HD, typename MT>
__device__ __forceinline__ void mc_amm_q8_tiles(MT *ks, MT *vs, const uint8_t *rk, const uint8_t *rv, uint32_t n,
                                                uint32_t tid, uint32_t nthr) {
    constexpr uint32_t LD = MC_AMM_LD<HD>, Q = HD / 8, RB = MC_AMM_RB<HD>;
    for (uint32_t i = tid; i < MC_AMM_SPAN * Q; i += nthr) {
        const uint32_t t = i / Q, c = i % Q;
        const bool in = t < n;
        *(uint4 *)(ks + t * LD + 8 * c) = in ? mc_amm_q8_piece<HD, MT>(rk + t * RB, c) : make_uint4(0, 0, 0, 0);
        *(uint4 *)(vs + t * LD + 8 * c) = in ? mc_amm_q8_piece<HD, MT>(rv + t * RB, c) : make_uint4(0, 0, 0, 0);
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
        constexpr uint32_t RB = MC_AMM_RB<HD>, CB = MC_AMM_CB<HD>;
        const uint8_t *gk = (const uint8_t *)kb + (size_t)t0 * RB, *gv = (const uint8_t *)vb + (size_t)t0 * RB;
        for (uint32_t i = tid; i < n * 9; i += nthr) {
            mc_amm_cp_async<CB>(raw + i * CB, gk + i * CB);
            mc_amm_cp_async<CB>(raw + MC_AMM_SPAN * RB + i * CB, gv + i * CB);
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

template <uint32_t HD, uint32_t G, typename KT = float, bool TIER = false>
__global__ void __launch_bounds__(MC_AMM_THREADS)
    attention_mma(const mc_rope_args a, const float *qkv, KT *k_cache, KT *v_cache, float *out, const int32_t *pos,
                  uint32_t rows) {
    static_assert(HD == 32 || HD == 64 || HD == 128, "head sizes 32, 64, 128");
    typedef typename mc_amm_mt<KT>::T MT;
    constexpr uint32_t S = MC_AMM_SPAN, LD = MC_AMM_LD<HD>, NW = MC_AMM_WARPS, NT = MC_AMM_THREADS, R = 16 / G;
    constexpr uint32_t DPL = MC_ATC_DPL<HD>, KS = HD / 16, ND = HD / 8, TILE = S * LD;
    constexpr uint32_t TS = TIER ? MC_AMM_TIER : 1u; /* spans a fold unit holds (attfold: span 1, tier) */
    const uint32_t g = blockIdx.x, x = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const uint32_t gid = lane >> 2, tig = lane & 3;
    extern __shared__ __align__(16) unsigned char smb[];
    constexpr uint32_t KV = mc_kv_is_q8<KT> ? MC_KV_Q8 : sizeof(KT) == 4 ? MC_KV_F32 : MC_KV_BF16, RB = MC_AMM_RB<HD>;
    const mc_amm_layout L = mc_amm_layout_of(HD, KV, rows != 0);
    MT *tiles = (MT *)(smb + L.kv);
    uint8_t *raw = smb + L.raw; /* kv=q8: buffer b at raw + 2 b S RB */
    KT *kn = (KT *)(smb + L.kn), *vn = (KT *)(smb + L.vn);
    float fr[DPL]; /* the lane's RoPE frequencies: read with *pos, one round trip */
    mc_atc_freqs<HD>(fr, a, lane & 15);
    const int32_t p00 = *pos;
    /* the block's rows: a chunk's z0 .. z1 - 1 (warp w: z0 + w R ..), or the decode step */
    const uint32_t z0 = rows ? x * NW * R : 0, z1 = rows ? min(z0 + NW * R, rows) : 1;
    if (z0 >= z1)
        return;
    const uint32_t lo = mc_att_first_position(a.window, (uint32_t)(p00 + (int32_t)z0)) / S,
                   hi = (uint32_t)(p00 + (int32_t)z1 - 1) / S;
    const KT *kb = k_cache + (size_t)g * a.capacity * MC_KV_ROWE<HD, KT>,
             *vb = v_cache + (size_t)g * a.capacity * MC_KV_ROWE<HD, KT>;
    const uint32_t X = gridDim.y, ul = lo / TS, uh = hi / TS; /* the fold units (spans, or tiers) */
    uint32_t n_act = 0;
    bool has_new = false;
    if (!rows) { /* decode: block x takes units ul + x, ul + x + X, ... (its warp 0 computes) */
        n_act = min(uh - ul + 1, X);
        if (x >= n_act)
            return;
        has_new = (uh - ul) % X == x; /* the block that holds p's span */
        /* rows below p were written by earlier steps: staged before the wait */
        const uint32_t s0 = max((ul + x) * TS, lo);
        mc_amm_stage<HD, KT, MT>(tiles, tiles + TILE, raw, kb, vb, s0 * S, s0 == hi ? (uint32_t)p00 - hi * S : S, tid,
                                 NT);
    } else { /* a chunk: every row's k and v appended before this launch */
        mc_amm_stage<HD, KT, MT>(tiles, tiles + TILE, raw, kb, vb, lo * S, min(S, (uint32_t)p00 + z1 - lo * S), tid,
                                 NT);
    }
    mc_wait_prior_grid(MC_ATT_FAMILY(a));
    /* q of the warp's rows (decode: warp 0, the step's row; with has_new also the new k and v
     * row), one call site for both modes: the same instructions, so the same q bits */
    MT *qt = (MT *)smb + (rows ? warp * 16 * LD : 0);
    const uint32_t nq = rows ? R : 1, zw = z0 + (rows ? warp * R : 0);
    if (rows || warp == 0) {
        for (uint32_t i = lane; i < 16 * LD / 8; i += 32)
            ((uint4 *)qt)[i] = make_uint4(0, 0, 0, 0);
        __syncwarp();
        for (uint32_t i = 0; i < nq; i += 2) {
            const uint32_t ir = i + (lane >> 4), zr = min(zw + min(ir, nq - 1), z1 - 1);
            const int32_t pr = p00 + (int32_t)zr;
            mc_atc_cs<HD> cs;
            mc_atc_rope_prep<HD>(cs, fr, a, pr);
            float q[G][DPL];
            mc_atc_q_and_row<HD, G, KT>(q, a, qkv + (size_t)zr * ((a.n_head + 2 * a.n_kv) * HD), g, g, cs,
                                        has_new, true, kn, vn, k_cache, v_cache, pr);
            if (ir < nq && zw + ir < z1)
#pragma unroll
                for (uint32_t h = 0; h < G; h++)
#pragma unroll
                    for (uint32_t k = 0; k < DPL; k++)
                        qt[(ir * G + h) * LD + mc_atc_dim<HD>(lane & 15, k)] = mc_kv_put<MT>(q[h][k]);
        }
    }
    __syncthreads(); /* the q tile and decode's new row */
    uint32_t qa[KS][4];
#pragma unroll
    for (uint32_t kk = 0; kk < KS; kk++)
        mc_amm_ldsm4(qa[kk], qt + ((lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 16 * kk + 8 * (lane >> 4));
    /* the lane's rows gid, gid + 8: the positions they attend to */
    int32_t rw[2], rp[2];
#pragma unroll
    for (uint32_t h = 0; h < 2; h++) {
        const uint32_t r = gid + 8 * h, ir = r / G;
        const bool ok = r < nq * G && zw + ir < z1;
        const int32_t pr = p00 + (int32_t)(zw + ir);
        rp[h] = ok ? pr : -1;
        rw[h] = ok ? (int32_t)mc_att_first_position(a.window, (uint32_t)pr) : 0;
    }
    const float scale = a.scale > 0.0f ? a.scale : 1.0f / sqrtf((float)HD);
    float m[2], l[2], o[ND][4];
    if (!rows) {
        const uint32_t NS = (a.capacity + S - 1) / S;
        /* the partials: out [head][span][hd], then (max, sum) [head][span][2] */
        float *po = a.partial, *pml = a.partial + (size_t)a.n_head * NS * HD;
        float *xm = (float *)(smb + L.wab), *xt = xm + 64; /* the span's exchange (the merge's space) */
        uint32_t *pf = (uint32_t *)(xt + 256);
        /* the block's units' spans in order (attfold=span: the spans lo + x, lo + x + X, ...;
         * tier: each of its tiers' spans, folded in the block as a chunk's row folds them), each
         * staged one ahead into the other tile pair (the first before the wait): where a span's
         * rows are loaded never changes what is computed from them */
        constexpr uint32_t PW = (ND / 2 + NW - 1) / NW;
        float DM = 0.0f, DL = 0.0f, DF[PW][2][4]; /* attfold=tier: the unit's fold so far (rows gid) */
        for (uint32_t u = ul + x, s = max(u * TS, lo), k = 0; u <= uh; k++) {
            MT *ks = tiles + 2 * (k & 1) * TILE, *vs = ks + TILE;
            const uint32_t ulast = min(u * TS + TS - 1, hi); /* the unit's last span */
            const uint32_t nu = s < ulast ? u : u + X, ns = s < ulast ? s + 1 : max(nu * TS, lo);
            const bool ahead = nu <= uh;
            if (k)
                __syncthreads(); /* the span before is read, its tiles and the exchange */
            if (ahead) /* the pair read two spans ago (the barrier above orders it) */
                mc_amm_stage<HD, KT, MT>(tiles + 2 * ((k + 1) & 1) * TILE, tiles + (2 * ((k + 1) & 1) + 1) * TILE,
                                         raw + 2 * ((k + 1) & 1) * S * RB, kb, vb, ns * S,
                                         ns == hi ? (uint32_t)p00 - hi * S : S, tid, NT);
            mc_cp_async_wait(ahead ? 1 : 0);
            if constexpr (mc_kv_is_q8<KT>) { /* the new row's stored bytes after the staged rows, then the tiles */
                uint8_t *rk = raw + 2 * (k & 1) * S * RB;
                const uint32_t n = s == hi ? (uint32_t)p00 - s * S + 1 : S;
                if (s == hi)
                    for (uint32_t i = tid; i < RB / 4; i += NT) {
                        ((uint32_t *)(rk + (n - 1) * RB))[i] = ((const uint32_t *)kn)[i];
                        ((uint32_t *)(rk + S * RB + (n - 1) * RB))[i] = ((const uint32_t *)vn)[i];
                    }
                __syncthreads();
                mc_amm_q8_tiles<HD, MT>(ks, vs, rk, rk + S * RB, n, tid, NT);
            } else if (s == hi) { /* the new row over the staging's zeros (kn, vn: from warp 0, before) */
                __syncthreads();
                for (uint32_t i = tid; i < HD; i += NT) {
                    ks[((uint32_t)p00 - s * S) * LD + i] = mc_kv_put<MT>(mc_kv_get(kn[i]));
                    vs[((uint32_t)p00 - s * S) * LD + i] = mc_kv_put<MT>(mc_kv_get(vn[i]));
                }
            }
            __syncthreads(); /* the span's rows */
            /* warp w: the scores and weights of positions 16 w .. 16 w + 15, then the out
             * elements of its n-tile pairs; the rows' max, sum and P exchanged in shared memory */
            const int32_t sb = (int32_t)(s * S);
            float sq[2][4], mx[2] = {-INFINITY, -INFINITY}, t[1][2];
            mc_amm_scores<HD, MT, 1>(sq, ks, qa, warp);
            mc_amm_mask<2>(sq, rw, rp, sb + 16 * (int32_t)warp, scale, mx);
            mc_amm_quad_max(mx);
            if (tig == 0) {
                xm[warp * 16 + gid] = mx[0];
                xm[warp * 16 + gid + 8] = mx[1];
            }
            __syncthreads();
#pragma unroll
            for (uint32_t h = 0; h < 2; h++) {
                mx[h] = -INFINITY;
#pragma unroll
                for (uint32_t w2 = 0; w2 < NW; w2++)
                    mx[h] = fmaxf(mx[h], xm[w2 * 16 + gid + 8 * h]);
            }
            mc_amm_probs<1>(sq, mx, t);
            uint32_t pw[4];
            mc_amm_pfrag_of(pw, sq[0], sq[1], MT());
            xt[(warp * 32 + lane) * 2] = t[0][0];
            xt[(warp * 32 + lane) * 2 + 1] = t[0][1];
            *(uint4 *)(pf + (warp * 32 + lane) * 4) = make_uint4(pw[0], pw[1], pw[2], pw[3]);
            __syncthreads();
            uint32_t pa[S / 16][4];
#pragma unroll
            for (uint32_t kk = 0; kk < S / 16; kk++) {
                const uint4 v = *(const uint4 *)(pf + (kk * 32 + lane) * 4);
                pa[kk][0] = v.x;
                pa[kk][1] = v.y;
                pa[kk][2] = v.z;
                pa[kk][3] = v.w;
            }
            constexpr uint32_t NP = ND / 2;
            float o2[PW][2][4];
#pragma unroll
            for (uint32_t pi = 0; pi < PW; pi++)
                if (warp + NW * pi < NP)
                    mc_amm_pv<HD, MT, 1>(o2[pi], pa, vs, warp + NW * pi);
            const float l0 = mc_amm_sum(xt[lane * 2], xt[(32 + lane) * 2], xt[(64 + lane) * 2], xt[(96 + lane) * 2]);
            float wm = mx[0], wl = l0; /* what the unit's partial gets: the span's, or the tier's fold */
            if constexpr (TIER) {
                if (s == max(u * TS, lo)) { /* the unit's first span */
                    DM = mx[0];
                    DL = l0;
#pragma unroll
                    for (uint32_t pi = 0; pi < PW; pi++)
#pragma unroll
                        for (uint32_t n = 0; n < 2; n++)
#pragma unroll
                            for (uint32_t c = 0; c < 4; c++)
                                DF[pi][n][c] = o2[pi][n][c];
                } else {
                    float wa, wb;
                    mc_spl_fold_row(DM, DL, mx[0], l0, wa, wb);
#pragma unroll
                    for (uint32_t pi = 0; pi < PW; pi++)
#pragma unroll
                        for (uint32_t n = 0; n < 2; n++)
#pragma unroll
                            for (uint32_t c = 0; c < 4; c++)
                                DF[pi][n][c] = mc_spl_fold_elem(DF[pi][n][c], o2[pi][n][c], wa, wb);
                }
                wm = DM;
                wl = DL;
            }
            if (!TIER || s == ulast) { /* unit u's partial: its out elements, then (max, sum) */
#pragma unroll
                for (uint32_t pi = 0; pi < PW; pi++) {
                    const uint32_t pr = warp + NW * pi;
                    if (pr < NP && gid < G) {
                        const float(&w)[2][4] = TIER ? DF[pi] : o2[pi];
                        float *ph = po + ((size_t)(g * G + gid) * NS + u) * HD + 16 * pr + 2 * tig;
                        *(float2 *)ph = make_float2(w[0][0], w[0][1]);
                        *(float2 *)(ph + 8) = make_float2(w[1][0], w[1][1]);
                    }
                }
                if (warp == 0 && gid < G && tig == 0)
                    *(float2 *)(pml + ((size_t)(g * G + gid) * NS + u) * 2) = make_float2(wm, wl);
            }
            s = ns;
            u = nu;
        }
        /* the last block of kv head g to finish folds every unit's partials in order */
        uint32_t *flag = (uint32_t *)(smb + L.flag);
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            __threadfence();
            flag[0] = atomicAdd(a.ticket + g, 1u) == n_act - 1 ? 1u : 0u;
        }
        __syncthreads();
        if (!flag[0])
            return;
        __threadfence();
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
        float Mh = 0.0f, Lh = 0.0f, O[EPT];
        for (uint32_t sb = ul; sb <= uh; sb += NB) {
            const uint32_t nb = min(NB, uh + 1 - sb), q4 = nb * HD / 4;
            __syncthreads(); /* the batch before is read */
            for (uint32_t i = tid; i < G * q4; i += NT) { /* out [head][span][hd] of the batch */
                const uint32_t h = i / q4, r = i % q4;
                mc_cp_async16(bo + (size_t)h * nb * HD + 4 * r, po + ((size_t)(g * G + h) * NS + sb) * HD + 4 * r);
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
            if (tid < G) {
                for (uint32_t j = 0; j < nb; j++) {
                    const float ms = wab[(j * 8 + tid) * 2];
                    mp[j * 8 + tid] = Mh;
                    Mh = sb + j == ul ? ms : fmaxf(Mh, ms);
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
        return;
    }
    /* a chunk: spans lo .. hi of the block, staged one ahead; each warp folds those its rows need */
    float FM[2] = {-INFINITY, -INFINITY}, FL[2] = {0.0f, 0.0f}, F[ND][4];
#pragma unroll
    for (uint32_t n = 0; n < ND; n++)
        F[n][0] = F[n][1] = F[n][2] = F[n][3] = 0.0f;
    /* attfold=tier: F holds the row's fold within the tier, T the tiers' fold so far */
    float TM[2] = {-INFINITY, -INFINITY}, TL[2] = {0.0f, 0.0f}, TF[TIER ? ND : 1][4];
#pragma unroll
    for (uint32_t n = 0; n < (TIER ? ND : 1); n++)
        TF[n][0] = TF[n][1] = TF[n][2] = TF[n][3] = 0.0f;
    const int32_t wlast = p00 + (int32_t)min(zw + R, z1) - 1,
                  wfirst = (int32_t)mc_att_first_position(a.window, (uint32_t)(p00 + (int32_t)min(zw, z1 - 1)));
    for (uint32_t s = lo, k = 0; s <= hi; s++, k++) {
        if (s < hi)
            mc_amm_stage<HD, KT, MT>(tiles + 2 * ((k + 1) & 1) * TILE, tiles + (2 * ((k + 1) & 1) + 1) * TILE,
                                     raw + 2 * ((k + 1) & 1) * S * RB, kb, vb, (s + 1) * S,
                                     min(S, (uint32_t)p00 + z1 - (s + 1) * S), tid, NT);
        mc_cp_async_wait(s < hi ? 1 : 0);
        __syncthreads(); /* span s's tiles for every warp (kv=q8: its stored rows) */
        if constexpr (mc_kv_is_q8<KT>) {
            const uint8_t *rk = raw + 2 * (k & 1) * S * RB;
            mc_amm_q8_tiles<HD, MT>(tiles + 2 * (k & 1) * TILE, tiles + (2 * (k & 1) + 1) * TILE, rk, rk + S * RB,
                                    min(S, (uint32_t)p00 + z1 - s * S), tid, NT);
            __syncthreads();
        }
        const int32_t sb = (int32_t)(s * S);
        if (zw < z1 && wlast >= sb && wfirst < sb + (int32_t)S) { /* some row of the warp attends here */
            const MT *ks = tiles + 2 * (k & 1) * TILE;
            mc_amm_span<HD, MT>(ks, ks + TILE, qa, rw, rp, sb, scale, m, l, o);
#pragma unroll
            for (uint32_t h = 0; h < 2; h++) {
                if (rp[h] < sb || rw[h] >= sb + (int32_t)S)
                    continue; /* the row does not attend to this span */
                /* the span into the row's fold (its first span, or its tier's: set) */
                mc_amm_row_fold(FM[h], FL[h], F, m[h], l[h], o, h, rw[h] >= sb || (TIER && s % TS == 0));
                if constexpr (TIER) /* the row's last span of this tier: the tier into the row's fold */
                    if (s % TS == TS - 1 || (int32_t)s == rp[h] / (int32_t)S)
                        mc_amm_row_fold(TM[h], TL[h], TF, FM[h], FL[h], F, h, (uint32_t)rw[h] / S / TS == s / TS);
            }
        }
        __syncthreads(); /* the tiles are read before the staging two spans on */
    }
#pragma unroll
    for (uint32_t h = 0; h < 2; h++) {
        if (rp[h] < 0)
            continue;
        const uint32_t r = gid + 8 * h, zr = zw + r / G;
        float *orow = out + (size_t)zr * (a.n_head * HD) + (size_t)(g * G + r % G) * HD;
        if constexpr (TIER) {
            const float inv = 1.0f / TL[h];
#pragma unroll
            for (uint32_t n = 0; n < ND; n++)
                *(float2 *)(orow + 8 * n + 2 * tig) = make_float2(TF[n][2 * h] * inv, TF[n][2 * h + 1] * inv);
        } else {
            const float inv = 1.0f / FL[h];
#pragma unroll
            for (uint32_t n = 0; n < ND; n++)
                *(float2 *)(orow + 8 * n + 2 * tig) = make_float2(F[n][2 * h] * inv, F[n][2 * h + 1] * inv);
        }
    }
}

/* ---- launch ------------------------------------------------------------------------------- */

#define MC_AMM_FN(HD, G) ((const void *)attention_mma<HD, G>)
#define MC_AMM_FN_H(HD, G) ((const void *)attention_mma<HD, G, __half>)
#define MC_AMM_FN_B(HD, G) ((const void *)attention_mma<HD, G, __nv_bfloat16>)
#define MC_AMM_FN_Q(HD, G) ((const void *)attention_mma<HD, G, mc_q8>)
#define MC_AMM_FN_T(HD, G) ((const void *)attention_mma<HD, G, float, true>)
#define MC_AMM_FN_TH(HD, G) ((const void *)attention_mma<HD, G, __half, true>)
#define MC_AMM_FN_TB(HD, G) ((const void *)attention_mma<HD, G, __nv_bfloat16, true>)
#define MC_AMM_FN_TQ(HD, G) ((const void *)attention_mma<HD, G, mc_q8, true>)
#define MC_AMM_PICK(kv, hd, G)                                                                                         \
    ((kv) == MC_KV_F16    ? MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_H)                                                     \
     : (kv) == MC_KV_BF16 ? MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_B)                                                     \
     : (kv) == MC_KV_Q8   ? MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_Q)                                                     \
                          : MC_ATC_DISPATCH128(hd, G, MC_AMM_FN))
#define MC_AMM_PICK_T(kv, hd, G)                                                                                       \
    ((kv) == MC_KV_F16    ? MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_TH)                                                    \
     : (kv) == MC_KV_BF16 ? MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_TB)                                                    \
     : (kv) == MC_KV_Q8   ? MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_TQ)                                                    \
                          : MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_T))
#define MC_AMM_EACH(F)                                                                                                 \
    MC_ATC_EACH_OF128(F, MC_AMM_FN) MC_ATC_EACH_OF128(F, MC_AMM_FN_H) MC_ATC_EACH_OF128(F, MC_AMM_FN_B)               \
        MC_ATC_EACH_OF128(F, MC_AMM_FN_Q) MC_ATC_EACH_OF128(F, MC_AMM_FN_T) MC_ATC_EACH_OF128(F, MC_AMM_FN_TH)         \
            MC_ATC_EACH_OF128(F, MC_AMM_FN_TB) MC_ATC_EACH_OF128(F, MC_AMM_FN_TQ)

int mc_amm_ok(uint32_t G, uint32_t hd, uint32_t hdv) {
    return hd == hdv && (hd == 32 || hd == 64 || hd == 128) && (G == 1 || G == 2 || G == 3 || G == 4 || G == 8);
}

/* Per device: whether every instantiation may use the largest need (hd 128, f32's or q8's,
 * decode's or a chunk's, whichever is largest). */
static int mc_amm_smem_ready[MC_MAX_DEVICES];

cudaError_t mc_amm_prepare(int dev) {
#define MC_AMM_FNS(fn) fn,
    static const void *const fns[] = {MC_AMM_EACH(MC_AMM_FNS)};
#undef MC_AMM_FNS
    uint32_t m = 0;
    for (uint32_t kv = MC_KV_F32; kv <= MC_KV_Q8; kv++)
        for (int chunk = 0; chunk < 2; chunk++) {
            const uint32_t t = mc_amm_layout_of(128, kv, chunk != 0).total;
            m = t > m ? t : m;
        }
    return mc_att_smem_limit(fns, sizeof fns / sizeof fns[0], (int)m, mc_amm_smem_ready, dev);
}

/* attention_mma's launch: decode (rows 0; a programmatic launch under c->pdl, the grid by the
 * state's capacity, its scratch from a) or a chunk's rows (rows = M; plain stream order, 4 R rows
 * a block). */
cudaError_t mc_amm_launch(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache, void *v_cache,
                          float *out, const int32_t *pos, uint32_t rows, cudaStream_t st) {
    const uint32_t G = a->n_head / a->n_kv;
    if (!mc_amm_ok(G, a->hd, a->hdv) || (!rows && (!a->partial || !a->ticket)))
        return cudaErrorInvalidValue;
    cudaError_t e = mc_attention_fused_prepare(c, a->n_head, a->n_kv, a->hd, a->hdv);
    if (e != cudaSuccess)
        return e;
    /* decode's blocks a kv head: one a fold unit (a span, or a tier) up to MC_AMM_BLOCKS */
    const bool tier = c->attfold == MC_ATTFOLD_TIER;
    const uint32_t per = MC_AMM_WARPS * (16 / G),
                   X = (a->capacity + MC_AMM_SPAN * (tier ? MC_AMM_TIER : 1) - 1) / (MC_AMM_SPAN * (tier ? MC_AMM_TIER : 1));
    return mc_att_span_launch(
        c, tier ? MC_AMM_PICK_T(a->kv, a->hd, G) : MC_AMM_PICK(a->kv, a->hd, G),
        rows ? dim3(a->n_kv, (rows + per - 1) / per) : dim3(a->n_kv, X < MC_AMM_BLOCKS ? X : MC_AMM_BLOCKS),
        MC_AMM_THREADS, mc_amm_layout_of(a->hd, a->kv, rows != 0).total, a, qkv, k_cache, v_cache, out,
        pos, rows, st);
}

cudaError_t mc_attention_mma_trigger_addr(void **p) { return cudaGetSymbolAddress(p, mc_trigger_mask); }

const char *mc_attention_mma_family(const void *f) {
    static const mc_family_row table[] = {
#define MC_AMM_ROW(fn) {fn, "attention"},
        MC_AMM_EACH(MC_AMM_ROW)
#undef MC_AMM_ROW
    };
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
