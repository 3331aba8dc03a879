/* fakenccl_graph.c: a test-only stand-in for libnccl (tests/collectives) that models the rule
 * issue 24's first item is about, for one rank per communicator on a GPU: an operation captured
 * into a CUDA graph holds its communicator until the graph (and every executable made from it)
 * is destroyed, and ncclCommFinalize and ncclCommAbort wait for that without looking at any
 * abort flag, as NCCL 2.28 does (its persistent references, released by a CUDA user object's
 * destructor). Here finalize stays in progress while a reference is held, and abort blocks; so
 * that a test cannot hang, abort gives up after FAKE_ABORT_BLOCK_MS, noting that it blocked
 * (fakenccl_abort_blocked, read with dlsym). On request (fakenccl_fail_group_end) a group's end
 * fails with its operations left waiting for a peer until an abort. The rest is what the nccl collective needs: ids,
 * init (nonblocking accepted), groups, and ncclAllReduce / ncclAllGather of one rank (a copy on
 * the stream, capturable). Never installed. */
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl_abi.h"

#define FAKE_ABORT_BLOCK_MS 3000
#define FAKE_WAIT_MS 5000
#define EXPORT __attribute__((visibility("default")))

struct ncclComm {
    int nranks, rank;
    atomic_int refs;     /* captures holding the communicator */
    atomic_int finalize; /* ncclCommFinalize called */
    atomic_int aborted;  /* ncclCommAbort called: releases the parts waiting for a peer */
    atomic_int waiting;  /* enqueued parts waiting for a peer that never comes */
};

EXPORT atomic_int fakenccl_live_refs;     /* references held by graphs, over every communicator */
EXPORT atomic_int fakenccl_abort_blocked; /* aborts that found a reference held (and blocked) */
EXPORT atomic_int fakenccl_captured_ops;  /* operations enqueued under capture */
/* Set by a test: the next ncclGroupEnd that closes a group of operations fails (ncclInternalError)
 * after enqueuing each of its operations as a part that waits for a peer that never arrives (as
 * the ranks whose calls succeeded do in NCCL when another rank's call failed): the part holds its
 * stream until the communicator is aborted (at most FAKE_WAIT_MS; fakenccl_wait_expired counts
 * the parts that waited that long). Models issue 24.7's second fault. */
EXPORT atomic_int fakenccl_fail_group_end;
EXPORT atomic_int fakenccl_wait_expired;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void release(void *p) {
    struct ncclComm *c = p;
    atomic_fetch_sub(&c->refs, 1);
    atomic_fetch_sub(&fakenccl_live_refs, 1);
}

EXPORT ncclResult_t ncclGetVersion(int *version) {
    *version = 22800;
    return ncclSuccess;
}

EXPORT const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "fake nccl error"; }

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                           ncclConfig_t *config) {
    (void)id, (void)config;
    if (nranks != 1 || rank != 0)
        return ncclInvalidUsage; /* the stand-in reduces one rank only */
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c)
        return ncclSystemError;
    c->nranks = nranks;
    c->rank = rank;
    *comm = c;
    return ncclSuccess;
}

/* The operations of the open group (one thread calls the collective: no lock needed). */
static int group_depth, group_n;
static struct {
    ncclComm_t comm;
    cudaStream_t stream;
} group_ops[8];

EXPORT ncclResult_t ncclGroupStart(void) {
    if (group_depth++ == 0)
        group_n = 0;
    return ncclSuccess;
}

/* An enqueued part whose peer never comes: holds its stream until the communicator is aborted. */
static void CUDART_CB wait_for_peer(void *p) {
    struct ncclComm *c = p;
    const double t0 = now_ms();
    struct timespec nap = {0, 1000000};
    while (!atomic_load(&c->aborted) && now_ms() - t0 < FAKE_WAIT_MS)
        nanosleep(&nap, NULL);
    if (!atomic_load(&c->aborted))
        atomic_fetch_add(&fakenccl_wait_expired, 1);
    atomic_fetch_sub(&c->waiting, 1);
}

