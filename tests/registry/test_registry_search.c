/* test_registry_search.c: the plugin registry's manifests and search: malformed manifests (each
 * names its file and line), duplicates and shadows, the default search path (installed or build
 * tree, $MEMRA_PLUGIN_PATH, never the current folder), arguments, and manifests or plugin files
 * that are not regular files. */
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

/* ---- malformed manifests: each names the file and line ---- */

static void expect_malformed(const char *text, const char *where, const char *what) {
    char *dir = tmp_path("m", true);
    write_text(dir, "bad.manifest", text);
    memra_registry *r = open_one(dir);
    cr_assert_eq(memra_registry_count(r), 1);
    const memra_registry_entry *e = memra_registry_entry_at(r, 0);
    cr_assert_eq(e->state, MEMRA_ENTRY_FAILED);
    cr_assert_eq(e->status, MEMRA_E_FORMAT);
    char want[PATH_MAX + 16];
    snprintf(want, sizeof want, "%s/bad.manifest%s", dir, where);
    cr_assert_not_null(strstr(e->message, want), "want '%s' in: %s", want, e->message);
    cr_assert_not_null(strstr(e->message, what), "want '%s' in: %s", what, e->message);
    memra_registry_close(r);
}

Test(registry, malformed_no_equals) {
    expect_malformed("name = bad\nkind sampler\nfile = x.so\n", ":2:", "expected 'key = value', found 'kind sampler'");
}

Test(registry, malformed_unknown_key) {
    expect_malformed("name = bad\nkind = sampler\ncolour = blue\nfile = x.so\n", ":3:", "unknown key 'colour'");
}

Test(registry, malformed_missing_kind) { expect_malformed("name = bad\nfile = x.so\n", ":", "no 'kind' line"); }

Test(registry, malformed_bad_kind_word) {
    expect_malformed("name = bad\nkind = engine\nfile = x.so\n", ":2:", "unknown kind 'engine'");
}

Test(registry, malformed_empty_name) {
    expect_malformed("name =   \nkind = sampler\nfile = x.so\n", ":1:", "'name' has an empty value");
}

Test(registry, malformed_name_characters) {
    expect_malformed("name = a,b\nkind = sampler\nfile = x.so\n", ":1:", "name 'a,b' must be");
}

Test(registry, malformed_repeated_key) {
    expect_malformed("name = bad\nkind = sampler\nname = bad2\nfile = x.so\n",
                     ":3:", "'name' given again (first on line 1)");
}

Test(registry, malformed_missing_key) {
    expect_malformed("name = bad\n = sampler\nfile = x.so\n", ":2:", "missing key");
}

Test(registry, malformed_nul_byte) {
    char *dir = tmp_path("m", true);
    write_file(dir, "bad.manifest", "name = bad\n\0kind = sampler\n", 27);
    memra_registry *r = open_one(dir);
    const memra_registry_entry *e = memra_registry_entry_at(r, 0);
    cr_assert_eq(e->state, MEMRA_ENTRY_FAILED);
    cr_assert_not_null(strstr(e->message, "NUL byte"), "%s", e->message);
    memra_registry_close(r);
}

Test(registry, malformed_manifest_is_a_folder) {
    char *dir = tmp_path("m", true);
    tmp_path("m/odd.manifest", true);
    memra_registry *r = open_one(dir);
    const memra_registry_entry *e = memra_registry_entry_at(r, 0);
    cr_assert_eq(e->state, MEMRA_ENTRY_FAILED);
    cr_assert_not_null(strstr(e->message, "not a regular file"), "%s", e->message);
    memra_registry_close(r);
}

Test(registry, malformed_manifest_refuses_load_with_file_and_line) {
    char *dir = tmp_path("d", true);
    char text[PATH_MAX + 128];
    snprintf(text, sizeof text, "name = good\nkind = sampler\nfile = %s\nsha = 1234\n", plugin_path("good"));
    write_text(dir, "good.manifest", text);
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s/good.manifest:4: unknown key 'sha'", dir);
    expect_refusal(dir, "good", MEMRA_PLUGIN_SAMPLER, MEMRA_E_FORMAT, "plugin 'good' (sampler): manifest malformed",
                   where, NULL);
}

