/* chain_bench.cu: what a launch's fixed cost is inside a decode layer's GEMV chain, and how much of
 * it a persistent kernel with grid barriers removes (issue 27 item 1). For L layers of a model's
 * shapes (BF16; attention left out: wo reads the q part of the qkv output), the chain
 *   qkv (+ RMSNorm of x) -> wo (+ residual into x) -> gate/up (+ norm, SwiGLU) -> down (+ residual)
 * runs these ways:
 *   (a) launch: one production launch a GEMV (mc_gemv / mc_gemv_swiglu, PDL) captured in a CUDA
 *       graph, replayed; (a') the same without PDL;
 *   (bN) one cooperative kernel (grid = the blocks that fit at once) running the same device body
 *       as the production kernel (gemv_persistent_body of gemv_body.cuh, each phase on the
 *       production launch's block count) phase after phase, a grid barrier between phases
 *       (integer arrive counters or flags and a generation word, acquire/release, no float
 *       atomics): N 0 one counter, 1 two levels of counters, 2 a flag a block gathered by block 0;
 *   (cN) (bN) with the barrier split: a block arrives when its phase is done, starts the next
 *       phase's body, whose first weights go into registers before it waits for the generation
 *       (where the launched kernel waits for the previous grid);
 *   (d) no grid barrier at all (timing only: a lower bound; its reads race);
 *   (e) (a)'s launches, but wo and down (the GEMVs whose input is the previous GEMV's output, not a
 *       norm of x) wait for their input by the producer's row groups instead of its whole grid:
 *       a producer block, at its end, adds its row groups to the counters of their outputs'
 *       chunks (32 counters a producer a layer, after a fence; zeroed by the graph's first node),
 *       and a consumer warp reads x's columns once the counters of their chunks are complete
 *       (acquire); it triggers its dependents at once and ends with the grid wait, so its
 *       completion still implies its producer's (the chain's hazards as in (a)). Each warp's dot
 *       keeps its order, so the bits are (a)'s. (ew) / (ed): wo's or down's only; (eg) a release
 *       a row group by the storing lane; (ex) (a)'s waits with (e)'s signals; (ey) the consumer's
 *       trigger at its end; (ec) x through L2 only; (en) polls without a sleep. Full chains only
 *       (a consumer alone would wait for ever). bench/gpu/NOTES.md, forty-sixth session.
 * Every variant but (d) must give (a)'s bits (x, the qkv output and the SwiGLU output compared
 * with memcmp, three runs each from the same start); then each is timed (us per layer) in full
 * and with one kind of phase alone (L phases of it), and the barrier alone (K empty phases; for
 * (a) K empty programmatic launches).
 *
 *   memra_cuda_chain_bench [1b|smol|270m|all] [replays]
 *
 * Exit 0 when every variant's bits equal (a)'s, 1 on a mismatch, 2 on usage, 3 on a CUDA error. */
#include <cuda/atomic>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "bench_common.cuh"
#include "cuda_common.cuh"
#include "gemv_body.cuh"

enum { K_QKV, K_WO, K_GU, K_DOWN, K_N };
static const char *const kind_name[K_N] = {"qkv +norm", "wo +res", "gate/up +norm swiglu", "down +res"};

struct cb_layer {
    mc_matrix m[K_N];
};

struct cb_args {
    const cb_layer *layers;
    uint32_t n_layer, mask; /* mask: the kinds run (bit per K_*); 0 with empty > 0: barriers only */
    uint32_t empty;
    float *x, *qkvb, *sw;
    const float *nw1, *nw2;
    float eps;
    uint32_t nb[K_N], ng[K_N]; /* the production launch's blocks and row groups of each kind */
    unsigned *bar;             /* the grid barrier's words (CB_GEN, CB_COUNT, ...) */
};

typedef cuda::atomic_ref<unsigned, cuda::thread_scope_device> cb_atomic;
typedef cuda::atomic_ref<unsigned, cuda::thread_scope_block> cb_atomic_cta;

/* The barrier's words (unsigned, each on its own 128-byte line): the generation (barriers
 * completed), the arrive counter, 16 group counters (BAR 1), a flag a block (BAR 2). */
#define CB_GEN 0
#define CB_COUNT 32
#define CB_SUB(i) (64 + 32 * (i))
#define CB_FLAG(b) (1024 + 32 * (b))
#define CB_BAR_WORDS (1024 + 32 * 1024)
#define CB_GROUPS 16u

__device__ __forceinline__ void cb_spin(unsigned *w, unsigned target) {
    cb_atomic g(*w);
    while ((int)(g.load(cuda::memory_order_acquire) - target) < 0) {
    }
}

/* A block's arrival at the barrier that completes when the generation reaches target, once every
 * thread of the block has finished the phase (bar.sync): its writes are released with the
 * arrival, and the completion is published with a release store of the generation.
 *   BAR 0: one counter; thread 0 adds one (acq_rel); the last of G resets it and publishes.
 *   BAR 1: two levels: 16 group counters, the last of a group adds one to the counter of 16.
 *   BAR 2: no atomics: a flag a block (release store of target); block 0's threads acquire every
 *          flag, then thread 0 publishes. */
