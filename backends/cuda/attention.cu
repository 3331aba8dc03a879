/* attention.cu: decode attention of one token over a layer's KV cache, with the q/k norm (qwen3),
 * RoPE and the KV append of the new row, in four paths (mc_attention_path picks one from the
 * shapes and the arm's attention key): attention_decode_cluster (one launch per layer: a cluster
 * of 8 blocks per kv head, 16-lane groups own positions, the merge pushed through distributed
 * shared memory), attention_decode_cluster_tiled (one launch: threads own positions in tiles,
 * for the shapes the first does not serve), attention_split (attention=split, one launch: fixed
 * spans of MC_ATT_SPAN positions spread over many blocks, the last block of a kv head folding
 * them in span order: flash-decoding) and the unfused pair rope_kv_append +
 * attention_decode_chunk / attention_decode_combine (three launches, any shape). Every output
 * element has one fixed formula in each path; the paths differ from each other in bits.
 * Measurements: bench/gpu/NOTES.md. This file holds the tiled and cluster kernel families (the
 * cluster kernel's chunk instantiation too), their launches and the choice of path;
 * attention_split.cu holds attention_split and its launch, attention_chunk.cu a prefill chunk's
 * rows (mc_attention_chunk), attention_common.cuh what the three share; attention_unfused.cu holds
 * the unfused path. */
#include <cooperative_groups.h>

#include "attention_common.cuh"

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
#define MC_ATT_TILE 32u
#define MC_ATT_THREADS 128u

