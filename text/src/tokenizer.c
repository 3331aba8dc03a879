/* tokenizer.c: tokenizers built from GGUF metadata (memra/tokenizer.h): the vocabulary, its look-up
 * tables, special-token partition, byte-level BPE with its pre-tokenizers, SentencePiece-style
 * merges by score, decoding and the streaming decoder. */
#include "memra/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "memra/utf8.h"
#include "tokenizer_internal.h"

#define TOK_MAX_TOKENS (1u << 24)  /* more tokens than any published vocabulary: refused */
#define TOK_MAX_TEXT (1u << 16)    /* bytes of one token's text */
#define TOK_CP_INVALID 0xffffffffu /* a byte that starts no valid UTF-8 sequence */
#define TOK_MAX_EOG 32             /* end-of-generation ids kept (the texts below and 3 keys) */

/* Tokens that end generation wherever a vocabulary has them, as llama.cpp decides its EOG set
 * (by text: the converters do not always name them): a turn's or a text's end. Each is also made
 * a control token when the file types it otherwise, so text never produces it unasked. */
static const char *const eog_texts[] = {"<|eot_id|>",
                                        "<|im_end|>",
                                        "<|end|>",
                                        "<end_of_turn>",
                                        "<|endoftext|>",
                                        "<|eom_id|>",
                                        "<|end_of_text|>",
                                        "<EOT>",
                                        "_<EOT>",
                                        "<|return|>",
                                        "<|call|>",
                                        "<end_of_utterance>",
                                        "<\xef\xbd\x9c"
                                        "end\xe2\x96\x81"
                                        "of\xe2\x96\x81"
                                        "sentence\xef\xbd\x9c>" /* DeepSeek */};

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

/* ---- small helpers ---------------------------------------------------------------------- */

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static bool buf_reserve(buf *b, size_t more) {
    if (more > SIZE_MAX / 2 - b->n)
        return false;
    if (b->n + more <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return false;
    b->p = p;
    b->cap = cap;
    return true;
}
static bool buf_add(buf *b, const void *s, size_t len) {
    if (!buf_reserve(b, len))
        return false;
    if (len)
        memcpy(b->p + b->n, s, len);
    b->n += len;
    return true;
}

typedef struct ivec {
    int32_t *p;
    size_t n, cap;
} ivec;
static bool ivec_push(ivec *v, int32_t x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        if (cap > SIZE_MAX / sizeof(int32_t))
            return false;
        int32_t *p = realloc(v->p, cap * sizeof(int32_t));
        if (!p)
            return false;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = x;
    return true;
}

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static bool table_init(str_table *t, uint32_t n) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2)
        cap *= 2;
    t->slots = calloc((size_t)cap, sizeof(uint32_t));
    t->mask = cap - 1;
    return t->slots != NULL;
}

/* The slot of (s, len) among entries whose text is text + off[i] .. off[i + 1]. */
static uint64_t table_slot(const str_table *t, const char *text, const uint64_t *off, const char *s, size_t len) {
    uint64_t i = hash_bytes(s, len) & t->mask;
    for (;;) {
        uint32_t v = t->slots[i];
        if (v == 0)
            return i;
        uint32_t k = v - 1;
        if (off[k + 1] - off[k] == len && memcmp(text + off[k], s, len) == 0)
            return i;
        i = (i + 1) & t->mask;
    }
}

static int32_t vocab_find(const memra_tokenizer *t, const char *s, size_t len) {
    uint32_t v = t->vocab.slots[table_slot(&t->vocab, t->text, t->off, s, len)];
    return v ? (int32_t)(v - 1) : -1;
}
static int64_t merge_find(const memra_tokenizer *t, const char *s, size_t len) {
    uint32_t v = t->merges.slots[table_slot(&t->merges, t->mtext, t->moff, s, len)];
    return v ? (int64_t)(v - 1) : -1;
}

static const char *tok_text(const memra_tokenizer *t, int32_t id, size_t *len) {
    *len = (size_t)(t->off[id + 1] - t->off[id]);
    return t->text + t->off[id];
}

/* ---- Unicode ------------------------------------------------------------------------------ */

