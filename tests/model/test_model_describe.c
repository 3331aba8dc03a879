/* test_model_describe.c: memra_model_describe on files built with one change at a time: what it
 * binds from a valid file, and the message of every refusal (a missing key or tensor, a wrong
 * shape, an unknown architecture, an unsupported rope scaling, a stray tensor), plus the type
 * check on use and the rope frequencies. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "model_builder.h"

/* Describes c, expecting status `want`; on failure the message must equal `msg` exactly (when
 * msg is given). Returns the model for further checks (NULL on failure). */
static memra_model *expect(const mb_change *c, memra_status want, const char *msg, void **data, memra_gguf **g) {
    memra_error err = {0};
    memra_model *m;
    memra_status st = mb_describe(c, data, g, &m, &err);
    cr_assert_neq(st, MEMRA_E_INTERNAL, "the builder failed: %s", err.msg);
    cr_assert_eq(st, want, "status %s, expected %s (message: %s)", memra_status_name(st), memra_status_name(want),
                 err.msg);
    if (msg)
        cr_assert_str_eq(err.msg, msg);
    return m;
}

static void expect_error(const mb_change *c, memra_status want, const char *msg) {
    void *data;
    memra_gguf *g;
    memra_model *m = expect(c, want, msg, &data, &g);
    mb_close(data, g, m);
}

Test(model_describe, valid_llama_binds_everything) {
    mb_change c = mb_none();
    void *data;
    memra_gguf *g;
    memra_model *m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_eq(m->arch, MEMRA_ARCH_LLAMA);
    cr_assert_str_eq(m->arch_name, "llama");
    cr_assert_str_eq(m->name, "builder model");
    cr_assert_eq(m->rope_pairing, MEMRA_ROPE_NORMAL);
    cr_assert_eq(m->n_vocab, MB_VOCAB);
    cr_assert_eq(m->n_embd, MB_EMBD);
    cr_assert_eq(m->n_layer, MB_LAYERS);
    cr_assert_eq(m->n_ff, MB_FF);
    cr_assert_eq(m->n_head, MB_HEADS);
    cr_assert_eq(m->n_head_kv, MB_HEADS_KV);
    cr_assert_eq(m->head_dim, MB_HEAD_DIM);
    cr_assert_eq(m->head_dim_v, MB_HEAD_DIM);
    cr_assert_eq(m->n_ctx_train, 512);
    cr_assert_float_eq(m->rms_eps, 1e-5f, 0);
    cr_assert_float_eq(m->rope_freq_base, 10000.0f, 0);
    cr_assert_float_eq(m->rope_linear_factor, 1.0f, 0);
    cr_assert_null(m->rope_freqs);
    cr_assert_not(m->tied_output);
    cr_assert_eq(m->bos_id, 1);
    cr_assert_eq(m->eos_id, 2);
    cr_assert_eq(m->gguf, g);

    const memra_layer *l1 = &m->layers[1];
    cr_assert_str_eq(l1->wk.name, "blk.1.attn_k.weight");
    cr_assert_eq(l1->wk.rows, MB_HEADS_KV * MB_HEAD_DIM);
    cr_assert_eq(l1->wk.cols, MB_EMBD);
    cr_assert_eq(l1->wk.type, MEMRA_TYPE_F16);
    cr_assert_eq(l1->wo.rows, MB_EMBD);
    cr_assert_eq(l1->wo.cols, MB_HEADS * MB_HEAD_DIM);
    cr_assert_eq(l1->wo.type, MEMRA_TYPE_Q8_0);
    cr_assert_eq(l1->w_down.rows, MB_EMBD);
    cr_assert_eq(l1->w_down.cols, MB_FF);
    cr_assert_eq(l1->attn_norm.rows, 1);
    cr_assert_eq(l1->attn_norm.cols, MB_EMBD);
    cr_assert_null(l1->bq.data);
    cr_assert_null(l1->q_norm.data);
    /* Data points into the mapping, at the tensor's bytes. */
    const memra_gguf_tensor *t = memra_gguf_find_tensor(g, "blk.1.ffn_up.weight");
    cr_assert_eq(l1->w_up.data, t->data);
    cr_assert_eq(l1->w_up.n_bytes, t->n_bytes);

    uint64_t total = 0;
    for (uint64_t i = 0; i < memra_gguf_tensor_count(g); i++)
        total += memra_gguf_tensor_at(g, i)->n_bytes;
    cr_assert_eq(m->weight_bytes, total, "weight_bytes %llu, tensors hold %llu", (unsigned long long)m->weight_bytes,
                 (unsigned long long)total);
    mb_close(data, g, m);
}

