/* model.c: the model description of a llama-family GGUF file (llama, qwen2, qwen3, gemma3).
 *
 * Reads the `<arch>.*` hyperparameters as llama.cpp names them, binds every tensor by name and
 * checks its shape, so that a backend can trust every memra_weight it is handed. A file with a
 * tensor memra would not use is refused: ignoring it would compute another model than the one
 * in the file. Tensor types are only checked to be known here; whether memra computes with a
 * type is asked where the weight is used (memra_weight_check_type), so inspect can still
 * describe a Q4_K file. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/model.h"

/* What describe carries from one check to the next. */
typedef struct describe_ctx {
    const memra_gguf *g;
    const char *path;
    memra_error *err;
    memra_model *m;
    char key[160]; /* scratch for "<arch>.<suffix>" */
} describe_ctx;

/* Prefixes err with the file's path, unless the message already starts with it. */
static memra_status with_path(describe_ctx *c, memra_status st) {
    if (st != MEMRA_OK && c->err && strncmp(c->err->msg, c->path, strlen(c->path)) != 0)
        memra_error_prefix(c->err, "%s", c->path);
    return st;
}

static const char *arch_key(describe_ctx *c, const char *suffix) {
    snprintf(c->key, sizeof c->key, "%s.%s", c->m->arch_name, suffix);
    return c->key;
}

/* A required positive integer key that fits in uint32. */
static memra_status get_count(describe_ctx *c, const char *suffix, uint32_t *out) {
    const char *key = arch_key(c, suffix);
    memra_status st = memra_gguf_get_u32(c->g, key, out, c->err);
    if (st != MEMRA_OK)
        return with_path(c, st);
    if (*out == 0)
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: key '%s' is 0, expected a positive count", c->path, key);
    return MEMRA_OK;
}

/* An optional positive integer key: *present says whether it was there. */
static memra_status get_count_opt(describe_ctx *c, const char *suffix, uint32_t *out, bool *present) {
    *present = memra_gguf_find(c->g, arch_key(c, suffix)) != NULL;
    return *present ? get_count(c, suffix, out) : MEMRA_OK;
}

/* A float key; absent gives dflt. Must be finite and positive. */
static memra_status get_positive_f32(describe_ctx *c, const char *suffix, bool required, float dflt, float *out) {
    const char *key = arch_key(c, suffix);
    if (!required && !memra_gguf_find(c->g, key)) {
        *out = dflt;
        return MEMRA_OK;
    }
    memra_status st = memra_gguf_get_f32(c->g, key, out, c->err);
    if (st != MEMRA_OK)
        return with_path(c, st);
    if (!isfinite(*out) || *out <= 0.0f)
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: key '%s' is %g, expected a finite positive number", c->path, key,
                          (double)*out);
    return MEMRA_OK;
}

static bool str_is(memra_gguf_str s, const char *word) {
    size_t n = strlen(word);
    return s.len == n && memcmp(s.ptr, word, n) == 0;
}

/* Prints a GGUF string into buf for a message, cut and with unprintable bytes replaced. */
static const char *str_for_msg(memra_gguf_str s, char *buf, size_t size) {
    size_t n = s.len < size - 1 ? (size_t)s.len : size - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        buf[i] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    buf[n] = '\0';
    return buf;
}

static memra_status read_arch(describe_ctx *c) {
    memra_gguf_str arch;
    memra_status st = memra_gguf_get_str(c->g, "general.architecture", &arch, c->err);
    if (st != MEMRA_OK)
        return with_path(c, st);
    static const struct {
        const char *name;
        memra_arch arch;
        memra_rope_pairing pairing;
    } known[] = {
        {"llama", MEMRA_ARCH_LLAMA, MEMRA_ROPE_NORMAL},
        {"qwen2", MEMRA_ARCH_QWEN2, MEMRA_ROPE_NEOX},
        {"qwen3", MEMRA_ARCH_QWEN3, MEMRA_ROPE_NEOX},
        {"gemma3", MEMRA_ARCH_GEMMA3, MEMRA_ROPE_NEOX}, /* llama.cpp: LLAMA_ROPE_TYPE_NEOX */
        {"qwen2moe", MEMRA_ARCH_QWEN2MOE, MEMRA_ROPE_NEOX},
        {"qwen3moe", MEMRA_ARCH_QWEN3MOE, MEMRA_ROPE_NEOX},
        {"granitemoe", MEMRA_ARCH_GRANITEMOE, MEMRA_ROPE_NORMAL}, /* llama.cpp: LLAMA_ROPE_TYPE_NORM */
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (str_is(arch, known[i].name)) {
            c->m->arch = known[i].arch;
            c->m->arch_name = known[i].name;
            c->m->rope_pairing = known[i].pairing;
            return MEMRA_OK;
        }
    }
    char buf[64];
    return memra_fail(c->err, MEMRA_E_UNSUPPORTED,
                      "%s: architecture '%s' (general.architecture) is not supported: memra runs llama (with or "
                      "without experts), qwen2, qwen3, gemma3, qwen2moe, qwen3moe and granitemoe",
                      c->path, str_for_msg(arch, buf, sizeof buf));
}

static memra_status read_name(describe_ctx *c) {
    const memra_gguf_value *v = memra_gguf_find(c->g, "general.name");
    size_t n = 0;
    if (v && v->type == MEMRA_GGUF_STRING)
        n = v->v.str.len < 255 ? (size_t)v->v.str.len : 255; /* a name is for display: cut it */
    char *name = malloc(n + 1);
    if (!name)
        return memra_fail(c->err, MEMRA_E_NOMEM, "%s: out of memory for the model name", c->path);
    /* untrusted text that tools print: a control byte (an escape sequence, a NUL) reads '?' */
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)v->v.str.ptr[i];
        name[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
    }
    name[n] = '\0';
    c->m->name = name;
    return MEMRA_OK;
}

/* rope.scaling.type: absent or "none" or "linear" (with rope.scaling.factor, or the older
 * rope.scale_linear); anything else (yarn, longrope, ...) is refused by name. */
