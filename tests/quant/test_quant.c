/* test_quant.c: the quantized block types of memra/quant.h.
 *
 * - Dequantization is bit-exact to the gguf Python package's (fixtures/, see README.md), for
 *   every type; deliberately wrong variants written here (interleaved nibbles, a wrong fifth
 *   bit, a wrong K-scale unpacking, a wrong Q6_K scale index) do not match them.
 * - The cpu backend's quantized matrix-vector products (cpu_kernels.c, compiled into this test)
 *   agree with a float64 dot over the same dequantized weights within the rounding bound of
 *   their summation order, give the same bits whatever the row split, and decode rows exactly.
 * - A synthetic model of every type (memra mkmodel's path) decodes on the cpu backend with the
 *   same logits for any thread count. (The float64 reference test, tests/cpu/
 *   test_cpu_reference.c, checks the logits of every type against its own forward pass.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "cpu_test_util.h"
#include "memra/gguf.h"
#include "memra/numeric.h"
#include "memra/quant.h"

static const struct {
    uint32_t type;
    const char *file;
} quant_types[] = {
    {MEMRA_TYPE_Q4_0, "q4_0"}, {MEMRA_TYPE_Q4_1, "q4_1"}, {MEMRA_TYPE_Q5_0, "q5_0"}, {MEMRA_TYPE_Q5_1, "q5_1"},
    {MEMRA_TYPE_Q8_0, "q8_0"}, {MEMRA_TYPE_Q4_K, "q4_k"}, {MEMRA_TYPE_Q5_K, "q5_k"}, {MEMRA_TYPE_Q6_K, "q6_k"},
};
#define N_QUANT (sizeof quant_types / sizeof quant_types[0])

typedef struct fixture {
    uint8_t *blocks;
    float *values;
    size_t n_blocks, qk, block_bytes;
} fixture;

static void load_fixture(uint32_t type, const char *name, fixture *fx) {
    const char *src = getenv("MEMRA_SOURCE_DIR");
    cr_assert_not_null(src, "MEMRA_SOURCE_DIR is not set (ctest sets it)");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/quant/fixtures/%s.bin", src, name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    fx->qk = memra_quant_block_elems(type);
    fx->block_bytes = memra_quant_block_bytes(type);
    size_t per_block = fx->block_bytes + fx->qk * sizeof(float);
    cr_assert(size > 0 && (size_t)size % per_block == 0, "%s: %ld bytes", path, size);
    fx->n_blocks = (size_t)size / per_block;
    fx->blocks = malloc(fx->n_blocks * fx->block_bytes);
    fx->values = malloc(fx->n_blocks * fx->qk * sizeof(float));
    cr_assert(fread(fx->blocks, fx->block_bytes, fx->n_blocks, f) == fx->n_blocks);
    cr_assert(fread(fx->values, fx->qk * sizeof(float), fx->n_blocks, f) == fx->n_blocks);
    fclose(f);
}

static void free_fixture(fixture *fx) { free(fx->blocks), free(fx->values); }

Test(quant, block_layouts) {
    static const struct {
        uint32_t type, elems, bytes;
    } want[] = {{MEMRA_TYPE_Q4_0, 32, 18},   {MEMRA_TYPE_Q4_1, 32, 20},  {MEMRA_TYPE_Q5_0, 32, 22},
                {MEMRA_TYPE_Q5_1, 32, 24},   {MEMRA_TYPE_Q8_0, 32, 34},  {MEMRA_TYPE_Q4_K, 256, 144},
                {MEMRA_TYPE_Q5_K, 256, 176}, {MEMRA_TYPE_Q6_K, 256, 210}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        uint64_t e, b;
        cr_assert_eq(memra_quant_block_elems(want[i].type), want[i].elems);
        cr_assert_eq(memra_quant_block_bytes(want[i].type), want[i].bytes);
        cr_assert(memra_tensor_type_block(want[i].type, &e, &b) && e == want[i].elems && b == want[i].bytes);
        cr_assert(memra_tensor_type_supported(want[i].type), "%s", memra_tensor_type_name(want[i].type));
    }
    cr_assert_eq(memra_quant_block_elems(MEMRA_TYPE_Q2_K), 0);
    cr_assert_not(memra_tensor_type_supported(MEMRA_TYPE_Q2_K));
    float y[256];
    cr_assert_not(memra_dequantize_block(MEMRA_TYPE_Q2_K, y, y));
    cr_assert_not(memra_dequantize_row(MEMRA_TYPE_Q4_K, y, 128, y), "a partial K block is refused");
    cr_assert_not(memra_dequantize_row(MEMRA_TYPE_Q3_K, y, 256, y));
}

Test(quant, dequantize_matches_gguf_python_bit_exact) {
    for (size_t t = 0; t < N_QUANT; t++) {
        fixture fx;
        load_fixture(quant_types[t].type, quant_types[t].file, &fx);
        size_t n = fx.n_blocks * fx.qk;
        float *row = malloc(n * sizeof(float));
        memset(row, 0xff, n * sizeof(float));
        cr_assert(memra_dequantize_row(quant_types[t].type, fx.blocks, n, row));
        for (size_t i = 0; i < n; i++)
            cr_assert(memcmp(&row[i], &fx.values[i], 4) == 0, "%s element %zu: %.9g, the gguf package gives %.9g",
                      quant_types[t].file, i, row[i], fx.values[i]);
        /* block by block, from an odd address (blocks are read by memcpy) */
        uint8_t *odd = malloc(fx.block_bytes + 1);
        for (size_t b = 0; b < fx.n_blocks; b++) {
            float y[256];
            memcpy(odd + 1, fx.blocks + b * fx.block_bytes, fx.block_bytes);
            cr_assert(memra_dequantize_block(quant_types[t].type, odd + 1, y));
            cr_assert(memcmp(y, fx.values + b * fx.qk, fx.qk * sizeof(float)) == 0, "%s block %zu", quant_types[t].file,
                      b);
        }
        fprintf(stderr, "quant: %s: %zu blocks, %zu values bit-exact to gguf.quants.dequantize\n", quant_types[t].file,
                fx.n_blocks, n);
        free(odd), free(row);
        free_fixture(&fx);
    }
}