static bool is_space(uint32_t c) {
    return (c >= 0x9 && c <= 0xd) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

static int cls(uint32_t c) {
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
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
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

static size_t utf8_put(uint32_t cp, char *out) {
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
static bool split_gpt2(const uint32_t *cp, size_t start, size_t end, ivec *ends) {
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
static bool split_smollm(const uint32_t *cp, size_t start, size_t end, ivec *ends) {
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
static bool split_llama3(const uint32_t *cp, size_t start, size_t end, size_t max_digits, ivec *ends) {
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

/* ---- the merge engine shared by BPE (rank) and SentencePiece (score) ---------------------- */

typedef struct sym {
    int32_t prev, next;
    uint32_t start, len; /* bytes of the word */
} sym;

typedef struct bigram {
    double score; /* higher first */
    int32_t left, right;
    uint32_t size;
} bigram;

typedef struct heap {
    bigram *p;
    size_t n, cap;
} heap;

static bool big_before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}
static bool heap_push(heap *h, bigram b) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        bigram *p = realloc(h->p, cap * sizeof *p);
        if (!p)
            return false;
        h->p = p;
        h->cap = cap;
    }
    size_t i = h->n++;
    h->p[i] = b;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!big_before(&h->p[i], &h->p[up]))
            break;
        bigram t = h->p[i];
        h->p[i] = h->p[up];
        h->p[up] = t;
        i = up;
    }
    return true;
}
static bigram heap_pop(heap *h) {
    bigram top = h->p[0];
    h->p[0] = h->p[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && big_before(&h->p[l], &h->p[m]))
            m = l;
        if (r < h->n && big_before(&h->p[r], &h->p[m]))
            m = r;
        if (m == i)
            break;
        bigram t = h->p[i];
        h->p[i] = h->p[m];
        h->p[m] = t;
        i = m;
    }
    return top;
}

typedef struct merge_ctx {
    const memra_tokenizer *t;
    const char *word;
    sym *syms;
    heap h;
    buf scratch;
} merge_ctx;

/* Queues the pair (left, right) when the vocabulary can merge it. */
static bool try_pair(merge_ctx *m, int32_t left, int32_t right) {
    if (left < 0 || right < 0)
        return true;
    const sym *a = &m->syms[left], *b = &m->syms[right];
    double score;
    m->scratch.n = 0;
    if (m->t->kind == KIND_GPT2) {
        if (!buf_add(&m->scratch, m->word + a->start, a->len) || !buf_add(&m->scratch, " ", 1) ||
            !buf_add(&m->scratch, m->word + b->start, b->len))
            return false;
        int64_t rank = merge_find(m->t, m->scratch.p, m->scratch.n);
        if (rank < 0)
            return true;
        score = -(double)rank;
    } else {
        if (!buf_add(&m->scratch, m->word + a->start, (size_t)a->len + b->len))
            return false;
        int32_t id = vocab_find(m->t, m->scratch.p, m->scratch.n);
        if (id < 0)
            return true;
        score = m->t->scores ? (double)m->t->scores[id] : 0.0;
    }
    bigram g = {score, left, right, a->len + b->len};
    return heap_push(&m->h, g);
}

/* The last resort for a symbol that is not a token: SentencePiece gives the <0xXX> token of each
 * byte (the unknown token for a byte that has none); BPE, whose symbols are single characters of
 * the byte alphabet, gives one unknown token (a vocabulary may lack bytes no valid UTF-8 uses).
 * Nothing when the file names no unknown token. */
static bool emit_unknown(const memra_tokenizer *t, const char *s, size_t len, ivec *out) {
    int32_t unk = t->special[MEMRA_SPECIAL_UNK];
    if (t->kind != KIND_LLAMA)
        return unk < 0 || ivec_push(out, unk);
    for (size_t i = 0; i < len; i++) {
        int32_t id = t->byte_tok[(unsigned char)s[i]];
        if (id < 0)
            id = unk;
        if (id >= 0 && !ivec_push(out, id))
            return false;
    }
    return true;
}

/* Tokenizes one word (BPE: a pre-tokenized piece in the byte-to-unicode alphabet; SentencePiece:
 * a fragment with spaces already U+2581). */
static bool merge_word(merge_ctx *m, const char *word, size_t len, ivec *out) {
    const memra_tokenizer *t = m->t;
    if (len == 0)
        return true;
    if (t->ignore_merges) {
        int32_t id = vocab_find(t, word, len);
        if (id >= 0)
            return ivec_push(out, id);
    }
    if (len > INT32_MAX / 2)
        return false;
    free(m->syms);
    m->syms = malloc(len * sizeof(sym));
    if (!m->syms)
        return false;
    m->word = word;
    m->h.n = 0;
    int32_t ns = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t l = utf8_next((const unsigned char *)word + i, len - i, &cp);
        m->syms[ns] = (sym){ns - 1, ns + 1, (uint32_t)i, (uint32_t)l};
        ns++;
        i += l;
    }
    m->syms[ns - 1].next = -1;
    for (int32_t i = 0; i + 1 < ns; i++)
        if (!try_pair(m, i, i + 1))
            return false;
    while (m->h.n > 0) {
        bigram g = heap_pop(&m->h);
        sym *a = &m->syms[g.left], *b = &m->syms[g.right];
        if (a->len == 0 || b->len == 0 || a->next != g.right || a->len + b->len != g.size)
            continue; /* stale */
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0)
            m->syms[b->next].prev = g.left;
        if (!try_pair(m, a->prev, g.left) || !try_pair(m, g.left, a->next))
            return false;
    }
    for (int32_t i = 0; i >= 0; i = m->syms[i].next) {
        const sym *s = &m->syms[i];
        int32_t id = vocab_find(t, word + s->start, s->len);
        if (id >= 0) {
            if (!ivec_push(out, id))
                return false;
        } else if (!emit_unknown(t, word + s->start, s->len, out))
            return false;
    }
    return true;
}

