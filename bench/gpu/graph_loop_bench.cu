/* graph_loop_bench.cu: what the boundary between two decode steps costs when each step is one
 * replay of a CUDA graph, against a step loop kept on the device (issue 27: ~11 us between two
 * replays at window=2 in ktrace, 1.4 to 2.4% of a small model's token).
 *
 * A "step" here is a chain of K launches of 132 blocks x 128 threads, each waiting on the one
 * before (griddepcontrol.wait under programmatic dependent launch, as memra's body) and spinning
 * S ns on %globaltimer, then block 0 stamps when it began (after its wait) and ended. R steps run
 * in each of these forms:
 *   host     one graph replay a step, back to back on one stream, an event recorded after each
 *            (as cuda-graph's cg_step_begin + mc_finish at window >= 2, the host ahead);
 *   host-ne  the same without the events;
 *   while    one launch of a graph whose conditional WHILE node runs the step's body R times (the
 *            last launch of the body counts the steps and sets the condition);
 *   unroll   U steps captured one after another into one graph (U x K launches), replayed R / U
 *            times: the boundary inside a graph, for scale.
 * For each form: the median gap between the end of a step's last launch and the (after-wait) start
 * of the next step's first one, the median gap between launches inside a step, and the time a
 * step takes (events around the whole run). Bench code only.
 *   memra_cuda_graph_loop_bench [K] [S_ns] [R]      (defaults 32 2000 400) */
#include "bench_common.cuh"

#include <algorithm>
#include <vector>

struct Stamp {
    unsigned long long start, end;
};

__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* One launch of a step: wait for the launch before, let the next one launch, spin, stamp. The last
 * launch of a step (last != 0) advances the step counter; under `while` it also sets the loop's
 * condition (count < R). */
__global__ void step_kernel(Stamp *st, int *counter, int k, int K, unsigned long long spin_ns, int last, int R,
                            cudaGraphConditionalHandle h, int use_cond) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    unsigned long long t0 = gtime();
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    int step = *(volatile int *)counter;
    while (gtime() - t0 < spin_ns) {
    }
    __syncthreads();
    if (blockIdx.x == 0 && threadIdx.x == 0 && step < R) {
        st[(size_t)step * K + k].start = t0;
        st[(size_t)step * K + k].end = gtime();
    }
    if (last) {
        /* the last block to arrive (an integer ticket) advances the step: every block of this launch
         * has read `step` by then, and the next launch reads it only after its wait */
        __shared__ int am_last;
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            am_last = atomicAdd(counter + 1, 1) == (int)gridDim.x - 1;
        }
        __syncthreads();
        if (am_last && threadIdx.x == 0) {
            counter[1] = 0;
            int next = step + 1;
            *(volatile int *)counter = next;
            __threadfence();
            if (use_cond)
                cudaGraphSetConditional(h, next < R ? 1u : 0u);
        }
    }
}

struct Args {
    int K, R, U;
    unsigned long long spin;
    Stamp *st;
    int *counter;
};

static void launch_step_body(const Args &a, cudaStream_t q, cudaGraphConditionalHandle h, int use_cond) {
    for (int k = 0; k < a.K; k++) {
        mc_bench_launch_pdl(q, step_kernel, 132, 128, 0, a.st, a.counter, k, a.K, a.spin, k == a.K - 1 ? 1 : 0, a.R, h,
                            use_cond);
    }
}

/* the while form's calls: a failure is reported and ends the bench with the forms before it printed */
#define SOFT(x)                                                                                                        \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            printf("while: %s failed: %s\n", #x, cudaGetErrorString(e_));                                              \
            return 4;                                                                                                  \
        }                                                                                                              \
    } while (0)

