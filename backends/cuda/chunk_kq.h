/* chunk_kq.h: the K-quant GEMV of a prefill chunk on int8 tensor cores (chunk_kq_mma.cu), for
 * chunk_gemv.cu's mc_gemv_chunk and the census in chunk_mma.cu. */
#ifndef MEMRA_CUDA_CHUNK_KQ_H
#define MEMRA_CUDA_CHUNK_KQ_H

#include "cuda_common.cuh"

/* Whether the chunk kernel serves w under c: Q4_K, Q5_K or Q6_K in the kquant layout, qdot=auto
 * (decode's integer dots on quantized x), chunk=mma-kq (or the check's MC_CHUNK_MMA_FAULT); under
 * chunk=mma and chunk=fma their chunks run as single steps. */
int mc_chunk_kq_serves(const mc_config *c, const mc_matrix *w);

/* M rows of x (ldx floats apart) through w, each output element gemv_kquant.cu's qdot=auto bits
 * for its row (the norm, bias, residual and GLU as mc_gemv_chunk takes them); scratch of
 * mc_gemv_chunk_scratch_bytes(w->cols, M) bytes. variant: c->chunk (MC_CHUNK_MMA_FAULT: the
 * classes in lane order, the check's negative control). */
cudaError_t mc_chunk_kq_mma(uint32_t variant, const mc_matrix *w, const float *x, uint32_t ldx, const float *norm_w,
                            float eps, const float *bias, const float *res, uint32_t ldr, float *y, uint32_t ldy,
                            int glu, uint32_t M, void *scratch, cudaStream_t st);

/* The census family of a chunk_kq_mma.cu kernel, or NULL. */
const char *mc_chunk_kq_family(const void *f);

#endif
