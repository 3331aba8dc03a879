/* attention.cu: decode attention of one token over a layer's KV cache, with the q/k norm (qwen3),
 * RoPE and the KV append of the new row, in four paths (mc_attention_path picks one from the
 * shapes and the arm's attention key): attention_decode_cluster (one launch per layer: a cluster
 * of 8 blocks per kv head, 16-lane groups own positions, the merge pushed through distributed
 * shared memory), attention_decode_cluster_tiled (one launch: threads own positions in tiles,
 * for the shapes the first does not serve), attention_split (attention=split, one launch: fixed
 * spans of MC_ATT_SPAN positions spread over many blocks, the last block of a kv head folding
 * them in span order: flash-decoding) and the unfused pair rope_kv_append +
 * attention_decode_chunk / attention_decode_combine (three launches, any shape). Every output
 * element has one fixed formula in each path; the paths differ from each other in bits. A
 * prefill chunk's rows (mc_attention_chunk) keep their path's decode bits: attention_chunk_append,
 * then attention_chunk_rows (the cluster path's, one block per row and kv head walking the 8
 * ranks) or attention_split's chunk mode. Measurements: bench/gpu/NOTES.md. This file holds the fused kernel families, their launches
 * and the choice of path; attention_unfused.cu holds the unfused path. */
#include <cooperative_groups.h>

#include "cuda_common.cuh"

/* ---- attention_decode_cluster_tiled: q/k norm, RoPE, KV append, attention, merge ---------- */

/* One cluster of MC_ATT_SPLIT blocks per kv head g. The positions [w0, *pos] (w0 = 0, or on a
 * sliding-window layer the window's start, mc_att_window_start) are split into MC_ATT_SPLIT
 * contiguous ranges (a function of *pos and the window alone); block r walks its range in tiles of
 * MC_ATT_TILE positions with an online softmax (tiles in order), then the cluster merges the
 * blocks' (max, sum, out) through distributed shared memory in rank order: every output element
 * has one fixed formula, whichever thread computes it. Each block ropes (and norms) the G q heads
 * itself (the same code everywhere, so the same bits); the block whose range holds *pos ropes the
 * new k, appends k and v to the cache and uses them from shared memory. The tiles of cached rows
 * (all written by earlier steps) stream in by cp.async, the first before the wait on the qkv
 * GEMV. Threads own positions (one per (head, position) of a tile for the scores, one per
 * dimension for the output). Per layer and token: reads qkv (one token), freqs, norms, *pos,
 * this layer's K and V rows [w0, *pos); writes the K and V rows at *pos and out[n_head][hdv].
 * Serves the shapes attention_decode_cluster does not (16-byte rows, <= 200 KB of shared
 * memory). */
#define MC_ATT_SPLIT 8u
#define MC_ATT_TILE 32u
#define MC_ATT_THREADS 128u

namespace cg = cooperative_groups;

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

/* The shared-memory layout (floats; every array starts 16-byte aligned). */
struct mc_att_layout {
    uint32_t G4, kst, nb, qs, ks, vs, ps, os, st, kn, vn, total;
};
/* nb tile buffers: up to 4 (3 tiles in flight ahead of the one in use) while the block stays
 * under 160 KB, at least 2. */
__host__ __device__ inline mc_att_layout mc_att_layout_of(uint32_t G, uint32_t hd, uint32_t hdv) {
    mc_att_layout L;
    L.G4 = (G + 3) / 4 * 4;
    L.kst = hd + 4; /* padded K rows: a warp's 16-byte loads of 32 rows hit distinct banks */
    for (L.nb = 4;; L.nb--) {
        uint32_t o = 0;
        L.qs = o;
        o += G * hd;
        L.ks = o;
        o += L.nb * MC_ATT_TILE * L.kst;
        L.vs = o;
        o += L.nb * MC_ATT_TILE * hdv;
        L.ps = o;
        o += MC_ATT_TILE * L.G4;
        L.os = o;
        o += G * hdv;
        L.st = o;
        o += (3 * G + 3) / 4 * 4;
        L.kn = o;
        o += hd;
        L.vn = o;
        o += hdv;
        L.total = o;
        if (L.nb == 2 || (uint64_t)o * 4 <= 160u * 1024u)
            return L;
    }
}

/* Queues the cache rows [t0, t0+nt) except `skip` into one tile buffer (K rows kst values apart;
 * 16-byte copies of 16 / sizeof(KT) stored values, the rows kept in their storage type). */
template <typename KT>
__device__ __forceinline__ void mc_att_load_tile(KT *ks, KT *vs, const KT *kb, const KT *vb, uint32_t t0, uint32_t nt,
                                                 uint32_t skip, uint32_t hd, uint32_t hdv, uint32_t kst) {
    constexpr uint32_t E = 16 / sizeof(KT); /* values a copy */
    const uint32_t kq = hd / E, vq = hdv / E;
    for (uint32_t i = threadIdx.x; i < nt * kq; i += blockDim.x) {
        const uint32_t t = i / kq, c = i % kq;
        if (t0 + t != skip)
            mc_cp_async16(ks + t * kst + E * c, kb + (size_t)(t0 + t) * hd + E * c);
    }
    for (uint32_t i = threadIdx.x; i < nt * vq; i += blockDim.x) {
        const uint32_t t = i / vq, c = i % vq;
        if (t0 + t != skip)
            mc_cp_async16(vs + t * hdv + E * c, vb + (size_t)(t0 + t) * hdv + E * c);
    }
    mc_cp_async_commit();
}

/* The K tile's row stride in stored values: the layout's kst for float; hd + 8 for the 2-byte
 * types (16-byte rows when hd % 8 == 0, which mc_attention_path asks of them; the buffer, sized
 * in floats for kst, holds it). */
template <typename KT> __host__ __device__ constexpr uint32_t mc_att_kstride(uint32_t kst, uint32_t hd) {
    return sizeof(KT) == 4 ? kst : hd + 8;
}

/* The first position a query at npos - 1 attends to: npos - window on a sliding-window layer
 * whose window it has passed (a.window > 0), else 0. The split of [w0, npos) over the cluster's
 * blocks is a function of *pos and the window alone. */
__device__ __forceinline__ uint32_t mc_att_window_start(const mc_rope_args &a, uint32_t npos) {
    return a.window && npos > a.window ? npos - a.window : 0;
}

