/* attention_chunk.cu: the attention of a prefill chunk's rows (mc_attention_chunk). A prefill
 * chunk's rows keep their path's decode bits: attention_chunk_append, then attention_chunk_rows
 * (the cluster path's, one block per row and kv head walking the 8 ranks) or attention_split's
 * chunk mode (attention_split.cu). This file holds the two kernels and the chunk's launch (at hd
 * 256, and for mc_attention_chunk_cluster, the rows run on attention.cu's cluster kernel); what
 * they share with the decode kernels is in attention_common.cuh, the choice of path in
 * attention.cu. */
#include "attention_common.cuh"

/* attention_chunk_rows's reduction of one tile of a rank's positions, [t0, t0 + nt) (K row t at
 * ks + t HD, V row t at vs + t HD, in the cache's type; the row of position `skip`, when in the
 * tile, from kn, vn instead): attention_decode_cluster's loop, copied token for token (the cluster
 * kernel keeps its own copy: calling this from it reordered its PTX, and decode's code stays as
 * it was). Group q of the block (GPW groups a warp, NG a block) folds the pairs (t0 + 2 NG k + q,
 * t0 + 2 NG k + q + NG), k = 0, 1, ..., in order into its online softmax (m, l, o) per head; a
 * score is the lanes' partial dots in slot order, then a fixed xor tree over the GL lanes. With
 * every tile but a range's last a multiple of 2 NG positions, a pair never straddles two tiles,
 * so group q's sequence of operations over a range does not depend on the tile size. */
template <uint32_t HD, uint32_t G, typename KT>
__device__ __forceinline__ void mc_atc_tile_pass(const float (&q)[G][MC_ATC_DPL<HD>], const KT *ks, const KT *vs,
                                                 const KT *kn, const KT *vn, uint32_t t0, uint32_t nt, uint32_t skip,
                                                 float scale, float (&m)[G], float (&l)[G],
                                                 float (&o)[G][MC_ATC_DPL<HD>]) {
    constexpr uint32_t GL = MC_ATC_GL<HD>, DPL = MC_ATC_DPL<HD>, GPW = 32 / GL, NG = GPW * MC_ATC_WARPS;
    const uint32_t tid = threadIdx.x, grp = tid / GL, gl = tid % GL, warp = tid >> 5;
    /* warp-uniform trip count: group q of the warp's (2w and 2w + 1, or w at hd 256) takes
     * positions ta = q + 2 NG k and ta + NG */
    for (uint32_t base = GPW * warp; base < nt; base += 2 * NG) {
        const uint32_t ta = base + (grp - GPW * warp), tb = ta + NG;
        const bool va = ta < nt, vbl = tb < nt;
        const KT *ka = t0 + ta == skip ? kn : ks + (va ? ta : 0) * HD;
        const KT *kb2 = t0 + tb == skip ? kn : ks + (vbl ? tb : 0) * HD;
        const KT *va_row = t0 + ta == skip ? vn : vs + (va ? ta : 0) * HD;
        const KT *vb_row = t0 + tb == skip ? vn : vs + (vbl ? tb : 0) * HD;
        float kxa[DPL], kxb[DPL], vxa[DPL], vxb[DPL];
        mc_atc_load<HD>(kxa, ka, gl);
        mc_atc_load<HD>(kxb, kb2, gl);
        mc_atc_load<HD>(vxa, va_row, gl);
        mc_atc_load<HD>(vxb, vb_row, gl);
        float sa[G], sb[G];
#pragma unroll
        for (uint32_t h = 0; h < G; h++) {
            float x = 0.0f, y = 0.0f;
#pragma unroll
            for (uint32_t i = 0; i < DPL; i++) {
                x = fmaf(q[h][i], kxa[i], x);
                y = fmaf(q[h][i], kxb[i], y);
            }
            sa[h] = x;
            sb[h] = y;
        }
#pragma unroll
        for (int off = GL / 2; off > 0; off >>= 1)
#pragma unroll
            for (uint32_t h = 0; h < G; h++) {
                sa[h] += __shfl_xor_sync(MC_FULL, sa[h], off);
                sb[h] += __shfl_xor_sync(MC_FULL, sb[h], off);
            }
        if (va) {
#pragma unroll
            for (uint32_t h = 0; h < G; h++) {
                const float s1 = sa[h] * scale, s2 = vbl ? sb[h] * scale : -INFINITY;
                const float mn = fmaxf(m[h], fmaxf(s1, s2));
                const float alpha = expf(m[h] - mn); /* 0 on the group's first position */
                const float pa = expf(s1 - mn), pb = vbl ? expf(s2 - mn) : 0.0f;
                l[h] = fmaf(l[h], alpha, pa) + pb;
                m[h] = mn;
#pragma unroll
                for (uint32_t i = 0; i < DPL; i++) {
                    float v = fmaf(pa, vxa[i], o[h][i] * alpha);
                    if (vbl)
                        v = fmaf(pb, vxb[i], v);
                    o[h][i] = v;
                }
            }
        }
    }
}

/* ---- a prefill chunk: the KV rows of every row, then every row's attention ---------------- */

/* One warp per (kv head g, row j of the chunk): the k and v rows at position *pos + j, computed
 * exactly as attention_decode_cluster's block that holds the new row computes them (warp 0: every
 * group of it, the k norm, the lane's RoPE angles, group 0 writes), into the cache. */
template <uint32_t HD, typename KT = float>
__global__ void __launch_bounds__(32)
    attention_chunk_append(const mc_rope_args a, const float *qkv, KT *k_cache, KT *v_cache, const int32_t *pos) {
    constexpr uint32_t DPL = MC_ATC_DPL<HD>, GL = MC_ATC_GL<HD>;
    const uint32_t g = blockIdx.x, j = blockIdx.y, lane = threadIdx.x, gl = lane % GL;
    float fr[DPL], kw[DPL];
    mc_atc_freqs<HD>(fr, a, gl);
    mc_atc_norm_load<HD>(kw, a.k_norm, gl);
    const int32_t p = *pos + (int32_t)j;
    const float *q = qkv + (size_t)j * ((a.n_head + 2 * a.n_kv) * HD);
    mc_atc_cs<HD> cs;
    mc_atc_rope_prep<HD>(cs, fr, a, p);
    float kv[1][DPL], vv[DPL];
    mc_atc_load<HD>(kv[0], q + (size_t)a.n_head * HD + (size_t)g * HD, gl);
    mc_atc_load<HD>(vv, q + (size_t)(a.n_head + a.n_kv) * HD + (size_t)g * HD, gl);
    if (a.k_norm)
        mc_atc_norm<HD, 1>(kv, kw, a.eps);
    mc_atc_rope<HD, 1>(kv, cs, a.neox, gl);
    if (lane < GL) {
        mc_atc_store<HD, KT>(k_cache + ((size_t)g * a.capacity + (size_t)p) * MC_KV_ROWE<HD, KT>, kv[0], gl);
        mc_atc_store<HD, KT>(v_cache + ((size_t)g * a.capacity + (size_t)p) * MC_KV_ROWE<HD, KT>, vv, gl);
    }
}

