/* attention_split.cu: attention=split, one launch of attention_split: fixed spans of MC_ATT_SPAN
 * positions spread over many blocks, the last block of a kv head folding them in span order
 * (flash-decoding); in chunk mode a prefill chunk's rows (attention_chunk.cu's launch). This file
 * holds the kernel and its launch; mc_attention_path (attention.cu) picks the path, and
 * attention_common.cuh holds what it shares with the cluster kernel (q and the new row: the same
 * code, so the same bits). */
#include "attention_common.cuh"

/* ---- attention_split: fixed absolute spans over many blocks (attention=split) ---------------- */

/* Flash-decoding with the bits of a chunk's rows. The positions [w0, p] a query at p attends to
 * are cut at fixed absolute positions into spans of MC_ATT_SPAN (cuda_kernels.h: span s covers
 * [s S, (s+1) S) met with [w0, p]). Each span is reduced alone by mc_spl_span, whatever block or
 * launch runs it, and the spans' (max, sum, out) are folded in increasing span order by
 * mc_spl_fold: every output element has one formula, a function of its positions alone.
 *
 * Decode (rows 0): grid (n_kv, mc_att_split_blocks(capacity)): block (g, x) takes the spans
 * lo + x, lo + x + gridDim.y, ... of kv head g (a grid sized by the state's capacity, so a
 * captured graph replays it at any position; blocks with no span at p leave at once, and come
 * last in the grid's order, behind every block with work). A block streams its
 * first span's cached rows by cp.async before the wait (every row but p's, written by earlier
 * steps), norms and ropes the G q heads in registers as attention_decode_cluster does, and the
 * block whose spans include p's computes the new k and v row as attention_decode_cluster does
 * (the same code: the same bits), appends it and uses it from shared memory; no other block reads
 * row p. Each span's (max, sum) per head and out per element go to a->partial; the last block of
 * the kv head to finish (an integer ticket elects it, and resets it) folds the spans lo .. hi in
 * order and writes out. Chunk rows (rows = M): grid (n_kv, 1, M), row z at p = *pos + z (every
 * row's k and v appended before by attention_chunk_append, so nothing is skipped): one block
 * reduces the row's spans in order and folds each into shared memory as it goes. One kernel for
 * both, so the span reduction and the fold are the same instructions in decode and in a chunk.
 * Serves hd == hdv in {32, 64, 128} and G = n_head/n_kv in {1, 2, 3, 4, 8}. Per layer and token
 * (decode): reads qkv (one token), freqs, norms, *pos, this layer's K and V rows [w0, p); writes
 * the K and V rows at p, the partials of the spans (G (hd + 2) floats per span and kv head, read
 * back once by the merging block) and out[n_head][hd]. */
#define MC_SPL_WARPS 8u
#define MC_SPL_THREADS (32u * MC_SPL_WARPS)
#define MC_SPL_NG (2u * MC_SPL_WARPS) /* 16-lane groups of a block */

/* The shared-memory layout of attention_split (floats; every array 16-byte aligned): at 0 the K
 * rows of one span and at vt its V rows, in the cache's type (after each span the group states
 * take their place, MC_SPL_NG G (hd + 2) floats, and in the decode merge batches of partials,
 * G (hd + 2) floats a span); the new row (kn, vn: stored values); the group weights; the span's
 * max and sum per head; a chunk row's fold (max, sum, out per element); the merge flag. */
