/* attention_mma.cu: attention=mma, a layer's attention on tensor cores with one order for decode
 * and for a prefill chunk's rows (issue 28). One kernel, attention_mma, serves both: decode
 * (rows 0) spreads fixed spans over many blocks and the last block of a kv head folds them in
 * span order (flash-decoding, as attention_split); a chunk (rows = M, after attention_chunk_append
 * wrote every row's k and v) gives each block 4 R rows (R = 16 / G) and walks their spans in
 * order, folding as it goes. mc_attention_path (attention.cu) picks the path.
 *
 * Decode: block x of a kv head takes spans lo + x, lo + x + X, ... (X = the state's spans, at most
 * MC_AMM_BLOCKS, so several spans a block past 2,048 positions); its 128 threads stage each span one
 * ahead (two tile pairs; the first two before the grid wait) and its 4 warps reduce it (warp w: the scores of
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
#include "attention_mma.cuh"

#ifdef MC_AMM_PROBE /* a measurement build only (never a release one): decode's phases, kv head 0 */
__device__ unsigned long long mc_amm_probe_t0 = ~0ull;
__device__ unsigned mc_amm_probe_n;
#define MC_PT(v)                                                                                                       \
    unsigned long long v;                                                                                              \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v))
#define MC_PT_START(v)                                                                                                 \
    MC_PT(v);                                                                                                          \
    if (blockIdx.x == 0 && threadIdx.x == 0)                                                                           \
    atomicMin(&mc_amm_probe_t0, v)
#define MC_PT_END(t0, t1, t2, t3, nact)                                                                                \
    do {                                                                                                               \
        MC_PT(t4_);                                                                                                    \
        if (blockIdx.x == 0 && threadIdx.x == 0) {                                                                     \
            const unsigned long long b_ = mc_amm_probe_t0;                                                             \
            mc_amm_probe_t0 = ~0ull;                                                                                   \
            if (atomicAdd(&mc_amm_probe_n, 1u) % 17u == 0)                                                             \
                printf("amm-probe X %u act %u start %lld wait %lld spans %lld last %lld merged %lld\n", gridDim.y,     \
                       nact, (long long)(t0 - b_), (long long)(t1 - b_), (long long)(t2 - b_), (long long)(t3 - b_),   \
                       (long long)(t4_ - b_));                                                                         \
        }                                                                                                              \
    } while (0)
#else
#define MC_PT(v) (void)0
#define MC_PT_START(v) (void)0
#define MC_PT_END(t0, t1, t2, t3, nact) (void)0
#endif

/* attdec=warp: attention=mma's decode with a warp a span. Block x of kv head g takes the groups of
 * MC_AMM_TIER spans (256 positions, tier-aligned) gl + x, gl + x + X, ...; warp w stages span
 * 4 u + w of group u by itself (before the grid wait: rows below p) and reduces it alone with
 * mc_amm_span, the chunk warp's instructions, so the 4 spans of a group are in flight and reduced
 * at once, with no block barrier between a span's steps. attfold=span: each warp writes its span's
 * partial; attfold=tier: the 4 results meet in shared memory and warp 0 folds them in span order
 * (mc_spl_fold_row / _elem, as attfold=tier's block decode and a chunk's row do) into the tier's
 * partial. The merge is attention_mma's (mc_amm_last, mc_amm_merge). The same bits as attdec=block
 * for every attfold and kv type: only where the operations run differs. */
