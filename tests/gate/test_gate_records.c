/* test_gate_records.c: gates/RECORDS.md documents every record the gate writes. Every record kind
 * gates/gate_records.c writes has a section there, no other file of gates/ writes a record, and
 * every field (every member path, nested ones included) of every record line of a set of runs
 * that together write every kind and every mismatch shape is listed in its kind's section. The
 * negative controls: an undocumented field, an undocumented nested field and an undocumented
 * record kind are each caught. The same from the source: every member name each record function
 * writes is in its kind's section, and every documented one is written. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate_harness.h"
#include "test_files.h"

#ifndef GATES_DIR
#error "GATES_DIR (the gates/ source directory) must be defined"
#endif

/* ------------------------------------------------------------------------------------------ */
/* RECORDS.md                                                                                  */

#define MAX_KINDS 32
#define MAX_FIELDS 256

typedef struct doc_kind {
    char name[128];
    char *fields[MAX_FIELDS]; /* paths: a.b, a[].b, * for any member name */
    int n;
} doc_kind;

typedef struct doc {
    doc_kind kinds[MAX_KINDS];
    int n;
} doc;

/* Sections "## `kind`"; in each, table rows "| `path` | ...". */
static void read_doc(doc *d) {
    memset(d, 0, sizeof *d);
    char *text = file_slurp(GATES_DIR "/RECORDS.md", NULL);
    doc_kind *cur = NULL;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char name[128];
        if (sscanf(line, "## `%127[^`]`", name) == 1) {
            cr_assert(d->n < MAX_KINDS);
            cur = &d->kinds[d->n++];
            snprintf(cur->name, sizeof cur->name, "%s", name);
        } else if (strncmp(line, "## ", 3) == 0) {
            cur = NULL;
        } else if (cur && sscanf(line, "| `%127[^`]` |", name) == 1) {
            cr_assert(cur->n < MAX_FIELDS, "too many fields in %s", cur->name);
            cur->fields[cur->n++] = strdup(name);
        }
    }
    free(text);
}

static void free_doc(doc *d) {
    for (int k = 0; k < d->n; k++)
        for (int i = 0; i < d->kinds[k].n; i++)
            free(d->kinds[k].fields[i]);
}

static const doc_kind *find_kind(const doc *d, const char *name) {
    for (int k = 0; k < d->n; k++)
        if (strcmp(d->kinds[k].name, name) == 0)
            return &d->kinds[k];
    return NULL;
}

/* Whether a documented path matches a member path ('*' matches one whole name; "x[]" is
 * literal). */
static bool path_matches(const char *pattern, const char *path) {
    while (*pattern && *path) {
        const char *pe = strchr(pattern, '.'), *qe = strchr(path, '.');
        size_t pl = pe ? (size_t)(pe - pattern) : strlen(pattern), ql = qe ? (size_t)(qe - path) : strlen(path);
        bool star = pl == 1 && pattern[0] == '*';
        bool star_arr = pl == 3 && strncmp(pattern, "*[]", 3) == 0 && ql > 2 && strncmp(path + ql - 2, "[]", 2) == 0;
        if (!star && !star_arr && (pl != ql || strncmp(pattern, path, pl) != 0))
            return false;
        pattern += pl + (pe != NULL);
        path += ql + (qe != NULL);
        if (!pe != !qe)
            return false;
    }
    return !*pattern && !*path;
}

static bool documented(const doc_kind *k, const char *path) {
    for (int i = 0; i < k->n; i++)
        if (path_matches(k->fields[i], path))
            return true;
    return false;
}

/* ------------------------------------------------------------------------------------------ */
/* A record line, walked                                                                       */

typedef struct walk {
    const doc_kind *kind;
    char missing[4096]; /* undocumented paths, one a line */
    bool bad_json;
} walk;

static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\r')
        p++;
    return p;
}

/* A JSON string at p (after its opening quote): its content, unescaped enough for names, into
 * buf; returns the character after the closing quote, or NULL. */
static const char *read_string(const char *p, char *buf, size_t size) {
    size_t n = 0;
    for (; *p && *p != '"'; p++) {
        if (*p == '\\' && p[1])
            p++;
        if (n + 1 < size)
            buf[n++] = *p;
    }
    buf[n] = '\0';
    return *p == '"' ? p + 1 : NULL;
}

static const char *walk_value(walk *w, const char *p, const char *path);

