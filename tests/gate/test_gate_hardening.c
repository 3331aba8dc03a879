/* test_gate_hardening.c: a judge that cannot be fooled by its surroundings (issue 14). Each test
 * fails against the gate before it: write errors of every output (records, --help, the summary
 * table, a file size limit) are exit 3 naming the file and the error; record files are appended
 * whole, shared by two gates at once, and a signal ends a run with an `interrupted` record, exit
 * 128 + signal and no file left behind; inputs that lie (a FIFO, an endless prompt file, an output
 * that is an input) are refused before anything blocks or is overwritten; the reference trace is
 * sized against the memory available; the protocol names every plugin file with its SHA-256 and
 * the registry's warnings; every record is valid JSON and UTF-8 whatever bytes it quotes; one
 * exit-code rule for unknown names and repeated options; --quiet never hides why a run failed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gate_harness.h"
#include "tool_run.h"
#include "memra/gguf.h"
#include "memra/memra.h"
#include "memra/model.h"
#include "memra/runtime.h"
#include "memra/synth.h"

#define SHORT "--prime", "4", "--gen", "4", "--rows", "0"

/* Every line of text (n bytes) is a strict JSON object in valid UTF-8, and the text ends with a
 * newline; returns the number of lines. */
static int all_lines_strict(const char *text, size_t n, const char *what) {
    int lines = 0;
    cr_assert(n == 0 || text[n - 1] == '\n', "%s does not end with a newline (a partial line)", what);
    for (size_t at = 0; at < n;) {
        const char *nl = memchr(text + at, '\n', n - at);
        size_t len = nl ? (size_t)(nl - (text + at)) : n - at;
        const char *why = gate_strict_json(text + at, len);
        cr_assert(!why, "%s line %d: %s: %.*s", what, lines + 1, why, (int)(len > 600 ? 600 : len), text + at);
        cr_assert(text[at] == '{', "%s line %d is not an object", what, lines + 1);
        lines++;
        at += len + 1;
    }
    return lines;
}

/* The tiny preset written to path with the core's GGUF writer. */
static void write_model(const char *path) {
    memra_synth_spec spec = {.preset = "tiny", .type = MEMRA_TYPE_F32, .seed = 1};
    memra_error err = {0};
    cr_assert_eq(memra_synth_write_file(&spec, path, &err), MEMRA_OK, "%s", err.msg);
}

/* ------------------------------------------------------------------------------------------ */
/* 1. Write errors are errors                                                                  */

Test(gate_hardening, help_to_a_full_device_is_exit_3) {
    if (access("/dev/full", W_OK) != 0)
        cr_skip_test("no /dev/full");
    const char *args[] = {"--help", NULL};
    gate_how how = {.no_jsonl = true, .stdout_to = "/dev/full"};
    gate_result r = gate_run_ex(args, &how);
    cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "stdout") && strstr(r.err, strerror(ENOSPC)), "%s", r.err);
    gate_result_free(&r);
}

Test(gate_hardening, help_to_a_closed_stdout_is_exit_3) {
    const char *args[] = {"--help", NULL};
    gate_how how = {.no_jsonl = true, .stdout_to = ""};
    gate_result r = gate_run_ex(args, &how);
    cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "stdout") && strstr(r.err, strerror(EBADF)), "%s", r.err);
    gate_result_free(&r);
}

Test(gate_hardening, records_to_a_closed_stdout_are_exit_3) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", SHORT, "--quiet", "--jsonl", "-",
                          NULL};
    gate_how how = {.no_jsonl = true, .stdout_to = ""};
    gate_result r = gate_run_ex(args, &how);
    cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "stdout") && strstr(r.err, strerror(EBADF)), "%s", r.err);
    gate_result_free(&r);
}

Test(gate_hardening, records_to_a_full_stdout_are_exit_3) {
    if (access("/dev/full", W_OK) != 0)
        cr_skip_test("no /dev/full");
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", SHORT, "--quiet", "--jsonl", "-",
                          NULL};
    gate_how how = {.no_jsonl = true, .stdout_to = "/dev/full"};
    gate_result r = gate_run_ex(args, &how);
    cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "stdout") && strstr(r.err, strerror(ENOSPC)), "%s", r.err);
    gate_result_free(&r);
}

