/* model_builder.h: builds small llama-family GGUF files (arch "gemma3" adds the sliding window
 * key (128), q/k norms and the post-attention and post-FFN norms) in memory for the model tests, with one
 * thing changed at a time (a key left out or altered, a tensor missing, reshaped or retyped, a
 * stray tensor added), so each error of memra_model_describe can be provoked alone. */
#ifndef MEMRA_TESTS_MODEL_BUILDER_H
#define MEMRA_TESTS_MODEL_BUILDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memra/gguf.h"
#include "memra/memra.h"
#include "memra/model.h"
#include "memra/runtime.h"
#include "memra/synth.h"

/* The model: n_embd 256 (a multiple of the Q4_K block, so a matrix can be retyped), 2 layers,
 * 4 heads of 64, 2 kv heads, n_ff 256, 32 tokens. */
#define MB_EMBD 256u
#define MB_LAYERS 2u
#define MB_HEADS 4u
#define MB_HEADS_KV 2u
#define MB_HEAD_DIM 64u
#define MB_FF 256u
#define MB_VOCAB 32u

typedef struct mb_change {
    const char *arch;         /* general.architecture; NULL: "llama" */
    const char *name;         /* general.name; NULL: "builder model" */
    const char *skip_key;     /* a key left out ("llama.block_count") */
    const char *skip_tensor;  /* a tensor left out */
    const char *tensor;       /* a tensor changed: */
    uint64_t tensor_ne[2];    /*   its shape, when nonzero */
    uint32_t tensor_n_dims;   /*   its dimension count, when nonzero */
    int32_t tensor_type;      /*   its type, when >= 0 (use -1 for none) */
    const char *extra_tensor; /* a stray tensor, [MB_EMBD] F32 */
    const char *rope_scaling; /* llama.rope.scaling.type, when given */
    float rope_factor;        /* llama.rope.scaling.factor, when > 0 */
    bool tied;                /* no output.weight */
    bool rope_freqs;          /* add rope_freqs.weight: 1, 2, 3, ... */
    bool no_vocab_size;       /* leave <arch>.vocab_size out */
    bool no_tokens;           /* leave tokenizer.ggml.tokens out */
    uint32_t head_count_kv;   /* when nonzero */
    uint32_t key_length;      /* <arch>.attention.key_length, when nonzero (head_dim follows) */
    uint32_t block_count;     /* when nonzero, the value written (layers built stay MB_LAYERS) */
    int64_t bos;              /* when >= 0 (use -1 for the default 1) */
    float attention_scale;    /* gemma3: <arch>.attention.scale, when > 0 */
} mb_change;

/* A change that changes nothing. */
mb_change mb_none(void);

/* Builds the model with change c into a malloc'd buffer; false on failure (message in err). */
bool mb_build(const mb_change *c, void **data, size_t *size, memra_error *err);

/* Builds, opens and describes; returns the describe status. *g (and *m on success) are to be
 * closed by the caller (mb_close). The GGUF's name is "model.gguf". */
memra_status mb_describe(const mb_change *c, void **data, memra_gguf **g, memra_model **m, memra_error *err);
void mb_close(void *data, memra_gguf *g, memra_model *m);

#endif
