/* check_mma_gemv.c: gemv=mma (backends/cuda/gemv_mma.cu, issue 28): the prefill chunk's BF16 GEMV
 * (mc_gemv_chunk) bit for bit against the decode GEMV (mc_gemv, mc_gemv_glu) run on each row of x
 * alone, for M = 1, 7, 8, 9, 64, 200 and 512 rows of x, on shapes that take every column split (KS 8,
 * 4, 2, 1), rows that are no multiple of 16 (a partial tile), columns that are no multiple of 32
 * (a zero-filled last k-block), with the RMSNorm of x, a bias, a residual, and the SiLU and GELU
 * GLUs of interleaved gate/up rows. Columns that are no multiple of 8 are not served: there
 * gemv=mma must give gemv=auto's bits (the row-group kernels), and does not reach the MMA.
 *
 * Against a float64 reference (x' = bf16(x * norm_w) rounded to nearest even once, as the kernels
 * define it; the dots, 1/rms, bias, residual and GLU in double) on three rows of x per case:
 * |y - ref| <= 2^-14 mass + 2^-20 |ref|, mass = sum_c |W[r][c] x'[c]| * scale + |bias| + |residual|
 * (for a GLU, the first-order mass of act(g) * u): the products are exact in fp32, and a chain of at
 * most 256 MMAs, each rounding its sum once (2^-24 relative), stays inside it; a wrong fragment
 * mapping or a lost k-block does not.
 *
 * gemv_mma.cu's other chunk tiles (mc_gemv_chunk_mma_tile 1 to 3, which the bench times against
 * gemv=mma's) and gemv_wgmma.cu's kernel (tiles 4 to 6: its rows of x a block by the grid's size,
 * 128, 64; on an sm_90 device, gemv=mma's one plane; the summary says when it was not run)
 * likewise against decode on every case.
 *
 * Negative controls: one weight changed by one bf16 ulp in the chunk's copy of the matrix must give
 * other bits in its row (the comparison sees a one-ulp difference), and gemv=mma's decode must
 * differ from gemv=auto's somewhere (its own bits: this compares two arithmetics, not one twice).
 *
 * gemv=mma2 (x' as two bf16 planes) the same way, its reference on x' = high + low plane, and its
 * decode against gemv=mma's (its own bits).
 *
 * q8=mma (Q8_0 on the same chain: the int8 weights as bf16, a block's two MMAs from +0, then one fmaf
 * by its scale) the same way on Q8_0 matrices (columns a multiple of 32), its reference on weights
 * q * scale; its chunk is gemv_wgmma.cu's alone (tiles 4 to 6; tile 0 then runs it too), its decode
 * against q8=auto's integer kernel (its own bits), and one weight one quantum off must show.
 *
 * qdot=mma (Q4_K and Q5_K on the same chain: the 4-bit or 5-bit quants as bf16, a sub-block's two
 * MMAs from +0, then fmaf by d * sc and by -(dmin * m) times the sub-block's sum of x'; Q6_K: a
 * sub-block of 16 one MMA of q - 32 from +0, then fmaf by d * sc) the same way on Q4_K, Q5_K and
 * Q6_K matrices in the upload layout (random quants, high bits, scales, mins, d and dmin), its
 * reference on the exact weights (Q4_K, Q5_K: the terms
 * d * sc * q and -dmin * m, the bound on the mass of both); its chunk is gemv_wgmma.cu's alone,
 * its decode against qdot=auto's integer kernel (its own bits), and one quant one step off must show.
 *
 * A plain program for the device machine (no Criterion there); exit 77 without a device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "cuda_checks.h"
#include "cuda_kernels.h"
#include "kquant_layout.h"
#include "memra/numeric.h"
#include "memra/tensor_type.h"

/* gemv_mma.cu: the chunk GEMV on tile 0 (gemv=mma's), 1, 2 or 3 (the mma.sync tiles the bench times),
 * or 4 (gemv_wgmma.cu's kernel, one plane: cudaErrorNotSupported on a device other than sm_90) */
static int mg_wgmma_skipped; /* cases where tiles 4 to 6 were not this device's */
cudaError_t mc_gemv_chunk_mma_tile(const mc_config *c, const mc_matrix *w, const float *x, uint32_t ldx,
                                   const float *norm_w, float eps, const float *bias, const float *residual,
                                   uint32_t ldr, float *y, uint32_t ldy, int glu, uint32_t M, void *scratch,
                                   cudaStream_t st, int tile);

typedef struct mg_mat {
    uint32_t rows, cols, stride;
    uint16_t *h; /* rows x stride bf16 (padding zero); q8: the f16 block scales, rows x cols / 32 */
    mc_matrix d;
    int q8;     /* a Q8_0 matrix (q8=mma) */
    int8_t *h8; /* q8: rows x stride int8 */
    int kq;     /* a Q4_K matrix in kquant_layout.h's layout (qdot=mma): h8 its data, ha its aux bytes */
    uint8_t *ha;
    double *wt, *wu; /* kq: every weight's two terms (Q6_K: the weight, wu unused), made once for the
                      * float64 reference (mg_kq_cache): decoding them for each case took minutes */
} mg_mat;

/* A Q4_K (kq 1) or Q5_K (kq 2) matrix (columns a multiple of 256) in the upload layout: random quant
 * bytes (and fifth bits), scale and min bytes, d and dmin of either sign. */