Test(gate_hardening, a_summary_table_that_cannot_be_written_is_exit_3) {
    if (access("/dev/full", W_OK) != 0)
        cr_skip_test("no /dev/full");
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", SHORT,
                          NULL}; /* not --quiet: the table */
    gate_how how = {.stderr_to = "/dev/full"};
    gate_result r = gate_run_ex(args, &how);
    cr_assert_eq(r.exit, 3, "exit %d", r.exit);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(v && strstr(v, "\"exit\":3") && strstr(v, "stderr") && strstr(v, strerror(ENOSPC)), "%s",
              v ? v : r.jsonl);
    free(v);
    gate_result_free(&r);
}

Test(gate_hardening, a_file_size_limit_is_exit_3_with_whole_lines) {
    /* Enough records to pass 6000 bytes: the limit falls inside a line. */
    const char *args[] = {
        "--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", "--prime", "16", "--gen", "16", "--rows",
        "0",   "--quiet",       NULL};
    char *dir = tmp_dir_new("gate-hard"), *path = path_join(dir, "records.jsonl");
    const char *full[16];
    int n = 0;
    for (; args[n]; n++)
        full[n] = args[n];
    full[n++] = "--jsonl";
    full[n++] = path;
    full[n] = NULL;
    gate_how how = {.no_jsonl = true, .rlimit_fsize = 6000};
    gate_result r = gate_run_ex(full, &how);
    cr_assert_eq(how.exit_signal, 0, "killed by signal %d (SIGXFSZ: the limit must be an error, not a death)",
                 how.exit_signal);
    cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, path) && strstr(r.err, strerror(EFBIG)), "the message names the file and why: %s", r.err);
    size_t size;
    char *text = file_slurp(path, &size);
    cr_assert(size <= 6000 && size > 0, "%zu bytes", size);
    int lines = all_lines_strict(text, size, "the record file");
    cr_assert(lines >= 2, "%d lines", lines);
    cr_assert(strstr(text, "{\"record\":\"protocol\""), "%s", text);
    free(text);
    unlink(path);
    rmdir(dir);
    free(path);
    free(dir);
    gate_result_free(&r);
}

/* ------------------------------------------------------------------------------------------ */
/* 2. Record files stay whole                                                                  */

Test(gate_hardening, a_record_file_is_appended_to_not_truncated) {
    char *dir = tmp_dir_new("gate-hard"), *path = path_join(dir, "records.jsonl");
    FILE *f = fopen(path, "w");
    fputs("{\"record\":\"earlier\",\"n\":1}\n", f);
    fclose(f);
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", SHORT, "--quiet", "--jsonl", path,
                          NULL};
    gate_result r = gate_run(args, true);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    size_t size;
    char *text = file_slurp(path, &size);
    cr_assert(strncmp(text, "{\"record\":\"earlier\"", 19) == 0, "the earlier line is kept: %.200s", text);
    all_lines_strict(text, size, "the record file");
    cr_assert_eq(gate_count_records(text, "verdict"), 1);
    free(text);
    unlink(path);
    rmdir(dir);
    free(path);
    free(dir);
    gate_result_free(&r);
}

Test(gate_hardening, two_gates_share_one_record_file, .timeout = 120) {
    char *dir = tmp_dir_new("gate-hard"), *path = path_join(dir, "shared.jsonl");
    const char *args[] = {"--a",     "cpu:prefill=1",
                          "--b",     "cpu:prefill=1,stages=2",
                          "--prime", "64",
                          "--gen",   "64",
                          "--rows",  "0",
                          "--quiet", "--jsonl",
                          path,      NULL};
    tool_opts o = {.out = TOOL_OUT_FILE};
    pid_t pids[2];
    for (int i = 0; i < 2; i++)
        pids[i] = tool_spawn("memra-gate", &o, args, "/dev/null", "/dev/null");
    for (int i = 0; i < 2; i++) {
        tool_result r = {0};
        tool_wait(pids[i], 0, &r);
        cr_assert(r.code == 0, "gate %d: exit %d, signal %d", i, r.code, r.signal);
    }
    size_t size;
    char *text = file_slurp(path, &size);
    int lines = all_lines_strict(text, size, "the shared record file");
    cr_assert_eq(gate_count_records(text, "protocol"), 2);
    cr_assert_eq(gate_count_records(text, "verdict"), 2);
    cr_assert_eq(gate_count_records(text, "step"), 2 * 128);
    cr_assert_eq(lines, 2 * (1 + 128 + 2 + 1 + 1), "%d lines", lines);
    free(text);
    unlink(path);
    rmdir(dir);
    free(path);
    free(dir);
}

