/* cuda_kernels.h: the launchers of the CUDA kernels of memra's cuda backends (internal, C++). The
 * kernels live by kind: gemv.cu (F32/F16/BF16 and the float Q8_0 path), gemv_q8.cu (Q8_0 on
 * integer dots), attention.cu (with attention_split.cu, attention_chunk.cu and attention_unfused.cu),
 * sampler.cu, digest.cu, token.cu (embedding, commit, token hand-over) and launch.cu (arm
 * configuration, trigger mask, census), under cuda_common.cuh.
 *
 * Every launcher enqueues on the stream it is given and returns the launch's cudaError_t; none
 * synchronises and none branches on device data, so a sequence of them can be captured into a
 * CUDA graph once and replayed at any position. Token and position are read from device memory.
 *
 * Determinism: every reduction has a fixed shape (lane order, then a fixed xor-shuffle tree, then
 * warps in index order); no float atomics (one integer ticket elects the block that merges the
 * argmax parts, whose result is the same in any order). The bits depend only on the inputs and the
 * launch shapes, which depend only on the model, the state's capacity and the arm's q8 and
 * attention keys (mc_config). */
#ifndef MEMRA_CUDA_KERNELS_H
#define MEMRA_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "memra/plugin.h"

/* A helper callable on the host (tests) and the device. */
#if defined(__CUDACC__)
#define MC_HOSTDEV __host__ __device__
#else
#define MC_HOSTDEV
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A weight matrix in its upload layout. Rows are padded to a multiple of 16 bytes so every row
 * starts aligned for 16-byte loads. Q8_0 is repacked into int8 quants [rows][stride] and f16
 * scales [rows][cols/32]; the other types keep their element encoding. */
typedef struct mc_matrix {
    uint32_t type; /* memra_tensor_type: F32, F16, BF16, Q8_0, and Q4_0 ... Q6_K (gemv_quant.h) */
    uint32_t rows, cols;
    uint32_t stride;  /* elements per stored row (cols rounded up to 16 bytes); Q4_0 ... Q6_K: bytes per row of data */
    void *data;       /* rows * stride elements (int8 for Q8_0) */
    uint16_t *scales; /* Q8_0: rows * cols/32 f16 scales; NULL otherwise */
    void *aux;        /* Q4_0 ... Q6_K (gemv_quant.h): rows * aux_stride bytes of a split layout, or NULL */
    uint32_t aux_stride;
} mc_matrix;

/* Bytes a matrix occupies on the device in its upload layout. */
uint64_t mc_matrix_bytes(uint32_t type, uint64_t rows, uint64_t cols);
/* Bytes of one element of the stored layout (1 for Q8_0 quants). */
uint32_t mc_type_elem_bytes(uint32_t type);

/* The kernel choices and launch settings of one arm: the cuda backend's arm keys (cuda_ext.h lists
 * them with their defaults), passed to every launcher that depends on them. No process-wide state
 * and no environment variable: two arms of one process launch each with its own. The default
 * (mc_config_default) is what an arm without keys runs. */
#define MC_TRIGGER_ALL 127u /* the trigger mask's bits (cuda_common.cuh names them) */
#define MC_TRIGGER_DEFAULT 115u
enum { MC_GEMV_AUTO, MC_GEMV_ROWGROUP, MC_GEMV_PERSISTENT, MC_GEMV_MMA, MC_GEMV_MMA2 };
/* q8: AUTO, the integer kernel for every Q8_0 matrix in blocks of 16 warps; FLOAT; ROWS, the rule
 * before issue 27 (integer in blocks of 8 warps where rows >= cols / 2, float elsewhere); INT8W,
 * AUTO's bits in ROWS's blocks of 8 warps; MMA, gemv=mma's tensor-core chain on the int8 weights as
 * bf16 and x' rounded to bf16, a block's scale applied after its two MMAs (gemv_mma.cu). */
enum { MC_Q8_AUTO, MC_Q8_FLOAT, MC_Q8_ROWS, MC_Q8_INT8W, MC_Q8_MMA };
enum { MC_ATT_AUTO, MC_ATT_TILED, MC_ATT_UNFUSED, MC_ATT_SPANS, MC_ATT_HEADS, MC_ATT_CLUSTER, MC_ATT_MMA };
enum { MC_NORM_FUSED, MC_NORM_UNFUSED };
enum { MC_QDOT_AUTO, MC_QDOT_FLOAT, MC_QDOT_MMA };
enum { MC_KV_F32, MC_KV_F16, MC_KV_BF16, MC_KV_Q8 };
enum { MC_POSTNORM_FUSED, MC_POSTNORM_LAUNCH, MC_POSTNORM_PROLOGUE };
/* The blocks of the Q4_0..Q5_1 and Q4_K..Q6_K GEMVs under qdot=auto (the qblock key, issue 27):
 * MC_QBLOCK_AUTO, blocks of 4 warps (several a multiprocessor) for narrow matrices (cols <=
 * MC_QBLOCK_COLS) whose 16-warp grid leaves multiprocessors idle, 16 warps elsewhere;
 * MC_QBLOCK_16, 16 warps everywhere (the kernels before the key; auto measured slower on gemma3-270m
 * and llama-1b, bench/gpu/NOTES.md); MC_QBLOCK_4, 4 warps everywhere. Narrow forms of the 16-warp
 * blocks for matrices of at most MC_QBLOCK_COLS columns (16 elsewhere): MC_QBLOCK_16R (the default
 * since the narrow session of 2026-12-02: SmolLM2 Q4_1 +15%, gemma3-270m q4_k_m +4%), the warps of a
 * row group split its rows instead of its columns (Q4_0..Q5_1 and Q4_K..Q6_K); MC_QBLOCK_16X, x'
 * quantized by every warp, a lane a column (Q4_0..Q5_1; measured slower); MC_QBLOCK_16XR, both.
 * The same bits every way (each row's column split and order, and the norm's sum of squares, are
 * the 16-warp kernels'). */
enum { MC_QBLOCK_AUTO, MC_QBLOCK_16, MC_QBLOCK_4, MC_QBLOCK_16X, MC_QBLOCK_16R, MC_QBLOCK_16XR };
#define MC_QBLOCK_COLS 2048u
/* The grid of the 16-warp Q4_0..Q5_1 and Q4_K..Q6_K GEMVs (the qgrid key, issue 26): MC_QGRID_NEED,
 * the fewest blocks whose slots hold every row group (llama-8b's q/k/v at KS 1: 96 blocks on 132
 * multiprocessors; wo and down at KS 2: 128); MC_QGRID_FILL, a block on every multiprocessor that
 * has a row group, the groups split over them as evenly (as the Q8_0 integer GEMV's grid);
 * MC_QGRID_AUTO, fill on the Q4_K..Q6_K matrices and on Q4_0..Q5_1 matrices of more than
 * MC_QBLOCK_COLS columns, need on narrower Q4_0..Q5_1 ones (mc_qgrid_fills; fill measured
 * +1.0% on llama-8b Q6_K, +1.4% Q4_K, +0.5% Q4_0, but -6.8% on SmolLM2's Q4_1, whose narrow GEMVs
 * lose the early start of the next kernel on the multiprocessors they left free; the narrow
 * K-quant GEMVs gain: gemma3-270m q4_k_m +0.9%, smollm2-135m Q4_K +2.8% on an H200; smollm2-135m
 * q4_k_m, whose only K-quants are its down projections, lost 0.6% on an H100). A
 * block's row groups are a contiguous range either way and each row's sums do not depend on who
 * computes them: the same bits. */
enum { MC_QGRID_AUTO, MC_QGRID_NEED, MC_QGRID_FILL };
/* The experts' Q8_0 GEMVs of a mixture of experts (the `experts` key): MC_EXPERTS_FLOAT, float dots
 * on the dequantized weights (gemv_experts, the row-group GEMV's float path); MC_EXPERTS_INT, the
 * dense integer kernel's body a slot (gemv_q8.cu: x quantized to 23 bits, int8 dots), other bits;
 * MC_EXPERTS_INT_GU (the default), INT for the gate/up alone (with moe_fuse bit 2048 in one wave),
 * the down and its combine on float dots: other bits again. */
