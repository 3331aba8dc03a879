/* gemv_q8_body.cuh: the Q8_0 integer GEMV's body (gemv_q8.cu's kernels, and the merged q/k/v
 * launch of gemv_legacy.cu), with its quantized-x layout. Included by those two files alone. */
#ifndef MEMRA_GEMV_Q8_BODY_CUH
#define MEMRA_GEMV_Q8_BODY_CUH

#include "argmax_tail.cuh"
#include "cuda_common.cuh"
#include "post_norm.cuh"
#include "q8x_quant.h"

/* Q8_0 at batch 1 is bound by instructions and L1 traffic per weight byte (a float conversion
 * and an FMA per weight, 8 bytes of x and norm weight per 4 weight bytes). Here each block first
 * quantizes x' = x * norm_w into shared memory, per 16-column chunk c: s_c = max|x'| / QMAX and
 * q = rint(x' / s_c), |q| <= QMAX = 127 * 2^16, stored as three int8 planes (q = 2^16 hi + 2^8
 * mid + lo), so a chunk's dot with 16 int8 weights is exact in integers, three dp4a chains, and
 * costs one float FMA: acc += (2^16 dot_hi + (2^8 dot_mid + dot_lo)) * (d_w * s_c). x' keeps 23
 * bits relative to its chunk's largest element (16 bits were not enough: bench/gpu/NOTES.md).
 * The sum of squares of x for the norm is a block sum of fixed shape: 256 threads, each over
 * chunks tid, tid + 256, ..., then the 8 warps' sums in order. A warp takes 4 rows over column
 * part `part` of KS (chunks 32 part + lane, then every 32 KS-th), the parts of a row group added
 * in order; each block takes a contiguous, balanced range of row groups, its warps' loads
 * flattened over row groups so the next row group's first weights stream while the last chunk of
 * the current one is summed. Blocks of WARPS = 16 warps, one a multiprocessor (q8=auto: the
 * quantization of x, paid once per block, is paid half as often as with two blocks of 8, which
 * is what lets it pay on the down projection too) or of 8 warps, two a multiprocessor (q8=rows
 * and q8=int-8w). With 16 warps every thread quantizes, and the first 8 warps sum the squares in
 * the 8-warp order. The bits depend on the shapes alone (not on the grid or the block size).
 *
 * Per call (one matrix a token): reads rows x cols weight bytes and their f16 block scales
 * (streamed), x and norm_w (cols floats, once per block), bias and residual (rows floats);
 * writes y (rows floats; rows/2 with a GLU: SwiGLU or GELU-gated). */
#define MC_Q8X_WARPS 8u /* the sum of squares' shape (and the blocks of q8=rows, int-8w) */
#define MC_Q8X_UNROLL 2

/* Shared bytes of the quantized x of a matrix of `cols` columns. */
__host__ __device__ inline uint32_t mc_q8x_smem(uint32_t cols) { return cols / 16 * 52; }

/* EXP (moe_fuse bit 2048, gemv_q8_0_int_experts_wave): the body over the row groups of every slot of
 * a mixture of experts' gate/up at once, x one vector for all slots: virtual group g is slot g / G's
 * group g % G (G = ceil(rows_e / 4)) on expert sel[slot]'s rows of the stack w (experts [e0, e1)),
 * written to y + slot ldy; zeros for an id outside [e0, e1). The ids come from the kernel just
 * before, so the first weights are asked for after the wait. */
struct mc_q8x_exp {
    const int32_t *sel;
    float *y;
    uint32_t G, rows_e, e0, e1, ldy;
};

/* The kernels' body (gemv_q8_0_int, gemv_q8_0_int_post), called by every thread of the block; bid and
 * nbk: this block's index and the block count of its part in a merged launch (default: the grid's).
 * AM (commit=head, gemv_q8_0_int_argmax and its prologue form: no bias, residual or GLU): greedy's
 * argmax of y in the same launch (am: mc_sample's arguments for it), as gemv_kquant_body takes it:
 * the storing lane keeps the best of the values it stores (argmax_merge.h's rule: the same winner in
 * any order), and once every row is stored the block ends as sample_argmax does (argmax_tail.cuh). */
