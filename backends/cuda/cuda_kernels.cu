/* cuda_kernels.cu: the kernels of memra's cuda backends (see cuda_kernels.h for the contracts).
 *
 * Decode at batch 1 is bound by the bytes it reads, so the GEMVs carry the weight: one warp per
 * four output rows (gate/up interleaved, so SwiGLU is the epilogue), 16-byte streaming loads, two
 * chunks of each row in flight and the next two prefetched, each x chunk loaded once for the four
 * rows, the RMSNorm of x fused in (its sum of squares accumulated along the way), fp32
 * accumulation in a fixed lane order and a fixed xor-shuffle tree, and programmatic dependent
 * launch so a GEMV's first weights stream while the kernel before it drains. Matrices of few
 * rows split their columns over 2 or 4 warps (parts added in order); short rows use persistent
 * blocks whose warps stream row group after row group. Q8_0 quantizes x per block into shared
 * memory (three int8 planes, 23 bits) and takes exact integer dots with dp4a (v6's float path
 * stays for the down projection). Attention is one launch per layer (q/k norm, RoPE, KV append,
 * 16-lane groups owning positions, a fixed split of the positions over an 8-block cluster,
 * merged in rank order through distributed shared memory). Everything else reads a few vectors
 * per token. No float atomics: every sum has one order (the one integer atomic, the argmax's
 * ticket, only elects which block merges, and the merge has one answer in any order).
 *
 * Measured on an H200 (bench/RESULTS.md, v7): llama-8b BF16 gate/up and down 95%, qkv 73%, wo 76%
 * of a 4.24 TB/s copy ceiling; Q8_0 gate/up 93%, head 102%, qkv 62%, wo 53%; attention 7.0 us
 * per layer. memra bench, graph arm (third session): 8b BF16 240.2 tok/s (85.9%), Q8_0 376.9
 * (72.2%), 1b 1186.6 (70.1%). */
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "argmax_merge.h"
#include "q8x_quant.h"
#include "memra/gguf.h"
#include "memra/numeric.h"

#define MC_FULL 0xffffffffu
#define MC_GEMV_WARPS 4u
#define MC_GEMV_UNROLL 2
#define MC_MAX_PARTS 128u
#define MC_MAX_THREADS 256u
#define MC_MAX_DEVICES 64

/* Per device: multiprocessors (0 until mc_gemv_prepare ran there). */
static uint32_t mc_sm_count[MC_MAX_DEVICES];

uint32_t mc_type_elem_bytes(uint32_t type) {
    switch (type) {
    case MEMRA_TYPE_F32: return 4;
    case MEMRA_TYPE_F16:
    case MEMRA_TYPE_BF16: return 2;
    case MEMRA_TYPE_Q8_0: return 1;
    default: return 0;
    }
}

static uint64_t mc_stride_of(uint32_t type, uint64_t cols) {
    uint64_t per16 = 16 / mc_type_elem_bytes(type);
    return (cols + per16 - 1) / per16 * per16;
}

uint64_t mc_matrix_bytes(uint32_t type, uint64_t rows, uint64_t cols) {
    uint64_t eb = mc_type_elem_bytes(type);
    if (eb == 0)
        return 0;
    uint64_t bytes = rows * mc_stride_of(type, cols) * eb;
    if (type == MEMRA_TYPE_Q8_0)
        bytes += rows * (cols / MEMRA_Q8_0_BLOCK) * 2;
    return bytes;
}

/* ---- helpers ---------------------------------------------------------------------------- */

__device__ __forceinline__ float mc_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(MC_FULL, v, o);
    return v; /* lane 0's value is the one used: a fixed tree */
}

/* Block sum with a fixed shape: warp trees, then warp 0 adds the warp sums in index order.
 * Every thread gets the result. `red` holds 33 floats. */
__device__ float mc_block_sum(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = mc_warp_sum(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < nw; w++)
            s += red[w];
        red[32] = s;
    }
    __syncthreads();
    float r = red[32];
    __syncthreads();
    return r;
}

__device__ __forceinline__ float mc_bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float mc_bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }
__device__ __forceinline__ float mc_f16_lo(uint32_t u) { return __half2float(__ushort_as_half((unsigned short)(u & 0xffffu))); }
__device__ __forceinline__ float mc_f16_hi(uint32_t u) { return __half2float(__ushort_as_half((unsigned short)(u >> 16))); }

/* Elements per 16-byte lane chunk. */
template <uint32_t T> struct mc_elems { static const uint32_t n = 16 / (T == MEMRA_TYPE_F32 ? 4 : T == MEMRA_TYPE_Q8_0 ? 1 : 2); };

/* int8 to float without the (quarter-rate) integer conversion: the biased byte (q ^ 0x80 = q + 128)
 * becomes the low mantissa bits of 2^23, and 2^23 + 128 is subtracted: exact. */
__device__ __forceinline__ float mc_q8(uint32_t qx, uint32_t i) {
    return __int_as_float(__byte_perm(qx, 0x4B000000u, 0x7650u | i)) - 8388736.0f;
}

