/* gemv_kquant.cu: the Q4_K, Q5_K and Q6_K GEMVs (gemv_quant.h; the embedding lookup is token.cu's), on the
 * layout of kquant_layout.h (the file's bytes, split so every load is an aligned vector).
 *
 * Decode at batch 1 reads each weight once, at ~4.5 to ~6.6 bits: the kernel must sustain ~3 TB/s
 * of weight bytes, so what counts is the instructions per weight. Each block (16 warps) first
 * stages x' = x * norm_w (the RMSNorm's 1/rms applied to the finished dots, as gemv.cu does; its
 * sum of squares a block sum of fixed shape) in shared memory, per 16-column chunk:
 *  - qdot=auto: x' quantized as gemv_q8.cu does (q8x_quant.h: 23 bits relative to the chunk's
 *    largest element, three int8 planes), with the chunk's scale, the float sum of its x' (for
 *    the mins of Q4_K and Q5_K) and the plane sums times 32 (for Q6_K's offset of 32). A unit of 16
 *    quant bytes (32 weights: two half sub-blocks of 16) then costs per row 24 dp4a on the
 *    unpacked nibbles, exact in integers, and a few float operations for its scales:
 *    Q4_K/Q5_K: acc += d (sc_lo D_lo s_lo + sc_hi D_hi s_hi) - dmin (m_lo S_lo + m_hi S_hi),
 *    Q6_K: acc += d (sc_lo D_lo s_lo + sc_hi D_hi s_hi), D the chunk's integer dot as a float,
 *    s its scale, S its sum. NMSE against the float path: stated in bench/gpu/NOTES.md.
 *  - qdot=float: x' as floats; every weight dequantized exactly as memra/quant.h does (d * sc
 *    then times q minus dmin * m; Q6_K: d * sc then times q - 32), each product rounded once,
 *    and dotted with one fmaf per weight in element order within the unit.
 * A warp takes 4 rows over column part `part` of KS (units 32 part + lane, then every 32 KS-th;
 * a warp's units are one coalesced 512-byte line), the parts of a row group added in order, each
 * block a contiguous, balanced range of row groups, its warps' loads flattened over row groups so
 * the next row group's first units stream while the current one's last are summed (gemv_q8.cu's
 * structure). The bits depend on the shapes and qdot alone (not on the grid, the device or
 * qblock). qblock=auto (issue 27; not the default, measured slower on gemma3-270m): under
 * qdot=auto, narrow matrices whose 16-warp grid leaves multiprocessors idle run the same body in
 * blocks of 4 warps (gemv_kquant_small, up to 4 a multiprocessor): KS and the lanes' units unchanged, x' staged per chunk by the same code, the
 * sum of squares in the 16-warp order (each thread plays 4 threads of it): the same bits.
 * qblock=16r (the default since issue 27's narrow session) and 16xr: on matrices of at most 2048
 * columns, split into column parts KS > 1 (gemma3-270m's wo and down: 32 and 64 units a row at KS
 * 4, so two or three of a row group's warps had no unit), the KS warps of a row group split its
 * rows instead (gemv_kquant_rows, below): the same sums in the same order, the same bits.
 *
 * Per call (one matrix a token): reads rows x the row's data and aux bytes (the file's bytes of
 * the matrix; streamed), x and norm_w (cols floats, once per block), bias and residual (rows
 * floats); writes y (rows floats; rows/2 with a GLU). */
#include "argmax_tail.cuh"
#include "cuda_common.cuh"
#include "gemv_quant.h"
#include "kquant_dot.cuh"
#include "kquant_layout.h"
#include "post_norm.cuh"

MC_DYNAMIC_SMEM_ANCHOR(mc_smem_anchor_kquant)

/* 16 warps a block, one block a multiprocessor (all its registers at 128 a thread): the x
 * prologue, paid once per block, costs half of what two blocks of 8 paid. */
#define MC_KQ_WARPS 16u
#define MC_KQ_SMALL 4u /* the warps of a block under qblock=4 (and auto on narrow matrices) */
/* Shared bytes a 16-column chunk of x' takes: three int8 planes and (scale, sum, two Q6_K
 * offsets), or 16 floats. */
#define MC_KQ_CHUNK_SMEM 64u

__host__ __device__ inline uint32_t mc_kq_smem(uint32_t cols) { return cols / 16 * MC_KQ_CHUNK_SMEM; }

/* A byte of w (0..255) as a float, exactly, without the integer conversion: 2^23 + b - 2^23 - off. */
__device__ __forceinline__ float mc_kq_byte(uint32_t w, uint32_t i, float off) {
    return __fsub_rn(__int_as_float(__byte_perm(w, 0x4B000000u, 0x7650u | i)), 8388608.0f + off);
}

template <uint32_t T>
__device__ __forceinline__ void mc_kq_load(mc_kq_unit &u, const mc_matrix &w, uint32_t row, uint32_t n, uint32_t nb) {
    const char *d = (const char *)w.data + (size_t)row * w.stride;
    const char *a = (const char *)w.aux + (size_t)row * w.aux_stride;
    u.q = __ldcs((const uint4 *)d + n);
    if (T == MEMRA_TYPE_Q6_K) {
        u.h = __ldcs((const uint2 *)(d + (size_t)nb * 128) + n);
        u.a.x = __ldcs((const unsigned short *)a + n);
        u.a.y = __ldg((const unsigned short *)(a + (size_t)nb * 16) + n / 8);
    } else {
        u.a = __ldg((const uint4 *)a + n / 8);
        if (T == MEMRA_TYPE_Q5_K)
            u.h.x = __ldcs((const uint32_t *)(d + (size_t)nb * 128) + n);
    }
}

/* One row's unit under qdot=auto: its six integer dots (dp4a) with the planes of the unit's two
 * chunks (clo, chi), folded into acc by mc_kq_fold. */
template <uint32_t T>
__device__ __forceinline__ float mc_kq_unit_dp4a(float acc, const mc_kq_unit &u, const uint4 *xh, const uint4 *xm,
                                                 const uint4 *xl, const int4 *meta, uint32_t clo, uint32_t chi,
                                                 uint32_t c4) {
    const uint4 h0 = xh[clo], m0 = xm[clo], l0 = xl[clo], h1 = xh[chi], m1 = xm[chi], l1 = xl[chi];
    uint32_t q[8];
    mc_kq_words<T>(u, q);
    int dh0 = 0, dm0 = 0, dl0 = 0, dh1 = 0, dm1 = 0, dl1 = 0;
    const uint32_t H0[4] = {h0.x, h0.y, h0.z, h0.w}, M0[4] = {m0.x, m0.y, m0.z, m0.w};
    const uint32_t L0[4] = {l0.x, l0.y, l0.z, l0.w}, H1[4] = {h1.x, h1.y, h1.z, h1.w};
    const uint32_t M1[4] = {m1.x, m1.y, m1.z, m1.w}, L1[4] = {l1.x, l1.y, l1.z, l1.w};
#pragma unroll
    for (int e = 0; e < 4; e++) {
        dh0 = __dp4a((int)q[e], (int)H0[e], dh0);
        dm0 = __dp4a((int)q[e], (int)M0[e], dm0);
        dl0 = __dp4a((int)q[e], (int)L0[e], dl0);
        dh1 = __dp4a((int)q[4 + e], (int)H1[e], dh1);
        dm1 = __dp4a((int)q[4 + e], (int)M1[e], dm1);
        dl1 = __dp4a((int)q[4 + e], (int)L1[e], dl1);
    }
    return mc_kq_fold<T>(acc, dh0, dm0, dl0, dh1, dm1, dl1, meta[clo], meta[chi], u.a, c4);
}

/* ---- the kernel ---------------------------------------------------------------------------- */

