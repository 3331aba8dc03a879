/* test_tools_io.c: the memra command never reports success it did not have (issue 14):
 *   - write errors are errors: stdout on /dev/full or closed, a file size limit (ulimit -f) on a
 *     dump, a model or a record file: exit 3 and a message naming the file and the errno's text;
 *   - whole records and files: a record line appended whole or not at all; an interrupted mkmodel
 *     or --dump-logits (SIGINT, SIGTERM, SIGHUP) leaves no file and no private file, and ends by
 *     the signal;
 *   - inputs that lie: a FIFO as model or prompt file is refused without blocking, a prompt file is
 *     bounded, an output that is an input (a hard link, another spelling) is refused with exit 2;
 *   - records are valid JSON and valid UTF-8 whatever bytes a path holds;
 *   - one exit-code rule: an unknown backend or placement is a usage error naming it, a repeated
 *     flag is refused naming it. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_files.h"
#include "tool_run.h"

/* A fresh private folder of this test process under the build tree. */
static void fresh_dir(char *buf, size_t size, const char *name) {
    char tag[128];
    snprintf(tag, sizeof tag, "tools_io-%s", name);
    tmp_dir_make(buf, size, tool_build_dir(), tag);
}

static void remove_dir(const char *dir) { cr_assert_eq(tmp_dir_remove(dir), 0, "cannot remove %s", dir); }

/* The names in dir (space-separated), for messages; the count in *n. */
static void list_dir(const char *dir, char *buf, size_t size, int *n) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "opendir %s", dir);
    buf[0] = '\0';
    *n = 0;
    size_t len = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        (*n)++;
        int k = snprintf(buf + len, size - len, "%s ", e->d_name);
        if (k > 0 && (size_t)k < size - len)
            len += (size_t)k;
    }
    closedir(d);
}

/* memra with args as o says; a child that does not end within 60 s (o->timeout_s when given) is
 * killed and the result says so. */
static tool_result run_opts(const tool_opts *o, const char *const *args) {
    tool_opts t = *o;
    if (t.timeout_s <= 0)
        t.timeout_s = 60;
    return tool_run_opts("memra", &t, args);
}

#define RUN(...) run_opts(&(tool_opts){0}, (const char *const[]){__VA_ARGS__, NULL})
#define RUN_WITH(opts, ...) run_opts(&(opts), (const char *const[]){__VA_ARGS__, NULL})

static void expect(const tool_result *r, int code, const char *needle) {
    cr_assert(!r->timed_out, "the command did not end within its time limit (it blocked); stderr: %s", r->err);
    cr_assert_eq(r->signal, 0, "killed by signal %d; stderr: %s", r->signal, r->err);
    cr_assert_eq(r->code, code, "exit %d, expected %d; stderr: %s", r->code, code, r->err);
    if (needle)
        cr_assert_not_null(strstr(r->err, needle), "stderr lacks '%s':\n%s", needle, r->err);
}