/* Dot of one 16-byte weight chunk with its x floats (already in registers), in element order. */
template <uint32_t T>
__device__ __forceinline__ float mc_dot_chunk(uint4 w, const float4 *xv, float scale) {
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
template <uint32_t T>
__device__ __forceinline__ float mc_elem(const void *row, uint32_t c) {
    if (T == MEMRA_TYPE_F32)
        return ((const float *)row)[c];
    if (T == MEMRA_TYPE_BF16)
        return __uint_as_float((uint32_t)((const uint16_t *)row)[c] << 16);
    if (T == MEMRA_TYPE_F16)
        return __half2float(__ushort_as_half(((const uint16_t *)row)[c]));
    return (float)((const int8_t *)row)[c]; /* Q8_0 never has a tail: cols % 32 == 0 */
}


#define MC_GEMV_ROWS 4

/* x's chunk idx (the E floats a 16-byte weight chunk of type T meets) into xv; with NORM, its
 * squares added to ss in element order and the chunk scaled by the norm weights (x' = x * nw).
 * The one order of the F32/F16/BF16/Q8_0 float GEMVs (v6 and persistent), hence their equal bits. */
template <uint32_t T, int NORM>
__device__ __forceinline__ void mc_x_chunk(const float *x, const float *nw, uint32_t idx,
                                           float4 (&xv)[mc_elems<T>::n / 4], float &ss) {
    constexpr uint32_t E = mc_elems<T>::n;
#pragma unroll
    for (uint32_t q = 0; q < E / 4; q++) {
        xv[q] = __ldg((const float4 *)(x + (size_t)idx * E) + q);
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

/* Programmatic dependent launch: a GEMV may start while the kernel before it drains, streaming
 * its first weights (which depend on nothing) before it waits for that kernel's results. The
 * wait is followed by the trigger (per kernel family, MEMRA_CUDA_TRIGGER's mask: 1 the F32/F16/
 * BF16 GEMVs of short rows (the persistent kernel), 2 the Q8_0 GEMVs on integer dots, 4 attention,
 * 8 the v6 GEMVs (long rows) with a norm, 16 attention whose output has 4096 floats or more, 32
 * the F32/F16/BF16 v6 GEMVs without a norm (the down projection), 64 the Q8_0 v6 GEMV without a
 * norm (Q8_0 down); default 115, measured: llama-1b graph replay 1174.7 tok/s with 3, 1140.8
 * with 7, 1078.5 with none; llama-8b BF16 (4096 floats) 239.8 with 7 against 237.8 with 3, Q8_0
 * even, and llama-1b (2048) 1159.9 against 1185.0; llama-8b Q8_0 387.6 with 19 against 393.7
 * with 83, llama-8b BF16 even with 51, and 27 (every v6 GEMV then) cost 8b BF16 1%;
 * bench/RESULTS.md): once every block of this grid has
 * passed its wait (so every kernel before the previous one has completed), the next kernel in
 * the stream or graph may start its own pre-wait work in the slots this grid frees. A kernel's
 * pre-wait part therefore reads only data of kernels two or more launches back (weights, *pos,
 * cache rows of earlier steps), never its predecessor's output. */
#define MC_TRIGGER_GEMV 1u
#define MC_TRIGGER_Q8 2u
#define MC_TRIGGER_ATT 4u
#define MC_TRIGGER_GEMV6 8u
#define MC_TRIGGER_ATT_WIDE 16u
#define MC_TRIGGER_GEMV6_RES 32u
#define MC_TRIGGER_GEMV6_RES_Q8 64u
#define MC_TRIGGER_ALL 127u
#define MC_TRIGGER_DEFAULT 115u
/* Attention's family bits: the wide bit too where the output projection that follows reads 4096
 * columns or more (its early start then pays; on 2048 it cost 2%). */
#define MC_ATT_FAMILY(a) ((a).n_head * (a).hdv >= 4096u ? MC_TRIGGER_ATT | MC_TRIGGER_ATT_WIDE : MC_TRIGGER_ATT)
__constant__ unsigned mc_trigger_mask = MC_TRIGGER_DEFAULT;
__device__ __forceinline__ void mc_wait_prior_grid(unsigned family) {
    const unsigned on = mc_trigger_mask & family; /* read before the wait */
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (on)
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* MC_PROF (a measurement build only, never the shipped one): thread 0 of one block of the v7
 * attention and of the v7 Q8_0 GEMV records clock64() at phase ends and adds the phase cycles to
 * mc_prof (slots 0-7 attention, 8-15 GEMV); mc_prof_take reads and clears them. */
#ifdef MC_PROF
__device__ unsigned long long mc_prof[18];
#define MC_PT(i)                                                                                                       \
    do {                                                                                                               \
        if (prof_on)                                                                                                   \
            tp[i] = clock64();                                                                                         \
    } while (0)
#define MC_PT_END(base, n, cnt)                                                                                        \
    do {                                                                                                               \
        if (prof_on) {                                                                                                 \
            for (int i_ = 0; i_ + 1 < (n); i_++)                                                                       \
                mc_prof[(base) + i_] += (unsigned long long)(tp[i_ + 1] - tp[i_]);                                     \
            mc_prof[cnt] += 1;                                                                                         \
        }                                                                                                              \
    } while (0)
cudaError_t mc_prof_take(unsigned long long out[18]) {
    cudaError_t e = cudaMemcpyFromSymbol(out, mc_prof, sizeof(unsigned long long) * 18);
    if (e != cudaSuccess)
        return e;
    static const unsigned long long zero[18] = {0};
    return cudaMemcpyToSymbol(mc_prof, zero, sizeof zero);
}
#else
#define MC_PT(i)                                                                                                       \
    do {                                                                                                               \
    } while (0)
#define MC_PT_END(base, n, cnt)                                                                                        \
    do {                                                                                                               \
    } while (0)
#endif

/* Queues the weight chunks (and, for Q8_0, their block scales: a scale loaded at its use would
 * cost one memory latency per iteration) of the next iteration. */
template <uint32_t T>
__device__ __forceinline__ void mc_load_chunks(uint4 (&wv)[MC_GEMV_UNROLL][MC_GEMV_ROWS],
                                               uint16_t (&sv)[MC_GEMV_UNROLL][MC_GEMV_ROWS],
                                               const char *const (&row)[MC_GEMV_ROWS],
                                               const uint16_t *const (&sc)[MC_GEMV_ROWS], uint32_t base,
                                               uint32_t nfull, uint32_t lstride) {
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

/* Writes a finished row group (rows r0 .. r0+3, scaled): with SWIGLU y[p] = silu(row 2p) * row
 * 2p+1 (gate and up interleaved), else y[row] = residual[row] + (d + bias[row]); rows past the
 * end are skipped. Called by the one lane that holds the group's sums. */
template <int SWIGLU>
__device__ __forceinline__ void mc_rows_store(const float (&d)[MC_GEMV_ROWS], uint32_t r0, uint32_t rows,
                                              const float *bias, const float *residual, float *y) {
    if (SWIGLU) {
#pragma unroll
        for (uint32_t r = 0; r < MC_GEMV_ROWS; r += 2)
            if (r0 + r + 1 < rows)
                y[(r0 + r) / 2] = d[r] / (1.0f + expf(-d[r])) * d[r + 1];
    } else {
#pragma unroll
        for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
            const uint32_t row = r0 + r;
            float v = d[r];
            if (row >= rows)
                break;
            if (bias)
                v += bias[row];
            if (residual)
                v = residual[row] + v;
            y[row] = v;
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

/* Reads: rows x stride weight bytes, x (cols floats, cached), norm_w (cols floats), bias and
 * residual (rows floats). Writes: y (rows floats; rows/2 for swiglu: y[p] = silu(row 2p) *
 * row 2p+1). */
template <uint32_t T, int SWIGLU, int NORM, int KS>
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS, 4) mc_gemv_kernel(const mc_matrix w, const float *x, const float *norm_w,
                                                      float eps, const float *bias, const float *residual, float *y) {
    __shared__ float red[MC_GEMV_WARPS][MC_GEMV_ROWS + 1];
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % KS;
    const uint32_t r0 = (blockIdx.x * (MC_GEMV_WARPS / KS) + warp / KS) * MC_GEMV_ROWS;
    const bool live = r0 < w.rows;
    float d[MC_GEMV_ROWS], ss = 0.0f;
    if (live)
        mc_rows_dot<T, NORM, KS>(w, r0, x, norm_w, lane, part, d, ss);
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
        for (uint32_t p = 1; p < KS; p++) {
#pragma unroll
            for (int k = 0; k < MC_GEMV_ROWS; k++)
                d[k] += red[warp + p][k];
            ss += red[warp + p][MC_GEMV_ROWS];
        }
    }
    if (!live || lane != 0)
        return;
    if (NORM) {
        const float scale = 1.0f / sqrtf(ss / (float)w.cols + eps);
#pragma unroll
        for (int k = 0; k < MC_GEMV_ROWS; k++)
            d[k] *= scale;
    }
    mc_rows_store<SWIGLU>(d, r0, w.rows, bias, residual, y);
}

/* ---- F32/F16/BF16 GEMV v7: persistent blocks, loads flattened over row groups ---------- */

/* The v6 kernel gives each warp one group of 4 rows, so every warp pays a load latency to start
 * and drains alone at the end: short rows (llama-1b, 2048 columns: 4 iterations per row) lose
 * ~15%. Here a grid of at most 4 blocks per multiprocessor takes contiguous, balanced ranges of
 * row groups, and each warp streams its row groups back to back, the next group's first chunks
 * loaded while the current group's last are summed. The arithmetic of a row group is exactly the
 * v6 kernel's (the same chunk order, the same sums): the same bits. */
template <uint32_t T, int SWIGLU, int NORM, int KS>
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS, 4)
    mc_gemvp_kernel(const mc_matrix w, const float *x, const float *norm_w, float eps, const float *bias,
                    const float *residual, float *y, uint32_t n_groups) {
    __shared__ float red[2][MC_GEMV_WARPS][MC_GEMV_ROWS + 1];
    constexpr uint32_t SLOTS = MC_GEMV_WARPS / KS, U = MC_GEMV_UNROLL, LS = 32 * KS, PER_IT = LS * U;
    constexpr uint32_t E = mc_elems<T>::n, EB = 16 / E;
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % KS, slot = warp / KS;
    const uint32_t g0 = (uint32_t)((uint64_t)n_groups * blockIdx.x / gridDim.x);
    const uint32_t g1 = (uint32_t)((uint64_t)n_groups * (blockIdx.x + 1) / gridDim.x);
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
        mc_wait_prior_grid(MC_TRIGGER_GEMV); /* x (and the residual) come from earlier kernels */
    float acc[MC_GEMV_ROWS], ss = 0.0f;
#pragma unroll
    for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
        acc[r] = 0.0f;
    uint32_t k = 0, i = 0;
    for (uint32_t j = 0; j < total; j++) {
        uint4 cur[U][MC_GEMV_ROWS];
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
            if (idx < nfull) {
                float4 xv[E / 4];
                mc_x_chunk<T, NORM>(x, norm_w, idx, xv, ss);
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
        mc_rows_store<SWIGLU>(d, r0, w.rows, bias, residual, y);
    }
}

/* ---- Q8_0 GEMV v7: x quantized to 16 bits per block, integer dots ----------------------- */

/* Q8_0 at batch 1 was bound by instructions and L1 traffic per weight byte (a float conversion
 * and an FMA per weight, 8 bytes of x and norm weight per 4 weight bytes). Here each block first
 * quantizes x' = x * norm_w into shared memory, per 16-column chunk c: s_c = max|x'| / QMAX and
 * q = rint(x' / s_c), |q| <= QMAX = 127 * 2^16, stored as three int8 planes (q = 2^16 hi + 2^8
 * mid + lo), so a chunk's dot with 16 int8 weights is exact in integers, three dp4a chains, and
 * costs one float FMA: acc += (2^16 dot_hi + (2^8 dot_mid + dot_lo)) * (d_w * s_c). x' keeps 23
 * bits relative to its chunk's largest element. (16 bits were not enough: the synthetic models
 * amplify a per-element error of 2^-16 to an NMSE against cpu of 2.6e-4 on llama-1b Q8_0 after 16
 * steps; f32 gives 7.6e-8.) The sum of squares of x for the norm is a block sum of fixed shape
 * during the quantization. Blocks of 8 warps; a warp takes 4 rows over column part `part` of KS
 * (chunks 32 part + lane, then every 32 KS-th), the parts of a row group added in order; each
 * block takes a contiguous, balanced range of row groups (at most two blocks per multiprocessor:
 * the quantization is paid once per block), its warps' loads flattened over row groups so the
 * next row group's first weights stream while the last chunk of the current one is summed. The
 * bits depend on the shapes alone (not on the grid). */
#define MC_Q8X_WARPS 8u
#define MC_Q8X_UNROLL 2

/* Shared bytes of the quantized x of a matrix of `cols` columns. */
__host__ __device__ inline uint32_t mc_q8x_smem(uint32_t cols) { return cols / 16 * 52; }

__device__ __forceinline__ uint32_t mc_pack4(int a, int b, int c, int d) {
    return (uint32_t)(a & 0xff) | ((uint32_t)(b & 0xff) << 8) | ((uint32_t)(c & 0xff) << 16) | ((uint32_t)d << 24);
}

template <int SWIGLU, int NORM, int KS>
__global__ void __launch_bounds__(32 * MC_Q8X_WARPS, 2)
    mc_q8x_kernel(const mc_matrix w, const float *x, const float *norm_w, float eps, const float *bias,
                  const float *residual, float *y, uint32_t n_groups) {
    extern __shared__ __align__(16) unsigned char q8sm[];
    __shared__ float red[2][MC_Q8X_WARPS][MC_GEMV_ROWS];
    __shared__ float bred[MC_Q8X_WARPS];
    constexpr uint32_t SLOTS = MC_Q8X_WARPS / KS, U = MC_Q8X_UNROLL, PER_IT = 32 * KS * U;
    const uint32_t nch = w.cols / 16, nsc = w.cols / MEMRA_Q8_0_BLOCK;
    uint4 *xh = (uint4 *)q8sm, *xm = xh + nch, *xl = xm + nch;
    float *xs = (float *)(xl + nch);
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, part = warp % KS, slot = warp / KS;
    const uint32_t g0 = (uint32_t)((uint64_t)n_groups * blockIdx.x / gridDim.x);
    const uint32_t g1 = (uint32_t)((uint64_t)n_groups * (blockIdx.x + 1) / gridDim.x);
    const uint32_t n_my = g0 + slot < g1 ? (g1 - g0 - slot + SLOTS - 1) / SLOTS : 0;
    const uint32_t niter = (nch + PER_IT - 1) / PER_IT, total = n_my * niter;
    const uint32_t first = lane + 32 * part;
#ifdef MC_PROF
    const bool prof_on = blockIdx.x == 0 && tid == 0;
    long long tp[6];
#endif
    MC_PT(0);

    uint4 wv[U][MC_GEMV_ROWS];
    uint16_t sv[U][MC_GEMV_ROWS];
    /* loads of flat iteration (row group k, iteration i) */
    auto load = [&](uint32_t k, uint32_t i) {
        const uint32_t r0 = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS;
#pragma unroll
        for (uint32_t u = 0; u < U; u++) {
            const uint32_t idx = first + PER_IT * i + 32 * KS * u;
            if (idx < nch) {
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                    const uint32_t row = r0 + r < w.rows ? r0 + r : r0;
                    wv[u][r] = __ldcs((const uint4 *)((const char *)w.data + (size_t)row * w.stride + (size_t)idx * 16));
                    sv[u][r] = __ldg(w.scales + (size_t)row * nsc + idx / 2);
                }
            }
        }
    };
    if (total > 0)
        load(0, 0);
    MC_PT(1);
    mc_wait_prior_grid(MC_TRIGGER_Q8); /* x (and the residual) come from earlier kernels */
    MC_PT(2);
    float ss = 0.0f;
    for (uint32_t c = tid; c < nch; c += blockDim.x) {
        float v[16];
#pragma unroll
        for (uint32_t i = 0; i < 4; i++) {
            const float4 a = __ldg((const float4 *)(x + (size_t)c * 16) + i);
            v[4 * i] = a.x;
            v[4 * i + 1] = a.y;
            v[4 * i + 2] = a.z;
            v[4 * i + 3] = a.w;
        }
        if (NORM) {
#pragma unroll
            for (uint32_t i = 0; i < 4; i++) {
                const float4 gq = __ldg((const float4 *)(norm_w + (size_t)c * 16) + i);
                ss = fmaf(v[4 * i], v[4 * i], ss);
                ss = fmaf(v[4 * i + 1], v[4 * i + 1], ss);
                ss = fmaf(v[4 * i + 2], v[4 * i + 2], ss);
                ss = fmaf(v[4 * i + 3], v[4 * i + 3], ss);
                v[4 * i] *= gq.x;
                v[4 * i + 1] *= gq.y;
                v[4 * i + 2] *= gq.z;
                v[4 * i + 3] *= gq.w;
            }
        }
        float amax = 0.0f;
        bool finite = true;
#pragma unroll
        for (uint32_t i = 0; i < 16; i++) {
            amax = fmaxf(amax, fabsf(v[i]));
            finite = finite && isfinite(v[i]);
        }
        const float inv = mc_q8x_inv(amax, finite);
        int hi[16], mid[16], lo[16];
#pragma unroll
        for (uint32_t i = 0; i < 16; i++) {
            mc_q8x_split(__float2int_rn(v[i] * inv), &hi[i], &mid[i], &lo[i]);
        }
        xh[c] = make_uint4(mc_pack4(hi[0], hi[1], hi[2], hi[3]), mc_pack4(hi[4], hi[5], hi[6], hi[7]),
                           mc_pack4(hi[8], hi[9], hi[10], hi[11]), mc_pack4(hi[12], hi[13], hi[14], hi[15]));
        xm[c] = make_uint4(mc_pack4(mid[0], mid[1], mid[2], mid[3]), mc_pack4(mid[4], mid[5], mid[6], mid[7]),
                           mc_pack4(mid[8], mid[9], mid[10], mid[11]), mc_pack4(mid[12], mid[13], mid[14], mid[15]));
        xl[c] = make_uint4(mc_pack4(lo[0], lo[1], lo[2], lo[3]), mc_pack4(lo[4], lo[5], lo[6], lo[7]),
                           mc_pack4(lo[8], lo[9], lo[10], lo[11]), mc_pack4(lo[12], lo[13], lo[14], lo[15]));
        xs[c] = mc_q8x_scale(amax, finite); /* NaN for a non-finite chunk: it stays visible */
    }
    if (NORM) {
        ss = mc_warp_sum(ss);
        if (lane == 0)
            bred[warp] = ss;
    }
    __syncthreads(); /* the quantized x and the warps' sums of squares are visible */
    float rscale = 1.0f;
    if (NORM) { /* the block sum: the warps in order, mc_block_sum's order, by every thread */
        float t = 0.0f;
#pragma unroll
        for (uint32_t k = 0; k < MC_Q8X_WARPS; k++)
            t += bred[k];
        rscale = 1.0f / sqrtf(t / (float)w.cols + eps);
    }
    MC_PT(3);

    float acc[MC_GEMV_ROWS];
#pragma unroll
    for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
        acc[r] = 0.0f;
    uint32_t k = 0, i = 0;
    for (uint32_t j = 0; j < total; j++) {
        uint4 cur[U][MC_GEMV_ROWS];
        uint16_t cs[U][MC_GEMV_ROWS];
#pragma unroll
        for (uint32_t u = 0; u < U; u++)
#pragma unroll
            for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                cur[u][r] = wv[u][r];
                cs[u][r] = sv[u][r];
            }
        if (j + 1 < total)
            load(i + 1 < niter ? k : k + 1, i + 1 < niter ? i + 1 : 0);
#pragma unroll
        for (uint32_t u = 0; u < U; u++) {
            const uint32_t idx = first + PER_IT * i + 32 * KS * u;
            if (idx < nch) {
                const uint4 h = xh[idx], md = xm[idx], lw = xl[idx];
                const float sx = xs[idx];
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                    const uint4 q = cur[u][r];
                    int dh = __dp4a((int)q.x, (int)h.x, 0);
                    dh = __dp4a((int)q.y, (int)h.y, dh);
                    dh = __dp4a((int)q.z, (int)h.z, dh);
                    dh = __dp4a((int)q.w, (int)h.w, dh);
                    int dm = __dp4a((int)q.x, (int)md.x, 0);
                    dm = __dp4a((int)q.y, (int)md.y, dm);
                    dm = __dp4a((int)q.z, (int)md.z, dm);
                    dm = __dp4a((int)q.w, (int)md.w, dm);
                    int dl = __dp4a((int)q.x, (int)lw.x, 0);
                    dl = __dp4a((int)q.y, (int)lw.y, dl);
                    dl = __dp4a((int)q.z, (int)lw.z, dl);
                    dl = __dp4a((int)q.w, (int)lw.w, dl);
                    const float dw = __half2float(__ushort_as_half(cs[u][r]));
                    const float dot = fmaf((float)dh, 65536.0f, (float)(dm * 256 + dl));
                    acc[r] = fmaf(dot, dw * sx, acc[r]);
                }
            }
        }
        if (++i < niter)
            continue;
        /* the row group's last iteration: sum, add the parts in order, write */
        float d[MC_GEMV_ROWS];
#pragma unroll
        for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
            d[r] = mc_warp_sum(acc[r]);
            acc[r] = 0.0f;
        }
        const uint32_t r0 = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS, par = k & 1;
        i = 0;
        k++;
        if (KS > 1) {
            if (lane == 0)
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                    red[par][warp][r] = d[r];
            asm volatile("bar.sync %0, %1;" ::"r"(1 + slot), "r"(32 * KS) : "memory");
            if (part != 0)
                continue;
            for (uint32_t p = 1; p < KS; p++)
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                    d[r] += red[par][warp + p][r];
        }
        if (lane != 0)
            continue;
#pragma unroll
        for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
            d[r] *= rscale;
        mc_rows_store<SWIGLU>(d, r0, w.rows, bias, residual, y);
    }
    MC_PT(4);
    MC_PT_END(8, 5, 17);
}

static thread_local int mc_pdl_arm = 1; /* the arm's pdl option, per launching thread */
void mc_set_pdl(int on) { mc_pdl_arm = on != 0; }

static int mc_pdl_enabled(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("MEMRA_CUDA_NO_PDL");
        on = !(e && *e && strcmp(e, "0") != 0);
    }
    return on && mc_pdl_arm;
}

/* Warps per row group (the columns split KS ways, parts added in order): matrices of few rows
 * would leave most of the GPU idle with one warp per 4 rows. The largest KS whose grid still fits
 * one wave of 4 blocks on each of 132 multiprocessors (rows * KS / 16 <= 528): a second, partial
 * wave costs more than the split gains (v5: qkv of llama-8b at KS 2 ran 1.5 us slower). A function
 * of the row count alone (MEMRA_CUDA_KSPLIT=1, 2 or 4 forces one, for measurements), so every arm
 * gets the same bits. */
static uint32_t mc_gemv_ksplit(uint32_t rows) {
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("MEMRA_CUDA_KSPLIT");
        int v = e ? atoi(e) : 0;
        forced = v == 1 || v == 2 || v == 4 ? v : 0;
    }
    if (forced)
        return (uint32_t)forced;
    const uint32_t wave_rows = 528u * (MC_GEMV_WARPS * MC_GEMV_ROWS); /* 8448 */
    return (uint64_t)rows * 4 <= wave_rows ? 4 : (uint64_t)rows * 2 <= wave_rows ? 2 : 1;
}

template <uint32_t T, int SWIGLU, int NORM, int KS>
static cudaError_t mc_gemv_t(const mc_matrix *w, const float *x, const float *norm_w, float eps, const float *bias,
                             const float *residual, float *y, cudaStream_t st) {
    const uint32_t per_block = MC_GEMV_WARPS / KS * MC_GEMV_ROWS;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((w->rows + per_block - 1) / per_block);
    cfg.blockDim = dim3(32 * MC_GEMV_WARPS);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = mc_pdl_enabled() ? 1 : 0;
    cudaError_t e = cudaLaunchKernelEx(&cfg, mc_gemv_kernel<T, SWIGLU, NORM, KS>, *w, x, norm_w, eps, bias, residual, y);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

/* Whether an F32/F16/BF16 GEMV uses the persistent v7 kernel: for short rows, at most 4
 * iterations of a warp per row group (llama-1b: 2048 columns; 8b: wo), where v6 pays its start
 * and drain per row group (measured: llama-1b graph 1140.8 tok/s against 1116.7; on llama-8b's
 * long rows v7 ran 2% slower: 232.2 against 237.6). MEMRA_CUDA_GEMV=6 or 7 forces one, for
 * measurements; both give the same bits. */
static int mc_gemvp_on(const mc_matrix *w, uint32_t ks) {
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("MEMRA_CUDA_GEMV");
        forced = e && strcmp(e, "6") == 0 ? 6 : e && strcmp(e, "7") == 0 ? 7 : 0;
    }
    if (forced)
        return forced == 7;
    const uint64_t nfull = w->cols / (16 / mc_type_elem_bytes(w->type));
    return (nfull + 64 * ks - 1) / (64 * ks) <= 4;
}

