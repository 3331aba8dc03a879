/* test_plugins_cli.c: `memra plugins` shows the registry's warnings (on stderr and in its
 * listing) and the SHA-256 of every loaded plugin's file, and a listing that cannot be written
 * (a full disk, a closed stdout) is exit 3 naming stdout and the errno. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "memra/digest.h"
#include "test_files.h"
#include "tool_run.h"

static char g_tmp[256];

static void setup(void) { tmp_dir_make(g_tmp, sizeof g_tmp, NULL, "plugins-cli"); }

static void teardown(void) { tmp_dir_remove(g_tmp); }

TestSuite(plugins_cli, .init = setup, .fini = teardown);

/* Runs `memra plugins` with MEMRA_PLUGIN_PATH=env and its stdout as `out` says. */
static tool_result run_plugins(const char *env, tool_out out) {
    cr_assert_eq(setenv("MEMRA_PLUGIN_PATH", env, 1), 0); /* this test's process only: the child inherits it */
    return tool_run_opts("memra", &(tool_opts){.out = out}, (const char *const[]){"plugins", NULL});
}

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    cr_assert(in && out, "copy %s to %s", from, to);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        cr_assert_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    cr_assert_eq(fclose(out), 0);
}

Test(plugins_cli, warnings_on_stderr_and_in_the_listing_and_a_sha256_per_plugin) {
    const char *build = getenv("MEMRA_BUILD_DIR");
    cr_assert_not_null(build);
    char own[PATH_MAX + 64], env[PATH_MAX], copy[PATH_MAX + 32], missing[PATH_MAX], path[4 * PATH_MAX];
    snprintf(own, sizeof own, "%s/plugins.d/libmemra-sampler-cpu.so", build);
    snprintf(env, sizeof env, "%s/env", g_tmp);
    snprintf(copy, sizeof copy, "%s/libcpu.so", env);
    snprintf(missing, sizeof missing, "%s/missing", g_tmp);
    cr_assert_eq(mkdir(env, 0755), 0);
    copy_file(own, copy);
    char manifest[PATH_MAX + 32];
    snprintf(manifest, sizeof manifest, "%s/cpu.manifest", env);
    FILE *m = fopen(manifest, "w");
    cr_assert_not_null(m);
    fprintf(m, "name = cpu\nkind = sampler\nfile = libcpu.so\n");
    cr_assert_eq(fclose(m), 0);

    snprintf(path, sizeof path, "rel::%s:%s", missing, env);
    tool_result r = run_plugins(path, TOOL_OUT_FILE);
    cr_assert_eq(r.code, 0, "%s", r.err);
    const char *so = r.out, *se = r.err;
    const char *want[] = {"entry 1 'rel' is not absolute", "entry 2 is empty", missing, "hides memra's own"};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_not_null(strstr(se, want[i]), "stderr lacks '%s':\n%s", want[i], se);
        cr_assert_not_null(strstr(so, want[i]), "the listing lacks '%s':\n%s", want[i], so);
    }
    cr_assert_not_null(strstr(so, "warnings:"), "%s", so);
    /* The sha256 of the copy that was loaded, from $MEMRA_PLUGIN_PATH, hiding memra's own. */
    uint8_t sha[32];
    char hex[MEMRA_SHA256_HEX], line[128];
    memra_error err;
    cr_assert_eq(memra_sha256_file(copy, sha, &err), MEMRA_OK, "%s", err.msg);
    memra_sha256_hex(sha, hex);
    snprintf(line, sizeof line, "sha256: %s", hex);
    cr_assert_not_null(strstr(so, line), "no '%s' in:\n%s", line, so);
    cr_assert_not_null(strstr(so, "from $MEMRA_PLUGIN_PATH, hiding memra's own"), "%s", so);
    tool_result_free(&r);

    /* The control: no variable, no warning anywhere; still a sha256 per loaded plugin. */
    r = run_plugins("", TOOL_OUT_FILE);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert_null(strstr(r.err, "warning"), "%s", r.err);
    cr_assert_null(strstr(r.out, "warnings:"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "sha256: "), "%s", r.out);
    tool_result_free(&r);
}

static void expect_stdout_failure(tool_out out, int errnum) {
    tool_result r = run_plugins("", out);
    cr_assert_eq(r.code, 3, "memra plugins with stdout %s: exit %d", out == TOOL_OUT_FULL ? "on /dev/full" : "closed",
                 r.code);
    cr_assert(strstr(r.err, "stdout") && strstr(r.err, strerror(errnum)), "%s", r.err);
    tool_result_free(&r);
}

Test(plugins_cli, a_full_stdout_is_exit_3) { expect_stdout_failure(TOOL_OUT_FULL, ENOSPC); }

Test(plugins_cli, a_closed_stdout_is_exit_3) { expect_stdout_failure(TOOL_OUT_CLOSED, EBADF); }

Test(plugins_cli, control_a_writable_stdout_is_exit_0) {
    tool_result r = run_plugins("", TOOL_OUT_FILE);
    cr_assert_eq(r.code, 0, "%s", r.err);
    tool_result_free(&r);
}

/* Issue 31: a plugin that fails to load makes `memra plugins` exit 3 (a CI step can run it), and
 * stderr names the plugin and why; the listing is still printed whole. */
