/* test_gate_profile.c: the gate's issue-6 side on the tiny preset: --dump-graphs (a cpu pair has
 * nothing to dump and goes on; the test-only faulty backend's census writes a tiny DOT file per
 * state, listed in the census record; a directory that cannot be made or written is an error
 * naming it), --profile (verified, unscored windows: no measure records, no ratio; a window
 * that differs between the arms is exit 1), and the protocol's honest-timing fields. */
#define _XOPEN_SOURCE 700
#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gate_harness.h"
#include "test_files.h"

static double num(const char *line, const char *key) {
    double v = -12345;
    cr_assert(gate_field_num(line, key, &v), "no '%s' in %s", key, line ? line : "(null)");
    return v;
}

static bool flag(const char *line, const char *key) {
    bool v = false;
    cr_assert(gate_field_bool(line, key, &v), "no boolean '%s' in %s", key, line ? line : "(null)");
    return v;
}

/* ------------------------------------------------------------------------------------------ */
/* --dump-graphs                                                                               */

Test(gate_profile, dump_graphs_on_a_cpu_pair_has_nothing_to_dump_and_goes_on) {
    char *d = tmp_dir_new("gate-dump");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/new/graphs", d); /* missing parents are created */
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", "--dump-graphs",
                          dir,   GATE_SMALL,      NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "arm A (cpu) has no graphs to dump"), "%s", r.err);
    cr_assert(strstr(r.err, "arm B (cpu) has no graphs to dump"), "%s", r.err);
    /* said once per arm, not per state */
    cr_assert_null(strstr(strstr(r.err, "arm B (cpu)") + 1, "arm B (cpu)"), "%s", r.err);
    struct stat sb;
    cr_assert(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode), "%s was not created", dir);
    cr_assert_eq(gate_count_records(r.jsonl, "census"), 0);
    cr_assert_eq(gate_count_records(r.jsonl, "measure"), 4, "the run goes on to its timing rows");
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert(strstr(s, "\"dump_graphs\":{\"dir\":\"") && strstr(s, "\"files\":0}"), "%s", s);
    char *p = gate_record(r.jsonl, "protocol", 0);
    cr_assert(strstr(p, "\"dump_graphs\":\"") && strstr(p, "/new/graphs\""), "%s", p);
    free(p);
    free(s);
    gate_result_free(&r);
    cr_assert_eq(tmp_dir_remove(d), 0);
    free(d);
}

/* The census record of (arm, scope) lists one DOT file in DIR/<arm>-<scope>/ that exists. */
static void expect_dumped(const char *jsonl, const char *dir, const char *arm, const char *scope, int position) {
    char want_arm[64], want_scope[64], path[1024];
    snprintf(want_arm, sizeof want_arm, "\"arm\":\"%s\"", arm);
    snprintf(want_scope, sizeof want_scope, "\"scope\":\"%s\"", scope);
    snprintf(path, sizeof path, "%s/%s-%s/faulty-pos%d.dot", dir, arm, scope, position);
    char *c = NULL;
    for (int i = 0; (c = gate_record(jsonl, "census", i)) != NULL; i++) {
        if (strstr(c, want_arm) && strstr(c, want_scope))
            break;
        free(c);
    }
    cr_assert(c, "no census record for arm %s, scope %s:\n%s", arm, scope, jsonl);
    char listed[1100];
    snprintf(listed, sizeof listed, "\"dumped\":[\"%s\"]", path);
    cr_assert(strstr(c, listed), "expected %s in %s", listed, c);
    cr_assert_eq(num(c, "dumped_count"), 1, "%s", c);
    char *dot = file_slurp_maybe(path, NULL);
    cr_assert(dot && strncmp(dot, "digraph", 7) == 0, "%s: %s", path, dot ? dot : "(missing)");
    free(dot);
    free(c);
}

