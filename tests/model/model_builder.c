/* model_builder.c: see model_builder.h. */
#include "model_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mb_change mb_none(void) {
    mb_change c;
    memset(&c, 0, sizeof c);
    c.tensor_type = -1;
    c.bos = -1;
    return c;
}

static bool key_skipped(const mb_change *c, const char *key) { return c->skip_key && strcmp(c->skip_key, key) == 0; }

static memra_status set_u32(memra_gguf_writer *w, const mb_change *c, const char *key, uint32_t v, memra_error *err) {
    return key_skipped(c, key) ? MEMRA_OK : memra_gguf_writer_set_u32(w, key, v, err);
}

static memra_status add(memra_gguf_writer *w, const mb_change *c, const char *name, uint32_t type, uint64_t cols,
                        uint64_t rows, memra_error *err) {
    if (c->skip_tensor && strcmp(c->skip_tensor, name) == 0)
        return MEMRA_OK;
    uint64_t ne[2] = {cols, rows};
    uint32_t n_dims = rows == 0 ? 1 : 2;
    if (rows == 0)
        ne[1] = 1;
    if (c->tensor && strcmp(c->tensor, name) == 0) {
        if (c->tensor_ne[0])
            ne[0] = c->tensor_ne[0];
        if (c->tensor_ne[1])
            ne[1] = c->tensor_ne[1];
        if (c->tensor_n_dims)
            n_dims = c->tensor_n_dims;
        if (c->tensor_type >= 0)
            type = (uint32_t)c->tensor_type;
    }
    uint64_t row_bytes;
    memra_status st = memra_tensor_row_bytes(type, ne[0], &row_bytes, err);
    if (st != MEMRA_OK)
        return st;
    uint64_t n = row_bytes * (n_dims == 2 ? ne[1] : 1);
    float *data = calloc(1, n ? n : 1);
    if (!data)
        return memra_fail(err, MEMRA_E_NOMEM, "builder: out of memory");
    if (strcmp(name, "rope_freqs.weight") == 0)
        for (uint64_t i = 0; i < ne[0]; i++)
            data[i] = (float)(i + 1);
    else if (type == MEMRA_TYPE_F32 && rows == 0)
        for (uint64_t i = 0; i < ne[0]; i++)
            data[i] = 1.0f;
    st = memra_gguf_writer_add_tensor(w, name, type, n_dims, ne, data, err);
    free(data);
    return st;
}

static memra_status build_meta(memra_gguf_writer *w, const mb_change *c, const char *arch, uint32_t head_dim,
                               memra_error *err) {
    char key[128];
    memra_status st = MEMRA_OK;
#define K(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    if (!key_skipped(c, "general.architecture"))
        st = memra_gguf_writer_set_str(w, "general.architecture", arch, err);
    if (st == MEMRA_OK)
        st = memra_gguf_writer_set_str(w, "general.name", c->name ? c->name : "builder model", err);
    if (st == MEMRA_OK && !c->no_vocab_size)
        st = set_u32(w, c, K("vocab_size"), MB_VOCAB, err);
    if (st == MEMRA_OK)
        st = set_u32(w, c, K("context_length"), 512, err);
    if (st == MEMRA_OK)
        st = set_u32(w, c, K("embedding_length"), MB_EMBD, err);
    if (st == MEMRA_OK)
        st = set_u32(w, c, K("block_count"), c->block_count ? c->block_count : MB_LAYERS, err);
    if (st == MEMRA_OK)
        st = set_u32(w, c, K("feed_forward_length"), MB_FF, err);
    if (st == MEMRA_OK)
        st = set_u32(w, c, K("attention.head_count"), MB_HEADS, err);
    if (st == MEMRA_OK)
        st = set_u32(w, c, K("attention.head_count_kv"), c->head_count_kv ? c->head_count_kv : MB_HEADS_KV, err);
    if (st == MEMRA_OK && c->key_length)
        st = set_u32(w, c, K("attention.key_length"), head_dim, err);
    if (st == MEMRA_OK && !key_skipped(c, K("rope.freq_base")))
        st = memra_gguf_writer_set_f32(w, K("rope.freq_base"), 10000.0f, err);
    if (st == MEMRA_OK && !key_skipped(c, K("attention.layer_norm_rms_epsilon")))
        st = memra_gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-5f, err);
    if (st == MEMRA_OK && c->rope_scaling)
        st = memra_gguf_writer_set_str(w, K("rope.scaling.type"), c->rope_scaling, err);
    if (st == MEMRA_OK && c->rope_factor > 0)
        st = memra_gguf_writer_set_f32(w, K("rope.scaling.factor"), c->rope_factor, err);
    if (st == MEMRA_OK && strcmp(arch, "gemma3") == 0)
        st = set_u32(w, c, K("attention.sliding_window"), 128, err);
    if (st == MEMRA_OK && c->attention_scale > 0)
        st = memra_gguf_writer_set_f32(w, K("attention.scale"), c->attention_scale, err);
