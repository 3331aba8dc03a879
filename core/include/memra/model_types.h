/* memra/model_types.h: the model description's types (memra_model, memra_weight, memra_layer,
 * their enums) and the helpers a plugin computes with. They are part of the plugin ABI (the
 * placement and backend vtables take a memra_model), so they are core's; building a description
 * from a GGUF file (memra_model_describe) is memra/model.h, in libmemra-model.
 *
 * Matrix convention: a weight of GGUF shape ne = [cols, rows] is `rows` output rows of `cols`
 * input elements each, row-major, so y[r] = sum_c W[r][c] * x[c]. */
#ifndef MEMRA_MODEL_TYPES_H
#define MEMRA_MODEL_TYPES_H

#include <stdbool.h>
#include <stdint.h>

#include "memra/status.h"
#include "memra/tensor_type.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The GGUF handle a description points into (opaque here; memra/gguf.h reads it). */
typedef struct memra_gguf memra_gguf;

typedef enum memra_arch {
    MEMRA_ARCH_LLAMA = 0,
    MEMRA_ARCH_QWEN2 = 1,
    MEMRA_ARCH_QWEN3 = 2,
    MEMRA_ARCH_GEMMA3 = 3,
    MEMRA_ARCH_QWEN2MOE = 4,  /* qwen2 attention; routed experts plus a shared expert with a sigmoid gate */
    MEMRA_ARCH_QWEN3MOE = 5,  /* qwen3 attention (q/k norms); routed experts, weights renormalised */
    MEMRA_ARCH_GRANITEMOE = 6 /* llama attention with granite's four scales; routed experts */
} memra_arch;

/* The most experts a layer may have, and the most a token may use: bounds on untrusted counts
 * (real models: 8 to 256 experts, 2 to 16 used). */
#define MEMRA_MAX_EXPERTS 1024u
#define MEMRA_MAX_EXPERTS_USED 64u

/* The FFN's gate activation: SiLU (llama, qwen) or GELU with the tanh approximation (gemma3,
 * as llama.cpp's ggml_gelu): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
typedef enum memra_ffn_act { MEMRA_FFN_SILU = 0, MEMRA_FFN_GELU_TANH = 1 } memra_ffn_act;

/* How the rotary embedding pairs dimensions. NORMAL (llama): (2i, 2i+1). NEOX (qwen2, qwen3):
 * (i, i + head_dim/2). */
typedef enum memra_rope_pairing { MEMRA_ROPE_NORMAL = 0, MEMRA_ROPE_NEOX = 1 } memra_rope_pairing;

/* One bound tensor. data == NULL means absent (optional tensors only). For a vector (norm weight,
 * bias) rows == 1 and cols is its length; vectors are always F32 (describe checks it, and that
 * they are 4-byte aligned), matrices may be of any known type (see memra_weight_check_type). */
typedef struct memra_weight {
    const char *name; /* the GGUF tensor name; NULL when absent */
    const void *data; /* inside the mapping */
    uint32_t type;    /* memra_tensor_type */
    uint64_t rows, cols;
    uint64_t n_bytes;
} memra_weight;

typedef struct memra_layer {
    memra_weight attn_norm;      /* [n_embd] */
    memra_weight wq, wk, wv;     /* [n_head*head_dim, n_embd], [n_head_kv*head_dim, n_embd] x2 (rows, cols) */
    memra_weight bq, bk, bv;     /* qwen2: biases of q, k, v; absent otherwise */
    memra_weight q_norm, k_norm; /* qwen3, gemma3: [head_dim] each, shared by all heads; absent otherwise */
    memra_weight wo;             /* [n_embd, n_head*head_dim_v] */
    memra_weight post_attn_norm; /* gemma3: [n_embd], applied to the attention output before the residual add */
    memra_weight ffn_norm;       /* [n_embd] */
    memra_weight w_gate, w_up;   /* [n_ff, n_embd] */
    memra_weight w_down;         /* [n_embd, n_ff] */
    memra_weight post_ffn_norm;  /* gemma3: [n_embd], applied to the FFN output before the residual add */
    /* ABI 1: this struct's shape is frozen (a plugin built against it indexes `layers` with its
     * size, so a member appended here would shift every layer past the first). Per-layer data
     * added later goes into a parallel array of memra_model (as `moe`). */
} memra_layer;

/* A mixture-of-experts layer's FFN (memra_model.moe[il], n_expert > 0; then the layer's w_gate,
 * w_up and w_down are absent). */
typedef struct memra_layer_moe {
    /* The router ffn_gate_inp: [n_expert, n_embd] (rows, cols). The experts' matrices are stacked
     * on the file's last axis: gate_exps and up_exps are n_expert blocks of n_ff rows of n_embd columns
     * (rows = n_expert * n_ff; expert e's rows are [e n_ff, (e+1) n_ff)), down_exps n_expert blocks
     * of n_embd rows of n_ff columns (rows = n_expert * n_embd). */
    memra_weight gate_inp;
    memra_weight gate_exps, up_exps, down_exps;
    /* qwen2moe's shared expert: [n_ff_shexp, n_embd] x2, [n_embd, n_ff_shexp], and its gate
     * ffn_gate_inp_shexp, a vector of n_embd (sigmoid(gate . x) scales the shared output). */
    memra_weight gate_shexp, up_shexp, down_shexp;
    memra_weight gate_inp_shexp;
} memra_layer_moe;

