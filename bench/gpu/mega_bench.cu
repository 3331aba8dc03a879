/* mega_bench.cu: can a decode layer's GEMV chain keep the memory busy across its all-to-all
 * dependencies if each multiprocessor queues its next phase's weights into shared memory before it
 * waits for the previous phase (issue 27: ~10 us a llama-1b layer are spent in the four
 * dependencies, chain_bench (a) - (d))? One block of 16 warps a multiprocessor; each warp streams its
 * rows' weights in 4 KB pieces through its own three-slot ring (cp.async.bulk onto an mbarrier a
 * slot), so the first three pieces of every warp's next phase (192 KB a multiprocessor, ~25 MB on
 * the card) are in flight while the phase boundary resolves. The chain, llama-1b's shapes, BF16,
 * attention left out (wo reads the q part of the qkv output), L layers with their own weights:
 *   qkv (RMSNorm x) -> wo (+ x) -> gate/up (RMSNorm x, SwiGLU) -> down (+ x)
 * Forms, the same arithmetic a row in all of them (lane l sums 16-byte chunks l, l + 32, ... of a
 * piece in order, pieces in order, then the xor tree):
 *   launch    one launch a phase, 64 in a CUDA graph under programmatic dependent launch: a block
 *             queues its first pieces, then griddepcontrol.wait (the next launch's block lands on a
 *             multiprocessor when the previous one's block there ends); launch0: queued after it;
 *   persist   one cooperative launch for the whole chain, a grid barrier (one arrive counter, a
 *             generation word) between phases, the pieces queued before the barrier's wait;
 *   persist0  the same, the pieces queued only after the wait;
 *   racy      persist without the barrier (its reads race: a timing lower bound).
 * launch, launch0, persist and persist0 must give the same bits (x, the qkv and SwiGLU outputs, memcmp);
 * a flipped weight bit must change launch's x (control). Then us a layer against the floor (the
 * layer's bytes over the copy ceiling). Bench code only.
 *   memra_cuda_mega_bench [layers] [replays]      (defaults 16 30)
 * Exit 0 when the bits agree and the control is caught, 1 otherwise, 2 usage, 3 a CUDA error. */
#include "bench_common.cuh"

#include <cuda_bf16.h>
#include <string.h>
#include <vector>

namespace {

constexpr int E = 2048, NQKV = 3072, FF = 8192;
constexpr int WARPS = 16, THREADS = 32 * WARPS, NSLOT = 3, PIECE = 4096; /* bytes: 2048 bf16 */
constexpr int XMAX = FF;
constexpr size_t SMEM = (size_t)XMAX * 4 + (size_t)WARPS * NSLOT * PIECE + WARPS * NSLOT * 8 + 64;
enum { PH_QKV, PH_WO, PH_GU, PH_DOWN };

struct Layer {
    const __nv_bfloat16 *qkv, *wo, *gu, *down; /* row-major; gu: the 8192 gate rows, then the up rows */
    const float *n1, *n2;
};

struct Params {
    const Layer *layers;
    int L;
    float *x, *qkv, *h;
    unsigned *bar; /* [0] the generation, [32] the arrive counter */
    int mode;      /* persist_kernel: 0 persist, 1 persist0, 2 racy (phase_kernel takes its phase as arguments) */
    int G;
    float eps;
};

__device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t *b) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(b)) : "memory");
}

/* lane 0: one piece of `bytes` from global src into shared dst, completing on mbarrier b */
__device__ __forceinline__ void piece_issue(void *dst, const void *src, uint64_t *b) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)), "r"(PIECE) : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(dst)),
        "l"(src), "r"(PIECE), "r"(smem_addr(b))
        : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity) {
    unsigned ok = 0;
    while (!ok)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(ok)
                     : "r"(smem_addr(b)), "r"(parity)
                     : "memory");
}

struct PhaseShape {
    int K, N, P; /* input length, outputs, pieces an output */
};
__device__ __forceinline__ PhaseShape shape(int ph) {
    switch (ph) {
    case PH_QKV: return {E, NQKV, 1};
    case PH_WO: return {E, E, 1};
    case PH_GU: return {E, FF, 2};
    default: return {FF, E, 4};
    }
}

