/* gate_harness.c: subprocess runner, record readers and shared assertions for the gate tests. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gate_harness.h"
#include "tool_run.h"

/* A whole file, or "" when there is none. */
static char *slurp(const char *path) {
    char *s = file_slurp_maybe(path, NULL);
    return s ? s : strdup("");
}

gate_result gate_run(const char *const *args, bool no_jsonl) {
    gate_how how = {.no_jsonl = no_jsonl};
    return gate_run_ex(args, &how);
}

/* Whether the file at path holds a record of this kind yet. */
static bool has_record(const char *path, const char *kind) {
    char *text = slurp(path), prefix[96];
    snprintf(prefix, sizeof prefix, "{\"record\":\"%s\"", kind);
    bool yes = strstr(text, prefix) != NULL;
    free(text);
    return yes;
}

gate_result gate_run_ex(const char *const *args, gate_how *how) {
    gate_result r = {.exit = -1};
    char dir[256];
    tmp_dir_make(dir, sizeof dir, NULL, "gate-test");
    char jsonl[300], out[300], err[300];
    snprintf(jsonl, sizeof jsonl, "%s/records.jsonl", dir);
    snprintf(out, sizeof out, "%s/stdout", dir);
    snprintf(err, sizeof err, "%s/stderr", dir);
    const char *argv[128];
    int n = 0;
    for (int i = 0; args[i] && n < 120; i++)
        argv[n++] = args[i];
    if (!how->no_jsonl) {
        argv[n++] = "--jsonl";
        argv[n++] = jsonl;
    }
    argv[n] = NULL;
    /* stdout and stderr: captured (NULL), closed ("") or into the path given */
    tool_opts o = {.out = how->stdout_to && !*how->stdout_to ? TOOL_OUT_CLOSED : TOOL_OUT_FILE,
                   .fsize_limit = how->rlimit_fsize,
                   .err_closed = how->stderr_to && !*how->stderr_to,
                   .as_limit = how->rlimit_as,
                   .plugin_path = how->plugin_path};
    pid_t pid = tool_spawn("memra-gate", &o, argv, how->stdout_to ? how->stdout_to : out,
                           how->stderr_to ? how->stderr_to : err);
    int status = 0, waited = 0;
    const int limit_ms = (how->timeout_s ? how->timeout_s : 120) * 1000;
    bool signalled = false, killed = false;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (how->signal && !signalled && has_record(jsonl, how->signal_when ? how->signal_when : "protocol")) {
            kill(pid, how->signal);
            signalled = true;
        }
        if (waited >= limit_ms && !killed) {
            kill(pid, SIGKILL);
            killed = true;
        }
        usleep(5000);
        waited += 5;
    }
    r.exit = killed ? -3 : WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    how->exit_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    r.jsonl = slurp(jsonl);
    r.out = slurp(out);
    r.err = slurp(err);
    /* A sanitizer report in the child must never pass for the gate's own exit 1. */
    if (strstr(r.err, "Sanitizer") || strstr(r.err, "runtime error:"))
        r.exit = -2;
    unlink(jsonl);
    unlink(out);
    unlink(err);
    how->other_files = rmdir(dir) != 0;
    if (how->other_files) { /* say what, then clean up */
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            char path[512];
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            fprintf(stderr, "left behind: %s\n", path);
            unlink(path);
        }
        if (d)
            closedir(d);
        rmdir(dir);
    }
    return r;
}

/* ---- a strict JSON and UTF-8 check ---------------------------------------------------------- */

typedef struct strict {
    const unsigned char *p, *end;
    const char *why;
    int depth;
} strict;

static void ws(strict *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static bool bad(strict *s, const char *why) {
    if (!s->why)
        s->why = why;
    return false;
}

static bool lit(strict *s, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return bad(s, "not a JSON value");
    s->p += n;
    return true;
}

static bool str(strict *s) {
    s->p++; /* the opening quote */
    while (s->p < s->end && *s->p != '"') {
        unsigned char c = *s->p;
        if (c < 0x20)
            return bad(s, "a raw control byte in a string");
        if (c == '\\') {
            if (s->p + 1 >= s->end)
                return bad(s, "an escape cut short");
            unsigned char e = s->p[1];
            if (e == 'u') {
                if (s->end - s->p < 6)
                    return bad(s, "a \\u escape cut short");
                for (int i = 2; i < 6; i++)
                    if (!isxdigit(s->p[i]))
                        return bad(s, "a \\u escape without 4 hex digits");
                s->p += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || !e)
                return bad(s, "an unknown escape");
            s->p += 2;
            continue;
        }
        s->p++;
    }
    if (s->p >= s->end)
        return bad(s, "a string without its closing quote");
    s->p++;
    return true;
}

static bool num(strict *s) {
    const unsigned char *p = s->p;
    if (p < s->end && *p == '-')
        p++;
    if (p < s->end && *p == '0')
        p++;
    else if (p < s->end && *p >= '1' && *p <= '9')
        while (p < s->end && isdigit(*p))
            p++;
    else
        return bad(s, "not a JSON number");
    if (p < s->end && *p == '.') {
        p++;
        if (p >= s->end || !isdigit(*p))
            return bad(s, "a fraction without digits");
        while (p < s->end && isdigit(*p))
            p++;
    }
    if (p < s->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < s->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= s->end || !isdigit(*p))
            return bad(s, "an exponent without digits");
        while (p < s->end && isdigit(*p))
            p++;
    }
    s->p = p;
    return true;
}