/* ---- encoding ----------------------------------------------------------------------------- */

typedef struct frag {
    int32_t id; /* >= 0: a token; -1: text [start, start + len) */
    size_t start, len;
} frag;

typedef struct fvec {
    frag *p;
    size_t n, cap;
} fvec;
static bool fvec_push(fvec *v, frag f) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        frag *p = realloc(v->p, cap * sizeof *p);
        if (!p)
            return false;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = f;
    return true;
}

/* Splits the text into fragments: the special tokens matched in it (longest first) and text. */
static bool partition(const memra_tokenizer *t, const char *text, size_t len, bool specials, fvec *out) {
    fvec cur = {0}, next = {0};
    bool ok = fvec_push(&cur, (frag){-1, 0, len});
    bool present[256] = {false};
    for (size_t i = 0; i < len; i++)
        present[(unsigned char)text[i]] = true;
    for (uint32_t s = 0; ok && s < t->n_partition; s++) {
        int32_t id = t->partition[s];
        uint8_t ty = t->types[id];
        if (!specials && (ty == MEMRA_TOKEN_CONTROL || ty == MEMRA_TOKEN_UNKNOWN))
            continue;
        size_t sl;
        const char *st = tok_text(t, id, &sl);
        if (sl > len || !present[(unsigned char)st[0]])
            continue;
        next.n = 0;
        for (size_t f = 0; ok && f < cur.n; f++) {
            frag fr = cur.p[f];
            if (fr.id >= 0 || fr.len < sl) {
                ok = fvec_push(&next, fr);
                continue;
            }
            size_t p = fr.start, e = fr.start + fr.len;
            while (ok && p < e) {
                const char *hit = e - p >= sl ? memmem(text + p, e - p, st, sl) : NULL;
                if (!hit) {
                    ok = fvec_push(&next, (frag){-1, p, e - p});
                    break;
                }
                size_t h = (size_t)(hit - text);
                if (h > p)
                    ok = fvec_push(&next, (frag){-1, p, h - p});
                if (ok)
                    ok = fvec_push(&next, (frag){id, h, sl});
                p = h + sl;
            }
        }
        fvec tmp = cur;
        cur = next;
        next = tmp;
    }
    free(next.p);
    if (!ok) {
        free(cur.p);
        return false;
    }
    *out = cur;
    return true;
}

static bool encode_bpe(const memra_tokenizer *t, merge_ctx *m, const char *text, size_t len, ivec *out) {
    /* code points of the fragment, with their byte offsets */
    uint32_t *cp = malloc((len + 1) * sizeof(uint32_t));
    size_t *at = malloc((len + 1) * sizeof(size_t));
    ivec ends = {0};
    buf word = {0};
    bool ok = cp && at;
    size_t n = 0;
    for (size_t i = 0; ok && i < len; n++) {
        at[n] = i;
        i += utf8_next((const unsigned char *)text + i, len - i, &cp[n]);
    }
    if (ok)
        at[n] = len;
    if (ok) {
        switch (t->pre) {
        case PRE_SMOLLM: ok = split_smollm(cp, 0, n, &ends); break;
        case PRE_LLAMA3: ok = split_llama3(cp, 0, n, 3, &ends); break;
        case PRE_QWEN2: ok = split_llama3(cp, 0, n, 1, &ends); break;
        default: ok = split_gpt2(cp, 0, n, &ends); break;
        }
    }
    size_t prev = 0;
    for (size_t k = 0; ok && k < ends.n; k++) {
        size_t e = (size_t)ends.p[k];
        word.n = 0;
        for (size_t b = at[prev]; ok && b < at[e]; b++) {
            char u[4];
            size_t ul = utf8_put(t->b2u[(unsigned char)text[b]], u);
            ok = buf_add(&word, u, ul);
        }
        if (ok)
            ok = merge_word(m, word.p, word.n, out);
        prev = e;
    }
    free(cp);
    free(at);
    free(ends.p);
    free(word.p);
    return ok;
}

