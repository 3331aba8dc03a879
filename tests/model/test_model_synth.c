/* test_model_synth.c: synthetic models. Every preset x dtype is written to a file, read back and
 * validated (description, tensor types, tokenizer metadata); the file's bytes equal the
 * memory-built bytes; the same seed gives the same bytes and another seed other weights; the
 * bytes do not depend on the generator's thread count; F16, BF16 and Q8_0 files hold exactly the
 * conversions of the F32 file's values. llama-1b is checked under the "slow" label. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "memra/gguf.h"
#include "memra/memra.h"
#include "memra/model.h"
#include "memra/runtime.h"
#include "memra/synth.h"

#define MAYBE_UNUSED __attribute__((unused)) /* the slow build uses only some helpers */

MAYBE_UNUSED static const char *const small_presets[] = {"tiny", "small", "qwen3-tiny", "qwen2-tiny", "gemma3-tiny"};
MAYBE_UNUSED static const uint32_t dtypes[] = {MEMRA_TYPE_F32, MEMRA_TYPE_F16, MEMRA_TYPE_BF16, MEMRA_TYPE_Q8_0};

MAYBE_UNUSED static void *build(const char *preset, uint32_t type, uint64_t seed, size_t *size) {
    memra_synth_spec spec = {preset, type, seed};
    memra_error err = {0};
    void *data;
    cr_assert_eq(memra_synth_build_memory(&spec, &data, size, &err), MEMRA_OK, "%s: %s", preset, err.msg);
    return data;
}

MAYBE_UNUSED static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void temp_path(char *buf, size_t size, const char *tag) {
    const char *dir = getenv("MEMRA_BUILD_DIR");
    snprintf(buf, size, "%s/test_model_synth_%s_%d.gguf", dir && *dir ? dir : "/tmp", tag, (int)getpid());
}

static memra_gguf_str key_str(const memra_gguf *g, const char *key) {
    memra_gguf_str s;
    memra_error err = {0};
    cr_assert_eq(memra_gguf_get_str(g, key, &s, &err), MEMRA_OK, "%s", err.msg);
    return s;
}

static bool str_eq(memra_gguf_str s, const char *want) { return s.len == strlen(want) && !memcmp(s.ptr, want, s.len); }

/* Tokenizer metadata as llama.cpp reads it: model "llama", n_vocab tokens with the 256 byte
 * tokens, scores and types of the same length, bos and eos naming <s> and </s>. */
static void check_tokenizer(const memra_gguf *g, const memra_model *m) {
    cr_assert(str_eq(key_str(g, "tokenizer.ggml.model"), "llama"));
    const memra_gguf_value *tokens = memra_gguf_find(g, "tokenizer.ggml.tokens");
    cr_assert_not_null(tokens);
    cr_assert_eq(tokens->type, MEMRA_GGUF_ARRAY);
    cr_assert_eq(tokens->v.arr.elem_type, MEMRA_GGUF_STRING);
    cr_assert_eq(tokens->v.arr.count, m->n_vocab);
    for (uint32_t b = 0; b < 256; b++) {
        char want[8];
        snprintf(want, sizeof want, "<0x%02X>", b);
        cr_assert(str_eq(tokens->v.arr.items[3 + b].v.str, want), "byte token %u", b);
    }
    cr_assert(str_eq(tokens->v.arr.items[m->bos_id].v.str, "<s>"));
    cr_assert(str_eq(tokens->v.arr.items[m->eos_id].v.str, "</s>"));
    const memra_gguf_array *scores, *types;
    memra_error err = {0};
    cr_assert_eq(memra_gguf_get_array(g, "tokenizer.ggml.scores", MEMRA_GGUF_FLOAT32, &scores, &err), MEMRA_OK, "%s",
                 err.msg);
    cr_assert_eq(scores->count, m->n_vocab);
    cr_assert_eq(memra_gguf_get_array(g, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32, &types, &err), MEMRA_OK, "%s",
                 err.msg);
    cr_assert_eq(types->count, m->n_vocab);
    int32_t t;
    memcpy(&t, (const char *)types->data + 4 * 3, 4);
    cr_assert_eq(t, 6, "<0x00> has type %d, expected 6 (byte)", t);
    memcpy(&t, (const char *)types->data + 4 * m->bos_id, 4);
    cr_assert_eq(t, 3, "<s> has type %d, expected 3 (control)", t);
    /* Every token distinct: llama.cpp maps text to id and refuses duplicates. */
    for (uint32_t i = 259; i + 1 < m->n_vocab && i < 2000; i++)
        cr_assert_not(tokens->v.arr.items[i].v.str.len == tokens->v.arr.items[i + 1].v.str.len &&
                          !memcmp(tokens->v.arr.items[i].v.str.ptr, tokens->v.arr.items[i + 1].v.str.ptr,
                                  tokens->v.arr.items[i].v.str.len),
                      "tokens %u and %u are equal", i, i + 1);
}

/* Every matrix in `type`, every vector F32; shapes follow from describe having succeeded. */
static void check_types(const memra_model *m, uint32_t type) {
    cr_assert_eq(m->tok_embd.type, type);
    cr_assert_eq(m->output.type, type);
    cr_assert_eq(m->output_norm.type, MEMRA_TYPE_F32);
    for (uint32_t l = 0; l < m->n_layer; l++) {
        const memra_layer *ly = &m->layers[l];
        const memra_weight *mats[] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down};
        for (size_t i = 0; i < 7; i++)
            cr_assert_eq(mats[i]->type, type, "%s has type %s", mats[i]->name, memra_tensor_type_name(mats[i]->type));
        cr_assert_eq(ly->attn_norm.type, MEMRA_TYPE_F32);
        cr_assert_eq(ly->ffn_norm.type, MEMRA_TYPE_F32);
    }
}

