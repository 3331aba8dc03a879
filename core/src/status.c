/* status.c: memra_error, the one way the library reports a failure. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "memra/status.h"
#include "memra/version.h"

/* A message is one line of text whatever it quotes: a control byte (a newline, or an escape
 * sequence from a manifest, a GGUF string or a plugin's name) becomes '?', so echoing untrusted
 * text cannot break the line or drive the terminal that shows it. */
static void one_line(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
            *s = '?';
}

memra_status memra_fail(memra_error *err, memra_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->status = status;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        one_line(err->msg);
    }
    return status;
}

void memra_error_prefix(memra_error *err, const char *fmt, ...) {
    if (!err)
        return;
    char prefix[MEMRA_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char joined[2 * MEMRA_ERROR_MSG_MAX + 2];
    snprintf(joined, sizeof joined, "%s: %s", prefix, err->msg);
    joined[sizeof err->msg - 1] = '\0'; /* cut to the message size */
    memcpy(err->msg, joined, sizeof err->msg);
    one_line(err->msg);
}

void memra_error_clear(memra_error *err) {
    if (err) {
        err->status = MEMRA_OK;
        err->msg[0] = '\0';
    }
}

const char *memra_status_name(memra_status status) {
    switch (status) {
    case MEMRA_OK: return "ok";
    case MEMRA_E_INVALID: return "invalid";
    case MEMRA_E_FORMAT: return "format";
    case MEMRA_E_UNSUPPORTED: return "unsupported";
    case MEMRA_E_NOMEM: return "nomem";
    case MEMRA_E_IO: return "io";
    case MEMRA_E_RANGE: return "range";
    case MEMRA_E_PLUGIN: return "plugin";
    case MEMRA_E_DEVICE: return "device";
    case MEMRA_E_REFUSED: return "refused";
    case MEMRA_E_QUARANTINED: return "quarantined";
    case MEMRA_E_INTERNAL: return "internal";
    }
    return "unknown";
}

const char *memra_version(void) { return MEMRA_VERSION_STRING; }