enum { MC_EXPERTS_FLOAT, MC_EXPERTS_INT, MC_EXPERTS_INT_GU };
/* gemv=mma's prefill chunk GEMV (the `mmachunk` key, issue 28): MC_MMACHUNK_AUTO (wgmma where the device
 * is sm_90, else mma.sync), MC_MMACHUNK_SYNC (gemv_mma.cu's mma.sync tile) or MC_MMACHUNK_WGMMA
 * (gemv_wgmma.cu's warpgroup kernel fed by the tensor memory accelerator; an error on another
 * device, and mma2's two planes keep the mma.sync tile). The same bits, decode's, every way. */
enum { MC_MMACHUNK_AUTO, MC_MMACHUNK_SYNC, MC_MMACHUNK_WGMMA };
/* A prefill chunk's attention at hd <= 128 on the cluster path (the `attchunk` key, issue 28):
 * MC_ATTCHUNK_PHASED (attention_chunk_phased: R rows of a kv head a block, the cluster's operations
 * in phases, rows past 8 x 128 positions in their window on attention_chunk_rows) or
 * MC_ATTCHUNK_ROWS (attention_chunk_rows alone: a block a row and kv head). Decode's bits either
 * way. */
enum { MC_ATTCHUNK_PHASED, MC_ATTCHUNK_ROWS };
/* How attention=mma folds its spans (the `attfold` key, issue 28, long contexts): MC_ATTFOLD_SPAN
 * (every span folded in order from the first: the bits attention=mma has had since it exists) or
 * MC_ATTFOLD_TIER (the spans of each tier of 4, 256 positions, folded in order within the tier,
 * then the tiers in order: decode's blocks fold a tier each and its merge reads a quarter of the
 * partials). Other bits each, decode's and the chunk's alike. */
enum { MC_ATTFOLD_SPAN, MC_ATTFOLD_TIER };
/* Who reduces attention=mma's decode spans (the `attdec` key, issue 28, long contexts):
 * MC_ATTDEC_BLOCK (a block's 4 warps a span, one span after another, staged one ahead: the kernel
 * attention=mma has had) or MC_ATTDEC_WARP (a warp a span, a block the 4 spans of a tier at once:
 * mc_amm_wdec; kv=q8 at head size 128 not served). The same bits either way, for every attfold. */
enum { MC_ATTDEC_BLOCK, MC_ATTDEC_WARP };
/* A layer's q/k/v in parts of two types (the `qkvparts` key): MC_QKVPARTS_MERGED,
 * one launch whose blocks run either part (mc_gemv_qkv2, where it has a form for the parts: a
 * Q4_0 or Q5_0 part on the 16r narrow form and a Q8_0 part on the 16-warp integer kernel, e.g.
 * gemma3's Q4_K_M files; a Q4_K or Q5_K part and a Q6_K part, llama.cpp's Q4_K_M and Q5_K_M mixes,
 * without the prologue), else a launch a part; MC_QKVPARTS_APART, a launch a part everywhere. The
 * same bits either way. */
enum { MC_QKVPARTS_MERGED, MC_QKVPARTS_APART };
/* How the host learns that a step ended (the `wait` key): MC_WAIT_RING, the sampler's last write,
 * the tag of the step's entry in the host's result ring (a sampled step of one stage and one rank
 * that wants no logits; the step's completion event elsewhere, and where the tag never comes),
 * written after the rest of the entry and a system fence; MC_WAIT_WORD, the same wait on a tag
 * that travels with the token in one 8-byte store (no system fence before it unless the logits
 * were bad); or MC_WAIT_EVENT, the completion event everywhere. Nothing computed depends on it. */
enum { MC_WAIT_RING, MC_WAIT_EVENT, MC_WAIT_WORD };
/* Where a step's position advances (the `commit` key): MC_COMMIT_LAUNCH (the rule before), a kernel of
 * its own between the last layer and the head; MC_COMMIT_SAMPLER, the argmax pass's last block,
 * where one stage of one rank samples with no taps (a launch a token fewer; elsewhere the launch);
 * MC_COMMIT_HANDOFF, the same, and the block that ends the sampling also embeds the next step's
 * input from the token it chose, after the step's tag (another launch a token fewer), where the
 * first layer adds its attention output to the residual as it is, or by gemma3's prologue
 * (mc_embed_in_sampler; else the embedding's launch); MC_COMMIT_HEAD (the default), what
 * MC_COMMIT_HANDOFF does, and a greedy step's argmax (with the commit, the result, the ring's entry
 * and the embedding) in the head GEMV's own launch where the head runs on the 16-warp K-quant GEMV
 * or the 16-warp Q8_0 integer GEMV (mc_gemv_head_argmax; else the argmax pass's launch).
 * The same bits. (A key of its own would not fit: an arm's resolved options are at most
 * MEMRA_OPT_MAX, and the cuda arms use every one.) */
enum { MC_COMMIT_LAUNCH, MC_COMMIT_SAMPLER, MC_COMMIT_HANDOFF, MC_COMMIT_HEAD };
/* Whether a 16-warp quantized GEMV of cols columns runs on the filled grid: kquant for Q4_K..Q6_K
 * (filled at every width under auto), 0 for Q4_0..Q5_1 (filled above MC_QBLOCK_COLS columns). */
static inline int mc_qgrid_fills(uint32_t qgrid, uint32_t cols, int kquant) {
    return qgrid == MC_QGRID_FILL || (qgrid == MC_QGRID_AUTO && (kquant || cols > MC_QBLOCK_COLS));
}
/* The integer GEMVs of a prefill chunk (the `chunk` key, in its names' order): MC_CHUNK_MMA, the
 * Q8_0 ones (chunk_mma.cu), the Q4_K, Q5_K, Q6_K ones under qdot=auto (chunk_kq_mma.cu) and the
 * Q4_0, Q4_1, Q5_0, Q5_1 ones under qdot=auto (chunk_legacy_mma.cu) on int8 tensor cores;
 * MC_CHUNK_FMA, Q8_0 by dp4a on the CUDA cores (chunk_gemv.cu's chunk_gemv_q8) and the K-quant and
 * legacy layers' chunks as single steps; MC_CHUNK_MMA_KQ, the same as MC_CHUNK_MMA (the name
 * `mma-kq` had while the K-quant kernel was opt-in); MC_CHUNK_MMA_Q8, Q8_0 on tensor cores and the
 * K-quant layers' chunks as single steps (the default before the K-quant kernel). The same bits
 * every way: decode's. MC_CHUNK_MMA_OPT (`mma-opt`): MC_CHUNK_MMA with the Q8_0 and K-quant
 * kernels in the forms with fewer stalls (chunk_mma.cu's weight scales converted when stored and
 * class ends placed when compiled; chunk_kq_mma.cu's ldmatrix fragments), the same bits. For the
 * check and bench programs only (no arm key sets them): MC_CHUNK_MMA_FAULT, the MMA kernel with
 * its classes summed in lane order, a tree decode does not build (other bits); MC_CHUNK_MMA_T4,
 * _T6, _T8, the MMA kernel with a tile of 32, 48 or 64 x rows (the same bits). */
enum {
    MC_CHUNK_MMA,
    MC_CHUNK_FMA,
    MC_CHUNK_MMA_KQ,
    MC_CHUNK_MMA_Q8,
    MC_CHUNK_MMA_OPT,
    MC_CHUNK_MMA_FAULT,
    MC_CHUNK_MMA_T4,
    MC_CHUNK_MMA_T6,
    MC_CHUNK_MMA_T8
};
/* The mixture-of-experts kernel variants (the moe_fuse key's bits, cuda_forward.cu's mc_moe_ffn
 * and gemv.cu; each where its kernel serves the layer, else that part runs as before): the
 * router's top k in the router GEMV (1), the weighted combination in the experts' down GEMV (2),
 * granite's attention residual scale in the router GEMV (4, with 1), the experts' gate/up GEMV
 * with every chunk of a lane in flight and fewer registers (8, off by default), the fused router
 * on one thread-block cluster with a cluster barrier in place of its ticket (16, with 1), the
 * experts' gate/up launch letting the next launch start after its wait (32: the down/combine
 * GEMV then reads the ids and queues its expert's weights while the gate/up drains), the
 * experts' gate/up GEMV streamed by one wave of warps with x' staged once a block (column split 1
 * and one x only): 64 for Q8_0 experts, 128 for F32, F16 and BF16 ones (measured slower there,
 * off by default; bench/RESULTS.md), the cluster router's logits pushed into block 0's shared
 * memory (distributed shared memory) and its route read there, by one warp without block barriers
 * where n <= 32 (256, with 16), the cluster router as one block of up to 32 warps where n <= 32
 * (512, with 16: no barrier across multiprocessors), the router (F32, n <= 32, no shared expert)
 * computed again by every thread-block cluster of the experts' gate/up launch, its ids kept in the block's shared memory
 * (1024, with 1 and 2: the router's launch goes; granite's residual add moves into the down/combine
 * launch), and under experts=int or int-gu the Q8_0 gate/up on the integer kernel in one wave of
 * 16-warp blocks over every slot's row groups (2048: gemv_q8.cu). The same bits with any of them. */