MAYBE_UNUSED static void check_preset_shape(const memra_model *m, const char *preset) {
    if (strcmp(preset, "tiny") == 0) {
        cr_assert_eq(m->arch, MEMRA_ARCH_LLAMA);
        cr_assert_eq(m->n_vocab, 512);
        cr_assert_eq(m->n_embd, 64);
        cr_assert_eq(m->n_head, 4);
        cr_assert_eq(m->n_head_kv, 2);
        cr_assert_eq(m->n_ff, 192);
        cr_assert_not(m->tied_output);
    } else if (strcmp(preset, "small") == 0) {
        cr_assert_eq(m->n_vocab, 4096);
        cr_assert_eq(m->n_embd, 256);
        cr_assert_eq(m->n_layer, 6);
        cr_assert_not_null(m->rope_freqs);
        cr_assert(m->tied_output);
    } else if (strcmp(preset, "qwen3-tiny") == 0) {
        cr_assert_eq(m->arch, MEMRA_ARCH_QWEN3);
        cr_assert_eq(m->head_dim, 32);
        cr_assert_eq(m->layers[0].wq.rows, 128); /* key_length: q dim != n_embd */
        cr_assert_not_null(m->layers[0].q_norm.data);
        cr_assert_not_null(m->layers[0].k_norm.data);
    } else if (strcmp(preset, "qwen2-tiny") == 0) {
        cr_assert_eq(m->arch, MEMRA_ARCH_QWEN2);
        cr_assert_not_null(m->layers[0].bq.data);
        cr_assert_not_null(m->layers[3].bv.data);
    } else if (strcmp(preset, "gemma3-tiny") == 0) {
        cr_assert_eq(m->arch, MEMRA_ARCH_GEMMA3);
        cr_assert_eq(m->n_layer, 6);
        cr_assert_eq(m->head_dim, 32); /* != n_embd / n_head = 16 */
        cr_assert_eq(m->sliding_window, 8);
        cr_assert_eq(m->swa_period, 6);
        cr_assert_float_eq(m->rope_freq_base, 1e6f, 0);
        cr_assert_float_eq(m->rope_freq_base_swa, 1e4f, 0); /* the default: the file has no key */
        cr_assert_float_eq(m->embd_scale, 8.0f, 0);
        cr_assert_float_eq(m->attn_scale, 1.0f / sqrtf(32.0f), 0);
        cr_assert_eq(m->ffn_act, MEMRA_FFN_GELU_TANH);
        cr_assert(m->tied_output);
        for (uint32_t l = 0; l < 6; l++) {
            cr_assert_eq(memra_model_layer_is_swa(m, l), l != 5, "layer %u", l);
            cr_assert_not_null(m->layers[l].post_attn_norm.data);
            cr_assert_not_null(m->layers[l].post_ffn_norm.data);
            cr_assert_not_null(m->layers[l].q_norm.data);
        }
    } else if (strcmp(preset, "smollm2-135m") == 0) { /* SmolLM2-135M, as its published file says */
        cr_assert_eq(m->arch, MEMRA_ARCH_LLAMA);
        cr_assert_eq(m->n_vocab, 49152);
        cr_assert_eq(m->n_embd, 576);
        cr_assert_eq(m->n_layer, 30);
        cr_assert_eq(m->n_head, 9);
        cr_assert_eq(m->n_head_kv, 3);
        cr_assert_eq(m->head_dim, 64);
        cr_assert_eq(m->head_dim_v, 64);
        cr_assert_eq(m->n_ff, 1536);
        cr_assert_eq(m->n_ctx_train, 8192);
        cr_assert_float_eq(m->rope_freq_base, 1e5f, 0);
        cr_assert_float_eq(m->rms_eps, 1e-5f, 0);
        cr_assert_null(m->rope_freqs);
        cr_assert(m->tied_output);
    } else if (strcmp(preset, "gemma3-270m") == 0) { /* Gemma 3 270M, as its published file says */
        cr_assert_eq(m->arch, MEMRA_ARCH_GEMMA3);
        cr_assert_eq(m->n_vocab, 262144);
        cr_assert_eq(m->n_embd, 640);
        cr_assert_eq(m->n_layer, 18);
        cr_assert_eq(m->n_head, 4);
        cr_assert_eq(m->n_head_kv, 1);
        cr_assert_eq(m->head_dim, 256);
        cr_assert_eq(m->n_ff, 2048);
        cr_assert_eq(m->n_ctx_train, 32768);
        cr_assert_eq(m->sliding_window, 512);
        cr_assert_eq(m->swa_period, 6);
        cr_assert_float_eq(m->rope_freq_base, 1e6f, 0);
        cr_assert_float_eq(m->rope_freq_base_swa, 1e4f, 0);
        cr_assert_float_eq(m->embd_scale, sqrtf(640.0f), 0);
        cr_assert_float_eq(m->attn_scale, 1.0f / 16.0f, 0);
        cr_assert_eq(m->ffn_act, MEMRA_FFN_GELU_TANH);
        cr_assert(m->tied_output);
        for (uint32_t l = 0; l < 18; l++) {
            cr_assert_eq(memra_model_layer_is_swa(m, l), l % 6 != 5, "layer %u", l);
            cr_assert_not_null(m->layers[l].post_attn_norm.data);
            cr_assert_not_null(m->layers[l].post_ffn_norm.data);
            cr_assert_not_null(m->layers[l].k_norm.data);
        }
        cr_assert_float_eq(m->rms_eps, 1e-6f, 0);
        return;
    }
    cr_assert_eq(m->bos_id, 1);
    cr_assert_eq(m->eos_id, 2);
    cr_assert_float_eq(m->rms_eps, 1e-5f, 0);
}

