/* check_post_norm.c: postnorm=fused (issue 27 item 1): mc_gemv_post, the GEMV whose last block
 * folds gemma3's post norm and its residual add, bit for bit against the two launches it replaces
 * (mc_gemv into y, then mc_op_rmsnorm_add of y onto x), for every weight type and kernel the output
 * and down projections can take: F32, F16 and BF16 (gemv=auto: the persistent kernel on short rows;
 * gemv=rowgroup; BF16 also gemv=mma and mma2, gemv_mma.cu), Q8_0 (q8=auto: the integer kernel where
 * it serves, the float row-group kernel elsewhere; q8=float), Q4_0 ... Q5_1 and Q4_K ... Q6_K
 * (qdot=auto and float), on shapes that take each column split (KS 4, 2, 1), rows that are no
 * multiple of a row group or of the norm's 256 partials, gemma3-tiny's and gemma3-270m's. Each case
 * runs twice in a row on the same ticket (the second launch must find it reset: it is read back,
 * and must be 0) and compares y and x after both. Negative control: the fused launch with one
 * post-norm weight changed must give another x (so the comparison sees a difference where there is
 * one). qblock (issue 27): the two launches in the 16-warp blocks and the fused one in the 4-warp
 * blocks, and the other way round, must give the same bits; negative control: the fused launch
 * under qdot=float against the two under auto must differ. postnorm=prologue (mc_gemv_pro, pro_all
 * below): the consumer GEMV that computes the post norm itself against the two launches.
 *
 * Built twice: a plain program (main below) for the device machine, and into tests/cuda's
 * Criterion test with MEMRA_CHECK_NO_MAIN. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "cuda_checks.h"
#include "gemv_quant.h"
#include "memra/numeric.h"
#include "memra/quant.h"
#include "memra/tensor_type.h"

/* A small finite f16 scale (sign random). */
static uint16_t pn_scale16(uint64_t *s) {
    return memra_f32_to_f16((mck_unit(s) < 0.5f ? -1.0f : 1.0f) * (0.002f + 0.02f * mck_unit(s)));
}

/* The device matrix (rows x cols of type t, random weights) in the upload layout of
 * cuda_kernels.h and gemv_quant.h. */