/* general.name is untrusted display text: control bytes (an escape sequence that would clear a
 * terminal, a carriage return) read '?', the rest is kept. */
Test(model_describe, control_bytes_of_the_name_read_question_marks) {
    mb_change c = mb_none();
    c.name = "evil\x1b[2Jname\r\x7f";
    void *data;
    memra_gguf *g;
    memra_model *m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_str_eq(m->name, "evil?[2Jname??");
    mb_close(data, g, m);
}

Test(model_describe, tied_output_points_at_the_embedding_counted_once) {
    mb_change c = mb_none();
    c.tied = true;
    void *data;
    memra_gguf *g;
    memra_model *m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert(m->tied_output);
    cr_assert_eq(m->output.data, m->tok_embd.data);
    cr_assert_str_eq(m->output.name, "token_embd.weight");
    uint64_t total = 0;
    for (uint64_t i = 0; i < memra_gguf_tensor_count(g); i++)
        total += memra_gguf_tensor_at(g, i)->n_bytes;
    cr_assert_eq(m->weight_bytes, total);
    mb_close(data, g, m);
}

Test(model_describe, qwen2_and_qwen3) {
    mb_change c = mb_none();
    c.arch = "qwen2";
    void *data;
    memra_gguf *g;
    memra_model *m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_eq(m->arch, MEMRA_ARCH_QWEN2);
    cr_assert_eq(m->rope_pairing, MEMRA_ROPE_NEOX);
    cr_assert_str_eq(m->layers[0].bk.name, "blk.0.attn_k.bias");
    cr_assert_eq(m->layers[0].bk.cols, MB_HEADS_KV * MB_HEAD_DIM);
    cr_assert_eq(m->layers[0].bk.rows, 1);
    mb_close(data, g, m);

    c.arch = "qwen3";
    c.key_length = 32; /* q dim 4*32 = 128 != n_embd */
    m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_eq(m->arch, MEMRA_ARCH_QWEN3);
    cr_assert_eq(m->rope_pairing, MEMRA_ROPE_NEOX);
    cr_assert_eq(m->head_dim, 32);
    cr_assert_eq(m->head_dim_v, 32);
    cr_assert_eq(m->layers[1].wq.rows, 128);
    cr_assert_eq(m->layers[1].wo.cols, 128);
    cr_assert_eq(m->layers[1].q_norm.cols, 32);
    cr_assert_null(m->layers[1].bq.data);
    mb_close(data, g, m);
}

Test(model_describe, missing_key_is_named) {
    mb_change c = mb_none();
    c.skip_key = "llama.block_count";
    expect_error(&c, MEMRA_E_FORMAT, "model.gguf: missing key 'llama.block_count'");
    c.skip_key = "llama.attention.layer_norm_rms_epsilon";
    expect_error(&c, MEMRA_E_FORMAT, "model.gguf: missing key 'llama.attention.layer_norm_rms_epsilon'");
    c.skip_key = "general.architecture";
    expect_error(&c, MEMRA_E_FORMAT, "model.gguf: missing key 'general.architecture'");
}

Test(model_describe, defaults_where_llama_cpp_defaults) {
    mb_change c = mb_none();
    c.skip_key = "llama.rope.freq_base";
    void *data;
    memra_gguf *g;
    memra_model *m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_float_eq(m->rope_freq_base, 10000.0f, 0);
    mb_close(data, g, m);

    c.skip_key = "tokenizer.ggml.bos_token_id";
    m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_eq(m->bos_id, -1);
    mb_close(data, g, m);
}

