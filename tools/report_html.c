/* report_html.c: the HTML page of `memra report` and `memra-gate --html` (see report.h). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "report_json.h"

#define COL_A "#1f6fb4"
#define COL_B "#e0700b"

/* ---- records and gates ---------------------------------------------------------------------- */

typedef struct rec {
    rj_val v;
    const char *kind;
    uint64_t line;
} rec;

typedef struct gate {
    size_t *idx; /* its records, in file order */
    size_t n, cap;
    const rec *protocol, *verdict, *interrupted, *summary;
    bool cut; /* a new protocol began before its verdict */
} gate;

typedef struct doc {
    FILE *out;
    const char *source;
    rec *recs;
    size_t n_recs, cap_recs;
    gate *gates;
    size_t n_gates, cap_gates;
    size_t *bench, n_bench, cap_bench;
    size_t *loose, n_loose, cap_loose; /* unknown kinds outside any gate */
    uint64_t lines;
    const report_diag *diag;
} doc;

static const char *const gate_kinds[] = {"protocol",    "census",  "refusal", "step",    "mismatch",   "profile",
                                         "carry_check", "measure", "summary", "verdict", "interrupted"};

static bool known_gate_kind(const char *k) {
    for (size_t i = 0; i < sizeof gate_kinds / sizeof gate_kinds[0]; i++)
        if (strcmp(k, gate_kinds[i]) == 0)
            return true;
    return false;
}

static bool grow(void **p, size_t *cap, size_t n, size_t size) {
    if (n < *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 16;
    void *g = realloc(*p, c * size);
    if (!g)
        return false;
    *p = g;
    *cap = c;
    return true;
}

static bool push_idx(size_t **a, size_t *n, size_t *cap, size_t v) {
    if (!grow((void **)a, cap, *n, sizeof **a))
        return false;
    (*a)[(*n)++] = v;
    return true;
}

static gate *new_gate(doc *d) {
    if (!grow((void **)&d->gates, &d->cap_gates, d->n_gates, sizeof *d->gates))
        return NULL;
    gate *g = &d->gates[d->n_gates++];
    memset(g, 0, sizeof *g);
    return g;
}

/* Splits the records into gates, bench records and loose unknown records. */
static bool assemble(doc *d) {
    gate *open = NULL;
    for (size_t i = 0; i < d->n_recs; i++) {
        const rec *r = &d->recs[i];
        if (strcmp(r->kind, "bench") == 0) {
            if (!push_idx(&d->bench, &d->n_bench, &d->cap_bench, i))
                return false;
            continue;
        }
        if (!known_gate_kind(r->kind) && !open) {
            if (!push_idx(&d->loose, &d->n_loose, &d->cap_loose, i))
                return false;
            continue;
        }
        if (strcmp(r->kind, "protocol") == 0 && open) {
            open->cut = true;
            open = NULL;
        }
        if (!open && !(open = new_gate(d)))
            return false;
        if (!push_idx(&open->idx, &open->n, &open->cap, i))
            return false;
        if (strcmp(r->kind, "protocol") == 0 && !open->protocol)
            open->protocol = r;
        else if (strcmp(r->kind, "summary") == 0 && !open->summary)
            open->summary = r;
        else if (strcmp(r->kind, "verdict") == 0 || strcmp(r->kind, "interrupted") == 0) {
            if (r->kind[0] == 'v')
                open->verdict = r;
            else
                open->interrupted = r;
            open = NULL;
        }
    }
    return true;
}

/* ---- output helpers ------------------------------------------------------------------------- */

static void out(doc *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(doc *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(d->out, fmt, ap);
    va_end(ap);
}

static void raw(doc *d, const char *s) { fputs(s, d->out); }

/* Text for HTML and SVG (XML): markup characters as entities; control characters, DEL and the
 * noncharacters U+FFFE and U+FFFF (not allowed in XML) as visible \uXXXX. The input is valid UTF-8
 * (the parser made sure). At most max bytes (0: all), then an ellipsis. */
static void esc_n(doc *d, const char *s, size_t n, size_t max) {
    FILE *f = d->out;
    for (size_t i = 0; i < n; i++) {
        if (max && i >= max) {
            fputs("\xe2\x80\xa6", f);
            return;
        }
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:
            if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
                fprintf(f, "\\u%04x", c);
            else if (c == 0xef && i + 2 < n && (unsigned char)s[i + 1] == 0xbf &&
                     ((unsigned char)s[i + 2] == 0xbe || (unsigned char)s[i + 2] == 0xbf)) {
                fprintf(f, "\\uff%s", (unsigned char)s[i + 2] == 0xbe ? "fe" : "ff");
                i += 2;
            } else if (max && i + 1 >= max && c >= 0xc0) {
                fputs("\xe2\x80\xa6", f); /* never cut a character in two */
                return;
            } else
                fputc(c, f);
        }
    }
}

static void esc(doc *d, const char *s) {
    if (s)
        esc_n(d, s, strlen(s), 0);
}

/* A value as compact JSON text, escaped for HTML (at most max bytes of it, 0: all). */
static void json_text(FILE *f, const rj_val *v) {
    if (!v) {
        fputs("(absent)", f);
        return;
    }
    switch (v->type) {
    case RJ_NULL: fputs("null", f); break;
    case RJ_BOOL: fputs(v->b ? "true" : "false", f); break;
    case RJ_NUM: fputs(v->s, f); break;
    case RJ_STR:
        fputc('"', f);
        for (size_t i = 0; i < v->len; i++) {
            unsigned char c = (unsigned char)v->s[i];
            if (c == '"' || c == '\\')
                fprintf(f, "\\%c", c);
            else if (c < 0x20 || c == 0x7f)
                fprintf(f, "\\u%04x", c);
            else
                fputc(c, f);
        }
        fputc('"', f);
        break;
    case RJ_ARR:
    case RJ_OBJ:
        fputc(v->type == RJ_ARR ? '[' : '{', f);
        for (size_t i = 0; i < v->len; i++) {
            if (i)
                fputc(',', f);
            if (v->type == RJ_OBJ) {
                rj_val k = {.type = RJ_STR, .s = v->keys[i], .len = strlen(v->keys[i])};
                json_text(f, &k);
                fputc(':', f);
            }
            json_text(f, &v->items[i]);
        }
        fputc(v->type == RJ_ARR ? ']' : '}', f);
        break;
    }
}

/* A value in words, for a cell: a scalar as itself; null as nothing; an object whose member "ran"
 * is false as "not run" (and why); any other object as its members "name value" and an array as its
 * items, separated by commas (never JSON text: that is for the records of an unknown kind). */
static void words_text(FILE *f, const rj_val *v) {
    switch (v->type) {
    case RJ_NULL: fputs("\xe2\x80\x94", f); break;
    case RJ_BOOL: fputs(v->b ? "true" : "false", f); break;
    case RJ_NUM: fputs(v->s, f); break;
    case RJ_STR: fwrite(v->s, 1, v->len, f); break;
    case RJ_ARR:
        if (!v->len)
            fputs("none", f);
        for (size_t i = 0; i < v->len; i++) {
            if (i)
                fputs(", ", f);
            bool nest = v->items[i].type == RJ_ARR || v->items[i].type == RJ_OBJ;
            fputs(nest ? "(" : "", f);
            words_text(f, &v->items[i]);
            fputs(nest ? ")" : "", f);
        }
        break;
    case RJ_OBJ: {
        const rj_val *ran = rj_get(v, "ran");
        if (rj_is(ran, RJ_BOOL) && !ran->b) {
            const char *why = rj_str(rj_get(v, "reason"));
            fputs("not run", f);
            if (why)
                fprintf(f, ": %s", why);
            break;
        }
        if (!v->len)
            fputs("\xe2\x80\x94", f);
        bool first = true;
        for (size_t i = 0; i < v->len; i++) {
            if (v->items[i].type == RJ_NULL || (rj_is(ran, RJ_BOOL) && &v->items[i] == ran))
                continue; /* nothing to say; "ran": true is said by the values that follow */
            fputs(first ? "" : ", ", f);
            first = false;
            fputs(v->keys[i], f);
            bool nest = v->items[i].type == RJ_ARR || v->items[i].type == RJ_OBJ;
            fputs(nest ? " (" : " ", f);
            words_text(f, &v->items[i]);
            fputs(nest ? ")" : "", f);
        }
        break;
    }
    }
}

static void val(doc *d, const rj_val *v, size_t max) {
    if (!v || v->type == RJ_NULL) {
        raw(d, "<span class=\"na\">\xe2\x80\x94</span>");
        return;
    }
    if (v->type == RJ_STR) {
        esc_n(d, v->s, v->len, max);
        return;
    }
    if (v->type == RJ_NUM) {
        esc(d, v->s);
        return;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) {
        raw(d, "(out of memory)");
        return;
    }
    words_text(m, v);
    if (fclose(m) == 0 && buf)
        esc_n(d, buf, len, max);
    free(buf);
}

/* A value as the JSON text it was written as (the records of an unknown kind). */
static void val_json(doc *d, const rj_val *v, size_t max) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) {
        raw(d, "(out of memory)");
        return;
    }
    json_text(m, v);
    if (fclose(m) == 0 && buf)
        esc_n(d, buf, len, max);
    free(buf);
}

static void valp(doc *d, const rj_val *v, const char *path) { val(d, rj_path(v, path), 400); }

/* A key-value row of a table. */
static void kv(doc *d, const char *key, const rj_val *v) {
    out(d, "<tr><th>%s</th><td>", key);
    val(d, v, 600);
    raw(d, "</td></tr>\n");
}

/* A number for the page in fmt ("%.2f"), or in 6 significant digits where fmt would write a long
 * run of digits (beyond 1e9) or lose it (below 1e-4); never "inf" or "nan": a value that is not a
 * finite number (an overflow of arithmetic on huge record values) is "out of range". */
