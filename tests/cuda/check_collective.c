/* check_collective.c: a device collective (oneshot, nccl) driven directly through its vtable, on
 * the GPUs of this machine: exact sums bit for bit at several sizes, eagerly and replayed from a
 * CUDA graph (epochs advance on the device), refusal cells (once, every rank reads the word, the
 * buffers summed), and, for collectives that spin, an injected absent rank (a timeout naming it
 * within the bound, the communicator then broken, the process alive), an abort from the host
 * that ends a spinning rank, and an abort between a rank's launch and its kernel's start (every
 * rank reports ABORTED).
 *
 *   memra_cuda_check_collective [--collective NAME[:MODE]] [--ranks N] [--devices 0,0]
 *
 * Exit 0: every check passed; 1: a check failed; 3: could not run; 77: no CUDA device. Ranks
 * default to device r mod the device count (two ranks on one GPU for oneshot). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memra/options.h"
#include "check_program.h"
#include "memra/plugin.h"
#include "memra/registry.h"

#define MAXR MEMRA_MAX_RANKS

static int failures;
static const memra_collective_vtable *V;
static const memra_host *H;
static uint32_t N;
static int32_t devs[MAXR];
static cudaStream_t streams[MAXR];
static float *bufs[MAXR];
static int32_t *stat_d[MAXR], *pos_d[MAXR];

/* A host function on a stream that holds it until the check opens the gate (at most 10 s). */
static atomic_int gate_open;
static void CUDART_CB hold_gate(void *unused) {
    (void)unused;
    struct timespec nap = {0, 1000 * 1000};
    for (int k = 0; k < 10000 && !atomic_load(&gate_open); k++)
        nanosleep(&nap, NULL);
}

/* An exact input: small integers times 2^-4, distinct per rank and element. */
static float input(uint32_t r, size_t i) { return (float)((int)((i * 7 + r * 13) % 61) - 30) * 0.0625f; }

static void fill(size_t count) {
    float *h = malloc(count * sizeof *h);
    for (uint32_t r = 0; r < N; r++) {
        for (size_t i = 0; i < count; i++)
            h[i] = input(r, i);
        cudaSetDevice(devs[r]);
        cudaMemcpy(bufs[r], h, count * sizeof *h, cudaMemcpyHostToDevice);
    }
    free(h);
}

static void set_pos(int32_t p) {
    for (uint32_t r = 0; r < N; r++) {
        cudaSetDevice(devs[r]);
        cudaMemcpy(pos_d[r], &p, 4, cudaMemcpyHostToDevice);
    }
}

static memra_status op(memra_collective *c, size_t count, uint32_t block, uint32_t skip_rank, memra_error *err) {
    for (uint32_t r = 0; r < N; r++) {
        if (r == skip_rank)
            continue;
        cudaSetDevice(devs[r]);
        memra_status st = V->all_reduce_sum_f32(c, r, bufs[r], count, streams[r], block, pos_d[r], stat_d[r], err);
        if (st)
            return st;
    }
    return MEMRA_OK;
}

static void sync_all(void) {
    for (uint32_t r = 0; r < N; r++) {
        cudaSetDevice(devs[r]);
        cudaStreamSynchronize(streams[r]);
    }
}

static int32_t status_of(uint32_t r) {
    int32_t s = 0x7eadbeef;
    cudaSetDevice(devs[r]);
    cudaMemcpy(&s, stat_d[r], 4, cudaMemcpyDeviceToHost);
    return s;
}

/* Every rank's buffer against the rank-order sum times `scale` (exact); the number wrong. */
static size_t wrong(size_t count, float scale) {
    float *h = malloc(count * sizeof *h);
    size_t bad = 0;
    for (uint32_t r = 0; r < N; r++) {
        cudaSetDevice(devs[r]);
        cudaMemcpy(h, bufs[r], count * sizeof *h, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < count; i++) {
            float s = input(0, i);
            for (uint32_t k = 1; k < N; k++)
                s += input(k, i);
            s *= scale;
            if (memcmp(&s, &h[i], 4) != 0)
                bad++;
        }
    }
    free(h);
    return bad;
}