template <uint32_t HD, uint32_t G, typename KT, bool TIER>
__device__ __forceinline__ void mc_amm_wdec(const mc_rope_args &a, const float *qkv, KT *k_cache, KT *v_cache,
                                            float *out, const int32_t *pos) {
    typedef typename mc_amm_mt<KT>::T MT;
    constexpr uint32_t S = MC_AMM_SPAN, LD = MC_AMM_LD<HD>, DPL = MC_ATC_DPL<HD>, KS = HD / 16, ND = HD / 8;
    constexpr uint32_t TILE = S * LD, TS = MC_AMM_TIER, XW = 2 * ND + 2, RB = MC_AMM_RB<HD>;
    constexpr uint32_t KV = mc_kv_is_q8<KT> ? MC_KV_Q8 : sizeof(KT) == 4 ? MC_KV_F32 : MC_KV_BF16;
    if constexpr (!mc_amm_wd_ok(HD, KV)) {
        return; /* not served (mc_amm_launch refuses it): kv=q8's stored rows do not fit a V tile at hd 128 */
    } else {
        const uint32_t g = blockIdx.x, x = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
        const uint32_t gid = lane >> 2, tig = lane & 3;
        extern __shared__ __align__(16) unsigned char smb[];
        const mc_amm_layout L = mc_amm_wd_layout_of(HD, KV);
        MT *tiles = (MT *)(smb + L.kv), *ks = tiles + 2 * warp * TILE, *vs = ks + TILE;
        uint8_t *raw = (uint8_t *)(vs + TILE) - 2 * S * RB; /* kv=q8: the warp's stored K rows, then V rows */
        KT *kn = (KT *)(smb + L.kn), *vn = (KT *)(smb + L.vn);
        MC_PT_START(pt0);
        float fr[DPL]; /* the lane's RoPE frequencies: read with *pos, one round trip */
        mc_atc_freqs<HD>(fr, a, lane & 15);
        const int32_t p00 = *pos;
        const uint32_t lo = mc_att_first_position(a.window, (uint32_t)p00) / S, hi = (uint32_t)p00 / S;
        const KT *kb = k_cache + (size_t)g * a.capacity * MC_KV_ROWE<HD, KT>,
                 *vb = v_cache + (size_t)g * a.capacity * MC_KV_ROWE<HD, KT>;
        const uint32_t X = gridDim.y, gl = lo / TS, gh = hi / TS, n_act = min(gh - gl + 1, X);
        if (x >= n_act)
            return;
        const bool has_new = (gh - gl) % X == x; /* the block that holds p's span */
        uint32_t u = gl + x, s = u * TS + warp;
        bool act = s >= lo && s <= hi;
        if (act) /* rows below p were written by earlier steps: staged before the wait */
            mc_amm_stage<HD, KT, MT>(ks, vs, raw, kb, vb, s * S, s == hi ? (uint32_t)p00 - hi * S : S, lane, 32);
        mc_wait_prior_grid(MC_ATT_FAMILY(a));
        MC_PT(pt1);
        MT *qt = (MT *)smb; /* the step's q tile (warp 0), and with has_new the new k and v row */
        if (warp == 0)
            mc_amm_q_rows<HD, G, KT, MT>(qt, a, qkv, g, fr, p00, 0, 1, 1, has_new, kn, vn, k_cache, v_cache, lane);
        __syncthreads(); /* the q tile and the new row */
        uint32_t qa[KS][4];
        int32_t rw[2], rp[2];
        mc_amm_q_frags<HD, G, MT>(qa, rw, rp, qt, a, p00, 0, 1, 1, lane);
        const float scale = a.scale > 0.0f ? a.scale : 1.0f / sqrtf((float)HD);
        const uint32_t NS = (a.capacity + S - 1) / S;
        /* the partials: out [head][unit][hd], then (max, sum) [head][unit][2] */
        float *po = a.partial, *pml = a.partial + (size_t)a.n_head * NS * HD;
        float *xw = (float *)tiles; /* attfold=tier: the warps' span results, once every span is read */
        for (;;) {
            float m[2], l[2], o[ND][4];
            if (act) {
                mc_cp_async_wait(0);
                __syncwarp(); /* the warp's copies have landed */
                if constexpr (mc_kv_is_q8<KT>) { /* the new row's stored bytes after the staged rows, then the tiles */
                    const uint32_t n = s == hi ? (uint32_t)p00 - s * S + 1 : S;
                    if (s == hi)
                        for (uint32_t i = lane; i < RB / 4; i += 32) {
                            ((uint32_t *)(raw + (n - 1) * RB))[i] = ((const uint32_t *)kn)[i];
                            ((uint32_t *)(raw + S * RB + (n - 1) * RB))[i] = ((const uint32_t *)vn)[i];
                        }
                    __syncwarp();
                    mc_amm_q8_tiles_warp<HD, MT>(ks, vs, raw, n, lane);
                } else if (s == hi) { /* the new row over the staging's zeros */
                    for (uint32_t i = lane; i < HD; i += 32) {
                        ks[((uint32_t)p00 - s * S) * LD + i] = mc_kv_put<MT>(mc_kv_get(kn[i]));
                        vs[((uint32_t)p00 - s * S) * LD + i] = mc_kv_put<MT>(mc_kv_get(vn[i]));
                    }
                }
                __syncwarp(); /* the span's tiles */
                mc_amm_span<HD, MT>(ks, vs, qa, rw, rp, (int32_t)(s * S), scale, m, l, o);
                if (!TIER && gid < G) { /* the span's partial: row gid's out elements, then (max, sum) */
                    float *ph = po + ((size_t)(g * G + gid) * NS + s) * HD + 2 * tig;
#pragma unroll
                    for (uint32_t n = 0; n < ND; n++)
                        *(float2 *)(ph + 8 * n) = make_float2(o[n][0], o[n][1]);
                    if (tig == 0)
                        *(float2 *)(pml + ((size_t)(g * G + gid) * NS + s) * 2) = make_float2(m[0], l[0]);
                }
            }
            if constexpr (TIER) {
                __syncthreads(); /* every warp's span is read: the tiles' space holds the results */
                if (act) {
                    float *e = xw + (warp * 32 + lane) * XW;
                    e[0] = m[0];
                    e[1] = l[0];
#pragma unroll
                    for (uint32_t n = 0; n < ND; n++) {
                        e[2 + 2 * n] = o[n][0];
                        e[3 + 2 * n] = o[n][1];
                    }
                }
                __syncthreads();
                if (warp == 0) { /* the tier's spans in order from its first attended one */
                    const uint32_t w0 = max(u * TS, lo) - u * TS, w1 = min(u * TS + TS - 1, hi) - u * TS;
                    float DM = 0.0f, DL = 0.0f, DF[ND][2];
                    for (uint32_t w = w0; w <= w1; w++) {
                        const float *e = xw + (w * 32 + lane) * XW;
                        if (w == w0) {
                            DM = e[0];
                            DL = e[1];
#pragma unroll
                            for (uint32_t n = 0; n < ND; n++) {
                                DF[n][0] = e[2 + 2 * n];
                                DF[n][1] = e[3 + 2 * n];
                            }
                        } else {
                            float wa, wb;
                            mc_spl_fold_row(DM, DL, e[0], e[1], wa, wb);
#pragma unroll
                            for (uint32_t n = 0; n < ND; n++) {
                                DF[n][0] = mc_spl_fold_elem(DF[n][0], e[2 + 2 * n], wa, wb);
                                DF[n][1] = mc_spl_fold_elem(DF[n][1], e[3 + 2 * n], wa, wb);
                            }
                        }
                    }
                    if (gid < G) { /* the tier's partial */
                        float *ph = po + ((size_t)(g * G + gid) * NS + u) * HD + 2 * tig;
#pragma unroll
                        for (uint32_t n = 0; n < ND; n++)
                            *(float2 *)(ph + 8 * n) = make_float2(DF[n][0], DF[n][1]);
                        if (tig == 0)
                            *(float2 *)(pml + ((size_t)(g * G + gid) * NS + u) * 2) = make_float2(DM, DL);
                    }
                }
            }
            u += X;
            if (u > gh)
                break;
            if constexpr (TIER)
                __syncthreads(); /* warp 0 read the results before the tiles take the next group */
            __syncwarp(); /* (attfold=span) the warp's lanes have read its tiles before they take the next span */
            s = u * TS + warp;
            act = s <= hi;
            if (act)
                mc_amm_stage<HD, KT, MT>(ks, vs, raw, kb, vb, s * S, s == hi ? (uint32_t)p00 - hi * S : S, lane, 32);
        }
        /* the last block of kv head g to finish folds every unit's partials in order */
        MC_PT(pt2);
        if (!mc_amm_last(a, g, n_act, smb, L, tid))
            return;
        MC_PT(pt3);
        mc_amm_merge<HD, G, MT>(a, g, TIER ? gl : lo, TIER ? gh : hi, NS, po, pml, tiles, smb, L, out, tid);
        MC_PT_END(pt0, pt1, pt2, pt3, n_act);
    }
}