static const char *num_text(double x, char *buf, size_t size, const char *fmt) {
    if (!isfinite(x))
        snprintf(buf, size, "%s", "out of range");
    else if (fabs(x) >= 1e9 || (x != 0 && fabs(x) < 1e-4))
        snprintf(buf, size, "%.6g", x);
    else
        snprintf(buf, size, fmt, x + 0.0); /* + 0.0: -0 is 0 */
    return buf;
}

static bool getnum(const rj_val *v, const char *path, double *x) { return rj_num(rj_path(v, path), x); }

static const char *getstr(const rj_val *v, const char *path) { return rj_str(rj_path(v, path)); }

static bool streq(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

/* ---- the page ------------------------------------------------------------------------------- */

static const char style[] =
    "<style>\n"
    ":root{--a:#1f6fb4;--b:#e0700b;--ok:#2a9d3a;--bad:#c62828;--mut:#666}\n"
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;margin:0;"
    "color:#1b1b1b;background:#fafafa}\n"
    "main{max-width:1100px;margin:0 auto;padding:16px 20px 40px}\n"
    "h1{font-size:22px;margin:8px 0}h2{font-size:19px;margin:24px 0 8px}h3{font-size:15px;margin:18px 0 6px}\n"
    "section.gate{background:#fff;border:1px solid #ddd;border-radius:6px;padding:4px 18px 14px;margin:18px 0}\n"
    ".banner{font-size:20px;font-weight:700;padding:10px 14px;border-radius:5px;color:#fff;margin:12px 0 6px}\n"
    ".banner small{display:block;font-size:13px;font-weight:400}\n"
    ".pass{background:var(--ok)}.fail{background:var(--bad)}.intr{background:#8e44ad}.inc{background:#777}\n"
    "table{border-collapse:collapse;margin:6px 0;font-size:13px}\n"
    "th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}\n"
    "th{background:#f1f1f1;font-weight:600}\n"
    "td{word-break:break-word;max-width:640px}\n"
    ".kv th{width:190px}\n"
    ".mono,.kv td{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}\n"
    "tr.bad td{background:#fde8e8}tr.warn td{background:#fff6db}\n"
    ".na{color:#999}.note{color:var(--mut)}.warnbox{background:#fff6db;border:1px solid #e6c200;"
    "padding:6px 10px;border-radius:4px}\n"
    ".errbox{background:#fde8e8;border:1px solid var(--bad);padding:6px 10px;border-radius:4px}\n"
    "svg{background:#fff;max-width:100%;height:auto}svg text{font-size:11px;fill:#333}\n"
    ".legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:11px;height:11px;"
    "vertical-align:-1px;margin-right:4px;border:1px solid #0003}\n"
    "nav a{margin-right:10px}nav{overflow-x:auto}\n"
    "td.arm,th.arm{white-space:nowrap;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;"
    "font-size:12px}\n"
    "table.answer{font-size:15px;margin:8px 0 14px}table.answer th{width:70px}.big{font-size:20px;font-weight:700}\n"
    "@media print{body{background:#fff;font-size:11px}main{max-width:none;padding:0}nav{display:none}"
    "section.gate{border:none;padding:0;break-before:page}section.gate:first-of-type{break-before:auto}"
    "table,svg,.banner{break-inside:avoid}"
    "*{-webkit-print-color-adjust:exact;print-color-adjust:exact}}\n"
    "</style>\n";

/* The gate's status: class and words. */
typedef struct status_text {
    const char *cls;
    char word[64];
    bool pass;
} status_text;

static status_text gate_status(const gate *g) {
    status_text s = {"inc", "INCOMPLETE", false};
    if (g->interrupted) {
        const char *sig = getstr(&g->interrupted->v, "signal");
        s.cls = "intr";
        snprintf(s.word, sizeof s.word, "INTERRUPTED%s%.20s", sig ? " by " : "", sig ? sig : "");
        return s;
    }
    if (!g->verdict)
        return s;
    double ex = -1;
    getnum(&g->verdict->v, "exit", &ex);
    if (rj_true(rj_get(&g->verdict->v, "pass"))) {
        s.cls = "pass";
        snprintf(s.word, sizeof s.word, "PASS");
        s.pass = true;
    } else {
        s.cls = "fail";
        if (ex == 2)
            snprintf(s.word, sizeof s.word, "FAIL: usage error (exit 2)");
        else if (ex == 3)
            snprintf(s.word, sizeof s.word, "FAIL: error (exit 3)");
        else if (ex == 1)
            snprintf(s.word, sizeof s.word, "FAIL (exit 1)");
        else
            snprintf(s.word, sizeof s.word, "FAIL");
    }
    return s;
}

static uint64_t first_line(const doc *d, const gate *g) { return g->n ? d->recs[g->idx[0]].line : 0; }
static uint64_t last_line(const doc *d, const gate *g) { return g->n ? d->recs[g->idx[g->n - 1]].line : 0; }

static void banner(doc *d, const gate *g) {
    status_text s = gate_status(g);
    out(d, "<div class=\"banner %s\">%s", s.cls, s.word);
    const rec *end = g->interrupted ? g->interrupted : g->verdict;
    raw(d, "<small>");
    if (end) {
        val(d, rj_get(&end->v, "reason"), 2000);
        const char *mode = getstr(&end->v, "mode");
        if (mode) {
            raw(d, " \xc2\xb7 mode ");
            esc(d, mode);
        }
        if (g->interrupted) {
            raw(d, " \xc2\xb7 phase ");
            valp(d, &end->v, "phase");
            raw(d, " \xc2\xb7 exit ");
            valp(d, &end->v, "exit");
        }
    } else if (g->cut)
        raw(d, "no verdict: a new gate's protocol follows this gate's records (the run was stopped, or two "
               "writers' lines alternate)");
    else
        raw(d, "no verdict: the records end before it (the run is still going, was killed, or the file was cut)");
    raw(d, "</small></div>\n");
}

/* ---- the answer: speed in words and each arm's tok/s, first ------------------------------------ */

/* The summary's ratio b/a and its 95% interval (have_ci false when it has none). */
static bool ratio_of(const rj_val *sm, double *r, double *c0, double *c1, bool *have_ci) {
    const rj_val *ci = rj_get(sm, "ratio_ci95");
    *have_ci = rj_is(ci, RJ_ARR) && ci->len == 2 && rj_num(&ci->items[0], c0) && rj_num(&ci->items[1], c1);
    return getnum(sm, "ratio_b_over_a", r);
}

/* "b is 2.3% slower than a" and whether the interval says it is significant. */
static void speed_words(doc *d, double r, double c0, double c1, bool have_ci) {
    char b1[32];
    double pct = (r - 1) * 100;
    if (!(r > 0) || !isfinite(pct))
        raw(d, "b / a is not a positive ratio");
    else if (fabs(pct) < 0.05)
        raw(d, "b and a are as fast");
    else
        out(d, "b is %s%% %s than a", num_text(fabs(pct), b1, sizeof b1, "%.1f"), pct > 0 ? "faster" : "slower");
    if (!have_ci)
        raw(d, " (no interval: too few timing rows for one)");
    else if (c0 > 1 || c1 < 1)
        raw(d, ": <b>significant</b> (the 95% interval excludes 1)");
    else
        raw(d, ": <b>no significant difference</b> (the 95% interval holds 1)");
}

static void arm_speed(doc *d, const rj_val *sm, const rj_val *p, char arm) {
    char path[48], b1[32], b2[32];
    double med, lo, hi, n;
    out(d, "<tr><th>arm %c</th><td class=\"arm\">", arm);
    snprintf(path, sizeof path, "arms.%c.text", arm);
    valp(d, p, path);
    raw(d, "</td><td>");
    snprintf(path, sizeof path, "arms.%c.median_tok_s", arm);
    if (getnum(sm, path, &med)) {
        out(d, "<b>%s tok/s</b> <span class=\"note\">median", num_text(med, b1, sizeof b1, "%.2f"));
        snprintf(path, sizeof path, "arms.%c.eligible_rows", arm);
        if (getnum(sm, path, &n))
            out(d, " of %s row(s)", num_text(n, b1, sizeof b1, "%.0f"));
        char plo[48], phi[48];
        snprintf(plo, sizeof plo, "arms.%c.min_tok_s", arm);
        snprintf(phi, sizeof phi, "arms.%c.max_tok_s", arm);
        if (getnum(sm, plo, &lo) && getnum(sm, phi, &hi))
            out(d, ", range (min .. max) %s .. %s", num_text(lo, b1, sizeof b1, "%.2f"),
                num_text(hi, b2, sizeof b2, "%.2f"));
        raw(d, "</span>");
    } else
        raw(d, "<span class=\"na\">no eligible timing row</span>");
    raw(d, "</td></tr>\n");
}

/* Right under the verdict: the speed of b against a in words with its interval, and each arm's
 * tok/s; the protocol and the detail follow. */
static void answer(doc *d, const gate *g) {
    const rj_val *sm = g->summary ? &g->summary->v : NULL, *p = g->protocol ? &g->protocol->v : NULL;
    if (!p)
        return;
    raw(d, "<table class=\"answer\">\n<tr><th>speed</th><td colspan=\"2\">");
    double r, c0, c1;
    bool have_ci;
    char b1[32], b2[32], b3[32];
    if (sm && ratio_of(sm, &r, &c0, &c1, &have_ci)) {
        out(d, "<span class=\"big\">b / a = %s</span>", num_text(r, b1, sizeof b1, "%.4f"));
        if (have_ci)
            out(d, " <span class=\"big\">[%s, %s]</span> 95%% interval", num_text(c0, b2, sizeof b2, "%.4f"),
                num_text(c1, b3, sizeof b3, "%.4f"));
        raw(d, "<br>");
        speed_words(d, r, c0, c1, have_ci);
    } else {
        double rows = -1;
        raw(d, "<span class=\"na\">not timed: ");
        if (getnum(p, "rows", &rows) && rows == 0)
            raw(d, "no timing rows were asked for (--rows 0 or --profile)");
        else if (!sm)
            raw(d, "the run ended before its summary");
        else if (!rj_true(rj_get(sm, "timing_done")))
            raw(d, "nothing is timed after a failed correctness phase");
        else
            raw(d, "an arm has no eligible row");
        raw(d, "</span>");
    }
    raw(d, "</td></tr>\n");
    arm_speed(d, sm, p, 'a');
    arm_speed(d, sm, p, 'b');
    raw(d, "</table>\n");
}

/* ---- protocol --------------------------------------------------------------------------------- */

static void arms_table(doc *d, const rj_val *p) {
    const rj_val *a = rj_path(p, "arms.a"), *b = rj_path(p, "arms.b");
    if (!a && !b)
        return;
    raw(d,
        "<h3>Arms as resolved</h3>\n<table class=\"kv\"><tr><th></th><th>arm a (reference)</th><th>arm b</th></tr>\n");
    static const char *const rows[][2] = {{"as given", "text"},
                                          {"resolved", "resolved_text"},
                                          {"backend", "backend"},
                                          {"version", "backend_version"},
                                          {"window", "window"},
                                          {"backend plugin sha256", "provenance.backend.sha256"},
                                          {"backend plugin file", "provenance.backend.path"},
                                          {"placement plugin", "provenance.placement.name"},
                                          {"placement sha256", "provenance.placement.sha256"},
                                          {"tensor parallel", "tp"},
                                          {"weights (bytes)", "memory.weight_bytes"},
                                          {"cache (bytes)", "memory.cache_bytes"},
                                          {"scratch (bytes)", "memory.scratch_bytes"},
                                          {"device in use (bytes)", "memory.device_in_use"}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const rj_val *va = rj_path(a, rows[i][1]), *vb = rj_path(b, rows[i][1]);
        if (!va && !vb)
            continue;
        out(d, "<tr><th>%s</th><td>", rows[i][0]);
        val(d, va, 400);
        raw(d, "</td><td>");
        val(d, vb, 400);
        raw(d, "</td></tr>\n");
    }
    /* stages: layers, device, ranks */
    raw(d, "<tr><th>stages (layers @ device \xc3\x97 ranks)</th>");
    for (int k = 0; k < 2; k++) {
        const rj_val *st = rj_get(k ? b : a, "stages");
        raw(d, "<td>");
        if (!rj_is(st, RJ_ARR))
            raw(d, "<span class=\"na\">\xe2\x80\x94</span>");
        for (size_t i = 0; st && st->type == RJ_ARR && i < st->len && i < 256; i++) {
            const rj_val *s = &st->items[i];
            if (i)
                raw(d, ", ");
            valp(d, s, "layer_begin");
            raw(d, "\xe2\x80\x93");
            valp(d, s, "layer_end");
            raw(d, " @ ");
            valp(d, s, "device");
            raw(d, " \xc3\x97 ");
            valp(d, s, "ranks");
        }
        raw(d, "</td>");
    }
    raw(d, "</tr>\n</table>\n");
}

static void plugins_table(doc *d, const rj_val *p) {
    const rj_val *pl = rj_get(p, "plugins");
    if (!rj_is(pl, RJ_ARR))
        return;
    raw(d, "<h3>Plugins loaded</h3>\n<table><tr><th>name</th><th>kind</th><th>version</th><th>sha256</th>"
           "<th>file</th><th>from $MEMRA_PLUGIN_PATH</th></tr>\n");
    for (size_t i = 0; i < pl->len; i++) {
        const rj_val *x = &pl->items[i];
        raw(d, rj_true(rj_get(x, "shadows")) ? "<tr class=\"warn\"><td>" : "<tr><td>");
        valp(d, x, "name");
        raw(d, "</td><td>");
        valp(d, x, "kind");
        raw(d, "</td><td>");
        valp(d, x, "version");
        raw(d, "</td><td class=\"mono\">");
        valp(d, x, "sha256");
        raw(d, "</td><td class=\"mono\">");
        valp(d, x, "path");
        raw(d, "</td><td>");
        valp(d, x, "from_env");
        raw(d, rj_true(rj_get(x, "shadows")) ? " (shadows memra's own)" : "");
        raw(d, "</td></tr>\n");
    }
    raw(d, "</table>\n");
    const rj_val *w = rj_get(p, "plugin_warnings");
    for (size_t i = 0; rj_is(w, RJ_ARR) && i < w->len; i++) {
        raw(d, "<p class=\"warnbox\">plugin warning: ");
        val(d, &w->items[i], 1000);
        raw(d, "</p>\n");
    }
}

/* The sampler in words: greedy, or its temperature, top-k, top-p and seed. */
static void sampling_row(doc *d, const rj_val *sm) {
    raw(d, "<tr><th>sampling</th><td>");
    const char *mode = getstr(sm, "mode");
    if (streq(mode, "greedy"))
        raw(d, "greedy (the most likely token at each step)");
    else if (streq(mode, "sampled")) {
        double t, k, pp;
        char b1[32];
        raw(d, "sampled: temperature ");
        raw(d, getnum(sm, "temperature", &t) ? num_text(t, b1, sizeof b1, "%g") : "?");
        raw(d, ", top-k ");
        if (getnum(sm, "top_k", &k) && k == 0)
            raw(d, "all");
        else
            valp(d, sm, "top_k");
        raw(d, ", top-p ");
        if (getnum(sm, "top_p", &pp) && pp >= 1)
            raw(d, "1 (no cut)");
        else
            valp(d, sm, "top_p");
        raw(d, ", seed ");
        valp(d, sm, "seed");
    } else
        val(d, sm, 600);
    raw(d, "</td></tr>\n");
}

/* The prompt: its text's first line (and how much more there is) for a text prompt, else where
 * the ids came from. */
static void prompt_row(doc *d, const rj_val *pr) {
    const rj_val *text = rj_get(pr, "text");
    raw(d, "<tr><th>prompt</th><td>");
    if (rj_is(text, RJ_STR)) {
        const char *nl = memchr(text->s, '\n', text->len);
        size_t first = nl ? (size_t)(nl - text->s) : text->len, lines = 1;
        for (size_t i = 0; i < text->len; i++)
            lines += text->s[i] == '\n' && i + 1 < text->len;
        raw(d, "<q>");
        esc_n(d, text->s, first, 300);
        raw(d, "</q>");
        if (lines > 1)
            out(d, " <span class=\"note\">(the first of %zu lines)</span>", lines);
        if (rj_get(pr, "n_tokens")) {
            raw(d, " <span class=\"note\">");
            valp(d, pr, "n_tokens");
            raw(d, " tokens</span>");
        }
    } else
        valp(d, pr, "source");
    raw(d, "</td></tr>\n");
}

static void protocol_section(doc *d, const gate *g) {
    if (!g->protocol) {
        raw(d, "<p class=\"note\">No protocol record: the run stopped before its arms opened (a usage or setup "
               "error), or its first records are not in this file.</p>\n");
        return;
    }
    const rj_val *p = &g->protocol->v;
    raw(d, "<h3>Protocol</h3>\n<table class=\"kv\">\n");
    kv(d, "model", rj_path(p, "model.label"));
    kv(d, "model name", rj_path(p, "model.name"));
    kv(d, "model arch", rj_path(p, "model.arch"));
    kv(d, "model sha256", rj_path(p, "model.sha256"));
    out(d, "<tr><th>shape</th><td>");
    raw(d, "vocab ");
    valp(d, p, "model.n_vocab");
    raw(d, ", layers ");
    valp(d, p, "model.n_layer");
    raw(d, ", embedding ");
    valp(d, p, "model.n_embd");
    raw(d, "</td></tr>\n");
    kv(d, "exactness mode", rj_get(p, "compare"));
    if (rj_get(p, "nmse_tolerance"))
        kv(d, "nmse tolerance", rj_get(p, "nmse_tolerance"));
    kv(d, "differ by design", rj_get(p, "differ_by_design"));
    kv(d, "arms identical", rj_get(p, "arms_identical"));
    if (rj_true(rj_get(p, "auto_arms")))
        kv(d, "arms picked because", rj_get(p, "auto_reason"));
    out(d, "<tr><th>steps</th><td>");
    valp(d, p, "prime");
    raw(d, " prime + ");
    valp(d, p, "gen");
    raw(d, " generated; ");
    valp(d, p, "rows");
    raw(d, " timing rows, schedule ");
    valp(d, p, "schedule");
    raw(d, " (");
    valp(d, p, "blocks");
    raw(d, ")</td></tr>\n");
    sampling_row(d, rj_get(p, "sampling"));
    prompt_row(d, rj_get(p, "prompt"));
    kv(d, "prompt sha256", rj_path(p, "prompt.sha256"));
    kv(d, "refusal cells", rj_get(p, "cells"));
    kv(d, "memra version", rj_get(p, "memra_version"));
    if (getstr(p, "commit"))
        kv(d, "commit", rj_get(p, "commit"));
    else
        raw(d, "<tr><th>commit</th><td><span class=\"na\">not recorded (a memra-gate older than the commit in "
               "its protocol record; memra_version above, the plugin files' sha256 below)</span></td></tr>\n");
    raw(d, "<tr><th>machine</th><td>");
    for (int k = 0; k < 2; k++) {
        const rj_val *arm = rj_path(p, k ? "arms.b" : "arms.a");
        out(d, "%sarm %c: ", k ? "; " : "", k ? 'b' : 'a');
        valp(d, arm, "backend");
        raw(d, " ");
        valp(d, arm, "backend_version");
        const rj_val *dev = rj_get(arm, "resolved");
        if (rj_get(dev, "devices")) {
            raw(d, ", devices ");
            valp(d, dev, "devices");
        }
        if (rj_get(dev, "threads")) {
            raw(d, ", threads ");
            valp(d, dev, "threads");
        }
    }
    raw(d, " <span class=\"na\">(as the arms resolved; the host is not recorded)</span></td></tr>\n");
    kv(d, "timing scope", rj_get(p, "timing_scope"));
    kv(d, "shared upload", rj_path(p, "shared_upload.reason"));
    if (rj_true(rj_get(p, "profile")))
        kv(d, "profile", rj_get(p, "profile_order"));
    raw(d, "</table>\n");
    arms_table(d, p);
    plugins_table(d, p);
}

/* ---- summary ---------------------------------------------------------------------------------- */

static void summary_section(doc *d, const gate *g) {
    if (!g->summary)
        return;
    const rj_val *s = &g->summary->v;
    raw(d, "<h3>Summary</h3>\n<table class=\"kv\">\n");
    out(d, "<tr><th>steps compared</th><td>");
    valp(d, s, "steps_compared");
    raw(d, " of ");
    valp(d, s, "steps");
    raw(d, "; bad ");
    valp(d, s, "bad_steps");
    raw(d, "; non-finite ");
    valp(d, s, "nonfinite_steps");
    raw(d, "; digests compared at ");
    valp(d, s, "digest_steps");
    raw(d, " steps</td></tr>\n");
    kv(d, "first mismatch", rj_get(s, "first_mismatch"));
    kv(d, "max NMSE", rj_get(s, "max_nmse"));
    out(d, "<tr><th>token agreement</th><td>");
    valp(d, s, "tokens_agree");
    raw(d, " / ");
    valp(d, s, "tokens_compared");
    raw(d, "</td></tr>\n<tr><th>timing rows</th><td>");
    valp(d, s, "rows");
    raw(d, " run; ");
    valp(d, s, "row_failures");
    raw(d, " failed; ");
    valp(d, s, "rows_ineligible");
    raw(d, " ineligible; done ");
    valp(d, s, "timing_done");
    raw(d, "</td></tr>\n");
    if (rj_get(s, "carry_check"))
        kv(d, "carry check", rj_get(s, "carry_check"));
    if (rj_get(s, "profile"))
        kv(d, "profile", rj_get(s, "profile"));
    kv(d, "refusal cells", rj_get(s, "refusal_cells"));
    kv(d, "epoch census", rj_get(s, "epoch_census"));
    if (rj_get(s, "dump_graphs"))
        kv(d, "dump graphs", rj_get(s, "dump_graphs"));
    raw(d, "</table>\n");
}

/* ---- charts ----------------------------------------------------------------------------------- */

/* A tidy step for about n ticks over span. */
static double tick_step(double span, int n) {
    if (!(span > 0))
        return 1;
    double raw_step = span / n, mag = pow(10, floor(log10(raw_step))), r = raw_step / mag;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

typedef struct frame {
    double x0, y0, w, h; /* the plot area in SVG units */
    double xlo, xhi, ylo, yhi;
    bool ylog; /* y values are log10 already; ticks are labelled 1e{k} */
} frame;

/* What a chart draws: a finite value within +-1e300, so that the axis around it (its span, padding
 * and ticks) stays finite. Anything else is "not drawn" (the tables show it as written). */
#define AXIS_MAX 1e300
static bool drawable(double x) { return isfinite(x) && fabs(x) <= AXIS_MAX; }

/* A coordinate in the SVG: finite always (the charts draw only drawable values within finite
 * frames; this keeps a slip from ever writing "nan" or "inf" into the page). */
static double coord(double c) { return isfinite(c) ? fmax(-1e6, fmin(1e6, c)) : 0; }

static double fx(const frame *f, double x) {
    return coord(f->x0 + (f->xhi > f->xlo ? (x - f->xlo) / (f->xhi - f->xlo) : 0.5) * f->w);
}
static double fy(const frame *f, double y) {
    return coord(f->y0 + f->h - (f->yhi > f->ylo ? (y - f->ylo) / (f->yhi - f->ylo) : 0.5) * f->h);
}

static void svg_open(doc *d, double w, double h, const char *label) {
    out(d, "<svg width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"", w, h, w, h);
    esc(d, label);
    raw(d, "\">\n");
}

/* Axes, grid, y ticks and an axis title; x ticks at integers (every k-th). */
static void axes(doc *d, const frame *f, const char *ytitle, const char *xtitle) {
    out(d, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#bbb\"/>\n", f->x0, f->y0,
        f->w, f->h);
    /* tick labels: + 0.0 turns -0 into 0 (ceil(-0.5) is -0), so no label reads "-0" */
    double st = f->ylog ? 1 : tick_step(f->yhi - f->ylo, 5);
    int ticks = 0;
    for (double t = ceil(f->ylo / st) * st; t <= f->yhi + st * 1e-9 && ticks < 64; t += st, ticks++) {
        double y = fy(f, t);
        out(d, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", f->x0, y, f->x0 + f->w, y);
        if (f->ylog)
            out(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">1e%.0f</text>\n", f->x0 - 4, y + 4, t + 0.0);
        else
            out(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", f->x0 - 4, y + 4,
                fabs(t) < st * 1e-6 ? 0.0 : t);
    }
    double xs = tick_step(f->xhi - f->xlo, 10);
    if (xs < 1)
        xs = 1;
    ticks = 0;
    for (double t = ceil(f->xlo / xs) * xs; t <= f->xhi + 1e-9 && ticks < 64; t += xs, ticks++)
        out(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", fx(f, t), f->y0 + f->h + 14,
            t + 0.0);
    out(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", f->x0 + f->w / 2, f->y0 + f->h + 30);
    esc(d, xtitle);
    out(d, "</text>\n<text x=\"12\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 12 %.1f)\">",
        f->y0 + f->h / 2, f->y0 + f->h / 2);
    esc(d, ytitle);
    raw(d, "</text>\n");
}

/* ---- timing ----------------------------------------------------------------------------------- */

static void timing_section(doc *d, const gate *g) {
    size_t n = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        double t;
        if (strcmp(r->kind, "measure") != 0)
            continue;
        n++;
        if (getnum(&r->v, "tok_s", &t) && drawable(t)) {
            lo = fmin(lo, t);
            hi = fmax(hi, t);
        }
    }
    raw(d, "<h3>Timing rows</h3>\n");
    if (n == 0) {
        raw(d, "<p class=\"note\">No timing rows in these records");
        if (g->protocol) {
            double rows = -1;
            if (getnum(&g->protocol->v, "rows", &rows) && rows == 0)
                raw(d, " (--rows 0 or --profile: none were asked for)");
            else
                raw(d, " (nothing is timed after a failed correctness phase, or the run stopped before)");
        }
        raw(d, ".</p>\n");
        return;
    }
    const rj_val *s = g->summary ? &g->summary->v : NULL;
    double med[2] = {NAN, NAN};
    getnum(s, "arms.a.median_tok_s", &med[0]);
    getnum(s, "arms.b.median_tok_s", &med[1]);
    for (int k = 0; k < 2; k++)
        if (drawable(med[k]))
            lo = fmin(lo, med[k]), hi = fmax(hi, med[k]);
    if (!(lo <= hi))
        lo = 0, hi = 1;
    /* a clamped axis: the span finite (values within +-1e300), never empty (all rows equal, or 0) */
    double pad = (hi - lo) * 0.15 + fabs(hi) * 0.01;
    if (!(pad > 0))
        pad = hi != 0 ? fabs(hi) * 0.1 : 1;
    frame f = {60, 14, 640, 200, -0.5, (double)n - 0.5, fmax(0, lo - pad), hi + pad, false};
    svg_open(d, 720, 260, "tok/s of each timing row in schedule order");
    axes(d, &f, "tok/s", "timing row (schedule order)");
    char nb[32];
    for (int k = 0; k < 2; k++)
        if (drawable(med[k]))
            out(d,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"5 4\">"
                "<title>median of arm %c: %s tok/s</title></line>\n",
                f.x0, fy(&f, med[k]), f.x0 + f.w, fy(&f, med[k]), k ? COL_B : COL_A, k ? 'b' : 'a',
                num_text(med[k], nb, sizeof nb, "%.2f"));
    size_t not_drawn = 0;
    size_t row = 0;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "measure") != 0)
            continue;
        double t;
        const char *arm = getstr(&r->v, "arm");
        bool b = streq(arm, "b"), ok = rj_true(rj_get(&r->v, "verified")) && rj_true(rj_get(&r->v, "eligible"));
        double x = fx(&f, (double)row);
        if (!getnum(&r->v, "tok_s", &t) || !drawable(t)) {
            out(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#c62828\">?<title>row %zu: no tok/s "
                "that the chart can draw: not drawn</title></text>\n", x, f.y0 + 12, row);
            not_drawn++;
            row++;
            continue;
        }
        double y = fy(&f, t);
        const char *col = b ? COL_B : COL_A;
        if (b)
            out(d,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"9\" height=\"9\" fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\">",
                x - 4.5, y - 4.5, ok ? col : "#fff", col);
        else
            out(d, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\">", x, y,
                ok ? col : "#fff", col);
        out(d, "<title>row %zu, arm %s: %s tok/s", row, b ? "b" : "a", num_text(t, nb, sizeof nb, "%.2f"));
        if (!ok) {
            raw(d, " \xe2\x80\x94 not counted: ");
            val(d, rj_get(&r->v, "reason"), 300);
        }
        raw(d, b ? "</title></rect>\n" : "</title></circle>\n");
        if (!ok)
            out(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#c62828\">\xc3\x97</text>\n", x, y - 8);
        row++;
    }
    raw(d, "</svg>\n<p class=\"legend\"><span><span class=\"sw\" style=\"background:var(--a);border-radius:6px\">"
           "</span>arm a</span><span><span class=\"sw\" style=\"background:var(--b)\"></span>arm b</span>"
           "<span>hollow and \xc3\x97: not counted (failed or ineligible)</span><span>dashed: median of the "
           "eligible rows</span></p>\n");
    if (not_drawn)
        out(d, "<p class=\"note\">%zu row(s) not drawn (?): no tok/s, or one beyond what the chart can show; the table "
            "below has them.</p>\n", not_drawn);
    /* ratio and its interval */
    double ratio, c0, c1;
    const rj_val *ci = rj_get(s, "ratio_ci95");
    if (getnum(s, "ratio_b_over_a", &ratio)) {
        char b1[32], b2[32], b3[32];
        out(d, "<p><b>b / a = %s</b>", num_text(ratio, b1, sizeof b1, "%.4f"));
        bool have_ci = rj_is(ci, RJ_ARR) && ci->len == 2 && rj_num(&ci->items[0], &c0) && rj_num(&ci->items[1], &c1);
        if (have_ci) {
            out(d, ", 95%% bootstrap interval [%s, %s]", num_text(c0, b2, sizeof b2, "%.4f"),
                num_text(c1, b3, sizeof b3, "%.4f"));
            raw(d, " (");
            valp(d, s, "bootstrap.resamples");
            raw(d, " resamples, seed ");
            valp(d, s, "bootstrap.seed");
            raw(d, ")");
        }
        out(d, "; median a %s tok/s, median b %s tok/s</p>\n", num_text(med[0], b2, sizeof b2, "%.2f"),
            num_text(med[1], b3, sizeof b3, "%.2f"));
        if (have_ci && !(drawable(ratio) && drawable(c0) && drawable(c1)))
            raw(d, "<p class=\"note\">The interval's chart is not drawn: its values are beyond what it can show.</p>\n");
        else if (have_ci) {
            double l = fmin(fmin(c0, ratio), 1.0), h = fmax(fmax(c1, ratio), 1.0), p2 = (h - l) * 0.2 + 1e-3;
            frame r = {60, 8, 640, 24, l - p2, h + p2, 0, 1, false};
            svg_open(d, 720, 52, "the ratio b/a with its 95% bootstrap interval; the line at 1 is equal speed");
            out(d,
                "<line x1=\"%.1f\" y1=\"4\" x2=\"%.1f\" y2=\"36\" stroke=\"#999\" stroke-dasharray=\"3 3\"/>"
                "<text x=\"%.1f\" y=\"48\" text-anchor=\"middle\">1 (equal)</text>\n",
                fx(&r, 1), fx(&r, 1), fx(&r, 1));
            out(d,
                "<rect x=\"%.1f\" y=\"14\" width=\"%.1f\" height=\"12\" fill=\"#e0700b\" fill-opacity=\"0.3\" "
                "stroke=\"#e0700b\"/>\n",
                fx(&r, c0), fmax(1, fx(&r, c1) - fx(&r, c0)));
            out(d, "<line x1=\"%.1f\" y1=\"10\" x2=\"%.1f\" y2=\"30\" stroke=\"#000\" stroke-width=\"2\"/>\n",
                fx(&r, ratio), fx(&r, ratio));
            out(d, "<text x=\"%.1f\" y=\"48\" text-anchor=\"middle\">%s</text>\n", fx(&r, ratio), b1);
            raw(d, "</svg>\n");
        }
    } else if (s)
        raw(d, "<p class=\"note\">No ratio: an arm has no eligible row.</p>\n");
    /* the rows as a table */
    raw(d, "<table><tr><th>row</th><th>arm</th><th>tok/s</th><th>wall (ms)</th><th>verified</th><th>eligible</th>"
           "<th>why not</th></tr>\n");
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "measure") != 0)
            continue;
        bool ver = rj_true(rj_get(&r->v, "verified")), el = rj_true(rj_get(&r->v, "eligible"));
        raw(d, !ver ? "<tr class=\"bad\"><td>" : !el ? "<tr class=\"warn\"><td>" : "<tr><td>");
        valp(d, &r->v, "row");
        raw(d, "</td><td>");
        valp(d, &r->v, "arm");
        raw(d, "</td><td>");
        double t, w;
        char b1[32];
        raw(d, getnum(&r->v, "tok_s", &t) ? num_text(t, b1, sizeof b1, "%.2f") : "\xe2\x80\x94");
        raw(d, "</td><td>");
        raw(d, getnum(&r->v, "wall_ns", &w) ? num_text(w / 1e6, b1, sizeof b1, "%.3f") : "\xe2\x80\x94");
        out(d, "</td><td>%s</td><td>%s</td><td>", ver ? "yes" : "NO", el ? "yes" : "no");
        val(d, rj_get(&r->v, "reason"), 600);
        raw(d, "</td></tr>\n");
    }
    raw(d, "</table>\n");
}

