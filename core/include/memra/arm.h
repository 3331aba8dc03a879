/* memra/arm.h: the arm layer. Every caller (memra-gate, the memra tools, the GPU checks) reaches a
 * backend through these functions and never through its vtable, the way SQLite's os.c wraps each
 * VFS call. The layer
 *   - opens an arm (parse, find the plugins, check every key, plan, open) and resolves its keys;
 *   - names the arm in every message it passes on, in one place: "arm a (cuda:window=3): ...";
 *   - does once, before the vtable call, the checks every backend would otherwise repeat: a token
 *     in the vocabulary, room in the state's capacity, no more steps in flight than the window,
 *     no use of a quarantined state;
 *   - keeps the window (the arm key `window`: steps begun and not yet ended) and runs windowed
 *     passes (memra_arm_run), so no caller manages begin/end order itself;
 *   - looks up extension tables with a size check.
 * Parsing arm text and reading option values is memra/options.h. */
#ifndef MEMRA_ARM_H
#define MEMRA_ARM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memra/ext.h"
#include "memra/model_types.h"
#include "memra/options.h"
#include "memra/plugin.h"
#include "memra/registry.h"
#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Keys the core itself reads from every arm. */
#define MEMRA_ARM_KEY_PLACEMENT "placement" /* placement plugin name; default "default" */
#define MEMRA_ARM_KEY_WINDOW "window"       /* steps kept in flight; default 1 (serial) */
#define MEMRA_ARM_MAX_WINDOW 64u
#define MEMRA_ARM_KEY_PREFILL "prefill" /* prompt positions per step; default auto (the backend's) */
#define MEMRA_ARM_MAX_PREFILL 4096u

/* The keys the core itself reads from every arm (placement, window, prefill), for --help and key
 * checks. */
extern const memra_option_spec memra_core_arm_keys[];
extern const uint32_t memra_core_arm_key_count;

typedef struct memra_arm memra_arm;
typedef struct memra_arm_state memra_arm_state;

/* ---- Opening ------------------------------------------------------------------------------ */

/* Parses arm_text, loads the backend and placement plugins through r, checks that every key is
 * known (to the placement, the backend, the core, or `caller_keys`: keys the caller itself
 * handles), asks the backend for its devices, plans and opens. `label` names the arm in every
 * message of the layer ("a" gives "arm a (TEXT): ..."; NULL gives "arm 'TEXT': ..."); it is
 * copied. Usage errors (bad syntax, unknown key, impossible plan) are MEMRA_E_INVALID; an arm
 * whose backend plugin is not found is MEMRA_E_PLUGIN. */
memra_status memra_arm_open(memra_registry *r, const memra_model *m, const char *arm_text, const char *label,
                            const memra_option_spec *caller_keys, uint32_t n_caller_keys, memra_arm **out,
                            memra_error *err);
/* Closes the backend. Every state of the arm must have been freed first. NULL is a no-op. */
void memra_arm_close(memra_arm *a);
/* Before the model is loaded: *streams = true when the arm's backend reads its matrices through
 * the model's source (its vtable's streams_weights says so for the arm's options), so the model
 * may be opened streamed (memra_gguf_open_streamed). An arm that does not parse, or whose plugin
 * is missing, gives false and MEMRA_OK: memra_arm_open reports it later. An arm opened on a
 * streamed model whose backend does not stream is refused (MEMRA_E_INVALID). */
memra_status memra_arm_streams_weights(memra_registry *r, const char *arm_text, bool *streams, memra_error *err);
/* Before the model is loaded, what memra_arm_open would refuse that needs no model, so a tool
 * says it before it spends time reading or building weights (minutes for an 8B model): the arm's
 * text and keys (MEMRA_E_INVALID: unknown keys, bad values, refused ops), then whether its backend
 * has a device (the vtable's device_count for the arm's options: MEMRA_E_DEVICE, no GPU or no
 * driver; MEMRA_E_INVALID, a value the backend refuses). Messages as memra_arm_open's, prefixed
 * "arm LABEL (TEXT)", or "arm 'TEXT'" with label NULL. Anything else (a plugin that does not
 * load, a text too long) gives MEMRA_OK: memra_arm_open reports it. */
memra_status memra_arm_precheck(memra_registry *r, const char *arm_text, const char *label, memra_error *err);

const char *memra_arm_text(const memra_arm *a);                     /* as given */
const char *memra_arm_label(const memra_arm *a);                    /* as given to open, or "" */
const char *memra_arm_backend_name(const memra_arm *a);             /* "cpu" */
const memra_plugin *memra_arm_plugin(const memra_arm *a);           /* the backend's descriptor */
const memra_plugin *memra_arm_placement_plugin(const memra_arm *a); /* the placement's */
const memra_plan *memra_arm_plan(const memra_arm *a);
const memra_model *memra_arm_model(const memra_arm *a);
const memra_options *memra_arm_options(const memra_arm *a); /* as given */
/* Every key with the value in force, defaults included (backend's resolve_options when it has
 * one, else given values and the specs' defaults), caller keys included. */
