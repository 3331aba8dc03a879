/* cpu_kernels.c: dot products, matrix-vector products, RMSNorm, RoPE and attention for the cpu
 * backend, with the fixed summation order cpu_kernels.h describes. Weights are decoded inside the
 * inner loops, never copied. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_X86_PATHS 1
#endif

#include "cpu_kernels.h"
#include "memra/gguf.h"
#include "memra/numeric.h"
#include "memra/quant.h"

static float f16_table[65536];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;

/* The hand-written AVX2 (and F16C) kernels for F16 and Q8_0, chosen once with the table; they
 * give the bits of the portable kernels (compare by building with -DCPU_NO_AVX2). */
static int use_avx2, use_f16c;

static void build_f16_table(void) {
    for (uint32_t h = 0; h < 65536; h++)
        f16_table[h] = memra_f16_to_f32((uint16_t)h);
#if defined(CPU_X86_PATHS) && !defined(CPU_NO_AVX2)
    __builtin_cpu_init();
    use_avx2 = __builtin_cpu_supports("avx2");
    use_f16c = use_avx2; /* every AVX2 processor has F16C; clang 14 cannot ask for "f16c" */
#endif
}

void cpu_kernels_init(void) { pthread_once(&f16_once, build_f16_table); }

/* The 8 accumulators are the 8 lanes of one vector (GCC/clang vector extensions): lane j adds
 * the products of elements i = j (mod 8) in increasing i, exactly the scalar order, with one
 * IEEE multiply and one add per element (the build forbids contraction into FMA). The compiler
 * maps a lane-wise vector onto whatever registers the target has (2 x SSE, 1 x AVX), which
 * changes speed, never bits. With GCC each kernel is also compiled for x86-64-v3 (AVX2) and
 * picked at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define CPU_KERNEL __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CPU_KERNEL
#endif

typedef float cpu_v8 __attribute__((vector_size(32)));
typedef int8_t cpu_v8i8 __attribute__((vector_size(8)));
typedef uint16_t cpu_v8u16 __attribute__((vector_size(16)));
typedef uint32_t cpu_v8u32 __attribute__((vector_size(32)));
typedef int32_t cpu_v8i32 __attribute__((vector_size(32)));

/* Macros, not functions: a 32-byte vector passed or returned by value has an ABI that differs
 * with and without AVX, which the compilers rightly warn about. */
#define CPU_LOAD8(dst, p) memcpy(&(dst), (p), sizeof(cpu_v8))
/* ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)) */
#define CPU_REDUCE8(a) ((((a)[0] + (a)[1]) + ((a)[2] + (a)[3])) + (((a)[4] + (a)[5]) + ((a)[6] + (a)[7])))

CPU_KERNEL float cpu_dot_f32(const float *a, const float *b, uint32_t n) {
    cpu_v8 acc = {0};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        cpu_v8 av, bv;
        CPU_LOAD8(av, a + i);
        CPU_LOAD8(bv, b + i);
        acc += av * bv;
    }
    float sum = CPU_REDUCE8(acc);
    for (; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

CPU_KERNEL static float dot_f16(const uint16_t *w, const float *x, uint32_t n) {
    cpu_v8 acc = {0};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        cpu_v8 wv = {f16_table[w[i]],     f16_table[w[i + 1]], f16_table[w[i + 2]], f16_table[w[i + 3]],
                     f16_table[w[i + 4]], f16_table[w[i + 5]], f16_table[w[i + 6]], f16_table[w[i + 7]]};
        cpu_v8 xv;
        CPU_LOAD8(xv, x + i);
        acc += wv * xv;
    }
    float sum = CPU_REDUCE8(acc);
    for (; i < n; i++)
        sum += f16_table[w[i]] * x[i];
    return sum;
}

CPU_KERNEL static float dot_bf16(const uint16_t *w, const float *x, uint32_t n) {
    cpu_v8 acc = {0};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        cpu_v8u16 h;
        memcpy(&h, w + i, sizeof h);
        cpu_v8u32 bits = __builtin_convertvector(h, cpu_v8u32) << 16;
        cpu_v8 wv;
        memcpy(&wv, &bits, sizeof wv);
        cpu_v8 xv;
        CPU_LOAD8(xv, x + i);
        acc += wv * xv;
    }
    float sum = CPU_REDUCE8(acc);
    for (; i < n; i++)
        sum += memra_bits_to_f32((uint32_t)w[i] << 16) * x[i];
    return sum;
}

