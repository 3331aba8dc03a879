/* test_q8x_quant.c: the activation quantization of the cuda backend's integer Q8_0 GEMV
 * (backends/cuda/q8x_quant.h, the header gemv_q8_0_int includes), checked on the host: no GPU
 * needed, so it runs in CI.
 *
 * - the three-plane split covers [-QMAX, QMAX] exactly, every plane inside int8 (exhaustive);
 * - a chunk's integer dot, scaled once, stays within a bound of 2^-21 of the chunk's weight mass
 *   (relative to max|x'|) of the exact dot, and the 16-bit two-plane variant the kernel first
 *   used (NMSE 2.6e-4 against cpu on llama-1b, measured on the H200) does not: the bound tells
 *   the two apart (the negative control);
 * - a non-finite element makes the chunk's result NaN. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "q8x_quant.h"

static int in_int8(int v) { return v >= -128 && v <= 127; }

/* 0 when q splits into three int8 planes that recombine to q. */
static int split_ok(int q) {
    int hi, mid, lo;
    mc_q8x_split(q, &hi, &mid, &lo);
    return !(in_int8(hi) && hi >= -127 && in_int8(mid) && in_int8(lo) && hi * 65536 + mid * 256 + lo == q);
}

Test(q8x_quant, split_covers_the_range_exactly) {
    const int qmax = (int)MC_Q8X_QMAX;
    long bad = 0;
    for (int q = -qmax; q <= qmax; q++)
        bad += split_ok(q);
    cr_assert_eq(bad, 0, "%ld values of [-%d, %d] do not split into three int8 planes", bad, qmax, qmax);
}

Test(q8x_quant, split_check_fails_outside_the_contract) {
    /* the check above can fail: just past QMAX the top plane leaves [-127, 127] */
    cr_assert_neq(split_ok((int)MC_Q8X_QMAX + 32640), 0);
    cr_assert_neq(split_ok(-(int)MC_Q8X_QMAX - 32897), 0);
}

/* The planes' words from q + 0x808080's bytes (mc_q8x_planes4, what the kernels run) are
 * mc_q8x_split's digits packed (the first value in the low byte) and give q back over the whole range a rounded x' can take
 * (|q| <= QMAX + 1) and past it to the split's own limits; the four values of a word in every
 * position. */
static uint32_t pack_digits(int a, int b, int c, int d) {
    return (uint32_t)(a & 0xff) | (uint32_t)(b & 0xff) << 8 | (uint32_t)(c & 0xff) << 16 | (uint32_t)(d & 0xff) << 24;
}
static long planes_bad(int lo, int hi_end) {
    long bad = 0;
    for (int q = lo; q <= hi_end; q++) {
        const long long span = (long long)hi_end - lo + 1; /* the other three positions: values of the range too */
        const int qs[4] = {q, lo + hi_end - q, (int)(lo + ((long long)(q - lo) * 7919) % span), q / 3};
        int h[4], m[4], l[4];
        for (int i = 0; i < 4; i++)
            mc_q8x_split(qs[i], &h[i], &m[i], &l[i]);
        uint32_t H, M, L;
        mc_q8x_planes4(qs[0], qs[1], qs[2], qs[3], &H, &M, &L);
        int back = 1; /* the words' int8 digits give q back */
        for (int i = 0; i < 4; i++)
            back &= 65536 * (int8_t)(H >> (8 * i)) + 256 * (int8_t)(M >> (8 * i)) + (int8_t)(L >> (8 * i)) == qs[i];
        bad += !back || H != pack_digits(h[0], h[1], h[2], h[3]) || M != pack_digits(m[0], m[1], m[2], m[3]) ||
               L != pack_digits(l[0], l[1], l[2], l[3]);
    }
    return bad;
}

Test(q8x_quant, planes_from_bytes_equal_the_split) {
    const long bad = planes_bad(-(int)MC_Q8X_QMAX - 32896, (int)MC_Q8X_QMAX + 32639);
    cr_assert_eq(bad, 0, "%ld words of mc_q8x_planes4 differ from mc_q8x_split's digits", bad);
}

Test(q8x_quant, planes_check_fails_past_the_range) {
    /* the check above can fail: q + 0x808080 outside [0, 2^24) (the top digit leaves int8) */
    cr_assert_neq(planes_bad((int)MC_Q8X_QMAX + 32640, (int)MC_Q8X_QMAX + 32640), 0);
    cr_assert_neq(planes_bad(-0x808081, -0x808081), 0);
}

/* dp4a on the host: four signed byte products added to c. */
static int dp4a(uint32_t a, uint32_t b, int c) {
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}

