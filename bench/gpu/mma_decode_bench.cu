/* mma_decode_bench.cu: gemv=mma's decode GEMV (backends/cuda/gemv_mma.cu, issue 28) kernel by
 * kernel on llama-8b's and llama-1b's BF16 shapes: the register version gemv=mma shipped first
 * (`old`, a copy here), the production kernel (mc_gemv_mma) and variants defined here (how the
 * weights reach the registers: registers one batch ahead, or a per-warp cp.async ring in shared
 * memory filled by lane fragments or by row segments; whether x' comes from global memory each
 * k-block or is staged in shared memory once a block; how the tiles spread over the grid; the L2
 * hints), as microseconds a launch and the share of a 4.25 TB/s ceiling (weight bytes plus x,
 * norm, residual and output). Every kernel runs the same arithmetic (the same k-blocks in the
 * same order, the same x', sum of squares, MMAs and epilogue), and before timing its output is
 * compared bit for bit with the old kernel's: a difference is printed and the exit status is 1
 * (negative control, per shape: weight (5, 7) one bf16 ulp up must change the old kernel's output).
 * Each launch reads another copy of the weights (enough copies that none stays in L2); the
 * launches are programmatic (pdl=1), back to back in one CUDA graph, as in cuda-graph decode.
 *
 *   memra_cuda_mma_decode_bench [reps]     (default 40 timed launches a kernel) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.cuh"
#include "cuda_common.cuh"

/* ---- the variants ------------------------------------------------------------------------------ */

/* The production arithmetic's pieces (gemv_mma.cu's device helpers, copied: they are file-local
 * there). */
#define DV_WARPS 8u
__device__ __forceinline__ void dv_mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t dv_part(uint32_t nkb, uint32_t ks, uint32_t p) {
    return (uint32_t)((uint64_t)nkb * p / ks);
}
__device__ __forceinline__ uint32_t dv_pack(float a, float b) {
    return (uint32_t)memra_f32_to_bf16(a) | ((uint32_t)memra_f32_to_bf16(b) << 16);
}

/* One k-block of the chain: x' of the lane's 8 columns (lanes 0..3, column 0 of B; from the
 * staged copy xs when given: x' as bf16 at xh, x at xf), the sum of squares along, then the two
 * MMAs (lo: row g, hi: row g + 8). */
template <int NORM>
__device__ __forceinline__ void dv_kblock(float (&d)[4], float &ss, uint4 lo, uint4 hi, uint32_t kb, uint32_t g,
                                          uint32_t t, const float *x, const float *norm_w, uint32_t cols,
                                          const uint4 *xh, const float4 *xf) {
    const uint32_t c = kb * 32 + 8 * t;
    uint4 xb = make_uint4(0, 0, 0, 0);
    if (g == 0 && c < cols) {
        if (xh) {
            if (NORM) {
                const float4 v0 = xf[c / 4], v1 = xf[c / 4 + 1];
                const float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
                for (uint32_t e = 0; e < 8; e++)
                    ss = fmaf(v[e], v[e], ss);
            }
            xb = xh[c / 8];
        } else {
            const float4 v0 = __ldg((const float4 *)(x + c)), v1 = __ldg((const float4 *)(x + c) + 1);
            float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
            if (NORM) {
                const float4 g0 = __ldg((const float4 *)(norm_w + c)), g1 = __ldg((const float4 *)(norm_w + c) + 1);
                const float gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
                for (uint32_t e = 0; e < 8; e++) {
                    ss = fmaf(v[e], v[e], ss);
                    v[e] = __fmul_rn(v[e], gv[e]);
                }
            }
            xb = make_uint4(dv_pack(v[0], v[1]), dv_pack(v[2], v[3]), dv_pack(v[4], v[5]), dv_pack(v[6], v[7]));
        }
    }
    dv_mma_bf16(d, lo.x, hi.x, lo.y, hi.y, xb.x, xb.y);
    dv_mma_bf16(d, lo.z, hi.z, lo.w, hi.w, xb.z, xb.w);
}

/* x' (and with a norm x) of every column into shared memory (xh: nkb * 4 uint4, xf: nkb * 8
 * float4), 8 columns a thread of the block; then the block's barrier. */