template <uint32_t T, int SWIGLU, int NORM, int KS>
static cudaError_t mc_gemvp_t(const mc_matrix *w, const float *x, const float *norm_w, float eps, const float *bias,
                              const float *residual, float *y, cudaStream_t st) {
    cudaError_t e = mc_gemv_prepare();
    if (e != cudaSuccess)
        return e;
    int dev = 0;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess)
        return e;
    const uint32_t n_groups = (w->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS, slots = MC_GEMV_WARPS / KS;
    const uint32_t need = (n_groups + slots - 1) / slots, cap = 4 * mc_sm_count[dev];
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(need < cap ? need : cap);
    cfg.blockDim = dim3(32 * MC_GEMV_WARPS);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = mc_pdl_enabled() ? 1 : 0;
    e = cudaLaunchKernelEx(&cfg, mc_gemvp_kernel<T, SWIGLU, NORM, KS>, *w, x, norm_w, eps, bias, residual, y, n_groups);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

template <int SWIGLU, int NORM, int KS>
static cudaError_t mc_gemv_typed_ks(const mc_matrix *w, const float *x, const float *norm_w, float eps,
                                    const float *bias, const float *residual, float *y, cudaStream_t st) {
    if (w->type != MEMRA_TYPE_Q8_0 && mc_gemvp_on(w, KS))
        switch (w->type) {
        case MEMRA_TYPE_F32: return mc_gemvp_t<MEMRA_TYPE_F32, SWIGLU, NORM, KS>(w, x, norm_w, eps, bias, residual, y, st);
        case MEMRA_TYPE_F16: return mc_gemvp_t<MEMRA_TYPE_F16, SWIGLU, NORM, KS>(w, x, norm_w, eps, bias, residual, y, st);
        case MEMRA_TYPE_BF16: return mc_gemvp_t<MEMRA_TYPE_BF16, SWIGLU, NORM, KS>(w, x, norm_w, eps, bias, residual, y, st);
        default: return cudaErrorInvalidValue;
        }
    switch (w->type) {
    case MEMRA_TYPE_F32: return mc_gemv_t<MEMRA_TYPE_F32, SWIGLU, NORM, KS>(w, x, norm_w, eps, bias, residual, y, st);
    case MEMRA_TYPE_F16: return mc_gemv_t<MEMRA_TYPE_F16, SWIGLU, NORM, KS>(w, x, norm_w, eps, bias, residual, y, st);
    case MEMRA_TYPE_BF16: return mc_gemv_t<MEMRA_TYPE_BF16, SWIGLU, NORM, KS>(w, x, norm_w, eps, bias, residual, y, st);
    case MEMRA_TYPE_Q8_0: return mc_gemv_t<MEMRA_TYPE_Q8_0, SWIGLU, NORM, KS>(w, x, norm_w, eps, bias, residual, y, st);
    default: return cudaErrorInvalidValue;
    }
}

template <int SWIGLU, int NORM>
static cudaError_t mc_gemv_typed(const mc_matrix *w, const float *x, const float *norm_w, float eps,
                                 const float *bias, const float *residual, float *y, cudaStream_t st) {
    switch (mc_gemv_ksplit(w->rows)) {
    case 1: return mc_gemv_typed_ks<SWIGLU, NORM, 1>(w, x, norm_w, eps, bias, residual, y, st);
    case 2: return mc_gemv_typed_ks<SWIGLU, NORM, 2>(w, x, norm_w, eps, bias, residual, y, st);
    default: return mc_gemv_typed_ks<SWIGLU, NORM, 4>(w, x, norm_w, eps, bias, residual, y, st);
    }
}

/* ---- Q8_0 v7 launch ---------------------------------------------------------------------- */

#define MC_Q8X_SMEM_MAX (96u * 1024u)

static int mc_q8x_serves(const mc_matrix *w) {
    static int v6 = -1;
    if (v6 < 0) {
        const char *e = getenv("MEMRA_CUDA_Q8_V6");
        v6 = e && *e && strcmp(e, "0") != 0;
    }
    /* the quantization costs one pass over x per block: it pays where a block has rows enough
     * (rows >= cols / 2: not the down projection, whose v6 kernel is faster; measured) */
    return !v6 && w->type == MEMRA_TYPE_Q8_0 && w->cols % MEMRA_Q8_0_BLOCK == 0 && w->cols > 0 &&
           (uint64_t)w->rows * 2 >= w->cols && mc_q8x_smem(w->cols) <= MC_Q8X_SMEM_MAX;
}

#define MC_Q8X_EACH(F)                                                                                                 \
    F(0, 0, 1) F(0, 0, 2) F(0, 0, 4) F(0, 1, 1) F(0, 1, 2) F(0, 1, 4) F(1, 0, 1) F(1, 0, 2) F(1, 0, 4) F(1, 1, 1)    \
        F(1, 1, 2) F(1, 1, 4)

cudaError_t mc_gemv_prepare(void) {
    int dev = 0, n = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    if (dev < 0 || dev >= MC_MAX_DEVICES)
        return cudaErrorInvalidDevice;
    if (mc_sm_count[dev])
        return cudaSuccess;
    if ((e = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
        return e;
#define MC_Q8X_SET(S, N, K)                                                                                            \
    if ((e = cudaFuncSetAttribute(mc_q8x_kernel<S, N, K>, cudaFuncAttributeMaxDynamicSharedMemorySize,               \
                                  (int)MC_Q8X_SMEM_MAX)) != cudaSuccess)                                              \
        return e;
    MC_Q8X_EACH(MC_Q8X_SET)
#undef MC_Q8X_SET
    const char *tm = getenv("MEMRA_CUDA_TRIGGER");
    const unsigned mask = tm && *tm ? (unsigned)strtoul(tm, NULL, 0) & MC_TRIGGER_ALL : MC_TRIGGER_DEFAULT;
    if ((e = cudaMemcpyToSymbol(mc_trigger_mask, &mask, sizeof mask)) != cudaSuccess)
        return e;
    mc_sm_count[dev] = n > 0 ? (uint32_t)n : 1;
    return cudaSuccess;
}

template <int SWIGLU, int NORM, int KS>
static cudaError_t mc_q8x_t(const mc_matrix *w, const float *x, const float *norm_w, float eps, const float *bias,
                            const float *residual, float *y, cudaStream_t st) {
    cudaError_t e = mc_gemv_prepare();
    if (e != cudaSuccess)
        return e;
    int dev = 0;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess)
        return e;
    const uint32_t n_groups = (w->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS, slots = MC_Q8X_WARPS / KS;
    const uint32_t need = (n_groups + slots - 1) / slots, cap = 2 * mc_sm_count[dev];
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(need < cap ? need : cap);
    cfg.blockDim = dim3(32 * MC_Q8X_WARPS);
    cfg.dynamicSmemBytes = mc_q8x_smem(w->cols);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = mc_pdl_enabled() ? 1 : 0;
    e = cudaLaunchKernelEx(&cfg, mc_q8x_kernel<SWIGLU, NORM, KS>, *w, x, norm_w, eps, bias, residual, y, n_groups);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

/* Column parts of the v7 Q8_0 GEMV: the largest of 4, 2, 1 with row groups * KS <= 2112 (8 warps
 * in two blocks on each of 132 multiprocessors); a function of the row count alone (the
 * MEMRA_CUDA_KSPLIT override applies too). */
static uint32_t mc_q8x_ksplit(uint32_t rows) {
    const char *e = getenv("MEMRA_CUDA_KSPLIT");
    const int v = e ? atoi(e) : 0;
    if (v == 1 || v == 2 || v == 4)
        return (uint32_t)v;
    const uint64_t groups = (rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS;
    return groups * 4 <= 2112 ? 4 : groups * 2 <= 2112 ? 2 : 1;
}

template <int SWIGLU, int NORM>
static cudaError_t mc_q8x_any(const mc_matrix *w, const float *x, const float *norm_w, float eps, const float *bias,
                              const float *residual, float *y, cudaStream_t st) {
    switch (mc_q8x_ksplit(w->rows)) {
    case 1: return mc_q8x_t<SWIGLU, NORM, 1>(w, x, norm_w, eps, bias, residual, y, st);
    case 2: return mc_q8x_t<SWIGLU, NORM, 2>(w, x, norm_w, eps, bias, residual, y, st);
    default: return mc_q8x_t<SWIGLU, NORM, 4>(w, x, norm_w, eps, bias, residual, y, st);
    }
}

template <int SWIGLU>
static cudaError_t mc_gemv_any(const mc_matrix *w, const float *x, const float *norm_w, float eps, const float *bias,
                               const float *residual, float *y, cudaStream_t st) {
    if (mc_q8x_serves(w))
        return norm_w ? mc_q8x_any<SWIGLU, 1>(w, x, norm_w, eps, bias, residual, y, st)
                      : mc_q8x_any<SWIGLU, 0>(w, x, norm_w, eps, bias, residual, y, st);
    return norm_w ? mc_gemv_typed<SWIGLU, 1>(w, x, norm_w, eps, bias, residual, y, st)
                  : mc_gemv_typed<SWIGLU, 0>(w, x, norm_w, eps, bias, residual, y, st);
}

cudaError_t mc_gemv(const mc_matrix *w, const float *x, const float *norm_w, float eps, const float *bias,
                    const float *residual, float *y, cudaStream_t st) {
    return mc_gemv_any<0>(w, x, norm_w, eps, bias, residual, y, st);
}

cudaError_t mc_gemv_swiglu(const mc_matrix *w, const float *x, const float *norm_w, float eps, float *y,
                           cudaStream_t st) {
    if (w->rows % 2)
        return cudaErrorInvalidValue;
    return mc_gemv_any<1>(w, x, norm_w, eps, NULL, NULL, y, st);
}

/* ---- norms, embedding ------------------------------------------------------------------- */

/* Reads x, weight (n floats each); writes out (n floats). */
__global__ void __launch_bounds__(1024) mc_rmsnorm_kernel(const float *x, const float *weight, float *out, uint32_t n,
                                                         float eps) {
    __shared__ float red[33];
    float ss = 0.0f;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        ss = fmaf(x[i], x[i], ss);
    ss = mc_block_sum(ss, red);
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        out[i] = x[i] * scale * weight[i];
}

cudaError_t mc_rmsnorm(const float *x, const float *weight, float *out, uint32_t n, float eps, cudaStream_t st) {
    mc_rmsnorm_kernel<<<1, 1024, 0, st>>>(x, weight, out, n, eps);
    return cudaGetLastError();
}

/* Reads one embedding row (cols elements) and *token; writes x (cols floats). */
__global__ void mc_embed_kernel(const mc_matrix emb, const int32_t *token, float *x) {
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
    mc_embed_kernel<<<blocks, 256, 0, st>>>(*emb, token, x);
    return cudaGetLastError();
}

/* ---- q/k norm, RoPE, KV append ---------------------------------------------------------- */

/* One block per head (q heads, then kv heads). Reads qkv (one token), freqs, norms, *pos;
 * writes q in place and one row of k and v into this layer's cache at *pos. */
__global__ void mc_rope_kv_kernel(const mc_rope_args a, float *qkv, float *k_cache, float *v_cache, const int32_t *pos) {
    extern __shared__ float vec[]; /* hd floats */
    __shared__ float red[33];
    const int32_t p = *pos;
    const uint32_t h = blockIdx.x;
    const bool is_q = h < a.n_head;
    const uint32_t kvh = is_q ? 0 : h - a.n_head;
    float *src = is_q ? qkv + (size_t)h * a.hd : qkv + (size_t)a.n_head * a.hd + (size_t)kvh * a.hd;
    const float *norm = is_q ? a.q_norm : a.k_norm;

    for (uint32_t i = threadIdx.x; i < a.hd; i += blockDim.x)
        vec[i] = src[i];
    __syncthreads();
    if (norm) {
        float ss = 0.0f;
        for (uint32_t i = threadIdx.x; i < a.hd; i += blockDim.x)
            ss = fmaf(vec[i], vec[i], ss);
        ss = mc_block_sum(ss, red);
        float scale = 1.0f / sqrtf(ss / (float)a.hd + a.eps);
        for (uint32_t i = threadIdx.x; i < a.hd; i += blockDim.x)
            vec[i] = vec[i] * scale * norm[i];
        __syncthreads();
    }
    float *dst = is_q ? src : k_cache + ((size_t)kvh * a.capacity + (size_t)p) * a.hd;
    const uint32_t half_dim = a.hd / 2;
    const float fpos = (float)p * a.pos_scale;
    for (uint32_t i = threadIdx.x; i < half_dim; i += blockDim.x) {
        uint32_t i0 = a.neox ? i : 2 * i, i1 = a.neox ? i + half_dim : 2 * i + 1;
        float s, c;
        sincosf(fpos * a.freqs[i], &s, &c);
        float x0 = vec[i0], x1 = vec[i1];
        dst[i0] = x0 * c - x1 * s;
        dst[i1] = x0 * s + x1 * c;
    }
    if (!is_q) {
        const float *v = qkv + (size_t)(a.n_head + a.n_kv) * a.hd + (size_t)kvh * a.hdv;
        float *vd = v_cache + ((size_t)kvh * a.capacity + (size_t)p) * a.hdv;
        for (uint32_t i = threadIdx.x; i < a.hdv; i += blockDim.x)
            vd[i] = v[i];
    }
}

cudaError_t mc_rope_kv(const mc_rope_args *a, float *qkv, float *k_cache, float *v_cache, const int32_t *pos,
                       cudaStream_t st) {
    mc_rope_kv_kernel<<<a->n_head + a->n_kv, 128, a->hd * sizeof(float), st>>>(*a, qkv, k_cache, v_cache, pos);
    return cudaGetLastError();
}

/* ---- attention -------------------------------------------------------------------------- */

uint32_t mc_att_max_chunks(uint32_t capacity) { return (capacity + MC_ATT_CHUNK - 1) / MC_ATT_CHUNK; }

uint64_t mc_att_partial_floats(uint32_t n_head, uint32_t hdv, uint32_t capacity) {
    return (uint64_t)n_head * mc_att_max_chunks(capacity) * (hdv + 2);
}

/* Block (kv head g, chunk c) over positions [32c, min(32c+32, *pos+1)), for the G = n_head/n_kv
 * q heads that share kv head g, so each K and V row is read once per chunk. Reads the G q
 * vectors and that range of k and v; writes per q head the partial (max, sum, out[hdv]).
 * Scores: one thread per (q head, position), the dot in dimension order; softmax sums in
 * position order; out: one thread per dimension, positions in order. */
template <uint32_t HD> /* head_dim when 64 or 128 (loops unrolled), 0: given at run time */
__global__ void __launch_bounds__(128) mc_att_chunk_kernel(const float *q, const float *k_cache, const float *v_cache,
                                                           float *partial, uint32_t n_head, uint32_t n_kv,
                                                           uint32_t hd_rt, uint32_t hdv, uint32_t capacity,
                                                           uint32_t max_chunks, const int32_t *pos) {
    const uint32_t hd = HD ? HD : hd_rt;
    extern __shared__ float sm[]; /* q[G][hd], p[G][MC_ATT_CHUNK], m[G], l[G] */
    const uint32_t G = n_head / n_kv;
    float *qs = sm, *ps = sm + G * hd, *ms = ps + G * MC_ATT_CHUNK;
    const uint32_t npos = (uint32_t)*pos + 1;
    const uint32_t g = blockIdx.x, c = blockIdx.y, t0 = c * MC_ATT_CHUNK;
    if (t0 >= npos)
        return;
    const uint32_t nt = min(t0 + MC_ATT_CHUNK, npos) - t0;
    const float *kb = k_cache + ((size_t)g * capacity + t0) * hd;
    const float *vb = v_cache + ((size_t)g * capacity + t0) * hdv;
    const float scale = 1.0f / sqrtf((float)hd);
    for (uint32_t i = threadIdx.x; i < G * hd; i += blockDim.x)
        qs[i] = q[(size_t)g * G * hd + i];
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < G * MC_ATT_CHUNK; i += blockDim.x) {
        const uint32_t hq = i / MC_ATT_CHUNK, t = i % MC_ATT_CHUNK;
        float acc = -INFINITY;
        if (t < nt) {
            const float *k = kb + (size_t)t * hd, *qq = qs + (size_t)hq * hd;
            acc = 0.0f;
            if ((hd & 3) == 0) {
#pragma unroll 16
                for (uint32_t d = 0; d < hd; d += 4) {
                    float4 kv = *(const float4 *)(k + d);
                    acc = fmaf(qq[d], kv.x, acc);
                    acc = fmaf(qq[d + 1], kv.y, acc);
                    acc = fmaf(qq[d + 2], kv.z, acc);
                    acc = fmaf(qq[d + 3], kv.w, acc);
                }
            } else {
                for (uint32_t d = 0; d < hd; d++)
                    acc = fmaf(qq[d], k[d], acc);
            }
            acc *= scale;
        }
        ps[i] = acc;
    }
    __syncthreads();
    if (threadIdx.x < G) {
        const float *p = ps + threadIdx.x * MC_ATT_CHUNK;
        float m = p[0];
        for (uint32_t t = 1; t < nt; t++)
            m = fmaxf(m, p[t]);
        ms[threadIdx.x] = m;
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < G * MC_ATT_CHUNK; i += blockDim.x)
        ps[i] = i % MC_ATT_CHUNK < nt ? expf(ps[i] - ms[i / MC_ATT_CHUNK]) : 0.0f;
    __syncthreads();
    if (threadIdx.x < G) {
        const float *p = ps + threadIdx.x * MC_ATT_CHUNK;
        float l = 0.0f;
        for (uint32_t t = 0; t < nt; t++)
            l += p[t];
        float *out = partial + ((size_t)(g * G + threadIdx.x) * max_chunks + c) * (hdv + 2);
        out[0] = ms[threadIdx.x];
        out[1] = l;
    }
    for (uint32_t i = threadIdx.x; i < G * hdv; i += blockDim.x) {
        const uint32_t hq = i / hdv, d = i % hdv;
        const float *p = ps + hq * MC_ATT_CHUNK;
        float o = 0.0f;
#pragma unroll 8
        for (uint32_t t = 0; t < nt; t++)
            o = fmaf(p[t], vb[(size_t)t * hdv + d], o);
        partial[((size_t)(g * G + hq) * max_chunks + c) * (hdv + 2) + 2 + d] = o;
    }
}

/* One block per q head: merges the chunks in index order. The chunk maxima and sums are first
 * loaded in parallel into shared memory (a serial loop over global loads would pay one memory
 * latency per chunk). Reads the partials; writes out[hdv]. */
__global__ void __launch_bounds__(128) mc_att_combine_kernel(const float *partial, float *out, uint32_t hdv,
                                                             uint32_t max_chunks, const int32_t *pos) {
    extern __shared__ float cs[]; /* m[max_chunks], l[max_chunks], w[max_chunks], [3*max_chunks] = 1/L */
    float *ms = cs, *ls = cs + max_chunks, *wts = cs + 2 * max_chunks;
    const uint32_t npos = (uint32_t)*pos + 1;
    const uint32_t nc = (npos + MC_ATT_CHUNK - 1) / MC_ATT_CHUNK;
    const float *ph = partial + (size_t)blockIdx.x * max_chunks * (hdv + 2);
    for (uint32_t c = threadIdx.x; c < nc; c += blockDim.x) {
        ms[c] = ph[(size_t)c * (hdv + 2)];
        ls[c] = ph[(size_t)c * (hdv + 2) + 1];
    }
    __syncthreads();
    float m = ms[0];
    for (uint32_t c = 1; c < nc; c++)
        m = fmaxf(m, ms[c]);
    for (uint32_t c = threadIdx.x; c < nc; c += blockDim.x)
        wts[c] = expf(ms[c] - m);
    __syncthreads();
    if (threadIdx.x == 0) {
        float l = 0.0f;
        for (uint32_t c = 0; c < nc; c++)
            l = fmaf(ls[c], wts[c], l);
        cs[3 * max_chunks] = 1.0f / l;
    }
    __syncthreads();
    const float inv = cs[3 * max_chunks];
    for (uint32_t d = threadIdx.x; d < hdv; d += blockDim.x) {
        float o = 0.0f;
#pragma unroll 8
        for (uint32_t c = 0; c < nc; c++)
            o = fmaf(ph[(size_t)c * (hdv + 2) + 2 + d], wts[c], o);
        out[(size_t)blockIdx.x * hdv + d] = o * inv;
    }
}

cudaError_t mc_attention(const float *q, const float *k_cache, const float *v_cache, float *partial, float *out,
                         uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv, uint32_t capacity,
                         const int32_t *pos, cudaStream_t st) {
    const uint32_t mc = mc_att_max_chunks(capacity), G = n_head / n_kv;
    const size_t smem = ((size_t)G * hd + (size_t)G * MC_ATT_CHUNK + G) * sizeof(float);
    dim3 grid(n_kv, mc);
    if (hd == 128)
        mc_att_chunk_kernel<128><<<grid, 128, smem, st>>>(q, k_cache, v_cache, partial, n_head, n_kv, hd, hdv, capacity,
                                                          mc, pos);
    else if (hd == 64)
        mc_att_chunk_kernel<64><<<grid, 128, smem, st>>>(q, k_cache, v_cache, partial, n_head, n_kv, hd, hdv, capacity,
                                                         mc, pos);
    else
        mc_att_chunk_kernel<0><<<grid, 128, smem, st>>>(q, k_cache, v_cache, partial, n_head, n_kv, hd, hdv, capacity,
                                                        mc, pos);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    mc_att_combine_kernel<<<n_head, 128, (3 * mc + 1) * sizeof(float), st>>>(partial, out, hdv, mc, pos);
    return cudaGetLastError();
}

/* ---- fused decode attention: q/k norm, RoPE, KV append, attention, combine -------------- */

/* One cluster of MC_ATT_SPLIT blocks per kv head g. The positions [0, *pos] are split into
 * MC_ATT_SPLIT contiguous ranges (a function of *pos alone); block r walks its range in tiles of
 * MC_ATT_TILE positions with an online softmax (tiles in order), then the cluster merges the
 * blocks' (max, sum, out) through distributed shared memory in rank order: every output element
 * has one fixed formula, whichever thread computes it. Each block ropes (and norms) the G q heads
 * itself (the same code everywhere, so the same bits); the block whose range holds *pos ropes the
 * new k, appends k and v to the cache and uses them from shared memory. The tiles of cached rows
 * (all written by earlier steps) stream in by cp.async, the first before the wait on the qkv
 * GEMV. Reads qkv (one token), freqs, norms, *pos, this layer's K and V rows [0, *pos); writes
 * the K and V rows at *pos and out[n_head][hdv]. */
#define MC_ATT_SPLIT 8u
#define MC_ATT_TILE 32u
#define MC_ATT_THREADS 128u

namespace cg = cooperative_groups;

__device__ __forceinline__ void mc_cp_async16(void *smem, const void *gmem) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void mc_cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* Waits until at most `pending` of this thread's newest copy groups are still in flight. */
__device__ __forceinline__ void mc_cp_async_wait(uint32_t pending) {
    if (pending >= 2)
        asm volatile("cp.async.wait_group 2;" ::: "memory");
    else if (pending == 1)
        asm volatile("cp.async.wait_group 1;" ::: "memory");
    else
        asm volatile("cp.async.wait_group 0;" ::: "memory");
}

/* The shared-memory layout (floats; every array starts 16-byte aligned). */
struct mc_att_layout {
    uint32_t G4, kst, nb, qs, ks, vs, ps, os, st, kn, vn, total;
};
/* nb tile buffers: up to 4 (3 tiles in flight ahead of the one in use) while the block stays
 * under 160 KB, at least 2. */
__host__ __device__ inline mc_att_layout mc_att_layout_of(uint32_t G, uint32_t hd, uint32_t hdv) {
    mc_att_layout L;
    L.G4 = (G + 3) / 4 * 4;
    L.kst = hd + 4; /* padded K rows: a warp's 16-byte loads of 32 rows hit distinct banks */
    for (L.nb = 4;; L.nb--) {
        uint32_t o = 0;
        L.qs = o; o += G * hd;
        L.ks = o; o += L.nb * MC_ATT_TILE * L.kst;
        L.vs = o; o += L.nb * MC_ATT_TILE * hdv;
        L.ps = o; o += MC_ATT_TILE * L.G4;
        L.os = o; o += G * hdv;
        L.st = o; o += (3 * G + 3) / 4 * 4;
        L.kn = o; o += hd;
        L.vn = o; o += hdv;
        L.total = o;
        if (L.nb == 2 || (uint64_t)o * 4 <= 160u * 1024u)
            return L;
    }
}

/* Queues the cache rows [t0, t0+nt) except `skip` into one tile buffer. */
__device__ __forceinline__ void mc_att_load_tile(float *ks, float *vs, const float *kb, const float *vb, uint32_t t0,
                                                 uint32_t nt, uint32_t skip, uint32_t hd, uint32_t hdv, uint32_t kst) {
    const uint32_t kq = hd / 4, vq = hdv / 4;
    for (uint32_t i = threadIdx.x; i < nt * kq; i += blockDim.x) {
        const uint32_t t = i / kq, c = i % kq;
        if (t0 + t != skip)
            mc_cp_async16(ks + t * kst + 4 * c, kb + (size_t)(t0 + t) * hd + 4 * c);
    }
    for (uint32_t i = threadIdx.x; i < nt * vq; i += blockDim.x) {
        const uint32_t t = i / vq, c = i % vq;
        if (t0 + t != skip)
            mc_cp_async16(vs + t * hdv + 4 * c, vb + (size_t)(t0 + t) * hdv + 4 * c);
    }
    mc_cp_async_commit();
}

/* In place: RMSNorm (when norm) of n_vec vectors of hd floats, warp w taking vectors w, w+nw.. */
__device__ void mc_att_norm(float *v, uint32_t n_vec, uint32_t hd, const float *norm, float eps) {
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (uint32_t h = warp; h < n_vec; h += nw) {
        float *x = v + (size_t)h * hd, ss = 0.0f;
        for (uint32_t i = lane; i < hd; i += 32)
            ss = fmaf(x[i], x[i], ss);
        ss = __shfl_sync(MC_FULL, mc_warp_sum(ss), 0);
        const float scale = 1.0f / sqrtf(ss / (float)hd + eps);
        for (uint32_t i = lane; i < hd; i += 32)
            x[i] = x[i] * scale * norm[i];
    }
}

/* In place: RoPE at position p of n_vec vectors of hd floats (one thread per pair). */
__device__ void mc_att_rope(float *v, uint32_t n_vec, const mc_rope_args &a, uint32_t hd, int32_t p) {
    const uint32_t half_dim = hd / 2;
    const float fpos = (float)p * a.pos_scale;
    for (uint32_t i = threadIdx.x; i < n_vec * half_dim; i += blockDim.x) {
        const uint32_t h = i / half_dim, j = i % half_dim;
        const uint32_t i0 = a.neox ? j : 2 * j, i1 = a.neox ? j + half_dim : 2 * j + 1;
        float s, c;
        sincosf(fpos * a.freqs[j], &s, &c);
        float *x = v + (size_t)h * hd;
        const float x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
    }
}

template <uint32_t HD> /* head_dim when 64 or 128 (dot unrolled), 0: given at run time */
__global__ void __launch_bounds__(MC_ATT_THREADS) mc_att_fused_kernel(const mc_rope_args a, const float *qkv,
                                                                      float *k_cache, float *v_cache, float *out,
                                                                      const int32_t *pos) {
    cg::cluster_group cluster = cg::this_cluster();
    extern __shared__ __align__(16) float sm[];
    const uint32_t hd = HD ? HD : a.hd, hdv = a.hdv, G = a.n_head / a.n_kv;
    const mc_att_layout L = mc_att_layout_of(G, hd, hdv);
    float *qs = sm + L.qs, *ps = sm + L.ps, *os = sm + L.os, *st = sm + L.st, *kn = sm + L.kn, *vn = sm + L.vn;
    float *ms = st, *ls = st + G, *als = st + 2 * G;
    const uint32_t r = blockIdx.x, g = blockIdx.y, lane = threadIdx.x & 31;
    const int32_t p = *pos; /* written by the commit of an earlier step: ordered before the qkv GEMV */
    const uint32_t npos = (uint32_t)p + 1, per = (npos + MC_ATT_SPLIT - 1) / MC_ATT_SPLIT;
    const uint32_t p0 = min(r * per, npos), p1 = min(p0 + per, npos);
    const bool has_new = p0 <= (uint32_t)p && (uint32_t)p < p1;
    const float *kb = k_cache + (size_t)g * a.capacity * hd, *vb = v_cache + (size_t)g * a.capacity * hdv;
    const uint32_t n_tiles = (p1 - p0 + MC_ATT_TILE - 1) / MC_ATT_TILE;
    /* rows below *pos were written by earlier steps: stream the first nb-1 tiles before the wait
     * (one copy group per tile; tile j goes to buffer j % nb) */
    for (uint32_t j = 0; j < n_tiles && j + 1 < L.nb; j++) {
        const uint32_t t0 = p0 + j * MC_ATT_TILE;
        mc_att_load_tile(sm + L.ks + j * MC_ATT_TILE * L.kst, sm + L.vs + j * MC_ATT_TILE * hdv, kb, vb, t0,
                         min(MC_ATT_TILE, p1 - t0), (uint32_t)p, hd, hdv, L.kst);
    }
    mc_wait_prior_grid(MC_ATT_FAMILY(a));
    for (uint32_t i = threadIdx.x; i < G * hd; i += blockDim.x)
        qs[i] = qkv[(size_t)g * G * hd + i];
    if (has_new) {
        for (uint32_t i = threadIdx.x; i < hd; i += blockDim.x)
            kn[i] = qkv[(size_t)a.n_head * hd + (size_t)g * hd + i];
        for (uint32_t i = threadIdx.x; i < hdv; i += blockDim.x)
            vn[i] = qkv[(size_t)(a.n_head + a.n_kv) * hd + (size_t)g * hdv + i];
    }
    for (uint32_t i = threadIdx.x; i < G; i += blockDim.x) {
        ms[i] = -INFINITY;
        ls[i] = 0.0f;
    }
    for (uint32_t i = threadIdx.x; i < G * hdv; i += blockDim.x)
        os[i] = 0.0f;
    __syncthreads();
    if (a.q_norm)
        mc_att_norm(qs, G, hd, a.q_norm, a.eps);
    if (has_new && a.k_norm)
        mc_att_norm(kn, 1, hd, a.k_norm, a.eps);
    __syncthreads();
    mc_att_rope(qs, G, a, hd, p);
    if (has_new)
        mc_att_rope(kn, 1, a, hd, p);
    __syncthreads();
    if (has_new) {
        float *kd = k_cache + ((size_t)g * a.capacity + (size_t)p) * hd;
        float *vd = v_cache + ((size_t)g * a.capacity + (size_t)p) * hdv;
        for (uint32_t i = threadIdx.x; i < hd; i += blockDim.x)
            kd[i] = kn[i];
        for (uint32_t i = threadIdx.x; i < hdv; i += blockDim.x)
            vd[i] = vn[i];
    }
    const float scale = 1.0f / sqrtf((float)hd);
    for (uint32_t j = 0; j < n_tiles; j++) {
        const uint32_t t0 = p0 + j * MC_ATT_TILE, nt = min(MC_ATT_TILE, p1 - t0), b = j % L.nb;
        float *ks = sm + L.ks + b * MC_ATT_TILE * L.kst, *vs = sm + L.vs + b * MC_ATT_TILE * hdv;
        /* queued so far: tiles 0 .. min(j + nb - 2, n_tiles - 1); tile j must have landed */
        mc_cp_async_wait(min(j + L.nb - 2, n_tiles - 1) - j);
        __syncthreads(); /* tile j landed for every thread; tile j-1's buffer is free */
        if (j + L.nb - 1 < n_tiles) {
            const uint32_t jn = j + L.nb - 1, tn = p0 + jn * MC_ATT_TILE;
            mc_att_load_tile(sm + L.ks + (jn % L.nb) * MC_ATT_TILE * L.kst,
                             sm + L.vs + (jn % L.nb) * MC_ATT_TILE * hdv, kb, vb, tn, min(MC_ATT_TILE, p1 - tn),
                             (uint32_t)p, hd, hdv, L.kst);
        }
        if (has_new && (uint32_t)p < t0 + nt) { /* the new row, from shared memory */
            const uint32_t t = (uint32_t)p - t0;
            for (uint32_t i = threadIdx.x; i < hd; i += blockDim.x)
                ks[t * L.kst + i] = kn[i];
            for (uint32_t i = threadIdx.x; i < hdv; i += blockDim.x)
                vs[t * hdv + i] = vn[i];
            __syncthreads();
        }
        /* scores and the online softmax: warp-uniform head, lane = position */
        for (uint32_t i = threadIdx.x; i < G * MC_ATT_TILE; i += blockDim.x) {
            const uint32_t h = i / MC_ATT_TILE, t = i % MC_ATT_TILE;
            float s = -INFINITY;
            if (t < nt) {
                const float *k = ks + t * L.kst, *q = qs + (size_t)h * hd;
                float acc = 0.0f;
#pragma unroll 8
                for (uint32_t d = 0; d < hd; d += 4) {
                    const float4 kv = *(const float4 *)(k + d);
                    const float4 qv = *(const float4 *)(q + d);
                    acc = fmaf(qv.x, kv.x, acc);
                    acc = fmaf(qv.y, kv.y, acc);
                    acc = fmaf(qv.z, kv.z, acc);
                    acc = fmaf(qv.w, kv.w, acc);
                }
                s = acc * scale;
            }
            float tmax = s;
            for (int o = 16; o > 0; o >>= 1)
                tmax = fmaxf(tmax, __shfl_xor_sync(MC_FULL, tmax, o)); /* max: exact in any order */
            const float m_old = ms[h], m_new = fmaxf(m_old, tmax);
            const float e = t < nt ? expf(s - m_new) : 0.0f;
            const float lt = mc_warp_sum(e);
            ps[t * L.G4 + h] = e;
            __syncwarp();
            if (lane == 0) {
                const float alpha = expf(m_old - m_new); /* 0 on the first tile (m_old = -inf) */
                ls[h] = fmaf(ls[h], alpha, lt);
                ms[h] = m_new;
                als[h] = alpha;
            }
        }
        __syncthreads();
        /* out: one thread per dimension, up to 4 heads at once (V read once), positions in order */
        for (uint32_t d = threadIdx.x; d < hdv; d += blockDim.x) {
            for (uint32_t h0 = 0; h0 < G; h0 += 4) {
                float o[4];
#pragma unroll
                for (int k = 0; k < 4; k++)
                    o[k] = h0 + k < G ? os[(h0 + k) * hdv + d] * als[h0 + k] : 0.0f;
#pragma unroll 4
                for (uint32_t t = 0; t < nt; t++) {
                    const float v = vs[t * hdv + d];
                    const float4 pv = *(const float4 *)(ps + t * L.G4 + h0);
                    o[0] = fmaf(pv.x, v, o[0]);
                    o[1] = fmaf(pv.y, v, o[1]);
                    o[2] = fmaf(pv.z, v, o[2]);
                    o[3] = fmaf(pv.w, v, o[3]);
                }
#pragma unroll
                for (int k = 0; k < 4; k++)
                    if (h0 + k < G)
                        os[(h0 + k) * hdv + d] = o[k];
            }
        }
    }
    cluster.sync(); /* every block's (m, l, out) visible to the cluster */
    /* the merge: block r writes elements [r*per_e, (r+1)*per_e) of this group's G*hdv outputs */
    const uint32_t n_e = G * hdv, per_e = (n_e + MC_ATT_SPLIT - 1) / MC_ATT_SPLIT;
    for (uint32_t e = r * per_e + threadIdx.x; e < min(n_e, (r + 1) * per_e); e += blockDim.x) {
        const uint32_t h = e / hdv;
        float mr[MC_ATT_SPLIT], lr[MC_ATT_SPLIT], orr[MC_ATT_SPLIT];
#pragma unroll
        for (uint32_t s = 0; s < MC_ATT_SPLIT; s++) {
            const float *rst = cluster.map_shared_rank(st, s);
            mr[s] = rst[h];
            lr[s] = rst[G + h];
            orr[s] = cluster.map_shared_rank(os, s)[e];
        }
        float M = mr[0];
#pragma unroll
        for (uint32_t s = 1; s < MC_ATT_SPLIT; s++)
            M = fmaxf(M, mr[s]);
        float l = 0.0f, o = 0.0f;
#pragma unroll
        for (uint32_t s = 0; s < MC_ATT_SPLIT; s++) {
            const float w = expf(mr[s] - M); /* an empty range: m = -inf, weight 0 */
            l = fmaf(lr[s], w, l);
            o = fmaf(orr[s], w, o);
        }
        out[(size_t)(g * G + h) * hdv + (e % hdv)] = o * (1.0f / l);
    }
    cluster.sync(); /* no block leaves while another may still read its shared memory */
}

/* ---- decode attention v7: lane groups own positions ------------------------------------- */

/* One cluster of MC_ATT_SPLIT blocks per kv head g, as above, but the work inside a block is
 * shaped for latency: 8 warps = 16 groups of 16 lanes; a group owns positions (group q takes the
 * tile's positions q, q + 16, ...) two at a time, and each lane holds DPL = hd/16 dimensions of a
 * position's K and V row and of every q head of the group (lane l: dimensions 64k + 4l .. 64k +
 * 4l + 3 for slot k when DPL >= 4, 2l and 2l + 1 when DPL = 2, so a group's 16-byte shared loads
 * cover one row without bank conflicts). A score is the lane's partial dot, then a fixed xor tree
 * over the 16 lanes; each group keeps an online softmax (m, l, o) per head over its positions in
 * order. The block's whole position range streams into shared memory by cp.async (two tiles of
 * 8192/hd positions in flight; the first two before the wait on the qkv GEMV); then the 16 group
 * states merge in group order, and each block pushes its state (m and l of every head, and each
 * output element) into the shared memory of the block that finishes that element (element e: rank
 * e / per_e); after one cluster barrier every block merges the 8 states of its elements in rank
 * order from its own shared memory (v7.2: the pull of v7 read the other blocks' memory after a
 * barrier and needed a second one before any block could leave; same formula, same bits). Every
 * output element has one fixed formula: the bits depend on *pos and the shapes only. q is normed
 * (qwen3) and roped in registers by every group alike, the RoPE angles computed before the wait;
 * the block whose range holds *pos computes the new k and v row (warp 0), appends it to the cache
 * and uses it from shared memory. Serves hd == hdv in {32, 64, 128} and G = n_head/n_kv in {1, 2,
 * 4, 8}. */
#define MC_AT2_WARPS 8u
#define MC_AT2_TILE_FLOATS 8192u /* floats of one K (or V) tile buffer: 8192 / hd positions */

/* Output elements of a kv head's G * hd that each block of the cluster finishes. */
__host__ __device__ constexpr uint32_t mc_at2_per_e(uint32_t G, uint32_t hd) {
    return (G * hd + MC_ATT_SPLIT - 1) / MC_ATT_SPLIT;
}

/* Shared floats of the v7 kernel: K and V tile rings [2][T][hd] (aliased by the group states
 * after the tiles), the new row, the merge weights, the block's max per head, and what the
 * cluster's blocks push to this one: (m, l) per rank and head, and per rank its part of this
 * block's output elements. */
__host__ __device__ inline uint32_t mc_at2_smem_floats(uint32_t G, uint32_t hd) {
    return 4 * MC_AT2_TILE_FLOATS + 2 * hd + 2 * MC_AT2_WARPS * G + G + 2 * MC_ATT_SPLIT * G +
           MC_ATT_SPLIT * mc_at2_per_e(G, hd) + 4;
}

/* Dimension of slot i of lane gl (of a 16-lane group). */
template <uint32_t HD>
__device__ __forceinline__ uint32_t mc_at2_dim(uint32_t gl, uint32_t i) {
    return HD / 16 >= 4 ? (i / 4) * 64 + 4 * gl + (i % 4) : 2 * gl + i;
}

template <uint32_t HD>
__device__ __forceinline__ void mc_at2_load(float (&x)[HD / 16], const float *row, uint32_t gl) {
    if (HD / 16 >= 4) {
        constexpr uint32_t NK = HD >= 64 ? HD / 64 : 1;
#pragma unroll
        for (uint32_t k = 0; k < NK; k++) {
            const float4 v = *(const float4 *)(row + k * 64 + 4 * gl);
            x[4 * k] = v.x;
            x[4 * k + 1] = v.y;
            x[4 * k + 2] = v.z;
            x[4 * k + 3] = v.w;
        }
    } else {
        const float2 v = *(const float2 *)(row + 2 * gl);
        x[0] = v.x;
        x[1] = v.y;
    }
}

template <uint32_t HD>
__device__ __forceinline__ void mc_at2_store(float *row, const float (&x)[HD / 16], uint32_t gl) {
#pragma unroll
    for (uint32_t i = 0; i < HD / 16; i++)
        row[mc_at2_dim<HD>(gl, i)] = x[i];
}

/* Sum over the 16 lanes of a group (a fixed xor tree; every lane gets the same bits). */
__device__ __forceinline__ float mc_at2_group_sum(float v) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1)
        v += __shfl_xor_sync(MC_FULL, v, o);
    return v;
}

/* RMSNorm (eps inside the root) of NV vectors held as lane slots. Called by whole warps. */
template <uint32_t HD, uint32_t NV>
__device__ __forceinline__ void mc_at2_norm(float (&x)[NV][HD / 16], const float *norm, float eps, uint32_t gl) {
#pragma unroll
    for (uint32_t v = 0; v < NV; v++) {
        float ss = 0.0f;
#pragma unroll
        for (uint32_t i = 0; i < HD / 16; i++)
            ss = fmaf(x[v][i], x[v][i], ss);
        ss = mc_at2_group_sum(ss);
        const float scale = 1.0f / sqrtf(ss / (float)HD + eps);
#pragma unroll
        for (uint32_t i = 0; i < HD / 16; i++)
            x[v][i] = x[v][i] * scale * norm[mc_at2_dim<HD>(gl, i)];
    }
}

/* The cos and sin of a lane's RoPE angles at position p (they need no earlier kernel's output:
 * computed before the wait). */
template <uint32_t HD> struct mc_at2_cs {
    float s[HD / 16], c[HD / 16];
};

template <uint32_t HD>
__device__ __forceinline__ void mc_at2_rope_prep(mc_at2_cs<HD> &cs, const mc_rope_args &a, int32_t p, uint32_t gl) {
    constexpr uint32_t DPL = HD / 16;
    const float fpos = (float)p * a.pos_scale;
    if (!a.neox) { /* pairs (2j, 2j + 1): both in the lane */
#pragma unroll
        for (uint32_t i = 0; i < DPL; i += 2)
            sincosf(fpos * a.freqs[mc_at2_dim<HD>(gl, i) / 2], &cs.s[i], &cs.c[i]);
    } else if (DPL == 8) { /* pairs (j, j + 64): slots i and i + 4 of the lane */
#pragma unroll
        for (uint32_t i = 0; i < 4; i++)
            sincosf(fpos * a.freqs[mc_at2_dim<HD>(gl, i)], &cs.s[i], &cs.c[i]);
    } else { /* pairs (j, j + hd/2): lane gl and lane gl ^ 8, the same slot */
        const bool lo = (gl & 8) == 0;
#pragma unroll
        for (uint32_t i = 0; i < DPL; i++) {
            const uint32_t d = mc_at2_dim<HD>(gl, i);
            sincosf(fpos * a.freqs[lo ? d : d - HD / 2], &cs.s[i], &cs.c[i]);
        }
    }
}

/* RoPE of NV vectors held as lane slots, with the lane's angles. Called by whole warps. */
template <uint32_t HD, uint32_t NV>
__device__ __forceinline__ void mc_at2_rope(float (&x)[NV][HD / 16], const mc_at2_cs<HD> &cs, int neox, uint32_t gl) {
    constexpr uint32_t DPL = HD / 16;
    if (!neox) {
#pragma unroll
        for (uint32_t i = 0; i < DPL; i += 2) {
            const float s = cs.s[i], c = cs.c[i];
#pragma unroll
            for (uint32_t v = 0; v < NV; v++) {
                const float x0 = x[v][i], x1 = x[v][i + 1];
                x[v][i] = x0 * c - x1 * s;
                x[v][i + 1] = x0 * s + x1 * c;
            }
        }
    } else if (DPL == 8) {
#pragma unroll
        for (uint32_t i = 0; i < 4; i++) {
            const float s = cs.s[i], c = cs.c[i];
#pragma unroll
            for (uint32_t v = 0; v < NV; v++) {
                const float x0 = x[v][i], x1 = x[v][i + 4];
                x[v][i] = x0 * c - x1 * s;
                x[v][i + 4] = x0 * s + x1 * c;
            }
        }
    } else {
        const bool lo = (gl & 8) == 0;
#pragma unroll
        for (uint32_t i = 0; i < DPL; i++) {
            const float s = cs.s[i], c = cs.c[i];
#pragma unroll
            for (uint32_t v = 0; v < NV; v++) {
                const float mine = x[v][i], other = __shfl_xor_sync(MC_FULL, mine, 8);
                const float x0 = lo ? mine : other, x1 = lo ? other : mine;
                x[v][i] = lo ? x0 * c - x1 * s : x0 * s + x1 * c;
            }
        }
    }
}

/* Queues cache rows [t0, t0 + nt) except `skip` of K and V into one tile buffer pair. */
template <uint32_t HD>
__device__ __forceinline__ void mc_at2_load_tile(float *ks, float *vs, const float *kb, const float *vb, uint32_t t0,
                                                 uint32_t nt, uint32_t skip) {
    constexpr uint32_t Q = HD / 4;
    for (uint32_t i = threadIdx.x; i < nt * Q; i += blockDim.x) {
        const uint32_t t = i / Q, c = i % Q;
        if (t0 + t != skip) {
            mc_cp_async16(ks + t * HD + 4 * c, kb + (size_t)(t0 + t) * HD + 4 * c);
            mc_cp_async16(vs + t * HD + 4 * c, vb + (size_t)(t0 + t) * HD + 4 * c);
        }
    }
    mc_cp_async_commit();
}

template <uint32_t HD, uint32_t G>
__global__ void __launch_bounds__(32 * MC_AT2_WARPS, 1) mc_at2_kernel(const mc_rope_args a, const float *qkv,
                                                                      float *k_cache, float *v_cache, float *out,
                                                                      const int32_t *pos) {
    constexpr uint32_t DPL = HD / 16, T = MC_AT2_TILE_FLOATS / HD, NG = 2 * MC_AT2_WARPS;
    constexpr uint32_t PER_E = mc_at2_per_e(G, HD);
    static_assert(NG * G * HD + 2 * NG * G <= 4 * MC_AT2_TILE_FLOATS, "the group states alias the tiles");
    /* every block of the cluster has started before any writes to another's shared memory: an
     * arrive now, its wait before the first push */
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    cg::cluster_group cluster = cg::this_cluster();
    extern __shared__ __align__(16) float sm[];
    float *kt = sm, *vt = sm + 2 * MC_AT2_TILE_FLOATS;
    float *kn = sm + 4 * MC_AT2_TILE_FLOATS, *vn = kn + HD, *wq = vn + HD;
    float *bm = wq + NG * G, *rm = bm + G, *rl = rm + MC_ATT_SPLIT * G, *ro = rl + MC_ATT_SPLIT * G;
    float *go = sm, *gm = sm + NG * G * HD, *gls = gm + NG * G; /* after the tiles: aliases them */
    const uint32_t r = blockIdx.x, g = blockIdx.y, tid = threadIdx.x, lane = tid & 31;
    const uint32_t grp = tid >> 4, gl = tid & 15, warp = tid >> 5;
    const int32_t p = *pos; /* written by the commit of an earlier step: ordered before the qkv GEMV */
    const uint32_t npos = (uint32_t)p + 1, per = (npos + MC_ATT_SPLIT - 1) / MC_ATT_SPLIT;
    const uint32_t p0 = min(r * per, npos), p1 = min(p0 + per, npos);
    const bool has_new = p0 <= (uint32_t)p && (uint32_t)p < p1;
    const float *kb = k_cache + (size_t)g * a.capacity * HD, *vb = v_cache + (size_t)g * a.capacity * HD;
    const uint32_t n_tiles = (p1 - p0 + T - 1) / T;
#ifdef MC_PROF
    const bool prof_on = r == 0 && g == 0 && tid == 0;
    long long tp[9];
#endif
    MC_PT(0);
    /* rows below *pos were written by earlier steps: stream the first two tiles before the wait */
    for (uint32_t j = 0; j < n_tiles && j < 2; j++) {
        const uint32_t t0 = p0 + j * T;
        mc_at2_load_tile<HD>(kt + j * T * HD, vt + j * T * HD, kb, vb, t0, min(T, p1 - t0), (uint32_t)p);
    }
    mc_at2_cs<HD> cs;
    mc_at2_rope_prep<HD>(cs, a, p, gl);
    MC_PT(1);
    mc_wait_prior_grid(MC_ATT_FAMILY(a));
    MC_PT(2);
    float q[G][DPL];
#pragma unroll
    for (uint32_t h = 0; h < G; h++)
        mc_at2_load<HD>(q[h], qkv + (size_t)(g * G + h) * HD, gl);
    if (a.q_norm)
        mc_at2_norm<HD, G>(q, a.q_norm, a.eps, gl);
    mc_at2_rope<HD, G>(q, cs, a.neox, gl);
    if (has_new && warp == 0) { /* both groups of warp 0 compute it; group 0 writes it */
        float kv[1][DPL], vv[DPL];
        mc_at2_load<HD>(kv[0], qkv + (size_t)a.n_head * HD + (size_t)g * HD, gl);
        mc_at2_load<HD>(vv, qkv + (size_t)(a.n_head + a.n_kv) * HD + (size_t)g * HD, gl);
        if (a.k_norm)
            mc_at2_norm<HD, 1>(kv, a.k_norm, a.eps, gl);
        mc_at2_rope<HD, 1>(kv, cs, a.neox, gl);
        if (lane < 16) {
            mc_at2_store<HD>(kn, kv[0], gl);
            mc_at2_store<HD>(vn, vv, gl);
            mc_at2_store<HD>(k_cache + ((size_t)g * a.capacity + (size_t)p) * HD, kv[0], gl);
            mc_at2_store<HD>(v_cache + ((size_t)g * a.capacity + (size_t)p) * HD, vv, gl);
        }
    }
#ifdef MC_PROF
    if (prof_on) /* q roped: make the clock wait for it */
        tp[3] = clock64() + (long long)(q[0][0] == 12345.0f);
#endif
    float m[G], l[G], o[G][DPL];
#pragma unroll
    for (uint32_t h = 0; h < G; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (uint32_t i = 0; i < DPL; i++)
            o[h][i] = 0.0f;
    }
    const float scale = 1.0f / sqrtf((float)HD);
    for (uint32_t j = 0; j < n_tiles; j++) {
        const uint32_t t0 = p0 + j * T, nt = min(T, p1 - t0), b = j & 1;
        mc_cp_async_wait(j == 0 && n_tiles > 1 ? 1 : 0); /* tile j landed (tile j + 1 may be in flight) */
        __syncthreads(); /* for every thread; the new row too; tile j - 1's buffer is free */
        if (j >= 1 && j + 1 < n_tiles) {
            const uint32_t tn = p0 + (j + 1) * T;
            mc_at2_load_tile<HD>(kt + ((j + 1) & 1) * T * HD, vt + ((j + 1) & 1) * T * HD, kb, vb, tn,
                                 min(T, p1 - tn), (uint32_t)p);
        }
        const float *ks = kt + b * T * HD, *vs = vt + b * T * HD;
        /* warp-uniform trip count: groups 2w and 2w + 1 take positions ta and ta + NG */
        for (uint32_t base = 2 * warp; base < nt; base += 2 * NG) {
            const uint32_t ta = base + (grp & 1), tb = ta + NG;
            const bool va = ta < nt, vbl = tb < nt;
            const float *ka = t0 + ta == (uint32_t)p ? kn : ks + (va ? ta : 0) * HD;
            const float *kb2 = t0 + tb == (uint32_t)p ? kn : ks + (vbl ? tb : 0) * HD;
            const float *va_row = t0 + ta == (uint32_t)p ? vn : vs + (va ? ta : 0) * HD;
            const float *vb_row = t0 + tb == (uint32_t)p ? vn : vs + (vbl ? tb : 0) * HD;
            float kxa[DPL], kxb[DPL], vxa[DPL], vxb[DPL];
            mc_at2_load<HD>(kxa, ka, gl);
            mc_at2_load<HD>(kxb, kb2, gl);
            mc_at2_load<HD>(vxa, va_row, gl);
            mc_at2_load<HD>(vxb, vb_row, gl);
            float sa[G], sb[G];
#pragma unroll
            for (uint32_t h = 0; h < G; h++) {
                float x = 0.0f, y = 0.0f;
#pragma unroll
                for (uint32_t i = 0; i < DPL; i++) {
                    x = fmaf(q[h][i], kxa[i], x);
                    y = fmaf(q[h][i], kxb[i], y);
                }
                sa[h] = x;
                sb[h] = y;
            }
#pragma unroll
            for (int off = 8; off > 0; off >>= 1)
#pragma unroll
                for (uint32_t h = 0; h < G; h++) {
                    sa[h] += __shfl_xor_sync(MC_FULL, sa[h], off);
                    sb[h] += __shfl_xor_sync(MC_FULL, sb[h], off);
                }
            if (va) {
#pragma unroll
                for (uint32_t h = 0; h < G; h++) {
                    const float s1 = sa[h] * scale, s2 = vbl ? sb[h] * scale : -INFINITY;
                    const float mn = fmaxf(m[h], fmaxf(s1, s2));
                    const float alpha = expf(m[h] - mn); /* 0 on the group's first position */
                    const float pa = expf(s1 - mn), pb = vbl ? expf(s2 - mn) : 0.0f;
                    l[h] = fmaf(l[h], alpha, pa) + pb;
                    m[h] = mn;
#pragma unroll
                    for (uint32_t i = 0; i < DPL; i++) {
                        float v = fmaf(pa, vxa[i], o[h][i] * alpha);
                        if (vbl)
                            v = fmaf(pb, vxb[i], v);
                        o[h][i] = v;
                    }
                }
            }
        }
    }
    MC_PT(4);
    __syncthreads(); /* the tiles are read: their space holds the group states now */
    MC_PT(5);
#pragma unroll
    for (uint32_t h = 0; h < G; h++) {
        mc_at2_store<HD>(go + (size_t)(grp * G + h) * HD, o[h], gl);
        if (gl == 0) {
            gm[grp * G + h] = m[h];
            gls[grp * G + h] = l[h];
        }
    }
    __syncthreads();
    if (tid < NG * G) { /* the groups' weights: w(k, h) = exp(m(k, h) - M(h)), M the block's max */
        const uint32_t h = tid % G;
        float M = -INFINITY;
#pragma unroll
        for (uint32_t k = 0; k < NG; k++)
            M = fmaxf(M, gm[k * G + h]);
        wq[tid] = M == -INFINITY ? 0.0f : expf(gm[tid] - M); /* an empty group (or block): 0 */
        if (tid < G)
            bm[h] = M;
    }
    __syncthreads();
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); /* every block has started */
    /* push the block state to the blocks that finish it: (m, l) of every head to every rank, and
     * output element e to rank e / PER_E */
    if (tid < G) { /* the block's l per head, groups in order */
        float L = 0.0f;
        for (uint32_t k = 0; k < NG; k++)
            L = fmaf(gls[k * G + tid], wq[k * G + tid], L);
        const float M = bm[tid];
#pragma unroll
        for (uint32_t s2 = 0; s2 < MC_ATT_SPLIT; s2++) {
            cluster.map_shared_rank(rm, s2)[r * G + tid] = M;
            cluster.map_shared_rank(rl, s2)[r * G + tid] = L;
        }
    }
    for (uint32_t e = tid; e < G * HD; e += blockDim.x) {
        const uint32_t h = e / HD, dst = e / PER_E;
        float O = 0.0f;
#pragma unroll
        for (uint32_t k = 0; k < NG; k++)
            O = fmaf(go[(size_t)(k * G + h) * HD + (e % HD)], wq[k * G + h], O);
        cluster.map_shared_rank(ro, dst)[r * PER_E + (e - dst * PER_E)] = O;
    }
    MC_PT(6);
    cluster.sync(); /* every push landed; no block reads another's shared memory after this */
    MC_PT(7);
    const uint32_t n_e = G * HD;
    for (uint32_t e = r * PER_E + tid; e < min(n_e, (r + 1) * PER_E); e += blockDim.x) {
        const uint32_t h = e / HD, le = e - r * PER_E;
        float mr[MC_ATT_SPLIT], lr[MC_ATT_SPLIT], orr[MC_ATT_SPLIT];
#pragma unroll
        for (uint32_t s2 = 0; s2 < MC_ATT_SPLIT; s2++) {
            mr[s2] = rm[s2 * G + h];
            lr[s2] = rl[s2 * G + h];
            orr[s2] = ro[s2 * PER_E + le];
        }
        float M = mr[0];
#pragma unroll
        for (uint32_t s2 = 1; s2 < MC_ATT_SPLIT; s2++)
            M = fmaxf(M, mr[s2]);
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (uint32_t s2 = 0; s2 < MC_ATT_SPLIT; s2++) {
            const float w = expf(mr[s2] - M); /* an empty block: m = -inf, weight 0 */
            L = fmaf(lr[s2], w, L);
            O = fmaf(orr[s2], w, O);
        }
        out[(size_t)(g * G + h) * HD + (e % HD)] = O * (1.0f / L);
    }
    MC_PT(8);
    MC_PT_END(0, 9, 16);
}

/* Whether the v7 kernel serves these shapes (MEMRA_CUDA_ATT_V5=1 keeps the v5 kernel, for
 * measurements). */
static int mc_at2_ok(uint32_t G, uint32_t hd, uint32_t hdv) {
    static int v5 = -1;
    if (v5 < 0) {
        const char *e = getenv("MEMRA_CUDA_ATT_V5");
        v5 = e && *e && strcmp(e, "0") != 0;
    }
    return !v5 && hd == hdv && (hd == 32 || hd == 64 || hd == 128) && (G == 1 || G == 2 || G == 4 || G == 8);
}

/* Whether the fused path serves these shapes (16-byte rows), and the environment allows it. */
int mc_attention_fused_ok(uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv) {
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("MEMRA_CUDA_ATT_UNFUSED");
        off = e && *e && strcmp(e, "0") != 0;
    }
    if (off || n_kv == 0 || n_head % n_kv || hd % 4 || hdv % 4 || hd < 2)
        return 0;
    if (mc_at2_ok(n_head / n_kv, hd, hdv))
        return 1;
    const mc_att_layout L = mc_att_layout_of(n_head / n_kv, hd, hdv);
    return (uint64_t)L.total * 4 <= 200u * 1024u;
}

