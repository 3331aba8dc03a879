/* memra/tokenizer.h: text to token ids and back, from a GGUF file's tokenizer metadata.
 *
 * Kinds (tokenizer.ggml.model): "gpt2" (byte-level BPE: the GPT-2 byte-to-unicode map, merges by
 * rank, a pre-tokenizer chosen by tokenizer.ggml.pre: absent or "gpt-2" (the GPT-2 pattern),
 * "smollm"/"starcoder" (every digit its own piece, then the GPT-2 pattern), "llama-bpe"/"llama3"
 * and "qwen2", all written as code) and "llama" (SentencePiece-style: spaces to U+2581, merges by
 * score, byte fallback to <0xXX> tokens, the unknown token otherwise). Anything else is refused
 * with MEMRA_E_UNSUPPORTED and one line naming it and the file.
 *
 * Everything the file gives (tokens, merges, scores, token types, special ids) is checked when the
 * tokenizer is built: a malformed vocabulary is MEMRA_E_FORMAT with a message naming what is wrong.
 * The tokenizer copies what it needs: the GGUF handle may be closed afterwards. Text may hold any
 * bytes: a byte that starts no valid UTF-8 sequence is its own character (of no category). */
#ifndef MEMRA_TOKENIZER_H
#define MEMRA_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memra/gguf.h"
#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Token types, numbered as tokenizer.ggml.token_type numbers them. */
typedef enum memra_token_type {
    MEMRA_TOKEN_UNDEFINED = 0,
    MEMRA_TOKEN_NORMAL = 1,
    MEMRA_TOKEN_UNKNOWN = 2,
    MEMRA_TOKEN_CONTROL = 3,
    MEMRA_TOKEN_USER_DEFINED = 4,
    MEMRA_TOKEN_UNUSED = 5,
    MEMRA_TOKEN_BYTE = 6
} memra_token_type;

/* The special ids a file may name (tokenizer.ggml.*_token_id). */
typedef enum memra_special_token {
    MEMRA_SPECIAL_BOS = 0,
    MEMRA_SPECIAL_EOS = 1,
    MEMRA_SPECIAL_EOT = 2,
    MEMRA_SPECIAL_UNK = 3,
    MEMRA_SPECIAL_PAD = 4,
    MEMRA_SPECIAL_COUNT = 5
} memra_special_token;

typedef struct memra_tokenizer memra_tokenizer;

/* Builds the tokenizer the file describes; *out is NULL on failure. */
memra_status memra_tokenizer_new(const memra_gguf *g, memra_tokenizer **out, memra_error *err);
void memra_tokenizer_free(memra_tokenizer *t);

const char *memra_tokenizer_kind(const memra_tokenizer *t); /* "gpt2" or "llama" */
const char *memra_tokenizer_pre(const memra_tokenizer *t);  /* the pre-tokenizer used: "gpt-2", "smollm", ... */
uint32_t memra_tokenizer_n_tokens(const memra_tokenizer *t);
/* The id the file names for `which`, or -1 when it names none. */
int32_t memra_tokenizer_special(const memra_tokenizer *t, memra_special_token which);
bool memra_tokenizer_add_bos(const memra_tokenizer *t);
/* The token's text as the vocabulary stores it (not NUL-terminated) and its type; NULL / UNDEFINED
 * for an id out of range. */
const char *memra_tokenizer_text(const memra_tokenizer *t, int32_t id, size_t *len);
memra_token_type memra_tokenizer_type(const memra_tokenizer *t, int32_t id);
/* True for the ids that end generation: eos, eot and eom as the file names them, and every token of
 * the vocabulary whose text marks the end of a turn or of a text, as llama.cpp decides them
 * ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<end_of_turn>",
 * "<|end|>", "<EOT>", ...). Such a token is a control token whatever type the file gives it, so
 * text encoded without MEMRA_TOKENIZE_SPECIALS never produces it. */
bool memra_tokenizer_is_eog(const memra_tokenizer *t, int32_t id);
/* The end-of-generation ids, ascending: their count, and *ids (may be NULL) points at them. */
uint32_t memra_tokenizer_eog(const memra_tokenizer *t, const int32_t **ids);

#define MEMRA_TOKENIZE_ADD_BOS 1u  /* prepend bos when the file says add_bos_token (and names a bos) */
#define MEMRA_TOKENIZE_SPECIALS 2u /* match control tokens written in the text (user-defined: always) */

/* Encodes len bytes of text into a malloc'd array *ids of *n ids (the caller frees it; NULL when
 * *n is 0). */
memra_status memra_tokenizer_encode(const memra_tokenizer *t, const char *text, size_t len, unsigned flags,
                                    int32_t **ids, size_t *n, memra_error *err);

/* One piece of a text to encode: its bytes, and whether control tokens written in it are matched
 * (a template's markers) or stay plain text (what a user typed). */
typedef struct memra_text_part {
    const char *text;
    size_t len;
    bool specials;
} memra_text_part;

/* Encodes the parts as one text (flags: MEMRA_TOKENIZE_ADD_BOS only): each part's control tokens
 * are matched only when its `specials` is set, and plain text that runs across parts is tokenized
 * as one piece, so the ids are those of the whole text except that no marker is ever read out of
 * a part without specials. */
memra_status memra_tokenizer_encode_parts(const memra_tokenizer *t, const memra_text_part *parts, size_t n_parts,
                                          unsigned flags, int32_t **ids, size_t *n, memra_error *err);

/* The bytes token `id` stands for, into buf (cap bytes); *len is the number of bytes it needs,
 * and MEMRA_E_RANGE is returned when cap is smaller. Control and unknown tokens give their text
 * only when `specials`, else nothing. MEMRA_E_RANGE for an id out of range. */
memra_status memra_tokenizer_decode(const memra_tokenizer *t, int32_t id, bool specials, char *buf, size_t cap,
                                    size_t *len, memra_error *err);

/* A streaming decoder: bytes of an incomplete UTF-8 sequence at the end of what was pushed are held
 * back until the token that completes them arrives (or flush). Bytes that can start no valid
 * sequence are passed through as they are. */
typedef struct memra_detok_stream memra_detok_stream;
memra_status memra_detok_stream_new(const memra_tokenizer *t, bool specials, memra_detok_stream **out,
                                    memra_error *err);
void memra_detok_stream_free(memra_detok_stream *s);
/* Decodes one token; *out points at the bytes ready now (*len of them, possibly 0), valid until the
 * next call on the stream. */
memra_status memra_detok_stream_push(memra_detok_stream *s, int32_t id, const char **out, size_t *len,
                                     memra_error *err);
/* Whatever is held back, complete or not. */
void memra_detok_stream_flush(memra_detok_stream *s, const char **out, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
