/* test_registry_provenance.c: what the registry reports of a search: every plugin loaded with the
 * SHA-256 of its file, and the warnings about the folders searched. */
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

#include "memra/digest.h"
#include "memra/registry.h"
#include "test_files.h"
#include "registry_test.h"

/* ---- provenance: every plugin loaded, with the SHA-256 of its file ---- */

static void file_sha(const char *path, uint8_t out[32]) {
    memra_error err;
    cr_assert_eq(memra_sha256_file(path, out, &err), MEMRA_OK, "%s", err.msg);
}

static void copy_file(const char *from, const char *to, const char *extra) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    cr_assert(in && out, "copy %s to %s", from, to);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        cr_assert_eq(fwrite(buf, 1, n, out), n);
    if (extra)
        fputs(extra, out);
    fclose(in);
    cr_assert_eq(fclose(out), 0);
}

Test(registry, provenance_lists_plugins_loaded_directly_and_through_the_host) {
    char *dir = tmp_path("d", true);
    manifest(dir, "good", "sampler", "good");
    manifest(dir, "goodbackend", "backend", "goodbackend");
    manifest(dir, "initfail", "sampler", "initfail");
    memra_registry *r = open_one(dir);
    cr_assert_eq(memra_registry_loaded_count(r), 0, "nothing is loaded yet");
    cr_assert_null(memra_registry_loaded_at(r, 0));
    const memra_plugin *backend, *sampler, *p;
    memra_error err;
    cr_assert_neq(memra_registry_load(r, "initfail", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK);
    cr_assert_eq(memra_registry_loaded_count(r), 0, "a plugin that failed is not listed");
    /* goodbackend's init loads good through find_plugin: both are listed, good first (its load
     * completes inside goodbackend's). */
    cr_assert_eq(memra_registry_load(r, "goodbackend", MEMRA_PLUGIN_BACKEND, &backend, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &sampler, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_registry_loaded_count(r), 2, "each plugin listed once");
    const memra_loaded_plugin *a = memra_registry_loaded_at(r, 0), *b = memra_registry_loaded_at(r, 1);
    cr_assert(a && b);
    cr_assert_null(memra_registry_loaded_at(r, 2));
    cr_assert_eq(a->plugin, sampler);
    cr_assert_str_eq(a->name, "good");
    cr_assert_eq(a->kind, MEMRA_PLUGIN_SAMPLER);
    cr_assert_str_eq(a->version, "1.2.3-test");
    cr_assert_str_eq(a->path, plugin_path("good"));
    cr_assert_eq(b->plugin, backend);
    cr_assert_str_eq(b->name, "goodbackend");
    cr_assert_eq(b->kind, MEMRA_PLUGIN_BACKEND);
    cr_assert_str_eq(b->path, plugin_path("goodbackend"));
    uint8_t want[32];
    file_sha(plugin_path("good"), want);
    cr_assert_arr_eq(a->sha256, want, 32, "the digest is of good's file");
    file_sha(plugin_path("goodbackend"), want);
    cr_assert_arr_eq(b->sha256, want, 32, "the digest is of goodbackend's file");
    cr_assert(memcmp(a->sha256, b->sha256, 32) != 0);
    cr_assert_not(a->from_env || a->shadows || b->from_env || b->shadows);
    cr_assert_eq(memra_registry_provenance(r, sampler), a);
    cr_assert_eq(memra_registry_provenance(r, backend), b);
    cr_assert_null(memra_registry_provenance(r, (const memra_plugin *)&err), "not a plugin of this registry");
    cr_assert_null(memra_registry_provenance(r, NULL));
    cr_assert_eq(memra_registry_loaded_count(NULL), 0);
    memra_registry_close(r);
}

Test(registry, provenance_digest_follows_the_file_bytes) {
    /* The control for the digest: the same plugin with one byte appended (the loader ignores it)
     * loads as well, and its digest differs. */
    char *d1 = tmp_path("one", true);
    char *d2 = tmp_path("two", true);
    char *f1 = tmp_path("one/libcopy.so", false);
    char *f2 = tmp_path("two/libcopy.so", false);
    copy_file(plugin_path("good"), f1, NULL);
    copy_file(plugin_path("good"), f2, "x");
    manifest(d1, "good", "sampler", f1);
    manifest(d2, "good", "sampler", f2);
    uint8_t sha[2][32];
    char *dirs[2] = {d1, d2};
    char *files[2] = {f1, f2};
    for (int i = 0; i < 2; i++) {
        memra_registry *r = open_one(dirs[i]);
        const memra_plugin *p;
        memra_error err;
        cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK, "%s", err.msg);
        const memra_loaded_plugin *lp = memra_registry_provenance(r, p);
        cr_assert_not_null(lp);
        cr_assert_str_eq(lp->path, files[i]);
        memcpy(sha[i], lp->sha256, 32);
        uint8_t want[32];
        file_sha(files[i], want);
        cr_assert_arr_eq(sha[i], want, 32);
        memra_registry_close(r);
    }
    cr_assert(memcmp(sha[0], sha[1], 32) != 0, "one byte more, the same digest");
}

/* ---- warnings about the search ---- */

static bool has_warning(const memra_registry *r, const char *a, const char *b) {
    for (uint32_t i = 0; i < memra_registry_warning_count(r); i++) {
        const char *w = memra_registry_warning_at(r, i);
        if (strstr(w, a) && (!b || strstr(w, b)))
            return true;
    }
    return false;
}

Test(registry, warnings_for_empty_relative_and_missing_plugin_path_folders) {
    char *a = tmp_path("a", true);
    char *missing = tmp_path("missing", false);
    char env[3 * PATH_MAX];
    snprintf(env, sizeof env, "relative/dir::%s:%s:", missing, a);
    setenv("MEMRA_PLUGIN_PATH", env, 1);
    memra_registry *r = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_open(&r, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_registry_warning_count(r), 4, "warnings: %u", memra_registry_warning_count(r));
    cr_assert(has_warning(r, "entry 1 'relative/dir' is not absolute", NULL));
    cr_assert(has_warning(r, "entry 2 is empty", NULL));
    cr_assert(has_warning(r, "entry 5 is empty", NULL));
    cr_assert(has_warning(r, missing, "missing"));
    cr_assert_null(memra_registry_warning_at(r, 4));
    for (uint32_t i = 0; i < 4; i++)
        cr_assert_null(strchr(memra_registry_warning_at(r, i), '\n'), "one line each");
    memra_registry_close(r);
    /* The controls: one existing absolute folder, or no variable, warn of nothing. */
    setenv("MEMRA_PLUGIN_PATH", a, 1);
    cr_assert_eq(memra_registry_open(&r, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_registry_warning_count(r), 0, "%s", memra_registry_warning_at(r, 0));
    memra_registry_close(r);
    unsetenv("MEMRA_PLUGIN_PATH");
    cr_assert_eq(memra_registry_open(&r, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_registry_warning_count(r), 0, "%s", memra_registry_warning_at(r, 0));
    memra_registry_close(r);
    cr_assert_eq(memra_registry_warning_count(NULL), 0);
    cr_assert_null(memra_registry_warning_at(NULL, 0));
}

/* The file of memra's own cpu sampler (the last folder searched, with no $MEMRA_PLUGIN_PATH). */
static void own_cpu_sampler(char *out, size_t size) {
    unsetenv("MEMRA_PLUGIN_PATH");
    memra_registry *r = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_open(&r, &err), MEMRA_OK, "%s", err.msg);
    out[0] = '\0';
    for (uint32_t i = 0; i < memra_registry_count(r); i++) {
        const memra_registry_entry *e = memra_registry_entry_at(r, i);
        if (strcmp(e->name, "cpu") == 0 && e->kind == MEMRA_PLUGIN_SAMPLER)
            snprintf(out, size, "%s", e->file);
    }
    memra_registry_close(r);
    cr_assert_neq(out[0], '\0', "this build's plugins.d has no cpu sampler");
    struct stat sb;
    cr_assert_eq(stat(out, &sb), 0, "%s is not built", out);
}

Test(registry, a_plugin_path_plugin_hiding_memras_own_is_warned_of_and_recorded) {
    char own[PATH_MAX];
    own_cpu_sampler(own, sizeof own);
    char *env = tmp_path("env", true);
    char *copy = tmp_path("env/libmemra-sampler-cpu.so", false);
    copy_file(own, copy, NULL);
    manifest(env, "cpu", "sampler", copy);
    setenv("MEMRA_PLUGIN_PATH", env, 1);
    memra_registry *r = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_open(&r, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_registry_warning_count(r), 1);
    char want[3 * PATH_MAX];
    snprintf(want, sizeof want, "cpu (sampler) from %s hides memra's own %s", copy, own);
    cr_assert_str_eq(memra_registry_warning_at(r, 0), want);
    const memra_plugin *p;
    cr_assert_eq(memra_registry_load(r, "cpu", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK, "%s", err.msg);
    const memra_loaded_plugin *lp = memra_registry_provenance(r, p);
    cr_assert_not_null(lp);
    cr_assert_str_eq(lp->path, copy);
    cr_assert(lp->from_env && lp->shadows);
    memra_registry_close(r);
}

Test(registry, control_a_plugin_path_plugin_hiding_nothing_is_not_warned_of) {
    char own[PATH_MAX];
    own_cpu_sampler(own, sizeof own);
    char *env = tmp_path("env", true);
    manifest(env, "good", "sampler", "good");
    /* The same name as memra's own cpu sampler, another kind: hides nothing. */
    char *copy = tmp_path("env/libmemra-sampler-cpu.so", false);
    copy_file(own, copy, NULL);
    char text[PATH_MAX + 64];
    snprintf(text, sizeof text, "name = cpu\nkind = collective\nfile = %s\n", copy);
    write_text(env, "cpu.manifest", text);
    setenv("MEMRA_PLUGIN_PATH", env, 1);
    memra_registry *r = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_open(&r, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_registry_warning_count(r), 0, "%s", memra_registry_warning_at(r, 0));
    const memra_plugin *p, *q;
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_registry_load(r, "cpu", MEMRA_PLUGIN_SAMPLER, &q, &err), MEMRA_OK, "%s", err.msg);
    const memra_loaded_plugin *lp = memra_registry_provenance(r, p), *lq = memra_registry_provenance(r, q);
    cr_assert(lp->from_env && !lp->shadows);
    cr_assert(!lq->from_env && !lq->shadows);
    cr_assert_str_eq(lq->path, own);
    memra_registry_close(r);
}