Test(registry, malformed_manifest_text_is_quoted_without_control_bytes) {
    /* A manifest line with a terminal escape sequence and a carriage return: the refusal quotes
     * the key, but as one line of plain text ('?' for each control byte). */
    char *dir = tmp_path("d", true);
    char text[PATH_MAX + 128];
    snprintf(text, sizeof text, "name = good\nkind = sampler\nfile = %s\n\x1b[2J\rsha = 1\n", plugin_path("good"));
    write_text(dir, "good.manifest", text);
    memra_registry *r = open_one(dir);
    const memra_registry_entry *e = memra_registry_entry_at(r, 0);
    cr_assert_eq(e->state, MEMRA_ENTRY_FAILED);
    cr_assert_not_null(strstr(e->message, "unknown key '?[2J?sha'"), "%s", e->message);
    for (const char *c = e->message; *c; c++)
        cr_assert((unsigned char)*c >= 0x20 && (unsigned char)*c != 0x7f, "control byte 0x%02x in: %s",
                  (unsigned char)*c, e->message);
    memra_registry_close(r);
}

/* ---- duplicates and shadows ---- */

Test(registry, refuses_duplicate_name_in_one_folder) {
    char *dir = tmp_path("d", true);
    manifest(dir, "good", "sampler", "good");
    char text[PATH_MAX + 128];
    snprintf(text, sizeof text, "name = good\nkind = sampler\nfile = %s\n", plugin_path("good"));
    write_text(dir, "zz-again.manifest", text);
    expect_refusal(dir, "good", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "duplicate name", "declared twice",
                   "good.manifest and zz-again.manifest", NULL);
    memra_registry *r = open_one(dir);
    for (uint32_t i = 0; i < memra_registry_count(r); i++)
        cr_assert_eq(memra_registry_entry_at(r, i)->state, MEMRA_ENTRY_FAILED);
    memra_registry_close(r);
}

Test(registry, same_name_other_kind_is_no_duplicate) {
    char *dir = tmp_path("d", true);
    manifest(dir, "good", "sampler", "good");
    write_text(dir, "good-backend.manifest", "name = good\nkind = backend\nfile = /nonexistent.so\n");
    memra_registry *r = open_one(dir);
    const memra_plugin *p;
    memra_error err;
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK, "%s", err.msg);
    memra_registry_close(r);
}

Test(registry, earlier_folder_shadows_later) {
    char *a = tmp_path("a", true);
    char *b = tmp_path("b", true);
    manifest(a, "good", "sampler", "good");
    manifest(b, "good", "sampler", "/nonexistent/libgood.so");
    const char *dirs[] = {a, b};
    memra_registry *r = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_open_dirs(dirs, 2, &r, &err), MEMRA_OK);
    const memra_plugin *p;
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK, "%s", err.msg);
    const memra_registry_entry *later = memra_registry_entry_at(r, 1);
    cr_assert_eq(later->state, MEMRA_ENTRY_SHADOWED);
    cr_assert_not_null(strstr(later->message, "shadowed by"), "%s", later->message);
    cr_assert_not_null(strstr(later->message, a), "%s", later->message);
    memra_registry_close(r);
}

Test(registry, broken_first_folder_is_never_substituted) {
    char *a = tmp_path("a", true);
    char *b = tmp_path("b", true);
    manifest(a, "good", "sampler", "/nonexistent/libgood.so");
    manifest(b, "good", "sampler", "good");
    const char *dirs[] = {a, b};
    memra_registry *r = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_open_dirs(dirs, 2, &r, &err), MEMRA_OK);
    const memra_plugin *p;
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_E_PLUGIN);
    cr_assert_null(p);
    cr_assert_not_null(strstr(err.msg, "file missing"), "%s", err.msg);
    cr_assert_eq(memra_registry_entry_at(r, 1)->state, MEMRA_ENTRY_SHADOWED);
    memra_registry_close(r);

    /* The same with a malformed first manifest (known at scan time, not at load time). */
    char text[PATH_MAX + 128];
    snprintf(text, sizeof text, "name = good\nkind = sampler\nfile = %s\nsigned = yes\n", plugin_path("good"));
    write_text(a, "good.manifest", text);
    cr_assert_eq(memra_registry_open_dirs(dirs, 2, &r, &err), MEMRA_OK);
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_E_FORMAT);
    cr_assert_null(p);
    cr_assert_not_null(strstr(err.msg, "manifest malformed"), "%s", err.msg);
    cr_assert_eq(memra_registry_entry_at(r, 1)->state, MEMRA_ENTRY_SHADOWED);
    memra_registry_close(r);
}