static void interrupt_with(int sig, const char *name, const char *when) {
    /* long enough that the signal comes before the end (inside the replay: shorter, so the reference
     * is not waited for long) */
    const char *steps = when ? "800" : "3000";
    const char *args[] = {"--a",     "cpu:prefill=1",
                          "--b",     "cpu:prefill=1,stages=2",
                          "--prime", steps,
                          "--gen",   steps,
                          "--rows",  "0",
                          "--quiet", "--allow-past-context",
                          NULL};
    gate_how how = {.signal = sig, .signal_when = when, .timeout_s = 100};
    gate_result r = gate_run_ex(args, &how);
    cr_assert_eq(how.exit_signal, 0, "killed by signal %d: no interrupted record", how.exit_signal);
    cr_assert_eq(r.exit, 128 + sig, "exit %d (expected %d): %s", r.exit, 128 + sig, r.err);
    cr_assert(!how.other_files, "files were left beside the records");
    all_lines_strict(r.jsonl, strlen(r.jsonl), "the records");
    /* the last line is the interrupted record */
    size_t n = strlen(r.jsonl);
    const char *last = r.jsonl + n - 1;
    while (last > r.jsonl && last[-1] != '\n')
        last--;
    cr_assert(strncmp(last, "{\"record\":\"interrupted\"", 23) == 0, "last line: %s", last);
    char want[64];
    snprintf(want, sizeof want, "\"signal\":\"%s\"", name);
    cr_assert(strstr(last, want), "%s", last);
    snprintf(want, sizeof want, "\"exit\":%d", 128 + sig);
    cr_assert(strstr(last, want), "%s", last);
    cr_assert_eq(gate_count_records(r.jsonl, "verdict"), 0, "the interrupted record replaces the verdict");
    cr_assert(strstr(r.err, name), "%s", r.err);
    if (when) { /* stopped inside the replay: between two steps */
        cr_assert(strstr(last, "\"phase\":\"replay\""), "%s", last);
        cr_assert(gate_count_records(r.jsonl, "step") > 0);
    }
    gate_result_free(&r);
}

Test(gate_hardening, sigterm_writes_an_interrupted_record, .timeout = 120) { interrupt_with(SIGTERM, "SIGTERM", NULL); }
Test(gate_hardening, sigint_writes_an_interrupted_record, .timeout = 120) { interrupt_with(SIGINT, "SIGINT", NULL); }
Test(gate_hardening, sighup_writes_an_interrupted_record, .timeout = 120) { interrupt_with(SIGHUP, "SIGHUP", NULL); }
Test(gate_hardening, sigterm_inside_the_replay_stops_between_steps, .timeout = 120) {
    interrupt_with(SIGTERM, "SIGTERM", "step");
}

/* ------------------------------------------------------------------------------------------ */
/* 3. Inputs that lie                                                                          */

Test(gate_hardening, a_fifo_as_prompt_ids_is_refused_without_blocking, .timeout = 60) {
    char *dir = tmp_dir_new("gate-hard"), *fifo = path_join(dir, "ids.fifo");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    const char *args[] = {"--prompt-ids", fifo, "--gen", "4", "--rows", "0", "--quiet", NULL};
    gate_how how = {.timeout_s = 20};
    gate_result r = gate_run_ex(args, &how);
    cr_assert_neq(r.exit, -3, "the gate blocked on the FIFO (killed after 20 s)");
    cr_assert_eq(r.exit, 2, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, fifo) && strstr(r.err, "--prompt-ids"), "%s", r.err);
    unlink(fifo);
    rmdir(dir);
    free(fifo);
    free(dir);
    gate_result_free(&r);
}

Test(gate_hardening, an_endless_prompt_file_is_bounded, .timeout = 60) {
    char *dir = tmp_dir_new("gate-hard"), *path = path_join(dir, "ids.txt");
    FILE *f = fopen(path, "w");
    static char spaces[1 << 20];
    memset(spaces, '\n', sizeof spaces);
    fputs("1 2 3\n", f);
    for (int i = 0; i < 65; i++) /* 65 MiB of separators: a stream that never gets to the point */
        fwrite(spaces, 1, sizeof spaces, f);
    fclose(f);
    const char *args[] = {"--prompt-ids", path, "--gen", "4", "--rows", "0", "--quiet", NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 2, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, path) && strstr(r.err, "more than"), "%s", r.err);
    unlink(path);
    rmdir(dir);
    free(path);
    free(dir);
    gate_result_free(&r);
}

