/* test_gate_controls.c: the negative controls. The test-only `faulty` backend wraps cpu and
 * corrupts one thing on request; the gate must fail with exit 1 and point at the right step
 * (or row) for each, in serial and pipelined replays, in exact and nmse modes. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate_harness.h"
#include "memra/digest.h"

static double num(const char *line, const char *key) {
    double v = -12345;
    cr_assert(gate_field_num(line, key, &v), "no '%s' in %s", key, line ? line : "(null)");
    return v;
}

/* Runs and expects exit 1 with a failing verdict; returns the result. */
static gate_result expect_fail(const char *const *args) {
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 1, "exit %d, stderr:\n%s\nrecords:\n%.3000s", r.exit, r.err, r.jsonl);
    char *v = gate_record(r.jsonl, "verdict", 0);
    bool pass = true;
    cr_assert(gate_field_bool(v, "pass", &pass) && !pass, "%s", v);
    cr_assert_eq(num(v, "exit"), 1);
    free(v);
    return r;
}

Test(gate_controls, flipped_logit_bit_in_a_prime_step) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:flip_logit_step=5,flip_logit_index=7", GATE_SMALL,
                          NULL};
    gate_result r = expect_fail(args);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert_eq(num(m, "step"), 5, "%s", m);
    cr_assert(strstr(m, "\"phase\":\"prime\""), "%s", m);
    cr_assert(strstr(m, "\"what\":[\"logits\",\"logits_digest\"]"), "%s", m);
    cr_assert_eq(num(m, "index"), 7, "%s", m);
    cr_assert_eq(num(m, "differing_logits"), 1, "%s", m);
    cr_assert_eq(num(m, "max_ulp"), 1, "%s", m);
    cr_assert(strstr(m, "\"argmax_differs\":false"), "%s", m);
    /* only that step is bad, and no timing runs after a mismatch */
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert_eq(num(s, "bad_steps"), 1, "%s", s);
    cr_assert_eq(gate_count_records(r.jsonl, "measure"), 0);
    char *step = gate_record(r.jsonl, "step", 5);
    cr_assert(strstr(step, "\"ok\":false"), "%s", step);
    free(step);
    free(s);
    free(m);
    gate_result_free(&r);
}

Test(gate_controls, flipped_logit_bit_in_a_generated_step) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:flip_logit_step=20", GATE_SMALL, NULL};
    gate_result r = expect_fail(args);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert_eq(num(m, "step"), 20, "%s", m);
    cr_assert(strstr(m, "\"phase\":\"gen\""), "%s", m);
    cr_assert_eq(num(m, "phase_step"), 4, "%s", m);
    cr_assert_eq(num(m, "index"), 0, "%s", m);
    cr_assert(strstr(r.jsonl, "\"reason\":\"1 of 32 steps differ; first at step 20 (gen 4)"), "%s", r.jsonl);
    free(m);
    gate_result_free(&r);
}

Test(gate_controls, flipped_logit_bit_in_a_pipelined_replay) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:flip_logit_step=9,window=3", GATE_SMALL, NULL};
    gate_result r = expect_fail(args);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert_eq(num(m, "step"), 9, "%s", m);
    cr_assert(strstr(m, "\"what\":[\"logits\"]"), "pipelined: step 9 is not a drain point: %s", m);
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert_eq(num(s, "bad_steps"), 1, "%s", s);
    free(s);
    free(m);
    gate_result_free(&r);
}

Test(gate_controls, flipped_logit_bit_on_the_reference_arm) {
    const char *args[] = {"--a", "faulty:flip_logit_step=3", "--b", "cpu:prefill=1", GATE_SMALL, NULL};
    gate_result r = expect_fail(args);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert_eq(num(m, "step"), 3, "%s", m);
    free(m);
    gate_result_free(&r);
}

Test(gate_controls, nmse_mode_zero_tolerance_catches_one_ulp) {
    const char *args[] = {"--a",       "cpu:prefill=1", "--b",      "faulty:flip_logit_step=5",
                          "--compare", "nmse:0",        GATE_SMALL, NULL};
    gate_result r = expect_fail(args);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert_eq(num(m, "step"), 5, "%s", m);
    cr_assert(strstr(m, "\"what\":[\"nmse\"]"), "%s", m);
    cr_assert_gt(num(m, "nmse"), 0.0, "%s", m);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(strstr(v, "\"mode\":\"nmse:0\""), "%s", v);
    free(v);
    free(m);
    gate_result_free(&r);
}

Test(gate_controls, nmse_mode_tolerates_what_its_tolerance_allows) {
    /* The same one-ulp fault is within nmse:1e-6: the tolerance mode is a tolerance. */
    const char *args[] = {"--a",       "cpu:prefill=1", "--b",      "faulty:flip_logit_step=5",
                          "--compare", "nmse:1e-6",     GATE_SMALL, NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "%s\n%s", r.err, r.jsonl);
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert_gt(num(s, "max_nmse"), 0.0, "%s", s);
    free(s);
    gate_result_free(&r);
}