/* ---- negative controls: plausible mistakes, written here, must not match the fixtures ---- */

static float half(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return memra_f16_to_f32(h);
}

/* Q4_0 with interleaved nibbles: element 2j low, 2j + 1 high. */
static void wrong_q4_0(const uint8_t *b, float *y) {
    float d = half(b);
    for (int j = 0; j < 16; j++) {
        y[2 * j] = (float)((b[2 + j] & 15) - 8) * d;
        y[2 * j + 1] = (float)((b[2 + j] >> 4) - 8) * d;
    }
}

/* Q5_0 with the high half's fifth bits taken from bits 0..15 again. */
static void wrong_q5_0(const uint8_t *b, float *y) {
    float d = half(b);
    uint32_t qh = memra_quant_qh32(b + 2);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((int)((b[6 + j] & 15) | ((qh >> j & 1) << 4)) - 16) * d;
        y[j + 16] = (float)((int)((b[6 + j] >> 4) | ((qh >> j & 1) << 4)) - 16) * d;
    }
}

/* Q4_K with sub-blocks 4..7 unpacked like 0..3 (low 6 bits of bytes j and j + 4). */
static void wrong_q4_k(const uint8_t *b, float *y) {
    float d = half(b), dmin = half(b + 2);
    const uint8_t *sc = b + 4, *q = b + 16;
    for (int s = 0; s < 8; s++) {
        float ds = d * (float)(sc[s] & 63), dm = dmin * (float)(sc[(s + 4) % 12] & 63);
        for (int l = 0; l < 32; l++) {
            int v = s % 2 == 0 ? q[32 * (s / 2) + l] & 15 : q[32 * (s / 2) + l] >> 4;
            y[32 * s + l] = ds * (float)v - dm;
        }
    }
}

/* Q6_K with one scale per 32 elements in order (scale index e / 32 instead of e / 16). */
static void wrong_q6_k(const uint8_t *b, float *y) {
    float right[256];
    memra_dequantize_q6_k(b, right);
    float d = half(b + 208);
    const int8_t *sc = (const int8_t *)(b + 192);
    for (int e = 0; e < 256; e++) {
        float s_right = d * (float)sc[e / 16], s_wrong = d * (float)sc[e / 32];
        y[e] = s_right != 0.0f ? right[e] / s_right * s_wrong : 0.0f;
    }
}

