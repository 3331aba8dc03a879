/* test_report.c: issue 18, the HTML report of the records (memra report, memra-gate --html).
 *
 * The strict JSON parser (what it accepts and refuses), the renderer on malformed, truncated and
 * unknown records, the pages of committed record files of real gates (a pass, a failing step, a
 * failing cache digest, a failing timing row, an nmse pass with tensor-parallel census and refusal
 * cells, an nmse failure, bench records, all of them in one file), pages of live gates (--html of a
 * passing, a failing, an nmse and an interrupted gate), and memra report's exit codes. Each page
 * is checked by check_html.py: the tags balance, every SVG is well-formed XML, no script and no
 * external URL, and the texts expected (PASS or FAIL, the first mismatch's step). Every check has a
 * negative control that makes it fail. Where a headless browser is installed, a screenshot of a
 * page must not be blank (and one of an empty page must be).
 *
 * Issue 23 (items 6, 7): the records read by jansson in time proportional to their size (a record
 * of 200,000 members, 10 MB of records), a complete last line that is no record is an error, and
 * huge, tiny or zero values never put a non-finite number into the page. Issue 31 (item 5): the
 * answer (verdict, b/a with its interval in words, each arm's tok/s) before the protocol, values in
 * words, the prompt's first line, the commit, the multi-gate table's speed columns, and
 * memra-gate --html saying where it wrote the page. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gate_harness.h"
#include "report.h"
#include "report_json.h"
#include "test_files.h"
#include "tool_run.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

static char dir[1024];

static void setup(void) { tmp_dir_make(dir, sizeof dir, NULL, "report"); }
static void teardown(void) { tmp_dir_remove(dir); }

TestSuite(report, .init = setup, .fini = teardown);

static const char *src_dir(void) {
    const char *d = getenv("MEMRA_SOURCE_DIR");
    cr_assert(d && *d, "MEMRA_SOURCE_DIR is not set (run through ctest)");
    return d;
}

static const char *fixture(const char *name) {
    static char path[2048];
    snprintf(path, sizeof path, "%s/tests/report/fixtures/%s", src_dir(), name);
    return path;
}

static bool have_python(void) {
    return system("python3 -c 'import html.parser, xml.dom.minidom' >/dev/null 2>&1") == 0;
}

static void need_python(void) {
    if (!have_python())
        cr_skip_test("python3 (with html.parser and xml.dom.minidom) is not installed: the page checks need it");
}

/* Runs a shell command; its exit code, its output in out (at most size bytes). */
static int sh(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sh(char *out, size_t size, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char log[1200];
    snprintf(log, sizeof log, "%s/sh.log", dir);
    char full[9400];
    int k = snprintf(full, sizeof full, "(%.8000s) >'%.1200s' 2>&1", cmd, log);
    cr_assert(k > 0 && (size_t)k < sizeof full, "command too long");
    int rc = system(full);
    if (out && size) {
        out[0] = '\0';
        FILE *f = fopen(log, "r");
        if (f) {
            size_t n = fread(out, 1, size - 1, f);
            out[n] = '\0';
            fclose(f);
        }
    }
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* check_html.py on page with the extra arguments (each --expect TEXT already quoted). */
static int check_page(const char *page, const char *extra, char *why, size_t size) {
    return sh(why, size, "python3 '%s/tests/report/check_html.py' '%s' %s", src_dir(), page, extra ? extra : "");
}

static void expect_good_page(const char *page, const char *extra) {
    char why[4096];
    int rc = check_page(page, extra, why, sizeof why);
    cr_assert_eq(rc, 0, "%s fails the page checks (exit %d):\n%s", page, rc, why);
}

/* memra report FIXTURE -o DIR/NAME.html, expecting exit 0; the page's path. */
static const char *report_of(const char *input, const char *name) {
    static char page[2048];
    snprintf(page, sizeof page, "%s/%s.html", dir, name);
    tool_result r = tool_run("memra", "report", input, "-o", page, NULL);
    cr_assert_eq(r.code, 0, "memra report %s: exit %d\n%s", input, r.code, r.err);
    cr_assert(strstr(r.err, "wrote"), "%s", r.err);
    tool_result_free(&r);
    return page;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    cr_assert_eq(fclose(f), 0);
}

/* Renders text in memory. */
static report_status render(const char *text, char **page, report_diag *diag) {
    size_t len = 0;
    FILE *m = open_memstream(page, &len);
    cr_assert_not_null(m);
    report_status st = report_render(m, "test", text, strlen(text), diag);
    cr_assert_eq(fclose(m), 0);
    return st;
}

/* ---- the parser ------------------------------------------------------------------------------- */

static bool parses(const char *text, char *why, size_t size) {
    rj_arena a = {0};
    rj_val v;
    bool oom = false;
    bool ok = rj_parse(&a, text, strlen(text), &v, why, size, &oom);
    rj_arena_free(&a);
    return ok;
}

Test(report, parser_accepts_valid_json) {
    const char *good[] = {"{}",
                          "[]",
                          " {\"a\": [1, -0, 0.5, 1e3, -2.5E-7, true, false, null]} ",
                          "\"\\u00e9\\ud83d\\ude00\"",
                          "{\"s\":\"tab\\t nl\\n quote\\\" slash\\/ back\\\\\"}",
                          "{\"u\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}",
                          "18446744073709551615",
                          "{\"a\":{\"a\":{\"a\":1}}}"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char why[256] = "";
        cr_expect(parses(good[i], why, sizeof why), "refused %s: %s", good[i], why);
    }
    rj_arena a = {0};
    rj_val v;
    const char *t = "{\"record\":\"x\",\"n\":-12,\"f\":2.5,\"s\":\"a\\u0000b\",\"pair\":\"\\ud83d\\ude00\"}";
    cr_assert(rj_parse(&a, t, strlen(t), &v, NULL, 0, NULL));
    int64_t n = 0;
    double f = 0;
    cr_assert(rj_int(rj_get(&v, "n"), &n) && n == -12);
    cr_assert(rj_num(rj_get(&v, "f"), &f) && f == 2.5);
    cr_assert(!rj_int(rj_get(&v, "f"), &n), "2.5 is no integer");
    cr_assert_eq(rj_get(&v, "s")->len, 3, "\\u0000 is kept inside the string");
    cr_assert_str_eq(rj_str(rj_get(&v, "pair")), "\xf0\x9f\x98\x80");
    cr_assert_str_eq(rj_str(rj_path(&v, "record")), "x");
    cr_assert_null(rj_get(&v, "absent"));
    rj_arena_free(&a);
}

Test(report, parser_refuses_what_json_does_not_allow) {
    char deep[200] = "";
    for (int i = 0; i < RJ_MAX_DEPTH + 1; i++)
        strcat(deep, "[");
    const struct {
        const char *text, *why;
    } bad[] = {
        {"", "end of file"},
        {"{\"a\":1,}", "string or '}' expected"},
        {"[1,]", "unexpected token"},
        {"{\"a\":01}", "invalid token near '0'"}, /* a leading zero */
        {"{\"a\":1.}", "invalid token near '1.'"},
        {"{\"a\":NaN}", "invalid token near 'NaN'"},
        {"{\"a\":Infinity}", "invalid token near 'Infinity'"},
        {"{'a':1}", "string or '}' expected"},
        {"{\"a\":1} x", "end of file expected"},
        {"{\"a\":1}{}", "end of file expected"},
        {"{\"a\":\"x\ty\"}", "control character"},
        {"{\"a\":\"\\x\"}", "invalid escape"},
        {"{\"a\":\"\\ud800\"}", "invalid Unicode"},
        {"{\"a\":\"\\udc00\"}", "invalid Unicode"},
        {"{\"a\":\"\xff\"}", "unable to decode byte"},
        {"{\"a\":\"\xc0\xaf\"}", "unable to decode byte"},         /* overlong */
        {"{\"a\":\"\xed\xa0\x80\"}", "unable to decode byte"},     /* a surrogate in UTF-8 */
        {"{\"a\":\"\xf4\x90\x80\x80\"}", "unable to decode byte"}, /* beyond U+10FFFF */
        {"{\"a\":\"cut", "premature end of input"},
        {"{\"a\":1,\"a\":2}", "duplicate object key"},
        {"{\"\\u0000\":1}", "NUL byte in object key"},
        {"{\"a\" 1}", "':' expected"},
        {"[1 2]", "']' expected"},
        {"tru", "invalid token"},
        {"// comment\n{}", "invalid token"},
        {"{\"a\":1e400}", "real number overflow"},
        {deep, "nested more than"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char why[256] = "";
        cr_expect(!parses(bad[i].text, why, sizeof why), "accepted %s", bad[i].text);
        cr_expect(strstr(why, bad[i].why) && strstr(why, "column "), "%s: '%s' lacks '%s'", bad[i].text, why,
                  bad[i].why);
    }
}

/* ---- the renderer on what is not a clean record file ------------------------------------------- */

Test(report, malformed_line_is_an_error_naming_it) {
    char *page = NULL;
    report_diag d;
    report_status st =
        render("{\"record\":\"verdict\",\"pass\":true}\n{\"record\":\"step\",}\n{\"record\":\"x\"}\n", &page, &d);
    cr_assert_eq(st, REPORT_MALFORMED);
    cr_assert_eq(d.error_line, 2);
    cr_assert(strstr(d.error, "line 2: column 18"), "%s", d.error);
    cr_assert(page == NULL || page[0] == '\0', "nothing is written for a malformed file: %s", page);
    free(page);
    /* not an object, no record member: malformed too */
    page = NULL;
    cr_assert_eq(render("[1]\n", &page, &d), REPORT_MALFORMED);
    cr_assert(strstr(d.error, "line 1") && strstr(d.error, "object"), "%s", d.error);
    free(page);
    page = NULL;
    cr_assert_eq(render("{\"kind\":\"step\"}\n", &page, &d), REPORT_MALFORMED);
    cr_assert(strstr(d.error, "\"record\""), "%s", d.error);
    free(page);
    page = NULL;
    cr_assert_eq(render("{\"record\":\"step\"}\n\n", &page, &d), REPORT_MALFORMED, "an empty line is malformed");
    cr_assert_eq(d.error_line, 2);
    free(page);
}

Test(report, truncated_last_line_is_reported_not_fatal) {
    char *page = NULL;
    report_diag d;
    report_status st =
        render("{\"record\":\"verdict\",\"pass\":false,\"exit\":1,\"reason\":\"r\"}\n{\"record\":\"ste", &page, &d);
    cr_assert_eq(st, REPORT_OK, "%s", d.error);
    cr_assert(d.truncated);
    cr_assert_eq(d.truncated_line, 2);
    cr_assert(strstr(page, "line 2) is cut short"), "%s", page);
    cr_assert_eq(d.records, 1);
    free(page);
    /* the same cut in the middle of the file is an error */
    page = NULL;
    st = render("{\"record\":\"ste\n{\"record\":\"verdict\"}\n", &page, &d);
    cr_assert_eq(st, REPORT_MALFORMED);
    cr_assert_eq(d.error_line, 1);
    free(page);
    /* a last line without its newline that parses is a record */
    page = NULL;
    cr_assert_eq(render("{\"record\":\"verdict\",\"pass\":true}", &page, &d), REPORT_OK);
    cr_assert(!d.truncated);
    cr_assert_eq(d.records, 1);
    free(page);
}

Test(report, unknown_kinds_are_listed_and_text_is_escaped) {
    char *page = NULL;
    report_diag d;
    const char *text = "{\"record\":\"frobnicate\",\"x\":1}\n"
                       "{\"record\":\"protocol\",\"arms\":{\"a\":{\"text\":\"<script>alert(1)</script>\"},"
                       "\"b\":{\"text\":\"b&amp;\\u0001\"}},\"compare\":\"exact\"}\n"
                       "{\"record\":\"widget\",\"note\":\"</svg><b>\"}\n"
                       "{\"record\":\"verdict\",\"pass\":true,\"exit\":0,\"reason\":\"ok\",\"mode\":\"exact\"}\n";
    cr_assert_eq(render(text, &page, &d), REPORT_OK, "%s", d.error);
    cr_assert_eq(d.unknown, 2);
    cr_assert_eq(d.gates, 1);
    cr_assert(strstr(page, "frobnicate") && strstr(page, "widget"), "unknown kinds are listed");
    cr_assert(strstr(page, "Records of an unknown kind outside any gate"), "%s", page);
    cr_assert_null(strstr(page, "<script"), "a record's text is escaped");
    cr_assert(strstr(page, "&lt;script&gt;alert(1)&lt;/script&gt;"));
    cr_assert(strstr(page, "b&amp;amp;\\u0001"), "a control character is shown, not written");
    cr_assert_null(strstr(page, "</svg><b>"));
    cr_assert(strstr(page, ">PASS<"), "%s", page);
    free(page);
    /* no records at all */
    page = NULL;
    cr_assert_eq(render("", &page, &d), REPORT_OK);
    cr_assert(strstr(page, "No records."));
    free(page);
}

Test(report, gates_are_split_at_protocol_and_verdict) {
    char *page = NULL;
    report_diag d;
    const char *text = "{\"record\":\"verdict\",\"pass\":false,\"exit\":2,\"reason\":\"usage\"}\n" /* alone */
                       "{\"record\":\"protocol\"}\n{\"record\":\"step\",\"step\":0,\"ok\":true}\n" /* cut */
                       "{\"record\":\"protocol\"}\n{\"record\":\"interrupted\",\"signal\":\"SIGTERM\",\"exit\":143}\n"
                       "{\"record\":\"protocol\"}\n"; /* still open */
    cr_assert_eq(render(text, &page, &d), REPORT_OK, "%s", d.error);
    cr_assert_eq(d.gates, 4);
    cr_assert_eq(d.failing_gates, 4);
    cr_assert(strstr(page, "FAIL: usage error (exit 2)"));
    cr_assert(strstr(page, "a new gate's protocol follows"), "%s", page);
    cr_assert(strstr(page, "INTERRUPTED by SIGTERM"));
    cr_assert(strstr(page, "INCOMPLETE"));
    free(page);
}

/* ---- issue 23, item 6: jansson, in time proportional to the input ------------------------------ */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A record of 200,000 members (the report's own parser took 26 s for 160,000: a scan of the
 * members read so far for a duplicate, quadratic) and a file of 10 MB of records each parse and
 * render in a few seconds; a duplicate member at the very end of the wide record is still found. */
Test(report, large_inputs_take_time_proportional_to_size, .timeout = 60) {
    const size_t members = 200000;
    size_t cap = members * 24 + 64, n = 0;
    char *wide = malloc(cap);
    cr_assert_not_null(wide);
    n += (size_t)snprintf(wide + n, cap - n, "{\"record\":\"widget\"");
    for (size_t i = 0; i < members; i++)
        n += (size_t)snprintf(wide + n, cap - n, ",\"m%zu\":%zu", i, i);
    n += (size_t)snprintf(wide + n, cap - n, "}\n");
    char *page = NULL;
    report_diag d;
    double t0 = now_s();
    cr_assert_eq(render(wide, &page, &d), REPORT_OK, "%s", d.error);
    double wide_s = now_s() - t0;
    cr_assert_eq(d.unknown, 1);
    free(page);
    cr_expect(wide_s < 5, "a record of %zu members took %.1f s", members, wide_s);
    /* the same record with its first member again at the end */
    n -= 2;
    n += (size_t)snprintf(wide + n, cap - n, ",\"m0\":1}\n");
    page = NULL;
    t0 = now_s();
    cr_assert_eq(render(wide, &page, &d), REPORT_MALFORMED);
    cr_assert(strstr(d.error, "duplicate object key"), "%s", d.error);
    cr_expect(now_s() - t0 < 5, "the duplicate took %.1f s to find", now_s() - t0);
    free(page);
    free(wide);
    /* 10 MB of records: the committed gates again and again, through memra report */
    char *one = file_slurp(fixture("pass.jsonl"), NULL), *other = file_slurp(fixture("nmse.jsonl"), NULL);
    const char *in = tmp_dir_path(dir, "big.jsonl");
    FILE *f = fopen(in, "wb");
    cr_assert_not_null(f);
    size_t total = 0;
    while (total < (size_t)10 << 20) {
        total += fwrite(one, 1, strlen(one), f);
        total += fwrite(other, 1, strlen(other), f);
    }
    cr_assert_eq(fclose(f), 0);
    free(one);
    free(other);
    t0 = now_s();
    tool_result r = tool_run("memra", "report", in, "-o", tmp_dir_path(dir, "big.html"), NULL);
    double big_s = now_s() - t0;
    cr_assert_eq(r.code, 0, "%s", r.err);
    tool_result_free(&r);
    cr_expect(big_s < 8, "10 MB of records took %.1f s", big_s);
}

/* ---- issue 23, item 7: the last line, and numbers a chart cannot draw ------------------------------ */

Test(report, complete_last_line_that_is_not_a_record_is_an_error) {
    const char *head = "{\"record\":\"verdict\",\"pass\":true,\"exit\":0,\"reason\":\"ok\"}\n";
    /* complete lines without their newline that are no record: errors naming line 2, as in the middle */
    const char *bad[] = {"[1]",
                         "{\"kind\":\"step\"}",
                         "{\"record\":\"step\"} x",
                         "{\"record\":\"step\",\"a\":NaN}",
                         "{\"record\":\"step\",\"a\":1,\"a\":2}",
                         "{\"record\":\"step\",}",
                         "{\"a\":1 2",
                         "42",
                         " \t "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512], *page = NULL;
        report_diag d;
        snprintf(text, sizeof text, "%s%s", head, bad[i]);
        cr_expect_eq(render(text, &page, &d), REPORT_MALFORMED, "%s: taken for a cut line (%s)", bad[i],
                     d.truncated_why);
        cr_expect_eq(d.error_line, 2, "%s", bad[i]);
        free(page);
    }
    /* lines that stop too soon: cut short, said, not fatal */
    const char *cut[] = {"{\"record\":\"st",
                         "{\"record\":\"step\",\"ok\":tr",
                         "{\"record\":\"step\",\"n\":1.",
                         "{\"record\":\"step\",\"n\":-",
                         "{\"record\":\"step\",\"t\":\"\xc3",
                         "{\"record\":\"step\",",
                         "{\"record\":\"step\",\"n\":12"};
    for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++) {
        char text[512], *page = NULL;
        report_diag d;
        snprintf(text, sizeof text, "%s%s", head, cut[i]);
        cr_expect_eq(render(text, &page, &d), REPORT_OK, "%s: %s", cut[i], d.error);
        cr_expect(d.truncated && d.truncated_line == 2, "%s is cut short", cut[i]);
        free(page);
    }
}

/* Records whose numbers are huge, tiny or zero: every chart's coordinates and every number in the
 * page's text are finite ("inf" and "nan" appear nowhere), the charts say what they did not draw. */
Test(report, huge_tiny_and_zero_values_never_write_a_non_finite_number) {
    char *proto = file_slurp(fixture("pass.jsonl"), NULL);
    *strchr(proto, '\n') = '\0'; /* its protocol record */
    char text[16384];
    snprintf(
        text, sizeof text,
        "%s\n"
        "{\"record\":\"measure\",\"row\":0,\"arm\":\"a\",\"tok_s\":1e300,\"verified\":true,\"eligible\":true,"
        "\"wall_ns\":1e300}\n"
        "{\"record\":\"measure\",\"row\":1,\"arm\":\"b\",\"tok_s\":1e-300,\"verified\":true,\"eligible\":true}\n"
        "{\"record\":\"measure\",\"row\":2,\"arm\":\"b\",\"tok_s\":0,\"verified\":true,\"eligible\":true}\n"
        "{\"record\":\"measure\",\"row\":3,\"arm\":\"a\",\"tok_s\":1.7e308,\"verified\":true,\"eligible\":true}\n"
        "{\"record\":\"summary\",\"arms\":{\"a\":{\"median_tok_s\":1.7e308},\"b\":{\"median_tok_s\":0}},"
        "\"ratio_b_over_a\":1.7e308,\"ratio_ci95\":[-1.7e308,1.7e308],\"timing_done\":true}\n"
        "{\"record\":\"verdict\",\"pass\":true,\"exit\":0,\"reason\":\"ok\",\"mode\":\"exact\"}\n"
        "{\"record\":\"bench\",\"tok_s\":[1.7e308,1e-300,0],\"tok_s_mean\":1.7e308,\"ceiling_gb_s\":1e300,"
        "\"bytes_per_token\":1e-300}\n"
        "{\"record\":\"bench\",\"tok_s\":[0,0],\"tok_s_mean\":0,\"ceiling_gb_s\":1e-300,\"bytes_per_token\":1e300}\n"
        "{\"record\":\"protocol\",\"compare\":\"nmse:1e-3\",\"nmse_tolerance\":1e-300}\n"
        "{\"record\":\"step\",\"step\":0,\"ok\":true,\"nmse\":1e-320}\n"
        "{\"record\":\"step\",\"step\":1,\"ok\":false,\"nmse\":1.7e308}\n"
        "{\"record\":\"step\",\"step\":2,\"ok\":true,\"nmse\":0}\n"
        "{\"record\":\"measure\",\"row\":0,\"arm\":\"a\",\"tok_s\":0,\"verified\":true,\"eligible\":true}\n"
        "{\"record\":\"measure\",\"row\":1,\"arm\":\"b\",\"tok_s\":0,\"verified\":true,\"eligible\":true}\n"
        "{\"record\":\"summary\",\"arms\":{\"a\":{\"median_tok_s\":0},\"b\":{\"median_tok_s\":0}},"
        "\"ratio_b_over_a\":1e-300,\"ratio_ci95\":[0,1e-300],\"timing_done\":true}\n",
        proto);
    free(proto);
    char *page = NULL;
    report_diag d;
    cr_assert_eq(render(text, &page, &d), REPORT_OK, "%s", d.error);
    cr_assert_eq(d.gates, 2);
    /* no inf or nan as a word of its own anywhere (coordinates, labels, titles, cells) */
    for (const char *p = page; *p; p++) {
        bool start = p == page || !(p[-1] >= 'a' && p[-1] <= 'z');
        if (start && (strncasecmp(p, "nan", 3) == 0 || strncasecmp(p, "inf", 3) == 0)) {
            char ctx[81];
            snprintf(ctx, sizeof ctx, "%.80s", p > page + 40 ? p - 40 : page);
            bool word = !((p[3] >= 'a' && p[3] <= 'z') || (p[3] >= 'A' && p[3] <= 'Z'));
            cr_assert(!word, "a non-finite number in the page: ...%s...", ctx);
        }
    }
    cr_assert(strstr(page, "not drawn"), "what a chart leaves out is said");
    if (have_python()) {
        const char *path = tmp_dir_path(dir, "extreme.html");
        write_file(path, page);
        expect_good_page(path, "--min-svg 4 --expect 'not drawn'");
    }
    free(page);
}

/* ---- issue 31, item 5: the page leads with the answer ------------------------------------------- */

static const char *at(const char *page, const char *what) {
    const char *p = strstr(page, what);
    cr_assert_not_null(p, "the page lacks '%s'", what);
    return p;
}

/* The first screen: verdict, then b/a with its interval and each arm's tok/s, then the protocol. No
 * cell holds raw JSON or a literal null; sampling and "not run" in words; tick labels never -0. */
Test(report, the_answer_comes_first_in_words) {
    char *text = file_slurp(fixture("pass.jsonl"), NULL), *page = NULL;
    report_diag d;
    cr_assert_eq(render(text, &page, &d), REPORT_OK, "%s", d.error);
    free(text);
    const char *protocol = at(page, "<h3>Protocol</h3>");
    cr_assert(at(page, ">PASS<") < protocol);
    cr_assert(at(page, "b / a = 1.5047") < protocol, "the ratio comes before the protocol");
    cr_assert(at(page, "[1.4316, 1.5798]") < protocol, "with its interval");
    cr_assert(at(page, "b is 50.5% faster than a") < protocol, "in words");
    cr_assert(at(page, "<b>significant</b>") < protocol);
    cr_assert(at(page, "16907.25 tok/s") < protocol, "arm a's tok/s");
    cr_assert(at(page, "25439.67 tok/s") < protocol, "arm b's tok/s");
    cr_assert_null(strstr(page, ">null<"), "no literal null in a cell");
    cr_assert_null(strstr(page, "{&quot;"), "no JSON object in a cell");
    cr_assert_null(strstr(page, "[&quot;"), "no JSON array in a cell");
    cr_assert(strstr(page, "<th>carry check</th><td>not run: the timing rows take"), "{\"ran\":false} in words");
    cr_assert(strstr(page, "<th>sampling</th><td>greedy"), "sampling in words");
    cr_assert_null(strstr(page, ">-0<"), "an axis label reads -0");
    cr_assert_null(strstr(page, ">1e-0<"), "an axis label reads 1e-0");
    free(page);
    /* a text prompt is shown by its first line, sampling by its parameters, the gate's commit */
    const char *rec = "{\"record\":\"protocol\",\"commit\":\"abc1234-dirty\",\"arms\":{\"a\":{\"text\":\"cpu\"},"
                      "\"b\":{\"text\":\"cpu:stages=2\"}},\"sampling\":{\"mode\":\"sampled\",\"temperature\":0.8,"
                      "\"top_k\":40,\"top_p\":1,\"seed\":7},\"prompt\":{\"source\":\"--prompt\",\"text\":"
                      "\"Why is the sky <blue>?\\nAnswer briefly.\",\"n_tokens\":12}}\n"
                      "{\"record\":\"verdict\",\"pass\":true,\"exit\":0,\"reason\":\"ok\",\"mode\":\"exact\"}\n";
    cr_assert_eq(render(rec, &page, &d), REPORT_OK, "%s", d.error);
    cr_assert(strstr(page, "<q>Why is the sky &lt;blue&gt;?</q>"), "the prompt's first line");
    cr_assert(strstr(page, "the first of 2 lines"));
    cr_assert_null(strstr(page, ">--prompt<"), "the prompt, not the flag");
    cr_assert(strstr(page, "sampled: temperature 0.8, top-k 40, top-p 1 (no cut), seed 7"));
    cr_assert(strstr(page, "<th>commit</th><td>abc1234-dirty"), "the gate's commit");
    cr_assert(strstr(page, "not timed"), "a gate without timing says so in the answer");
    free(page);
}

/* Several gates: the table at the top has each gate's tok/s and ratio, arm strings unwrapped. */
Test(report, many_gates_table_has_speed_columns) {
    const char *names[] = {"pass.jsonl", "cache.jsonl", "nmse.jsonl"};
    size_t len = 0;
    char *all = NULL;
    FILE *m = open_memstream(&all, &len);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *t = file_slurp(fixture(names[i]), NULL);
        fputs(t, m);
        free(t);
    }
    cr_assert_eq(fclose(m), 0);
    char *page = NULL;
    report_diag d;
    cr_assert_eq(render(all, &page, &d), REPORT_OK, "%s", d.error);
    free(all);
    const char *nav = at(page, "<nav>"), *end = at(page, "</nav>");
    cr_assert(at(nav, "<th class=\"num\">tok/s a</th><th class=\"num\">tok/s b</th><th class=\"num\">b / a</th>") < end,
              "speed columns");
    cr_assert(at(nav, "<td class=\"num\">16907.25</td><td class=\"num\">25439.67</td><td class=\"num\">1.5047") < end,
              "the pass gate's speeds");
    cr_assert(at(nav, "<td class=\"arm\">cpu:stages=2</td>") < end, "arm strings in an unwrapped cell");
    cr_assert(strstr(page, "td.arm,th.arm{white-space:nowrap"), "which does not wrap");
    free(page);
}