/* attention_chunk_rows: a chunk's rows with the cluster's bits, one block of 256 threads per (kv
 * head g, row z) instead of a cluster of 8 per row (attention_decode_cluster<CH>: 8 blocks of
 * 128 KB of shared memory each, one a multiprocessor, ~per = (p + 1) / 8 positions each, a cluster
 * barrier and merge per row). The block walks the row's 8 ranks one after another, each rank's
 * range [p0, p1) (the split of [w0, p] the decode step at p takes) in tiles of T positions (T a
 * multiple of 2 NG: the groups' pairs are the cluster's, mc_atc_tile_pass), with the next tile
 * (of this rank or the next) in flight while one is reduced. At a rank's end the block does what
 * the cluster's block of that rank does before its pushes: the NG group states (into the tile
 * buffer just read: the next tile is in the other one) merge in group order into the rank's max
 * and sum per head and out per element, kept in shared memory; after the 8 ranks the same final
 * merge in rank order as the cluster's. Every value is computed by the same operations in the
 * same order as in the cluster kernel (q by mc_atc_q_and_row, the ranges, the pairs, both
 * merges), so every row has the bits of decode at its position. Serves hd in {32, 64, 128} (16
 * lane groups) and G in {1, 2, 3, 4, 8}; at hd 256 the chunk stays on the cluster kernel. */
#define MC_ACR_THREADS (32u * MC_ATC_WARPS)
#define MC_ACR_NG (2u * MC_ATC_WARPS) /* 16-lane groups of a block (hd <= 128) */

/* Positions of one tile: 16 KB of K (and of V) or more where the group states need it (they take
 * a K and V buffer pair), a power of two >= 32 = 2 NG for hd <= 128. */
__host__ __device__ constexpr uint32_t mc_acr_tile(uint32_t G, uint32_t hd, uint32_t kvb) {
    return (16384u > MC_ACR_NG * G * hd * 2u ? 16384u : MC_ACR_NG * G * hd * 2u) / (hd * kvb);
}
/* Shared floats: two (K, V) tile buffer pairs of T hd stored values each (the group states alias
 * the pair just read), the group (max, sum) and weights, the rank's max per head, and per rank
 * (max, sum) per head and out per element. */
__host__ __device__ constexpr uint32_t mc_acr_smem_floats(uint32_t G, uint32_t hd, uint32_t kvb) {
    return 4 * (mc_acr_tile(G, hd, kvb) * hd * kvb / 4) + 3 * MC_ACR_NG * G + (G + 3) / 4 * 4 + 2 * MC_ATT_SPLIT * G +
           MC_ATT_SPLIT * G * hd;
}
/* Blocks a multiprocessor the launch bounds ask registers for (G hd: the o and q registers). */
__host__ __device__ constexpr uint32_t mc_acr_min_blocks(uint32_t G, uint32_t hd) {
    return G * hd <= 256 ? 3u : G * hd <= 512 ? 2u : 1u;
}

/* The cluster's final merge of one row head's ranks (decode's order): each rank's weight against
 * the ranks' max into w, and 1 / (the weighted sum of the ranks' sums); an element is then
 * (sum over ranks in order of fmaf(out, w)) times that. attention_chunk_rows and
 * attention_chunk_phased both call it. */
__device__ __forceinline__ float mc_acr_final_weights(const float (&mr)[MC_ATT_SPLIT], const float (&lr)[MC_ATT_SPLIT],
                                                      float (&w)[MC_ATT_SPLIT]) {
    float M = mr[0];
#pragma unroll
    for (uint32_t s2 = 1; s2 < MC_ATT_SPLIT; s2++)
        M = fmaxf(M, mr[s2]);
    float L = 0.0f;
#pragma unroll
    for (uint32_t s2 = 0; s2 < MC_ATT_SPLIT; s2++) {
        w[s2] = expf(mr[s2] - M);
        L = fmaf(lr[s2], w[s2], L);
    }
    return 1.0f / L;
}

/* ---- attention_chunk_phased: R rows of a kv head a block, in phases --------------------------- */

/* attchunk=phased (the default): a block of 256 threads holds R = 16 / G rows of the chunk and one
 * kv head (NRH = R G row heads; two blocks a multiprocessor), and walks the 8 ranks of the cluster's split once for all of them,
 * each rank in phases separated by barriers, every value computed by the operations of the
 * cluster kernel (attention_chunk_rows's copy of them) in the same order:
 *   A  the scores: a quad of lanes a (row head, position) holds lane gl's partial dots for gl in
 *      {j, j + 4, j + 8, j + 12} (lane j of the quad: each a chain of fmaf over gl's slots, as the
 *      group's lane gl), sums gl and gl + 8, then gl and gl + 4 in registers, then the xor steps 2
 *      and 1 across the quad: the cluster's tree over 16 lanes, term for term. A score lands in
 *      its pair's slot.
 *   B  the softmax scalars: a thread a (row head, group q) runs group q's pairs of the rank in order
 *      (the cluster's m, l, alpha, pa, pb: once, not on each of 16 lanes), writes each pair's
 *      (alpha, pa, pb) over its scores and the group's (m, l).
 *   M  the rank's merge weights: the max of the 16 groups' m and each group's weight.
 *   C  the outputs: a thread a (row head, HD / 16 elements) runs each group's chain of o over its
 *      pairs and folds it into the rank's out with the group's weight, in group order (kept in
 *      registers for the final merge); the rank's sum of l by one thread a row head.
 * A rank holds at most PMAX = 64 positions, so a group at most two pairs: every loop is unrolled,
 * its steps predicated on the rank's length. The thread's elements in C are lane qg's slots of
 * the cluster's layout (conflict-free reads of the staged V rows).
 * The rank's K and V rows (the union of the R rows' ranges: [p0 of the first row, p1 of the last),
 * at most PMAX + 2 R positions) are copied into shared memory by cp.async, K for rank r + 1 while
 * rank r's B, M and C run, V for rank r + 1 while its A and B run. After the 8 ranks the final
 * merge in rank order. A block whose last row has a rank of more than MC_ACP_PMAX positions (past
 * 8 PMAX positions in its window) returns at once; attention_chunk_rows, launched after it, takes
 * its rows (mc_acp_serves decides for both). */
