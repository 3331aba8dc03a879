/* tokenizer_internal.h: what the tokenizer's sources share (not installed). */
#ifndef MEMRA_TOKENIZER_INTERNAL_H
#define MEMRA_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "memra/status.h"

typedef struct memra_tok_range {
    uint32_t lo, hi;
    uint8_t cat; /* MEMRA_TOK_LETTER or MEMRA_TOK_NUMBER */
} memra_tok_range;

#define MEMRA_TOK_OTHER 0
#define MEMRA_TOK_LETTER 1
#define MEMRA_TOK_NUMBER 2

extern const memra_tok_range memra_tok_ranges[];
extern const unsigned memra_tok_n_ranges;
extern const char memra_tok_unicode_version[];

/* Test hook (exported, not installed): the pieces the pre-tokenizer `pre` ("gpt-2", "smollm",
 * "llama3", "qwen2") splits text into, as byte offsets of their ends (up to cap of them into ends;
 * *n the count, MEMRA_E_RANGE when cap is short). */
memra_status memra_tok_pretokenize(const char *pre, const char *text, size_t len, size_t *ends, size_t cap, size_t *n,
                                   memra_error *err);

#endif