static cudaError_t pn_matrix(uint32_t t, uint32_t rows, uint32_t cols, uint64_t *s, mc_matrix *w) {
    memset(w, 0, sizeof *w);
    w->type = t;
    w->rows = rows;
    w->cols = cols;
    uint64_t dr = 0, ar = 0;
    uint8_t *d = NULL, *a = NULL, *src = NULL;
    uint16_t *sc = NULL;
    cudaError_t e = cudaErrorMemoryAllocation;
    const bool legacy = mc_qlayout_legacy(t, cols, &dr, &ar), kq = !legacy && mc_qlayout_kquant(t, cols, &dr, &ar);
    if (legacy || kq) {
        const uint32_t bb = memra_quant_block_bytes(t), be = memra_quant_block_elems(t), nb = cols / be;
        src = malloc((size_t)nb * bb);
        d = calloc(rows, dr);
        a = ar ? calloc(rows, ar) : NULL;
        if (!src || !d || (ar && !a))
            goto done;
        for (uint32_t r = 0; r < rows; r++) {
            for (size_t i = 0; i < (size_t)nb * bb; i++)
                src[i] = (uint8_t)mck_next(s);
            for (uint32_t b = 0; b < nb; b++) { /* the f16 fields finite and small */
                uint8_t *blk = src + (size_t)b * bb;
                const uint16_t d16 = pn_scale16(s), m16 = pn_scale16(s);
                if (t == MEMRA_QTYPE_Q6_K) {
                    memcpy(blk + 208, &d16, 2);
                } else {
                    memcpy(blk, &d16, 2);
                    if (t == MEMRA_QTYPE_Q4_1 || t == MEMRA_QTYPE_Q5_1 || t == MEMRA_QTYPE_Q4_K ||
                        t == MEMRA_QTYPE_Q5_K)
                        memcpy(blk + 2, &m16, 2);
                }
            }
            if (legacy)
                mc_qrepack_legacy(t, src, cols, d + (size_t)r * dr, a ? a + (size_t)r * ar : NULL);
            else
                mc_qrepack_kquant(t, src, cols, d + (size_t)r * dr, a ? a + (size_t)r * ar : NULL);
        }
        w->stride = (uint32_t)dr;
        w->aux_stride = (uint32_t)ar;
        if ((e = cudaMalloc(&w->data, (size_t)rows * dr)) != cudaSuccess ||
            (e = cudaMemcpy(w->data, d, (size_t)rows * dr, cudaMemcpyHostToDevice)) != cudaSuccess)
            goto done;
        if (ar && ((e = cudaMalloc(&w->aux, (size_t)rows * ar)) != cudaSuccess ||
                   (e = cudaMemcpy(w->aux, a, (size_t)rows * ar, cudaMemcpyHostToDevice)) != cudaSuccess))
            goto done;
        e = cudaSuccess;
        goto done;
    }
    const uint32_t eb = t == MEMRA_TYPE_F32 ? 4 : t == MEMRA_TYPE_Q8_0 ? 1 : 2, per16 = 16 / eb;
    w->stride = (cols + per16 - 1) / per16 * per16;
    const size_t bytes = (size_t)rows * w->stride * eb;
    d = calloc(1, bytes);
    if (!d)
        goto done;
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t c = 0; c < cols; c++) {
            const size_t i = (size_t)r * w->stride + c;
            const float v = 0.05f * mck_sym(s);
            if (t == MEMRA_TYPE_F32)
                memcpy(d + 4 * i, &v, 4);
            else if (t == MEMRA_TYPE_F16 || t == MEMRA_TYPE_BF16) {
                const uint16_t h = t == MEMRA_TYPE_F16 ? memra_f32_to_f16(v) : memra_f32_to_bf16(v);
                memcpy(d + 2 * i, &h, 2);
            } else {
                d[i] = (uint8_t)(int8_t)(mck_next(s) % 255 - 127);
            }
        }
    if ((e = cudaMalloc(&w->data, bytes)) != cudaSuccess ||
        (e = cudaMemcpy(w->data, d, bytes, cudaMemcpyHostToDevice)) != cudaSuccess)
        goto done;
    if (t == MEMRA_TYPE_Q8_0) {
        const size_t n = (size_t)rows * (cols / 32);
        sc = malloc(n * 2);
        e = cudaErrorMemoryAllocation;
        if (!sc)
            goto done;
        for (size_t i = 0; i < n; i++)
            sc[i] = pn_scale16(s);
        if ((e = cudaMalloc((void **)&w->scales, n * 2)) != cudaSuccess ||
            (e = cudaMemcpy(w->scales, sc, n * 2, cudaMemcpyHostToDevice)) != cudaSuccess)
            goto done;
    }
    e = cudaSuccess;
done:
    free(src);
    free(d);
    free(a);
    free(sc);
    return e;
}

static void pn_free(mc_matrix *w) {
    cudaFree(w->data);
    cudaFree(w->aux);
    cudaFree(w->scales);
    memset(w, 0, sizeof *w);
}

typedef struct pn_case {
    uint32_t type, rows, cols;
    const char *key, *value; /* the configuration key the case sets (gemv, q8, qdot or qblock) */
    const char *fused;       /* the key's value for the fused launch (NULL: value) */
} pn_case;

/* One case: 0 pass, else the number of failures (-1: could not run). control: perturb one post-norm
 * weight of the fused launch (the result must then differ). */
