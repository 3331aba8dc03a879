/* report_html_gate.c: a gate's answer (speed in words, each arm's tok/s), protocol, summary,
 * bisect, census and refusal tables. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_html.h"

/* ---- the answer: speed in words and each arm's tok/s, first ------------------------------------ */

/* The summary's ratio b/a and its 95% interval (have_ci false when it has none). */
bool rh_ratio_of(const rj_val *sm, double *r, double *c0, double *c1, bool *have_ci) {
    const rj_val *ci = rj_get(sm, "ratio_ci95");
    *have_ci = rj_is(ci, RJ_ARR) && ci->len == 2 && rj_num(&ci->items[0], c0) && rj_num(&ci->items[1], c1);
    return rh_getnum(sm, "ratio_b_over_a", r);
}

/* "b is 2.3% slower than a" and whether the interval says it is significant. */
static void speed_words(doc *d, double r, double c0, double c1, bool have_ci) {
    char b1[32];
    double pct = (r - 1) * 100;
    if (!(r > 0) || !isfinite(pct))
        rh_raw(d, "b / a is not a positive ratio");
    else if (fabs(pct) < 0.05)
        rh_raw(d, "b and a are as fast");
    else
        rh_out(d, "b is %s%% %s than a", rh_num_text(fabs(pct), b1, sizeof b1, "%.1f"), pct > 0 ? "faster" : "slower");
    if (!have_ci)
        rh_raw(d, " (no interval: too few timing rows for one)");
    else if (c0 > 1 || c1 < 1)
        rh_raw(d, ": <b>significant</b> (the 95% interval excludes 1)");
    else
        rh_raw(d, ": <b>no significant difference</b> (the 95% interval holds 1)");
}

static void arm_speed(doc *d, const rj_val *sm, const rj_val *p, char arm) {
    char path[48], b1[32], b2[32];
    double med, lo, hi, n;
    rh_out(d, "<tr><th>arm %c</th><td class=\"arm\">", arm);
    snprintf(path, sizeof path, "arms.%c.text", arm);
    rh_valp(d, p, path);
    rh_raw(d, "</td><td>");
    snprintf(path, sizeof path, "arms.%c.median_tok_s", arm);
    if (rh_getnum(sm, path, &med)) {
        rh_out(d, "<b>%s tok/s</b> <span class=\"note\">median", rh_num_text(med, b1, sizeof b1, "%.2f"));
        snprintf(path, sizeof path, "arms.%c.eligible_rows", arm);
        if (rh_getnum(sm, path, &n))
            rh_out(d, " of %s row(s)", rh_num_text(n, b1, sizeof b1, "%.0f"));
        char plo[48], phi[48];
        snprintf(plo, sizeof plo, "arms.%c.min_tok_s", arm);
        snprintf(phi, sizeof phi, "arms.%c.max_tok_s", arm);
        if (rh_getnum(sm, plo, &lo) && rh_getnum(sm, phi, &hi))
            rh_out(d, ", range (min .. max) %s .. %s", rh_num_text(lo, b1, sizeof b1, "%.2f"),
                   rh_num_text(hi, b2, sizeof b2, "%.2f"));
        rh_raw(d, "</span>");
    } else
        rh_raw(d, "<span class=\"na\">no eligible timing row</span>");
    rh_raw(d, "</td></tr>\n");
}

/* Right under the verdict: the speed of b against a in words with its interval, and each arm's
 * tok/s; the protocol and the detail follow. */