static memra_status read_rope_scaling(describe_ctx *c) {
    memra_model *m = c->m;
    m->rope_linear_factor = 1.0f;
    const char *type_key = arch_key(c, "rope.scaling.type");
    bool linear = true; /* llama.cpp reads an absent type as linear (factor 1 unless given) */
    if (memra_gguf_find(c->g, type_key)) {
        memra_gguf_str type;
        memra_status st = memra_gguf_get_str(c->g, type_key, &type, c->err);
        if (st != MEMRA_OK)
            return with_path(c, st);
        if (str_is(type, "none")) {
            linear = false;
        } else if (!str_is(type, "linear")) {
            char buf[64];
            return memra_fail(c->err, MEMRA_E_UNSUPPORTED,
                              "%s: rope scaling type '%s' (%s) is not supported: memra knows 'none' and 'linear'",
                              c->path, str_for_msg(type, buf, sizeof buf), type_key);
        }
    }
    if (!linear)
        return MEMRA_OK;
    static const char *const factor_keys[] = {"rope.scaling.factor", "rope.scale_linear"};
    for (size_t i = 0; i < 2; i++) {
        const char *key = arch_key(c, factor_keys[i]);
        if (!memra_gguf_find(c->g, key))
            continue;
        float f;
        memra_status st = memra_gguf_get_f32(c->g, key, &f, c->err);
        if (st != MEMRA_OK)
            return with_path(c, st);
        if (!isfinite(f) || f < 0.0f)
            return memra_fail(c->err, MEMRA_E_FORMAT, "%s: key '%s' is %g, expected a finite factor >= 0", c->path, key,
                              (double)f);
        if (f != 0.0f) /* 0 means "not set", as in llama.cpp */
            m->rope_linear_factor = f;
        return MEMRA_OK;
    }
    return MEMRA_OK;
}

/* gemma3, as llama.cpp's llm_load_hparams and build_gemma3 read it: the embedding is scaled by
 * sqrtf(n_embd); 5 of every 6 layers (set_swa_pattern(6): il % 6 < 5) attend through a sliding
 * window of attention.sliding_window positions with RoPE base 10000 (rope_freq_base_train_swa;
 * rope.freq_base_swa when the file gives it), the others use rope.freq_base; the query is
 * scaled by 1/sqrt(head_dim) (attention.scale when given; llama.cpp's 27B, 62 layers, uses
 * 1/sqrt(n_embd/n_head), its query_pre_attn_scalar). Norm weights are stored with Gemma's +1
 * already folded in by the converter (convert_hf_to_gguf.py adds 1 to every *norm.weight), so
 * they are plain RMSNorm weights here. */
static memra_status read_gemma3(describe_ctx *c) {
    memra_model *m = c->m;
    memra_status st;
    if ((st = get_count(c, "attention.sliding_window", &m->sliding_window)) != MEMRA_OK ||
        (st = get_positive_f32(c, "rope.freq_base_swa", false, 10000.0f, &m->rope_freq_base_swa)) != MEMRA_OK)
        return st;
    m->swa_period = 6;
    m->embd_scale = sqrtf((float)m->n_embd);
    m->ffn_act = MEMRA_FFN_GELU_TANH;
    if (m->n_layer == 62) /* Gemma 3 27B: query_pre_attn_scalar = n_embd / n_head */
        m->attn_scale = 1.0f / sqrtf((float)(m->n_embd / m->n_head));
    float scale;
    if ((st = get_positive_f32(c, "attention.scale", false, m->attn_scale, &scale)) != MEMRA_OK)
        return st;
    m->attn_scale = scale;
    return MEMRA_OK;
}

static bool arch_is_moe(memra_arch a) {
    return a == MEMRA_ARCH_QWEN2MOE || a == MEMRA_ARCH_QWEN3MOE || a == MEMRA_ARCH_GRANITEMOE;
}

/* A boolean key: absent gives dflt. */
static memra_status get_bool_opt(describe_ctx *c, const char *suffix, bool dflt, bool *out) {
    const char *key = arch_key(c, suffix);
    const memra_gguf_value *v = memra_gguf_find(c->g, key);
    *out = dflt;
    if (!v)
        return MEMRA_OK;
    if (v->type != MEMRA_GGUF_BOOL)
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: key '%s' has type %s, expected bool", c->path, key,
                          memra_gguf_type_name(v->type));
    *out = v->v.u64 != 0;
    return MEMRA_OK;
}

/* The experts, as llama.cpp's llm_load_hparams reads them: expert_count and expert_used_count
 * (required by the MoE architectures, and making a llama file Mixtral), the expert width
 * expert_feed_forward_length (else feed_forward_length; qwen2moe and qwen3moe: else
 * feed_forward_length / expert_used_count, as llama.cpp), qwen2moe's shared width
 * expert_shared_feed_forward_length (else feed_forward_length), expert_gating_func (softmax
 * only), expert_weights_norm (else llama.cpp's choice per architecture: qwen2moe does not
 * renormalise, qwen3moe, granitemoe and Mixtral do: norm_w is true in the build_moe_ffn calls of
 * llama.cpp's src/models/qwen3moe.cpp and src/models/llama.cpp, with softmax gating, read
 * 2026-12-01), expert_weights_scale (0 or 1 only). */
