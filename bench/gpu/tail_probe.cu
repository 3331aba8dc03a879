/* tail_probe.cu: whether the step boundary at window 1 can be taken off the host's launch path
 * (issue 27; bench/gpu/NOTES.md, thirtieth session). Its questions:
 *
 *   A. Can a graph shaped like memra's decode step be instantiated for device launch
 *      (cudaGraphInstantiateFlagDeviceLaunch)? The step holds programmatic (PDL) edges and
 *      thread-block-cluster kernels; each is tried alone and together, and the instantiation's
 *      result printed.
 *   B. What a step costs at window 1 when its launch is queued before the previous step ends and
 *      released by the host, against the host launching it: a stand-in step S (K short kernels
 *      chained with PDL, the last writing the step's number into host memory with a system
 *      fence, as memra's sampler writes its ring entry), run N times.
 *        host:  the host spins on the number, then cudaGraphLaunch(S): what memra does today.
 *        tail:  a gate graph G of one kernel is queued ahead; the kernel spins on a word in host
 *               memory until the host writes the step's number there, then launches S with a
 *               device-side cudaGraphLaunch into cudaStreamGraphTailLaunch (S runs when G
 *               completes; the next G queued behind it waits for S). The host spins on S's
 *               number, writes the next step's, and queues the next G.
 *      Both keep window 1's meaning: the host has step i's result before step i + 1 computes.
 *      Printed: us a step for each, and their difference (what the launch path costs).
 *   B0. The same step launched back to back by the host without waiting (the device's own time a
 *      step: what window 1's boundary adds is host launch minus this).
 *   D. The launch queued ahead as one graph: a gate kernel that waits for the host's word and sets
 *      a conditional handle, then an IF node whose body is the step (no device-side launch).
 *   C. Whether work queued behind a graph waits for that graph's tail launch: a gate released at
 *      once tail-launches a 2 ms step; an event recorded behind the gate, synchronised, must see
 *      the step's write (memra records its step event behind the gate).
 *
 *   memra_cuda_tail_probe [steps] [kernels]   (default 2000 and 8)
 *
 * Exit 0 when every part ran (A's refusals are results, not failures), 3 on a CUDA error, 77
 * without a device. Device-side graph launch needs relocatable device code and the device
 * runtime (bench/CMakeLists.txt).
 *
 * Answered on an H100 (thirty-first session, bench/gpu/NOTES.md): every shape instantiates for
 * device launch and C holds, but both launches queued ahead are slower than the host's: at 9
 * kernels host 10.0-10.1 us a step, back to back 8.2, tail 18.2-21.1, IF node 17.8; at 65 kernels
 * host 49.2-49.4, back to back 47.4, tail 52.4-52.6, IF node 57.0. Window 1's boundary is ~2 us
 * of host launch, and the gate kernel's own launch, poll and the device-side start cost more. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_common.cuh"

/* ---- A: instantiation for device launch ---------------------------------------------------- */

__global__ void tp_first(unsigned *buf) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (threadIdx.x == 0)
        buf[blockIdx.x] += 1u;
}

__global__ void tp_pdl(unsigned *buf) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (threadIdx.x == 0)
        buf[blockIdx.x] += 2u;
}

__global__ void __cluster_dims__(2, 1, 1) tp_cluster(unsigned *buf) {
    if (threadIdx.x == 0)
        buf[blockIdx.x] += 4u;
}

/* Captures the shape (bit 1: a PDL edge, bit 2: a cluster kernel) and instantiates it for device
 * launch; prints what the runtime answered. */
static void tp_shape(unsigned *buf, cudaStream_t st, int shape) {
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    MC_BENCH_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    tp_first<<<4, 64, 0, st>>>(buf);
    if (shape & 1)
        mc_bench_launch_pdl(st, tp_pdl, 4, 64, 0, buf);
    if (shape & 2)
        tp_cluster<<<4, 64, 0, st>>>(buf);
    MC_BENCH_CHECK(cudaStreamEndCapture(st, &g));
    cudaGraphInstantiateParams p = {};
    p.flags = cudaGraphInstantiateFlagDeviceLaunch;
    const cudaError_t e = cudaGraphInstantiateWithParams(&x, g, &p);
    printf("A  %-28s device-launch instantiation: %s (result %d)\n",
           shape == 0   ? "plain kernels"
           : shape == 1 ? "with a PDL edge"
           : shape == 2 ? "with a cluster kernel"
                        : "with a PDL edge and a cluster",
           cudaGetErrorName(e), (int)p.result_out);
    (void)cudaGetLastError();
    if (x)
        cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
}

