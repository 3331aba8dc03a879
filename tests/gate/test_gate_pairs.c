/* test_gate_pairs.c: pairs that must pass the gate on the tiny preset: splits (even and
 * explicit), thread counts, serial against pipelined, greedy and sampled, exact and nmse, the
 * transparent test wrapper, and the no-argument default. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate_harness.h"
#include "memra/gguf.h"
#include "memra/memra.h"
#include "memra/model.h"
#include "memra/runtime.h"
#include "memra/synth.h"

/* Runs the gate and checks a clean pass: exit 0, a passing verdict, every step compared and
 * ok, every timing row verified. */
static void expect_pass(const char *const *args, int steps, int rows) {
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d, stderr:\n%s\nrecords:\n%.2000s", r.exit, r.err, r.jsonl);
    char *verdict = gate_record(r.jsonl, "verdict", 0);
    bool pass = false;
    cr_assert(gate_field_bool(verdict, "pass", &pass) && pass, "verdict: %s", verdict ? verdict : "(none)");
    cr_assert_eq(gate_count_records(r.jsonl, "protocol"), 1);
    cr_assert_eq(gate_count_records(r.jsonl, "step"), steps, "step records: %d", gate_count_records(r.jsonl, "step"));
    cr_assert_eq(gate_count_records(r.jsonl, "mismatch"), 0);
    cr_assert_eq(gate_count_records(r.jsonl, "measure"), rows);
    for (int i = 0; i < rows; i++) {
        char *m = gate_record(r.jsonl, "measure", i);
        bool verified = false, eligible = false;
        cr_assert(gate_field_bool(m, "verified", &verified) && verified, "%s", m);
        cr_assert(gate_field_bool(m, "eligible", &eligible) && eligible, "%s", m);
        free(m);
    }
    char *summary = gate_record(r.jsonl, "summary", 0);
    double bad = -1;
    cr_assert(gate_field_num(summary, "bad_steps", &bad) && bad == 0, "%s", summary);
    free(summary);
    free(verdict);
    gate_result_free(&r);
}

#define PAIR(name, A, B)                                                                                               \
    Test(gate_pairs, name) {                                                                                           \
        const char *args[] = {"--a", A, "--b", B, GATE_SMALL, NULL};                                                   \
        expect_pass(args, 18, 4); /* cpu primes in chunks of 64: prime steps 14 (a chunk's end) and 15 */              \
    }

PAIR(cpu_vs_cpu, "cpu", "cpu")
PAIR(stages2, "cpu", "cpu:stages=2")
PAIR(stages3, "cpu", "cpu:stages=3")
PAIR(stages4, "cpu", "cpu:stages=4")
PAIR(stages3_explicit_splits, "cpu", "cpu:stages=3,splits=1,3")
PAIR(stages2_explicit_split, "cpu:stages=2", "cpu:splits=3")
PAIR(threads1_vs_threads2, "cpu:threads=1", "cpu:threads=2")
PAIR(window1_vs_window3, "cpu", "cpu:window=3")
PAIR(window3_reference, "cpu:window=3", "cpu:stages=2")
PAIR(window3_stages4, "cpu:window=1", "cpu:stages=4,window=3")
PAIR(faulty_wrapper_without_faults_is_transparent, "cpu", "faulty:threads=1,grain=0")
PAIR(grain0_threads2, "cpu:threads=1", "cpu:grain=0,threads=2")

Test(gate_pairs, sampled) {
    const char *args[] = {"--a",      "cpu:prefill=1",
                          "--b",      "cpu:prefill=1,stages=2,window=3",
                          "--temp",   "0.9",
                          "--top-k",  "40",
                          "--top-p",  "0.95",
                          "--seed",   "7",
                          GATE_SMALL, NULL};
    expect_pass(args, 32, 4);
    /* the protocol says so */
    gate_result r = gate_run(args, false);
    char *p = gate_record(r.jsonl, "protocol", 0);
    cr_assert(p && strstr(p, "\"mode\":\"sampled\"") && strstr(p, "\"seed\":7"), "%s", p);
    free(p);
    gate_result_free(&r);
}