void rh_answer(doc *d, const gate *g) {
    const rj_val *sm = g->summary ? &g->summary->v : NULL, *p = g->protocol ? &g->protocol->v : NULL;
    if (!p)
        return;
    rh_raw(d, "<table class=\"answer\">\n<tr><th>speed</th><td colspan=\"2\">");
    double r, c0, c1;
    bool have_ci;
    char b1[32], b2[32], b3[32];
    if (sm && rh_ratio_of(sm, &r, &c0, &c1, &have_ci)) {
        rh_out(d, "<span class=\"big\">b / a = %s</span>", rh_num_text(r, b1, sizeof b1, "%.4f"));
        if (have_ci)
            rh_out(d, " <span class=\"big\">[%s, %s]</span> 95%% interval", rh_num_text(c0, b2, sizeof b2, "%.4f"),
                   rh_num_text(c1, b3, sizeof b3, "%.4f"));
        rh_raw(d, "<br>");
        speed_words(d, r, c0, c1, have_ci);
    } else {
        double rows = -1;
        rh_raw(d, "<span class=\"na\">not timed: ");
        if (rh_getnum(p, "rows", &rows) && rows == 0)
            rh_raw(d, "no timing rows were asked for (--rows 0 or --profile)");
        else if (!sm)
            rh_raw(d, "the run ended before its summary");
        else if (!rj_true(rj_get(sm, "timing_done")))
            rh_raw(d, "nothing is timed after a failed correctness phase");
        else
            rh_raw(d, "an arm has no eligible row");
        rh_raw(d, "</span>");
    }
    rh_raw(d, "</td></tr>\n");
    arm_speed(d, sm, p, 'a');
    arm_speed(d, sm, p, 'b');
    rh_raw(d, "</table>\n");
}

/* ---- protocol --------------------------------------------------------------------------------- */

static void arms_table(doc *d, const rj_val *p) {
    const rj_val *a = rj_path(p, "arms.a"), *b = rj_path(p, "arms.b");
    if (!a && !b)
        return;
    rh_raw(
        d,
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
        rh_out(d, "<tr><th>%s</th><td>", rows[i][0]);
        rh_val(d, va, 400);
        rh_raw(d, "</td><td>");
        rh_val(d, vb, 400);
        rh_raw(d, "</td></tr>\n");
    }
    /* stages: layers, device, ranks */
    rh_raw(d, "<tr><th>stages (layers @ device \xc3\x97 ranks)</th>");
    for (int k = 0; k < 2; k++) {
        const rj_val *st = rj_get(k ? b : a, "stages");
        rh_raw(d, "<td>");
        if (!rj_is(st, RJ_ARR))
            rh_raw(d, "<span class=\"na\">\xe2\x80\x94</span>");
        for (size_t i = 0; st && st->type == RJ_ARR && i < st->len && i < 256; i++) {
            const rj_val *s = &st->items[i];
            if (i)
                rh_raw(d, ", ");
            rh_valp(d, s, "layer_begin");
            rh_raw(d, "\xe2\x80\x93");
            rh_valp(d, s, "layer_end");
            rh_raw(d, " @ ");
            rh_valp(d, s, "device");
            rh_raw(d, " \xc3\x97 ");
            rh_valp(d, s, "ranks");
        }
        rh_raw(d, "</td>");
    }
    rh_raw(d, "</tr>\n</table>\n");
}

static void plugins_table(doc *d, const rj_val *p) {
    const rj_val *pl = rj_get(p, "plugins");
    if (!rj_is(pl, RJ_ARR))
        return;
    rh_raw(d, "<h3>Plugins loaded</h3>\n<table><tr><th>name</th><th>kind</th><th>version</th><th>sha256</th>"
              "<th>file</th><th>from $MEMRA_PLUGIN_PATH</th></tr>\n");
    for (size_t i = 0; i < pl->len; i++) {
        const rj_val *x = &pl->items[i];
        rh_raw(d, rj_true(rj_get(x, "shadows")) ? "<tr class=\"warn\"><td>" : "<tr><td>");
        rh_valp(d, x, "name");
        rh_raw(d, "</td><td>");
        rh_valp(d, x, "kind");
        rh_raw(d, "</td><td>");
        rh_valp(d, x, "version");
        rh_raw(d, "</td><td class=\"mono\">");
        rh_valp(d, x, "sha256");
        rh_raw(d, "</td><td class=\"mono\">");
        rh_valp(d, x, "path");
        rh_raw(d, "</td><td>");
        rh_valp(d, x, "from_env");
        rh_raw(d, rj_true(rj_get(x, "shadows")) ? " (shadows memra's own)" : "");
        rh_raw(d, "</td></tr>\n");
    }
    rh_raw(d, "</table>\n");
    const rj_val *w = rj_get(p, "plugin_warnings");
    for (size_t i = 0; rj_is(w, RJ_ARR) && i < w->len; i++) {
        rh_raw(d, "<p class=\"warnbox\">plugin warning: ");
        rh_val(d, &w->items[i], 1000);
        rh_raw(d, "</p>\n");
    }
}

