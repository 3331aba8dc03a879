/* check_attn_chunk.c: a prefill chunk's attention (issue 28, backends/cuda/attention.cu:
 * mc_attention_chunk, attention_chunk_rows at hd <= 128) bit for bit against decode's attention
 * run row by row (mc_attention_fused: attention_decode_cluster, one launch per row at its own
 * position, each appending its row), and against the chunk's old launch (mc_attention_chunk_cluster:
 * the cluster kernel's chunk rows), on random q/k/v and a random cache prefix: hd 32, 64, 128 and
 * 256, G 1, 2, 3, 4, 8, M 1, 7, 512, prefixes 0, 300, 1000, kv f32, f16, bf16, sliding windows, q
 * and k norms, both RoPE pairings, a file's scale. Every output and the appended cache rows are
 * compared, each output written over NaNs first. Decode under attention=heads (a kv head's q heads
 * in several clusters: one a head where 8 blocks a cluster fit the device, e.g. G 4 on 2 kv heads;
 * two heads a cluster for G 4 on 8) runs row by row too and must give decode's bits and cache rows.
 * Negative control: the split path's chunk
 * (attention=split: the same attention, other reduction order) must differ from decode's bits
 * somewhere in every control case, while staying close (so the reference is attention).
 * attention=mma (attention_mma.cu, tensor cores): its chunk in one launch and in two (an odd
 * first part) against its own decode row by row, outputs and cache rows, on 35 cases (hd 32, 64,
 * 128; G 1, 2, 3, 4, 8; every kv type, q8 included; windows, norms, neox, a scale; prefixes past
 * 2,048 positions, where decode's blocks take several spans and its merge several batches, two of
 * them past 8,192, where attdec=warp's blocks take two groups; seven under attfold=tier, each of
 * which must differ from attfold=span's decode past 384 positions);
 * against the cluster path's decode each must differ somewhere (the control) and stay within nmse
 * 1e-3 (kv=q8: the cluster path at f32 on the prefix's values as q8 reads them back). Each also
 * decodes under attdec=warp (a warp a span; not kv=q8 at hd 128), which must give attdec=block's
 * outputs and cache rows bit for bit (its tier cases, too, must differ from span's decode).
 *
 *   memra_cuda_check_attn_chunk          exit 0 pass, 1 a mismatch or an uncaught control, 77 no device
 *   memra_cuda_check_attn_chunk mma [FIRST [LAST]]   attention=mma's cases alone (all, one, or a
 *                                        range of their indices), a line a case
 *   memra_cuda_check_attn_chunk bench    the chunk attention alone (us a launch, CUDA events): the
 *                                        cluster kernel's launch, attchunk=rows and attchunk=phased
 *                                        and attention=mma's chunk on llama-1b's and llama-8b's
 *                                        shapes, M 512 at prefixes 0 and 512, kv f32 and bf16 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "cuda_kernels.h"
#include "memra/numeric.h"

typedef struct ac_case {
    uint32_t hd, G, M, prefix, kv, window;
    int norm, neox;
    float scale;
    uint32_t n_kv; /* 0: 2 */
    int tier;      /* attention=mma's attfold=tier (0: span) */
} ac_case;

/* One stored cache value of kv from f (its bytes at dst). */
static void ac_put(void *dst, size_t i, uint32_t kv, float f) {
    if (kv == MC_KV_F32)
        ((float *)dst)[i] = f;
    else
        ((uint16_t *)dst)[i] = kv == MC_KV_F16 ? memra_f32_to_f16(f) : memra_f32_to_bf16(f);
}

/* A q8 row of hd values (hd a multiple of 32) at dst: memra_kv_q8_*'s scales, then quants. */
static void ac_put_q8(uint8_t *dst, const float *x, uint32_t hd) {
    for (uint32_t b0 = 0; b0 < hd; b0 += 32) {
        float a = 0.0f;
        for (uint32_t i = 0; i < 32; i++)
            a = memra_kv_q8_amax(a, x[b0 + i]);
        const float d = memra_kv_q8_scale(a);
        memcpy(dst + 4 * (b0 / 32), &d, 4);
        for (uint32_t i = 0; i < 32; i++)
            dst[hd / 8 + b0 + i] = (uint8_t)memra_kv_q8_quant(x[b0 + i], d);
    }
}

/* Outputs and caches a case keeps: decode, the chunk (attchunk=phased: attention_chunk_phased,
 * rows past its reach on attention_chunk_rows), the chunk's old launch, decode under
 * attention=heads (a kv head's q heads in several clusters), the chunk under attchunk=rows
 * (attention_chunk_rows alone); attention=mma's cases also decode under attdec=warp (the sixth). */
#define AC_N 6
#define AC_RUN 5 /* the first five: ac_run's */

static int ac_verbose; /* a line for each attention=mma case (the `mma` argument) */

typedef struct ac_dev {
    float *qkv, *freqs, *qn, *kn, *out[AC_N];
    void *k[AC_N], *v[AC_N];
    int32_t *pos;
} ac_dev;

static void ac_free(ac_dev *d) {
    cudaFree(d->qkv);
    cudaFree(d->freqs);
    cudaFree(d->qn);
    cudaFree(d->kn);
    cudaFree(d->pos);
    for (int i = 0; i < AC_N; i++) {
        cudaFree(d->out[i]);
        cudaFree(d->k[i]);
        cudaFree(d->v[i]);
    }
    memset(d, 0, sizeof *d);
}

/* The arguments and device buffers of case k (three caches with the same random prefix,
 * the rest zero; positions prefix .. prefix + M - 1 in d->pos). *n_cache: bytes of one cache
 * (K or V) of the case's kv type (q8: rows of scales and quants, memra_kv_q8_*). */
