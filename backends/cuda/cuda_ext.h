/* cuda_ext.h: "memra.cuda.graph" version 1, the table the cuda backend offers through its
 * vtable's `extension`, on which the cuda-graph plugin builds (same kernels, same weights, same
 * states: cuda-graph only decides how a step's body reaches the GPU).
 *
 * A step is split in three: prepare (host checks; the input token into device memory, on stage
 * 0's stream), body (forward through every stage, commit, head, sample: no host sync and no
 * host-side branch on position, so it can be captured once and replayed at any position), and
 * finish (readbacks, the step's completion event, host-side mirrors advanced). */
#ifndef MEMRA_CUDA_EXT_H
#define MEMRA_CUDA_EXT_H

#include <stdbool.h>
#include <stdint.h>

#include "memra/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEMRA_EXT_CUDA_GRAPH "memra.cuda.graph"

/* The cuda backend's arm options; cuda-graph takes the same (it opens the cuda backend with its
 * arm's options). pdl=0 is the baseline that shows what programmatic launch buys: a gate of
 * `cuda:pdl=0` against `cuda` (or `cuda-graph`) compares the same kernels, the same bits. */
#define MEMRA_CUDA_OPTION_SPECS                                                                                        \
    {"pdl", "1",                                                                                                       \
     "programmatic dependent launch: 1 lets each kernel start while the one before it drains (its first "            \
     "weight loads overlap); 0 launches in plain stream order. The bits do not depend on it"}

typedef struct memra_cuda_graph_ext_v1 {
    uint32_t struct_size;
    /* Checks the state (quarantine, capacity, steps in flight) and the token, and enqueues the
     * input token's transfer to device memory on stage 0's stream. */
    memra_status (*prepare)(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err);
    /* Enqueues the body. capture: the streams of the stages fork from and join back into stage
     * 0's stream, and no cross-step event waits are enqueued (a graph launch orders itself). */
    memra_status (*body)(memra_backend *b, memra_state *s, const memra_sample_cfg *sample, bool capture,
                         memra_error *err);
    /* Enqueues the readbacks and the completion event (after the body or the graph launch) and
     * advances the host mirrors. after_graph: everything was launched on stage 0's stream. */
    memra_status (*finish)(memra_backend *b, memra_state *s, const memra_step_args *args, bool after_graph,
                           memra_error *err);
    /* Stage 0's stream (a cudaStream_t) and device. */
    void *(*stream)(memra_backend *b, memra_state *s);
    int32_t (*device)(memra_backend *b, memra_state *s);
    /* Marks the state failed (every later step or restore on it fails). */
    void (*quarantine)(memra_backend *b, memra_state *s, const char *why);
    /* The kernel family of a kernel node's function ("gemv", "attention", ...), NULL if not ours. */
    const char *(*kernel_family)(const void *func);
} memra_cuda_graph_ext_v1;

#ifdef __cplusplus
}
#endif
#endif
