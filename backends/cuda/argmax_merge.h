/* argmax_merge.h: the merge rule of the cuda device sampler's argmax, shared by the kernel
 * (sample_argmax in sampler.cu) and a host test (C), so the test checks the code the kernel runs.
 *
 * A candidate is a finite logit and its index (index MC_AM_NONE: no candidate yet). The merge
 * keeps the larger value, and of equal values (equal as floats: -0 equals +0) the lower index.
 * That is a total order on distinct indices, so merging a set in any order or tree gives one
 * winner, and the winner's bits: the single-launch argmax relies on it, because which block
 * merges the per-block parts, and in which order they finished, depends on timing. */
#ifndef MEMRA_ARGMAX_MERGE_H
#define MEMRA_ARGMAX_MERGE_H

#include <stdint.h>

#ifdef __CUDACC__
#define MC_AM_HD __host__ __device__ __forceinline__
#else
#define MC_AM_HD static inline
#endif

#define MC_AM_NONE 0xffffffffu

/* (best, besti) becomes the winner of itself and (ov, oi). */
MC_AM_HD void mc_best_merge(float *best, uint32_t *besti, float ov, uint32_t oi) {
    if (oi != MC_AM_NONE && (*besti == MC_AM_NONE || ov > *best || (ov == *best && oi < *besti))) {
        *best = ov;
        *besti = oi;
    }
}

#endif
