/* cuda_state.cu: the `cuda` backend's open and close (the arm's keys, devices, peer access),
 * its states and their memory (per stage and rank: stream, events, arena of buffers and KV cache;
 * pinned slots), quarantine, the digests and restore, stats and the memory report. The design of
 * the backend (exactness across placements, tensor parallelism, the checked commit) is told in
 * cuda_backend.h; the other parts: cuda_weights.cu (the weights uploaded), cuda_forward.cu (a
 * token's step), cuda_tp.cu (ranks and collectives), cuda_ext.cu (the extensions). */
#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_ext.h"
#include "cuda_kernels.h"
#include "cuda_backend.h"
#include "memra/ext.h"
#include "memra/gguf.h"
#include "memra/model.h"
#include "memra/numeric.h"
#include "memra/options.h"
#include "memra/plugin.h"
#include "memra/status.h"

/* ---- errors ----------------------------------------------------------------------------- */

memra_status mc_cuda_fail(memra_error *err, cudaError_t e, const char *what) {
    return memra_fail(err, MEMRA_E_DEVICE, "cuda: %s failed: %s (%s)", what, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

/* The arm's keys (MEMRA_CUDA_OPTION_SPECS) read into a configuration: a malformed value is
 * MEMRA_E_INVALID naming the key and the values it takes. */
static memra_status mc_read_options(const memra_options *opts, mc_config *c, memra_error *err) {
    *c = mc_config_default;
    memra_status st = memra_options_u32(opts, "pdl", 1, 0, 1, &c->pdl, err);
    if (st)
        return st;
    if ((st = memra_options_u32(opts, "trigger", MC_TRIGGER_DEFAULT, 0, MC_TRIGGER_ALL, &c->trigger, err)))
        return st;
    if ((st = memra_options_u32(opts, "moe_fuse", MC_MOE_FUSE_DEFAULT, 0, MC_MOE_FUSE_ALL, &c->moe_fuse, err)))
        return st;
    static const char *const choices[] = {"gemv",     "q8",      "attention", "norm",     "qdot",    "kv",
                                          "postnorm", "chunk",   "qblock",    "qgrid",    "experts", "mmachunk",
                                          "attchunk", "attfold", "attdec",    "qkvparts", "wait",    "commit"};
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++) {
        const char *v = memra_options_get(opts, choices[i]);
        const char *allowed = v ? mc_config_choice(c, choices[i], v) : NULL;
        if (allowed)
            return memra_fail(err, MEMRA_E_INVALID, "%s=%s: expected one of %s", choices[i], v, allowed);
    }
    /* An op.rmsnorm plugin runs every norm site unfused (its norm, then the GEMV without one):
     * it implies norm=unfused, and an explicit norm=fused beside it is a contradiction. */
    const char *opn = memra_options_get(opts, "op.rmsnorm");
    if (opn && strcmp(opn, MEMRA_OP_BUILTIN) != 0) {
        const char *nv = memra_options_get(opts, "norm");
        if (nv && c->norm == MC_NORM_FUSED)
            return memra_fail(err, MEMRA_E_INVALID,
                              "norm=%s: op.rmsnorm=%.100s runs every norm site unfused (the plugin's norm, then the "
                              "GEMV without one), which implies norm=unfused; drop norm=%s or set norm=unfused",
                              nv, opn, nv);
        c->norm = MC_NORM_UNFUSED;
    }
    uint32_t step_timeout = 0, stall = 0;
    if ((st = memra_options_u32(opts, "step_timeout_ms", 30000, 100, 3600000, &step_timeout, err)))
        return st;
    if ((st = memra_options_u32(opts, "stall_us", 0, 0, 1000000, &stall, err)))
        return st;
    const char *coll = memra_options_get(opts, "collective");
    if (coll && (!coll[0] || coll[0] == ':'))
        return memra_fail(err, MEMRA_E_INVALID,
                          "collective=%s: expected a collective plugin's name, e.g. oneshot, nccl or nccl:allgather",
                          coll);
    return MEMRA_OK;
}

memra_status mc_resolve_options(const memra_host *host, const memra_options *opts, memra_options *resolved,
                                memra_error *err) {
    mc_config c;
    memra_status st = mc_read_options(opts, &c, err);
    if (st)
        return st;
    *resolved = *opts;
    char buf[16];
    snprintf(buf, sizeof buf, "%u", c.pdl);
    if ((st = memra_options_set(resolved, "pdl", buf, err)))
        return st;
    snprintf(buf, sizeof buf, "%u", c.trigger);
    if ((st = memra_options_set(resolved, "trigger", buf, err)))
        return st;
    static const char *const choices[] = {"gemv", "q8", "attention", "norm", "qdot", "kv"};
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++)
        if ((st = memra_options_set(resolved, choices[i], mc_config_choice_name(&c, choices[i]), err)))
            return st;
    snprintf(buf, sizeof buf, "%u", c.moe_fuse);
    if ((st = memra_options_set(resolved, "moe_fuse", buf, err)))
        return st;
    if ((st = memra_options_set(resolved, "postnorm", mc_config_choice_name(&c, "postnorm"), err)))
        return st;
    if ((st = memra_options_set(resolved, "chunk", mc_config_choice_name(&c, "chunk"), err)))
        return st;
    if ((st = memra_options_set(resolved, "qblock", mc_config_choice_name(&c, "qblock"), err)))
        return st;
    if ((st = memra_options_set(resolved, "qgrid", mc_config_choice_name(&c, "qgrid"), err)))
        return st;
    if ((st = memra_options_set(resolved, "experts", mc_config_choice_name(&c, "experts"), err)))
        return st;
    if ((st = memra_options_set(resolved, "mmachunk", mc_config_choice_name(&c, "mmachunk"), err)))
        return st;
    if ((st = memra_options_set(resolved, "attchunk", mc_config_choice_name(&c, "attchunk"), err)))
        return st;
    if ((st = memra_options_set(resolved, "attfold", mc_config_choice_name(&c, "attfold"), err)))
        return st;
    if ((st = memra_options_set(resolved, "attdec", mc_config_choice_name(&c, "attdec"), err)))
        return st;
    if ((st = memra_options_set(resolved, "qkvparts", mc_config_choice_name(&c, "qkvparts"), err)))
        return st;
    if ((st = memra_options_set(resolved, "wait", mc_config_choice_name(&c, "wait"), err)))
        return st;
    if ((st = memra_options_set(resolved, "commit", mc_config_choice_name(&c, "commit"), err)))
        return st;
    /* the tensor-parallel keys resolve where they are used: with ranks (tp=N or ep=N) */
    const char *tp = memra_options_get(opts, "tp"), *ep = memra_options_get(opts, "ep");
    if ((tp && strcmp(tp, "1") != 0) || (ep && strcmp(ep, "1") != 0)) {
        if (!memra_options_get(opts, "collective") && (st = memra_options_set(resolved, "collective", "oneshot", err)))
            return st;
        if (!memra_options_get(opts, "step_timeout_ms") &&
            (st = memra_options_set(resolved, "step_timeout_ms", "30000", err)))
            return st;
    }
    return MEMRA_OK;
}

