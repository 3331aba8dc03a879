/* report_json.c: record lines through jansson into the report's arena (see report_json.h). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_json.h"

/* ---- arena ---------------------------------------------------------------------------------- */

typedef struct rj_block {
    struct rj_block *next;
    size_t used, cap;
    max_align_t data[]; /* cap bytes */
} rj_block;

static void *arena_alloc(rj_arena *a, size_t n) {
    if (n > SIZE_MAX / 2)
        return NULL;
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0)
        n = sizeof(max_align_t);
    rj_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > (size_t)1 << 16 ? n : (size_t)1 << 16;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    return p;
}

void rj_arena_free(rj_arena *a) {
    for (rj_block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    memset(a, 0, sizeof *a);
}

static const char *arena_str(rj_arena *a, const char *s, size_t n) {
    char *c = arena_alloc(a, n + 1);
    if (!c)
        return NULL;
    if (n)
        memcpy(c, s, n);
    c[n] = '\0';
    return c;
}

/* ---- before jansson: the depth ------------------------------------------------------------------ */

/* The 1-based column of the bracket that opens a container nested deeper than RJ_MAX_DEPTH (0:
 * none). Strings are skipped (a bracket inside one is text); the text's grammar is jansson's to
 * judge, this only counts. */
static size_t too_deep_at(const char *t, size_t n) {
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"')
            in_str = true;
        else if (c == '[' || c == '{') {
            if (++depth > RJ_MAX_DEPTH)
                return i + 1;
        } else if ((c == ']' || c == '}') && depth > 0)
            depth--;
    }
    return 0;
}

/* ---- after jansson: the copy ------------------------------------------------------------------- */

/* A double as the shortest text that reads back as it, with a '.' or an 'e' (it is no integer). */
static void real_text(double x, char *buf, size_t size) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    if (!strpbrk(buf, ".eEni") && strlen(buf) + 3 <= size)
        strcat(buf, ".0");
}

static bool copy_value(rj_arena *a, const json_t *j, rj_val *v, bool ints_as_real) {
    memset(v, 0, sizeof *v);
    char buf[64];
    switch (json_typeof(j)) {
    case JSON_NULL: v->type = RJ_NULL; return true;
    case JSON_TRUE: v->type = RJ_BOOL, v->b = true; return true;
    case JSON_FALSE: v->type = RJ_BOOL; return true;
    case JSON_INTEGER:
        v->type = RJ_NUM;
        v->num = (double)json_integer_value(j);
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
        return (v->s = arena_str(a, buf, strlen(buf))) != NULL;
    case JSON_REAL:
        v->type = RJ_NUM;
        v->num = json_real_value(j);
        /* read again with every integer as a double (one beyond int64 in the line): an integral
           value within 2^53 is shown as the integer it was written as */
        if (ints_as_real && v->num > -9007199254740992.0 && v->num < 9007199254740992.0 &&
            v->num == (double)(int64_t)v->num)
            snprintf(buf, sizeof buf, "%" PRId64, (int64_t)v->num);
        else
            real_text(v->num, buf, sizeof buf);
        return (v->s = arena_str(a, buf, strlen(buf))) != NULL;
    case JSON_STRING:
        v->type = RJ_STR;
        v->len = json_string_length(j);
        return (v->s = arena_str(a, json_string_value(j), v->len)) != NULL;
    case JSON_ARRAY: {
        v->type = RJ_ARR;
        v->len = json_array_size(j);
        if (!v->len)
            return true;
        if (v->len > SIZE_MAX / sizeof(rj_val) || !(v->items = arena_alloc(a, v->len * sizeof(rj_val))))
            return false;
        for (size_t i = 0; i < v->len; i++)
            if (!copy_value(a, json_array_get(j, i), &v->items[i], ints_as_real))
                return false;
        return true;
    }
    case JSON_OBJECT: {
        v->type = RJ_OBJ;
        v->len = json_object_size(j);
        if (!v->len)
            return true;
        if (v->len > SIZE_MAX / sizeof(rj_val) || !(v->items = arena_alloc(a, v->len * sizeof(rj_val))) ||
            !(v->keys = arena_alloc(a, v->len * sizeof(char *))))
            return false;
        size_t i = 0;
        /* jansson keeps the members in the order written */
        for (void *it = json_object_iter((json_t *)j); it && i < v->len;
             it = json_object_iter_next((json_t *)j, it), i++) {
            const char *k = json_object_iter_key(it);
            if (!(v->keys[i] = arena_str(a, k, json_object_iter_key_len(it))) ||
                !copy_value(a, json_object_iter_value(it), &v->items[i], ints_as_real))
                return false;
        }
        v->len = i;
        return true;
    }
    }
    return false;
}

/* ---- parsing ---------------------------------------------------------------------------------- */

/* true when tok is the beginning of a literal or a number that the end of the text cut. */
static bool token_prefix(const char *tok) {
    size_t n = strlen(tok);
    if (n == 0)
        return false;
    if (strncmp("true", tok, n) == 0 || strncmp("false", tok, n) == 0 || strncmp("null", tok, n) == 0)
        return true;
    /* -?digits(.digits*)?([eE][+-]?digits*)? ending where a digit was still needed */
    const char *p = tok;
    if (*p == '-')
        p++;
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            ;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return *p == '\0';
}