/* Per device: the dynamic shared memory the v5 fused kernels may use (48 KB until raised), and
 * whether every v7 instantiation may use the largest v7 need (set once, for all of them: a
 * record per size would miss an instantiation first launched with a need already recorded). */
static size_t mc_att_smem_set[MC_MAX_DEVICES];
static int mc_at2_smem_ready[MC_MAX_DEVICES];


/* Calls F(HD, G) for the v7 instantiation of these shapes. */
#define MC_AT2_DISPATCH(hd, G, F)                                                                                      \
    ((hd) == 32 ? ((G) == 1 ? F(32, 1) : (G) == 2 ? F(32, 2) : (G) == 4 ? F(32, 4) : F(32, 8))                         \
     : (hd) == 64 ? ((G) == 1 ? F(64, 1) : (G) == 2 ? F(64, 2) : (G) == 4 ? F(64, 4) : F(64, 8))                       \
                  : ((G) == 1 ? F(128, 1) : (G) == 2 ? F(128, 2) : (G) == 4 ? F(128, 4) : F(128, 8)))
#define MC_AT2_FN(HD, G) ((const void *)mc_at2_kernel<HD, G>)
/* Every v7 instantiation once (F(kernel)). */
#define MC_AT2_EACH(F)                                                                                                 \
    F(MC_AT2_FN(32, 1)) F(MC_AT2_FN(32, 2)) F(MC_AT2_FN(32, 4)) F(MC_AT2_FN(32, 8)) F(MC_AT2_FN(64, 1))                 \
        F(MC_AT2_FN(64, 2)) F(MC_AT2_FN(64, 4)) F(MC_AT2_FN(64, 8)) F(MC_AT2_FN(128, 1)) F(MC_AT2_FN(128, 2))           \
            F(MC_AT2_FN(128, 4)) F(MC_AT2_FN(128, 8))

