/* gate_json.c: the JSON-line writer of memra-gate (see gate_json.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "gate_json.h"
#include "memra/utf8.h"
#include "memra/digest.h"
#include "memra/fileio.h"

static void put(gate_json *j, const char *s, size_t n) {
    if (j->oom)
        return;
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 4096;
        while (cap < j->len + n + 1)
            cap *= 2;
        char *grown = realloc(j->buf, cap);
        if (!grown) {
            j->oom = true;
            return;
        }
        j->buf = grown;
        j->cap = cap;
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
}

static void putc_(gate_json *j, char c) { put(j, &c, 1); }
static void puts_(gate_json *j, const char *s) { put(j, s, strlen(s)); }

static void putf(gate_json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(gate_json *j, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        put(j, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void put_string(gate_json *j, const char *s) {
    putc_(j, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        switch (*p) {
        case '"': puts_(j, "\\\""); break;
        case '\\': puts_(j, "\\\\"); break;
        case '\n': puts_(j, "\\n"); break;
        case '\r': puts_(j, "\\r"); break;
        case '\t': puts_(j, "\\t"); break;
        default:
            if (*p < 0x20 || *p == 0x7f) {
                putf(j, "\\u%04x", *p);
            } else {
                /* A sequence ends at the NUL at the latest, which is no continuation byte. */
                size_t n = memra_utf8_len(p, 4);
                if (n == 0) {
                    puts_(j, "\xef\xbf\xbd"); /* U+FFFD for a byte outside any valid sequence */
                    n = 1;
                } else {
                    put(j, (const char *)p, n);
                }
                p += n;
                continue;
            }
        }
        p++;
    }
    putc_(j, '"');
}

/* Writes the separator and the key (if any) before a member. */
static void member(gate_json *j, const char *key) {
    if (j->has_member[j->depth])
        putc_(j, ',');
    j->has_member[j->depth] = true;
    if (key) {
        put_string(j, key);
        putc_(j, ':');
    }
}

static void open_nested(gate_json *j, const char *key, char bracket) {
    member(j, key);
    putc_(j, bracket);
    if (j->depth + 1 < GJ_DEPTH)
        j->depth++;
    j->has_member[j->depth] = false;
}

static void close_nested(gate_json *j, char bracket) {
    putc_(j, bracket);
    if (j->depth > 0)
        j->depth--;
}

void gj_begin(gate_json *j, const char *record) {
    j->depth = 0;
    j->has_member[0] = false;
    j->len = 0;
    j->oom = false;
    putc_(j, '{');
    gj_str(j, "record", record);
}

static void fail(gate_json *j, const char *why) {
    if (!j->failed)
        snprintf(j->failure, sizeof j->failure, "%s", why);
    j->failed = true;
}

void gj_end(gate_json *j) {
    puts_(j, "}\n");
    const bool final = j->closing;
    j->closing = false;
    if (!gj_open(j) || (j->failed && !final))
        return; /* after a failed write only the final record is tried: no gap in the middle */
    if (j->oom) {
        fail(j, "out of memory building a record: it was not written");
        return;
    }
    if (j->fd >= 0) {
        memra_error e = {0};
        if (memra_append_line(j->fd, j->name, j->buf, j->len, &e) != MEMRA_OK) {
            char why[sizeof j->failure];
            snprintf(why, sizeof why, "a record could not be written: %.*s", (int)sizeof why - 40, e.msg);
            fail(j, why);
        }
        return;
    }
    errno = 0;
    if (fwrite(j->buf, 1, j->len, j->f) != j->len || fflush(j->f) != 0) {
        char why[sizeof j->failure];
        snprintf(why, sizeof why, "a record could not be written to %s: %s", j->name ? j->name : "stdout",
                 errno ? strerror(errno) : "write error");
        fail(j, why);
    }
}

bool gj_open(const gate_json *j) { return j->fd >= 0 || j->f != NULL; }

void gj_obj(gate_json *j, const char *key) { open_nested(j, key, '{'); }
void gj_obj_end(gate_json *j) { close_nested(j, '}'); }
void gj_arr(gate_json *j, const char *key) { open_nested(j, key, '['); }
void gj_arr_end(gate_json *j) { close_nested(j, ']'); }

void gj_str(gate_json *j, const char *key, const char *value) {
    member(j, key);
    if (value)
        put_string(j, value);
    else
        puts_(j, "null");
}

void gj_u64(gate_json *j, const char *key, uint64_t value) {
    member(j, key);
    putf(j, "%llu", (unsigned long long)value);
}

void gj_i64(gate_json *j, const char *key, int64_t value) {
    member(j, key);
    putf(j, "%lld", (long long)value);
}

void gj_f64(gate_json *j, const char *key, double value) {
    member(j, key);
    if (isfinite(value))
        putf(j, "%.17g", value);
    else
        puts_(j, "null");
}

void gj_bool(gate_json *j, const char *key, bool value) {
    member(j, key);
    puts_(j, value ? "true" : "false");
}

void gj_null(gate_json *j, const char *key) {
    member(j, key);
    puts_(j, "null");
}

void gj_hex(gate_json *j, const char *key, const uint8_t *digest32) {
    if (!digest32) {
        gj_null(j, key);
        return;
    }
    char hex[MEMRA_SHA256_HEX];
    memra_sha256_hex(digest32, hex);
    gj_str(j, key, hex);
}

void gj_free(gate_json *j) {
    free(j->buf);
    j->buf = NULL;
    j->len = j->cap = 0;
}