/* piece j of output o of phase ph: its weights and the input offset it multiplies */
__device__ __forceinline__ const __nv_bfloat16 *piece_src(const Layer &ly, int ph, int o, int j) {
    switch (ph) {
    case PH_QKV: return ly.qkv + (size_t)o * E;
    case PH_WO: return ly.wo + (size_t)o * E;
    case PH_GU: return ly.gu + ((size_t)j * FF + o) * E;
    default: return ly.down + (size_t)o * FF + (size_t)j * E;
    }
}

/* A warp's state across phases: pieces issued and consumed (slot = count % NSLOT, parity from it). */
struct Ring {
    unsigned issued, consumed;
};

/* The block's outputs of a phase: [o0, o1); warp w takes o0 + w, o0 + w + WARPS, ... */
__device__ __forceinline__ void block_range(int N, int G, int b, int &o0, int &o1) {
    o0 = (int)((long long)b * N / G);
    o1 = (int)((long long)(b + 1) * N / G);
}

__device__ __forceinline__ int warp_pieces(int o0, int o1, int warp, int P) {
    int n = o1 - o0 - warp;
    return n > 0 ? ((n + WARPS - 1) / WARPS) * P : 0;
}

/* lane 0 queues piece q (q-th of the warp's phase) into the next slot */
__device__ __forceinline__ void issue_q(const Layer &ly, int ph, int o0, int warp, int P, int q, Ring &r,
                                        unsigned char *slots, uint64_t *bars, int lane) {
    if (lane == 0) {
        const int o = o0 + warp + WARPS * (q / P), j = q % P;
        const unsigned s = r.issued % NSLOT;
        piece_issue(slots + ((size_t)warp * NSLOT + s) * PIECE, piece_src(ly, ph, o, j), &bars[warp * NSLOT + s]);
    }
    r.issued++;
}

__device__ __forceinline__ void queue_first(const Layer &ly, int ph, int G, int b, int warp, int lane, Ring &r,
                                            unsigned char *slots, uint64_t *bars) {
    const PhaseShape sh = shape(ph);
    int o0, o1;
    block_range(sh.N, G, b, o0, o1);
    const int np = warp_pieces(o0, o1, warp, sh.P);
    for (int q = 0; q < np && q < NSLOT; q++)
        issue_q(ly, ph, o0, warp, sh.P, q, r, slots, bars, lane);
}

/* The phase's input into shared memory (normed for qkv and gate/up), read through L2 (written by
 * other multiprocessors in this kernel or the launch before). Ends with __syncthreads. */