/* An output naming an input (as given, or spelled another way) is refused, and the input is
 * unchanged. */
static void output_is_input(const char *out_opt, bool prompt, bool usage_error_first) {
    char *dir = tmp_dir_new("gate-hard"), *model = path_join(dir, "m.gguf"), *ids = path_join(dir, "ids.txt");
    write_model(model);
    FILE *f = fopen(ids, "w");
    fputs("1 2 3 4 5 6 7 8\n", f);
    fclose(f);
    const char *input = prompt ? ids : model;
    char other[4200]; /* the same file spelled another way */
    snprintf(other, sizeof other, "%s/./%s", dir, prompt ? "ids.txt" : "m.gguf");
    size_t before_size;
    char *before = file_slurp(input, &before_size);
    const char *args[24];
    int n = 0;
    if (usage_error_first) {
        args[n++] = out_opt;
        args[n++] = other;
        args[n++] = "--frobnicate";
    }
    args[n++] = "--model";
    args[n++] = model;
    if (prompt) {
        args[n++] = "--prompt-ids";
        args[n++] = ids;
    }
    if (!usage_error_first) {
        args[n++] = out_opt;
        args[n++] = other;
    }
    const char *tail[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--gen", "2", "--rows", "0", "--quiet", NULL};
    for (int i = 0; tail[i]; i++)
        args[n++] = tail[i];
    args[n] = NULL;
    gate_result r = gate_run(args, true);
    cr_assert_eq(r.exit, 2, "exit %d: %s", r.exit, r.err);
    if (!usage_error_first)
        cr_assert(strstr(r.err, "same file"), "%s", r.err);
    size_t after_size;
    char *after = file_slurp(input, &after_size);
    cr_assert(after_size == before_size && memcmp(before, after, before_size) == 0,
              "%s was changed (%zu bytes, was %zu)", input, after_size, before_size);
    free(before);
    free(after);
    unlink(model);
    unlink(ids);
    rmdir(dir);
    free(model);
    free(ids);
    free(dir);
    gate_result_free(&r);
}

Test(gate_hardening, jsonl_equal_to_the_model_is_refused) { output_is_input("--jsonl", false, false); }
Test(gate_hardening, jsonl_equal_to_the_prompt_ids_is_refused) { output_is_input("--jsonl", true, false); }
Test(gate_hardening, a_usage_error_never_writes_into_the_model) { output_is_input("--jsonl", false, true); }
Test(gate_hardening, dump_graphs_equal_to_the_model_is_refused) { output_is_input("--dump-graphs", false, false); }

/* ------------------------------------------------------------------------------------------ */
/* 4. Memory checked before it is spent                                                        */

Test(gate_hardening, a_trace_larger_than_memory_is_refused_up_front, .timeout = 60) {
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("AddressSanitizer's shadow memory does not fit under an address space limit");
#endif
    /* 1M steps x 512 logits: 2 GiB of reference trace, under a 1.5 GiB address space limit */
    const char *args[] = {"--a",     "cpu:prefill=1",
                          "--b",     "cpu:prefill=1",
                          "--prime", "500000",
                          "--gen",   "500000",
                          "--rows",  "0",
                          "--quiet", "--allow-past-context",
                          NULL};
    gate_how how = {.rlimit_as = 1536ll << 20};
    gate_result r = gate_run_ex(args, &how);
    cr_assert_eq(how.exit_signal, 0, "killed by signal %d", how.exit_signal);
    cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "MiB available") && strstr(r.err, "lower --prime and --gen") &&
                  strstr(r.err, "reference trace"),
              "the message gives the need, what is available and what to lower: %s", r.err);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(v && strstr(v, "\"exit\":3") && strstr(v, "lower --prime"), "%s", v ? v : "(none)");
    cr_assert_eq(gate_count_records(r.jsonl, "protocol"), 0, "refused before the run started");
    free(v);
    gate_result_free(&r);
}

/* ------------------------------------------------------------------------------------------ */
/* 5. Provenance of every plugin                                                               */

static void hex_of_file(const char *path, char hex[MEMRA_SHA256_HEX]) {
    size_t size;
    char *data = file_slurp(path, &size);
    uint8_t d[32];
    memra_sha256(data, size, d);
    memra_sha256_hex(d, hex);
    free(data);
}

