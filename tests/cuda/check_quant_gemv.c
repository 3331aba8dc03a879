/* check_quant_gemv.c: the quantized GEMVs beyond Q8_0 (backends/cuda/gemv_quant.h) against a host
 * float64 reference on random blocks, through the launchers the backend calls (mc_gemv,
 * mc_gemv_swiglu; mc_gemv_legacy for GELU) with the RMSNorm of x, a bias, a residual and the GLUs
 * (SiLU, GELU) of interleaved gate/up rows, for qdot=float and qdot=auto, on shapes that take
 * every column split (KS 1, 2, 4), odd row counts, one block a row and wide rows; and the embedding
 * lookup, bit for bit against memra/quant.h's decoding (scale 1 and 2.5).
 *
 * Tolerances (stated, per output): |y - ref| <= tol * mass, mass = sum_c |W[r][c] x'[c]| + |bias|
 * + |residual| (for a GLU the mass of act(g) * u in the same first-order way), tol 2^-16 for both
 * paths (float sums of a few hundred terms per lane; the integer path's 23-bit x adds ~2^-23); and
 * every launch run twice gives the same bits, and qdot=auto's in the 16-warp and the 4-warp blocks
 * (qblock=16, 4), the 16-warp kernel's narrow forms (qblock=16x, 16r, 16xr; matrices of at most
 * 2048 columns) and its grids (qgrid=need, fill) too. Negative controls: one nibble of one weight
 * flipped on the device must fail the bound, a wrong d in the embedding row must fail the bits,
 * and qdot=float's output in place of the last run's (qgrid=fill, on SmolLM2's qkv shape) must
 * fail the bit comparison. qkvparts=merged: a Q4_0 or Q5_0 part and a Q8_0 part in one launch
 * (mc_gemv_qkv2, with and without the prologue) against the two launches, bit for bit, x_new
 * included, with a changed weight of the Q8_0 part as its control.
 *
 * Built twice: a plain program (main below) for the device machine, and into tests/cuda's
 * Criterion test with MEMRA_CHECK_NO_MAIN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "cuda_checks.h"
#include "gemv_quant.h"
#include "memra/numeric.h"
#include "memra/quant.h"
#include "memra/tensor_type.h"

#define QG_TOL (1.0 / 65536.0)

static float qg_normal(uint64_t *s) {
    float a = 0.0f;
    for (int i = 0; i < 4; i++)
        a += mck_unit(s);
    return (a - 2.0f) * 1.7f;
}

/* A random row of `cols` columns of type t in the file's encoding. */
static void qg_row(uint32_t t, uint32_t cols, uint8_t *dst, uint64_t *s) {
    const uint32_t bb = memra_quant_block_bytes(t), nb = cols / memra_quant_block_elems(t);
    for (uint32_t b = 0; b < nb; b++) {
        uint8_t *blk = dst + (size_t)b * bb;
        for (uint32_t i = 0; i < bb; i++)
            blk[i] = (uint8_t)mck_next(s);
        const uint16_t d = memra_f32_to_f16((mck_unit(s) < 0.5f ? -1.0f : 1.0f) * (0.01f + 0.04f * mck_unit(s)));
        const uint16_t m = memra_f32_to_f16(0.2f * (mck_unit(s) - 0.5f));
        memcpy(blk, &d, 2);
        if (t == MEMRA_QTYPE_Q4_1 || t == MEMRA_QTYPE_Q5_1)
            memcpy(blk + 2, &m, 2);
    }
}

typedef struct qg_shape {
    uint32_t rows, cols;
    int norm, bias, res, glu;
} qg_shape;

static double qg_act(int glu, double g) {
    if (glu == MC_GLU_GELU)
        return 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
    return g / (1.0 + exp(-g));
}