struct mc_spl_layout {
    uint32_t vt, kn, vn, wq, bm, bl, fm, fl, fo, flag, total;
};
__host__ __device__ inline mc_spl_layout mc_spl_layout_of(uint32_t G, uint32_t hd, uint32_t kvb) {
    mc_spl_layout L;
    const uint32_t rows = MC_ATT_SPAN * hd * kvb / 4, states = MC_SPL_NG * G * (hd + 2);
    uint32_t o = 2 * rows > states ? 2 * rows : states;
    o = (o + 3) / 4 * 4;
    L.vt = rows;
    L.kn = o;
    o += hd;
    L.vn = o;
    o += hd;
    L.wq = o;
    o += (MC_SPL_NG * G + 3) / 4 * 4;
    L.bm = o;
    o += (G + 3) / 4 * 4;
    L.bl = o;
    o += (G + 3) / 4 * 4;
    L.fm = o;
    o += G * hd;
    L.fl = o;
    o += G * hd;
    L.fo = o;
    o += G * hd;
    L.flag = o;
    o += 4;
    L.total = o;
    return L;
}

/* One span's reduction: positions [p0, p0 + nt) (nt <= MC_ATT_SPAN), K row t at sm + t HD and V
 * row t at sm + vt + t HD (in the cache's type), the row of position `skip` (when in range) from
 * kn, vn instead. Group q (16 lanes) walks the pairs (p0 + 32k + q, p0 + 32k + q + 16), k = 0, 1,
 * ..., in order with an online softmax per head (a score: the lanes' partial dots in dimension
 * order, then a fixed xor tree over the 16 lanes); then the 16 group states merge in group order
 * with the weights exp(m_q - M), M the span's max. On return (after a barrier): bm[h] and bl[h]
 * the span's max and sum of head h, ob[i] its out (scaled as bl) of element e = tid + i
 * MC_SPL_THREADS (head e / HD, dimension e % HD). The tiles' space holds the group states then. */
