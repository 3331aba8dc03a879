/* cuda_ext.h: "memra.cuda.graph" version 1, the table the cuda backend offers through its
 * vtable's `extension`, on which the cuda-graph plugin builds (same kernels, same weights, same
 * states: cuda-graph only decides how a step's body reaches the GPU).
 *
 * A step is split in three: prepare (host checks; the input token into device memory, on stage
 * 0's stream), body (forward through every stage, commit, head, sample: no host sync and no
 * host-side branch on position, so it can be captured once and replayed at any position), and
 * finish (readbacks, the step's completion event, host-side mirrors advanced). */
#ifndef MEMRA_CUDA_EXT_H
#define MEMRA_CUDA_EXT_H

#include <stdbool.h>
#include <stdint.h>

#include "memra/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEMRA_EXT_CUDA_GRAPH "memra.cuda.graph"

/* The cuda backend's arm keys; cuda-graph takes the same (it opens the cuda backend with its
 * arm's options, and resolves them through the cuda plugin). Every switch of the kernels is one of
 * them, resolved in the gate's protocol record; no environment variable changes what the
 * backends compute or how they launch. pdl, trigger, gemv (but for mma and mma2), moe_fuse, postnorm,
 * chunk, qblock, qgrid, mmachunk, attchunk, attdec, qkvparts, wait and commit never change the bits (a gate of `cuda:pdl=0` or `cuda:gemv=rowgroup` against `cuda`
 * compares the same arithmetic); q8, attention, norm, qdot, kv, experts, attfold and gemv=mma|mma2 choose other
 * arithmetic (other bits, same model). */