/* The kernels' body (gemv_kquant, gemv_kquant_post below), called by every thread of the block.
 * AM (commit=head, gemv_kquant_argmax: no bias, residual or GLU): greedy's argmax of y in the same
 * launch (am: mc_sample's arguments for it). The storing lane keeps the best of the values it
 * stores (argmax_merge.h's rule: the same winner in any order), and once every row is stored the
 * block ends as sample_argmax does (argmax_tail.cuh). */
template <uint32_t T, int QF, int GLU, int KS, uint32_t W, int AM = 0>
__device__ __forceinline__ void gemv_kquant_body(const mc_matrix w, const float *x, const float *norm_w, float eps,
                                                 const float *bias, const float *residual, float *y, uint32_t n_groups,
                                                 uint32_t bid = ~0u, uint32_t nbk = 0,
                                                 const mc_argmax_args *am = nullptr) {
    extern __shared__ __align__(16) unsigned char kqsm[];
    __shared__ float red[2][W][MC_GEMV_ROWS];
    __shared__ float bred[MC_KQ_WARPS];
    constexpr uint32_t SLOTS = W / KS, PER_IT = 32 * KS;
    const uint32_t nch = w.cols / 16, nunits = w.cols / 32, nb = w.cols / MEMRA_QK_K;
    uint4 *xh = (uint4 *)kqsm, *xm = xh + nch, *xl = xm + nch; /* qdot=auto: the planes, then meta */
    int4 *meta = (int4 *)(xl + nch);
    float *xf = (float *)kqsm; /* qdot=float: x' */
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, part = warp % KS, slot = warp / KS;
    const uint32_t B = bid == ~0u ? blockIdx.x : bid, NB = bid == ~0u ? gridDim.x : nbk; /* (a merged part's) */
    const uint32_t g0 = (uint32_t)((uint64_t)n_groups * B / NB);
    const uint32_t g1 = (uint32_t)((uint64_t)n_groups * (B + 1) / NB);
    const uint32_t n_my = g0 + slot < g1 ? (g1 - g0 - slot + SLOTS - 1) / SLOTS : 0;
    const uint32_t niter = (nunits + PER_IT - 1) / PER_IT, total = n_my * niter;
    const uint32_t first = lane + 32 * part;

    mc_kq_unit nx[MC_GEMV_ROWS];
    auto load = [&](uint32_t k, uint32_t i) {
        const uint32_t r0 = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS, n = first + PER_IT * i;
        if (n < nunits) {
#pragma unroll
            for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                mc_kq_load<T>(nx[r], w, r0 + r < w.rows ? r0 + r : r0, n, nb);
        }
    };
    if (total > 0)
        load(0, 0);
    mc_wait_prior_grid(MC_TRIGGER_Q8); /* x (and the residual) come from earlier kernels */
    /* AM: the step's position, read before the ticket (as sample_argmax reads it) */
    int32_t am_pnow = 0;
    if constexpr (AM) {
        if (tid == 0 && (am->ring || am->commit))
            am_pnow = *am->pos + (am->commit ? 1 : 0);
    }
    /* stage x' per 16-column chunk (the same whichever thread stages it) and sum the squares of x
     * in the 16-warp order: thread t sums chunks t, t + 512, ..., then its warp's tree, then the 16
     * warps in order; blocks of fewer warps play those threads in MC_KQ_WARPS / W rounds, thread t
     * as t, t + 32 W, ... */
    auto stage = [&](uint32_t c, float &ss) { mc_kq_stage<QF>(x, norm_w, c, ss, xh, xm, xl, meta, xf); };
    float ss = 0.0f;
    if (W >= MC_KQ_WARPS) {
        /* two of a thread's chunks at a time, both loads in flight before either is staged (down's
         * 14,336 columns: 896 chunks on 512 threads); the chunks and squares in the same order */
        for (uint32_t c = tid; c < nch; c += 2 * blockDim.x) {
            const uint32_t c1 = c + blockDim.x;
            float v0[16], v1[16];
            mc_q8x_raw16(x, (size_t)c * 16, v0);
            if (c1 < nch)
                mc_q8x_raw16(x, (size_t)c1 * 16, v1);
            mc_kq_stage_v<QF>(v0, norm_w, c, ss, xh, xm, xl, meta, xf);
            if (c1 < nch)
                mc_kq_stage_v<QF>(v1, norm_w, c1, ss, xh, xm, xl, meta, xf);
        }
    } else {
        constexpr uint32_t V = W >= MC_KQ_WARPS ? 1 : MC_KQ_WARPS / W;
#pragma unroll
        for (uint32_t v = 0; v < V; v++) {
            float sv = 0.0f;
            for (uint32_t c = tid + 32 * W * v; c < nch; c += 32 * MC_KQ_WARPS)
                stage(c, sv);
            if (norm_w) {
                sv = mc_warp_sum(sv);
                if (lane == 0)
                    bred[warp + W * v] = sv;
            }
        }
    }
    if (W >= MC_KQ_WARPS && norm_w) {
        ss = mc_warp_sum(ss);
        if (lane == 0)
            bred[warp] = ss;
    }
    __syncthreads(); /* x' and the warps' sums of squares are visible */
    float rscale = 1.0f;
    if (norm_w) { /* the block sum: the warps in order, by every thread */
        float t = 0.0f;
#pragma unroll
        for (uint32_t k = 0; k < MC_KQ_WARPS; k++)
            t += bred[k];
        rscale = 1.0f / sqrtf(t / (float)w.cols + eps);
    }

    float acc[MC_GEMV_ROWS];
#pragma unroll
    for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
        acc[r] = 0.0f;
    uint32_t k = 0, i = 0;
    float pre[MC_GEMV_ROWS];
    float am_best = -INFINITY; /* AM: the storing lane's candidate (sample_argmax's per thread) */
    uint32_t am_besti = MC_AM_NONE, am_bad = 0xffffffffu;
    for (uint32_t j = 0; j < total; j++) {
        mc_kq_unit cur[MC_GEMV_ROWS];
        if (!QF && i + 1 == niter && part == 0 && lane == 0) /* the residual (or bias) of the group, ahead */
            mc_rows_fetch<GLU>(pre, (g0 + slot + SLOTS * k) * MC_GEMV_ROWS, w.rows, bias, residual);
#pragma unroll
        for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
            cur[r] = nx[r];
        if (j + 1 < total)
            load(i + 1 < niter ? k : k + 1, i + 1 < niter ? i + 1 : 0);
        const uint32_t n = first + PER_IT * i;
        if (n < nunits) {
            /* the x chunks of the unit's low and high nibbles */
            const uint32_t clo = mc_kq_clo<T>(n), chi = mc_kq_chi<T>(n);
            const uint32_t c4 = (n >> 1) & 3; /* Q4_K/Q5_K: the unit's 64-element chunk in its block */
            if (QF) {
                float xv[2][16];
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const float4 va = ((const float4 *)xf)[4 * clo + q], vb = ((const float4 *)xf)[4 * chi + q];
                    xv[0][4 * q] = va.x, xv[0][4 * q + 1] = va.y, xv[0][4 * q + 2] = va.z, xv[0][4 * q + 3] = va.w;
                    xv[1][4 * q] = vb.x, xv[1][4 * q + 1] = vb.y, xv[1][4 * q + 2] = vb.z, xv[1][4 * q + 3] = vb.w;
                }
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                    uint32_t q[8];
                    mc_kq_words<T>(cur[r], q);
                    float d1, m1 = 0.0f, d2, m2 = 0.0f, off = 0.0f;
                    if (T == MEMRA_TYPE_Q6_K) {
                        const float d = __half2float(__ushort_as_half((unsigned short)cur[r].a.y));
                        d1 = __fmul_rn(d, (float)(int8_t)(cur[r].a.x & 0xFF));
                        d2 = __fmul_rn(d, (float)(int8_t)(cur[r].a.x >> 8));
                        off = 32.0f;
                    } else {
                        const float d = __half2float(__ushort_as_half((unsigned short)(cur[r].a.x & 0xFFFF)));
                        const float dmin = __half2float(__ushort_as_half((unsigned short)(cur[r].a.x >> 16)));
                        uint32_t sc, m;
                        mc_kq_scales_k4(cur[r].a, c4, sc, m);
                        d1 = __fmul_rn(d, (float)(sc & 0xFF)), m1 = __fmul_rn(dmin, (float)(m & 0xFF));
                        d2 = __fmul_rn(d, (float)(sc >> 8)), m2 = __fmul_rn(dmin, (float)(m >> 8));
                    }
                    float a = acc[r];
#pragma unroll
                    for (int t = 0; t < 2; t++)
#pragma unroll
                        for (int e = 0; e < 16; e++) {
                            const float qv = mc_kq_byte(q[4 * t + e / 4], e % 4, off);
                            const float wv = T == MEMRA_TYPE_Q6_K ? __fmul_rn(t ? d2 : d1, qv)
                                                                  : __fsub_rn(__fmul_rn(t ? d2 : d1, qv), t ? m2 : m1);
                            a = fmaf(wv, xv[t][e], a);
                        }
                    acc[r] = a;
                }
            } else {
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                    acc[r] = mc_kq_unit_dp4a<T>(acc[r], cur[r], xh, xm, xl, meta, clo, chi, c4);
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
        if (QF) /* qdot=float: at its register limit */
            mc_rows_store<GLU>(d, r0, w.rows, bias, residual, y);
        else
            mc_rows_store_pre<GLU>(d, pre, r0, w.rows, bias, residual, y);
        if constexpr (AM) { /* the values just stored (no bias or residual: d itself) */
#pragma unroll
            for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                const uint32_t row = r0 + r;
                if (row >= w.rows)
                    break;
                if (!isfinite(d[r]))
                    am_bad = min(am_bad, row);
                else
                    mc_best_merge(&am_best, &am_besti, d[r], row);
            }
        }
    }
    if constexpr (AM) {
        __threadfence(); /* this lane's stores of y before its block's ticket (the last block reads z[bad]) */
        mc_argmax_finish(y, am_best, am_besti, am_bad, 1, am_pnow, *am);
    }
}