template <uint32_t HD, uint32_t G, typename KT = float, bool TIER = false, bool WD = false>
__global__ void __launch_bounds__(MC_AMM_THREADS)
    attention_mma(const mc_rope_args a, const float *qkv, KT *k_cache, KT *v_cache, float *out, const int32_t *pos,
                  uint32_t rows) {
    if constexpr (WD) { /* attdec=warp's decode (rows 0) */
        mc_amm_wdec<HD, G, KT, TIER>(a, qkv, k_cache, v_cache, out, pos);
        return;
    }
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
    MC_PT_START(pt0);
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
        /* and the span after it into the other pair (the loop's look-ahead at k = 0) */
        const uint32_t u0 = ul + x, ul0 = min(u0 * TS + TS - 1, hi), nu0 = s0 < ul0 ? u0 : u0 + X;
        const uint32_t ns0 = s0 < ul0 ? s0 + 1 : max(nu0 * TS, lo);
        if (nu0 <= uh)
            mc_amm_stage<HD, KT, MT>(tiles + 2 * TILE, tiles + 3 * TILE, raw + 2 * S * RB, kb, vb, ns0 * S,
                                     ns0 == hi ? (uint32_t)p00 - hi * S : S, tid, NT);
    } else { /* a chunk: every row's k and v appended before this launch */
        mc_amm_stage<HD, KT, MT>(tiles, tiles + TILE, raw, kb, vb, lo * S, min(S, (uint32_t)p00 + z1 - lo * S), tid,
                                 NT);
    }
    mc_wait_prior_grid(MC_ATT_FAMILY(a));
    MC_PT(pt1);
    /* q of the warp's rows (decode: warp 0, the step's row; with has_new also the new k and v
     * row), one call site for both modes: the same instructions, so the same q bits */
    MT *qt = (MT *)smb + (rows ? warp * 16 * LD : 0);
    const uint32_t nq = rows ? R : 1, zw = z0 + (rows ? warp * R : 0);
    if (rows || warp == 0)
        mc_amm_q_rows<HD, G, KT, MT>(qt, a, qkv, g, fr, p00, zw, z1, nq, has_new, kn, vn, k_cache, v_cache, lane);
    __syncthreads(); /* the q tile and decode's new row */
    uint32_t qa[KS][4];
    int32_t rw[2], rp[2]; /* the lane's rows gid, gid + 8: the positions they attend to */
    mc_amm_q_frags<HD, G, MT>(qa, rw, rp, qt, a, p00, zw, z1, nq, lane);
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
            if (ahead && k) /* the pair read two spans ago (the barrier above orders it; k = 0's: before the wait) */
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
        MC_PT(pt2);
        if (!mc_amm_last(a, g, n_act, smb, L, tid))
            return;
        MC_PT(pt3);
        mc_amm_merge<HD, G, MT>(a, g, ul, uh, NS, po, pml, tiles, smb, L, out, tid);
        MC_PT_END(pt0, pt1, pt2, pt3, n_act);
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
/* attdec=warp's decode kernels (mc_amm_wdec); kv=q8 at hd 128 is not served (an empty body) */
#define MC_AMM_FN_W(HD, G) ((const void *)attention_mma<HD, G, float, false, true>)
#define MC_AMM_FN_WH(HD, G) ((const void *)attention_mma<HD, G, __half, false, true>)
#define MC_AMM_FN_WB(HD, G) ((const void *)attention_mma<HD, G, __nv_bfloat16, false, true>)
#define MC_AMM_FN_WQ(HD, G) ((const void *)attention_mma<HD, G, mc_q8, false, true>)
#define MC_AMM_FN_WT(HD, G) ((const void *)attention_mma<HD, G, float, true, true>)
#define MC_AMM_FN_WTH(HD, G) ((const void *)attention_mma<HD, G, __half, true, true>)
#define MC_AMM_FN_WTB(HD, G) ((const void *)attention_mma<HD, G, __nv_bfloat16, true, true>)
#define MC_AMM_FN_WTQ(HD, G) ((const void *)attention_mma<HD, G, mc_q8, true, true>)
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
#define MC_AMM_PICK_W(kv, hd, G)                                                                                       \
    ((kv) == MC_KV_F16    ? MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_WH)                                                    \
     : (kv) == MC_KV_BF16 ? MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_WB)                                                    \
     : (kv) == MC_KV_Q8   ? MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_WQ)                                                    \
                          : MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_W))