static cudaError_t ac_setup(const ac_case *k, uint64_t seed, mc_rope_args *a, ac_dev *d, size_t *n_out,
                            size_t *n_cache) {
    const uint32_t n_kv = k->n_kv ? k->n_kv : 2, n_head = k->G * n_kv, hd = k->hd;
    /* (kv=q8: a multiple of 4, as the backend's states round it, so each kv head's rows start
     * 16-byte aligned for attention=mma's copies) */
    const uint32_t cap = k->kv == MC_KV_Q8 ? (k->prefix + k->M + 8 + 3) / 4 * 4 : k->prefix + k->M + 8;
    const size_t row = (size_t)(n_head + 2 * n_kv) * hd, nq = row * k->M, rb = mc_kv_row_bytes(k->kv, hd);
    *n_out = (size_t)k->M * n_head * hd;
    *n_cache = (size_t)n_kv * cap * rb;
    memset(a, 0, sizeof *a);
    memset(d, 0, sizeof *d);
    uint64_t s = seed;
    float *hq = malloc(nq * 4), *hf = malloc(hd / 2 * 4), *hn = malloc(2 * hd * 4);
    void *hk = calloc(*n_cache, 1), *hv = calloc(*n_cache, 1);
    int32_t *hp = malloc(k->M * 4);
    cudaError_t e = cudaErrorMemoryAllocation;
    if (!hq || !hf || !hn || !hk || !hv || !hp)
        goto done;
    for (size_t i = 0; i < nq; i++) /* scores of a few units: a softmax neither flat nor one-hot */
        hq[i] = mck_sym(&s) * (mck_unit(&s) < 0.05f ? 4.0f : 1.5f);
    for (uint32_t i = 0; i < hd / 2; i++)
        hf[i] = powf(10000.0f, -2.0f * (float)i / (float)hd);
    for (uint32_t i = 0; i < 2 * hd; i++)
        hn[i] = 0.5f + mck_unit(&s);
    for (uint32_t g = 0; g < n_kv; g++)
        for (uint32_t t = 0; t < k->prefix; t++) {
            float kr[256], vr[256];
            for (uint32_t i = 0; i < hd; i++) {
                const size_t j = ((size_t)g * cap + t) * hd + i;
                kr[i] = 1.5f * mck_sym(&s);
                vr[i] = mck_sym(&s);
                if (k->kv != MC_KV_Q8) {
                    ac_put(hk, j, k->kv, kr[i]);
                    ac_put(hv, j, k->kv, vr[i]);
                }
            }
            if (k->kv == MC_KV_Q8) { /* hd <= 128, a multiple of 32 */
                ac_put_q8((uint8_t *)hk + ((size_t)g * cap + t) * rb, kr, hd);
                ac_put_q8((uint8_t *)hv + ((size_t)g * cap + t) * rb, vr, hd);
            }
        }
    for (uint32_t j = 0; j < k->M; j++)
        hp[j] = (int32_t)(k->prefix + j);
    if ((e = cudaMalloc((void **)&d->qkv, nq * 4)) || (e = cudaMalloc((void **)&d->freqs, hd / 2 * 4)) ||
        (e = cudaMalloc((void **)&d->qn, hd * 4)) || (e = cudaMalloc((void **)&d->kn, hd * 4)) ||
        (e = cudaMalloc((void **)&d->pos, k->M * 4)))
        goto done;
    for (int i = 0; i < AC_N; i++)
        if ((e = cudaMalloc((void **)&d->out[i], *n_out * 4)) || (e = cudaMalloc(&d->k[i], *n_cache)) ||
            (e = cudaMalloc(&d->v[i], *n_cache)) || (e = cudaMemcpy(d->k[i], hk, *n_cache, cudaMemcpyHostToDevice)) ||
            (e = cudaMemcpy(d->v[i], hv, *n_cache, cudaMemcpyHostToDevice)) ||
            (e = cudaMemset(d->out[i], 0xff, *n_out * 4)))
            goto done;
    if ((e = cudaMemcpy(d->qkv, hq, nq * 4, cudaMemcpyHostToDevice)) ||
        (e = cudaMemcpy(d->freqs, hf, hd / 2 * 4, cudaMemcpyHostToDevice)) ||
        (e = cudaMemcpy(d->qn, hn, hd * 4, cudaMemcpyHostToDevice)) ||
        (e = cudaMemcpy(d->kn, hn + hd, hd * 4, cudaMemcpyHostToDevice)) ||
        (e = cudaMemcpy(d->pos, hp, k->M * 4, cudaMemcpyHostToDevice)))
        goto done;
    a->n_head = n_head;
    a->n_kv = n_kv;
    a->hd = a->hdv = hd;
    a->capacity = cap;
    a->neox = (uint32_t)k->neox;
    a->pos_scale = 1.0f;
    a->freqs = d->freqs;
    a->q_norm = k->norm ? d->qn : NULL;
    a->k_norm = k->norm ? d->kn : NULL;
    a->eps = 1e-6f;
    a->window = k->window;
    a->scale = k->scale;
    a->kv = k->kv;
done:
    free(hq);
    free(hf);
    free(hn);
    free(hk);
    free(hv);
    free(hp);
    return e;
}

static const char *ac_kv_name(uint32_t kv) {
    return kv == MC_KV_F32 ? "f32" : kv == MC_KV_F16 ? "f16" : kv == MC_KV_Q8 ? "q8" : "bf16";
}

/* One case: decode row by row into out[0] (cache 0), the chunk into out[1] (cache 1) and the
 * chunk's old launch into out[2] (cache 2); or, with control, the split path's chunk into out[1].
 * Returns the mismatches (control: 1 when the split's bits equal decode's or are not close; -1:
 * could not run). */
