/* mma_chunk_bench.c: gemv=mma's prefill chunk GEMV alone (issue 28): one call of mc_gemv_chunk
 * on a BF16 matrix (chunk_mma_prep's x' and 1/rms, then chunk_gemv_mma), on random data, timed
 * over repeats with CUDA events, the matrix rotated among copies that together exceed L2 so that
 * no call finds its weights there.
 *
 *   memra_cuda_mma_chunk_bench [-r REPS] [mma|mma2] [ROWS COLS M GLU NORM]...
 *       default: llama-8b's shapes at M 512: qkv 6144 x 4096 with the norm, o 4096 x 4096 with a
 *       residual, gate/up 28672 x 4096 with the norm and SwiGLU, down 4096 x 14336 with a residual
 *
 * Prints per shape: microseconds a call, TFLOP/s (2 x rows x cols x M a call) and the share of
 * 770 TFLOP/s (the H200's bf16 rate this issue measures against): gemv=mma's own tile (tile 0,
 * through mc_gemv_chunk) and, where the library has mc_gemv_chunk_mma_tile, the other tiles of
 * gemv_mma.cu (1: 4 warps of 64 x 64, 2: 8 warps of 64 x 64, 3: 8 warps of 32 x 64 on 128 x 128
 * blocks, the part sums in registers; tile 0 is 4 warps of 32 x 64 on 128 x 64 blocks; 4: gemv_wgmma.cu's
 * warpgroup kernel fed by the tensor memory accelerator, 128 weight rows by 128 or 64 rows of x
 * as the grid's size chooses (5: 128, 6: 64), sm_90 only, one plane, the same bits; tile 0 runs
 * tile 4 where mmachunk=auto picks it, an sm_90 device). mc_gemv_chunk_mma_tile
 * is a weak reference, so the same source linked with an older memra_cuda_kernels times the older
 * kernel (bench/gpu/mma_chunk.sh runs both in one device call). Exit 77 without a device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "memra/numeric.h"

#define MB_PEAK 770e12

/* gemv_mma.cu's other tiles (absent from older builds: then NULL) */
extern cudaError_t mc_gemv_chunk_mma_tile(const mc_config *c, const mc_matrix *w, const float *x, uint32_t ldx,
                                          const float *norm_w, float eps, const float *bias, const float *residual,
                                          uint32_t ldr, float *y, uint32_t ldy, int glu, uint32_t M, void *scratch,
                                          cudaStream_t st, int tile) __attribute__((weak));

static cudaError_t mb_call(int tile, const mc_config *c, const mc_matrix *w, const float *x, uint32_t ldx,
                           const float *norm_w, const float *residual, uint32_t ldr, float *y, uint32_t ldy, int glu,
                           uint32_t M, void *scratch) {
    if (tile == 0)
        return mc_gemv_chunk(c, w, x, ldx, norm_w, 1e-5f, NULL, residual, ldr, y, ldy, glu, M, scratch, 0);
    return mc_gemv_chunk_mma_tile(c, w, x, ldx, norm_w, 1e-5f, NULL, residual, ldr, y, ldy, glu, M, scratch, 0, tile);
}

static uint64_t mb_rng = 0x243F6A8885A308D3ull;
static uint32_t mb_next(void) {
    mb_rng ^= mb_rng << 13, mb_rng ^= mb_rng >> 7, mb_rng ^= mb_rng << 17;
    return (uint32_t)(mb_rng >> 16);
}
static float mb_sym(void) { return (float)((int)(mb_next() % 2001) - 1000) / 1000.0f; }

#define MB(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "mma_chunk_bench: %s: %s\n", #x, cudaGetErrorString(e_));                                  \
            rc = 3;                                                                                                    \
            goto done;                                                                                                 \
        }                                                                                                              \
    } while (0)

