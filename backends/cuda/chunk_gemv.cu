/* chunk_gemv.cu: the GEMVs of a prefill chunk (step_chunk): M rows of x through one matrix, each
 * output element the decode GEMV's bits for its row, each weight load used for several rows.
 *
 * Chunk invariance by construction. The decode kernels (gemv.cu's row-group and persistent
 * kernels, gemv_q8.cu's integer kernel) give output row r of x the same operation sequence
 * whichever warp computes it: over column part p of KS (KS a function of the row count alone,
 * mc_gemv_ksplit / mc_q8x_ksplit), lane l takes the 16-byte chunks 32 p + l, then every 32 KS-th
 * after it, in order; a chunk's dot is its own fmaf chain from 0 in element order, added to the
 * lane's sum (Q8_0 float path: the chain times the block scale, then added; integer path: three
 * exact dp4a chains, then acc = fmaf(dot, d_w * s_x, acc)); the tail columns past the last whole
 * chunk go to lane (nfull & 31) of part 0; then the fixed xor tree (mc_warp_sum, lane 0's value),
 * the parts added in order, the 1/rms scale, and mc_rows_store's epilogue (bias, residual, GLU).
 * The chunk kernels run exactly that sequence per (row, x row): a warp takes RG row groups (4 RG
 * weight rows) and MC_CH_TM rows of x, unpacks each weight chunk once (exactly: bf16, f16, int8
 * to float lose nothing) and dots it with every x row of its tile. The RMSNorm is split off the
 * dot as decode's arithmetic allows: x' = x * norm_w (one rounding, decode's own product) and
 * the per-row 1/rms from decode's sum of squares (the same lanes, chunks and tree for the
 * matrix's KS; the integer path's block of 256 threads) are written by a prep kernel first.
 *
 * The integer Q8_0 path's default (chunk=mma) is chunk_mma.cu's kernel on int8 tensor cores, the
 * same sequence per element; chunk_gemv_q8 below is chunk=fma. Q4_K, Q5_K and Q6_K under
 * chunk=mma (the default; mma-kq is its old name) and qdot=auto run chunk_kq_mma.cu's kernel
 * (gemv_kquant.cu's bits), and Q4_0, Q4_1, Q5_0 and Q5_1 likewise chunk_legacy_mma.cu's
 * (gemv_legacy.cu's bits); under chunk=fma or mma-q8, or qdot=float, they are not batched (their
 * chunks run as single steps).
 *
 * Per chunk and matrix: the weights once per MC_CH_TM rows of x (consecutive blocks take the
 * same weights, so L2 serves most repeats), x (M x cols floats) once per row set of a block. */
#include "chunk_kq.h"
#include "chunk_legacy.h"
#include "cuda_common.cuh"
#include "q8x_quant.h"

MC_DYNAMIC_SMEM_ANCHOR(mc_smem_anchor_chunk)

#define MC_CH_WARPS 4u
#define MC_CH_TM 8u

/* Elements per 16-byte chunk. */
template <uint32_t T> struct mc_ch_e {
    static const uint32_t n = 16 / (T == MEMRA_TYPE_F32 ? 4 : T == MEMRA_TYPE_Q8_0 ? 1 : 2);
};

/* A 16-byte weight chunk as floats in element order (exact conversions). */
template <uint32_t T> __device__ __forceinline__ void mc_ch_unpack(uint4 w, float (&f)[mc_ch_e<T>::n]) {
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (uint32_t i = 0; i < 4; i++) {
        if (T == MEMRA_TYPE_F32) {
            f[i] = __uint_as_float(u[i]);
        } else if (T == MEMRA_TYPE_BF16) {
            f[2 * i] = __uint_as_float(u[i] << 16);
            f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        } else if (T == MEMRA_TYPE_F16) {
            f[2 * i] = __half2float(__ushort_as_half((unsigned short)(u[i] & 0xffffu)));
            f[2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(u[i] >> 16)));
        } else {
#pragma unroll
            for (uint32_t j = 0; j < 4; j++)
                f[4 * i + j] = (float)(int8_t)((u[i] >> (8 * j)) & 0xffu);
        }
    }
}

