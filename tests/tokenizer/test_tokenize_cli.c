/* test_tokenize_cli.c: `memra tokenize`: ids and pieces, --ids, --specials, --no-bos, and the exit
 * codes (2 usage, 3 a file that cannot be read or whose tokenizer memra lacks), on small files
 * written with the core's GGUF writer. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memra/gguf.h"

typedef struct result {
    int code;
    char *out;
    char *err;
} result;

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void tmp_path(char *buf, size_t size, const char *name) {
    const char *dir = getenv("MEMRA_BUILD_DIR");
    snprintf(buf, size, "%s/test_tokenize_%d_%s", dir && *dir ? dir : "/tmp", (int)getpid(), name);
}

static result run(const char *arg, ...) {
    const char *d = getenv("MEMRA_BIN_DIR");
    cr_assert(d && *d, "MEMRA_BIN_DIR is not set (run through ctest)");
    const char *argv[32];
    char exe[1024];
    snprintf(exe, sizeof exe, "%s/memra", d);
    int n = 0;
    argv[n++] = exe;
    va_list ap;
    va_start(ap, arg);
    for (const char *a = arg; a && n < 31; a = va_arg(ap, const char *))
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    char out_path[512], err_path[512];
    tmp_path(out_path, sizeof out_path, "stdout");
    tmp_path(err_path, sizeof err_path, "stderr");
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    result r = {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out_path), slurp(err_path)};
    unlink(out_path);
    unlink(err_path);
    return r;
}

static void done(result *r) {
    free(r->out);
    free(r->err);
}

/* A gpt2 vocabulary: a b ab Ġ Ġb, newline (Ċ), a control <|c|> (bos, add_bos true). */
static void write_model(const char *path, const char *kind) {
    memra_error err = {0};
    memra_gguf_writer *w;
    cr_assert_eq(memra_gguf_writer_new(3, 0, &w, &err), MEMRA_OK);
    const char *toks[] = {"a",
                          "b",
                          "ab",
                          "\xc4\xa0",
                          "\xc4\xa0"
                          "b",
                          "\xc4\x8a",
                          "<|c|>",
                          "<",
                          "|",
                          ">",
                          "c"};
    int32_t types[] = {1, 1, 1, 1, 1, 1, 3, 1, 1, 1, 1};
    const char *merges[] = {"a b", "\xc4\xa0 b"};
    cr_assert_eq(memra_gguf_writer_set_str(w, "tokenizer.ggml.model", kind, &err), MEMRA_OK);
    cr_assert_eq(memra_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", toks, 11, &err), MEMRA_OK);
    cr_assert_eq(memra_gguf_writer_set_array(w, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32, 11, types, &err),
                 MEMRA_OK);
    cr_assert_eq(memra_gguf_writer_set_str_array(w, "tokenizer.ggml.merges", merges, 2, &err), MEMRA_OK);
    cr_assert_eq(memra_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 6, &err), MEMRA_OK);
    cr_assert_eq(memra_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true, &err), MEMRA_OK);
    cr_assert_eq(memra_gguf_writer_write_file(w, path, &err), MEMRA_OK, "%s", err.msg);
    memra_gguf_writer_free(w);
}

Test(tokenize_cli, ids_and_pieces) {
    char path[512];
    tmp_path(path, sizeof path, "vocab.gguf");
    write_model(path, "gpt2");
    result r = run("tokenize", "--model", path, "ab b\n", NULL);
    cr_assert_eq(r.code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "6\t\"<|c|>\"\n2\t\"ab\"\n4\t\" b\"\n5\t\"\\n\"\n");
    done(&r);
    r = run("tokenize", "--model", path, "--ids", "--no-bos", "ab b", NULL);
    cr_assert_eq(r.code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "2\n4\n");
    done(&r);
    r = run("tokenize", "--model", path, "--ids", "--no-bos", "--specials", "<|c|>a", NULL);
    cr_assert_str_eq(r.out, "6\n0\n");
    done(&r);
    r = run("tokenize", "--model", path, "--ids", "--no-bos", "<|c|>a", NULL); /* the control: plain text */
    cr_assert_str_eq(r.out, "7\n8\n10\n8\n9\n0\n");
    done(&r);
    unlink(path);
}

Test(tokenize_cli, exit_codes) {
    char path[512];
    tmp_path(path, sizeof path, "bert.gguf");
    result r = run("tokenize", "text", NULL);
    cr_assert_eq(r.code, 2, "no --model is a usage error");
    cr_assert(strstr(r.err, "memra tokenize: no model given"), "%s", r.err);
    done(&r);
    r = run("tokenize", "--model", path, NULL);
    cr_assert_eq(r.code, 2, "no text is a usage error");
    done(&r);
    r = run("tokenize", "--model", path, "--bogus", "x", NULL);
    cr_assert_eq(r.code, 2);
    done(&r);
    r = run("tokenize", "--model", "/nonexistent/x.gguf", "x", NULL);
    cr_assert_eq(r.code, 3);
    done(&r);
    write_model(path, "bert");
    r = run("tokenize", "--model", path, "x", NULL);
    cr_assert_eq(r.code, 3);
    cr_assert(strstr(r.err, "tokenizer kind 'bert'") && strstr(r.err, "bert.gguf"), "%s", r.err);
    cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "one line: %s", r.err);
    done(&r);
    unlink(path);
    r = run("tokenize", "--help", NULL);
    cr_assert_eq(r.code, 0);
    cr_assert(strstr(r.out, "usage: memra tokenize"));
    done(&r);
}
