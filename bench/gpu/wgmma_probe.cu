/* wgmma_probe.cu: whether Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) gives an element the
 * bits that a chain of mma.sync.m16n8k16 gives it, k-step for k-step, and whether either depends on
 * the order of the 16 products inside one instruction. gemv=mma's decode and its prefill chunk
 * share one chain of mma.sync per output (issue 28's exact prefill); if wgmma keeps those bits, a
 * chunk kernel can run on wgmma (asynchronous, 64-row tiles read straight from shared memory, up to
 * twice mma.sync's rate) while decode keeps mma.sync, and prefill=1 against prefill=512 stays exact.
 *
 * One warpgroup computes D (64 x N, f32) = A (64 x K) B (K x N) over K = 4096 (256 k-steps of 16,
 * the accumulator carried from +0), bf16 and f16 inputs, N = 8, 64, 128:
 *   ref      4 warps, each 16 rows, mma.sync.m16n8k16 per 8 columns, fragments from global memory
 *   wg       wgmma.mma_async.m64nNk16 from shared memory (no swizzle, K-major A and B)
 * Each k-step's 16 k-values may be put into the instruction's 16 slots in another order (perm):
 *   natural  slot s holds k0 + s
 *   swap     slot s holds k0 + 2 (s % 8) + s / 8 (a fixed permutation that moves every slot but two)
 *   random   a random permutation per trial
 * Inputs, three kinds: "wide" m 2^e, e in [-8, 8] (the mma_probe's), "far" e in [-24, 24] (products
 * 96 binades apart: what an adder's alignment truncates), "ties" 3-bit mantissas, e in [-6, 6].
 * Reported: elements whose bits differ, per comparison. The property this probe exists for is
 * wg = ref for one perm (exit 0 when it holds for natural and swap on every type, kind and N);
 * ref(perm) against ref(natural) says whether the order inside an instruction matters at all.
 * A sanity check against a float64 product guards the descriptors (a wrong layout is not "equal").
 *
 *   memra_cuda_wgmma_probe     exit 0 holds, 1 fails, 3 error, 77 no device or not sm_90 (skipped) */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K 4096
#define M 64
#define NMAX 128

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "wgmma_probe: %s: %s\n", #x, cudaGetErrorString(e_));                                      \
            exit(3);                                                                                                   \
        }                                                                                                              \
    } while (0)

__constant__ int c_perm[16]; /* slot s of a k-step holds k-value k0 + c_perm[s] */

static __device__ __forceinline__ uint32_t pack2(const uint16_t *row, unsigned k0, int s) {
    return (uint32_t)row[k0 + c_perm[s]] | ((uint32_t)row[k0 + c_perm[s + 1]] << 16);
}