#define MC_MOE_FUSE_ROUTE 1u
#define MC_MOE_FUSE_COMBINE 2u
#define MC_MOE_FUSE_SCALE 4u
#define MC_MOE_FUSE_FLAT 8u
#define MC_MOE_FUSE_CLUSTER 16u
#define MC_MOE_FUSE_EARLY 32u
#define MC_MOE_FUSE_STREAM 64u    /* Q8_0 experts */
#define MC_MOE_FUSE_STREAM16 128u /* F32, F16, BF16 experts */
#define MC_MOE_FUSE_DSMEM 256u    /* with 16 */
#define MC_MOE_FUSE_ONEBLOCK 512u /* with 16 */
#define MC_MOE_FUSE_ROUTED 1024u  /* with 1 and 2 */
#define MC_MOE_FUSE_IWAVE 2048u   /* experts=int's gate/up in one wave */
#define MC_MOE_FUSE_ALL 4095u
/* 1, 2, 4, 16, 32, 64, 256, 512, 2048; bit 8 measured slower on qwen3moe-30b, 128 on granite-moe-1b BF16 and F16,
 * 1024 on granite-moe-1b BF16 (bench/RESULTS.md) */
#define MC_MOE_FUSE_DEFAULT 2935u
typedef struct mc_config {
    uint32_t pdl;       /* 1: programmatic dependent launch (a kernel starts while the one before drains) */
    uint32_t gemv;      /* F32/F16/BF16 GEMV: MC_GEMV_AUTO (persistent for short rows, rowgroup otherwise),
                         * MC_GEMV_ROWGROUP, MC_GEMV_PERSISTENT (the same bits), or MC_GEMV_MMA / MC_GEMV_MMA2
                         * (BF16 on tensor cores, x' as one or two bf16 planes, gemv_mma.cu: other bits, the
                         * chunk's by construction; the other types as auto) */
    uint32_t q8;        /* Q8_0 GEMV: MC_Q8_AUTO, MC_Q8_FLOAT, MC_Q8_ROWS, MC_Q8_INT8W or MC_Q8_MMA (above) */
    uint32_t attention; /* MC_ATT_AUTO (cluster, else tiled, else unfused), MC_ATT_TILED, MC_ATT_UNFUSED,
                         * MC_ATT_SPANS (attention=split: fixed spans of MC_ATT_SPAN positions over many
                         * blocks on the cluster kernel's shapes, else auto's path; not MC_ATT_SPLIT, which
                         * attention_common.cuh defines as the cluster's block count), MC_ATT_HEADS (attention=heads:
                         * auto's paths, but the decode cluster kernel runs a kv head's q heads in several
                         * clusters where the device holds them: the same operations per head, so the same
                         * bits as auto, which does so at head size 256), MC_ATT_CLUSTER (attention=cluster:
                         * auto's paths with one cluster a kv head at every head size; the same bits), MC_ATT_MMA
                         * (attention=mma: decode and a chunk's rows on tensor cores, attention_mma.cu: q, K,
                         * V and the weights rounded to bf16, or f16 under kv=f16; other bits, the chunk's
                         * by construction; head sizes 32, 64, 128, G 1, 2, 3, 4, 8, else the arm is refused) */
    uint32_t trigger;   /* the kernel families that let the next kernel start early (bits, <= 127) */
    uint32_t norm;      /* MC_NORM_FUSED (each RMSNorm folded into the next GEMV) or MC_NORM_UNFUSED (op_glue's
                         * standalone rmsnorm first, then the GEMV without a norm: an op.rmsnorm plugin's path) */
    uint32_t qdot;      /* Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K GEMVs: MC_QDOT_AUTO (integer dots on quantized x
                         * where the type's kernel has them), MC_QDOT_FLOAT (dequantized weights, float dots) or
                         * MC_QDOT_MMA (Q4_K, Q5_K and Q6_K on gemv=mma's bf16 tensor-core chain in decode and in
                         * the prefill chunk, gemv_mma.cu: the quants exact as bf16, x' rounded to bf16, each
                         * sub-block's scale (and min) after its MMAs; Q4_0 .. Q5_1 keep qdot=auto's kernels) */
    uint32_t kv;        /* the KV cache's storage: MC_KV_F32 (4 bytes a value), MC_KV_F16 or MC_KV_BF16 (2 bytes, each
                         * value rounded to nearest even as it is written, as the cpu backend's kv key) or MC_KV_Q8
                         * (a row's blocks of 32 values as 8-bit integers and an f32 scale each: mc_kv_q8_row;
                         * attention=mma alone reads it) */
    uint32_t moe_fuse;  /* MC_MOE_FUSE_* bits: the mixture-of-experts launches folded together (never the bits) */
    uint32_t postnorm;  /* gemma3's post norms (and their residual add): MC_POSTNORM_FUSED (in the last block of
                         * the GEMV that writes their input: mc_gemv_post), MC_POSTNORM_LAUNCH (a launch of
                         * their own, mc_op_rmsnorm_add) or MC_POSTNORM_PROLOGUE (in every block of the GEMVs
                         * that read their output: mc_gemv_pro; fused where one of those lacks it). The
                         * same bits */
    uint32_t chunk;     /* a prefill chunk's integer GEMVs: MC_CHUNK_MMA (Q8_0 and the K-quants on tensor
                         * cores), MC_CHUNK_FMA, MC_CHUNK_MMA_KQ (= MMA), MC_CHUNK_MMA_Q8, MC_CHUNK_MMA_OPT: the
                         * same bits */
    uint32_t qblock;    /* the quantized GEMVs' blocks under qdot=auto: MC_QBLOCK_16R, _16, _AUTO, _4, _16X or _16XR
                         * (the same bits) */
    uint32_t qgrid;     /* the 16-warp quantized GEMVs' grid: MC_QGRID_AUTO, _NEED or _FILL (the same bits) */
    uint32_t experts;   /* a mixture of experts' Q8_0 experts: MC_EXPERTS_FLOAT, _INT or _INT_GU (each its own bits) */
    uint32_t mmachunk;  /* gemv=mma's chunk GEMV: MC_MMACHUNK_AUTO, _SYNC or _WGMMA (the same bits) */
    uint32_t attchunk;  /* a chunk's attention: MC_ATTCHUNK_PHASED or _ROWS (the same bits) */
    uint32_t attfold;   /* attention=mma's fold of its spans: MC_ATTFOLD_SPAN or _TIER (other bits) */
    uint32_t attdec;    /* attention=mma's decode spans: MC_ATTDEC_BLOCK or _WARP (the same bits) */
    uint32_t qkvparts;  /* q/k/v parts of two types: MC_QKVPARTS_MERGED or _APART (the same bits) */
    uint32_t wait;      /* how the host learns a step ended: MC_WAIT_RING, _EVENT or _WORD (the same bits) */
    uint32_t commit;    /* where the position advances: MC_COMMIT_LAUNCH, _SAMPLER or _HANDOFF (the same bits) */
} mc_config;
/* Bytes of one stored KV value of kv (MC_KV_F32: 4; MC_KV_F16, MC_KV_BF16: 2; MC_KV_Q8: 1, its
 * scales aside: use mc_kv_row_bytes for a row). */
static inline uint32_t mc_kv_bytes(uint32_t kv) { return kv == MC_KV_F32 ? 4u : kv == MC_KV_Q8 ? 1u : 2u; }
/* Bytes of one stored cache row of hd values (one position of one kv head). MC_KV_Q8 (hd a
 * multiple of 32): the hd / 32 blocks' f32 scales, then the hd signed 8-bit quants, 1.125 bytes a
 * value (mc_kv_q8_row says how a row is quantized). */