#ifndef MODEL_SYNTH_SLOW
Test(model_synth, every_preset_and_dtype_written_read_back_and_equal_to_memory, .timeout = 300) {
    for (size_t p = 0; p < sizeof small_presets / sizeof small_presets[0]; p++) {
        for (size_t d = 0; d < 4; d++) {
            const char *preset = small_presets[p];
            char path[512];
            temp_path(path, sizeof path, preset);
            memra_synth_spec spec = {preset, dtypes[d], 7};
            memra_error err = {0};
            cr_assert_eq(memra_synth_write_file(&spec, path, &err), MEMRA_OK, "%s", err.msg);
            memra_gguf *g;
            cr_assert_eq(memra_gguf_open(path, &g, &err), MEMRA_OK, "%s", err.msg);
            memra_model *m;
            cr_assert_eq(memra_model_describe(g, &m, &err), MEMRA_OK, "%s %s: %s", preset,
                         memra_tensor_type_name(dtypes[d]), err.msg);
            check_preset_shape(m, preset);
            check_types(m, dtypes[d]);
            check_tokenizer(g, m);
            memra_model_free(m);
            memra_gguf_close(g);

            size_t file_size, mem_size;
            void *file = read_file(path, &file_size);
            void *mem = build(preset, dtypes[d], 7, &mem_size);
            cr_assert_eq(file_size, mem_size, "%s: file %zu bytes, memory %zu", preset, file_size, mem_size);
            cr_assert(memcmp(file, mem, file_size) == 0, "%s %s: the file's bytes differ from memory's", preset,
                      memra_tensor_type_name(dtypes[d]));
            free(file);
            free(mem);
            unlink(path);
        }
    }
}

Test(model_synth, same_seed_same_bytes_other_seed_other_weights) {
    size_t a_size, b_size, c_size;
    void *a = build("tiny", MEMRA_TYPE_F32, 1, &a_size);
    void *b = build("tiny", MEMRA_TYPE_F32, 1, &b_size);
    void *c = build("tiny", MEMRA_TYPE_F32, 2, &c_size);
    cr_assert_eq(a_size, b_size);
    cr_assert(memcmp(a, b, a_size) == 0, "two builds with seed 1 differ");
    cr_assert_eq(a_size, c_size);
    memra_gguf *ga, *gc;
    memra_error err = {0};
    cr_assert_eq(memra_gguf_open_memory(a, a_size, "a", &ga, &err), MEMRA_OK);
    cr_assert_eq(memra_gguf_open_memory(c, c_size, "c", &gc, &err), MEMRA_OK);
    /* The metadata is the same; every tensor except rope tables differs. */
    cr_assert_eq(memra_gguf_data_offset(ga), memra_gguf_data_offset(gc));
    cr_assert(memcmp(a, c, memra_gguf_data_offset(ga)) == 0);
    for (uint64_t i = 0; i < memra_gguf_tensor_count(ga); i++) {
        const memra_gguf_tensor *ta = memra_gguf_tensor_at(ga, i), *tc = memra_gguf_tensor_at(gc, i);
        cr_assert(memcmp(ta->data, tc->data, ta->n_bytes) != 0, "tensor '%s' is the same with seeds 1 and 2", ta->name);
    }
    memra_gguf_close(ga);
    memra_gguf_close(gc);
    free(a);
    free(b);
    free(c);
}

Test(model_synth, bytes_do_not_depend_on_thread_count) {
    size_t n1, n3;
    setenv("MEMRA_SYNTH_THREADS", "1", 1);
    void *one = build("small", MEMRA_TYPE_Q8_0, 3, &n1);
    setenv("MEMRA_SYNTH_THREADS", "3", 1);
    void *three = build("small", MEMRA_TYPE_Q8_0, 3, &n3);
    unsetenv("MEMRA_SYNTH_THREADS");
    cr_assert_eq(n1, n3);
    cr_assert(memcmp(one, three, n1) == 0, "1 and 3 generator threads give different bytes");
    free(one);
    free(three);
}

/* The F16, BF16 and Q8_0 files hold the conversions of the F32 file's values, as ggml converts. */
Test(model_synth, dtypes_are_conversions_of_the_f32_values) {
    size_t sizes[4];
    void *bufs[4];
    memra_gguf *gs[4];
    memra_error err = {0};
    for (int d = 0; d < 4; d++) {
        bufs[d] = build("qwen2-tiny", dtypes[d], 5, &sizes[d]);
        cr_assert_eq(memra_gguf_open_memory(bufs[d], sizes[d], "m", &gs[d], &err), MEMRA_OK, "%s", err.msg);
    }
    uint64_t n_tensors = memra_gguf_tensor_count(gs[0]);
    for (uint64_t i = 0; i < n_tensors; i++) {
        const memra_gguf_tensor *t32 = memra_gguf_tensor_at(gs[0], i);
        const float *x = t32->data;
        for (int d = 1; d < 4; d++) {
            const memra_gguf_tensor *t = memra_gguf_tensor_at(gs[d], i);
            cr_assert_str_eq(t->name, t32->name);
            if (t32->n_dims == 1) { /* vectors stay F32 */
                cr_assert_eq(t->type, MEMRA_TYPE_F32);
                cr_assert(memcmp(t->data, t32->data, t->n_bytes) == 0, "%s", t->name);
                continue;
            }
            const unsigned char *p = t->data;
            for (uint64_t e = 0; e < t32->n_elems; e++) {
                uint16_t h;
                if (dtypes[d] == MEMRA_TYPE_F16) {
                    memcpy(&h, p + 2 * e, 2);
                    cr_assert_eq(h, memra_f32_to_f16(x[e]), "%s element %llu", t->name, (unsigned long long)e);
                } else if (dtypes[d] == MEMRA_TYPE_BF16) {
                    memcpy(&h, p + 2 * e, 2);
                    cr_assert_eq(h, memra_f32_to_bf16(x[e]), "%s element %llu", t->name, (unsigned long long)e);
                } else {
                    /* ggml's quantize_row_q8_0_ref: d = amax/127, q = round(x * (1/d)), d as f16 */
                    const unsigned char *blk = p + (e / 32) * 34;
                    const float *xb = x + e / 32 * 32;
                    float amax = 0;
                    for (int j = 0; j < 32; j++)
                        amax = fmaxf(amax, fabsf(xb[j]));
                    float dq = amax / 127.0f, id = dq != 0.0f ? 1.0f / dq : 0.0f;
                    memcpy(&h, blk, 2);
                    cr_assert_eq(h, memra_f32_to_f16(dq), "%s block %llu", t->name, (unsigned long long)(e / 32));
                    int8_t q = (int8_t)blk[2 + e % 32];
                    cr_assert_eq(q, (int8_t)roundf(x[e] * id), "%s element %llu: %g quantised to %d", t->name,
                                 (unsigned long long)e, (double)x[e], q);
                }
            }
        }
    }
    for (int d = 0; d < 4; d++) {
        memra_gguf_close(gs[d]);
        free(bufs[d]);
    }
}

