/* attention_unfused.cu: the unfused path of decode attention (any shape; three launches per
 * layer): rope_kv_append (q/k norm, RoPE, KV append of the new row), then attention_decode_chunk
 * (per kv head and chunk of 32 positions) and attention_decode_combine (the chunks merged in index
 * order), with their launches and the block sum they use. mc_attention_path (attention.cu) picks
 * this path where the fused ones do not serve the shapes or the arm asks for it. None of these
 * kernels waits on the prior grid, so this file's copy of the trigger mask is never read. */
#include "cuda_common.cuh"

/* Block sum with a fixed shape: warp trees, then warp 0 adds the warp sums in index order.
 * Every thread gets the result. `red` holds 33 floats. */
__device__ float mc_block_sum(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = mc_warp_sum(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < nw; w++)
            s += red[w];
        red[32] = s;
    }
    __syncthreads();
    float r = red[32];
    __syncthreads();
    return r;
}

/* ---- the unfused path: rope_kv_append, attention_decode_chunk, attention_decode_combine ---- */

/* One block per head (q heads, then kv heads). Per layer and token: reads qkv (one token),
 * freqs, norms, *pos; writes q in place and one row of k and v into this layer's cache at *pos
 * (KT: the cache's storage, each value rounded to it as it is written; float: as always). */
template <typename KT = float>
__global__ void rope_kv_append(const mc_rope_args a, float *qkv, KT *k_cache, KT *v_cache, const int32_t *pos) {
    extern __shared__ float vec[]; /* hd floats */
    __shared__ float red[33];
    const int32_t p = *pos;
    const uint32_t h = blockIdx.x;
    const bool is_q = h < a.n_head;
    const uint32_t kvh = is_q ? 0 : h - a.n_head;
    float *src = is_q ? qkv + (size_t)h * a.hd : qkv + (size_t)a.n_head * a.hd + (size_t)kvh * a.hd;
    const float *norm = is_q ? a.q_norm : a.k_norm;

    for (uint32_t i = threadIdx.x; i < a.hd; i += blockDim.x)
        vec[i] = src[i];
    __syncthreads();
    if (norm) {
        float ss = 0.0f;
        for (uint32_t i = threadIdx.x; i < a.hd; i += blockDim.x)
            ss = fmaf(vec[i], vec[i], ss);
        ss = mc_block_sum(ss, red);
        float scale = 1.0f / sqrtf(ss / (float)a.hd + a.eps);
        for (uint32_t i = threadIdx.x; i < a.hd; i += blockDim.x)
            vec[i] = vec[i] * scale * norm[i];
        __syncthreads();
    }
    if constexpr (mc_kv_is_f32<KT>) {
        float *dst = is_q ? src : k_cache + ((size_t)kvh * a.capacity + (size_t)p) * a.hd;
        const uint32_t half_dim = a.hd / 2;
        const float fpos = (float)p * a.pos_scale;
        for (uint32_t i = threadIdx.x; i < half_dim; i += blockDim.x) {
            uint32_t i0 = a.neox ? i : 2 * i, i1 = a.neox ? i + half_dim : 2 * i + 1;
            float s, c;
            sincosf(fpos * a.freqs[i], &s, &c);
            float x0 = vec[i0], x1 = vec[i1];
            dst[i0] = x0 * c - x1 * s;
            dst[i1] = x0 * s + x1 * c;
        }
    } else { /* the same formulas; k's values rounded to the storage as they are written */
        KT *kd = k_cache + ((size_t)kvh * a.capacity + (size_t)p) * a.hd;
        const uint32_t half_dim = a.hd / 2;
        const float fpos = (float)p * a.pos_scale;
        for (uint32_t i = threadIdx.x; i < half_dim; i += blockDim.x) {
            uint32_t i0 = a.neox ? i : 2 * i, i1 = a.neox ? i + half_dim : 2 * i + 1;
            float s, c;
            sincosf(fpos * a.freqs[i], &s, &c);
            float x0 = vec[i0], x1 = vec[i1];
            const float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
            if (is_q) {
                src[i0] = y0;
                src[i1] = y1;
            } else {
                kd[i0] = mc_kv_put<KT>(y0);
                kd[i1] = mc_kv_put<KT>(y1);
            }
        }
    }
    if (!is_q) {
        const float *v = qkv + (size_t)(a.n_head + a.n_kv) * a.hd + (size_t)kvh * a.hdv;
        KT *vd = v_cache + ((size_t)kvh * a.capacity + (size_t)p) * a.hdv;
        for (uint32_t i = threadIdx.x; i < a.hdv; i += blockDim.x)
            vd[i] = mc_kv_put<KT>(v[i]);
    }
}