/* ---- the checker's negative controls ------------------------------------------------------------ */

Test(report, page_checker_fails_each_broken_page) {
    need_python();
    const char *head = "<!DOCTYPE html><html><head><title>t</title></head><body>";
    const struct {
        const char *body, *extra, *why;
    } cases[] = {
        {"<svg width=\"1\" height=\"1\"><rect x=\"0\"></svg>", "", "not well-formed XML"},
        {"<svg width=\"1\"><text>a & b</text></svg>", "", "not well-formed XML"},
        {"<svg width=\"1\"><rect x=1 /></svg>", "", "not well-formed XML"},
        {"<div><p>x</div>", "", "closes <p>"},
        {"<div>", "", "never closed"},
        {"<script>1</script>", "", "forbidden element <script>"},
        {"<img src=\"a.png\">", "", "forbidden element <img>"},
        {"<a href=\"https://example.com/\">x</a>", "", "external href"},
        {"<p style=\"background:url(x.png)\">x</p>", "", "url("},
        {"<p>PASS</p>", "--expect FAIL", "lacks 'FAIL'"},
        {"<p>x</p>", "--min-svg 1", "0 svg charts"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char page[2048], path[1200], why[4096];
        snprintf(page, sizeof page, "%s%s</body></html>\n", head, cases[i].body);
        snprintf(path, sizeof path, "%s/bad%zu.html", dir, i);
        write_file(path, page);
        int rc = check_page(path, cases[i].extra, why, sizeof why);
        cr_expect_eq(rc, 1, "case %zu (%s): the checker passed it (exit %d): %s", i, cases[i].body, rc, why);
        cr_expect(strstr(why, cases[i].why), "case %zu: '%s' lacks '%s'", i, why, cases[i].why);
    }
    /* and the checker passes a good page */
    char path[1200];
    snprintf(path, sizeof path, "%s/good.html", dir);
    write_file(path, "<!DOCTYPE html><html><head><title>t</title></head><body><p>PASS</p><svg width=\"2\">"
                     "<rect x=\"0\" y=\"0\" width=\"1\" height=\"1\"><title>a &amp; b</title></rect></svg>"
                     "<a href=\"#x\">x</a><br></body></html>\n");
    expect_good_page(path, "--expect PASS --min-svg 1");
}

/* ---- pages of committed record files of real gates ------------------------------------------------ */

Test(report, passing_gate) {
    need_python();
    const char *page = report_of(fixture("pass.jsonl"), "pass");
    expect_good_page(page, "--min-svg 3 --expect PASS --expect 'cpu:stages=2' --expect 'Timing rows' "
                           "--expect 'b / a = ' --expect '95% bootstrap interval' --expect 'Plugins loaded' "
                           "--expect 'libmemra-backend-cpu.so' --expect 'Step map' --expect '16 steps (8 prime, 8 "
                           "generated), 0 differ'");
    char *html = file_slurp(page, NULL);
    cr_assert_null(strstr(html, "FAIL"), "a passing gate's page says FAIL nowhere");
    free(html);
}

Test(report, failing_gate_first_mismatch) {
    need_python();
    const char *page = report_of(fixture("fail.jsonl"), "fail");
    expect_good_page(page, "--min-svg 1 --expect 'FAIL (exit 1)' --expect 'first mismatch at step 5' "
                           "--expect 'First mismatch (line 7)' --expect 0x410319aa --expect 0x410319ab "
                           "--expect '8.193765640258789' --expect '1 at index 7' --expect 'No timing rows' "
                           "--expect 'logits differ'");
    char *html = file_slurp(page, NULL);
    cr_assert_null(strstr(html, ">PASS<"));
    cr_assert(strstr(html, "stroke=\"#000\" stroke-width=\"2\"><title>step 5 "), "step 5's cell is outlined");
    free(html);
}

Test(report, failing_cache_digest_and_timing_row) {
    need_python();
    const char *page = report_of(fixture("cache.jsonl"), "cache");
    expect_good_page(page, "--expect FAIL --expect 'first mismatch at step 7' --expect 'cache differs' "
                           "--expect Census --expect 'host:max_in_flight'");
    page = report_of(fixture("row.jsonl"), "row");
    expect_good_page(page, "--min-svg 2 --expect FAIL --expect 'token stream differs from the correctness run' "
                           "--expect NO --expect Mismatches");
}

Test(report, nmse_gate_with_tensor_parallel_census_and_cells) {
    need_python();
    const char *page = report_of(fixture("nmse.jsonl"), "nmse");
    expect_good_page(page, "--min-svg 4 --expect PASS --expect 'nmse:1e-3' --expect 'Per-step NMSE against the "
                           "tolerance' --expect 'Epoch census: collective local' --expect 'Refusal cells' "
                           "--expect attention --expect ffn");
    page = report_of(fixture("nmse_fail.jsonl"), "nmse_fail");
    expect_good_page(page, "--min-svg 2 --expect FAIL --expect 'first mismatch at step 11' --expect nonfinite "
                           "--expect 'Per-step NMSE'");
}

Test(report, bench_records) {
    need_python();
    const char *page = report_of(fixture("bench.jsonl"), "bench");
    expect_good_page(page, "--min-svg 1 --expect 'Bench records' --expect 'tok/s at the floor' --expect 'no ceiling' "
                           "--expect 'cpu:threads=1'");
}

Test(report, many_gates_in_one_file) {
    need_python();
    const char *names[] = {"pass.jsonl",  "fail.jsonl",      "nmse.jsonl", "row.jsonl",
                           "cache.jsonl", "nmse_fail.jsonl", "bench.jsonl"};
    char all[1200];
    snprintf(all, sizeof all, "%s/all.jsonl", dir);
    FILE *f = fopen(all, "wb");
    cr_assert_not_null(f);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *t = file_slurp(fixture(names[i]), NULL);
        fputs(t, f);
        free(t);
        if (i == 2)
            fputs("{\"record\":\"lab_note\",\"text\":\"rebuilt with -O3\"}\n", f);
    }
    cr_assert_eq(fclose(f), 0);
    const char *page = report_of(all, "all");
    expect_good_page(page, "--min-svg 12 --expect 'Gate 6:' --expect 'Bench records' --expect lab_note "
                           "--expect 'rebuilt with -O3' --expect 'Records of an unknown kind'");
    char *html = file_slurp(page, NULL);
    cr_assert(strstr(html, "href=\"#gate-6\""), "the overview links each gate");
    free(html);
}

