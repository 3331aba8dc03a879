/* test_nccl.c: the `nccl` collective (collectives/nccl) and `memra bench-collective` where there
 * may be no GPU and no NCCL: the plugin loads through the registry and lists its keys; create
 * refuses, with messages that name the cause, a missing library, a library too old, one missing
 * a symbol, an unknown or bad option, a rank count out of range and two ranks on one device (the
 * last three before the library is even opened); with NCCL present and no GPU it fails with a
 * device error; arm_refusal's words; NULL handles. The command: --help, usage errors (exit 2),
 * `local` refused, no CUDA device (exit 3). The device checks themselves are
 * nccl_device_check.c (label gpu). */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "memra/plugin.h"
#include "memra/registry.h"

static memra_registry *g_reg;
static const memra_collective_vtable *g_vt;
static const memra_plugin *g_plugin;

static void setup(void) {
    memra_error err = {0};
    const char *dirs[1] = {COLLTEST_BUILD_PLUGIN_DIR};
    cr_assert_eq(memra_registry_open_dirs(dirs, 1, &g_reg, &err), MEMRA_OK, "%s", err.msg);
    const memra_plugin *p = NULL;
    cr_assert_eq(memra_registry_load(g_reg, "nccl", MEMRA_PLUGIN_COLLECTIVE, &p, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_not_null(p->collective);
    g_vt = p->collective;
    g_plugin = p;
}

static void teardown(void) {
    memra_registry_close(g_reg);
    g_reg = NULL;
    g_vt = NULL;
}

TestSuite(collective_nccl, .init = setup, .fini = teardown, .timeout = 120);

static memra_options opts_of(int n, ...) {
    memra_options o;
    memset(&o, 0, sizeof o);
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        snprintf(o.items[i].key, sizeof o.items[i].key, "%s", va_arg(ap, const char *));
        snprintf(o.items[i].value, sizeof o.items[i].value, "%s", va_arg(ap, const char *));
    }
    va_end(ap);
    o.n = (uint32_t)n;
    return o;
}

/* create must fail with `status` and a message holding `needle`, leaving *out NULL. */
static void expect_create_fails(uint32_t n, const int32_t *devices, const memra_options *o, memra_status status,
                                const char *needle) {
    memra_error err = {0};
    memra_collective *c = (memra_collective *)(uintptr_t)1;
    memra_status st = g_vt->create(memra_registry_host(g_reg), n, devices, o, &c, &err);
    cr_assert_eq(st, status, "create(%u ranks) returned %d, expected %d: %s", n, (int)st, (int)status, err.msg);
    cr_assert_null(c, "create failed but left a handle");
    cr_assert(strstr(err.msg, needle), "message '%s' does not name '%s'", err.msg, needle);
}

static bool have_gpu(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();
    return e == cudaSuccess && n > 0;
}

static bool have_libnccl(void) {
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    return h != NULL; /* left loaded: the plugin opens the same one */
}

/* Catches: the plugin not built or not found by its manifest, the appended members (bootstrap_id,
 * create_rank) left NULL, a key or a default lost from the option specs that --help and memra
 * plugins show. */
Test(collective_nccl, loads_and_lists_its_keys) {
    cr_assert(MEMRA_HAS_MEMBER(g_vt, memra_collective_vtable, create_rank));
    cr_assert_not_null(g_vt->create);
    cr_assert_not_null(g_vt->all_reduce_sum_f32);
    cr_assert_not_null(g_vt->epochs);
    cr_assert_not_null(g_vt->arm_refusal);
    cr_assert_not_null(g_vt->abort);
    cr_assert_not_null(g_vt->bootstrap_id);
    cr_assert_not_null(g_vt->create_rank);
    const memra_option_spec *specs = NULL;
    uint32_t n = memra_plugin_option_specs(g_plugin, &specs);
    cr_assert_geq(n, 3);
    const char *want[][2] = {{"mode", "sum"}, {"library", "libnccl.so.2"}, {"timeout_ms", "10000"}, {"blocking", "0"}};
    for (size_t w = 0; w < 4; w++) {
        bool found = false;
        for (uint32_t i = 0; i < n; i++)
            if (strcmp(specs[i].key, want[w][0]) == 0) {
                found = true;
                cr_assert_str_eq(specs[i].default_value, want[w][1], "key %s", want[w][0]);
                cr_assert(specs[i].help && *specs[i].help, "key %s has no help", want[w][0]);
            }
        cr_assert(found, "key %s is not listed", want[w][0]);
    }
}

/* Catches: a crash or a hang on a library that is not there, a status other than UNSUPPORTED
 * (callers tell "cannot here" from "bad argument" by it), a message that does not name the
 * file tried. */
Test(collective_nccl, missing_library_is_unsupported_naming_the_file) {
    int32_t dev[1] = {0};
    memra_options o = opts_of(1, "library", "/nonexistent/libnccl.so.2");
    expect_create_fails(1, dev, &o, MEMRA_E_UNSUPPORTED, "/nonexistent/libnccl.so.2");
    expect_create_fails(1, dev, &o, MEMRA_E_UNSUPPORTED, "2.18");
}

/* Catches: a missing version check (the old library would then be called through symbols it
 * lacks), a wrong decoding of NCCL's version code (21000 is 2.10.0), a minimum not named. */
Test(collective_nccl, old_library_is_refused_naming_both_versions) {
    int32_t dev[1] = {0};
    memra_options o = opts_of(1, "library", FAKE_NCCL_OLD);
    expect_create_fails(1, dev, &o, MEMRA_E_UNSUPPORTED, "2.10.0");
    expect_create_fails(1, dev, &o, MEMRA_E_UNSUPPORTED, "2.18.0");
    expect_create_fails(1, dev, &o, MEMRA_E_UNSUPPORTED, FAKE_NCCL_OLD);
}

/* Catches: a symbol looked up and not checked (a NULL call: a crash), a message not naming the
 * symbol. The fake says 2.28.0 but exports nothing else. */
Test(collective_nccl, library_missing_a_symbol_is_refused_naming_it) {
    int32_t dev[1] = {0};
    memra_options o = opts_of(1, "library", FAKE_NCCL_NEW);
    expect_create_fails(1, dev, &o, MEMRA_E_UNSUPPORTED, "has no symbol nccl");
    expect_create_fails(1, dev, &o, MEMRA_E_UNSUPPORTED, FAKE_NCCL_NEW);
}

/* Catches: an unknown key accepted silently (a typo would change nothing), a bad value accepted,
 * options read after the library is opened (the missing library would then answer first). */
Test(collective_nccl, options_are_checked_before_the_library) {
    int32_t dev[1] = {0};
    memra_options o = opts_of(2, "library", "/nonexistent/libnccl.so.2", "bogus_key", "1");
    expect_create_fails(1, dev, &o, MEMRA_E_INVALID, "bogus_key");
    o = opts_of(2, "library", "/nonexistent/libnccl.so.2", "mode", "max");
    expect_create_fails(1, dev, &o, MEMRA_E_INVALID, "mode=max");
    o = opts_of(2, "library", "/nonexistent/libnccl.so.2", "timeout_ms", "0");
    expect_create_fails(1, dev, &o, MEMRA_E_INVALID, "timeout_ms=0");
    o = opts_of(2, "library", "/nonexistent/libnccl.so.2", "timeout_ms", "12x");
    expect_create_fails(1, dev, &o, MEMRA_E_INVALID, "timeout_ms=12x");
    o = opts_of(2, "library", "/nonexistent/libnccl.so.2", "max_blocks", "0");
    expect_create_fails(1, dev, &o, MEMRA_E_INVALID, "max_blocks=0");
    o = opts_of(1, "library", "");
    expect_create_fails(1, dev, &o, MEMRA_E_INVALID, "library=");
    o = opts_of(2, "library", "/nonexistent/libnccl.so.2", "blocking", "2");
    expect_create_fails(1, dev, &o, MEMRA_E_INVALID, "blocking=2");
    o = opts_of(2, "library", "/nonexistent/libnccl.so.2", "blocking", "1");
    expect_create_fails(1, dev, &o, MEMRA_E_UNSUPPORTED, "/nonexistent/libnccl.so.2"); /* accepted: the library next */
}

/* Catches: 0 or more than MEMRA_MAX_RANKS ranks reaching NCCL (or an array overrun), NULL
 * devices dereferenced, a negative device accepted; all before the library is opened. */
Test(collective_nccl, rank_counts_and_devices_are_checked_first) {
    int32_t dev[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    memra_options o = opts_of(1, "library", "/nonexistent/libnccl.so.2");
    expect_create_fails(0, dev, &o, MEMRA_E_INVALID, "0 ranks");
    expect_create_fails(9, dev, &o, MEMRA_E_INVALID, "9 ranks");
    expect_create_fails(2, NULL, &o, MEMRA_E_INVALID, "devices is NULL");
    int32_t neg[2] = {0, -1};
    expect_create_fails(2, neg, &o, MEMRA_E_INVALID, "rank 1 has device -1");
    memra_error err = {0};
    cr_assert_eq(g_vt->create(memra_registry_host(g_reg), 1, dev, &o, NULL, &err), MEMRA_E_INVALID);
}

/* Catches: two ranks on one device handed to NCCL (which refuses duplicate GPUs with a message
 * that names neither rank), the check made after the library is opened (the nonexistent library
 * would then answer first: the order is visible), the wrong pair named. */
Test(collective_nccl, two_ranks_on_one_device_are_refused_first) {
    memra_options o = opts_of(1, "library", "/nonexistent/libnccl.so.2");
    int32_t same[2] = {0, 0};
    expect_create_fails(2, same, &o, MEMRA_E_INVALID,
                        "nccl: ranks 0 and 1 are both on device 0; NCCL needs one device per rank");
    int32_t later[3] = {1, 2, 1};
    expect_create_fails(3, later, &o, MEMRA_E_INVALID, "ranks 0 and 2 are both on device 1");
    /* Without the option too: the default library must not be opened first either. */
    expect_create_fails(2, same, NULL, MEMRA_E_INVALID, "ranks 0 and 1 are both on device 0");
}

/* Catches: with NCCL present and no GPU, a crash or a status other than DEVICE, a message that
 * does not say there is no CUDA device; with a GPU, a create that fails. */
Test(collective_nccl, no_gpu_is_a_device_error) {
    if (!have_libnccl())
        cr_skip_test("libnccl.so.2 is not installed here (the missing-library case is tested above)");
    int32_t dev[1] = {0};
    memra_error err = {0};
    memra_collective *c = NULL;
    memra_status st = g_vt->create(memra_registry_host(g_reg), 1, dev, NULL, &c, &err);
    if (have_gpu()) {
        cr_assert_eq(st, MEMRA_OK, "a GPU is present but create failed: %s", err.msg);
        g_vt->destroy(c);
        return;
    }
    cr_assert_eq(st, MEMRA_E_DEVICE, "no GPU: create returned %d: %s", (int)st, err.msg);
    cr_assert_null(c);
    cr_assert(strstr(err.msg, "no CUDA device"), "%s", err.msg);
}

/* Catches: MEMRA_COLLECTIVE_ABSENT accepted (nccl cannot make a rank miss an operation), a
 * reserved word (0 or any MEMRA_COLLECTIVE_ word, INT32_MIN .. INT32_MIN+255) accepted, an
 * off-by-one at the end of the reserved range, a NULL handle dereferenced. The words are
 * checked before the handle, so this runs without a GPU. */
Test(collective_nccl, arm_refusal_words) {
    memra_error err = {0};
    cr_assert_eq(g_vt->arm_refusal(NULL, 0, 0, 0, MEMRA_COLLECTIVE_ABSENT, &err), MEMRA_E_UNSUPPORTED);
    cr_assert(strstr(err.msg, "nccl cannot inject an absent rank"), "%s", err.msg);
    const int32_t reserved[] = {0,
                                MEMRA_COLLECTIVE_PENDING,
                                MEMRA_COLLECTIVE_FAILED,
                                MEMRA_COLLECTIVE_ABORTED,
                                MEMRA_COLLECTIVE_TIMEOUT(0),
                                MEMRA_COLLECTIVE_TIMEOUT(7),
                                INT32_MIN + 255};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        memset(&err, 0, sizeof err);
        cr_assert_eq(g_vt->arm_refusal(NULL, 0, 0, 0, reserved[i], &err), MEMRA_E_INVALID, "word %d", (int)reserved[i]);
        cr_assert(strstr(err.msg, "reserved"), "word %d: %s", (int)reserved[i], err.msg);
    }
    const int32_t allowed[] = {INT32_MIN + 256, -1, 1, 7, INT32_MAX};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        memset(&err, 0, sizeof err);
        cr_assert_eq(g_vt->arm_refusal(NULL, 0, 0, 0, allowed[i], &err), MEMRA_E_INVALID, "word %d", (int)allowed[i]);
        cr_assert(strstr(err.msg, "communicator is NULL"), "word %d was refused as: %s", (int)allowed[i], err.msg);
    }
}