const memra_options *memra_arm_resolved(const memra_arm *a);
/* All known keys, for --help and messages: placement's, backend's, core's, caller's. Returns
 * the count; writes at most max pointers. */
uint32_t memra_arm_known_keys(const memra_arm *a, const memra_option_spec **out, uint32_t max);
/* The arm's window (the resolved `window` key, 1 to MEMRA_ARM_MAX_WINDOW). */
uint32_t memra_arm_window(const memra_arm *a);
/* The arm's prefill chunk (the resolved `prefill` key, 1 to MEMRA_ARM_MAX_PREFILL): "auto" is the
 * backend's prefill_chunk, or 1 when it has none. */
uint32_t memra_arm_prefill(const memra_arm *a);
/* Whether the backend runs a chunk itself (its step_chunk); if not, the core runs each chunk as
 * single steps. */
bool memra_arm_prefill_native(const memra_arm *a);

/* Memory the backend holds (all zero and MEMRA_OK with *have = false when it does not say). */
memra_status memra_arm_memory(memra_arm *a, memra_backend_memory *out, bool *have, memra_error *err);

/* The extension table `name` at `version`, or NULL when the backend offers none (the vtable is
 * too old for the member, the member is NULL, the backend returns NULL) or when the table the
 * backend returns declares a struct_size (its first member, uint32_t) smaller than min_size:
 * the caller names the last member it will use, e.g.
 *   memra_arm_extension(a, MEMRA_EXT_CENSUS, 1, MEMRA_STRUCT_END(memra_ext_census_v1, census)). */
const void *memra_arm_extension(memra_arm *a, const char *name, uint32_t version, size_t min_size);

/* The two extensions the core knows, wrapped: MEMRA_E_UNSUPPORTED when not offered. */
memra_status memra_arm_device_name(memra_arm *a, char *buf, size_t size, memra_error *err);
memra_status memra_arm_measure_ceiling(memra_arm *a, double *bytes_per_s, char *how, size_t how_size, memra_error *err);

/* ---- States ------------------------------------------------------------------------------- */

/* A state with room for `capacity` positions and the arm's window of steps in flight. */
memra_status memra_arm_state_new(memra_arm *a, uint32_t capacity, memra_arm_state **out, memra_error *err);
/* Ends any step still in flight (ignoring its result), then frees. NULL is a no-op. */
void memra_arm_state_free(memra_arm_state *s);

memra_arm *memra_arm_state_arm(const memra_arm_state *s);
uint32_t memra_arm_state_position(const memra_arm_state *s); /* tokens committed */
uint32_t memra_arm_state_capacity(const memra_arm_state *s);
uint32_t memra_arm_state_in_flight(const memra_arm_state *s); /* steps begun and not ended */
/* True once a step failed on this state (other than a clean MEMRA_E_RANGE refusal at capacity):
 * every later step or restore on it fails with MEMRA_E_QUARANTINED until it is freed. */
bool memra_arm_state_quarantined(const memra_arm_state *s);

/* Begins one step. Checked here first: not quarantined; fewer than the window in flight;
 * position + in flight < capacity (MEMRA_E_RANGE, quarantines nothing); the token is in
 * [0, n_vocab) or MEMRA_TOKEN_FROM_DEVICE (which needs an earlier sampled step on this state,
 * or a restore from one). A failure of the backend quarantines the state. */
memra_status memra_arm_step_begin(memra_arm_state *s, const memra_step_args *args, memra_error *err);
/* Ends the oldest step in flight (MEMRA_E_INVALID when none): its logits into `logits` (n_vocab
 * floats, or NULL) and its result. A sampled token outside [0, n_vocab) is MEMRA_E_INTERNAL and
 * quarantines. */
memra_status memra_arm_step_end(memra_arm_state *s, float *logits, memra_step_result *out, memra_error *err);

/* Called by memra_arm_run once per ended step, in order. `drained` is true when no step is in
 * flight after this one (digests may be taken). A non-OK return stops the pass. */
typedef memra_status (*memra_arm_step_fn)(void *user, uint32_t step, const float *logits, const memra_step_result *res,
                                          bool drained, memra_error *err);

