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
 * five partial sums per element (levels 0 and 1 in registers, 2 to 4 and the parts' sum in shared
 * memory, a slot a thread): after the class at position n of that order, its sum is added to the
 * stack's entries while n's low bits are ones (each the left subtree of the same level), as
 * mc_warp_sum adds them. After the 32 classes of a part the stack holds the part's tree; the parts
 * are added in order, as decode's. So the bits are decode's by construction (the check program
 * memra_cuda_check_chunk_mma compares them per row, with a negative control: MC_CHUNK_MMA_FAULT,
 * the classes in lane order, a tree decode does not build).
 *
 * Block: 64 NN threads (2 x NN warps of 32 weight rows x 8 x rows; NN = 4 by default, two blocks an
 * SM), a tile of 64 weight rows x 8 NN x rows; a step stages MC_MMA_JB chunk slots (mc_mma_plan: a
 * class's chunks, or the chunks of 2, 4 or 8 classes where classes are short, so a step is never a
 * sliver) of the tile's weights, three planes and scales in dynamic shared memory (cp.async,
 * double-buffered: the next step's loads in flight while this one computes), and a warp reads its
 * fragments with ldmatrix (one for its 32 weight rows, one for the three planes of its 8 x rows);
 * a step whose slots all hold chunks runs software-pipelined by half slots (the next half's loads
 * and MMAs issued before this half's float chain). Per call: the weights (rows x cols bytes and
 * their block scales) once per tile of x rows (consecutive blocks take the same weights, so L2
 * serves the repeats), the planes (M x cols x 3 bytes and M x cols / 16 scales) once per 64 weight
 * rows. */
#include "chunk_kq.h"
#include "cuda_common.cuh"
#include "mma_s8.cuh"

#define MC_MMA_BR 64u /* weight rows of a block's tile */
#define MC_MMA_JB 8u  /* chunk slots a step stages (mc_mma_plan: one class's, or several classes') */
/* The default tile: MC_MMA_NN warps along x (8 x rows each), so 32 x rows and 256 threads, two
 * blocks an SM (on the H200 2-5% faster than 64 x rows in one block of 512, 16-27% faster than 16 x
 * rows at four blocks an SM, 4-7% faster than 4 slots a step at three; the same bits). */
#define MC_MMA_NN 4u
#define MC_MMA_MAGIC 0x4B400000 /* the bits of 1.5 * 2^23 */
#define MC_MMA_MAGIC_F 12582912.0f
#define MC_MMA_TREE 4u /* the tree's levels 2, 3, 4 and the parts' sum, kept in shared memory */
/* MC_CHUNK_MMA_OPT (chunk=mma-opt) runs the kernel with fewer stalls and instructions (OPT: the
 * weight scales converted when stored, the class ends placed when compiled). */

/* One step's staging buffer, for a tile of BT x rows and JB slots. */
template <uint32_t BT, uint32_t JB> struct mc_mma_stage {
    uint4 w[JB][MC_MMA_BR]; /* weight chunks */
    uint4 x[JB][3][BT];     /* plane hi, mid, lo chunks */
    float s[JB][BT];        /* the x chunks' scales */
    float d[JB][MC_MMA_BR]; /* the weight blocks' scales, as floats, rows 16k + i and 16k + i + 8
                             * side by side (mc_mma_dpos) */
};
#define MC_MMA_FIN_LD (MC_MMA_BR + 1u)
/* The dynamic shared memory of a tile of 8 NN x rows: two stages, then the tree's levels kept
 * there (MC_MMA_TREE x 8 floats a thread, [level][element][thread]). */