/* ---- step map --------------------------------------------------------------------------------- */

enum { C_OK, C_TOL, C_HIDDEN, C_CACHE, C_LOGITS, C_TOKEN, C_UNKNOWN, C_N };
static const char *const cell_colour[C_N] = {"#2a9d3a", "#9fd89a", "#e377c2", "#8c564b",
                                             "#c62828", "#5b2a86", "#bbbbbb"};
static const char *const cell_name[C_N] = {"identical",     "within tolerance", "hidden differs", "cache differs",
                                           "logits differ", "token differs",    "not recorded"};

static bool str_differs(const rj_val *r, const char *a, const char *b) {
    const char *x = getstr(r, a), *y = getstr(r, b);
    return x && y && strcmp(x, y) != 0;
}

static int step_class(const rj_val *s, char *what, size_t size) {
    int64_t ta, tb, dl = 0;
    bool ok = rj_true(rj_get(s, "ok"));
    bool tok = rj_int(rj_get(s, "token"), &ta) && rj_int(rj_get(s, "b_token"), &tb) && ta != tb;
    bool logits =
        (rj_int(rj_get(s, "differing_logits"), &dl) && dl > 0) || str_differs(s, "logits_sha256", "b_logits_sha256");
    bool cmp = rj_true(rj_get(s, "digests_compared"));
    bool cache = cmp && str_differs(s, "cache_sha256", "b_cache_sha256");
    bool hidden = cmp && str_differs(s, "hidden_sha256", "b_hidden_sha256");
    snprintf(what, size, "%s%s%s%s%s", tok ? " token" : "", logits ? " logits" : "", cache ? " cache" : "",
             hidden ? " hidden" : "", cmp ? "" : " (digests not compared)");
    if (!rj_get(s, "ok"))
        return C_UNKNOWN;
    if (tok && !ok)
        return C_TOKEN;
    if (ok)
        return logits || tok ? C_TOL : C_OK;
    if (logits)
        return C_LOGITS;
    if (cache)
        return C_CACHE;
    if (hidden)
        return C_HIDDEN;
    return C_LOGITS; /* not ok for a reason the step record does not show (NMSE, a non-finite logit) */
}