/* The largest dynamic shared memory of any v7 instantiation. */
static size_t mc_at2_smem_max(void) {
    size_t m = 0;
    for (uint32_t hd = 32; hd <= 128; hd *= 2)
        for (uint32_t G = 1; G <= 8; G *= 2) {
            const size_t b = (size_t)mc_at2_smem_floats(G, hd) * 4;
            m = b > m ? b : m;
        }
    return m;
}

cudaError_t mc_attention_fused_prepare(uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv) {
    const uint32_t G = n_head / n_kv;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    if (dev < 0 || dev >= MC_MAX_DEVICES)
        return cudaErrorInvalidDevice;
    if (mc_at2_ok(G, hd, hdv)) {
        if (mc_at2_smem_ready[dev])
            return cudaSuccess;
        const int smax = (int)mc_at2_smem_max();
#define MC_AT2_SET(fn)                                                                                                 \
    if ((e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smax)) != cudaSuccess)             \
        return e;
        MC_AT2_EACH(MC_AT2_SET)
#undef MC_AT2_SET
        mc_at2_smem_ready[dev] = 1;
        return cudaSuccess;
    }
    const size_t smem = (size_t)mc_att_layout_of(G, hd, hdv).total * 4;
    if (smem <= 48 * 1024 || smem <= mc_att_smem_set[dev])
        return cudaSuccess;
    if ((e = cudaFuncSetAttribute(mc_att_fused_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem)) ||
               (e = cudaFuncSetAttribute(mc_att_fused_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem)) ||
               (e = cudaFuncSetAttribute(mc_att_fused_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem)))
        return e;
    mc_att_smem_set[dev] = smem;
    return cudaSuccess;
}