template <uint32_t HD, uint32_t G, typename KT>
__device__ __forceinline__ void mc_spl_span(float *sm, uint32_t vt, const KT *kn, const KT *vn, uint32_t p0,
                                            uint32_t nt, uint32_t skip, const float (&q)[G][HD / 16], float scale,
                                            float *wq, float *bm, float *bl,
                                            float (&ob)[(G * HD + MC_SPL_THREADS - 1) / MC_SPL_THREADS]) {
    constexpr uint32_t DPL = HD / 16, NG = MC_SPL_NG, NT = MC_SPL_THREADS, EPT = (G * HD + NT - 1) / NT;
    const uint32_t tid = threadIdx.x, grp = tid >> 4, gl = tid & 15, warp = tid >> 5;
    const KT *ks = (const KT *)sm, *vs = (const KT *)(sm + vt);
    float m[G], l[G], o[G][DPL];
#pragma unroll
    for (uint32_t h = 0; h < G; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (uint32_t i = 0; i < DPL; i++)
            o[h][i] = 0.0f;
    }
    /* warp-uniform trip count: groups 2w and 2w + 1 take positions ta and ta + NG */
    for (uint32_t base = 2 * warp; base < nt; base += 2 * NG) {
        const uint32_t ta = base + (grp & 1), tb = ta + NG;
        const bool va = ta < nt, vbl = tb < nt;
        const KT *ka = p0 + ta == skip ? kn : ks + (va ? ta : 0) * HD;
        const KT *kb = p0 + tb == skip ? kn : ks + (vbl ? tb : 0) * HD;
        const KT *ra = p0 + ta == skip ? vn : vs + (va ? ta : 0) * HD;
        const KT *rb = p0 + tb == skip ? vn : vs + (vbl ? tb : 0) * HD;
        float kxa[DPL], kxb[DPL], vxa[DPL], vxb[DPL];
        mc_atc_load<HD>(kxa, ka, gl);
        mc_atc_load<HD>(kxb, kb, gl);
        mc_atc_load<HD>(vxa, ra, gl);
        mc_atc_load<HD>(vxb, rb, gl);
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
        for (int off = 8; off > 0; off >>= 1)
#pragma unroll
            for (uint32_t h = 0; h < G; h++) {
                sa[h] = __fadd_rn(sa[h], __shfl_xor_sync(MC_FULL, sa[h], off));
                sb[h] = __fadd_rn(sb[h], __shfl_xor_sync(MC_FULL, sb[h], off));
            }
        if (va) {
#pragma unroll
            for (uint32_t h = 0; h < G; h++) {
                const float s1 = __fmul_rn(sa[h], scale), s2 = vbl ? __fmul_rn(sb[h], scale) : -INFINITY;
                const float mn = fmaxf(m[h], fmaxf(s1, s2));
                const float alpha = expf(__fsub_rn(m[h], mn)); /* 0 on the group's first position */
                const float pa = expf(__fsub_rn(s1, mn)), pb = vbl ? expf(__fsub_rn(s2, mn)) : 0.0f;
                l[h] = __fadd_rn(fmaf(l[h], alpha, pa), pb);
                m[h] = mn;
#pragma unroll
                for (uint32_t i = 0; i < DPL; i++) {
                    float v = fmaf(pa, vxa[i], __fmul_rn(o[h][i], alpha));
                    if (vbl)
                        v = fmaf(pb, vxb[i], v);
                    o[h][i] = v;
                }
            }
        }
    }
    __syncthreads(); /* the span's rows are read: the group states take their place */
    float *go = sm, *gm = sm + NG * G * HD, *gs = gm + NG * G;
#pragma unroll
    for (uint32_t h = 0; h < G; h++) {
        mc_atc_store<HD>(go + (size_t)(grp * G + h) * HD, o[h], gl);
        if (gl == 0) {
            gm[grp * G + h] = m[h];
            gs[grp * G + h] = l[h];
        }
    }
    __syncthreads();
    if (tid < NG * G) { /* the groups' weights: exp(m_q - M), M the span's max; an empty group: 0 */
        const uint32_t h = tid % G;
        float M = -INFINITY;
#pragma unroll
        for (uint32_t k = 0; k < NG; k++)
            M = fmaxf(M, gm[k * G + h]);
        wq[tid] = M == -INFINITY ? 0.0f : expf(__fsub_rn(gm[tid], M));
        if (tid < G)
            bm[tid] = M;
    }
    __syncthreads();
    if (tid < G) { /* the span's sum per head, groups in order */
        float s = 0.0f;
#pragma unroll
        for (uint32_t k = 0; k < NG; k++)
            s = fmaf(gs[k * G + tid], wq[k * G + tid], s);
        bl[tid] = s;
    }
#pragma unroll
    for (uint32_t i = 0; i < EPT; i++) {
        const uint32_t e = tid + i * NT;
        float s = 0.0f;
        if (e < G * HD) {
            const uint32_t h = e / HD, d = e % HD;
#pragma unroll
            for (uint32_t k = 0; k < NG; k++)
                s = fmaf(go[(size_t)(k * G + h) * HD + d], wq[k * G + h], s);
        }
        ob[i] = s;
    }
    __syncthreads(); /* bl for every thread; the group states are read */
}

