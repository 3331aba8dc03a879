/* memra/synth.h: synthetic llama-family models with deterministic pseudo-random weights.
 *
 * Presets: "tiny", "small", "qwen3-tiny", "qwen2-tiny" (q/k/v biases), "gemma3-tiny" (6 layers, one
 * of them global, head size 32 with n_embd 64 and 4 heads, a sliding window of 8), "gemma3-270m"
 * (shapes of Gemma 3 270M), "llama-1b" (shapes of Llama-3.2-1B), "llama-8b" (Llama-3.1-8B), "smollm2-135m"
 * (SmolLM2-135M, its head Q8_0 for a quantized dtype as in the published Q4_1 file). Weights are scaled so activations stay of order one,
 * logits are not flat and greedy decoding of tiny does not loop within 256 tokens. The files carry
 * the tokenizer metadata other GGUF tools expect (tokenizer.ggml.model "llama", tokens including
 * the 256 byte tokens, scores, token types, bos and eos). */
#ifndef MEMRA_SYNTH_H
#define MEMRA_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memra_synth_spec {
    const char *preset; /* one of the names above */
    uint32_t type;      /* memra_tensor_type of the matrices: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
                         * Q4_K, Q5_K or Q6_K (norms stay F32; a K-quant matrix whose rows are not a
                         * multiple of 256 is written as Q8_0), or one of the mixes below */
    uint64_t seed;
} memra_synth_spec;

/* The per-tensor mixes of llama.cpp's quantizer (memra_synth_spec.type, beside the tensor types,
 * and outside their numbers): each matrix gets the type llama.cpp's llama_tensor_get_type gives it
 * for the file type of that name (synth.c says how), and general.file_type says which mix. */
#define MEMRA_SYNTH_MIX 0x1000u                    /* + llama.cpp's LLAMA_FTYPE_* number */
#define MEMRA_SYNTH_Q4_K_M (MEMRA_SYNTH_MIX + 15u) /* MOSTLY_Q4_K_M: Q4_K, some Q6_K */
#define MEMRA_SYNTH_Q5_K_M (MEMRA_SYNTH_MIX + 17u) /* MOSTLY_Q5_K_M: Q5_K, some Q6_K */

/* The preset names, NULL-terminated. */
const char *const *memra_synth_presets(void);
/* The dtype words memra_synth_parse_dtype takes, as its error message lists them. */
#define MEMRA_SYNTH_DTYPES "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, q4_k_m or q5_k_m"
/* Parses one of MEMRA_SYNTH_DTYPES (any case): a tensor type or a MEMRA_SYNTH_Q*_K_M mix.
 * Quantized types are written by round-to-nearest per block (synth.c). */
memra_status memra_synth_parse_dtype(const char *word, uint32_t *type, memra_error *err);
/* The name of a memra_synth_spec.type: "Q4_K_M", "Q5_K_M", or the tensor type's name ("Q8_0"). */
const char *memra_synth_dtype_name(uint32_t type);
/* One tensor of a synthetic model, as the writer would write it: name, type (after the mix and
 * the fallbacks), columns and rows (1 for a vector). */
typedef struct memra_synth_tensor_info {
    char name[64];
    uint32_t type;
    uint64_t cols, rows;
} memra_synth_tensor_info;
/* The tensors of spec's model, in file order, without making any weight (a cheap look at what
 * mkmodel would write, llama-8b included): *out is malloc'd (free() it), *n its length. */
memra_status memra_synth_list_tensors(const memra_synth_spec *spec, memra_synth_tensor_info **out, uint32_t *n,
                                      memra_error *err);

/* Writes the model to path, streaming tensor data (memory stays small for every preset). Rows
 * are generated on one thread per core, or $MEMRA_SYNTH_THREADS (1..16); the bytes are the same
 * for any count. */
memra_status memra_synth_write_file(const memra_synth_spec *spec, const char *path, memra_error *err);
/* The same into a stream the caller opened (memra mkmodel's private file), named `name` in
 * messages; flushed, not closed. */
memra_status memra_synth_write_stream(const memra_synth_spec *spec, FILE *f, const char *name, memra_error *err);
/* Builds the model in a malloc'd buffer (free() it): the embedded default, tests. */
memra_status memra_synth_build_memory(const memra_synth_spec *spec, void **data, size_t *size, memra_error *err);

#ifdef __cplusplus
}
#endif
#endif
