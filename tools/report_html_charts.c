/* report_html_charts.c: a gate's timing rows and step map (with the first mismatch and the NMSE
 * chart), and the bench records. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_html.h"

/* ---- timing ----------------------------------------------------------------------------------- */

void rh_timing_section(doc *d, const gate *g) {
    size_t n = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        double t;
        if (strcmp(r->kind, "measure") != 0)
            continue;
        n++;
        if (rh_getnum(&r->v, "tok_s", &t) && rh_drawable(t)) {
            lo = fmin(lo, t);
            hi = fmax(hi, t);
        }
    }
    rh_raw(d, "<h3>Timing rows</h3>\n");
    if (n == 0) {
        rh_raw(d, "<p class=\"note\">No timing rows in these records");
        if (g->protocol) {
            double rows = -1;
            if (rh_getnum(&g->protocol->v, "rows", &rows) && rows == 0)
                rh_raw(d, " (--rows 0 or --profile: none were asked for)");
            else
                rh_raw(d, " (nothing is timed after a failed correctness phase, or the run stopped before)");
        }
        rh_raw(d, ".</p>\n");
        return;
    }
    const rj_val *s = g->summary ? &g->summary->v : NULL;
    double med[2] = {NAN, NAN};
    rh_getnum(s, "arms.a.median_tok_s", &med[0]);
    rh_getnum(s, "arms.b.median_tok_s", &med[1]);
    for (int k = 0; k < 2; k++)
        if (rh_drawable(med[k]))
            lo = fmin(lo, med[k]), hi = fmax(hi, med[k]);
    if (!(lo <= hi))
        lo = 0, hi = 1;
    /* a clamped axis: the span finite (values within +-1e300), never empty (all rows equal, or 0) */
    double pad = (hi - lo) * 0.15 + fabs(hi) * 0.01;
    if (!(pad > 0))
        pad = hi != 0 ? fabs(hi) * 0.1 : 1;
    frame f = {60, 14, 640, 200, -0.5, (double)n - 0.5, fmax(0, lo - pad), hi + pad, false};
    rh_svg_open(d, 720, 260, "tok/s of each timing row in schedule order");
    rh_axes(d, &f, "tok/s", "timing row (schedule order)");
    char nb[32];
    for (int k = 0; k < 2; k++)
        if (rh_drawable(med[k]))
            rh_out(d,
                   "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"5 4\">"
                   "<title>median of arm %c: %s tok/s</title></line>\n",
                   f.x0, rh_fy(&f, med[k]), f.x0 + f.w, rh_fy(&f, med[k]), k ? COL_B : COL_A, k ? 'b' : 'a',
                   rh_num_text(med[k], nb, sizeof nb, "%.2f"));
    size_t not_drawn = 0;
    size_t row = 0;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "measure") != 0)
            continue;
        double t;
        const char *arm = rh_getstr(&r->v, "arm");
        bool b = rh_streq(arm, "b"), ok = rj_true(rj_get(&r->v, "verified")) && rj_true(rj_get(&r->v, "eligible"));
        double x = rh_fx(&f, (double)row);
        if (!rh_getnum(&r->v, "tok_s", &t) || !rh_drawable(t)) {
            rh_out(d,
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#c62828\">?<title>row %zu: no tok/s "
                   "that the chart can draw: not drawn</title></text>\n",
                   x, f.y0 + 12, row);
            not_drawn++;
            row++;
            continue;
        }
        double y = rh_fy(&f, t);
        const char *col = b ? COL_B : COL_A;
        if (b)
            rh_out(
                d,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"9\" height=\"9\" fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\">",
                x - 4.5, y - 4.5, ok ? col : "#fff", col);
        else
            rh_out(d, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\">", x, y,
                   ok ? col : "#fff", col);
        rh_out(d, "<title>row %zu, arm %s: %s tok/s", row, b ? "b" : "a", rh_num_text(t, nb, sizeof nb, "%.2f"));
        if (!ok) {
            rh_raw(d, " \xe2\x80\x94 not counted: ");
            rh_val(d, rj_get(&r->v, "reason"), 300);
        }
        rh_raw(d, b ? "</title></rect>\n" : "</title></circle>\n");
        if (!ok)
            rh_out(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#c62828\">\xc3\x97</text>\n", x,
                   y - 8);
        row++;
    }
    rh_raw(d, "</svg>\n<p class=\"legend\"><span><span class=\"sw\" style=\"background:var(--a);border-radius:6px\">"
              "</span>arm a</span><span><span class=\"sw\" style=\"background:var(--b)\"></span>arm b</span>"
              "<span>hollow and \xc3\x97: not counted (failed or ineligible)</span><span>dashed: median of the "
              "eligible rows</span></p>\n");
    if (not_drawn)
        rh_out(d,
               "<p class=\"note\">%zu row(s) not drawn (?): no tok/s, or one beyond what the chart can show; the table "
               "below has them.</p>\n",
               not_drawn);
    /* ratio and its interval */
    double ratio, c0, c1;
    const rj_val *ci = rj_get(s, "ratio_ci95");
    if (rh_getnum(s, "ratio_b_over_a", &ratio)) {
        char b1[32], b2[32], b3[32];
        rh_out(d, "<p><b>b / a = %s</b>", rh_num_text(ratio, b1, sizeof b1, "%.4f"));
        bool have_ci = rj_is(ci, RJ_ARR) && ci->len == 2 && rj_num(&ci->items[0], &c0) && rj_num(&ci->items[1], &c1);
        if (have_ci) {
            rh_out(d, ", 95%% bootstrap interval [%s, %s]", rh_num_text(c0, b2, sizeof b2, "%.4f"),
                   rh_num_text(c1, b3, sizeof b3, "%.4f"));
            rh_raw(d, " (");
            rh_valp(d, s, "bootstrap.resamples");
            rh_raw(d, " resamples, seed ");
            rh_valp(d, s, "bootstrap.seed");
            rh_raw(d, ")");
        }
        rh_out(d, "; median a %s tok/s, median b %s tok/s</p>\n", rh_num_text(med[0], b2, sizeof b2, "%.2f"),
               rh_num_text(med[1], b3, sizeof b3, "%.2f"));
        if (have_ci && !(rh_drawable(ratio) && rh_drawable(c0) && rh_drawable(c1)))
            rh_raw(
                d,
                "<p class=\"note\">The interval's chart is not drawn: its values are beyond what it can show.</p>\n");
        else if (have_ci) {
            double l = fmin(fmin(c0, ratio), 1.0), h = fmax(fmax(c1, ratio), 1.0), p2 = (h - l) * 0.2 + 1e-3;
            frame r = {60, 8, 640, 24, l - p2, h + p2, 0, 1, false};
            rh_svg_open(d, 720, 52, "the ratio b/a with its 95% bootstrap interval; the line at 1 is equal speed");
            rh_out(d,
                   "<line x1=\"%.1f\" y1=\"4\" x2=\"%.1f\" y2=\"36\" stroke=\"#999\" stroke-dasharray=\"3 3\"/>"
                   "<text x=\"%.1f\" y=\"48\" text-anchor=\"middle\">1 (equal)</text>\n",
                   rh_fx(&r, 1), rh_fx(&r, 1), rh_fx(&r, 1));
            rh_out(d,
                   "<rect x=\"%.1f\" y=\"14\" width=\"%.1f\" height=\"12\" fill=\"#e0700b\" fill-opacity=\"0.3\" "
                   "stroke=\"#e0700b\"/>\n",
                   rh_fx(&r, c0), fmax(1, rh_fx(&r, c1) - rh_fx(&r, c0)));
            rh_out(d, "<line x1=\"%.1f\" y1=\"10\" x2=\"%.1f\" y2=\"30\" stroke=\"#000\" stroke-width=\"2\"/>\n",
                   rh_fx(&r, ratio), rh_fx(&r, ratio));
            rh_out(d, "<text x=\"%.1f\" y=\"48\" text-anchor=\"middle\">%s</text>\n", rh_fx(&r, ratio), b1);
            rh_raw(d, "</svg>\n");
        }
    } else if (s)
        rh_raw(d, "<p class=\"note\">No ratio: an arm has no eligible row.</p>\n");
    /* the rows as a table */
    rh_raw(d, "<table><tr><th>row</th><th>arm</th><th>tok/s</th><th>wall (ms)</th><th>verified</th><th>eligible</th>"
              "<th>why not</th></tr>\n");
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "measure") != 0)
            continue;
        bool ver = rj_true(rj_get(&r->v, "verified")), el = rj_true(rj_get(&r->v, "eligible"));
        rh_raw(d, !ver ? "<tr class=\"bad\"><td>" : !el ? "<tr class=\"warn\"><td>" : "<tr><td>");
        rh_valp(d, &r->v, "row");
        rh_raw(d, "</td><td>");
        rh_valp(d, &r->v, "arm");
        rh_raw(d, "</td><td>");
        double t, w;
        char b1[32];
        rh_raw(d, rh_getnum(&r->v, "tok_s", &t) ? rh_num_text(t, b1, sizeof b1, "%.2f") : "\xe2\x80\x94");
        rh_raw(d, "</td><td>");
        rh_raw(d, rh_getnum(&r->v, "wall_ns", &w) ? rh_num_text(w / 1e6, b1, sizeof b1, "%.3f") : "\xe2\x80\x94");
        rh_out(d, "</td><td>%s</td><td>%s</td><td>", ver ? "yes" : "NO", el ? "yes" : "no");
        rh_val(d, rj_get(&r->v, "reason"), 600);
        rh_raw(d, "</td></tr>\n");
    }
    rh_raw(d, "</table>\n");
}

