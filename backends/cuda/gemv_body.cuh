/* gemv_body.cuh: the device side of gemv.cu's F32/F16/BF16 GEMVs that more than one file runs:
 * the per-chunk helpers (one lane order, hence one set of bits), gemv_persistent_body, the row
 * groups of a persistent grid, and the row group's dot and finish (mc_rows_dot,
 * mc_rowgroup_finish) that gemv.cu's and gemv_moe.cu's kernels share. bench/gpu/chain_bench.cu
 * runs the same body phase after phase inside one cooperative kernel (the bits equal by
 * construction). */
#pragma once

#include "cuda_common.cuh"

#define MC_GEMV_WARPS 4u
#define MC_GEMV_UNROLL 2

/* ---- device helpers ----------------------------------------------------------------------- */

__device__ __forceinline__ float mc_bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float mc_bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }
__device__ __forceinline__ float mc_f16_lo(uint32_t u) {
    return __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
}
__device__ __forceinline__ float mc_f16_hi(uint32_t u) {
    return __half2float(__ushort_as_half((unsigned short)(u >> 16)));
}

/* Elements per 16-byte lane chunk. */
template <uint32_t T> struct mc_elems {
    static const uint32_t n = 16 / (T == MEMRA_TYPE_F32 ? 4 : T == MEMRA_TYPE_Q8_0 ? 1 : 2);
};

/* int8 to float without the (quarter-rate) integer conversion: the biased byte (q ^ 0x80 = q + 128)
 * becomes the low mantissa bits of 2^23, and 2^23 + 128 is subtracted: exact. */
__device__ __forceinline__ float mc_q8(uint32_t qx, uint32_t i) {
    return __int_as_float(__byte_perm(qx, 0x4B000000u, 0x7650u | i)) - 8388736.0f;
}

/* Dot of one 16-byte weight chunk with its x floats (already in registers), in element order. */
template <uint32_t T> __device__ __forceinline__ float mc_dot_chunk(uint4 w, const float4 *xv, float scale) {
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
    float acc = 0.0f;
    if (T == MEMRA_TYPE_F32) {
        acc = fmaf(__uint_as_float(u[0]), xv[0].x, acc);
        acc = fmaf(__uint_as_float(u[1]), xv[0].y, acc);
        acc = fmaf(__uint_as_float(u[2]), xv[0].z, acc);
        acc = fmaf(__uint_as_float(u[3]), xv[0].w, acc);
    } else if (T == MEMRA_TYPE_BF16 || T == MEMRA_TYPE_F16) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            uint32_t a = u[2 * i], b = u[2 * i + 1];
            if (T == MEMRA_TYPE_BF16) {
                acc = fmaf(mc_bf16_lo(a), xv[i].x, acc);
                acc = fmaf(mc_bf16_hi(a), xv[i].y, acc);
                acc = fmaf(mc_bf16_lo(b), xv[i].z, acc);
                acc = fmaf(mc_bf16_hi(b), xv[i].w, acc);
            } else {
                acc = fmaf(mc_f16_lo(a), xv[i].x, acc);
                acc = fmaf(mc_f16_hi(a), xv[i].y, acc);
                acc = fmaf(mc_f16_lo(b), xv[i].z, acc);
                acc = fmaf(mc_f16_hi(b), xv[i].w, acc);
            }
        }
    } else { /* Q8_0: 16 int8 quants of one block; the block's scale applied once */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t q = u[i] ^ 0x80808080u;
            acc = fmaf(mc_q8(q, 0), xv[i].x, acc);
            acc = fmaf(mc_q8(q, 1), xv[i].y, acc);
            acc = fmaf(mc_q8(q, 2), xv[i].z, acc);
            acc = fmaf(mc_q8(q, 3), xv[i].w, acc);
        }
        acc *= scale;
    }
    return acc;
}

/* One element of a stored row (the tail past the last full chunk). */
template <uint32_t T> __device__ __forceinline__ float mc_elem(const void *row, uint32_t c) {
    if (T == MEMRA_TYPE_F32)
        return ((const float *)row)[c];
    if (T == MEMRA_TYPE_BF16)
        return __uint_as_float((uint32_t)((const uint16_t *)row)[c] << 16);
    if (T == MEMRA_TYPE_F16)
        return __half2float(__ushort_as_half(((const uint16_t *)row)[c]));
    return (float)((const int8_t *)row)[c]; /* Q8_0 never has a tail: cols % 32 == 0 */
}