/* In place: RMSNorm (when norm) of n_vec vectors of hd floats, warp w taking vectors w, w+nw.. */
__device__ void mc_att_norm(float *v, uint32_t n_vec, uint32_t hd, const float *norm, float eps) {
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (uint32_t h = warp; h < n_vec; h += nw) {
        float *x = v + (size_t)h * hd, ss = 0.0f;
        for (uint32_t i = lane; i < hd; i += 32)
            ss = fmaf(x[i], x[i], ss);
        ss = __shfl_sync(MC_FULL, mc_warp_sum(ss), 0);
        const float scale = 1.0f / sqrtf(ss / (float)hd + eps);
        for (uint32_t i = lane; i < hd; i += 32)
            x[i] = x[i] * scale * norm[i];
    }
}

/* In place: RoPE at position p of n_vec vectors of hd floats (one thread per pair). */
__device__ void mc_att_rope(float *v, uint32_t n_vec, const mc_rope_args &a, uint32_t hd, int32_t p) {
    const uint32_t half_dim = hd / 2;
    const float fpos = (float)p * a.pos_scale;
    for (uint32_t i = threadIdx.x; i < n_vec * half_dim; i += blockDim.x) {
        const uint32_t h = i / half_dim, j = i % half_dim;
        const uint32_t i0 = a.neox ? j : 2 * j, i1 = a.neox ? j + half_dim : 2 * j + 1;
        float s, c;
        sincosf(fpos * a.freqs[j], &s, &c);
        float *x = v + (size_t)h * hd;
        const float x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
    }
}

template <uint32_t HD, typename KT = float> /* HD: head_dim when 64 or 128 (dot unrolled), 0: given at run time;
                                              * KT: the cache's storage (cuda_common.cuh) */