template <int BAR> __device__ __forceinline__ void cb_arrive(unsigned *bar, unsigned G, unsigned target) {
    __syncthreads();
    if (BAR == 2) {
        if (threadIdx.x == 0)
            cb_atomic(bar[CB_FLAG(blockIdx.x)]).store(target, cuda::memory_order_release);
        if (blockIdx.x == 0) {
            for (unsigned i = threadIdx.x; i < G; i += blockDim.x)
                cb_spin(&bar[CB_FLAG(i)], target);
            __syncthreads();
            if (threadIdx.x == 0)
                cb_atomic(bar[CB_GEN]).store(target, cuda::memory_order_release);
        }
        return;
    }
    if (threadIdx.x != 0)
        return;
    unsigned need = G;
    if (BAR == 1) {
        const unsigned grp = blockIdx.x % CB_GROUPS, size = G / CB_GROUPS + (grp < G % CB_GROUPS ? 1u : 0u);
        cb_atomic sc(bar[CB_SUB(grp)]);
        if (sc.fetch_add(1u, cuda::memory_order_acq_rel) != size - 1)
            return;
        sc.store(0u, cuda::memory_order_relaxed);
        need = G < CB_GROUPS ? G : CB_GROUPS;
    }
    cb_atomic c(bar[CB_COUNT]);
    if (c.fetch_add(1u, cuda::memory_order_acq_rel) == need - 1) {
        c.store(0u, cuda::memory_order_relaxed);
        cb_atomic(bar[CB_GEN]).store(target, cuda::memory_order_release);
    }
}

/* The wait a GEMV body calls where a launched kernel waits for the previous grid. (b) has waited
 * as a block before the body (*done set). (c): thread 0 acquires the generation and passes it on
 * through a shared word (release, block scope); lane 0 of every other warp acquires that word,
 * then its warp follows. *done says whether the warp has waited. */
struct cb_wait {
    static constexpr int cg = 0;
    unsigned *gen, *shared_gen;
    unsigned target;
    bool *done;
    __device__ __forceinline__ void cols(uint32_t, uint32_t) {}
    __device__ __forceinline__ void stored(uint32_t) const {}
    __device__ __forceinline__ void operator()() const {
        if (*done)
            return;
        if (threadIdx.x == 0) {
            cb_spin(gen, target);
            cb_atomic_cta(*shared_gen).store(target, cuda::memory_order_release);
        } else if ((threadIdx.x & 31) == 0) {
            cb_atomic_cta s(*shared_gen);
            while ((int)(s.load(cuda::memory_order_acquire) - target) < 0) {
            }
        }
        __syncwarp();
        *done = true;
    }
};

/* One phase of kind KIND with KS warps a row group. */
template <int KIND, int KS> __device__ __forceinline__ void cb_phase(const cb_args &a, const cb_layer &l, cb_wait w) {
    const uint32_t bid = blockIdx.x;
    if (bid >= a.nb[KIND])
        return; /* the production grid has fewer blocks: this one idles (and still waits) */
    const mc_matrix &m = l.m[KIND];
    if (KIND == K_QKV)
        gemv_persistent_body<MEMRA_TYPE_BF16, 0, 1, KS>(m, a.x, a.nw1, a.eps, NULL, NULL, a.qkvb, a.ng[KIND], bid,
                                                        a.nb[KIND], w);
    else if (KIND == K_WO)
        gemv_persistent_body<MEMRA_TYPE_BF16, 0, 0, KS>(m, a.qkvb, NULL, 0.0f, NULL, a.x, a.x, a.ng[KIND], bid,
                                                        a.nb[KIND], w);
    else if (KIND == K_GU)
        gemv_persistent_body<MEMRA_TYPE_BF16, MC_GLU_SILU, 1, KS>(m, a.x, a.nw2, a.eps, NULL, NULL, a.sw, a.ng[KIND],
                                                                  bid, a.nb[KIND], w);
    else
        gemv_persistent_body<MEMRA_TYPE_BF16, 0, 0, KS>(m, a.sw, NULL, 0.0f, NULL, a.x, a.x, a.ng[KIND], bid,
                                                        a.nb[KIND], w);
}

/* SPLIT 0: (b), the block waits at the barrier; SPLIT 1: (c), split (arrive, the next phase's
 * first loads, then the wait); SPLIT 2: (d), no grid barrier at all, only the block's own
 * bar.sync between phases (a lower bound for timing: blocks run ahead, their reads race, the bits
 * are not checked). BAR: cb_arrive's barrier. */
template <int SPLIT, int BAR, int KQ, int KO, int KG, int KD>
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS, 4) cb_persistent(const cb_args a) {
    __shared__ unsigned shared_gen;
    const unsigned G = gridDim.x;
    unsigned *gen = a.bar + CB_GEN;
    const unsigned base = cb_atomic(*gen).load(cuda::memory_order_acquire); /* before this block's first arrival */
    if (threadIdx.x == 0)
        shared_gen = base;
    __syncthreads();
    unsigned n = 0; /* phases begun */
    auto barrier = [&](bool &done) {
        /* before phase n > 0: arrive at barrier n (generation base + n); (b) waits here */
        done = true;
        if (n == 0)
            return;
        if (SPLIT == 2) {
            __syncthreads();
            return;
        }
        cb_arrive<BAR>(a.bar, G, base + n);
        if (SPLIT) {
            done = false;
            return;
        }
        if (threadIdx.x == 0)
            cb_spin(gen, base + n);
        __syncthreads();
    };
    if (a.mask == 0) {
        for (uint32_t k = 0; k <= a.empty; k++, n++) {
            bool done;
            barrier(done);
            cb_wait{gen, &shared_gen, base + n, &done}();
        }
        return;
    }
    for (uint32_t L = 0; L < a.n_layer; L++) {
        const cb_layer &l = a.layers[L];
#define CB_PHASE(K, KS)                                                                                                \
    if (a.mask >> K & 1) {                                                                                             \
        bool done;                                                                                                     \
        barrier(done);                                                                                                 \
        const cb_wait w{gen, &shared_gen, base + n, &done};                                                            \
        cb_phase<K, KS>(a, l, w);                                                                                      \
        w(); /* a warp without rows still waits before its block arrives again */                                      \
        n++;                                                                                                           \
    }
        CB_PHASE(K_QKV, KQ)
        CB_PHASE(K_WO, KO)
        CB_PHASE(K_GU, KG)
        CB_PHASE(K_DOWN, KD)
#undef CB_PHASE
    }
}