/* mc_x_chunk (below) with po, for the fused MoE kernels (gemv_flat.cuh): x + po * po_scale first (a
 * product and a sum, each rounded: moe.cu's moe_scale, granite's attention residual add), then the
 * norm's squares and weights in mc_x_chunk's order. With po NULL it is mc_x_chunk. */
template <uint32_t T, int NORM, int CG = 0>
__device__ __forceinline__ void mc_x_chunk_po(const float *x, const float *po, float po_scale, const float *nw,
                                              uint32_t idx, float4 (&xv)[mc_elems<T>::n / 4], float &ss) {
    constexpr uint32_t E = mc_elems<T>::n;
#pragma unroll
    for (uint32_t q = 0; q < E / 4; q++) {
        /* CG, for a body whose x another grid still writes (chain_bench's flag waits): 1 a plain
         * (coherent) load, ordered after the wait's acquire; 2 through L2 only (ld.global.cg).
         * The same values either way */
        const float4 *xp = (const float4 *)(x + (size_t)idx * E) + q;
        xv[q] = CG == 1 ? *xp : CG == 2 ? __ldcg(xp) : __ldg(xp);
        if (po) {
            const float4 a = __ldg((const float4 *)(po + (size_t)idx * E) + q);
            xv[q].x = __fadd_rn(xv[q].x, __fmul_rn(a.x, po_scale));
            xv[q].y = __fadd_rn(xv[q].y, __fmul_rn(a.y, po_scale));
            xv[q].z = __fadd_rn(xv[q].z, __fmul_rn(a.z, po_scale));
            xv[q].w = __fadd_rn(xv[q].w, __fmul_rn(a.w, po_scale));
        }
        if (NORM) {
            const float4 g = __ldg((const float4 *)(nw + (size_t)idx * E) + q);
            ss = fmaf(xv[q].x, xv[q].x, ss);
            ss = fmaf(xv[q].y, xv[q].y, ss);
            ss = fmaf(xv[q].z, xv[q].z, ss);
            ss = fmaf(xv[q].w, xv[q].w, ss);
            xv[q].x *= g.x;
            xv[q].y *= g.y;
            xv[q].z *= g.z;
            xv[q].w *= g.w;
        }
    }
}

/* x's chunk idx (the E floats a 16-byte weight chunk of type T meets) into xv; with NORM, its
 * squares added to ss in element order and the chunk scaled by the norm weights (x' = x * nw).
 * The one order of the F32/F16/BF16/Q8_0 float GEMVs (row-group and persistent), hence their equal
 * bits. */
template <uint32_t T, int NORM, int CG = 0>
__device__ __forceinline__ void mc_x_chunk(const float *x, const float *nw, uint32_t idx,
                                           float4 (&xv)[mc_elems<T>::n / 4], float &ss) {
    mc_x_chunk_po<T, NORM, CG>(x, NULL, 0.0f, nw, idx, xv, ss);
}

/* The wait of a GEMV body for its inputs: in a launched kernel, the programmatic launch's wait
 * (mc_wait_prior_grid) with the kernel's trigger family. A kernel running several bodies phase
 * after phase passes its grid barrier's wait instead. gemv_persistent_body also calls cols(c0, n)
 * (every lane of a warp, before the warp reads x's columns c0 .. c0+n-1) and stored(r0) (the lane
 * that has just stored row group r0's outputs), and reads x as cg says (mc_x_chunk_po's CG):
 * chain_bench's flag waits use them (a consumer reading x's columns as their producers finish);
 * here they are empty, so the production kernels compile as before. */
struct mc_pdl_wait {
    static constexpr int cg = 0;
    unsigned family;
    __device__ __forceinline__ void operator()() const { mc_wait_prior_grid(family); }
    __device__ __forceinline__ void cols(uint32_t, uint32_t) {}
    __device__ __forceinline__ void stored(uint32_t) const {}
};

/* ---- gemv_persistent: F32/F16/BF16, persistent blocks, loads flattened over row groups ----- */

/* gemv_rowgroup gives each warp one group of 4 rows, so every warp pays a load latency to start
 * and drains alone at the end, which short rows (few iterations per row) feel. Here a grid of at
 * most 4 blocks per multiprocessor takes contiguous, balanced ranges of row groups, and each warp
 * streams its row groups back to back, the next group's first chunks loaded while the current
 * group's last are summed. The arithmetic of a row group is exactly gemv_rowgroup's (the same
 * chunk order, the same sums): the same bits. Per call: reads and writes what gemv_rowgroup
 * does (F32/F16/BF16 only). */
