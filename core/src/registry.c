/* registry.c: finds plugins through their manifests, loads them explicitly, checks every
 * descriptor before calling anything in it, and hands each plugin its registry's host table.
 *
 * Search order: $MEMRA_PLUGIN_PATH (absolute entries only), then the plugins.d of wherever the
 * loaded libmemra lies: its build tree's when it lies in one (MEMRA_BUILD_MARKER beside it says
 * so), else its install prefix's. An installed tool never reads a build tree, and a tool run
 * from a build tree reads that tree only. The current directory is never searched. Every
 * refusal has its own message naming the manifest or the file. */
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
/* Kinds                                                                                       */

const char *memra_plugin_kind_name(uint32_t kind) {
    switch (kind) {
    case MEMRA_PLUGIN_PLACEMENT: return "placement";
    case MEMRA_PLUGIN_BACKEND: return "backend";
    case MEMRA_PLUGIN_COLLECTIVE: return "collective";
    case MEMRA_PLUGIN_SAMPLER: return "sampler";
    case MEMRA_PLUGIN_OP: return "op";
    }
    return "unknown";
}

bool memra_plugin_kind_parse(const char *word, memra_plugin_kind *out) {
    static const memra_plugin_kind kinds[] = {MEMRA_PLUGIN_PLACEMENT, MEMRA_PLUGIN_BACKEND, MEMRA_PLUGIN_COLLECTIVE,
                                              MEMRA_PLUGIN_SAMPLER, MEMRA_PLUGIN_OP};
    if (!word)
        return false;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (strcmp(word, memra_plugin_kind_name(kinds[i])) == 0) {
            if (out)
                *out = kinds[i];
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------------------------------ */
/* Logging: one sink for the process, silent by default                                        */

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static memra_log_sink g_log_sink;
static void *g_log_user;

void memra_set_log_sink(memra_log_sink sink, void *user) {
    pthread_mutex_lock(&g_log_lock);
    g_log_sink = sink;
    g_log_user = user;
    pthread_mutex_unlock(&g_log_lock);
}

static void log_v(memra_log_level level, const char *plugin, const char *fmt, va_list ap) {
    pthread_mutex_lock(&g_log_lock);
    memra_log_sink sink = g_log_sink;
    void *user = g_log_user;
    pthread_mutex_unlock(&g_log_lock);
    if (!sink || !fmt)
        return;
    char line[MEMRA_ERROR_MSG_MAX];
    vsnprintf(line, sizeof line, fmt, ap);
    sink(level, plugin ? plugin : "", line, user);
}

void host_log(memra_log_level level, const char *plugin, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_v(level, plugin, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------------------------ */
/* Slots: one host table per open registry                                                     */

static pthread_mutex_t g_slot_lock = PTHREAD_MUTEX_INITIALIZER;
static memra_registry *g_slot_owner[REGISTRY_SLOTS];
/* Static, so that a host pointer a plugin kept past its registry's close stays readable; its
 * find_plugin then fails with a message instead of touching freed memory. */
memra_host g_slot_host[REGISTRY_SLOTS];

static memra_status find_plugin_in_slot(uint32_t slot, const char *name, memra_plugin_kind kind,
                                        const memra_plugin **out, memra_error *err) {
    pthread_mutex_lock(&g_slot_lock);
    memra_registry *r = g_slot_owner[slot];
    pthread_mutex_unlock(&g_slot_lock);
    if (!r) {
        if (out)
            *out = NULL;
        return memra_fail(err, MEMRA_E_PLUGIN, "find_plugin('%s'): the registry that loaded the caller is closed",
                          name ? name : "(null)");
    }
    return memra_registry_load(r, name, kind, out, err);
}

#define FIND_SLOT(b, d)                                                                                                \
    static memra_status find_plugin_slot##b##d(const char *name, memra_plugin_kind kind, const memra_plugin **out,     \
                                               memra_error *err) {                                                     \
        return find_plugin_in_slot((b)*8u + (d), name, kind, out, err);                                                \
    }
#define FIND_SLOT8(b)                                                                                                  \
    FIND_SLOT(b, 0)                                                                                                    \
    FIND_SLOT(b, 1) FIND_SLOT(b, 2) FIND_SLOT(b, 3) FIND_SLOT(b, 4) FIND_SLOT(b, 5) FIND_SLOT(b, 6) FIND_SLOT(b, 7)
FIND_SLOT8(0)
FIND_SLOT8(1)
FIND_SLOT8(2)
FIND_SLOT8(3)
FIND_SLOT8(4)
FIND_SLOT8(5)
FIND_SLOT8(6)
FIND_SLOT8(7)
#define FIND_REF8(b)                                                                                                   \
    find_plugin_slot##b##0, find_plugin_slot##b##1, find_plugin_slot##b##2, find_plugin_slot##b##3,                    \
        find_plugin_slot##b##4, find_plugin_slot##b##5, find_plugin_slot##b##6, find_plugin_slot##b##7
typedef memra_status (*find_plugin_fn)(const char *, memra_plugin_kind, const memra_plugin **, memra_error *);
/* Slot 8b+d's trampoline is find_plugin_slot<b><d>. */
static const find_plugin_fn g_slot_find[REGISTRY_SLOTS] = {FIND_REF8(0), FIND_REF8(1), FIND_REF8(2), FIND_REF8(3),
                                                           FIND_REF8(4), FIND_REF8(5), FIND_REF8(6), FIND_REF8(7)};

static memra_status slot_take(memra_registry *r, memra_error *err) {
    pthread_mutex_lock(&g_slot_lock);
    for (uint32_t i = 0; i < REGISTRY_SLOTS; i++) {
        if (g_slot_owner[i])
            continue;
        g_slot_owner[i] = r;
        g_slot_host[i] = (memra_host){
            .abi_version = MEMRA_ABI_VERSION,
            .struct_size = (uint32_t)sizeof(memra_host),
            .log = host_log,
            .find_plugin = g_slot_find[i],
            .sha256 = memra_sha256,
            .sha256_new = memra_sha256_new,
            .sha256_update = memra_sha256_update,
            .sha256_final = memra_sha256_final,
            .fail = memra_fail,
        };
        r->slot = i;
        pthread_mutex_unlock(&g_slot_lock);
        return MEMRA_OK;
    }
    pthread_mutex_unlock(&g_slot_lock);
    return memra_fail(err, MEMRA_E_NOMEM, "plugin registry: %u registries are open already (the most at once)",
                      REGISTRY_SLOTS);
}

static void slot_release(memra_registry *r) {
    pthread_mutex_lock(&g_slot_lock);
    if (r->slot < REGISTRY_SLOTS && g_slot_owner[r->slot] == r)
        g_slot_owner[r->slot] = NULL;
    pthread_mutex_unlock(&g_slot_lock);
}

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                               */

char *str_dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* Drops trailing slashes, keeping "/" itself. */
void path_trim(char *p) {
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
}

/* Replaces *slot with a copy of s; false when out of memory (the old value is kept). */
bool str_set(char **slot, const char *s) {
    char *d = str_dup(s);
    if (!d)
        return false;
    free(*slot);
    *slot = d;
    return true;
}

/* Records one warning about the search (and logs it). Out of memory drops it: the log saw it. */
void warn_add(memra_registry *r, const char *fmt, ...) {
    char line[MEMRA_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    for (char *c = line; *c; c++) /* one line whatever a path holds */
        if ((unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f)
            *c = '?';
    registry_log(MEMRA_LOG_WARN, "%s", line);
    char **grown = realloc(r->warnings, ((size_t)r->n_warnings + 1) * sizeof *grown);
    if (!grown)
        return;
    r->warnings = grown;
    if ((r->warnings[r->n_warnings] = str_dup(line)) != NULL)
        r->n_warnings++;
}

void entry_sync(reg_entry *e) {
    e->pub.name = e->name ? e->name : "";
    e->pub.file = e->file ? e->file : "";
    e->pub.manifest = e->manifest ? e->manifest : "";
    e->pub.message = e->message ? e->message : "";
    e->pub.version = (e->plugin && e->plugin->version) ? e->plugin->version : "";
}

void entry_mark(reg_entry *e, memra_entry_state state, memra_status status, const char *message) {
    e->pub.state = state;
    e->pub.status = status;
    if (!str_set(&e->message, message)) {
        free(e->message);
        e->message = NULL; /* out of memory: the status still says what happened */
    }
    entry_sync(e);
}

const char *entry_kind(const reg_entry *e) { return memra_plugin_kind_name(e->pub.kind); }

/* ------------------------------------------------------------------------------------------ */
/* Opening and closing                                                                         */

/* Appends a folder (absolute; duplicates are dropped, their flags joined). Takes ownership of
 * path. */
static memra_status dir_add(memra_registry *r, char *path, bool from_env, bool own, memra_error *err) {
    if (!path)
        return memra_fail(err, MEMRA_E_NOMEM, "plugin registry: out of memory");
    path_trim(path);
    for (uint32_t i = 0; i < r->n_dirs; i++)
        if (strcmp(r->dirs[i].path, path) == 0) {
            r->dirs[i].from_env |= from_env;
            r->dirs[i].own |= own;
            free(path);
            return MEMRA_OK;
        }
    reg_dir *grown = realloc(r->dirs, ((size_t)r->n_dirs + 1) * sizeof *grown);
    if (!grown) {
        free(path);
        return memra_fail(err, MEMRA_E_NOMEM, "plugin registry: out of memory");
    }
    r->dirs = grown;
    memset(&r->dirs[r->n_dirs], 0, sizeof r->dirs[0]);
    r->dirs[r->n_dirs].path = path;
    r->dirs[r->n_dirs].note = "";
    r->dirs[r->n_dirs].from_env = from_env;
    r->dirs[r->n_dirs].own = own;
    r->n_dirs++;
    return MEMRA_OK;
}

static memra_status registry_new(memra_registry **out, memra_error *err) {
    memra_registry *r = calloc(1, sizeof *r);
    if (!r)
        return memra_fail(err, MEMRA_E_NOMEM, "plugin registry: out of memory");
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    int rc = pthread_mutex_init(&r->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (rc != 0) {
        free(r);
        return memra_fail(err, MEMRA_E_INTERNAL, "plugin registry: cannot create its lock: %s", strerror(rc));
    }
    r->slot = REGISTRY_SLOTS;
    memra_status st = slot_take(r, err);
    if (st != MEMRA_OK) {
        pthread_mutex_destroy(&r->lock);
        free(r);
        return st;
    }
    *out = r;
    return MEMRA_OK;
}

/* Scans every folder in order, then settles duplicates and shadows. */
static memra_status registry_scan(memra_registry *r, memra_error *err) {
    r->load_order = NULL;
    for (uint32_t i = 0; i < r->n_dirs; i++) {
        memra_status st = scan_dir(r, i, err);
        if (st != MEMRA_OK)
            return st;
    }
    mark_duplicates(r);
    search_warnings(r);
    if (r->n_entries) {
        r->load_order = calloc(r->n_entries, sizeof *r->load_order);
        if (!r->load_order)
            return memra_fail(err, MEMRA_E_NOMEM, "plugin registry: out of memory");
    }
    return MEMRA_OK;
}

/* A folder given by a caller: relative ones are taken against the current directory now,
 * because the caller named them explicitly. */
static char *dir_absolute(const char *dir) {
    if (dir[0] == '/')
        return str_dup(dir);
    char *real = realpath(dir, NULL);
    if (real)
        return real;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return NULL;
    return path_join(cwd, dir);
}

memra_status memra_registry_open_dirs(const char *const *dirs, uint32_t n_dirs, memra_registry **out,
                                      memra_error *err) {
    if (!out)
        return memra_fail(err, MEMRA_E_INVALID, "memra_registry_open_dirs: out is NULL");
    *out = NULL;
    if (n_dirs && !dirs)
        return memra_fail(err, MEMRA_E_INVALID, "memra_registry_open_dirs: %u folders but dirs is NULL", n_dirs);
    for (uint32_t i = 0; i < n_dirs; i++)
        if (!dirs[i] || !dirs[i][0])
            return memra_fail(err, MEMRA_E_INVALID, "memra_registry_open_dirs: plugin folder %u is empty", i);
    memra_registry *r;
    memra_status st = registry_new(&r, err);
    if (st != MEMRA_OK)
        return st;
    for (uint32_t i = 0; i < n_dirs && st == MEMRA_OK; i++)
        st = dir_add(r, dir_absolute(dirs[i]), false, false, err);
    if (st == MEMRA_OK)
        st = registry_scan(r, err);
    if (st != MEMRA_OK) {
        memra_registry_close(r);
        return st;
    }
    *out = r;
    return MEMRA_OK;
}

/* Adds each absolute entry of $MEMRA_PLUGIN_PATH; empty and relative ones are skipped, so that
 * the current directory is never searched. */
static memra_status dirs_from_env(memra_registry *r, memra_error *err) {
    const char *env = getenv("MEMRA_PLUGIN_PATH");
    if (!env || !*env)
        return MEMRA_OK;
    char *copy = str_dup(env);
    if (!copy)
        return memra_fail(err, MEMRA_E_NOMEM, "plugin registry: out of memory");
    memra_status st = MEMRA_OK;
    char *rest = copy;
    for (unsigned index = 1; rest && st == MEMRA_OK; index++) {
        char *item = rest;
        char *colon = strchr(rest, ':');
        if (colon)
            *colon++ = '\0';
        rest = colon;
        if (item[0] == '/')
            st = dir_add(r, str_dup(item), true, false, err);
        else if (item[0] == '\0')
            warn_add(r, "MEMRA_PLUGIN_PATH entry %u is empty: ignored (the current directory is never searched)",
                     index);
        else
            warn_add(r,
                     "MEMRA_PLUGIN_PATH entry %u '%s' is not absolute: ignored (the current directory is never "
                     "searched)",
                     index, item);
    }
    free(copy);
    return st;
}

/* The build tree's plugins.d named by the marker in lib_dir, or NULL (with *is_build false)
 * when there is no marker: libmemra is installed. A marker that cannot be read or names
 * nothing still means a build tree: *is_build is true, NULL is returned and a warning logged,
 * so that a damaged build tree does not fall back to an install it is not part of. */
static char *build_plugin_dir(const char *lib_dir, bool *is_build) {
    *is_build = false;
    char *marker = path_join(lib_dir, MEMRA_BUILD_MARKER);
    if (!marker)
        return NULL;
    int fd = open(marker, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        free(marker);
        return NULL;
    }
    *is_build = true;
    char line[MEMRA_BUILD_MARKER_MAX + 1];
    ssize_t got = read(fd, line, MEMRA_BUILD_MARKER_MAX);
    close(fd);
    line[got > 0 ? got : 0] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    const char *named = trim(line);
    char *dir = NULL;
    if (!named[0] || got == (ssize_t)MEMRA_BUILD_MARKER_MAX)
        registry_log(MEMRA_LOG_WARN,
                     "%s: the build-tree marker names no plugin folder: the build tree's plugins are "
                     "not searched",
                     marker);
    else
        dir = named[0] == '/' ? str_dup(named) : path_join(lib_dir, named);
    char *real = dir ? realpath(dir, NULL) : NULL; /* "lib/../plugins.d" reads better resolved */
    if (real) {
        free(dir);
        dir = real;
    }
    free(marker);
    return dir;
}

/* The folder searched after $MEMRA_PLUGIN_PATH: the build tree's plugins.d when the loaded
 * libmemra lies in a build tree, else <folder of libmemra>/memra/plugins.d (its install
 * prefix's). NULL when it cannot be told. */
static char *own_plugin_dir(void) {
    Dl_info info;
    if (!dladdr((const void *)&memra_registry_open, &info) || !info.dli_fname || !info.dli_fname[0])
        return NULL;
    char *lib = realpath(info.dli_fname, NULL);
    if (!lib)
        return NULL;
    char *slash = strrchr(lib, '/');
    char *dir = NULL;
    if (slash) {
        *slash = '\0';
        const char *lib_dir = lib[0] ? lib : "/";
        bool is_build;
        dir = build_plugin_dir(lib_dir, &is_build);
        if (!is_build)
            dir = path_join(lib_dir, MEMRA_REL_PLUGIN_DIR);
    }
    free(lib);
    return dir;
}

memra_status memra_registry_open(memra_registry **out, memra_error *err) {
    if (!out)
        return memra_fail(err, MEMRA_E_INVALID, "memra_registry_open: out is NULL");
    *out = NULL;
    memra_registry *r;
    memra_status st = registry_new(&r, err);
    if (st != MEMRA_OK)
        return st;
    st = dirs_from_env(r, err);
    char *own = own_plugin_dir();
    if (st == MEMRA_OK && own)
        st = dir_add(r, own, false, true, err);
    else
        free(own);
    if (st == MEMRA_OK)
        st = registry_scan(r, err);
    if (st != MEMRA_OK) {
        memra_registry_close(r);
        return st;
    }
    *out = r;
    return MEMRA_OK;
}

void memra_registry_close(memra_registry *r) {
    if (!r)
        return;
    slot_release(r);
    /* Reverse order of loading: a plugin that built on another goes first. */
    for (uint32_t k = r->n_loaded; k-- > 0;) {
        reg_entry *e = &r->entries[r->load_order[k]];
        if (e->plugin && e->plugin->fini)
            e->plugin->fini();
        if (e->handle && dlclose(e->handle) != 0)
            registry_log(MEMRA_LOG_WARN, "dlclose(%s): %s", e->file, dlerror());
    }
    for (uint32_t i = 0; i < r->n_entries; i++) {
        reg_entry *e = &r->entries[i];
        free(e->name);
        free(e->file);
        free(e->manifest);
        free(e->message);
    }
    for (uint32_t i = 0; i < r->n_dirs; i++)
        free(r->dirs[i].path);
    for (uint32_t i = 0; i < r->n_warnings; i++)
        free(r->warnings[i]);
    free(r->warnings);
    free(r->entries);
    free(r->dirs);
    free(r->load_order);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

uint32_t memra_registry_dir_count(const memra_registry *r) { return r ? r->n_dirs : 0; }

const char *memra_registry_dir_at(const memra_registry *r, uint32_t i) {
    return (r && i < r->n_dirs) ? r->dirs[i].path : NULL;
}

uint32_t memra_registry_count(const memra_registry *r) { return r ? r->n_entries : 0; }

const memra_registry_entry *memra_registry_entry_at(const memra_registry *r, uint32_t i) {
    return (r && i < r->n_entries) ? &r->entries[i].pub : NULL;
}

/* The registry's lock for readers given a const registry (a load through the host table may
 * be appending to the provenance on another thread). */
static void lock_const(const memra_registry *r) { pthread_mutex_lock((pthread_mutex_t *)&r->lock); }
static void unlock_const(const memra_registry *r) { pthread_mutex_unlock((pthread_mutex_t *)&r->lock); }

uint32_t memra_registry_loaded_count(const memra_registry *r) {
    if (!r)
        return 0;
    lock_const(r);
    uint32_t n = r->n_loaded;
    unlock_const(r);
    return n;
}

const memra_loaded_plugin *memra_registry_loaded_at(const memra_registry *r, uint32_t i) {
    if (!r)
        return NULL;
    lock_const(r);
    const memra_loaded_plugin *p = i < r->n_loaded ? &r->entries[r->load_order[i]].prov : NULL;
    unlock_const(r);
    return p;
}

const memra_loaded_plugin *memra_registry_provenance(const memra_registry *r, const memra_plugin *p) {
    if (!r || !p)
        return NULL;
    const memra_loaded_plugin *found = NULL;
    lock_const(r);
    for (uint32_t i = 0; i < r->n_loaded && !found; i++)
        if (r->entries[r->load_order[i]].prov.plugin == p)
            found = &r->entries[r->load_order[i]].prov;
    unlock_const(r);
    return found;
}

uint32_t memra_registry_warning_count(const memra_registry *r) { return r ? r->n_warnings : 0; }

const char *memra_registry_warning_at(const memra_registry *r, uint32_t i) {
    return (r && i < r->n_warnings) ? r->warnings[i] : NULL;
}

const memra_host *memra_registry_host(memra_registry *r) {
    return (r && r->slot < REGISTRY_SLOTS) ? &g_slot_host[r->slot] : NULL;
}
