/* faultyop.c: the TEST-ONLY op plugin `faultyop`: RMSNorm, the F32 GEMV and the sampler's sort
 * exactly as the cpu backend's built-ins compute them (the order of backends/cpu/cpu_kernels.h), except that it
 * flips one bit of one output element at one (site, layer, position), named by its keys:
 *   op.rmsnorm=faultyop:site=ffn_norm:layer=1:pos=5:index=3[:bit=22]
 *   op.gemv.f32=faultyop:site=ffn_up:layer=0:pos=2:index=7
 *   op.topk=faultyop:site=topk:layer=head:pos=6:index=0   (swaps the sorted entries index, index+1)
 * site: the site of OPS.md (attn_norm, ffn_norm, output_norm, qk_norm, q, ffn_up, logits, ...);
 * layer: a layer index or `head`; pos: the position; index: the element of that call's output
 * (a GEMV's row, a norm's element); bit: which bit of the float (default 22, the top mantissa
 * bit: a change of a quarter to a half of the value, never a NaN). Without `site` it flips
 * nothing and gives the built-in's bits. The gate's negative control for op plugins: a gate of
 * `cpu` against `cpu:op.rmsnorm=faultyop:...` must fail at that position's step and no earlier;
 * on cuda (faultyop_cuda.cu, built where the build has CUDA) the same for rmsnorm and gemv.f32,
 * the position read in device memory, so a cuda-graph replay flips at the same step;
 * the bisect (issue 30) must name that site and layer. Never installed. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "faultyop.h"
#include "memra/options.h"
#include "memra/plugin.h"

struct memra_op {
    faultyop_cfg c;
};

const faultyop_cfg *faultyop_config(const memra_op *op) { return &op->c; }

static const memra_option_spec faultyop_keys[] = {
    {.key = "site", .default_value = "none", .help = "the site whose output it corrupts (none: it corrupts nothing)"},
    {.key = "layer", .default_value = "0", .help = "the layer, or head"},
    {.key = "pos", .default_value = "0", .help = "the position"},
    {.key = "index", .default_value = "0", .help = "the output element"},
    {.key = "bit", .default_value = "22", .help = "the bit of that float that is flipped (0..31)"},
};

static memra_status faultyop_create(const memra_host *host, const char *family, memra_op_kind kind, uint32_t type,
                                    const memra_options *opts, memra_op **out, memra_error *err) {
    (void)family, (void)kind, (void)type;
    memra_op *op = calloc(1, sizeof *op);
    if (!op)
        return host->fail(err, MEMRA_E_NOMEM, "faultyop: out of memory");
    faultyop_cfg *c = &op->c;
    c->bit = 22;
    memra_status st = MEMRA_OK;
    const char *site = memra_options_get(opts, "site");
    const char *layer = memra_options_get(opts, "layer");
    if (site && strlen(site) >= sizeof c->site)
        st = host->fail(err, MEMRA_E_INVALID, "faultyop: site=%.40s is too long", site);
    if (st == MEMRA_OK && site && strcmp(site, "none") != 0) {
        c->armed = true;
        strcpy(c->site, site);
    }
    if (st == MEMRA_OK && layer && strcmp(layer, "head") == 0)
        c->layer = MEMRA_OP_LAYER_HEAD;
    else if (st == MEMRA_OK)
        st = memra_options_u32(opts, "layer", 0, 0, UINT32_MAX - 1, &c->layer, err);
    if (st == MEMRA_OK)
        st = memra_options_u32(opts, "pos", 0, 0, UINT32_MAX, &c->pos, err);
    if (st == MEMRA_OK)
        st = memra_options_u32(opts, "index", 0, 0, UINT32_MAX, &c->index, err);
    if (st == MEMRA_OK)
        st = memra_options_u32(opts, "bit", 22, 0, 31, &c->bit, err);
    if (st != MEMRA_OK) {
        free(op);
        return st;
    }
    *out = op;
    return MEMRA_OK;
}

static void faultyop_destroy(memra_op *op) { free(op); }

/* Whether this call is the one to corrupt (cpu: the host knows the position). */
static bool hit(const memra_op *op, const memra_op_ctx *ctx) {
    return faultyop_site_hit(&op->c, ctx) && ctx->position == op->c.pos;
}