static void make_model(const char *path) {
    tool_result r = RUN("mkmodel", "--preset", "tiny", "-o", path);
    expect(&r, 0, NULL);
    tool_result_free(&r);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

/* ---- 1. write errors are errors -------------------------------------------------------------- */

/* Every command that writes to stdout: help texts, tables, tokens. */
static void stdout_cases(tool_out mode, const char *errno_text) {
    char dir[1024], model[1100];
    fresh_dir(dir, sizeof dir, mode == TOOL_OUT_FULL ? "full" : "closed");
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    make_model(model);
    const char *const cases[][12] = {
        {"--help"},
        {"--version"},
        {"run", "--help"},
        {"bench", "--help"},
        {"inspect", "--help"},
        {"mkmodel", "--help"},
        {"plugins", "--help"},
        {"run", "-n", "4"},
        {"inspect", model},
        {"bench", "--prime", "4", "-n", "4", "--reps", "1", "--warmup", "0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tool_result r = run_opts(&(tool_opts){.out = mode}, cases[i]);
        cr_assert_eq(r.code, 3, "memra %s %s with stdout %s: exit %d, expected 3; stderr: %s", cases[i][0],
                     cases[i][1] ? cases[i][1] : "", mode == TOOL_OUT_FULL ? "on /dev/full" : "closed", r.code, r.err);
        cr_assert_not_null(strstr(r.err, "stdout"), "memra %s: the message does not name stdout: %s", cases[i][0],
                           r.err);
        cr_assert_not_null(strstr(r.err, errno_text), "memra %s: the message lacks '%s': %s", cases[i][0], errno_text,
                           r.err);
        tool_result_free(&r);
    }
    remove_dir(dir);
}

Test(tools_io, stdout_on_dev_full_is_an_error) { stdout_cases(TOOL_OUT_FULL, "No space left on device"); }

Test(tools_io, closed_stdout_is_an_error) { stdout_cases(TOOL_OUT_CLOSED, "Bad file descriptor"); }

/* With stdout closed, a file the tool opens must not become stdout: the tokens would go into the
 * dump. The run fails (its output was lost) and leaves no dump. */
/* memra writes stdout through a checked stream; a library may keep that stream's address and
 * write and flush it from an exit handler after main returned (the CUDA driver does: memra
 * aborted at exit on the H200, glibc's "invalid stdio handle"). stdout_at_exit.c does the same,
 * with freed memory filled (MALLOC_PERTURB_): the stream must still be alive then, and what the
 * handler writes must not reach the output. */
Test(tools_io, stdout_is_live_after_main_returns) {
    const char *const cmds[][4] = {{"--version", NULL}, {"plugins", NULL}, {"bench", "--help", NULL}};
    setenv("LD_PRELOAD", MEMRA_TEST_STDOUT_AT_EXIT, 1);
    setenv("MALLOC_PERTURB_", "165", 1);
    setenv("ASAN_OPTIONS", "verify_asan_link_order=0:detect_leaks=0", 1); /* the sanitize preset */
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        tool_opts o = {.out = TOOL_OUT_FILE};
        tool_result r = tool_run_opts("memra", &o, cmds[i]);
        cr_assert_eq(r.code, 0, "memra %s: exit %d, signal %d\n%s", cmds[i][0], r.code, r.signal, r.err);
        cr_assert(strstr(r.err, "stdout-at-exit: written and flushed"), "memra %s:\n%s", cmds[i][0], r.err);
        cr_assert(!strstr(r.out, "written at exit"), "the exit handler's write reached the output:\n%s", r.out);
        tool_result_free(&r);
    }
    unsetenv("LD_PRELOAD");
    unsetenv("MALLOC_PERTURB_");
}

Test(tools_io, closed_stdout_never_lands_in_a_dump) {
    char dir[1024], dump[1100];
    fresh_dir(dir, sizeof dir, "closed_dump");
    snprintf(dump, sizeof dump, "%s/d.f32", dir);
    tool_result r =
        RUN_WITH(((tool_opts){.out = TOOL_OUT_CLOSED}), "run", "--tokens", "1,2", "-n", "3", "--dump-logits", dump);
    expect(&r, 3, "Bad file descriptor");
    tool_result_free(&r);
    char names[2048];
    int n;
    list_dir(dir, names, sizeof names, &n);
    cr_assert_eq(n, 0, "a run whose stdout was lost left files: %s", names);
    remove_dir(dir);
}

/* ulimit -f in the child: the dump, the model and the record file hit it. */
Test(tools_io, file_size_limit_is_an_error_and_leaves_nothing) {
    char dir[1024], dump[1100], model[1100], names[2048];
    int n;
    fresh_dir(dir, sizeof dir, "fsize");
    snprintf(dump, sizeof dump, "%s/d.f32", dir);
    snprintf(model, sizeof model, "%s/s.gguf", dir);
    tool_opts lim = {.fsize_limit = 64 * 1024};
    tool_result r = RUN_WITH(lim, "run", "--preset", "small", "-n", "16", "--dump-logits", dump);
    expect(&r, 3, "File too large");
    cr_assert_not_null(strstr(r.err, dump), "the message does not name %s: %s", dump, r.err);
    tool_result_free(&r);
    list_dir(dir, names, sizeof names, &n);
    cr_assert_eq(n, 0, "a failed dump left files: %s", names);

    r = RUN_WITH(lim, "mkmodel", "--preset", "small", "-o", model);
    expect(&r, 3, "File too large");
    cr_assert_not_null(strstr(r.err, model), "the message does not name %s: %s", model, r.err);
    tool_result_free(&r);
    list_dir(dir, names, sizeof names, &n);
    cr_assert_eq(n, 0, "a failed mkmodel left files: %s", names);
    remove_dir(dir);
}

/* ---- 2. whole records ------------------------------------------------------------------------- */

/* A record that does not fit under the file size limit is not appended at all: the file keeps its
 * whole lines, and the run exits 3 naming the file. */
Test(tools_io, bench_record_is_whole_or_not_at_all) {
    char dir[1024], jsonl[1100];
    fresh_dir(dir, sizeof dir, "jsonl");
    snprintf(jsonl, sizeof jsonl, "%s/records.jsonl", dir);
    /* About 3800 bytes of earlier records: a bench record (~700 bytes) crosses a 4096-byte limit. */
    FILE *f = fopen(jsonl, "wb");
    cr_assert_not_null(f);
    for (int i = 0; i < 39; i++)
        fprintf(f, "{\"record\": \"earlier\", \"i\": %2d, \"pad\": \"%055d\"}\n", i, 0);
    fclose(f);
    size_t before_n;
    char *before = file_slurp(jsonl, &before_n);
    cr_assert(before_n > 3500 && before_n < 4096, "%zu", before_n);
    tool_result r = RUN_WITH(((tool_opts){.fsize_limit = 4096}), "bench", "--prime", "4", "-n", "4", "--reps", "1",
                             "--warmup", "0", "--jsonl", jsonl);
    expect(&r, 3, jsonl);
    cr_assert_not_null(strstr(r.err, "File too large"), "%s", r.err);
    tool_result_free(&r);
    size_t after_n;
    char *after = file_slurp(jsonl, &after_n);
    cr_assert_eq(after_n, before_n, "a failed append left %zu bytes behind", after_n - before_n);
    cr_assert(memcmp(before, after, before_n) == 0);
    free(before);
    free(after);

    r = RUN("bench", "--prime", "4", "-n", "4", "--reps", "1", "--warmup", "0", "--jsonl", "/dev/full");
    expect(&r, 3, "/dev/full");
    cr_assert_not_null(strstr(r.err, "No space left on device"), "%s", r.err);
    tool_result_free(&r);
    remove_dir(dir);
}

/* Waits until a file of dir whose name starts with prefix has at least min_bytes. */
static bool wait_for_private_file(const char *dir, const char *prefix, off_t min_bytes, double timeout_s) {
    for (double t = 0; t < timeout_s; t += 0.01) {
        DIR *d = opendir(dir);
        if (!d)
            return false;
        for (struct dirent *e; (e = readdir(d));) {
            if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
                continue;
            char p[2048];
            struct stat sb;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (stat(p, &sb) == 0 && sb.st_size >= min_bytes) {
                closedir(d);
                return true;
            }
        }
        closedir(d);
        usleep(10000);
    }
    return false;
}

static void interrupt_case(int sig, bool mkmodel) {
    char dir[1024], path[1100], names[4096];
    int n;
    fresh_dir(dir, sizeof dir, mkmodel ? "sig_mkmodel" : "sig_run");
    snprintf(path, sizeof path, "%s/%s", dir, mkmodel ? "big.gguf" : "d.f32");
    const char *mk[] = {"mkmodel", "--preset", "llama-1b", "--dtype", "q8_0", "-o", path, NULL};
    const char *rn[] = {"run", "--preset", "tiny", "-n", "200000", "--allow-past-context", "--dump-logits", path, NULL};
    char out_path[1200], err_path[1200];
    snprintf(out_path, sizeof out_path, "%s.stdout", dir);
    snprintf(err_path, sizeof err_path, "%s.stderr", dir);
    tool_opts o = {0};
    pid_t pid = tool_spawn("memra", &o, mkmodel ? mk : rn, out_path, err_path);
    /* Mid-write: some bytes are in the file or a private file beside it (the prefix matches both,
     * so a tool that writes the target itself is caught mid-write too). */
    bool mid = wait_for_private_file(dir, mkmodel ? "big.gguf" : "d.f32", 4096, 60);
    kill(pid, sig);
    tool_result r = {0};
    tool_wait(pid, 60, &r);
    char *err = file_slurp(err_path, NULL);
    unlink(out_path);
    unlink(err_path);
    cr_assert(mid, "no file with data appeared at or beside %s; stderr: %s", path, err);
    cr_assert_eq(r.signal, sig, "memra %s ended with exit %d / signal %d, expected signal %d; stderr: %s",
                 mkmodel ? "mkmodel" : "run", r.code, r.signal, sig, err);
    list_dir(dir, names, sizeof names, &n);
    cr_assert_eq(n, 0, "signal %d during memra %s left files: %s", sig, mkmodel ? "mkmodel" : "run", names);
    free(err);
    remove_dir(dir);
}

Test(tools_io, interrupted_mkmodel_leaves_nothing_sigint, .timeout = 120) { interrupt_case(SIGINT, true); }
Test(tools_io, interrupted_mkmodel_leaves_nothing_sigterm, .timeout = 120) { interrupt_case(SIGTERM, true); }
Test(tools_io, interrupted_mkmodel_leaves_nothing_sighup, .timeout = 120) { interrupt_case(SIGHUP, true); }
Test(tools_io, interrupted_dump_leaves_nothing_sigint, .timeout = 120) { interrupt_case(SIGINT, false); }
Test(tools_io, interrupted_dump_leaves_nothing_sigterm, .timeout = 120) { interrupt_case(SIGTERM, false); }
Test(tools_io, interrupted_dump_leaves_nothing_sighup, .timeout = 120) { interrupt_case(SIGHUP, false); }

/* ---- 3. inputs that lie ----------------------------------------------------------------------- */

Test(tools_io, fifo_inputs_are_refused_without_blocking, .timeout = 60) {
    char dir[1024], fifo[1100];
    fresh_dir(dir, sizeof dir, "fifo");
    snprintf(fifo, sizeof fifo, "%s/ids", dir);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    tool_opts quick = {.timeout_s = 10};
    tool_result r = RUN_WITH(quick, "run", "--prompt-ids", fifo, "-n", "2");
    expect(&r, 3, "FIFO");
    cr_assert_not_null(strstr(r.err, fifo), "%s", r.err);
    tool_result_free(&r);
    r = RUN_WITH(quick, "run", "--model", fifo, "-n", "2");
    expect(&r, 3, "FIFO");
    tool_result_free(&r);
    r = RUN_WITH(quick, "inspect", fifo);
    expect(&r, 3, "FIFO");
    tool_result_free(&r);
    r = RUN_WITH(quick, "run", "--prompt-ids", "/dev/zero", "-n", "2");
    expect(&r, 3, "/dev/zero");
    tool_result_free(&r);
    remove_dir(dir);
}

Test(tools_io, prompt_ids_file_is_read_and_bounded) {
    char dir[1024], ids[1100], many[1100];
    fresh_dir(dir, sizeof dir, "ids");
    snprintf(ids, sizeof ids, "%s/ids.txt", dir);
    write_file(ids, "1, 5\n9\n");
    tool_result a = RUN("run", "--prompt-ids", ids, "-n", "6");
    tool_result b = RUN("run", "--tokens", "1,5,9", "-n", "6");
    expect(&a, 0, NULL);
    expect(&b, 0, NULL);
    cr_assert_str_eq(a.out, b.out, "--prompt-ids and --tokens of the same ids differ");
    tool_result_free(&a);
    tool_result_free(&b);
    /* 1000001 ids: over the bound, refused naming the file. */
    snprintf(many, sizeof many, "%s/many.txt", dir);
    FILE *f = fopen(many, "wb");
    for (int i = 0; i < 1000001; i++)
        fputs("0 ", f);
    fclose(f);
    tool_result r = RUN("run", "--prompt-ids", many, "-n", "1");
    expect(&r, 2, "more than 1000000 ids");
    cr_assert_not_null(strstr(r.err, many), "%s", r.err);
    tool_result_free(&r);
    write_file(ids, "1 x 2");
    r = RUN("run", "--prompt-ids", ids, "-n", "1");
    expect(&r, 2, ids);
    tool_result_free(&r);
    write_file(ids, "1 512");
    r = RUN("run", "--prompt-ids", ids, "-n", "1");
    expect(&r, 2, "not below n_vocab 512");
    tool_result_free(&r);
    remove_dir(dir);
}

Test(tools_io, an_output_that_is_an_input_is_refused) {
    char dir[1024], model[1100], hard[1100], alias[1100], ids[1100], jsonl_alias[1100];
    fresh_dir(dir, sizeof dir, "same");
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    snprintf(hard, sizeof hard, "%s/hard.gguf", dir);
    snprintf(alias, sizeof alias, "%s/./m.gguf", dir);
    snprintf(ids, sizeof ids, "%s/ids.txt", dir);
    snprintf(jsonl_alias, sizeof jsonl_alias, "%s/../%s/m.gguf", dir, strrchr(dir, '/') + 1);
    make_model(model);
    cr_assert_eq(link(model, hard) == 0 ? 0 : errno, 0);
    write_file(ids, "1 2 3\n");
    size_t n0;
    char *before = file_slurp(model, &n0);

    tool_result r = RUN("run", "--model", model, "-n", "2", "--dump-logits", hard);
    expect(&r, 2, "same file");
    cr_assert_not_null(strstr(r.err, "--dump-logits"), "%s", r.err);
    tool_result_free(&r);
    r = RUN("run", "--model", model, "-n", "2", "--dump-logits", alias);
    expect(&r, 2, "same file");
    tool_result_free(&r);
    r = RUN("run", "--prompt-ids", ids, "-n", "2", "--dump-logits", ids);
    expect(&r, 2, "same file");
    tool_result_free(&r);
    r = RUN("bench", "--model", model, "--prime", "4", "-n", "4", "--reps", "1", "--jsonl", jsonl_alias);
    expect(&r, 2, "same file");
    cr_assert_not_null(strstr(r.err, "--jsonl"), "%s", r.err);
    tool_result_free(&r);

    size_t n1;
    char *after = file_slurp(model, &n1);
    cr_assert(n0 == n1 && memcmp(before, after, n0) == 0, "the model was written over");
    free(before);
    free(after);
    struct stat sb;
    cr_assert_neq(stat(ids, &sb), -1);
    cr_assert_eq(sb.st_size, 6, "the prompt file was written over");
    remove_dir(dir);
}

/* ---- 4. valid JSON and UTF-8 ------------------------------------------------------------------ */

/* A strict check of one JSON value: structure, string escapes, no raw control byte, and valid
 * shortest-form UTF-8 (no surrogate, nothing above U+10FFFF). */
typedef struct jp {
    const unsigned char *p, *end;
    const char *why;
} jp;

static void jp_ws(jp *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static bool jp_fail(jp *j, const char *why) {
    if (!j->why)
        j->why = why;
    return false;
}

static bool jp_utf8(jp *j) {
    unsigned char c = *j->p;
    int len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!len || j->end - j->p < len)
        return jp_fail(j, "invalid UTF-8 lead byte");
    unsigned lo = 0x80, hi = 0xbf;
    if (c == 0xe0)
        lo = 0xa0;
    if (c == 0xed)
        hi = 0x9f;
    if (c == 0xf0)
        lo = 0x90;
    if (c == 0xf4)
        hi = 0x8f;
    if (j->p[1] < lo || j->p[1] > hi)
        return jp_fail(j, "invalid UTF-8 sequence");
    for (int i = 2; i < len; i++)
        if (j->p[i] < 0x80 || j->p[i] > 0xbf)
            return jp_fail(j, "invalid UTF-8 continuation");
    j->p += len;
    return true;
}

static bool jp_string(jp *j) {
    if (j->p >= j->end || *j->p != '"')
        return jp_fail(j, "expected a string");
    j->p++;
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = *j->p;
        if (c < 0x20)
            return jp_fail(j, "raw control byte in a string");
        if (c == '\\') {
            j->p++;
            if (j->p >= j->end)
                return jp_fail(j, "cut escape");
            if (*j->p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (j->p + i >= j->end || !strchr("0123456789abcdefABCDEF", j->p[i]))
                        return jp_fail(j, "bad \\u escape");
                j->p += 5;
            } else if (strchr("\"\\/bfnrt", *j->p)) {
                j->p++;
            } else {
                return jp_fail(j, "bad escape");
            }
        } else if (c >= 0x80) {
            if (!jp_utf8(j))
                return false;
        } else {
            j->p++;
        }
    }
    if (j->p >= j->end)
        return jp_fail(j, "unterminated string");
    j->p++;
    return true;
}

