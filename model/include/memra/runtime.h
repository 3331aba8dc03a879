/* memra/runtime.h: what every command does first: load a model (a file, or a preset built in
 * memory). memra run, memra bench and memra-gate all go through here; opening an arm on the
 * model is memra/arm.h. */
#ifndef MEMRA_RUNTIME_H
#define MEMRA_RUNTIME_H

#include <stdint.h>

#include "memra/model.h"
#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A model and where it came from. */
typedef struct memra_loaded_model {
    memra_gguf *gguf;
    memra_model *model;
    void *buffer;    /* the in-memory file of a preset, or NULL */
    char label[512]; /* "path" or "preset tiny (f32, seed 1, built in memory)" */
    char path[4096]; /* the file, or "" for a preset */
    bool streamed;   /* the file was opened streamed (memra_gguf_open_streamed) */
    double open_s;   /* seconds to open and describe it (the weights' upload is the arm's) */
} memra_loaded_model;

/* How a file is opened: read whole into memory (every backend can run it; a file changed on disk
 * afterwards changes nothing), or streamed (metadata and vectors in memory, the matrices read
 * from the file by a backend that streams them: memra_arm_streams_weights). A preset is always
 * in memory. */
typedef enum memra_load_mode { MEMRA_LOAD_WHOLE = 0, MEMRA_LOAD_STREAMED = 1 } memra_load_mode;

/* path != NULL: open that file. Otherwise build `preset` (NULL: "tiny", the embedded default)
 * with tensor type `type` (memra_tensor_type; F32 when 0 is passed for a preset) and `seed` in
 * memory. */
memra_status memra_model_load(const char *path, const char *preset, uint32_t type, uint64_t seed,
                              memra_loaded_model **out, memra_error *err);
/* The same, a file opened in `mode`. */
memra_status memra_model_load_mode(const char *path, const char *preset, uint32_t type, uint64_t seed,
                                   memra_load_mode mode, memra_loaded_model **out, memra_error *err);
void memra_model_unload(memra_loaded_model *lm);
/* SHA-256 of the model's bytes as mapped (a file's, or a preset's in-memory bytes); of a streamed
 * file, read through its source in chunks (the file must be the one opened, unchanged). */
memra_status memra_model_digest(const memra_loaded_model *lm, uint8_t out[32], memra_error *err);

#ifdef __cplusplus
}
#endif
#endif
