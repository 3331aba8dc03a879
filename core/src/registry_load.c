/* registry_load.c: loading a plugin the registry found (its file digested, opened, its descriptor
 * and every vtable checked before anything in it is called) and looking plugins up by name. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memra/digest.h"
#include "memra/fileio.h"
#include "memra/registry.h"
#include "registry_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* Checking a descriptor                                                                       */

#define REQUIRE_MEMBER(vt, member)                                                                                     \
    do {                                                                                                               \
        if (!(vt)->member)                                                                                             \
            return memra_fail(err, MEMRA_E_PLUGIN, "%s: %s's %s vtable leaves '%s' NULL, which is mandatory", who,     \
                              e->file, kind, #member);                                                                 \
    } while (0)

static memra_status check_options(const char *who, const reg_entry *e, const char *kind,
                                  const memra_option_spec *options, uint32_t n, memra_error *err) {
    if (n && !options)
        return memra_fail(err, MEMRA_E_PLUGIN, "%s: %s's %s vtable has n_options %u but options is NULL", who, e->file,
                          kind, n);
    for (uint32_t i = 0; i < n; i++)
        if (!options[i].key)
            return memra_fail(err, MEMRA_E_PLUGIN, "%s: %s's %s vtable: option %u has a NULL key", who, e->file, kind,
                              i);
    return MEMRA_OK;
}

static memra_status vtable_too_small(const char *who, const reg_entry *e, const char *kind, uint32_t size, size_t v1,
                                     memra_error *err) {
    return memra_fail(err, MEMRA_E_PLUGIN,
                      "%s: struct too small: %s's %s vtable is %u bytes, ABI %u needs at least %zu", who, e->file, kind,
                      size, MEMRA_ABI_VERSION, v1);
}

/* The vtable of the descriptor's kind: present, large enough, mandatory members set; the
 * vtables of other kinds absent. */
static memra_status check_vtables(const char *who, const reg_entry *e, const memra_plugin *p, memra_error *err) {
    const char *kind = memra_plugin_kind_name(p->kind);
    /* `op` was appended to the descriptor: one that ends before it has no op vtable. */
    const memra_op_vtable *op = MEMRA_HAS_MEMBER(p, memra_plugin, op) ? p->op : NULL;
    const void *tables[] = {p->placement, p->backend, p->collective, p->sampler, op};
    for (uint32_t k = MEMRA_PLUGIN_PLACEMENT; k <= MEMRA_PLUGIN_OP; k++) {
        bool own = k == p->kind;
        if (own && !tables[k - 1])
            return memra_fail(err, MEMRA_E_PLUGIN, "%s: %s has no %s vtable (its descriptor's kind is %s)", who,
                              e->file, kind, kind);
        if (!own && tables[k - 1])
            return memra_fail(err, MEMRA_E_PLUGIN, "%s: %s is a %s but also sets a %s vtable (exactly one allowed)",
                              who, e->file, kind, memra_plugin_kind_name(k));
    }
    switch (p->kind) {
    case MEMRA_PLUGIN_PLACEMENT: {
        const memra_placement_vtable *vt = p->placement;
        if (!MEMRA_HAS_MEMBER(vt, memra_placement_vtable, plan))
            return vtable_too_small(who, e, kind, vt->struct_size, PLACEMENT_V1_SIZE, err);
        REQUIRE_MEMBER(vt, plan);
        return check_options(who, e, kind, vt->options, vt->n_options, err);
    }
    case MEMRA_PLUGIN_BACKEND: {
        const memra_backend_vtable *vt = p->backend;
        if (!MEMRA_HAS_MEMBER(vt, memra_backend_vtable, resolve_options))
            return vtable_too_small(who, e, kind, vt->struct_size, BACKEND_V1_SIZE, err);
        REQUIRE_MEMBER(vt, device_count);
        REQUIRE_MEMBER(vt, open);
        REQUIRE_MEMBER(vt, close);
        REQUIRE_MEMBER(vt, state_new);
        REQUIRE_MEMBER(vt, state_free);
        REQUIRE_MEMBER(vt, step_begin);
        REQUIRE_MEMBER(vt, step_end);
        REQUIRE_MEMBER(vt, digest);
        REQUIRE_MEMBER(vt, state_restore);
        REQUIRE_MEMBER(vt, state_position);
        return check_options(who, e, kind, vt->options, vt->n_options, err);
    }
    case MEMRA_PLUGIN_COLLECTIVE: {
        const memra_collective_vtable *vt = p->collective;
        if (!MEMRA_HAS_MEMBER(vt, memra_collective_vtable, abort))
            return vtable_too_small(who, e, kind, vt->struct_size, COLLECTIVE_V1_SIZE, err);
        REQUIRE_MEMBER(vt, create);
        REQUIRE_MEMBER(vt, destroy);
        REQUIRE_MEMBER(vt, all_reduce_sum_f32);
        return check_options(who, e, kind, vt->options, vt->n_options, err);
    }
    case MEMRA_PLUGIN_SAMPLER: {
        const memra_sampler_vtable *vt = p->sampler;
        if (!MEMRA_HAS_MEMBER(vt, memra_sampler_vtable, sample))
            return vtable_too_small(who, e, kind, vt->struct_size, SAMPLER_V1_SIZE, err);
        REQUIRE_MEMBER(vt, scratch_bytes);
        REQUIRE_MEMBER(vt, sample);
        return MEMRA_OK;
    }
    case MEMRA_PLUGIN_OP: {
        const memra_op_vtable *vt = op;
        if (!MEMRA_HAS_MEMBER(vt, memra_op_vtable, cuda_gemv))
            return vtable_too_small(who, e, kind, vt->struct_size, OP_V1_SIZE, err);
        REQUIRE_MEMBER(vt, create);
        REQUIRE_MEMBER(vt, destroy);
        if ((vt->cpu_gemv_types != 0) != (vt->cpu_gemv != NULL) ||
            (vt->cuda_gemv_types != 0) != (vt->cuda_gemv != NULL))
            return memra_fail(err, MEMRA_E_PLUGIN,
                              "%s: %s's op vtable: a gemv entry point and its weight types must be set together", who,
                              e->file);
        return check_options(who, e, kind, vt->options, vt->n_options, err);
    }
    }
    return memra_fail(err, MEMRA_E_INTERNAL, "%s: unchecked kind %u", who, p->kind);
}

/* The entry symbol must be the plugin's own (dlsym on a handle also searches the libraries
 * it depends on) and its ELF size, when known, must cover the declared struct. */
static memra_status check_symbol(const char *who, const reg_entry *e, void *handle, const void *sym, size_t *sym_size,
                                 memra_error *err) {
    *sym_size = 0;
    struct link_map *own = NULL, *found = NULL;
    const ElfW(Sym) *elf_sym = NULL;
    Dl_info info;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &own) != 0 || !own)
        return MEMRA_OK; /* cannot tell: the checks below still hold */
    if (!dladdr1(sym, &info, (void **)&found, RTLD_DL_LINKMAP) || !found)
        return MEMRA_OK;
    if (found != own)
        return memra_fail(err, MEMRA_E_PLUGIN,
                          "%s: entry symbol missing: %s does not define %s itself (found it in %s, a library it "
                          "depends on)",
                          who, e->file, MEMRA_PLUGIN_SYMBOL, found->l_name ? found->l_name : "?");
    if (dladdr1(sym, &info, (void **)&elf_sym, RTLD_DL_SYMENT) && elf_sym)
        *sym_size = (size_t)elf_sym->st_size;
    return MEMRA_OK;
}