static int ac_run(FILE *out, const ac_case *k, int control, uint64_t seed) {
    mc_rope_args a;
    ac_dev d;
    size_t n_out = 0, n_cache = 0;
    float *ho[AC_RUN] = {NULL};
    uint8_t *hc[AC_RUN] = {NULL};
    int bad = -1;
    cudaError_t e = ac_setup(k, seed, &a, &d, &n_out, &n_cache);
    mc_config c = mc_config_default;
    c.pdl = 0;
    c.kv = k->kv;
    const size_t row = (size_t)(a.n_head + 2 * a.n_kv) * k->hd;
    for (uint32_t j = 0; j < k->M && e == cudaSuccess; j++)
        e = mc_attention_fused(&c, &a, d.qkv + j * row, d.k[0], d.v[0], d.out[0] + (size_t)j * a.n_head * k->hd,
                               d.pos + j, 0);
    if (!control) { /* attention=heads: decode row by row again, a kv head's q heads in several clusters */
        mc_config ch = c;
        ch.attention = MC_ATT_HEADS;
        for (uint32_t j = 0; j < k->M && e == cudaSuccess; j++)
            e = mc_attention_fused(&ch, &a, d.qkv + j * row, d.k[3], d.v[3], d.out[3] + (size_t)j * a.n_head * k->hd,
                                   d.pos + j, 0);
    }
    if (control) {
        c.attention = MC_ATT_SPANS;
        if (e == cudaSuccess && mc_attention_path(&c, a.n_head, a.n_kv, k->hd, k->hd) != MC_ATT_PATH_SPLIT)
            e = cudaErrorNotSupported;
    }
    if (e == cudaSuccess)
        e = mc_attention_chunk(&c, &a, d.qkv, d.k[1], d.v[1], d.out[1], d.pos, k->M, 0);
    if (e == cudaSuccess && !control)
        e = mc_attention_chunk_cluster(&c, &a, d.qkv, d.k[2], d.v[2], d.out[2], d.pos, k->M, 0);
    if (e == cudaSuccess && !control) {
        mc_config cr = c;
        cr.attchunk = MC_ATTCHUNK_ROWS;
        e = mc_attention_chunk(&cr, &a, d.qkv, d.k[4], d.v[4], d.out[4], d.pos, k->M, 0);
    }
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    for (int i = 0; i < AC_RUN && e == cudaSuccess; i++) {
        ho[i] = malloc(n_out * 4);
        hc[i] = malloc(2 * n_cache);
        if (!ho[i] || !hc[i]) {
            e = cudaErrorMemoryAllocation;
            break;
        }
        if ((e = cudaMemcpy(ho[i], d.out[i], n_out * 4, cudaMemcpyDeviceToHost)) ||
            (e = cudaMemcpy(hc[i], d.k[i], n_cache, cudaMemcpyDeviceToHost)) ||
            (e = cudaMemcpy(hc[i] + n_cache, d.v[i], n_cache, cudaMemcpyDeviceToHost)))
            break;
    }
    if (e != cudaSuccess) {
        if (out)
            fprintf(out, "hd %u G %u M %u prefix %u %s: %s\n", k->hd, k->G, k->M, k->prefix, ac_kv_name(k->kv),
                    cudaGetErrorString(e));
        goto done;
    }
    if (control) { /* the split's bits must differ somewhere, and stay close to decode's */
        size_t differ = 0;
        double num = 0, den = 0;
        for (size_t i = 0; i < n_out; i++) {
            differ += memcmp(&ho[0][i], &ho[1][i], 4) != 0;
            num += ((double)ho[0][i] - ho[1][i]) * ((double)ho[0][i] - ho[1][i]);
            den += (double)ho[0][i] * ho[0][i];
        }
        const double nmse = den > 0 ? num / den : 1.0;
        if (out)
            fprintf(out, "control hd %u G %u M %u prefix %u %s: split differs in %zu of %zu outputs, nmse %.3g\n",
                    k->hd, k->G, k->M, k->prefix, ac_kv_name(k->kv), differ, n_out, nmse);
        bad = differ == 0 || !(nmse < 1e-8);
        goto done;
    }
    bad = 0;
    for (size_t i = 0; i < n_out; i++) /* decode wrote every output: attention of finite values */
        if (!isfinite(ho[0][i])) {
            if (out)
                fprintf(out, "hd %u G %u M %u prefix %u %s: decode's output %zu is not finite\n", k->hd, k->G, k->M,
                        k->prefix, ac_kv_name(k->kv), i);
            bad = 1;
            break;
        }
    for (int v = 1; v < AC_RUN; v++) {
        const char *what = v == 1 ? "chunk" : v == 2 ? "old chunk" : v == 3 ? "heads decode" : "rows chunk";
        size_t nb = 0;
        for (size_t i = 0; i < n_out; i++)
            if (memcmp(&ho[0][i], &ho[v][i], 4) != 0) {
                if (out && nb < 3)
                    fprintf(out,
                            "hd %u G %u M %u prefix %u %s window %u norm %d neox %d: %s row %zu head %zu dim %zu: "
                            "decode %.9g, chunk %.9g\n",
                            k->hd, k->G, k->M, k->prefix, ac_kv_name(k->kv), k->window, k->norm, k->neox, what,
                            i / ((size_t)a.n_head * k->hd), i / k->hd % a.n_head, i % k->hd, ho[0][i], ho[v][i]);
                nb++;
            }
        if (memcmp(hc[0], hc[v], 2 * n_cache) != 0) {
            if (out)
                fprintf(out, "hd %u G %u M %u prefix %u %s: %s cache rows differ from decode's\n", k->hd, k->G, k->M,
                        k->prefix, ac_kv_name(k->kv), what);
            nb++;
        }
        bad += nb ? 1 : 0;
    }
done:
    for (int i = 0; i < AC_RUN; i++) {
        free(ho[i]);
        free(hc[i]);
    }
    ac_free(&d);
    return bad;
}

