/* bench_collective_cuda.h: the CUDA runtime as `memra bench-collective` uses it, opened at run
 * time (dlopen) so that the memra command links no CUDA library and builds without CUDA: a
 * machine without the runtime gets a clear "no CUDA runtime" error from this one command. The
 * few types are declared here as the runtime's ABI has them (opaque handles, int error codes). */
#ifndef MEMRA_TOOLS_BENCH_COLLECTIVE_CUDA_H
#define MEMRA_TOOLS_BENCH_COLLECTIVE_CUDA_H

#include <stdbool.h>
#include <stddef.h>

typedef int bc_cuda_err; /* cudaError_t: 0 success */
typedef struct bc_stream_st *bc_stream;
typedef struct bc_event_st *bc_event;
typedef struct bc_graph_st *bc_graph;
typedef struct bc_graph_exec_st *bc_graph_exec;

#define BC_CUDA_SUCCESS 0
#define BC_CUDA_NOT_READY 600
#define BC_MEMCPY_H2D 1
#define BC_MEMCPY_D2H 2
#define BC_STREAM_NON_BLOCKING 1u
#define BC_CAPTURE_THREAD_LOCAL 1

typedef struct bc_cuda {
    void *lib;
    char path[256]; /* the file opened */
    bc_cuda_err (*GetDeviceCount)(int *n);
    bc_cuda_err (*SetDevice)(int device);
    const char *(*GetErrorString)(bc_cuda_err e);
    bc_cuda_err (*RuntimeGetVersion)(int *v);
    bc_cuda_err (*Malloc)(void **p, size_t n);
    bc_cuda_err (*Free)(void *p);
    bc_cuda_err (*Memcpy)(void *dst, const void *src, size_t n, int kind);
    bc_cuda_err (*Memset)(void *p, int v, size_t n);
    bc_cuda_err (*StreamCreateWithFlags)(bc_stream *s, unsigned flags);
    bc_cuda_err (*StreamDestroy)(bc_stream s);
    bc_cuda_err (*StreamQuery)(bc_stream s);
    bc_cuda_err (*StreamWaitEvent)(bc_stream s, bc_event e, unsigned flags);
    bc_cuda_err (*StreamBeginCapture)(bc_stream s, int mode);
    bc_cuda_err (*StreamEndCapture)(bc_stream s, bc_graph *g);
    bc_cuda_err (*EventCreateWithFlags)(bc_event *e, unsigned flags);
    bc_cuda_err (*EventDestroy)(bc_event e);
    bc_cuda_err (*EventRecord)(bc_event e, bc_stream s);
    bc_cuda_err (*EventElapsedTime)(float *ms, bc_event a, bc_event b);
    bc_cuda_err (*GraphInstantiateWithFlags)(bc_graph_exec *x, bc_graph g, unsigned long long flags);
    bc_cuda_err (*GraphLaunch)(bc_graph_exec x, bc_stream s);
    bc_cuda_err (*GraphExecDestroy)(bc_graph_exec x);
    bc_cuda_err (*GraphDestroy)(bc_graph g);
} bc_cuda;

/* Opens the runtime (the one memra's CUDA plugins were built against first, then the usual
 * names) and looks up the functions. false with a message in why (naming the files tried and
 * dlerror) when there is none or a function is missing. */
bool bc_cuda_open(bc_cuda *cu, char *why, size_t why_size);
void bc_cuda_close(bc_cuda *cu);
/* Whether this memra was built with CUDA (its GPU collectives built beside it). */
bool bc_cuda_built(void);
/* The runtime's text for e ("unknown error" when it has none). */
const char *bc_cuda_text(const bc_cuda *cu, bc_cuda_err e);

#endif