/* ---- the default search path ---- */

/* realpath into a ring of static buffers; the path itself when it does not resolve. */
static const char *real(const char *p) {
    static char ring[4][PATH_MAX];
    static unsigned next;
    char *r = ring[next++ % 4];
    if (!realpath(p, r))
        snprintf(r, PATH_MAX, "%s", p);
    return r;
}

/* The libmemra of this test lies in the build tree: the path closes with that tree's plugins.d
 * and nothing else (never an install folder). */
static void expect_default_tail(const memra_registry *r, uint32_t first) {
    const char *build = getenv("MEMRA_BUILD_DIR");
    cr_assert_not_null(build, "ctest sets MEMRA_BUILD_DIR");
    char want[PATH_MAX];
    cr_assert_eq(memra_registry_dir_count(r), first + 1);
    snprintf(want, sizeof want, "%s/plugins.d", build);
    const char *got = real(memra_registry_dir_at(r, first)), *exp = real(want);
    cr_assert_str_eq(got, exp);
}

/* ---- installed or build tree: decided by the marker beside libmemra ---- */

/* A copy of this build's libmemra at dir/libmemra.so, loaded in a namespace of its own (the
 * loader would otherwise hand back the libmemra of the same soname that this test links), with
 * the calls the tests need. */
typedef struct lib_copy {
    void *handle;
    memra_status (*open)(memra_registry **out, memra_error *err);
    void (*close)(memra_registry *r);
    uint32_t (*dir_count)(const memra_registry *r);
    const char *(*dir_at)(const memra_registry *r, uint32_t i);
    uint32_t (*count)(const memra_registry *r);
} lib_copy;

static void lib_copy_load(lib_copy *c, const char *dir) {
    Dl_info info;
    cr_assert(dladdr((const void *)&memra_registry_open, &info) && info.dli_fname, "dladdr(libmemra)");
    FILE *in = fopen(info.dli_fname, "rb");
    cr_assert_not_null(in, "%s", info.dli_fname);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/libmemra.so", dir);
    FILE *out = fopen(path, "wb");
    cr_assert_not_null(out, "%s", path);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        cr_assert_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
    c->handle = dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(c->handle, "dlopen %s: %s", path, dlerror());
    *(void **)&c->open = dlsym(c->handle, "memra_registry_open");
    *(void **)&c->close = dlsym(c->handle, "memra_registry_close");
    *(void **)&c->dir_count = dlsym(c->handle, "memra_registry_dir_count");
    *(void **)&c->dir_at = dlsym(c->handle, "memra_registry_dir_at");
    *(void **)&c->count = dlsym(c->handle, "memra_registry_count");
    cr_assert(c->open && c->close && c->dir_count && c->dir_at && c->count);
}

/* The folders a registry of the copy searches, joined by ':'. */
static const char *lib_copy_dirs(lib_copy *c) {
    static char joined[4 * PATH_MAX];
    memra_registry *r = NULL;
    memra_error err;
    cr_assert_eq(c->open(&r, &err), MEMRA_OK, "%s", err.msg);
    joined[0] = '\0';
    for (uint32_t i = 0; i < c->dir_count(r); i++)
        snprintf(joined + strlen(joined), sizeof joined - strlen(joined), "%s%s", i ? ":" : "", c->dir_at(r, i));
    c->close(r);
    return joined;
}

static void expect_dirs(lib_copy *c, const char *want) {
    const char *got = lib_copy_dirs(c);
    cr_assert_str_eq(got, want, "searched '%s', expected '%s'", got, want);
}

/* Under AddressSanitizer a second namespace would load a second sanitizer runtime: these two
 * run without it (tests/install checks the same with the installed tools). */
#ifdef REGTEST_LSAN
#define REGTEST_NO_ASAN .disabled = true
#else
#define REGTEST_NO_ASAN .disabled = false
#endif