static void flip(const memra_op *op, float *y) {
    uint32_t bits;
    memcpy(&bits, y, sizeof bits);
    bits ^= 1u << op->c.bit;
    memcpy(y, &bits, sizeof bits);
}

/* cpu_dot_f32's order: 8 accumulators over i = j (mod 8), a fixed tree, then the tail. */
static float dot_f32(const float *a, const float *b, uint32_t n) {
    float acc[8] = {0};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (uint32_t j = 0; j < 8; j++)
            acc[j] += a[i + j] * b[i + j];
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

static void faultyop_cpu_rmsnorm(memra_op *op, const memra_op_ctx *ctx, const float *x, const float *w, uint32_t n,
                                 float eps, float *out) {
    float scale = 1.0f / sqrtf(dot_f32(x, x, n) / (float)n + eps);
    for (uint32_t i = 0; i < n; i++)
        out[i] = (x[i] * scale) * w[i];
    if (hit(op, ctx) && op->c.index < n)
        flip(op, &out[op->c.index]);
}

static void faultyop_cpu_gemv(memra_op *op, const memra_op_ctx *ctx, uint32_t type, const uint8_t *w, size_t row_bytes,
                              uint32_t cols, const float *x, float *y, uint32_t r0, uint32_t r1) {
    (void)type; /* F32 only (cpu_gemv_types) */
    for (uint32_t r = r0; r < r1; r++)
        y[r] = dot_f32((const float *)(const void *)(w + (size_t)r * row_bytes), x, cols);
    if (hit(op, ctx) && op->c.index >= r0 && op->c.index < r1)
        flip(op, &y[op->c.index]);
}

/* Step 2's order of memra/sampling.h: z descending, ties by index ascending. */
static _Thread_local const float *sort_z;

static int order(const void *pa, const void *pb) {
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    if (sort_z[a] != sort_z[b])
        return sort_z[a] > sort_z[b] ? -1 : 1;
    return a < b ? -1 : (a > b);
}

/* The whole order (seq has room for n_vocab), then, at the armed call, entries index and
 * index + 1 swapped: with top_k 1 the draw then takes the second largest logit. */
static void faultyop_cpu_topk(memra_op *op, const memra_op_ctx *ctx, const float *logits, uint32_t n_vocab, uint32_t k,
                              uint32_t *seq) {
    (void)k;
    for (uint32_t i = 0; i < n_vocab; i++)
        seq[i] = i;
    sort_z = logits;
    qsort(seq, n_vocab, sizeof *seq, order);
    if (hit(op, ctx) && op->c.index + 1 < n_vocab) {
        uint32_t t = seq[op->c.index];
        seq[op->c.index] = seq[op->c.index + 1];
        seq[op->c.index + 1] = t;
    }
}

static const memra_op_vtable faultyop_vtable = {
    .struct_size = sizeof(memra_op_vtable),
    .options = faultyop_keys,
    .n_options = sizeof faultyop_keys / sizeof faultyop_keys[0],
    .cpu_gemv_types = (uint64_t)1 << 0, /* MEMRA_TYPE_F32 */
    .create = faultyop_create,
    .destroy = faultyop_destroy,
    .cpu_rmsnorm = faultyop_cpu_rmsnorm,
    .cpu_gemv = faultyop_cpu_gemv,
    .cpu_topk = faultyop_cpu_topk,
#ifdef FAULTYOP_HAVE_CUDA
    .cuda_gemv_types = (uint64_t)1 << 0, /* MEMRA_TYPE_F32 */
    .cuda_rmsnorm = faultyop_cuda_rmsnorm,
    .cuda_gemv = faultyop_cuda_gemv,
#endif
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "faultyop",
    .kind = MEMRA_PLUGIN_OP,
    .version = "0.1.0",
    .description = "TEST ONLY: the built-in RMSNorm and F32 GEMV with one bit flipped at one site",
    .op = &faultyop_vtable,
};
