/* cluster_bench.cu: can a small model's whole decode layer run inside one thread-block cluster (up to
 * 16 multiprocessors, hardware cluster barriers, distributed shared memory) faster than as a chain of
 * launches (issue 27: gemma3-270m at 2,500 tok/s needs ~5 us a layer less than today's ~24)?
 *
 * Three measurements on the device, each printed as a table row:
 *   barrier  the cost of one cluster barrier (arrive.release + wait.acquire) for clusters of 8 and
 *            16 blocks of 512 and 1024 threads, from a loop of 4,096 of them;
 *   stream   the read bandwidth one cluster reaches alone (16-byte loads of a 512 MB buffer, so
 *            nothing stays in L2), to learn what 8 or 16 multiprocessors can pull;
 *   layer    a gemma3-270m-shaped decode layer as one cluster kernel of 16 blocks: 4-bit weights
 *            (2 per byte, the bytes of a Q4_K_M layer within ~10%), int8 activations and dp4a,
 *            f32 KV of `ctx` positions for 4 query heads on one kv head of 256. The phases, with a
 *            cluster barrier (arrive.release / wait.acquire) between each: q/k/v (640 -> 1536),
 *            attention partials over each block's share of the positions, their combine, wo (1024
 *            -> 640), gate/up (640 -> 2 x 2048, product), down (2048 -> 640). After each barrier
 *            every block gathers the vector from the others' shared memory (DSMEM) and norms and
 *            quantizes it itself, in the same order in every block, so every block holds the same
 *            x. Each phase's weights go into shared memory by cp.async before the barrier that
 *            precedes the phase (the next layer's cache during the layer), so their DRAM latency
 *            runs under the barrier; a warp a row, its lanes over 32-column chunks, an exact
 *            integer sum. 18 layers a launch, each with its own weights and cache; block 0 stamps
 *            %globaltimer at every phase boundary of the middle layer (printed per phase).
 *            The output must be the same bits on every repetition (the norms' order depends on
 *            the block size, so 512 and 1024 threads may differ from each other).
 *
 * It is not the model's arithmetic (the scales are one float a vector, the norms plain RMS): the
 * figures say what the structure costs, not what the production kernels would compute.
 *
 *   memra_cuda_cluster_bench [ctx] [reps]
 * Exit 0 when the bits agree, 1 when they do not, 2 on usage, 3 on a CUDA error. */
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "bench_common.cuh"

namespace cg = cooperative_groups;

__device__ __forceinline__ void cl_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cl_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

/* ---- barrier ---- */
__global__ void cl_barrier_loop(int n, unsigned long long *out) {
    unsigned long long t0 = clock64();
    for (int i = 0; i < n; i++) {
        cl_arrive();
        cl_wait();
    }
    unsigned long long t1 = clock64();
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = t1 - t0;
}

/* ---- stream ---- */
__global__ void cl_stream(const uint4 *__restrict__ p, size_t n, unsigned *out) {
    unsigned acc = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + 7 * stride < n; i += 8 * stride) {
        uint4 v[8];
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = __ldg(p + i + k * stride);
#pragma unroll
        for (int k = 0; k < 8; k++) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    for (; i < n; i += stride) acc ^= __ldg(p + i).x;
    if (acc == 0x12345678u) out[0] = acc;
}

/* ---- layer ---- */
enum { D = 640, NQ = 1024, NKV = 256, NQKV = NQ + 2 * NKV, FF = 2048, HD = 256, NH = 4 };

struct LayerW {
    const uint4 *qkv; /* [NQKV][D/32] 4-bit */
    const uint4 *wo;  /* [D][NQ/32] */
    const uint4 *gu;  /* [2*FF][D/32]: rows of gate then up */
    const uint4 *down;/* [D][FF/32] */
    const float *k, *v; /* [ctx][HD] */
};

enum { MAXP = 40 }; /* positions a block holds of the cache (ctx <= 16 * MAXP) */

