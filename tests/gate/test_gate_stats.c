/* test_gate_stats.c: the gate's arithmetic: ulp distances, the logit comparison, the loop rule,
 * the ABBA schedule, the median and the bootstrap interval. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "gate_stats.h"
#include "memra/numeric.h"

Test(gate_stats, ulp_distance) {
    cr_assert_eq(gate_ulp_distance(1.0f, 1.0f), 0);
    cr_assert_eq(gate_ulp_distance(1.0f, memra_bits_to_f32(memra_f32_to_bits(1.0f) + 1)), 1);
    cr_assert_eq(gate_ulp_distance(memra_bits_to_f32(memra_f32_to_bits(1.0f) + 5), 1.0f), 5);
    cr_assert_eq(gate_ulp_distance(0.0f, -0.0f), 1);
    /* across zero: the smallest positive and negative subnormals are 2 apart */
    cr_assert_eq(gate_ulp_distance(memra_bits_to_f32(1), memra_bits_to_f32(0x80000001u)), 2);
}

Test(gate_stats, compare_finds_first_and_largest) {
    float ref[6] = {1, 2, 3, 4, 5, 6}, got[6];
    memcpy(got, ref, sizeof got);
    gate_logit_diff d;
    gate_compare_logits(ref, got, 6, &d);
    cr_assert_eq(d.n_diff, 0);
    cr_assert_eq(d.first_index, -1);
    cr_assert_eq(d.nmse, 0.0);
    got[2] = memra_bits_to_f32(memra_f32_to_bits(3.0f) ^ 1u);
    got[4] = memra_bits_to_f32(memra_f32_to_bits(5.0f) + 3);
    gate_compare_logits(ref, got, 6, &d);
    cr_assert_eq(d.n_diff, 2);
    cr_assert_eq(d.first_index, 2);
    cr_assert_eq(d.first_ref, 3.0f);
    cr_assert_eq(d.max_ulp, 3);
    cr_assert_eq(d.max_ulp_index, 4);
    cr_assert_gt(d.nmse, 0.0);
    cr_assert_eq(d.argmax_ref, 5);
    cr_assert_eq(d.argmax_got, 5);
    got[0] = 100.0f;
    gate_compare_logits(ref, got, 6, &d);
    cr_assert_eq(d.argmax_got, 0);
}

Test(gate_stats, compare_flags_nonfinite) {
    float ref[4] = {1, 2, 3, 4}, got[4] = {1, NAN, 3, INFINITY};
    gate_logit_diff d;
    gate_compare_logits(ref, got, 4, &d);
    cr_assert_eq(d.n_nonfinite_got, 2);
    cr_assert_eq(d.first_nonfinite_got, 1);
    cr_assert_eq(d.n_nonfinite_ref, 0);
    cr_assert(!(d.nmse <= 1e30), "nmse of a NaN must not pass a tolerance");
    /* a NaN equal in bits on both sides is still a failure of its own */
    float a[2] = {NAN, 1}, b[2] = {NAN, 1};
    gate_compare_logits(a, b, 2, &d);
    cr_assert_eq(d.n_diff, 0);
    cr_assert_eq(d.n_nonfinite_ref, 1);
    cr_assert_eq(d.n_nonfinite_got, 1);
}

Test(gate_stats, loop_rule) {
    uint32_t s[80];
    for (uint32_t i = 0; i < 80; i++)
        s[i] = i * 7 + 3; /* no repeats */
    cr_assert_eq(gate_stream_period(s, 80), 0);
    cr_assert_eq(gate_stream_period(s, 16), 0);
    cr_assert_eq(gate_stream_period(s, 1), 0);
    cr_assert_eq(gate_stream_period(s, 0), 0);
    /* a constant tail over the last 64 tokens: period 1 */
    for (uint32_t i = 16; i < 80; i++)
        s[i] = 5;
    cr_assert_eq(gate_stream_period(s, 80), 1);
    /* one break inside the window: not a loop */
    s[40] = 6;
    cr_assert_eq(gate_stream_period(s, 80), 0);
    /* period 3 */
    for (uint32_t i = 0; i < 80; i++)
        s[i] = i % 3;
    cr_assert_eq(gate_stream_period(s, 80), 3);
    /* period 16 loops, period 17 does not count */
    for (uint32_t i = 0; i < 80; i++)
        s[i] = i % 16;
    cr_assert_eq(gate_stream_period(s, 80), 16);
    for (uint32_t i = 0; i < 80; i++)
        s[i] = i % 17;
    cr_assert_eq(gate_stream_period(s, 80), 0);
    /* a short stream needs two full periods: 8 distinct tokens are no loop, abab is */
    for (uint32_t i = 0; i < 8; i++)
        s[i] = i;
    cr_assert_eq(gate_stream_period(s, 8), 0);
    uint32_t abab[4] = {1, 2, 1, 2};
    cr_assert_eq(gate_stream_period(abab, 4), 2);
    /* a loop that started before the window counts; one that ended inside it does not */
    for (uint32_t i = 0; i < 80; i++)
        s[i] = i < 70 ? i % 2 : 100 + i;
    cr_assert_eq(gate_stream_period(s, 80), 0);
}

Test(gate_stats, schedule) {
    const char *abba20 = "AAAAABBBBBBBBBBAAAAA";
    for (uint32_t r = 0; r < 20; r++) {
        cr_assert_eq(gate_schedule_arm(r, 20, false), abba20[r] == 'B', "row %u", r);
        cr_assert_eq(gate_schedule_arm(r, 20, true), abba20[r] == 'A', "BAAB row %u", r);
    }
    cr_assert_eq(gate_schedule_arm(0, 4, false), 0);
    cr_assert_eq(gate_schedule_arm(1, 4, false), 1);
    cr_assert_eq(gate_schedule_arm(2, 4, false), 1);
    cr_assert_eq(gate_schedule_arm(3, 4, false), 0);
    cr_assert_eq(gate_schedule_arm(0, 2, false), 0);
    cr_assert_eq(gate_schedule_arm(1, 2, false), 1);
}

Test(gate_stats, median) {
    double v[5] = {5, 1, 4, 2, 3};
    cr_assert_eq(gate_median(v, 5), 3.0);
    cr_assert_eq(gate_median(v, 4), 3.0); /* 1 2 4 5 -> 3 */
    cr_assert(isnan(gate_median(v, 0)));
}

Test(gate_stats, bootstrap_interval) {
    double a[10], b[10];
    for (int i = 0; i < 10; i++) {
        a[i] = 100 + i;
        b[i] = 200 + 2 * i;
    }
    double lo = 0, hi = 0, lo2 = 0, hi2 = 0;
    cr_assert(gate_bootstrap_ratio(a, 10, b, 10, 2000, 42, &lo, &hi));
    cr_assert(lo <= 2.0 + 1e-9 && hi >= 2.0 - 1e-9 && lo <= hi, "[%g, %g]", lo, hi);
    cr_assert(lo > 1.8 && hi < 2.2, "[%g, %g]", lo, hi);
    cr_assert(gate_bootstrap_ratio(a, 10, b, 10, 2000, 42, &lo2, &hi2));
    cr_assert(lo == lo2 && hi == hi2, "the interval must be reproducible");
    cr_assert(!gate_bootstrap_ratio(a, 0, b, 10, 2000, 42, &lo, &hi));
    /* identical constant samples: a zero-width interval at 1 */
    double c[3] = {7, 7, 7};
    cr_assert(gate_bootstrap_ratio(c, 3, c, 3, 500, 1, &lo, &hi));
    cr_assert(lo == 1.0 && hi == 1.0);
}