static inline MC_HOSTDEV uint32_t mc_kv_row_bytes(uint32_t kv, uint32_t hd) {
    return kv == MC_KV_F32 ? 4u * hd : kv == MC_KV_Q8 ? hd + hd / 8u : 2u * hd;
}
extern const mc_config mc_config_default;
/* Sets one choice key (gemv, q8, attention, norm, qdot, kv, postnorm, chunk, qblock, qgrid, experts, mmachunk, attchunk, attfold, attdec, qkvparts, wait) from its text. Returns NULL when set, else the
 * allowed values ("auto, rowgroup, persistent"); "" for a key that is not a choice key. */
const char *mc_config_choice(mc_config *c, const char *key, const char *value);
/* The text of a choice key's value in c (for the protocol record), NULL for another key. */
const char *mc_config_choice_name(const mc_config *c, const char *key);

/* y[r] = (residual ? residual[r] : 0) + bias[r] + sum_c W[r][c] * x'[c], r < rows, where x' is
 * x, or RMSNorm(x) * norm_w (eps inside the root) when norm_w is given (its sum of squares
 * accumulated along the GEMV's own x loads: the norm costs no launch of its own). bias, residual
 * may be NULL; residual may be y itself. Matrices of few rows split their columns over 2 or 4
 * warps (a function of the row count). Q8_0 with c->q8 auto or int-8w (rows: except where
 * rows < cols / 2) takes x' quantized per 16 columns to 23 bits and integer dots, NMSE against the float path
 * ~1e-8 on the presets; the kernel choice is a function of the shapes and c alone, so every arm
 * and device with the same keys gets the same bits (c->pdl, c->trigger and c->gemv other than mma never change
 * them; gemv=mma gives BF16 matrices the bits of gemv_mma.cu's tensor-core chain). */
cudaError_t mc_gemv(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                    const float *bias, const float *residual, float *y, cudaStream_t st);
/* postnorm=fused (gemma3's post norms): y = W x (w->rows floats: no norm, bias, residual or GLU),
 * then in the same launch x[i] = x[i] + RMSNorm(y)[i] * w[i], i < w->rows, the norm exactly
 * mc_op_rmsnorm_add's (post_norm.cuh: the same function), so the launch gives the bits of
 * mc_gemv then mc_op_rmsnorm_add. The grid's last block to finish folds (elected by an integer
 * ticket: 4 bytes of device memory, zero before the first launch, left zero by every launch; one
 * launch at a time per ticket). Every weight type mc_gemv takes, with the kernel mc_gemv would
 * choose (c's keys, the shapes): the dots have mc_gemv's bits. */
typedef struct mc_post_args {
    const float *w;   /* the post norm's weights (w->rows floats) */
    float *x;         /* the residual stream it is added to (w->rows floats; not y, not the input) */
    uint32_t *ticket; /* the launch's ticket */
    float eps;
} mc_post_args;
cudaError_t mc_gemv_post(const mc_config *c, const mc_matrix *w, const float *x, float *y, const mc_post_args *pn,
                         cudaStream_t st);
/* postnorm=prologue (gemma3's post norms in the GEMV that reads their output): the GEMV's x is
 * x_new = x + RMSNorm(po) * w (mc_op_rmsnorm_add's operations in mc_rmsnorm_add_regs's order, so the
 * bits of postnorm=fused and launch), computed by every block after its wait into shared memory;
 * the first block also stores x_new to out (another buffer than x: the launch's other blocks still
 * read x), unless out is NULL (a second GEMV on the same input). n = the GEMV's columns, at most
 * MC_PRO_COLS. */
#define MC_PRO_COLS 1024u
typedef struct mc_pro_args {
    const float *po; /* the producer GEMV's output (n floats) */
    const float *x;  /* the residual stream before the add (n floats) */
    const float *w;  /* the post norm's weights (n floats) */
    float *out;      /* x_new, stored by block 0 (or NULL) */
    float eps;
} mc_pro_args;
/* Whether mc_gemv_pro (or mc_gemv_glu_pro) runs w with glu and a norm: the kernel mc_gemv would
 * choose has the prologue (the narrow Q4_0..Q5_1 forms, the integer Q8_0 kernel), and w's
 * columns are at most MC_PRO_COLS. A function of the keys and the shapes. */
bool mc_gemv_pro_serves(const mc_config *c, const mc_matrix *w, int glu);
/* mc_gemv / mc_gemv_glu (no bias, no residual) with the prologue: y = W RMSNorm(x_new) (glu none)
 * or the GLU of it; cudaErrorInvalidValue where mc_gemv_pro_serves says no. */
cudaError_t mc_gemv_pro(const mc_config *c, const mc_matrix *w, const mc_pro_args *pro, const float *norm_w, float eps,
                        int glu, float *y, cudaStream_t st);
/* Readies the GEMV kernels on the current device (the multiprocessor count, the Q8_0 kernels'
 * shared-memory limit): once per device, outside any graph capture (the launchers do it lazily
 * too). */
cudaError_t mc_gemv_prepare(void);
/* Interleaved gate/up rows (2r gate, 2r+1 up): y[r] = silu(g_r) * u_r, r < rows/2; x' as above. */
cudaError_t mc_gemv_swiglu(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps,
                           float *y, cudaStream_t st);
/* The gated activations of an FFN whose gate and up rows are interleaved: none (a plain GEMV),
 * SiLU (llama, qwen) or GELU with the tanh approximation (gemma3), each as the cpu backend
 * computes it (the GLU template parameter of the GEMV kernels and mc_rows_store). */
#define MC_GLU_NONE 0
#define MC_GLU_SILU 1
#define MC_GLU_GELU 2
/* As mc_gemv_swiglu with the activation `glu` (MC_GLU_SILU: the same kernels and bits;
 * MC_GLU_GELU: y[r] = gelu_tanh(g_r) * u_r). */
cudaError_t mc_gemv_glu(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w, float eps, int glu,
                        float *y, cudaStream_t st);

/* ---- a mixture of experts (gemv.cu's gemv_experts, moe.cu; cpu_moe.c has the rules) -------- */
/* Each kernel below waits for the kernel before it first (c->pdl only lets its launch overlap
 * that kernel's drain: the same bits). */

/* For each slot j < k: expert e = sel[j] (device memory, written by mc_moe_route) of a stack of
 * experts [e0, e1) whose expert e has rows_e rows starting at row (e - e0) rows_e of w (F32, F16,
 * BF16, Q8_0, or Q4_0 .. Q6_K: gemv_quant.h's experts launchers), times x + j ldx (ldx 0: one x for every slot; x' = RMSNorm(x) * norm_w when
 * norm_w is given, as mc_gemv; ldx a multiple of 4: 16-byte loads), into y + j ldy: rows_e floats, or with glu MC_GLU_SILU rows_e / 2
 * (gate and up rows interleaved, as mc_gemv_glu). An id outside [e0, e1) writes zeros there.
 * One launch; each slot's rows have the bits of the row-group GEMV (gemv.cu, the float path for
 * Q8_0; for Q4_0 .. Q6_K the family's 16-warp GEMV under c->qdot) of that expert alone, with the
 * column split of a GEMV of k rows_e rows (with c->moe_fuse bit 8 the F32 .. Q8_0 gate/up launch,
 * glu and norm_w, takes gemv_experts_flat where it serves: the same bits). */
/* Whether mc_gemv_experts runs w (a Q8_0 stack) on the integer kernel under c (experts=int; its
 * x' then fits the kernel's shared memory): the folds of moe_fuse that compute the float path's
 * bits (the combine in the down GEMV, the flat gate/up kernel) then step aside. */
int mc_experts_int(const mc_config *c, const mc_matrix *w, int glu);
cudaError_t mc_gemv_experts(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel, uint32_t k, uint32_t e0,
                            uint32_t e1, const float *x, uint32_t ldx, const float *norm_w, float eps, int glu,
                            float *y, uint32_t ldy, cudaStream_t st);