#define MC_ACP_NRH 16u
#define MC_ACP_THREADS (16u * MC_ACP_NRH)
#define MC_ACP_PMAX 64u
template <uint32_t G> inline constexpr uint32_t MC_ACP_R = MC_ACP_NRH / G;

/* Bytes of a staged K row: hd values and a pad that puts the 4 rows a quad-load instruction reads
 * into distinct banks (a lane's 4 slot chunks of min(DPL, 4) values are contiguous per row). */
__host__ __device__ constexpr uint32_t mc_acp_krow_bytes(uint32_t hd, uint32_t kvb) {
    return hd * kvb + 4u * (hd / 16u >= 4u ? 4u : hd / 16u) * kvb;
}
/* Positions of the staged K and V buffers: a rank of the block's last row and the spread of the
 * R rows' starts and ends. */
__host__ __device__ constexpr uint32_t mc_acp_tu(uint32_t G) { return MC_ACP_PMAX + 2u * (MC_ACP_NRH / G) + 4u; }
/* Shared bytes of attention_chunk_phased: K and V buffers, q of the row heads, a float4 a pair
 * (PMAX / 2 pairs a rank and row head), the groups' (m, l) and weights, the ranks' (max, sum). */
__host__ __device__ constexpr uint32_t mc_acp_smem_bytes(uint32_t G, uint32_t hd, uint32_t kvb) {
    return mc_acp_tu(G) * (mc_acp_krow_bytes(hd, kvb) + hd * kvb) +
           4u * (MC_ACP_NRH / G) * G * (hd + 4u * (MC_ACP_PMAX / 2u) + 3u * 16u + 2u * MC_ATT_SPLIT);
}

/* Whether attention_chunk_phased serves the rows of its block that ends at row zlast (every rank of
 * that row, the block's longest, within PMAX positions). */
__device__ __forceinline__ bool mc_acp_serves(const mc_rope_args &a, int32_t pos0, uint32_t zlast) {
    const uint32_t npos = (uint32_t)pos0 + zlast + 1, w0 = mc_att_window_start(a, npos);
    return (npos - w0 + MC_ATT_SPLIT - 1) / MC_ATT_SPLIT <= MC_ACP_PMAX;
}

/* Queues cache rows [lo, hi) of one kv head (base rb, hd values a row) into a staged buffer of
 * rows of rs bytes (16-byte copies), and commits them as one group (empty when hi <= lo). */
template <uint32_t HD, typename KT>
__device__ __forceinline__ void mc_acp_stage(char *dst, uint32_t rs, const KT *rb, uint32_t lo, uint32_t hi) {
    constexpr uint32_t CPR = HD * sizeof(KT) / 16;
    const char *src = (const char *)(rb + (size_t)lo * HD);
    const uint32_t nc = hi > lo ? (hi - lo) * CPR : 0;
    for (uint32_t i = threadIdx.x; i < nc; i += blockDim.x) {
        const uint32_t t = i / CPR, c = i % CPR;
        mc_cp_async16(dst + t * rs + 16 * c, src + (size_t)t * (HD * sizeof(KT)) + 16 * c);
    }
    mc_cp_async_commit();
}