/* The sampler in words: greedy, or its temperature, top-k, top-p and seed. */
static void sampling_row(doc *d, const rj_val *sm) {
    rh_raw(d, "<tr><th>sampling</th><td>");
    const char *mode = rh_getstr(sm, "mode");
    if (rh_streq(mode, "greedy"))
        rh_raw(d, "greedy (the most likely token at each step)");
    else if (rh_streq(mode, "sampled")) {
        double t, k, pp;
        char b1[32];
        rh_raw(d, "sampled: temperature ");
        rh_raw(d, rh_getnum(sm, "temperature", &t) ? rh_num_text(t, b1, sizeof b1, "%g") : "?");
        rh_raw(d, ", top-k ");
        if (rh_getnum(sm, "top_k", &k) && k == 0)
            rh_raw(d, "all");
        else
            rh_valp(d, sm, "top_k");
        rh_raw(d, ", top-p ");
        if (rh_getnum(sm, "top_p", &pp) && pp >= 1)
            rh_raw(d, "1 (no cut)");
        else
            rh_valp(d, sm, "top_p");
        rh_raw(d, ", seed ");
        rh_valp(d, sm, "seed");
    } else
        rh_val(d, sm, 600);
    rh_raw(d, "</td></tr>\n");
}

/* The prompt: its text's first line (and how much more there is) for a text prompt, else where
 * the ids came from. */
static void prompt_row(doc *d, const rj_val *pr) {
    const rj_val *text = rj_get(pr, "text");
    rh_raw(d, "<tr><th>prompt</th><td>");
    if (rj_is(text, RJ_STR)) {
        const char *nl = memchr(text->s, '\n', text->len);
        size_t first = nl ? (size_t)(nl - text->s) : text->len, lines = 1;
        for (size_t i = 0; i < text->len; i++)
            lines += text->s[i] == '\n' && i + 1 < text->len;
        rh_raw(d, "<q>");
        rh_esc_n(d, text->s, first, 300);
        rh_raw(d, "</q>");
        if (lines > 1)
            rh_out(d, " <span class=\"note\">(the first of %zu lines)</span>", lines);
        if (rj_get(pr, "n_tokens")) {
            rh_raw(d, " <span class=\"note\">");
            rh_valp(d, pr, "n_tokens");
            rh_raw(d, " tokens</span>");
        }
    } else
        rh_valp(d, pr, "source");
    rh_raw(d, "</td></tr>\n");
}