/* An empty programmatic launch: (a)'s barrier alone. */
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS, 4) cb_empty(void) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* (e)'s counters: 32 a producer a layer (qkv's for wo, gate/up's for down), each on its own
 * 32-byte sector, zeroed by the graph's first node every replay. */
#define CB_FSTRIDE 8u
#define CB_FWORDS(L) ((size_t)(L)*2u * 32u * CB_FSTRIDE)

struct cb_fwait_state {
    unsigned *in;                 /* the producer's 32 counters; NULL: the programmatic grid wait */
    unsigned *out;                /* this grid's counters for its consumer; NULL: none */
    uint32_t in_ch, in_n, in_opg; /* the producer's chunk (outputs), outputs, outputs a row group */
    uint32_t out_ch, out_opg;
    uint32_t per_group; /* 1: a producer's storing lane signals each row group (release), else its block at the end */
    uint32_t late;      /* a consumer on flags triggers its dependents at its end (1) or its start (0) */
    uint32_t nosleep;   /* 1: a consumer polls again at once */
    unsigned ready;     /* the producer's chunks this warp has seen complete (warp-uniform) */
    __device__ __forceinline__ void operator()() const {
        if (in)
            return;
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    }
    /* Every lane of a warp, before it reads x's columns c0 .. c0+n-1: where a chunk the columns
     * need is not yet in the warp's mask, every chunk missing from it is polled at once (lane j
     * chunk j, acquire: one L2 round trip), with a doubling sleep between rounds. */
    __device__ __forceinline__ void cols(uint32_t c0, uint32_t n) {
        if (!in)
            return;
        const uint32_t f = c0 / in_ch, l = (c0 + n - 1) / in_ch < 31 ? (c0 + n - 1) / in_ch : 31;
        const unsigned need = (l == 31 ? ~0u : (2u << l) - 1u) & ~((1u << f) - 1u);
        if ((ready & need) == need)
            return;
        const uint32_t j = threadIdx.x & 31, o = j * in_ch < in_n ? in_n - j * in_ch : 0;
        const unsigned target = ((o < in_ch ? o : in_ch) + in_opg - 1) / in_opg;
        unsigned want = ~ready, sleep = 64;
        for (;;) {
            const bool mine = want >> j & 1u;
            const bool ok = mine && cb_atomic(in[j * CB_FSTRIDE]).load(cuda::memory_order_acquire) >= target;
            ready |= __ballot_sync(0xffffffffu, ok);
            if ((ready & need) == need)
                break;
            want = ~ready; /* every missing chunk: the warp's later columns find theirs in the mask */
            if (!nosleep)
                __nanosleep(sleep);
            sleep = sleep < 1024 ? 2 * sleep : sleep;
        }
        __syncwarp(); /* the acquires before every lane's reads of x */
    }
    __device__ __forceinline__ void stored(uint32_t r0) const {
        if (out && per_group)
            asm volatile(
                "red.release.gpu.global.add.u32 [%0], 1;" ::"l"(out + r0 / MC_GEMV_ROWS * out_opg / out_ch * CB_FSTRIDE)
                : "memory");
    }
    /* The block's signal at its end (per_group 0): every thread, after its rows are stored; thread
     * 0 adds the block's row groups [g0, g1) to their chunks' counters after a fence that orders
     * the block's stores first (the barrier makes them thread 0's to release). */
    __device__ __forceinline__ void block_done(uint32_t g0, uint32_t g1) const {
        if (!out || per_group)
            return;
        __syncthreads();
        if (threadIdx.x != 0 || g1 <= g0)
            return;
        __threadfence();
        const uint32_t gc = out_ch / out_opg; /* row groups a chunk */
        for (uint32_t c = g0 / gc; c * gc < g1; c++) {
            const uint32_t a = c * gc > g0 ? c * gc : g0, b = (c + 1) * gc < g1 ? (c + 1) * gc : g1;
            atomicAdd(out + c * CB_FSTRIDE, b - a);
        }
    }
};

/* The wait gemv_persistent_body takes: the state, and how x is read where another grid still
 * writes it (1 plain loads after the acquire, 2 through L2 only; 0 __ldg, as in production). */
template <int CG> struct cb_fwait : cb_fwait_state { static constexpr int cg = CG; };

struct cb_fargs {
    mc_matrix m;
    const float *x, *nw, *residual;
    float *y;
    float eps;
    uint32_t ng;
    cb_fwait_state w;
};

/* One GEMV of (e): gemv_persistent_body on the production grid with cb_fwait. A consumer on flags
 * triggers its dependents at once (they wait for its grid) and waits for its producer's grid at the
 * end, so that its completion implies the producer's. */
template <int KIND, int KS, int CG>
__global__ void __launch_bounds__(32 * MC_GEMV_WARPS, 4) cb_fkernel(const cb_fargs a) {
    cb_fwait<CG> w;
    (cb_fwait_state &)w = a.w;
    if (a.w.in && !a.w.late)
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (KIND == K_QKV)
        gemv_persistent_body<MEMRA_TYPE_BF16, 0, 1, KS>(a.m, a.x, a.nw, a.eps, NULL, NULL, a.y, a.ng, blockIdx.x,
                                                        gridDim.x, w);
    else if (KIND == K_GU)
        gemv_persistent_body<MEMRA_TYPE_BF16, MC_GLU_SILU, 1, KS>(a.m, a.x, a.nw, a.eps, NULL, NULL, a.y, a.ng,
                                                                  blockIdx.x, gridDim.x, w);
    else
        gemv_persistent_body<MEMRA_TYPE_BF16, 0, 0, KS>(a.m, a.x, NULL, 0.0f, NULL, a.residual, a.y, a.ng, blockIdx.x,
                                                        gridDim.x, w);
    a.w.block_done((uint32_t)((uint64_t)a.ng * blockIdx.x / gridDim.x),
                   (uint32_t)((uint64_t)a.ng * (blockIdx.x + 1) / gridDim.x));
    if (a.w.in && a.w.late)
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (a.w.in)
        asm volatile("griddepcontrol.wait;" ::: "memory");
}

