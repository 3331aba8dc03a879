/* test_tools_cli.c: issue 31 (a new user's first hour), the memra command's side: one flag
 * vocabulary (--arm beside --backend, -n/--gen/--n-gen, "did you mean", a missing value said as
 * such), a --help that lists every command and points to memra-gate, `memra help CMD`,
 * --version with commit and plugin ABI (item 3); bench's grid of arms, prefixes and lengths in
 * one table (item 4); tokenize reading stdin, inspect's summary and --tensors (item 9). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_files.h"
#include "tool_run.h"

static void expect(const tool_result *r, int code, const char *text, const char *needle) {
    cr_assert_eq(r->code, code, "exit %d, expected %d; stderr: %s\nstdout: %.2000s", r->code, code, r->err, r->out);
    if (needle)
        cr_assert_not_null(strstr(text, needle), "lacks '%s':\n%s", needle, text);
}

/* ---- item 3: one flag vocabulary ---------------------------------------------------------- */

Test(tools_cli, help_lists_every_command_and_points_to_the_gate) {
    tool_result r = tool_run("memra", "--help", NULL);
    const char *want[] = {"plugins", "inspect",          "mkmodel",    "run",          "bench",    "tokenize",
                          "report",  "bench-collective", "memra-gate", "help COMMAND", "--version"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        expect(&r, 0, r.out, want[i]);
    tool_result_free(&r);
}

Test(tools_cli, help_command_is_command_help) {
    const char *subs[] = {"plugins", "inspect", "mkmodel", "run", "bench", "tokenize", "report", "bench-collective"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        tool_result a = tool_run("memra", "help", subs[i], NULL), b = tool_run("memra", subs[i], "--help", NULL);
        expect(&a, 0, a.out, "usage: memra");
        cr_assert_str_eq(a.out, b.out, "memra help %s differs from memra %s --help", subs[i], subs[i]);
        tool_result_free(&a);
        tool_result_free(&b);
    }
    tool_result r = tool_run("memra", "help", "benhc", NULL);
    expect(&r, 2, r.err, "did you mean bench?");
    tool_result_free(&r);
}

Test(tools_cli, version_names_commit_and_plugin_abi) {
    const char *how[][3] = {
        {"memra", "--version", NULL}, {"memra", "run", "--version"}, {"memra-gate", "--version", NULL}};
    for (size_t i = 0; i < 3; i++) {
        tool_result r =
            how[i][2] ? tool_run(how[i][0], how[i][1], how[i][2], NULL) : tool_run(how[i][0], how[i][1], NULL);
        expect(&r, 0, r.out, "(commit ");
        expect(&r, 0, r.out, "plugin ABI 1)");
        tool_result_free(&r);
    }
}

Test(tools_cli, arm_and_backend_are_one_option) {
    tool_result a = tool_run("memra", "run", "--arm", "cpu:threads=1", "--tokens", "1", "-n", "3", NULL);
    tool_result b = tool_run("memra", "run", "--backend", "cpu:threads=1", "--tokens", "1", "--gen", "3", NULL);
    tool_result c = tool_run("memra", "run", "--arm", "cpu", "--tokens", "1", "--n-gen", "3", NULL);
    expect(&a, 0, a.out, NULL);
    expect(&b, 0, b.out, NULL);
    expect(&c, 0, c.out, NULL);
    cr_assert(a.out[0] && strcmp(a.out, b.out) == 0 && strcmp(a.out, c.out) == 0, "'%s' '%s' '%s'", a.out, b.out,
              c.out);
    tool_result_free(&a);
    tool_result_free(&b);
    tool_result_free(&c);
    tool_result r = tool_run("memra", "run", "--arm", "cpu", "--backend", "cpu", NULL);
    expect(&r, 2, r.err, "given twice");
    tool_result_free(&r);
    r = tool_run("memra", "bench", "--help", NULL);
    expect(&r, 0, r.out, "--arm");
    tool_result_free(&r);
}

Test(tools_cli, an_unknown_flag_gets_did_you_mean) {
    tool_result r = tool_run("memra", "run", "--bakend", "cpu", NULL);
    expect(&r, 2, r.err, "unknown option '--bakend': did you mean --backend?");
    tool_result_free(&r);
    r = tool_run("memra", "bench", "--rep", "2", NULL);
    expect(&r, 2, r.err, "did you mean --reps?");
    tool_result_free(&r);
    r = tool_run("memra", "run", "--zzzzzzzz", NULL); /* nothing close: no guess */
    expect(&r, 2, r.err, "unknown option '--zzzzzzzz'");
    cr_assert(!strstr(r.err, "did you mean"), "%s", r.err);
    tool_result_free(&r);
    r = tool_run("memra", "benhc", NULL);
    expect(&r, 2, r.err, "did you mean bench?");
    tool_result_free(&r);
}

Test(tools_cli, a_flag_at_the_end_needs_a_value) {
    tool_result r = tool_run("memra", "run", "--arm", NULL);
    expect(&r, 2, r.err, "'--arm' needs a value");
    cr_assert(!strstr(r.err, "unknown"), "%s", r.err);
    tool_result_free(&r);
}

Test(tools_cli, the_gate_takes_n_and_gen_alike) {
    const char *base[] = {"--a",    "cpu", "--b",     "cpu:stages=2", "--prime", "4",
                          "--rows", "0",   "--quiet", "--jsonl",      "-"};
    const char *spell[] = {"-n", "--gen", "--n-gen"};
    for (size_t s = 0; s < 3; s++) {
        const char *args[16];
        size_t n = 0;
        for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
            args[n++] = base[i];
        args[n++] = spell[s];
        args[n++] = "5";
        args[n] = NULL;
        tool_result r = tool_run_opts("memra-gate", &(tool_opts){0}, args);
        expect(&r, 0, r.out, "\"gen\":5");
        tool_result_free(&r);
    }
    tool_result r = tool_run("memra-gate", "-n", "4", "--gen", "4", NULL);
    expect(&r, 2, r.err, "--gen is given twice");
    tool_result_free(&r);
}

Test(tools_cli, the_gate_says_did_you_mean_and_needs_a_value) {
    tool_result r = tool_run("memra-gate", "--rowz", "2", NULL);
    expect(&r, 2, r.err, "unknown option '--rowz': did you mean --rows?");
    tool_result_free(&r);
    /* An unknown flag at the end is unknown, not "needs a value". */
    r = tool_run("memra-gate", "--a", "cpu", "--b", "cpu", "--bogus", NULL);
    expect(&r, 2, r.err, "unknown option '--bogus'");
    cr_assert(!strstr(r.err, "needs a value"), "%s", r.err);
    tool_result_free(&r);
    r = tool_run("memra-gate", "--a", "cpu", "--b", "cpu", "--rows", NULL);
    expect(&r, 2, r.err, "--rows needs a value");
    cr_assert(!strstr(r.err, "unknown"), "%s", r.err);
    tool_result_free(&r);
}

Test(tools_cli, gate_help_lists_every_record) {
    tool_result r = tool_run("memra-gate", "--help", NULL);
    const char *want[] = {"protocol",    "step",        "mismatch",  "census",       "refusal",
                          "measure",     "carry_check", "profile",   "summary",      "verdict",
                          "interrupted", "-n, --gen N", "--version", "--jsonl FILE", "- for stdout"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        expect(&r, 0, r.out, want[i]);
    tool_result_free(&r);
}

/* ---- item 9: tokenize from stdin, inspect's summary ---------------------------------------- */

static void make_model(char *path, size_t size) {
    tmp_file_path(path, size, "cli31.gguf");
    tool_result r = tool_run("memra", "mkmodel", "--preset", "qwen3-tiny", "-o", path, NULL);
    expect(&r, 0, r.err, NULL);
    tool_result_free(&r);
}

Test(tools_cli, tokenize_reads_stdin_for_dash) {
    char model[512], out[600], cmdline[2400];
    make_model(model, sizeof model);
    snprintf(out, sizeof out, "%s.out", model);
    tool_result arg = tool_run("memra", "tokenize", "--model", model, "--ids", "hello world", NULL);
    expect(&arg, 0, arg.out, NULL);
    snprintf(cmdline, sizeof cmdline, "printf 'hello world' | '%s/memra' tokenize --model '%s' --ids - > '%s'",
             tool_bin_dir(), model, out);
    int rc = system(cmdline);
    cr_assert_eq(rc, 0, "exit status %d of: %s", rc, cmdline);
    size_t n = 0;
    char *got = file_slurp(out, &n);
    cr_assert(got && arg.out[0] && strcmp(got, arg.out) == 0, "stdin gave:\n%s\nthe argument gave:\n%s", got, arg.out);
    free(got);
    tool_result_free(&arg);
    unlink(out);
    unlink(model);
}

Test(tools_cli, inspect_shows_a_summary_and_tensors_on_request) {
    char model[512];
    make_model(model, sizeof model);
    tool_result r = tool_run("memra", "inspect", model, NULL);
    expect(&r, 0, r.out, "can it run?");
    expect(&r, 0, r.out, "tensors (46): total tensor bytes:");
    expect(&r, 0, r.out, "--tensors lists them");
    cr_assert(!strstr(r.out, "blk.3.attn_k_norm.weight"), "the default lists no tensor:\n%s", r.out);
    tool_result_free(&r);
    r = tool_run("memra", "inspect", "--tensors", model, NULL);
    expect(&r, 0, r.out, "blk.3.attn_k_norm.weight");
    expect(&r, 0, r.out, "total tensor bytes");
    tool_result_free(&r);
    unlink(model);
}

/* ---- item 4: bench like llama-bench ------------------------------------------------------- */

static int count(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

Test(tools_cli, bench_runs_a_grid_in_one_table) {
    char jsonl[512];
    tmp_file_path(jsonl, sizeof jsonl, "grid.jsonl");
    unlink(jsonl);
    tool_result r = tool_run("memra", "bench", "--arm", "cpu:stages=2,splits=1,cpu:threads=1", "--prime", "8,16", "-n",
                             "4", "--reps", "1", "--warmup", "0", "--jsonl", jsonl, NULL);
    expect(&r, 0, r.out, "| arm ");
    cr_assert_eq(count(r.out, "| arm "), 1, "one table, one header:\n%s", r.out);
    cr_assert_eq(count(r.out, "| cpu:stages=2,splits=1 "), 2, "the list splits at backend names:\n%s", r.out);
    cr_assert_eq(count(r.out, "| cpu:threads=1 "), 2, "%s", r.out);
    cr_assert(strstr(r.out, "|      8 |") && strstr(r.out, "|     16 |") && strstr(r.out, "|      4 |"), "%s", r.out);
    cr_assert(strstr(r.out, "pp tok/s"), "prompt speed beside decode:\n%s", r.out);
    char *lines = file_slurp(jsonl, NULL);
    cr_assert(lines, "no record file");
    cr_assert_eq(count(lines, "\"record\": \"bench\""), 4, "one record a cell:\n%s", lines);
    cr_assert_eq(count(lines, "\"arm\": \"cpu:stages=2,splits=1\""), 2, "%s", lines);
    cr_assert_eq(count(lines, "\"prime\": 16"), 2, "%s", lines);
    free(lines);
    unlink(jsonl);
    tool_result_free(&r);
}

/* --abba: the arms forward, then backward, on one load; the second pass's rows marked #2 and its
 * records "pass": 2, in the order A, B, B, A. */
Test(tools_cli, bench_abba_runs_the_arms_there_and_back) {
    char jsonl[512];
    tmp_file_path(jsonl, sizeof jsonl, "abba.jsonl");
    unlink(jsonl);
    tool_result r = tool_run("memra", "bench", "--arm", "cpu,cpu:threads=1", "--abba", "--prime", "8", "-n", "4",
                             "--reps", "1", "--warmup", "0", "--jsonl", jsonl, NULL);
    expect(&r, 0, r.out, "| arm ");
    const char *a1 = strstr(r.out, "| cpu "), *b1 = strstr(r.out, "| cpu:threads=1 ");
    const char *b2 = strstr(r.out, "| cpu:threads=1 #2"), *a2 = strstr(r.out, "| cpu #2");
    cr_assert(a1 && b1 && b2 && a2 && a1 < b1 && b1 < b2 && b2 < a2, "rows in the order A, B, B #2, A #2:\n%s", r.out);
    cr_assert_eq(count(r.out, "#2"), 2, "%s", r.out);
    char *lines = file_slurp(jsonl, NULL);
    cr_assert(lines, "no record file");
    cr_assert_eq(count(lines, "\"record\": \"bench\""), 4, "one record a cell and pass:\n%s", lines);
    cr_assert_eq(count(lines, "\"pass\": 2"), 2, "%s", lines);
    cr_assert_eq(count(lines, "\"pass\": 1"), 2, "%s", lines);
    /* the records in run order: the first pass's two before the second's */
    const char *p2 = strstr(lines, "\"pass\": 2"), *p1 = strstr(lines, "\"pass\": 1");
    cr_assert(p1 && p2 && p1 < p2 && !strstr(p2, "\"pass\": 1"), "%s", lines);
    free(lines);
    unlink(jsonl);
    tool_result_free(&r);
    /* one arm: twice; --abba takes no value */
    r = tool_run("memra", "bench", "--abba", "--prime", "8", "-n", "4", "--reps", "1", "--warmup", "0", NULL);
    expect(&r, 0, r.out, "| cpu #2");
    tool_result_free(&r);
}

Test(tools_cli, bench_refuses_a_bad_grid_before_running) {
    tool_result r = tool_run("memra", "bench", "--prime", "8,x", NULL);
    expect(&r, 2, r.err, "--prime 'x'");
    tool_result_free(&r);
    r = tool_run("memra", "bench", "--arm", "cpu,nosuch", "--prime", "8", "-n", "4", "--reps", "1", NULL);
    expect(&r, 2, r.err, "'nosuch'");
    cr_assert(!strstr(r.out, "tok/s"), "a cell ran before the refusal:\n%s", r.out);
    tool_result_free(&r);
    r = tool_run("memra", "bench", "--arm", "cpu,cpu", NULL);
    expect(&r, 2, r.err, "given twice");
    tool_result_free(&r);
}
