/* faulty_collective.c: TEST-ONLY collective plugin for memra-gate's tensor-parallel negative
 * controls. It implements the host-rank semantics of plugin.h's memra_collective_vtable (stream
 * NULL; one operation is the n calls of its ranks for one block, in any order and from any
 * threads; a call never waits; the last of the n calls completes the operation: every rank's
 * buffer and status written; a registered rank reads MEMRA_COLLECTIVE_PENDING until then), the way
 * `local` does, and breaks exactly one rule on request:
 *
 *   order=reverse     the sum runs in rank order n-1..0 from rank n-1's value (not 0..n-1 from rank
 *                     0's): every rank still holds the same bits, but not the bits of `local`
 *                     (with 3 or more ranks; with 2 the sum is commutative and the same). The
 *                     gate must catch the mismatch against a `local` arm.
 *   skip_epoch=B      block B's epoch counter of the last rank never advances: the gate's epoch
 *                     census must catch it (naming the step, the rank and the block).
 *   commit_refusal=1  an armed refusal is consumed but the operation publishes status 0 (success):
 *                     a refusal that commits. The gate's refusal cell must catch the step that
 *                     did not fail.
 *
 * The keys reach it through create's options where the backend passes the arm's options on; one
 * source builds four plugins whose defaults differ (compile definitions), so each fault can also
 * be had by name alone: faultycoll (no fault), faultycoll_order (order=reverse),
 * faultycoll_epoch (skip_epoch=1: layer 0's FFN block) and faultycoll_commit (commit_refusal=1).
 * A refusal armed with word 0 disarms that site. Never install this plugin: it exists to make the
 * gate fail. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "memra/options.h"
#include "memra/plugin.h"

#ifndef FAULTYCOLL_NAME
#define FAULTYCOLL_NAME "faultycoll"
#endif

#if defined(FAULTYCOLL_DEFAULTS_ORDER)
#define FC_ORDER "reverse"
#define FC_SKIP "none"
#define FC_COMMIT "0"
#define FC_DESCRIPTION "TEST ONLY: a host collective that sums in reverse rank order"
#elif defined(FAULTYCOLL_DEFAULTS_EPOCH)
#define FC_ORDER "forward"
#define FC_SKIP "1"
#define FC_COMMIT "0"
#define FC_DESCRIPTION "TEST ONLY: a host collective whose block 1 epoch of the last rank never advances"
#elif defined(FAULTYCOLL_DEFAULTS_COMMIT)
#define FC_ORDER "forward"
#define FC_SKIP "none"
#define FC_COMMIT "1"
#define FC_DESCRIPTION "TEST ONLY: a host collective whose refusals report success"
#else
#define FC_ORDER "forward"
#define FC_SKIP "none"
#define FC_COMMIT "0"
#define FC_DESCRIPTION "TEST ONLY: a host collective with faults on request (order, skip_epoch, commit_refusal)"
#endif

#define FC_MAX_RANKS MEMRA_MAX_RANKS
#define FC_MAX_REFUSALS 64
#define FC_MAX_BLOCKS (1u << 16)

static const memra_option_spec fc_options[] = {
    {.key = "order", .default_value = FC_ORDER, .help = "TEST: forward (rank order 0..n-1) or reverse"},
    {.key = "skip_epoch", .default_value = FC_SKIP, .help = "TEST: this block's epoch of the last rank never advances"},
    {.key = "commit_refusal", .default_value = FC_COMMIT, .help = "TEST: 1: an armed refusal publishes status 0"},
};

static const memra_host *fc_host;

/* One operation in progress: the ranks that called so far. */
typedef struct fc_op {
    uint32_t arrived;
    bool seen[FC_MAX_RANKS];
    float *buf[FC_MAX_RANKS];
    int32_t *status[FC_MAX_RANKS];
    size_t count;
    int32_t position;
    int32_t word;
} fc_op;

typedef struct fc_refusal {
    uint32_t rank, block, position;
    int32_t word;
} fc_refusal;

struct memra_collective {
    uint32_t n;
    bool reverse, commit_refusal;
    int64_t skip_epoch; /* -1: none */
    pthread_mutex_t mu;
    uint32_t n_blocks; /* blocks allocated in ops and epochs */
    fc_op *ops;
    uint64_t *epochs; /* [rank * n_blocks + block] */
    fc_refusal refusals[FC_MAX_REFUSALS];
    uint32_t n_refusals;
    bool aborted;
};

