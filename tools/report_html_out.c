/* report_html_out.c: the report page's text, values in words, numbers and chart primitives. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "report_html.h"

/* ---- output helpers ------------------------------------------------------------------------- */

void rh_out(doc *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(d->out, fmt, ap);
    va_end(ap);
}

void rh_raw(doc *d, const char *s) { fputs(s, d->out); }

/* Text for HTML and SVG (XML): markup characters as entities; control characters, DEL and the
 * noncharacters U+FFFE and U+FFFF (not allowed in XML) as visible \uXXXX. The input is valid UTF-8
 * (the parser made sure). At most max bytes (0: all), then an ellipsis. */
void rh_esc_n(doc *d, const char *s, size_t n, size_t max) {
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

void rh_esc(doc *d, const char *s) {
    if (s)
        rh_esc_n(d, s, strlen(s), 0);
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

void rh_val(doc *d, const rj_val *v, size_t max) {
    if (!v || v->type == RJ_NULL) {
        rh_raw(d, "<span class=\"na\">\xe2\x80\x94</span>");
        return;
    }
    if (v->type == RJ_STR) {
        rh_esc_n(d, v->s, v->len, max);
        return;
    }
    if (v->type == RJ_NUM) {
        rh_esc(d, v->s);
        return;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) {
        rh_raw(d, "(out of memory)");
        return;
    }
    words_text(m, v);
    if (fclose(m) == 0 && buf)
        rh_esc_n(d, buf, len, max);
    free(buf);
}

/* A value as the JSON text it was written as (the records of an unknown kind). */
void rh_val_json(doc *d, const rj_val *v, size_t max) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) {
        rh_raw(d, "(out of memory)");
        return;
    }
    json_text(m, v);
    if (fclose(m) == 0 && buf)
        rh_esc_n(d, buf, len, max);
    free(buf);
}

void rh_valp(doc *d, const rj_val *v, const char *path) { rh_val(d, rj_path(v, path), 400); }

/* A key-value row of a table. */
void rh_kv(doc *d, const char *key, const rj_val *v) {
    rh_out(d, "<tr><th>%s</th><td>", key);
    rh_val(d, v, 600);
    rh_raw(d, "</td></tr>\n");
}

/* A number for the page in fmt ("%.2f"), or in 6 significant digits where fmt would write a long
 * run of digits (beyond 1e9) or lose it (below 1e-4); never "inf" or "nan": a value that is not a
 * finite number (an overflow of arithmetic on huge record values) is "out of range". */
const char *rh_num_text(double x, char *buf, size_t size, const char *fmt) {
    if (!isfinite(x))
        snprintf(buf, size, "%s", "out of range");
    else if (fabs(x) >= 1e9 || (x != 0 && fabs(x) < 1e-4))
        snprintf(buf, size, "%.6g", x);
    else
        snprintf(buf, size, fmt, x + 0.0); /* + 0.0: -0 is 0 */
    return buf;
}

bool rh_getnum(const rj_val *v, const char *path, double *x) { return rj_num(rj_path(v, path), x); }

const char *rh_getstr(const rj_val *v, const char *path) { return rj_str(rj_path(v, path)); }

bool rh_streq(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

/* ---- charts ----------------------------------------------------------------------------------- */

/* A tidy step for about n ticks over span. */
double rh_tick_step(double span, int n) {
    if (!(span > 0))
        return 1;
    double raw_step = span / n, mag = pow(10, floor(log10(raw_step))), r = raw_step / mag;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

/* What a chart draws: a finite value within +-1e300, so that the axis around it (its span, padding
 * and ticks) stays finite. Anything else is "not drawn" (the tables show it as written). */
bool rh_drawable(double x) { return isfinite(x) && fabs(x) <= AXIS_MAX; }

/* A coordinate in the SVG: finite always (the charts draw only drawable values within finite
 * frames; this keeps a slip from ever writing "nan" or "inf" into the page). */
double rh_coord(double c) { return isfinite(c) ? fmax(-1e6, fmin(1e6, c)) : 0; }

double rh_fx(const frame *f, double x) {
    return rh_coord(f->x0 + (f->xhi > f->xlo ? (x - f->xlo) / (f->xhi - f->xlo) : 0.5) * f->w);
}
double rh_fy(const frame *f, double y) {
    return rh_coord(f->y0 + f->h - (f->yhi > f->ylo ? (y - f->ylo) / (f->yhi - f->ylo) : 0.5) * f->h);
}

void rh_svg_open(doc *d, double w, double h, const char *label) {
    rh_out(d, "<svg width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"", w, h, w, h);
    rh_esc(d, label);
    rh_raw(d, "\">\n");
}

/* Axes, grid, y ticks and an axis title; x ticks at integers (every k-th). */
void rh_axes(doc *d, const frame *f, const char *ytitle, const char *xtitle) {
    rh_out(d, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#bbb\"/>\n", f->x0,
           f->y0, f->w, f->h);
    /* tick labels: + 0.0 turns -0 into 0 (ceil(-0.5) is -0), so no label reads "-0" */
    double st = f->ylog ? 1 : rh_tick_step(f->yhi - f->ylo, 5);
    int ticks = 0;
    for (double t = ceil(f->ylo / st) * st; t <= f->yhi + st * 1e-9 && ticks < 64; t += st, ticks++) {
        double y = rh_fy(f, t);
        rh_out(d, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", f->x0, y, f->x0 + f->w,
               y);
        if (f->ylog)
            rh_out(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">1e%.0f</text>\n", f->x0 - 4, y + 4, t + 0.0);
        else
            rh_out(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", f->x0 - 4, y + 4,
                   fabs(t) < st * 1e-6 ? 0.0 : t);
    }
    double xs = rh_tick_step(f->xhi - f->xlo, 10);
    if (xs < 1)
        xs = 1;
    ticks = 0;
    for (double t = ceil(f->xlo / xs) * xs; t <= f->xhi + 1e-9 && ticks < 64; t += xs, ticks++)
        rh_out(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", rh_fx(f, t), f->y0 + f->h + 14,
               t + 0.0);
    rh_out(d, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", f->x0 + f->w / 2, f->y0 + f->h + 30);
    rh_esc(d, xtitle);
    rh_out(d, "</text>\n<text x=\"12\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 12 %.1f)\">",
           f->y0 + f->h / 2, f->y0 + f->h / 2);
    rh_esc(d, ytitle);
    rh_raw(d, "</text>\n");
}
