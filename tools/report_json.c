/* report_json.c: the strict JSON parser of the report (see report_json.h). */
#include <errno.h>
#include <stdarg.h>
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
    free(a->stack);
    free(a->kstack);
    memset(a, 0, sizeof *a);
}

/* ---- parser --------------------------------------------------------------------------------- */

typedef struct parser {
    rj_arena *a;
    const unsigned char *p, *begin, *end;
    char *why;
    size_t why_size;
    bool failed, oom;
    char *sbuf; /* a string being decoded */
    size_t slen, scap;
} parser;

static bool fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(parser *ps, const char *fmt, ...) {
    if (ps->failed)
        return false;
    ps->failed = true;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ps->why, ps->why_size, "column %zu: %s", (size_t)(ps->p - ps->begin) + 1, msg);
    return false;
}

static bool nomem(parser *ps) {
    ps->oom = true;
    return fail(ps, "out of memory");
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

/* What the byte at p is, for messages. */
static const char *what_here(const parser *ps, char *buf, size_t size) {
    if (ps->p >= ps->end)
        return "the end of the line";
    unsigned c = *ps->p;
    if (c >= 0x21 && c < 0x7f)
        snprintf(buf, size, "'%c'", (char)c);
    else
        snprintf(buf, size, "byte 0x%02x", c);
    return buf;
}

static bool sput(parser *ps, const void *s, size_t n) {
    if (ps->slen + n + 1 > ps->scap) {
        size_t cap = ps->scap ? ps->scap : 256;
        while (cap < ps->slen + n + 1)
            cap *= 2;
        char *g = realloc(ps->sbuf, cap);
        if (!g)
            return nomem(ps);
        ps->sbuf = g;
        ps->scap = cap;
    }
    memcpy(ps->sbuf + ps->slen, s, n);
    ps->slen += n;
    return true;
}

static int hexval(unsigned c) {
    if (c >= '0' && c <= '9')
        return (int)(c - '0');
    if (c >= 'a' && c <= 'f')
        return (int)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F')
        return (int)(c - 'A' + 10);
    return -1;
}

static bool hex4(parser *ps, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = ps->p < ps->end ? hexval(*ps->p) : -1;
        if (h < 0)
            return fail(ps, "\\u needs four hex digits");
        v = v * 16 + (unsigned)h;
        ps->p++;
    }
    *out = v;
    return true;
}

static bool put_utf8(parser *ps, unsigned cp) {
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xc0 | cp >> 6);
        b[1] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xe0 | cp >> 12);
        b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        b[2] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (unsigned char)(0xf0 | cp >> 18);
        b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
        b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        b[3] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return sput(ps, b, n);
}