static const rec *first_replay_mismatch(const doc *d, const gate *g) {
    const rec *any = NULL;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "mismatch") != 0 || !streq(getstr(&r->v, "where"), "replay"))
            continue;
        if (rj_true(rj_get(&r->v, "first")))
            return r;
        if (!any)
            any = r;
    }
    return any;
}

static void value_cell(doc *d, const rj_val *x) {
    raw(d, "<td class=\"mono\">");
    if (!x || x->type == RJ_NULL)
        raw(d, "<span class=\"na\">\xe2\x80\x94</span>");
    else {
        valp(d, x, "value");
        raw(d, " <span class=\"note\">bits</span> ");
        valp(d, x, "bits");
        if (rj_get(x, "class")) {
            raw(d, " ");
            valp(d, x, "class");
        }
    }
    raw(d, "</td>");
}

static void first_mismatch_table(doc *d, const rec *m) {
    const rj_val *v = &m->v;
    out(d, "<h3>First mismatch (line %" PRIu64 ")</h3>\n<table class=\"kv\">\n", m->line);
    out(d, "<tr><th>step</th><td>");
    valp(d, v, "step");
    raw(d, " (");
    valp(d, v, "phase");
    raw(d, " ");
    valp(d, v, "phase_step");
    raw(d, "), input token ");
    valp(d, v, "input");
    raw(d, "</td></tr>\n");
    kv(d, "what differs", rj_get(v, "what"));
    kv(d, "reason", rj_get(v, "reason"));
    kv(d, "first differing logit (index)", rj_get(v, "index"));
    out(d, "<tr><th>value in a / in b</th>");
    value_cell(d, rj_get(v, "ref"));
    raw(d, "</tr>\n<tr><th></th>");
    value_cell(d, rj_get(v, "got"));
    raw(d, "</tr>\n");
    kv(d, "differing logits", rj_get(v, "differing_logits"));
    out(d, "<tr><th>max ulp</th><td>");
    valp(d, v, "max_ulp");
    raw(d, " at index ");
    valp(d, v, "max_ulp_index");
    raw(d, "</td></tr>\n");
    kv(d, "NMSE", rj_get(v, "nmse"));
    out(d, "<tr><th>tokens a / b</th><td>");
    valp(d, v, "token_ref");
    raw(d, " / ");
    valp(d, v, "token_got");
    raw(d, "; argmax ");
    valp(d, v, "argmax_ref");
    raw(d, " / ");
    valp(d, v, "argmax_got");
    raw(d, "</td></tr>\n");
    out(d, "<tr><th>non-finite a / b</th><td>");
    valp(d, v, "nonfinite_ref");
    raw(d, " / ");
    valp(d, v, "nonfinite_got");
    raw(d, "</td></tr>\n");
    if (str_differs(v, "cache_ref", "cache_got")) {
        kv(d, "cache a", rj_get(v, "cache_ref"));
        kv(d, "cache b", rj_get(v, "cache_got"));
    }
    if (str_differs(v, "hidden_ref", "hidden_got")) {
        kv(d, "hidden a", rj_get(v, "hidden_ref"));
        kv(d, "hidden b", rj_get(v, "hidden_got"));
    }
    raw(d, "</table>\n");
}

