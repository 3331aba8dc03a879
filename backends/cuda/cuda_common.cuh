/* cuda_common.cuh: what the kernel files of the cuda backend share (internal, device code): the
 * warp sum, the programmatic-launch wait and its trigger mask, the row-group store of the GEMVs,
 * the launch attributes of a programmatic launch, and each file's census and trigger hooks.
 *
 * Determinism: every reduction has a fixed shape (lane order, then a fixed xor-shuffle tree, then
 * warps in index order); no float atomics. */
#ifndef MEMRA_CUDA_COMMON_CUH
#define MEMRA_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "memra/gguf.h"
#include "memra/numeric.h"

#define MC_FULL 0xffffffffu
#define MC_MAX_DEVICES 64
#define MC_GEMV_ROWS 4 /* rows of a GEMV row group (one warp, or KS warps, per group) */

/* Column parts KS of the quantized row-group GEMVs on 16-warp blocks, one a multiprocessor (or 8 in
 * two), and of their prefill chunks; functions of the row count alone (the bits depend on them), 2112
 * (16 warps on each of 132 multiprocessors) a constant of the rules, never the device's count.
 * mc_ksplit_fill (Q8_0's integer kernel, Q4_0..Q5_1): the largest of 4, 2, 1 with row groups * KS
 * <= 2112. */
