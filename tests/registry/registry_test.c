/* registry_test.c: the helpers the registry suites share (registry_test.h) and the suite itself:
 * each test gets a temporary folder of its own, and under AddressSanitizer a leak check of its own. */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "memra/registry.h"
#include "test_files.h"
#include "registry_test.h"

/* ---- temporary folders, files, manifests ---- */

char g_tmp[256];

static void tmp_setup(void) { tmp_dir_make(g_tmp, sizeof g_tmp, NULL, "regtest"); }

static void tmp_teardown(void) {
    tmp_dir_remove(g_tmp);
    memra_set_log_sink(NULL, NULL);
#ifdef REGTEST_LSAN
    /* An assertion in .fini does not fail the test; a crash does. */
    if (__lsan_do_recoverable_leak_check()) {
        fprintf(stderr, "LeakSanitizer found leaks in this test (report above)\n");
        abort();
    }
#endif
}

TestSuite(registry, .init = tmp_setup, .fini = tmp_teardown);

/* g_tmp/name, created as a folder when mkdir is true. The string lives in a ring of static
 * buffers, enough for any one test. */
char *tmp_path(const char *name, bool mkdir_it) {
    char *p = tmp_dir_path(g_tmp, name);
    if (mkdir_it)
        cr_assert_eq(mkdir(p, 0755), 0, "mkdir %s", p);
    return p;
}

void write_file(const char *dir, const char *name, const void *data, size_t n) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

void write_text(const char *dir, const char *name, const char *text) { write_file(dir, name, text, strlen(text)); }

/* The absolute path of test plugin `variant`. */
const char *plugin_path(const char *variant) {
    static char path[8][PATH_MAX];
    static int next;
    char *p = path[next++ % 8];
    snprintf(p, PATH_MAX, "%s/libregtest_%s.so", REGTEST_PLUGIN_DIR, variant);
    return p;
}

/* Writes dir/<name>.manifest saying name, kind and file (a test plugin variant, or a path when
 * `file` contains a '/'). */
void manifest(const char *dir, const char *name, const char *kind, const char *file) {
    char text[PATH_MAX + 128], fname[128];
    snprintf(text, sizeof text, "# test manifest\nname = %s\nkind = %s\nfile = %s\n", name, kind,
             strchr(file, '/') ? file : plugin_path(file));
    snprintf(fname, sizeof fname, "%s.manifest", name);
    write_text(dir, fname, text);
}

memra_registry *open_one(const char *dir) {
    memra_registry *r = NULL;
    memra_error err;
    memra_error_clear(&err);
    cr_assert_eq(memra_registry_open_dirs(&dir, 1, &r, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_not_null(r);
    return r;
}

/* Loading (name, kind) from a registry over `dir` fails with `status` and a message holding
 * every one of the NULL-terminated substrings. */
void expect_refusal(const char *dir, const char *name, memra_plugin_kind kind, memra_status status, ...) {
    memra_registry *r = open_one(dir);
    const memra_plugin *p = (const memra_plugin *)1;
    memra_error err;
    memra_error_clear(&err);
    memra_status st = memra_registry_load(r, name, kind, &p, &err);
    cr_assert_eq(st, status, "load '%s': status %s, expected %s; message: %s", name, memra_status_name(st),
                 memra_status_name(status), err.msg);
    cr_assert_eq(err.status, status);
    cr_assert_null(p);
    va_list ap;
    va_start(ap, status);
    for (const char *want; (want = va_arg(ap, const char *)) != NULL;)
        cr_assert_not_null(strstr(err.msg, want), "message lacks '%s': %s", want, err.msg);
    va_end(ap);
    /* The entry records the same failure, and asking again gives the same answer. */
    memra_error again;
    cr_assert_eq(memra_registry_load(r, name, kind, &p, &again), status);
    cr_assert_str_eq(again.msg, err.msg);
    memra_registry_close(r);
}

/* ---- the log sink ---- */

pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
char g_log[16384];

void log_sink(memra_log_level level, const char *plugin, const char *line, void *user) {
    pthread_mutex_lock(&g_log_lock);
    size_t used = strlen(g_log);
    snprintf(g_log + used, sizeof g_log - used, "%d %s: %s\n", (int)level, plugin, line);
    if (user)
        ++*(int *)user;
    pthread_mutex_unlock(&g_log_lock);
}
