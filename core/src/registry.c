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

/* ------------------------------------------------------------------------------------------ */
/* Kinds                                                                                       */

const char *memra_plugin_kind_name(uint32_t kind) {
    switch (kind) {
    case MEMRA_PLUGIN_PLACEMENT: return "placement";
    case MEMRA_PLUGIN_BACKEND: return "backend";
    case MEMRA_PLUGIN_COLLECTIVE: return "collective";
    case MEMRA_PLUGIN_SAMPLER: return "sampler";
    }
    return "unknown";
}

bool memra_plugin_kind_parse(const char *word, memra_plugin_kind *out) {
    static const memra_plugin_kind kinds[] = {MEMRA_PLUGIN_PLACEMENT, MEMRA_PLUGIN_BACKEND, MEMRA_PLUGIN_COLLECTIVE,
                                              MEMRA_PLUGIN_SAMPLER};
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

__attribute__((format(printf, 3, 4))) static void host_log(memra_log_level level, const char *plugin, const char *fmt,
                                                           ...) {
    va_list ap;
    va_start(ap, fmt);
    log_v(level, plugin, fmt, ap);
    va_end(ap);
}

#define registry_log(level, ...) host_log((level), "registry", __VA_ARGS__)

/* ------------------------------------------------------------------------------------------ */
/* Slots: one host table per open registry                                                     */

static pthread_mutex_t g_slot_lock = PTHREAD_MUTEX_INITIALIZER;
static memra_registry *g_slot_owner[REGISTRY_SLOTS];
/* Static, so that a host pointer a plugin kept past its registry's close stays readable; its
 * find_plugin then fails with a message instead of touching freed memory. */
static memra_host g_slot_host[REGISTRY_SLOTS];

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

static char *str_dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static char *path_join(const char *dir, const char *name) {
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
static void path_trim(char *p) {
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
}

/* Replaces *slot with a copy of s; false when out of memory (the old value is kept). */
static bool str_set(char **slot, const char *s) {
    char *d = str_dup(s);
    if (!d)
        return false;
    free(*slot);
    *slot = d;
    return true;
}

/* Records one warning about the search (and logs it). Out of memory drops it: the log saw it. */
__attribute__((format(printf, 2, 3))) static void warn_add(memra_registry *r, const char *fmt, ...) {
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

static void entry_sync(reg_entry *e) {
    e->pub.name = e->name ? e->name : "";
    e->pub.file = e->file ? e->file : "";
    e->pub.manifest = e->manifest ? e->manifest : "";
    e->pub.message = e->message ? e->message : "";
    e->pub.version = (e->plugin && e->plugin->version) ? e->plugin->version : "";
}

static void entry_mark(reg_entry *e, memra_entry_state state, memra_status status, const char *message) {
    e->pub.state = state;
    e->pub.status = status;
    if (!str_set(&e->message, message)) {
        free(e->message);
        e->message = NULL; /* out of memory: the status still says what happened */
    }
    entry_sync(e);
}

static const char *entry_kind(const reg_entry *e) { return memra_plugin_kind_name(e->pub.kind); }

/* ------------------------------------------------------------------------------------------ */
/* Manifests                                                                                   */

static bool name_valid(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > PLUGIN_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                  c == '.';
        if (!ok)
            return false;
    }
    return true;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* Reads a whole manifest (a regular file of at most MANIFEST_MAX_BYTES) into a NUL-ended
 * buffer. */
static memra_status manifest_read(const char *path, char **text, size_t *len, memra_error *err) {
    *text = NULL;
    /* Checked before it is opened: opening a FIFO for reading blocks until a writer comes, and
     * opening a device can do anything. O_NONBLOCK covers a swap between stat and open (it does
     * nothing to a regular file's reads), and fstat checks what was opened. */
    struct stat sb;
    if (stat(path, &sb) != 0)
        return memra_fail(err, MEMRA_E_IO, "%s: cannot stat the manifest: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return memra_fail(err, MEMRA_E_FORMAT, "%s: manifest is %s, not a regular file: refused", path,
                          memra_file_type_name(sb.st_mode));
    if (sb.st_size > (off_t)MANIFEST_MAX_BYTES)
        return memra_fail(err, MEMRA_E_FORMAT, "%s: manifest is %lld bytes, more than the %u allowed", path,
                          (long long)sb.st_size, MANIFEST_MAX_BYTES);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return memra_fail(err, MEMRA_E_IO, "%s: cannot open the manifest: %s", path, strerror(errno));
    memra_status st = MEMRA_OK;
    if (fstat(fd, &sb) != 0) {
        st = memra_fail(err, MEMRA_E_IO, "%s: cannot stat the manifest: %s", path, strerror(errno));
        goto out_close;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = memra_fail(err, MEMRA_E_FORMAT, "%s: manifest is %s, not a regular file: refused", path,
                        memra_file_type_name(sb.st_mode));
        goto out_close;
    }
    if (sb.st_size > (off_t)MANIFEST_MAX_BYTES) {
        st = memra_fail(err, MEMRA_E_FORMAT, "%s: manifest is %lld bytes, more than the %u allowed", path,
                        (long long)sb.st_size, MANIFEST_MAX_BYTES);
        goto out_close;
    }
    char *buf = malloc(MANIFEST_MAX_BYTES + 1);
    if (!buf) {
        st = memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory reading the manifest", path);
        goto out_close;
    }
    size_t got = 0;
    for (;;) {
        ssize_t n = read(fd, buf + got, MANIFEST_MAX_BYTES + 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            st = memra_fail(err, MEMRA_E_IO, "%s: cannot read the manifest: %s", path, strerror(errno));
            free(buf);
            goto out_close;
        }
        if (n == 0)
            break;
        got += (size_t)n;
        if (got > MANIFEST_MAX_BYTES) { /* it grew since fstat */
            st = memra_fail(err, MEMRA_E_FORMAT, "%s: manifest is more than %u bytes", path, MANIFEST_MAX_BYTES);
            free(buf);
            goto out_close;
        }
    }
    buf[got] = '\0';
    *text = buf;
    *len = got;
out_close:
    close(fd);
    return st;
}

typedef struct manifest_fields {
    char *name, *kind_word, *file;
    unsigned name_line, kind_line, file_line;
} manifest_fields;

/* One "key = value" line; a value that is not valid is not stored. The first malformed line
 * is the manifest's error; later lines are still read so that name and kind are known for
 * look-ups and messages. */
static memra_status manifest_line(const char *path, unsigned line_no, char *line, manifest_fields *f,
                                  memra_error *err) {
    char *s = trim(line);
    if (*s == '\0' || *s == '#')
        return MEMRA_OK;
    char *eq = strchr(s, '=');
    if (!eq)
        return memra_fail(err, MEMRA_E_FORMAT, "%s:%u: expected 'key = value', found '%.60s'", path, line_no, s);
    *eq = '\0';
    char *key = trim(s);
    char *value = trim(eq + 1);
    char **slot;
    unsigned *where;
    if (strcmp(key, "name") == 0) {
        slot = &f->name;
        where = &f->name_line;
    } else if (strcmp(key, "kind") == 0) {
        slot = &f->kind_word;
        where = &f->kind_line;
    } else if (strcmp(key, "file") == 0) {
        slot = &f->file;
        where = &f->file_line;
    } else if (*key == '\0') {
        return memra_fail(err, MEMRA_E_FORMAT, "%s:%u: missing key before '='", path, line_no);
    } else {
        return memra_fail(err, MEMRA_E_FORMAT, "%s:%u: unknown key '%.40s' (a manifest has name, kind and file)", path,
                          line_no, key);
    }
    if (*where)
        return memra_fail(err, MEMRA_E_FORMAT, "%s:%u: '%s' given again (first on line %u)", path, line_no, key,
                          *where);
    if (*value == '\0')
        return memra_fail(err, MEMRA_E_FORMAT, "%s:%u: '%s' has an empty value", path, line_no, key);
    if (slot == &f->name && !name_valid(value))
        return memra_fail(err, MEMRA_E_FORMAT, "%s:%u: name '%.60s' must be 1 to %u letters, digits, '-', '_' or '.'",
                          path, line_no, value, PLUGIN_NAME_MAX);
    if (slot == &f->kind_word && !memra_plugin_kind_parse(value, NULL))
        return memra_fail(err, MEMRA_E_FORMAT,
                          "%s:%u: unknown kind '%.40s' (expected placement, backend, collective or sampler)", path,
                          line_no, value);
    *slot = value;
    *where = line_no;
    return MEMRA_OK;
}

/* Parses the manifest text into e (name, kind, file). Returns the first problem. */
static memra_status manifest_parse(reg_entry *e, const char *dir, char *text, size_t len, memra_error *err) {
    const char *path = e->manifest;
    manifest_fields f = {0};
    memra_status first = MEMRA_OK;
    memra_error line_err;
    if (memchr(text, '\0', len))
        first = memra_fail(err, MEMRA_E_FORMAT, "%s: manifest holds a NUL byte", path);
    unsigned line_no = 0;
    for (char *line = text; line && *line;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        line_no++;
        memra_status st = manifest_line(path, line_no, line, &f, &line_err);
        if (st != MEMRA_OK && first == MEMRA_OK)
            first = memra_fail(err, st, "%s", line_err.msg);
        line = next;
    }
    /* Fields that were valid are kept even when another line is not. */
    memra_plugin_kind kind = 0;
    if (f.name && !str_set(&e->name, f.name))
        return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory", path);
    if (f.kind_word)
        memra_plugin_kind_parse(f.kind_word, &kind);
    e->pub.kind = kind;
    if (f.file) {
        char *file = f.file[0] == '/' ? str_dup(f.file) : path_join(dir, f.file);
        if (!file)
            return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory", path);
        free(e->file);
        e->file = file;
    }
    if (first != MEMRA_OK)
        return first;
    const char *missing = !f.name ? "name" : !f.kind_word ? "kind" : !f.file ? "file" : NULL;
    if (missing)
        return memra_fail(err, MEMRA_E_FORMAT, "%s: no '%s' line (a manifest needs name, kind and file)", path,
                          missing);
    return MEMRA_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Scanning                                                                                    */

static reg_entry *entry_add(memra_registry *r, uint32_t dir_index, const char *manifest) {
    if (r->n_entries == r->cap_entries) {
        uint32_t cap = r->cap_entries ? 2 * r->cap_entries : 16;
        if (cap < r->cap_entries)
            return NULL;
        reg_entry *grown = realloc(r->entries, (size_t)cap * sizeof *grown);
        if (!grown)
            return NULL;
        r->entries = grown;
        r->cap_entries = cap;
    }
    reg_entry *e = &r->entries[r->n_entries];
    memset(e, 0, sizeof *e);
    e->dir_index = dir_index;
    e->manifest = str_dup(manifest);
    if (!e->manifest)
        return NULL;
    r->n_entries++;
    entry_sync(e);
    return e;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool is_manifest_name(const char *n) {
    size_t len = strlen(n), suf = strlen(MANIFEST_SUFFIX);
    return n[0] != '.' && len > suf && strcmp(n + len - suf, MANIFEST_SUFFIX) == 0;
}

/* The manifest file names of one folder, sorted so that scans are the same on every run. */
static memra_status dir_list(reg_dir *d, char ***names_out, uint32_t *n_out, memra_error *err) {
    *names_out = NULL;
    *n_out = 0;
    d->note = "";
    DIR *dh = opendir(d->path);
    if (!dh) {
        if (errno == ENOENT || errno == ENOTDIR) {
            d->note = "absent";
        } else {
            snprintf(d->note_buf, sizeof d->note_buf, "unreadable: %s", strerror(errno));
            d->note = d->note_buf;
            registry_log(MEMRA_LOG_WARN, "plugin folder %s is %s", d->path, d->note);
        }
        return MEMRA_OK;
    }
    char **names = NULL;
    uint32_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(dh)) != NULL) {
        if (!is_manifest_name(de->d_name))
            continue;
        if (n == cap) {
            uint32_t grown_cap = cap ? 2 * cap : 16;
            char **grown = grown_cap > cap ? realloc(names, (size_t)grown_cap * sizeof *grown) : NULL;
            if (!grown)
                goto out_nomem;
            names = grown;
            cap = grown_cap;
        }
        if (!(names[n] = str_dup(de->d_name)))
            goto out_nomem;
        n++;
    }
    closedir(dh);
    if (n)
        qsort(names, n, sizeof *names, compare_names);
    *names_out = names;
    *n_out = n;
    return MEMRA_OK;
out_nomem:
    closedir(dh);
    for (uint32_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory listing the plugin folder", d->path);
}

static memra_status scan_dir(memra_registry *r, uint32_t dir_index, memra_error *err) {
    reg_dir *d = &r->dirs[dir_index];
    char **names;
    uint32_t n;
    memra_status st = dir_list(d, &names, &n, err);
    if (st != MEMRA_OK)
        return st;
    for (uint32_t i = 0; i < n && st == MEMRA_OK; i++) {
        char *manifest = path_join(d->path, names[i]);
        reg_entry *e = manifest ? entry_add(r, dir_index, manifest) : NULL;
        free(manifest);
        if (!e) {
            st = memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory reading manifests", d->path);
            break;
        }
        char *text = NULL;
        size_t len = 0;
        memra_error merr;
        memra_status mst = manifest_read(e->manifest, &text, &len, &merr);
        if (mst == MEMRA_OK)
            mst = manifest_parse(e, d->path, text, len, &merr);
        free(text);
        if (mst == MEMRA_E_NOMEM)
            st = memra_fail(err, mst, "%s", merr.msg);
        else if (mst != MEMRA_OK) {
            entry_mark(e, MEMRA_ENTRY_FAILED, mst, merr.msg);
            e->manifest_bad = true;
        }
        entry_sync(e);
    }
    for (uint32_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return st;
}

static bool entry_named(const reg_entry *e, const char *name, uint32_t kind) {
    return e->name && e->pub.kind == kind && strcmp(e->name, name) == 0;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The first manifest of a (name, kind) wins; a second in the same folder makes both fail as
 * duplicates (which one was meant is unknown); one in a later folder is shadowed. */
static void mark_duplicates(memra_registry *r) {
    char msg[MEMRA_ERROR_MSG_MAX];
    for (uint32_t i = 0; i < r->n_entries; i++) {
        reg_entry *e = &r->entries[i];
        if (!e->name || e->pub.kind == 0)
            continue;
        reg_entry *winner = NULL;
        for (uint32_t j = 0; j < i && !winner; j++) {
            reg_entry *o = &r->entries[j];
            if (o->pub.state != MEMRA_ENTRY_SHADOWED && entry_named(o, e->name, e->pub.kind))
                winner = o;
        }
        if (!winner)
            continue;
        if (winner->dir_index != e->dir_index) {
            snprintf(msg, sizeof msg, "shadowed by %s", winner->manifest);
            entry_mark(e, MEMRA_ENTRY_SHADOWED, MEMRA_OK, msg);
            continue;
        }
        snprintf(msg, sizeof msg, "plugin '%s' (%s): duplicate name, declared twice in %s: %s and %s", e->name,
                 entry_kind(e), r->dirs[e->dir_index].path, base_name(winner->manifest), base_name(e->manifest));
        entry_mark(e, MEMRA_ENTRY_FAILED, MEMRA_E_PLUGIN, msg);
        e->manifest_bad = false;
        if (!winner->message || !strstr(winner->message, "duplicate name")) {
            entry_mark(winner, MEMRA_ENTRY_FAILED, MEMRA_E_PLUGIN, msg);
            winner->manifest_bad = false;
        }
    }
}

/* The folders of $MEMRA_PLUGIN_PATH that could not be read, and each plugin there hiding one
 * of memra's own folder. */
static void search_warnings(memra_registry *r) {
    for (uint32_t i = 0; i < r->n_dirs; i++) {
        const reg_dir *d = &r->dirs[i];
        if (!d->from_env || !d->note[0])
            continue;
        if (strcmp(d->note, "absent") == 0)
            warn_add(r, "MEMRA_PLUGIN_PATH folder %s is missing (or not a folder)", d->path);
        else
            warn_add(r, "MEMRA_PLUGIN_PATH folder %s is %s", d->path, d->note);
    }
    for (uint32_t i = 0; i < r->n_entries; i++) {
        reg_entry *hidden = &r->entries[i];
        if (hidden->pub.state != MEMRA_ENTRY_SHADOWED || !r->dirs[hidden->dir_index].own)
            continue;
        /* Its winner: the first entry of the same name and kind that is not shadowed. */
        for (uint32_t j = 0; j < i; j++) {
            reg_entry *w = &r->entries[j];
            if (w->pub.state == MEMRA_ENTRY_SHADOWED || !entry_named(w, hidden->name, hidden->pub.kind))
                continue;
            const reg_dir *wd = &r->dirs[w->dir_index];
            if (wd->from_env && !wd->own) {
                w->shadows = true;
                warn_add(r, "%s (%s) from %s hides memra's own %s", hidden->name, entry_kind(hidden),
                         w->file && w->file[0] ? w->file : w->manifest,
                         hidden->file && hidden->file[0] ? hidden->file : hidden->manifest);
            }
            break;
        }
    }
}

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
    const void *tables[] = {p->placement, p->backend, p->collective, p->sampler};
    for (uint32_t k = MEMRA_PLUGIN_PLACEMENT; k <= MEMRA_PLUGIN_SAMPLER; k++) {
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
    if (kind < MEMRA_PLUGIN_PLACEMENT || kind > MEMRA_PLUGIN_SAMPLER)
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
    }
    if (!o)
        n = 0;
    if (specs)
        *specs = o;
    return n;
}
