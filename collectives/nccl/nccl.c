/* nccl.c: the `nccl` collective plugin: device ranks of one process (or, through bootstrap_id and
 * create_rank, one rank per handle) reduced by NCCL, which is opened at run time (dlopen of
 * libnccl.so.2 or the option library=PATH; never linked, its header never included: see
 * nccl_abi.h). memra builds and runs with no NCCL present; create then fails naming the file.
 *
 * One operation is the n calls of the handle's ranks for one block, from one thread back to back
 * in rank order (plugin.h, "Device ranks"). Every call but the last records its arguments; the
 * last enqueues every rank's part:
 *   pack    (our kernel, on the rank's stream) buf into a private staging buffer of
 *           stride = count + 2*n floats rounded up to 64, the trailer carrying this rank's refusal
 *           word as two 16-bit halves in slots 2*rank, 2*rank+1 (zero elsewhere, so a sum or a
 *           gather carries every rank's word exactly); the rank's epoch of the block advances;
 *           *position_dev is read and an armed refusal cell fires (and is disarmed); the status
 *           reads MEMRA_COLLECTIVE_PENDING until finish;
 *   NCCL    inside ncclGroupStart/End: mode=sum: ncclAllReduce of the staging buffer in place
 *           (with 2 ranks NCCL's sum equals the rank-order sum bit for bit); mode=allgather:
 *           ncclAllGather of it into a gather buffer of n rows;
 *   finish  (our kernel) the result into buf (sum: a copy; allgather: s = g0[i]; s += g1[i]; ...
 *           in float32, exact against a rank-order sum at any rank count) and the status: 0, the
 *           word of the lowest refusing rank, or MEMRA_COLLECTIVE_ABORTED when abort ran.
 * Buffers are summed also when refused (as `local`). Every piece is stream work, so the calls
 * can be captured into a CUDA graph; each replay advances the epochs and reads the cells, which
 * live in host-mapped pinned memory.
 *
 * Staging and gather buffers grow at a call whose count needs more (to at least twice the old
 * size), which must not be under stream capture: such a call fails (MEMRA_E_UNSUPPORTED) and asks
 * for an eager first call of that size, or for prealloc_count=N at create. Outgrown buffers are
 * kept until destroy, so graphs captured against them stay valid.
 *
 * Every host-side wait on NCCL (init, a nonblocking group's completion, finalize) is bounded by
 * timeout_ms; on expiry every communicator is aborted (ncclCommAbort) and the call fails. With
 * blocking=1 the communicators are blocking: NCCL's calls return when done (no helper thread, no
 * poll: cheaper per operation), and a hung call then blocks its caller beyond timeout_ms. */
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

#define NCCL_DEFAULT_LIBRARY "libnccl.so.2"
#define NCCL_MIN_GROW_FLOATS ((size_t)1 << 16)

typedef enum nccl_mode { NCCL_MODE_SUM = 0, NCCL_MODE_ALLGATHER = 1 } nccl_mode;

typedef struct nccl_cfg {
    nccl_mode mode;
    char library[MEMRA_OPT_VALUE_MAX];
    uint32_t timeout_ms;
    uint32_t max_blocks;
    uint64_t prealloc_count;
    bool blocking;
} nccl_cfg;

/* One rank this handle drives. */
typedef struct nccl_rank {
    uint32_t rank; /* its rank in the communicator */
    int32_t device;
    ncclComm_t comm;
    float *staging; /* staging_cap floats */
    size_t staging_cap;
    float *gather; /* gather_cap floats (allgather mode) */
    size_t gather_cap;
    unsigned long long *epochs; /* device, max_blocks counters */
    nccl_cells *cells;          /* host-mapped pinned */
    nccl_cells *cells_dev;
    /* The recorded call of the operation in progress. */
    float *buf;
    size_t count;
    cudaStream_t stream;
    const int32_t *position;
    int32_t *status;
} nccl_rank;

typedef struct nccl_retired {
    void *ptr;
    int32_t device;
} nccl_retired;

struct memra_collective {
    const memra_host *host;
    nccl_cfg cfg;
    void *lib;
    nccl_api api;
    uint32_t n_global;                 /* ranks of the communicator */
    uint32_t n_local;                  /* ranks this handle drives */
    int32_t local_of[MEMRA_MAX_RANKS]; /* global rank -> index into ranks, or -1 */
    nccl_rank ranks[MEMRA_MAX_RANKS];
    pthread_mutex_t lock;
    uint32_t next_local; /* the local index whose call comes next */
    uint32_t pending_block;
    atomic_bool abort_requested;
    bool comms_aborted;
    int *abort_flag; /* host-mapped pinned; finish kernels read it */
    int *abort_flag_dev;
    nccl_retired *retired;
    uint32_t n_retired, cap_retired;
};

