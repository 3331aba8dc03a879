/* chunk_kq_mma.cu: the Q4_K, Q5_K and Q6_K GEMVs of a prefill chunk on int8 tensor cores
 * (chunk=mma, the default, and its old name mma-kq; qdot=auto), each output element the bits of decode's gemv_kquant.cu under qdot=auto.
 *
 * Decode's sequence for output row r of x row t (gemv_kquant_body): x' = x * norm_w quantized per
 * 16-column chunk c into the int8 planes hi, mid, lo with the scale s_c, the float sum S_c of the
 * chunk's x' (Q4_K, Q5_K) or the plane sums (Q6_K) (chunk_kq_quant below: the same threads, chunks
 * and block sum as decode's prologue). The row is cut into units of 32 weights (kquant_layout.h): unit n's
 * low nibbles dot chunk clo, its high ones chunk chi. Over column part p of KS (mc_kq_ksplit's
 * formula, a function of the row count), lane l takes the units 32 p + l, then every 32 KS-th (its
 * "class"), and per unit: the six exact integer dots (three planes, two halves; Q6_K less its
 * offset of 32 through the plane sums), D = fmaf((float)dh, 2^16, (float)(256 dm + dl)) * s, then
 * Q4_K/Q5_K: acc = fmaf(-dmin, fmaf(m_hi, S_hi, m_lo * S_lo), fmaf(d, fmaf(sc_hi, D_hi, sc_lo D_lo), acc)),
 * Q6_K: acc = fmaf(d, fmaf(sc_hi, D_hi, sc_lo D_lo), acc); then the xor tree over the lanes, the
 * parts in order, times 1/rms, mc_rows_store's epilogue.
 *
 * Here the weights of a unit are unpacked to int8 (nibbles, 5 or 6 bits: all non-negative, so s8
 * holds them) while staging, and one mma.sync.m16n8k16.s32.s8.s8.s32 per plane and half gives the
 * integer dots of 16 weight rows by 8 x rows, exactly (|dot| <= 16 * 63 * 128). Its accumulator
 * input is the integer 0x4B400000 (Q6_K: less 32 times the plane's sum, the offset, which the prep
 * puts in the chunk's meta), so each dot's float is its bits less 1.5 * 2^23 (chunk_mma.cu), no
 * conversion. The float chain above then runs per (row, x row, unit) on the CUDA cores, in
 * decode's expressions, each class's units in order, the classes in the order of decode's tree
 * (chunk_mma.cu's stack of partial sums, levels 1 to 4 and the parts' sum in shared memory).
 * Block: 512 threads (16 warps as 2 x 8 of 32 weight rows x 8 x rows), a tile of 64 weight rows x
 * 64 x rows; a step stages MC_KQM_JB unit slots (mc_mma_plan: a class's units, or two or four
 * classes' where classes are short) in shared memory, the next step's loads held in registers
 * while this one computes.
 *
 * Per call: the prep reads x (M x cols floats) and writes the planes (M x cols x 4 bytes); the main
 * kernel reads the weights (the matrix's bytes) once per 64 x rows (L2 serves the repeats) and the
 * planes once per 64 weight rows. The check program memra_cuda_check_chunk_kq compares every row
 * with decode's GEMV, bit for bit (negative control: MC_CHUNK_MMA_FAULT, the classes in lane
 * order). */
#include "chunk_kq.h"
#include "kquant_dot.cuh"
#include "kquant_layout.h"
#include "mma_s8.cuh"
#include "q8x_quant.h"

#define MC_KQM_BR 64u /* weight rows of a block's tile */
#define MC_KQM_BT 64u /* x rows of the default tile (512 threads, one block an SM) */
#define MC_KQM_JB 4u  /* unit slots a step stages (mc_mma_plan) */
#define MC_KQM_FIN_LD (MC_KQM_BR + 1u)
/* MC_CHUNK_MMA_OPT (chunk=mma-opt) runs the kernel with fewer shared loads and no test after
 * each slot (OPT: the fragments by ldmatrix, the class ends placed when compiled). */
#define MC_KQM_PREP 512u        /* the prep's threads: decode's block (MC_KQ_WARPS warps) */
#define MC_KQM_MAGIC 0x4B400000 /* the bits of 1.5 * 2^23 (chunk_mma.cu's MC_MMA_MAGIC) */
#define MC_KQM_MAGIC_F 12582912.0f
#define MC_KQM_TREE 5u /* the tree's levels 1 to 4 and the parts' sum, kept in shared memory */

