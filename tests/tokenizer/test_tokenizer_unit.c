/* test_tokenizer_unit.c: tokenizers on small synthetic vocabularies written with the core's GGUF
 * writer: BPE merge order, the pre-tokenizers' splits, specials, add_bos, SentencePiece merges by
 * score and byte fallback, decoding, the streaming decoder's UTF-8 hold-back, and the refusal of
 * unknown kinds and malformed vocabularies. Each behaviour has its negative control. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/gguf.h"
#include "memra/tokenizer.h"
#include "test_status.h"

#define MAX_TOK 64

/* A vocabulary to write: kind, pre (NULL: none), tokens, types (0: all normal), scores, merges. */
typedef struct vocab {
    const char *model;
    const char *pre;
    const char *tokens[MAX_TOK];
    int32_t types[MAX_TOK];
    float scores[MAX_TOK];
    bool with_types, with_scores;
    const char *merges[MAX_TOK];
    int n_tokens, n_merges;
    int bos, eos, eot, unk; /* -1: absent */
    int add_bos;            /* -1: absent */
    int add_space_prefix;   /* -1: absent */
} vocab;

static void vocab_init(vocab *v, const char *model, const char *pre) {
    memset(v, 0, sizeof *v);
    v->model = model;
    v->pre = pre;
    v->bos = v->eos = v->eot = v->unk = -1;
    v->add_bos = v->add_space_prefix = -1;
}

static int add_tok(vocab *v, const char *text, int32_t type, float score) {
    cr_assert(v->n_tokens < MAX_TOK);
    v->tokens[v->n_tokens] = text;
    v->types[v->n_tokens] = type;
    v->scores[v->n_tokens] = score;
    if (type != MEMRA_TOKEN_NORMAL)
        v->with_types = true;
    return v->n_tokens++;
}
static void add_merge(vocab *v, const char *m) { v->merges[v->n_merges++] = m; }

static void *g_buf; /* the bytes of the last file opened (freed by close_file) */

static memra_gguf *write_vocab(const vocab *v) {
    memra_gguf_writer *w;
    OK(memra_gguf_writer_new(3, 0, &w, err));
    OK(memra_gguf_writer_set_str(w, "general.architecture", "llama", err));
    OK(memra_gguf_writer_set_str(w, "tokenizer.ggml.model", v->model, err));
    if (v->pre)
        OK(memra_gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre, err));
    OK(memra_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", v->tokens, (uint64_t)v->n_tokens, err));
    if (v->with_types)
        OK(memra_gguf_writer_set_array(w, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32, (uint64_t)v->n_tokens,
                                       v->types, err));
    if (v->with_scores)
        OK(memra_gguf_writer_set_array(w, "tokenizer.ggml.scores", MEMRA_GGUF_FLOAT32, (uint64_t)v->n_tokens, v->scores,
                                       err));
    if (strcmp(v->model, "gpt2") == 0)
        OK(memra_gguf_writer_set_str_array(w, "tokenizer.ggml.merges", v->merges, (uint64_t)v->n_merges, err));
    if (v->bos >= 0)
        OK(memra_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos, err));
    if (v->eos >= 0)
        OK(memra_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos, err));
    if (v->eot >= 0)
        OK(memra_gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)v->eot, err));
    if (v->unk >= 0)
        OK(memra_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)v->unk, err));
    if (v->add_bos >= 0)
        OK(memra_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos != 0, err));
    if (v->add_space_prefix >= 0)
        OK(memra_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", v->add_space_prefix != 0, err));
    size_t size;
    free(g_buf);
    g_buf = NULL;
    OK(memra_gguf_writer_write_memory(w, &g_buf, &size, err));
    memra_gguf_writer_free(w);
    memra_gguf *g;
    OK(memra_gguf_open_memory(g_buf, size, "vocab.gguf", &g, err));
    return g;
}

static memra_tokenizer *build(const vocab *v) {
    memra_gguf *g = write_vocab(v);
    memra_tokenizer *t = NULL;
    memra_error err = {0};
    memra_status st = memra_tokenizer_new(g, &t, &err);
    memra_gguf_close(g);
    cr_assert_eq(st, MEMRA_OK, "tokenizer_new: %s", err.msg);
    return t;
}

/* The status and message of building v, which must fail. */
static memra_status refuse(const vocab *v, memra_error *err) {
    memra_gguf *g = write_vocab(v);
    memra_tokenizer *t = (memra_tokenizer *)1;
    memra_status st = memra_tokenizer_new(g, &t, err);
    memra_gguf_close(g);
    cr_assert_neq(st, MEMRA_OK, "a malformed vocabulary was accepted");
    cr_assert_null(t, "*out is NULL on failure");
    return st;
}