/* ---- step map --------------------------------------------------------------------------------- */

enum { C_OK, C_TOL, C_HIDDEN, C_CACHE, C_LOGITS, C_TOKEN, C_UNKNOWN, C_N };
static const char *const cell_colour[C_N] = {"#2a9d3a", "#9fd89a", "#e377c2", "#8c564b",
                                             "#c62828", "#5b2a86", "#bbbbbb"};
static const char *const cell_name[C_N] = {"identical",     "within tolerance", "hidden differs", "cache differs",
                                           "logits differ", "token differs",    "not recorded"};

static bool str_differs(const rj_val *r, const char *a, const char *b) {
    const char *x = rh_getstr(r, a), *y = rh_getstr(r, b);
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
        if (strcmp(r->kind, "mismatch") != 0 || !rh_streq(rh_getstr(&r->v, "where"), "replay"))
            continue;
        if (rj_true(rj_get(&r->v, "first")))
            return r;
        if (!any)
            any = r;
    }
    return any;
}

static void value_cell(doc *d, const rj_val *x) {
    rh_raw(d, "<td class=\"mono\">");
    if (!x || x->type == RJ_NULL)
        rh_raw(d, "<span class=\"na\">\xe2\x80\x94</span>");
    else {
        rh_valp(d, x, "value");
        rh_raw(d, " <span class=\"note\">bits</span> ");
        rh_valp(d, x, "bits");
        if (rj_get(x, "class")) {
            rh_raw(d, " ");
            rh_valp(d, x, "class");
        }
    }
    rh_raw(d, "</td>");
}