/* attention=mma (attention_mma.cu): decode row by row (one launch a row, its partials and ticket
 * from the state's shapes) into out[0], the chunk into out[1], the chunk in two launches (rows
 * [0, M1) then [M1, M), M1 = M / 3 rounded up to odd) into out[2], and the default path's decode
 * into out[3]. out[1] and out[2] and their caches must be decode's bits; against out[3] (f32 scores
 * on the cluster path: another order and precision) the outputs must differ somewhere (the
 * control: the comparison sees another order) and stay within nmse 1e-3 (so it is attention).
 * Returns the failures, -1 when it could not run. */
static int ac_run_mma(FILE *out, const ac_case *k, uint64_t seed) {
    mc_rope_args a;
    ac_dev d;
    size_t n_out = 0, n_cache = 0;
    float *ho[6] = {NULL}, *partial = NULL;
    uint8_t *hc[3] = {NULL}, *hw = NULL;
    uint32_t *ticket = NULL;
    int bad = -1;
    cudaError_t e = ac_setup(k, seed, &a, &d, &n_out, &n_cache);
    const size_t row = (size_t)(a.n_head + 2 * a.n_kv) * k->hd;
    mc_config c = mc_config_default, c0 = mc_config_default;
    c.pdl = c0.pdl = 0;
    c.kv = c0.kv = k->kv;
    c.attention = MC_ATT_MMA;
    c.attfold = k->tier ? MC_ATTFOLD_TIER : MC_ATTFOLD_SPAN;
    if (e == cudaSuccess && mc_attention_path(&c, a.n_head, a.n_kv, k->hd, k->hd) != MC_ATT_PATH_MMA)
        e = cudaErrorNotSupported;
    if (e == cudaSuccess &&
        !(e = cudaMalloc((void **)&partial, mc_att_partial_floats(a.n_head, k->hd, a.capacity) * 4)) &&
        !(e = cudaMalloc((void **)&ticket, a.n_kv * 4)))
        e = cudaMemset(ticket, 0, a.n_kv * 4);
    mc_rope_args ad = a;
    ad.partial = partial;
    ad.ticket = ticket;
    for (uint32_t j = 0; j < k->M && e == cudaSuccess; j++)
        e = mc_attention_fused(&c, &ad, d.qkv + j * row, d.k[0], d.v[0], d.out[0] + (size_t)j * a.n_head * k->hd,
                               d.pos + j, 0);
    if (e == cudaSuccess)
        e = mc_attention_chunk(&c, &a, d.qkv, d.k[1], d.v[1], d.out[1], d.pos, k->M, 0);
    const uint32_t M1 = ((k->M + 2) / 3) | 1u;
    if (e == cudaSuccess)
        e = mc_attention_chunk(&c, &a, d.qkv, d.k[2], d.v[2], d.out[2], d.pos, M1 < k->M ? M1 : k->M, 0);
    if (e == cudaSuccess && M1 < k->M)
        e = mc_attention_chunk(&c, &a, d.qkv + M1 * row, d.k[2], d.v[2], d.out[2] + (size_t)M1 * a.n_head * k->hd,
                               d.pos + M1, k->M - M1, 0);
    /* kv=q8 (which the cluster path does not read): the reference runs at f32 on the prefix's
     * values as q8 reads them back (memra_kv_q8_value), so it differs in the new rows only */
    mc_rope_args a3 = a;
    void *k3 = d.k[3], *v3 = d.v[3], *f3[2] = {NULL, NULL};
    if (e == cudaSuccess && k->kv == MC_KV_Q8) {
        const size_t rb = mc_kv_row_bytes(MC_KV_Q8, k->hd), rows3 = n_cache / rb;
        uint8_t *hq = malloc(n_cache);
        float *hf = malloc(rows3 * k->hd * 4);
        c0.kv = a3.kv = MC_KV_F32;
        for (int kvi = 0; kvi < 2 && e == cudaSuccess; kvi++) {
            if (!hq || !hf) {
                e = cudaErrorMemoryAllocation;
                break;
            }
            if ((e = cudaMemcpy(hq, kvi ? d.v[3] : d.k[3], n_cache, cudaMemcpyDeviceToHost)))
                break;
            for (size_t r = 0; r < rows3; r++)
                for (uint32_t i = 0; i < k->hd; i++) {
                    float dsc;
                    memcpy(&dsc, hq + r * rb + 4 * (i / 32), 4);
                    hf[r * k->hd + i] = memra_kv_q8_value((int8_t)hq[r * rb + k->hd / 8 + i], dsc);
                }
            if ((e = cudaMalloc(&f3[kvi], rows3 * k->hd * 4)) ||
                (e = cudaMemcpy(f3[kvi], hf, rows3 * k->hd * 4, cudaMemcpyHostToDevice)))
                break;
        }
        free(hq);
        free(hf);
        k3 = f3[0];
        v3 = f3[1];
    }
    for (uint32_t j = 0; j < k->M && e == cudaSuccess; j++)
        e = mc_attention_fused(&c0, &a3, d.qkv + j * row, k3, v3, d.out[3] + (size_t)j * a.n_head * k->hd, d.pos + j,
                               0);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    /* attfold=tier: its decode against attfold=span's (cache 4), which must differ where a row's
     * spans reach past its first tier by two (the control: the key is not a no-op) */
    mc_config cs = c;
    cs.attfold = MC_ATTFOLD_SPAN;
    for (uint32_t j = 0; k->tier && j < k->M && e == cudaSuccess; j++)
        e = mc_attention_fused(&cs, &ad, d.qkv + j * row, d.k[4], d.v[4], d.out[4] + (size_t)j * a.n_head * k->hd,
                               d.pos + j, 0);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    /* attdec=warp (a warp a span) where it serves: decode row by row into out[5] (cache 5), which
     * must be attdec=block's bits, outputs and cache rows (the same attfold) */
    mc_config cw = c;
    cw.attdec = MC_ATTDEC_WARP;
    const int wd = mc_attention_mma_wd_serves(k->hd, k->kv);
    for (uint32_t j = 0; wd && j < k->M && e == cudaSuccess; j++)
        e = mc_attention_fused(&cw, &ad, d.qkv + j * row, d.k[5], d.v[5], d.out[5] + (size_t)j * a.n_head * k->hd,
                               d.pos + j, 0);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    if (e == cudaSuccess && wd) {
        if (!(ho[5] = malloc(n_out * 4)) || !(hw = malloc(2 * n_cache)))
            e = cudaErrorMemoryAllocation;
        else if (!(e = cudaMemcpy(ho[5], d.out[5], n_out * 4, cudaMemcpyDeviceToHost)) &&
                 !(e = cudaMemcpy(hw, d.k[5], n_cache, cudaMemcpyDeviceToHost)))
            e = cudaMemcpy(hw + n_cache, d.v[5], n_cache, cudaMemcpyDeviceToHost);
    }
    for (int i = 0; i < (k->tier ? 5 : 4) && e == cudaSuccess; i++) {
        if (!(ho[i] = malloc(n_out * 4)) || (i < 3 && !(hc[i] = malloc(2 * n_cache)))) {
            e = cudaErrorMemoryAllocation;
            break;
        }
        if ((e = cudaMemcpy(ho[i], d.out[i], n_out * 4, cudaMemcpyDeviceToHost)) ||
            (i < 3 && ((e = cudaMemcpy(hc[i], d.k[i], n_cache, cudaMemcpyDeviceToHost)) ||
                       (e = cudaMemcpy(hc[i] + n_cache, d.v[i], n_cache, cudaMemcpyDeviceToHost)))))
            break;
    }
    if (e != cudaSuccess) {
        if (out)
            fprintf(out, "mma hd %u G %u M %u prefix %u %s: %s\n", k->hd, k->G, k->M, k->prefix, ac_kv_name(k->kv),
                    cudaGetErrorString(e));
        goto done;
    }
    bad = 0;
    for (int v = 1; v < 3; v++) {
        size_t nb = 0;
        for (size_t i = 0; i < n_out; i++)
            if (memcmp(&ho[0][i], &ho[v][i], 4) != 0) {
                if (out && nb < 3)
                    fprintf(out,
                            "mma hd %u G %u M %u prefix %u %s window %u norm %d neox %d: %s row %zu head %zu dim %zu: "
                            "decode %.9g, chunk %.9g\n",
                            k->hd, k->G, k->M, k->prefix, ac_kv_name(k->kv), k->window, k->norm, k->neox,
                            v == 1 ? "chunk" : "two chunks", i / ((size_t)a.n_head * k->hd), i / k->hd % a.n_head,
                            i % k->hd, ho[0][i], ho[v][i]);
                nb++;
            }
        if (memcmp(hc[0], hc[v], 2 * n_cache) != 0) {
            if (out)
                fprintf(out, "mma hd %u G %u M %u prefix %u %s: %s cache rows differ from decode's\n", k->hd, k->G,
                        k->M, k->prefix, ac_kv_name(k->kv), v == 1 ? "chunk" : "two chunks");
            nb++;
        }
        bad += nb ? 1 : 0;
    }
    if (wd) {
        size_t nw = 0;
        for (size_t i = 0; i < n_out; i++)
            if (memcmp(&ho[0][i], &ho[5][i], 4) != 0) {
                if (out && nw < 3)
                    fprintf(out,
                            "mma hd %u G %u M %u prefix %u %s%s: attdec=warp row %zu head %zu dim %zu: block %.9g, "
                            "warp %.9g\n",
                            k->hd, k->G, k->M, k->prefix, ac_kv_name(k->kv), k->tier ? " tier" : "",
                            i / ((size_t)a.n_head * k->hd), i / k->hd % a.n_head, i % k->hd, ho[0][i], ho[5][i]);
                nw++;
            }
        if (memcmp(hc[0], hw, 2 * n_cache) != 0) {
            if (out)
                fprintf(out, "mma hd %u G %u M %u prefix %u %s: attdec=warp's cache rows differ from decode's\n", k->hd,
                        k->G, k->M, k->prefix, ac_kv_name(k->kv));
            nw++;
        }
        bad += nw ? 1 : 0;
    }
    size_t differ = 0;
    double num = 0, den = 0;
    for (size_t i = 0; i < n_out; i++) {
        differ += memcmp(&ho[0][i], &ho[3][i], 4) != 0;
        num += ((double)ho[0][i] - ho[3][i]) * ((double)ho[0][i] - ho[3][i]);
        den += (double)ho[3][i] * ho[3][i];
    }
    const double nmse = den > 0 ? num / den : 1.0;
    /* (one position attended, at prefix 0 and M 1: the output is that v row on every path) */
    if ((differ == 0 && k->prefix + k->M > 1) || !(nmse < 1e-3)) {
        if (out)
            fprintf(out,
                    "mma hd %u G %u M %u prefix %u %s: against the cluster path %zu of %zu outputs differ, nmse "
                    "%.3g (control: must differ, and stay under 1e-3)\n",
                    k->hd, k->G, k->M, k->prefix, ac_kv_name(k->kv), differ, n_out, nmse);
        bad++;
    }
    if (k->tier) { /* (attdec=warp's tier decode too: the key reaches its kernel's fold) */
        size_t dt = 0, dw = 0;
        for (size_t i = 0; i < n_out; i++) {
            dt += memcmp(&ho[0][i], &ho[4][i], 4) != 0;
            dw += wd && memcmp(&ho[5][i], &ho[4][i], 4) != 0;
        }
        if ((dt == 0 || (wd && dw == 0)) && k->prefix + k->M > 6 * 64 && (k->window == 0 || k->window > 6 * 64)) {
            if (out)
                fprintf(out, "mma hd %u G %u M %u prefix %u %s: attfold=tier gave attfold=span's bits (control%s)\n",
                        k->hd, k->G, k->M, k->prefix, ac_kv_name(k->kv), dt ? ", attdec=warp" : "");
            bad++;
        }
    }
done:
    for (int i = 0; i < 6; i++)
        free(ho[i]);
    for (int i = 0; i < 3; i++)
        free(hc[i]);
    free(hw);
    cudaFree(f3[0]);
    cudaFree(f3[1]);
    cudaFree(partial);
    cudaFree(ticket);
    ac_free(&d);
    return bad;
}

