/* memra/status.h: the status every public call returns, and the message it leaves.
 *
 * Contract: a call that fails returns a status other than MEMRA_OK and, when the caller passed
 * a non-NULL memra_error, writes one line into it saying what failed, where and why, e.g.
 * "model.gguf: tensor 'blk.3.attn_k.weight' has 1024 columns, expected 4096 (n_embd)".
 * The library never exits, aborts or prints on its own. */
#ifndef MEMRA_STATUS_H
#define MEMRA_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum memra_status {
    MEMRA_OK = 0,
    MEMRA_E_INVALID = 1,      /* a bad argument or option (usage) */
    MEMRA_E_FORMAT = 2,       /* malformed input file (GGUF, manifest) */
    MEMRA_E_UNSUPPORTED = 3,  /* valid, but memra cannot do it (tensor type, architecture) */
    MEMRA_E_NOMEM = 4,        /* host or device allocation failed */
    MEMRA_E_IO = 5,           /* open, read, write, mmap failed */
    MEMRA_E_RANGE = 6,        /* a position, index or size out of range */
    MEMRA_E_PLUGIN = 7,       /* a plugin could not be found, loaded or accepted */
    MEMRA_E_DEVICE = 8,       /* an accelerator call failed */
    MEMRA_E_REFUSED = 9,      /* a collective refused the operation; nothing was committed */
    MEMRA_E_QUARANTINED = 10, /* the state failed earlier and must be destroyed */
    MEMRA_E_INTERNAL = 11     /* a broken invariant: a bug in memra or a plugin */
} memra_status;

#define MEMRA_ERROR_MSG_MAX 1024

typedef struct memra_error {
    memra_status status;
    char msg[MEMRA_ERROR_MSG_MAX];
} memra_error;

/* Records status and a printf-style message into err (which may be NULL) and returns status.
 * A message longer than MEMRA_ERROR_MSG_MAX - 1 is cut; control bytes in it (from quoted
 * untrusted text) read '?'. */
memra_status memra_fail(memra_error *err, memra_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Prepends "prefix: " to an existing message in err (no-op when err is NULL). */
void memra_error_prefix(memra_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Clears err to MEMRA_OK and an empty message. */
void memra_error_clear(memra_error *err);

/* A short stable word for a status: "ok", "invalid", "format", ... */
const char *memra_status_name(memra_status status);

#ifdef __cplusplus
}
#endif
#endif
