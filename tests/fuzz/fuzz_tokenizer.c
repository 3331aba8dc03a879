/* fuzz_tokenizer.c: libFuzzer target for the tokenizer and the chat formats (text/), built from a
 * vocabulary the input describes.
 *
 * The input is not a GGUF file (fuzz_gguf covers the reader): it says what a file's tokenizer
 * metadata holds, and the harness writes that file in memory through the writer, so that most
 * inputs reach the tokenizer's own checks and code instead of stopping in the reader:
 *   byte 0  bit 0 kind ("gpt2" / "llama", or with bit 1 of byte 1 a name no tokenizer has),
 *           bit 1 token types given, bit 2 scores given, bit 3 add_bos_token given (bit 4 its
 *           value), bit 5 add_space_prefix given (bit 6 its value), bit 7 a chat template given
 *   byte 1  bits 2..4 the pre-tokenizer name (absent, or one of seven names, one unknown), bits
 *           5..7 which special ids are given
 *   bytes 2..6  the special ids (bos, eos, eot, unk, pad), each byte less 8 (so -8 .. 247)
 *   byte 7  the length L of the text; then L bytes of text (also the chat template, when given)
 *   then    the vocabulary's tokens, separated by 0xFF; a 0xFE byte ends the tokens, and the merges
 *           follow, separated by 0xFF. A token's type is its first byte modulo 8 (7 is no type).
 * A tokenizer that builds is then used every way the library offers: the text encoded with every
 * flag, also in two parts; every id the encoder gave decoded, one by one and through the stream;
 * every id in range (and a few out of it) looked up; the chat formats detected and encoded. A
 * refusal must carry a message. Ids must lie in the vocabulary; decode's length must fit what it
 * asked for. ASan and UBSan watch everything else; any broken invariant traps. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/chat.h"
#include "memra/gguf.h"
#include "memra/tokenizer.h"

#include "fuzz_check.h"

#define FT_MAX_TOKENS 600u
#define FT_MAX_MERGES 300u

static volatile uint64_t sink;

/* A refusal's message is never empty. */
static void refused(memra_status st, const memra_error *err) {
    if (st)
        CHECK(err->msg[0] != '\0');
}

/* Splits [p, end) at 0xFF into at most max NUL-terminated strings (copied into *store). */
static uint32_t split(const uint8_t *p, const uint8_t *end, uint32_t max, char **strs, char *store) {
    uint32_t n = 0;
    char *o = store;
    while (p <= end && n < max) {
        const uint8_t *q = p;
        while (q < end && *q != 0xFF)
            q++;
        const size_t len = (size_t)(q - p);
        memcpy(o, p, len);
        o[len] = '\0';
        for (size_t i = 0; i < len; i++)
            if (o[i] == '\0')
                o[i] = ' '; /* a GGUF string may hold NUL; the writer's C strings may not */
        strs[n++] = o;
        o += len + 1;
        if (q >= end)
            break;
        p = q + 1;
    }
    return n;
}

static void use_ids(const memra_tokenizer *t, const int32_t *ids, size_t n) {
    const uint32_t nt = memra_tokenizer_n_tokens(t);
    char small[8], *big = NULL;
    memra_error err;
    memra_detok_stream *ds[2] = {NULL, NULL};
    for (int sp = 0; sp < 2; sp++) {
        memra_status st = memra_detok_stream_new(t, sp != 0, &ds[sp], &err);
        refused(st, &err);
    }
    for (size_t i = 0; i < n; i++) {
        CHECK(ids[i] >= 0 && (uint32_t)ids[i] < nt);
        for (int sp = 0; sp < 2; sp++) {
            size_t len = 0;
            memra_status st = memra_tokenizer_decode(t, ids[i], sp != 0, small, sizeof small, &len, &err);
            if (st == MEMRA_E_RANGE) {
                CHECK(len > sizeof small);
                big = (char *)realloc(big, len);
                CHECK(big != NULL);
                size_t len2 = 0;
                st = memra_tokenizer_decode(t, ids[i], sp != 0, big, len, &len2, &err);
                CHECK(st == MEMRA_OK && len2 == len);
                sink += (uint8_t)big[len - 1];
            } else {
                refused(st, &err);
                CHECK(st != MEMRA_OK || len <= sizeof small);
            }
            if (ds[sp]) {
                const char *out = NULL;
                size_t olen = 0;
                st = memra_detok_stream_push(ds[sp], ids[i], &out, &olen, &err);
                refused(st, &err);
                if (st == MEMRA_OK && olen)
                    sink += (uint8_t)out[olen - 1];
            }
        }
    }
    for (int sp = 0; sp < 2; sp++)
        if (ds[sp]) {
            const char *out = NULL;
            size_t olen = 0;
            memra_detok_stream_flush(ds[sp], &out, &olen);
            if (olen)
                sink += (uint8_t)out[olen - 1];
            memra_detok_stream_free(ds[sp]);
        }
    free(big);
}

