/* gemv_mma_chunk.cu: gemv=mma's (and q8=mma's, qdot=mma's) prefill chunk on the host side of the
 * chain gemv_mma.cu describes: the prep of x' (chunk_mma_prep, one block a row of x), the mma.sync
 * tiles (chunk_gemv_mma, for gemv=mma2, mmachunk=sync and devices other than sm_90), and the launch
 * that chooses gemv_wgmma.cu's warpgroup kernels on sm_90. Split from gemv_mma.cu (decode) under
 * the 1,000-line rule; the device helpers both run are gemv_mma.cuh's, so decode and the chunk keep
 * one copy of every operation of the chain. */
#include "cuda_common.cuh"
#include "gemv_mma.cuh"

#include <type_traits>

/* ---- a prefill chunk ---------------------------------------------------------------------- */

/* x' of a chunk: a block per row of x. Its threads convert 8 columns each (16-byte loads and a
 * 16-byte store of x' per plane); then, with a norm, lanes 4p + t of warp 0 run part p's lane-t
 * chain of decode (fmaf over the part's k-blocks in order, the lane's 8 columns in order; the x
 * row is in L1 by then), add the group as (s0 + s2) + (s1 + s3) and the parts in order, and
 * store 1/rms. The loads are scalar where x's rows or norm_w are not 16-byte aligned. */
#define MC_MMA_PREP_THREADS 256u

__device__ __forceinline__ void mc_mma_load8(const float *p, bool vec, float (&v)[8]) {
    if (vec) {
        const float4 a = *(const float4 *)p, b = *((const float4 *)p + 1);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
        for (uint32_t e = 0; e < 8; e++)
            v[e] = p[e];
    }
}

/* PERM: x' in the order of gemv_wgmma.cu's instruction slots: in each k-block of 32 columns, the
 * columns 8q + j of piece q go to element 16 (j / 4) + s, s = 2q, 2q + 1, 2q + 8, 2q + 9 for j % 4
 * = 0 .. 3 (the slots decode's fragment gives them: instruction j / 4, lane t = q); the same values,
 * rows of 32 (cols / 32 rounded up) columns, zeros past cols; gemv=mma's one plane. */
__device__ __forceinline__ void mc_mma_store8(uint16_t *row, uint32_t i, uint32_t p01, uint32_t p23, uint32_t p45,
                                              uint32_t p67, bool perm) {
    if (perm) {
        uint32_t *b = (uint32_t *)row + (i / 4u) * 16u + (i % 4u);
        b[0] = p01, b[4] = p23, b[8] = p45, b[12] = p67;
    } else
        *(uint4 *)(row + 8 * i) = make_uint4(p01, p23, p45, p67);
}

/* KQ (qdot=mma, Q4_K): also each k-block's S (decode's staging: mc_kq4_psum per piece, the 4 pieces
 * by mc_mma_ss4) into S[k-block lds + row of x], and the parts of the sum of squares are ranges of
 * super-blocks (decode's under qdot=mma). */
/* P6 (qdot=mma, Q6_K): x' in the slots of the Q6_K instructions instead (each 16 columns of a sub-block
 * one instruction: columns 4t + e of it at slot 2t + e, e < 2, or 2t + 8 + e - 2; gemv_mma.cuh), and
 * no S (Q6_K has no min). */
