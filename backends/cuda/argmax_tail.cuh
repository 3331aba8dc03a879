/* argmax_tail.cuh: the end of greedy's argmax, shared by the argmax pass (sampler.cu's
 * sample_argmax) and commit=head's head GEMV (gemv_kquant.cu's gemv_kquant_argmax), so both write
 * the same result from the same candidates: a block merges its threads' candidates by a fixed
 * tree, writes its part and takes an integer ticket; the last block merges the parts and writes the
 * step's outputs. Which block is last depends on timing; the merge does not (argmax_merge.h). */
#ifndef MEMRA_ARGMAX_TAIL_CUH
#define MEMRA_ARGMAX_TAIL_CUH

#include "argmax_merge.h"
#include "cuda_common.cuh"
#include "embed_elem.cuh"

/* The parts a launch may write (the scratch holds this many; a block reads them all at the end,
 * one a thread, so at most its thread count). */
#define MC_AM_PARTS_CAP 512u

/* The block's (best, index, bad) to thread 0, by a fixed tree (warp shuffles, then warps in order). */
__device__ __forceinline__ void mc_best_block(float &best, uint32_t &besti, uint32_t &bad, float (&bv)[32],
                                              uint32_t (&bi)[32], uint32_t (&bb)[32]) {
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(MC_FULL, best, o);
        uint32_t oi = __shfl_xor_sync(MC_FULL, besti, o);
        bad = min(bad, __shfl_xor_sync(MC_FULL, bad, o));
        mc_best_merge(&best, &besti, ov, oi);
    }
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); /* bv, bi, bb may hold an earlier call's values */
    if (lane == 0) {
        bv[warp] = best;
        bi[warp] = besti;
        bb[warp] = bad;
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (uint32_t w = 1; w < blockDim.x / 32; w++) {
            mc_best_merge(&best, &besti, bv[w], bi[w]);
            bad = min(bad, bb[w]);
        }
}

/* wait=word's last write to a ring entry: the token and the tag in one aligned 8-byte store, which
 * reaches host memory whole (token at the lower address, the tag above: mc_sample_result). No fence
 * after it: the kernel's exit makes it visible if it is not already, and the host's wait asks the
 * step's event while it is not. */
__device__ __forceinline__ void mc_ring_word(mc_sample_result *e, int32_t token, int32_t tag) {
    const unsigned long long w = (unsigned long long)(uint32_t)token | ((unsigned long long)(uint32_t)tag << 32);
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(&e->token), "l"(w) : "memory");
}

/* Called by every thread of every block of the launch, with its candidate (best, besti: the largest
 * finite value of z it saw and its index, MC_AM_NONE for none; bad: the lowest index of a
 * non-finite value it saw, ~0 for none) once every value of z it stored or read is final, and
 * pnow (thread 0's: the step's position, *pos + 1 with commit, read before this call). Writes
 * parts[block] and takes the ticket; the last block (which resets the ticket) merges the parts and
 * writes, with commit, *pos = pnow; stats[0] = the max; *result (bad index and bits, and the token
 * when greedy and finite); *token_out when greedy; with a ring, its entry at pnow % ring_n (wait=ring:
 * the entry, a system fence, then the tag when greedy; wait=word: bad_index and bad_bits, fenced,
 * when bad, then the token and tag in one store when greedy); then, greedy with next.x, the next
 * step's input from the token (after the tag: off the host's wait). */
__device__ __forceinline__ void mc_argmax_finish(const float *z, float best, uint32_t besti, uint32_t bad, int greedy,
                                                 int32_t pnow, const mc_argmax_args &a) {
    __shared__ float bv[32];
    __shared__ uint32_t bi[32], bb[32];
    __shared__ uint32_t is_last;
    __shared__ int32_t next_tok;
    mc_best_block(best, besti, bad, bv, bi, bb);
    if (threadIdx.x == 0) {
        a.parts[3 * blockIdx.x] = __float_as_uint(best);
        a.parts[3 * blockIdx.x + 1] = besti;
        a.parts[3 * blockIdx.x + 2] = bad;
        __threadfence(); /* the part is visible before the ticket counts it */
        is_last = atomicAdd(a.ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last)
        return;
    __threadfence();
    best = -INFINITY;
    besti = MC_AM_NONE;
    bad = 0xffffffffu;
    if (threadIdx.x < gridDim.x) { /* L2 loads: other blocks wrote them */
        best = __uint_as_float(__ldcg(a.parts + 3 * threadIdx.x));
        besti = __ldcg(a.parts + 3 * threadIdx.x + 1);
        bad = __ldcg(a.parts + 3 * threadIdx.x + 2);
    }
    mc_best_block(best, besti, bad, bv, bi, bb);
    if (threadIdx.x == 0) {
        const uint32_t at = (uint32_t)pnow % (a.ring_n ? a.ring_n : 1u);
        mc_sample_result *ring = a.ring;
        *a.ticket = 0;
        if (a.commit) /* the step's commit: every block read the word before its ticket */
            *a.pos = pnow;
        a.stats[0] = best;
        mc_sample_result r;
        r.token = -1;
        r.bad_index = bad == 0xffffffffu ? -1 : (int32_t)bad;
        r.bad_bits = bad == 0xffffffffu ? 0u : __float_as_uint(z[bad]);
        r.seq = 0;
        if (greedy && bad == 0xffffffffu) {
            r.token = (int32_t)besti;
            *a.token_out = (int32_t)besti;
        }
        *a.result = r;
        if (ring && a.word) { /* wait=word: the token and the tag in one store, the rest only when bad */
            if (bad != 0xffffffffu) {
                ring[at].bad_index = r.bad_index;
                ring[at].bad_bits = r.bad_bits;
                __threadfence_system(); /* the bad logit before the word that hands it over */
            }
            if (greedy) /* sampling ends in sample_pick, which writes the word */
                mc_ring_word(&ring[at], r.token, pnow);
        } else if (ring) { /* the host's copy, in its memory: no copy between this step and the next */
            r.seq = -1;    /* the host cleared it before the step: still not final */
            ring[at] = r;
            __threadfence_system(); /* every write of the step is visible before the tag */
            /* greedy: the tag is the step's last write (sampling ends in sample_pick, which writes it) */
            if (greedy) {
                *(volatile int32_t *)&ring[at].seq = pnow;
                __threadfence_system();
            }
        }
        next_tok = greedy && bad == 0xffffffffu ? (int32_t)besti : -1;
    }
    if (!a.next.x || !greedy) /* sampling embeds in sample_pick */
        return;
    __syncthreads();
    mc_embed_block(a.next.emb, next_tok, a.next.scale, a.next.x); /* after the tag: off the host's wait */
}

#endif