template <uint32_t T, int QF, int GLU, int KS>
__global__ void __launch_bounds__(32 * MC_KQ_WARPS, 1)
    gemv_kquant(const mc_matrix w, const float *x, const float *norm_w, float eps, const float *bias,
                const float *residual, float *y, uint32_t n_groups) {
    gemv_kquant_body<T, QF, GLU, KS, MC_KQ_WARPS>(w, x, norm_w, eps, bias, residual, y, n_groups);
}

/* commit=head: the head's GEMV (the 16-warp body at one column part, qdot=auto) and greedy's argmax
 * of its logits in one launch (mc_gemv_kquant_argmax). Per token: what gemv_kquant reads and writes,
 * and each block's part, the ticket, and the last block's result, ring entry and embedding. */
template <uint32_t T>
__global__ void __launch_bounds__(32 * MC_KQ_WARPS, 1)
    gemv_kquant_argmax(const mc_matrix w, const float *x, const float *norm_w, float eps, float *y, uint32_t n_groups,
                       const __grid_constant__ mc_argmax_args a) {
    gemv_kquant_body<T, 0, MC_GLU_NONE, 1, MC_KQ_WARPS, 1>(w, x, norm_w, eps, NULL, NULL, y, n_groups, ~0u, 0, &a);
}

/* qblock=4 (and auto on narrow matrices): the same kernel in blocks of MC_KQ_SMALL warps, up to
 * 16 / MC_KQ_SMALL of them a multiprocessor (the same 128 registers a thread), so a matrix of few
 * row groups covers every multiprocessor; each row's dot is the 16-warp kernel's (KS, the lanes'
 * units and the parts' order unchanged) and so is the norm's sum of squares (the 16-warp order,
 * above): the same bits. qdot=auto only (qdot=float keeps the 16-warp blocks). */
template <uint32_t T, int GLU, int KS>
__global__ void __launch_bounds__(32 * MC_KQ_SMALL, MC_KQ_WARPS / MC_KQ_SMALL)
    gemv_kquant_small(const mc_matrix w, const float *x, const float *norm_w, float eps, const float *bias,
                      const float *residual, float *y, uint32_t n_groups) {
    gemv_kquant_body<T, 0, GLU, KS, MC_KQ_SMALL>(w, x, norm_w, eps, bias, residual, y, n_groups);
}

/* postnorm=fused (mc_gemv_post): the GEMV without a norm, bias, residual or GLU, then the grid's
 * last block folds gemma3's post norm and its residual add (post_norm.cuh). Per call: what
 * gemv_kquant reads and writes, and the last block reads y, pn.w and pn.x and writes pn.x
 * (w.rows floats each). */
template <uint32_t T, int QF, int KS>
__global__ void __launch_bounds__(32 * MC_KQ_WARPS, 1)
    gemv_kquant_post(const mc_matrix w, const float *x, float *y, uint32_t n_groups, const mc_post_args pn) {
    gemv_kquant_body<T, QF, MC_GLU_NONE, KS, MC_KQ_WARPS>(w, x, NULL, 0.0f, NULL, NULL, y, n_groups);
    mc_post_norm_last(pn, y, w.rows);
}

/* gemv_kquant_post in the blocks of gemv_kquant_small (qblock; the same bits). */
template <uint32_t T, int KS>
__global__ void __launch_bounds__(32 * MC_KQ_SMALL, MC_KQ_WARPS / MC_KQ_SMALL)
    gemv_kquant_small_post(const mc_matrix w, const float *x, float *y, uint32_t n_groups, const mc_post_args pn) {
    gemv_kquant_body<T, 0, MC_GLU_NONE, KS, MC_KQ_SMALL>(w, x, NULL, 0.0f, NULL, NULL, y, n_groups);
    mc_post_norm_last(pn, y, w.rows);
}

/* ---- the rows split on narrow matrices (qblock=16r, 16xr; issue 27) ---------------------------- */

/* gemma3-270m's wo (1024 columns: 32 units a row) and down (2048: 64) at KS 4 leave two or three
 * of a row group's four warps without a unit. Under qblock=16r or 16xr (qdot=auto, at most
 * MC_QBLOCK_COLS columns, KS > 1, not a GLU at KS 4) the KS warps of a row group split its 4 rows
 * instead (4 / KS each), each warp summing every column part p of its rows as lane l of part p did
 * (units 32 p + l, then every 32 KS-th), then each part's warp tree, then the parts in order: the
 * same sums, with no barrier between the warps. x' staged as gemv_kquant_body stages it (16 warps).
 * Per call: what gemv_kquant reads and writes. */

