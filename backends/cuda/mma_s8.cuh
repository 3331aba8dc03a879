/* mma_s8.cuh: what the two int8 tensor-core chunk kernels share (chunk_mma.cu for Q8_0,
 * chunk_kq_mma.cu for the K-quants): the int8 MMA, and the walk over decode's classes in the
 * order in which its xor tree pairs them. */
#ifndef MEMRA_CUDA_MMA_S8_CUH
#define MEMRA_CUDA_MMA_S8_CUH

#include <stdint.h>

/* D = A B + c: 16 x 8 exact integer dots (plus c) of a 16 x 16 int8 A and a 16 x 8 int8 B. */
__device__ __forceinline__ void mc_mma_s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b, int c) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b), "r"(c));
}

/* The steps in order: part p, class position n (lane rev5(n)), batch jb of the class's items
 * (Q8_0 chunks, K-quant units); classes without items have no step. */
struct mc_mma_cursor {
    uint32_t p, n, jb, valid;
};
/* The lane of class position n: decode's tree order (bit-reversed), or lane order (fault: the
 * check programs' negative control, a tree decode does not build). */
__device__ __forceinline__ uint32_t mc_mma_lane(uint32_t n, uint32_t fault) { return fault ? n : __brev(n) >> 27; }
/* The items of a class: first, then every stride-th below n_items. */
__device__ __forceinline__ uint32_t mc_mma_count(uint32_t first, uint32_t n_items, uint32_t stride) {
    return first < n_items ? (n_items - 1 - first) / stride + 1 : 0;
}
/* Moves c to the next step of JB items (from c itself when `from` is 0). */
template <uint32_t JB>
__device__ __forceinline__ void mc_mma_next(mc_mma_cursor &c, uint32_t n_items, uint32_t ks, uint32_t fault,
                                            int from) {
    if (from)
        c.jb++;
    for (;;) {
        if (c.p >= ks) {
            c.valid = 0;
            return;
        }
        const uint32_t J = mc_mma_count(32 * c.p + mc_mma_lane(c.n, fault), n_items, 32 * ks);
        if (c.jb * JB < J) {
            c.valid = 1;
            return;
        }
        c.jb = 0;
        if (++c.n == 32) {
            c.n = 0;
            c.p++;
        }
    }
}

__device__ __forceinline__ void mc_mma_keep(float (&dst)[8], const float (&src)[8]) {
#pragma unroll
    for (uint32_t e = 0; e < 8; e++)
        dst[e] = src[e];
}

#endif
