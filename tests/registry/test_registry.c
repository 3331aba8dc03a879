/* test_registry.c: the plugin registry: manifests, search order, every refusal with its own
 * message, the host table, and the log sink. Each test writes manifests into its own temporary
 * folder, pointing at the test plugins built in REGTEST_PLUGIN_DIR. */
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
#include "memra/op.h"
#include "memra/options.h"
#include "memra/registry.h"
#include "memra/tensor_type.h"
#include "test_files.h"

/* Under AddressSanitizer each test ends with a leak check of its own: LeakSanitizer's report
 * at a Criterion worker's exit comes after the test has passed and fails nothing. */
#if defined(__SANITIZE_ADDRESS__)
#define REGTEST_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REGTEST_LSAN 1
#endif
#endif
#ifdef REGTEST_LSAN
#include <sanitizer/lsan_interface.h>
#endif

/* ---- temporary folders, files, manifests ---- */

static char g_tmp[256];

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
static char *tmp_path(const char *name, bool mkdir_it) {
    char *p = tmp_dir_path(g_tmp, name);
    if (mkdir_it)
        cr_assert_eq(mkdir(p, 0755), 0, "mkdir %s", p);
    return p;
}

static void write_file(const char *dir, const char *name, const void *data, size_t n) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void write_text(const char *dir, const char *name, const char *text) {
    write_file(dir, name, text, strlen(text));
}

/* The absolute path of test plugin `variant`. */
static const char *plugin_path(const char *variant) {
    static char path[8][PATH_MAX];
    static int next;
    char *p = path[next++ % 8];
    snprintf(p, PATH_MAX, "%s/libregtest_%s.so", REGTEST_PLUGIN_DIR, variant);
    return p;
}

/* Writes dir/<name>.manifest saying name, kind and file (a test plugin variant, or a path when
 * `file` contains a '/'). */
static void manifest(const char *dir, const char *name, const char *kind, const char *file) {
    char text[PATH_MAX + 128], fname[128];
    snprintf(text, sizeof text, "# test manifest\nname = %s\nkind = %s\nfile = %s\n", name, kind,
             strchr(file, '/') ? file : plugin_path(file));
    snprintf(fname, sizeof fname, "%s.manifest", name);
    write_text(dir, fname, text);
}