#define MEMRA_CUDA_OPTION_SPECS                                                                                        \
    {"pdl", "1",                                                                                                       \
     "programmatic dependent launch: 1 lets each kernel start while the one before it drains (its first "              \
     "weight loads overlap); 0 launches in plain stream order. The bits do not depend on it"},                         \
        {"trigger", "115",                                                                                             \
         "with pdl=1, the kernel families (bits, 0 to 127) that let the next kernel start early: 1 persistent "        \
         "GEMVs, 2 Q8_0 integer GEMVs, 4 attention, 8 row-group GEMVs with a norm, 16 attention with 4096 "            \
         "outputs or more, 32 row-group GEMVs without a norm, 64 Q8_0 row-group GEMVs without a norm. The bits "       \
         "do not depend on it"},                                                                                       \
        {"gemv", "auto",                                                                                               \
         "F32/F16/BF16 GEMV kernel: auto (persistent for short rows, rowgroup otherwise), rowgroup or persistent "     \
         "everywhere (the same bits), or mma: BF16 matrices (columns a multiple of 8) on tensor cores, x rounded to "   \
         "bf16 once, a fixed chain of bf16 MMAs per output, in decode and in the prefill chunk alike (other bits "       \
         "than auto; F32, F16 and other BF16 shapes keep auto's kernels); mma2 as mma with x' as two bf16 planes "    \
         "(high and low: 16 significant bits, twice the tensor work; its own bits)"},                                  \
        {"q8", "auto",                                                                                                 \
         "Q8_0 GEMV: auto (integer dots on x quantized to 23 bits for every dense Q8_0 matrix, blocks of 16 warps; "   \
         "a mixture's experts follow the experts key), "                                                              \
         "float (float dots everywhere: other bits), rows (the rule before issue 27: integer dots where rows >= "       \
         "cols / 2, float elsewhere: other bits on the down projection), int-8w (auto's bits in blocks of 8 "          \
         "warps) or mma (gemv=mma's tensor-core chain: the int8 weights as bf16, x rounded to bf16 once, a Q8_0 "     \
         "block's two MMAs from +0 then one fmaf by its scale, in decode and in the prefill chunk alike: other bits; " \
         "its chunk runs on the sm_90 wgmma kernel, under mmachunk=sync or on another device as single steps)"},                                                                                                    \
        {"qdot", "auto",                                                                                               \
         "Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K GEMVs: auto (integer dots on quantized x where the type's kernel "  \
         "has them), float (dequantized weights, float dots: other bits) or mma (Q4_K, Q5_K and Q6_K matrices on "     \
         "gemv=mma's tensor-core chain: the quants exact as bf16, x rounded to bf16 once, a sub-block's MMAs from +0, " \
         "then its scale (and min) by fmaf, in decode and in the prefill chunk alike: other bits; its chunk runs on "   \
         "the sm_90 wgmma kernel, elsewhere as single steps; Q4_0 .. Q5_1 keep auto's kernels)"},                      \
    {                                                                                                                  \
        "attention", "auto",                                                                                           \
            "decode attention: auto (one cluster launch; the tiled cluster kernel or the unfused kernels for shapes "  \
            "it does not serve), tiled (the tiled cluster kernel where it fits), unfused (rope/kv append, chunks, "    \
            "combine: three launches) or split (flash-decoding: fixed spans of 128 positions over many blocks, "       \
            "folded in span order, so a long prefix keeps the bandwidth; head sizes 32, 64, 128 with 1, 2, 3, 4 or 8 " \
            "q heads a kv head; auto's path elsewhere). Each path has its own bits; auto's cluster launch serves G 3 "  \
            "(e.g. SmolLM2) up to head size 128 since issue 27, tiled keeps its old path; heads (auto's bits: the "    \
            "cluster launch with a kv head's q heads in several clusters where the GPU holds them; auto does so at "   \
            "head size 256, e.g. gemma3), cluster (auto's bits: one cluster a kv head at every head size) or mma "    \
            "(tensor cores in decode and in the prefill chunk alike: q, K, V and the softmax weights rounded to bf16, " \
            "f16 under kv=f16, fixed spans of 64 positions folded in order, so prefill=1 and prefill=512 stay exact; " \
            "other bits; head sizes 32, 64, 128 with 1, 2, 3, 4 or 8 q heads a kv head, another model is refused)"    \
    },                                                                                                                 \
    {                                                                                                                  \
        "kv", "f32",                                                                                                   \
            "KV cache values: f32 (4 bytes), f16 or bf16 (2 bytes: each K and V value rounded to nearest even as it "  \
            "is written, the cpu backend's kv key, read back exactly; half the bytes attention reads) or q8 (1.125 "   \
            "bytes: each block of 32 values of a row as 8-bit integers and an f32 scale, amax / 127, the cpu "        \
            "backend's operations; read by attention=mma alone, at head sizes 32, 64 and 128). Other bits than f32 "  \
            "and another cache digest (the stored bytes are hashed); exact pairs hold within one kv type"             \
    },                                                                                                                 \
    {                                                                                                                  \
        "norm", "fused",                                                                                               \
            "RMSNorm sites (attn_norm, ffn_norm, output_norm): fused (folded into the next GEMV, 1/rms applied after " \
            "the dot product) or unfused (a standalone rmsnorm, then the GEMV without one: exactly the path of an "    \
            "op.rmsnorm plugin, which implies it; other bits than fused). q/k norms stay inside attention; gemma3's "   \
            "post norms: the postnorm key"                                                                             \
    },                                                                                                                 \
    {                                                                                                                  \
        "moe_fuse", "2935",                                                                                            \
            "mixture-of-experts kernel variants (bits, 0 to 4095), each where its kernel serves the layer: 1 the "     \
            "router's top k in the router GEMV's last block, 2 the weighted sum of the experts in their down GEMV, 4 "  \
            "granite's attention residual scale in the router GEMV (with 1), 8 the experts' gate/up GEMV with all of " \
            "a lane's loads in flight and fewer registers (slower on qwen3moe-30b), 16 the fused router on one "      \
            "thread-block cluster, a cluster barrier in place of its ticket (with 1), 32 the experts' gate/up "       \
            "GEMV lets the next launch start after its wait (the down GEMV then queues its expert's weights while "   \
            "the gate/up drains), 64 the Q8_0 experts' gate/up GEMV streamed by one wave of warps, x' computed "       \
            "once a block (where the column split is 1; an H200, both orders: qwen3moe-30b +3.0%, granite-moe-1b "    \
            "Q8_0 +5.0%), 128 the same for F32, F16 and BF16 experts (granite-moe-1b BF16 -1.8%, F16 -1.9%: off), "  \
            "256 the cluster router's logits pushed into its first block's shared memory and routed from there, "     \
            "by one warp where there are at most 32 experts (with 16), 512 that cluster router as one block of up "   \
            "to 32 warps where there are at most 32 experts (with 16), 1024 that router computed again by every "     \
            "cluster of the experts' gate/up launch, one launch a layer fewer (at most 32 experts, no shared expert, "  \
            "the gate/up's column split 1, an F32 router; with 1 and 2; granite's residual add then in the down "      \
            "GEMV; granite-moe-1b BF16 -2.3% on an H100: off), 2048 under experts=int or int-gu the Q8_0 experts' "    \
            "gate/up on the integer kernel in one wave of 16-warp blocks over every slot's row groups, x quantized "   \
            "once a block (one x for all slots). "                                                                     \
            "0 runs the five launches of the unfused path. The bits do not depend on it"                              \
    },                                                                                                                 \
    {                                                                                                                  \
        "postnorm", "prologue",                                                                                        \
            "gemma3's post-attention and post-FFN norms with their residual add: prologue (computed again by every "  \
            "block of the GEMVs that read their output: the narrow Q4_0..Q5_1 and the integer Q8_0 GEMVs, e.g. "       \
            "gemma3's q/k/v, gate/up and head; one stage, one rank, no taps or op plugins; fused where a reader "      \
            "lacks it), fused (in the last block of the output or down GEMV, elected by an integer ticket: two "       \
            "launches a layer fewer; with one rank, the built-in GEMV and norm) or launch (a launch of their own "     \
            "after the GEMV, as with ranks or an op plugin there). The same bits every way"                            \
    },                                                                                                                 \
    {                                                                                                                  \
        "chunk", "mma",                                                                                                \
            "a prefill chunk's integer GEMVs: mma (Q8_0 where the q8 key takes integer dots, and Q4_K/Q5_K/Q6_K and " \
            "Q4_0/Q4_1/Q5_0/Q5_1 under qdot=auto: exact int8 dots on tensor cores, decode's float chain per "         \
            "element), fma (Q8_0 by dp4a on the CUDA cores, the K-quant and Q4_0..Q5_1 layers' chunks as single "    \
            "steps), mma-q8 (Q8_0 on tensor cores, those layers as single steps), mma-opt (mma with the Q8_0 and "   \
            "K-quant kernels' forms of fewer stalls: scales converted when stored, class ends fixed when compiled, " \
            "ldmatrix fragments) or mma-kq (the old name of mma). The same bits each way, decode's"                   \
    },                                                                                                                 \
    {                                                                                                                  \
        "qblock", "16r",                                                                                               \
            "the blocks of the Q4_0..Q5_1 and Q4_K..Q6_K GEMVs under qdot=auto: 16r (16 warps, one block a "          \
            "multiprocessor; on matrices of at most 2048 columns a row group's warps split its rows, not its "       \
            "columns: SmolLM2 Q4_1 1756 -> 2019 tok/s, gemma3-270m q4_k_m 1730 -> 1795), 16 (16 warps, the "          \
            "columns split everywhere: the kernels before 16r), auto (4 warps, several a multiprocessor, on narrow " \
            "matrices whose 16-warp grid leaves multiprocessors idle; measured slower), 4 (4 warps everywhere), "    \
            "16x (16 with x' quantized by every warp on narrow Q4_0..Q5_1 matrices; measured slower) or 16xr "        \
            "(16r and 16x). The same bits each way"                                                                   \
    },                                                                                                                 \
    {                                                                                                                  \
        "qgrid", "auto",                                                                                               \
            "the grid of the 16-warp Q4_0..Q5_1 and Q4_K..Q6_K GEMVs: fill (a block on every multiprocessor that has " \
            "a row group: llama-8b Q6_K 492.2 -> 496.9 tok/s, Q4_K 539.4 -> 547.0), need (the fewest blocks whose "     \
            "warps hold every row group: the grid before; q/k/v on 96 of 132 multiprocessors) or auto (fill on "     \
            "every Q4_K..Q6_K matrix and on Q4_0..Q5_1 matrices of more than 2048 columns, need on narrower "          \
            "Q4_0..Q5_1 ones: SmolLM2 Q4_1 lost 7% filled, gemma3-270m q4_k_m gains 0.9% with its K-quants "          \
            "filled, smollm2-135m q4_k_m lost 0.6% on an H100). The same bits each way"                               \
    },                                                                                                                 \
    {                                                                                                                  \
        "experts", "int-gu",                                                                                           \
            "a mixture of experts' Q8_0 experts: float (float dots on the dequantized weights, the row-group GEMV's "  \
            "path), int (the integer Q8_0 kernel's body a slot, x quantized to 23 bits as q8=auto's dense GEMVs: "     \
            "other bits; moe_fuse's down/combine and flat folds then step aside; on an H200 2% faster on "             \
            "granite-moe-1b Q8_0, 3.5% slower on qwen3moe-30b Q8_0) or int-gu (int for the gate/up alone, the "        \
            "down and its combine on float dots, the gate/up's column split balanced over the warps: other bits "      \
            "again). Other "                                                                                           \
            "types' experts take their families' kernels either way"                                                   \
    },                                                                                                                 \
    {                                                                                                                  \
        "mmachunk", "auto",                                                                                            \
            "gemv=mma's prefill chunk GEMV: wgmma (Hopper's warpgroup MMA fed by the tensor memory accelerator; "     \
            "an sm_90 device only, refused elsewhere when a chunk runs; gemv=mma2 keeps sync), sync (mma.sync from "   \
            "shared memory: the kernel before) or auto (wgmma on an sm_90 device, sync elsewhere). On an H200, "       \
            "llama-8b's gate/up at M 512 285 against 545 us. The same bits every way, decode's"                       \
    },                                                                                                                 \
    {                                                                                                                  \
        "attchunk", "phased",                                                                                          \
            "a prefill chunk's attention (hd up to 128, the cluster path): phased (R rows of a kv head a block, the "  \
            "scores, the softmax scalars and the outputs in phases, each value once; rows past 1,024 positions in "    \
            "their window take rows' kernel) or rows (a block a row and kv head walking the cluster's ranks: the "     \
            "kernel before). The same bits every way, decode's"                                                        \
    },                                                                                                                 \
    {                                                                                                                  \
        "attfold", "span",                                                                                             \
            "how attention=mma folds its spans of 64 positions: span (each span in order from the first) or tier "    \
            "(the spans of each tier of 256 positions in order, then the tiers in order: decode's blocks fold a "      \
            "tier each, so its last block folds a quarter of the partials at long contexts). Other bits each, the "    \
            "chunk's and decode's alike; refused without attention=mma"                                                \
    },                                                                                                                 \
    {                                                                                                                  \
        "attdec", "block",                                                                                             \
            "who reduces attention=mma's decode spans: block (a block's 4 warps each span, one span after another, "  \
            "the next staged meanwhile) or warp (a warp a span, a block the 4 spans of 256 positions at once, with no " \
            "block barrier inside a span; kv=q8 at head size 128 refused). The same bits either way, for every "      \
            "attfold; refused without attention=mma"                                                                   \
    },                                                                                                                 \
    {                                                                                                                  \
        "qkvparts", "merged",                                                                                          \
            "a layer's q/k/v in parts of two types (gemma3's Q4_K_M files: q and k Q5_0, v Q8_0) under "              \
            "postnorm=prologue: merged (one launch whose blocks run either part, where it has a form for them: a "    \
            "Q4_0 or Q5_0 part on the narrow 16r kernel and a Q8_0 part on the 16-warp integer kernel at column "     \
            "splits of 2 or 4; a launch a part elsewhere) or apart (a launch a part). The bits do not depend on it"    \
    },                                                                                                                 \
    {                                                                                                                  \
        "wait", "ring",                                                                                                \
            "how the host learns that a decode step ended: ring (the step's last write, the tag the device sampler "  \
            "puts on the step's entry of the result ring in host memory, seen there at once; a sampled step of one "  \
            "stage and one rank that wants no logits, the completion event elsewhere; the tag after the rest of "     \
            "the entry and a system fence), word (the same wait, the tag and the token in one 8-byte store with no "  \
            "system fence before it unless the logits are bad) or event (the step's completion event, which the "    \
            "device signals after the graph's last kernel has exited). Nothing computed depends on it"              \
    },                                                                                                                 \
    {                                                                                                                  \
        "commit", "head",                                                                                              \
            "where a decode step's position advances: head (the default: as handoff, and where the head runs on the "  \
            "16-warp K-quant GEMV at qdot=auto or the 16-warp Q8_0 integer GEMV at q8=auto, gemma3's with its "        \
            "post-FFN norm too, a greedy step's argmax in the head GEMV's own launch, whose last block advances the "  \
            "position: the argmax pass's launch a token fewer; the same bits as launch, 0 to +1% on six models on "    \
            "H100s, --abba) or handoff (as sampler, and the block that ends the sampling embeds the next step's "      \
            "input from the token it chose, after the step's tag: the embedding's launch a token fewer too, where "    \
            "the first layer adds its attention output to the residual as it is (llama, qwen) or through gemma3's "    \
            "prologue, not granite; a token from the host is embedded by a launch before the step) or sampler (the "   \
            "last block of "                                                                                           \
            "the sampler's argmax pass, after every block has read the position: a launch and a dependency a token "   \
            "fewer, where one stage of one rank samples with no taps; the launch elsewhere) or launch (a one-thread "  \
            "kernel of its own between the last layer and the head, which waits for it: the rule before). "            \
            "Nothing computed depends on it"                                                                           \
    },                                                                                                                 \
    {                                                                                                                  \
        "collective", "oneshot",                                                                                       \
            "with tp > 1: the collective plugin that sums the ranks' partials, NAME[:MODE]: oneshot (one-shot kernel " \
            "over peer memory) or nccl (nccl:allgather: gather, then the rank-order sum); NAME:KEY=VALUE sets one of " \
            "the collective's own keys (oneshot:timeout_ms=5000). Refused with tp=1 (no effect)"                       \
    },                                                                                                                 \
    {                                                                                                                  \
        "step_timeout_ms", "30000",                                                                                    \
            "with tp > 1: the longest a step may take before its collective is aborted and the step fails (the "       \
            "state quarantined), so a rank that never arrives cannot hang the process (100 to 3600000; refused with "  \
            "tp=1)"                                                                                                    \
    },                                                                                                                 \
    {                                                                                                                  \
        "stall_us", "0",                                                                                               \
            "fault injection, for tests: every stage after the first sleeps this many microseconds on each of its "    \
            "ranks' streams once it has taken a step's hidden state, so the stage before runs ahead by up to the "     \
            "window (0 to 1000000; timing only, never the bits; refused in an arm of one stage)"                       \
    },                                                                                                                 \
    {                                                                                                                  \
        "op.rmsnorm", "builtin",                                                                                       \
            "op plugin (NAME[:KEY=VALUE...], memra/op.h) for RMSNorm: attn_norm, ffn_norm, output_norm (and gemma3's " \
            "post_attn_norm, post_ffn_norm). The "                                                                     \
            "plugin's norm runs before the GEMV: it implies norm=unfused, the built-in it is compared with exactly"    \
    },                                                                                                                 \
    {                                                                                                                  \
        "op.gemv.f32", "builtin", "op plugin for the GEMV of F32 weights (bias, residual and SwiGLU after it)"         \
    },                                                                                                                 \
    {"op.gemv.f16", "builtin", "op plugin for the GEMV of F16 weights"},                                               \
    {                                                                                                                  \
        "op.gemv.bf16", "builtin", "op plugin for the GEMV of BF16 weights"                                            \
    }