Test(gate_hardening, the_protocol_names_every_plugin_file_and_its_digest) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", SHORT, "--quiet", NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    char *p = gate_record(r.jsonl, "protocol", 0);
    cr_assert(p);
    const char *list = strstr(p, "\"plugins\":[");
    cr_assert(list, "no plugins list: %s", p);
    const char *want[][2] = {{"cpu", "backend"}, {"default", "placement"}};
    for (size_t i = 0; i < 2; i++) {
        char pat[96];
        snprintf(pat, sizeof pat, "{\"name\":\"%s\",\"kind\":\"%s\"", want[i][0], want[i][1]);
        const char *e = strstr(list, pat);
        cr_assert(e, "%s not listed: %s", pat, list);
        char path[4096], sha[80], hex[MEMRA_SHA256_HEX];
        cr_assert(gate_field_str(e, "path", path, sizeof path) && gate_field_str(e, "sha256", sha, sizeof sha), "%s",
                  e);
        cr_assert(path[0] == '/' && access(path, R_OK) == 0, "path %s", path);
        hex_of_file(path, hex);
        cr_assert_str_eq(sha, hex, "%s: the listed digest is the file's", path);
        cr_assert(strstr(e, "\"version\":\""), "%s", e);
        /* each arm names its own backend and placement files with the same digest */
        char arm_pat[256];
        snprintf(arm_pat, sizeof arm_pat, "\"%s\":{\"name\":\"%s\",", i ? "placement" : "backend", want[i][0]);
        const char *in_arm = strstr(p, arm_pat);
        cr_assert(in_arm && in_arm < list, "arm a's provenance lacks %s: %s", arm_pat, p);
        char arm_sha[80];
        cr_assert(gate_field_str(in_arm, "sha256", arm_sha, sizeof arm_sha));
        cr_assert_str_eq(arm_sha, hex);
    }
    free(p);
    gate_result_free(&r);
}

Test(gate_hardening, registry_warnings_are_said_even_with_quiet) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", SHORT, "--quiet", NULL};
    gate_how how = {.plugin_path = "relative/plugins"};
    gate_result r = gate_run_ex(args, &how);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "warning") && strstr(r.err, "relative/plugins"), "stderr: %s", r.err);
    char *p = gate_record(r.jsonl, "protocol", 0);
    const char *w = p ? strstr(p, "\"plugin_warnings\":[\"") : NULL;
    cr_assert(w && strstr(w, "relative/plugins"), "%s", p ? p : "(none)");
    free(p);
    gate_result_free(&r);
}

/* ------------------------------------------------------------------------------------------ */
/* 6. Valid JSON and UTF-8 whatever the bytes                                                  */

/* Replaces the first `from` in the file (same length) by `to`. */
static void patch(const char *path, const char *from, const char *to) {
    size_t size, n = strlen(from);
    cr_assert_eq(strlen(to), n);
    char *data = file_slurp(path, &size);
    char *at = memmem(data, size, from, n);
    cr_assert(at, "'%s' not in %s", from, path);
    memcpy(at, to, n);
    FILE *f = fopen(path, "r+b");
    fseek(f, at - data, SEEK_SET);
    fwrite(to, 1, n, f);
    fclose(f);
    free(data);
}

Test(gate_hardening, records_are_valid_utf8_whatever_the_model_and_path_hold) {
    char *dir = tmp_dir_new("gate-hard");
    /* a path with a byte that begins no sequence and one cut short */
    char *model = path_join(dir, "m\xff\x01x\xe2\x82.gguf");
    write_model(model);
    /* general.name: a lone continuation byte, an overlong '/', a surrogate and a cut sequence */
    patch(model, "memra synthetic tiny", "m\x80mra\xc0\xafsyn\xed\xa0\x80ic tin\xf0");
    const char *args[] = {"--model", model,     "--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2",
                          SHORT,     "--quiet", NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    int lines = all_lines_strict(r.jsonl, strlen(r.jsonl), "the records");
    cr_assert(lines > 3);
    char *p = gate_record(r.jsonl, "protocol", 0);
    cr_assert(p && strstr(p, "\"name\":\"m\xef\xbf\xbdmra"), "general.name with U+FFFD: %s", p ? p : "(none)");
    cr_assert(strstr(p, "m\xef\xbf\xbd\\u0001x\xef\xbf\xbd"), "the path, escaped and replaced: %s", p);
    free(p);
    unlink(model);
    rmdir(dir);
    free(model);
    free(dir);
    gate_result_free(&r);
}

Test(gate_hardening, an_error_quoting_invalid_bytes_is_valid_utf8) {
    /* A usage error writes no record (issue 31.1): a runtime error's verdict quotes the bytes. */
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--model", "/nonexistent/\xff\xfe\x7f.gguf",
                          SHORT, "--quiet",       NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
    all_lines_strict(r.jsonl, strlen(r.jsonl), "the records");
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(v && strstr(v, "\xef\xbf\xbd\xef\xbf\xbd"), "%s", v ? v : "(none)");
    free(v);
    gate_result_free(&r);
}

/* ------------------------------------------------------------------------------------------ */
/* 7. One exit-code rule                                                                       */

Test(gate_hardening, unknown_placement_is_a_usage_error) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,placement=nosuch", SHORT, "--quiet", NULL};
    gate_expect_usage(args, "unknown placement 'nosuch'");
}