struct cb_shape {
    const char *name;
    uint32_t n_embd, n_q, n_qkv, n_ff, n_layer;
};

typedef void (*cb_kernel)(const cb_args);

#define CB_NV 17 /* (a), (b0) .. (c2), (d), (a) without PDL, (e), (ew), (ed), (eg), (ex), (ey), (ec), (en) */
#define CB_RACY 7
#define CB_NOPDL 8
/* (e) both consumers on flags; CB_FLAGS + 1 wo only, + 2 down only, + 3 (e) with a signal a row group,
 * + 4 (a)'s waits with (e)'s producer signals, + 5 (e) with the consumers' trigger at their end, + 6 (e) with
 * x read through L2 only, + 7 (e) polling without a sleep */
#define CB_FLAGS 9

struct cb_bench {
    cb_shape s;
    std::vector<cb_layer> host;
    cb_layer *layers;
    float *x, *x0, *qkvb, *sw, *nw1, *nw2;
    unsigned *bar; /* CB_BAR_WORDS */
    uint32_t ks[K_N], nb[K_N], ng[K_N];
    cb_kernel k[CB_NV];                 /* the persistent variants, k[1] .. k[CB_RACY] */
    void (*fk[K_N][3])(const cb_fargs); /* (e)'s kernels, [kind][cb_fwait's cg] */
    unsigned *fcnt;                     /* (e)'s counters, CB_FWORDS(n_layer) */
    uint32_t G;
    cudaStream_t st;
    mc_config cfg;
};

static cb_args cb_make_args(const cb_bench &b, uint32_t mask, uint32_t empty) {
    cb_args a;
    memset(&a, 0, sizeof a);
    a.layers = b.layers;
    a.n_layer = b.s.n_layer;
    a.mask = mask;
    a.empty = empty;
    a.x = b.x;
    a.qkvb = b.qkvb;
    a.sw = b.sw;
    a.nw1 = b.nw1;
    a.nw2 = b.nw2;
    a.eps = 1e-5f;
    for (int k = 0; k < K_N; k++) {
        a.nb[k] = b.nb[k];
        a.ng[k] = b.ng[k];
    }
    a.bar = b.bar;
    return a;
}

/* Variant v of (e) .. (en) (CB_FLAGS's comment), the full chain only. */
static cudaError_t cb_enqueue_flags(cb_bench &b, int v) {
    const int e = v - CB_FLAGS;
    const bool fw = e != 2, fd = e != 1; /* wo on flags (qkv signals), down on flags (gate/up signals) */
    const bool signal_only = e == 4, l2only = e == 6;
    const uint32_t L = b.s.n_layer;
    MC_BENCH_CHECK(cudaMemsetAsync(b.fcnt, 0, 4 * CB_FWORDS(L), b.st));
    /* the producers' chunks: 32 cover the outputs, each whole row groups (4 outputs, 2 with the GLU) */
    const uint32_t qch = ((b.s.n_qkv + 31) / 32 + 3) / 4 * 4, fch = ((b.s.n_ff + 31) / 32 + 1) / 2 * 2;
    for (uint32_t l = 0; l < L; l++) {
        unsigned *cq = b.fcnt + (size_t)l * 64 * CB_FSTRIDE, *cg = cq + 32 * CB_FSTRIDE;
        for (int k = 0; k < K_N; k++) {
            cb_fargs a;
            memset(&a, 0, sizeof a);
            a.m = b.host[l].m[k];
            a.eps = 1e-5f;
            a.ng = b.ng[k];
            a.w.per_group = e == 3;
            a.w.late = e == 5;
            a.w.nosleep = e == 7;
            if (k == K_QKV) {
                a.x = b.x, a.nw = b.nw1, a.y = b.qkvb;
                a.w.out = fw ? cq : NULL, a.w.out_ch = qch, a.w.out_opg = MC_GEMV_ROWS;
            } else if (k == K_WO) {
                a.x = b.qkvb, a.residual = b.x, a.y = b.x;
                a.w.in = fw && !signal_only ? cq : NULL, a.w.in_ch = qch, a.w.in_n = b.s.n_qkv,
                a.w.in_opg = MC_GEMV_ROWS;
            } else if (k == K_GU) {
                a.x = b.x, a.nw = b.nw2, a.y = b.sw;
                a.w.out = fd ? cg : NULL, a.w.out_ch = fch, a.w.out_opg = MC_GEMV_ROWS / 2;
            } else {
                a.x = b.sw, a.residual = b.x, a.y = b.x;
                a.w.in = fd && !signal_only ? cg : NULL, a.w.in_ch = fch, a.w.in_n = b.s.n_ff,
                a.w.in_opg = MC_GEMV_ROWS / 2;
            }
            cudaLaunchConfig_t cfg;
            memset(&cfg, 0, sizeof cfg);
            cfg.gridDim = dim3(b.nb[k]);
            cfg.blockDim = dim3(32 * MC_GEMV_WARPS);
            cfg.stream = b.st;
            cudaLaunchAttribute attr[1];
            mc_launch_attrs_pdl(&cfg, attr, 0, true);
            MC_BENCH_CHECK(cudaLaunchKernelEx(&cfg, b.fk[k][a.w.in == NULL ? 0 : l2only ? 2 : 1], a));
        }
    }
    return cudaSuccess;
}