/* A block's stage for a tile of BT x rows (8 BT threads: 2 x BT / 8 warps). */
template <uint32_t BT> struct mc_kqm_stage {
    uint4 w[MC_KQM_JB][2][MC_KQM_BR];   /* the units unpacked: low nibbles' 16 bytes, high nibbles' */
    float4 ws[MC_KQM_JB][MC_KQM_BR][2]; /* a row's d, dmin, sc_lo, sc_hi; m_lo, m_hi (Q6_K: d, -, sc_lo, sc_hi) */
    uint4 x[MC_KQM_JB][2][3][BT];       /* x chunks clo, chi: planes hi, mid, lo */
    int4 xm[MC_KQM_JB][2][BT];          /* their meta (chunk_kq_quant) */
};
/* the dynamic shared memory: the stage, then the tree's levels kept there ([level][element][thread]) */
template <uint32_t BT> constexpr size_t mc_kqm_smem(void) {
    return sizeof(mc_kqm_stage<BT>) + sizeof(float) * MC_KQM_TREE * 8 * 8 * BT;
}

/* ---- the prep: decode's prologue per row of x ------------------------------------------------ */

/* One block of 512 threads per row of x: gemv_kquant_body's quantization of x' under qdot=auto
 * (the same statements: chunk c by thread c mod 512, its sum of squares, the block sum of the 16
 * warps in order), into global memory: planes xh, xm, xl and meta per chunk, rs the row's 1/rms. */
template <bool Q6>
__global__ void __launch_bounds__(MC_KQM_PREP)
    chunk_kq_quant(const float *x, uint32_t ldx, const float *norm_w, uint32_t cols, float eps, uint4 *xh, uint4 *xm,
                   uint4 *xl, int4 *meta, float *rs) {
    __shared__ float bred[MC_KQM_PREP / 32];
    const uint32_t nch = cols / 16, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, t = blockIdx.x;
    const float *xr = x + (size_t)t * ldx;
    xh += (size_t)t * nch, xm += (size_t)t * nch, xl += (size_t)t * nch, meta += (size_t)t * nch;
    float ss = 0.0f;
    for (uint32_t c = tid; c < nch; c += blockDim.x) {
        float v[16];
        mc_q8x_load16<-1>(xr, norm_w, (size_t)c * 16, v, ss);
        const mc_kq_chunk k = mc_kq_quant16(v, c, xh, xm, xl); /* decode's staging (kquant_dot.cuh) */
        /* Q6_K: the accumulator inputs of the three planes' MMAs, the magic less 32 times the plane's
         * sum (the weights' offset of 32); Q4_K, Q5_K: the chunk's float sum */
        const int sc = __float_as_int(mc_q8x_scale(k.amax, k.finite));
        meta[c] = Q6 ? make_int4(sc, MC_KQM_MAGIC - 32 * k.sh, MC_KQM_MAGIC - 32 * k.sm, MC_KQM_MAGIC - 32 * k.sl)
                     : make_int4(sc, __float_as_int(k.sum), 0, 0);
    }
    if (norm_w) {
        ss = mc_warp_sum(ss);
        if (lane == 0)
            bred[warp] = ss;
    }
    __syncthreads();
    if (tid == 0) {
        float rscale = 1.0f;
        if (norm_w) { /* the block sum: the warps in order */
            float s = 0.0f;
#pragma unroll
            for (uint32_t k = 0; k < MC_KQM_PREP / 32; k++)
                s += bred[k];
            rscale = 1.0f / sqrtf(s / (float)cols + eps);
        }
        rs[t] = rscale;
    }
}

