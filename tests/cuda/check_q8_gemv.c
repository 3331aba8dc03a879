/* check_q8_gemv.c: the integer Q8_0 GEMV (backends/cuda/gemv_q8.cu) on every Q8_0 matrix (issue 27
 * item 2), bit for bit: q8=auto (blocks of 16 warps, one a multiprocessor) against q8=int-8w (the
 * blocks of 8 warps the kernel had before: the same body, the old kernel's arithmetic), against
 * q8=rows (the rule before, which runs that old kernel) where rows >= cols / 2, and a prefill
 * chunk (mc_gemv_chunk under chunk=mma and chunk=fma) against decode row by row, on random Q8_0
 * matrices and x: down projections (rows < cols / 2: 8B's 4096 x 14336, 1B's 2048 x 8192,
 * gemma3-270m's 640 x 2048, the widest x that fits in shared memory), each column split (KS 4, 2,
 * 1), with and without the fused RMSNorm (whose sum of squares the 16-warp blocks take in the
 * 8-warp order), a bias, a residual, SwiGLU and GELU-gated rows; every output written over NaNs
 * first. And q8=auto against q8=float (other bits: a sanity bound on the difference, NMSE below
 * 1e-6). Negative controls: q8=float must differ from q8=auto on every case, and the chunk's
 * faulty MMA tree (MC_CHUNK_MMA_FAULT) from decode on a down projection of each column split.
 *
 *   memra_cuda_check_q8_gemv    exit 0 pass, 1 a mismatch or an uncaught control, 77 no device */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "cuda_checks.h"
#include "cuda_kernels.h"
#include "memra/numeric.h"

typedef struct q8c_case {
    uint32_t rows, cols, M;
    int glu, norm, bias, residual;
} q8c_case;

typedef struct q8c_bufs {
    const q8c_case *k;
    mc_matrix w;
    const float *x, *nw, *bias, *res;
    float *dy, *hy;
    void *scratch;
    uint32_t outn;
    size_t ny;
} q8c_bufs;

/* Decode row by row under q8 (an MC_Q8_* value) into b->hy (over NaNs first). */
static cudaError_t q8c_decode(q8c_bufs *b, uint32_t q8) {
    mc_config c = mc_config_default;
    c.q8 = q8;
    const q8c_case *k = b->k;
    cudaError_t e = cudaMemset(b->dy, 0xff, b->ny * 4);
    for (uint32_t t = 0; t < k->M && e == cudaSuccess; t++) {
        const float *xr = b->x + (size_t)t * k->cols;
        float *yr = b->dy + (size_t)t * b->outn;
        e = k->glu ? mc_gemv_glu(&c, &b->w, xr, b->nw, 1e-5f, k->glu, yr, 0)
                   : mc_gemv(&c, &b->w, xr, b->nw, 1e-5f, b->bias, b->res ? b->res + (size_t)t * b->outn : NULL, yr, 0);
    }
    return e == cudaSuccess ? cudaMemcpy(b->hy, b->dy, b->ny * 4, cudaMemcpyDeviceToHost) : e;
}

/* The prefill chunk of all M rows under q8=auto and `chunk` into b->hy (over NaNs first). */
static cudaError_t q8c_chunk(q8c_bufs *b, uint32_t chunk) {
    mc_config c = mc_config_default;
    c.chunk = chunk;
    const q8c_case *k = b->k;
    cudaError_t e = cudaMemset(b->dy, 0xff, b->ny * 4);
    if (e == cudaSuccess)
        e = mc_gemv_chunk(&c, &b->w, b->x, k->cols, b->nw, 1e-5f, b->bias, b->res, b->outn, b->dy, b->outn, k->glu,
                          k->M, b->scratch, 0);
    return e == cudaSuccess ? cudaMemcpy(b->hy, b->dy, b->ny * 4, cudaMemcpyDeviceToHost) : e;
}

