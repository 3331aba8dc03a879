/* tokenizer.c: tokenizers built from GGUF metadata (memra/tokenizer.h): the look-up tables, the
 * special-token partition, the merge engine of byte-level BPE (by rank) and SentencePiece (by
 * score) and encoding. Building one from the file is tokenizer_build.c, the pre-tokenizers
 * tokenizer_pretok.c, decoding tokenizer_decode.c. */
#include "memra/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "memra/utf8.h"
#include "tokenizer_internal.h"

/* ---- small helpers ---------------------------------------------------------------------- */

bool buf_reserve(buf *b, size_t more) {
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
bool buf_add(buf *b, const void *s, size_t len) {
    if (!buf_reserve(b, len))
        return false;
    if (len)
        memcpy(b->p + b->n, s, len);
    b->n += len;
    return true;
}

bool ivec_push(ivec *v, int32_t x) {
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

bool table_init(str_table *t, uint32_t n) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2)
        cap *= 2;
    t->slots = calloc((size_t)cap, sizeof(uint32_t));
    t->mask = cap - 1;
    return t->slots != NULL;
}

/* The slot of (s, len) among entries whose text is text + off[i] .. off[i + 1]. */
uint64_t table_slot(const str_table *t, const char *text, const uint64_t *off, const char *s, size_t len) {
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

int32_t vocab_find(const memra_tokenizer *t, const char *s, size_t len) {
    uint32_t v = t->vocab.slots[table_slot(&t->vocab, t->text, t->off, s, len)];
    return v ? (int32_t)(v - 1) : -1;
}
int64_t merge_find(const memra_tokenizer *t, const char *s, size_t len) {
    uint32_t v = t->merges.slots[table_slot(&t->merges, t->mtext, t->moff, s, len)];
    return v ? (int64_t)(v - 1) : -1;
}

const char *tok_text(const memra_tokenizer *t, int32_t id, size_t *len) {
    *len = (size_t)(t->off[id + 1] - t->off[id]);
    return t->text + t->off[id];
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