static void note(walk *w, const char *path) {
    size_t n = strlen(w->missing);
    snprintf(w->missing + n, sizeof w->missing - n, "%s\n", path);
}

static const char *walk_object(walk *w, const char *p, const char *path) {
    p = skip_ws(p + 1);
    if (*p == '}')
        return p + 1;
    for (;;) {
        p = skip_ws(p);
        if (*p != '"')
            return NULL;
        char key[256], child[1024];
        if (!(p = read_string(p + 1, key, sizeof key)))
            return NULL;
        snprintf(child, sizeof child, "%s%s%s", path, *path ? "." : "", key);
        if (!documented(w->kind, child))
            note(w, child);
        p = skip_ws(p);
        if (*p != ':')
            return NULL;
        if (!(p = walk_value(w, skip_ws(p + 1), child)))
            return NULL;
        p = skip_ws(p);
        if (*p == ',') {
            p++;
            continue;
        }
        return *p == '}' ? p + 1 : NULL;
    }
}

static const char *walk_value(walk *w, const char *p, const char *path) {
    if (*p == '{')
        return walk_object(w, p, path);
    if (*p == '[') {
        char elem[1024];
        snprintf(elem, sizeof elem, "%s[]", path);
        p = skip_ws(p + 1);
        if (*p == ']')
            return p + 1;
        for (;;) {
            if (!(p = walk_value(w, skip_ws(p), elem)))
                return NULL;
            p = skip_ws(p);
            if (*p == ',') {
                p++;
                continue;
            }
            return *p == ']' ? p + 1 : NULL;
        }
    }
    if (*p == '"') {
        char ignored[8];
        return read_string(p + 1, ignored, sizeof ignored);
    }
    const char *start = p;
    while (*p && !strchr(",}] \t\r\n", *p))
        p++;
    return p > start ? p : NULL;
}

/* Checks one record line against the documentation: "" when every field is documented,
 * otherwise what is not (copied). */
static char *check_line(const doc *d, const char *line) {
    char kind[128] = "";
    if (!gate_field_str(line, "record", kind, sizeof kind))
        return strdup("a line without a \"record\" field");
    walk w = {.kind = find_kind(d, kind)};
    if (!w.kind) {
        char msg[256];
        snprintf(msg, sizeof msg, "record kind '%s' has no section in RECORDS.md", kind);
        return strdup(msg);
    }
    const char *end = walk_object(&w, skip_ws(line), "");
    if (!end || *skip_ws(end))
        return strdup("not one JSON object");
    if (!w.missing[0])
        return strdup("");
    char msg[4400];
    snprintf(msg, sizeof msg, "record '%s': undocumented in RECORDS.md:\n%s", kind, w.missing);
    return strdup(msg);
}

/* Every line of a run's records; the kinds seen are added to seen (a '|'-separated list). */
static void check_records(const doc *d, const char *jsonl, char *seen, size_t seen_size) {
    cr_assert(jsonl && *jsonl, "no records");
    char *copy = strdup(jsonl);
    for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
        char *why = check_line(d, line);
        cr_assert_str_empty(why, "%s\nin: %s", why, line);
        free(why);
        char kind[128] = "", where[64] = "", tag[200];
        gate_field_str(line, "record", kind, sizeof kind);
        if (strcmp(kind, "mismatch") == 0 && gate_field_str(line, "where", where, sizeof where))
            snprintf(tag, sizeof tag, "|%s:%s|", kind, where);
        else
            snprintf(tag, sizeof tag, "|%s|", kind);
        if (!strstr(seen, tag) && strlen(seen) + strlen(tag) < seen_size)
            strcat(seen, tag + (seen[0] ? 1 : 0)); /* "|a|b|" */
    }
    free(copy);
}

/* ------------------------------------------------------------------------------------------ */

/* The record kinds a file writes: each gj_begin(j, "kind") in it, into kinds ('|'-separated). */
static int kinds_written(const char *path, char *kinds, size_t size) {
    char *text = file_slurp(path, NULL);
    int n = 0;
    for (const char *p = text; (p = strstr(p, "gj_begin(")) != NULL; p++) {
        const char *q = strchr(p, '"');
        const char *close = strchr(p, ')');
        if (!q || !close || q > close)
            continue; /* the definition or a declaration */
        char kind[64];
        if (sscanf(q, "\"%63[^\"]\"", kind) == 1) {
            size_t used = strlen(kinds);
            snprintf(kinds + used, size - used, "%s|", kind);
            n++;
        }
    }
    free(text);
    return n;
}

