/* wofuse_bench.cu: what a decode layer would gain if the output projection ran in attention's
 * epilogue instead of a launch of its own (issue 27 item 1: fewer dependent launches a layer).
 *
 * llama-1b's shapes (2048 wide, 32 q heads of 64 on 8 kv heads, 8192 FFN, BF16, f32 KV cache, 512
 * positions), L layers, each with its own weights and cache. A layer is
 *   qkv (production mc_gemv, the norm fused) -> attention -> [wo] -> gate/up (mc_gemv_swiglu, norm)
 *   -> down (mc_gemv, residual)
 * where attention is a stand-in cluster kernel built like the production one (a cluster of 8 blocks
 * a kv head, block b the positions [64 b, 64 b + 64), its K and V rows by cp.async before the grid
 * wait, the blocks' partial softmax states merged through distributed shared memory), and:
 *   (u) unfused: the cluster's rank 0 writes the kv head's 256 outputs; the production wo GEMV
 *       (mc_gemv with the residual) follows as its own launch;
 *   (f) fused: block b of kv head g's cluster also holds wo[256 b .. 256 b + 255][256 g .. 256 g +
 *       255] (128 KB, queued by cp.async before the grid wait with the K and V rows), multiplies it
 *       by the head's outputs into a partial (an f32 row of 256 a kv head), and takes an integer
 *       ticket on row range b; the last of the 8 kv heads to arrive adds the 8 partials in kv-head
 *       order and the residual: x[r] += sum_g p_g[r]. No float atomics; the order is fixed, so (f)
 *       is deterministic, but it is not (u)'s order: (u) and (f) agree to rounding only.
 * Printed: us per layer of the whole chain under (u) and (f), and of the attention launch alone,
 * (u)'s attention + wo, and (f)'s attention; the largest relative difference of x between (u) and
 * (f) after the chain; whether three runs of (f) give the same bits.
 *
 *   memra_cuda_wofuse_bench [replays]
 *
 * Exit 0 when (f) is deterministic and within 1e-3 of (u), 1 otherwise, 2 on usage, 3 on a CUDA
 * error. A measurement tool for a design decision: none of this is a production path. */
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "cuda_common.cuh"

namespace cg = cooperative_groups;

#define WF_CHECK(x)                                                                                                    \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                        \
            exit(3);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* llama-1b */
#define WF_E 2048u   /* n_embd */
#define WF_HQ 32u    /* q heads */
#define WF_KV 8u     /* kv heads: one cluster each */
#define WF_D 64u     /* head size */
#define WF_G 4u      /* q heads a kv head */
#define WF_GD 256u   /* a kv head's outputs (G D) */
#define WF_P 512u    /* positions attended */
#define WF_CL 8u     /* blocks a cluster */
#define WF_PB 64u    /* positions a block (P / CL) */
#define WF_RB 256u   /* wo rows a block (E / CL) */
#define WF_FF 8192u  /* FFN width */
#define WF_QKV 3072u /* q, k, v rows */
#define WF_T 256u    /* threads a block */

/* dynamic shared memory (bytes): K, V tiles (f32), q, the partial state, the merged outputs,
 * then (fused) the wo slice */
#define WF_OFF_K 0u
#define WF_OFF_V (WF_OFF_K + WF_PB * WF_D * 4u)
#define WF_OFF_Q (WF_OFF_V + WF_PB * WF_D * 4u)
#define WF_OFF_PM (WF_OFF_Q + WF_GD * 4u)    /* max of each head (G) */
#define WF_OFF_PL (WF_OFF_PM + 16u)          /* sum of each head (G) */
#define WF_OFF_PO (WF_OFF_PL + 16u)          /* unnormalised out (G D) */
#define WF_OFF_S (WF_OFF_PO + WF_GD * 4u)    /* scores / weights (G PB) */
#define WF_OFF_RED (WF_OFF_S + WF_GD * 4u)   /* 8 warps x 2 */
#define WF_OFF_OV (WF_OFF_RED + 64u)         /* the merged outputs (G D) */
#define WF_OFF_FLAG (WF_OFF_OV + WF_GD * 4u) /* the ticket's verdict */
#define WF_OFF_W (WF_OFF_FLAG + 16u)         /* fused: wo's slice, RB x GD bf16 */
#define WF_SMEM_U WF_OFF_W
#define WF_SMEM_F (WF_OFF_W + WF_RB * WF_GD * 2u)