/* ---- memra report's command line ----------------------------------------------------------------- */

Test(report, cli_default_output_stdout_and_errors) {
    char in[1200], out[1200];
    snprintf(in, sizeof in, "%s/run.jsonl", dir);
    char *t = file_slurp(fixture("pass.jsonl"), NULL);
    write_file(in, t);
    free(t);
    tool_result r = tool_run("memra", "report", in, NULL);
    cr_assert_eq(r.code, 0, "%s", r.err);
    tool_result_free(&r);
    snprintf(out, sizeof out, "%s/run.html", dir);
    cr_assert_eq(access(out, R_OK), 0, "FILE.jsonl gives FILE.html");
    r = tool_run("memra", "report", in, "-o", "-", NULL);
    cr_assert_eq(r.code, 0, "%s", r.err);
    char *file = file_slurp(out, NULL);
    cr_assert_str_eq(r.out, file, "-o - writes the same page to stdout");
    free(file);
    tool_result_free(&r);
    /* usage */
    r = tool_run("memra", "report", NULL);
    cr_assert_eq(r.code, 2, "%s", r.err);
    tool_result_free(&r);
    r = tool_run("memra", "report", in, "-o", in, NULL);
    cr_assert_eq(r.code, 2, "%s", r.err);
    cr_assert(strstr(r.err, "same file"), "%s", r.err);
    tool_result_free(&r);
    r = tool_run("memra", "report", "--help", NULL);
    cr_assert_eq(r.code, 0);
    cr_assert(strstr(r.out, "usage: memra report"), "%s", r.out);
    tool_result_free(&r);
    /* a missing file */
    r = tool_run("memra", "report", tmp_dir_path(dir, "missing.jsonl"), NULL);
    cr_assert_eq(r.code, 3, "%s", r.err);
    cr_assert(strstr(r.err, "missing.jsonl"), "%s", r.err);
    tool_result_free(&r);
}