#define MC_AMM_PICK_WT(kv, hd, G)                                                                                      \
    ((kv) == MC_KV_F16    ? MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_WTH)                                                   \
     : (kv) == MC_KV_BF16 ? MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_WTB)                                                   \
     : (kv) == MC_KV_Q8   ? MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_WTQ)                                                   \
                          : MC_ATC_DISPATCH128(hd, G, MC_AMM_FN_WT))
#define MC_AMM_EACH_W(F)                                                                                               \
    MC_ATC_EACH_OF128(F, MC_AMM_FN_W) MC_ATC_EACH_OF128(F, MC_AMM_FN_WH) MC_ATC_EACH_OF128(F, MC_AMM_FN_WB)            \
        MC_ATC_EACH_OF128(F, MC_AMM_FN_WQ) MC_ATC_EACH_OF128(F, MC_AMM_FN_WT) MC_ATC_EACH_OF128(F, MC_AMM_FN_WTH)      \
            MC_ATC_EACH_OF128(F, MC_AMM_FN_WTB) MC_ATC_EACH_OF128(F, MC_AMM_FN_WTQ)
#define MC_AMM_EACH(F)                                                                                                 \
    MC_ATC_EACH_OF128(F, MC_AMM_FN) MC_ATC_EACH_OF128(F, MC_AMM_FN_H) MC_ATC_EACH_OF128(F, MC_AMM_FN_B)               \
        MC_ATC_EACH_OF128(F, MC_AMM_FN_Q) MC_ATC_EACH_OF128(F, MC_AMM_FN_T) MC_ATC_EACH_OF128(F, MC_AMM_FN_TH)         \
            MC_ATC_EACH_OF128(F, MC_AMM_FN_TB) MC_ATC_EACH_OF128(F, MC_AMM_FN_TQ)