static memra_status check_descriptor(const char *who, const reg_entry *e, const memra_plugin *p, size_t sym_size,
                                     memra_error *err) {
    const size_t head = 2 * sizeof(uint32_t); /* abi_version, struct_size */
    if (sym_size && sym_size < head)
        return memra_fail(err, MEMRA_E_PLUGIN, "%s: struct too small: %s's %s is %zu bytes, ABI %u needs %zu", who,
                          e->file, MEMRA_PLUGIN_SYMBOL, sym_size, MEMRA_ABI_VERSION, (size_t)PLUGIN_V1_SIZE);
    if (p->abi_version != MEMRA_ABI_VERSION)
        return memra_fail(err, MEMRA_E_PLUGIN, "%s: ABI mismatch: %s was built for plugin ABI %u, this memra is ABI %u",
                          who, e->file, p->abi_version, MEMRA_ABI_VERSION);
    if (!MEMRA_HAS_MEMBER(p, memra_plugin, sampler))
        return memra_fail(err, MEMRA_E_PLUGIN,
                          "%s: struct too small: %s has a descriptor of %u bytes, ABI %u needs at least %zu", who,
                          e->file, p->struct_size, MEMRA_ABI_VERSION, (size_t)PLUGIN_V1_SIZE);
    if (sym_size && sym_size < p->struct_size)
        return memra_fail(err, MEMRA_E_PLUGIN,
                          "%s: struct too small: %s's descriptor says %u bytes but its symbol %s is %zu bytes", who,
                          e->file, p->struct_size, MEMRA_PLUGIN_SYMBOL, sym_size);
    if (p->kind != e->pub.kind)
        return memra_fail(err, MEMRA_E_PLUGIN,
                          "%s: kind mismatch: manifest %s says kind %s, %s's descriptor says %s (%u)", who, e->manifest,
                          entry_kind(e), e->file, memra_plugin_kind_name(p->kind), p->kind);
    if (!p->name)
        return memra_fail(err, MEMRA_E_PLUGIN, "%s: name mismatch: %s's descriptor has no name (manifest %s says '%s')",
                          who, e->file, e->manifest, e->name);
    if (strncmp(p->name, e->name, PLUGIN_NAME_MAX + 1) != 0)
        return memra_fail(err, MEMRA_E_PLUGIN,
                          "%s: name mismatch: manifest %s says name '%s', %s's descriptor says '%.*s'", who,
                          e->manifest, e->name, e->file, (int)PLUGIN_NAME_MAX, p->name);
    return check_vtables(who, e, p, err);
}