static memra_registry *open_one(const char *dir) {
    memra_registry *r = NULL;
    memra_error err;
    memra_error_clear(&err);
    cr_assert_eq(memra_registry_open_dirs(&dir, 1, &r, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_not_null(r);
    return r;
}

/* Loading (name, kind) from a registry over `dir` fails with `status` and a message holding
 * every one of the NULL-terminated substrings. */
static void expect_refusal(const char *dir, const char *name, memra_plugin_kind kind, memra_status status, ...) {
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

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_log[16384];

static void log_sink(memra_log_level level, const char *plugin, const char *line, void *user) {
    pthread_mutex_lock(&g_log_lock);
    size_t used = strlen(g_log);
    snprintf(g_log + used, sizeof g_log - used, "%d %s: %s\n", (int)level, plugin, line);
    if (user)
        ++*(int *)user;
    pthread_mutex_unlock(&g_log_lock);
}

/* ---- kinds ---- */

Test(registry, kind_names_round_trip) {
    const memra_plugin_kind kinds[] = {MEMRA_PLUGIN_PLACEMENT, MEMRA_PLUGIN_BACKEND, MEMRA_PLUGIN_COLLECTIVE,
                                       MEMRA_PLUGIN_SAMPLER};
    const char *words[] = {"placement", "backend", "collective", "sampler"};
    for (int i = 0; i < 4; i++) {
        memra_plugin_kind k = 0;
        cr_assert_str_eq(memra_plugin_kind_name(kinds[i]), words[i]);
        cr_assert(memra_plugin_kind_parse(words[i], &k));
        cr_assert_eq(k, kinds[i]);
    }
    memra_plugin_kind k = MEMRA_PLUGIN_SAMPLER;
    cr_assert_str_eq(memra_plugin_kind_name(0), "unknown");
    cr_assert_str_eq(memra_plugin_kind_name(99), "unknown");
    cr_assert_not(memra_plugin_kind_parse("Backend", &k));
    cr_assert_not(memra_plugin_kind_parse("", &k));
    cr_assert_not(memra_plugin_kind_parse(NULL, &k));
    cr_assert_eq(k, MEMRA_PLUGIN_SAMPLER, "a failed parse leaves *out alone");
}

/* ---- loading good plugins ---- */

Test(registry, good_sampler_loads_once_and_unloads) {
    int lines = 0;
    memra_set_log_sink(log_sink, &lines);
    char *dir = tmp_path("d", true);
    manifest(dir, "good", "sampler", "good");
    memra_registry *r = open_one(dir);
    cr_assert_eq(memra_registry_count(r), 1);
    const memra_registry_entry *e = memra_registry_entry_at(r, 0);
    cr_assert_eq(e->state, MEMRA_ENTRY_FOUND);
    cr_assert_str_eq(e->name, "good");
    cr_assert_eq(e->kind, MEMRA_PLUGIN_SAMPLER);
    cr_assert_str_eq(e->file, plugin_path("good"));
    cr_assert_str_eq(e->version, "");
    cr_assert_null(memra_registry_entry_at(r, 1));

    const memra_plugin *p = NULL, *q = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_str_eq(p->name, "good");
    cr_assert_eq(e->state, MEMRA_ENTRY_LOADED);
    cr_assert_str_eq(e->version, "1.2.3-test");
    cr_assert_str_eq(e->message, "");
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &q, &err), MEMRA_OK);
    cr_assert_eq(p, q, "loading twice gives the same descriptor");
    cr_assert_not_null(strstr(g_log, "good: init good"), "log: %s", g_log);
    cr_assert_eq(lines, 1, "init runs once; log: %s", g_log);

    const float logits[4] = {0.5f, 2.0f, 2.0f, -1.0f};
    uint32_t token = 99;
    cr_assert_eq(p->sampler->sample(logits, 4, 0, NULL, NULL, &token, &err), MEMRA_OK);
    cr_assert_eq(token, 1);

    memra_registry_close(r);
    cr_assert_not_null(strstr(g_log, "good: fini good"), "close calls fini; log: %s", g_log);
    void *still = dlopen(plugin_path("good"), RTLD_NOW | RTLD_NOLOAD);
    cr_assert_null(still, "close unloads the shared object");
}

Test(registry, file_relative_to_manifest_folder) {
    char *dir = tmp_path("d", true);
    char *sub = tmp_path("d/lib", true);
    /* A copy of the good plugin next to the manifest, named relatively. */
    FILE *f = fopen(plugin_path("good"), "rb");
    cr_assert_not_null(f);
    static char bytes[1 << 22];
    size_t n = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    cr_assert(n > 0 && n < sizeof bytes);
    write_file(sub, "libgood-copy.so", bytes, n);
    write_text(dir, "good.manifest", "name=good\nkind=sampler\nfile=lib/libgood-copy.so\n");
    memra_registry *r = open_one(dir);
    char want[PATH_MAX];
    snprintf(want, sizeof want, "%s/lib/libgood-copy.so", dir);
    cr_assert_str_eq(memra_registry_entry_at(r, 0)->file, want);
    const memra_plugin *p;
    memra_error err;
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK, "%s", err.msg);
    memra_registry_close(r);
}

Test(registry, manifest_with_comments_blanks_crlf_and_spaces) {
    char *dir = tmp_path("d", true);
    char text[PATH_MAX + 256];
    snprintf(text, sizeof text,
             "# a comment\r\n\r\n   # indented comment\r\n\tname   =   good  \r\n"
             "kind=sampler\r\nfile =\t%s\r\n",
             plugin_path("good"));
    write_text(dir, "good.manifest", text);
    write_text(dir, "README.txt", "not a manifest: ignored\n");
    write_text(dir, ".hidden.manifest", "garbage: ignored\n");
    memra_registry *r = open_one(dir);
    cr_assert_eq(memra_registry_count(r), 1);
    const memra_registry_entry *e = memra_registry_entry_at(r, 0);
    cr_assert_eq(e->state, MEMRA_ENTRY_FOUND, "%s", e->message);
    cr_assert_str_eq(e->name, "good");
    const memra_plugin *p;
    memra_error err;
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK, "%s", err.msg);
    memra_registry_close(r);
}

