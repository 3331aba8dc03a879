/* chunk_mma.cu: the integer Q8_0 GEMV of a prefill chunk on int8 tensor cores (chunk=mma), each
 * output element decode's bits (gemv_q8_0_int in gemv_q8.cu, and chunk_gemv.cu's chunk_gemv_q8,
 * chunk=fma, which runs decode's sequence on dp4a).
 *
 * Decode's sequence for output row r of x row t (x' quantized per 16-column chunk c into the int8
 * planes hi, mid, lo and a scale s_c by chunk_q8_quant, which is decode's quantization): over
 * column part p of KS (mc_q8x_ksplit), lane l takes the chunks 32 p + l, then every 32 KS-th
 * (its "class"), and keeps acc = fmaf(fmaf((float)dh, 2^16, (float)(256 dm + dl)), d_w * s_c, acc)
 * from 0, where dh, dm, dl are the chunk's exact integer dots with the three planes; then the xor
 * tree over the 32 lanes (mc_warp_sum: lanes l and l^16 first, then ^8, ^4, ^2, ^1), the parts
 * added in order, times 1/rms, and mc_rows_store's epilogue.
 *
 * Here one mma.sync.m16n8k16.s32.s8.s8.s32 per plane gives the dots of 16 weight rows (A: the
 * chunk of the weights, exactly) by 8 x rows (B: the chunk of one plane) at once. Its accumulator
 * input is the integer 0x4B400000 instead of 0: the result is still the exact integer 0x4B400000 +
 * dot (|dot| <= 16 * 128 * 128 = 2^18), and as a float's bits that is 1.5 * 2^23 + dot, so
 * (float)dot = __int_as_float(D) - 1.5 * 2^23 exactly (one add instead of a conversion, whose rate
 * on the device is an eighth of an add's). (float)(256 dm + dl), a rounded conversion (the sum
 * reaches 2^26), is fmaf((float)dm, 256, (float)dl): both operands exact, so one rounding of the
 * exact sum, the conversion's. Per (row, x row, chunk) the float work is then 3 adds, 2 FMAs to the
 * dot, 1 product d_w * s_c and the FMA into the class's sum: 7 operations on the CUDA cores, against
 * 3 x 16 = 48 int8 multiply-adds on the tensor cores: the float chain is the ceiling (about a
 * quarter of the int8 tensor rate at the FP32 rate).
 *
 * The classes: a thread holds the sums of 8 (row, x row) elements of its block's tile, and walks
 * the classes one at a time, in the order in which decode's tree pairs them (the bit-reversed lane
 * order 0, 16, 8, 24, 4, ...), each class's chunks in increasing order, so the tree is a stack of
 * five partial sums per element: after the class at position n of that order, its sum is added to
 * the stack's entries while n's low bits are ones (each the left subtree of the same level), as
 * mc_warp_sum adds them. After the 32 classes of a part the stack holds the part's tree; the parts
 * are added in order, as decode's. So the bits are decode's by construction (the check program
 * memra_cuda_check_chunk_mma compares them per row, with a negative control: MC_CHUNK_MMA_FAULT,
 * the classes in lane order, a tree decode does not build).
 *
 * Block: 512 threads (16 warps as 2 x 8 of 32 weight rows x 8 x rows), a tile of 64 weight rows x
 * 64 x rows; per step (one class, up to MC_MMA_JB of its chunks) the weights, the three planes and
 * the scales of the tile are staged in shared memory (cp.async, double-buffered: the next step's
 * loads in flight while this one computes). Per call: the weights (rows x cols bytes and their
 * block scales) once per 64 x rows (consecutive blocks take the same weights, so L2 serves the
 * repeats), the planes (M x cols x 3 bytes and M x cols / 16 scales) once per 64 weight rows. */
#include "chunk_kq.h"
#include "cuda_common.cuh"
#include "mma_s8.cuh"

#define MC_MMA_BR 64u           /* weight rows of a block's tile */
#define MC_MMA_JB 4u            /* chunks of one class a step stages */
#define MC_MMA_NN 8u            /* the default tile: warps along x (8 x rows each), so 64 x rows and 512 threads */
#define MC_MMA_MAGIC 0x4B400000 /* the bits of 1.5 * 2^23 */
#define MC_MMA_MAGIC_F 12582912.0f

/* One step's staging buffer, for a tile of BT x rows. */
template <uint32_t BT> struct mc_mma_stage {
    uint4 w[MC_MMA_JB][MC_MMA_BR]; /* weight chunks */
    uint4 x[3][MC_MMA_JB][BT];     /* plane hi, mid, lo chunks */
    float s[MC_MMA_JB][BT];        /* the x chunks' scales */
    float d[MC_MMA_JB][MC_MMA_BR]; /* the weight blocks' scales, as floats, rows 16k + i and 16k + i + 8
                                    * side by side (mc_mma_dpos) */
};
#define MC_MMA_FIN_LD (MC_MMA_BR + 1u)