/* A windowed pass: steps first .. first+count-1 (step numbers for messages and the callback),
 * keeping up to the arm's window in flight. inputs[step] is each step's token, or inputs ==
 * NULL for the token the previous step sampled on the device. sample: the config (NULL: do
 * not sample). logits: a host buffer of n_vocab floats read back at every step, or NULL. On a
 * failure, whatever is still in flight is ended before returning, and the message says which
 * step failed and where (begin, end, or the callback). */
memra_status memra_arm_run(memra_arm_state *s, const int64_t *inputs, uint32_t first, uint32_t count,
                           const memra_sample_cfg *sample, float *logits, memra_arm_step_fn fn, void *user,
                           memra_error *err);

/* A prefill pass: steps first .. first+count-1 of known inputs (inputs[step]), not sampled, in
 * chunks of the arm's `prefill` (the last one shorter), each through the backend's step_chunk.
 * fn is called once per chunk, after it, with the chunk's last step, the logits of its last
 * position (read into `logits`: n_vocab floats, or NULL), res->token -1, and drained = true
 * (digests may be taken). With prefill=1, or a backend without step_chunk (the core then runs
 * the chunks as single steps), this is memra_arm_run without sampling: fn after every step. A failed chunk commits
 * nothing and quarantines the state; the message names the chunk. No carried token remains: the
 * step after a prefill takes an explicit token. */
memra_status memra_arm_prefill_run(memra_arm_state *s, const int64_t *inputs, uint32_t first, uint32_t count,
                                   float *logits, memra_arm_step_fn fn, void *user, memra_error *err);

/* SHA-256 identity of a state (no step in flight); see memra_digest_kind. */
memra_status memra_arm_digest(memra_arm_state *s, memra_digest_kind kind, uint8_t out[32], memra_error *err);
/* The three digests at once: logits, cache, hidden. */
memra_status memra_arm_digests(memra_arm_state *s, uint8_t logits[32], uint8_t cache[32], uint8_t hidden[32],
                               memra_error *err);
/* Makes dst an exact copy of src (both of one arm, nothing in flight, neither quarantined,
 * dst's capacity >= src's position). */
memra_status memra_arm_state_restore(memra_arm_state *dst, const memra_arm_state *src, memra_error *err);
/* The state's counters (all zero when the backend keeps none). */
memra_state_stats memra_arm_state_stats(const memra_arm_state *s);

/* The graph census of a state (memra.census), and its graphs as DOT files into dir.
 * MEMRA_E_UNSUPPORTED when the backend does not offer them. */
memra_status memra_arm_census(memra_arm_state *s, memra_census_row *rows, uint32_t max_rows, uint32_t *n_rows,
                              memra_error *err);
memra_status memra_arm_dump_graphs(memra_arm_state *s, const char *dir, memra_error *err);

/* ---- Tensor parallelism (the backend's memra.tp extension) ------------------------------ */

/* Ranks of stage `stage` as planned (1 without tensor parallelism; 0 for a stage out of range). */
uint32_t memra_arm_ranks(const memra_arm *a, uint32_t stage);
/* The collective's name and whether it has refusal cells; MEMRA_E_UNSUPPORTED when the arm has no
 * tensor-parallel stage (or its backend does not offer memra.tp). */
memra_status memra_arm_collective(memra_arm *a, char *name, size_t name_size, bool *refusals, memra_error *err);
/* Arms a refusal cell: the all-reduce of (stage, rank, layer, which) at token `position` refuses
 * with `word`; the step that reaches it fails, commits nothing, and quarantines its state. */
memra_status memra_arm_arm_refusal(memra_arm *a, uint32_t stage, uint32_t rank, uint32_t layer, uint32_t which,
                                   uint32_t position, int32_t word, memra_error *err);
memra_status memra_arm_clear_refusals(memra_arm *a, memra_error *err);
/* Epochs of one rank of one stage, n_blocks = 2 * n_layer (see memra_ext_tp_v1). */
memra_status memra_arm_epochs(memra_arm *a, uint32_t stage, uint32_t rank, uint64_t *out, uint32_t n_blocks,
                              memra_error *err);

/* ---- Per-op taps (the backend's memra.ops extension) -------------------------------------- */

/* Whether the arm's backend offers memra.ops. */
bool memra_arm_has_taps(memra_arm *a);
/* One step of `token` (not sampled) at the state's position with taps on: fn sees the logical
 * tensor after every op (memra_ext_ops_v1), then the step is committed as a step_begin and
 * step_end would commit it. The state must have no step in flight. MEMRA_E_UNSUPPORTED when the
 * backend does not offer memra.ops; a failure of the backend (or of fn) quarantines the state. */
memra_status memra_arm_step_tapped(memra_arm_state *s, int64_t token, memra_op_tap_fn fn, void *user, memra_error *err);

#ifdef __cplusplus
}
#endif
#endif
