/* tokenizer_decode.c: a token's text (memra_tokenizer_decode) and the streaming decoder that holds
 * back a UTF-8 sequence cut between tokens. */
#include <stdlib.h>
#include <string.h>

#include "memra/utf8.h"
#include "tokenizer_internal.h"

/* ---- decoding ----------------------------------------------------------------------------- */

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* The byte of a "<0xXX>" token, or -1. */
static int byte_token_value(const char *s, size_t len) {
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static memra_status put(char *dst, size_t cap, size_t *len, const char *s, size_t n) {
    if (*len <= cap && n <= cap - *len)
        memcpy(dst + *len, s, n);
    *len += n;
    return MEMRA_OK;
}

memra_status memra_tokenizer_decode(const memra_tokenizer *t, int32_t id, bool specials, char *out, size_t cap,
                                    size_t *len, memra_error *err) {
    if (!t || !len || (!out && cap))
        return memra_fail(err, MEMRA_E_INVALID, "tokenizer decode: a NULL argument");
    *len = 0;
    if (id < 0 || (uint32_t)id >= t->n)
        return memra_fail(err, MEMRA_E_RANGE, "tokenizer decode: token id %d out of range (vocabulary of %u)", (int)id,
                          t->n);
    size_t tl;
    const char *s = tok_text(t, id, &tl);
    uint8_t ty = t->types[id];
    if (ty == MEMRA_TOKEN_CONTROL || ty == MEMRA_TOKEN_UNKNOWN) {
        if (specials)
            put(out, cap, len, s, tl);
    } else if (ty == MEMRA_TOKEN_USER_DEFINED) {
        put(out, cap, len, s, tl);
    } else if (t->kind == KIND_LLAMA) {
        int b = ty == MEMRA_TOKEN_BYTE ? byte_token_value(s, tl) : -1;
        if (b >= 0) {
            char c = (char)b;
            put(out, cap, len, &c, 1);
        } else {
            for (size_t i = 0; i < tl;) {
                if (tl - i >= 3 && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                    put(out, cap, len, " ", 1);
                    i += 3;
                } else {
                    put(out, cap, len, s + i, 1);
                    i++;
                }
            }
        }
    } else {
        for (size_t i = 0; i < tl;) {
            uint32_t cp;
            size_t l = utf8_next((const unsigned char *)s + i, tl - i, &cp);
            if (cp < 512 && t->u2b[cp] >= 0) {
                char c = (char)t->u2b[cp];
                put(out, cap, len, &c, 1);
            } else {
                put(out, cap, len, s + i, l); /* not of the byte alphabet: as it is */
            }
            i += l;
        }
    }
    if (*len > cap)
        return memra_fail(err, MEMRA_E_RANGE, "tokenizer decode: token %d needs %zu bytes, the buffer holds %zu",
                          (int)id, *len, cap);
    return MEMRA_OK;
}

struct memra_detok_stream {
    const memra_tokenizer *t;
    bool specials;
    buf pending; /* bytes not yet returned, at its start */
    size_t held; /* bytes held back from the last return */
    buf ready;
};

memra_status memra_detok_stream_new(const memra_tokenizer *t, bool specials, memra_detok_stream **out,
                                    memra_error *err) {
    if (!out || !t)
        return memra_fail(err, MEMRA_E_INVALID, "tokenizer stream: a NULL argument");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return memra_fail(err, MEMRA_E_NOMEM, "tokenizer stream: out of memory");
    (*out)->t = t;
    (*out)->specials = specials;
    return MEMRA_OK;
}

void memra_detok_stream_free(memra_detok_stream *s) {
    if (!s)
        return;
    free(s->pending.p);
    free(s->ready.p);
    free(s);
}

/* Whether the k bytes at s (1..3, a lead byte first) can still become a valid sequence. */
static bool utf8_incomplete(const unsigned char *s, size_t k) {
    static const unsigned char second[] = {0x80, 0x90, 0xa0};
    for (size_t c = 0; c < sizeof second; c++) {
        unsigned char b[4] = {0x80, 0x80, 0x80, 0x80};
        memcpy(b, s, k);
        if (k == 1)
            b[1] = second[c];
        size_t l = memra_utf8_len(b, 4);
        if (l > k && memra_utf8_len(b, l) == l)
            return true;
    }
    return false;
}

memra_status memra_detok_stream_push(memra_detok_stream *s, int32_t id, const char **out, size_t *len,
                                     memra_error *err) {
    if (!s || !out || !len)
        return memra_fail(err, MEMRA_E_INVALID, "tokenizer stream: a NULL argument");
    *out = NULL;
    *len = 0;
    /* drop what was returned last time: keep only the held-back tail */
    if (s->held < s->pending.n) {
        memmove(s->pending.p, s->pending.p + s->pending.n - s->held, s->held);
    }
    s->pending.n = s->held;
    if (id < 0 || (uint32_t)id >= s->t->n) {
        size_t none;
        return memra_tokenizer_decode(s->t, id, s->specials, NULL, 0, &none, err);
    }
    size_t need = 0;
    (void)memra_tokenizer_decode(s->t, id, s->specials, NULL, 0, &need, NULL); /* sizes it */
    if (!buf_reserve(&s->pending, need))
        return memra_fail(err, MEMRA_E_NOMEM, "tokenizer stream: out of memory");
    size_t got = 0;
    char *dst = s->pending.p ? s->pending.p + s->pending.n : NULL; /* NULL until a token gave bytes */
    memra_status st = memra_tokenizer_decode(s->t, id, s->specials, dst, need, &got, err);
    if (st != MEMRA_OK)
        return st;
    s->pending.n += got;
    /* hold back a trailing incomplete sequence */
    size_t n = s->pending.n, hold = 0;
    const unsigned char *p = (const unsigned char *)s->pending.p;
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = p[n - k];
        if (c >= 0x80 && c < 0xc0)
            continue; /* a continuation byte: look further back */
        if (c >= 0xc0 && utf8_incomplete(p + n - k, k))
            hold = k;
        break;
    }
    s->held = hold;
    *out = s->pending.p;
    *len = n - hold;
    return MEMRA_OK;
}

void memra_detok_stream_flush(memra_detok_stream *s, const char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (!s)
        return;
    if (s->held < s->pending.n)
        memmove(s->pending.p, s->pending.p + s->pending.n - s->held, s->held);
    *out = s->pending.p;
    *len = s->held;
    s->pending.n = s->held; /* returned: the next push drops them */
    s->held = 0;
}