/* A Q8_0 block: an F16 scale d, then 32 int8 q; the weight is d * q. Lane j sums, per block, the
 * products q * x of the block's elements j and j + 8, 16, 24 (q widened to float, exact), scales
 * that by d and adds it to its row total in block order; the 8 lanes are reduced once per row. */
CPU_KERNEL static float dot_q8_0(const uint8_t *row, const float *x, uint32_t n) {
    cpu_v8 total = {0};
    for (uint32_t b = 0; b < n / MEMRA_Q8_0_BLOCK; b++) {
        const uint8_t *blk = row + (size_t)b * MEMRA_Q8_0_BLOCK_BYTES;
        const float *xb = x + (size_t)b * MEMRA_Q8_0_BLOCK;
        cpu_v8 acc = {0};
        for (uint32_t i = 0; i < MEMRA_Q8_0_BLOCK; i += 8) {
            cpu_v8i8 q;
            memcpy(&q, blk + 2 + i, sizeof q);
            cpu_v8 xv;
            CPU_LOAD8(xv, xb + i);
            /* int8 -> int32 -> float: both exact; GCC vectorises the two steps, not the one. */
            acc += __builtin_convertvector(__builtin_convertvector(q, cpu_v8i32), cpu_v8) * xv;
        }
        uint16_t d_bits;
        memcpy(&d_bits, blk, 2);
        total += f16_table[d_bits] * acc;
    }
    return CPU_REDUCE8(total);
}

/* The other quantized rows (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K): each block is dequantized
 * into floats exactly as memra/quant.h defines them, then dotted with x in the Q8_0 order: lane j
 * sums, per block, the products w * x of the block's elements i = j (mod 8) in increasing i, adds
 * that to its row total in block order; the 8 lanes are reduced once per row. One kernel per
 * type, so the block's dequantization is inlined. */
#define CPU_DOT_QUANT(name, QK, BYTES, DEQUANT)                                                                        \
    CPU_KERNEL static float name(const uint8_t *row, const float *x, uint32_t n) {                                     \
        cpu_v8 total = {0};                                                                                            \
        float w[QK];                                                                                                   \
        for (uint32_t b = 0; b < n / (QK); b++) {                                                                      \
            DEQUANT(row + (size_t)b * (BYTES), w);                                                                     \
            const float *xb = x + (size_t)b * (QK);                                                                    \
            cpu_v8 acc = {0};                                                                                          \
            for (uint32_t i = 0; i < (QK); i += 8) {                                                                   \
                cpu_v8 wv, xv;                                                                                         \
                CPU_LOAD8(wv, w + i);                                                                                  \
                CPU_LOAD8(xv, xb + i);                                                                                 \
                acc += wv * xv;                                                                                        \
            }                                                                                                          \
            total += acc;                                                                                              \
        }                                                                                                              \
        return CPU_REDUCE8(total);                                                                                     \
    }

/* The same dot of one row with nx inputs (a prefill chunk's rows, x_stride floats apart), the
 * row's blocks dequantized once for all of them: each input's lanes see exactly the operations,
 * in the order, of the kernel above (the block's w, then acc += w * x by lane, total += acc in
 * block order, one reduction), so out[j * out_stride] has the bits of name(row, x_j, n). */
#define CPU_DOT_QUANT_MULTI(name, QK, BYTES, DEQUANT)                                                                  \
    CPU_KERNEL static void name(const uint8_t *row, const float *x, size_t x_stride, uint32_t nx, uint32_t n,          \
                                float *out, size_t out_stride) {                                                       \
        cpu_v8 total[CPU_MULTI_MAX];                                                                                   \
        memset(total, 0, sizeof total);                                                                                \
        float w[QK];                                                                                                   \
        for (uint32_t b = 0; b < n / (QK); b++) {                                                                      \
            DEQUANT(row + (size_t)b * (BYTES), w);                                                                     \
            for (uint32_t j = 0; j < nx; j++) {                                                                        \
                const float *xb = x + j * x_stride + (size_t)b * (QK);                                                 \
                cpu_v8 acc = {0};                                                                                      \
                for (uint32_t i = 0; i < (QK); i += 8) {                                                               \
                    cpu_v8 wv, xv;                                                                                     \
                    CPU_LOAD8(wv, w + i);                                                                              \
                    CPU_LOAD8(xv, xb + i);                                                                             \
                    acc += wv * xv;                                                                                    \
                }                                                                                                      \
                total[j] += acc;                                                                                       \
            }                                                                                                          \
        }                                                                                                              \
        for (uint32_t j = 0; j < nx; j++)                                                                              \
            out[j * out_stride] = CPU_REDUCE8(total[j]);                                                               \
    }

