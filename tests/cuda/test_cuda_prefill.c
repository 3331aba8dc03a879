/* test_cuda_prefill.c: the cuda and cuda-graph backends' prefill chunks (issue 28), what can be
 * checked on the host without a device: both vtables offer step_chunk and prefill_chunk; the
 * best chunk is 512 on one stage of one rank and 1 where a chunk runs as single steps (ranks,
 * stages, op plugins, norm=unfused), cuda-graph answering as the cuda plugin; a prefill= out of
 * 1..4096 is refused at open, naming the key, before any device is asked for. The chunks' bits
 * are checked on the device with memra-gate (`--a cuda:prefill=1 --b cuda:prefill=512`, and
 * prefill=7, eager and graph): no Criterion there. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "memra/model.h"
#include "memra/options.h"
#include "memra/plugin.h"

static const memra_plugin *load(const char *file) {
    void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    cr_assert(h, "dlopen %s: %s", file, dlerror());
    const memra_plugin *p = (const memra_plugin *)dlsym(h, MEMRA_PLUGIN_SYMBOL);
    cr_assert(p && p->backend);
    return p;
}

static memra_status find_cuda(const char *name, memra_plugin_kind kind, const memra_plugin **out, memra_error *err) {
    (void)err;
    cr_assert_str_eq(name, "cuda");
    cr_assert_eq(kind, MEMRA_PLUGIN_BACKEND);
    *out = load(MEMRA_CUDA_PLUGIN_FILE);
    return MEMRA_OK;
}

/* The best chunk of an arm's keys (text after "cuda:") on the backend vt. */
static uint32_t best(const memra_backend_vtable *vt, const char *keys) {
    memra_host host;
    memset(&host, 0, sizeof host);
    host.abi_version = MEMRA_ABI_VERSION;
    host.struct_size = sizeof host;
    host.find_plugin = find_cuda;
    char arm[256];
    snprintf(arm, sizeof arm, "cuda%s%s", keys[0] ? ":" : "", keys);
    char be[MEMRA_BACKEND_NAME_MAX];
    memra_options o = {0};
    memra_error err = {0};
    cr_assert_eq(memra_arm_parse(arm, be, &o, &err), MEMRA_OK, "%s", err.msg);
    return vt->prefill_chunk(&host, &o);
}

Test(cuda_prefill, both_backends_offer_chunks) {
    const char *files[2] = {MEMRA_CUDA_PLUGIN_FILE, MEMRA_CUDA_GRAPH_PLUGIN_FILE};
    for (int i = 0; i < 2; i++) {
        const memra_backend_vtable *vt = load(files[i])->backend;
        cr_assert(MEMRA_HAS_MEMBER(vt, memra_backend_vtable, step_chunk), "%s: vtable too small", files[i]);
        cr_assert(vt->step_chunk != NULL, "%s: no step_chunk", files[i]);
        cr_assert(vt->prefill_chunk != NULL, "%s: no prefill_chunk", files[i]);
    }
}

Test(cuda_prefill, best_chunk_by_keys) {
    const char *files[2] = {MEMRA_CUDA_PLUGIN_FILE, MEMRA_CUDA_GRAPH_PLUGIN_FILE};
    static const struct {
        const char *keys;
        uint32_t want;
    } cases[] = {
        {"", 512},
        {"pdl=0,gemv=rowgroup", 512},
        {"q8=float,attention=unfused", 512}, /* other kernels, chunked all the same */
        {"tp=1,stages=1", 512},
        {"op.rmsnorm=builtin", 512}, /* the built-in op: no plugin */
        {"tp=2", 1},                 /* ranks: single steps */
        {"ep=2", 1},                 /* expert ranks likewise (issue 29 on cuda) */
        {"ep=1", 512},
        {"stages=2", 1},
        {"norm=unfused", 1},
        {"op.gemv.bf16=mylab", 1},
    };
    for (int i = 0; i < 2; i++) {
        const memra_backend_vtable *vt = load(files[i])->backend;
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
            cr_assert_eq(best(vt, cases[k].keys), cases[k].want, "%s with '%s': %u, expected %u", files[i],
                         cases[k].keys, best(vt, cases[k].keys), cases[k].want);
    }
}

/* A llama description of two layers: open reads the arm's keys before it asks for a device. */
Test(cuda_prefill, prefill_out_of_range_is_refused_at_open) {
    const memra_backend_vtable *vt = load(MEMRA_CUDA_PLUGIN_FILE)->backend;
    memra_model m;
    memset(&m, 0, sizeof m);
    m.arch = MEMRA_ARCH_LLAMA;
    m.arch_name = "llama";
    m.n_layer = 2;
    memra_plan plan;
    memset(&plan, 0, sizeof plan);
    static const char *const bad[] = {"cuda:prefill=0", "cuda:prefill=4097", "cuda:prefill=x"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char be[MEMRA_BACKEND_NAME_MAX];
        memra_options o = {0};
        memra_error err = {0};
        cr_assert_eq(memra_arm_parse(bad[k], be, &o, &err), MEMRA_OK, "%s", err.msg);
        memra_backend *b = NULL;
        memra_status st = vt->open(NULL, &m, &plan, &o, &b, &err);
        cr_assert_eq(st, MEMRA_E_INVALID, "%s: status %d (%s)", bad[k], (int)st, err.msg);
        cr_assert(strstr(err.msg, "prefill") != NULL, "%s: '%s' does not name the key", bad[k], err.msg);
    }
}
