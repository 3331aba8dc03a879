/* chunk_legacy_mma.cu: the Q4_0, Q4_1, Q5_0 and Q5_1 GEMVs of a prefill chunk on int8 tensor
 * cores (chunk=mma, the default, and its synonym mma-kq; qdot=auto), each output element the bits
 * of decode's gemv_legacy.cu under qdot=auto.
 *
 * Decode's sequence for output row r of x row t (gemv_legacy_body, QD 1): x' = x * norm_w
 * quantized per block b of 32 columns into the int8 planes hi, mid, lo with the scale s_b and the
 * planes' integer sums over the block (chunk_ll_quant below: decode's staging loop itself, its
 * threads, lane pairs and sum of squares, into global memory). Over column part p of KS
 * (mc_ll_ksplit's formula, a function of the row count), lane l takes the blocks 32 p + l, then
 * every 32 KS-th (its "class"), and per block: per plane the exact integer dot of the quants
 * (nibbles, fifth bits merged for Q5) less the zero point o (8 Q4_0, 16 Q5_0, 0 the _1 types)
 * times the plane's sum, dot = fmaf((float)dh, 2^16, (float)(256 dm + dl)),
 * acc = fmaf(dot, d * s, acc), the _1 types then acc = fmaf(S, m * s, acc) with S the block's
 * x' sum joined the same way; then the xor tree over the lanes, the parts in order, times 1/rms,
 * mc_rows_store's epilogue.
 *
 * Here a block's weights are unpacked to int8 while staging (4 or 5 bits, non-negative, the zero
 * point not subtracted: as decode's dp4a takes them) and per plane two chained
 * mma.sync.m16n8k16.s32.s8.s8.s32 (the low nibbles with x' columns 0-15, the high ones with
 * 16-31) give the integer dots of 16 weight rows by 8 x rows exactly. The first one's accumulator
 * input is the integer 0x4B400000 less o times the plane's sum (the prep puts it in the block's
 * meta), so each plane's dot, its zero point taken off as decode does, is the float of its bits
 * less 1.5 * 2^23 (|dot| < 2^22), no conversion. The float chain above then runs per (row, x row,
 * block) on the CUDA cores, in decode's expressions, each class's blocks in order, the classes in
 * the order of decode's tree (mma_s8.cuh's plan and the stack of partial sums of chunk_kq_mma.cu,
 * levels 1 to 4 and the parts' sum in shared memory). Block: 512 threads (16 warps as 2 x 8 of 32
 * weight rows x 8 x rows), a tile of 64 weight rows x 64 x rows; a step stages MC_LLM_JB block
 * slots, the next step's loads held in registers while this one computes.
 *
 * Per call: the prep reads x (M x cols floats) and writes the planes and meta (M x cols x 3.5
 * bytes); the main kernel reads the weights (the matrix's bytes) once per 64 x rows (L2 serves
 * the repeats) and the planes once per 64 weight rows. memra_cuda_check_chunk_legacy compares
 * every row with decode's GEMV, bit for bit (negative control: MC_CHUNK_MMA_FAULT, the classes in
 * lane order). */
#include "chunk_legacy.h"
#include "legacy_layout.h"
#include "mma_s8.cuh"
#include "q8x_quant.h"

#define MC_LLM_BR 64u  /* weight rows of a block's tile */
#define MC_LLM_BT 64u  /* x rows of a block's tile */
#define MC_LLM_JB 4u   /* block slots a step stages (mc_mma_plan) */
#define MC_LLM_NT 512u /* threads: 16 warps */
#define MC_LLM_FIN_LD (MC_LLM_BR + 1u)
#define MC_LLM_PREP 256u        /* the prep's threads: decode's staging warps (MC_LL_STAGE_WARPS) */
#define MC_LLM_MAGIC 0x4B400000 /* the bits of 1.5 * 2^23 (chunk_mma.cu's MC_MMA_MAGIC) */
#define MC_LLM_MAGIC_F 12582912.0f
#define MC_LLM_TREE 5u /* the tree's levels 1 to 4 and the parts' sum, kept in shared memory */