Test(gate_records, every_kind_written_has_a_section) {
    doc d;
    read_doc(&d);
    char kinds[1024] = "";
    int n = kinds_written(GATES_DIR "/gate_records.c", kinds, sizeof kinds);
    cr_assert_eq(n, 12, "gate_records.c begins %d kinds of record: %s", n, kinds);
    for (char *k = strtok(kinds, "|"); k; k = strtok(NULL, "|")) {
        const doc_kind *dk = find_kind(&d, k);
        cr_assert(dk, "record kind '%s' is written by gate_records.c but has no section in RECORDS.md", k);
        cr_assert(documented(dk, "record"), "RECORDS.md's '%s' lacks the field 'record'", k);
    }
    free_doc(&d);
}

/* Whether some documented path of k has `name` as one of its member names. */
static bool names_member(const doc_kind *k, const char *name) {
    for (int i = 0; i < k->n; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s", k->fields[i]);
        for (char *save = NULL, *m = strtok_r(path, ".[]", &save); m; m = strtok_r(NULL, ".[]", &save))
            if (strcmp(m, name) == 0)
                return true;
    }
    return false;
}

/* The source's record functions (each `void gate_rec_...` that begins a record): every member name
 * one writes itself (`j, "name"`) is a member name of its kind's section. What is not, one a line
 * "kind.name", into missing. */
static void names_written_not_documented(const doc *d, const char *source, char *missing, size_t size) {
    missing[0] = '\0';
    for (const char *f = source; (f = strstr(f, "\nvoid gate_rec_")) != NULL; f++) {
        const char *end = strstr(f, "\n}\n");
        cr_assert(end, "a record function without its end");
        char kind[64] = "";
        const char *b = strstr(f, "gj_begin(j, \"");
        if (!b || b > end || sscanf(b, "gj_begin(j, \"%63[^\"]\"", kind) != 1)
            continue;
        const doc_kind *k = find_kind(d, kind);
        cr_assert(k, "record kind '%s' has no section in RECORDS.md", kind);
        for (const char *q = f; (q = strstr(q, "j, \"")) != NULL && q < end; q++) {
            char name[128];
            if (sscanf(q, "j, \"%127[^\"]\"", name) != 1 || strcmp(name, kind) == 0 || names_member(k, name))
                continue;
            size_t used = strlen(missing);
            snprintf(missing + used, size - used, "%s.%s\n", kind, name);
        }
    }
}

/* The fields of every record, from the source: each member name a record function of
 * gate_records.c writes is documented in its kind's section, also the ones no run of
 * every_field_of_every_record_is_documented reaches (a census call that fails, ...); and each
 * member name RECORDS.md documents is written by gate_records.c (no field documented that the
 * gate no longer writes). */
Test(gate_records, every_field_in_the_source_is_documented_and_every_documented_one_written) {
    doc d;
    read_doc(&d);
    char *source = file_slurp(GATES_DIR "/gate_records.c", NULL);
    char missing[4096];
    names_written_not_documented(&d, source, missing, sizeof missing);
    cr_assert_str_empty(missing, "written by gate_records.c but not in the kind's section of RECORDS.md:\n%s", missing);
    for (int k = 0; k < d.n; k++)
        for (int i = 0; i < d.kinds[k].n; i++) {
            char path[256];
            snprintf(path, sizeof path, "%s", d.kinds[k].fields[i]);
            for (char *save = NULL, *m = strtok_r(path, ".[]", &save); m; m = strtok_r(NULL, ".[]", &save)) {
                char quoted[160];
                snprintf(quoted, sizeof quoted, "\"%s\"", m);
                cr_assert(strcmp(m, "*") == 0 || strcmp(m, "record") == 0 /* gj_begin writes it */ ||
                              strstr(source, quoted),
                          "RECORDS.md documents '%s' of '%s', which gate_records.c does not write",
                          d.kinds[k].fields[i], d.kinds[k].name);
            }
        }
    /* the negative control: census without its `dump_error` row */
    doc_kind *census = NULL;
    for (int k = 0; k < d.n; k++)
        if (strcmp(d.kinds[k].name, "census") == 0)
            census = &d.kinds[k];
    cr_assert(census);
    for (int i = 0; i < census->n; i++)
        if (strcmp(census->fields[i], "dump_error") == 0) {
            free(census->fields[i]);
            census->fields[i] = strdup("(removed)");
        }
    names_written_not_documented(&d, source, missing, sizeof missing);
    cr_assert_str_eq(missing, "census.dump_error\n", "the control: %s", missing);
    free(source);
    free_doc(&d);
}

