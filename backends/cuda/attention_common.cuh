/* attention_common.cuh: what the fused attention kernel files share (internal, device code):
 * attention.cu (the tiled and cluster decode kernels), attention_chunk.cu (a prefill chunk's
 * rows), attention_split.cu (attention=split, flash-decoding) and attention_mma.cu
 * (attention=mma). It holds the cluster's split of the positions (MC_ATT_SPLIT), the cp.async
 * helpers, the spans' fold, the window's first position, the lane groups of
 * attention_decode_cluster and their device helpers (a lane's slots, the q/k norm and RoPE in
 * registers, q and the new k and v row, the tile loads: one piece of code, so every kernel that
 * calls them computes the same bits), the dispatch of the instantiations by shape, and the host
 * functions one of these files calls in another. Included by those four files alone. */
#ifndef MEMRA_CUDA_ATTENTION_COMMON_CUH
#define MEMRA_CUDA_ATTENTION_COMMON_CUH

#include "cuda_common.cuh"

/* The blocks of a cluster (its ranks): attention_decode_cluster_tiled and attention_decode_cluster
 * split the positions [w0, *pos] of a kv head into MC_ATT_SPLIT contiguous ranges, one a block;
 * attention_chunk_rows walks the same ranges in one block. */
#define MC_ATT_SPLIT 8u

/* cp.async: a 16-byte copy from global into shared memory, the commit of the copies queued so far
 * as one group, and the wait for the groups. */
__device__ __forceinline__ void mc_cp_async16(void *smem, const void *gmem) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void mc_cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* Waits until at most `pending` of this thread's newest copy groups are still in flight. */
__device__ __forceinline__ void mc_cp_async_wait(uint32_t pending) {
    if (pending >= 2)
        asm volatile("cp.async.wait_group 2;" ::: "memory");
    else if (pending == 1)
        asm volatile("cp.async.wait_group 1;" ::: "memory");
    else
        asm volatile("cp.async.wait_group 0;" ::: "memory");
}

/* The first position a query at npos - 1 attends to: npos - window on a sliding-window layer
 * whose window it has passed (a.window > 0), else 0. The split of [w0, npos) over the cluster's
 * blocks is a function of *pos and the window alone. */
__device__ __forceinline__ uint32_t mc_att_window_start(const mc_rope_args &a, uint32_t npos) {
    return a.window && npos > a.window ? npos - a.window : 0;
}

/* The shape of attention_decode_cluster (attention.cu, whose comment says how it works): warps a
 * block, the floats of a tile buffer, its shared memory; its lane groups and the device helpers
 * below serve attention_chunk_append, attention_chunk_rows and attention_split too. */
#define MC_ATC_WARPS 8u
#define MC_ATC_TILE_FLOATS 8192u /* floats of one K (or V) tile buffer: 8192 / hd positions */

/* Output elements of a kv head's G * hd that each block of the cluster finishes. */
__host__ __device__ constexpr uint32_t mc_atc_per_e(uint32_t G, uint32_t hd) {
    return (G * hd + MC_ATT_SPLIT - 1) / MC_ATT_SPLIT;
}

/* Shared floats of attention_decode_cluster: K and V tile rings [2][T][hd] (aliased by the group states
 * after the tiles), the new row, the merge weights, the block's max per head, and what the
 * cluster's blocks push to this one: (m, l) per rank and head, and per rank its part of this
 * block's output elements. */
__host__ __device__ inline uint32_t mc_atc_smem_floats(uint32_t G, uint32_t hd) {
    return 4 * MC_ATC_TILE_FLOATS + 2 * hd + 2 * MC_ATC_WARPS * G + G + 2 * MC_ATT_SPLIT * G +
           MC_ATT_SPLIT * mc_atc_per_e(G, hd) + 8; /* then 8 bytes for an mbarrier, aligned */
}