static void use_tokenizer(const memra_gguf *g, const memra_tokenizer *t, const char *text, size_t len) {
    memra_error err;
    const uint32_t nt = memra_tokenizer_n_tokens(t);
    CHECK(memra_tokenizer_kind(t) != NULL && memra_tokenizer_pre(t) != NULL);
    for (int k = 0; k < MEMRA_SPECIAL_COUNT; k++) {
        const int32_t id = memra_tokenizer_special(t, (memra_special_token)k);
        CHECK(id == -1 || (id >= 0 && (uint32_t)id < nt));
    }
    const int32_t *eog = NULL;
    const uint32_t n_eog = memra_tokenizer_eog(t, &eog);
    for (uint32_t i = 0; i < n_eog; i++) {
        CHECK(eog[i] >= 0 && (uint32_t)eog[i] < nt && (i == 0 || eog[i] > eog[i - 1]));
        CHECK(memra_tokenizer_is_eog(t, eog[i]));
    }
    for (int64_t id = -2; id < (int64_t)nt + 2; id++) {
        size_t tl = 0;
        const char *tx = memra_tokenizer_text(t, (int32_t)id, &tl);
        CHECK((tx != NULL) == (id >= 0 && id < (int64_t)nt));
        if (tx && tl)
            sink += (uint8_t)tx[tl - 1];
        sink += (uint64_t)memra_tokenizer_type(t, (int32_t)id) + memra_tokenizer_is_eog(t, (int32_t)id);
    }
    for (unsigned flags = 0; flags < 4; flags++) {
        int32_t *ids = NULL;
        size_t n = 0;
        memra_status st = memra_tokenizer_encode(t, text, len, flags, &ids, &n, &err);
        refused(st, &err);
        if (st == MEMRA_OK)
            use_ids(t, ids, n);
        free(ids);
    }
    const memra_text_part parts[2] = {{text, len / 2, true}, {text + len / 2, len - len / 2, false}};
    int32_t *ids = NULL;
    size_t n = 0;
    memra_status st = memra_tokenizer_encode_parts(t, parts, 2, MEMRA_TOKENIZE_ADD_BOS, &ids, &n, &err);
    refused(st, &err);
    if (st == MEMRA_OK)
        for (size_t i = 0; i < n; i++)
            CHECK(ids[i] >= 0 && (uint32_t)ids[i] < nt);
    free(ids);

    memra_chat_format fmt;
    const char *source = NULL;
    char *system = NULL;
    st = memra_chat_detect(g, t, &fmt, &source, &system, &err);
    refused(st, &err);
    if (st == MEMRA_OK) {
        char *user = (char *)malloc(len + 1);
        CHECK(user != NULL);
        memcpy(user, text, len);
        user[len] = '\0'; /* a NUL in the text ends the message early: the API takes C strings */
        char *out = NULL;
        st = memra_chat_render(fmt, t, system, user, &out, &err);
        refused(st, &err);
        free(out);
        ids = NULL;
        st = memra_chat_encode(fmt, t, system, user, MEMRA_TOKENIZE_ADD_BOS, &ids, &n, &err);
        refused(st, &err);
        if (st == MEMRA_OK)
            use_ids(t, ids, n);
        free(ids);
        free(user);
    }
    free(system);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8)
        return 0;
    static const char *const pres[8] = {NULL, "gpt-2", "smollm", "starcoder", "llama-bpe", "llama3", "qwen2", "x"};
    const uint8_t f0 = data[0], f1 = data[1];
    const size_t L = data[7] < size - 8 ? data[7] : size - 8;
    const uint8_t *text = data + 8, *p = text + L, *end = data + size;
    const uint8_t *sep = (const uint8_t *)memchr(p, 0xFE, (size_t)(end - p));
    const uint8_t *tok_end = sep ? sep : end;

    char **toks = (char **)calloc(FT_MAX_TOKENS, sizeof *toks),
         **merges = (char **)calloc(FT_MAX_MERGES, sizeof *merges);
    char *tstore = (char *)malloc(size + FT_MAX_TOKENS + 1), *mstore = (char *)malloc(size + FT_MAX_MERGES + 1);
    int32_t *types = (int32_t *)calloc(FT_MAX_TOKENS, sizeof *types);
    float *scores = (float *)calloc(FT_MAX_TOKENS, sizeof *scores);
    char *tmpl = (char *)malloc(L + 1);
    CHECK(toks && merges && tstore && mstore && types && scores && tmpl);
    const uint32_t nt = split(p, tok_end, FT_MAX_TOKENS, toks, tstore);
    const uint32_t nm = sep ? split(sep + 1, end, FT_MAX_MERGES, merges, mstore) : 0;
    for (uint32_t i = 0; i < nt; i++) {
        types[i] = (int32_t)((uint8_t)toks[i][0] % 8u); /* 7: no such type */
        scores[i] = -(float)i + (float)((uint8_t)toks[i][0] & 3u) * 0.5f;
    }
    memcpy(tmpl, text, L);
    tmpl[L] = '\0';

    memra_error err;
    memra_gguf_writer *w = NULL;
    void *file = NULL;
    size_t file_size = 0;
    memra_status st = memra_gguf_writer_new(3, 0, &w, &err);
    CHECK(st == MEMRA_OK);
    const char *kind = (f1 & 2) ? "wordpiece" : (f0 & 1) ? "llama" : "gpt2";
    static const char *const special_keys[5] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                                "tokenizer.ggml.eot_token_id", "tokenizer.ggml.unknown_token_id",
                                                "tokenizer.ggml.padding_token_id"};
    bool ok =
        memra_gguf_writer_set_str(w, "general.architecture", (f1 & 1) ? "gemma3" : "llama", &err) == MEMRA_OK &&
        memra_gguf_writer_set_str(w, "tokenizer.ggml.model", kind, &err) == MEMRA_OK &&
        memra_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", (const char *const *)toks, nt, &err) == MEMRA_OK;
    if (ok && (f0 & 2))
        ok = memra_gguf_writer_set_array(w, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32, nt, types, &err) == MEMRA_OK;
    if (ok && (f0 & 4))
        ok = memra_gguf_writer_set_array(w, "tokenizer.ggml.scores", MEMRA_GGUF_FLOAT32, nt, scores, &err) == MEMRA_OK;
    if (ok && sep)
        ok = memra_gguf_writer_set_str_array(w, "tokenizer.ggml.merges", (const char *const *)merges, nm, &err) ==
             MEMRA_OK;
    if (ok && (f0 & 8))
        ok = memra_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", (f0 & 16) != 0, &err) == MEMRA_OK;
    if (ok && (f0 & 32))
        ok = memra_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", (f0 & 64) != 0, &err) == MEMRA_OK;
    if (ok && pres[(f1 >> 2) & 7])
        ok = memra_gguf_writer_set_str(w, "tokenizer.ggml.pre", pres[(f1 >> 2) & 7], &err) == MEMRA_OK;
    for (uint32_t k = 0; ok && k < 5; k++)
        if ((f1 >> 5) > k) /* 0 to 7: the first that many of the five */
            ok = memra_gguf_writer_set_i32(w, special_keys[k], (int32_t)data[2 + k] - 8, &err) == MEMRA_OK;
    if (ok && (f0 & 128))
        ok = memra_gguf_writer_set_str(w, "tokenizer.chat_template", tmpl, &err) == MEMRA_OK;
    CHECK(ok); /* every value above is one the writer takes */
    st = memra_gguf_writer_write_memory(w, &file, &file_size, &err);
    CHECK(st == MEMRA_OK);
    memra_gguf_writer_free(w);

    memra_gguf *g = NULL;
    st = memra_gguf_open_memory(file, file_size, "fuzz.gguf", &g, &err);
    CHECK(st == MEMRA_OK); /* the writer's own output */
    memra_tokenizer *t = NULL;
    st = memra_tokenizer_new(g, &t, &err);
    refused(st, &err);
    CHECK((st == MEMRA_OK) == (t != NULL));
    if (t) {
        CHECK(memra_tokenizer_n_tokens(t) == nt);
        use_tokenizer(g, t, (const char *)text, L);
        memra_tokenizer_free(t);
    }
    memra_gguf_close(g);
    free(file);
    free(toks);
    free(merges);
    free(tstore);
    free(mstore);
    free(types);
    free(scores);
    free(tmpl);
    return 0;
}
