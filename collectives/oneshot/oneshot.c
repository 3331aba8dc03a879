/* oneshot.c: the `oneshot` collective plugin: a one-shot in-place sum all-reduce over the GPUs of
 * one process (the device side is oneshot_kernel.cu, whose comment gives the protocol).
 *
 * create: checks that every rank's device exists and that every pair of distinct devices has peer
 * access (enabling it), then allocates on each rank's device its peer-visible buffers (data,
 * start flags, words) and its own epochs, census, cells, outcomes and counter, all zeroed, plus
 * one host-mapped control word pair shared by the ranks. Two ranks may share a device (their
 * kernels then run side by side on it).
 *
 * all_reduce_sum_f32 (device ranks, plugin.h): enqueues the rank's kernel on its stream; nothing
 * waits on the host, so it can be captured into a CUDA graph, and every replay is a new operation
 * (epochs, cells and signals live on the device). count may not exceed max_count (an option).
 *
 * Options: timeout_ms (default 1000: how long a rank waits for a peer before it gives up with
 * MEMRA_COLLECTIVE_TIMEOUT(peer) and marks the communicator broken), max_count (floats per
 * operation; default 16777216, 64 MiB), blocks (the most blocks an operation launches, default 32)
 * and chunk (floats per block it aims at, default 1024: 16 KB take 4 blocks).
 *
 * Refusal cells live in each rank's device memory: arm_refusal reads the table back, drops fired
 * cells, adds or replaces the cell and writes it again (no operation may be in flight: plugin.h).
 * MEMRA_COLLECTIVE_ABSENT is accepted as a word: the rank then skips that operation. abort sets
 * the shared host-mapped flag, which block 0 reads as its kernel starts and waiting blocks poll;
 * later calls fail on the host (a graph replayed after abort still launches the kernels: they
 * end ABORTED). A timeout writes the broken flag into every rank's words area. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/options.h"
#include "memra/plugin.h"
#include "oneshot_kernel.h"

static const memra_option_spec os_options[] = {
    {"timeout_ms", "1000", "how long a rank waits for a peer before the operation fails naming it (1 to 600000)"},
    {"max_count", "16777216", "the most floats one operation reduces (buffers: 2 x this per rank)"},
    {"blocks", "32", "the most thread blocks per rank an operation launches (1 to 128)"},
    {"chunk", "1024", "floats per block an operation aims at: it launches ceil(count / chunk) blocks, at most blocks"},
    {"sync", "fence",
     "how a block publishes and awaits the ranks' flags: fence (system fences around plain accesses) or acqrel "
     "(release stores and acquire loads at system scope). The bits do not depend on it"},
    {"pdl", "0",
     "1 launches each operation's kernel with programmatic dependent launch: it starts while the kernel before it "
     "drains and waits for it on the device. The bits do not depend on it"},
};

struct memra_collective {
    uint32_t n_ranks;
    int32_t devices[MEMRA_MAX_RANKS];
    os_rank_view views[MEMRA_MAX_RANKS];
    void *arena[MEMRA_MAX_RANKS]; /* one cudaMalloc per rank */
    os_ctl *ctl;                  /* host-mapped */
    uint32_t max_count;
    bool aborted;
};