Test(registry, backend_builds_on_sampler_through_host) {
    int lines = 0;
    memra_set_log_sink(log_sink, &lines);
    char *dir = tmp_path("d", true);
    manifest(dir, "good", "sampler", "good");
    manifest(dir, "goodbackend", "backend", "goodbackend");
    memra_registry *r = open_one(dir);
    const memra_plugin *b, *s;
    memra_error err;
    cr_assert_eq(memra_registry_load(r, "goodbackend", MEMRA_PLUGIN_BACKEND, &b, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_not_null(b->backend);
    uint32_t n_dev = 0;
    cr_assert_eq(b->backend->device_count(memra_registry_host(r), NULL, &n_dev, &err), MEMRA_OK);
    cr_assert_eq(n_dev, 1);
    /* 'good' was loaded by goodbackend's init through this registry's host table. */
    for (uint32_t i = 0; i < memra_registry_count(r); i++)
        cr_assert_eq(memra_registry_entry_at(r, i)->state, MEMRA_ENTRY_LOADED);
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_SAMPLER, &s, &err), MEMRA_OK);
    char want[64];
    snprintf(want, sizeof want, "found good at %p", (const void *)s);
    cr_assert_not_null(strstr(g_log, want), "want '%s' in log: %s", want, g_log);
    const memra_plugin *via_host;
    cr_assert_eq(memra_registry_host(r)->find_plugin("good", MEMRA_PLUGIN_SAMPLER, &via_host, &err), MEMRA_OK);
    cr_assert_eq(via_host, s);
    memra_registry_close(r);
    /* Dependent first: goodbackend (no fini log of its own name) closes before good. */
    cr_assert_not_null(strstr(g_log, "fini good"), "log: %s", g_log);
}

Test(registry, host_table_belongs_to_its_registry) {
    char *a = tmp_path("a", true);
    char *b = tmp_path("b", true);
    manifest(a, "good", "sampler", "good");
    memra_registry *ra = open_one(a), *rb = open_one(b);
    const memra_host *ha = memra_registry_host(ra), *hb = memra_registry_host(rb);
    cr_assert_neq(ha, hb);
    cr_assert_eq(ha->abi_version, MEMRA_ABI_VERSION);
    cr_assert_eq(ha->struct_size, sizeof(memra_host));
    cr_assert(ha->log && ha->find_plugin && ha->sha256 && ha->sha256_new && ha->sha256_update && ha->sha256_final &&
              ha->fail);
    const memra_plugin *p;
    memra_error err;
    cr_assert_eq(ha->find_plugin("good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(hb->find_plugin("good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_E_PLUGIN);
    cr_assert_not_null(strstr(err.msg, "no sampler plugin named 'good'"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, b), "%s", err.msg);
    /* The incremental digest and fail through the host. */
    memra_sha256_ctx *ctx = ha->sha256_new();
    ha->sha256_update(ctx, "a", 1);
    ha->sha256_update(ctx, "bc", 2);
    uint8_t d1[32], d2[32];
    ha->sha256_final(ctx, d1);
    ha->sha256("abc", 3, d2);
    cr_assert_eq(memcmp(d1, d2, 32), 0);
    cr_assert_eq(d1[0], 0xba);
    cr_assert_eq(ha->fail(&err, MEMRA_E_RANGE, "x=%d", 7), MEMRA_E_RANGE);
    cr_assert_str_eq(err.msg, "x=7");
    memra_registry_close(ra);
    /* A host pointer kept past its registry's close answers with an error, not a crash. */
    cr_assert_eq(ha->find_plugin("good", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_E_PLUGIN);
    cr_assert_not_null(strstr(err.msg, "closed"), "%s", err.msg);
    memra_registry_close(rb);
}

static memra_registry *g_shared;

static void *load_good(void *out) {
    memra_error err;
    if (memra_registry_load(g_shared, "goodbackend", MEMRA_PLUGIN_BACKEND, (const memra_plugin **)out, &err))
        *(const memra_plugin **)out = NULL;
    return NULL;
}

Test(registry, concurrent_loads_agree) {
    char *dir = tmp_path("d", true);
    manifest(dir, "good", "sampler", "good");
    manifest(dir, "goodbackend", "backend", "goodbackend");
    g_shared = open_one(dir);
    pthread_t t[4];
    const memra_plugin *got[4] = {0};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, load_good, (void *)&got[i]), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++) {
        cr_assert_not_null(got[i]);
        cr_assert_eq(got[i], got[0]);
    }
    memra_registry_close(g_shared);
}

