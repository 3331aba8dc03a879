/* fakenccl_graph_check.c: the nccl collective with the stand-in library that models issue 24's
 * first fault (fakenccl_graph.c: an operation captured into a graph holds its communicator until
 * the graph is destroyed; finalize waits for that, and abort blocks). A plain program for a GPU
 * (ctest label gpu): fakenccl_graph_check PLUGIN_DIR FAKE_LIBRARY. Exit 0 pass, 1 a check failed,
 * 77 skipped (no GPU). One rank on device 0 (the stand-in reduces one rank):
 *   the order cuda-graph keeps: an all-reduce captured and replayed, the graph destroyed, then
 *     the communicator: nothing blocks, and destroy takes well under the finalize bound;
 *   the order it had (the state, and with it the communicator, freed before the graph): the
 *     model must show the fault: finalize waits out timeout_ms and the abort blocks (the stand-in
 *     gives up after 3 s where NCCL never would). This is the negative control of the model.
 *   ncclGroupEnd failing with the rank's part enqueued (the stand-in leaves it waiting for a
 *     peer until an abort): the collective aborts the communicator at once, so the stream drains
 *     within 2 s (before issue 24.7 it waited for the caller's watchdog), the status reads FAILED
 *     and the next call is refused.
 * (cuda-graph itself cannot run the nccl collective on one GPU: two ranks on one device are
 * refused; with two GPUs, cuda-graph:tp=2,collective=nccl:library=FAKE is the same check
 * through the backend, once the stand-in reduces two ranks.) */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "check_program.h"
#include "memra/plugin.h"
#include "memra/registry.h"

static int failures;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct run {
    const memra_collective_vtable *vt;
    memra_registry *reg;
    const char *fake;
    atomic_int *live, *blocked, *captured;
} run;

