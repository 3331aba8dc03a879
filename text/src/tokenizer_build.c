/* tokenizer_build.c: building a tokenizer from a GGUF file's tokenizer.* metadata (vocabulary,
 * scores, types, merges, special tokens, the end-of-generation set) and its accessors. */
#include <stdlib.h>
#include <string.h>

#include "memra/utf8.h"
#include "tokenizer_internal.h"

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