/* Variant v (0 a, 1 b, 2 c) of the chain with the kinds of mask (0: `empty` barriers or empty
 * launches) into the stream; the cooperative launch's status is returned (it may be refused
 * inside a capture). */
static cudaError_t cb_enqueue(cb_bench &b, int v, uint32_t mask, uint32_t empty) {
    if (v >= CB_FLAGS) {
        if (mask != (1u << K_N) - 1)
            return cudaErrorInvalidValue; /* a consumer alone would wait for ever */
        return cb_enqueue_flags(b, v);
    }
    if (v == 0 || v == CB_NOPDL) {
        b.cfg.pdl = v == 0 ? 1 : 0;
        if (mask == 0) {
            for (uint32_t k = 0; k < empty; k++) {
                cudaLaunchConfig_t cfg;
                memset(&cfg, 0, sizeof cfg);
                cfg.gridDim = dim3(b.G);
                cfg.blockDim = dim3(32 * MC_GEMV_WARPS);
                cfg.stream = b.st;
                cudaLaunchAttribute attr[1];
                mc_launch_attrs(&cfg, attr, 0, &b.cfg);
                MC_BENCH_CHECK(cudaLaunchKernelEx(&cfg, cb_empty));
            }
            return cudaSuccess;
        }
        for (uint32_t L = 0; L < b.s.n_layer; L++) {
            const cb_layer &l = b.host[L];
            if (mask >> K_QKV & 1)
                MC_BENCH_CHECK(mc_gemv(&b.cfg, &l.m[K_QKV], b.x, b.nw1, 1e-5f, NULL, NULL, b.qkvb, b.st));
            if (mask >> K_WO & 1)
                MC_BENCH_CHECK(mc_gemv(&b.cfg, &l.m[K_WO], b.qkvb, NULL, 0.0f, NULL, b.x, b.x, b.st));
            if (mask >> K_GU & 1)
                MC_BENCH_CHECK(mc_gemv_swiglu(&b.cfg, &l.m[K_GU], b.x, b.nw2, 1e-5f, b.sw, b.st));
            if (mask >> K_DOWN & 1)
                MC_BENCH_CHECK(mc_gemv(&b.cfg, &l.m[K_DOWN], b.sw, NULL, 0.0f, NULL, b.x, b.x, b.st));
        }
        return cudaSuccess;
    }
    const cb_args a = cb_make_args(b, mask, empty);
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(b.G);
    cfg.blockDim = dim3(32 * MC_GEMV_WARPS);
    cfg.stream = b.st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, b.k[v], a);
}

/* A replayable form of cb_enqueue(b, v, mask, empty): a graph, or (where a cooperative launch
 * cannot be captured) the direct launch each time. */
struct cb_run {
    cudaGraphExec_t ge;
    int v;
    uint32_t mask, empty;
};

static cb_run cb_graph(cb_bench &b, int v, uint32_t mask, uint32_t empty) {
    static bool said;
    cb_run r = {NULL, v, mask, empty};
    cudaGraph_t g = NULL;
    MC_BENCH_CHECK(cudaStreamBeginCapture(b.st, cudaStreamCaptureModeThreadLocal));
    const cudaError_t e = cb_enqueue(b, v, mask, empty);
    const cudaError_t e2 = cudaStreamEndCapture(b.st, &g);
    cudaError_t e3 = cudaErrorUnknown;
    if (e == cudaSuccess && e2 == cudaSuccess)
        e3 = cudaGraphInstantiate(&r.ge, g, 0);
    if (g)
        cudaGraphDestroy(g);
    if (e3 != cudaSuccess) {
        (void)cudaGetLastError();
        r.ge = NULL;
        if (v == 0)
            MC_BENCH_CHECK(e != cudaSuccess ? e : e2 != cudaSuccess ? e2 : e3);
        if (!said)
            printf("note: the cooperative launch was not captured (%s / %s / %s): launched directly\n",
                   cudaGetErrorString(e), cudaGetErrorString(e2), cudaGetErrorString(e3));
        said = true;
    }
    return r;
}

static void cb_replay(cb_bench &b, const cb_run &r) {
    if (r.ge)
        MC_BENCH_CHECK(cudaGraphLaunch(r.ge, b.st));
    else
        MC_BENCH_CHECK(cb_enqueue(b, r.v, r.mask, r.empty));
}

static void cb_free(cb_run &r) {
    if (r.ge)
        MC_BENCH_CHECK(cudaGraphExecDestroy(r.ge));
    r.ge = NULL;
}

/* Best of 3 passes of `reps` replays, in us per replay. */
static double cb_time(cb_bench &b, const cb_run &ge, int reps) {
    cudaEvent_t e0, e1;
    MC_BENCH_CHECK(cudaEventCreate(&e0));
    MC_BENCH_CHECK(cudaEventCreate(&e1));
    double best = 1e30;
    for (int pass = 0; pass < 4; pass++) { /* pass 0 warms up */
        MC_BENCH_CHECK(cudaMemcpyAsync(b.x, b.x0, 4 * 65536, cudaMemcpyDeviceToDevice, b.st));
        MC_BENCH_CHECK(cudaEventRecord(e0, b.st));
        for (int i = 0; i < reps; i++)
            cb_replay(b, ge);
        MC_BENCH_CHECK(cudaEventRecord(e1, b.st));
        MC_BENCH_CHECK(cudaEventSynchronize(e1));
        float ms;
        MC_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (pass > 0 && ms * 1e3 / reps < best)
            best = ms * 1e3 / reps;
    }
    MC_BENCH_CHECK(cudaEventDestroy(e0));
    MC_BENCH_CHECK(cudaEventDestroy(e1));
    return best;
}

