/* gemv_wgmma.cu: gemv=mma's prefill chunk GEMV on Hopper's warpgroup MMA (wgmma.mma_async,
 * sm_90a only: this file alone is built for it), with decode's bits (issue 28).
 *
 * Why the bits are decode's. gemv_mma.cu's decode runs, per output element, one chain of
 * mma.sync.m16n8k16 bf16 MMAs per part: a k-block of 32 columns is two MMAs, the first on the
 * columns {8t .. 8t + 3 : t = 0..3} of the block, the second on {8t + 4 .. 8t + 7} (a lane's 16
 * contiguous bytes, split in halves). bench/gpu/wgmma_probe.cu measured on the H200 that
 * wgmma.m64nNk16 gives every element exactly the bits of mma.sync.m16n8k16 given the same 16
 * products in one instruction and the same accumulator, for N = 8, 64, 128, bf16 and f16, and that
 * the order of the 16 products inside one instruction does not change the result (the set does).
 * So this kernel gives each instruction decode's set of columns, chains the k-blocks of a part in
 * order from +0, and adds the parts in part order: decode's chain, instruction for instruction.
 *
 * The operands. A (the weights) comes from registers: each warp of a warpgroup holds 16 of its 64
 * rows in mma.sync's A fragment, loaded from shared memory exactly as decode loads them from
 * memory (lane (g, t): 16 contiguous bytes of columns 8t .. of rows g and g + 8; the first
 * instruction takes their first halves, the second their second halves), so the weights stage in
 * their own layout. B (x') comes from shared memory through a descriptor, wgmma's K-major layout
 * with 64-byte swizzle; the prep (chunk_mma_prep with its permuted layout, gemv_mma.cu) writes each
 * k-block of x' in the order of the instructions' slots (set m's 16 columns at bytes 32 m .. of
 * the k-block's 64), so that B's slot s holds the column A's slot s holds. A's registers are read
 * by the MMAs while they run, so each k-block's MMAs are retired before the next one loads its
 * fragments (a second register set taking turns measured slower).
 *
 * The tile and the staging: a block of 2 consumer warpgroups takes 128 weight rows (warpgroup wg
 * the rows 64 wg ..) by BT rows of x (the n of the instruction: 128, or 64 where a grid of 128
 * would leave a quarter of the multiprocessors or more without a block, as llama-1b's projections
 * but gate/up at M 512; two blocks of 64 may then share a multiprocessor); a producer warp copies each
 * k-block (the weights' 128 x 64 bytes without swizzle, x''s BT x 64 bytes with it) into one of
 * MC_WT_S stages with the tensor memory accelerator (cp.async.bulk.tensor, one instruction a tile,
 * a full mbarrier a stage counting its bytes, an empty one the consumer warps' releases). Each
 * warpgroup keeps its part's chain in registers (BT / 2 floats a thread), folds it into the part sum
 * (registers too) at the part's last k-block, and the block writes its outputs through
 * gemv_mma.cuh's epilogue, as chunk_gemv_mma does. (Every thread's cp.async in place of the
 * producer bounded a first version below the mma.sync tile's speed; bench/gpu/NOTES.md.) */
#include "cuda_common.cuh"
#include "gemv_mma.cuh"
#include "kquant_layout.h"

#include <string.h>
#include <type_traits>

#include <cuda.h> /* CUtensorMap and cuTensorMapEncodeTiled's types (the function through the runtime) */

#define MC_WG_BR 128u /* weight rows a block: 2 warpgroups of m64 */
/* rows of x a block (BT: the instruction's n) are 128, or 64 where 128 would leave a quarter of the
 * multiprocessors or more without a block (mc_gemv_wgmma_launch) */
#define MC_WG_NTH 256u
#define MC_WG_LD (MC_WG_BR + 4u)

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MC_WG_DEVICE 1
#endif

/* d (64 x 128 f32, the m64n128 fragment) += A B over one 16-column instruction, A from registers
 * (a0 .. a3: mma.sync's A fragment of the warp's 16 rows), B from shared memory; with accumulate 0,
 * d = A B (q8=mma's first instruction of a k-block: decode's MMA from +0). */