Test(gate_controls, corrupted_kv_cache_element) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:corrupt_cache_step=7", GATE_SMALL, NULL};
    gate_result r = expect_fail(args);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert_eq(num(m, "step"), 7, "%s", m);
    cr_assert(strstr(m, "\"what\":[\"cache\"]"), "only the cache differs: %s", m);
    cr_assert_eq(num(m, "differing_logits"), 0, "%s", m);
    cr_assert(strstr(m, "\"first\":true"), "%s", m);
    /* every later state holds the corrupted slot: steps 7..31 are bad */
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert_eq(num(s, "bad_steps"), 25, "%s", s);
    char *step6 = gate_record(r.jsonl, "step", 6);
    cr_assert(strstr(step6, "\"ok\":true"), "%s", step6);
    free(step6);
    free(s);
    free(m);
    gate_result_free(&r);
}

Test(gate_controls, corrupted_kv_cache_in_a_pipelined_replay_is_caught_where_it_drains) {
    /* A pipelined arm is digested where its pipeline drains: the end of the prime phase (step 15)
     * is the first place the gate can see the cache of a window of 3. */
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:corrupt_cache_step=7,window=3", GATE_SMALL, NULL};
    gate_result r = expect_fail(args);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert_eq(num(m, "step"), 15, "%s", m);
    cr_assert(strstr(m, "\"what\":[\"cache\"]"), "%s", m);
    free(m);
    gate_result_free(&r);
}

Test(gate_controls, corrupted_token_in_one_timing_row) {
    /* 4 rows: A B B A. B's second row (restore 2: restore 0 is the gate's copy of the correctness
     * run's prefix) is gate row 2. */
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:corrupt_row=2,corrupt_row_token=3", GATE_SMALL, NULL};
    gate_result r = expect_fail(args);
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert_eq(num(s, "bad_steps"), 0, "the correctness run is clean: %s", s);
    cr_assert_eq(num(s, "row_failures"), 1, "%s", s);
    cr_assert_eq(gate_count_records(r.jsonl, "measure"), 4);
    for (int i = 0; i < 4; i++) {
        char *row = gate_record(r.jsonl, "measure", i);
        bool verified = true;
        cr_assert(gate_field_bool(row, "verified", &verified));
        cr_assert_eq(verified, i != 2, "row %d: %s", i, row);
        free(row);
    }
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert(strstr(m, "\"where\":\"timing\""), "%s", m);
    cr_assert_eq(num(m, "row"), 2, "%s", m);
    /* one mismatch shape (RECORDS.md): the generated token's index is its phase_step */
    cr_assert_eq(num(m, "phase_step"), 3, "%s", m);
    cr_assert_eq(num(m, "step"), 16 + 3, "%s", m);
    cr_assert(strstr(m, "\"what\":[\"token\"]") && strstr(m, "\"against\":\"correctness\""), "%s", m);
    cr_assert_eq(num(m, "token_got"), (num(m, "token_ref") + 1) - (num(m, "token_ref") + 1 >= 512 ? 512 : 0), "%s", m);
    free(m);
    free(s);
    gate_result_free(&r);
}

Test(gate_controls, mismatch_report_gives_values) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:flip_logit_step=2", GATE_SMALL, NULL};
    gate_result r = expect_fail(args);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert(strstr(m, "\"ref\":{\"value\":") && strstr(m, "\"got\":{\"value\":"), "%s", m);
    cr_assert(strstr(m, "\"bits\":\"0x"), "%s", m);
    free(m);
    /* the summary table names the first bad step */
    cr_assert(strstr(r.jsonl, "\"first_mismatch\":{\"step\":2"), "%s", r.jsonl);
    gate_result_free(&r);
}

Test(gate_controls, looping_stream_makes_rows_ineligible) {
    /* Both arms sample token 7 at every step: the arms agree, but the stream loops (period 1), so
     * the comparison is ineligible: exit 1. */
    const char *args[] = {"--a", "faulty:force_token=7", "--b", "faulty:force_token=7,threads=1", GATE_SMALL, NULL};
    gate_result r = expect_fail(args);
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert_eq(num(s, "bad_steps"), 0, "%s", s);
    cr_assert_eq(num(s, "rows_ineligible"), 4, "%s", s);
    char *m = gate_record(r.jsonl, "measure", 0);
    bool verified = false, eligible = true;
    cr_assert(gate_field_bool(m, "verified", &verified) && verified, "%s", m);
    cr_assert(gate_field_bool(m, "eligible", &eligible) && !eligible, "%s", m);
    cr_assert(strstr(m, "loops with period 1"), "%s", m);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(strstr(v, "ineligible comparison"), "%s", v);
    free(v);
    free(m);
    free(s);
    gate_result_free(&r);
}

Test(gate_controls, early_eos_makes_rows_ineligible) {
    /* Token 2 is the tiny preset's EOS. */
    const char *args[] = {"--a", "faulty:force_token=2", "--b", "faulty:force_token=2", GATE_SMALL, NULL};
    gate_result r = expect_fail(args);
    char *m = gate_record(r.jsonl, "measure", 0);
    cr_assert(strstr(m, "early EOS"), "%s", m);
    free(m);
    gate_result_free(&r);
}