/* Encodes text and compares with the expected ids (n of them). */
static void expect_ids(memra_tokenizer *t, const char *text, unsigned flags, const int32_t *want, size_t n_want) {
    int32_t *ids = NULL;
    size_t n = 0;
    OK(memra_tokenizer_encode(t, text, strlen(text), flags, &ids, &n, err));
    char got[512] = "", exp[512] = "";
    for (size_t i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), " %d", (int)ids[i]);
    for (size_t i = 0; i < n_want; i++)
        snprintf(exp + strlen(exp), sizeof exp - strlen(exp), " %d", (int)want[i]);
    cr_expect_str_eq(got, exp, "'%s': ids [%s ] expected [%s ]", text, got, exp);
    free(ids);
}
#define EXPECT(t, text, flags, ...)                                                                                    \
    do {                                                                                                               \
        const int32_t w_[] = {__VA_ARGS__};                                                                            \
        expect_ids(t, text, flags, w_, sizeof w_ / sizeof w_[0]);                                                      \
    } while (0)

static void teardown(void) {
    free(g_buf);
    g_buf = NULL;
}
TestSuite(tokenizer_unit, .fini = teardown);

/* ---- gpt2 byte-level BPE --------------------------------------------------------------------- */

/* a b c ab bc abc and the byte-level space "Ġ" (U+0120) */
static void abc_vocab(vocab *v, const char *pre) {
    vocab_init(v, "gpt2", pre);
    add_tok(v, "a", 1, 0);        /* 0 */
    add_tok(v, "b", 1, 0);        /* 1 */
    add_tok(v, "c", 1, 0);        /* 2 */
    add_tok(v, "ab", 1, 0);       /* 3 */
    add_tok(v, "bc", 1, 0);       /* 4 */
    add_tok(v, "\xc4\xa0", 1, 0); /* 5: Ġ */
    add_tok(v,
            "\xc4\xa0"
            "b",
            1, 0); /* 6: Ġb */
}

Test(tokenizer_unit, bpe_merges_by_rank) {
    vocab v;
    abc_vocab(&v, NULL);
    add_merge(&v, "b c");
    add_merge(&v, "a b");
    memra_tokenizer *t = build(&v);
    cr_assert_str_eq(memra_tokenizer_kind(t), "gpt2");
    cr_assert_str_eq(memra_tokenizer_pre(t), "gpt-2");
    EXPECT(t, "abc", 0, 0, 4); /* "b c" ranks first: a bc */
    memra_tokenizer_free(t);
    /* negative control: the same merges in the other order give ab c */
    abc_vocab(&v, NULL);
    add_merge(&v, "a b");
    add_merge(&v, "b c");
    t = build(&v);
    EXPECT(t, "abc", 0, 3, 2);
    /* no merge for Ġ b: a space is its own byte token */
    EXPECT(t, "a b", 0, 0, 5, 1);
    memra_tokenizer_free(t);
    abc_vocab(&v, NULL);
    add_merge(&v, "\xc4\xa0 b");
    t = build(&v);
    EXPECT(t, "a b", 0, 0, 6);
    /* decoding maps the byte alphabet back: Ġb is " b" */
    char buf[8];
    size_t len;
    OK(memra_tokenizer_decode(t, 6, false, buf, sizeof buf, &len, err));
    cr_assert(len == 2 && memcmp(buf, " b", 2) == 0);
    /* a buffer too small says how much it needs */
    memra_error e = {0};
    cr_assert_eq(memra_tokenizer_decode(t, 6, false, buf, 1, &len, &e), MEMRA_E_RANGE);
    cr_assert_eq(len, 2);
    cr_assert_eq(memra_tokenizer_decode(t, 99, false, buf, sizeof buf, &len, &e), MEMRA_E_RANGE);
    cr_assert_eq(memra_tokenizer_decode(t, -1, false, buf, sizeof buf, &len, &e), MEMRA_E_RANGE);
    memra_tokenizer_free(t);
}