static memra_status read_experts(describe_ctx *c) {
    memra_model *m = c->m;
    memra_status st;
    bool present;
    if ((st = get_count_opt(c, "expert_count", &m->n_expert, &present)) != MEMRA_OK)
        return st;
    if (!present) {
        m->n_expert = 0;
        if (arch_is_moe(m->arch))
            return memra_fail(c->err, MEMRA_E_FORMAT, "%s: missing key '%s.expert_count' (a %s file has experts)",
                              c->path, m->arch_name, m->arch_name);
        return MEMRA_OK;
    }
    if (m->arch != MEMRA_ARCH_LLAMA && !arch_is_moe(m->arch))
        return memra_fail(c->err, MEMRA_E_UNSUPPORTED,
                          "%s: key '%s.expert_count' is set, but memra runs experts only in llama (Mixtral), "
                          "qwen2moe, qwen3moe and granitemoe files",
                          c->path, m->arch_name);
    if ((st = get_count(c, "expert_used_count", &m->n_expert_used)) != MEMRA_OK)
        return st;
    if (m->n_expert > MEMRA_MAX_EXPERTS || m->n_expert_used > MEMRA_MAX_EXPERTS_USED || m->n_expert_used > m->n_expert)
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: %s.expert_count %" PRIu32 " and expert_used_count %" PRIu32
                          ": expected 1 to %u experts, of which 1 to %u (and at most expert_count) are used",
                          c->path, m->arch_name, m->n_expert, m->n_expert_used, MEMRA_MAX_EXPERTS,
                          MEMRA_MAX_EXPERTS_USED);
    uint32_t n_ff_dense = m->n_ff, v;
    if ((st = get_count_opt(c, "expert_feed_forward_length", &v, &present)) != MEMRA_OK)
        return st;
    if (present)
        m->n_ff = v;
    else if (m->arch == MEMRA_ARCH_QWEN2MOE || m->arch == MEMRA_ARCH_QWEN3MOE)
        m->n_ff = n_ff_dense / m->n_expert_used;
    if (m->n_ff == 0)
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: the expert width %s.feed_forward_length / expert_used_count is 0", c->path,
                          m->arch_name);
    if (m->arch == MEMRA_ARCH_QWEN2MOE) {
        if ((st = get_count_opt(c, "expert_shared_feed_forward_length", &m->n_ff_shexp, &present)) != MEMRA_OK)
            return st;
        if (!present)
            m->n_ff_shexp = n_ff_dense;
    }
    uint32_t gating = 1;
    if ((st = get_count_opt(c, "expert_gating_func", &gating, &present)) != MEMRA_OK)
        return st;
    if (gating != 1)
        return memra_fail(c->err, MEMRA_E_UNSUPPORTED,
                          "%s: %s.expert_gating_func is %" PRIu32 ": memra routes experts by softmax (1) only", c->path,
                          m->arch_name, gating);
    uint32_t shared = 0;
    if ((st = get_count_opt(c, "expert_shared_count", &shared, &present)) != MEMRA_OK)
        return st;
    if (present && m->arch != MEMRA_ARCH_QWEN2MOE)
        return memra_fail(c->err, MEMRA_E_UNSUPPORTED,
                          "%s: %s.expert_shared_count is %" PRIu32 ": memra runs shared experts in qwen2moe files only",
                          c->path, m->arch_name, shared);
    /* llama.cpp multiplies the chosen weights by expert_weights_scale unless it is 0 or 1 (its
     * qwen3moe, llama and granite graphs pass it on; these files leave it out): refused, not
     * ignored. */
    const char *wskey = arch_key(c, "expert_weights_scale");
    if (memra_gguf_find(c->g, wskey)) {
        float ws = 0.0f;
        if ((st = memra_gguf_get_f32(c->g, wskey, &ws, c->err)) != MEMRA_OK)
            return with_path(c, st);
        if (ws != 0.0f && ws != 1.0f)
            return memra_fail(c->err, MEMRA_E_UNSUPPORTED,
                              "%s: key '%s' is %g: memra does not scale the chosen experts' weights (only 0 or 1, "
                              "no scaling)",
                              c->path, wskey, (double)ws);
    }
    return get_bool_opt(c, "expert_weights_norm", m->arch != MEMRA_ARCH_QWEN2MOE, &m->expert_weights_norm);
}

static memra_status read_hparams(describe_ctx *c) {
    memra_model *m = c->m;
    memra_status st;
    if ((st = get_count(c, "context_length", &m->n_ctx_train)) != MEMRA_OK ||
        (st = get_count(c, "embedding_length", &m->n_embd)) != MEMRA_OK ||
        (st = get_count(c, "block_count", &m->n_layer)) != MEMRA_OK ||
        (st = get_count(c, "feed_forward_length", &m->n_ff)) != MEMRA_OK ||
        (st = get_count(c, "attention.head_count", &m->n_head)) != MEMRA_OK)
        return st;

    bool present;
    if ((st = get_count_opt(c, "attention.head_count_kv", &m->n_head_kv, &present)) != MEMRA_OK)
        return st;
    if (!present)
        m->n_head_kv = m->n_head; /* llama.cpp's default: no grouping */
    if (m->n_head_kv > m->n_head || m->n_head % m->n_head_kv != 0)
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: %s.attention.head_count %" PRIu32
                          " is not a multiple of %s.attention.head_count_kv %" PRIu32,
                          c->path, m->arch_name, m->n_head, m->arch_name, m->n_head_kv);

    if ((st = get_count_opt(c, "attention.key_length", &m->head_dim, &present)) != MEMRA_OK)
        return st;
    if (!present) {
        if (m->n_embd % m->n_head != 0)
            return memra_fail(c->err, MEMRA_E_FORMAT,
                              "%s: %s.embedding_length %" PRIu32
                              " is not a multiple of %s.attention.head_count %" PRIu32
                              " (and %s.attention.key_length is absent)",
                              c->path, m->arch_name, m->n_embd, m->arch_name, m->n_head, m->arch_name);
        m->head_dim = m->n_embd / m->n_head;
    }
    if ((st = get_count_opt(c, "attention.value_length", &m->head_dim_v, &present)) != MEMRA_OK)
        return st;
    if (!present)
        m->head_dim_v = m->head_dim;
    if (m->head_dim % 2 != 0)
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: head dimension %" PRIu32 " is odd: rope needs pairs", c->path,
                          m->head_dim);

    uint32_t n_rot;
    if ((st = get_count_opt(c, "rope.dimension_count", &n_rot, &present)) != MEMRA_OK)
        return st;
    if (present && n_rot != m->head_dim)
        return memra_fail(c->err, MEMRA_E_UNSUPPORTED,
                          "%s: %s.rope.dimension_count is %" PRIu32 ", expected %" PRIu32
                          " (head_dim): memra does not support partial rotary embeddings",
                          c->path, m->arch_name, n_rot, m->head_dim);

    if ((st = get_positive_f32(c, "rope.freq_base", false, 10000.0f, &m->rope_freq_base)) != MEMRA_OK ||
        (st = get_positive_f32(c, "attention.layer_norm_rms_epsilon", true, 0.0f, &m->rms_eps)) != MEMRA_OK)
        return st;
    m->embd_scale = 1.0f;
    m->attn_scale = 1.0f / sqrtf((float)m->head_dim);
    m->residual_scale = 1.0f;
    m->logit_scale = 1.0f;
    if ((st = read_experts(c)) != MEMRA_OK)
        return st;
    /* granitemoe: the logit scale is required, the other three optional (an absent one scales
     * nothing; the attention's is then 1/sqrt(head_dim)), as llama.cpp's granite loader reads them
     * (src/models/granite.cpp, load_arch_hparams and its graph). */
    if (m->arch == MEMRA_ARCH_GRANITEMOE &&
        ((st = get_positive_f32(c, "embedding_scale", false, 1.0f, &m->embd_scale)) != MEMRA_OK ||
         (st = get_positive_f32(c, "residual_scale", false, 1.0f, &m->residual_scale)) != MEMRA_OK ||
         (st = get_positive_f32(c, "attention.scale", false, m->attn_scale, &m->attn_scale)) != MEMRA_OK ||
         (st = get_positive_f32(c, "logit_scale", true, 0.0f, &m->logit_scale)) != MEMRA_OK))
        return st;
    m->ffn_act = MEMRA_FFN_SILU;
    m->rope_freq_base_swa = m->rope_freq_base;
    if (m->arch == MEMRA_ARCH_GEMMA3 && (st = read_gemma3(c)) != MEMRA_OK)
        return st;
    return read_rope_scaling(c);
}

