/* registry_internal.h: what the registry's files share (registry.c: kinds, logging, slots,
 * opening and the listing; registry_manifest.c: manifests and the search of folders;
 * registry_load.c: descriptor checks and loading). Not installed; hidden from libmemra's users. */
#ifndef MEMRA_REGISTRY_INTERNAL_H
#define MEMRA_REGISTRY_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "memra/registry.h"

#define REG_INTERNAL __attribute__((visibility("hidden")))

/* The build writes this file into the folder it builds libmemra into, and never installs it.
 * Its one line names the build tree's plugins.d, relative to that folder (or absolute). */
#define MEMRA_BUILD_MARKER "memra-build-tree"
#define MEMRA_BUILD_MARKER_MAX 4096u
#ifndef MEMRA_REL_PLUGIN_DIR
#define MEMRA_REL_PLUGIN_DIR "memra/plugins.d"
#endif

#define MANIFEST_SUFFIX ".manifest"
#define MANIFEST_MAX_BYTES (64u * 1024u)
#define PLUGIN_NAME_MAX 63u
/* Each open registry owns one slot: its host table and find_plugin trampoline (the host ABI's
 * find_plugin has no context argument, so the slot is what tells registries apart). */
#define REGISTRY_SLOTS 64u

/* The size of a struct up to and including its last ABI-1 member: frozen, unlike sizeof,
 * which grows as members are appended. */
#define PLUGIN_V1_SIZE MEMRA_STRUCT_END(memra_plugin, sampler)
#define PLACEMENT_V1_SIZE MEMRA_STRUCT_END(memra_placement_vtable, plan)
#define BACKEND_V1_SIZE MEMRA_STRUCT_END(memra_backend_vtable, resolve_options)
#define COLLECTIVE_V1_SIZE MEMRA_STRUCT_END(memra_collective_vtable, abort)
#define SAMPLER_V1_SIZE MEMRA_STRUCT_END(memra_sampler_vtable, sample)
#define OP_V1_SIZE MEMRA_STRUCT_END(memra_op_vtable, cuda_gemv)

typedef struct reg_entry {
    memra_registry_entry pub; /* its strings point at the members below */
    char *name;
    char *file;
    char *manifest;
    char *message;
    uint32_t dir_index;
    void *handle;
    const memra_plugin *plugin;
    bool loading;             /* inside its own load: catches a plugin that needs itself */
    bool manifest_bad;        /* the message is the manifest's own problem */
    bool shadows;             /* from a $MEMRA_PLUGIN_PATH folder, hiding one of memra's own folder */
    memra_loaded_plugin prov; /* filled when it loads: what memra_registry_loaded_at returns */
} reg_entry;

typedef struct reg_dir {
    char *path;
    bool from_env;    /* an entry of $MEMRA_PLUGIN_PATH */
    bool own;         /* memra's own folder (its build tree's or its install prefix's) */
    const char *note; /* "" when read; "absent"; else why it could not be read */
    char note_buf[96];
} reg_dir;

struct memra_registry {
    pthread_mutex_t lock; /* recursive: a plugin's init may load another through the host */
    uint32_t slot;
    reg_dir *dirs;
    uint32_t n_dirs;
    reg_entry *entries;
    uint32_t n_entries;
    uint32_t cap_entries;
    uint32_t *load_order; /* entry indices in the order their loads completed */
    uint32_t n_loaded;
    char **warnings; /* about the search itself, for tools to print */
    uint32_t n_warnings;
};

/* registry.c */
REG_INTERNAL __attribute__((format(printf, 3, 4))) void host_log(memra_log_level level, const char *plugin,
                                                                 const char *fmt, ...);
#define registry_log(level, ...) host_log((level), "registry", __VA_ARGS__)
REG_INTERNAL char *str_dup(const char *s);
REG_INTERNAL char *path_join(const char *dir, const char *name);
REG_INTERNAL void path_trim(char *p);
REG_INTERNAL bool str_set(char **slot, const char *s);
REG_INTERNAL __attribute__((format(printf, 2, 3))) void warn_add(memra_registry *r, const char *fmt, ...);
REG_INTERNAL void entry_sync(reg_entry *e);
REG_INTERNAL void entry_mark(reg_entry *e, memra_entry_state state, memra_status status, const char *message);
REG_INTERNAL const char *entry_kind(const reg_entry *e);
/* Each slot's host table (static storage: a host pointer a plugin kept past its registry's close
 * stays readable); registry_load.c hands it to a plugin's init. */
REG_INTERNAL extern memra_host g_slot_host[REGISTRY_SLOTS];

/* registry_manifest.c */
REG_INTERNAL char *trim(char *s);
REG_INTERNAL bool entry_named(const reg_entry *e, const char *name, uint32_t kind);
REG_INTERNAL memra_status scan_dir(memra_registry *r, uint32_t dir_index, memra_error *err);
REG_INTERNAL void mark_duplicates(memra_registry *r);
REG_INTERNAL void search_warnings(memra_registry *r);

#endif