template <int NORM>
__device__ __forceinline__ void dv_stage(uint4 *xh, float4 *xf, const float *x, const float *norm_w, uint32_t cols) {
    const uint32_t nkb = (cols + 31) / 32;
    for (uint32_t i = threadIdx.x; i < nkb * 4; i += blockDim.x) {
        const uint32_t c = 8 * i;
        float4 v0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v1 = v0;
        uint4 hb = make_uint4(0, 0, 0, 0);
        if (c < cols) {
            v0 = __ldg((const float4 *)(x + c));
            v1 = __ldg((const float4 *)(x + c) + 1);
            float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
            if (NORM) {
                const float4 g0 = __ldg((const float4 *)(norm_w + c)), g1 = __ldg((const float4 *)(norm_w + c) + 1);
                const float gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
                for (uint32_t e = 0; e < 8; e++)
                    v[e] = __fmul_rn(v[e], gv[e]);
            }
            hb = make_uint4(dv_pack(v[0], v[1]), dv_pack(v[2], v[3]), dv_pack(v[4], v[5]), dv_pack(v[6], v[7]));
        }
        xh[i] = hb;
        if (NORM) {
            xf[2 * i] = v0;
            xf[2 * i + 1] = v1;
        }
    }
    __syncthreads();
}

/* 16 bytes global -> registers with hint bits H (0: ld.global.cs as production; bit 1 an L2
 * evict-first policy, bit 0 the L2::256B prefetch). */
template <uint32_t H> __device__ __forceinline__ uint4 dv_ld(const uint4 *p, uint64_t pol) {
    uint4 v;
    if (H == 0)
        return __ldcs(p);
    if (H == 2)
        asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p), "l"(pol));
    else if (H == 3)
        asm volatile("ld.global.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p), "l"(pol));
    else
        asm volatile("ld.global.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p));
    return v;
}
/* 16 bytes global -> shared (cp.async, zero-filled past n bytes), hint bits H as dv_ld. */
template <uint32_t H> __device__ __forceinline__ void dv_cp(uint32_t dst, const void *src, uint32_t n, uint64_t pol) {
    if (H == 0)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
    else if (H == 1)
        asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
    else if (H == 2)
        asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(dst), "l"(src), "r"(n),
                     "l"(pol)
                     : "memory");
    else
        asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;" ::"r"(dst), "l"(src),
                     "r"(n), "l"(pol)
                     : "memory");
}

/* The decode GEMV, production arithmetic, with: MODE 0 the weights in registers (V k-blocks a
 * batch, loaded one batch ahead: production at V 4, H 0), MODE 1 a per-warp cp.async ring of S
 * stages of V k-blocks, each lane copying its own fragments (no barrier), MODE 2 the same ring
 * filled by row segments (4V lanes a row: 64V contiguous bytes of a row an instruction, whole
 * 128-byte lines from V 2), the stage swizzled (chunk c of row r at c ^ 4 (r & 1): the fragment
 * reads of rows g and g + 1 hit distinct banks), a __syncwarp after the wait and before the
 * refill. SPREAD: tile = slot * grid + block (the single-wave grids' tiles spread evenly over
 * 2 blocks a multiprocessor) instead of block * slots + slot. */