/* Vocabulary size: <arch>.vocab_size, else the embedding's rows, else the token list's length. The
 * tokenizer must then agree with it (check_tokenizer, after the tensors are bound). */
static memra_status read_vocab(describe_ctx *c) {
    memra_model *m = c->m;
    bool present;
    memra_status st = get_count_opt(c, "vocab_size", &m->n_vocab, &present);
    if (st != MEMRA_OK || present)
        return st;
    const memra_gguf_tensor *t = memra_gguf_find_tensor(c->g, "token_embd.weight");
    if (t && t->n_dims == 2 && t->ne[1] > 0 && t->ne[1] <= UINT32_MAX) {
        m->n_vocab = (uint32_t)t->ne[1];
        return MEMRA_OK;
    }
    const memra_gguf_value *tokens = memra_gguf_find(c->g, "tokenizer.ggml.tokens");
    if (tokens) {
        if (tokens->type != MEMRA_GGUF_ARRAY || tokens->v.arr.count == 0 || tokens->v.arr.count > UINT32_MAX)
            return memra_fail(c->err, MEMRA_E_FORMAT,
                              "%s: key 'tokenizer.ggml.tokens' has type %s, expected a non-empty array", c->path,
                              memra_gguf_type_name(tokens->type));
        m->n_vocab = (uint32_t)tokens->v.arr.count;
        return MEMRA_OK;
    }
    if (!t)
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: missing tensor 'token_embd.weight'", c->path);
    if (t->ne[1] == 0 || t->ne[1] > UINT32_MAX)
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: tensor 'token_embd.weight' has %" PRIu64 " rows, expected 1 to %" PRIu32 " tokens",
                          c->path, t->ne[1], UINT32_MAX);
    m->n_vocab = (uint32_t)t->ne[1];
    return MEMRA_OK;
}

static memra_status read_special_id(describe_ctx *c, const char *key, int64_t *out);

/* Whether the token list holds a token of exactly this text. */
static bool tokens_have(const memra_gguf_value *tokens, const char *text) {
    size_t n = strlen(text);
    for (uint64_t i = 0; i < tokens->v.arr.count; i++) {
        const memra_gguf_value *v = &tokens->v.arr.items[i];
        if (v->type == MEMRA_GGUF_STRING && v->v.str.len == n && memcmp(v->v.str.ptr, text, n) == 0)
            return true;
    }
    return false;
}

/* The tokenizer agrees with the model, or the file is refused here, at load (never mid-decode):
 * the token list has one token per row of the embedding and the head (n_vocab, checked against
 * both when they were bound), every special id the file names lies inside it, and the markers of
 * the chat format its template uses are tokens of it. */
static memra_status check_tokenizer(describe_ctx *c) {
    const memra_model *m = c->m;
    const memra_gguf_value *tokens = memra_gguf_find(c->g, "tokenizer.ggml.tokens");
    if (tokens) {
        if (tokens->type != MEMRA_GGUF_ARRAY || tokens->v.arr.elem_type != MEMRA_GGUF_STRING)
            return memra_fail(c->err, MEMRA_E_FORMAT,
                              "%s: key 'tokenizer.ggml.tokens' has type %s, expected an array "
                              "of string",
                              c->path, memra_gguf_type_name(tokens->type));
        if (tokens->v.arr.count != m->n_vocab)
            return memra_fail(c->err, MEMRA_E_FORMAT,
                              "%s: key 'tokenizer.ggml.tokens' has %" PRIu64 " tokens, but the model's vocabulary has "
                              "%" PRIu32 " (the rows of token_embd.weight%s): the tokenizer does not match the model",
                              c->path, tokens->v.arr.count, m->n_vocab, m->tied_output ? "" : " and output.weight");
    }
    static const char *const ids[] = {"tokenizer.ggml.eot_token_id",       "tokenizer.ggml.eom_token_id",
                                      "tokenizer.ggml.unknown_token_id",   "tokenizer.ggml.padding_token_id",
                                      "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.cls_token_id",
                                      "tokenizer.ggml.mask_token_id"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int64_t id;
        memra_status st = read_special_id(c, ids[i], &id);
        if (st != MEMRA_OK)
            return st;
    }
    const memra_gguf_value *tpl = memra_gguf_find(c->g, "tokenizer.chat_template");
    if (!tokens || !tpl || tpl->type != MEMRA_GGUF_STRING)
        return MEMRA_OK;
    /* The formats memra renders (memra/chat.h), in the order it detects them, with their markers. */
    static const char *const formats[][4] = {
        {"<|im_start|>", "<|im_start|>", "<|im_end|>", NULL},
        {"<|start_header_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
        {"<start_of_turn>", "<start_of_turn>", "<end_of_turn>", NULL}};
    memra_gguf_str t = tpl->v.str;
    for (size_t f = 0; f < 3; f++) {
        size_t k = strlen(formats[f][0]);
        bool used = false;
        for (uint64_t i = 0; !used && k <= t.len && i + k <= t.len; i++)
            used = memcmp(t.ptr + i, formats[f][0], k) == 0;
        if (!used)
            continue;
        for (size_t j = 1; j < 4 && formats[f][j]; j++)
            if (!tokens_have(tokens, formats[f][j]))
                return memra_fail(c->err, MEMRA_E_FORMAT,
                                  "%s: key 'tokenizer.chat_template' writes the marker %s, which is not a token of the "
                                  "vocabulary (tokenizer.ggml.tokens, %" PRIu32 " tokens): the template does not match "
                                  "the tokenizer",
                                  c->path, formats[f][j], m->n_vocab);
        break;
    }
    return MEMRA_OK;
}

/* tokenizer.ggml.bos_token_id / eos_token_id: -1 when absent; must name a token. */
static memra_status read_special_id(describe_ctx *c, const char *key, int64_t *out) {
    *out = -1;
    if (!memra_gguf_find(c->g, key))
        return MEMRA_OK;
    uint64_t id;
    memra_status st = memra_gguf_get_u64(c->g, key, &id, c->err);
    if (st != MEMRA_OK)
        return with_path(c, st);
    if (id >= c->m->n_vocab)
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: key '%s' is %" PRIu64 ", expected a token id below %" PRIu32 " (n_vocab)", c->path, key,
                          id, c->m->n_vocab);
    *out = (int64_t)id;
    return MEMRA_OK;
}

