/* sampler.cu: the device sampler (the algorithm of memra/sampling.h, bit for bit): an
 * argmax pass (greedy ends there), then for temperature sampling the sort keys and a bitonic sort
 * (when top-k or top-p cut), the chunked cumulative sums and the pick by the position-keyed draw.
 * The step numbers in the comments are those of memra/sampling.h. */
#include "argmax_tail.cuh"
#include "cuda_common.cuh"
#include "embed_elem.cuh"

#define MC_MAX_PARTS 128u
#define MC_MAX_THREADS 256u

#define MC_CHUNK 256u
static_assert(MC_MAX_PARTS <= MC_AM_PARTS_CAP, "the scratch holds every part of the argmax pass");

static uint32_t mc_pow2(uint32_t n) {
    uint32_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

static uint64_t mc_align256(uint64_t n) { return (n + 255) & ~(uint64_t)255; }

uint64_t mc_sampler_scratch_bytes(uint32_t n_vocab) {
    uint64_t n_chunks = n_vocab / MC_CHUNK + 1;
    return mc_align256((uint64_t)mc_pow2(n_vocab) * 8) + mc_align256((uint64_t)n_vocab * 4) +
           mc_align256((n_chunks + 1) * 4) + mc_align256(16) + mc_align256(MC_AM_PARTS_CAP * 12) + mc_align256(4);
}

void mc_sampler_scratch_init(mc_sampler_scratch *s, void *base, uint32_t n_vocab) {
    char *p = (char *)base;
    uint64_t n_chunks = n_vocab / MC_CHUNK + 1;
    s->n_vocab = n_vocab;
    s->n_pow2 = mc_pow2(n_vocab);
    s->keys = (unsigned long long *)p;
    p += mc_align256((uint64_t)s->n_pow2 * 8);
    s->partial = (float *)p;
    p += mc_align256((uint64_t)n_vocab * 4);
    s->chunk_sums = (float *)p;
    p += mc_align256((n_chunks + 1) * 4);
    s->stats = (float *)p;
    p += mc_align256(16);
    s->parts = (uint32_t *)p;
    p += mc_align256(MC_AM_PARTS_CAP * 12);
    s->ticket = (uint32_t *)p;
}

/* sample_argmax: steps 0, 1 and 3 in one launch (per token: reads the logits once). Block b scans a contiguous segment (each thread strided within
 * it, ascending), keeping the largest finite logit with the lowest index and the lowest index of
 * a non-finite logit, combines its threads by a fixed tree and writes parts[b] = (best, index,
 * bad). The last block to finish (an integer ticket elects it, and resets the ticket for the next
 * launch) merges the parts and writes stats[0] = max, the result (bad index, and the token when
 * greedy) and *token_out when greedy. Which block merges depends on timing; the merge does not:
 * "larger value, or equal value and lower index" and "lowest bad index" give one answer in any
 * order (argmax_merge.h, checked on the host by tests/cuda/test_argmax_merge.c). With commit the
 * position word holds the step's position less one: every block reads it before its ticket (whose
 * fence orders the read first), and the last block writes the step's position into it. The end
 * (the parts, the ticket, the last block's writes) is argmax_tail.cuh's mc_argmax_finish, which
 * commit=head's head GEMV runs too. */

#define MC_AM_UNROLL 8u
__global__ void __launch_bounds__(MC_MAX_THREADS)
    sample_argmax(const float *z, uint32_t n, uint32_t seg, int greedy, const mc_argmax_args a) {
    const uint32_t lo = blockIdx.x * seg, hi = min(lo + seg, n);
    asm volatile("griddepcontrol.wait;" ::: "memory"); /* the head's logits (a no-op unless pdl) */
    /* the ring's entry's position (read now, used by the last block at the end: its load off the tail) */
    const int32_t pnow = (a.ring || a.commit) && threadIdx.x == 0 ? *a.pos + (a.commit ? 1 : 0) : 0;
    float best = -INFINITY;
    uint32_t besti = MC_AM_NONE, bad = 0xffffffffu;
    /* a thread's values in ascending index, MC_AM_UNROLL loads in flight before they are compared
     * (one at a time, each waited for, cost a round trip to L2 apiece) */
    for (uint32_t i0 = lo + threadIdx.x; i0 < hi; i0 += MC_AM_UNROLL * blockDim.x) {
        float v[MC_AM_UNROLL];
#pragma unroll
        for (uint32_t u = 0; u < MC_AM_UNROLL; u++) {
            const uint32_t i = i0 + u * blockDim.x;
            v[u] = i < hi ? z[i] : 0.0f;
        }
#pragma unroll
        for (uint32_t u = 0; u < MC_AM_UNROLL; u++) {
            const uint32_t i = i0 + u * blockDim.x;
            if (i >= hi)
                break;
            if (!isfinite(v[u])) {
                bad = min(bad, i);
                continue;
            }
            if (besti == MC_AM_NONE || v[u] > best) { /* ascending: the first maximum wins */
                best = v[u];
                besti = i;
            }
        }
    }
    mc_argmax_finish(z, best, besti, bad, greedy, pnow, a); /* argmax_tail.cuh */
}

/* Sort keys for step 2's total order: z descending, then index ascending. -0 and +0 are equal
 * logits (a tie broken by index), so -0 is keyed as +0. */
__global__ void sample_sort_keys(const float *z, uint32_t n, uint32_t n_pow2, unsigned long long *keys) {
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_pow2)
        return;
    if (i >= n) {
        keys[i] = ~0ull;
        return;
    }
    float v = z[i];
    uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);
    uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* increasing with v */
    keys[i] = ((unsigned long long)(~ord) << 32) | i;
}