void rh_protocol_section(doc *d, const gate *g) {
    if (!g->protocol) {
        rh_raw(d, "<p class=\"note\">No protocol record: the run stopped before its arms opened (a usage or setup "
                  "error), or its first records are not in this file.</p>\n");
        return;
    }
    const rj_val *p = &g->protocol->v;
    rh_raw(d, "<h3>Protocol</h3>\n<table class=\"kv\">\n");
    rh_kv(d, "model", rj_path(p, "model.label"));
    rh_kv(d, "model name", rj_path(p, "model.name"));
    rh_kv(d, "model arch", rj_path(p, "model.arch"));
    rh_kv(d, "model sha256", rj_path(p, "model.sha256"));
    rh_out(d, "<tr><th>shape</th><td>");
    rh_raw(d, "vocab ");
    rh_valp(d, p, "model.n_vocab");
    rh_raw(d, ", layers ");
    rh_valp(d, p, "model.n_layer");
    rh_raw(d, ", embedding ");
    rh_valp(d, p, "model.n_embd");
    rh_raw(d, "</td></tr>\n");
    rh_kv(d, "exactness mode", rj_get(p, "compare"));
    if (rj_get(p, "nmse_tolerance"))
        rh_kv(d, "nmse tolerance", rj_get(p, "nmse_tolerance"));
    rh_kv(d, "differ by design", rj_get(p, "differ_by_design"));
    rh_kv(d, "arms identical", rj_get(p, "arms_identical"));
    if (rj_true(rj_get(p, "auto_arms")))
        rh_kv(d, "arms picked because", rj_get(p, "auto_reason"));
    rh_out(d, "<tr><th>steps</th><td>");
    rh_valp(d, p, "prime");
    rh_raw(d, " prime + ");
    rh_valp(d, p, "gen");
    rh_raw(d, " generated; ");
    rh_valp(d, p, "rows");
    rh_raw(d, " timing rows, schedule ");
    rh_valp(d, p, "schedule");
    rh_raw(d, " (");
    rh_valp(d, p, "blocks");
    rh_raw(d, ")</td></tr>\n");
    sampling_row(d, rj_get(p, "sampling"));
    prompt_row(d, rj_get(p, "prompt"));
    rh_kv(d, "prompt sha256", rj_path(p, "prompt.sha256"));
    rh_kv(d, "refusal cells", rj_get(p, "cells"));
    rh_kv(d, "memra version", rj_get(p, "memra_version"));
    if (rh_getstr(p, "commit"))
        rh_kv(d, "commit", rj_get(p, "commit"));
    else
        rh_raw(
            d,
            "<tr><th>commit</th><td><span class=\"na\">not recorded (records of a memra-gate from before "
            "the protocol carried its commit; memra_version above, the plugin files' sha256 below)</span></td></tr>\n");
    rh_raw(d, "<tr><th>machine</th><td>");
    for (int k = 0; k < 2; k++) {
        const rj_val *arm = rj_path(p, k ? "arms.b" : "arms.a");
        rh_out(d, "%sarm %c: ", k ? "; " : "", k ? 'b' : 'a');
        rh_valp(d, arm, "backend");
        rh_raw(d, " ");
        rh_valp(d, arm, "backend_version");
        const rj_val *dev = rj_get(arm, "resolved");
        if (rj_get(dev, "devices")) {
            rh_raw(d, ", devices ");
            rh_valp(d, dev, "devices");
        }
        if (rj_get(dev, "threads")) {
            rh_raw(d, ", threads ");
            rh_valp(d, dev, "threads");
        }
    }
    rh_raw(d, " <span class=\"na\">(as the arms resolved; the host is not recorded)</span></td></tr>\n");
    rh_kv(d, "timing scope", rj_get(p, "timing_scope"));
    rh_kv(d, "shared upload", rj_path(p, "shared_upload.reason"));
    if (rj_true(rj_get(p, "profile")))
        rh_kv(d, "profile", rj_get(p, "profile_order"));
    rh_raw(d, "</table>\n");
    arms_table(d, p);
    plugins_table(d, p);
}

/* ---- summary ---------------------------------------------------------------------------------- */