template <uint32_t HD, uint32_t G, typename KT = float>
__global__ void __launch_bounds__(MC_ACP_THREADS, 512u / MC_ACP_THREADS)
    attention_chunk_phased(const mc_rope_args a, const float *qkv, const KT *k_cache, const KT *v_cache, float *out,
                           const int32_t *pos, uint32_t M) {
    static_assert(HD <= 128 && MC_ATC_GL<HD> == 16, "16-lane groups");
    constexpr uint32_t DPL = MC_ATC_DPL<HD>, R = MC_ACP_R<G>, NRH = R * G, S8 = MC_ATT_SPLIT, NP = MC_ACP_PMAX / 2,
                       EPT = HD / 16, KRB = mc_acp_krow_bytes(HD, sizeof(KT)), TU = mc_acp_tu(G);
    static_assert(R <= MC_ACP_THREADS / 16, "a group of 16 lanes a row for q");
    extern __shared__ __align__(16) float sm[];
    char *kst = (char *)sm, *vst = kst + TU * KRB;                /* staged K rows (padded), V rows */
    float *qs = (float *)(vst + TU * HD * sizeof(KT));            /* [NRH][HD] */
    float4 *pr = (float4 *)(qs + NRH * HD);                       /* [NRH][NP]: (sa, sb), then (alpha, pa, pb) */
    float *gm = (float *)(pr + NRH * NP), *gls = gm + NRH * 16, *wq = gls + NRH * 16; /* [NRH][16] */
    float *rm = wq + NRH * 16, *rl = rm + NRH * S8;                                    /* [NRH][S8] */
    const uint32_t g = blockIdx.x, z0 = blockIdx.y * R, tid = threadIdx.x;
    const uint32_t zn = min(z0 + R, M); /* rows z0 .. zn - 1 */
    const int32_t pos0 = *pos;
    if (!mc_acp_serves(a, pos0, zn - 1))
        return;
    const size_t qkv_row = (size_t)(a.n_head + 2 * a.n_kv) * HD;
    const KT *kb = k_cache + (size_t)g * a.capacity * HD, *vb = v_cache + (size_t)g * a.capacity * HD;
    /* rank r of row z0 + zr: its first position and length (0 for rows past the chunk) */
    auto rng = [&](uint32_t zr, uint32_t r, uint32_t &p0, uint32_t &n) {
        const uint32_t npos = (uint32_t)pos0 + z0 + zr + 1, w0 = mc_att_window_start(a, npos), nn = npos - w0,
                       per = (nn + S8 - 1) / S8;
        p0 = w0 + min(r * per, nn);
        n = z0 + zr < zn ? min(p0 + per, npos) - p0 : 0;
    };
    /* rank r's staged range: p0 and p1 are nondecreasing in the row, so [p0 of row z0, p1 of the
     * last row) holds every row's range */
    auto span = [&](uint32_t r, uint32_t &lo, uint32_t &hi) {
        uint32_t n;
        rng(0, r, lo, n);
        uint32_t pl, nl;
        rng(zn - 1 - z0, r, pl, nl);
        hi = pl + nl;
    };
    uint32_t lo, hi;
    span(0, lo, hi);
    mc_acp_stage<HD, KT>(kst, KRB, kb, lo, hi);
    mc_acp_stage<HD, KT>(vst, HD * sizeof(KT), vb, lo, hi);
    /* q of the rows: group j of 16 lanes computes row z0 + j % R (every group: whole warps run
     * mc_atc_q_and_row), as the cluster's blocks do */
    {
        const uint32_t grp = tid / 16, gl = tid % 16, zr = grp % R, z = min(z0 + zr, zn - 1);
        const int32_t p = pos0 + (int32_t)z;
        float fr[DPL];
        mc_atc_freqs<HD>(fr, a, gl);
        mc_atc_cs<HD> cs;
        mc_atc_rope_prep<HD>(cs, fr, a, p);
        float q[G][DPL];
        mc_atc_q_and_row<HD, G, KT>(q, a, qkv + z * qkv_row, g, g, cs, false, true, NULL, NULL, NULL, NULL, p);
        if (grp < R)
#pragma unroll
            for (uint32_t h = 0; h < G; h++)
#pragma unroll
                for (uint32_t i = 0; i < DPL; i++)
                    qs[(zr * G + h) * HD + mc_atc_dim<HD>(gl, i)] = q[h][i];
    }
    const float scale = a.scale > 0.0f ? a.scale : 1.0f / sqrtf((float)HD);
    /* phase A's quad and lane, phase B's and C's (row head, group or element group) */
    const uint32_t quad = tid / 4, qj = tid % 4, rha = quad / 4, qu = quad % 4;
    const uint32_t rhb = tid / 16, qg = tid % 16;
    float ro[S8][EPT]; /* the ranks' outs of this thread's elements, rank r in ro[7] after rank r */
#pragma unroll
    for (uint32_t s2 = 0; s2 < S8; s2++)
#pragma unroll
        for (uint32_t i = 0; i < EPT; i++)
            ro[s2][i] = 0.0f;
    for (uint32_t r = 0; r < S8; r++) {
        mc_cp_async_wait(1); /* K of rank r landed (its V may be in flight) */
        __syncthreads();     /* ... for every thread; q stored; the last rank's pairs and weights read */
        if (rha / 2 < (NRH + 1) / 2) { /* A (both row heads of a warp, or neither: full-warp shuffles) */
            const uint32_t rh = min(rha, NRH - 1), ro2 = min(rha ^ 1, NRH - 1);
            uint32_t p0, n, pw, nw;
            rng(rh / G, r, p0, n);
            rng(ro2 / G, r, pw, nw); /* the warp's other row head (the same row where G > 1) */
            nw = max(n, nw);         /* the warp's trip count */
            if (rha >= NRH)          /* a warp's spare half (NRH odd): computes, stores nothing */
                n = 0;
            float qv[4][DPL];
#pragma unroll
            for (uint32_t m = 0; m < 4; m++)
#pragma unroll
                for (uint32_t i = 0; i < DPL; i++)
                    qv[m][i] = qs[rh * HD + mc_atc_dim<HD>(qj + 4 * m, i)];
            float *prf = (float *)(pr + rh * NP);
            const char *kr0 = kst + (p0 - lo) * KRB;
            /* 16 positions a row head at a time (4 a quad), with no branch inside: their loads
             * can be issued together (rows past n are within the buffer: t < PMAX) */
#pragma unroll
            for (uint32_t i = 0; i < MC_ACP_PMAX / 4; i++) {
                if (i % 4 == 0 && 4 * i >= nw)
                    break;
                const uint32_t t = qu + 4 * i;
                const KT *krow = (const KT *)(kr0 + t * KRB);
                float x[4];
#pragma unroll
                for (uint32_t m = 0; m < 4; m++) {
                    float kx[DPL];
                    mc_atc_load<HD>(kx, krow, qj + 4 * m);
                    float v = 0.0f;
#pragma unroll
                    for (uint32_t d = 0; d < DPL; d++)
                        v = fmaf(qv[m][d], kx[d], v);
                    x[m] = v;
                }
                /* the cluster's xor tree: lanes gl and gl ^ 8, then gl ^ 4, gl ^ 2, gl ^ 1 */
                float c = (x[0] + x[2]) + (x[1] + x[3]);
                c += __shfl_xor_sync(MC_FULL, c, 2);
                c += __shfl_xor_sync(MC_FULL, c, 1);
                if (qj == 0 && t < n)
                    prf[4 * (16 * (t / 32) + t % 16) + (t % 32) / 16] = c;
            }
        }
        __syncthreads(); /* the scores are in; the K buffer is free */
        uint32_t lo2 = 0, hi2 = 0;
        if (r + 1 < S8) {
            span(r + 1, lo2, hi2);
            mc_acp_stage<HD, KT>(kst, KRB, kb, lo2, hi2);
        }
        if (rhb < NRH) { /* B */
            uint32_t p0, n;
            rng(rhb / G, r, p0, n);
            float m = -INFINITY, l = 0.0f;
            static_assert(MC_ACP_PMAX <= 64, "at most two pairs a group");
#pragma unroll
            for (uint32_t k = 0; k < 2; k++) {
                if (32 * k + qg >= n)
                    break;
                float4 *f = pr + rhb * NP + 16 * k + qg;
                const float sa = f->x, sb = f->y;
                const bool vbl = 32 * k + qg + 16 < n;
                const float s1 = sa * scale, s2 = vbl ? sb * scale : -INFINITY;
                const float mn = fmaxf(m, fmaxf(s1, s2));
                const float alpha = expf(m - mn); /* 0 on the group's first position */
                const float pa = expf(s1 - mn), pb = vbl ? expf(s2 - mn) : 0.0f;
                l = fmaf(l, alpha, pa) + pb;
                m = mn;
                *f = make_float4(alpha, pa, pb, 0.0f);
            }
            gm[rhb * 16 + qg] = m;
            gls[rhb * 16 + qg] = l;
        }
        __syncthreads();
        if (rhb < NRH) { /* M: the cluster block's merge weights */
            float Mx = -INFINITY;
#pragma unroll
            for (uint32_t k = 0; k < 16; k++)
                Mx = fmaxf(Mx, gm[rhb * 16 + k]);
            wq[rhb * 16 + qg] = Mx == -INFINITY ? 0.0f : expf(gm[rhb * 16 + qg] - Mx);
            if (qg == 0)
                rm[rhb * S8 + r] = Mx;
        }
        mc_cp_async_wait(r + 1 < S8 ? 1 : 0); /* V of rank r landed (K of r + 1 may be in flight) */
        __syncthreads();
#pragma unroll
        for (uint32_t s2 = 0; s2 + 1 < S8; s2++)
#pragma unroll
            for (uint32_t i = 0; i < EPT; i++)
                ro[s2][i] = ro[s2 + 1][i];
        if (rhb < NRH) { /* C */
            if (qg == 0) {
                float L = 0.0f;
                for (uint32_t k = 0; k < 16; k++)
                    L = fmaf(gls[rhb * 16 + k], wq[rhb * 16 + k], L);
                rl[rhb * S8 + r] = L;
            }
            uint32_t p0, n;
            rng(rhb / G, r, p0, n);
            const KT *vr = (const KT *)vst + (size_t)(p0 - lo) * HD;
            const float4 *prr = pr + rhb * NP;
            float O[EPT];
#pragma unroll
            for (uint32_t i = 0; i < EPT; i++)
                O[i] = 0.0f;
            /* group q's pair k: (ta, ta + 16), ta = 32 k + q, when ta < n; its loads are made
             * whatever n (within the buffer and the pair slots) so that they can go ahead */
            auto pair = [&](float (&o)[EPT], uint32_t k, uint32_t q) {
                const uint32_t ta = 32 * k + q;
                const float4 f = prr[16 * k + q];
                float va[EPT], vv[EPT];
                mc_atc_load<HD>(va, vr + ta * HD, qg);
                mc_atc_load<HD>(vv, vr + (ta + 16) * HD, qg);
                if (ta < n) {
                    const bool vbl = ta + 16 < n;
#pragma unroll
                    for (uint32_t i = 0; i < EPT; i++) {
                        float v = fmaf(f.y, va[i], o[i] * f.x);
                        if (vbl)
                            v = fmaf(f.z, vv[i], v);
                        o[i] = v;
                    }
                }
            };
            auto group = [&](uint32_t q, bool two) {
                float o[EPT];
#pragma unroll
                for (uint32_t i = 0; i < EPT; i++)
                    o[i] = 0.0f;
                pair(o, 0, q);
                if (two)
                    pair(o, 1, q);
                const float w = wq[rhb * 16 + q];
#pragma unroll
                for (uint32_t i = 0; i < EPT; i++)
                    O[i] = fmaf(o[i], w, O[i]);
            };
            if (n > 32) { /* some group has a second pair (the same branch for the warp where G > 1) */
#pragma unroll
                for (uint32_t q = 0; q < 16; q++)
                    group(q, true);
            } else {
#pragma unroll
                for (uint32_t q = 0; q < 16; q++)
                    group(q, false);
            }
#pragma unroll
            for (uint32_t i = 0; i < EPT; i++)
                ro[S8 - 1][i] = O[i];
        }
        __syncthreads(); /* the V buffer is free */
        if (r + 1 < S8) {
            mc_acp_stage<HD, KT>(vst, HD * sizeof(KT), vb, lo2, hi2);
            lo = lo2;
        }
    }
    __syncthreads();
    /* the cluster's final merge, ranks in order */
    if (rhb < NRH && z0 + rhb / G < zn) {
        const uint32_t z = z0 + rhb / G, h = rhb % G;
        float mr[S8], lr[S8];
#pragma unroll
        for (uint32_t s2 = 0; s2 < S8; s2++) {
            mr[s2] = rm[rhb * S8 + s2];
            lr[s2] = rl[rhb * S8 + s2];
        }
        float w[S8];
        const float il = mc_acr_final_weights(mr, lr, w);
#pragma unroll
        for (uint32_t i = 0; i < EPT; i++) {
            float O = 0.0f;
#pragma unroll
            for (uint32_t s2 = 0; s2 < S8; s2++)
                O = fmaf(ro[s2][i], w[s2], O);
            out[(size_t)z * (a.n_head * HD) + (size_t)(g * G + h) * HD + mc_atc_dim<HD>(qg, i)] = O * il;
        }
    }
}