/* Catches: a NULL handle or a NULL argument dereferenced by any entry point. */
Test(collective_nccl, null_handles_and_arguments) {
    memra_error err = {0};
    float x = 0;
    int32_t s = 0;
    uint64_t e = 0;
    cr_assert_eq(g_vt->all_reduce_sum_f32(NULL, 0, &x, 1, (void *)1, 0, NULL, &s, &err), MEMRA_E_INVALID);
    cr_assert_eq(g_vt->epochs(NULL, 0, &e, 1, &err), MEMRA_E_INVALID);
    g_vt->abort(NULL);
    g_vt->destroy(NULL);
    cr_assert_eq(g_vt->bootstrap_id(memra_registry_host(g_reg), NULL, MEMRA_COLLECTIVE_ID_BYTES, &err),
                 MEMRA_E_INVALID);
    uint8_t id[MEMRA_COLLECTIVE_ID_BYTES];
    cr_assert_eq(g_vt->bootstrap_id(memra_registry_host(g_reg), id, 64, &err), MEMRA_E_INVALID);
    memra_collective *c = NULL;
    cr_assert_eq(g_vt->create_rank(memra_registry_host(g_reg), NULL, NULL, &c, &err), MEMRA_E_INVALID);
    memra_collective_bootstrap boot = {.struct_size = sizeof boot, .n_ranks = 2, .rank = 2, .device = 0};
    cr_assert_eq(g_vt->create_rank(memra_registry_host(g_reg), &boot, NULL, &c, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "rank 2 of 2"), "%s", err.msg);
    boot.rank = 0;
    boot.struct_size = 8;
    cr_assert_eq(g_vt->create_rank(memra_registry_host(g_reg), &boot, NULL, &c, &err), MEMRA_E_INVALID);
    cr_assert_null(c);
}