template <uint32_t HD, uint32_t G, typename KT = float>
__global__ void __launch_bounds__(MC_SPL_THREADS, 1)
    attention_split(const mc_rope_args a, const float *qkv, KT *k_cache, KT *v_cache, float *out, const int32_t *pos,
                    uint32_t rows) {
    static_assert(HD <= 128, "16-lane groups");
    constexpr uint32_t DPL = HD / 16, NT = MC_SPL_THREADS, EPT = (G * HD + NT - 1) / NT, S = MC_ATT_SPAN;
    const uint32_t g = blockIdx.x, x = blockIdx.y, X = gridDim.y;
    const uint32_t tid = threadIdx.x, gl = tid & 15, warp = tid >> 5;
    float fr[DPL]; /* the lane's RoPE frequencies: read with *pos, one round trip */
    mc_atc_freqs<HD>(fr, a, gl);
    /* rows: row blockIdx.z of a chunk, at position *pos + row; else the decode step at *pos (written
     * by the commit of an earlier step: ordered before the qkv GEMV) */
    const int32_t p = *pos + (rows ? (int32_t)blockIdx.z : 0);
    const uint32_t npos = (uint32_t)p + 1, w0 = mc_att_first_position(a.window, (uint32_t)p);
    uint32_t lo, hi;
    mc_att_span_range(a.window, (uint32_t)p, &lo, &hi);
    const uint32_t n_act = min(hi - lo + 1, X); /* the blocks with a span; the ticket counts them */
    if (x >= n_act)
        return;
    if (rows) {
        qkv += (size_t)blockIdx.z * ((a.n_head + 2 * a.n_kv) * HD);
        out += (size_t)blockIdx.z * (a.n_head * HD);
    }
    const uint32_t skip = rows ? 0xffffffffu : (uint32_t)p;
    const bool has_new = !rows && (hi - lo) % X == x;
    extern __shared__ __align__(16) float sm[];
    const mc_spl_layout L = mc_spl_layout_of(G, HD, sizeof(KT));
    KT *kn = (KT *)(sm + L.kn), *vn = (KT *)(sm + L.vn);
    float *wq = sm + L.wq, *bm = sm + L.bm, *bl = sm + L.bl, *fm = sm + L.fm, *fl = sm + L.fl, *fo = sm + L.fo;
    const KT *kb = k_cache + (size_t)g * a.capacity * HD, *vb = v_cache + (size_t)g * a.capacity * HD;
    { /* rows below p were written by earlier steps: the first span streams in before the wait */
        const uint32_t s = lo + x, p0 = max(s * S, w0);
        mc_atc_load_tile<HD, KT>((KT *)sm, (KT *)(sm + L.vt), kb, vb, p0, min(s * S + S, npos) - p0, skip);
    }
    mc_atc_cs<HD> cs;
    mc_atc_rope_prep<HD>(cs, fr, a, p);
    mc_wait_prior_grid(MC_ATT_FAMILY(a));
    float q[G][DPL]; /* and attention_decode_cluster's new row (the same code) */
    mc_atc_q_and_row<HD, G, KT>(q, a, qkv, g, g, cs, has_new && warp == 0, true, kn, vn, k_cache, v_cache, p);
    const float scale = a.scale > 0.0f ? a.scale : 1.0f / sqrtf((float)HD);
    const uint32_t NS = mc_att_spans(a.capacity);
    /* the partials: out [head][span][hd] (16-byte rows), then (max, sum) [head][span][2] */
    float *po = a.partial, *pml = rows ? NULL : a.partial + (size_t)a.n_head * NS * HD;
    for (uint32_t s = lo + x; s <= hi; s += X) {
        const uint32_t p0 = max(s * S, w0), nt = min(s * S + S, npos) - p0;
        if (s != lo + x) {
            __syncthreads(); /* the last span's results are read everywhere */
            mc_atc_load_tile<HD, KT>((KT *)sm, (KT *)(sm + L.vt), kb, vb, p0, nt, skip);
        }
        mc_cp_async_wait(0);
        __syncthreads(); /* the span's rows landed for every thread; the new row too */
        float ob[EPT];
        mc_spl_span<HD, G, KT>(sm, L.vt, kn, vn, p0, nt, skip, q, scale, wq, bm, bl, ob);
#pragma unroll
        for (uint32_t i = 0; i < EPT; i++) {
            const uint32_t e = tid + i * NT, h = e / HD;
            if (e >= G * HD)
                break;
            if (!rows) {
                po[((size_t)(g * G + h) * NS + s) * HD + e % HD] = ob[i];
            } else if (s == lo) { /* a chunk row: its fold, this thread's elements */
                fm[e] = bm[h];
                fl[e] = bl[h];
                fo[e] = ob[i];
            } else {
                float M = fm[e], Ls = fl[e], O = fo[e];
                mc_spl_fold(M, Ls, O, bm[h], bl[h], ob[i]);
                fm[e] = M;
                fl[e] = Ls;
                fo[e] = O;
            }
        }
        if (!rows && tid < G) {
            pml[((size_t)(g * G + tid) * NS + s) * 2] = bm[tid];
            pml[((size_t)(g * G + tid) * NS + s) * 2 + 1] = bl[tid];
        }
    }
    if (rows) {
#pragma unroll
        for (uint32_t i = 0; i < EPT; i++) {
            const uint32_t e = tid + i * NT;
            if (e < G * HD)
                out[(size_t)(g * G + e / HD) * HD + e % HD] = fo[e] * (1.0f / fl[e]);
        }
        return;
    }
    /* decode: the last block of kv head g to finish folds every span's partials */
    uint32_t *flag = (uint32_t *)(sm + L.flag);
    __threadfence(); /* this thread's partials are visible device-wide before the ticket counts them */
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        flag[0] = atomicAdd(a.ticket + g, 1u) == n_act - 1 ? 1u : 0u;
    }
    __syncthreads();
    if (!flag[0])
        return;
    __threadfence();
    /* the spans in batches of C (as many as the tiles' space holds: at least MC_SPL_NG), each read
     * at once by the whole block (L2 loads: other blocks wrote them), then folded in span order */
    const uint32_t C = L.kn / (G * (HD + 2));
    float *bo = sm, *bml = sm + C * G * HD; /* a batch: out [span][head][hd], (max, sum) [span][head][2] */
    float M[EPT], Ls[EPT], O[EPT];