static const memra_option_spec nccl_options[] = {
    {"mode", "sum",
     "sum: ncclAllReduce (rank-order bits with 2 ranks); allgather: ncclAllGather, then a rank-order float32 sum "
     "(exact at any rank count)"},
    {"library", NCCL_DEFAULT_LIBRARY, "the NCCL library opened at run time (2.18 or later)"},
    {"timeout_ms", "10000",
     "bound of every host-side wait on NCCL (init, group completion, finalize); on expiry the communicator is aborted"},
    {"max_blocks", "4096", "block ids 0..N-1 the communicator serves (one epoch counter each per rank)"},
    {"prealloc_count", "0",
     "floats per rank of staging buffers allocated at create (larger counts grow them at an eager call)"},
    {"blocking", "0",
     "1: blocking communicators (ncclGroupEnd returns once the work is enqueued, no helper thread and no host "
     "poll; faster per call, but a hung NCCL call then blocks the caller and timeout_ms cannot bound it); 0: "
     "nonblocking, every host-side wait bounded by timeout_ms"},
};

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                     */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void pause_briefly(double waited_ms) {
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

static memra_status cuda_fail(memra_error *err, const char *what, cudaError_t e) {
    return memra_fail(err, MEMRA_E_DEVICE, "nccl: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

static const char *nccl_text(const memra_collective *c, ncclResult_t r) {
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

static memra_status parse_options(const memra_options *opts, nccl_cfg *cfg, memra_error *err) {
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
static memra_status lib_open(const char *path, void **lib_out, nccl_api *api, memra_error *err) {
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

/* Aborts every communicator of the handle (lock held, or no other thread can reach c). */
static void abort_comms(memra_collective *c) {
    if (c->abort_flag)
        *(volatile int *)c->abort_flag = 1;
    atomic_store(&c->abort_requested, true);
    if (c->comms_aborted)
        return;
    for (uint32_t i = 0; i < c->n_local; i++) {
        if (c->ranks[i].comm) {
            (void)cudaSetDevice(c->ranks[i].device);
            c->api.CommAbort(c->ranks[i].comm);
            c->ranks[i].comm = NULL;
        }
    }
    c->comms_aborted = true;
}

/* Polls every communicator until none is in progress, at most timeout_ms from `start`. On expiry
 * or an abort request the communicators are aborted. `what` names the wait in messages. */
static memra_status wait_comms(memra_collective *c, double start, const char *what, memra_error *err) {
    for (;;) {
        bool busy = false;
        for (uint32_t i = 0; i < c->n_local; i++) {
            if (!c->ranks[i].comm)
                continue;
            ncclResult_t a = ncclSuccess;
            ncclResult_t r = c->api.CommGetAsyncError(c->ranks[i].comm, &a);
            if (r != ncclSuccess)
                a = r;
            if (a == ncclInProgress) {
                busy = true;
            } else if (a != ncclSuccess) {
                memra_fail(err, MEMRA_E_DEVICE, "nccl: %s: rank %u (device %d): %s (NCCL result %d)", what,
                           c->ranks[i].rank, c->ranks[i].device, nccl_text(c, a), (int)a);
                abort_comms(c);
                return MEMRA_E_DEVICE;
            }
        }
        if (!busy)
            return MEMRA_OK;
        if (atomic_load(&c->abort_requested)) {
            abort_comms(c);
            return memra_fail(err, MEMRA_E_REFUSED, "nccl: %s: the communicator was aborted", what);
        }
        double waited = now_ms() - start;
        if (waited > (double)c->cfg.timeout_ms) {
            abort_comms(c);
            return memra_fail(err, MEMRA_E_DEVICE,
                              "nccl: %s did not complete within timeout_ms=%u; the communicator was aborted", what,
                              c->cfg.timeout_ms);
        }
        pause_briefly(waited);
    }
}

static bool retire(memra_collective *c, void *ptr, int32_t device) {
    if (!ptr)
        return true;
    if (c->n_retired == c->cap_retired) {
        uint32_t cap = c->cap_retired ? c->cap_retired * 2 : 8;
        nccl_retired *r = realloc(c->retired, (size_t)cap * sizeof *r);
        if (!r)
            return false;
        c->retired = r;
        c->cap_retired = cap;
    }
    c->retired[c->n_retired++] = (nccl_retired){ptr, device};
    return true;
}

/* Grows *p (holding *cap floats on rank's device) to hold `need`. The device is current. */
static memra_status grow(memra_collective *c, nccl_rank *nr, float **p, size_t *cap, size_t need, const char *what,
                         memra_error *err) {
    if (*cap >= need)
        return MEMRA_OK;
    size_t n = *cap * 2;
    if (n < need)
        n = need;
    if (n < NCCL_MIN_GROW_FLOATS)
        n = NCCL_MIN_GROW_FLOATS;
    if (n > SIZE_MAX / sizeof(float))
        return memra_fail(err, MEMRA_E_NOMEM, "nccl: rank %u: %s of %zu floats is too large", nr->rank, what, n);
    float *q = NULL;
    cudaError_t e = cudaMalloc((void **)&q, n * sizeof(float));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return memra_fail(err, MEMRA_E_NOMEM, "nccl: rank %u (device %d): cudaMalloc of the %s (%zu bytes): %s",
                          nr->rank, nr->device, what, n * sizeof(float), cudaGetErrorString(e));
    }
    if (!retire(c, *p, nr->device)) {
        cudaFree(q);
        return memra_fail(err, MEMRA_E_NOMEM, "nccl: out of memory");
    }
    *p = q;
    *cap = n;
    return MEMRA_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Create and destroy                                                                          */

static void free_handle(memra_collective *c) {
    if (!c)
        return;
    int saved = -1;
    bool have_saved = cudaGetDevice(&saved) == cudaSuccess;
    for (uint32_t i = 0; i < c->n_local; i++) {
        nccl_rank *nr = &c->ranks[i];
        if (cudaSetDevice(nr->device) != cudaSuccess)
            continue;
        if (nr->staging)
            cudaFree(nr->staging);
        if (nr->gather)
            cudaFree(nr->gather);
        if (nr->epochs)
            cudaFree(nr->epochs);
        if (nr->cells)
            cudaFreeHost(nr->cells);
    }
    for (uint32_t i = 0; i < c->n_retired; i++) {
        if (cudaSetDevice(c->retired[i].device) == cudaSuccess)
            cudaFree(c->retired[i].ptr);
    }
    free(c->retired);
    if (c->abort_flag)
        cudaFreeHost(c->abort_flag);
    if (have_saved && saved >= 0)
        (void)cudaSetDevice(saved);
    (void)cudaGetLastError();
    pthread_mutex_destroy(&c->lock);
    /* The library stays loaded (c->lib is not closed): NCCL keeps threads and state whose
     * unloading it does not promise to survive. dlopen counts references, so a later create
     * finds it loaded. */
    free(c);
}

static void nccl_destroy(memra_collective *c) {
    if (!c)
        return;
    int saved = -1;
    bool have_saved = cudaGetDevice(&saved) == cudaSuccess;
    if (!c->comms_aborted) {
        memra_error err = {0};
        bool any = false;
        for (uint32_t i = 0; i < c->n_local; i++) {
            if (!c->ranks[i].comm)
                continue;
            (void)cudaSetDevice(c->ranks[i].device);
            ncclResult_t r = c->api.CommFinalize(c->ranks[i].comm);
            any = true;
            if (r != ncclSuccess && r != ncclInProgress && c->host && c->host->log)
                c->host->log(MEMRA_LOG_WARN, "nccl", "ncclCommFinalize of rank %u: %s", c->ranks[i].rank,
                             nccl_text(c, r));
        }
        if (any && wait_comms(c, now_ms(), "finalizing the communicator", &err) != MEMRA_OK) {
            if (c->host && c->host->log)
                c->host->log(MEMRA_LOG_WARN, "nccl", "%s", err.msg);
        }
        if (!c->comms_aborted) {
            for (uint32_t i = 0; i < c->n_local; i++) {
                if (!c->ranks[i].comm)
                    continue;
                (void)cudaSetDevice(c->ranks[i].device);
                c->api.CommDestroy(c->ranks[i].comm);
                c->ranks[i].comm = NULL;
            }
        }
    }
    if (have_saved && saved >= 0)
        (void)cudaSetDevice(saved);
    free_handle(c);
}

static memra_status warm_up(memra_collective *c, memra_error *err);

/* The part of create and create_rank after their arguments were checked: n_local ranks of an
 * n_global communicator, global ranks `global[i]` on `devices[i]`; id NULL: make one. */
static memra_status create_common(const memra_host *host, const nccl_cfg *cfg, uint32_t n_global, uint32_t n_local,
                                  const uint32_t *global, const int32_t *devices, const uint8_t *id,
                                  memra_collective **out, memra_error *err) {
    void *lib = NULL;
    nccl_api api;
    /* Each rank's config lives until its nonblocking init is waited for below. */
    ncclConfig_t configs[MEMRA_MAX_RANKS];
    memra_status st = lib_open(cfg->library, &lib, &api, err);
    if (st != MEMRA_OK)
        return st;
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev < 1) {
        (void)cudaGetLastError();
        dlclose(lib);
        return memra_fail(err, MEMRA_E_DEVICE, "nccl: no CUDA device: cudaGetDeviceCount: %s",
                          e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    for (uint32_t i = 0; i < n_local; i++) {
        if (devices[i] >= n_dev) {
            dlclose(lib);
            return memra_fail(err, MEMRA_E_INVALID, "nccl: rank %u is on device %d, but there are %d CUDA devices",
                              global[i], (int)devices[i], n_dev);
        }
    }
    memra_collective *c = calloc(1, sizeof *c);
    if (!c) {
        dlclose(lib);
        return memra_fail(err, MEMRA_E_NOMEM, "nccl: create: out of memory");
    }
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        dlclose(lib);
        return memra_fail(err, MEMRA_E_INTERNAL, "nccl: create: pthread_mutex_init failed");
    }
    c->host = host;
    c->cfg = *cfg;
    c->lib = lib;
    c->api = api;
    c->n_global = n_global;
    c->n_local = n_local;
    atomic_init(&c->abort_requested, false);
    for (uint32_t r = 0; r < MEMRA_MAX_RANKS; r++)
        c->local_of[r] = -1;
    for (uint32_t i = 0; i < n_local; i++) {
        c->ranks[i].rank = global[i];
        c->ranks[i].device = devices[i];
        c->local_of[global[i]] = (int32_t)i;
    }
    int saved = 0;
    (void)cudaGetDevice(&saved);
    const char *what = "cudaHostAlloc (abort flag)";
    e = cudaHostAlloc((void **)&c->abort_flag, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaSuccess) {
        *c->abort_flag = 0;
        what = "cudaHostGetDevicePointer (abort flag)";
        e = cudaHostGetDevicePointer((void **)&c->abort_flag_dev, c->abort_flag, 0);
    }
    for (uint32_t i = 0; i < n_local && e == cudaSuccess; i++) {
        nccl_rank *nr = &c->ranks[i];
        what = "cudaSetDevice";
        if ((e = cudaSetDevice(nr->device)) != cudaSuccess)
            break;
        what = "cudaMalloc (epochs)";
        if ((e = cudaMalloc((void **)&nr->epochs, (size_t)cfg->max_blocks * sizeof *nr->epochs)) != cudaSuccess)
            break;
        what = "cudaMemset (epochs)";
        if ((e = cudaMemset(nr->epochs, 0, (size_t)cfg->max_blocks * sizeof *nr->epochs)) != cudaSuccess)
            break;
        what = "cudaHostAlloc (refusal cells)";
        if ((e = cudaHostAlloc((void **)&nr->cells, sizeof *nr->cells, cudaHostAllocMapped | cudaHostAllocPortable)) !=
            cudaSuccess)
            break;
        memset(nr->cells, 0, sizeof *nr->cells);
        what = "cudaHostGetDevicePointer (refusal cells)";
        if ((e = cudaHostGetDevicePointer((void **)&nr->cells_dev, nr->cells, 0)) != cudaSuccess)
            break;
        if (cfg->prealloc_count) {
            size_t stride = nccl_stride((size_t)cfg->prealloc_count, n_global);
            if ((st = grow(c, nr, &nr->staging, &nr->staging_cap, stride, "staging buffer", err)) != MEMRA_OK)
                break;
            if (cfg->mode == NCCL_MODE_ALLGATHER &&
                (st = grow(c, nr, &nr->gather, &nr->gather_cap, stride * n_global, "gather buffer", err)) != MEMRA_OK)
                break;
        }
    }
    if (e != cudaSuccess || st != MEMRA_OK) {
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = memra_fail(err, MEMRA_E_DEVICE, "nccl: create: %s: %s", what, cudaGetErrorString(e));
        }
        goto fail;
    }
    ncclUniqueId uid;
    if (id) {
        memcpy(uid.internal, id, sizeof uid.internal);
    } else {
        ncclResult_t r = c->api.GetUniqueId(&uid);
        if (r != ncclSuccess) {
            st = memra_fail(err, MEMRA_E_DEVICE, "nccl: ncclGetUniqueId: %s", nccl_text(c, r));
            goto fail;
        }
    }
    /* Every rank's communicator in one group, nonblocking (unless blocking=1); then a bounded wait
     * for all (a blocking init has returned complete: the wait finds nothing in progress). */
    ncclResult_t first = ncclSuccess;
    uint32_t first_rank = 0;
    c->api.GroupStart();
    for (uint32_t i = 0; i < n_local; i++) {
        nccl_rank *nr = &c->ranks[i];
        configs[i] = (ncclConfig_t){
            .size = sizeof(ncclConfig_t),
            .magic = NCCL_CONFIG_MAGIC,
            .version = NCCL_CONFIG_VERSION,
            .blocking = cfg->blocking ? 1 : 0,
            .cgaClusterSize = NCCL_CONFIG_UNDEF_INT,
            .minCTAs = NCCL_CONFIG_UNDEF_INT,
            .maxCTAs = NCCL_CONFIG_UNDEF_INT,
            .netName = NULL,
            .splitShare = NCCL_CONFIG_UNDEF_INT,
            .trafficClass = NCCL_CONFIG_UNDEF_INT,
            .commName = NULL,
            .collnetEnable = NCCL_CONFIG_UNDEF_INT,
            .CTAPolicy = NCCL_CONFIG_UNDEF_INT,
            .shrinkShare = NCCL_CONFIG_UNDEF_INT,
            .nvlsCTAs = NCCL_CONFIG_UNDEF_INT,
            .nChannelsPerNetPeer = NCCL_CONFIG_UNDEF_INT,
            .nvlinkCentricSched = NCCL_CONFIG_UNDEF_INT,
        };
        (void)cudaSetDevice(nr->device);
        ncclResult_t r = c->api.CommInitRankConfig(&nr->comm, (int)n_global, uid, (int)nr->rank, &configs[i]);
        if (r != ncclSuccess && r != ncclInProgress && first == ncclSuccess) {
            first = r;
            first_rank = nr->rank;
        }
    }
    ncclResult_t ge = c->api.GroupEnd();
    if (first == ncclSuccess && ge != ncclSuccess && ge != ncclInProgress) {
        first = ge;
        first_rank = UINT32_MAX;
    }
    if (first != ncclSuccess) {
        if (first_rank == UINT32_MAX)
            st = memra_fail(err, MEMRA_E_DEVICE, "nccl: ncclGroupEnd after ncclCommInitRankConfig: %s (NCCL result %d)",
                            nccl_text(c, first), (int)first);
        else
            st = memra_fail(err, MEMRA_E_DEVICE, "nccl: ncclCommInitRankConfig of rank %u: %s (NCCL result %d)",
                            first_rank, nccl_text(c, first), (int)first);
        abort_comms(c);
        goto fail;
    }
    if ((st = wait_comms(c, now_ms(), "creating the communicator", err)) != MEMRA_OK)
        goto fail;
    if ((st = warm_up(c, err)) != MEMRA_OK)
        goto fail;
    (void)cudaSetDevice(saved);
    *out = c;
    return MEMRA_OK;
fail:
    if (!c->comms_aborted)
        abort_comms(c);
    (void)cudaSetDevice(saved);
    free_handle(c);
    return st;
}

/* One small all-reduce on every communicator of the handle, at create, outside any capture: NCCL
 * sets up its connections at a communicator's first operation, which would otherwise fall inside
 * the caller's first step (or its graph capture) and count against the collective's time. Every
 * process of a communicator does this one operation at create (create_common). Bounded by
 * timeout_ms; on expiry the communicators are aborted and create fails. */
static memra_status warm_up(memra_collective *c, memra_error *err) {
    enum { WARM_FLOATS = 64 };
    cudaStream_t streams[MEMRA_MAX_RANKS] = {0};
    float *bufs[MEMRA_MAX_RANKS] = {0};
    memra_status st = MEMRA_OK;
    cudaError_t e = cudaSuccess;
    for (uint32_t i = 0; i < c->n_local && e == cudaSuccess; i++) {
        if ((e = cudaSetDevice(c->ranks[i].device)) == cudaSuccess &&
            (e = cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking)) == cudaSuccess &&
            (e = cudaMalloc((void **)&bufs[i], WARM_FLOATS * sizeof(float))) == cudaSuccess)
            e = cudaMemsetAsync(bufs[i], 0, WARM_FLOATS * sizeof(float), streams[i]);
    }
    if (e != cudaSuccess) {
        st = cuda_fail(err, "the warm-up operation at create", e);
        goto out;
    }
    ncclResult_t first = ncclSuccess;
    c->api.GroupStart();
    for (uint32_t i = 0; i < c->n_local; i++) {
        ncclResult_t r =
            c->api.AllReduce(bufs[i], bufs[i], WARM_FLOATS, ncclFloat32, ncclSum, c->ranks[i].comm, streams[i]);
        if (r != ncclSuccess && r != ncclInProgress && first == ncclSuccess)
            first = r;
    }
    ncclResult_t ge = c->api.GroupEnd();
    if (first == ncclSuccess && ge != ncclSuccess && ge != ncclInProgress)
        first = ge;
    if (first != ncclSuccess) {
        st = memra_fail(err, MEMRA_E_DEVICE, "nccl: the warm-up all-reduce at create: %s (NCCL result %d)",
                        nccl_text(c, first), (int)first);
        abort_comms(c);
        goto out;
    }
    const double t0 = now_ms();
    if (ge == ncclInProgress && (st = wait_comms(c, t0, "the warm-up all-reduce at create", err)) != MEMRA_OK)
        goto out;
    for (uint32_t i = 0; i < c->n_local && st == MEMRA_OK; i++) {
        (void)cudaSetDevice(c->ranks[i].device);
        while ((e = cudaStreamQuery(streams[i])) == cudaErrorNotReady && now_ms() - t0 <= (double)c->cfg.timeout_ms)
            sched_yield();
        if (e != cudaSuccess) {
            st = e == cudaErrorNotReady
                     ? memra_fail(err, MEMRA_E_DEVICE,
                                  "nccl: the warm-up all-reduce at create did not finish within timeout_ms=%u",
                                  c->cfg.timeout_ms)
                     : cuda_fail(err, "the warm-up all-reduce at create", e);
            abort_comms(c);
        }
    }
out:
    for (uint32_t i = 0; i < c->n_local; i++) {
        (void)cudaSetDevice(c->ranks[i].device);
        if (streams[i] && !c->comms_aborted)
            (void)cudaStreamSynchronize(streams[i]);
        if (bufs[i])
            (void)cudaFree(bufs[i]);
        if (streams[i])
            (void)cudaStreamDestroy(streams[i]);
    }
    (void)cudaGetLastError();
    return st;
}

static memra_status nccl_create(const memra_host *host, uint32_t n_ranks, const int32_t *devices,
                                const memra_options *opts, memra_collective **out, memra_error *err) {
    if (!out)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: create: out is NULL");
    *out = NULL;
    if (n_ranks < 1 || n_ranks > MEMRA_MAX_RANKS)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: create: %u ranks (expected 1..%u)", n_ranks,
                          (unsigned)MEMRA_MAX_RANKS);
    if (!devices)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: create: devices is NULL (nccl ranks are devices)");
    nccl_cfg cfg;
    memra_status st = parse_options(opts, &cfg, err);
    if (st != MEMRA_OK)
        return st;
    uint32_t global[MEMRA_MAX_RANKS];
    for (uint32_t r = 0; r < n_ranks; r++) {
        global[r] = r;
        if (devices[r] < 0)
            return memra_fail(err, MEMRA_E_INVALID, "nccl: rank %u has device %d (nccl ranks are CUDA devices)", r,
                              (int)devices[r]);
        for (uint32_t q = 0; q < r; q++)
            if (devices[q] == devices[r])
                return memra_fail(err, MEMRA_E_INVALID,
                                  "nccl: ranks %u and %u are both on device %d; NCCL needs one device per rank", q, r,
                                  (int)devices[r]);
    }
    return create_common(host, &cfg, n_ranks, n_ranks, global, devices, NULL, out, err);
}

static memra_status nccl_bootstrap_id(const memra_host *host, uint8_t *id, size_t id_size, memra_error *err) {
    (void)host;
    if (!id || id_size != MEMRA_COLLECTIVE_ID_BYTES)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: bootstrap_id: expected a buffer of %d bytes (got %zu%s)",
                          MEMRA_COLLECTIVE_ID_BYTES, id_size, id ? "" : ", NULL");
    void *lib = NULL;
    nccl_api api;
    memra_status st = lib_open(NCCL_DEFAULT_LIBRARY, &lib, &api, err);
    if (st != MEMRA_OK)
        return st;
    ncclUniqueId uid;
    ncclResult_t r = api.GetUniqueId(&uid);
    if (r != ncclSuccess) {
        const char *s = api.GetErrorString(r);
        return memra_fail(err, MEMRA_E_DEVICE, "nccl: ncclGetUniqueId: %s", s ? s : "unknown NCCL error");
    }
    /* The library stays loaded: the id's bootstrap root runs in NCCL's own thread. */
    memcpy(id, uid.internal, MEMRA_COLLECTIVE_ID_BYTES);
    return MEMRA_OK;
}

static memra_status nccl_create_rank(const memra_host *host, const memra_collective_bootstrap *boot,
                                     const memra_options *opts, memra_collective **out, memra_error *err) {
    if (!out)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: create_rank: out is NULL");
    *out = NULL;
    if (!MEMRA_HAS_MEMBER(boot, memra_collective_bootstrap, id))
        return memra_fail(err, MEMRA_E_INVALID, "nccl: create_rank: bootstrap is NULL or too small (struct_size %u)",
                          boot ? boot->struct_size : 0u);
    if (boot->n_ranks < 1 || boot->n_ranks > MEMRA_MAX_RANKS || boot->rank >= boot->n_ranks)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: create_rank: rank %u of %u ranks (expected 1..%u ranks)",
                          boot->rank, boot->n_ranks, (unsigned)MEMRA_MAX_RANKS);
    if (boot->device < 0)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: create_rank: rank %u has device %d (nccl ranks are devices)",
                          boot->rank, (int)boot->device);
    nccl_cfg cfg;
    memra_status st = parse_options(opts, &cfg, err);
    if (st != MEMRA_OK)
        return st;
    uint32_t global = boot->rank;
    return create_common(host, &cfg, boot->n_ranks, 1, &global, &boot->device, boot->id, out, err);
}