__device__ __forceinline__ void mc_mma_store8_q6(uint16_t *row, uint32_t i, uint32_t p01, uint32_t p23, uint32_t p45,
                                                 uint32_t p67) {
    uint32_t *b = (uint32_t *)(row + 32u * (i / 4u)); /* piece i's columns 8 (i % 4) + 2j, + 1 are a pair */
    const uint32_t c = 8u * (i % 4u);
    b[mc_kqm_q6_slot(c) / 2u] = p01, b[mc_kqm_q6_slot(c + 2u) / 2u] = p23;
    b[mc_kqm_q6_slot(c + 4u) / 2u] = p45, b[mc_kqm_q6_slot(c + 6u) / 2u] = p67;
}
template <int NORM, int PL, bool PERM = false, bool KQ = false, bool P6 = false>
__global__ void __launch_bounds__(MC_MMA_PREP_THREADS)
    chunk_mma_prep(const float *x, uint32_t ldx, const float *norm_w, uint32_t cols, uint32_t ks, float eps,
                   uint16_t *xo, uint16_t *xl, float *rs, float *S, uint32_t lds) {
    const uint32_t tid = threadIdx.x, tok = blockIdx.x, ldo = PERM ? (cols + 31u) / 32u * 32u : cols;
    const float *xr = x + (size_t)tok * ldx;
    const bool vec = (((uintptr_t)xr | (uintptr_t)norm_w) & 15u) == 0;
    static_assert(!PERM || PL == 1, "the permuted layout is gemv_wgmma.cu's, one plane");
    if (PERM) /* the last k-block's pieces past cols: zeros */
        for (uint32_t i = cols / 8 + tid; i < ldo / 8; i += MC_MMA_PREP_THREADS)
            mc_mma_store8(xo + (size_t)tok * ldo, i, 0, 0, 0, 0, true);
    for (uint32_t i = tid; i < cols / 8; i += MC_MMA_PREP_THREADS) {
        float v[8];
        mc_mma_load8(xr + 8 * i, vec, v);
        if (NORM) {
            float gv[8];
            mc_mma_load8(norm_w + 8 * i, vec, gv);
#pragma unroll
            for (uint32_t e = 0; e < 8; e++)
                v[e] = __fmul_rn(v[e], gv[e]);
        }
        const uint32_t p01 = mc_mma_pack(v[0], v[1]), p23 = mc_mma_pack(v[2], v[3]), p45 = mc_mma_pack(v[4], v[5]),
                       p67 = mc_mma_pack(v[6], v[7]);
        if constexpr (P6)
            mc_mma_store8_q6(xo + (size_t)tok * ldo, i, p01, p23, p45, p67);
        else
            mc_mma_store8(xo + (size_t)tok * ldo, i, p01, p23, p45, p67, PERM);
        if constexpr (KQ && !P6) { /* cols a multiple of 256: every lane of the warp is here */
            const float sk = mc_mma_ss4(mc_kq4_psum(p01, p23, p45, p67));
            if ((i & 3u) == 0)
                S[(size_t)(i / 4) * lds + tok] = sk;
        }
        if (PL == 2)
            mc_mma_store8(xl + (size_t)tok * ldo, i, mc_mma_pack_low(v[0], v[1]), mc_mma_pack_low(v[2], v[3]),
                          mc_mma_pack_low(v[4], v[5]), mc_mma_pack_low(v[6], v[7]), PERM);
    }
    if (NORM && tid < 32) {
        const uint32_t lane = tid, nkb = (cols + 31) / 32;
        float s = 0.0f;
        if (lane < 4 * ks) {
            const uint32_t p = lane / 4, t = lane % 4,
                           kb1 = KQ ? 8u * mc_mma_part(cols / 256u, ks, p + 1) : mc_mma_part(nkb, ks, p + 1);
#pragma unroll 4
            for (uint32_t kb = KQ ? 8u * mc_mma_part(cols / 256u, ks, p) : mc_mma_part(nkb, ks, p); kb < kb1; kb++) {
                const uint32_t c = kb * 32 + 8 * t;
                if (c < cols) {
                    float v[8];
                    mc_mma_load8(xr + c, vec, v);
#pragma unroll
                    for (uint32_t e = 0; e < 8; e++)
                        s = fmaf(v[e], v[e], s);
                }
            }
        }
        s = mc_mma_ss4(s);
        float sst = __shfl_sync(MC_FULL, s, 0);
        for (uint32_t p = 1; p < ks; p++)
            sst = __fadd_rn(sst, __shfl_sync(MC_FULL, s, 4 * p));
        if (lane == 0)
            rs[tok] = mc_mma_rscale(sst, cols, eps);
    }
}

/* 16 bytes global -> shared without registers (zero-filled when !valid; src must be a valid
 * address either way), and the group bookkeeping of cp.async. */
