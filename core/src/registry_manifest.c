/* registry_manifest.c: the registry's manifests (reading and checking one) and the search of its
 * folders for them (listing, duplicates, warnings about the search). */
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

char *trim(char *s) {
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
                          "%s:%u: unknown kind '%.40s' (expected placement, backend, collective, sampler or op)", path,
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

memra_status scan_dir(memra_registry *r, uint32_t dir_index, memra_error *err) {
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

bool entry_named(const reg_entry *e, const char *name, uint32_t kind) {
    return e->name && e->pub.kind == kind && strcmp(e->name, name) == 0;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The first manifest of a (name, kind) wins; a second in the same folder makes both fail as
 * duplicates (which one was meant is unknown); one in a later folder is shadowed. */
void mark_duplicates(memra_registry *r) {
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
void search_warnings(memra_registry *r) {
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