Test(registry, an_installed_libmemra_searches_its_prefix_only, REGTEST_NO_ASAN) {
    unsetenv("MEMRA_PLUGIN_PATH");
    tmp_path("prefix", true);
    char *lib = tmp_path("prefix/lib", true);
    tmp_path("prefix/lib/memra", true);
    char *plugins = tmp_path("prefix/lib/memra/plugins.d", true);
    manifest(plugins, "good", "sampler", "good");
    lib_copy c;
    lib_copy_load(&c, lib);
    expect_dirs(&c, real(plugins));
    dlclose(c.handle);
}

Test(registry, a_build_tree_libmemra_searches_the_tree_its_marker_names, REGTEST_NO_ASAN) {
    unsetenv("MEMRA_PLUGIN_PATH");
    tmp_path("tree", true);
    char *lib = tmp_path("tree/lib", true);
    char *plugins = tmp_path("tree/plugins.d", true);
    tmp_path("tree/lib/memra", true);
    tmp_path("tree/lib/memra/plugins.d", true); /* an install folder in the same place: not read */
    write_text(lib, "memra-build-tree", "../plugins.d\n");
    lib_copy c;
    lib_copy_load(&c, lib);
    expect_dirs(&c, real(plugins));
    /* an absolute folder */
    char *elsewhere = tmp_path("elsewhere", true);
    char text[PATH_MAX + 2];
    snprintf(text, sizeof text, "%s\n", elsewhere);
    write_text(lib, "memra-build-tree", text);
    expect_dirs(&c, real(elsewhere));
    /* a marker that names nothing: still a build tree, so no install folder either */
    write_text(lib, "memra-build-tree", "\n");
    expect_dirs(&c, "");
    dlclose(c.handle);
}

Test(registry, this_build_writes_its_marker_beside_libmemra) {
    Dl_info info;
    cr_assert(dladdr((const void *)&memra_registry_open, &info) && info.dli_fname);
    char marker[PATH_MAX];
    snprintf(marker, sizeof marker, "%s", real(info.dli_fname));
    snprintf(strrchr(marker, '/') + 1, sizeof marker - (size_t)(strrchr(marker, '/') + 1 - marker), "memra-build-tree");
    struct stat sb;
    cr_assert_eq(stat(marker, &sb), 0, "%s is missing", marker);
}

Test(registry, plugin_path_skips_empty_and_relative_entries) {
    int lines = 0;
    memra_set_log_sink(log_sink, &lines);
    char *a = tmp_path("a", true);
    char *b = tmp_path("b", true);
    char env[3 * PATH_MAX];
    snprintf(env, sizeof env, "relative/dir::%s:.:%s/:", a, b);
    setenv("MEMRA_PLUGIN_PATH", env, 1);
    memra_registry *r = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_open(&r, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_str_eq(memra_registry_dir_at(r, 0), a);
    cr_assert_str_eq(memra_registry_dir_at(r, 1), b, "trailing slash dropped");
    expect_default_tail(r, 2);
    cr_assert_not_null(strstr(g_log, "entry 1 'relative/dir' is not absolute"), "%s", g_log);
    cr_assert_not_null(strstr(g_log, "entry 2 is empty"), "%s", g_log);
    cr_assert_not_null(strstr(g_log, "entry 4 '.' is not absolute"), "%s", g_log);
    cr_assert_not_null(strstr(g_log, "entry 6 is empty"), "%s", g_log);
    /* a plugin not found says which entries were skipped (the log may go nowhere) */
    const memra_plugin *p;
    cr_assert_eq(memra_registry_load(r, "nosuch", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_E_PLUGIN);
    cr_assert_not_null(strstr(err.msg, "; MEMRA_PLUGIN_PATH entry 1 'relative/dir' is not absolute: ignored"), "%s",
                       err.msg);
    memra_registry_close(r);
}

Test(registry, plugin_path_comes_first) {
    char *a = tmp_path("a", true);
    manifest(a, "good", "sampler", "good");
    setenv("MEMRA_PLUGIN_PATH", a, 1);
    memra_registry *r = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_open(&r, &err), MEMRA_OK, "%s", err.msg);
    expect_default_tail(r, 1);
    const memra_plugin *p;
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK, "%s", err.msg);
    memra_registry_close(r);
}