template <uint32_t T, int GLU, int KS>
__device__ __forceinline__ void gemv_kquant_rows_body(const mc_matrix w, const float *x, const float *norm_w, float eps,
                                                      const float *bias, const float *residual, float *y,
                                                      uint32_t n_groups, uint32_t bid = ~0u, uint32_t nbk = 0) {
    static_assert(KS > 1 && !(GLU != MC_GLU_NONE && KS == 4), "the rows split: KS 2 or 4, a GLU's pairs whole");
    constexpr uint32_t W = MC_KQ_WARPS, RPW = MC_GEMV_ROWS / KS, NP = KS;
    extern __shared__ __align__(16) unsigned char kqsm[];
    __shared__ float bred[MC_KQ_WARPS];
    constexpr uint32_t SLOTS = W / KS, PER_IT = 32 * KS;
    const uint32_t nch = w.cols / 16, nunits = w.cols / 32, nb = w.cols / MEMRA_QK_K;
    uint4 *xh = (uint4 *)kqsm, *xm = xh + nch, *xl = xm + nch;
    int4 *meta = (int4 *)(xl + nch);
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, sub = warp % KS, slot = warp / KS;
    const uint32_t B = bid == ~0u ? blockIdx.x : bid, NB = bid == ~0u ? gridDim.x : nbk; /* (a merged part's) */
    const uint32_t g0 = (uint32_t)((uint64_t)n_groups * B / NB);
    const uint32_t g1 = (uint32_t)((uint64_t)n_groups * (B + 1) / NB);
    const uint32_t n_my = g0 + slot < g1 ? (g1 - g0 - slot + SLOTS - 1) / SLOTS : 0;
    const uint32_t niter = (nunits + PER_IT - 1) / PER_IT, total = n_my * niter;
    const uint32_t rsub = sub * RPW;

    mc_kq_unit nx[NP][RPW];
    auto load = [&](uint32_t k, uint32_t i) {
        const uint32_t g = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS;
#pragma unroll
        for (uint32_t p = 0; p < NP; p++) {
            const uint32_t n = lane + 32 * p + PER_IT * i;
            if (n < nunits) {
#pragma unroll
                for (uint32_t r = 0; r < RPW; r++)
                    mc_kq_load<T>(nx[p][r], w, g + rsub + r < w.rows ? g + rsub + r : g, n, nb);
            }
        }
    };
    if (total > 0)
        load(0, 0);
    mc_wait_prior_grid(MC_TRIGGER_Q8); /* x (and the residual) come from earlier kernels */
    /* x' and the sum of squares: gemv_kquant_body's staging at 16 warps (qdot=auto) */
    float ss = 0.0f;
    for (uint32_t c = tid; c < nch; c += blockDim.x)
        mc_kq_stage<0>(x, norm_w, c, ss, xh, xm, xl, meta, NULL);
    if (norm_w) {
        ss = mc_warp_sum(ss);
        if (lane == 0)
            bred[warp] = ss;
    }
    __syncthreads(); /* x' and the warps' sums of squares are visible */
    float rscale = 1.0f;
    if (norm_w) { /* the block sum: the warps in order, by every thread */
        float t = 0.0f;
#pragma unroll
        for (uint32_t k = 0; k < MC_KQ_WARPS; k++)
            t += bred[k];
        rscale = 1.0f / sqrtf(t / (float)w.cols + eps);
    }

    float acc[NP][RPW];
#pragma unroll
    for (uint32_t p = 0; p < NP; p++)
#pragma unroll
        for (uint32_t r = 0; r < RPW; r++)
            acc[p][r] = 0.0f;
    uint32_t k = 0, i = 0;
    for (uint32_t j = 0; j < total; j++) {
        mc_kq_unit cur[NP][RPW];
#pragma unroll
        for (uint32_t p = 0; p < NP; p++)
#pragma unroll
            for (uint32_t r = 0; r < RPW; r++)
                cur[p][r] = nx[p][r];
        if (j + 1 < total)
            load(i + 1 < niter ? k : k + 1, i + 1 < niter ? i + 1 : 0);
#pragma unroll
        for (uint32_t p = 0; p < NP; p++) {
            const uint32_t n = lane + 32 * p + PER_IT * i;
            if (n >= nunits)
                continue;
            const uint32_t clo = mc_kq_clo<T>(n), chi = mc_kq_chi<T>(n), c4 = (n >> 1) & 3;
#pragma unroll
            for (uint32_t r = 0; r < RPW; r++)
                acc[p][r] = mc_kq_unit_dp4a<T>(acc[p][r], cur[p][r], xh, xm, xl, meta, clo, chi, c4);
        }
        if (++i < niter)
            continue;
        /* the row group's last iteration: each part's tree, the parts in order, write */
        float d[RPW];
#pragma unroll
        for (uint32_t r = 0; r < RPW; r++) {
            d[r] = mc_warp_sum(acc[0][r]);
            acc[0][r] = 0.0f;
        }
#pragma unroll
        for (uint32_t p = 1; p < NP; p++)
#pragma unroll
            for (uint32_t r = 0; r < RPW; r++) {
                d[r] += mc_warp_sum(acc[p][r]);
                acc[p][r] = 0.0f;
            }
        const uint32_t r0 = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS;
        i = 0;
        k++;
        if (lane != 0)
            continue;
#pragma unroll
        for (uint32_t r = 0; r < RPW; r++)
            d[r] *= rscale;
        mc_rows_store<GLU, RPW>(d, r0 + rsub, w.rows, bias, residual, y);
    }
}

template <uint32_t T, int GLU, int KS>
__global__ void __launch_bounds__(32 * MC_KQ_WARPS, 1)
    gemv_kquant_rows(const mc_matrix w, const float *x, const float *norm_w, float eps, const float *bias,
                     const float *residual, float *y, uint32_t n_groups) {
    gemv_kquant_rows_body<T, GLU, KS>(w, x, norm_w, eps, bias, residual, y, n_groups);
}

/* postnorm=fused on gemv_kquant_rows (as gemv_kquant_post). */
template <uint32_t T, int KS>
__global__ void __launch_bounds__(32 * MC_KQ_WARPS, 1)
    gemv_kquant_rows_post(const mc_matrix w, const float *x, float *y, uint32_t n_groups, const mc_post_args pn) {
    gemv_kquant_rows_body<T, MC_GLU_NONE, KS>(w, x, NULL, 0.0f, NULL, NULL, y, n_groups);
    mc_post_norm_last(pn, y, w.rows);
}

/* The chosen experts of a mixture of experts (gemv_experts' contract, gemv_moe.cu): block row y is
 * slot j, whose expert sel[j] (written by the kernel just before: read after the wait) owns rows
 * (sel[j] - e0) rows_e .. of the stack; its input x + j ldx, its output y + j ldy; an id outside
 * [e0, e1) writes zeros. Each slot runs gemv_kquant's 16-warp body on its expert's rows at the
 * column split of a GEMV of all k experts' rows (a function of the shapes alone, as gemv_experts
 * takes it), so an expert's outputs have the same bits in any slot, on any rank that holds it,
 * eager or captured. Per call: k x rows_e rows of data and aux, x, norm_w. */
template <uint32_t T, int QF, int GLU, int KS>
__global__ void __launch_bounds__(32 * MC_KQ_WARPS, 1)
    gemv_kquant_experts(const mc_matrix stack, uint32_t rows_e, const int32_t *sel, uint32_t e0, uint32_t e1,
                        const float *x, uint32_t ldx, const float *norm_w, float eps, float *y, uint32_t ldy,
                        uint32_t n_groups) {
    mc_matrix w;
    const float *xj;
    float *yj;
    if (mc_experts_slot<GLU>(stack, rows_e, sel, e0, e1, x, ldx, y, ldy, n_groups, w, xj, yj))
        gemv_kquant_body<T, QF, GLU, KS, MC_KQ_WARPS>(w, xj, norm_w, eps, NULL, NULL, yj, n_groups);
}

/* ---- launch -------------------------------------------------------------------------------- */

/* The shared-memory limit: x' of up to 58368 columns (one block per multiprocessor past 96 KB). */
#define MC_KQ_SMEM_MAX (228u * 1024u)

// clang-format off
#define MC_KQ_EACH_K(F, T, Q, G) F(T, Q, G, 1) F(T, Q, G, 2) F(T, Q, G, 4)
#define MC_KQ_EACH_G(F, T, Q) MC_KQ_EACH_K(F, T, Q, 0) MC_KQ_EACH_K(F, T, Q, 1) MC_KQ_EACH_K(F, T, Q, 2)
#define MC_KQ_EACH(F) \
    MC_KQ_EACH_G(F, MEMRA_TYPE_Q4_K, 0) MC_KQ_EACH_G(F, MEMRA_TYPE_Q4_K, 1) \
    MC_KQ_EACH_G(F, MEMRA_TYPE_Q5_K, 0) MC_KQ_EACH_G(F, MEMRA_TYPE_Q5_K, 1) \
    MC_KQ_EACH_G(F, MEMRA_TYPE_Q6_K, 0) MC_KQ_EACH_G(F, MEMRA_TYPE_Q6_K, 1)
