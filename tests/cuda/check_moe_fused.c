/* check_moe_fused.c: part 5 of check_moe (check_moe.c says what it checks): the fused
 * mixture-of-experts kernels (the router with the top k, the down GEMV with the weighted sum, the
 * router in the gate/up launch) against the unfused ones, bit for bit, with negative controls. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_moe.h"
#include "check_program.h"
#include "cuda_kernels.h"
#include "memra/gguf.h"

/* ---- 5. the fused kernels against the unfused ones ---------------------------------------- */

static int same_bits(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* Flips a high bit of the first weight of a stack's device copy (its most significant byte: an
 * exponent bit of a float, a high bit of a Q8_0 quant): the negative control. */
static void corrupt_first(stack *s) {
    const uint32_t eb = s->m.type == MEMRA_TYPE_F32 ? 4 : s->m.type == MEMRA_TYPE_Q8_0 ? 1 : 2;
    uint8_t v;
    CHECK_CUDA(cudaMemcpy(&v, (uint8_t *)s->m.data + eb - 1, 1, cudaMemcpyDeviceToHost));
    v ^= 0x40;
    CHECK_CUDA(cudaMemcpy((uint8_t *)s->m.data + eb - 1, &v, 1, cudaMemcpyHostToDevice));
}

/* mc_moe_router (router of type, n experts, cols; top k, norm, a shared gate logit, granite's po)
 * against mc_gemv [+ mc_scale_add] + mc_moe_route; corrupt: the negative control. */
