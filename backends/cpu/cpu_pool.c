/* cpu_pool.c: persistent pthread workers, woken per task through a generation counter. */
#include <fenv.h>
#include <pthread.h>
#include <stdlib.h>

#include "cpu_pool.h"

typedef struct cpu_worker {
    cpu_pool *pool;
    uint32_t index;
    pthread_t thread;
} cpu_worker;

struct cpu_pool {
    uint32_t n_threads;
    uint64_t grain;
    cpu_worker *workers; /* n_threads - 1 */
    uint32_t n_started;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    uint64_t generation; /* bumped per task */
    uint32_t pending;    /* workers still on the current task */
    int stop;
    cpu_task_fn fn;
    void *ctx;
    uint32_t n_items;
};

static void run_share(cpu_pool *p, uint32_t index, cpu_task_fn fn, void *ctx, uint32_t n_items) {
    uint32_t begin = (uint32_t)((uint64_t)n_items * index / p->n_threads);
    uint32_t end = (uint32_t)((uint64_t)n_items * (index + 1) / p->n_threads);
    if (begin < end)
        fn(ctx, begin, end);
}

static void *worker_main(void *arg) {
    cpu_worker *w = arg;
    cpu_pool *p = w->pool;
    uint64_t seen = 0;
    fesetenv(FE_DFL_ENV); /* the environment every step computes in (cpu_step.c, cpu_step_begin) */
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop)
            break;
        seen = p->generation;
        cpu_task_fn fn = p->fn;
        void *ctx = p->ctx;
        uint32_t n_items = p->n_items;
        pthread_mutex_unlock(&p->lock);
        run_share(p, w->index, fn, ctx, n_items);
        pthread_mutex_lock(&p->lock);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

memra_status cpu_pool_new(uint32_t n_threads, uint64_t grain, cpu_pool **out, memra_error *err) {
    *out = NULL;
    if (n_threads == 0)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: threads must be at least 1");
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p)
        return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for the thread pool");
    p->n_threads = n_threads;
    p->grain = grain;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->workers = calloc(n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            cpu_pool_free(p);
            return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for %u workers", n_threads - 1);
        }
    }
    for (uint32_t i = 0; i + 1 < n_threads; i++) {
        cpu_worker *w = &p->workers[i];
        w->pool = p;
        w->index = i + 1; /* share 0 is the caller's */
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            cpu_pool_free(p);
            return memra_fail(err, MEMRA_E_NOMEM, "cpu: could not start worker thread %u of %u", i + 1, n_threads - 1);
        }
        p->n_started++;
    }
    *out = p;
    return MEMRA_OK;
}

void cpu_pool_free(cpu_pool *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (uint32_t i = 0; i < p->n_started; i++)
        pthread_join(p->workers[i].thread, NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    free(p->workers);
    free(p);
}

uint32_t cpu_pool_threads(const cpu_pool *p) { return p->n_threads; }

void cpu_pool_run(cpu_pool *p, uint32_t n_items, uint64_t cost, cpu_task_fn fn, void *ctx) {
    if (n_items == 0)
        return;
    if (p->n_threads == 1 || n_items < 2 || (uint64_t)n_items * cost < p->grain) {
        fn(ctx, 0, n_items);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n_items;
    p->pending = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_share(p, 0, fn, ctx, n_items);
    pthread_mutex_lock(&p->lock);
    while (p->pending != 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}