/* attention_chunk_rows (the comment above mc_acr_tile). skip_phased: the rows whose
 * attention_chunk_phased block served them (it ran first) are left alone. */
template <uint32_t HD, uint32_t G, typename KT = float>
__global__ void __launch_bounds__(MC_ACR_THREADS, mc_acr_min_blocks(G, HD))
    attention_chunk_rows(const mc_rope_args a, const float *qkv, const KT *k_cache, const KT *v_cache, float *out,
                         const int32_t *pos, uint32_t skip_phased) {
    static_assert(HD <= 128, "16-lane groups");
    if (skip_phased) {
        constexpr uint32_t R = MC_ACP_R<G>;
        const uint32_t zb = blockIdx.y / R * R, zl = min(zb + R, gridDim.y) - 1;
        if (mc_acp_serves(a, *pos, zl))
            return;
    }
    constexpr uint32_t GL = MC_ATC_GL<HD>, DPL = MC_ATC_DPL<HD>, NG = MC_ACR_NG, S8 = MC_ATT_SPLIT;
    constexpr uint32_t T = mc_acr_tile(G, HD, sizeof(KT)), TF = T * HD * sizeof(KT) / 4; /* floats a tile */
    static_assert(T % (2 * NG) == 0, "a tile holds whole pairs of every group");
    static_assert(NG * G * HD <= 2 * TF, "the group states fit a tile buffer pair");
    extern __shared__ __align__(16) float sm[];
    float *gm = sm + 4 * TF, *gls = gm + NG * G, *wq = gls + NG * G, *bm = wq + NG * G;
    float *rm = bm + (G + 3) / 4 * 4, *rl = rm + S8 * G, *ro = rl + S8 * G;
    const uint32_t g = blockIdx.x, z = blockIdx.y, tid = threadIdx.x, grp = tid / GL, gl = tid % GL;
    float fr[DPL];
    mc_atc_freqs<HD>(fr, a, gl);
    const int32_t p = *pos + (int32_t)z; /* row z's k and v rows (all of the chunk's) are in the cache */
    qkv += (size_t)z * ((a.n_head + 2 * a.n_kv) * HD);
    out += (size_t)z * (a.n_head * HD);
    const uint32_t npos = (uint32_t)p + 1, w0 = mc_att_window_start(a, npos);
    const uint32_t per = (npos - w0 + S8 - 1) / S8;
    const KT *kb = k_cache + (size_t)g * a.capacity * HD, *vb = v_cache + (size_t)g * a.capacity * HD;
    /* rank r's range: [w0 + min(r per, n), min(that + per, npos)), n = npos - w0 (the cluster's);
     * the ranks with positions come first. The tile stream: (r, j) for each such rank in order, j
     * its tiles; tile number i in buffer pair i & 1. */
    const uint32_t n_ranks = (npos - w0 + per - 1) / per;
    auto range = [&](uint32_t r, uint32_t &p0, uint32_t &p1) {
        p0 = w0 + min(r * per, npos - w0);
        p1 = min(p0 + per, npos);
    };
    auto load = [&](uint32_t r, uint32_t j, uint32_t buf) {
        uint32_t p0, p1;
        range(r, p0, p1);
        const uint32_t t0 = p0 + j * T;
        mc_atc_load_tile<HD, KT>((KT *)(sm + 2 * buf * TF), (KT *)(sm + (2 * buf + 1) * TF), kb, vb, t0,
                                 min(T, p1 - t0), 0xffffffffu);
    };
    /* the first two tiles of the stream (rank 0 always has positions) */
    load(0, 0, 0);
    bool two = false;        /* tile 1 in flight too */
    uint32_t nr = 0, nj = 1; /* the stream's next tile to load */
    auto advance = [&]() {
        uint32_t p0, p1;
        range(nr, p0, p1);
        if (p0 + nj * T >= p1) {
            nr++;
            nj = 0;
        }
    };
    advance();
    if (nr < n_ranks) {
        load(nr, nj, 1);
        two = true;
        nj++;
        advance();
    }
    mc_atc_cs<HD> cs;
    mc_atc_rope_prep<HD>(cs, fr, a, p);
    float q[G][DPL];
    mc_atc_q_and_row<HD, G, KT>(q, a, qkv, g, g, cs, false, true, NULL, NULL, NULL, NULL, p);
    const float scale = a.scale > 0.0f ? a.scale : 1.0f / sqrtf((float)HD);
    uint32_t i = 0; /* tiles reduced */
    for (uint32_t r = 0; r < n_ranks; r++) {
        uint32_t p0, p1;
        range(r, p0, p1);
        const uint32_t n_tiles = (p1 - p0 + T - 1) / T;
        float m[G], l[G], o[G][DPL];
#pragma unroll
        for (uint32_t h = 0; h < G; h++) {
            m[h] = -INFINITY;
            l[h] = 0.0f;
#pragma unroll
            for (uint32_t d = 0; d < DPL; d++)
                o[h][d] = 0.0f;
        }
        uint32_t b = 0;
        for (uint32_t j = 0; j < n_tiles; j++, i++) {
            const uint32_t t0 = p0 + j * T;
            b = i & 1;
            mc_cp_async_wait(i == 0 && two ? 1 : 0); /* tile i landed (i + 1 may be in flight) */
            __syncthreads(); /* for every thread; tile i - 1's buffer pair (or group states) is free */
            if (i >= 1 && nr < n_ranks) {
                load(nr, nj, (i + 1) & 1);
                nj++;
                advance();
            }
            mc_atc_tile_pass<HD, G, KT>(q, (const KT *)(sm + 2 * b * TF), (const KT *)(sm + (2 * b + 1) * TF), NULL,
                                        NULL, t0, min(T, p1 - t0), 0xffffffffu, scale, m, l, o);
        }
        /* the cluster block's merge of its groups, into rank r's (max, sum, out) */
        __syncthreads(); /* buffer pair b is read: it holds the group states now */
        float *go = sm + 2 * b * TF;
#pragma unroll
        for (uint32_t h = 0; h < G; h++) {
            mc_atc_store<HD>(go + (size_t)(grp * G + h) * HD, o[h], gl);
            if (gl == 0) {
                gm[grp * G + h] = m[h];
                gls[grp * G + h] = l[h];
            }
        }
        __syncthreads();
        if (tid < NG * G) {
            const uint32_t h = tid % G;
            float M = -INFINITY;
#pragma unroll
            for (uint32_t k = 0; k < NG; k++)
                M = fmaxf(M, gm[k * G + h]);
            wq[tid] = M == -INFINITY ? 0.0f : expf(gm[tid] - M);
            if (tid < G)
                bm[h] = M;
        }
        __syncthreads();
        if (tid < G) {
            float L = 0.0f;
            for (uint32_t k = 0; k < NG; k++)
                L = fmaf(gls[k * G + tid], wq[k * G + tid], L);
            rm[r * G + tid] = bm[tid];
            rl[r * G + tid] = L;
        }
        for (uint32_t e = tid; e < G * HD; e += MC_ACR_THREADS) {
            const uint32_t h = e / HD;
            float O = 0.0f;
#pragma unroll
            for (uint32_t k = 0; k < NG; k++)
                O = fmaf(go[(size_t)(k * G + h) * HD + (e % HD)], wq[k * G + h], O);
            ro[r * G * HD + e] = O;
        }
        /* the next rank's first tile starts with a barrier: go, gm, wq are read by then */
    }
    /* the ranks without positions: what an empty cluster block pushes (every group's m = -inf,
     * so weights 0, sum 0, out 0) */
    for (uint32_t e = tid; e < (S8 - n_ranks) * G * HD; e += MC_ACR_THREADS)
        ro[n_ranks * G * HD + e] = 0.0f;
    if (tid < (S8 - n_ranks) * G) {
        rm[n_ranks * G + tid] = -INFINITY;
        rl[n_ranks * G + tid] = 0.0f;
    }
    __syncthreads();
    /* the cluster's final merge, ranks in order */
    for (uint32_t e = tid; e < G * HD; e += MC_ACR_THREADS) {
        const uint32_t h = e / HD;
        float mr[S8], lr[S8], orr[S8];
#pragma unroll
        for (uint32_t s2 = 0; s2 < S8; s2++) {
            mr[s2] = rm[s2 * G + h];
            lr[s2] = rl[s2 * G + h];
            orr[s2] = ro[s2 * G * HD + e];
        }
        float w[S8], O = 0.0f;
        const float il = mc_acr_final_weights(mr, lr, w);
#pragma unroll
        for (uint32_t s2 = 0; s2 < S8; s2++)
            O = fmaf(orr[s2], w[s2], O);
        out[(size_t)(g * G + h) * HD + (e % HD)] = O * il;
    }
}