Test(gate_pairs, sampled_stream_differs_from_greedy) {
    /* Sampling is really on: the sampled stream is not the greedy one. */
    const char *greedy[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", GATE_SMALL, NULL};
    const char *sampled[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--temp",
                             "1.5", "--seed",        "3",   GATE_SMALL,      NULL};
    gate_result g = gate_run(greedy, false), s = gate_run(sampled, false);
    cr_assert_eq(g.exit, 0, "%s", g.err);
    cr_assert_eq(s.exit, 0, "%s", s.err);
    int differ = 0;
    for (int i = 16; i < 32; i++) {
        char *a = gate_record(g.jsonl, "step", i), *b = gate_record(s.jsonl, "step", i);
        double ta, tb;
        cr_assert(gate_field_num(a, "token", &ta) && gate_field_num(b, "token", &tb));
        differ += ta != tb;
        free(a);
        free(b);
    }
    cr_assert_gt(differ, 0, "the sampled stream equals the greedy one");
    gate_result_free(&g);
    gate_result_free(&s);
}

Test(gate_pairs, nmse_mode_passes_and_says_so) {
    const char *args[] = {"--a",       "cpu:prefill=1", "--b",      "cpu:prefill=1,stages=2",
                          "--compare", "nmse:1e-6",     GATE_SMALL, NULL};
    expect_pass(args, 32, 4);
    gate_result r = gate_run(args, false);
    char *v = gate_record(r.jsonl, "verdict", 0);
    char mode[64];
    cr_assert(gate_field_str(v, "mode", mode, sizeof mode));
    cr_assert_str_eq(mode, "nmse:1e-6");
    char *step = gate_record(r.jsonl, "step", 20);
    cr_assert(step && strstr(step, "\"nmse\":0,"), "per-step NMSE: %s", step);
    free(step);
    char *s = gate_record(r.jsonl, "summary", 0);
    double agree = 0;
    cr_assert(gate_field_num(s, "token_agreement", &agree) && agree == 1.0, "%s", s);
    free(v);
    free(s);
    gate_result_free(&r);
}

Test(gate_pairs, exact_mode_says_so) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", GATE_SMALL, NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    char *v = gate_record(r.jsonl, "verdict", 0);
    char mode[64];
    cr_assert(gate_field_str(v, "mode", mode, sizeof mode));
    cr_assert_str_eq(mode, "exact");
    free(v);
    gate_result_free(&r);
}

Test(gate_pairs, schedule_abba_and_baab) {
    const char *abba[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--prime", "8", "--gen",
                          "8",   "--rows",        "8",   "--quiet",       NULL};
    const char *baab[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--prime", "8",       "--gen",
                          "8",   "--rows",        "8",   "--schedule",    "BAAB",    "--quiet", NULL};
    const char *want[2] = {"aabbbbaa", "bbaaaabb"};
    const char *const *runs[2] = {abba, baab};
    for (int k = 0; k < 2; k++) {
        gate_result r = gate_run(runs[k], false);
        cr_assert_eq(r.exit, 0, "%s", r.err);
        for (int i = 0; i < 8; i++) {
            char *m = gate_record(r.jsonl, "measure", i), arm[8];
            cr_assert(gate_field_str(m, "arm", arm, sizeof arm));
            cr_assert_eq(arm[0], want[k][i], "schedule %d row %d: arm %s", k, i, arm);
            free(m);
        }
        char *p = gate_record(r.jsonl, "protocol", 0);
        cr_assert(p && strstr(p, k ? "\"blocks\":\"BB AA AA BB\"" : "\"blocks\":\"AA BB BB AA\""), "%s", p);
        free(p);
        char *s = gate_record(r.jsonl, "summary", 0);
        cr_assert(s && strstr(s, "\"ratio_ci95\":["), "%s", s);
        free(s);
        gate_result_free(&r);
    }
}

Test(gate_pairs, prompt_ids_file) {
    char path[] = "/tmp/memra-gate-prompt-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "1, 2 3\n4,5 6 7 8\n9 10 11 12 13 14 15 16 17 18 19 20\n");
    fclose(f);
    const char *args[] = {
        "--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", "--prompt-ids", path, "--gen", "8", "--rows",
        "0",   "--quiet",       NULL};
    expect_pass(args, 28, 0); /* --prime defaults to the file's 20 ids */
    gate_result r = gate_run(args, false);
    char *step = gate_record(r.jsonl, "step", 3);
    double input = 0;
    cr_assert(gate_field_num(step, "input", &input) && input == 4, "%s", step);
    free(step);
    gate_result_free(&r);
    unlink(path);
}

Test(gate_pairs, protocol_resolves_every_key) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", GATE_SMALL, NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    char *p = gate_record(r.jsonl, "protocol", 0);
    cr_assert(p);
    const char *want[] = {"\"prime\":16",
                          "\"gen\":16",
                          "\"rows\":4",
                          "\"schedule\":\"ABBA\"",
                          "\"compare\":\"exact\"",
                          "\"memra_version\":",
                          "\"sha256\":",
                          "\"window\":\"1\"",
                          "\"threads\":",
                          "\"stages\":\"2\"",
                          "\"placement\":\"default\"",
                          "\"mode\":\"greedy\""};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(p, want[i]), "protocol lacks %s: %s", want[i], p);
    free(p);
    gate_result_free(&r);
}

