/* wofuse_bench.cu: what a decode layer would gain if the output projection ran in attention's
 * epilogue instead of a launch of its own (issue 27 item 1: fewer dependent launches a layer).
 *
 * Two shapes, BF16 weights, an f32 KV cache at 512 positions, L layers each with its own weights
 * and cache: llama-1b (2048 wide, 32 q heads of 64 on 8 kv heads, 8192 FFN; a cluster a kv head)
 * and gemma3-270m (640 wide, 4 q heads of 256 on one kv head, 2048 FFN; a cluster a q head, as
 * attention=heads runs it; the post norms left out). A layer is
 *   qkv (production mc_gemv, the norm fused) -> attention -> [wo] -> gate/up (mc_gemv_swiglu, norm)
 *   -> down (mc_gemv, residual)
 * where attention is a stand-in cluster kernel built like the production one (a cluster of 8 blocks
 * a kv head, block b the positions [64 b, 64 b + 64), its K and V rows by cp.async before the grid
 * wait, the blocks' partial softmax states merged through distributed shared memory), and:
 *   (u) unfused: the cluster's rank 0 writes its 256 outputs; the production wo GEMV (mc_gemv with
 *       the residual) follows as its own launch, started early where production's attention lets
 *       it (an output of 1024 floats or fewer: gemma3-270m);
 *   (f) fused: block b of cluster c also holds wo[RB b .. RB b + RB - 1][256 c .. 256 c + 255]
 *       (RB = width / 8 rows: 128 KB on llama-1b, 40 KB on gemma3-270m, queued by cp.async before
 *       the grid wait with the K and V rows), multiplies it by the cluster's outputs into a partial
 *       row, and takes an integer ticket on row range b; the last cluster to arrive adds the
 *       clusters' partials in cluster order and the residual: x[r] += sum_c p_c[r]. No float
 *       atomics; the order is fixed, so (f) is deterministic, but it is not (u)'s order: (u) and
 *       (f) agree to rounding only;
 *   (q) (f), and the q/k/v launch gone too: each block of the cluster computes RQ / 8 of the
 *       cluster's q, k and v rows (its q heads', and its kv head's k and v: 384 rows of 2048 on
 *       llama-1b, 768 of 640 on gemma3-270m, where each q head's cluster computes the kv head's
 *       rows again) from x' = RMSNorm(x) w after the grid wait, its weights streamed from global
 *       memory (no room left in shared memory), and the cluster gathers q through distributed
 *       shared memory: a layer of three launches, attention on 64 (32) multiprocessors.
 * Printed: us per layer of the whole chain under (u), (f) and (q), and of the attention launch
 * alone, (u)'s attention + wo, (f)'s and (q)'s attention; the NMSE of x between (u) and (f), (q)
 * after the chain; whether three runs of (f) and of (q) give the same bits; and a control: one bit
 * of layer 0's wo flipped must change (f)'s x.
 *
 *   memra_cuda_wofuse_bench [replays]
 *
 * Exit 0 when (f) and (q) are deterministic, within an NMSE of 1e-4 of (u) (the same sums in
 * another order, amplified over the layers by the random weights; a wrong slice gives ~1) and the
 * control is caught, 1 otherwise, 2 on usage, 3 on a CUDA error. A measurement tool for a design
 * decision: none of this is a production path. */
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "bench_common.cuh"
#include "cuda_common.cuh"

namespace cg = cooperative_groups;

/* The shapes. A cluster of CL blocks serves HPC q heads (GD = HPC D outputs); C clusters. wo's
 * slice of block b of cluster c: rows RB b .. RB b + RB - 1, columns GD c .. GD c + GD - 1. */