/* digits 1 2 3 4, their merges 34 12 123, the quote, S, 'S */
static void digits_vocab(vocab *v, const char *pre) {
    vocab_init(v, "gpt2", pre);
    add_tok(v, "1", 1, 0);   /* 0 */
    add_tok(v, "2", 1, 0);   /* 1 */
    add_tok(v, "3", 1, 0);   /* 2 */
    add_tok(v, "4", 1, 0);   /* 3 */
    add_tok(v, "34", 1, 0);  /* 4 */
    add_tok(v, "12", 1, 0);  /* 5 */
    add_tok(v, "123", 1, 0); /* 6 */
    add_tok(v, "'", 1, 0);   /* 7 */
    add_tok(v, "S", 1, 0);   /* 8 */
    add_tok(v, "'S", 1, 0);  /* 9 */
    add_merge(v, "3 4");
    add_merge(v, "1 2");
    add_merge(v, "12 3");
    add_merge(v, "' S");
}

Test(tokenizer_unit, pretokenizers_split_digits_and_contractions) {
    vocab v;
    digits_vocab(&v, "gpt-2"); /* \p{N}+: one piece */
    memra_tokenizer *t = build(&v);
    EXPECT(t, "1234", 0, 5, 4);
    EXPECT(t, "'S", 0, 7, 8); /* contractions are lower case only: ' then S */
    memra_tokenizer_free(t);
    digits_vocab(&v, "smollm"); /* every digit its own piece */
    t = build(&v);
    cr_assert_str_eq(memra_tokenizer_pre(t), "smollm");
    EXPECT(t, "1234", 0, 0, 1, 2, 3);
    memra_tokenizer_free(t);
    digits_vocab(&v, "llama-bpe"); /* digits in runs of 1-3; case-insensitive contractions */
    t = build(&v);
    EXPECT(t, "1234", 0, 6, 3);
    EXPECT(t, "'S", 0, 9);
    memra_tokenizer_free(t);
    digits_vocab(&v, "llama3");
    t = build(&v);
    EXPECT(t, "1234", 0, 6, 3);
    memra_tokenizer_free(t);
    digits_vocab(&v, "qwen2"); /* single digits; case-insensitive contractions */
    t = build(&v);
    EXPECT(t, "1234", 0, 0, 1, 2, 3);
    EXPECT(t, "'S", 0, 9);
    memra_tokenizer_free(t);
}

Test(tokenizer_unit, llama3_ignores_merges_for_whole_tokens) {
    vocab v;
    vocab_init(&v, "gpt2", "llama-bpe");
    add_tok(&v, "x", 1, 0);   /* 0 */
    add_tok(&v, "y", 1, 0);   /* 1 */
    add_tok(&v, "xy", 1, 0);  /* 2: no merge reaches it */
    add_tok(&v, "xyx", 1, 0); /* 3 */
    add_merge(&v, "xy x");
    memra_tokenizer *t = build(&v);
    EXPECT(t, "xy", 0, 2); /* a whole-word token is taken as it is */
    memra_tokenizer_free(t);
    vocab_init(&v, "gpt2", "qwen2"); /* negative control: qwen2 merges, and nothing merges x y */
    add_tok(&v, "x", 1, 0);
    add_tok(&v, "y", 1, 0);
    add_tok(&v, "xy", 1, 0);
    add_tok(&v, "xyx", 1, 0);
    add_merge(&v, "xy x");
    t = build(&v);
    EXPECT(t, "xy", 0, 0, 1);
    memra_tokenizer_free(t);
}

Test(tokenizer_unit, bpe_invalid_utf8_is_bytes) {
    vocab v;
    vocab_init(&v, "gpt2", NULL);
    add_tok(&v, "\xc3\xbf", 1, 0); /* ÿ: the byte 0xff in the GPT-2 alphabet */
    add_tok(&v, "a", 1, 0);
    memra_tokenizer *t = build(&v);
    EXPECT(t,
           "\xff"
           "a",
           0, 0, 1);
    char b[4];
    size_t len;
    OK(memra_tokenizer_decode(t, 0, false, b, sizeof b, &len, err));
    cr_assert(len == 1 && (unsigned char)b[0] == 0xff);
    memra_tokenizer_free(t);
}