/* The length of the valid, shortest-form UTF-8 sequence of a scalar value at p (0: none). */
static size_t utf8_seq(const unsigned char *p, const unsigned char *end) {
    size_t avail = (size_t)(end - p);
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned cp;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    if (avail < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

static bool parse_string(parser *ps, const char **out, size_t *out_len) {
    ps->p++; /* the opening quote */
    ps->slen = 0;
    for (;;) {
        if (ps->p >= ps->end)
            return fail(ps, "a string is not closed");
        unsigned c = *ps->p;
        if (c == '"') {
            ps->p++;
            break;
        }
        if (c < 0x20)
            return fail(ps, "a raw control byte 0x%02x in a string (JSON wants it escaped)", c);
        if (c == '\\') {
            ps->p++;
            if (ps->p >= ps->end)
                return fail(ps, "a string ends in a lone backslash");
            unsigned e = *ps->p++;
            char ch = 0;
            switch (e) {
            case '"': ch = '"'; break;
            case '\\': ch = '\\'; break;
            case '/': ch = '/'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'n': ch = '\n'; break;
            case 'r': ch = '\r'; break;
            case 't': ch = '\t'; break;
            case 'u': {
                unsigned cp = 0;
                if (!hex4(ps, &cp))
                    return false;
                if (cp >= 0xdc00 && cp <= 0xdfff)
                    return fail(ps, "\\u%04x: a low surrogate without a high one", cp);
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    unsigned lo = 0;
                    if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u')
                        return fail(ps, "\\u%04x: a high surrogate without a low one", cp);
                    ps->p += 2;
                    if (!hex4(ps, &lo))
                        return false;
                    if (lo < 0xdc00 || lo > 0xdfff)
                        return fail(ps, "\\u%04x\\u%04x: not a surrogate pair", cp, lo);
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                if (!put_utf8(ps, cp))
                    return false;
                continue;
            }
            default: ps->p--; return fail(ps, "unknown escape '\\%c'", e >= 0x21 && e < 0x7f ? (char)e : '?');
            }
            if (!sput(ps, &ch, 1))
                return false;
            continue;
        }
        size_t n = utf8_seq(ps->p, ps->end);
        if (n == 0)
            return fail(ps, "byte 0x%02x is not valid UTF-8", c);
        if (!sput(ps, ps->p, n))
            return false;
        ps->p += n;
    }
    char *s = arena_alloc(ps->a, ps->slen + 1);
    if (!s)
        return nomem(ps);
    if (ps->slen)
        memcpy(s, ps->sbuf, ps->slen);
    s[ps->slen] = '\0';
    *out = s;
    *out_len = ps->slen;
    return true;
}

static bool is_digit(const parser *ps) { return ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9'; }

static bool parse_number(parser *ps, rj_val *v) {
    const unsigned char *start = ps->p;
    if (*ps->p == '-')
        ps->p++;
    if (!is_digit(ps))
        return fail(ps, "a number needs a digit here");
    if (*ps->p == '0') {
        ps->p++;
        if (is_digit(ps))
            return fail(ps, "a number with a leading zero");
    } else {
        while (is_digit(ps))
            ps->p++;
    }
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (!is_digit(ps))
            return fail(ps, "a digit must follow the decimal point");
        while (is_digit(ps))
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (!is_digit(ps))
            return fail(ps, "an exponent needs a digit");
        while (is_digit(ps))
            ps->p++;
    }
    size_t n = (size_t)(ps->p - start);
    char *text = arena_alloc(ps->a, n + 1);
    if (!text)
        return nomem(ps);
    memcpy(text, start, n);
    text[n] = '\0';
    v->type = RJ_NUM;
    v->s = text;
    v->num = strtod(text, NULL); /* the grammar above is a subset of strtod's */
    return true;
}

static bool literal(parser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return false;
    ps->p += n;
    return true;
}

static bool push_val(parser *ps, const rj_val *v) {
    rj_arena *a = ps->a;
    if (a->sp == a->scap) {
        size_t cap = a->scap ? a->scap * 2 : 64;
        rj_val *g = realloc(a->stack, cap * sizeof *g);
        if (!g)
            return nomem(ps);
        a->stack = g;
        a->scap = cap;
    }
    a->stack[a->sp++] = *v;
    return true;
}

static bool push_key(parser *ps, const char *k) {
    rj_arena *a = ps->a;
    if (a->ksp == a->kcap) {
        size_t cap = a->kcap ? a->kcap * 2 : 64;
        const char **g = realloc(a->kstack, cap * sizeof *g);
        if (!g)
            return nomem(ps);
        a->kstack = g;
        a->kcap = cap;
    }
    a->kstack[a->ksp++] = k;
    return true;
}

static bool parse_value(parser *ps, rj_val *v, int depth);

/* The members pushed since base become the container's. */
static bool pop_members(parser *ps, rj_val *v, size_t base, size_t kbase, bool obj) {
    rj_arena *a = ps->a;
    size_t n = a->sp - base;
    v->len = n;
    v->items = NULL;
    v->keys = NULL;
    if (n) {
        if (n > SIZE_MAX / sizeof(rj_val) || !(v->items = arena_alloc(a, n * sizeof(rj_val))))
            return nomem(ps);
        memcpy(v->items, a->stack + base, n * sizeof(rj_val));
        if (obj) {
            if (!(v->keys = arena_alloc(a, n * sizeof(char *))))
                return nomem(ps);
            memcpy(v->keys, a->kstack + kbase, n * sizeof(char *));
        }
    }
    a->sp = base;
    a->ksp = kbase;
    return true;
}

static bool parse_container(parser *ps, rj_val *v, int depth, bool obj) {
    if (depth >= RJ_MAX_DEPTH)
        return fail(ps, "nested more than %d deep", RJ_MAX_DEPTH);
    const size_t base = ps->a->sp, kbase = ps->a->ksp;
    const char close = obj ? '}' : ']';
    char hb[16];
    ps->p++;
    v->type = obj ? RJ_OBJ : RJ_ARR;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == (unsigned char)close) {
        ps->p++;
        return pop_members(ps, v, base, kbase, obj);
    }
    for (;;) {
        skip_ws(ps);
        if (obj) {
            if (ps->p >= ps->end || *ps->p != '"')
                return fail(ps, "expected a member name (a string), found %s", what_here(ps, hb, sizeof hb));
            const char *key;
            size_t klen;
            if (!parse_string(ps, &key, &klen))
                return false;
            if (strlen(key) != klen)
                return fail(ps, "a member name holds a NUL character");
            for (size_t k = kbase; k < ps->a->ksp; k++)
                if (strcmp(ps->a->kstack[k], key) == 0)
                    return fail(ps, "member \"%.64s\" is given twice", key);
            if (!push_key(ps, key))
                return false;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':')
                return fail(ps, "expected ':' after a member name, found %s", what_here(ps, hb, sizeof hb));
            ps->p++;
        }
        rj_val item = {0};
        if (!parse_value(ps, &item, depth + 1) || !push_val(ps, &item))
            return false;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == (unsigned char)close) {
            ps->p++;
            return pop_members(ps, v, base, kbase, obj);
        }
        return fail(ps, "expected ',' or '%c', found %s", close, what_here(ps, hb, sizeof hb));
    }
}