/* the postnorm=fused kernels (no GLU) */
#define MC_KQ_POST_K(F, T, Q) F(T, Q, 1) F(T, Q, 2) F(T, Q, 4)
#define MC_KQ_POST_EACH(F) \
    MC_KQ_POST_K(F, MEMRA_TYPE_Q4_K, 0) MC_KQ_POST_K(F, MEMRA_TYPE_Q4_K, 1) \
    MC_KQ_POST_K(F, MEMRA_TYPE_Q5_K, 0) MC_KQ_POST_K(F, MEMRA_TYPE_Q5_K, 1) \
    MC_KQ_POST_K(F, MEMRA_TYPE_Q6_K, 0) MC_KQ_POST_K(F, MEMRA_TYPE_Q6_K, 1)
/* the small blocks' kernels (qdot=auto): (T, GLU, KS), and the post ones (T, KS) */
#define MC_KQ_SMALL_G(F, T) F(T, 0, 1) F(T, 0, 2) F(T, 0, 4) F(T, 1, 1) F(T, 1, 2) F(T, 1, 4) \
                            F(T, 2, 1) F(T, 2, 2) F(T, 2, 4)
#define MC_KQ_SMALL_EACH(F) MC_KQ_SMALL_G(F, MEMRA_TYPE_Q4_K) MC_KQ_SMALL_G(F, MEMRA_TYPE_Q5_K) \
                            MC_KQ_SMALL_G(F, MEMRA_TYPE_Q6_K)
/* the rows split (qblock=16r, 16xr): (T, GLU, KS) with KS 2, 4 (no GLU at 4), and the post ones (T, KS) */
#define MC_KQ_ROWS_T(F, T) F(T, 0, 2) F(T, 0, 4) F(T, 1, 2) F(T, 2, 2)
#define MC_KQ_ROWS_EACH(F) MC_KQ_ROWS_T(F, MEMRA_TYPE_Q4_K) MC_KQ_ROWS_T(F, MEMRA_TYPE_Q5_K) MC_KQ_ROWS_T(F, MEMRA_TYPE_Q6_K)
#define MC_KQ_ROWS_POST_EACH(F) F(MEMRA_TYPE_Q4_K, 2) F(MEMRA_TYPE_Q4_K, 4) F(MEMRA_TYPE_Q5_K, 2) F(MEMRA_TYPE_Q5_K, 4) \
                                F(MEMRA_TYPE_Q6_K, 2) F(MEMRA_TYPE_Q6_K, 4)
#define MC_KQ_SMALL_POST_EACH(F) F(MEMRA_TYPE_Q4_K, 1) F(MEMRA_TYPE_Q4_K, 2) F(MEMRA_TYPE_Q4_K, 4) \
                                 F(MEMRA_TYPE_Q5_K, 1) F(MEMRA_TYPE_Q5_K, 2) F(MEMRA_TYPE_Q5_K, 4) \
                                 F(MEMRA_TYPE_Q6_K, 1) F(MEMRA_TYPE_Q6_K, 2) F(MEMRA_TYPE_Q6_K, 4)
// clang-format on

static int mc_kq_prepared[MC_MAX_DEVICES];

static cudaError_t mc_kq_prepare(int dev) {
    if (mc_kq_prepared[dev])
        return cudaSuccess;
    int optin = 0;
    cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e != cudaSuccess)
        return e;
    const int lim = optin - 2 * 1024 < (int)MC_KQ_SMEM_MAX ? optin - 2 * 1024 : (int)MC_KQ_SMEM_MAX;
#define MC_KQ_SET(T, Q, G, K)                                                                                             \
    if ((e = cudaFuncSetAttribute(gemv_kquant<T, Q, G, K>, cudaFuncAttributeMaxDynamicSharedMemorySize, lim)) !=        \
        cudaSuccess)                                                                                                   \
        return e;
    MC_KQ_EACH(MC_KQ_SET)
#undef MC_KQ_SET
#define MC_KQ_SET_POST(T, Q, K)                                                                                        \
    if ((e = cudaFuncSetAttribute(gemv_kquant_post<T, Q, K>, cudaFuncAttributeMaxDynamicSharedMemorySize, lim)) !=     \
        cudaSuccess)                                                                                                   \
        return e;
    MC_KQ_POST_EACH(MC_KQ_SET_POST)
#undef MC_KQ_SET_POST
#define MC_KQ_SET_SMALL(T, G, K)                                                                                       \
    if ((e = cudaFuncSetAttribute(gemv_kquant_small<T, G, K>, cudaFuncAttributeMaxDynamicSharedMemorySize, lim)) !=    \
        cudaSuccess)                                                                                                   \
        return e;
    MC_KQ_SMALL_EACH(MC_KQ_SET_SMALL)
#undef MC_KQ_SET_SMALL
#define MC_KQ_SET_SMALL_POST(T, K)                                                                                     \
    if ((e = cudaFuncSetAttribute(gemv_kquant_small_post<T, K>, cudaFuncAttributeMaxDynamicSharedMemorySize, lim)) !=  \
        cudaSuccess)                                                                                                   \
        return e;
    MC_KQ_SMALL_POST_EACH(MC_KQ_SET_SMALL_POST)
#undef MC_KQ_SET_SMALL_POST
    if ((e = cudaFuncSetAttribute(gemv_kquant_argmax<MEMRA_TYPE_Q4_K>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  lim)) != cudaSuccess ||
        (e = cudaFuncSetAttribute(gemv_kquant_argmax<MEMRA_TYPE_Q5_K>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  lim)) != cudaSuccess ||
        (e = cudaFuncSetAttribute(gemv_kquant_argmax<MEMRA_TYPE_Q6_K>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  lim)) != cudaSuccess)
        return e;
    mc_kq_prepared[dev] = lim;
    return cudaSuccess;
}

/* qblock: whether a matrix runs in the small blocks (qdot=auto only): qblock=4 always, 16 never,
 * auto where the matrix is narrow (cols <= MC_QBLOCK_COLS: x' is cheap to stage once a block) and
 * its 16-warp grid leaves multiprocessors idle. A function of the shapes, the key and the device's
 * multiprocessor count; never of the bits (both blocks compute the same). */
