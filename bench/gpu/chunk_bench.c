/* chunk_bench.c: the prefill chunk's integer GEMVs alone (issue 28): Q8_0 under chunk=mma (int8
 * tensor cores, chunk_mma.cu) against chunk=fma (dp4a, chunk_gemv.cu), and Q4_K, Q5_K, Q6_K under
 * chunk=mma (chunk_kq_mma.cu), one call of mc_gemv_chunk each (the quantization of x included), on
 * random data, timed over repeats with CUDA events.
 *
 *   memra_cuda_chunk_bench [--only KIND] [[--type q8_0|q4_k|q5_k|q6_k] ROWS COLS M [GLU]]...
 *     default: Q8_0 4096 4096 512, 14336 4096 512, 28672 4096 512 1, 6144 4096 512 (8B's o, up,
 *     fused gate/up, fused qkv); Q4_K 6144 4096, 4096 4096, 28672 4096 1; Q5_K 4096 4096; Q6_K
 *     4096 14336, 1024 4096 (M 512: 8B Q4_K_M's shapes)
 *
 * Kernels: Q8_0 chunk=mma (the production kernel), opt (its OPT form: chunk_mma.cu), mma/48 and
 * mma/64 (tiles of 48 and 64 x rows), fma; K-quants mma and opt (chunk_kq_mma.cu's OPT form). --only KIND times that kernel alone (for a
 * profiler's one launch). Each kernel's output is compared bit for bit with the first one's of its
 * shape (bits=same, or bits=DIFF and the count: a tile must not move a bit).
 *
 * Prints per shape and kernel: microseconds a call, element-chunks (row x x row x 16 columns) per
 * second, the share of the FP32 rate that the float chain needs at 7 operations an element-chunk
 * (132 SMs x 128 lanes x the clock the device reports; Q8_0's chain) and of the int8 tensor rate
 * (48 multiply-adds an element-chunk against H200's 1979 dense int8 TOPS). Exit 77 without a
 * device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "memra/numeric.h"
#include "kquant_layout.h"

static const char *cb_only; /* --only: the one kernel to run */

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

/* A random half between about 2^-5 and 2^-3, either sign. */
static uint16_t cb_half(void) { return (uint16_t)(0x1400 + (cb_next() % 0x0800) + ((cb_next() & 1) << 15)); }