template <uint32_t HD>
static cudaError_t mc_att_fused_launch(const mc_rope_args *a, const float *qkv, float *k_cache, float *v_cache,
                                       float *out, const int32_t *pos, cudaStream_t st) {
    const size_t smem = (size_t)mc_att_layout_of(a->n_head / a->n_kv, a->hd, a->hdv).total * 4;
    cudaError_t e = mc_attention_fused_prepare(a->n_head, a->n_kv, a->hd, a->hdv);
    if (e != cudaSuccess)
        return e;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(MC_ATT_SPLIT, a->n_kv);
    cfg.blockDim = dim3(MC_ATT_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = MC_ATT_SPLIT;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = mc_pdl_enabled() ? 2 : 1;
    e = cudaLaunchKernelEx(&cfg, mc_att_fused_kernel<HD>, *a, qkv, k_cache, v_cache, out, pos);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

/* The v7 launch: a cluster of MC_ATT_SPLIT blocks of 256 threads per kv head. */
static cudaError_t mc_at2_launch(const mc_rope_args *a, const float *qkv, float *k_cache, float *v_cache, float *out,
                                 const int32_t *pos, cudaStream_t st) {
    const uint32_t G = a->n_head / a->n_kv;
    const void *fn = MC_AT2_DISPATCH(a->hd, G, MC_AT2_FN);
    const size_t smem = (size_t)mc_at2_smem_floats(G, a->hd) * 4;
    cudaError_t e = mc_attention_fused_prepare(a->n_head, a->n_kv, a->hd, a->hdv);
    if (e != cudaSuccess)
        return e;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(MC_ATT_SPLIT, a->n_kv);
    cfg.blockDim = dim3(32 * MC_AT2_WARPS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = MC_ATT_SPLIT;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = mc_pdl_enabled() ? 2 : 1;
    void *args[] = {(void *)a, (void *)&qkv, (void *)&k_cache, (void *)&v_cache, (void *)&out, (void *)&pos};
    e = cudaLaunchKernelExC(&cfg, fn, args);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

cudaError_t mc_attention_fused(const mc_rope_args *a, const float *qkv, float *k_cache, float *v_cache, float *out,
                               const int32_t *pos, cudaStream_t st) {
    if (!mc_attention_fused_ok(a->n_head, a->n_kv, a->hd, a->hdv))
        return cudaErrorInvalidValue;
    const uint32_t G = a->n_head / a->n_kv;
    if (mc_at2_ok(G, a->hd, a->hdv))
        return mc_at2_launch(a, qkv, k_cache, v_cache, out, pos, st);
    if (a->hd == 128)
        return mc_att_fused_launch<128>(a, qkv, k_cache, v_cache, out, pos, st);
    if (a->hd == 64)
        return mc_att_fused_launch<64>(a, qkv, k_cache, v_cache, out, pos, st);
    return mc_att_fused_launch<0>(a, qkv, k_cache, v_cache, out, pos, st);
}

/* ---- commit, token hand-over ------------------------------------------------------------ */

__global__ void mc_commit_kernel(int32_t *pos) { *pos += 1; }
__global__ void mc_copy_token_kernel(int32_t *dst, const int32_t *src) { *dst = *src; }

cudaError_t mc_commit(int32_t *pos, cudaStream_t st) {
    mc_commit_kernel<<<1, 1, 0, st>>>(pos);
    return cudaGetLastError();
}

cudaError_t mc_copy_token(int32_t *dst, const int32_t *src, cudaStream_t st) {
    mc_copy_token_kernel<<<1, 1, 0, st>>>(dst, src);
    return cudaGetLastError();
}

/* ---- the device sampler ----------------------------------------------------------------- */

#define MC_CHUNK 256u

static uint32_t mc_pow2(uint32_t n) {
    uint32_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

static uint64_t mc_align256(uint64_t n) { return (n + 255) & ~(uint64_t)255; }

uint64_t mc_sampler_scratch_bytes(uint32_t n_vocab) {
    uint64_t n_chunks = n_vocab / MC_CHUNK + 1;
    return mc_align256((uint64_t)mc_pow2(n_vocab) * 8) + mc_align256((uint64_t)n_vocab * 4) +
           mc_align256((n_chunks + 1) * 4) + mc_align256(16) + mc_align256(MC_MAX_PARTS * 12) + mc_align256(4);
}

void mc_sampler_scratch_init(mc_sampler_scratch *s, void *base, uint32_t n_vocab) {
    char *p = (char *)base;
    uint64_t n_chunks = n_vocab / MC_CHUNK + 1;
    s->n_vocab = n_vocab;
    s->n_pow2 = mc_pow2(n_vocab);
    s->keys = (unsigned long long *)p;
    p += mc_align256((uint64_t)s->n_pow2 * 8);
    s->partial = (float *)p;
    p += mc_align256((uint64_t)n_vocab * 4);
    s->chunk_sums = (float *)p;
    p += mc_align256((n_chunks + 1) * 4);
    s->stats = (float *)p;
    p += mc_align256(16);
    s->parts = (uint32_t *)p;
    p += mc_align256(MC_MAX_PARTS * 12);
    s->ticket = (uint32_t *)p;
}

/* Steps 0, 1 and 3 in one launch. Block b scans a contiguous segment (each thread strided within
 * it, ascending), keeping the largest finite logit with the lowest index and the lowest index of
 * a non-finite logit, combines its threads by a fixed tree and writes parts[b] = (best, index,
 * bad). The last block to finish (an integer ticket elects it, and resets the ticket for the next
 * launch) merges the parts and writes stats[0] = max, the result (bad index, and the token when
 * greedy) and *token_out when greedy. Which block merges depends on timing; the merge does not:
 * "larger value, or equal value and lower index" and "lowest bad index" give one answer in any
 * order (argmax_merge.h, checked on the host by tests/cuda/test_argmax_merge.c). */

/* The block's (best, index, bad) to thread 0, by a fixed tree (warp shuffles, then warps in order). */
__device__ __forceinline__ void mc_best_block(float &best, uint32_t &besti, uint32_t &bad, float (&bv)[32],
                                              uint32_t (&bi)[32], uint32_t (&bb)[32]) {
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(MC_FULL, best, o);
        uint32_t oi = __shfl_xor_sync(MC_FULL, besti, o);
        bad = min(bad, __shfl_xor_sync(MC_FULL, bad, o));
        mc_best_merge(&best, &besti, ov, oi);
    }
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); /* bv, bi, bb may hold an earlier call's values */
    if (lane == 0) {
        bv[warp] = best;
        bi[warp] = besti;
        bb[warp] = bad;
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (uint32_t w = 1; w < blockDim.x / 32; w++) {
            mc_best_merge(&best, &besti, bv[w], bi[w]);
            bad = min(bad, bb[w]);
        }
}

__global__ void __launch_bounds__(MC_MAX_THREADS) mc_max_kernel(const float *z, uint32_t n, uint32_t seg,
                                                               uint32_t *parts, uint32_t *ticket, float *stats,
                                                               int greedy, int32_t *token_out,
                                                               mc_sample_result *result) {
    __shared__ float bv[32];
    __shared__ uint32_t bi[32], bb[32];
    __shared__ uint32_t is_last;
    const uint32_t lo = blockIdx.x * seg, hi = min(lo + seg, n);
    float best = -INFINITY;
    uint32_t besti = MC_AM_NONE, bad = 0xffffffffu;
    for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float v = z[i];
        if (!isfinite(v)) {
            bad = min(bad, i);
            continue;
        }
        if (besti == MC_AM_NONE || v > best) { /* ascending: the first maximum wins */
            best = v;
            besti = i;
        }
    }
    mc_best_block(best, besti, bad, bv, bi, bb);
    if (threadIdx.x == 0) {
        parts[3 * blockIdx.x] = __float_as_uint(best);
        parts[3 * blockIdx.x + 1] = besti;
        parts[3 * blockIdx.x + 2] = bad;
        __threadfence(); /* the part is visible before the ticket counts it */
        is_last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last)
        return;
    __threadfence();
    best = -INFINITY;
    besti = MC_AM_NONE;
    bad = 0xffffffffu;
    if (threadIdx.x < gridDim.x) { /* L2 loads: other blocks wrote them */
        best = __uint_as_float(__ldcg(parts + 3 * threadIdx.x));
        besti = __ldcg(parts + 3 * threadIdx.x + 1);
        bad = __ldcg(parts + 3 * threadIdx.x + 2);
    }
    mc_best_block(best, besti, bad, bv, bi, bb);
    if (threadIdx.x != 0)
        return;
    *ticket = 0;
    stats[0] = best;
    mc_sample_result r;
    r.token = -1;
    r.bad_index = bad == 0xffffffffu ? -1 : (int32_t)bad;
    r.bad_bits = bad == 0xffffffffu ? 0u : __float_as_uint(z[bad]);
    r.pad = 0;
    if (greedy && bad == 0xffffffffu) {
        r.token = (int32_t)besti;
        *token_out = (int32_t)besti;
    }
    *result = r;
}

/* Sort keys for step 2's total order: z descending, then index ascending. -0 and +0 are equal
 * logits (a tie broken by index), so -0 is keyed as +0. */
__global__ void mc_keys_kernel(const float *z, uint32_t n, uint32_t n_pow2, unsigned long long *keys) {
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_pow2)
        return;
    if (i >= n) {
        keys[i] = ~0ull;
        return;
    }
    float v = z[i];
    uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);
    uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* increasing with v */
    keys[i] = ((unsigned long long)(~ord) << 32) | i;
}

/* One bitonic compare-exchange pass at distance j (>= the shared segment) of merge size k. */
__global__ void mc_bitonic_global_kernel(unsigned long long *keys, uint32_t k, uint32_t j) {
    uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t i = (t / j) * 2 * j + (t % j), l = i + j;
    unsigned long long a = keys[i], b = keys[l];
    bool up = (i & k) == 0;
    if ((a > b) == up) {
        keys[i] = b;
        keys[l] = a;
    }
}

/* Every pass of merge sizes k_first..k_last (doubling) at distances below the segment, in shared
 * memory, over one segment of `seg` keys per block. */
__global__ void mc_bitonic_shared_kernel(unsigned long long *keys, uint32_t seg, uint32_t k_first, uint32_t k_last) {
    extern __shared__ unsigned long long sk[];
    uint32_t base = blockIdx.x * seg;
    for (uint32_t i = threadIdx.x; i < seg; i += blockDim.x)
        sk[i] = keys[base + i];
    __syncthreads();
    for (uint32_t k = k_first; k <= k_last; k <<= 1) {
        for (uint32_t j = min(k / 2, seg / 2); j > 0; j >>= 1) {
            for (uint32_t t = threadIdx.x; t < seg / 2; t += blockDim.x) {
                uint32_t i = (t / j) * 2 * j + (t % j), l = i + j;
                unsigned long long a = sk[i], b = sk[l];
                bool up = ((base + i) & k) == 0;
                if ((a > b) == up) {
                    sk[i] = b;
                    sk[l] = a;
                }
            }
            __syncthreads();
        }
    }
    for (uint32_t i = threadIdx.x; i < seg; i += blockDim.x)
        keys[base + i] = sk[i];
}

/* Steps 4 and 5 per chunk: one thread per 256-entry chunk, left to right. Reads z, the sorted
 * keys (when sorted), stats[0]; writes partial[j] and chunk_sums[k]. */
__global__ void mc_chunk_kernel(const float *z, const unsigned long long *keys, int sorted, uint32_t n,
                                const float *stats, float temperature, float *partial, float *chunk_sums) {
    uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t j0 = k * MC_CHUNK;
    if (j0 >= n)
        return;
    uint32_t j1 = min(j0 + MC_CHUNK, n);
    const float m = stats[0];
    float acc = 0.0f;
    for (uint32_t j = j0; j < j1; j++) {
        uint32_t idx = sorted ? (uint32_t)keys[j] : j;
        float w = memra_expf(MEMRA_FDIV(MEMRA_FSUB(z[idx], m), temperature));
        acc = MEMRA_FADD(acc, w);
        partial[j] = acc;
    }
    chunk_sums[k] = acc;
}

__device__ uint32_t mc_block_min(uint32_t v, uint32_t *red) {
    for (int o = 16; o > 0; o >>= 1)
        v = min(v, __shfl_xor_sync(MC_FULL, v, o));
    uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (uint32_t w = 1; w < blockDim.x / 32; w++)
            v = min(v, red[w]);
        red[32] = v;
    }
    __syncthreads();
    v = red[32];
    __syncthreads();
    return v;
}

