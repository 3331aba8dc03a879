/* report_html.c: the HTML page of `memra report` and `memra-gate --html` (see report.h): the
 * records read and split into gates, the page, its overview and each gate's frame. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_html.h"

/* ---- records and gates ---------------------------------------------------------------------- */

static const char *const gate_kinds[] = {"protocol", "census",      "refusal", "step",    "mismatch", "bisect",
                                         "profile",  "carry_check", "measure", "summary", "verdict",  "interrupted"};

bool rh_known_gate_kind(const char *k) {
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
        if (!rh_known_gate_kind(r->kind) && !open) {
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
    "td.num,th.num{white-space:nowrap;word-break:normal}\n"
    "td.arm,th.arm{white-space:nowrap;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;"
    "font-size:12px}\n"
    "table.answer{font-size:15px;margin:8px 0 14px}table.answer th{width:70px}.big{font-size:20px;font-weight:700}\n"
    "@media print{body{background:#fff;font-size:11px}main{max-width:none;padding:0}nav{display:none}"
    "section.gate{border:none;padding:0;break-before:page}section.gate:first-of-type{break-before:auto}"
    "table,svg,.banner{break-inside:avoid}"
    "*{-webkit-print-color-adjust:exact;print-color-adjust:exact}}\n"
    "</style>\n";

status_text rh_gate_status(const gate *g) {
    status_text s = {"inc", "INCOMPLETE", false};
    if (g->interrupted) {
        const char *sig = rh_getstr(&g->interrupted->v, "signal");
        s.cls = "intr";
        snprintf(s.word, sizeof s.word, "INTERRUPTED%s%.20s", sig ? " by " : "", sig ? sig : "");
        return s;
    }
    if (!g->verdict)
        return s;
    double ex = -1;
    rh_getnum(&g->verdict->v, "exit", &ex);
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
    status_text s = rh_gate_status(g);
    rh_out(d, "<div class=\"banner %s\">%s", s.cls, s.word);
    const rec *end = g->interrupted ? g->interrupted : g->verdict;
    rh_raw(d, "<small>");
    if (end) {
        rh_val(d, rj_get(&end->v, "reason"), 2000);
        const char *mode = rh_getstr(&end->v, "mode");
        if (mode) {
            rh_raw(d, " \xc2\xb7 mode ");
            rh_esc(d, mode);
        }
        if (g->interrupted) {
            rh_raw(d, " \xc2\xb7 phase ");
            rh_valp(d, &end->v, "phase");
            rh_raw(d, " \xc2\xb7 exit ");
            rh_valp(d, &end->v, "exit");
        }
    } else if (g->cut)
        rh_raw(d, "no verdict: a new gate's protocol follows this gate's records (the run was stopped, or two "
                  "writers' lines alternate)");
    else
        rh_raw(d, "no verdict: the records end before it (the run is still going, was killed, or the file was cut)");
    rh_raw(d, "</small></div>\n");
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
            rh_out(d, "<h3>%s</h3>\n<table><tr><th>line</th>", title);
            for (size_t c = 0; c < n_cols; c++) {
                rh_raw(d, "<th>");
                rh_esc(d, cols[c]);
                rh_raw(d, "</th>");
            }
            rh_raw(d, "</tr>\n");
        }
        any = true;
        bool ok = !ok_field || rj_true(rj_get(&r->v, ok_field));
        rh_out(d, "<tr%s><td>%" PRIu64 "</td>", ok ? "" : " class=\"bad\"", r->line);
        for (size_t c = 0; c < n_cols; c++) {
            rh_raw(d, "<td>");
            rh_valp(d, &r->v, cols[c]);
            rh_raw(d, "</td>");
        }
        rh_raw(d, "</tr>\n");
    }
    if (any)
        rh_raw(d, "</table>\n");
}