cudaError_t mc_rope_kv(const mc_rope_args *a, float *qkv, void *k_cache, void *v_cache, const int32_t *pos,
                       cudaStream_t st) {
    const dim3 grid(a->n_head + a->n_kv);
    const size_t smem = a->hd * sizeof(float);
    if (a->kv == MC_KV_F16)
        rope_kv_append<__half><<<grid, 128, smem, st>>>(*a, qkv, (__half *)k_cache, (__half *)v_cache, pos);
    else if (a->kv == MC_KV_BF16)
        rope_kv_append<__nv_bfloat16>
            <<<grid, 128, smem, st>>>(*a, qkv, (__nv_bfloat16 *)k_cache, (__nv_bfloat16 *)v_cache, pos);
    else if (a->kv == MC_KV_F32)
        rope_kv_append<float><<<grid, 128, smem, st>>>(*a, qkv, (float *)k_cache, (float *)v_cache, pos);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

uint32_t mc_att_max_chunks(uint32_t capacity) { return (capacity + MC_ATT_CHUNK - 1) / MC_ATT_CHUNK; }

uint64_t mc_att_partial_floats(uint32_t n_head, uint32_t hdv, uint32_t capacity) {
    return (uint64_t)n_head * mc_att_max_chunks(capacity) * (hdv + 2);
}

/* Block (kv head g, chunk c) over positions [32c, min(32c+32, *pos+1)) from the window's start
 * w0 on (w0 = max(0, *pos + 1 - window) with a window, else 0), for the G = n_head/n_kv q heads
 * that share kv head g, so each K and V row is read once per chunk. Chunks wholly before w0 do
 * nothing (the combine starts at w0's chunk). Reads the G q vectors and that range of k and v;
 * writes per q head the partial (max, sum, out[hdv]) (per layer and token: the K and V rows
 * [w0, *pos], the partials of their chunks).
 * Scores: one thread per (q head, position), the dot in dimension order; softmax sums in
 * position order; out: one thread per dimension, positions in order. */
template <uint32_t HD, typename KT = float> /* HD: head_dim when 64 or 128 (loops unrolled), 0: given at run time;
                                              * KT: the cache's storage, read back exactly */
__global__ void __launch_bounds__(128)
    attention_decode_chunk(const float *q, const KT *k_cache, const KT *v_cache, float *partial, uint32_t n_head,
                           uint32_t n_kv, uint32_t hd_rt, uint32_t hdv, uint32_t capacity, uint32_t max_chunks,
                           const int32_t *pos, uint32_t window, float scale_arg) {
    const uint32_t hd = HD ? HD : hd_rt;
    extern __shared__ float sm[]; /* q[G][hd], p[G][MC_ATT_CHUNK], m[G], l[G] */
    const uint32_t G = n_head / n_kv;
    float *qs = sm, *ps = sm + G * hd, *ms = ps + G * MC_ATT_CHUNK;
    const uint32_t npos = (uint32_t)*pos + 1, w0 = window && npos > window ? npos - window : 0;
    const uint32_t g = blockIdx.x, c = blockIdx.y, t0 = c * MC_ATT_CHUNK;
    if (t0 >= npos || t0 + MC_ATT_CHUNK <= w0)
        return;
    const uint32_t nt = min(t0 + MC_ATT_CHUNK, npos) - t0, ts = w0 > t0 ? w0 - t0 : 0; /* valid: [ts, nt) */
    const KT *kb = k_cache + ((size_t)g * capacity + t0) * hd;
    const KT *vb = v_cache + ((size_t)g * capacity + t0) * hdv;
    const float scale = scale_arg > 0.0f ? scale_arg : 1.0f / sqrtf((float)hd);
    for (uint32_t i = threadIdx.x; i < G * hd; i += blockDim.x)
        qs[i] = q[(size_t)g * G * hd + i];
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < G * MC_ATT_CHUNK; i += blockDim.x) {
        const uint32_t hq = i / MC_ATT_CHUNK, t = i % MC_ATT_CHUNK;
        float acc = -INFINITY;
        if (t >= ts && t < nt) {
            const KT *k = kb + (size_t)t * hd;
            const float *qq = qs + (size_t)hq * hd;
            acc = 0.0f;
            if ((hd & 3) == 0) {
#pragma unroll 16
                for (uint32_t d = 0; d < hd; d += 4) {
                    float4 kv = mc_kv_load4(k + d);
                    acc = fmaf(qq[d], kv.x, acc);
                    acc = fmaf(qq[d + 1], kv.y, acc);
                    acc = fmaf(qq[d + 2], kv.z, acc);
                    acc = fmaf(qq[d + 3], kv.w, acc);
                }
            } else {
                for (uint32_t d = 0; d < hd; d++)
                    acc = fmaf(qq[d], mc_kv_get(k[d]), acc);
            }
            acc *= scale;
        }
        ps[i] = acc;
    }
    __syncthreads();
    if (threadIdx.x < G) {
        const float *p = ps + threadIdx.x * MC_ATT_CHUNK;
        float m = p[ts];
        for (uint32_t t = ts + 1; t < nt; t++)
            m = fmaxf(m, p[t]);
        ms[threadIdx.x] = m;
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < G * MC_ATT_CHUNK; i += blockDim.x)
        ps[i] = i % MC_ATT_CHUNK < nt && i % MC_ATT_CHUNK >= ts ? expf(ps[i] - ms[i / MC_ATT_CHUNK]) : 0.0f;
    __syncthreads();
    if (threadIdx.x < G) {
        const float *p = ps + threadIdx.x * MC_ATT_CHUNK;
        float l = 0.0f;
        for (uint32_t t = ts; t < nt; t++)
            l += p[t];
        float *out = partial + ((size_t)(g * G + threadIdx.x) * max_chunks + c) * (hdv + 2);
        out[0] = ms[threadIdx.x];
        out[1] = l;
    }
    for (uint32_t i = threadIdx.x; i < G * hdv; i += blockDim.x) {
        const uint32_t hq = i / hdv, d = i % hdv;
        const float *p = ps + hq * MC_ATT_CHUNK;
        float o = 0.0f;
#pragma unroll 8
        for (uint32_t t = ts; t < nt; t++)
            o = fmaf(p[t], mc_kv_get(vb[(size_t)t * hdv + d]), o);
        partial[((size_t)(g * G + hq) * max_chunks + c) * (hdv + 2) + 2 + d] = o;
    }
}