struct wf_1b { /* llama-1b: a cluster a kv head (its 4 q heads) */
    static constexpr const char *name = "llama-1b";
    static constexpr uint32_t E = 2048, NH = 32, NKV = 8, D = 64, HPC = 4, QKV = 3072, FF = 8192, NL = 16;
};
struct wf_270m { /* gemma3-270m's shapes: a cluster a q head (attention=heads, auto at head size 256) */
    static constexpr const char *name = "gemma3-270m";
    static constexpr uint32_t E = 640, NH = 4, NKV = 1, D = 256, HPC = 1, QKV = 1536, FF = 2048, NL = 18;
};
#define WF_P 512u /* positions attended */
#define WF_CL 8u  /* blocks a cluster */
#define WF_PB 64u /* positions a block (P / CL) */
#define WF_T 256u /* threads a block */

template <class SH> struct wf_dim {
    static constexpr uint32_t GD = SH::HPC * SH::D, C = SH::NH / SH::HPC, RB = SH::E / WF_CL, G = SH::NH / SH::NKV;
    /* dynamic shared memory (bytes): K, V tiles (f32), q, the partial state (max, sum, out), the
     * scores, the merged outputs, the ticket's verdict, then (fused) wo's slice (RB x GD bf16) */
    static constexpr uint32_t K = 0, V = K + WF_PB * SH::D * 4, Q = V + WF_PB * SH::D * 4, PM = Q + GD * 4,
                              PL = PM + 16, PO = PL + 16, S = PO + GD * 4, OV = S + SH::HPC * WF_PB * 4,
                              FLAG = OV + GD * 4, W = FLAG + 16, SMEM_U = W, SMEM_F = W + RB * GD * 2;
    /* FUSE 2 (the cluster's q, k and v rows too): x' (E floats), then the block's rows' results */
    static constexpr uint32_t RQ = GD + 2 * SH::D, RQB = RQ / WF_CL, XN = SMEM_F, QR = XN + SH::E * 4,
                              SMEM_Q = QR + (RQB * 4 + 15) / 16 * 16;
    static_assert(GD == 256 && WF_T == 256 && SH::HPC <= 4 && RB <= WF_T && RB % 8 == 0 && SH::E % WF_CL == 0 &&
                      RQ % WF_CL == 0 && SH::E % 8 == 0,
                  "the stand-in's thread maps");
};

struct wf_layer {
    mc_matrix qkv, wo, gu, down;
    float *kc, *vc; /* [kv][P][D] */
};

__device__ __forceinline__ void wf_cp16(void *s, const void *g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((uint32_t)__cvta_generic_to_shared(s)), "l"(g)
                 : "memory");
}

/* a + the dot of 8 bf16 weights (u) with xv[0 .. 7], one fma after another */
__device__ __forceinline__ float wf_dot8(const uint4 &u, const float *xv, float a) {
    const __nv_bfloat162 *w2 = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(w2[i]);
        a = fmaf(f.x, xv[2 * i], a);
        a = fmaf(f.y, xv[2 * i + 1], a);
    }
    return a;
}

/* the warp's sum of a by a fixed xor tree (every lane holds it) */
__device__ __forceinline__ float wf_warp_sum(float a) {
    for (int o = 16; o; o >>= 1)
        a += __shfl_xor_sync(0xffffffffu, a, o);
    return a;
}

