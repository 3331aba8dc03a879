/* cmd_plugins.c: `memra plugins`: every plugin the registry finds, whether it loads and why not,
 * and the folders searched. */
#include <string.h>

#include "cli.h"

static const char help_text[] =
    "usage: memra plugins\n"
    "\n"
    "Lists the plugins found through their manifests (name, kind, version, file, status: ok, or\n"
    "why it did not load) after trying to load each one, and the folders searched, in order:\n"
    "$MEMRA_PLUGIN_PATH (colon-separated absolute paths), the install prefix, the build tree.\n";

static const char *state_word(const memra_registry_entry *e) {
    switch (e->state) {
    case MEMRA_ENTRY_LOADED: return "ok";
    case MEMRA_ENTRY_SHADOWED: return "shadowed";
    case MEMRA_ENTRY_FOUND: return "not loaded";
    case MEMRA_ENTRY_FAILED: return "failed";
    }
    return "?";
}

int cmd_plugins(int argc, char **argv) {
    const char *cmd = "plugins";
    size_t n_pos;
    bool help;
    int rc = cli_parse(cmd, argc, argv, 1, NULL, 0, NULL, 0, &n_pos, help_text, &help);
    if (rc != CLI_EXIT_OK || help)
        return rc;
    memra_error err = {0};
    memra_registry *r;
    if (memra_registry_open(&r, &err) != MEMRA_OK)
        return cli_fail(cmd, &err);
    memra_registry_load_all(r);

    printf("folders searched, in order:\n");
    uint32_t n_dirs = memra_registry_dir_count(r);
    for (uint32_t i = 0; i < n_dirs; i++)
        printf("  %u. %s\n", i + 1, memra_registry_dir_at(r, i));
    if (n_dirs == 0)
        printf("  (none)\n");

    uint32_t n = memra_registry_count(r);
    printf("\n%-16s %-11s %-10s %-8s %s\n", "NAME", "KIND", "VERSION", "STATUS", "FILE");
    uint32_t failed = 0;
    for (uint32_t i = 0; i < n; i++) {
        const memra_registry_entry *e = memra_registry_entry_at(r, i);
        const char *file = e->file && *e->file ? e->file : e->manifest;
        printf("%-16s %-11s %-10s %-8s %s\n", e->name && *e->name ? e->name : "?", memra_plugin_kind_name(e->kind),
               e->version && *e->version ? e->version : "-", state_word(e), file ? file : "");
        if (e->state == MEMRA_ENTRY_FAILED || e->state == MEMRA_ENTRY_SHADOWED) {
            failed += e->state == MEMRA_ENTRY_FAILED;
            printf("    %s%s\n", e->state == MEMRA_ENTRY_SHADOWED ? "shadowed: " : "why: ",
                   e->message && *e->message ? e->message : memra_status_name(e->status));
        }
    }
    if (n == 0)
        printf("(no plugins found)\n");
    printf("\n%u plugin%s, %u failed to load\n", n, n == 1 ? "" : "s", failed);
    memra_registry_close(r);
    return CLI_EXIT_OK;
}
