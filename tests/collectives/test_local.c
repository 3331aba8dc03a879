/* test_local.c: the `local` collective (collectives/local/local.c) through its vtable, loaded by
 * the registry as any caller would: rank-order sums bit for bit against a reference computed
 * here (with a negative control: a reverse-order sum gives other bits for 3 ranks and more), the
 * same bits on every rank, from one thread and from n threads; epochs; refusal cells; count
 * mismatches; abort; 1, 2, 3, 4 and 8 ranks. Also the ABI's append-only rule: a collective
 * plugin of ABI 1's first, smaller shape still loads, and one short of it is refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/plugin.h"
#include "memra/registry.h"

static memra_registry *g_reg;
static const memra_collective_vtable *g_vt;

static void setup(void) {
    memra_error err = {0};
    const char *dirs[2] = {COLLTEST_PLUGIN_DIR, COLLTEST_BUILD_PLUGIN_DIR};
    cr_assert_eq(memra_registry_open_dirs(dirs, 2, &g_reg, &err), MEMRA_OK, "%s", err.msg);
    const memra_plugin *p = NULL;
    cr_assert_eq(memra_registry_load(g_reg, "local", MEMRA_PLUGIN_COLLECTIVE, &p, &err), MEMRA_OK, "%s", err.msg);
    g_vt = p->collective;
}

static void teardown(void) {
    memra_registry_close(g_reg);
    g_reg = NULL;
    g_vt = NULL;
}

TestSuite(collective_local, .init = setup, .fini = teardown, .timeout = 60);

static const uint32_t RANKS[] = {1, 2, 3, 4, 8};
#define N_RANKS_CASES (sizeof RANKS / sizeof RANKS[0])

static memra_collective *make(uint32_t n) {
    memra_error err = {0};
    memra_collective *c = NULL;
    cr_assert_eq(g_vt->create(memra_registry_host(g_reg), n, NULL, NULL, &c, &err), MEMRA_OK, "%u ranks: %s", n,
                 err.msg);
    cr_assert_not_null(c);
    return c;
}

/* Deterministic inputs: element 0 is 1 on rank 0 and 2^-24 elsewhere (rank order keeps 1; any
 * order adding two of the small ones first does not), the rest of mixed signs and magnitudes. */
static uint64_t g_rng;
static float next_value(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t x = (uint32_t)(g_rng >> 32);
    float m = 1.0f + (float)(x & 0xffffu) / 65536.0f;
    int e = (int)((x >> 16) % 41u) - 20;
    float v = ldexpf(m, e);
    return (x >> 31) ? -v : v;
}

static void fill(float **buf, uint32_t n, size_t count, uint64_t seed) {
    g_rng = seed;
    for (uint32_t r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++)
            buf[r][i] = next_value();
    if (count) {
        buf[0][0] = 1.0f;
        for (uint32_t r = 1; r < n; r++)
            buf[r][0] = ldexpf(1.0f, -24);
    }
}

static void sum_rank_order(float *const *buf, uint32_t n, size_t count, float *out) {
    for (size_t i = 0; i < count; i++) {
        float s = buf[0][i];
        for (uint32_t r = 1; r < n; r++)
            s += buf[r][i];
        out[i] = s;
    }
}

static void sum_reverse_order(float *const *buf, uint32_t n, size_t count, float *out) {
    for (size_t i = 0; i < count; i++) {
        float s = buf[n - 1][i];
        for (uint32_t r = n - 1; r-- > 0;)
            s += buf[r][i];
        out[i] = s;
    }
}

static float **alloc_bufs(uint32_t n, size_t count) {
    float **b = calloc(n, sizeof *b);
    cr_assert_not_null(b);
    for (uint32_t r = 0; r < n; r++) {
        b[r] = calloc(count ? count : 1, sizeof(float));
        cr_assert_not_null(b[r]);
    }
    return b;
}

static void free_bufs(float **b, uint32_t n) {
    for (uint32_t r = 0; r < n; r++)
        free(b[r]);
    free(b);
}

/* One operation from this thread, ranks called in the given order (NULL: 0..n-1). Every call must
 * succeed; the statuses are left in status[]. */