/* The stand-in attention of one layer (and, FUSE, its output projection with the residual). */
template <class SH, int FUSE>
__global__ void __launch_bounds__(WF_T, 1)
    wf_att(const float *qkvb, const float *kc, const float *vc, float *att_out, const __nv_bfloat16 *wo, float *pw,
           unsigned *cnt, float *x, const __nv_bfloat16 *wqkv, const float *nw) {
    typedef wf_dim<SH> W;
    constexpr uint32_t D = SH::D, HPC = SH::HPC, GD = W::GD, RB = W::RB;
    extern __shared__ __align__(16) unsigned char sm[];
    cg::cluster_group cl = cg::this_cluster();
    const uint32_t b = cl.block_rank(), c = blockIdx.x / WF_CL, t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const uint32_t kvh = c * HPC / W::G; /* the cluster's kv head */
    float *Ks = (float *)(sm + W::K), *Vs = (float *)(sm + W::V), *q = (float *)(sm + W::Q);
    float *pm = (float *)(sm + W::PM), *pl = (float *)(sm + W::PL), *po = (float *)(sm + W::PO);
    float *S = (float *)(sm + W::S), *ov = (float *)(sm + W::OV);
    unsigned *flag = (unsigned *)(sm + W::FLAG);
    /* before the wait: this block's K and V rows (written by earlier steps) and, fused, wo's slice */
    const float *kg = kc + ((size_t)kvh * WF_P + b * WF_PB) * D, *vg = vc + ((size_t)kvh * WF_P + b * WF_PB) * D;
    for (uint32_t i = t; i < WF_PB * D / 4; i += WF_T) {
        wf_cp16(Ks + 4 * i, kg + 4 * i);
        wf_cp16(Vs + 4 * i, vg + 4 * i);
    }
    if (FUSE) {
        __nv_bfloat16 *Ws = (__nv_bfloat16 *)(sm + W::W);
        for (uint32_t i = t; i < RB * GD / 8; i += WF_T) { /* row r, chunk k of 8 */
            const uint32_t r = i / (GD / 8), k = i % (GD / 8);
            wf_cp16(Ws + r * GD + 8 * k, wo + (size_t)(RB * b + r) * (SH::NH * D) + GD * c + 8 * k);
        }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (!FUSE && (SH::NH * D <= 1024 || SH::NH * D >= 4096)) /* production's rule (MC_ATT_SHAPED, trigger=115) */
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (FUSE == 2) { /* the cluster's q, k and v rows from x' = RMSNorm(x) nw, RQB of them a block */
        float *xn = (float *)(sm + W::XN), *qr = (float *)(sm + W::QR);
        float ss = 0.0f;
        for (uint32_t i = t; i < SH::E; i += WF_T) {
            const float v = x[i];
            xn[i] = v;
            ss = fmaf(v, v, ss);
        }
        ss = wf_warp_sum(ss);
        float *red = (float *)(sm + W::S); /* the scores' space, free until the scores */
        if (lane == 0)
            red[warp] = ss;
        __syncthreads();
        float tot = 0.0f;
        for (uint32_t w = 0; w < WF_T / 32; w++)
            tot += red[w];
        const float sc = rsqrtf(tot / (float)SH::E + 1e-5f);
        for (uint32_t i = t; i < SH::E; i += WF_T)
            xn[i] = xn[i] * sc * nw[i];
        __syncthreads();
        constexpr uint32_t NCH = SH::E / 8, CPL = (NCH + 31) / 32; /* 16-byte chunks a row, a lane */
        for (uint32_t j = warp; j < W::RQB; j += WF_T / 32) {
            const uint32_t jj = W::RQB * b + j; /* the cluster's row jj: q, then k, then v */
            const uint32_t row = jj < GD       ? GD * c + jj
                                 : jj < GD + D ? SH::NH * D + kvh * D + (jj - GD)
                                               : SH::NH * D + SH::NKV * D + kvh * D + (jj - GD - D);
            const __nv_bfloat16 *wr = wqkv + (size_t)row * SH::E;
            uint4 u[CPL];
#pragma unroll
            for (uint32_t k = 0; k < CPL; k++)
                if (lane + 32 * k < NCH)
                    u[k] = __ldcs((const uint4 *)(wr + 8 * (lane + 32 * k)));
            float a = 0.0f;
#pragma unroll
            for (uint32_t k = 0; k < CPL; k++)
                if (lane + 32 * k < NCH)
                    a = wf_dot8(u[k], xn + 8 * (lane + 32 * k), a);
            a = wf_warp_sum(a);
            if (lane == 0)
                qr[j] = a;
        }
        cl.sync();                                             /* every block's rows */
        q[t] = cl.map_shared_rank(qr, t / W::RQB)[t % W::RQB]; /* q: the cluster's rows 0 .. GD - 1 */
    } else
        q[t] = qkvb[GD * c + t]; /* the cluster's q heads (the q part of qkv) */
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    /* scores: pair i = head h, position p (each lane starts at its own dimension: no bank conflict) */
    for (uint32_t i = t; i < HPC * WF_PB; i += WF_T) {
        const uint32_t h = i / WF_PB, p = i % WF_PB;
        float s = 0.0f;
        for (uint32_t k = 0; k < D; k++) {
            const uint32_t d = (k + lane) % D;
            s = fmaf(q[h * D + d], Ks[p * D + d], s);
        }
        S[i] = s * rsqrtf((float)D);
    }
    __syncthreads();
    if (t < HPC) { /* the head's max and sum over the block's positions */
        float m = -INFINITY, l = 0.0f;
        for (uint32_t p = 0; p < WF_PB; p++)
            m = fmaxf(m, S[t * WF_PB + p]);
        for (uint32_t p = 0; p < WF_PB; p++) {
            const float e = expf(S[t * WF_PB + p] - m);
            S[t * WF_PB + p] = e;
            l += e;
        }
        pm[t] = m;
        pl[t] = l;
    }
    __syncthreads();
    { /* out: thread t = head t / D, dimension t % D */
        const uint32_t h = t / D, d = t % D;
        float o = 0.0f;
        for (uint32_t j = 0; j < WF_PB; j++)
            o = fmaf(S[h * WF_PB + j], Vs[j * D + d], o);
        po[t] = o;
    }
    cl.sync(); /* every block's partial state */
    {          /* the merge, in every block (thread t), blocks in rank order */
        const uint32_t h = t / D;
        float M = -INFINITY;
        for (uint32_t r = 0; r < WF_CL; r++)
            M = fmaxf(M, cl.map_shared_rank(pm, r)[h]);
        float L = 0.0f, O = 0.0f;
        for (uint32_t r = 0; r < WF_CL; r++) {
            const float w = expf(cl.map_shared_rank(pm, r)[h] - M);
            L = fmaf(cl.map_shared_rank(pl, r)[h], w, L);
            O = fmaf(cl.map_shared_rank(po, r)[t], w, O);
        }
        ov[t] = O / L;
    }
    cl.sync(); /* no block leaves while another reads its partial */
    if (!FUSE) {
        if (b == 0)
            att_out[GD * c + t] = ov[t];
        return;
    }
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    /* wo's slice times the cluster's outputs: warp w rows w, w + 8, ..., lane l columns 8 l .. 8 l + 7 */
    const __nv_bfloat16 *Ws = (const __nv_bfloat16 *)(sm + W::W);
    float xv[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        xv[j] = ov[8 * lane + j];
    for (uint32_t r = warp; r < RB; r += 8) {
        const float a = wf_warp_sum(wf_dot8(*(const uint4 *)(Ws + r * GD + 8 * lane), xv, 0.0f));
        if (lane == 0)
            pw[(size_t)c * SH::E + RB * b + r] = a;
    }
    __syncthreads(); /* the block's partial stores before thread 0's release */
    if (t == 0) {
        unsigned prev;
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(prev) : "l"(cnt + b) : "memory");
        flag[0] = prev == W::C - 1;
    }
    __syncthreads();
    if (!flag[0])
        return;
    if (t < RB) { /* the last cluster for rows RB b ..: the partials in cluster order, then the residual */
        const uint32_t row = RB * b + t;
        float v = 0.0f;
        for (uint32_t k = 0; k < W::C; k++)
            v += __ldcg(pw + (size_t)k * SH::E + row);
        x[row] = x[row] + v;
    }
    if (t == 0)
        cnt[b] = 0;
}

static mc_matrix wf_matrix(uint32_t rows, uint32_t cols, uint32_t seed) {
    mc_matrix m;
    memset(&m, 0, sizeof m);
    m.type = MEMRA_TYPE_BF16;
    m.rows = rows;
    m.cols = cols;
    m.stride = cols;
    const size_t bytes = (size_t)rows * cols * 2;
    MC_BENCH_CHECK(cudaMalloc(&m.data, bytes));
    mc_bench_fill(m.data, bytes, seed, 0x807f807fu, 0x3c003c00u);
    return m;
}

struct wf_bench {
    std::vector<wf_layer> L;
    float *x, *x0, *qkvb, *att, *sw, *nw1, *nw2, *pw;
    unsigned *cnt;
    cudaStream_t st;
    mc_config cfg;
    uint32_t E;
};

enum { WF_CHAIN, WF_ATT, WF_ATTWO };

template <class SH> static void wf_att_launch(wf_bench &b, const wf_layer &l, int fuse) {
    typedef wf_dim<SH> W;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(W::C * WF_CL);
    cfg.blockDim = dim3(WF_T);
    cfg.dynamicSmemBytes = fuse == 2 ? W::SMEM_Q : fuse ? W::SMEM_F : W::SMEM_U;
    cfg.stream = b.st;
    cudaLaunchAttribute attr[2];
    mc_launch_attrs_cluster(&cfg, attr, WF_CL, true);
    MC_BENCH_CHECK(cudaLaunchKernelEx(&cfg,
                                      fuse == 2 ? wf_att<SH, 2>
                                      : fuse    ? wf_att<SH, 1>
                                                : wf_att<SH, 0>,
                                      (const float *)b.qkvb, (const float *)l.kc, (const float *)l.vc, b.att,
                                      (const __nv_bfloat16 *)l.wo.data, b.pw, b.cnt, b.x,
                                      (const __nv_bfloat16 *)l.qkv.data, (const float *)b.nw1));
}

/* what: the whole chain, attention alone, or attention with the output projection */
template <class SH> static void wf_enqueue(wf_bench &b, int fuse, int what) {
    for (const wf_layer &l : b.L) {
        if (what == WF_CHAIN && fuse != 2)
            MC_BENCH_CHECK(mc_gemv(&b.cfg, &l.qkv, b.x, b.nw1, 1e-5f, NULL, NULL, b.qkvb, b.st));
        wf_att_launch<SH>(b, l, what == WF_ATT ? 0 : fuse);
        if (what != WF_ATT && !fuse)
            MC_BENCH_CHECK(mc_gemv(&b.cfg, &l.wo, b.att, NULL, 0.0f, NULL, b.x, b.x, b.st));
        if (what == WF_CHAIN) {
            MC_BENCH_CHECK(mc_gemv_swiglu(&b.cfg, &l.gu, b.x, b.nw2, 1e-5f, b.sw, b.st));
            MC_BENCH_CHECK(mc_gemv(&b.cfg, &l.down, b.sw, NULL, 0.0f, NULL, b.x, b.x, b.st));
        }
    }
}

template <class SH> static cudaGraphExec_t wf_graph(wf_bench &b, int fuse, int what) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    MC_BENCH_CHECK(cudaStreamBeginCapture(b.st, cudaStreamCaptureModeThreadLocal));
    wf_enqueue<SH>(b, fuse, what);
    MC_BENCH_CHECK(cudaStreamEndCapture(b.st, &g));
    MC_BENCH_CHECK(cudaGraphInstantiate(&ge, g, 0));
    MC_BENCH_CHECK(cudaGraphDestroy(g));
    return ge;
}

