/* local.c: the `local` collective plugin: host ranks of one process (the cpu backend's pool
 * threads, or one thread making every rank's call in turn).
 *
 * One operation is the n calls of its ranks for one block. A call registers its rank's buffer,
 * status and position under the communicator's mutex and returns without waiting; the last of
 * the n calls sums every element in rank order from rank 0's value (float32, s = b0[i];
 * s += b1[i]; ...; the build has -ffp-contract=off) and writes the sum into every rank's buffer,
 * then every rank's status. Pending operations are keyed by block (and, within a block, kept in
 * the order they began), so operations of several blocks may be in flight at once.
 *
 * Status words (memra/plugin.h): a call writes MEMRA_COLLECTIVE_PENDING to its own status when
 * it registers; completion writes 0, the refusal word, or MEMRA_COLLECTIVE_FAILED (counts differ
 * between ranks) to every rank's status.
 *
 * Buffers: a refused operation leaves them summed (the reduction runs as usual; only the status
 * differs); a failed one (counts differ) leaves them untouched.
 *
 * Refusals: a cell armed at (rank, block, position) fires at that rank's call for `block` when
 * the position it passes (*position_dev) equals `position`; it is then disarmed. Cells of several
 * ranks may fire in one operation (each is disarmed); every rank's status then reads the word of
 * the lowest refusing rank. Arming a cell that is already armed replaces its word.
 *
 * Abort: later all_reduce_sum_f32 and arm_refusal calls fail with MEMRA_E_REFUSED until destroy;
 * operations still pending are dropped (their statuses keep MEMRA_COLLECTIVE_PENDING). epochs
 * still answers. Host ranks never spin, so abort is immediate. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "memra/plugin.h"

/* One operation in flight: the ranks that have called, and what each registered. */
typedef struct local_op {
    uint32_t block;
    uint32_t arrived; /* bit r: rank r has called */
    uint32_t n_arrived;
    float *buf[MEMRA_MAX_RANKS];
    size_t count[MEMRA_MAX_RANKS];
    int32_t *status[MEMRA_MAX_RANKS];
    int32_t refusal[MEMRA_MAX_RANKS]; /* the word of the cell that fired at rank r's call, or 0 */
} local_op;

typedef struct local_cell {
    uint32_t rank, block, position;
    int32_t word;
} local_cell;

struct memra_collective {
    pthread_mutex_t lock;
    uint32_t n_ranks;
    bool aborted;
    /* Operations in flight, in the order they began. */
    local_op **ops;
    uint32_t n_ops, cap_ops;
    /* Armed refusal cells. */
    local_cell *cells;
    uint32_t n_cells, cap_cells;
    /* epochs[r][b], b < n_epoch_blocks (grown as blocks appear; the same size for every rank). */
    uint64_t *epochs[MEMRA_MAX_RANKS];
    uint32_t n_epoch_blocks;
};

static const memra_option_spec local_options[] = {
    {"order", "rank", "summation order: rank (rank 0's value, then + rank 1, ... + rank n-1; the only one)"},
};

/* ------------------------------------------------------------------------------------------ */

static memra_status local_create(const memra_host *host, uint32_t n_ranks, const int32_t *devices,
                                 const memra_options *opts, memra_collective **out, memra_error *err) {
    (void)host;
    (void)devices; /* host memory: devices do not matter */
    if (!out)
        return memra_fail(err, MEMRA_E_INVALID, "local: create: out is NULL");
    *out = NULL;
    if (n_ranks < 1 || n_ranks > MEMRA_MAX_RANKS)
        return memra_fail(err, MEMRA_E_INVALID, "local: create: %u ranks (expected 1..%u)", n_ranks,
                          (unsigned)MEMRA_MAX_RANKS);
    if (opts) {
        for (uint32_t i = 0; i < opts->n && i < MEMRA_OPT_MAX; i++) {
            const memra_option *o = &opts->items[i];
            if (strcmp(o->key, "order") == 0) {
                if (strcmp(o->value, "rank") != 0)
                    return memra_fail(err, MEMRA_E_INVALID, "local: option order=%.60s: expected order=rank", o->value);
            } else {
                return memra_fail(err, MEMRA_E_INVALID, "local: unknown option '%.40s' (local reads only order=rank)",
                                  o->key);
            }
        }
    }
    memra_collective *c = calloc(1, sizeof *c);
    if (!c)
        return memra_fail(err, MEMRA_E_NOMEM, "local: create: out of memory");
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return memra_fail(err, MEMRA_E_INTERNAL, "local: create: pthread_mutex_init failed");
    }
    c->n_ranks = n_ranks;
    *out = c;
    return MEMRA_OK;
}