CPU_DOT_QUANT_MULTI(dot_q4_0_multi, MEMRA_QK, sizeof(memra_block_q4_0), memra_dequantize_q4_0)
CPU_DOT_QUANT_MULTI(dot_q4_1_multi, MEMRA_QK, sizeof(memra_block_q4_1), memra_dequantize_q4_1)
CPU_DOT_QUANT_MULTI(dot_q5_0_multi, MEMRA_QK, sizeof(memra_block_q5_0), memra_dequantize_q5_0)
CPU_DOT_QUANT_MULTI(dot_q5_1_multi, MEMRA_QK, sizeof(memra_block_q5_1), memra_dequantize_q5_1)
CPU_DOT_QUANT_MULTI(dot_q4_k_multi, MEMRA_QK_K, sizeof(memra_block_q4_k), memra_dequantize_q4_k)
CPU_DOT_QUANT_MULTI(dot_q5_k_multi, MEMRA_QK_K, sizeof(memra_block_q5_k), memra_dequantize_q5_k)
CPU_DOT_QUANT_MULTI(dot_q6_k_multi, MEMRA_QK_K, sizeof(memra_block_q6_k), memra_dequantize_q6_k)

CPU_DOT_QUANT(dot_q4_0, MEMRA_QK, sizeof(memra_block_q4_0), memra_dequantize_q4_0)
CPU_DOT_QUANT(dot_q4_1, MEMRA_QK, sizeof(memra_block_q4_1), memra_dequantize_q4_1)
CPU_DOT_QUANT(dot_q5_0, MEMRA_QK, sizeof(memra_block_q5_0), memra_dequantize_q5_0)
CPU_DOT_QUANT(dot_q5_1, MEMRA_QK, sizeof(memra_block_q5_1), memra_dequantize_q5_1)
CPU_DOT_QUANT(dot_q4_k, MEMRA_QK_K, sizeof(memra_block_q4_k), memra_dequantize_q4_k)
CPU_DOT_QUANT(dot_q5_k, MEMRA_QK_K, sizeof(memra_block_q5_k), memra_dequantize_q5_k)
CPU_DOT_QUANT(dot_q6_k, MEMRA_QK_K, sizeof(memra_block_q6_k), memra_dequantize_q6_k)

#if defined(CPU_X86_PATHS)
/* dot_f16 with the F16C conversion (exact, like the table): the same lane operations, the same
 * bits. */
__attribute__((target("avx,f16c"))) static float dot_f16_f16c(const uint16_t *w, const float *x, uint32_t n) {
    __m256 acc = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i)));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(wv, _mm256_loadu_ps(x + i)));
    }
    float t[8];
    _mm256_storeu_ps(t, acc);
    float sum = CPU_REDUCE8(t);
    for (; i < n; i++)
        sum += f16_table[w[i]] * x[i];
    return sum;
}

/* dot_q8_0 written with AVX2 intrinsics, because GCC widens int8 vectors element by element: the
 * same lane operations in the same order (sign-extend, convert, multiply, add; no FMA), so the
 * same bits. */
__attribute__((target("avx2"))) static float dot_q8_0_avx2(const uint8_t *row, const float *x, uint32_t n) {
    __m256 total = _mm256_setzero_ps();
    for (uint32_t b = 0; b < n / MEMRA_Q8_0_BLOCK; b++) {
        const uint8_t *blk = row + (size_t)b * MEMRA_Q8_0_BLOCK_BYTES;
        const float *xb = x + (size_t)b * MEMRA_Q8_0_BLOCK;
        __m256 acc = _mm256_setzero_ps();
        for (uint32_t i = 0; i < MEMRA_Q8_0_BLOCK; i += 8) {
            __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + i))));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(q, _mm256_loadu_ps(xb + i)));
        }
        uint16_t d_bits;
        memcpy(&d_bits, blk, 2);
        total = _mm256_add_ps(total, _mm256_mul_ps(_mm256_set1_ps(f16_table[d_bits]), acc));
    }
    float t[8];
    _mm256_storeu_ps(t, total);
    return CPU_REDUCE8(t);
}
#endif