Test(model_synth, presets_dtypes_and_errors) {
    const char *const *names = memra_synth_presets();
    const char *want[] = {"tiny",          "small",           "qwen3-tiny",     "qwen2-tiny",   "gemma3-tiny",
                          "gemma3-270m",   "llama-1b",        "llama-8b",       "smollm2-135m", "moe-tiny",
                          "qwen2moe-tiny", "granitemoe-tiny", "granite-moe-1b", "qwen3moe-30b"};
    for (size_t i = 0; i < 14; i++)
        cr_assert_str_eq(names[i], want[i]);
    cr_assert_null(names[14]);
    uint32_t type;
    memra_error err = {0};
    cr_assert_eq(memra_synth_parse_dtype("Q8_0", &type, &err), MEMRA_OK);
    cr_assert_eq(type, MEMRA_TYPE_Q8_0);
    cr_assert_eq(memra_synth_parse_dtype("bf16", &type, &err), MEMRA_OK);
    cr_assert_eq(type, MEMRA_TYPE_BF16);
    cr_assert_eq(memra_synth_parse_dtype("Q4_K", &type, &err), MEMRA_OK);
    cr_assert_eq(type, MEMRA_TYPE_Q4_K);
    cr_assert_eq(memra_synth_parse_dtype("Q4_K_M", &type, &err), MEMRA_OK);
    cr_assert_eq(type, MEMRA_SYNTH_Q4_K_M);
    cr_assert_str_eq(memra_synth_dtype_name(type), "Q4_K_M");
    cr_assert_eq(memra_synth_parse_dtype("q5_k_m", &type, &err), MEMRA_OK);
    cr_assert_eq(type, MEMRA_SYNTH_Q5_K_M);
    cr_assert_str_eq(memra_synth_dtype_name(type), "Q5_K_M");
    cr_assert_str_eq(memra_synth_dtype_name(MEMRA_TYPE_Q6_K), "Q6_K");
    cr_assert_eq(memra_synth_parse_dtype("q2_k", &type, &err), MEMRA_E_INVALID);
    cr_assert_str_eq(err.msg,
                     "unknown dtype 'q2_k': expected f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, "
                     "q6_k, q4_k_m or q5_k_m");
    memra_synth_spec spec = {"huge", MEMRA_TYPE_F32, 1};
    void *data;
    size_t size;
    cr_assert_eq(memra_synth_build_memory(&spec, &data, &size, &err), MEMRA_E_INVALID);
    cr_assert_str_eq(err.msg,
                     "unknown preset 'huge': expected tiny, small, qwen3-tiny, qwen2-tiny, gemma3-tiny, gemma3-270m, "
                     "llama-1b, llama-8b, smollm2-135m, moe-tiny, qwen2moe-tiny, granitemoe-tiny, granite-moe-1b or "
                     "qwen3moe-30b");
    spec.preset = "tiny";
    spec.type = MEMRA_TYPE_Q2_K;
    cr_assert_eq(memra_synth_build_memory(&spec, &data, &size, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "Q2_K"), "%s", err.msg);
    spec.type = MEMRA_SYNTH_MIX + 18; /* not a mix synth knows */
    cr_assert_eq(memra_synth_build_memory(&spec, &data, &size, &err), MEMRA_E_INVALID);
}

/* ---- llama.cpp's Q4_K_M and Q5_K_M mixes ----
 *
 * The expected types, derived by hand from llama.cpp's rule (src/llama-quant.cpp,
 * llama_tensor_get_type; synth.c's comment above mix_type states it) for each preset's shapes:
 * the base type Q4_K or Q5_K; Q6_K for output.weight and a tied token_embd (Q8_0 when the columns
 * are not a multiple of 256); Q6_K for attn_v and ffn_down on the use_more_bits layers (i < n/8,
 * i >= 7n/8, (i - n/8) % 3 == 2: the lists below are worked out by hand, not by the function);
 * then the fallback for columns that are not a multiple of 256: Q4_K -> Q5_0, Q5_K -> Q5_1,
 * Q6_K -> Q8_0. */
#define NONE 0xFFFFFFFFu /* no such tensor (a tied head) */
typedef struct mix_expect {
    const char *preset;
    uint32_t mix;
    uint32_t embd, output;
    uint32_t in_proj;  /* attn_q, attn_k, ffn_gate, ffn_up: n_embd columns */
    uint32_t attn_out; /* attn_output: n_head * head_dim columns */
    uint32_t v_more, v_base, down_more, down_base;
    const char *more; /* the layers where use_more_bits holds */
} mix_expect;