/* ------------------------------------------------------------------------------------------ */
/* The operation                                                                               */

/* Writes `word` into the status of each recorded call of the operation in progress (best effort:
 * launch errors are ignored) and forgets the operation. Lock held. */
static void drop_pending(memra_collective *c, uint32_t n_recorded, int32_t word) {
    for (uint32_t i = 0; i < n_recorded && i < c->n_local; i++) {
        nccl_rank *nr = &c->ranks[i];
        if (nr->status && cudaSetDevice(nr->device) == cudaSuccess)
            (void)nccl_launch_set_status(nr->stream, nr->status, word);
        nr->status = NULL;
    }
    (void)cudaGetLastError();
    c->next_local = 0;
}

/* The last call: enqueues every rank's part. Lock held; every rank's call is recorded. */
static memra_status run_op(memra_collective *c, memra_error *err) {
    const uint32_t n = c->n_local;
    const uint32_t block = c->pending_block;
    const bool gather = c->cfg.mode == NCCL_MODE_ALLGATHER;
    memra_status st = MEMRA_OK;
    const size_t count = c->ranks[0].count;
    for (uint32_t i = 1; i < n; i++) {
        if (c->ranks[i].count != count) {
            st = memra_fail(err, MEMRA_E_INVALID,
                            "nccl: block %u: rank %u reduces %zu floats but rank %u reduces %zu (counts must match)",
                            block, c->ranks[i].rank, c->ranks[i].count, c->ranks[0].rank, count);
            drop_pending(c, n, MEMRA_COLLECTIVE_FAILED);
            return st;
        }
    }
    const size_t stride = nccl_stride(count, c->n_global);
    int saved = 0;
    (void)cudaGetDevice(&saved);
    /* Room first (outside capture only), then every rank's pack. */
    for (uint32_t i = 0; i < n; i++) {
        nccl_rank *nr = &c->ranks[i];
        size_t need_gather = gather ? stride * c->n_global : 0;
        if (nr->staging_cap >= stride && nr->gather_cap >= need_gather)
            continue;
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        cudaError_t e = cudaStreamIsCapturing(nr->stream, &cs);
        if (e != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
            (void)cudaGetLastError();
            st = memra_fail(err, MEMRA_E_UNSUPPORTED,
                            "nccl: block %u, rank %u: %zu floats need a larger staging buffer (it holds %zu), which "
                            "cannot be allocated while the rank's stream is being captured: make the first call of "
                            "each larger count eagerly (outside capture), or create with prealloc_count=%zu",
                            block, nr->rank, count, nr->staging_cap, count);
            drop_pending(c, n, MEMRA_COLLECTIVE_FAILED);
            goto out;
        }
        if ((e = cudaSetDevice(nr->device)) != cudaSuccess) {
            st = cuda_fail(err, "cudaSetDevice", e);
            drop_pending(c, n, MEMRA_COLLECTIVE_FAILED);
            goto out;
        }
        if ((st = grow(c, nr, &nr->staging, &nr->staging_cap, stride, "staging buffer", err)) != MEMRA_OK ||
            (gather &&
             (st = grow(c, nr, &nr->gather, &nr->gather_cap, need_gather, "gather buffer", err)) != MEMRA_OK)) {
            drop_pending(c, n, MEMRA_COLLECTIVE_FAILED);
            goto out;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        nccl_rank *nr = &c->ranks[i];
        cudaError_t e = cudaSetDevice(nr->device);
        if (e == cudaSuccess)
            e = nccl_launch_pack(nr->stream, nr->buf, nr->staging, count, c->n_global, nr->rank, block, nr->position,
                                 nr->status, nr->epochs, nr->cells_dev);
        if (e != cudaSuccess) {
            st = memra_fail(err, MEMRA_E_DEVICE, "nccl: block %u, rank %u: launching the pack kernel: %s", block,
                            nr->rank, cudaGetErrorString(e));
            drop_pending(c, n, MEMRA_COLLECTIVE_FAILED);
            goto out;
        }
    }
    ncclResult_t first = ncclSuccess;
    uint32_t first_rank = 0;
    c->api.GroupStart();
    for (uint32_t i = 0; i < n; i++) {
        nccl_rank *nr = &c->ranks[i];
        ncclResult_t r =
            gather ? c->api.AllGather(nr->staging, nr->gather, stride, ncclFloat32, nr->comm, nr->stream)
                   : c->api.AllReduce(nr->staging, nr->staging, stride, ncclFloat32, ncclSum, nr->comm, nr->stream);
        if (r != ncclSuccess && r != ncclInProgress && first == ncclSuccess) {
            first = r;
            first_rank = nr->rank;
        }
    }
    ncclResult_t ge = c->api.GroupEnd();
    if (first != ncclSuccess || (ge != ncclSuccess && ge != ncclInProgress)) {
        ncclResult_t r = first != ncclSuccess ? first : ge;
        st = memra_fail(err, MEMRA_E_DEVICE, "nccl: block %u: %s of rank %u: %s (NCCL result %d)", block,
                        gather ? "ncclAllGather" : "ncclAllReduce",
                        first != ncclSuccess ? first_rank : c->ranks[0].rank, nccl_text(c, r), (int)r);
        /* The ranks whose part was enqueued would wait for the one that failed until a caller's
         * watchdog aborts them (30 s): abort now. Not under capture, where nothing runs and a
         * captured operation holds the communicator (the abort would wait for the graph): the
         * request alone makes every later call fail. */
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(c->ranks[0].stream, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone)
            abort_comms(c);
        else
            atomic_store(&c->abort_requested, true);
        (void)cudaGetLastError();
        drop_pending(c, n, MEMRA_COLLECTIVE_FAILED);
        goto out;
    }
    if (ge == ncclInProgress &&
        (st = wait_comms(c, now_ms(), gather ? "ncclAllGather" : "ncclAllReduce", err)) != MEMRA_OK) {
        drop_pending(c, n, c->comms_aborted ? MEMRA_COLLECTIVE_ABORTED : MEMRA_COLLECTIVE_FAILED);
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        nccl_rank *nr = &c->ranks[i];
        cudaError_t e = cudaSetDevice(nr->device);
        if (e == cudaSuccess)
            e = nccl_launch_finish(nr->stream, nr->buf, gather ? nr->gather : nr->staging, count, stride,
                                   gather ? c->n_global : 1, c->n_global, nr->status, c->abort_flag_dev);
        if (e != cudaSuccess) {
            st = memra_fail(err, MEMRA_E_DEVICE, "nccl: block %u, rank %u: launching the finish kernel: %s", block,
                            nr->rank, cudaGetErrorString(e));
            drop_pending(c, n, MEMRA_COLLECTIVE_FAILED);
            goto out;
        }
        nr->status = NULL;
    }
    c->next_local = 0;
out:
    (void)cudaSetDevice(saved);
    return st;
}

static memra_status nccl_all_reduce(memra_collective *c, uint32_t rank, float *buf, size_t count, void *stream,
                                    uint32_t block, const int32_t *position_dev, int32_t *status_dev,
                                    memra_error *err) {
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: all_reduce: communicator is NULL");
    if (rank >= c->n_global)
        return memra_fail(err, MEMRA_E_RANGE, "nccl: all_reduce: rank %u of a communicator of %u ranks", rank,
                          c->n_global);
    if (c->local_of[rank] < 0)
        return memra_fail(err, MEMRA_E_INVALID,
                          "nccl: all_reduce: rank %u is not driven by this handle (it holds rank %u)", rank,
                          c->ranks[0].rank);
    if (!stream)
        return memra_fail(err, MEMRA_E_INVALID,
                          "nccl: all_reduce: rank %u, block %u: stream is NULL (device ranks take the rank's "
                          "cudaStream_t; NULL is for host collectives such as local)",
                          rank, block);
    if (count && !buf)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: all_reduce: rank %u, block %u: buf is NULL (count %zu)", rank,
                          block, count);
    if (!status_dev)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: all_reduce: rank %u, block %u: status_dev is NULL", rank, block);
    uint32_t li = (uint32_t)c->local_of[rank];
    memra_status st = MEMRA_OK;
    pthread_mutex_lock(&c->lock);
    if (atomic_load(&c->abort_requested) || c->comms_aborted) {
        st = memra_fail(err, MEMRA_E_REFUSED, "nccl: all_reduce: rank %u, block %u: the communicator was aborted", rank,
                        block);
        drop_pending(c, c->next_local, MEMRA_COLLECTIVE_ABORTED);
        int saved = 0;
        (void)cudaGetDevice(&saved);
        if (cudaSetDevice(c->ranks[li].device) == cudaSuccess)
            (void)nccl_launch_set_status((cudaStream_t)stream, status_dev, MEMRA_COLLECTIVE_ABORTED);
        (void)cudaGetLastError();
        (void)cudaSetDevice(saved);
        goto out;
    }
    if (block >= c->cfg.max_blocks) {
        st = memra_fail(err, MEMRA_E_RANGE,
                        "nccl: all_reduce: rank %u: block %u is past the communicator's max_blocks=%u (option "
                        "max_blocks)",
                        rank, block, c->cfg.max_blocks);
        drop_pending(c, c->next_local, MEMRA_COLLECTIVE_FAILED);
        goto out;
    }
    if (li != c->next_local || (c->next_local > 0 && block != c->pending_block)) {
        if (li != c->next_local)
            st = memra_fail(err, MEMRA_E_INVALID,
                            "nccl: all_reduce: rank %u called for block %u where rank %u's call was due: the calls of "
                            "one operation come back to back in rank order",
                            rank, block, c->ranks[c->next_local].rank);
        else
            st = memra_fail(err, MEMRA_E_INVALID,
                            "nccl: all_reduce: rank %u called for block %u in an operation of block %u: the calls of "
                            "one operation come back to back in rank order, for one block",
                            rank, block, c->pending_block);
        drop_pending(c, c->next_local, MEMRA_COLLECTIVE_FAILED);
        goto out;
    }
    nccl_rank *nr = &c->ranks[li];
    nr->buf = buf;
    nr->count = count;
    nr->stream = (cudaStream_t)stream;
    nr->position = position_dev;
    nr->status = status_dev;
    c->pending_block = block;
    if (li + 1 < c->n_local) {
        c->next_local = li + 1;
        goto out;
    }
    st = run_op(c, err);
out:
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Epochs, refusal cells, abort                                                                */

static memra_status nccl_epochs(memra_collective *c, uint32_t rank, uint64_t *out, uint32_t n_blocks,
                                memra_error *err) {
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: epochs: communicator is NULL");
    if (rank >= c->n_global || c->local_of[rank] < 0)
        return memra_fail(err, MEMRA_E_RANGE, "nccl: epochs: rank %u is not a rank of this handle (%u ranks)", rank,
                          c->n_global);
    if (n_blocks && !out)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: epochs: out is NULL (%u blocks)", n_blocks);
    nccl_rank *nr = &c->ranks[c->local_of[rank]];
    uint32_t n = n_blocks < c->cfg.max_blocks ? n_blocks : c->cfg.max_blocks;
    memset(out, 0, (size_t)n_blocks * sizeof *out);
    if (!n)
        return MEMRA_OK;
    pthread_mutex_lock(&c->lock);
    int saved = 0;
    (void)cudaGetDevice(&saved);
    cudaError_t e = cudaSetDevice(nr->device);
    if (e == cudaSuccess)
        e = cudaMemcpy(out, nr->epochs, (size_t)n * sizeof *out, cudaMemcpyDeviceToHost);
    (void)cudaSetDevice(saved);
    pthread_mutex_unlock(&c->lock);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return memra_fail(err, MEMRA_E_DEVICE, "nccl: epochs: rank %u (device %d): reading the counters: %s", rank,
                          nr->device, cudaGetErrorString(e));
    }
    return MEMRA_OK;
}