/* Steps 5 (chunk prefix), 6, 7, 8 in one block. Reads partial, chunk_sums, keys, *pos, the
 * result; writes the token. */
__global__ void __launch_bounds__(1024) mc_pick_kernel(const float *partial, float *chunk_sums,
                                                       const unsigned long long *keys, int sorted, uint32_t n,
                                                       float top_p, unsigned long long seed, const int32_t *pos,
                                                       int32_t *token_out, mc_sample_result *result) {
    __shared__ uint32_t red[33];
    __shared__ float totals[2];
    const uint32_t n_chunks = (n + MC_CHUNK - 1) / MC_CHUNK;
    if (threadIdx.x == 0) { /* P_k in place of s_k (exclusive prefix), then S */
        float P = 0.0f;
        for (uint32_t k = 0; k < n_chunks; k++) {
            float s = chunk_sums[k];
            chunk_sums[k] = P;
            P = MEMRA_FADD(P, s);
        }
        totals[0] = P;
    }
    __syncthreads();
    const float S = totals[0];
    uint32_t keep = n;
    if (top_p < 1.0f) {
        const float bound = MEMRA_FMUL(top_p, S);
        uint32_t first = 0xffffffffu;
        for (uint32_t j = threadIdx.x; j < n && first == 0xffffffffu; j += blockDim.x)
            if (MEMRA_FADD(chunk_sums[j / MC_CHUNK], partial[j]) >= bound)
                first = j;
        first = mc_block_min(first, red);
        keep = first == 0xffffffffu ? n : first + 1;
    }
    const float Sk = top_p < 1.0f ? MEMRA_FADD(chunk_sums[(keep - 1) / MC_CHUNK], partial[keep - 1]) : S;
    const float r = MEMRA_FMUL(memra_uniform(seed, (uint64_t)(uint32_t)*pos), Sk);
    uint32_t first = 0xffffffffu;
    for (uint32_t j = threadIdx.x; j < keep && first == 0xffffffffu; j += blockDim.x)
        if (MEMRA_FADD(chunk_sums[j / MC_CHUNK], partial[j]) > r)
            first = j;
    first = mc_block_min(first, red);
    uint32_t jj = first == 0xffffffffu ? keep - 1 : first;
    if (threadIdx.x == 0 && result->bad_index < 0) {
        int32_t tok = sorted ? (int32_t)(uint32_t)keys[jj] : (int32_t)jj;
        result->token = tok;
        *token_out = tok;
    }
}