void cpu_matvec_rows(const cpu_matrix *w, const float *x, float *y, uint32_t r0, uint32_t r1) {
    const uint8_t *row = w->data + (size_t)r0 * w->row_bytes;
    switch (w->type) {
    case MEMRA_TYPE_F32:
        for (uint32_t r = r0; r < r1; r++, row += w->row_bytes)
            y[r] = cpu_dot_f32((const float *)(const void *)row, x, w->cols);
        break;
    case MEMRA_TYPE_F16:
#if defined(CPU_X86_PATHS)
        if (use_f16c) {
            for (uint32_t r = r0; r < r1; r++, row += w->row_bytes)
                y[r] = dot_f16_f16c((const uint16_t *)(const void *)row, x, w->cols);
            break;
        }
#endif
        for (uint32_t r = r0; r < r1; r++, row += w->row_bytes)
            y[r] = dot_f16((const uint16_t *)(const void *)row, x, w->cols);
        break;
    case MEMRA_TYPE_BF16:
        for (uint32_t r = r0; r < r1; r++, row += w->row_bytes)
            y[r] = dot_bf16((const uint16_t *)(const void *)row, x, w->cols);
        break;
    case MEMRA_TYPE_Q8_0:
#if defined(CPU_X86_PATHS)
        if (use_avx2) {
            for (uint32_t r = r0; r < r1; r++, row += w->row_bytes)
                y[r] = dot_q8_0_avx2(row, x, w->cols);
            break;
        }
#endif
        for (uint32_t r = r0; r < r1; r++, row += w->row_bytes)
            y[r] = dot_q8_0(row, x, w->cols);
        break;
#define CPU_ROWS(fn)                                                                                                   \
    for (uint32_t r = r0; r < r1; r++, row += w->row_bytes)                                                            \
        y[r] = fn(row, x, w->cols);                                                                                    \
    break
    case MEMRA_TYPE_Q4_0: CPU_ROWS(dot_q4_0);
    case MEMRA_TYPE_Q4_1: CPU_ROWS(dot_q4_1);
    case MEMRA_TYPE_Q5_0: CPU_ROWS(dot_q5_0);
    case MEMRA_TYPE_Q5_1: CPU_ROWS(dot_q5_1);
    case MEMRA_TYPE_Q4_K: CPU_ROWS(dot_q4_k);
    case MEMRA_TYPE_Q5_K: CPU_ROWS(dot_q5_k);
    case MEMRA_TYPE_Q6_K: CPU_ROWS(dot_q6_k);
#undef CPU_ROWS
    default: /* refused at open */ break;
    }
}

void cpu_matvec_rows_multi(const cpu_matrix *w, const float *x, size_t x_stride, uint32_t nx, float *y, size_t y_stride,
                           uint32_t r0, uint32_t r1) {
    void (*multi)(const uint8_t *, const float *, size_t, uint32_t, uint32_t, float *, size_t) = NULL;
    switch (w->type) {
    case MEMRA_TYPE_Q4_0: multi = dot_q4_0_multi; break;
    case MEMRA_TYPE_Q4_1: multi = dot_q4_1_multi; break;
    case MEMRA_TYPE_Q5_0: multi = dot_q5_0_multi; break;
    case MEMRA_TYPE_Q5_1: multi = dot_q5_1_multi; break;
    case MEMRA_TYPE_Q4_K: multi = dot_q4_k_multi; break;
    case MEMRA_TYPE_Q5_K: multi = dot_q5_k_multi; break;
    case MEMRA_TYPE_Q6_K: multi = dot_q6_k_multi; break;
    default: break;
    }
    if (!multi) { /* a cheap row: each input in turn over the rows, hot in cache */
        for (uint32_t j = 0; j < nx; j++)
            cpu_matvec_rows(w, x + j * x_stride, y + j * y_stride, r0, r1);
        return;
    }
    const uint8_t *row = w->data + (size_t)r0 * w->row_bytes;
    for (uint32_t r = r0; r < r1; r++, row += w->row_bytes)
        for (uint32_t j0 = 0; j0 < nx; j0 += CPU_MULTI_MAX) {
            uint32_t n = nx - j0 < CPU_MULTI_MAX ? nx - j0 : CPU_MULTI_MAX;
            multi(row, x + j0 * x_stride, x_stride, n, w->cols, y + j0 * y_stride + r, y_stride);
        }
}