/* The text ends inside a UTF-8 sequence (a lead byte whose continuation bytes are missing). */
static bool ends_in_partial_utf8(const unsigned char *t, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned c = t[n - back];
        if ((c & 0xc0) == 0x80)
            continue;
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > back;
    }
    return false;
}

/* Whether jansson's error means the text stops too soon (it is the beginning of some JSON text). */
static bool cut_short(const json_error_t *e, const char *text, size_t n) {
    enum json_error_code code = json_error_code(e);
    size_t blank = 0;
    while (blank < n && (text[blank] == ' ' || text[blank] == '\t' || text[blank] == '\r' || text[blank] == '\n'))
        blank++;
    if (blank == n)
        return false; /* a blank line is no value cut short */
    if (code == json_error_premature_end_of_input)
        return true;
    if (code == json_error_invalid_utf8)
        return ends_in_partial_utf8((const unsigned char *)text, n);
    if (code != json_error_invalid_syntax || e->position < 0 || (size_t)e->position != n)
        return false;
    const char *near = strstr(e->text, "invalid token near '");
    if (near != e->text)
        return false;
    char tok[JSON_ERROR_TEXT_LENGTH];
    const char *from = near + strlen("invalid token near '");
    size_t k = strlen(from);
    if (k >= sizeof tok)
        return false;
    memcpy(tok, from, k + 1);
    if (k == 0 || tok[k - 1] != '\'')
        return false;
    tok[k - 1] = '\0';
    return token_prefix(tok);
}

bool rj_parse_ex(rj_arena *a, const char *text, size_t n, rj_val *out, char *why, size_t why_size, bool *oom,
                 bool *cut) {
    char dummy[8];
    if (!why)
        why = dummy, why_size = sizeof dummy;
    if (oom)
        *oom = false;
    if (cut)
        *cut = false;
    size_t deep = too_deep_at(text, n);
    if (deep) {
        snprintf(why, why_size, "column %zu: nested more than %d deep", deep, RJ_MAX_DEPTH);
        return false;
    }
    const size_t flags = JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL;
    json_error_t e;
    bool ints_as_real = false;
    json_t *j = json_loadb(text, n, flags, &e);
    if (!j && json_error_code(&e) == json_error_numeric_overflow && strstr(e.text, "too big integer")) {
        ints_as_real = true; /* an integer beyond int64: the line again, every number a double */
        j = json_loadb(text, n, flags | JSON_DECODE_INT_AS_REAL, &e);
    }
    if (!j) {
        if (json_error_code(&e) == json_error_out_of_memory) {
            if (oom)
                *oom = true;
            snprintf(why, why_size, "out of memory");
            return false;
        }
        snprintf(why, why_size, "column %d: %s", e.position > 0 ? e.position : 1, e.text[0] ? e.text : "not JSON");
        if (cut)
            *cut = cut_short(&e, text, n);
        return false;
    }
    rj_val v;
    bool ok = copy_value(a, j, &v, ints_as_real);
    json_decref(j);
    if (!ok) {
        if (oom)
            *oom = true;
        snprintf(why, why_size, "out of memory");
        return false;
    }
    *out = v;
    return true;
}

bool rj_parse(rj_arena *a, const char *text, size_t n, rj_val *out, char *why, size_t why_size, bool *oom) {
    return rj_parse_ex(a, text, n, out, why, why_size, oom, NULL);
}

/* ---- access --------------------------------------------------------------------------------- */

const rj_val *rj_get(const rj_val *v, const char *key) {
    if (!v || v->type != RJ_OBJ)
        return NULL;
    for (size_t i = 0; i < v->len; i++)
        if (strcmp(v->keys[i], key) == 0)
            return &v->items[i];
    return NULL;
}

const rj_val *rj_path(const rj_val *v, const char *path) {
    char part[128];
    while (v && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        if (n >= sizeof part)
            return NULL;
        memcpy(part, path, n);
        part[n] = '\0';
        v = rj_get(v, part);
        path += n + (dot ? 1 : 0);
    }
    return v;
}

const char *rj_str(const rj_val *v) { return v && v->type == RJ_STR ? v->s : NULL; }

bool rj_num(const rj_val *v, double *out) {
    if (!v || v->type != RJ_NUM || !(v->num - v->num == 0))
        return false;
    *out = v->num;
    return true;
}

bool rj_int(const rj_val *v, int64_t *out) {
    if (!v || v->type != RJ_NUM || strpbrk(v->s, ".eE"))
        return false;
    errno = 0;
    char *end = NULL;
    long long x = strtoll(v->s, &end, 10);
    if (errno || !end || *end)
        return false;
    *out = x;
    return true;
}

bool rj_true(const rj_val *v) { return v && v->type == RJ_BOOL && v->b; }
bool rj_is(const rj_val *v, rj_type t) { return v && v->type == t; }