static memra_status fc_fail(memra_error *err, memra_status st, const char *msg) {
    return fc_host && fc_host->fail ? fc_host->fail(err, st, "%s: %s", FAULTYCOLL_NAME, msg) : st;
}

static const char *opt_or(const memra_options *opts, const char *key, const char *dflt) {
    const char *v = opts ? memra_options_get(opts, key) : NULL;
    return v ? v : dflt;
}

static memra_status fc_create(const memra_host *host, uint32_t n_ranks, const int32_t *devices,
                              const memra_options *opts, memra_collective **out, memra_error *err) {
    (void)devices;
    fc_host = host;
    if (n_ranks == 0 || n_ranks > FC_MAX_RANKS)
        return fc_fail(err, MEMRA_E_INVALID, "ranks out of range");
    const char *order = opt_or(opts, "order", FC_ORDER), *skip = opt_or(opts, "skip_epoch", FC_SKIP),
               *commit = opt_or(opts, "commit_refusal", FC_COMMIT);
    if (strcmp(order, "forward") != 0 && strcmp(order, "reverse") != 0)
        return fc_fail(err, MEMRA_E_INVALID, "order: expected forward or reverse");
    if (strcmp(commit, "0") != 0 && strcmp(commit, "1") != 0)
        return fc_fail(err, MEMRA_E_INVALID, "commit_refusal: expected 0 or 1");
    int64_t skip_block = -1;
    if (strcmp(skip, "none") != 0) {
        char *end = NULL;
        long v = strtol(skip, &end, 10);
        if (!*skip || *end || v < 0 || v >= (long)FC_MAX_BLOCKS)
            return fc_fail(err, MEMRA_E_INVALID, "skip_epoch: expected none or a block number");
        skip_block = v;
    }
    memra_collective *c = calloc(1, sizeof *c);
    if (!c)
        return fc_fail(err, MEMRA_E_NOMEM, "out of memory");
    c->n = n_ranks;
    c->reverse = strcmp(order, "reverse") == 0;
    c->commit_refusal = strcmp(commit, "1") == 0;
    c->skip_epoch = skip_block;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return MEMRA_OK;
}

static void fc_destroy(memra_collective *c) {
    if (!c)
        return;
    pthread_mutex_destroy(&c->mu);
    free(c->ops);
    free(c->epochs);
    free(c);
}

/* Room for block `block` (under the lock). */
static bool fc_grow(memra_collective *c, uint32_t block) {
    if (block < c->n_blocks)
        return true;
    uint32_t n = c->n_blocks ? c->n_blocks : 64;
    while (n <= block)
        n *= 2;
    fc_op *ops = calloc(n, sizeof *ops);
    uint64_t *epochs = calloc((size_t)n * c->n, sizeof *epochs);
    if (!ops || !epochs) {
        free(ops);
        free(epochs);
        return false;
    }
    if (c->n_blocks) {
        memcpy(ops, c->ops, (size_t)c->n_blocks * sizeof *ops);
        for (uint32_t r = 0; r < c->n; r++)
            memcpy(epochs + (size_t)r * n, c->epochs + (size_t)r * c->n_blocks, c->n_blocks * sizeof *epochs);
    }
    free(c->ops);
    free(c->epochs);
    c->ops = ops;
    c->epochs = epochs;
    c->n_blocks = n;
    return true;
}

static void fc_complete(memra_collective *c, fc_op *op) {
    for (size_t i = 0; i < op->count; i++) {
        float acc;
        if (c->reverse) {
            acc = op->buf[c->n - 1][i];
            for (uint32_t r = c->n - 1; r-- > 0;)
                acc += op->buf[r][i];
        } else {
            acc = op->buf[0][i];
            for (uint32_t r = 1; r < c->n; r++)
                acc += op->buf[r][i];
        }
        for (uint32_t r = 0; r < c->n; r++)
            op->buf[r][i] = acc;
    }
    int32_t status = c->commit_refusal ? 0 : op->word;
    for (uint32_t r = 0; r < c->n; r++)
        *op->status[r] = status;
    memset(op, 0, sizeof *op);
}