Test(gate_records, no_other_file_writes_a_record) {
    DIR *dir = opendir(GATES_DIR);
    cr_assert(dir);
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 3 || strcmp(e->d_name + n - 2, ".c") != 0 || strcmp(e->d_name, "gate_records.c") == 0 ||
            strcmp(e->d_name, "gate_json.c") == 0)
            continue;
        char path[4096], kinds[256] = "";
        snprintf(path, sizeof path, "%s/%s", GATES_DIR, e->d_name);
        cr_assert_eq(kinds_written(path, kinds, sizeof kinds), 0,
                     "%s writes records (%s): they belong in gate_records.c", e->d_name, kinds);
    }
    closedir(dir);
}

Test(gate_records, every_field_of_every_record_is_documented, .timeout = 240) {
    doc d;
    read_doc(&d);
    char dump[1024];
    tmp_dir_make(dump, sizeof dump, NULL, "gate-records");
    char bad_dump[1100];
    snprintf(bad_dump, sizeof bad_dump, "%s/fail", dump);
    /* Together these write every kind, every mismatch shape and the optional fields. */
    const char *runs[][24] = {
        /* sampled, pipelined, census rows and dumped graphs, timing rows, measurable shared upload */
        {"--a", "faulty:census=1,fake_device_mib=128", "--b",
         "faulty:census=1,window=2,fake_device_mib=128,fake_share=1", "--temp", "0.9", "--seed", "3", "--prime", "8",
         "--gen", "8", "--rows", "4", "--dump-graphs", dump, "--quiet", NULL},
        /* replay mismatches with non-finite logits */
        {"--a", "cpu:prefill=1", "--b", "faulty:nan_logit_step=11,flip_logit_index=40", GATE_SMALL, NULL},
        /* a failed timing row */
        {"--a", "cpu:prefill=1", "--b", "faulty:corrupt_row=2,corrupt_row_token=3", GATE_SMALL, NULL},
        /* the carry check, failed on b */
        {"--a", "cpu:prefill=1", "--b", "faulty:carry_off=1", "--prime", "8", "--gen", "8", "--rows", "0", "--quiet",
         NULL},
        /* profile windows that differ, and the carry check after them */
        {"--a", "cpu:prefill=1", "--b", "faulty:corrupt_row=2,corrupt_row_token=20", "--prime", "16", "--gen", "16",
         "--profile", "--quiet", NULL},
        /* nmse mode, auto arms */
        {"--compare", "nmse:1e-6", GATE_SMALL, NULL},
        /* a failed graph dump */
        {"--a", "cpu:prefill=1", "--b", "faulty:census=1,dump_fail=1", "--dump-graphs", bad_dump, GATE_SMALL, NULL},
        /* tensor-parallel arms: census epochs, refusal cells (b's commit: failed cells) */
        {"--a", "cpu:prefill=1,tp=2", "--b", "cpu:prefill=1,tp=2,collective=faultycoll_commit", "--prime", "8", "--gen",
         "8", "--rows", "0", "--quiet", NULL},
        /* an epoch census failure */
        {"--a", "cpu:prefill=1,tp=2", "--b", "cpu:prefill=1,tp=2,collective=faultycoll_epoch", "--prime", "4", "--gen",
         "4", "--rows", "0", "--quiet", NULL},
        /* a runtime error before the arms open: the verdict alone (a usage error writes none) */
        {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1", "--model", "/nonexistent/model.gguf", "--quiet", NULL},
    };
    char seen[512] = "";
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        gate_result r = gate_run(runs[i], false);
        cr_assert(r.exit >= 0 && r.exit <= 3, "run %zu: exit %d: %s", i, r.exit, r.err);
        check_records(&d, r.jsonl, seen, sizeof seen);
        gate_result_free(&r);
    }
    /* a run stopped by a signal: the interrupted record */
    const char *long_run[] = {"--a",     "cpu:prefill=1",
                              "--b",     "cpu:prefill=1,stages=2",
                              "--prime", "3000",
                              "--gen",   "3000",
                              "--rows",  "0",
                              "--quiet", "--allow-past-context",
                              NULL};
    gate_how how = {.signal = SIGTERM, .timeout_s = 100};
    gate_result r = gate_run_ex(long_run, &how);
    cr_assert_eq(r.exit, 128 + SIGTERM, "exit %d: %s", r.exit, r.err);
    check_records(&d, r.jsonl, seen, sizeof seen);
    gate_result_free(&r);
    const char *want[] = {"protocol",         "step",    "mismatch:replay", "mismatch:timing", "mismatch:carry",
                          "mismatch:profile", "census",  "measure",         "carry_check",     "profile",
                          "summary",          "verdict", "interrupted",     "refusal"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char tag[64];
        snprintf(tag, sizeof tag, "|%s|", want[i]);
        char bounded[520];
        snprintf(bounded, sizeof bounded, "|%s", seen);
        cr_assert(strstr(bounded, tag), "no run wrote '%s' (seen %s)", want[i], seen);
    }
    cr_assert_eq(tmp_dir_remove(dump), 0);
    free_doc(&d);
}

