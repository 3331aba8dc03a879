/* memra/runtime.h: what every command does first: load a model (a file, or a preset built in
 * memory), and open an arm on it (parse, find the backend and placement plugins, check the keys,
 * plan, open). memra run, memra bench and memra-gate all go through here. */
#ifndef MEMRA_RUNTIME_H
#define MEMRA_RUNTIME_H

#include <stdint.h>

#include "memra/arm.h"
#include "memra/model.h"
#include "memra/plugin.h"
#include "memra/registry.h"
#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A model and where it came from. */
typedef struct memra_loaded_model {
    memra_gguf *gguf;
    memra_model *model;
    void *buffer;     /* the in-memory file of a preset, or NULL */
    char label[512];  /* "path" or "preset tiny (f32, seed 1, built in memory)" */
    char path[4096];  /* the file, or "" for a preset */
} memra_loaded_model;

/* path != NULL: open that file. Otherwise build `preset` (NULL: "tiny", the embedded default)
 * with tensor type `type` (memra_tensor_type; F32 when 0 is passed for a preset) and `seed` in
 * memory. */
memra_status memra_model_load(const char *path, const char *preset, uint32_t type, uint64_t seed,
                              memra_loaded_model **out, memra_error *err);
void memra_model_unload(memra_loaded_model *lm);
/* SHA-256 of the model's bytes as mapped (a file's, or a preset's in-memory bytes). */
memra_status memra_model_digest(const memra_loaded_model *lm, uint8_t out[32], memra_error *err);

/* Keys the core itself reads from every arm. */
#define MEMRA_ARM_KEY_PLACEMENT "placement" /* placement plugin name; default "default" */

typedef struct memra_arm memra_arm;

/* Parses arm_text, loads the backend and placement plugins through r, checks that every key is
 * known (to the placement, the backend, the core, or `caller_keys`: keys the caller itself
 * handles, such as the gate's window), asks the backend for its devices, plans and opens.
 * Usage errors (bad syntax, unknown key, impossible plan) are MEMRA_E_INVALID. */
memra_status memra_arm_open(memra_registry *r, const memra_model *m, const char *arm_text,
                            const memra_option_spec *caller_keys, uint32_t n_caller_keys, memra_arm **out,
                            memra_error *err);
void memra_arm_close(memra_arm *a);

const char *memra_arm_text(const memra_arm *a);         /* as given */
const char *memra_arm_backend_name(const memra_arm *a); /* "cpu" */
const memra_plugin *memra_arm_plugin(const memra_arm *a);
const memra_backend_vtable *memra_arm_vtable(const memra_arm *a);
memra_backend *memra_arm_backend(const memra_arm *a);
const memra_plan *memra_arm_plan(const memra_arm *a);
const memra_options *memra_arm_options(const memra_arm *a); /* as given */
/* Every key with the value in force, defaults included (backend's resolve_options when it has
 * one, else given values and the specs' defaults), caller keys included. */
const memra_options *memra_arm_resolved(const memra_arm *a);
/* All known keys, for --help and messages: placement's, backend's, core's, caller's. */
uint32_t memra_arm_known_keys(const memra_arm *a, const memra_option_spec **out, uint32_t max);

/* The keys the core itself reads from every arm (placement), for --help and key checks. */
extern const memra_option_spec memra_core_arm_keys[];
extern const uint32_t memra_core_arm_key_count;

#ifdef __cplusplus
}
#endif
#endif