static inline uint32_t mc_ksplit_fill(uint32_t rows) {
    const uint64_t groups = (rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS;
    return groups * 4 <= 2112 ? 4 : groups * 2 <= 2112 ? 2 : 1;
}

/* mc_ksplit_balance (Q4_K..Q6_K): mc_ksplit_fill, but past the 2112 slots KS 2 where halving each
 * warp's task cuts the busiest warp's work by an eighth or more: with t_1 = ceil(groups / 2112)
 * tasks a warp at KS 1 and t_2 = ceil(2 groups / 2112) half tasks at KS 2, KS 2 where t_2 / 2 <= 7
 * t_1 / 8 (llama-8b's gate/up, 7168 groups: 4 tasks for the busiest warp while most have 3, against
 * 7 halves; the per-block timeline of bench/gpu/NOTES.md showed the warps of 3 done ~4 us before
 * those of 4). Measured on the H200 (bench/RESULTS.md, seventh session): 8B Q6_K +1.7%, Q4_K +0.8%,
 * their pp512 -1.8%; the same rule on Q8_0 and Q4_0 gave +0.7% and +0.3% for -1.7% and -2.5% of
 * pp512, so they keep mc_ksplit_fill. */
static inline uint32_t mc_ksplit_balance(uint32_t rows) {
    const uint64_t groups = (rows + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS;
    if (groups * 4 <= 2112)
        return 4;
    if (groups * 2 <= 2112)
        return 2;
    const uint64_t t1 = (groups + 2111) / 2112, t2 = (2 * groups + 2111) / 2112;
    return 8 * t2 <= 14 * t1 ? 2 : 1;
}

/* Per device: multiprocessors (0 until mc_gemv_prepare ran there). Host; gemv.cu owns it. */
extern uint32_t mc_sm_count[MC_MAX_DEVICES];

/* The KV cache's storage type (the arm's kv key): float (f32), __half (f16) or __nv_bfloat16
 * (bf16). The attention kernels are templates on it; with float every helper below is the plain
 * load or store the f32 kernels have always done (no conversion, no extra operation). A value is
 * rounded to nearest even as it is written, with the cpu backend's functions (memra/numeric.h:
 * the same bits, NaN kept NaN), and read back exactly (f16 and bf16 widen to f32 without
 * rounding). */
template <typename KT> inline constexpr bool mc_kv_is_f32 = false;
template <> inline constexpr bool mc_kv_is_f32<float> = true;
__device__ __forceinline__ float mc_kv_get(float x) { return x; }
__device__ __forceinline__ float mc_kv_get(__half x) { return __half2float(x); }
__device__ __forceinline__ float mc_kv_get(__nv_bfloat16 x) {
    return __uint_as_float((uint32_t)__bfloat16_as_ushort(x) << 16);
}
template <typename KT> __device__ __forceinline__ KT mc_kv_put(float x);
template <> __device__ __forceinline__ float mc_kv_put<float>(float x) { return x; }
template <> __device__ __forceinline__ __half mc_kv_put<__half>(float x) {
    return __ushort_as_half(memra_f32_to_f16(x));
}
template <> __device__ __forceinline__ __nv_bfloat16 mc_kv_put<__nv_bfloat16>(float x) {
    return __ushort_as_bfloat16(memra_f32_to_bf16(x));
}
/* Four (two) consecutive stored values as floats: p 16-byte (8-byte) aligned for float, 8-byte
 * (4-byte) for the 2-byte types. */
__device__ __forceinline__ float4 mc_kv_load4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float2 mc_kv_load2(const float *p) { return *(const float2 *)p; }
template <typename KT> __device__ __forceinline__ float4 mc_kv_load4(const KT *p) {
    const uint2 u = *(const uint2 *)p;
    const KT *e = (const KT *)&u;
    return make_float4(mc_kv_get(e[0]), mc_kv_get(e[1]), mc_kv_get(e[2]), mc_kv_get(e[3]));
}
template <typename KT> __device__ __forceinline__ float2 mc_kv_load2(const KT *p) {
    const uint32_t u = *(const uint32_t *)p;
    const KT *e = (const KT *)&u;
    return make_float2(mc_kv_get(e[0]), mc_kv_get(e[1]));
}
/* kv=q8 (MC_KV_Q8): the kernels' KT is mc_q8, one byte of a stored row; a row of HD values is
 * MC_KV_ROWE<HD, mc_q8> = HD + HD / 8 bytes: the HD / 32 blocks' f32 scales, then the HD signed
 * quants (memra/numeric.h's memra_kv_q8_*: the cpu backend's operations). For the other types a
 * row is HD values. */
struct mc_q8 {
    uint8_t b;
};
template <typename KT> inline constexpr bool mc_kv_is_q8 = false;
template <> inline constexpr bool mc_kv_is_q8<mc_q8> = true;
template <uint32_t HD, typename KT> inline constexpr uint32_t MC_KV_ROWE = HD;
template <uint32_t HD> inline constexpr uint32_t MC_KV_ROWE<HD, mc_q8> = HD + HD / 8;

/* Calls F(KT) with the storage type of kv (MC_KV_F32, MC_KV_F16, MC_KV_BF16). */
#define MC_KV_DISPATCH(kv, F) ((kv) == MC_KV_F16 ? F(__half) : (kv) == MC_KV_BF16 ? F(__nv_bfloat16) : F(float))

__device__ __forceinline__ float mc_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(MC_FULL, v, o);
    return v; /* lane 0's value is the one used: a fixed tree */
}

/* Programmatic dependent launch: a kernel may start while the kernel before it drains, streaming
 * its first weights (which depend on nothing) before it waits for that kernel's results. The
 * wait is followed by the trigger when the kernel's family bit is set in the trigger mask (the
 * arm's trigger key; bench/gpu/NOTES.md has the measurements behind the default, 115): 1 the
 * F32/F16/BF16 GEMVs of short rows (the persistent kernel), 2 the Q8_0 GEMVs on integer dots (and
 * the Q4_0 .. Q5_1 GEMVs, gemv_legacy.cu, on either path), 4
 * attention, 8 the row-group GEMVs with a norm, 16 attention whose output has 4096 floats or
 * more or 1024 or fewer (MC_ATT_SHAPED), 32 the F32/F16/BF16 row-group GEMVs without a norm (the down projection), 64 the Q8_0
 * row-group GEMV without a norm (Q8_0 down). Once every block of this grid has passed its wait
 * (so every kernel before the previous one has completed), the next kernel in the stream or
 * graph may start its own pre-wait work in the slots this grid frees. A kernel's pre-wait part
 * therefore reads only data of kernels two or more launches back (weights, *pos, cache rows of
 * earlier steps), never its predecessor's output. The mask changes when a kernel starts, never
 * what it computes. */
#define MC_TRIGGER_GEMV 1u
#define MC_TRIGGER_Q8 2u
#define MC_TRIGGER_ATT 4u
#define MC_TRIGGER_GEMV6 8u
#define MC_TRIGGER_ATT_WIDE 16u
#define MC_TRIGGER_GEMV6_RES 32u
#define MC_TRIGGER_GEMV6_RES_Q8 64u
/* Attention's family bits: bit 16 too where the output projection that follows reads 4096
 * columns or more (llama-8b: measured faster, issue 24) or 1024 or fewer (SmolLM2's 576: +4.2%,
 * 1748.6 -> 1822.7 tok/s, gemma3-270m's 1024: +0.6%; llama-1b's 2048 lost 1.8%, so not there:
 * bench/RESULTS.md, session of 2026-12-02, fourth). */
#define MC_ATT_SHAPED(a) ((a).n_head * (a).hdv >= 4096u || (a).n_head * (a).hdv <= 1024u)
#define MC_ATT_FAMILY(a) (MC_ATT_SHAPED(a) ? MC_TRIGGER_ATT | MC_TRIGGER_ATT_WIDE : MC_TRIGGER_ATT)
/* One copy per kernel file (and device); mc_trigger_enqueue writes every copy. */
static __constant__ unsigned mc_trigger_mask = MC_TRIGGER_DEFAULT;
__device__ __forceinline__ void mc_wait_prior_grid(unsigned family) {
    const unsigned on = mc_trigger_mask & family; /* read before the wait */
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (on)
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* A mixture of experts' slot whose expert another rank holds (gemv_experts' contract): zeros in
 * the outputs of this block's row groups [g0, g1) of n_groups (rows_e rows; half with a GLU). */
template <int GLU>
__device__ __forceinline__ void mc_experts_zero(float *yj, uint32_t rows_e, uint32_t n_groups) {
    const uint32_t g0 = (uint32_t)((uint64_t)n_groups * blockIdx.x / gridDim.x);
    const uint32_t g1 = (uint32_t)((uint64_t)n_groups * (blockIdx.x + 1) / gridDim.x);
    const uint32_t div = GLU ? 2u : 1u, r1 = g1 * MC_GEMV_ROWS < rows_e ? g1 * MC_GEMV_ROWS : rows_e;
    for (uint32_t o = g0 * MC_GEMV_ROWS / div + threadIdx.x; o < r1 / div; o += blockDim.x)
        yj[o] = 0.0f;
}

/* The slot of an experts' kernel of the quantized families and of experts=int (gemv_experts'
 * contract, gemv_moe.cu): block row y is slot j, whose expert sel[j] (written by the kernel just
 * before: read after the wait) owns rows (sel[j] - e0) rows_e .. of the stack (its data, and its
 * aux plane or Q8_0 scales, in bytes a row); its input x + j ldx, its output y + j ldy. False,
 * with zeros written, for an id outside [e0, e1); else *w, *xj, *yj are the slot's. */
template <int GLU>
__device__ __forceinline__ bool mc_experts_slot(const mc_matrix &stack, uint32_t rows_e, const int32_t *sel,
                                                uint32_t e0, uint32_t e1, const float *x, uint32_t ldx, float *y,
                                                uint32_t ldy, uint32_t n_groups, mc_matrix &w, const float *&xj,
                                                float *&yj) {
    mc_wait_prior_grid(0); /* the ids come from the kernel just before */
    const uint32_t j = blockIdx.y, e = (uint32_t)sel[j];
    yj = y + (size_t)j * ldy;
    if (e < e0 || e >= e1) {
        mc_experts_zero<GLU>(yj, rows_e, n_groups);
        return false;
    }
    const size_t first = (size_t)(e - e0) * rows_e;
    w = stack;
    w.rows = rows_e;
    w.data = (char *)stack.data + first * stack.stride;
    if (stack.aux)
        w.aux = (char *)stack.aux + first * stack.aux_stride;
    if (stack.scales)
        w.scales = stack.scales + first * (stack.cols / MEMRA_Q8_0_BLOCK);
    xj = x + (size_t)j * ldx;
    return true;
}

/* The gated activations of an FFN whose gate and up rows are interleaved (the GLU template
 * parameter of the GEMV kernels and mc_rows_store): none (a plain GEMV), SiLU (llama, qwen) or
 * GELU with the tanh approximation (gemma3), each as the cpu backend computes it. */
/* MC_GLU_NONE, MC_GLU_SILU, MC_GLU_GELU: cuda_kernels.h (the launchers take them) */
template <int GLU> __device__ __forceinline__ float mc_glu(float g, float u) {
    if (GLU == MC_GLU_GELU)
        return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
    return g / (1.0f + expf(-g)) * u;
}

/* Writes a finished row group (rows r0 .. r0+N-1, scaled; N = 4, or a warp's share of the group
 * where its warps split the rows, qblock=16r): with a GLU (SWIGLU nonzero: MC_GLU_SILU or
 * MC_GLU_GELU; N even) y[p] = act(row 2p) * row 2p+1 (gate and up interleaved), else y[row] =
 * residual[row] + (d + bias[row]); rows past the end are skipped. Called by the one lane that
 * holds the group's sums. */
template <int SWIGLU, uint32_t N = MC_GEMV_ROWS>
__device__ __forceinline__ void mc_rows_store(const float (&d)[N], uint32_t r0, uint32_t rows, const float *bias,
                                              const float *residual, float *y) {
    if (SWIGLU) {
#pragma unroll
        for (uint32_t r = 0; r < N; r += 2)
            if (r0 + r + 1 < rows)
                y[(r0 + r) / 2] = mc_glu<SWIGLU>(d[r], d[r + 1]);
    } else { /* every load before the first store (y may be the residual: no load could pass a store) */
        float v[N];
#pragma unroll
        for (uint32_t r = 0; r < N; r++) {
            const uint32_t row = r0 + r;
            v[r] = d[r];
            if (row < rows && bias)
                v[r] += bias[row];
            if (row < rows && residual)
                v[r] = residual[row] + v[r];
        }
#pragma unroll
        for (uint32_t r = 0; r < N; r++) {
            if (r0 + r >= rows)
                break;
            y[r0 + r] = v[r];
        }
    }
}

/* mc_rows_store with the group's residual (or, without one, its bias) loaded ahead by
 * mc_rows_fetch (the lane that stores, at the group's last iteration, so the L2 round trip runs
 * beside the last dots and the sums instead of after them): the same values added in the same
 * order, so the same bits. A bias beside a residual is read at the store, as before. */
template <int SWIGLU, uint32_t N = MC_GEMV_ROWS>
__device__ __forceinline__ void mc_rows_fetch(float (&pre)[N], uint32_t r0, uint32_t rows, const float *bias,
                                              const float *residual) {
    if (SWIGLU)
        return;
    const float *src = residual ? residual : bias;
#pragma unroll
    for (uint32_t r = 0; r < N; r++)
        pre[r] = src && r0 + r < rows ? src[r0 + r] : 0.0f;
}
template <int SWIGLU, uint32_t N = MC_GEMV_ROWS>
__device__ __forceinline__ void mc_rows_store_pre(const float (&d)[N], const float (&pre)[N], uint32_t r0,
                                                  uint32_t rows, const float *bias, const float *residual, float *y) {
    if (SWIGLU)
        mc_rows_store<SWIGLU, N>(d, r0, rows, bias, residual, y);
    else
#pragma unroll
        for (uint32_t r = 0; r < N; r++) {
            const uint32_t row = r0 + r;
            float v = d[r];
            if (row >= rows)
                break;
            if (bias)
                v += residual ? bias[row] : pre[r];
            if (residual)
                v = pre[r] + v;
            y[row] = v;
        }
}

/* mc_rows_fetch for a kernel with no register to spare (the Q4_0 .. Q5_1 bodies, at 128): the
 * group's 4 residual (or bias) values copied by cp.async into a 16-byte slot of shared memory,
 * which holds no register while the copy is in flight; mc_rows_store_async waits for the copy and
 * stores with mc_rows_store_pre's arithmetic, so the bits are mc_rows_store's. Where the source is
 * not 16-byte aligned, the group is not whole, or there is nothing to fetch (a GLU, or neither a
 * residual nor a bias), both fall back to mc_rows_store's loads at the store: the one test,
 * mc_rows_async_ok, decides both sides. Called by the storing lane only. */
template <int SWIGLU>
__device__ __forceinline__ bool mc_rows_async_ok(uint32_t r0, uint32_t rows, const float *bias, const float *residual) {
    const float *src = residual ? residual : bias;
    return !SWIGLU && src && r0 + MC_GEMV_ROWS <= rows && ((uintptr_t)(src + r0) & 15u) == 0;
}
template <int SWIGLU>
__device__ __forceinline__ void mc_rows_fetch_async(float4 *slot, uint32_t r0, uint32_t rows, const float *bias,
                                                    const float *residual) {
    if (!mc_rows_async_ok<SWIGLU>(r0, rows, bias, residual))
        return;
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(slot);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(s), "l"((residual ? residual : bias) + r0)
                 : "memory");
}
template <int SWIGLU>
__device__ __forceinline__ void mc_rows_store_async(const float (&d)[MC_GEMV_ROWS], const float4 *slot, uint32_t r0,
                                                    uint32_t rows, const float *bias, const float *residual, float *y) {
    if (!mc_rows_async_ok<SWIGLU>(r0, rows, bias, residual)) {
        mc_rows_store<SWIGLU>(d, r0, rows, bias, residual, y);
        return;
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    const float4 p = *slot; /* after the wait (the asm's memory clobber keeps the read below it) */
    const float pre[MC_GEMV_ROWS] = {p.x, p.y, p.z, p.w};
    mc_rows_store_pre<SWIGLU>(d, pre, r0, rows, bias, residual, y);
}

/* ptxas (sm_90) gives every kernel of a module that declares dynamic shared memory a 1 KB reserved
 * shared-memory block, whether the kernel uses shared memory or not. The kernels once lived in one
 * module that did; a kernel file none of whose kernels declares dynamic shared memory defines this
 * never-launched kernel, so that its kernels keep that layout (the same resources, occupancy and
 * carveout as before the split into files). */
#define MC_DYNAMIC_SMEM_ANCHOR(name)                                                                                   \
    __global__ void name(void) {                                                                                       \
        extern __shared__ float mc_smem_anchor[];                                                                      \
        mc_smem_anchor[threadIdx.x] = 0.0f;                                                                            \
    }

/* The launch attributes after the `n` a launcher set itself: programmatic stream serialization
 * when pdl (mc_launch_attrs: when the arm's pdl key is 1). */
static inline void mc_launch_attrs_pdl(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, unsigned n, bool pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    cfg->attrs = attr;
    cfg->numAttrs = n + (pdl ? 1 : 0);
}
static inline void mc_launch_attrs(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, unsigned n, const mc_config *c) {
    mc_launch_attrs_pdl(cfg, attr, n, c->pdl != 0);
}
/* A thread-block cluster of `blocks` blocks in x (attr[0]), then programmatic stream serialization
 * when pdl (attr[1]: attr holds two). */
static inline void mc_launch_attrs_cluster(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, unsigned blocks,
                                           bool pdl) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = blocks;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    mc_launch_attrs_pdl(cfg, attr, 1, pdl);
}