Test(registry, never_the_current_directory) {
    char *cwd = tmp_path("cwd", true);
    manifest(cwd, "good", "sampler", "good");
    cr_assert_eq(chdir(cwd), 0);
    const char *envs[] = {NULL, "", ".", ".:", ":", "./"};
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        if (envs[i])
            setenv("MEMRA_PLUGIN_PATH", envs[i], 1);
        else
            unsetenv("MEMRA_PLUGIN_PATH");
        memra_registry *r = NULL;
        memra_error err;
        cr_assert_eq(memra_registry_open(&r, &err), MEMRA_OK, "%s", err.msg);
        expect_default_tail(r, 0);
        for (uint32_t d = 0; d < memra_registry_dir_count(r); d++)
            cr_assert_str_neq(memra_registry_dir_at(r, d), cwd);
        for (uint32_t k = 0; k < memra_registry_count(r); k++)
            cr_assert_null(strstr(memra_registry_entry_at(r, k)->manifest, cwd));
        const memra_plugin *p;
        cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_E_PLUGIN,
                     "MEMRA_PLUGIN_PATH='%s' found the cwd's manifest", envs[i] ? envs[i] : "(unset)");
        cr_assert_not_null(strstr(err.msg, "no sampler plugin named 'good'"), "%s", err.msg);
        memra_registry_close(r);
    }
}

/* ---- arguments ---- */

