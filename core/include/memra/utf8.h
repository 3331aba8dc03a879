/* memra/utf8.h: UTF-8 as the tools and the gate write it (JSON records, printed model strings)
 * and as tokenizers will read it: one strict definition of a valid sequence. */
#ifndef MEMRA_UTF8_H
#define MEMRA_UTF8_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The length (1 to 4) of the valid UTF-8 sequence that starts at s, of the n bytes there, or 0
 * when none starts there: a continuation byte, an overlong form (0xc0, 0xc1, 0xe0 0x80..0x9f,
 * 0xf0 0x80..0x8f), a surrogate (0xed 0xa0..0xbf), a code point above U+10FFFF, 0xf5..0xff, or a
 * sequence cut short by n or by a byte that is not a continuation. */
size_t memra_utf8_len(const unsigned char *s, size_t n);

#ifdef __cplusplus
}
#endif
#endif
