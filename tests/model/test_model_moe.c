/* test_model_moe.c: memra_model_describe on mixture-of-experts files (issue 29, item 1): what it
 * binds from the synthetic moe-tiny (qwen3moe) and qwen2moe-tiny, and its refusals of untrusted
 * expert metadata and tensors. Each file is the synthetic one rewritten with one change: the
 * architecture renamed (llama with expert_count, i.e. Mixtral; granitemoe), a key set, altered or
 * left out, a tensor left out, reshaped or added. */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "memra/gguf.h"
#include "memra/model.h"
#include "memra/synth.h"

typedef struct moe_change {
    const char *arch;     /* rename the architecture (keys "<old>." become "<arch>.") */
    const char *skip_key; /* a key (after renaming) left out */
    const char *u32_key;  /* a u32 key set (added, or replacing the file's) */
    uint32_t u32_value;
    const char *f32_keys[4]; /* f32 keys added, each to f32_value */
    float f32_value;
    const char *skip_tensor;  /* tensors whose name contains this are left out */
    const char *skip_tensor2; /* and this */
    const char *tensor;       /* a tensor reshaped: */
    uint64_t ne[3];
    uint32_t n_dims;
    const char *extra_tensor; /* a stray tensor, a copy of blk.0.ffn_norm.weight */
} moe_change;

typedef struct moe_file {
    void *src, *data;
    memra_gguf *g;
    memra_model *m;
} moe_file;

/* Builds preset, applies c, describes; returns the status (message in err). */
static memra_status moe_describe(const char *preset, const moe_change *c, moe_file *f, memra_error *err) {
    memset(f, 0, sizeof *f);
    memra_synth_spec spec = {.preset = preset, .type = MEMRA_TYPE_F32, .seed = 1};
    size_t size = 0;
    cr_assert_eq(memra_synth_build_memory(&spec, &f->src, &size, err), MEMRA_OK, "%s", err->msg);
    memra_gguf *src;
    cr_assert_eq(memra_gguf_open_memory(f->src, size, "src.gguf", &src, err), MEMRA_OK, "%s", err->msg);
    memra_gguf_writer *w;
    cr_assert_eq(memra_gguf_writer_new(3, 0, &w, err), MEMRA_OK);
    memra_gguf_str old_arch;
    cr_assert_eq(memra_gguf_get_str(src, "general.architecture", &old_arch, err), MEMRA_OK);
    char old[32];
    snprintf(old, sizeof old, "%.*s.", (int)old_arch.len, old_arch.ptr);
    for (uint64_t i = 0; i < memra_gguf_kv_count(src); i++) {
        const memra_gguf_kv *kv = memra_gguf_kv_at(src, i);
        char key[160];
        if (c->arch && strncmp(kv->key, old, strlen(old)) == 0)
            snprintf(key, sizeof key, "%s.%s", c->arch, kv->key + strlen(old));
        else
            snprintf(key, sizeof key, "%s", kv->key);
        if ((c->skip_key && strcmp(key, c->skip_key) == 0) || (c->u32_key && strcmp(key, c->u32_key) == 0))
            continue;
        if (c->arch && strcmp(key, "general.architecture") == 0)
            cr_assert_eq(memra_gguf_writer_set_str(w, key, c->arch, err), MEMRA_OK);
        else
            cr_assert_eq(memra_gguf_writer_set(w, key, &kv->value, err), MEMRA_OK, "%s", err->msg);
    }
    if (c->u32_key)
        cr_assert_eq(memra_gguf_writer_set_u32(w, c->u32_key, c->u32_value, err), MEMRA_OK);
    for (int k = 0; k < 4 && c->f32_keys[k]; k++)
        cr_assert_eq(memra_gguf_writer_set_f32(w, c->f32_keys[k], c->f32_value, err), MEMRA_OK);
    for (uint64_t i = 0; i < memra_gguf_tensor_count(src); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(src, i);
        if ((c->skip_tensor && strstr(t->name, c->skip_tensor)) ||
            (c->skip_tensor2 && strstr(t->name, c->skip_tensor2)))
            continue;
        if (c->tensor && strcmp(t->name, c->tensor) == 0) {
            /* reshaped over the same bytes (or fewer): the element count must not grow */
            cr_assert_eq(memra_gguf_writer_add_tensor(w, t->name, t->type, c->n_dims, c->ne, t->data, err), MEMRA_OK,
                         "%s", err->msg);
            continue;
        }
        cr_assert_eq(memra_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, err), MEMRA_OK);
    }
    if (c->extra_tensor) {
        const memra_gguf_tensor *t = memra_gguf_find_tensor(src, "blk.0.ffn_norm.weight");
        cr_assert_eq(memra_gguf_writer_add_tensor(w, c->extra_tensor, t->type, t->n_dims, t->ne, t->data, err),
                     MEMRA_OK);
    }
    size_t out_size = 0;
    cr_assert_eq(memra_gguf_writer_write_memory(w, &f->data, &out_size, err), MEMRA_OK, "%s", err->msg);
    memra_gguf_writer_free(w);
    memra_gguf_close(src);
    cr_assert_eq(memra_gguf_open_memory(f->data, out_size, "moe.gguf", &f->g, err), MEMRA_OK, "%s", err->msg);
    return memra_model_describe(f->g, &f->m, err);
}