Test(gate_pairs, no_arguments_picks_a_pair_and_says_which) {
    const char *args[] = {"--prime", "16", "--gen", "16", "--rows", "4", NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    cr_assert(strstr(r.err, "no arms given: --a cpu --b cpu:stages=2"), "%s", r.err);
    cr_assert(strstr(r.err, "verdict      PASS"), "summary table missing: %s", r.err);
    char *p = gate_record(r.jsonl, "protocol", 0);
    cr_assert(p && strstr(p, "\"auto_arms\":true"), "%s", p);
    free(p);
    gate_result_free(&r);
}

/* Issue 31.1: without --jsonl no record is written anywhere (the terminal gets the summary);
 * --jsonl - sends them to stdout, asked for. */
Test(gate_pairs, records_go_nowhere_without_jsonl) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--prime", "4", "--gen", "4", "--rows", "0",
                          NULL};
    gate_result r = gate_run(args, true);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    cr_assert_str_eq(r.out, "", "no record on stdout without --jsonl: %.300s", r.out);
    cr_assert(strstr(r.err, "memra-gate summary") && strstr(r.err, "verdict      PASS"), "%s", r.err);
    cr_assert(!strstr(r.err, "{\"record\""), "no record on stderr either: %s", r.err);
    gate_result_free(&r);
}

Test(gate_pairs, records_go_to_stdout_with_jsonl_dash) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--prime", "4", "--gen",
                          "4",   "--rows",        "0",   "--quiet",       "--jsonl", "-", NULL};
    gate_result r = gate_run(args, true);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    cr_assert(strncmp(r.out, "{\"record\":\"protocol\"", 20) == 0, "%.200s", r.out);
    cr_assert_str_eq(r.err, "", "--quiet should leave stderr empty: %s", r.err);
    char *v = gate_record(r.out, "verdict", 0);
    cr_assert(v);
    free(v);
    gate_result_free(&r);
}

/* A usage error writes no record: not to stdout (the typo before --jsonl), not to the record file
 * (the typo after it, which used to append a lone FAIL verdict to a shared file). */
Test(gate_pairs, a_usage_error_writes_no_record) {
    const char *before[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--rowz", "2", "--jsonl", "-", NULL};
    gate_result r = gate_run(before, true);
    cr_assert_eq(r.exit, 2, "%s", r.err);
    cr_assert_str_eq(r.out, "", "%s", r.out);
    gate_result_free(&r);
    const char *after[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--prime", "4", "--gen",
                           "4",   "--rows",        "0",   "--rowz",        "2",       NULL};
    r = gate_run(after, false);
    cr_assert_eq(r.exit, 2, "%s", r.err);
    cr_assert_str_eq(r.jsonl, "", "a usage error appended a record: %s", r.jsonl);
    gate_result_free(&r);
    const char *arm[] = {
        "--a", "cpu:prefill=1,bogus=1", "--b", "cpu:prefill=1", "--prime", "4", "--gen", "4", "--rows", "0", NULL};
    r = gate_run(arm, false);
    cr_assert_eq(r.exit, 2, "%s", r.err);
    cr_assert_str_eq(r.jsonl, "", "a usage error appended a record: %s", r.jsonl);
    gate_result_free(&r);
}

Test(gate_pairs, model_file_and_its_digest) {
    char path[] = "/tmp/memra-gate-model-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    memra_synth_spec spec = {.preset = "tiny", .type = MEMRA_TYPE_F32, .seed = 5};
    memra_error err = {0};
    cr_assert_eq(memra_synth_write_file(&spec, path, &err), MEMRA_OK, "%s", err.msg);
    uint8_t digest[32];
    char hex[MEMRA_SHA256_HEX], want[100];
    cr_assert_eq(memra_sha256_file(path, digest, &err), MEMRA_OK, "%s", err.msg);
    memra_sha256_hex(digest, hex);
    snprintf(want, sizeof want, "\"sha256\":\"%s\"", hex);
    const char *args[] = {"--model", path, "--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", GATE_SMALL, NULL};
    expect_pass(args, 32, 4);
    gate_result r = gate_run(args, false);
    char *p = gate_record(r.jsonl, "protocol", 0);
    cr_assert(p && strstr(p, want), "model digest %s not in %s", hex, p);
    free(p);
    gate_result_free(&r);
    unlink(path);
}

Test(gate_pairs, main_command_with_its_defaults) {
    /* The README's main command: no arguments, P = N = 256, 20 rows, on the embedded model. */
    const char *args[] = {"--quiet", NULL};
    /* cpu primes in chunks of 64: steps 63, 127, 191 and 254 end chunks, 255 is a single step */
    expect_pass(args, 5 + 256, 20);
}