Test(registry, bad_arguments) {
    memra_registry *r = NULL;
    memra_error err;
    const char *dirs[] = {"/tmp", ""};
    cr_assert_eq(memra_registry_open_dirs(dirs, 2, &r, &err), MEMRA_E_INVALID);
    cr_assert_not_null(strstr(err.msg, "folder 1 is empty"), "%s", err.msg);
    cr_assert_null(r);
    cr_assert_eq(memra_registry_open_dirs(NULL, 1, &r, &err), MEMRA_E_INVALID);
    cr_assert_eq(memra_registry_open_dirs(NULL, 0, NULL, &err), MEMRA_E_INVALID);
    cr_assert_eq(memra_registry_open_dirs(NULL, 0, &r, &err), MEMRA_OK);
    cr_assert_eq(memra_registry_count(r), 0);
    const memra_plugin *p;
    cr_assert_eq(memra_registry_load(r, NULL, MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_E_INVALID);
    cr_assert_eq(memra_registry_load(r, "x", 0, &p, &err), MEMRA_E_INVALID);
    cr_assert_eq(memra_registry_load(r, "x", 17, &p, &err), MEMRA_E_INVALID);
    cr_assert_eq(memra_registry_load(r, "x", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_E_PLUGIN);
    cr_assert_not_null(strstr(err.msg, "no folders"), "%s", err.msg);
    memra_registry_close(r);
    memra_registry_close(NULL);
    cr_assert_eq(memra_registry_count(NULL), 0);
    cr_assert_null(memra_registry_host(NULL));
}

Test(registry, relative_dirs_given_explicitly_are_made_absolute) {
    char *a = tmp_path("a", true);
    manifest(a, "good", "sampler", "good");
    cr_assert_eq(chdir(g_tmp), 0);
    const char *dirs[] = {"a"};
    memra_registry *r = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_open_dirs(dirs, 1, &r, &err), MEMRA_OK);
    const char *want = real(a);
    cr_assert_str_eq(memra_registry_dir_at(r, 0), want);
    cr_assert_eq(memra_registry_entry_at(r, 0)->file[0], '/');
    memra_registry_close(r);
}

Test(registry, many_registries_at_once) {
    char *a = tmp_path("a", true);
    manifest(a, "good", "sampler", "good");
    memra_registry *rs[64];
    memra_error err;
    uint32_t n = 0;
    while (n < 64 && memra_registry_open_dirs((const char *const *)&a, 1, &rs[n], &err) == MEMRA_OK)
        n++;
    cr_assert_eq(n, 64, "64 at once");
    memra_registry *extra = (memra_registry *)1;
    cr_assert_eq(memra_registry_open_dirs((const char *const *)&a, 1, &extra, &err), MEMRA_E_NOMEM);
    cr_assert_null(extra);
    cr_assert_not_null(strstr(err.msg, "registries are open"), "%s", err.msg);
    /* Each slot's host loads through its own registry. */
    for (uint32_t i = 0; i < n; i++) {
        const memra_plugin *p, *q;
        cr_assert_eq(memra_registry_host(rs[i])->find_plugin("good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK);
        cr_assert_eq(memra_registry_load(rs[i], "good", MEMRA_PLUGIN_SAMPLER, &q, &err), MEMRA_OK);
        cr_assert_eq(p, q);
        cr_assert_eq(memra_registry_entry_at(rs[i], 0)->state, MEMRA_ENTRY_LOADED);
    }
    for (uint32_t i = 0; i < n; i++)
        memra_registry_close(rs[i]);
}

/* ---- manifests and plugin files that are not regular files ---- */

Test(registry, manifest_fifo_is_refused_without_blocking, .timeout = 10) {
    /* Opening a FIFO for reading waits for a writer: the scan must refuse it without opening it
     * (against a scan that opens first, this test hangs until its timeout). */
    char *dir = tmp_path("m", true);
    char *fifo = tmp_path("m/pipe.manifest", false);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    manifest(dir, "good", "sampler", "good");
    memra_registry *r = open_one(dir);
    cr_assert_eq(memra_registry_count(r), 2);
    const memra_registry_entry *e = memra_registry_entry_at(r, 1);
    cr_assert_str_eq(e->manifest, fifo);
    cr_assert_eq(e->state, MEMRA_ENTRY_FAILED);
    cr_assert(strstr(e->message, fifo) && strstr(e->message, "FIFO"), "%s", e->message);
    /* The control: the good manifest beside it still loads. */
    const memra_plugin *p;
    memra_error err;
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK, "%s", err.msg);
    memra_registry_close(r);
}

Test(registry, manifest_device_is_refused, .timeout = 10) {
    char *dir = tmp_path("m", true);
    char *dev = tmp_path("m/zero.manifest", false);
    cr_assert_eq(symlink("/dev/zero", dev), 0);
    memra_registry *r = open_one(dir);
    const memra_registry_entry *e = memra_registry_entry_at(r, 0);
    cr_assert_eq(e->state, MEMRA_ENTRY_FAILED);
    cr_assert(strstr(e->message, dev) && strstr(e->message, "device"), "%s", e->message);
    memra_registry_close(r);
}

/* A manifest of exactly `size` bytes: the three lines, then comment lines as padding. */
static void padded_manifest(const char *dir, size_t size) {
    char head[PATH_MAX + 64];
    int k = snprintf(head, sizeof head, "name = good\nkind = sampler\nfile = %s\n", plugin_path("good"));
    char *text = malloc(size);
    cr_assert_not_null(text);
    memcpy(text, head, (size_t)k);
    for (size_t i = (size_t)k; i < size; i++)
        text[i] = (i + 1 == size || (i - (size_t)k) % 64 == 63) ? '\n' : '#';
    write_file(dir, "good.manifest", text, size);
    free(text);
}

Test(registry, manifest_larger_than_64k_is_refused) {
    char *dir = tmp_path("m", true);
    padded_manifest(dir, 64 * 1024 + 1);
    memra_registry *r = open_one(dir);
    const memra_registry_entry *e = memra_registry_entry_at(r, 0);
    cr_assert_eq(e->state, MEMRA_ENTRY_FAILED);
    cr_assert(strstr(e->message, "good.manifest") && strstr(e->message, "65537 bytes"), "%s", e->message);
    memra_registry_close(r);
    /* The control: 64 KiB exactly is read and loads. */
    padded_manifest(dir, 64 * 1024);
    r = open_one(dir);
    const memra_plugin *p;
    memra_error err;
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK, "%s", err.msg);
    memra_registry_close(r);
}

Test(registry, plugin_file_fifo_is_refused_without_blocking, .timeout = 10) {
    char *dir = tmp_path("d", true);
    char *fifo = tmp_path("d/libfifo.so", false);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    manifest(dir, "fifo", "sampler", fifo);
    expect_refusal(dir, "fifo", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "plugin 'fifo' (sampler)", fifo, "FIFO", NULL);
}