static memra_status nccl_arm_refusal(memra_collective *c, uint32_t rank, uint32_t block, uint32_t position,
                                     int32_t word, memra_error *err) {
    /* The word first: what a caller may ask of nccl at all, whatever the handle. */
    if (word == MEMRA_COLLECTIVE_ABSENT)
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "nccl: arm_refusal: rank %u, block %u, position %u: nccl cannot inject an absent rank "
                          "(MEMRA_COLLECTIVE_ABSENT)",
                          rank, block, position);
    if (word == 0 || MEMRA_COLLECTIVE_RESERVED(word))
        return memra_fail(err, MEMRA_E_INVALID,
                          "nccl: arm_refusal: rank %u, block %u, position %u: word %d is reserved (0 or a "
                          "MEMRA_COLLECTIVE_ word)",
                          rank, block, position, (int)word);
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: arm_refusal: communicator is NULL");
    if (rank >= c->n_global || c->local_of[rank] < 0)
        return memra_fail(err, MEMRA_E_RANGE, "nccl: arm_refusal: rank %u is not a rank of this handle (%u ranks)",
                          rank, c->n_global);
    if (block >= c->cfg.max_blocks)
        return memra_fail(err, MEMRA_E_RANGE, "nccl: arm_refusal: block %u is past max_blocks=%u (option max_blocks)",
                          block, c->cfg.max_blocks);
    memra_status st = MEMRA_OK;
    pthread_mutex_lock(&c->lock);
    if (atomic_load(&c->abort_requested) || c->comms_aborted) {
        st = memra_fail(err, MEMRA_E_REFUSED, "nccl: arm_refusal: the communicator was aborted");
        goto out;
    }
    volatile nccl_cells *cells = c->ranks[c->local_of[rank]].cells;
    int32_t slot = -1, free_slot = -1;
    uint32_t armed = 0;
    for (uint32_t k = 0; k < NCCL_MAX_CELLS; k++) {
        if (cells->cells[k].armed) {
            armed++;
            if (cells->cells[k].block == block && cells->cells[k].position == position)
                slot = (int32_t)k;
        } else if (free_slot < 0) {
            free_slot = (int32_t)k;
        }
    }
    if (slot >= 0) {
        cells->cells[slot].word = word;
    } else if (free_slot < 0) {
        st = memra_fail(err, MEMRA_E_RANGE, "nccl: arm_refusal: rank %u already has %d cells armed (the most it holds)",
                        rank, NCCL_MAX_CELLS);
        goto out;
    } else {
        volatile nccl_cell *k = &cells->cells[free_slot];
        k->block = block;
        k->position = position;
        k->word = word;
        k->armed = 1;
        armed++;
    }
    cells->n_armed = armed;
    atomic_thread_fence(memory_order_seq_cst);