static void moe_close(moe_file *f) {
    memra_model_free(f->m);
    memra_gguf_close(f->g);
    free(f->data);
    free(f->src);
}

/* Expects a refusal whose message holds `part`. */
static void expect_refused(const char *preset, const moe_change *c, memra_status want, const char *part) {
    moe_file f;
    memra_error err = {0};
    memra_status st = moe_describe(preset, c, &f, &err);
    cr_assert_eq(st, want, "status %s, expected %s: %s", memra_status_name(st), memra_status_name(want), err.msg);
    cr_assert(strstr(err.msg, part), "message '%s' does not hold '%s'", err.msg, part);
    cr_assert(strncmp(err.msg, "moe.gguf: ", 10) == 0, "the message names the file: %s", err.msg);
    moe_close(&f);
}

Test(model_moe, qwen3moe_binds_the_experts) {
    moe_file f;
    memra_error err = {0};
    moe_change none = {0};
    cr_assert_eq(moe_describe("moe-tiny", &none, &f, &err), MEMRA_OK, "%s", err.msg);
    const memra_model *m = f.m;
    cr_assert_eq(m->arch, MEMRA_ARCH_QWEN3MOE);
    cr_assert_eq(m->n_expert, 8);
    cr_assert_eq(m->n_expert_used, 2);
    cr_assert_eq(m->n_ff, 64, "n_ff is the expert width (expert_feed_forward_length), not feed_forward_length");
    cr_assert(m->expert_weights_norm, "qwen3moe renormalises (llama.cpp)");
    cr_assert_eq(m->n_ff_shexp, 0);
    cr_assert_not_null(m->moe);
    const memra_layer_moe *L = &m->moe[3];
    cr_assert_eq(L->gate_inp.rows, 8);
    cr_assert_eq(L->gate_inp.cols, 64);
    cr_assert_eq(L->gate_exps.rows, 8 * 64);
    cr_assert_eq(L->up_exps.cols, 64);
    cr_assert_eq(L->down_exps.rows, 8 * 64);
    cr_assert_eq(L->down_exps.cols, 64);
    cr_assert_null(m->layers[3].w_gate.data);
    cr_assert_null(L->gate_shexp.data);
    moe_close(&f);
}

Test(model_moe, qwen2moe_binds_the_shared_expert) {
    moe_file f;
    memra_error err = {0};
    moe_change none = {0};
    cr_assert_eq(moe_describe("qwen2moe-tiny", &none, &f, &err), MEMRA_OK, "%s", err.msg);
    const memra_model *m = f.m;
    cr_assert_eq(m->arch, MEMRA_ARCH_QWEN2MOE);
    cr_assert(!m->expert_weights_norm, "qwen2moe does not renormalise (llama.cpp)");
    cr_assert_eq(m->n_ff_shexp, 128);
    cr_assert_eq(m->moe[0].gate_shexp.rows, 128);
    cr_assert_eq(m->moe[0].down_shexp.cols, 128);
    cr_assert_eq(m->moe[0].gate_inp_shexp.cols, 64);
    cr_assert_not_null(m->layers[0].bq.data, "qwen2moe has q/k/v biases");
    moe_close(&f);
}