/* The router's softmax over logits[0 .. n) (n <= 1024), its top k (ties toward the lower expert
 * index, in decreasing probability: the slot order) into sel[0 .. k), their probabilities into
 * w[0 .. k) (divided by their sum in slot order when norm), and with shexp w[k] =
 * sigmoid(logits[n]) (the shared expert's gate). One block. */
cudaError_t mc_moe_route(const mc_config *c, const float *logits, uint32_t n, uint32_t k, int norm, int shexp,
                         int32_t *sel, float *w, cudaStream_t st);
/* moe_fuse bit 1 (and 4): the router's GEMV of x' (RMSNorm(x) * norm_w, as mc_gemv; with po
 * x' is taken of x + po * po_scale, which the launch also writes into x: granite's attention
 * residual add, bit 4) into logits[0 .. n), n = w->rows, then in the same launch mc_moe_route's
 * ids and weights (the same code: the same bits as mc_gemv then mc_moe_route). The router's last
 * block is found with an integer ticket (4 bytes of device memory, zero before the first launch;
 * the launch leaves it zero). logits[n] (a shared expert's gate logit, read when shexp) must come
 * from an earlier launch. Serves F32, F16 and BF16 routers of at most 128 experts whose rows
 * have at most 512 16-byte chunks (F32 2048 columns, F16/BF16 4096): mc_moe_router_serves. */
int mc_moe_router_serves(const mc_matrix *w);
cudaError_t mc_moe_router(const mc_config *c, const mc_matrix *w, float *x, const float *po, float po_scale,
                          const float *norm_w, float eps, float *logits, uint32_t k, int wnorm, int shexp,
                          int32_t *sel, float *wts, uint32_t *ticket, cudaStream_t st);
/* moe_fuse bit 2: mc_gemv_experts of the down stack (no norm, no GLU, per-slot inputs act + j ldx)
 * then mc_moe_combine onto x in one launch (shslot: the shared expert's output, computed before,
 * weighted by wts[k]; NULL without one), the same bits, the slots never written. Serves k x KS <=
 * 8 (KS the column split of k rows_e rows) and rows of at most 4 x 32 KS 16-byte chunks:
 * mc_experts_combine_serves. With po: x + po * po_scale (rounded as moe_scale rounds) before the
 * sum is added (bit 1024's granite residual); late: sel comes from the launch just before (bit
 * 1024), read after the wait (else before it: the ids must be two launches old). */
int mc_experts_combine_serves(const mc_matrix *w, uint32_t rows_e, uint32_t k);
cudaError_t mc_gemv_experts_combine(const mc_config *c, const mc_matrix *w, uint32_t rows_e, const int32_t *sel,
                                    uint32_t k, uint32_t e0, uint32_t e1, const float *act, uint32_t ldx,
                                    const float *wts, const float *shslot, float scale, float *x, const float *po,
                                    float po_scale, int late, cudaStream_t st);
/* moe_fuse bit 1024: the router of n <= 32 experts (F32, where mc_moe_router serves it, with
 * the ffn norm and, with po, granite's x + po * po_scale, which is not written into x: the
 * down/combine launch then takes po and late) computed by every cluster of 4 blocks of the
 * experts' gate/up launch (F32/F16/BF16/Q8_0 stack gu of experts [0, n), column split 1, x one vector), which
 * writes logits[0 .. n), sel[0 .. k), wts[0 .. k) (block 0) and the chosen experts' SwiGLU rows
 * into y + j ldy: the bits of mc_moe_router (bits 16 and 256), then mc_gemv_experts. No shared
 * expert. Where mc_experts_routed_serves says no, the launcher refuses (cudaErrorInvalidValue). */
int mc_experts_routed_serves(const mc_matrix *router, const mc_matrix *gu, uint32_t rows_e, uint32_t k);
cudaError_t mc_gemv_experts_routed(const mc_config *c, const mc_matrix *router, const mc_matrix *gu, uint32_t rows_e,
                                   uint32_t k, int wnorm, const float *x, const float *po, float po_scale,
                                   const float *norm_w, float eps, float *logits, int32_t *sel, float *wts, float *y,
                                   uint32_t ldy, cudaStream_t st);
/* x[i] += scale * (sum_j w[j] slots[j][i] in slot order [+ w[k] slots[k][i]]) (scale applied when
 * not 1: granite's residual scale). */
cudaError_t mc_moe_combine(const mc_config *c, const float *slots, const float *w, uint32_t n_embd, uint32_t k,
                           int shexp, float scale, float *x, cudaStream_t st);
/* x[i] += t[i] * scale; with x NULL, t[i] *= scale (granite's residual and logit scales). */
cudaError_t mc_scale_add(const mc_config *c, float *t, uint32_t n, float scale, float *x, cudaStream_t st);

/* Enqueues on st the device-to-device copies (capturable) that make the kernels launched after
 * them on this device read `mask` as their trigger mask; every kernel reads MC_TRIGGER_DEFAULT
 * until then. An arm whose trigger differs from the default brackets each stage's body with its
 * mask and the default, so an arm with the default enqueues nothing. mc_trigger_prepare resolves
 * the addresses once per device, outside any capture (mc_trigger_enqueue does it lazily too). */
cudaError_t mc_trigger_prepare(void);
cudaError_t mc_trigger_enqueue(uint32_t mask, cudaStream_t st);

/* x = row `*token` of the embedding matrix, decoded to f32 as memra/quant.h does, times scale (one
 * rounding, as the cpu backend: gemma3's sqrt(n_embd); 1 leaves the row's bits); a token out of
 * range gives row 0 (host tokens are checked before; a device token is always a sampled index).
 * Every type in one kernel (token.cu) whose element is embed_elem.cuh's mc_embed_elem, which
 * commit=handoff's fold also uses. cudaErrorInvalidValue when the table's layout is not the
 * loader's (a quantized table's strides, a Q8_0 table without scales). */
cudaError_t mc_embed(const mc_matrix *emb, const int32_t *token, float scale, float *x, cudaStream_t st);

/* Per-head q/k norm (qwen3, optional), RoPE at *pos, and the KV append of k and v at *pos.
 * qkv: [n_head*hd | n_kv*hd | n_kv*hdv]; q is rotated in place; k_cache/v_cache are this layer's
 * [n_kv][capacity][hd] planes of values stored as a->kv says (float, or 2-byte f16/bf16: each
 * value rounded to nearest even as it is written, read back exactly). */
typedef struct mc_rope_args {
    uint32_t n_head, n_kv, hd, hdv, capacity;
    uint32_t neox;                /* pairing: 0 (2i, 2i+1), 1 (i, i+hd/2) */
    float pos_scale;              /* 1 / rope_linear_factor */
    const float *freqs;           /* hd/2 frequencies */
    const float *q_norm, *k_norm; /* NULL unless qwen3 or gemma3 */
    float eps;
    /* Appended for gemma3 (a positional initializer that stops before them gets 0, 0: llama's):
     * window > 0 (a sliding-window layer): position p attends to t with p - t < window, i.e.
     * [max(0, p + 1 - window), p]; 0: [0, p]. scale > 0: the scores' factor (the file's attention
     * scale); 0: 1/sqrtf(hd), computed on the device as before. */
    uint32_t window;
    float scale;
    /* Appended (0: MC_KV_F32): the storage of the cache planes (mc_config's kv; the caller sets it
     * from the arm's, which mc_attention_path reads). */
    uint32_t kv;
    /* Appended (NULL: none; the split path then refuses to launch): the stage state's scratch for
     * MC_ATT_PATH_SPLIT. partial: at least mc_att_split_partial_floats(n_head, hdv, capacity)
     * floats (the state's att_partial, sized for mc_attention, holds it); ticket: n_kv words,
     * zero before the first launch, and every launch leaves them zero. */
    float *partial;
    uint32_t *ticket;
    /* Appended (0: one cluster a kv head): set by the cluster launch alone under attention=heads,
     * the clusters a kv head (each serving n_head / n_kv / heads of its q heads). */
    uint32_t heads;
} mc_rope_args;
cudaError_t mc_rope_kv(const mc_rope_args *a, float *qkv, void *k_cache, void *v_cache, const int32_t *pos,
                       cudaStream_t st);