void cpu_matrix_row(const cpu_matrix *w, uint32_t r, float *out) {
    const uint8_t *row = w->data + (size_t)r * w->row_bytes;
    switch (w->type) {
    case MEMRA_TYPE_F32: memcpy(out, row, (size_t)w->cols * sizeof(float)); break;
    case MEMRA_TYPE_F16:
        for (uint32_t i = 0; i < w->cols; i++)
            out[i] = f16_table[((const uint16_t *)(const void *)row)[i]];
        break;
    case MEMRA_TYPE_BF16:
        for (uint32_t i = 0; i < w->cols; i++)
            out[i] = memra_bits_to_f32((uint32_t)((const uint16_t *)(const void *)row)[i] << 16);
        break;
    case MEMRA_TYPE_Q8_0:
        for (uint32_t b = 0; b < w->cols / MEMRA_Q8_0_BLOCK; b++) {
            const uint8_t *blk = row + (size_t)b * MEMRA_Q8_0_BLOCK_BYTES;
            uint16_t d_bits;
            memcpy(&d_bits, blk, 2);
            float d = f16_table[d_bits];
            for (uint32_t i = 0; i < MEMRA_Q8_0_BLOCK; i++)
                out[b * MEMRA_Q8_0_BLOCK + i] = d * (float)((const int8_t *)(blk + 2))[i];
        }
        break;
    case MEMRA_TYPE_Q4_0:
    case MEMRA_TYPE_Q4_1:
    case MEMRA_TYPE_Q5_0:
    case MEMRA_TYPE_Q5_1:
    case MEMRA_TYPE_Q4_K:
    case MEMRA_TYPE_Q5_K:
    case MEMRA_TYPE_Q6_K: {
        uint32_t qk = memra_quant_block_elems(w->type), bytes = memra_quant_block_bytes(w->type);
        for (uint32_t b = 0; b < w->cols / qk; b++)
            memra_dequantize_block(w->type, row + (size_t)b * bytes, out + (size_t)b * qk);
        break;
    }
    default: break;
    }
}

void cpu_rmsnorm(const float *x, const float *w, uint32_t n, float eps, float *out) {
    float mean = cpu_dot_f32(x, x, n) / (float)n;
    float scale = 1.0f / sqrtf(mean + eps);
    for (uint32_t i = 0; i < n; i++)
        out[i] = (x[i] * scale) * w[i];
}

void cpu_rope_head(float *x, uint32_t head_dim, int neox, const float *cos_t, const float *sin_t) {
    uint32_t half = head_dim / 2;
    for (uint32_t i = 0; i < half; i++) {
        uint32_t a = neox ? i : 2 * i;
        uint32_t b = neox ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * cos_t[i] - x1 * sin_t[i];
        x[b] = x0 * sin_t[i] + x1 * cos_t[i];
    }
}

void cpu_attention_head(const float *q, const float *k, size_t k_stride, const float *v, size_t v_stride,
                        uint32_t head_dim, uint32_t head_dim_v, uint32_t n_pos, float scale, float *scores,
                        float *out) {
    float max = -INFINITY;
    for (uint32_t t = 0; t < n_pos; t++) {
        scores[t] = cpu_dot_f32(q, k + (size_t)t * k_stride, head_dim) * scale;
        if (scores[t] > max)
            max = scores[t];
    }
    float sum = 0.0f;
    for (uint32_t t = 0; t < n_pos; t++) {
        scores[t] = expf(scores[t] - max);
        sum += scores[t];
    }
    float inv = 1.0f / sum;
    for (uint32_t d = 0; d < head_dim_v; d++)
        out[d] = 0.0f;
    for (uint32_t t = 0; t < n_pos; t++) {
        float p = scores[t] * inv;
        const float *vt = v + (size_t)t * v_stride;
        for (uint32_t d = 0; d < head_dim_v; d++)
            out[d] += p * vt[d];
    }
}