static int mg_upload_kqt(mg_mat *m, uint64_t *s, int kq) {
    m->kq = kq;
    uint64_t dr = 0, ar = 0;
    mc_kq_layout(kq == 3 ? MEMRA_TYPE_Q6_K : kq == 2 ? MEMRA_TYPE_Q5_K : MEMRA_TYPE_Q4_K, m->cols, &dr, &ar);
    m->stride = (uint32_t)dr; /* data bytes a row; aux: ar */
    const size_t nd = (size_t)m->rows * m->stride, na = (size_t)m->rows * ar;
    m->h8 = malloc(nd);
    m->ha = malloc(na);
    if (!m->h8 || !m->ha)
        return -1;
    for (size_t i = 0; i < nd; i++)
        ((uint8_t *)m->h8)[i] = (uint8_t)(mck_next(s) % 256);
    const uint32_t nb = m->cols / 256;
    memset(m->ha, 0, na);
    for (uint32_t r = 0; r < m->rows; r++) {
        uint8_t *row = m->ha + (size_t)r * ar;
        for (uint32_t b = 0; b < nb; b++) {
            if (kq == 3) { /* 16 int8 scales a block, then d a block (f16) */
                for (int k = 0; k < 16; k++)
                    row[16 * b + k] = (uint8_t)(mck_next(s) % 256);
                const uint16_t d =
                    memra_f32_to_f16((mck_unit(s) < 0.5f ? -1.0f : 1.0f) * (0.0001f + 0.0004f * mck_unit(s)));
                row[16 * nb + 2 * b] = (uint8_t)d, row[16 * nb + 2 * b + 1] = (uint8_t)(d >> 8);
                continue;
            }
            uint8_t *a = row + 16 * b;
            const uint16_t d = memra_f32_to_f16((mck_unit(s) < 0.5f ? -1.0f : 1.0f) * (0.0005f + 0.002f * mck_unit(s)));
            const uint16_t dm = memra_f32_to_f16((mck_unit(s) < 0.5f ? -1.0f : 1.0f) * 0.004f * mck_unit(s));
            a[0] = (uint8_t)d, a[1] = (uint8_t)(d >> 8), a[2] = (uint8_t)dm, a[3] = (uint8_t)(dm >> 8);
            for (int k = 4; k < 16; k++)
                a[k] = (uint8_t)(mck_next(s) % 256);
        }
    }
    memset(&m->d, 0, sizeof m->d);
    m->d.type = kq == 3 ? MEMRA_TYPE_Q6_K : kq == 2 ? MEMRA_TYPE_Q5_K : MEMRA_TYPE_Q4_K;
    m->d.rows = m->rows;
    m->d.cols = m->cols;
    m->d.stride = m->stride;
    m->d.aux_stride = (uint32_t)ar;
    if (cudaMalloc(&m->d.data, nd) != cudaSuccess || cudaMemcpy(m->d.data, m->h8, nd, cudaMemcpyHostToDevice) ||
        cudaMalloc(&m->d.aux, na) != cudaSuccess || cudaMemcpy(m->d.aux, m->ha, na, cudaMemcpyHostToDevice))
        return -1;
    return 0;
}
static int mg_upload_kq(mg_mat *m, uint64_t *s) { return mg_upload_kqt(m, s, 1); }
static int mg_upload_k5(mg_mat *m, uint64_t *s) { return mg_upload_kqt(m, s, 2); }
static int mg_upload_k6(mg_mat *m, uint64_t *s) { return mg_upload_kqt(m, s, 3); }
/* The aux bytes of a row (kquant_layout.h's). */
static uint32_t mg_aux_row(const mg_mat *m) { return m->d.aux_stride; }
/* A Q4_K or Q5_K weight's two terms, exactly: d * sc * q (*t) and -dmin * m (*u). */
static void mg_kq_terms(const mg_mat *m, uint32_t r, uint32_t c, double *t, double *u) {
    if (m->wt) {
        *t = m->wt[(size_t)r * m->cols + c];
        *u = m->wu[(size_t)r * m->cols + c];
        return;
    }
    const uint8_t *data = (const uint8_t *)m->h8 + (size_t)r * m->stride, *aux = m->ha + (size_t)r * mg_aux_row(m);
    const uint32_t b = c / 256, e = c % 256, j = e / 32, l = e % 32;
    const uint8_t byte = data[128 * b + 32 * (j / 2) + l];
    uint32_t q = j & 1 ? byte >> 4 : byte & 15u;
    /* Q5_K's fifth bit (kquant_layout.h): unit 2 (j / 2) + l / 16, its byte l % 4, bit l % 16 / 4 (+ 4) */
    if (m->kq == 2) {
        const uint8_t f = data[(size_t)128 * (m->cols / 256) + 32 * b + 4 * (2 * (j / 2) + l / 16) + l % 4];
        q += (f >> ((j & 1 ? 4 : 0) + l % 16 / 4)) & 1u ? 16u : 0u;
    }
    uint8_t sc, mn;
    memra_quant_scale_min_k4((int)j, aux + 16 * b + 4, &sc, &mn);
    const double d = memra_f16_to_f32(mc_kq_u16(aux + 16 * b)), dmin = memra_f16_to_f32(mc_kq_u16(aux + 16 * b + 2));
    *t = d * sc * q;
    *u = -dmin * mn;
}