Test(gate_profile, dump_graphs_writes_each_state_of_each_offering_arm) {
    char *d = tmp_dir_new("gate-dump");
    const char *args[] = {"--a", "faulty:census=1", "--b", "faulty:census=1,window=3", "--dump-graphs",
                          d,     GATE_SMALL,        NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    cr_assert_null(strstr(r.err, "no graphs to dump"), "%s", r.err);
    /* the correctness states end at P + N = 32; so do the scored states after their rows */
    expect_dumped(r.jsonl, d, "a", "correctness", 32);
    expect_dumped(r.jsonl, d, "b", "correctness", 32);
    expect_dumped(r.jsonl, d, "a", "timing", 32);
    expect_dumped(r.jsonl, d, "b", "timing", 32);
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert(strstr(s, "\"files\":4}"), "%s", s);
    free(s);
    gate_result_free(&r);

    /* Again into the same folder: the files are rewritten, and listed again as written. */
    r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    expect_dumped(r.jsonl, d, "b", "timing", 32);
    gate_result_free(&r);
    cr_assert_eq(tmp_dir_remove(d), 0);
    free(d);
}

Test(gate_profile, dump_graphs_census_without_dump_is_said_and_goes_on) {
    char *d = tmp_dir_new("gate-dump");
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:census=2", "--dump-graphs", d, GATE_SMALL, NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "arm B (faulty) has no graphs to dump (its memra.census extension has no dump_graphs)"),
              "%s", r.err);
    cr_assert_eq(gate_count_records(r.jsonl, "census"), 2, "the census itself is still recorded");
    cr_assert_null(strstr(r.jsonl, "\"dumped\""), "%s", r.jsonl);
    gate_result_free(&r);
    cr_assert_eq(tmp_dir_remove(d), 0);
    free(d);
}

Test(gate_profile, dump_graphs_into_a_file_is_an_error_naming_it) {
    char *d = tmp_dir_new("gate-dump");
    char file[512], under[600];
    snprintf(file, sizeof file, "%s/plain-file", d);
    FILE *f = fopen(file, "w");
    fputs("x", f);
    fclose(f);
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:census=1", "--dump-graphs", file, GATE_SMALL, NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, file) && strstr(r.err, "not a directory"), "%s", r.err);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(v && strstr(v, "\"exit\":3"), "%s", v ? v : "(none)");
    cr_assert_eq(gate_count_records(r.jsonl, "step"), 0, "checked before any step");
    free(v);
    gate_result_free(&r);

    snprintf(under, sizeof under, "%s/sub", file);
    const char *args2[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--dump-graphs", under, GATE_SMALL, NULL};
    r = gate_run(args2, false);
    cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, under) && strstr(r.err, "cannot create"), "%s", r.err);
    gate_result_free(&r);
    cr_assert_eq(tmp_dir_remove(d), 0);
    free(d);
}

Test(gate_profile, dump_graphs_backend_failure_is_an_error_naming_the_directory) {
    char *d = tmp_dir_new("gate-dump");
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:census=1,dump_fail=1", "--dump-graphs",
                          d,     GATE_SMALL,      NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "--dump-graphs") && strstr(r.err, d) && strstr(r.err, "dump_fail=1"), "%s", r.err);
    char *c = gate_record(r.jsonl, "census", 0);
    cr_assert(c && strstr(c, "\"dump_error\":"), "%s", c ? c : "(none)");
    free(c);
    gate_result_free(&r);
    cr_assert_eq(tmp_dir_remove(d), 0);
    free(d);
}

/* ------------------------------------------------------------------------------------------ */
/* --profile                                                                                   */