static void first_mismatch_table(doc *d, const rec *m) {
    const rj_val *v = &m->v;
    rh_out(d, "<h3>First mismatch (line %" PRIu64 ")</h3>\n<table class=\"kv\">\n", m->line);
    rh_out(d, "<tr><th>step</th><td>");
    rh_valp(d, v, "step");
    rh_raw(d, " (");
    rh_valp(d, v, "phase");
    rh_raw(d, " ");
    rh_valp(d, v, "phase_step");
    rh_raw(d, "), input token ");
    rh_valp(d, v, "input");
    rh_raw(d, "</td></tr>\n");
    rh_kv(d, "what differs", rj_get(v, "what"));
    rh_kv(d, "reason", rj_get(v, "reason"));
    rh_kv(d, "first differing logit (index)", rj_get(v, "index"));
    rh_out(d, "<tr><th>value in a / in b</th>");
    value_cell(d, rj_get(v, "ref"));
    rh_raw(d, "</tr>\n<tr><th></th>");
    value_cell(d, rj_get(v, "got"));
    rh_raw(d, "</tr>\n");
    rh_kv(d, "differing logits", rj_get(v, "differing_logits"));
    rh_out(d, "<tr><th>max ulp</th><td>");
    rh_valp(d, v, "max_ulp");
    rh_raw(d, " at index ");
    rh_valp(d, v, "max_ulp_index");
    rh_raw(d, "</td></tr>\n");
    rh_kv(d, "NMSE", rj_get(v, "nmse"));
    rh_out(d, "<tr><th>tokens a / b</th><td>");
    rh_valp(d, v, "token_ref");
    rh_raw(d, " / ");
    rh_valp(d, v, "token_got");
    rh_raw(d, "; argmax ");
    rh_valp(d, v, "argmax_ref");
    rh_raw(d, " / ");
    rh_valp(d, v, "argmax_got");
    rh_raw(d, "</td></tr>\n");
    rh_out(d, "<tr><th>non-finite a / b</th><td>");
    rh_valp(d, v, "nonfinite_ref");
    rh_raw(d, " / ");
    rh_valp(d, v, "nonfinite_got");
    rh_raw(d, "</td></tr>\n");
    if (str_differs(v, "cache_ref", "cache_got")) {
        rh_kv(d, "cache a", rj_get(v, "cache_ref"));
        rh_kv(d, "cache b", rj_get(v, "cache_got"));
    }
    if (str_differs(v, "hidden_ref", "hidden_got")) {
        rh_kv(d, "hidden a", rj_get(v, "hidden_ref"));
        rh_kv(d, "hidden b", rj_get(v, "hidden_got"));
    }
    rh_raw(d, "</table>\n");
}