__device__ __forceinline__ void mc_cp16(void *dst, const void *src, bool valid) {
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void mc_cp_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void mc_cp_wait(void) {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* A chunk block tile: WR x WT warps, each MT m-tiles (16 weight rows) by NT n-tiles (8 rows of x);
 * a stage holds KPS k-blocks, each as the block's weight rows then its rows of x' (per plane), 64
 * bytes a row, S stages in dynamic shared memory. The part sums live in registers (SUMREG) or in
 * the epilogue's table in shared memory (rows of x by weight rows, LD floats apart), which
 * otherwise takes the stages' place at the end. MINB: the blocks an SM the registers must allow. */
template <uint32_t WR_, uint32_t WT_, uint32_t MT_, uint32_t NT_, uint32_t KPS_, uint32_t S_, bool SUMREG_,
          uint32_t MINB_>
struct mc_mma_tile {
    static constexpr uint32_t WR = WR_, WT = WT_, MT = MT_, NT = NT_, KPS = KPS_, S = S_, MINB = MINB_;
    static constexpr uint32_t WARPS = WR * WT, NTH = 32 * WARPS, BR = WR * MT * 16, BT = WT * NT * 8, LD = BR + 4;
    static constexpr bool SUMREG = SUMREG_;
    static constexpr uint32_t table(void) { return BT * LD * 4; }
    static constexpr uint32_t stages(int pl) { return S * KPS * (BR + pl * BT) * 64; }
    static constexpr uint32_t smem(int pl) {
        return SUMREG ? (stages(pl) > table() ? stages(pl) : table()) : stages(pl) + table();
    }
};
/* The tile of gemv=mma's chunks: 4 warps of 32 weight rows by 64 rows of x (a 128 x 64 block),
 * 3 stages of one k-block, the part sums in shared memory, 3 blocks an SM (the first kernel's
 * tile). memra_cuda_mma_chunk_bench timed it fastest of the four on every llama-8b shape at M 512
 * (6144 x 4096 132.3 us against 182.2 to 211.2 for the others; 28672 x 4096 SwiGLU 542.1 against
 * 658.2 to 689.4: 222 TFLOP/s, 28.8% of the bf16 peak; bench/RESULTS.md). */
typedef mc_mma_tile<4, 1, 2, 8, 1, 3, false, 3> mc_mma_ch_tile;
/* Tiles the bench times against it (mc_gemv_chunk_mma_tile, tiles 1 to 3; check_mma_gemv checks
 * their bits): 4 warps of 64 x 64 (128 x 128) and 8 warps of 64 x 64 (256 x 128), the sums in
 * shared memory; and 8 warps of 32 x 64 (128 x 128), 2 k-blocks a stage, 4 stages (128 KB; mma2
 * 192 KB), the part sums in registers (190 registers: one block an SM). */
typedef mc_mma_tile<2, 2, 4, 8, 2, 3, false, 1> mc_mma_ch_tile_b;
typedef mc_mma_tile<4, 2, 4, 8, 1, 3, false, 1> mc_mma_ch_tile_c;
typedef mc_mma_tile<4, 2, 2, 8, 2, 4, true, 1> mc_mma_ch_tile_d;

/* Block (tile T): weight rows blockIdx.y * BR .. + BR - 1, rows of x blockIdx.x * BT .. + BT - 1
 * (the x tile fastest, so consecutive blocks take the same weights). Warp w: weight rows
 * MT 16 (w % WR) .. of the block's, rows of x NT 8 (w / WR) ... The k-blocks stream through the
 * stages (cp.async, zero-filled past the rows, the columns and M); each lane reads its fragments
 * as decode loads them (16 bytes of a row: a conflict-free 128-bit shared load, the same
 * permutation of k; ldmatrix would hand a lane 4 bytes of each of 4 rows, another permutation).
 * Each (row, x row) runs decode's chain: part p's accumulator from +0 over its k-blocks in order
 * (one register chain), folded into the part sum at the part's last k-block (the first part
 * copied, the others added in part order), then mc_mma_store with rs[x row]. */
template <int GLU, int PL, class T = mc_mma_ch_tile>
__global__ void __launch_bounds__(T::NTH, T::MINB)
    chunk_gemv_mma(const mc_matrix w, uint32_t ks, const uint16_t *xo, const uint16_t *xlo, const float *rs,
                   const float *bias, const float *res, uint32_t ldr, float *y, uint32_t ldy, uint32_t M) {
    constexpr uint32_t MT = T::MT, NT = T::NT, S = T::S, KPS = T::KPS, BR = T::BR, BT = T::BT, NTH = T::NTH;
    constexpr uint32_t SR = BR + PL * BT, SK = SR * 4, SS = KPS * SK; /* uint4 a row set, k-block, stage */
    constexpr uint32_t CA = BR * 4 / NTH, CB = BT * 4 / NTH, LD = T::LD;
    static_assert(BR * 4 % NTH == 0 && BT * 4 % NTH == 0, "whole copies a thread");
    extern __shared__ uint4 mc_mma_smem[];
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const uint32_t rb = blockIdx.y * BR, t0 = blockIdx.x * BT;
    if (rb >= w.rows || t0 >= M)
        return;
    const uint32_t ntok = min(BT, M - t0), nq = w.cols / 8, nkb = (w.cols + 31) / 32, nst = (nkb + KPS - 1) / KPS;
    const uint32_t wr0 = (warp % T::WR) * MT * 16, wt0 = (warp / T::WR) * NT * 8;
    const bool busy = wt0 < ntok; /* the warp has rows of x */
    float *f = T::SUMREG ? (float *)mc_mma_smem : (float *)(mc_mma_smem + S * SS); /* the table */
    /* this thread's copies: 16 bytes (q = tid % 4 of a k-block) of weight rows tid / 4 + NTH / 4 * i
     * and of rows of x tid / 4 + NTH / 4 * i */
    const uint16_t *wd = (const uint16_t *)w.data;
    const uint32_t cq = tid % 4;
    const uint16_t *sa[CA], *sb[CB];
    bool va[CA], vb[CB];
#pragma unroll
    for (uint32_t i = 0; i < CA; i++) {
        const uint32_t r = rb + tid / 4 + NTH / 4 * i;
        va[i] = r < w.rows;
        sa[i] = wd + (size_t)(va[i] ? r : rb) * w.stride + cq * 8;
    }
#pragma unroll
    for (uint32_t i = 0; i < CB; i++) {
        const uint32_t k = tid / 4 + NTH / 4 * i;
        vb[i] = k < ntok;
        sb[i] = xo + (size_t)(t0 + (vb[i] ? k : 0)) * w.cols + cq * 8;
    }
    const size_t lofs = (size_t)(xlo - xo); /* the low plane, mma2 */
    auto issue = [&](uint32_t s) {
        uint4 *st = mc_mma_smem + (s % S) * SS;
#pragma unroll
        for (uint32_t u = 0; u < KPS; u++) {
            const uint32_t kb = s * KPS + u;
            if (kb < nkb) {
                const bool qv = kb * 4 + cq < nq;
#pragma unroll
                for (uint32_t i = 0; i < CA; i++)
                    mc_cp16(st + u * SK + tid + NTH * i, qv && va[i] ? sa[i] + kb * 32 : wd, qv && va[i]);
#pragma unroll
                for (uint32_t i = 0; i < CB; i++) {
                    mc_cp16(st + u * SK + BR * 4 + tid + NTH * i, qv && vb[i] ? sb[i] + kb * 32 : xo, qv && vb[i]);
                    if (PL == 2)
                        mc_cp16(st + u * SK + (BR + BT) * 4 + tid + NTH * i, qv && vb[i] ? sb[i] + lofs + kb * 32 : xo,
                                qv && vb[i]);
                }
            }
        }
        mc_cp_commit(); /* an empty group past the end keeps the count uniform */
    };
    float acc[MT][NT][4], sum[T::SUMREG ? MT : 1][T::SUMREG ? NT : 1][4];
#pragma unroll
    for (uint32_t i = 0; i < MT; i++)
#pragma unroll
        for (uint32_t j = 0; j < NT; j++)
#pragma unroll
            for (uint32_t e = 0; e < 4; e++) {
                acc[i][j][e] = 0.0f;
                if (T::SUMREG)
                    sum[T::SUMREG ? i : 0][T::SUMREG ? j : 0][e] = 0.0f;
            }
#pragma unroll
    for (uint32_t s = 0; s + 1 < S; s++)
        issue(s);
    uint32_t p = 0, pend = mc_mma_part(nkb, ks, 1);
#pragma unroll 1
    for (uint32_t s = 0; s < nst; s++) {
        mc_cp_wait<S - 2>(); /* this thread's copies of stage s have landed */
        __syncthreads();     /* everyone's have, and everyone is done with stage s - 1's buffer */
        issue(s + S - 1);
        const uint4 *st = mc_mma_smem + (s % S) * SS;
#pragma unroll
        for (uint32_t u = 0; u < KPS; u++) {
            const uint32_t kb = s * KPS + u;
            if (kb < nkb && busy) {
                const uint4 *sk = st + u * SK;
                uint4 lo[MT], hi[MT];
#pragma unroll
                for (uint32_t i = 0; i < MT; i++) {
                    lo[i] = sk[(wr0 + 16 * i + g) * 4 + t];
                    hi[i] = sk[(wr0 + 16 * i + g + 8) * 4 + t];
                }
#pragma unroll
                for (uint32_t j = 0; j < NT; j++) {
                    const uint4 xb = sk[(BR + wt0 + 8 * j + g) * 4 + t];
                    if (PL == 2) {
                        const uint4 xl = sk[(BR + BT + wt0 + 8 * j + g) * 4 + t];
#pragma unroll
                        for (uint32_t i = 0; i < MT; i++)
                            mc_mma_kblock2(acc[i][j], lo[i], hi[i], xb, xl);
                    } else {
#pragma unroll
                        for (uint32_t i = 0; i < MT; i++)
                            mc_mma_kblock(acc[i][j], lo[i], hi[i], xb);
                    }
                }
                if (kb + 1 == pend) { /* the part's chain ends: into the part sum, in part order */
#pragma unroll
                    for (uint32_t i = 0; i < MT; i++)
#pragma unroll
                        for (uint32_t j = 0; j < NT; j++) {
                            if (T::SUMREG) {
#pragma unroll
                                for (uint32_t e = 0; e < 4; e++) {
                                    float &sv = sum[T::SUMREG ? i : 0][T::SUMREG ? j : 0][e];
                                    sv = p == 0 ? acc[i][j][e] : __fadd_rn(sv, acc[i][j][e]);
                                }
                            } else { /* the lane's own cells of the table: no other lane touches them */
                                const uint32_t r = wr0 + 16 * i + g, k = wt0 + 8 * j + 2 * t;
                                float *c[4] = {&f[k * LD + r], &f[(k + 1) * LD + r], &f[k * LD + r + 8],
                                               &f[(k + 1) * LD + r + 8]};
#pragma unroll
                                for (uint32_t e = 0; e < 4; e++)
                                    *c[e] = p == 0 ? acc[i][j][e] : __fadd_rn(*c[e], acc[i][j][e]);
                            }
#pragma unroll
                            for (uint32_t e = 0; e < 4; e++)
                                acc[i][j][e] = 0.0f;
                        }
                    p++;
                    pend = mc_mma_part(nkb, ks, p + 1);
                }
            }
        }
    }
    mc_cp_wait<0>();
    __syncthreads(); /* the stages are free, the table complete where it is in shared memory */
    if (T::SUMREG && busy) /* the table (row of x, weight row) in the stages' place */
#pragma unroll
        for (uint32_t i = 0; i < MT; i++)
#pragma unroll
            for (uint32_t j = 0; j < NT; j++) {
                const uint32_t r = wr0 + 16 * i + g, k = wt0 + 8 * j + 2 * t;
                const float(&sv)[4] = sum[T::SUMREG ? i : 0][T::SUMREG ? j : 0];
                f[k * LD + r] = sv[0];
                f[(k + 1) * LD + r] = sv[1];
                f[k * LD + r + 8] = sv[2];
                f[(k + 1) * LD + r + 8] = sv[3];
            }
    if (T::SUMREG)
        __syncthreads();
    mc_mma_epilogue<GLU, BR, BT, LD, NTH>(f, rb, t0, ntok, w.rows, rs, bias, res, ldr, y, ldy);
}
static_assert(mc_mma_ch_tile::smem(2) <= 227u * 1024u && mc_mma_ch_tile_b::smem(2) <= 227u * 1024u &&
                  mc_mma_ch_tile_c::smem(2) <= 227u * 1024u && mc_mma_ch_tile_d::smem(2) <= 227u * 1024u,
              "the tiles fit an H100/H200 block");

/* The chunk kernels' shared-memory limit, once per device (outside any capture: mc_gemv_prepare). */
cudaError_t mc_gemv_mma_prepare(void) {
    cudaError_t e = cudaSuccess;
#define MC_SET(G, P)                                                                                                   \
    if (e == cudaSuccess)                                                                                              \
        e = cudaFuncSetAttribute(chunk_gemv_mma<G, P>, cudaFuncAttributeMaxDynamicSharedMemorySize,                    \
                                 (int)mc_mma_ch_tile::smem(P));
    MC_SET(MC_GLU_NONE, 1)
    MC_SET(MC_GLU_SILU, 1) MC_SET(MC_GLU_GELU, 1) MC_SET(MC_GLU_NONE, 2) MC_SET(MC_GLU_SILU, 2) MC_SET(MC_GLU_GELU, 2)
#undef MC_SET
        if (e == cudaSuccess)
            e = mc_gemv_wgmma_prepare(); /* gemv_wgmma.cu's chunk kernels */
    return e == cudaSuccess ? mc_mmad_prepare() : e; /* and the decode ring's */
}

/* The chunk GEMV of tile T after the prep: T other than mc_mma_ch_tile only from the bench, which
 * sets the shared-memory limit here (outside any capture). */
template <class T>
static cudaError_t mc_mma_ch_launch(const mc_config *c, const mc_matrix *w, uint32_t ks, const uint16_t *xo,
                                    const uint16_t *xl, const float *rsp, const float *bias, const float *residual,
                                    uint32_t ldr, float *y, uint32_t ldy, int glu, uint32_t M, cudaStream_t st) {
    const bool two = c->gemv == MC_GEMV_MMA2;
    const dim3 grid((M + T::BT - 1) / T::BT, (w->rows + T::BR - 1) / T::BR);
    cudaError_t e = cudaSuccess;
#define MC_CH(G, P)                                                                                                    \
    do {                                                                                                               \
        if (!std::is_same<T, mc_mma_ch_tile>::value)                                                                   \
            e = cudaFuncSetAttribute(chunk_gemv_mma<G, P, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,             \
                                     (int)T::smem(P));                                                                 \
        if (e == cudaSuccess)                                                                                          \
            chunk_gemv_mma<G, P, T>                                                                                    \
                <<<grid, T::NTH, T::smem(P), st>>>(*w, ks, xo, xl, rsp, bias, residual, ldr, y, ldy, M);               \
    } while (0)
    if (glu == MC_GLU_SILU && two)
        MC_CH(MC_GLU_SILU, 2);
    else if (glu == MC_GLU_SILU)
        MC_CH(MC_GLU_SILU, 1);
    else if (glu == MC_GLU_GELU && two)
        MC_CH(MC_GLU_GELU, 2);
    else if (glu == MC_GLU_GELU)
        MC_CH(MC_GLU_GELU, 1);
    else if (two)
        MC_CH(MC_GLU_NONE, 2);
    else
        MC_CH(MC_GLU_NONE, 1);
#undef MC_CH
    return e != cudaSuccess ? e : cudaGetLastError();
}

static cudaError_t mc_mma_chunk(const mc_config *c, const mc_matrix *w, const float *x, uint32_t ldx,
                                const float *norm_w, float eps, const float *bias, const float *residual, uint32_t ldr,
                                float *y, uint32_t ldy, int glu, uint32_t M, void *scratch, cudaStream_t st, int tile) {
    const bool two = c->gemv == MC_GEMV_MMA2 && w->type == MEMRA_TYPE_BF16, q8 = w->type == MEMRA_TYPE_Q8_0;
    const bool kq = w->type == MEMRA_TYPE_Q4_K || w->type == MEMRA_TYPE_Q5_K || w->type == MEMRA_TYPE_Q6_K;
    const bool k6 = w->type == MEMRA_TYPE_Q6_K;
    if (!mc_gemv_mma_serves(c, w) || (glu && w->rows % 2) || tile < 0 || tile > 6 ||
        (tile >= 4 && two) ||    /* gemv_wgmma.cu takes one plane */
        ((q8 || kq) && tile < 4)) /* q8=mma's and qdot=mma's chunks are gemv_wgmma.cu's alone */
        return cudaErrorInvalidValue;
    if (M == 0)
        return cudaSuccess;
    cudaError_t e = mc_gemv_prepare();
    if (e != cudaSuccess)
        return e;
    /* the scratch of mc_gemv_chunk_scratch_bytes: x' (M x cols bf16 here, mma2 its two planes), then M
     * row scales */
    char *base = (char *)scratch;
    const uint32_t ldo = tile >= 4 ? (w->cols + 31u) / 32u * 32u : w->cols; /* gemv_wgmma.cu's rows: padded */
    uint16_t *xo = (uint16_t *)base, *xl = xo + (size_t)M * ldo;
    float *rs = (float *)(base + ((uint64_t)M * ldo * 4 + 255) / 256 * 256);
    /* qdot=mma: S after x' (cols / 32 rows of lds floats: within the second half of x''s room) */
    const uint32_t lds = (M + 3u) & ~3u;
    float *xS = (float *)(base + ((uint64_t)M * ldo * 2 + 255) / 256 * 256);
    const uint32_t ks = mc_gemv_mma_ksplit(w->rows, w->cols);
#define MC_PREP(N, P)                                                                                                  \
    do {                                                                                                               \
        if (k6)                                                                                                        \
            chunk_mma_prep<N, 1, true, true, true><<<M, MC_MMA_PREP_THREADS, 0, st>>>(x, ldx, norm_w, w->cols, ks,     \
                                                                                      eps, xo, xl, N ? rs : NULL,      \
                                                                                      NULL, 0);                        \
        else if (kq)                                                                                                   \
            chunk_mma_prep<N, 1, true, true><<<M, MC_MMA_PREP_THREADS, 0, st>>>(x, ldx, norm_w, w->cols, ks, eps, xo, \
                                                                                xl, N ? rs : NULL, xS, lds);           \
        else if (tile >= 4) /* one plane (mma2 is refused above) */                                                   \
            chunk_mma_prep<N, P, P == 1><<<M, MC_MMA_PREP_THREADS, 0, st>>>(x, ldx, norm_w, w->cols, ks, eps, xo, xl,  \
                                                                            N ? rs : NULL, NULL, 0);                   \
        else                                                                                                           \
            chunk_mma_prep<N, P><<<M, MC_MMA_PREP_THREADS, 0, st>>>(x, ldx, norm_w, w->cols, ks, eps, xo, xl,          \
                                                                    N ? rs : NULL, NULL, 0);                           \
    } while (0)
    if (norm_w && two)
        MC_PREP(1, 2);
    else if (norm_w)
        MC_PREP(1, 1);
    else if (two)
        MC_PREP(0, 2);
    else
        MC_PREP(0, 1);
#undef MC_PREP
    if ((e = cudaGetLastError()) != cudaSuccess)
        return e;
    const float *rsp = norm_w ? rs : NULL;
    if (kq)
        return mc_gemv_wgmma_kq_launch(w, ks, xo, xS, lds, rsp, bias, residual, ldr, y, ldy, glu, M,
                                       tile == 5 ? 128u : tile == 6 ? 64u : 0u, st);
    if (tile >= 4) /* 4: the rows of x a block by the grid's size; 5: 128; 6: 64 */
        return mc_gemv_wgmma_launch(w, ks, two, xo, rsp, bias, residual, ldr, y, ldy, glu, M,
                                    tile == 5 ? 128u : tile == 6 ? 64u : 0u, st);
    if (tile == 1)
        return mc_mma_ch_launch<mc_mma_ch_tile_b>(c, w, ks, xo, xl, rsp, bias, residual, ldr, y, ldy, glu, M, st);
    if (tile == 2)
        return mc_mma_ch_launch<mc_mma_ch_tile_c>(c, w, ks, xo, xl, rsp, bias, residual, ldr, y, ldy, glu, M, st);
    if (tile == 3)
        return mc_mma_ch_launch<mc_mma_ch_tile_d>(c, w, ks, xo, xl, rsp, bias, residual, ldr, y, ldy, glu, M, st);
    return mc_mma_ch_launch<mc_mma_ch_tile>(c, w, ks, xo, xl, rsp, bias, residual, ldr, y, ldy, glu, M, st);
}

/* The mmachunk key: gemv_wgmma.cu's kernel fed by the tensor memory accelerator (tile 4) under wgmma,
 * and under auto on an sm_90 device, for gemv=mma's one plane; the mma.sync tile otherwise. wgmma
 * on another device is an error (cudaErrorNotSupported), never a quiet change of kernel. */
int mc_gemv_mma_chunk_serves(const mc_config *c, const mc_matrix *w) {
    if (!mc_gemv_mma_serves(c, w))
        return 0;
    if (w->type == MEMRA_TYPE_BF16)
        return 1;
    return c->mmachunk == MC_MMACHUNK_WGMMA || (c->mmachunk == MC_MMACHUNK_AUTO && mc_gemv_wgmma_available());
}

cudaError_t mc_gemv_chunk_mma(const mc_config *c, const mc_matrix *w, const float *x, uint32_t ldx, const float *norm_w,
                              float eps, const float *bias, const float *residual, uint32_t ldr, float *y, uint32_t ldy,
                              int glu, uint32_t M, void *scratch, cudaStream_t st) {
    const bool wg = (c->gemv == MC_GEMV_MMA || w->type != MEMRA_TYPE_BF16) && /* q8=mma, qdot=mma: wgmma alone */
                    (c->mmachunk == MC_MMACHUNK_WGMMA || (c->mmachunk == MC_MMACHUNK_AUTO && mc_gemv_wgmma_available()));
    return mc_mma_chunk(c, w, x, ldx, norm_w, eps, bias, residual, ldr, y, ldy, glu, M, scratch, st, wg ? 4 : 0);
}

/* For bench/gpu/mma_chunk_bench.c (declared there, weak, so that the bench links with builds
 * without it) and check_mma_gemv: mc_gemv_chunk_mma with tile 0 (gemv=mma's), 1, 2 or 3
 * (mc_mma_ch_tile_b, _c, _d) or 4, 5, 6 (gemv_wgmma.cu's, sm_90 only, one plane: 4 its rows of x a
 * block by the grid, 5 128 of them, 6 64): the same bits, other speeds. */
extern "C" cudaError_t
mc_gemv_chunk_mma_tile(const mc_config *c, const mc_matrix *w, const float *x, uint32_t ldx, const float *norm_w,
                       float eps, const float *bias, const float *residual, uint32_t ldr, float *y, uint32_t ldy,
                       int glu, uint32_t M, void *scratch, cudaStream_t st, int tile) {
    return mc_mma_chunk(c, w, x, ldx, norm_w, eps, bias, residual, ldr, y, ldy, glu, M, scratch, st, tile);
}

/* ---- census ------------------------------------------------------------------------------- */

const char *mc_gemv_mma_chunk_family(const void *f) {
#define MC_FAM(P)                                                                                                      \
    {(const void *)chunk_gemv_mma<MC_GLU_NONE, P>, "chunk_gemv"}, {(const void *)chunk_gemv_mma<MC_GLU_SILU, P>, "chunk_gemv"}, \
        {(const void *)chunk_gemv_mma<MC_GLU_GELU, P>, "chunk_gemv"},
/* the preps: one plane or two, gemv=mma's wgmma slots, qdot=mma's (with S), Q6_K's slots */
#define MC_PREPS(N)                                                                                                    \
    {(const void *)chunk_mma_prep<N, 1>, "chunk_prep"}, {(const void *)chunk_mma_prep<N, 2>, "chunk_prep"},            \
        {(const void *)chunk_mma_prep<N, 1, true>, "chunk_prep"},                                                      \
        {(const void *)chunk_mma_prep<N, 1, true, true>, "chunk_prep"},                                                \
        {(const void *)chunk_mma_prep<N, 1, true, true, true>, "chunk_prep"},
    static const mc_family_row table[] = {MC_FAM(1) MC_FAM(2) MC_PREPS(0) MC_PREPS(1)};
#undef MC_PREPS
#undef MC_FAM
    const char *fam0 = mc_family_find(table, sizeof table / sizeof table[0], f);
    if (fam0)
        return fam0;
    return mc_gemv_wgmma_family(f);
}