static int pn_run(FILE *out, const pn_case *k, int control, uint64_t seed) {
    const uint32_t R = k->rows, C = k->cols;
    const float eps = 1e-6f;
    uint64_t s = seed;
    mc_matrix w;
    float *hx = malloc((size_t)C * 4), *hw = malloc((size_t)R * 4), *hr = malloc((size_t)R * 4);
    float *y1 = malloc((size_t)R * 4), *y2 = malloc((size_t)R * 4), *x1 = malloc((size_t)R * 4),
          *x2 = malloc((size_t)R * 4);
    float *dx = NULL, *dw = NULL, *dw2 = NULL, *dy1 = NULL, *dy2 = NULL, *dr1 = NULL, *dr2 = NULL;
    uint32_t *ticket = NULL, tk = 1;
    int bad = -1;
    const char *tn = memra_tensor_type_name(k->type);
    if (pn_matrix(k->type, R, C, &s, &w) != cudaSuccess || !hx || !hw || !hr || !y1 || !y2 || !x1 || !x2)
        goto done;
    for (uint32_t c = 0; c < C; c++)
        hx[c] = 2.0f * mck_sym(&s);
    for (uint32_t r = 0; r < R; r++) {
        hw[r] = 0.5f + mck_unit(&s);
        hr[r] = 4.0f * mck_sym(&s);
    }
    if (cudaMalloc((void **)&dx, (size_t)C * 4) || cudaMalloc((void **)&dw, (size_t)R * 4) ||
        cudaMalloc((void **)&dw2, (size_t)R * 4) || cudaMalloc((void **)&dy1, (size_t)R * 4) ||
        cudaMalloc((void **)&dy2, (size_t)R * 4) || cudaMalloc((void **)&dr1, (size_t)R * 4) ||
        cudaMalloc((void **)&dr2, (size_t)R * 4) || cudaMalloc((void **)&ticket, 4))
        goto done;
    cudaMemcpy(dx, hx, (size_t)C * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, hw, (size_t)R * 4, cudaMemcpyHostToDevice);
    if (control)
        hw[R / 2] *= 1.5f;
    cudaMemcpy(dw2, hw, (size_t)R * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dr1, hr, (size_t)R * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dr2, hr, (size_t)R * 4, cudaMemcpyHostToDevice);
    cudaMemset(ticket, 0, 4);
    mc_config cfg = mc_config_default, cfu;
    if (k->key && mc_config_choice(&cfg, k->key, k->value) != NULL)
        goto done;
    cfu = cfg;
    if (k->key && k->fused && mc_config_choice(&cfu, k->key, k->fused) != NULL)
        goto done;
    const mc_post_args pn = {dw2, dr2, ticket, eps};
    cudaError_t e = cudaSuccess;
    for (int rep = 0; rep < 2 && e == cudaSuccess; rep++) { /* twice: the second finds the ticket reset */
        e = mc_gemv(&cfg, &w, dx, NULL, eps, NULL, NULL, dy1, 0);
        if (e == cudaSuccess)
            e = mc_op_rmsnorm_add(dy1, dw, R, eps, dr1, 0);
        if (e == cudaSuccess)
            e = mc_gemv_post(&cfu, &w, dx, dy2, &pn, 0);
    }
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    if (e == cudaSuccess && (e = cudaMemcpy(y1, dy1, (size_t)R * 4, cudaMemcpyDeviceToHost)) == cudaSuccess &&
        (e = cudaMemcpy(y2, dy2, (size_t)R * 4, cudaMemcpyDeviceToHost)) == cudaSuccess &&
        (e = cudaMemcpy(x1, dr1, (size_t)R * 4, cudaMemcpyDeviceToHost)) == cudaSuccess)
        e = cudaMemcpy(x2, dr2, (size_t)R * 4, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(&tk, ticket, 4, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        if (out)
            fprintf(out, "%s %ux%u %s=%s: %s\n", tn, R, C, k->key, k->value, cudaGetErrorString(e));
        goto done;
    }
    bad = 0;
    if (memcmp(y1, y2, (size_t)R * 4) != 0) {
        bad++;
        if (out)
            fprintf(out, "%s %ux%u %s=%s: the fused GEMV's outputs differ from mc_gemv's\n", tn, R, C, k->key,
                    k->value);
    }
    for (uint32_t r = 0; r < R; r++)
        if (memcmp(&x1[r], &x2[r], 4) != 0) {
            if (out && bad < 4)
                fprintf(out, "%s %ux%u %s=%s: x[%u] %.9g, the two launches give %.9g\n", tn, R, C, k->key, k->value, r,
                        x2[r], x1[r]);
            bad++;
        }
    if (tk != 0) {
        bad++;
        if (out)
            fprintf(out, "%s %ux%u: the ticket is %u after the launches, not 0\n", tn, R, C, tk);
    }
done:
    pn_free(&w);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dw2);
    cudaFree(dy1);
    cudaFree(dy2);
    cudaFree(dr1);
    cudaFree(dr2);
    cudaFree(ticket);
    free(hx);
    free(hw);
    free(hr);
    free(y1);
    free(y2);
    free(x1);
    free(x2);
    return bad;
}