/* The launch of an experts' kernel fn (mc_experts_slot above) (blocks of `warps` warps, KS column parts, smem bytes of shared
 * memory, its limit `lim` set once per device through *ready): the fewest blocks whose warp slots
 * hold a slot's row groups, k block rows; the arguments of gemv_experts' contract. */
template <typename F>
static cudaError_t mc_experts_go(const mc_config *c, F fn, int *ready, int lim, uint32_t warps, uint32_t ks,
                                 uint32_t smem, const mc_matrix *w, uint32_t rows_e, const int32_t *sel, uint32_t k,
                                 uint32_t e0, uint32_t e1, const float *x, uint32_t ldx, const float *norm_w,
                                 float eps, float *y, uint32_t ldy, cudaStream_t st) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    if (dev < 0 || dev >= MC_MAX_DEVICES || e1 < e0 || (uint64_t)(e1 - e0) * rows_e > w->rows || (int)smem > lim)
        return cudaErrorInvalidValue;
    if (!ready[dev]) {
        if ((e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, lim)) != cudaSuccess)
            return e;
        ready[dev] = 1;
    }
    const uint32_t n_groups = (rows_e + MC_GEMV_ROWS - 1) / MC_GEMV_ROWS, slots = warps / ks;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((n_groups + slots - 1) / slots, k);
    cfg.blockDim = dim3(32 * warps);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs(&cfg, attr, 0, c);
    e = cudaLaunchKernelEx(&cfg, fn, *w, rows_e, sel, e0, e1, x, ldx, norm_w, eps, y, ldy, n_groups);
    return e != cudaSuccess ? e : cudaGetLastError();
}