static void nmse_chart(doc *d, const gate *g, double tol) {
    double lo = INFINITY, hi = -INFINITY, x;
    size_t n = 0;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "step") != 0)
            continue;
        n++;
        if (rh_getnum(&r->v, "nmse", &x) && x > 0)
            lo = fmin(lo, log10(x)), hi = fmax(hi, log10(x));
    }
    if (tol > 0)
        lo = fmin(lo, log10(tol)), hi = fmax(hi, log10(tol));
    if (!(lo <= hi))
        lo = -12, hi = 0;
    lo = floor(lo) - 1;
    hi = ceil(hi) + 1;
    frame f = {60, 14, 640, 200, -0.5, (double)(n ? n : 1) - 0.5, lo, hi, true};
    rh_raw(d, "<h3>Per-step NMSE against the tolerance</h3>\n");
    rh_svg_open(d, 720, 260, "per-step NMSE of b's logits against a's, log scale, with the tolerance");
    rh_axes(d, &f, "NMSE (log scale)", "step");
    if (tol > 0)
        rh_out(d,
               "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c62828\" stroke-dasharray=\"6 4\">"
               "<title>tolerance %g</title></line>\n",
               f.x0, rh_fy(&f, log10(tol)), f.x0 + f.w, rh_fy(&f, log10(tol)), tol);
    rh_raw(d, "<polyline fill=\"none\" stroke=\"" COL_A "\" stroke-width=\"1.5\" points=\"");
    size_t k = 0;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "step") != 0)
            continue;
        double y = hi; /* null: infinite or not finite */
        if (rh_getnum(&r->v, "nmse", &x))
            y = x > 0 ? log10(x) : lo;
        rh_out(d, "%s%.1f,%.1f", k ? " " : "", rh_fx(&f, (double)k), rh_fy(&f, y));
        k++;
    }
    rh_raw(d, "\"/>\n");
    k = 0;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "step") != 0)
            continue;
        bool have = rh_getnum(&r->v, "nmse", &x);
        double y = have ? (x > 0 ? log10(x) : lo) : hi;
        bool over = !have || (tol >= 0 && x > tol);
        rh_out(d, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"><title>step %zu: NMSE ", rh_fx(&f, (double)k),
               rh_fy(&f, y), over ? "3.5" : "2", over ? "#c62828" : COL_A, k);
        rh_raw(d, have ? "" : "non-finite");
        if (have)
            rh_out(d, "%g%s", x, x == 0 ? " (drawn at the bottom)" : "");
        rh_raw(d, "</title></circle>\n");
        k++;
    }
    rh_raw(d,
           "</svg>\n<p class=\"legend\"><span>blue: per-step NMSE (0 drawn at the bottom, non-finite at the "
           "top)</span><span style=\"color:#c62828\">dashed red: the tolerance; red points are over it</span></p>\n");
}

