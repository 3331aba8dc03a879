/* nccl_lib.c: the `nccl` collective's helpers (clock, errors, NCCL's result and version texts),
 * its options parsed, and libnccl opened at run time (dlopen) with its version checked before any
 * other symbol is looked up (see nccl_abi.h; nccl.c has the design). */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "memra/plugin.h"
#include "nccl_abi.h"
#include "nccl_kernels.h"
#include "nccl_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                     */

double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void pause_briefly(double waited_ms) {
    if (waited_ms < 1.0) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

static void version_text(int code, char *buf, size_t size) {
    int major, minor, patch;
    if (code >= 10000) {
        major = code / 10000;
        minor = (code % 10000) / 100;
        patch = code % 100;
    } else {
        major = code / 1000;
        minor = (code % 1000) / 100;
        patch = code % 100;
    }
    snprintf(buf, size, "%d.%d.%d", major, minor, patch);
}

memra_status cuda_fail(memra_error *err, const char *what, cudaError_t e) {
    return memra_fail(err, MEMRA_E_DEVICE, "nccl: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

const char *nccl_text(const memra_collective *c, ncclResult_t r) {
    const char *s = c->api.GetErrorString ? c->api.GetErrorString(r) : NULL;
    return s ? s : "unknown NCCL error";
}

static bool parse_u64(const char *text, uint64_t max, uint64_t *out) {
    if (!*text)
        return false;
    uint64_t v = 0;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (max - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

memra_status parse_options(const memra_options *opts, nccl_cfg *cfg, memra_error *err) {
    memset(cfg, 0, sizeof *cfg);
    cfg->mode = NCCL_MODE_SUM;
    snprintf(cfg->library, sizeof cfg->library, "%s", NCCL_DEFAULT_LIBRARY);
    cfg->timeout_ms = 10000;
    cfg->max_blocks = 4096;
    if (!opts)
        return MEMRA_OK;
    for (uint32_t i = 0; i < opts->n && i < MEMRA_OPT_MAX; i++) {
        const memra_option *o = &opts->items[i];
        uint64_t v = 0;
        if (strcmp(o->key, "mode") == 0) {
            if (strcmp(o->value, "sum") == 0)
                cfg->mode = NCCL_MODE_SUM;
            else if (strcmp(o->value, "allgather") == 0)
                cfg->mode = NCCL_MODE_ALLGATHER;
            else
                return memra_fail(err, MEMRA_E_INVALID, "nccl: option mode=%.60s: expected sum or allgather", o->value);
        } else if (strcmp(o->key, "library") == 0) {
            if (!o->value[0])
                return memra_fail(err, MEMRA_E_INVALID, "nccl: option library= is empty (a file name or path)");
            snprintf(cfg->library, sizeof cfg->library, "%s", o->value);
        } else if (strcmp(o->key, "timeout_ms") == 0) {
            if (!parse_u64(o->value, 86400000u, &v) || v < 1)
                return memra_fail(err, MEMRA_E_INVALID, "nccl: option timeout_ms=%.60s: expected 1..86400000",
                                  o->value);
            cfg->timeout_ms = (uint32_t)v;
        } else if (strcmp(o->key, "max_blocks") == 0) {
            if (!parse_u64(o->value, 1u << 24, &v) || v < 1)
                return memra_fail(err, MEMRA_E_INVALID, "nccl: option max_blocks=%.60s: expected 1..16777216",
                                  o->value);
            cfg->max_blocks = (uint32_t)v;
        } else if (strcmp(o->key, "prealloc_count") == 0) {
            if (!parse_u64(o->value, (uint64_t)1 << 32, &v))
                return memra_fail(err, MEMRA_E_INVALID, "nccl: option prealloc_count=%.60s: expected 0..4294967296",
                                  o->value);
            cfg->prealloc_count = v;
        } else if (strcmp(o->key, "blocking") == 0) {
            if (strcmp(o->value, "0") && strcmp(o->value, "1"))
                return memra_fail(err, MEMRA_E_INVALID, "nccl: option blocking=%.60s: expected 0 or 1", o->value);
            cfg->blocking = o->value[0] == '1';
        } else {
            return memra_fail(err, MEMRA_E_INVALID,
                              "nccl: unknown option '%.40s' (nccl reads mode, library, timeout_ms, max_blocks, "
                              "prealloc_count, blocking)",
                              o->key);
        }
    }
    return MEMRA_OK;
}

/* Opens the library and looks up the functions; the version is checked before anything else is
 * looked up, so an old library is named as old rather than as missing a symbol. */
memra_status lib_open(const char *path, void **lib_out, nccl_api *api, memra_error *err) {
    memset(api, 0, sizeof *api);
    *lib_out = NULL;
    dlerror();
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "nccl: cannot open the NCCL library '%s' (option library=PATH): %s; NCCL 2.18 or later is "
                          "needed",
                          path, why ? why : "dlopen failed");
    }
#define NCCL_SYM(field, name)                                                                                          \
    do {                                                                                                               \
        dlerror();                                                                                                     \
        *(void **)(&api->field) = dlsym(lib, name);                                                                    \
        if (!api->field) {                                                                                             \
            const char *why = dlerror();                                                                               \
            memra_fail(err, MEMRA_E_UNSUPPORTED, "nccl: the NCCL library '%s' has no symbol %s: %s", path, name,       \
                       why ? why : "dlsym returned NULL");                                                             \
            dlclose(lib);                                                                                              \
            memset(api, 0, sizeof *api);                                                                               \
            return MEMRA_E_UNSUPPORTED;                                                                                \
        }                                                                                                              \
    } while (0)
    NCCL_SYM(GetVersion, "ncclGetVersion");
    int code = 0;
    ncclResult_t r = api->GetVersion(&code);
    if (r != ncclSuccess) {
        dlclose(lib);
        memset(api, 0, sizeof *api);
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "nccl: ncclGetVersion of '%s' failed (result %d)", path, (int)r);
    }
    if (code < NCCL_MIN_VERSION_CODE) {
        char found[32], need[32];
        version_text(code, found, sizeof found);
        version_text(NCCL_MIN_VERSION_CODE, need, sizeof need);
        dlclose(lib);
        memset(api, 0, sizeof *api);
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "nccl: the NCCL library '%s' is version %s (code %d); the nccl collective needs %s or "
                          "later (code %d)",
                          path, found, code, need, NCCL_MIN_VERSION_CODE);
    }
    NCCL_SYM(GetErrorString, "ncclGetErrorString");
    NCCL_SYM(GetUniqueId, "ncclGetUniqueId");
    NCCL_SYM(CommInitRankConfig, "ncclCommInitRankConfig");
    NCCL_SYM(CommFinalize, "ncclCommFinalize");
    NCCL_SYM(CommDestroy, "ncclCommDestroy");
    NCCL_SYM(CommAbort, "ncclCommAbort");
    NCCL_SYM(CommGetAsyncError, "ncclCommGetAsyncError");
    NCCL_SYM(AllReduce, "ncclAllReduce");
    NCCL_SYM(AllGather, "ncclAllGather");
    NCCL_SYM(GroupStart, "ncclGroupStart");
    NCCL_SYM(GroupEnd, "ncclGroupEnd");
#undef NCCL_SYM
    *lib_out = lib;
    return MEMRA_OK;
}