template <int GLU, int NORM, int MODE, uint32_t V, uint32_t S, uint32_t H, int SPREAD, int XS>
__global__ void __launch_bounds__(32 * DV_WARPS, 2)
    dv_gemv(const mc_matrix w, uint32_t ks, const float *x, const float *norm_w, float eps, const float *residual,
            float *y) {
    extern __shared__ uint4 dv_ring[];
    __shared__ float red[DV_WARPS][17];
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const uint32_t part = warp % ks, slot = warp / ks, slots = DV_WARPS / ks;
    const uint32_t tile = SPREAD ? slot * gridDim.x + blockIdx.x : blockIdx.x * slots + slot, r0 = tile * 16;
    const bool live = r0 < w.rows;
    const uint32_t nkb = (w.cols + 31) / 32, kb0 = dv_part(nkb, ks, part), kb1 = dv_part(nkb, ks, part + 1);
    const uint32_t nq = w.cols / 8;
    const uint16_t *wd = (const uint16_t *)w.data;
    uint64_t pol = 0;
    if (H & 2)
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, ss = 0.0f;
    const uint32_t ra = r0 + g, rb = r0 + g + 8;
    const uint4 *pa = (const uint4 *)(wd + (size_t)(ra < w.rows ? ra : r0) * w.stride);
    const uint4 *pb = (const uint4 *)(wd + (size_t)(rb < w.rows ? rb : r0) * w.stride);
    uint4 *xh = XS ? dv_ring + (MODE ? DV_WARPS * S * V * 64 : 0) : NULL;
    float4 *xf = XS ? (float4 *)(xh + nkb * 4) : NULL;
    if (MODE == 0) {
        uint4 na[V], nb[V];
        auto load = [&](uint32_t kb) {
#pragma unroll
            for (uint32_t u = 0; u < V; u++) {
                const uint32_t q = (kb + u) * 4 + t;
                na[u] = nb[u] = make_uint4(0, 0, 0, 0);
                if (kb + u < kb1 && q < nq) {
                    na[u] = dv_ld<H>(pa + q, pol);
                    nb[u] = dv_ld<H>(pb + q, pol);
                }
            }
        };
        if (live)
            load(kb0);
        mc_wait_prior_grid(NORM ? MC_TRIGGER_GEMV6 : MC_TRIGGER_GEMV6_RES);
        if (XS)
            dv_stage<NORM>(xh, xf, x, norm_w, w.cols);
        if (live)
            for (uint32_t kb = kb0; kb < kb1; kb += V) {
                uint4 ca[V], cb[V];
#pragma unroll
                for (uint32_t u = 0; u < V; u++) {
                    ca[u] = na[u];
                    cb[u] = nb[u];
                }
                if (kb + V < kb1)
                    load(kb + V);
#pragma unroll
                for (uint32_t u = 0; u < V; u++) {
                    if (kb + u >= kb1)
                        break;
                    dv_kblock<NORM>(d, ss, ca[u], cb[u], kb + u, g, t, x, norm_w, w.cols, xh, xf);
                }
            }
    } else {
        const uint32_t nst = (kb1 - kb0 + V - 1) / V;
        const uint4 *ring = dv_ring + (size_t)warp * S * V * 64;
        const uint32_t base = (uint32_t)__cvta_generic_to_shared(ring);
        constexpr uint32_t L = 4 * V, RPI = MODE == 2 ? 32 / (4 * V) : 1; /* lanes a row, rows an instruction */
        const uint32_t lc = lane % L, lr = lane / L;
        auto issue = [&](uint32_t s) {
            if (s < nst) {
                const uint32_t sb = base + (s % S) * V * 1024;
                if (MODE == 1) {
#pragma unroll
                    for (uint32_t u = 0; u < V; u++) {
                        const uint32_t kb = kb0 + s * V + u, q = kb * 4 + t, o = sb + u * 1024 + lane * 16;
                        if (kb < kb1) {
                            dv_cp<H>(o, q < nq ? pa + q : pa, q < nq ? 16 : 0, pol);
                            dv_cp<H>(o + 512, q < nq ? pb + q : pb, q < nq ? 16 : 0, pol);
                        }
                    }
                } else {
                    const uint32_t q = (kb0 + s * V) * 4 + lc;
                    if (kb0 + s * V + lc / 4 < kb1) {
#pragma unroll
                        for (uint32_t i = 0; i < 16 / RPI; i++) {
                            const uint32_t r = i * RPI + lr, row = r0 + r < w.rows ? r0 + r : r0;
                            const uint4 *src = (const uint4 *)(wd + (size_t)row * w.stride);
                            dv_cp<H>(sb + (r * L + (lc ^ (4 * (r & 1)))) * 16, q < nq ? src + q : src, q < nq ? 16 : 0,
                                     pol);
                        }
                    }
                }
            }
            asm volatile("cp.async.commit_group;" ::: "memory");
        };
        if (live)
#pragma unroll
            for (uint32_t s = 0; s < S; s++)
                issue(s);
        mc_wait_prior_grid(NORM ? MC_TRIGGER_GEMV6 : MC_TRIGGER_GEMV6_RES);
        if (XS)
            dv_stage<NORM>(xh, xf, x, norm_w, w.cols);
        if (live) {
#pragma unroll 1
            for (uint32_t s = 0; s < nst; s++) {
                asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory");
                if (MODE == 2)
                    __syncwarp();
                const uint4 *st = ring + (s % S) * V * 64;
#pragma unroll
                for (uint32_t u = 0; u < V; u++) {
                    const uint32_t kb = kb0 + s * V + u;
                    if (kb >= kb1)
                        break;
                    uint4 lo, hi;
                    if (MODE == 1) {
                        lo = st[u * 64 + lane];
                        hi = st[u * 64 + 32 + lane];
                    } else {
                        const uint32_t c = (4 * u + t) ^ (4 * (g & 1));
                        lo = st[g * L + c];
                        hi = st[(g + 8) * L + c];
                    }
                    dv_kblock<NORM>(d, ss, lo, hi, kb, g, t, x, norm_w, w.cols, xh, xf);
                }
                if (MODE == 2)
                    __syncwarp();
                issue(s + S);
            }
            asm volatile("cp.async.wait_all;" ::: "memory");
        }
    }
    if (live) {
        if (NORM) {
            ss = __fadd_rn(ss, __shfl_xor_sync(MC_FULL, ss, 2));
            ss = __fadd_rn(ss, __shfl_xor_sync(MC_FULL, ss, 1));
        }
        if (t == 0) {
            red[warp][g] = d[0];
            red[warp][g + 8] = d[2];
        }
        if (lane == 0)
            red[warp][16] = ss;
    }
    __syncthreads();
    if (live && part == 0 && lane < 4) {
        float dd[MC_GEMV_ROWS], sst = red[warp][16];
#pragma unroll
        for (uint32_t j = 0; j < MC_GEMV_ROWS; j++)
            dd[j] = red[warp][4 * lane + j];
        for (uint32_t p = 1; p < ks; p++) {
#pragma unroll
            for (uint32_t j = 0; j < MC_GEMV_ROWS; j++)
                dd[j] = __fadd_rn(dd[j], red[warp + p][4 * lane + j]);
            sst = __fadd_rn(sst, red[warp + p][16]);
        }
        const uint32_t rq = r0 + 4 * lane;
        if (rq < w.rows) {
            if (NORM) {
                const float sc = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sst, (float)w.cols), eps)));