Test(tokenizer_unit, specials_and_bos) {
    vocab v;
    abc_vocab(&v, NULL);
    int ctl = add_tok(&v, "<|c|>", MEMRA_TOKEN_CONTROL, 0);
    int usr = add_tok(&v, "<u>", MEMRA_TOKEN_USER_DEFINED, 0);
    add_tok(&v, "<", 1, 0);
    add_tok(&v, ">", 1, 0);
    add_tok(&v, "|", 1, 0);
    add_tok(&v, "u", 1, 0);
    v.bos = ctl;
    v.eos = ctl;
    v.add_bos = 1;
    memra_tokenizer *t = build(&v);
    EXPECT(t, "a<|c|>b", MEMRA_TOKENIZE_SPECIALS, 0, ctl, 1);
    /* negative control: without the flag the control token's text is plain text */
    EXPECT(t, "a<|c|>b", 0, 0, 9, 11, 2, 11, 10, 1);
    /* user-defined tokens are always matched */
    EXPECT(t, "a<u>b", 0, 0, usr, 1);
    EXPECT(t, "a", MEMRA_TOKENIZE_ADD_BOS, ctl, 0);
    EXPECT(t, "a", 0, 0);
    EXPECT(t, "", MEMRA_TOKENIZE_ADD_BOS, ctl);
    int32_t *none = (int32_t *)1;
    size_t n_none = 1;
    memra_error e = {0};
    cr_assert_eq(memra_tokenizer_encode(t, "a", 1, 0x80u, &none, &n_none, &e), MEMRA_E_INVALID);
    cr_assert(none == NULL && n_none == 0);
    OK(memra_tokenizer_encode(t, "", 0, 0, &none, &n_none, err));
    cr_assert(none == NULL && n_none == 0, "no ids: NULL and 0");
    cr_assert(memra_tokenizer_is_eog(t, ctl));
    cr_assert(!memra_tokenizer_is_eog(t, 0));
    /* control tokens decode to their text only when asked */
    char b[16];
    size_t len;
    OK(memra_tokenizer_decode(t, ctl, false, b, sizeof b, &len, err));
    cr_assert_eq(len, 0);
    OK(memra_tokenizer_decode(t, ctl, true, b, sizeof b, &len, err));
    cr_assert(len == 5 && memcmp(b, "<|c|>", 5) == 0);
    memra_tokenizer_free(t);
    /* add_bos_token false: no bos even when asked */
    v.add_bos = 0;
    t = build(&v);
    EXPECT(t, "a", MEMRA_TOKENIZE_ADD_BOS, 0);
    memra_tokenizer_free(t);
}

/* ---- llama SentencePiece-style ---------------------------------------------------------------- */

static void spm_vocab(vocab *v, float score_ab, float score_bc, bool bytes) {
    vocab_init(v, "llama", "default");
    v->with_scores = true;
    v->unk = add_tok(v, "<unk>", MEMRA_TOKEN_UNKNOWN, 0); /* 0 */
    v->bos = add_tok(v, "<s>", MEMRA_TOKEN_CONTROL, 0);   /* 1 */
    v->eos = add_tok(v, "</s>", MEMRA_TOKEN_CONTROL, 0);  /* 2 */
    add_tok(v, "a", 1, -1);                               /* 3 */
    add_tok(v, "b", 1, -1);                               /* 4 */
    add_tok(v, "c", 1, -1);                               /* 5 */
    add_tok(v, "ab", 1, score_ab);                        /* 6 */
    add_tok(v, "bc", 1, score_bc);                        /* 7 */
    add_tok(v, "\xe2\x96\x81", 1, -2);                    /* 8: ▁ */
    add_tok(v,
            "\xe2\x96\x81"
            "a",
            1, -0.5f);                                   /* 9: ▁a */
    add_tok(v, "<end_of_turn>", MEMRA_TOKEN_CONTROL, 0); /* 10 */
    if (bytes) {
        add_tok(v, "<0xC3>", MEMRA_TOKEN_BYTE, 0); /* 11 */
        add_tok(v, "<0xA9>", MEMRA_TOKEN_BYTE, 0); /* 12 */
        add_tok(v, "<0xE2>", MEMRA_TOKEN_BYTE, 0); /* 13 */
        add_tok(v, "<0x82>", MEMRA_TOKEN_BYTE, 0); /* 14 */
        add_tok(v, "<0xAC>", MEMRA_TOKEN_BYTE, 0); /* 15 */
        add_tok(v, "<0xFF>", MEMRA_TOKEN_BYTE, 0); /* 16 */
    }
}

Test(tokenizer_unit, spm_merges_by_score) {
    vocab v;
    spm_vocab(&v, 1.0f, 2.0f, true);
    v.add_space_prefix = 0;
    memra_tokenizer *t = build(&v);
    cr_assert_str_eq(memra_tokenizer_kind(t), "llama");
    EXPECT(t, "abc", 0, 3, 7); /* bc scores higher: a bc */
    memra_tokenizer_free(t);
    spm_vocab(&v, 2.0f, 1.0f, true); /* negative control: the scores swapped give ab c */
    v.add_space_prefix = 0;
    t = build(&v);
    EXPECT(t, "abc", 0, 6, 5);
    EXPECT(t, "b a", 0, 4, 9); /* spaces are ▁ */
    memra_tokenizer_free(t);
}

