/* memra/op.h: op plugins as a backend binds them (memra/plugin.h's memra_op_vtable). An arm key
 * `op.KIND=NAME[:KEY=VALUE...]` names the op plugin NAME for KIND (rmsnorm, rope, attention,
 * gemv.TYPE); memra_op_set_open reads every such key of an arm, finds each plugin through the
 * host table (so the registry's provenance, and the gate's protocol record, list it with its file
 * and sha256), checks that it serves the backend's family and that kind, checks its own keys and
 * creates an instance. The backend then calls the instance's entry point wherever it would run
 * its built-in op. */
#ifndef MEMRA_OP_H
#define MEMRA_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memra/plugin.h"
#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEMRA_OP_KEY_PREFIX "op."
#define MEMRA_OP_SET_MAX 24u
#define MEMRA_OP_NAME_MAX 64u
/* The value of an op.KIND key that selects the backend's own op: its default. */
#define MEMRA_OP_BUILTIN "builtin"

/* "rmsnorm", "rope", "attention", "gemv", "topk"; "unknown" otherwise. */
const char *memra_op_kind_name(uint32_t kind);
/* Parses an arm key "op.KIND" ("op.rmsnorm", "op.gemv.q8_0": gemv's weight type is the GGUF type
 * name in lower case) into kind and type (0 unless gemv). False when the key does not start with
 * "op." or names no op kind or type. */
bool memra_op_key_parse(const char *key, memra_op_kind *kind, uint32_t *type);
/* An op key's value, NAME[:ITEM...] with items KEY=VALUE separated by ':' or ',': the plugin's
 * name into name, the items into opts. MEMRA_E_INVALID naming key and value when malformed. */
memra_status memra_op_value_parse(const char *key, const char *value, char *name, size_t size, memra_options *opts,
                                  memra_error *err);
/* Whether vt has the entry point of (family "cpu" or "cuda", kind, type). */
bool memra_op_serves(const memra_op_vtable *vt, const char *family, memra_op_kind kind, uint32_t type);
/* What vt serves, "cpu rmsnorm, cuda gemv.f32, ..." ("nothing" when none), into buf. */
void memra_op_served(const memra_op_vtable *vt, char *buf, size_t size);

/* One op plugin bound for one (kind, type) of an arm. */
typedef struct memra_op_binding {
    memra_op_kind kind;
    uint32_t type;
    char key[MEMRA_OPT_KEY_MAX];  /* the arm key, "op.rmsnorm" */
    char name[MEMRA_OP_NAME_MAX]; /* the plugin's name */
    const memra_op_vtable *vt;
    memra_op *op; /* the instance */
} memra_op_binding;

typedef struct memra_op_set {
    uint32_t n;
    memra_op_binding items[MEMRA_OP_SET_MAX];
} memra_op_set;

/* Binds every op.KIND key of `arm` for a backend of `family` ("cpu", "cuda"), except those whose
 * value is MEMRA_OP_BUILTIN (the built-in op, as with no key): a malformed value,
 * an unknown op kind, a plugin that does not serve (family, kind) or a key the plugin does not
 * take is MEMRA_E_INVALID naming the key, the plugin and the family; a plugin that cannot be
 * found or loaded is the registry's error. On failure nothing stays bound. */
memra_status memra_op_set_open(const memra_host *host, const char *family, const memra_options *arm, memra_op_set *set,
                               memra_error *err);
/* Destroys every instance (no call in flight). A zeroed set is fine. */
void memra_op_set_close(memra_op_set *set);
/* The binding of (kind, type), or NULL: the backend runs its built-in op. */
const memra_op_binding *memra_op_set_find(const memra_op_set *set, memra_op_kind kind, uint32_t type);

#ifdef __cplusplus
}
#endif
#endif