#pragma unroll
                for (uint32_t j = 0; j < MC_GEMV_ROWS; j++)
                    dd[j] = __fmul_rn(dd[j], sc);
            }
            mc_rows_store<GLU>(dd, rq, w.rows, NULL, residual, y);
        }
    }
}

/* One launch of variant (MODE, V, S, H, SPREAD, XS) for the bench's three kernel kinds: a plain
 * GEMV with a residual (no norm), one with the norm, the SwiGLU with the norm. */
template <int MODE, uint32_t V, uint32_t S, uint32_t H, int SPREAD, int XS>
static cudaError_t dv_launch(const mc_config *c, int glu, const mc_matrix *w, const float *x, const float *nw,
                             float eps, const float *res, float *y, cudaStream_t st, uint32_t nsm) {
    const uint32_t ks = mc_gemv_mma_ksplit(w->rows, w->cols), slots = DV_WARPS / ks, tiles = (w->rows + 15) / 16;
    const uint32_t nkb = (w->cols + 31) / 32;
    uint32_t grid = (tiles + slots - 1) / slots;
    const bool spread = SPREAD && tiles <= 2 * nsm * slots; /* single-wave grids only */
    if (spread)
        grid = tiles < 2 * nsm ? tiles : 2 * nsm;
    const uint32_t smem = (MODE ? DV_WARPS * S * V * 1024 : 0) + (XS ? nkb * 64 + (nw ? nkb * 128 : 0) : 0);
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(32 * DV_WARPS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    cudaError_t e = cudaSuccess;
#define DV_GO(G, N, SP)                                                                                                \
    ((e = cudaFuncSetAttribute(dv_gemv<G, N, MODE, V, S, H, SP, XS>, cudaFuncAttributeMaxDynamicSharedMemorySize,      \
                               (int)smem)) == cudaSuccess                                                              \
         ? cudaLaunchKernelEx(&cfg, dv_gemv<G, N, MODE, V, S, H, SP, XS>, *w, ks, x, nw, eps, res, y)                  \
         : e)
#define DV_SP(G, N) (spread ? DV_GO(G, N, SPREAD) : DV_GO(G, N, 0))
    if (glu == MC_GLU_SILU)
        e = DV_SP(MC_GLU_SILU, 1);
    else if (nw)
        e = DV_SP(MC_GLU_NONE, 1);
    else
        e = DV_SP(MC_GLU_NONE, 0);
#undef DV_SP
#undef DV_GO
    return e != cudaSuccess ? e : cudaGetLastError();
}

/* ---- the bench ------------------------------------------------------------------------------- */

typedef struct db_shape {
    const char *name;
    uint32_t rows, cols;
    int glu, norm, res; /* SwiGLU (interleaved gate/up), RMSNorm of x, a residual */
} db_shape;

static const db_shape shapes[] = {
    {"8b qkv", 6144, 4096, 0, 1, 0},
    {"8b wo", 4096, 4096, 0, 0, 1},
    {"8b gate/up", 28672, 4096, MC_GLU_SILU, 1, 0},
    {"8b down", 4096, 14336, 0, 0, 1},
    {"8b head", 128256, 4096, 0, 1, 0},
    {"1b qkv", 3072, 2048, 0, 1, 0},
    {"1b wo", 2048, 2048, 0, 0, 1},
    {"1b gate/up", 16384, 2048, MC_GLU_SILU, 1, 0},
    {"1b down", 2048, 8192, 0, 0, 1},
    {"1b head", 128256, 2048, 0, 1, 0},
};
/* Kernel 0: the register version gemv=mma shipped first (the bits every other kernel must
 * give); 1: mc_gemv_mma (production); 2..: variants. */
#define DB_NK 12
#define DB_REF 0
static const char *kname[DB_NK] = {
    "old",          /* MODE 0, V 4, .cs, x from global memory: the first production kernel */
    "prod",         /* mc_gemv_mma: ring(2,4)own + x staged */
    "old+xs",       /* the old kernel with x' and x staged in shared memory */
    "ring24",       /* the call-1 ring: per-warp cp.async, lane fragments, ef+pf, x from global */
    "ring24+xs",    /* ... with x staged (production's design, compiled here) */
    "ring18+xs",    /* 8 stages of 1 k-block */
    "ring26+xs",    /* 6 stages of 2 k-blocks (12 KB a warp) */
    "row42+xs",     /* ring filled by 256-byte row segments, swizzled, 2 stages of 4 */
    "row24+xs",     /* 128-byte row segments, 4 stages of 2 */
    "old+spread",   /* the old kernel, single-wave grids' tiles spread over 2 blocks an SM */
    "ring24+xs+sp", /* ring24+xs, spread */
    "old+ef+xs",    /* the old kernel, L2 evict-first loads, x staged */
};

static cudaError_t run(int k, const mc_config *c, const db_shape *s, const mc_matrix *w, const float *x,
                       const float *nw, const float *res, float *y, cudaStream_t st, uint32_t nsm) {
    const float eps = 1e-5f, *n = s->norm ? nw : NULL, *r = s->res ? res : NULL;
    switch (k) {
    case 0: return dv_launch<0, 4, 1, 0, 0, 0>(c, s->glu, w, x, n, eps, r, y, st, nsm);
    case 1: return mc_gemv_mma(c, s->glu, w, x, n, eps, NULL, r, y, st, NULL);
    case 2: return dv_launch<0, 4, 1, 0, 0, 1>(c, s->glu, w, x, n, eps, r, y, st, nsm);
    case 3: return dv_launch<1, 2, 4, 3, 0, 0>(c, s->glu, w, x, n, eps, r, y, st, nsm);
    case 4: return dv_launch<1, 2, 4, 3, 0, 1>(c, s->glu, w, x, n, eps, r, y, st, nsm);
    case 5: return dv_launch<1, 1, 8, 3, 0, 1>(c, s->glu, w, x, n, eps, r, y, st, nsm);
    case 6: return dv_launch<1, 2, 6, 3, 0, 1>(c, s->glu, w, x, n, eps, r, y, st, nsm);
    case 7: return dv_launch<2, 4, 2, 3, 0, 1>(c, s->glu, w, x, n, eps, r, y, st, nsm);
    case 8: return dv_launch<2, 2, 4, 3, 0, 1>(c, s->glu, w, x, n, eps, r, y, st, nsm);
    case 9: return dv_launch<0, 4, 1, 0, 1, 0>(c, s->glu, w, x, n, eps, r, y, st, nsm);
    case 10: return dv_launch<1, 2, 4, 3, 1, 1>(c, s->glu, w, x, n, eps, r, y, st, nsm);
    default: return dv_launch<0, 4, 1, 2, 0, 1>(c, s->glu, w, x, n, eps, r, y, st, nsm);
    }
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 40;
    if (reps < 1 || reps > 100000) {
        fprintf(stderr, "usage: memra_cuda_mma_decode_bench [reps 1..100000]\n");
        return 2;
    }
    int ndev = 0, nsm = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "mma_decode_bench: no CUDA device\n");
        return 77;
    }
    MC_BENCH_CHECK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
    mc_config c = mc_config_default;
    c.gemv = MC_GEMV_MMA;
    c.pdl = 1;
    MC_BENCH_CHECK(mc_gemv_prepare());
    cudaStream_t st;
    MC_BENCH_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    MC_BENCH_CHECK(cudaEventCreate(&e0));
    MC_BENCH_CHECK(cudaEventCreate(&e1));
    const double ceiling = 4.25e12;
    int bad = 0;
    double tot[DB_NK] = {0};
    printf("| shape | rows x cols | KS |");
    for (int k = 0; k < DB_NK; k++)
        printf(" %s us | %% |", kname[k]);
    printf(" bits |\n");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const db_shape *s = &shapes[si];
        const size_t wb = (size_t)s->rows * s->cols * 2;
        int copies = (int)((512ull << 20) / wb) + 2;
        if (copies > 24)
            copies = 24;
        mc_matrix w[24];
        for (int i = 0; i < copies; i++) {
            memset(&w[i], 0, sizeof w[i]);
            w[i].type = MEMRA_TYPE_BF16;
            w[i].rows = s->rows;
            w[i].cols = s->cols;
            w[i].stride = s->cols;
            MC_BENCH_CHECK(cudaMalloc(&w[i].data, wb));
            mc_bench_fill(w[i].data, wb, 17 + (uint32_t)i, 0x807f807fu, 0x3c003c00u); /* small finite bf16 */
        }
        float *x, *nw, *res, *y, *yref;
        const uint32_t out = s->glu ? s->rows / 2 : s->rows;
        MC_BENCH_CHECK(cudaMalloc((void **)&x, s->cols * 4));
        MC_BENCH_CHECK(cudaMalloc((void **)&nw, s->cols * 4));
        MC_BENCH_CHECK(cudaMalloc((void **)&res, s->rows * 4));
        MC_BENCH_CHECK(cudaMalloc((void **)&y, s->rows * 4));
        MC_BENCH_CHECK(cudaMalloc((void **)&yref, s->rows * 4));
        mc_bench_fill(x, s->cols * 4, 5, 0x807fffffu, 0x3f000000u);  /* +-[0.5, 1) */
        mc_bench_fill(nw, s->cols * 4, 6, 0x007fffffu, 0x3f800000u); /* [1, 2) */
        mc_bench_fill(res, s->rows * 4, 7, 0x807fffffu, 0x3e000000u);
        MC_BENCH_CHECK(cudaDeviceSynchronize());
        float *hr = (float *)malloc(out * 4), *hy = (float *)malloc(out * 4);
        if (!hr || !hy)
            return 3;
        MC_BENCH_CHECK(run(DB_REF, &c, s, &w[0], x, nw, res, yref, st, (uint32_t)nsm));
        MC_BENCH_CHECK(cudaStreamSynchronize(st));
        MC_BENCH_CHECK(cudaMemcpy(hr, yref, out * 4, cudaMemcpyDeviceToHost));
        { /* negative control: one weight one bf16 ulp up must change the reference's output */
            uint16_t q, q1;
            uint16_t *p = (uint16_t *)w[0].data + (size_t)5 * s->cols + 7;
            MC_BENCH_CHECK(cudaMemcpy(&q, p, 2, cudaMemcpyDeviceToHost));
            q1 = (uint16_t)(q + 1);
            MC_BENCH_CHECK(cudaMemcpy(p, &q1, 2, cudaMemcpyHostToDevice));
            MC_BENCH_CHECK(run(DB_REF, &c, s, &w[0], x, nw, res, y, st, (uint32_t)nsm));
            MC_BENCH_CHECK(cudaStreamSynchronize(st));
            MC_BENCH_CHECK(cudaMemcpy(hy, y, out * 4, cudaMemcpyDeviceToHost));
            MC_BENCH_CHECK(cudaMemcpy(p, &q, 2, cudaMemcpyHostToDevice));
            if (!memcmp(hy, hr, out * 4)) {
                fprintf(stderr, "%s: CONTROL FAILED: a one-ulp weight change left the output's bits alone\n", s->name);
                bad = 1;
            }
        }
        const double bytes = (double)wb + s->cols * (s->norm ? 8.0 : 4.0) + out * 4.0 + (s->res ? s->rows * 4.0 : 0.0);
        printf("| %s | %ux%u | %u |", s->name, s->rows, s->cols, mc_gemv_mma_ksplit(s->rows, s->cols));
        int same_all = 1;
        for (int k = 0; k < DB_NK; k++) {
            if (k != DB_REF) { /* the bits first (this also sets the kernel's shared-memory limit) */
                MC_BENCH_CHECK(cudaMemset(y, 0xff, s->rows * 4));
                MC_BENCH_CHECK(run(k, &c, s, &w[0], x, nw, res, y, st, (uint32_t)nsm));
                MC_BENCH_CHECK(cudaStreamSynchronize(st));
                MC_BENCH_CHECK(cudaMemcpy(hy, y, out * 4, cudaMemcpyDeviceToHost));
                if (memcmp(hy, hr, out * 4)) {
                    uint32_t i = 0;
                    while (i < out && !memcmp(&hy[i], &hr[i], 4))
                        i++;
                    fprintf(stderr, "%s %s: output %u differs from the old kernel's (%a against %a)\n", s->name,
                            kname[k], i, hy[i], hr[i]);
                    same_all = 0;
                    bad = 1;
                }
            }
            for (int i = 0; i < 3; i++)
                MC_BENCH_CHECK(run(k, &c, s, &w[i % copies], x, nw, res, y, st, (uint32_t)nsm));
            cudaGraph_t gr;
            cudaGraphExec_t ge;
            MC_BENCH_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < reps; i++)
                MC_BENCH_CHECK(run(k, &c, s, &w[(i + 3) % copies], x, nw, res, y, st, (uint32_t)nsm));
            MC_BENCH_CHECK(cudaStreamEndCapture(st, &gr));
            MC_BENCH_CHECK(cudaGraphInstantiate(&ge, gr, 0));
            MC_BENCH_CHECK(cudaGraphLaunch(ge, st)); /* warm */
            MC_BENCH_CHECK(cudaEventRecord(e0, st));
            MC_BENCH_CHECK(cudaGraphLaunch(ge, st));
            MC_BENCH_CHECK(cudaEventRecord(e1, st));
            MC_BENCH_CHECK(cudaEventSynchronize(e1));
            MC_BENCH_CHECK(cudaGraphExecDestroy(ge));
            MC_BENCH_CHECK(cudaGraphDestroy(gr));
            float ms = 0.0f;
            MC_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            const double us = ms * 1e3 / reps;
            tot[k] += us;
            printf(" %.2f | %.1f |", us, 100.0 * bytes / (us * 1e-6) / ceiling);
        }
        printf(" %s |\n", same_all ? "same" : "DIFFER");
        fflush(stdout);
        for (int i = 0; i < copies; i++)
            MC_BENCH_CHECK(cudaFree(w[i].data));
        MC_BENCH_CHECK(cudaFree(x));
        MC_BENCH_CHECK(cudaFree(nw));
        MC_BENCH_CHECK(cudaFree(res));
        MC_BENCH_CHECK(cudaFree(y));
        MC_BENCH_CHECK(cudaFree(yref));
        free(hr);
        free(hy);
    }
    printf("sum of the %zu shapes (us):", sizeof shapes / sizeof shapes[0]);
    for (int k = 0; k < DB_NK; k++)
        printf(" %s %.1f%s", kname[k], tot[k], k + 1 < DB_NK ? "," : "\n");
    printf("mma_decode_bench: %s\n", bad ? "BITS DIFFER" : "every kernel has the old kernel's bits");
    return bad;
}