template <uint32_t T, int SWIGLU, int NORM, int KS, typename Wait>
__device__ __forceinline__ void gemv_persistent_body(const mc_matrix w, const float *x, const float *norm_w, float eps,
                                                     const float *bias, const float *residual, float *y,
                                                     uint32_t n_groups, uint32_t bid, uint32_t nblocks, Wait wait) {
    __shared__ float red[2][MC_GEMV_WARPS][MC_GEMV_ROWS + 1];
    constexpr uint32_t SLOTS = MC_GEMV_WARPS / KS, U = MC_GEMV_UNROLL, LS = 32 * KS, PER_IT = LS * U;
    constexpr uint32_t E = mc_elems<T>::n, EB = 16 / E;
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % KS, slot = warp / KS;
    const uint32_t g0 = (uint32_t)((uint64_t)n_groups * bid / nblocks);
    const uint32_t g1 = (uint32_t)((uint64_t)n_groups * (bid + 1) / nblocks);
    const uint32_t n_my = g0 + slot < g1 ? (g1 - g0 - slot + SLOTS - 1) / SLOTS : 0;
    const uint32_t nfull = w.cols / E, niter = (nfull + PER_IT - 1) / PER_IT, total = n_my * niter;
    const uint32_t first = lane + 32 * part;
    uint4 wv[U][MC_GEMV_ROWS];
    auto load = [&](uint32_t k, uint32_t i) {
        const uint32_t r0 = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS;
#pragma unroll
        for (uint32_t u = 0; u < U; u++) {
            const uint32_t idx = first + PER_IT * i + LS * u;
            if (idx < nfull) {
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                    const uint32_t row = r0 + r < w.rows ? r0 + r : r0;
                    wv[u][r] = __ldcs((const uint4 *)((const char *)w.data + (size_t)row * w.stride * EB) + idx);
                }
            }
        }
    };
    if (total > 0)
        load(0, 0);
    if (total > 0)
        wait(); /* x (and the residual) come from earlier kernels (or phases) */
    float acc[MC_GEMV_ROWS], ss = 0.0f;
#pragma unroll
    for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
        acc[r] = 0.0f;
    uint32_t k = 0, i = 0;
    float pre[MC_GEMV_ROWS];
    for (uint32_t j = 0; j < total; j++) {
        uint4 cur[U][MC_GEMV_ROWS];
        if (i + 1 == niter && part == 0 && lane == 0) /* the residual (or bias) of the group, ahead */
            mc_rows_fetch<SWIGLU>(pre, (g0 + slot + SLOTS * k) * MC_GEMV_ROWS, w.rows, bias, residual);
#pragma unroll
        for (uint32_t u = 0; u < U; u++)
#pragma unroll
            for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                cur[u][r] = wv[u][r];
        if (j + 1 < total)
            load(i + 1 < niter ? k : k + 1, i + 1 < niter ? i + 1 : 0);
#pragma unroll
        for (uint32_t u = 0; u < U; u++) {
            const uint32_t idx = first + PER_IT * i + LS * u;
            wait.cols((idx - lane) * E, 32 * E); /* the warp's columns of this chunk (empty in production) */
            if (idx < nfull) {
                float4 xv[E / 4];
                mc_x_chunk<T, NORM, Wait::cg>(x, norm_w, idx, xv, ss);
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                    acc[r] += mc_dot_chunk<T>(cur[u][r], xv, 1.0f);
            }
        }
        if (++i < niter)
            continue;
        /* the row group's last iteration: the tail columns, sums, parts in order, write */
        const uint32_t r0 = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS, par = k & 1;
        if (nfull * E < w.cols && part == 0 && lane == (nfull & 31)) {
            for (uint32_t c = nfull * E; c < w.cols; c++) {
                float xc = x[c];
                if (NORM) {
                    ss = fmaf(xc, xc, ss);
                    xc *= norm_w[c];
                }
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                    const uint32_t row = r0 + r < w.rows ? r0 + r : r0;
                    acc[r] = fmaf(mc_elem<T>((const char *)w.data + (size_t)row * w.stride * EB, c), xc, acc[r]);
                }
            }
        }
        float d[MC_GEMV_ROWS], sst = NORM ? mc_warp_sum(ss) : 0.0f;
