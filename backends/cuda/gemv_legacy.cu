/* gemv_legacy.cu: the Q4_0, Q4_1, Q5_0, Q5_1 GEMVs (gemv_quant.h), on the
 * split layout of legacy_layout.h (a 16-byte plane of quant nibbles per block, and an aux plane of
 * the f16 scales d, the f16 minimums m of the _1 types and the rearranged fifth bits of Q5).
 *
 * gemv_legacy: persistent blocks of 16 warps, one a multiprocessor (all its registers; two blocks of
 * 8 until the issue-26 speed session: bench/gpu/NOTES.md), a grid of at most one block per
 * multiprocessor taking contiguous, balanced ranges of row groups (4 rows, gate/up interleaved for
 * a GLU), each warp slot streaming its row groups back to back with the loads flattened over them
 * (the next group's first blocks load while the current one's last are summed). Matrices of few
 * rows split their columns over KS = 2 or 4 warps (parts added in order; KS a function of the row
 * count). First every block stages x' = x * norm_w (the RMSNorm's 1/rms applied to the finished
 * dots) in shared memory and sums the squares of x, by its first 8 warps as the blocks of 8 did
 * (thread order, warp tree, those warps in order: the bits of the 8-warp blocks, for any width);
 * without the norm (no sum to order) all 16 warps stage, two half blocks a thread in flight. A
 * row group's residual is fetched into shared memory by cp.async at its last iteration
 * (mc_rows_fetch_async: the body has no register to spare for it).
 * Lane l of a row group's part p takes blocks 32 p + l, then every 32 KS-th after it,
 * two at a time:
 *   qdot=float (QD 0): each weight dequantized exactly as memra/quant.h does ((q - 8) * d,
 *     q * d + m, ...), the dot a chain of fmaf over the block's 32 elements in element order;
 *   qdot=auto (QD 1): x' quantized per block of 32 to 23 bits as the integer Q8_0 GEMV does
 *     (q8x_quant.h: q = rint(x' * QMAX / amax), three int8 planes q = 2^16 hi + 2^8 mid + lo),
 *     with each plane's sum over the block; per plane the block's dot with the quants less the
 *     zero point (o = 8 for Q4_0, 16 for Q5_0, 0 for the _1 types) is exact in int32 (dp4a over
 *     the unpacked nibbles, minus o times the plane's sum), the planes joined in float as
 *     gemv_q8_0_int joins them and scaled once by d s; the _1 types add the block's sum of x
 *     (joined the same way) times m s. Measured on the H200: against a float64 reference on
 *     random data (check_quant_gemv.c) the worst error is 1.4e-7 (float) and 1.1e-7 (auto) of
 *     the row's absolute mass; the gate's NMSE of auto against float on tiny Q4_0 is 2.2e-8.
 * Speed (memra_cuda_kernel_bench 8b q4_0 576, H200): 56.9% of the ceiling over a token's kernels
 * (gate/up 81%, head 97%, down 51%, qkv 45%, wo 34%; the 8-warp blocks in the same call: 56.1%,
 * gate/up 82%, down 49%, qkv 47%, wo 31%); qdot=float 33.8% (bound by the float
 * dequantization: about three float operations a weight). What limits auto is the structure
 * more than the arithmetic: with the dots removed (loads, the staging of x and the sums kept)
 * the same kernels reach 62.7%, with two x planes instead of three 57.3%; the short GEMVs pay
 * their ramp, the staging of x and the tail (wo 7.8 us for 9.4 MB).
 * Each lane's sum, then the fixed warp tree, then the parts in order: the bits depend on the
 * shapes and qdot alone (not on the grid, pdl, trigger or qblock).
 * qblock (issue 27): narrow matrices (SmolLM2's 576 columns, gemma3-270m's 640) have too few row
 * groups for 132 blocks of 16 warps (wo and down of SmolLM2: 36 blocks), so with qdot=auto,
 * qblock=auto (or 4) runs the same body in blocks of 4 warps, up to 4 a multiprocessor
 * (gemv_legacy_small; not the default: measured slower on gemma3-270m and llama-1b): KS and the
 * lanes' blocks unchanged (the same dot per row), x' staged per block by the same code, the sum
 * of squares in the 8 stage warps' order (each thread plays 2 of them): the same bits.
 * qblock=16r (the default since issue 27's narrow session), 16x, 16xr: the 16-warp kernel's narrow
 * forms (gemv_legacy_narrow, below) on matrices of at most 2048 columns: the row group's warps split
 * its rows instead of its columns (16r: SmolLM2 Q4_1 1,756 -> 2,019 tok/s), x' quantized by every
 * warp (16x: measured slower), or both; the same bits (bench/gpu/NOTES.md, last section).
 *
 * Per call (one matrix a token): reads rows x cols/32 blocks (16 bytes of nibbles, and 2 bytes of
 * d, 2 of m for Q4_1/Q5_1, 4 of fifth bits for Q5: 18, 20, 22, 24 bytes a block, the file's
 * bytes), x and norm_w (cols floats, once per block of the grid, from L2), bias and residual (rows
 * floats); writes y (rows floats; rows/2 with a GLU). The embedding lookup of these types is
 * token.cu's, through embed_elem.cuh's mc_ll_elem. */
#include "cuda_common.cuh"
#include "gemv_legacy_body.cuh" /* the kernels' body, its constants and mc_ll_smem */
#include "gemv_q8_body.cuh"     /* the Q8_0 integer body, for the merged q/k/v launch */
#include "gemv_quant.h"
#include "legacy_layout.h"
#include "post_norm.cuh"
#include "q8x_quant.h"

bool mc_qlayout_legacy(uint32_t type, uint64_t cols, uint64_t *data_row, uint64_t *aux_row) {
    return mc_ll_layout(type, cols, data_row, aux_row);
}

void mc_qrepack_legacy(uint32_t type, const uint8_t *src, uint64_t cols, uint8_t *dst_data, uint8_t *dst_aux) {
    mc_ll_repack(type, src, cols, dst_data, dst_aux);
}

template <uint32_t T, int GLU, int NORM, int KS, int QD>
__global__ void __launch_bounds__(32 * MC_LL_WARPS, 1)
    gemv_legacy(const mc_matrix w, const float *x, const float *norm_w, float eps, const float *bias,
                const float *residual, float *y, uint32_t n_groups) {
    gemv_legacy_body<T, GLU, NORM, KS, QD, MC_LL_WARPS>(w, x, norm_w, eps, bias, residual, y, n_groups);
}

/* qblock=4 (and auto on narrow matrices): the same kernel in blocks of MC_LL_SMALL warps, up to
 * 16 / MC_LL_SMALL of them a multiprocessor (the same 128 registers a thread), so a matrix of few
 * row groups covers every multiprocessor; each row's dot is the 16-warp kernel's (KS, the lanes'
 * blocks and the parts' order unchanged) and so is the norm's sum of squares (the 8-warp order,
 * above): the same bits. qdot=auto only (qdot=float keeps the 16-warp blocks). */
template <uint32_t T, int GLU, int NORM, int KS>
__global__ void __launch_bounds__(32 * MC_LL_SMALL, MC_LL_WARPS / MC_LL_SMALL)
    gemv_legacy_small(const mc_matrix w, const float *x, const float *norm_w, float eps, const float *bias,
                      const float *residual, float *y, uint32_t n_groups) {
    gemv_legacy_body<T, GLU, NORM, KS, 1, MC_LL_SMALL>(w, x, norm_w, eps, bias, residual, y, n_groups);
}

/* The chosen experts of a mixture of experts (gemv_experts' contract, gemv_moe.cu; as
 * gemv_kquant_experts): block row y is slot j on expert sel[j]'s rows of the stack (read after the
 * wait: the kernel just before wrote it), input x + j ldx, output y + j ldy, zeros for an id
 * outside [e0, e1); each slot runs gemv_legacy's 16-warp body on its expert's rows at the column
 * split of all k experts' rows, so an expert's bits do not depend on its slot, rank or graph. The
 * gate/up stack has the ffn norm (NORM 1) and the GLU,
 * the down stack neither. Per call: k x rows_e rows of data and aux, x, norm_w. */
