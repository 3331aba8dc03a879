/* memra/sampling.h: the exact sampling algorithm of memra, and its host implementation.
 *
 * Every sampler (the `cpu` sampler plugin, the device samplers inside the GPU backends)
 * implements THIS algorithm, so that the same logits, configuration and position give the same
 * token on every backend. It is written step by step, precisely enough to be reproduced bit for
 * bit; memra_sample below is the reference that the others are checked against.
 *
 * Inputs: logits z[0..V) (float32), cfg {temperature T, top_k, top_p, seed}, position p (the
 * index the sampled token will take: the state's position after the step commits).
 * All float arithmetic below is float32 with one IEEE round-to-nearest per operation (the
 * MEMRA_FMUL/FADD/FSUB/FDIV macros of memra/numeric.h, which keep CUDA from fusing), exp is
 * memra_expf (numeric.h), the draw is memra_uniform(seed, p) (numeric.h).
 *
 * 0. Any z non-finite (NaN or +-inf) -> MEMRA_E_RANGE ("logit 123 is nan").
 * 1. T <= 0 (greedy): return the index of the largest z, the LOWEST index among equal maxima.
 * 2. The sequence seq[0..n):
 *    - if (top_k == 0 || top_k >= V) && top_p >= 1: seq = 0, 1, ..., V-1 (index order, no
 *      sort), n = V;
 *    - otherwise: all indices sorted by z descending, ties by index ascending, truncated to the
 *      first top_k when 0 < top_k < V; n = that length.
 * 3. m = max over seq of z[seq[j]] (exact: a max).
 * 4. w_j = memra_expf( MEMRA_FDIV( MEMRA_FSUB(z[seq[j]], m), T ) ).
 * 5. Chunked sums, CHUNK = MEMRA_SAMPLE_CHUNK = 256: chunk k covers j in [256k, min(256k+256, n)).
 *    partial_j = w_{256k} + w_{256k+1} + ... + w_j, accumulated left to right starting from 0.0f
 *    (acc = 0; acc = FADD(acc, w_i) for i = 256k .. j).
 *    s_k = partial at the chunk's last j. P_0 = 0.0f, P_{k+1} = FADD(P_k, s_k) (sequential
 *    over k). S = P_{n_chunks}. The cumulative at j (in chunk k) is C_j = FADD(P_k, partial_j).
 * 6. Top-p (only when top_p < 1): keep = the smallest j+1 with C_j >= FMUL(top_p, S); keep = n
 *    if none. S' = C_{keep-1}. Otherwise keep = n and S' = S.
 * 7. u = memra_uniform(seed, p); r = FMUL(u, S').
 * 8. The token is seq[j] for the smallest j < keep with C_j > r; if there is none, seq[keep-1].
 *
 * Why chunks: a GPU sums 256-element chunks in parallel (one thread or warp-sequential per
 * chunk) and the chunk prefix sequentially, and gets the same bits as the CPU doing the same
 * loops.
 *
 * Notes for implementers (consequences of the steps above, not extra rules):
 * - The sort in step 2 is a total order (z descending, then index ascending), so any correct
 *   sort (stable or not, radix or merge) gives the same seq.
 * - C_j is non-decreasing in j (weights are >= 0), so steps 6 and 8 may be found by a scan or
 *   a binary search with the same result.
 * - top_p <= 0 keeps exactly one candidate when C_0 > 0 (C_0 >= FMUL(top_p, S) holds at j = 0).
 * - The weight of the maximum is memra_expf(0) = 1 exactly, so S >= 1 and S' >= 1 whenever the
 *   maximum is in the kept prefix; with top-p it always is (seq[0] is the maximum).
 */
#ifndef MEMRA_SAMPLING_H
#define MEMRA_SAMPLING_H

#include <stddef.h>
#include <stdint.h>

#include "memra/plugin.h"
#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Step 5's chunk length. */
#define MEMRA_SAMPLE_CHUNK 256u

/* Bytes of scratch memra_sample needs for n_vocab logits (aligned for uint32_t and float). */
size_t memra_sample_scratch_bytes(uint32_t n_vocab);

/* The algorithm above, on the host: logits (n_vocab floats) + position + cfg -> *token.
 * scratch holds memra_sample_scratch_bytes(n_vocab) bytes, or is NULL when T <= 0 (greedy needs
 * none). n_vocab 0, or a sampled draw without scratch, is MEMRA_E_INVALID; a non-finite logit is
 * MEMRA_E_RANGE naming its index. Thread-safe; allocates nothing. */
memra_status memra_sample(const float *logits, uint32_t n_vocab, uint64_t position, const memra_sample_cfg *cfg,
                          void *scratch, uint32_t *token, memra_error *err);
/* Step 2's sort done by the caller (an op plugin's top-k, memra_op_vtable's cpu_topk): writes
 * seq[0..k), the first k indices of step 2's order; seq has room for n_vocab. */
typedef void (*memra_sample_sort_fn)(void *user, const float *logits, uint32_t n_vocab, uint32_t k, uint32_t *seq);
/* memra_sample with step 2's sort (when a cut needs one) done by sort(user, ...); sort NULL is
 * memra_sample. */
memra_status memra_sample_sorted_by(const float *logits, uint32_t n_vocab, uint64_t position,
                                    const memra_sample_cfg *cfg, void *scratch, memra_sample_sort_fn sort, void *user,
                                    uint32_t *token, memra_error *err);

/* The sampling options every tool takes, one rule for all (memra run, memra-gate):
 *   --temp T   0 < T <= MEMRA_SAMPLE_MAX_TEMP, a normal float as a float32 (greedy: no --temp)
 *   --top-k K  0 (all) to 2^32-1
 *   --top-p P  0 < P <= 1; a P below 1 must stay below 1 as a float32
 *   --seed S   0 to 2^64-1
 * Sets the field of cfg the option names; MEMRA_E_INVALID with a message naming the option and
 * the value otherwise. */
#define MEMRA_SAMPLE_MAX_TEMP 1000.0
memra_status memra_sample_option(const char *opt, const char *text, memra_sample_cfg *cfg, memra_error *err);

#ifdef __cplusplus
}
#endif
#endif