static memra_status os_cuda_fail(memra_error *err, cudaError_t e, const char *what) {
    return memra_fail(err, MEMRA_E_DEVICE, "oneshot: %s failed: %s (%s)", what, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

static size_t os_align(size_t n) { return (n + 255) & ~(size_t)255; }

static void os_destroy(memra_collective *c) {
    if (!c)
        return;
    if (c->ctl)
        c->ctl->abort = 1; /* anything still spinning ends */
    /* Every rank's device first, then any memory: a peer's kernel still running on another
     * device reads and writes this rank's buffers (freeing rank 0's after syncing only its own
     * device let rank 1's kernel touch freed memory). */
    for (uint32_t r = 0; r < c->n_ranks; r++)
        if (c->arena[r] && cudaSetDevice(c->devices[r]) == cudaSuccess)
            cudaDeviceSynchronize();
    for (uint32_t r = 0; r < c->n_ranks; r++)
        if (c->arena[r] && cudaSetDevice(c->devices[r]) == cudaSuccess)
            cudaFree(c->arena[r]);
    if (c->ctl)
        cudaFreeHost(c->ctl);
    free(c);
}

/* The collective's keys, read once. */
typedef struct os_cfg {
    uint32_t timeout_ms, max_count, blocks, chunk, pdl;
    bool acqrel;
} os_cfg;

static memra_status os_read_options(const memra_options *opts, os_cfg *cfg, memra_error *err) {
    if (opts)
        for (uint32_t i = 0; i < opts->n && i < MEMRA_OPT_MAX; i++) {
            const char *k = opts->items[i].key;
            if (strcmp(k, "timeout_ms") && strcmp(k, "max_count") && strcmp(k, "blocks") && strcmp(k, "chunk") &&
                strcmp(k, "sync") && strcmp(k, "pdl"))
                return memra_fail(
                    err, MEMRA_E_INVALID,
                    "oneshot: unknown option '%.40s' (oneshot reads timeout_ms, max_count, blocks, chunk, "
                    "sync, pdl)",
                    k);
            if (!strcmp(k, "sync") && strcmp(opts->items[i].value, "fence") && strcmp(opts->items[i].value, "acqrel"))
                return memra_fail(err, MEMRA_E_INVALID, "oneshot: sync=%.40s: expected fence or acqrel",
                                  opts->items[i].value);
        }
    const char *sync = opts ? memra_options_get(opts, "sync") : NULL;
    cfg->acqrel = sync && strcmp(sync, "acqrel") == 0;
    memra_status st = memra_options_u32(opts, "timeout_ms", 1000, 1, 600000, &cfg->timeout_ms, err);
    if (!st)
        st = memra_options_u32(opts, "max_count", 16777216u, 1, 1u << 28, &cfg->max_count, err);
    if (!st)
        st = memra_options_u32(opts, "blocks", 32, 1, 128, &cfg->blocks, err);
    if (!st)
        st = memra_options_u32(opts, "chunk", 1024, 32, 1u << 24, &cfg->chunk, err);
    if (!st)
        st = memra_options_u32(opts, "pdl", 0, 0, 1, &cfg->pdl, err);
    if (st)
        memra_error_prefix(err, "oneshot");
    return st;
}

static memra_status os_create(const memra_host *host, uint32_t n_ranks, const int32_t *devices,
                              const memra_options *opts, memra_collective **out, memra_error *err) {
    (void)host;
    if (!out)
        return memra_fail(err, MEMRA_E_INVALID, "oneshot: create: out is NULL");
    *out = NULL;
    if (n_ranks < 1 || n_ranks > MEMRA_MAX_RANKS)
        return memra_fail(err, MEMRA_E_INVALID, "oneshot: create: %u ranks (expected 1..%u)", n_ranks,
                          (unsigned)MEMRA_MAX_RANKS);
    if (!devices)
        return memra_fail(err, MEMRA_E_INVALID,
                          "oneshot: create: the ranks' devices are NULL (oneshot reduces "
                          "device memory: one device per rank)");
    os_cfg cfg;
    memra_status st = os_read_options(opts, &cfg, err);
    if (st)
        return st;
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev <= 0)
        return memra_fail(err, MEMRA_E_DEVICE, "oneshot: no CUDA device (cudaGetDeviceCount: %s)",
                          e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    for (uint32_t r = 0; r < n_ranks; r++)
        if (devices[r] < 0 || devices[r] >= n_dev)
            return memra_fail(err, MEMRA_E_INVALID, "oneshot: rank %u is on device %d, but there are %d devices", r,
                              devices[r], n_dev);
    /* Every rank reads every other rank's buffers and writes its flags: peer access both ways. */
    for (uint32_t a = 0; a < n_ranks; a++)
        for (uint32_t b = 0; b < n_ranks; b++) {
            if (devices[a] == devices[b])
                continue;
            int can = 0;
            e = cudaDeviceCanAccessPeer(&can, devices[a], devices[b]);
            if (e != cudaSuccess)
                return os_cuda_fail(err, e, "cudaDeviceCanAccessPeer");
            if (!can)
                return memra_fail(err, MEMRA_E_UNSUPPORTED,
                                  "oneshot: device %d (rank %u) cannot access device %d (rank %u) as a peer; oneshot "
                                  "needs peer access between every pair of its devices (NVLink or PCIe P2P)",
                                  devices[a], a, devices[b], b);
            if ((e = cudaSetDevice(devices[a])) != cudaSuccess)
                return os_cuda_fail(err, e, "cudaSetDevice");
            e = cudaDeviceEnablePeerAccess(devices[b], 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled)
                (void)cudaGetLastError();
            else if (e != cudaSuccess)
                return os_cuda_fail(err, e, "cudaDeviceEnablePeerAccess");
        }
    memra_collective *c = calloc(1, sizeof *c);
    if (!c)
        return memra_fail(err, MEMRA_E_NOMEM, "oneshot: create: out of host memory");
    c->n_ranks = n_ranks;
    c->max_count = cfg.max_count;
    memcpy(c->devices, devices, n_ranks * sizeof *devices);
    e = cudaHostAlloc((void **)&c->ctl, sizeof *c->ctl, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) {
        c->ctl = NULL;
        os_destroy(c);
        return os_cuda_fail(err, e, "cudaHostAlloc of the control flags");
    }
    memset((void *)c->ctl, 0, sizeof *c->ctl);
    /* a block's chunk: about `chunk` floats while count <= grid * chunk, count / grid beyond */
    const uint32_t grid = cfg.blocks;
    const uint32_t spread = (cfg.max_count + grid - 1) / grid;
    const uint32_t region = spread > cfg.chunk ? spread : cfg.chunk;
    const size_t data_b = os_align((size_t)2 * grid * region * sizeof(float));
    const size_t start_b = os_align((size_t)2 * grid * n_ranks * sizeof(unsigned long long));
    const size_t words_b = os_align((size_t)(4 * n_ranks + 1) * sizeof(int32_t));
    const size_t cnt_b = os_align((size_t)2 * grid * n_ranks * sizeof(unsigned long long));
    const size_t epoch_b = os_align(sizeof(unsigned long long));
    const size_t census_b = os_align((size_t)OS_MAX_SITES * sizeof(unsigned long long));
    const size_t cells_b = os_align((size_t)OS_MAX_CELLS * sizeof(os_cell));
    const size_t outcome_b = os_align((size_t)grid * sizeof(int32_t));
    const size_t total = data_b + start_b + words_b + cnt_b + epoch_b + census_b + cells_b + outcome_b + 256;
    for (uint32_t r = 0; r < n_ranks; r++) {
        if ((e = cudaSetDevice(devices[r])) == cudaSuccess)
            e = cudaMalloc(&c->arena[r], total);
        if (e != cudaSuccess) {
            c->arena[r] = NULL;
            os_destroy(c);
            return memra_fail(err, MEMRA_E_NOMEM, "oneshot: cudaMalloc of %.1f MiB for rank %u on device %d: %s",
                              total / 1048576.0, r, devices[r], cudaGetErrorString(e));
        }
        if ((e = cudaMemset(c->arena[r], 0, total)) != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess) {
            os_destroy(c);
            return os_cuda_fail(err, e, "zeroing the buffers");
        }
    }
    for (uint32_t r = 0; r < n_ranks; r++) {
        os_rank_view *v = &c->views[r];
        v->n_ranks = n_ranks;
        v->rank = r;
        v->acqrel = cfg.acqrel;
        v->pdl = cfg.pdl;
        v->max_grid = grid;
        v->target = cfg.chunk;
        v->region = region;
        for (uint32_t p = 0; p < n_ranks; p++) {
            char *base = (char *)c->arena[p];
            v->data[p] = (float *)base;
            v->start[p] = (unsigned long long *)(base + data_b);
            v->words[p] = (int32_t *)(base + data_b + start_b);
            v->cnt[p] = (unsigned long long *)(base + data_b + start_b + words_b);
        }
        char *own = (char *)c->arena[r] + data_b + start_b + words_b + cnt_b;
        v->seq = (unsigned long long *)own;
        v->census = (unsigned long long *)(own + epoch_b);
        v->cells = (os_cell *)(own + epoch_b + census_b);
        v->outcome = (int32_t *)(own + epoch_b + census_b + cells_b);
        v->done = (unsigned int *)(own + epoch_b + census_b + cells_b + outcome_b);
        v->ctl = c->ctl; /* portable mapped memory: the same address on every device (UVA) */
        v->timeout_ns = (unsigned long long)cfg.timeout_ms * 1000000ull;
    }
    *out = c;
    return MEMRA_OK;
}

static memra_status os_all_reduce(memra_collective *c, uint32_t rank, float *buf, size_t count, void *stream,
                                  uint32_t block, const int32_t *position_dev, int32_t *status_dev, memra_error *err) {
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "oneshot: all_reduce: communicator is NULL");
    if (rank >= c->n_ranks)
        return memra_fail(err, MEMRA_E_RANGE, "oneshot: all_reduce: rank %u of a communicator of %u ranks", rank,
                          c->n_ranks);
    if (!stream)
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "oneshot: all_reduce: rank %u, block %u: no stream (oneshot reduces device memory on the "
                          "rank's CUDA stream)",
                          rank, block);
    if (count > c->max_count)
        return memra_fail(err, MEMRA_E_RANGE,
                          "oneshot: all_reduce: rank %u, block %u: %zu floats, more than max_count=%u", rank, block,
                          count, c->max_count);
    if (count && !buf)
        return memra_fail(err, MEMRA_E_INVALID, "oneshot: all_reduce: rank %u, block %u: buf is NULL", rank, block);
    if (block >= OS_MAX_SITES)
        return memra_fail(err, MEMRA_E_RANGE, "oneshot: all_reduce: block %u (oneshot counts blocks below %u)", block,
                          OS_MAX_SITES);
    if (c->aborted)
        return memra_fail(err, MEMRA_E_REFUSED, "oneshot: all_reduce: rank %u, block %u: the communicator was aborted",
                          rank, block);
    int prev = 0;
    cudaGetDevice(&prev);
    cudaError_t e = cudaSetDevice(c->devices[rank]);
    if (e == cudaSuccess)
        e = (cudaError_t)os_launch(&c->views[rank], buf, (uint32_t)count, block, position_dev, status_dev, stream);
    if (prev != c->devices[rank])
        cudaSetDevice(prev);
    if (e != cudaSuccess)
        return memra_fail(err, MEMRA_E_DEVICE, "oneshot: all_reduce: rank %u, block %u: launch failed: %s", rank, block,
                          cudaGetErrorString(e));
    return MEMRA_OK;
}