Test(tokenizer_unit, spm_space_prefix_and_bos) {
    vocab v;
    spm_vocab(&v, 1.0f, 2.0f, true); /* add_space_prefix and add_bos absent: the llama defaults, both on */
    memra_tokenizer *t = build(&v);
    cr_assert(memra_tokenizer_add_bos(t));
    EXPECT(t, "a", MEMRA_TOKENIZE_ADD_BOS, 1, 9);
    EXPECT(t, "a", 0, 9);
    memra_tokenizer_free(t);
    spm_vocab(&v, 1.0f, 2.0f, true);
    v.add_space_prefix = 0;
    v.add_bos = 0;
    t = build(&v);
    EXPECT(t, "a", MEMRA_TOKENIZE_ADD_BOS, 3);
    memra_tokenizer_free(t);
}

Test(tokenizer_unit, spm_byte_fallback_and_unknown) {
    vocab v;
    spm_vocab(&v, 1.0f, 2.0f, true);
    v.add_space_prefix = 0;
    memra_tokenizer *t = build(&v);
    EXPECT(t, "a\xc3\xa9", 0, 3, 11, 12); /* é is not a token: its bytes */
    EXPECT(t, "\xff", 0, 16);             /* a byte of no valid sequence: its byte token */
    EXPECT(t, "z", 0, 0);                 /* no <0x7A>: the unknown token */
    char b[8];
    size_t len;
    OK(memra_tokenizer_decode(t, 11, false, b, sizeof b, &len, err));
    cr_assert(len == 1 && (unsigned char)b[0] == 0xc3);
    OK(memra_tokenizer_decode(t, 9, false, b, sizeof b, &len, err));
    cr_assert(len == 2 && memcmp(b, " a", 2) == 0);
    cr_assert(memra_tokenizer_is_eog(t, 10), "<end_of_turn> ends generation");
    cr_assert(memra_tokenizer_is_eog(t, 2));
    cr_assert(!memra_tokenizer_is_eog(t, 1));
    memra_tokenizer_free(t);
    /* negative control: without byte tokens é is unknown */
    spm_vocab(&v, 1.0f, 2.0f, false);
    v.add_space_prefix = 0;
    t = build(&v);
    EXPECT(t, "a\xc3\xa9", 0, 3, 0, 0);
    memra_tokenizer_free(t);
}

Test(tokenizer_unit, stream_holds_back_incomplete_utf8) {
    vocab v;
    spm_vocab(&v, 1.0f, 2.0f, true);
    memra_tokenizer *t = build(&v);
    memra_detok_stream *s;
    OK(memra_detok_stream_new(t, false, &s, err));
    const char *out;
    size_t len;
    OK(memra_detok_stream_push(s, 3, &out, &len, err)); /* a: out at once (the negative control) */
    cr_assert(len == 1 && out[0] == 'a');
    OK(memra_detok_stream_push(s, 13, &out, &len, err)); /* E2: held */
    cr_assert_eq(len, 0);
    OK(memra_detok_stream_push(s, 14, &out, &len, err)); /* 82: still held */
    cr_assert_eq(len, 0);
    OK(memra_detok_stream_push(s, 15, &out, &len, err)); /* AC: € complete */
    cr_assert(len == 3 && memcmp(out, "\xe2\x82\xac", 3) == 0);
    OK(memra_detok_stream_push(s, 16, &out, &len, err)); /* FF can start nothing: passed through */
    cr_assert(len == 1 && (unsigned char)out[0] == 0xff);
    OK(memra_detok_stream_push(s, 11, &out, &len, err)); /* C3 held... */
    cr_assert_eq(len, 0);
    OK(memra_detok_stream_push(s, 3, &out, &len, err)); /* ...and released with 'a' that can not continue it */
    cr_assert(len == 2 && (unsigned char)out[0] == 0xc3 && out[1] == 'a');
    OK(memra_detok_stream_push(s, 13, &out, &len, err));
    cr_assert_eq(len, 0);
    memra_detok_stream_flush(s, &out, &len); /* the end: what is held comes out */
    cr_assert(len == 1 && (unsigned char)out[0] == 0xe2);
    memra_detok_stream_flush(s, &out, &len);
    cr_assert_eq(len, 0);
    memra_error e = {0};
    cr_assert_eq(memra_detok_stream_push(s, 1000, &out, &len, &e), MEMRA_E_RANGE);
    memra_detok_stream_free(s);
    memra_tokenizer_free(t);
}