static void local_destroy(memra_collective *c) {
    if (!c)
        return;
    for (uint32_t i = 0; i < c->n_ops; i++)
        free(c->ops[i]);
    free(c->ops);
    free(c->cells);
    for (uint32_t r = 0; r < MEMRA_MAX_RANKS; r++)
        free(c->epochs[r]);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Makes room for block b in every rank's epoch counters. Lock held. */
static bool epochs_reserve(memra_collective *c, uint32_t block) {
    if (block < c->n_epoch_blocks)
        return true;
    uint64_t want = (uint64_t)block + 1;
    uint64_t n = c->n_epoch_blocks ? c->n_epoch_blocks : 16;
    while (n < want)
        n *= 2;
    if (n > UINT32_MAX)
        n = UINT32_MAX;
    if (n < want || n > SIZE_MAX / sizeof(uint64_t))
        return false;
    for (uint32_t r = 0; r < c->n_ranks; r++) {
        uint64_t *e = realloc(c->epochs[r], (size_t)n * sizeof *e);
        if (!e)
            return false; /* the ranks grown so far keep their larger (zeroed) arrays */
        memset(e + c->n_epoch_blocks, 0, (size_t)(n - c->n_epoch_blocks) * sizeof *e);
        c->epochs[r] = e;
    }
    c->n_epoch_blocks = (uint32_t)n;
    return true;
}

/* The oldest operation of `block` that `rank` has not joined yet, or a new one; NULL when out of
 * memory. Lock held. */
static local_op *op_for(memra_collective *c, uint32_t rank, uint32_t block) {
    for (uint32_t i = 0; i < c->n_ops; i++)
        if (c->ops[i]->block == block && !(c->ops[i]->arrived & (1u << rank)))
            return c->ops[i];
    if (c->n_ops == c->cap_ops) {
        uint32_t cap = c->cap_ops ? c->cap_ops * 2 : 8;
        local_op **ops = realloc(c->ops, (size_t)cap * sizeof *ops);
        if (!ops)
            return NULL;
        c->ops = ops;
        c->cap_ops = cap;
    }
    local_op *op = calloc(1, sizeof *op);
    if (!op)
        return NULL;
    op->block = block;
    c->ops[c->n_ops++] = op;
    return op;
}

static void op_remove(memra_collective *c, local_op *op) {
    for (uint32_t i = 0; i < c->n_ops; i++) {
        if (c->ops[i] == op) {
            memmove(&c->ops[i], &c->ops[i + 1], (size_t)(c->n_ops - i - 1) * sizeof c->ops[0]);
            c->n_ops--;
            break;
        }
    }
    free(op);
}

/* The word of the cell armed at (rank, block, position), disarming it; 0 when none. Lock held. */
static int32_t cell_fire(memra_collective *c, uint32_t rank, uint32_t block, uint32_t position) {
    for (uint32_t i = 0; i < c->n_cells; i++) {
        local_cell *k = &c->cells[i];
        if (k->rank == rank && k->block == block && k->position == position) {
            int32_t word = k->word;
            c->cells[i] = c->cells[--c->n_cells];
            return word;
        }
    }
    return 0;
}

/* The sum in rank order, written into every rank's buffer. */
static void reduce(float *const *buf, uint32_t n, size_t count) {
    if (n == 1)
        return;
    for (size_t i = 0; i < count; i++) {
        float s = buf[0][i];
        for (uint32_t r = 1; r < n; r++)
            s += buf[r][i];
        for (uint32_t r = 0; r < n; r++)
            buf[r][i] = s;
    }
}

/* The last call of an operation: checks, sums, publishes; frees the operation. Lock held. */
static memra_status op_complete(memra_collective *c, local_op *op, memra_error *err) {
    uint32_t n = c->n_ranks;
    memra_status st = MEMRA_OK;
    int32_t word = 0;
    uint32_t bad = 0;
    for (uint32_t r = 1; r < n; r++) {
        if (op->count[r] != op->count[0]) {
            bad = r;
            break;
        }
    }
    if (bad) {
        st = memra_fail(err, MEMRA_E_INVALID,
                        "local: block %u: rank %u reduces %zu floats but rank 0 reduces %zu (counts must match)",
                        op->block, bad, op->count[bad], op->count[0]);
        word = MEMRA_COLLECTIVE_FAILED;
    } else {
        reduce(op->buf, n, op->count[0]);
        for (uint32_t r = 0; r < n && !word; r++)
            word = op->refusal[r];
    }
    for (uint32_t r = 0; r < n; r++)
        if (op->status[r])
            *op->status[r] = word;
    op_remove(c, op);
    return st;
}

static memra_status local_all_reduce(memra_collective *c, uint32_t rank, float *buf, size_t count, void *stream,
                                     uint32_t block, const int32_t *position_dev, int32_t *status_dev,
                                     memra_error *err) {
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "local: all_reduce: communicator is NULL");
    if (stream)
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "local: all_reduce: rank %u, block %u: a stream was given, but local reduces host "
                          "memory from host threads (stream must be NULL)",
                          rank, block);
    if (rank >= c->n_ranks)
        return memra_fail(err, MEMRA_E_RANGE, "local: all_reduce: rank %u of a communicator of %u ranks", rank,
                          c->n_ranks);
    if (count && !buf)
        return memra_fail(err, MEMRA_E_INVALID, "local: all_reduce: rank %u, block %u: buf is NULL (count %zu)", rank,
                          block, count);
    pthread_mutex_lock(&c->lock);
    memra_status st = MEMRA_OK;
    if (c->aborted) {
        st = memra_fail(err, MEMRA_E_REFUSED, "local: all_reduce: rank %u, block %u: the communicator was aborted",
                        rank, block);
        goto out;
    }
    if (!epochs_reserve(c, block)) {
        st =
            memra_fail(err, MEMRA_E_NOMEM, "local: all_reduce: rank %u, block %u: out of memory (epochs)", rank, block);
        goto out;
    }
    local_op *op = op_for(c, rank, block);
    if (!op) {
        st = memra_fail(err, MEMRA_E_NOMEM, "local: all_reduce: rank %u, block %u: out of memory", rank, block);
        goto out;
    }
    op->arrived |= 1u << rank;
    op->n_arrived++;
    op->buf[rank] = buf;
    op->count[rank] = count;
    op->status[rank] = status_dev;
    if (position_dev && c->n_cells)
        op->refusal[rank] = cell_fire(c, rank, block, (uint32_t)*position_dev);
    if (status_dev)
        *status_dev = MEMRA_COLLECTIVE_PENDING;
    c->epochs[rank][block]++;
    if (op->n_arrived == c->n_ranks)
        st = op_complete(c, op, err);