/* A Q8_0 matrix in the upload layout (check_util.h's draw, the host copy kept for the reference). */
static int mg_upload_q8(mg_mat *m, uint64_t *s) {
    m->q8 = 1;
    m->stride = (m->cols + 15) / 16 * 16;
    const size_t n = (size_t)m->rows * m->stride, ns = (size_t)m->rows * (m->cols / 32);
    m->h8 = calloc(n, 1);
    m->h = malloc(ns * 2);
    if (!m->h8 || !m->h)
        return -1;
    for (uint32_t r = 0; r < m->rows; r++)
        for (uint32_t c = 0; c < m->cols; c++)
            m->h8[(size_t)r * m->stride + c] = (int8_t)((int)(mck_next(s) % 256) - 128);
    for (size_t i = 0; i < ns; i++)
        m->h[i] = memra_f32_to_f16((mck_unit(s) < 0.5f ? -1.0f : 1.0f) * (0.002f + 0.02f * mck_unit(s)));
    memset(&m->d, 0, sizeof m->d);
    m->d.type = MEMRA_TYPE_Q8_0;
    m->d.rows = m->rows;
    m->d.cols = m->cols;
    m->d.stride = m->stride;
    if (cudaMalloc(&m->d.data, n) != cudaSuccess || cudaMemcpy(m->d.data, m->h8, n, cudaMemcpyHostToDevice) ||
        cudaMalloc((void **)&m->d.scales, ns * 2) != cudaSuccess ||
        cudaMemcpy(m->d.scales, m->h, ns * 2, cudaMemcpyHostToDevice))
        return -1;
    return 0;
}
/* Weight (r, c) as the kernels read it. */
static double mg_w(const mg_mat *m, uint32_t r, uint32_t c) {
    if (m->kq == 3 && m->wt)
        return m->wt[(size_t)r * m->cols + c];
    if (m->kq == 3) /* Q6_K: d * sc * (q - 32), each product exact */
        return mc_kq_elem(MEMRA_TYPE_Q6_K, (const uint8_t *)m->h8 + (size_t)r * m->stride,
                          m->ha + (size_t)r * mg_aux_row(m), m->cols / 256, c);
    if (m->kq) {
        double t, u;
        mg_kq_terms(m, r, c, &t, &u);
        return t + u;
    }
    if (m->q8)
        return (double)m->h8[(size_t)r * m->stride + c] * memra_f16_to_f32(m->h[(size_t)r * (m->cols / 32) + c / 32]);
    return memra_bf16_to_f32(m->h[(size_t)r * m->stride + c]);
}
/* kq: the weights' terms decoded once (mg_kq_terms, mg_w read them from then on). -1: no memory. */
static int mg_kq_cache(mg_mat *m) {
    const size_t n = (size_t)m->rows * m->cols;
    double *t = malloc(n * sizeof *t), *u = m->kq == 3 ? NULL : malloc(n * sizeof *u);
    if (!t || (m->kq != 3 && !u)) {
        free(t);
        free(u);
        return -1;
    }
    for (uint32_t r = 0; r < m->rows; r++)
        for (uint32_t c = 0; c < m->cols; c++) {
            const size_t i = (size_t)r * m->cols + c;
            if (m->kq == 3)
                t[i] = mg_w(m, r, c);
            else
                mg_kq_terms(m, r, c, &t[i], &u[i]);
        }
    m->wt = t;
    m->wu = u;
    return 0;
}
/* The arm key a variant sets: q8 for "q8mma" (q8=mma), gemv otherwise. */
static void mg_choose(mc_config *cfg, const char *var) {
    if (strcmp(var, "q8mma") == 0)
        mc_config_choice(cfg, "q8", "mma");
    else if (strcmp(var, "kqmma") == 0)
        mc_config_choice(cfg, "qdot", "mma");
    else if (strcmp(var, "kqauto") == 0)
        mc_config_choice(cfg, "qdot", "auto");
    else
        mc_config_choice(cfg, "gemv", var);
}

static int mg_upload(mg_mat *m, uint64_t *s) {
    m->stride = (m->cols + 7) / 8 * 8;
    const size_t n = (size_t)m->rows * m->stride;
    m->h = calloc(n, 2);
    if (!m->h)
        return -1;
    for (uint32_t r = 0; r < m->rows; r++)
        for (uint32_t c = 0; c < m->cols; c++) /* a few large weights among small ones */
            m->h[(size_t)r * m->stride + c] = memra_f32_to_bf16((mck_unit(s) < 0.02f ? 0.5f : 0.05f) * mck_sym(s));
    memset(&m->d, 0, sizeof m->d);
    m->d.type = MEMRA_TYPE_BF16;
    m->d.rows = m->rows;
    m->d.cols = m->cols;
    m->d.stride = m->stride;
    if (cudaMalloc(&m->d.data, n * 2) != cudaSuccess || cudaMemcpy(m->d.data, m->h, n * 2, cudaMemcpyHostToDevice))
        return -1;
    return 0;
}
static void mg_free(mg_mat *m) {
    cudaFree(m->d.data);
    cudaFree(m->d.scales);
    cudaFree(m->d.aux);
    free(m->ha);
    free(m->wt);
    free(m->wu);
    free(m->h8);
    free(m->h);
    memset(m, 0, sizeof *m);
}