__device__ void stage_x(const Params &p, const Layer &ly, int ph, float *xs, float *red) {
    const int tid = threadIdx.x;
    const PhaseShape sh = shape(ph);
    const float *in = ph == PH_WO ? p.qkv : ph == PH_DOWN ? p.h : p.x;
    float ss = 0.0f;
    for (int i = tid; i < sh.K; i += THREADS) {
        float v = __ldcg(in + i);
        xs[i] = v;
        ss = fmaf(v, v, ss);
    }
    if (ph == PH_QKV || ph == PH_GU) {
        for (int o = 16; o; o >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if ((tid & 31) == 0)
            red[tid >> 5] = ss;
        __syncthreads();
        float t = 0.0f;
        for (int w = 0; w < WARPS; w++)
            t += red[w];
        const float sc = rsqrtf(t / (float)sh.K + p.eps);
        const float *nw = ph == PH_QKV ? ly.n1 : ly.n2;
        for (int i = tid; i < sh.K; i += THREADS)
            xs[i] = xs[i] * sc * nw[i];
    }
    __syncthreads();
}

/* The warp's outputs of the phase from its ring (the first min(NSLOT, pieces) already queued). */
__device__ void compute(const Params &p, const Layer &ly, int ph, int G, int b, int warp, int lane, Ring &r,
                        unsigned char *slots, uint64_t *bars, const float *xs) {
    const PhaseShape sh = shape(ph);
    int o0, o1;
    block_range(sh.N, G, b, o0, o1);
    const int np = warp_pieces(o0, o1, warp, sh.P);
    float acc[2] = {0.0f, 0.0f};
    for (int q = 0; q < np; q++) {
        const int j = q % sh.P, o = o0 + warp + WARPS * (q / sh.P);
        const unsigned s = r.consumed % NSLOT;
        mbar_wait(&bars[warp * NSLOT + s], (r.consumed / NSLOT) & 1u);
        const uint4 *w = (const uint4 *)(slots + ((size_t)warp * NSLOT + s) * PIECE);
        const float *xp = xs + (ph == PH_DOWN ? j * E : 0);
        float a = acc[ph == PH_GU ? j : 0];
#pragma unroll
        for (int c = 0; c < PIECE / 16 / 32; c++) {
            const int ch = lane + 32 * c;
            const uint4 v = w[ch];
            const float4 x0 = *(const float4 *)(xp + ch * 8), x1 = *(const float4 *)(xp + ch * 8 + 4);
            const __nv_bfloat162 *bv = (const __nv_bfloat162 *)&v;
            float2 f0 = __bfloat1622float2(bv[0]), f1 = __bfloat1622float2(bv[1]), f2 = __bfloat1622float2(bv[2]),
                   f3 = __bfloat1622float2(bv[3]);
            a = fmaf(f0.x, x0.x, a);
            a = fmaf(f0.y, x0.y, a);
            a = fmaf(f1.x, x0.z, a);
            a = fmaf(f1.y, x0.w, a);
            a = fmaf(f2.x, x1.x, a);
            a = fmaf(f2.y, x1.y, a);
            a = fmaf(f3.x, x1.z, a);
            a = fmaf(f3.y, x1.w, a);
        }
        acc[ph == PH_GU ? j : 0] = a;
        r.consumed++;
        /* the slot's reads are done before the async proxy may overwrite it */
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        if (q + NSLOT < np)
            issue_q(ly, ph, o0, warp, sh.P, q + NSLOT, r, slots, bars, lane);
        if (j == sh.P - 1) {
            float y0 = acc[0], y1 = acc[1];
            for (int m = 16; m; m >>= 1) {
                y0 += __shfl_xor_sync(0xffffffffu, y0, m);
                y1 += __shfl_xor_sync(0xffffffffu, y1, m);
            }
            if (lane == 0) {
                if (ph == PH_QKV)
                    p.qkv[o] = y0;
                else if (ph == PH_GU)
                    p.h[o] = y0 / (1.0f + expf(-y0)) * y1;
                else
                    p.x[o] = __ldcg(p.x + o) + y0;
            }
            acc[0] = acc[1] = 0.0f;
        }
    }
}

struct Smem {
    float *xs, *red;
    unsigned char *slots;
    uint64_t *bars;
};

__device__ __forceinline__ Smem carve(unsigned char *sm) {
    Smem s;
    s.xs = (float *)sm;
    s.slots = sm + (size_t)XMAX * 4;
    s.bars = (uint64_t *)(s.slots + (size_t)WARPS * NSLOT * PIECE);
    s.red = (float *)(s.bars + WARPS * NSLOT);
    return s;
}

__device__ __forceinline__ void init_bars(uint64_t *bars) {
    if (threadIdx.x < WARPS * NSLOT)
        mbar_init(&bars[threadIdx.x]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
}

/* a grid barrier: every block's writes before it are seen by every block after it */
__device__ __forceinline__ void grid_barrier(unsigned *bar, int G, unsigned target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        unsigned old = atomicAdd(bar + 32, 1u);
        if (old == (unsigned)G - 1) {
            atomicExch(bar + 32, 0u);
            __threadfence();
            asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(bar), "r"(target) : "memory");
        } else {
            unsigned g;
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(g) : "l"(bar) : "memory");
            } while ((int)(g - target) < 0);
        }
    }
    __syncthreads();
}

