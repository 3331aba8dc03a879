/* mma_probe.cu: checks on the device the property issue 28 wants to build exact prefill on: that a
 * tensor-core MMA's result for one output element depends only on its row of A, its column of B
 * and its accumulator: not on the other rows or columns, nor on which row or column of the tile
 * holds it. If it holds, decode can run the prefill GEMM's MMA with one live row (or column) and get
 * the bits a chunk of M tokens gets, whatever M and the token's place in the chunk.
 *
 * One warp runs mma.sync.m16n8k16 (bf16 or f16 inputs, f32 accumulate) over K = 4096 (256 steps,
 * the accumulator carried), A 16 x K and B K x 8 loaded straight into the fragments. Inputs: random
 * values over 2^-8 .. 2^8 with random signs (so the products span 32 binades and the sums round).
 * For each property, 64 random trials; an element that differs by one bit fails it:
 *   rows      rows other than r replaced (fresh random rows, then zeros): row r of D unchanged
 *   rowpos    one row vector put at each of the 16 row positions (the others random): 16 equal rows
 *   cols      columns other than c replaced: column c of D unchanged
 *   colpos    one column vector at each of the 8 column positions: 8 equal columns
 *   runs      the same inputs twice: the same bits
 * and, for information, how far the MMA is from a plain fp32 fmaf chain in k order over the same
 * products (max |diff| in ulps of the result, and the share of elements equal).
 *
 *   memra_cuda_mma_probe        exit 0 all hold, 1 one fails, 77 no device (skipped) */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K 4096