/* ref: A 64 x K and Bt N x K row-major 16-bit patterns; D 64 x N. */
template <int F16, int N>
__global__ void __launch_bounds__(128) ref_kernel(const uint16_t *A, const uint16_t *Bt, float *D) {
    const unsigned w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint16_t *a_lo = A + (size_t)(16 * w + g) * K, *a_hi = A + (size_t)(16 * w + g + 8) * K;
    for (int j = 0; j < N / 8; j++) {
        const uint16_t *b = Bt + (size_t)(8 * j + g) * K;
        float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
        for (unsigned k0 = 0; k0 < K; k0 += 16) {
            const uint32_t a0 = pack2(a_lo, k0, 2 * t), a1 = pack2(a_hi, k0, 2 * t);
            const uint32_t a2 = pack2(a_lo, k0, 2 * t + 8), a3 = pack2(a_hi, k0, 2 * t + 8);
            const uint32_t b0 = pack2(b, k0, 2 * t), b1 = pack2(b, k0, 2 * t + 8);
            if (F16)
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                             "{%8,%9}, {%0,%1,%2,%3};"
                             : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
            else
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                             "{%8,%9}, {%0,%1,%2,%3};"
                             : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
        const unsigned r0 = 16 * w + g, c0 = 8 * j + 2 * t;
        D[r0 * N + c0] = d0;
        D[r0 * N + c0 + 1] = d1;
        D[(r0 + 8) * N + c0] = d2;
        D[(r0 + 8) * N + c0 + 1] = d3;
    }
}

__device__ __forceinline__ void wg_bf16_n8(float *d, uint64_t da, uint64_t db) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
                 "{"
                 "%0, %1, %2, %3"
                 "}, %4, %5, p, 1, 1, 0, 0;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void wg_bf16_n64(float *d, uint64_t da, uint64_t db) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{"
                 "%0, %1, %2, %3, %4, %5, %6, %7,"
                 "%8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23,"
                 "%24, %25, %26, %27, %28, %29, %30, %31"
                 "}, %32, %33, p, 1, 1, 0, 0;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
                   "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void wg_bf16_n128(float *d, uint64_t da, uint64_t db) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{"
                 "%0, %1, %2, %3, %4, %5, %6, %7,"
                 "%8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23,"
                 "%24, %25, %26, %27, %28, %29, %30, %31,"
                 "%32, %33, %34, %35, %36, %37, %38, %39,"
                 "%40, %41, %42, %43, %44, %45, %46, %47,"
                 "%48, %49, %50, %51, %52, %53, %54, %55,"
                 "%56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n"
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
                 : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void wg_f16_n8(float *d, uint64_t da, uint64_t db) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "
                 "{"
                 "%0, %1, %2, %3"
                 "}, %4, %5, p, 1, 1, 0, 0;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void wg_f16_n64(float *d, uint64_t da, uint64_t db) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{"
                 "%0, %1, %2, %3, %4, %5, %6, %7,"
                 "%8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23,"
                 "%24, %25, %26, %27, %28, %29, %30, %31"
                 "}, %32, %33, p, 1, 1, 0, 0;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
                   "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void wg_f16_n128(float *d, uint64_t da, uint64_t db) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{"
                 "%0, %1, %2, %3, %4, %5, %6, %7,"
                 "%8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23,"
                 "%24, %25, %26, %27, %28, %29, %30, %31,"
                 "%32, %33, %34, %35, %36, %37, %38, %39,"
                 "%40, %41, %42, %43, %44, %45, %46, %47,"
                 "%48, %49, %50, %51, %52, %53, %54, %55,"
                 "%56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n"
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
                 : "l"(da), "l"(db), "r"(1));
}

/* Shared-memory tile of R rows x 16 k-values, K-major, no swizzle: 8 x 8 core matrices (8 rows of 16
 * bytes, 128 bytes), core (row group rg, k half kc) at (2 rg + kc) x 128 bytes. So the neighbour in K
 * is 128 bytes away and the next row group 256 (swap: the two offsets exchanged in the descriptor,
 * for the sanity check to pick the reading of the PTX manual that computes the product). */
static __device__ __forceinline__ unsigned tile_off(unsigned r, unsigned s) {
    return ((r >> 3) * 2 + (s >> 3)) * 64 + (r & 7) * 8 + (s & 7);
}
static __device__ __forceinline__ uint64_t desc_of(const void *smem, unsigned lbo, unsigned sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32);
}

template <int F16, int N> __device__ __forceinline__ void wg_call(float *d, uint64_t da, uint64_t db) {
    if constexpr (F16) {
        if constexpr (N == 8)
            wg_f16_n8(d, da, db);
        else if constexpr (N == 64)
            wg_f16_n64(d, da, db);
        else
            wg_f16_n128(d, da, db);
    } else {
        if constexpr (N == 8)
            wg_bf16_n8(d, da, db);
        else if constexpr (N == 64)
            wg_bf16_n64(d, da, db);
        else
            wg_bf16_n128(d, da, db);
    }
}

