/* cuda_ext.cu: the `cuda` backend's extension entry points: "memra.bench" (device name, the
 * bandwidth ceiling measured) and the accessors "memra.cuda.graph" needs (abort hook, stream and
 * device of a state). */
#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_ext.h"
#include "cuda_kernels.h"
#include "cuda_backend.h"
#include "memra/ext.h"
#include "memra/gguf.h"
#include "memra/model.h"
#include "memra/numeric.h"
#include "memra/options.h"
#include "memra/plugin.h"
#include "memra/status.h"

/* ---- extensions ------------------------------------------------------------------------------ */

memra_status mc_device_name(memra_backend *b, char *buf, size_t size, memra_error *err) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, b->plan.stages[0].device);
    if (e != cudaSuccess)
        return mc_cuda_fail(err, e, "cudaGetDeviceProperties");
    snprintf(buf, size, "%s", p.name);
    return MEMRA_OK;
}

/* A 1 GiB device-to-device copy, 10 times after a warm-up, timed with events; read plus write
 * bytes over the time. */
memra_status mc_measure_ceiling(memra_backend *b, double *bytes_per_s, char *how, size_t how_size, memra_error *err) {
    memra_status st = MEMRA_OK;
    const size_t n = (size_t)1 << 30;
    const int reps = 10;
    void *a = NULL, *c = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms = 0;
    MC_TRY(cudaSetDevice(b->plan.stages[0].device), "cudaSetDevice");
    MC_TRY(cudaMalloc(&a, n), "cudaMalloc (ceiling buffers)");
    MC_TRY(cudaMalloc(&c, n), "cudaMalloc (ceiling buffers)");
    MC_TRY(cudaMemset(a, 1, n), "cudaMemset");
    MC_TRY(cudaEventCreate(&e0), "cudaEventCreate");
    MC_TRY(cudaEventCreate(&e1), "cudaEventCreate");
    MC_TRY(cudaMemcpy(c, a, n, cudaMemcpyDeviceToDevice), "cudaMemcpy (warm-up)");
    MC_TRY(cudaEventRecord(e0, 0), "cudaEventRecord");
    for (int i = 0; i < reps; i++)
        MC_TRY(cudaMemcpyAsync(i & 1 ? a : c, i & 1 ? c : a, n, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync");
    MC_TRY(cudaEventRecord(e1, 0), "cudaEventRecord");
    MC_TRY(cudaEventSynchronize(e1), "cudaEventSynchronize");
    MC_TRY(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    *bytes_per_s = 2.0 * n * reps / (ms / 1e3);
    if (how)
        snprintf(how, how_size,
                 "cudaMemcpy device-to-device of 1 GiB x %d after a warm-up, read+write bytes / "
                 "event time",
                 reps);
fail:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(c);
    return st;
}

void mc_on_abort(memra_backend *b, memra_state *s, void (*fn)(void *arg), void *arg) {
    (void)b;
    s->on_abort = fn;
    s->on_abort_arg = arg;
}
void *mc_ext_stream(memra_backend *b, memra_state *s) { return (void *)s->st[0][0].stream; }
int32_t mc_ext_device(memra_backend *b, memra_state *s) { return s->st[0][0].device; }
