/* report_json.h: record lines parsed by jansson (the distribution's libjansson) into a compact,
 * read-only tree, for `memra report` and `memra-gate --html`. One value per call; the whole text
 * must be that value (whitespace around it aside). jansson is strict RFC 8259: no trailing commas,
 * no comments, no NaN or Infinity, no leading zeros, no raw control bytes in strings, valid UTF-8
 * only (overlong forms, surrogates and code points beyond U+10FFFF refused, a lone surrogate
 * escape too); duplicate member names are refused through its hash tables
 * (JSON_REJECT_DUPLICATES), and nesting deeper than RJ_MAX_DEPTH is refused before jansson reads
 * the line. Parsing takes time proportional to the text's length, however many members an
 * object has. Each line's jansson tree is copied into an arena that the caller frees once,
 * whatever the number of lines parsed into it, and freed at once (a jansson object costs far more
 * memory than its text). Integers beyond int64 are read as doubles (their text is then the
 * double's). */
#ifndef MEMRA_REPORT_JSON_H
#define MEMRA_REPORT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RJ_MAX_DEPTH 64

typedef enum rj_type { RJ_NULL, RJ_BOOL, RJ_NUM, RJ_STR, RJ_ARR, RJ_OBJ } rj_type;

typedef struct rj_val rj_val;
struct rj_val {
    rj_type type;
    bool b;            /* RJ_BOOL */
    double num;        /* RJ_NUM (finite: jansson refuses a number that overflows a double) */
    const char *s;     /* RJ_STR: the decoded string (NUL-terminated; may hold NUL bytes: see len);
                          RJ_NUM: the number's text (an integer as written; a
                          fraction in its shortest round-trip form, with a '.' or an 'e') */
    size_t len;        /* RJ_STR: bytes of s; RJ_ARR, RJ_OBJ: members */
    rj_val *items;     /* RJ_ARR, RJ_OBJ: the values */
    const char **keys; /* RJ_OBJ: the member names */
};

/* Where values are allocated. Zero-initialise, then rj_arena_free. */
typedef struct rj_arena {
    struct rj_block *head;
} rj_arena;

void rj_arena_free(rj_arena *a);

/* Parses text[0..n) as one JSON value into *out. false: *out is unset, and why holds a message
 * naming the byte offset (1-based column) of the error, e.g. "column 17: '}' expected near '1'";
 * oom is set when the failure was memory; cut, when given, is set when the text is the beginning of
 * some JSON text that ends too soon (a line cut short), rather than wrong where it stops. */
bool rj_parse(rj_arena *a, const char *text, size_t n, rj_val *out, char *why, size_t why_size, bool *oom);
bool rj_parse_ex(rj_arena *a, const char *text, size_t n, rj_val *out, char *why, size_t why_size, bool *oom,
                 bool *cut);

/* Member `key` of an object (NULL when v is not an object or has no such member). */
const rj_val *rj_get(const rj_val *v, const char *key);
/* A dotted path of members: rj_path(v, "arms.a.text"). */
const rj_val *rj_path(const rj_val *v, const char *path);
/* The string, or NULL when v is not a string. */
const char *rj_str(const rj_val *v);
/* The number: true when v is a finite number. */
bool rj_num(const rj_val *v, double *out);
/* An integer that fits int64 (written without fraction or exponent). */
bool rj_int(const rj_val *v, int64_t *out);
/* true when v is the boolean true. */
bool rj_true(const rj_val *v);
bool rj_is(const rj_val *v, rj_type t);

#endif