int mc_attention_mma_wd_serves(uint32_t hd, uint32_t kv) { return mc_amm_wd_ok(hd, kv); }

int mc_amm_ok(uint32_t G, uint32_t hd, uint32_t hdv) {
    return hd == hdv && (hd == 32 || hd == 64 || hd == 128) && (G == 1 || G == 2 || G == 3 || G == 4 || G == 8);
}

/* Per device: whether every instantiation may use the largest need (hd 128, f32's or q8's,
 * decode's or a chunk's, whichever is largest); attdec=warp's kernels apart (their own largest:
 * hd 128 at f32, 4 tile pairs). */
static int mc_amm_smem_ready[MC_MAX_DEVICES], mc_amm_wd_smem_ready[MC_MAX_DEVICES];

cudaError_t mc_amm_prepare(int dev) {
#define MC_AMM_FNS(fn) fn,
    static const void *const fns[] = {MC_AMM_EACH(MC_AMM_FNS)};
    static const void *const wfns[] = {MC_AMM_EACH_W(MC_AMM_FNS)};
#undef MC_AMM_FNS
    uint32_t m = 0, mw = 0;
    for (uint32_t kv = MC_KV_F32; kv <= MC_KV_Q8; kv++) {
        for (int chunk = 0; chunk < 2; chunk++) {
            const uint32_t t = mc_amm_layout_of(128, kv, chunk != 0).total;
            m = t > m ? t : m;
        }
        const uint32_t tw = mc_amm_wd_layout_of(128, kv).total;
        mw = tw > mw ? tw : mw;
    }
    const cudaError_t e = mc_att_smem_limit(fns, sizeof fns / sizeof fns[0], (int)m, mc_amm_smem_ready, dev);
    return e != cudaSuccess ? e
                            : mc_att_smem_limit(wfns, sizeof wfns / sizeof wfns[0], (int)mw, mc_amm_wd_smem_ready, dev);
}

/* attention_mma's launch: decode (rows 0; a programmatic launch under c->pdl, the grid by the
 * state's capacity, its scratch from a) or a chunk's rows (rows = M; plain stream order, 4 R rows
 * a block). */
cudaError_t mc_amm_launch(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache, void *v_cache,
                          float *out, const int32_t *pos, uint32_t rows, cudaStream_t st) {
    const uint32_t G = a->n_head / a->n_kv;
    if (!mc_amm_ok(G, a->hd, a->hdv) || (!rows && (!a->partial || !a->ticket)) ||
        (a->kv == MC_KV_Q8 && a->capacity % 4)) /* kv=q8's rows are copied 16 bytes at a time (mc_amm_stage) */
        return cudaErrorInvalidValue;
    cudaError_t e = mc_attention_fused_prepare(c, a->n_head, a->n_kv, a->hd, a->hdv);
    if (e != cudaSuccess)
        return e;
    const bool tier = c->attfold == MC_ATTFOLD_TIER;
    if (!rows && c->attdec == MC_ATTDEC_WARP) { /* a block a group of 4 spans (a tier), up to MC_AMM_BLOCKS */
        if (!mc_amm_wd_ok(a->hd, a->kv))
            return cudaErrorInvalidValue;
        const uint32_t XG = (a->capacity + MC_AMM_SPAN * MC_AMM_TIER - 1) / (MC_AMM_SPAN * MC_AMM_TIER);
        return mc_att_span_launch(c, tier ? MC_AMM_PICK_WT(a->kv, a->hd, G) : MC_AMM_PICK_W(a->kv, a->hd, G),
                                  dim3(a->n_kv, XG < MC_AMM_BLOCKS ? XG : MC_AMM_BLOCKS), MC_AMM_THREADS,
                                  mc_amm_wd_layout_of(a->hd, a->kv).total, a, qkv, k_cache, v_cache, out, pos, 0, st);
    }
    /* decode's blocks a kv head: one a fold unit (a span, or a tier) up to MC_AMM_BLOCKS */
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
        MC_AMM_EACH(MC_AMM_ROW) MC_AMM_EACH_W(MC_AMM_ROW)
#undef MC_AMM_ROW
    };
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
