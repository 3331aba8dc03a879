/* gemv_flat.cuh: the flat row-group dot of the fused mixture-of-experts kernels (internal, device
 * code): every chunk of a lane in flight at once, the row-group GEMV's bits (gemv_body.cuh). Used by
 * gemv_moe.cu (the experts' flat gate/up and the down GEMV with the combination) and moe_router.cu
 * (the fused router). */
#ifndef MEMRA_CUDA_GEMV_FLAT_CUH
#define MEMRA_CUDA_GEMV_FLAT_CUH

#include "cuda_common.cuh"
#include "gemv_body.cuh"

/* mc_rows_dot's sums with all of a lane's chunks in flight at once: NC chunks a lane at most (the
 * caller's w.cols / E <= 32 KS NC), the same chunks in the same order (lane l of part p: chunk
 * 32 p + l, then every 32 KS-th), the same per-chunk arithmetic, the same tail and warp trees:
 * the same bits, without the double buffer. The weights (and Q8_0 block scales) are queued
 * first, then mc_wait_prior_grid(family), then x is read (x' with po as mc_x_chunk_po). */
template <uint32_t T, int NORM, int KS, int NC>
__device__ __forceinline__ void mc_rows_dot_flat(const mc_matrix &w, uint32_t r0, const float *x, const float *po,
                                                 float po_scale, const float *nw, uint32_t lane, uint32_t part,
                                                 unsigned family, float (&out)[MC_GEMV_ROWS], float &ss_out) {
    constexpr uint32_t LS = 32 * KS, E = mc_elems<T>::n, EB = 16 / E;
    /* 32-bit offsets of the rows (the callers' matrices are under 4 GiB: mc_flat_fits) */
    uint32_t ro[MC_GEMV_ROWS];
#pragma unroll
    for (int k = 0; k < MC_GEMV_ROWS; k++)
        ro[k] = r0 + k < w.rows ? r0 + k : r0;
    const char *const data = (const char *)w.data;
    const uint16_t *const scales = w.scales;
    const uint32_t row_bytes = w.stride * EB, row_scales = w.cols / MEMRA_Q8_0_BLOCK;
    const uint32_t nfull = w.cols / E, first = lane + 32 * part;
    uint4 wv[NC][MC_GEMV_ROWS];
    uint16_t sv[NC][MC_GEMV_ROWS];
#pragma unroll
    for (int m = 0; m < NC; m++) {
        const uint32_t idx = first + LS * m;
        if (idx < nfull) {
#pragma unroll
            for (int k = 0; k < MC_GEMV_ROWS; k++) {
                wv[m][k] = __ldcs((const uint4 *)(data + (ro[k] * row_bytes + idx * 16)));
                if (T == MEMRA_TYPE_Q8_0)
                    sv[m][k] = __ldg(scales + (ro[k] * row_scales + idx / 2));
            }
        }
    }
    mc_wait_prior_grid(family); /* x (and po) come from earlier kernels */
    float acc[MC_GEMV_ROWS], ss = 0.0f;
#pragma unroll
    for (int k = 0; k < MC_GEMV_ROWS; k++)
        acc[k] = 0.0f;
#pragma unroll
    for (int m = 0; m < NC; m++) {
        const uint32_t idx = first + LS * m;
        if (idx < nfull) {
            float4 xv[E / 4];
            mc_x_chunk_po<T, NORM>(x, po, po_scale, nw, idx, xv, ss);
#pragma unroll
            for (int k = 0; k < MC_GEMV_ROWS; k++)
                acc[k] += mc_dot_chunk<T>(wv[m][k], xv,
                                          T == MEMRA_TYPE_Q8_0 ? __half2float(__ushort_as_half(sv[m][k])) : 1.0f);
        }
    }
    if (nfull * E < w.cols && part == 0 && lane == (nfull & 31)) {
        for (uint32_t c = nfull * E; c < w.cols; c++) {
            float xc = x[c];
            if (po)
                xc = __fadd_rn(xc, __fmul_rn(po[c], po_scale));
            if (NORM) {
                ss = fmaf(xc, xc, ss);
                xc *= nw[c];
            }
#pragma unroll
            for (int k = 0; k < MC_GEMV_ROWS; k++)
                acc[k] = fmaf(mc_elem<T>(data + (size_t)ro[k] * row_bytes, c), xc, acc[k]);
        }
    }
    ss_out = NORM ? mc_warp_sum(ss) : 0.0f;
#pragma unroll
    for (int k = 0; k < MC_GEMV_ROWS; k++)
        out[k] = mc_warp_sum(acc[k]);
}

/* Whether rows x cols of type fit mc_rows_dot_flat's 32-bit offsets (bytes and Q8_0 scales). */
static inline int mc_flat_fits(uint32_t type, uint64_t rows, uint64_t cols) {
    return mc_matrix_bytes(type, rows, cols) < 0xffffffffull;
}

/* Chunks a lane takes at most with KS column parts: the flat kernels' NC (1, 2 or 4), 0 where a
 * row has more than 4 x 32 KS chunks (the fused kernels then do not serve). */
static inline uint32_t mc_flat_nc(uint32_t type, uint32_t cols, uint32_t ks) {
    const uint32_t eb = mc_type_elem_bytes(type);
    if (eb == 0)
        return 0;
    const uint32_t nfull = cols / (16 / eb), per = (nfull + 32 * ks - 1) / (32 * ks);
    return per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : 0;
}

#endif