/* ---- B: the stand-in step, launched by the host or by a gate kernel -------------------------- */

/* One link of the step: a short chain of dependent work (the previous link's word), PDL-launched. */
__global__ void tp_link(unsigned *chain, uint32_t k) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (threadIdx.x == 0 && blockIdx.x == 0)
        chain[k + 1] = chain[k] + 1u;
}

/* The step's last kernel: its number into host memory, after a system fence (memra's ring tag). */
__global__ void tp_publish(volatile int32_t *host_done, int32_t *dev_step) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int32_t s = *dev_step + 1;
    *dev_step = s;
    __threadfence_system();
    *host_done = s;
    __threadfence_system();
}

/* The gate: the next step's number (its own count), then a spin on the host's word until the
 * host releases that step, then the step's graph as this graph's tail launch. */
__global__ void tp_gate(volatile const int32_t *host_go, int32_t *gate_count, cudaGraphExec_t step,
                        volatile int32_t *host_err) {
    const int32_t want = ++*gate_count;
    while (*host_go < want)
        __nanosleep(64);
    const cudaError_t e = cudaGraphLaunch(step, cudaStreamGraphTailLaunch);
    if (e != cudaSuccess) { /* the host's spin stops on it */
        *host_err = (int32_t)e;
        __threadfence_system();
    }
}

/* D's gate: sets the IF node's condition once the host releases this step. */
__global__ void tp_cgate(volatile const int32_t *host_go, int32_t *gate_count, cudaGraphConditionalHandle h) {
    const int32_t want = ++*gate_count;
    while (*host_go < want)
        ;
    cudaGraphSetConditional(h, 1u);
}

/* C's step: ~2 ms of spinning on the global timer, then the word. */
__global__ void tp_slow(int32_t *word) {
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < 2000000u);
    *word += 1;
}

static double tp_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Spins until *w reaches want; exits 3 naming the device's error, or after 5 s without it. */
static void tp_spin(volatile int32_t *w, int32_t want, volatile int32_t *err) {
    const double t0 = tp_now();
    while (*w < want) {
        if (*err) {
            fprintf(stderr, "tail_probe: the device-side cudaGraphLaunch failed: %s\n",
                    cudaGetErrorName((cudaError_t)*err));
            exit(3);
        }
        if (tp_now() - t0 > 5.0) {
            fprintf(stderr, "tail_probe: step %d did not come within 5 s\n", want);
            exit(3);
        }
    }
}

/* The stand-in step's kernels, onto a capturing stream: K links (the first after the previous
 * step in full, the rest PDL-chained), then the publish. */
static void tp_step_kernels(cudaStream_t st, unsigned *buf, int K, volatile int32_t *host_done, int32_t *dev_step) {
    tp_link<<<132, 128, 0, st>>>(buf, 0u);
    for (int k = 1; k < K; k++)
        mc_bench_launch_pdl(st, tp_link, 132, 128, 0, buf, (uint32_t)k);
    mc_bench_launch_pdl(st, tp_publish, 1, 1, 0, host_done, dev_step);
}

/* A gate graph gx (one gate kernel that waits for the host's word, then starts the step) run at
 * window 1: the first gate queued, then every step released by the host's word with the next gate
 * queued behind it, and its number awaited. us a step over the last `steps`. */
static double tp_gated(cudaGraphExec_t gx, cudaStream_t st, int steps, volatile int32_t *host_go,
                       volatile int32_t *host_done, volatile int32_t *host_err, int32_t *dev_step,
                       int32_t *gate_count) {
    *host_done = 0;
    *host_go = 0;
    MC_BENCH_CHECK(cudaMemset(dev_step, 0, 64));
    MC_BENCH_CHECK(cudaMemset(gate_count, 0, 64));
    MC_BENCH_CHECK(cudaStreamSynchronize(st));
    MC_BENCH_CHECK(cudaGraphLaunch(gx, st)); /* step 1's gate, queued */
    double t0 = 0.0;
    for (int i = 0; i < steps + 10; i++) {
        if (i == 10)
            t0 = tp_now();
        *host_go = i + 1;                        /* release step i + 1 */
        MC_BENCH_CHECK(cudaGraphLaunch(gx, st)); /* queue the next step's gate behind it */
        tp_spin(host_done, i + 1, host_err);
    }
    const double us = (tp_now() - t0) * 1e6 / steps;
    *host_go = steps + 11; /* release the last queued gate */
    MC_BENCH_CHECK(cudaStreamSynchronize(st));
    return us;
}

