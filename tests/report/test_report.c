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
 * page must not be blank (and one of an empty page must be). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
        {"", "end of the line"},
        {"{\"a\":1,}", "member name"},
        {"[1,]", "expected a value"},
        {"{\"a\":01}", "leading zero"},
        {"{\"a\":1.}", "decimal point"},
        {"{\"a\":NaN}", "expected a value"},
        {"{\"a\":Infinity}", "expected a value"},
        {"{'a':1}", "member name"},
        {"{\"a\":1} x", "text after the value"},
        {"{\"a\":1}{}", "text after the value"},
        {"{\"a\":\"x\ty\"}", "control byte"},
        {"{\"a\":\"\\x\"}", "unknown escape"},
        {"{\"a\":\"\\ud800\"}", "high surrogate"},
        {"{\"a\":\"\\udc00\"}", "low surrogate"},
        {"{\"a\":\"\xff\"}", "not valid UTF-8"},
        {"{\"a\":\"\xc0\xaf\"}", "not valid UTF-8"},         /* overlong */
        {"{\"a\":\"\xed\xa0\x80\"}", "not valid UTF-8"},     /* a surrogate in UTF-8 */
        {"{\"a\":\"\xf4\x90\x80\x80\"}", "not valid UTF-8"}, /* beyond U+10FFFF */
        {"{\"a\":\"cut", "not closed"},
        {"{\"a\":1,\"a\":2}", "given twice"},
        {"{\"a\" 1}", "expected ':'"},
        {"[1 2]", "expected ','"},
        {"tru", "expected a value"},
        {"// comment\n{}", "expected a value"},
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
                           "--expect '8.1937656402587891' --expect '1 at index 7' --expect 'No timing rows' "
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
    cr_assert(strstr(r.err, "line 3: column 18: expected ',' or '}'"), "%s", r.err);
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
    const char *args[] = {"--a", "cpu",    "--b", "cpu:stages=2", "--prime", "8",  "--gen",
                          "8",   "--rows", "4",   "--quiet",      "--html",  page, NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    expect_good_page(page, "--min-svg 3 --expect PASS --expect 'memra-gate records' --expect 'Timing rows'");
    gate_result_free(&r);
}

Test(report, gate_html_of_a_failing_gate_to_stdout_records) {
    need_python();
    const char *page = html_path("gate_fail.html");
    const char *args[] = {
        "--a",    "cpu", "--b", "faulty:flip_logit_step=5", "--prime", "8", "--gen", "8", "--rows", "4", "--quiet",
        "--html", page,  "--jsonl", "-", NULL};
    gate_how how = {.no_jsonl = true};
    gate_result r = gate_run_ex(args, &how);
    cr_assert_eq(r.exit, 1, "%s", r.err);
    cr_assert(strstr(r.out, "\"record\":\"verdict\""), "the records still go to stdout");
    expect_good_page(page, "--expect 'FAIL (exit 1)' --expect 'first mismatch at step 5' --expect 'memra-gate "
                           "records (stdout)'");
    gate_result_free(&r);
}

Test(report, gate_html_of_an_nmse_gate) {
    need_python();
    const char *page = html_path("gate_nmse.html");
    const char *args[] = {"--a",   "cpu", "--b",    "cpu:tp=2", "--compare", "nmse:1e-3", "--prime", "8",
                          "--gen", "8",   "--rows", "4",        "--quiet",   "--html",    page,      NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    expect_good_page(page, "--min-svg 4 --expect PASS --expect 'Per-step NMSE' --expect 'Refusal cells'");
    gate_result_free(&r);
}

Test(report, gate_html_of_an_interrupted_gate) {
    need_python();
    const char *page = html_path("gate_intr.html");
    const char *args[] = {"--a", "cpu",   "--b", "cpu:stages=2", "--preset", "small", "--prime",
                          "64",  "--gen", "512", "--quiet",      "--html",   page,    NULL};
    gate_how how = {.signal = SIGINT, .signal_when = "step"};
    gate_result r = gate_run_ex(args, &how);
    cr_assert_eq(r.exit, 130, "exit %d: %s", r.exit, r.err);
    expect_good_page(page, "--expect 'INTERRUPTED by SIGINT' --expect 'phase replay'");
    gate_result_free(&r);
}

Test(report, gate_html_refusals) {
    const char *jsonl = html_path("g.jsonl");
    write_file(jsonl, "");
    const char *same[] = {"--a",    "cpu", "--b",    "cpu", "--prime", "4",   "--gen", "4",
                          "--rows", "0",   "--html", jsonl, "--jsonl", jsonl, NULL};
    gate_how how = {.no_jsonl = true};
    gate_result r = gate_run_ex(same, &how);
    cr_assert_eq(r.exit, 2, "%s", r.err);
    cr_assert(strstr(r.err, "same file as --jsonl"), "%s", r.err);
    gate_result_free(&r);
    const char *dev[] = {"--a", "cpu",    "--b", "cpu",    "--prime",   "4", "--gen",
                         "4",   "--rows", "0",   "--html", "/dev/null", NULL};
    r = gate_run(dev, false);
    cr_assert_eq(r.exit, 2, "%s", r.err);
    cr_assert(strstr(r.err, "not a regular file"), "%s", r.err);
    gate_result_free(&r);
    const char *nodir[] = {"--a",   "cpu", "--b",    "cpu", "--prime", "4",
                           "--gen", "4",   "--rows", "0",   "--html",  html_path("no/such/dir/x.html"),
                           NULL};
    r = gate_run(nodir, false);
    cr_assert_eq(r.exit, 3, "%s", r.err);
    cr_assert(strstr(r.err, "--html"), "%s", r.err);
    cr_assert_null(strstr(r.jsonl, "\"record\":\"step\""), "refused before the run");
    gate_result_free(&r);
    const char *empty[] = {"--a", "cpu", "--b", "cpu", "--html=", NULL};
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