Test(model_describe, wrong_shape_names_tensor_and_expectation) {
    mb_change c = mb_none();
    c.tensor = "blk.1.attn_k.weight";
    c.tensor_ne[1] = 64;
    expect_error(&c, MEMRA_E_FORMAT,
                 "model.gguf: tensor 'blk.1.attn_k.weight' has 64 rows, expected 128 (n_head_kv*head_dim = 2*64)");
    c.tensor_ne[1] = 0;
    c.tensor_ne[0] = 128;
    expect_error(&c, MEMRA_E_FORMAT, "model.gguf: tensor 'blk.1.attn_k.weight' has 128 columns, expected 256 (n_embd)");

    c = mb_none();
    c.tensor = "blk.0.ffn_down.weight";
    c.tensor_ne[0] = 512;
    expect_error(&c, MEMRA_E_FORMAT, "model.gguf: tensor 'blk.0.ffn_down.weight' has 512 columns, expected 256 (n_ff)");

    c = mb_none();
    c.tensor = "output_norm.weight";
    c.tensor_ne[0] = 255;
    expect_error(&c, MEMRA_E_FORMAT, "model.gguf: tensor 'output_norm.weight' has 255 elements, expected 256 (n_embd)");

    c = mb_none();
    c.tensor = "token_embd.weight";
    c.tensor_ne[1] = 33;
    expect_error(&c, MEMRA_E_FORMAT, "model.gguf: tensor 'token_embd.weight' has 33 rows, expected 32 (n_vocab)");

    c = mb_none(); /* a norm stored as a matrix */
    c.tensor = "blk.0.ffn_norm.weight";
    c.tensor_ne[1] = 2;
    c.tensor_n_dims = 2;
    expect_error(&c, MEMRA_E_FORMAT,
                 "model.gguf: tensor 'blk.0.ffn_norm.weight' has shape [256, 2], expected a vector");
}

Test(model_describe, missing_tensor_is_named) {
    mb_change c = mb_none();
    c.skip_tensor = "blk.1.ffn_up.weight";
    expect_error(&c, MEMRA_E_FORMAT,
                 "model.gguf: missing tensor 'blk.1.ffn_up.weight' (expected 256 columns (n_embd) by 256 rows (n_ff))");
    c.skip_tensor = "output_norm.weight";
    expect_error(&c, MEMRA_E_FORMAT, "model.gguf: missing tensor 'output_norm.weight' (expected 256 elements: n_embd)");
    c.arch = "qwen2";
    c.skip_tensor = "blk.0.attn_v.bias";
    expect_error(&c, MEMRA_E_FORMAT,
                 "model.gguf: missing tensor 'blk.0.attn_v.bias' (expected 128 elements: n_head_kv*head_dim_v = 2*64)");
    c.arch = "qwen3";
    c.skip_tensor = "blk.1.attn_k_norm.weight";
    expect_error(&c, MEMRA_E_FORMAT,
                 "model.gguf: missing tensor 'blk.1.attn_k_norm.weight' (expected 64 elements: head_dim)");
}

Test(model_describe, unknown_architecture) {
    mb_change c = mb_none();
    c.arch = "gpt2";
    expect_error(&c, MEMRA_E_UNSUPPORTED,
                 "model.gguf: architecture 'gpt2' (general.architecture) is not supported: memra runs llama (with or "
                 "without experts), qwen2, qwen3, gemma3, qwen2moe, qwen3moe and granitemoe");
}

Test(model_describe, rope_scaling) {
    mb_change c = mb_none();
    c.rope_scaling = "yarn";
    c.rope_factor = 4.0f;
    expect_error(&c, MEMRA_E_UNSUPPORTED,
                 "model.gguf: rope scaling type 'yarn' (llama.rope.scaling.type) is not supported: memra knows "
                 "'none' and 'linear'");
    c.rope_scaling = "longrope";
    expect_error(&c, MEMRA_E_UNSUPPORTED, NULL);

    void *data;
    memra_gguf *g;
    c.rope_scaling = "linear";
    memra_model *m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_float_eq(m->rope_linear_factor, 4.0f, 0);
    mb_close(data, g, m);

    c.rope_scaling = "none";
    m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_float_eq(m->rope_linear_factor, 1.0f, 0);
    mb_close(data, g, m);

    c.rope_scaling = NULL; /* absent type: linear, as llama.cpp reads it */
    m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_float_eq(m->rope_linear_factor, 4.0f, 0);
    mb_close(data, g, m);
}