static void expect_profile_pass(const char *const *args) {
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s\n%.3000s", r.exit, r.err, r.jsonl);
    cr_assert_eq(gate_count_records(r.jsonl, "measure"), 0, "a profile run has no timing rows");
    cr_assert_eq(gate_count_records(r.jsonl, "mismatch"), 0);
    cr_assert_eq(gate_count_records(r.jsonl, "profile"), 2);
    char *pa = gate_record(r.jsonl, "profile", 0), *pb = gate_record(r.jsonl, "profile", 1);
    cr_assert(strstr(pa, "\"arm\":\"a\"") && strstr(pb, "\"arm\":\"b\""), "%s\n%s", pa, pb);
    char sha_a[80], sha_b[80];
    cr_assert(gate_field_str(pa, "tokens_sha256", sha_a, sizeof sha_a));
    cr_assert(gate_field_str(pb, "tokens_sha256", sha_b, sizeof sha_b));
    cr_assert_str_eq(sha_a, sha_b);
    for (int i = 0; i < 2; i++) {
        const char *p = i ? pb : pa;
        cr_assert_eq(num(p, "steps"), 32, "%s", p);
        cr_assert_eq(num(p, "start_position"), 16, "%s", p);
        cr_assert_eq(num(p, "end_position"), 48, "%s", p);
        cr_assert(flag(p, "identical") && flag(p, "verified"), "%s", p);
        cr_assert(!flag(p, "scored"), "%s", p);
        cr_assert(flag(p, "capture_outside_window"), "%s", p);
    }
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert_null(strstr(s, "ratio"), "no ratio in a profile run: %s", s);
    cr_assert(strstr(s, "\"timing_done\":false"), "%s", s);
    cr_assert(strstr(s, "\"profile\":{\"done\":true,\"verified\":true"), "%s", s);
    char *p = gate_record(r.jsonl, "protocol", 0);
    cr_assert(strstr(p, "\"profile\":true") && strstr(p, "\"rows\":0"), "%s", p);
    cr_assert(strstr(p, "\"profile_windows\":[{\"arm\":\"a\",\"steps\":32,\"start_position\":16,\"end_position\":48}"),
              "%s", p);
    cr_assert(strstr(p, "\"first_scored_capture_inside_timing\":null"), "no scored rows: %s", p);
    /* a build without NVTX says so on stderr, and the records say whether ranges were emitted */
    if (strstr(p, "\"nvtx\":false"))
        cr_assert(strstr(r.err, "no NVTX ranges are emitted"), "%s", r.err);
    else
        cr_assert(strstr(p, "\"nvtx\":true") && !strstr(r.err, "no NVTX"), "%s\n%s", p, r.err);
    free(p);
    free(s);
    free(pa);
    free(pb);
    gate_result_free(&r);
}

Test(gate_profile, profile_on_a_cpu_pair) {
    const char *args[] = {"--a",       "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", "--prime", "16", "--gen", "16",
                          "--profile", "--quiet",       NULL};
    expect_profile_pass(args);
}

Test(gate_profile, profile_pipelined_and_through_the_wrapper) {
    const char *args[] = {"--a",       "cpu:prefill=1,window=3",
                          "--b",       "faulty:census=1",
                          "--prime",   "16",
                          "--gen",     "16",
                          "--profile", "--quiet",
                          NULL};
    expect_profile_pass(args);
}

Test(gate_profile, profile_window_inside_a_longer_generation_sampled) {
    /* N = 40 > 32: the whole window is checked against the correctness run too. */
    const char *args[] = {"--a",       "cpu:prefill=1",
                          "--b",       "cpu:prefill=1,stages=3,window=2",
                          "--prime",   "8",
                          "--gen",     "40",
                          "--temp",    "0.9",
                          "--seed",    "5",
                          "--profile", "--quiet",
                          NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s\n%.3000s", r.exit, r.err, r.jsonl);
    for (int i = 0; i < 2; i++) {
        char *p = gate_record(r.jsonl, "profile", i);
        cr_assert_eq(num(p, "compared_with_correctness_run"), 32, "%s", p);
        cr_assert(flag(p, "agrees_with_correctness_run") && flag(p, "verified"), "%s", p);
        cr_assert_eq(num(p, "start_position"), 8, "%s", p);
        cr_assert_eq(num(p, "end_position"), 40, "%s", p);
        free(p);
    }
    gate_result_free(&r);
}

/* Runs a profile that must fail with exit 1 on a clean correctness run; returns the result. */
static gate_result expect_profile_fail(const char *b, const char *reason) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b",     b,   "--prime", "16", "--gen",
                          "16",  "--profile",     "--quiet", NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 1, "exit %d: %s\n%.3000s", r.exit, r.err, r.jsonl);
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert_eq(num(s, "bad_steps"), 0, "the correctness run is clean: %s", s);
    cr_assert(strstr(s, "\"verified\":false"), "%s", s);
    free(s);
    cr_assert_eq(gate_count_records(r.jsonl, "measure"), 0);
    cr_assert_eq(gate_count_records(r.jsonl, "profile"), 2);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert(m && strstr(m, "\"where\":\"profile\"") && strstr(m, reason), "expected '%s': %s", reason,
              m ? m : "(none)");
    free(m);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(strstr(v, "profile window failed verification") && strstr(v, reason), "%s", v);
    free(v);
    return r;
}