struct wf_layer {
    mc_matrix qkv, wo, gu, down;
    float *kc, *vc; /* [kv][P][D] */
};

__device__ __forceinline__ void wf_cp16(void *s, const void *g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((uint32_t)__cvta_generic_to_shared(s)), "l"(g)
                 : "memory");
}

/* The stand-in attention of one layer (and, FUSE, its output projection with the residual). */
template <int FUSE>
__global__ void __launch_bounds__(WF_T, 1)
    wf_att(const float *qkvb, const float *kc, const float *vc, float *att_out, const __nv_bfloat16 *wo, float *pw,
           unsigned *cnt, float *x) {
    extern __shared__ __align__(16) unsigned char sm[];
    cg::cluster_group cl = cg::this_cluster();
    const uint32_t b = cl.block_rank(), g = blockIdx.x / WF_CL, t = threadIdx.x, lane = t & 31, warp = t >> 5;
    float *Ks = (float *)(sm + WF_OFF_K), *Vs = (float *)(sm + WF_OFF_V), *q = (float *)(sm + WF_OFF_Q);
    float *pm = (float *)(sm + WF_OFF_PM), *pl = (float *)(sm + WF_OFF_PL), *po = (float *)(sm + WF_OFF_PO);
    float *S = (float *)(sm + WF_OFF_S), *red = (float *)(sm + WF_OFF_RED), *ov = (float *)(sm + WF_OFF_OV);
    unsigned *flag = (unsigned *)(sm + WF_OFF_FLAG);
    /* before the wait: this block's K and V rows (written by earlier steps) and, fused, wo's slice */
    const float *kg = kc + ((size_t)g * WF_P + b * WF_PB) * WF_D, *vg = vc + ((size_t)g * WF_P + b * WF_PB) * WF_D;
    for (uint32_t i = t; i < WF_PB * WF_D / 4; i += WF_T) {
        wf_cp16(Ks + 4 * i, kg + 4 * i);
        wf_cp16(Vs + 4 * i, vg + 4 * i);
    }
    if (FUSE) {
        __nv_bfloat16 *Ws = (__nv_bfloat16 *)(sm + WF_OFF_W);
        for (uint32_t i = t; i < WF_RB * WF_GD / 8; i += WF_T) { /* row r, chunk c of 8 */
            const uint32_t r = i / (WF_GD / 8), c = i % (WF_GD / 8);
            wf_cp16(Ws + r * WF_GD + 8 * c, wo + (size_t)(WF_RB * b + r) * WF_E + WF_GD * g + 8 * c);
        }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    q[t] = qkvb[WF_GD * g + t]; /* the kv head's G q heads (the q part of qkv) */
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    /* scores: thread t = head h, position p (each lane starts at its own dimension: no bank conflict) */
    const uint32_t h = t / WF_PB, p = t % WF_PB;
    float s = 0.0f;
    for (uint32_t k = 0; k < WF_D; k++) {
        const uint32_t d = (k + lane) % WF_D;
        s = fmaf(q[h * WF_D + d], Ks[p * WF_D + d], s);
    }
    s *= 0.125f;
    /* the head's max and sum over its 64 positions (two warps) */
    float m = s;
    for (int o = 16; o; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0)
        red[warp] = m;
    __syncthreads();
    m = fmaxf(red[2 * h], red[2 * h + 1]);
    const float e = expf(s - m);
    S[t] = e;
    float l = e;
    for (int o = 16; o; o >>= 1)
        l += __shfl_xor_sync(0xffffffffu, l, o);
    __syncthreads();
    if (lane == 0)
        red[8 + warp] = l;
    __syncthreads();
    if (p == 0) {
        pm[h] = m;
        pl[h] = red[8 + 2 * h] + red[8 + 2 * h + 1];
    }
    /* out: thread t = head h, dimension d */
    {
        const uint32_t d = t % WF_D;
        float o = 0.0f;
        for (uint32_t j = 0; j < WF_PB; j++)
            o = fmaf(S[h * WF_PB + j], Vs[j * WF_D + d], o);
        po[t] = o;
    }
    cl.sync(); /* every block's partial state */
    {          /* the merge, in every block (thread t: head h, dimension t % D), blocks in rank order */
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
            att_out[WF_GD * g + t] = ov[t];
        return;
    }
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    /* wo's slice times the head's outputs: warp w rows w, w + 8, ... (4 at once), lane l columns 8 l .. */
    const __nv_bfloat16 *Ws = (const __nv_bfloat16 *)(sm + WF_OFF_W);
    float xv[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        xv[j] = ov[8 * lane + j];
    for (uint32_t r0 = warp; r0 < WF_RB; r0 += 4 * 8) {
        float a[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint4 u = *(const uint4 *)(Ws + (r0 + 8 * k) * WF_GD + 8 * lane);
            const __nv_bfloat162 *w2 = (const __nv_bfloat162 *)&u;
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 f = __bfloat1622float2(w2[j]);
                acc = fmaf(f.x, xv[2 * j], acc);
                acc = fmaf(f.y, xv[2 * j + 1], acc);
            }
            a[k] = acc;
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            for (int o = 16; o; o >>= 1)
                a[k] += __shfl_xor_sync(0xffffffffu, a[k], o);
            if (lane == 0)
                pw[(size_t)g * WF_E + WF_RB * b + r0 + 8 * k] = a[k];
        }
    }
    __syncthreads(); /* the block's partial stores before thread 0's release */
    if (t == 0) {
        unsigned prev;
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(prev) : "l"(cnt + b) : "memory");
        flag[0] = prev == WF_KV - 1;
    }
    __syncthreads();
    if (!flag[0])
        return;
    { /* the last kv head for rows RB b ..: the partials in kv-head order, then the residual */
        const uint32_t row = WF_RB * b + t;
        float v = 0.0f;
        for (uint32_t k = 0; k < WF_KV; k++)
            v += __ldcg(pw + (size_t)k * WF_E + row);
        x[row] = x[row] + v;
    }
    if (t == 0)
        cnt[b] = 0;
}

