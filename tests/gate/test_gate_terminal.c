/* test_gate_terminal.c: issue 31, the gate's terminal: the speed verdict in words beside the
 * exactness verdict, ranges that say what they are, no interval from too few rows, a schedule
 * label that matches the rows run, the work stated up front for a long run (item 2); messages
 * that point the right way: arms that differ by design suggest a tolerance, --compare nmse
 * without one suggests one (item 7). Item 1 (no records without --jsonl) is in test_gate_pairs.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate_harness.h"

static gate_result run(const char *const *args) { return gate_run(args, false); }

Test(gate_terminal, the_summary_ends_with_the_speed_in_words) {
    const char *args[] = {
        "--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", "--prime", "8", "--gen", "16", "--rows", "8", NULL};
    gate_result r = run(args);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    const char *speed = strstr(r.err, "  speed        ");
    cr_assert(speed, "no speed line: %s", r.err);
    cr_assert(strstr(speed, ": significant") || strstr(speed, "no significant difference"), "%s", speed);
    cr_assert(strstr(speed, "95% CI ["), "%s", speed);
    cr_assert(strstr(r.err, "(min ") && strstr(r.err, " .. max "), "ranges say min .. max: %s", r.err);
    cr_assert(strstr(r.err, "rows         8 run (ABBA)"), "%s", r.err);
    /* the speed line comes after the exactness verdict, and the record says the same */
    cr_assert(strstr(r.err, "  verdict      PASS") < speed, "%s", r.err);
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert(s && strstr(s, "\"speed\":\""), "%s", s ? s : "(none)");
    free(s);
    gate_result_free(&r);
}

Test(gate_terminal, too_few_rows_give_no_interval) {
    const char *args[] = {
        "--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", "--prime", "4", "--gen", "4", "--rows", "2", NULL};
    gate_result r = run(args);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    cr_assert(strstr(r.err, "too few rows for an interval"), "%s", r.err);
    cr_assert(!strstr(r.err, "95% CI"), "an interval from one row an arm: %s", r.err);
    cr_assert(strstr(r.err, "rows         2 run (AB)"), "the schedule label is the rows run: %s", r.err);
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert(s && strstr(s, "\"ratio_ci95\":null"), "%s", s ? s : "(none)");
    free(s);
    gate_result_free(&r);
}

Test(gate_terminal, a_long_run_states_its_work_up_front) {
    /* 2 x (256 + 256) correctness steps + 2 x 256 prefix steps + 4 rows x 256: 2560 steps, past
     * GATE_ANNOUNCE_STEPS (1000), said before the first step; a second on the tiny preset. */
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", "--rows", "4", "--gen", "256", NULL};
    gate_result r = run(args);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    cr_assert(strstr(r.err, "memra-gate: 2560 steps to run: 2 x 512 correctness steps"), "%s", r.err);
    cr_assert(strstr(r.err, "4 timing rows x 256 steps"), "%s", r.err);
    /* stderr is not a terminal: the end of the reference pass is a line with its ETA */
    cr_assert(strstr(r.err, "memra-gate: reference (arm a) 512/512, elapsed "), "%s", r.err);
    cr_assert(!strchr(r.err, '\r'), "a log gets lines, not a terminal's bar: %s", r.err);
    gate_result_free(&r);
    const char *quiet[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", "--rows", "4", "--gen",
                           "256", "--quiet",       NULL};
    r = run(quiet);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    cr_assert_str_eq(r.err, "", "--quiet says nothing: %s", r.err);
    gate_result_free(&r);
}

Test(gate_terminal, arms_that_differ_by_design_suggest_a_tolerance) {
    const char *args[] = {
        "--a", "cpu:prefill=1", "--b", "cpu:prefill=1,tp=2", "--prime", "4", "--gen", "4", "--rows", "0", NULL};
    gate_result r = run(args);
    cr_assert_eq(r.exit, 1, "%s", r.err);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(v && strstr(v, "differ by design") && strstr(v, "--compare nmse:1e-4"), "%s", v ? v : "(none)");
    free(v);
    cr_assert(strstr(r.err, "verdict      FAIL") && strstr(r.err, "--compare nmse:1e-4"), "%s", r.err);
    gate_result_free(&r);
    /* and the suggestion works: the same pair at that tolerance passes */
    const char *nmse[] = {"--a",       "cpu:prefill=1",
                          "--b",       "cpu:prefill=1,tp=2",
                          "--compare", "nmse:1e-4",
                          "--prime",   "4",
                          "--gen",     "4",
                          "--rows",    "0",
                          "--quiet",   NULL};
    r = run(nmse);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    gate_result_free(&r);
}

Test(gate_terminal, compare_nmse_without_a_value_suggests_one) {
    const char *args[] = {"--compare", "nmse", NULL};
    gate_expect_usage(args, "--compare nmse needs a tolerance: nmse:X, e.g. --compare nmse:1e-4");
}
