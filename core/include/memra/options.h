/* memra/options.h: arm strings (BACKEND[:key=value,...]) parsed into a backend name and options,
 * and typed look-ups of option values. Opening and running an arm is memra/arm.h. */
#ifndef MEMRA_OPTIONS_H
#define MEMRA_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "memra/plugin.h"
#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEMRA_BACKEND_NAME_MAX 64

/* Parses "cuda:stages=2,devices=0,1,window=3" into the backend name and its options. A value may
 * contain commas when the next item has no '=' (devices=0,1 above: "1" joins "devices").
 * Errors (MEMRA_E_INVALID, naming the text): empty backend, empty key, a key without '=' at the
 * start, a key given twice, a key or value too long, too many keys. Does not judge whether a key
 * is known: see memra_options_check. */
memra_status memra_arm_parse(const char *arm, char backend[MEMRA_BACKEND_NAME_MAX], memra_options *opts,
                             memra_error *err);

/* MEMRA_E_INVALID when opts holds a key in none of the spec lists, naming it and listing every
 * known key. */
memra_status memra_options_check(const memra_options *opts, const memra_option_spec *const *specs,
                                 const uint32_t *n_specs, uint32_t n_lists, const char *arm, memra_error *err);

/* The value of key, or NULL. */
const char *memra_options_get(const memra_options *opts, const char *key);
/* Sets (or replaces) key=value; MEMRA_E_INVALID when too long or full. */
memra_status memra_options_set(memra_options *opts, const char *key, const char *value, memra_error *err);
/* Typed look-ups with a default when the key is absent; a malformed or out-of-range value is
 * MEMRA_E_INVALID naming the key ("threads=abc: expected an integer from 1 to 256"). */
memra_status memra_options_u32(const memra_options *opts, const char *key, uint32_t dflt, uint32_t min, uint32_t max,
                               uint32_t *out, memra_error *err);
/* A comma-separated list of unsigned integers ("0,1,2"); *n is 0 when the key is absent. */
memra_status memra_options_u32_list(const memra_options *opts, const char *key, uint32_t *out, uint32_t max_n,
                                    uint32_t *n, memra_error *err);
/* The collective plugin's name in a collective= value: NAME, NAME:MODE or NAME:KEY=VALUE (the
 * part after ':' is the collective's own option), into name. False when the name is empty or
 * does not fit in size - 1 bytes. */
bool memra_collective_value_name(const char *value, char *name, size_t size);
/* A whole collective value, NAME[:ITEM[,ITEM...]] where an ITEM is KEY=VALUE or a bare WORD
 * (mode=WORD): the name into name, the items appended to opts (an arm holds one item; a command
 * line may give several). MEMRA_E_INVALID naming the value when it is malformed. */
memra_status memra_collective_value_parse(const char *value, char *name, size_t size, memra_options *opts,
                                          memra_error *err);
/* The longest text memra_arm_format can write, its NUL included: a backend name of at most
 * MEMRA_BACKEND_NAME_MAX - 1 characters and MEMRA_OPT_MAX items, each a separator, a key, '=' and
 * a value of the longest lengths memra_options allows. */
#define MEMRA_ARM_TEXT_MAX (MEMRA_BACKEND_NAME_MAX + MEMRA_OPT_MAX * (MEMRA_OPT_KEY_MAX + MEMRA_OPT_VALUE_MAX))
/* Writes "backend:key=value,..." into buf (always NUL-terminated when size > 0). False when the
 * text did not fit in size bytes (it is then cut short); a buffer of MEMRA_ARM_TEXT_MAX bytes
 * always holds it. */
bool memra_arm_format(const char *backend, const memra_options *opts, char *buf, size_t size);

/* The name of names[0..n) closest to typed by edit distance, for a "did you mean" (NULL entries
 * skipped), or NULL when none is within a third of typed's length (at least 2 edits). */
const char *memra_closest_name(const char *typed, const char *const *names, size_t n);

#ifdef __cplusplus
}
#endif
#endif