__global__ void __launch_bounds__(THREADS, 1) persist_kernel(Params p) {
    extern __shared__ __align__(128) unsigned char sm[];
    Smem s = carve(sm);
    init_bars(s.bars);
    const int b = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    unsigned gen0 = 0;
    if (threadIdx.x == 0)
        gen0 = *(volatile unsigned *)p.bar;
    Ring r = {0, 0};
    unsigned k = 0;
    for (int l = 0; l < p.L; l++)
        for (int ph = 0; ph < 4; ph++) {
            const Layer &ly = p.layers[l];
            const bool first = l == 0 && ph == 0;
            if (p.mode != 1 || first)
                queue_first(ly, ph, p.G, b, warp, lane, r, s.slots, s.bars);
            if (!first) {
                if (p.mode == 2)
                    __syncthreads();
                else
                    grid_barrier(p.bar, p.G, gen0 + ++k);
            }
            if (p.mode == 1 && !first)
                queue_first(ly, ph, p.G, b, warp, lane, r, s.slots, s.bars);
            stage_x(p, ly, ph, s.xs, s.red);
            compute(p, ly, ph, p.G, b, warp, lane, r, s.slots, s.bars, s.xs);
            __syncthreads(); /* xs is rewritten by the next phase */
        }
}

/* One phase as its own launch: its pieces queued, then the wait for the launch before. */
__global__ void __launch_bounds__(THREADS, 1) phase_kernel(Params p, int l, int ph, int pre) {
    extern __shared__ __align__(128) unsigned char sm[];
    Smem s = carve(sm);
    init_bars(s.bars);
    const int b = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    Ring r = {0, 0};
    const Layer &ly = p.layers[l];
    if (pre)
        queue_first(ly, ph, p.G, b, warp, lane, r, s.slots, s.bars);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (!pre)
        queue_first(ly, ph, p.G, b, warp, lane, r, s.slots, s.bars);
    stage_x(p, ly, ph, s.xs, s.red);
    compute(p, ly, ph, p.G, b, warp, lane, r, s.slots, s.bars, s.xs);
}

__global__ void fill_bf16(__nv_bfloat16 *w, size_t n, uint32_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t z = (uint32_t)i * 2654435761u ^ seed;
        z ^= z >> 15;
        z *= 2246822519u;
        z ^= z >> 13;
        w[i] = __float2bfloat16(((float)(z & 0xffffu) / 32768.0f - 1.0f) * scale);
    }
}

} // namespace