/* postnorm=prologue: mc_gemv_pro on a consumer matrix (rows x cols of type t, a norm, GLU none or
 * GELU) against the two launches it replaces (mc_op_rmsnorm_add of po onto a copy of x, then
 * mc_gemv / mc_gemv_glu of that copy): y and x_new (stored by the first block) must be the bits of
 * the reference, and x unchanged. control 1: one post-norm weight changed in the prologue's launch
 * (y must then differ); control 2: the prologue's post-norm weights 4 bytes past a 16-byte boundary,
 * so that it reads them from global memory instead of its shared-memory copy (the same bits).
 * Returns the failures (-1: could not run; -2: mc_gemv_pro_serves says no). */
static int pro_run(FILE *out, uint32_t t, uint32_t R, uint32_t C, int glu, const char *key, const char *value,
                   int control, uint64_t seed) {
    const float eps = 1e-6f;
    const uint32_t ny = glu ? R / 2 : R;
    uint64_t s = seed;
    mc_matrix w;
    float *h = malloc((size_t)C * 4 * 4), *y1 = malloc((size_t)ny * 4), *y2 = malloc((size_t)ny * 4),
          *xa = malloc((size_t)C * 4), *xb = malloc((size_t)C * 4), *x0 = malloc((size_t)C * 4);
    float *dpo = NULL, *dx = NULL, *dxr = NULL, *dxn = NULL, *dpw = NULL, *dpw2 = NULL, *dnw = NULL, *dy1 = NULL,
          *dy2 = NULL;
    int bad = -1;
    const char *tn = memra_tensor_type_name(t);
    memset(&w, 0, sizeof w);
    mc_config cfg = mc_config_default;
    if (!h || !y1 || !y2 || !xa || !xb || !x0 || (key && mc_config_choice(&cfg, key, value) != NULL))
        goto done;
    if (pn_matrix(t, R, C, &s, &w) != cudaSuccess)
        goto done;
    if (!mc_gemv_pro_serves(&cfg, &w, glu)) {
        bad = -2;
        goto done;
    }
    float *hpo = h, *hx = h + C, *hpw = h + 2 * C, *hnw = h + 3 * C;
    for (uint32_t c = 0; c < C; c++) {
        hpo[c] = 3.0f * mck_sym(&s);
        hx[c] = 4.0f * mck_sym(&s);
        hpw[c] = 0.5f + mck_unit(&s);
        hnw[c] = 0.5f + mck_unit(&s);
    }
    if (cudaMalloc((void **)&dpo, (size_t)C * 4) || cudaMalloc((void **)&dx, (size_t)C * 4) ||
        cudaMalloc((void **)&dxr, (size_t)C * 4) || cudaMalloc((void **)&dxn, (size_t)C * 4) ||
        cudaMalloc((void **)&dpw, (size_t)C * 4) || cudaMalloc((void **)&dpw2, (size_t)(C + 1) * 4) ||
        cudaMalloc((void **)&dnw, (size_t)C * 4) || cudaMalloc((void **)&dy1, (size_t)ny * 4) ||
        cudaMalloc((void **)&dy2, (size_t)ny * 4))
        goto done;
    cudaMemcpy(dpo, hpo, (size_t)C * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dx, hx, (size_t)C * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dxr, hx, (size_t)C * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dpw, hpw, (size_t)C * 4, cudaMemcpyHostToDevice);
    if (control == 1)
        hpw[C / 3] *= 1.5f;
    const uint32_t shift = control == 2 ? 1u : 0u; /* dpw2 + 1: not 16-byte aligned */
    cudaMemcpy(dpw2 + shift, hpw, (size_t)C * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dnw, hnw, (size_t)C * 4, cudaMemcpyHostToDevice);
    cudaMemset(dxn, 0xff, (size_t)C * 4);
    cudaError_t e = mc_op_rmsnorm_add(dpo, dpw, C, eps, dxr, 0);
    if (e == cudaSuccess)
        e = glu ? mc_gemv_glu(&cfg, &w, dxr, dnw, eps, glu, dy1, 0) : mc_gemv(&cfg, &w, dxr, dnw, eps, NULL, NULL, dy1, 0);
    const mc_pro_args pro = {dpo, dx, dpw2 + shift, dxn, eps};
    if (e == cudaSuccess)
        e = mc_gemv_pro(&cfg, &w, &pro, dnw, eps, glu, dy2, 0);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    if (e == cudaSuccess && (e = cudaMemcpy(y1, dy1, (size_t)ny * 4, cudaMemcpyDeviceToHost)) == cudaSuccess &&
        (e = cudaMemcpy(y2, dy2, (size_t)ny * 4, cudaMemcpyDeviceToHost)) == cudaSuccess &&
        (e = cudaMemcpy(xa, dxr, (size_t)C * 4, cudaMemcpyDeviceToHost)) == cudaSuccess &&
        (e = cudaMemcpy(xb, dxn, (size_t)C * 4, cudaMemcpyDeviceToHost)) == cudaSuccess)
        e = cudaMemcpy(x0, dx, (size_t)C * 4, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        if (out)
            fprintf(out, "prologue %s %ux%u glu %d %s=%s: %s\n", tn, R, C, glu, key ? key : "-", value ? value : "-",
                    cudaGetErrorString(e));
        goto done;
    }
    bad = 0;
    if (memcmp(y1, y2, (size_t)ny * 4) != 0) {
        bad++;
        if (out && control != 1)
            fprintf(out, "prologue %s %ux%u glu %d %s=%s: y differs from the two launches'\n", tn, R, C, glu,
                    key ? key : "-", value ? value : "-");
    }
    if (control != 1 && memcmp(xa, xb, (size_t)C * 4) != 0) {
        bad++;
        if (out)
            fprintf(out, "prologue %s %ux%u: x_new differs from mc_op_rmsnorm_add's\n", tn, R, C);
    }
    if (memcmp(x0, hx, (size_t)C * 4) != 0) {
        bad++;
        if (out)
            fprintf(out, "prologue %s %ux%u: the input x changed\n", tn, R, C);
    }
done:
    pn_free(&w);
    cudaFree(dpo);
    cudaFree(dx);
    cudaFree(dxr);
    cudaFree(dxn);
    cudaFree(dpw);
    cudaFree(dpw2);
    cudaFree(dnw);
    cudaFree(dy1);
    cudaFree(dy2);
    free(h);
    free(y1);
    free(y2);
    free(xa);
    free(xb);
    free(x0);
    return bad;
}