/* A census table's row (a kernel and its family), and the lookup every file's table shares: the
 * family of f, NULL when the table does not hold it. */
typedef struct mc_family_row {
    const void *func;
    const char *family;
} mc_family_row;
static inline const char *mc_family_find(const mc_family_row *t, size_t n, const void *f) {
    for (size_t i = 0; i < n; i++)
        if (t[i].func == f)
            return t[i].family;
    return NULL;
}

/* Per kernel file: the census family of one of its kernels (NULL if not its own), and the device
 * address of its copy of the trigger mask (on the current device). */
const char *mc_gemv_family(const void *func);
const char *mc_gemv_q8_family(const void *func);
const char *mc_attention_family(const void *func);
const char *mc_attention_unfused_family(const void *func);
const char *mc_sampler_family(const void *func);
const char *mc_digest_family(const void *func);
const char *mc_token_family(const void *func);
const char *mc_op_glue_family(const void *func);
const char *mc_chunk_family(const void *func);
const char *mc_moe_family(const void *func);          /* moe.cu (and gemv_moe.cu's gemv_experts) */
const char *mc_gemv_experts_family(const void *func); /* gemv_moe.cu */
const char *mc_moe_router_family(const void *func);   /* moe_router.cu: "moe_router" or NULL */
cudaError_t mc_gemv_trigger_addr(void **p);
cudaError_t mc_gemv_q8_trigger_addr(void **p);
cudaError_t mc_attention_trigger_addr(void **p);
cudaError_t mc_gemv_legacy_trigger_addr(void **p);