static bool encode_spm(const memra_tokenizer *t, merge_ctx *m, const char *text, size_t len, bool prefix, ivec *out) {
    (void)t;
    buf w = {0};
    bool ok = true;
    if (prefix)
        ok = buf_add(&w, "\xe2\x96\x81", 3);
    for (size_t i = 0; ok && i < len; i++)
        ok = text[i] == ' ' ? buf_add(&w, "\xe2\x96\x81", 3) : buf_add(&w, text + i, 1);
    if (ok)
        ok = merge_word(m, w.p, w.n, out);
    free(w.p);
    return ok;
}

/* Encodes text already split into fragments (tokens, and text ranges of `text`). */
static memra_status encode_frags(const memra_tokenizer *t, const char *text, size_t len, const fvec *frags,
                                 unsigned flags, int32_t **ids, size_t *n, memra_error *err) {
    ivec out = {0};
    merge_ctx m = {.t = t};
    bool ok = true;
    if ((flags & MEMRA_TOKENIZE_ADD_BOS) && t->add_bos && t->special[MEMRA_SPECIAL_BOS] >= 0)
        ok = ivec_push(&out, t->special[MEMRA_SPECIAL_BOS]);
    bool prev_special = true;
    for (size_t f = 0; ok && f < frags->n; f++) {
        frag fr = frags->p[f];
        if (fr.id >= 0) {
            ok = ivec_push(&out, fr.id);
            prev_special = true;
        } else if (t->kind == KIND_GPT2) {
            ok = encode_bpe(t, &m, text + fr.start, fr.len, &out);
        } else {
            ok = encode_spm(t, &m, text + fr.start, fr.len, t->add_space_prefix && prev_special, &out);
            prev_special = false;
        }
    }
    free(m.syms);
    free(m.h.p);
    free(m.scratch.p);
    if (!ok) {
        free(out.p);
        return memra_fail(err, MEMRA_E_NOMEM, "tokenizer encode: out of memory (%zu bytes of text)", len);
    }
    if (out.n == 0) {
        free(out.p);
        out.p = NULL;
    }
    *ids = out.p;
    *n = out.n;
    return MEMRA_OK;
}

memra_status memra_tokenizer_encode(const memra_tokenizer *t, const char *text, size_t len, unsigned flags,
                                    int32_t **ids, size_t *n, memra_error *err) {
    memra_text_part part = {text, len, (flags & MEMRA_TOKENIZE_SPECIALS) != 0};
    return memra_tokenizer_encode_parts(t, &part, 1, flags & ~MEMRA_TOKENIZE_SPECIALS, ids, n, err);
}

memra_status memra_tokenizer_encode_parts(const memra_tokenizer *t, const memra_text_part *parts, size_t n_parts,
                                          unsigned flags, int32_t **ids, size_t *n, memra_error *err) {
    if (ids)
        *ids = NULL;
    if (n)
        *n = 0;
    if (!t || !ids || !n || (!parts && n_parts))
        return memra_fail(err, MEMRA_E_INVALID, "tokenizer encode: a NULL argument");
    if (flags & ~MEMRA_TOKENIZE_ADD_BOS)
        return memra_fail(err, MEMRA_E_INVALID, "tokenizer encode: unknown flags 0x%x", flags);
    size_t len = 0;
    for (size_t i = 0; i < n_parts; i++) {
        if (!parts[i].text && parts[i].len)
            return memra_fail(err, MEMRA_E_INVALID, "tokenizer encode: part %zu has no text", i);
        if (parts[i].len > SIZE_MAX / 64 - len)
            return memra_fail(err, MEMRA_E_RANGE, "tokenizer encode: the text is too long");
        len += parts[i].len;
    }
    if (len > SIZE_MAX / 64 || len > (size_t)INT32_MAX)
        return memra_fail(err, MEMRA_E_RANGE, "tokenizer encode: a text of %zu bytes is too long", len);
    /* One text; each part partitioned by its own rule (a part without specials matches no control
     * token, whatever it holds), and text fragments that meet across parts joined, so a message
     * spliced into a template tokenizes as the whole text would, its markers aside. */
    const char *text = n_parts == 1 && parts[0].text ? parts[0].text : "";
    char *joined = NULL;
    if (n_parts > 1) {
        if (!(joined = malloc(len + 1)))
            return memra_fail(err, MEMRA_E_NOMEM, "tokenizer encode: out of memory (%zu bytes of text)", len);
        size_t at = 0;
        for (size_t i = 0; i < n_parts; i++) {
            if (parts[i].len)
                memcpy(joined + at, parts[i].text, parts[i].len);
            at += parts[i].len;
        }
        joined[len] = '\0';
        text = joined;
    }
    fvec all = {0};
    bool ok = true;
    size_t at = 0;
    for (size_t i = 0; ok && i < n_parts; i++) {
        fvec one = {0};
        ok = partition(t, text + at, parts[i].len, parts[i].specials, &one);
        for (size_t f = 0; ok && f < one.n; f++) {
            frag fr = one.p[f];
            if (fr.id < 0 && fr.len == 0)
                continue;
            fr.start += at;
            frag *last = all.n ? &all.p[all.n - 1] : NULL;
            if (fr.id < 0 && last && last->id < 0 && last->start + last->len == fr.start)
                last->len += fr.len;
            else
                ok = fvec_push(&all, fr);
        }
        free(one.p);
        at += parts[i].len;
    }
    memra_status st = ok ? encode_frags(t, text, len, &all, flags, ids, n, err)
                         : memra_fail(err, MEMRA_E_NOMEM, "tokenizer encode: out of memory (%zu bytes of text)", len);
    free(all.p);
    free(joined);
    return st;
}

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
    memra_status st = memra_tokenizer_decode(s->t, id, s->specials, s->pending.p + s->pending.n, need, &got, err);
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