/* The prologue's cases: the consumer kinds that take it (Q4_0..Q5_1 on the narrow forms, Q8_0 on
 * the integer kernel in both block sizes), gemma3-270m's q/k/v (1280 and 1536 rows), gate/up (4096,
 * GELU), v (256) and a head-like shape, gemma3-tiny's, odd column counts of 32; a kind that does
 * not serve must be refused; two negative controls. */
static int pro_all(FILE *out, int *checked) {
    static const uint32_t shapes[][2] = {{1280, 640}, {1536, 640}, {256, 640}, {4096, 640},
                                         {20000, 640}, {384, 128}, {512, 96}, {640, 1024}};
    static const struct {
        uint32_t type;
        const char *key, *value;
    } kinds[] = {
        {MEMRA_QTYPE_Q5_0, "qblock", "16r"},  {MEMRA_QTYPE_Q5_0, "qblock", "16x"}, {MEMRA_QTYPE_Q5_0, "qblock", "16xr"},
        {MEMRA_QTYPE_Q4_0, "qblock", "16r"},  {MEMRA_QTYPE_Q4_1, "qblock", "16r"}, {MEMRA_QTYPE_Q5_1, "qblock", "16r"},
        {MEMRA_TYPE_Q8_0, "q8", "auto"},      {MEMRA_TYPE_Q8_0, "q8", "int-8w"},
    };
    int bad = 0;
    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int g = 0; g < 2; g++) {
                const int glu = g ? MC_GLU_GELU : MC_GLU_NONE;
                const int b = pro_run(out, kinds[ki].type, shapes[si][0], shapes[si][1], glu, kinds[ki].key,
                                      kinds[ki].value, 0, 5000 + 100 * ki + 10 * si + g);
                if (b == -2) { /* at KS 1 the 16r form is the 16-warp kernel: no prologue there */
                    continue;
                }
                if (b < 0)
                    return -1;
                bad += b;
                (*checked)++;
            }
    /* refused where the kernel lacks the prologue: a K-quant, more than MC_PRO_COLS columns, qdot=float */
    const int r1 = pro_run(NULL, MEMRA_QTYPE_Q4_K, 640, 1024, MC_GLU_NONE, NULL, NULL, 0, 9001);
    const int r2 = pro_run(NULL, MEMRA_TYPE_Q8_0, 640, 2048, MC_GLU_NONE, NULL, NULL, 0, 9002);
    const int r3 = pro_run(NULL, MEMRA_QTYPE_Q5_0, 1280, 640, MC_GLU_NONE, "qdot", "float", 0, 9003);
    if (r1 != -2 || r2 != -2 || r3 != -2) {
        bad++;
        if (out)
            fprintf(out, "prologue: a kind without it was not refused (%d %d %d)\n", r1, r2, r3);
    }
    (*checked)++;
    /* the post-norm weights misaligned: read from global memory, the same bits */
    static const uint32_t mis[] = {MEMRA_QTYPE_Q5_0, MEMRA_TYPE_Q8_0};
    for (size_t i = 0; i < sizeof mis / sizeof mis[0]; i++) {
        const int b = pro_run(out, mis[i], 1280, 640, MC_GLU_NONE, NULL, NULL, 2, 9200 + i);
        if (b < 0)
            return -1;
        bad += b;
        (*checked)++;
    }
    /* negative controls: a changed post-norm weight must change y */
    static const uint32_t ctl[] = {MEMRA_QTYPE_Q5_0, MEMRA_TYPE_Q8_0};
    for (size_t i = 0; i < sizeof ctl / sizeof ctl[0]; i++) {
        const int b = pro_run(NULL, ctl[i], 1280, 640, MC_GLU_NONE, NULL, NULL, 1, 9100 + i);
        if (b < 0)
            return -1;
        if (b == 0) {
            bad++;
            if (out)
                fprintf(out, "prologue %s: negative control not caught (a changed post-norm weight gave the same y)\n",
                        memra_tensor_type_name(ctl[i]));
        }
        (*checked)++;
    }
    return bad;
}