template <uint32_t NN, uint32_t JB> constexpr size_t mc_mma_smem(void) {
    return 2 * sizeof(mc_mma_stage<8 * NN, JB>) + sizeof(float) * MC_MMA_TREE * 8 * 64 * NN;
}

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
template <int GLU, uint32_t NN, uint32_t JB, uint32_t MINB, bool OPT>
__global__ void __launch_bounds__(64 * NN, MINB)
    chunk_gemv_q8_mma(const mc_matrix w, const uint4 *xh, const uint4 *xm, const uint4 *xl, const float *xs,
                      const float *rs, const float *bias, const float *res, uint32_t ldr, float *y, uint32_t ldy,
                      uint32_t M, uint32_t ks, uint32_t fault) {
    constexpr uint32_t BT = 8 * NN, NT = 64 * NN;
    constexpr uint32_t WPT = (JB * MC_MMA_BR + NT - 1) / NT; /* weight chunks a thread stages */
    typedef mc_mma_stage<BT, JB> stage;
    static_assert(sizeof(float) * BT * MC_MMA_FIN_LD <= 2 * sizeof(stage), "the final tile fits");
    static_assert(JB * BT <= NT, "an x chunk a thread at most");
    extern __shared__ __align__(16) unsigned char smraw[];
    stage *sb = (stage *)smraw;
    float *tree = (float *)(smraw + 2 * sizeof(stage)); /* [level][element][thread] */
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const uint32_t m0 = (warp & 1) * 32, n0 = (warp >> 1) * 8;
    const uint32_t t0 = blockIdx.x * BT, r0 = blockIdx.y * MC_MMA_BR;
    const uint32_t nch = w.cols / 16, nsc = w.cols / MEMRA_Q8_0_BLOCK;
    const mc_mma_plan P = mc_mma_plan_make<JB>(nch, ks);
    /* this thread's staging: weight row i % 64 of slot i / 64 for i = tid + k NT below 64 JB; x row
     * tid % BT of slot tid / BT */
    const uint32_t sxr = tid % BT;
    const mc_mma_slot sxs = mc_mma_slot_of<JB>(P, tid / BT);
    mc_mma_slot sws[WPT];
#pragma unroll
    for (uint32_t k = 0; k < WPT; k++)
        sws[k] = mc_mma_slot_of<JB>(P, (tid + k * NT) / MC_MMA_BR);
    const uint32_t gt = t0 + sxr < M ? t0 + sxr : M - 1;
    const size_t xoff = (size_t)gt * nch;

    /* the weight scales of the next step: as floats (OPT false), or their half's bits, converted
     * when stored (OPT: the conversion then does not wait on the load within the step's issue) */
    float dreg[WPT];
    unsigned short dbits[WPT];
#pragma unroll
    for (uint32_t k = 0; k < WPT; k++)
        dreg[k] = 0.0f, dbits[k] = 0;
    /* issues step a's loads into buffer b (the weight scales into dreg, stored at the step's start) */
    auto issue = [&](const mc_mma_at &a, uint32_t b) {
#pragma unroll
        for (uint32_t k = 0; k < WPT; k++) {
            const uint32_t i = tid + k * NT;
            if (i < JB * MC_MMA_BR) {
                const uint32_t srow = i % MC_MMA_BR, sj = i / MC_MMA_BR;
                const uint32_t grow = r0 + srow < w.rows ? r0 + srow : w.rows - 1;
                const uint32_t ch = mc_mma_item(P, a, sws[k], ks, fault);
                if (ch != ~0u) {
                    mc_mma_cp16(&sb[b].w[sj][srow], (const char *)w.data + (size_t)grow * w.stride + (size_t)ch * 16);
                    if (OPT)
                        dbits[k] = __ldg(w.scales + (size_t)grow * nsc + ch / 2);
                    else
                        dreg[k] = __half2float(__ushort_as_half(__ldg(w.scales + (size_t)grow * nsc + ch / 2)));
                }
            }
        }
        const uint32_t ch = mc_mma_item(P, a, sxs, ks, fault), sxj = tid / BT;
        if (ch != ~0u) {
            mc_mma_cp16(&sb[b].x[sxj][0][sxr], xh + xoff + ch);
            mc_mma_cp16(&sb[b].x[sxj][1][sxr], xm + xoff + ch);
            mc_mma_cp16(&sb[b].x[sxj][2][sxr], xl + xoff + ch);
            mc_mma_cp4(&sb[b].s[sxj][sxr], xs + xoff + ch);
        }
    };

    /* the sums: acc the class's, st0 and st1 the tree's levels 0 and 1 (the others in `tree`) */
    float acc[8], st0[8], st1[8];
#pragma unroll
    for (uint32_t e = 0; e < 8; e++)
        acc[e] = 0.0f, st0[e] = 0.0f, st1[e] = 0.0f;
    uint32_t cn = 0, cp = 0; /* the class position and part the next class sum goes to */
    /* the class's sum into the tree: added to the left subtrees while n's low bits are ones, then
     * kept at that level; after n = 31, the part's tree, added to the parts' sum */
    auto push = [&]() {
        const uint32_t ones = __ffs(~cn) - 1;
        if (ones >= 1)
#pragma unroll
            for (uint32_t e = 0; e < 8; e++)
                acc[e] = st0[e] + acc[e];
        if (ones >= 2)
#pragma unroll
            for (uint32_t e = 0; e < 8; e++)
                acc[e] = st1[e] + acc[e];
#pragma unroll
        for (uint32_t L = 2; L < 5; L++)
            if (ones > L)
#pragma unroll
                for (uint32_t e = 0; e < 8; e++)
                    acc[e] = tree[((L - 2) * 8 + e) * NT + tid] + acc[e];
        if (ones == 0) {
#pragma unroll
            for (uint32_t e = 0; e < 8; e++)
                st0[e] = acc[e];
        } else if (ones == 1) {
#pragma unroll
            for (uint32_t e = 0; e < 8; e++)
                st1[e] = acc[e];
        } else if (ones < 5) {
#pragma unroll
            for (uint32_t e = 0; e < 8; e++)
                tree[((ones - 2) * 8 + e) * NT + tid] = acc[e];
        } else {
#pragma unroll
            for (uint32_t e = 0; e < 8; e++) {
                float *ds = &tree[(3 * 8 + e) * NT + tid];
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
    issue(nx, 0);
    mc_mma_at_next(nx, P);
    mc_mma_commit();
    /* the B fragments' rows (x rows n0 .. n0 + 7 of planes hi, mid, lo: the fourth matrix repeats lo) */
    const uint32_t bpl = (lane >> 3) < 2 ? (lane >> 3) : 2u, brow = n0 + (lane & 7);
#pragma unroll 1
    for (uint32_t s = 0; s < P.nsteps; s++) {
        const uint32_t b = s & 1;
#pragma unroll
        for (uint32_t k = 0; k < WPT; k++) {
            const uint32_t i = tid + k * NT;
            if (i < JB * MC_MMA_BR)
                sb[b].d[i / MC_MMA_BR][mc_mma_dpos(i % MC_MMA_BR)] =
                    OPT ? __half2float(__ushort_as_half(dbits[k])) : dreg[k];
        }
        if (s + 1 < P.nsteps) {
            issue(nx, b ^ 1);
            mc_mma_at_next(nx, P);
        }
        mc_mma_commit();
        uint32_t valid, ends;
        mc_mma_masks<JB>(P, cur, fault, valid, ends);
        mc_mma_at_next(cur, P);
        mc_mma_wait1();
        __syncthreads();
        const stage &S = sb[b];
        /* slot jj's chunk into the class's sums */
        auto slot = [&](uint32_t jj) {
            uint32_t A[4], B[4];
            mc_ldsm4(A, &S.w[jj][m0 + lane]);
            mc_ldsm4(B, &S.x[jj][bpl][brow]);
            const float2 sx = *(const float2 *)&S.s[jj][n0 + 2 * q];
#pragma unroll
            for (uint32_t mt = 0; mt < 2; mt++) {
                const float2 dw = *(const float2 *)&S.d[jj][m0 + 16 * mt + 2 * g]; /* rows r, r + 8 */
                int dh[4], dm[4], dl[4];
                mc_mma_s8(dh, A[2 * mt], A[2 * mt + 1], B[0], MC_MMA_MAGIC);
                mc_mma_s8(dm, A[2 * mt], A[2 * mt + 1], B[1], MC_MMA_MAGIC);
                mc_mma_s8(dl, A[2 * mt], A[2 * mt + 1], B[2], MC_MMA_MAGIC);
#pragma unroll
                for (uint32_t e = 0; e < 4; e++) {
                    /* element e: weight row m0 + 16 mt + g (+8 for e >= 2), x row n0 + 2q (+1 for odd e) */
                    const float fh = __int_as_float(dh[e]) - MC_MMA_MAGIC_F;
                    const float fm = __int_as_float(dm[e]) - MC_MMA_MAGIC_F;
                    const float fl = __int_as_float(dl[e]) - MC_MMA_MAGIC_F;
                    const float dot = fmaf(fh, 65536.0f, fmaf(fm, 256.0f, fl));
                    const float sc = ((e >> 1) ? dw.y : dw.x) * ((e & 1) ? sx.y : sx.x);
                    acc[mt * 4 + e] = fmaf(dot, sc, acc[mt * 4 + e]);
                }
            }
        };
        if (valid == (1u << JB) - 1) {
            /* every slot holds a chunk: software-pipelined by half slots (slot jj, weight tile
             * mt), the next half's fragment loads and MMAs in flight while this half's float chain
             * runs; the same operations on the same values as slot() */
            uint32_t A[4], B[4];
            int D[2][3][4];
            auto mmas = [&](uint32_t h, int(&d)[3][4]) {
                const uint32_t jj = h >> 1, mt = h & 1;
                if (mt == 0) {
                    mc_ldsm4(A, &S.w[jj][m0 + lane]);
                    mc_ldsm4(B, &S.x[jj][bpl][brow]);
                }
                mc_mma_s8(d[0], A[2 * mt], A[2 * mt + 1], B[0], MC_MMA_MAGIC);
                mc_mma_s8(d[1], A[2 * mt], A[2 * mt + 1], B[1], MC_MMA_MAGIC);
                mc_mma_s8(d[2], A[2 * mt], A[2 * mt + 1], B[2], MC_MMA_MAGIC);
            };
            auto chain = [&](uint32_t h, const int(&d)[3][4]) {
                const uint32_t jj = h >> 1, mt = h & 1;
                const float2 sx = *(const float2 *)&S.s[jj][n0 + 2 * q];
                const float2 dw = *(const float2 *)&S.d[jj][m0 + 16 * mt + 2 * g]; /* rows r, r + 8 */
#pragma unroll
                for (uint32_t e = 0; e < 4; e++) {
                    const float fh = __int_as_float(d[0][e]) - MC_MMA_MAGIC_F;
                    const float fm = __int_as_float(d[1][e]) - MC_MMA_MAGIC_F;
                    const float fl = __int_as_float(d[2][e]) - MC_MMA_MAGIC_F;
                    const float dot = fmaf(fh, 65536.0f, fmaf(fm, 256.0f, fl));
                    const float sc = ((e >> 1) ? dw.y : dw.x) * ((e & 1) ? sx.y : sx.x);
                    acc[mt * 4 + e] = fmaf(dot, sc, acc[mt * 4 + e]);
                }
            };
            /* the step with its class ends where the plan puts them: classes of JW slots, every one
             * ending in this step where JW < JB (the plan's spc is 1), the step's one class ending
             * after its last slot or not at all where JW = JB (OPT: the class ends known when
             * compiled, so no test after each slot) */
            auto full = [&](auto jwc) {
                constexpr uint32_t JW = decltype(jwc)::value;
                mmas(0, D[0]);
#pragma unroll
                for (uint32_t h = 0; h < 2 * JB; h++) {
                    if (h + 1 < 2 * JB)
                        mmas(h + 1, D[(h + 1) & 1]);
                    chain(h, D[h & 1]);
                    if (JW == 0) {
                        if ((h & 1) && (ends >> (h >> 1) & 1))
                            push();
                    } else if ((h & 1) && (h >> 1) % (JW ? JW : 1u) == JW - 1 && (JW < JB || ends != 0)) {
                        push();
                    }
                }
            };
            if constexpr (!OPT)
                full(mc_mma_uconst<0>());
            else if (P.jw == JB)
                full(mc_mma_uconst<JB>());
            else if (JB >= 4 && P.jw == JB / 2)
                full(mc_mma_uconst<(JB >= 4 ? JB / 2 : 1)>());
            else if (JB >= 8 && P.jw == JB / 4)
                full(mc_mma_uconst<(JB >= 8 ? JB / 4 : 1)>());
            else
                full(mc_mma_uconst<0>());
        } else {
#pragma unroll
            for (uint32_t jj = 0; jj < JB; jj++) {
                if (valid >> jj & 1)
                    slot(jj);
                if (ends >> jj & 1)
                    push();
            }
        }
        __syncthreads(); /* the buffer is free for the step after next */
    }
    mc_mma_wait0();
    float dsum[8];
#pragma unroll
    for (uint32_t e = 0; e < 8; e++)
        dsum[e] = tree[(3 * 8 + e) * NT + tid];
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

/* The kernels: NN warps along x (8 NN x rows), JB slots a step, MINB blocks an SM, OPT. */
#define MC_MMA_TILES(X)                                                                                                \
    X(MC_MMA_NN, MC_MMA_JB, 2, false) X(6, MC_MMA_JB, 1, false) X(8, MC_MMA_JB, 1, false) X(MC_MMA_NN, MC_MMA_JB, 2, true)

template <uint32_t NN, uint32_t JB, uint32_t MINB, bool OPT>
static cudaError_t mc_chunk_q8_mma_nn(int glu, uint32_t fault, const mc_matrix *w, const uint4 *xh, const uint4 *xm,
                                      const uint4 *xl, const float *xs, const float *rs, const float *bias,
                                      const float *res, uint32_t ldr, float *y, uint32_t ldy, uint32_t M,
                                      cudaStream_t st) {
    const uint32_t ks = mc_q8x_ksplit(w->rows), f = fault ? 1u : 0u;
    const dim3 grid((M + 8 * NN - 1) / (8 * NN), (w->rows + MC_MMA_BR - 1) / MC_MMA_BR);
    constexpr size_t smem = mc_mma_smem<NN, JB>();
    static unsigned char ready[3][MC_MAX_DEVICES];
    const int gi = glu == MC_GLU_SILU ? 1 : glu == MC_GLU_GELU ? 2 : 0;
    const void *fn = gi == 1   ? (const void *)chunk_gemv_q8_mma<MC_GLU_SILU, NN, JB, MINB, OPT>
                     : gi == 2 ? (const void *)chunk_gemv_q8_mma<MC_GLU_GELU, NN, JB, MINB, OPT>
                               : (const void *)chunk_gemv_q8_mma<MC_GLU_NONE, NN, JB, MINB, OPT>;
    const cudaError_t e = mc_mma_smem_allow(fn, (int)smem, ready[gi], MC_MAX_DEVICES);
    if (e != cudaSuccess)
        return e;
    switch (glu) {
    case MC_GLU_SILU:
        chunk_gemv_q8_mma<MC_GLU_SILU, NN, JB, MINB, OPT>
            <<<grid, 64 * NN, smem, st>>>(*w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M, ks, f);
        break;
    case MC_GLU_GELU:
        chunk_gemv_q8_mma<MC_GLU_GELU, NN, JB, MINB, OPT>
            <<<grid, 64 * NN, smem, st>>>(*w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M, ks, f);
        break;
    default:
        chunk_gemv_q8_mma<MC_GLU_NONE, NN, JB, MINB, OPT>
            <<<grid, 64 * NN, smem, st>>>(*w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M, ks, f);
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
#define MC_MMA_CALL(N, J, B, O)                                                                                        \
    mc_chunk_q8_mma_nn<N, J, B, O>(glu, fault, w, xh, xm, xl, xs, rs, bias, res, ldr, y, ldy, M, st)
    switch (variant) {
    case MC_CHUNK_MMA_T6: return MC_MMA_CALL(6, MC_MMA_JB, 1, false);
    case MC_CHUNK_MMA_T8: return MC_MMA_CALL(8, MC_MMA_JB, 1, false);
    case MC_CHUNK_MMA_OPT: return MC_MMA_CALL(MC_MMA_NN, MC_MMA_JB, 2, true);
    default: return MC_MMA_CALL(MC_MMA_NN, MC_MMA_JB, 2, false); /* MC_CHUNK_MMA, its fault, MC_CHUNK_MMA_T4 */
    }
#undef MC_MMA_CALL
}

#define MC_MMA_FAMILY(N, J, B, O)                                                                                      \
    f == (const void *)chunk_gemv_q8_mma<MC_GLU_NONE, N, J, B, O> ||                                                   \
        f == (const void *)chunk_gemv_q8_mma<MC_GLU_SILU, N, J, B, O> ||                                               \
        f == (const void *)chunk_gemv_q8_mma<MC_GLU_GELU, N, J, B, O> ||
const char *mc_chunk_mma_family(const void *f) {
    if (MC_MMA_TILES(MC_MMA_FAMILY) 0)
        return "chunk_gemv";
    return mc_chunk_kq_family(f);
}