static int cb_shape(uint32_t type, uint32_t R, uint32_t C, uint32_t M, int glu, double fp32_rate) {
    mc_matrix w;
    memset(&w, 0, sizeof w);
    w.type = type;
    w.rows = R;
    w.cols = C;
    w.stride = C;
    uint64_t dr = C, ar = 0;
    const int kq = type != MEMRA_TYPE_Q8_0;
    if (kq && !mc_kq_layout(type, C, &dr, &ar)) {
        fprintf(stderr, "chunk_bench: cols %u: not a K-quant row\n", C);
        return 2;
    }
    w.stride = (uint32_t)dr;
    w.aux_stride = (uint32_t)ar;
    /* Q8_0: the quants and a half scale per 32 columns; K-quants: the layout's data and aux, the
     * aux random but for its halves (d, dmin; Q6_K's d) */
    const size_t wb = (size_t)R * dr, ns = kq ? (size_t)R * ar / 2 : (size_t)R * (C / 32), nx = (size_t)M * C,
                 outn = glu ? R / 2 : R;
    int8_t *hw = malloc(wb);
    uint16_t *hs = malloc(ns * 2);
    float *hx = malloc(nx * 4), *dx = NULL, *dn = NULL, *dy = NULL;
    void *scratch = NULL;
    if (!hw || !hs || !hx)
        return 3;
    for (size_t i = 0; i < wb; i++)
        hw[i] = (int8_t)(cb_next() & 0xff);
    for (size_t i = 0; i < ns; i++)
        hs[i] = kq ? (uint16_t)cb_next() : cb_half();
    if (kq) {
        const size_t nb = C / 256;
        for (size_t r = 0; r < R; r++) {
            uint16_t *a = hs + r * ar / 2;
            for (size_t b = 0; b < nb; b++) {
                if (type == MEMRA_TYPE_Q6_K) {
                    a[8 * nb + b] = cb_half();
                } else {
                    a[8 * b] = cb_half();
                    a[8 * b + 1] = cb_half();
                }
            }
        }
    }
    for (size_t i = 0; i < nx; i++)
        hx[i] = (float)((int)(cb_next() % 2001) - 1000) / 500.0f;
    CB(cudaMalloc(&w.data, wb));
    if (kq)
        CB(cudaMalloc(&w.aux, ns * 2));
    else
        CB(cudaMalloc((void **)&w.scales, ns * 2));
    CB(cudaMalloc((void **)&dx, nx * 4));
    CB(cudaMalloc((void **)&dn, (size_t)C * 4));
    CB(cudaMalloc((void **)&dy, (size_t)M * outn * 4));
    CB(cudaMalloc(&scratch, mc_gemv_chunk_scratch_bytes(C, M)));
    CB(cudaMemcpy(w.data, hw, wb, cudaMemcpyHostToDevice));
    CB(cudaMemcpy(kq ? w.aux : (void *)w.scales, hs, ns * 2, cudaMemcpyHostToDevice));
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
    } q8kinds[] = {{MC_CHUNK_MMA, "mma"},
                   {MC_CHUNK_MMA_OPT, "opt"},
                   {MC_CHUNK_MMA_T6, "mma/48"},
                   {MC_CHUNK_MMA_T8, "mma/64"},
                   {MC_CHUNK_FMA, "fma"}},
      kqkinds[] = {{MC_CHUNK_MMA, "mma"}, {MC_CHUNK_MMA_OPT, "opt"}};
    const int nk = kq ? 2 : 5;
    float *yref = malloc((size_t)M * outn * 4), *ycur = malloc((size_t)M * outn * 4);
    int have_ref = 0;
    if (!yref || !ycur)
        return 3;
    for (int k = 0; k < nk; k++) {
        const uint32_t v = kq ? kqkinds[k].v : q8kinds[k].v;
        const char *kname = kq ? kqkinds[k].name : q8kinds[k].name;
        if (cb_only && strcmp(cb_only, kname))
            continue;
        mc_config c = mc_config_default;
        c.chunk = v;
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
        CB(cudaMemcpy(have_ref ? ycur : yref, dy, (size_t)M * outn * 4, cudaMemcpyDeviceToHost));
        size_t ndiff = 0;
        if (have_ref)
            for (size_t i = 0; i < (size_t)M * outn; i++)
                ndiff += memcmp(&yref[i], &ycur[i], 4) != 0;
        have_ref = 1;
        printf("%-4s chunk=%-6s rows %5u cols %5u M %4u glu %d: %9.1f us  %.3g element-chunks/s  %5.1f%% of FP32 (7 "
               "ops)  %5.1f%% of int8 tensor  bits=%s %zu\n",
               kq ? (type == MEMRA_TYPE_Q4_K   ? "q4_k"
                     : type == MEMRA_TYPE_Q5_K ? "q5_k"
                                               : "q6_k")
                  : "q8_0",
               kname, R, C, M, glu, s * 1e6, rate, 100.0 * rate * 7 / fp32_rate, 100.0 * rate * 96 / 1979e12,
               ndiff ? "DIFF" : "same", ndiff);
    }
    free(yref);
    free(ycur);
    cudaFree(w.data);
    cudaFree(w.scales);
    cudaFree(w.aux);
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
    int a0 = 1;
    if (argc > 2 && !strcmp(argv[1], "--only"))
        cb_only = argv[2], a0 = 3;
    if (cb_only && strcmp(cb_only, "mma") && strcmp(cb_only, "opt") && strcmp(cb_only, "mma/48") &&
        strcmp(cb_only, "mma/64") && strcmp(cb_only, "fma")) {
        fprintf(stderr, "chunk_bench: --only %s: not mma, opt, mma/48, mma/64 or fma\n", cb_only);
        return 2;
    }
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
    if (argc > a0) {
        uint32_t type = MEMRA_TYPE_Q8_0;
        for (int i = a0; i < argc;) {
            if (!strcmp(argv[i], "--type") && i + 1 < argc) {
                const char *t = argv[i + 1];
                type = !strcmp(t, "q8_0")   ? MEMRA_TYPE_Q8_0
                       : !strcmp(t, "q4_k") ? MEMRA_TYPE_Q4_K
                       : !strcmp(t, "q5_k") ? MEMRA_TYPE_Q5_K
                       : !strcmp(t, "q6_k") ? MEMRA_TYPE_Q6_K
                                            : 0;
                if (!type) {
                    fprintf(stderr, "chunk_bench: --type %s: not q8_0, q4_k, q5_k or q6_k\n", t);
                    return 2;
                }
                i += 2;
                continue;
            }
            if (i + 2 >= argc) {
                fprintf(stderr, "chunk_bench: usage: [--only KIND] [[--type q8_0|q4_k|q5_k|q6_k] ROWS COLS M [GLU]]...\n");
                return 2;
            }
            const int glu = i + 3 < argc && strcmp(argv[i + 3], "--type") ? atoi(argv[i + 3]) : 0;
            const int rc = cb_shape(type, (uint32_t)atoi(argv[i]), (uint32_t)atoi(argv[i + 1]),
                                    (uint32_t)atoi(argv[i + 2]), glu, fp32_rate);
            if (rc)
                return rc;
            i += i + 3 < argc && strcmp(argv[i + 3], "--type") ? 4 : 3;
        }
        return 0;
    }
    static const struct {
        uint32_t type, rows, cols;
        int glu;
    } shapes[] = {{MEMRA_TYPE_Q8_0, 4096, 4096, 0},  {MEMRA_TYPE_Q8_0, 14336, 4096, 0},
                  {MEMRA_TYPE_Q8_0, 28672, 4096, 1}, {MEMRA_TYPE_Q8_0, 6144, 4096, 0},
                  {MEMRA_TYPE_Q4_K, 6144, 4096, 0},  {MEMRA_TYPE_Q4_K, 4096, 4096, 0},
                  {MEMRA_TYPE_Q4_K, 28672, 4096, 1}, {MEMRA_TYPE_Q5_K, 4096, 4096, 0},
                  {MEMRA_TYPE_Q6_K, 4096, 14336, 0}, {MEMRA_TYPE_Q6_K, 1024, 4096, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int rc = cb_shape(shapes[i].type, shapes[i].rows, shapes[i].cols, 512,
                                shapes[i].glu ? MC_GLU_SILU : MC_GLU_NONE, fp32_rate);
        if (rc)
            return rc;
    }
    return 0;
}
