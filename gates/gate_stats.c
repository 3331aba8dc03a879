/* gate_stats.c: logit comparison, loop rule, schedule, median, bootstrap (see gate_stats.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gate_stats.h"
#include "memra/numeric.h"

/* Maps float bits to an integer line that is monotonic in the float's value. */
static int64_t ordered(float f) {
    uint32_t u = memra_f32_to_bits(f);
    if (u & 0x80000000u)
        return -(int64_t)(u & 0x7fffffffu);
    return (int64_t)u;
}

uint64_t gate_ulp_distance(float a, float b) {
    int64_t d = ordered(a) - ordered(b);
    if (memra_f32_to_bits(a) != memra_f32_to_bits(b) && d == 0)
        return 1; /* +0 and -0 */
    return (uint64_t)(d < 0 ? -d : d);
}

static uint32_t argmax(const float *v, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best] || v[best] != v[best])
            best = i;
    return best;
}

void gate_compare_logits(const float *ref, const float *got, uint32_t n, gate_logit_diff *out) {
    memset(out, 0, sizeof *out);
    out->first_index = out->max_ulp_index = -1;
    out->first_nonfinite_got = out->first_nonfinite_ref = -1;
    double num = 0.0, den = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        float a = ref[i], b = got[i];
        if (!isfinite(a) && out->n_nonfinite_ref++ == 0)
            out->first_nonfinite_ref = i;
        if (!isfinite(b) && out->n_nonfinite_got++ == 0)
            out->first_nonfinite_got = i;
        double d = (double)b - (double)a;
        num += d * d;
        den += (double)a * (double)a;
        if (memra_f32_to_bits(a) == memra_f32_to_bits(b))
            continue;
        if (out->n_diff++ == 0) {
            out->first_index = i;
            out->first_ref = a;
            out->first_got = b;
        }
        uint64_t ulp = gate_ulp_distance(a, b);
        if (ulp > out->max_ulp || out->max_ulp_index < 0) {
            out->max_ulp = ulp;
            out->max_ulp_index = i;
        }
    }
    if (out->n_diff == 0)
        out->nmse = 0.0;
    else if (den > 0.0)
        out->nmse = num / den;
    else
        out->nmse = INFINITY;
    if (n) {
        out->argmax_ref = argmax(ref, n);
        out->argmax_got = argmax(got, n);
    }
}

uint32_t gate_stream_period(const uint32_t *stream, size_t n) {
    size_t window = n < GATE_LOOP_WINDOW ? n : GATE_LOOP_WINDOW;
    for (size_t p = 1; p <= GATE_LOOP_MAX_PERIOD && 2 * p <= window; p++) {
        bool periodic = true;
        for (size_t i = n - window + p; i < n && periodic; i++)
            periodic = stream[i] == stream[i - p];
        if (periodic)
            return (uint32_t)p;
    }
    return 0;
}

int gate_schedule_arm(uint32_t row, uint32_t rows, bool baab) {
    uint64_t block = rows ? (4ull * row) / rows : 0;
    int b = block == 1 || block == 2;
    return baab ? !b : b;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

double gate_median(const double *v, size_t n) {
    if (n == 0)
        return NAN;
    double *s = malloc(n * sizeof *s);
    if (!s)
        return NAN;
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

/* Percentile of sorted values by linear interpolation between closest ranks. */
static double percentile(const double *sorted, size_t n, double q) {
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)pos;
    if (lo + 1 >= n)
        return sorted[n - 1];
    double frac = pos - (double)lo;
    return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

bool gate_bootstrap_ratio(const double *a, size_t na, const double *b, size_t nb, uint32_t resamples, uint64_t seed,
                          double *lo, double *hi) {
    if (na == 0 || nb == 0 || resamples == 0)
        return false;
    double *ra = malloc(na * sizeof *ra), *rb = malloc(nb * sizeof *rb);
    double *ratios = malloc((size_t)resamples * sizeof *ratios);
    bool ok = ra && rb && ratios;
    uint64_t counter = 0;
    for (uint32_t r = 0; ok && r < resamples; r++) {
        for (size_t i = 0; i < na; i++)
            ra[i] = a[memra_mix64(seed ^ memra_mix64(++counter)) % na];
        for (size_t i = 0; i < nb; i++)
            rb[i] = b[memra_mix64(seed ^ memra_mix64(++counter)) % nb];
        ratios[r] = gate_median(rb, nb) / gate_median(ra, na);
    }
    if (ok) {
        qsort(ratios, resamples, sizeof *ratios, cmp_double);
        *lo = percentile(ratios, resamples, 0.025);
        *hi = percentile(ratios, resamples, 0.975);
    }
    free(ra);
    free(rb);
    free(ratios);
    return ok;
}