#pragma unroll
    for (uint32_t i = 0; i < EPT; i++) {
        M[i] = -INFINITY;
        Ls[i] = 0.0f;
        O[i] = 0.0f;
    }
    for (uint32_t sb = lo; sb <= hi; sb += C) {
        const uint32_t nb = min(C, hi + 1 - sb), n4 = nb * G * HD / 4, n2 = nb * G;
        /* the batch before (or the last span's group states) read; then four 16-byte loads in
         * flight a thread */
        __syncthreads();
        for (uint32_t i0 = tid; i0 < n4; i0 += 4 * NT) {
            float4 v[4];
#pragma unroll
            for (uint32_t k = 0; k < 4; k++) {
                const uint32_t i = i0 + k * NT, e4 = 4 * i;
                if (i < n4)
                    v[k] =
                        __ldcg((const float4 *)(po + ((size_t)(g * G + (e4 / HD) % G) * NS + sb + e4 / (G * HD)) * HD +
                                                e4 % HD));
            }
#pragma unroll
            for (uint32_t k = 0; k < 4; k++)
                if (i0 + k * NT < n4)
                    ((float4 *)bo)[i0 + k * NT] = v[k];
        }
        for (uint32_t i = tid; i < n2; i += NT) {
            const float2 v = __ldcg((const float2 *)(pml + ((size_t)(g * G + i % G) * NS + sb + i / G) * 2));
            bml[2 * i] = v.x;
            bml[2 * i + 1] = v.y;
        }
        __syncthreads();
#pragma unroll
        for (uint32_t i = 0; i < EPT; i++) {
            const uint32_t e = tid + i * NT, h = e / HD;
            if (e >= G * HD)
                break;
#pragma unroll 4
            for (uint32_t j = 0; j < nb; j++) {
                const float mj = bml[(j * G + h) * 2], lj = bml[(j * G + h) * 2 + 1], oj = bo[j * G * HD + e];
                if (sb + j == lo) {
                    M[i] = mj;
                    Ls[i] = lj;
                    O[i] = oj;
                } else {
                    mc_spl_fold(M[i], Ls[i], O[i], mj, lj, oj);
                }
            }
        }
    }
#pragma unroll
    for (uint32_t i = 0; i < EPT; i++) {
        const uint32_t e = tid + i * NT;
        if (e < G * HD)
            out[(size_t)(g * G + e / HD) * HD + e % HD] = O[i] * (1.0f / Ls[i]);
    }
    if (tid == 0)
        a.ticket[g] = 0; /* for the next launch (the kernel boundary orders it) */
}

/* ---- launch ------------------------------------------------------------------------------- */