__global__ void __launch_bounds__(MC_ATT_THREADS)
    attention_decode_cluster_tiled(const mc_rope_args a, const float *qkv, KT *k_cache, KT *v_cache, float *out,
                                   const int32_t *pos) {
    cg::cluster_group cluster = cg::this_cluster();
    extern __shared__ __align__(16) float sm[];
    const uint32_t hd = HD ? HD : a.hd, hdv = a.hdv, G = a.n_head / a.n_kv;
    const mc_att_layout L = mc_att_layout_of(G, hd, hdv);
    float *qs = sm + L.qs, *ps = sm + L.ps, *os = sm + L.os, *st = sm + L.st, *kn = sm + L.kn, *vn = sm + L.vn;
    float *ms = st, *ls = st + G, *als = st + 2 * G;
    const uint32_t r = blockIdx.x, g = blockIdx.y, lane = threadIdx.x & 31;
    const int32_t p = *pos; /* written by the commit of an earlier step: ordered before the qkv GEMV */
    const uint32_t npos = (uint32_t)p + 1, w0 = mc_att_window_start(a, npos);
    const uint32_t per = (npos - w0 + MC_ATT_SPLIT - 1) / MC_ATT_SPLIT;
    const uint32_t p0 = w0 + min(r * per, npos - w0), p1 = min(p0 + per, npos);
    const bool has_new = p0 <= (uint32_t)p && (uint32_t)p < p1;
    const KT *kb = k_cache + (size_t)g * a.capacity * hd, *vb = v_cache + (size_t)g * a.capacity * hdv;
    const uint32_t n_tiles = (p1 - p0 + MC_ATT_TILE - 1) / MC_ATT_TILE;
    const uint32_t kse = mc_att_kstride<KT>(L.kst, hd); /* the buffers are sized in floats; rows in KT */
    /* rows below *pos were written by earlier steps: stream the first nb-1 tiles before the wait
     * (one copy group per tile; tile j goes to buffer j % nb) */
    for (uint32_t j = 0; j < n_tiles && j + 1 < L.nb; j++) {
        const uint32_t t0 = p0 + j * MC_ATT_TILE;
        mc_att_load_tile<KT>((KT *)(sm + L.ks + j * MC_ATT_TILE * L.kst), (KT *)(sm + L.vs + j * MC_ATT_TILE * hdv), kb,
                             vb, t0, min(MC_ATT_TILE, p1 - t0), (uint32_t)p, hd, hdv, kse);
    }
    mc_wait_prior_grid(MC_ATT_FAMILY(a));
    for (uint32_t i = threadIdx.x; i < G * hd; i += blockDim.x)
        qs[i] = qkv[(size_t)g * G * hd + i];
    if (has_new) {
        for (uint32_t i = threadIdx.x; i < hd; i += blockDim.x)
            kn[i] = qkv[(size_t)a.n_head * hd + (size_t)g * hd + i];
        for (uint32_t i = threadIdx.x; i < hdv; i += blockDim.x)
            vn[i] = qkv[(size_t)(a.n_head + a.n_kv) * hd + (size_t)g * hdv + i];
    }
    for (uint32_t i = threadIdx.x; i < G; i += blockDim.x) {
        ms[i] = -INFINITY;
        ls[i] = 0.0f;
    }
    for (uint32_t i = threadIdx.x; i < G * hdv; i += blockDim.x)
        os[i] = 0.0f;
    __syncthreads();
    if (a.q_norm)
        mc_att_norm(qs, G, hd, a.q_norm, a.eps);
    if (has_new && a.k_norm)
        mc_att_norm(kn, 1, hd, a.k_norm, a.eps);
    __syncthreads();
    mc_att_rope(qs, G, a, hd, p);
    if (has_new)
        mc_att_rope(kn, 1, a, hd, p);
    __syncthreads();
    if (has_new) {
        KT *kd = k_cache + ((size_t)g * a.capacity + (size_t)p) * hd;
        KT *vd = v_cache + ((size_t)g * a.capacity + (size_t)p) * hdv;
        if constexpr (mc_kv_is_f32<KT>) {
            for (uint32_t i = threadIdx.x; i < hd; i += blockDim.x)
                kd[i] = kn[i];
            for (uint32_t i = threadIdx.x; i < hdv; i += blockDim.x)
                vd[i] = vn[i];
        } else { /* the rounded values, in the cache and (read back) in kn, vn for this step's tiles */
            for (uint32_t i = threadIdx.x; i < hd; i += blockDim.x) {
                const KT x = mc_kv_put<KT>(kn[i]);
                kd[i] = x;
                kn[i] = mc_kv_get(x);
            }
            for (uint32_t i = threadIdx.x; i < hdv; i += blockDim.x) {
                const KT x = mc_kv_put<KT>(vn[i]);
                vd[i] = x;
                vn[i] = mc_kv_get(x);
            }
        }
    }
    const float scale = a.scale > 0.0f ? a.scale : 1.0f / sqrtf((float)hd);
    for (uint32_t j = 0; j < n_tiles; j++) {
        const uint32_t t0 = p0 + j * MC_ATT_TILE, nt = min(MC_ATT_TILE, p1 - t0), b = j % L.nb;
        KT *ks = (KT *)(sm + L.ks + b * MC_ATT_TILE * L.kst), *vs = (KT *)(sm + L.vs + b * MC_ATT_TILE * hdv);
        /* queued so far: tiles 0 .. min(j + nb - 2, n_tiles - 1); tile j must have landed */
        mc_cp_async_wait(min(j + L.nb - 2, n_tiles - 1) - j);
        __syncthreads(); /* tile j landed for every thread; tile j-1's buffer is free */
        if (j + L.nb - 1 < n_tiles) {
            const uint32_t jn = j + L.nb - 1, tn = p0 + jn * MC_ATT_TILE;
            mc_att_load_tile<KT>((KT *)(sm + L.ks + (jn % L.nb) * MC_ATT_TILE * L.kst),
                                 (KT *)(sm + L.vs + (jn % L.nb) * MC_ATT_TILE * hdv), kb, vb, tn,
                                 min(MC_ATT_TILE, p1 - tn), (uint32_t)p, hd, hdv, kse);
        }
        if (has_new && (uint32_t)p < t0 + nt) { /* the new row, from shared memory */
            const uint32_t t = (uint32_t)p - t0;
            for (uint32_t i = threadIdx.x; i < hd; i += blockDim.x)
                ks[t * kse + i] = mc_kv_put<KT>(kn[i]); /* exact: kn holds a stored value */
            for (uint32_t i = threadIdx.x; i < hdv; i += blockDim.x)
                vs[t * hdv + i] = mc_kv_put<KT>(vn[i]);
            __syncthreads();
        }
        /* scores and the online softmax: warp-uniform head, lane = position */
        for (uint32_t i = threadIdx.x; i < G * MC_ATT_TILE; i += blockDim.x) {
            const uint32_t h = i / MC_ATT_TILE, t = i % MC_ATT_TILE;
            float s = -INFINITY;
            if (t < nt) {
                const KT *k = ks + t * kse;
                const float *q = qs + (size_t)h * hd;
                float acc = 0.0f;
#pragma unroll 8
                for (uint32_t d = 0; d < hd; d += 4) {
                    const float4 kv = mc_kv_load4(k + d);
                    const float4 qv = *(const float4 *)(q + d);
                    acc = fmaf(qv.x, kv.x, acc);
                    acc = fmaf(qv.y, kv.y, acc);
                    acc = fmaf(qv.z, kv.z, acc);
                    acc = fmaf(qv.w, kv.w, acc);
                }
                s = acc * scale;
            }
            float tmax = s;
            for (int o = 16; o > 0; o >>= 1)
                tmax = fmaxf(tmax, __shfl_xor_sync(MC_FULL, tmax, o)); /* max: exact in any order */
            const float m_old = ms[h], m_new = fmaxf(m_old, tmax);
            const float e = t < nt ? expf(s - m_new) : 0.0f;
            const float lt = mc_warp_sum(e);
            ps[t * L.G4 + h] = e;
            __syncwarp();
            if (lane == 0) {
                const float alpha = expf(m_old - m_new); /* 0 on the first tile (m_old = -inf) */
                ls[h] = fmaf(ls[h], alpha, lt);
                ms[h] = m_new;
                als[h] = alpha;
            }
        }
        __syncthreads();
        /* out: one thread per dimension, up to 4 heads at once (V read once), positions in order */
        for (uint32_t d = threadIdx.x; d < hdv; d += blockDim.x) {
            for (uint32_t h0 = 0; h0 < G; h0 += 4) {
                float o[4];
#pragma unroll
                for (int k = 0; k < 4; k++)
                    o[k] = h0 + k < G ? os[(h0 + k) * hdv + d] * als[h0 + k] : 0.0f;
#pragma unroll 4
                for (uint32_t t = 0; t < nt; t++) {
                    const float v = mc_kv_get(vs[t * hdv + d]);
                    const float4 pv = *(const float4 *)(ps + t * L.G4 + h0);
                    o[0] = fmaf(pv.x, v, o[0]);
                    o[1] = fmaf(pv.y, v, o[1]);
                    o[2] = fmaf(pv.z, v, o[2]);
                    o[3] = fmaf(pv.w, v, o[3]);
                }
#pragma unroll
                for (int k = 0; k < 4; k++)
                    if (h0 + k < G)
                        os[(h0 + k) * hdv + d] = o[k];
            }
        }
    }
    cluster.sync(); /* every block's (m, l, out) visible to the cluster */
    /* the merge: block r writes elements [r*per_e, (r+1)*per_e) of this group's G*hdv outputs */
    const uint32_t n_e = G * hdv, per_e = (n_e + MC_ATT_SPLIT - 1) / MC_ATT_SPLIT;
    for (uint32_t e = r * per_e + threadIdx.x; e < min(n_e, (r + 1) * per_e); e += blockDim.x) {
        const uint32_t h = e / hdv;
        float mr[MC_ATT_SPLIT], lr[MC_ATT_SPLIT], orr[MC_ATT_SPLIT];
#pragma unroll
        for (uint32_t s = 0; s < MC_ATT_SPLIT; s++) {
            const float *rst = cluster.map_shared_rank(st, s);
            mr[s] = rst[h];
            lr[s] = rst[G + h];
            orr[s] = cluster.map_shared_rank(os, s)[e];
        }
        float M = mr[0];
#pragma unroll
        for (uint32_t s = 1; s < MC_ATT_SPLIT; s++)
            M = fmaxf(M, mr[s]);
        float l = 0.0f, o = 0.0f;
#pragma unroll
        for (uint32_t s = 0; s < MC_ATT_SPLIT; s++) {
            const float w = expf(mr[s] - M); /* an empty range: m = -inf, weight 0 */
            l = fmaf(lr[s], w, l);
            o = fmaf(orr[s], w, o);
        }
        out[(size_t)(g * G + h) * hdv + (e % hdv)] = o * (1.0f / l);
    }
    cluster.sync(); /* no block leaves while another may still read its shared memory */
}

/* ---- attention_decode_cluster: lane groups own positions ----------------------------------- */

