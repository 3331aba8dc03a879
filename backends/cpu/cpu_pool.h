/* cpu_pool.h: a persistent pool of worker threads for the cpu backend.
 *
 * cpu_pool_run splits items [0, n) into one contiguous range per thread. Which thread computes
 * an item never changes the result: every task writes each output element from exactly one
 * item, computed in a fixed order, so results are bit-identical for any thread count. */
#ifndef MEMRA_CPU_POOL_H
#define MEMRA_CPU_POOL_H

#include <stdint.h>

#include "memra/status.h"

typedef struct cpu_pool cpu_pool;

/* Computes items [begin, end) of a task. */
typedef void (*cpu_task_fn)(void *ctx, uint32_t begin, uint32_t end);

/* n_threads >= 1 counts the calling thread: n_threads - 1 workers are started. A task with less
 * than `grain` work in all (items x cost) runs on the calling thread alone; 0 splits every task. */
memra_status cpu_pool_new(uint32_t n_threads, uint64_t grain, cpu_pool **out, memra_error *err);
void cpu_pool_free(cpu_pool *p);
uint32_t cpu_pool_threads(const cpu_pool *p);

/* Runs fn over [0, n_items) and returns when every item is done. `cost` is a rough amount of
 * work per item (e.g. multiply-adds); tasks below the grain run on the calling thread alone,
 * where waking workers would cost more than it saves. Calls must not overlap. */
void cpu_pool_run(cpu_pool *p, uint32_t n_items, uint64_t cost, cpu_task_fn fn, void *ctx);

#endif