out:
    pthread_mutex_unlock(&c->lock);
    return st;
}

static memra_status nccl_clear_refusals(memra_collective *c, memra_error *err) {
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "nccl: clear_refusals: communicator is NULL");
    pthread_mutex_lock(&c->lock);
    for (uint32_t i = 0; i < c->n_local; i++) {
        volatile nccl_cells *cells = c->ranks[i].cells;
        for (uint32_t k = 0; k < NCCL_MAX_CELLS; k++)
            cells->cells[k].armed = 0;
        cells->n_armed = 0;
    }
    atomic_thread_fence(memory_order_seq_cst);
    pthread_mutex_unlock(&c->lock);
    return MEMRA_OK;
}

static void nccl_abort(memra_collective *c) {
    if (!c)
        return;
    /* Seen at once by a call waiting on NCCL (which then gives up) and by finish kernels. */
    if (c->abort_flag)
        *(volatile int *)c->abort_flag = 1;
    atomic_store(&c->abort_requested, true);
    pthread_mutex_lock(&c->lock);
    int saved = 0;
    (void)cudaGetDevice(&saved);
    abort_comms(c);
    (void)cudaSetDevice(saved);
    pthread_mutex_unlock(&c->lock);
}

static const memra_collective_vtable nccl_vtable = {
    .struct_size = sizeof(memra_collective_vtable),
    .options = nccl_options,
    .n_options = sizeof nccl_options / sizeof nccl_options[0],
    .create = nccl_create,
    .destroy = nccl_destroy,
    .all_reduce_sum_f32 = nccl_all_reduce,
    .epochs = nccl_epochs,
    .arm_refusal = nccl_arm_refusal,
    .abort = nccl_abort,
    .bootstrap_id = nccl_bootstrap_id,
    .create_rank = nccl_create_rank,
    .clear_refusals = nccl_clear_refusals,
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "nccl",
    .kind = MEMRA_PLUGIN_COLLECTIVE,
    .version = "0.1.0",
    .description = "in-place sum all-reduce over CUDA devices through NCCL (opened at run time): mode=sum "
                   "(ncclAllReduce) or allgather (exact rank-order sum); epochs, refusal cells, abort",
    .collective = &nccl_vtable,
};