/* Lanes of a group (16 up to hd 128, 32 at hd 256) and the dimensions a lane holds. */
template <uint32_t HD> inline constexpr uint32_t MC_ATC_GL = HD > 128 ? 32u : 16u;
template <uint32_t HD> inline constexpr uint32_t MC_ATC_DPL = HD / MC_ATC_GL<HD>;

/* Dimension of slot i of lane gl (of a GL-lane group). */
template <uint32_t HD> __device__ __forceinline__ uint32_t mc_atc_dim(uint32_t gl, uint32_t i) {
    return MC_ATC_DPL<HD> >= 4 ? (i / 4) * (4 * MC_ATC_GL<HD>)+4 * gl + (i % 4) : 2 * gl + i;
}

/* A lane's slots of a row (of floats, or of a cache's stored values, read back exactly). */
template <uint32_t HD, typename KT>
__device__ __forceinline__ void mc_atc_load(float (&x)[MC_ATC_DPL<HD>], const KT *row, uint32_t gl) {
    if (MC_ATC_DPL<HD> >= 4) {
        constexpr uint32_t NK = MC_ATC_DPL<HD> >= 4 ? MC_ATC_DPL<HD> / 4 : 1;
#pragma unroll
        for (uint32_t k = 0; k < NK; k++) {
            const float4 v = mc_kv_load4(row + k * 4 * MC_ATC_GL<HD> + 4 * gl);
            x[4 * k] = v.x;
            x[4 * k + 1] = v.y;
            x[4 * k + 2] = v.z;
            x[4 * k + 3] = v.w;
        }
    } else {
        const float2 v = mc_kv_load2(row + 2 * gl);
        x[0] = v.x;
        x[1] = v.y;
    }
}

/* A lane's slots into a q8 row (kv=q8, hd 32, 64 or 128: 16-lane groups), called by lanes 0 ..
 * 15 of a warp together: each block of 32 dimensions is held by 8 lanes (hd 64, 128: 4 values
 * each, slots 4 k .. 4 k + 3 in block 2 k + gl / 8) or by all 16 (hd 32: 2 each); its amax over
 * those lanes (a maximum: any order gives the same bits), then memra_kv_q8_*'s scale and quants,
 * the quants stored a lane's 4 (2) at once and the scale by the block's first lane. */
template <uint32_t HD>
__device__ __forceinline__ void mc_atc_store_q8(mc_q8 *row, const float (&x)[MC_ATC_DPL<HD>], uint32_t gl) {
    static_assert(HD == 32 || HD == 64 || HD == 128, "kv=q8 rows of 32, 64 or 128 values");
    constexpr uint32_t DPL = MC_ATC_DPL<HD>;
    int8_t *qs = (int8_t *)row + HD / 8;
    float *sc = (float *)row;
    if constexpr (DPL == 2) {
        float a = memra_kv_q8_amax(memra_kv_q8_amax(0.0f, x[0]), x[1]);
#pragma unroll
        for (uint32_t o = 8; o > 0; o >>= 1)
            a = memra_kv_q8_amax(a, __shfl_xor_sync(0xffffu, a, o));
        const float d = memra_kv_q8_scale(a);
        const uint32_t q0 = (uint8_t)memra_kv_q8_quant(x[0], d), q1 = (uint8_t)memra_kv_q8_quant(x[1], d);
        *(uint16_t *)(qs + 2 * gl) = (uint16_t)(q0 | q1 << 8);
        if (gl == 0)
            sc[0] = d;
    } else {
#pragma unroll
        for (uint32_t k = 0; k < DPL / 4; k++) {
            float a = 0.0f;
#pragma unroll
            for (uint32_t i = 0; i < 4; i++)
                a = memra_kv_q8_amax(a, x[4 * k + i]);
#pragma unroll
            for (uint32_t o = 4; o > 0; o >>= 1)
                a = memra_kv_q8_amax(a, __shfl_xor_sync(0xffffu, a, o));
            const float d = memra_kv_q8_scale(a);
            uint32_t w = 0;
#pragma unroll
            for (uint32_t i = 0; i < 4; i++)
                w |= (uint32_t)(uint8_t)memra_kv_q8_quant(x[4 * k + i], d) << (8 * i);
            *(uint32_t *)(qs + 64 * k + 4 * gl) = w;
            if ((gl & 7) == 0)
                sc[2 * k + (gl >> 3)] = d;
        }
    }
}