/* ---- launch ------------------------------------------------------------------------------- */

/* The chunk rows' instantiations (attention_chunk_rows, hd up to 128), as the split's. */
#define MC_ACR_FN(HD, G) ((const void *)attention_chunk_rows<HD, G>)
#define MC_ACR_FN_H(HD, G) ((const void *)attention_chunk_rows<HD, G, __half>)
#define MC_ACR_FN_B(HD, G) ((const void *)attention_chunk_rows<HD, G, __nv_bfloat16>)
#define MC_ACR_PICK(kv, hd, G)                                                                                         \
    ((kv) == MC_KV_F16    ? MC_ATC_DISPATCH128(hd, G, MC_ACR_FN_H)                                                     \
     : (kv) == MC_KV_BF16 ? MC_ATC_DISPATCH128(hd, G, MC_ACR_FN_B)                                                     \
                          : MC_ATC_DISPATCH128(hd, G, MC_ACR_FN))
#define MC_ACR_EACH(F)                                                                                                 \
    MC_ATC_EACH_OF128(F, MC_ACR_FN) MC_ATC_EACH_OF128(F, MC_ACR_FN_H) MC_ATC_EACH_OF128(F, MC_ACR_FN_B)
#define MC_ACP_FN(HD, G) ((const void *)attention_chunk_phased<HD, G>)
#define MC_ACP_FN_H(HD, G) ((const void *)attention_chunk_phased<HD, G, __half>)
#define MC_ACP_FN_B(HD, G) ((const void *)attention_chunk_phased<HD, G, __nv_bfloat16>)
#define MC_ACP_PICK(kv, hd, G)                                                                                         \
    ((kv) == MC_KV_F16    ? MC_ATC_DISPATCH128(hd, G, MC_ACP_FN_H)                                                     \
     : (kv) == MC_KV_BF16 ? MC_ATC_DISPATCH128(hd, G, MC_ACP_FN_B)                                                     \
                          : MC_ATC_DISPATCH128(hd, G, MC_ACP_FN))