static uint32_t pack(const int *v) {
    return (uint32_t)(v[0] & 0xff) | (uint32_t)(v[1] & 0xff) << 8 | (uint32_t)(v[2] & 0xff) << 16 |
           (uint32_t)(v[3] & 0xff) << 24;
}

/* The kernel's chunk dot: x' quantized (three planes, or the 16-bit two-plane variant when
 * two_planes), integer dots with the 16 int8 weights, one scale; the weight scale d_w is 1. */
static float chunk_dot(const float *x, const int8_t *w, int two_planes) {
    float amax = 0.0f;
    int finite = 1;
    for (int i = 0; i < 16; i++) {
        amax = fmaxf(amax, fabsf(x[i]));
        finite = finite && isfinite(x[i]);
    }
    int hi[16], mid[16], lo[16], wv[16];
    float s;
    if (two_planes) { /* the first version: q in [-32512, 32512] = 256 hi + lo */
        const float inv = finite && amax > 0.0f ? 32512.0f / amax : 0.0f;
        s = finite ? amax / 32512.0f : nanf("");
        for (int i = 0; i < 16; i++) {
            const int q = (int)rintf(x[i] * inv);
            hi[i] = 0;
            mid[i] = (q + 128) >> 8;
            lo[i] = q - 256 * mid[i];
        }
    } else {
        const float inv = mc_q8x_inv(amax, finite);
        s = mc_q8x_scale(amax, finite);
        for (int i = 0; i < 16; i++)
            mc_q8x_split((int)rintf(x[i] * inv), &hi[i], &mid[i], &lo[i]);
    }
    for (int i = 0; i < 16; i++)
        wv[i] = w[i];
    int dh = 0, dm = 0, dl = 0;
    for (int k = 0; k < 4; k++) {
        const uint32_t wk = pack(wv + 4 * k);
        dh = dp4a(wk, pack(hi + 4 * k), dh);
        dm = dp4a(wk, pack(mid + 4 * k), dm);
        dl = dp4a(wk, pack(lo + 4 * k), dl);
    }
    return fmaf((float)dh, 65536.0f, (float)(dm * 256 + dl)) * s;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float uniform(void) { return (float)(next_u32() >> 8) / 16777216.0f * 2.0f - 1.0f; }

/* Worst ratio, over many chunks, of |dot - exact| to 2^-21 * sum|w| * max|x'|. */
static double worst_ratio(int two_planes) {
    double worst = 0.0;
    for (int t = 0; t < 200000; t++) {
        float x[16];
        int8_t w[16];
        const float mag = ldexpf(1.0f, (int)(next_u32() % 40) - 20);
        for (int i = 0; i < 16; i++) {
            x[i] = uniform() * mag;
            w[i] = (int8_t)(next_u32() & 0xff);
        }
        if (t % 5 == 0) /* one dominant element: the others keep only what is left of the bits */
            x[next_u32() % 16] = 1000.0f * mag;
        if (t % 7 == 0)
            x[next_u32() % 16] = 0.0f;
        double exact = 0.0, wmass = 0.0, amax = 0.0;
        for (int i = 0; i < 16; i++) {
            exact += (double)w[i] * (double)x[i];
            wmass += fabs((double)w[i]);
            amax = fmax(amax, fabs((double)x[i]));
        }
        const double got = chunk_dot(x, w, two_planes);
        const double bound = ldexp(1.0, -21) * wmass * amax + ldexp(1.0, -22) * fabs(exact);
        if (bound > 0.0)
            worst = fmax(worst, fabs(got - exact) / bound);
    }
    return worst;
}

Test(q8x_quant, chunk_dot_within_bound) {
    const double r = worst_ratio(0);
    cr_assert_leq(r, 1.0, "three planes: worst error %.3g of the bound", r);
}

Test(q8x_quant, sixteen_bits_break_the_bound) {
    const double r = worst_ratio(1);
    cr_assert_gt(r, 10.0, "two planes (16 bits) should exceed the bound by far: worst %.3g", r);
}

Test(q8x_quant, non_finite_chunk_gives_nan) {
    float x[16];
    int8_t w[16];
    for (int i = 0; i < 16; i++) {
        x[i] = 0.25f * (float)(i - 8);
        w[i] = (int8_t)(3 * i - 20);
    }
    cr_assert(isfinite(chunk_dot(x, w, 0)));
    x[5] = nanf("");
    cr_assert(isnan(chunk_dot(x, w, 0)), "a NaN in x must reach the dot");
    x[5] = INFINITY;
    cr_assert(isnan(chunk_dot(x, w, 0)), "an infinity in x must not vanish in the integers");
    memset(x, 0, sizeof x);
    cr_assert_eq(chunk_dot(x, w, 0), 0.0f, "an all-zero chunk");
}
