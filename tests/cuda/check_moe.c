/* check_moe.c: the mixture-of-experts kernels of the cuda backend (gemv.cu's gemv_experts, moe.cu)
 * against a host float64 reference, a plain program for the device machine (no Criterion there);
 * exits 77 with the reason printed where there is no CUDA device.
 *
 * 1. mc_moe_route on random logits (distinct multiples of 1/8, so float and double order them
 *    alike) with planted exact ties, n = 8, 33, 128, 1024 and k = 1, 2, 8, n: the ids must be the
 *    top k in decreasing logit, ties toward the lower index, exactly; the weights within 1e-6
 *    (relative) of the double softmax (renormalised or not); the shared gate sigmoid(logits[n]).
 *    With a NaN logit the ids stay k distinct experts in range (no slot left unwritten).
 * 2. mc_gemv_experts (F32, F16, BF16, Q8_0 and the quantized families Q4_0 .. Q6_K; gate/up
 *    interleaved with SiLU and the fused norm, and down on per-slot inputs): each slot within
 *    tol * sum |w x'| of the double reference of its expert; ids outside [e0, e1) give exact
 *    zeros; the same bits on a repeat and, per expert, in any slot (the slots permuted: the same
 *    bits permuted).
 * 3. mc_moe_combine: bit for bit the cpu backend's formula (cpu_moe.c: products and sums in slot
 *    order from 0.0f, the shared expert, granite's residual scale, then the residual add).
 * 4. The whole FFN (router GEMV with the norm, route, experts, combine) against a double
 *    reference: two router rows identical (an exact tie: the lower expert must come first), and
 *    k = n_expert.
 * 5. (check_moe_fused.c) The fused kernels of the arm's moe_fuse key bit for bit against the
 *    unfused ones they replace (and in check 2, the gate/up GEMVs of bits 8 and 64 against the
 *    default loop kernel, and bit 64 against the float64 reference with its own negative control):
 *    mc_moe_router (the router GEMV with the norm, [granite's residual add x += po * scale], and
 *    the top k in its last block) against mc_gemv [+ mc_scale_add] + mc_moe_route: logits, ids,
 *    weights and x equal, launched twice (the ticket must come back to zero, else the second
 *    launch's route does not run: its ids and weights are poisoned before); mc_gemv_experts_combine
 *    against mc_gemv_experts + mc_moe_combine: x equal (shared slot, granite's scale, an id not
 *    held, a row tail); the whole FFN through the fused kernels equal to check 4's unfused
 *    chain; shapes the fused kernels do not serve are refused by their launchers.
 *    mc_gemv_experts_routed (bit 1024: the router in the gate/up launch) and the combine with po
 *    and late against the default chain: logits, ids, weights, slots and x equal.
 * Negative controls: a reference whose tie goes to the higher index must disagree with the ids;
 * one expert's weights changed on the device must fail the expert check; one weight changed on
 * the device before the fused launch must make it differ from the unfused one. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_moe.h"
#include "check_program.h"
#include "cuda_kernels.h"
#include "gemv_quant.h"
#include "memra/gguf.h"
#include "memra/numeric.h"
#include "memra/quant.h"

int failures;
mc_config mcfg;
static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t next64(void) {
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
float uni(void) { return (float)(next64() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; } /* [-1, 1) */