/* A graph of n ops of `block` on every rank (forked from and joined into rank 0's stream). */
static cudaGraphExec_t capture(memra_collective *c, int n, size_t count, uint32_t block, memra_error *err) {
    cudaEvent_t fork0, join[MAXR];
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    cudaSetDevice(devs[0]);
    cudaEventCreateWithFlags(&fork0, cudaEventDisableTiming);
    for (uint32_t r = 0; r < N; r++) {
        cudaSetDevice(devs[r]);
        cudaEventCreateWithFlags(&join[r], cudaEventDisableTiming);
    }
    cudaSetDevice(devs[0]);
    cudaError_t e = cudaStreamBeginCapture(streams[0], cudaStreamCaptureModeThreadLocal);
    cudaEventRecord(fork0, streams[0]);
    for (uint32_t r = 1; r < N; r++) {
        cudaSetDevice(devs[r]);
        cudaStreamWaitEvent(streams[r], fork0, 0);
    }
    memra_status st = MEMRA_OK;
    for (int k = 0; k < n && !st; k++)
        st = op(c, count, block, UINT32_MAX, err);
    for (uint32_t r = 1; r < N; r++) {
        cudaSetDevice(devs[r]);
        cudaEventRecord(join[r], streams[r]);
        cudaSetDevice(devs[0]);
        cudaStreamWaitEvent(streams[0], join[r], 0);
    }
    cudaSetDevice(devs[0]);
    cudaError_t e2 = cudaStreamEndCapture(streams[0], &g);
    if (e == cudaSuccess)
        e = e2;
    if (e == cudaSuccess && st == MEMRA_OK)
        e = cudaGraphInstantiate(&ge, g, 0);
    if (g)
        cudaGraphDestroy(g);
    if (e != cudaSuccess || st != MEMRA_OK) {
        if (e != cudaSuccess)
            snprintf(err->msg, sizeof err->msg, "%s", cudaGetErrorString(e));
        return NULL;
    }
    return ge;
}

static memra_collective *make(const memra_options *base, const char *timeout_ms) {
    memra_options o = *base;
    memra_error err = {0};
    if (timeout_ms)
        for (uint32_t i = 0; i < V->n_options; i++)
            if (strcmp(V->options[i].key, "timeout_ms") == 0)
                memra_options_set(&o, "timeout_ms", timeout_ms, &err);
    memra_collective *c = NULL;
    if (V->create(H, N, devs, &o, &c, &err) != MEMRA_OK) {
        printf("  create: %s\n", err.msg);
        return NULL;
    }
    return c;
}

