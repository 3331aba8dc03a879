/* test_files.h: files of a test: a private temporary folder (mkdtemp), paths in it, its removal
 * with everything under it (nftw, links not followed), file names of one test process in the build
 * tree, and a whole file read back. Header-only: every test folder includes tests/common. */
#ifndef MEMRA_TEST_FILES_H
#define MEMRA_TEST_FILES_H

#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Makes PARENT/memra-TAG-XXXXXX (parent NULL: /tmp) into buf; a failed assertion when it cannot. */
static inline void tmp_dir_make(char *buf, size_t size, const char *parent, const char *tag) {
    int k = snprintf(buf, size, "%s/memra-%s-XXXXXX", parent ? parent : "/tmp", tag);
    cr_assert(k > 0 && (size_t)k < size, "temporary folder name too long");
    cr_assert_not_null(mkdtemp(buf), "mkdtemp %s: %s", buf, strerror(errno));
}

static inline int tmp_dir_remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Removes dir and everything under it; 0 on success (and when dir is "" or absent). */
static inline int tmp_dir_remove(const char *dir) {
    struct stat sb;
    if (!dir || !dir[0] || lstat(dir, &sb) != 0)
        return 0;
    return nftw(dir, tmp_dir_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh folder /tmp/memra-TAG-XXXXXX, its path malloc'd (free it after tmp_dir_remove). */
static inline char *tmp_dir_new(const char *tag) {
    char buf[4096];
    tmp_dir_make(buf, sizeof buf, NULL, tag);
    char *d = strdup(buf);
    cr_assert_not_null(d);
    return d;
}

/* DIR/NAME, malloc'd. */
static inline char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    cr_assert_not_null(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* DIR/NAME in one of 16 rotating buffers (enough for the paths one check holds at once). */
static inline char *tmp_dir_path(const char *dir, const char *name) {
    static char ring[16][4096];
    static unsigned next;
    char *p = ring[next++ % 16];
    int k = snprintf(p, sizeof ring[0], "%s/%s", dir, name);
    cr_assert(k > 0 && (size_t)k < sizeof ring[0], "path too long: %s/%s", dir, name);
    return p;
}

/* A file name of this test process: $MEMRA_BUILD_DIR (else /tmp) / memra-test_PID_NAME, into buf. */
static inline void tmp_file_path(char *buf, size_t size, const char *name) {
    const char *dir = getenv("MEMRA_BUILD_DIR");
    int k = snprintf(buf, size, "%s/memra-test_%d_%s", dir && *dir ? dir : "/tmp", (int)getpid(), name);
    cr_assert(k > 0 && (size_t)k < size, "path too long for %s", name);
}

/* Writes text (no terminating NUL) as the whole file at path; asserts every write. */
static inline void file_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s: %s", path, strerror(errno));
    cr_assert(fputs(text, f) >= 0, "cannot write %s", path);
    cr_assert_eq(fclose(f), 0, "cannot close %s", path);
}

/* A whole file, NUL-terminated, malloc'd, or NULL when it cannot be opened; its length in *len
 * (may be NULL). */
static inline char *file_slurp_maybe(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(n > 0 ? (size_t)n + 1 : 1);
    cr_assert_not_null(buf);
    size_t got = n > 0 ? fread(buf, 1, (size_t)n, f) : 0;
    buf[got] = '\0';
    fclose(f);
    if (len)
        *len = got;
    return buf;
}

/* A whole file, NUL-terminated, malloc'd; its length in *len (may be NULL). */
static inline char *file_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n, "short read of %s", path);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

#endif