typedef struct memra_cuda_graph_ext_v1 {
    uint32_t struct_size;
    /* Checks the state (quarantine, capacity, steps in flight) and the token, and enqueues the
     * input token's transfer to device memory on stage 0's stream. */
    memra_status (*prepare)(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err);
    /* Enqueues the body. capture: the streams of the stages fork from and join back into stage
     * 0's stream, and no cross-step event waits are enqueued (a graph launch orders itself). */
    memra_status (*body)(memra_backend *b, memra_state *s, const memra_sample_cfg *sample, bool capture,
                         memra_error *err);
    /* Enqueues the readbacks and the completion event (after the body or the graph launch) and
     * advances the host mirrors. after_graph: everything was launched on stage 0's stream. */
    memra_status (*finish)(memra_backend *b, memra_state *s, const memra_step_args *args, bool after_graph,
                           memra_error *err);
    /* Stage 0's stream (a cudaStream_t) and device. */
    void *(*stream)(memra_backend *b, memra_state *s);
    int32_t (*device)(memra_backend *b, memra_state *s);
    /* Marks the state failed (every later step or restore on it fails). */
    void (*quarantine)(memra_backend *b, memra_state *s, const char *why);
    /* The kernel family of a kernel node's function ("gemv", "attention", ...), NULL if not ours. */
    const char *(*kernel_family)(const void *func);
    /* Appended (test with MEMRA_HAS_MEMBER): fn(arg) is called before anything aborts the state's
     * communicators (the tp step watchdog), from the thread that waits. cuda-graph destroys its
     * graph there: a captured NCCL operation holds its communicator until the graph that captured
     * it is destroyed, and NCCL's abort waits for that. NULL fn: none. */
    void (*on_abort)(memra_backend *b, memra_state *s, void (*fn)(void *arg), void *arg);
    /* Appended (test with MEMRA_HAS_MEMBER): a prefill chunk (the vtable's step_chunk) in three
     * parts, so cuda-graph can capture the body once per count. chunk_native: whether the chunk
     * kernels serve this state (one stage, one rank, no op plugins, no post norms); where not, a
     * chunk runs as single steps. chunk_prepare: the checks of step_chunk (quarantine, steps in
     * flight, count within 1..prefill, capacity, tokens), the chunk's buffers (made once per
     * state, outside any capture) and the tokens into device memory, on stage 0's stream.
     * chunk_body: the chunk's kernels on stage 0's stream (no host sync, no host branch on the
     * position: capturable, and replayable at any position for the same count), the commit and
     * the head on the last row. chunk_finish: the logits read back (when logits is not NULL), the
     * wait, and the host mirrors advanced by count. */
    bool (*chunk_native)(memra_backend *b, memra_state *s);
    memra_status (*chunk_prepare)(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t count,
                                  memra_error *err);
    memra_status (*chunk_body)(memra_backend *b, memra_state *s, uint32_t count, memra_error *err);
    memra_status (*chunk_finish)(memra_backend *b, memra_state *s, uint32_t count, float *logits, memra_error *err);
} memra_cuda_graph_ext_v1;

#ifdef __cplusplus
}
#endif
#endif
