/* nccl_comm.c: the `nccl` collective's communicators: the bounded host-side waits and abort, the
 * staging buffers (grow and retire), create (one process's ranks, or one rank through bootstrap_id
 * and create_rank) with its warm-up operation, and destroy (nccl.c has the design). */
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

/* Aborts every communicator of the handle (lock held, or no other thread can reach c). */
void abort_comms(memra_collective *c) {
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
memra_status wait_comms(memra_collective *c, double start, const char *what, memra_error *err) {
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
memra_status grow(memra_collective *c, nccl_rank *nr, float **p, size_t *cap, size_t need, const char *what,
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

void nccl_destroy(memra_collective *c) {
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

memra_status nccl_create(const memra_host *host, uint32_t n_ranks, const int32_t *devices, const memra_options *opts,
                         memra_collective **out, memra_error *err) {
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

memra_status nccl_bootstrap_id(const memra_host *host, uint8_t *id, size_t id_size, memra_error *err) {
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

memra_status nccl_create_rank(const memra_host *host, const memra_collective_bootstrap *boot, const memra_options *opts,
                              memra_collective **out, memra_error *err) {
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