/* ---- building from the file -------------------------------------------------------------- */

const char *memra_tokenizer_kind(const memra_tokenizer *t) { return t->kind == KIND_GPT2 ? "gpt2" : "llama"; }
const char *memra_tokenizer_pre(const memra_tokenizer *t) { return t->pre_name; }
uint32_t memra_tokenizer_n_tokens(const memra_tokenizer *t) { return t->n; }
bool memra_tokenizer_add_bos(const memra_tokenizer *t) { return t->add_bos; }

int32_t memra_tokenizer_special(const memra_tokenizer *t, memra_special_token which) {
    return (unsigned)which < MEMRA_SPECIAL_COUNT ? t->special[which] : -1;
}

const char *memra_tokenizer_text(const memra_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n) {
        if (len)
            *len = 0;
        return NULL;
    }
    size_t l;
    const char *s = tok_text(t, id, &l);
    if (len)
        *len = l;
    return s;
}

memra_token_type memra_tokenizer_type(const memra_tokenizer *t, int32_t id) {
    return id < 0 || (uint32_t)id >= t->n ? MEMRA_TOKEN_UNDEFINED : (memra_token_type)t->types[id];
}

bool memra_tokenizer_is_eog(const memra_tokenizer *t, int32_t id) {
    for (uint32_t i = 0; id >= 0 && i < t->n_eog; i++)
        if (t->eog[i] == id)
            return true;
    return false;
}

uint32_t memra_tokenizer_eog(const memra_tokenizer *t, const int32_t **ids) {
    if (ids)
        *ids = t->eog;
    return t->n_eog;
}

static void eog_add(memra_tokenizer *t, int32_t id) {
    if (id < 0 || t->n_eog == TOK_MAX_EOG)
        return;
    uint32_t i = 0;
    while (i < t->n_eog && t->eog[i] < id)
        i++;
    if (i < t->n_eog && t->eog[i] == id)
        return;
    memmove(t->eog + i + 1, t->eog + i, (t->n_eog - i) * sizeof t->eog[0]);
    t->eog[i] = id;
    t->n_eog++;
}

void memra_tokenizer_free(memra_tokenizer *t) {
    if (!t)
        return;
    free(t->text);
    free(t->off);
    free(t->scores);
    free(t->types);
    free(t->vocab.slots);
    free(t->mtext);
    free(t->moff);
    free(t->merges.slots);
    free(t->partition);
    free(t);
}

/* A boolean key: absent leaves *out; of another type is a format error. */
static memra_status get_bool(const memra_gguf *g, const char *key, bool *out, memra_error *err) {
    const memra_gguf_value *v = memra_gguf_find(g, key);
    if (!v)
        return MEMRA_OK;
    if (v->type != MEMRA_GGUF_BOOL)
        return memra_fail(err, MEMRA_E_FORMAT, "%s: key '%s' has type %s, expected bool", memra_gguf_path(g), key,
                          memra_gguf_type_name(v->type));
    *out = v->v.u64 != 0;
    return MEMRA_OK;
}