void *dev_copy(const void *h, size_t n) {
    void *d = NULL;
    CHECK_CUDA(cudaMalloc(&d, n ? n : 16));
    if (n)
        CHECK_CUDA(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

/* ---- 1. the router ------------------------------------------------------------------------ */

/* The reference order: decreasing logit, ties toward the lower index (tie_high: the wrong rule,
 * the negative control). */
static void ref_topk(const float *l, uint32_t n, uint32_t k, int tie_high, uint32_t *sel) {
    uint8_t *taken = calloc(n, 1);
    for (uint32_t j = 0; j < k; j++) {
        uint32_t best = n;
        for (uint32_t e = 0; e < n; e++)
            if (!taken[e] && (best == n || l[e] > l[best] || (tie_high && l[e] == l[best])))
                best = e;
        taken[best] = 1;
        sel[j] = best;
    }
    free(taken);
}

static void check_route(uint32_t n, uint32_t k, int norm, int shexp) {
    float *l = malloc((n + 1) * 4);
    const uint32_t shift = (uint32_t)(next64() % n);
    for (uint32_t e = 0; e < n; e++) /* distinct multiples of 1/8 (37 is prime to every n here) */
        l[e] = ((float)((e * 37u + shift) % n) - (float)(n / 2)) / 8.0f;
    if (n >= 8) { /* planted ties: the top value three times, a middle value twice */
        uint32_t top = 0;
        for (uint32_t e = 1; e < n; e++)
            if (l[e] > l[top])
                top = e;
        l[(top + 3) % n] = l[top];
        l[(top + n / 2) % n] = l[top];
        l[(top + 1) % n] = l[(top + 2) % n];
    }
    l[n] = uni() * 3.0f; /* the shared expert's gate logit */
    float *dl = dev_copy(l, (n + 1) * 4), *dw;
    int32_t *ds;
    CHECK_CUDA(cudaMalloc((void **)&dw, (k + 1) * 4));
    CHECK_CUDA(cudaMalloc((void **)&ds, k * 4));
    CHECK_CUDA(mc_moe_route(&mc_config_default, dl, n, k, norm, shexp, ds, dw, 0));
    CHECK_CUDA(cudaDeviceSynchronize());
    int32_t *sel = malloc(k * 4);
    float *w = malloc((k + 1) * 4);
    CHECK_CUDA(cudaMemcpy(sel, ds, k * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(w, dw, (k + shexp) * 4, cudaMemcpyDeviceToHost));
    uint32_t *want = malloc(k * 4), *wrong = malloc(k * 4);
    ref_topk(l, n, k, 0, want);
    ref_topk(l, n, k, 1, wrong);
    int same = 1, same_wrong = 1;
    for (uint32_t j = 0; j < k; j++) {
        same &= sel[j] == (int32_t)want[j];
        same_wrong &= sel[j] == (int32_t)wrong[j];
    }
    CHECK(same, "route n=%u k=%u: ids differ from the reference (slot 0: %d, want %u)", n, k, sel[0], want[0]);
    if (n >= 8 && k >= 2)
        CHECK(!same_wrong, "route n=%u k=%u: negative control (ties to the higher index) not told apart", n, k);
    double mx = -INFINITY, sum = 0, tot = 0;
    for (uint32_t e = 0; e < n; e++)
        mx = l[e] > mx ? l[e] : mx;
    for (uint32_t e = 0; e < n; e++)
        sum += exp((double)l[e] - mx);
    for (uint32_t j = 0; j < k; j++)
        tot += exp((double)l[want[j]] - mx) / sum;
    double worst = 0;
    for (uint32_t j = 0; j < k; j++) {
        const double p = exp((double)l[want[j]] - mx) / sum, r = norm ? p / tot : p;
        const double e = fabs(w[j] - r) / fabs(r);
        worst = e > worst || isnan(e) ? e : worst;
    }
    if (shexp) {
        const double g = 1.0 / (1.0 + exp(-(double)l[n]));
        const double e = fabs(w[k] - g) / g;
        worst = e > worst || isnan(e) ? e : worst;
    }
    CHECK(worst <= 1e-6, "route n=%u k=%u norm=%d: weights off by %.3g (relative)", n, k, norm, worst);
    printf("route   n=%4u k=%4u norm=%d shexp=%d: ids %s, weights rel err %.2g\n", n, k, norm, shexp,
           same ? "exact" : "DIFFER", worst);
    /* a NaN logit: still k distinct experts in range */
    l[n / 2] = NAN;
    CHECK_CUDA(cudaMemcpy(dl, l, n * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(mc_moe_route(&mc_config_default, dl, n, k, norm, 0, ds, dw, 0));
    CHECK_CUDA(cudaMemcpy(sel, ds, k * 4, cudaMemcpyDeviceToHost));
    uint8_t *seen = calloc(n, 1);
    int ok = 1;
    for (uint32_t j = 0; j < k; j++) {
        ok &= sel[j] >= 0 && (uint32_t)sel[j] < n && !seen[sel[j]];
        if (sel[j] >= 0 && (uint32_t)sel[j] < n)
            seen[sel[j]] = 1;
    }
    CHECK(ok, "route n=%u k=%u with a NaN logit: ids not k distinct experts in range", n, k);
    free(seen);
    free(l);
    free(sel);
    free(w);
    free(want);
    free(wrong);
    cudaFree(dl);
    cudaFree(dw);
    cudaFree(ds);
}

/* ---- 2. the experts' GEMV ------------------------------------------------------------------ */

/* A stack of expert rows in the upload layout and its decoded values: struct stack, check_moe.h. */

static int family(uint32_t t) {
    return t == MEMRA_TYPE_Q4_0 || t == MEMRA_TYPE_Q4_1 || t == MEMRA_TYPE_Q5_0 || t == MEMRA_TYPE_Q5_1 ||
           t == MEMRA_TYPE_Q4_K || t == MEMRA_TYPE_Q5_K || t == MEMRA_TYPE_Q6_K;
}

/* A stack of a quantized family (Q4_0 .. Q6_K): random blocks in the file's encoding, their f16
 * scales in [2^-9, 2^-5) (Q6_K's d at byte 208, the others' d and dmin at 0 and 2), laid out as
 * cuda_weights.cu uploads them (gemv_quant.h's repack) and decoded as memra/quant.h does. */
static void stack_make_family(stack *s, uint32_t type, uint32_t rows, uint32_t cols) {
    uint64_t dr = 0, ar = 0;
    const int kq = type == MEMRA_TYPE_Q4_K || type == MEMRA_TYPE_Q5_K || type == MEMRA_TYPE_Q6_K;
    CHECK(kq ? mc_qlayout_kquant(type, cols, &dr, &ar) : mc_qlayout_legacy(type, cols, &dr, &ar),
          "no layout for type %u, %u columns", type, cols);
    const uint32_t be = memra_quant_block_elems(type), bb = (uint32_t)memra_quant_block_bytes(type);
    const uint64_t nb = cols / be;
    uint8_t *file = malloc((size_t)rows * nb * bb), *hd = calloc(rows, dr ? dr : 1), *ha = calloc(rows, ar ? ar : 1);
    s->deq = malloc((size_t)rows * cols * 4);
    if (!file || !hd || !ha || !s->deq) {
        printf("check_moe: FAIL: out of host memory\n");
        exit(1);
    }
    for (uint64_t b = 0; b < (uint64_t)rows * nb; b++) {
        uint8_t *blk = file + b * bb;
        for (uint32_t i = 0; i < bb; i++)
            blk[i] = (uint8_t)next64();
        const uint16_t d = (uint16_t)((6u + next64() % 4) << 10 | (next64() & 0x3ffu));
        const uint16_t dm = (uint16_t)((6u + next64() % 4) << 10 | (next64() & 0x3ffu));
        if (type == MEMRA_TYPE_Q6_K) {
            memcpy(blk + 208, &d, 2);
        } else {
            memcpy(blk, &d, 2);
            if (type != MEMRA_TYPE_Q4_0 && type != MEMRA_TYPE_Q5_0)
                memcpy(blk + 2, &dm, 2);
        }
    }
    for (uint32_t r = 0; r < rows; r++) {
        const uint8_t *src = file + (size_t)r * nb * bb;
        if (kq)
            mc_qrepack_kquant(type, src, cols, hd + (size_t)r * dr, ar ? ha + (size_t)r * ar : NULL);
        else
            mc_qrepack_legacy(type, src, cols, hd + (size_t)r * dr, ar ? ha + (size_t)r * ar : NULL);
        for (uint64_t b = 0; b < nb; b++)
            memra_dequantize_block(type, src + b * bb, s->deq + (size_t)r * cols + b * be);
    }
    memset(&s->m, 0, sizeof s->m);
    s->m.type = type, s->m.rows = rows, s->m.cols = cols;
    s->m.stride = (uint32_t)dr, s->m.aux_stride = (uint32_t)ar;
    s->m.data = dev_copy(hd, (size_t)rows * dr);
    s->m.aux = ar ? dev_copy(ha, (size_t)rows * ar) : NULL;
    free(file);
    free(hd);
    free(ha);
}

void stack_make(stack *s, uint32_t type, uint32_t rows, uint32_t cols) {
    if (family(type)) {
        stack_make_family(s, type, rows, cols);
        return;
    }
    const uint32_t eb = type == MEMRA_TYPE_F32 ? 4 : type == MEMRA_TYPE_Q8_0 ? 1 : 2;
    const uint32_t stride = (cols * eb + 15) / 16 * 16 / eb;
    uint8_t *data = calloc((size_t)rows * stride, eb);
    uint16_t *sc = type == MEMRA_TYPE_Q8_0 ? calloc((size_t)rows * (cols / 32), 2) : NULL;
    s->deq = malloc((size_t)rows * cols * 4);
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t c = 0; c < cols; c++) {
            const size_t i = (size_t)r * stride + c;
            float v = uni() * 0.5f;
            if (type == MEMRA_TYPE_F32) {
                memcpy(data + 4 * i, &v, 4);
            } else if (type == MEMRA_TYPE_F16) {
                uint16_t h = memra_f32_to_f16(v);
                memcpy(data + 2 * i, &h, 2);
                v = memra_f16_to_f32(h);
            } else if (type == MEMRA_TYPE_BF16) {
                uint16_t h = memra_f32_to_bf16(v);
                memcpy(data + 2 * i, &h, 2);
                v = memra_bf16_to_f32(h);
            } else {
                uint16_t *d = &sc[(size_t)r * (cols / 32) + c / 32];
                if (c % 32 == 0)
                    *d = memra_f32_to_f16(0.002f + 0.004f * (uni() + 1.0f));
                const int8_t q = (int8_t)((int)(next64() % 255) - 127);
                data[i] = (uint8_t)q;
                v = (float)q * memra_f16_to_f32(*d);
            }
            s->deq[(size_t)r * cols + c] = v;
        }
    memset(&s->m, 0, sizeof s->m);
    s->m.type = type, s->m.rows = rows, s->m.cols = cols, s->m.stride = stride;
    s->m.data = dev_copy(data, (size_t)rows * stride * eb);
    if (sc)
        s->m.scales = dev_copy(sc, (size_t)rows * (cols / 32) * 2);
    free(data);
    free(sc);
}

void stack_free(stack *s) {
    cudaFree(s->m.data);
    cudaFree(s->m.scales);
    cudaFree(s->m.aux);
    free(s->deq);
}

/* Reference of one slot: expert e's rows_e rows (from row (e - e0) rows_e) times x' (RMSNorm(x) *
 * nw with nw), the GLU of interleaved pairs with glu; out and a bound per output. */
static void ref_expert(const stack *s, uint32_t e, uint32_t e0, uint32_t rows_e, const float *x, const float *nw,
                       int glu, double *out, double *bound) {
    const uint32_t cols = s->m.cols;
    double ss = 0, rs = 1;
    for (uint32_t c = 0; c < cols; c++)
        ss += (double)x[c] * x[c];
    if (nw)
        rs = 1.0 / sqrt(ss / cols + 1e-5);
    double *dot = malloc(rows_e * 8), *mag = malloc(rows_e * 8);
    for (uint32_t r = 0; r < rows_e; r++) {
        const float *wr = s->deq + ((size_t)(e - e0) * rows_e + r) * cols;
        double a = 0, m = 0;
        for (uint32_t c = 0; c < cols; c++) {
            const double t = (double)wr[c] * (nw ? (double)x[c] * nw[c] : x[c]);
            a += t;
            m += fabs(t);
        }
        dot[r] = a * rs;
        mag[r] = m * rs;
    }
    const double tol = 1e-5;
    if (glu) {
        for (uint32_t p = 0; p < rows_e / 2; p++) {
            const double g = dot[2 * p], u = dot[2 * p + 1];
            out[p] = g / (1.0 + exp(-g)) * u;
            bound[p] = 2.0 * tol * ((mag[2 * p] + fabs(g)) * (fabs(u) + mag[2 * p + 1]) + mag[2 * p + 1]) + 1e-30;
        }
    } else {
        for (uint32_t r = 0; r < rows_e; r++)
            out[r] = dot[r], bound[r] = tol * mag[r] + 1e-30;
    }
    free(dot);
    free(mag);
}

const char *tname(uint32_t t) {
    return family(t) ? memra_tensor_type_name(t)
           : t == MEMRA_TYPE_F32 ? "f32"
           : t == MEMRA_TYPE_F16 ? "f16"
           : t == MEMRA_TYPE_BF16 ? "bf16"
                                  : "q8_0";
}

/* The arm's keys check_experts runs under (the default, or experts=int for the Q8_0 integer path). */
static mc_config ecfg;

/* The stack holds experts [e0, e0 + held) of rows_e rows of cols; k slots with ids sel (some may
 * be outside the held range); x one vector (ldx 0) or k of them. */
static void check_experts(uint32_t type, uint32_t held, uint32_t e0, uint32_t rows_e, uint32_t cols, uint32_t k,
                          const int32_t *sel, int glu, int norm, int per_slot_x, int corrupt) {
    stack s;
    stack_make(&s, type, held * rows_e, cols);
    const uint32_t nx = per_slot_x ? k : 1, n_out = glu ? rows_e / 2 : rows_e;
    float *x = malloc((size_t)nx * cols * 4), *nw = malloc(cols * 4);
    for (size_t i = 0; i < (size_t)nx * cols; i++)
        x[i] = uni() * 2.0f;
    for (uint32_t c = 0; c < cols; c++)
        nw[c] = 0.5f + 0.25f * uni();
    float *dx = dev_copy(x, (size_t)nx * cols * 4), *dnw = dev_copy(nw, cols * 4), *dy;
    int32_t *dsel = dev_copy(sel, k * 4);
    CHECK_CUDA(cudaMalloc((void **)&dy, (size_t)k * n_out * 4));
    if (corrupt && (family(type) || type == MEMRA_TYPE_Q8_0)) { /* negative control: a quant bit of every byte of
        * the first held expert's first row (one byte may sit in a sub-block whose random scale is 0; one Q8_0
        * quant of a gate row moved by 64 steps stayed inside the SwiGLU output's bound; corrupt 2: the first two
        * rows, an output's gate and up: experts=int's wider bound let one gate row through at 2176 x 256) */
        const size_t nb = (size_t)s.m.stride * (corrupt == 2 ? 2 : 1);
        uint8_t *row = malloc(nb);
        CHECK_CUDA(cudaMemcpy(row, s.m.data, nb, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < nb; i++)
            row[i] ^= 0x40;
        CHECK_CUDA(cudaMemcpy(s.m.data, row, nb, cudaMemcpyHostToDevice));
        free(row);
    } else if (corrupt) { /* negative control: one weight of the first held expert changed on the device */
        const uint32_t eb = type == MEMRA_TYPE_F32 ? 4 : type == MEMRA_TYPE_Q8_0 ? 1 : 2;
        uint8_t b;
        CHECK_CUDA(cudaMemcpy(&b, (uint8_t *)s.m.data + eb - 1, 1, cudaMemcpyDeviceToHost));
        b ^= 0x40;
        CHECK_CUDA(cudaMemcpy((uint8_t *)s.m.data + eb - 1, &b, 1, cudaMemcpyHostToDevice));
    }
    float *y = malloc((size_t)k * n_out * 4), *y2 = malloc((size_t)k * n_out * 4);
    for (int rep = 0; rep < 2; rep++) {
        CHECK_CUDA(cudaMemset(dy, 0xff, (size_t)k * n_out * 4));
        CHECK_CUDA(mc_gemv_experts(&ecfg, &s.m, rows_e, dsel, k, e0, e0 + held, dx, per_slot_x ? cols : 0,
                                   norm ? dnw : NULL, 1e-5f, glu, dy, n_out, 0));
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK_CUDA(cudaMemcpy(rep ? y2 : y, dy, (size_t)k * n_out * 4, cudaMemcpyDeviceToHost));
    }
    CHECK(!memcmp(y, y2, (size_t)k * n_out * 4), "experts: different bits on repeat");
    /* moe_fuse bits 8 (gemv_experts_flat) and 64, 128 (gemv_experts_stream) against y; where a variant does not
     * serve the shape (stream: a column split of 1 and one x only) the loop kernel runs, and the compare
     * checks that the fallback keeps the bits */
    if (glu && norm && !corrupt)
        for (int v = 0; v < 2; v++) {
            mc_config f = ecfg;
            f.moe_fuse = v ? (ecfg.moe_fuse | MC_MOE_FUSE_STREAM | MC_MOE_FUSE_STREAM16)
                           : (MC_MOE_FUSE_ALL & ~(MC_MOE_FUSE_STREAM | MC_MOE_FUSE_STREAM16));
            CHECK_CUDA(cudaMemset(dy, 0xff, (size_t)k * n_out * 4));
            CHECK_CUDA(mc_gemv_experts(&f, &s.m, rows_e, dsel, k, e0, e0 + held, dx, per_slot_x ? cols : 0, dnw, 1e-5f,
                                       glu, dy, n_out, 0));
            CHECK_CUDA(cudaMemcpy(y2, dy, (size_t)k * n_out * 4, cudaMemcpyDeviceToHost));
            const int same = !memcmp(y, y2, (size_t)k * n_out * 4);
            const int sbit = type == MEMRA_TYPE_Q8_0 ? MC_MOE_FUSE_STREAM : MC_MOE_FUSE_STREAM16;
            CHECK(same, "experts %s rows_e %u cols %u: moe_fuse bit %d (the %s kernel) gives other bits", tname(type),
                  rows_e, cols, v ? sbit : 8, v ? "stream" : "flat");
            printf("experts %-4s rows_e=%5u cols=%5u k=%3u: %s (moe_fuse bit %d) against the %s kernel: %s\n",
                   tname(type), rows_e, cols, k, v ? "stream" : "flat", v ? sbit : 8,
                   (ecfg.moe_fuse & (unsigned)sbit) ? "stream" : "loop", same ? "the same bits" : "DIFFERS");
        }
    /* moe_fuse bit 2048 (experts=int, int-gu: the gate/up in one wave) toggled against y: the same bits, or
     * where the wave does not serve (x a slot) the slot kernel in both */
    if (glu && norm && !corrupt && type == MEMRA_TYPE_Q8_0 && ecfg.experts != MC_EXPERTS_FLOAT) {
        mc_config f = ecfg;
        f.moe_fuse ^= MC_MOE_FUSE_IWAVE;
        CHECK_CUDA(cudaMemset(dy, 0xff, (size_t)k * n_out * 4));
        CHECK_CUDA(mc_gemv_experts(&f, &s.m, rows_e, dsel, k, e0, e0 + held, dx, per_slot_x ? cols : 0, dnw, 1e-5f, glu,
                                   dy, n_out, 0));
        CHECK_CUDA(cudaMemcpy(y2, dy, (size_t)k * n_out * 4, cudaMemcpyDeviceToHost));
        const int same = !memcmp(y, y2, (size_t)k * n_out * 4);
        CHECK(same, "experts q8_0 int rows_e %u cols %u: moe_fuse bit 2048 gives other bits", rows_e, cols);
        if (per_slot_x) /* the wave does not serve it: the slot kernel both ways */
            printf(
                "experts q8_0 int rows_e=%5u cols=%5u k=%3u: x a slot, the slot kernel with bit 2048 on and off: %s\n",
                rows_e, cols, k, same ? "the same bits" : "DIFFERS");
        else
            printf("experts q8_0 int rows_e=%5u cols=%5u k=%3u: the wave (moe_fuse bit 2048 on) against the slot "
                   "kernel (off): %s\n",
                   rows_e, cols, k, same ? "the same bits" : "DIFFERS");
    }
    double *ref = malloc(n_out * 8), *bound = malloc(n_out * 8), worst = 0;
    for (uint32_t j = 0; j < k; j++) {
        const float *yj = y + (size_t)j * n_out;
        if (sel[j] < (int32_t)e0 || sel[j] >= (int32_t)(e0 + held)) {
            int zero = 1;
            for (uint32_t i = 0; i < n_out; i++)
                zero &= yj[i] == 0.0f && !signbit(yj[i]);
            CHECK(zero, "experts %s: slot %u (expert %d, not held) is not zeros", tname(type), j, sel[j]);
            continue;
        }
        ref_expert(&s, (uint32_t)sel[j], e0, rows_e, x + (per_slot_x ? (size_t)j * cols : 0), norm ? nw : NULL, glu,
                   ref, bound);
        for (uint32_t i = 0; i < n_out; i++) {
            const double e = fabs((double)yj[i] - ref[i]) / bound[i];
            worst = e > worst || isnan(e) ? (isnan(e) ? INFINITY : e) : worst;
        }
    }
    printf("experts %-4s%s%s rows_e=%5u cols=%5u k=%3u glu=%d norm=%d x/slot=%d%s: err/tol %.3g%s\n", tname(type),
           ecfg.experts == MC_EXPERTS_INT      ? " int"
           : ecfg.experts == MC_EXPERTS_INT_GU ? " int-gu"
                                               : "",
           ecfg.moe_fuse & MC_MOE_FUSE_IWAVE    ? " wave"
           : ecfg.moe_fuse & MC_MOE_FUSE_STREAM ? " stream"
                                                : "",
           rows_e, cols, k, glu, norm, per_slot_x, corrupt ? " (negative control)" : "", worst,
           corrupt ? (worst > 1.0 ? ": caught" : ": MISSED") : "");
    if (corrupt)
        CHECK(worst > 1.0, "experts %s: the changed weight was not caught", tname(type));
    else
        CHECK(worst <= 1.0, "experts %s rows_e %u cols %u: error %.3g of the bound", tname(type), rows_e, cols, worst);
    /* the slots reversed (one x for all): each expert's output the same bits, in its new slot */
    if (!per_slot_x && !corrupt) {
        int32_t *rev = malloc(k * 4);
        for (uint32_t j = 0; j < k; j++)
            rev[j] = sel[k - 1 - j];
        CHECK_CUDA(cudaMemcpy(dsel, rev, k * 4, cudaMemcpyHostToDevice));
        CHECK_CUDA(mc_gemv_experts(&ecfg, &s.m, rows_e, dsel, k, e0, e0 + held, dx, 0, norm ? dnw : NULL,
                                   1e-5f, glu, dy, n_out, 0));
        CHECK_CUDA(cudaMemcpy(y2, dy, (size_t)k * n_out * 4, cudaMemcpyDeviceToHost));
        int same = 1;
        for (uint32_t j = 0; j < k; j++)
            same &= !memcmp(y + (size_t)j * n_out, y2 + (size_t)(k - 1 - j) * n_out, n_out * 4);
        CHECK(same, "experts %s: an expert's output depends on its slot", tname(type));
        free(rev);
    }
    free(ref);
    free(bound);
    free(x);
    free(nw);
    free(y);
    free(y2);
    cudaFree(dx);
    cudaFree(dnw);
    cudaFree(dy);
    cudaFree(dsel);
    stack_free(&s);
}

/* ---- 3. the combine ----------------------------------------------------------------------- */

static void check_combine(uint32_t E, uint32_t k, int shexp, float scale) {
    const uint32_t ns = k + (uint32_t)shexp;
    float *slots = malloc((size_t)ns * E * 4), *w = malloc((ns + 1) * 4), *x = malloc(E * 4), *want = malloc(E * 4);
    for (size_t i = 0; i < (size_t)ns * E; i++)
        slots[i] = uni();
    for (uint32_t j = 0; j < ns; j++)
        w[j] = 0.5f * (uni() + 1.0f);
    for (uint32_t i = 0; i < E; i++)
        x[i] = uni() * 4.0f;
    for (uint32_t i = 0; i < E; i++) { /* cpu_moe_combine, then cpu_forward.c's scale and add */
        float acc = 0.0f;
        for (uint32_t j = 0; j < k; j++)
            acc += w[j] * slots[(size_t)j * E + i];
        if (shexp)
            acc += w[k] * slots[(size_t)k * E + i];
        if (scale != 1.0f)
            acc *= scale;
        want[i] = x[i] + acc;
    }
    float *ds = dev_copy(slots, (size_t)ns * E * 4), *dw = dev_copy(w, ns * 4), *dx = dev_copy(x, E * 4);
    CHECK_CUDA(mc_moe_combine(&mc_config_default, ds, dw, E, k, shexp, scale, dx, 0));
    CHECK_CUDA(cudaMemcpy(x, dx, E * 4, cudaMemcpyDeviceToHost));
    CHECK(!memcmp(x, want, E * 4), "combine E=%u k=%u shexp=%d scale=%g: not the cpu backend's bits", E, k, shexp,
          scale);
    printf("combine E=%u k=%u shexp=%d scale=%g: %s\n", E, k, shexp, scale,
           memcmp(x, want, E * 4) ? "DIFFERS" : "the cpu's bits");
    free(slots);
    free(w);
    free(x);
    free(want);
    cudaFree(ds);
    cudaFree(dw);
    cudaFree(dx);
}

/* ---- 4. the whole FFN --------------------------------------------------------------------- */

static void check_ffn(uint32_t type, uint32_t ne, uint32_t k, uint32_t E, uint32_t F) {
    stack router, gu, down;
    stack_make(&router, MEMRA_TYPE_F32, ne, E);
    /* expert 3's router row is expert 1's: equal logits, an exact tie */
    CHECK_CUDA(cudaMemcpy((float *)router.m.data + (size_t)3 * router.m.stride,
                          (float *)router.m.data + (size_t)1 * router.m.stride, E * 4, cudaMemcpyDeviceToDevice));
    memcpy(router.deq + (size_t)3 * E, router.deq + (size_t)1 * E, E * 4);
    stack_make(&gu, type, ne * 2 * F, E);
    stack_make(&down, type, ne * E, F);
    float *x = malloc(E * 4), *nw = malloc(E * 4);
    for (uint32_t i = 0; i < E; i++)
        x[i] = uni() * 2.0f, nw[i] = 0.5f + 0.25f * uni();
    float *dx = dev_copy(x, E * 4), *dnw = dev_copy(nw, E * 4), *dlog, *dw, *dact, *dslots;
    int32_t *dsel;
    CHECK_CUDA(cudaMalloc((void **)&dlog, (ne + 1) * 4));
    CHECK_CUDA(cudaMalloc((void **)&dw, (k + 1) * 4));
    CHECK_CUDA(cudaMalloc((void **)&dsel, k * 4));
    CHECK_CUDA(cudaMalloc((void **)&dact, (size_t)k * F * 4));
    CHECK_CUDA(cudaMalloc((void **)&dslots, (size_t)k * E * 4));
    const mc_config *c = &mcfg;
    CHECK_CUDA(mc_gemv(c, &router.m, dx, dnw, 1e-5f, NULL, NULL, dlog, 0));
    CHECK_CUDA(mc_moe_route(&mcfg, dlog, ne, k, 1, 0, dsel, dw, 0));
    CHECK_CUDA(mc_gemv_experts(&mcfg, &gu.m, 2 * F, dsel, k, 0, ne, dx, 0, dnw, 1e-5f, MC_GLU_SILU, dact, F, 0));
    CHECK_CUDA(mc_gemv_experts(&mcfg, &down.m, E, dsel, k, 0, ne, dact, F, NULL, 0.0f, MC_GLU_NONE, dslots, E, 0));
    CHECK_CUDA(mc_moe_combine(&mcfg, dslots, dw, E, k, 0, 1.0f, dx, 0));
    CHECK_CUDA(cudaDeviceSynchronize());
    int32_t *sel = malloc(k * 4);
    float *y = malloc(E * 4);
    CHECK_CUDA(cudaMemcpy(sel, dsel, k * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(y, dx, E * 4, cudaMemcpyDeviceToHost));
    /* reference: double router logits; the device's choice must be a top k of them (within 1e-4
     * of a logit's scale where two are near) and put expert 1 before expert 3 (their exact tie) */
    double ss = 0;
    for (uint32_t i = 0; i < E; i++)
        ss += (double)x[i] * x[i];
    const double rs = 1.0 / sqrt(ss / E + 1e-5);
    double *xn = malloc(E * 8), *lg = malloc(ne * 8), *out = calloc(E, 8), *mag = calloc(E, 8);
    for (uint32_t i = 0; i < E; i++)
        xn[i] = x[i] * rs * nw[i];
    for (uint32_t e = 0; e < ne; e++) {
        double a = 0;
        for (uint32_t i = 0; i < E; i++)
            a += router.deq[(size_t)e * E + i] * xn[i];
        lg[e] = a;
    }
    int pos1 = -1, pos3 = -1, valid = 1;
    uint8_t *chosen = calloc(ne, 1);
    for (uint32_t j = 0; j < k; j++) {
        valid &= sel[j] >= 0 && (uint32_t)sel[j] < ne && !chosen[sel[j]];
        if (!valid)
            break;
        chosen[sel[j]] = 1;
        pos1 = sel[j] == 1 ? (int)j : pos1;
        pos3 = sel[j] == 3 ? (int)j : pos3;
        if (j > 0)
            valid &= lg[sel[j]] <= lg[sel[j - 1]] + 1e-4;
    }
    for (uint32_t e = 0; valid && e < ne; e++)
        if (!chosen[e])
            valid &= lg[e] <= lg[sel[k - 1]] + 1e-4;
    CHECK(valid, "ffn %s ne=%u k=%u: the ids are not a top k of the reference logits", tname(type), ne, k);
    CHECK(pos3 < 0 || (pos1 >= 0 && pos1 < pos3), "ffn %s: the tie of experts 1 and 3 did not go to expert 1 first",
          tname(type));
    double mx = -INFINITY, sum = 0, tot = 0;
    for (uint32_t e = 0; e < ne; e++)
        mx = lg[e] > mx ? lg[e] : mx;
    for (uint32_t e = 0; e < ne; e++)
        sum += exp(lg[e] - mx);
    for (uint32_t j = 0; valid && j < k; j++)
        tot += exp(lg[sel[j]] - mx) / sum;
    double *act = malloc(F * 8);
    for (uint32_t j = 0; valid && j < k; j++) {
        const uint32_t e = (uint32_t)sel[j];
        const double wj = exp(lg[e] - mx) / sum / tot;
        for (uint32_t p = 0; p < F; p++) {
            double g = 0, u = 0;
            for (uint32_t i = 0; i < E; i++) {
                g += gu.deq[((size_t)e * 2 * F + 2 * p) * E + i] * xn[i];
                u += gu.deq[((size_t)e * 2 * F + 2 * p + 1) * E + i] * xn[i];
            }
            act[p] = g / (1.0 + exp(-g)) * u;
        }
        for (uint32_t i = 0; i < E; i++) {
            double d = 0, m = 0;
            for (uint32_t p = 0; p < F; p++) {
                d += down.deq[((size_t)e * E + i) * F + p] * act[p];
                m += fabs(down.deq[((size_t)e * E + i) * F + p] * act[p]);
            }
            out[i] += wj * d;
            mag[i] += wj * m;
        }
    }
    double num = 0, den = 0;
    for (uint32_t i = 0; valid && i < E; i++) {
        const double r = x[i] + out[i];
        num += (y[i] - r) * (y[i] - r);
        den += out[i] * out[i];
    }
    const double nmse = den > 0 ? num / den : 0;
    printf("ffn     %-4s ne=%3u k=%3u E=%4u F=%4u: ids a top k, tie 1<3 %s, nmse of the FFN output %.3g\n", tname(type),
           ne, k, E, F, pos3 < 0 ? "(not chosen)" : "kept", nmse);
    CHECK(valid && nmse < 1e-8, "ffn %s ne=%u k=%u: nmse %.3g", tname(type), ne, k, nmse);
    free(chosen);
    free(act);
    free(sel);
    free(y);
    free(x);
    free(nw);
    free(xn);
    free(lg);
    free(out);
    free(mag);
    cudaFree(dx);
    cudaFree(dnw);
    cudaFree(dlog);
    cudaFree(dw);
    cudaFree(dsel);
    cudaFree(dact);
    cudaFree(dslots);
    stack_free(&router);
    stack_free(&gu);
    stack_free(&down);
}

int main(void) {
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("check_moe: skipped: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    CHECK_CUDA(mc_gemv_prepare());
    mcfg = mc_config_default;
    mcfg.experts = MC_EXPERTS_FLOAT;
    const uint32_t ns[] = {8, 33, 128, 1024};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        const uint32_t ks[] = {1, 2, 8, ns[a]};
        for (size_t b = 0; b < 4; b++)
            if (ks[b] <= ns[a] && ks[b] <= MEMRA_MAX_EXPERTS_USED)
                for (int norm = 0; norm < 2; norm++)
                    check_route(ns[a], ks[b], norm, norm);
    }
    ecfg = mc_config_default;
    ecfg.experts = MC_EXPERTS_FLOAT; /* the float kernels (the default, int-gu, takes the Q8_0 gate/up) */
    const uint32_t types[] = {MEMRA_TYPE_F32, MEMRA_TYPE_F16, MEMRA_TYPE_BF16, MEMRA_TYPE_Q8_0};
    const int32_t sel8[8] = {5, 0, 7, 2, 3, 6, 1, 4};
    const int32_t sel_ep[4] = {2, 9, 5, -1}; /* held: [4, 8): 5 computed, the others zeros */
    for (int t = 0; t < 4; t++) {
        /* gate/up (interleaved, SiLU, the norm) and down (per-slot x): the shapes of moe-tiny, of
         * granite-moe-1b and qwen3moe-30b (one layer, a few experts), a column tail for the floats */
        check_experts(types[t], 8, 0, 2 * 64, 64, 2, sel8, MC_GLU_SILU, 1, 0, 0);
        check_experts(types[t], 8, 0, 64, 64, 8, sel8, MC_GLU_NONE, 0, 1, 0);
        check_experts(types[t], 8, 0, 2 * 512, 1024, 8, sel8, MC_GLU_SILU, 1, 0, 0);
        check_experts(types[t], 8, 0, 1024, 512, 8, sel8, MC_GLU_NONE, 0, 1, 0);
        check_experts(types[t], 8, 0, 2 * 768, 2048, 8, sel8, MC_GLU_SILU, 1, 0, 0);
        check_experts(types[t], 8, 0, 2048, 768, 8, sel8, MC_GLU_NONE, 0, 1, 0);
        if (types[t] != MEMRA_TYPE_Q8_0)
            check_experts(types[t], 8, 0, 2 * 36, 102, 8, sel8, MC_GLU_SILU, 1, 0, 0); /* a column tail */
        check_experts(types[t], 4, 4, 64, 64, 4, sel_ep, MC_GLU_NONE, 0, 1, 0);
        check_experts(types[t], 8, 0, 64, 64, 2, sel8 + 1, MC_GLU_NONE, 0, 1, 1); /* expert 0 changed */
    }
    /* moe_fuse bits 64 and 128 (gemv_experts_stream: the gate/up streamed by one wave of warps, column split 1
     * only) against the float64 reference: granite's and 30B's shapes, more groups than warps, ids
     * not held, a last group of 2 rows, a column tail (F32 .. BF16), the negative control; x a slot
     * (2 x 288 rows) is not the stream kernel's: the fallback to the loop kernel under the key */
    ecfg.moe_fuse = MC_MOE_FUSE_DEFAULT | MC_MOE_FUSE_STREAM | MC_MOE_FUSE_STREAM16;
    for (int t = 0; t < 4; t++) {
        check_experts(types[t], 8, 0, 2 * 512, 1024, 8, sel8, MC_GLU_SILU, 1, 0, 0);
        check_experts(types[t], 8, 0, 2 * 768, 2048, 8, sel8, MC_GLU_SILU, 1, 0, 0);
        check_experts(types[t], 8, 0, 2 * 288, 256, 8, sel8, MC_GLU_SILU, 1, 1, 0);
        check_experts(types[t], 4, 4, 2 * 545, 256, 4, sel_ep, MC_GLU_SILU, 1, 0, 0);
        check_experts(types[t], 8, 0, 2 * 290, types[t] == MEMRA_TYPE_Q8_0 ? 512 : 102, 8, sel8, MC_GLU_SILU, 1, 0, 0);
        check_experts(types[t], 8, 0, 2 * 1088, 256, 2, sel8 + 1, MC_GLU_SILU, 1, 0, 1); /* expert 0 changed */
    }
    ecfg = mcfg;
    /* the quantized families' experts (gemv_quant.h: each slot the family's 16-warp body; qdot=auto):
     * the shapes of the 30B and granite presets' layers and a few experts, an id not held, the
     * negative control */
    const uint32_t ftypes[] = {MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q4_1, MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q5_1,
                               MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q6_K};
    for (int t = 0; t < 7; t++) {
        check_experts(ftypes[t], 8, 0, 2 * 64, 256, 2, sel8, MC_GLU_SILU, 1, 0, 0);
        check_experts(ftypes[t], 8, 0, 64, 256, 8, sel8, MC_GLU_NONE, 0, 1, 0);
        check_experts(ftypes[t], 8, 0, 2 * 512, 1024, 8, sel8, MC_GLU_SILU, 1, 0, 0);
        check_experts(ftypes[t], 8, 0, 1024, 512, 8, sel8, MC_GLU_NONE, 0, 1, 0);
        check_experts(ftypes[t], 8, 0, 2048, 768, 8, sel8, MC_GLU_NONE, 0, 1, 0);
        check_experts(ftypes[t], 4, 4, 64, 256, 4, sel_ep, MC_GLU_NONE, 0, 1, 0);
        check_experts(ftypes[t], 4, 4, 2 * 64, 256, 4, sel_ep, MC_GLU_SILU, 1, 0, 0);
        check_experts(ftypes[t], 8, 0, 64, 256, 2, sel8 + 1, MC_GLU_NONE, 0, 1, 1); /* expert 0 changed */
    }
    /* experts=int: the Q8_0 stacks on the integer kernel's body a slot (other bits than float: the
     * reference bound, zeros, repeat and slot order as above; the flat key steps aside) */
    CHECK(mc_config_choice(&ecfg, "experts", "int") == NULL, "experts=int refused");
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 2 * 64, 64, 2, sel8, MC_GLU_SILU, 1, 0, 0);
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 64, 64, 8, sel8, MC_GLU_NONE, 0, 1, 0);
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 2 * 512, 1024, 8, sel8, MC_GLU_SILU, 1, 0, 0);
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 1024, 512, 8, sel8, MC_GLU_NONE, 0, 1, 0);
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 2 * 768, 2048, 8, sel8, MC_GLU_SILU, 1, 0, 0);
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 2048, 768, 8, sel8, MC_GLU_NONE, 0, 1, 0);
    check_experts(MEMRA_TYPE_Q8_0, 4, 4, 64, 64, 4, sel_ep, MC_GLU_NONE, 0, 1, 0);
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 64, 64, 2, sel8 + 1, MC_GLU_NONE, 0, 1, 1); /* expert 0 changed */
    /* moe_fuse bit 2048 (the int gate/up in one wave): granite's and 30B's gate/up, more groups than a wave's
     * blocks, ids not held with a last group of 2 rows, x a slot (the slot kernel), the negative control;
     * then int-gu (the down on the float kernel) */
    ecfg.moe_fuse |= MC_MOE_FUSE_IWAVE;
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 2 * 512, 1024, 8, sel8, MC_GLU_SILU, 1, 0, 0);
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 2 * 768, 2048, 8, sel8, MC_GLU_SILU, 1, 0, 0);
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 2 * 64, 64, 2, sel8, MC_GLU_SILU, 1, 0, 0);
    check_experts(MEMRA_TYPE_Q8_0, 4, 4, 2 * 545, 256, 4, sel_ep, MC_GLU_SILU, 1, 0, 0);
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 2 * 288, 256, 8, sel8, MC_GLU_SILU, 1, 1, 0);
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 2 * 1088, 256, 2, sel8 + 1, MC_GLU_SILU, 1, 0, 2); /* expert 0 changed */
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 2 * 768, 2048, 2, sel8 + 1, MC_GLU_SILU, 1, 0, 2); /* at 30B's shape */
    CHECK(mc_config_choice(&ecfg, "experts", "int-gu") == NULL, "experts=int-gu refused");
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 2 * 768, 2048, 8, sel8, MC_GLU_SILU, 1, 0, 0);
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 2048, 768, 8, sel8, MC_GLU_NONE, 0, 1, 0);
    check_experts(MEMRA_TYPE_Q8_0, 8, 0, 64, 64, 2, sel8 + 1, MC_GLU_NONE, 0, 1, 1); /* expert 0 changed */
    ecfg = mc_config_default;
    for (uint32_t k = 1; k <= 8; k *= 2)
        for (int sh = 0; sh < 2; sh++) {
            check_combine(2048, k, sh, 1.0f);
            check_combine(1024, k, sh, 0.22f);
        }
    for (int t = 0; t < 4; t++) {
        check_ffn(types[t], 8, 2, 64, 64);
        check_ffn(types[t], 8, 8, 64, 64); /* k = n_expert */
        check_ffn(types[t], 32, 8, 256, 128);
    }
    /* 5. the fused kernels (moe_fuse) */
    check_fused_refusals();
    const uint32_t rtypes[] = {MEMRA_TYPE_F32, MEMRA_TYPE_F16, MEMRA_TYPE_BF16};
    for (int t = 0; t < 3; t++) {
        check_router(rtypes[t], 8, 64, 2, 1, 0, 0, 0);     /* the tiny presets */
        check_router(rtypes[t], 32, 1024, 8, 0, 0, 1, 0);  /* granite-moe-1b, with its residual scale */
        check_router(rtypes[t], 128, 2048, 8, 1, 0, 0, 0); /* qwen3moe-30b */
        check_router(rtypes[t], 60, 2048, 4, 0, 1, 0, 0);  /* a shared gate, 15 groups */
        check_router(rtypes[t], 33, 516, 8, 1, 1, 1, 0);   /* a partial group, 129 chunks (F32) */
        check_router(rtypes[t], 64, 128, 64, 1, 0, 0, 0);  /* k = n = MEMRA_MAX_EXPERTS_USED */
        check_router(rtypes[t], 24, 256, 6, 1, 1, 1, 0);   /* bit 256's warp route: a partial warp, a shared gate */
        check_router(rtypes[t], 32, 128, 32, 1, 0, 0, 0);  /* bit 256's warp route: k = n = 32 */
        if (rtypes[t] != MEMRA_TYPE_F32)
            check_router(rtypes[t], 16, 100, 4, 1, 0, 1, 0); /* a column tail */
        check_router(rtypes[t], 32, 1024, 8, 1, 0, 0, 1);    /* negative control */
    }
    const int32_t sel8b[8] = {3, 0, 7, 2, 5, 6, 1, 4};
    const int32_t sel_ep2[2] = {9, 5}; /* held [4, 8): slot 0 zeros */
    for (int t = 0; t < 4; t++) {
        const uint32_t c4 = 128 * (types[t] == MEMRA_TYPE_F32 ? 4 : types[t] == MEMRA_TYPE_Q8_0 ? 16 : 8);
        check_down_combine(types[t], 8, 0, 64, 64, 2, sel8b, 0, 1.0f, 0);       /* the tiny presets (KS 4) */
        check_down_combine(types[t], 8, 0, 64, 64, 2, sel8b, 1, 1.0f, 0);       /* with a shared expert */
        check_down_combine(types[t], 8, 0, 1024, 512, 8, sel8b, 0, 0.22f, 0);   /* granite-moe-1b */
        check_down_combine(types[t], 8, 0, 2048, 768, 8, sel8b, 0, 1.0f, 0);    /* qwen3moe-30b */
        check_down_combine(types[t], 8, 0, 2048, c4, 4, sel8b, 1, 1.0f, 0);     /* 4 chunks a lane */
        check_down_combine(types[t], 8, 0, 2048, 2 * c4, 4, sel8b, 1, 1.0f, 0); /* 8: not served */
        check_down_combine(types[t], 4, 4, 64, 64, 2, sel_ep2, 0, 1.0f, 0);     /* an id not held */
        check_down_combine(types[t], 8, 0, 69, 64, 2, sel8b, 0, 1.0f, 0);       /* a row tail */
        if (types[t] == MEMRA_TYPE_F16 || types[t] == MEMRA_TYPE_BF16)
            check_down_combine(types[t], 8, 0, 70, 100, 2, sel8b, 1, 0.5f, 0); /* column tail, 70 rows */
        check_down_combine(types[t], 8, 0, 1024, 512, 8, sel8b, 0, 0.22f, 1);  /* negative control */
    }
    /* bit 1024 (gate/up rows of column split 1 only: k x 2F > 4224): granite-moe-1b's layer (F32
     * router, 32 experts, top 8, its residual scale) in every gate/up type; 8 experts, top 2;
     * a router of 24 experts (a partial warp); a column tail in the stack; 2048 columns; what it
     * does not serve (F16 and BF16 routers among them); the negative control */
    for (int t = 0; t < 4; t++) {
        check_routed(MEMRA_TYPE_F32, types[t], 32, 1024, 512, 8, 0, 1, 0);
        check_routed(MEMRA_TYPE_F32, types[t], 8, 64, 1088, 2, 1, 0, 0);
        check_routed(MEMRA_TYPE_F32, types[t], 24, 768, 384, 6, 1, 1, 0);
    }
    check_routed(MEMRA_TYPE_F32, MEMRA_TYPE_F16, 16, 512, 1088, 2, 0, 0, 0);
    check_routed(MEMRA_TYPE_F32, MEMRA_TYPE_BF16, 16, 100, 1088, 2, 1, 1, 0);  /* a column tail in the stack */
    check_routed(MEMRA_TYPE_F32, MEMRA_TYPE_BF16, 32, 2048, 288, 8, 1, 1, 0);  /* 4 chunks a lane of the router */
    check_routed(MEMRA_TYPE_F32, MEMRA_TYPE_BF16, 32, 1024, 512, 8, 0, 1, 1);  /* negative control */
    {
        const int before = failures;
        mc_matrix rt, g;
        memset(&rt, 0, sizeof rt), memset(&g, 0, sizeof g);
        rt.type = MEMRA_TYPE_F32, rt.rows = 32, rt.cols = 1024, rt.stride = 1024;
        g.type = MEMRA_TYPE_BF16, g.rows = 32 * 1024, g.cols = 1024, g.stride = 1024;
        CHECK(mc_experts_routed_serves(&rt, &g, 1024, 8), "routed: granite's layer should be served");
        rt.rows = 128, g.rows = 128 * 1024;
        CHECK(!mc_experts_routed_serves(&rt, &g, 1024, 8), "routed: 128 experts served (the warp route takes 32)");
        rt.rows = 32, rt.cols = 2048, g.rows = 32 * 1024, g.cols = 2048;
        CHECK(mc_experts_routed_serves(&rt, &g, 1024, 8), "routed: 32 experts of 2048 columns should be served");
        rt.cols = 1024, g.cols = 1024, g.type = MEMRA_TYPE_Q4_K;
        CHECK(!mc_experts_routed_serves(&rt, &g, 1024, 8), "routed: a Q4_K stack served");
        g.type = MEMRA_TYPE_BF16, rt.type = MEMRA_TYPE_BF16;
        CHECK(!mc_experts_routed_serves(&rt, &g, 1024, 8), "routed: a BF16 router served");
        rt.type = MEMRA_TYPE_F32;
        g.type = MEMRA_TYPE_BF16, rt.rows = 8, g.rows = 8 * 128, g.cols = 64, rt.cols = 64;
        CHECK(!mc_experts_routed_serves(&rt, &g, 128, 2), "routed: a gate/up of column split 4 served");
        rt.rows = 32, rt.cols = 1024, g.rows = 32 * 1024, g.cols = 1024;
        CHECK(mc_gemv_experts_routed(&mcfg, &rt, &g, 1024, 8, 1, NULL, NULL, 0.0f, NULL, 0.0f, NULL, NULL, NULL, NULL,
                                     0, 0) == cudaErrorInvalidValue,
              "routed: a launch without x or norm weights not refused");
        printf("routed launcher: what it serves and refuses %s\n", failures > before ? "DIFFERS" : "as documented");
    }
    for (int t = 0; t < 4; t++) {
        check_ffn_fused(types[t], 8, 2, 64, 64);
        check_ffn_fused(types[t], 32, 8, 256, 128);
        check_ffn_fused(types[t], 128, 8, 2048, 64);
    }
    /* the default arm's Q8_0 experts (experts=int-gu, the gate/up in one wave): the FFN against the float64
     * reference, and fused against unfused */
    mcfg = mc_config_default;
    check_ffn(MEMRA_TYPE_Q8_0, 8, 2, 64, 64);
    check_ffn(MEMRA_TYPE_Q8_0, 32, 8, 256, 128);
    check_ffn_fused(MEMRA_TYPE_Q8_0, 32, 8, 256, 128);
    check_ffn_fused(MEMRA_TYPE_Q8_0, 128, 8, 2048, 64);
    printf("check_moe: %s (%d failures)\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
