/* tool_run.h: running a tool of the build (bin/memra, bin/memra-gate) from a Criterion test: a
 * child process with its stdout and stderr captured whole, its exit status or the signal that
 * ended it, and a time limit. Header-only: every test folder includes tests/common. */
#ifndef MEMRA_TEST_TOOL_RUN_H
#define MEMRA_TEST_TOOL_RUN_H

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_files.h"

/* Where the child's stdout goes: a file the result reads back, /dev/full, or nowhere (closed). */
typedef enum tool_out { TOOL_OUT_FILE, TOOL_OUT_FULL, TOOL_OUT_CLOSED } tool_out;

typedef struct tool_opts {
    tool_out out;
    long long fsize_limit;   /* RLIMIT_FSIZE of the child in bytes; 0: none */
    double timeout_s;        /* the child is killed past it and the result says so; 0: no limit */
    bool err_closed;         /* stderr closed (`2>&-`) instead of written to the error file */
    long long as_limit;      /* RLIMIT_AS of the child in bytes; 0: none */
    const char *plugin_path; /* MEMRA_PLUGIN_PATH of the child; NULL: as the test's */
} tool_opts;

typedef struct tool_result {
    int code;       /* exit status, or -1 when ended by a signal */
    int signal;     /* the signal that ended it, or 0 */
    bool timed_out; /* killed past tool_opts.timeout_s */
    char *out;      /* stdout, NUL-terminated ("" unless TOOL_OUT_FILE) */
    size_t out_len; /* its length (it may hold NUL bytes) */
    char *err;      /* stderr, NUL-terminated */
} tool_result;

/* $MEMRA_BIN_DIR and $MEMRA_BUILD_DIR, which ctest sets (a failed assertion when unset). */
static inline const char *tool_bin_dir(void) {
    const char *d = getenv("MEMRA_BIN_DIR");
    cr_assert(d && *d, "MEMRA_BIN_DIR is not set (run through ctest)");
    return d;
}

static inline const char *tool_build_dir(void) {
    const char *d = getenv("MEMRA_BUILD_DIR");
    cr_assert(d && *d, "MEMRA_BUILD_DIR is not set (run through ctest)");
    return d;
}

/* Starts bin/TOOL with args (NULL-terminated, without the program name), its stdout into
 * out_path (as o->out says) and its stderr into err_path (unless o->err_closed); the child's pid. */
static inline pid_t tool_spawn(const char *tool, const tool_opts *o, const char *const *args, const char *out_path,
                               const char *err_path) {
    char exe[1024];
    snprintf(exe, sizeof exe, "%s/%s", tool_bin_dir(), tool);
    const char *argv[64];
    int n = 0;
    argv[n++] = exe;
    for (; args[n - 1]; n++) {
        cr_assert_lt(n, 63, "too many arguments for %s", tool);
        argv[n] = args[n - 1];
    }
    argv[n] = NULL;
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        /* The child starts with the default dispositions a shell's foreground command has. */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGXFSZ, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int fe = o->err_closed ? -1 : open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fo = o->out == TOOL_OUT_FILE   ? open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644)
                 : o->out == TOOL_OUT_FULL ? open("/dev/full", O_WRONLY)
                                           : -1;
        if ((!o->err_closed && fe < 0) || (o->out != TOOL_OUT_CLOSED && fo < 0))
            _exit(126);
        if (o->err_closed) {
            close(2); /* `... 2>&-` */
        } else {
            dup2(fe, 2);
            close(fe);
        }
        if (o->out == TOOL_OUT_CLOSED) {
            close(1); /* `memra ... >&-` */
        } else {
            dup2(fo, 1);
            close(fo);
        }
        if (o->fsize_limit > 0) {
            struct rlimit rl = {(rlim_t)o->fsize_limit, (rlim_t)o->fsize_limit};
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        if (o->as_limit > 0) {
            struct rlimit rl = {(rlim_t)o->as_limit, (rlim_t)o->as_limit};
            setrlimit(RLIMIT_AS, &rl);
        }
        if (o->plugin_path)
            setenv("MEMRA_PLUGIN_PATH", o->plugin_path, 1);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Waits for pid, killing it past timeout_s (0: no limit); its exit code, signal and whether it
 * timed out into r. */
static inline void tool_wait(pid_t pid, double timeout_s, tool_result *r) {
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, timeout_s > 0 ? WNOHANG : 0);
        if (w == -1 && errno == EINTR)
            continue;
        cr_assert_neq(w, -1, "waitpid: %s", strerror(errno));
        if (w == pid)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9 > timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            r->timed_out = true;
            break;
        }
        usleep(10000);
    }
    r->code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

/* Runs bin/TOOL with args (NULL-terminated, without the program name) as o says, to the end. */
static inline tool_result tool_run_opts(const char *tool, const tool_opts *o, const char *const *args) {
    char out_path[1024], err_path[1024];
    snprintf(out_path, sizeof out_path, "%s/tool_run_%d.stdout", tool_build_dir(), (int)getpid());
    snprintf(err_path, sizeof err_path, "%s/tool_run_%d.stderr", tool_build_dir(), (int)getpid());
    tool_result r = {0};
    pid_t pid = tool_spawn(tool, o, args, out_path, err_path);
    tool_wait(pid, o->timeout_s, &r);
    if (o->out == TOOL_OUT_FILE) {
        r.out = file_slurp(out_path, &r.out_len);
    } else {
        r.out = strdup("");
        cr_assert_not_null(r.out);
    }
    r.err = file_slurp(err_path, NULL);
    unlink(out_path);
    unlink(err_path);
    return r;
}

/* Runs bin/TOOL with the arguments (NULL-terminated), stdout captured, no time limit. */
static inline tool_result tool_run(const char *tool, const char *arg, ...) {
    const char *args[64];
    int n = 0;
    va_list ap;
    va_start(ap, arg);
    for (const char *a = arg; a; a = va_arg(ap, const char *)) {
        cr_assert_lt(n, 62, "too many arguments for %s", tool);
        args[n++] = a;
    }
    va_end(ap);
    args[n] = NULL;
    return tool_run_opts(tool, &(tool_opts){0}, args);
}

/* A plugin of the build, by its manifest's name ("cpu.backend.manifest"): its absence is a failure,
 * never a skip (the cpu backend is always built in this tree). */
static inline void tool_require_manifest(const char *manifest) {
    char path[2048];
    snprintf(path, sizeof path, "%s/plugins.d/%s", tool_build_dir(), manifest);
    cr_assert_eq(access(path, R_OK), 0, "%s is missing: the plugin was not built", path);
}

/* A test-only plugin (tests/gate: faulty, faultycoll...), by its manifest's name: built into the
 * build's test plugin folder ($MEMRA_TEST_PLUGIN_DIR), never into plugins.d. */
static inline void tool_require_test_manifest(const char *manifest) {
    const char *dir = getenv("MEMRA_TEST_PLUGIN_DIR");
    cr_assert(dir && *dir, "MEMRA_TEST_PLUGIN_DIR is not set (ctest sets it)");
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, manifest);
    cr_assert_eq(access(path, R_OK), 0, "%s is missing: the test plugin was not built", path);
}

static inline void tool_result_free(tool_result *r) {
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

#endif