/* One bitonic compare-exchange pass at distance j (>= the shared segment) of merge size k. */
__global__ void sample_bitonic_global(unsigned long long *keys, uint32_t k, uint32_t j) {
    uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t i = (t / j) * 2 * j + (t % j), l = i + j;
    unsigned long long a = keys[i], b = keys[l];
    bool up = (i & k) == 0;
    if ((a > b) == up) {
        keys[i] = b;
        keys[l] = a;
    }
}

/* Every pass of merge sizes k_first..k_last (doubling) at distances below the segment, in shared
 * memory, over one segment of `seg` keys per block. */
__global__ void sample_bitonic_shared(unsigned long long *keys, uint32_t seg, uint32_t k_first, uint32_t k_last) {
    extern __shared__ unsigned long long sk[];
    uint32_t base = blockIdx.x * seg;
    for (uint32_t i = threadIdx.x; i < seg; i += blockDim.x)
        sk[i] = keys[base + i];
    __syncthreads();
    for (uint32_t k = k_first; k <= k_last; k <<= 1) {
        for (uint32_t j = min(k / 2, seg / 2); j > 0; j >>= 1) {
            for (uint32_t t = threadIdx.x; t < seg / 2; t += blockDim.x) {
                uint32_t i = (t / j) * 2 * j + (t % j), l = i + j;
                unsigned long long a = sk[i], b = sk[l];
                bool up = ((base + i) & k) == 0;
                if ((a > b) == up) {
                    sk[i] = b;
                    sk[l] = a;
                }
            }
            __syncthreads();
        }
    }
    for (uint32_t i = threadIdx.x; i < seg; i += blockDim.x)
        keys[base + i] = sk[i];
}

/* Steps 4 and 5 per chunk: one thread per 256-entry chunk, left to right. Reads z, the sorted
 * keys (when sorted), stats[0]; writes partial[j] and chunk_sums[k]. */
__global__ void sample_chunk_cumsum(const float *z, const unsigned long long *keys, int sorted, uint32_t n,
                                    const float *stats, float temperature, float *partial, float *chunk_sums) {
    uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t j0 = k * MC_CHUNK;
    if (j0 >= n)
        return;
    uint32_t j1 = min(j0 + MC_CHUNK, n);
    const float m = stats[0];
    float acc = 0.0f;
    for (uint32_t j = j0; j < j1; j++) {
        uint32_t idx = sorted ? (uint32_t)keys[j] : j;
        float w = memra_expf(MEMRA_FDIV(MEMRA_FSUB(z[idx], m), temperature));
        acc = MEMRA_FADD(acc, w);
        partial[j] = acc;
    }
    chunk_sums[k] = acc;
}