static memra_status os_epochs(memra_collective *c, uint32_t rank, uint64_t *out, uint32_t n_blocks, memra_error *err) {
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "oneshot: epochs: communicator is NULL");
    if (rank >= c->n_ranks)
        return memra_fail(err, MEMRA_E_RANGE, "oneshot: epochs: rank %u of a communicator of %u ranks", rank,
                          c->n_ranks);
    if (n_blocks && !out)
        return memra_fail(err, MEMRA_E_INVALID, "oneshot: epochs: out is NULL (%u blocks)", n_blocks);
    uint32_t n = n_blocks < OS_MAX_SITES ? n_blocks : OS_MAX_SITES;
    memset(out, 0, (size_t)n_blocks * sizeof *out);
    cudaError_t e = cudaSetDevice(c->devices[rank]);
    if (e == cudaSuccess && n)
        e = cudaMemcpy(out, c->views[rank].census, (size_t)n * sizeof *out, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? MEMRA_OK : os_cuda_fail(err, e, "epochs (cudaMemcpy)");
}

static memra_status os_arm_refusal(memra_collective *c, uint32_t rank, uint32_t block, uint32_t position, int32_t word,
                                   memra_error *err) {
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "oneshot: arm_refusal: communicator is NULL");
    if (rank >= c->n_ranks)
        return memra_fail(err, MEMRA_E_RANGE, "oneshot: arm_refusal: rank %u of a communicator of %u ranks", rank,
                          c->n_ranks);
    if (word == 0 || (MEMRA_COLLECTIVE_RESERVED(word) && word != MEMRA_COLLECTIVE_ABSENT))
        return memra_fail(err, MEMRA_E_INVALID,
                          "oneshot: arm_refusal: rank %u, block %u, position %u: word %d is reserved (0 or a "
                          "MEMRA_COLLECTIVE_ word other than ABSENT)",
                          rank, block, position, (int)word);
    if (block >= OS_MAX_SITES || position > INT32_MAX)
        return memra_fail(err, MEMRA_E_RANGE, "oneshot: arm_refusal: block %u, position %u out of range", block,
                          position);
    if (c->aborted)
        return memra_fail(err, MEMRA_E_REFUSED, "oneshot: arm_refusal: the communicator was aborted");
    os_cell cells[OS_MAX_CELLS];
    cudaError_t e = cudaSetDevice(c->devices[rank]);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    if (e == cudaSuccess)
        e = cudaMemcpy(cells, c->views[rank].cells, sizeof cells, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return os_cuda_fail(err, e, "arm_refusal (reading the cells)");
    int free_at = -1, same = -1;
    for (uint32_t k = 0; k < OS_MAX_CELLS; k++) {
        if (cells[k].armed && cells[k].fired)
            memset(&cells[k], 0, sizeof cells[k]); /* fired: disarmed */
        if (!cells[k].armed && free_at < 0)
            free_at = (int)k;
        if (cells[k].armed && cells[k].site == block && cells[k].position == (int32_t)position)
            same = (int)k;
    }
    int at = same >= 0 ? same : free_at;
    if (at < 0)
        return memra_fail(err, MEMRA_E_RANGE, "oneshot: arm_refusal: rank %u already has %u cells armed", rank,
                          OS_MAX_CELLS);
    cells[at] = (os_cell){.armed = 1, .site = block, .position = (int32_t)position, .word = word, .fired = 0};
    e = cudaMemcpy(c->views[rank].cells, cells, sizeof cells, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) /* landed before any later launch on any stream */
        e = cudaDeviceSynchronize();
    return e == cudaSuccess ? MEMRA_OK : os_cuda_fail(err, e, "arm_refusal (writing the cells)");
}