/* The integer Q8_0 GEMV (gemv_q8.cu): its launch (mc_gemv_q8_serves in cuda_kernels.h says where
 * it serves), and its shared-memory limit (once per device). */
cudaError_t mc_gemv_q8(const mc_config *c, int glu, const mc_matrix *w, const float *x, const float *norm_w,
                       float eps, const float *bias, const float *residual, float *y, cudaStream_t st);
cudaError_t mc_gemv_q8_prepare(void);
/* mc_gemv_post (cuda_kernels.h) on the integer Q8_0 kernel, where it serves w. */
cudaError_t mc_gemv_q8_post(const mc_config *c, const mc_matrix *w, const float *x, float *y, const mc_post_args *pn,
                            cudaStream_t st);
/* experts=int: mc_gemv_experts (cuda_kernels.h) on the integer Q8_0 kernel's body a slot, where
 * mc_experts_int says so (glu MC_GLU_NONE without norm_w, or MC_GLU_SILU with it). */
cudaError_t mc_gemv_experts_q8int(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                  uint32_t k, uint32_t e0, uint32_t e1, const float *x, uint32_t ldx,
                                  const float *norm_w, float eps, int glu, float *y, uint32_t ldy, cudaStream_t st);
/* postnorm=prologue (mc_gemv_pro, cuda_kernels.h) on the integer Q8_0 kernel. */
bool mc_gemv_q8_pro_serves(const mc_config *c, const mc_matrix *w, int glu);
cudaError_t mc_gemv_q8_pro(const mc_config *c, int glu, const mc_matrix *w, const mc_pro_args *pro,
                           const float *norm_w, float eps, float *y, cudaStream_t st);