Test(report, cli_malformed_line_exit_3_and_nothing_written) {
    char in[1200], out[1200];
    snprintf(in, sizeof in, "%s/bad.jsonl", dir);
    snprintf(out, sizeof out, "%s/bad.html", dir);
    write_file(in, "{\"record\":\"protocol\"}\n{\"record\":\"step\",\"step\":0}\n{\"record\":\"step\" \"step\":1}\n"
                   "{\"record\":\"verdict\"}\n");
    tool_result r = tool_run("memra", "report", in, NULL);
    cr_assert_eq(r.code, 3, "%s", r.err);
    cr_assert(strstr(r.err, "line 3: column 23: '}' expected near '\"step\"'"), "%s", r.err);
    cr_assert_neq(access(out, F_OK), 0, "no page for a malformed file");
    tool_result_free(&r);
}

Test(report, cli_truncated_last_line) {
    need_python();
    char in[1200];
    snprintf(in, sizeof in, "%s/cut.jsonl", dir);
    char *t = file_slurp(fixture("pass.jsonl"), NULL);
    size_t n = strlen(t);
    t[n - 30] = '\0'; /* the verdict line loses its end */
    write_file(in, t);
    free(t);
    tool_result r = tool_run("memra", "report", in, NULL);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert(strstr(r.err, "line 23 is cut short"), "%s", r.err);
    tool_result_free(&r);
    char page[1200];
    snprintf(page, sizeof page, "%s/cut.html", dir);
    expect_good_page(page, "--expect 'line 23) is cut short' --expect INCOMPLETE");
}