static bool jp_value(jp *j, int depth) {
    jp_ws(j);
    if (j->p >= j->end)
        return jp_fail(j, "expected a value");
    if (depth > 32)
        return jp_fail(j, "too deep");
    unsigned char c = *j->p;
    if (c == '"')
        return jp_string(j);
    if (c == '{' || c == '[') {
        unsigned char close = c == '{' ? '}' : ']';
        j->p++;
        jp_ws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return true;
        }
        for (;;) {
            jp_ws(j);
            if (c == '{') {
                if (!jp_string(j))
                    return false;
                jp_ws(j);
                if (j->p >= j->end || *j->p != ':')
                    return jp_fail(j, "expected ':'");
                j->p++;
            }
            if (!jp_value(j, depth + 1))
                return false;
            jp_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == close) {
                j->p++;
                return true;
            }
            return jp_fail(j, "expected ',' or a close");
        }
    }
    const char *words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++)
        if ((size_t)(j->end - j->p) >= strlen(words[i]) && memcmp(j->p, words[i], strlen(words[i])) == 0) {
            j->p += strlen(words[i]);
            return true;
        }
    const unsigned char *s = j->p;
    if (j->p < j->end && *j->p == '-')
        j->p++;
    while (j->p < j->end && ((*j->p >= '0' && *j->p <= '9') || strchr(".eE+-", *j->p)))
        j->p++;
    return j->p > s && !(j->p == s + 1 && *s == '-') ? true : jp_fail(j, "expected a value");
}