/* The column parts (KS) of a GEMV of `rows` rows: the float row-group kernels' (gemv.cu) and the
 * integer Q8_0 kernel's (gemv_q8.cu); a function of the row count alone. The chunk kernels
 * (chunk_gemv.cu) take the same, so every output element sums in the decode order. */
uint32_t mc_gemv_ksplit(uint32_t rows);
uint32_t mc_q8x_ksplit(uint32_t rows);
/* gemv=mma and q8=mma (gemv_mma.cu): whether they serve w under c (gemv=mma: BF16, columns a multiple
 * of 8; q8=mma: Q8_0), whether its chunk kernel does (q8=mma's chunk is gemv_wgmma.cu's alone: an
 * sm_90 device under mmachunk=auto or wgmma; elsewhere its chunks run row by row), the decode launch
 * (with pn: postnorm=fused, no GLU, norm, bias or residual) and the chunk's (mc_gemv_chunk's
 * arguments and scratch), its census. */
/* mc_gemv_mma_serves: cuda_kernels.h */
int mc_gemv_mma_chunk_serves(const mc_config *c, const mc_matrix *w);
cudaError_t mc_gemv_mma(const mc_config *c, int glu, const mc_matrix *w, const float *x, const float *norm_w,
                        float eps, const float *bias, const float *residual, float *y, cudaStream_t st,
                        const mc_post_args *pn);