/* ---- memra-gate --html on live gates -------------------------------------------------------------- */

static const char *html_path(const char *name) { return tmp_dir_path(dir, name); }

Test(report, gate_html_of_a_passing_gate) {
    need_python();
    const char *page = html_path("gate_pass.html");
    const char *args[] = {"--a",     "cpu:prefill=1",
                          "--b",     "cpu:prefill=1,stages=2",
                          "--prime", "8",
                          "--gen",   "8",
                          "--rows",  "4",
                          "--quiet", "--html",
                          page,      NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    expect_good_page(page, "--min-svg 3 --expect PASS --expect 'memra-gate records' --expect 'Timing rows'");
    char said[1300];
    snprintf(said, sizeof said, "memra-gate: wrote %s", page);
    cr_assert(strstr(r.err, said), "memra-gate --html says where the page went, as memra report does:\n%s", r.err);
    char *html = file_slurp(page, NULL);
    const char *commit = strstr(html, "<tr><th>commit</th><td>");
    cr_assert(commit && strncmp(commit + strlen("<tr><th>commit</th><td>"), "<span", 5) != 0,
              "the gate page shows the commit the records carry");
    free(html);
    gate_result_free(&r);
}

Test(report, gate_html_of_a_failing_gate_to_stdout_records) {
    need_python();
    const char *page = html_path("gate_fail.html");
    const char *args[] = {"--a",     "cpu:prefill=1",
                          "--b",     "faulty:flip_logit_step=5",
                          "--prime", "8",
                          "--gen",   "8",
                          "--rows",  "4",
                          "--quiet", "--html",
                          page,      "--jsonl",
                          "-",       NULL};
    gate_how how = {.no_jsonl = true};
    gate_result r = gate_run_ex(args, &how);
    cr_assert_eq(r.exit, 1, "%s", r.err);
    cr_assert(strstr(r.out, "\"record\":\"verdict\""), "the records still go to stdout");
    expect_good_page(page, "--expect 'FAIL (exit 1)' --expect 'first mismatch at step 5' --expect 'memra-gate "
                           "records (stdout)'");
    gate_result_free(&r);
}

/* Issue 30: a failing gate's page shows its bisect (the first op where the arms part, the rank). */
Test(report, gate_html_of_a_bisect) {
    need_python();
    const char *page = html_path("gate_bisect.html");
    const char *args[] = {"--a",       "cpu:prefill=1",
                          "--b",       "cpu:prefill=1,tp=2",
                          "--compare", "exact",
                          "--prime",   "8",
                          "--gen",     "8",
                          "--rows",    "0",
                          "--quiet",   "--html",
                          page,        NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 1, "%s", r.err);
    expect_good_page(page, "--expect 'Bisect: the first op where the arms part' --expect 'layer 0 attn_out' "
                           "--expect 'every rank of 2' --expect 'sums across ranks in another order'");
    /* the negative control: a passing gate's page has no bisect section */
    char why[4096];
    const char *pass = html_path("gate_nobisect.html");
    const char *ok[] = {"--a",     "cpu:prefill=1",
                        "--b",     "cpu:prefill=1,stages=2",
                        "--prime", "8",
                        "--gen",   "8",
                        "--rows",  "0",
                        "--quiet", "--html",
                        pass,      NULL};
    gate_result_free(&r);
    r = gate_run(ok, false);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    cr_assert_neq(check_page(pass, "--expect 'Bisect: the first op'", why, sizeof why), 0, "%s", why);
    gate_result_free(&r);
}

Test(report, gate_html_of_an_nmse_gate) {
    need_python();
    const char *page = html_path("gate_nmse.html");
    const char *args[] = {"--a",       "cpu:prefill=1",
                          "--b",       "cpu:prefill=1,tp=2",
                          "--compare", "nmse:1e-3",
                          "--prime",   "8",
                          "--gen",     "8",
                          "--rows",    "4",
                          "--quiet",   "--html",
                          page,        NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    expect_good_page(page, "--min-svg 4 --expect PASS --expect 'Per-step NMSE' --expect 'Refusal cells'");
    gate_result_free(&r);
}

Test(report, gate_html_of_an_interrupted_gate) {
    need_python();
    const char *page = html_path("gate_intr.html");
    const char *args[] = {"--a",      "cpu:prefill=1",
                          "--b",      "cpu:prefill=1,stages=2",
                          "--preset", "small",
                          "--prime",  "64",
                          "--gen",    "512",
                          "--quiet",  "--html",
                          page,       NULL};
    gate_how how = {.signal = SIGINT, .signal_when = "step"};
    gate_result r = gate_run_ex(args, &how);
    cr_assert_eq(r.exit, 130, "exit %d: %s", r.exit, r.err);
    expect_good_page(page, "--expect 'INTERRUPTED by SIGINT' --expect 'phase replay'");
    gate_result_free(&r);
}

Test(report, gate_html_refusals) {
    const char *jsonl = html_path("g.jsonl");
    write_file(jsonl, "");
    const char *same[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--prime", "4", "--gen", "4", "--rows",
                          "0",   "--html",        jsonl, "--jsonl",       jsonl,     NULL};
    gate_how how = {.no_jsonl = true};
    gate_result r = gate_run_ex(same, &how);
    cr_assert_eq(r.exit, 2, "%s", r.err);
    cr_assert(strstr(r.err, "same file as --jsonl"), "%s", r.err);
    gate_result_free(&r);
    const char *dev[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--prime",   "4", "--gen",
                         "4",   "--rows",        "0",   "--html",        "/dev/null", NULL};
    r = gate_run(dev, false);
    cr_assert_eq(r.exit, 2, "%s", r.err);
    cr_assert(strstr(r.err, "not a regular file"), "%s", r.err);
    gate_result_free(&r);
    const char *nodir[] = {"--a",     "cpu:prefill=1",
                           "--b",     "cpu:prefill=1",
                           "--prime", "4",
                           "--gen",   "4",
                           "--rows",  "0",
                           "--html",  html_path("no/such/dir/x.html"),
                           NULL};
    r = gate_run(nodir, false);
    cr_assert_eq(r.exit, 3, "%s", r.err);
    cr_assert(strstr(r.err, "--html"), "%s", r.err);
    cr_assert_null(strstr(r.jsonl, "\"record\":\"step\""), "refused before the run");
    gate_result_free(&r);
    const char *empty[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--html=", NULL};
    r = gate_run(empty, false);
    cr_assert_eq(r.exit, 2, "%s", r.err);
    cr_assert(strstr(r.err, "--html: empty file name"), "%s", r.err);
    gate_result_free(&r);
}

/* ---- a headless browser's screenshot ------------------------------------------------------------- */

static const char *find_browser(void) {
    static const char *const names[] = {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", names[i]);
        if (system(cmd) == 0)
            return names[i];
    }
    return NULL;
}

static int screenshot_blank(const char *browser, const char *page, const char *png, char *why, size_t size) {
    int rc = sh(why, size,
                "timeout 120 %s --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1000,1400 "
                "--screenshot='%s' 'file://%s'",
                browser, png, page);
    cr_assert_eq(rc, 0, "%s failed (exit %d): %s", browser, rc, why);
    return sh(why, size, "python3 '%s/tests/report/png_blank.py' '%s'", src_dir(), png);
}

Test(report, screenshot_is_not_blank, .timeout = 300) {
    need_python();
    const char *browser = find_browser();
    if (!browser)
        cr_skip_test("no headless browser (chromium, chromium-browser, google-chrome) is installed: no screenshot "
                     "taken (apt-get install chromium adds one)");
    char why[4096];
    const char *page = report_of(fixture("fail.jsonl"), "shot");
    char png[1200];
    snprintf(png, sizeof png, "%s/shot.png", dir);
    int rc = screenshot_blank(browser, page, png, why, sizeof why);
    cr_assert_eq(rc, 0, "the page's screenshot: %s", why);
    /* negative control: an empty page is blank */
    char empty[1200], png2[1200];
    snprintf(empty, sizeof empty, "%s/empty.html", dir);
    snprintf(png2, sizeof png2, "%s/empty.png", dir);
    write_file(empty, "<!DOCTYPE html><html><head><title>t</title></head><body></body></html>\n");
    rc = screenshot_blank(browser, empty, png2, why, sizeof why);
    cr_assert_eq(rc, 1, "an empty page must be judged blank: %s", why);
}