/* Negative controls: the checker catches what is not documented. */
static char *a_real_record(const char *kind) {
    const char *args[] = {
        "--a", "cpu:prefill=1", "--b", "cpu:prefill=1,stages=2", "--prime", "4", "--gen", "4", "--rows",
        "2",   "--quiet",       NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "%s", r.err);
    char *line = gate_record(r.jsonl, kind, 0);
    cr_assert(line, "no %s record", kind);
    gate_result_free(&r);
    return line;
}

/* line with `insert` put right after the first occurrence of `after`. */
static char *inject(const char *line, const char *after, const char *insert) {
    const char *at = strstr(line, after);
    cr_assert(at, "'%s' not in %s", after, line);
    at += strlen(after);
    char *out = malloc(strlen(line) + strlen(insert) + 1);
    memcpy(out, line, (size_t)(at - line));
    strcpy(out + (at - line), insert);
    strcat(out, at);
    return out;
}

Test(gate_records, an_undocumented_field_is_caught) {
    doc d;
    read_doc(&d);
    char *line = a_real_record("step");
    char *why = check_line(&d, line);
    cr_assert_str_empty(why, "the real record passes: %s", why);
    free(why);
    char *bad = inject(line, "{\"record\":\"step\",", "\"undocumented_zz\":1,");
    why = check_line(&d, bad);
    cr_assert(strstr(why, "undocumented_zz"), "not caught: %s", why);
    free(why);
    free(bad);
    free(line);
    free_doc(&d);
}

Test(gate_records, an_undocumented_nested_field_is_caught) {
    doc d;
    read_doc(&d);
    char *line = a_real_record("protocol");
    char *bad = inject(line, "\"stages\":[{", "\"zz_nested\":true,");
    char *why = check_line(&d, bad);
    cr_assert(strstr(why, "arms.a.stages[].zz_nested"), "not caught: %s", why);
    free(why);
    free(bad);
    bad = inject(line, "\"sampling\":{", "\"zz_member\":\"x\",");
    why = check_line(&d, bad);
    cr_assert(strstr(why, "sampling.zz_member"), "not caught: %s", why);
    free(why);
    free(bad);
    free(line);
    free_doc(&d);
}

Test(gate_records, an_undocumented_kind_is_caught) {
    doc d;
    read_doc(&d);
    char *why = check_line(&d, "{\"record\":\"refusal_zz\",\"step\":1}");
    cr_assert(strstr(why, "refusal_zz") && strstr(why, "no section"), "not caught: %s", why);
    free(why);
    free_doc(&d);
}

Test(gate_records, records_that_cannot_be_written_do_not_pass) {
    /* A clean pair that passes, but its records go to a full device: not exit 0. */
    if (access("/dev/full", W_OK) != 0)
        cr_skip_test("no /dev/full");
    const char *args[] = {"--a",       "cpu:prefill=1",
                          "--b",       "cpu:prefill=1,stages=2",
                          "--prime",   "4",
                          "--gen",     "4",
                          "--rows",    "2",
                          "--quiet",   "--jsonl",
                          "/dev/full", NULL};
    gate_result r = gate_run(args, true);
    cr_assert_eq(r.exit, 3, "exit %d: %s", r.exit, r.err);
    cr_assert(strstr(r.err, "a record could not be written"), "%s", r.err);
    gate_result_free(&r);
}
