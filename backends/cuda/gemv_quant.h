/* gemv_quant.h: the GEMVs of the quantized types beyond Q8_0 (internal, C++),
 * by family: gemv_legacy.cu (Q4_0, Q4_1, Q5_0, Q5_1: blocks of 32) and gemv_kquant.cu (Q4_K, Q5_K,
 * Q6_K: blocks of 256). Each family defines its types' upload layout (the two functions below),
 * which cuda_weights.cu applies row by row, and launchers with the contract of mc_gemv
 * (cuda_kernels.h): y[r] = (residual ? residual[r] : 0) + bias[r] + sum_c W[r][c] * x'[c] with x'
 * RMSNorm(x) * norm_w when norm_w is given; with glu (MC_GLU_SILU, MC_GLU_GELU) the rows are gate
 * and up interleaved and y[r] = act(gate_r) * up_r. c->qdot picks integer or float dots. Fixed
 * reduction orders: the bits depend on the shapes and the arm's keys alone.
 *
 * Upload layout (mc_matrix, cuda_kernels.h): `data` holds rows * stride bytes (stride: the
 * family's data bytes per row, a multiple of 16) and, for a family that splits its blocks, `aux`
 * rows * aux_stride bytes (a multiple of 16, or 0 and NULL). */
#ifndef MEMRA_CUDA_GEMV_QUANT_H
#define MEMRA_CUDA_GEMV_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes per stored row of data and aux for `cols` columns of `type`; false when type is not the
 * family's or cols is not a multiple of its block. */
bool mc_qlayout_legacy(uint32_t type, uint64_t cols, uint64_t *data_row, uint64_t *aux_row);
bool mc_qlayout_kquant(uint32_t type, uint64_t cols, uint64_t *data_row, uint64_t *aux_row);
/* One row: cols / block blocks in the file's encoding at src into dst_data (data_row bytes) and
 * dst_aux (aux_row bytes; NULL when 0), both zeroed by the caller beforehand. */
void mc_qrepack_legacy(uint32_t type, const uint8_t *src, uint64_t cols, uint8_t *dst_data, uint8_t *dst_aux);
void mc_qrepack_kquant(uint32_t type, const uint8_t *src, uint64_t cols, uint8_t *dst_data, uint8_t *dst_aux);

cudaError_t mc_gemv_legacy(const mc_config *c, int glu, const mc_matrix *w, const float *x, const float *norm_w,
                           float eps, const float *bias, const float *residual, float *y, cudaStream_t st);
cudaError_t mc_gemv_kquant(const mc_config *c, int glu, const mc_matrix *w, const float *x, const float *norm_w,
                           float eps, const float *bias, const float *residual, float *y, cudaStream_t st);
/* mc_gemv_experts (cuda_kernels.h) for the family's types (glu MC_GLU_NONE or MC_GLU_SILU; the legacy
 * family takes norm_w exactly with the GLU: the experts' gate/up stack): each chosen expert's rows
 * as the family's dense 16-warp GEMV computes them. */
cudaError_t mc_gemv_experts_legacy(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                   uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                   const float *norm_w, float eps, int glu, float *y, uint32_t ldy, cudaStream_t st);
cudaError_t mc_gemv_experts_kquant(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                   uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                   const float *norm_w, float eps, int glu, float *y, uint32_t ldy, cudaStream_t st);
/* mc_gemv_post (cuda_kernels.h) for the family's types: the GEMV's kernel with no norm, bias,
 * residual or GLU, its last block folding the post norm. */
cudaError_t mc_gemv_legacy_post(const mc_config *c, const mc_matrix *w, const float *x, float *y,
                                const mc_post_args *pn, cudaStream_t st);
cudaError_t mc_gemv_kquant_post(const mc_config *c, const mc_matrix *w, const float *x, float *y,
                                const mc_post_args *pn, cudaStream_t st);
/* postnorm=prologue (cuda_kernels.h's mc_gemv_pro) on the family's narrow forms. */
bool mc_gemv_legacy_pro_serves(const mc_config *c, const mc_matrix *w, int glu);
cudaError_t mc_gemv_legacy_pro(const mc_config *c, int glu, const mc_matrix *w, const mc_pro_args *pro,
                               const float *norm_w, float eps, float *y, cudaStream_t st);

/* The kernel family of a kernel's host function pointer (graph census), NULL for another. */
const char *mc_gemv_legacy_family(const void *func);
const char *mc_gemv_kquant_family(const void *func);

#ifdef __cplusplus
}
#endif
#endif