__global__ void wf_fill(uint32_t *p, size_t n, uint32_t seed, uint32_t mask, uint32_t or_bits) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t z = (uint32_t)i * 2654435761u ^ seed;
        z ^= z >> 15;
        z *= 2246822519u;
        z ^= z >> 13;
        p[i] = (z & mask) | or_bits;
    }
}

static void fill(void *p, size_t bytes, uint32_t seed, uint32_t mask, uint32_t or_bits) {
    wf_fill<<<1024, 256>>>((uint32_t *)p, bytes / 4, seed, mask, or_bits);
    WF_CHECK(cudaGetLastError());
}

static mc_matrix wf_matrix(uint32_t rows, uint32_t cols, uint32_t seed) {
    mc_matrix m;
    memset(&m, 0, sizeof m);
    m.type = MEMRA_TYPE_BF16;
    m.rows = rows;
    m.cols = cols;
    m.stride = cols;
    const size_t bytes = (size_t)rows * cols * 2;
    WF_CHECK(cudaMalloc(&m.data, bytes));
    fill(m.data, bytes, seed, 0x807f807fu, 0x3c003c00u);
    return m;
}

struct wf_bench {
    std::vector<wf_layer> L;
    float *x, *x0, *qkvb, *att, *sw, *nw1, *nw2, *pw;
    unsigned *cnt;
    cudaStream_t st;
    mc_config cfg;
};