/* The device matrix of rows of the file's encoding at host (rows x row_bytes). */
static cudaError_t qg_upload(uint32_t t, uint32_t rows, uint32_t cols, const uint8_t *host, mc_matrix *w) {
    uint64_t dr = 0, ar = 0;
    memset(w, 0, sizeof *w);
    if (!mc_qlayout_legacy(t, cols, &dr, &ar))
        return cudaErrorInvalidValue;
    const size_t src_row = (size_t)cols / 32 * memra_quant_block_bytes(t);
    uint8_t *d = (uint8_t *)calloc((size_t)rows, dr), *a = (uint8_t *)calloc((size_t)rows, ar);
    cudaError_t e = cudaErrorMemoryAllocation;
    if (d && a) {
        for (uint32_t r = 0; r < rows; r++)
            mc_qrepack_legacy(t, host + r * src_row, cols, d + r * dr, a + r * ar);
        w->type = t;
        w->rows = rows;
        w->cols = cols;
        w->stride = (uint32_t)dr;
        w->aux_stride = (uint32_t)ar;
        e = cudaMalloc(&w->data, (size_t)rows * dr);
        if (e == cudaSuccess)
            e = cudaMalloc(&w->aux, (size_t)rows * ar);
        if (e == cudaSuccess)
            e = cudaMemcpy(w->data, d, (size_t)rows * dr, cudaMemcpyHostToDevice);
        if (e == cudaSuccess)
            e = cudaMemcpy(w->aux, a, (size_t)rows * ar, cudaMemcpyHostToDevice);
    }
    free(d);
    free(a);
    return e;
}

static void qg_free(mc_matrix *w) {
    cudaFree(w->data);
    cudaFree(w->aux);
    w->data = w->aux = NULL;
}

static cudaError_t qg_launch(const mc_config *c, int glu, const mc_matrix *w, const float *x, const float *nw,
                             const float *bias, const float *res, float *y) {
    if (glu == MC_GLU_SILU)
        return mc_gemv_swiglu(c, w, x, nw, 1e-5f, y, 0);
    if (glu == MC_GLU_GELU)
        return mc_gemv_legacy(c, MC_GLU_GELU, w, x, nw, 1e-5f, NULL, NULL, y, 0);
    return mc_gemv(c, w, x, nw, 1e-5f, bias, res, y, 0);
}

/* One type, shape and qdot: 0 pass, else the number of failed outputs (or -1: could not run).
 * flip: flip one nibble of row 0 on the device first (the negative control); 2: no flip, but the
 * last of qdot=auto's runs takes qdot=float (the bit comparison's negative control). qdot=auto runs
 * nine times: qblock=auto twice, 16, 4, 16x, 16r and 16xr, then 16 under qgrid=need and fill, all
 * the same bits. *worst gets the largest error / mass. */
