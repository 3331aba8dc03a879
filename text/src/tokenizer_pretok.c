/* tokenizer_pretok.c: the Unicode classes byte-level BPE splits by, UTF-8 to code points and back,
 * and the pre-tokenizers (GPT-2, SmolLM, Llama 3, Qwen2) with their test hook. */
#include <stdlib.h>
#include <string.h>

#include "memra/utf8.h"
#include "tokenizer_internal.h"

/* ---- Unicode ------------------------------------------------------------------------------ */

bool is_space(uint32_t c) {
    return (c >= 0x9 && c <= 0xd) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

int cls(uint32_t c) {
    if (c == TOK_CP_INVALID)
        return CLS_OTHER;
    if (is_space(c))
        return CLS_SPACE;
    if (c < 0x80) {
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
            return CLS_LETTER;
        if (c >= '0' && c <= '9')
            return CLS_NUMBER;
        return CLS_OTHER;
    }
    unsigned lo = 0, hi = memra_tok_n_ranges;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (c < memra_tok_ranges[mid].lo)
            hi = mid;
        else if (c > memra_tok_ranges[mid].hi)
            lo = mid + 1;
        else
            return memra_tok_ranges[mid].cat == MEMRA_TOK_LETTER ? CLS_LETTER : CLS_NUMBER;
    }
    return CLS_OTHER;
}

/* Decodes the UTF-8 character at s (n bytes there): its length, and its code point or
 * TOK_CP_INVALID for a byte that starts no valid sequence (length 1 then). */
size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    size_t len = memra_utf8_len(s, n < 4 ? n : 4);
    if (len == 0) {
        *cp = TOK_CP_INVALID;
        return 1;
    }
    if (len == 1)
        *cp = s[0];
    else if (len == 2)
        *cp = ((uint32_t)(s[0] & 0x1f) << 6) | (s[1] & 0x3f);
    else if (len == 3)
        *cp = ((uint32_t)(s[0] & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
    else
        *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) | ((uint32_t)(s[2] & 0x3f) << 6) |
              (s[3] & 0x3f);
    return len;
}

size_t utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* ---- pre-tokenizers: piece ends (code point indices) appended to `ends` -------------------- */

