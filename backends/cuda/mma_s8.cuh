/* mma_s8.cuh: what the two int8 tensor-core chunk kernels share (chunk_mma.cu for Q8_0,
 * chunk_kq_mma.cu for the K-quants): the int8 MMA, the fragment loads, and the walk over decode's
 * classes in the order in which its xor tree pairs them (mc_mma_plan's steps). */
#ifndef MEMRA_CUDA_MMA_S8_CUH
#define MEMRA_CUDA_MMA_S8_CUH

#include <cuda_runtime.h>
#include <stdint.h>

/* Lets kernel fn take `bytes` of dynamic shared memory on the current device, once per device
 * (ready: the caller's flags, one per device; the first launch sets it, eager or captured). */
static inline cudaError_t mc_mma_smem_allow(const void *fn, int bytes, unsigned char *ready, int ndev) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    if (dev < 0 || dev >= ndev)
        return cudaErrorInvalidDevice;
    if (ready[dev])
        return cudaSuccess;
    if ((e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)) != cudaSuccess)
        return e;
    ready[dev] = 1;
    return cudaSuccess;
}

/* D = A B + c: 16 x 8 exact integer dots (plus c) of a 16 x 16 int8 A and a 16 x 8 int8 B. */
__device__ __forceinline__ void mc_mma_s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b, int c) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b), "r"(c));
}

/* A count known when compiled, for a step's generic lambda (a class's slots). */
template <uint32_t V> struct mc_mma_uconst {
    static constexpr uint32_t value = V;
};

/* The lane of class position n: decode's tree order (bit-reversed), or lane order (fault: the
 * check programs' negative control, a tree decode does not build). */
__device__ __forceinline__ uint32_t mc_mma_lane(uint32_t n, uint32_t fault) { return fault ? n : __brev(n) >> 27; }

/* D = A B + (c0, c1): as mc_mma_s8, the accumulator input c0 in the even columns of B, c1 in the
 * odd ones (element e of D: row g + 8 (e >> 1), column 2 q + (e & 1)). */
__device__ __forceinline__ void mc_mma_s8c(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b, int c0, int c1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%7,%8};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b), "r"(c0), "r"(c1));
}

/* Four 8 x 16-byte matrices from shared memory: lane i gives the address of row i % 8 of matrix
 * i / 8; register j of lane (g, q) is matrix j's row g, bytes 4 q .. 4 q + 3 (an m16n8k16 s8
 * fragment: A's a0, a1 for rows g, g + 8; B's b for column g). */
__device__ __forceinline__ void mc_ldsm4(uint32_t (&r)[4], const void *p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* The steps of the wide kernels: a step holds JB slots; the items of a part's classes (class n
 * of part p: lane mc_mma_lane(n), J = Q + (32 p + lane < R) items, Q and R the quotient and
 * remainder of the item count by the stride 32 KS) go jw slots a class, cps classes a step (cps a
 * power of two, so no step spans two parts), or, where a class has more than JB items, spc steps
 * a class. Steps run in order: part, class group, step of the class. */
struct mc_mma_plan {
    uint32_t Q, R, jw, cps, spc, groups, nsteps;
    uint32_t vfull, efull; /* where R is 0: every step's slots with items, a last step's class ends */
};
template <uint32_t JB> __host__ __device__ inline mc_mma_plan mc_mma_plan_make(uint32_t n_items, uint32_t ks) {
    mc_mma_plan P;
    const uint32_t stride = 32 * ks, jmax = (n_items + stride - 1) / stride;
    P.Q = n_items / stride, P.R = n_items % stride;
    P.jw = jmax < JB ? jmax : JB;
    P.cps = 1;
    while (P.jw * P.cps * 2 <= JB && P.cps < 32)
        P.cps *= 2;
    P.spc = (jmax + P.jw - 1) / P.jw;
    P.groups = 32 / P.cps;
    P.nsteps = ks * P.groups * P.spc;
    P.vfull = 0, P.efull = 0;
    for (uint32_t k = 0; k < P.cps; k++) {
        P.vfull |= ((1u << P.jw) - 1u) << (k * P.jw);
        P.efull |= 1u << (k * P.jw + P.jw - 1);
    }
    return P;
}
/* Where a step is: part p, class group cg, step jb of its classes. */
struct mc_mma_at {
    uint32_t p, cg, jb;
};
__device__ __forceinline__ void mc_mma_at_next(mc_mma_at &a, const mc_mma_plan &P) {
    if (++a.jb == P.spc) {
        a.jb = 0;
        if (++a.cg == P.groups) {
            a.cg = 0;
            a.p++;
        }
    }
}
/* Slot t = k jw + j of a step: class k of the step's group, its item j of the step. */
struct mc_mma_slot {
    uint32_t k, j;
};
template <uint32_t JB> __device__ __forceinline__ mc_mma_slot mc_mma_slot_of(const mc_mma_plan &P, uint32_t t) {
    return t < JB ? mc_mma_slot{t / P.jw, t % P.jw} : mc_mma_slot{~0u, 0};
}
/* The slot's item at a (its index, or ~0u where the slot holds none). */
__device__ __forceinline__ uint32_t mc_mma_item(const mc_mma_plan &P, const mc_mma_at &a, mc_mma_slot sl, uint32_t ks,
                                                uint32_t fault) {
    if (sl.k >= P.cps)
        return ~0u;
    const uint32_t first = 32 * a.p + mc_mma_lane(a.cg * P.cps + sl.k, fault), j = a.jb * P.jw + sl.j;
    const uint32_t J = P.Q + (first < P.R ? 1u : 0u);
    return j < J ? first + 32 * ks * j : ~0u;
}
/* The step's slots that hold an item (bit t), and those after which a class ends (its last slot
 * in its last step, whether or not the class has items there). */
template <uint32_t JB>
__device__ __forceinline__ void mc_mma_masks(const mc_mma_plan &P, const mc_mma_at &a, uint32_t fault, uint32_t &valid,
                                             uint32_t &ends) {
    ends = a.jb + 1 == P.spc ? P.efull : 0u;
    if (P.R == 0 && (a.jb + 1) * P.jw <= P.Q) { /* every class full in this step */
        valid = P.vfull;
        return;
    }
    valid = 0;
#pragma unroll 1
    for (uint32_t k = 0; k < P.cps; k++) {
        const uint32_t first = 32 * a.p + mc_mma_lane(a.cg * P.cps + k, fault);
        const uint32_t J = P.Q + (first < P.R ? 1u : 0u), j0 = a.jb * P.jw;
        const uint32_t nv = J > j0 ? min(J - j0, P.jw) : 0u;
        valid |= ((1u << nv) - 1u) << (k * P.jw);
    }
}

#endif