EXPORT ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0)
        return ncclInvalidUsage;
    if (--group_depth > 0 || group_n == 0)
        return ncclSuccess;
    int fail = atomic_load(&fakenccl_fail_group_end);
    if (fail <= 0 || !atomic_compare_exchange_strong(&fakenccl_fail_group_end, &fail, fail - 1))
        return ncclSuccess;
    for (int i = 0; i < group_n; i++) {
        atomic_fetch_add(&group_ops[i].comm->waiting, 1);
        if (cudaLaunchHostFunc(group_ops[i].stream, wait_for_peer, group_ops[i].comm) != cudaSuccess)
            atomic_fetch_sub(&group_ops[i].comm->waiting, 1);
    }
    return ncclInternalError;
}

/* Frees a communicator once no part of it waits (bounded: a part gives up after FAKE_WAIT_MS). */
static void free_comm(struct ncclComm *c) {
    struct timespec nap = {0, 1000000};
    const double t0 = now_ms();
    while (atomic_load(&c->waiting) > 0 && now_ms() - t0 < 2 * FAKE_WAIT_MS)
        nanosleep(&nap, NULL);
    if (atomic_load(&c->waiting) == 0)
        free(c);
}

/* The copy of one rank's operation; under capture, the reference the graph then holds. */
static ncclResult_t enqueue(const void *send, void *recv, size_t bytes, ncclComm_t c, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (group_depth > 0 && group_n < (int)(sizeof group_ops / sizeof group_ops[0])) {
        group_ops[group_n].comm = c;
        group_ops[group_n++].stream = s;
    }
    if (send != recv && cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess)
        return ncclUnhandledCudaError;
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaGraph_t g = NULL;
    if (cudaStreamGetCaptureInfo(s, &cs, NULL, &g, NULL, NULL, NULL) != cudaSuccess)
        return ncclUnhandledCudaError;
    if (cs != cudaStreamCaptureStatusActive)
        return ncclSuccess;
    cudaUserObject_t obj;
    if (cudaUserObjectCreate(&obj, c, release, 1, cudaUserObjectNoDestructorSync) != cudaSuccess)
        return ncclUnhandledCudaError;
    atomic_fetch_add(&c->refs, 1);
    atomic_fetch_add(&fakenccl_live_refs, 1);
    atomic_fetch_add(&fakenccl_captured_ops, 1);
    if (cudaGraphRetainUserObject(g, obj, 1, cudaGraphUserObjectMove) != cudaSuccess)
        return ncclUnhandledCudaError;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                  ncclComm_t comm, void *stream) {
    if (type != ncclFloat32 || op != ncclSum)
        return ncclInvalidArgument;
    return enqueue(send, recv, count * 4, comm, stream);
}

EXPORT ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                                  void *stream) {
    if (type != ncclFloat32)
        return ncclInvalidArgument;
    return enqueue(send, recv, count * 4, comm, stream);
}

/* In progress while a graph holds the communicator (NCCL's finalize waits for its references). */
EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error) {
    *async_error = atomic_load(&comm->finalize) && atomic_load(&comm->refs) > 0 ? ncclInProgress : ncclSuccess;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    atomic_store(&comm->finalize, 1);
    return atomic_load(&comm->refs) > 0 ? ncclInProgress : ncclSuccess;
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    free_comm(comm);
    return ncclSuccess;
}

/* Blocks while a graph holds the communicator (NCCL's abort would block for ever: bounded here). */
EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
    atomic_store(&comm->aborted, 1);
    if (atomic_load(&comm->refs) > 0) {
        atomic_fetch_add(&fakenccl_abort_blocked, 1);
        const double t0 = now_ms();
        struct timespec nap = {0, 1000000};
        while (atomic_load(&comm->refs) > 0 && now_ms() - t0 < FAKE_ABORT_BLOCK_MS)
            nanosleep(&nap, NULL);
        if (atomic_load(&comm->refs) > 0)
            return ncclInternalError; /* leaked: a graph still refers to it */
    }
    free_comm(comm);
    return ncclSuccess;
}