enum { WF_CHAIN, WF_ATT, WF_ATTWO };

static void wf_att_launch(wf_bench &b, const wf_layer &l, int fuse) {
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(WF_KV * WF_CL);
    cfg.blockDim = dim3(WF_T);
    cfg.dynamicSmemBytes = fuse ? WF_SMEM_F : WF_SMEM_U;
    cfg.stream = b.st;
    cudaLaunchAttribute attr[2];
    mc_launch_attrs_cluster(&cfg, attr, WF_CL, true);
    WF_CHECK(cudaLaunchKernelEx(&cfg, fuse ? wf_att<1> : wf_att<0>, (const float *)b.qkvb, (const float *)l.kc,
                                (const float *)l.vc, b.att, (const __nv_bfloat16 *)l.wo.data, b.pw, b.cnt, b.x));
}

/* what: the whole chain, attention alone, or attention with the output projection */
static void wf_enqueue(wf_bench &b, int fuse, int what) {
    for (const wf_layer &l : b.L) {
        if (what == WF_CHAIN)
            WF_CHECK(mc_gemv(&b.cfg, &l.qkv, b.x, b.nw1, 1e-5f, NULL, NULL, b.qkvb, b.st));
        wf_att_launch(b, l, what == WF_ATT ? 0 : fuse);
        if (what != WF_ATT && !fuse)
            WF_CHECK(mc_gemv(&b.cfg, &l.wo, b.att, NULL, 0.0f, NULL, b.x, b.x, b.st));
        if (what == WF_CHAIN) {
            WF_CHECK(mc_gemv_swiglu(&b.cfg, &l.gu, b.x, b.nw2, 1e-5f, b.sw, b.st));
            WF_CHECK(mc_gemv(&b.cfg, &l.down, b.sw, NULL, 0.0f, NULL, b.x, b.x, b.st));
        }
    }
}

static cudaGraphExec_t wf_graph(wf_bench &b, int fuse, int what) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    WF_CHECK(cudaStreamBeginCapture(b.st, cudaStreamCaptureModeThreadLocal));
    wf_enqueue(b, fuse, what);
    WF_CHECK(cudaStreamEndCapture(b.st, &g));
    WF_CHECK(cudaGraphInstantiate(&ge, g, 0));
    WF_CHECK(cudaGraphDestroy(g));
    return ge;
}

/* us per layer: best of 3 passes of `reps` replays (a warm-up pass first) */
static double wf_time(wf_bench &b, cudaGraphExec_t ge, int reps) {
    cudaEvent_t e0, e1;
    WF_CHECK(cudaEventCreate(&e0));
    WF_CHECK(cudaEventCreate(&e1));
    double best = 1e30;
    for (int pass = 0; pass < 4; pass++) {
        WF_CHECK(cudaMemcpyAsync(b.x, b.x0, 4 * WF_E, cudaMemcpyDeviceToDevice, b.st));
        WF_CHECK(cudaEventRecord(e0, b.st));
        for (int i = 0; i < reps; i++)
            WF_CHECK(cudaGraphLaunch(ge, b.st));
        WF_CHECK(cudaEventRecord(e1, b.st));
        WF_CHECK(cudaEventSynchronize(e1));
        float ms;
        WF_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (pass > 0 && ms * 1e3 / reps < best)
            best = ms * 1e3 / reps;
    }
    WF_CHECK(cudaEventDestroy(e0));
    WF_CHECK(cudaEventDestroy(e1));
    return best / b.L.size();
}