out:
    pthread_mutex_unlock(&c->lock);
    return st;
}

static memra_status local_epochs(memra_collective *c, uint32_t rank, uint64_t *out, uint32_t n_blocks,
                                 memra_error *err) {
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "local: epochs: communicator is NULL");
    if (rank >= c->n_ranks)
        return memra_fail(err, MEMRA_E_RANGE, "local: epochs: rank %u of a communicator of %u ranks", rank, c->n_ranks);
    if (n_blocks && !out)
        return memra_fail(err, MEMRA_E_INVALID, "local: epochs: out is NULL (%u blocks)", n_blocks);
    pthread_mutex_lock(&c->lock);
    for (uint32_t b = 0; b < n_blocks; b++)
        out[b] = b < c->n_epoch_blocks ? c->epochs[rank][b] : 0;
    pthread_mutex_unlock(&c->lock);
    return MEMRA_OK;
}

static memra_status local_arm_refusal(memra_collective *c, uint32_t rank, uint32_t block, uint32_t position,
                                      int32_t word, memra_error *err) {
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "local: arm_refusal: communicator is NULL");
    if (rank >= c->n_ranks)
        return memra_fail(err, MEMRA_E_RANGE, "local: arm_refusal: rank %u of a communicator of %u ranks", rank,
                          c->n_ranks);
    if (word == 0 || MEMRA_COLLECTIVE_RESERVED(word))
        return memra_fail(err, MEMRA_E_INVALID,
                          "local: arm_refusal: rank %u, block %u, position %u: word %d is reserved (0 or a "
                          "MEMRA_COLLECTIVE_ word)",
                          rank, block, position, (int)word);
    pthread_mutex_lock(&c->lock);
    memra_status st = MEMRA_OK;
    if (c->aborted) {
        st = memra_fail(err, MEMRA_E_REFUSED, "local: arm_refusal: the communicator was aborted");
        goto out;
    }
    for (uint32_t i = 0; i < c->n_cells; i++) {
        local_cell *k = &c->cells[i];
        if (k->rank == rank && k->block == block && k->position == position) {
            k->word = word;
            goto out;
        }
    }
    if (c->n_cells == c->cap_cells) {
        uint32_t cap = c->cap_cells ? c->cap_cells * 2 : 8;
        local_cell *cells = realloc(c->cells, (size_t)cap * sizeof *cells);
        if (!cells) {
            st = memra_fail(err, MEMRA_E_NOMEM, "local: arm_refusal: out of memory");
            goto out;
        }
        c->cells = cells;
        c->cap_cells = cap;
    }
    c->cells[c->n_cells++] = (local_cell){.rank = rank, .block = block, .position = position, .word = word};