template <uint32_t T, int GLU, int KS, int QD>
__global__ void __launch_bounds__(32 * MC_LL_WARPS, 1)
    gemv_legacy_experts(const mc_matrix stack, uint32_t rows_e, const int32_t *sel, uint32_t e0, uint32_t e1,
                        const float *x, uint32_t ldx, const float *norm_w, float eps, float *y, uint32_t ldy,
                        uint32_t n_groups) {
    mc_matrix w;
    const float *xj;
    float *yj;
    if (mc_experts_slot<GLU>(stack, rows_e, sel, e0, e1, x, ldx, y, ldy, n_groups, w, xj, yj))
        gemv_legacy_body<T, GLU, GLU ? 1 : 0, KS, QD, MC_LL_WARPS>(w, xj, norm_w, eps, NULL, NULL, yj, n_groups);
}

/* postnorm=fused (mc_gemv_post): the GEMV without a norm, bias, residual or GLU, then the grid's
 * last block folds gemma3's post norm and its residual add (post_norm.cuh). Per call: what
 * gemv_legacy reads and writes, and the last block reads y, pn.w and pn.x and writes pn.x
 * (w.rows floats each). */
template <uint32_t T, int KS, int QD>
__global__ void __launch_bounds__(32 * MC_LL_WARPS, 1)
    gemv_legacy_post(const mc_matrix w, const float *x, float *y, uint32_t n_groups, const mc_post_args pn) {
    gemv_legacy_body<T, MC_GLU_NONE, 0, KS, QD, MC_LL_WARPS>(w, x, NULL, 0.0f, NULL, NULL, y, n_groups);
    mc_post_norm_last(pn, y, w.rows);
}

/* gemv_legacy_post in the blocks of gemv_legacy_small (qblock; the same bits). */
template <uint32_t T, int KS>
__global__ void __launch_bounds__(32 * MC_LL_SMALL, MC_LL_WARPS / MC_LL_SMALL)
    gemv_legacy_small_post(const mc_matrix w, const float *x, float *y, uint32_t n_groups, const mc_post_args pn) {
    gemv_legacy_body<T, MC_GLU_NONE, 0, KS, 1, MC_LL_SMALL>(w, x, NULL, 0.0f, NULL, NULL, y, n_groups);
    mc_post_norm_last(pn, y, w.rows);
}

/* ---- the narrow forms of the 16-warp kernel (qblock=16x, 16r, 16xr; issue 27) ---------------- */

/* A matrix of at most MC_QBLOCK_COLS columns (SmolLM2's 576, gemma3-270m's 640) gives each lane one
 * or two blocks of 32 columns, so the 16-warp kernel's time goes to what surrounds its dots: x'
 * staged by 36 threads of the first 8 warps, 16 columns each in sequence (for 576 columns), and row
 * groups whose column parts beyond the first hold no block (KS 4 on 18 blocks: one warp of four
 * works, the others wait at the parts' barrier). M's bits change that, never the arithmetic:
 *   1 (MX): every warp stages x', a warp a block of 32 columns and a lane a column: the block's
 *     maximum by an integer warp reduction of |x'|'s bits (the order of finite non-negative floats;
 *     a non-finite block gets the NaN scale whatever its maximum), its quants by the same rounding
 *     and split (q8x_quant.h), the planes' sums by integer reductions (exact). The sum of squares
 *     keeps the 8-warp order: thread t of the first 8 warps sums its half blocks' 16 squares in
 *     sequence, then the warp tree, then those warps in order, as in gemv_legacy_body.
 *   2 (MR, KS > 1, not a GLU at KS 4): the KS warps of a row group split its 4 rows (4 / KS each)
 *     instead of its columns; each sums, for each of its rows, every column part p as lane l of
 *     part p did (blocks 32 p + l, then every 32 KS-th, in that order), the warp tree of each
 *     part, then the parts in order: the same sums, with no barrier between the warps.
 * Per call: what gemv_legacy reads and writes (with MX, the first 8 warps of a block with a norm
 * read x a second time, from L2). */

static_assert(MC_QBLOCK_COLS <= 32 * 8 * 16, "the narrow forms' x: one half block a thread of the first 8 warps");