int main(int argc, char **argv) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("tail_probe: SKIP (no CUDA device)\n");
        return 77;
    }
    const int steps = argc > 1 ? atoi(argv[1]) : 2000, K = argc > 2 ? atoi(argv[2]) : 8;
    if (steps < 10 || K < 1 || K > 64) {
        fprintf(stderr, "usage: memra_cuda_tail_probe [steps >= 10] [kernels 1..64]\n");
        return 2;
    }
    cudaStream_t st;
    MC_BENCH_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    unsigned *buf;
    MC_BENCH_CHECK(cudaMalloc(&buf, 4096));
    MC_BENCH_CHECK(cudaMemset(buf, 0, 4096));
    for (int shape = 0; shape < 4; shape++)
        tp_shape(buf, st, shape);

    /* the stand-in step */
    volatile int32_t *host_done, *host_go, *host_err;
    int32_t *dev_step, *gate_count;
    MC_BENCH_CHECK(cudaHostAlloc((void **)&host_done, 64, cudaHostAllocMapped));
    MC_BENCH_CHECK(cudaHostAlloc((void **)&host_go, 64, cudaHostAllocMapped));
    MC_BENCH_CHECK(cudaHostAlloc((void **)&host_err, 64, cudaHostAllocMapped));
    *host_err = 0;
    MC_BENCH_CHECK(cudaMalloc(&dev_step, 64));
    MC_BENCH_CHECK(cudaMalloc(&gate_count, 64));
    cudaGraph_t sg;
    MC_BENCH_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    tp_step_kernels(st, buf, K, host_done, dev_step);
    MC_BENCH_CHECK(cudaStreamEndCapture(st, &sg));
    cudaGraphExec_t sx_host, sx_dev;
    MC_BENCH_CHECK(cudaGraphInstantiate(&sx_host, sg, 0));
    cudaGraphInstantiateParams p = {};
    p.flags = cudaGraphInstantiateFlagDeviceLaunch | cudaGraphInstantiateFlagUpload;
    p.uploadStream = st;
    const cudaError_t edev = cudaGraphInstantiateWithParams(&sx_dev, sg, &p);
    printf("A  %-28s device-launch instantiation: %s (result %d)\n", "the stand-in step (PDL chain)",
           cudaGetErrorName(edev), (int)p.result_out);

    /* host: spin on the step's number, launch the next */
    *host_done = 0;
    MC_BENCH_CHECK(cudaMemset(dev_step, 0, 64));
    MC_BENCH_CHECK(cudaStreamSynchronize(st));
    double t0 = 0.0;
    for (int i = 0; i < steps + 10; i++) {
        if (i == 10)
            t0 = tp_now();
        MC_BENCH_CHECK(cudaGraphLaunch(sx_host, st));
        tp_spin(host_done, i + 1, host_err);
    }
    const double us_host = (tp_now() - t0) * 1e6 / steps;
    MC_BENCH_CHECK(cudaStreamSynchronize(st));
    printf("B  host launch:   %8.2f us a step (%d kernels, %d steps)\n", us_host, K + 1, steps);

    /* B0: back to back */
    *host_done = 0;
    MC_BENCH_CHECK(cudaMemset(dev_step, 0, 64));
    MC_BENCH_CHECK(cudaStreamSynchronize(st));
    for (int i = 0; i < steps + 10; i++) {
        if (i == 10) {
            tp_spin(host_done, 10, host_err);
            t0 = tp_now();
        }
        MC_BENCH_CHECK(cudaGraphLaunch(sx_host, st));
    }
    tp_spin(host_done, steps + 10, host_err);
    const double us_b2b = (tp_now() - t0) * 1e6 / steps;
    MC_BENCH_CHECK(cudaStreamSynchronize(st));
    printf("B0 back to back:  %8.2f us a step; window 1's boundary adds %.2f us\n", us_b2b, us_host - us_b2b);

    /* D: gate kernel + IF node whose body is the step, launched ahead by the host */
    {
        cudaGraph_t og, body;
        MC_BENCH_CHECK(cudaGraphCreate(&og, 0));
        cudaGraphConditionalHandle h;
        MC_BENCH_CHECK(cudaGraphConditionalHandleCreate(&h, og, 0u, cudaGraphCondAssignDefault));
        MC_BENCH_CHECK(cudaStreamBeginCaptureToGraph(st, og, NULL, NULL, 0, cudaStreamCaptureModeThreadLocal));
        tp_cgate<<<1, 1, 0, st>>>(host_go, gate_count, h);
        MC_BENCH_CHECK(cudaStreamEndCapture(st, &og));
        cudaGraphNode_t gate_node;
        size_t nn = 1;
        MC_BENCH_CHECK(cudaGraphGetNodes(og, &gate_node, &nn));
        cudaGraphNodeParams cp = {};
        cp.type = cudaGraphNodeTypeConditional;
        cp.conditional.handle = h;
        cp.conditional.type = cudaGraphCondTypeIf;
        cp.conditional.size = 1;
        cudaGraphNode_t cn;
        MC_BENCH_CHECK(cudaGraphAddNode(&cn, og, &gate_node, NULL, 1, &cp));
        body = cp.conditional.phGraph_out[0];
        MC_BENCH_CHECK(cudaStreamBeginCaptureToGraph(st, body, NULL, NULL, 0, cudaStreamCaptureModeThreadLocal));
        tp_step_kernels(st, buf, K, host_done, dev_step);
        cudaError_t ec = cudaStreamEndCapture(st, &body);
        cudaGraphExec_t ox = NULL;
        if (ec == cudaSuccess)
            ec = cudaGraphInstantiate(&ox, og, 0);
        printf("D  the step as an IF node's body (PDL chain inside): %s\n", cudaGetErrorName(ec));
        (void)cudaGetLastError();
        if (ec == cudaSuccess) {
            const double us_if = tp_gated(ox, st, steps, host_go, host_done, host_err, dev_step, gate_count);
            printf("D  IF-node launch: %8.2f us a step; against the host's launch %.2f us\n", us_if, us_host - us_if);
        }
    }

    if (edev != cudaSuccess) {
        printf("B  tail launch:   not run (the step does not instantiate for device launch)\n");
        return 0;
    }
    /* tail: the gate graph, one kernel */
    cudaGraph_t gg;
    cudaGraphExec_t gx;
    MC_BENCH_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    tp_gate<<<1, 1, 0, st>>>(host_go, gate_count, sx_dev, host_err);
    MC_BENCH_CHECK(cudaStreamEndCapture(st, &gg));
    MC_BENCH_CHECK(cudaGraphInstantiate(&gx, gg, 0));
    const double us_tail = tp_gated(gx, st, steps, host_go, host_done, host_err, dev_step, gate_count);
    printf("B  tail launch:   %8.2f us a step; the host's launch path costs %.2f us a step\n", us_tail,
           us_host - us_tail);

    /* C: an event behind a gate whose tail launch runs 2 ms */
    int32_t *slow_word;
    MC_BENCH_CHECK(cudaMalloc(&slow_word, 64));
    MC_BENCH_CHECK(cudaMemset(slow_word, 0, 64));
    cudaGraph_t cg;
    cudaGraphExec_t cx, cgx;
    MC_BENCH_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    tp_slow<<<1, 1, 0, st>>>(slow_word);
    MC_BENCH_CHECK(cudaStreamEndCapture(st, &cg));
    MC_BENCH_CHECK(cudaGraphInstantiateWithParams(&cx, cg, &p));
    MC_BENCH_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    tp_gate<<<1, 1, 0, st>>>(host_go, gate_count, cx, host_err);
    MC_BENCH_CHECK(cudaStreamEndCapture(st, &gg));
    MC_BENCH_CHECK(cudaGraphInstantiate(&cgx, gg, 0));
    MC_BENCH_CHECK(cudaMemset(gate_count, 0, 64));
    MC_BENCH_CHECK(cudaStreamSynchronize(st));
    *host_go = 1;
    cudaEvent_t ev;
    MC_BENCH_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    const double tc = tp_now();
    MC_BENCH_CHECK(cudaGraphLaunch(cgx, st));
    MC_BENCH_CHECK(cudaEventRecord(ev, st));
    MC_BENCH_CHECK(cudaEventSynchronize(ev));
    const double waited = (tp_now() - tc) * 1e3;
    int32_t seen = -1;
    MC_BENCH_CHECK(cudaMemcpy(&seen, slow_word, 4, cudaMemcpyDeviceToHost));
    printf("C  an event behind the gate waited %.2f ms and %s the tail launch's write (word %d)\n", waited,
           seen == 1 ? "saw" : "did NOT see", seen);
    return 0;
}
