/* common.h: running the memra tools from the text tests (a child process, its stdout and stderr
 * captured whole). */
#ifndef MEMRA_TEST_TEXT_COMMON_H
#define MEMRA_TEST_TEXT_COMMON_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct result {
    int code;
    char *out;
    size_t out_len;
    char *err;
} result;

static char *slurp_n(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

static void tmp_path(char *buf, size_t size, const char *name) {
    const char *dir = getenv("MEMRA_BUILD_DIR");
    snprintf(buf, size, "%s/test_text_%d_%s", dir && *dir ? dir : "/tmp", (int)getpid(), name);
}

/* Runs bin/TOOL with the arguments (NULL-terminated). */
static result run_tool(const char *tool, const char *arg, ...) {
    const char *d = getenv("MEMRA_BIN_DIR");
    cr_assert(d && *d, "MEMRA_BIN_DIR is not set (run through ctest)");
    const char *argv[40];
    char exe[1024];
    snprintf(exe, sizeof exe, "%s/%s", d, tool);
    int n = 0;
    argv[n++] = exe;
    va_list ap;
    va_start(ap, arg);
    for (const char *a = arg; a && n < 39; a = va_arg(ap, const char *))
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
    result r = {WIFEXITED(status) ? WEXITSTATUS(status) : -1, NULL, 0, NULL};
    r.out = slurp_n(out_path, &r.out_len);
    r.err = slurp_n(err_path, NULL);
    unlink(out_path);
    unlink(err_path);
    return r;
}

static void done(result *r) {
    free(r->out);
    free(r->err);
}

#endif