Test(gate_profile, profile_window_token_differs_between_arms) {
    /* restore 0 of b is the gate's copy of its correctness run's prefix, restore 1 its warm-up,
     * restore 2 its window: token 20 of the window (position 36,
     * beyond the 16 generated steps the correctness run checked) is altered. Only the arms'
     * comparison can catch it. */
    gate_result r = expect_profile_fail("faulty:corrupt_row=2,corrupt_row_token=20",
                                        "profile windows differ at window step 20 (the step at position 36)");
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert_eq(num(m, "phase_step"), 20, "%s", m); /* the window step */
    cr_assert_eq(num(m, "step"), 36, "%s", m);
    cr_assert(strstr(m, "\"against\":\"a\""), "%s", m);
    free(m);
    char *pa = gate_record(r.jsonl, "profile", 0), *pb = gate_record(r.jsonl, "profile", 1);
    cr_assert(!flag(pa, "identical") && !flag(pb, "tokens_identical"), "%s\n%s", pa, pb);
    cr_assert(flag(pb, "digests_identical"), "only a reported token differs: %s", pb);
    char sha_a[80], sha_b[80];
    cr_assert(gate_field_str(pa, "tokens_sha256", sha_a, sizeof sha_a));
    cr_assert(gate_field_str(pb, "tokens_sha256", sha_b, sizeof sha_b));
    cr_assert_str_neq(sha_a, sha_b);
    free(pa);
    free(pb);
    gate_result_free(&r);
}

Test(gate_profile, profile_window_final_digest_differs) {
    /* The cache slot at position 40 (inside the window, past the correctness run) reads back
     * corrupted on b: tokens agree, the final cache digests do not. */
    gate_result r = expect_profile_fail("faulty:corrupt_cache_step=40", "different cache digests");
    char *pb = gate_record(r.jsonl, "profile", 1);
    cr_assert(flag(pb, "tokens_identical") && !flag(pb, "digests_identical"), "%s", pb);
    free(pb);
    gate_result_free(&r);
}

Test(gate_profile, profile_warmup_step_is_checked) {
    gate_result r =
        expect_profile_fail("faulty:corrupt_row=1,corrupt_row_token=0", "arm b's profile warm-up step sampled");
    gate_result_free(&r);
}

Test(gate_profile, profile_excludes_timing_rows) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--profile", "--rows",
                          "4",   "--prime",       "4",   "--gen",         "4",         NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 2, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "--profile excludes --rows 4"), "%s", r.err);
    gate_result_free(&r);
}

Test(gate_profile, profile_not_run_after_a_mismatch) {
    const char *args[] = {
        "--a",       "cpu:prefill=1", "--b", "faulty:flip_logit_step=3", "--prime", "16", "--gen", "16",
        "--profile", "--quiet",       NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 1, "exit %d: %s", r.exit, r.err);
    cr_assert_eq(gate_count_records(r.jsonl, "profile"), 0);
    gate_result_free(&r);
}

/* ------------------------------------------------------------------------------------------ */
/* Protocol: honest timing                                                                     */

Test(gate_profile, protocol_says_what_the_clock_covers_and_where_captures_fall) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:census=1", GATE_SMALL, NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    char *p = gate_record(r.jsonl, "protocol", 0);
    char scope[1024];
    cr_assert(gate_field_str(p, "timing_scope", scope, sizeof scope), "%s", p);
    cr_assert(strstr(scope, "host readback of its sampled token") && strstr(scope, "logits not read back") &&
                  strstr(scope, "restore, digests and verification are outside the clock"),
              "%s", scope);
    cr_assert(strstr(p, "\"first_scored_capture_inside_timing\":true"), "%s", p);
    cr_assert(strstr(p, "\"profile\":false"), "%s", p);
    cr_assert(strstr(p, "\"memory_at_open\":{\"weight_bytes\":"), "%s", p);
    cr_assert(strstr(p, "\"shared_upload\":{\"b_weights_shared\":null"), "cpu: not measurable: %s", p);
    /* each measure record carries the same scope; the first row of each arm starts from a fresh
     * scored state (counters zero before it), later rows do not */
    for (int i = 0; i < 4; i++) {
        char *m = gate_record(r.jsonl, "measure", i);
        char ms[1024];
        cr_assert(gate_field_str(m, "timing_scope", ms, sizeof ms) && strcmp(ms, scope) == 0, "%s", m);
        bool first = flag(m, "first_row_of_arm");
        cr_assert_eq(first, i < 2, "ABBA rows 0 (a) and 1 (b) are the arms' first: %s", m);
        cr_assert(strstr(m, first ? "\"stats_before\":{\"steps\":0,\"captures\":0,\"replays\":0}"
                                  : "\"stats_before\":{\"steps\":16,"),
                  "%s", m);
        free(m);
    }
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert(strstr(s, "\"first_scored_row\":{\"a\":{\"steps_before\":0,\"captures_before\":0"), "%s", s);
    cr_assert(strstr(s, "\"first_scored_capture_inside_timing\":null"), "cpu captures no graphs: %s", s);
    free(s);
    free(p);
    gate_result_free(&r);
}