template <uint32_t T, int GLU, int NORM, int KS, int M, bool PRO = false>
__device__ __forceinline__ void gemv_legacy_narrow_body(const mc_matrix w, const float *x, const float *norm_w,
                                                        float eps, const float *bias, const float *residual, float *y,
                                                        uint32_t n_groups, const mc_pro_args *pro = NULL,
                                                        uint32_t bid = ~0u, uint32_t nbk = 0) {
    constexpr uint32_t W = MC_LL_WARPS;
    constexpr bool MX = (M & 1) != 0, MR = (M & 2) != 0 && KS > 1 && !(GLU != MC_GLU_NONE && KS == 4);
    constexpr uint32_t RPW = MR ? MC_GEMV_ROWS / KS : MC_GEMV_ROWS, NP = MR ? KS : 1;
    extern __shared__ __align__(16) unsigned char llsm[];
    __shared__ float red[2][W][MC_GEMV_ROWS];
    __shared__ float bred[W];
    constexpr bool HM = T == MEMRA_TYPE_Q4_1 || T == MEMRA_TYPE_Q5_1, HH = T == MEMRA_TYPE_Q5_0 || T == MEMRA_TYPE_Q5_1;
    constexpr uint32_t SLOTS = W / KS, U = T == MEMRA_TYPE_Q4_0 ? MC_LL_U : 1, PER_IT = 32 * KS * U;
    const uint32_t nb = w.cols / 32;
    uint4 *xq = (uint4 *)llsm; /* block b at xq[7b ..]: hi, hi, mid, mid, lo, lo, {sums, scale} */
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, sub = warp % KS, slot = warp / KS;
    const uint32_t B = bid == ~0u ? blockIdx.x : bid, NB = bid == ~0u ? gridDim.x : nbk; /* (a merged part's) */
    const uint32_t g0 = (uint32_t)((uint64_t)n_groups * B / NB);
    const uint32_t g1 = (uint32_t)((uint64_t)n_groups * (B + 1) / NB);
    const uint32_t n_my = g0 + slot < g1 ? (g1 - g0 - slot + SLOTS - 1) / SLOTS : 0;
    const uint32_t niter = (nb + PER_IT - 1) / PER_IT, total = n_my * niter;
    const uint32_t rsub = MR ? sub * RPW : 0; /* this warp's first row of a group */
    const uint32_t d_off = (uint32_t)mc_ll_d_off(T, nb), m_off = (uint32_t)mc_ll_m_off(T, nb);
    /* the column part of slot p of this warp's parts (MR: every part; else its own) */
    auto part_of = [&](uint32_t p) { return MR ? p : sub; };

    uint4 wv[U][NP][RPW];
    uint16_t dv[U][NP][RPW], mv[U][NP][RPW];
    uint32_t hv[U][NP][RPW];
    auto load = [&](uint32_t k, uint32_t i) {
        const uint32_t g = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS;
#pragma unroll
        for (uint32_t u = 0; u < U; u++)
#pragma unroll
            for (uint32_t p = 0; p < NP; p++) {
                const uint32_t idx = lane + 32 * part_of(p) + PER_IT * i + 32 * KS * u;
                if (idx < nb) {
#pragma unroll
                    for (uint32_t r = 0; r < RPW; r++) {
                        const uint32_t row = g + rsub + r < w.rows ? g + rsub + r : g;
                        const char *ar = (const char *)w.aux + (size_t)row * w.aux_stride;
                        wv[u][p][r] = __ldcs((const uint4 *)((const char *)w.data + (size_t)row * w.stride) + idx);
                        dv[u][p][r] = __ldcs((const unsigned short *)(ar + d_off) + idx);
                        if (HM)
                            mv[u][p][r] = __ldcs((const unsigned short *)(ar + m_off) + idx);
                        if (HH)
                            hv[u][p][r] = __ldcs((const unsigned int *)ar + idx);
                    }
                }
            }
    };
    if (total > 0)
        load(0, 0);
    /* PRO: the post norm's and this GEMV's norm weights into shared memory before the wait */
    [[maybe_unused]] const float *wps = NULL;
    if constexpr (PRO) {
        __shared__ __align__(16) float wpro[2 * MC_PRO_COLS]; /* pro.w, then norm_w */
        wps = mc_pro_wfetch_start<NORM>(*pro, norm_w, w.cols, wpro);
    }
    mc_wait_prior_grid(MC_TRIGGER_Q8); /* x (and the residual) come from earlier kernels */
    /* PRO: x_new, by the staging threads from their own loads where mc_pro_direct_ok (the half block
     * c2 = tid's 16 columns in dx: 2 nb <= 64), else x = x_new in shared memory */
    [[maybe_unused]] bool direct = false;
    [[maybe_unused]] float dx[16];
    if constexpr (PRO)
        direct = mc_pro_begin<NORM>(*pro, w.cols, wps, !MX, x, norm_w, dx);
    /* x's loads: from shared memory under PRO, else through the read-only path */
    auto xld = [&](size_t i) { return PRO ? x[i] : __ldg(x + i); };
    auto xld4 = [&](size_t i) { return PRO ? *(const float4 *)(x + i) : __ldg((const float4 *)(x + i)); };

    float ss = 0.0f;
    if constexpr (MX) {
        /* every load first (one wait on L2), then each block's quantization: at most XR blocks a
         * warp (cols <= MC_QBLOCK_COLS) and one half block a thread of the first 8 warps */
        constexpr uint32_t XR = MC_QBLOCK_COLS / 32 / W;
        float v[XR];
#pragma unroll
        for (uint32_t r = 0; r < XR; r++) {
            const uint32_t b = warp + W * r;
            v[r] = b < nb ? xld(32 * b + lane) : 0.0f;
            if (NORM && b < nb)
                v[r] *= PRO ? norm_w[32 * b + lane] : __ldg(norm_w + 32 * b + lane);
        }
        float4 sq[4];
        const bool sqs = NORM && tid < 2 * nb; /* 2 nb <= 128: thread t's one half block */
        if (sqs)
#pragma unroll
            for (uint32_t i = 0; i < 4; i++)
                sq[i] = xld4((size_t)tid * 16 + 4 * i);
#pragma unroll
        for (uint32_t r = 0; r < XR; r++) {
            const uint32_t b = warp + W * r;
            if (b >= nb)
                break;
            const bool finite = __all_sync(MC_FULL, isfinite(v[r]));
            const float amax = __uint_as_float(__reduce_max_sync(MC_FULL, __float_as_uint(fabsf(v[r]))));
            int qh, qm, ql;
            mc_q8x_split(__float2int_rn(v[r] * mc_q8x_inv(amax, finite)), &qh, &qm, &ql);
            unsigned char *o = (unsigned char *)(xq + 7 * (size_t)b);
            o[lane] = (unsigned char)(qh & 0xff);
            o[32 + lane] = (unsigned char)(qm & 0xff);
            o[64 + lane] = (unsigned char)(ql & 0xff);
            const int sh = __reduce_add_sync(MC_FULL, qh), sm = __reduce_add_sync(MC_FULL, qm),
                      sl = __reduce_add_sync(MC_FULL, ql);
            if (lane == 0) /* the scale is NaN for a non-finite block: it stays visible */
                ((uint4 *)o)[6] =
                    make_uint4((uint32_t)sh, (uint32_t)sm, (uint32_t)sl, __float_as_uint(mc_q8x_scale(amax, finite)));
        }
        if (sqs) /* the squares of thread t's half block t in sequence (the 8-warp order) */
#pragma unroll
            for (uint32_t i = 0; i < 4; i++) {
                ss = fmaf(sq[i].x, sq[i].x, ss);
                ss = fmaf(sq[i].y, sq[i].y, ss);
                ss = fmaf(sq[i].z, sq[i].z, ss);
                ss = fmaf(sq[i].w, sq[i].w, ss);
            }
    } else if (PRO && direct) { /* the same staging of x_new's half block tid, from registers */
        if (tid < 2 * nb) {
            const uint32_t live = 2 * nb - (tid - lane), pair = live >= 32 ? MC_FULL : (1u << live) - 1u;
            mc_q8x_norm16<NORM, 1, true>(norm_w, (size_t)tid * 16, dx, ss);
            mc_ll_quant16(dx, pair, tid >> 1, tid & 1, xq);
        }
    } else { /* gemv_legacy_body's staging (qdot=auto) */
        for (uint32_t c2 = tid; tid < 32 * MC_LL_STAGE_WARPS && c2 < 2 * nb; c2 += 32 * MC_LL_STAGE_WARPS) {
            const uint32_t live = 2 * nb - (c2 - lane), pair = live >= 32 ? MC_FULL : (1u << live) - 1u;
            const uint32_t c = c2 >> 1, half = c2 & 1;
            float v[16];
            mc_ll_load16<NORM, PRO>(x, norm_w, c, half, v, ss);
            mc_ll_quant16(v, pair, c, half, xq);
        }
    }
    if (NORM && warp < MC_LL_STAGE_WARPS) {
        ss = mc_warp_sum(ss);
        if (lane == 0)
            bred[warp] = ss;
    }
    __syncthreads(); /* the staged x and the warps' sums of squares are visible */
    float rscale = 1.0f;
    if (NORM) { /* the staging warps in order, by every thread */
        float t = 0.0f;
#pragma unroll
        for (uint32_t k = 0; k < MC_LL_STAGE_WARPS; k++)
            t += bred[k];
        rscale = 1.0f / sqrtf(t / (float)w.cols + eps);
    }

    constexpr int OFF = HM ? 0 : HH ? 16 : 8;
    float acc[NP][RPW];
#pragma unroll
    for (uint32_t p = 0; p < NP; p++)
#pragma unroll
        for (uint32_t r = 0; r < RPW; r++)
            acc[p][r] = 0.0f;
    uint32_t k = 0, i = 0;
    for (uint32_t j = 0; j < total; j++) {
        uint4 cur[U][NP][RPW];
        uint16_t cd[U][NP][RPW], cm[U][NP][RPW];
        uint32_t ch[U][NP][RPW];
#pragma unroll
        for (uint32_t u = 0; u < U; u++)
#pragma unroll
            for (uint32_t p = 0; p < NP; p++)
#pragma unroll
                for (uint32_t r = 0; r < RPW; r++) {
                    cur[u][p][r] = wv[u][p][r];
                    cd[u][p][r] = dv[u][p][r];
                    cm[u][p][r] = HM ? mv[u][p][r] : 0;
                    ch[u][p][r] = HH ? hv[u][p][r] : 0;
                }
        if (j + 1 < total)
            load(i + 1 < niter ? k : k + 1, i + 1 < niter ? i + 1 : 0);
#pragma unroll
        for (uint32_t u = 0; u < U; u++)
#pragma unroll
            for (uint32_t p = 0; p < NP; p++) {
                const uint32_t idx = lane + 32 * part_of(p) + PER_IT * i + 32 * KS * u;
                if (idx >= nb)
                    continue;
                const uint4 *xb = xq + 7 * (size_t)idx;
                uint32_t P[3][8];
#pragma unroll
                for (uint32_t q = 0; q < 3; q++) {
                    const uint4 a = xb[2 * q], b = xb[2 * q + 1];
                    P[q][0] = a.x, P[q][1] = a.y, P[q][2] = a.z, P[q][3] = a.w;
                    P[q][4] = b.x, P[q][5] = b.y, P[q][6] = b.z, P[q][7] = b.w;
                }
                const uint4 meta = xb[6];
                const float sx = __uint_as_float(meta.w);
                float sumx = 0.0f;
                if (HM)
                    sumx = fmaf((float)(int)meta.x, 65536.0f, (float)((int)meta.y * 256 + (int)meta.z));
#pragma unroll
                for (uint32_t r = 0; r < RPW; r++) {
                    uint32_t lo[4], hi[4];
                    mc_ll_unpack<T>(cur[u][p][r], ch[u][p][r], lo, hi);
                    int dp[3];
#pragma unroll
                    for (uint32_t q = 0; q < 3; q++) {
                        int a = 0;
#pragma unroll
                        for (uint32_t e = 0; e < 4; e++) {
                            a = __dp4a((int)lo[e], (int)P[q][e], a);
                            a = __dp4a((int)hi[e], (int)P[q][4 + e], a);
                        }
                        dp[q] = a;
                    }
                    if (OFF) {
                        dp[0] -= OFF * (int)meta.x;
                        dp[1] -= OFF * (int)meta.y;
                        dp[2] -= OFF * (int)meta.z;
                    }
                    const float dot = fmaf((float)dp[0], 65536.0f, (float)(dp[1] * 256 + dp[2]));
                    const float d = __half2float(__ushort_as_half(cd[u][p][r]));
                    acc[p][r] = fmaf(dot, d * sx, acc[p][r]);
                    if (HM)
                        acc[p][r] = fmaf(sumx, __half2float(__ushort_as_half(cm[u][p][r])) * sx, acc[p][r]);
                }
            }
        if (++i < niter)
            continue;
        /* the row group's last iteration: the parts' trees, added in order, written */
        float dsum[RPW];
#pragma unroll
        for (uint32_t r = 0; r < RPW; r++) {
            dsum[r] = mc_warp_sum(acc[0][r]);
            acc[0][r] = 0.0f;
        }
        const uint32_t r0 = (g0 + slot + SLOTS * k) * MC_GEMV_ROWS, par = k & 1;
        i = 0;
        k++;
        if constexpr (MR) {
#pragma unroll
            for (uint32_t p = 1; p < NP; p++)
#pragma unroll
                for (uint32_t r = 0; r < RPW; r++) {
                    dsum[r] += mc_warp_sum(acc[p][r]);
                    acc[p][r] = 0.0f;
                }
        } else if (KS > 1) {
            if (lane == 0)
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                    red[par][warp][r] = dsum[r];
            asm volatile("bar.sync %0, %1;" ::"r"(1 + slot), "r"(32 * KS) : "memory");
            if (sub != 0)
                continue;
            for (uint32_t p = 1; p < KS; p++)
#pragma unroll
                for (uint32_t r = 0; r < MC_GEMV_ROWS; r++)
                    dsum[r] += red[par][warp + p][r];
        }
        if (lane != 0)
            continue;
#pragma unroll
        for (uint32_t r = 0; r < RPW; r++)
            dsum[r] *= rscale;
        mc_rows_store<GLU, RPW>(dsum, r0 + rsub, w.rows, bias, residual, y);
    }
}