cudaError_t mc_gemv_chunk_mma(const mc_config *c, const mc_matrix *w, const float *x, uint32_t ldx,
                              const float *norm_w, float eps, const float *bias, const float *residual, uint32_t ldr,
                              float *y, uint32_t ldy, int glu, uint32_t M, void *scratch, cudaStream_t st);
const char *mc_gemv_mma_family(const void *func);
cudaError_t mc_gemv_mma_prepare(void); /* the chunk kernels' shared-memory limit, once per device */
/* gemv_wgmma.cu (built for sm_90a alone): gemv=mma's chunk GEMV on wgmma with decode's bits. Whether
 * this device runs it (sm_90), its shared-memory limit (nothing elsewhere), the launch after
 * mc_gemv_chunk_mma's prep (one plane only; bt: rows of x a block, 64 or 128, 0 for its choice by
 * the grid's size; cudaErrorNotSupported on another device), its census. */
int mc_gemv_wgmma_available(void);
cudaError_t mc_gemv_wgmma_prepare(void);
cudaError_t mc_gemv_wgmma_launch(const mc_matrix *w, uint32_t ks, int two, const uint16_t *xo, const float *rsp,
                                 const float *bias, const float *residual, uint32_t ldr, float *y, uint32_t ldy,
                                 int glu, uint32_t M, uint32_t bt, cudaStream_t st);
const char *mc_gemv_wgmma_family(const void *func);
/* chunk=mma (chunk_mma.cu): a prefill chunk's integer Q8_0 GEMV on int8 tensor cores, from
 * chunk_gemv.cu's quantized planes (xh, xm, xl: M x cols/16 chunks; xs their scales; rs the rows'
 * 1/rms), each element the bits of gemv_q8_0_int. variant: c->chunk (MC_CHUNK_MMA, or a check or
 * bench program's MC_CHUNK_MMA_FAULT, MC_CHUNK_MMA_T4, _T6, _T8). */
cudaError_t mc_chunk_q8_mma(int glu, uint32_t variant, const mc_matrix *w, const uint4 *xh, const uint4 *xm,
                            const uint4 *xl, const float *xs, const float *rs, const float *bias, const float *res,
                            uint32_t ldr, float *y, uint32_t ldy, uint32_t M, cudaStream_t st);
const char *mc_chunk_mma_family(const void *func);
/* The legacy quantized GEMVs' shared-memory limit (gemv_legacy.cu), once per device. */
cudaError_t mc_gemv_legacy_prepare(void);

#endif
