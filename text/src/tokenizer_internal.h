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

/* ---- what tokenizer.c (tables, merges, encoding), tokenizer_pretok.c (Unicode classes and the
 * pre-tokenizers), tokenizer_decode.c and tokenizer_build.c (from GGUF metadata) share ---- */

#include <stdbool.h>

#include "memra/tokenizer.h"

#define TOK_INTERNAL __attribute__((visibility("hidden")))

#define TOK_MAX_TOKENS (1u << 24)  /* more tokens than any published vocabulary: refused */
#define TOK_MAX_TEXT (1u << 16)    /* bytes of one token's text */
#define TOK_CP_INVALID 0xffffffffu /* a byte that starts no valid UTF-8 sequence */
#define TOK_MAX_EOG 32             /* end-of-generation ids kept (eog_texts of tokenizer_build.c, 3 keys) */

enum { KIND_GPT2, KIND_LLAMA };
enum { PRE_NONE, PRE_GPT2, PRE_SMOLLM, PRE_LLAMA3, PRE_QWEN2 };
enum { CLS_OTHER = 0, CLS_LETTER = 1, CLS_NUMBER = 2, CLS_SPACE = 3 };

typedef struct str_table { /* open addressing: slot holds index + 1, 0 empty */
    uint32_t *slots;
    uint64_t mask;
} str_table;

struct memra_tokenizer {
    int kind;
    int pre;
    const char *pre_name;
    uint32_t n;
    char *text;      /* every token's text, back to back */
    uint64_t *off;   /* n + 1 offsets into text */
    float *scores;   /* n */
    uint8_t *types;  /* n */
    str_table vocab; /* text -> id */
    char *mtext;     /* merges "a b", back to back */
    uint64_t *moff;  /* n_merges + 1 */
    uint32_t n_merges;
    str_table merges; /* "a b" -> rank */
    int32_t special[MEMRA_SPECIAL_COUNT];
    int32_t eog[TOK_MAX_EOG]; /* the end-of-generation ids, ascending */
    uint32_t n_eog;
    bool add_bos, add_space_prefix, ignore_merges;
    int32_t *partition; /* control, user-defined and unknown ids, longest text first */
    uint32_t n_partition;
    int32_t byte_tok[256]; /* llama: the <0xXX> tokens; -1 when absent */
    uint32_t b2u[256];     /* gpt2: byte -> code point */
    int16_t u2b[512];      /* gpt2: code point -> byte, -1 for none */
};

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

typedef struct ivec {
    int32_t *p;
    size_t n, cap;
} ivec;

/* tokenizer.c */
TOK_INTERNAL bool buf_reserve(buf *b, size_t more);
TOK_INTERNAL bool buf_add(buf *b, const void *s, size_t len);
TOK_INTERNAL bool ivec_push(ivec *v, int32_t x);
TOK_INTERNAL bool table_init(str_table *t, uint32_t n);
TOK_INTERNAL uint64_t table_slot(const str_table *t, const char *text, const uint64_t *off, const char *s, size_t len);
TOK_INTERNAL int32_t vocab_find(const memra_tokenizer *t, const char *s, size_t len);
TOK_INTERNAL int64_t merge_find(const memra_tokenizer *t, const char *s, size_t len);
TOK_INTERNAL const char *tok_text(const memra_tokenizer *t, int32_t id, size_t *len);

/* tokenizer_pretok.c */
TOK_INTERNAL bool is_space(uint32_t c);
TOK_INTERNAL int cls(uint32_t c);
TOK_INTERNAL size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
TOK_INTERNAL size_t utf8_put(uint32_t cp, char *out);
TOK_INTERNAL bool split_gpt2(const uint32_t *cp, size_t start, size_t end, ivec *ends);
TOK_INTERNAL bool split_smollm(const uint32_t *cp, size_t start, size_t end, ivec *ends);
TOK_INTERNAL bool split_llama3(const uint32_t *cp, size_t start, size_t end, size_t max_digits, ivec *ends);

#endif
