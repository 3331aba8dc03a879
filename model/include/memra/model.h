/* memra/model.h: the model description of a llama-family GGUF file.
 *
 * Architectures, as llama.cpp names them: "llama", "qwen2" (llama with q/k/v bias), "qwen3"
 * (llama with per-head RMSNorm of q and k) and "gemma3" (per-head q/k norms, RMS norms after
 * attention and after the FFN, GELU-gated FFN, embedding scaled by sqrt(n_embd), sliding-window
 * attention on 5 of every 6 layers with their own RoPE base, tied head). memra_model_describe reads the `<arch>.*`
 * hyperparameters and binds every tensor, checking each shape; a missing key or tensor, or a
 * wrong shape, is an error that names it and says what was expected. The description points
 * into the mapped file: weights are never copied here.
 *
 * Matrix convention: a weight of GGUF shape ne = [cols, rows] is `rows` output rows of `cols`
 * input elements each, row-major, so y[r] = sum_c W[r][c] * x[c]. */
#ifndef MEMRA_MODEL_H
#define MEMRA_MODEL_H

#include "memra/gguf.h"
#include "memra/model_types.h" /* the types and helpers (core: part of the plugin ABI) */
#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Describes the model in g (which must outlive the model). */
memra_status memra_model_describe(const memra_gguf *g, memra_model **out, memra_error *err);
void memra_model_free(memra_model *m);

#ifdef __cplusplus
}
#endif
#endif
