/* check_chunk_mma.c: chunk=mma (issue 28, backends/cuda/chunk_mma.cu): a prefill chunk's integer
 * Q8_0 GEMV on int8 tensor cores, bit for bit against decode's GEMV (gemv_q8_0_int through mc_gemv
 * or mc_gemv_glu, one launch per row of x) and against chunk=fma (chunk_gemv.cu's dp4a kernel), on
 * random Q8_0 matrices and x: each column split (KS 4, 2, 1), rows that are no multiple of 16 or of
 * the 64-row tile, chunk counts that leave classes short or empty, M = 1, 7, 8, 9, 64, 65, 512,
 * with and without the fused RMSNorm, a bias, a residual, SwiGLU and GELU-gated rows; the MMA
 * kernel's default tile and its other two (32 and 48 x rows, the bench's), each output written
 * over NaNs first. Negative
 * control: MC_CHUNK_MMA_FAULT (the MMA kernel with its classes summed in lane order, a tree decode
 * does not build) must differ from decode on every control case.
 *
 *   memra_cuda_check_chunk_mma    exit 0 pass, 1 a mismatch or an uncaught control, 77 no device */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "cuda_checks.h"
#include "cuda_kernels.h"
#include "memra/numeric.h"

typedef struct cm_case {
    uint32_t rows, cols, M;
    int glu, norm, bias, residual;
} cm_case;

/* One case: decode row by row into yd, chunk=mma into ym, chunk=fma into yf (or, with control, the
 * faulty MMA kernel into ym). Returns the failures (-1: could not run). */