#undef K
    if (st == MEMRA_OK && !c->no_tokens) {
        const char *toks[MB_VOCAB + 8];
        char text[MB_VOCAB + 8][16];
        for (uint32_t i = 0; i < MB_VOCAB + 8; i++) {
            snprintf(text[i], sizeof text[i], "t%u", i);
            toks[i] = text[i];
        }
        /* With no vocab_size the token list gives n_vocab: make it MB_VOCAB then. */
        st = memra_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", toks, MB_VOCAB, err);
    }
    if (st == MEMRA_OK)
        st = set_u32(w, c, "tokenizer.ggml.bos_token_id", c->bos >= 0 ? (uint32_t)c->bos : 1, err);
    if (st == MEMRA_OK)
        st = set_u32(w, c, "tokenizer.ggml.eos_token_id", 2, err);
    return st;
}

bool mb_build(const mb_change *c, void **data, size_t *size, memra_error *err) {
    const char *arch = c->arch ? c->arch : "llama";
    bool qwen2 = strcmp(arch, "qwen2") == 0, qwen3 = strcmp(arch, "qwen3") == 0, gemma3 = strcmp(arch, "gemma3") == 0;
    uint32_t head_dim = c->key_length ? c->key_length : MB_HEAD_DIM;
    uint32_t n_kv = c->head_count_kv ? c->head_count_kv : MB_HEADS_KV;
    uint64_t q = (uint64_t)MB_HEADS * head_dim, kv = (uint64_t)n_kv * head_dim;
    memra_gguf_writer *w;
    if (memra_gguf_writer_new(3, 0, &w, err) != MEMRA_OK)
        return false;
    memra_status st = build_meta(w, c, arch, head_dim, err);
    if (st == MEMRA_OK)
        st = add(w, c, "token_embd.weight", MEMRA_TYPE_F32, MB_EMBD, MB_VOCAB, err);
    if (st == MEMRA_OK && c->rope_freqs)
        st = add(w, c, "rope_freqs.weight", MEMRA_TYPE_F32, head_dim / 2, 0, err);
    for (uint32_t l = 0; l < MB_LAYERS && st == MEMRA_OK; l++) {
        char n[64];
#define T(part, type, cols, rows)                                                                                      \
    (snprintf(n, sizeof n, "blk.%u.%s", l, part), st == MEMRA_OK ? (st = add(w, c, n, type, cols, rows, err)) : st)
        T("attn_norm.weight", MEMRA_TYPE_F32, MB_EMBD, 0);
        T("attn_q.weight", MEMRA_TYPE_F16, MB_EMBD, q);
        T("attn_k.weight", MEMRA_TYPE_F16, MB_EMBD, kv);
        T("attn_v.weight", MEMRA_TYPE_F16, MB_EMBD, kv);
        if (qwen2) {
            T("attn_q.bias", MEMRA_TYPE_F32, q, 0);
            T("attn_k.bias", MEMRA_TYPE_F32, kv, 0);
            T("attn_v.bias", MEMRA_TYPE_F32, kv, 0);
        }
        if (qwen3 || gemma3) {
            T("attn_q_norm.weight", MEMRA_TYPE_F32, head_dim, 0);
            T("attn_k_norm.weight", MEMRA_TYPE_F32, head_dim, 0);
        }
        T("attn_output.weight", MEMRA_TYPE_Q8_0, q, MB_EMBD);
        if (gemma3)
            T("post_attention_norm.weight", MEMRA_TYPE_F32, MB_EMBD, 0);
        T("ffn_norm.weight", MEMRA_TYPE_F32, MB_EMBD, 0);
        T("ffn_gate.weight", MEMRA_TYPE_BF16, MB_EMBD, MB_FF);
        T("ffn_up.weight", MEMRA_TYPE_BF16, MB_EMBD, MB_FF);
        T("ffn_down.weight", MEMRA_TYPE_BF16, MB_FF, MB_EMBD);
        if (gemma3)
            T("post_ffw_norm.weight", MEMRA_TYPE_F32, MB_EMBD, 0);
#undef T
    }
    if (st == MEMRA_OK)
        st = add(w, c, "output_norm.weight", MEMRA_TYPE_F32, MB_EMBD, 0, err);
    if (st == MEMRA_OK && !c->tied)
        st = add(w, c, "output.weight", MEMRA_TYPE_F32, MB_EMBD, MB_VOCAB, err);
    if (st == MEMRA_OK && c->extra_tensor)
        st = add(w, c, c->extra_tensor, MEMRA_TYPE_F32, MB_EMBD, 0, err);
    if (st == MEMRA_OK)
        st = memra_gguf_writer_write_memory(w, data, size, err);
    memra_gguf_writer_free(w);
    return st == MEMRA_OK;
}

memra_status mb_describe(const mb_change *c, void **data, memra_gguf **g, memra_model **m, memra_error *err) {
    size_t size;
    *data = NULL;
    *g = NULL;
    *m = NULL;
    if (!mb_build(c, data, &size, err))
        return MEMRA_E_INTERNAL; /* the builder failed: err says why */
    memra_status st = memra_gguf_open_memory(*data, size, "model.gguf", g, err);
    if (st != MEMRA_OK)
        return MEMRA_E_INTERNAL;
    return memra_model_describe(*g, m, err);
}

void mb_close(void *data, memra_gguf *g, memra_model *m) {
    memra_model_free(m);
    memra_gguf_close(g);
    free(data);
}