template <uint32_t T, int GLU, int NORM, int KS, int M>
__global__ void __launch_bounds__(32 * MC_LL_WARPS, 1)
    gemv_legacy_narrow(const mc_matrix w, const float *x, const float *norm_w, float eps, const float *bias,
                       const float *residual, float *y, uint32_t n_groups) {
    gemv_legacy_narrow_body<T, GLU, NORM, KS, M>(w, x, norm_w, eps, bias, residual, y, n_groups);
}

/* postnorm=prologue on the narrow forms: x_new = x + RMSNorm(po) * post_w first (mc_pro_stage), then
 * the kernel with its norm. Per call: what gemv_legacy_narrow reads and writes, and po, x, post_w
 * (cols floats each, from L2), x_new (cols floats, by the first block). */
template <uint32_t T, int GLU, int KS, int M>
__global__ void __launch_bounds__(32 * MC_LL_WARPS, 1)
    gemv_legacy_narrow_pro(const mc_matrix w, const mc_pro_args pro, const float *norm_w, float eps, float *y,
                           uint32_t n_groups) {
    gemv_legacy_narrow_body<T, GLU, 1, KS, M, true>(w, pro.x, norm_w, eps, NULL, NULL, y, n_groups, &pro);
}

/* postnorm=fused on the narrow forms (as gemv_legacy_post). */
template <uint32_t T, int KS, int M>
__global__ void __launch_bounds__(32 * MC_LL_WARPS, 1)
    gemv_legacy_narrow_post(const mc_matrix w, const float *x, float *y, uint32_t n_groups, const mc_post_args pn) {
    gemv_legacy_narrow_body<T, MC_GLU_NONE, 0, KS, M>(w, x, NULL, 0.0f, NULL, NULL, y, n_groups);
    mc_post_norm_last(pn, y, w.rows);
}

/* ---- launch ------------------------------------------------------------------------------- */

// clang-format off
#define MC_LL_EACH_KQ(F, T, G, N) F(T, G, N, 1, 0) F(T, G, N, 2, 0) F(T, G, N, 4, 0) \
                                  F(T, G, N, 1, 1) F(T, G, N, 2, 1) F(T, G, N, 4, 1)
#define MC_LL_EACH_GN(F, T) MC_LL_EACH_KQ(F, T, 0, 0) MC_LL_EACH_KQ(F, T, 0, 1) MC_LL_EACH_KQ(F, T, 1, 0) \
                            MC_LL_EACH_KQ(F, T, 1, 1) MC_LL_EACH_KQ(F, T, 2, 0) MC_LL_EACH_KQ(F, T, 2, 1)
#define MC_LL_EACH(F) MC_LL_EACH_GN(F, MEMRA_TYPE_Q4_0) MC_LL_EACH_GN(F, MEMRA_TYPE_Q4_1) \
                      MC_LL_EACH_GN(F, MEMRA_TYPE_Q5_0) MC_LL_EACH_GN(F, MEMRA_TYPE_Q5_1)
/* the postnorm=fused kernels (no GLU, no norm) */
#define MC_LL_POST_T(F, T) F(T, 1, 0) F(T, 2, 0) F(T, 4, 0) F(T, 1, 1) F(T, 2, 1) F(T, 4, 1)
#define MC_LL_POST_EACH(F) MC_LL_POST_T(F, MEMRA_TYPE_Q4_0) MC_LL_POST_T(F, MEMRA_TYPE_Q4_1) \
                           MC_LL_POST_T(F, MEMRA_TYPE_Q5_0) MC_LL_POST_T(F, MEMRA_TYPE_Q5_1)
/* the small blocks' kernels (qdot=auto): (T, GLU, NORM, KS), and the post ones (T, KS) */
#define MC_LL_SMALL_K(F, T, G, N) F(T, G, N, 1) F(T, G, N, 2) F(T, G, N, 4)
#define MC_LL_SMALL_GN(F, T) MC_LL_SMALL_K(F, T, 0, 0) MC_LL_SMALL_K(F, T, 0, 1) MC_LL_SMALL_K(F, T, 1, 0) \
                             MC_LL_SMALL_K(F, T, 1, 1) MC_LL_SMALL_K(F, T, 2, 0) MC_LL_SMALL_K(F, T, 2, 1)
#define MC_LL_SMALL_EACH(F) MC_LL_SMALL_GN(F, MEMRA_TYPE_Q4_0) MC_LL_SMALL_GN(F, MEMRA_TYPE_Q4_1) \
                            MC_LL_SMALL_GN(F, MEMRA_TYPE_Q5_0) MC_LL_SMALL_GN(F, MEMRA_TYPE_Q5_1)
/* the narrow forms (qdot=auto): (T, GLU, NORM, KS, M), M 1 alone at KS 1; the post ones (T, KS, M) */
#define MC_LL_NARROW_K(F, T, G, N) F(T, G, N, 1, 1) F(T, G, N, 2, 1) F(T, G, N, 2, 2) F(T, G, N, 2, 3) \
                                   F(T, G, N, 4, 1) F(T, G, N, 4, 2) F(T, G, N, 4, 3)
#define MC_LL_NARROW_GN(F, T) MC_LL_NARROW_K(F, T, 0, 0) MC_LL_NARROW_K(F, T, 0, 1) MC_LL_NARROW_K(F, T, 1, 0) \
                              MC_LL_NARROW_K(F, T, 1, 1) MC_LL_NARROW_K(F, T, 2, 0) MC_LL_NARROW_K(F, T, 2, 1)
#define MC_LL_NARROW_EACH(F) MC_LL_NARROW_GN(F, MEMRA_TYPE_Q4_0) MC_LL_NARROW_GN(F, MEMRA_TYPE_Q4_1) \
                             MC_LL_NARROW_GN(F, MEMRA_TYPE_Q5_0) MC_LL_NARROW_GN(F, MEMRA_TYPE_Q5_1)