template <uint32_t T, int GLU, uint32_t BT, uint32_t MINB, bool OPT>
__global__ void __launch_bounds__(8 * BT, MINB)
    chunk_gemv_kq_mma(const mc_matrix w, const uint4 *xh, const uint4 *xm, const uint4 *xl, const int4 *xmeta,
                      const float *rs, const float *bias, const float *res, uint32_t ldr, float *y, uint32_t ldy,
                      uint32_t M, uint32_t ks, uint32_t fault) {
    constexpr bool Q6 = T == MEMRA_TYPE_Q6_K;
    constexpr uint32_t JB = MC_KQM_JB, NT = 8 * BT;
    typedef mc_kqm_stage<BT> stage;
    static_assert(sizeof(float) * BT * MC_KQM_FIN_LD <= sizeof(stage), "the final tile fits");
    static_assert(JB * 2 * BT == NT && JB * MC_KQM_BR <= NT, "a copy a thread");
    extern __shared__ __align__(16) unsigned char smraw[];
    stage &S = *(stage *)smraw;
    float *tree = (float *)(smraw + sizeof(stage)); /* [level][element][thread] */
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const uint32_t m0 = (warp & 1) * 32, n0 = (warp >> 1) * 8;
    const uint32_t t0 = blockIdx.x * BT, r0 = blockIdx.y * MC_KQM_BR;
    const uint32_t nch = w.cols / 16, nu = w.cols / 32, nb = w.cols / MEMRA_QK_K;
    const mc_mma_plan P = mc_mma_plan_make<JB>(nu, ks);
    /* staging: weight row tid % 64 of unit slot tid / 64 (threads below 256); x row tid % BT of
     * half (tid / BT) % 2 of unit slot tid / (2 BT) (every thread) */
    const uint32_t srow = tid % MC_KQM_BR, sj = tid / MC_KQM_BR;
    const uint32_t sxr = tid % BT, sxh = (tid / BT) & 1u, sxj = tid / (2 * BT);
    const mc_mma_slot sws = mc_mma_slot_of<JB>(P, sj), sxs = mc_mma_slot_of<JB>(P, sxj);
    const uint32_t grow = r0 + srow < w.rows ? r0 + srow : w.rows - 1;
    const uint32_t gt = t0 + sxr < M ? t0 + sxr : M - 1;
    const char *wd = (const char *)w.data + (size_t)grow * w.stride;
    const char *wa = (const char *)w.aux + (size_t)grow * w.aux_stride;

    /* the next step's loads, held in registers */
    uint4 rq = make_uint4(0, 0, 0, 0), ra = make_uint4(0, 0, 0, 0), rxh = rq, rxm = rq, rxl = rq;
    uint2 rh = make_uint2(0, 0);
    int4 rmeta = make_int4(0, 0, 0, 0);
    uint32_t rc4 = 0, rwv = 0, rxv = 0;
    auto load = [&](const mc_mma_at &a) {
        const uint32_t n = mc_mma_item(P, a, sws, ks, fault);
        rwv = n != ~0u;
        if (rwv) {
            rq = __ldg((const uint4 *)wd + n);
            if (Q6) {
                rh = __ldg((const uint2 *)(wd + (size_t)nb * 128) + n);
                ra.x = __ldg((const unsigned short *)wa + n);
                ra.y = __ldg((const unsigned short *)(wa + (size_t)nb * 16) + n / 8);
            } else {
                ra = __ldg((const uint4 *)wa + n / 8);
                if (T == MEMRA_TYPE_Q5_K)
                    rh.x = __ldg((const uint32_t *)(wd + (size_t)nb * 128) + n);
            }
            rc4 = (n >> 1) & 3;
        }
        const uint32_t nx = mc_mma_item(P, a, sxs, ks, fault);
        rxv = nx != ~0u;
        if (rxv) {
            const size_t at = (size_t)gt * nch + mc_kq_clo<T>(nx) + (sxh ? (Q6 ? 4 : 2) : 0); /* clo or chi */
            rxh = __ldg(xh + at);
            rxm = __ldg(xm + at);
            rxl = __ldg(xl + at);
            rmeta = __ldg(xmeta + at);
        }
    };
    /* the held loads into shared memory, the weights unpacked and their scales as decode reads them */
    auto store = [&]() {
        if (rwv) {
            uint32_t qw[8];
            mc_kq_words<T>(mc_kq_unit{rq, make_uint4(0, 0, 0, 0), rh}, qw);
            S.w[sj][0][srow] = make_uint4(qw[0], qw[1], qw[2], qw[3]);
            S.w[sj][1][srow] = make_uint4(qw[4], qw[5], qw[6], qw[7]);
            if (Q6) {
                S.ws[sj][srow][0] = make_float4(__half2float(__ushort_as_half((unsigned short)ra.y)), 0.0f,
                                                (float)(int8_t)(ra.x & 0xFF), (float)(int8_t)(ra.x >> 8));
            } else {
                uint32_t sc, m;
                mc_kq_scales_k4(ra, rc4, sc, m);
                S.ws[sj][srow][0] = make_float4(__half2float(__ushort_as_half((unsigned short)(ra.x & 0xFFFF))),
                                                __half2float(__ushort_as_half((unsigned short)(ra.x >> 16))),
                                                (float)(sc & 0xFF), (float)(sc >> 8));
                S.ws[sj][srow][1] = make_float4((float)(m & 0xFF), (float)(m >> 8), 0.0f, 0.0f);
            }
        }
        if (rxv) {
            S.x[sxj][sxh][0][sxr] = rxh;
            S.x[sxj][sxh][1][sxr] = rxm;
            S.x[sxj][sxh][2][sxr] = rxl;
            S.xm[sxj][sxh][sxr] = rmeta;
        }
    };

    /* the sums: acc the class's, st0 the tree's level 0 (the others in `tree`) */
    float acc[8], st0[8];
#pragma unroll
    for (uint32_t e = 0; e < 8; e++)
        acc[e] = 0.0f, st0[e] = 0.0f;
    uint32_t cn = 0, cp = 0; /* the class position and part the next class sum goes to */
    /* the class's sum into the tree (chunk_mma.cu): added to the left subtrees while n's low bits
     * are ones, then kept at that level; after n = 31, the part's tree, added to the parts' sum */
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
        /* slot jj's unit into the class's sums */
        auto slot = [&](uint32_t jj) {
            const uint32_t xr = n0 + g;
            uint32_t b[2][3], AL[4], AH[4];
            if constexpr (OPT) { /* the fragments by ldmatrix (mma_s8.cuh's mc_ldsm4): the same words */
                /* B: lanes 8 i .. 8 i + 7 give the rows of matrix i, (half, plane) (0, 0), (0, 1),
                 * (0, 2), (1, 0), then (1, 1), (1, 2) and (1, 2) twice more */
                const uint32_t bi = lane >> 3, bh0 = bi == 3 ? 1u : 0u, bp0 = bi == 3 ? 0u : bi;
                const uint32_t bp1 = bi == 0 ? 1u : 2u;
                uint32_t B0[4], B1[4];
                mc_ldsm4(AL, &S.w[jj][0][m0 + lane]);
                mc_ldsm4(AH, &S.w[jj][1][m0 + lane]);
                mc_ldsm4(B0, &S.x[jj][bh0][bp0][n0 + (lane & 7)]);
                mc_ldsm4(B1, &S.x[jj][1][bp1][n0 + (lane & 7)]);
                b[0][0] = B0[0], b[0][1] = B0[1], b[0][2] = B0[2], b[1][0] = B0[3], b[1][1] = B1[0], b[1][2] = B1[1];
            } else {
#pragma unroll
                for (uint32_t h = 0; h < 2; h++)
#pragma unroll
                    for (uint32_t pl = 0; pl < 3; pl++)
                        b[h][pl] = ((const uint32_t *)&S.x[jj][h][pl][xr])[q];
            }
            const int4 mA[2] = {S.xm[jj][0][n0 + 2 * q], S.xm[jj][0][n0 + 2 * q + 1]};
            const int4 mB[2] = {S.xm[jj][1][n0 + 2 * q], S.xm[jj][1][n0 + 2 * q + 1]};
#pragma unroll
            for (uint32_t mt = 0; mt < 2; mt++) {
                const uint32_t r = m0 + 16 * mt + g;
                const uint32_t al0 = OPT ? AL[2 * mt] : ((const uint32_t *)&S.w[jj][0][r])[q];
                const uint32_t al1 = OPT ? AL[2 * mt + 1] : ((const uint32_t *)&S.w[jj][0][r + 8])[q];
                const uint32_t ah0 = OPT ? AH[2 * mt] : ((const uint32_t *)&S.w[jj][1][r])[q];
                const uint32_t ah1 = OPT ? AH[2 * mt + 1] : ((const uint32_t *)&S.w[jj][1][r + 8])[q];
                /* the accumulator inputs: the magic (Q6_K: less 32 times the plane's sum, the
                 * offset of 32), so a dot's float is its bits less 1.5 * 2^23, exactly */
                int dh0[4], dm0[4], dl0[4], dh1[4], dm1[4], dl1[4];
                if (Q6) {
                    mc_mma_s8c(dh0, al0, al1, b[0][0], mA[0].y, mA[1].y);
                    mc_mma_s8c(dm0, al0, al1, b[0][1], mA[0].z, mA[1].z);
                    mc_mma_s8c(dl0, al0, al1, b[0][2], mA[0].w, mA[1].w);
                    mc_mma_s8c(dh1, ah0, ah1, b[1][0], mB[0].y, mB[1].y);
                    mc_mma_s8c(dm1, ah0, ah1, b[1][1], mB[0].z, mB[1].z);
                    mc_mma_s8c(dl1, ah0, ah1, b[1][2], mB[0].w, mB[1].w);
                } else {
                    mc_mma_s8(dh0, al0, al1, b[0][0], MC_KQM_MAGIC);
                    mc_mma_s8(dm0, al0, al1, b[0][1], MC_KQM_MAGIC);
                    mc_mma_s8(dl0, al0, al1, b[0][2], MC_KQM_MAGIC);
                    mc_mma_s8(dh1, ah0, ah1, b[1][0], MC_KQM_MAGIC);
                    mc_mma_s8(dm1, ah0, ah1, b[1][1], MC_KQM_MAGIC);
                    mc_mma_s8(dl1, ah0, ah1, b[1][2], MC_KQM_MAGIC);
                }
#pragma unroll
                for (uint32_t e = 0; e < 4; e++) {
                    /* element e: weight row r (+8 for e >= 2), x row n0 + 2q (+1 for odd e).
                     * Decode's (float)h and (float)(256 dm + dl) (Q6_K: each less its offset):
                     * the first exact, the second a rounded conversion of an integer below
                     * 2^27, which is fmaf((float)dm, 256, (float)dl) with both exact (one
                     * rounding of the exact sum); the offset 32 (256 sm + sl) splits as 256
                     * (32 sm) + 32 sl, exactly */
                    const uint32_t wr = r + 8 * (e >> 1);
                    const int4 ma = mA[e & 1], mb = mB[e & 1];
                    const float h0 = __int_as_float(dh0[e]) - MC_KQM_MAGIC_F;
                    const float p0 =
                        fmaf(__int_as_float(dm0[e]) - MC_KQM_MAGIC_F, 256.0f, __int_as_float(dl0[e]) - MC_KQM_MAGIC_F);
                    const float h1 = __int_as_float(dh1[e]) - MC_KQM_MAGIC_F;
                    const float p1 =
                        fmaf(__int_as_float(dm1[e]) - MC_KQM_MAGIC_F, 256.0f, __int_as_float(dl1[e]) - MC_KQM_MAGIC_F);
                    const float D0 = fmaf(h0, 65536.0f, p0) * __int_as_float(ma.x);
                    const float D1 = fmaf(h1, 65536.0f, p1) * __int_as_float(mb.x);
                    const float4 ws = S.ws[jj][wr][0];
                    const float u = fmaf(ws.w, D1, ws.z * D0);
                    if (Q6) {
                        acc[mt * 4 + e] = fmaf(ws.x, u, acc[mt * 4 + e]);
                    } else {
                        const float2 wm = *(const float2 *)&S.ws[jj][wr][1];
                        const float v = fmaf(wm.y, __int_as_float(mb.y), wm.x * __int_as_float(ma.y));
                        acc[mt * 4 + e] = fmaf(-ws.y, v, fmaf(ws.x, u, acc[mt * 4 + e]));
                    }
                }
            }
        };
        /* OPT, every slot with a unit: the class ends where the plan puts them (chunk_mma.cu's full
         * step: classes of JW slots, each ending in this step where JW < JB, the one class ending
         * after the last slot or not at all where JW = JB), known when compiled */
        auto full = [&](auto jwc) {
            constexpr uint32_t JW = decltype(jwc)::value;
#pragma unroll
            for (uint32_t jj = 0; jj < JB; jj++) {
                slot(jj);
                if (jj % JW == JW - 1 && (JW < JB || ends != 0))
                    push();
            }
        };
        if constexpr (OPT) {
            if (valid == (1u << JB) - 1 && P.jw == JB) {
                full(mc_mma_uconst<JB>());
            } else if (valid == (1u << JB) - 1 && P.jw == JB / 2) {
                full(mc_mma_uconst<JB / 2>());
            } else {
#pragma unroll
                for (uint32_t jj = 0; jj < JB; jj++) {
                    if (valid >> jj & 1)
                        slot(jj);
                    if (ends >> jj & 1)
                        push();
                }
            }
        } else {
#pragma unroll
            for (uint32_t jj = 0; jj < JB; jj++) {
                if (valid >> jj & 1)
                    slot(jj);
                if (ends >> jj & 1)
                    push();
            }
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
            fin[t * MC_KQM_FIN_LD + r] = dsum[mt * 4 + e];
        }
    __syncthreads();
    for (uint32_t k = tid; k < BT * (MC_KQM_BR / MC_GEMV_ROWS); k += NT) {
        const uint32_t tt = k / (MC_KQM_BR / MC_GEMV_ROWS), gq = k % (MC_KQM_BR / MC_GEMV_ROWS);
        const uint32_t t = t0 + tt, base = r0 + MC_GEMV_ROWS * gq;
        if (t >= M || base >= w.rows)
            continue;
        const float scale = rs[t];
        float d[MC_GEMV_ROWS];
        /* a rounded product, as decode's (its scaling and the store's bias add never fuse) */
#pragma unroll
        for (uint32_t j = 0; j < MC_GEMV_ROWS; j++)
            d[j] = __fmul_rn(fin[tt * MC_KQM_FIN_LD + MC_GEMV_ROWS * gq + j], scale);
        mc_rows_store<GLU>(d, base, w.rows, bias, res ? res + (size_t)t * ldr : NULL, y + (size_t)t * ldy);
    }
}