/* attention=mma's cases: its chunk (one launch, and two) against its own decode, every kv type */
static const ac_case ac_mma[] = {
    {64, 4, 512, 0, MC_KV_F32, 0, 0, 0, 0.0f, 2, 0},
    {64, 4, 512, 0, MC_KV_BF16, 0, 0, 0, 0.0f, 8, 0},
    {128, 4, 512, 0, MC_KV_BF16, 0, 0, 0, 0.0f, 8, 0},
    {128, 4, 512, 300, MC_KV_F16, 0, 0, 0, 0.0f, 2, 0},
    {128, 4, 7, 1000, MC_KV_F32, 0, 0, 0, 0.0f, 2, 0},
    {128, 4, 1, 0, MC_KV_BF16, 0, 0, 0, 0.0f, 2, 0},
    {128, 1, 512, 300, MC_KV_BF16, 0, 0, 0, 0.0f, 2, 0},
    {128, 2, 64, 1000, MC_KV_F16, 0, 1, 1, 0.125f, 2, 0},
    {128, 8, 512, 1000, MC_KV_F32, 0, 0, 0, 0.0f, 2, 0},
    {64, 3, 512, 300, MC_KV_F32, 0, 0, 0, 0.0f, 3, 0},
    {64, 3, 7, 1000, MC_KV_BF16, 0, 0, 0, 0.0f, 3, 0},
    {32, 2, 512, 1000, MC_KV_F16, 0, 0, 1, 0.0f, 2, 0},
    {32, 8, 7, 300, MC_KV_BF16, 0, 0, 1, 0.0f, 2, 0},
    {64, 4, 512, 300, MC_KV_F32, 64, 0, 0, 0.0f, 2, 0},
    {64, 4, 512, 1000, MC_KV_BF16, 513, 0, 0, 0.0f, 2, 0},
    {128, 4, 512, 1000, MC_KV_F32, 100, 1, 1, 0.0f, 2, 0},
    {128, 3, 512, 0, MC_KV_F32, 0, 1, 1, 0.125f, 2, 0},
    {64, 1, 300, 65, MC_KV_F16, 0, 0, 0, 0.0f, 4, 0},
    /* past MC_AMM_BLOCKS spans a kv head: decode's blocks take several spans, each staged
     * one ahead, and its merge folds them in several batches */
    {128, 8, 64, 3000, MC_KV_F32, 0, 0, 0, 0.0f, 2, 0},
    {64, 4, 7, 5000, MC_KV_BF16, 0, 0, 0, 0.0f, 8, 0},
    {64, 4, 64, 4000, MC_KV_F16, 1500, 1, 0, 0.0f, 2, 0},
    /* kv=q8: the stored rows staged, then made into tiles (decode's new row from its stored bytes) */
    {64, 4, 512, 0, MC_KV_Q8, 0, 0, 0, 0.0f, 2, 0},
    {128, 8, 64, 3000, MC_KV_Q8, 0, 0, 0, 0.0f, 2, 0},
    {32, 2, 512, 1000, MC_KV_Q8, 0, 0, 1, 0.0f, 2, 0},
    {64, 3, 7, 1000, MC_KV_Q8, 0, 0, 0, 0.0f, 3, 0},
    {128, 4, 512, 1000, MC_KV_Q8, 100, 1, 1, 0.0f, 2, 0},
    {64, 4, 7, 5000, MC_KV_Q8, 0, 0, 0, 0.0f, 8, 0},
    /* attfold=tier: spans folded in tiers of 4, then the tiers */
    {64, 4, 512, 300, MC_KV_BF16, 0, 0, 0, 0.0f, 2, 1},
    {128, 8, 64, 3000, MC_KV_F32, 0, 0, 0, 0.0f, 2, 1},
    {64, 4, 7, 5000, MC_KV_Q8, 0, 0, 0, 0.0f, 8, 1},
    {64, 4, 64, 4000, MC_KV_F16, 1500, 1, 0, 0.0f, 2, 1},
    {32, 2, 512, 1000, MC_KV_F16, 0, 0, 1, 0.0f, 2, 1},
    {128, 3, 300, 700, MC_KV_Q8, 130, 1, 1, 0.125f, 2, 1},
    /* past MC_AMM_BLOCKS tiers a kv head (capacity > 8,192): attdec=warp's blocks take two
     * groups of 4 spans each, restaging their tiles between them */
    {64, 4, 7, 8400, MC_KV_Q8, 0, 0, 0, 0.0f, 2, 1},
    {64, 4, 7, 8400, MC_KV_BF16, 0, 0, 0, 0.0f, 2, 0},
};

