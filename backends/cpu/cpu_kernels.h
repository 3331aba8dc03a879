/* cpu_kernels.h: the arithmetic of the cpu backend: dot products and matrix-vector products
 * over F32, F16, BF16, Q8_0 and the quantized types of memra/quant.h (Q4_0, Q4_1, Q5_0, Q5_1,
 * Q4_K, Q5_K, Q6_K) read in place from the mapped file, RMSNorm, RoPE and one head of attention.
 *
 * Fixed summation order everywhere: a dot product of n elements keeps 8 float accumulators,
 * acc[j] over elements i = j (mod 8) in increasing i, then adds them as
 * ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)) and finally the tail (n mod 8, in order). A Q8_0 row
 * keeps 8 lane totals: per 32-element block, lane j sums q * x over the block's elements j, j+8,
 * j+16, j+24 (q as float), multiplies that by the block's scale and adds it to its total, blocks
 * in order; the totals are reduced as above once per row. The other quantized types do the same
 * with each block first dequantized to floats (memra/quant.h): lane j sums w * x over the block's
 * elements i = j (mod 8), adds that to its total, blocks in order. So every output element is a function
 * of its inputs alone: the thread that computes it and the thread count do not matter. */
#ifndef MEMRA_CPU_KERNELS_H
#define MEMRA_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* A matrix as the kernels read it: rows of cols elements of type, row_bytes apart. */
typedef struct cpu_matrix {
    const uint8_t *data;
    uint32_t type; /* memra_tensor_type: F32, F16, BF16, Q8_0 or a quant.h type */
    uint32_t rows, cols;
    size_t row_bytes;
} cpu_matrix;

/* Builds the F16 decoding table once per process (thread-safe). */
void cpu_kernels_init(void);

float cpu_dot_f32(const float *a, const float *b, uint32_t n);

/* Inputs a prefill chunk dots with one dequantized row at once (cpu_matvec_rows_multi). */
#define CPU_MULTI_MAX 16u
/* y_j[r] = row r of w . x_j for rows [r0, r1) and nx inputs (x_j = x + j * x_stride, y_j = y + j *
 * y_stride), each element with the bits cpu_matvec_rows gives it: a quantized row is dequantized
 * once per block for up to CPU_MULTI_MAX inputs. */
void cpu_matvec_rows_multi(const cpu_matrix *w, const float *x, size_t x_stride, uint32_t nx, float *y, size_t y_stride,
                           uint32_t r0, uint32_t r1);
/* y[r] = W[r] . x for r in [r0, r1). Reads (r1 - r0) * row_bytes of W and cols floats of x. */
void cpu_matvec_rows(const cpu_matrix *w, const float *x, float *y, uint32_t r0, uint32_t r1);

/* Row `row` of W decoded to float (exact for F32/F16/BF16; the blocks' dequantization of
 * memra/quant.h for the quantized types). */
void cpu_matrix_row(const cpu_matrix *w, uint32_t row, float *out);

/* out = x * (1 / sqrt(mean(x^2) + eps)) * w, as llama.cpp computes it (scale, then weight). */
void cpu_rmsnorm(const float *x, const float *w, uint32_t n, float eps, float *out);

/* Rotates one head of head_dim elements in place: pair i is (2i, 2i+1) for NORMAL pairing,
 * (i, i + head_dim/2) for NEOX, by the angle whose cosine and sine are cos_t[i], sin_t[i]. */
void cpu_rope_head(float *x, uint32_t head_dim, int neox, const float *cos_t, const float *sin_t);

/* One attention head over positions [0, n_pos): scores q . k_t * scale, softmax with the max
 * subtracted, out = sum_t p_t v_t in increasing t. k rows are k_stride floats apart, v rows
 * v_stride apart. scores holds n_pos floats. */
void cpu_attention_head(const float *q, const float *k, size_t k_stride, const float *v, size_t v_stride,
                        uint32_t head_dim, uint32_t head_dim_v, uint32_t n_pos, float scale, float *scores, float *out);

#endif
