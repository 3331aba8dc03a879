/* check_kquant.c: the Q4_K, Q5_K and Q6_K GEMVs of the cuda backend (gemv_kquant.cu) and their
 * embedding lookups (token.cu) against a host reference, a plain program for the device machine
 * (no Criterion there); exits 77 with the reason printed where there is no CUDA device.
 *
 * Random file blocks (sane f16 scales) are repacked with mc_qrepack_kquant and uploaded. For each
 * type, shape (row counts that take each column split, rows not a multiple of 4) and qdot (auto,
 * float): plain; RMSNorm + bias + residual in place (residual == y); GLU SiLU and GELU with the norm.
 * The reference dequantizes with memra/quant.h and sums in double; a row passes when
 * |y - ref| <= tol * sum |w x'| (tol 1e-5: float rounding over a few thousand terms; the integer
 * path's 23-bit x keeps it there too). Every call runs twice: the same bits; qdot=auto runs in
 * the 16-warp and the 4-warp blocks (qblock=16, 4, auto) and with the rows split (qblock=16r, on the
 * shapes of at most 2048 columns: gemma3-270m's wo and down among them), and the 16-warp blocks on
 * the fewest blocks and on every multiprocessor that has a row group (qgrid=need, fill): the same bits, and
 * qdot=float's output must differ from them (the comparison's negative control, wherever an output
 * is not zero: a GELU of a large negative gate is 0 on both paths). The NMSE of qdot=auto against
 * qdot=float is printed. Negative control: one block's d doubled in the device copy must
 * fail the comparison. Embedding: the row of a device token times a scale, bit for bit against
 * quant.h's dequantization times the scale (a token out of range gives row 0). qkvparts=merged:
 * a Q4_K or Q5_K part and a Q6_K part in one launch (mc_gemv_qkv2) against the two launches, bit for
 * bit, with a changed v weight as its control. commit=head's fused head and argmax against the two
 * launches, on K-quant and Q8_0 heads: head_argmax_checks. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_program.h"
#include "gemv_quant.h"
#include "memra/quant.h"

static int failures;
static int controls; /* the bit comparison's negative controls that ran */
static uint64_t rng = 0x1234567887654321ull;