/* the postnorm=prologue kernels: (T, GLU none or GELU, KS, M) as the narrow forms' */
#define MC_LL_PRO_G(F, T, G) F(T, G, 1, 1) F(T, G, 2, 1) F(T, G, 2, 2) F(T, G, 2, 3) F(T, G, 4, 1) F(T, G, 4, 2) F(T, G, 4, 3)
#define MC_LL_PRO_T(F, T) MC_LL_PRO_G(F, T, 0) MC_LL_PRO_G(F, T, 2)
#define MC_LL_PRO_EACH(F) MC_LL_PRO_T(F, MEMRA_TYPE_Q4_0) MC_LL_PRO_T(F, MEMRA_TYPE_Q4_1) \
                          MC_LL_PRO_T(F, MEMRA_TYPE_Q5_0) MC_LL_PRO_T(F, MEMRA_TYPE_Q5_1)
#define MC_LL_NARROW_POST_T(F, T) F(T, 1, 1) F(T, 2, 1) F(T, 2, 2) F(T, 2, 3) F(T, 4, 1) F(T, 4, 2) F(T, 4, 3)
#define MC_LL_NARROW_POST_EACH(F) MC_LL_NARROW_POST_T(F, MEMRA_TYPE_Q4_0) MC_LL_NARROW_POST_T(F, MEMRA_TYPE_Q4_1) \
                                  MC_LL_NARROW_POST_T(F, MEMRA_TYPE_Q5_0) MC_LL_NARROW_POST_T(F, MEMRA_TYPE_Q5_1)
#define MC_LL_SMALL_POST_T(F, T) F(T, 1) F(T, 2) F(T, 4)
#define MC_LL_SMALL_POST_EACH(F) MC_LL_SMALL_POST_T(F, MEMRA_TYPE_Q4_0) MC_LL_SMALL_POST_T(F, MEMRA_TYPE_Q4_1) \
                                 MC_LL_SMALL_POST_T(F, MEMRA_TYPE_Q5_0) MC_LL_SMALL_POST_T(F, MEMRA_TYPE_Q5_1)
// clang-format on

/* The shared-memory limit of every instance: once per device, from mc_gemv_prepare (outside any
 * capture). */
cudaError_t mc_gemv_legacy_prepare(void) {
    cudaError_t e = cudaSuccess;
#define MC_LL_SET(T, G, N, K, Q)                                                                                       \
    if ((e = cudaFuncSetAttribute(gemv_legacy<T, G, N, K, Q>, cudaFuncAttributeMaxDynamicSharedMemorySize,            \
                                  (int)MC_LL_SMEM_MAX)) != cudaSuccess)                                                \
        return e;
    MC_LL_EACH(MC_LL_SET)
#undef MC_LL_SET
#define MC_LL_SET_POST(T, K, Q)                                                                                        \
    if ((e = cudaFuncSetAttribute(gemv_legacy_post<T, K, Q>, cudaFuncAttributeMaxDynamicSharedMemorySize,              \
                                  (int)MC_LL_SMEM_MAX)) != cudaSuccess)                                                \
        return e;
    MC_LL_POST_EACH(MC_LL_SET_POST)
#undef MC_LL_SET_POST
#define MC_LL_SET_SMALL(T, G, N, K)                                                                                    \
    if ((e = cudaFuncSetAttribute(gemv_legacy_small<T, G, N, K>, cudaFuncAttributeMaxDynamicSharedMemorySize,         \
                                  (int)MC_LL_SMEM_MAX)) != cudaSuccess)                                                \
        return e;
    MC_LL_SMALL_EACH(MC_LL_SET_SMALL)
#undef MC_LL_SET_SMALL
#define MC_LL_SET_SMALL_POST(T, K)                                                                                     \
    if ((e = cudaFuncSetAttribute(gemv_legacy_small_post<T, K>, cudaFuncAttributeMaxDynamicSharedMemorySize,          \
                                  (int)MC_LL_SMEM_MAX)) != cudaSuccess)                                                \
        return e;
    MC_LL_SMALL_POST_EACH(MC_LL_SET_SMALL_POST)
#undef MC_LL_SET_SMALL_POST
    return e;
}

/* Column parts: cuda_common.cuh's mc_ksplit_fill (a function of the row count). */
static uint32_t mc_ll_ksplit(uint32_t rows) { return mc_ksplit_fill(rows); }

/* qblock: whether a matrix runs in the small blocks (qdot=auto only): qblock=4 always, 16 (16x, 16r, 16xr) never,
 * auto where the matrix is narrow (cols <= MC_QBLOCK_COLS: x' is cheap to stage once a block) and
 * its 16-warp grid leaves multiprocessors idle. A function of the shapes, the key and the device's
 * multiprocessor count; never of the bits (both blocks compute the same). */