__device__ __forceinline__ void mc_mma_cp16(void *dst, const void *src) {
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void mc_mma_cp4(void *dst, const void *src) {
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void mc_mma_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void mc_mma_wait1(void) { asm volatile("cp.async.wait_group 1;" ::: "memory"); }
__device__ __forceinline__ void mc_mma_wait0(void) { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

/* Where weight row r of the tile keeps its scale in mc_mma_stage::d. */
__device__ __forceinline__ uint32_t mc_mma_dpos(uint32_t r) { return (r & ~15u) | ((r & 7u) << 1) | ((r >> 3) & 1u); }

/* NN warps along x (BT = 8 NN x rows), 2 along the weight rows: 64 NN threads. */
template <int GLU, uint32_t NN>
__global__ void __launch_bounds__(64 * NN, 1)
    chunk_gemv_q8_mma(const mc_matrix w, const uint4 *xh, const uint4 *xm, const uint4 *xl, const float *xs,
                      const float *rs, const float *bias, const float *res, uint32_t ldr, float *y, uint32_t ldy,
                      uint32_t M, uint32_t ks, uint32_t fault) {
    constexpr uint32_t BT = 8 * NN, NT = 64 * NN;
    typedef mc_mma_stage<BT> stage;
    static_assert(sizeof(float) * BT * MC_MMA_FIN_LD <= 2 * sizeof(stage), "the final tile fits");
    static_assert(NT >= MC_MMA_BR * MC_MMA_JB && NT >= BT * MC_MMA_JB, "a copy a thread");
    __shared__ __align__(16) unsigned char smraw[2 * sizeof(stage)];
    stage *sb = (stage *)smraw;
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const uint32_t m0 = (warp & 1) * 32, n0 = (warp >> 1) * 8;
    const uint32_t t0 = blockIdx.x * BT, r0 = blockIdx.y * MC_MMA_BR;
    const uint32_t nch = w.cols / 16, nsc = w.cols / MEMRA_Q8_0_BLOCK, cstride = 32 * ks;
    /* this thread's staging: weight row tid % 64 of chunk slot tid / 64 (threads below 256), x row
     * tid % BT of chunk slot tid / BT (threads below 4 BT) */
    const uint32_t srow = tid % MC_MMA_BR, sj = tid < MC_MMA_BR * MC_MMA_JB ? tid / MC_MMA_BR : MC_MMA_JB;
    const uint32_t sxr = tid % BT, sxj = tid < BT * MC_MMA_JB ? tid / BT : MC_MMA_JB;
    const uint32_t grow = r0 + srow < w.rows ? r0 + srow : w.rows - 1;
    const uint32_t gt = t0 + sxr < M ? t0 + sxr : M - 1;

    float dreg = 0.0f;
    /* issues step c's loads into buffer b (the weight scale into dreg, stored at the step's start) */
    auto issue = [&](const mc_mma_cursor &c, uint32_t b) {
        const uint32_t first = 32 * c.p + mc_mma_lane(c.n, fault);
        const uint32_t J = mc_mma_count(first, nch, cstride), j = c.jb * MC_MMA_JB;
        if (sj < MC_MMA_JB && j + sj < J) {
            const uint32_t ch = first + cstride * (j + sj);
            mc_mma_cp16(&sb[b].w[sj][srow], (const char *)w.data + (size_t)grow * w.stride + (size_t)ch * 16);
            dreg = __half2float(__ushort_as_half(__ldg(w.scales + (size_t)grow * nsc + ch / 2)));
        }
        if (sxj < MC_MMA_JB && j + sxj < J) {
            const uint32_t ch = first + cstride * (j + sxj);
            const size_t xoff = (size_t)gt * nch;
            mc_mma_cp16(&sb[b].x[0][sxj][sxr], xh + xoff + ch);
            mc_mma_cp16(&sb[b].x[1][sxj][sxr], xm + xoff + ch);
            mc_mma_cp16(&sb[b].x[2][sxj][sxr], xl + xoff + ch);
            mc_mma_cp4(&sb[b].s[sxj][sxr], xs + xoff + ch);
        }
    };

    float acc[8], st[5][8], dsum[8];
#pragma unroll
    for (uint32_t e = 0; e < 8; e++)
        dsum[e] = 0.0f;
    mc_mma_cursor nx = {0, 0, 0, 0};
    mc_mma_next<MC_MMA_JB>(nx, nch, ks, fault, 0);
    if (nx.valid) {
        issue(nx, 0);
        mc_mma_next<MC_MMA_JB>(nx, nch, ks, fault, 1);
    }
    mc_mma_commit();
    uint32_t s = 0;
#pragma unroll 1
    for (uint32_t p = 0; p < ks; p++) {
#pragma unroll 1
        for (uint32_t n = 0; n < 32; n++) {
            const uint32_t first = 32 * p + mc_mma_lane(n, fault), J = mc_mma_count(first, nch, cstride);
#pragma unroll
            for (uint32_t e = 0; e < 8; e++)
                acc[e] = 0.0f;
#pragma unroll 1
            for (uint32_t jb = 0; jb * MC_MMA_JB < J; jb++, s++) {
                const uint32_t b = s & 1, jv = min(MC_MMA_JB, J - jb * MC_MMA_JB);
                if (sj < jv)
                    sb[b].d[sj][mc_mma_dpos(srow)] = dreg;
                if (nx.valid) {
                    issue(nx, b ^ 1);
                    mc_mma_next<MC_MMA_JB>(nx, nch, ks, fault, 1);
                }
                mc_mma_commit();
                mc_mma_wait1();
                __syncthreads();
                const stage &S = sb[b];
#pragma unroll 1
                for (uint32_t jj = 0; jj < jv; jj++) {
                    const uint32_t xr = n0 + g;
                    const uint32_t bh = ((const uint32_t *)&S.x[0][jj][xr])[q];
                    const uint32_t bm = ((const uint32_t *)&S.x[1][jj][xr])[q];
                    const uint32_t bl = ((const uint32_t *)&S.x[2][jj][xr])[q];
                    const float2 sx = *(const float2 *)&S.s[jj][n0 + 2 * q];
#pragma unroll
                    for (uint32_t mt = 0; mt < 2; mt++) {
                        const uint32_t r = m0 + 16 * mt + g;
                        const uint32_t a0 = ((const uint32_t *)&S.w[jj][r])[q];
                        const uint32_t a1 = ((const uint32_t *)&S.w[jj][r + 8])[q];
                        const float2 dw = *(const float2 *)&S.d[jj][m0 + 16 * mt + 2 * g]; /* rows r, r + 8 */
                        int dh[4], dm[4], dl[4];
                        mc_mma_s8(dh, a0, a1, bh, MC_MMA_MAGIC);
                        mc_mma_s8(dm, a0, a1, bm, MC_MMA_MAGIC);
                        mc_mma_s8(dl, a0, a1, bl, MC_MMA_MAGIC);
#pragma unroll
                        for (uint32_t e = 0; e < 4; e++) {
                            /* element e: weight row r (+8 for e >= 2), x row n0 + 2q (+1 for odd e) */
                            const float fh = __int_as_float(dh[e]) - MC_MMA_MAGIC_F;
                            const float fm = __int_as_float(dm[e]) - MC_MMA_MAGIC_F;
                            const float fl = __int_as_float(dl[e]) - MC_MMA_MAGIC_F;
                            const float dot = fmaf(fh, 65536.0f, fmaf(fm, 256.0f, fl));
                            const float sc = ((e >> 1) ? dw.y : dw.x) * ((e & 1) ? sx.y : sx.x);
                            acc[mt * 4 + e] = fmaf(dot, sc, acc[mt * 4 + e]);
                        }
                    }
                }
                __syncthreads(); /* the buffer is free for the step after next */
            }
            /* the class's sum into the tree: added to the left subtrees while n's low bits are ones
             * (ones: how many), then kept at that level; after n = 31, the part's tree */
            const uint32_t ones = __ffs(~n) - 1;
#pragma unroll
            for (uint32_t L = 0; L < 5; L++)
                if (L < ones)
#pragma unroll
                    for (uint32_t e = 0; e < 8; e++)
                        acc[e] = st[L][e] + acc[e];
            switch (ones) {
            case 0: mc_mma_keep(st[0], acc); break;
            case 1: mc_mma_keep(st[1], acc); break;
            case 2: mc_mma_keep(st[2], acc); break;
            case 3: mc_mma_keep(st[3], acc); break;
            case 4: mc_mma_keep(st[4], acc); break;
            default:
#pragma unroll
                for (uint32_t e = 0; e < 8; e++)
                    dsum[e] = p == 0 ? acc[e] : dsum[e] + acc[e];
            }
        }
    }
    mc_mma_wait0();
    __syncthreads();
    float *fin = (float *)smraw; /* [x row][weight row] */
#pragma unroll
    for (uint32_t mt = 0; mt < 2; mt++)
#pragma unroll
        for (uint32_t e = 0; e < 4; e++) {
            const uint32_t r = m0 + 16 * mt + g + 8 * (e >> 1), t = n0 + 2 * q + (e & 1);
            fin[t * MC_MMA_FIN_LD + r] = dsum[mt * 4 + e];
        }
    __syncthreads();
    for (uint32_t k = tid; k < BT * (MC_MMA_BR / MC_GEMV_ROWS); k += NT) {
        const uint32_t tt = k / (MC_MMA_BR / MC_GEMV_ROWS), gq = k % (MC_MMA_BR / MC_GEMV_ROWS);
        const uint32_t t = t0 + tt, base = r0 + MC_GEMV_ROWS * gq;
        if (t >= M || base >= w.rows)
            continue;
        const float scale = rs[t];
        float d[MC_GEMV_ROWS];
        /* a rounded product, as decode's (its scaling and the store's bias add never fuse) */
#pragma unroll
        for (uint32_t j = 0; j < MC_GEMV_ROWS; j++)
            d[j] = __fmul_rn(fin[tt * MC_MMA_FIN_LD + MC_GEMV_ROWS * gq + j], scale);
        mc_rows_store<GLU>(d, base, w.rows, bias, res ? res + (size_t)t * ldr : NULL, y + (size_t)t * ldy);
    }
}

template <uint32_t NN>
static cudaError_t mc_chunk_q8_mma_nn(int glu, uint32_t fault, const mc_matrix *w, const uint4 *xh, const uint4 *xm,
                                      const uint4 *xl, const float *xs, const float *rs, const float *bias,
                                      const float *res, uint32_t ldr, float *y, uint32_t ldy, uint32_t M,
                                      cudaStream_t st) {
    const uint32_t ks = mc_q8x_ksplit(w->rows), f = fault ? 1u : 0u;
    const dim3 grid((M + 8 * NN - 1) / (8 * NN), (w->rows + MC_MMA_BR - 1) / MC_MMA_BR);
    switch (glu) {
    case MC_GLU_SILU:
        chunk_gemv_q8_mma<MC_GLU_SILU, NN>
            <<<grid, 64 * NN, 0, st>>>(*w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M, ks, f);
        break;
    case MC_GLU_GELU:
        chunk_gemv_q8_mma<MC_GLU_GELU, NN>
            <<<grid, 64 * NN, 0, st>>>(*w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M, ks, f);
        break;
    default:
        chunk_gemv_q8_mma<MC_GLU_NONE, NN>
            <<<grid, 64 * NN, 0, st>>>(*w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M, ks, f);
        break;
    }
    return cudaGetLastError();
}

cudaError_t mc_chunk_q8_mma(int glu, uint32_t variant, const mc_matrix *w, const uint4 *xh, const uint4 *xm,
                            const uint4 *xl, const float *xs, const float *rs, const float *bias, const float *res,
                            uint32_t ldr, float *y, uint32_t ldy, uint32_t M, cudaStream_t st) {
    if (M == 0 || w->rows == 0)
        return cudaSuccess;
    const uint32_t fault = variant == MC_CHUNK_MMA_FAULT;
    const uint32_t nn = variant == MC_CHUNK_MMA_T4   ? 4
                        : variant == MC_CHUNK_MMA_T6 ? 6
                        : variant == MC_CHUNK_MMA_T8 ? 8
                                                     : MC_MMA_NN;
    switch (nn) {
    case 4: return mc_chunk_q8_mma_nn<4>(glu, fault, w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M, st);
    case 6: return mc_chunk_q8_mma_nn<6>(glu, fault, w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M, st);
    case 8: return mc_chunk_q8_mma_nn<8>(glu, fault, w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M, st);
    default: return cudaErrorInvalidValue;
    }
}

#define MC_MMA_FAMILY(G, N) f == (const void *)chunk_gemv_q8_mma<G, N> ||
const char *mc_chunk_mma_family(const void *f) {
    if (MC_MMA_FAMILY(MC_GLU_NONE, 4) MC_MMA_FAMILY(MC_GLU_SILU, 4) MC_MMA_FAMILY(MC_GLU_GELU, 4)
            MC_MMA_FAMILY(MC_GLU_NONE, 6) MC_MMA_FAMILY(MC_GLU_SILU, 6) MC_MMA_FAMILY(MC_GLU_GELU, 6)
                MC_MMA_FAMILY(MC_GLU_NONE, 8) MC_MMA_FAMILY(MC_GLU_SILU, 8) MC_MMA_FAMILY(MC_GLU_GELU, 8) 0)
        return "chunk_gemv";
    return mc_chunk_kq_family(f);
}