static bool mc_kq_small(const mc_config *c, const mc_matrix *w, int qf, uint32_t sms) {
    if (qf || c->qblock == MC_QBLOCK_16 || c->qblock == MC_QBLOCK_16X || c->qblock == MC_QBLOCK_16R ||
        c->qblock == MC_QBLOCK_16XR) /* 16x: 16 here; 16r, 16xr: gemv_kquant_rows or 16 */
        return false;
    if (c->qblock == MC_QBLOCK_4)
        return true;
    const uint32_t n_groups = (w->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS, slots = MC_KQ_WARPS / mc_kq_ksplit(w->rows);
    return w->cols <= MC_QBLOCK_COLS && (n_groups + slots - 1) / slots < sms;
}

/* One launch: gemv_kquant, or with pn gemv_kquant_post (GLU none); their small-block forms where
 * mc_kq_small says so. */
template <uint32_t T, int QF, int GLU, int KS>
static cudaError_t mc_kq_t(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w,
                           float eps, const float *bias, const float *residual, float *y, cudaStream_t st,
                           const mc_post_args *pn = NULL) {
    int dev = 0;
    cudaError_t e = mc_gemv_prepare();
    if (e != cudaSuccess || (e = cudaGetDevice(&dev)) != cudaSuccess || (e = mc_kq_prepare(dev)) != cudaSuccess)
        return e;
    const uint32_t smem = mc_kq_smem(w->cols);
    if (smem > (uint32_t)mc_kq_prepared[dev])
        return cudaErrorInvalidValue;
    const bool small = mc_kq_small(c, w, QF, (uint32_t)mc_sm_count[dev]);
    const uint32_t warps = small ? MC_KQ_SMALL : MC_KQ_WARPS, per_sm = MC_KQ_WARPS / warps;
    const uint32_t n_groups = (w->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS, slots = warps / KS;
    const uint32_t need = small || !mc_qgrid_fills(c->qgrid, w->cols, 1) ? (n_groups + slots - 1) / slots : n_groups;
    const uint32_t cap = per_sm * mc_sm_count[dev];
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(need < cap ? need : cap);
    cfg.blockDim = dim3(32 * warps);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    /* qblock=16r, 16xr: the rows split */
    const bool rows = !QF && (c->qblock == MC_QBLOCK_16R || c->qblock == MC_QBLOCK_16XR) &&
                      w->cols <= MC_QBLOCK_COLS && KS > 1 && !(GLU != MC_GLU_NONE && KS == 4);
    if (pn && GLU != MC_GLU_NONE)
        e = cudaErrorInvalidValue;
    else if (rows) {
        if constexpr (!QF && KS > 1 && !(GLU != MC_GLU_NONE && KS == 4))
            e = pn ? cudaLaunchKernelEx(&cfg, gemv_kquant_rows_post<T, KS>, *w, x, y, n_groups, *pn)
                   : cudaLaunchKernelEx(&cfg, gemv_kquant_rows<T, GLU, KS>, *w, x, norm_w, eps, bias, residual, y,
                                        n_groups);
    } else if (pn && small)
        e = cudaLaunchKernelEx(&cfg, gemv_kquant_small_post<T, KS>, *w, x, y, n_groups, *pn);
    else if (pn)
        e = cudaLaunchKernelEx(&cfg, gemv_kquant_post<T, QF, KS>, *w, x, y, n_groups, *pn);
    else if (small)
        e = cudaLaunchKernelEx(&cfg, gemv_kquant_small<T, GLU, KS>, *w, x, norm_w, eps, bias, residual, y, n_groups);
    else
        e = cudaLaunchKernelEx(&cfg, gemv_kquant<T, QF, GLU, KS>, *w, x, norm_w, eps, bias, residual, y, n_groups);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

template <uint32_t T, int QF, int GLU>
static cudaError_t mc_kq_any(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w,
                             float eps, const float *bias, const float *residual, float *y, cudaStream_t st,
                             const mc_post_args *pn = NULL) {
    switch (mc_kq_ksplit(w->rows)) {
    case 1: return mc_kq_t<T, QF, GLU, 1>(c, w, x, norm_w, eps, bias, residual, y, st, pn);
    case 2: return mc_kq_t<T, QF, GLU, 2>(c, w, x, norm_w, eps, bias, residual, y, st, pn);
    default: return mc_kq_t<T, QF, GLU, 4>(c, w, x, norm_w, eps, bias, residual, y, st, pn);
    }
}

template <uint32_t T, int QF>
static cudaError_t mc_kq_qf(const mc_config *c, int glu, const mc_matrix *w, const float *x, const float *norm_w,
                            float eps, const float *bias, const float *residual, float *y, cudaStream_t st) {
    switch (glu) {
    case MC_GLU_SILU: return mc_kq_any<T, QF, MC_GLU_SILU>(c, w, x, norm_w, eps, bias, residual, y, st);
    case MC_GLU_GELU: return mc_kq_any<T, QF, MC_GLU_GELU>(c, w, x, norm_w, eps, bias, residual, y, st);
    default: return mc_kq_any<T, QF, MC_GLU_NONE>(c, w, x, norm_w, eps, bias, residual, y, st);
    }
}

template <uint32_t T>
static cudaError_t mc_kq_type(const mc_config *c, int glu, const mc_matrix *w, const float *x, const float *norm_w,
                              float eps, const float *bias, const float *residual, float *y, cudaStream_t st) {
    return c->qdot == MC_QDOT_FLOAT ? mc_kq_qf<T, 1>(c, glu, w, x, norm_w, eps, bias, residual, y, st)
                                    : mc_kq_qf<T, 0>(c, glu, w, x, norm_w, eps, bias, residual, y, st);
}

/* One launch of gemv_kquant_experts: a block of 16 warps per row-group range of each slot (the
 * fewest blocks whose slots hold a slot's row groups), k block rows. */
template <uint32_t T, int QF, int GLU, int KS>
static cudaError_t mc_kq_experts_t(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                   uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                   const float *norm_w, float eps, float *y, uint32_t ldy, cudaStream_t st) {
    static int ready[MC_MAX_DEVICES]; /* this instantiation's shared-memory limit set on the device */
    int dev = 0;
    cudaError_t e = mc_gemv_prepare();
    if (e != cudaSuccess || (e = cudaGetDevice(&dev)) != cudaSuccess || (e = mc_kq_prepare(dev)) != cudaSuccess)
        return e;
    return mc_experts_go(c, gemv_kquant_experts<T, QF, GLU, KS>, ready, mc_kq_prepared[dev], MC_KQ_WARPS, KS,
                         mc_kq_smem(w->cols), w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st);
}

/* This file's copy of the trigger mask (launch.cu's table). */
cudaError_t mc_gemv_kquant_trigger_addr(void **p) { return cudaGetSymbolAddress(p, mc_trigger_mask); }

/* qkvparts=merged on the K-quants: q/k in Q4_K or Q5_K and v in Q6_K (llama.cpp's Q4_K_M and Q5_K_M
 * mixes give v Q6_K in about half the layers) as one launch with the attention norm: blocks [0,
 * grid_a) run part a's body (the 16-warp body, or with ROWS the rows split of qblock=16r on
 * matrices of at most MC_QBLOCK_COLS columns) on their share of its row groups, the others part b's.
 * A block's share is a function of its index in its part and the part's block count, which changes
 * no row's arithmetic, so the bits are those of the two launches; part b no longer waits for part
 * a. Per call: what the two launches read and write. */
template <uint32_t TA, int KSA, int KSB, bool ROWS>
__global__ void __launch_bounds__(32 * MC_KQ_WARPS, 1)
    gemv_kquant_qkv2(const mc_matrix wa, const mc_matrix wb, const float *x, const float *norm_w, float eps, float *ya,
                     float *yb, uint32_t nga, uint32_t ngb, uint32_t grid_a) {
    if constexpr (ROWS) {
        if (blockIdx.x < grid_a)
            gemv_kquant_rows_body<TA, MC_GLU_NONE, KSA>(wa, x, norm_w, eps, NULL, NULL, ya, nga, blockIdx.x, grid_a);
        else
            gemv_kquant_rows_body<MEMRA_TYPE_Q6_K, MC_GLU_NONE, KSB>(wb, x, norm_w, eps, NULL, NULL, yb, ngb,
                                                                     blockIdx.x - grid_a, gridDim.x - grid_a);
    } else {
        if (blockIdx.x < grid_a)
            gemv_kquant_body<TA, 0, MC_GLU_NONE, KSA, MC_KQ_WARPS>(wa, x, norm_w, eps, NULL, NULL, ya, nga, blockIdx.x,
                                                                   grid_a);
        else
            gemv_kquant_body<MEMRA_TYPE_Q6_K, 0, MC_GLU_NONE, KSB, MC_KQ_WARPS>(
                wb, x, norm_w, eps, NULL, NULL, yb, ngb, blockIdx.x - grid_a, gridDim.x - grid_a);
    }
}
/* the forms compiled (TA, KSA, KSB, ROWS): llama-8b's shapes (4,096 columns: q/k at KS 1 or 2, v at
 * KS 4, the 16-warp body) and llama-1b's (2,048 columns: q/k at KS 2, v at KS 4, the rows split) */
// clang-format off
#define MC_KQ_QKV2_T(F, T) F(T, 1, 4, false) F(T, 2, 4, false) F(T, 2, 4, true)
#define MC_KQ_QKV2_EACH(F) MC_KQ_QKV2_T(F, MEMRA_TYPE_Q4_K) MC_KQ_QKV2_T(F, MEMRA_TYPE_Q5_K)
// clang-format on

extern "C" {

bool mc_qlayout_kquant(uint32_t type, uint64_t cols, uint64_t *data_row, uint64_t *aux_row) {
    return mc_kq_layout(type, cols, data_row, aux_row) != 0;
}

void mc_qrepack_kquant(uint32_t type, const uint8_t *src, uint64_t cols, uint8_t *dst_data, uint8_t *dst_aux) {
    uint64_t dr, ar;
    if (mc_kq_layout(type, cols, &dr, &ar))
        mc_kq_repack(type, src, cols, dst_data, dst_aux);
}

cudaError_t mc_gemv_kquant(const mc_config *c, int glu, const mc_matrix *w, const float *x, const float *norm_w,
                           float eps, const float *bias, const float *residual, float *y, cudaStream_t st) {
    uint64_t dr, ar;
    if (!mc_kq_layout(w->type, w->cols, &dr, &ar) || w->stride != dr || w->aux_stride != ar || !w->aux ||
        (glu != MC_GLU_NONE && glu != MC_GLU_SILU && glu != MC_GLU_GELU) || (glu && w->rows % 2))
        return cudaErrorInvalidValue;
    if (w->rows == 0)
        return cudaSuccess;
    switch (w->type) {
    case MEMRA_TYPE_Q4_K: return mc_kq_type<MEMRA_TYPE_Q4_K>(c, glu, w, x, norm_w, eps, bias, residual, y, st);
    case MEMRA_TYPE_Q5_K: return mc_kq_type<MEMRA_TYPE_Q5_K>(c, glu, w, x, norm_w, eps, bias, residual, y, st);
    default: return mc_kq_type<MEMRA_TYPE_Q6_K>(c, glu, w, x, norm_w, eps, bias, residual, y, st);
    }
}

cudaError_t mc_gemv_kquant_argmax(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w,
                                  float eps, float *y, const mc_argmax_args *a, cudaStream_t st) {
    if (w->type != MEMRA_TYPE_Q4_K && w->type != MEMRA_TYPE_Q5_K && w->type != MEMRA_TYPE_Q6_K)
        return cudaErrorNotSupported;
    uint64_t dr, ar;
    if (!mc_kq_layout(w->type, w->cols, &dr, &ar) || w->stride != dr || w->aux_stride != ar || !w->aux || !a ||
        !a->parts || !a->ticket || !a->stats || !a->token_out || !a->result || !a->pos || (a->ring && !a->ring_n))
        return cudaErrorInvalidValue;
    /* the kernel mc_gemv would launch must be the 16-warp body at one column part */
    if (w->rows == 0 || c->qdot != MC_QDOT_AUTO || mc_gemv_mma_serves(c, w) || mc_kq_ksplit(w->rows) != 1)
        return cudaErrorNotSupported;
    int dev = 0;
    cudaError_t e = mc_gemv_prepare();
    if (e != cudaSuccess || (e = cudaGetDevice(&dev)) != cudaSuccess || (e = mc_kq_prepare(dev)) != cudaSuccess)
        return e;
    const uint32_t smem = mc_kq_smem(w->cols), sm = (uint32_t)mc_sm_count[dev];
    if (smem > (uint32_t)mc_kq_prepared[dev])
        return cudaErrorInvalidValue;
    if (mc_kq_small(c, w, 0, sm))
        return cudaErrorNotSupported;
    /* mc_kq_t's grid for it */
    const uint32_t n_groups = (w->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS;
    const uint32_t need = !mc_qgrid_fills(c->qgrid, w->cols, 1) ? (n_groups + MC_KQ_WARPS - 1) / MC_KQ_WARPS : n_groups;
    const uint32_t grid = need < sm ? need : sm;
    if (grid > MC_AM_PARTS_CAP)
        return cudaErrorNotSupported;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(32 * MC_KQ_WARPS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    switch (w->type) {
    case MEMRA_TYPE_Q4_K:
        e = cudaLaunchKernelEx(&cfg, gemv_kquant_argmax<MEMRA_TYPE_Q4_K>, *w, x, norm_w, eps, y, n_groups, *a);
        break;
    case MEMRA_TYPE_Q5_K:
        e = cudaLaunchKernelEx(&cfg, gemv_kquant_argmax<MEMRA_TYPE_Q5_K>, *w, x, norm_w, eps, y, n_groups, *a);
        break;
    default: e = cudaLaunchKernelEx(&cfg, gemv_kquant_argmax<MEMRA_TYPE_Q6_K>, *w, x, norm_w, eps, y, n_groups, *a);
    }
    return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t mc_gemv_kquant_qkv2(const mc_config *c, const mc_matrix *wa, const mc_matrix *wb, const float *x,
                                const float *norm_w, float eps, float *ya, float *yb, cudaStream_t st) {
    uint64_t dra, ara, drb, arb;
    if (!x || !norm_w || wa->cols != wb->cols || !mc_kq_layout(wa->type, wa->cols, &dra, &ara) ||
        !mc_kq_layout(wb->type, wb->cols, &drb, &arb) || wa->stride != dra || wa->aux_stride != ara || !wa->aux ||
        wb->stride != drb || wb->aux_stride != arb || !wb->aux || wa->rows == 0 || wb->rows == 0)
        return cudaErrorInvalidValue;
    const uint32_t ksa = mc_kq_ksplit(wa->rows), ksb = mc_kq_ksplit(wb->rows);
    /* the kernels mc_gemv would choose: qdot=auto on the 16-warp blocks (qblock 16, 16x, 16r and 16xr
     * never take the small ones), the rows split under 16r and 16xr at KS > 1 on narrow matrices */
    const bool big = c->qblock == MC_QBLOCK_16 || c->qblock == MC_QBLOCK_16X || c->qblock == MC_QBLOCK_16R ||
                     c->qblock == MC_QBLOCK_16XR;
    const bool rows_form = (c->qblock == MC_QBLOCK_16R || c->qblock == MC_QBLOCK_16XR) && wa->cols <= MC_QBLOCK_COLS;
    const bool rows_a = rows_form && ksa > 1, rows_b = rows_form && ksb > 1;
    if (c->qdot != MC_QDOT_AUTO || !big || rows_a != rows_b || wb->type != MEMRA_TYPE_Q6_K ||
        (wa->type != MEMRA_TYPE_Q4_K && wa->type != MEMRA_TYPE_Q5_K))
        return cudaErrorNotSupported;
    int dev = 0;
    cudaError_t e = mc_gemv_prepare();
    if (e != cudaSuccess || (e = cudaGetDevice(&dev)) != cudaSuccess || (e = mc_kq_prepare(dev)) != cudaSuccess)
        return e;
    const uint32_t smem = mc_kq_smem(wa->cols);
    if (smem > (uint32_t)mc_kq_prepared[dev] || smem > 48u * 1024u) /* the merged kernel keeps the default limit */
        return cudaErrorNotSupported;
    const uint32_t sm = (uint32_t)mc_sm_count[dev];
    const uint32_t nga = (wa->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS,
                   ngb = (wb->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS;
    const uint32_t na = (nga + 16 / ksa - 1) / (16 / ksa), nb = (ngb + 16 / ksb - 1) / (16 / ksb);
    uint32_t grid_a, grid_b;
    if (!mc_qgrid_fills(c->qgrid, wa->cols, 1) && na + nb <= sm) { /* each part's fewest blocks */
        grid_a = na;
        grid_b = nb;
    } else { /* the filled grid: every multiprocessor, shared by the parts in proportion to their bytes */
        const double ba = (double)wa->rows * (dra + ara), bb = (double)wb->rows * (drb + arb);
        grid_b = (uint32_t)(sm * bb / (ba + bb) + 0.5);
        grid_b = grid_b < 1 ? 1 : grid_b > sm - 1 ? sm - 1 : grid_b;
        grid_b = grid_b > ngb ? ngb : grid_b;
        grid_a = sm - grid_b > nga ? nga : sm - grid_b;
    }
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(grid_a + grid_b);
    cfg.blockDim = dim3(32 * MC_KQ_WARPS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    e = cudaErrorNotSupported;
#define MC_KQ_QKV2_GO(TT, KA, KB, R)                                                                                   \
    if (wa->type == TT && ksa == KA && ksb == KB && rows_a == R)                                                       \
        e = cudaLaunchKernelEx(&cfg, gemv_kquant_qkv2<TT, KA, KB, R>, *wa, *wb, x, norm_w, eps, ya, yb, nga, ngb,      \
                               grid_a);
    MC_KQ_QKV2_EACH(MC_KQ_QKV2_GO)
#undef MC_KQ_QKV2_GO
    return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t mc_gemv_experts_kquant(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                   uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                   const float *norm_w, float eps, int glu, float *y, uint32_t ldy, cudaStream_t st) {
    uint64_t dr, ar;
    if (!mc_kq_layout(w->type, w->cols, &dr, &ar) || w->stride != dr || w->aux_stride != ar || !w->aux ||
        (glu != MC_GLU_NONE && glu != MC_GLU_SILU) || k == 0 || k > 65535 || rows_e == 0 || (glu && rows_e % 2))
        return cudaErrorInvalidValue;
    const uint64_t all = (uint64_t)rows_e * k; /* the column split of a GEMV of all k experts' rows */
    const uint32_t ks = mc_kq_ksplit(all < 0xffffffffu ? (uint32_t)all : 0xffffffffu);
    const bool qf = c->qdot == MC_QDOT_FLOAT;
#define MC_KQE_KS(T, Q, G)                                                                                             \
    (ks == 1   ? mc_kq_experts_t<T, Q, G, 1>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st)           \
     : ks == 2 ? mc_kq_experts_t<T, Q, G, 2>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st)           \
               : mc_kq_experts_t<T, Q, G, 4>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st))
#define MC_KQE(T)                                                                                                      \
    (glu ? (qf ? MC_KQE_KS(T, 1, MC_GLU_SILU) : MC_KQE_KS(T, 0, MC_GLU_SILU))                                           \
         : (qf ? MC_KQE_KS(T, 1, MC_GLU_NONE) : MC_KQE_KS(T, 0, MC_GLU_NONE)))
    switch (w->type) {
    case MEMRA_TYPE_Q4_K: return MC_KQE(MEMRA_TYPE_Q4_K);
    case MEMRA_TYPE_Q5_K: return MC_KQE(MEMRA_TYPE_Q5_K);
    default: return MC_KQE(MEMRA_TYPE_Q6_K);
    }
#undef MC_KQE
#undef MC_KQE_KS
}

cudaError_t mc_gemv_kquant_post(const mc_config *c, const mc_matrix *w, const float *x, float *y,
                                const mc_post_args *pn, cudaStream_t st) {
    uint64_t dr, ar;
    if (!mc_kq_layout(w->type, w->cols, &dr, &ar) || w->stride != dr || w->aux_stride != ar || !w->aux || !pn)
        return cudaErrorInvalidValue;
    if (w->rows == 0)
        return cudaSuccess;
    const bool qf = c->qdot == MC_QDOT_FLOAT;
#define MC_KQ_P(T)                                                                                                     \
    (qf ? mc_kq_any<T, 1, MC_GLU_NONE>(c, w, x, NULL, 0.0f, NULL, NULL, y, st, pn)                                     \
        : mc_kq_any<T, 0, MC_GLU_NONE>(c, w, x, NULL, 0.0f, NULL, NULL, y, st, pn))
    switch (w->type) {
    case MEMRA_TYPE_Q4_K: return MC_KQ_P(MEMRA_TYPE_Q4_K);
    case MEMRA_TYPE_Q5_K: return MC_KQ_P(MEMRA_TYPE_Q5_K);
    default: return MC_KQ_P(MEMRA_TYPE_Q6_K);
    }
#undef MC_KQ_P
}

const char *mc_gemv_kquant_family(const void *f) {
    static const mc_family_row table[] = {
#define MC_KQ_ROW(T, Q, G, K) {(const void *)gemv_kquant<T, Q, G, K>, (G) ? "gemv_swiglu" : "gemv"},
        MC_KQ_EACH(MC_KQ_ROW)
#undef MC_KQ_ROW
#define MC_KQ_ROW_POST(T, Q, K) {(const void *)gemv_kquant_post<T, Q, K>, "gemv_postnorm"},
            MC_KQ_POST_EACH(MC_KQ_ROW_POST)
#undef MC_KQ_ROW_POST
#define MC_KQ_ROW_SMALL(T, G, K) {(const void *)gemv_kquant_small<T, G, K>, (G) ? "gemv_swiglu" : "gemv"},
                MC_KQ_SMALL_EACH(MC_KQ_ROW_SMALL)
#undef MC_KQ_ROW_SMALL
#define MC_KQ_ROW_SMALL_POST(T, K) {(const void *)gemv_kquant_small_post<T, K>, "gemv_postnorm"},
                    MC_KQ_SMALL_POST_EACH(MC_KQ_ROW_SMALL_POST)
#undef MC_KQ_ROW_SMALL_POST
#define MC_KQ_ROW_ROWS(T, G, K) {(const void *)gemv_kquant_rows<T, G, K>, (G) ? "gemv_swiglu" : "gemv"},
                        MC_KQ_ROWS_EACH(MC_KQ_ROW_ROWS)
#undef MC_KQ_ROW_ROWS
#define MC_KQ_ROW_ROWS_POST(T, K) {(const void *)gemv_kquant_rows_post<T, K>, "gemv_postnorm"},
                            MC_KQ_ROWS_POST_EACH(MC_KQ_ROW_ROWS_POST)
#undef MC_KQ_ROW_ROWS_POST
#define MC_KQ_ROW_EXP(T, Q, G, K) {(const void *)gemv_kquant_experts<T, Q, G, K>, "gemv_experts"},
#define MC_KQ_EXP_G(T, Q) MC_KQ_EACH_K(MC_KQ_ROW_EXP, T, Q, MC_GLU_NONE) MC_KQ_EACH_K(MC_KQ_ROW_EXP, T, Q, MC_GLU_SILU)
        MC_KQ_EXP_G(MEMRA_TYPE_Q4_K, 0) MC_KQ_EXP_G(MEMRA_TYPE_Q4_K, 1) MC_KQ_EXP_G(MEMRA_TYPE_Q5_K, 0)
            MC_KQ_EXP_G(MEMRA_TYPE_Q5_K, 1) MC_KQ_EXP_G(MEMRA_TYPE_Q6_K, 0) MC_KQ_EXP_G(MEMRA_TYPE_Q6_K, 1)
#undef MC_KQ_EXP_G
#undef MC_KQ_ROW_EXP
#define MC_KQ_ROW_QKV2(T, KA, KB, R) {(const void *)gemv_kquant_qkv2<T, KA, KB, R>, "gemv"},
                MC_KQ_QKV2_EACH(MC_KQ_ROW_QKV2)
#undef MC_KQ_ROW_QKV2
#define MC_KQ_ROW_AM(T) {(const void *)gemv_kquant_argmax<T>, "gemv"}, /* commit=head's head */
                    MC_KQ_ROW_AM(MEMRA_TYPE_Q4_K) MC_KQ_ROW_AM(MEMRA_TYPE_Q5_K) MC_KQ_ROW_AM(MEMRA_TYPE_Q6_K)
#undef MC_KQ_ROW_AM
    };
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
}