/* One run of variant v's full chain from the start state; the outputs into out. */
static void cb_run_once(cb_bench &b, const cb_run &ge, std::vector<char> &out) {
    const size_t xb = 4 * 65536;
    MC_BENCH_CHECK(cudaMemcpyAsync(b.x, b.x0, xb, cudaMemcpyDeviceToDevice, b.st));
    MC_BENCH_CHECK(cudaMemsetAsync(b.qkvb, 0, xb, b.st));
    MC_BENCH_CHECK(cudaMemsetAsync(b.sw, 0, xb, b.st));
    cb_replay(b, ge);
    MC_BENCH_CHECK(cudaStreamSynchronize(b.st));
    out.resize(3 * xb);
    MC_BENCH_CHECK(cudaMemcpy(out.data(), b.x, xb, cudaMemcpyDeviceToHost));
    MC_BENCH_CHECK(cudaMemcpy(out.data() + xb, b.qkvb, xb, cudaMemcpyDeviceToHost));
    MC_BENCH_CHECK(cudaMemcpy(out.data() + 2 * xb, b.sw, xb, cudaMemcpyDeviceToHost));
}

template <int KQ, int KO, int KG, int KD> static void cb_kernels(cb_bench &b) {
    b.fk[K_QKV][0] = cb_fkernel<K_QKV, KQ, 0>;
    b.fk[K_QKV][1] = b.fk[K_QKV][2] = NULL;
    b.fk[K_WO][0] = cb_fkernel<K_WO, KO, 0>;
    b.fk[K_WO][1] = cb_fkernel<K_WO, KO, 1>;
    b.fk[K_WO][2] = cb_fkernel<K_WO, KO, 2>;
    b.fk[K_GU][0] = cb_fkernel<K_GU, KG, 0>;
    b.fk[K_GU][1] = b.fk[K_GU][2] = NULL;
    b.fk[K_DOWN][0] = cb_fkernel<K_DOWN, KD, 0>;
    b.fk[K_DOWN][1] = cb_fkernel<K_DOWN, KD, 1>;
    b.fk[K_DOWN][2] = cb_fkernel<K_DOWN, KD, 2>;
    b.k[1] = cb_persistent<0, 0, KQ, KO, KG, KD>;
    b.k[2] = cb_persistent<1, 0, KQ, KO, KG, KD>;
    b.k[3] = cb_persistent<0, 1, KQ, KO, KG, KD>;
    b.k[4] = cb_persistent<1, 1, KQ, KO, KG, KD>;
    b.k[5] = cb_persistent<0, 2, KQ, KO, KG, KD>;
    b.k[6] = cb_persistent<1, 2, KQ, KO, KG, KD>;
    b.k[7] = cb_persistent<2, 0, KQ, KO, KG, KD>;
}

static uint32_t cb_ksplit(uint32_t rows) { return mc_gemv_ksplit(rows); }

