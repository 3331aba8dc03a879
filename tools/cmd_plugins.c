/* cmd_plugins.c: `memra plugins`: every plugin the registry finds, whether it loads and why not,
 * the SHA-256 of each loaded plugin's file, the arm keys each takes with their defaults, the
 * folders searched and the registry's warnings about them (also on stderr). Every write to stdout
 * is checked: main's cli_finish closes stdout (memra_close_stream) and turns a failed write into
 * exit 3 naming stdout and the errno. */
#include <string.h>

#include "memra/digest.h"
#include "memra/op.h"

#include "cli.h"

static const char help_text[] =
    "usage: memra plugins\n"
    "\n"
    "Lists the plugins found through their manifests (name, kind, version, file, status: ok, or\n"
    "why it did not load) after trying to load each one, and under each plugin that loaded the\n"
    "arm keys it takes, as key=default and one line of help ((auto): the default is computed, e.g.\n"
    "from the machine). A backend also takes the placement's keys (plugin 'default'): for example\n"
    "`cpu:stages=2,threads=4`; and every arm takes the core's own keys, placement= (the placement\n"
    "plugin, default 'default') and window= (steps kept in flight, default 1).\n"
    "An op plugin (kind op) says which backend families and op kinds it serves (`serves: cpu\n"
    "rmsnorm, cuda gemv.q8_0`); an arm selects it with op.KIND=NAME[:KEY=VALUE...], e.g.\n"
    "`cpu:op.rmsnorm=example`, its own keys (listed under it) after the name.\n"
    "\n"
    "The folders searched, in order: $MEMRA_PLUGIN_PATH (colon-separated absolute paths), then\n"
    "the installed plugins beside this memra's libmemra, or, for a memra run from a build tree,\n"
    "that tree's plugins.d.\n"
    "\n"
    "Warnings (on stderr, and listed first): an empty, relative or missing folder in\n"
    "$MEMRA_PLUGIN_PATH, and each plugin there that hides one of memra's own (same name and kind).\n"
    "Exit status: 0 when every plugin found loaded (or is shadowed by one that did); 3 when one\n"
    "failed to load (each is named on stderr too, so a CI step can run `memra plugins`), or when\n"
    "the listing could not be written (a full disk, a closed stdout).\n";

static const char *state_word(const memra_registry_entry *e) {
    switch (e->state) {
    case MEMRA_ENTRY_LOADED: return "ok";
    case MEMRA_ENTRY_SHADOWED: return "shadowed";
    case MEMRA_ENTRY_FOUND: return "not loaded";
    case MEMRA_ENTRY_FAILED: return "failed";
    }
    return "?";
}

/* The keys a loaded plugin takes, one a line: "key=default  help", the key=default column as
 * wide as the plugin's widest. */
static void print_keys(const memra_option_spec *specs, uint32_t n) {
    if (!specs || n == 0) {
        printf("    keys: none\n");
        return;
    }
    int width = 0;
    for (uint32_t i = 0; i < n; i++) {
        const char *def = specs[i].default_value && *specs[i].default_value ? specs[i].default_value : "(auto)";
        int w = (int)(strlen(specs[i].key) + 1 + strlen(def));
        if (w > width)
            width = w;
    }
    printf("    keys:\n");
    for (uint32_t i = 0; i < n; i++) {
        const char *def = specs[i].default_value && *specs[i].default_value ? specs[i].default_value : "(auto)";
        int w = (int)(strlen(specs[i].key) + 1 + strlen(def));
        printf("      %s=%s%*s  %s\n", specs[i].key, def, width - w, "", specs[i].help ? specs[i].help : "");
    }
}

/* The provenance of a loaded plugin, then the option specs of its vtable (samplers take none). */
static void plugin_details(memra_registry *r, const memra_registry_entry *e) {
    const memra_plugin *p = NULL;
    memra_error err = {0};
    if (memra_registry_load(r, e->name, (memra_plugin_kind)e->kind, &p, &err) != MEMRA_OK || !p)
        return;
    const memra_loaded_plugin *lp = memra_registry_provenance(r, p);
    if (lp) {
        char hex[MEMRA_SHA256_HEX];
        memra_sha256_hex(lp->sha256, hex);
        printf("    sha256: %s\n", hex);
        if (lp->from_env)
            printf("    from $MEMRA_PLUGIN_PATH%s\n", lp->shadows ? ", hiding memra's own" : "");
    }
    if (p->kind == MEMRA_PLUGIN_OP && MEMRA_HAS_MEMBER(p, memra_plugin, op)) {
        char served[512];
        memra_op_served(p->op, served, sizeof served);
        printf("    serves: %s\n", served);
    }
    const memra_option_spec *specs = NULL;
    uint32_t n = memra_plugin_option_specs(p, &specs);
    if (n)
        print_keys(specs, n);
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

    uint32_t n_warn = memra_registry_warning_count(r);
    for (uint32_t i = 0; i < n_warn; i++)
        fprintf(stderr, "memra %s: warning: %s\n", cmd, memra_registry_warning_at(r, i));
    if (n_warn) {
        printf("warnings:\n");
        for (uint32_t i = 0; i < n_warn; i++)
            printf("  %s\n", memra_registry_warning_at(r, i));
        printf("\n");
    }

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
        if (e->state == MEMRA_ENTRY_LOADED)
            plugin_details(r, e);
        if (e->state == MEMRA_ENTRY_FAILED || e->state == MEMRA_ENTRY_SHADOWED) {
            failed += e->state == MEMRA_ENTRY_FAILED;
            printf("    %s%s\n", e->state == MEMRA_ENTRY_SHADOWED ? "shadowed: " : "why: ",
                   e->message && *e->message ? e->message : memra_status_name(e->status));
        }
    }
    if (n == 0)
        printf("(no plugins found)\n");
    printf("\n%u plugin%s, %u failed to load\n", n, n == 1 ? "" : "s", failed);
    /* A plugin that failed to load is an error (exit 3), named on stderr, so a CI step that runs
     * `memra plugins` after installing one fails where the plugin would not be usable. */
    for (uint32_t i = 0; i < n; i++) {
        const memra_registry_entry *e = memra_registry_entry_at(r, i);
        if (e->state == MEMRA_ENTRY_FAILED)
            fprintf(stderr, "memra %s: %s plugin '%s' failed to load: %s\n", cmd, memra_plugin_kind_name(e->kind),
                    e->name && *e->name ? e->name : (e->manifest ? e->manifest : "?"),
                    e->message && *e->message ? e->message : memra_status_name(e->status));
    }
    memra_registry_close(r);
    /* stdout is checked and closed by main (cli_finish): a write that failed is exit 3 there. */
    return failed ? CLI_EXIT_ERROR : CLI_EXIT_OK;
}