/* ---- launch ---------------------------------------------------------------------------------- */

/* Columns whose x' decode's kernel stages in its shared memory on any device we serve (its limit
 * is the device's opt-in less 2 KB, at most 228 KB): past this the chunk runs decode row by row. */
#define MC_KQM_MAX_COLS 51200u

int mc_chunk_kq_serves(const mc_config *c, const mc_matrix *w) {
    uint64_t dr, ar;
    return (w->type == MEMRA_TYPE_Q4_K || w->type == MEMRA_TYPE_Q5_K || w->type == MEMRA_TYPE_Q6_K) &&
           c->qdot != MC_QDOT_FLOAT &&
           (c->chunk == MC_CHUNK_MMA || c->chunk == MC_CHUNK_MMA_KQ || c->chunk == MC_CHUNK_MMA_FAULT ||
            c->chunk == MC_CHUNK_MMA_OPT) &&
           w->cols <= MC_KQM_MAX_COLS && mc_kq_layout(w->type, w->cols, &dr, &ar) && w->stride == dr &&
           w->aux_stride == ar && w->aux;
}

template <uint32_t T, uint32_t BT, uint32_t MINB, bool OPT>
static cudaError_t mc_kqm_launch(int glu, const mc_matrix *w, const uint4 *xh, const uint4 *xm,
                                 const uint4 *xl, const int4 *meta, const float *rs, const float *bias,
                                 const float *res, uint32_t ldr, float *y, uint32_t ldy, uint32_t M, uint32_t ks,
                                 uint32_t f, cudaStream_t st) {
    static unsigned char ready[3][MC_MAX_DEVICES];
    constexpr size_t smem = mc_kqm_smem<BT>();
    const dim3 grid((M + BT - 1) / BT, (w->rows + MC_KQM_BR - 1) / MC_KQM_BR);
    const int gi = glu == MC_GLU_SILU ? 1 : glu == MC_GLU_GELU ? 2 : 0;
    const void *fn = gi == 1   ? (const void *)chunk_gemv_kq_mma<T, MC_GLU_SILU, BT, MINB, OPT>
                     : gi == 2 ? (const void *)chunk_gemv_kq_mma<T, MC_GLU_GELU, BT, MINB, OPT>
                               : (const void *)chunk_gemv_kq_mma<T, MC_GLU_NONE, BT, MINB, OPT>;
    const cudaError_t e = mc_mma_smem_allow(fn, (int)smem, ready[gi], MC_MAX_DEVICES);
    if (e != cudaSuccess)
        return e;
    switch (glu) {
    case MC_GLU_SILU:
        chunk_gemv_kq_mma<T, MC_GLU_SILU, BT, MINB, OPT>
            <<<grid, 8 * BT, smem, st>>>(*w, xh, xm, xl, meta, rs, bias, res, ldr, y, ldy, M, ks, f);
        break;
    case MC_GLU_GELU:
        chunk_gemv_kq_mma<T, MC_GLU_GELU, BT, MINB, OPT>
            <<<grid, 8 * BT, smem, st>>>(*w, xh, xm, xl, meta, rs, bias, res, ldr, y, ldy, M, ks, f);
        break;
    default:
        chunk_gemv_kq_mma<T, MC_GLU_NONE, BT, MINB, OPT>
            <<<grid, 8 * BT, smem, st>>>(*w, xh, xm, xl, meta, rs, bias, res, ldr, y, ldy, M, ks, f);
        break;
    }
    return cudaGetLastError();
}