struct mc_llm_stage {
    uint4 w[MC_LLM_JB][2][MC_LLM_BR];    /* the blocks unpacked: elements 0-15 (low nibbles), 16-31 */
    float2 ws[MC_LLM_JB][MC_LLM_BR];     /* a row's d, m (the _1 types) */
    uint4 x[MC_LLM_JB][2][3][MC_LLM_BT]; /* x' columns 0-15, 16-31 of the block: planes hi, mid, lo */
    int4 xm[MC_LLM_JB][MC_LLM_BT];       /* the block's meta (chunk_ll_quant) */
};
static_assert(sizeof(float) * MC_LLM_BT * MC_LLM_FIN_LD <= sizeof(mc_llm_stage), "the final tile fits");
#define MC_LLM_SMEM (sizeof(mc_llm_stage) + sizeof(float) * MC_LLM_TREE * 8 * MC_LLM_NT)
static_assert(MC_LLM_JB * 2 * MC_LLM_BT == MC_LLM_NT && MC_LLM_JB * MC_LLM_BR <= MC_LLM_NT, "a copy a thread");

/* D += A B: mma_s8.cuh's mc_mma_s8 with D itself the accumulator input (a plane's dot over the
 * block's 32 columns in two steps). */
__device__ __forceinline__ void mc_mma_s8acc(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b));
}

/* ---- the prep: decode's staging per row of x --------------------------------------------------- */

/* One block of 256 threads per row of x: gemv_legacy_body's staging loop under QD 1 (the same
 * statements: half block c2 by thread c2 mod 256, a block's two halves by a lane pair, the sums of
 * squares, the warp tree, the 8 warps in order), into global memory: planes xh, xm, xl per 16
 * columns; meta per block: the scale's bits, then (o != 0) the first MMA's accumulator inputs of
 * the three planes, the magic less o times the plane's sum, or (the _1 types) decode's joined sum
 * of x'; rs the row's 1/rms (1 without a norm). */
template <int OFF, bool HM>
__global__ void __launch_bounds__(MC_LLM_PREP)
    chunk_ll_quant(const float *x, uint32_t ldx, const float *norm_w, uint32_t cols, float eps, uint4 *xh, uint4 *xm,
                   uint4 *xl, int4 *meta, float *rs) {
    __shared__ float bred[MC_LLM_PREP / 32];
    const uint32_t nb = cols / 32, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, t = blockIdx.x;
    const float *xr = x + (size_t)t * ldx;
    xh += (size_t)t * 2 * nb, xm += (size_t)t * 2 * nb, xl += (size_t)t * 2 * nb, meta += (size_t)t * nb;
    float ss = 0.0f;
    for (uint32_t c2 = tid; c2 < 2 * nb; c2 += MC_LLM_PREP) {
        const uint32_t live = 2 * nb - (c2 - lane), pair = live >= 32 ? MC_FULL : (1u << live) - 1u;
        const uint32_t c = c2 >> 1, half = c2 & 1;
        float v[16];
        mc_q8x_load16<-1>(xr, norm_w, (size_t)c * 32 + 16 * half, v, ss);
        mc_q8x_half q;
        mc_q8x_quant16(v, pair, q);
        xh[c2] = make_uint4(q.h[0], q.h[1], q.h[2], q.h[3]);
        xm[c2] = make_uint4(q.m[0], q.m[1], q.m[2], q.m[3]);
        xl[c2] = make_uint4(q.l[0], q.l[1], q.l[2], q.l[3]);
        if (half == 0) { /* the scale is NaN for a non-finite block: it stays visible */
            const int sb = __float_as_int(mc_q8x_scale(q.amax, q.finite));
            if (HM) /* decode's sumx */
                meta[c] = make_int4(sb, __float_as_int(fmaf((float)q.sh, 65536.0f, (float)(q.sm * 256 + q.sl))), 0, 0);
            else
                meta[c] =
                    make_int4(sb, MC_LLM_MAGIC - OFF * q.sh, MC_LLM_MAGIC - OFF * q.sm, MC_LLM_MAGIC - OFF * q.sl);
        }
    }
    if (norm_w) {
        ss = mc_warp_sum(ss);
        if (lane == 0)
            bred[warp] = ss;
    }
    __syncthreads();
    if (tid == 0) {
        float rscale = 1.0f;
        if (norm_w) { /* the staging warps in order */
            float s = 0.0f;
#pragma unroll
            for (uint32_t k = 0; k < MC_LLM_PREP / 32; k++)
                s += bred[k];
            rscale = 1.0f / sqrtf(s / (float)cols + eps);
        }
        rs[t] = rscale;
    }
}