/* ------------------------------------------------------------------------------------------ */
/* memra bench-collective                                                                      */

typedef struct run_result {
    int code;
    char out[16384];
    char err[16384];
} run_result;

static void read_file(const char *path, char *buf, size_t size) {
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Runs bin/memra with the arguments (NULL-terminated); killed past 60 s (code -1). */
static void run_memra(run_result *r, const char *arg, ...) {
    const char *bin = getenv("MEMRA_BIN_DIR");
    cr_assert(bin && *bin, "MEMRA_BIN_DIR is not set (run through ctest)");
    const char *tmp = getenv("MEMRA_BUILD_DIR");
    char exe[1024], out_path[1024], err_path[1024];
    snprintf(exe, sizeof exe, "%s/memra", bin);
    snprintf(out_path, sizeof out_path, "%s/test_nccl_%d.stdout", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    snprintf(err_path, sizeof err_path, "%s/test_nccl_%d.stderr", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    const char *argv[64];
    int n = 0;
    argv[n++] = exe;
    va_list ap;
    va_start(ap, arg);
    for (const char *a = arg; a && n < 63; a = va_arg(ap, const char *))
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    for (int waited = 0;; waited++) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (waited > 6000) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            r->code = -1;
            goto done;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    r->code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
done:
    read_file(out_path, r->out, sizeof r->out);
    read_file(err_path, r->err, sizeof r->err);
    unlink(out_path);
    unlink(err_path);
}

#define EXPECT_RUN(r, want_code, stream, needle)                                                                       \
    do {                                                                                                               \
        cr_assert_eq((r).code, (want_code), "exit %d, expected %d; stderr: %s", (r).code, (want_code), (r).err);       \
        cr_assert(strstr((r).stream, (needle)), "%s does not hold '%s': %s", #stream, (needle), (r).stream);           \
    } while (0)

/* Catches: --help not answered (or answered with a failure code), the help missing the keys
 * the command takes. */
Test(collective_nccl, bench_help) {
    run_result r;
    run_memra(&r, "bench-collective", "--help", NULL);
    EXPECT_RUN(r, 0, out, "usage: memra bench-collective");
    cr_assert(strstr(r.out, "--collective") && strstr(r.out, "--ranks") && strstr(r.out, "--jsonl") &&
              strstr(r.out, "--timeout-ms") && strstr(r.out, "bus bandwidth"));
}

/* Catches: a bad argument that runs anyway, or fails as a runtime error (3) instead of usage (2),
 * or fails without saying which argument. */
Test(collective_nccl, bench_usage_errors) {
    run_result r;
    run_memra(&r, "bench-collective", "--ranks", "1", NULL);
    EXPECT_RUN(r, 2, err, "--collective NAME is required");
    run_memra(&r, "bench-collective", "--collective", "nccl", NULL);
    EXPECT_RUN(r, 2, err, "--ranks N is required");
    run_memra(&r, "bench-collective", "--collective", "nccl", "--ranks", "0", NULL);
    EXPECT_RUN(r, 2, err, "--ranks '0'");
    run_memra(&r, "bench-collective", "--collective", "nccl", "--ranks", "9", NULL);
    EXPECT_RUN(r, 2, err, "--ranks '9'");
    run_memra(&r, "bench-collective", "--collective", "nccl", "--ranks", "2", "--devices", "0", NULL);
    EXPECT_RUN(r, 2, err, "names 1 device(s) for 2 rank(s)");
    run_memra(&r, "bench-collective", "--collective", "nccl", "--ranks", "2", "--devices", "0,x", NULL);
    EXPECT_RUN(r, 2, err, "--devices '0,x'");
    run_memra(&r, "bench-collective", "--collective", "nccl", "--ranks", "1", "--min-bytes", "6", NULL);
    EXPECT_RUN(r, 2, err, "multiples of 4");
    run_memra(&r, "bench-collective", "--collective", "nccl", "--ranks", "1", "--min-bytes", "1Q", NULL);
    EXPECT_RUN(r, 2, err, "--min-bytes '1Q'");
    run_memra(&r, "bench-collective", "--collective", "nccl", "--ranks", "1", "--min-bytes", "8M", "--max-bytes", "4M",
              NULL);
    EXPECT_RUN(r, 2, err, "is less than --min-bytes");
    run_memra(&r, "bench-collective", "--collective", "nccl", "--ranks", "1", "--iters", "0", NULL);
    EXPECT_RUN(r, 2, err, "--iters '0'");
    run_memra(&r, "bench-collective", "--collective", "nccl", "--ranks", "1", "--timeout-ms", "0", NULL);
    EXPECT_RUN(r, 2, err, "--timeout-ms '0'");
    run_memra(&r, "bench-collective", "--collective", "nccl", "--ranks", "1", "--bogus", NULL);
    EXPECT_RUN(r, 2, err, "--bogus");
    run_memra(&r, "bench-collective", "--collective", "nccl:", "--ranks", "1", NULL);
    EXPECT_RUN(r, 2, err, "--collective 'nccl:'");
    run_memra(&r, "bench-collective", "--collective", "no-such-collective", "--ranks", "1", NULL);
    EXPECT_RUN(r, 2, err, "no collective plugin of that name");
    run_memra(&r, "bench-collective", "--collective", "nccl", "--ranks", "1", "--jsonl", "", NULL);
    EXPECT_RUN(r, 2, err, "--jsonl: empty file name");
}

/* Catches: `local` (host memory, NULL streams) handed device buffers: refused by name, as usage,
 * before anything touches CUDA (so also here, without a GPU). */
Test(collective_nccl, bench_refuses_local) {
    run_result r;
    run_memra(&r, "bench-collective", "--collective", "local", "--ranks", "2", NULL);
    EXPECT_RUN(r, 2, err, "local reduces host memory; bench-collective measures device collectives");
}

/* Catches: without a GPU, a crash, a hang, a success, a usage code, or a message that does not
 * say there is no CUDA device. */
Test(collective_nccl, bench_without_a_gpu_is_exit_3) {
    if (have_gpu())
        cr_skip_test("a GPU is present (nccl_device_check and the bench itself cover it)");
    run_result r;
    run_memra(&r, "bench-collective", "--collective", "nccl", "--ranks", "1", "--max-bytes", "16K", NULL);
    EXPECT_RUN(r, 3, err, "no CUDA device");
    run_memra(&r, "bench-collective", "--collective", "nccl:allgather", "--ranks", "2", "--graph", NULL);
    EXPECT_RUN(r, 3, err, "no CUDA device");
}