static void assert_json_line(const char *line, size_t n) {
    jp j = {(const unsigned char *)line, (const unsigned char *)line + n, NULL};
    bool ok = jp_value(&j, 0);
    jp_ws(&j);
    cr_assert(ok && j.p == j.end, "not one valid JSON value (%s at byte %ld): %.*s", j.why ? j.why : "trailing bytes",
              (long)((const char *)j.p - line), (int)n, line);
}

/* A model whose path holds a control byte, a quote, a backslash, a stray byte 0xff and a UTF-8
 * character cut after its first byte: the record stays valid JSON and valid UTF-8. */
Test(tools_io, records_are_valid_json_and_utf8_whatever_the_path) {
    char dir[1024], model[1200], jsonl[1100];
    fresh_dir(dir, sizeof dir, "utf8");
    snprintf(model, sizeof model, "%s/m\x01\"q\\\xff\xc3-\xe2\x82.gguf", dir);
    snprintf(jsonl, sizeof jsonl, "%s/r.jsonl", dir);
    make_model(model);
    tool_result r =
        RUN("bench", "--model", model, "--prime", "4", "-n", "4", "--reps", "2", "--warmup", "0", "--jsonl", jsonl);
    expect(&r, 0, NULL);
    tool_result_free(&r);
    size_t n;
    char *text = file_slurp(jsonl, &n);
    cr_assert(n > 1 && text[n - 1] == '\n' && memchr(text, '\n', n) == text + n - 1, "one line expected: %s", text);
    assert_json_line(text, n - 1);
    cr_assert_not_null(strstr(text, "\\u0001\\\"q\\\\\\ufffd\\ufffd-\\ufffd"),
                       "the path is not escaped as expected: %s", text);
    free(text);
    remove_dir(dir);
}

