/* nccl_internal.h: what the files of the `nccl` collective share (internal): its options, the
 * handle (struct memra_collective) and its ranks, and the functions one file calls in another:
 * nccl_lib.c (helpers, options, opening libnccl and its version check), nccl_comm.c (communicator
 * lifecycle and the bounded waits), nccl.c (the operation, epochs, refusal cells, the plugin). */
#ifndef MEMRA_NCCL_INTERNAL_H
#define MEMRA_NCCL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* nccl_lib.c */
double now_ms(void);
void pause_briefly(double waited_ms);
memra_status cuda_fail(memra_error *err, const char *what, cudaError_t e);
const char *nccl_text(const memra_collective *c, ncclResult_t r);
memra_status parse_options(const memra_options *opts, nccl_cfg *cfg, memra_error *err);
memra_status lib_open(const char *path, void **lib_out, nccl_api *api, memra_error *err);

/* nccl_comm.c */
void abort_comms(memra_collective *c);
memra_status wait_comms(memra_collective *c, double start, const char *what, memra_error *err);
memra_status grow(memra_collective *c, nccl_rank *nr, float **p, size_t *cap, size_t need, const char *what,
                  memra_error *err);
void nccl_destroy(memra_collective *c);
memra_status nccl_create(const memra_host *host, uint32_t n_ranks, const int32_t *devices, const memra_options *opts,
                         memra_collective **out, memra_error *err);
memra_status nccl_bootstrap_id(const memra_host *host, uint8_t *id, size_t id_size, memra_error *err);
memra_status nccl_create_rank(const memra_host *host, const memra_collective_bootstrap *boot, const memra_options *opts,
                              memra_collective **out, memra_error *err);

#endif