void rh_step_map(doc *d, const gate *g) {
    size_t n = 0, bad = 0, prime = 0;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "step") != 0)
            continue;
        n++;
        if (!rj_true(rj_get(&r->v, "ok")))
            bad++;
        if (rh_streq(rh_getstr(&r->v, "phase"), "prime"))
            prime++;
    }
    rh_raw(d, "<h3>Step map</h3>\n");
    const rec *m = first_replay_mismatch(d, g);
    if (n == 0) {
        rh_raw(d, "<p class=\"note\">No step records (the run stopped before the replay).</p>\n");
        if (m)
            first_mismatch_table(d, m);
        return;
    }
    int64_t mstep = -1;
    if (m)
        rj_int(rj_get(&m->v, "step"), &mstep);
    rh_out(d, "<p>%zu steps (%zu prime, %zu generated), %zu differ", n, prime, n - prime, bad);
    if (m && mstep >= 0)
        rh_out(d, "; first mismatch at step %" PRId64, mstep);
    rh_raw(d, ". One cell a step, in step order, 64 a line; the thick line marks the first generated step.</p>\n");
    const size_t per = 64, cs = 11, gap = 2, rows = (n + per - 1) / per;
    const double left = 44, w = left + (double)per * (cs + gap) + 4, h = 6 + (double)rows * (cs + gap) + 4;
    rh_svg_open(d, w, h, "step map: one cell per step, coloured by what matched");
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
            rh_out(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%zu</text>\n", left - 4, y + cs - 1, k);
        int64_t sn = -1;
        rj_int(rj_get(&r->v, "step"), &sn);
        bool first = m && sn == mstep && sn >= 0;
        rh_out(d, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%zu\" height=\"%zu\" fill=\"%s\"%s><title>step ", x, y, cs, cs,
               cell_colour[c], first ? " stroke=\"#000\" stroke-width=\"2\"" : "");
        rh_valp(d, &r->v, "step");
        rh_raw(d, " (");
        rh_valp(d, &r->v, "phase");
        rh_raw(d, " ");
        rh_valp(d, &r->v, "phase_step");
        rh_out(d, "): %s;", cell_name[c]);
        rh_esc(d, what);
        rh_raw(d, "; tokens ");
        rh_valp(d, &r->v, "token");
        rh_raw(d, "/");
        rh_valp(d, &r->v, "b_token");
        rh_raw(d, ", differing logits ");
        rh_valp(d, &r->v, "differing_logits");
        rh_raw(d, ", max ulp ");
        rh_valp(d, &r->v, "max_ulp");
        rh_raw(d, ", nmse ");
        rh_valp(d, &r->v, "nmse");
        rh_raw(d, first ? " \xe2\x80\x94 the first mismatch</title></rect>\n" : "</title></rect>\n");
        if (k == prime && prime > 0 && prime < n)
            rh_out(d, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-width=\"2\"/>\n",
                   x - 1, y - 1, x - 1, y + cs + 1);
        k++;
    }
    rh_raw(d, "</svg>\n<p class=\"legend\">");
    for (int c = 0; c < C_N; c++)
        if (used[c] || c == C_OK)
            rh_out(d, "<span><span class=\"sw\" style=\"background:%s\"></span>%s</span>", cell_colour[c],
                   cell_name[c]);
    rh_raw(d, "<span>black outline: the first mismatch</span></p>\n");
    if (m)
        first_mismatch_table(d, m);
    double tol = -1;
    const char *cmp = g->protocol ? rh_getstr(&g->protocol->v, "compare") : NULL;
    if (g->protocol && (rh_getnum(&g->protocol->v, "nmse_tolerance", &tol) || (cmp && strncmp(cmp, "nmse", 4) == 0)))
        nmse_chart(d, g, tol);
}