/* us per layer: best of 3 passes of `reps` replays (a warm-up pass first) */
static double wf_time(wf_bench &b, cudaGraphExec_t ge, int reps) {
    cudaEvent_t e0, e1;
    MC_BENCH_CHECK(cudaEventCreate(&e0));
    MC_BENCH_CHECK(cudaEventCreate(&e1));
    double best = 1e30;
    for (int pass = 0; pass < 4; pass++) {
        MC_BENCH_CHECK(cudaMemcpyAsync(b.x, b.x0, 4 * b.E, cudaMemcpyDeviceToDevice, b.st));
        MC_BENCH_CHECK(cudaEventRecord(e0, b.st));
        for (int i = 0; i < reps; i++)
            MC_BENCH_CHECK(cudaGraphLaunch(ge, b.st));
        MC_BENCH_CHECK(cudaEventRecord(e1, b.st));
        MC_BENCH_CHECK(cudaEventSynchronize(e1));
        float ms;
        MC_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (pass > 0 && ms * 1e3 / reps < best)
            best = ms * 1e3 / reps;
    }
    MC_BENCH_CHECK(cudaEventDestroy(e0));
    MC_BENCH_CHECK(cudaEventDestroy(e1));
    return best / b.L.size();
}

static void wf_once(wf_bench &b, cudaGraphExec_t ge, std::vector<float> &out) {
    MC_BENCH_CHECK(cudaMemcpyAsync(b.x, b.x0, 4 * b.E, cudaMemcpyDeviceToDevice, b.st));
    MC_BENCH_CHECK(cudaGraphLaunch(ge, b.st));
    MC_BENCH_CHECK(cudaStreamSynchronize(b.st));
    out.resize(b.E);
    MC_BENCH_CHECK(cudaMemcpy(out.data(), b.x, 4 * b.E, cudaMemcpyDeviceToHost));
}