/* One block per q head: merges the chunks in index order, from the window start's chunk. The
 * chunk maxima and sums are first loaded in parallel into shared memory (a serial loop over
 * global loads would pay one memory latency per chunk). Reads the partials; writes out[hdv]. */
__global__ void __launch_bounds__(128)
    attention_decode_combine(const float *partial, float *out, uint32_t hdv, uint32_t max_chunks, const int32_t *pos,
                             uint32_t window) {
    extern __shared__ float cs[]; /* m[max_chunks], l[max_chunks], w[max_chunks], [3*max_chunks] = 1/L */
    float *ms = cs, *ls = cs + max_chunks, *wts = cs + 2 * max_chunks;
    const uint32_t npos = (uint32_t)*pos + 1, w0 = window && npos > window ? npos - window : 0;
    const uint32_t nc = (npos + MC_ATT_CHUNK - 1) / MC_ATT_CHUNK, c0 = w0 / MC_ATT_CHUNK;
    const float *ph = partial + (size_t)blockIdx.x * max_chunks * (hdv + 2);
    for (uint32_t c = c0 + threadIdx.x; c < nc; c += blockDim.x) {
        ms[c] = ph[(size_t)c * (hdv + 2)];
        ls[c] = ph[(size_t)c * (hdv + 2) + 1];
    }
    __syncthreads();
    float m = ms[c0];
    for (uint32_t c = c0 + 1; c < nc; c++)
        m = fmaxf(m, ms[c]);
    for (uint32_t c = c0 + threadIdx.x; c < nc; c += blockDim.x)
        wts[c] = expf(ms[c] - m);
    __syncthreads();
    if (threadIdx.x == 0) {
        float l = 0.0f;
        for (uint32_t c = c0; c < nc; c++)
            l = fmaf(ls[c], wts[c], l);
        cs[3 * max_chunks] = 1.0f / l;
    }
    __syncthreads();
    const float inv = cs[3 * max_chunks];
    for (uint32_t d = threadIdx.x; d < hdv; d += blockDim.x) {
        float o = 0.0f;
#pragma unroll 8
        for (uint32_t c = c0; c < nc; c++)
            o = fmaf(ph[(size_t)c * (hdv + 2) + 2 + d], wts[c], o);
        out[(size_t)blockIdx.x * hdv + d] = o * inv;
    }
}