Test(plugins_cli, a_plugin_that_fails_to_load_is_exit_3_naming_it) {
    char env[PATH_MAX], manifest[PATH_MAX + 32], so[PATH_MAX + 32];
    snprintf(env, sizeof env, "%s/env", g_tmp);
    cr_assert_eq(mkdir(env, 0755), 0);
    snprintf(manifest, sizeof manifest, "%s/broken.manifest", env);
    snprintf(so, sizeof so, "%s/libbroken.so", env);
    FILE *m = fopen(manifest, "w");
    cr_assert_not_null(m);
    fprintf(m, "name = broken\nkind = backend\nfile = libbroken.so\n");
    cr_assert_eq(fclose(m), 0);
    FILE *f = fopen(so, "w"); /* not an ELF file: dlopen refuses it */
    cr_assert_not_null(f);
    fprintf(f, "not a shared object\n");
    cr_assert_eq(fclose(f), 0);

    tool_result r = run_plugins(env, TOOL_OUT_FILE);
    cr_assert_eq(r.code, 3, "exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.err);
    cr_assert_not_null(strstr(r.err, "backend plugin 'broken' failed to load"), "%s", r.err);
    cr_assert_not_null(strstr(r.out, "1 failed to load"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "libmemra-backend-cpu.so"), "the listing is whole: %s", r.out);
    tool_result_free(&r);

    /* The control: the same folder without the broken plugin is exit 0. */
    cr_assert_eq(unlink(manifest), 0);
    r = run_plugins(env, TOOL_OUT_FILE);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.out, " 0 failed to load"), "%s", r.out);
    tool_result_free(&r);
}

/* Issue 31: the test-only plugins (tests/gate: faulty, faultycoll...) are never in the build
 * tree's plugins.d, so neither `memra plugins` nor a "plugins found:" message names them; they
 * are found only through their own folder ($MEMRA_TEST_PLUGIN_DIR), which the control proves
 * holds them (built: this test depends on them). */
Test(plugins_cli, test_plugins_are_never_listed_nor_found) {
    const char *test_dir = getenv("MEMRA_TEST_PLUGIN_DIR");
    cr_assert(test_dir && *test_dir, "MEMRA_TEST_PLUGIN_DIR is not set (ctest sets it)");
    const char *hidden[] = {"faulty",           "faultycoll",        "faultycoll_order",
                            "faultycoll_epoch", "faultycoll_commit", "mixedtp"};

    tool_result r = run_plugins("", TOOL_OUT_FILE);
    cr_assert_eq(r.code, 0, "%s", r.err);
    for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++) {
        char line[64];
        snprintf(line, sizeof line, "\n%s ", hidden[i]);
        cr_assert_null(strstr(r.out, line), "memra plugins lists the test-only plugin %s:\n%s", hidden[i], r.out);
    }
    cr_assert_null(strstr(r.out, "faulty"), "%s", r.out);
    tool_result_free(&r);

    /* A backend that does not exist: the message lists the backends found, and no test plugin. */
    r = tool_run("memra", "run", "--preset", "tiny", "--backend", "nosuch", "-n", "1", NULL);
    cr_assert_neq(r.code, 0);
    cr_assert_not_null(strstr(r.err, "backend plugins found: cpu"), "%s", r.err);
    cr_assert_null(strstr(r.err, "faulty"), "%s", r.err);
    tool_result_free(&r);

    /* Whatever a later change adds: every manifest in the build tree's plugins.d names a plugin
     * memra ships (a new shipped plugin is added here; a test-only one goes to tests/plugins.d). */
    const char *build_dir = getenv("MEMRA_BUILD_DIR");
    cr_assert(build_dir && *build_dir, "MEMRA_BUILD_DIR is not set (ctest sets it)");
    const char *shipped[] = {"cpu.backend",       "cpu.sampler",      "cuda.backend",    "cuda-graph.backend",
                             "default.placement", "local.collective", "nccl.collective", "oneshot.collective"};
    char pd[4096];
    snprintf(pd, sizeof pd, "%s/plugins.d", build_dir);
    DIR *dir = opendir(pd);
    cr_assert_not_null(dir, "%s: %s", pd, strerror(errno));
    size_t n_manifests = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        size_t len = strlen(e->d_name), suffix = strlen(".manifest");
        if (len <= suffix || strcmp(e->d_name + len - suffix, ".manifest") != 0)
            continue;
        n_manifests++;
        bool known = false;
        for (size_t i = 0; i < sizeof shipped / sizeof shipped[0]; i++)
            known |= strlen(shipped[i]) == len - suffix && strncmp(e->d_name, shipped[i], len - suffix) == 0;
        cr_expect(known, "%s/%s is not a plugin memra ships: a test-only plugin belongs in tests/plugins.d", pd,
                  e->d_name);
    }
    closedir(dir);
    cr_assert_gt(n_manifests, 0, "%s holds no manifest", pd);

    /* The control: through their own folder they are there, and load. */
    r = run_plugins(test_dir, TOOL_OUT_FILE);
    cr_assert_eq(r.code, 0, "%s", r.err);
    for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++) {
        char line[64];
        snprintf(line, sizeof line, "\n%s ", hidden[i]);
        cr_assert_not_null(strstr(r.out, line), "%s is not in %s:\n%s", hidden[i], test_dir, r.out);
    }
    tool_result_free(&r);
}