/* ---- tensors ---- */

/* The expected extent of one dimension, and what it is in words for messages. */
typedef struct dim_expect {
    uint64_t n;
    const char *what;
} dim_expect;

static void shape_text(const memra_gguf_tensor *t, char *buf, size_t size) {
    int k = snprintf(buf, size, "[");
    for (uint32_t d = 0; d < t->n_dims && k > 0 && (size_t)k < size; d++)
        k += snprintf(buf + k, size - (size_t)k, d ? ", %" PRIu64 : "%" PRIu64, t->ne[d]);
    if (k > 0 && (size_t)k < size)
        snprintf(buf + k, size - (size_t)k, "]");
}

/* Binds tensor `name` into w. rows.n == 0 means a vector of cols.n elements (which must be F32:
 * every GGUF converter stores norms and biases as F32, and backends read them as floats).
 * An absent tensor is an error when required, else leaves w zeroed (data NULL). */
static memra_status bind3(describe_ctx *c, const char *name, dim_expect cols, dim_expect rows, uint32_t n_expert,
                          bool required, memra_weight *w);
static memra_status bind(describe_ctx *c, const char *name, dim_expect cols, dim_expect rows, bool required,
                         memra_weight *w) {
    return bind3(c, name, cols, rows, 0, required, w);
}

/* bind, or with n_expert > 0 a stack of n_expert matrices of cols x rows (GGUF shape [cols, rows,
 * n_expert]), bound as one matrix of n_expert * rows rows. */
static memra_status bind3(describe_ctx *c, const char *name, dim_expect cols, dim_expect rows, uint32_t n_expert,
                          bool required, memra_weight *w) {
    memset(w, 0, sizeof *w);
    const memra_gguf_tensor *t = memra_gguf_find_tensor(c->g, name);
    bool vector = rows.n == 0;
    if (!t) {
        if (!required)
            return MEMRA_OK;
        if (vector)
            return memra_fail(c->err, MEMRA_E_FORMAT, "%s: missing tensor '%s' (expected %" PRIu64 " elements: %s)",
                              c->path, name, cols.n, cols.what);
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: missing tensor '%s' (expected %" PRIu64 " columns (%s) by %" PRIu64 " rows (%s))",
                          c->path, name, cols.n, cols.what, rows.n, rows.what);
    }
    uint64_t block_elems, block_bytes;
    if (!memra_tensor_type_block(t->type, &block_elems, &block_bytes))
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: tensor '%s' has unknown type %" PRIu32, c->path, name, t->type);
    char shape[96];
    shape_text(t, shape, sizeof shape);
    if (n_expert > 0 && (t->n_dims != 3 || t->ne[2] != n_expert || t->ne[3] != 1))
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: tensor '%s' has shape %s, expected [%" PRIu64 ", %" PRIu64 ", %" PRIu32
                          "]: %s by %s for each of the %" PRIu32 " experts (expert_count)",
                          c->path, name, shape, cols.n, rows.n, n_expert, cols.what, rows.what, n_expert);
    if (n_expert == 0 &&
        (t->n_dims < 1 || t->n_dims > 2 || t->ne[2] != 1 || t->ne[3] != 1 || (vector && t->ne[1] != 1)))
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: tensor '%s' has shape %s, expected %s", c->path, name, shape,
                          vector ? "a vector" : "a matrix [columns, rows]");
    if (t->ne[0] != cols.n)
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: tensor '%s' has %" PRIu64 " %s, expected %" PRIu64 " (%s)",
                          c->path, name, t->ne[0], vector ? "elements" : "columns", cols.n, cols.what);
    if (!vector && t->ne[1] != rows.n)
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: tensor '%s' has %" PRIu64 " rows, expected %" PRIu64 " (%s)",
                          c->path, name, t->ne[1], rows.n, rows.what);
    if (vector && t->type != MEMRA_TYPE_F32)
        return memra_fail(c->err, MEMRA_E_UNSUPPORTED,
                          "%s: tensor '%s' has type %s, expected F32 (memra reads norm, bias and rope vectors as F32)",
                          c->path, name, memra_tensor_type_name(t->type));
    if (vector && ((uintptr_t)t->data % sizeof(float)) != 0)
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: tensor '%s' is not aligned to 4 bytes in the file", c->path,
                          name);
    if (vector && !memra_gguf_tensor_resident(c->g, t)) /* streamed: vectors are read on the host */
        return memra_fail(c->err, MEMRA_E_UNSUPPORTED,
                          "%s: vector '%s' has %" PRIu64 " bytes, more than a streamed load keeps in memory (%" PRIu64
                          ")",
                          c->path, name, t->n_bytes, MEMRA_GGUF_STREAM_VECTOR);
    w->name = t->name;
    w->data = t->data;
    w->type = t->type;
    w->cols = t->ne[0];
    w->rows = vector ? 1 : t->ne[1] * (n_expert ? n_expert : 1); /* <= 2^32 * 1024: no overflow */
    w->n_bytes = t->n_bytes;
    c->m->weight_bytes += t->n_bytes;
    return MEMRA_OK;
}