static int qg_case(FILE *out, uint32_t t, const qg_shape *sh, int qdot, int flip, uint64_t seed, double *worst) {
    const uint32_t R = sh->rows, C = sh->cols, Y = sh->glu ? R / 2 : R;
    const size_t src_row = (size_t)C / 32 * memra_quant_block_bytes(t);
    uint64_t s = seed;
    uint8_t *wq = (uint8_t *)malloc((size_t)R * src_row);
    float *W = (float *)malloc((size_t)R * C * sizeof(float));
    float *hx = (float *)malloc((size_t)C * 4), *hn = (float *)malloc((size_t)C * 4);
    float *hb = (float *)malloc((size_t)R * 4), *hr = (float *)malloc((size_t)R * 4);
    float *y1 = (float *)malloc((size_t)Y * 4), *y2 = (float *)malloc((size_t)Y * 4);
    double *xp = (double *)malloc((size_t)C * sizeof(double));
    float *dx = NULL, *dn = NULL, *db = NULL, *dr = NULL, *dy = NULL;
    mc_matrix w;
    memset(&w, 0, sizeof w);
    int bad = -1;
    if (!wq || !W || !hx || !hn || !hb || !hr || !y1 || !y2 || !xp)
        goto done;
    for (uint32_t r = 0; r < R; r++)
        qg_row(t, C, wq + r * src_row, &s);
    for (uint32_t r = 0; r < R; r++)
        for (uint32_t b = 0; b < C / 32; b++) {
            float blk[MEMRA_QK_K];
            memra_dequantize_block(t, wq + r * src_row + b * memra_quant_block_bytes(t), blk);
            memcpy(W + (size_t)r * C + 32 * b, blk, 32 * sizeof(float));
        }
    for (uint32_t c = 0; c < C; c++) {
        hx[c] = qg_normal(&s);
        hn[c] = 0.5f + mck_unit(&s);
    }
    hx[0] = 3.0f; /* the flipped weight meets a large x */
    for (uint32_t r = 0; r < R; r++) {
        hb[r] = qg_normal(&s);
        hr[r] = qg_normal(&s);
    }
    double ssq = 0.0;
    for (uint32_t c = 0; c < C; c++)
        ssq += (double)hx[c] * hx[c];
    const double rs = sh->norm ? 1.0 / sqrt(ssq / C + 1e-5) : 1.0;
    for (uint32_t c = 0; c < C; c++)
        xp[c] = sh->norm ? (double)hx[c] * hn[c] * rs : hx[c];
    if (qg_upload(t, R, C, wq, &w) != cudaSuccess || cudaMalloc((void **)&dx, (size_t)C * 4) != cudaSuccess ||
        cudaMalloc((void **)&dn, (size_t)C * 4) != cudaSuccess ||
        cudaMalloc((void **)&db, (size_t)R * 4) != cudaSuccess ||
        cudaMalloc((void **)&dr, (size_t)R * 4) != cudaSuccess || cudaMalloc((void **)&dy, (size_t)Y * 4) != cudaSuccess)
        goto done;
    cudaMemcpy(dx, hx, (size_t)C * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dn, hn, (size_t)C * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb, (size_t)R * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dr, hr, (size_t)R * 4, cudaMemcpyHostToDevice);
    if (flip == 1) { /* row 0, block 0, element 0: low nibble's top bit */
        uint8_t byte;
        cudaMemcpy(&byte, w.data, 1, cudaMemcpyDeviceToHost);
        byte ^= 0x08;
        cudaMemcpy(w.data, &byte, 1, cudaMemcpyHostToDevice);
    }
    mc_config cfg = mc_config_default;
    cfg.qdot = qdot ? MC_QDOT_AUTO : MC_QDOT_FLOAT;
    const float *nw = sh->norm ? dn : NULL, *bias = sh->bias ? db : NULL, *res = sh->res ? dr : NULL;
    bad = 0;
    /* qdot=auto's runs: qblock auto twice, 16, 4, then the 16-warp kernel's narrow forms, then the
     * 16-warp kernel on the fewest blocks and on every multiprocessor (qgrid=need, fill) */
    static const char *const qblocks[] = {"auto", "auto", "16", "4", "16x", "16r", "16xr", "16", "16"};
    static const char *const qgrids[] = {"auto", "auto", "auto", "auto", "auto", "auto", "auto", "need", "fill"};
    const int n_rep = qdot ? (int)(sizeof qblocks / sizeof qblocks[0]) : 2;
    for (int rep = 0; rep < n_rep; rep++) {
        if (mc_config_choice(&cfg, "qblock", qblocks[rep]) != NULL || mc_config_choice(&cfg, "qgrid", qgrids[rep]) != NULL) {
            bad = -1;
            goto done;
        }
        if (rep == n_rep - 1 && flip == 2)
            cfg.qdot = MC_QDOT_FLOAT;
        cudaMemset(dy, 0xff, (size_t)Y * 4);
        cudaError_t e = qg_launch(&cfg, sh->glu, &w, dx, nw, bias, res, dy);
        if (e == cudaSuccess)
            e = cudaDeviceSynchronize();
        if (e == cudaSuccess)
            e = cudaMemcpy(rep ? y2 : y1, dy, (size_t)Y * 4, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) {
            bad = -1;
            if (out)
                fprintf(out, "%s %ux%u: launch failed: %s\n", memra_tensor_type_name(t), R, C, cudaGetErrorString(e));
            goto done;
        }
        if (rep > 0 && memcmp(y1, y2, (size_t)Y * 4) != 0) {
            if (out)
                fprintf(out, "%s %ux%u qdot=%s: run %d (qblock=%s, qgrid=%s) differs in bits from the first\n",
                        memra_tensor_type_name(t), R, C, qdot ? "auto" : "float", rep, qblocks[rep], qgrids[rep]);
            bad++;
        }
    }
    for (uint32_t i = 0; i < Y; i++) {
        double ref, mass;
        if (sh->glu) {
            double g = 0, u = 0, mg = 0, mu = 0;
            for (uint32_t c = 0; c < C; c++) {
                g += (double)W[(size_t)(2 * i) * C + c] * xp[c];
                u += (double)W[(size_t)(2 * i + 1) * C + c] * xp[c];
                mg += fabs((double)W[(size_t)(2 * i) * C + c] * xp[c]);
                mu += fabs((double)W[(size_t)(2 * i + 1) * C + c] * xp[c]);
            }
            ref = qg_act(sh->glu, g) * u;
            mass = fabs(qg_act(sh->glu, g)) * mu + 1.2 * mg * fabs(u) + 1e-30; /* |act'| <= 1.2 */
        } else {
            double d = 0, m = 0;
            for (uint32_t c = 0; c < C; c++) {
                d += (double)W[(size_t)i * C + c] * xp[c];
                m += fabs((double)W[(size_t)i * C + c] * xp[c]);
            }
            ref = d + (sh->bias ? hb[i] : 0.0) + (sh->res ? hr[i] : 0.0);
            mass = m + (sh->bias ? fabs(hb[i]) : 0.0) + (sh->res ? fabs(hr[i]) : 0.0);
        }
        const double err = fabs((double)y1[i] - ref) / mass;
        if (!(err <= QG_TOL)) {
            if (out && bad < 3 && !flip)
                fprintf(out, "%s %ux%u qdot=%s row %u: %.9g, reference %.9g (error %.3g of the mass)\n",
                        memra_tensor_type_name(t), R, C, qdot ? "auto" : "float", i, y1[i], ref, err);
            bad++;
        }
        if (worst && err > *worst)
            *worst = err;
    }
done:
    qg_free(&w);
    cudaFree(dx);
    cudaFree(dn);
    cudaFree(db);
    cudaFree(dr);
    cudaFree(dy);
    free(wq);
    free(W);
    free(hx);
    free(hn);
    free(hb);
    free(hr);
    free(y1);
    free(y2);
    free(xp);
    return bad;
}