struct Smem {
    __align__(16) float x[FF];        /* the gathered vector (largest FF) */
    __align__(16) int8_t xq[FF];      /* its int8 quantization */
    float resid[D];                   /* the residual stream, the same in every block */
    float out[2][128];                /* this block's slice of a phase's output, two buffers in turn (a
                                         block may write the next phase's slice while another still
                                         gathers this one) */
    uint4 w[5120];                    /* the phase's weights, copied in by cp.async before the barrier */
    __align__(16) float kv[2][MAXP][HD]; /* this block's positions of K and V, copied in at the layer's start */
    float red[64];
    float sc[MAXP][NH];
    float ml[16][2 * NH];             /* every block's (m, l), copied in for the combine */
    __align__(16) float att_ml[2 * NH];
    __align__(16) float att_o[NH * HD]; /* this block's attention partial */
    __align__(16) float q[2 * FF];
};

__device__ __forceinline__ int dot32(uint4 w, const int8_t *x) {
    /* 32 4-bit weights (offset binary, minus 8) against 32 int8 of x */
    const int4 xa = *(const int4 *)x, xb = *(const int4 *)(x + 16);
    const int xi[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    int s = 0;
    uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint32_t lo = ws[k] & 0x0f0f0f0fu, hi = (ws[k] >> 4) & 0x0f0f0f0fu;
        s = __dp4a((int)__vsub4(lo, 0x08080808u), xi[2 * k], s); /* nibble - 8 a byte */
        s = __dp4a((int)__vsub4(hi, 0x08080808u), xi[2 * k + 1], s);
    }
    return s;
}

__device__ __forceinline__ void cp16(void *dst, const void *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}

/* block's share of rows [r0, r0 + nr) of a [rows][cols/32] matrix into s.w by cp.async; rows at and
 * past `split` come from r1 + (row - split) instead (gate/up: the block's gate rows, then its up rows) */
__device__ __forceinline__ void w_load(Smem &s, const uint4 *w, int r0, int nr, int cpr, int split = 1 << 30,
                                       int r1 = 0) {
    int n = nr * cpr;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int r = i / cpr;
        int row = r < split ? r0 + r : r1 + (r - split);
        cp16(&s.w[i], w + (size_t)row * cpr + i % cpr);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* a warp a row, lanes over the row's 32-column chunks; the integer sum is exact in any order */
__device__ __forceinline__ void w_dot(Smem &s, int nr, int cpr, float xs, float *rowout, bool one_pending = false) {
    if (one_pending) /* the newest group (the next layer's cache) may still be in flight */
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    else
        asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nw = blockDim.x / 32;
    for (int r = warp; r < nr; r += nw) {
        int a = 0;
        for (int c = lane; c < cpr; c += 32) a += dot32(s.w[r * cpr + c], s.xq + c * 32);
        for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(~0u, a, o);
        if (lane == 0) rowout[r] = (float)a * xs;
    }
}

/* gather n floats, spread as nb slices of n/nb from every block's s.out[buf], into s.x */
__device__ __forceinline__ void gather(cg::cluster_group &cl, Smem &s, int n, int buf) {
    int nb = cl.num_blocks(), per = n / nb;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        Smem *o = cl.map_shared_rank(&s, i / per);
        s.x[i] = o->out[buf][i % per];
    }
    __syncthreads();
}