void check_router(uint32_t type, uint32_t n, uint32_t cols, uint32_t k, int norm, int shexp, int po, int corrupt) {
    stack r;
    stack_make(&r, type, n, cols);
    if (n >= 4) /* expert 3's row is expert 1's: an exact tie */
        CHECK_CUDA(cudaMemcpy((char *)r.m.data + (size_t)3 * r.m.stride * (type == MEMRA_TYPE_F32 ? 4 : 2),
                              (char *)r.m.data + (size_t)1 * r.m.stride * (type == MEMRA_TYPE_F32 ? 4 : 2),
                              (size_t)r.m.stride * (type == MEMRA_TYPE_F32 ? 4 : 2), cudaMemcpyDeviceToDevice));
    CHECK(mc_moe_router_serves(&r.m), "router %s n=%u cols=%u: not served", tname(type), n, cols);
    float *x = malloc(cols * 4), *nw = malloc(cols * 4), *pov = malloc(cols * 4);
    for (uint32_t i = 0; i < cols; i++)
        x[i] = uni() * 2.0f, nw[i] = 0.5f + 0.25f * uni(), pov[i] = uni();
    const float sc = 0.22f, gate = uni() * 3.0f;
    float *dx0 = dev_copy(x, cols * 4), *dx1 = dev_copy(x, cols * 4), *dnw = dev_copy(nw, cols * 4);
    float *dpo = dev_copy(pov, cols * 4), *dl0, *dl1, *dw0, *dw1;
    int32_t *ds0, *ds1;
    uint32_t *dt;
    CHECK_CUDA(cudaMalloc((void **)&dl0, (n + 1) * 4));
    CHECK_CUDA(cudaMalloc((void **)&dl1, (n + 1) * 4));
    CHECK_CUDA(cudaMemcpy(dl0 + n, &gate, 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dl1 + n, &gate, 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMalloc((void **)&dw0, (k + 1) * 4));
    CHECK_CUDA(cudaMalloc((void **)&dw1, (k + 1) * 4));
    CHECK_CUDA(cudaMalloc((void **)&ds0, k * 4));
    CHECK_CUDA(cudaMalloc((void **)&ds1, k * 4));
    CHECK_CUDA(cudaMalloc((void **)&dt, 16));
    CHECK_CUDA(cudaMemset(dt, 0, 16));
    const mc_config *c = &mcfg;
    if (po)
        CHECK_CUDA(mc_scale_add(c, dpo, cols, sc, dx0, 0));
    CHECK_CUDA(mc_gemv(c, &r.m, dx0, dnw, 1e-5f, NULL, NULL, dl0, 0));
    CHECK_CUDA(mc_moe_route(c, dl0, n, k, norm, shexp, ds0, dw0, 0));
    if (corrupt)
        corrupt_first(&r);
    int ok = 1, caught = 1; /* caught: every launch of every variant told the changed weight apart */
    /* two launches each (the second finds the first's ticket reset): the ticket's kernel; the cluster's
     * (moe_fuse bit 16); with its logits in shared memory (256); as one block where n <= 32 (512), with
     * and without 256 */
    const uint32_t cl = MC_MOE_FUSE_CLUSTER, ds = MC_MOE_FUSE_DSMEM, one = MC_MOE_FUSE_ONEBLOCK;
    const uint32_t variants[] = {0, cl, cl | ds, cl | one, cl | ds | one};
    const uint32_t nv = sizeof variants / sizeof variants[0];
    for (uint32_t rep = 0; rep < 2 * nv; rep++) {
        mc_config cf = *c;
        cf.moe_fuse = (cf.moe_fuse & ~(cl | ds | one)) | variants[rep / 2];
        CHECK_CUDA(cudaMemcpy(dx1, x, cols * 4, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemset(ds1, 0xff, k * 4));
        CHECK_CUDA(cudaMemset(dw1, 0xff, (k + 1) * 4));
        CHECK_CUDA(mc_moe_router(&cf, &r.m, dx1, po ? dpo : NULL, po ? sc : 0.0f, dnw, 1e-5f, dl1, k, norm, shexp, ds1,
                                 dw1, dt, 0));
        CHECK_CUDA(cudaDeviceSynchronize());
        float *l0 = malloc((n + 1) * 4), *l1 = malloc((n + 1) * 4), *w0 = malloc((k + 1) * 4),
              *w1 = malloc((k + 1) * 4);
        float *x0 = malloc(cols * 4), *x1 = malloc(cols * 4);
        int32_t *s0 = malloc(k * 4), *s1 = malloc(k * 4);
        uint32_t t = 1;
        CHECK_CUDA(cudaMemcpy(l0, dl0, (n + 1) * 4, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(l1, dl1, (n + 1) * 4, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(w0, dw0, (k + shexp) * 4, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(w1, dw1, (k + shexp) * 4, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(s0, ds0, k * 4, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(s1, ds1, k * 4, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(x0, dx0, cols * 4, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(x1, dx1, cols * 4, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(&t, dt, 4, cudaMemcpyDeviceToHost));
        const int same = same_bits(l0, l1, n * 4) && same_bits(w0, w1, (k + shexp) * 4) && same_bits(s0, s1, k * 4) &&
                         same_bits(x0, x1, cols * 4) && t == 0;
        ok &= same;
        caught &= !same;
        if (!corrupt)
            CHECK(ok,
                  "router %s n=%u cols=%u k=%u norm=%d shexp=%d po=%d, moe_fuse bits %u, launch %u: not the "
                  "unfused bits (logits %s, ids %s, weights %s, x %s, ticket %u)",
                  tname(type), n, cols, k, norm, shexp, po, variants[rep / 2], rep % 2 + 1,
                  same_bits(l0, l1, n * 4) ? "=" : "DIFFER", same_bits(s0, s1, k * 4) ? "=" : "DIFFER",
                  same_bits(w0, w1, (k + shexp) * 4) ? "=" : "DIFFER", same_bits(x0, x1, cols * 4) ? "=" : "DIFFER", t);
        free(l0), free(l1), free(w0), free(w1), free(x0), free(x1), free(s0), free(s1);
    }
    if (corrupt)
        CHECK(caught, "router %s: a changed weight was not told apart by every variant (negative control)",
              tname(type));
    printf("router  %-4s n=%4u cols=%4u k=%u norm=%d shexp=%d po=%d%s: %s\n", tname(type), n, cols, k, norm, shexp, po,
           corrupt ? " (negative control)" : "",
           corrupt ? (caught ? "caught by every variant" : "MISSED") : (ok ? "the unfused bits" : "DIFFERS"));
    free(x), free(nw), free(pov);
    cudaFree(dx0), cudaFree(dx1), cudaFree(dnw), cudaFree(dpo), cudaFree(dl0), cudaFree(dl1);
    cudaFree(dw0), cudaFree(dw1), cudaFree(ds0), cudaFree(ds1), cudaFree(dt);
    stack_free(&r);
}

/* mc_gemv_experts_combine against mc_gemv_experts (down, per-slot inputs) + mc_moe_combine. */
void check_down_combine(uint32_t type, uint32_t held, uint32_t e0, uint32_t rows_e, uint32_t cols, uint32_t k,
                        const int32_t *sel, int shexp, float scale, int corrupt) {
    stack s;
    stack_make(&s, type, held * rows_e, cols);
    if (!mc_experts_combine_serves(&s.m, rows_e, k)) { /* the layer runs unfused: the launcher refuses */
        CHECK(mc_gemv_experts_combine(&mcfg, &s.m, rows_e, NULL, k, e0, e0 + held, NULL, cols, NULL, NULL, 1.0f, NULL,
                                      NULL, 0.0f, 0, 0) == cudaErrorInvalidValue,
              "combine %s rows_e=%u cols=%u k=%u: a shape it does not serve launched", tname(type), rows_e, cols, k);
        printf("combine %-4s rows_e=%5u cols=%5u k=%u: not served (unfused)\n", tname(type), rows_e, cols, k);
        stack_free(&s);
        return;
    }
    float *act = malloc((size_t)k * cols * 4), *w = malloc((k + 1) * 4), *x = malloc(rows_e * 4);
    float *sh = malloc(rows_e * 4);
    for (size_t i = 0; i < (size_t)k * cols; i++)
        act[i] = uni();
    for (uint32_t j = 0; j <= k; j++)
        w[j] = 0.5f * (uni() + 1.0f);
    for (uint32_t i = 0; i < rows_e; i++)
        x[i] = uni() * 4.0f, sh[i] = uni();
    float *dact = dev_copy(act, (size_t)k * cols * 4), *dw = dev_copy(w, (k + 1) * 4), *dx0 = dev_copy(x, rows_e * 4);
    float *dx1 = dev_copy(x, rows_e * 4), *dslots;
    int32_t *dsel = dev_copy(sel, k * 4);
    CHECK_CUDA(cudaMalloc((void **)&dslots, (size_t)(k + 1) * rows_e * 4));
    CHECK_CUDA(cudaMemcpy(dslots + (size_t)k * rows_e, sh, rows_e * 4, cudaMemcpyHostToDevice));
    const mc_config *c = &mcfg;
    CHECK_CUDA(mc_gemv_experts(c, &s.m, rows_e, dsel, k, e0, e0 + held, dact, cols, NULL, 0.0f, MC_GLU_NONE, dslots,
                               rows_e, 0));
    CHECK_CUDA(mc_moe_combine(c, dslots, dw, rows_e, k, shexp, scale, dx0, 0));
    if (corrupt)
        corrupt_first(&s);
    CHECK_CUDA(mc_gemv_experts_combine(c, &s.m, rows_e, dsel, k, e0, e0 + held, dact, cols, dw,
                                       shexp ? dslots + (size_t)k * rows_e : NULL, scale, dx1, NULL, 0.0f, 0, 0));
    CHECK_CUDA(cudaDeviceSynchronize());
    float *y0 = malloc(rows_e * 4), *y1 = malloc(rows_e * 4);
    CHECK_CUDA(cudaMemcpy(y0, dx0, rows_e * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(y1, dx1, rows_e * 4, cudaMemcpyDeviceToHost));
    const int ok = same_bits(y0, y1, rows_e * 4);
    if (corrupt)
        CHECK(!ok, "combine %s: a changed weight was not told apart (negative control)", tname(type));
    else
        CHECK(ok, "combine %s rows_e=%u cols=%u k=%u shexp=%d scale=%g: not the unfused bits", tname(type), rows_e,
              cols, k, shexp, scale);
    printf("combine %-4s rows_e=%5u cols=%5u k=%u shexp=%d scale=%g%s: %s\n", tname(type), rows_e, cols, k, shexp,
           scale, corrupt ? " (negative control)" : "",
           corrupt ? (ok ? "MISSED" : "caught") : (ok ? "the unfused bits" : "DIFFERS"));
    free(act), free(w), free(x), free(sh), free(y0), free(y1);
    cudaFree(dact), cudaFree(dw), cudaFree(dx0), cudaFree(dx1), cudaFree(dslots), cudaFree(dsel);
    stack_free(&s);
}

/* What the fused launchers refuse: a Q8_0 router (its unfused GEMV takes other kernels), more than
 * 128 experts, rows too long for a lane's 4 chunks; k x KS over 8 warps. */
void check_fused_refusals(void) {
    const int before = failures;
    mc_matrix m;
    memset(&m, 0, sizeof m);
    m.type = MEMRA_TYPE_F32, m.rows = 128, m.cols = 2048, m.stride = 2048;
    CHECK(mc_moe_router_serves(&m), "router F32 128 x 2048 should be served");
    m.cols = 2052;
    CHECK(!mc_moe_router_serves(&m), "router F32 128 x 2052 (5 chunks a lane) served");
    m.cols = 2048, m.rows = 129;
    CHECK(!mc_moe_router_serves(&m), "router of 129 experts served");
    m.rows = 128, m.type = MEMRA_TYPE_Q8_0;
    CHECK(!mc_moe_router_serves(&m), "Q8_0 router served");
    m.type = MEMRA_TYPE_BF16, m.cols = 4096;
    CHECK(mc_moe_router_serves(&m), "router BF16 128 x 4096 should be served");
    CHECK(mc_moe_router(&mcfg, &m, NULL, NULL, 0.0f, NULL, 0.0f, NULL, 2, 1, 0, NULL, NULL, NULL, 0) ==
              cudaErrorInvalidValue,
          "router launch without norm weights or ticket not refused");
    m.type = MEMRA_TYPE_Q8_0, m.rows = 8 * 64, m.cols = 64;
    CHECK(!mc_experts_combine_serves(&m, 64, 8), "combine k=8 at KS 4 (32 warps) served");
    CHECK(mc_experts_combine_serves(&m, 64, 2), "combine k=2 at KS 4 should be served");
    m.rows = 8 * 2048, m.cols = 768;
    CHECK(mc_experts_combine_serves(&m, 2048, 8), "combine 30B's down should be served");
    m.cols = 4608; /* 288 chunks: 9 a lane at KS 1 */
    CHECK(!mc_experts_combine_serves(&m, 2048, 8), "combine with 9 chunks a lane served");
    m.type = MEMRA_TYPE_BF16, m.rows = 32 * 1024, m.cols = 512;
    CHECK(mc_experts_combine_serves(&m, 1024, 8), "combine granite's down (bf16) should be served");
    printf("fused launchers: what they serve and refuse %s\n", failures > before ? "DIFFERS" : "as documented");
}

/* The whole FFN of check 4 through the fused kernels (router with its top k, gate/up, down with
 * the combine) against the unfused chain: the same bits. */
void check_ffn_fused(uint32_t type, uint32_t ne, uint32_t k, uint32_t E, uint32_t F) {
    stack router, gu, down;
    stack_make(&router, MEMRA_TYPE_F32, ne, E);
    stack_make(&gu, type, ne * 2 * F, E);
    stack_make(&down, type, ne * E, F);
    float *x = malloc(E * 4), *nw = malloc(E * 4);
    for (uint32_t i = 0; i < E; i++)
        x[i] = uni() * 2.0f, nw[i] = 0.5f + 0.25f * uni();
    float *y[2];
    for (int f = 0; f < 2; f++) {
        float *dx = dev_copy(x, E * 4), *dnw = dev_copy(nw, E * 4), *dlog, *dw, *dact, *dslots;
        int32_t *dsel;
        uint32_t *dt;
        CHECK_CUDA(cudaMalloc((void **)&dlog, (ne + 1) * 4));
        CHECK_CUDA(cudaMalloc((void **)&dw, (k + 1) * 4));
        CHECK_CUDA(cudaMalloc((void **)&dsel, k * 4));
        CHECK_CUDA(cudaMalloc((void **)&dact, (size_t)k * F * 4));
        CHECK_CUDA(cudaMalloc((void **)&dslots, (size_t)k * E * 4));
        CHECK_CUDA(cudaMalloc((void **)&dt, 16));
        CHECK_CUDA(cudaMemset(dt, 0, 16));
        const mc_config *c = &mcfg;
        CHECK(mc_moe_router_serves(&router.m), "ffn fused: router %u x %u not served", ne, E);
        if (f) {
            CHECK_CUDA(mc_moe_router(c, &router.m, dx, NULL, 0.0f, dnw, 1e-5f, dlog, k, 1, 0, dsel, dw, dt, 0));
        } else {
            CHECK_CUDA(mc_gemv(c, &router.m, dx, dnw, 1e-5f, NULL, NULL, dlog, 0));
            CHECK_CUDA(mc_moe_route(c, dlog, ne, k, 1, 0, dsel, dw, 0));
        }
        CHECK_CUDA(mc_gemv_experts(c, &gu.m, 2 * F, dsel, k, 0, ne, dx, 0, dnw, 1e-5f, MC_GLU_SILU, dact, F, 0));
        if (f && mc_experts_combine_serves(&down.m, E, k)) {
            CHECK_CUDA(
                mc_gemv_experts_combine(c, &down.m, E, dsel, k, 0, ne, dact, F, dw, NULL, 1.0f, dx, NULL, 0.0f, 0, 0));
        } else {
            CHECK_CUDA(mc_gemv_experts(c, &down.m, E, dsel, k, 0, ne, dact, F, NULL, 0.0f, MC_GLU_NONE, dslots, E, 0));
            CHECK_CUDA(mc_moe_combine(c, dslots, dw, E, k, 0, 1.0f, dx, 0));
        }
        CHECK_CUDA(cudaDeviceSynchronize());
        y[f] = malloc(E * 4);
        CHECK_CUDA(cudaMemcpy(y[f], dx, E * 4, cudaMemcpyDeviceToHost));
        cudaFree(dx), cudaFree(dnw), cudaFree(dlog), cudaFree(dw), cudaFree(dact), cudaFree(dslots), cudaFree(dsel);
        cudaFree(dt);
    }
    const int ok = same_bits(y[0], y[1], E * 4);
    CHECK(ok, "ffn fused %s ne=%u k=%u E=%u F=%u: not the unfused bits", tname(type), ne, k, E, F);
    printf("ffn     %-4s ne=%3u k=%3u E=%4u F=%4u fused (router%s): %s\n", tname(type), ne, k, E, F,
           mc_experts_combine_serves(&down.m, E, k) ? ", down with the combine" : "",
           ok ? "the unfused bits" : "DIFFERS");
    free(y[0]), free(y[1]), free(x), free(nw);
    stack_free(&router);
    stack_free(&gu);
    stack_free(&down);
}

/* What check_routed compares: the logits, ids, weights, SwiGLU slots and x, copied to the host after
 * the launches are done. */
typedef struct routed_out {
    float *l, *w, *a, *x;
    int32_t *s;
} routed_out;
static void routed_fetch(routed_out *o, const float *dl, const int32_t *ds, const float *dw, const float *da,
                         const float *dx, uint32_t n, uint32_t k, uint32_t E, uint32_t F) {
    CHECK_CUDA(cudaDeviceSynchronize());
    o->l = malloc(n * 4), o->w = malloc(k * 4), o->a = malloc((size_t)k * F * 4), o->x = malloc(E * 4);
    o->s = malloc(k * 4);
    CHECK_CUDA(cudaMemcpy(o->l, dl, n * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(o->w, dw, k * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(o->s, ds, k * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(o->a, da, (size_t)k * F * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(o->x, dx, E * 4, cudaMemcpyDeviceToHost));
}
static void routed_free(routed_out *o) { free(o->l), free(o->w), free(o->a), free(o->x), free(o->s); }

/* moe_fuse bit 1024: mc_gemv_experts_routed (the router of type rtype in every block of the
 * gate/up launch of a gtype stack) then mc_gemv_experts_combine with po and late, against the
 * default arm's chain (mc_moe_router writing granite's x + po * scale into x, mc_gemv_experts,
 * mc_gemv_experts_combine): logits, ids, weights, the SwiGLU slots and the final x equal, the
 * routed launch leaving x as it was; launched twice. corrupt: the router's first weight changed
 * on the device after the reference (the negative control: the routed logits must differ). */
void check_routed(uint32_t rtype, uint32_t gtype, uint32_t n, uint32_t E, uint32_t F, uint32_t k, int norm, int po,
                  int corrupt) {
    stack r, gu, down;
    stack_make(&r, rtype, n, E);
    stack_make(&gu, gtype, n * 2 * F, E);
    stack_make(&down, gtype, n * E, F);
    const int served = mc_experts_routed_serves(&r.m, &gu.m, 2 * F, k) && mc_experts_combine_serves(&down.m, E, k);
    CHECK(served, "routed %s/%s n=%u E=%u F=%u k=%u: not served", tname(rtype), tname(gtype), n, E, F, k);
    if (!served) {
        stack_free(&r), stack_free(&gu), stack_free(&down);
        return;
    }
    float *x = malloc(E * 4), *nw = malloc(E * 4), *pov = malloc(E * 4);
    for (uint32_t i = 0; i < E; i++)
        x[i] = uni() * 2.0f, nw[i] = 0.5f + 0.25f * uni(), pov[i] = uni();
    const float sc = po ? 0.22f : 1.0f;
    float *dx0 = dev_copy(x, E * 4), *dnw = dev_copy(nw, E * 4), *dpo = dev_copy(pov, E * 4), *dl0, *dw0, *da0;
    int32_t *ds0;
    uint32_t *dt;
    CHECK_CUDA(cudaMalloc((void **)&dl0, (n + 1) * 4));
    CHECK_CUDA(cudaMalloc((void **)&dw0, (k + 1) * 4));
    CHECK_CUDA(cudaMalloc((void **)&ds0, k * 4));
    CHECK_CUDA(cudaMalloc((void **)&da0, (size_t)k * F * 4));
    CHECK_CUDA(cudaMalloc((void **)&dt, 16));
    CHECK_CUDA(cudaMemset(dt, 0, 16));
    const mc_config *c = &mcfg; /* bits 16 and 256 (and 512): the default router */
    CHECK_CUDA(
        mc_moe_router(c, &r.m, dx0, po ? dpo : NULL, po ? sc : 0.0f, dnw, 1e-5f, dl0, k, norm, 0, ds0, dw0, dt, 0));
    CHECK_CUDA(mc_gemv_experts(c, &gu.m, 2 * F, ds0, k, 0, n, dx0, 0, dnw, 1e-5f, MC_GLU_SILU, da0, F, 0));
    CHECK_CUDA(mc_gemv_experts_combine(c, &down.m, E, ds0, k, 0, n, da0, F, dw0, NULL, sc, dx0, NULL, 0.0f, 0, 0));
    routed_out o0;
    routed_fetch(&o0, dl0, ds0, dw0, da0, dx0, n, k, E, F);
    if (corrupt)
        corrupt_first(&r);
    int ok = 1, caught = 1;
    for (int rep = 0; rep < 2; rep++) {
        float *dx1 = dev_copy(x, E * 4), *dl1, *dw1, *da1;
        int32_t *ds1;
        CHECK_CUDA(cudaMalloc((void **)&dl1, (n + 1) * 4));
        CHECK_CUDA(cudaMalloc((void **)&dw1, (k + 1) * 4));
        CHECK_CUDA(cudaMalloc((void **)&ds1, k * 4));
        CHECK_CUDA(cudaMalloc((void **)&da1, (size_t)k * F * 4));
        CHECK_CUDA(cudaMemset(dl1, 0xff, (n + 1) * 4));
        CHECK_CUDA(cudaMemset(ds1, 0xff, k * 4));
        CHECK_CUDA(cudaMemset(dw1, 0xff, (k + 1) * 4));
        mc_config cf = *c;
        cf.moe_fuse |= MC_MOE_FUSE_ROUTED;
        CHECK_CUDA(mc_gemv_experts_routed(&cf, &r.m, &gu.m, 2 * F, k, norm, dx1, po ? dpo : NULL, po ? sc : 0.0f, dnw,
                                          1e-5f, dl1, ds1, dw1, da1, F, 0));
        CHECK_CUDA(cudaDeviceSynchronize());
        float *xm = malloc(E * 4);
        CHECK_CUDA(cudaMemcpy(xm, dx1, E * 4, cudaMemcpyDeviceToHost));
        const int x_kept = same_bits(xm, x, E * 4);
        CHECK_CUDA(mc_gemv_experts_combine(&cf, &down.m, E, ds1, k, 0, n, da1, F, dw1, NULL, sc, dx1, po ? dpo : NULL,
                                           po ? sc : 0.0f, 1, 0));
        routed_out o1;
        routed_fetch(&o1, dl1, ds1, dw1, da1, dx1, n, k, E, F);
        const int sl = same_bits(o0.l, o1.l, n * 4), ss = same_bits(o0.s, o1.s, k * 4),
                  sw = same_bits(o0.w, o1.w, k * 4);
        const int sa = same_bits(o0.a, o1.a, (size_t)k * F * 4), sx = same_bits(o0.x, o1.x, E * 4);
        ok &= sl && ss && sw && sa && sx && x_kept;
        caught &= !sl;
        if (!corrupt)
            CHECK(sl && ss && sw && sa && sx && x_kept,
                  "routed %s/%s n=%u E=%u F=%u k=%u norm=%d po=%d, launch %d: not the unfused bits "
                  "(logits %s, ids %s, "
                  "weights %s, slots %s, x %s, x before the combine %s)",
                  tname(rtype), tname(gtype), n, E, F, k, norm, po, rep + 1, sl ? "=" : "DIFFER", ss ? "=" : "DIFFER",
                  sw ? "=" : "DIFFER", sa ? "=" : "DIFFER", sx ? "=" : "DIFFER", x_kept ? "kept" : "WRITTEN");
        free(xm);
        routed_free(&o1);
        cudaFree(dx1), cudaFree(dl1), cudaFree(dw1), cudaFree(da1), cudaFree(ds1);
    }
    if (corrupt)
        CHECK(caught, "routed %s/%s: a changed router weight was not told apart (negative control)", tname(rtype),
              tname(gtype));
    printf("routed  %-4s/%-4s n=%2u E=%4u F=%4u k=%u norm=%d po=%d%s: %s\n", tname(rtype), tname(gtype), n, E, F, k,
           norm, po, corrupt ? " (negative control)" : "",
           corrupt ? (caught ? "caught" : "MISSED") : (ok ? "the unfused bits" : "DIFFERS"));
    free(x), free(nw), free(pov);
    routed_free(&o0);
    cudaFree(dx0), cudaFree(dnw), cudaFree(dpo), cudaFree(dl0), cudaFree(dw0), cudaFree(da0), cudaFree(ds0);
    cudaFree(dt);
    stack_free(&r), stack_free(&gu), stack_free(&down);
}