/* The shared-upload evidence, on the faulty backend's fake device memory (no GPU here): b's
 * open adds 2 MiB when it shares a's 128 MiB upload, 130 MiB when it uploads its own. */
static char *shared_upload(const char *a, const char *b) {
    const char *args[] = {"--a", a, "--b", b, "--prime", "4", "--gen", "4", "--rows", "0", "--quiet", NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    char *p = gate_record(r.jsonl, "protocol", 0);
    gate_result_free(&r);
    char *u = strstr(p, "\"shared_upload\":");
    cr_assert(u, "%s", p);
    char *copy = strndup(u, strchr(u, '}') - u + 1);
    free(p);
    return copy;
}

Test(gate_profile, shared_upload_proved_by_device_memory) {
    char *u = shared_upload("faulty:fake_device_mib=128", "faulty:fake_device_mib=128,fake_share=1");
    cr_assert(strstr(u, "\"b_open_added_bytes\":2097152,\"b_weight_bytes\":134217728,\"b_weights_shared\":true"), "%s",
              u);
    free(u);
    u = shared_upload("faulty:fake_device_mib=128", "faulty:fake_device_mib=128");
    cr_assert(strstr(u, "\"b_open_added_bytes\":136314880,\"b_weight_bytes\":134217728,\"b_weights_shared\":false"),
              "%s", u);
    cr_assert(strstr(u, "a second upload"), "%s", u);
    free(u);
    /* too small to tell */
    u = shared_upload("faulty:fake_device_mib=8", "faulty:fake_device_mib=8,fake_share=1");
    cr_assert(strstr(u, "\"b_weights_shared\":null") && strstr(u, "under 64 MiB"), "%s", u);
    free(u);
}

Test(gate_profile, first_scored_capture_counted_inside_the_first_row) {
    /* fake_capture: b's counters read as a graph backend's (a capture at a state's first step).
     * Its scored state is fresh at its first row, so that capture falls inside the row. */
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:fake_capture=1", GATE_SMALL, NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    char *s = gate_record(r.jsonl, "summary", 0);
    cr_assert(strstr(s, "\"b\":{\"steps_before\":0,\"captures_before\":0,\"captures_in_row\":1,\"replays_in_row\":16}"),
              "%s", s);
    cr_assert(strstr(s, "\"first_scored_capture_inside_timing\":true"), "%s", s);
    free(s);
    char *m = gate_record(r.jsonl, "measure", 1); /* b's first row */
    cr_assert(strstr(m, "\"stats_before\":{\"steps\":0,\"captures\":0,\"replays\":0}") &&
                  strstr(m, "\"stats\":{\"steps\":16,\"captures\":1,\"replays\":16}"),
              "%s", m);
    free(m);
    gate_result_free(&r);

    /* In a profile run the warm-up step takes the capture: none inside the window. */
    const char *prof[] = {"--a",       "cpu:prefill=1", "--b", "faulty:fake_capture=1", "--prime", "16", "--gen", "16",
                          "--profile", "--quiet",       NULL};
    r = gate_run(prof, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    char *p = gate_record(r.jsonl, "profile", 1);
    cr_assert(strstr(p, "\"captures_in_window\":0,\"replays_in_window\":32,\"capture_outside_window\":true"), "%s", p);
    free(p);
    gate_result_free(&r);
}