static const mix_expect mix_table[] = {
    /* Llama-3.1-8B: 32 layers, untied: more = 0..3, 28..31, and 4 + 2 + 3k = 6, 9, ..., 27 */
    {"llama-8b", MEMRA_SYNTH_Q4_K_M, MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q4_K,
     MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q4_K, "0,1,2,3,6,9,12,15,18,21,24,27,28,29,30,31"},
    {"llama-8b", MEMRA_SYNTH_Q5_K_M, MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q5_K,
     MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q5_K, "0,1,2,3,6,9,12,15,18,21,24,27,28,29,30,31"},
    /* Llama-3.2-1B: 16 layers, tied (token_embd takes the head's Q6_K): 0, 1, 14, 15, 4, 7, 10, 13 */
    {"llama-1b", MEMRA_SYNTH_Q4_K_M, MEMRA_TYPE_Q6_K, NONE, MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K,
     MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q4_K, "0,1,4,7,10,13,14,15"},
    /* Gemma 3 270M: 18 layers (n/8 = 2, 7n/8 = 15), tied, n_embd 640 (not a multiple of 256: the
     * fallbacks), attn_output 1024 and ffn_down 2048 columns (K-quants): as the real file */
    {"gemma3-270m", MEMRA_SYNTH_Q4_K_M, MEMRA_TYPE_Q8_0, NONE, MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q8_0,
     MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q4_K, "0,1,4,7,10,13,15,16,17"},
    {"gemma3-270m", MEMRA_SYNTH_Q5_K_M, MEMRA_TYPE_Q8_0, NONE, MEMRA_TYPE_Q5_1, MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q8_0,
     MEMRA_TYPE_Q5_1, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q5_K, "0,1,4,7,10,13,15,16,17"},
    /* small: 6 layers (n/8 = 0, 7n/8 = 5), tied, 256 columns */
    {"small", MEMRA_SYNTH_Q4_K_M, MEMRA_TYPE_Q6_K, NONE, MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K,
     MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q4_K, "2,5"},
    {"small", MEMRA_SYNTH_Q5_K_M, MEMRA_TYPE_Q6_K, NONE, MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q6_K,
     MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q5_K, "2,5"},
    /* tiny: 4 layers (7n/8 = 3), untied, every matrix 64 or 192 columns: all fallbacks */
    {"tiny", MEMRA_SYNTH_Q4_K_M, MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q8_0,
     MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q5_0, "2,3"},
    {"tiny", MEMRA_SYNTH_Q5_K_M, MEMRA_TYPE_Q5_1, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q5_1, MEMRA_TYPE_Q5_1, MEMRA_TYPE_Q8_0,
     MEMRA_TYPE_Q5_1, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q5_1, "2,3"},
    /* qwen2-tiny (biases stay F32) and gemma3-tiny (6 layers: 2, 5; tied, 64 columns) */
    {"qwen2-tiny", MEMRA_SYNTH_Q4_K_M, MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q5_0,
     MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q5_0, "2,3"},
    {"gemma3-tiny", MEMRA_SYNTH_Q4_K_M, MEMRA_TYPE_Q8_0, NONE, MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q8_0,
     MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q5_0, "2,5"},
};

static bool in_list(const char *list, uint32_t layer) {
    for (const char *at = list; *at;) {
        char *end;
        unsigned long v = strtoul(at, &end, 10);
        if (v == layer)
            return true;
        at = *end == ',' ? end + 1 : end;
    }
    return false;
}

/* The type e expects for the tensor `name`; F32 for a vector. */
static uint32_t expected_type(const mix_expect *e, const memra_synth_tensor_info *t) {
    if (t->rows == 1)
        return MEMRA_TYPE_F32;
    if (!strcmp(t->name, "token_embd.weight"))
        return e->embd;
    if (!strcmp(t->name, "output.weight"))
        return e->output;
    unsigned layer;
    char part[64];
    if (sscanf(t->name, "blk.%u.%63s", &layer, part) != 2)
        return NONE;
    bool more = in_list(e->more, layer);
    if (!strcmp(part, "attn_v.weight"))
        return more ? e->v_more : e->v_base;
    if (!strcmp(part, "ffn_down.weight"))
        return more ? e->down_more : e->down_base;
    if (!strcmp(part, "attn_output.weight"))
        return e->attn_out;
    if (!strcmp(part, "attn_q.weight") || !strcmp(part, "attn_k.weight") || !strcmp(part, "ffn_gate.weight") ||
        !strcmp(part, "ffn_up.weight"))
        return e->in_proj;
    return NONE;
}

/* How many of the preset's tensors differ from e (the first one named in why); an output.weight
 * that e says is absent, or one e expects that is not there, counts too. */
static uint32_t mix_mismatches(const mix_expect *e, char *why, size_t why_size) {
    memra_synth_spec spec = {e->preset, e->mix, 1};
    memra_synth_tensor_info *ts;
    uint32_t n, bad = 0;
    memra_error err = {0};
    cr_assert_eq(memra_synth_list_tensors(&spec, &ts, &n, &err), MEMRA_OK, "%s", err.msg);
    bool has_output = false;
    why[0] = '\0';
    for (uint32_t i = 0; i < n; i++) {
        uint32_t want = expected_type(e, &ts[i]);
        has_output |= !strcmp(ts[i].name, "output.weight");
        if (ts[i].type != want && bad++ == 0)
            snprintf(why, why_size, "%s %s: %s is %s, expected %s", e->preset, memra_synth_dtype_name(e->mix),
                     ts[i].name, memra_tensor_type_name(ts[i].type),
                     want == NONE ? "no tensor" : memra_tensor_type_name(want));
    }
    if (has_output != (e->output != NONE) && bad++ == 0)
        snprintf(why, why_size, "%s: output.weight %s", e->preset, has_output ? "present" : "absent");
    free(ts);
    return bad;
}