/* One cluster of MC_ATT_SPLIT blocks per kv head g, as above, but the work inside a block is
 * shaped for latency: 8 warps = NG groups of GL lanes (16 groups of 16 lanes up to hd 128; at hd
 * 256, 8 groups of 32: a whole warp, so a lane still holds 8 dimensions); a group owns positions
 * (group q takes the tile's positions q, q + NG, ...) two at a time, and each lane holds DPL =
 * hd/GL dimensions of a position's K and V row and of every q head of the group (lane l:
 * dimensions 4 GL k + 4l .. 4 GL k + 4l + 3 for slot k when DPL >= 4, 2l and 2l + 1 when DPL = 2,
 * so a group's 16-byte shared loads cover one row without bank conflicts). A score is the lane's
 * partial dot, then a fixed xor tree over the GL lanes; each group keeps an online softmax (m, l,
 * o) per head over its positions in order. The block's whole position range streams into shared
 * memory by cp.async (two tiles of 8192/hd positions in flight; the first two before the wait on
 * the qkv GEMV); then the NG group states merge in group order, and each block pushes its state
 * (m and l of every head, and each output element) into the shared memory of the block that
 * finishes that element (element e: rank e / per_e); after one cluster barrier every block merges
 * the 8 states of its elements in rank order from its own shared memory. Every output element has
 * one fixed formula: the bits depend on *pos and the shapes only. q is normed (qwen3, gemma3) and
 * roped in registers by every group alike. What depends on no earlier kernel is read before the
 * wait: the lane's RoPE frequencies together with *pos (one round trip, not one after the other),
 * then the angles and the first tiles; after the wait q, the new k and v row and the norm weights
 * are asked for at once. The block whose range holds *pos computes the new k and v row (warp 0),
 * appends it to the cache and uses it from shared memory. Serves hd == hdv in {32, 64, 128, 256}
 * and G = n_head/n_kv in {1, 2, 4, 8}, and G 3 up to hd 128 (SmolLM2-135M: 9 q heads on 3 kv heads
 * of 64, the tiled kernel's until issue 27; attention=tiled keeps that path). Positions [w0, *pos]
 * as above (a sliding window). Per layer and token: reads qkv (one token), freqs, norms, *pos, this
 * layer's K and V rows [w0, *pos); writes the K and V rows at *pos and out[n_head][hd]. */
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
           MC_ATT_SPLIT * mc_atc_per_e(G, hd) + 4;
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

/* A lane's slots into a row (a cache's: each value rounded to its storage type). */
template <uint32_t HD, typename KT>
__device__ __forceinline__ void mc_atc_store(KT *row, const float (&x)[MC_ATC_DPL<HD>], uint32_t gl) {
#pragma unroll
    for (uint32_t i = 0; i < MC_ATC_DPL<HD>; i++)
        row[mc_atc_dim<HD>(gl, i)] = mc_kv_put<KT>(x[i]);
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
                mc_atc_store<HD, KT>(k_cache + ((size_t)kvg * a.capacity + (size_t)p) * HD, kv[0], gl);
                mc_atc_store<HD, KT>(v_cache + ((size_t)kvg * a.capacity + (size_t)p) * HD, vv, gl);
            }
        }
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

/* CH: a prefill chunk's rows (attention_chunk). KT: the cache's storage (float, __half,
 * __nv_bfloat16): the tiles and the new row (kn, vn) hold stored values, in the tiles' float space
 * (a tile of T positions takes half its buffer with the 2-byte types), read back exactly by
 * mc_atc_load; the new row is rounded as it is stored, so this step reads the value every later
 * step (and a chunk's rows) read from the cache. */