/* Returns 0 when the bits of (b) and (c) equal (a)'s, 1 otherwise. */
static int cb_preset(const cb_shape &s, int reps, double ceiling) {
    cb_bench b = {};
    b.s = s;
    b.cfg = mc_config_default;
    MC_BENCH_CHECK(cudaStreamCreate(&b.st));
    const uint32_t rows[K_N] = {s.n_qkv, s.n_embd, 2 * s.n_ff, s.n_embd};
    const uint32_t cols[K_N] = {s.n_embd, s.n_q, s.n_embd, s.n_ff};
    int dev = 0, sms = 0;
    MC_BENCH_CHECK(cudaGetDevice(&dev));
    MC_BENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    double layer_bytes = 0;
    for (int k = 0; k < K_N; k++) {
        b.ks[k] = cb_ksplit(rows[k]);
        b.ng[k] = (rows[k] + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS;
        const uint32_t slots = MC_GEMV_WARPS / b.ks[k], need = (b.ng[k] + slots - 1) / slots, cap = 4u * sms;
        b.nb[k] = need < cap ? need : cap; /* mc_gemv_persistent_t's grid */
        /* gemv=auto takes the persistent kernel when a warp has at most 4 iterations a row group */
        const uint32_t nfull = cols[k] / 8;
        if ((nfull + 64 * b.ks[k] - 1) / (64 * b.ks[k]) > 4) {
            fprintf(stderr,
                    "chain_bench: %s %s: the production GEMV is the row-group kernel, not the persistent body\n",
                    s.name, kind_name[k]);
            exit(2);
        }
        layer_bytes += 2.0 * rows[k] * cols[k];
    }
#define CB_KS(q, o, g, d) (b.ks[0] == q && b.ks[1] == o && b.ks[2] == g && b.ks[3] == d)
    if (CB_KS(2, 4, 1, 4))
        cb_kernels<2, 4, 1, 4>(b);
    else if (CB_KS(4, 4, 2, 4))
        cb_kernels<4, 4, 2, 4>(b);
    else {
        fprintf(stderr, "chain_bench: %s: no kernel for KS %u %u %u %u\n", s.name, b.ks[0], b.ks[1], b.ks[2], b.ks[3]);
        exit(2);
    }
#undef CB_KS
    int occ = 4, regs = 0;
    for (int v = 1; v <= CB_RACY; v++) {
        int o = 0;
        MC_BENCH_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o, b.k[v], 32 * MC_GEMV_WARPS, 0));
        occ = o < occ ? o : occ;
        cudaFuncAttributes fa;
        MC_BENCH_CHECK(cudaFuncGetAttributes(&fa, b.k[v]));
        regs = fa.numRegs > regs ? fa.numRegs : regs;
    }
    if (occ < 1) {
        fprintf(stderr, "chain_bench: the persistent kernel does not fit a multiprocessor\n");
        exit(3);
    }
    b.G = (uint32_t)((occ < 4 ? occ : 4) * sms);
    for (int k = 0; k < K_N; k++)
        if (b.nb[k] > b.G)
            b.nb[k] = b.G; /* fewer blocks than production fit at once: same bits, another split */
    printf("\n== %s: %u layers, BF16; qkv %ux%u, wo %ux%u, gate/up %ux%u, down %ux%u; %.2f MB a layer\n", s.name,
           s.n_layer, rows[0], cols[0], rows[1], cols[1], rows[2], cols[2], rows[3], cols[3], layer_bytes / 1e6);
    printf("KS %u %u %u %u, production blocks %u %u %u %u; persistent grid %u (%d a multiprocessor, at most %d "
           "registers)\n",
           b.ks[0], b.ks[1], b.ks[2], b.ks[3], b.nb[0], b.nb[1], b.nb[2], b.nb[3], b.G, occ, regs);

    b.host.resize(s.n_layer);
    for (uint32_t L = 0; L < s.n_layer; L++)
        for (int k = 0; k < K_N; k++) {
            mc_matrix *m = &b.host[L].m[k];
            memset(m, 0, sizeof *m);
            m->type = MEMRA_TYPE_BF16;
            m->rows = rows[k];
            m->cols = cols[k];
            m->stride = (cols[k] + 7) / 8 * 8;
            const size_t bytes = (size_t)rows[k] * m->stride * 2;
            MC_BENCH_CHECK(cudaMalloc(&m->data, bytes));
            mc_bench_fill(m->data, bytes, 17 + 7 * L + k, 0x807f807fu, 0x3c003c00u);
        }
    MC_BENCH_CHECK(cudaMalloc(&b.layers, sizeof(cb_layer) * s.n_layer));
    MC_BENCH_CHECK(cudaMemcpy(b.layers, b.host.data(), sizeof(cb_layer) * s.n_layer, cudaMemcpyHostToDevice));
    const size_t xb = 4 * 65536;
    MC_BENCH_CHECK(cudaMalloc(&b.x, xb));
    MC_BENCH_CHECK(cudaMalloc(&b.x0, xb));
    MC_BENCH_CHECK(cudaMalloc(&b.qkvb, xb));
    MC_BENCH_CHECK(cudaMalloc(&b.sw, xb));
    MC_BENCH_CHECK(cudaMalloc(&b.nw1, xb));
    MC_BENCH_CHECK(cudaMalloc(&b.nw2, xb));
    MC_BENCH_CHECK(cudaMalloc(&b.bar, 4 * CB_BAR_WORDS));
    MC_BENCH_CHECK(cudaMemset(b.bar, 0, 4 * CB_BAR_WORDS));
    MC_BENCH_CHECK(cudaMalloc(&b.fcnt, 4 * CB_FWORDS(s.n_layer)));
    for (int k = 0; k < K_N; k++) /* (e)'s x reads are whole lane chunks: no tail columns */
        if (cols[k] % 8 != 0) {
            fprintf(stderr, "chain_bench: %s %s: %u columns, not a multiple of 8\n", s.name, kind_name[k], cols[k]);
            exit(2);
        }
    mc_bench_fill(b.x0, xb, 1, 0x807fffffu, 0x3e000000u);
    mc_bench_fill(b.nw1, xb, 2, 0x007fffffu, 0x3f800000u); /* [1, 2) */
    mc_bench_fill(b.nw2, xb, 3, 0x007fffffu, 0x3f800000u);
    MC_BENCH_CHECK(cudaDeviceSynchronize());

    const uint32_t ALL = (1u << K_N) - 1;
    static const char *const vname[CB_NV] = {
        "(a) launch+PDL, graph",   "(b0) barrier, 1 counter", "(c0) split, 1 counter",  "(b1) barrier, 2 levels",
        "(c1) split, 2 levels",    "(b2) barrier, flags",     "(c2) split, flags",      "(d) no grid barrier",
        "(a') launch, no PDL",     "(e) PDL, wo+down flags",  "(ew) PDL, wo flags",     "(ed) PDL, down flags",
        "(eg) (e), group signals", "(ex) (a) + signals",      "(ey) (e), late trigger", "(ec) (e), x by ld.cg",
        "(en) (e), no sleep"};
    /* the bits: three runs of each from the same start against (a)'s first */
    std::vector<char> ref, out;
    int bad = 0;
    for (int v = 0; v < CB_NV; v++) {
        if (v == CB_RACY)
            continue;
        cb_run ge = cb_graph(b, v, ALL, 0);
        for (int r = 0; r < 3; r++) {
            cb_run_once(b, ge, v == 0 && r == 0 ? ref : out);
            if (v == 0 && r == 0) {
                double sum = 0;
                const float *xf = (const float *)ref.data();
                for (uint32_t i = 0; i < s.n_embd; i++)
                    sum += fabs(xf[i]);
                printf("x after the chain: mean |x| %.4g (finite: %s)\n", sum / s.n_embd, isfinite(sum) ? "yes" : "NO");
                continue;
            }
            if (memcmp(ref.data(), out.data(), ref.size())) {
                size_t i = 0;
                while (i < ref.size() && ref[i] == out[i])
                    i++;
                printf("BITS DIFFER: %s run %d against (a): first byte %zu (%s)\n", vname[v], r, i,
                       i < xb       ? "x"
                       : i < 2 * xb ? "qkv"
                                    : "swiglu");
                bad = 1;
            }
        }
        cb_free(ge);
    }
    printf("bits: (b0) .. (c2), (a') and (e) .. (en) %s (a) (x, qkv and SwiGLU outputs, 3 runs each)\n",
           bad ? "DIFFER from" : "equal to");
    { /* the negative control: one bit of one weight (layer 0's first qkv weight) flipped must show */
        uint16_t wv;
        MC_BENCH_CHECK(cudaMemcpy(&wv, b.host[0].m[K_QKV].data, 2, cudaMemcpyDeviceToHost));
        const uint16_t flipped = wv ^ 0x0040u;
        MC_BENCH_CHECK(cudaMemcpy(b.host[0].m[K_QKV].data, &flipped, 2, cudaMemcpyHostToDevice));
        cb_run ge = cb_graph(b, 0, ALL, 0);
        cb_run_once(b, ge, out);
        cb_free(ge);
        MC_BENCH_CHECK(cudaMemcpy(b.host[0].m[K_QKV].data, &wv, 2, cudaMemcpyHostToDevice));
        const bool caught = memcmp(ref.data(), out.data(), ref.size()) != 0;
        printf("control: a flipped weight bit %s\n", caught ? "is caught" : "WAS NOT CAUGHT");
        if (!caught)
            bad = 1;
    }

    /* the timings: us per layer, the full chain and each kind alone */
    printf("%-26s %10s", "us per layer", "chain");
    for (int k = 0; k < K_N; k++)
        printf(" %12.12s", kind_name[k]);
    printf(" %10s %9s\n", "sum alone", "%floor");
    double chain[CB_NV];
    for (int v = 0; v < CB_NV; v++) {
        double t[K_N + 1], sum = 0;
        for (int m = -1; m < K_N; m++) {
            if (v >= CB_FLAGS && m >= 0) { /* full chains only */
                t[m + 1] = 0.0;
                continue;
            }
            cb_run ge = cb_graph(b, v, m < 0 ? ALL : 1u << m, 0);
            t[m + 1] = cb_time(b, ge, reps) / s.n_layer;
            cb_free(ge);
            if (m >= 0)
                sum += t[m + 1];
        }
        chain[v] = t[0];
        printf("%-26s %10.2f", vname[v], t[0]);
        for (int k = 0; k < K_N; k++)
            if (v >= CB_FLAGS)
                printf(" %12s", "-");
            else
                printf(" %12.2f", t[k + 1]);
        if (v >= CB_FLAGS)
            printf(" %10s", "-");
        else
            printf(" %10.2f", sum);
        printf(" %8.1f%%\n", 100.0 * layer_bytes / ceiling * 1e6 / t[0]);
    }
    printf("floor (bytes at the copy rate): %.2f us a layer\n", layer_bytes / ceiling * 1e6);
    /* the barrier alone: K empty phases */
    const uint32_t K = 120;
    printf("empty phase (%u in a row), us:", K);
    for (int v = 0; v < CB_FLAGS; v++) {
        if (v == CB_RACY)
            continue;
        cb_run ge = cb_graph(b, v, 0, K);
        printf(" %.5s %.2f", vname[v], cb_time(b, ge, reps) / K);
        cb_free(ge);
    }
    printf("\nsummary %s: us/layer", s.name);
    for (int v = 0; v < CB_NV; v++)
        printf(" %.4s %.2f", vname[v], chain[v]);
    printf("\n");

    for (uint32_t L = 0; L < s.n_layer; L++)
        for (int k = 0; k < K_N; k++)
            cudaFree(b.host[L].m[k].data);
    cudaFree(b.layers);
    cudaFree(b.x);
    cudaFree(b.x0);
    cudaFree(b.qkvb);
    cudaFree(b.sw);
    cudaFree(b.nw1);
    cudaFree(b.nw2);
    cudaFree(b.bar);
    cudaFree(b.fcnt);
    cudaStreamDestroy(b.st);
    return bad;
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    const int reps = argc > 2 ? atoi(argv[2]) : 20;
    static const cb_shape shapes[] = {
        {"llama-1b", 2048, 2048, 3072, 8192, 16}, /* 32 q heads of 64, 8 kv heads */
        {"smol", 576, 576, 960, 1536, 30},        /* SmolLM2-135M: 9 q heads of 64, 3 kv heads */
        {"270m", 640, 1024, 1536, 2048, 18},      /* gemma3-270m: 4 q heads of 256, 1 kv head */
    };
    if (reps < 1 || reps > 10000) {
        fprintf(stderr, "chain_bench: replays %s: expected 1 to 10000\n", argv[2]);
        return 2;
    }
    int found = 0, bad = 0;
    MC_BENCH_CHECK(mc_gemv_prepare());
    int coop = 0, dev = 0;
    MC_BENCH_CHECK(cudaGetDevice(&dev));
    MC_BENCH_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    if (!coop) {
        fprintf(stderr, "chain_bench: the device has no cooperative launch\n");
        return 3;
    }
    const double ceiling = mc_bench_copy_ceiling(0);
    printf("chain_bench: ceiling %.1f GB/s (1 GiB copy), %d replays a timing (best of 3)\n", ceiling / 1e9, reps);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const bool pick = !strcmp(which, "all") || !strcmp(which, shapes[i].name) || (!strcmp(which, "1b") && i == 0);
        if (!pick)
            continue;
        found = 1;
        bad |= cb_preset(shapes[i], reps, ceiling);
    }
    if (!found) {
        fprintf(stderr, "chain_bench: '%s': expected 1b, smol, 270m or all\n", which);
        return 2;
    }
    return bad;
}