Test(model_synth, mixes_follow_llama_cpp_rule) {
    char why[256];
    for (size_t i = 0; i < sizeof mix_table / sizeof mix_table[0]; i++)
        cr_assert_eq(mix_mismatches(&mix_table[i], why, sizeof why), 0, "%s", why);
    /* Negative controls: one entry of the rule flipped in the table, and the check fails. */
    mix_expect e = mix_table[0];
    e.more = "0,1,2,3,6,9,12,15,18,21,24,28,29,30,31"; /* use_more_bits without layer 27 */
    cr_assert_gt(mix_mismatches(&e, why, sizeof why), 0, "a layer left out of use_more_bits went unseen");
    e = mix_table[0];
    e.more = "0,1,2,3,5,8,11,14,17,20,23,26,28,29,30,31"; /* the period's phase off by one */
    cr_assert_gt(mix_mismatches(&e, why, sizeof why), 0, "use_more_bits off by one went unseen");
    e = mix_table[2];
    e.embd = MEMRA_TYPE_Q4_K; /* a tied token_embd taken as the base type, not the head's */
    cr_assert_gt(mix_mismatches(&e, why, sizeof why), 0, "a tied token_embd in the base type went unseen");
    e = mix_table[3];
    e.v_more = MEMRA_TYPE_Q6_K; /* no fallback for 640 columns */
    cr_assert_gt(mix_mismatches(&e, why, sizeof why), 0, "a Q6_K without its fallback went unseen");
    e = mix_table[4];
    e.in_proj = MEMRA_TYPE_Q8_0; /* Q5_K's fallback taken as the plain dtypes' Q8_0 */
    cr_assert_gt(mix_mismatches(&e, why, sizeof why), 0, "Q5_K falling back to Q8_0 went unseen");
    e = mix_table[0];
    e.output = NONE; /* llama-8b's head is its own tensor */
    cr_assert_gt(mix_mismatches(&e, why, sizeof why), 0, "a missing head went unseen");
}

/* One tensor role of a preset: its name without "blk.N." and its [cols, rows]. */
typedef struct preset_shape {
    const char *name;
    uint64_t cols, rows;
} preset_shape;

/* Every tensor of a preset's list has one of the roles' shapes and (in blk.N) a layer below
 * n_layer; count[t] is how many tensors have type t. */
static void check_preset_tensors(const memra_synth_tensor_info *ts, uint32_t n, uint32_t n_layer,
                                 const preset_shape *shapes, size_t n_shapes, uint32_t count[32]) {
    memset(count, 0, 32 * sizeof count[0]);
    for (uint32_t i = 0; i < n; i++) {
        cr_assert_lt(ts[i].type, 32);
        count[ts[i].type]++;
        unsigned layer = 0;
        char part[64] = "";
        if (sscanf(ts[i].name, "blk.%u.%63s", &layer, part) == 2)
            cr_assert_lt(layer, n_layer, "%s", ts[i].name);
        const char *role = part[0] ? part : ts[i].name;
        bool found = false;
        for (size_t k = 0; k < n_shapes && !found; k++) {
            if (strcmp(role, shapes[k].name) == 0) {
                found = true;
                cr_assert(ts[i].cols == shapes[k].cols && ts[i].rows == shapes[k].rows,
                          "%s is [%llu, %llu], expected [%llu, %llu]", ts[i].name, (unsigned long long)ts[i].cols,
                          (unsigned long long)ts[i].rows, (unsigned long long)shapes[k].cols,
                          (unsigned long long)shapes[k].rows);
            }
        }
        cr_assert(found, "unexpected tensor %s", ts[i].name);
    }
}

/* Gemma 3 270M's shapes: 18 layers, n_embd 640, 4 query heads and 1 KV head of 256, n_ff 2048,
 * 262144 tokens, q/k norms and post norms, a tied head; with q4_k_m the real file's counts of
 * each type (F32 109, Q5_0 81, Q8_0 10, Q4_K 27, Q6_K 9; tests/tools/test_tools_models.c
 * compares tensor for tensor with the file itself when it is in the cache). */