/* RMS of s.x[0..n) in a fixed order, then x * inv into xq (int8, one scale, returned) */
__device__ float normquant(Smem &s, int n, bool norm) {
    float ss = 0.f, am = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        ss += s.x[i] * s.x[i];
        am = fmaxf(am, fabsf(s.x[i]));
    }
    for (int o = 16; o; o >>= 1) {
        ss += __shfl_xor_sync(~0u, ss, o);
        am = fmaxf(am, __shfl_xor_sync(~0u, am, o));
    }
    const int lane = threadIdx.x & 31, nw = blockDim.x / 32;
    if (lane == 0) {
        s.red[threadIdx.x / 32] = ss;
        s.red[32 + threadIdx.x / 32] = am;
    }
    __syncthreads();
    float tss = lane < nw ? s.red[lane] : 0.f, tam = lane < nw ? s.red[32 + lane] : 0.f;
    for (int o = 16; o; o >>= 1) {
        tss += __shfl_xor_sync(~0u, tss, o);
        tam = fmaxf(tam, __shfl_xor_sync(~0u, tam, o));
    }
    float inv = norm ? rsqrtf(tss / n + 1e-6f) : 1.f;
    float sc = tam * inv / 127.f;
    float rs = sc > 0.f ? 1.f / sc : 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s.xq[i] = (int8_t)__float2int_rn(s.x[i] * inv * rs);
    __syncthreads(); /* xq complete; red free for the next call */
    return sc;
}

__device__ __forceinline__ void stamp(unsigned long long *ts, int i, bool on) {
    if (on && threadIdx.x == 0) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        ts[i] = t;
    }
}