Test(registry, load_all_records_each_entry) {
    char *dir = tmp_path("d", true);
    manifest(dir, "good", "sampler", "good");
    manifest(dir, "abi99", "sampler", "abi99");
    write_text(dir, "broken.manifest", "name = broken\nkind = sampler\n");
    memra_registry *r = open_one(dir);
    memra_registry_load_all(r);
    cr_assert_eq(memra_registry_count(r), 3);
    int loaded = 0, failed = 0;
    for (uint32_t i = 0; i < 3; i++) {
        const memra_registry_entry *e = memra_registry_entry_at(r, i);
        if (e->state == MEMRA_ENTRY_LOADED)
            loaded++;
        if (e->state == MEMRA_ENTRY_FAILED) {
            failed++;
            cr_assert_neq(e->status, MEMRA_OK);
            cr_assert_neq(e->message[0], '\0');
        }
    }
    cr_assert_eq(loaded, 1);
    cr_assert_eq(failed, 2);
    memra_registry_close(r);
}

/* ---- one test per refusal ---- */

Test(registry, refuses_missing_file) {
    char *dir = tmp_path("d", true);
    manifest(dir, "ghost", "sampler", "/nonexistent/libghost.so");
    expect_refusal(dir, "ghost", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "file missing", "/nonexistent/libghost.so",
                   "does not exist", "ghost.manifest", NULL);
}

Test(registry, refuses_file_dlopen_cannot_load) {
    char *dir = tmp_path("d", true);
    char junk[512];
    memset(junk, 'x', sizeof junk); /* longer than an ELF header, so glibc reads and rejects it */
    write_file(dir, "libgarbage.so", junk, sizeof junk);
    char so[PATH_MAX];
    snprintf(so, sizeof so, "%s/libgarbage.so", dir);
    manifest(dir, "garbage", "sampler", so);
    /* The dlerror text follows: glibc says "invalid ELF header". */
    expect_refusal(dir, "garbage", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "dlopen failed", so, "invalid ELF header",
                   NULL);
}

Test(registry, refuses_missing_entry_symbol) {
    char *dir = tmp_path("d", true);
    manifest(dir, "noentry", "sampler", "noentry");
    expect_refusal(dir, "noentry", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "entry symbol missing",
                   "does not export memra_plugin_v1", plugin_path("noentry"), NULL);
}

Test(registry, refuses_entry_symbol_of_a_dependency) {
    char *dir = tmp_path("d", true);
    manifest(dir, "leech", "sampler", "leech");
    expect_refusal(dir, "leech", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "entry symbol missing",
                   "does not define memra_plugin_v1 itself", "libregtest_provider.so", NULL);
}

Test(registry, refuses_abi_mismatch) {
    char *dir = tmp_path("d", true);
    manifest(dir, "abi99", "sampler", "abi99");
    expect_refusal(dir, "abi99", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "ABI mismatch",
                   "built for plugin ABI 99, this memra is ABI 1", plugin_path("abi99"), NULL);
}

Test(registry, refuses_descriptor_too_small) {
    char *dir = tmp_path("d", true);
    manifest(dir, "small", "sampler", "small");
    char want[128];
    /* ABI 1's first shape ends at `sampler` (`op` was appended), whatever sizeof is now */
    snprintf(want, sizeof want, "descriptor of 16 bytes, ABI 1 needs at least %zu",
             MEMRA_STRUCT_END(memra_plugin, sampler));
    expect_refusal(dir, "small", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "struct too small", want, plugin_path("small"),
                   NULL);
}

Test(registry, refuses_vtable_too_small) {
    char *dir = tmp_path("d", true);
    manifest(dir, "smallvtable", "sampler", "smallvtable");
    char want[128];
    snprintf(want, sizeof want, "sampler vtable is 4 bytes, ABI 1 needs at least %zu", sizeof(memra_sampler_vtable));
    expect_refusal(dir, "smallvtable", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "struct too small", want, NULL);
}

/* ---- op plugins (kind op, issue 30) ---- */