static memra_status fc_all_reduce(memra_collective *c, uint32_t rank, float *buf, size_t count, void *stream,
                                  uint32_t block, const int32_t *position_dev, int32_t *status_dev, memra_error *err) {
    if (stream)
        return fc_fail(err, MEMRA_E_UNSUPPORTED, "host ranks only (stream must be NULL)");
    if (rank >= c->n || block >= FC_MAX_BLOCKS || !status_dev || !position_dev || (count && !buf))
        return fc_fail(err, MEMRA_E_INVALID, "rank, block or buffer out of range");
    memra_status st = MEMRA_OK;
    pthread_mutex_lock(&c->mu);
    if (c->aborted) {
        st = fc_fail(err, MEMRA_E_DEVICE, "aborted");
    } else if (!fc_grow(c, block)) {
        st = fc_fail(err, MEMRA_E_NOMEM, "out of memory");
    } else {
        fc_op *op = &c->ops[block];
        if (op->seen[rank]) {
            st = fc_fail(err, MEMRA_E_INTERNAL, "a rank called twice in one operation");
        } else if (op->arrived && (op->count != count || op->position != *position_dev)) {
            st = fc_fail(err, MEMRA_E_INTERNAL, "ranks of one operation disagree on count or position");
        } else {
            op->count = count;
            op->position = *position_dev;
            op->seen[rank] = true;
            op->buf[rank] = buf;
            op->status[rank] = status_dev;
            *status_dev = MEMRA_COLLECTIVE_PENDING; /* until the operation's last call */
            for (uint32_t i = 0; i < c->n_refusals; i++) {
                fc_refusal *f = &c->refusals[i];
                if (f->rank == rank && f->block == block && (int64_t)f->position == (int64_t)op->position) {
                    op->word = f->word;
                    c->refusals[i] = c->refusals[--c->n_refusals]; /* consumed */
                    break;
                }
            }
            if (!(c->skip_epoch == (int64_t)block && rank == c->n - 1))
                c->epochs[(size_t)rank * c->n_blocks + block]++;
            if (++op->arrived == c->n)
                fc_complete(c, op);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

static memra_status fc_epochs(memra_collective *c, uint32_t rank, uint64_t *out, uint32_t n_blocks, memra_error *err) {
    if (rank >= c->n || (n_blocks && !out))
        return fc_fail(err, MEMRA_E_INVALID, "rank out of range");
    pthread_mutex_lock(&c->mu);
    for (uint32_t b = 0; b < n_blocks; b++)
        out[b] = b < c->n_blocks ? c->epochs[(size_t)rank * c->n_blocks + b] : 0;
    pthread_mutex_unlock(&c->mu);
    return MEMRA_OK;
}

static memra_status fc_arm_refusal(memra_collective *c, uint32_t rank, uint32_t block, uint32_t position, int32_t word,
                                   memra_error *err) {
    if (rank >= c->n || block >= FC_MAX_BLOCKS)
        return fc_fail(err, MEMRA_E_RANGE, "refusal site out of range");
    memra_status st = MEMRA_OK;
    pthread_mutex_lock(&c->mu);
    uint32_t i = 0;
    while (i < c->n_refusals &&
           !(c->refusals[i].rank == rank && c->refusals[i].block == block && c->refusals[i].position == position))
        i++;
    if (word == 0) {
        if (i < c->n_refusals)
            c->refusals[i] = c->refusals[--c->n_refusals];
    } else if (i < c->n_refusals) {
        c->refusals[i].word = word;
    } else if (c->n_refusals == FC_MAX_REFUSALS) {
        st = fc_fail(err, MEMRA_E_RANGE, "too many refusals armed");
    } else {
        c->refusals[c->n_refusals++] = (fc_refusal){rank, block, position, word};
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

static void fc_abort(memra_collective *c) {
    pthread_mutex_lock(&c->mu);
    c->aborted = true;
    pthread_mutex_unlock(&c->mu);
}

static const memra_collective_vtable fc_vtable = {
    .struct_size = sizeof(memra_collective_vtable),
    .options = fc_options,
    .n_options = sizeof fc_options / sizeof fc_options[0],
    .create = fc_create,
    .destroy = fc_destroy,
    .all_reduce_sum_f32 = fc_all_reduce,
    .epochs = fc_epochs,
    .arm_refusal = fc_arm_refusal,
    .abort = fc_abort,
};

static memra_status fc_init(const memra_host *host, memra_error *err) {
    (void)err;
    fc_host = host;
    return MEMRA_OK;
}

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = FAULTYCOLL_NAME,
    .kind = MEMRA_PLUGIN_COLLECTIVE,
    .version = "0.1.0",
    .description = FC_DESCRIPTION,
    .init = fc_init,
    .collective = &fc_vtable,
};