static bool value(strict *s) {
    ws(s);
    if (s->p >= s->end)
        return bad(s, "a value is missing");
    if (++s->depth > 64)
        return bad(s, "nested too deep");
    bool ok;
    unsigned char c = *s->p;
    if (c == '{' || c == '[') {
        const unsigned char close = c == '{' ? '}' : ']';
        s->p++;
        ws(s);
        ok = true;
        if (s->p < s->end && *s->p == close) {
            s->p++;
        } else {
            for (;;) {
                ws(s);
                if (c == '{') {
                    if (s->p >= s->end || *s->p != '"' || !str(s))
                        return bad(s, "an object member without a string key");
                    ws(s);
                    if (s->p >= s->end || *s->p != ':')
                        return bad(s, "a member without ':'");
                    s->p++;
                }
                if (!value(s))
                    return false;
                ws(s);
                if (s->p < s->end && *s->p == ',') {
                    s->p++;
                    continue;
                }
                if (s->p < s->end && *s->p == close) {
                    s->p++;
                    break;
                }
                return bad(s, "a container not closed");
            }
        }
    } else if (c == '"') {
        ok = str(s);
    } else if (c == 't') {
        ok = lit(s, "true");
    } else if (c == 'f') {
        ok = lit(s, "false");
    } else if (c == 'n') {
        ok = lit(s, "null");
    } else {
        ok = num(s);
    }
    s->depth--;
    return ok;
}

static const char *utf8_check(const unsigned char *p, const unsigned char *end) {
    while (p < end) {
        unsigned char c = *p;
        int n;
        unsigned lo = 0x80, hi = 0xbf;
        if (c < 0x80) {
            p++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            n = 2;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 3;
            lo = c == 0xe0 ? 0xa0 : 0x80;
            hi = c == 0xed ? 0x9f : 0xbf;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 4;
            lo = c == 0xf0 ? 0x90 : 0x80;
            hi = c == 0xf4 ? 0x8f : 0xbf;
        } else {
            return "invalid UTF-8: a byte that begins no sequence";
        }
        if (end - p < n)
            return "invalid UTF-8: a sequence cut short";
        if (p[1] < lo || p[1] > hi)
            return "invalid UTF-8: a bad second byte";
        for (int i = 2; i < n; i++)
            if (p[i] < 0x80 || p[i] > 0xbf)
                return "invalid UTF-8: a bad continuation byte";
        p += n;
    }
    return NULL;
}

const char *gate_strict_json(const char *line, size_t n) {
    const unsigned char *p = (const unsigned char *)line;
    const char *why = utf8_check(p, p + n);
    if (why)
        return why;
    strict s = {.p = p, .end = p + n};
    if (!value(&s))
        return s.why ? s.why : "not JSON";
    ws(&s);
    return s.p == s.end ? NULL : "more after the value";
}

void gate_result_free(gate_result *r) {
    free(r->jsonl);
    free(r->err);
    free(r->out);
}

char *gate_record(const char *jsonl, const char *record, int n) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "{\"record\":\"%s\"", record);
    for (const char *p = jsonl; p && *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (strncmp(p, prefix, strlen(prefix)) == 0 && n-- == 0)
            return strndup(p, len);
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

int gate_count_records(const char *jsonl, const char *record) {
    int n = 0;
    char *line;
    while ((line = gate_record(jsonl, record, n)) != NULL) {
        free(line);
        n++;
    }
    return n;
}

static const char *value_of(const char *line, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    return p ? p + strlen(pat) : NULL;
}

bool gate_field_num(const char *line, const char *key, double *out) {
    const char *v = line ? value_of(line, key) : NULL;
    if (!v)
        return false;
    char *end;
    *out = strtod(v, &end);
    return end != v;
}

bool gate_field_str(const char *line, const char *key, char *buf, size_t size) {
    const char *v = line ? value_of(line, key) : NULL;
    if (!v || *v != '"')
        return false;
    v++;
    size_t n = 0;
    while (v[n] && v[n] != '"')
        n += v[n] == '\\' && v[n + 1] ? 2 : 1;
    snprintf(buf, size, "%.*s", (int)n, v);
    return true;
}

bool gate_field_bool(const char *line, const char *key, bool *out) {
    const char *v = line ? value_of(line, key) : NULL;
    if (!v)
        return false;
    if (strncmp(v, "true", 4) == 0)
        *out = true;
    else if (strncmp(v, "false", 5) == 0)
        *out = false;
    else
        return false;
    return true;
}

void gate_expect_usage(const char *const *args, const char *message) {
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 2, "exit %d (expected 2), stderr: %s", r.exit, r.err);
    cr_assert(strstr(r.err, message), "stderr lacks '%s':\n%s", message, r.err);
    /* A usage error is no run: no record anywhere (issue 31.1), nor on stdout. */
    cr_assert_str_eq(r.jsonl, "", "a usage error wrote records: %s", r.jsonl);
    cr_assert_str_eq(r.out, "", "a usage error wrote to stdout: %s", r.out);
    gate_result_free(&r);
}
