/* lab_loader.c: loads the lab's plugin through the installed libmemra's registry and samples
 * once with it. Usage: lab-loader PREFIX (the prefix libmemra must come from). Exit 0 on
 * success; otherwise a message on stderr. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/registry.h>

static void sink(memra_log_level level, const char *plugin, const char *line, void *user) {
    printf("log %d %s: %s\n", (int)level, plugin, line);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: lab-loader PREFIX\n");
        return 2;
    }
    char prefix[PATH_MAX], lib[PATH_MAX];
    Dl_info info;
    if (!realpath(argv[1], prefix) || !dladdr((void *)&memra_registry_open, &info) || !info.dli_fname ||
        !realpath(info.dli_fname, lib)) {
        fprintf(stderr, "lab-loader: cannot resolve %s or libmemra's path\n", argv[1]);
        return 1;
    }
    if (strncmp(lib, prefix, strlen(prefix)) != 0) {
        fprintf(stderr, "lab-loader: libmemra comes from %s, not from the prefix %s\n", lib, prefix);
        return 1;
    }
    printf("libmemra: %s\n", lib);
    memra_set_log_sink(sink, NULL);

    memra_registry *r;
    memra_error err;
    if (memra_registry_open(&r, &err) != MEMRA_OK) {
        fprintf(stderr, "lab-loader: %s\n", err.msg);
        return 1;
    }
    for (uint32_t i = 0; i < memra_registry_dir_count(r); i++)
        printf("searched: %s\n", memra_registry_dir_at(r, i));
    int rc = 1;
    const memra_plugin *p;
    if (memra_registry_load(r, "labsampler", MEMRA_PLUGIN_SAMPLER, &p, &err) != MEMRA_OK) {
        fprintf(stderr, "lab-loader: %s\n", err.msg);
        goto out;
    }
    const float logits[5] = {0.25f, -1.0f, 3.5f, 3.5f, 2.0f};
    uint32_t token = 0;
    if (p->sampler->sample(logits, 5, 0, NULL, NULL, &token, &err) != MEMRA_OK || token != 2) {
        fprintf(stderr, "lab-loader: labsampler gave token %u (expected 2): %s\n", token, err.msg);
        goto out;
    }
    for (uint32_t i = 0; i < memra_registry_count(r); i++) {
        const memra_registry_entry *e = memra_registry_entry_at(r, i);
        if (e->state == MEMRA_ENTRY_LOADED)
            printf("loaded: %s %s %s from %s (manifest %s)\n", memra_plugin_kind_name(e->kind), e->name, e->version,
                   e->file, e->manifest);
    }
    printf("lab-loader: ok\n");
    rc = 0;
out:
    memra_registry_close(r);
    return rc;
}