static void op_serial(memra_collective *c, uint32_t n, uint32_t block, float **buf, size_t count,
                      const int32_t *position, int32_t *status, const uint32_t *order) {
    memra_error err = {0};
    for (uint32_t k = 0; k < n; k++) {
        uint32_t r = order ? order[k] : k;
        cr_assert_eq(g_vt->all_reduce_sum_f32(c, r, buf[r], count, NULL, block, &position[r], &status[r], &err),
                     MEMRA_OK, "rank %u block %u: %s", r, block, err.msg);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Sums                                                                                        */

Test(collective_local, rank_order_bits_on_every_rank) {
    const size_t count = 1000;
    for (size_t t = 0; t < N_RANKS_CASES; t++) {
        uint32_t n = RANKS[t];
        memra_collective *c = make(n);
        float **buf = alloc_bufs(n, count);
        float *want = calloc(count, sizeof *want), *rev = calloc(count, sizeof *rev);
        fill(buf, n, count, 42 + n);
        sum_rank_order(buf, n, count, want);
        sum_reverse_order(buf, n, count, rev);
        /* The negative control: the inputs tell the orders apart (two ranks cannot: a+b = b+a). */
        if (n >= 3) {
            cr_assert_neq(memcmp(want, rev, count * sizeof *want), 0, "%u ranks: reverse order gives the same bits", n);
            cr_assert_eq(want[0], 1.0f);
            cr_assert_neq(rev[0], 1.0f);
        }
        int32_t pos[MEMRA_MAX_RANKS] = {0}, status[MEMRA_MAX_RANKS];
        for (uint32_t r = 0; r < n; r++)
            status[r] = 12345;
        op_serial(c, n, 7, buf, count, pos, status, NULL);
        for (uint32_t r = 0; r < n; r++) {
            cr_assert_eq(memcmp(buf[r], want, count * sizeof *want), 0, "%u ranks: rank %u differs from rank order", n,
                         r);
            cr_assert_eq(status[r], 0, "%u ranks: rank %u status %d", n, r, status[r]);
            if (n >= 3)
                cr_assert_neq(memcmp(buf[r], rev, count * sizeof *rev), 0);
        }
        free(want);
        free(rev);
        free_bufs(buf, n);
        g_vt->destroy(c);
    }
}

Test(collective_local, call_order_does_not_matter_and_calls_do_not_wait) {
    const size_t count = 257;
    for (size_t t = 0; t < N_RANKS_CASES; t++) {
        uint32_t n = RANKS[t];
        memra_collective *c = make(n);
        float **buf = alloc_bufs(n, count);
        float **in = alloc_bufs(n, count);
        float *want = calloc(count, sizeof *want);
        fill(in, n, count, 7 * n);
        sum_rank_order(in, n, count, want);
        for (uint32_t r = 0; r < n; r++)
            memcpy(buf[r], in[r], count * sizeof(float));
        /* Ranks called last to first, each call returning before the others come. */
        memra_error err = {0};
        int32_t pos[MEMRA_MAX_RANKS] = {0}, status[MEMRA_MAX_RANKS] = {0};
        for (uint32_t k = 0; k < n; k++) {
            uint32_t r = n - 1 - k;
            cr_assert_eq(g_vt->all_reduce_sum_f32(c, r, buf[r], count, NULL, 3, &pos[r], &status[r], &err), MEMRA_OK,
                         "%s", err.msg);
            if (k + 1 < n) { /* not complete: untouched buffers, a pending status */
                for (uint32_t q = 0; q < n; q++)
                    cr_assert_eq(memcmp(buf[q], in[q], count * sizeof(float)), 0, "%u ranks: rank %u written early", n,
                                 q);
                cr_assert_eq(status[r], MEMRA_COLLECTIVE_PENDING);
            }
        }
        for (uint32_t r = 0; r < n; r++) {
            cr_assert_eq(memcmp(buf[r], want, count * sizeof *want), 0, "%u ranks: rank %u", n, r);
            cr_assert_eq(status[r], 0);
        }
        free(want);
        free_bufs(in, n);
        free_bufs(buf, n);
        g_vt->destroy(c);
    }
}

/* n threads, one a rank, each making its calls for every (iteration, block) with no barrier
 * between operations, each rank taking the blocks of an iteration in its own order: several
 * blocks, and several operations of one block, are in flight at once. */
#define T_BLOCKS 6
#define T_ITERS 40
#define T_COUNT 64

typedef struct thread_job {
    memra_collective *c;
    uint32_t rank;
    float *buf[T_ITERS][T_BLOCKS];
    int32_t status[T_ITERS][T_BLOCKS];
    int32_t position[T_ITERS];
    pthread_barrier_t *start;
    memra_status st;
    char msg[MEMRA_ERROR_MSG_MAX];
} thread_job;

static void *rank_thread(void *arg) {
    thread_job *j = arg;
    pthread_barrier_wait(j->start);
    for (uint32_t it = 0; it < T_ITERS; it++) {
        for (uint32_t k = 0; k < T_BLOCKS; k++) {
            uint32_t b = (k + j->rank) % T_BLOCKS; /* each rank its own order of blocks */
            memra_error err = {0};
            memra_status st = g_vt->all_reduce_sum_f32(j->c, j->rank, j->buf[it][b], T_COUNT, NULL, b, &j->position[it],
                                                       &j->status[it][b], &err);
            if (st != MEMRA_OK && j->st == MEMRA_OK) {
                j->st = st;
                memcpy(j->msg, err.msg, sizeof j->msg);
            }
        }
    }
    return NULL;
}

Test(collective_local, threads_give_the_bits_of_one_thread) {
    for (size_t t = 0; t < N_RANKS_CASES; t++) {
        uint32_t n = RANKS[t];
        memra_collective *ct = make(n), *cs = make(n);
        thread_job *jobs = calloc(n, sizeof *jobs);
        cr_assert_not_null(jobs);
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, n);
        float **serial = alloc_bufs(n, T_COUNT);
        float **in = alloc_bufs(n, T_COUNT);
        for (uint32_t r = 0; r < n; r++) {
            jobs[r] = (thread_job){.c = ct, .rank = r, .start = &start};
            for (uint32_t it = 0; it < T_ITERS; it++) {
                jobs[r].position[it] = (int32_t)it;
                for (uint32_t b = 0; b < T_BLOCKS; b++) {
                    jobs[r].buf[it][b] = calloc(T_COUNT, sizeof(float));
                    jobs[r].status[it][b] = 777;
                }
            }
        }
        for (uint32_t it = 0; it < T_ITERS; it++)
            for (uint32_t b = 0; b < T_BLOCKS; b++) {
                fill(in, n, T_COUNT, 1000u * it + 10u * b + n);
                for (uint32_t r = 0; r < n; r++)
                    memcpy(jobs[r].buf[it][b], in[r], T_COUNT * sizeof(float));
            }
        pthread_t tid[MEMRA_MAX_RANKS];
        for (uint32_t r = 0; r < n; r++)
            cr_assert_eq(pthread_create(&tid[r], NULL, rank_thread, &jobs[r]), 0);
        for (uint32_t r = 0; r < n; r++)
            pthread_join(tid[r], NULL);
        for (uint32_t r = 0; r < n; r++)
            cr_assert_eq(jobs[r].st, MEMRA_OK, "%u ranks: rank %u: %s", n, r, jobs[r].msg);
        /* The same operations from one thread, on the other communicator. */
        for (uint32_t it = 0; it < T_ITERS; it++) {
            for (uint32_t b = 0; b < T_BLOCKS; b++) {
                fill(serial, n, T_COUNT, 1000u * it + 10u * b + n);
                int32_t pos[MEMRA_MAX_RANKS], status[MEMRA_MAX_RANKS];
                for (uint32_t r = 0; r < n; r++)
                    pos[r] = (int32_t)it;
                op_serial(cs, n, b, serial, T_COUNT, pos, status, NULL);
                for (uint32_t r = 0; r < n; r++) {
                    cr_assert_eq(memcmp(jobs[r].buf[it][b], serial[0], T_COUNT * sizeof(float)), 0,
                                 "%u ranks: iteration %u block %u rank %u: threads differ from one thread", n, it, b,
                                 r);
                    cr_assert_eq(jobs[r].status[it][b], 0);
                    cr_assert_eq(status[r], 0);
                }
            }
        }
        /* Epochs: every rank advanced every block once per iteration. */
        for (uint32_t r = 0; r < n; r++) {
            uint64_t e[T_BLOCKS + 2];
            memra_error err = {0};
            cr_assert_eq(g_vt->epochs(ct, r, e, T_BLOCKS + 2, &err), MEMRA_OK, "%s", err.msg);
            for (uint32_t b = 0; b < T_BLOCKS; b++)
                cr_assert_eq(e[b], T_ITERS, "rank %u block %u: epoch %llu", r, b, (unsigned long long)e[b]);
            cr_assert_eq(e[T_BLOCKS], 0);
            cr_assert_eq(e[T_BLOCKS + 1], 0);
        }
        for (uint32_t r = 0; r < n; r++)
            for (uint32_t it = 0; it < T_ITERS; it++)
                for (uint32_t b = 0; b < T_BLOCKS; b++)
                    free(jobs[r].buf[it][b]);
        pthread_barrier_destroy(&start);
        free(jobs);
        free_bufs(in, n);
        free_bufs(serial, n);
        g_vt->destroy(ct);
        g_vt->destroy(cs);
    }
}

/* Operations are keyed by block: ranks that take blocks in different orders from one thread
 * still meet in the right operations. */
Test(collective_local, operations_are_keyed_by_block) {
    enum { BLOCKS = 5, COUNT = 9 };
    for (size_t t = 1; t < N_RANKS_CASES; t++) {
        uint32_t n = RANKS[t];
        memra_collective *c = make(n);
        float **in[BLOCKS], **buf[BLOCKS], *want[BLOCKS];
        int32_t pos[MEMRA_MAX_RANKS] = {0}, status[BLOCKS][MEMRA_MAX_RANKS];
        for (uint32_t b = 0; b < BLOCKS; b++) {
            in[b] = alloc_bufs(n, COUNT);
            buf[b] = alloc_bufs(n, COUNT);
            want[b] = calloc(COUNT, sizeof(float));
            fill(in[b], n, COUNT, 300u + b);
            sum_rank_order(in[b], n, COUNT, want[b]);
            for (uint32_t r = 0; r < n; r++)
                memcpy(buf[b][r], in[b][r], COUNT * sizeof(float));
        }
        memra_error err = {0};
        for (uint32_t r = 0; r < n; r++) {
            for (uint32_t k = 0; k < BLOCKS; k++) {
                uint32_t b = (r % 2) ? BLOCKS - 1 - (k + r) % BLOCKS : (k + r) % BLOCKS;
                cr_assert_eq(g_vt->all_reduce_sum_f32(c, r, buf[b][r], COUNT, NULL, b, &pos[r], &status[b][r], &err),
                             MEMRA_OK, "%s", err.msg);
            }
        }
        for (uint32_t b = 0; b < BLOCKS; b++) {
            for (uint32_t r = 0; r < n; r++) {
                cr_assert_eq(status[b][r], 0);
                cr_assert_eq(memcmp(buf[b][r], want[b], COUNT * sizeof(float)), 0, "%u ranks: block %u rank %u", n, b,
                             r);
            }
            free_bufs(in[b], n);
            free_bufs(buf[b], n);
            free(want[b]);
        }
        g_vt->destroy(c);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Epochs                                                                                      */

static void read_epochs(memra_collective *c, uint32_t rank, uint64_t *out, uint32_t n_blocks) {
    memra_error err = {0};
    cr_assert_eq(g_vt->epochs(c, rank, out, n_blocks, &err), MEMRA_OK, "%s", err.msg);
}

Test(collective_local, epochs_advance_once_per_call_per_rank) {
    enum { LAYERS = 3, BLOCKS = 2 * LAYERS, STEPS = 5, COUNT = 16 };
    for (size_t t = 0; t < N_RANKS_CASES; t++) {
        uint32_t n = RANKS[t];
        memra_collective *c = make(n);
        float **buf = alloc_bufs(n, COUNT);
        uint64_t before[MEMRA_MAX_RANKS][BLOCKS] = {{0}};
        for (uint32_t r = 0; r < n; r++) {
            read_epochs(c, r, before[r], BLOCKS);
            for (uint32_t b = 0; b < BLOCKS; b++)
                cr_assert_eq(before[r][b], 0);
        }
        for (uint32_t s = 0; s < STEPS; s++) {
            int32_t pos[MEMRA_MAX_RANKS], status[MEMRA_MAX_RANKS];
            for (uint32_t r = 0; r < n; r++)
                pos[r] = (int32_t)s;
            for (uint32_t b = 0; b < BLOCKS; b++) {
                fill(buf, n, COUNT, s * 100u + b);
                op_serial(c, n, b, buf, COUNT, pos, status, NULL);
            }
            for (uint32_t r = 0; r < n; r++) {
                uint64_t now[BLOCKS];
                read_epochs(c, r, now, BLOCKS);
                for (uint32_t b = 0; b < BLOCKS; b++) {
                    cr_assert_eq(now[b], before[r][b] + 1, "%u ranks: step %u rank %u block %u: %llu after %llu", n, s,
                                 r, b, (unsigned long long)now[b], (unsigned long long)before[r][b]);
                    before[r][b] = now[b];
                }
            }
        }
        /* A call counts for its own rank at once, before the operation completes. */
        memra_error err = {0};
        int32_t pos = 0, status = 0;
        cr_assert_eq(g_vt->all_reduce_sum_f32(c, 0, buf[0], COUNT, NULL, 1, &pos, &status, &err), MEMRA_OK);
        uint64_t e0[BLOCKS], e_last[BLOCKS];
        read_epochs(c, 0, e0, BLOCKS);
        read_epochs(c, n - 1, e_last, BLOCKS);
        cr_assert_eq(e0[1], STEPS + 1);
        cr_assert_eq(e_last[1], n == 1 ? STEPS + 1 : STEPS);
        /* Out of range. */
        cr_assert_eq(g_vt->epochs(c, n, e0, BLOCKS, &err), MEMRA_E_RANGE);
        free_bufs(buf, n);
        g_vt->destroy(c);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Refusals                                                                                    */

Test(collective_local, refusal_fires_once_for_every_rank) {
    enum { BLOCKS = 4, COUNT = 33, WORD = 0x5EF };
    for (size_t t = 0; t < N_RANKS_CASES; t++) {
        uint32_t n = RANKS[t];
        for (uint32_t refuser = 0; refuser < n; refuser++) {
            memra_collective *c = make(n);
            memra_error err = {0};
            const uint32_t cell_block = 2, cell_pos = 5;
            cr_assert_eq(g_vt->arm_refusal(c, refuser, cell_block, cell_pos, WORD, &err), MEMRA_OK, "%s", err.msg);
            float **buf = alloc_bufs(n, COUNT);
            float *want = calloc(COUNT, sizeof *want);
            uint64_t before[BLOCKS], after[BLOCKS];
            for (uint32_t p = 3; p <= 6; p++) {
                for (uint32_t round = 0; round < (p == cell_pos ? 2u : 1u); round++) {
                    int32_t pos[MEMRA_MAX_RANKS], status[MEMRA_MAX_RANKS];
                    for (uint32_t r = 0; r < n; r++)
                        pos[r] = (int32_t)p;
                    for (uint32_t b = 0; b < BLOCKS; b++) {
                        read_epochs(c, refuser, before, BLOCKS);
                        fill(buf, n, COUNT, p * 31u + b);
                        sum_rank_order(buf, n, COUNT, want);
                        op_serial(c, n, b, buf, COUNT, pos, status, NULL);
                        bool fires = b == cell_block && p == cell_pos && round == 0;
                        for (uint32_t r = 0; r < n; r++) {
                            cr_assert_eq(status[r], fires ? WORD : 0,
                                         "%u ranks, refuser %u: block %u position %u round %u: rank %u status %d", n,
                                         refuser, b, p, round, r, status[r]);
                            /* Documented: a refused operation's buffers are summed all the same. */
                            cr_assert_eq(memcmp(buf[r], want, COUNT * sizeof *want), 0);
                        }
                        read_epochs(c, refuser, after, BLOCKS);
                        cr_assert_eq(after[b], before[b] + 1, "the refusing rank's call counts");
                    }
                }
            }
            free(want);
            free_bufs(buf, n);
            g_vt->destroy(c);
        }
    }
}

/* The position that counts is the one the refusing rank passes. */
Test(collective_local, refusal_reads_the_refusing_ranks_position) {
    enum { COUNT = 8, WORD = 9 };
    const uint32_t n = 3, refuser = 1;
    memra_collective *c = make(n);
    memra_error err = {0};
    float **buf = alloc_bufs(n, COUNT);
    cr_assert_eq(g_vt->arm_refusal(c, refuser, 0, 10, WORD, &err), MEMRA_OK, "%s", err.msg);
    int32_t status[3];
    int32_t others_have_it[3] = {10, 11, 10}; /* only the refuser's position differs: no refusal */
    op_serial(c, n, 0, buf, COUNT, others_have_it, status, NULL);
    for (uint32_t r = 0; r < n; r++)
        cr_assert_eq(status[r], 0);
    int32_t refuser_has_it[3] = {4, 10, 4};
    op_serial(c, n, 0, buf, COUNT, refuser_has_it, status, NULL);
    for (uint32_t r = 0; r < n; r++)
        cr_assert_eq(status[r], WORD);
    /* NULL positions never match. */
    cr_assert_eq(g_vt->arm_refusal(c, 0, 0, 0, WORD, &err), MEMRA_OK);
    for (uint32_t r = 0; r < n; r++) {
        cr_assert_eq(g_vt->all_reduce_sum_f32(c, r, buf[r], COUNT, NULL, 0, NULL, &status[r], &err), MEMRA_OK, "%s",
                     err.msg);
    }
    for (uint32_t r = 0; r < n; r++)
        cr_assert_eq(status[r], 0);
    free_bufs(buf, n);
    g_vt->destroy(c);
}

Test(collective_local, several_refusals_armed_at_once) {
    enum { COUNT = 4 };
    const uint32_t n = 4;
    memra_collective *c = make(n);
    memra_error err = {0};
    float **buf = alloc_bufs(n, COUNT);
    cr_assert_eq(g_vt->arm_refusal(c, 3, 1, 2, 31, &err), MEMRA_OK);
    cr_assert_eq(g_vt->arm_refusal(c, 2, 4, 2, 24, &err), MEMRA_OK);
    cr_assert_eq(g_vt->arm_refusal(c, 0, 4, 7, 47, &err), MEMRA_OK);
    /* Two cells of one operation: both fire, every rank reads the lowest refusing rank's word. */
    cr_assert_eq(g_vt->arm_refusal(c, 3, 5, 2, 35, &err), MEMRA_OK);
    cr_assert_eq(g_vt->arm_refusal(c, 1, 5, 2, 15, &err), MEMRA_OK);
    /* Arming a cell again replaces its word. */
    cr_assert_eq(g_vt->arm_refusal(c, 1, 5, 2, 16, &err), MEMRA_OK);
    for (uint32_t round = 0; round < 2; round++) {
        for (int32_t p = 2; p <= 7; p += 5) {
            int32_t pos[4] = {p, p, p, p}, status[4];
            for (uint32_t b = 0; b < 6; b++) {
                op_serial(c, n, b, buf, COUNT, pos, status, NULL);
                int32_t want = 0;
                if (round == 0 && p == 2 && b == 1)
                    want = 31;
                if (round == 0 && p == 2 && b == 4)
                    want = 24;
                if (round == 0 && p == 7 && b == 4)
                    want = 47;
                if (round == 0 && p == 2 && b == 5)
                    want = 16;
                for (uint32_t r = 0; r < n; r++)
                    cr_assert_eq(status[r], want, "round %u position %d block %u rank %u: %d, expected %d", round, p, b,
                                 r, status[r], want);
            }
        }
    }
    free_bufs(buf, n);
    g_vt->destroy(c);
}

Test(collective_local, refusal_words_and_ranks_checked) {
    memra_collective *c = make(2);
    memra_error err = {0};
    cr_assert_eq(g_vt->arm_refusal(c, 0, 0, 0, 0, &err), MEMRA_E_INVALID);
    cr_assert_eq(g_vt->arm_refusal(c, 0, 0, 0, MEMRA_COLLECTIVE_PENDING, &err), MEMRA_E_INVALID);
    cr_assert_eq(g_vt->arm_refusal(c, 0, 0, 0, MEMRA_COLLECTIVE_FAILED, &err), MEMRA_E_INVALID);
    cr_assert_eq(g_vt->arm_refusal(c, 2, 0, 0, 1, &err), MEMRA_E_RANGE);
    cr_assert(strstr(err.msg, "rank 2") != NULL, "%s", err.msg);
    cr_assert_eq(g_vt->arm_refusal(c, 1, 0, 0, -5, &err), MEMRA_OK, "%s", err.msg);
    g_vt->destroy(c); /* with a cell still armed */
}

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                      */

Test(collective_local, mismatched_counts_fail_every_rank) {
    enum { COUNT = 12 };
    for (size_t t = 1; t < N_RANKS_CASES; t++) {
        uint32_t n = RANKS[t];
        memra_collective *c = make(n);
        float **buf = alloc_bufs(n, COUNT), **in = alloc_bufs(n, COUNT);
        fill(in, n, COUNT, 5);
        for (uint32_t r = 0; r < n; r++)
            memcpy(buf[r], in[r], COUNT * sizeof(float));
        memra_error err = {0};
        int32_t pos[MEMRA_MAX_RANKS] = {0}, status[MEMRA_MAX_RANKS] = {0};
        uint32_t odd = n - 1;
        for (uint32_t r = 0; r < n; r++) {
            memra_status st = g_vt->all_reduce_sum_f32(c, r, buf[r], r == odd ? COUNT - 1 : COUNT, NULL, 5, &pos[r],
                                                       &status[r], &err);
            cr_assert_eq(st, r + 1 == n ? MEMRA_E_INVALID : MEMRA_OK, "%u ranks: rank %u: %s", n, r, err.msg);
        }
        char want[64];
        snprintf(want, sizeof want, "rank %u", odd);
        cr_assert(strstr(err.msg, "block 5") != NULL && strstr(err.msg, want) != NULL && strstr(err.msg, "rank 0"),
                  "%s", err.msg);
        for (uint32_t r = 0; r < n; r++) {
            cr_assert_eq(status[r], MEMRA_COLLECTIVE_FAILED, "%u ranks: rank %u status %d", n, r, status[r]);
            cr_assert_eq(memcmp(buf[r], in[r], COUNT * sizeof(float)), 0, "documented: buffers untouched");
        }
        /* The block works again afterwards. */
        float *want_sum = calloc(COUNT, sizeof *want_sum);
        sum_rank_order(in, n, COUNT, want_sum);
        op_serial(c, n, 5, buf, COUNT, pos, status, NULL);
        for (uint32_t r = 0; r < n; r++) {
            cr_assert_eq(status[r], 0);
            cr_assert_eq(memcmp(buf[r], want_sum, COUNT * sizeof(float)), 0);
        }
        free(want_sum);
        free_bufs(in, n);
        free_bufs(buf, n);
        g_vt->destroy(c);
    }
}

Test(collective_local, abort_fails_later_calls) {
    enum { COUNT = 3 };
    const uint32_t n = 3;
    memra_collective *c = make(n);
    float **buf = alloc_bufs(n, COUNT);
    memra_error err = {0};
    int32_t pos[3] = {0}, status[3] = {0};
    cr_assert_eq(g_vt->arm_refusal(c, 0, 0, 0, 3, &err), MEMRA_OK);
    /* One operation half done when the abort comes: its statuses stay nonzero. */
    cr_assert_eq(g_vt->all_reduce_sum_f32(c, 0, buf[0], COUNT, NULL, 0, &pos[0], &status[0], &err), MEMRA_OK);
    g_vt->abort(c);
    cr_assert_eq(status[0], MEMRA_COLLECTIVE_PENDING);
    for (uint32_t r = 1; r < n; r++) {
        cr_assert_eq(g_vt->all_reduce_sum_f32(c, r, buf[r], COUNT, NULL, 0, &pos[r], &status[r], &err),
                     MEMRA_E_REFUSED);
        cr_assert(strstr(err.msg, "aborted") != NULL, "%s", err.msg);
    }
    cr_assert_eq(g_vt->all_reduce_sum_f32(c, 0, buf[0], COUNT, NULL, 1, &pos[0], &status[0], &err), MEMRA_E_REFUSED);
    cr_assert_eq(g_vt->arm_refusal(c, 0, 0, 0, 3, &err), MEMRA_E_REFUSED);
    uint64_t e[2];
    read_epochs(c, 0, e, 2); /* still answers */
    cr_assert_eq(e[0], 1);
    cr_assert_eq(e[1], 0);
    g_vt->abort(c); /* twice is harmless */
    free_bufs(buf, n);
    g_vt->destroy(c);
}

Test(collective_local, bad_arguments) {
    memra_error err = {0};
    memra_collective *c = NULL;
    const memra_host *host = memra_registry_host(g_reg);
    cr_assert_eq(g_vt->create(host, 0, NULL, NULL, &c, &err), MEMRA_E_INVALID);
    cr_assert_null(c);
    cr_assert_eq(g_vt->create(host, MEMRA_MAX_RANKS + 1, NULL, NULL, &c, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "9 ranks") != NULL, "%s", err.msg);
    memra_options opts = {.n = 1};
    strcpy(opts.items[0].key, "order");
    strcpy(opts.items[0].value, "rank");
    cr_assert_eq(g_vt->create(host, 2, NULL, &opts, &c, &err), MEMRA_OK, "%s", err.msg);
    g_vt->destroy(c);
    c = NULL;
    strcpy(opts.items[0].value, "reverse");
    cr_assert_eq(g_vt->create(host, 2, NULL, &opts, &c, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "order=reverse") != NULL, "%s", err.msg);
    strcpy(opts.items[0].key, "threads");
    cr_assert_eq(g_vt->create(host, 2, NULL, &opts, &c, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "threads") != NULL, "%s", err.msg);
    cr_assert_null(c);

    c = make(2);
    float x = 1.0f;
    int32_t pos = 0, status = 0;
    int dummy_stream = 0;
    cr_assert_eq(g_vt->all_reduce_sum_f32(c, 2, &x, 1, NULL, 0, &pos, &status, &err), MEMRA_E_RANGE);
    cr_assert_eq(g_vt->all_reduce_sum_f32(c, 0, NULL, 1, NULL, 0, &pos, &status, &err), MEMRA_E_INVALID);
    cr_assert_eq(g_vt->all_reduce_sum_f32(c, 0, &x, 1, &dummy_stream, 0, &pos, &status, &err), MEMRA_E_UNSUPPORTED);
    uint64_t e[1];
    read_epochs(c, 0, e, 1);
    cr_assert_eq(e[0], 0, "refused calls do not count");
    g_vt->destroy(c);
    g_vt->destroy(NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* The registry and the ABI                                                                    */

Test(collective_local, registry_loads_it_by_name_and_kind) {
    memra_error err = {0};
    const memra_plugin *p = NULL;
    cr_assert_eq(memra_registry_load(g_reg, "local", MEMRA_PLUGIN_COLLECTIVE, &p, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_str_eq(p->name, "local");
    cr_assert_eq(p->kind, MEMRA_PLUGIN_COLLECTIVE);
    cr_assert_null(p->backend);
    const memra_collective_vtable *vt = p->collective;
    cr_assert_eq(vt->struct_size, sizeof(memra_collective_vtable));
    cr_assert(MEMRA_HAS_MEMBER(vt, memra_collective_vtable, create_rank));
    cr_assert_null(vt->bootstrap_id, "local works within one process");
    cr_assert_null(vt->create_rank);
    cr_assert_not_null(vt->epochs);
    cr_assert_not_null(vt->arm_refusal);
    cr_assert_not_null(vt->abort);
    /* Through the host table, as the cpu backend finds it. */
    const memra_plugin *q = NULL;
    cr_assert_eq(memra_registry_host(g_reg)->find_plugin("local", MEMRA_PLUGIN_COLLECTIVE, &q, &err), MEMRA_OK, "%s",
                 err.msg);
    cr_assert_eq(q, p);
    /* Negative control: not a backend. */
    cr_assert_neq(memra_registry_load(g_reg, "local", MEMRA_PLUGIN_BACKEND, &q, &err), MEMRA_OK);
}

Test(collective_local, older_vtable_shape_still_loads) {
    memra_error err = {0};
    const memra_plugin *p = NULL;
    cr_assert_eq(memra_registry_load(g_reg, "oldcoll", MEMRA_PLUGIN_COLLECTIVE, &p, &err), MEMRA_OK, "%s", err.msg);
    const memra_collective_vtable *vt = p->collective;
    cr_assert_eq(vt->struct_size, MEMRA_STRUCT_END(memra_collective_vtable, abort));
    cr_assert(MEMRA_HAS_MEMBER(vt, memra_collective_vtable, abort));
    cr_assert(!MEMRA_HAS_MEMBER(vt, memra_collective_vtable, bootstrap_id), "appended members read as absent");
    cr_assert(!MEMRA_HAS_MEMBER(vt, memra_collective_vtable, create_rank));
    memra_collective *c = NULL;
    cr_assert_eq(vt->create(memra_registry_host(g_reg), 2, NULL, NULL, &c, &err), MEMRA_OK);
    vt->destroy(c);
    /* Negative control: a vtable short of ABI 1's first shape is refused. */
    cr_assert_neq(memra_registry_load(g_reg, "tinycoll", MEMRA_PLUGIN_COLLECTIVE, &p, &err), MEMRA_OK);
    cr_assert(strstr(err.msg, "struct too small") != NULL, "%s", err.msg);
}