/* A lane's slots into a row (a cache's: each value rounded to its storage type; a q8 row by
 * mc_atc_store_q8, lanes 0 .. 15 together). */
template <uint32_t HD, typename KT>
__device__ __forceinline__ void mc_atc_store(KT *row, const float (&x)[MC_ATC_DPL<HD>], uint32_t gl) {
    if constexpr (mc_kv_is_q8<KT>) {
        mc_atc_store_q8<HD>(row, x, gl);
    } else {
#pragma unroll
        for (uint32_t i = 0; i < MC_ATC_DPL<HD>; i++)
            row[mc_atc_dim<HD>(gl, i)] = mc_kv_put<KT>(x[i]);
    }
}

/* Sum over the GL lanes of a group (a fixed xor tree; every lane gets the same bits). */
template <uint32_t GL> __device__ __forceinline__ float mc_atc_group_sum(float v) {
#pragma unroll
    for (int o = GL / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(MC_FULL, v, o);
    return v;
}

/* A lane's weights of a norm (qwen3's, gemma3's q or k norm), read before they are needed so that
 * their round trip overlaps others; nothing when norm is NULL. */
template <uint32_t HD>
__device__ __forceinline__ void mc_atc_norm_load(float (&w)[MC_ATC_DPL<HD>], const float *norm, uint32_t gl) {
    if (norm) {
#pragma unroll
        for (uint32_t i = 0; i < MC_ATC_DPL<HD>; i++)
            w[i] = norm[mc_atc_dim<HD>(gl, i)];
    }
}

/* RMSNorm (eps inside the root) of NV vectors held as lane slots, with the lane's weights w.
 * Called by whole warps. */
template <uint32_t HD, uint32_t NV>
__device__ __forceinline__ void mc_atc_norm(float (&x)[NV][MC_ATC_DPL<HD>], const float (&w)[MC_ATC_DPL<HD>],
                                            float eps) {
#pragma unroll
    for (uint32_t v = 0; v < NV; v++) {
        float ss = 0.0f;
#pragma unroll
        for (uint32_t i = 0; i < MC_ATC_DPL<HD>; i++)
            ss = fmaf(x[v][i], x[v][i], ss);
        ss = mc_atc_group_sum<MC_ATC_GL<HD>>(ss);
        const float scale = 1.0f / sqrtf(ss / (float)HD + eps);
#pragma unroll
        for (uint32_t i = 0; i < MC_ATC_DPL<HD>; i++)
            x[v][i] = x[v][i] * scale * w[i];
    }
}

/* The RoPE frequencies of a lane's angles (slot i's in f[i]; the slots the pairing below leaves
 * out hold nothing): they need no earlier kernel's output nor *pos, so they are read first. */
template <uint32_t HD>
__device__ __forceinline__ void mc_atc_freqs(float (&f)[MC_ATC_DPL<HD>], const mc_rope_args &a, uint32_t gl) {
    constexpr uint32_t DPL = MC_ATC_DPL<HD>;
    if (!a.neox) { /* pairs (2j, 2j + 1): both in the lane */
#pragma unroll
        for (uint32_t i = 0; i < DPL; i += 2)
            f[i] = a.freqs[mc_atc_dim<HD>(gl, i) / 2];
    } else if (DPL == 8) { /* pairs (j, j + hd/2): slots i and i + 4 of the lane */
#pragma unroll
        for (uint32_t i = 0; i < 4; i++)
            f[i] = a.freqs[mc_atc_dim<HD>(gl, i)];
    } else { /* pairs (j, j + hd/2): lane gl and lane gl ^ 8, the same slot */
        const bool lo = (gl & 8) == 0;
#pragma unroll
        for (uint32_t i = 0; i < DPL; i++) {
            const uint32_t d = mc_atc_dim<HD>(gl, i);
            f[i] = a.freqs[lo ? d : d - HD / 2];
        }
    }
}

/* The cos and sin of a lane's RoPE angles at position p (they need no earlier kernel's output:
 * computed before the wait), from its frequencies (mc_atc_freqs). */
template <uint32_t HD> struct mc_atc_cs { float s[MC_ATC_DPL<HD>], c[MC_ATC_DPL<HD>]; };

template <uint32_t HD>
__device__ __forceinline__ void mc_atc_rope_prep(mc_atc_cs<HD> &cs, const float (&f)[MC_ATC_DPL<HD>],
                                                 const mc_rope_args &a, int32_t p) {
    constexpr uint32_t DPL = MC_ATC_DPL<HD>;
    const float fpos = (float)p * a.pos_scale;
    if (!a.neox) {
#pragma unroll
        for (uint32_t i = 0; i < DPL; i += 2)
            sincosf(fpos * f[i], &cs.s[i], &cs.c[i]);
    } else if (DPL == 8) {
#pragma unroll
        for (uint32_t i = 0; i < 4; i++)
            sincosf(fpos * f[i], &cs.s[i], &cs.c[i]);
    } else {
#pragma unroll
        for (uint32_t i = 0; i < DPL; i++)
            sincosf(fpos * f[i], &cs.s[i], &cs.c[i]);
    }
}

/* RoPE of NV vectors held as lane slots, with the lane's angles. Called by whole warps. */
template <uint32_t HD, uint32_t NV>
__device__ __forceinline__ void mc_atc_rope(float (&x)[NV][MC_ATC_DPL<HD>], const mc_atc_cs<HD> &cs, int neox,
                                            uint32_t gl) {
    constexpr uint32_t DPL = MC_ATC_DPL<HD>;
    if (!neox) {
#pragma unroll
        for (uint32_t i = 0; i < DPL; i += 2) {
            const float s = cs.s[i], c = cs.c[i];
#pragma unroll
            for (uint32_t v = 0; v < NV; v++) {
                const float x0 = x[v][i], x1 = x[v][i + 1];
                x[v][i] = x0 * c - x1 * s;
                x[v][i + 1] = x0 * s + x1 * c;
            }
        }
    } else if (DPL == 8) {
#pragma unroll
        for (uint32_t i = 0; i < 4; i++) {
            const float s = cs.s[i], c = cs.c[i];
#pragma unroll
            for (uint32_t v = 0; v < NV; v++) {
                const float x0 = x[v][i], x1 = x[v][i + 4];
                x[v][i] = x0 * c - x1 * s;
                x[v][i + 4] = x0 * s + x1 * c;
            }
        }
    } else {
        const bool lo = (gl & 8) == 0;
#pragma unroll
        for (uint32_t i = 0; i < DPL; i++) {
            const float s = cs.s[i], c = cs.c[i];
#pragma unroll
            for (uint32_t v = 0; v < NV; v++) {
                const float mine = x[v][i], other = __shfl_xor_sync(MC_FULL, mine, 8);
                const float x0 = lo ? mine : other, x1 = lo ? other : mine;
                x[v][i] = lo ? x0 * c - x1 * s : x0 * s + x1 * c;
            }
        }
    }
}

/* After the wait: q heads g G .. g G + G - 1 normed (where the arm has a q norm) and roped in
 * registers; where row_warp (warp 0 of the block that holds position p: every group of the warp
 * computes the row, group 0 writes it), the new k row of kv head kvg normed and roped and its v
 * row, each rounded to the cache's type into kn, vn, and where store also into the cache at p. q,
 * k, v and the norm weights are all asked for before any is used (one round trip).
 * attention_decode_cluster and attention_split share it: the same instructions, so the same q and
 * the same cache row. (kvg = g and store everywhere but where a kv head's q heads are split over
 * several clusters, attention=heads: g is then the cluster, kvg its kv head, and only the kv head's
 * first cluster stores.) */
template <uint32_t HD, uint32_t G, typename KT>
__device__ __forceinline__ void mc_atc_q_and_row(float (&q)[G][MC_ATC_DPL<HD>], const mc_rope_args &a, const float *qkv,
                                                 uint32_t g, uint32_t kvg, const mc_atc_cs<HD> &cs, bool row_warp,
                                                 bool store, KT *kn, KT *vn, KT *k_cache, KT *v_cache, int32_t p) {
    constexpr uint32_t DPL = MC_ATC_DPL<HD>, GL = MC_ATC_GL<HD>;
    const uint32_t gl = threadIdx.x % GL;
    float qw[DPL], kv[1][DPL], vv[DPL], kw[DPL];
#pragma unroll
    for (uint32_t h = 0; h < G; h++)
        mc_atc_load<HD>(q[h], qkv + (size_t)(g * G + h) * HD, gl);
    mc_atc_norm_load<HD>(qw, a.q_norm, gl);
    if (row_warp) {
        mc_atc_load<HD>(kv[0], qkv + (size_t)a.n_head * HD + (size_t)kvg * HD, gl);
        mc_atc_load<HD>(vv, qkv + (size_t)(a.n_head + a.n_kv) * HD + (size_t)kvg * HD, gl);
        mc_atc_norm_load<HD>(kw, a.k_norm, gl);
    }
    if (a.q_norm)
        mc_atc_norm<HD, G>(q, qw, a.eps);
    mc_atc_rope<HD, G>(q, cs, a.neox, gl);
    if (row_warp) {
        if (a.k_norm)
            mc_atc_norm<HD, 1>(kv, kw, a.eps);
        mc_atc_rope<HD, 1>(kv, cs, a.neox, gl);
        if ((threadIdx.x & 31) < GL) {
            mc_atc_store<HD, KT>(kn, kv[0], gl);
            mc_atc_store<HD, KT>(vn, vv, gl);
            if (store) {
                mc_atc_store<HD, KT>(k_cache + ((size_t)kvg * a.capacity + (size_t)p) * MC_KV_ROWE<HD, KT>, kv[0], gl);
                mc_atc_store<HD, KT>(v_cache + ((size_t)kvg * a.capacity + (size_t)p) * MC_KV_ROWE<HD, KT>, vv, gl);
            }
        }
    }
}

/* (M, L, O) folded with the next span's (m, l, o) (attention_split's and attention_mma's spans): the running max becomes max(M, m) and both
 * sides are scaled to it. Every step an explicit rounding (nothing left to contraction), so
 * decode's merge and a chunk row's fold, which call it in the same order, agree bit for bit. */
__device__ __forceinline__ void mc_spl_fold(float &M, float &L, float &O, float m, float l, float o) {
    const float mn = fmaxf(M, m);
    const float a = expf(__fsub_rn(M, mn)), b = expf(__fsub_rn(m, mn));
    L = fmaf(l, b, __fmul_rn(L, a));
    O = fmaf(o, b, __fmul_rn(O, a));
    M = mn;
}
/* mc_spl_fold in two steps, for many elements of one row: the weights (a of the running side, b
 * of the new span) and the row's max and sum once, then each element (the same operations). */
__device__ __forceinline__ void mc_spl_fold_row(float &M, float &L, float m, float l, float &a, float &b) {
    const float mn = fmaxf(M, m);
    a = expf(__fsub_rn(M, mn));
    b = expf(__fsub_rn(m, mn));
    L = fmaf(l, b, __fmul_rn(L, a));
    M = mn;
}
__device__ __forceinline__ float mc_spl_fold_elem(float O, float o, float a, float b) {
    return fmaf(o, b, __fmul_rn(O, a));
}

/* One group's online-softmax update by a pair of positions (the second absent unless vb): raw
 * scores sa, sb (before the scale), V rows va, vb2 in the lane's slots. attention_decode_cluster's
 * two sweeps run it, so they update alike (the chunk's copy of the loop, mc_atc_tile_pass, keeps its own:
 * nvcc's PTX of attention_chunk.cu differs from run to run, so that a change there cannot be shown
 * to be the same code without a device). */
template <uint32_t DPL>
__device__ __forceinline__ void mc_atc_update(float &m, float &l, float (&o)[DPL], float sa, float sb, bool vb,
                                              float scale, const float (&va)[DPL], const float (&vb2)[DPL]) {
    const float s1 = sa * scale, s2 = vb ? sb * scale : -INFINITY;
    const float mn = fmaxf(m, fmaxf(s1, s2));
    const float alpha = expf(m - mn); /* 0 on the group's first position */
    const float pa = expf(s1 - mn), pb = vb ? expf(s2 - mn) : 0.0f;
    l = fmaf(l, alpha, pa) + pb;
    m = mn;
#pragma unroll
    for (uint32_t i = 0; i < DPL; i++) {
        float v = fmaf(pa, va[i], o[i] * alpha);
        if (vb)
            v = fmaf(pb, vb2[i], v);
        o[i] = v;
    }
}

/* Queues cache rows [t0, t0 + nt) except `skip` of K and V into one tile buffer pair (16-byte
 * copies of 16 / sizeof(KT) stored values; the tile keeps the storage type). */
template <uint32_t HD, typename KT>
__device__ __forceinline__ void mc_atc_load_tile(KT *ks, KT *vs, const KT *kb, const KT *vb, uint32_t t0, uint32_t nt,
                                                 uint32_t skip) {
    constexpr uint32_t E = 16 / sizeof(KT), Q = HD / E;
    for (uint32_t i = threadIdx.x; i < nt * Q; i += blockDim.x) {
        const uint32_t t = i / Q, c = i % Q;
        if (t0 + t != skip) {
            mc_cp_async16(ks + t * HD + E * c, kb + (size_t)(t0 + t) * HD + E * c);
            mc_cp_async16(vs + t * HD + E * c, vb + (size_t)(t0 + t) * HD + E * c);
        }
    }
    mc_cp_async_commit();
}

/* Calls F(HD, G) for the cluster instantiation of these shapes (MC_ATC_DISPATCH128: hd up to 128,
 * the split kernel's). */
#define MC_ATC_DISPATCH(hd, G, F)                                                                                      \
    ((hd) == 256 ? ((G) == 1   ? F(256, 1)                                                                             \
                    : (G) == 2 ? F(256, 2)                                                                             \
                    : (G) == 4 ? F(256, 4)                                                                             \
                               : F(256, 8))                                                                            \
                 : MC_ATC_DISPATCH128(hd, G, F))
#define MC_ATC_DISPATCH128(hd, G, F)                                                                                   \
    ((hd) == 32   ? ((G) == 1   ? F(32, 1)                                                                             \
                     : (G) == 2 ? F(32, 2)                                                                             \
                     : (G) == 3 ? F(32, 3)                                                                             \
                     : (G) == 4 ? F(32, 4)                                                                             \
                                : F(32, 8))                                                                            \
     : (hd) == 64 ? ((G) == 1   ? F(64, 1)                                                                             \
                     : (G) == 2 ? F(64, 2)                                                                             \
                     : (G) == 3 ? F(64, 3)                                                                             \
                     : (G) == 4 ? F(64, 4)                                                                             \
                                : F(64, 8))                                                                            \
                  : ((G) == 1   ? F(128, 1)                                                                            \
                     : (G) == 2 ? F(128, 2)                                                                            \
                     : (G) == 3 ? F(128, 3)                                                                            \
                     : (G) == 4 ? F(128, 4)                                                                            \
                                : F(128, 8)))
/* Every instantiation FN(HD, G) of the cluster kernel's shapes once (F(kernel); MC_ATC_EACH_OF128:
 * hd up to 128, the split kernel's and the chunk rows'). */
// clang-format off
#define MC_ATC_EACH_OF128(F, FN) \
    F(FN(32, 1)) F(FN(32, 2)) F(FN(32, 3)) F(FN(32, 4)) F(FN(32, 8)) \
    F(FN(64, 1)) F(FN(64, 2)) F(FN(64, 3)) F(FN(64, 4)) F(FN(64, 8)) \
    F(FN(128, 1)) F(FN(128, 2)) F(FN(128, 3)) F(FN(128, 4)) F(FN(128, 8))
#define MC_ATC_EACH_OF(F, FN) MC_ATC_EACH_OF128(F, FN) \
    F(FN(256, 1)) F(FN(256, 2)) F(FN(256, 4)) F(FN(256, 8))
// clang-format on

/* The dynamic shared-memory limit of each of the n kernels fns raised to smax on device dev, once
 * (ready[dev] records it: a limit set for every instantiation at once, so none is launched with a
 * need another recorded). */
static inline cudaError_t mc_att_smem_limit(const void *const *fns, size_t n, int smax, int *ready, int dev) {
    if (ready[dev])
        return cudaSuccess;
    for (size_t i = 0; i < n; i++) {
        const cudaError_t e = cudaFuncSetAttribute(fns[i], cudaFuncAttributeMaxDynamicSharedMemorySize, smax);
        if (e != cudaSuccess)
            return e;
    }
    ready[dev] = 1;
    return cudaSuccess;
}

/* The launch of the span kernels (attention_split, attention_mma; arguments (a, qkv, k_cache,
 * v_cache, out, pos, rows)): decode (rows 0) a programmatic launch under c->pdl, a chunk's rows
 * (rows = M) plain stream order. */
static inline cudaError_t mc_att_span_launch(const mc_config *c, const void *fn, dim3 grid, uint32_t threads,
                                             size_t smem, const mc_rope_args *a, const float *qkv, void *k_cache,
                                             void *v_cache, float *out, const int32_t *pos, uint32_t rows,
                                             cudaStream_t st) {
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    if (!rows)
        mc_launch_attrs(&cfg, attr, 0, c);
    void *args[] = {(void *)a,    (void *)&qkv, (void *)&k_cache, (void *)&v_cache,
                    (void *)&out, (void *)&pos, (void *)&rows};
    const cudaError_t e = cudaLaunchKernelExC(&cfg, fn, args);
    return e != cudaSuccess ? e : cudaGetLastError();
}

/* Host functions of one attention file that another calls. attention.cu: the cluster kernel's
 * chunk instantiation (attention_decode_cluster<HD, G, true, KT>) of these shapes for kv (the
 * cache's storage: MC_KV_F32, MC_KV_F16, MC_KV_BF16). attention_chunk.cu: the shared-memory limit
 * of every attention_chunk_rows instantiation (mc_attention_fused_prepare calls it on the cluster
 * path, once per device). attention_split.cu: the shared-memory limit of every attention_split
 * instantiation on the current device dev (once; mc_attention_fused_prepare on the split path),
 * and attention_split's launch (decode: rows 0; a chunk's rows: rows = M). */
const void *mc_atc_chunk_kernel(uint32_t kv, uint32_t hd, uint32_t G);
cudaError_t mc_acr_prepare(void);
cudaError_t mc_spl_prepare(int dev);
cudaError_t mc_spl_launch(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache, void *v_cache,
                          float *out, const int32_t *pos, uint32_t rows, cudaStream_t st);
/* attention_mma.cu (attention=mma): whether it serves these shapes, the shared-memory limit of
 * every instantiation on device dev (once), and the launch (decode: rows 0; a chunk: rows = M). */
int mc_amm_ok(uint32_t G, uint32_t hd, uint32_t hdv);
cudaError_t mc_amm_prepare(int dev);
cudaError_t mc_amm_launch(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache, void *v_cache,
                          float *out, const int32_t *pos, uint32_t rows, cudaStream_t st);

#endif