/* Creates a communicator, captures one all-reduce into a graph and replays it twice. */
static memra_collective *capture(const run *r, cudaStream_t s, float *buf, int32_t *status, cudaGraph_t *g,
                                 cudaGraphExec_t *x) {
    memra_options o;
    memset(&o, 0, sizeof o);
    snprintf(o.items[0].key, sizeof o.items[0].key, "library");
    snprintf(o.items[0].value, sizeof o.items[0].value, "%s", r->fake);
    snprintf(o.items[1].key, sizeof o.items[1].key, "timeout_ms");
    snprintf(o.items[1].value, sizeof o.items[1].value, "500");
    snprintf(o.items[2].key, sizeof o.items[2].key, "prealloc_count");
    snprintf(o.items[2].value, sizeof o.items[2].value, "1024");
    o.n = 3;
    memra_error err = {0};
    memra_collective *c = NULL;
    int32_t dev0 = 0;
    if (r->vt->create(memra_registry_host(r->reg), 1, &dev0, &o, &c, &err) != MEMRA_OK) {
        CHECK(0, "create with the stand-in: %s", err.msg);
        return NULL;
    }
    const int before = atomic_load(r->captured);
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    memra_status st = r->vt->all_reduce_sum_f32(c, 0, buf, 1024, s, 0, NULL, status, &err);
    CHECK_CUDA(cudaStreamEndCapture(s, g));
    CHECK(st == MEMRA_OK, "captured all-reduce: %s", err.msg);
    CHECK(atomic_load(r->captured) == before + 1, "the stand-in saw no captured operation");
    CHECK_CUDA(cudaGraphInstantiate(x, *g, 0));
    CHECK_CUDA(cudaGraphLaunch(*x, s));
    CHECK_CUDA(cudaGraphLaunch(*x, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    int32_t w = -1;
    CHECK_CUDA(cudaMemcpy(&w, status, sizeof w, cudaMemcpyDeviceToHost));
    CHECK(w == 0, "status after the replays: %d", w);
    CHECK(atomic_load(r->live) == 1, "references held after capture: %d (want 1)", atomic_load(r->live));
    return c;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: fakenccl_graph_check PLUGIN_DIR FAKE_LIBRARY\n");
        return 2;
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    run r = {.fake = argv[2]};
    void *lib = dlopen(r.fake, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "FAIL: %s\n", dlerror());
        return 1;
    }
    r.live = dlsym(lib, "fakenccl_live_refs");
    r.blocked = dlsym(lib, "fakenccl_abort_blocked");
    r.captured = dlsym(lib, "fakenccl_captured_ops");
    if (!r.live || !r.blocked || !r.captured) {
        fprintf(stderr, "FAIL: %s is not the graph stand-in\n", r.fake);
        return 1;
    }
    memra_error err = {0};
    const memra_plugin *p = NULL;
    const char *dir = argv[1];
    if (memra_registry_open_dirs(&dir, 1, &r.reg, &err) != MEMRA_OK ||
        memra_registry_load(r.reg, "nccl", MEMRA_PLUGIN_COLLECTIVE, &p, &err) != MEMRA_OK) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return 1;
    }
    r.vt = p->collective;
    cudaStream_t s;
    float *buf;
    int32_t *status;
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK_CUDA(cudaMalloc((void **)&buf, 1024 * sizeof(float)));
    CHECK_CUDA(cudaMalloc((void **)&status, sizeof(int32_t)));
    CHECK_CUDA(cudaMemset(buf, 0, 1024 * sizeof(float)));

    printf("-- the graph first, then the communicator (the order cuda-graph keeps)\n");
    cudaGraph_t g;
    cudaGraphExec_t x;
    memra_collective *c = capture(&r, s, buf, status, &g, &x);
    if (c) {
        CHECK_CUDA(cudaGraphExecDestroy(x));
        CHECK_CUDA(cudaGraphDestroy(g));
        CHECK_CUDA(cudaDeviceSynchronize());
        for (double t0 = now_s(); atomic_load(r.live) > 0 && now_s() - t0 < 2.0;) /* destructors run asynchronously */
            ;
        CHECK(atomic_load(r.live) == 0, "the graph's reference outlived it: %d", atomic_load(r.live));
        const int blocked = atomic_load(r.blocked);
        const double t0 = now_s();
        r.vt->destroy(c);
        const double dt = now_s() - t0;
        printf("   destroy took %.3f s, aborts that blocked: %d\n", dt, atomic_load(r.blocked) - blocked);
        CHECK(dt < 0.25, "destroy took %.3f s (finalize waited)", dt);
        CHECK(atomic_load(r.blocked) == blocked, "an abort blocked");
    }

    printf("-- the communicator while the graph lives (the order cuda-graph had): the model must block\n");
    c = capture(&r, s, buf, status, &g, &x);
    if (c) {
        const int blocked = atomic_load(r.blocked);
        const double t0 = now_s();
        r.vt->destroy(c);
        const double dt = now_s() - t0;
        printf("   destroy took %.3f s, aborts that blocked: %d\n", dt, atomic_load(r.blocked) - blocked);
        CHECK(dt >= 0.45, "destroy took only %.3f s: finalize did not wait for the graph's reference", dt);
        CHECK(atomic_load(r.blocked) == blocked + 1, "the abort did not block on the graph's reference");
        CHECK_CUDA(cudaGraphExecDestroy(x));
        CHECK_CUDA(cudaGraphDestroy(g));
        CHECK_CUDA(cudaDeviceSynchronize());
    }

    printf("-- ncclGroupEnd fails with a part enqueued (issue 24.7): the communicator aborted at once\n");
    {
        atomic_int *fail_ge = dlsym(lib, "fakenccl_fail_group_end"), *expired = dlsym(lib, "fakenccl_wait_expired");
        CHECK(fail_ge && expired, "the stand-in cannot fail ncclGroupEnd");
        memra_options o;
        memset(&o, 0, sizeof o);
        snprintf(o.items[0].key, sizeof o.items[0].key, "library");
        snprintf(o.items[0].value, sizeof o.items[0].value, "%s", r.fake);
        snprintf(o.items[1].key, sizeof o.items[1].key, "prealloc_count");
        snprintf(o.items[1].value, sizeof o.items[1].value, "1024");
        o.n = 2;
        int32_t dev0 = 0;
        c = NULL;
        if (fail_ge && expired && r.vt->create(memra_registry_host(r.reg), 1, &dev0, &o, &c, &err) != MEMRA_OK)
            CHECK(0, "create with the stand-in: %s", err.msg);
        if (c) {
            const int exp0 = atomic_load(expired);
            atomic_store(fail_ge, 1);
            memra_status st = r.vt->all_reduce_sum_f32(c, 0, buf, 1024, s, 0, NULL, status, &err);
            CHECK(st == MEMRA_E_DEVICE, "the failed group's call returned %d, expected MEMRA_E_DEVICE (%s)", (int)st,
                  err.msg);
            /* the enqueued part holds the stream until an abort; the stand-in gives up after 5 s */
            const double t0 = now_s();
            cudaError_t q;
            while ((q = cudaStreamQuery(s)) == cudaErrorNotReady && now_s() - t0 < 2.0)
                ;
            const double dt = now_s() - t0;
            printf("   the rank's stream drained after %.3f s\n", dt);
            CHECK(q == cudaSuccess, "the rank's stream still waits after %.3f s: the communicator was not aborted", dt);
            CHECK_CUDA(cudaStreamSynchronize(s));
            int32_t w = -1;
            CHECK_CUDA(cudaMemcpy(&w, status, sizeof w, cudaMemcpyDeviceToHost));
            CHECK(w == MEMRA_COLLECTIVE_FAILED, "the failed operation's status: %d (expected FAILED)", w);
            st = r.vt->all_reduce_sum_f32(c, 0, buf, 1024, s, 0, NULL, status, &err);
            CHECK(st == MEMRA_E_REFUSED, "a call after the failed group returned %d, expected MEMRA_E_REFUSED",
                  (int)st);
            CHECK(atomic_load(expired) == exp0, "a part waited out the stand-in's bound");
            CHECK_CUDA(cudaStreamSynchronize(s));
            r.vt->destroy(c);
        }
    }
    memra_registry_close(r.reg);
    printf("%s: %d check(s) failed\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