static void nmse_chart(doc *d, const gate *g, double tol) {
    double lo = INFINITY, hi = -INFINITY, x;
    size_t n = 0;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "step") != 0)
            continue;
        n++;
        if (getnum(&r->v, "nmse", &x) && x > 0)
            lo = fmin(lo, log10(x)), hi = fmax(hi, log10(x));
    }
    if (tol > 0)
        lo = fmin(lo, log10(tol)), hi = fmax(hi, log10(tol));
    if (!(lo <= hi))
        lo = -12, hi = 0;
    lo = floor(lo) - 1;
    hi = ceil(hi) + 1;
    frame f = {60, 14, 640, 200, -0.5, (double)(n ? n : 1) - 0.5, lo, hi, true};
    raw(d, "<h3>Per-step NMSE against the tolerance</h3>\n");
    svg_open(d, 720, 260, "per-step NMSE of b's logits against a's, log scale, with the tolerance");
    axes(d, &f, "NMSE (log scale)", "step");
    if (tol > 0)
        out(d,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c62828\" stroke-dasharray=\"6 4\">"
            "<title>tolerance %g</title></line>\n",
            f.x0, fy(&f, log10(tol)), f.x0 + f.w, fy(&f, log10(tol)), tol);
    raw(d, "<polyline fill=\"none\" stroke=\"" COL_A "\" stroke-width=\"1.5\" points=\"");
    size_t k = 0;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "step") != 0)
            continue;
        double y = hi; /* null: infinite or not finite */
        if (getnum(&r->v, "nmse", &x))
            y = x > 0 ? log10(x) : lo;
        out(d, "%s%.1f,%.1f", k ? " " : "", fx(&f, (double)k), fy(&f, y));
        k++;
    }
    raw(d, "\"/>\n");
    k = 0;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "step") != 0)
            continue;
        bool have = getnum(&r->v, "nmse", &x);
        double y = have ? (x > 0 ? log10(x) : lo) : hi;
        bool over = !have || (tol >= 0 && x > tol);
        out(d, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"><title>step %zu: NMSE ", fx(&f, (double)k),
            fy(&f, y), over ? "3.5" : "2", over ? "#c62828" : COL_A, k);
        raw(d, have ? "" : "non-finite");
        if (have)
            out(d, "%g%s", x, x == 0 ? " (drawn at the bottom)" : "");
        raw(d, "</title></circle>\n");
        k++;
    }
    raw(d, "</svg>\n<p class=\"legend\"><span>blue: per-step NMSE (0 drawn at the bottom, non-finite at the "
           "top)</span><span style=\"color:#c62828\">dashed red: the tolerance; red points are over it</span></p>\n");
}