template <int SWIGLU, int NORM, int KS, int WARPS, bool PRO = false, int AM = 0, int EXP = 0>
__device__ __forceinline__ void gemv_q8_0_int_body(const mc_matrix w, const float *x, const float *norm_w, float eps,
                                                   const float *bias, const float *residual, float *y,
                                                   uint32_t n_groups, const mc_pro_args *pro = NULL, uint32_t bid = ~0u,
                                                   uint32_t nbk = 0, const mc_argmax_args *am = nullptr,
                                                   const mc_q8x_exp *ex = nullptr) {
    extern __shared__ __align__(16) unsigned char q8sm[];
    __shared__ float red[2][WARPS][MC_GEMV_ROWS];
    __shared__ float bred[MC_Q8X_WARPS];
    constexpr uint32_t SLOTS = WARPS / KS, U = MC_Q8X_UNROLL, PER_IT = 32 * KS * U;
    const uint32_t nch = w.cols / 16, nsc = w.cols / MEMRA_Q8_0_BLOCK;
    uint4 *xh = (uint4 *)q8sm, *xm = xh + nch, *xl = xm + nch;
    float *xs = (float *)(xl + nch);
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, part = warp % KS, slot = warp / KS;
    /* this block's share: of the grid, or (bid, nbk) of a merged launch's part */
    const uint32_t B = bid == ~0u ? blockIdx.x : bid, NB = bid == ~0u ? gridDim.x : nbk;
    const uint32_t g0 = (uint32_t)((uint64_t)n_groups * B / NB);
    const uint32_t g1 = (uint32_t)((uint64_t)n_groups * (B + 1) / NB);
    const uint32_t n_my = g0 + slot < g1 ? (g1 - g0 - slot + SLOTS - 1) / SLOTS : 0;
    const uint32_t niter = (nch + PER_IT - 1) / PER_IT, total = n_my * niter;
    const uint32_t first = lane + 32 * part;

    uint4 wv[U][MC_GEMV_ROWS];
    uint16_t sv[U][MC_GEMV_ROWS];
    /* EXP: virtual group g's slot, its first row in the stack and whether this rank holds its expert */
    [[maybe_unused]] auto exp_of = [&](uint32_t g, uint32_t &jslot, size_t &base, uint32_t &r0e) {
        jslot = g / ex->G;
        r0e = (g - jslot * ex->G) * MC_GEMV_ROWS;
        const uint32_t e = (uint32_t)ex->sel[jslot];
        base = (size_t)(e - ex->e0) * ex->rows_e;
        return e >= ex->e0 && e < ex->e1;
    };
    /* loads of flat iteration (row group k, iteration i) */
    auto load = [&](uint32_t k, uint32_t i) {
        uint32_t r0 = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS, nrows = w.rows;
        size_t base = 0;
        if constexpr (EXP) {
            uint32_t jslot;
            if (!exp_of(g0 + slot + SLOTS * k, jslot, base, r0))
                return;
            nrows = ex->rows_e;
        }
#pragma unroll
        for (uint32_t u = 0; u < U; u++) {
            const uint32_t idx = first + PER_IT * i + 32 * KS * u;
            if (idx < nch) {
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++) {
                    const size_t row = base + (r0 + r < nrows ? r0 + r : r0);
                    wv[u][r] =
                        __ldcs((const uint4 *)((const char *)w.data + (size_t)row * w.stride + (size_t)idx * 16));
                    sv[u][r] = __ldg(w.scales + (size_t)row * nsc + idx / 2);
                }
            }
        }
    };
    if (!EXP && total > 0)
        load(0, 0);
    /* PRO: the post norm's and this GEMV's norm weights into shared memory before the wait */
    [[maybe_unused]] const float *wps = NULL;
    if constexpr (PRO) {
        __shared__ __align__(16) float wpro[2 * MC_PRO_COLS]; /* pro.w, then norm_w */
        wps = mc_pro_wfetch_start<NORM>(*pro, norm_w, w.cols, wpro);
    }
    mc_wait_prior_grid(MC_TRIGGER_Q8); /* x (and the residual) come from earlier kernels */
    if (EXP && total > 0)              /* EXP: the ids are the kernel's just before */
        load(0, 0);
    /* AM: the step's position, read before the ticket (as sample_argmax reads it) */
    [[maybe_unused]] int32_t am_pnow = 0;
    if constexpr (AM) {
        if (tid == 0 && (am->ring || am->commit))
            am_pnow = *am->pos + (am->commit ? 1 : 0);
    }
    /* PRO: x_new, by the staging threads from their own loads where mc_pro_direct_ok (chunk c = tid's
     * 16 columns in dx: nch <= 64), else x = x_new in shared memory */
    [[maybe_unused]] bool direct = false;
    [[maybe_unused]] float dx[16];
    if constexpr (PRO)
        direct = mc_pro_begin<NORM>(*pro, w.cols, wps, true, x, norm_w, dx);
    float ss = 0.0f;
    /* a chunk: x' quantized (16 warps sum the squares here; 8 below, in the 8-warp order) */
    auto stage = [&](uint32_t c, float(&v)[16]) {
        mc_q8x_norm16<NORM, WARPS == MC_Q8X_WARPS, PRO>(norm_w, (size_t)c * 16, v, ss);
        float amax;
        bool finite;
        mc_q8x_amax16(v, amax, finite);
        mc_q8x_planes16(v, mc_q8x_inv(amax, finite), xh[c], xm[c], xl[c]);
        xs[c] = mc_q8x_scale(amax, finite); /* NaN for a non-finite chunk: it stays visible */
    };
    /* PRO && direct: chunk tid (< nch <= 64: the first staging warps) from registers, its squares
     * summed as the 8-warp order sums them (chunk tid alone, in column order) */
    if (PRO && direct) {
        if (tid < nch) {
            mc_q8x_norm16<NORM, 1, true>(norm_w, (size_t)tid * 16, dx, ss);
            float amax;
            bool finite;
            mc_q8x_amax16(dx, amax, finite);
            mc_q8x_planes16(dx, mc_q8x_inv(amax, finite), xh[tid], xm[tid], xl[tid]);
            xs[tid] = mc_q8x_scale(amax, finite);
        }
    } else {
        /* two of a thread's chunks at a time, both loads in flight before either is staged (the down
         * projection's 14,336 columns: 896 chunks); the chunks and squares in the same order */
        for (uint32_t c = tid; c < nch; c += 2 * blockDim.x) {
            const uint32_t c1 = c + blockDim.x;
            float v0[16], v1[16];
            mc_q8x_raw16<PRO>(x, (size_t)c * 16, v0);
            if (c1 < nch)
                mc_q8x_raw16<PRO>(x, (size_t)c1 * 16, v1);
            stage(c, v0);
            if (c1 < nch)
                stage(c1, v1);
        }
    }
    /* the 8-warp order: chunks tid, tid + 256, ... (PRO && direct: summed above, chunk tid alone) */
    if (NORM && WARPS != MC_Q8X_WARPS && warp < MC_Q8X_WARPS && !(PRO && direct))
        for (uint32_t c = tid; c < nch; c += 32 * MC_Q8X_WARPS)