Test(model_describe, unsupported_type_is_refused_on_use_not_at_describe) {
    mb_change c = mb_none();
    c.tensor = "blk.0.attn_q.weight";
    c.tensor_type = MEMRA_TYPE_Q2_K;
    void *data;
    memra_gguf *g;
    memra_model *m = expect(&c, MEMRA_OK, NULL, &data, &g);
    memra_error err = {0};
    cr_assert_eq(m->layers[0].wq.type, MEMRA_TYPE_Q2_K);
    cr_assert_eq(memra_weight_check_type(&m->layers[0].wq, &err), MEMRA_E_UNSUPPORTED);
    cr_assert_str_eq(err.msg, "tensor 'blk.0.attn_q.weight' has type Q2_K, which memra does not support yet");
    /* The types memra computes with pass. */
    cr_assert_eq(memra_weight_check_type(&m->layers[0].wk, &err), MEMRA_OK);   /* F16 */
    cr_assert_eq(memra_weight_check_type(&m->layers[0].wo, &err), MEMRA_OK);   /* Q8_0 */
    cr_assert_eq(memra_weight_check_type(&m->layers[0].w_up, &err), MEMRA_OK); /* BF16 */
    cr_assert_eq(memra_weight_check_type(&m->tok_embd, &err), MEMRA_OK);       /* F32 */
    mb_close(data, g, m);
}

Test(model_describe, vectors_must_be_f32) {
    mb_change c = mb_none();
    c.tensor = "blk.1.attn_norm.weight";
    c.tensor_type = MEMRA_TYPE_F16;
    expect_error(&c, MEMRA_E_UNSUPPORTED,
                 "model.gguf: tensor 'blk.1.attn_norm.weight' has type F16, expected F32 (memra reads norm, bias and "
                 "rope vectors as F32)");
}

Test(model_describe, stray_tensor_is_refused) {
    mb_change c = mb_none();
    c.extra_tensor = "blk.0.attn_output.bias";
    expect_error(&c, MEMRA_E_UNSUPPORTED,
                 "model.gguf: tensor 'blk.0.attn_output.bias' is not part of a 2-layer llama model: memra would "
                 "ignore it and compute another model, so it refuses the file");
    c.extra_tensor = "blk.2.attn_norm.weight"; /* past the last layer */
    expect_error(&c, MEMRA_E_UNSUPPORTED, NULL);
    c.extra_tensor = "blk.0.attn_q_norm.weight"; /* qwen3's, in a llama file */
    expect_error(&c, MEMRA_E_UNSUPPORTED, NULL);
    c.extra_tensor = "blk.01.attn_norm.weight";
    expect_error(&c, MEMRA_E_UNSUPPORTED, NULL);
}

Test(model_describe, llama_may_carry_qkv_biases) {
    mb_change c = mb_none();
    c.extra_tensor = "blk.1.attn_q.bias"; /* [MB_EMBD] = n_head*head_dim: the right length */
    void *data;
    memra_gguf *g;
    memra_model *m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_str_eq(m->layers[1].bq.name, "blk.1.attn_q.bias");
    cr_assert_null(m->layers[0].bq.data);
    mb_close(data, g, m);
}

Test(model_describe, head_divisibility) {
    mb_change c = mb_none();
    c.head_count_kv = 3;
    expect_error(&c, MEMRA_E_FORMAT,
                 "model.gguf: llama.attention.head_count 4 is not a multiple of llama.attention.head_count_kv 3");
    c.head_count_kv = 8;
    expect_error(&c, MEMRA_E_FORMAT, NULL);
}

Test(model_describe, vocab_size_fallbacks) {
    mb_change c = mb_none();
    c.no_vocab_size = true; /* the token list: 32 */
    void *data;
    memra_gguf *g;
    memra_model *m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_eq(m->n_vocab, MB_VOCAB);
    mb_close(data, g, m);
    c.no_tokens = true; /* token_embd's rows */
    m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_eq(m->n_vocab, MB_VOCAB);
    mb_close(data, g, m);
}

Test(model_describe, special_ids_must_name_tokens) {
    mb_change c = mb_none();
    c.bos = 32;
    expect_error(&c, MEMRA_E_FORMAT,
                 "model.gguf: key 'tokenizer.ggml.bos_token_id' is 32, expected a token id below 32 (n_vocab)");
}

Test(model_describe, absurd_block_count_is_a_format_error) {
    mb_change c = mb_none();
    c.block_count = 1000000000u;
    expect_error(&c, MEMRA_E_FORMAT, NULL);
}