int main(int argc, char **argv) {
    const char *coll = "oneshot", *dev_list = NULL;
    N = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--collective") && i + 1 < argc)
            coll = argv[++i];
        else if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
            N = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--devices") && i + 1 < argc)
            dev_list = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--collective NAME[:MODE]] [--ranks N] [--devices 0,1]\n", argv[0]);
            return 2;
        }
    }
    if (N < 1 || N > MAXR) {
        fprintf(stderr, "--ranks: 1 to %d\n", MAXR);
        return 2;
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev <= 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    for (uint32_t r = 0; r < N; r++)
        devs[r] = (int32_t)(r % (uint32_t)n_dev);
    if (dev_list) {
        const char *p = dev_list;
        for (uint32_t r = 0; r < N && *p; r++) {
            devs[r] = atoi(p);
            p = strchr(p, ',');
            if (!p)
                break;
            p++;
        }
    }
    char name[64];
    memra_options base = {0};
    memra_error err = {0};
    if (memra_collective_value_parse(coll, name, sizeof name, &base, &err) != MEMRA_OK) {
        fprintf(stderr, "--collective: %s\n", err.msg);
        return 2;
    }
    memra_registry *reg = NULL;
    const memra_plugin *p = NULL;
    if (memra_registry_open(&reg, &err) || memra_registry_load(reg, name, MEMRA_PLUGIN_COLLECTIVE, &p, &err)) {
        printf("could not load the collective '%s': %s\n", name, err.msg);
        return 3;
    }
    H = memra_registry_host(reg);
    V = p->collective;
    const bool spins = strcmp(name, "oneshot") == 0;
    printf("collective %s, %u ranks on devices", coll, N);
    for (uint32_t r = 0; r < N; r++)
        printf(" %d", devs[r]);
    printf("\n");
    const size_t max_count = (1u << 20) + 3;
    for (uint32_t r = 0; r < N; r++) {
        cudaSetDevice(devs[r]);
        if (cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking) != cudaSuccess ||
            cudaMalloc((void **)&bufs[r], max_count * 4) != cudaSuccess ||
            cudaMalloc((void **)&stat_d[r], 16) != cudaSuccess || cudaMalloc((void **)&pos_d[r], 16) != cudaSuccess) {
            printf("could not allocate on device %d\n", devs[r]);
            return 3;
        }
    }
    memra_collective *c = make(&base, NULL);
    if (!c)
        return 3;

    /* 1. Exact sums, eagerly, at several sizes. */
    const size_t sizes[] = {1, 7, 4096, 16384, 65536 + 3, max_count};
    uint64_t ops_at_3 = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        fill(sizes[k]);
        set_pos(0);
        memra_status st = op(c, sizes[k], 3, UINT32_MAX, &err);
        sync_all();
        CHECK(st == MEMRA_OK, "eager op of %zu floats: %s", sizes[k], err.msg);
        ops_at_3++;
        size_t bad = wrong(sizes[k], 1.0f);
        CHECK(bad == 0, "eager, %zu floats: %zu elements wrong", sizes[k], bad);
        for (uint32_t r = 0; r < N; r++)
            CHECK(status_of(r) == 0, "eager, %zu floats: rank %u status %d", sizes[k], r, status_of(r));
        printf("  eager %8zu floats: %zu wrong\n", sizes[k], bad);
    }

    /* 2. Graph capture: 3 ops in one graph, replayed 5 times: every op multiplies by N. */
    {
        const size_t count = 4096;
        fill(count);
        set_pos(1);
        cudaGraphExec_t ge = capture(c, 3, count, 4, &err);
        CHECK(ge != NULL, "capture: %s", err.msg);
        if (ge) {
            for (int rep = 0; rep < 5; rep++)
                cudaGraphLaunch(ge, streams[0]);
            cudaError_t e = cudaStreamSynchronize(streams[0]);
            CHECK(e == cudaSuccess, "replay: %s", cudaGetErrorString(e));
            const float scale = powf((float)N, 14.0f); /* 15 ops: the first sums, 14 multiply */
            size_t bad = wrong(count, scale);
            CHECK(bad == 0, "graph: 15 replayed ops: %zu elements wrong", bad);
            printf("  graph  %8zu floats, 3 ops x 5 replays: %zu wrong\n", count, bad);
            if (V->epochs) {
                uint64_t ep[8] = {0};
                for (uint32_t r = 0; r < N; r++) {
                    CHECK(V->epochs(c, r, ep, 8, &err) == MEMRA_OK, "epochs: %s", err.msg);
                    CHECK(ep[3] == ops_at_3 && ep[4] == 15 && ep[0] == 0,
                          "rank %u epochs: block 3 %llu (expected %llu), block 4 %llu (expected 15), block 0 %llu", r,
                          (unsigned long long)ep[3], (unsigned long long)ops_at_3, (unsigned long long)ep[4],
                          (unsigned long long)ep[0]);
                }
            }
            cudaGraphExecDestroy(ge);
        }
        /* 4. A cell armed after capture fires in the next replay, once. */
        if (V->arm_refusal && N > 1 && (ge = capture(c, 1, count, 8, &err)) != NULL) {
            const int32_t word = 0x6d650042;
            CHECK(V->arm_refusal(c, N - 1, 8, 1, word, &err) == MEMRA_OK, "arm: %s", err.msg);
            cudaGraphLaunch(ge, streams[0]);
            cudaStreamSynchronize(streams[0]);
            for (uint32_t r = 0; r < N; r++)
                CHECK(status_of(r) == word, "graph cell: rank %u's status %d, expected %d", r, status_of(r), word);
            cudaGraphLaunch(ge, streams[0]);
            cudaStreamSynchronize(streams[0]);
            for (uint32_t r = 0; r < N; r++)
                CHECK(status_of(r) == 0, "graph cell fired twice: rank %u's status %d", r, status_of(r));
            cudaGraphExecDestroy(ge);
            printf("  graph replay with a cell armed after capture: checked\n");
        }
    }

    /* 3. Refusal cells: every rank reads the word, once; the buffers are summed. */
    if (V->arm_refusal && N > 1) {
        const size_t count = 4096;
        const int32_t word = 0x6d650007;
        fill(count);
        set_pos(7);
        CHECK(V->arm_refusal(c, N - 1, 5, 7, word, &err) == MEMRA_OK, "arm_refusal: %s", err.msg);
        CHECK(V->arm_refusal(c, 0, 5, 7, 0, &err) == MEMRA_E_INVALID, "word 0 accepted");
        memra_status st = op(c, count, 5, UINT32_MAX, &err);
        sync_all();
        CHECK(st == MEMRA_OK, "refused op: %s", err.msg);
        for (uint32_t r = 0; r < N; r++)
            CHECK(status_of(r) == word, "refusal: rank %u status %d, expected %d", r, status_of(r), word);
        CHECK(wrong(count, 1.0f) == 0, "refusal: buffers not summed");
        fill(count);
        st = op(c, count, 5, UINT32_MAX, &err);
        sync_all();
        for (uint32_t r = 0; r < N; r++)
            CHECK(status_of(r) == 0, "refusal fired twice: rank %u status %d", r, status_of(r));
        if (V->clear_refusals && MEMRA_HAS_MEMBER(V, memra_collective_vtable, clear_refusals)) {
            CHECK(V->arm_refusal(c, 0, 6, 7, word, &err) == MEMRA_OK, "arm: %s", err.msg);
            CHECK(V->clear_refusals(c, &err) == MEMRA_OK, "clear: %s", err.msg);
            st = op(c, count, 6, UINT32_MAX, &err);
            sync_all();
            CHECK(status_of(0) == 0, "a cleared cell fired: status %d", status_of(0));
        }
        printf("  refusal cells: checked\n");
    }
    V->destroy(c);

    /* 5. An absent rank: its peers time out naming it, within the bound; then broken. */
    if (spins && N > 1) {
        memra_collective *f = make(&base, "200");
        if (f) {
            fill(4096);
            set_pos(3);
            CHECK(V->arm_refusal(f, 1, 9, 3, MEMRA_COLLECTIVE_ABSENT, &err) == MEMRA_OK, "arm absent: %s", err.msg);
            double t0 = check_now_s();
            op(f, 4096, 9, UINT32_MAX, &err);
            sync_all();
            double dt = check_now_s() - t0;
            CHECK(status_of(1) == MEMRA_COLLECTIVE_ABSENT, "absent rank's status %d", status_of(1));
            CHECK(status_of(0) == MEMRA_COLLECTIVE_TIMEOUT(1), "rank 0's status %d, expected TIMEOUT(1) = %d",
                  status_of(0), MEMRA_COLLECTIVE_TIMEOUT(1));
            CHECK(dt < 2.0, "the timeout took %.3f s (bound 0.2 s)", dt);
            t0 = check_now_s();
            op(f, 4096, 9, UINT32_MAX, &err);
            sync_all();
            double dt2 = check_now_s() - t0;
            for (uint32_t r = 0; r < N; r++)
                CHECK(status_of(r) == MEMRA_COLLECTIVE_FAILED, "after a timeout rank %u reads %d (expected FAILED)", r,
                      status_of(r));
            CHECK(dt2 < 0.1, "an operation on a broken communicator took %.3f s", dt2);
            printf("  absent rank: timeout after %.3f s, next op failed in %.4f s\n", dt, dt2);
            V->destroy(f);
        }
        /* 5b. Ranks that pass different counts (issue 24, item 6): grids of 1 and 8 blocks. Every
         * rank reads FAILED at once (before: the extra blocks waited out the timeout, TIMEOUT and a
         * broken communicator), the buffers untouched (before: block 0's sum was written), and the
         * communicator stays usable. */
        f = make(&base, "2000");
        if (f) {
            const size_t big = 8192;
            fill(big);
            set_pos(4);
            double t0 = check_now_s();
            for (uint32_t r = 0; r < N; r++) {
                cudaSetDevice(devs[r]);
                memra_status st =
                    V->all_reduce_sum_f32(f, r, bufs[r], r == 0 ? 64 : big, streams[r], 11, pos_d[r], stat_d[r], &err);
                CHECK(st == MEMRA_OK, "counts differ: the call of rank %u: %s", r, err.msg);
            }
            sync_all();
            double dt = check_now_s() - t0;
            for (uint32_t r = 0; r < N; r++)
                CHECK(status_of(r) == MEMRA_COLLECTIVE_FAILED, "counts differ: rank %u reads %d (expected FAILED)", r,
                      status_of(r));
            CHECK(dt < 0.5, "counts differ: the operation took %.3f s (timeout_ms=2000: a block waited it out)", dt);
            float *h = malloc(big * sizeof *h);
            size_t touched = 0;
            for (uint32_t r = 0; r < N; r++) {
                cudaSetDevice(devs[r]);
                cudaMemcpy(h, bufs[r], big * sizeof *h, cudaMemcpyDeviceToHost);
                for (size_t i = 0; i < big; i++) {
                    float want = input(r, i);
                    touched += memcmp(&want, &h[i], 4) != 0;
                }
            }
            free(h);
            CHECK(touched == 0, "counts differ: %zu floats of the buffers were written", touched);
            fill(4096);
            op(f, 4096, 11, UINT32_MAX, &err);
            sync_all();
            for (uint32_t r = 0; r < N; r++)
                CHECK(status_of(r) == 0, "after counts that differed rank %u reads %d (the communicator broke)", r,
                      status_of(r));
            CHECK(wrong(4096, 1.0f) == 0, "after counts that differed: the next sum is wrong");
            printf("  counts that differ: the operation ended after %.4f s\n", dt);
            V->destroy(f);
        }
        /* 6. Abort from the host ends a rank spinning for a peer that never calls. */
        f = make(&base, "20000");
        if (f) {
            fill(4096);
            double t0 = check_now_s();
            op(f, 4096, 2, 1, &err); /* rank 1 never calls */
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
            cudaSetDevice(devs[0]);
            CHECK(cudaStreamQuery(streams[0]) == cudaErrorNotReady, "rank 0 did not wait for its peer");
            V->abort(f);
            cudaStreamSynchronize(streams[0]);
            double dt = check_now_s() - t0;
            CHECK(status_of(0) == MEMRA_COLLECTIVE_ABORTED, "aborted rank 0 reads %d", status_of(0));
            CHECK(dt < 2.0, "abort took %.3f s to end the spin", dt);
            CHECK(V->all_reduce_sum_f32(f, 0, bufs[0], 16, streams[0], 2, pos_d[0], stat_d[0], &err) == MEMRA_E_REFUSED,
                  "a call after abort was accepted");
            printf("  abort: the spinning rank ended after %.3f s\n", dt);
            V->destroy(f);
        }
        /* 7. Abort between a rank's launch and its kernel's start (issue 24.5): rank 0 waits, the
         * host aborts, rank 1's kernel (held behind a host gate on its stream, enqueued after rank
         * 0's launch: streams may share a hardware queue) starts only then. Every rank must
         * report the same outcome, ABORTED. Before the kernel read the abort flag at its start,
         * rank 1 found rank 0's flags set, summed and reported 0 (success) while rank 0 reported
         * ABORTED. (ABORTED promises nothing about the buffers: not checked.) */
        f = make(&base, "20000");
        if (f) {
            fill(4096);
            atomic_store(&gate_open, 0);
            cudaSetDevice(devs[0]);
            memra_status st = V->all_reduce_sum_f32(f, 0, bufs[0], 4096, streams[0], 2, pos_d[0], stat_d[0], &err);
            CHECK(st == MEMRA_OK, "abort before start: rank 0's call: %s", err.msg);
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL); /* rank 0's kernel is running, waiting for rank 1 */
            cudaSetDevice(devs[1]);
            CHECK(cudaLaunchHostFunc(streams[1], hold_gate, NULL) == cudaSuccess, "the host gate on rank 1's stream");
            st = V->all_reduce_sum_f32(f, 1, bufs[1], 4096, streams[1], 2, pos_d[1], stat_d[1], &err);
            CHECK(st == MEMRA_OK, "abort before start: rank 1's call: %s", err.msg);
            nanosleep(&ts, NULL);
            cudaSetDevice(devs[0]);
            CHECK(cudaStreamQuery(streams[0]) == cudaErrorNotReady, "rank 0 did not wait for its gated peer");
            V->abort(f);
            cudaStreamSynchronize(streams[0]);
            atomic_store(&gate_open, 1);
            sync_all();
            const int32_t s0 = status_of(0), s1 = status_of(1);
            CHECK(s0 == MEMRA_COLLECTIVE_ABORTED, "abort before start: rank 0 reads %d (expected ABORTED)", s0);
            CHECK(s1 == s0, "abort before start: ranks disagree: rank 0 reads %d, rank 1 %d (0: it committed)", s0, s1);
            printf("  abort before a rank's kernel started: ranks read %d and %d\n", s0, s1);
            V->destroy(f);
        }
    }
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    memra_registry_close(reg);
    return failures ? 1 : 0;
}
