/* test_gate_cli.c: usage errors (malformed arm strings and options) each exit 2 with a message
 * that says what is wrong; --help documents every option and every arm key. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate_harness.h"

#define USAGE(name, message, ...) GATE_USAGE(gate_cli, name, message, __VA_ARGS__)

USAGE(arm_nothing_after_colon, "nothing after ':'", "--a", "cpu:", "--b", "cpu")
USAGE(arm_item_without_equals, "is not key=value", "--a", "cpu", "--b", "cpu:stages")
USAGE(arm_no_backend, "no backend name", "--a", ":stages=2", "--b", "cpu")
USAGE(arm_empty_value, "empty value", "--a", "cpu", "--b", "cpu:stages=")
USAGE(arm_key_twice, "given twice", "--a", "cpu", "--b", "cpu:stages=2,stages=3")
USAGE(arm_trailing_comma, "trailing ','", "--a", "cpu", "--b", "cpu:stages=2,")
USAGE(arm_unknown_key_named, "unknown key 'bogus'", "--a", "cpu", "--b", "cpu:bogus=1")
USAGE(arm_unknown_key_lists_known, "window", "--a", "cpu", "--b", "cpu:bogus=1")
USAGE(arm_window_zero, "window=0", "--a", "cpu", "--b", "cpu:window=0")
USAGE(arm_window_text, "window=abc", "--a", "cpu:window=abc", "--b", "cpu")
USAGE(arm_stages_too_many, "stages", "--a", "cpu", "--b", "cpu:stages=9")
USAGE(arm_threads_text, "threads", "--a", "cpu:threads=x", "--b", "cpu")
USAGE(arm_unknown_backend, "nosuch", "--a", "cpu", "--b", "nosuch")
USAGE(only_one_arm, "give both --a and --b", "--a", "cpu")
USAGE(unknown_option, "unknown option '--frobnicate'", "--frobnicate", "1")
USAGE(stray_argument, "unexpected argument 'cpu'", "cpu")
USAGE(prime_not_a_number, "--prime abc", "--prime", "abc")
USAGE(gen_zero, "--gen 0", "--gen", "0")
USAGE(gen_negative, "--gen -3", "--gen", "-3")
USAGE(missing_value, "--rows needs a value", "--gen", "4", "--rows")
USAGE(rows_one, "--rows 1", "--rows", "1")
USAGE(schedule_bad, "--schedule XYZ", "--schedule", "XYZ")
USAGE(compare_bad, "--compare foo", "--compare", "foo")
USAGE(compare_nmse_bad, "--compare nmse:X", "--compare", "nmse:abc")
USAGE(compare_nmse_negative, "--compare nmse:X", "--compare", "nmse:-1")
USAGE(greedy_and_temp, "--greedy excludes", "--greedy", "--temp", "0.8")
USAGE(top_k_without_temp, "need --temp", "--top-k", "5")
USAGE(temp_zero, "--temp 0", "--temp", "0")
USAGE(top_p_over_one, "--top-p 1.5", "--temp", "1", "--top-p", "1.5")
USAGE(model_and_preset, "exclude each other", "--model", "/tmp/x.gguf", "--preset", "tiny")
USAGE(unknown_preset, "unknown preset", "--preset", "nosuchpreset")
USAGE(dtype_bad, "--dtype q3", "--dtype", "q3")
USAGE(prompt_file_missing, "cannot open", "--prompt-ids", "/nonexistent/prompt.txt")
USAGE(flag_with_value, "--quiet takes no value", "--quiet=yes")

static char *write_temp(const char *text) {
    char *path = strdup("/tmp/memra-gate-ids-XXXXXX");
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

Test(gate_cli, prompt_id_outside_vocabulary) {
    char *path = write_temp("1 2 99999 4\n");
    const char *args[] = {"--prompt-ids", path, "--gen", "4", "--rows", "0", NULL};
    gate_expect_usage(args, "'99999' is not a token id below n_vocab 512");
    unlink(path);
    free(path);
}

Test(gate_cli, prompt_id_not_a_number) {
    char *path = write_temp("1 2 x3\n");
    const char *args[] = {"--prompt-ids", path, "--gen", "4", "--rows", "0", NULL};
    gate_expect_usage(args, "'x3'");
    unlink(path);
    free(path);
}

Test(gate_cli, prompt_file_shorter_than_prime) {
    char *path = write_temp("1 2 3\n");
    const char *args[] = {"--prompt-ids", path, "--prime", "8", "--gen", "4", "--rows", "0", NULL};
    gate_expect_usage(args, "holds 3 ids, fewer than --prime 8");
    unlink(path);
    free(path);
}

Test(gate_cli, missing_model_file_is_a_runtime_error) {
    const char *args[] = {"--model", "/nonexistent/model.gguf", "--gen", "4", "--rows", "0", NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "/nonexistent/model.gguf"), "%s", r.err);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(v && strstr(v, "\"exit\":3"), "%s", v ? v : "(none)");
    free(v);
    gate_result_free(&r);
}

Test(gate_cli, help_documents_every_option_and_key) {
    const char *args[] = {"--help", NULL};
    gate_result r = gate_run(args, true);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    const char *want[] = {"--a ARM", "--b ARM", "--model", "--preset", "--dtype", "--prime", "--gen", "--prompt-ids",
                          "--greedy", "--temp", "--top-k", "--top-p", "--seed", "--rows", "--schedule", "--compare",
                          "--jsonl", "--quiet", "--help", "exit codes", "--profile", "--dump-graphs DIR", "NVTX",
                          "dump_graphs", "dump_fail",
                          /* keys: core, gate, placement, backends found */
                          "placement ", "window ", "stages ", "splits ", "devices ", "threads ", "backend 'cpu'",
                          "backend 'faulty'", "flip_logit_step"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(r.out, want[i]), "--help lacks '%s':\n%s", want[i], r.out);
    gate_result_free(&r);
}