Test(model_describe, rope_freq_in_double_rounded_once) {
    mb_change c = mb_none();
    void *data;
    memra_gguf *g;
    memra_model *m = expect(&c, MEMRA_OK, NULL, &data, &g);
    for (uint32_t i = 0; i < MB_HEAD_DIM / 2; i++) {
        float want = (float)pow(10000.0, -2.0 * i / MB_HEAD_DIM);
        cr_assert_eq(memra_f32_to_bits(memra_model_rope_freq(m, i)), memra_f32_to_bits(want), "pair %u", i);
    }
    mb_close(data, g, m);

    c.rope_freqs = true; /* factors 1, 2, 3, ... */
    m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_not_null(m->rope_freqs);
    for (uint32_t i = 0; i < MB_HEAD_DIM / 2; i++) {
        float want = (float)(pow(10000.0, -2.0 * i / MB_HEAD_DIM) / (double)(i + 1));
        cr_assert_eq(memra_f32_to_bits(memra_model_rope_freq(m, i)), memra_f32_to_bits(want), "pair %u", i);
    }
    mb_close(data, g, m);

    c.tensor = "rope_freqs.weight"; /* head_dim/2 = 32 elements expected */
    c.tensor_ne[0] = 64;
    expect_error(&c, MEMRA_E_FORMAT,
                 "model.gguf: tensor 'rope_freqs.weight' has 64 elements, expected 32 (head_dim/2)");
}

/* gemma3: the hyperparameters llama.cpp derives (window, 1-in-6 global layers, local base
 * 10000, embedding and attention scales, GELU), its tensors, and what is missing. */
Test(model_describe, gemma3) {
    mb_change c = mb_none();
    c.arch = "gemma3";
    c.key_length = 128; /* head size != n_embd / n_head = 64 */
    c.tied = true;
    void *data;
    memra_gguf *g;
    memra_model *m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_eq(m->arch, MEMRA_ARCH_GEMMA3);
    cr_assert_str_eq(m->arch_name, "gemma3");
    cr_assert_eq(m->rope_pairing, MEMRA_ROPE_NEOX);
    cr_assert_eq(m->head_dim, 128);
    cr_assert_eq(m->sliding_window, 128);
    cr_assert_eq(m->swa_period, 6);
    cr_assert_float_eq(m->rope_freq_base, 10000.0f, 0);
    cr_assert_float_eq(m->rope_freq_base_swa, 10000.0f, 0);
    cr_assert_float_eq(m->embd_scale, 16.0f, 0); /* sqrtf(256) */
    cr_assert_float_eq(m->attn_scale, 1.0f / sqrtf(128.0f), 0);
    cr_assert_eq(m->ffn_act, MEMRA_FFN_GELU_TANH);
    cr_assert(m->tied_output);
    cr_assert_str_eq(m->layers[1].post_attn_norm.name, "blk.1.post_attention_norm.weight");
    cr_assert_str_eq(m->layers[1].post_ffn_norm.name, "blk.1.post_ffw_norm.weight");
    cr_assert_eq(m->layers[1].q_norm.cols, 128);
    cr_assert(memra_model_layer_is_swa(m, 0) && memra_model_layer_is_swa(m, 4));
    cr_assert(!memra_model_layer_is_swa(m, 5) && !memra_model_layer_is_swa(m, 11));
    mb_close(data, g, m);

    c.attention_scale = 0.125f; /* the file's scale wins */
    m = expect(&c, MEMRA_OK, NULL, &data, &g);
    cr_assert_float_eq(m->attn_scale, 0.125f, 0);
    mb_close(data, g, m);
    c.attention_scale = 0;

    c.skip_key = "gemma3.attention.sliding_window";
    expect_error(&c, MEMRA_E_FORMAT, NULL);
    c.skip_key = NULL;
    c.skip_tensor = "blk.1.post_ffw_norm.weight";
    expect_error(&c, MEMRA_E_FORMAT,
                 "model.gguf: missing tensor 'blk.1.post_ffw_norm.weight' (expected 256 elements: n_embd)");
    c.skip_tensor = "blk.0.attn_k_norm.weight";
    expect_error(&c, MEMRA_E_FORMAT,
                 "model.gguf: missing tensor 'blk.0.attn_k_norm.weight' (expected 128 elements: head_dim)");
    c.skip_tensor = NULL;

    /* a llama file with gemma's post norms is refused: they are not part of a llama model */
    mb_change l = mb_none();
    l.extra_tensor = "blk.0.post_attention_norm.weight";
    expect_error(&l, MEMRA_E_UNSUPPORTED, NULL);
}