memra_status mc_device_count(const memra_host *host, const memra_options *opts, uint32_t *out, memra_error *err) {
    mc_config c; /* the arm's options are checked before any device is asked for */
    memra_status st = mc_read_options(opts, &c, err);
    if (st)
        return st;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return memra_fail(err, MEMRA_E_DEVICE,
                          "no NVIDIA GPU found (or its driver is not loaded): cudaGetDeviceCount: %s",
                          cudaGetErrorString(e));
    if (n <= 0)
        return memra_fail(err, MEMRA_E_DEVICE,
                          "no NVIDIA GPU found (or its driver is not loaded): cudaGetDeviceCount found none");
    *out = (uint32_t)n;
    return MEMRA_OK;
}

/* gemma3: what its step needs from the description (model.c reads it; a description made
 * elsewhere may lack it): the embedding and attention scales, the window and its period, GELU,
 * and both post norms on every layer (the partial sums go through them: cuda_forward.cu). */
static memra_status mc_check_gemma3(const memra_model *m, memra_error *err) {
    if (m->arch != MEMRA_ARCH_GEMMA3)
        return MEMRA_OK;
    if (!(m->embd_scale > 0.0f) || !(m->attn_scale > 0.0f) || m->sliding_window == 0 || m->swa_period == 0 ||
        m->ffn_act != MEMRA_FFN_GELU_TANH)
        return memra_fail(err, MEMRA_E_FORMAT,
                          "cuda: gemma3 model without embedding scale, attention scale, sliding window or GELU");
    for (uint32_t il = 0; il < m->n_layer; il++)
        if (!m->layers[il].post_attn_norm.data || !m->layers[il].post_ffn_norm.data)
            return memra_fail(err, MEMRA_E_FORMAT, "cuda: gemma3 layer %u has no blk.%u.%s.weight", il, il,
                              m->layers[il].post_attn_norm.data ? "post_ffw_norm" : "post_attention_norm");
    return MEMRA_OK;
}

/* A mixture of experts (cuda_forward.cu's mc_moe_ffn): what the cuda backend runs of it. Ranks as
 * the cpu backend cuts them (ep=N: whole experts per rank, N ranks a stage; tp=N: each expert's
 * rows split; both: the same ranks), each rank's share checked (mc_moe_ranges); the experts'
 * stacks F32, F16, BF16, Q8_0 (gemv_experts) or Q4_0 .. Q6_K (their families' dense kernels a
 * slot, gemv_quant.h; the router and the shared expert take any type of the dense GEMVs); the built-in kernels (op plugins and norm=unfused are not offered the experts'
 * GEMVs). *ep_out: the arm's ep= (1 without experts; ep > 1 on a model without them is refused). */
static memra_status mc_check_moe(const memra_model *m, const memra_plan *plan, const memra_options *opts,
                                 uint32_t *ep_out, memra_error *err) {
    uint32_t ep = 1;
    memra_status st = memra_options_u32(opts, "ep", 1, 1, MEMRA_MAX_RANKS, &ep, err);
    if (st)
        return st;
    *ep_out = ep;
    if (m->n_expert == 0 && ep > 1)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: ep=%u: the model (%s) has no experts", ep,
                          m->arch_name ? m->arch_name : "?");
    if (m->n_expert == 0)
        return MEMRA_OK;
    const char *name = m->arch_name ? m->arch_name : "?";
    if (!m->moe || m->n_expert > MEMRA_MAX_EXPERTS || m->n_expert_used == 0 || m->n_expert_used > m->n_expert ||
        m->n_expert_used > MEMRA_MAX_EXPERTS_USED)
        return memra_fail(err, MEMRA_E_FORMAT, "cuda: %s mixture of experts with %u experts, top %u: out of range",
                          name, m->n_expert, m->n_expert_used);
    if (m->n_ff % 4 != 0) /* each slot's activations start on 16 bytes (gemv_experts' loads) */
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cuda: %s experts of width %u; the cuda backend's expert GEMV needs a multiple of 4", name,
                          m->n_ff);
    for (uint32_t il = 0; il < m->n_layer; il++) {
        const memra_layer_moe *x = &m->moe[il];
        const memra_weight *stacks[3] = {&x->gate_exps, &x->up_exps, &x->down_exps};
        for (int k = 0; k < 3; k++) {
            const uint32_t t = stacks[k]->type;
            if (t != MEMRA_TYPE_F32 && t != MEMRA_TYPE_F16 && t != MEMRA_TYPE_BF16 && t != MEMRA_TYPE_Q8_0 &&
                t != MEMRA_TYPE_Q4_0 && t != MEMRA_TYPE_Q4_1 && t != MEMRA_TYPE_Q5_0 && t != MEMRA_TYPE_Q5_1 &&
                t != MEMRA_TYPE_Q4_K && t != MEMRA_TYPE_Q5_K && t != MEMRA_TYPE_Q6_K)
                return memra_fail(err, MEMRA_E_UNSUPPORTED,
                                  "cuda: tensor '%s' is %s; the cuda backend's expert GEMV runs F32, F16, BF16, "
                                  "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K experts (the cpu backend runs "
                                  "every type)",
                                  stacks[k]->name ? stacks[k]->name : "?", memra_tensor_type_name(t));
        }
        if (x->gate_exps.type != x->up_exps.type)
            return memra_fail(err, MEMRA_E_UNSUPPORTED,
                              "cuda: '%s' is %s and '%s' is %s; the cuda backend's expert GEMV needs one type for "
                              "both (their rows are interleaved)",
                              x->gate_exps.name ? x->gate_exps.name : "?", memra_tensor_type_name(x->gate_exps.type),
                              x->up_exps.name ? x->up_exps.name : "?", memra_tensor_type_name(x->up_exps.type));
    }
    if (ep > 1 && m->n_expert % ep != 0)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: ep=%u: expert_count %u is not divisible by %u ranks", ep,
                          m->n_expert, ep);
    for (uint32_t s = 0; s < plan->n_stages && s < MEMRA_MAX_STAGES; s++) {
        const memra_stage_plan *sp = &plan->stages[s];
        if (ep > 1 && sp->n_ranks != ep)
            return memra_fail(err, MEMRA_E_INVALID,
                              "cuda: ep=%u, but stage %u has %u ranks (expected %u: ep=N "
                              "alone, or with tp=N)",
                              ep, s, sp->n_ranks, ep);
        if (sp->n_ranks > MEMRA_MAX_RANKS)
            continue; /* mc_open_tp says so */
        for (uint32_t r = 0; r < (sp->n_ranks > 1 ? sp->n_ranks : 1); r++) {
            mc_moe_range rg;
            if ((st = mc_moe_ranges(m, sp, r, ep, &rg, err)))
                return st;
        }
    }
    return MEMRA_OK;
}

