/* cuda_checks.h: the self-checks of the cuda backends, shared by the plain programs of tests/cuda
 * (for the device machine, which has no Criterion) and the Criterion tests of tests/cuda. */
#ifndef MEMRA_CUDA_CHECKS_H
#define MEMRA_CUDA_CHECKS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "memra/plugin.h"

/* Device sampler against the cpu sampler; returns the number of disagreements (negative: could
 * not run). */
int memra_cuda_check_sampler(FILE *out, int *n_checked);

/* The quantized GEMVs beyond Q8_0 and their embedding lookups against a host reference
 * (check_quant_gemv.c); returns the number of failures (negative: could not run). */
int memra_cuda_check_quant_gemv(FILE *out, int *n_checked);

/* postnorm=fused: mc_gemv_post bit for bit against mc_gemv then mc_op_rmsnorm_add, every type and
 * kernel (check_post_norm.c); returns the number of failures (negative: could not run). */
int memra_cuda_check_post_norm(FILE *out, int *n_checked);

/* chunk=mma: the prefill chunk's integer Q8_0 GEMV on tensor cores bit for bit against decode's
 * GEMV row by row and chunk=fma (check_chunk_mma.c); returns the number of failures (negative:
 * could not run). */
int memra_cuda_check_chunk_mma(FILE *out, int *n_checked);

/* The integer Q8_0 GEMV on every Q8_0 matrix (q8=auto, issue 27): bit for bit against its 8-warp
 * blocks (q8=int-8w), q8=rows where that serves, and the prefill chunk (check_q8_gemv.c); returns
 * the number of failures (negative: could not run). */
int memra_cuda_check_q8_gemv(FILE *out, int *n_checked);

/* chunk=mma (the default) for Q4_K, Q5_K and Q6_K: the prefill chunk's GEMV on tensor cores bit for bit against
 * decode's qdot=auto GEMV row by row (check_chunk_kq.c); returns the number of failures (negative:
 * could not run). */
int memra_cuda_check_chunk_kq(FILE *out, int *n_checked);

/* The main of a plain check program (the device machine has no Criterion): "NAME: SKIP (no CUDA
 * device)" and exit 77 without a device, else FN's one line ("NAME: PASS (N COUNTED, M FAILED)" or
 * FAIL) and exit 0 only when FN found nothing. Expands where cudaGetDeviceCount is declared. */
#define MEMRA_CHECK_MAIN(NAME, FN, COUNTED, FAILED)                                                                    \
    int main(void) {                                                                                                   \
        int n_ = 0;                                                                                                    \
        if (cudaGetDeviceCount(&n_) != cudaSuccess || n_ == 0) {                                                       \
            printf(NAME ": SKIP (no CUDA device)\n");                                                                  \
            return 77;                                                                                                 \
        }                                                                                                              \
        int checked_ = 0;                                                                                              \
        const int bad_ = FN(stdout, &checked_);                                                                        \
        printf(NAME ": %s (%d " COUNTED ", %d " FAILED ")\n", bad_ == 0 ? "PASS" : "FAIL", checked_, bad_);            \
        return bad_ == 0 ? 0 : 1;                                                                                      \
    }

/* Writes PRESET in `type` with every attn_v and ffn_up decoded to F32 (fused matrices of mixed
 * types, mixed_gguf.c) to path; 0 on success, else the reason in msg. */
int memra_check_write_mixed(const char *preset, uint32_t type, const char *path, char *msg, size_t size);

typedef struct check_arms_cfg {
    const char *a, *b, *model, *preset;
    uint32_t dtype, prime, gen;
    uint32_t window; /* > 1: arm B runs with window=W (the arm key) unless its text sets a window */
    bool sampled, exact;
    memra_sample_cfg sample;
    double nmse_tol;
    int perturb_step; /* >= 0: arm B gets a different input token at that step (negative control) */
    uint32_t chunk_repeat; /* > 0: prefill runs instead (check_arms.c: check_chunk_repeat) */
} check_arms_cfg;

typedef struct check_arms_result {
    uint32_t steps, bad_steps, first_bad, token_agree;
    double worst_nmse;
    bool digests_equal, repeat_equal;
    double b_tok_s;
    char msg[1200];
} check_arms_result;

/* 0 pass, 1 mismatch, 3 could not run (message in res->msg). */
int memra_cuda_check_arms(const check_arms_cfg *c, check_arms_result *res);

#endif
