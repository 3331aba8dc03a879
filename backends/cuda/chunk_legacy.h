/* chunk_legacy.h: the Q4_0, Q4_1, Q5_0, Q5_1 GEMV of a prefill chunk on int8 tensor cores
 * (chunk_legacy_mma.cu), for chunk_gemv.cu's mc_gemv_chunk and its census. */
#ifndef MEMRA_CUDA_CHUNK_LEGACY_H
#define MEMRA_CUDA_CHUNK_LEGACY_H

#include "cuda_common.cuh"

/* Whether the chunk kernel serves w under c: Q4_0, Q4_1, Q5_0 or Q5_1 in the legacy layout,
 * qdot=auto (decode's integer dots on quantized x), chunk=mma or mma-kq (or the check's
 * MC_CHUNK_MMA_FAULT); under chunk=fma, chunk=mma-q8 or qdot=float their chunks run as single
 * steps. */
int mc_chunk_legacy_serves(const mc_config *c, const mc_matrix *w);

/* M rows of x (ldx floats apart) through w, each output element gemv_legacy.cu's qdot=auto bits
 * for its row (the norm, bias, residual and GLU as mc_gemv_chunk takes them); scratch of
 * mc_gemv_chunk_scratch_bytes(w->cols, M) bytes. variant: c->chunk (MC_CHUNK_MMA_FAULT: the
 * classes in lane order, the check's negative control). */
cudaError_t mc_chunk_legacy_mma(uint32_t variant, const mc_matrix *w, const float *x, uint32_t ldx, const float *norm_w,
                                float eps, const float *bias, const float *res, uint32_t ldr, float *y, uint32_t ldy,
                                int glu, uint32_t M, void *scratch, cudaStream_t st);

/* The census family of a chunk_legacy_mma.cu kernel, or NULL. */
const char *mc_chunk_legacy_family(const void *f);

#endif
