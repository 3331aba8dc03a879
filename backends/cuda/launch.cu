/* launch.cu: the launch helpers of the cuda kernels: an arm's configuration (its choice keys and
 * their names), the per-arm trigger mask, and the census of kernel families. */
#include "cuda_common.cuh"
#include "gemv_quant.h"

// clang-format off
const mc_config mc_config_default = {
    1, MC_GEMV_AUTO, MC_Q8_AUTO, MC_ATT_AUTO, MC_TRIGGER_DEFAULT, MC_NORM_FUSED, MC_QDOT_AUTO, MC_KV_F32,
    MC_MOE_FUSE_DEFAULT, MC_POSTNORM_PROLOGUE, MC_CHUNK_MMA, MC_QBLOCK_16R, MC_QGRID_AUTO, MC_EXPERTS_INT_GU,
    MC_MMACHUNK_AUTO, MC_ATTCHUNK_PHASED, MC_ATTFOLD_SPAN, MC_ATTDEC_BLOCK, MC_QKVPARTS_MERGED, MC_WAIT_RING,
    MC_COMMIT_HEAD};

static const struct {
    const char *key;
    size_t offset;
    const char *names[8]; /* at most 8: mc_config_choice reads no further */
    const char *allowed;
} mc_choices[] = {
    {"gemv", offsetof(mc_config, gemv), {"auto", "rowgroup", "persistent", "mma", "mma2"},
     "auto, rowgroup, persistent, mma, mma2"},
    {"q8", offsetof(mc_config, q8), {"auto", "float", "rows", "int-8w", "mma"}, "auto, float, rows, int-8w, mma"},
    {"attention", offsetof(mc_config, attention), {"auto", "tiled", "unfused", "split", "heads", "cluster", "mma"},
     "auto, tiled, unfused, split, heads, cluster, mma"},
    {"norm", offsetof(mc_config, norm), {"fused", "unfused", NULL, NULL}, "fused, unfused"},
    {"qdot", offsetof(mc_config, qdot), {"auto", "float", "mma", NULL}, "auto, float, mma"},
    {"kv", offsetof(mc_config, kv), {"f32", "f16", "bf16", "q8", NULL}, "f32, f16, bf16, q8"},
    {"postnorm", offsetof(mc_config, postnorm), {"fused", "launch", "prologue", NULL}, "fused, launch, prologue"},
    {"chunk", offsetof(mc_config, chunk), {"mma", "fma", "mma-kq", "mma-q8", "mma-opt"},
     "mma, fma, mma-kq, mma-q8, mma-opt"},
    {"qblock", offsetof(mc_config, qblock), {"auto", "16", "4", "16x", "16r", "16xr"}, "auto, 16, 4, 16x, 16r, 16xr"},
    {"qgrid", offsetof(mc_config, qgrid), {"auto", "need", "fill", NULL}, "auto, need, fill"},
    {"experts", offsetof(mc_config, experts), {"float", "int", "int-gu", NULL}, "float, int, int-gu"},
    {"mmachunk", offsetof(mc_config, mmachunk), {"auto", "sync", "wgmma", NULL}, "auto, sync, wgmma"},
    {"attchunk", offsetof(mc_config, attchunk), {"phased", "rows", NULL, NULL}, "phased, rows"},
    {"attfold", offsetof(mc_config, attfold), {"span", "tier", NULL, NULL}, "span, tier"},
    {"attdec", offsetof(mc_config, attdec), {"block", "warp", NULL, NULL}, "block, warp"},
    {"qkvparts", offsetof(mc_config, qkvparts), {"merged", "apart", NULL, NULL}, "merged, apart"},
    {"wait", offsetof(mc_config, wait), {"ring", "event", "word", NULL}, "ring, event, word"},
    {"commit", offsetof(mc_config, commit), {"launch", "sampler", "handoff", "head"}, "launch, sampler, handoff, head"},
};
// clang-format on

const char *mc_config_choice(mc_config *c, const char *key, const char *value) {
    for (size_t i = 0; i < sizeof mc_choices / sizeof mc_choices[0]; i++) {
        if (strcmp(key, mc_choices[i].key) != 0)
            continue;
        for (uint32_t v = 0; v < 8 && mc_choices[i].names[v]; v++)
            if (strcmp(value, mc_choices[i].names[v]) == 0) {
                *(uint32_t *)((char *)c + mc_choices[i].offset) = v;
                return NULL;
            }
        return mc_choices[i].allowed;
    }
    return "";
}

const char *mc_config_choice_name(const mc_config *c, const char *key) {
    for (size_t i = 0; i < sizeof mc_choices / sizeof mc_choices[0]; i++)
        if (strcmp(key, mc_choices[i].key) == 0) {
            const uint32_t v = *(const uint32_t *)((const char *)c + mc_choices[i].offset);
            return v < 8 ? mc_choices[i].names[v] : NULL;
        }
    return NULL;
}