namespace cg = cooperative_groups;

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
 * finishes that element (element e: rank e / per_e); once they have landed (the decode step: st.async
 * stores counted by the receiver's mbarrier; a prefill chunk: one cluster barrier) every block merges
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

/* The merge's pushes by st.async (attention_decode_cluster's decode step, SA below): a 4-byte
 * store into rank `rank`'s copy of the shared variable at p, counted in bytes by that rank's
 * mbarrier (the copy of bar there). The receiver waits for its bytes on its own
 * mbarrier (mc_atc_pushes_wait), so no cluster barrier with its release of every block's writes
 * ends the kernel: each block waits only for what it receives, and leaves after it has it. */
__device__ __forceinline__ void mc_atc_push(float *p, uint32_t rank, float v, uint64_t *bar) {
    uint32_t ra, rb;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(ra)
                 : "r"((uint32_t)__cvta_generic_to_shared(p)), "r"(rank));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(rb)
                 : "r"((uint32_t)__cvta_generic_to_shared(bar)), "r"(rank));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(ra),
                 "r"(__float_as_uint(v)), "r"(rb)
                 : "memory");
}
__device__ __forceinline__ void mc_atc_pushes_wait(uint64_t *bar) {
    const uint32_t b = (uint32_t)__cvta_generic_to_shared(bar);
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(b)
                     : "memory");
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
    /* SA: the decode step's merge pushes by st.async, counted by each receiver's mbarrier
     * (mc_atc_push); the prefill chunk's (CH) by plain stores into the other blocks' shared memory
     * and a cluster barrier. The same values in the same places either way: the same bits. */
    constexpr bool SA = !CH;
    static_assert(!SA || (G * HD) % MC_ATT_SPLIT == 0, "SA: every rank receives PER_E elements a block");
    cg::cluster_group cluster = cg::this_cluster();
    extern __shared__ __align__(16) float sm[];
    KT *kt = (KT *)sm, *vt = (KT *)(sm + 2 * MC_ATC_TILE_FLOATS);
    KT *kn = (KT *)(sm + 4 * MC_ATC_TILE_FLOATS), *vn = (KT *)(sm + 4 * MC_ATC_TILE_FLOATS + HD);
    float *wq = sm + 4 * MC_ATC_TILE_FLOATS + 2 * HD;
    float *bm = wq + NG * G, *rm = bm + G, *rl = rm + MC_ATT_SPLIT * G, *ro = rl + MC_ATT_SPLIT * G;
    float *go = sm, *gm = sm + NG * G * HD, *gls = gm + NG * G; /* after the tiles: aliases them */
    /* SA's mbarrier, 8-byte aligned after ro (mc_atc_smem_floats leaves room for it) */
    uint64_t *sab = (uint64_t *)(((uintptr_t)(ro + MC_ATT_SPLIT * PER_E) + 7u) & ~(uintptr_t)7u);
    if (SA && threadIdx.x == 0) { /* one arrival (this one, now) and the bytes every rank pushes here */
        const uint32_t b = (uint32_t)__cvta_generic_to_shared(sab);
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b),
                     "r"(MC_ATT_SPLIT * (2 * G + PER_E) * 4u)
                     : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    /* every block of the cluster has started (and SA's mbarrier is set) before any writes to
     * another's shared memory: an arrive now, its wait before the first push */
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
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
        if constexpr (G == 1 && HD == 256) {
            /* one head a group at hd 256 (attention=heads and auto's clusters of one q head): two
             * iterations of the other branch's loop at a time, the four positions' scores (each the
             * same dot and tree) computed before the first pair's update, so that the four chains
             * of shuffles overlap; then each pair's update as there (mc_atc_update), in the same
             * order: the same bits */
            for (uint32_t base = warp; base < nt; base += 4 * NG) {
                float kx[4][DPL], vx[4][DPL], sc[4];
                bool ok[4];
#pragma unroll
                for (uint32_t u = 0; u < 4; u++) {
                    const uint32_t t = base + u * NG;
                    ok[u] = t < nt;
                    mc_atc_load<HD>(kx[u], t0 + t == skip ? kn : ks + (ok[u] ? t : 0) * HD, gl);
                    mc_atc_load<HD>(vx[u], t0 + t == skip ? vn : vs + (ok[u] ? t : 0) * HD, gl);
                }
#pragma unroll
                for (uint32_t u = 0; u < 4; u++) {
                    float x = 0.0f;
#pragma unroll
                    for (uint32_t i = 0; i < DPL; i++)
                        x = fmaf(q[0][i], kx[u][i], x);
                    sc[u] = x;
                }
#pragma unroll
                for (int off = GL / 2; off > 0; off >>= 1)
#pragma unroll
                    for (uint32_t u = 0; u < 4; u++)
                        sc[u] += __shfl_xor_sync(MC_FULL, sc[u], off);
#pragma unroll
                for (uint32_t pr = 0; pr < 2; pr++) {
                    const uint32_t ua = 2 * pr, ub = ua + 1;
                    if (!ok[ua]) /* that loop has no iteration at base + 2 NG pr */
                        break;
                    mc_atc_update<DPL>(m[0], l[0], o[0], sc[ua], sc[ub], ok[ub], scale, vx[ua], vx[ub]);
                }
            }
        } else {
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
                    for (uint32_t h = 0; h < G; h++)
                        mc_atc_update<DPL>(m[h], l[h], o[h], sa[h], sb[h], vbl, scale, vxa, vxb);
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
            if constexpr (SA) {
                mc_atc_push(rm + r * G + tid, s2, M, sab);
                mc_atc_push(rl + r * G + tid, s2, L, sab);
            } else {
                cluster.map_shared_rank(rm, s2)[r * G + tid] = M;
                cluster.map_shared_rank(rl, s2)[r * G + tid] = L;
            }
        }
    }
    for (uint32_t e = tid; e < G * HD; e += blockDim.x) {
        const uint32_t h = e / HD, dst = e / PER_E;
        float O = 0.0f;
#pragma unroll
        for (uint32_t k = 0; k < NG; k++)
            O = fmaf(go[(size_t)(k * G + h) * HD + (e % HD)], wq[k * G + h], O);
        if constexpr (SA)
            mc_atc_push(ro + r * PER_E + (e - dst * PER_E), dst, O, sab);
        else
            cluster.map_shared_rank(ro, dst)[r * PER_E + (e - dst * PER_E)] = O;
    }
    if constexpr (SA)
        mc_atc_pushes_wait(sab); /* this block's bytes landed (the others' may still be in flight) */
    else
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

/* ---- launch ------------------------------------------------------------------------------- */

/* Whether attention_decode_cluster serves these shapes (and attention_split, up to hd 128). */
static int mc_atc_ok(uint32_t G, uint32_t hd, uint32_t hdv) {
    return hd == hdv && (hd == 32 || hd == 64 || hd == 128 || hd == 256) &&
           (G == 1 || G == 2 || G == 4 || G == 8 || (G == 3 && hd <= 128));
}