Test(model_synth, gemma3_270m_shapes_and_counts) {
    memra_synth_spec spec = {"gemma3-270m", MEMRA_SYNTH_Q4_K_M, 1};
    memra_synth_tensor_info *ts;
    uint32_t n;
    memra_error err = {0};
    cr_assert_eq(memra_synth_list_tensors(&spec, &ts, &n, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(n, 236);
    static const preset_shape shapes[] = {
        {"token_embd.weight", 640, 262144},     {"output_norm.weight", 640, 1}, {"attn_norm.weight", 640, 1},
        {"attn_q.weight", 640, 1024},           {"attn_k.weight", 640, 256},    {"attn_v.weight", 640, 256},
        {"attn_q_norm.weight", 256, 1},         {"attn_k_norm.weight", 256, 1}, {"attn_output.weight", 1024, 640},
        {"post_attention_norm.weight", 640, 1}, {"ffn_norm.weight", 640, 1},    {"ffn_gate.weight", 640, 2048},
        {"ffn_up.weight", 640, 2048},           {"ffn_down.weight", 2048, 640}, {"post_ffw_norm.weight", 640, 1}};
    uint32_t count[32];
    check_preset_tensors(ts, n, 18, shapes, sizeof shapes / sizeof shapes[0], count);
    cr_assert_eq(count[MEMRA_TYPE_F32], 109);
    cr_assert_eq(count[MEMRA_TYPE_Q5_0], 81);
    cr_assert_eq(count[MEMRA_TYPE_Q8_0], 10);
    cr_assert_eq(count[MEMRA_TYPE_Q4_K], 27);
    cr_assert_eq(count[MEMRA_TYPE_Q6_K], 9);
    free(ts);
}

/* SmolLM2-135M's shapes: 30 layers of 576, 9 query heads and 3 KV heads of 64, n_ff 1536, 49152
 * tokens, a tied head; with q4_1 the published file's types (F32 61, Q4_1 210, Q8_0 1: the tied
 * token_embd is Q8_0, llama.cpp's head rule for 576 columns), with bf16 every matrix BF16 and with
 * q8_0 every one Q8_0. tests/tools/test_tools_models.c compares tensor for tensor with the file. */
Test(model_synth, smollm2_135m_shapes_and_counts) {
    static const struct {
        uint32_t dtype, embd, mats, n_mats;
    } cases[] = {{MEMRA_TYPE_Q4_1, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_1, 210},
                 {MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0, 210},
                 {MEMRA_TYPE_BF16, MEMRA_TYPE_BF16, MEMRA_TYPE_BF16, 211},
                 {MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 211}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memra_synth_spec spec = {"smollm2-135m", cases[c].dtype, 1};
        memra_synth_tensor_info *ts;
        uint32_t n;
        memra_error err = {0};
        cr_assert_eq(memra_synth_list_tensors(&spec, &ts, &n, &err), MEMRA_OK, "%s", err.msg);
        cr_assert_eq(n, 272);
        static const preset_shape shapes[] = {
            {"token_embd.weight", 576, 49152}, {"output_norm.weight", 576, 1}, {"attn_norm.weight", 576, 1},
            {"attn_q.weight", 576, 576},       {"attn_k.weight", 576, 192},    {"attn_v.weight", 576, 192},
            {"attn_output.weight", 576, 576},  {"ffn_norm.weight", 576, 1},    {"ffn_gate.weight", 576, 1536},
            {"ffn_up.weight", 576, 1536},      {"ffn_down.weight", 1536, 576}};
        uint32_t count[32];
        check_preset_tensors(ts, n, 30, shapes, sizeof shapes / sizeof shapes[0], count);
        for (uint32_t i = 0; i < n; i++) {
            if (strcmp(ts[i].name, "token_embd.weight") == 0)
                cr_assert_eq(ts[i].type, cases[c].embd, "token_embd is %s", memra_tensor_type_name(ts[i].type));
            else if (ts[i].cols > 1 && ts[i].rows > 1)
                cr_assert_eq(ts[i].type, cases[c].mats, "%s is %s", ts[i].name, memra_tensor_type_name(ts[i].type));
        }
        cr_assert_eq(count[MEMRA_TYPE_F32], 61);
        cr_assert_eq(count[cases[c].mats], cases[c].n_mats);
        free(ts);
    }
}

/* smollm2-135m written whole (~100 MB in q4_1): the describer reads SmolLM2-135M's hyperparameters
 * (check_preset_shape: rope base 1e5, rms eps 1e-5, a tied head) and file type MOSTLY_Q4_1. */
Test(model_synth, smollm2_135m_hyperparameters, .timeout = 120) {
    size_t size;
    void *data = build("smollm2-135m", MEMRA_TYPE_Q4_1, 1, &size);
    memra_gguf *g;
    memra_error err = {0};
    cr_assert_eq(memra_gguf_open_memory(data, size, "smollm2-135m", &g, &err), MEMRA_OK, "%s", err.msg);
    uint32_t file_type;
    cr_assert_eq(memra_gguf_get_u32(g, "general.file_type", &file_type, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(file_type, 3);
    memra_model *m;
    cr_assert_eq(memra_model_describe(g, &m, &err), MEMRA_OK, "%s", err.msg);
    check_preset_shape(m, "smollm2-135m");
    cr_assert_eq(m->tok_embd.type, MEMRA_TYPE_Q8_0);
    cr_assert_eq(m->layers[29].w_down.type, MEMRA_TYPE_Q4_1);
    check_tokenizer(g, m);
    memra_model_free(m);
    memra_gguf_close(g);
    free(data);
}

/* The files: every tensor written in the type the list gives, general.file_type 15 or 17, a
 * model the describer accepts; the float64 reference runs them (tests/cpu/test_cpu_reference.c). */
Test(model_synth, mixed_files_carry_the_mix) {
    static const struct {
        const char *preset;
        uint32_t mix, file_type;
    } cases[] = {{"small", MEMRA_SYNTH_Q4_K_M, 15},
                 {"small", MEMRA_SYNTH_Q5_K_M, 17},
                 {"tiny", MEMRA_SYNTH_Q4_K_M, 15},
                 {"gemma3-tiny", MEMRA_SYNTH_Q5_K_M, 17}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memra_synth_spec spec = {cases[c].preset, cases[c].mix, 1};
        memra_synth_tensor_info *ts;
        uint32_t n;
        memra_error err = {0};
        cr_assert_eq(memra_synth_list_tensors(&spec, &ts, &n, &err), MEMRA_OK, "%s", err.msg);
        size_t size;
        void *data = build(cases[c].preset, cases[c].mix, 1, &size);
        memra_gguf *g;
        cr_assert_eq(memra_gguf_open_memory(data, size, "m", &g, &err), MEMRA_OK, "%s", err.msg);
        cr_assert_eq(memra_gguf_tensor_count(g), n);
        for (uint32_t i = 0; i < n; i++) {
            const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
            cr_assert_str_eq(t->name, ts[i].name);
            cr_assert_eq(t->type, ts[i].type, "%s %s: %s", cases[c].preset, memra_synth_dtype_name(cases[c].mix),
                         t->name);
        }
        const memra_gguf_value *ft = memra_gguf_find(g, "general.file_type");
        cr_assert_not_null(ft);
        cr_assert_eq(ft->v.u64, cases[c].file_type);
        memra_model *m;
        cr_assert_eq(memra_model_describe(g, &m, &err), MEMRA_OK, "%s", err.msg);
        check_preset_shape(m, cases[c].preset);
        memra_model_free(m);
        memra_gguf_close(g);
        free(data);
        free(ts);
    }
}

/* gemma3-270m written whole (250 MB in memory, about 2 s): the hyperparameters the describer reads from it
 * are Gemma 3 270M's (check_preset_shape) and the file type is MOSTLY_Q4_K_M. */
Test(model_synth, gemma3_270m_hyperparameters, .timeout = 120) {
    size_t size;
    void *data = build("gemma3-270m", MEMRA_SYNTH_Q4_K_M, 1, &size);
    memra_gguf *g;
    memra_error err = {0};
    cr_assert_eq(memra_gguf_open_memory(data, size, "gemma3-270m", &g, &err), MEMRA_OK, "%s", err.msg);
    uint32_t file_type;
    cr_assert_eq(memra_gguf_get_u32(g, "general.file_type", &file_type, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(file_type, 15);
    memra_model *m;
    cr_assert_eq(memra_model_describe(g, &m, &err), MEMRA_OK, "%s", err.msg);
    check_preset_shape(m, "gemma3-270m");
    check_tokenizer(g, m);
    memra_model_free(m);
    memra_gguf_close(g);
    free(data);
}
#else
/* llama-1b: the shapes of Llama-3.2-1B, Llama 3.1 rope factors, streamed with little memory. */
Test(model_synth_slow, llama_1b_streams_with_small_memory, .timeout = 1200) {
    char path[512];
    temp_path(path, sizeof path, "llama-1b");
    memra_synth_spec spec = {"llama-1b", MEMRA_TYPE_BF16, 1};
    memra_error err = {0};
    cr_assert_eq(memra_synth_write_file(&spec, path, &err), MEMRA_OK, "%s", err.msg);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    cr_assert_lt(ru.ru_maxrss, 256 * 1024, "writing a 2.5 GB model took %ld KiB of memory", ru.ru_maxrss);
    memra_gguf *g;
    cr_assert_eq(memra_gguf_open(path, &g, &err), MEMRA_OK, "%s", err.msg);
    memra_model *m;
    cr_assert_eq(memra_model_describe(g, &m, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(m->n_vocab, 128256);
    cr_assert_eq(m->n_embd, 2048);
    cr_assert_eq(m->n_layer, 16);
    cr_assert_eq(m->n_head, 32);
    cr_assert_eq(m->n_head_kv, 8);
    cr_assert_eq(m->head_dim, 64);
    cr_assert_eq(m->n_ff, 8192);
    cr_assert(m->tied_output);
    cr_assert_float_eq(m->rope_freq_base, 500000.0f, 0);
    cr_assert_not_null(m->rope_freqs);
    /* Llama 3.1 factors (factor 32, low 1, high 4, original context 8192): 1 for high frequencies,
     * 32 for low ones, smooth between. */
    cr_assert_float_eq(m->rope_freqs[0], 1.0f, 0);
    cr_assert_float_eq(m->rope_freqs[31], 32.0f, 0);
    for (uint32_t i = 1; i < 32; i++)
        cr_assert_geq(m->rope_freqs[i], m->rope_freqs[i - 1]);
    check_types(m, MEMRA_TYPE_BF16);
    check_tokenizer(g, m);
    memra_model_free(m);
    memra_gguf_close(g);
    unlink(path);
}
#endif

/* Issue 29: the mixture-of-experts presets have the shapes of the models they are named after:
 * granite-3.x-1b-a400m (24 layers of 1024, 32 experts of 512, top 8) and Qwen3-30B-A3B (48 layers of
 * 2048, 128 experts of 768, top 8, heads of 128), their experts stacked on the last axis (listed as
 * n_expert x rows). */
static void expect_tensor(const memra_synth_tensor_info *t, uint32_t n, const char *name, uint64_t cols,
                          uint64_t rows) {
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0) {
            cr_assert(t[i].cols == cols && t[i].rows == rows, "%s: %llu x %llu, expected %llu x %llu", name,
                      (unsigned long long)t[i].cols, (unsigned long long)t[i].rows, (unsigned long long)cols,
                      (unsigned long long)rows);
            return;
        }
    cr_assert_fail("no tensor %s", name);
}

Test(model_synth, moe_presets_have_their_models_shapes) {
    memra_error err = {0};
    memra_synth_tensor_info *t;
    uint32_t n;
    memra_synth_spec q3 = {"qwen3moe-30b", MEMRA_TYPE_Q8_0, 1};
    cr_assert_eq(memra_synth_list_tensors(&q3, &t, &n, &err), MEMRA_OK, "%s", err.msg);
    expect_tensor(t, n, "blk.47.ffn_gate_inp.weight", 2048, 128);
    expect_tensor(t, n, "blk.47.ffn_gate_exps.weight", 2048, 128 * 768);
    expect_tensor(t, n, "blk.0.ffn_down_exps.weight", 768, 128 * 2048);
    expect_tensor(t, n, "blk.0.attn_q.weight", 2048, 32 * 128);
    expect_tensor(t, n, "blk.0.attn_k.weight", 2048, 4 * 128);
    expect_tensor(t, n, "output.weight", 2048, 151936);
    free(t);
    memra_synth_spec gr = {"granite-moe-1b", MEMRA_TYPE_BF16, 1};
    cr_assert_eq(memra_synth_list_tensors(&gr, &t, &n, &err), MEMRA_OK, "%s", err.msg);
    expect_tensor(t, n, "blk.23.ffn_up_exps.weight", 1024, 32 * 512);
    expect_tensor(t, n, "blk.0.attn_k.weight", 1024, 8 * 64);
    expect_tensor(t, n, "token_embd.weight", 1024, 49155);
    free(t);
}