cudaError_t mc_chunk_kq_mma(uint32_t variant, const mc_matrix *w, const float *x, uint32_t ldx, const float *norm_w,
                            float eps, const float *bias, const float *res, uint32_t ldr, float *y, uint32_t ldy,
                            int glu, uint32_t M, void *scratch, cudaStream_t st) {
    uint64_t dr, ar;
    if (!mc_kq_layout(w->type, w->cols, &dr, &ar) || w->stride != dr || w->aux_stride != ar || !w->aux ||
        (glu && w->rows % 2))
        return cudaErrorInvalidValue;
    if (M == 0 || w->rows == 0)
        return cudaSuccess;
    /* the scratch: planes hi, mid, lo and meta (M x cols / 16 each, 64 bytes a chunk: M x cols x 4
     * bytes, mc_gemv_chunk_scratch_bytes' x'), then the rows' 1/rms */
    const uint32_t nch = w->cols / 16;
    char *base = (char *)scratch;
    uint4 *xh = (uint4 *)base, *xm = xh + (size_t)M * nch, *xl = xm + (size_t)M * nch;
    int4 *meta = (int4 *)(xl + (size_t)M * nch);
    float *rs = (float *)(base + ((uint64_t)M * w->cols * 4 + 255) / 256 * 256);
    if (w->type == MEMRA_TYPE_Q6_K)
        chunk_kq_quant<true><<<M, MC_KQM_PREP, 0, st>>>(x, ldx, norm_w, w->cols, eps, xh, xm, xl, meta, rs);
    else
        chunk_kq_quant<false><<<M, MC_KQM_PREP, 0, st>>>(x, ldx, norm_w, w->cols, eps, xh, xm, xl, meta, rs);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    const uint32_t ks = mc_kq_ksplit(w->rows), f = variant == MC_CHUNK_MMA_FAULT ? 1u : 0u;
#define MC_KQM_CALL(TY, O)                                                                                             \
    mc_kqm_launch<TY, MC_KQM_BT, 1, O>(glu, w, xh, xm, xl, meta, rs, bias, res, ldr, y, ldy, M, ks, f, st)
#define MC_KQM_TYPES(O)                                                                                                \
    switch (w->type) {                                                                                                 \
    case MEMRA_TYPE_Q4_K: return MC_KQM_CALL(MEMRA_TYPE_Q4_K, O);                                                      \
    case MEMRA_TYPE_Q5_K: return MC_KQM_CALL(MEMRA_TYPE_Q5_K, O);                                                      \
    default: return MC_KQM_CALL(MEMRA_TYPE_Q6_K, O);                                                                   \
    }
    if (variant == MC_CHUNK_MMA_OPT)
        MC_KQM_TYPES(true)
    MC_KQM_TYPES(false)
#undef MC_KQM_TYPES
#undef MC_KQM_CALL
}

#define MC_KQM_FAM1(T, O)                                                                                              \
    f == (const void *)chunk_gemv_kq_mma<T, MC_GLU_NONE, MC_KQM_BT, 1, O> ||                                           \
        f == (const void *)chunk_gemv_kq_mma<T, MC_GLU_SILU, MC_KQM_BT, 1, O> ||                                       \
        f == (const void *)chunk_gemv_kq_mma<T, MC_GLU_GELU, MC_KQM_BT, 1, O>
#define MC_KQM_FAM(O) MC_KQM_FAM1(MEMRA_TYPE_Q4_K, O) || MC_KQM_FAM1(MEMRA_TYPE_Q5_K, O) || MC_KQM_FAM1(MEMRA_TYPE_Q6_K, O)
const char *mc_chunk_kq_family(const void *f) {
    if (MC_KQM_FAM(false) || MC_KQM_FAM(true))
        return "chunk_gemv";
    if (f == (const void *)chunk_kq_quant<true> || f == (const void *)chunk_kq_quant<false>)
        return "chunk_prep";
    return NULL;
}
