/* gate_json.h: a small writer for the gate's JSON-line records.
 *
 * One record is one object on one line: gj_begin, members, gj_end. The members are built in
 * memory and gj_end writes the whole line (newline included) in one call and flushes, so a
 * reader tailing the file sees whole records, and a record is written whole or not at all: a
 * record that could not be built or written sets `failed` (the gate then does not exit 0).
 * After a failed write no further record is written except the final one (verdict or
 * interrupted), so a record file never has a gap in the middle. A --jsonl file is appended to
 * with memra_append_line: each line whole or not at all, under an exclusive lock, so gates
 * sharing one file never interleave.
 * Strings are escaped, and are always valid UTF-8: each byte that does not belong to a valid
 * UTF-8 sequence is replaced by U+FFFD, so no record holds half a character. Doubles that are not finite are written as null (JSON has no NaN).
 * Nesting is bounded by GJ_DEPTH. */
#ifndef MEMRA_GATE_JSON_H
#define MEMRA_GATE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GJ_DEPTH 16

typedef struct gate_json {
    FILE *f;          /* stdout, or NULL */
    int fd;           /* --jsonl FILE opened O_APPEND: each line appended with memra_append_line; -1: f */
    const char *name; /* the output in messages: the path, or "stdout" */
    bool closing;     /* the final record (verdict, interrupted): written even after a failure */
    int depth;
    bool has_member[GJ_DEPTH]; /* a comma is due before the next member at this depth */
    char *buf;                 /* the record being built */
    size_t len, cap;
    bool oom;    /* the record being built ran out of memory: it is dropped */
    bool failed; /* a record could not be written (or built) */
    char failure[1024];
} gate_json;

/* key is NULL for an element of an array. */
void gj_begin(gate_json *j, const char *record);
void gj_end(gate_json *j);
void gj_obj(gate_json *j, const char *key);
void gj_obj_end(gate_json *j);
void gj_arr(gate_json *j, const char *key);
void gj_arr_end(gate_json *j);
void gj_str(gate_json *j, const char *key, const char *value); /* NULL value: null */
void gj_u64(gate_json *j, const char *key, uint64_t value);
void gj_i64(gate_json *j, const char *key, int64_t value);
void gj_f64(gate_json *j, const char *key, double value);
void gj_bool(gate_json *j, const char *key, bool value);
void gj_null(gate_json *j, const char *key);
/* A SHA-256 as 64 hex digits; NULL: null. */
void gj_hex(gate_json *j, const char *key, const uint8_t *digest32);
/* Whether records have somewhere to go. */
bool gj_open(const gate_json *j);
/* Frees the line buffer (the FILE is the caller's). */
void gj_free(gate_json *j);

#endif