static int32_t mc_rank_device(const memra_stage_plan *sp, uint32_t r) {
    return sp->n_ranks > 1 ? sp->ranks[r].device : sp->device;
}

memra_status mc_open(const memra_host *host, const memra_model *m, const memra_plan *plan, const memra_options *opts,
                     memra_backend **out, memra_error *err) {
    uint32_t n_dev = 0;
    if (m->arch != MEMRA_ARCH_LLAMA && m->arch != MEMRA_ARCH_QWEN2 && m->arch != MEMRA_ARCH_QWEN3 &&
        m->arch != MEMRA_ARCH_GEMMA3 && m->arch != MEMRA_ARCH_QWEN2MOE && m->arch != MEMRA_ARCH_QWEN3MOE &&
        m->arch != MEMRA_ARCH_GRANITEMOE)
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cuda: architecture '%s' is not supported by the cuda backend (it runs llama, qwen2, qwen3, "
                          "gemma3, qwen2moe, qwen3moe and granitemoe; the cpu backend runs %s)",
                          m->arch_name ? m->arch_name : "?", m->arch_name ? m->arch_name : "it");
    memra_status st = mc_check_gemma3(m, err);
    if (st)
        return st;
    uint32_t ep = 1;
    if ((st = mc_check_moe(m, plan, opts, &ep, err)))
        return st;
    mc_config cfg;
    if ((st = mc_read_options(opts, &cfg, err)))
        return st;
    if (cfg.attention == MC_ATT_MMA && m->n_head > 0 &&
        !mc_attention_mma_serves(m->n_head, m->n_head_kv, m->head_dim, m->head_dim_v))
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cuda: attention=mma serves head sizes 32, 64 and 128 (k and v alike) with 1, 2, 3, 4 or 8 q "
                          "heads a kv head; this model has head size %u (v %u) and %u q heads on %u kv heads (use "
                          "attention=auto)",
                          m->head_dim, m->head_dim_v, m->n_head, m->n_head_kv);
    if (cfg.attfold != MC_ATTFOLD_SPAN && cfg.attention != MC_ATT_MMA)
        return memra_fail(err, MEMRA_E_INVALID,
                          "cuda: attfold=%s chooses how attention=mma folds its spans; this arm's attention is %s "
                          "(add attention=mma, or drop attfold)",
                          mc_config_choice_name(&cfg, "attfold"), mc_config_choice_name(&cfg, "attention"));
    if (cfg.attdec != MC_ATTDEC_BLOCK && cfg.attention != MC_ATT_MMA)
        return memra_fail(err, MEMRA_E_INVALID,
                          "cuda: attdec=%s chooses who reduces attention=mma's decode spans; this arm's attention is "
                          "%s (add attention=mma, or drop attdec)",
                          mc_config_choice_name(&cfg, "attdec"), mc_config_choice_name(&cfg, "attention"));
    if (cfg.attdec == MC_ATTDEC_WARP && m->n_head > 0 && !mc_attention_mma_wd_serves(m->head_dim, cfg.kv))
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cuda: attdec=warp stages kv=q8's stored rows inside a warp's tiles, which head size %u "
                          "does not fit (it serves q8 at head sizes 32 and 64, every other kv type at 32, 64 and "
                          "128); use attdec=block or another kv",
                          m->head_dim);
    if (cfg.kv == MC_KV_Q8 && cfg.attention != MC_ATT_MMA)
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cuda: kv=q8 (8-bit quants and an f32 scale a block of 32 values) is read by attention=mma "
                          "alone; add attention=mma to the arm, or use kv=f32, f16 or bf16");
    uint32_t prefill = 1;
    if ((st = mc_read_prefill(opts, &prefill, err)))
        return st;
    if ((st = mc_check_idle_tp_keys(host, plan, opts, err)))
        return st;
    uint32_t stall_us = 0;
    if ((st = memra_options_u32(opts, "stall_us", 0, 0, 1000000, &stall_us, err)))
        return st;
    if (memra_options_get(opts, "stall_us") && plan->n_stages < 2)
        return memra_fail(err, MEMRA_E_INVALID,
                          "cuda: stall_us=%.20s has no effect: this arm has one stage (it delays the stages after the "
                          "first); drop it, or give stages=N",
                          memra_options_get(opts, "stall_us"));
    if ((st = mc_device_count(host, opts, &n_dev, err)))
        return st;
    if (plan->n_stages == 0 || plan->n_stages > MEMRA_MAX_STAGES)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: plan has %u stages", plan->n_stages);
    for (uint32_t s = 0; s < plan->n_stages; s++) {
        const memra_stage_plan *sp = &plan->stages[s];
        if (sp->device < 0 || (uint32_t)sp->device >= n_dev)
            return memra_fail(err, MEMRA_E_INVALID, "cuda: stage %u is placed on device %d, but there are %u devices",
                              s, sp->device, n_dev);
        if (sp->layer_end <= sp->layer_begin || sp->layer_end > m->n_layer)
            return memra_fail(err, MEMRA_E_INVALID, "cuda: stage %u has layers [%u, %u) of %u", s, sp->layer_begin,
                              sp->layer_end, m->n_layer);
    }
    if (m->head_dim % 2 || m->n_head % m->n_head_kv || m->head_dim > 1024)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: head_dim %u / heads %u / kv heads %u not supported",
                          m->head_dim, m->n_head, m->n_head_kv);
    if (cfg.kv != MC_KV_F32 && m->head_dim_v % 2) /* a cache row of 2-byte values: whole 32-bit words (the digest) */
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cuda: kv=%s stores 2-byte values and needs an even value head size; this model's is %u "
                          "(use kv=f32)",
                          mc_config_choice_name(&cfg, "kv"), m->head_dim_v);
    memra_backend *b = (memra_backend *)calloc(1, sizeof *b);
    if (!b)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
    b->host = host;
    b->m = m;
    b->plan = *plan;
    b->cfg = cfg;
    b->stall_us = stall_us;
    b->ep = ep;
    pthread_mutex_init(&b->lock, NULL);
    b->prefill = prefill;
    if ((st = mc_open_tp(b, opts, n_dev, err)))
        goto fail;
    /* Peer copies: between the devices of consecutive stages (the hidden hand-off) and within a
     * stage (the embedding and hand-off reach every rank). */
    for (uint32_t s = 0; s < plan->n_stages; s++) {
        const memra_stage_plan *sp = &plan->stages[s];
        for (uint32_t r = 0; r < (sp->n_ranks ? sp->n_ranks : 1); r++) {
            const int to = mc_rank_device(sp, r);
            if ((st = mc_enable_peer(to, s > 0 ? plan->stages[s - 1].device : sp->device, err)))
                goto fail;
        }
    }
    if ((st = memra_op_set_open(host, "cuda", opts, &b->ops, err))) {
        memra_error_prefix(err, "cuda");
        goto fail;
    }
    b->op_rmsnorm = memra_op_set_find(&b->ops, MEMRA_OP_RMSNORM, 0);
    for (uint32_t t = 0; t < 64; t++)
        b->op_gemv[t] = memra_op_set_find(&b->ops, MEMRA_OP_GEMV, t);
    b->any_op = b->ops.n > 0 || cfg.norm == MC_NORM_UNFUSED; /* op_x and op_y are carved */
    if (m->n_expert > 0 && b->any_op) {
        st = memra_fail(err, MEMRA_E_UNSUPPORTED,
                        "cuda: %s: op plugins and norm=unfused do not cover the experts' GEMVs of a mixture of "
                        "experts; run this model with the built-in kernels",
                        b->ops.n > 0 ? "op plugins" : "norm=unfused");
        goto fail;
    }
    if ((st = mc_weights_acquire(m, plan, ep, &b->w, err)))
        goto fail;
    *out = b;
    return MEMRA_OK;