cudaError_t mc_sample(const float *logits, const mc_sampler_scratch *s, const memra_sample_cfg *cfg,
                      const int32_t *pos, int32_t *token_out, mc_sample_result *result, cudaStream_t st) {
    const uint32_t V = s->n_vocab;
    const bool greedy = !(cfg->temperature > 0.0f);
    uint32_t seg = (V + MC_MAX_PARTS - 1) / MC_MAX_PARTS;
    seg = seg < 1024 ? 1024 : seg;
    const uint32_t n_parts = (V + seg - 1) / seg;
    mc_max_kernel<<<n_parts, MC_MAX_THREADS, 0, st>>>(logits, V, seg, s->parts, s->ticket, s->stats, greedy,
                                                      token_out, result);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || greedy)
        return e;
    const bool cut_k = cfg->top_k != 0 && cfg->top_k < V;
    const bool sorted = cut_k || cfg->top_p < 1.0f;
    const uint32_t n = cut_k ? cfg->top_k : V;
    if (sorted) {
        const uint32_t N = s->n_pow2;
        mc_keys_kernel<<<(N + 255) / 256, 256, 0, st>>>(logits, V, N, s->keys);
        const uint32_t seg = N < 2048 ? N : 2048;
        const uint32_t threads = seg / 2 < 1024 ? (seg / 2 > 0 ? seg / 2 : 1) : 1024;
        if (N >= 2) {
            mc_bitonic_shared_kernel<<<N / seg, threads, seg * 8, st>>>(s->keys, seg, 2, seg);
            for (uint32_t k = 2 * seg; k <= N; k <<= 1) {
                for (uint32_t j = k / 2; j >= seg; j >>= 1)
                    mc_bitonic_global_kernel<<<N / 2 / 256, 256, 0, st>>>(s->keys, k, j);
                mc_bitonic_shared_kernel<<<N / seg, threads, seg * 8, st>>>(s->keys, seg, k, k);
            }
        }
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    const uint32_t n_chunks = (n + MC_CHUNK - 1) / MC_CHUNK;
    mc_chunk_kernel<<<(n_chunks + 63) / 64, 64, 0, st>>>(logits, s->keys, sorted, n, s->stats, cfg->temperature,
                                                         s->partial, s->chunk_sums);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    mc_pick_kernel<<<1, 1024, 0, st>>>(s->partial, s->chunk_sums, s->keys, sorted, n, cfg->top_p,
                                       (unsigned long long)cfg->seed, pos, token_out, result);
    return cudaGetLastError();
}

/* ---- digests ------------------------------------------------------------------------------ */

__device__ __forceinline__ unsigned long long mc_mix(unsigned long long z) { return memra_mix64(z); }

/* One warp per (plane, chunk of MC_DIGEST_ROWS rows): lane l hashes words l, l+32, ... of the
 * chunk's rows below *pos, then lane 0 folds the 32 lane hashes in lane order. Reads the cache
 * rows below *pos; writes one hash per chunk. */
__global__ void mc_digest_kernel(const float *planes, uint32_t n_planes, uint32_t capacity, uint32_t row_floats,
                                 const int32_t *pos, unsigned long long *hashes) {
    const uint32_t max_chunks = (capacity + MC_DIGEST_ROWS - 1) / MC_DIGEST_ROWS;
    const uint32_t gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (gw >= n_planes * max_chunks)
        return;
    const uint32_t plane = gw / max_chunks, chunk = gw % max_chunks;
    const uint32_t p = (uint32_t)*pos;
    const uint32_t r0 = chunk * MC_DIGEST_ROWS, r1 = min(r0 + MC_DIGEST_ROWS, p);
    unsigned long long h = 0x6a09e667f3bcc908ull + lane;
    if (r0 < r1) {
        const uint32_t *w = (const uint32_t *)(planes + ((size_t)plane * capacity + r0) * row_floats);
        const size_t n = (size_t)(r1 - r0) * row_floats;
        for (size_t i = lane; i < n; i += 32)
            h = mc_mix(h + w[i]);
    }
    unsigned long long acc = 0;
    for (int l = 0; l < 32; l++) {
        unsigned long long o = __shfl_sync(MC_FULL, h, l);
        acc = mc_mix(acc ^ o);
    }
    if (lane == 0)
        hashes[gw] = r0 < r1 ? acc : 0ull;
}

cudaError_t mc_digest_planes(const float *planes, uint32_t n_planes, uint32_t capacity, uint32_t row_floats,
                             const int32_t *pos, unsigned long long *hashes, cudaStream_t st) {
    const uint32_t max_chunks = (capacity + MC_DIGEST_ROWS - 1) / MC_DIGEST_ROWS;
    const uint64_t warps = (uint64_t)n_planes * max_chunks;
    if (warps == 0)
        return cudaSuccess;
    mc_digest_kernel<<<(unsigned)((warps + 7) / 8), 256, 0, st>>>(planes, n_planes, capacity, row_floats, pos, hashes);
    return cudaGetLastError();
}

/* ---- census ----------------------------------------------------------------------------- */

const char *mc_kernel_family(const void *f) {
    static const struct {
        const void *func;
        const char *family;
    } table[] = {
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F32, 0, 0, 1>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F16, 0, 0, 1>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_BF16, 0, 0, 1>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_Q8_0, 0, 0, 1>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F32, 0, 1, 1>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F16, 0, 1, 1>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_BF16, 0, 1, 1>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_Q8_0, 0, 1, 1>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F32, 1, 0, 1>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F16, 1, 0, 1>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_BF16, 1, 0, 1>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_Q8_0, 1, 0, 1>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F32, 1, 1, 1>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F16, 1, 1, 1>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_BF16, 1, 1, 1>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_Q8_0, 1, 1, 1>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F32, 0, 0, 2>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F16, 0, 0, 2>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_BF16, 0, 0, 2>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_Q8_0, 0, 0, 2>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F32, 0, 1, 2>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F16, 0, 1, 2>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_BF16, 0, 1, 2>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_Q8_0, 0, 1, 2>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F32, 1, 0, 2>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F16, 1, 0, 2>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_BF16, 1, 0, 2>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_Q8_0, 1, 0, 2>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F32, 1, 1, 2>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F16, 1, 1, 2>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_BF16, 1, 1, 2>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_Q8_0, 1, 1, 2>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F32, 0, 0, 4>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F16, 0, 0, 4>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_BF16, 0, 0, 4>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_Q8_0, 0, 0, 4>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F32, 0, 1, 4>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F16, 0, 1, 4>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_BF16, 0, 1, 4>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_Q8_0, 0, 1, 4>, "gemv"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F32, 1, 0, 4>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F16, 1, 0, 4>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_BF16, 1, 0, 4>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_Q8_0, 1, 0, 4>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F32, 1, 1, 4>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_F16, 1, 1, 4>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_BF16, 1, 1, 4>, "gemv_swiglu"},
        {(const void *)mc_gemv_kernel<MEMRA_TYPE_Q8_0, 1, 1, 4>, "gemv_swiglu"},
#define MC_Q8X_ROW(S, N, K) {(const void *)mc_q8x_kernel<S, N, K>, (S) ? "gemv_swiglu" : "gemv"},
        MC_Q8X_EACH(MC_Q8X_ROW)
#undef MC_Q8X_ROW
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F32, 0, 0, 1>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F32, 0, 0, 2>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F32, 0, 0, 4>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F32, 0, 1, 1>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F32, 0, 1, 2>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F32, 0, 1, 4>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F32, 1, 0, 1>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F32, 1, 0, 2>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F32, 1, 0, 4>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F32, 1, 1, 1>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F32, 1, 1, 2>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F32, 1, 1, 4>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F16, 0, 0, 1>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F16, 0, 0, 2>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F16, 0, 0, 4>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F16, 0, 1, 1>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F16, 0, 1, 2>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F16, 0, 1, 4>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F16, 1, 0, 1>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F16, 1, 0, 2>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F16, 1, 0, 4>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F16, 1, 1, 1>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F16, 1, 1, 2>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_F16, 1, 1, 4>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_BF16, 0, 0, 1>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_BF16, 0, 0, 2>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_BF16, 0, 0, 4>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_BF16, 0, 1, 1>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_BF16, 0, 1, 2>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_BF16, 0, 1, 4>, "gemv"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_BF16, 1, 0, 1>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_BF16, 1, 0, 2>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_BF16, 1, 0, 4>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_BF16, 1, 1, 1>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_BF16, 1, 1, 2>, "gemv_swiglu"},
        {(const void *)mc_gemvp_kernel<MEMRA_TYPE_BF16, 1, 1, 4>, "gemv_swiglu"},
        {(const void *)mc_rmsnorm_kernel, "rmsnorm"},
        {(const void *)mc_embed_kernel, "embed"},
        {(const void *)mc_rope_kv_kernel, "rope_kv"},
        {(const void *)mc_att_chunk_kernel<128>, "attention"},
        {(const void *)mc_att_chunk_kernel<64>, "attention"},
        {(const void *)mc_att_chunk_kernel<0>, "attention"},
        {(const void *)mc_att_combine_kernel, "attention"},
        {(const void *)mc_att_fused_kernel<128>, "attention"},
        {(const void *)mc_att_fused_kernel<64>, "attention"},
        {(const void *)mc_att_fused_kernel<0>, "attention"},
#define MC_AT2_ROW(fn) {fn, "attention"},
        MC_AT2_EACH(MC_AT2_ROW)
#undef MC_AT2_ROW
        {(const void *)mc_commit_kernel, "commit"},
        {(const void *)mc_copy_token_kernel, "token"},
        {(const void *)mc_max_kernel, "sampler"},
        {(const void *)mc_keys_kernel, "sampler"},
        {(const void *)mc_bitonic_global_kernel, "sampler"},
        {(const void *)mc_bitonic_shared_kernel, "sampler"},
        {(const void *)mc_chunk_kernel, "sampler"},
        {(const void *)mc_pick_kernel, "sampler"},
        {(const void *)mc_digest_kernel, "digest"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].func == f)
            return table[i].family;
    return NULL;
}

/* ---- host entry for tests --------------------------------------------------------------- */

cudaError_t mc_sample_host(const float *logits, uint32_t n_vocab, uint32_t position, const memra_sample_cfg *cfg,
                           mc_sample_result *out) {
    float *dz = NULL;
    void *scratch = NULL;
    int32_t *dpos = NULL, *dtok = NULL;
    mc_sample_result *dres = NULL;
    mc_sampler_scratch s;
    int32_t p = (int32_t)position;
    cudaError_t e;
    if ((e = cudaMalloc(&dz, (size_t)n_vocab * 4)) != cudaSuccess)
        goto done;
    if ((e = cudaMalloc(&scratch, mc_sampler_scratch_bytes(n_vocab))) != cudaSuccess)
        goto done;
    if ((e = cudaMalloc(&dpos, 8)) != cudaSuccess || (e = cudaMalloc(&dtok, 8)) != cudaSuccess ||
        (e = cudaMalloc(&dres, sizeof *dres)) != cudaSuccess)
        goto done;
    mc_sampler_scratch_init(&s, scratch, n_vocab);
    if ((e = cudaMemset(scratch, 0, mc_sampler_scratch_bytes(n_vocab))) != cudaSuccess ||
        (e = cudaMemcpy(dz, logits, (size_t)n_vocab * 4, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemcpy(dpos, &p, 4, cudaMemcpyHostToDevice)) != cudaSuccess)
        goto done;
    if ((e = mc_sample(dz, &s, cfg, dpos, dtok, dres, 0)) != cudaSuccess)
        goto done;
    e = cudaMemcpy(out, dres, sizeof *out, cudaMemcpyDeviceToHost);
done:
    cudaFree(dz);
    cudaFree(scratch);
    cudaFree(dpos);
    cudaFree(dtok);
    cudaFree(dres);
    return e;
}