/* ------------------------------------------------------------------------------------------ */
/* Loading                                                                                     */

/* The SHA-256 of e's shared object, read through one descriptor whose stat is returned. A file
 * that is not regular is refused before it is read (a FIFO would block, a device never end). */
static memra_status file_digest(const char *who, const reg_entry *e, uint8_t sha[32], struct stat *sb,
                                memra_error *err) {
    int fd = open(e->file, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return memra_fail(err, MEMRA_E_PLUGIN, "%s: cannot open %s (named by %s): %s", who, e->file, e->manifest,
                          strerror(errno));
    memra_status st = MEMRA_OK;
    memra_sha256_ctx *ctx = NULL;
    char *buf = NULL;
    if (fstat(fd, sb) != 0) {
        st = memra_fail(err, MEMRA_E_PLUGIN, "%s: cannot stat %s: %s", who, e->file, strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb->st_mode)) {
        st = memra_fail(err, MEMRA_E_PLUGIN, "%s: %s (named by %s) is %s, not a regular file: refused", who, e->file,
                        e->manifest, memra_file_type_name(sb->st_mode));
        goto out;
    }
    uint64_t failures = memra_sha256_failures();
    enum { CHUNK = 1u << 16 };
    buf = malloc(CHUNK);
    ctx = memra_sha256_new();
    if (!buf || !ctx) {
        st = memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory hashing %s", who, e->file);
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, buf, CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            st = memra_fail(err, MEMRA_E_PLUGIN, "%s: cannot read %s: %s", who, e->file, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        memra_sha256_update(ctx, buf, (size_t)n);
    }
    memra_sha256_final(ctx, sha);
    ctx = NULL;
    if (memra_sha256_failures() != failures)
        st = memra_fail(err, MEMRA_E_PLUGIN, "%s: the SHA-256 of %s could not be computed", who, e->file);
out:
    if (ctx) {
        uint8_t discard[32];
        memra_sha256_final(ctx, discard);
    }
    free(buf);
    close(fd);
    return st;
}

/* Opens, checks and initialises e's shared object. On success e holds the handle. */
static memra_status entry_open(memra_registry *r, reg_entry *e, memra_error *err) {
    char who[PLUGIN_NAME_MAX + 48];
    snprintf(who, sizeof who, "plugin '%s' (%s)", e->name, entry_kind(e));
    struct stat sb;
    if (stat(e->file, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return memra_fail(err, MEMRA_E_PLUGIN, "%s: file missing: %s does not exist (named by %s)", who, e->file,
                              e->manifest);
        return memra_fail(err, MEMRA_E_PLUGIN, "%s: cannot reach %s (named by %s): %s", who, e->file, e->manifest,
                          strerror(errno));
    }
    struct stat hashed;
    uint8_t sha[32];
    memra_status st = file_digest(who, e, sha, &hashed, err);
    if (st != MEMRA_OK)
        return st;
    dlerror();
    void *handle = dlopen(e->file, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        return memra_fail(err, MEMRA_E_PLUGIN, "%s: dlopen failed for %s: %s", who, e->file, why ? why : "unknown");
    }
    /* The digest is of the file loaded: the same inode, unchanged since it was read. */
    if (stat(e->file, &sb) != 0 || sb.st_dev != hashed.st_dev || sb.st_ino != hashed.st_ino ||
        sb.st_size != hashed.st_size || sb.st_mtim.tv_sec != hashed.st_mtim.tv_sec ||
        sb.st_mtim.tv_nsec != hashed.st_mtim.tv_nsec) {
        st = memra_fail(err, MEMRA_E_PLUGIN, "%s: %s changed while it was being loaded: its digest cannot be trusted",
                        who, e->file);
        goto err_close;
    }
    dlerror();
    const memra_plugin *p = dlsym(handle, MEMRA_PLUGIN_SYMBOL);
    if (!p) {
        st = memra_fail(err, MEMRA_E_PLUGIN,
                        "%s: entry symbol missing: %s does not export %s (not a memra plugin, or built for another "
                        "ABI)",
                        who, e->file, MEMRA_PLUGIN_SYMBOL);
        goto err_close;
    }
    size_t sym_size;
    if ((st = check_symbol(who, e, handle, p, &sym_size, err)) != MEMRA_OK)
        goto err_close;
    if ((st = check_descriptor(who, e, p, sym_size, err)) != MEMRA_OK)
        goto err_close;
    if (p->init) {
        memra_error init_err;
        memra_error_clear(&init_err);
        memra_status ist = p->init(&g_slot_host[r->slot], &init_err);
        if (ist != MEMRA_OK) {
            st = memra_fail(err, ist, "%s: init failed in %s (%s): %s", who, e->file, memra_status_name(ist),
                            init_err.msg[0] ? init_err.msg : "no message");
            goto err_close;
        }
    }
    e->handle = handle;
    e->plugin = p;
    e->prov = (memra_loaded_plugin){
        .plugin = p,
        .name = e->name,
        .kind = p->kind,
        .version = p->version ? p->version : "",
        .path = e->file,
        .from_env = r->dirs[e->dir_index].from_env,
        .shadows = e->shadows,
    };
    memcpy(e->prov.sha256, sha, sizeof sha);
    return MEMRA_OK;
err_close:
    dlclose(handle);
    return st;
}

static memra_status entry_load(memra_registry *r, reg_entry *e, memra_error *err) {
    if (e->pub.state == MEMRA_ENTRY_LOADED)
        return MEMRA_OK;
    if (e->pub.state == MEMRA_ENTRY_FAILED && e->manifest_bad)
        return memra_fail(err, e->pub.status, "plugin '%s' (%s): manifest malformed: %s", e->name, entry_kind(e),
                          e->message ? e->message : e->manifest);
    if (e->pub.state == MEMRA_ENTRY_FAILED)
        return memra_fail(err, e->pub.status ? e->pub.status : MEMRA_E_PLUGIN, "%s",
                          e->message ? e->message : "failed earlier");
    if (e->loading)
        return memra_fail(err, MEMRA_E_PLUGIN,
                          "plugin '%s' (%s): asked for again while it is being loaded "
                          "(a plugin that needs itself, directly or through others)",
                          e->name, entry_kind(e));
    e->loading = true;
    memra_error local;
    memra_status st = entry_open(r, e, &local);
    e->loading = false;
    if (st != MEMRA_OK) {
        entry_mark(e, MEMRA_ENTRY_FAILED, st, local.msg);
        return memra_fail(err, st, "%s", local.msg);
    }
    r->load_order[r->n_loaded++] = (uint32_t)(e - r->entries);
    entry_mark(e, MEMRA_ENTRY_LOADED, MEMRA_OK, "");
    return MEMRA_OK;
}

/* Appends s to buf (size cap, used so far *len), cutting with "..." when it does not fit. */
static void msg_append(char *buf, size_t cap, size_t *len, const char *s) {
    if (*len + 1 >= cap)
        return;
    int n = snprintf(buf + *len, cap - *len, "%s", s);
    if (n < 0)
        return;
    if ((size_t)n >= cap - *len) {
        *len = cap - 1;
        memcpy(buf + cap - 4, "...", 4);
        return;
    }
    *len += (size_t)n;
}

/* "no sampler plugin named 'x'; searched: /a (absent), /b; sampler plugins found: p, q". */
static memra_status not_found(const memra_registry *r, const char *name, memra_plugin_kind kind, memra_error *err) {
    char msg[MEMRA_ERROR_MSG_MAX];
    size_t len = 0;
    const char *kname = memra_plugin_kind_name(kind);
    char part[PATH_MAX + 128];
    snprintf(part, sizeof part, "no %s plugin named '%s'; searched: ", kname, name);
    msg_append(msg, sizeof msg, &len, part);
    for (uint32_t i = 0; i < r->n_dirs; i++) {
        snprintf(part, sizeof part, "%s%s%s%s%s", i ? ", " : "", r->dirs[i].path, r->dirs[i].note[0] ? " (" : "",
                 r->dirs[i].note, r->dirs[i].note[0] ? ")" : "");
        msg_append(msg, sizeof msg, &len, part);
    }
    if (r->n_dirs == 0)
        msg_append(msg, sizeof msg, &len, "no folders");
    snprintf(part, sizeof part, "; %s plugins found: ", kname);
    msg_append(msg, sizeof msg, &len, part);
    uint32_t listed = 0;
    for (uint32_t i = 0; i < r->n_entries; i++) {
        const reg_entry *e = &r->entries[i];
        if (!e->name || e->pub.kind != kind || e->pub.state == MEMRA_ENTRY_SHADOWED)
            continue;
        snprintf(part, sizeof part, "%s%s%s", listed++ ? ", " : "", e->name,
                 e->pub.state == MEMRA_ENTRY_FAILED ? " (failed)" : "");
        msg_append(msg, sizeof msg, &len, part);
    }
    if (!listed)
        msg_append(msg, sizeof msg, &len, "none");
    /* Same name under another kind, or in a manifest whose kind could not be read. */
    for (uint32_t i = 0; i < r->n_entries; i++) {
        const reg_entry *e = &r->entries[i];
        if (!e->name || strcmp(e->name, name) != 0 || e->pub.state == MEMRA_ENTRY_SHADOWED)
            continue;
        if (e->pub.kind)
            snprintf(part, sizeof part, "; '%s' exists as a %s (%s)", name, entry_kind(e), e->manifest);
        else
            snprintf(part, sizeof part, "; %s names '%s' but is malformed", e->manifest, name);
        msg_append(msg, sizeof msg, &len, part);
    }
    /* $MEMRA_PLUGIN_PATH entries skipped at open (relative or empty): the likeliest reason a
     * plugin the caller pointed at is not found, and otherwise only in the log. */
    for (uint32_t i = 0; i < r->n_warnings; i++)
        if (strncmp(r->warnings[i], "MEMRA_PLUGIN_PATH entry", 23) == 0) {
            msg_append(msg, sizeof msg, &len, "; ");
            msg_append(msg, sizeof msg, &len, r->warnings[i]);
        }
    return memra_fail(err, MEMRA_E_PLUGIN, "%s", msg);
}

memra_status memra_registry_load(memra_registry *r, const char *name, memra_plugin_kind kind, const memra_plugin **out,
                                 memra_error *err) {
    if (out)
        *out = NULL;
    if (!r || !name || !out)
        return memra_fail(err, MEMRA_E_INVALID, "memra_registry_load: %s is NULL",
                          !r      ? "registry"
                          : !name ? "name"
                                  : "out");
    if (kind < MEMRA_PLUGIN_PLACEMENT || kind > MEMRA_PLUGIN_OP)
        return memra_fail(err, MEMRA_E_INVALID, "memra_registry_load('%.64s'): unknown plugin kind %u", name,
                          (unsigned)kind);
    pthread_mutex_lock(&r->lock);
    reg_entry *e = NULL;
    for (uint32_t i = 0; i < r->n_entries && !e; i++)
        if (r->entries[i].pub.state != MEMRA_ENTRY_SHADOWED && entry_named(&r->entries[i], name, kind))
            e = &r->entries[i];
    memra_status st = e ? entry_load(r, e, err) : not_found(r, name, kind, err);
    if (st == MEMRA_OK)
        *out = e->plugin;
    pthread_mutex_unlock(&r->lock);
    return st;
}

void memra_registry_load_all(memra_registry *r) {
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    for (uint32_t i = 0; i < r->n_entries; i++) {
        reg_entry *e = &r->entries[i];
        if (e->pub.state == MEMRA_ENTRY_FOUND)
            entry_load(r, e, NULL);
    }
    pthread_mutex_unlock(&r->lock);
}

uint32_t memra_plugin_option_specs(const memra_plugin *p, const memra_option_spec **specs) {
    const memra_option_spec *o = NULL;
    uint32_t n = 0;
    if (p && p->kind == MEMRA_PLUGIN_PLACEMENT && MEMRA_HAS_MEMBER(p->placement, memra_placement_vtable, n_options)) {
        o = p->placement->options;
        n = p->placement->n_options;
    } else if (p && p->kind == MEMRA_PLUGIN_BACKEND && MEMRA_HAS_MEMBER(p->backend, memra_backend_vtable, n_options)) {
        o = p->backend->options;
        n = p->backend->n_options;
    } else if (p && p->kind == MEMRA_PLUGIN_COLLECTIVE &&
               MEMRA_HAS_MEMBER(p->collective, memra_collective_vtable, n_options)) {
        o = p->collective->options;
        n = p->collective->n_options;
    } else if (p && p->kind == MEMRA_PLUGIN_OP && MEMRA_HAS_MEMBER(p, memra_plugin, op) &&
               MEMRA_HAS_MEMBER(p->op, memra_op_vtable, n_options)) {
        o = p->op->options;
        n = p->op->n_options;
    }
    if (!o)
        n = 0;
    if (specs)
        *specs = o;
    return n;
}