#define MC_ACP_EACH(F)                                                                                                 \
    MC_ATC_EACH_OF128(F, MC_ACP_FN) MC_ATC_EACH_OF128(F, MC_ACP_FN_H) MC_ATC_EACH_OF128(F, MC_ACP_FN_B)

/* The largest dynamic shared memory of any chunk rows instantiation (f32, hd 128, G 8: 161 KB). */
static size_t mc_acr_smem_max(void) {
    size_t m = 0;
    for (uint32_t hd = 32; hd <= 128; hd *= 2)
        for (uint32_t G = 1; G <= 8; G *= 2)
            for (uint32_t kvb = 2; kvb <= 4; kvb += 2) {
                const size_t b = (size_t)mc_acr_smem_floats(G, hd, kvb) * 4;
                m = b > m ? b : m;
            }
    return m;
}

/* The shared-memory limit of every chunk rows instantiation, the largest need (once per device:
 * mc_attention_fused_prepare calls it on the cluster path, before it marks the device ready). */
cudaError_t mc_acr_prepare(void) {
    cudaError_t e;
    const int amax = (int)mc_acr_smem_max();
#define MC_ACR_SET(fn)                                                                                                 \
    if ((e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, amax)) != cudaSuccess)              \
        return e;
    MC_ACR_EACH(MC_ACR_SET)
#undef MC_ACR_SET
    const int pmax = (int)mc_acp_smem_bytes(1, 128, 4); /* the largest: G 1 (the widest spread), hd 128, f32 */
#define MC_ACP_SET(fn)                                                                                                 \
    if ((e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, pmax)) != cudaSuccess)              \
        return e;
    MC_ACP_EACH(MC_ACP_SET)
#undef MC_ACP_SET
    return cudaSuccess;
}

/* A prefill chunk of M rows at positions *pos .. *pos + M - 1 (cuda_kernels.h): where the cluster
 * or the split path serves the shapes, attention_chunk_append (every row's k and v into the
 * cache), then one launch over the rows (each row the decode step's split at its own position:
 * the cluster's 8 ranks walked by one block of attention_chunk_rows, at hd 256 the cluster
 * kernel's chunk instantiation, or the split path's spans folded by one block);
 * cudaErrorNotSupported elsewhere (the caller then runs the decode launches row by row). Plain
 * stream order (no programmatic launch): the second kernel reads what the first wrote before its
 * own wait. */
template <typename KT>
static void mc_chunk_append_launch(const mc_rope_args *a, const float *qkv, void *k_cache, void *v_cache,
                                   const int32_t *pos, uint32_t M, cudaStream_t st) {
    const dim3 ag(a->n_kv, M);
    KT *kc = (KT *)k_cache, *vc = (KT *)v_cache;
    if (a->hd == 32)
        attention_chunk_append<32, KT><<<ag, 32, 0, st>>>(*a, qkv, kc, vc, pos);
    else if (a->hd == 64)
        attention_chunk_append<64, KT><<<ag, 32, 0, st>>>(*a, qkv, kc, vc, pos);
    else if (a->hd == 128)
        attention_chunk_append<128, KT><<<ag, 32, 0, st>>>(*a, qkv, kc, vc, pos);
    else if constexpr (!mc_kv_is_q8<KT>) /* q8: hd 32, 64, 128 (attention=mma's) */
        attention_chunk_append<256, KT><<<ag, 32, 0, st>>>(*a, qkv, kc, vc, pos);
}