/* One element of a stored row (the tail past the last whole chunk; never Q8_0). */
template <uint32_t T> __device__ __forceinline__ float mc_ch_elem(const char *row, uint32_t c) {
    if (T == MEMRA_TYPE_F32)
        return ((const float *)row)[c];
    if (T == MEMRA_TYPE_BF16)
        return __uint_as_float((uint32_t)((const uint16_t *)row)[c] << 16);
    if (T == MEMRA_TYPE_F16)
        return __half2float(__ushort_as_half(((const uint16_t *)row)[c]));
    return (float)((const int8_t *)row)[c];
}

/* ---- the norm's prep: x' = x * norm_w and 1/rms per row, decode's sum of squares ---------- */

/* One warp per row of x: the sum of squares in the float GEMV's order for column parts KS and
 * elements per chunk E (part p: lane l's chunks in order, its tail, the tree; parts in order). */
__global__ void __launch_bounds__(32) chunk_norm_prep(const float *x, uint32_t ldx, const float *nw, uint32_t cols,
                                                      uint32_t E, uint32_t ks, float eps, float *xo, float *rs) {
    const uint32_t lane = threadIdx.x, t = blockIdx.x;
    const float *xr = x + (size_t)t * ldx;
    const uint32_t nfull = cols / E;
    float sst = 0.0f;
    for (uint32_t p = 0; p < ks; p++) {
        float ss = 0.0f;
        for (uint32_t idx = lane + 32 * p; idx < nfull; idx += 32 * ks)
            for (uint32_t e = 0; e < E; e++) {
                const float v = xr[(size_t)idx * E + e];
                ss = fmaf(v, v, ss);
            }
        if (nfull * E < cols && p == 0 && lane == (nfull & 31))
            for (uint32_t c = nfull * E; c < cols; c++)
                ss = fmaf(xr[c], xr[c], ss);
        ss = mc_warp_sum(ss);
        sst = p == 0 ? ss : sst + ss;
    }
    for (uint32_t c = lane; c < cols; c += 32)
        xo[(size_t)t * cols + c] = xr[c] * nw[c];
    if (lane == 0)
        rs[t] = 1.0f / sqrtf(sst / (float)cols + eps);
}

/* ---- the float path: F32, F16, BF16, and Q8_0 where the integer kernel does not serve ------ */

/* Block: MC_CH_WARPS warps, each RG row groups of the block's row set and the block's MC_CH_TM
 * rows of x (blockIdx.x: the x tile, fastest, so consecutive blocks share the weights). */