out:
    pthread_mutex_unlock(&c->lock);
    return st;
}

static memra_status local_clear_refusals(memra_collective *c, memra_error *err) {
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "local: clear_refusals: communicator is NULL");
    pthread_mutex_lock(&c->lock);
    c->n_cells = 0;
    pthread_mutex_unlock(&c->lock);
    return MEMRA_OK;
}

static void local_abort(memra_collective *c) {
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->aborted = true;
    for (uint32_t i = 0; i < c->n_ops; i++)
        free(c->ops[i]);
    c->n_ops = 0;
    pthread_mutex_unlock(&c->lock);
}

static const memra_collective_vtable local_vtable = {
    .struct_size = sizeof(memra_collective_vtable),
    .options = local_options,
    .n_options = sizeof local_options / sizeof local_options[0],
    .create = local_create,
    .destroy = local_destroy,
    .all_reduce_sum_f32 = local_all_reduce,
    .epochs = local_epochs,
    .arm_refusal = local_arm_refusal,
    .abort = local_abort,
    .bootstrap_id = NULL, /* one process only */
    .create_rank = NULL,
    .clear_refusals = local_clear_refusals,
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "local",
    .kind = MEMRA_PLUGIN_COLLECTIVE,
    .version = "0.1.0",
    .description = "in-place sum all-reduce over host ranks of one process (threads), in rank order; epochs, "
                   "refusal cells, abort",
    .collective = &local_vtable,
};