Test(gate_controls, looping_stream_with_rows_zero_is_not_timed) {
    /* Without timing there is nothing to be ineligible: the correctness verdict stands. */
    const char *args[] = {"--a",     "faulty:force_token=7",
                          "--b",     "faulty:force_token=7",
                          "--prime", "16",
                          "--gen",   "16",
                          "--rows",  "0",
                          "--quiet", NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    gate_result_free(&r);
}

Test(gate_controls, census_record_only_when_offered) {
    const char *with[] = {"--a", "cpu:prefill=1", "--b", "faulty:census=1", GATE_SMALL, NULL};
    gate_result r = gate_run(with, false);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    /* one for the correctness state of b, one for its timing state; none for cpu */
    cr_assert_eq(gate_count_records(r.jsonl, "census"), 2, "%s", r.jsonl);
    char *c = gate_record(r.jsonl, "census", 0);
    cr_assert(strstr(c, "\"arm\":\"b\"") && strstr(c, "\"kind\":\"host\",\"count\":32"), "%s", c);
    cr_assert(strstr(c, "\"kind\":\"host:max_in_flight\",\"count\":1"), "serial: %s", c);
    free(c);
    gate_result_free(&r);
    const char *without[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", GATE_SMALL, NULL};
    /* a window of 3 really keeps 3 steps in flight, in the replay and in the timing rows */
    const char *piped[] = {"--a", "cpu:prefill=1", "--b", "faulty:census=1,window=3", GATE_SMALL, NULL};
    r = gate_run(piped, false);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    for (int i = 0; i < 2; i++) {
        c = gate_record(r.jsonl, "census", i);
        cr_assert(c && strstr(c, "\"kind\":\"host:max_in_flight\",\"count\":3"), "%s", c);
        free(c);
    }
    gate_result_free(&r);
    r = gate_run(without, false);
    cr_assert_eq(gate_count_records(r.jsonl, "census"), 0);
    gate_result_free(&r);
}

Test(gate_controls, nan_logit_is_a_failure_of_its_own) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:nan_logit_step=11,flip_logit_index=40", GATE_SMALL,
                          NULL};
    gate_result r = expect_fail(args);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert_eq(num(m, "step"), 11, "%s", m);
    cr_assert(strstr(m, "\"nonfinite\""), "%s", m);
    cr_assert_eq(num(m, "first_nonfinite_got"), 40, "%s", m);
    cr_assert(strstr(m, "\"class\":\"nan\""), "%s", m);
    free(m);
    /* in nmse mode too, whatever the tolerance */
    const char *nmse[] = {"--a",       "cpu:prefill=1", "--b",      "faulty:nan_logit_step=11",
                          "--compare", "nmse:1e30",     GATE_SMALL, NULL};
    gate_result r2 = expect_fail(nmse);
    m = gate_record(r2.jsonl, "mismatch", 0);
    cr_assert_eq(num(m, "step"), 11, "%s", m);
    cr_assert(strstr(m, "\"nonfinite\""), "%s", m);
    free(m);
    gate_result_free(&r2);
    gate_result_free(&r);
}

Test(gate_controls, failed_digests_on_both_arms_are_an_error_not_a_match) {
    /* Both arms' cache digests fail at the same step (OpenSSL could not compute them). Were a
     * failed digest a fixed value (32 zero bytes, as before), the two would agree and the gate
     * would PASS; it must stop with a runtime error that says why. The same run without the
     * fault passes, so the error comes from the failed digests alone. */
    const char *ok[] = {"--a", "faulty", "--b", "faulty", GATE_SMALL, NULL};
    gate_result r0 = gate_run(ok, false);
    cr_assert_eq(r0.exit, 0, "%s\n%s", r0.err, r0.jsonl);
    gate_result_free(&r0);
    const char *args[] = {"--a", "faulty:digest_fail_step=5", "--b", "faulty:digest_fail_step=5", GATE_SMALL, NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 3, "exit %d\n%s\n%s", r.exit, r.err, r.jsonl);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert_not_null(v, "%s", r.jsonl);
    cr_assert(strstr(v, "digest(s) could not be computed"), "%s", v);
    cr_assert(strstr(v, "\"pass\":false"), "%s", v);
    free(v);
    gate_result_free(&r);
}

Test(gate_controls, a_failed_digest_equals_no_other_and_is_counted) {
    /* The library side of the test above: two failed digests differ from each other and from
     * 32 zero bytes, and each is counted; a real digest is unaffected ("abc", FIPS 180-2). */
    const uint64_t before = memra_sha256_failures();
    uint8_t a[32], b[32], zero[32] = {0}, abc[32];
    memra_sha256_final(NULL, a); /* as after a sha256_new that failed */
    memra_sha256_final(NULL, b);
    cr_assert_neq(memcmp(a, b, 32), 0, "two failed digests must differ");
    cr_assert_neq(memcmp(a, zero, 32), 0);
    cr_assert_eq(memra_sha256_failures(), before + 2);
    memra_sha256("abc", 3, abc);
    char hex[MEMRA_SHA256_HEX];
    memra_sha256_hex(abc, hex);
    cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    cr_assert_eq(memra_sha256_failures(), before + 2);
}