static void assert_wrong_differs(uint32_t type, const char *name, void (*wrong)(const uint8_t *, float *)) {
    fixture fx;
    load_fixture(type, name, &fx);
    size_t differing = 0;
    for (size_t b = 0; b < fx.n_blocks; b++) {
        float y[256];
        wrong(fx.blocks + b * fx.block_bytes, y);
        for (size_t i = 0; i < fx.qk; i++)
            differing += y[i] != fx.values[b * fx.qk + i];
    }
    /* (a fifth-bit mistake only shows where the bits differ: a fifth of the values here) */
    cr_assert(differing >= 8, "%s: the wrong variant matches %zu of %zu values", name, fx.n_blocks * fx.qk - differing,
              fx.n_blocks * fx.qk);
    fprintf(stderr, "quant: negative control %s: the wrong variant differs in %zu of %zu values\n", name, differing,
            fx.n_blocks * fx.qk);
    free_fixture(&fx);
}

Test(quant, wrong_variants_do_not_match) {
    assert_wrong_differs(MEMRA_TYPE_Q4_0, "q4_0", wrong_q4_0);
    assert_wrong_differs(MEMRA_TYPE_Q5_0, "q5_0", wrong_q5_0);
    assert_wrong_differs(MEMRA_TYPE_Q4_K, "q4_k", wrong_q4_k);
    assert_wrong_differs(MEMRA_TYPE_Q6_K, "q6_k", wrong_q6_k);
    /* and a single changed byte of a fixture's block changes its dequantization */
    for (size_t t = 0; t < N_QUANT; t++) {
        fixture fx;
        load_fixture(quant_types[t].type, quant_types[t].file, &fx);
        fx.blocks[fx.block_bytes - 1] ^= 0x10;
        float y[256];
        memra_dequantize_block(quant_types[t].type, fx.blocks, y);
        cr_assert(memcmp(y, fx.values, fx.qk * sizeof(float)) != 0, "%s", quant_types[t].file);
        free_fixture(&fx);
    }
}

/* ---- the cpu backend's dot products ---- */

