/* cmd_report.c: `memra report FILE.jsonl [-o report.html]`: one self-contained HTML page from the
 * JSON-line records of memra-gate and memra bench (report.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "report.h"

static const char help_text[] =
    "usage: memra report FILE.jsonl [-o FILE.html | -o -]\n"
    "\n"
    "Writes one self-contained HTML page from the JSON-line records of memra-gate (--jsonl) and\n"
    "memra bench (--jsonl): for each gate (a protocol record to its verdict) the PASS/FAIL banner,\n"
    "the speed of b against a in words (b/a, its 95% interval, each arm's tok/s), then\n"
    "the protocol (model, arms as resolved, plugins with versions and sha256), the timing rows in\n"
    "schedule order with medians and the ratio's bootstrap interval, the step map of the\n"
    "correctness passes with the first mismatch (and the per-step NMSE against the tolerance in\n"
    "nmse mode), the census, epoch and refusal-cell tables; bench records against the tok/s their\n"
    "measured ceiling allows. Several gates in one file are compared in a table at the top. The\n"
    "page has no script and fetches nothing (inline SVG charts, inline style, a print stylesheet);\n"
    "it is made from the records alone, so a file from another machine renders the same.\n"
    "\n"
    "  -o, --output FILE    the page (default: FILE.jsonl with .jsonl replaced by .html, or .html\n"
    "                       appended); '-' writes it to stdout. Written under a private name and\n"
    "                       renamed into place when complete\n"
    "\n"
    "Unknown record kinds are listed in the page, not dropped. A line that is not a JSON object with\n"
    "a string member \"record\" is an error naming the line (exit 3), the last line too, except a\n"
    "last line cut short (no newline, and it stops in the middle of a value), which is left out and\n"
    "said in the page and on stderr. The records are read with jansson.\n"
    "Exit codes: 0 the page was written (whatever the gates' verdicts), 2 usage, 3 error.\n";

/* The whole input file in memory (a regular file only: a FIFO or device is refused before it is
 * opened). */
static int read_input(const char *cmd, const char *path, char **data, size_t *len) {
    memra_error err = {0};
    if (memra_check_regular_input(path, "record file", &err) != MEMRA_OK)
        return cli_fail(cmd, &err);
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_error(cmd, "%s: cannot open: %s", path, strerror(errno));
        return CLI_EXIT_ERROR;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            size_t c = cap ? cap * 2 : 1 << 16;
            char *g = c > cap ? realloc(buf, c) : NULL;
            if (!g) {
                free(buf);
                fclose(f);
                cli_error(cmd, "%s: out of memory reading it", path);
                return CLI_EXIT_ERROR;
            }
            buf = g;
            cap = c;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    bool bad = ferror(f) != 0;
    int e = errno;
    fclose(f);
    if (bad) {
        free(buf);
        cli_error(cmd, "%s: read error: %s", path, strerror(e));
        return CLI_EXIT_ERROR;
    }
    *data = buf;
    *len = n;
    return CLI_EXIT_OK;
}

/* FILE.jsonl -> FILE.html; any other name gets .html appended. */
static char *default_output(const char *in) {
    size_t n = strlen(in);
    const char *ext = ".jsonl";
    size_t e = strlen(ext);
    bool has = n > e && strcmp(in + n - e, ext) == 0;
    size_t base = has ? n - e : n;
    char *o = malloc(base + 6);
    if (o) {
        memcpy(o, in, base);
        memcpy(o + base, ".html", 6);
    }
    return o;
}

int cmd_report(int argc, char **argv) {
    const char *cmd = "report";
    cli_opt opts[] = {{"--output", "-o", true, NULL}};
    size_t n_opts = sizeof opts / sizeof opts[0], n_pos = 0;
    const char *pos[1] = {NULL};
    bool help = false;
    int rc = cli_parse(cmd, argc, argv, 1, opts, n_opts, pos, 1, &n_pos, help_text, &help);
    if (rc != CLI_EXIT_OK || help)
        return rc;
    if (n_pos != 1 || !pos[0] || !*pos[0]) {
        cli_error(cmd, "give the record file: memra report FILE.jsonl [-o FILE.html] (see --help)");
        return CLI_EXIT_USAGE;
    }
    const char *in = pos[0], *given = cli_get(opts, n_opts, "--output");
    if (given && !*given) {
        cli_error(cmd, "-o: empty file name");
        return CLI_EXIT_USAGE;
    }
    const bool to_stdout = given && strcmp(given, "-") == 0;
    char *def = NULL;
    const char *outp = given;
    if (!given && !(outp = def = default_output(in))) {
        cli_error(cmd, "out of memory");
        return CLI_EXIT_ERROR;
    }
    if (!to_stdout && (rc = cli_refuse_same_file(cmd, "-o", outp, "the record file", in)) != CLI_EXIT_OK) {
        free(def);
        return rc;
    }
    char *data = NULL;
    size_t len = 0;
    if ((rc = read_input(cmd, in, &data, &len)) != CLI_EXIT_OK) {
        free(def);
        return rc;
    }
    /* The page is built in memory first, so a malformed line writes nothing anywhere. */
    char *html = NULL;
    size_t html_len = 0;
    FILE *m = open_memstream(&html, &html_len);
    report_diag diag;
    report_status st = m ? report_render(m, in, data, len, &diag) : REPORT_NOMEM;
    if (m && fclose(m) != 0 && st == REPORT_OK)
        st = REPORT_NOMEM;
    free(data);
    if (st != REPORT_OK) {
        if (st == REPORT_MALFORMED)
            cli_error(cmd, "%s: %s (nothing written)", in, diag.error);
        else
            cli_error(cmd, "%s: out of memory building the page (nothing written)", in);
        free(html);
        free(def);
        return CLI_EXIT_ERROR;
    }
    if (diag.truncated)
        cli_error(cmd, "%s: line %llu is cut short (%s): left out of the page, which says so", in,
                  (unsigned long long)diag.truncated_line, diag.truncated_why);
    if (to_stdout) {
        size_t w = fwrite(html, 1, html_len, stdout);
        rc = cli_stdout_ok(cmd) ? CLI_EXIT_OK : CLI_EXIT_ERROR;
        if (rc == CLI_EXIT_OK && w != html_len) {
            cli_error(cmd, "stdout: short write");
            rc = CLI_EXIT_ERROR;
        }
        free(html);
        free(def);
        return rc;
    }
    cli_output o;
    if ((rc = cli_output_open(cmd, "-o", outp, &o)) != CLI_EXIT_OK) {
        free(html);
        free(def);
        return rc;
    }
    if (fwrite(html, 1, html_len, o.f) != html_len && !ferror(o.f)) {
        cli_output_abort(&o);
        cli_error(cmd, "%s: short write", outp);
        free(html);
        free(def);
        return CLI_EXIT_ERROR;
    } /* a write error is seen by the commit, which says why */
    cli_output *outs[] = {&o};
    rc = cli_output_commit(cmd, outs, 1);
    free(html);
    if (rc == CLI_EXIT_OK)
        fprintf(stderr,
                "memra report: wrote %s: %u gate(s) (%u not passing), %u bench record(s), %u of an unknown kind\n",
                outp, diag.gates, diag.failing_gates, diag.bench, diag.unknown);
    free(def);
    return rc;
}