/* ---- refusals -------------------------------------------------------------------------------- */

Test(tokenizer_unit, refuses_unknown_kinds) {
    vocab v;
    abc_vocab(&v, NULL);
    v.model = "bert";
    memra_error e = {0};
    cr_assert_eq(refuse(&v, &e), MEMRA_E_UNSUPPORTED);
    cr_assert(strstr(e.msg, "'bert'") && strstr(e.msg, "vocab.gguf"), "%s", e.msg);
    abc_vocab(&v, "deepseek-llm");
    cr_assert_eq(refuse(&v, &e), MEMRA_E_UNSUPPORTED);
    cr_assert(strstr(e.msg, "'deepseek-llm'") && strstr(e.msg, "vocab.gguf"), "%s", e.msg);
    /* no tokenizer at all */
    memra_gguf_writer *w;
    OK(memra_gguf_writer_new(3, 0, &w, err));
    OK(memra_gguf_writer_set_str(w, "general.architecture", "llama", err));
    size_t size;
    void *data;
    OK(memra_gguf_writer_write_memory(w, &data, &size, err));
    memra_gguf_writer_free(w);
    memra_gguf *g;
    OK(memra_gguf_open_memory(data, size, "bare.gguf", &g, err));
    memra_tokenizer *t;
    cr_assert_eq(memra_tokenizer_new(g, &t, &e), MEMRA_E_FORMAT);
    cr_assert(strstr(e.msg, "bare.gguf") && strstr(e.msg, "tokenizer.ggml.model"), "%s", e.msg);
    memra_gguf_close(g);
    free(data);
}

Test(tokenizer_unit, refuses_malformed_vocabularies) {
    vocab v;
    memra_error e = {0};
    abc_vocab(&v, NULL);
    v.bos = 7; /* one past the end */
    cr_assert_eq(refuse(&v, &e), MEMRA_E_FORMAT);
    cr_assert(strstr(e.msg, "bos_token_id is 7"), "%s", e.msg);
    abc_vocab(&v, NULL);
    v.eos = 6; /* the last id: accepted (the control) */
    memra_tokenizer_free(build(&v));
    abc_vocab(&v, NULL);
    add_merge(&v, "a z");
    cr_assert_eq(refuse(&v, &e), MEMRA_E_FORMAT);
    cr_assert(strstr(e.msg, "merge 0") && strstr(e.msg, "right side"), "%s", e.msg);
    abc_vocab(&v, NULL);
    add_merge(&v, "b a"); /* "ba" is not a token */
    cr_assert_eq(refuse(&v, &e), MEMRA_E_FORMAT);
    cr_assert(strstr(e.msg, "merged token"), "%s", e.msg);
    abc_vocab(&v, NULL);
    add_merge(&v, "ab");
    cr_assert_eq(refuse(&v, &e), MEMRA_E_FORMAT);
    cr_assert(strstr(e.msg, "not two tokens"), "%s", e.msg);
    abc_vocab(&v, NULL);
    v.with_types = true;
    v.types[2] = 9;
    cr_assert_eq(refuse(&v, &e), MEMRA_E_FORMAT);
    cr_assert(strstr(e.msg, "token 2 has type 9"), "%s", e.msg);
    /* huge counts: a tokens array whose count says 2^40 is refused by the reader before anything
     * is allocated */
    abc_vocab(&v, NULL);
    add_merge(&v, "a b");
    memra_gguf *g = write_vocab(&v);
    memra_gguf_close(g);
    unsigned char *p = g_buf;
    const char key[] = "tokenizer.ggml.tokens";
    size_t size = 0;
    for (size_t i = 0; i + sizeof key < 4096; i++)
        if (memcmp(p + i, key, sizeof key - 1) == 0) {
            size = i + sizeof key - 1; /* then u32 type (9), u32 elem type (8), u64 count */
            break;
        }
    cr_assert_neq(size, 0);
    uint64_t huge = 1ull << 40;
    memcpy(p + size + 8, &huge, 8);
    memra_gguf *bad = NULL;
    cr_assert_neq(memra_gguf_open_memory(g_buf, 4096, "huge.gguf", &bad, &e), MEMRA_OK);
    cr_assert_null(bad);
}