static void step_map(doc *d, const gate *g) {
    size_t n = 0, bad = 0, prime = 0;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "step") != 0)
            continue;
        n++;
        if (!rj_true(rj_get(&r->v, "ok")))
            bad++;
        if (streq(getstr(&r->v, "phase"), "prime"))
            prime++;
    }
    raw(d, "<h3>Step map</h3>\n");
    const rec *m = first_replay_mismatch(d, g);
    if (n == 0) {
        raw(d, "<p class=\"note\">No step records (the run stopped before the replay).</p>\n");
        if (m)
            first_mismatch_table(d, m);
        return;
    }
    int64_t mstep = -1;
    if (m)
        rj_int(rj_get(&m->v, "step"), &mstep);
    out(d, "<p>%zu steps (%zu prime, %zu generated), %zu differ", n, prime, n - prime, bad);
    if (m && mstep >= 0)
        out(d, "; first mismatch at step %" PRId64, mstep);
    raw(d, ". One cell a step, in step order, 64 a line; the thick line marks the first generated step.</p>\n");
    const size_t per = 64, cs = 11, gap = 2, rows = (n + per - 1) / per;
    const double left = 44, w = left + (double)per * (cs + gap) + 4, h = 6 + (double)rows * (cs + gap) + 4;
    svg_open(d, w, h, "step map: one cell per step, coloured by what matched");
    size_t k = 0;
    int used[C_N] = {0};
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "step") != 0)
            continue;
        char what[128];
        int c = step_class(&r->v, what, sizeof what);
        used[c] = 1;
        double x = left + (double)(k % per) * (cs + gap), y = 6 + (double)(k / per) * (cs + gap);
        if (k % per == 0)
            out(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%zu</text>\n", left - 4, y + cs - 1, k);
        int64_t sn = -1;
        rj_int(rj_get(&r->v, "step"), &sn);
        bool first = m && sn == mstep && sn >= 0;
        out(d, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%zu\" height=\"%zu\" fill=\"%s\"%s><title>step ", x, y, cs, cs,
            cell_colour[c], first ? " stroke=\"#000\" stroke-width=\"2\"" : "");
        valp(d, &r->v, "step");
        raw(d, " (");
        valp(d, &r->v, "phase");
        raw(d, " ");
        valp(d, &r->v, "phase_step");
        out(d, "): %s;", cell_name[c]);
        esc(d, what);
        raw(d, "; tokens ");
        valp(d, &r->v, "token");
        raw(d, "/");
        valp(d, &r->v, "b_token");
        raw(d, ", differing logits ");
        valp(d, &r->v, "differing_logits");
        raw(d, ", max ulp ");
        valp(d, &r->v, "max_ulp");
        raw(d, ", nmse ");
        valp(d, &r->v, "nmse");
        raw(d, first ? " \xe2\x80\x94 the first mismatch</title></rect>\n" : "</title></rect>\n");
        if (k == prime && prime > 0 && prime < n)
            out(d, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-width=\"2\"/>\n",
                x - 1, y - 1, x - 1, y + cs + 1);
        k++;
    }
    raw(d, "</svg>\n<p class=\"legend\">");
    for (int c = 0; c < C_N; c++)
        if (used[c] || c == C_OK)
            out(d, "<span><span class=\"sw\" style=\"background:%s\"></span>%s</span>", cell_colour[c], cell_name[c]);
    raw(d, "<span>black outline: the first mismatch</span></p>\n");
    if (m)
        first_mismatch_table(d, m);
    double tol = -1;
    const char *cmp = g->protocol ? getstr(&g->protocol->v, "compare") : NULL;
    if (g->protocol && (getnum(&g->protocol->v, "nmse_tolerance", &tol) || (cmp && strncmp(cmp, "nmse", 4) == 0)))
        nmse_chart(d, g, tol);
}

/* ---- census, refusals, other records ---------------------------------------------------------- */

static bool int_arrays_equal(const rj_val *a, const rj_val *b) {
    if (!rj_is(a, RJ_ARR) || !rj_is(b, RJ_ARR) || a->len != b->len)
        return false;
    for (size_t i = 0; i < a->len; i++)
        if (a->items[i].type != RJ_NUM || b->items[i].type != RJ_NUM || strcmp(a->items[i].s, b->items[i].s) != 0)
            return false;
    return true;
}

static void census_section(doc *d, const gate *g) {
    bool any = false;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "census") != 0)
            continue;
        if (!any)
            raw(d, "<h3>Census</h3>\n");
        any = true;
        const rj_val *v = &r->v;
        raw(d, "<table class=\"kv\"><tr><th>arm, scope</th><td>");
        valp(d, v, "arm");
        raw(d, ", ");
        valp(d, v, "scope");
        out(d, " <span class=\"note\">(line %" PRIu64 ")</span></td></tr>\n", r->line);
        out(d, "<tr><th>steps, captures, replays</th><td>");
        valp(d, v, "steps");
        raw(d, ", ");
        valp(d, v, "captures");
        raw(d, ", ");
        valp(d, v, "replays");
        raw(d, "</td></tr>\n");
        if (rj_get(v, "error"))
            kv(d, "error", rj_get(v, "error"));
        const rj_val *rows = rj_get(v, "rows");
        for (size_t k = 0; rj_is(rows, RJ_ARR) && k < rows->len; k++) {
            out(d, "<tr><th>");
            valp(d, &rows->items[k], "kind");
            raw(d, "</th><td>");
            valp(d, &rows->items[k], "count");
            raw(d, "</td></tr>\n");
        }
        if (rj_get(v, "dump_dir")) {
            kv(d, "dump dir", rj_get(v, "dump_dir"));
            kv(d, "dumped", rj_get(v, "dumped_count"));
            if (rj_get(v, "dump_error"))
                kv(d, "dump error", rj_get(v, "dump_error"));
        }
        raw(d, "</table>\n");
        const rj_val *e = rj_get(v, "epochs");
        if (!e)
            continue;
        raw(d, "<p>Epoch census: collective ");
        valp(d, e, "collective");
        raw(d, ", ");
        valp(d, e, "steps");
        raw(d, " steps, ");
        valp(d, e, "checks");
        raw(d, " checks, ");
        valp(d, e, "per_step");
        raw(d, " per block and step, ");
        valp(d, e, "failures");
        raw(d, " failures");
        if (rj_str(rj_get(e, "failure"))) {
            raw(d, ": <b>");
            valp(d, e, "failure");
            raw(d, "</b>");
        }
        raw(d, ".</p>\n<table><tr><th>stage</th><th>rank</th><th>epochs per block at the end</th>"
               "<th>expected</th></tr>\n");
        const rj_val *ranks = rj_get(e, "ranks");
        for (size_t k = 0; rj_is(ranks, RJ_ARR) && k < ranks->len; k++) {
            const rj_val *x = &ranks->items[k];
            bool same = int_arrays_equal(rj_get(x, "epochs"), rj_get(x, "expected"));
            raw(d, same ? "<tr><td>" : "<tr class=\"bad\"><td>");
            valp(d, x, "stage");
            raw(d, "</td><td>");
            valp(d, x, "rank");
            raw(d, "</td><td class=\"mono\">");
            valp(d, x, "epochs");
            raw(d, "</td><td class=\"mono\">");
            raw(d, same ? "the same" : "");
            if (!same)
                valp(d, x, "expected");
            raw(d, "</td></tr>\n");
        }
        raw(d, "</table>\n");
    }
}