/* the K and V rows of positions [p0, p0 + np) into s.kv */
__device__ __forceinline__ void kv_load(Smem &s, const LayerW &w, int p0, int np) {
    for (int i = threadIdx.x; i < np * (HD / 4); i += blockDim.x) {
        int p = i / (HD / 4), c = i % (HD / 4);
        cp16(&s.kv[0][p][c * 4], w.k + (size_t)(p0 + p) * HD + c * 4);
        cp16(&s.kv[1][p][c * 4], w.v + (size_t)(p0 + p) * HD + c * 4);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

__global__ void __launch_bounds__(1024, 1)
    cl_layers(const LayerW *lw, int nl, int ctx, const float *x0, float *xout, unsigned long long *ts) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Smem &s = *(Smem *)smem_raw;
    cg::cluster_group cl = cg::this_cluster();
    const int nb = cl.num_blocks(), b = cl.block_rank(), T = blockDim.x;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nw = T / 32;
    const int p0 = ctx * b / nb, p1 = ctx * (b + 1) / nb, np = p1 - p0;
    for (int i = threadIdx.x; i < D; i += T) {
        s.resid[i] = x0[i];
        s.x[i] = x0[i];
    }
    __syncthreads();
    float xs = normquant(s, D, true);
    int ob = 0; /* the out buffer the next phase writes */
    kv_load(s, lw[0], p0, np);
    w_load(s, lw[0].qkv, b * (NQKV / nb), NQKV / nb, D / 32);
    for (int l = 0; l < nl; l++) {
        const LayerW w = lw[l];
        const bool tr = b == 0 && l == nl / 2;
        stamp(ts, 0, tr);
        /* q/k/v: block b's rows */
        int nr = NQKV / nb;
        w_dot(s, nr, D / 32, xs, s.out[ob]);
        __syncthreads();
        cl_arrive();
        stamp(ts, 1, tr);
        cl_wait();
        gather(cl, s, NQKV, ob); /* q at [0, NQ); k, v of this position are not appended (a proxy) */
        ob ^= 1;
        stamp(ts, 2, tr);
        /* scores: a warp a position, 4 heads, K from shared memory */
        for (int p = warp; p < np; p += nw) {
            const float4 *kr = (const float4 *)s.kv[0][p];
            float4 k0 = kr[lane], k1 = kr[32 + lane];
            for (int h = 0; h < NH; h++) {
                const float4 *qh = (const float4 *)(s.x + h * HD);
                float4 a = qh[lane], c = qh[32 + lane];
                float d = k0.x * a.x + k0.y * a.y + k0.z * a.z + k0.w * a.w + k1.x * c.x + k1.y * c.y + k1.z * c.z +
                          k1.w * c.w;
                for (int o = 16; o; o >>= 1) d += __shfl_xor_sync(~0u, d, o);
                if (lane == 0) s.sc[p][h] = d * 0.0625f;
            }
        }
        __syncthreads();
        if (warp < NH) { /* warp h: head h's max and sum over the block's positions */
            const int h = warp;
            float v0 = lane < np ? s.sc[lane][h] : -INFINITY, v1 = lane + 32 < np ? s.sc[lane + 32][h] : -INFINITY;
            float m = fmaxf(v0, v1);
            for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(~0u, m, o));
            float e0 = lane < np ? __expf(v0 - m) : 0.f, e1 = lane + 32 < np ? __expf(v1 - m) : 0.f;
            if (lane < np) s.sc[lane][h] = e0;
            if (lane + 32 < np) s.sc[lane + 32][h] = e1;
            float l2 = e0 + e1;
            for (int o = 16; o; o >>= 1) l2 += __shfl_xor_sync(~0u, l2, o);
            if (lane == 0) {
                s.att_ml[h] = m;
                s.att_ml[NH + h] = l2;
            }
        }
        __syncthreads();
        for (int j = threadIdx.x; j < NH * HD; j += T) {
            int h = j / HD, d = j % HD;
            float o = 0.f;
            for (int p = 0; p < np; p++) o += s.sc[p][h] * s.kv[1][p][d];
            s.att_o[j] = o;
        }
        __syncthreads();
        cl_arrive();
        stamp(ts, 3, tr);
        /* wo's weights in flight while the partials meet */
        nr = D / nb;
        w_load(s, w.wo, b * nr, nr, NQ / 32);
        cl_wait();
        stamp(ts, 4, tr);
        /* combine: every block's (m, l) here, then block b's outputs [b*NQ/nb, ...) of the 1024 */
        if (threadIdx.x < nb * 2 * NH)
            s.ml[threadIdx.x / (2 * NH)][threadIdx.x % (2 * NH)] =
                cl.map_shared_rank(&s, threadIdx.x / (2 * NH))->att_ml[threadIdx.x % (2 * NH)];
        __syncthreads();
        for (int j = threadIdx.x; j < NQ / nb; j += T) {
            int jj = b * (NQ / nb) + j, h = jj / HD;
            float M = -INFINITY;
            for (int r = 0; r < nb; r++) M = fmaxf(M, s.ml[r][h]);
            float ov[16];
#pragma unroll
            for (int r = 0; r < 16; r++) ov[r] = r < nb ? cl.map_shared_rank(&s, r)->att_o[jj] : 0.f;
            float L = 0.f, O = 0.f;
#pragma unroll
            for (int r = 0; r < 16; r++)
                if (r < nb) {
                    float f = __expf(s.ml[r][h] - M);
                    L += s.ml[r][NH + h] * f;
                    O += ov[r] * f;
                }
            s.out[ob][j] = O / L;
        }
        __syncthreads();
        cl_arrive();
        stamp(ts, 5, tr);
        if (l + 1 < nl) kv_load(s, lw[l + 1], p0, np); /* the next layer's cache: this one's is read */
        cl_wait();
        gather(cl, s, NQ, ob);
        ob ^= 1;
        xs = normquant(s, NQ, false);
        stamp(ts, 6, tr);
        w_dot(s, nr, NQ / 32, xs, s.out[ob], l + 1 < nl);
        __syncthreads();
        cl_arrive();
        stamp(ts, 7, tr);
        int h = FF / nb;
        w_load(s, w.gu, b * h, 2 * h, D / 32, h, FF + b * h);
        cl_wait();
        gather(cl, s, D, ob);
        ob ^= 1;
        /* post norm of wo's output onto the residual, then the FFN norm: every block the same */
        normquant(s, D, true);
        for (int i = threadIdx.x; i < D; i += T) {
            s.resid[i] += s.x[i] * 0.5f;
            s.x[i] = s.resid[i];
        }
        __syncthreads();
        xs = normquant(s, D, true);
        stamp(ts, 8, tr);
        w_dot(s, 2 * h, D / 32, xs, s.q); /* gate rows then up rows */
        __syncthreads();
        for (int j = threadIdx.x; j < h; j += T) {
            float g = s.q[j], u = s.q[h + j];
            s.out[ob][j] = g * u / (1.f + __expf(-g));
        }
        __syncthreads();
        cl_arrive();
        stamp(ts, 9, tr);
        nr = D / nb;
        w_load(s, w.down, b * nr, nr, FF / 32);
        cl_wait();
        gather(cl, s, FF, ob);
        ob ^= 1;
        xs = normquant(s, FF, false);
        stamp(ts, 10, tr);
        w_dot(s, nr, FF / 32, xs, s.out[ob]);
        __syncthreads();
        if (l + 1 < nl) w_load(s, lw[l + 1].qkv, b * (NQKV / nb), NQKV / nb, D / 32);
        cl_arrive();
        stamp(ts, 11, tr);
        cl_wait();
        gather(cl, s, D, ob);
        ob ^= 1;
        normquant(s, D, true);
        for (int i = threadIdx.x; i < D; i += T) {
            s.resid[i] += s.x[i] * 0.5f;
            s.x[i] = s.resid[i];
        }
        __syncthreads();
        xs = normquant(s, D, true);
        stamp(ts, 12, tr);
    }
    /* no block may leave while another still reads its shared memory */
    cl_arrive();
    cl_wait();
    if (b == 0)
        for (int i = threadIdx.x; i < D; i += T) xout[i] = s.resid[i];
}