__device__ uint32_t mc_block_min(uint32_t v, uint32_t *red) {
    for (int o = 16; o > 0; o >>= 1)
        v = min(v, __shfl_xor_sync(MC_FULL, v, o));
    uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (uint32_t w = 1; w < blockDim.x / 32; w++)
            v = min(v, red[w]);
        red[32] = v;
    }
    __syncthreads();
    v = red[32];
    __syncthreads();
    return v;
}

/* Steps 5 (chunk prefix), 6, 7, 8 in one block. Reads partial, chunk_sums, keys, *pos, the
 * result; writes the token. */
__global__ void __launch_bounds__(1024)
    sample_pick(const float *partial, float *chunk_sums, const unsigned long long *keys, int sorted, uint32_t n,
                float top_p, unsigned long long seed, const int32_t *pos, int32_t *token_out, mc_sample_result *result,
                mc_sample_result *ring, uint32_t ring_n, int word, mc_embed_next next) {
    __shared__ uint32_t red[33];
    __shared__ float totals[2];
    const uint32_t n_chunks = (n + MC_CHUNK - 1) / MC_CHUNK;
    if (threadIdx.x == 0) { /* P_k in place of s_k (exclusive prefix), then S */
        float P = 0.0f;
        for (uint32_t k = 0; k < n_chunks; k++) {
            float s = chunk_sums[k];
            chunk_sums[k] = P;
            P = MEMRA_FADD(P, s);
        }
        totals[0] = P;
    }
    __syncthreads();
    const float S = totals[0];
    uint32_t keep = n;
    if (top_p < 1.0f) {
        const float bound = MEMRA_FMUL(top_p, S);
        uint32_t first = 0xffffffffu;
        for (uint32_t j = threadIdx.x; j < n && first == 0xffffffffu; j += blockDim.x)
            if (MEMRA_FADD(chunk_sums[j / MC_CHUNK], partial[j]) >= bound)
                first = j;
        first = mc_block_min(first, red);
        keep = first == 0xffffffffu ? n : first + 1;
    }
    const float Sk = top_p < 1.0f ? MEMRA_FADD(chunk_sums[(keep - 1) / MC_CHUNK], partial[keep - 1]) : S;
    const float r = MEMRA_FMUL(memra_uniform(seed, (uint64_t)(uint32_t)*pos), Sk);
    uint32_t first = 0xffffffffu;
    for (uint32_t j = threadIdx.x; j < keep && first == 0xffffffffu; j += blockDim.x)
        if (MEMRA_FADD(chunk_sums[j / MC_CHUNK], partial[j]) > r)
            first = j;
    first = mc_block_min(first, red);
    uint32_t jj = first == 0xffffffffu ? keep - 1 : first;
    const bool good = result->bad_index < 0;
    const int32_t tok = !good ? -1 : sorted ? (int32_t)(uint32_t)keys[jj] : (int32_t)jj;
    if (threadIdx.x == 0 && good) {
        result->token = tok;
        *token_out = tok;
        if (ring && !word) /* the argmax pass wrote the rest of the entry */
            ring[(uint32_t)*pos % ring_n].token = tok;
    }
    if (threadIdx.x == 0 && ring && word) /* the argmax pass wrote the bad logit, if any, fenced */
        mc_ring_word(&ring[(uint32_t)*pos % ring_n], tok, *pos);
    else if (threadIdx.x == 0 && ring) { /* the step's last write: the tag, after the rest is visible */
        __threadfence_system();
        *(volatile int32_t *)&ring[(uint32_t)*pos % ring_n].seq = *pos;
        __threadfence_system();
    }
    if (next.x) /* every thread holds tok; after the tag: off the host's wait */
        mc_embed_block(next.emb, tok, next.scale, next.x);
}

mc_argmax_args mc_argmax_args_of(const mc_sampler_scratch *s, int32_t *pos, int32_t *token_out,
                                 mc_sample_result *result, mc_sample_result *ring, uint32_t ring_n, bool commit,
                                 bool word, const mc_embed_next *next) {
    mc_argmax_args a;
    memset(&a, 0, sizeof a);
    a.parts = s->parts;
    a.ticket = s->ticket;
    a.stats = s->stats;
    a.token_out = token_out;
    a.result = result;
    a.pos = pos;
    a.ring = ring;
    a.ring_n = ring_n;
    a.commit = commit;
    a.word = word;
    if (next)
        a.next = *next;
    return a;
}

