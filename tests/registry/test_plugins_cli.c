/* test_plugins_cli.c: `memra plugins` shows the registry's warnings (on stderr and in its
 * listing) and the SHA-256 of every loaded plugin's file, and a listing that cannot be written
 * (a full disk, a closed stdout) is exit 3 naming stdout and the errno. */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "memra/digest.h"

static char g_tmp[256];

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void setup(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/memra-plugins-cli-XXXXXX");
    cr_assert_not_null(mkdtemp(g_tmp));
}

static void teardown(void) {
    if (g_tmp[0])
        nftw(g_tmp, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(plugins_cli, .init = setup, .fini = teardown);

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

/* Runs `memra plugins` with MEMRA_PLUGIN_PATH=env and stdout redirection `out` (a shell
 * redirection, e.g. ">FILE", ">/dev/full", ">&-"); stderr into g_tmp/err. The exit status. */
static int run_plugins(const char *env, const char *out) {
    const char *bin = getenv("MEMRA_BIN_DIR");
    cr_assert_not_null(bin, "ctest sets MEMRA_BIN_DIR");
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "MEMRA_PLUGIN_PATH='%s' '%s/memra' plugins %s 2>'%s/err'", env, bin, out, g_tmp);
    int ws = system(cmd);
    cr_assert(WIFEXITED(ws), "%s", cmd);
    return WEXITSTATUS(ws);
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
    char out[PATH_MAX + 8];
    snprintf(out, sizeof out, ">'%s/out'", g_tmp);
    cr_assert_eq(run_plugins(path, out), 0);
    char f[PATH_MAX];
    snprintf(f, sizeof f, "%s/out", g_tmp);
    char *so = slurp(f);
    snprintf(f, sizeof f, "%s/err", g_tmp);
    char *se = slurp(f);
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
    free(so);
    free(se);

    /* The control: no variable, no warning anywhere; still a sha256 per loaded plugin. */
    cr_assert_eq(run_plugins("", out), 0);
    snprintf(f, sizeof f, "%s/out", g_tmp);
    so = slurp(f);
    snprintf(f, sizeof f, "%s/err", g_tmp);
    se = slurp(f);
    cr_assert_null(strstr(se, "warning"), "%s", se);
    cr_assert_null(strstr(so, "warnings:"), "%s", so);
    cr_assert_not_null(strstr(so, "sha256: "), "%s", so);
    free(so);
    free(se);
}

static void expect_stdout_failure(const char *redirection, int errnum) {
    cr_assert_eq(run_plugins("", redirection), 3, "memra plugins %s", redirection);
    char f[PATH_MAX];
    snprintf(f, sizeof f, "%s/err", g_tmp);
    char *se = slurp(f);
    cr_assert(strstr(se, "stdout") && strstr(se, strerror(errnum)), "%s", se);
    free(se);
}

Test(plugins_cli, a_full_stdout_is_exit_3) { expect_stdout_failure(">/dev/full", ENOSPC); }

Test(plugins_cli, a_closed_stdout_is_exit_3) { expect_stdout_failure(">&-", EBADF); }

Test(plugins_cli, control_a_writable_stdout_is_exit_0) { cr_assert_eq(run_plugins("", ">/dev/null"), 0); }