static int mb_shape(const char *var, uint32_t R, uint32_t C, uint32_t M, int glu, int norm, int reps) {
    int rc = 0;
    const size_t wn = (size_t)R * C, nx = (size_t)M * C, outn = glu ? R / 2 : R;
    const int copies = (int)((wn * 2 < ((size_t)256 << 20)) ? ((size_t)256 << 20) / (wn * 2) + 1 : 1);
    uint16_t *hw = malloc(wn * 2);
    float *hx = malloc(nx * 4), *hn = malloc((size_t)C * 4), *dx = NULL, *dn = NULL, *dy = NULL, *dr = NULL;
    void *dw[64] = {NULL}, *scratch = NULL;
    cudaEvent_t a = NULL, b = NULL;
    mc_config c = mc_config_default;
    if (!hw || !hx || !hn) {
        fprintf(stderr, "mma_chunk_bench: out of host memory for %u x %u, M %u\n", R, C, M);
        rc = 3;
        goto done;
    }
    if (mc_config_choice(&c, "gemv", var) != NULL) { /* NULL: the value was taken */
        fprintf(stderr, "mma_chunk_bench: gemv=%s is not a value of this build\n", var);
        rc = 3;
        goto done;
    }
    for (size_t i = 0; i < wn; i++)
        hw[i] = memra_f32_to_bf16(0.05f * mb_sym());
    for (size_t i = 0; i < nx; i++)
        hx[i] = 2.0f * mb_sym();
    for (uint32_t i = 0; i < C; i++)
        hn[i] = 0.5f + 0.5f * mb_sym();
    const int nw = copies < 64 ? copies : 64;
    for (int k = 0; k < nw; k++) {
        MB(cudaMalloc(&dw[k], wn * 2));
        MB(cudaMemcpy(dw[k], hw, wn * 2, cudaMemcpyHostToDevice));
    }
    MB(cudaMalloc((void **)&dx, nx * 4));
    MB(cudaMalloc((void **)&dn, (size_t)C * 4));
    MB(cudaMalloc((void **)&dy, (size_t)M * outn * 4));
    MB(cudaMalloc((void **)&dr, (size_t)M * R * 4));
    MB(cudaMalloc(&scratch, mc_gemv_chunk_scratch_bytes(C, M)));
    MB(cudaMemcpy(dx, hx, nx * 4, cudaMemcpyHostToDevice));
    MB(cudaMemcpy(dn, hn, (size_t)C * 4, cudaMemcpyHostToDevice));
    MB(cudaMemset(dr, 0, (size_t)M * R * 4));
    MB(cudaEventCreate(&a));
    MB(cudaEventCreate(&b));
    mc_matrix w;
    memset(&w, 0, sizeof w);
    w.type = MEMRA_TYPE_BF16;
    w.rows = R;
    w.cols = C;
    w.stride = C;
    const float *nwp = norm ? dn : NULL, *res = !glu && !norm ? dr : NULL;
    for (int tile = 0; tile < (mc_gemv_chunk_mma_tile ? 7 : 1); tile++) {
        w.data = dw[0];
        const cudaError_t e0 = mb_call(tile, &c, &w, dx, C, nwp, res, R, dy, (uint32_t)outn, glu, M, scratch); /* warm */
        if (tile >= 4 && (e0 == cudaErrorNotSupported || e0 == cudaErrorInvalidValue)) { /* not this device, mma2, or an older build */
            (void)cudaGetLastError();
            printf("gemv=%-4s tile %d rows %5u cols %5u M %4u: %s\n", var, tile, R, C, M, cudaGetErrorString(e0));
            continue;
        }
        MB(e0);
        MB(cudaDeviceSynchronize());
        MB(cudaEventRecord(a, 0));
        for (int r = 0; r < reps; r++) {
            w.data = dw[(r + 1) % nw];
            MB(mb_call(tile, &c, &w, dx, C, nwp, res, R, dy, (uint32_t)outn, glu, M, scratch));
        }
        MB(cudaEventRecord(b, 0));
        MB(cudaEventSynchronize(b));
        float ms = 0.0f;
        MB(cudaEventElapsedTime(&ms, a, b));
        const double s = ms / 1e3 / reps, fl = 2.0 * R * C * M / s;
        printf("gemv=%-4s tile %d rows %5u cols %5u M %4u glu %d norm %d: %9.1f us  %6.1f TFLOP/s  %5.1f%% of 770\n",
               var, tile, R, C, M, glu, norm, s * 1e6, fl / 1e12, 100.0 * fl / MB_PEAK);
    }
done:
    for (int k = 0; k < 64; k++)
        cudaFree(dw[k]);
    cudaFree(dx);
    cudaFree(dn);
    cudaFree(dy);
    cudaFree(dr);
    cudaFree(scratch);
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    free(hw);
    free(hx);
    free(hn);
    return rc;
}

int main(int argc, char **argv) {
    int n = 0, reps = 20, i = 1;
    const char *var = "mma";
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("mma_chunk_bench: SKIP (no CUDA device)\n");
        return 77;
    }
    if (i + 1 < argc && strcmp(argv[i], "-r") == 0) {
        reps = atoi(argv[i + 1]);
        i += 2;
    }
    if (i < argc && (strcmp(argv[i], "mma") == 0 || strcmp(argv[i], "mma2") == 0))
        var = argv[i++];
    if (reps < 1 || reps > 10000) {
        fprintf(stderr, "mma_chunk_bench: -r wants 1 .. 10000\n");
        return 2;
    }
    if (i < argc) {
        if ((argc - i) % 5) {
            fprintf(stderr, "usage: memra_cuda_mma_chunk_bench [-r REPS] [mma|mma2] [ROWS COLS M GLU NORM]...\n");
            return 2;
        }
        for (; i + 4 < argc; i += 5) {
            const long R = atol(argv[i]), C = atol(argv[i + 1]), M = atol(argv[i + 2]);
            if (R < 1 || R > 262144 || C < 8 || C > 131072 || C % 8 || M < 1 || M > 4096) {
                fprintf(stderr, "mma_chunk_bench: rows 1..262144, cols 8..131072 (a multiple of 8), M 1..4096\n");
                return 2;
            }
            if (mb_shape(var, (uint32_t)R, (uint32_t)C, (uint32_t)M, atoi(argv[i + 3]), atoi(argv[i + 4]), reps))
                return 3;
        }
        return 0;
    }
    if (mb_shape(var, 6144, 4096, 512, 0, 1, reps) || mb_shape(var, 4096, 4096, 512, 0, 0, reps) ||
        mb_shape(var, 28672, 4096, 512, MC_GLU_SILU, 1, reps) || mb_shape(var, 4096, 14336, 512, 0, 0, reps))
        return 3;
    return 0;
}