int memra_cuda_check_post_norm(FILE *out, int *n_checked) {
    /* (rows, cols): gemma3-tiny's wo and down, gemma3-270m's, KS 2 and KS 1, odd rows */
    static const uint32_t shapes[][2] = {{64, 128},   {64, 192},   {640, 1024}, {640, 2048},
                                         {3000, 512}, {5000, 256}, {37, 256},   {300, 768}};
    static const struct {
        uint32_t type;
        const char *key, *v0, *v1;
    } kinds[] = {
        {MEMRA_TYPE_F32, "gemv", "auto", "rowgroup"},  {MEMRA_TYPE_F16, "gemv", "auto", "rowgroup"},
        {MEMRA_TYPE_BF16, "gemv", "auto", "rowgroup"}, {MEMRA_TYPE_BF16, "gemv", "mma", "mma2"},
        {MEMRA_TYPE_Q8_0, "q8", "auto", "float"},
        {MEMRA_QTYPE_Q4_0, "qdot", "auto", "float"},   {MEMRA_QTYPE_Q4_1, "qdot", "auto", "float"},
        {MEMRA_QTYPE_Q5_0, "qdot", "auto", "float"},   {MEMRA_QTYPE_Q5_1, "qdot", "auto", "float"},
        {MEMRA_QTYPE_Q4_K, "qdot", "auto", "float"},   {MEMRA_QTYPE_Q5_K, "qdot", "auto", "float"},
        {MEMRA_QTYPE_Q6_K, "qdot", "auto", "float"},
        /* qblock: the GEMV and norm in one block size, the fused launch in the other (the same bits) */
        {MEMRA_QTYPE_Q4_0, "qblock", "16", "4"},       {MEMRA_QTYPE_Q4_1, "qblock", "16", "4"},
        {MEMRA_QTYPE_Q5_0, "qblock", "16", "4"},       {MEMRA_QTYPE_Q5_1, "qblock", "16", "4"},
        {MEMRA_QTYPE_Q4_K, "qblock", "16", "4"},       {MEMRA_QTYPE_Q5_K, "qblock", "16", "4"},
        {MEMRA_QTYPE_Q6_K, "qblock", "16", "4"},
        /* the 16-warp kernels' narrow forms (Q4_0..Q5_1, at most 2048 columns) against the 16-warp ones */
        {MEMRA_QTYPE_Q4_0, "qblock", "16", "16xr"},    {MEMRA_QTYPE_Q4_1, "qblock", "16", "16x"},
        {MEMRA_QTYPE_Q5_0, "qblock", "16", "16r"},     {MEMRA_QTYPE_Q5_1, "qblock", "16", "16xr"},
        {MEMRA_QTYPE_Q4_K, "qblock", "16", "16r"},     {MEMRA_QTYPE_Q6_K, "qblock", "16", "16xr"},
    };
    int bad = 0, checked = 0;
    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const uint32_t t = kinds[ki].type, cols = shapes[si][1];
            const uint32_t blk = t == MEMRA_QTYPE_Q4_K || t == MEMRA_QTYPE_Q5_K || t == MEMRA_QTYPE_Q6_K ? 256
                                 : t == MEMRA_TYPE_F32 || t == MEMRA_TYPE_F16 || t == MEMRA_TYPE_BF16    ? 1
                                                                                                         : 32;
            if (cols % blk)
                continue;
            const int cross = !strcmp(kinds[ki].key, "qblock"); /* the fused launch in the other value */
            for (int v = 0; v < 2; v++) {
                const pn_case k = {t, shapes[si][0], cols, kinds[ki].key, v ? kinds[ki].v1 : kinds[ki].v0,
                                   cross ? (v ? kinds[ki].v0 : kinds[ki].v1) : NULL};
                const int b = pn_run(out, &k, 0, 1000 * ki + 10 * si + v);
                if (b < 0)
                    return -1;
                bad += b;
                checked++;
            }
        }
    /* negative controls: a changed post-norm weight must be seen, on each family */
    static const uint32_t ctl[] = {MEMRA_TYPE_F32, MEMRA_TYPE_Q8_0, MEMRA_QTYPE_Q5_0, MEMRA_QTYPE_Q4_K};
    for (size_t i = 0; i < sizeof ctl / sizeof ctl[0]; i++) {
        const pn_case k = {ctl[i], 640, 1024, NULL, NULL, NULL};
        const int b = pn_run(NULL, &k, 1, 77 + i);
        if (b < 0)
            return -1;
        if (b == 0) {
            if (out)
                fprintf(out, "%s: negative control not caught (a changed post-norm weight gave the same x)\n",
                        memra_tensor_type_name(ctl[i]));
            bad++;
        }
        checked++;
    }
    /* the cross-value comparison's negative control: qdot=auto against float in the fused launch
     * must differ */
    static const uint32_t xctl[] = {MEMRA_QTYPE_Q4_1, MEMRA_QTYPE_Q4_K};
    for (size_t i = 0; i < sizeof xctl / sizeof xctl[0]; i++) {
        const pn_case k = {xctl[i], 640, 1024, "qdot", "auto", "float"};
        const int b = pn_run(NULL, &k, 0, 91 + i);
        if (b < 0)
            return -1;
        if (b == 0) {
            if (out)
                fprintf(out, "%s: negative control not caught (qdot=float in the fused launch gave auto's bits)\n",
                        memra_tensor_type_name(xctl[i]));
            bad++;
        }
        checked++;
    }
    const int pb = pro_all(out, &checked);
    if (pb < 0)
        return -1;
    bad += pb;
    if (n_checked)
        *n_checked = checked;
    return bad;
}

#ifndef MEMRA_CHECK_NO_MAIN
MEMRA_CHECK_MAIN("check_post_norm", memra_cuda_check_post_norm, "cases", "failures")
#endif