template <uint32_t T, int GLU>
__global__ void __launch_bounds__(MC_LLM_NT, 1)
    chunk_gemv_ll_mma(const mc_matrix w, const uint4 *xh, const uint4 *xm, const uint4 *xl, const int4 *xmeta,
                      const float *rs, const float *bias, const float *res, uint32_t ldr, float *y, uint32_t ldy,
                      uint32_t M, uint32_t ks, uint32_t fault) {
    constexpr bool HM = T == MEMRA_TYPE_Q4_1 || T == MEMRA_TYPE_Q5_1, HH = T == MEMRA_TYPE_Q5_0 || T == MEMRA_TYPE_Q5_1;
    constexpr uint32_t JB = MC_LLM_JB, NT = MC_LLM_NT;
    extern __shared__ __align__(16) unsigned char smraw[];
    mc_llm_stage &S = *(mc_llm_stage *)smraw;
    float *tree = (float *)(smraw + sizeof(mc_llm_stage)); /* [level][element][thread] */
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const uint32_t m0 = (warp & 1) * 32, n0 = (warp >> 1) * 8;
    const uint32_t t0 = blockIdx.x * MC_LLM_BT, r0 = blockIdx.y * MC_LLM_BR;
    const uint32_t nb = w.cols / 32;
    const mc_mma_plan P = mc_mma_plan_make<JB>(nb, ks);
    /* staging: weight row tid % 64 of block slot tid / 64 (threads below 256); x row tid % 64 of
     * half (tid / 64) % 2 of block slot tid / 128 (every thread; half 0's also the meta) */
    const uint32_t srow = tid % MC_LLM_BR, sj = tid / MC_LLM_BR;
    const uint32_t sxr = tid % MC_LLM_BT, sxh = (tid / MC_LLM_BT) & 1u, sxj = tid / (2 * MC_LLM_BT);
    const mc_mma_slot sws = mc_mma_slot_of<JB>(P, sj), sxs = mc_mma_slot_of<JB>(P, sxj);
    const uint32_t grow = r0 + srow < w.rows ? r0 + srow : w.rows - 1;
    const uint32_t gt = t0 + sxr < M ? t0 + sxr : M - 1;
    const char *wd = (const char *)w.data + (size_t)grow * w.stride;
    const char *wa = (const char *)w.aux + (size_t)grow * w.aux_stride;
    const uint32_t d_off = (uint32_t)mc_ll_d_off(T, nb), m_off = (uint32_t)mc_ll_m_off(T, nb);

    /* the next step's loads, held in registers */
    uint4 rq = make_uint4(0, 0, 0, 0), rxh = rq, rxm = rq, rxl = rq;
    uint32_t rh = 0, rd = 0, rm = 0, rwv = 0, rxv = 0;
    int4 rmeta = make_int4(0, 0, 0, 0);
    auto load = [&](const mc_mma_at &a) {
        const uint32_t n = mc_mma_item(P, a, sws, ks, fault);
        rwv = n != ~0u;
        if (rwv) {
            rq = __ldg((const uint4 *)wd + n);
            rd = __ldg((const unsigned short *)(wa + d_off) + n);
            if (HM)
                rm = __ldg((const unsigned short *)(wa + m_off) + n);
            if (HH)
                rh = __ldg((const uint32_t *)wa + n);
        }
        const uint32_t nx = mc_mma_item(P, a, sxs, ks, fault);
        rxv = nx != ~0u;
        if (rxv) {
            const size_t at = (size_t)gt * 2 * nb + 2 * nx + sxh;
            rxh = __ldg(xh + at);
            rxm = __ldg(xm + at);
            rxl = __ldg(xl + at);
            if (sxh == 0)
                rmeta = __ldg(xmeta + (size_t)gt * nb + nx);
        }
    };
    /* the held loads into shared memory, the weights unpacked and their scales as decode reads them */
    auto store = [&]() {
        if (rwv) {
            /* the block's quants as int8 (legacy_layout.h, tested on the host) */
            const uint32_t qs[4] = {rq.x, rq.y, rq.z, rq.w};
            uint32_t qw[8];
            mc_ll_words(T, qs, rh, qw);
            S.w[sj][0][srow] = make_uint4(qw[0], qw[1], qw[2], qw[3]);
            S.w[sj][1][srow] = make_uint4(qw[4], qw[5], qw[6], qw[7]);
            S.ws[sj][srow] = make_float2(__half2float(__ushort_as_half((unsigned short)rd)),
                                         HM ? __half2float(__ushort_as_half((unsigned short)rm)) : 0.0f);
        }
        if (rxv) {
            S.x[sxj][sxh][0][sxr] = rxh;
            S.x[sxj][sxh][1][sxr] = rxm;
            S.x[sxj][sxh][2][sxr] = rxl;
            if (sxh == 0)
                S.xm[sxj][sxr] = rmeta;
        }
    };

    /* the sums: acc the class's, st0 the tree's level 0 (the others in `tree`) */
    float acc[8], st0[8];
#pragma unroll
    for (uint32_t e = 0; e < 8; e++)
        acc[e] = 0.0f, st0[e] = 0.0f;
    uint32_t cn = 0, cp = 0; /* the class position and part the next class sum goes to */
    /* the class's sum into the tree (chunk_kq_mma.cu's push): added to the left subtrees while n's
     * low bits are ones, then kept at that level; after n = 31, the part's tree, added to the
     * parts' sum */
    auto push = [&]() {
        const uint32_t ones = __ffs(~cn) - 1;
        if (ones >= 1)
#pragma unroll
            for (uint32_t e = 0; e < 8; e++)
                acc[e] = st0[e] + acc[e];
#pragma unroll
        for (uint32_t L = 1; L < 5; L++)
            if (ones > L)
#pragma unroll
                for (uint32_t e = 0; e < 8; e++)
                    acc[e] = tree[((L - 1) * 8 + e) * NT + tid] + acc[e];
        if (ones == 0) {
#pragma unroll
            for (uint32_t e = 0; e < 8; e++)
                st0[e] = acc[e];
        } else if (ones < 5) {
#pragma unroll
            for (uint32_t e = 0; e < 8; e++)
                tree[((ones - 1) * 8 + e) * NT + tid] = acc[e];
        } else {
#pragma unroll
            for (uint32_t e = 0; e < 8; e++) {
                float *ds = &tree[(4 * 8 + e) * NT + tid];
                *ds = cp == 0 ? acc[e] : *ds + acc[e];
            }
        }
#pragma unroll
        for (uint32_t e = 0; e < 8; e++)
            acc[e] = 0.0f;
        if (++cn == 32)
            cn = 0, cp++;
    };

    mc_mma_at cur = {0, 0, 0}, nx = {0, 0, 0};
    load(nx);
    mc_mma_at_next(nx, P);
#pragma unroll 1
    for (uint32_t s = 0; s < P.nsteps; s++) {
        uint32_t valid, ends;
        mc_mma_masks<JB>(P, cur, fault, valid, ends);
        mc_mma_at_next(cur, P);
        __syncthreads(); /* the last step's reads of S are done */
        store();
        __syncthreads();
        if (s + 1 < P.nsteps) {
            load(nx); /* in flight while this step computes */
            mc_mma_at_next(nx, P);
        }
        /* slot jj's block into the class's sums */
        auto slot = [&](uint32_t jj) {
            const uint32_t xr = n0 + g;
            uint32_t b[2][3];
#pragma unroll
            for (uint32_t h = 0; h < 2; h++)
#pragma unroll
                for (uint32_t pl = 0; pl < 3; pl++)
                    b[h][pl] = ((const uint32_t *)&S.x[jj][h][pl][xr])[q];
            const int4 mt2[2] = {S.xm[jj][n0 + 2 * q], S.xm[jj][n0 + 2 * q + 1]};
#pragma unroll
            for (uint32_t mt = 0; mt < 2; mt++) {
                const uint32_t r = m0 + 16 * mt + g;
                const uint32_t al0 = ((const uint32_t *)&S.w[jj][0][r])[q];
                const uint32_t al1 = ((const uint32_t *)&S.w[jj][0][r + 8])[q];
                const uint32_t ah0 = ((const uint32_t *)&S.w[jj][1][r])[q];
                const uint32_t ah1 = ((const uint32_t *)&S.w[jj][1][r + 8])[q];
                /* per plane: columns 0-15 from the magic (less o times the plane's sum), then
                 * columns 16-31 on top: the plane's exact dot, offset by 1.5 * 2^23 */
                int dh[4], dm[4], dl[4];
                if (HM) {
                    mc_mma_s8(dh, al0, al1, b[0][0], MC_LLM_MAGIC);
                    mc_mma_s8(dm, al0, al1, b[0][1], MC_LLM_MAGIC);
                    mc_mma_s8(dl, al0, al1, b[0][2], MC_LLM_MAGIC);
                } else {
                    mc_mma_s8c(dh, al0, al1, b[0][0], mt2[0].y, mt2[1].y);
                    mc_mma_s8c(dm, al0, al1, b[0][1], mt2[0].z, mt2[1].z);
                    mc_mma_s8c(dl, al0, al1, b[0][2], mt2[0].w, mt2[1].w);
                }
                mc_mma_s8acc(dh, ah0, ah1, b[1][0]);
                mc_mma_s8acc(dm, ah0, ah1, b[1][1]);
                mc_mma_s8acc(dl, ah0, ah1, b[1][2]);
#pragma unroll
                for (uint32_t e = 0; e < 4; e++) {
                    /* element e: weight row r (+8 for e >= 2), x row n0 + 2q (+1 for odd e).
                     * Decode's (float)dp[0] and (float)(dp[1] * 256 + dp[2]): the first exact,
                     * the second a rounded conversion of an integer below 2^31, which is
                     * fmaf((float)dm, 256, (float)dl) with both exact (one rounding of the exact
                     * sum) */
                    const uint32_t wr = r + 8 * (e >> 1);
                    const int4 mx = mt2[e & 1]; /* the x row's scale (the _1 types: and sum) */
                    const float h0 = __int_as_float(dh[e]) - MC_LLM_MAGIC_F;
                    const float p0 =
                        fmaf(__int_as_float(dm[e]) - MC_LLM_MAGIC_F, 256.0f, __int_as_float(dl[e]) - MC_LLM_MAGIC_F);
                    const float dot = fmaf(h0, 65536.0f, p0);
                    const float sx = __int_as_float(mx.x);
                    const float2 ws = S.ws[jj][wr];
                    acc[mt * 4 + e] = fmaf(dot, ws.x * sx, acc[mt * 4 + e]);
                    if (HM)
                        acc[mt * 4 + e] = fmaf(__int_as_float(mx.y), ws.y * sx, acc[mt * 4 + e]);
                }
            }
        };
#pragma unroll
        for (uint32_t jj = 0; jj < JB; jj++) {
            if (valid >> jj & 1)
                slot(jj);
            if (ends >> jj & 1)
                push();
        }
    }
    float dsum[8];
#pragma unroll
    for (uint32_t e = 0; e < 8; e++)
        dsum[e] = tree[(4 * 8 + e) * NT + tid];
    __syncthreads();
    float *fin = (float *)smraw; /* [x row][weight row] */
#pragma unroll
    for (uint32_t mt = 0; mt < 2; mt++)
#pragma unroll
        for (uint32_t e = 0; e < 4; e++) {
            const uint32_t r = m0 + 16 * mt + g + 8 * (e >> 1), t = n0 + 2 * q + (e & 1);
            fin[t * MC_LLM_FIN_LD + r] = dsum[mt * 4 + e];
        }
    __syncthreads();
    for (uint32_t k = tid; k < MC_LLM_BT * (MC_LLM_BR / MC_GEMV_ROWS); k += MC_LLM_NT) {
        const uint32_t tt = k / (MC_LLM_BR / MC_GEMV_ROWS), gq = k % (MC_LLM_BR / MC_GEMV_ROWS);
        const uint32_t t = t0 + tt, base = r0 + MC_GEMV_ROWS * gq;
        if (t >= M || base >= w.rows)
            continue;
        const float scale = rs[t];
        float d[MC_GEMV_ROWS];
        /* a rounded product, as decode's (its scaling and the store's bias add never fuse) */
#pragma unroll
        for (uint32_t j = 0; j < MC_GEMV_ROWS; j++)
            d[j] = __fmul_rn(fin[tt * MC_LLM_FIN_LD + MC_GEMV_ROWS * gq + j], scale);
        mc_rows_store<GLU>(d, base, w.rows, bias, res ? res + (size_t)t * ldr : NULL, y + (size_t)t * ldy);
    }
}

