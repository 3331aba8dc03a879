/* gemv_kquant.cu: the Q4_K, Q5_K, Q6_K GEMVs and embedding lookups (gemv_quant.h). Placeholder until the
 * kernels land: no type is served, so the weights refuse these types by name. */
#include "cuda_common.cuh"
#include "gemv_quant.h"

bool mc_qlayout_kquant(uint32_t, uint64_t, uint64_t *, uint64_t *) { return false; }
void mc_qrepack_kquant(uint32_t, const uint8_t *, uint64_t, uint8_t *, uint8_t *) {}
cudaError_t mc_gemv_kquant(const mc_config *, int, const mc_matrix *, const float *, const float *, float, const float *,
                           const float *, float *, cudaStream_t) {
    return cudaErrorNotSupported;
}
cudaError_t mc_embed_kquant(const mc_matrix *, const int32_t *, float, float *, cudaStream_t) { return cudaErrorNotSupported; }
const char *mc_gemv_kquant_family(const void *) { return NULL; }
