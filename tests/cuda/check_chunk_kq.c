/* check_chunk_kq.c: chunk=mma, the default (issue 28, backends/cuda/chunk_kq_mma.cu): a
 * prefill chunk's Q4_K, Q5_K and Q6_K GEMV on int8 tensor cores, bit for bit against decode's
 * GEMV under qdot=auto (gemv_kquant.cu through mc_gemv or mc_gemv_glu, one launch per row of x),
 * on random file blocks repacked to the upload layout: each column split (KS 4, 2, 1), rows that
 * are no multiple of 16 or of the 64-row tile, unit counts that leave classes short or empty,
 * M = 1, 7, 8, 9, 64, 65, 512, with and without the fused RMSNorm, a bias, a residual, SwiGLU and
 * GELU-gated rows, each output written over NaNs first. The chunk path serves them under
 * chunk=mma (or its old name mma-kq) and qdot=auto only (mc_gemv_chunk_batched: 0 under
 * chunk=fma, chunk=mma-q8 and qdot=float, whose chunks run as single steps). Negative control: MC_CHUNK_MMA_FAULT (the classes summed in lane order, a tree
 * decode does not build) must differ from decode for every type.
 *
 *   memra_cuda_check_chunk_kq    exit 0 pass, 1 a mismatch or an uncaught control, 77 no device */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "cuda_checks.h"
#include "cuda_kernels.h"
#include "gemv_quant.h"
#include "memra/numeric.h"
#include "memra/quant.h"

typedef struct ck_case {
    uint32_t rows, cols, M;
    int glu, norm, bias, residual;
} ck_case;

/* A random matrix of `type` in the upload layout: random file blocks with sane f16 scales
 * (magnitudes 2^-9 .. 2^-5), repacked by mc_qrepack_kquant. */
static cudaError_t ck_matrix(uint32_t type, uint32_t rows, uint32_t cols, uint64_t *s, mc_matrix *w) {
    memset(w, 0, sizeof *w);
    uint64_t dr = 0, ar = 0;
    if (!mc_qlayout_kquant(type, cols, &dr, &ar))
        return cudaErrorInvalidValue;
    const uint64_t nb = cols / 256, bb = memra_quant_block_bytes(type);
    uint8_t *file = malloc(nb * bb), *hd = calloc(rows, dr), *ha = calloc(rows, ar);
    cudaError_t e = cudaErrorMemoryAllocation;
    if (!file || !hd || !ha)
        goto done;
    for (uint32_t r = 0; r < rows; r++) {
        for (uint64_t b = 0; b < nb; b++) {
            uint8_t *blk = file + b * bb;
            for (uint32_t i = 0; i < bb; i++)
                blk[i] = (uint8_t)mck_next(s);
            const uint16_t d = (uint16_t)((6u + mck_next(s) % 4) << 10 | (mck_next(s) & 0x3ffu));
            const uint16_t dm = (uint16_t)((6u + mck_next(s) % 4) << 10 | (mck_next(s) & 0x3ffu));
            if (type == MEMRA_QTYPE_Q6_K) {
                memcpy(blk + 208, &d, 2);
            } else {
                memcpy(blk, &d, 2);
                memcpy(blk + 2, &dm, 2);
            }
        }
        mc_qrepack_kquant(type, file, cols, hd + (size_t)r * dr, ha + (size_t)r * ar);
    }
    w->type = type;
    w->rows = rows;
    w->cols = cols;
    w->stride = (uint32_t)dr;
    w->aux_stride = (uint32_t)ar;
    if ((e = cudaMalloc(&w->data, (size_t)rows * dr)) != cudaSuccess ||
        (e = cudaMalloc(&w->aux, (size_t)rows * ar)) != cudaSuccess ||
        (e = cudaMemcpy(w->data, hd, (size_t)rows * dr, cudaMemcpyHostToDevice)) != cudaSuccess)
        goto done;
    e = cudaMemcpy(w->aux, ha, (size_t)rows * ar, cudaMemcpyHostToDevice);
done:
    free(file);
    free(hd);
    free(ha);
    return e;
}

static const char *ck_name(uint32_t type) {
    return type == MEMRA_QTYPE_Q4_K ? "Q4_K" : type == MEMRA_QTYPE_Q5_K ? "Q5_K" : "Q6_K";
}

/* One case: decode row by row into yd, chunk=mma into ym, then its OPT kernel (the bench's)
 * likewise (with control, the faulty kernel alone).
 * Returns the failures (-1: could not run); with control, 1 when the fault went unseen. */