/* ---- launch ---------------------------------------------------------------------------------- */

/* Decode's column parts (gemv_legacy.cu's mc_ll_ksplit: cuda_common.cuh's mc_ksplit_fill). */
static uint32_t mc_llm_ksplit(uint32_t rows) { return mc_ksplit_fill(rows); }

int mc_chunk_legacy_serves(const mc_config *c, const mc_matrix *w) {
    uint64_t dr, ar;
    return mc_ll_is(w->type) && c->qdot != MC_QDOT_FLOAT &&
           (c->chunk == MC_CHUNK_MMA || c->chunk == MC_CHUNK_MMA_KQ || c->chunk == MC_CHUNK_MMA_OPT ||
            c->chunk == MC_CHUNK_MMA_FAULT) &&
           w->cols <= MC_LL_COLS_MAX && mc_ll_layout(w->type, w->cols, &dr, &ar) && w->stride == dr &&
           w->aux_stride == ar && w->aux;
}

template <uint32_t T>
static cudaError_t mc_llm_launch(int glu, dim3 grid, const mc_matrix *w, const uint4 *xh, const uint4 *xm,
                                 const uint4 *xl, const int4 *meta, const float *rs, const float *bias,
                                 const float *res, uint32_t ldr, float *y, uint32_t ldy, uint32_t M, uint32_t ks,
                                 uint32_t f, cudaStream_t st) {
    static unsigned char ready[3][MC_MAX_DEVICES];
    const int gi = glu == MC_GLU_SILU ? 1 : glu == MC_GLU_GELU ? 2 : 0;
    const void *fn = gi == 1   ? (const void *)chunk_gemv_ll_mma<T, MC_GLU_SILU>
                     : gi == 2 ? (const void *)chunk_gemv_ll_mma<T, MC_GLU_GELU>
                               : (const void *)chunk_gemv_ll_mma<T, MC_GLU_NONE>;
    const cudaError_t e = mc_mma_smem_allow(fn, (int)MC_LLM_SMEM, ready[gi], MC_MAX_DEVICES);
    if (e != cudaSuccess)
        return e;
    switch (glu) {
    case MC_GLU_SILU:
        chunk_gemv_ll_mma<T, MC_GLU_SILU>
            <<<grid, MC_LLM_NT, MC_LLM_SMEM, st>>>(*w, xh, xm, xl, meta, rs, bias, res, ldr, y, ldy, M, ks, f);
        break;
    case MC_GLU_GELU:
        chunk_gemv_ll_mma<T, MC_GLU_GELU>
            <<<grid, MC_LLM_NT, MC_LLM_SMEM, st>>>(*w, xh, xm, xl, meta, rs, bias, res, ldr, y, ldy, M, ks, f);
        break;
    default:
        chunk_gemv_ll_mma<T, MC_GLU_NONE>
            <<<grid, MC_LLM_NT, MC_LLM_SMEM, st>>>(*w, xh, xm, xl, meta, rs, bias, res, ldr, y, ldy, M, ks, f);
        break;
    }
    return cudaGetLastError();
}