/* ---- bench ------------------------------------------------------------------------------------ */

void rh_bench_section(doc *d) {
    if (!d->n_bench)
        return;
    rh_raw(d, "<section class=\"gate\">\n<h2 id=\"bench\">Bench records</h2>\n");
    rh_raw(d, "<p>Each record's repetitions (dots) and mean (bar) in tok/s, against the tok/s the backend's measured "
              "ceiling allows: the floor time of a token is its bytes read at the ceiling (red dash; none where the "
              "backend measured no ceiling).</p>\n");
    double hi = 0, x;
    for (size_t i = 0; i < d->n_bench; i++) {
        const rj_val *v = &d->recs[d->bench[i]].v;
        const rj_val *t = rj_get(v, "tok_s");
        for (size_t k = 0; rj_is(t, RJ_ARR) && k < t->len; k++)
            if (rj_num(&t->items[k], &x) && rh_drawable(x))
                hi = fmax(hi, x);
        double c, bpt, mean;
        if (rh_getnum(v, "tok_s_mean", &mean) && rh_drawable(mean))
            hi = fmax(hi, mean);
        if (rh_getnum(v, "ceiling_gb_s", &c) && rh_getnum(v, "bytes_per_token", &bpt) && bpt > 0 &&
            rh_drawable(c * 1e9 / bpt))
            hi = fmax(hi, c * 1e9 / bpt);
    }
    if (!(hi > 0))
        hi = 1; /* nothing above 0: an axis from 0 to 1 */
    size_t not_drawn = 0;
    char nb[32], nb2[32];
    double n = (double)d->n_bench;
    frame f = {60, 14, 640, 200, -0.5, n - 0.5, 0, hi * 1.1, false};
    rh_svg_open(d, 720, 260, "bench records: tok/s against the tok/s at the floor");
    rh_axes(d, &f, "tok/s", "bench record (file order)");
    for (size_t i = 0; i < d->n_bench; i++) {
        const rec *r = &d->recs[d->bench[i]];
        const rj_val *v = &r->v, *t = rj_get(v, "tok_s");
        double cx = rh_fx(&f, (double)i), c, bpt, mean;
        for (size_t k = 0; rj_is(t, RJ_ARR) && k < t->len; k++) {
            if (!rj_num(&t->items[k], &x) || !rh_drawable(x)) {
                not_drawn += t->items[k].type == RJ_NUM;
                continue;
            }
            rh_out(d,
                   "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"" COL_A "\" opacity=\"0.7\"><title>line %" PRIu64
                   ", rep %zu: %s tok/s</title></circle>\n",
                   rh_coord(cx - 6 + 12.0 * (double)k / (double)(t->len > 1 ? t->len - 1 : 1)), rh_fy(&f, x), r->line,
                   k, rh_num_text(x, nb, sizeof nb, "%.2f"));
        }
        if (rh_getnum(v, "tok_s_mean", &mean) && rh_drawable(mean))
            rh_out(d,
                   "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-width=\"2\">"
                   "<title>mean %s tok/s</title></line>\n",
                   cx - 12, rh_fy(&f, mean), cx + 12, rh_fy(&f, mean), rh_num_text(mean, nb, sizeof nb, "%.2f"));
        else if (rj_is(rj_get(v, "tok_s_mean"), RJ_NUM))
            not_drawn++;
        if (rh_getnum(v, "ceiling_gb_s", &c) && rh_getnum(v, "bytes_per_token", &bpt) && bpt > 0) {
            double floor_tps = c * 1e9 / bpt;
            if (!rh_drawable(floor_tps)) {
                not_drawn++;
                continue;
            }
            rh_out(d,
                   "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c62828\" stroke-width=\"3\">"
                   "<title>tok/s at the floor (measured ceiling %s GB/s): %s</title></line>\n",
                   cx - 14, rh_fy(&f, floor_tps), cx + 14, rh_fy(&f, floor_tps), rh_num_text(c, nb, sizeof nb, "%.2f"),
                   rh_num_text(floor_tps, nb2, sizeof nb2, "%.1f"));
        }
    }
    rh_raw(d, "</svg>\n");
    if (not_drawn)
        rh_out(d,
               "<p class=\"note\">%zu value(s) not drawn: beyond what the chart can show (the table has them).</p>\n",
               not_drawn);
    rh_raw(d, "<table><tr><th>line</th><th>commit</th><th>version</th><th>device</th><th>arm</th><th>model</th>"
              "<th>tok/s mean \xc2\xb1 sd</th><th>ms/token</th><th>GB/s</th><th>ceiling GB/s</th><th>% of ceiling</th>"
              "<th>floor ms/token</th><th>tok/s at the floor</th></tr>\n");
    for (size_t i = 0; i < d->n_bench; i++) {
        const rec *r = &d->recs[d->bench[i]];
        const rj_val *v = &r->v;
        rh_out(d, "<tr><td>%" PRIu64 "</td><td class=\"mono\">", r->line);
        rh_valp(d, v, "commit");
        rh_raw(d, "</td><td>");
        rh_valp(d, v, "version");
        rh_raw(d, "</td><td>");
        rh_valp(d, v, "device");
        rh_raw(d, "</td><td>");
        rh_valp(d, v, "arm");
        rh_raw(d, "</td><td>");
        rh_valp(d, v, "model");
        rh_raw(d, "</td><td>");
        rh_valp(d, v, "tok_s_mean");
        rh_raw(d, " \xc2\xb1 ");
        rh_valp(d, v, "tok_s_sd");
        rh_raw(d, "</td><td>");
        rh_valp(d, v, "ms_per_token");
        rh_raw(d, "</td><td>");
        rh_valp(d, v, "gb_s");
        rh_raw(d, "</td><td>");
        rh_valp(d, v, "ceiling_gb_s");
        rh_raw(d, "</td><td>");
        rh_valp(d, v, "ceiling_pct");
        rh_raw(d, "</td><td>");
        double c, bpt;
        char b1[32];
        if (rh_getnum(v, "ceiling_gb_s", &c) && rh_getnum(v, "bytes_per_token", &bpt) && c > 0 && bpt > 0) {
            rh_out(d, "%s</td><td>", rh_num_text(bpt / (c * 1e9) * 1e3, b1, sizeof b1, "%.4f"));
            rh_out(d, "%s", rh_num_text(c * 1e9 / bpt, b1, sizeof b1, "%.1f"));
        } else
            rh_raw(d, "<span class=\"na\">no ceiling</span></td><td><span class=\"na\">\xe2\x80\x94</span>");
        rh_raw(d, "</td></tr>\n");
    }
    rh_raw(d, "</table>\n</section>\n");
}