static uint64_t rng_state = 0x1234567u;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static float rnd_unit(void) { return (float)(rnd() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }

/* Random blocks with finite f16 scales of a sane size (the quants' bits are any bits). */
static void random_blocks(uint32_t type, uint8_t *p, size_t n_blocks) {
    uint32_t bytes = memra_quant_block_bytes(type);
    for (size_t i = 0; i < n_blocks * bytes; i++)
        p[i] = (uint8_t)rnd();
    for (size_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = p + b * bytes;
        uint16_t d = memra_f32_to_f16(0.01f * rnd_unit()), m = memra_f32_to_f16(0.01f * rnd_unit());
        if (type == MEMRA_TYPE_Q6_K) {
            memcpy(blk + 208, &d, 2);
        } else {
            memcpy(blk, &d, 2);
            if (type != MEMRA_TYPE_Q4_0 && type != MEMRA_TYPE_Q5_0 && type != MEMRA_TYPE_Q8_0)
                memcpy(blk + 2, &m, 2);
        }
    }
}

Test(quant, cpu_dot_products_against_float64) {
    cpu_kernels_init();
    const uint32_t rows = 37, cols = 1024;
    float *x = malloc(cols * sizeof(float)), *w = malloc(cols * sizeof(float));
    float *y = malloc(rows * sizeof(float)), *y2 = malloc(rows * sizeof(float)), *dec = malloc(cols * sizeof(float));
    for (uint32_t i = 0; i < cols; i++)
        x[i] = rnd_unit();
    for (size_t t = 0; t < N_QUANT; t++) {
        uint32_t type = quant_types[t].type, qk = memra_quant_block_elems(type);
        size_t row_bytes = (size_t)cols / qk * memra_quant_block_bytes(type);
        uint8_t *data = malloc(rows * row_bytes);
        random_blocks(type, data, (size_t)rows * cols / qk);
        cpu_matrix m = {.data = data, .type = type, .rows = rows, .cols = cols, .row_bytes = row_bytes};
        cpu_matvec_rows(&m, x, y, 0, rows);
        /* any split of the rows gives the same bits */
        cpu_matvec_rows(&m, x, y2, 0, 5);
        cpu_matvec_rows(&m, x, y2, 5, 6);
        cpu_matvec_rows(&m, x, y2, 6, rows);
        cr_assert(memcmp(y, y2, rows * sizeof(float)) == 0, "%s: the row split changes the result",
                  quant_types[t].file);
        double worst = 0;
        for (uint32_t r = 0; r < rows; r++) {
            cr_assert(memra_dequantize_row(type, data + r * row_bytes, cols, w));
            cpu_matrix_row(&m, r, dec);
            cr_assert(memcmp(dec, w, cols * sizeof(float)) == 0, "%s row %u: cpu_matrix_row differs",
                      quant_types[t].file, r);
            double ref = 0, mag = 0;
            for (uint32_t i = 0; i < cols; i++) {
                ref += (double)w[i] * (double)x[i];
                mag += fabs((double)w[i] * (double)x[i]);
            }
            /* lane sums of qk/8 terms, cols/qk block totals per lane, 3 reduction adds, the
             * products: each rounding at most u of a partial sum bounded by mag. */
            double bound = (cols / 8.0 / (cols / qk) + cols / qk + 4.0) * 0x1p-24 * mag;
            double err = fabs((double)y[r] - ref);
            cr_assert(err <= bound, "%s row %u: %.9g vs float64 %.17g (error %.3g > bound %.3g)", quant_types[t].file,
                      r, y[r], ref, err, bound);
            worst = fmax(worst, err / (0x1p-24 * mag));
        }
        fprintf(stderr, "quant: cpu dot %s: worst |cpu - float64| / (u sum|w x|) = %.2f over %u rows of %u\n",
                quant_types[t].file, worst, rows, cols);
        free(data);
    }
    free(x), free(w), free(y), free(y2), free(dec);
}

/* Negative control of the bound: the float64 dot of wrongly dequantized (interleaved) Q4_0
 * weights is far outside it. */
Test(quant, cpu_dot_bound_catches_a_wrong_dequantization) {
    cpu_kernels_init();
    const uint32_t cols = 1024;
    size_t row_bytes = cols / 32 * 18;
    uint8_t *data = malloc(row_bytes);
    random_blocks(MEMRA_TYPE_Q4_0, data, cols / 32);
    float x[1024], w[1024];
    for (uint32_t i = 0; i < cols; i++)
        x[i] = rnd_unit();
    cpu_matrix m = {.data = data, .type = MEMRA_TYPE_Q4_0, .rows = 1, .cols = cols, .row_bytes = row_bytes};
    float y;
    cpu_matvec_rows(&m, x, &y, 0, 1);
    for (uint32_t b = 0; b < cols / 32; b++)
        wrong_q4_0(data + b * 18, w + b * 32);
    double ref = 0, mag = 0;
    for (uint32_t i = 0; i < cols; i++) {
        ref += (double)w[i] * x[i];
        mag += fabs((double)w[i] * x[i]);
    }
    double bound = (4.0 + cols / 32 + 4.0) * 0x1p-24 * mag;
    cr_assert(fabs(y - ref) > 100 * bound, "error %.3g, bound %.3g", fabs(y - ref), bound);
    free(data);
}

/* ---- whole models ---- */

static const uint32_t model_types[] = {MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q4_1, MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q5_1,
                                       MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q6_K};

/* small's matrices have rows of 256 and 768: every type, K-quants included, is used as asked. */
Test(quant, synth_models_use_the_type_and_fall_back_to_q8_0_for_k_quants_on_short_rows) {
    for (size_t t = 0; t < sizeof model_types / sizeof model_types[0]; t++) {
        ct_model cm;
        ct_model_build("small", model_types[t], &cm);
        cr_assert_eq(cm.model->layers[0].wq.type, model_types[t]);
        cr_assert_eq(cm.model->layers[0].w_down.type, model_types[t]);
        cr_assert_eq(cm.model->tok_embd.type, model_types[t]);
        ct_model_free(&cm);
        ct_model_build("tiny", model_types[t], &cm);
        uint32_t want = memra_quant_block_elems(model_types[t]) == 256 ? MEMRA_TYPE_Q8_0 : model_types[t];
        cr_assert_eq(cm.model->layers[0].wq.type, want, "tiny %s", memra_tensor_type_name(model_types[t]));
        cr_assert_eq(cm.model->layers[0].w_down.type, want);
        ct_model_free(&cm);
    }
}

/* Decodes `steps` greedy steps; logits of every step into out. */
static void record(const memra_model *m, const char *opts, uint32_t steps, float *out) {
    ct_arm arm;
    ct_arm_open(m, opts, &arm);
    memra_state *s = ct_state_new(&arm, steps, 1);
    uint32_t token = 1;
    for (uint32_t i = 0; i < steps; i++) {
        ct_step(&arm, s, token, NULL, out + (size_t)i * m->n_vocab);
        token = ct_argmax(out + (size_t)i * m->n_vocab, m->n_vocab);
    }
    arm.cpu->state_free(arm.b, s);
    ct_arm_close(&arm);
}

Test(quant, models_decode_the_same_for_any_thread_count) {
    const uint32_t steps = 6;
    for (size_t t = 0; t < sizeof model_types / sizeof model_types[0]; t++) {
        ct_model cm;
        ct_model_build("small", model_types[t], &cm);
        size_t n = (size_t)steps * cm.model->n_vocab;
        float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
        record(cm.model, "threads=1", steps, a);
        record(cm.model, "threads=3,grain=0", steps, b);
        cr_assert(memcmp(a, b, n * sizeof(float)) == 0, "small %s: threads=1 and threads=3 differ",
                  memra_tensor_type_name(model_types[t]));
        for (size_t i = 0; i < n; i++)
            cr_assert(isfinite(a[i]));
        free(a), free(b);
        ct_model_free(&cm);
    }
}

/* kv=q8's block (memra/numeric.h, the cpu and cuda backends' cache): the scale is amax / 127, a
 * quant is x / d rounded to nearest even (not away from zero) and clamped, a value reads back as
 * q d; a zero block stays zero and a NaN anywhere in a block makes the whole block read back NaN
 * (never a quietly stored 0). Values chosen so that every quotient is exact. */
static void kv_q8_round(float *x) {
    float a = 0.0f;
    for (int i = 0; i < 32; i++)
        a = memra_kv_q8_amax(a, x[i]);
    const float d = memra_kv_q8_scale(a);
    for (int i = 0; i < 32; i++)
        x[i] = memra_kv_q8_value(memra_kv_q8_quant(x[i], d), d);
}
Test(quant, kv_q8_block_rounds_to_nearest_even) {
    float x[32] = {0};
    x[0] = -127.0f; /* amax 127: d = 1, quotients exact */
    x[1] = 2.5f;
    x[2] = 3.5f;
    x[3] = -2.5f;
    x[4] = 0.5f;
    x[5] = 1.5f;
    x[6] = 126.5f;
    x[7] = 100.25f;
    cr_assert_eq(memra_kv_q8_scale(127.0f), 1.0f);
    kv_q8_round(x);
    const float want[8] = {-127.0f, 2.0f, 4.0f, -2.0f, 0.0f, 2.0f, 126.0f, 100.0f};
    for (int i = 0; i < 8; i++)
        cr_assert_eq(x[i], want[i], "value %d: %g, want %g", i, x[i], want[i]);
    /* the negative control: rounding half away from zero (roundf) gives 3, 4, -3: caught above */
    cr_assert_neq(roundf(2.5f), 2.0f);
    float y[32];
    for (int i = 0; i < 32; i++)
        y[i] = (float)(i - 16) * 0.25f; /* amax 4: d = 4/127, not exact: each value within d/2 */
    const float d = memra_kv_q8_scale(4.0f);
    float z[32];
    memcpy(z, y, sizeof z);
    kv_q8_round(z);
    for (int i = 0; i < 32; i++)
        cr_assert(fabsf(z[i] - y[i]) <= 0.5f * d * 1.0001f, "value %d: %g from %g (d %g)", i, z[i], y[i], d);
    cr_assert_eq(memra_kv_q8_quant(-4.0f, d), -127);
    cr_assert_eq(memra_kv_q8_quant(1e30f, d), 127, "clamped");
    float zero[32] = {0};
    kv_q8_round(zero);
    for (int i = 0; i < 32; i++)
        cr_assert(zero[i] == 0.0f && !signbit(zero[i]), "a zero block stays +0");
    float n[32];
    for (int i = 0; i < 32; i++)
        n[i] = 1.0f;
    n[17] = NAN;
    kv_q8_round(n);
    for (int i = 0; i < 32; i++)
        cr_assert(isnan(n[i]), "value %d of a block with a NaN: %g", i, n[i]);
}
