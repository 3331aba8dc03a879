/* test_gate_slow.c (label "slow"): full-length gates (P = N = 256) on the larger `small` preset:
 * a 4-stage pipelined arm against the unsplit reference, sampled decoding in nmse mode, and a
 * full-length --profile run with --dump-graphs. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gate_harness.h"
#include "test_files.h"

static void expect_exit(const char *const *args, int code) {
    gate_result r = gate_run(args, false);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert_eq(r.exit, code, "exit %d, verdict %s\n%s", r.exit, v ? v : "(none)", r.err);
    free(v);
    gate_result_free(&r);
}

Test(gate_slow, small_preset_four_stages_pipelined, .timeout = 300) {
    const char *args[] = {
        "--preset", "small",   "--a", "cpu:threads=1", "--b", "cpu:stages=4,window=3,threads=2", "--rows",
        "4",        "--quiet", NULL};
    expect_exit(args, 0);
}

Test(gate_slow, small_preset_flipped_logit_late_in_generation, .timeout = 300) {
    const char *args[] = {"--preset", "small", "--a",     "cpu", "--b", "faulty:flip_logit_step=500,window=2",
                          "--rows",   "0",     "--quiet", NULL};
    expect_exit(args, 1);
}

Test(gate_slow, tiny_sampled_full_length_nmse, .timeout = 300) {
    /* Seed 3 kept the sampled stream of tiny clear of EOS for 256 tokens when written (exit 0). A
     * change of the synthetic weights may move EOS into the stream: then the comparison is
     * ineligible (exit 1, "early EOS"), but every step must still agree. */
    const char *args[] = {"--a",       "cpu",    "--b",    "cpu:stages=2,window=4",
                          "--temp",    "0.7",    "--seed", "3",
                          "--compare", "nmse:0", "--rows", "4",
                          "--quiet",   NULL};
    gate_result r = gate_run(args, false);
    char *v = gate_record(r.jsonl, "verdict", 0), *s = gate_record(r.jsonl, "summary", 0);
    cr_assert(r.exit == 0 || (r.exit == 1 && v && strstr(v, "early EOS")), "exit %d: %s", r.exit, v ? v : r.err);
    cr_assert(s && strstr(s, "\"bad_steps\":0,"), "%s", s ? s : "(none)");
    free(v);
    free(s);
    gate_result_free(&r);
}

Test(gate_slow, small_preset_full_length_profile_with_dumps, .timeout = 300) {
    /* P = N = 256: the profile windows sit at 256..288 of a 4-stage pipelined arm, inside the
     * generated phase, checked against the correctness run over all 32 tokens. */
    char dir[64];
    tmp_dir_make(dir, sizeof dir, NULL, "gate-slow-dump");
    const char *args[] = {"--preset",  "small",         "--a", "cpu",     "--b", "faulty:census=1,stages=4,window=3",
                          "--profile", "--dump-graphs", dir,   "--quiet", NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    cr_assert_eq(gate_count_records(r.jsonl, "measure"), 0);
    for (int i = 0; i < 2; i++) {
        char *p = gate_record(r.jsonl, "profile", i);
        cr_assert(p && strstr(p, "\"start_position\":256,\"end_position\":288") && strstr(p, "\"verified\":true") &&
                      strstr(p, "\"compared_with_correctness_run\":32"),
                  "%s", p ? p : "(none)");
        free(p);
    }
    char *c = gate_record(r.jsonl, "census", 0);
    cr_assert(c && strstr(c, "b-correctness/faulty-pos512.dot\"]"), "%s", c ? c : "(none)");
    free(c);
    char path[128];
    snprintf(path, sizeof path, "%s/b-correctness/faulty-pos512.dot", dir);
    cr_assert_eq(unlink(path), 0, "%s", path);
    snprintf(path, sizeof path, "%s/b-correctness", dir);
    rmdir(path);
    rmdir(dir);
    gate_result_free(&r);
}

/* Issue 31.2: a run that lasts over a minute, with stderr not a terminal (a log), writes a
 * progress line once a minute with the elapsed time and an ETA, after saying up front how many
 * steps it will run. A machine fast enough to finish in under a minute cannot show the line:
 * then the test skips, saying so. */
Test(gate_slow, a_log_gets_a_progress_line_a_minute, .timeout = 600) {
    const char *args[] = {"--a", "cpu",   "--b",  "cpu:stages=2", "--preset", "small", "--prime",
                          "256", "--gen", "1024", "--rows",       "40",       NULL};
    gate_how how = {.timeout_s = 550};
    time_t t0 = time(NULL);
    gate_result r = gate_run_ex(args, &how);
    double took = difftime(time(NULL), t0);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "memra-gate: 44032 steps to run:"), "%s", r.err);
    if (took < 75) { /* the first line, at a minute, then falls before the end: it has an ETA */
        gate_result_free(&r);
        cr_skip_test("the run took %.0f s: too short for a progress line a minute", took);
    }
    cr_assert(strstr(r.err, ", elapsed 1m") && strstr(r.err, ", ETA "), "no progress line in the log:\n%s", r.err);
    cr_assert(!strchr(r.err, '\r'), "a log gets lines, not a terminal's bar");
    gate_result_free(&r);
}