Test(model_moe, mixtral_is_llama_with_expert_count) {
    moe_file f;
    memra_error err = {0};
    moe_change c = {.arch = "llama", .skip_tensor = "attn_q_norm", .skip_tensor2 = "attn_k_norm"};
    cr_assert_eq(moe_describe("moe-tiny", &c, &f, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(f.m->arch, MEMRA_ARCH_LLAMA);
    cr_assert_eq(f.m->n_expert, 8);
    cr_assert(f.m->expert_weights_norm, "Mixtral renormalises (llama.cpp)");
    cr_assert_eq(f.m->rope_pairing, MEMRA_ROPE_NORMAL);
    moe_close(&f);
    /* a llama file with experts and q/k norms: the norms are not llama's */
    moe_change norms = {.arch = "llama"};
    expect_refused("moe-tiny", &norms, MEMRA_E_UNSUPPORTED, "attn_q_norm.weight' is not part of");
}

Test(model_moe, granitemoe_reads_its_four_scales) {
    moe_file f;
    memra_error err = {0};
    moe_change c = {.arch = "granitemoe",
                    .skip_tensor = "attn_q_norm",
                    .skip_tensor2 = "attn_k_norm",
                    .f32_keys = {"granitemoe.embedding_scale", "granitemoe.residual_scale",
                                 "granitemoe.attention.scale", "granitemoe.logit_scale"},
                    .f32_value = 0.25f};
    cr_assert_eq(moe_describe("moe-tiny", &c, &f, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(f.m->arch, MEMRA_ARCH_GRANITEMOE);
    cr_assert_eq(f.m->rope_pairing, MEMRA_ROPE_NORMAL);
    cr_assert(f.m->embd_scale == 0.25f && f.m->residual_scale == 0.25f && f.m->attn_scale == 0.25f &&
              f.m->logit_scale == 0.25f);
    cr_assert(f.m->expert_weights_norm);
    moe_close(&f);
    moe_change no_logit = {
        .arch = "granitemoe",
        .f32_keys = {"granitemoe.embedding_scale", "granitemoe.residual_scale", "granitemoe.attention.scale"},
        .f32_value = 0.25f};
    expect_refused("moe-tiny", &no_logit, MEMRA_E_FORMAT, "granitemoe.logit_scale");
    /* only the logit scale is required (llama.cpp's granite loader): without the other three the
     * embedding and the residual are not scaled and the attention scale is 1/sqrt(head_dim) */
    moe_change only_logit = {.arch = "granitemoe",
                             .skip_tensor = "attn_q_norm",
                             .skip_tensor2 = "attn_k_norm",
                             .f32_keys = {"granitemoe.logit_scale"},
                             .f32_value = 0.25f};
    cr_assert_eq(moe_describe("moe-tiny", &only_logit, &f, &err), MEMRA_OK, "%s", err.msg);
    cr_assert(f.m->embd_scale == 1.0f && f.m->residual_scale == 1.0f && f.m->logit_scale == 0.25f);
    cr_assert(f.m->attn_scale == 1.0f / sqrtf((float)f.m->head_dim), "attention scale %g", (double)f.m->attn_scale);
    moe_close(&f);
}

Test(model_moe, expert_counts_are_bounded) {
    moe_change used_above = {.u32_key = "qwen3moe.expert_used_count", .u32_value = 9};
    expect_refused("moe-tiny", &used_above, MEMRA_E_FORMAT, "expert_used_count 9");
    moe_change used_zero = {.u32_key = "qwen3moe.expert_used_count", .u32_value = 0};
    expect_refused("moe-tiny", &used_zero, MEMRA_E_FORMAT, "'qwen3moe.expert_used_count' is 0");
    moe_change huge = {.u32_key = "qwen3moe.expert_count", .u32_value = 4000000000u};
    expect_refused("moe-tiny", &huge, MEMRA_E_FORMAT, "expert_count 4000000000");
    moe_change missing = {.skip_key = "qwen3moe.expert_count"};
    expect_refused("moe-tiny", &missing, MEMRA_E_FORMAT, "missing key 'qwen3moe.expert_count'");
    moe_change no_used = {.skip_key = "qwen3moe.expert_used_count"};
    expect_refused("moe-tiny", &no_used, MEMRA_E_FORMAT, "qwen3moe.expert_used_count");
    moe_change sigmoid = {.u32_key = "qwen3moe.expert_gating_func", .u32_value = 2};
    expect_refused("moe-tiny", &sigmoid, MEMRA_E_UNSUPPORTED, "expert_gating_func is 2");
    /* 16 experts claimed, 8 stored: the router (bound first) says so */
    moe_change more = {.u32_key = "qwen3moe.expert_count", .u32_value = 16};
    expect_refused("moe-tiny", &more, MEMRA_E_FORMAT, "has 8 rows, expected 16 (expert_count)");
}

Test(model_moe, expert_tensors_are_shape_checked) {
    moe_change seven = {.tensor = "blk.1.ffn_up_exps.weight", .ne = {64, 64, 7}, .n_dims = 3};
    expect_refused("moe-tiny", &seven, MEMRA_E_FORMAT,
                   "tensor 'blk.1.ffn_up_exps.weight' has shape [64, 64, 7], expected [64, 64, 8]");
    moe_change flat = {.tensor = "blk.1.ffn_down_exps.weight", .ne = {64, 512, 1}, .n_dims = 2};
    expect_refused("moe-tiny", &flat, MEMRA_E_FORMAT, "tensor 'blk.1.ffn_down_exps.weight' has shape [64, 512]");
    moe_change no_router = {.skip_tensor = "blk.2.ffn_gate_inp.weight"};
    expect_refused("moe-tiny", &no_router, MEMRA_E_FORMAT, "missing tensor 'blk.2.ffn_gate_inp.weight'");
    moe_change no_shared = {.skip_tensor = "blk.0.ffn_gate_inp_shexp"};
    expect_refused("qwen2moe-tiny", &no_shared, MEMRA_E_FORMAT, "missing tensor 'blk.0.ffn_gate_inp_shexp.weight'");
    moe_change dense = {.extra_tensor = "blk.0.ffn_gate.weight"};
    expect_refused("moe-tiny", &dense, MEMRA_E_UNSUPPORTED, "tensor 'blk.0.ffn_gate.weight' is not part of");
    moe_change shared_in_qwen3 = {.extra_tensor = "blk.0.ffn_gate_inp_shexp.weight"};
    expect_refused("moe-tiny", &shared_in_qwen3, MEMRA_E_UNSUPPORTED, "ffn_gate_inp_shexp.weight' is not part of");
}

Test(model_moe, experts_only_in_moe_architectures) {
    /* qwen3 (dense) with expert_count: refused by name, not ignored */
    moe_change c = {.arch = "qwen3"};
    expect_refused("moe-tiny", &c, MEMRA_E_UNSUPPORTED, "'qwen3.expert_count' is set");
}

/* ABI 1 froze memra_layer's shape: a backend plugin built against it indexes m->layers with its
 * size, so a member appended there (as the experts once were) would shift every layer past the
 * first under it. Its 16 weights, in order; per-layer data added since lives beside it (moe). */
Test(model_moe, layer_shape_is_abi1s) {
    cr_assert_eq(sizeof(memra_layer), 16 * sizeof(memra_weight), "memra_layer grew: add a parallel array instead");
    cr_assert_eq(offsetof(memra_layer, post_ffn_norm), 15 * sizeof(memra_weight));
    cr_assert_eq(offsetof(memra_layer, w_down), 14 * sizeof(memra_weight));
}

Test(model_moe, dense_models_have_no_moe_array) {
    moe_file f;
    memra_error err = {0};
    moe_change none = {0};
    cr_assert_eq(moe_describe("tiny", &none, &f, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_null(f.m->moe);
    cr_assert_not_null(f.m->layers[0].w_gate.data);
    moe_close(&f);
}

/* expert_weights_scale: llama.cpp multiplies the chosen weights by it unless it is 0 or 1, which
 * memra does not: any other value is refused by name, 0 and 1 describe. */
Test(model_moe, expert_weights_scale_other_than_0_or_1_is_refused) {
    moe_change two = {.f32_keys = {"qwen3moe.expert_weights_scale"}, .f32_value = 2.5f};
    expect_refused("moe-tiny", &two, MEMRA_E_UNSUPPORTED,
                   "key 'qwen3moe.expert_weights_scale' is 2.5: memra does not scale the chosen experts' weights");
    for (int i = 0; i < 2; i++) {
        moe_change ok = {.f32_keys = {"qwen3moe.expert_weights_scale"}, .f32_value = (float)i};
        moe_file f;
        memra_error err = {0};
        cr_assert_eq(moe_describe("moe-tiny", &ok, &f, &err), MEMRA_OK, "%g: %s", (double)i, err.msg);
        moe_close(&f);
    }
}