/* Grouped-query decode attention over positions [0, *pos] (the new token included) of one layer,
 * or with window > 0 over [max(0, *pos + 1 - window), *pos] (scale: as mc_rope_args's).
 * Fixed split of positions into chunks of MC_ATT_CHUNK at absolute positions; each (kv head,
 * chunk) block serves the q heads of its group (K and V read once) and writes their partials
 * (max, sum, out); the combine kernel merges the chunks that meet the window in index order. */
#define MC_ATT_CHUNK 32u
uint32_t mc_att_max_chunks(uint32_t capacity);
cudaError_t mc_attention(const float *q, const void *k_cache, const void *v_cache, float *partial, float *out,
                         uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv, uint32_t capacity,
                         const int32_t *pos, uint32_t window, float scale, uint32_t kv, cudaStream_t st);
/* Floats of the partials buffer mc_attention needs. */
uint64_t mc_att_partial_floats(uint32_t n_head, uint32_t hdv, uint32_t capacity);

/* The split path (attention=split; flash-decoding): the positions a query attends to are cut at
 * fixed absolute positions into spans of MC_ATT_SPAN: span s covers [s S, (s+1) S) met with
 * [w0, p] (w0: mc_att_first_position). Each span is reduced alone, the same way wherever it runs,
 * and the spans' (max, sum, out) are folded in increasing span order: an output element's formula
 * depends on the positions alone (never on the grid, the chunk or the row). Decode spreads the
 * spans over up to MC_ATT_SPLIT_BLOCKS blocks per kv head (a grid sized by the state's capacity;
 * blocks past *pos leave at once), so a long prefix keeps many blocks reading. These helpers are
 * the span arithmetic the kernels use, callable on the host (tests) and the device. */
#define MC_ATT_SPAN 128u
#define MC_ATT_SPLIT_BLOCKS 128u
/* Spans of a state of `capacity` positions (the partials' stride per head). */
static inline MC_HOSTDEV uint32_t mc_att_spans(uint32_t capacity) { return (capacity + MC_ATT_SPAN - 1) / MC_ATT_SPAN; }
/* The first position a query at p attends to: p + 1 - window on a sliding-window layer (window
 * > 0) the query has passed, else 0. */
static inline MC_HOSTDEV uint32_t mc_att_first_position(uint32_t window, uint32_t p) {
    return window && p + 1 > window ? p + 1 - window : 0;
}
/* The spans a query at p reads: *lo .. *hi, each holding at least one of its positions. */
static inline MC_HOSTDEV void mc_att_span_range(uint32_t window, uint32_t p, uint32_t *lo, uint32_t *hi) {
    *lo = mc_att_first_position(window, p) / MC_ATT_SPAN;
    *hi = p / MC_ATT_SPAN;
}
/* The decode grid's blocks per kv head: one a span up to MC_ATT_SPLIT_BLOCKS (then a block takes
 * spans x, x + that, ...). */
static inline MC_HOSTDEV uint32_t mc_att_split_blocks(uint32_t capacity) {
    const uint32_t n = mc_att_spans(capacity);
    return n < MC_ATT_SPLIT_BLOCKS ? n : MC_ATT_SPLIT_BLOCKS;
}
/* Floats of the split path's partials: (max, sum) and out[hdv] per (q head, span). At most
 * mc_att_partial_floats (MC_ATT_SPAN >= MC_ATT_CHUNK), so the state's att_partial serves both. */
static inline uint64_t mc_att_split_partial_floats(uint32_t n_head, uint32_t hdv, uint32_t capacity) {
    return (uint64_t)n_head * mc_att_spans(capacity) * (hdv + 2);
}

/* The fused paths: q/k norm, RoPE, KV append and grouped-query attention in one launch (a cluster
 * of blocks per kv head, a fixed split of [0, *pos] by position and a rank-ordered merge through
 * distributed shared memory). Read qkv as mc_rope_kv does (q is not rotated in place); write
 * the k and v rows at *pos and out[n_head][hdv]. mc_attention_path says which path serves the
 * shapes under c: MC_ATT_PATH_CLUSTER (lane groups own positions; hd == hdv in {32, 64, 128,
 * 256}, G = n_head/n_kv in {1, 2, 4, 8}, and G 3 up to hd 128), MC_ATT_PATH_TILED (threads own positions in tiles;
 * 16-byte rows, shared memory <= 200 KB), MC_ATT_PATH_SPLIT (attention=split, on the cluster
 * kernel's shapes up to hd 128: fixed spans, above; its scratch from a->partial and a->ticket;
 * auto's path elsewhere), MC_ATT_PATH_MMA (attention=mma where mc_attention_mma_serves: spans of
 * 64 positions on tensor cores, its scratch as the split's; MC_ATT_PATH_UNFUSED elsewhere, which
 * the arm refuses) or MC_ATT_PATH_UNFUSED
 * (then use mc_rope_kv + mc_attention; mc_attention_fused returns cudaErrorInvalidValue). */
enum { MC_ATT_PATH_UNFUSED, MC_ATT_PATH_TILED, MC_ATT_PATH_CLUSTER, MC_ATT_PATH_SPLIT, MC_ATT_PATH_MMA };
int mc_attention_path(const mc_config *c, uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv);
/* Whether attention=mma serves these shapes (hd == hdv in {32, 64, 128}, n_head / n_kv in
 * {1, 2, 3, 4, 8}). */
int mc_attention_mma_serves(uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv);
/* Whether attdec=warp serves head size hd with cache type kv (MC_KV_*): every type attention=mma
 * serves but kv=q8 at head size 128 (its stored rows do not fit beside the tiles). */
int mc_attention_mma_wd_serves(uint32_t hd, uint32_t kv);
/* Raises the fused kernels' dynamic shared-memory limit on the current device to what these
 * shapes need (once per device, outside any graph capture; the launcher does it lazily too). */
cudaError_t mc_attention_fused_prepare(const mc_config *c, uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv);
cudaError_t mc_attention_fused(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache,
                               void *v_cache, float *out, const int32_t *pos, cudaStream_t st);

/* ---- a prefill chunk (step_chunk): M consecutive positions, each row decode's bits ---------- */

/* The GEMV of M rows of x (row t at x + t * ldx; its residual at residual + t * ldr, may be y;
 * its output at y + t * ldy), each row's output bit-identical to mc_gemv (glu 0) or mc_gemv_glu
 * (glu MC_GLU_SILU, MC_GLU_GELU) of that row alone under the same c: F32/F16/BF16 and Q8_0 (on
 * the float or the integer path, as mc_gemv picks) run the chunk kernels of chunk_gemv.cu (the
 * decode kernel's lanes, chunk order, tree and epilogue for every element; each weight chunk
 * loaded once for 8 rows of x), the integer path with c->chunk MC_CHUNK_MMA on int8 tensor cores
 * (chunk_mma.cu, the same bits); BF16 under gemv=mma or mma2 runs gemv_mma.cu's tensor-core chunk
 * kernel (decode's MMA chain with up to 64 rows of x live); every other type runs mc_gemv row by
 * row. scratch: at least
 * mc_gemv_chunk_scratch_bytes(cols, M) bytes of device memory, 256-aligned. */
int mc_gemv_chunk_batched(const mc_config *c, const mc_matrix *w);
/* Whether the integer Q8_0 GEMV (gemv_q8.cu) serves w under c (q8=auto and int-8w: every Q8_0
 * matrix of at most 30,240 columns, a multiple of 32; rows: those with rows >= cols / 2 too), in
 * decode and, on int8 tensor cores or dp4a, in the prefill chunk; else Q8_0 takes the float path. */
int mc_gemv_q8_serves(const mc_config *c, const mc_matrix *w);
/* Whether gemv=mma (BF16, columns a multiple of 8) or q8=mma (Q8_0) serves w under c: decode and
 * the prefill chunk on gemv_mma.cu's tensor-core chain (cuda_common.cuh has the rest). */
int mc_gemv_mma_serves(const mc_config *c, const mc_matrix *w);
/* gemv=mma's column parts (KS) of a rows x cols BF16 matrix: a function of the shape alone (decode
 * and the chunk take the same, gemv_mma.cu). */
uint32_t mc_gemv_mma_ksplit(uint32_t rows, uint32_t cols);
uint64_t mc_gemv_chunk_scratch_bytes(uint32_t max_cols, uint32_t M);
cudaError_t mc_gemv_chunk(const mc_config *c, const mc_matrix *w, const float *x, uint32_t ldx, const float *norm_w,
                          float eps, const float *bias, const float *residual, uint32_t ldr, float *y, uint32_t ldy,
                          int glu, uint32_t M, void *scratch, cudaStream_t st);