static void refusal_section(doc *d, const gate *g) {
    bool any = false;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "refusal") != 0)
            continue;
        if (!any)
            raw(d, "<h3>Refusal cells</h3>\n<table><tr><th>arm</th><th>cell</th><th>stage</th><th>rank</th>"
                   "<th>layer</th><th>block</th><th>position</th><th>observed</th><th>names the cell</th>"
                   "<th>digests unchanged</th><th>quarantined</th><th>pass</th><th>why not</th></tr>\n");
        any = true;
        const rj_val *v = &r->v;
        bool pass = rj_true(rj_get(v, "pass"));
        raw(d, pass ? "<tr><td>" : "<tr class=\"bad\"><td>");
        static const char *const cols[] = {"arm",
                                           "cell.index",
                                           "cell.stage",
                                           "cell.rank",
                                           "cell.layer",
                                           "cell.which",
                                           "cell.position",
                                           "observed.status",
                                           "observed.names_cell",
                                           "digests_unchanged",
                                           "quarantine_observed",
                                           "pass",
                                           "reason"};
        for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
            if (c)
                raw(d, "</td><td>");
            valp(d, v, cols[c]);
        }
        raw(d, "</td></tr>\n");
    }
    if (any)
        raw(d, "</table>\n");
}

/* profile and carry_check records, and every mismatch, as tables of their main fields. */
static void table_of(doc *d, const gate *g, const char *kind, const char *title, const char *const *cols, size_t n_cols,
                     const char *ok_field) {
    bool any = false;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, kind) != 0)
            continue;
        if (!any) {
            out(d, "<h3>%s</h3>\n<table><tr><th>line</th>", title);
            for (size_t c = 0; c < n_cols; c++) {
                raw(d, "<th>");
                esc(d, cols[c]);
                raw(d, "</th>");
            }
            raw(d, "</tr>\n");
        }
        any = true;
        bool ok = !ok_field || rj_true(rj_get(&r->v, ok_field));
        out(d, "<tr%s><td>%" PRIu64 "</td>", ok ? "" : " class=\"bad\"", r->line);
        for (size_t c = 0; c < n_cols; c++) {
            raw(d, "<td>");
            valp(d, &r->v, cols[c]);
            raw(d, "</td>");
        }
        raw(d, "</tr>\n");
    }
    if (any)
        raw(d, "</table>\n");
}

static void unknown_list(doc *d, const size_t *idx, size_t n, bool in_gate) {
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        const rec *r = &d->recs[idx[i]];
        if (in_gate && known_gate_kind(r->kind))
            continue;
        if (!any)
            out(d,
                "<h3>Records of an unknown kind%s</h3>\n<table><tr><th>line</th><th>record</th><th>as written</th>"
                "</tr>\n",
                in_gate ? "" : " outside any gate");
        any = true;
        out(d, "<tr><td>%" PRIu64 "</td><td>", r->line);
        esc(d, r->kind);
        raw(d, "</td><td class=\"mono\">");
        val_json(d, &r->v, 3000);
        raw(d, "</td></tr>\n");
    }
    if (any)
        raw(d, "</table>\n");
}

static void gate_title(doc *d, size_t gi, const gate *g) {
    const rj_val *p = g->protocol ? &g->protocol->v : NULL;
    out(d, "<h2 id=\"gate-%zu\">Gate %zu: ", gi + 1, gi + 1);
    if (p) {
        valp(d, p, "arms.a.text");
        raw(d, " against ");
        valp(d, p, "arms.b.text");
    } else
        raw(d, "no protocol");
    out(d, " <span class=\"note\">(lines %" PRIu64 "\xe2\x80\x93%" PRIu64 ")</span></h2>\n", first_line(d, g),
        last_line(d, g));
}

static void gate_section(doc *d, size_t gi, const gate *g) {
    out(d, "<section class=\"gate\">\n");
    gate_title(d, gi, g);
    banner(d, g);
    answer(d, g);
    protocol_section(d, g);
    summary_section(d, g);
    timing_section(d, g);
    step_map(d, g);
    census_section(d, g);
    refusal_section(d, g);
    static const char *const mcols[] = {"where", "arm", "row", "step", "phase", "what", "reason"};
    table_of(d, g, "mismatch", "Mismatches", mcols, sizeof mcols / sizeof mcols[0], NULL);
    static const char *const pcols[] = {
        "arm",      "arm_text", "steps", "start_position", "end_position", "tokens_identical", "digests_identical",
        "verified", "warmup.ok"};
    table_of(d, g, "profile", "Profile windows", pcols, sizeof pcols / sizeof pcols[0], "verified");
    static const char *const ccols[] = {"arm", "arm_text", "start_position", "generated_tokens", "verified", "reason"};
    table_of(d, g, "carry_check", "Carry check", ccols, sizeof ccols / sizeof ccols[0], "verified");
    if (g->interrupted) {
        raw(d, "<h3>Interrupted</h3>\n<table class=\"kv\">\n");
        kv(d, "signal", rj_get(&g->interrupted->v, "signal"));
        kv(d, "phase", rj_get(&g->interrupted->v, "phase"));
        kv(d, "steps compared", rj_get(&g->interrupted->v, "steps_compared"));
        kv(d, "rows", rj_get(&g->interrupted->v, "rows"));
        kv(d, "records complete", rj_get(&g->interrupted->v, "records_complete"));
        raw(d, "</table>\n");
    }
    unknown_list(d, g->idx, g->n, true);
    raw(d, "</section>\n");
}

/* ---- bench ------------------------------------------------------------------------------------ */

static void bench_section(doc *d) {
    if (!d->n_bench)
        return;
    raw(d, "<section class=\"gate\">\n<h2 id=\"bench\">Bench records</h2>\n");
    raw(d, "<p>Each record's repetitions (dots) and mean (bar) in tok/s, against the tok/s the backend's measured "
           "ceiling allows: the floor time of a token is its bytes read at the ceiling (red dash; none where the "
           "backend measured no ceiling).</p>\n");
    double hi = 0, x;
    for (size_t i = 0; i < d->n_bench; i++) {
        const rj_val *v = &d->recs[d->bench[i]].v;
        const rj_val *t = rj_get(v, "tok_s");
        for (size_t k = 0; rj_is(t, RJ_ARR) && k < t->len; k++)
            if (rj_num(&t->items[k], &x) && drawable(x))
                hi = fmax(hi, x);
        double c, bpt, mean;
        if (getnum(v, "tok_s_mean", &mean) && drawable(mean))
            hi = fmax(hi, mean);
        if (getnum(v, "ceiling_gb_s", &c) && getnum(v, "bytes_per_token", &bpt) && bpt > 0 && drawable(c * 1e9 / bpt))
            hi = fmax(hi, c * 1e9 / bpt);
    }
    if (!(hi > 0))
        hi = 1; /* nothing above 0: an axis from 0 to 1 */
    size_t not_drawn = 0;
    char nb[32], nb2[32];
    double n = (double)d->n_bench;
    frame f = {60, 14, 640, 200, -0.5, n - 0.5, 0, hi * 1.1, false};
    svg_open(d, 720, 260, "bench records: tok/s against the tok/s at the floor");
    axes(d, &f, "tok/s", "bench record (file order)");
    for (size_t i = 0; i < d->n_bench; i++) {
        const rec *r = &d->recs[d->bench[i]];
        const rj_val *v = &r->v, *t = rj_get(v, "tok_s");
        double cx = fx(&f, (double)i), c, bpt, mean;
        for (size_t k = 0; rj_is(t, RJ_ARR) && k < t->len; k++) {
            if (!rj_num(&t->items[k], &x) || !drawable(x)) {
                not_drawn += t->items[k].type == RJ_NUM;
                continue;
            }
            out(d,
                "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"" COL_A "\" opacity=\"0.7\"><title>line %" PRIu64
                ", rep %zu: %s tok/s</title></circle>\n",
                coord(cx - 6 + 12.0 * (double)k / (double)(t->len > 1 ? t->len - 1 : 1)), fy(&f, x), r->line, k,
                num_text(x, nb, sizeof nb, "%.2f"));
        }
        if (getnum(v, "tok_s_mean", &mean) && drawable(mean))
            out(d,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-width=\"2\">"
                "<title>mean %s tok/s</title></line>\n",
                cx - 12, fy(&f, mean), cx + 12, fy(&f, mean), num_text(mean, nb, sizeof nb, "%.2f"));
        else if (rj_is(rj_get(v, "tok_s_mean"), RJ_NUM))
            not_drawn++;
        if (getnum(v, "ceiling_gb_s", &c) && getnum(v, "bytes_per_token", &bpt) && bpt > 0) {
            double floor_tps = c * 1e9 / bpt;
            if (!drawable(floor_tps)) {
                not_drawn++;
                continue;
            }
            out(d,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c62828\" stroke-width=\"3\">"
                "<title>tok/s at the floor (measured ceiling %s GB/s): %s</title></line>\n",
                cx - 14, fy(&f, floor_tps), cx + 14, fy(&f, floor_tps), num_text(c, nb, sizeof nb, "%.2f"),
                num_text(floor_tps, nb2, sizeof nb2, "%.1f"));
        }
    }
    raw(d, "</svg>\n");
    if (not_drawn)
        out(d, "<p class=\"note\">%zu value(s) not drawn: beyond what the chart can show (the table has them).</p>\n",
            not_drawn);
    raw(d, "<table><tr><th>line</th><th>commit</th><th>version</th><th>device</th><th>arm</th><th>model</th>"
           "<th>tok/s mean \xc2\xb1 sd</th><th>ms/token</th><th>GB/s</th><th>ceiling GB/s</th><th>% of ceiling</th>"
           "<th>floor ms/token</th><th>tok/s at the floor</th></tr>\n");
    for (size_t i = 0; i < d->n_bench; i++) {
        const rec *r = &d->recs[d->bench[i]];
        const rj_val *v = &r->v;
        out(d, "<tr><td>%" PRIu64 "</td><td class=\"mono\">", r->line);
        valp(d, v, "commit");
        raw(d, "</td><td>");
        valp(d, v, "version");
        raw(d, "</td><td>");
        valp(d, v, "device");
        raw(d, "</td><td>");
        valp(d, v, "arm");
        raw(d, "</td><td>");
        valp(d, v, "model");
        raw(d, "</td><td>");
        valp(d, v, "tok_s_mean");
        raw(d, " \xc2\xb1 ");
        valp(d, v, "tok_s_sd");
        raw(d, "</td><td>");
        valp(d, v, "ms_per_token");
        raw(d, "</td><td>");
        valp(d, v, "gb_s");
        raw(d, "</td><td>");
        valp(d, v, "ceiling_gb_s");
        raw(d, "</td><td>");
        valp(d, v, "ceiling_pct");
        raw(d, "</td><td>");
        double c, bpt;
        char b1[32];
        if (getnum(v, "ceiling_gb_s", &c) && getnum(v, "bytes_per_token", &bpt) && c > 0 && bpt > 0) {
            out(d, "%s</td><td>", num_text(bpt / (c * 1e9) * 1e3, b1, sizeof b1, "%.4f"));
            out(d, "%s", num_text(c * 1e9 / bpt, b1, sizeof b1, "%.1f"));
        } else
            raw(d, "<span class=\"na\">no ceiling</span></td><td><span class=\"na\">\xe2\x80\x94</span>");
        raw(d, "</td></tr>\n");
    }
    raw(d, "</table>\n</section>\n");
}