int main(int argc, char **argv) {
    const int L = argc > 1 ? atoi(argv[1]) : 16, R = argc > 2 ? atoi(argv[2]) : 30;
    if (L < 1 || L > 64 || R < 1 || R > 10000) {
        fprintf(stderr, "usage: %s [layers 1..64] [replays 1..10000]\n", argv[0]);
        return 2;
    }
    cudaDeviceProp prop;
    MC_BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
    const int G = prop.multiProcessorCount;
    cudaStream_t q;
    MC_BENCH_CHECK(cudaStreamCreateWithFlags(&q, cudaStreamNonBlocking));
    const size_t n_qkv = (size_t)NQKV * E, n_wo = (size_t)E * E, n_gu = (size_t)2 * FF * E, n_down = (size_t)E * FF;
    const size_t per_layer = n_qkv + n_wo + n_gu + n_down;
    const double layer_bytes = (double)per_layer * 2;
    __nv_bfloat16 *w;
    MC_BENCH_CHECK(cudaMalloc(&w, per_layer * 2 * L));
    fill_bf16<<<1024, 256>>>(w, per_layer * L, 7u, 0.03f);
    MC_BENCH_CHECK(cudaGetLastError());
    /* the fill runs on the legacy stream, which q (non-blocking) does not wait for. The ceiling read
     * 2.63-2.67 TB/s on an H100 where chain_bench's read 3.01 in the same call (cause not found):
     * compare the forms' us a layer with each other, and take the floor from chain_bench's line. */
    MC_BENCH_CHECK(cudaDeviceSynchronize());
    const double ceiling = mc_bench_copy_ceiling(q);
    printf("device %s, %d multiprocessors, copy ceiling %.1f GB/s; %d layers of %.1f MB (llama-1b shapes, BF16), "
           "%d replays; floor %.2f us a layer\n",
           prop.name, G, ceiling / 1e9, L, layer_bytes / 1e6, R, layer_bytes / ceiling * 1e6);
    float *nw, *x, *x0, *qkvb, *h;
    unsigned *bar;
    MC_BENCH_CHECK(cudaMalloc(&nw, (size_t)2 * L * E * 4));
    MC_BENCH_CHECK(cudaMalloc(&x, E * 4));
    MC_BENCH_CHECK(cudaMalloc(&x0, E * 4));
    MC_BENCH_CHECK(cudaMalloc(&qkvb, NQKV * 4));
    MC_BENCH_CHECK(cudaMalloc(&h, FF * 4));
    MC_BENCH_CHECK(cudaMalloc(&bar, 64 * 4));
    MC_BENCH_CHECK(cudaMemset(bar, 0, 64 * 4));
    {
        std::vector<float> hn((size_t)2 * L * E), hx(E);
        for (size_t i = 0; i < hn.size(); i++)
            hn[i] = 0.8f + 0.4f * (float)((i * 37) % 101) / 101.0f;
        for (int i = 0; i < E; i++)
            hx[i] = (float)((i * 53) % 97) / 97.0f - 0.5f;
        MC_BENCH_CHECK(cudaMemcpy(nw, hn.data(), hn.size() * 4, cudaMemcpyHostToDevice));
        MC_BENCH_CHECK(cudaMemcpy(x0, hx.data(), E * 4, cudaMemcpyHostToDevice));
    }
    std::vector<Layer> hl(L);
    for (int l = 0; l < L; l++) {
        __nv_bfloat16 *base = w + per_layer * l;
        hl[l] = {base,
                 base + n_qkv,
                 base + n_qkv + n_wo,
                 base + n_qkv + n_wo + n_gu,
                 nw + (size_t)2 * l * E,
                 nw + (size_t)(2 * l + 1) * E};
    }
    Layer *dl;
    MC_BENCH_CHECK(cudaMalloc(&dl, sizeof(Layer) * L));
    MC_BENCH_CHECK(cudaMemcpy(dl, hl.data(), sizeof(Layer) * L, cudaMemcpyHostToDevice));
    MC_BENCH_CHECK(cudaFuncSetAttribute(persist_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
    MC_BENCH_CHECK(cudaFuncSetAttribute(phase_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
    int per_sm = 0;
    MC_BENCH_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persist_kernel, THREADS, SMEM));
    if (per_sm < 1) {
        fprintf(stderr, "persist_kernel does not fit a multiprocessor (%zu bytes of shared memory)\n", SMEM);
        return 3;
    }
    Params p = {dl, L, x, qkvb, h, bar, 0, G, 1e-5f};

    /* the launched forms: 4 L launches under PDL, captured once each (pre: the pieces queued
     * before the wait, or after it) */
    cudaGraphExec_t gexec[2];
    for (int pre = 1; pre >= 0; pre--) {
        cudaGraph_t g;
        MC_BENCH_CHECK(cudaStreamBeginCapture(q, cudaStreamCaptureModeThreadLocal));
        for (int l = 0; l < L; l++)
            for (int ph = 0; ph < 4; ph++) {
                mc_bench_launch_pdl(q, phase_kernel, G, THREADS, SMEM, p, l, ph, pre);
            }
        MC_BENCH_CHECK(cudaStreamEndCapture(q, &g));
        MC_BENCH_CHECK(cudaGraphInstantiate(&gexec[1 - pre], g, 0));
    }

    auto run = [&](int form) { /* 0 launch, 1 persist, 2 persist0, 3 racy, 4 launch0 */
                               if (form == 0 || form == 4) {
                                   MC_BENCH_CHECK(cudaGraphLaunch(gexec[form == 4], q));
                               } else {
                                   Params pp = p;
                                   pp.mode = form - 1;
                                   void *args[] = {&pp};
                                   MC_BENCH_CHECK(cudaLaunchCooperativeKernel((void *)persist_kernel, dim3(G),
                                                                              dim3(THREADS), args, SMEM, q));
                               }
    };
    const char *names[5] = {"launch", "persist", "persist0", "racy", "launch0"};
    std::vector<float> ref[3], got[3];
    auto snapshot = [&](std::vector<float> *o) {
        o[0].resize(E);
        o[1].resize(NQKV);
        o[2].resize(FF);
        MC_BENCH_CHECK(cudaStreamSynchronize(q));
        MC_BENCH_CHECK(cudaMemcpy(o[0].data(), x, E * 4, cudaMemcpyDeviceToHost));
        MC_BENCH_CHECK(cudaMemcpy(o[1].data(), qkvb, NQKV * 4, cudaMemcpyDeviceToHost));
        MC_BENCH_CHECK(cudaMemcpy(o[2].data(), h, FF * 4, cudaMemcpyDeviceToHost));
    };
    auto from_start = [&](int form) {
        MC_BENCH_CHECK(cudaMemcpyAsync(x, x0, E * 4, cudaMemcpyDeviceToDevice, q));
        MC_BENCH_CHECK(cudaMemsetAsync(qkvb, 0, NQKV * 4, q));
        MC_BENCH_CHECK(cudaMemsetAsync(h, 0, FF * 4, q));
        run(form);
    };
    auto same = [&](std::vector<float> *a, std::vector<float> *b) {
        return memcmp(a[0].data(), b[0].data(), E * 4) == 0 && memcmp(a[1].data(), b[1].data(), NQKV * 4) == 0 &&
               memcmp(a[2].data(), b[2].data(), FF * 4) == 0;
    };
    int bad = 0;
    from_start(0);
    snapshot(ref);
    bool finite = true;
    for (float v : ref[0])
        finite = finite && v == v && v - v == 0.0f;
    printf("x after %d layers: x[0] %.6g x[1] %.6g, %s\n", L, ref[0][0], ref[0][1], finite ? "finite" : "NOT FINITE");
    bad += !finite;
    for (int form : {0, 1, 2, 4})
        for (int rep = 0; rep < 3; rep++) {
            from_start(form);
            snapshot(got);
            const bool eq = same(ref, got);
            if (!eq) {
                printf("BITS DIFFER: %s run %d against launch's first\n", names[form], rep);
                bad++;
            }
        }
    printf("bits: launch, launch0, persist, persist0 three runs each from the same start: %s\n",
           bad ? "DIFFER" : "equal");
    /* control: one weight of layer 0's wo one bf16 ulp off must change x */
    {
        unsigned short u;
        MC_BENCH_CHECK(cudaMemcpy(&u, (const void *)(hl[0].wo + 12345), 2, cudaMemcpyDeviceToHost));
        unsigned short u2 = u ^ 1u;
        MC_BENCH_CHECK(cudaMemcpy((void *)(hl[0].wo + 12345), &u2, 2, cudaMemcpyHostToDevice));
        from_start(0);
        snapshot(got);
        const bool caught = !same(ref, got);
        MC_BENCH_CHECK(cudaMemcpy((void *)(hl[0].wo + 12345), &u, 2, cudaMemcpyHostToDevice));
        printf("control (a flipped weight bit): %s\n", caught ? "caught" : "MISSED");
        bad += !caught;
    }
    cudaEvent_t e0, e1;
    MC_BENCH_CHECK(cudaEventCreate(&e0));
    MC_BENCH_CHECK(cudaEventCreate(&e1));
    for (int pass = 0; pass < 2; pass++)
        for (int form : {0, 4, 1, 2, 3}) {
            run(form);
            MC_BENCH_CHECK(cudaEventRecord(e0, q));
            for (int i = 0; i < R; i++)
                run(form);
            MC_BENCH_CHECK(cudaEventRecord(e1, q));
            MC_BENCH_CHECK(cudaEventSynchronize(e1));
            float ms;
            MC_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            const double us = ms * 1e3 / R / L;
            printf("pass %d %-9s %8.2f us a layer  %5.1f%% of the copy rate\n", pass, names[form], us,
                   layer_bytes / ceiling * 1e6 / us * 100.0);
        }
    printf("summary: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