template <uint32_t HD, uint32_t G, bool CH = false, typename KT = float>
__global__ void __launch_bounds__(32 * MC_ATC_WARPS, 1)
    attention_decode_cluster(const mc_rope_args a, const float *qkv, KT *k_cache, KT *v_cache, float *out,
                             const int32_t *pos) {
    constexpr uint32_t GL = MC_ATC_GL<HD>, DPL = MC_ATC_DPL<HD>, T = MC_ATC_TILE_FLOATS / HD;
    constexpr uint32_t GPW = 32 / GL, NG = GPW * MC_ATC_WARPS; /* groups a warp, a block */
    constexpr uint32_t PER_E = mc_atc_per_e(G, HD);
    static_assert(NG * G * HD + 2 * NG * G <= 4 * MC_ATC_TILE_FLOATS, "the group states alias the tiles");
    /* every block of the cluster has started before any writes to another's shared memory: an
     * arrive now, its wait before the first push */
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    cg::cluster_group cluster = cg::this_cluster();
    extern __shared__ __align__(16) float sm[];
    KT *kt = (KT *)sm, *vt = (KT *)(sm + 2 * MC_ATC_TILE_FLOATS);
    KT *kn = (KT *)(sm + 4 * MC_ATC_TILE_FLOATS), *vn = (KT *)(sm + 4 * MC_ATC_TILE_FLOATS + HD);
    float *wq = sm + 4 * MC_ATC_TILE_FLOATS + 2 * HD;
    float *bm = wq + NG * G, *rm = bm + G, *rl = rm + MC_ATT_SPLIT * G, *ro = rl + MC_ATT_SPLIT * G;
    float *go = sm, *gm = sm + NG * G * HD, *gls = gm + NG * G; /* after the tiles: aliases them */
    const uint32_t r = blockIdx.x, g = blockIdx.y, tid = threadIdx.x;
    const uint32_t grp = tid / GL, gl = tid % GL, warp = tid >> 5;
    /* attention=heads (a.heads > 1 clusters a kv head): cluster g serves q heads g G .. g G + G - 1
     * of kv head g / a.heads, whose first cluster stores the new row; elsewhere a.heads is 0 and
     * kvg = g */
    const uint32_t hs = a.heads > 1 ? a.heads : 1u, kvg = g / hs;
    const bool store_row = g % hs == 0;
    float fr[DPL]; /* the lane's RoPE frequencies: read with *pos, one round trip */
    mc_atc_freqs<HD>(fr, a, gl);
    /* CH: row blockIdx.z of a chunk, at position *pos + row, whose k and v rows (every row's of
     * the chunk) attention_chunk_append has written: all of [w0, p] comes from the cache, none
     * from the block (no `skip`, no new row); everything else is the decode step's at p */
    const int32_t p = *pos + (CH ? (int32_t)blockIdx.z : 0); /* written by the commit of an earlier step */
    if (CH) {
        qkv += (size_t)blockIdx.z * ((a.n_head + 2 * a.n_kv) * HD);
        out += (size_t)blockIdx.z * (a.n_head * HD);
    }
    const uint32_t skip = CH ? 0xffffffffu : (uint32_t)p;
    const uint32_t npos = (uint32_t)p + 1, w0 = mc_att_window_start(a, npos);
    const uint32_t per = (npos - w0 + MC_ATT_SPLIT - 1) / MC_ATT_SPLIT;
    const uint32_t p0 = w0 + min(r * per, npos - w0), p1 = min(p0 + per, npos);
    const bool has_new = !CH && p0 <= (uint32_t)p && (uint32_t)p < p1;
    const KT *kb = k_cache + (size_t)kvg * a.capacity * HD, *vb = v_cache + (size_t)kvg * a.capacity * HD;
    const uint32_t n_tiles = (p1 - p0 + T - 1) / T;
    /* rows below *pos were written by earlier steps: stream the first two tiles before the wait */
    for (uint32_t j = 0; j < n_tiles && j < 2; j++) {
        const uint32_t t0 = p0 + j * T;
        mc_atc_load_tile<HD, KT>(kt + j * T * HD, vt + j * T * HD, kb, vb, t0, min(T, p1 - t0), skip);
    }
    mc_atc_cs<HD> cs;
    mc_atc_rope_prep<HD>(cs, fr, a, p);
    mc_wait_prior_grid(MC_ATT_FAMILY(a));
    float q[G][DPL];
    mc_atc_q_and_row<HD, G, KT>(q, a, qkv, g, kvg, cs, has_new && warp == 0, store_row, kn, vn, k_cache, v_cache, p);
    float m[G], l[G], o[G][DPL];
#pragma unroll
    for (uint32_t h = 0; h < G; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (uint32_t i = 0; i < DPL; i++)
            o[h][i] = 0.0f;
    }
    const float scale = a.scale > 0.0f ? a.scale : 1.0f / sqrtf((float)HD);
    for (uint32_t j = 0; j < n_tiles; j++) {
        const uint32_t t0 = p0 + j * T, nt = min(T, p1 - t0), b = j & 1;
        mc_cp_async_wait(j == 0 && n_tiles > 1 ? 1 : 0); /* tile j landed (tile j + 1 may be in flight) */
        __syncthreads(); /* for every thread; the new row too; tile j - 1's buffer is free */
        if (j >= 1 && j + 1 < n_tiles) {
            const uint32_t tn = p0 + (j + 1) * T;
            mc_atc_load_tile<HD, KT>(kt + ((j + 1) & 1) * T * HD, vt + ((j + 1) & 1) * T * HD, kb, vb, tn,
                                     min(T, p1 - tn), skip);
        }
        const KT *ks = kt + b * T * HD, *vs = vt + b * T * HD;
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
    __syncthreads(); /* the tiles are read: their space holds the group states now */
#pragma unroll
    for (uint32_t h = 0; h < G; h++) {
        mc_atc_store<HD>(go + (size_t)(grp * G + h) * HD, o[h], gl);
        if (gl == 0) {
            gm[grp * G + h] = m[h];
            gls[grp * G + h] = l[h];
        }
    }
    __syncthreads();
    if (tid < NG * G) { /* the groups' weights: w(k, h) = exp(m(k, h) - M(h)), M the block's max */
        const uint32_t h = tid % G;
        float M = -INFINITY;
#pragma unroll
        for (uint32_t k = 0; k < NG; k++)
            M = fmaxf(M, gm[k * G + h]);
        wq[tid] = M == -INFINITY ? 0.0f : expf(gm[tid] - M); /* an empty group (or block): 0 */
        if (tid < G)
            bm[h] = M;
    }
    __syncthreads();
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); /* every block has started */
    /* push the block state to the blocks that finish it: (m, l) of every head to every rank, and
     * output element e to rank e / PER_E */
    if (tid < G) { /* the block's l per head, groups in order */
        float L = 0.0f;
        for (uint32_t k = 0; k < NG; k++)
            L = fmaf(gls[k * G + tid], wq[k * G + tid], L);
        const float M = bm[tid];
#pragma unroll
        for (uint32_t s2 = 0; s2 < MC_ATT_SPLIT; s2++) {
            cluster.map_shared_rank(rm, s2)[r * G + tid] = M;
            cluster.map_shared_rank(rl, s2)[r * G + tid] = L;
        }
    }
    for (uint32_t e = tid; e < G * HD; e += blockDim.x) {
        const uint32_t h = e / HD, dst = e / PER_E;
        float O = 0.0f;
#pragma unroll
        for (uint32_t k = 0; k < NG; k++)
            O = fmaf(go[(size_t)(k * G + h) * HD + (e % HD)], wq[k * G + h], O);
        cluster.map_shared_rank(ro, dst)[r * PER_E + (e - dst * PER_E)] = O;
    }
    cluster.sync(); /* every push landed; no block reads another's shared memory after this */
    const uint32_t n_e = G * HD;
    for (uint32_t e = r * PER_E + tid; e < min(n_e, (r + 1) * PER_E); e += blockDim.x) {
        const uint32_t h = e / HD, le = e - r * PER_E;
        float mr[MC_ATT_SPLIT], lr[MC_ATT_SPLIT], orr[MC_ATT_SPLIT];
#pragma unroll
        for (uint32_t s2 = 0; s2 < MC_ATT_SPLIT; s2++) {
            mr[s2] = rm[s2 * G + h];
            lr[s2] = rl[s2 * G + h];
            orr[s2] = ro[s2 * PER_E + le];
        }
        float M = mr[0];
#pragma unroll
        for (uint32_t s2 = 1; s2 < MC_ATT_SPLIT; s2++)
            M = fmaxf(M, mr[s2]);
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (uint32_t s2 = 0; s2 < MC_ATT_SPLIT; s2++) {
            const float w = expf(mr[s2] - M); /* an empty block: m = -inf, weight 0 */
            L = fmaf(lr[s2], w, L);
            O = fmaf(orr[s2], w, O);
        }
        out[(size_t)(g * G + h) * HD + (e % HD)] = O * (1.0f / L);
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
        mc_atc_store<HD, KT>(k_cache + ((size_t)g * a.capacity + (size_t)p) * HD, kv[0], gl);
        mc_atc_store<HD, KT>(v_cache + ((size_t)g * a.capacity + (size_t)p) * HD, vv, gl);
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

template <uint32_t HD, uint32_t G, typename KT = float>
__global__ void __launch_bounds__(MC_ACR_THREADS, mc_acr_min_blocks(G, HD))
    attention_chunk_rows(const mc_rope_args a, const float *qkv, const KT *k_cache, const KT *v_cache, float *out,
                         const int32_t *pos) {
    static_assert(HD <= 128, "16-lane groups");
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
        float M = mr[0];
#pragma unroll
        for (uint32_t s2 = 1; s2 < S8; s2++)
            M = fmaxf(M, mr[s2]);
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (uint32_t s2 = 0; s2 < S8; s2++) {
            const float w = expf(mr[s2] - M);
            L = fmaf(lr[s2], w, L);
            O = fmaf(orr[s2], w, O);
        }
        out[(size_t)(g * G + h) * HD + (e % HD)] = O * (1.0f / L);
    }
}

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

/* (M, L, O) folded with the next span's (m, l, o): the running max becomes max(M, m) and both
 * sides are scaled to it. Every step an explicit rounding (nothing left to contraction), so
 * decode's merge and a chunk row's fold, which call it in the same order, agree bit for bit. */
__device__ __forceinline__ void mc_spl_fold(float &M, float &L, float &O, float m, float l, float o) {
    const float mn = fmaxf(M, m);
    const float a = expf(__fsub_rn(M, mn)), b = expf(__fsub_rn(m, mn));
    L = fmaf(l, b, __fmul_rn(L, a));
    O = fmaf(o, b, __fmul_rn(O, a));
    M = mn;
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

/* Whether attention_decode_cluster serves these shapes (and attention_split, up to hd 128). */
static int mc_atc_ok(uint32_t G, uint32_t hd, uint32_t hdv) {
    return hd == hdv && (hd == 32 || hd == 64 || hd == 128 || hd == 256) &&
           (G == 1 || G == 2 || G == 4 || G == 8 || (G == 3 && hd <= 128));
}

/* split takes the cluster kernel's shapes up to hd 128; elsewhere it is auto (the key's
 * description says so). */
int mc_attention_path(const mc_config *c, uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv) {
    if (c->attention == MC_ATT_UNFUSED || n_kv == 0 || n_head % n_kv || hd % 4 || hdv % 4 || hd < 2)
        return MC_ATT_PATH_UNFUSED;
    if (c->attention == MC_ATT_SPANS && hd <= 128 && mc_atc_ok(n_head / n_kv, hd, hdv))
        return MC_ATT_PATH_SPLIT;
    if ((c->attention == MC_ATT_AUTO || c->attention == MC_ATT_SPANS || c->attention == MC_ATT_HEADS ||
         c->attention == MC_ATT_CLUSTER) &&
        mc_atc_ok(n_head / n_kv, hd, hdv))
        return MC_ATT_PATH_CLUSTER;
    if (c->kv != MC_KV_F32 && (hd % 8 || hdv % 8)) /* the tiled kernel's 16-byte rows of 2-byte values */
        return MC_ATT_PATH_UNFUSED;
    const mc_att_layout L = mc_att_layout_of(n_head / n_kv, hd, hdv);
    return (uint64_t)L.total * 4 <= 200u * 1024u ? MC_ATT_PATH_TILED : MC_ATT_PATH_UNFUSED;
}

/* Per device: the dynamic shared memory the tiled kernels may use (48 KB until raised), and
 * whether every cluster instantiation may use the largest cluster need (set once, for all of
 * them: a record per size would miss an instantiation first launched with a need already
 * recorded). */
static size_t mc_att_smem_set[MC_MAX_DEVICES];
static int mc_atc_smem_ready[MC_MAX_DEVICES];

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
/* The instantiations by kv type: decode (MC_ATC_FN*) and chunk (MC_ATC_FN_CH*), f32, f16, bf16. */
#define MC_ATC_FN(HD, G) ((const void *)attention_decode_cluster<HD, G>)
#define MC_ATC_FN_CH(HD, G) ((const void *)attention_decode_cluster<HD, G, true>)
#define MC_ATC_FN_H(HD, G) ((const void *)attention_decode_cluster<HD, G, false, __half>)
#define MC_ATC_FN_CH_H(HD, G) ((const void *)attention_decode_cluster<HD, G, true, __half>)
#define MC_ATC_FN_B(HD, G) ((const void *)attention_decode_cluster<HD, G, false, __nv_bfloat16>)
#define MC_ATC_FN_CH_B(HD, G) ((const void *)attention_decode_cluster<HD, G, true, __nv_bfloat16>)
/* The decode (chunk) instantiation of these shapes for kv. */
#define MC_ATC_PICK(kv, hd, G)                                                                                         \
    ((kv) == MC_KV_F16    ? MC_ATC_DISPATCH(hd, G, MC_ATC_FN_H)                                                        \
     : (kv) == MC_KV_BF16 ? MC_ATC_DISPATCH(hd, G, MC_ATC_FN_B)                                                        \
                          : MC_ATC_DISPATCH(hd, G, MC_ATC_FN))
#define MC_ATC_PICK_CH(kv, hd, G)                                                                                      \
    ((kv) == MC_KV_F16    ? MC_ATC_DISPATCH(hd, G, MC_ATC_FN_CH_H)                                                     \
     : (kv) == MC_KV_BF16 ? MC_ATC_DISPATCH(hd, G, MC_ATC_FN_CH_B)                                                     \
                          : MC_ATC_DISPATCH(hd, G, MC_ATC_FN_CH))
/* Every cluster instantiation once (F(kernel)). */
// clang-format off
#define MC_ATC_EACH_OF128(F, FN) \
    F(FN(32, 1)) F(FN(32, 2)) F(FN(32, 3)) F(FN(32, 4)) F(FN(32, 8)) \
    F(FN(64, 1)) F(FN(64, 2)) F(FN(64, 3)) F(FN(64, 4)) F(FN(64, 8)) \
    F(FN(128, 1)) F(FN(128, 2)) F(FN(128, 3)) F(FN(128, 4)) F(FN(128, 8))
#define MC_ATC_EACH_OF(F, FN) MC_ATC_EACH_OF128(F, FN) \
    F(FN(256, 1)) F(FN(256, 2)) F(FN(256, 4)) F(FN(256, 8))
#define MC_ATC_EACH(F) \
    MC_ATC_EACH_OF(F, MC_ATC_FN) MC_ATC_EACH_OF(F, MC_ATC_FN_CH) \
    MC_ATC_EACH_OF(F, MC_ATC_FN_H) MC_ATC_EACH_OF(F, MC_ATC_FN_CH_H) \
    MC_ATC_EACH_OF(F, MC_ATC_FN_B) MC_ATC_EACH_OF(F, MC_ATC_FN_CH_B)
// clang-format on

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
static int mc_spl_smem_ready[MC_MAX_DEVICES];
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

/* The largest dynamic shared memory of any cluster instantiation. */
static size_t mc_atc_smem_max(void) {
    size_t m = 0;
    for (uint32_t hd = 32; hd <= 256; hd *= 2)
        for (uint32_t G = 1; G <= 8; G *= 2) {
            const size_t b = (size_t)mc_atc_smem_floats(G, hd) * 4;
            m = b > m ? b : m;
        }
    return m;
}

cudaError_t mc_attention_fused_prepare(const mc_config *c, uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    if (dev < 0 || dev >= MC_MAX_DEVICES)
        return cudaErrorInvalidDevice;
    const int path = mc_attention_path(c, n_head, n_kv, hd, hdv);
    if (path == MC_ATT_PATH_CLUSTER) {
        if (mc_atc_smem_ready[dev])
            return cudaSuccess;
        const int smax = (int)mc_atc_smem_max();
#define MC_ATC_SET(fn)                                                                                                 \
    if ((e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smax)) != cudaSuccess)              \
        return e;
        MC_ATC_EACH(MC_ATC_SET)
#undef MC_ATC_SET
        const int amax = (int)mc_acr_smem_max();
#define MC_ACR_SET(fn)                                                                                                 \
    if ((e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, amax)) != cudaSuccess)              \
        return e;
        MC_ACR_EACH(MC_ACR_SET)
#undef MC_ACR_SET
        mc_atc_smem_ready[dev] = 1;
        return cudaSuccess;
    }
    if (path == MC_ATT_PATH_SPLIT) {
        if (mc_spl_smem_ready[dev])
            return cudaSuccess;
        const int smax = (int)mc_spl_smem_max();
#define MC_SPL_SET(fn)                                                                                                 \
    if ((e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smax)) != cudaSuccess)              \
        return e;
        MC_SPL_EACH(MC_SPL_SET)
#undef MC_SPL_SET
        mc_spl_smem_ready[dev] = 1;
        return cudaSuccess;
    }
    if (path != MC_ATT_PATH_TILED)
        return cudaSuccess;
    const size_t smem = (size_t)mc_att_layout_of(n_head / n_kv, hd, hdv).total * 4;
    if (smem <= 48 * 1024 || smem <= mc_att_smem_set[dev])
        return cudaSuccess;
