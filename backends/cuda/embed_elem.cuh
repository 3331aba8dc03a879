/* embed_elem.cuh: one element of an embedding row, the one expression per type that every
 * embedding writes: token.cu's embed_row (a step's input) and embed_rows (a prefill chunk's), and
 * commit=handoff's fold in the sampler's last block (sampler.cu). The row is dequantized as
 * memra/quant.h does (check_kquant and check_quant_gemv compare mc_embed with it bit for bit). */
#ifndef MEMRA_EMBED_ELEM_CUH
#define MEMRA_EMBED_ELEM_CUH

#include "cuda_common.cuh"
#include "gemv_quant.h"
#include "kquant_layout.h"
#include "legacy_layout.h"

/* Element c of row t (already clamped to [0, rows)) of emb, times scale. */
__device__ __forceinline__ float mc_embed_elem(const mc_matrix &emb, int32_t t, uint32_t c, float scale) {
    switch (emb.type) {
    case MEMRA_TYPE_F32: return ((const float *)emb.data)[(size_t)t * emb.stride + c] * scale;
    case MEMRA_TYPE_F16:
        return __half2float(__ushort_as_half(((const uint16_t *)emb.data)[(size_t)t * emb.stride + c])) * scale;
    case MEMRA_TYPE_BF16:
        return __uint_as_float((uint32_t)((const uint16_t *)emb.data)[(size_t)t * emb.stride + c] << 16) * scale;
    case MEMRA_TYPE_Q8_0: {
        const int8_t *row = (const int8_t *)emb.data + (size_t)t * emb.stride;
        const uint16_t *sc = emb.scales + (size_t)t * (emb.cols / MEMRA_Q8_0_BLOCK);
        return (float)row[c] * __half2float(__ushort_as_half(sc[c / MEMRA_Q8_0_BLOCK])) * scale;
    }
    case MEMRA_TYPE_Q4_K:
    case MEMRA_TYPE_Q5_K:
    case MEMRA_TYPE_Q6_K: {
        const uint8_t *d = (const uint8_t *)emb.data + (size_t)t * emb.stride;
        const uint8_t *a = (const uint8_t *)emb.aux + (size_t)t * emb.aux_stride;
        return __fmul_rn(mc_kq_elem(emb.type, d, a, emb.cols / MEMRA_QK_K, c), scale);
    }
    default: { /* Q4_0 ... Q5_1 */
        const uint8_t *d = (const uint8_t *)emb.data + (size_t)t * emb.stride;
        const uint8_t *a = (const uint8_t *)emb.aux + (size_t)t * emb.aux_stride;
        const float v = mc_ll_elem(emb.type, d, a, emb.cols, c);
        return scale == 1.0f ? v : __fmul_rn(v, scale);
    }
    }
}

/* x = row t of emb times scale, by the calling block's threads (t < 0: nothing, the logits were bad). */
__device__ __forceinline__ void mc_embed_block(const mc_matrix &emb, int32_t t, float scale, float *x) {
    if (t < 0)
        return;
    if ((uint32_t)t >= emb.rows)
        t = 0;
    for (uint32_t c = threadIdx.x; c < emb.cols; c += blockDim.x)
        x[c] = mc_embed_elem(emb, t, c, scale);
}

#endif