static memra_status build_vocab(memra_tokenizer *t, const memra_gguf *g, memra_error *err) {
    const char *path = memra_gguf_path(g);
    const memra_gguf_array *toks;
    memra_status st = memra_gguf_get_array(g, "tokenizer.ggml.tokens", MEMRA_GGUF_STRING, &toks, err);
    if (st != MEMRA_OK)
        return st;
    if (toks->count == 0 || toks->count > TOK_MAX_TOKENS)
        return memra_fail(err, MEMRA_E_FORMAT, "%s: tokenizer.ggml.tokens has %llu tokens, expected 1 to %u", path,
                          (unsigned long long)toks->count, TOK_MAX_TOKENS);
    t->n = (uint32_t)toks->count;
    uint64_t total = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        uint64_t l = toks->items[i].v.str.len;
        if (l > TOK_MAX_TEXT)
            return memra_fail(err, MEMRA_E_FORMAT, "%s: token %u is %llu bytes long (at most %u)", path, i,
                              (unsigned long long)l, TOK_MAX_TEXT);
        total += l;
    }
    t->text = malloc((size_t)total + 1);
    t->off = malloc(((size_t)t->n + 1) * sizeof(uint64_t));
    t->types = malloc(t->n);
    if (!t->text || !t->off || !t->types || !table_init(&t->vocab, t->n))
        return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory for a vocabulary of %u tokens", path, t->n);
    uint64_t o = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        t->off[i] = o;
        memcpy(t->text + o, toks->items[i].v.str.ptr, (size_t)toks->items[i].v.str.len);
        o += toks->items[i].v.str.len;
    }
    t->off[t->n] = o;
    for (uint32_t i = 0; i < t->n; i++) { /* a text given twice: the last id wins (as llama.cpp) */
        size_t l;
        const char *s = tok_text(t, (int32_t)i, &l);
        t->vocab.slots[table_slot(&t->vocab, t->text, t->off, s, l)] = i + 1;
    }

    memset(t->types, MEMRA_TOKEN_NORMAL, t->n);
    if (memra_gguf_find(g, "tokenizer.ggml.token_type")) {
        const memra_gguf_array *ty;
        st = memra_gguf_get_array(g, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32, &ty, err);
        if (st != MEMRA_OK)
            return st;
        if (ty->count != t->n)
            return memra_fail(err, MEMRA_E_FORMAT, "%s: tokenizer.ggml.token_type has %llu entries for %u tokens", path,
                              (unsigned long long)ty->count, t->n);
        for (uint32_t i = 0; i < t->n; i++) {
            int32_t v;
            memcpy(&v, (const char *)ty->data + 4 * (size_t)i, 4);
            if (v < MEMRA_TOKEN_NORMAL || v > MEMRA_TOKEN_BYTE)
                return memra_fail(err, MEMRA_E_FORMAT, "%s: token %u has type %d (expected 1 to 6)", path, i, (int)v);
            t->types[i] = (uint8_t)v;
        }
    }
    if (memra_gguf_find(g, "tokenizer.ggml.scores")) {
        const memra_gguf_array *sc;
        st = memra_gguf_get_array(g, "tokenizer.ggml.scores", MEMRA_GGUF_FLOAT32, &sc, err);
        if (st != MEMRA_OK)
            return st;
        if (sc->count != t->n)
            return memra_fail(err, MEMRA_E_FORMAT, "%s: tokenizer.ggml.scores has %llu entries for %u tokens", path,
                              (unsigned long long)sc->count, t->n);
        t->scores = malloc((size_t)t->n * sizeof(float));
        if (!t->scores)
            return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory for token scores", path);
        memcpy(t->scores, sc->data, (size_t)t->n * sizeof(float));
        for (uint32_t i = 0; i < t->n; i++)
            if (t->scores[i] != t->scores[i])
                return memra_fail(err, MEMRA_E_FORMAT, "%s: token %u has a NaN score", path, i);
    }
    return MEMRA_OK;
}