Test(gate_hardening, unknown_collective_is_a_usage_error) {
    const char *args[] = {"--a", "cpu:prefill=1,collective=nosuch", "--b", "cpu:prefill=1", SHORT, "--quiet", NULL};
    gate_expect_usage(args, "unknown collective 'nosuch'");
}

Test(gate_hardening, a_repeated_option_is_a_usage_error) {
    const char *args[] = {"--prime", "4", "--prime=5", "--gen", "4", "--rows", "0", NULL};
    gate_expect_usage(args, "--prime is given twice");
    const char *args2[] = {"--a", "cpu:prefill=1",          "--b", "cpu:prefill=1",
                           "--a", "cpu:prefill=1,stages=2", SHORT, NULL};
    gate_expect_usage(args2, "--a is given twice");
}

Test(gate_hardening, quiet_never_hides_why_a_run_failed) {
    const char *args[] = {
        "--a", "cpu:prefill=1", "--b", "faulty:flip_logit_step=3", "--prime", "8", "--gen", "8", "--rows",
        "0",   "--quiet",       NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 1, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "FAIL") && strstr(r.err, "step 3"), "stderr says why: '%s'", r.err);
    gate_result_free(&r);
}

/* An arm whose backend has no device, or with a key no plugin takes, is named before the model is
 * read or built (an 8B preset takes a minute to build on two cores): on a file the gate could not
 * even parse, the failure is the arm's, with --a or --b; with a good arm (the control), the file. */
Test(gate_hardening, no_device_is_said_before_the_model_is_loaded) {
    char path[512];
    tmp_file_path(path, sizeof path, "gate-nodev.gguf");
    file_write_text(path, "this is not a gguf file");
    const char *arms[2][2] = {{"faulty:no_device=1", "cpu"}, {"cpu", "faulty:no_device=1"}};
    const char *flag[2] = {"--a: arm a (faulty:no_device=1): ", "--b: arm b (faulty:no_device=1): "};
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"--a", arms[i][0], "--b", arms[i][1], "--model", path, SHORT, NULL};
        gate_result r = gate_run(args, false);
        cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
        cr_assert_not_null(strstr(r.err, flag[i]), "names the arm: %s", r.err);
        cr_assert_not_null(strstr(r.err, "faulty: no device"), "%s", r.err);
        cr_assert_null(strstr(r.err, path), "read the file before it asked for a device: %s", r.err);
        gate_result_free(&r);
    }
    /* a usage error of the arm comes before the lack of a device (it does not depend on the
     * machine), and before the model too */
    const char *bad[] = {"--a", "faulty:no_device=1,no_such_key=1", "--b", "cpu", "--model", path, SHORT, NULL};
    gate_expect_usage(bad, "no_such_key");
    /* and so does a value the backend's device_count refuses */
    const char *bad2[] = {"--a", "cpu", "--b", "faulty:no_device=x", "--model", path, SHORT, NULL};
    gate_expect_usage(bad2, "--b: arm b (faulty:no_device=x): faulty: no_device=x: expected a non-negative integer");
    const char *ctl[] = {"--a", "faulty", "--b", "cpu", "--model", path, SHORT, NULL};
    gate_result r = gate_run(ctl, false);
    cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
    cr_assert_not_null(strstr(r.err, path), "the control fails on the file: %s", r.err);
    cr_assert_null(strstr(r.err, "no device"), "%s", r.err);
    gate_result_free(&r);
    unlink(path);
}
