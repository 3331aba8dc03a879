/* test_gate_fixes.c: the gate's answers to a review: a long timing schedule in the protocol
 * record, the device-carried token verified without timing rows, sampling values that a 32-bit
 * float cannot hold, the step limit with --prompt-ids, and a pair of arms that resolve to the
 * same configuration. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate_harness.h"

static double num(const char *line, const char *key) {
    double v = -12345;
    cr_assert(gate_field_num(line, key, &v), "no '%s' in %s", key, line ? line : "(null)");
    return v;
}

/* ------------------------------------------------------------------------------------------ */
/* 1. A schedule longer than the protocol's blocks buffer                                      */

Test(gate_fixes, long_schedule_blocks_are_truncated_not_overflowed) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--prime", "2", "--gen",
                          "2",   "--rows",        "600", "--quiet",       NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d, stderr:\n%s", r.exit, r.err);
    char *p = gate_record(r.jsonl, "protocol", 0);
    char blocks[1024] = "";
    cr_assert(gate_field_str(p, "blocks", blocks, sizeof blocks), "%s", p);
    size_t n = strlen(blocks);
    cr_assert(n > 400 && n < 512, "blocks has %zu characters: %s", n, blocks);
    cr_assert_str_eq(blocks + n - 3, "...", "a truncated schedule ends in '...': %s", blocks);
    /* 600 rows: quarters of 150, the first all A, then a space and B's */
    for (size_t i = 0; i < 150; i++)
        cr_assert_eq(blocks[i], 'A', "char %zu: %s", i, blocks);
    cr_assert_eq(blocks[150], ' ', "%s", blocks);
    for (size_t i = 151; i < n - 3; i++)
        cr_assert(blocks[i] == 'B' || blocks[i] == ' ' || blocks[i] == 'A', "char %zu: %s", i, blocks);
    cr_assert_eq(gate_count_records(r.jsonl, "measure"), 600);
    free(p);
    gate_result_free(&r);
}

Test(gate_fixes, short_schedule_blocks_are_whole) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--prime", "2", "--gen",
                          "2",   "--rows",        "8",   "--quiet",       NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d, stderr:\n%s", r.exit, r.err);
    char *p = gate_record(r.jsonl, "protocol", 0);
    char blocks[64] = "";
    cr_assert(gate_field_str(p, "blocks", blocks, sizeof blocks), "%s", p);
    cr_assert_str_eq(blocks, "AA BB BB AA");
    free(p);
    gate_result_free(&r);
}

/* ------------------------------------------------------------------------------------------ */
/* 2. The device-carried token, verified with and without timing rows                          */

Test(gate_fixes, wrong_carried_token_fails_without_rows) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:carry_off=1", "--prime", "8", "--gen", "8", "--rows",
                          "0",   "--quiet",       NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 1, "exit %d, stderr:\n%s\nrecords:\n%.3000s", r.exit, r.err, r.jsonl);
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert_eq(num(s, "bad_steps"), 0, "the correctness phase feeds explicit tokens: %s", s);
    cr_assert(strstr(s, "\"carry_check\":{\"ran\":true"), "%s", s);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert(m && strstr(m, "\"where\":\"carry\"") && strstr(m, "\"arm\":\"b\""), "%s", m ? m : "(none)");
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(strstr(v, "device-carried"), "%s", v);
    /* arm a's pass is clean */
    char *c = gate_record(r.jsonl, "carry_check", 0);
    cr_assert(c && strstr(c, "\"arm\":\"a\"") && strstr(c, "\"verified\":true"), "%s", c ? c : "(none)");
    free(c);
    c = gate_record(r.jsonl, "carry_check", 1);
    cr_assert(c && strstr(c, "\"arm\":\"b\"") && strstr(c, "\"verified\":false"), "%s", c ? c : "(none)");
    free(c);
    free(v);
    free(m);
    free(s);
    gate_result_free(&r);
}

Test(gate_fixes, wrong_carried_token_fails_in_rows) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:carry_off=1", "--prime", "8", "--gen", "8", "--rows",
                          "4",   "--quiet",       NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 1, "exit %d, stderr:\n%s\nrecords:\n%.3000s", r.exit, r.err, r.jsonl);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert(m && strstr(m, "\"where\":\"timing\"") && strstr(m, "\"arm\":\"b\""), "%s", m ? m : "(none)");
    /* with rows, the rows are the carry check */
    cr_assert_eq(gate_count_records(r.jsonl, "carry_check"), 0);
    free(m);
    gate_result_free(&r);
}

