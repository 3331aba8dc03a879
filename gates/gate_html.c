/* gate_html.c: --html FILE, the report page of this run's records (tools/report.h renders it).
 *
 * The records are kept as they are written: while --html is on, the gate's record stream is a
 * stream of our own (fopencookie) that passes each complete line on to where the records go (the
 * --jsonl file through memra_append_line, whole or not at all, or stdout) and keeps a copy of each
 * line that was written. So the page shows exactly this run's records (not those of another gate
 * appending to the same file), also when the records go to stdout. At the end the page is rendered
 * in memory, then written under a private name and renamed into place with SIGINT, SIGTERM and
 * SIGHUP blocked, so no signal leaves a private file behind. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gate.h"
#include "memra/fileio.h"
#include "report.h"

static bool buf_put(char **b, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *len + n + 1)
            c *= 2;
        char *g = realloc(*b, c);
        if (!g)
            return false;
        *b = g;
        *cap = c;
    }
    memcpy(*b + *len, s, n);
    *len += n;
    (*b)[*len] = '\0';
    return true;
}

/* One complete line to the real output; kept when written. */
static bool tee_line(gate_html *t, const char *line, size_t n) {
    if (t->fd >= 0) {
        memra_error e = {0};
        errno = 0;
        if (memra_append_line(t->fd, t->name, line, n, &e) != MEMRA_OK) {
            int saved = errno ? errno : EIO;
            snprintf(t->why, sizeof t->why, "%s", e.msg);
            errno = saved;
            return false;
        }
    } else if (t->f) {
        errno = 0;
        if (fwrite(line, 1, n, t->f) != n || fflush(t->f) != 0) {
            if (!errno)
                errno = EIO;
            return false;
        }
    }
    if (!t->oom && !buf_put(&t->all, &t->all_len, &t->all_cap, line, n))
        t->oom = true;
    return true;
}

static ssize_t tee_write(void *cookie, const char *buf, size_t size) {
    gate_html *t = cookie;
    size_t done = 0;
    bool ok = true;
    while (done < size) {
        const char *nl = memchr(buf + done, '\n', size - done);
        size_t n = nl ? (size_t)(nl - (buf + done)) + 1 : size - done;
        if (!buf_put(&t->line, &t->line_len, &t->line_cap, buf + done, n)) {
            errno = ENOMEM;
            t->line_len = 0;
            return -1;
        }
        done += n;
        if (nl) {
            ok = tee_line(t, t->line, t->line_len) && ok;
            t->line_len = 0;
        }
    }
    return ok ? (ssize_t)size : -1;
}

memra_status gate_html_begin(gate_ctx *ctx, gate_html *t, int *exit_code, memra_error *err) {
    const gate_config *cfg = ctx->cfg;
    memset(t, 0, sizeof *t);
    t->fd = -1;
    if (!cfg->html_path)
        return MEMRA_OK;
    struct stat sb;
    *exit_code = GATE_EXIT_USAGE;
    if (stat(cfg->html_path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return memra_fail(err, MEMRA_E_INVALID,
                          "--html %s: %s, not a regular file: the page is renamed into place, which would replace "
                          "it; give a file path",
                          cfg->html_path, memra_file_type_name((uint32_t)sb.st_mode));
    bool same = false;
    memra_error e = {0};
    if (cfg->jsonl_path && strcmp(cfg->jsonl_path, "-") != 0 &&
        memra_same_file(cfg->html_path, cfg->jsonl_path, &same, &e) == MEMRA_OK && same)
        return memra_fail(err, MEMRA_E_INVALID, "--html %s is the same file as --jsonl %s: it would be overwritten",
                          cfg->html_path, cfg->jsonl_path);
    *exit_code = GATE_EXIT_RUNTIME;
    /* A folder where the page cannot be created fails now, not after the run. */
    memra_atomic_file *probe = NULL;
    FILE *pf = NULL;
    if (memra_atomic_open(cfg->html_path, &probe, &pf, &e) != MEMRA_OK)
        return memra_fail(err, MEMRA_E_IO, "--html: %s", e.msg);
    memra_atomic_abort(probe);
    /* Without --jsonl the records go nowhere but into the page. */
    t->fd = ctx->json.fd;
    t->f = ctx->json.f;
    t->name = ctx->json.name;
    cookie_io_functions_t io = {.write = tee_write};
    FILE *s = fopencookie(t, "w", io);
    if (!s)
        return memra_fail(err, MEMRA_E_IO, "--html %s: cannot keep the records: %s", cfg->html_path, strerror(errno));
    t->stream = s;
    t->on = true;
    ctx->json.fd = -1;
    ctx->json.f = s;
    return MEMRA_OK;
}

/* The stream back to the real output, for close_outputs. */
static void untee(gate_ctx *ctx, gate_html *t) {
    if (!t->on)
        return;
    fclose(t->stream); /* every record was flushed whole when written: nothing is pending */
    t->stream = NULL;
    ctx->json.fd = t->fd;
    ctx->json.f = t->f;
    t->on = false;
}

static bool page_failed(gate_verdict *v, const char *path, const char *why) {
    fprintf(stderr, "memra-gate: error: --html %s: %s\n", path, why);
    if (v->exit == GATE_EXIT_PASS || v->exit == GATE_EXIT_FAIL)
        v->exit = GATE_EXIT_RUNTIME;
    return false;
}

bool gate_html_end(gate_ctx *ctx, gate_html *t, gate_verdict *v) {
    const char *path = ctx->cfg->html_path;
    const bool kept = t->on;
    untee(ctx, t);
    bool ok = true;
    if (!kept || !path)
        goto done;
    if (t->oom) {
        ok = page_failed(v, path, "out of memory keeping the records: no page written");
        goto done;
    }
    char *html = NULL;
    size_t html_len = 0;
    FILE *m = open_memstream(&html, &html_len);
    report_diag diag;
    char source[1100];
    if (t->fd < 0 && !t->f)
        snprintf(source, sizeof source, "memra-gate records (this run's, kept for the page only: no --jsonl)");
    else
        snprintf(source, sizeof source, "memra-gate records (%s)", t->name ? t->name : "stdout");
    report_status st = m ? report_render(m, source, t->all ? t->all : "", t->all_len, &diag) : REPORT_NOMEM;
    if (m && fclose(m) != 0 && st == REPORT_OK)
        st = REPORT_NOMEM;
    if (st != REPORT_OK) {
        char why[700];
        snprintf(why, sizeof why, "%s: no page written",
                 st == REPORT_MALFORMED ? diag.error : "out of memory rendering the page");
        free(html);
        ok = page_failed(v, path, why);
        goto done;
    }
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigprocmask(SIG_BLOCK, &block, &old);
    memra_atomic_file *af = NULL;
    FILE *f = NULL;
    memra_error e = {0};
    memra_status ms = memra_atomic_open(path, &af, &f, &e);
    if (ms == MEMRA_OK && fwrite(html, 1, html_len, f) != html_len && !ferror(f)) {
        memra_atomic_abort(af);
        ms = memra_fail(&e, MEMRA_E_IO, "%s: short write", path);
    } else if (ms == MEMRA_OK)
        ms = memra_atomic_commit(af, &e); /* checks the stream's error flag and says why */
    sigprocmask(SIG_SETMASK, &old, NULL);
    free(html);
    if (ms != MEMRA_OK)
        ok = page_failed(v, path, e.msg);
    else
        fprintf(stderr, "memra-gate: wrote %s\n", path); /* as memra report says it (even with --quiet) */
done:
    free(t->all);
    free(t->line);
    t->all = t->line = NULL;
    return ok;
}