#pragma unroll
        for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
            d[r] = mc_warp_sum(acc[r]);
            acc[r] = 0.0f;
        }
        ss = 0.0f;
        i = 0;
        k++;
        if (KS > 1) {
            if (lane == 0) {
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                    red[par][warp][r] = d[r];
                red[par][warp][MC_GEMV_ROWS] = sst;
            }
            asm volatile("bar.sync %0, %1;" ::"r"(1 + slot), "r"(32 * KS) : "memory");
            if (part != 0)
                continue;
            for (uint32_t p = 1; p < KS; p++) {
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                    d[r] += red[par][warp + p][r];
                sst += red[par][warp + p][MC_GEMV_ROWS];
            }
        }
        if (lane != 0)
            continue;
        if (NORM) {
            const float scale = 1.0f / sqrtf(sst / (float)w.cols + eps);
#pragma unroll
            for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                d[r] *= scale;
        }
        mc_rows_store_pre<SWIGLU>(d, pre, r0, w.rows, bias, residual, y);
        wait.stored(r0);
    }
}

/* ---- the row group (gemv.cu's gemv_rowgroup, gemv_moe.cu's experts) ------------------------- */

/* Queues the weight chunks (and, for Q8_0, their block scales: a scale loaded at its use would
 * cost one memory latency per iteration) of the next iteration. */
template <uint32_t T>
__device__ __forceinline__ void mc_load_chunks(uint4 (&wv)[MC_GEMV_UNROLL][MC_GEMV_ROWS],
                                               uint16_t (&sv)[MC_GEMV_UNROLL][MC_GEMV_ROWS],
                                               const char *const (&row)[MC_GEMV_ROWS],
                                               const uint16_t *const (&sc)[MC_GEMV_ROWS], uint32_t base, uint32_t nfull,
                                               uint32_t lstride) {
#pragma unroll
    for (int u = 0; u < MC_GEMV_UNROLL; u++) {
        uint32_t idx = base + lstride * u;
        if (idx < nfull) {
#pragma unroll
            for (int k = 0; k < MC_GEMV_ROWS; k++) {
                wv[u][k] = __ldcs((const uint4 *)(row[k] + (size_t)idx * 16));
                if (T == MEMRA_TYPE_Q8_0)
                    sv[u][k] = __ldg(sc[k] + idx / 2);
            }
        }
    }
}

/* The dots of rows r0 .. r0+3 (a row past the end repeats r0, and is discarded) with x', as
 * lane 0 sees them, over column part `part` of KS: lane l takes chunks 32*part + l, then every
 * 32*KS-th after it, in order; MC_GEMV_UNROLL chunks of the four rows are loaded one iteration
 * ahead; each x chunk is loaded once for the four rows. With NORM, x' is x * norm_w and the sum
 * of squares of x over the part is accumulated along the way (the same lane order in every warp,
 * so every warp gets the same bits) and returned in ss_out; the caller adds the parts in order
 * and applies the 1/rms scale to the finished dots. */
template <uint32_t T, int NORM, int KS>
__device__ __forceinline__ void mc_rows_dot(const mc_matrix &w, uint32_t r0, const float *x, const float *nw,
                                            uint32_t lane, uint32_t part, float out[MC_GEMV_ROWS], float &ss_out) {
    const uint32_t LS = 32 * KS; /* chunks between a lane's consecutive chunks */
    const uint32_t E = mc_elems<T>::n;
    const uint32_t eb = 16 / E;
    const char *row[MC_GEMV_ROWS];
    const uint16_t *sc[MC_GEMV_ROWS];
#pragma unroll
    for (int k = 0; k < MC_GEMV_ROWS; k++) {
        uint32_t r = r0 + k < w.rows ? r0 + k : r0;
        row[k] = (const char *)w.data + (size_t)r * w.stride * eb;
        sc[k] = T == MEMRA_TYPE_Q8_0 ? w.scales + (size_t)r * (w.cols / MEMRA_Q8_0_BLOCK) : NULL;
    }
    const uint32_t nfull = w.cols / E;
    float acc[MC_GEMV_ROWS], ss = 0.0f;
#pragma unroll
    for (int k = 0; k < MC_GEMV_ROWS; k++)
        acc[k] = 0.0f;
    uint4 wv[MC_GEMV_UNROLL][MC_GEMV_ROWS];
    uint16_t sv[MC_GEMV_UNROLL][MC_GEMV_ROWS];
    mc_load_chunks<T>(wv, sv, row, sc, lane + 32 * part, nfull, LS);
    /* x (and the residual) come from earlier kernels */
    mc_wait_prior_grid(NORM ? MC_TRIGGER_GEMV6 : T == MEMRA_TYPE_Q8_0 ? MC_TRIGGER_GEMV6_RES_Q8 : MC_TRIGGER_GEMV6_RES);
    for (uint32_t base = lane + 32 * part; base < nfull; base += LS * MC_GEMV_UNROLL) {
        uint4 cur[MC_GEMV_UNROLL][MC_GEMV_ROWS];
        uint16_t cs[MC_GEMV_UNROLL][MC_GEMV_ROWS];
#pragma unroll
        for (int u = 0; u < MC_GEMV_UNROLL; u++)
#pragma unroll
            for (int k = 0; k < MC_GEMV_ROWS; k++) {
                cur[u][k] = wv[u][k];
                cs[u][k] = sv[u][k];
            }
        if (base + LS * MC_GEMV_UNROLL < nfull)
            mc_load_chunks<T>(wv, sv, row, sc, base + LS * MC_GEMV_UNROLL, nfull, LS);
#pragma unroll
        for (int u = 0; u < MC_GEMV_UNROLL; u++) {
            uint32_t idx = base + LS * u;
            if (idx < nfull) {
                float4 xv[E / 4];
                mc_x_chunk<T, NORM>(x, nw, idx, xv, ss);
#pragma unroll
                for (int k = 0; k < MC_GEMV_ROWS; k++)
                    acc[k] += mc_dot_chunk<T>(cur[u][k], xv,
                                              T == MEMRA_TYPE_Q8_0 ? __half2float(__ushort_as_half(cs[u][k])) : 1.0f);
            }
        }
    }
    if (nfull * E < w.cols && part == 0 && lane == (nfull & 31)) {
        for (uint32_t c = nfull * E; c < w.cols; c++) {
            float xc = x[c];
            if (NORM) {
                ss = fmaf(xc, xc, ss);
                xc *= nw[c];
            }
#pragma unroll
            for (int k = 0; k < MC_GEMV_ROWS; k++)
                acc[k] = fmaf(mc_elem<T>(row[k], c), xc, acc[k]);
        }
    }
    ss_out = NORM ? mc_warp_sum(ss) : 0.0f;
#pragma unroll
    for (int k = 0; k < MC_GEMV_ROWS; k++)
        out[k] = mc_warp_sum(acc[k]);
}