__device__ __forceinline__ void mc_wg_mma(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint64_t db, uint32_t accumulate = 1) {
#ifdef MC_WG_DEVICE
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
                   "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
                   "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
                   "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
                   "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
                   "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(accumulate));
#endif
}
/* The same with n 64 (d: the m64n64 fragment, 32 f32 a thread). */
__device__ __forceinline__ void mc_wg_mma(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint64_t db, uint32_t accumulate = 1) {
#ifdef MC_WG_DEVICE
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
                   "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(accumulate));
#endif
}
/* Keeps the compiler from moving accesses of the accumulators across an asynchronous MMA. */
template <int N> __device__ __forceinline__ void mc_wg_fence_regs(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void mc_wg_arrive(void) {
#ifdef MC_WG_DEVICE
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void mc_wg_commit(void) {
#ifdef MC_WG_DEVICE
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void mc_wg_wait(void) {
#ifdef MC_WG_DEVICE
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}

#define MC_WT_S 8u /* stages */
/* Bytes of a stage (a k-block of the weights' 128 rows and of x''s BT rows), and of a block's
 * shared memory (the stages, or the epilogue's BT x LD floats over them, and the mbarriers). */
__host__ __device__ static constexpr uint32_t mc_wt_stage(uint32_t bt) { return MC_WG_BR * 64u + bt * 64u; }
__host__ __device__ static constexpr uint32_t mc_wt_smem(uint32_t bt) {
    return 1024u + (MC_WT_S * mc_wt_stage(bt) > bt * MC_WG_LD * 4u ? MC_WT_S * mc_wt_stage(bt) : bt * MC_WG_LD * 4u) +
           2u * MC_WT_S * 8u;
}
/* q8=mma's (chunk_gemv_wgmma_q8): a stage holds the weights' 128 x 32 int8 bytes and x''s BT x 64;
 * the part sums' table has its own place after the stages (the part sums are added there as each
 * part ends, while later stages stream). */
__host__ __device__ static constexpr uint32_t mc_wq_stage(uint32_t bt) { return MC_WG_BR * 32u + bt * 64u; }
__host__ __device__ static constexpr uint32_t mc_wq_smem(uint32_t bt) {
    return 1024u + MC_WT_S * mc_wq_stage(bt) + bt * MC_WG_LD * 4u + 2u * MC_WT_S * 8u;
}
static_assert(mc_wq_stage(64) % 1024u == 0 && mc_wq_stage(128) % 1024u == 0 && mc_wq_smem(128) <= 227u * 1024u &&
                  2u * (mc_wq_smem(64) + 1024u) <= 228u * 1024u,
              "q8=mma's stages stay aligned and fit (two blocks of BT 64 a multiprocessor)");
static_assert(mc_wt_stage(64) % 1024u == 0 && mc_wt_stage(128) % 1024u == 0,
              "stages stay aligned to the swizzle's repeat");
static_assert(mc_wt_smem(128) <= 227u * 1024u && 2u * (mc_wt_smem(64) + 1024u) <= 228u * 1024u,
              "the stages fit an H100/H200 block (two blocks of BT 64 a multiprocessor)");

__device__ __forceinline__ void mc_mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mc_mbar_expect(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mc_mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mc_mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT_%=;\n"
                 "}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void mc_tma_2d(uint32_t dst, const CUtensorMap *map, int32_t x, int32_t y, uint32_t bar) {
#ifdef MC_WG_DEVICE
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];" ::"r"(dst),
                 "l"((uint64_t)map), "r"(x), "r"(y), "r"(bar)
                 : "memory");
#endif
}
/* The block's mbarriers at bars: full[S] (the producer's one arrival and the stage's bytes), then
 * empty[S] (one arrival from each of the NTH / 32 consumer warps), made by thread 0 and visible to
 * the whole block on return. */
template <uint32_t S, uint32_t NTH> __device__ __forceinline__ void mc_wg_bars_init(uint32_t bars) {
    if (threadIdx.x == 0) {
        for (uint32_t i = 0; i < S; i++) {
            mc_mbar_init(bars + 8u * i, 1u);
            mc_mbar_init(bars + 8u * (S + i), NTH / 32u);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
}
/* The producer (one lane): k-block kb's tile of the weights (tw: weight rows rb ..) at stage kb % S
 * and of x' (tx: rows of x t0 ..) SA bytes on, ST bytes a stage, each stage once its consumers have
 * released it. */
template <uint32_t S>
__device__ __forceinline__ void mc_wg_produce(const CUtensorMap *tw, const CUtensorMap *tx, uint32_t sbase,
                                              uint32_t bars, uint32_t nkb, uint32_t ST, uint32_t SA, uint32_t rb,
                                              uint32_t t0) {
    for (uint32_t kb = 0; kb < nkb; kb++) {
        const uint32_t s = kb % S, st = sbase + s * ST;
        if (kb >= S)
            mc_mbar_wait(bars + 8u * (S + s), (kb / S - 1u) & 1u); /* the consumers are done with it */
        mc_mbar_expect(bars + 8u * s, ST);
        mc_tma_2d(st, tw, (int32_t)(kb * 32u), (int32_t)rb, bars + 8u * s);
        mc_tma_2d(st + SA, tx, (int32_t)(kb * 32u), (int32_t)t0, bars + 8u * s);
    }
}

/* The K-major 64-byte-swizzle descriptor of a tile at shared address a (8-row groups 512 bytes
 * apart; the leading offset unused there). */
__device__ __forceinline__ uint64_t mc_wg_desc64(uint32_t a) {
    return (uint64_t)((a & 0x3FFFFu) >> 4) | ((uint64_t)1u << 16) | ((uint64_t)(512u >> 4) << 32) |
           ((uint64_t)2u << 62);
}

/* Block: weight rows blockIdx.y BR .., rows of x blockIdx.x BT .. (the x tile fastest: consecutive
 * blocks share the weights in L2); warps 0 .. 7 the consumers, warp 8 the producer. tw, tx: the
 * weights' and x''s tensor maps (mc_wt_map); the rest as chunk_gemv_mma's arguments. */
template <int GLU, uint32_t BT>
__global__ void __launch_bounds__(MC_WG_NTH + 32u, BT == 64u ? 2 : 1)
    chunk_gemv_wgmma(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx, const mc_matrix w,
                     uint32_t ks, const float *rs, const float *bias, const float *res, uint32_t ldr, float *y,
                     uint32_t ldy, uint32_t M) {
    static_assert(BT == 64u || BT == 128u, "the instruction's n");
    constexpr uint32_t BR = MC_WG_BR, NTH = MC_WG_NTH, LD = MC_WG_LD, S = MC_WT_S, ST = mc_wt_stage(BT);
    constexpr uint32_t SA = BR * 64u, NA = BT / 2u; /* NA: accumulators a thread */
    extern __shared__ __align__(128) unsigned char mc_wg_smem_base[];
    const uint32_t tid = threadIdx.x, wg = tid >> 7, lane = tid & 31u, g = lane >> 2, t = lane & 3u;
    const uint32_t rb = blockIdx.y * BR, t0 = blockIdx.x * BT;
    if (rb >= w.rows || t0 >= M)
        return;
    const uint32_t ntok = min(BT, M - t0), nkb = (w.cols + 31) / 32;
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(mc_wg_smem_base);
    const uint32_t sbase = (raw + 1023u) & ~1023u; /* the stages, 1024-aligned */
    unsigned char *gbase = mc_wg_smem_base + (sbase - raw);
    const uint32_t bars = sbase + (mc_wt_smem(BT) - 1024u - 2u * S * 8u); /* full[S], then empty[S] */
    mc_wg_bars_init<S, NTH>(bars);
    if (tid >= NTH) { /* the producer warp */
        if (lane == 0)
            mc_wg_produce<S>(&tw, &tx, sbase, bars, nkb, ST, SA, rb, t0);
    } else {
        const uint32_t ra = (64u * wg + 16u * ((tid >> 5) & 3u) + g) * 64u + 16u * t;
        float acc[NA], sum[NA];
#pragma unroll
        for (uint32_t i = 0; i < NA; i++)
            acc[i] = 0.0f, sum[i] = 0.0f;
#pragma unroll 1
        for (uint32_t p = 0; p < ks; p++) {
            const uint32_t kb0 = mc_mma_part(nkb, ks, p), kb1 = mc_mma_part(nkb, ks, p + 1);
#pragma unroll
            for (uint32_t i = 0; i < NA; i++)
                acc[i] = 0.0f;
#pragma unroll 1
            for (uint32_t kb = kb0; kb < kb1; kb++) {
                const uint32_t s = kb % S, so = s * ST;
                mc_mbar_wait(bars + 8u * s, (kb / S) & 1u);
                const uint4 lo = *(const uint4 *)(gbase + so + ra);        /* row g: decode's fragment */
                const uint4 hi = *(const uint4 *)(gbase + so + ra + 512u); /* row g + 8 */
                mc_wg_fence_regs(acc);
                mc_wg_arrive();
                const uint32_t b = sbase + so + SA;
                mc_wg_mma(acc, lo.x, hi.x, lo.y, hi.y, mc_wg_desc64(b));
                mc_wg_mma(acc, lo.z, hi.z, lo.w, hi.w, mc_wg_desc64(b + 32u));
                mc_wg_commit();
                mc_wg_wait<0>(); /* retired before the next k-block's loads may take A's registers */
                mc_wg_fence_regs(acc);
                __syncwarp();
                if (lane == 0)
                    mc_mbar_arrive(bars + 8u * (S + s));
            }
#pragma unroll
            for (uint32_t i = 0; i < NA; i++)
                sum[i] = p == 0 ? acc[i] : __fadd_rn(sum[i], acc[i]);
        }
        asm volatile("bar.sync 1, %0;" ::"n"(NTH) : "memory"); /* the consumers: every stage read */
        float *f = (float *)gbase;
        const uint32_t r = wg * 64u + 16u * ((tid >> 5) & 3u) + g;
#pragma unroll
        for (uint32_t j = 0; j < BT / 8u; j++) {
            const uint32_t k = 8u * j + 2u * t;
            f[k * LD + r] = sum[4 * j];
            f[(k + 1) * LD + r] = sum[4 * j + 1];
            f[k * LD + r + 8] = sum[4 * j + 2];
            f[(k + 1) * LD + r + 8] = sum[4 * j + 3];
        }
        asm volatile("bar.sync 1, %0;" ::"n"(NTH) : "memory");
        mc_mma_epilogue<GLU, BR, BT, LD, NTH>(f, rb, t0, ntok, w.rows, rs, bias, res, ldr, y, ldy);
    }
}

/* q8=mma's chunk: chunk_gemv_wgmma's block, producer and B operand, on Q8_0 weights. A stage holds
 * the weights' 128 rows x 32 int8 (one Q8_0 block a row); lane (g, t) reads the 8 bytes of columns
 * 8t .. of rows g and g + 8 and converts them to bf16 (mc_q8_frag, exact: decode's fragment); each
 * k-block is decode's two MMAs from +0 (the first with the accumulator off) into d, retired, then
 * acc = fmaf(scale of the row's block, d, acc) for each element (mc_q8_step); at a part's last
 * k-block acc goes into the table (the first part copied, the others added in part order), which
 * the epilogue reads. The rows' block scales come from global memory two k-blocks ahead of their
 * use (the loop takes k-blocks in pairs). */
template <int GLU, uint32_t BT>
__global__ void __launch_bounds__(MC_WG_NTH + 32u, BT == 64u ? 2 : 1)
    chunk_gemv_wgmma_q8(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx,
                        const mc_matrix w, uint32_t ks, const float *rs, const float *bias, const float *res,
                        uint32_t ldr, float *y, uint32_t ldy, uint32_t M) {
    static_assert(BT == 64u || BT == 128u, "the instruction's n");
    constexpr uint32_t BR = MC_WG_BR, NTH = MC_WG_NTH, LD = MC_WG_LD, S = MC_WT_S, ST = mc_wq_stage(BT);
    constexpr uint32_t SA = BR * 32u, NA = BT / 2u; /* NA: accumulators a thread */
    extern __shared__ __align__(128) unsigned char mc_wg_smem_base[];
    const uint32_t tid = threadIdx.x, wg = tid >> 7, lane = tid & 31u, g = lane >> 2, t = lane & 3u;
    const uint32_t rb = blockIdx.y * BR, t0 = blockIdx.x * BT;
    if (rb >= w.rows || t0 >= M)
        return;
    const uint32_t ntok = min(BT, M - t0), nkb = (w.cols + 31) / 32;
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(mc_wg_smem_base);
    const uint32_t sbase = (raw + 1023u) & ~1023u; /* the stages, 1024-aligned */
    unsigned char *gbase = mc_wg_smem_base + (sbase - raw);
    float *f = (float *)(gbase + S * ST);                                 /* the table */
    const uint32_t bars = sbase + (mc_wq_smem(BT) - 1024u - 2u * S * 8u); /* full[S], then empty[S] */
    mc_wg_bars_init<S, NTH>(bars);
    if (tid >= NTH) { /* the producer warp */
        if (lane == 0)
            mc_wg_produce<S>(&tw, &tx, sbase, bars, nkb, ST, SA, rb, t0);
        return;
    }
    const uint32_t r = wg * 64u + 16u * ((tid >> 5) & 3u) + g; /* the thread's rows r and r + 8 of the block */
    const uint32_t ra = r * 32u + 8u * t, nsc = w.cols / 32u;
    const uint16_t *qa = w.scales + (size_t)(rb + r < w.rows ? rb + r : rb) * nsc;
    const uint16_t *qb = w.scales + (size_t)(rb + r + 8u < w.rows ? rb + r + 8u : rb) * nsc;
    float acc[NA], d[NA];
#pragma unroll
    for (uint32_t i = 0; i < NA; i++)
        d[i] = 0.0f; /* written by each k-block's first MMA (accumulator off) before any read */
    auto step = [&](uint32_t kb, uint16_t sa, uint16_t sb) {
        const uint32_t s = kb % S, so = s * ST;
        mc_mbar_wait(bars + 8u * s, (kb / S) & 1u);
        const uint4 lo = mc_q8_frag(*(const uint2 *)(gbase + so + ra));        /* row g */
        const uint4 hi = mc_q8_frag(*(const uint2 *)(gbase + so + ra + 256u)); /* row g + 8 */
        mc_wg_fence_regs(d);
        mc_wg_arrive();
        const uint32_t b = sbase + so + SA;
        mc_wg_mma(d, lo.x, hi.x, lo.y, hi.y, mc_wg_desc64(b), 0u);
        mc_wg_mma(d, lo.z, hi.z, lo.w, hi.w, mc_wg_desc64(b + 32u));
        mc_wg_commit();
        mc_wg_wait<0>();
        mc_wg_fence_regs(d);
        __syncwarp();
        if (lane == 0)
            mc_mbar_arrive(bars + 8u * (S + s));
        const float fa = mc_q8_scale(sa), fb = mc_q8_scale(sb);
#pragma unroll
        for (uint32_t i = 0; i < NA; i++)
            acc[i] = mc_q8_stepf(acc[i], (i & 2u) ? fb : fa, d[i]);
    };
#pragma unroll 1
    for (uint32_t p = 0; p < ks; p++) {
        const uint32_t kb0 = mc_mma_part(nkb, ks, p), kb1 = mc_mma_part(nkb, ks, p + 1);
#pragma unroll
        for (uint32_t i = 0; i < NA; i++)
            acc[i] = 0.0f;
        uint16_t sa0 = 0, sb0 = 0, sa1 = 0, sb1 = 0;
        if (kb0 < kb1)
            sa0 = __ldg(qa + kb0), sb0 = __ldg(qb + kb0);
        if (kb0 + 1 < kb1)
            sa1 = __ldg(qa + kb0 + 1), sb1 = __ldg(qb + kb0 + 1);
#pragma unroll 1
        for (uint32_t kb = kb0; kb < kb1; kb += 2) {
            uint16_t na0 = 0, nb0 = 0, na1 = 0, nb1 = 0; /* the next pair's scales, in flight */
            if (kb + 2 < kb1)
                na0 = __ldg(qa + kb + 2), nb0 = __ldg(qb + kb + 2);
            if (kb + 3 < kb1)
                na1 = __ldg(qa + kb + 3), nb1 = __ldg(qb + kb + 3);
            step(kb, sa0, sb0);
            if (kb + 1 < kb1)
                step(kb + 1, sa1, sb1);
            sa0 = na0, sb0 = nb0, sa1 = na1, sb1 = nb1;
        }
        /* the part's chain ends: into the table, in part order (the lane's own cells) */
#pragma unroll
        for (uint32_t j = 0; j < BT / 8u; j++) {
            const uint32_t k = 8u * j + 2u * t;
            float *c[4] = {&f[k * LD + r], &f[(k + 1) * LD + r], &f[k * LD + r + 8], &f[(k + 1) * LD + r + 8]};
#pragma unroll
            for (uint32_t e = 0; e < 4; e++)
                *c[e] = p == 0 ? acc[4 * j + e] : __fadd_rn(*c[e], acc[4 * j + e]);
        }
    }
    asm volatile("bar.sync 1, %0;" ::"n"(NTH) : "memory"); /* the consumers: the table complete */
    mc_mma_epilogue<GLU, BR, BT, LD, NTH>(f, rb, t0, ntok, w.rows, rs, bias, res, ldr, y, ldy);
}

/* qdot=mma's kernels' shared memory: S stages of ST bytes from the first 1024-aligned address (sbase,
 * gbase), the table f after them, the mbarriers in the last bytes of SM (initialised on return). */
template <uint32_t S, uint32_t NTH>
__device__ __forceinline__ void mc_wk_setup(unsigned char *base, uint32_t ST, uint32_t SM, uint32_t &sbase,
                                            unsigned char *&gbase, float *&f, uint32_t &bars) {
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(base);
    sbase = (raw + 1023u) & ~1023u;
    gbase = base + (sbase - raw);
    f = (float *)(gbase + S * ST);
    bars = sbase + (SM - 1024u - 2u * S * 8u);
    mc_wg_bars_init<S, NTH>(bars);
}

/* A part's sums into the block's table (rows of x by weight rows, LD floats apart): the first part
 * copied, the others added in part order (chunk_gemv_wgmma_q8's cells for thread (r, t)). */
template <uint32_t BT, uint32_t LD>
__device__ __forceinline__ void mc_wk_table(float *f, const float (&acc)[BT / 2u], uint32_t r, uint32_t t, uint32_t pp) {
#pragma unroll
    for (uint32_t j = 0; j < BT / 8u; j++) {
        const uint32_t k = 8u * j + 2u * t;
        float *cc[4] = {&f[k * LD + r], &f[(k + 1) * LD + r], &f[k * LD + r + 8], &f[(k + 1) * LD + r + 8]};
#pragma unroll
        for (uint32_t e = 0; e < 4; e++)
            *cc[e] = pp == 0 ? acc[4 * j + e] : __fadd_rn(*cc[e], acc[4 * j + e]);
    }
}

/* qdot=mma's chunk (Q4_K): chunk_gemv_wgmma_q8's block and operands, a stage a pair of k-blocks (the
 * super-block's sub-blocks 2c, 2c + 1, which share 32 quant bytes a row), all by the tensor memory
 * accelerator: x''s two k-blocks (BT x 64 bytes each, swizzled), the weights' 128 rows x 32 bytes,
 * the rows' 16 aux bytes of the super-block and S of the two k-blocks for the block's BT rows of x
 * (the prep's transposed S, rows of lds floats). Lane (g, t) reads the 8 bytes 8t .. of rows g and
 * g + 8 (mc_kq4_frag: the low nibbles the first k-block's fragment, the high the second's,
 * decode's); each k-block is decode's two MMAs from +0 into d, retired, then acc =
 * mc_kq4_step(acc, A, N, d, S) for each element, A and N of the element's row (mc_kq4_coef1 on
 * its aux bytes), S of its row of x. The parts are ranges of super-blocks (decode's under
 * qdot=mma); at a part's end acc goes into the table as in chunk_gemv_wgmma_q8. */
/* A stage: x''s two k-blocks (XB = BT x 64 bytes each), then from 2 XB on the weights (128 x 32
 * bytes), the aux bytes (128 x 16: d, dmin, scales of the pair's super-block), with Q5_K (T5) the
 * fifth bits' words (128 x 16: the units of two pairs, the stage's and its neighbour's), and S (2 x
 * BT floats). */
#define MC_WK_AUX 4096u
#define MC_WK_HI 6144u
__host__ __device__ static constexpr uint32_t mc_wk_sum(bool t5) { return t5 ? 8192u : 6144u; }
__host__ __device__ static constexpr uint32_t mc_wk_stage(uint32_t bt, bool t5) {
    return (bt * 128u + mc_wk_sum(t5) + bt * 8u + 1023u) / 1024u * 1024u;
}
/* stages: 5, or 4 where two blocks of BT 64 would not fit (Q5_K) */
__host__ __device__ static constexpr uint32_t mc_wk_nst(uint32_t bt, bool t5) { return t5 && bt == 64u ? 4u : 5u; }
__host__ __device__ static constexpr uint32_t mc_wk_smem(uint32_t bt, bool t5) {
    return 1024u + mc_wk_nst(bt, t5) * mc_wk_stage(bt, t5) + bt * MC_WG_LD * 4u + 2u * mc_wk_nst(bt, t5) * 8u;
}
static_assert(mc_wk_smem(128, false) <= 227u * 1024u && 2u * (mc_wk_smem(64, false) + 1024u) <= 228u * 1024u &&
                  mc_wk_smem(128, true) <= 227u * 1024u && 2u * (mc_wk_smem(64, true) + 1024u) <= 228u * 1024u,
              "qdot=mma's stages fit (two blocks of BT 64 a multiprocessor)");

template <uint32_t S, bool T5>
__device__ __forceinline__ void mc_wk_produce(const CUtensorMap *tw, const CUtensorMap *tx, const CUtensorMap *ta,
                                              const CUtensorMap *th, const CUtensorMap *ts, uint32_t sbase,
                                              uint32_t bars, uint32_t npr, uint32_t ST, uint32_t XB, uint32_t bt,
                                              uint32_t rb, uint32_t t0) {
    for (uint32_t p = 0; p < npr; p++) {
        const uint32_t s = p % S, st = sbase + s * ST;
        if (p >= S)
            mc_mbar_wait(bars + 8u * (S + s), (p / S - 1u) & 1u);
        mc_mbar_expect(bars + 8u * s, 2u * XB + mc_wk_sum(T5) + 8u * bt); /* every box's bytes */
        mc_tma_2d(st, tx, (int32_t)(p * 64u), (int32_t)t0, bars + 8u * s);
        mc_tma_2d(st + XB, tx, (int32_t)(p * 64u + 32u), (int32_t)t0, bars + 8u * s);
        mc_tma_2d(st + 2u * XB, tw, (int32_t)(p * 32u), (int32_t)rb, bars + 8u * s);
        mc_tma_2d(st + 2u * XB + MC_WK_AUX, ta, (int32_t)(16u * (p / 4u)), (int32_t)rb, bars + 8u * s);
        if (T5) /* the row's fifth bits follow its npr * 32 quant bytes: 8 a pair */
            mc_tma_2d(st + 2u * XB + MC_WK_HI, th, (int32_t)(npr * 32u + 16u * (p / 2u)), (int32_t)rb, bars + 8u * s);
        mc_tma_2d(st + 2u * XB + mc_wk_sum(T5), ts, (int32_t)t0, (int32_t)(2u * p), bars + 8u * s);
    }
}

template <int GLU, uint32_t BT, bool T5>
__global__ void __launch_bounds__(MC_WG_NTH + 32u, BT == 64u ? 2 : 1)
    chunk_gemv_wgmma_kq(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx,
                        const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap th,
                        const __grid_constant__ CUtensorMap ts, const mc_matrix w, uint32_t ks, const float *rs,
                        const float *bias, const float *res, uint32_t ldr, float *y, uint32_t ldy, uint32_t M) {
    static_assert(BT == 64u || BT == 128u, "the instruction's n");
    constexpr uint32_t BR = MC_WG_BR, NTH = MC_WG_NTH, LD = MC_WG_LD, S = mc_wk_nst(BT, T5), ST = mc_wk_stage(BT, T5);
    constexpr uint32_t XB = BT * 64u, NA = BT / 2u;
    extern __shared__ __align__(128) unsigned char mc_wg_smem_base[];
    const uint32_t tid = threadIdx.x, wg = tid >> 7, lane = tid & 31u, g = lane >> 2, t = lane & 3u;
    const uint32_t rb = blockIdx.y * BR, t0 = blockIdx.x * BT;
    if (rb >= w.rows || t0 >= M)
        return;
    const uint32_t ntok = min(BT, M - t0), nsb = w.cols / 256u;
    uint32_t sbase, bars;
    unsigned char *gbase;
    float *f;
    mc_wk_setup<S, NTH>(mc_wg_smem_base, ST, mc_wk_smem(BT, T5), sbase, gbase, f, bars);
    if (tid >= NTH) {
        if (lane == 0)
            mc_wk_produce<S, T5>(&tw, &tx, &ta, &th, &ts, sbase, bars, 4u * nsb, ST, XB, BT, rb, t0);
        return;
    }
    const uint32_t r = wg * 64u + 16u * ((tid >> 5) & 3u) + g;
    const uint32_t ra = 2u * XB + r * 32u + 8u * t, rx = 2u * XB + MC_WK_AUX + r * 16u;
    const uint32_t rh = 2u * XB + MC_WK_HI + r * 16u + 4u * (t >> 1); /* Q5_K: the lane's unit word */
    float acc[NA], d[NA];
#pragma unroll
    for (uint32_t i = 0; i < NA; i++)
        d[i] = 0.0f;
#pragma unroll 1
    for (uint32_t pp = 0; pp < ks; pp++) {
        const uint32_t s0 = mc_mma_part(nsb, ks, pp), s1 = mc_mma_part(nsb, ks, pp + 1);
#pragma unroll
        for (uint32_t i = 0; i < NA; i++)
            acc[i] = 0.0f;
#pragma unroll 1
        for (uint32_t sb = s0; sb < s1; sb++) {
#pragma unroll 1
            for (uint32_t c = 0; c < 4; c++) {
                const uint32_t p = 4u * sb + c, s = p % S, so = s * ST;
                mc_mbar_wait(bars + 8u * s, (p / S) & 1u);
                const uint2 wa = *(const uint2 *)(gbase + so + ra), wb = *(const uint2 *)(gbase + so + ra + 256u);
                uint32_t ha = 0, hb = 0;
                if (T5)
                    ha = *(const uint32_t *)(gbase + so + rh + 8u * (p & 1u)),
                    hb = *(const uint32_t *)(gbase + so + rh + 8u * (p & 1u) + 128u);
#pragma unroll
                for (uint32_t h = 0; h < 2; h++) {
                    const uint4 lo = T5 ? (h ? mc_kq5_frag<1>(wa, ha, t) : mc_kq5_frag<0>(wa, ha, t))
                                        : (h ? mc_kq4_frag<1>(wa) : mc_kq4_frag<0>(wa));
                    const uint4 hi = T5 ? (h ? mc_kq5_frag<1>(wb, hb, t) : mc_kq5_frag<0>(wb, hb, t))
                                        : (h ? mc_kq4_frag<1>(wb) : mc_kq4_frag<0>(wb));
                    mc_wg_fence_regs(d);
                    mc_wg_arrive();
                    const uint32_t b = sbase + so + h * XB;
                    mc_wg_mma(d, lo.x, hi.x, lo.y, hi.y, mc_wg_desc64(b), 0u);
                    mc_wg_mma(d, lo.z, hi.z, lo.w, hi.w, mc_wg_desc64(b + 32u));
                    mc_wg_commit();
                    mc_wg_wait<0>();
                    mc_wg_fence_regs(d);
                    float Aa, Na, Ab, Nb; /* the rows' aux bytes of the stage's super-block */
                    mc_kq4_coef1(*(const uint4 *)(gbase + so + rx), 2u * c + h, Aa, Na);
                    mc_kq4_coef1(*(const uint4 *)(gbase + so + rx + 128u), 2u * c + h, Ab, Nb);
                    const float *sv = (const float *)(gbase + so + 2u * XB + mc_wk_sum(T5)) + h * BT;
#pragma unroll
                    for (uint32_t j = 0; j < BT / 8u; j++) {
                        const float2 x2 = *(const float2 *)(sv + 8u * j + 2u * t);
                        acc[4 * j] = mc_kq4_step(acc[4 * j], Aa, Na, d[4 * j], x2.x);
                        acc[4 * j + 1] = mc_kq4_step(acc[4 * j + 1], Aa, Na, d[4 * j + 1], x2.y);
                        acc[4 * j + 2] = mc_kq4_step(acc[4 * j + 2], Ab, Nb, d[4 * j + 2], x2.x);
                        acc[4 * j + 3] = mc_kq4_step(acc[4 * j + 3], Ab, Nb, d[4 * j + 3], x2.y);
                    }
                }
                __syncwarp();
                if (lane == 0)
                    mc_mbar_arrive(bars + 8u * (S + s));
            }
        }
        mc_wk_table<BT, LD>(f, acc, r, t, pp);
    }
    asm volatile("bar.sync 1, %0;" ::"n"(NTH) : "memory");
    mc_mma_epilogue<GLU, BR, BT, LD, NTH>(f, rb, t0, ntok, w.rows, rs, bias, res, ldr, y, ldy);
}

/* qdot=mma's chunk for Q6_K: a stage is one k-block (two sub-blocks of 16 columns, each one instruction
 * from +0 then acc = fmaf(d * sc, D, acc), decode's order): x''s k-block in the Q6_K slots (the prep's
 * P6 layout), then the weights' 128 rows x 32 quant bytes (the two units of the k-block's sub-blocks,
 * low or high nibbles by the k-block), their 16 bytes of top bits, the block's 16 scale bytes and a
 * 16-byte box holding d, all by the tensor memory accelerator. Lane (g, t) takes each unit's quant
 * word t and top-bit word (mc_kq6_frag: columns 4t .. 4t + 3 of the sub-block). */
#define MC_W6_S 5u
#define MC_W6_TOP 4096u
#define MC_W6_SC 6144u
#define MC_W6_D 8192u
#define MC_W6_B 10240u /* the stage's bytes past x' */
__host__ __device__ static constexpr uint32_t mc_w6_stage(uint32_t bt) { return bt * 64u + MC_W6_B; }
__host__ __device__ static constexpr uint32_t mc_w6_smem(uint32_t bt) {
    return 1024u + MC_W6_S * mc_w6_stage(bt) + bt * MC_WG_LD * 4u + 2u * MC_W6_S * 8u;
}
static_assert(mc_w6_stage(64) % 1024u == 0 && mc_w6_stage(128) % 1024u == 0 && mc_w6_smem(128) <= 227u * 1024u &&
                  2u * (mc_w6_smem(64) + 1024u) <= 228u * 1024u,
              "qdot=mma's Q6_K stages stay aligned and fit");

template <int GLU, uint32_t BT>
__global__ void __launch_bounds__(MC_WG_NTH + 32u, BT == 64u ? 2 : 1)
    chunk_gemv_wgmma_k6(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx,
                        const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap th,
                        const mc_matrix w, uint32_t ks, const float *rs, const float *bias, const float *res,
                        uint32_t ldr, float *y, uint32_t ldy, uint32_t M) {
    static_assert(BT == 64u || BT == 128u, "the instruction's n");
    constexpr uint32_t BR = MC_WG_BR, NTH = MC_WG_NTH, LD = MC_WG_LD, S = MC_W6_S, ST = mc_w6_stage(BT);
    constexpr uint32_t XB = BT * 64u, NA = BT / 2u;
    extern __shared__ __align__(128) unsigned char mc_wg_smem_base[];
    const uint32_t tid = threadIdx.x, wg = tid >> 7, lane = tid & 31u, g = lane >> 2, t = lane & 3u;
    const uint32_t rb = blockIdx.y * BR, t0 = blockIdx.x * BT;
    if (rb >= w.rows || t0 >= M)
        return;
    const uint32_t ntok = min(BT, M - t0), nsb = w.cols / 256u;
    uint32_t sbase, bars;
    unsigned char *gbase;
    float *f;
    mc_wk_setup<S, NTH>(mc_wg_smem_base, ST, mc_w6_smem(BT), sbase, gbase, f, bars);
    if (tid >= NTH) { /* the producer: k-block K of super-block b, half hf, k-block kp of the half */
        if (lane == 0)
            for (uint32_t K = 0; K < 8u * nsb; K++) {
                const uint32_t s = K % S, st = sbase + s * ST, b = K / 8u, hf = K % 8u / 4u, kp = K % 4u;
                if (K >= S)
                    mc_mbar_wait(bars + 8u * (S + s), (K / S - 1u) & 1u);
                mc_mbar_expect(bars + 8u * s, XB + MC_W6_B);
                mc_tma_2d(st, &tx, (int32_t)(32u * K), (int32_t)t0, bars + 8u * s);
                mc_tma_2d(st + XB, &tw, (int32_t)(128u * b + 64u * hf + 32u * (kp % 2u)), (int32_t)rb, bars + 8u * s);
                mc_tma_2d(st + XB + MC_W6_TOP, &th, (int32_t)(128u * nsb + 64u * b + 32u * hf + 16u * (kp % 2u)),
                          (int32_t)rb, bars + 8u * s);
                mc_tma_2d(st + XB + MC_W6_SC, &ta, (int32_t)(16u * b), (int32_t)rb, bars + 8u * s);
                mc_tma_2d(st + XB + MC_W6_D, &ta, (int32_t)(16u * nsb + 16u * (b / 8u)), (int32_t)rb, bars + 8u * s);
            }
        return;
    }
    const uint32_t r = wg * 64u + 16u * ((tid >> 5) & 3u) + g;
    float acc[NA], d[NA];
#pragma unroll
    for (uint32_t i = 0; i < NA; i++)
        d[i] = 0.0f;
#pragma unroll 1
    for (uint32_t pp = 0; pp < ks; pp++) {
        const uint32_t K0 = 8u * mc_mma_part(nsb, ks, pp), K1 = 8u * mc_mma_part(nsb, ks, pp + 1);
#pragma unroll
        for (uint32_t i = 0; i < NA; i++)
            acc[i] = 0.0f;
#pragma unroll 1
        for (uint32_t K = K0; K < K1; K++) {
            const uint32_t s = K % S, so = s * ST, b = K / 8u, hf = K % 8u / 4u, kp = K % 4u, hs = kp / 2u;
            mc_mbar_wait(bars + 8u * s, (K / S) & 1u);
            const unsigned char *st = gbase + so + XB;
#pragma unroll
            for (uint32_t m = 0; m < 2; m++) {
                const uint32_t q = 2u * (kp % 2u) + m; /* the unit of the half */
                const uint32_t qa = *(const uint32_t *)(st + r * 32u + 16u * m + 4u * t);
                const uint32_t qb = *(const uint32_t *)(st + (r + 8u) * 32u + 16u * m + 4u * t);
                const uint32_t ha = *(const uint32_t *)(st + MC_W6_TOP + r * 16u + 8u * m + 4u * hs);
                const uint32_t hb = *(const uint32_t *)(st + MC_W6_TOP + (r + 8u) * 16u + 8u * m + 4u * hs);
                const uint2 fa = hs ? mc_kq6_frag<1>(qa, ha, t) : mc_kq6_frag<0>(qa, ha, t);
                const uint2 fb = hs ? mc_kq6_frag<1>(qb, hb, t) : mc_kq6_frag<0>(qb, hb, t);
                mc_wg_fence_regs(d);
                mc_wg_arrive();
                mc_wg_mma(d, fa.x, fb.x, fa.y, fb.y, mc_wg_desc64(sbase + so + 32u * m), 0u);
                mc_wg_commit();
                mc_wg_wait<0>();
                mc_wg_fence_regs(d);
                const uint32_t sco = MC_W6_SC + 8u * hf + 2u * q + hs, dof = MC_W6_D + 2u * (b % 8u);
                const float Aa = mc_kq6_coef(*(const uint16_t *)(st + r * 16u + dof), st[r * 16u + sco]);
                const float Ab = mc_kq6_coef(*(const uint16_t *)(st + (r + 8u) * 16u + dof), st[(r + 8u) * 16u + sco]);
#pragma unroll
                for (uint32_t j = 0; j < BT / 8u; j++) {
                    acc[4 * j] = fmaf(Aa, d[4 * j], acc[4 * j]);
                    acc[4 * j + 1] = fmaf(Aa, d[4 * j + 1], acc[4 * j + 1]);
                    acc[4 * j + 2] = fmaf(Ab, d[4 * j + 2], acc[4 * j + 2]);
                    acc[4 * j + 3] = fmaf(Ab, d[4 * j + 3], acc[4 * j + 3]);
                }
            }
            __syncwarp();
            if (lane == 0)
                mc_mbar_arrive(bars + 8u * (S + s));
        }
        mc_wk_table<BT, LD>(f, acc, r, t, pp);
    }
    asm volatile("bar.sync 1, %0;" ::"n"(NTH) : "memory");
    mc_mma_epilogue<GLU, BR, BT, LD, NTH>(f, rb, t0, ntok, w.rows, rs, bias, res, ldr, y, ldy);
}

typedef CUresult (*mc_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
/* A 2-D bf16 (u8: uint8) tensor map of rows x cols (row pitch `pitch` elements), boxes of 32 columns x
 * box rows. */
/* cuTensorMapEncodeTiled through the runtime (NULL where the driver lacks it). */
static mc_encode_fn mc_wt_encoder(void) {
    static mc_encode_fn fn;
    if (!fn) {
        cudaDriverEntryPointQueryResult q;
        void *p = NULL;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess && p)
            fn = (mc_encode_fn)p;
    }
    return fn;
}
static cudaError_t mc_wt_map(CUtensorMap *m, const void *base, uint64_t cols, uint64_t rows, uint64_t pitch,
                             uint32_t box_rows, CUtensorMapSwizzle sw, bool u8 = false, uint32_t box_cols = 32u) {
    const mc_encode_fn fn = mc_wt_encoder();
    if (!fn)
        return cudaErrorNotSupported;
    const uint64_t eb = u8 ? 1u : 2u;
    if (((uintptr_t)base & 15u) || (pitch * eb) % 16u)
        return cudaErrorInvalidValue;
    const cuuint64_t dim[2] = {cols, rows}, stride[1] = {pitch * eb};
    const cuuint32_t box[2] = {box_cols, box_rows}, es[2] = {1u, 1u};
    return fn(m, u8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dim, stride,
              box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS
               ? cudaSuccess
               : cudaErrorInvalidValue;
}

/* qdot=mma's S (f32, rows x of lds floats a k-block: nkb rows of M), boxes of bt rows of x by 2
 * k-blocks. */
static cudaError_t mc_ws_map(CUtensorMap *m, const float *base, uint64_t M, uint64_t nkb, uint64_t lds, uint32_t bt) {
    const mc_encode_fn fn = mc_wt_encoder();
    if (!fn)
        return cudaErrorNotSupported;
    if (((uintptr_t)base & 15u) || (lds * 4u) % 16u)
        return cudaErrorInvalidValue;
    const cuuint64_t dim[2] = {M, nkb}, stride[1] = {lds * 4u};
    const cuuint32_t box[2] = {bt, 2u}, es[2] = {1u, 1u};
    return fn(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)base, dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
              CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ==
                   CUDA_SUCCESS
               ? cudaSuccess
               : cudaErrorInvalidValue;
}

/* The current device's multiprocessors where it runs the kernel (an sm_90 device: the file is built
 * for sm_90a alone), else 0. */
static int mc_wg_device_sms(void) {
    int dev = 0, major = 0, minor = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return 0;
    return major == 9 && minor == 0 ? sms : 0;
}
static int mc_wg_device_ok(void) { return mc_wg_device_sms() > 0; }

int mc_gemv_wgmma_available(void) { return mc_wg_device_ok(); }

/* The shared-memory limit of the kernels, once per device (outside any capture). */
cudaError_t mc_gemv_wgmma_prepare(void) {
    if (!mc_wg_device_ok())
        return cudaSuccess; /* never launched there */
    cudaError_t e = cudaSuccess;
#define MC_WT_SET(G, BT)                                                                                               \
    if (e == cudaSuccess)                                                                                              \
        e = cudaFuncSetAttribute(chunk_gemv_wgmma<G, BT>, cudaFuncAttributeMaxDynamicSharedMemorySize,                 \
                                 (int)mc_wt_smem(BT));
    MC_WT_SET(MC_GLU_NONE, 128u)
    MC_WT_SET(MC_GLU_SILU, 128u) MC_WT_SET(MC_GLU_GELU, 128u) MC_WT_SET(MC_GLU_NONE, 64u) MC_WT_SET(MC_GLU_SILU, 64u)
        MC_WT_SET(MC_GLU_GELU, 64u)
#undef MC_WT_SET
#define MC_WQ_SET(G, BT)                                                                                               \
    if (e == cudaSuccess)                                                                                              \
        e = cudaFuncSetAttribute(chunk_gemv_wgmma_q8<G, BT>, cudaFuncAttributeMaxDynamicSharedMemorySize,              \
                                 (int)mc_wq_smem(BT));
            MC_WQ_SET(MC_GLU_NONE, 128u) MC_WQ_SET(MC_GLU_SILU, 128u) MC_WQ_SET(MC_GLU_GELU, 128u)
                MC_WQ_SET(MC_GLU_NONE, 64u) MC_WQ_SET(MC_GLU_SILU, 64u) MC_WQ_SET(MC_GLU_GELU, 64u)
#undef MC_WQ_SET
#define MC_WK_SET(G, BT, T5)                                                                                           \
    if (e == cudaSuccess)                                                                                              \
        e = cudaFuncSetAttribute(chunk_gemv_wgmma_kq<G, BT, T5>, cudaFuncAttributeMaxDynamicSharedMemorySize,          \
                                 (int)mc_wk_smem(BT, T5));
#define MC_WK_SET2(T5)                                                                                                 \
    MC_WK_SET(MC_GLU_NONE, 128u, T5) MC_WK_SET(MC_GLU_SILU, 128u, T5) MC_WK_SET(MC_GLU_GELU, 128u, T5)                 \
    MC_WK_SET(MC_GLU_NONE, 64u, T5) MC_WK_SET(MC_GLU_SILU, 64u, T5) MC_WK_SET(MC_GLU_GELU, 64u, T5)
    MC_WK_SET2(false) MC_WK_SET2(true)
#undef MC_WK_SET2
#undef MC_WK_SET
#define MC_W6_SET(G, BT)                                                                                               \
    if (e == cudaSuccess)                                                                                              \
        e = cudaFuncSetAttribute(chunk_gemv_wgmma_k6<G, BT>, cudaFuncAttributeMaxDynamicSharedMemorySize,              \
                                 (int)mc_w6_smem(BT));
    MC_W6_SET(MC_GLU_NONE, 128u) MC_W6_SET(MC_GLU_SILU, 128u) MC_W6_SET(MC_GLU_GELU, 128u)
    MC_W6_SET(MC_GLU_NONE, 64u) MC_W6_SET(MC_GLU_SILU, 64u) MC_W6_SET(MC_GLU_GELU, 64u)
#undef MC_W6_SET
    return e;
}

/* Calls launch(G, B) with G the GLU and B the rows of x a block (64 or 128) of a call, as
 * std::integral_constant values: one place for the launchers' choice of instantiation. */
template <class L> static void mc_wg_dispatch(int glu, uint32_t bt, L launch) {
    using B64 = std::integral_constant<uint32_t, 64u>;
    using B128 = std::integral_constant<uint32_t, 128u>;
    using GS = std::integral_constant<int, MC_GLU_SILU>;
    using GG = std::integral_constant<int, MC_GLU_GELU>;
    using GN = std::integral_constant<int, MC_GLU_NONE>;
    if (glu == MC_GLU_SILU)
        bt == 64u ? launch(GS{}, B64{}) : launch(GS{}, B128{});
    else if (glu == MC_GLU_GELU)
        bt == 64u ? launch(GG{}, B64{}) : launch(GG{}, B128{});
    else
        bt == 64u ? launch(GN{}, B64{}) : launch(GN{}, B128{});
}

/* gemv=mma's chunk GEMV after its prep (gemv_mma.cu's mc_mma_chunk, x' in the permuted layout, rows
 * of the columns rounded up to 32), on blocks of bt rows of x (64 or 128; 0: mc_wg_bt's choice):
 * cudaErrorNotSupported on a device other than sm_90, cudaErrorInvalidValue for mma2's two planes,
 * another bt or a matrix a tensor map cannot describe. The bits do not depend on bt: each output
 * element's chain of instructions is the same (wgmma_probe: n 64 and 128 give mma.sync's bits). */
cudaError_t mc_gemv_wgmma_launch(const mc_matrix *w, uint32_t ks, int two, const uint16_t *xo, const float *rsp,
                                 const float *bias, const float *residual, uint32_t ldr, float *y, uint32_t ldy,
                                 int glu, uint32_t M, uint32_t bt, cudaStream_t st) {
    const int sms = mc_wg_device_sms();
    if (!sms)
        return cudaErrorNotSupported;
    if (two || (bt != 0 && bt != 64 && bt != 128))
        return cudaErrorInvalidValue;
    const uint32_t row_blocks = (w->rows + MC_WG_BR - 1) / MC_WG_BR;
    const bool q8 = w->type == MEMRA_TYPE_Q8_0; /* q8=mma: chunk_gemv_wgmma_q8 */
    if (bt == 0) /* 128 rows of x a block unless that leaves a quarter of the multiprocessors or more
                  * without one (blocks of 64 copy the weights twice as often: on the H200 at M 512
                  * they gain 6% with 96 blocks of 128 (llama-1b's q/k/v), 21-25% with 64 (its output
                  * and down projections), and lose 12-31% with 128 (llama-8b's) */
        bt = 4u * (uint64_t)((M + 127u) / 128u) * row_blocks <= 3u * (uint64_t)sms ? 64u : 128u; /* q8=mma too:
                  * 64 everywhere lost 9-10% on llama-8b Q8_0 (pp512 10.4-10.8k against 11.5-12.0k) */
    const dim3 grid((M + bt - 1) / bt, row_blocks);
    const uint32_t ldo = (w->cols + 31u) / 32u * 32u;
    if (q8 && (w->cols % 32u || !w->scales))
        return cudaErrorInvalidValue;
    CUtensorMap tw, tx;
    cudaError_t e = mc_wt_map(&tw, w->data, w->cols, w->rows, w->stride, MC_WG_BR, CU_TENSOR_MAP_SWIZZLE_NONE, q8);
    if (e == cudaSuccess)
        e = mc_wt_map(&tx, xo, ldo, M, ldo, bt, CU_TENSOR_MAP_SWIZZLE_64B);
    if (e != cudaSuccess)
        return e;
    mc_wg_dispatch(glu, bt, [&](auto G, auto B) {
        constexpr int GL = decltype(G)::value;
        constexpr uint32_t BT = decltype(B)::value;
        if (q8)
            chunk_gemv_wgmma_q8<GL, BT>
                <<<grid, MC_WG_NTH + 32u, mc_wq_smem(BT), st>>>(tw, tx, *w, ks, rsp, bias, residual, ldr, y, ldy, M);
        else
            chunk_gemv_wgmma<GL, BT>
                <<<grid, MC_WG_NTH + 32u, mc_wt_smem(BT), st>>>(tw, tx, *w, ks, rsp, bias, residual, ldr, y, ldy, M);
    });
    return cudaGetLastError();
}

/* qdot=mma's chunk GEMV (Q4_K, Q5_K, Q6_K) after gemv_mma_chunk.cu's prep (x' permuted as gemv=mma's,
 * or in the Q6_K slots; S transposed: rows of lds floats a k-block, none for Q6_K): as
 * mc_gemv_wgmma_launch, on chunk_gemv_wgmma_kq or chunk_gemv_wgmma_k6. */
cudaError_t mc_gemv_wgmma_kq_launch(const mc_matrix *w, uint32_t ks, const uint16_t *xo, const float *xs,
                                    uint32_t lds, const float *rsp, const float *bias, const float *residual,
                                    uint32_t ldr, float *y, uint32_t ldy, int glu, uint32_t M, uint32_t bt,
                                    cudaStream_t st) {
    const int sms = mc_wg_device_sms();
    if (!sms)
        return cudaErrorNotSupported;
    const bool t5 = w->type == MEMRA_TYPE_Q5_K, t6 = w->type == MEMRA_TYPE_Q6_K; /* Q5_K: the fifth bits after
                                                                                 * the quant bytes of a row */
    uint64_t dr = 0, ar = 0;
    if ((bt != 0 && bt != 64 && bt != 128) || (w->type != MEMRA_TYPE_Q4_K && !t5 && !t6) ||
        !mc_kq_layout(w->type, w->cols, &dr, &ar) || !w->aux || w->stride != dr || w->aux_stride != ar)
        return cudaErrorInvalidValue;
    const uint32_t row_blocks = (w->rows + MC_WG_BR - 1) / MC_WG_BR;
    if (bt == 0)
        bt = 4u * (uint64_t)((M + 127u) / 128u) * row_blocks <= 3u * (uint64_t)sms ? 64u : 128u;
    const dim3 grid((M + bt - 1) / bt, row_blocks);
    CUtensorMap tw, tx, ta, th, ts;
    memset(&ts, 0, sizeof ts); /* Q6_K has no S */
    cudaError_t e = mc_wt_map(&tw, w->data, w->stride, w->rows, w->stride, MC_WG_BR, CU_TENSOR_MAP_SWIZZLE_NONE, true);
    th = tw; /* Q4_K reads no high bits: the parameter only */
    if (e == cudaSuccess && (t5 || t6)) /* Q5_K's fifth bits, Q6_K's top bits: 16-byte boxes */
        e = mc_wt_map(&th, w->data, w->stride, w->rows, w->stride, MC_WG_BR, CU_TENSOR_MAP_SWIZZLE_NONE, true, 16u);
    if (e == cudaSuccess)
        e = mc_wt_map(&tx, xo, w->cols, M, w->cols, bt, CU_TENSOR_MAP_SWIZZLE_64B);
    if (e == cudaSuccess)
        e = mc_wt_map(&ta, w->aux, w->aux_stride, w->rows, w->aux_stride, MC_WG_BR, CU_TENSOR_MAP_SWIZZLE_NONE, true, 16u);
    if (e == cudaSuccess && !t6)
        e = mc_ws_map(&ts, xs, M, w->cols / 32u, lds, bt);
    if (e != cudaSuccess)
        return e;
    mc_wg_dispatch(glu, bt, [&](auto G, auto B) {
        constexpr int GL = decltype(G)::value;
        constexpr uint32_t BT = decltype(B)::value;
        if (t6)
            chunk_gemv_wgmma_k6<GL, BT><<<grid, MC_WG_NTH + 32u, mc_w6_smem(BT), st>>>(tw, tx, ta, th, *w, ks, rsp, bias,
                                                                                     residual, ldr, y, ldy, M);
        else if (t5)
            chunk_gemv_wgmma_kq<GL, BT, true><<<grid, MC_WG_NTH + 32u, mc_wk_smem(BT, true), st>>>(
                tw, tx, ta, th, ts, *w, ks, rsp, bias, residual, ldr, y, ldy, M);
        else
            chunk_gemv_wgmma_kq<GL, BT, false><<<grid, MC_WG_NTH + 32u, mc_wk_smem(BT, false), st>>>(
                tw, tx, ta, th, ts, *w, ks, rsp, bias, residual, ldr, y, ldy, M);
    });
    return cudaGetLastError();
}

/* The census's family of a kernel of this file, NULL for another. */
const char *mc_gemv_wgmma_family(const void *f) {
    static const void *const k[] = {
        (const void *)chunk_gemv_wgmma<MC_GLU_NONE, 128u>,    (const void *)chunk_gemv_wgmma<MC_GLU_SILU, 128u>,
        (const void *)chunk_gemv_wgmma<MC_GLU_GELU, 128u>,    (const void *)chunk_gemv_wgmma<MC_GLU_NONE, 64u>,
        (const void *)chunk_gemv_wgmma<MC_GLU_SILU, 64u>,     (const void *)chunk_gemv_wgmma<MC_GLU_GELU, 64u>,
        (const void *)chunk_gemv_wgmma_q8<MC_GLU_NONE, 128u>, (const void *)chunk_gemv_wgmma_q8<MC_GLU_SILU, 128u>,
        (const void *)chunk_gemv_wgmma_q8<MC_GLU_GELU, 128u>, (const void *)chunk_gemv_wgmma_q8<MC_GLU_NONE, 64u>,
        (const void *)chunk_gemv_wgmma_q8<MC_GLU_SILU, 64u>,  (const void *)chunk_gemv_wgmma_q8<MC_GLU_GELU, 64u>,
        (const void *)chunk_gemv_wgmma_kq<MC_GLU_NONE, 128u, false>,
        (const void *)chunk_gemv_wgmma_kq<MC_GLU_SILU, 128u, false>,
        (const void *)chunk_gemv_wgmma_kq<MC_GLU_GELU, 128u, false>,
        (const void *)chunk_gemv_wgmma_kq<MC_GLU_NONE, 64u, false>,
        (const void *)chunk_gemv_wgmma_kq<MC_GLU_SILU, 64u, false>,
        (const void *)chunk_gemv_wgmma_kq<MC_GLU_GELU, 64u, false>,
        (const void *)chunk_gemv_wgmma_kq<MC_GLU_NONE, 128u, true>,
        (const void *)chunk_gemv_wgmma_kq<MC_GLU_SILU, 128u, true>,
        (const void *)chunk_gemv_wgmma_kq<MC_GLU_GELU, 128u, true>,
        (const void *)chunk_gemv_wgmma_kq<MC_GLU_NONE, 64u, true>,
        (const void *)chunk_gemv_wgmma_kq<MC_GLU_SILU, 64u, true>,
        (const void *)chunk_gemv_wgmma_kq<MC_GLU_GELU, 64u, true>,
        (const void *)chunk_gemv_wgmma_k6<MC_GLU_NONE, 128u>, (const void *)chunk_gemv_wgmma_k6<MC_GLU_SILU, 128u>,
        (const void *)chunk_gemv_wgmma_k6<MC_GLU_GELU, 128u>, (const void *)chunk_gemv_wgmma_k6<MC_GLU_NONE, 64u>,
        (const void *)chunk_gemv_wgmma_k6<MC_GLU_SILU, 64u>,  (const void *)chunk_gemv_wgmma_k6<MC_GLU_GELU, 64u>};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i] == f)
            return "chunk_gemv";
    return NULL;
}
