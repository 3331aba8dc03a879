/* gate_dump.c: --dump-graphs DIR. A state's graphs are written by its backend's "memra.census"
 * dump_graphs into DIR/<arm>-<scope>/ (one folder per dumped state, so two states whose
 * backend names files alike never overwrite each other), and the census record lists the
 * files that call created or changed: the folder is listed before and after it, since the
 * extension does not say what it wrote. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gate.h"

#define DUMP_MAX_FILES 4096u /* files listed in one folder at most (more are not reported) */

memra_status gate_dump_prepare(const char *dir, memra_error *err) {
    char path[PATH_MAX];
    size_t len = strlen(dir);
    if (len == 0)
        return memra_fail(err, MEMRA_E_INVALID, "--dump-graphs: empty directory name");
    if (len >= sizeof path - 64) /* room for "/<arm>-<scope>/<file>" under it */
        return memra_fail(err, MEMRA_E_INVALID, "--dump-graphs %.64s...: the path is too long (%zu bytes)", dir, len);
    memcpy(path, dir, len + 1);
    /* Every missing component, parents first (mkdir -p). */
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return memra_fail(err, MEMRA_E_IO, "--dump-graphs %s: cannot create %s: %s", dir, path, strerror(errno));
        *p = saved;
        if (saved == '\0')
            break;
    }
    struct stat st;
    if (stat(dir, &st) != 0)
        return memra_fail(err, MEMRA_E_IO, "--dump-graphs %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return memra_fail(err, MEMRA_E_IO, "--dump-graphs %s: exists and is not a directory", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return memra_fail(err, MEMRA_E_IO, "--dump-graphs %s: cannot write into it: %s", dir, strerror(errno));
    return MEMRA_OK;
}

/* One regular file of a folder, as far as "did this call write it" needs. */
typedef struct dump_file {
    char *name;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} dump_file;

typedef struct dump_list {
    dump_file *files;
    uint32_t n;
} dump_list;

static void list_free(dump_list *l) {
    for (uint32_t i = 0; i < l->n; i++)
        free(l->files[i].name);
    free(l->files);
    memset(l, 0, sizeof *l);
}

static int cmp_file(const void *x, const void *y) {
    return strcmp(((const dump_file *)x)->name, ((const dump_file *)y)->name);
}

static memra_status list_dir(const char *dir, const char *sub, dump_list *out, memra_error *err) {
    memset(out, 0, sizeof *out);
    DIR *d = opendir(sub);
    if (!d)
        return memra_fail(err, MEMRA_E_IO, "--dump-graphs %s: cannot list %s: %s", dir, sub, strerror(errno));
    out->files = calloc(DUMP_MAX_FILES, sizeof *out->files);
    memra_status st = out->files ? MEMRA_OK : memra_fail(err, MEMRA_E_NOMEM, "out of memory listing %s", sub);
    struct dirent *e;
    while (st == MEMRA_OK && out->n < DUMP_MAX_FILES && (e = readdir(d)) != NULL) {
        struct stat sb;
        if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
            continue;
        dump_file *f = &out->files[out->n];
        f->name = strdup(e->d_name);
        if (!f->name) {
            st = memra_fail(err, MEMRA_E_NOMEM, "out of memory listing %s", sub);
            break;
        }
        f->ino = sb.st_ino;
        f->size = sb.st_size;
        f->mtime = sb.st_mtim;
        out->n++;
    }
    closedir(d);
    if (st != MEMRA_OK)
        list_free(out);
    else
        qsort(out->files, out->n, sizeof *out->files, cmp_file);
    return st;
}

/* Whether `f` (listed after the call) is new or changed against `before`. */
static bool written(const dump_list *before, const dump_file *f) {
    const dump_file *old = bsearch(f, before->files, before->n, sizeof *before->files, cmp_file);
    return !old || old->ino != f->ino || old->size != f->size || old->mtime.tv_sec != f->mtime.tv_sec ||
           old->mtime.tv_nsec != f->mtime.tv_nsec;
}

/* Records a failure in out (and err) and returns st. */
static memra_status dump_failed(gate_dump_result *out, memra_status st, memra_error *err) {
    out->failed = true;
    snprintf(out->error, sizeof out->error, "%s", err && err->msg[0] ? err->msg : memra_status_name(st));
    return st;
}

memra_status gate_dump_state(gate_ctx *ctx, gate_arm *arm, memra_arm_state *s, const char *scope, gate_dump_result *out,
                             memra_error *err) {
    const char *dir = ctx->cfg->dump_dir;
    memset(out, 0, sizeof *out);
    size_t len = strlen(dir);
    int n =
        snprintf(out->dir, sizeof out->dir, "%s%s%s-%s", dir, len && dir[len - 1] == '/' ? "" : "/", arm->name, scope);
    if (n < 0 || (size_t)n >= sizeof out->dir)
        return dump_failed(out, memra_fail(err, MEMRA_E_INVALID, "--dump-graphs %s: the path is too long", dir), err);
    const char *sub = out->dir;
    if (mkdir(sub, 0777) != 0 && errno != EEXIST)
        return dump_failed(
            out, memra_fail(err, MEMRA_E_IO, "--dump-graphs %s: cannot create %s: %s", dir, sub, strerror(errno)), err);
    dump_list before = {0}, after = {0};
    memra_status st = list_dir(dir, sub, &before, err);
    if (st == MEMRA_OK) {
        memra_error derr = {0};
        st = memra_arm_dump_graphs(s, sub, &derr);
        if (st != MEMRA_OK)
            memra_fail(err, st, "--dump-graphs %s: %s state: %s", dir, scope,
                       derr.msg[0] ? derr.msg : memra_status_name(st));
    }
    if (st == MEMRA_OK)
        st = list_dir(dir, sub, &after, err);
    if (st == MEMRA_OK && after.n) {
        out->files = calloc(after.n, sizeof *out->files);
        if (!out->files)
            st = memra_fail(err, MEMRA_E_NOMEM, "out of memory listing %s", sub);
    }
    for (uint32_t i = 0; st == MEMRA_OK && i < after.n; i++) {
        if (!written(&before, &after.files[i]))
            continue;
        size_t need = strlen(sub) + 1 + strlen(after.files[i].name) + 1;
        char *path = malloc(need);
        if (!path) {
            st = memra_fail(err, MEMRA_E_NOMEM, "out of memory listing %s", sub);
            break;
        }
        snprintf(path, need, "%s/%s", sub, after.files[i].name);
        out->files[out->n_files++] = path;
    }
    list_free(&before);
    list_free(&after);
    return st == MEMRA_OK ? st : dump_failed(out, st, err);
}

void gate_dump_result_free(gate_dump_result *d) {
    for (uint32_t i = 0; i < d->n_files; i++)
        free(d->files[i]);
    free(d->files);
    d->files = NULL;
    d->n_files = 0;
}