template <typename KT>
static void mc_attention_chunk_launch(const float *q, const void *k_cache, const void *v_cache, float *partial,
                                      uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv, uint32_t capacity,
                                      const int32_t *pos, uint32_t window, float scale, cudaStream_t st) {
    const uint32_t mc = mc_att_max_chunks(capacity), G = n_head / n_kv;
    const size_t smem = ((size_t)G * hd + (size_t)G * MC_ATT_CHUNK + G) * sizeof(float);
    const KT *kc = (const KT *)k_cache, *vc = (const KT *)v_cache;
    dim3 grid(n_kv, mc);
    if (hd == 128)
        attention_decode_chunk<128, KT>
            <<<grid, 128, smem, st>>>(q, kc, vc, partial, n_head, n_kv, hd, hdv, capacity, mc, pos, window, scale);
    else if (hd == 64)
        attention_decode_chunk<64, KT>
            <<<grid, 128, smem, st>>>(q, kc, vc, partial, n_head, n_kv, hd, hdv, capacity, mc, pos, window, scale);
    else
        attention_decode_chunk<0, KT>
            <<<grid, 128, smem, st>>>(q, kc, vc, partial, n_head, n_kv, hd, hdv, capacity, mc, pos, window, scale);
}

cudaError_t mc_attention(const float *q, const void *k_cache, const void *v_cache, float *partial, float *out,
                         uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv, uint32_t capacity,
                         const int32_t *pos, uint32_t window, float scale, uint32_t kv, cudaStream_t st) {
    const uint32_t mc = mc_att_max_chunks(capacity);
    if (kv == MC_KV_F16)
        mc_attention_chunk_launch<__half>(q, k_cache, v_cache, partial, n_head, n_kv, hd, hdv, capacity, pos, window,
                                          scale, st);
    else if (kv == MC_KV_BF16)
        mc_attention_chunk_launch<__nv_bfloat16>(q, k_cache, v_cache, partial, n_head, n_kv, hd, hdv, capacity, pos,
                                                 window, scale, st);
    else if (kv == MC_KV_F32)
        mc_attention_chunk_launch<float>(q, k_cache, v_cache, partial, n_head, n_kv, hd, hdv, capacity, pos, window,
                                         scale, st);
    else
        return cudaErrorInvalidValue;
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    attention_decode_combine<<<n_head, 128, (3 * mc + 1) * sizeof(float), st>>>(partial, out, hdv, mc, pos, window);
    return cudaGetLastError();
}

const char *mc_attention_unfused_family(const void *f) {
    static const mc_family_row table[] = {
#define MC_UNF_ROWS(KT)                                                                                                \
    {(const void *)rope_kv_append<KT>, "rope_kv"}, {(const void *)attention_decode_chunk<128, KT>, "attention"},       \
        {(const void *)attention_decode_chunk<64, KT>, "attention"},                                                   \
        {(const void *)attention_decode_chunk<0, KT>, "attention"},
        MC_UNF_ROWS(float) MC_UNF_ROWS(__half) MC_UNF_ROWS(__nv_bfloat16)
#undef MC_UNF_ROWS
            {(const void *)attention_decode_combine, "attention"}};
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