static int ck_run(FILE *out, uint32_t type, const ck_case *k, int control, uint64_t seed) {
    const uint32_t R = k->rows, C = k->cols, M = k->M, outn = k->glu ? R / 2 : R;
    const float eps = 1e-5f;
    uint64_t s = seed;
    mc_matrix w;
    memset(&w, 0, sizeof w);
    const size_t nx = (size_t)M * C, ny = (size_t)M * outn;
    float *hx = malloc(nx * 4), *hn = malloc((size_t)C * 4), *hb = malloc((size_t)R * 4), *hr = malloc(ny * 4);
    float *yd = malloc(ny * 4), *ym = malloc(ny * 4);
    float *dx = NULL, *dn = NULL, *db = NULL, *dr = NULL, *dyd = NULL, *dym = NULL;
    void *scratch = NULL;
    int bad = -1;
    cudaError_t e = ck_matrix(type, R, C, &s, &w);
    if (e != cudaSuccess || !hx || !hn || !hb || !hr || !yd || !ym)
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
        cudaMalloc((void **)&dyd, ny * 4) || cudaMalloc((void **)&dym, ny * 4) || cudaMalloc(&scratch, sb))
        goto done;
    e = cudaMemcpy(dx, hx, nx * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dn, hn, (size_t)C * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(db, hb, (size_t)R * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dr, hr, ny * 4, cudaMemcpyHostToDevice);
    mc_config cd = mc_config_default, cmma = mc_config_default;
    cmma.chunk = control ? MC_CHUNK_MMA_FAULT : MC_CHUNK_MMA; /* the default */
    const float *nw = k->norm ? dn : NULL, *bias = k->bias && !k->glu ? db : NULL;
    const float *res = k->residual && !k->glu ? dr : NULL;
    for (uint32_t t = 0; t < M && e == cudaSuccess; t++)
        e = k->glu ? mc_gemv_glu(&cd, &w, dx + (size_t)t * C, nw, eps, k->glu, dyd + (size_t)t * outn, 0)
                   : mc_gemv(&cd, &w, dx + (size_t)t * C, nw, eps, bias, res ? res + (size_t)t * outn : NULL,
                             dyd + (size_t)t * outn, 0);
    if (e == cudaSuccess)
        e = cudaMemcpy(yd, dyd, ny * 4, cudaMemcpyDeviceToHost);
    /* (MC_CHUNK_MMA_OPT: chunk=mma-opt, chunk_kq_mma.cu's OPT kernel) */
    static const uint32_t variants[] = {MC_CHUNK_MMA, MC_CHUNK_MMA_OPT};
    bad = 0;
    for (size_t v = 0; v < (control ? 1u : sizeof variants / sizeof variants[0]); v++) {
        if (!control)
            cmma.chunk = variants[v];
        if (e == cudaSuccess)
            e = cudaMemset(dym, 0xff, ny * 4); /* NaNs: an element the kernel skips cannot pass */
        if (e == cudaSuccess)
            e = mc_gemv_chunk(&cmma, &w, dx, C, nw, eps, bias, res, outn, dym, outn, k->glu, M, scratch, 0);
        if (e == cudaSuccess)
            e = cudaMemcpy(ym, dym, ny * 4, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) {
            if (out)
                fprintf(out, "%s %ux%u M=%u: %s\n", ck_name(type), R, C, M, cudaGetErrorString(e));
            bad = -1;
            goto done;
        }
        if (control) {
            bad = memcmp(yd, ym, ny * 4) == 0;
            goto done;
        }
        for (size_t i = 0; i < ny; i++) {
            const int em = memcmp(&yd[i], &ym[i], 4) != 0;
            if (em && out && bad < 4)
                fprintf(out,
                        "%s %ux%u M=%u glu=%d norm=%d bias=%d res=%d variant %u: x row %zu, out %zu: decode %.9g, "
                        "mma %.9g\n",
                        ck_name(type), R, C, M, k->glu, k->norm, k->bias, k->residual, cmma.chunk, i / outn,
                        i % outn, yd[i], ym[i]);
            bad += em;
        }
    }
done:
    cudaFree(w.data);
    cudaFree(w.aux);
    cudaFree(dx);
    cudaFree(dn);
    cudaFree(db);
    cudaFree(dr);
    cudaFree(dyd);
    cudaFree(dym);
    cudaFree(scratch);
    free(hx);
    free(hn);
    free(hb);
    free(hr);
    free(yd);
    free(ym);
    return bad;
}

/* Which paths batch a K-quant matrix: chunk=mma (the default) and mma-kq (its old name) under
 * qdot=auto only; chunk=fma and mma-q8 do not. */
