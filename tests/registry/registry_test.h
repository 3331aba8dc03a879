/* registry_test.h: what the registry suites share (registry_test.c): the temporary folder of each
 * test with its suite setup, files and manifests written into it, the test plugins of
 * REGTEST_PLUGIN_DIR, a refusal checked whole, and a log sink that gathers lines. */
#ifndef MEMRA_REGISTRY_TEST_H
#define MEMRA_REGISTRY_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>

#include "memra/registry.h"

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

/* The temporary folder of the running test (made by the suite's .init, removed by its .fini). */
extern char g_tmp[256];

/* g_tmp/name, created as a folder when mkdir is true. The string lives in a ring of static
 * buffers, enough for any one test. */
char *tmp_path(const char *name, bool mkdir_it);
void write_file(const char *dir, const char *name, const void *data, size_t n);
void write_text(const char *dir, const char *name, const char *text);
/* The absolute path of test plugin `variant`. */
const char *plugin_path(const char *variant);
/* Writes dir/<name>.manifest saying name, kind and file (a test plugin variant, or a path when
 * `file` contains a '/'). */
void manifest(const char *dir, const char *name, const char *kind, const char *file);
memra_registry *open_one(const char *dir);
/* Loading (name, kind) from a registry over `dir` fails with `status` and a message holding
 * every one of the NULL-terminated substrings. */
void expect_refusal(const char *dir, const char *name, memra_plugin_kind kind, memra_status status, ...);

/* The log sink: lines "level plugin: line\n" appended to g_log under g_log_lock; counts them in
 * *(int *)user when user is not NULL. */
extern pthread_mutex_t g_log_lock;
extern char g_log[16384];
void log_sink(memra_log_level level, const char *plugin, const char *line, void *user);

#endif