#define TRIALS 64

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "mma_probe: %s: %s\n", #x, cudaGetErrorString(e_));                                        \
            exit(3);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* A is 16 x K row-major, Bt is 8 x K row-major (B's columns), as 16-bit patterns; D 16 x 8. */
template <int F16> __global__ void mma_tile(const uint16_t *A, const uint16_t *Bt, float *D) {
    const unsigned lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    for (unsigned k0 = 0; k0 < K; k0 += 16) {
        const uint32_t a0 = *(const uint32_t *)(A + g * K + k0 + 2 * t);
        const uint32_t a1 = *(const uint32_t *)(A + (g + 8) * K + k0 + 2 * t);
        const uint32_t a2 = *(const uint32_t *)(A + g * K + k0 + 8 + 2 * t);
        const uint32_t a3 = *(const uint32_t *)(A + (g + 8) * K + k0 + 8 + 2 * t);
        const uint32_t b0 = *(const uint32_t *)(Bt + g * K + k0 + 2 * t);
        const uint32_t b1 = *(const uint32_t *)(Bt + g * K + k0 + 8 + 2 * t);
        if (F16)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                         "{%0,%1,%2,%3};"
                         : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        else
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                         "{%0,%1,%2,%3};"
                         : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    D[g * 8 + 2 * t] = d0;
    D[g * 8 + 2 * t + 1] = d1;
    D[(g + 8) * 8 + 2 * t] = d2;
    D[(g + 8) * 8 + 2 * t + 1] = d3;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rnd_value(void) {
    const float m = 1.0f + (float)(next32() & 0xFFFF) / 65536.0f;
    const int e = (int)(next32() % 17) - 8;
    return ((next32() & 1) ? -1.0f : 1.0f) * ldexpf(m, e);
}
static uint16_t to16(float v, int f16) {
    if (f16) {
        const __half h = __float2half_rn(v);
        uint16_t u;
        memcpy(&u, &h, 2);
        return u;
    }
    const __nv_bfloat16 b = __float2bfloat16_rn(v);
    uint16_t u;
    memcpy(&u, &b, 2);
    return u;
}
static float from16(uint16_t u, int f16) {
    if (f16) {
        __half h;
        memcpy(&h, &u, 2);
        return __half2float(h);
    }
    __nv_bfloat16 b;
    memcpy(&b, &u, 2);
    return __bfloat162float(b);
}
static void fill_row(uint16_t *p, int f16, int zero) {
    for (int k = 0; k < K; k++)
        p[k] = zero ? 0 : to16(rnd_value(), f16);
}

static uint16_t *dA, *dB;
static float *dD;
static void run(const uint16_t *A, const uint16_t *Bt, float *D, int f16) {
    CK(cudaMemcpy(dA, A, 16 * K * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, Bt, 8 * K * 2, cudaMemcpyHostToDevice));
    if (f16)
        mma_tile<1><<<1, 32>>>(dA, dB, dD);
    else
        mma_tile<0><<<1, 32>>>(dA, dB, dD);
    CK(cudaGetLastError());
    CK(cudaMemcpy(D, dD, 16 * 8 * 4, cudaMemcpyDeviceToHost));
}
static int same(float a, float b) { return memcmp(&a, &b, 4) == 0; }

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("mma_probe: SKIPPED: no CUDA device\n");
        return 77;
    }
    CK(cudaMalloc(&dA, 16 * K * 2));
    CK(cudaMalloc(&dB, 8 * K * 2));
    CK(cudaMalloc(&dD, 16 * 8 * 4));
    static uint16_t A[16 * K], Bt[8 * K], A2[16 * K], B2[8 * K];
    static float D[128], D2[128];
    int fails = 0;
    for (int f16 = 0; f16 < 2; f16++) {
        const char *ty = f16 ? "f16 " : "bf16";
        long bad_rows = 0, bad_rowpos = 0, bad_cols = 0, bad_colpos = 0, bad_runs = 0, checked = 0;
        double max_ulp = 0.0;
        long eq_chain = 0, n_chain = 0;
        for (int trial = 0; trial < TRIALS; trial++) {
            for (int r = 0; r < 16; r++)
                fill_row(A + r * K, f16, 0);
            for (int c = 0; c < 8; c++)
                fill_row(Bt + c * K, f16, 0);
            run(A, Bt, D, f16);
            run(A, Bt, D2, f16);
            for (int i = 0; i < 128; i++)
                bad_runs += !same(D[i], D2[i]);
            /* rows: row r kept, the others fresh random (even trials) or zero (odd) */
            const int r = (int)(next32() % 16), c = (int)(next32() % 8);
            memcpy(A2, A, sizeof A);
            for (int q = 0; q < 16; q++)
                if (q != r)
                    fill_row(A2 + q * K, f16, trial & 1);
            run(A2, Bt, D2, f16);
            for (int j = 0; j < 8; j++)
                bad_rows += !same(D[r * 8 + j], D2[r * 8 + j]);
            /* cols: column c kept */
            memcpy(B2, Bt, sizeof Bt);
            for (int q = 0; q < 8; q++)
                if (q != c)
                    fill_row(B2 + q * K, f16, trial & 1);
            run(A, B2, D2, f16);
            for (int i = 0; i < 16; i++)
                bad_cols += !same(D[i * 8 + c], D2[i * 8 + c]);
            /* rowpos: row r of A at every position p (others fresh random): row p of D equals row r of D */
            for (int p = 0; p < 16; p++) {
                for (int q = 0; q < 16; q++)
                    fill_row(A2 + q * K, f16, 0);
                memcpy(A2 + p * K, A + r * K, K * 2);
                run(A2, Bt, D2, f16);
                for (int j = 0; j < 8; j++)
                    bad_rowpos += !same(D[r * 8 + j], D2[p * 8 + j]);
            }
            /* colpos: column c of B at every position p */
            for (int p = 0; p < 8; p++) {
                for (int q = 0; q < 8; q++)
                    fill_row(B2 + q * K, f16, 0);
                memcpy(B2 + p * K, Bt + c * K, K * 2);
                run(A, B2, D2, f16);
                for (int i = 0; i < 16; i++)
                    bad_colpos += !same(D[i * 8 + c], D2[i * 8 + p]);
            }
            checked++;
            /* information: a plain fp32 fmaf chain in k order */
            for (int i = 0; i < 16; i++)
                for (int j = 0; j < 8; j++) {
                    float s = 0.0f;
                    for (int k = 0; k < K; k++)
                        s = fmaf(from16(A[i * K + k], f16), from16(Bt[j * K + k], f16), s);
                    const float m = D[i * 8 + j];
                    eq_chain += same(s, m);
                    n_chain++;
                    const double ulp = ldexp(1.0, ilogb(fabs((double)s) > 0 ? fabs((double)s) : 1e-30) - 23);
                    const double u = fabs((double)s - (double)m) / ulp;
                    if (u > max_ulp)
                        max_ulp = u;
                }
        }
        printf("%s rows   %s (%ld elements differ over %ld trials)\n", ty, bad_rows ? "FAIL" : "ok  ", bad_rows,
               checked);
        printf("%s rowpos %s (%ld)\n", ty, bad_rowpos ? "FAIL" : "ok  ", bad_rowpos);
        printf("%s cols   %s (%ld)\n", ty, bad_cols ? "FAIL" : "ok  ", bad_cols);
        printf("%s colpos %s (%ld)\n", ty, bad_colpos ? "FAIL" : "ok  ", bad_colpos);
        printf("%s runs   %s (%ld)\n", ty, bad_runs ? "FAIL" : "ok  ", bad_runs);
        printf("%s against an fp32 fmaf chain in k order: %.1f%% of elements equal, max %.1f ulps\n", ty,
               100.0 * (double)eq_chain / (double)n_chain, max_ulp);
        fails += bad_rows || bad_rowpos || bad_cols || bad_colpos || bad_runs;
    }
    printf("mma_probe: %s\n", fails ? "FAIL"
                                    : "PASS (one element's bits depend only on its row, column and "
                                      "accumulator, wherever they sit in the tile)");
    return fails ? 1 : 0;
}