static memra_status build_merges(memra_tokenizer *t, const memra_gguf *g, memra_error *err) {
    const char *path = memra_gguf_path(g);
    const memra_gguf_array *mg;
    memra_status st = memra_gguf_get_array(g, "tokenizer.ggml.merges", MEMRA_GGUF_STRING, &mg, err);
    if (st != MEMRA_OK)
        return st;
    if (mg->count > TOK_MAX_TOKENS)
        return memra_fail(err, MEMRA_E_FORMAT, "%s: tokenizer.ggml.merges has %llu merges (at most %u)", path,
                          (unsigned long long)mg->count, TOK_MAX_TOKENS);
    t->n_merges = (uint32_t)mg->count;
    uint64_t total = 0;
    for (uint32_t i = 0; i < t->n_merges; i++) {
        if (mg->items[i].v.str.len > 2 * (uint64_t)TOK_MAX_TEXT + 1)
            return memra_fail(err, MEMRA_E_FORMAT, "%s: merge %u is %llu bytes long", path, i,
                              (unsigned long long)mg->items[i].v.str.len);
        total += mg->items[i].v.str.len;
    }
    t->mtext = malloc((size_t)total + 1);
    t->moff = malloc(((size_t)t->n_merges + 1) * sizeof(uint64_t));
    buf joined = {0};
    if (!t->mtext || !t->moff || !table_init(&t->merges, t->n_merges))
        return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory for %u merges", path, t->n_merges);
    uint64_t o = 0;
    for (uint32_t i = 0; i < t->n_merges; i++) {
        const char *s = mg->items[i].v.str.ptr;
        size_t l = (size_t)mg->items[i].v.str.len;
        const char *sp = l > 1 ? memchr(s + 1, ' ', l - 1) : NULL;
        if (!sp || sp + 1 == s + l) {
            free(joined.p);
            return memra_fail(err, MEMRA_E_FORMAT, "%s: merge %u ('%.*s') is not two tokens separated by a space", path,
                              i, (int)(l > 64 ? 64 : l), s);
        }
        size_t la = (size_t)(sp - s), lb = l - la - 1;
        joined.n = 0;
        if (!buf_add(&joined, s, la) || !buf_add(&joined, sp + 1, lb)) {
            free(joined.p);
            return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory for merges", path);
        }
        const char *missing = vocab_find(t, s, la) < 0                ? "its left side"
                              : vocab_find(t, sp + 1, lb) < 0         ? "its right side"
                              : vocab_find(t, joined.p, joined.n) < 0 ? "the merged token"
                                                                      : NULL;
        if (missing) {
            free(joined.p);
            return memra_fail(err, MEMRA_E_FORMAT, "%s: merge %u ('%.*s'): %s is not in the vocabulary", path, i,
                              (int)(l > 64 ? 64 : l), s, missing);
        }
        t->moff[i] = o;
        memcpy(t->mtext + o, s, l);
        o += l;
        t->moff[i + 1] = o;
        uint64_t slot = table_slot(&t->merges, t->mtext, t->moff, s, l);
        if (t->merges.slots[slot] == 0) /* a merge listed twice keeps its first (best) rank */
            t->merges.slots[slot] = i + 1;
    }
    t->moff[t->n_merges] = o;
    free(joined.p);
    return MEMRA_OK;
}