#define AC_N_MMA (sizeof ac_mma / sizeof ac_mma[0])

/* attention=mma's cases first .. last (ac_run_mma, each with its own seed); a line a case when
 * verbose (the `mma` argument), else a line a failed case (its index, for `mma N`). Returns the
 * failures, -1 when one could not run. */
static int ac_check_mma(FILE *out, size_t first, size_t last, int *n_checked) {
    int bad = 0;
    for (size_t i = first; i <= last && i < AC_N_MMA; i++) {
        const int b = ac_run_mma(out, &ac_mma[i], 700 + i);
        if (b < 0)
            return -1;
        bad += b;
        (*n_checked)++;
        if (ac_verbose || b)
            printf("mma case %zu (hd %u G %u M %u prefix %u %s%s): %s\n", i, ac_mma[i].hd, ac_mma[i].G, ac_mma[i].M,
                   ac_mma[i].prefix, ac_kv_name(ac_mma[i].kv), ac_mma[i].tier ? " tier" : "", b ? "FAIL" : "PASS");
    }
    return bad;
}

static int ac_check(FILE *out, int *n_checked) {
    static const uint32_t hds[] = {64, 128}, Gs[] = {1, 4, 8}, Ms[] = {1, 7, 512}, prefixes[] = {0, 300, 1000};
    static const uint32_t kvs[] = {MC_KV_F32, MC_KV_F16, MC_KV_BF16};
    int bad = 0, checked = 0;
    uint64_t seed = 1;
    for (size_t ih = 0; ih < 2; ih++)
        for (size_t ig = 0; ig < 3; ig++)
            for (size_t im = 0; im < 3; im++)
                for (size_t ip = 0; ip < 3; ip++)
                    for (size_t ik = 0; ik < 3; ik++) {
                        const ac_case k = {hds[ih], Gs[ig], Ms[im], prefixes[ip], kvs[ik], 0, 0, 0, 0.0f, 2, 0};
                        const int b = ac_run(out, &k, 0, seed++);
                        if (b < 0)
                            return -1;
                        bad += b;
                        checked++;
                    }
    /* the other shapes the new kernel serves (hd 32, G 2), hd 256 (the chunk stays on the cluster
     * kernel), sliding windows (shorter than a rank, than the chunk, than the prefix), q and k
     * norms with the neox pairing, a file's scale */
    static const ac_case extra[] = {
        {32, 2, 512, 1000, MC_KV_F32, 0, 0, 0, 0.0f, 2, 0},
        {32, 8, 7, 300, MC_KV_BF16, 0, 0, 1, 0.0f, 2, 0},
        {64, 2, 512, 300, MC_KV_F16, 0, 0, 0, 0.0f, 2, 0},
        {128, 2, 512, 0, MC_KV_F32, 0, 1, 1, 0.125f, 2, 0},
        {256, 4, 7, 300, MC_KV_F32, 0, 0, 0, 0.0f, 2, 0},
        {256, 2, 64, 100, MC_KV_BF16, 0, 1, 1, 0.0625f, 2, 0},
        {64, 4, 512, 300, MC_KV_F32, 64, 0, 0, 0.0f, 2, 0},
        {64, 4, 512, 300, MC_KV_F16, 300, 0, 0, 0.0f, 2, 0},
        {64, 4, 512, 1000, MC_KV_BF16, 513, 0, 0, 0.0f, 2, 0},
        {128, 4, 512, 1000, MC_KV_F32, 512, 1, 1, 0.0f, 2, 0},
        {128, 8, 7, 1000, MC_KV_BF16, 100, 0, 0, 0.0f, 2, 0},
        {128, 4, 512, 600, MC_KV_F32, 0, 1, 0, 0.0f, 2, 0},
        {64, 4, 512, 0, MC_KV_F32, 0, 0, 0, 0.0f, 8, 0},
        {128, 4, 512, 512, MC_KV_BF16, 0, 0, 0, 0.0f, 8, 0},
        /* G 3 (smollm2-135m: 9 q heads on 3 kv heads of 64), the cluster path's since issue 27 */
        {64, 3, 512, 300, MC_KV_F32, 0, 0, 0, 0.0f, 3, 0},
        {64, 3, 7, 1000, MC_KV_BF16, 0, 0, 0, 0.0f, 3, 0},
        {64, 3, 1, 0, MC_KV_F16, 0, 0, 0, 0.0f, 3, 0},
        {64, 3, 512, 1000, MC_KV_F32, 513, 0, 0, 0.0f, 3, 0},
        {128, 3, 512, 0, MC_KV_F32, 0, 1, 1, 0.125f, 2, 0},
        {128, 3, 64, 1000, MC_KV_BF16, 0, 0, 0, 0.0f, 2, 0},
        {32, 3, 512, 300, MC_KV_F16, 64, 1, 0, 0.0f, 3, 0},
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        const int b = ac_run(out, &extra[i], 0, 500 + i);
        if (b < 0)
            return -1;
        bad += b;
        checked++;
    }
    /* negative controls: another reduction order of the same attention must be seen */
    static const ac_case ctl[] = {{64, 4, 7, 300, MC_KV_F32, 0, 0, 0, 0.0f, 2, 0},
                                  {128, 4, 512, 0, MC_KV_BF16, 0, 0, 0, 0.0f, 2, 0},
                                  {64, 8, 64, 1000, MC_KV_F16, 0, 0, 0, 0.0f, 2, 0},
                                  {64, 3, 64, 300, MC_KV_F32, 0, 0, 0, 0.0f, 3, 0}};
    for (size_t i = 0; i < sizeof ctl / sizeof ctl[0]; i++) {
        const int b = ac_run(out, &ctl[i], 1, 900 + i);
        if (b < 0)
            return -1;
        if (b && out)
            fprintf(out, "negative control %zu NOT CAUGHT (the split path's chunk passed as decode's bits)\n", i);
        bad += b;
    }
    /* attention=mma: its chunk (one launch, and two) against its own decode, every kv type */
    const int bm = ac_check_mma(out, 0, AC_N_MMA - 1, &checked);
    if (bm < 0)
        return -1;
    bad += bm;
    *n_checked = checked;
    return bad;
}