void rh_summary_section(doc *d, const gate *g) {
    if (!g->summary)
        return;
    const rj_val *s = &g->summary->v;
    rh_raw(d, "<h3>Summary</h3>\n<table class=\"kv\">\n");
    rh_out(d, "<tr><th>steps compared</th><td>");
    rh_valp(d, s, "steps_compared");
    rh_raw(d, " of ");
    rh_valp(d, s, "steps");
    rh_raw(d, "; bad ");
    rh_valp(d, s, "bad_steps");
    rh_raw(d, "; non-finite ");
    rh_valp(d, s, "nonfinite_steps");
    rh_raw(d, "; digests compared at ");
    rh_valp(d, s, "digest_steps");
    rh_raw(d, " steps</td></tr>\n");
    rh_kv(d, "first mismatch", rj_get(s, "first_mismatch"));
    rh_kv(d, "max NMSE", rj_get(s, "max_nmse"));
    rh_out(d, "<tr><th>token agreement</th><td>");
    rh_valp(d, s, "tokens_agree");
    rh_raw(d, " / ");
    rh_valp(d, s, "tokens_compared");
    rh_raw(d, "</td></tr>\n<tr><th>timing rows</th><td>");
    rh_valp(d, s, "rows");
    rh_raw(d, " run; ");
    rh_valp(d, s, "row_failures");
    rh_raw(d, " failed; ");
    rh_valp(d, s, "rows_ineligible");
    rh_raw(d, " ineligible; done ");
    rh_valp(d, s, "timing_done");
    rh_raw(d, "</td></tr>\n");
    if (rj_get(s, "carry_check"))
        rh_kv(d, "carry check", rj_get(s, "carry_check"));
    if (rj_get(s, "profile"))
        rh_kv(d, "profile", rj_get(s, "profile"));
    rh_kv(d, "refusal cells", rj_get(s, "refusal_cells"));
    rh_kv(d, "epoch census", rj_get(s, "epoch_census"));
    if (rj_get(s, "dump_graphs"))
        rh_kv(d, "dump graphs", rj_get(s, "dump_graphs"));
    rh_raw(d, "</table>\n");
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

void rh_census_section(doc *d, const gate *g) {
    bool any = false;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "census") != 0)
            continue;
        if (!any)
            rh_raw(d, "<h3>Census</h3>\n");
        any = true;
        const rj_val *v = &r->v;
        rh_raw(d, "<table class=\"kv\"><tr><th>arm, scope</th><td>");
        rh_valp(d, v, "arm");
        rh_raw(d, ", ");
        rh_valp(d, v, "scope");
        rh_out(d, " <span class=\"note\">(line %" PRIu64 ")</span></td></tr>\n", r->line);
        rh_out(d, "<tr><th>steps, captures, replays</th><td>");
        rh_valp(d, v, "steps");
        rh_raw(d, ", ");
        rh_valp(d, v, "captures");
        rh_raw(d, ", ");
        rh_valp(d, v, "replays");
        rh_raw(d, "</td></tr>\n");
        if (rj_get(v, "error"))
            rh_kv(d, "error", rj_get(v, "error"));
        const rj_val *rows = rj_get(v, "rows");
        for (size_t k = 0; rj_is(rows, RJ_ARR) && k < rows->len; k++) {
            rh_out(d, "<tr><th>");
            rh_valp(d, &rows->items[k], "kind");
            rh_raw(d, "</th><td>");
            rh_valp(d, &rows->items[k], "count");
            rh_raw(d, "</td></tr>\n");
        }
        if (rj_get(v, "dump_dir")) {
            rh_kv(d, "dump dir", rj_get(v, "dump_dir"));
            rh_kv(d, "dumped", rj_get(v, "dumped_count"));
            if (rj_get(v, "dump_error"))
                rh_kv(d, "dump error", rj_get(v, "dump_error"));
        }
        rh_raw(d, "</table>\n");
        const rj_val *e = rj_get(v, "epochs");
        if (!e)
            continue;
        rh_raw(d, "<p>Epoch census: collective ");
        rh_valp(d, e, "collective");
        rh_raw(d, ", ");
        rh_valp(d, e, "steps");
        rh_raw(d, " steps, ");
        rh_valp(d, e, "checks");
        rh_raw(d, " checks, ");
        rh_valp(d, e, "per_step");
        rh_raw(d, " per block and step, ");
        rh_valp(d, e, "failures");
        rh_raw(d, " failures");
        if (rj_str(rj_get(e, "failure"))) {
            rh_raw(d, ": <b>");
            rh_valp(d, e, "failure");
            rh_raw(d, "</b>");
        }
        rh_raw(d, ".</p>\n<table><tr><th>stage</th><th>rank</th><th>epochs per block at the end</th>"
                  "<th>expected</th></tr>\n");
        const rj_val *ranks = rj_get(e, "ranks");
        for (size_t k = 0; rj_is(ranks, RJ_ARR) && k < ranks->len; k++) {
            const rj_val *x = &ranks->items[k];
            bool same = int_arrays_equal(rj_get(x, "epochs"), rj_get(x, "expected"));
            rh_raw(d, same ? "<tr><td>" : "<tr class=\"bad\"><td>");
            rh_valp(d, x, "stage");
            rh_raw(d, "</td><td>");
            rh_valp(d, x, "rank");
            rh_raw(d, "</td><td class=\"mono\">");
            rh_valp(d, x, "epochs");
            rh_raw(d, "</td><td class=\"mono\">");
            rh_raw(d, same ? "the same" : "");
            if (!same)
                rh_valp(d, x, "expected");
            rh_raw(d, "</td></tr>\n");
        }
        rh_raw(d, "</table>\n");
    }
}

