/* token.cu: the small kernels of a step: the embedding of the input token, the commit of the
 * position, and the token hand-over between steps. */
#include "cuda_common.cuh"

MC_DYNAMIC_SMEM_ANCHOR(mc_smem_anchor_token)

/* Per token: reads *token and one embedding row (cols elements); writes x (cols floats). */
__global__ void embed_row(const mc_matrix emb, const int32_t *token, float *x) {
    int32_t t = *token;
    if (t < 0 || (uint32_t)t >= emb.rows)
        t = 0;
    uint32_t eb = emb.type == MEMRA_TYPE_F32 ? 4 : emb.type == MEMRA_TYPE_Q8_0 ? 1 : 2;
    const char *row = (const char *)emb.data + (size_t)t * emb.stride * eb;
    for (uint32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < emb.cols; c += gridDim.x * blockDim.x) {
        float v;
        switch (emb.type) {
        case MEMRA_TYPE_F32: v = ((const float *)row)[c]; break;
        case MEMRA_TYPE_F16: v = __half2float(__ushort_as_half(((const uint16_t *)row)[c])); break;
        case MEMRA_TYPE_BF16: v = __uint_as_float((uint32_t)((const uint16_t *)row)[c] << 16); break;
        default: {
            const uint16_t *sc = emb.scales + (size_t)t * (emb.cols / MEMRA_Q8_0_BLOCK);
            v = (float)((const int8_t *)row)[c] * __half2float(__ushort_as_half(sc[c / MEMRA_Q8_0_BLOCK]));
        }
        }
        x[c] = v;
    }
}

cudaError_t mc_embed(const mc_matrix *emb, const int32_t *token, float *x, cudaStream_t st) {
    uint32_t blocks = (emb->cols + 255) / 256;
    embed_row<<<blocks, 256, 0, st>>>(*emb, token, x);
    return cudaGetLastError();
}

/* Per stage and token: *pos += 1 (the commit); *dst = *src (the sampled token handed to the next
 * step's embedding). */
__global__ void position_commit(int32_t *pos) { *pos += 1; }
__global__ void token_copy(int32_t *dst, const int32_t *src) { *dst = *src; }

cudaError_t mc_commit(int32_t *pos, cudaStream_t st) {
    position_commit<<<1, 1, 0, st>>>(pos);
    return cudaGetLastError();
}

cudaError_t mc_copy_token(int32_t *dst, const int32_t *src, cudaStream_t st) {
    token_copy<<<1, 1, 0, st>>>(dst, src);
    return cudaGetLastError();
}

const char *mc_token_family(const void *f) {
    static const struct {
        const void *func;
        const char *family;
    } table[] = {
        {(const void *)embed_row, "embed"},
        {(const void *)position_commit, "commit"},
        {(const void *)token_copy, "token"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].func == f)
            return table[i].family;
    return NULL;
}