static double median(std::vector<double> v) {
    if (v.empty())
        return -1;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* gaps (us) read back from the stamps of R steps: between steps, and inside steps */
static void report(const char *name, const Args &a, float ms, int steps) {
    std::vector<Stamp> h((size_t)a.R * a.K);
    MC_BENCH_CHECK(cudaMemcpy(h.data(), a.st, h.size() * sizeof(Stamp), cudaMemcpyDeviceToHost));
    std::vector<double> between, inside;
    int missing = 0;
    for (int s = 0; s < steps; s++)
        for (int k = 0; k < a.K; k++) {
            const Stamp &x = h[(size_t)s * a.K + k];
            if (!x.start || !x.end) {
                missing++;
                continue;
            }
            if (k > 0 && h[(size_t)s * a.K + k - 1].end)
                inside.push_back(((double)x.start - (double)h[(size_t)s * a.K + k - 1].end) / 1e3);
            if (k == 0 && s > 0 && h[(size_t)(s - 1) * a.K + a.K - 1].end)
                between.push_back(((double)x.start - (double)h[(size_t)(s - 1) * a.K + a.K - 1].end) / 1e3);
        }
    printf("%-8s steps %4d  step %8.2f us  between steps %7.2f us (median of %zu)  inside %6.2f us  missing %d\n", name,
           steps, ms * 1e3 / steps, median(between), between.size(), median(inside), missing);
}

static void reset(const Args &a) {
    MC_BENCH_CHECK(cudaMemset(a.st, 0, (size_t)a.R * a.K * sizeof(Stamp)));
    MC_BENCH_CHECK(cudaMemset(a.counter, 0, 2 * sizeof(int)));
    MC_BENCH_CHECK(cudaDeviceSynchronize());
}

int main(int argc, char **argv) {
    Args a;
    a.K = argc > 1 ? atoi(argv[1]) : 32;
    a.spin = argc > 2 ? strtoull(argv[2], NULL, 10) : 2000;
    a.R = argc > 3 ? atoi(argv[3]) : 400;
    a.U = 8;
    if (a.K < 2 || a.K > 4096 || a.R < 16 || a.R > 100000 || a.R % a.U) {
        fprintf(stderr, "usage: %s [K 2..4096] [S_ns] [R 16..100000, a multiple of 8]\n", argv[0]);
        return 2;
    }
    cudaDeviceProp p;
    MC_BENCH_CHECK(cudaGetDeviceProperties(&p, 0));
    printf("device %s, %d multiprocessors; K %d launches a step, spin %llu ns, R %d steps\n", p.name,
           p.multiProcessorCount, a.K, a.spin, a.R);
    MC_BENCH_CHECK(cudaMalloc(&a.st, (size_t)a.R * a.K * sizeof(Stamp)));
    MC_BENCH_CHECK(cudaMalloc(&a.counter, 2 * sizeof(int)));
    cudaStream_t q;
    MC_BENCH_CHECK(cudaStreamCreateWithFlags(&q, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    MC_BENCH_CHECK(cudaEventCreate(&e0));
    MC_BENCH_CHECK(cudaEventCreate(&e1));
    std::vector<cudaEvent_t> evs(a.R);
    for (auto &e : evs)
        MC_BENCH_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

    /* host: one replay a step */
    cudaGraph_t g;
    cudaGraphExec_t ge;
    MC_BENCH_CHECK(cudaStreamBeginCapture(q, cudaStreamCaptureModeThreadLocal));
    launch_step_body(a, q, 0, 0);
    MC_BENCH_CHECK(cudaStreamEndCapture(q, &g));
    MC_BENCH_CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 2; rep++)
        for (int ev = 1; ev >= 0; ev--) {
            reset(a);
            MC_BENCH_CHECK(cudaEventRecord(e0, q));
            for (int s = 0; s < a.R; s++) {
                MC_BENCH_CHECK(cudaGraphLaunch(ge, q));
                if (ev)
                    MC_BENCH_CHECK(cudaEventRecord(evs[s], q));
            }
            MC_BENCH_CHECK(cudaEventRecord(e1, q));
            MC_BENCH_CHECK(cudaEventSynchronize(e1));
            float ms;
            MC_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            report(ev ? "host" : "host-ne", a, ms, a.R);
        }

    /* unroll: U steps in one graph */
    cudaGraph_t gu;
    cudaGraphExec_t gue;
    MC_BENCH_CHECK(cudaStreamBeginCapture(q, cudaStreamCaptureModeThreadLocal));
    for (int u = 0; u < a.U; u++)
        launch_step_body(a, q, 0, 0);
    MC_BENCH_CHECK(cudaStreamEndCapture(q, &gu));
    MC_BENCH_CHECK(cudaGraphInstantiate(&gue, gu, 0));
    for (int rep = 0; rep < 2; rep++) {
        reset(a);
        MC_BENCH_CHECK(cudaEventRecord(e0, q));
        for (int s = 0; s < a.R / a.U; s++)
            MC_BENCH_CHECK(cudaGraphLaunch(gue, q));
        MC_BENCH_CHECK(cudaEventRecord(e1, q));
        MC_BENCH_CHECK(cudaEventSynchronize(e1));
        float ms;
        MC_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        report("unroll", a, ms, a.R);
    }
    /* while: the step loop on the device */
    cudaGraph_t gw;
    SOFT(cudaGraphCreate(&gw, 0));
    cudaGraphConditionalHandle h;
    SOFT(cudaGraphConditionalHandleCreate(&h, gw, 1, cudaGraphCondAssignDefault));
    cudaGraphNodeParams cp = {};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeWhile;
    cp.conditional.size = 1;
    cudaGraphNode_t cn;
    SOFT(cudaGraphAddNode(&cn, gw, NULL, NULL, 0, &cp));
    cudaGraph_t body = cp.conditional.phGraph_out[0];
    SOFT(cudaStreamBeginCaptureToGraph(q, body, NULL, NULL, 0, cudaStreamCaptureModeThreadLocal));
    launch_step_body(a, q, h, 1);
    cudaGraph_t body_out;
    SOFT(cudaStreamEndCapture(q, &body_out));
    cudaGraphExec_t gwe;
    SOFT(cudaGraphInstantiate(&gwe, gw, 0));
    for (int rep = 0; rep < 2; rep++) {
        reset(a);
        SOFT(cudaEventRecord(e0, q));
        SOFT(cudaGraphLaunch(gwe, q));
        SOFT(cudaEventRecord(e1, q));
        SOFT(cudaEventSynchronize(e1));
        float ms;
        SOFT(cudaEventElapsedTime(&ms, e0, e1));
        int done = 0;
        SOFT(cudaMemcpy(&done, a.counter, sizeof(int), cudaMemcpyDeviceToHost));
        if (done != a.R)
            printf("while: %d steps ran, %d asked\n", done, a.R);
        report("while", a, ms, a.R);
    }

    printf("summary: the between-steps gap of each form above; 'inside' is the launch-to-launch gap under PDL\n");
    return 0;
}
