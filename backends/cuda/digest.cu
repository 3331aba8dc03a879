/* digest.cu: the KV-cache digest on the device (chunk hashes the backend folds into a state's
 * cache digest). */
#include "cuda_common.cuh"

MC_DYNAMIC_SMEM_ANCHOR(mc_smem_anchor_digest)

__device__ __forceinline__ unsigned long long mc_mix(unsigned long long z) { return memra_mix64(z); }

/* One warp per (plane, chunk of MC_DIGEST_ROWS rows of row_words 32-bit words: the stored bytes,
 * whatever the kv type): lane l hashes words l, l+32, ... of the
 * chunk's rows below *pos, then lane 0 folds the 32 lane hashes in lane order. Per digest (not per
 * token: a state's cache digest): reads the cache rows below *pos; writes one hash per chunk. */
__global__ void digest_cache_chunks(const uint32_t *planes, uint32_t n_planes, uint32_t capacity, uint32_t row_words,
                                    const int32_t *pos, unsigned long long *hashes) {
    const uint32_t max_chunks = (capacity + MC_DIGEST_ROWS - 1) / MC_DIGEST_ROWS;
    const uint32_t gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (gw >= n_planes * max_chunks)
        return;
    const uint32_t plane = gw / max_chunks, chunk = gw % max_chunks;
    const uint32_t p = (uint32_t)*pos;
    const uint32_t r0 = chunk * MC_DIGEST_ROWS, r1 = min(r0 + MC_DIGEST_ROWS, p);
    unsigned long long h = 0x6a09e667f3bcc908ull + lane;
    if (r0 < r1) {
        const uint32_t *w = planes + ((size_t)plane * capacity + r0) * row_words;
        const size_t n = (size_t)(r1 - r0) * row_words;
        for (size_t i = lane; i < n; i += 32)
            h = mc_mix(h + w[i]);
    }
    unsigned long long acc = 0;
    for (int l = 0; l < 32; l++) {
        unsigned long long o = __shfl_sync(MC_FULL, h, l);
        acc = mc_mix(acc ^ o);
    }
    if (lane == 0)
        hashes[gw] = r0 < r1 ? acc : 0ull;
}

cudaError_t mc_digest_planes(const void *planes, uint32_t n_planes, uint32_t capacity, uint32_t row_words,
                             const int32_t *pos, unsigned long long *hashes, cudaStream_t st) {
    const uint32_t max_chunks = (capacity + MC_DIGEST_ROWS - 1) / MC_DIGEST_ROWS;
    const uint64_t warps = (uint64_t)n_planes * max_chunks;
    if (warps == 0)
        return cudaSuccess;
    digest_cache_chunks<<<(unsigned)((warps + 7) / 8), 256, 0, st>>>((const uint32_t *)planes, n_planes, capacity,
                                                                     row_words, pos, hashes);
    return cudaGetLastError();
}

const char *mc_digest_family(const void *f) {
    static const mc_family_row table[] = {
        {(const void *)digest_cache_chunks, "digest"},
    };
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
