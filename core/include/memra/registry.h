/* memra/registry.h: finding, loading and checking plugins.
 *
 * Manifests (one small file per plugin, `*.manifest`, in a plugins.d folder) say name, kind and
 * file:
 *     # comment
 *     name = cpu
 *     kind = backend
 *     file = libmemra-backend-cpu.so      (relative to the manifest's folder, or absolute)
 * Folders are searched in order: each entry of $MEMRA_PLUGIN_PATH (colon-separated, absolute
 * paths only: an empty or relative entry is ignored with a warning, so the current directory is
 * never searched), then one folder found from where the loaded libmemra lies: in a build tree
 * (the build writes a "memra-build-tree" marker beside libmemra and never installs it), that
 * tree's plugins.d; anywhere else, the install prefix's <libdir>/memra/plugins.d. So an
 * installed tool never sees a build tree's plugins, nor a build tree an install's. The first
 * manifest of a (name, kind) wins; a second one in the same folder is a "duplicate" error, one
 * in a later folder is listed as shadowed.
 *
 * Loading is explicit: memra_registry_load gets exactly the plugin named, or an error saying
 * why; never a substitute. */
#ifndef MEMRA_REGISTRY_H
#define MEMRA_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>

#include "memra/plugin.h"
#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memra_registry memra_registry;

typedef enum memra_entry_state {
    MEMRA_ENTRY_FOUND = 0,   /* manifest read, not loaded yet */
    MEMRA_ENTRY_LOADED = 1,  /* loaded and accepted */
    MEMRA_ENTRY_FAILED = 2,  /* manifest or load failed: see message */
    MEMRA_ENTRY_SHADOWED = 3 /* an earlier folder has the same name and kind */
} memra_entry_state;

typedef struct memra_registry_entry {
    const char *name;     /* "" when the manifest did not say */
    uint32_t kind;        /* memra_plugin_kind; 0 when unknown */
    const char *file;     /* absolute path of the shared object, or "" */
    const char *manifest; /* path of the manifest */
    const char *version;  /* the plugin's version once loaded, else "" */
    memra_entry_state state;
    memra_status status; /* why it failed, when it did */
    const char *message; /* the failure message, or "" */
} memra_registry_entry;

/* Scans the default search path. A malformed manifest does not fail the scan: it becomes an
 * entry in state FAILED whose message names the file and line. */
memra_status memra_registry_open(memra_registry **out, memra_error *err);
/* Scans exactly these folders, in order (tests; tools with --plugin-path). */
memra_status memra_registry_open_dirs(const char *const *dirs, uint32_t n_dirs, memra_registry **out, memra_error *err);
/* Unloads every plugin (calling fini) and frees the registry. */
void memra_registry_close(memra_registry *r);

/* The folders searched, in order, for messages and `memra plugins`. */
uint32_t memra_registry_dir_count(const memra_registry *r);
const char *memra_registry_dir_at(const memra_registry *r, uint32_t i);

uint32_t memra_registry_count(const memra_registry *r);
const memra_registry_entry *memra_registry_entry_at(const memra_registry *r, uint32_t i);

/* Loads (once) and returns the plugin (name, kind). Distinct messages for: no such plugin (with
 * the folders searched and the names of that kind found), manifest malformed (file and line),
 * file missing, dlopen failure (dlerror text), entry symbol missing, ABI mismatch (both
 * versions), struct too small (both sizes), kind mismatch (manifest against descriptor), name
 * mismatch, duplicate name, and a failing init. */
memra_status memra_registry_load(memra_registry *r, const char *name, memra_plugin_kind kind, const memra_plugin **out,
                                 memra_error *err);
/* Tries to load every entry (for `memra plugins`); entries record their own status. */
void memra_registry_load_all(memra_registry *r);

/* The host table handed to plugins loaded by this registry. */
const memra_host *memra_registry_host(memra_registry *r);

/* Provenance: every plugin this registry loaded, whether by memra_registry_load or through the
 * host table's find_plugin (one plugin building on another), in load order, with the file's
 * SHA-256 taken when it was loaded. `from_env` says it was found in a $MEMRA_PLUGIN_PATH folder;
 * `shadows` that memra's own folder holds a plugin of the same name and kind which it hid. */
typedef struct memra_loaded_plugin {
    const memra_plugin *plugin;
    const char *name;
    uint32_t kind;
    const char *version;
    const char *path; /* absolute path of the shared object */
    uint8_t sha256[32];
    bool from_env;
    bool shadows;
} memra_loaded_plugin;
uint32_t memra_registry_loaded_count(const memra_registry *r);
const memra_loaded_plugin *memra_registry_loaded_at(const memra_registry *r, uint32_t i);
/* The provenance of a plugin this registry loaded, or NULL. */
const memra_loaded_plugin *memra_registry_provenance(const memra_registry *r, const memra_plugin *p);

/* Warnings about the search itself, one line each, for tools to print on stderr (the library
 * never prints): an empty, relative or missing folder in $MEMRA_PLUGIN_PATH; a plugin there that
 * shadows one of memra's own folder ("<name> (<kind>) from <path> hides memra's own <path>"). */
uint32_t memra_registry_warning_count(const memra_registry *r);
const char *memra_registry_warning_at(const memra_registry *r, uint32_t i);

/* The arm keys a loaded plugin reads (its vtable's option specs), for --help and `memra plugins`:
 * the count, with *specs pointing at them; 0 and NULL for a sampler or a vtable without specs.
 * How tools list a plugin's keys without opening an arm on it. */
uint32_t memra_plugin_option_specs(const memra_plugin *p, const memra_option_spec **specs);

/* The application's log sink (NULL: silent). Applies to every registry of the process. */
typedef void (*memra_log_sink)(memra_log_level level, const char *plugin, const char *line, void *user);
void memra_set_log_sink(memra_log_sink sink, void *user);

#ifdef __cplusplus
}
#endif
#endif