#define MC_ATT_SET(HD, KT)                                                                                             \
    if ((e = cudaFuncSetAttribute(attention_decode_cluster_tiled<HD, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize, \
                                  (int)smem)) != cudaSuccess)                                                          \
        return e;
    MC_ATT_SET(128, float) MC_ATT_SET(64, float) MC_ATT_SET(0, float);
    MC_ATT_SET(128, __half) MC_ATT_SET(64, __half) MC_ATT_SET(0, __half);
    MC_ATT_SET(128, __nv_bfloat16) MC_ATT_SET(64, __nv_bfloat16) MC_ATT_SET(0, __nv_bfloat16);
#undef MC_ATT_SET
    mc_att_smem_set[dev] = smem;
    return cudaSuccess;
}

template <uint32_t HD, typename KT>
static cudaError_t mc_att_tiled_launch(const mc_config *c, const mc_rope_args *a, const float *qkv, KT *k_cache,
                                       KT *v_cache, float *out, const int32_t *pos, cudaStream_t st) {
    const size_t smem = (size_t)mc_att_layout_of(a->n_head / a->n_kv, a->hd, a->hdv).total * 4;
    cudaError_t e = mc_attention_fused_prepare(c, a->n_head, a->n_kv, a->hd, a->hdv);
    if (e != cudaSuccess)
        return e;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(MC_ATT_SPLIT, a->n_kv);
    cfg.blockDim = dim3(MC_ATT_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[2];
    mc_launch_attrs_cluster(&cfg, attr, MC_ATT_SPLIT, c->pdl != 0);
    e = cudaLaunchKernelEx(&cfg, attention_decode_cluster_tiled<HD, KT>, *a, qkv, k_cache, v_cache, out, pos);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

/* The head size at which auto (and split, whose spans stop at 128) splits a kv head's q heads
 * over several clusters as attention=heads does. Measured on an H200 (bench/RESULTS.md, twelfth
 * session): gemma3-270m (hd 256, 4 q heads on 1 kv head) +6% a token; SmolLM2 (hd 64, 9 on 3)
 * -2.5%, llama-1b and 8B (hd 64 and 128, two heads a cluster on 8 kv heads) -4 to -6%: where a
 * head's chain is 256 long the split pays, elsewhere the extra clusters cost more than they save. */
#define MC_ATC_HEADS_HD 256u

/* Per device: its multiprocessors (attention=heads sizes its clusters by them). */
static int mc_atc_sms[MC_MAX_DEVICES];

/* The q heads a cluster serves under attention=heads: the fewest (of the instantiated counts
 * that divide G) whose clusters, MC_ATT_SPLIT blocks of one multiprocessor each, fit the device
 * at once; G (one cluster a kv head, as auto) when none does. */
static uint32_t mc_atc_heads_per_cluster(uint32_t n_kv, uint32_t G, uint32_t hd) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MC_MAX_DEVICES)
        return G;
    if (!mc_atc_sms[dev] &&
        cudaDeviceGetAttribute(&mc_atc_sms[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return G;
    for (uint32_t d = 1; d < G; d++)
        if (G % d == 0 && mc_atc_ok(d, hd, hd) && (uint64_t)n_kv * (G / d) * MC_ATT_SPLIT <= (uint64_t)mc_atc_sms[dev])
            return d;
    return G;
}

/* A cluster of MC_ATT_SPLIT blocks of 256 threads per kv head (attention=cluster; auto below head
 * size 256); under attention=heads (and auto at 256) one per Gc q heads of a kv head
 * (mc_atc_heads_per_cluster; the Gc instantiation, a.heads = G / Gc clusters a kv head): each
 * cluster does the operations of its heads alone, as the kv head's cluster does them for each of
 * its G heads (nothing is summed across heads), so the same bits. */
static cudaError_t mc_atc_launch(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache,
                                 void *v_cache, float *out, const int32_t *pos, cudaStream_t st) {
    const uint32_t Gh = a->n_head / a->n_kv;
    const bool split = c->attention == MC_ATT_HEADS ||
                       ((c->attention == MC_ATT_AUTO || c->attention == MC_ATT_SPANS) && a->hd == MC_ATC_HEADS_HD);
    const uint32_t G = split ? mc_atc_heads_per_cluster(a->n_kv, Gh, a->hd) : Gh;
    const bool heads = G < Gh;
    mc_rope_args ah = *a;
    ah.heads = heads ? Gh / G : 0u;
    a = &ah;
    const void *fn = MC_ATC_PICK(a->kv, a->hd, G);
    const size_t smem = (size_t)mc_atc_smem_floats(G, a->hd) * 4;
    cudaError_t e = mc_attention_fused_prepare(c, a->n_head, a->n_kv, a->hd, a->hdv);
    if (e != cudaSuccess)
        return e;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(MC_ATT_SPLIT, a->n_kv * (heads ? Gh / G : 1u));
    cfg.blockDim = dim3(32 * MC_ATC_WARPS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[2];
    mc_launch_attrs_cluster(&cfg, attr, MC_ATT_SPLIT, c->pdl != 0);
    void *args[] = {(void *)a, (void *)&qkv, (void *)&k_cache, (void *)&v_cache, (void *)&out, (void *)&pos};
    e = cudaLaunchKernelExC(&cfg, fn, args);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

/* attention_split's launch: decode (rows 0; a programmatic launch under c->pdl, the grid by the
 * state's capacity, its scratch from a) or a chunk's rows (rows = M; plain stream order, one
 * block per row and kv head). */
static cudaError_t mc_spl_launch(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache,
                                 void *v_cache, float *out, const int32_t *pos, uint32_t rows, cudaStream_t st) {
    const uint32_t G = a->n_head / a->n_kv;
    if (!rows && (!a->partial || !a->ticket))
        return cudaErrorInvalidValue;
    cudaError_t e = mc_attention_fused_prepare(c, a->n_head, a->n_kv, a->hd, a->hdv);
    if (e != cudaSuccess)
        return e;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = rows ? dim3(a->n_kv, 1, rows) : dim3(a->n_kv, mc_att_split_blocks(a->capacity), 1);
    cfg.blockDim = dim3(MC_SPL_THREADS);
    cfg.dynamicSmemBytes = (size_t)mc_spl_layout_of(G, a->hd, mc_kv_bytes(a->kv)).total * 4;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    if (!rows)
        mc_launch_attrs(&cfg, attr, 0, c);
    void *args[] = {(void *)a,    (void *)&qkv, (void *)&k_cache, (void *)&v_cache,
                    (void *)&out, (void *)&pos, (void *)&rows};
    e = cudaLaunchKernelExC(&cfg, MC_SPL_PICK(a->kv, a->hd, G), args);
    return e != cudaSuccess ? e : cudaGetLastError();
}

template <typename KT>
static cudaError_t mc_att_tiled_pick(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache,
                                     void *v_cache, float *out, const int32_t *pos, cudaStream_t st) {
    KT *kc = (KT *)k_cache, *vc = (KT *)v_cache;
    if (a->hd == 128)
        return mc_att_tiled_launch<128, KT>(c, a, qkv, kc, vc, out, pos, st);
    if (a->hd == 64)
        return mc_att_tiled_launch<64, KT>(c, a, qkv, kc, vc, out, pos, st);
    return mc_att_tiled_launch<0, KT>(c, a, qkv, kc, vc, out, pos, st);
}

/* The cache's storage is a->kv; c->kv (which chose the path) must agree. */
cudaError_t mc_attention_fused(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache,
                               void *v_cache, float *out, const int32_t *pos, cudaStream_t st) {
    const int path = mc_attention_path(c, a->n_head, a->n_kv, a->hd, a->hdv);
    if (a->kv != c->kv || a->kv > MC_KV_BF16)
        return cudaErrorInvalidValue;
    if (path == MC_ATT_PATH_CLUSTER)
        return mc_atc_launch(c, a, qkv, k_cache, v_cache, out, pos, st);
    if (path == MC_ATT_PATH_SPLIT)
        return mc_spl_launch(c, a, qkv, k_cache, v_cache, out, pos, 0, st);
    if (path != MC_ATT_PATH_TILED)
        return cudaErrorInvalidValue;
#define MC_ATT_TILED(KT) mc_att_tiled_pick<KT>(c, a, qkv, k_cache, v_cache, out, pos, st)
    return MC_KV_DISPATCH(a->kv, MC_ATT_TILED);
#undef MC_ATT_TILED
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
    else
        attention_chunk_append<256, KT><<<ag, 32, 0, st>>>(*a, qkv, kc, vc, pos);
}

/* rows: attention_chunk_rows where it serves the shapes (hd <= 128), else the cluster kernel's
 * chunk instantiation; cluster: the cluster kernel always (the same bits, the old launch, kept
 * for timing and for the device check). */
static cudaError_t mc_chunk_attention(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache,
                                      void *v_cache, float *out, const int32_t *pos, uint32_t M, int cluster,
                                      cudaStream_t st) {
    if (a->kv != c->kv || a->kv > MC_KV_BF16)
        return cudaErrorInvalidValue;
    const int path = mc_attention_path(c, a->n_head, a->n_kv, a->hd, a->hdv);
    if ((path != MC_ATT_PATH_CLUSTER && path != MC_ATT_PATH_SPLIT) || M == 0 || M > 65535)
        return cudaErrorNotSupported;
    const uint32_t G = a->n_head / a->n_kv;
    cudaError_t e = mc_attention_fused_prepare(c, a->n_head, a->n_kv, a->hd, a->hdv);
    if (e != cudaSuccess)
        return e;
    if (a->kv == MC_KV_F16)
        mc_chunk_append_launch<__half>(a, qkv, k_cache, v_cache, pos, M, st);
    else if (a->kv == MC_KV_BF16)
        mc_chunk_append_launch<__nv_bfloat16>(a, qkv, k_cache, v_cache, pos, M, st);
    else
        mc_chunk_append_launch<float>(a, qkv, k_cache, v_cache, pos, M, st);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    if (path == MC_ATT_PATH_SPLIT)
        return mc_spl_launch(c, a, qkv, k_cache, v_cache, out, pos, M, st);
    void *args[] = {(void *)a, (void *)&qkv, (void *)&k_cache, (void *)&v_cache, (void *)&out, (void *)&pos};
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.stream = st;
    if (!cluster && a->hd <= 128) {
        cfg.gridDim = dim3(a->n_kv, M);
        cfg.blockDim = dim3(MC_ACR_THREADS);
        cfg.dynamicSmemBytes = (size_t)mc_acr_smem_floats(G, a->hd, mc_kv_bytes(a->kv)) * 4;
        e = cudaLaunchKernelExC(&cfg, MC_ACR_PICK(a->kv, a->hd, G), args);
        return e != cudaSuccess ? e : cudaGetLastError();
    }
    const void *fn = MC_ATC_PICK_CH(a->kv, a->hd, G);
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

cudaError_t mc_attention_trigger_addr(void **p) { return cudaGetSymbolAddress(p, mc_trigger_mask); }

const char *mc_attention_family(const void *f) {
    static const struct {
        const void *func;
        const char *family;
    } table[] = {
#define MC_ATT_ROWS(KT)                                                                                                \
    {(const void *)attention_decode_cluster_tiled<128, KT>, "attention"},                                              \
        {(const void *)attention_decode_cluster_tiled<64, KT>, "attention"},                                           \
        {(const void *)attention_decode_cluster_tiled<0, KT>, "attention"},                                            \
        {(const void *)attention_chunk_append<32, KT>, "attention"},                                                   \
        {(const void *)attention_chunk_append<64, KT>, "attention"},                                                   \
        {(const void *)attention_chunk_append<128, KT>, "attention"},                                                  \
        {(const void *)attention_chunk_append<256, KT>, "attention"},
        MC_ATT_ROWS(float) MC_ATT_ROWS(__half) MC_ATT_ROWS(__nv_bfloat16)
#undef MC_ATT_ROWS
#define MC_ATC_ROW(fn) {fn, "attention"},
            MC_ATC_EACH(MC_ATC_ROW) MC_SPL_EACH(MC_ATC_ROW) MC_ACR_EACH(MC_ATC_ROW)
#undef MC_ATC_ROW
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].func == f)
            return table[i].family;
    return NULL;
}