/* ---- overview --------------------------------------------------------------------------------- */

static void overview(doc *d) {
    out(d, "<p>%" PRIu64 " line(s), %zu record(s): %zu gate(s), %zu bench record(s).</p>\n", d->lines, d->n_recs,
        d->n_gates, d->n_bench);
    if (d->diag->truncated) {
        out(d, "<p class=\"errbox\">The last line (line %" PRIu64 ") is cut short: ", d->diag->truncated_line);
        esc(d, d->diag->truncated_why);
        raw(d, ". It is left out (a run still writing, or a file cut).</p>\n");
    }
    if (d->n_gates < 2)
        return;
    raw(d, "<nav><table><tr><th>gate</th><th>lines</th><th>verdict</th><th>model</th><th>arm a</th><th>arm b</th>"
           "<th>mode</th><th>tok/s a</th><th>tok/s b</th><th>b / a</th><th>95% interval</th></tr>\n");
    for (size_t i = 0; i < d->n_gates; i++) {
        const gate *g = &d->gates[i];
        status_text s = gate_status(g);
        const rj_val *p = g->protocol ? &g->protocol->v : NULL, *sm = g->summary ? &g->summary->v : NULL;
        out(d, "<tr><td><a href=\"#gate-%zu\">%zu</a></td><td>%" PRIu64 "\xe2\x80\x93%" PRIu64 "</td>", i + 1, i + 1,
            first_line(d, g), last_line(d, g));
        out(d,
            "<td><span class=\"banner %s\" style=\"font-size:12px;padding:1px "
            "6px;white-space:nowrap\">%s</span></td><td>",
            s.cls, s.word);
        valp(d, p, "model.label");
        raw(d, "</td><td class=\"arm\">");
        valp(d, p, "arms.a.text");
        raw(d, "</td><td class=\"arm\">");
        valp(d, p, "arms.b.text");
        raw(d, "</td><td class=\"arm\">");
        valp(d, p, "compare");
        double ratio, c0, c1, ta, tb;
        bool have_ci = false;
        char b1[32], b2[32];
        out(d, "</td><td>%s</td>",
            getnum(sm, "arms.a.median_tok_s", &ta) ? num_text(ta, b1, sizeof b1, "%.2f") : "\xe2\x80\x94");
        out(d, "<td>%s</td><td>",
            getnum(sm, "arms.b.median_tok_s", &tb) ? num_text(tb, b1, sizeof b1, "%.2f") : "\xe2\x80\x94");
        if (sm && ratio_of(sm, &ratio, &c0, &c1, &have_ci))
            raw(d, num_text(ratio, b1, sizeof b1, "%.4f"));
        else
            raw(d, "<span class=\"na\">\xe2\x80\x94</span>");
        raw(d, "</td><td style=\"white-space:nowrap\">");
        if (have_ci)
            out(d, "[%s, %s]", num_text(c0, b1, sizeof b1, "%.4f"), num_text(c1, b2, sizeof b2, "%.4f"));
        else
            raw(d, "<span class=\"na\">\xe2\x80\x94</span>");
        raw(d, "</td></tr>\n");
    }
    raw(d, "</table></nav>\n");
}

static void page(doc *d) {
    raw(d, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>memra report: ");
    esc(d, d->source);
    raw(d, "</title>\n");
    raw(d, style);
    raw(d, "</head>\n<body>\n<main>\n<h1>memra report: ");
    esc(d, d->source);
    raw(d, "</h1>\n");
    overview(d);
    for (size_t i = 0; i < d->n_gates; i++)
        gate_section(d, i, &d->gates[i]);
    bench_section(d);
    if (d->n_loose) {
        raw(d, "<section class=\"gate\">\n");
        unknown_list(d, d->loose, d->n_loose, false);
        raw(d, "</section>\n");
    }
    if (!d->n_recs)
        raw(d, "<p class=\"note\">No records.</p>\n");
    raw(d, "<p class=\"note\">Made by memra report from the records alone; every field is described in "
           "gates/RECORDS.md.</p>\n</main>\n</body>\n</html>\n");
}

/* ---- reading ---------------------------------------------------------------------------------- */

static report_status read_records(doc *d, rj_arena *arena, const char *data, size_t len, report_diag *diag) {
    uint64_t line = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(data + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (data + at)) : len - at;
        line++;
        d->lines = line;
        char why[300];
        bool oom = false, cut = false;
        rj_val v;
        bool ok = rj_parse_ex(arena, data + at, n, &v, why, sizeof why, &oom, &cut);
        if (oom)
            return REPORT_NOMEM;
        const rj_val *kind = ok ? rj_get(&v, "record") : NULL;
        if (ok && v.type != RJ_OBJ) {
            ok = false;
            snprintf(why, sizeof why, "a record is a JSON object, this line holds another value");
        } else if (ok && (!rj_str(kind) || strlen(kind->s) != kind->len || !kind->len)) {
            ok = false;
            snprintf(why, sizeof why, "a record needs a non-empty string member \"record\" naming its kind");
        }
        if (!ok && !nl && cut) { /* only a line that stops too soon is cut short: any other is an error */
            diag->truncated = true;
            diag->truncated_line = line;
            snprintf(diag->truncated_why, sizeof diag->truncated_why, "no newline at its end and %s", why);
            break;
        }
        if (!ok) {
            diag->error_line = line;
            snprintf(diag->error, sizeof diag->error, "line %" PRIu64 ": %s", line, why);
            return REPORT_MALFORMED;
        }
        if (!grow((void **)&d->recs, &d->cap_recs, d->n_recs, sizeof *d->recs))
            return REPORT_NOMEM;
        d->recs[d->n_recs++] = (rec){.v = v, .kind = kind->s, .line = line};
        at += n + (nl ? 1 : 0);
    }
    return REPORT_OK;
}

report_status report_render(FILE *outf, const char *source, const char *data, size_t len, report_diag *diag) {
    memset(diag, 0, sizeof *diag);
    rj_arena arena = {0};
    doc d = {.out = outf, .source = source ? source : "records", .diag = diag};
    report_status st = read_records(&d, &arena, data, len, diag);
    if (st == REPORT_OK && !assemble(&d))
        st = REPORT_NOMEM;
    if (st == REPORT_NOMEM)
        snprintf(diag->error, sizeof diag->error, "out of memory reading the records");
    if (st == REPORT_OK) {
        diag->records = d.n_recs;
        diag->gates = (uint32_t)d.n_gates;
        diag->bench = (uint32_t)d.n_bench;
        for (size_t i = 0; i < d.n_recs; i++)
            if (strcmp(d.recs[i].kind, "bench") != 0 && !known_gate_kind(d.recs[i].kind))
                diag->unknown++;
        for (size_t i = 0; i < d.n_gates; i++)
            if (!gate_status(&d.gates[i]).pass)
                diag->failing_gates++;
        page(&d);
    }
    for (size_t i = 0; i < d.n_gates; i++)
        free(d.gates[i].idx);
    free(d.gates);
    free(d.bench);
    free(d.loose);
    free(d.recs);
    rj_arena_free(&arena);
    return st;
}
