/* gate_harness.c: subprocess runner, record readers and shared assertions for the gate tests. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gate_harness.h"

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = '\0';
    fclose(f);
    return buf;
}

gate_result gate_run(const char *const *args, bool no_jsonl) {
    gate_result r = {.exit = -1};
    const char *bin_dir = getenv("MEMRA_BIN_DIR");
    char bin[4096], dir[] = "/tmp/memra-gate-test-XXXXXX";
    snprintf(bin, sizeof bin, "%s/memra-gate", bin_dir ? bin_dir : ".");
    if (!mkdtemp(dir))
        return r;
    char jsonl[256], out[256], err[256];
    snprintf(jsonl, sizeof jsonl, "%s/records.jsonl", dir);
    snprintf(out, sizeof out, "%s/stdout", dir);
    snprintf(err, sizeof err, "%s/stderr", dir);
    const char *argv[128];
    int n = 0;
    argv[n++] = bin;
    for (int i = 0; args[i] && n < 120; i++)
        argv[n++] = args[i];
    if (!no_jsonl) {
        argv[n++] = "--jsonl";
        argv[n++] = jsonl;
    }
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    r.exit = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.jsonl = slurp(jsonl);
    r.out = slurp(out);
    r.err = slurp(err);
    /* A sanitizer report in the child must never pass for the gate's own exit 1. */
    if (strstr(r.err, "Sanitizer") || strstr(r.err, "runtime error:"))
        r.exit = -2;
    unlink(jsonl);
    unlink(out);
    unlink(err);
    rmdir(dir);
    return r;
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
    char *v = gate_record(r.jsonl, "verdict", 0);
    if (v) /* the record says why too, when the output was open */
        cr_assert(strstr(v, "\"exit\":2"), "%s", v);
    free(v);
    gate_result_free(&r);
}