static int cm_run(FILE *out, const cm_case *k, int control, uint64_t seed) {
    const uint32_t R = k->rows, C = k->cols, M = k->M, outn = k->glu ? R / 2 : R;
    const float eps = 1e-5f;
    uint64_t s = seed;
    mc_matrix w;
    memset(&w, 0, sizeof w);
    const size_t nx = (size_t)M * C, ny = (size_t)M * outn;
    float *hx = malloc(nx * 4), *hn = malloc((size_t)C * 4), *hb = malloc((size_t)R * 4), *hr = malloc(ny * 4);
    float *yd = malloc(ny * 4), *ym = malloc(ny * 4), *yf = malloc(ny * 4);
    float *dx = NULL, *dn = NULL, *db = NULL, *dr = NULL, *dyd = NULL, *dym = NULL, *dyf = NULL;
    void *scratch = NULL;
    int bad = -1;
    if (mck_q8_matrix(R, C, &s, &w) != cudaSuccess || !hx || !hn || !hb || !hr || !yd || !ym || !yf)
        goto done;
    for (size_t i = 0; i < nx; i++) /* a spread of magnitudes within each 16-column chunk */
        hx[i] = mck_sym(&s) * (mck_unit(&s) < 0.1f ? 8.0f : 1.0f);
    for (uint32_t c = 0; c < C; c++)
        hn[c] = 0.5f + mck_unit(&s);
    for (uint32_t r = 0; r < R; r++)
        hb[r] = 0.1f * mck_sym(&s);
    for (size_t i = 0; i < ny; i++)
        hr[i] = mck_sym(&s);
    const uint64_t sb = mc_gemv_chunk_scratch_bytes(C, M);
    if (cudaMalloc((void **)&dx, nx * 4) || cudaMalloc((void **)&dn, (size_t)C * 4) ||
        cudaMalloc((void **)&db, (size_t)R * 4) || cudaMalloc((void **)&dr, ny * 4) ||
        cudaMalloc((void **)&dyd, ny * 4) || cudaMalloc((void **)&dym, ny * 4) || cudaMalloc((void **)&dyf, ny * 4) ||
        cudaMalloc(&scratch, sb))
        goto done;
    cudaError_t e = cudaMemcpy(dx, hx, nx * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dn, hn, (size_t)C * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(db, hb, (size_t)R * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dr, hr, ny * 4, cudaMemcpyHostToDevice);
    mc_config cd = mc_config_default, cmma = mc_config_default, cfma = mc_config_default;
    cfma.chunk = MC_CHUNK_FMA;
    if ((uint64_t)R * 2 < C || C % 32 != 0) { /* mc_gemv_q8_serves: the integer kernel's matrices */
        if (out)
            fprintf(out, "Q8_0 %ux%u: not served by the integer kernel (a bad case)\n", R, C);
        goto done;
    }
    const float *nw = k->norm ? dn : NULL, *bias = k->bias && !k->glu ? db : NULL;
    const float *res = k->residual && !k->glu ? dr : NULL;
    for (uint32_t t = 0; t < M && e == cudaSuccess; t++)
        e = k->glu ? mc_gemv_glu(&cd, &w, dx + (size_t)t * C, nw, eps, k->glu, dyd + (size_t)t * outn, 0)
                   : mc_gemv(&cd, &w, dx + (size_t)t * C, nw, eps, bias, res ? res + (size_t)t * outn : NULL,
                             dyd + (size_t)t * outn, 0);
    if (e == cudaSuccess && !control)
        e = mc_gemv_chunk(&cfma, &w, dx, C, nw, eps, bias, res, outn, dyf, outn, k->glu, M, scratch, 0);
    if (e == cudaSuccess)
        e = cudaMemcpy(yd, dyd, ny * 4, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess && !control)
        e = cudaMemcpy(yf, dyf, ny * 4, cudaMemcpyDeviceToHost);
    bad = 0;
    /* the default MMA kernel (or its fault), then its other tiles (the bench's), each against decode */
    /* (MC_CHUNK_MMA_OPT: chunk=mma-opt, chunk_mma.cu's OPT kernel) */
    static const uint32_t variants[] = {MC_CHUNK_MMA, MC_CHUNK_MMA_T4, MC_CHUNK_MMA_T6, MC_CHUNK_MMA_OPT};
    for (size_t v = 0; v < (control ? 1u : sizeof variants / sizeof variants[0]) && e == cudaSuccess; v++) {
        cmma.chunk = control ? MC_CHUNK_MMA_FAULT : variants[v];
        e = cudaMemset(dym, 0xff, ny * 4); /* NaNs: an element the kernel skips cannot pass */
        if (e == cudaSuccess)
            e = mc_gemv_chunk(&cmma, &w, dx, C, nw, eps, bias, res, outn, dym, outn, k->glu, M, scratch, 0);
        if (e == cudaSuccess)
            e = cudaMemcpy(ym, dym, ny * 4, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess)
            break;
        if (control) { /* 1: the fault went unseen */
            bad = memcmp(yd, ym, ny * 4) == 0;
            goto done;
        }
        for (size_t i = 0; i < ny; i++) {
            const int em = memcmp(&yd[i], &ym[i], 4) != 0, ef = v == 0 && memcmp(&yd[i], &yf[i], 4) != 0;
            if ((em || ef) && out && bad < 4)
                fprintf(out,
                        "Q8_0 %ux%u M=%u glu=%d norm=%d bias=%d res=%d variant %u: x row %zu, out %zu: decode %.9g, "
                        "mma %.9g, fma %.9g\n",
                        R, C, M, k->glu, k->norm, k->bias, k->residual, cmma.chunk, i / outn, i % outn, yd[i], ym[i],
                        yf[i]);
            bad += em + ef;
        }
    }
    if (e != cudaSuccess) {
        if (out)
            fprintf(out, "Q8_0 %ux%u M=%u: %s\n", R, C, M, cudaGetErrorString(e));
        bad = -1;
        goto done;
    }
done:
    cudaFree(w.data);
    cudaFree(w.scales);
    cudaFree(dx);
    cudaFree(dn);
    cudaFree(db);
    cudaFree(dr);
    cudaFree(dyd);
    cudaFree(dym);
    cudaFree(dyf);
    cudaFree(scratch);
    free(hx);
    free(hn);
    free(hb);
    free(hr);
    free(yd);
    free(ym);
    free(yf);
    return bad;
}

int memra_cuda_check_chunk_mma(FILE *out, int *n_checked) {
    static const cm_case cases[] = {
        /* KS 4 (rows <= 528 row groups of 4): 124 chunks, so classes 124..127 are empty */
        {1000, 1984, 7, 0, 1, 0, 0},
        {1000, 1984, 64, 0, 0, 1, 1},
        {36, 64, 9, 0, 1, 1, 0}, /* 4 chunks: most classes empty; rows below one tile */
        {1000, 1984, 1, MC_GLU_GELU, 1, 0, 0},
        /* KS 2: 256 chunks, 4 a class */
        {3000, 4096, 65, 0, 1, 1, 1},
        {3000, 4096, 8, MC_GLU_SILU, 1, 0, 0},
        {2050, 4096, 512, 0, 1, 0, 0},
        /* KS 1: 200 chunks (6 or 7 a class), 2250 row groups */
        {9002, 3200, 9, 0, 0, 0, 1},
        {9000, 3200, 64, MC_GLU_SILU, 1, 0, 0},
        {9000, 3200, 1, 0, 1, 1, 1},
        /* 8B's fused gate/up on a 512-row chunk: 14336 pairs, 4096 columns */
        {28672, 4096, 512, MC_GLU_SILU, 1, 0, 0},
        {6144, 4096, 512, 0, 1, 1, 0}, /* a fused qkv with a bias (qwen2's) */
    };
    int bad = 0, checked = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int b = cm_run(out, &cases[i], 0, 1000 + i);
        if (b < 0)
            return -1;
        bad += b;
        checked++;
    }
    /* negative controls: the faulty tree must be seen, on each column split */
    static const cm_case ctl[] = {
        {1000, 1984, 8, 0, 1, 0, 0}, {3000, 4096, 8, 0, 1, 0, 0}, {9000, 3200, 8, 0, 1, 0, 0}};
    for (size_t i = 0; i < sizeof ctl / sizeof ctl[0]; i++) {
        const int b = cm_run(out, &ctl[i], 1, 77 + i);
        if (b < 0)
            return -1;
        if (b) {
            if (out)
                fprintf(out, "Q8_0 %ux%u: negative control not caught (the classes in lane order gave decode's bits)\n",
                        ctl[i].rows, ctl[i].cols);
            bad++;
        }
        checked++;
    }
    if (n_checked)
        *n_checked = checked;
    return bad;
}

#ifndef MEMRA_CHECK_NO_MAIN
MEMRA_CHECK_MAIN("check_chunk_mma", memra_cuda_check_chunk_mma, "cases", "failures")
#endif