/* The attention of M rows at positions *pos .. *pos + M - 1 (qkv and out: M rows of the decode
 * step's), where mc_attention_path is MC_ATT_PATH_CLUSTER, _SPLIT or _MMA: every row's k and
 * v into the cache, then every row's attention with the decode step's split at its own position
 * (the split path: one block per row and kv head folds the row's spans in order), bit-identical
 * to M decode steps. cudaErrorNotSupported on the other paths (run mc_attention_fused or
 * mc_rope_kv + mc_attention per row then, with the row's position from mc_chunk_positions). */
cudaError_t mc_attention_chunk(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache,
                               void *v_cache, float *out, const int32_t *pos, uint32_t M, cudaStream_t st);
/* The same with every row on the cluster kernel (8 blocks a row: the launch before
 * attention_chunk_rows, the same bits), for the device check and the bench
 * (tests/cuda/check_attn_chunk.c). */
cudaError_t mc_attention_chunk_cluster(const mc_config *c, const mc_rope_args *a, const float *qkv, void *k_cache,
                                       void *v_cache, float *out, const int32_t *pos, uint32_t M, cudaStream_t st);
/* Row j of x (ld floats apart) = mc_embed of tokens[j], j < M (one launch, every type). */
cudaError_t mc_embed_rows(const mc_matrix *emb, const int32_t *tokens, uint32_t M, float scale, float *x, uint32_t ld,
                          cudaStream_t st);
/* pos_rows[j] = *pos + j (j < M); and the chunk's commit, *pos += M. */
cudaError_t mc_chunk_positions(const int32_t *pos, int32_t *pos_rows, uint32_t M, cudaStream_t st);
cudaError_t mc_chunk_commit(int32_t *pos, uint32_t M, cudaStream_t st);

/* *pos += 1 (the commit of a stage's step). With pdl (the arm's pdl=1) a programmatic launch:
 * it lets the kernel after it (the head) launch at once and waits for the kernel before it. */
cudaError_t mc_commit(int32_t *pos, bool pdl, cudaStream_t st);
/* One thread that sleeps `us` microseconds on the stream (the stall_us= fault injection). */
cudaError_t mc_stall(uint32_t us, cudaStream_t st);
/* Tensor parallelism (every stage of an arm with ranks anywhere): the commit of one rank,
 * checked: *pos advances only when *poison is 0 (no earlier step of the state failed), *prev is 0
 * (the verdict of the previous stage's rank 0 for this step, handed over with the hidden state;
 * NULL on stage 0), the n statuses are 0 and so are peers[q] for every q < n_peers but self (the
 * other ranks' statuses of the step's last all-reduce, index n - 1). The verdict goes to *verdict (0 or the failing
 * word) and, when ring is not NULL, to ring[p % MC_VERDICT_RING] (host-mapped memory) for the
 * step at position p: index -1 when committed, -2 when an earlier stage failed this step, else
 * the first nonzero status's index, with its word; position is written last, after a system
 * fence. A failed verdict sets *poison (if clear), so every later step of the state already
 * queued commits and publishes nothing; a poisoned step's verdict is the poison word and it
 * leaves the ring alone (it runs at the failed step's position, whose entry the host has yet
 * to read). Only a restore clears the poison. */
#define MC_VERDICT_RING 32u
typedef struct mc_verdict {
    int32_t position, index, word, pad;
} mc_verdict;
cudaError_t mc_commit_checked(int32_t *pos, const int32_t *status, uint32_t n, const int32_t *peers, uint32_t n_peers,
                              uint32_t self, const int32_t *prev, int32_t *verdict, int32_t *poison, mc_verdict *ring,
                              cudaStream_t st);
/* When *verdict is 0: xc = x (n_embd) and logits = lg (n_vocab): a step's outputs published. */
cudaError_t mc_tp_publish(const int32_t *verdict, const float *x, float *xc, uint32_t n_embd, const float *lg,
                          float *logits, uint32_t n_vocab, cudaStream_t st);
cudaError_t mc_copy_token(int32_t *dst, const int32_t *src, cudaStream_t st);

/* The device sampler (the algorithm of memra/sampling.h, bit for bit). */
typedef struct mc_sample_result {
    int32_t token;     /* the choice; -1 when not sampled or on bad logits */
    int32_t seq;       /* in the host's ring: the position the entry is for (*pos after the step's commit),
                        * written last, after the rest of the entry is visible (wait=ring), or with the
                        * token in one aligned 8-byte store (wait=word); else 0 */
    int32_t bad_index; /* the lowest index of a non-finite logit, or -1 */
    uint32_t bad_bits; /* that logit's bits */
} mc_sample_result;
/* Clears a ring entry before its step (the host, as the state's step does; wait=word's device
 * writes only the token and tag word unless the logits are bad, so the rest must read "good"). */
static inline void mc_ring_entry_clear(volatile mc_sample_result *e) {
    e->seq = -1;
    e->token = -1;
    e->bad_index = -1;
    e->bad_bits = 0;
}
typedef struct mc_sampler_scratch {
    uint32_t n_vocab, n_pow2;
    unsigned long long *keys; /* n_pow2 sort keys */
    float *partial;           /* n_vocab chunk-partial sums */
    float *chunk_sums;        /* n_vocab/256 + 1 */
    float *stats;             /* [0] = max */
    uint32_t *parts;          /* the max pass's per-block (best, index, bad) */
    uint32_t *ticket;         /* the max pass's count of finished blocks: 0 between launches */
} mc_sampler_scratch;
uint64_t mc_sampler_scratch_bytes(uint32_t n_vocab);
/* Carves the scratch out of `base` (mc_sampler_scratch_bytes bytes, 256-aligned), which the caller
 * zeroes once before the first mc_sample (the ticket starts at 0; every launch leaves it 0). */
void mc_sampler_scratch_init(mc_sampler_scratch *s, void *base, uint32_t n_vocab);
/* commit=handoff's fold: the next step's input hidden x = row `token` of emb times scale, written by
 * the sampler's last block once it has chosen a finite token (mc_embed's bits, element for element). */
typedef struct mc_embed_next {
    mc_matrix emb;
    float scale;
    float *x;
} mc_embed_next;
/* Samples from logits with cfg at position *pos (the committed position); writes the token to
 * *token_out (when the logits are finite) and the result to *result, and, with a ring (host memory
 * the device writes: pinned, ring_n entries), to ring[*pos % ring_n] too, fenced to the system, so
 * the host reads it with no copy on the stream: the entry's seq last, after a system fence, which
 * wait=ring takes as the step's end (else the step's event). With pdl its
 * first launch (the argmax pass) is programmatic: it waits for the kernel before it (the head) in
 * the kernel. With commit (commit=sampler) *pos is the position before the step's commit: the
 * argmax pass samples at *pos + 1 and its last block writes *pos + 1 to *pos, after every block
 * has read it, so the sampler's later kernels and the next step read the committed position.
 * With word (wait=word) the entry's token and tag go in one aligned 8-byte store, the step's last
 * write to the ring, with no system fence before it: the host sees them together (an aligned
 * 8-byte store arrives whole, the assumption NCCL's LL protocol rests on). Only bad logits write
 * bad_index and bad_bits, fenced before the word; the host clears the entry before the step
 * (mc_ring_entry_clear). With next (commit=handoff), the block that ends the sampling writes the
 * next step's input hidden from the token after the entry's tag (nothing on bad logits). */
cudaError_t mc_sample(const float *logits, const mc_sampler_scratch *s, const memra_sample_cfg *cfg, int32_t *pos,
                      int32_t *token_out, mc_sample_result *result, mc_sample_result *ring, uint32_t ring_n, bool pdl,
                      bool commit, bool word, const mc_embed_next *next, cudaStream_t st);

/* What the greedy argmax's last block writes, and where (mc_sample's arguments for its argmax pass):
 * sample_argmax's, and commit=head's head GEMV's (mc_gemv_head_argmax). */