typedef struct memra_model {
    memra_arch arch;
    const char *arch_name; /* "llama", "qwen2", "qwen3", "gemma3" */
    const char *name;      /* general.name, or "" */

    uint32_t n_vocab;
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_ff;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim;   /* attention.key_length, or n_embd / n_head */
    uint32_t head_dim_v; /* attention.value_length, or head_dim */
    uint32_t n_ctx_train;
    float rms_eps;

    memra_rope_pairing rope_pairing;
    float rope_freq_base;
    /* rope.scaling.type "linear": positions are divided by rope_linear_factor (1 = none). */
    float rope_linear_factor;
    /* Llama 3.1+: per-dimension frequency divisors, head_dim/2 floats (rope_freqs.weight, F32);
     * NULL when absent. The frequency of pair i is base^(-2i/head_dim) / rope_freqs[i]. */
    const float *rope_freqs;

    /* gemma3 (1 and 0 elsewhere). The embedding row is multiplied by embd_scale (sqrtf(n_embd) in
     * float, as llama.cpp does). The query is scaled by attn_scale before the dot products
     * (1/sqrt(head_dim), or <arch>.attention.scale when the file gives one). A layer il with
     * sliding_window > 0 and memra_model_layer_is_swa(m, il) lets a position attend only to the
     * last sliding_window positions (itself included: p attends t when p - t < sliding_window),
     * with rope base rope_freq_base_swa and no position scaling; global layers use rope_freq_base
     * and rope_linear_factor. swa_period: every swa_period-th layer (il % swa_period ==
     * swa_period - 1) is global, as llama.cpp's set_swa_pattern(6) for gemma3. */
    float embd_scale;
    float attn_scale;
    uint32_t sliding_window;
    uint32_t swa_period;
    float rope_freq_base_swa;
    memra_ffn_act ffn_act;

    memra_weight tok_embd;    /* [n_vocab, n_embd] */
    memra_weight output_norm; /* [n_embd] */
    memra_weight output;      /* [n_vocab, n_embd]; equal to tok_embd when tied */
    bool tied_output;

    memra_layer *layers; /* n_layer */

    int64_t bos_id; /* -1 when the file names none */
    int64_t eos_id; /* -1 when the file names none */

    const memra_gguf *gguf; /* the file it was described from (memra/gguf.h, libmemra-model) */
    uint64_t weight_bytes;  /* all bound tensors, tied output counted once */

    /* Mixture of experts (qwen2moe, qwen3moe, granitemoe, llama with expert_count): n_expert > 0.
     * Then n_ff is the width of one expert (expert_feed_forward_length, else feed_forward_length)
     * and every layer's FFN is: router logits = gate_inp . x; p = softmax(logits) (in float, max
     * subtracted, sum in increasing expert order); the top n_expert_used of p, ties toward the lower
     * expert index, in decreasing p (the slot order); their weights p, divided by their sum (summed
     * in slot order) when expert_weights_norm; each chosen expert's SwiGLU FFN; the outputs
     * combined as sum over slots in slot order of weight * output (starting from 0.0f); then, with a
     * shared expert, + sigmoid(gate_inp_shexp . x) * shared output. */
    uint32_t n_expert, n_expert_used;
    uint32_t n_ff_shexp;      /* qwen2moe: the shared expert's width; 0 without one */
    bool expert_weights_norm; /* renormalise the chosen weights to sum to one */
    /* granitemoe (1 elsewhere): each sublayer's output is multiplied by residual_scale before the
     * residual add; the logits are divided by logit_scale; the embedding is multiplied by
     * embd_scale and the query scale is attn_scale (above). */
    float residual_scale, logit_scale;
    /* n_layer mixture-of-experts FFNs when n_expert > 0, else NULL (outside memra_layer, whose
     * shape ABI 1 froze). */
    memra_layer_moe *moe;

    /* ---- appended (issue 27): where the tensor bytes come from ----
     * source (memra/source.h): the model's file or its bytes in memory; its base is the address
     * the data pointers above are relative to (memra_source_offset_of gives a tensor's offset).
     * streamed: the model was opened without its tensor data in memory (memra_gguf_open_streamed):
     * only the vectors (rows == 1) can be read through their data pointers; a matrix's bytes must
     * be read through the source (memra_source_read, memra_source_read_jobs). An arm is opened on a
     * streamed model only when its backend declares that it reads them so (the backend vtable's
     * streams_weights). NULL and false for a model described by an older libmemra-model. */
    const struct memra_source *source;
    bool streamed;
} memra_model;

/* MEMRA_E_UNSUPPORTED naming the tensor and its type unless the type is one memra computes with:
 * "tensor 'blk.0.attn_q.weight' has type Q4_K, which memra does not support yet". */
memra_status memra_weight_check_type(const memra_weight *w, memra_error *err);

/* Frequency of rope pair i (0 <= i < head_dim/2) with the model's base and per-dimension factors;
 * position scaling is applied separately (pos / rope_linear_factor). Computed in double and
 * rounded once so every backend starts from the same float. */
float memra_model_rope_freq(const memra_model *m, uint32_t i);

/* True when layer il attends through the sliding window (gemma3's local layers). */
bool memra_model_layer_is_swa(const memra_model *m, uint32_t il);
/* memra_model_rope_freq for layer il: the local base on sliding-window layers (no rope_freqs
 * factors there: gemma3 has none), the global one elsewhere. */
float memra_model_layer_rope_freq(const memra_model *m, uint32_t il, uint32_t i);
/* The position divisor of layer il: rope_linear_factor on global layers, 1 on local ones. */
float memra_model_layer_rope_linear_factor(const memra_model *m, uint32_t il);

#ifdef __cplusplus
}
#endif
#endif