/* The parts of a layer, blk.N.<part>.{weight,bias}, and where they bind. */
typedef enum part_shape {
    SHAPE_NORM,
    SHAPE_Q,
    SHAPE_K,
    SHAPE_V,
    SHAPE_O,
    SHAPE_UP,
    SHAPE_DOWN,
    SHAPE_HEADNORM,
    SHAPE_ROUTER,   /* ffn_gate_inp: n_expert rows of n_embd */
    SHAPE_EXP_UP,   /* ffn_{gate,up}_exps: [n_embd, n_ff, n_expert] */
    SHAPE_EXP_DOWN, /* ffn_down_exps: [n_ff, n_embd, n_expert] */
    SHAPE_SH_UP,    /* ffn_{gate,up}_shexp: n_ff_shexp rows of n_embd */
    SHAPE_SH_DOWN   /* ffn_down_shexp: n_embd rows of n_ff_shexp */
} part_shape;

/* Which FFNs a part belongs to: every layer, dense layers only, or mixture-of-experts layers. */
typedef enum part_ffn { FFN_ANY = 0, FFN_DENSE = 1, FFN_MOE = 2 } part_ffn;

typedef struct layer_part {
    const char *name;   /* "attn_q" */
    const char *suffix; /* "weight" or "bias" */
    part_shape shape;
    bool vector;
    size_t offset;     /* of the memra_weight in memra_layer */
    uint32_t required; /* bit per arch: required there */
    uint32_t allowed;  /* bit per arch: bound when present */
    part_ffn ffn;
} layer_part;

#define ARCH_BIT(a) (1u << (a))
#define ALL_ARCHS                                                                                                      \
    (ARCH_BIT(MEMRA_ARCH_LLAMA) | ARCH_BIT(MEMRA_ARCH_QWEN2) | ARCH_BIT(MEMRA_ARCH_QWEN3) |                            \
     ARCH_BIT(MEMRA_ARCH_GEMMA3) | ARCH_BIT(MEMRA_ARCH_QWEN2MOE) | ARCH_BIT(MEMRA_ARCH_QWEN3MOE) |                     \
     ARCH_BIT(MEMRA_ARCH_GRANITEMOE))
#define QK_NORM_ARCHS (ARCH_BIT(MEMRA_ARCH_QWEN3) | ARCH_BIT(MEMRA_ARCH_GEMMA3) | ARCH_BIT(MEMRA_ARCH_QWEN3MOE))
#define QKV_BIAS_ARCHS (ARCH_BIT(MEMRA_ARCH_QWEN2) | ARCH_BIT(MEMRA_ARCH_QWEN2MOE))
#define SHEXP_ARCHS ARCH_BIT(MEMRA_ARCH_QWEN2MOE)
#define LAYER_OFF(member) offsetof(memra_layer, member)
#define MOE_OFF(member) offsetof(memra_layer_moe, member) /* the parts of ffn FFN_MOE */

static const layer_part layer_parts[] = {
    {"attn_norm", "weight", SHAPE_NORM, true, LAYER_OFF(attn_norm), ALL_ARCHS, ALL_ARCHS, FFN_ANY},
    {"attn_q", "weight", SHAPE_Q, false, LAYER_OFF(wq), ALL_ARCHS, ALL_ARCHS, FFN_ANY},
    {"attn_k", "weight", SHAPE_K, false, LAYER_OFF(wk), ALL_ARCHS, ALL_ARCHS, FFN_ANY},
    {"attn_v", "weight", SHAPE_V, false, LAYER_OFF(wv), ALL_ARCHS, ALL_ARCHS, FFN_ANY},
    /* qwen2 requires q/k/v biases; llama.cpp lets a llama file carry them too. */
    {"attn_q", "bias", SHAPE_Q, true, LAYER_OFF(bq), QKV_BIAS_ARCHS, QKV_BIAS_ARCHS | ARCH_BIT(MEMRA_ARCH_LLAMA),
     FFN_ANY},
    {"attn_k", "bias", SHAPE_K, true, LAYER_OFF(bk), QKV_BIAS_ARCHS, QKV_BIAS_ARCHS | ARCH_BIT(MEMRA_ARCH_LLAMA),
     FFN_ANY},
    {"attn_v", "bias", SHAPE_V, true, LAYER_OFF(bv), QKV_BIAS_ARCHS, QKV_BIAS_ARCHS | ARCH_BIT(MEMRA_ARCH_LLAMA),
     FFN_ANY},
    {"attn_q_norm", "weight", SHAPE_HEADNORM, true, LAYER_OFF(q_norm), QK_NORM_ARCHS, QK_NORM_ARCHS, FFN_ANY},
    {"attn_k_norm", "weight", SHAPE_HEADNORM, true, LAYER_OFF(k_norm), QK_NORM_ARCHS, QK_NORM_ARCHS, FFN_ANY},
    {"attn_output", "weight", SHAPE_O, false, LAYER_OFF(wo), ALL_ARCHS, ALL_ARCHS, FFN_ANY},
    {"post_attention_norm", "weight", SHAPE_NORM, true, LAYER_OFF(post_attn_norm), ARCH_BIT(MEMRA_ARCH_GEMMA3),
     ARCH_BIT(MEMRA_ARCH_GEMMA3), FFN_ANY},
    {"ffn_norm", "weight", SHAPE_NORM, true, LAYER_OFF(ffn_norm), ALL_ARCHS, ALL_ARCHS, FFN_ANY},
    {"ffn_gate", "weight", SHAPE_UP, false, LAYER_OFF(w_gate), ALL_ARCHS, ALL_ARCHS, FFN_DENSE},
    {"ffn_up", "weight", SHAPE_UP, false, LAYER_OFF(w_up), ALL_ARCHS, ALL_ARCHS, FFN_DENSE},
    {"ffn_down", "weight", SHAPE_DOWN, false, LAYER_OFF(w_down), ALL_ARCHS, ALL_ARCHS, FFN_DENSE},
    {"ffn_gate_inp", "weight", SHAPE_ROUTER, false, MOE_OFF(gate_inp), ALL_ARCHS, ALL_ARCHS, FFN_MOE},
    {"ffn_gate_exps", "weight", SHAPE_EXP_UP, false, MOE_OFF(gate_exps), ALL_ARCHS, ALL_ARCHS, FFN_MOE},
    {"ffn_up_exps", "weight", SHAPE_EXP_UP, false, MOE_OFF(up_exps), ALL_ARCHS, ALL_ARCHS, FFN_MOE},
    {"ffn_down_exps", "weight", SHAPE_EXP_DOWN, false, MOE_OFF(down_exps), ALL_ARCHS, ALL_ARCHS, FFN_MOE},
    {"ffn_gate_inp_shexp", "weight", SHAPE_NORM, true, MOE_OFF(gate_inp_shexp), SHEXP_ARCHS, SHEXP_ARCHS, FFN_MOE},
    {"ffn_gate_shexp", "weight", SHAPE_SH_UP, false, MOE_OFF(gate_shexp), SHEXP_ARCHS, SHEXP_ARCHS, FFN_MOE},
    {"ffn_up_shexp", "weight", SHAPE_SH_UP, false, MOE_OFF(up_shexp), SHEXP_ARCHS, SHEXP_ARCHS, FFN_MOE},
    {"ffn_down_shexp", "weight", SHAPE_SH_DOWN, false, MOE_OFF(down_shexp), SHEXP_ARCHS, SHEXP_ARCHS, FFN_MOE},
    {"post_ffw_norm", "weight", SHAPE_NORM, true, LAYER_OFF(post_ffn_norm), ARCH_BIT(MEMRA_ARCH_GEMMA3),
     ARCH_BIT(MEMRA_ARCH_GEMMA3), FFN_ANY},
};
#define N_LAYER_PARTS (sizeof layer_parts / sizeof layer_parts[0])

