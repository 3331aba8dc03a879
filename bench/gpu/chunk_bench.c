/* chunk_bench.c: the prefill chunk's integer Q8_0 GEMV alone (issue 28): chunk=mma (int8 tensor
 * cores, chunk_mma.cu) against chunk=fma (dp4a, chunk_gemv.cu), one call of mc_gemv_chunk each
 * (the quantization of x included), on random data, timed over repeats with CUDA events.
 *
 *   memra_cuda_chunk_bench [ROWS COLS M [GLU]]...   default: 4096 4096 512, 14336 4096 512,
 *                                                   28672 4096 512 1 (8B's q/o, up, fused gate/up)
 *
 * Prints per shape and kernel: microseconds a call, element-chunks (row x x row x 16 columns) per
 * second, the share of the FP32 rate that the float chain needs at 7 operations an element-chunk
 * (132 SMs x 128 lanes x the clock the device reports) and of the int8 tensor rate (48
 * multiply-adds an element-chunk against H200's 1979 dense int8 TOPS). Exit 77 without a device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"

static uint64_t cb_rng = 0x243F6A8885A308D3ull;
static uint32_t cb_next(void) {
    cb_rng ^= cb_rng << 13, cb_rng ^= cb_rng >> 7, cb_rng ^= cb_rng << 17;
    return (uint32_t)(cb_rng >> 16);
}

#define CB(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "chunk_bench: %s: %s\n", #x, cudaGetErrorString(e_));                                      \
            return 3;                                                                                                  \
        }                                                                                                              \
    } while (0)

static int cb_shape(uint32_t R, uint32_t C, uint32_t M, int glu, double fp32_rate) {
    mc_matrix w;
    memset(&w, 0, sizeof w);
    w.type = MEMRA_TYPE_Q8_0;
    w.rows = R;
    w.cols = C;
    w.stride = C;
    const size_t wb = (size_t)R * C, ns = (size_t)R * (C / 32), nx = (size_t)M * C, outn = glu ? R / 2 : R;
    int8_t *hw = malloc(wb);
    uint16_t *hs = malloc(ns * 2);
    float *hx = malloc(nx * 4), *dx = NULL, *dn = NULL, *dy = NULL;
    void *scratch = NULL;
    if (!hw || !hs || !hx)
        return 3;
    for (size_t i = 0; i < wb; i++)
        hw[i] = (int8_t)(cb_next() & 0xff);
    for (size_t i = 0; i < ns; i++)
        hs[i] = (uint16_t)(0x1400 + (cb_next() % 0x0800) + ((cb_next() & 1) << 15)); /* about 2^-5 .. 2^-3 */
    for (size_t i = 0; i < nx; i++)
        hx[i] = (float)((int)(cb_next() % 2001) - 1000) / 500.0f;
    CB(cudaMalloc(&w.data, wb));
    CB(cudaMalloc((void **)&w.scales, ns * 2));
    CB(cudaMalloc((void **)&dx, nx * 4));
    CB(cudaMalloc((void **)&dn, (size_t)C * 4));
    CB(cudaMalloc((void **)&dy, (size_t)M * outn * 4));
    CB(cudaMalloc(&scratch, mc_gemv_chunk_scratch_bytes(C, M)));
    CB(cudaMemcpy(w.data, hw, wb, cudaMemcpyHostToDevice));
    CB(cudaMemcpy(w.scales, hs, ns * 2, cudaMemcpyHostToDevice));
    CB(cudaMemcpy(dx, hx, nx * 4, cudaMemcpyHostToDevice));
    for (size_t i = 0; i < C; i++)
        hx[i] = 1.0f;
    CB(cudaMemcpy(dn, hx, (size_t)C * 4, cudaMemcpyHostToDevice));
    cudaEvent_t a, b;
    CB(cudaEventCreate(&a));
    CB(cudaEventCreate(&b));
    const double ec = (double)R * M * (C / 16);
    static const struct {
        uint32_t v;
        const char *name;
    } kinds[] = {
        {MC_CHUNK_MMA_T4, "mma/32"}, {MC_CHUNK_MMA_T6, "mma/48"}, {MC_CHUNK_MMA_T8, "mma/64"}, {MC_CHUNK_FMA, "fma"}};
    for (int k = 0; k < 4; k++) {
        mc_config c = mc_config_default;
        c.chunk = kinds[k].v;
        const int reps = 10;
        CB(mc_gemv_chunk(&c, &w, dx, C, dn, 1e-5f, NULL, NULL, 0, dy, outn, glu, M, scratch, 0)); /* warm */
        CB(cudaEventRecord(a, 0));
        for (int r = 0; r < reps; r++)
            CB(mc_gemv_chunk(&c, &w, dx, C, dn, 1e-5f, NULL, NULL, 0, dy, outn, glu, M, scratch, 0));
        CB(cudaEventRecord(b, 0));
        CB(cudaEventSynchronize(b));
        float ms = 0.0f;
        CB(cudaEventElapsedTime(&ms, a, b));
        const double s = ms / 1e3 / reps, rate = ec / s;
        printf("chunk=%-6s rows %5u cols %5u M %4u glu %d: %9.1f us  %.3g element-chunks/s  %5.1f%% of FP32 (7 ops)  "
               "%5.1f%% of int8 tensor\n",
               kinds[k].name, R, C, M, glu, s * 1e6, rate, 100.0 * rate * 7 / fp32_rate, 100.0 * rate * 96 / 1979e12);
    }
    cudaFree(w.data);
    cudaFree(w.scales);
    cudaFree(dx);
    cudaFree(dn);
    cudaFree(dy);
    cudaFree(scratch);
    free(hw);
    free(hs);
    free(hx);
    return 0;
}

int main(int argc, char **argv) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("chunk_bench: SKIP (no CUDA device)\n");
        return 77;
    }
    int sms = 0, khz = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
    const double fp32_rate = (double)sms * 128 * khz * 1e3;
    printf("chunk_bench: %d SMs at %.0f MHz: FP32 %.3g operations/s\n", sms, khz / 1e3, fp32_rate);
    if (argc > 1) {
        for (int i = 1; i + 2 < argc; i += 4) {
            const int glu = i + 3 < argc ? atoi(argv[i + 3]) : 0;
            if (cb_shape((uint32_t)atoi(argv[i]), (uint32_t)atoi(argv[i + 1]), (uint32_t)atoi(argv[i + 2]), glu,
                         fp32_rate))
                return 3;
        }
        return 0;
    }
    if (cb_shape(4096, 4096, 512, 0, fp32_rate) || cb_shape(14336, 4096, 512, 0, fp32_rate) ||
        cb_shape(28672, 4096, 512, MC_GLU_SILU, fp32_rate) || cb_shape(6144, 4096, 512, 0, fp32_rate))
        return 3;
    return 0;
}