/* The chunk attention alone: us a launch (the append included) of the old launch and the new. */
static int ac_bench(void) {
    static const struct {
        const char *name;
        uint32_t n_head, n_kv, hd;
    } shapes[] = {{"llama-1b", 32, 8, 64}, {"llama-8b", 32, 8, 128}};
    static const uint32_t kvs[] = {MC_KV_F32, MC_KV_BF16}, prefixes[] = {0, 512};
    const uint32_t M = 512, reps = 20;
    printf("| shape | kv | prefix | M | cluster us | rows us | phased us | phased / rows | mma us |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    for (size_t is = 0; is < 2; is++)
        for (size_t ik = 0; ik < 2; ik++)
            for (size_t ip = 0; ip < 2; ip++) {
                const ac_case k = {shapes[is].hd,
                                   shapes[is].n_head / shapes[is].n_kv,
                                   M,
                                   prefixes[ip],
                                   kvs[ik],
                                   0,
                                   0,
                                   0,
                                   0.0f,
                                   shapes[is].n_kv,
                                   0};
                mc_rope_args a;
                ac_dev d;
                size_t n_out, n_cache;
                cudaError_t e = ac_setup(&k, 7, &a, &d, &n_out, &n_cache);
                mc_config c = mc_config_default;
                c.pdl = 0;
                c.kv = k.kv;
                float us[4] = {0, 0, 0, 0};
                cudaEvent_t t0 = NULL, t1 = NULL;
                if (e == cudaSuccess && !(e = cudaEventCreate(&t0)) && !(e = cudaEventCreate(&t1)))
                    for (int v = 0; v < 4 && e == cudaSuccess; v++) {
                        c.attchunk = v == 1 ? MC_ATTCHUNK_ROWS : MC_ATTCHUNK_PHASED;
                        c.attention = v == 3 ? MC_ATT_MMA : MC_ATT_AUTO;
                        for (uint32_t r = 0; r < reps + 2 && e == cudaSuccess; r++) {
                            if (r == 2)
                                e = cudaEventRecord(t0, 0);
                            if (e == cudaSuccess)
                                e = v ? mc_attention_chunk(&c, &a, d.qkv, d.k[0], d.v[0], d.out[0], d.pos, M, 0)
                                      : mc_attention_chunk_cluster(&c, &a, d.qkv, d.k[0], d.v[0], d.out[0], d.pos, M,
                                                                   0);
                        }
                        float ms = 0;
                        if (e == cudaSuccess && !(e = cudaEventRecord(t1, 0)) && !(e = cudaEventSynchronize(t1)) &&
                            !(e = cudaEventElapsedTime(&ms, t0, t1)))
                            us[v] = ms * 1000.0f / (float)reps;
                    }
                if (t0)
                    cudaEventDestroy(t0);
                if (t1)
                    cudaEventDestroy(t1);
                ac_free(&d);
                if (e != cudaSuccess) {
                    fprintf(stderr, "bench %s: %s\n", shapes[is].name, cudaGetErrorString(e));
                    return 3;
                }
                printf("| %s | %s | %u | %u | %.1f | %.1f | %.1f | %.2fx | %.1f |\n", shapes[is].name, ac_kv_name(k.kv),
                       k.prefix, M, us[0], us[1], us[2], us[1] / us[2], us[3]);
            }
    return 0;
}

int main(int argc, char **argv) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("memra_cuda_check_attn_chunk: SKIP (no CUDA device)\n");
        return 77;
    }
    if (argc == 2 && strcmp(argv[1], "bench") == 0)
        return ac_bench();
    if (argc >= 2 && argc <= 4 && strcmp(argv[1], "mma") == 0) { /* attention=mma's cases alone, or a range */
        char *end = NULL;
        const unsigned long first = argc > 2 ? strtoul(argv[2], &end, 10) : 0;
        const int ok1 = argc <= 2 || (*argv[2] && !*end);
        const unsigned long last = argc > 3 ? strtoul(argv[3], &end, 10) : argc > 2 ? first : AC_N_MMA - 1;
        if (!ok1 || (argc > 3 && (!*argv[3] || *end)) || first > last || last >= AC_N_MMA) {
            fprintf(stderr, "memra_cuda_check_attn_chunk mma [FIRST [LAST]]: cases 0 to %zu\n", AC_N_MMA - 1);
            return 2;
        }
        ac_verbose = 1;
        int checked = 0;
        const int bad = ac_check_mma(stdout, first, last, &checked);
        printf("memra_cuda_check_attn_chunk mma %lu..%lu: %s (%d cases, %d failed)\n", first, last,
               bad == 0 ? "PASS" : "FAIL", checked, bad);
        return bad == 0 ? 0 : 1;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: memra_cuda_check_attn_chunk [bench | mma [FIRST [LAST]]]\n");
        return 2;
    }
    int checked = 0;
    const int bad = ac_check(stdout, &checked);
    printf("memra_cuda_check_attn_chunk: %s (%d cases, %d failed)\n", bad == 0 ? "PASS" : "FAIL", checked, bad);
    return bad == 0 ? 0 : 1;
}