cudaError_t mc_chunk_legacy_mma(uint32_t variant, const mc_matrix *w, const float *x, uint32_t ldx, const float *norm_w,
                                float eps, const float *bias, const float *res, uint32_t ldr, float *y, uint32_t ldy,
                                int glu, uint32_t M, void *scratch, cudaStream_t st) {
    uint64_t dr, ar;
    if (!mc_ll_layout(w->type, w->cols, &dr, &ar) || w->stride != dr || w->aux_stride != ar || !w->aux ||
        w->cols > MC_LL_COLS_MAX || (glu && w->rows % 2))
        return cudaErrorInvalidValue;
    if (M == 0 || w->rows == 0)
        return cudaSuccess;
    /* the scratch: planes hi, mid, lo (M x cols / 16 uint4 each) and the blocks' meta (M x cols /
     * 32 int4): M x cols x 3.5 bytes, within mc_gemv_chunk_scratch_bytes' x' (M x cols x 4), then
     * the rows' 1/rms where that puts them */
    const uint32_t nch = w->cols / 16;
    char *base = (char *)scratch;
    uint4 *xh = (uint4 *)base, *xm = xh + (size_t)M * nch, *xl = xm + (size_t)M * nch;
    int4 *meta = (int4 *)(xl + (size_t)M * nch);
    float *rs = (float *)(base + ((uint64_t)M * w->cols * 4 + 255) / 256 * 256);
#define MC_LLM_PREP_RUN(O, H)                                                                                          \
    chunk_ll_quant<O, H><<<M, MC_LLM_PREP, 0, st>>>(x, ldx, norm_w, w->cols, eps, xh, xm, xl, meta, rs)
    switch (w->type) {
    case MEMRA_TYPE_Q4_0: MC_LLM_PREP_RUN(8, false); break;
    case MEMRA_TYPE_Q5_0: MC_LLM_PREP_RUN(16, false); break;
    default: MC_LLM_PREP_RUN(0, true); break;
    }
#undef MC_LLM_PREP_RUN
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    const uint32_t ks = mc_llm_ksplit(w->rows), f = variant == MC_CHUNK_MMA_FAULT ? 1u : 0u;
    const dim3 grid((M + MC_LLM_BT - 1) / MC_LLM_BT, (w->rows + MC_LLM_BR - 1) / MC_LLM_BR);
    switch (w->type) {
    case MEMRA_TYPE_Q4_0:
        return mc_llm_launch<MEMRA_TYPE_Q4_0>(glu, grid, w, xh, xm, xl, meta, rs, bias, res, ldr, y, ldy, M, ks, f, st);
    case MEMRA_TYPE_Q4_1:
        return mc_llm_launch<MEMRA_TYPE_Q4_1>(glu, grid, w, xh, xm, xl, meta, rs, bias, res, ldr, y, ldy, M, ks, f, st);
    case MEMRA_TYPE_Q5_0:
        return mc_llm_launch<MEMRA_TYPE_Q5_0>(glu, grid, w, xh, xm, xl, meta, rs, bias, res, ldr, y, ldy, M, ks, f, st);
    default:
        return mc_llm_launch<MEMRA_TYPE_Q5_1>(glu, grid, w, xh, xm, xl, meta, rs, bias, res, ldr, y, ldy, M, ks, f, st);
    }
}

#define MC_LLM_FAM(T)                                                                                                  \
    f == (const void *)chunk_gemv_ll_mma<T, MC_GLU_NONE> || f == (const void *)chunk_gemv_ll_mma<T, MC_GLU_SILU> ||    \
        f == (const void *)chunk_gemv_ll_mma<T, MC_GLU_GELU>
const char *mc_chunk_legacy_family(const void *f) {
    if (MC_LLM_FAM(MEMRA_TYPE_Q4_0) || MC_LLM_FAM(MEMRA_TYPE_Q4_1) || MC_LLM_FAM(MEMRA_TYPE_Q5_0) ||
        MC_LLM_FAM(MEMRA_TYPE_Q5_1))
        return "chunk_gemv";
    if (f == (const void *)chunk_ll_quant<8, false> || f == (const void *)chunk_ll_quant<16, false> ||
        f == (const void *)chunk_ll_quant<0, true>)
        return "chunk_prep";
    return NULL;
}
