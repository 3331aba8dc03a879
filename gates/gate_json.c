/* gate_json.c: the JSON-line writer of memra-gate (see gate_json.h). */
#include <math.h>
#include <string.h>

#include "gate_json.h"
#include "memra/digest.h"

static void put_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* Writes the separator and the key (if any) before a member. */
static void member(gate_json *j, const char *key) {
    if (j->has_member[j->depth])
        fputc(',', j->f);
    j->has_member[j->depth] = true;
    if (key) {
        put_string(j->f, key);
        fputc(':', j->f);
    }
}

static void open_nested(gate_json *j, const char *key, char bracket) {
    member(j, key);
    fputc(bracket, j->f);
    if (j->depth + 1 < GJ_DEPTH)
        j->depth++;
    j->has_member[j->depth] = false;
}

static void close_nested(gate_json *j, char bracket) {
    fputc(bracket, j->f);
    if (j->depth > 0)
        j->depth--;
}

void gj_begin(gate_json *j, const char *record) {
    j->depth = 0;
    j->has_member[0] = false;
    fputc('{', j->f);
    gj_str(j, "record", record);
}

void gj_end(gate_json *j) {
    fputs("}\n", j->f);
    fflush(j->f);
}

void gj_obj(gate_json *j, const char *key) { open_nested(j, key, '{'); }
void gj_obj_end(gate_json *j) { close_nested(j, '}'); }
void gj_arr(gate_json *j, const char *key) { open_nested(j, key, '['); }
void gj_arr_end(gate_json *j) { close_nested(j, ']'); }

void gj_str(gate_json *j, const char *key, const char *value) {
    member(j, key);
    if (value)
        put_string(j->f, value);
    else
        fputs("null", j->f);
}

void gj_u64(gate_json *j, const char *key, uint64_t value) {
    member(j, key);
    fprintf(j->f, "%llu", (unsigned long long)value);
}

void gj_i64(gate_json *j, const char *key, int64_t value) {
    member(j, key);
    fprintf(j->f, "%lld", (long long)value);
}

void gj_f64(gate_json *j, const char *key, double value) {
    member(j, key);
    if (isfinite(value))
        fprintf(j->f, "%.17g", value);
    else
        fputs("null", j->f);
}

void gj_bool(gate_json *j, const char *key, bool value) {
    member(j, key);
    fputs(value ? "true" : "false", j->f);
}

void gj_null(gate_json *j, const char *key) {
    member(j, key);
    fputs("null", j->f);
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