/* rows: attention_chunk_rows where it serves the shapes (hd <= 128), else the cluster kernel's
 * chunk instantiation; cluster: the cluster kernel always (the same bits, the old launch, kept
 * for timing and for the device check). */
static cudaError_t mc_chunk_attention(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache,
                                      void *v_cache, float *out, const int32_t *pos, uint32_t M, int cluster,
                                      cudaStream_t st) {
    if (a->kv != c->kv || a->kv > MC_KV_Q8)
        return cudaErrorInvalidValue;
    const int path = mc_attention_path(c, a->n_head, a->n_kv, a->hd, a->hdv);
    if (a->kv == MC_KV_Q8 && path != MC_ATT_PATH_MMA) /* attention=mma alone reads q8 (the arm refuses the rest) */
        return cudaErrorInvalidValue;
    if ((path != MC_ATT_PATH_CLUSTER && path != MC_ATT_PATH_SPLIT && path != MC_ATT_PATH_MMA) || M == 0 ||
        M > 65535)
        return cudaErrorNotSupported;
    const uint32_t G = a->n_head / a->n_kv;
    cudaError_t e = mc_attention_fused_prepare(c, a->n_head, a->n_kv, a->hd, a->hdv);
    if (e != cudaSuccess)
        return e;
    if (a->kv == MC_KV_F16)
        mc_chunk_append_launch<__half>(a, qkv, k_cache, v_cache, pos, M, st);
    else if (a->kv == MC_KV_BF16)
        mc_chunk_append_launch<__nv_bfloat16>(a, qkv, k_cache, v_cache, pos, M, st);
    else if (a->kv == MC_KV_Q8)
        mc_chunk_append_launch<mc_q8>(a, qkv, k_cache, v_cache, pos, M, st);
    else
        mc_chunk_append_launch<float>(a, qkv, k_cache, v_cache, pos, M, st);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    if (path == MC_ATT_PATH_SPLIT)
        return mc_spl_launch(c, a, qkv, k_cache, v_cache, out, pos, M, st);
    if (path == MC_ATT_PATH_MMA)
        return mc_amm_launch(c, a, qkv, k_cache, v_cache, out, pos, M, st);
    uint32_t skip = !cluster && c->attchunk == MC_ATTCHUNK_PHASED;
    void *args[] = {(void *)a, (void *)&qkv, (void *)&k_cache, (void *)&v_cache, (void *)&out, (void *)&pos, &skip};
    void *pargs[] = {(void *)a, (void *)&qkv, (void *)&k_cache, (void *)&v_cache, (void *)&out, (void *)&pos, &M};
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.stream = st;
    if (!cluster && a->hd <= 128) {
        if (skip) { /* the phased kernel first; attention_chunk_rows then takes the rows it leaves */
            const uint32_t R = MC_ACP_NRH / G;
            cfg.gridDim = dim3(a->n_kv, (M + R - 1) / R);
            cfg.blockDim = dim3(MC_ACP_THREADS);
            cfg.dynamicSmemBytes = mc_acp_smem_bytes(G, a->hd, mc_kv_bytes(a->kv));
            if ((e = cudaLaunchKernelExC(&cfg, MC_ACP_PICK(a->kv, a->hd, G), pargs)) != cudaSuccess ||
                (e = cudaGetLastError()) != cudaSuccess)
                return e;
        }
        cfg.gridDim = dim3(a->n_kv, M);
        cfg.blockDim = dim3(MC_ACR_THREADS);
        cfg.dynamicSmemBytes = (size_t)mc_acr_smem_floats(G, a->hd, mc_kv_bytes(a->kv)) * 4;
        e = cudaLaunchKernelExC(&cfg, MC_ACR_PICK(a->kv, a->hd, G), args);
        return e != cudaSuccess ? e : cudaGetLastError();
    }
    const void *fn = mc_atc_chunk_kernel(a->kv, a->hd, G);
    cfg.gridDim = dim3(MC_ATT_SPLIT, a->n_kv, M);
    cfg.blockDim = dim3(32 * MC_ATC_WARPS);
    cfg.dynamicSmemBytes = (size_t)mc_atc_smem_floats(G, a->hd) * 4;
    cudaLaunchAttribute attr[2];
    mc_launch_attrs_cluster(&cfg, attr, MC_ATT_SPLIT, false);
    e = cudaLaunchKernelExC(&cfg, fn, args);
    return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t mc_attention_chunk(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache,
                               void *v_cache, float *out, const int32_t *pos, uint32_t M, cudaStream_t st) {
    return mc_chunk_attention(c, a, qkv, k_cache, v_cache, out, pos, M, 0, st);
}

cudaError_t mc_attention_chunk_cluster(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache,
                                       void *v_cache, float *out, const int32_t *pos, uint32_t M, cudaStream_t st) {
    return mc_chunk_attention(c, a, qkv, k_cache, v_cache, out, pos, M, 1, st);
}

const char *mc_attention_chunk_family(const void *f) {
    static const mc_family_row table[] = {
#define MC_ATT_ROWS(KT)                                                                                                \
    {(const void *)attention_chunk_append<32, KT>, "attention"},                                                       \
        {(const void *)attention_chunk_append<64, KT>, "attention"},                                                   \
        {(const void *)attention_chunk_append<128, KT>, "attention"},                                                  \
        {(const void *)attention_chunk_append<256, KT>, "attention"},
        MC_ATT_ROWS(float) MC_ATT_ROWS(__half) MC_ATT_ROWS(__nv_bfloat16)
#undef MC_ATT_ROWS
        {(const void *)attention_chunk_append<32, mc_q8>, "attention"},
        {(const void *)attention_chunk_append<64, mc_q8>, "attention"},
        {(const void *)attention_chunk_append<128, mc_q8>, "attention"},
#define MC_ACR_ROW(fn) {fn, "attention"},
            MC_ACR_EACH(MC_ACR_ROW) MC_ACP_EACH(MC_ACR_ROW)
#undef MC_ACR_ROW
    };
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