/* The split instantiations (attention_split), as the cluster's. */
#define MC_SPL_FN(HD, G) ((const void *)attention_split<HD, G>)
#define MC_SPL_FN_H(HD, G) ((const void *)attention_split<HD, G, __half>)
#define MC_SPL_FN_B(HD, G) ((const void *)attention_split<HD, G, __nv_bfloat16>)
#define MC_SPL_PICK(kv, hd, G)                                                                                         \
    ((kv) == MC_KV_F16    ? MC_ATC_DISPATCH128(hd, G, MC_SPL_FN_H)                                                     \
     : (kv) == MC_KV_BF16 ? MC_ATC_DISPATCH128(hd, G, MC_SPL_FN_B)                                                     \
                          : MC_ATC_DISPATCH128(hd, G, MC_SPL_FN))
#define MC_SPL_EACH(F)                                                                                                 \
    MC_ATC_EACH_OF128(F, MC_SPL_FN) MC_ATC_EACH_OF128(F, MC_SPL_FN_H) MC_ATC_EACH_OF128(F, MC_SPL_FN_B)

/* The largest dynamic shared memory of any split instantiation (f32, hd 128, G 8: 145 KB). */
static size_t mc_spl_smem_max(void) {
    size_t m = 0;
    for (uint32_t hd = 32; hd <= 128; hd *= 2)
        for (uint32_t G = 1; G <= 8; G *= 2)
            for (uint32_t kvb = 2; kvb <= 4; kvb += 2) {
                const size_t b = (size_t)mc_spl_layout_of(G, hd, kvb).total * 4;
                m = b > m ? b : m;
            }
    return m;
}

/* Per device: whether every split instantiation may use the largest need (set once, for all of
 * them, as the cluster's in attention.cu). */
static int mc_spl_smem_ready[MC_MAX_DEVICES];

/* The shared-memory limit of every split instantiation on device dev, the largest need (once:
 * mc_attention_fused_prepare calls it on the split path). */
cudaError_t mc_spl_prepare(int dev) {
#define MC_SPL_FNS(fn) fn,
    static const void *const fns[] = {MC_SPL_EACH(MC_SPL_FNS)};
#undef MC_SPL_FNS
    return mc_att_smem_limit(fns, sizeof fns / sizeof fns[0], (int)mc_spl_smem_max(), mc_spl_smem_ready, dev);
}

/* attention_split's launch: decode (rows 0; a programmatic launch under c->pdl, the grid by the
 * state's capacity, its scratch from a) or a chunk's rows (rows = M; plain stream order, one
 * block per row and kv head). */
cudaError_t mc_spl_launch(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache, void *v_cache,
                          float *out, const int32_t *pos, uint32_t rows, cudaStream_t st) {
    const uint32_t G = a->n_head / a->n_kv;
    if (!rows && (!a->partial || !a->ticket))
        return cudaErrorInvalidValue;
    cudaError_t e = mc_attention_fused_prepare(c, a->n_head, a->n_kv, a->hd, a->hdv);
    if (e != cudaSuccess)
        return e;
    return mc_att_span_launch(c, MC_SPL_PICK(a->kv, a->hd, G),
                              rows ? dim3(a->n_kv, 1, rows) : dim3(a->n_kv, mc_att_split_blocks(a->capacity), 1),
                              MC_SPL_THREADS, (size_t)mc_spl_layout_of(G, a->hd, mc_kv_bytes(a->kv)).total * 4, a,
                              qkv, k_cache, v_cache, out, pos, rows, st);
}

cudaError_t mc_attention_split_trigger_addr(void **p) { return cudaGetSymbolAddress(p, mc_trigger_mask); }

const char *mc_attention_split_family(const void *f) {
    static const mc_family_row table[] = {
#define MC_SPL_ROW(fn) {fn, "attention"},
        MC_SPL_EACH(MC_SPL_ROW)
#undef MC_SPL_ROW
    };
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