/* A row group's KS column parts added onto the part-0 warp's d and ss in part order (parts[p]:
 * part p's 4 sums and its sum of squares; parts[0] is the caller's own), then with NORM the 1/rms
 * scale: what mc_rowgroup_finish's part-0 lane computes, and the fused routers' group thread
 * (moe_router.cu, gemv_moe.cu's gemv_experts_routed), so their logits keep mc_gemv's bits. */
template <int KS, int NORM>
__device__ __forceinline__ void mc_parts_scale(const float (*parts)[MC_GEMV_ROWS + 1], float (&d)[MC_GEMV_ROWS],
                                               float &ss, uint32_t cols, float eps) {
    for (uint32_t p = 1; p < KS; p++) {
#pragma unroll
        for (int k = 0; k < MC_GEMV_ROWS; k++)
            d[k] += parts[p][k];
        ss += parts[p][MC_GEMV_ROWS];
    }
    if (NORM) {
        const float scale = 1.0f / sqrtf(ss / (float)cols + eps);
#pragma unroll
        for (int k = 0; k < MC_GEMV_ROWS; k++)
            d[k] *= scale;
    }
}

/* The tail of a row-group kernel (gemv_rowgroup, gemv_experts, gemv_experts_flat): with KS > 1
 * the KS column parts of a row group (each warp's d and ss through red) added in part order by the
 * part-0 warp, then on lane 0 the 1/rms scale with NORM and mc_rows_store's epilogue. Every thread
 * of the block calls it (it holds the block's barrier). */
template <int SWIGLU, int NORM, int KS>
__device__ __forceinline__ void mc_rowgroup_finish(float (&red)[MC_GEMV_WARPS][MC_GEMV_ROWS + 1], uint32_t warp,
                                                   uint32_t lane, uint32_t part, bool live, float (&d)[MC_GEMV_ROWS],
                                                   float ss, uint32_t cols, float eps, uint32_t r0, uint32_t rows,
                                                   const float *bias, const float *residual, float *y) {
    if (KS > 1) { /* the KS column parts of a row group, added in part order */
        if (live && lane == 0) {
#pragma unroll
            for (int k = 0; k < MC_GEMV_ROWS; k++)
                red[warp][k] = d[k];
            red[warp][MC_GEMV_ROWS] = ss;
        }
        __syncthreads();
        if (!live || part != 0 || lane != 0)
            return;
    }
    if (!live || lane != 0)
        return;
    mc_parts_scale<KS, NORM>(red + warp, d, ss, cols, eps);
    mc_rows_store<SWIGLU>(d, r0, rows, bias, residual, y);
}
