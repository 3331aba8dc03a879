/* memra/model.h: the model description of a llama-family GGUF file.
 *
 * Architectures, as llama.cpp names them: "llama", "qwen2" (llama with q/k/v bias) and "qwen3"
 * (llama with per-head RMSNorm of q and k). memra_model_describe reads the `<arch>.*`
 * hyperparameters and binds every tensor, checking each shape; a missing key or tensor, or a
 * wrong shape, is an error that names it and says what was expected. The description points
 * into the mapped file: weights are never copied here.
 *
 * Matrix convention: a weight of GGUF shape ne = [cols, rows] is `rows` output rows of `cols`
 * input elements each, row-major, so y[r] = sum_c W[r][c] * x[c]. */
#ifndef MEMRA_MODEL_H
#define MEMRA_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "memra/gguf.h"
#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum memra_arch { MEMRA_ARCH_LLAMA = 0, MEMRA_ARCH_QWEN2 = 1, MEMRA_ARCH_QWEN3 = 2 } memra_arch;

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
    memra_weight q_norm, k_norm; /* qwen3: [head_dim] each, shared by all heads; absent otherwise */
    memra_weight wo;             /* [n_embd, n_head*head_dim_v] */
    memra_weight ffn_norm;       /* [n_embd] */
    memra_weight w_gate, w_up;   /* [n_ff, n_embd] */
    memra_weight w_down;         /* [n_embd, n_ff] */
} memra_layer;

typedef struct memra_model {
    memra_arch arch;
    const char *arch_name; /* "llama", "qwen2", "qwen3" */
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

    memra_weight tok_embd;    /* [n_vocab, n_embd] */
    memra_weight output_norm; /* [n_embd] */
    memra_weight output;      /* [n_vocab, n_embd]; equal to tok_embd when tied */
    bool tied_output;

    memra_layer *layers; /* n_layer */

    int64_t bos_id; /* -1 when the file names none */
    int64_t eos_id; /* -1 when the file names none */

    const memra_gguf *gguf;
    uint64_t weight_bytes; /* all bound tensors, tied output counted once */
} memra_model;

/* Describes the model in g (which must outlive the model). */
memra_status memra_model_describe(const memra_gguf *g, memra_model **out, memra_error *err);
void memra_model_free(memra_model *m);

/* MEMRA_E_UNSUPPORTED naming the tensor and its type unless the type is one memra computes with:
 * "tensor 'blk.0.attn_q.weight' has type Q4_K, which memra does not support yet". */
memra_status memra_weight_check_type(const memra_weight *w, memra_error *err);

/* Frequency of rope pair i (0 <= i < head_dim/2) with the model's base and per-dimension factors;
 * position scaling is applied separately (pos / rope_linear_factor). Computed in double and
 * rounded once so every backend starts from the same float. */
float memra_model_rope_freq(const memra_model *m, uint32_t i);

#ifdef __cplusplus
}
#endif
#endif
