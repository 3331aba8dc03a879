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
    const char *want[] = {"tiny", "small", "qwen3-tiny", "qwen2-tiny", "gemma3-tiny", "llama-1b", "llama-8b"};
    for (size_t i = 0; i < 7; i++)
        cr_assert_str_eq(names[i], want[i]);
    cr_assert_null(names[7]);
    uint32_t type;
    memra_error err = {0};
    cr_assert_eq(memra_synth_parse_dtype("Q8_0", &type, &err), MEMRA_OK);
    cr_assert_eq(type, MEMRA_TYPE_Q8_0);
    cr_assert_eq(memra_synth_parse_dtype("bf16", &type, &err), MEMRA_OK);
    cr_assert_eq(type, MEMRA_TYPE_BF16);
    cr_assert_eq(memra_synth_parse_dtype("Q4_K", &type, &err), MEMRA_OK);
    cr_assert_eq(type, MEMRA_TYPE_Q4_K);
    cr_assert_eq(memra_synth_parse_dtype("q2_k", &type, &err), MEMRA_E_INVALID);
    cr_assert_str_eq(err.msg,
                     "unknown dtype 'q2_k': expected f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k or q6_k");
    memra_synth_spec spec = {"huge", MEMRA_TYPE_F32, 1};
    void *data;
    size_t size;
    cr_assert_eq(memra_synth_build_memory(&spec, &data, &size, &err), MEMRA_E_INVALID);
    cr_assert_str_eq(err.msg,
                     "unknown preset 'huge': expected tiny, small, qwen3-tiny, qwen2-tiny, gemma3-tiny, llama-1b or "
                     "llama-8b");
    spec.preset = "tiny";
    spec.type = MEMRA_TYPE_Q2_K;
    cr_assert_eq(memra_synth_build_memory(&spec, &data, &size, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "Q2_K"), "%s", err.msg);
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