template <int F16, int N>
__global__ void __launch_bounds__(128) wg_kernel(const uint16_t *A, const uint16_t *Bt, float *D, int swap) {
    __shared__ __align__(128) uint16_t sA[M * 16];
    __shared__ __align__(128) uint16_t sB[N * 16];
    float d[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++)
        d[i] = 0.0f;
    const unsigned lbo = swap ? 256 : 128, sbo = swap ? 128 : 256;
    for (unsigned k0 = 0; k0 < K; k0 += 16) {
        for (unsigned i = threadIdx.x; i < M * 16; i += 128) {
            const unsigned r = i >> 4, s = i & 15;
            sA[tile_off(r, s)] = A[(size_t)r * K + k0 + c_perm[s]];
        }
        for (unsigned i = threadIdx.x; i < N * 16; i += 128) {
            const unsigned r = i >> 4, s = i & 15;
            sB[tile_off(r, s)] = Bt[(size_t)r * K + k0 + c_perm[s]];
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        wg_call<F16, N>(d, desc_of(sA, lbo, sbo), desc_of(sB, lbo, sbo));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        __syncthreads();
    }
    const unsigned w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < N / 8; j++) {
        const unsigned r0 = 16 * w + g, c0 = 8 * j + 2 * t;
        D[r0 * N + c0] = d[4 * j];
        D[r0 * N + c0 + 1] = d[4 * j + 1];
        D[(r0 + 8) * N + c0] = d[4 * j + 2];
        D[(r0 + 8) * N + c0 + 1] = d[4 * j + 3];
    }
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
/* kind 0 wide, 1 far, 2 ties */
static float rnd_value(int kind) {
    const float m = kind == 2 ? 1.0f + (float)(next32() & 7) / 8.0f : 1.0f + (float)(next32() & 0xFFFF) / 65536.0f;
    const int span = kind == 0 ? 8 : kind == 1 ? 24 : 6;
    const int e = (int)(next32() % (unsigned)(2 * span + 1)) - span;
    return ((next32() & 1) ? -1.0f : 1.0f) * ldexpf(m, e);
}
static uint16_t to16(float v, int f16) {
    uint16_t u;
    if (f16) {
        const __half h = __float2half_rn(v);
        memcpy(&u, &h, 2);
    } else {
        const __nv_bfloat16 b = __float2bfloat16_rn(v);
        memcpy(&u, &b, 2);
    }
    return u;
}
static double from16(uint16_t u, int f16) {
    if (f16) {
        __half h;
        memcpy(&h, &u, 2);
        return (double)__half2float(h);
    }
    __nv_bfloat16 b;
    memcpy(&b, &u, 2);
    return (double)__bfloat162float(b);
}

static uint16_t *dA, *dB;
static float *dD;
static void set_perm(const int *p) { CK(cudaMemcpyToSymbol(c_perm, p, 16 * sizeof(int))); }

template <int F16, int N> static void run(int which, int swap, float *D) {
    if (which == 0)
        ref_kernel<F16, N><<<1, 128>>>(dA, dB, dD);
    else
        wg_kernel<F16, N><<<1, 128>>>(dA, dB, dD, swap);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(D, dD, (size_t)M * N * 4, cudaMemcpyDeviceToHost));
}
static long ndiff(const float *a, const float *b, int n) {
    long c = 0;
    for (int i = 0; i < n; i++)
        c += memcmp(a + i, b + i, 4) != 0;
    return c;
}

static int g_swap = -1; /* the descriptor reading that computes the product, found on the first case */

/* Largest |D - exact| / (sum |a b|) over the tile: about 2^-22 .. 2^-20 for a right layout, O(1) for a wrong one. */
static double rel_err(const uint16_t *A, const uint16_t *Bt, const float *D, int N, int f16) {
    double worst = 0.0;
    for (int r = 0; r < M; r += 7)
        for (int c = 0; c < N; c += 3) {
            double s = 0.0, mag = 0.0;
            for (int k = 0; k < K; k++) {
                const double p = from16(A[(size_t)r * K + k], f16) * from16(Bt[(size_t)c * K + k], f16);
                s += p;
                mag += fabs(p);
            }
            const double e = fabs((double)D[r * N + c] - s) / (mag > 0 ? mag : 1.0);
            if (e > worst)
                worst = e;
        }
    return worst;
}