static bool parse_value(parser *ps, rj_val *v, int depth) {
    char hb[16];
    skip_ws(ps);
    if (ps->p >= ps->end)
        return fail(ps, "expected a value, found the end of the line");
    memset(v, 0, sizeof *v);
    switch (*ps->p) {
    case '{': return parse_container(ps, v, depth, true);
    case '[': return parse_container(ps, v, depth, false);
    case '"': v->type = RJ_STR; return parse_string(ps, &v->s, &v->len);
    case 't':
    case 'f':
    case 'n':
        if (literal(ps, "true")) {
            v->type = RJ_BOOL;
            v->b = true;
            return true;
        }
        if (literal(ps, "false")) {
            v->type = RJ_BOOL;
            return true;
        }
        if (literal(ps, "null")) {
            v->type = RJ_NULL;
            return true;
        }
        break;
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
            return parse_number(ps, v);
    }
    return fail(ps, "expected a value, found %s", what_here(ps, hb, sizeof hb));
}

bool rj_parse(rj_arena *a, const char *text, size_t n, rj_val *out, char *why, size_t why_size, bool *oom) {
    char dummy[8];
    parser ps = {.a = a,
                 .p = (const unsigned char *)text,
                 .begin = (const unsigned char *)text,
                 .end = (const unsigned char *)text + n,
                 .why = why ? why : dummy,
                 .why_size = why ? why_size : sizeof dummy};
    a->sp = a->ksp = 0;
    rj_val v;
    bool ok = parse_value(&ps, &v, 0);
    if (ok) {
        skip_ws(&ps);
        char hb[16];
        if (ps.p < ps.end)
            ok = fail(&ps, "text after the value: %s", what_here(&ps, hb, sizeof hb));
    }
    free(ps.sbuf);
    if (oom)
        *oom = ps.oom;
    if (ok)
        *out = v;
    return ok;
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