typedef struct mg_mode {
    const char *name;
    int norm, bias, res, glu;
} mg_mode;

static double mg_act(int glu, double g) {
    if (glu == MC_GLU_GELU)
        return 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
    return g / (1.0 + exp(-g));
}

/* One (matrix, mode, M) case: returns failures (-1: could not run). perturb: the chunk runs on a
 * copy of the matrix with one weight changed by one ulp (the result must then differ). */
static int mg_case(FILE *out, const char *var, const mg_mat *m, const mg_mode *md, uint32_t M, uint64_t seed,
                   int perturb) {
    const uint32_t R = m->rows, C = m->cols, OUT = md->glu ? R / 2 : R;
    const float eps = 1e-5f;
    uint64_t s = seed;
    int bad = -1;
    float *hx = malloc((size_t)M * C * 4), *hn = malloc((size_t)C * 4), *hb = malloc((size_t)R * 4);
    float *hr = malloc((size_t)M * R * 4), *yd = malloc((size_t)M * OUT * 4), *yc = malloc((size_t)M * OUT * 4);
    double *xbs = malloc((size_t)C * sizeof *xbs);
    float *dx = NULL, *dn = NULL, *db = NULL, *dr = NULL, *dyd = NULL, *dyc = NULL;
    void *scratch = NULL, *wcopy = NULL;
    mc_config cfg = mc_config_default;
    mg_choose(&cfg, var);
    const int two = strcmp(var, "mma2") == 0;
    if (!hx || !hn || !hb || !hr || !yd || !yc || !xbs)
        goto done;
    for (size_t i = 0; i < (size_t)M * C; i++)
        hx[i] = 2.0f * mck_sym(&s);
    for (uint32_t c = 0; c < C; c++)
        hn[c] = 0.5f + mck_unit(&s);
    for (uint32_t r = 0; r < R; r++)
        hb[r] = mck_sym(&s);
    for (size_t i = 0; i < (size_t)M * R; i++)
        hr[i] = 4.0f * mck_sym(&s);
    const uint64_t sb = mc_gemv_chunk_scratch_bytes(C, M);
    if (cudaMalloc((void **)&dx, (size_t)M * C * 4) || cudaMalloc((void **)&dn, (size_t)C * 4) ||
        cudaMalloc((void **)&db, (size_t)R * 4) || cudaMalloc((void **)&dr, (size_t)M * R * 4) ||
        cudaMalloc((void **)&dyd, (size_t)M * OUT * 4) || cudaMalloc((void **)&dyc, (size_t)M * OUT * 4) ||
        cudaMalloc(&scratch, sb))
        goto done;
    if (cudaMemcpy(dx, hx, (size_t)M * C * 4, cudaMemcpyHostToDevice) ||
        cudaMemcpy(dn, hn, (size_t)C * 4, cudaMemcpyHostToDevice) ||
        cudaMemcpy(db, hb, (size_t)R * 4, cudaMemcpyHostToDevice) ||
        cudaMemcpy(dr, hr, (size_t)M * R * 4, cudaMemcpyHostToDevice) || cudaMemset(dyd, 0xff, (size_t)M * OUT * 4) ||
        cudaMemset(dyc, 0xfe, (size_t)M * OUT * 4))
        goto done;
    const float *nw = md->norm ? dn : NULL, *bias = md->bias ? db : NULL;
    cudaError_t e = cudaSuccess;
    for (uint32_t t = 0; t < M && e == cudaSuccess; t++) {
        const float *xr = dx + (size_t)t * C;
        e = md->glu ? mc_gemv_glu(&cfg, &m->d, xr, nw, eps, md->glu, dyd + (size_t)t * OUT, 0)
                    : mc_gemv(&cfg, &m->d, xr, nw, eps, bias, md->res ? dr + (size_t)t * R : NULL,
                              dyd + (size_t)t * OUT, 0);
    }
    mc_matrix wc = m->d;
    const size_t r_p = R / 2, c_p = C - 1 - C / 3;
    if (e == cudaSuccess && perturb) {
        const size_t n = (size_t)R * m->stride * (m->q8 || m->kq ? 1 : 2);
        e = cudaMalloc(&wcopy, n);
        if (e == cudaSuccess)
            e = cudaMemcpy(wcopy, m->d.data, n, cudaMemcpyDeviceToDevice);
        if (m->kq) { /* the low nibble of a quant byte of row r_p, one step, at the first column from c_p
                      * whose change moves a weight (a sub-block whose scale is 0 ignores its quants:
                      * H200, the twenty-third session, Q5_K 38 x 256 and 40000 x 256 at c_p) */
            const uint32_t type = m->kq == 3 ? MEMRA_TYPE_Q6_K : m->kq == 2 ? MEMRA_TYPE_Q5_K : MEMRA_TYPE_Q4_K;
            uint8_t *row = malloc(m->stride);
            const uint8_t *arow = m->ha + r_p * mg_aux_row(m);
            size_t at = 0;
            uint8_t v = 0;
            int moved = 0;
            for (size_t c = c_p; row && !moved && c < c_p + 256 && c < C; c++) {
                const uint32_t b = (uint32_t)(c / 256), l = (uint32_t)(c % 32), j = (uint32_t)(c % 256 / 32);
                at = r_p * m->stride + 128 * b + 32 * (j / 2) + l;
                const uint8_t q = ((const uint8_t *)m->h8)[at];
                v = (uint8_t)((q & 0xF0u) | ((q + 1u) & 0x0Fu));
                memcpy(row, (const uint8_t *)m->h8 + r_p * m->stride, m->stride);
                row[at - r_p * m->stride] = v;
                for (uint32_t k = 0; k < C && !moved; k++)
                    moved = mc_kq_elem(type, row, arow, C / 256, k) !=
                            mc_kq_elem(type, (const uint8_t *)m->h8 + r_p * m->stride, arow, C / 256, k);
            }
            free(row);
            if (e == cudaSuccess && !moved)
                e = cudaErrorInvalidValue; /* (no quant of the row moves a weight: the draw is wrong) */
            if (e == cudaSuccess)
                e = cudaMemcpy((uint8_t *)wcopy + at, &v, 1, cudaMemcpyHostToDevice);
        } else if (m->q8) { /* one quantum */
            const int8_t q = m->h8[r_p * m->stride + c_p], v = (int8_t)(q == 127 ? 126 : q + 1);
            if (e == cudaSuccess)
                e = cudaMemcpy((int8_t *)wcopy + r_p * m->stride + c_p, &v, 1, cudaMemcpyHostToDevice);
        } else {
            uint16_t v = (uint16_t)(m->h[r_p * m->stride + c_p] + 1); /* one ulp */
            if (e == cudaSuccess)
                e = cudaMemcpy((uint16_t *)wcopy + r_p * m->stride + c_p, &v, 2, cudaMemcpyHostToDevice);
        }
        wc.data = wcopy;
    }
    if (e == cudaSuccess)
        e = mc_gemv_chunk(&cfg, &wc, dx, C, nw, eps, md->glu ? NULL : bias, md->glu || !md->res ? NULL : dr, R, dyc,
                          OUT, md->glu, M, scratch, 0);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    if (e == cudaSuccess)
        e = cudaMemcpy(yd, dyd, (size_t)M * OUT * 4, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(yc, dyc, (size_t)M * OUT * 4, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        if (out)
            fprintf(out, "%s %ux%u %s M=%u: %s\n", var, R, C, md->name, M, cudaGetErrorString(e));
        goto done;
    }
    bad = 0;
    if (perturb) { /* the changed weight's output (row r_p, or its GLU pair) must differ for some row of x */
        const size_t o = md->glu ? r_p / 2 : r_p;
        int differs = 0;
        for (uint32_t t = 0; t < M; t++)
            differs |= memcmp(&yd[(size_t)t * OUT + o], &yc[(size_t)t * OUT + o], 4) != 0;
        bad = differs ? 0 : 1;
        goto done;
    }
    for (uint32_t t = 0; t < M; t++)
        for (uint32_t o = 0; o < OUT; o++) {
            const size_t i = (size_t)t * OUT + o;
            if (memcmp(&yd[i], &yc[i], 4) != 0) {
                if (out && bad < 4)
                    fprintf(out, "%s %ux%u %s M=%u: x row %u output %u: chunk %.9g, decode %.9g\n", var, R, C, md->name,
                            M, t, o, yc[i], yd[i]);
                bad++;
            }
        }
    /* float64 reference on three rows of x */
    const uint32_t probe[3] = {0, M / 2, M - 1};
    for (int k = 0; k < 3; k++) {
        const uint32_t t = probe[k];
        if (k > 0 && t == probe[k - 1])
            continue;
        const float *x = hx + (size_t)t * C;
        double ss = 0.0;
        for (uint32_t c = 0; c < C; c++)
            ss += (double)x[c] * x[c];
        const double scale = md->norm ? 1.0 / sqrt(ss / C + eps) : 1.0;
        for (uint32_t c = 0; c < C; c++) { /* x' as the kernels read it (mma2: + the low plane) */
            const float xp = md->norm ? x[c] * hn[c] : x[c];
            const float xh = memra_bf16_to_f32(memra_f32_to_bf16(xp));
            xbs[c] = (double)xh + (two ? memra_bf16_to_f32(memra_f32_to_bf16(xp - xh)) : 0.0);
        }
        double dot[2], mass[2];
        for (uint32_t o = 0; o < OUT; o++) {
            for (int h = 0; h < (md->glu ? 2 : 1); h++) {
                const uint32_t r = md->glu ? 2 * o + h : o;
                double a = 0.0, am = 0.0;
                for (uint32_t c = 0; c < C; c++) {
                    const double xb = xbs[c];
                    const double wv = mg_w(m, r, c);
                    a += wv * xb;
                    if (m->kq == 1 || m->kq == 2) { /* qdot=mma sums each term apart: the mass of both */
                        double tt, uu;
                        mg_kq_terms(m, r, c, &tt, &uu);
                        am += fabs(tt * xb) + fabs(uu * xb);
                    } else
                        am += fabs(wv * xb);
                }
                dot[h] = a * scale;
                mass[h] = am * scale;
            }
            double ref, ms;
            if (md->glu) {
                const double ag = mg_act(md->glu, dot[0]);
                ref = ag * dot[1];
                ms = fabs(ag) * mass[1] + (fabs(dot[1]) + 1.0) * mass[0] * 1.2;
            } else {
                ref = dot[0];
                ms = mass[0];
                if (md->bias) {
                    ref += hb[o];
                    ms += fabs(hb[o]);
                }
                if (md->res) {
                    ref += hr[(size_t)t * R + o];
                    ms += fabs(hr[(size_t)t * R + o]);
                }
            }
            const double y = yc[(size_t)t * OUT + o], tol = ms / 16384.0 + fabs(ref) / 1048576.0;
            if (!(fabs(y - ref) <= tol)) {
                if (out && bad < 8)
                    fprintf(out, "%s %ux%u %s M=%u: x row %u output %u: %.9g, float64 %.9g (bound %.3g)\n", var, R, C,
                            md->name, M, t, o, y, ref, tol);
                bad++;
            }
        }
    }
    /* gemv_mma.cu's other chunk tiles (the ones memra_cuda_mma_chunk_bench times): decode's bits too */
    for (int tile = 1; tile <= 6; tile++) {
        if ((tile >= 4 && two) || (tile < 4 && (m->q8 || m->kq))) /* gemv_wgmma.cu takes one plane; q8=mma's and
                                                                       * qdot=mma's chunks are its alone */
            continue;
        e = cudaMemset(dyc, 0xfe, (size_t)M * OUT * 4);
        if (e == cudaSuccess)
            e = mc_gemv_chunk_mma_tile(&cfg, &m->d, dx, C, nw, eps, md->glu ? NULL : bias,
                                       md->glu || !md->res ? NULL : dr, R, dyc, OUT, md->glu, M, scratch, 0, tile);
        if (tile >= 4 && e == cudaErrorNotSupported) { /* gemv_wgmma.cu runs on sm_90 alone */
            (void)cudaGetLastError();
            mg_wgmma_skipped++;
            continue;
        }
        if (e == cudaSuccess)
            e = cudaDeviceSynchronize();
        if (e == cudaSuccess)
            e = cudaMemcpy(yc, dyc, (size_t)M * OUT * 4, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) {
            if (out)
                fprintf(out, "%s %ux%u %s M=%u tile %d: %s\n", var, R, C, md->name, M, tile, cudaGetErrorString(e));
            bad = -1;
            goto done;
        }
        for (size_t i = 0; i < (size_t)M * OUT; i++)
            if (memcmp(&yd[i], &yc[i], 4) != 0) {
                if (out && bad < 4)
                    fprintf(out, "%s %ux%u %s M=%u tile %d: x row %zu output %zu: chunk %.9g, decode %.9g\n", var, R, C,
                            md->name, M, tile, i / OUT, i % OUT, yc[i], yd[i]);
                bad++;
            }
    }
done:
    cudaFree(dx);
    cudaFree(dn);
    cudaFree(db);
    cudaFree(dr);
    cudaFree(dyd);
    cudaFree(dyc);
    cudaFree(scratch);
    cudaFree(wcopy);
    free(hx);
    free(hn);
    free(hb);
    free(hr);
    free(yd);
    free(yc);
    free(xbs);
    return bad;
}

/* gemv=mma against gemv=auto on one decode launch: equal (want_equal: a shape mma does not serve)
 * or different somewhere (a shape it serves). Failures, -1: could not run. */
static int mg_versus_auto(FILE *out, const char *var, const char *other, const mg_mat *m, int want_equal,
                          uint64_t seed) {
    const uint32_t R = m->rows, C = m->cols;
    uint64_t s = seed;
    float *hx = malloc((size_t)C * 4), *y1 = malloc((size_t)R * 4), *y2 = malloc((size_t)R * 4);
    float *dx = NULL, *dy1 = NULL, *dy2 = NULL;
    int bad = -1;
    mc_config a = mc_config_default, b = mc_config_default;
    mg_choose(&a, other);
    mg_choose(&b, var);
    if (!hx || !y1 || !y2 || cudaMalloc((void **)&dx, (size_t)C * 4) || cudaMalloc((void **)&dy1, (size_t)R * 4) ||
        cudaMalloc((void **)&dy2, (size_t)R * 4))
        goto done;
    for (uint32_t c = 0; c < C; c++)
        hx[c] = 2.0f * mck_sym(&s);
    if (cudaMemcpy(dx, hx, (size_t)C * 4, cudaMemcpyHostToDevice) ||
        mc_gemv(&a, &m->d, dx, NULL, 0.0f, NULL, NULL, dy1, 0) ||
        mc_gemv(&b, &m->d, dx, NULL, 0.0f, NULL, NULL, dy2, 0) || cudaDeviceSynchronize() ||
        cudaMemcpy(y1, dy1, (size_t)R * 4, cudaMemcpyDeviceToHost) ||
        cudaMemcpy(y2, dy2, (size_t)R * 4, cudaMemcpyDeviceToHost))
        goto done;
    const int equal = memcmp(y1, y2, (size_t)R * 4) == 0;
    bad = equal == want_equal ? 0 : 1;
    if (bad && out)
        fprintf(out, "%ux%u: gemv=%s %s gemv=%s's bits, expected %s\n", R, C, var, equal ? "gives" : "does not give",
                other, want_equal ? "the same (not served: auto's kernels)" : "its own");
done:
    cudaFree(dx);
    cudaFree(dy1);
    cudaFree(dy2);
    free(hx);
    free(y1);
    free(y2);
    return bad;
}

typedef struct mg_shape {
    uint32_t rows, cols;
} mg_shape;

/* A quantized variant (var: q8mma, kqmma: Q4_K or Q5_K by the upload) on each shape, matrices made by upload: every mode and M
 * against decode (mg_case), decode against the other key's kernel (its own bits), and the
 * negative control (one quantum off in the chunk's copy must show). Failures, -1: could not run. */
static int mg_quant(FILE *out, const char *var, const char *other, int (*upload)(mg_mat *, uint64_t *),
                    const mg_shape *shp, size_t n, uint64_t mseed, uint64_t cseed, uint64_t vseed, uint64_t pseed,
                    const mg_mode *modes, size_t n_modes, const uint32_t *Ms, size_t n_ms, int *checked) {
    int bad = 0;
    for (size_t si = 0; si < n; si++) {
        uint64_t s = mseed + si;
        mg_mat m = {shp[si].rows, shp[si].cols, 0, NULL, {0}, 0, NULL, 0, NULL, NULL, NULL};
        if (upload(&m, &s) != 0 || (m.kq && mg_kq_cache(&m) != 0)) {
            mg_free(&m);
            return -1;
        }
        const uint64_t big = (uint64_t)m.rows * m.cols;
        for (size_t mi = 0; mi < n_modes; mi++)
            for (size_t k = 0; k < n_ms; k++) {
                if (modes[mi].glu && m.rows % 2)
                    continue;
                if (Ms[k] >= 200 && big > ((uint64_t)4 << 20) && mi % 2)
                    continue;
                const int b = mg_case(out, var, &m, &modes[mi], Ms[k], cseed + 100 * si + 10 * mi + k, 0);
                if (b < 0) {
                    mg_free(&m);
                    return -1;
                }
                bad += b;
                (*checked)++;
            }
        const int v = mg_versus_auto(out, var, other, &m, 0, vseed + si);
        const int pc = v < 0 ? -1 : mg_case(NULL, var, &m, &modes[si % 4], 9, pseed + si, 1);
        mg_free(&m);
        if (v < 0 || pc < 0)
            return -1;
        if (pc && out)
            fprintf(out, "negative control (%s %ux%u): a weight one quantum off gave the same bits\n", var,
                    shp[si].rows, shp[si].cols);
        bad += v + pc;
        *checked += 2;
    }
    return bad;
}

int memra_cuda_check_mma_gemv(FILE *out, int *n_checked) {
    /* (rows, cols) and the KS mc_gemv_mma_ksplit gives them */
    static const struct {
        uint32_t rows, cols, ks;
    } shapes[] = {
        {256, 4096, 8}, {300, 1000, 8}, {6144, 1024, 4}, {16384, 512, 2}, {37, 264, 2}, {40000, 256, 1}, {64, 72, 1},
    };
    static const mg_mode modes[] = {
        {"plain", 0, 0, 0, 0},          {"norm+bias", 1, 1, 0, 0},
        {"residual", 0, 0, 1, 0},       {"norm+silu", 1, 0, 0, MC_GLU_SILU},
        {"gelu", 0, 0, 0, MC_GLU_GELU}, {"bias+residual", 0, 1, 1, 0},
    };
    static const uint32_t Ms[] = {1, 7, 8, 9, 64, 200, 512};
    static const char *const vars[] = {"mma", "mma2"};
    int bad = 0, checked = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const uint32_t ks = mc_gemv_mma_ksplit(shapes[si].rows, shapes[si].cols);
        if (ks != shapes[si].ks) {
            if (out)
                fprintf(out, "%ux%u: KS %u, the check expects %u (update its shapes)\n", shapes[si].rows,
                        shapes[si].cols, ks, shapes[si].ks);
            bad++;
        }
        uint64_t s = 0x5eed + si;
        mg_mat m = {shapes[si].rows, shapes[si].cols, 0, NULL, {0}, 0, NULL, 0, NULL, NULL, NULL};
        if (mg_upload(&m, &s) != 0) {
            mg_free(&m);
            return -1;
        }
        const uint64_t big = (uint64_t)m.rows * m.cols;
        for (size_t vi = 0; vi < 2; vi++)
            for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++)
                for (size_t k = 0; k < sizeof Ms / sizeof Ms[0]; k++) {
                    if (modes[mi].glu && m.rows % 2)
                        continue; /* a GLU pairs rows: even row counts only */
                    /* time: the largest shapes take 512 rows of x in half the modes, mma2 on the small only */
                    if (Ms[k] >= 200 && ((big > ((uint64_t)4 << 20) && mi % 2) || (vi == 1 && big > (1u << 20))))
                        continue;
                    const int b = mg_case(out, vars[vi], &m, &modes[mi], Ms[k], 1000 * si + 10 * mi + k + 7777 * vi, 0);
                    if (b < 0) {
                        mg_free(&m);
                        return -1;
                    }
                    bad += b;
                    checked++;
                }
        /* served: each its own bits (mma against auto, mma2 against mma) */
        const int v = mg_versus_auto(out, "mma", "auto", &m, 0, 99 + si);
        const int v2 = v < 0 ? -1 : mg_versus_auto(out, "mma2", "mma", &m, 0, 199 + si);
        mg_free(&m);
        if (v < 0 || v2 < 0)
            return -1;
        bad += v + v2;
        checked += 2;
    }
    /* not served (columns no multiple of 8): gemv=auto's kernels and bits */
    {
        uint64_t s = 0xab;
        mg_mat m = {100, 100, 0, NULL, {0}, 0, NULL, 0, NULL, NULL, NULL};
        const int v = mg_upload(&m, &s) == 0 ? mg_versus_auto(out, "mma", "auto", &m, 1, 7) : -1;
        const int v2 = v < 0 ? -1 : mg_versus_auto(out, "mma2", "auto", &m, 1, 8);
        mg_free(&m);
        if (v < 0 || v2 < 0)
            return -1;
        bad += v + v2;
        checked += 2;
    }
    /* q8=mma: Q8_0 matrices (columns a multiple of 32) on the same modes, decode against auto's integer
     * kernel (its own bits); qdot=mma: Q4_K matrices (columns a multiple of 256: 1, 2, 3, 4 and 16
     * super-blocks a row, parts of super-blocks from KS 8 to 1, an empty part where KS exceeds them),
     * decode against qdot=auto's */
    {
        static const mg_shape q8s[] = {{256, 4096}, {300, 1024},  {6144, 1024}, {16384, 512},
                                       {38, 256},   {40000, 256}, {64, 96}};
        static const mg_shape kqs[] = {{256, 4096}, {300, 1024},  {6144, 1024}, {16384, 512},
                                       {38, 256},   {40000, 256}, {64, 768},    {64, 15872}};
        /* their column splits, so that a change of mc_gemv_mma_ksplit cannot silently drop the
         * cases of parts past the super-blocks (300 x 1024: 8 parts of 4; 38 x 256: 2 of 1; 64 x 768:
         * 4 of 3); 64 x 15,872 is the widest matrix qdot=mma serves with a norm (its x', x and
         * sums staged in 96 KB: mc_gemv_mma_serves) */
        static const uint32_t kq_ks[] = {8, 8, 4, 2, 2, 1, 4, 8};
        for (size_t i = 0; i < sizeof kqs / sizeof kqs[0]; i++)
            if (mc_gemv_mma_ksplit(kqs[i].rows, kqs[i].cols) != kq_ks[i]) {
                if (out)
                    fprintf(out, "%ux%u: KS %u, the check expects %u (update its K-quant shapes)\n", kqs[i].rows,
                            kqs[i].cols, mc_gemv_mma_ksplit(kqs[i].rows, kqs[i].cols), kq_ks[i]);
                bad++;
            }
        static const struct {
            const char *var, *other;
            int (*upload)(mg_mat *, uint64_t *);
            const mg_shape *shapes;
            size_t n;
            uint64_t seed;
        } qv[] = {{"q8mma", "auto", mg_upload_q8, q8s, sizeof q8s / sizeof q8s[0], 0},
                  {"kqmma", "kqauto", mg_upload_kq, kqs, sizeof kqs / sizeof kqs[0], 1},
                  {"kqmma", "kqauto", mg_upload_k5, kqs, sizeof kqs / sizeof kqs[0], 2},
                  {"kqmma", "kqauto", mg_upload_k6, kqs, sizeof kqs / sizeof kqs[0], 3}};
        for (size_t i = 0; i < sizeof qv / sizeof qv[0]; i++) {
            const int b =
                mg_quant(out, qv[i].var, qv[i].other, qv[i].upload, qv[i].shapes, qv[i].n, 0x9e0 + 0x100 * qv[i].seed,
                         31000 + 10000 * qv[i].seed, 299 + 100 * qv[i].seed, 655 + 100 * qv[i].seed, modes,
                         sizeof modes / sizeof modes[0], Ms, sizeof Ms / sizeof Ms[0], &checked);
            if (b < 0)
                return -1;
            bad += b;
        }
    }
    /* negative control: one weight one ulp off in the chunk's matrix must show */
    {
        uint64_t s = 0xcd;
        mg_mat m = {300, 1000, 0, NULL, {0}, 0, NULL, 0, NULL, NULL, NULL};
        if (mg_upload(&m, &s) != 0) {
            mg_free(&m);
            return -1;
        }
        for (size_t mi = 0; mi < 4; mi++) {
            const int b = mg_case(NULL, vars[mi % 2], &m, &modes[mi], 9, 555 + mi, 1);
            if (b < 0) {
                mg_free(&m);
                return -1;
            }
            if (b) {
                if (out)
                    fprintf(out, "negative control (%s, %s): a weight one ulp off gave the same bits\n", vars[mi % 2],
                            modes[mi].name);
                bad++;
            }
            checked++;
        }
        mg_free(&m);
    }
    if (out && mg_wgmma_skipped)
        fprintf(out, "note: tiles 4 to 6 (gemv_wgmma.cu) not run on %d cases: this device is not sm_90\n",
                mg_wgmma_skipped);
    if (n_checked)
        *n_checked = checked;
    return bad;
}

MEMRA_CHECK_MAIN("check_mma_gemv", memra_cuda_check_mma_gemv, "cases", "failures")