template <int F16, int N> static int probe(int kind, int trials, long *res) {
    static uint16_t A[M * K], Bt[NMAX * K];
    static float Dn[M * NMAX], Dw[M * NMAX], Dp[M * NMAX], Dq[M * NMAX];
    int natural[16], swap[16], rnd[16];
    for (int s = 0; s < 16; s++) {
        natural[s] = s;
        swap[s] = 2 * (s % 8) + s / 8;
    }
    for (int tr = 0; tr < trials; tr++) {
        for (int i = 0; i < M * K; i++)
            A[i] = to16(rnd_value(kind), F16);
        for (int i = 0; i < N * K; i++)
            Bt[i] = to16(rnd_value(kind), F16);
        CK(cudaMemcpy(dA, A, sizeof(uint16_t) * M * K, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dB, Bt, sizeof(uint16_t) * N * K, cudaMemcpyHostToDevice));
        for (int s = 0; s < 16; s++)
            rnd[s] = s;
        for (int s = 15; s > 0; s--) {
            const int j = (int)(next32() % (unsigned)(s + 1)), x = rnd[s];
            rnd[s] = rnd[j], rnd[j] = x;
        }
        set_perm(natural);
        run<F16, N>(0, 0, Dn);
        if (g_swap < 0) { /* pick the descriptor reading on the first case */
            for (int sw = 0; sw < 2 && g_swap < 0; sw++) {
                run<F16, N>(1, sw, Dw);
                const double e = rel_err(A, Bt, Dw, N, F16);
                printf("descriptor reading %d (LBO %d, SBO %d): relative error %.3g\n", sw, sw ? 256 : 128,
                       sw ? 128 : 256, e);
                if (e < 1e-4)
                    g_swap = sw;
            }
            if (g_swap < 0) {
                printf("wgmma_probe: FAIL: neither descriptor reading computes the product\n");
                return -1;
            }
        }
        const double e_ref = rel_err(A, Bt, Dn, N, F16);
        if (e_ref > 1e-4) {
            printf("wgmma_probe: FAIL: the mma.sync reference is off (relative error %.3g)\n", e_ref);
            return -1;
        }
        run<F16, N>(1, g_swap, Dw);
        res[0] += ndiff(Dn, Dw, M * N); /* wg natural vs ref natural */
        set_perm(swap);
        run<F16, N>(0, 0, Dp);
        run<F16, N>(1, g_swap, Dq);
        res[1] += ndiff(Dp, Dq, M * N); /* wg swap vs ref swap */
        res[2] += ndiff(Dn, Dp, M * N); /* ref swap vs ref natural */
        set_perm(rnd);
        run<F16, N>(0, 0, Dp);
        run<F16, N>(1, g_swap, Dq);
        res[3] += ndiff(Dp, Dq, M * N); /* wg random vs ref random */
        res[4] += ndiff(Dn, Dp, M * N); /* ref random vs ref natural */
        res[5] += (long)M * N;
    }
    return 0;
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("wgmma_probe: SKIPPED: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9) {
        printf("wgmma_probe: SKIPPED: wgmma needs sm_90 (device is sm_%d%d)\n", prop.major, prop.minor);
        return 77;
    }
    CK(cudaMalloc(&dA, sizeof(uint16_t) * M * K));
    CK(cudaMalloc(&dB, sizeof(uint16_t) * NMAX * K));
    CK(cudaMalloc(&dD, sizeof(float) * M * NMAX));
    static const char *kinds[3] = {"wide", "far", "ties"};
    printf("| type | N | inputs | elements | wg/ref natural | wg/ref swap | wg/ref random | ref swap/natural | ref "
           "random/natural |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    int fails = 0;
    for (int f16 = 0; f16 < 2; f16++)
        for (int ni = 0; ni < 3; ni++)
            for (int kind = 0; kind < 3; kind++) {
                long r[6] = {0, 0, 0, 0, 0, 0};
                const int trials = 6;
                int rc;
                const int N = ni == 0 ? 8 : ni == 1 ? 64 : 128;
                if (f16)
                    rc = N == 8    ? probe<1, 8>(kind, trials, r)
                         : N == 64 ? probe<1, 64>(kind, trials, r)
                                   : probe<1, 128>(kind, trials, r);
                else
                    rc = N == 8    ? probe<0, 8>(kind, trials, r)
                         : N == 64 ? probe<0, 64>(kind, trials, r)
                                   : probe<0, 128>(kind, trials, r);
                if (rc)
                    return 1;
                printf("| %s | %d | %s | %ld | %ld | %ld | %ld | %ld | %ld |\n", f16 ? "f16" : "bf16", N, kinds[kind],
                       r[5], r[0], r[1], r[3], r[2], r[4]);
                fails += r[0] != 0 || r[1] != 0;
            }
    printf("wgmma_probe: %s\n", fails ? "FAIL (wgmma does not give mma.sync's bits)"
                                      : "PASS (wgmma m64nNk16 gives each element the bits of a chain of "
                                        "mma.sync m16n8k16 with the same k-values in the same slots)");
    return fails ? 1 : 0;
}