/* Every mask value at its own index: the device-side source of the copies into the kernel
 * files' constants (a device-to-device copy can be captured into a graph). */
__device__ unsigned mc_trigger_values[MC_TRIGGER_ALL + 1] = {
    0,   1,   2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,  13,  14,  15,  16,  17,  18,  19,  20,  21,
    22,  23,  24,  25,  26,  27,  28,  29,  30,  31,  32,  33,  34,  35,  36,  37,  38,  39,  40,  41,  42,  43,
    44,  45,  46,  47,  48,  49,  50,  51,  52,  53,  54,  55,  56,  57,  58,  59,  60,  61,  62,  63,  64,  65,
    66,  67,  68,  69,  70,  71,  72,  73,  74,  75,  76,  77,  78,  79,  80,  81,  82,  83,  84,  85,  86,  87,
    88,  89,  90,  91,  92,  93,  94,  95,  96,  97,  98,  99,  100, 101, 102, 103, 104, 105, 106, 107, 108, 109,
    110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127};

/* Per device: the addresses of mc_trigger_values and of the kernel files' masks (resolved once,
 * outside any capture). */
#define MC_TRIGGER_COPIES 10 /* mc_trigger_values, then the kernel files' masks */
static void *mc_trigger_addrs[MC_MAX_DEVICES][MC_TRIGGER_COPIES];
cudaError_t mc_gemv_kquant_trigger_addr(void **p); /* gemv_kquant.cu */
cudaError_t mc_gemv_mma_trigger_addr(void **p);    /* gemv_mma.cu */
cudaError_t mc_gemv_moe_trigger_addr(void **p);    /* gemv_moe.cu */
/* attention_split.cu (attention_chunk.cu's kernels never wait on the grid before: no copy there) */
cudaError_t mc_attention_split_trigger_addr(void **p);
cudaError_t mc_attention_mma_trigger_addr(void **p); /* attention_mma.cu */
/* The census of attention_chunk.cu's and attention_split.cu's kernels. */
const char *mc_attention_chunk_family(const void *func);
const char *mc_attention_split_family(const void *func);
const char *mc_attention_mma_family(const void *func);

cudaError_t mc_trigger_prepare(void) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    if (dev < 0 || dev >= MC_MAX_DEVICES)
        return cudaErrorInvalidDevice;
    void **a = mc_trigger_addrs[dev];
    if (a[MC_TRIGGER_COPIES - 1])
        return cudaSuccess;
    if ((e = cudaGetSymbolAddress(&a[0], mc_trigger_values)) != cudaSuccess ||
        (e = mc_gemv_trigger_addr(&a[1])) != cudaSuccess || (e = mc_gemv_q8_trigger_addr(&a[2])) != cudaSuccess ||
        (e = mc_attention_trigger_addr(&a[3])) != cudaSuccess)
        return e;
    if ((e = mc_gemv_legacy_trigger_addr(&a[4])) != cudaSuccess ||
        (e = mc_gemv_mma_trigger_addr(&a[5])) != cudaSuccess || (e = mc_gemv_moe_trigger_addr(&a[6])) != cudaSuccess ||
        (e = mc_attention_split_trigger_addr(&a[7])) != cudaSuccess ||
        (e = mc_attention_mma_trigger_addr(&a[8])) != cudaSuccess)
        return e;
    return mc_gemv_kquant_trigger_addr(&a[9]); /* the last: its address marks the table resolved */
}

cudaError_t mc_trigger_enqueue(uint32_t mask, cudaStream_t st) {
    if (mask > MC_TRIGGER_ALL)
        return cudaErrorInvalidValue;
    cudaError_t e = mc_trigger_prepare();
    if (e != cudaSuccess)
        return e;
    int dev = 0;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess)
        return e;
    void *const *a = mc_trigger_addrs[dev];
    const unsigned *src = (const unsigned *)a[0] + mask;
    for (int k = 1; k < MC_TRIGGER_COPIES; k++)
        if ((e = cudaMemcpyAsync(a[k], src, sizeof(unsigned), cudaMemcpyDeviceToDevice, st)) != cudaSuccess)
            return e;
    return cudaSuccess;
}

const char *mc_kernel_family(const void *f) {
    const char *(*const files[])(const void *) = {
        mc_gemv_family,            mc_gemv_q8_family,           mc_attention_family,   mc_attention_chunk_family,
        mc_attention_split_family, mc_attention_unfused_family, mc_sampler_family,     mc_digest_family,
        mc_token_family,           mc_op_glue_family,           mc_gemv_legacy_family, mc_gemv_kquant_family,
        mc_chunk_family,           mc_moe_family,               mc_gemv_mma_family,    mc_attention_mma_family};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        const char *fam = files[i](f);
        if (fam)
            return fam;
    }
    return NULL;
}