static void wf_once(wf_bench &b, cudaGraphExec_t ge, std::vector<float> &out) {
    WF_CHECK(cudaMemcpyAsync(b.x, b.x0, 4 * WF_E, cudaMemcpyDeviceToDevice, b.st));
    WF_CHECK(cudaGraphLaunch(ge, b.st));
    WF_CHECK(cudaStreamSynchronize(b.st));
    out.resize(WF_E);
    WF_CHECK(cudaMemcpy(out.data(), b.x, 4 * WF_E, cudaMemcpyDeviceToHost));
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 50;
    if (reps < 1 || reps > 10000) {
        fprintf(stderr, "wofuse_bench: replays %s: expected 1 to 10000\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    const uint32_t nl = 16;
    WF_CHECK(mc_gemv_prepare());
    WF_CHECK(cudaFuncSetAttribute(wf_att<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WF_SMEM_U));
    WF_CHECK(cudaFuncSetAttribute(wf_att<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WF_SMEM_F));
    wf_bench b;
    b.cfg = mc_config_default;
    WF_CHECK(cudaStreamCreate(&b.st));
    b.L.resize(nl);
    double layer_bytes = 2.0 * ((double)WF_QKV * WF_E + (double)WF_E * WF_E + 2.0 * WF_FF * WF_E + (double)WF_E * WF_FF) +
                         2.0 * 4.0 * WF_KV * WF_P * WF_D;
    for (uint32_t i = 0; i < nl; i++) {
        wf_layer &l = b.L[i];
        l.qkv = wf_matrix(WF_QKV, WF_E, 11 + 5 * i);
        l.wo = wf_matrix(WF_E, WF_E, 12 + 5 * i);
        l.gu = wf_matrix(2 * WF_FF, WF_E, 13 + 5 * i);
        l.down = wf_matrix(WF_E, WF_FF, 14 + 5 * i);
        const size_t kvb = (size_t)WF_KV * WF_P * WF_D * 4;
        WF_CHECK(cudaMalloc(&l.kc, kvb));
        WF_CHECK(cudaMalloc(&l.vc, kvb));
        fill(l.kc, kvb, 15 + 5 * i, 0x807fffffu, 0x3c000000u);
        fill(l.vc, kvb, 16 + 5 * i, 0x807fffffu, 0x3c000000u);
    }
    WF_CHECK(cudaMalloc(&b.x, 4 * WF_E));
    WF_CHECK(cudaMalloc(&b.x0, 4 * WF_E));
    WF_CHECK(cudaMalloc(&b.qkvb, 4 * WF_QKV));
    WF_CHECK(cudaMalloc(&b.att, 4 * WF_E));
    WF_CHECK(cudaMalloc(&b.sw, 4 * WF_FF));
    WF_CHECK(cudaMalloc(&b.nw1, 4 * WF_E));
    WF_CHECK(cudaMalloc(&b.nw2, 4 * WF_E));
    WF_CHECK(cudaMalloc(&b.pw, 4 * WF_KV * WF_E));
    WF_CHECK(cudaMalloc(&b.cnt, 4 * WF_CL));
    WF_CHECK(cudaMemset(b.cnt, 0, 4 * WF_CL));
    WF_CHECK(cudaMemset(b.qkvb, 0, 4 * WF_QKV));
    WF_CHECK(cudaMemset(b.att, 0, 4 * WF_E));
    fill(b.x0, 4 * WF_E, 1, 0x807fffffu, 0x3e000000u);
    fill(b.nw1, 4 * WF_E, 2, 0x007fffffu, 0x3f800000u);
    fill(b.nw2, 4 * WF_E, 3, 0x007fffffu, 0x3f800000u);
    WF_CHECK(cudaDeviceSynchronize());
    int ncl = 0;
    {
        cudaLaunchConfig_t cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDim = dim3(WF_KV * WF_CL);
        cfg.blockDim = dim3(WF_T);
        cfg.dynamicSmemBytes = WF_SMEM_F;
        cudaLaunchAttribute attr[2];
        mc_launch_attrs_cluster(&cfg, attr, WF_CL, false);
        WF_CHECK(cudaOccupancyMaxActiveClusters(&ncl, wf_att<1>, &cfg));
    }
    printf("wofuse_bench: llama-1b shapes, %u layers, %.2f MB a layer (weights and f32 KV at %u positions); "
           "shared memory a block %u / %u bytes (unfused / fused); fused clusters that fit at once: %d (%u needed)\n",
           nl, layer_bytes / 1e6, WF_P, WF_SMEM_U, WF_SMEM_F, ncl, WF_KV);
    if (ncl < (int)WF_KV)
        printf("note: the fused grid does not fit at once: its clusters run in waves\n");

    cudaGraphExec_t gu = wf_graph(b, 0, WF_CHAIN), gf = wf_graph(b, 1, WF_CHAIN);
    std::vector<float> ru, rf, rf2;
    wf_once(b, gu, ru);
    wf_once(b, gf, rf);
    int bad = 0;
    for (int r = 0; r < 2; r++) {
        wf_once(b, gf, rf2);
        if (memcmp(rf.data(), rf2.data(), 4 * WF_E)) {
            printf("FUSED RUNS DIFFER (run %d)\n", r + 2);
            bad = 1;
        }
    }
    double worst = 0, mean = 0;
    for (uint32_t i = 0; i < WF_E; i++) {
        const double d = fabs((double)rf[i] - ru[i]) / (fabs((double)ru[i]) + 1e-6);
        worst = d > worst ? d : worst;
        mean += fabs((double)ru[i]);
    }
    printf("x after the chain: mean |x| %.4g; fused against unfused: largest relative difference %.3g; fused runs "
           "%s\n",
           mean / WF_E, worst, bad ? "DIFFER" : "bit-identical (3)");
    if (!(worst < 1e-3) || !isfinite(mean))
        bad = 1;

    const double tu = wf_time(b, gu, reps), tf = wf_time(b, gf, reps);
    cudaGraphExec_t ga = wf_graph(b, 0, WF_ATT), gw = wf_graph(b, 0, WF_ATTWO), gfa = wf_graph(b, 1, WF_ATTWO);
    const double ta = wf_time(b, ga, reps), tw = wf_time(b, gw, reps), tfa = wf_time(b, gfa, reps);
    /* the ceiling: a 1 GiB device-to-device copy */
    void *ca, *cb;
    const size_t cn = (size_t)1 << 30;
    WF_CHECK(cudaMalloc(&ca, cn));
    WF_CHECK(cudaMalloc(&cb, cn));
    WF_CHECK(cudaMemset(ca, 1, cn));
    cudaEvent_t e0, e1;
    WF_CHECK(cudaEventCreate(&e0));
    WF_CHECK(cudaEventCreate(&e1));
    WF_CHECK(cudaMemcpy(cb, ca, cn, cudaMemcpyDeviceToDevice));
    WF_CHECK(cudaEventRecord(e0, 0));
    for (int i = 0; i < 5; i++)
        WF_CHECK(cudaMemcpyAsync(cb, ca, cn, cudaMemcpyDeviceToDevice, 0));
    WF_CHECK(cudaEventRecord(e1, 0));
    WF_CHECK(cudaEventSynchronize(e1));
    float cms;
    WF_CHECK(cudaEventElapsedTime(&cms, e0, e1));
    const double ceiling = 2.0 * cn * 5 / (cms / 1e3);
    printf("us per layer (best of 3 passes of %d replays):\n", reps);
    printf("  chain unfused %8.2f (%.1f%% of the copy ceiling %.0f GB/s)\n", tu,
           100.0 * layer_bytes / ceiling * 1e6 / tu, ceiling / 1e9);
    printf("  chain fused   %8.2f (%.1f%%)  difference %+.2f us a layer (%+.1f%%)\n", tf,
           100.0 * layer_bytes / ceiling * 1e6 / tf, tf - tu, 100.0 * (tu / tf - 1.0));
    printf("  attention alone %6.2f, attention + wo launch %6.2f, fused attention %6.2f\n", ta, tw, tfa);
    printf("summary: unfused %.2f fused %.2f att %.2f att+wo %.2f fused-att %.2f\n", tu, tf, ta, tw, tfa);
    return bad;
}
