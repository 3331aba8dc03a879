/* nccl.c: the `nccl` collective plugin's operation (the all-reduce or allgather of one block with
 * its refusal trailer), epochs, refusal cells, abort and descriptor; nccl_lib.c opens libnccl and
 * checks its version, nccl_comm.c creates, waits on and destroys the communicators.
 *
 * The plugin: device ranks of one process (or, through bootstrap_id and
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
#include "nccl_internal.h"

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