static uint64_t next64(void) {
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float uni(void) { return (float)(next64() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; } /* [-1, 1) */

/* A random f16 of magnitude in [2^-9, 2^-5), positive. */
static uint16_t rand_scale(void) { return (uint16_t)((6u + next64() % 4) << 10 | (next64() & 0x3ffu)); }

static void rand_blocks(uint32_t type, uint8_t *p, uint64_t nblocks) {
    const uint32_t bb = memra_quant_block_bytes(type);
    for (uint64_t b = 0; b < nblocks; b++) {
        uint8_t *blk = p + b * bb;
        for (uint32_t i = 0; i < bb; i++)
            blk[i] = (uint8_t)next64();
        uint16_t d = rand_scale(), dm = rand_scale();
        if (type == MEMRA_QTYPE_Q6_K) {
            memcpy(blk + 208, &d, 2);
        } else {
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &dm, 2);
        }
    }
}

typedef struct kq_mat {
    mc_matrix m;
    uint8_t *file; /* rows * cols/256 blocks */
    float *deq;    /* rows * cols */
} kq_mat;

static void mat_make(kq_mat *k, uint32_t type, uint32_t rows, uint32_t cols) {
    uint64_t dr = 0, ar = 0;
    CHECK(mc_qlayout_kquant(type, cols, &dr, &ar), "layout of type %u cols %u", type, cols);
    const uint64_t nb = cols / 256, bb = memra_quant_block_bytes(type);
    k->file = malloc(rows * nb * bb);
    k->deq = malloc((size_t)rows * cols * 4);
    uint8_t *hd = calloc(rows, dr), *ha = calloc(rows, ar);
    if (!k->file || !k->deq || !hd || !ha) {
        printf("  FAIL out of host memory\n");
        exit(1);
    }
    rand_blocks(type, k->file, rows * nb);
    for (uint32_t r = 0; r < rows; r++) {
        mc_qrepack_kquant(type, k->file + r * nb * bb, cols, hd + r * dr, ha + r * ar);
        for (uint64_t b = 0; b < nb; b++)
            memra_dequantize_block(type, k->file + (r * nb + b) * bb, k->deq + (size_t)r * cols + b * 256);
    }
    memset(&k->m, 0, sizeof k->m);
    k->m.type = type, k->m.rows = rows, k->m.cols = cols;
    k->m.stride = (uint32_t)dr, k->m.aux_stride = (uint32_t)ar;
    CHECK_CUDA(cudaMalloc(&k->m.data, rows * dr));
    CHECK_CUDA(cudaMalloc(&k->m.aux, rows * ar));
    CHECK_CUDA(cudaMemcpy(k->m.data, hd, rows * dr, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(k->m.aux, ha, rows * ar, cudaMemcpyHostToDevice));
    free(hd);
    free(ha);
}

static void mat_free(kq_mat *k) {
    cudaFree(k->m.data);
    cudaFree(k->m.aux);
    free(k->file);
    free(k->deq);
}

static double glu_ref(int glu, double g, double u) {
    if (glu == MC_GLU_GELU)
        return 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u;
    return g / (1.0 + exp(-g)) * u;
}

/* Host reference of one call: out (rows, or rows/2 with a GLU) and the bound per output. */
static void reference(const kq_mat *k, int glu, const float *x, const float *nw, float eps, const float *bias,
                      const float *res, double *out, double *bound) {
    const uint32_t rows = k->m.rows, cols = k->m.cols;
    double ss = 0, rs = 1;
    for (uint32_t c = 0; c < cols; c++)
        ss += (double)x[c] * x[c];
    if (nw)
        rs = 1.0 / sqrt(ss / cols + eps);
    double *dot = malloc(rows * sizeof *dot), *mag = malloc(rows * sizeof *mag);
    for (uint32_t r = 0; r < rows; r++) {
        double s = 0, a = 0;
        for (uint32_t c = 0; c < cols; c++) {
            const double xp = nw ? (double)x[c] * nw[c] : x[c], t = (double)k->deq[(size_t)r * cols + c] * xp;
            s += t;
            a += fabs(t);
        }
        dot[r] = s * rs;
        mag[r] = a * rs;
    }
    const double tol = 1e-5;
    if (glu) {
        for (uint32_t p = 0; p < rows / 2; p++) {
            const double g = dot[2 * p], u = dot[2 * p + 1];
            out[p] = glu_ref(glu, g, u);
            bound[p] = 2.0 * tol * ((mag[2 * p] + fabs(g)) * (fabs(u) + mag[2 * p + 1]) + mag[2 * p + 1]) + 1e-30;
        }
    } else {
        for (uint32_t r = 0; r < rows; r++) {
            out[r] = dot[r] + (bias ? bias[r] : 0.0) + (res ? res[r] : 0.0);
            bound[r] = tol * (mag[r] + fabs(bias ? bias[r] : 0.0) + fabs(res ? res[r] : 0.0)) + 1e-30;
        }
    }
    free(dot);
    free(mag);
}

typedef struct bufs {
    float *x, *nw, *bias, *y;
} bufs;

/* One call on the device (twice: the same bits), read back into out. */
static void run(const mc_config *c, const kq_mat *k, int glu, int norm, int bias_res, const bufs *d, const float *res,
                float *out, const char *what) {
    const uint32_t n_out = glu ? k->m.rows / 2 : k->m.rows;
    float *again = malloc(n_out * 4);
    for (int rep = 0; rep < 2; rep++) {
        if (bias_res) /* the residual is y itself */
            CHECK_CUDA(cudaMemcpy(d->y, res, n_out * 4, cudaMemcpyHostToDevice));
        else
            CHECK_CUDA(cudaMemset(d->y, 0xff, n_out * 4));
        CHECK_CUDA(mc_gemv_kquant(c, glu, &k->m, d->x, norm ? d->nw : NULL, 1e-5f, bias_res ? d->bias : NULL,
                                  bias_res ? d->y : NULL, d->y, 0));
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK_CUDA(cudaMemcpy(rep ? again : out, d->y, n_out * 4, cudaMemcpyDeviceToHost));
    }
    CHECK(!memcmp(out, again, n_out * 4), "%s: different bits on repeat", what);
    free(again);
}

/* Worst |y - ref| / bound over the outputs (> 1 fails). */
static double worst(const float *y, const double *ref, const double *bound, uint32_t n) {
    double w = 0;
    for (uint32_t i = 0; i < n; i++) {
        const double e = fabs((double)y[i] - ref[i]) / bound[i];
        if (!(e <= w)) /* NaN too */
            w = isnan(e) ? INFINITY : e;
    }
    return w;
}

static const char *tname(uint32_t t) {
    return t == MEMRA_QTYPE_Q4_K ? "q4_k" : t == MEMRA_QTYPE_Q5_K ? "q5_k" : t == MEMRA_TYPE_Q8_0 ? "q8_0" : "q6_k";
}

/* commit=head (mc_gemv_head_argmax): the head's logits and greedy's argmax in one launch against the
 * head's GEMV (mc_gemv_kquant; a Q8_0 head's mc_gemv, or mc_gemv_pro with gemma3's post-FFN norm in
 * its prologue) then mc_sample's argmax pass (commit=sampler's), bit for bit: the logits, the token,
 * the result, the ring's entry (wait=ring; wait=word with the next input embedded, commit=handoff's),
 * the committed position, the next input, the prologue's x_new and the tickets left at 0; and the
 * token against a host argmax of the logits by memra's rule. Cases a shape: random rows; the best
 * row copied to a lower index (a tie: the lower wins) and to a higher one (the best stays); one row's
 * d NaN (its index is the bad one); x NaN (every logit bad: index 0). Shapes at one column part and
 * on 16-warp blocks: K-quants at 2,048 columns (the fewest blocks) and 4,096 (the filled grid); Q8_0
 * at 640 (gemma3-270m's head, with and without the prologue) and 4,096. A column split, qdot=float,
 * q8 other than auto and a K-quant head with the prologue are refused with cudaErrorNotSupported.
 * Control: the fused launch without the commit must fail the comparison of the position and the
 * ring's tag. */
typedef struct am_side {
    mc_sampler_scratch s;
    void *scratch;
    float *y, *xn;
    int32_t *pos, *tok;
    mc_sample_result *res, *ring; /* ring: pinned host memory, 3 entries */
} am_side;

static void am_side_make(am_side *a, uint32_t rows, uint32_t en) {
    const uint64_t sb = mc_sampler_scratch_bytes(rows);
    CHECK_CUDA(cudaMalloc(&a->scratch, sb));
    CHECK_CUDA(cudaMemset(a->scratch, 0, sb));
    mc_sampler_scratch_init(&a->s, a->scratch, rows);
    CHECK_CUDA(cudaMalloc((void **)&a->y, (size_t)rows * 4));
    CHECK_CUDA(cudaMalloc((void **)&a->xn, en * 4));
    CHECK_CUDA(cudaMalloc((void **)&a->pos, 4));
    CHECK_CUDA(cudaMalloc((void **)&a->tok, 4));
    CHECK_CUDA(cudaMalloc((void **)&a->res, sizeof *a->res));
    CHECK_CUDA(cudaMallocHost((void **)&a->ring, 3 * sizeof *a->ring));
}

static void am_side_free(am_side *a) {
    cudaFree(a->scratch);
    cudaFree(a->y);
    cudaFree(a->xn);
    cudaFree(a->pos);
    cudaFree(a->tok);
    cudaFree(a->res);
    cudaFreeHost(a->ring);
}

/* Before a step at position p (commit: *pos = p - 1): the ring cleared, the next input -1s. */
static void am_side_reset(am_side *a, int32_t p, uint32_t en) {
    const int32_t pm = p - 1, m1 = -1;
    for (int i = 0; i < 3; i++)
        mc_ring_entry_clear(&a->ring[i]);
    CHECK_CUDA(cudaMemcpy(a->pos, &pm, 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(a->tok, &m1, 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(a->res, 0xff, sizeof *a->res));
    CHECK_CUDA(cudaMemset(a->xn, 0xff, en * 4));
}

/* What a step left on side a, for comparison: logits, token, result, ring entry, position, next
 * input, ticket. */
typedef struct am_out {
    float *y, xn[16];
    int32_t pos, tok;
    uint32_t ticket;
    mc_sample_result res, ring;
} am_out;

static void am_read(const am_side *a, uint32_t rows, uint32_t en, int32_t p, am_out *o) {
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(o->y, a->y, (size_t)rows * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(o->xn, a->xn, en * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(&o->pos, a->pos, 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(&o->tok, a->tok, 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(&o->ticket, a->s.ticket, 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(&o->res, a->res, sizeof o->res, cudaMemcpyDeviceToHost));
    o->ring = a->ring[p % 3];
}

/* The number of the two sides' differences (0: the same bits everywhere). */
static int am_diff(const am_out *u, const am_out *v, uint32_t rows, uint32_t en, const char *what) {
    int n = 0;
    if (memcmp(u->y, v->y, (size_t)rows * 4) != 0)
        n++, printf("    %s: the logits differ\n", what);
    if (u->tok != v->tok || memcmp(&u->res, &v->res, sizeof u->res) != 0)
        n++, printf("    %s: token %d / %d, result (%d %d %d %08x) / (%d %d %d %08x)\n", what, u->tok, v->tok,
                    u->res.token, u->res.seq, u->res.bad_index, u->res.bad_bits, v->res.token, v->res.seq,
                    v->res.bad_index, v->res.bad_bits);
    if (memcmp(&u->ring, &v->ring, sizeof u->ring) != 0)
        n++, printf("    %s: ring entry (%d %d %d %08x) / (%d %d %d %08x)\n", what, u->ring.token, u->ring.seq,
                    u->ring.bad_index, u->ring.bad_bits, v->ring.token, v->ring.seq, v->ring.bad_index,
                    v->ring.bad_bits);
    if (u->pos != v->pos)
        n++, printf("    %s: position %d / %d\n", what, u->pos, v->pos);
    if (memcmp(u->xn, v->xn, en * 4) != 0)
        n++, printf("    %s: the next input differs\n", what);
    if (u->ticket != 0 || v->ticket != 0)
        n++, printf("    %s: ticket left at %u / %u\n", what, u->ticket, v->ticket);
    return n;
}

/* A random Q8_0 head in the upload layout (int8 rows, f16 block scales of either sign); file and deq
 * unused. */
static void q8_make(kq_mat *k, uint32_t rows, uint32_t cols) {
    memset(k, 0, sizeof *k);
    k->m.type = MEMRA_TYPE_Q8_0, k->m.rows = rows, k->m.cols = cols, k->m.stride = cols;
    const size_t nq = (size_t)rows * cols, ns = (size_t)rows * (cols / 32);
    uint8_t *q = malloc(nq);
    uint16_t *sc = malloc(ns * 2);
    if (!q || !sc) {
        printf("  FAIL out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < nq; i++)
        q[i] = (uint8_t)next64();
    for (size_t i = 0; i < ns; i++)
        sc[i] = (uint16_t)(rand_scale() | (next64() & 1u) << 15);
    CHECK_CUDA(cudaMalloc(&k->m.data, nq));
    CHECK_CUDA(cudaMalloc((void **)&k->m.scales, ns * 2));
    CHECK_CUDA(cudaMemcpy(k->m.data, q, nq, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(k->m.scales, sc, ns * 2, cudaMemcpyHostToDevice));
    free(q);
    free(sc);
}

/* A head's two planes a row: p 0 the quants, 1 the scales (K-quants' aux, Q8_0's f16 block scales). */
static uint8_t *hm_plane(const mc_matrix *m, int p) {
    return p == 0 ? (uint8_t *)m->data : m->type == MEMRA_TYPE_Q8_0 ? (uint8_t *)m->scales : (uint8_t *)m->aux;
}
static size_t hm_stride(const mc_matrix *m, int p) {
    return p == 0 ? m->stride : m->type == MEMRA_TYPE_Q8_0 ? (size_t)m->cols / 32 * 2 : m->aux_stride;
}

/* quick (`memra_cuda_check_kquant head-quick`, for compute-sanitizer): Q6_K at 12,673 x 2,048 and
 * Q8_0 at 12,673 x 640 with the prologue only. */
static void head_argmax_checks(int quick) {
    typedef struct hk {
        uint32_t type;
        int pro;
        uint32_t cols[2];
    } hk;
    static const hk kinds[] = {{MEMRA_QTYPE_Q6_K, 0, {2048, 4096}},
                               {MEMRA_TYPE_Q8_0, 1, {640, 1024}},
                               {MEMRA_QTYPE_Q4_K, 0, {2048, 4096}},
                               {MEMRA_QTYPE_Q5_K, 0, {2048, 4096}},
                               {MEMRA_TYPE_Q8_0, 0, {640, 4096}}};
    /* one column part (mc_ksplit_balance: 1) */
    const uint32_t n_rows = quick ? 12673u : 40003u;
    const int n_kinds = quick ? 2 : 5, n_shapes = quick ? 1 : 2;
    const uint32_t en = 16; /* the next input's width (an F32 table of rows x 16) */
    const float eps = 1e-5f;
    int cases = 0, control_caught = 0;
    for (int t = 0; t < n_kinds; t++)
        for (int sh = 0; sh < n_shapes; sh++) {
            const uint32_t type = kinds[t].type, rows = n_rows, cols = kinds[t].cols[sh];
            const int pro = kinds[t].pro;
            kq_mat k;
            if (type == MEMRA_TYPE_Q8_0)
                q8_make(&k, rows, cols);
            else
                mat_make(&k, type, rows, cols);
            float *x = malloc(cols * 4), *nw = malloc(cols * 4), *emb = malloc((size_t)rows * en * 4);
            float *po = malloc(cols * 4), *pw = malloc(cols * 4), *xna = malloc(cols * 4), *xnb = malloc(cols * 4);
            for (uint32_t c = 0; c < cols; c++)
                x[c] = uni(), nw[c] = 1.0f + 0.25f * uni(), po[c] = 3.0f * uni(), pw[c] = 0.5f + 0.25f * uni();
            for (size_t i = 0; i < (size_t)rows * en; i++)
                emb[i] = uni();
            float *dx, *dnw, *demb, *dpo, *dpw, *dxa, *dxb;
            CHECK_CUDA(cudaMalloc((void **)&dx, cols * 4));
            CHECK_CUDA(cudaMalloc((void **)&dnw, cols * 4));
            CHECK_CUDA(cudaMalloc((void **)&demb, (size_t)rows * en * 4));
            CHECK_CUDA(cudaMalloc((void **)&dpo, cols * 4));
            CHECK_CUDA(cudaMalloc((void **)&dpw, cols * 4));
            CHECK_CUDA(cudaMalloc((void **)&dxa, cols * 4));
            CHECK_CUDA(cudaMalloc((void **)&dxb, cols * 4));
            CHECK_CUDA(cudaMemcpy(dnw, nw, cols * 4, cudaMemcpyHostToDevice));
            CHECK_CUDA(cudaMemcpy(demb, emb, (size_t)rows * en * 4, cudaMemcpyHostToDevice));
            CHECK_CUDA(cudaMemcpy(dpo, po, cols * 4, cudaMemcpyHostToDevice));
            CHECK_CUDA(cudaMemcpy(dpw, pw, cols * 4, cudaMemcpyHostToDevice));
            mc_matrix et;
            memset(&et, 0, sizeof et);
            et.type = MEMRA_TYPE_F32, et.rows = rows, et.cols = en, et.stride = en, et.data = demb;
            am_side A, B;
            am_side_make(&A, rows, en);
            am_side_make(&B, rows, en);
            am_out oa, ob;
            oa.y = malloc((size_t)rows * 4), ob.y = malloc((size_t)rows * 4);
            memra_sample_cfg g;
            memset(&g, 0, sizeof g);
            g.top_p = 1.0f;
            const mc_config c = mc_config_default;
            const size_t st0 = hm_stride(&k.m, 0), st1 = hm_stride(&k.m, 1);
            uint8_t *save = malloc(st0 + st1); /* a row's quants, then its scales */
            /* case 0 random; 1 the best row at a lower index too; 2 at a higher one; 3 a row's d NaN;
             * 4 x NaN; 5 the control (case 0 without the commit on the fused side) */
            uint32_t best = 0, other = 0;
            for (int cs = 0; cs < 6; cs++) {
                const int word = cs & 1; /* wait=word with the next input embedded, or wait=ring without */
                const int32_t p = 517 + cs;
                uint32_t row = 0, off = 0;
                if (cs == 1 || cs == 2) { /* row `other` takes the best row's bytes (saved, restored below) */
                    other = cs == 1 ? best / 2 : best + (rows - best) / 2;
                    for (int pl = 0; pl < 2; pl++) {
                        uint8_t *base = hm_plane(&k.m, pl);
                        const size_t sr = hm_stride(&k.m, pl);
                        CHECK_CUDA(
                            cudaMemcpy(save + (pl ? st0 : 0), base + (size_t)other * sr, sr, cudaMemcpyDeviceToHost));
                        CHECK_CUDA(cudaMemcpy(base + (size_t)other * sr, base + (size_t)best * sr, sr,
                                              cudaMemcpyDeviceToDevice));
                    }
                }
                if (cs == 3) { /* the high byte of row `row`'s first d: 0x7e, an f16 NaN */
                    row = rows / 3;
                    off = type == MEMRA_QTYPE_Q6_K ? 16 * (cols / 256) + 1 : 1;
                    const uint8_t nan_hi = 0x7e;
                    uint8_t *at = hm_plane(&k.m, 1) + (size_t)row * st1 + off;
                    CHECK_CUDA(cudaMemcpy(save, at, 1, cudaMemcpyDeviceToHost));
                    CHECK_CUDA(cudaMemcpy(at, &nan_hi, 1, cudaMemcpyHostToDevice));
                }
                const float x0 = x[0];
                if (cs == 4) /* the GEMV's input NaN: x, or with the prologue its residual input */
                    x[0] = NAN;
                CHECK_CUDA(cudaMemcpy(dx, x, cols * 4, cudaMemcpyHostToDevice));
                x[0] = x0;
                CHECK_CUDA(cudaMemset(dxa, 0xff, cols * 4));
                CHECK_CUDA(cudaMemset(dxb, 0xff, cols * 4));
                const mc_embed_next next = {et, 1.0f, NULL};
                mc_embed_next na = next, nb = next;
                na.x = A.xn, nb.x = B.xn;
                const mc_pro_args pa = {dpo, dx, dpw, dxa, eps}, pb = {dpo, dx, dpw, dxb, eps};
                am_side_reset(&A, p, en);
                am_side_reset(&B, p, en);
                if (pro)
                    CHECK_CUDA(mc_gemv_pro(&c, &k.m, &pa, dnw, eps, MC_GLU_NONE, A.y, 0));
                else
                    CHECK_CUDA(mc_gemv(&c, &k.m, dx, dnw, eps, NULL, NULL, A.y, 0));
                CHECK_CUDA(
                    mc_sample(A.y, &A.s, &g, A.pos, A.tok, A.res, A.ring, 3, false, true, word, word ? &na : NULL, 0));
                const mc_argmax_args a =
                    mc_argmax_args_of(&B.s, B.pos, B.tok, B.res, B.ring, 3, cs != 5, word, word ? &nb : NULL);
                CHECK_CUDA(mc_gemv_head_argmax(&c, &k.m, pro ? NULL : dx, pro ? &pb : NULL, dnw, eps, B.y, &a, 0));
                am_read(&A, rows, en, p, &oa);
                am_read(&B, rows, en, p, &ob);
                char what[96];
                snprintf(what, sizeof what, "%s%s %u x %u case %d", tname(type), pro ? "+pro" : "", rows, cols, cs);
                int nd = am_diff(&oa, &ob, rows, en, what);
                if (pro) {
                    CHECK_CUDA(cudaMemcpy(xna, dxa, cols * 4, cudaMemcpyDeviceToHost));
                    CHECK_CUDA(cudaMemcpy(xnb, dxb, cols * 4, cudaMemcpyDeviceToHost));
                    if (memcmp(xna, xnb, cols * 4) != 0 || !isfinite(xna[cols - 1]))
                        nd++, printf("    %s: the prologue's x_new differs (or was not written)\n", what);
                }
                if (cs == 5) {
                    control_caught += nd > 0;
                    CHECK(nd > 0, "%s: the fused launch without the commit was not caught (control)", what);
                } else {
                    CHECK(nd == 0, "%s: the head's argmax is not the argmax pass's bits", what);
                    cases++;
                }
                /* the host's argmax of the logits by memra's rule */
                uint32_t hb = 0xffffffffu, bad = 0xffffffffu;
                for (uint32_t r = 0; r < rows; r++) {
                    if (!isfinite(oa.y[r])) {
                        if (bad == 0xffffffffu)
                            bad = r;
                    } else if (hb == 0xffffffffu || oa.y[r] > oa.y[hb])
                        hb = r;
                }
                const int32_t want = bad != 0xffffffffu ? -1 : (int32_t)hb;
                CHECK(ob.res.token == want && ob.res.bad_index == (bad != 0xffffffffu ? (int32_t)bad : -1),
                      "%s: token %d bad %d, the host's %d bad %d", what, ob.res.token, ob.res.bad_index, want,
                      bad != 0xffffffffu ? (int32_t)bad : -1);
                if (cs == 0)
                    best = hb;
                if (cs == 1 || cs == 2) {
                    CHECK(memcmp(&oa.y[other], &oa.y[best], 4) == 0, "%s: the copied row's logit is not the best's",
                          what);
                    CHECK(ob.res.token == (int32_t)(cs == 1 ? other : best), "%s: the tie went to %d", what,
                          ob.res.token);
                    for (int pl = 0; pl < 2; pl++) {
                        const size_t sr = hm_stride(&k.m, pl);
                        CHECK_CUDA(cudaMemcpy(hm_plane(&k.m, pl) + (size_t)other * sr, save + (pl ? st0 : 0), sr,
                                              cudaMemcpyHostToDevice));
                    }
                }
                if (cs == 3) {
                    CHECK(ob.res.bad_index == (int32_t)row, "%s: bad index %d, the NaN row %u", what, ob.res.bad_index,
                          row);
                    CHECK_CUDA(
                        cudaMemcpy(hm_plane(&k.m, 1) + (size_t)row * st1 + off, save, 1, cudaMemcpyHostToDevice));
                }
                if (cs == 4)
                    CHECK(ob.res.bad_index == 0, "%s: bad index %d with x NaN", what, ob.res.bad_index);
                printf("%-5s%s %6u %5u head argmax case %d %s: token %d bad %d\n", tname(type), pro ? "+pro" : "    ",
                       rows, cols, cs, word ? "word" : "ring", ob.res.token, ob.res.bad_index);
            }
            /* refused: a column split (2,000 rows: KS 2), qdot=float or q8=int-8w (the kernel mc_gemv
             * would launch is not the 16-warp body), a K-quant head with the prologue */
            mc_matrix few = k.m;
            few.rows = 2000;
            mc_config qf = mc_config_default;
            CHECK(mc_config_choice(&qf, type == MEMRA_TYPE_Q8_0 ? "q8" : "qdot",
                                   type == MEMRA_TYPE_Q8_0 ? "int-8w" : "float") == NULL,
                  "qdot=float / q8=int-8w");
            const mc_argmax_args a0 = mc_argmax_args_of(&B.s, B.pos, B.tok, B.res, B.ring, 3, true, 0, NULL);
            const mc_pro_args pb0 = {dpo, dx, dpw, dxb, eps};
            const mc_pro_args *pp = pro ? &pb0 : NULL;
            CHECK(mc_gemv_head_argmax(&c, &few, dx, pp, dnw, eps, B.y, &a0, 0) == cudaErrorNotSupported,
                  "%s: a column split not refused", tname(type));
            CHECK(mc_gemv_head_argmax(&qf, &k.m, dx, pp, dnw, eps, B.y, &a0, 0) == cudaErrorNotSupported,
                  "%s: qdot=float / q8=int-8w not refused", tname(type));
            if (type != MEMRA_TYPE_Q8_0)
                CHECK(mc_gemv_head_argmax(&c, &k.m, dx, &pb0, dnw, eps, B.y, &a0, 0) == cudaErrorNotSupported,
                      "%s: the prologue not refused", tname(type));
            am_side_free(&A);
            am_side_free(&B);
            free(oa.y);
            free(ob.y);
            free(save);
            free(x);
            free(nw);
            free(emb);
            free(po);
            free(pw);
            free(xna);
            free(xnb);
            cudaFree(dx);
            cudaFree(dnw);
            cudaFree(demb);
            cudaFree(dpo);
            cudaFree(dpw);
            cudaFree(dxa);
            cudaFree(dxb);
            if (type == MEMRA_TYPE_Q8_0) {
                cudaFree(k.m.data);
                cudaFree(k.m.scales);
            } else
                mat_free(&k);
        }
    CHECK(cases == n_kinds * n_shapes * 5 && control_caught == n_kinds * n_shapes,
          "head argmax: %d cases, %d controls caught", cases, control_caught);
}

int main(int argc, char **argv) {
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("check_kquant: skipped: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    if (argc > 1) { /* head-quick: commit=head's fused head alone, one small shape (for compute-sanitizer) */
        if (strcmp(argv[1], "head-quick") != 0) {
            printf("usage: %s [head-quick]\n", argv[0]);
            return 2;
        }
        head_argmax_checks(1);
        printf("check_kquant head-quick: %s (%d failures)\n", failures ? "FAIL" : "ok", failures);
        return failures ? 1 : 0;
    }
    const uint32_t types[3] = {MEMRA_QTYPE_Q4_K, MEMRA_QTYPE_Q5_K, MEMRA_QTYPE_Q6_K};
    /* row counts take the column splits 4 (<= 2112 rows), 2 and 1 (> 4224); not multiples of 4 */
    const uint32_t shapes[][2] = {{38, 512}, {2114, 768}, {4230, 256}, {6, 2048}, {1000, 4096}, {640, 1024}, {640, 2048}};
    const uint32_t max_rows = 4230, max_cols = 4096;
    bufs d;
    CHECK_CUDA(cudaMalloc((void **)&d.x, max_cols * 4));
    CHECK_CUDA(cudaMalloc((void **)&d.nw, max_cols * 4));
    CHECK_CUDA(cudaMalloc((void **)&d.bias, max_rows * 4));
    CHECK_CUDA(cudaMalloc((void **)&d.y, max_rows * 4));
    float *x = malloc(max_cols * 4), *nw = malloc(max_cols * 4), *bias = malloc(max_rows * 4);
    float *res = malloc(max_rows * 4), *y = malloc(max_rows * 4), *yf = malloc(max_rows * 4);
    double *ref = malloc(max_rows * 8), *bound = malloc(max_rows * 8);
    for (uint32_t i = 0; i < max_cols; i++)
        x[i] = uni() * 2.0f, nw[i] = 0.5f + uni() * 0.25f;
    x[7] = 9.0f; /* an outlier: the integer path's per-chunk scale */
    for (uint32_t i = 0; i < max_rows; i++)
        bias[i] = uni() * 0.1f, res[i] = uni();
    CHECK_CUDA(cudaMemcpy(d.x, x, max_cols * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d.nw, nw, max_cols * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d.bias, bias, max_rows * 4, cudaMemcpyHostToDevice));
    mc_config cf = mc_config_default, ci = mc_config_default, c16 = mc_config_default, c4 = mc_config_default;
    mc_config c16r = mc_config_default; /* qblock=16r: the rows split on narrow matrices (at most 2048 columns) */
    if (mc_config_choice(&c16r, "qblock", "16r") != NULL) {
        printf("check_kquant: qblock=16r: not a value of the key\n");
        return 1;
    }
    cf.qdot = MC_QDOT_FLOAT;
    ci.qdot = MC_QDOT_AUTO;
    ci.qblock = MC_QBLOCK_AUTO;
    c16.qblock = MC_QBLOCK_16; /* qblock: the 16-warp blocks against the 4-warp ones, bit for bit */
    c4.qblock = MC_QBLOCK_4;
    float *y16 = malloc(max_rows * 4), *y4 = malloc(max_rows * 4), *y16r = malloc(max_rows * 4);
    /* qgrid: the 16-warp blocks on the fewest blocks and on every multiprocessor, bit for bit */
    mc_config cneed = c16, cfill = c16;
    cneed.qgrid = MC_QGRID_NEED;
    cfill.qgrid = MC_QGRID_FILL;
    float *yneed = malloc(max_rows * 4), *yfill = malloc(max_rows * 4);

    printf("%-5s %6s %5s %-14s %10s %10s %10s\n", "type", "rows", "cols", "variant", "err/tol f", "err/tol a",
           "nmse a~f");
    for (int t = 0; t < 3; t++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            kq_mat k;
            mat_make(&k, types[t], shapes[s][0], shapes[s][1]);
            static const struct {
                const char *name;
                int glu, norm, bias_res;
            } vars[] = {{"plain", 0, 0, 0}, {"norm+bias+res", 0, 1, 1}, {"silu+norm", 1, 1, 0}, {"gelu+norm", 2, 1, 0}};
            for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++) {
                const uint32_t n_out = vars[v].glu ? k.m.rows / 2 : k.m.rows;
                char what[96];
                snprintf(what, sizeof what, "%s %ux%u %s", tname(types[t]), k.m.rows, k.m.cols, vars[v].name);
                reference(&k, vars[v].glu, x, vars[v].norm ? nw : NULL, 1e-5f, vars[v].bias_res ? bias : NULL,
                          vars[v].bias_res ? res : NULL, ref, bound);
                run(&cf, &k, vars[v].glu, vars[v].norm, vars[v].bias_res, &d, res, yf, what);
                run(&ci, &k, vars[v].glu, vars[v].norm, vars[v].bias_res, &d, res, y, what);
                run(&c16, &k, vars[v].glu, vars[v].norm, vars[v].bias_res, &d, res, y16, what);
                run(&c4, &k, vars[v].glu, vars[v].norm, vars[v].bias_res, &d, res, y4, what);
                run(&c16r, &k, vars[v].glu, vars[v].norm, vars[v].bias_res, &d, res, y16r, what);
                run(&cneed, &k, vars[v].glu, vars[v].norm, vars[v].bias_res, &d, res, yneed, what);
                run(&cfill, &k, vars[v].glu, vars[v].norm, vars[v].bias_res, &d, res, yfill, what);
                CHECK(!memcmp(y16, yneed, n_out * 4), "%s: qgrid=need and the default differ in bits", what);
                CHECK(!memcmp(yneed, yfill, n_out * 4), "%s: qgrid=need and fill differ in bits", what);
                CHECK(!memcmp(y, y16, n_out * 4), "%s: qblock=auto and 16 differ in bits", what);
                CHECK(!memcmp(y16, y4, n_out * 4), "%s: qblock=16 and 4 differ in bits", what);
                CHECK(!memcmp(y16, y16r, n_out * 4), "%s: qblock=16 and 16r differ in bits", what);
                /* the comparison's negative control: qdot=float's bits are other bits (where an output is
                 * not zero: a GELU of a large negative gate gives 0 on both paths) */
                int live = 0;
                for (uint32_t i = 0; i < n_out; i++)
                    live |= yf[i] != 0.0f;
                if (live) {
                    CHECK(memcmp(yf, y4, n_out * 4) != 0, "%s: qdot=float gave qblock=4's bits (control)", what);
                    CHECK(memcmp(yf, y16r, n_out * 4) != 0, "%s: qdot=float gave qblock=16r's bits (control)", what);
                    CHECK(memcmp(yf, yfill, n_out * 4) != 0, "%s: qdot=float gave qgrid=fill's bits (control)", what);
                    controls++;
                }
                const double wf = worst(yf, ref, bound, n_out), wa = worst(y, ref, bound, n_out);
                double num = 0, den = 0;
                for (uint32_t i = 0; i < n_out; i++) {
                    const double df = (double)y[i] - yf[i];
                    num += df * df;
                    den += (double)yf[i] * yf[i];
                }
                printf("%-5s %6u %5u %-14s %10.3g %10.3g %10.3g\n", tname(types[t]), k.m.rows, k.m.cols, vars[v].name,
                       wf, wa, den > 0 ? num / den : 0.0);
                CHECK(wf <= 1.0, "%s qdot=float: error %.3g of the bound", what, wf);
                CHECK(wa <= 1.0, "%s qdot=auto: error %.3g of the bound", what, wa);
            }
            if (s == 0) { /* negative control: one block's d doubled on the device must be caught */
                const uint32_t off = types[t] == MEMRA_QTYPE_Q6_K ? 16 * (k.m.cols / 256) + 1 : 1;
                uint8_t byte;
                CHECK_CUDA(cudaMemcpy(&byte, (uint8_t *)k.m.aux + 3 * k.m.aux_stride + off, 1, cudaMemcpyDeviceToHost));
                byte = (uint8_t)(byte + 4); /* f16 exponent + 1: d doubled */
                CHECK_CUDA(cudaMemcpy((uint8_t *)k.m.aux + 3 * k.m.aux_stride + off, &byte, 1, cudaMemcpyHostToDevice));
                reference(&k, 0, x, NULL, 1e-5f, NULL, NULL, ref, bound);
                run(&cf, &k, 0, 0, 0, &d, res, yf, "negative control");
                run(&ci, &k, 0, 0, 0, &d, res, y, "negative control");
                const double wf = worst(yf, ref, bound, k.m.rows), wa = worst(y, ref, bound, k.m.rows);
                printf("%-5s negative control (d of one block doubled): err/tol %.3g (float), %.3g (auto): %s\n",
                       tname(types[t]), wf, wa, wf > 1.0 && wa > 1.0 ? "caught" : "MISSED");
                CHECK(wf > 1.0 && wa > 1.0, "%s: the negative control was not caught", tname(types[t]));
            }
            if (s == 1) { /* embedding: token 5 times 1 and 2.5, and an out-of-range token, by mc_embed
                           * (a step's input) and by mc_embed_rows (a prefill chunk's three rows, one launch) */
                int32_t *dt;
                float *dx, *hx = malloc(3 * k.m.cols * 4), *want = malloc(k.m.cols * 4);
                CHECK_CUDA(cudaMalloc((void **)&dt, 3 * 4));
                CHECK_CUDA(cudaMalloc((void **)&dx, 3 * k.m.cols * 4));
                const int32_t toks[3] = {5, 5, (int32_t)k.m.rows};
                const float scales[3] = {1.0f, 2.5f, 1.0f};
                CHECK_CUDA(cudaMemcpy(dt, toks, sizeof toks, cudaMemcpyHostToDevice));
                for (int q = 0; q < 3; q++) {
                    CHECK_CUDA(mc_embed(&k.m, dt + q, scales[q], dx, 0));
                    CHECK_CUDA(cudaMemcpy(hx, dx, k.m.cols * 4, cudaMemcpyDeviceToHost));
                    const uint32_t row = (uint32_t)toks[q] < k.m.rows ? (uint32_t)toks[q] : 0;
                    for (uint32_t c = 0; c < k.m.cols; c++)
                        want[c] = k.deq[(size_t)row * k.m.cols + c] * scales[q];
                    CHECK(!memcmp(hx, want, k.m.cols * 4), "%s embed token %d scale %g: not quant.h's bits",
                          tname(types[t]), toks[q], scales[q]);
                    CHECK_CUDA(mc_embed_rows(&k.m, dt, 3, scales[q], dx, k.m.cols, 0));
                    CHECK_CUDA(cudaMemcpy(hx, dx, 3 * k.m.cols * 4, cudaMemcpyDeviceToHost));
                    for (int j = 0; j < 3; j++) {
                        const uint32_t rj = (uint32_t)toks[j] < k.m.rows ? (uint32_t)toks[j] : 0;
                        for (uint32_t c = 0; c < k.m.cols; c++)
                            want[c] = k.deq[(size_t)rj * k.m.cols + c] * scales[q];
                        CHECK(!memcmp(hx + (size_t)j * k.m.cols, want, k.m.cols * 4),
                              "%s chunk embedding row %d (token %d) scale %g: not quant.h's bits", tname(types[t]), j,
                              toks[j], scales[q]);
                    }
                }
                /* a table whose aux stride is not the layout's is refused, not read */
                mc_matrix skew = k.m;
                skew.aux_stride += 16;
                CHECK(mc_embed(&skew, dt, 1.0f, dx, 0) == cudaErrorInvalidValue,
                      "%s: an embedding table with a wrong aux stride was not refused", tname(types[t]));
                cudaFree(dt);
                cudaFree(dx);
                free(hx);
                free(want);
            }
            mat_free(&k);
        }
        /* a column count that is not a multiple of 256 is refused */
        mc_matrix bad = {types[t], 4, 320, 0, d.x, NULL, d.x, 0};
        CHECK(mc_gemv_kquant(&ci, 0, &bad, d.x, NULL, 0.0f, NULL, NULL, d.y, 0) == cudaErrorInvalidValue,
              "%s: 320 columns not refused", tname(types[t]));
    }
    /* qkvparts=merged (mc_gemv_qkv2 -> mc_gemv_kquant_qkv2): q/k rows of Q4_K or Q5_K and v rows of Q6_K
     * in one launch with the norm, bit for bit against the two launches mc_gemv makes, on llama-8b's
     * shapes (the 16-warp body on the filled grid, shared by the parts), llama-1b's (the rows split
     * under qblock=16r; the 16-warp body under qblock=16) and rows that are not multiples of 4; the
     * control: a byte of v's weights changed before the merged launch alone must change its output. */
    {
        static const struct {
            uint32_t ra, rb, cols;
            const char *qblock;
        } mq[] = {{5120, 1024, 4096, "16r"}, {2560, 512, 2048, "16r"}, {2560, 512, 2048, "16"}, {2566, 510, 2048, "16r"}};
        float *ya = malloc(6144 * 4), *ym = malloc(6144 * 4), *dm = NULL;
        CHECK_CUDA(cudaMalloc((void **)&dm, 6144 * 4));
        float *dnw = NULL, *dx = NULL;
        CHECK_CUDA(cudaMalloc((void **)&dnw, 4096 * 4));
        CHECK_CUDA(cudaMalloc((void **)&dx, 4096 * 4));
        CHECK_CUDA(cudaMemcpy(dx, x, 4096 * 4, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(dnw, nw, 4096 * 4, cudaMemcpyHostToDevice));
        for (int ta = 0; ta < 2; ta++)
            for (size_t i = 0; i < sizeof mq / sizeof mq[0]; i++)
                for (int flip = 0; flip < 2; flip++) {
                    kq_mat a, b;
                    mat_make(&a, types[ta], mq[i].ra, mq[i].cols);
                    mat_make(&b, MEMRA_QTYPE_Q6_K, mq[i].rb, mq[i].cols);
                    mc_config cq = mc_config_default;
                    CHECK(mc_config_choice(&cq, "qblock", mq[i].qblock) == NULL, "qblock=%s", mq[i].qblock);
                    const uint32_t n = mq[i].ra + mq[i].rb;
                    CHECK_CUDA(cudaMemset(dm, 0xff, n * 4));
                    CHECK_CUDA(mc_gemv(&cq, &a.m, dx, dnw, 1e-5f, NULL, NULL, dm, 0));
                    CHECK_CUDA(mc_gemv(&cq, &b.m, dx, dnw, 1e-5f, NULL, NULL, dm + mq[i].ra, 0));
                    CHECK_CUDA(cudaDeviceSynchronize());
                    CHECK_CUDA(cudaMemcpy(ya, dm, n * 4, cudaMemcpyDeviceToHost));
                    if (flip) { /* v's row 0, its first quant byte */
                        uint8_t byte;
                        CHECK_CUDA(cudaMemcpy(&byte, b.m.data, 1, cudaMemcpyDeviceToHost));
                        byte ^= 0x11;
                        CHECK_CUDA(cudaMemcpy(b.m.data, &byte, 1, cudaMemcpyHostToDevice));
                    }
                    CHECK_CUDA(cudaMemset(dm, 0xff, n * 4));
                    const cudaError_t em = mc_gemv_qkv2(&cq, &a.m, &b.m, dx, NULL, dnw, 1e-5f, dm, dm + mq[i].ra, 0);
                    CHECK(em == cudaSuccess, "%s+q6_k %u+%u x %u qblock=%s: the merged launch: %s", tname(types[ta]),
                          mq[i].ra, mq[i].rb, mq[i].cols, mq[i].qblock, cudaGetErrorString(em));
                    CHECK_CUDA(cudaDeviceSynchronize());
                    CHECK_CUDA(cudaMemcpy(ym, dm, n * 4, cudaMemcpyDeviceToHost));
                    const int same = !memcmp(ya, ym, n * 4);
                    if (flip)
                        CHECK(!same, "%s+q6_k %u+%u x %u qblock=%s: a changed v weight left the merged output "
                              "unchanged (control)", tname(types[ta]), mq[i].ra, mq[i].rb, mq[i].cols, mq[i].qblock);
                    else
                        CHECK(same, "%s+q6_k %u+%u x %u qblock=%s: merged launch not the two launches' bits",
                              tname(types[ta]), mq[i].ra, mq[i].rb, mq[i].cols, mq[i].qblock);
                    printf("%-5s %6u %5u %-14s %s\n", tname(types[ta]), n, mq[i].cols,
                           flip ? "merged control" : "merged=apart", em == cudaSuccess ? (same != flip ? "ok" : "FAIL") : "FAIL");
                    mat_free(&a);
                    mat_free(&b);
                }
        cudaFree(dm);
        cudaFree(dnw);
        cudaFree(dx);
        free(ya);
        free(ym);
    }
    head_argmax_checks(0);
    /* every type and shape but the degenerate GELU ones took the bit comparison's control */
    CHECK(controls >= 3 * 7 * 4 - 3, "only %d of the bit comparison's controls ran", controls);
    printf("check_kquant: %s (%d failures, %d bit-comparison controls)\n", failures ? "FAIL" : "ok", failures, controls);
    return failures ? 1 : 0;
}