#pragma unroll
            for (uint32_t i = 0; i < 4; i++) {
                const float4 a = PRO ? ((const float4 *)(x + (size_t)c * 16))[i]
                                     : __ldg((const float4 *)(x + (size_t)c * 16) + i);
                ss = fmaf(a.x, a.x, ss);
                ss = fmaf(a.y, a.y, ss);
                ss = fmaf(a.z, a.z, ss);
                ss = fmaf(a.w, a.w, ss);
            }
    if (NORM && (WARPS == MC_Q8X_WARPS || warp < MC_Q8X_WARPS)) {
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

    float acc[MC_GEMV_ROWS];
#pragma unroll
    for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
        acc[r] = 0.0f;
    uint32_t k = 0, i = 0;
    float pre[MC_GEMV_ROWS];
    [[maybe_unused]] float am_best = -INFINITY; /* AM: the storing lane's candidate (sample_argmax's per thread) */
    [[maybe_unused]] uint32_t am_besti = MC_AM_NONE, am_bad = 0xffffffffu;
    for (uint32_t j = 0; j < total; j++) {
        uint4 cur[U][MC_GEMV_ROWS];
        uint16_t cs[U][MC_GEMV_ROWS];
        if (!EXP && i + 1 == niter && part == 0 && lane == 0) /* the residual (or bias) of the group, ahead */
            mc_rows_fetch<SWIGLU>(pre, (g0 + slot + SLOTS * k) * MC_GEMV_ROWS, w.rows, bias, residual);
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
        uint32_t r0 = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS, rows = w.rows;
        const uint32_t par = k & 1;
        [[maybe_unused]] bool held = true;
        [[maybe_unused]] float *yo = y;
        if constexpr (EXP) {
            uint32_t jslot;
            size_t base;
            held = exp_of(g0 + slot + SLOTS * k, jslot, base, r0);
            rows = ex->rows_e;
            yo = ex->y + (size_t)jslot * ex->ldy;
        }
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
        if constexpr (EXP) {
            if (!held) { /* not this rank's expert (or no expert): zeros, as mc_experts_zero writes them */
                constexpr uint32_t div = SWIGLU ? 2u : 1u;
                for (uint32_t o = r0 / div; o < (r0 + MC_GEMV_ROWS) / div && o < rows / div; o++)
                    yo[o] = 0.0f;
                continue;
            }
#pragma unroll
            for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                d[r] *= rscale;
            mc_rows_store<SWIGLU>(d, r0, rows, NULL, NULL, yo);
            continue;
        } else {
#pragma unroll
            for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                d[r] *= rscale;
            mc_rows_store_pre<SWIGLU>(d, pre, r0, w.rows, bias, residual, y);
        }
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

#endif