typedef struct mc_argmax_args {
    uint32_t *parts, *ticket; /* the scratch's (mc_sampler_scratch): a part a block, 0 between launches */
    float *stats;
    int32_t *token_out;
    mc_sample_result *result;
    int32_t *pos;
    mc_sample_result *ring;
    uint32_t ring_n;
    int commit, word;   /* as mc_sample's */
    mc_embed_next next; /* next.x NULL: no embedding */
} mc_argmax_args;
/* The arguments mc_sample gives its argmax pass (commit=head passes them to the head instead). */
mc_argmax_args mc_argmax_args_of(const mc_sampler_scratch *s, int32_t *pos, int32_t *token_out,
                                 mc_sample_result *result, mc_sample_result *ring, uint32_t ring_n, bool commit,
                                 bool word, const mc_embed_next *next);
/* commit=head: y = the head's logits as mc_gemv_kquant writes them (w a Q4_K, Q5_K or Q6_K matrix,
 * norm_w the output norm, no bias or residual), and in the same launch greedy's argmax over them,
 * what mc_sample's argmax pass writes for a greedy step (a) with the same bits: each storing lane
 * keeps the best of its rows by argmax_merge.h's rule, the blocks merge theirs, and the last block
 * to take the ticket merges the blocks' parts. cudaErrorNotSupported where the head would not run
 * on the 16-warp body at one column part (qdot other than auto, the small blocks, a column split,
 * a grid over 512 blocks): the caller then launches mc_gemv and mc_sample. */
cudaError_t mc_gemv_kquant_argmax(const mc_config *c, const mc_matrix *w, const float *x, const float *norm_w,
                                  float eps, float *y, const mc_argmax_args *a, cudaStream_t st);
/* Its Q8_0 form (gemv_q8.cu): y as mc_gemv writes it on the integer kernel with the output norm, or
 * with pro as mc_gemv_pro writes it (postnorm=prologue: x_new = pro->x + RMSNorm(pro->po) * pro->w
 * first, its first block storing x_new to pro->out; x unused), and the argmax in the same launch.
 * cudaErrorNotSupported where that kernel would not be the 16-warp body at one column part (q8 other
 * than auto, a column split, a matrix the integer kernel does not serve). */
cudaError_t mc_gemv_q8_argmax(const mc_config *c, const mc_matrix *w, const float *x, const mc_pro_args *pro,
                              const float *norm_w, float eps, float *y, const mc_argmax_args *a, cudaStream_t st);
/* commit=head's head (gemv.cu): mc_gemv_kquant_argmax for a K-quant head without pro,
 * mc_gemv_q8_argmax for a Q8_0 one; cudaErrorNotSupported for any other (the caller then launches
 * the head and mc_sample). */
cudaError_t mc_gemv_head_argmax(const mc_config *c, const mc_matrix *w, const float *x, const mc_pro_args *pro,
                                const float *norm_w, float eps, float *y, const mc_argmax_args *a, cudaStream_t st);

/* Digest of KV planes: for each of n_planes planes of `capacity` rows of `row_words` 32-bit words
 * (the stored bytes: a row of hd f32 values is hd words, of hd f16 or bf16 values hd / 2), rows
 * [0, *pos) are hashed in chunks of MC_DIGEST_ROWS rows (one 64-bit hash per chunk, written to
 * hashes[plane * max_chunks + chunk]; chunks past *pos write 0). So the digests of caches of
 * different kv types differ (their bytes do), even where the values would agree. */
#define MC_DIGEST_ROWS 64u
cudaError_t mc_digest_planes(const void *planes, uint32_t n_planes, uint32_t capacity, uint32_t row_words,
                             const int32_t *pos, unsigned long long *hashes, cudaStream_t st);

/* Around op plugins (op_glue.cu): a standalone RMSNorm of n floats (one block, a fixed tree), and
 * the stores the fused GEMVs do (y = residual + (t + bias); SwiGLU of interleaved gate/up rows). */
/* qkvparts=merged: q/k/v parts a (rows into ya) and b (into yb) of one layer in one launch, with the
 * attention norm (norm_w), from x, or with pro the prologue (part a's first block stores x_new).
 * cudaErrorNotSupported, nothing launched, where no form serves the two parts (launch them apart:
 * the same bits). */
cudaError_t mc_gemv_qkv2(const mc_config *c, const mc_matrix *wa, const mc_matrix *wb, const float *x,
                         const mc_pro_args *pro, const float *norm_w, float eps, float *ya, float *yb, cudaStream_t st);
/* Its K-quant form (gemv_kquant.cu): part a Q4_K or Q5_K, part b Q6_K, the attention norm, no prologue. */
cudaError_t mc_gemv_kquant_qkv2(const mc_config *c, const mc_matrix *wa, const mc_matrix *wb, const float *x,
                                const float *norm_w, float eps, float *ya, float *yb, cudaStream_t st);
cudaError_t mc_op_rmsnorm(const float *x, const float *w, uint32_t n, float eps, float *out, cudaStream_t st);
cudaError_t mc_op_store(const float *t, uint32_t rows, const float *bias, const float *residual, float *y,
                        cudaStream_t st);
cudaError_t mc_op_swiglu(const float *t, uint32_t rows, float *y, cudaStream_t st);
/* y[p] = gelu_tanh(t[2p]) * t[2p + 1] (gemma3's gate, as mc_gemv_glu with MC_GLU_GELU). */
cudaError_t mc_op_geglu(const float *t, uint32_t rows, float *y, cudaStream_t st);
/* gemma3's post-attention and post-FFN norms: x[i] = x[i] + RMSNorm(t)[i] * w[i], the norm
 * exactly mc_op_rmsnorm's (so an op.rmsnorm plugin's norm then mc_op_store with the residual gives
 * the same bits as this one launch). Reads t, w and x (n floats each), writes x. */
cudaError_t mc_op_rmsnorm_add(const float *t, const float *w, uint32_t n, float eps, float *x, cudaStream_t st);
/* A prefill chunk's post norms: for each row j < M, mc_op_rmsnorm_add of row j of t into row j of
 * x (both n floats a row, packed): a block a row, each the one block of mc_op_rmsnorm_add. */
cudaError_t mc_op_rmsnorm_add_rows(const float *t, const float *w, uint32_t n, float eps, float *x, uint32_t M,
                                   cudaStream_t st);
#define MC_GLU_NONE 0 /* the GLU kinds (cuda_common.cuh defines them the same, for the kernels) */
#define MC_GLU_SILU 1
#define MC_GLU_GELU 2
/* y[i] = act(g[i]) * u[i], i < n, act by glu (MC_GLU_SILU, MC_GLU_GELU: cuda_common.cuh), with the
 * formula of the fused GEMVs' store: the GLU of a layer whose gate and up differ in type (two
 * GEMVs, not one interleaved). */
cudaError_t mc_glu_pair(const float *g, const float *u, uint32_t n, int glu, float *y, cudaStream_t st);
/* out[0] = pos[0] - 1: the position of the token whose step has committed, for an op context. */
cudaError_t mc_op_position_before(const int32_t *pos, int32_t *out, cudaStream_t st);

/* The kernel family of a kernel's host function pointer (for graph census), or NULL when the
 * function is none of ours. */
const char *mc_kernel_family(const void *func);

/* Host API for tests: runs the device sampler on host logits (uploads, samples, reads back): *out
 * is what a step's host reads (the ring's entry for the position, in pinned memory), *dev_out the
 * device's result copied back. With commit the device's position word starts at position - 1 and
 * the sampler commits it (commit=sampler); *pos_after is the word after the step (position, both
 * ways, when the sampler is right). word: wait=word's entry (cleared first, as a state's step does).
 * embed_cols > 0: commit=handoff's fold over an F32 table of n_vocab rows of embed_cols values
 * (row r, column c: r * 128 + c, exact in f32 for embed_cols <= 128 and n_vocab <= 131072) with
 * scale 2; *embed_ok is 1 when x is the chosen token's row doubled (or, on bad logits, left as it
 * was), else 0. */
cudaError_t mc_sample_host(const float *logits, uint32_t n_vocab, uint32_t position, const memra_sample_cfg *cfg,
                           bool commit, bool word, uint32_t embed_cols, mc_sample_result *out,
                           mc_sample_result *dev_out, int32_t *pos_after, int *embed_ok);

#ifdef __cplusplus
}
#endif
#endif
