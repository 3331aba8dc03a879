/* gate_stats.h: the arithmetic of the gate, kept apart so tests can check it directly:
 * comparing two logit vectors bit by bit, the loop rule for token streams, the timing schedule,
 * medians and the bootstrap interval of a ratio of medians. */
#ifndef MEMRA_GATE_STATS_H
#define MEMRA_GATE_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What comparing reference logits `ref` with `got` found. */
typedef struct gate_logit_diff {
    uint32_t n_diff;     /* elements whose bits differ */
    int64_t first_index; /* first differing element, -1 when none */
    float first_ref, first_got;
    uint64_t max_ulp;                          /* largest distance in units in the last place (bit patterns ordered) */
    int64_t max_ulp_index;                     /* where it is, -1 when none */
    double nmse;                               /* sum (got-ref)^2 / sum ref^2, in double; 0 when equal */
    uint32_t argmax_ref, argmax_got;           /* lowest index among equal maxima (NaN ignored) */
    uint32_t n_nonfinite_ref, n_nonfinite_got; /* NaN or infinite elements */
    int64_t first_nonfinite_got;               /* -1 when none */
    int64_t first_nonfinite_ref;               /* -1 when none */
} gate_logit_diff;

void gate_compare_logits(const float *ref, const float *got, uint32_t n, gate_logit_diff *out);

/* Distance between two floats in units in the last place, through their bit patterns mapped to a
 * monotonic integer line (so -0 and +0 are 1 apart; NaNs compare by their bits). */
uint64_t gate_ulp_distance(float a, float b);

/* The loop rule. A stream loops when, over its last L = min(64, n) tokens, some period p with
 * 1 <= p <= 16 and 2p <= L repeats: stream[i] == stream[i - p] for every i in [n - L + p, n).
 * (Two full periods at least, so a short stream is not called periodic by vacuity.) Returns the
 * smallest such p, or 0 when the stream does not loop. */
uint32_t gate_stream_period(const uint32_t *stream, size_t n);
#define GATE_LOOP_WINDOW 64u
#define GATE_LOOP_MAX_PERIOD 16u

/* Which arm runs timing row r of R: 0 for A, 1 for B. ABBA cuts the rows into four blocks
 * (row r is in block floor(4r / R)): A, B, B, A (AAAAA BBBBB BBBBB AAAAA for 20 rows); BAAB is
 * the mirror. */
int gate_schedule_arm(uint32_t row, uint32_t rows, bool baab);

/* Median of n values (sorted copy; the mean of the two middle ones when n is even); NaN when
 * n == 0. */
double gate_median(const double *v, size_t n);

/* Bootstrap of median(b) / median(a): `resamples` draws of each sample with replacement (a
 * counter-based generator from `seed`, so the interval is the same on every run), the 2.5 and
 * 97.5 percentiles of the ratios. False when either sample is empty or memory runs out. */
bool gate_bootstrap_ratio(const double *a, size_t na, const double *b, size_t nb, uint32_t resamples, uint64_t seed,
                          double *lo, double *hi);

#endif