typedef struct plen {
    uint32_t len;
    int32_t id;
} plen;
static int plen_cmp(const void *a, const void *b) {
    const plen *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

memra_status memra_tokenizer_new(const memra_gguf *g, memra_tokenizer **out, memra_error *err) {
    if (!out)
        return memra_fail(err, MEMRA_E_INVALID, "tokenizer: a NULL argument");
    *out = NULL;
    if (!g)
        return memra_fail(err, MEMRA_E_INVALID, "tokenizer: a NULL argument");
    const char *path = memra_gguf_path(g);
    if (!memra_gguf_find(g, "tokenizer.ggml.model"))
        return memra_fail(err, MEMRA_E_FORMAT, "%s: no tokenizer (missing key 'tokenizer.ggml.model')", path);
    memra_gguf_str model;
    memra_status st = memra_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (st != MEMRA_OK)
        return st;
    memra_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory for the tokenizer", path);
    for (int i = 0; i < MEMRA_SPECIAL_COUNT; i++)
        t->special[i] = -1;
    if (model.len == 4 && memcmp(model.ptr, "gpt2", 4) == 0) {
        t->kind = KIND_GPT2;
        t->add_space_prefix = false;
        t->add_bos = false;
    } else if (model.len == 5 && memcmp(model.ptr, "llama", 5) == 0) {
        t->kind = KIND_LLAMA;
        t->add_space_prefix = true;
        t->add_bos = true;
        t->pre = PRE_NONE;
        t->pre_name = "sentencepiece";
    } else {
        memra_tokenizer_free(t);
        return memra_fail(
            err, MEMRA_E_UNSUPPORTED,
            "%s: tokenizer kind '%.*s' (tokenizer.ggml.model) is not supported (memra has gpt2 and llama)", path,
            (int)(model.len > 64 ? 64 : model.len), model.ptr);
    }
    if (t->kind == KIND_GPT2) {
        const memra_gguf_value *pv = memra_gguf_find(g, "tokenizer.ggml.pre");
        if (!pv) {
            t->pre = PRE_GPT2;
            t->pre_name = "gpt-2";
        } else {
            if (pv->type != MEMRA_GGUF_STRING) {
                memra_tokenizer_free(t);
                return memra_fail(err, MEMRA_E_FORMAT, "%s: key 'tokenizer.ggml.pre' has type %s, expected string",
                                  path, memra_gguf_type_name(pv->type));
            }
            static const struct {
                const char *name;
                int pre;
                bool ignore_merges;
            } pres[] = {{"gpt-2", PRE_GPT2, false},      {"gpt2", PRE_GPT2, false},
                        {"smollm", PRE_SMOLLM, false},   {"starcoder", PRE_SMOLLM, false},
                        {"llama-bpe", PRE_LLAMA3, true}, {"llama3", PRE_LLAMA3, true},
                        {"qwen2", PRE_QWEN2, false}};
            memra_gguf_str p = pv->v.str;
            for (size_t i = 0; i < sizeof pres / sizeof pres[0]; i++)
                if (strlen(pres[i].name) == p.len && memcmp(pres[i].name, p.ptr, p.len) == 0) {
                    t->pre = pres[i].pre;
                    t->pre_name = pres[i].name;
                    t->ignore_merges = pres[i].ignore_merges;
                }
            if (!t->pre_name) {
                memra_tokenizer_free(t);
                return memra_fail(err, MEMRA_E_UNSUPPORTED,
                                  "%s: pre-tokenizer '%.*s' (tokenizer.ggml.pre) is not supported (memra has gpt-2, "
                                  "smollm, starcoder, llama-bpe, llama3, qwen2)",
                                  path, (int)(p.len > 64 ? 64 : p.len), p.ptr);
            }
        }
    }
    st = build_vocab(t, g, err);
    if (st == MEMRA_OK && t->kind == KIND_GPT2)
        st = build_merges(t, g, err);
    if (st == MEMRA_OK)
        st = get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err);
    if (st == MEMRA_OK)
        st = get_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err);
    static const char *const keys[MEMRA_SPECIAL_COUNT] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};
    for (int i = 0; st == MEMRA_OK && i < MEMRA_SPECIAL_COUNT; i++) {
        if (!memra_gguf_find(g, keys[i]))
            continue;
        uint32_t id;
        st = memra_gguf_get_u32(g, keys[i], &id, err);
        if (st == MEMRA_OK && id >= t->n)
            st = memra_fail(err, MEMRA_E_FORMAT, "%s: %s is %u, outside the vocabulary of %u tokens", path, keys[i], id,
                            t->n);
        if (st == MEMRA_OK)
            t->special[i] = (int32_t)id;
    }
    if (st != MEMRA_OK) {
        memra_tokenizer_free(t);
        return st;
    }
    /* The end-of-generation set: eos, eot, eom, and the tokens of eog_texts the vocabulary has. */
    eog_add(t, t->special[MEMRA_SPECIAL_EOS]);
    eog_add(t, t->special[MEMRA_SPECIAL_EOT]);
    if (memra_gguf_find(g, "tokenizer.ggml.eom_token_id")) {
        uint32_t id;
        st = memra_gguf_get_u32(g, "tokenizer.ggml.eom_token_id", &id, err);
        if (st == MEMRA_OK && id >= t->n)
            st = memra_fail(err, MEMRA_E_FORMAT,
                            "%s: tokenizer.ggml.eom_token_id is %u, outside the vocabulary of %u tokens", path, id,
                            t->n);
        if (st != MEMRA_OK) {
            memra_tokenizer_free(t);
            return st;
        }
        eog_add(t, (int32_t)id);
    }
    for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++) {
        int32_t id = vocab_find(t, eog_texts[i], strlen(eog_texts[i]));
        if (id < 0)
            continue;
        eog_add(t, id);
        if (t->types[id] == MEMRA_TOKEN_NORMAL || t->types[id] == MEMRA_TOKEN_USER_DEFINED)
            t->types[id] = MEMRA_TOKEN_CONTROL;
    }
    /* the tokens matched in text before the rest is tokenized */
    plen *pl = malloc((size_t)t->n * sizeof *pl);
    t->partition = malloc((size_t)t->n * sizeof(int32_t));
    if (!pl || !t->partition) {
        free(pl);
        memra_tokenizer_free(t);
        return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory for the special tokens", path);
    }
    for (uint32_t i = 0; i < t->n; i++) {
        uint8_t ty = t->types[i];
        size_t l;
        (void)tok_text(t, (int32_t)i, &l);
        if ((ty == MEMRA_TOKEN_CONTROL || ty == MEMRA_TOKEN_USER_DEFINED || ty == MEMRA_TOKEN_UNKNOWN) && l > 0)
            pl[t->n_partition++] = (plen){(uint32_t)l, (int32_t)i};
    }
    qsort(pl, t->n_partition, sizeof *pl, plen_cmp);
    for (uint32_t i = 0; i < t->n_partition; i++)
        t->partition[i] = pl[i].id;
    free(pl);
    /* byte tables */
    for (int b = 0; b < 256; b++) {
        char name[7];
        static const char hex[] = "0123456789ABCDEF";
        memcpy(name, "<0x", 3);
        name[3] = hex[b >> 4];
        name[4] = hex[b & 15];
        name[5] = '>';
        t->byte_tok[b] = vocab_find(t, name, 6);
    }
    uint32_t next = 256;
    for (int i = 0; i < 512; i++)
        t->u2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        t->b2u[b] = self ? (uint32_t)b : next++;
        t->u2b[t->b2u[b]] = (int16_t)b;
    }
    *out = t;
    return MEMRA_OK;
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