static bool mc_ll_small(const mc_config *c, const mc_matrix *w, int qd, uint32_t sms) {
    if (!qd || c->qblock == MC_QBLOCK_16 || c->qblock >= MC_QBLOCK_16X)
        return false;
    if (c->qblock == MC_QBLOCK_4)
        return true;
    const uint32_t n_groups = (w->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS, slots = MC_LL_WARPS / mc_ll_ksplit(w->rows);
    return w->cols <= MC_QBLOCK_COLS && (n_groups + slots - 1) / slots < sms;
}

/* qblock=16x, 16r, 16xr: the narrow form's M (1, 2, 3) for a matrix of at most MC_QBLOCK_COLS columns
 * under qdot=auto, else 0 (the 16-warp kernel). At KS 1 the rows split is the 16-warp kernel's own
 * (M & 1). A function of the shapes and the key; never of the bits. */
static uint32_t mc_ll_narrow(const mc_config *c, const mc_matrix *w, int qd, uint32_t ks) {
    if (!qd || w->cols > MC_QBLOCK_COLS)
        return 0;
    const uint32_t m = c->qblock == MC_QBLOCK_16X ? 1 : c->qblock == MC_QBLOCK_16R ? 2 : c->qblock == MC_QBLOCK_16XR ? 3 : 0;
    return ks == 1 ? m & 1u : m;
}

template <uint32_t T, int GLU, int NORM, int KS, int M>
static cudaError_t mc_ll_narrow_go(const cudaLaunchConfig_t *cfg, const mc_matrix *w, const float *x,
                                   const float *norm_w, float eps, const float *bias, const float *residual, float *y,
                                   uint32_t n_groups, const mc_post_args *pn, const mc_pro_args *pro = NULL) {
    if (pro) { /* postnorm=prologue: a norm, no bias or residual, GLU none or GELU (gemma3) */
        if constexpr (NORM == 1 && GLU != MC_GLU_SILU)
            return bias || residual ? cudaErrorInvalidValue
                                    : cudaLaunchKernelEx(cfg, gemv_legacy_narrow_pro<T, GLU, KS, M>, *w, *pro, norm_w,
                                                         eps, y, n_groups);
        else
            return cudaErrorInvalidValue;
    }
    if (pn)
        return cudaLaunchKernelEx(cfg, gemv_legacy_narrow_post<T, KS, M>, *w, x, y, n_groups, *pn);
    return cudaLaunchKernelEx(cfg, gemv_legacy_narrow<T, GLU, NORM, KS, M>, *w, x, norm_w, eps, bias, residual, y,
                              n_groups);
}

/* One launch: gemv_legacy, or with pn gemv_legacy_post (no GLU, no norm); their small-block forms
 * where mc_ll_small says so, their narrow forms where mc_ll_narrow does. */
template <uint32_t T, int GLU, int NORM, int KS, int QD>
static cudaError_t mc_ll_launch(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                                const float *bias, const float *residual, float *y, cudaStream_t st,
                                const mc_post_args *pn = NULL, const mc_pro_args *pro = NULL) {
    cudaError_t e = mc_gemv_prepare();
    int dev = 0;
    if (e != cudaSuccess || (e = cudaGetDevice(&dev)) != cudaSuccess)
        return e;
    const bool small = mc_ll_small(c, w, QD, (uint32_t)mc_sm_count[dev]);
    const uint32_t warps = small ? MC_LL_SMALL : MC_LL_WARPS;
    const uint32_t n_groups = (w->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS, slots = warps / KS;
    const uint32_t need = small || !mc_qgrid_fills(c->qgrid, w->cols, 0) ? (n_groups + slots - 1) / slots : n_groups;
    const uint32_t cap = mc_sm_count[dev] * (MC_LL_WARPS / warps);
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(need < cap ? need : cap);
    cfg.blockDim = dim3(32 * warps);
    cfg.dynamicSmemBytes = mc_ll_smem(w->cols, QD);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    const uint32_t nm = small ? 0 : mc_ll_narrow(c, w, QD, KS);
    if ((pn && (GLU != MC_GLU_NONE || NORM)) || (pro && (!nm || pn)))
        e = cudaErrorInvalidValue; /* the prologue only on the narrow forms (mc_gemv_pro_serves) */
    else if (nm) {
        if constexpr (QD && KS == 1)
            e = mc_ll_narrow_go<T, GLU, NORM, KS, 1>(&cfg, w, x, norm_w, eps, bias, residual, y, n_groups, pn, pro);
        else if constexpr (QD)
            e = nm == 1   ? mc_ll_narrow_go<T, GLU, NORM, KS, 1>(&cfg, w, x, norm_w, eps, bias, residual, y, n_groups, pn, pro)
                : nm == 2 ? mc_ll_narrow_go<T, GLU, NORM, KS, 2>(&cfg, w, x, norm_w, eps, bias, residual, y, n_groups, pn, pro)
                          : mc_ll_narrow_go<T, GLU, NORM, KS, 3>(&cfg, w, x, norm_w, eps, bias, residual, y, n_groups, pn, pro);
        else
            e = cudaErrorInvalidValue; /* never: mc_ll_narrow is 0 under qdot=float */
    } else if (pn && small)
        e = cudaLaunchKernelEx(&cfg, gemv_legacy_small_post<T, KS>, *w, x, y, n_groups, *pn);
    else if (pn)
        e = cudaLaunchKernelEx(&cfg, gemv_legacy_post<T, KS, QD>, *w, x, y, n_groups, *pn);
    else if (small)
        e = cudaLaunchKernelEx(&cfg, gemv_legacy_small<T, GLU, NORM, KS>, *w, x, norm_w, eps, bias, residual, y,
                               n_groups);
    else
        e = cudaLaunchKernelEx(&cfg, gemv_legacy<T, GLU, NORM, KS, QD>, *w, x, norm_w, eps, bias, residual, y,
                               n_groups);
    if (e != cudaSuccess)
        return e;
    return cudaGetLastError();
}

template <uint32_t T, int GLU, int NORM, int QD>
static cudaError_t mc_ll_ks(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                            const float *bias, const float *residual, float *y, cudaStream_t st,
                            const mc_post_args *pn = NULL) {
    switch (mc_ll_ksplit(w->rows)) {
    case 1: return mc_ll_launch<T, GLU, NORM, 1, QD>(c, w, x, norm_w, eps, bias, residual, y, st, pn);
    case 2: return mc_ll_launch<T, GLU, NORM, 2, QD>(c, w, x, norm_w, eps, bias, residual, y, st, pn);
    default: return mc_ll_launch<T, GLU, NORM, 4, QD>(c, w, x, norm_w, eps, bias, residual, y, st, pn);
    }
}

template <uint32_t T, int GLU>
static cudaError_t mc_ll_typed(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                               const float *bias, const float *residual, float *y, cudaStream_t st) {
    const bool qd = c->qdot != MC_QDOT_FLOAT;
    if (norm_w)
        return qd ? mc_ll_ks<T, GLU, 1, 1>(c, w, x, norm_w, eps, bias, residual, y, st)
                  : mc_ll_ks<T, GLU, 1, 0>(c, w, x, norm_w, eps, bias, residual, y, st);
    return qd ? mc_ll_ks<T, GLU, 0, 1>(c, w, x, norm_w, eps, bias, residual, y, st)
              : mc_ll_ks<T, GLU, 0, 0>(c, w, x, norm_w, eps, bias, residual, y, st);
}

template <int GLU>
static cudaError_t mc_ll_glu(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                             const float *bias, const float *residual, float *y, cudaStream_t st) {
    switch (w->type) {
    case MEMRA_TYPE_Q4_0: return mc_ll_typed<MEMRA_TYPE_Q4_0, GLU>(c, w, x, norm_w, eps, bias, residual, y, st);
    case MEMRA_TYPE_Q4_1: return mc_ll_typed<MEMRA_TYPE_Q4_1, GLU>(c, w, x, norm_w, eps, bias, residual, y, st);
    case MEMRA_TYPE_Q5_0: return mc_ll_typed<MEMRA_TYPE_Q5_0, GLU>(c, w, x, norm_w, eps, bias, residual, y, st);
    case MEMRA_TYPE_Q5_1: return mc_ll_typed<MEMRA_TYPE_Q5_1, GLU>(c, w, x, norm_w, eps, bias, residual, y, st);
    default: return cudaErrorInvalidValue;
    }
}

/* postnorm=prologue: the narrow forms with a norm (mc_gemv_legacy_pro_serves). */
template <uint32_t T, int GLU>
static cudaError_t mc_ll_pro_typed(const mc_config *c, const mc_matrix *w, const mc_pro_args *pro, const float *norm_w,
                                   float eps, float *y, cudaStream_t st) {
    switch (mc_ll_ksplit(w->rows)) {
    case 1: return mc_ll_launch<T, GLU, 1, 1, 1>(c, w, pro->x, norm_w, eps, NULL, NULL, y, st, NULL, pro);
    case 2: return mc_ll_launch<T, GLU, 1, 2, 1>(c, w, pro->x, norm_w, eps, NULL, NULL, y, st, NULL, pro);
    default: return mc_ll_launch<T, GLU, 1, 4, 1>(c, w, pro->x, norm_w, eps, NULL, NULL, y, st, NULL, pro);
    }
}

template <int GLU>
static cudaError_t mc_ll_pro_glu(const mc_config *c, const mc_matrix *w, const mc_pro_args *pro, const float *norm_w,
                                 float eps, float *y, cudaStream_t st) {
    switch (w->type) {
    case MEMRA_TYPE_Q4_0: return mc_ll_pro_typed<MEMRA_TYPE_Q4_0, GLU>(c, w, pro, norm_w, eps, y, st);
    case MEMRA_TYPE_Q4_1: return mc_ll_pro_typed<MEMRA_TYPE_Q4_1, GLU>(c, w, pro, norm_w, eps, y, st);
    case MEMRA_TYPE_Q5_0: return mc_ll_pro_typed<MEMRA_TYPE_Q5_0, GLU>(c, w, pro, norm_w, eps, y, st);
    case MEMRA_TYPE_Q5_1: return mc_ll_pro_typed<MEMRA_TYPE_Q5_1, GLU>(c, w, pro, norm_w, eps, y, st);
    default: return cudaErrorInvalidValue;
    }
}

/* Whether mc_gemv_legacy_pro runs w: a Q4_0..Q5_1 matrix of at most MC_PRO_COLS columns on a narrow
 * form (qdot=auto, qblock=16x, 16r or 16xr, mc_ll_narrow not 0 at w's column split), GLU none or
 * GELU. A function of the keys and the shapes (qblock=auto and 4 may choose the small blocks by the
 * device's multiprocessor count: no prologue there). */
bool mc_gemv_legacy_pro_serves(const mc_config *c, const mc_matrix *w, int glu) {
    if (!mc_ll_is(w->type) || w->cols == 0 || w->cols % 32 || w->cols > MC_PRO_COLS || !w->aux)
        return false;
    if (glu != MC_GLU_NONE && glu != MC_GLU_GELU)
        return false;
    if (glu != MC_GLU_NONE && w->rows % 2)
        return false;
    if (c->qdot == MC_QDOT_FLOAT || c->qblock < MC_QBLOCK_16X)
        return false;
    return mc_ll_narrow(c, w, 1, mc_ll_ksplit(w->rows)) != 0;
}

cudaError_t mc_gemv_legacy_pro(const mc_config *c, int glu, const mc_matrix *w, const mc_pro_args *pro,
                               const float *norm_w, float eps, float *y, cudaStream_t st) {
    if (!pro || !pro->po || !pro->x || !pro->w || !norm_w || !mc_gemv_legacy_pro_serves(c, w, glu))
        return cudaErrorInvalidValue;
    return glu == MC_GLU_GELU ? mc_ll_pro_glu<MC_GLU_GELU>(c, w, pro, norm_w, eps, y, st)
                              : mc_ll_pro_glu<MC_GLU_NONE>(c, w, pro, norm_w, eps, y, st);
}

/* qkvparts=merged: a layer's q/k/v in two parts of two types (gemma3's Q4_K_M files: q and k Q5_0, v
 * Q8_0 in half the layers) as one launch: blocks [0, grid_a) run part a's narrow body (T, the 16r
 * rows split, KSA) on its own share of row groups, the others part b's Q8_0 integer body (16 warps,
 * KSB), each with the attention norm, and with PRO the prologue (postnorm=prologue: pa and pb, whose
 * x is the step's input; pb.out is NULL, so part a's first block stores x_new). Each part's blocks
 * take the row groups and compute the sums they take in their own launch (a block's share is a
 * function of its index in the part and the part's block count, which changes no row's
 * arithmetic), so the bits are the two launches'; the second part no longer waits for the first.
 * Per call: what the two launches read and write. */
template <uint32_t T, int KSA, int KSB, bool PRO>
__global__ void __launch_bounds__(32 * MC_LL_WARPS, 1)
    gemv_qkv2(const mc_matrix wa, const mc_matrix wb, const float *x, const mc_pro_args pa, const mc_pro_args pb,
              const float *norm_w, float eps, float *ya, float *yb, uint32_t nga, uint32_t ngb, uint32_t grid_a) {
    if (blockIdx.x < grid_a)
        gemv_legacy_narrow_body<T, MC_GLU_NONE, 1, KSA, 2, PRO>(wa, x, norm_w, eps, NULL, NULL, ya, nga,
                                                                PRO ? &pa : NULL, blockIdx.x, grid_a);
    else
        gemv_q8_0_int_body<0, 1, KSB, 16, PRO>(wb, x, norm_w, eps, NULL, NULL, yb, ngb, PRO ? &pb : NULL,
                                               blockIdx.x - grid_a, gridDim.x - grid_a);
}
static_assert(MC_LL_WARPS == 16, "the merged launch's parts share one block size");
// clang-format off
#define MC_QKV2_T(F, T) F(T, 2, 2, 0) F(T, 2, 4, 0) F(T, 4, 2, 0) F(T, 4, 4, 0) \
                        F(T, 2, 2, 1) F(T, 2, 4, 1) F(T, 4, 2, 1) F(T, 4, 4, 1)
#define MC_QKV2_EACH(F) MC_QKV2_T(F, MEMRA_TYPE_Q4_0) MC_QKV2_T(F, MEMRA_TYPE_Q5_0)
// clang-format on

cudaError_t mc_gemv_qkv2(const mc_config *c, const mc_matrix *wa, const mc_matrix *wb, const float *x,
                         const mc_pro_args *pro, const float *norm_w, float eps, float *ya, float *yb,
                         cudaStream_t st) {
    if ((pro ? !pro->po || !pro->x || !pro->w : !x) || !norm_w || wa->cols != wb->cols)
        return cudaErrorInvalidValue;
    if (wb->type == MEMRA_TYPE_Q6_K) /* the K-quant mixes' parts (gemv_kquant.cu); no prologue form there */
        return pro ? cudaErrorNotSupported : mc_gemv_kquant_qkv2(c, wa, wb, x, norm_w, eps, ya, yb, st);
    const uint32_t ksa = mc_ll_ksplit(wa->rows), ksb = mc_q8x_ksplit(wb->rows);
    /* the forms compiled: part a Q4_0 or Q5_0 on the 16r narrow form (M 2; qblock=16r never takes the
     * small blocks) at KS 2 or 4, part b on the 16-warp Q8_0 kernel (q8=auto) at KS 2 or 4, the kernels
     * mc_gemv and mc_gemv_pro choose for them; the caller launches the parts apart elsewhere */
    const bool serves_a = pro ? mc_gemv_legacy_pro_serves(c, wa, MC_GLU_NONE)
                              : wa->cols % 32 == 0 && wa->cols <= MC_QBLOCK_COLS && wa->aux && c->qdot != MC_QDOT_FLOAT;
    const bool serves_b = pro ? mc_gemv_q8_pro_serves(c, wb, MC_GLU_NONE) : mc_gemv_q8_serves(c, wb) != 0;
    if (!serves_a || !serves_b || c->qblock != MC_QBLOCK_16R || mc_ll_narrow(c, wa, 1, ksa) != 2 ||
        c->q8 != MC_Q8_AUTO || ksa < 2 || ksb < 2 || (wa->type != MEMRA_TYPE_Q4_0 && wa->type != MEMRA_TYPE_Q5_0))
        return cudaErrorNotSupported;
    cudaError_t e = mc_gemv_prepare();
    int dev = 0;
    if (e != cudaSuccess || (e = cudaGetDevice(&dev)) != cudaSuccess)
        return e;
    const uint32_t nga = (wa->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS,
                   ngb = (wb->rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS;
    /* each part: the fewest blocks that give each warp slot a row group (part a's own launch; part b's
     * own launch takes a block a row group, which leaves slots idle) */
    const uint32_t sm = (uint32_t)mc_sm_count[dev], na = (nga + 16 / ksa - 1) / (16 / ksa);
    const uint32_t nb = (ngb + 16 / ksb - 1) / (16 / ksb);
    const uint32_t grid_a = na < sm ? na : sm, grid_b = nb < sm ? nb : sm;
    const uint32_t sa = mc_ll_smem(wa->cols, 1), sb = mc_q8x_smem(wb->cols);
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(grid_a + grid_b);
    cfg.blockDim = dim3(32 * MC_LL_WARPS);
    cfg.dynamicSmemBytes = sa > sb ? sa : sb; /* at most 2,048 columns: under the 48 KB default */
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    mc_pro_args pa, pb;
    memset(&pa, 0, sizeof pa);
    if (pro)
        pa = *pro;
    pb = pa;
    pb.out = NULL;
    const float *xin = pro ? pro->x : x;
    const int P = pro ? 1 : 0;
    e = cudaErrorNotSupported;
#define MC_QKV2_GO(TT, KA, KB, PP)                                                                                     \
    if (wa->type == TT && ksa == KA && ksb == KB && P == PP)                                                           \
        e = cudaLaunchKernelEx(&cfg, gemv_qkv2<TT, KA, KB, PP>, *wa, *wb, xin, pa, pb, norm_w, eps, ya, yb, nga, ngb,  \
                               grid_a);
    MC_QKV2_EACH(MC_QKV2_GO)
#undef MC_QKV2_GO
    return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t mc_gemv_legacy(const mc_config *c, int glu, const mc_matrix *w, const float *x, const float *norm_w,
                           float eps, const float *bias, const float *residual, float *y, cudaStream_t st) {
    if (!mc_ll_is(w->type) || w->cols == 0 || w->cols % 32 || w->cols > MC_LL_COLS_MAX || !w->aux)
        return cudaErrorInvalidValue;
    switch (glu) {
    case MC_GLU_NONE: return mc_ll_glu<MC_GLU_NONE>(c, w, x, norm_w, eps, bias, residual, y, st);
    case MC_GLU_SILU:
        return w->rows % 2 ? cudaErrorInvalidValue : mc_ll_glu<MC_GLU_SILU>(c, w, x, norm_w, eps, NULL, NULL, y, st);
    case MC_GLU_GELU:
        return w->rows % 2 ? cudaErrorInvalidValue : mc_ll_glu<MC_GLU_GELU>(c, w, x, norm_w, eps, NULL, NULL, y, st);
    default: return cudaErrorInvalidValue;
    }
}

/* One launch of gemv_legacy_experts (as mc_kq_experts_t). */
template <uint32_t T, int GLU, int KS, int QD>
static cudaError_t mc_ll_experts_t(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                   uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                   const float *norm_w, float eps, float *y, uint32_t ldy, cudaStream_t st) {
    static int ready[MC_MAX_DEVICES]; /* this instantiation's shared-memory limit set on the device */
    const cudaError_t e = mc_gemv_prepare();
    return e != cudaSuccess ? e
                            : mc_experts_go(c, gemv_legacy_experts<T, GLU, KS, QD>, ready, (int)MC_LL_SMEM_MAX,
                                            MC_LL_WARPS, KS, mc_ll_smem(w->cols, QD), w, rows_e, sel, k, e0, e1, x,
                                            ldx, norm_w, eps, y, ldy, st);
}

cudaError_t mc_gemv_experts_legacy(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                   uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                   const float *norm_w, float eps, int glu, float *y, uint32_t ldy, cudaStream_t st) {
    if (!mc_ll_is(w->type) || w->cols == 0 || w->cols % 32 || w->cols > MC_LL_COLS_MAX || !w->aux ||
        (glu != MC_GLU_NONE && glu != MC_GLU_SILU) || (glu != MC_GLU_NONE) != (norm_w != NULL) || k == 0 ||
        k > 65535 || rows_e == 0 || (glu && rows_e % 2)) /* the experts' range: mc_experts_go */
        return cudaErrorInvalidValue;
    const uint64_t all = (uint64_t)rows_e * k; /* the column split of a GEMV of all k experts' rows */
    const uint32_t ks = mc_ll_ksplit(all < 0xffffffffu ? (uint32_t)all : 0xffffffffu);
    const bool qd = c->qdot != MC_QDOT_FLOAT;
#define MC_LLE_KS(T, G, Q)                                                                                             \
    (ks == 1   ? mc_ll_experts_t<T, G, 1, Q>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st)           \
     : ks == 2 ? mc_ll_experts_t<T, G, 2, Q>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st)           \
               : mc_ll_experts_t<T, G, 4, Q>(c, w, rows_e, sel, k, e0, e1, x, ldx, norm_w, eps, y, ldy, st))
#define MC_LLE(T)                                                                                                      \
    (glu ? (qd ? MC_LLE_KS(T, MC_GLU_SILU, 1) : MC_LLE_KS(T, MC_GLU_SILU, 0))                                           \
         : (qd ? MC_LLE_KS(T, MC_GLU_NONE, 1) : MC_LLE_KS(T, MC_GLU_NONE, 0)))
    switch (w->type) {
    case MEMRA_TYPE_Q4_0: return MC_LLE(MEMRA_TYPE_Q4_0);
    case MEMRA_TYPE_Q4_1: return MC_LLE(MEMRA_TYPE_Q4_1);
    case MEMRA_TYPE_Q5_0: return MC_LLE(MEMRA_TYPE_Q5_0);
    default: return MC_LLE(MEMRA_TYPE_Q5_1);
    }
#undef MC_LLE
#undef MC_LLE_KS
}

cudaError_t mc_gemv_legacy_post(const mc_config *c, const mc_matrix *w, const float *x, float *y,
                                const mc_post_args *pn, cudaStream_t st) {
    if (!mc_ll_is(w->type) || w->cols == 0 || w->cols % 32 || w->cols > MC_LL_COLS_MAX || !w->aux || !pn)
        return cudaErrorInvalidValue;
    const bool qd = c->qdot != MC_QDOT_FLOAT;
#define MC_LL_P(T)                                                                                                     \
    (qd ? mc_ll_ks<T, MC_GLU_NONE, 0, 1>(c, w, x, NULL, 0.0f, NULL, NULL, y, st, pn)                                   \
        : mc_ll_ks<T, MC_GLU_NONE, 0, 0>(c, w, x, NULL, 0.0f, NULL, NULL, y, st, pn))
    switch (w->type) {
    case MEMRA_TYPE_Q4_0: return MC_LL_P(MEMRA_TYPE_Q4_0);
    case MEMRA_TYPE_Q4_1: return MC_LL_P(MEMRA_TYPE_Q4_1);
    case MEMRA_TYPE_Q5_0: return MC_LL_P(MEMRA_TYPE_Q5_0);
    default: return MC_LL_P(MEMRA_TYPE_Q5_1);
    }
#undef MC_LL_P
}

cudaError_t mc_gemv_legacy_trigger_addr(void **p) { return cudaGetSymbolAddress(p, mc_trigger_mask); }

const char *mc_gemv_legacy_family(const void *f) {
    static const mc_family_row table[] = {
#define MC_LL_ROW(T, G, N, K, Q) {(const void *)gemv_legacy<T, G, N, K, Q>, (G) ? "gemv_swiglu" : "gemv"},
        MC_LL_EACH(MC_LL_ROW)
#undef MC_LL_ROW
#define MC_LL_ROW_POST(T, K, Q) {(const void *)gemv_legacy_post<T, K, Q>, "gemv_postnorm"},
            MC_LL_POST_EACH(MC_LL_ROW_POST)
#undef MC_LL_ROW_POST
#define MC_LL_ROW_SMALL(T, G, N, K) {(const void *)gemv_legacy_small<T, G, N, K>, (G) ? "gemv_swiglu" : "gemv"},
                MC_LL_SMALL_EACH(MC_LL_ROW_SMALL)
#undef MC_LL_ROW_SMALL
#define MC_LL_ROW_SMALL_POST(T, K) {(const void *)gemv_legacy_small_post<T, K>, "gemv_postnorm"},
                    MC_LL_SMALL_POST_EACH(MC_LL_ROW_SMALL_POST)
#undef MC_LL_ROW_SMALL_POST
#define MC_LL_ROW_NARROW(T, G, N, K, M) {(const void *)gemv_legacy_narrow<T, G, N, K, M>, (G) ? "gemv_swiglu" : "gemv"},
                        MC_LL_NARROW_EACH(MC_LL_ROW_NARROW)
#undef MC_LL_ROW_NARROW
#define MC_LL_ROW_NARROW_POST(T, K, M) {(const void *)gemv_legacy_narrow_post<T, K, M>, "gemv_postnorm"},
                            MC_LL_NARROW_POST_EACH(MC_LL_ROW_NARROW_POST)
#undef MC_LL_ROW_NARROW_POST
#define MC_LL_ROW_PRO(T, G, K, M) {(const void *)gemv_legacy_narrow_pro<T, G, K, M>, (G) ? "gemv_prologue_glu" : "gemv_prologue"},
                                MC_LL_PRO_EACH(MC_LL_ROW_PRO)
#undef MC_LL_ROW_PRO
#define MC_QKV2_ROW(T, KA, KB, P) {(const void *)gemv_qkv2<T, KA, KB, P>, (P) ? "gemv_prologue" : "gemv"},
                                    MC_QKV2_EACH(MC_QKV2_ROW)
#undef MC_QKV2_ROW
#define MC_LL_ROW_EXP(T, G, K) {(const void *)gemv_legacy_experts<T, G, K, 0>, "gemv_experts"}, \
    {(const void *)gemv_legacy_experts<T, G, K, 1>, "gemv_experts"},
#define MC_LL_EXP_T(T) MC_LL_ROW_EXP(T, MC_GLU_NONE, 1) MC_LL_ROW_EXP(T, MC_GLU_NONE, 2) MC_LL_ROW_EXP(T, MC_GLU_NONE, 4) \
    MC_LL_ROW_EXP(T, MC_GLU_SILU, 1) MC_LL_ROW_EXP(T, MC_GLU_SILU, 2) MC_LL_ROW_EXP(T, MC_GLU_SILU, 4)
        MC_LL_EXP_T(MEMRA_TYPE_Q4_0) MC_LL_EXP_T(MEMRA_TYPE_Q4_1) MC_LL_EXP_T(MEMRA_TYPE_Q5_0)
            MC_LL_EXP_T(MEMRA_TYPE_Q5_1)
#undef MC_LL_EXP_T
#undef MC_LL_ROW_EXP
    };
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