/* Mismatches of got against want (bit for bit), the first few printed. */
static int q8c_cmp(FILE *out, const q8c_bufs *b, const float *want, const float *got, const char *what) {
    int bad = 0;
    for (size_t i = 0; i < b->ny; i++)
        if (memcmp(&want[i], &got[i], 4) != 0) {
            if (out && bad < 3)
                fprintf(out, "Q8_0 %ux%u M=%u glu=%d norm=%d bias=%d res=%d: %s: x row %zu, out %zu: %.9g, want %.9g\n",
                        b->k->rows, b->k->cols, b->k->M, b->k->glu, b->k->norm, b->k->bias, b->k->residual, what,
                        i / b->outn, i % b->outn, got[i], want[i]);
            bad++;
        }
    return bad;
}

/* One case; control: only the faulty chunk tree against decode (1 when it went unseen). Returns
 * the failures (-1: could not run). */
static int q8c_run(FILE *out, const q8c_case *k, int control, uint64_t seed) {
    const uint32_t R = k->rows, C = k->cols, M = k->M;
    uint64_t s = seed;
    q8c_bufs b;
    memset(&b, 0, sizeof b);
    b.k = k;
    b.outn = k->glu ? R / 2 : R;
    b.ny = (size_t)M * b.outn;
    const size_t nx = (size_t)M * C;
    float *hx = malloc(nx * 4), *hn = malloc((size_t)C * 4), *hb = malloc((size_t)R * 4), *hr = malloc(b.ny * 4);
    float *ya = malloc(b.ny * 4), *yo = malloc(b.ny * 4);
    float *dx = NULL, *dn = NULL, *db = NULL, *dr = NULL;
    int bad = -1;
    cudaError_t e = mck_q8_matrix(R, C, &s, &b.w);
    if (e != cudaSuccess || !hx || !hn || !hb || !hr || !ya || !yo)
        goto done;
    for (size_t i = 0; i < nx; i++) /* a spread of magnitudes within each 16-column chunk */
        hx[i] = mck_sym(&s) * (mck_unit(&s) < 0.1f ? 8.0f : 1.0f);
    for (uint32_t c = 0; c < C; c++)
        hn[c] = 0.5f + mck_unit(&s);
    for (uint32_t r = 0; r < R; r++)
        hb[r] = 0.1f * mck_sym(&s);
    for (size_t i = 0; i < b.ny; i++)
        hr[i] = mck_sym(&s);
    if (cudaMalloc((void **)&dx, nx * 4) || cudaMalloc((void **)&dn, (size_t)C * 4) ||
        cudaMalloc((void **)&db, (size_t)R * 4) || cudaMalloc((void **)&dr, b.ny * 4) ||
        cudaMalloc((void **)&b.dy, b.ny * 4) || cudaMalloc(&b.scratch, mc_gemv_chunk_scratch_bytes(C, M)))
        goto done;
    e = cudaMemcpy(dx, hx, nx * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dn, hn, (size_t)C * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(db, hb, (size_t)R * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dr, hr, b.ny * 4, cudaMemcpyHostToDevice);
    b.x = dx;
    b.nw = k->norm ? dn : NULL;
    b.bias = k->bias && !k->glu ? db : NULL;
    b.res = k->residual && !k->glu ? dr : NULL;
    mc_config c = mc_config_default;
    if (!mc_gemv_q8_serves(&c, &b.w)) {
        if (out)
            fprintf(out, "Q8_0 %ux%u: not served by the integer kernel under q8=auto\n", R, C);
        bad = 1;
        goto done;
    }
    b.hy = ya;
    if (e == cudaSuccess)
        e = q8c_decode(&b, MC_Q8_AUTO);
    b.hy = yo;
    if (control) {
        if (e == cudaSuccess)
            e = q8c_chunk(&b, MC_CHUNK_MMA_FAULT);
        if (e == cudaSuccess)
            bad = memcmp(ya, yo, b.ny * 4) == 0;
        goto done;
    }
    bad = 0;
    if (e == cudaSuccess && (e = q8c_decode(&b, MC_Q8_INT8W)) == cudaSuccess)
        bad += q8c_cmp(out, &b, ya, yo, "int-8w against auto");
    if (e == cudaSuccess && (uint64_t)R * 2 >= C && (e = q8c_decode(&b, MC_Q8_ROWS)) == cudaSuccess)
        bad += q8c_cmp(out, &b, ya, yo, "rows against auto");
    if (e == cudaSuccess && (e = q8c_chunk(&b, MC_CHUNK_MMA)) == cudaSuccess)
        bad += q8c_cmp(out, &b, ya, yo, "chunk=mma against decode");
    if (e == cudaSuccess && (e = q8c_chunk(&b, MC_CHUNK_FMA)) == cudaSuccess)
        bad += q8c_cmp(out, &b, ya, yo, "chunk=fma against decode");
    if (e == cudaSuccess && (e = q8c_decode(&b, MC_Q8_FLOAT)) == cudaSuccess) {
        double num = 0.0, den = 0.0;
        int same = 1;
        for (size_t i = 0; i < b.ny; i++) {
            const double d = (double)ya[i] - (double)yo[i];
            num += d * d;
            den += (double)yo[i] * yo[i];
            same = same && memcmp(&ya[i], &yo[i], 4) == 0;
        }
        const double nmse = den > 0.0 ? num / den : num;
        if (!(nmse < 1e-6) || same) {
            if (out)
                fprintf(out, "Q8_0 %ux%u M=%u: auto against float: nmse %.3g%s\n", R, C, M, nmse,
                        same ? " (the same bits: the control was not caught)" : "");
            bad++;
        }
    }
    if (e != cudaSuccess) {
        if (out)
            fprintf(out, "Q8_0 %ux%u M=%u: %s\n", R, C, M, cudaGetErrorString(e));
        bad = -1;
    }
done:
    cudaFree(b.w.data);
    cudaFree(b.w.scales);
    cudaFree(dx);
    cudaFree(dn);
    cudaFree(db);
    cudaFree(dr);
    cudaFree(b.dy);
    cudaFree(b.scratch);
    free(hx);
    free(hn);
    free(hb);
    free(hr);
    free(ya);
    free(yo);
    return bad;
}

int memra_cuda_check_q8_gemv(FILE *out, int *n_checked) {
    static const q8c_case cases[] = {
        {4096, 14336, 9, 0, 0, 0, 1},           /* 8B's down projection with its residual: KS 2 */
        {2048, 8192, 33, 0, 0, 0, 1},           /* 1B's: KS 4 */
        {640, 2048, 8, 0, 0, 1, 1},             /* gemma3-270m's, a bias too: KS 4 */
        {3000, 8192, 7, 0, 1, 0, 0},            /* rows < cols / 2 with the norm: KS 2 */
        {4096, 30240, 2, 0, 1, 0, 1},           /* the widest x in shared memory */
        {6002, 4096, 5, MC_GLU_SILU, 1, 0, 0},  /* KS 1, the norm's squares in the 8-warp order */
        {1000, 1984, 9, MC_GLU_GELU, 1, 0, 0},  /* KS 4 */
        {9002, 3200, 3, 0, 1, 1, 1},            /* KS 1, rows no multiple of 4 */
        {5002, 10240, 4, 0, 1, 0, 1},           /* KS 1 with rows < cols / 2 */
        {4096, 4096, 65, 0, 1, 0, 1},           /* KS 2 */
        {36, 64, 2, 0, 1, 0, 0},                /* 4 chunks, one block */
    };
    int bad = 0, checked = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int b = q8c_run(out, &cases[i], 0, 2700 + i);
        if (b < 0)
            return -1;
        bad += b;
        checked++;
    }
    /* negative controls: the faulty tree must be seen on a down projection of each column split */
    static const q8c_case ctl[] = {{4096, 14336, 8, 0, 0, 0, 1}, {2048, 8192, 8, 0, 0, 0, 0}, {5002, 10240, 8, 0, 1, 0, 0}};
    for (size_t i = 0; i < sizeof ctl / sizeof ctl[0]; i++) {
        const int b = q8c_run(out, &ctl[i], 1, 77 + i);
        if (b < 0)
            return -1;
        if (b) {
            if (out)
                fprintf(out, "Q8_0 %ux%u: negative control not caught (the faulty chunk tree gave decode's bits)\n",
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
MEMRA_CHECK_MAIN("check_q8_gemv", memra_cuda_check_q8_gemv, "cases", "failures")
#endif