/* Expected [cols, rows] of a part; for a vector, cols is its length (rows.n = 0). */
static void part_dims(const memra_model *m, const layer_part *p, dim_expect *cols, dim_expect *rows, char *what,
                      size_t size) {
    uint64_t q_dim = (uint64_t)m->n_head * m->head_dim;
    uint64_t k_dim = (uint64_t)m->n_head_kv * m->head_dim;
    uint64_t v_dim = (uint64_t)m->n_head_kv * m->head_dim_v;
    dim_expect embd = {m->n_embd, "n_embd"};
    switch (p->shape) {
    case SHAPE_NORM:
        *cols = embd;
        *rows = (dim_expect){0, ""};
        break;
    case SHAPE_HEADNORM:
        *cols = (dim_expect){m->head_dim, "head_dim"};
        *rows = (dim_expect){0, ""};
        break;
    case SHAPE_Q:
        snprintf(what, size, "n_head*head_dim = %" PRIu32 "*%" PRIu32, m->n_head, m->head_dim);
        *cols = embd;
        *rows = (dim_expect){q_dim, what};
        break;
    case SHAPE_K:
        snprintf(what, size, "n_head_kv*head_dim = %" PRIu32 "*%" PRIu32, m->n_head_kv, m->head_dim);
        *cols = embd;
        *rows = (dim_expect){k_dim, what};
        break;
    case SHAPE_V:
        snprintf(what, size, "n_head_kv*head_dim_v = %" PRIu32 "*%" PRIu32, m->n_head_kv, m->head_dim_v);
        *cols = embd;
        *rows = (dim_expect){v_dim, what};
        break;
    case SHAPE_O:
        snprintf(what, size, "n_head*head_dim_v = %" PRIu32 "*%" PRIu32, m->n_head, m->head_dim_v);
        *cols = (dim_expect){(uint64_t)m->n_head * m->head_dim_v, what};
        *rows = embd;
        break;
    case SHAPE_UP:
        *cols = embd;
        *rows = (dim_expect){m->n_ff, "n_ff"};
        break;
    case SHAPE_DOWN:
        *cols = (dim_expect){m->n_ff, "n_ff"};
        *rows = embd;
        break;
    case SHAPE_ROUTER:
        *cols = embd;
        *rows = (dim_expect){m->n_expert, "expert_count"};
        break;
    case SHAPE_EXP_UP:
        *cols = embd;
        *rows = (dim_expect){m->n_ff, "n_ff of an expert"};
        break;
    case SHAPE_EXP_DOWN:
        *cols = (dim_expect){m->n_ff, "n_ff of an expert"};
        *rows = embd;
        break;
    case SHAPE_SH_UP:
        *cols = embd;
        *rows = (dim_expect){m->n_ff_shexp, "n_ff of the shared expert"};
        break;
    case SHAPE_SH_DOWN:
        *cols = (dim_expect){m->n_ff_shexp, "n_ff of the shared expert"};
        *rows = embd;
        break;
    }
    if (p->vector && p->shape != SHAPE_NORM && p->shape != SHAPE_HEADNORM) { /* a bias: one per row */
        *cols = *rows;
        *rows = (dim_expect){0, ""};
    }
}

/* Whether part p belongs to this model's FFNs (dense or experts). */
static bool part_ffn_fits(const memra_model *m, const layer_part *p) {
    return p->ffn == FFN_ANY || (p->ffn == FFN_MOE) == (m->n_expert > 0);
}

static memra_status bind_layers(describe_ctx *c) {
    memra_model *m = c->m;
    uint32_t arch_bit = ARCH_BIT(m->arch);
    for (uint32_t l = 0; l < m->n_layer; l++) {
        for (size_t i = 0; i < N_LAYER_PARTS; i++) {
            const layer_part *p = &layer_parts[i];
            if (!(p->allowed & arch_bit) || !part_ffn_fits(m, p))
                continue;
            char name[96], what[96];
            snprintf(name, sizeof name, "blk.%" PRIu32 ".%s.%s", l, p->name, p->suffix);
            dim_expect cols, rows;
            part_dims(m, p, &cols, &rows, what, sizeof what);
            char *base = p->ffn == FFN_MOE ? (char *)&m->moe[l] : (char *)&m->layers[l];
            memra_weight *w = (memra_weight *)(base + p->offset);
            uint32_t n_stack = p->shape == SHAPE_EXP_UP || p->shape == SHAPE_EXP_DOWN ? m->n_expert : 0;
            memra_status st = bind3(c, name, cols, rows, n_stack, (p->required & arch_bit) != 0, w);
            if (st != MEMRA_OK)
                return st;
        }
    }
    return MEMRA_OK;
}