static void unknown_list(doc *d, const size_t *idx, size_t n, bool in_gate) {
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        const rec *r = &d->recs[idx[i]];
        if (in_gate && rh_known_gate_kind(r->kind))
            continue;
        if (!any)
            rh_out(d,
                   "<h3>Records of an unknown kind%s</h3>\n<table><tr><th>line</th><th>record</th><th>as written</th>"
                   "</tr>\n",
                   in_gate ? "" : " outside any gate");
        any = true;
        rh_out(d, "<tr><td>%" PRIu64 "</td><td>", r->line);
        rh_esc(d, r->kind);
        rh_raw(d, "</td><td class=\"mono\">");
        rh_val_json(d, &r->v, 3000);
        rh_raw(d, "</td></tr>\n");
    }
    if (any)
        rh_raw(d, "</table>\n");
}

static void gate_title(doc *d, size_t gi, const gate *g) {
    const rj_val *p = g->protocol ? &g->protocol->v : NULL;
    rh_out(d, "<h2 id=\"gate-%zu\">Gate %zu: ", gi + 1, gi + 1);
    if (p) {
        rh_valp(d, p, "arms.a.text");
        rh_raw(d, " against ");
        rh_valp(d, p, "arms.b.text");
    } else
        rh_raw(d, "no protocol");
    rh_out(d, " <span class=\"note\">(lines %" PRIu64 "\xe2\x80\x93%" PRIu64 ")</span></h2>\n", first_line(d, g),
           last_line(d, g));
}

static void gate_section(doc *d, size_t gi, const gate *g) {
    rh_out(d, "<section class=\"gate\">\n");
    gate_title(d, gi, g);
    banner(d, g);
    rh_answer(d, g);
    rh_protocol_section(d, g);
    rh_summary_section(d, g);
    rh_bisect_section(d, g);
    rh_timing_section(d, g);
    rh_step_map(d, g);
    rh_census_section(d, g);
    rh_refusal_section(d, g);
    static const char *const mcols[] = {"where", "arm", "row", "step", "phase", "what", "reason"};
    table_of(d, g, "mismatch", "Mismatches", mcols, sizeof mcols / sizeof mcols[0], NULL);
    static const char *const pcols[] = {
        "arm",      "arm_text", "steps", "start_position", "end_position", "tokens_identical", "digests_identical",
        "verified", "warmup.ok"};
    table_of(d, g, "profile", "Profile windows", pcols, sizeof pcols / sizeof pcols[0], "verified");
    static const char *const ccols[] = {"arm", "arm_text", "start_position", "generated_tokens", "verified", "reason"};
    table_of(d, g, "carry_check", "Carry check", ccols, sizeof ccols / sizeof ccols[0], "verified");
    if (g->interrupted) {
        rh_raw(d, "<h3>Interrupted</h3>\n<table class=\"kv\">\n");
        rh_kv(d, "signal", rj_get(&g->interrupted->v, "signal"));
        rh_kv(d, "phase", rj_get(&g->interrupted->v, "phase"));
        rh_kv(d, "steps compared", rj_get(&g->interrupted->v, "steps_compared"));
        rh_kv(d, "rows", rj_get(&g->interrupted->v, "rows"));
        rh_kv(d, "records complete", rj_get(&g->interrupted->v, "records_complete"));
        rh_raw(d, "</table>\n");
    }
    unknown_list(d, g->idx, g->n, true);
    rh_raw(d, "</section>\n");
}

/* ---- overview --------------------------------------------------------------------------------- */