Test(tokenizer_unit, refuses_bad_scores_and_types_counts) {
    vocab v;
    memra_error e = {0};
    spm_vocab(&v, 1, 2, true);
    memra_gguf_writer *w;
    /* token_type shorter than tokens */
    OK(memra_gguf_writer_new(3, 0, &w, err));
    OK(memra_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", err));
    OK(memra_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", v.tokens, (uint64_t)v.n_tokens, err));
    OK(memra_gguf_writer_set_array(w, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32, 3, v.types, err));
    void *data;
    size_t size;
    OK(memra_gguf_writer_write_memory(w, &data, &size, err));
    memra_gguf_writer_free(w);
    memra_gguf *g;
    OK(memra_gguf_open_memory(data, size, "short.gguf", &g, err));
    memra_tokenizer *t;
    cr_assert_eq(memra_tokenizer_new(g, &t, &e), MEMRA_E_FORMAT);
    cr_assert(strstr(e.msg, "token_type has 3 entries"), "%s", e.msg);
    memra_gguf_close(g);
    free(data);
    /* scores shorter than tokens */
    OK(memra_gguf_writer_new(3, 0, &w, err));
    OK(memra_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", err));
    OK(memra_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", v.tokens, (uint64_t)v.n_tokens, err));
    OK(memra_gguf_writer_set_array(w, "tokenizer.ggml.scores", MEMRA_GGUF_FLOAT32, 2, v.scores, err));
    OK(memra_gguf_writer_write_memory(w, &data, &size, err));
    memra_gguf_writer_free(w);
    OK(memra_gguf_open_memory(data, size, "short.gguf", &g, err));
    cr_assert_eq(memra_tokenizer_new(g, &t, &e), MEMRA_E_FORMAT);
    cr_assert(strstr(e.msg, "scores has 2 entries"), "%s", e.msg);
    memra_gguf_close(g);
    free(data);
    /* a tokens array of numbers */
    OK(memra_gguf_writer_new(3, 0, &w, err));
    OK(memra_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", err));
    OK(memra_gguf_writer_set_array(w, "tokenizer.ggml.tokens", MEMRA_GGUF_INT32, 3, v.types, err));
    OK(memra_gguf_writer_write_memory(w, &data, &size, err));
    memra_gguf_writer_free(w);
    OK(memra_gguf_open_memory(data, size, "nums.gguf", &g, err));
    cr_assert_eq(memra_tokenizer_new(g, &t, &e), MEMRA_E_FORMAT);
    cr_assert_null(t);
    memra_gguf_close(g);
    free(data);
}

/* ---- pre-tokenizers against a regex engine (fixtures/pretok.h, gen_pretok_fixtures.py) --------- */

typedef struct pretok_fixture {
    const char *pre;
    const char *text;
    size_t len;
    const size_t *ends;
    size_t n;
} pretok_fixture;

#include "fixtures/pretok.h"
#include "tokenizer_internal.h"

Test(tokenizer_unit, pretokenizers_match_a_regex_engine) {
    size_t bad = 0, total = sizeof pretok_fixtures / sizeof pretok_fixtures[0];
    for (size_t k = 0; k < total; k++) {
        const pretok_fixture *f = &pretok_fixtures[k];
        size_t ends[256], n = 0;
        OK(memra_tok_pretokenize(f->pre, f->text, f->len, ends, 256, &n, err));
        if (n != f->n || (n && memcmp(ends, f->ends, n * sizeof(size_t)) != 0)) {
            bad++;
            fprintf(stderr, "pretok %zu (%s): got", k, f->pre);
            for (size_t i = 0; i < n; i++)
                fprintf(stderr, " %zu", ends[i]);
            fprintf(stderr, "; expected");
            for (size_t i = 0; i < f->n; i++)
                fprintf(stderr, " %zu", f->ends[i]);
            fprintf(stderr, "\n");
        }
    }
    cr_expect_eq(bad, 0, "%zu of %zu splits differ from the regex engine's", bad, total);
    /* negative control: the same text under two pre-tokenizers splits differently */
    size_t a[16], b[16], na, nb;
    OK(memra_tok_pretokenize("llama3", "1234567", 7, a, 16, &na, err));
    OK(memra_tok_pretokenize("qwen2", "1234567", 7, b, 16, &nb, err));
    cr_assert(na == 3 && nb == 7);
    memra_error e = {0};
    cr_assert_eq(memra_tok_pretokenize("bloom", "x", 1, a, 16, &na, &e), MEMRA_E_INVALID);
    cr_assert_eq(memra_tok_pretokenize("gpt-2", "a b c", 5, a, 1, &na, &e), MEMRA_E_RANGE);
}

/* Issue 23 item 9: the end-of-generation set holds eos, eot and every token whose text ends a turn
 * or a text (SmolLM2's "<|endoftext|>" beside its eos "<|im_end|>"), as llama.cpp's. Issue 23 item
 * 1: such a token typed user-defined (or normal) is made control, so plain text never yields it. */
Test(tokenizer_unit, eog_set_includes_marked_end_tokens) {
    vocab v;
    abc_vocab(&v, NULL);
    int eot = add_tok(&v, "<|endoftext|>", MEMRA_TOKEN_CONTROL, 0); /* 7 */
    int ime = add_tok(&v, "<|im_end|>", MEMRA_TOKEN_CONTROL, 0);    /* 8 */
    int eot2 = add_tok(&v, "<end_of_turn>", MEMRA_TOKEN_USER_DEFINED, 0);
    int other = add_tok(&v, "<|im_start|>", MEMRA_TOKEN_CONTROL, 0);
    add_tok(&v, "<", 1, 0);
    add_tok(&v, ">", 1, 0);
    v.eos = ime;
    memra_tokenizer *t = build(&v);
    cr_assert(memra_tokenizer_is_eog(t, ime), "eos is an end of generation");
    cr_assert(memra_tokenizer_is_eog(t, eot), "<|endoftext|> ends generation though the file names another eos");
    cr_assert(memra_tokenizer_is_eog(t, eot2), "<end_of_turn> ends generation");
    cr_assert(!memra_tokenizer_is_eog(t, other), "negative control: <|im_start|> does not end generation");
    cr_assert(!memra_tokenizer_is_eog(t, 0), "negative control: a word does not end generation");
    const int32_t *ids = NULL;
    cr_assert_eq(memra_tokenizer_eog(t, &ids), 3u);
    cr_assert(ids[0] == eot && ids[1] == ime && ids[2] == eot2, "ascending");
    /* the user-defined end-of-turn token is control now: plain text keeps it as text */
    cr_assert_eq(memra_tokenizer_type(t, eot2), MEMRA_TOKEN_CONTROL);
    int32_t *out = NULL;
    size_t n = 0;
    OK(memra_tokenizer_encode(t, "<end_of_turn>", 13, 0, &out, &n, err));
    for (size_t i = 0; i < n; i++)
        cr_assert_neq(out[i], eot2, "<end_of_turn> typed as text became the token");
    free(out);
    EXPECT(t, "<end_of_turn>", MEMRA_TOKENIZE_SPECIALS, eot2); /* asked for: matched */
    memra_tokenizer_free(t);
}

/* Issue 23 item 1: parts encoded with their own rule: markers in a template part are tokens, the
 * same text in a part without specials is text; plain text across parts tokenizes as one piece. */
Test(tokenizer_unit, encode_parts_keeps_user_markers_text) {
    vocab v;
    abc_vocab(&v, NULL);
    add_merge(&v, "a b");
    int ctl = add_tok(&v, "<|c|>", MEMRA_TOKEN_CONTROL, 0); /* 7 */
    add_tok(&v, "<", 1, 0);                                 /* 8 */
    add_tok(&v, ">", 1, 0);                                 /* 9 */
    add_tok(&v, "|", 1, 0);                                 /* 10 */
    memra_tokenizer *t = build(&v);
    memra_text_part parts[] = {{"<|c|>a", 6, true}, {"b<|c|>", 6, false}, {"<|c|>", 5, true}};
    int32_t *ids = NULL;
    size_t n = 0;
    OK(memra_tokenizer_encode_parts(t, parts, 3, 0, &ids, &n, err));
    /* "a" + "b" meet across parts and merge into "ab" (3); the user's <|c|> is < | c | > */
    const int32_t want[] = {ctl, 3, 8, 10, 2, 10, 9, ctl};
    cr_assert_eq(n, sizeof want / sizeof want[0], "%zu ids", n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ids[i], want[i], "id %zu: %d, expected %d", i, (int)ids[i], (int)want[i]);
    free(ids);
    /* negative control: the same middle part with specials gives the control token */
    parts[1].specials = true;
    OK(memra_tokenizer_encode_parts(t, parts, 3, 0, &ids, &n, err));
    cr_assert(n == 4 && ids[2] == ctl, "specials asked for in the part: matched");
    free(ids);
    memra_tokenizer_free(t);
}