fail:
    memra_op_set_close(&b->ops);
    free(b->retired);
    pthread_mutex_destroy(&b->lock);
    free(b);
    return st;
}

void mc_close(memra_backend *b) {
    if (!b)
        return;
    mc_weights_release(b->w);
    memra_op_set_close(&b->ops);
    free(b->retired);
    free(b->cells);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

static void mc_state_destroy(memra_state *s) {
    for (uint32_t i = 0; i < s->n_stages; i++)
        for (uint32_t r = 0; r < mc_ranks(s, i); r++) {
            mc_stage_state *ss = &s->st[i][r];
            cudaSetDevice(ss->device);
            if (ss->stream)
                cudaStreamSynchronize(ss->stream);
            cudaEvent_t evs[8] = {ss->done,       ss->consumed, ss->ready,  ss->fin,
                                  ss->sampled_ev, ss->head_ev,  ss->pub_ev, ss->lastop};
            for (int k = 0; k < 8; k++)
                if (evs[k])
                    cudaEventDestroy(evs[k]);
            if (ss->stream)
                cudaStreamDestroy(ss->stream);
            if (ss->arena)
                cudaFree(ss->arena);
        }
    for (uint32_t k = 0; k < MC_MAX_INFLIGHT; k++) {
        if (s->slots[k].ev)
            cudaEventDestroy(s->slots[k].ev);
        if (s->slots[k].ev_first)
            cudaEventDestroy(s->slots[k].ev_first);
    }
    if (s->pinned)
        cudaFreeHost(s->pinned);
    mc_chunk_free(s);
    if (s->rings)
        cudaFreeHost(s->rings);
    free(s);
}

/* Carves a rank's buffers (a sizing pass with base NULL counts bytes). */
static void mc_stage_carve(const memra_model *m, uint32_t nl, bool first, bool last, uint32_t rank, bool tp,
                           bool checked, bool ops, uint32_t capacity, uint32_t kv, mc_bump *bp, mc_stage_state *ss,
                           uint64_t *cache_bytes) {
    const uint32_t hd = m->head_dim, hdv = m->head_dim_v;
    const uint64_t qkv = (uint64_t)ss->n_head * hd + (uint64_t)ss->n_kv * (hd + hdv);
    ss->x = (float *)mc_take(bp, (uint64_t)m->n_embd * 4);
    ss->qkv = (float *)mc_take(bp, qkv * 4);
    ss->att_partial = (float *)mc_take(bp, mc_att_partial_floats(ss->n_head, hdv, capacity) * 4);
    ss->att_ticket = (uint32_t *)mc_take(bp, (uint64_t)ss->n_kv * 4);
    ss->att_out = (float *)mc_take(bp, (uint64_t)ss->n_head * hdv * 4);
    const uint64_t ffw = ss->n_ff > m->n_ff_shexp ? ss->n_ff : m->n_ff_shexp; /* the shared expert's too */
    ss->gu = (float *)mc_take(bp, ffw * 4);
    if (m->arch == MEMRA_ARCH_GEMMA3 || mc_residual_scaled(m)) /* the sum before a post norm or a scale */
        ss->po = (float *)mc_take(bp, (uint64_t)m->n_embd * 4);
    if (m->arch == MEMRA_ARCH_GEMMA3) /* postnorm=prologue: the residual's other buffer */
        ss->x2 = (float *)mc_take(bp, (uint64_t)m->n_embd * 4);
    ss->gu_pair = (float *)mc_take(bp, 2ull * ffw * 4);
    if (m->n_expert > 0) {
        const uint64_t k = m->n_expert_used;
        ss->moe_logits = (float *)mc_take(bp, ((uint64_t)m->n_expert + 1) * 4);
        ss->moe_w = (float *)mc_take(bp, (k + 1) * 4);
        ss->moe_sel = (int32_t *)mc_take(bp, k * 4);
        ss->moe_act = (float *)mc_take(bp, k * m->n_ff * 4);
        ss->moe_slots = (float *)mc_take(bp, (k + 1) * m->n_embd * 4);
    }
    if (ops) { /* op plugins: a normed input, and any GEMV's rows before their store */
        uint64_t rows = qkv > 2ull * ss->n_ff ? qkv : 2ull * ss->n_ff;
        rows = rows > m->n_embd ? rows : m->n_embd;
        rows = last && rows < m->n_vocab ? m->n_vocab : rows;
        ss->op_x = (float *)mc_take(bp, (uint64_t)m->n_embd * 4);
        ss->op_y = (float *)mc_take(bp, rows * 4);
        ss->op_pos = (int32_t *)mc_take(bp, 16);
    }
    ss->pos = (int32_t *)mc_take(bp, 16);
    uint64_t chunks = (capacity + MC_DIGEST_ROWS - 1) / MC_DIGEST_ROWS;
    ss->hashes = (unsigned long long *)mc_take(bp, 2ull * nl * ss->n_kv * chunks * 8);
    if (tp) {
        ss->status = (int32_t *)mc_take(bp, 2ull * nl * 4);
        ss->peer_last = (int32_t *)mc_take(bp, MEMRA_MAX_RANKS * 4);
    }
    if (checked) {
        ss->verdict = (int32_t *)mc_take(bp, 16);
        ss->vin = (int32_t *)mc_take(bp, 16);
        ss->poison = (int32_t *)mc_take(bp, 16);
    }
    ss->dpos = (int32_t *)mc_take(bp, 16);
    if (m->n_expert > 0) /* the fused router's ticket: zeroed with the arena, left zero by every launch */
        ss->moe_ticket = (uint32_t *)mc_take(bp, 16);
    if (m->arch == MEMRA_ARCH_GEMMA3) /* the fused post norms' tickets (likewise) */
        ss->pn_ticket = (uint32_t *)mc_take(bp, 16);
    uint64_t before = bp->used;
    ss->k_cache = mc_take(bp, (uint64_t)nl * ss->n_kv * capacity * mc_kv_row_bytes(kv, hd)); /* the arm's kv type */
    ss->v_cache = mc_take(bp, (uint64_t)nl * ss->n_kv * capacity * mc_kv_row_bytes(kv, hdv));
    *cache_bytes += bp->used - before;
    if (first && rank == 0) {
        ss->in_token = (int32_t *)mc_take(bp, 16);
        ss->xe = (float *)mc_take(bp, (uint64_t)m->n_embd * 4);
        if (tp)
            ss->xin = (float *)mc_take(bp, (uint64_t)m->n_embd * 4);
    }
    if (last && rank > 0 && tp)
        ss->lg = (float *)mc_take(bp, (uint64_t)(ss->v1 - ss->v0) * 4);
    if (last && rank == 0) {
        ss->logits = (float *)mc_take(bp, (uint64_t)m->n_vocab * 4);
        if (checked) {
            ss->lg = (float *)mc_take(bp, (uint64_t)m->n_vocab * 4);
            ss->xc = (float *)mc_take(bp, (uint64_t)m->n_embd * 4);
        }
        ss->sampled = (int32_t *)mc_take(bp, 16);
        ss->result = (mc_sample_result *)mc_take(bp, sizeof(mc_sample_result));
        void *sc = mc_take(bp, mc_sampler_scratch_bytes(m->n_vocab));
        if (bp->base)
            mc_sampler_scratch_init(&ss->sampler, sc, m->n_vocab);
    }
}

/* One rank's buffers, stream and events. */
static memra_status mc_rank_new(memra_backend *b, memra_state *s, uint32_t i, uint32_t r, memra_error *err) {
    const memra_model *m = b->m;
    const memra_stage_plan *sp = &b->plan.stages[i];
    mc_stage_state *ss = &s->st[i][r];
    const bool tp = sp->n_ranks > 1;
    ss->device = mc_rank_device(sp, r);
    ss->n_head = tp ? sp->ranks[r].head_end - sp->ranks[r].head_begin : m->n_head;
    ss->n_kv = tp ? sp->ranks[r].kv_head_end - sp->ranks[r].kv_head_begin : m->n_head_kv;
    ss->n_ff = tp ? sp->ranks[r].ff_end - sp->ranks[r].ff_begin : m->n_ff;
    mc_rank_vocab(m, sp, r, &ss->v0, &ss->v1); /* whole on rank 0 under ep alone */
    const uint32_t nl = sp->layer_end - sp->layer_begin;
    const bool first = i == 0, last = i == s->n_stages - 1;
    mc_bump size = {NULL, 0, 0};
    uint64_t cache = 0;
    mc_stage_carve(m, nl, first, last, r, tp, b->tp, b->any_op, s->capacity, b->cfg.kv, &size, ss, &cache);
    MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
    size_t free_b = 0, total_b = 0;
    MC_RET(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    if (size.used > free_b) {
        char label[300];
        return memra_fail(err, MEMRA_E_NOMEM,
                          "cuda: a state of %u positions needs %.1f MiB on %s for stage %u rank %u (KV cache %.1f "
                          "MiB), but only %.1f MiB are free",
                          s->limit, size.used / 1048576.0, mc_device_label(ss->device, label, sizeof label), i, r,
                          cache / 1048576.0, free_b / 1048576.0);
    }
    MC_RET(cudaMalloc(&ss->arena, size.used), "cudaMalloc of a state's buffers");
    {
        mc_bump real = {(char *)ss->arena, 0, size.used};
        cache = 0;
        mc_stage_carve(m, nl, first, last, r, tp, b->tp, b->any_op, s->capacity, b->cfg.kv, &real, ss, &cache);
    }
    s->cache_bytes += cache;
    s->scratch_bytes += size.used - cache;
    if (ss->n_head > 0 && /* (an expert rank of ep alone runs no attention) */
        mc_attention_path(&b->cfg, ss->n_head, ss->n_kv, m->head_dim, m->head_dim_v) != MC_ATT_PATH_UNFUSED)
        MC_RET(mc_attention_fused_prepare(&b->cfg, ss->n_head, ss->n_kv, m->head_dim, m->head_dim_v),
               "setting the fused attention kernel's shared-memory limit");
    MC_RET(mc_gemv_prepare(), "readying the GEMV kernels (multiprocessor count, shared-memory limit)");
    if (b->cfg.trigger != MC_TRIGGER_DEFAULT)
        MC_RET(mc_trigger_prepare(), "readying the trigger mask copies");
    MC_RET(cudaStreamCreateWithFlags(&ss->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    /* Zero on the state's own stream and wait: a plain cudaMemset goes to the legacy default
     * stream, which a cudaStreamNonBlocking stream does not wait for, so the first step's
     * input-token copy (or its kernels) could land before the zeroing and be overwritten. */
    MC_RET(cudaMemsetAsync(ss->arena, 0, size.used, ss->stream), "cudaMemsetAsync of a state's buffers");
    MC_RET(cudaStreamSynchronize(ss->stream), "cudaStreamSynchronize (state zeroing)");
    MC_RET(cudaEventCreateWithFlags(&ss->done, cudaEventDisableTiming), "cudaEventCreate");
    MC_RET(cudaEventCreateWithFlags(&ss->consumed, cudaEventDisableTiming), "cudaEventCreate");
    MC_RET(cudaEventCreateWithFlags(&ss->ready, cudaEventDisableTiming), "cudaEventCreate");
    MC_RET(cudaEventCreateWithFlags(&ss->fin, cudaEventDisableTiming), "cudaEventCreate");
    MC_RET(cudaEventCreateWithFlags(&ss->head_ev, cudaEventDisableTiming), "cudaEventCreate");
    MC_RET(cudaEventCreateWithFlags(&ss->pub_ev, cudaEventDisableTiming), "cudaEventCreate");
    MC_RET(cudaEventCreateWithFlags(&ss->lastop, cudaEventDisableTiming), "cudaEventCreate");
    if (last && r == 0)
        MC_RET(cudaEventCreateWithFlags(&ss->sampled_ev, cudaEventDisableTiming), "cudaEventCreate");
    return MEMRA_OK;
}

/* Adds a state's communicators' epochs to the backend's retired counts and destroys them. */
static void mc_state_retire(memra_backend *b, memra_state *s) {
    const uint32_t nb = 2 * b->m->n_layer;
    uint64_t *tmp = (uint64_t *)calloc(nb, sizeof *tmp);
    for (uint32_t i = 0; i < s->n_stages; i++) {
        if (!s->comm[i])
            continue;
        for (uint32_t r = 0; r < mc_ranks(s, i) && tmp && b->coll->epochs; r++) {
            memra_error e = {};
            cudaSetDevice(s->st[i][r].device);
            cudaStreamSynchronize(s->st[i][r].stream);
            if (b->coll->epochs(s->comm[i], r, tmp, nb, &e) == MEMRA_OK)
                for (uint32_t k = 0; k < nb; k++)
                    b->retired[((size_t)i * MEMRA_MAX_RANKS + r) * nb + k] += tmp[k];
        }
        b->coll->destroy(s->comm[i]);
        s->comm[i] = NULL;
    }
    free(tmp);
}

memra_status mc_state_new(memra_backend *b, uint32_t capacity, uint32_t max_inflight, memra_state **out,
                          memra_error *err) {
    const memra_model *m = b->m;
    memra_status st = MEMRA_OK;
    if (capacity == 0 || capacity > 0x7fffffffu)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: state capacity %u out of range", capacity);
    if (max_inflight == 0 || max_inflight > MC_MAX_INFLIGHT)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: max_inflight %u: expected 1 to %u", max_inflight,
                          MC_MAX_INFLIGHT);
    memra_state *s = (memra_state *)calloc(1, sizeof *s);
    if (!s)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
    s->limit = capacity;
    s->capacity = b->cfg.kv == MC_KV_Q8 ? (capacity + 3u) & ~3u : capacity; /* (capacity <= 2^31 - 1) */
    s->max_inflight = max_inflight;
    s->n_stages = b->plan.n_stages;
    s->stats.struct_size = sizeof s->stats;
    for (uint32_t i = 0; i < s->n_stages; i++)
        s->n_ranks[i] = b->plan.stages[i].n_ranks > 1 ? b->plan.stages[i].n_ranks : 1;
    for (uint32_t i = 0; i < s->n_stages; i++)
        for (uint32_t r = 0; r < mc_ranks(s, i); r++)
            if ((st = mc_rank_new(b, s, i, r, err)))
                goto fail;
    if (b->tp && (st = mc_state_tp(b, s, err)))
        goto fail;
    {
        const size_t per = ((size_t)m->n_vocab * 4 + sizeof(mc_sample_result) + 16 + 255) & ~(size_t)255;
        MC_TRY(cudaSetDevice(s->st[s->n_stages - 1][0].device), "cudaSetDevice");
        MC_TRY(cudaMallocHost(&s->pinned, per * max_inflight + sizeof(mc_sample_result) * max_inflight),
               "cudaMallocHost of readback buffers");
        s->res_ring = (mc_sample_result *)((char *)s->pinned + per * max_inflight); /* 256-aligned: per is */
        for (uint32_t k = 0; k < max_inflight; k++) {
            char *p = (char *)s->pinned + per * k;
            s->slots[k].host_logits = (float *)p;
            s->slots[k].host_res = (mc_sample_result *)(p + (size_t)m->n_vocab * 4);
            s->slots[k].host_token = (int32_t *)(p + (size_t)m->n_vocab * 4 + sizeof(mc_sample_result));
            MC_TRY(cudaEventCreateWithFlags(&s->slots[k].ev, cudaEventDisableTiming), "cudaEventCreate");
        }
        /* An event can only be recorded on a stream of the device it was created on. */
        MC_TRY(cudaSetDevice(s->st[0][0].device), "cudaSetDevice");
        for (uint32_t k = 0; k < max_inflight; k++)
            MC_TRY(cudaEventCreateWithFlags(&s->slots[k].ev_first, cudaEventDisableTiming), "cudaEventCreate");
    }
    pthread_mutex_lock(&b->lock);
    b->cache_bytes += s->cache_bytes;
    b->scratch_bytes += s->scratch_bytes;
    s->next = b->states;
    b->states = s;
    pthread_mutex_unlock(&b->lock);
    *out = s;
    return MEMRA_OK;
fail:
    if (b->tp)
        mc_state_retire(b, s);
    mc_state_destroy(s);
    return st;
}

void mc_state_free(memra_backend *b, memra_state *s) {
    if (!s)
        return;
    pthread_mutex_lock(&b->lock);
    for (memra_state **pp = &b->states; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    b->cache_bytes -= s->cache_bytes;
    b->scratch_bytes -= s->scratch_bytes;
    if (b->tp)
        mc_state_retire(b, s);
    pthread_mutex_unlock(&b->lock);
    mc_state_destroy(s);
}

void mc_quarantine(memra_backend *b, memra_state *s, const char *why) {
    if (!s->quarantined)
        snprintf(s->why, sizeof s->why, "%s", why);
    s->quarantined = true;
}

memra_status mc_quarantine_fail(memra_state *s, memra_error *err) {
    if (!s->quarantined) {
        s->quarantined = true;
        snprintf(s->why, sizeof s->why, "%s", err ? err->msg : "a device call failed");
    }
    return err ? err->status : MEMRA_E_DEVICE;
}

/* ---- digests, restore ------------------------------------------------------------------------ */

memra_status mc_sync_all(memra_state *s, memra_error *err) {
    memra_status st = MEMRA_OK;
    for (uint32_t i = 0; i < s->n_stages; i++)
        for (uint32_t r = 0; r < mc_ranks(s, i); r++) {
            MC_TRY(cudaSetDevice(s->st[i][r].device), "cudaSetDevice");
            MC_TRY(cudaStreamSynchronize(s->st[i][r].stream), "cudaStreamSynchronize");
        }
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

memra_status mc_digest(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32], memra_error *err) {
    memra_status st = MEMRA_OK;
    const memra_model *m = b->m;
    /* A quarantined state may still be observed (what a failed step left committed: nothing). */
    if (s->inflight)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: digest with %u steps in flight", s->inflight);
    if ((st = mc_sync_all(s, err)))
        return st;
    mc_stage_state *sl = &s->st[s->n_stages - 1][0];
    if (kind == MEMRA_DIGEST_LOGITS || kind == MEMRA_DIGEST_HIDDEN) {
        size_t n = kind == MEMRA_DIGEST_LOGITS ? m->n_vocab : m->n_embd;
        float *h = (float *)malloc(n * 4);
        if (!h)
            return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
        MC_TRY(cudaSetDevice(sl->device), "cudaSetDevice");
        const float *src = kind == MEMRA_DIGEST_LOGITS ? sl->logits : (sl->xc ? sl->xc : sl->x);
        cudaError_t e = cudaMemcpy(h, src, n * 4, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess)
            b->host->sha256(h, n * 4, out);
        free(h);
        MC_TRY(e, "cudaMemcpy (digest readback)");
        return MEMRA_OK;
    }
    if (kind != MEMRA_DIGEST_CACHE)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: unknown digest kind %d", (int)kind);
    {
        /* Per rank: hashes of K and V chunks on the device; the host hashes them layer by layer
         * (K of every rank's kv heads in rank order, then V), so any split of the layers or of the
         * kv heads gives the same digest. The hashes are of the stored bytes: a cache of another
         * kv type (f32, f16, bf16, q8) has another digest, even where its values agree. */
        const uint64_t chunks = (s->capacity + MC_DIGEST_ROWS - 1) / MC_DIGEST_ROWS;
        memra_sha256_ctx *ctx = b->host->sha256_new();
        if (!ctx)
            return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
        uint32_t pos = s->position;
        b->host->sha256_update(ctx, &pos, 4);
        unsigned long long *h[MEMRA_MAX_RANKS] = {NULL};
        for (uint32_t i = 0; i < s->n_stages && !st; i++) {
            const mc_stage_weights *sw = &b->w->stages[i][0];
            const uint32_t nl = sw->layer_end - sw->layer_begin, R = mc_ranks(s, i);
            for (uint32_t r = 0; r < R && !st; r++) {
                mc_stage_state *ss = &s->st[i][r];
                if (ss->n_kv == 0) /* an expert rank of ep alone: no cache */
                    continue;
                const uint64_t per_layer = (uint64_t)ss->n_kv * chunks, n = 2 * nl * per_layer;
                free(h[r]);
                h[r] = (unsigned long long *)malloc(n * 8);
                if (!h[r]) {
                    st = memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
                    break;
                }
                /* rows [0, the host's position): the committed steps (a stage whose part of a failed
                 * step committed before a later stage refused covers one row more on the device) */
                const int32_t hp = (int32_t)s->position;
                cudaError_t e = cudaSetDevice(ss->device);
                if (e == cudaSuccess)
                    e = cudaMemcpyAsync(ss->dpos, &hp, 4, cudaMemcpyHostToDevice, ss->stream);
                if (e == cudaSuccess)
                    e = mc_digest_planes(ss->k_cache, nl * ss->n_kv, s->capacity,
                                         mc_kv_row_bytes(b->cfg.kv, m->head_dim) / 4, ss->dpos, ss->hashes, ss->stream);
                if (e == cudaSuccess)
                    e = mc_digest_planes(ss->v_cache, nl * ss->n_kv, s->capacity,
                                         mc_kv_row_bytes(b->cfg.kv, m->head_dim_v) / 4, ss->dpos,
                                         ss->hashes + nl * per_layer, ss->stream);
                if (e == cudaSuccess)
                    e = cudaMemcpyAsync(h[r], ss->hashes, n * 8, cudaMemcpyDeviceToHost, ss->stream);
                if (e == cudaSuccess)
                    e = cudaStreamSynchronize(ss->stream);
                if (e != cudaSuccess)
                    st = mc_cuda_fail(err, e, "the cache digest");
            }
            /* per plane only the chunks that hold committed rows (the rest hash as 0), so the
             * digest is the state's whatever its capacity (memra bench's pp state is made with
             * room for the prompt alone, its prefix state with room for the generated steps too) */
            const uint64_t used = ((uint64_t)s->position + MC_DIGEST_ROWS - 1) / MC_DIGEST_ROWS;
            for (uint32_t l = 0; l < nl && !st; l++)
                for (uint32_t kv = 0; kv < 2; kv++)
                    for (uint32_t r = 0; r < R; r++) {
                        const uint32_t nk = s->st[i][r].n_kv;
                        if (nk == 0)
                            continue;
                        const unsigned long long *base = h[r] + ((uint64_t)kv * nl + l) * nk * chunks;
                        for (uint32_t k = 0; k < nk; k++)
                            b->host->sha256_update(ctx, base + (uint64_t)k * chunks, used * 8);
                    }
        }
        for (uint32_t r = 0; r < MEMRA_MAX_RANKS; r++)
            free(h[r]);
        b->host->sha256_final(ctx, out);
        if (st)
            return mc_quarantine_fail(s, err);
    }
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}

memra_status mc_state_restore(memra_backend *b, memra_state *dst, const memra_state *src, memra_error *err) {
    memra_status st = MEMRA_OK;
    const memra_model *m = b->m;
    if (src->quarantined || dst->quarantined)
        return memra_fail(err, MEMRA_E_QUARANTINED, "cuda: restore from or into a state that failed earlier (%s)",
                          src->quarantined ? src->why : dst->why);
    if (src->inflight || dst->inflight)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: restore with steps in flight");
    if (src->n_stages != dst->n_stages)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: restore between states of different plans");
    if (dst->limit < src->position)
        return memra_fail(err, MEMRA_E_RANGE, "cuda: restore of %u positions into a state of capacity %u",
                          src->position, dst->limit);
    if ((st = mc_sync_all((memra_state *)src, err)))
        return st;
    if ((st = mc_sync_all(dst, err)))
        return st;
    /* both states are the backend's: one kv type, so one row size */
    const size_t krow = mc_kv_row_bytes(b->cfg.kv, m->head_dim), vrow = mc_kv_row_bytes(b->cfg.kv, m->head_dim_v);
    for (uint32_t i = 0; i < dst->n_stages; i++) {
        const mc_stage_weights *sw = &b->w->stages[i][0];
        const uint32_t nl = sw->layer_end - sw->layer_begin;
        for (uint32_t r = 0; r < mc_ranks(dst, i); r++) {
            const mc_stage_state *a = &src->st[i][r];
            mc_stage_state *d = &dst->st[i][r];
            const uint32_t planes = nl * d->n_kv;
            cudaStream_t q = d->stream;
            MC_TRY(cudaSetDevice(d->device), "cudaSetDevice");
            MC_TRY(cudaMemcpyAsync(d->pos, a->pos, 4, cudaMemcpyDeviceToDevice, q), "restore: position");
            MC_TRY(cudaMemcpyAsync(d->x, a->x, (size_t)m->n_embd * 4, cudaMemcpyDeviceToDevice, q), "restore: hidden");
            if (d->poison)
                MC_TRY(cudaMemsetAsync(d->poison, 0, 4, q), "restore: clearing the poison");
            if (src->position > 0 && planes > 0) {
                MC_TRY(cudaMemcpy2DAsync(d->k_cache, (size_t)dst->capacity * krow, a->k_cache,
                                         (size_t)src->capacity * krow, (size_t)src->position * krow, planes,
                                         cudaMemcpyDeviceToDevice, q),
                       "restore: K cache");
                MC_TRY(cudaMemcpy2DAsync(d->v_cache, (size_t)dst->capacity * vrow, a->v_cache,
                                         (size_t)src->capacity * vrow, (size_t)src->position * vrow, planes,
                                         cudaMemcpyDeviceToDevice, q),
                       "restore: V cache");
            }
            if (i == 0 && r == 0) {
                MC_TRY(cudaMemcpyAsync(d->in_token, a->in_token, 4, cudaMemcpyDeviceToDevice, q), "restore: token");
                MC_TRY(cudaMemcpyAsync(d->xe, a->xe, (size_t)m->n_embd * 4, cudaMemcpyDeviceToDevice, q),
                       "restore: the next input (commit=handoff)");
            }
            if (i == dst->n_stages - 1 && r == 0) {
                MC_TRY(cudaMemcpyAsync(d->logits, a->logits, (size_t)m->n_vocab * 4, cudaMemcpyDeviceToDevice, q),
                       "restore: logits");
                if (d->xc)
                    MC_TRY(cudaMemcpyAsync(d->xc, a->xc, (size_t)m->n_embd * 4, cudaMemcpyDeviceToDevice, q),
                           "restore: committed hidden");
                MC_TRY(cudaMemcpyAsync(d->sampled, a->sampled, 4, cudaMemcpyDeviceToDevice, q),
                       "restore: sampled token");
                MC_TRY(cudaMemcpyAsync(d->result, a->result, sizeof(mc_sample_result), cudaMemcpyDeviceToDevice, q),
                       "restore: sample result");
            }
            MC_TRY(cudaStreamSynchronize(q), "restore (cudaStreamSynchronize)");
        }
    }
    dst->position = src->position;
    dst->has_device_token = src->has_device_token;
    dst->xe_ready = src->xe_ready;
    dst->sampled_ev_live = false; /* the sampled token was copied on dst's stream and synchronised */
    return MEMRA_OK;
fail:
    mc_quarantine_fail(dst, err);
    return st;
}

uint32_t mc_state_position(memra_backend *b, const memra_state *s) { return s->position; }

memra_status mc_state_stats(memra_backend *b, const memra_state *s, memra_state_stats *out, memra_error *err) {
    uint32_t size = out->struct_size && out->struct_size < sizeof *out ? out->struct_size : sizeof *out;
    memcpy(out, &s->stats, size);
    out->struct_size = size;
    return MEMRA_OK;
}

memra_status mc_memory(memra_backend *b, memra_backend_memory *out, memra_error *err) {
    memra_backend_memory mem;
    memset(&mem, 0, sizeof mem);
    mem.struct_size = sizeof mem;
    mem.weight_bytes = b->w->bytes;
    mem.cache_bytes = b->cache_bytes;
    mem.scratch_bytes = b->scratch_bytes;
    bool seen[64] = {false};
    for (uint32_t k = 0; k < b->plan.n_stages * MEMRA_MAX_RANKS; k++) {
        const memra_stage_plan *sp = &b->plan.stages[k / MEMRA_MAX_RANKS];
        if (k % MEMRA_MAX_RANKS >= (sp->n_ranks ? sp->n_ranks : 1))
            continue;
        int32_t d = mc_rank_device(sp, k % MEMRA_MAX_RANKS);
        if (d < 0 || d >= 64 || seen[d])
            continue;
        seen[d] = true;
        size_t f = 0, t = 0;
        cudaError_t e = cudaSetDevice(d);
        if (e == cudaSuccess)
            e = cudaMemGetInfo(&f, &t);
        if (e != cudaSuccess)
            return mc_cuda_fail(err, e, "cudaMemGetInfo");
        mem.device_in_use += t - f;
    }
    uint32_t size = out->struct_size && out->struct_size < sizeof mem ? out->struct_size : sizeof mem;
    memcpy(out, &mem, size);
    out->struct_size = size;
    return MEMRA_OK;
}