/* True when `name` is a tensor this architecture binds: every tensor of the file must be. */
static bool tensor_known(const memra_model *m, const char *name) {
    static const char *const globals[] = {"token_embd.weight", "output_norm.weight", "output.weight",
                                          "rope_freqs.weight"};
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (strcmp(name, globals[i]) == 0)
            return true;
    if (strncmp(name, "blk.", 4) != 0)
        return false;
    /* The layer number exactly as the binder spells it: "blk.01." would be ignored. */
    const char *digits = name + 4;
    uint64_t layer = 0;
    size_t n_digits = 0;
    while (digits[n_digits] >= '0' && digits[n_digits] <= '9' && n_digits < 10)
        layer = layer * 10 + (uint64_t)(digits[n_digits++] - '0');
    if (n_digits == 0 || digits[n_digits] != '.' || (n_digits > 1 && digits[0] == '0') || layer >= m->n_layer)
        return false;
    const char *rest = digits + n_digits + 1;
    for (size_t i = 0; i < N_LAYER_PARTS; i++) {
        const layer_part *p = &layer_parts[i];
        size_t n = strlen(p->name);
        if ((p->allowed & ARCH_BIT(m->arch)) && part_ffn_fits(m, p) && strncmp(rest, p->name, n) == 0 &&
            rest[n] == '.' && strcmp(rest + n + 1, p->suffix) == 0)
            return true;
    }
    return false;
}

static memra_status check_no_stray_tensors(describe_ctx *c) {
    uint64_t n = memra_gguf_tensor_count(c->g);
    for (uint64_t i = 0; i < n; i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(c->g, i);
        if (!tensor_known(c->m, t->name))
            return memra_fail(c->err, MEMRA_E_UNSUPPORTED,
                              "%s: tensor '%s' is not part of a %" PRIu32 "-layer %s model: memra would ignore it and "
                              "compute another model, so it refuses the file",
                              c->path, t->name, c->m->n_layer, c->m->arch_name);
    }
    return MEMRA_OK;
}

static memra_status bind_globals(describe_ctx *c) {
    memra_model *m = c->m;
    dim_expect embd = {m->n_embd, "n_embd"}, vocab = {m->n_vocab, "n_vocab"};
    memra_status st;
    if ((st = bind(c, "token_embd.weight", embd, vocab, true, &m->tok_embd)) != MEMRA_OK ||
        (st = bind(c, "output_norm.weight", embd, (dim_expect){0, ""}, true, &m->output_norm)) != MEMRA_OK ||
        (st = bind(c, "output.weight", embd, vocab, false, &m->output)) != MEMRA_OK)
        return st;
    if (!m->output.data) { /* tied to the embedding, counted once */
        m->output = m->tok_embd;
        m->tied_output = true;
    }
    memra_weight freqs;
    dim_expect half = {m->head_dim / 2, "head_dim/2"};
    if ((st = bind(c, "rope_freqs.weight", half, (dim_expect){0, ""}, false, &freqs)) != MEMRA_OK)
        return st;
    if (!freqs.data)
        return MEMRA_OK;
    const float *f = freqs.data;
    for (uint32_t i = 0; i < m->head_dim / 2; i++)
        if (!isfinite(f[i]) || f[i] <= 0.0f)
            return memra_fail(c->err, MEMRA_E_FORMAT,
                              "%s: tensor 'rope_freqs.weight' element %" PRIu32 " is %g, expected a finite positive "
                              "frequency factor",
                              c->path, i, (double)f[i]);
    m->rope_freqs = f;
    return MEMRA_OK;
}

memra_status memra_model_describe(const memra_gguf *g, memra_model **out, memra_error *err) {
    if (!g || !out)
        return memra_fail(err, MEMRA_E_INVALID, "memra_model_describe: the GGUF handle or out is NULL");
    *out = NULL;
    memra_model *m = calloc(1, sizeof *m);
    if (!m)
        return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory for the model description", memra_gguf_path(g));
    describe_ctx c = {.g = g, .path = memra_gguf_path(g), .err = err, .m = m};
    m->gguf = g;
    m->source = memra_gguf_source(g);
    m->streamed = memra_gguf_streamed(g);
    memra_status st;
    if ((st = read_arch(&c)) != MEMRA_OK || (st = read_name(&c)) != MEMRA_OK || (st = read_hparams(&c)) != MEMRA_OK ||
        (st = read_vocab(&c)) != MEMRA_OK)
        goto err_free_model;
    /* Every layer has at least 9 tensors: a count past that is a corrupt header, not a model to
     * allocate for. */
    if (m->n_layer > memra_gguf_tensor_count(g)) {
        st = memra_fail(err, MEMRA_E_FORMAT,
                        "%s: %s.block_count is %" PRIu32 " but the file has only %" PRIu64 " tensors", c.path,
                        m->arch_name, m->n_layer, memra_gguf_tensor_count(g));
        goto err_free_model;
    }
    m->layers = calloc(m->n_layer, sizeof *m->layers);
    if (m->n_expert > 0)
        m->moe = calloc(m->n_layer, sizeof *m->moe);
    if (!m->layers || (m->n_expert > 0 && !m->moe)) {
        st = memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory for %" PRIu32 " layers", c.path, m->n_layer);
        goto err_free_model;
    }
    if ((st = read_special_id(&c, "tokenizer.ggml.bos_token_id", &m->bos_id)) != MEMRA_OK ||
        (st = read_special_id(&c, "tokenizer.ggml.eos_token_id", &m->eos_id)) != MEMRA_OK ||
        (st = bind_globals(&c)) != MEMRA_OK || (st = check_tokenizer(&c)) != MEMRA_OK ||
        (st = bind_layers(&c)) != MEMRA_OK || (st = check_no_stray_tensors(&c)) != MEMRA_OK)
        goto err_free_model;
    *out = m;
    return MEMRA_OK;

err_free_model:
    memra_model_free(m);
    return st;
}

void memra_model_free(memra_model *m) {
    if (!m)
        return;
    free(m->layers);
    free(m->moe);
    free((char *)m->name);
    free(m);
}