static int ck_batched(FILE *out, uint32_t type) {
    mc_matrix w;
    memset(&w, 0, sizeof w);
    uint64_t dr = 0, ar = 0;
    mc_qlayout_kquant(type, 4096, &dr, &ar);
    w.type = type, w.rows = 4096, w.cols = 4096, w.stride = (uint32_t)dr, w.aux_stride = (uint32_t)ar;
    w.data = (void *)16, w.aux = (void *)16; /* never read */
    mc_config ck = mc_config_default, cm = mc_config_default, cf = mc_config_default, cq = mc_config_default;
    mc_config c8 = mc_config_default;
    ck.chunk = MC_CHUNK_MMA_KQ;
    cf.chunk = MC_CHUNK_FMA;
    c8.chunk = MC_CHUNK_MMA_Q8;
    cq.chunk = MC_CHUNK_MMA_KQ;
    cq.qdot = MC_QDOT_FLOAT;
    const int a = mc_gemv_chunk_batched(&ck, &w), m = mc_gemv_chunk_batched(&cm, &w);
    const int b = mc_gemv_chunk_batched(&cf, &w), c = mc_gemv_chunk_batched(&cq, &w);
    const int q = mc_gemv_chunk_batched(&c8, &w);
    if (a == 1 && m == 1 && b == 0 && c == 0 && q == 0)
        return 0;
    if (out)
        fprintf(out,
                "%s: batched chunk=mma-kq %d (want 1), chunk=mma %d (want 1), chunk=fma %d (want 0), "
                "mma-kq with qdot=float %d (want 0), chunk=mma-q8 %d (want 0)\n",
                ck_name(type), a, m, b, c, q);
    return 1;
}

int memra_cuda_check_chunk_kq(FILE *out, int *n_checked) {
    static const ck_case cases[] = {
        /* KS 4 (rows <= 528 row groups of 4): 64 units on 128 classes, half of them empty */
        {1000, 2048, 7, 0, 1, 0, 0},
        {1000, 2048, 64, 0, 0, 1, 1},
        {36, 256, 9, 0, 1, 1, 0}, /* 8 units: most classes empty; rows below one tile */
        {1000, 2048, 1, MC_GLU_GELU, 1, 0, 0},
        /* KS 2: 128 units, 2 a class */
        {3000, 4096, 65, 0, 1, 1, 1},
        {3000, 4096, 8, MC_GLU_SILU, 1, 0, 0},
        {2050, 4096, 512, 0, 1, 0, 0}, /* KS 4: 1 a class */
        /* 2250 row groups: KS 2 since mc_kq_ksplit's balance rule (2 tasks for the busiest warp at KS 1,
         * 3 halves at KS 2); 96 and 104 units. KS 1: the 6144-row case below (1536 groups) */
        {9002, 3072, 9, 0, 0, 0, 1},
        {9000, 3328, 64, MC_GLU_SILU, 1, 0, 0},
        {9000, 2560, 1, 0, 1, 1, 1},
        /* 8B's shapes on a 512-row chunk: gate/up (14336 pairs, KS 2), down onto the residual, a fused
         * qkv with a bias (KS 1) */
        {28672, 4096, 512, MC_GLU_SILU, 1, 0, 0},
        {4096, 14336, 512, 0, 0, 0, 1},
        {6144, 4096, 512, 0, 1, 1, 0},
    };
    static const uint32_t types[] = {MEMRA_QTYPE_Q4_K, MEMRA_QTYPE_Q5_K, MEMRA_QTYPE_Q6_K};
    int bad = 0, checked = 0;
    for (size_t ti = 0; ti < 3; ti++) {
        bad += ck_batched(out, types[ti]);
        checked++;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const int b = ck_run(out, types[ti], &cases[i], 0, 1000 + 100 * ti + i);
            if (b < 0)
                return -1;
            bad += b;
            checked++;
        }
        /* negative controls: the faulty tree must be seen, on each column split */
        static const ck_case ctl[] = {
            {1000, 2048, 8, 0, 1, 0, 0}, {3000, 4096, 8, 0, 1, 0, 0}, {9000, 3072, 8, 0, 1, 0, 0}};
        for (size_t i = 0; i < sizeof ctl / sizeof ctl[0]; i++) {
            const int b = ck_run(out, types[ti], &ctl[i], 1, 77 + 10 * ti + i);
            if (b < 0)
                return -1;
            if (b) {
                if (out)
                    fprintf(out,
                            "%s %ux%u: negative control not caught (the classes in lane order gave decode's bits)\n",
                            ck_name(types[ti]), ctl[i].rows, ctl[i].cols);
                bad++;
            }
            checked++;
        }
    }
    if (n_checked)
        *n_checked = checked;
    return bad;
}

#ifndef MEMRA_CHECK_NO_MAIN
MEMRA_CHECK_MAIN("check_chunk_kq", memra_cuda_check_chunk_kq, "cases", "failures")
#endif
