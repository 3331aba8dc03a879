/* q8x_quant.h: the activation quantization of the cuda backend's integer Q8_0 GEMV, shared by
 * the kernel (gemv_q8_0_int in gemv_q8.cu) and a host test (C), so the test checks the code the
 * kernel runs.
 *
 * Per 16-column chunk of x' (x times the norm weight): amax = max |x'|, scale s = amax / QMAX,
 * q = rint(x' / s) with |q| <= QMAX = 127 * 2^16, written as three int8 planes q = 2^16 hi + 2^8
 * mid + lo. A chunk's dot with 16 int8 weights is then exact in 32-bit integers (three dp4a
 * chains, each at most 16 * 128 * 128 in magnitude) and is scaled once: (2^16 dot_hi + (2^8
 * dot_mid + dot_lo)) * (d_w * s). A chunk with a non-finite element gets s = NaN and q = 0, so
 * the NaN reaches the output instead of vanishing in the integers. */
#ifndef MEMRA_Q8X_QUANT_H
#define MEMRA_Q8X_QUANT_H

#include <math.h>

#ifdef __CUDACC__
#define MC_Q8X_HD __host__ __device__ __forceinline__
#else
#define MC_Q8X_HD static inline
#endif

#define MC_Q8X_QMAX 8323072.0f /* 127 * 2^16 */

/* q in [-QMAX, QMAX] into hi, mid, lo, each in [-128, 127] (hi in [-127, 127]). */
MC_Q8X_HD void mc_q8x_split(int q, int *hi, int *mid, int *lo) {
    const int h = (q + 32896) >> 16; /* rounds q / 2^16 so the rest lies in [-32896, 32639] */
    const int rest = q - 65536 * h;
    const int m = (rest + 128) >> 8; /* in [-128, 127] */
    *hi = h;
    *mid = m;
    *lo = rest - 256 * m; /* in [-128, 127] */
}

/* The multiplier x' -> q of a chunk (0 for an all-zero or non-finite chunk). */
MC_Q8X_HD float mc_q8x_inv(float amax, int finite) { return finite && amax > 0.0f ? MC_Q8X_QMAX / amax : 0.0f; }

/* The chunk's scale s (q * s approximates x'); NaN for a non-finite chunk. */
MC_Q8X_HD float mc_q8x_scale(float amax, int finite) { return finite ? amax / MC_Q8X_QMAX : nanf(""); }

#endif