/* One shape: returns 0 when the fused chain is deterministic, near the unfused one and its control
 * is caught. */
template <class SH> static int wf_shape(int reps, double ceiling) {
    typedef wf_dim<SH> W;
    constexpr uint32_t E = SH::E, NQ = SH::NH * SH::D, KVB = SH::NKV * WF_P * SH::D * 4;
    MC_BENCH_CHECK(cudaFuncSetAttribute(wf_att<SH, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)W::SMEM_U));
    MC_BENCH_CHECK(cudaFuncSetAttribute(wf_att<SH, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)W::SMEM_F));
    MC_BENCH_CHECK(cudaFuncSetAttribute(wf_att<SH, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)W::SMEM_Q));
    wf_bench b;
    b.cfg = mc_config_default;
    b.E = E;
    MC_BENCH_CHECK(cudaStreamCreate(&b.st));
    b.L.resize(SH::NL);
    const double layer_bytes =
        2.0 * ((double)SH::QKV * E + (double)E * NQ + 2.0 * SH::FF * E + (double)E * SH::FF) + 2.0 * KVB;
    for (uint32_t i = 0; i < SH::NL; i++) {
        wf_layer &l = b.L[i];
        l.qkv = wf_matrix(SH::QKV, E, 11 + 5 * i);
        l.wo = wf_matrix(E, NQ, 12 + 5 * i);
        l.gu = wf_matrix(2 * SH::FF, E, 13 + 5 * i);
        l.down = wf_matrix(E, SH::FF, 14 + 5 * i);
        MC_BENCH_CHECK(cudaMalloc(&l.kc, KVB));
        MC_BENCH_CHECK(cudaMalloc(&l.vc, KVB));
        mc_bench_fill(l.kc, KVB, 15 + 5 * i, 0x807fffffu, 0x3c000000u);
        mc_bench_fill(l.vc, KVB, 16 + 5 * i, 0x807fffffu, 0x3c000000u);
    }
    MC_BENCH_CHECK(cudaMalloc(&b.x, 4 * E));
    MC_BENCH_CHECK(cudaMalloc(&b.x0, 4 * E));
    MC_BENCH_CHECK(cudaMalloc(&b.qkvb, 4 * SH::QKV));
    MC_BENCH_CHECK(cudaMalloc(&b.att, 4 * NQ));
    MC_BENCH_CHECK(cudaMalloc(&b.sw, 4 * SH::FF));
    MC_BENCH_CHECK(cudaMalloc(&b.nw1, 4 * E));
    MC_BENCH_CHECK(cudaMalloc(&b.nw2, 4 * E));
    MC_BENCH_CHECK(cudaMalloc(&b.pw, 4 * W::C * E));
    MC_BENCH_CHECK(cudaMalloc(&b.cnt, 4 * WF_CL));
    MC_BENCH_CHECK(cudaMemset(b.cnt, 0, 4 * WF_CL));
    MC_BENCH_CHECK(cudaMemset(b.qkvb, 0, 4 * SH::QKV));
    MC_BENCH_CHECK(cudaMemset(b.att, 0, 4 * NQ));
    mc_bench_fill(b.x0, 4 * E, 1, 0x807fffffu, 0x3e000000u);
    mc_bench_fill(b.nw1, 4 * E, 2, 0x007fffffu, 0x3f800000u);
    mc_bench_fill(b.nw2, 4 * E, 3, 0x007fffffu, 0x3f800000u);
    MC_BENCH_CHECK(cudaDeviceSynchronize());
    int ncl = 0;
    {
        cudaLaunchConfig_t cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDim = dim3(W::C * WF_CL);
        cfg.blockDim = dim3(WF_T);
        cfg.dynamicSmemBytes = W::SMEM_Q;
        cudaLaunchAttribute attr[2];
        mc_launch_attrs_cluster(&cfg, attr, WF_CL, false);
        MC_BENCH_CHECK(cudaOccupancyMaxActiveClusters(&ncl, wf_att<SH, 2>, &cfg));
    }
    printf(
        "\n== %s shapes (BF16), %u layers, %.2f MB a layer (weights and f32 KV at %u positions); %u clusters of %u "
        "blocks; shared memory a block %u / %u / %u bytes (unfused / wo / q/k/v and wo); clusters of the largest that "
        "fit at once: %d\n",
        SH::name, SH::NL, layer_bytes / 1e6, WF_P, W::C, WF_CL, W::SMEM_U, W::SMEM_F, W::SMEM_Q, ncl);
    if (ncl < (int)W::C)
        printf("note: the fused grid does not fit at once: its clusters run in waves\n");

    cudaGraphExec_t gu = wf_graph<SH>(b, 0, WF_CHAIN), gf = wf_graph<SH>(b, 1, WF_CHAIN),
                    gq = wf_graph<SH>(b, 2, WF_CHAIN);
    std::vector<float> ru, rf, rq, rf2;
    wf_once(b, gu, ru);
    wf_once(b, gf, rf);
    wf_once(b, gq, rq);
    int bad = 0;
    for (int r = 0; r < 2; r++) {
        wf_once(b, gf, rf2);
        if (memcmp(rf.data(), rf2.data(), 4 * E)) {
            printf("FUSED RUNS DIFFER (run %d)\n", r + 2);
            bad = 1;
        }
        wf_once(b, gq, rf2);
        if (memcmp(rq.data(), rf2.data(), 4 * E)) {
            printf("FUSED Q/K/V RUNS DIFFER (run %d)\n", r + 2);
            bad = 1;
        }
    }
    double num = 0, numq = 0, den = 0, mean = 0;
    for (uint32_t i = 0; i < E; i++) {
        const double d = (double)rf[i] - ru[i], dq = (double)rq[i] - ru[i];
        num += d * d;
        numq += dq * dq;
        den += (double)ru[i] * ru[i];
        mean += fabs((double)ru[i]);
    }
    const double nmse = num / (den > 0 ? den : 1.0), nmseq = numq / (den > 0 ? den : 1.0);
    { /* the control: a flipped bit of wo (layer 0, row 5, column 300: the second cluster's slice) must show */
        uint16_t wv, fl;
        uint16_t *at = (uint16_t *)b.L[0].wo.data + 5 * NQ + 300;
        MC_BENCH_CHECK(cudaMemcpy(&wv, at, 2, cudaMemcpyDeviceToHost));
        fl = wv ^ 0x0040u;
        MC_BENCH_CHECK(cudaMemcpy(at, &fl, 2, cudaMemcpyHostToDevice));
        wf_once(b, gf, rf2);
        MC_BENCH_CHECK(cudaMemcpy(at, &wv, 2, cudaMemcpyHostToDevice));
        const bool caught = memcmp(rf.data(), rf2.data(), 4 * E) != 0;
        printf("control: a flipped bit of wo %s\n", caught ? "is caught" : "WAS NOT CAUGHT");
        if (!caught)
            bad = 1;
    }
    printf("x after the chain: mean |x| %.4g; against unfused: NMSE %.3g (wo fused), %.3g (q/k/v and wo fused); "
           "fused runs %s\n",
           mean / E, nmse, nmseq, bad ? "DIFFER" : "bit-identical (3 each)");
    if (!(nmse < 1e-4) || !(nmseq < 1e-4) || !isfinite(mean) || mean == 0.0)
        bad = 1;

    const double tu = wf_time(b, gu, reps), tf = wf_time(b, gf, reps), tq = wf_time(b, gq, reps);
    cudaGraphExec_t ga = wf_graph<SH>(b, 0, WF_ATT), gw = wf_graph<SH>(b, 0, WF_ATTWO),
                    gfa = wf_graph<SH>(b, 1, WF_ATTWO), gqa = wf_graph<SH>(b, 2, WF_ATTWO);
    const double ta = wf_time(b, ga, reps), tw = wf_time(b, gw, reps), tfa = wf_time(b, gfa, reps),
                 tqa = wf_time(b, gqa, reps);
    printf("us per layer (best of 3 passes of %d replays):\n", reps);
    printf("  chain unfused          %8.2f (%.1f%% of the copy ceiling %.0f GB/s)\n", tu,
           100.0 * layer_bytes / ceiling * 1e6 / tu, ceiling / 1e9);
    printf("  chain wo fused         %8.2f (%.1f%%)  difference %+.2f us a layer (%+.1f%%)\n", tf,
           100.0 * layer_bytes / ceiling * 1e6 / tf, tf - tu, 100.0 * (tu / tf - 1.0));
    printf("  chain q/k/v + wo fused %8.2f (%.1f%%)  difference %+.2f us a layer (%+.1f%%)\n", tq,
           100.0 * layer_bytes / ceiling * 1e6 / tq, tq - tu, 100.0 * (tu / tq - 1.0));
    printf("  attention alone %6.2f, attention + wo launch %6.2f, wo fused %6.2f, q/k/v and wo fused %6.2f "
           "(no q/k/v launch before it)\n",
           ta, tw, tfa, tqa);
    printf("summary %s: unfused %.2f wo-fused %.2f qkv-wo-fused %.2f att %.2f att+wo %.2f fused-att %.2f "
           "qkv-fused-att %.2f\n",
           SH::name, tu, tf, tq, ta, tw, tfa, tqa);
    cudaGraphExec_t all[] = {gu, gf, gq, ga, gw, gfa, gqa};
    for (cudaGraphExec_t g : all)
        MC_BENCH_CHECK(cudaGraphExecDestroy(g));
    for (wf_layer &l : b.L) {
        cudaFree(l.qkv.data);
        cudaFree(l.wo.data);
        cudaFree(l.gu.data);
        cudaFree(l.down.data);
        cudaFree(l.kc);
        cudaFree(l.vc);
    }
    float *bufs[] = {b.x, b.x0, b.qkvb, b.att, b.sw, b.nw1, b.nw2, b.pw};
    for (float *p : bufs)
        cudaFree(p);
    cudaFree(b.cnt);
    MC_BENCH_CHECK(cudaStreamDestroy(b.st));
    return bad;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 50;
    if (reps < 1 || reps > 10000) {
        fprintf(stderr, "wofuse_bench: replays %s: expected 1 to 10000\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    MC_BENCH_CHECK(mc_gemv_prepare());
    const double ceiling = mc_bench_copy_ceiling(0);
    int bad = wf_shape<wf_1b>(reps, ceiling);
    bad |= wf_shape<wf_270m>(reps, ceiling);
    return bad;
}
