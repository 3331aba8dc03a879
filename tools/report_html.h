/* report_html.h: what the parts of the report page share (report_html.c: the records, the page
 * and each gate's frame; report_html_out.c: text, values and chart primitives; report_html_gate.c:
 * the answer, protocol, summary, bisect, census and refusal tables; report_html_charts.c: the timing rows,
 * the step map and the bench records). Internal to memra_report: the public interface is report.h. */
#ifndef MEMRA_TOOLS_REPORT_HTML_H
#define MEMRA_TOOLS_REPORT_HTML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "report.h"
#include "report_json.h"

#define COL_A "#1f6fb4"
#define COL_B "#e0700b"

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

/* The gate's status: class and words. */
typedef struct status_text {
    const char *cls;
    char word[64];
    bool pass;
} status_text;

/* A chart's frame. */
typedef struct frame {
    double x0, y0, w, h; /* the plot area in SVG units */
    double xlo, xhi, ylo, yhi;
    bool ylog; /* y values are log10 already; ticks are labelled 1e{k} */
} frame;

/* What a chart draws: a finite value within +-AXIS_MAX (see rh_drawable). */
#define AXIS_MAX 1e300

/* report_html.c */
bool rh_known_gate_kind(const char *k);
status_text rh_gate_status(const gate *g);

/* report_html_out.c: text (escaped for HTML and SVG), values in words, numbers */
void rh_out(doc *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rh_raw(doc *d, const char *s);
void rh_esc_n(doc *d, const char *s, size_t n, size_t max);
void rh_esc(doc *d, const char *s);
void rh_val(doc *d, const rj_val *v, size_t max);
void rh_val_json(doc *d, const rj_val *v, size_t max);
void rh_valp(doc *d, const rj_val *v, const char *path);
void rh_kv(doc *d, const char *key, const rj_val *v);
const char *rh_num_text(double x, char *buf, size_t size, const char *fmt);
bool rh_getnum(const rj_val *v, const char *path, double *x);
const char *rh_getstr(const rj_val *v, const char *path);
bool rh_streq(const char *a, const char *b);
/* report_html_out.c: chart primitives */
double rh_tick_step(double span, int n);
bool rh_drawable(double x);
double rh_coord(double c);
double rh_fx(const frame *f, double x);
double rh_fy(const frame *f, double y);
void rh_svg_open(doc *d, double w, double h, const char *label);
void rh_axes(doc *d, const frame *f, const char *ytitle, const char *xtitle);

/* report_html_gate.c */
bool rh_ratio_of(const rj_val *sm, double *r, double *c0, double *c1, bool *have_ci);
void rh_answer(doc *d, const gate *g);
void rh_protocol_section(doc *d, const gate *g);
void rh_summary_section(doc *d, const gate *g);
void rh_census_section(doc *d, const gate *g);
void rh_refusal_section(doc *d, const gate *g);
void rh_bisect_section(doc *d, const gate *g);

/* report_html_charts.c */
void rh_timing_section(doc *d, const gate *g);
void rh_step_map(doc *d, const gate *g);
void rh_bench_section(doc *d);

#endif
