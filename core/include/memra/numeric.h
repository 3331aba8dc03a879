/* memra/numeric.h: conversions and the counter-based random draw, shared by every backend.
 *
 * Header-only and usable from CUDA (MEMRA_HD marks functions host and device), so a GPU kernel
 * decodes F16/BF16/Q8_0 and draws the sampling uniform with exactly the code the cpu backend
 * uses. */
#ifndef MEMRA_NUMERIC_H
#define MEMRA_NUMERIC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define MEMRA_HD __host__ __device__ __forceinline__
#else
#define MEMRA_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

MEMRA_HD float memra_bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

MEMRA_HD uint32_t memra_f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* IEEE half to float, exact (every half is a float). */
MEMRA_HD float memra_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while ((mant & 0x400u) == 0) {
                mant <<= 1;
                exp--;
            }
            mant &= 0x3ffu;
            bits = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    return memra_bits_to_f32(bits);
}

/* Float to IEEE half, round to nearest even; overflow gives infinity. */
MEMRA_HD uint16_t memra_f32_to_f16(float f) {
    uint32_t x = memra_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (absx < 0x33000000u)
            return (uint16_t)sign;
        /* value = m * 2^(e-150) and a half subnormal is r * 2^-24, so r = m >> (126 - e). */
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (r & 1u)))
            r++; /* a carry into 0x400 is the smallest normal half, as it should be */
        return (uint16_t)(sign | r);
    }
    uint32_t r = absx - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t lsb = (r >> 13) & 1u;
    r += 0xfffu + lsb;
    return (uint16_t)(sign | (r >> 13));
}

MEMRA_HD float memra_bf16_to_f32(uint16_t h) { return memra_bits_to_f32((uint32_t)h << 16); }

/* Float to bfloat16, round to nearest even; NaN stays NaN. */
MEMRA_HD uint16_t memra_f32_to_bf16(float f) {
    uint32_t x = memra_f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* Float arithmetic with one rounding per operation on host and device alike: in CUDA device code
 * the _rn intrinsics stop the compiler from contracting a*b+c into one fused operation (which
 * rounds once, not twice); C code is built with -ffp-contract=off for the same reason. */
#if defined(__CUDA_ARCH__)
#define MEMRA_FMUL(a, b) __fmul_rn((a), (b))
#define MEMRA_FADD(a, b) __fadd_rn((a), (b))
#define MEMRA_FSUB(a, b) __fsub_rn((a), (b))
#define MEMRA_FDIV(a, b) __fdiv_rn((a), (b))
#else
#define MEMRA_FMUL(a, b) ((float)(a) * (float)(b))
#define MEMRA_FADD(a, b) ((float)(a) + (float)(b))
#define MEMRA_FSUB(a, b) ((float)(a) - (float)(b))
#define MEMRA_FDIV(a, b) ((float)(a) / (float)(b))
#endif

/* The KV cache's 8-bit storage (the kv=q8 key of the cpu and cuda backends), one block of 32
 * values of a cache row: the scale d = amax / 127, amax the block's largest magnitude (a maximum:
 * exact in any order; memra_kv_q8_amax); each value's quant q = x / d rounded to nearest even and clamped to
 * [-127, 127] (0 where d is 0, NaN, or x / d is NaN); a value reads back as (float)q * d. The same
 * operations on host and device, so the cpu and the GPU store the same bytes from the same floats. */
MEMRA_HD float memra_kv_q8_scale(float amax) { return MEMRA_FDIV(amax, 127.0f); }

/* A block's running amax with x (or with another part's amax) folded in: the larger magnitude,
 * NaN once any value is NaN (a NaN in a row then reads back as NaN across its block, never as a
 * quietly stored 0). */
MEMRA_HD float memra_kv_q8_amax(float a, float x) {
    const float m = fabsf(x);
    return a != a || m != m ? memra_bits_to_f32(0x7fc00000u) : m > a ? m : a;
}

MEMRA_HD int8_t memra_kv_q8_quant(float x, float d) {
    if (!(d > 0.0f))
        return 0;
    const float r = rintf(MEMRA_FDIV(x, d));
    return r != r ? (int8_t)0 : r >= 127.0f ? (int8_t)127 : r <= -127.0f ? (int8_t)-127 : (int8_t)r;
}

MEMRA_HD float memra_kv_q8_value(int8_t q, float d) { return MEMRA_FMUL((float)q, d); }

/* exp(x) for x <= 0, the same bits on every backend (libm's expf and CUDA's differ in the last
 * place, which would let a sampler pick another token from the same logits). Relative error
 * below 3e-7 on [-87, 0]; x < -87 gives 0 (the sampler's weights are then negligible). Built from
 * single operations only: k = round(x / ln 2), r = x - k ln 2 in two parts (Cody-Waite),
 * exp(r) by a degree-6 Taylor polynomial on |r| <= ln2/2, scaled by 2^k through the exponent
 * bits. */
MEMRA_HD float memra_expf(float x) {
    if (x != x)
        return x;
    if (x > 0.0f)
        x = 0.0f; /* callers pass x <= 0; keep the result finite regardless */
    if (x < -87.0f)
        return 0.0f;
    float kf = MEMRA_FADD(MEMRA_FMUL(x, 1.44269504088896341f), -0.5f); /* x/ln2 - 1/2 <= -1/2 */
    int k = (int)kf;                                                   /* truncates toward zero */
    if ((float)k != kf && kf < 0.0f)
        k -= 1; /* floor(x/ln2 + 1/2) - 1 + 1 below: round to nearest */
    k += 1;
    float fk = (float)k;
    float r = MEMRA_FSUB(x, MEMRA_FMUL(fk, 0.693145751953125f)); /* ln2 high part: exact product */
    r = MEMRA_FSUB(r, MEMRA_FMUL(fk, 1.428606765330187e-06f));   /* ln2 low part */
    float p = 1.0f / 720.0f;
    p = MEMRA_FADD(MEMRA_FMUL(p, r), 1.0f / 120.0f);
    p = MEMRA_FADD(MEMRA_FMUL(p, r), 1.0f / 24.0f);
    p = MEMRA_FADD(MEMRA_FMUL(p, r), 1.0f / 6.0f);
    p = MEMRA_FADD(MEMRA_FMUL(p, r), 0.5f);
    p = MEMRA_FADD(MEMRA_FMUL(p, r), 1.0f);
    p = MEMRA_FADD(MEMRA_FMUL(p, r), 1.0f);
    if (k < -126)
        return 0.0f; /* below the normal range: flushed, deterministically */
    return MEMRA_FMUL(p, memra_bits_to_f32((uint32_t)(k + 127) << 23));
}

/* The sampling draw: a uniform float in [0, 1) that depends only on (seed, position), so a
 * position replayed on any backend gets the same draw. Two rounds of the SplitMix64 finaliser
 * over seed ^ (position * golden ratio); the top 24 bits scaled by 2^-24 (exact in float). */
MEMRA_HD uint64_t memra_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

MEMRA_HD float memra_uniform(uint64_t seed, uint64_t position) {
    uint64_t z = memra_mix64(seed ^ (position * 0x9e3779b97f4a7c15ull));
    z = memra_mix64(z + 0x9e3779b97f4a7c15ull);
    return (float)(uint32_t)(z >> 40) * (1.0f / 16777216.0f);
}

#ifdef __cplusplus
}
#endif
#endif