static memra_status os_clear_refusals(memra_collective *c, memra_error *err) {
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "oneshot: clear_refusals: communicator is NULL");
    for (uint32_t r = 0; r < c->n_ranks; r++) {
        cudaError_t e = cudaSetDevice(c->devices[r]);
        if (e == cudaSuccess)
            e = cudaDeviceSynchronize();
        if (e == cudaSuccess)
            e = cudaMemset(c->views[r].cells, 0, OS_MAX_CELLS * sizeof(os_cell));
        if (e == cudaSuccess)
            e = cudaDeviceSynchronize();
        if (e != cudaSuccess)
            return os_cuda_fail(err, e, "clear_refusals");
    }
    return MEMRA_OK;
}

static void os_abort(memra_collective *c) {
    if (!c)
        return;
    c->aborted = true;
    if (c->ctl)
        c->ctl->abort = 1;
}

static const memra_collective_vtable os_vtable = {
    .struct_size = sizeof(memra_collective_vtable),
    .options = os_options,
    .n_options = sizeof os_options / sizeof os_options[0],
    .create = os_create,
    .destroy = os_destroy,
    .all_reduce_sum_f32 = os_all_reduce,
    .epochs = os_epochs,
    .arm_refusal = os_arm_refusal,
    .abort = os_abort,
    .bootstrap_id = NULL, /* the ranks of one process only */
    .create_rank = NULL,
    .clear_refusals = os_clear_refusals,
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "oneshot",
    .kind = MEMRA_PLUGIN_COLLECTIVE,
    .version = "0.1.0",
    .description = "one-shot in-place sum all-reduce over the GPUs of one process (peer access), rank order, "
                   "epochs on the device (graph-capturable), bounded waits, refusal cells, abort",
    .collective = &os_vtable,
};