/* The embedding of row `tok` against memra/quant.h, bit for bit (scale 1 and 2.5; mc_embed and
 * mc_embed_rows). corrupt: a
 * wrong d on the device first (the negative control). Returns the number of mismatches. */
static int qg_embed(FILE *out, uint32_t t, int corrupt) {
    const uint32_t R = 5, C = 320, tok = 3;
    const size_t src_row = (size_t)C / 32 * memra_quant_block_bytes(t);
    uint64_t s = 77 + t;
    uint8_t *wq = (uint8_t *)malloc(R * src_row);
    float ref[320], got[320];
    int32_t *dt = NULL;
    float *dx = NULL;
    mc_matrix w;
    memset(&w, 0, sizeof w);
    int bad = -1;
    if (!wq)
        return -1;
    for (uint32_t r = 0; r < R; r++)
        qg_row(t, C, wq + r * src_row, &s);
    for (uint32_t b = 0; b < C / 32; b++) {
        float blk[MEMRA_QK_K]; /* room for any type's block: the call is typed at run time */
        memra_dequantize_block(t, wq + tok * src_row + b * memra_quant_block_bytes(t), blk);
        memcpy(ref + 32 * b, blk, 32 * sizeof(float));
    }
    const int32_t htok = (int32_t)tok;
    if (qg_upload(t, R, C, wq, &w) != cudaSuccess || cudaMalloc((void **)&dt, 4) != cudaSuccess ||
        cudaMalloc((void **)&dx, C * 4) != cudaSuccess)
        goto done;
    cudaMemcpy(dt, &htok, 4, cudaMemcpyHostToDevice);
    if (corrupt) { /* block 1's d of the token's row */
        uint64_t dr = 0, ar = 0;
        mc_qlayout_legacy(t, C, &dr, &ar);
        const size_t at = (size_t)tok * ar + (t == MEMRA_QTYPE_Q5_0 || t == MEMRA_QTYPE_Q5_1 ? 4 * (C / 32) : 0) + 2;
        uint8_t byte;
        cudaMemcpy(&byte, (uint8_t *)w.aux + at, 1, cudaMemcpyDeviceToHost);
        byte ^= 0x01;
        cudaMemcpy((uint8_t *)w.aux + at, &byte, 1, cudaMemcpyHostToDevice);
    }
    bad = 0;
    for (int k = 0; k < 4; k++) { /* scale 1 and 2.5, by mc_embed (a step's input), then mc_embed_rows (a chunk's) */
        const float scale = k & 1 ? 2.5f : 1.0f;
        if ((k < 2 ? mc_embed(&w, dt, scale, dx, 0) : mc_embed_rows(&w, dt, 1, scale, dx, C, 0)) != cudaSuccess ||
            cudaMemcpy(got, dx, C * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
            bad = -1;
            goto done;
        }
        for (uint32_t c = 0; c < C; c++) {
            const float want = k & 1 ? ref[c] * scale : ref[c];
            if (memcmp(&want, &got[c], 4) != 0) {
                if (out && bad == 0 && !corrupt)
                    fprintf(out, "%s embedding scale %g element %u: %.9g, want %.9g\n", memra_tensor_type_name(t),
                            scale, c, got[c], want);
                bad++;
            }
        }
    }
done:
    qg_free(&w);
    cudaFree(dt);
    cudaFree(dx);
    free(wq);
    return bad;
}

/* qkvparts=merged (mc_gemv_qkv2): part a (type t, ra rows) and a Q8_0 part b (rb rows) of cols columns
 * in one launch with the norm, from x or with the prologue (pro: x_new = x + RMSNorm(po) * post_w,
 * stored by part a's first block), against the two launches mc_gemv or mc_gemv_pro make (qblock=16r:
 * the narrow rows split), bit for bit, x_new included. flip: a byte of part b's weights changed on
 * the device before the merged launch alone (the control: its output must change). Returns the
 * number of differing outputs (flip: 0 when the control was caught, 1 when not), -1 when it could
 * not run. */
static int qg_qkv2(FILE *out, uint32_t t, uint32_t ra, uint32_t rb, uint32_t cols, int pro, int flip, uint64_t seed) {
    const size_t src_row = (size_t)cols / 32 * memra_quant_block_bytes(t), n = (size_t)ra + rb;
    uint64_t s = seed;
    uint8_t *wq = (uint8_t *)malloc((size_t)ra * src_row);
    float *h = (float *)malloc((size_t)cols * 4 * 4), *y1 = (float *)malloc((n + cols) * 4);
    float *y2 = (float *)malloc((n + cols) * 4), *dv = NULL;
    mc_matrix wa, wb;
    memset(&wa, 0, sizeof wa);
    memset(&wb, 0, sizeof wb);
    int bad = -1;
    cudaError_t e = cudaSuccess;
    if (!wq || !h || !y1 || !y2)
        goto done;
    for (uint32_t r = 0; r < ra; r++)
        qg_row(t, cols, wq + r * src_row, &s);
    for (uint32_t c = 0; c < 4 * cols; c++) /* x, the norm's weights, po, the post norm's weights */
        h[c] = (c / cols) % 2 ? 0.5f + mck_unit(&s) : qg_normal(&s);
    /* device: x, norm_w, po, post_w (cols each), y (n), x_new (cols) */
    if (qg_upload(t, ra, cols, wq, &wa) != cudaSuccess || mck_q8_matrix(rb, cols, &s, &wb) != cudaSuccess ||
        cudaMalloc((void **)&dv, (4 * cols + n + cols) * 4) != cudaSuccess ||
        cudaMemcpy(dv, h, (size_t)cols * 4 * 4, cudaMemcpyHostToDevice) != cudaSuccess)
        goto done;
    const float *dx = dv, *dn = dv + cols;
    float *dy = dv + 4 * cols, *dxn = dy + n;
    mc_config c = mc_config_default;
    if (mc_config_choice(&c, "qblock", "16r") != NULL)
        goto done;
    mc_pro_args pa = {dv + 2 * cols, dx, dv + 3 * cols, dxn, 1e-6f}, pb = pa;
    pb.out = NULL;
    cudaMemset(dy, 0xff, (n + cols) * 4);
    if (pro) {
        e = mc_gemv_pro(&c, &wa, &pa, dn, 1e-5f, MC_GLU_NONE, dy, 0);
        if (e == cudaSuccess)
            e = mc_gemv_pro(&c, &wb, &pb, dn, 1e-5f, MC_GLU_NONE, dy + ra, 0);
    } else {
        e = mc_gemv(&c, &wa, dx, dn, 1e-5f, NULL, NULL, dy, 0);
        if (e == cudaSuccess)
            e = mc_gemv(&c, &wb, dx, dn, 1e-5f, NULL, NULL, dy + ra, 0);
    }
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    if (e == cudaSuccess)
        e = cudaMemcpy(y1, dy, (n + cols) * 4, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess && flip) { /* part b's row 0, its first quant */
        int8_t q;
        e = cudaMemcpy(&q, wb.data, 1, cudaMemcpyDeviceToHost);
        q = (int8_t)(q ^ 0x21);
        if (e == cudaSuccess)
            e = cudaMemcpy(wb.data, &q, 1, cudaMemcpyHostToDevice);
    }
    if (e == cudaSuccess)
        e = cudaMemset(dy, 0xff, (n + cols) * 4);
    if (e == cudaSuccess)
        e = mc_gemv_qkv2(&c, &wa, &wb, pro ? NULL : dx, pro ? &pa : NULL, dn, 1e-5f, dy, dy + ra, 0);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    if (e == cudaSuccess)
        e = cudaMemcpy(y2, dy, (n + cols) * 4, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        if (out)
            fprintf(out, "%s+q8_0 %u+%u x %u%s: %s\n", memra_tensor_type_name(t), ra, rb, cols, pro ? " prologue" : "",
                    cudaGetErrorString(e));
        goto done;
    }
    bad = 0;
    for (size_t i = 0; i < (pro ? n + cols : n); i++) /* x_new is written under the prologue alone */
        if (memcmp(&y1[i], &y2[i], 4) != 0)
            bad++;
    if (flip)
        bad = bad > 0 ? 0 : 1;
    if (out && bad)
        fprintf(out, "%s+q8_0 %u+%u x %u%s: %s\n", memra_tensor_type_name(t), ra, rb, cols, pro ? " prologue" : "",
                flip ? "a changed weight of part b left the merged output unchanged (control not caught)"
                     : "the merged launch differs in bits from the two launches");
done:
    qg_free(&wa);
    cudaFree(wb.data);
    cudaFree(wb.scales);
    cudaFree(dv);
    free(wq);
    free(h);
    free(y1);
    free(y2);
    return bad;
}

int memra_cuda_check_quant_gemv(FILE *out, int *n_checked) {
    static const uint32_t types[] = {MEMRA_QTYPE_Q4_0, MEMRA_QTYPE_Q4_1, MEMRA_QTYPE_Q5_0, MEMRA_QTYPE_Q5_1};
    static const qg_shape shapes[] = {
        {37, 96, 1, 1, 1, MC_GLU_NONE},     /* odd rows, KS 4 */
        {512, 4096, 1, 1, 0, MC_GLU_NONE},  /* KS 4 */
        {64, 14336, 0, 0, 1, MC_GLU_NONE},  /* wide: KS 4, many blocks a lane */
        {4000, 64, 0, 1, 1, MC_GLU_NONE},   /* KS 2 */
        {9002, 160, 1, 0, 0, MC_GLU_NONE},  /* KS 1, several row groups a warp */
        {256, 1024, 1, 0, 0, MC_GLU_SILU},  /* gate/up interleaved */
        {9000, 32, 1, 0, 0, MC_GLU_GELU},   /* one block a row, KS 1 */
        /* narrow matrices (qblock=16x, 16r, 16xr): SmolLM2's qkv, down and gate/up, gemma3-270m's */
        {960, 576, 1, 1, 1, MC_GLU_NONE},   /* KS 4, 18 blocks: three parts empty */
        {576, 1536, 0, 0, 1, MC_GLU_NONE},  /* KS 4, 48 blocks */
        {3072, 576, 1, 0, 0, MC_GLU_SILU},  /* KS 2, two rows of a group a warp */
        {1282, 2048, 1, 1, 1, MC_GLU_NONE}, /* KS 4, 64 blocks, a partial last group */
        {4100, 640, 1, 0, 0, MC_GLU_GELU},  /* KS 2 */
        {4098, 640, 1, 1, 0, MC_GLU_NONE},  /* KS 2, a partial last group */
    };
    int bad = 0, checked = 0;
    double worst[2] = {0, 0};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int qd = 0; qd < 2; qd++) {
                const int b = qg_case(out, types[ti], &shapes[si], qd, 0, 1000 * ti + 10 * si + qd, &worst[qd]);
                if (b < 0)
                    return -1;
                bad += b;
                checked++;
            }
        const int e = qg_embed(out, types[ti], 0);
        if (e < 0)
            return -1;
        bad += e;
        checked++;
        /* negative controls: both must fail */
        const int nf = qg_case(NULL, types[ti], &shapes[0], 0, 1, 5, NULL);
        const int ne = qg_embed(NULL, types[ti], 1);
        const int nb = qg_case(NULL, types[ti], &shapes[7], 1, 2, 6, NULL); /* qdot=float's bits as qgrid=fill's */
        if (nf <= 0 || ne <= 0 || nb <= 0) {
            if (out)
                fprintf(out,
                        "%s: negative control not caught (flipped weight: %d failures, wrong d: %d, qdot=float "
                        "in qblock=16xr's place: %d)\n",
                        memra_tensor_type_name(types[ti]), nf, ne, nb);
            bad++;
        }
    }
    /* qkvparts=merged: gemma3-270m's q/k + v (KS 4 + 4), KS 2 on either part, rows not multiples of 4 */
    static const uint32_t mq[][3] = {{1280, 256, 640}, {2600, 256, 640}, {1280, 2200, 640}, {2602, 2203, 1024}, {37, 5, 640}};
    static const uint32_t mt[] = {MEMRA_QTYPE_Q4_0, MEMRA_QTYPE_Q5_0};
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t i = 0; i < sizeof mq / sizeof mq[0]; i++)
            for (int pro = 0; pro < 2; pro++)
                for (int flip = 0; flip < 2; flip++) {
                    const int b = qg_qkv2(out, mt[ti], mq[i][0], mq[i][1], mq[i][2], pro, flip, 77 + 10 * i + pro);
                    if (b < 0)
                        return -1;
                    bad += b;
                    checked++;
                }
    if (out)
        fprintf(out, "check_quant_gemv: worst error / mass: qdot=float %.3g, qdot=auto %.3g (tolerance %.3g)\n",
                worst[0], worst[1], QG_TOL);
    if (n_checked)
        *n_checked = checked;
    return bad;
}

#ifndef MEMRA_CHECK_NO_MAIN
MEMRA_CHECK_MAIN("check_quant_gemv", memra_cuda_check_quant_gemv, "cases", "failures")
#endif