Test(gate_fixes, clean_pair_passes_the_carry_check_without_rows) {
    const char *args[] = {
        "--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", "--prime", "8", "--gen", "8", "--rows",
        "0",   "--quiet",       NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d, stderr:\n%s", r.exit, r.err);
    cr_assert_eq(gate_count_records(r.jsonl, "carry_check"), 2, "%s", r.jsonl);
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert(strstr(s, "\"carry_check\":{\"ran\":true,\"verified\":true"), "%s", s);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(strstr(v, "device-carried tokens verified"), "%s", v);
    free(v);
    free(s);
    gate_result_free(&r);
}

Test(gate_fixes, clean_pipelined_pair_without_rows_says_where_digests_compare) {
    const char *args[] = {"--a",     "cpu:prefill=1",
                          "--b",     "cpu:prefill=1,window=3",
                          "--prime", "8",
                          "--gen",   "8",
                          "--rows",  "0",
                          "--temp",  "0.9",
                          "--seed",  "3",
                          "--quiet", NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d, stderr:\n%s", r.exit, r.err);
    cr_assert_eq(gate_count_records(r.jsonl, "carry_check"), 2, "%s", r.jsonl);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(strstr(v, "only where its pipeline drains"), "%s", v);
    cr_assert(!strstr(v, "bit-identical in logits, cache and hidden"), "%s", v);
    free(v);
    gate_result_free(&r);
}

Test(gate_fixes, carry_off_needs_a_serial_arm) {
    /* faulty cannot know a carried token while a step is in flight: it says so (runtime error) */
    const char *args[] = {
        "--a", "cpu:prefill=1", "--b", "faulty:carry_off=1,window=2", "--prime", "8", "--gen", "8", "--rows",
        "0",   "--quiet",       NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 3, "exit %d, stderr:\n%s", r.exit, r.err);
    cr_assert(strstr(r.err, "carry_off"), "%s", r.err);
    gate_result_free(&r);
}

/* ------------------------------------------------------------------------------------------ */
/* 3. Sampling values a 32-bit float cannot hold                                               */

#define USAGE(name, message, ...) GATE_USAGE(gate_fixes, name, message, __VA_ARGS__)

USAGE(temp_underflows_to_zero, "--temp 1e-46", "--temp", "1e-46")
USAGE(temp_subnormal, "--temp 1e-40", "--temp", "1e-40")
USAGE(top_p_rounds_to_one, "--top-p 0.99999999", "--temp", "1", "--top-p", "0.99999999")
USAGE(top_p_underflows_to_zero, "--top-p 1e-50", "--temp", "1", "--top-p", "1e-50")

Test(gate_fixes, top_p_just_below_one_as_a_float_is_kept) {
    const char *args[] = {
        "--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--prime",   "4",       "--gen", "4", "--rows",
        "0",   "--temp",        "1",   "--top-p",       "0.9999999", "--quiet", NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d, stderr:\n%s", r.exit, r.err);
    char *p = gate_record(r.jsonl, "protocol", 0);
    double top_p = 0;
    cr_assert(gate_field_num(p, "top_p", &top_p) && top_p < 1.0, "%s", p);
    free(p);
    gate_result_free(&r);
}

/* ------------------------------------------------------------------------------------------ */
/* 4. --prompt-ids and the step limit; a word with a NUL byte                                  */

static char *write_temp_bytes(const char *bytes, size_t n) {
    char *path = strdup("/tmp/memra-gate-ids-XXXXXX");
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    fwrite(bytes, 1, n, f);
    fclose(f);
    return path;
}

Test(gate_fixes, prompt_ids_with_nul_byte_is_refused) {
    static const char text[] = "1 12\0junk 3\n";
    char *path = write_temp_bytes(text, sizeof text - 1);
    const char *args[] = {"--prompt-ids", path, "--gen", "4", "--rows", "0", NULL};
    gate_expect_usage(args, "NUL");
    unlink(path);
    free(path);
}

Test(gate_fixes, prompt_ids_past_the_step_limit_is_refused) {
    /* 2^20 ids (the most a file may hold) set prime to 2^20: with --gen 4 that is past the limit */
    const size_t ids = 1u << 20;
    char *text = malloc(ids * 2);
    for (size_t i = 0; i < ids; i++) {
        text[2 * i] = '1';
        text[2 * i + 1] = '\n';
    }
    char *path = write_temp_bytes(text, ids * 2);
    free(text);
    const char *args[] = {"--prompt-ids", path, "--gen", "4", "--rows", "0", NULL};
    gate_expect_usage(args, "plus --gen 4 is more than 1048576 steps");
    unlink(path);
    free(path);
}

/* ------------------------------------------------------------------------------------------ */
/* 5. Arms that resolve to the same configuration                                              */

static void expect_identical(const char *a, const char *b, bool identical) {
    const char *args[] = {"--a", a, "--b", b, "--prime", "4", "--gen", "4", "--rows", "0", NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "%s vs %s: exit %d, stderr:\n%s", a, b, r.exit, r.err);
    char *p = gate_record(r.jsonl, "protocol", 0), *v = gate_record(r.jsonl, "verdict", 0);
    bool got = !identical;
    cr_assert(gate_field_bool(p, "arms_identical", &got) && got == identical, "%s vs %s: %s", a, b, p);
    got = !identical;
    cr_assert(gate_field_bool(v, "arms_identical", &got) && got == identical, "%s vs %s: %s", a, b, v);
    bool warned = strstr(r.err, "arms a and b resolve to the same configuration: the comparison proves "
                                "determinism only") != NULL;
    cr_assert_eq(warned, identical, "%s vs %s: stderr:\n%s", a, b, r.err);
    free(p);
    free(v);
    gate_result_free(&r);
}

Test(gate_fixes, identical_arms_are_flagged) { expect_identical("cpu", "cpu", true); }
Test(gate_fixes, identical_arms_ignoring_window_are_flagged) {
    expect_identical("cpu:threads=1", "cpu:threads=1,window=2", true);
}
Test(gate_fixes, different_arms_are_not_flagged) { expect_identical("cpu", "cpu:stages=2", false); }