Test(registry, loads_an_op_plugin_with_its_keys_and_what_it_serves) {
    char *dir = tmp_path("d", true);
    manifest(dir, "opgood", "op", "opgood");
    memra_registry *r = open_one(dir);
    const memra_registry_entry *e = memra_registry_entry_at(r, 0);
    cr_assert_eq(e->kind, MEMRA_PLUGIN_OP);
    const memra_plugin *p = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_load(r, "opgood", MEMRA_PLUGIN_OP, &p, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_str_eq(memra_plugin_kind_name(p->kind), "op");
    const memra_option_spec *specs = NULL;
    cr_assert_eq(memra_plugin_option_specs(p, &specs), 1);
    cr_assert_str_eq(specs[0].key, "block");
    cr_assert(memra_op_serves(p->op, "cpu", MEMRA_OP_RMSNORM, 0));
    cr_assert(memra_op_serves(p->op, "cpu", MEMRA_OP_GEMV, MEMRA_TYPE_F32));
    cr_assert(!memra_op_serves(p->op, "cpu", MEMRA_OP_GEMV, MEMRA_TYPE_F16));
    cr_assert(!memra_op_serves(p->op, "cuda", MEMRA_OP_RMSNORM, 0));
    cr_assert(!memra_op_serves(p->op, "cpu", MEMRA_OP_ROPE, 0));
    cr_assert(!memra_op_serves(p->op, "cpu", MEMRA_OP_TOPK, 0));
    char served[128];
    memra_op_served(p->op, served, sizeof served);
    cr_assert_str_eq(served, "cpu rmsnorm, cpu gemv.f32");
    /* the provenance covers it like any plugin */
    cr_assert_not_null(memra_registry_provenance(r, p));
    memra_registry_close(r);
}

Test(registry, refuses_op_vtable_too_small) {
    char *dir = tmp_path("d", true);
    manifest(dir, "opsmall", "op", "opsmall");
    char want[128];
    snprintf(want, sizeof want, "op vtable is 8 bytes, ABI 1 needs at least %zu",
             MEMRA_STRUCT_END(memra_op_vtable, cuda_gemv));
    expect_refusal(dir, "opsmall", MEMRA_PLUGIN_OP, MEMRA_E_PLUGIN, "struct too small", want, NULL);
}

Test(registry, refuses_gemv_types_without_a_gemv) {
    char *dir = tmp_path("d", true);
    manifest(dir, "optypes", "op", "optypes");
    expect_refusal(dir, "optypes", MEMRA_PLUGIN_OP, MEMRA_E_PLUGIN,
                   "a gemv entry point and its weight types must be set together", NULL);
}

Test(registry, refuses_op_vtable_without_create) {
    char *dir = tmp_path("d", true);
    manifest(dir, "opnocreate", "op", "opnocreate");
    expect_refusal(dir, "opnocreate", MEMRA_PLUGIN_OP, MEMRA_E_PLUGIN, "leaves 'create' NULL", NULL);
}

Test(registry, refuses_op_kind_with_a_descriptor_that_ends_before_op) {
    char *dir = tmp_path("d", true);
    manifest(dir, "opold", "op", "opold");
    expect_refusal(dir, "opold", MEMRA_PLUGIN_OP, MEMRA_E_PLUGIN, "has no op vtable", NULL);
}

Test(registry, op_keys_and_values_parse) {
    memra_op_kind k = 0;
    uint32_t t = 99;
    cr_assert(memra_op_key_parse("op.rmsnorm", &k, &t) && k == MEMRA_OP_RMSNORM && t == 0);
    cr_assert(memra_op_key_parse("op.gemv.q8_0", &k, &t) && k == MEMRA_OP_GEMV && t == MEMRA_TYPE_Q8_0);
    cr_assert(memra_op_key_parse("op.gemv.bf16", &k, &t) && t == MEMRA_TYPE_BF16);
    cr_assert(!memra_op_key_parse("op.gemv.Q8_0", NULL, NULL), "type names are lower case");
    cr_assert(!memra_op_key_parse("op.gemv", NULL, NULL));
    cr_assert(memra_op_key_parse("op.topk", &k, &t) && k == MEMRA_OP_TOPK);
    cr_assert(!memra_op_key_parse("op.softmax", NULL, NULL));
    cr_assert(!memra_op_key_parse("rmsnorm", NULL, NULL));
    char name[64];
    memra_options o = {0};
    memra_error err;
    cr_assert_eq(memra_op_value_parse("op.rmsnorm", "lab:site=q:layer=1,pos=2", name, sizeof name, &o, &err), MEMRA_OK,
                 "%s", err.msg);
    cr_assert_str_eq(name, "lab");
    cr_assert_eq(o.n, 3);
    cr_assert_str_eq(memra_options_get(&o, "layer"), "1");
    cr_assert_str_eq(memra_options_get(&o, "pos"), "2");
    const char *bad[] = {"", ":x=1", "lab:", "lab:word", "lab:=1", "lab:k=", "lab:k=1:k=2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memra_options b = {0};
        cr_assert_eq(memra_op_value_parse("op.rope", bad[i], name, sizeof name, &b, &err), MEMRA_E_INVALID, "'%s'",
                     bad[i]);
        cr_assert(strstr(err.msg, "op.rope="), "%s", err.msg);
    }
}

Test(registry, refuses_kind_mismatch) {
    char *dir = tmp_path("d", true);
    manifest(dir, "kindmix", "sampler", "kindmix");
    expect_refusal(dir, "kindmix", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "kind mismatch", "says kind sampler",
                   "descriptor says backend", "kindmix.manifest", NULL);
}

Test(registry, refuses_name_mismatch) {
    char *dir = tmp_path("d", true);
    manifest(dir, "namemix", "sampler", "namemix");
    expect_refusal(dir, "namemix", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "name mismatch", "says name 'namemix'",
                   "descriptor says 'othername'", NULL);
}

Test(registry, refuses_null_mandatory_member) {
    char *dir = tmp_path("d", true);
    manifest(dir, "nullmember", "sampler", "nullmember");
    expect_refusal(dir, "nullmember", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "sampler vtable leaves 'sample' NULL",
                   "mandatory", NULL);
}

Test(registry, refuses_two_vtables) {
    char *dir = tmp_path("d", true);
    manifest(dir, "twovtables", "sampler", "twovtables");
    expect_refusal(dir, "twovtables", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "also sets a backend vtable", "exactly one",
                   NULL);
}

Test(registry, refuses_failing_init_and_keeps_its_status) {
    char *dir = tmp_path("d", true);
    manifest(dir, "initfail", "sampler", "initfail");
    expect_refusal(dir, "initfail", MEMRA_PLUGIN_SAMPLER, MEMRA_E_DEVICE, "init failed", "no test device here", NULL);
    void *still = dlopen(plugin_path("initfail"), RTLD_NOW | RTLD_NOLOAD);
    cr_assert_null(still, "a refused plugin is unloaded");
}

Test(registry, refuses_init_whose_dependency_is_missing) {
    char *dir = tmp_path("d", true);
    manifest(dir, "needy", "sampler", "needy");
    expect_refusal(dir, "needy", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "plugin 'needy' (sampler): init failed",
                   "no backend plugin named 'absent'", NULL);
}

Test(registry, refuses_plugin_that_needs_itself) {
    char *dir = tmp_path("d", true);
    manifest(dir, "selfish", "sampler", "selfish");
    expect_refusal(dir, "selfish", MEMRA_PLUGIN_SAMPLER, MEMRA_E_PLUGIN, "init failed", "while it is being loaded",
                   NULL);
}

Test(registry, refuses_unknown_plugin_listing_folders_and_names) {
    char *dir = tmp_path("d", true);
    char *absent = tmp_path("absent", false);
    manifest(dir, "good", "sampler", "good");
    manifest(dir, "goodbackend", "backend", "goodbackend");
    const char *dirs[] = {dir, absent};
    memra_registry *r = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_open_dirs(dirs, 2, &r, &err), MEMRA_OK);
    cr_assert_eq(memra_registry_dir_count(r), 2);
    cr_assert_str_eq(memra_registry_dir_at(r, 0), dir);
    cr_assert_str_eq(memra_registry_dir_at(r, 1), absent);
    cr_assert_null(memra_registry_dir_at(r, 2));
    const memra_plugin *p;
    cr_assert_eq(memra_registry_load(r, "nosuch", MEMRA_PLUGIN_SAMPLER, &p, &err), MEMRA_E_PLUGIN);
    cr_assert_not_null(strstr(err.msg, "no sampler plugin named 'nosuch'"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, dir), "%s", err.msg);
    char absent_note[PATH_MAX + 16];
    snprintf(absent_note, sizeof absent_note, "%s (absent)", absent);
    cr_assert_not_null(strstr(err.msg, absent_note), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "sampler plugins found: good"), "%s", err.msg);
    cr_assert_null(strstr(err.msg, "goodbackend"), "only names of the kind asked: %s", err.msg);
    /* Same name, other kind: never a substitute, but the message says it exists. */
    cr_assert_eq(memra_registry_load(r, "good", MEMRA_PLUGIN_BACKEND, &p, &err), MEMRA_E_PLUGIN);
    cr_assert_null(p);
    cr_assert_not_null(strstr(err.msg, "no backend plugin named 'good'"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "'good' exists as a sampler"), "%s", err.msg);
    memra_registry_close(r);
}

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