/* ---- 5. one exit-code rule -------------------------------------------------------------------- */

Test(tools_io, unknown_plugins_are_usage_errors_naming_them) {
    tool_result r = RUN("run", "--backend", "nosuchbackend", "-n", "1");
    expect(&r, 2, "nosuchbackend");
    tool_result_free(&r);
    r = RUN("bench", "--backend", "nosuchbackend", "--prime", "4", "-n", "4", "--reps", "1");
    expect(&r, 2, "nosuchbackend");
    tool_result_free(&r);
    r = RUN("run", "--backend", "cpu:placement=nosuchplacement", "-n", "1");
    expect(&r, 2, "nosuchplacement");
    tool_result_free(&r);
}

Test(tools_io, repeated_and_unknown_flags_are_refused_naming_them) {
    const char *const cases[][8] = {
        {"run", "--prompt-ids", "a", "--prompt-ids", "b", NULL, "'--prompt-ids' is given twice"},
        {"run", "--dump-logits", "a", "--dump-logits", "b", NULL, "'--dump-logits' is given twice"},
        {"run", "--backend", "cpu", "--backend", "cpu", NULL, "'--arm' is given twice"}, /* --backend: --arm's alias */
        {"run", "-n", "1", "--n-gen=2", NULL, NULL, "'--n-gen' is given twice"},
        {"bench", "--jsonl", "a", "--jsonl", "b", NULL, "'--jsonl' is given twice"},
        {"bench", "--model", "a", "--model=b", NULL, NULL, "'--model' is given twice"},
        {"mkmodel", "-o", "a", "--output", "b", NULL, "'--output' is given twice"},
        {"mkmodel", "--seed", "1", "--model-seed", "2", NULL, "'--seed' is given twice"},
        {"inspect", "--arrays", "1", "--arrays", "2", NULL, "'--arrays' is given twice"},
        {"run", "--tokens", "1", "--prompt-ids", "f", NULL, "--tokens and --prompt-ids exclude each other"},
        {"run", "--frobnicate", NULL, NULL, NULL, NULL, "unknown option '--frobnicate'"},
        {"mkmodel", "-x", NULL, NULL, NULL, NULL, "unknown option '-x'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tool_result r = run_opts(&(tool_opts){0}, cases[i]);
        expect(&r, 2, cases[i][6]);
        tool_result_free(&r);
    }
}