int mc_attention_mma_serves(uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv) {
    return n_kv > 0 && n_head % n_kv == 0 && mc_amm_ok(n_head / n_kv, hd, hdv);
}

/* split takes the cluster kernel's shapes up to hd 128; elsewhere it is auto (the key's
 * description says so). */
int mc_attention_path(const mc_config *c, uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv) {
    if (c->attention == MC_ATT_UNFUSED || n_kv == 0 || n_head % n_kv || hd % 4 || hdv % 4 || hd < 2)
        return MC_ATT_PATH_UNFUSED;
    if (c->attention == MC_ATT_SPANS && hd <= 128 && mc_atc_ok(n_head / n_kv, hd, hdv))
        return MC_ATT_PATH_SPLIT;
    if (c->attention == MC_ATT_MMA) /* refused by the arm where it does not serve */
        return mc_amm_ok(n_head / n_kv, hd, hdv) ? MC_ATT_PATH_MMA : MC_ATT_PATH_UNFUSED;
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
#define MC_ATC_EACH(F) \
    MC_ATC_EACH_OF(F, MC_ATC_FN) MC_ATC_EACH_OF(F, MC_ATC_FN_CH) \
    MC_ATC_EACH_OF(F, MC_ATC_FN_H) MC_ATC_EACH_OF(F, MC_ATC_FN_CH_H) \
    MC_ATC_EACH_OF(F, MC_ATC_FN_B) MC_ATC_EACH_OF(F, MC_ATC_FN_CH_B)
// clang-format on

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
        if ((e = mc_acr_prepare()) != cudaSuccess) /* attention_chunk_rows's (attention_chunk.cu) */
            return e;
        mc_atc_smem_ready[dev] = 1;
        return cudaSuccess;
    }
    if (path == MC_ATT_PATH_SPLIT)
        return mc_spl_prepare(dev); /* attention_split.cu */
    if (path == MC_ATT_PATH_MMA)
        return mc_amm_prepare(dev); /* attention_mma.cu */
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
    if (a->kv != c->kv || a->kv > MC_KV_Q8 || (a->kv == MC_KV_Q8 && path != MC_ATT_PATH_MMA))
        return cudaErrorInvalidValue; /* q8: attention=mma alone reads it (the arm refuses the rest) */
    if (path == MC_ATT_PATH_CLUSTER)
        return mc_atc_launch(c, a, qkv, k_cache, v_cache, out, pos, st);
    if (path == MC_ATT_PATH_SPLIT)
        return mc_spl_launch(c, a, qkv, k_cache, v_cache, out, pos, 0, st);
    if (path == MC_ATT_PATH_MMA)
        return mc_amm_launch(c, a, qkv, k_cache, v_cache, out, pos, 0, st);
    if (path != MC_ATT_PATH_TILED)
        return cudaErrorInvalidValue;
#define MC_ATT_TILED(KT) mc_att_tiled_pick<KT>(c, a, qkv, k_cache, v_cache, out, pos, st)
    return MC_KV_DISPATCH(a->kv, MC_ATT_TILED);
#undef MC_ATT_TILED
}

/* The cluster kernel's chunk instantiation of these shapes for kv: attention_chunk.cu's launch
 * (mc_attention_chunk_cluster, and mc_attention_chunk at hd 256). */
const void *mc_atc_chunk_kernel(uint32_t kv, uint32_t hd, uint32_t G) { return MC_ATC_PICK_CH(kv, hd, G); }

cudaError_t mc_attention_trigger_addr(void **p) { return cudaGetSymbolAddress(p, mc_trigger_mask); }

const char *mc_attention_family(const void *f) {
    static const mc_family_row table[] = {
#define MC_ATT_ROWS(KT)                                                                                                \
    {(const void *)attention_decode_cluster_tiled<128, KT>, "attention"},                                              \
        {(const void *)attention_decode_cluster_tiled<64, KT>, "attention"},                                           \
        {(const void *)attention_decode_cluster_tiled<0, KT>, "attention"},
        MC_ATT_ROWS(float) MC_ATT_ROWS(__half) MC_ATT_ROWS(__nv_bfloat16)
#undef MC_ATT_ROWS
#define MC_ATC_ROW(fn) {fn, "attention"},
            MC_ATC_EACH(MC_ATC_ROW)
#undef MC_ATC_ROW
    };
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
