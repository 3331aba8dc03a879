/* test_registry_load.c: the plugin registry loading plugins: kind names, good plugins loaded once
 * (directly, through the host table, from many threads), and every refusal of a plugin file or
 * descriptor with its own message. Each test writes manifests into its own temporary folder,
 * pointing at the test plugins built in REGTEST_PLUGIN_DIR (registry_test.h). */
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
    snprintf(want, sizeof want, "descriptor of 16 bytes, ABI 1 needs at least %zu", sizeof(memra_plugin));
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