static uint32_t lower_ascii(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* A contraction at pos ('s 't 're 've 'm 'll 'd): its length in code points, or 0. */
static size_t contraction(const uint32_t *cp, size_t pos, size_t end, bool fold) {
    if (cp[pos] != '\'' || pos + 1 >= end)
        return 0;
    uint32_t a = fold ? lower_ascii(cp[pos + 1]) : cp[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if (pos + 2 >= end)
        return 0;
    uint32_t b = fold ? lower_ascii(cp[pos + 2]) : cp[pos + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
bool split_gpt2(const uint32_t *cp, size_t start, size_t end, ivec *ends) {
    size_t pos = start;
    while (pos < end) {
        size_t e;
        size_t c = contraction(cp, pos, end, false);
        if (c) {
            e = pos + c;
        } else {
            size_t q = (cp[pos] == ' ' && pos + 1 < end && cls(cp[pos + 1]) != CLS_SPACE) ? pos + 1 : pos;
            int k = cls(cp[q]);
            if (k != CLS_SPACE) {
                e = q;
                while (e < end && cls(cp[e]) == k)
                    e++;
            } else {
                e = pos;
                while (e < end && cls(cp[e]) == CLS_SPACE)
                    e++;
                if (e < end && e - pos >= 2)
                    e--; /* \s+(?!\S) leaves the last space to the piece after it */
                else if (e < end)
                    e = pos + 1;
            }
        }
        if (!ivec_push(ends, (int32_t)e))
            return false;
        pos = e;
    }
    return true;
}

/* smollm: \p{N} (every digit its own piece), then the GPT-2 pattern on the text between. */
bool split_smollm(const uint32_t *cp, size_t start, size_t end, ivec *ends) {
    size_t pos = start;
    while (pos < end) {
        size_t e = pos;
        while (e < end && cls(cp[e]) != CLS_NUMBER)
            e++;
        if (e > pos && !split_gpt2(cp, pos, e, ends))
            return false;
        if (e < end && !ivec_push(ends, (int32_t)(e + 1)))
            return false;
        pos = e < end ? e + 1 : e;
    }
    return true;
}

static bool is_nl(uint32_t c) { return c == '\r' || c == '\n'; }

/* llama3 (max_digits 3) and qwen2 (1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
bool split_llama3(const uint32_t *cp, size_t start, size_t end, size_t max_digits, ivec *ends) {
    size_t pos = start;
    while (pos < end) {
        size_t e;
        uint32_t c = cp[pos];
        int k = cls(c);
        size_t ct = contraction(cp, pos, end, true);
        if (ct) {
            e = pos + ct;
        } else if (k == CLS_LETTER ||
                   (k != CLS_NUMBER && !is_nl(c) && pos + 1 < end && cls(cp[pos + 1]) == CLS_LETTER)) {
            e = k == CLS_LETTER ? pos : pos + 1;
            while (e < end && cls(cp[e]) == CLS_LETTER)
                e++;
        } else if (k == CLS_NUMBER) {
            e = pos;
            while (e < end && e - pos < max_digits && cls(cp[e]) == CLS_NUMBER)
                e++;
        } else if (k == CLS_OTHER || (c == ' ' && pos + 1 < end && cls(cp[pos + 1]) == CLS_OTHER)) {
            e = k == CLS_OTHER ? pos : pos + 1;
            while (e < end && cls(cp[e]) == CLS_OTHER)
                e++;
            while (e < end && is_nl(cp[e]))
                e++;
        } else {
            e = pos;
            size_t last_nl = SIZE_MAX;
            while (e < end && cls(cp[e]) == CLS_SPACE) {
                if (is_nl(cp[e]))
                    last_nl = e;
                e++;
            }
            if (last_nl != SIZE_MAX)
                e = last_nl + 1;
            else if (e < end && e - pos >= 2)
                e--;
            else if (e < end)
                e = pos + 1;
        }
        if (!ivec_push(ends, (int32_t)e))
            return false;
        pos = e;
    }
    return true;
}

/* ---- test hook ------------------------------------------------------------------------------ */

memra_status memra_tok_pretokenize(const char *pre, const char *text, size_t len, size_t *ends, size_t cap, size_t *n,
                                   memra_error *err) {
    if (!pre || (!text && len) || !n || (!ends && cap))
        return memra_fail(err, MEMRA_E_INVALID, "pretokenize: a NULL argument");
    *n = 0;
    uint32_t *cp = malloc((len + 1) * sizeof(uint32_t));
    size_t *at = malloc((len + 1) * sizeof(size_t));
    ivec pieces = {0};
    if (!cp || !at) {
        free(cp);
        free(at);
        return memra_fail(err, MEMRA_E_NOMEM, "pretokenize: out of memory");
    }
    size_t m = 0;
    for (size_t i = 0; i < len; m++) {
        at[m] = i;
        i += utf8_next((const unsigned char *)text + i, len - i, &cp[m]);
    }
    at[m] = len;
    bool ok;
    if (strcmp(pre, "gpt-2") == 0)
        ok = split_gpt2(cp, 0, m, &pieces);
    else if (strcmp(pre, "smollm") == 0)
        ok = split_smollm(cp, 0, m, &pieces);
    else if (strcmp(pre, "llama3") == 0)
        ok = split_llama3(cp, 0, m, 3, &pieces);
    else if (strcmp(pre, "qwen2") == 0)
        ok = split_llama3(cp, 0, m, 1, &pieces);
    else {
        free(cp);
        free(at);
        return memra_fail(err, MEMRA_E_INVALID, "pretokenize: unknown pre-tokenizer '%s'", pre);
    }
    memra_status st = ok ? MEMRA_OK : memra_fail(err, MEMRA_E_NOMEM, "pretokenize: out of memory");
    if (st == MEMRA_OK && pieces.n > cap)
        st = memra_fail(err, MEMRA_E_RANGE, "pretokenize: %zu pieces, room for %zu", pieces.n, cap);
    if (st == MEMRA_OK)
        for (size_t k = 0; k < pieces.n; k++)
            ends[k] = at[pieces.p[k]];
    *n = pieces.n;
    free(cp);
    free(at);
    free(pieces.p);
    return st;
}