cudaError_t mc_sample(const float *logits, const mc_sampler_scratch *s, const memra_sample_cfg *cfg, int32_t *pos,
                      int32_t *token_out, mc_sample_result *result, mc_sample_result *ring, uint32_t ring_n, bool pdl,
                      bool commit, bool word, const mc_embed_next *next, cudaStream_t st) {
    const mc_embed_next none = {};
    const mc_embed_next nx = next ? *next : none;
    const uint32_t V = s->n_vocab;
    if (ring && ring_n == 0)
        return cudaErrorInvalidValue;
    const bool greedy = !(cfg->temperature > 0.0f);
    uint32_t seg = (V + MC_MAX_PARTS - 1) / MC_MAX_PARTS;
    seg = seg < 1024 ? 1024 : seg;
    const uint32_t n_parts = (V + seg - 1) / seg;
    cudaLaunchConfig_t lc = {};
    lc.gridDim = dim3(n_parts);
    lc.blockDim = dim3(MC_MAX_THREADS);
    lc.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs_pdl(&lc, attr, 0, pdl);
    const mc_argmax_args a = mc_argmax_args_of(s, pos, token_out, result, ring, ring_n, commit, word, next);
    cudaError_t e = cudaLaunchKernelEx(&lc, sample_argmax, logits, V, seg, (int)greedy, a);
    if (e != cudaSuccess || greedy)
        return e;
    const bool cut_k = cfg->top_k != 0 && cfg->top_k < V;
    const bool sorted = cut_k || cfg->top_p < 1.0f;
    const uint32_t n = cut_k ? cfg->top_k : V;
    if (sorted) {
        const uint32_t N = s->n_pow2;
        sample_sort_keys<<<(N + 255) / 256, 256, 0, st>>>(logits, V, N, s->keys);
        const uint32_t seg = N < 2048 ? N : 2048;
        const uint32_t threads = seg / 2 < 1024 ? (seg / 2 > 0 ? seg / 2 : 1) : 1024;
        if (N >= 2) {
            sample_bitonic_shared<<<N / seg, threads, seg * 8, st>>>(s->keys, seg, 2, seg);
            for (uint32_t k = 2 * seg; k <= N; k <<= 1) {
                for (uint32_t j = k / 2; j >= seg; j >>= 1)
                    sample_bitonic_global<<<N / 2 / 256, 256, 0, st>>>(s->keys, k, j);
                sample_bitonic_shared<<<N / seg, threads, seg * 8, st>>>(s->keys, seg, k, k);
            }
        }
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    const uint32_t n_chunks = (n + MC_CHUNK - 1) / MC_CHUNK;
    sample_chunk_cumsum<<<(n_chunks + 63) / 64, 64, 0, st>>>(logits, s->keys, sorted, n, s->stats, cfg->temperature,
                                                             s->partial, s->chunk_sums);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    sample_pick<<<1, 1024, 0, st>>>(s->partial, s->chunk_sums, s->keys, sorted, n, cfg->top_p,
                                    (unsigned long long)cfg->seed, pos, token_out, result, ring, ring_n, (int)word, nx);
    return cudaGetLastError();
}

/* ---- host entry for tests --------------------------------------------------------------- */

cudaError_t mc_sample_host(const float *logits, uint32_t n_vocab, uint32_t position, const memra_sample_cfg *cfg,
                           bool commit, bool word, uint32_t embed_cols, mc_sample_result *out,
                           mc_sample_result *dev_out, int32_t *pos_after, int *embed_ok) {
    float *dz = NULL, *demb = NULL, *dx = NULL, *hx = NULL;
    mc_embed_next next = {};
    const float sentinel = -7.25f; /* x before the step: a bad step leaves it */
    void *scratch = NULL;
    int32_t *dpos = NULL, *dtok = NULL;
    mc_sample_result *dres = NULL, *ring = NULL;
    mc_sampler_scratch s;
    int32_t p = (int32_t)position - (commit ? 1 : 0);
    const uint32_t ring_n = 3; /* the entry the host reads is position % 3 of a ring in pinned memory */
    cudaError_t e;
    if ((e = cudaMalloc(&dz, (size_t)n_vocab * 4)) != cudaSuccess)
        goto done;
    if ((e = cudaMalloc(&scratch, mc_sampler_scratch_bytes(n_vocab))) != cudaSuccess)
        goto done;
    if ((e = cudaMalloc(&dpos, 8)) != cudaSuccess || (e = cudaMalloc(&dtok, 8)) != cudaSuccess ||
        (e = cudaMalloc(&dres, sizeof *dres)) != cudaSuccess ||
        (e = cudaMallocHost(&ring, ring_n * sizeof *ring)) != cudaSuccess)
        goto done;
    if (embed_cols) { /* row r, column c = r * 128 + c (embed_cols <= 128): exact in f32 up to 131,072 rows */
        const size_t n = (size_t)n_vocab * embed_cols;
        if ((hx = (float *)malloc(n * 4)) == NULL) {
            e = cudaErrorMemoryAllocation;
            goto done;
        }
        for (size_t i = 0; i < n; i++)
            hx[i] = (float)((i / embed_cols) * 128u + i % embed_cols);
        if ((e = cudaMalloc(&demb, n * 4)) != cudaSuccess ||
            (e = cudaMalloc(&dx, (size_t)embed_cols * 4)) != cudaSuccess ||
            (e = cudaMemcpy(demb, hx, n * 4, cudaMemcpyHostToDevice)) != cudaSuccess)
            goto done;
        for (uint32_t c = 0; c < embed_cols; c++)
            hx[c] = sentinel;
        if ((e = cudaMemcpy(dx, hx, (size_t)embed_cols * 4, cudaMemcpyHostToDevice)) != cudaSuccess)
            goto done;
        next.emb.type = MEMRA_TYPE_F32;
        next.emb.rows = n_vocab;
        next.emb.cols = embed_cols;
        next.emb.stride = embed_cols;
        next.emb.data = demb;
        next.scale = 2.0f;
        next.x = dx;
    }
    for (uint32_t k = 0; k < ring_n; k++) /* a wrong entry stays this */
        ring[k] = (mc_sample_result){0x7eadbeef, 0x7eadbeef, 0x7eadbeef, 0x7eadbeefu};
    if (word) /* wait=word writes the rest only for bad logits: the step clears its entry first */
        mc_ring_entry_clear(&ring[position % ring_n]);
    mc_sampler_scratch_init(&s, scratch, n_vocab);
    if ((e = cudaMemset(scratch, 0, mc_sampler_scratch_bytes(n_vocab))) != cudaSuccess ||
        (e = cudaMemcpy(dz, logits, (size_t)n_vocab * 4, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemcpy(dpos, &p, 4, cudaMemcpyHostToDevice)) != cudaSuccess)
        goto done;
    if ((e = mc_sample(dz, &s, cfg, dpos, dtok, dres, ring, ring_n, false, commit, word, embed_cols ? &next : NULL,
                       0)) != cudaSuccess)
        goto done;
    if ((e = cudaMemcpy(dev_out, dres, sizeof *dev_out, cudaMemcpyDeviceToHost)) != cudaSuccess ||
        (e = cudaMemcpy(pos_after, dpos, 4, cudaMemcpyDeviceToHost)) != cudaSuccess)
        goto done;
    if (embed_cols) {
        if ((e = cudaMemcpy(hx, dx, (size_t)embed_cols * 4, cudaMemcpyDeviceToHost)) != cudaSuccess)
            goto done;
        int ok = 1;
        for (uint32_t c = 0; c < embed_cols; c++) {
            const float want = dev_out->token >= 0 ? 2.0f * (float)((uint32_t)dev_out->token * 128u + c) : sentinel;
            ok &= hx[c] == want;
        }
        *embed_ok = ok;
    }
    *out = ring[position % ring_n];
done:
    cudaFree(dz);
    cudaFree(scratch);
    cudaFree(dpos);
    cudaFree(dtok);
    cudaFree(dres);
    cudaFreeHost(ring);
    cudaFree(demb);
    cudaFree(dx);
    free(hx);
    return e;
}

const char *mc_sampler_family(const void *f) {
    static const mc_family_row table[] = {
        {(const void *)sample_argmax, "sampler"},         {(const void *)sample_sort_keys, "sampler"},
        {(const void *)sample_bitonic_global, "sampler"}, {(const void *)sample_bitonic_shared, "sampler"},
        {(const void *)sample_chunk_cumsum, "sampler"},   {(const void *)sample_pick, "sampler"},
    };
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