void rh_refusal_section(doc *d, const gate *g) {
    bool any = false;
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "refusal") != 0)
            continue;
        if (!any)
            rh_raw(d, "<h3>Refusal cells</h3>\n<table><tr><th>arm</th><th>cell</th><th>stage</th><th>rank</th>"
                      "<th>layer</th><th>block</th><th>position</th><th>observed</th><th>names the cell</th>"
                      "<th>digests unchanged</th><th>quarantined</th><th>pass</th><th>why not</th></tr>\n");
        any = true;
        const rj_val *v = &r->v;
        bool pass = rj_true(rj_get(v, "pass"));
        rh_raw(d, pass ? "<tr><td>" : "<tr class=\"bad\"><td>");
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
                rh_raw(d, "</td><td>");
            rh_valp(d, v, cols[c]);
        }
        rh_raw(d, "</td></tr>\n");
    }
    if (any)
        rh_raw(d, "</table>\n");
}

/* The bisect of a failing gate: the first site where the arms part, both values, and on each arm
 * the stage and rank that hold the element. */
void rh_bisect_section(doc *d, const gate *g) {
    for (size_t i = 0; i < g->n; i++) {
        const rec *r = &d->recs[g->idx[i]];
        if (strcmp(r->kind, "bisect") != 0)
            continue;
        const rj_val *v = &r->v;
        bool found = rj_true(rj_get(v, "found"));
        rh_raw(d, "<h3>Bisect: the first op where the arms part</h3>\n<table class=\"kv\">\n");
        rh_out(d, "<tr%s><th>first differing site</th><td>", found ? " class=\"bad\"" : "");
        if (found) {
            rh_raw(d, "<b>layer ");
            rh_valp(d, v, "layer");
            rh_raw(d, " ");
            rh_valp(d, v, "site");
            rh_raw(d, "</b> (tensor ");
            rh_valp(d, v, "tensor");
            rh_raw(d, ") at step ");
            rh_valp(d, v, "step");
        } else {
            rh_raw(d, "none named: ");
            rh_valp(d, v, "note");
        }
        rh_raw(d, "</td></tr>\n");
        if (found) {
            rh_out(d, "<tr><th>first differing element</th><td>[");
            rh_valp(d, v, "index");
            rh_raw(d, "]: a ");
            rh_valp(d, v, "a.value.value");
            rh_raw(d, " (");
            rh_valp(d, v, "a.value.bits");
            rh_raw(d, "), b ");
            rh_valp(d, v, "b.value.value");
            rh_raw(d, " (");
            rh_valp(d, v, "b.value.bits");
            rh_raw(d, "), ");
            rh_valp(d, v, "ulp");
            rh_raw(d, " ulp</td></tr>\n<tr><th>tensor</th><td>");
            rh_valp(d, v, "differing");
            rh_raw(d, " of ");
            rh_valp(d, v, "elements");
            rh_raw(d, " elements differ; NMSE ");
            rh_valp(d, v, "nmse");
            rh_raw(d, "</td></tr>\n");
            static const char *const arms[2] = {"a", "b"};
            for (int k = 0; k < 2; k++) {
                char path[32];
                rh_out(d, "<tr><th>held on arm %s</th><td>stage ", arms[k]);
                snprintf(path, sizeof path, "%s.stage", arms[k]);
                rh_valp(d, v, path);
                snprintf(path, sizeof path, "%s.rank", arms[k]);
                const rj_val *rank = rj_get(v, arms[k]) ? rj_get(rj_get(v, arms[k]), "rank") : NULL;
                if (rj_is(rank, RJ_NUM)) {
                    rh_raw(d, ", rank ");
                    rh_valp(d, v, path);
                } else
                    rh_raw(d, ", every rank");
                rh_raw(d, " of ");
                snprintf(path, sizeof path, "%s.ranks", arms[k]);
                rh_valp(d, v, path);
                rh_raw(d, "</td></tr>\n");
            }
            rh_kv(d, "cause", rj_get(v, "cause"));
        }
        rh_kv(d, "last site that agreed", rj_get(v, "last_agreed"));
        rh_kv(d, "sites agreed", rj_get(v, "agreed"));
        rh_kv(d, "reproduced on a", rj_get(rj_get(v, "a"), "reproduced"));
        rh_kv(d, "reproduced on b", rj_get(rj_get(v, "b"), "reproduced"));
        rh_kv(d, "how", rj_get(v, "from"));
        rh_raw(d, "</table>\n");
    }
}