template <uint32_t T, int GLU, uint32_t KS, uint32_t RG>
__global__ void __launch_bounds__(32 * MC_CH_WARPS)
    chunk_gemv_float(const mc_matrix w, const float *x, uint32_t ldx, const float *rs, const float *bias,
                     const float *res, uint32_t ldr, float *y, uint32_t ldy, uint32_t M) {
    constexpr uint32_t E = mc_ch_e<T>::n, EB = 16 / E, R = 4 * RG, TM = MC_CH_TM;
    __shared__ float dsum[MC_CH_WARPS][R][TM];
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t g0 = (blockIdx.y * MC_CH_WARPS + warp) * RG, t0 = blockIdx.x * TM;
    const uint32_t n_groups = (w.rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS;
    if (g0 >= n_groups || t0 >= M)
        return;
    const uint32_t nt = min(TM, M - t0);
    const char *row[R];
    const uint16_t *sc[R];
#pragma unroll
    for (uint32_t r = 0; r < R; r++) {
        const uint32_t base = (g0 + r / 4) * 4, k = r % 4;
        const uint32_t rr = base + k < w.rows ? base + k : base < w.rows ? base : w.rows - 1;
        row[r] = (const char *)w.data + (size_t)rr * w.stride * EB;
        sc[r] = T == MEMRA_TYPE_Q8_0 ? w.scales + (size_t)rr * (w.cols / MEMRA_Q8_0_BLOCK) : NULL;
    }
    const float *xt = x + (size_t)t0 * ldx;
    const uint32_t nfull = w.cols / E;
#pragma unroll 1
    for (uint32_t p = 0; p < KS; p++) {
        float acc[R][TM];
#pragma unroll
        for (uint32_t r = 0; r < R; r++)
#pragma unroll
            for (uint32_t t = 0; t < TM; t++)
                acc[r][t] = 0.0f;
#pragma unroll 1
        for (uint32_t idx = lane + 32 * p; idx < nfull; idx += 32 * KS) {
            float f[R][E], s[R];
#pragma unroll
            for (uint32_t r = 0; r < R; r++) {
                mc_ch_unpack<T>(__ldg((const uint4 *)(row[r] + (size_t)idx * 16)), f[r]);
                s[r] = T == MEMRA_TYPE_Q8_0 ? __half2float(__ushort_as_half(__ldg(sc[r] + idx / 2))) : 1.0f;
            }
#pragma unroll
            for (uint32_t t = 0; t < TM; t++) {
                if (t < nt) {
                    float xe[E];
#pragma unroll
                    for (uint32_t q = 0; q < E / 4; q++) {
                        const float4 v = __ldg((const float4 *)(xt + (size_t)t * ldx + (size_t)idx * E) + q);
                        xe[4 * q] = v.x;
                        xe[4 * q + 1] = v.y;
                        xe[4 * q + 2] = v.z;
                        xe[4 * q + 3] = v.w;
                    }
#pragma unroll
                    for (uint32_t r = 0; r < R; r++) {
                        float c = 0.0f;
#pragma unroll
                        for (uint32_t e = 0; e < E; e++)
                            c = fmaf(f[r][e], xe[e], c);
                        if (T == MEMRA_TYPE_Q8_0)
                            c *= s[r];
                        acc[r][t] += c;
                    }
                }
            }
        }
        if (T != MEMRA_TYPE_Q8_0 && nfull * E < w.cols && p == 0 && lane == (nfull & 31)) {
            for (uint32_t c = nfull * E; c < w.cols; c++)
#pragma unroll
                for (uint32_t t = 0; t < TM; t++)
                    if (t < nt) {
                        const float xc = xt[(size_t)t * ldx + c];
#pragma unroll
                        for (uint32_t r = 0; r < R; r++)
                            acc[r][t] = fmaf(mc_ch_elem<T>(row[r], c), xc, acc[r][t]);
                    }
        }
#pragma unroll
        for (uint32_t r = 0; r < R; r++)
#pragma unroll
            for (uint32_t t = 0; t < TM; t++) {
                const float v = mc_warp_sum(acc[r][t]);
                if (lane == 0)
                    dsum[warp][r][t] = p == 0 ? v : dsum[warp][r][t] + v;
            }
    }
    __syncwarp();
    for (uint32_t k = lane; k < RG * TM; k += 32) {
        const uint32_t g = k / TM, t = k % TM, base = (g0 + g) * MC_GEMV_ROWS;
        if (t >= nt || base >= w.rows)
            continue;
        float d[MC_GEMV_ROWS];
#pragma unroll
        for (uint32_t j = 0; j < MC_GEMV_ROWS; j++)
            d[j] = dsum[warp][4 * g + j][t];
        if (rs) { /* a rounded product, as decode's (its product and the store's adds never fuse) */
            const float scale = rs[t0 + t];
#pragma unroll
            for (uint32_t j = 0; j < MC_GEMV_ROWS; j++)
                d[j] = __fmul_rn(d[j], scale);
        }
        mc_rows_store<GLU>(d, base, w.rows, bias, res ? res + (size_t)(t0 + t) * ldr : NULL,
                           y + (size_t)(t0 + t) * ldy);
    }
}

/* ---- the integer Q8_0 path (where gemv_q8.cu's kernel serves the matrix) ------------------ */

/* One block of 256 threads per row of x: gemv_q8_0_int's quantization of x' (its planes, scales
 * and sum of squares: the same threads, chunks and block sum), into global memory. */
#define MC_CH_Q8_THREADS 256u
template <int NORM>
__global__ void __launch_bounds__(MC_CH_Q8_THREADS)
    chunk_q8_quant(const float *x, uint32_t ldx, const float *norm_w, uint32_t cols, float eps, uint4 *xh, uint4 *xm,
                   uint4 *xl, float *xs, float *rs) {
    __shared__ float bred[MC_CH_Q8_THREADS / 32];
    const uint32_t nch = cols / 16, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, t = blockIdx.x;
    const float *xr = x + (size_t)t * ldx;
    uint4 *qh = xh + (size_t)t * nch, *qm = xm + (size_t)t * nch, *ql = xl + (size_t)t * nch;
    float *qs = xs + (size_t)t * nch;
    float ss = 0.0f;
    for (uint32_t c = tid; c < nch; c += blockDim.x) {
        float v[16];
        mc_q8x_load16<NORM>(xr, norm_w, (size_t)c * 16, v, ss);
        float amax;
        bool finite;
        mc_q8x_amax16(v, amax, finite);
        mc_q8x_planes16(v, mc_q8x_inv(amax, finite), qh[c], qm[c], ql[c]);
        qs[c] = mc_q8x_scale(amax, finite);
    }
    if (NORM) {
        ss = mc_warp_sum(ss);
        if (lane == 0)
            bred[warp] = ss;
    }
    __syncthreads();
    if (tid == 0) {
        float rscale = 1.0f;
        if (NORM) {
            float s = 0.0f;
#pragma unroll
            for (uint32_t k = 0; k < MC_CH_Q8_THREADS / 32; k++)
                s += bred[k];
            rscale = 1.0f / sqrtf(s / (float)cols + eps);
        }
        rs[t] = rscale;
    }
}

template <int GLU, uint32_t KS, uint32_t RG>
__global__ void __launch_bounds__(32 * MC_CH_WARPS)
    chunk_gemv_q8(const mc_matrix w, const uint4 *xh, const uint4 *xm, const uint4 *xl, const float *xs,
                  const float *rs, const float *bias, const float *res, uint32_t ldr, float *y, uint32_t ldy,
                  uint32_t M) {
    constexpr uint32_t R = 4 * RG, TM = MC_CH_TM;
    __shared__ float dsum[MC_CH_WARPS][R][TM];
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t g0 = (blockIdx.y * MC_CH_WARPS + warp) * RG, t0 = blockIdx.x * TM;
    const uint32_t n_groups = (w.rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS;
    if (g0 >= n_groups || t0 >= M)
        return;
    const uint32_t nt = min(TM, M - t0), nch = w.cols / 16, nsc = w.cols / MEMRA_Q8_0_BLOCK;
    const char *row[R];
    const uint16_t *sc[R];
#pragma unroll
    for (uint32_t r = 0; r < R; r++) {
        const uint32_t base = (g0 + r / 4) * 4, k = r % 4;
        const uint32_t rr = base + k < w.rows ? base + k : base < w.rows ? base : w.rows - 1;
        row[r] = (const char *)w.data + (size_t)rr * w.stride;
        sc[r] = w.scales + (size_t)rr * nsc;
    }
#pragma unroll 1
    for (uint32_t p = 0; p < KS; p++) {
        float acc[R][TM];
#pragma unroll
        for (uint32_t r = 0; r < R; r++)
#pragma unroll
            for (uint32_t t = 0; t < TM; t++)
                acc[r][t] = 0.0f;
#pragma unroll 1
        for (uint32_t idx = lane + 32 * p; idx < nch; idx += 32 * KS) {
            uint4 q[R];
            float dw[R];
#pragma unroll
            for (uint32_t r = 0; r < R; r++) {
                q[r] = __ldg((const uint4 *)(row[r] + (size_t)idx * 16));
                dw[r] = __half2float(__ushort_as_half(__ldg(sc[r] + idx / 2)));
            }
#pragma unroll
            for (uint32_t t = 0; t < TM; t++) {
                if (t < nt) {
                    const size_t at = (size_t)(t0 + t) * nch + idx;
                    const uint4 h = __ldg(xh + at), md = __ldg(xm + at), lw = __ldg(xl + at);
                    const float sx = __ldg(xs + at);
#pragma unroll
                    for (uint32_t r = 0; r < R; r++) {
                        const uint4 qq = q[r];
                        int dh = __dp4a((int)qq.x, (int)h.x, 0);
                        dh = __dp4a((int)qq.y, (int)h.y, dh);
                        dh = __dp4a((int)qq.z, (int)h.z, dh);
                        dh = __dp4a((int)qq.w, (int)h.w, dh);
                        int dm = __dp4a((int)qq.x, (int)md.x, 0);
                        dm = __dp4a((int)qq.y, (int)md.y, dm);
                        dm = __dp4a((int)qq.z, (int)md.z, dm);
                        dm = __dp4a((int)qq.w, (int)md.w, dm);
                        int dl = __dp4a((int)qq.x, (int)lw.x, 0);
                        dl = __dp4a((int)qq.y, (int)lw.y, dl);
                        dl = __dp4a((int)qq.z, (int)lw.z, dl);
                        dl = __dp4a((int)qq.w, (int)lw.w, dl);
                        const float dot = fmaf((float)dh, 65536.0f, (float)(dm * 256 + dl));
                        acc[r][t] = fmaf(dot, dw[r] * sx, acc[r][t]);
                    }
                }
            }
        }
#pragma unroll
        for (uint32_t r = 0; r < R; r++)
#pragma unroll
            for (uint32_t t = 0; t < TM; t++) {
                const float v = mc_warp_sum(acc[r][t]);
                if (lane == 0)
                    dsum[warp][r][t] = p == 0 ? v : dsum[warp][r][t] + v;
            }
    }
    __syncwarp();
    for (uint32_t k = lane; k < RG * TM; k += 32) {
        const uint32_t g = k / TM, t = k % TM, base = (g0 + g) * MC_GEMV_ROWS;
        if (t >= nt || base >= w.rows)
            continue;
        float d[MC_GEMV_ROWS];
        const float scale = rs[t0 + t];
        /* a rounded product: in gemv_q8_0_int the scaling and the store's bias add sit in separate
         * blocks and never fuse; a plain product here did fuse with the bias (qwen2's q/k/v) */
#pragma unroll
        for (uint32_t j = 0; j < MC_GEMV_ROWS; j++)
            d[j] = __fmul_rn(dsum[warp][4 * g + j][t], scale);
        mc_rows_store<GLU>(d, base, w.rows, bias, res ? res + (size_t)(t0 + t) * ldr : NULL,
                           y + (size_t)(t0 + t) * ldy);
    }
}

/* ---- launch ------------------------------------------------------------------------------- */

uint64_t mc_gemv_chunk_scratch_bytes(uint32_t max_cols, uint32_t M) {
    /* x' (M x cols floats; gemv_wgmma.cu's bf16 rows padded to 32 columns: more on narrow rows) or the
     * integer planes (M x cols/16 x 52 bytes; the K-quants' M x cols x 4, the legacy types' M x cols
     * x 3.5), then M row scales */
    return ((uint64_t)M * ((max_cols + 31u) / 32u * 32u) * 4 + 255) / 256 * 256 + ((uint64_t)M * 4 + 255) / 256 * 256;
}

static void mc_ch_config(cudaLaunchConfig_t *cfg, const mc_matrix *w, uint32_t RG, uint32_t M, cudaStream_t st) {
    memset(cfg, 0, sizeof *cfg);
    const uint32_t n_groups = (w->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS, per = MC_CH_WARPS * RG;
    cfg->gridDim = dim3((M + MC_CH_TM - 1) / MC_CH_TM, (n_groups + per - 1) / per);
    cfg->blockDim = dim3(32 * MC_CH_WARPS);
    cfg->stream = st;
}

template <uint32_t T, int GLU, uint32_t KS>
static cudaError_t mc_ch_float_t(const mc_matrix *w, const float *x, uint32_t ldx, const float *rs, const float *bias,
                                 const float *res, uint32_t ldr, float *y, uint32_t ldy, uint32_t M, cudaStream_t st) {
    constexpr uint32_t RG = T == MEMRA_TYPE_Q8_0 ? 1 : 2; /* registers: RG * 4 rows of unpacked chunk */
    cudaLaunchConfig_t cfg;
    mc_ch_config(&cfg, w, RG, M, st);
    cudaError_t e =
        cudaLaunchKernelEx(&cfg, chunk_gemv_float<T, GLU, KS, RG>, *w, x, ldx, rs, bias, res, ldr, y, ldy, M);
    return e != cudaSuccess ? e : cudaGetLastError();
}

template <uint32_t T, int GLU>
static cudaError_t mc_ch_float_ks(uint32_t ks, const mc_matrix *w, const float *x, uint32_t ldx, const float *rs,
                                  const float *bias, const float *res, uint32_t ldr, float *y, uint32_t ldy, uint32_t M,
                                  cudaStream_t st) {
    switch (ks) {
    case 1: return mc_ch_float_t<T, GLU, 1>(w, x, ldx, rs, bias, res, ldr, y, ldy, M, st);
    case 2: return mc_ch_float_t<T, GLU, 2>(w, x, ldx, rs, bias, res, ldr, y, ldy, M, st);
    default: return mc_ch_float_t<T, GLU, 4>(w, x, ldx, rs, bias, res, ldr, y, ldy, M, st);
    }
}

template <int GLU>
static cudaError_t mc_ch_float(uint32_t ks, const mc_matrix *w, const float *x, uint32_t ldx, const float *rs,
                               const float *bias, const float *res, uint32_t ldr, float *y, uint32_t ldy, uint32_t M,
                               cudaStream_t st) {
    switch (w->type) {
    case MEMRA_TYPE_F32: return mc_ch_float_ks<MEMRA_TYPE_F32, GLU>(ks, w, x, ldx, rs, bias, res, ldr, y, ldy, M, st);
    case MEMRA_TYPE_F16: return mc_ch_float_ks<MEMRA_TYPE_F16, GLU>(ks, w, x, ldx, rs, bias, res, ldr, y, ldy, M, st);
    case MEMRA_TYPE_BF16: return mc_ch_float_ks<MEMRA_TYPE_BF16, GLU>(ks, w, x, ldx, rs, bias, res, ldr, y, ldy, M, st);
    case MEMRA_TYPE_Q8_0: return mc_ch_float_ks<MEMRA_TYPE_Q8_0, GLU>(ks, w, x, ldx, rs, bias, res, ldr, y, ldy, M, st);
    default: return cudaErrorInvalidValue;
    }
}

template <int GLU, uint32_t KS>
static cudaError_t mc_ch_q8_t(const mc_matrix *w, const uint4 *xh, const uint4 *xm, const uint4 *xl, const float *xs,
                              const float *rs, const float *bias, const float *res, uint32_t ldr, float *y,
                              uint32_t ldy, uint32_t M, cudaStream_t st) {
    cudaLaunchConfig_t cfg;
    mc_ch_config(&cfg, w, 2, M, st);
    cudaError_t e =
        cudaLaunchKernelEx(&cfg, chunk_gemv_q8<GLU, KS, 2>, *w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M);
    return e != cudaSuccess ? e : cudaGetLastError();
}

template <int GLU>
static cudaError_t mc_ch_q8(uint32_t ks, const mc_matrix *w, const uint4 *xh, const uint4 *xm, const uint4 *xl,
                            const float *xs, const float *rs, const float *bias, const float *res, uint32_t ldr,
                            float *y, uint32_t ldy, uint32_t M, cudaStream_t st) {
    switch (ks) {
    case 1: return mc_ch_q8_t<GLU, 1>(w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M, st);
    case 2: return mc_ch_q8_t<GLU, 2>(w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M, st);
    default: return mc_ch_q8_t<GLU, 4>(w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M, st);
    }
}

int mc_gemv_chunk_batched(const mc_config *c, const mc_matrix *w) {
    if (w->cols % 4) /* rows of x (cols floats apart) must stay 16-byte aligned */
        return 0;
    if (mc_gemv_mma_serves(c, w)) /* q8=mma's chunk runs on gemv_wgmma.cu alone: elsewhere row by row */
        return mc_gemv_mma_chunk_serves(c, w);
    if (mc_gemv_q8_serves(c, w) || mc_chunk_kq_serves(c, w) || mc_chunk_legacy_serves(c, w))
        return 1;
    return w->type == MEMRA_TYPE_F32 || w->type == MEMRA_TYPE_F16 || w->type == MEMRA_TYPE_BF16 ||
           w->type == MEMRA_TYPE_Q8_0;
}

cudaError_t mc_gemv_chunk(const mc_config *c, const mc_matrix *w, const float *x, uint32_t ldx, const float *norm_w,
                          float eps, const float *bias, const float *residual, uint32_t ldr, float *y, uint32_t ldy,
                          int glu, uint32_t M, void *scratch, cudaStream_t st) {
    if (M == 0)
        return cudaSuccess;
    if (glu && w->rows % 2)
        return cudaErrorInvalidValue;
    if (mc_gemv_mma_serves(c, w) && mc_gemv_mma_chunk_serves(c, w)) /* gemv=mma, q8=mma: decode's tensor-core
                                                                      * chain, many rows of x (gemv_mma.cu) */
        return mc_gemv_chunk_mma(c, w, x, ldx, norm_w, eps, bias, residual, ldr, y, ldy, glu, M, scratch, st);
    if (!mc_gemv_chunk_batched(c, w)) { /* every other type: the decode GEMV row by row (its bits) */
        for (uint32_t t = 0; t < M; t++) {
            const float *xr = x + (size_t)t * ldx;
            float *yr = y + (size_t)t * ldy;
            cudaError_t e =
                glu ? mc_gemv_glu(c, w, xr, norm_w, eps, glu, yr, st)
                    : mc_gemv(c, w, xr, norm_w, eps, bias, residual ? residual + (size_t)t * ldr : NULL, yr, st);
            if (e != cudaSuccess)
                return e;
        }
        return cudaSuccess;
    }
    if (mc_chunk_kq_serves(c, w)) /* Q4_K, Q5_K, Q6_K under chunk=mma-kq: chunk_kq_mma.cu */
        return mc_chunk_kq_mma(c->chunk, w, x, ldx, norm_w, eps, bias, residual, ldr, y, ldy, glu, M, scratch, st);
    if (mc_chunk_legacy_serves(c, w)) /* Q4_0, Q4_1, Q5_0, Q5_1 likewise: chunk_legacy_mma.cu */
        return mc_chunk_legacy_mma(c->chunk, w, x, ldx, norm_w, eps, bias, residual, ldr, y, ldy, glu, M, scratch, st);
    cudaError_t e = mc_gemv_prepare();
    if (e != cudaSuccess)
        return e;
    char *base = (char *)scratch;
    float *rs = (float *)(base + ((uint64_t)M * w->cols * 4 + 255) / 256 * 256);
    if (mc_gemv_q8_serves(c, w)) {
        const uint32_t nch = w->cols / 16;
        uint4 *xh = (uint4 *)base, *xm = xh + (size_t)M * nch, *xl = xm + (size_t)M * nch;
        float *xs = (float *)(xl + (size_t)M * nch);
        if (norm_w)
            chunk_q8_quant<1><<<M, MC_CH_Q8_THREADS, 0, st>>>(x, ldx, norm_w, w->cols, eps, xh, xm, xl, xs, rs);
        else
            chunk_q8_quant<0><<<M, MC_CH_Q8_THREADS, 0, st>>>(x, ldx, norm_w, w->cols, eps, xh, xm, xl, xs, rs);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
        if (c->chunk != MC_CHUNK_FMA) /* chunk=mma: the tensor-core kernel, the same bits */
            return mc_chunk_q8_mma(glu, c->chunk, w, xh, xm, xl, xs, rs, bias, residual, ldr, y, ldy, M, st);
        const uint32_t ks = mc_q8x_ksplit(w->rows);
        switch (glu) {
        case MC_GLU_SILU: return mc_ch_q8<MC_GLU_SILU>(ks, w, xh, xm, xl, xs, rs, bias, residual, ldr, y, ldy, M, st);
        case MC_GLU_GELU: return mc_ch_q8<MC_GLU_GELU>(ks, w, xh, xm, xl, xs, rs, bias, residual, ldr, y, ldy, M, st);
        default: return mc_ch_q8<MC_GLU_NONE>(ks, w, xh, xm, xl, xs, rs, bias, residual, ldr, y, ldy, M, st);
        }
    }
    const uint32_t ks = mc_gemv_ksplit(w->rows);
    const float *xin = x;
    uint32_t ldin = ldx;
    const float *rsp = NULL;
    if (norm_w) {
        float *xo = (float *)base;
        const uint32_t E = 16 / mc_type_elem_bytes(w->type);
        chunk_norm_prep<<<M, 32, 0, st>>>(x, ldx, norm_w, w->cols, E, ks, eps, xo, rs);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
        xin = xo;
        ldin = w->cols;
        rsp = rs;
    }
    switch (glu) {
    case MC_GLU_SILU: return mc_ch_float<MC_GLU_SILU>(ks, w, xin, ldin, rsp, bias, residual, ldr, y, ldy, M, st);
    case MC_GLU_GELU: return mc_ch_float<MC_GLU_GELU>(ks, w, xin, ldin, rsp, bias, residual, ldr, y, ldy, M, st);
    default: return mc_ch_float<MC_GLU_NONE>(ks, w, xin, ldin, rsp, bias, residual, ldr, y, ldy, M, st);
    }
}

/* ---- the chunk's small kernels ------------------------------------------------------------ */

/* pos_rows[j] = *pos + j, j < M: each row's position, for the per-row decode launches. */
__global__ void chunk_positions(const int32_t *pos, int32_t *pos_rows, uint32_t M) {
    for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < M; j += gridDim.x * blockDim.x)
        pos_rows[j] = *pos + (int32_t)j;
}
/* *pos += M: the chunk's commit. */
__global__ void chunk_commit(int32_t *pos, uint32_t M) { *pos += (int32_t)M; }

cudaError_t mc_chunk_positions(const int32_t *pos, int32_t *pos_rows, uint32_t M, cudaStream_t st) {
    chunk_positions<<<(M + 255) / 256, 256, 0, st>>>(pos, pos_rows, M);
    return cudaGetLastError();
}

cudaError_t mc_chunk_commit(int32_t *pos, uint32_t M, cudaStream_t st) {
    chunk_commit<<<1, 1, 0, st>>>(pos, M);
    return cudaGetLastError();
}

/* ---- census ------------------------------------------------------------------------------- */

#define MC_CH_EACH_KS(F, A, B) F(A, B, 1) F(A, B, 2) F(A, B, 4)
#define MC_CH_EACH_G(F, A)                                                                                             \
    MC_CH_EACH_KS(F, A, MC_GLU_NONE) MC_CH_EACH_KS(F, A, MC_GLU_SILU) MC_CH_EACH_KS(F, A, MC_GLU_GELU)

const char *mc_chunk_family(const void *f) {
    static const mc_family_row table[] = {
#define MC_CH_FROW(T, G, K) {(const void *)chunk_gemv_float<T, G, K, (T == MEMRA_TYPE_Q8_0 ? 1u : 2u)>, "chunk_gemv"},
#define MC_CH_QROW(X, G, K) {(const void *)chunk_gemv_q8<G, K, 2>, "chunk_gemv"},
        MC_CH_EACH_G(MC_CH_FROW, MEMRA_TYPE_F32) MC_CH_EACH_G(MC_CH_FROW, MEMRA_TYPE_F16)
            MC_CH_EACH_G(MC_CH_FROW, MEMRA_TYPE_BF16) MC_CH_EACH_G(MC_CH_FROW, MEMRA_TYPE_Q8_0)
                MC_CH_EACH_G(MC_CH_QROW, 0)
#undef MC_CH_FROW
#undef MC_CH_QROW
                    {(const void *)chunk_norm_prep, "chunk_prep"},
        {(const void *)chunk_q8_quant<0>, "chunk_prep"},
        {(const void *)chunk_q8_quant<1>, "chunk_prep"},
        {(const void *)chunk_positions, "chunk_prep"},
        {(const void *)chunk_commit, "commit"},
    };
    const char *fam0 = mc_family_find(table, sizeof table / sizeof table[0], f);
    if (fam0)
        return fam0;
    const char *fam = mc_chunk_mma_family(f);
    return fam ? fam : mc_chunk_legacy_family(f);
}