static void overview(doc *d) {
    rh_out(d, "<p>%" PRIu64 " line(s), %zu record(s): %zu gate(s), %zu bench record(s).</p>\n", d->lines, d->n_recs,
           d->n_gates, d->n_bench);
    if (d->diag->truncated) {
        rh_out(d, "<p class=\"errbox\">The last line (line %" PRIu64 ") is cut short: ", d->diag->truncated_line);
        rh_esc(d, d->diag->truncated_why);
        rh_raw(d, ". It is left out (a run still writing, or a file cut).</p>\n");
    }
    if (d->n_gates < 2)
        return;
    rh_raw(d, "<nav><table><tr><th>gate</th><th class=\"num\">lines</th><th>verdict</th><th>model</th><th "
              "class=\"num\">arm a</th>"
              "<th class=\"num\">arm b</th>"
              "<th>mode</th><th class=\"num\">tok/s a</th><th class=\"num\">tok/s b</th><th class=\"num\">b / a</th>"
              "<th class=\"num\">95% interval</th></tr>\n");
    for (size_t i = 0; i < d->n_gates; i++) {
        const gate *g = &d->gates[i];
        status_text s = rh_gate_status(g);
        const rj_val *p = g->protocol ? &g->protocol->v : NULL, *sm = g->summary ? &g->summary->v : NULL;
        rh_out(d, "<tr><td><a href=\"#gate-%zu\">%zu</a></td><td class=\"num\">%" PRIu64 "\xe2\x80\x93%" PRIu64 "</td>",
               i + 1, i + 1, first_line(d, g), last_line(d, g));
        rh_out(d,
               "<td><span class=\"banner %s\" style=\"font-size:12px;padding:1px "
               "6px;white-space:nowrap\">%s</span></td><td>",
               s.cls, s.word);
        rh_valp(d, p, "model.label");
        rh_raw(d, "</td><td class=\"arm\">");
        rh_valp(d, p, "arms.a.text");
        rh_raw(d, "</td><td class=\"arm\">");
        rh_valp(d, p, "arms.b.text");
        rh_raw(d, "</td><td class=\"arm\">");
        rh_valp(d, p, "compare");
        double ratio, c0, c1, ta, tb;
        bool have_ci = false;
        char b1[32], b2[32];
        rh_out(d, "</td><td class=\"num\">%s</td>",
               rh_getnum(sm, "arms.a.median_tok_s", &ta) ? rh_num_text(ta, b1, sizeof b1, "%.2f") : "\xe2\x80\x94");
        rh_out(d, "<td class=\"num\">%s</td><td class=\"num\">",
               rh_getnum(sm, "arms.b.median_tok_s", &tb) ? rh_num_text(tb, b1, sizeof b1, "%.2f") : "\xe2\x80\x94");
        if (sm && rh_ratio_of(sm, &ratio, &c0, &c1, &have_ci))
            rh_raw(d, rh_num_text(ratio, b1, sizeof b1, "%.4f"));
        else
            rh_raw(d, "<span class=\"na\">\xe2\x80\x94</span>");
        rh_raw(d, "</td><td class=\"num\">");
        if (have_ci)
            rh_out(d, "[%s, %s]", rh_num_text(c0, b1, sizeof b1, "%.4f"), rh_num_text(c1, b2, sizeof b2, "%.4f"));
        else
            rh_raw(d, "<span class=\"na\">\xe2\x80\x94</span>");
        rh_raw(d, "</td></tr>\n");
    }
    rh_raw(d, "</table></nav>\n");
}

static void page(doc *d) {
    rh_raw(d, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
              "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>memra report: ");
    rh_esc(d, d->source);
    rh_raw(d, "</title>\n");
    rh_raw(d, style);
    rh_raw(d, "</head>\n<body>\n<main>\n<h1>memra report: ");
    rh_esc(d, d->source);
    rh_raw(d, "</h1>\n");
    overview(d);
    for (size_t i = 0; i < d->n_gates; i++)
        gate_section(d, i, &d->gates[i]);
    rh_bench_section(d);
    if (d->n_loose) {
        rh_raw(d, "<section class=\"gate\">\n");
        unknown_list(d, d->loose, d->n_loose, false);
        rh_raw(d, "</section>\n");
    }
    if (!d->n_recs)
        rh_raw(d, "<p class=\"note\">No records.</p>\n");
    rh_raw(d, "<p class=\"note\">Made by memra report from the records alone; every field is described in "
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
            if (strcmp(d.recs[i].kind, "bench") != 0 && !rh_known_gate_kind(d.recs[i].kind))
                diag->unknown++;
        for (size_t i = 0; i < d.n_gates; i++)
            if (!rh_gate_status(&d.gates[i]).pass)
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