static void launch_cluster(const void *fn, int nb, int threads, size_t smem, void **args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(nb);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = nb;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    MC_BENCH_CHECK(cudaLaunchKernelExC(&cfg, fn, args));
}

int main(int argc, char **argv) {
    int ctx = argc > 1 ? atoi(argv[1]) : 576;
    int reps = argc > 2 ? atoi(argv[2]) : 50;
    if (ctx < 16 || ctx > 16 * MAXP || reps < 1 || reps > 100000) {
        fprintf(stderr, "usage: memra_cuda_cluster_bench [ctx 16..%d] [reps]\n", 16 * MAXP);
        return 2;
    }
    cudaDeviceProp prop;
    MC_BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
    int clk_khz = 0;
    MC_BENCH_CHECK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0));
    printf("device %s, %d multiprocessors, clock %d MHz\n", prop.name, prop.multiProcessorCount, clk_khz / 1000);
    MC_BENCH_CHECK(cudaFuncSetAttribute(cl_barrier_loop, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    MC_BENCH_CHECK(cudaFuncSetAttribute(cl_stream, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    MC_BENCH_CHECK(cudaFuncSetAttribute(cl_layers, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    MC_BENCH_CHECK(cudaFuncSetAttribute(cl_layers, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(Smem)));
    MC_BENCH_CHECK(cudaFuncSetAttribute(cl_layers, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    MC_BENCH_CHECK(cudaFuncSetAttribute(cl_layers, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(Smem)));
    cudaEvent_t e0, e1;
    MC_BENCH_CHECK(cudaEventCreate(&e0));
    MC_BENCH_CHECK(cudaEventCreate(&e1));

    /* barrier */
    unsigned long long *dcyc;
    MC_BENCH_CHECK(cudaMalloc(&dcyc, 8));
    const int NB_IT = 4096;
    for (int nb : {8, 16})
        for (int th : {512, 1024}) {
            int n = NB_IT;
            void *args[] = {&n, &dcyc};
            launch_cluster((const void *)cl_barrier_loop, nb, th, 0, args);
            MC_BENCH_CHECK(cudaDeviceSynchronize());
            launch_cluster((const void *)cl_barrier_loop, nb, th, 0, args);
            unsigned long long cyc;
            MC_BENCH_CHECK(cudaMemcpy(&cyc, dcyc, 8, cudaMemcpyDeviceToHost));
            printf("barrier cluster %2d x %4d threads: %.1f cycles, %.3f us a barrier\n", nb, th, (double)cyc / n,
                   (double)cyc / n / (clk_khz * 1e-3));
        }

    /* stream */
    size_t sbytes = (size_t)512 << 20;
    uint4 *sbuf;
    unsigned *dout;
    MC_BENCH_CHECK(cudaMalloc(&sbuf, sbytes));
    MC_BENCH_CHECK(cudaMalloc(&dout, 4));
    mc_bench_fill_words<<<1024, 256>>>((uint32_t *)sbuf, sbytes / 4, 7u, ~0u, 0u);
    MC_BENCH_CHECK(cudaDeviceSynchronize());
    for (int nb : {8, 16})
        for (int th : {512, 1024}) {
            size_t n = sbytes / 16;
            void *args[] = {&sbuf, &n, &dout};
            launch_cluster((const void *)cl_stream, nb, th, 0, args);
            MC_BENCH_CHECK(cudaEventRecord(e0));
            for (int r = 0; r < 3; r++) launch_cluster((const void *)cl_stream, nb, th, 0, args);
            MC_BENCH_CHECK(cudaEventRecord(e1));
            MC_BENCH_CHECK(cudaEventSynchronize(e1));
            float ms;
            MC_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            double gbs = 3.0 * sbytes / (ms * 1e-3) / 1e9;
            printf("stream cluster %2d x %4d threads: %.1f GB/s (%.1f GB/s a multiprocessor)\n", nb, th, gbs, gbs / nb);
        }
    /* the whole GPU for reference */
    {
        size_t n = sbytes / 16;
        cl_stream<<<prop.multiProcessorCount * 2, 1024>>>(sbuf, n, dout);
        MC_BENCH_CHECK(cudaEventRecord(e0));
        for (int r = 0; r < 3; r++) cl_stream<<<prop.multiProcessorCount * 2, 1024>>>(sbuf, n, dout);
        MC_BENCH_CHECK(cudaEventRecord(e1));
        MC_BENCH_CHECK(cudaEventSynchronize(e1));
        float ms;
        MC_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        printf("stream whole GPU (%d blocks x 1024): %.1f GB/s\n", prop.multiProcessorCount * 2,
               3.0 * sbytes / (ms * 1e-3) / 1e9);
    }
    MC_BENCH_CHECK(cudaFree(sbuf));

    /* layers */
    const int NL = 18;
    size_t wq = (size_t)NQKV * D / 2, wo = (size_t)D * NQ / 2, wgu = (size_t)2 * FF * D / 2, wd = (size_t)D * FF / 2;
    size_t kvb = (size_t)ctx * HD * 4;
    size_t per = wq + wo + wgu + wd + 2 * kvb;
    unsigned char *wbuf;
    MC_BENCH_CHECK(cudaMalloc(&wbuf, per * NL));
    mc_bench_fill_words<<<1024, 256>>>((uint32_t *)wbuf, per * NL / 4, 11u, ~0u, 0u);
    std::vector<LayerW> hl(NL);
    for (int l = 0; l < NL; l++) {
        unsigned char *p = wbuf + per * l;
        hl[l].qkv = (const uint4 *)p;
        hl[l].wo = (const uint4 *)(p + wq);
        hl[l].gu = (const uint4 *)(p + wq + wo);
        hl[l].down = (const uint4 *)(p + wq + wo + wgu);
        hl[l].k = (const float *)(p + wq + wo + wgu + wd);
        hl[l].v = (const float *)(p + wq + wo + wgu + wd + kvb);
    }
    /* KV as small floats: overwrite with a pattern of [-1, 1) */
    {
        std::vector<float> kv(2 * (size_t)ctx * HD);
        for (size_t i = 0; i < kv.size(); i++) kv[i] = (float)((i * 2654435761u >> 8) % 2000) / 1000.f - 1.f;
        for (int l = 0; l < NL; l++)
            MC_BENCH_CHECK(cudaMemcpy((void *)hl[l].k, kv.data(), 2 * kvb, cudaMemcpyHostToDevice));
    }
    LayerW *dl;
    MC_BENCH_CHECK(cudaMalloc(&dl, sizeof(LayerW) * NL));
    MC_BENCH_CHECK(cudaMemcpy(dl, hl.data(), sizeof(LayerW) * NL, cudaMemcpyHostToDevice));
    float *x0, *xo;
    unsigned long long *dts;
    MC_BENCH_CHECK(cudaMalloc(&dts, 16 * 8));
    MC_BENCH_CHECK(cudaMalloc(&x0, D * 4));
    MC_BENCH_CHECK(cudaMalloc(&xo, D * 4));
    {
        std::vector<float> h(D);
        for (int i = 0; i < D; i++) h[i] = (float)((i * 37) % 101) / 50.f - 1.f;
        MC_BENCH_CHECK(cudaMemcpy(x0, h.data(), D * 4, cudaMemcpyHostToDevice));
    }
    printf("layer bytes: %.2f MB weights + %.2f MB KV (ctx %d); %d layers a launch, %zu bytes of shared memory\n",
           (per - 2 * kvb) / 1e6, 2 * kvb / 1e6, ctx, NL, sizeof(Smem));
    std::vector<float> ref(D), got(D);
    bool have_ref = false, same = true;
    for (int th : {1024, 512}) {
        const int nb = 16;
        const void *fn = (const void *)cl_layers;
        for (int ctxv : {ctx, 64}) {
            int nl = NL;
            void *args[] = {&dl, &nl, &ctxv, &x0, &xo, &dts};
            launch_cluster(fn, nb, th, sizeof(Smem), args);
            MC_BENCH_CHECK(cudaDeviceSynchronize());
            MC_BENCH_CHECK(cudaMemcpy(got.data(), xo, D * 4, cudaMemcpyDeviceToHost));
            if (ctxv == ctx) {
                if (!have_ref) {
                    ref = got;
                    have_ref = true;
                }
            }
            std::vector<float> first = got;
            MC_BENCH_CHECK(cudaEventRecord(e0));
            for (int r = 0; r < reps; r++) launch_cluster(fn, nb, th, sizeof(Smem), args);
            MC_BENCH_CHECK(cudaEventRecord(e1));
            MC_BENCH_CHECK(cudaEventSynchronize(e1));
            float ms;
            MC_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            MC_BENCH_CHECK(cudaMemcpy(got.data(), xo, D * 4, cudaMemcpyDeviceToHost));
            if (memcmp(first.data(), got.data(), D * 4) != 0) {
                printf("layer cluster %d x %d: repetitions differ\n", nb, th);
                same = false;
            }
            double us = ms * 1e3 / reps;
            size_t bytes = per - 2 * kvb + (size_t)2 * ctxv * HD * 4;
            printf("layer cluster %2d x %4d threads, ctx %5d: %.2f us a launch of %d layers, %.2f us a layer (%.1f GB/s)\n",
                   nb, th, ctxv, us, NL, us / NL, bytes * NL / (us * 1e-6) / 1e9);
            unsigned long long hts[16];
            MC_BENCH_CHECK(cudaMemcpy(hts, dts, sizeof hts, cudaMemcpyDeviceToHost));
            static const char *const ph[12] = {"qkv dot", "wait+gather", "attention", "wait", "combine",
                                               "wait+gather+norm", "wo dot", "wait+gather+2 norms", "gate/up dot",
                                               "wait+gather+norm", "down dot", "wait+gather+2 norms"};
            printf("  block 0, layer %d, us:", NL / 2);
            for (int i = 0; i < 12; i++) printf(" %s %.2f;", ph[i], (hts[i + 1] - hts[i]) * 1e-3);
            printf("\n");
        }
    }
    double sum = 0;
    for (int i = 0; i < D; i++) sum += ref[i];
    printf("output sum %.6g (finite: %s); bits %s\n", sum, sum == sum ? "yes" : "NO", same ? "agree" : "DIFFER");
    return same ? 0 : 1;
}
