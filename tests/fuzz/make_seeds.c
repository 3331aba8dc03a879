/* make_seeds.c: writes a seed corpus of small valid GGUF files (through the writer) into the
 * folder given as argv[1], for the fuzz targets; creates that folder and any further ones given
 * (the fuzzer's working corpus). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "memra/gguf.h"

static int fail(const memra_error *err) {
    fprintf(stderr, "make_seeds: %s\n", err->msg);
    return 1;
}

#define TRY(call)                                                                                                      \
    do {                                                                                                               \
        if ((call) != MEMRA_OK)                                                                                        \
            return fail(&err);                                                                                         \
    } while (0)

static int write_seed(memra_gguf_writer *w, const char *dir, const char *name) {
    memra_error err;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    TRY(memra_gguf_writer_write_file(w, path, &err));
    memra_gguf_writer_free(w);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: make_seeds SEED_DIR [MORE_DIRS...]\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (mkdir(argv[i], 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "make_seeds: cannot create %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
    }
    const char *dir = argv[1];
    memra_error err;
    memra_gguf_writer *w;
    uint8_t bytes[1024];
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (uint8_t)(i * 7);

    /* 1: every scalar type, arrays of several, strings, nested arrays; an F32 and a Q8_0 tensor. */
    TRY(memra_gguf_writer_new(3, 0, &w, &err));
    TRY(memra_gguf_writer_set_str(w, "general.architecture", "llama", &err));
    TRY(memra_gguf_writer_set_u32(w, "llama.block_count", 2, &err));
    TRY(memra_gguf_writer_set_i32(w, "i32", -7, &err));
    TRY(memra_gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f, &err));
    TRY(memra_gguf_writer_set_bool(w, "flag", true, &err));
    memra_gguf_value v = {.type = MEMRA_GGUF_UINT64, .v.u64 = 1ull << 40};
    TRY(memra_gguf_writer_set(w, "u64", &v, &err));
    v = (memra_gguf_value){.type = MEMRA_GGUF_FLOAT64, .v.f64 = 0.5};
    TRY(memra_gguf_writer_set(w, "f64", &v, &err));
    v = (memra_gguf_value){.type = MEMRA_GGUF_INT8, .v.i64 = -3};
    TRY(memra_gguf_writer_set(w, "i8", &v, &err));
    v = (memra_gguf_value){.type = MEMRA_GGUF_UINT16, .v.u64 = 999};
    TRY(memra_gguf_writer_set(w, "u16", &v, &err));
    const char *toks[] = {"<s>", "</s>", "hello", ""};
    TRY(memra_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", toks, 4, &err));
    int32_t types[] = {1, 3, 1, 1};
    TRY(memra_gguf_writer_set_array(w, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32, 4, types, &err));
    float scores[] = {0.0f, -1.0f, -2.5f, 0.25f};
    TRY(memra_gguf_writer_set_array(w, "tokenizer.ggml.scores", MEMRA_GGUF_FLOAT32, 4, scores, &err));
    memra_gguf_value inner = {.type = MEMRA_GGUF_ARRAY,
                              .v.arr = {.elem_type = MEMRA_GGUF_INT32, .count = 2, .data = types}};
    memra_gguf_value outer = {.type = MEMRA_GGUF_ARRAY,
                              .v.arr = {.elem_type = MEMRA_GGUF_ARRAY, .count = 1, .items = &inner}};
    TRY(memra_gguf_writer_set(w, "nested", &outer, &err));
    uint64_t ne_f[2] = {8, 4}, ne_q[2] = {32, 2};
    TRY(memra_gguf_writer_add_tensor(w, "token_embd.weight", MEMRA_TYPE_F32, 2, ne_f, bytes, &err));
    TRY(memra_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", MEMRA_TYPE_Q8_0, 2, ne_q, bytes, &err));
    if (write_seed(w, dir, "rich_v3.gguf"))
        return 1;

    /* 2: version 2, F16 and BF16 tensors, alignment 64. */
    TRY(memra_gguf_writer_new(2, 64, &w, &err));
    TRY(memra_gguf_writer_set_str(w, "general.name", "tiny", &err));
    uint64_t ne_h[1] = {16};
    TRY(memra_gguf_writer_add_tensor(w, "a", MEMRA_TYPE_F16, 1, ne_h, bytes, &err));
    TRY(memra_gguf_writer_add_tensor(w, "b", MEMRA_TYPE_BF16, 1, ne_h, bytes, &err));
    if (write_seed(w, dir, "v2_align64.gguf"))
        return 1;

    /* 3: a Q4_K tensor (readable, not computed with) in four dimensions. */
    TRY(memra_gguf_writer_new(3, 0, &w, &err));
    uint64_t ne_k[4] = {256, 1, 2, 1};
    TRY(memra_gguf_writer_add_tensor(w, "q4k", MEMRA_TYPE_Q4_K, 4, ne_k, bytes, &err));
    if (write_seed(w, dir, "q4k.gguf"))
        return 1;

    /* 4: nothing but the header. */
    TRY(memra_gguf_writer_new(3, 0, &w, &err));
    if (write_seed(w, dir, "empty.gguf"))
        return 1;

    /* 5: arrays nested eight deep, and an array of arrays of strings. */
    TRY(memra_gguf_writer_new(3, 0, &w, &err));
    memra_gguf_value levels[8];
    levels[0] = (memra_gguf_value){.type = MEMRA_GGUF_ARRAY,
                                   .v.arr = {.elem_type = MEMRA_GGUF_UINT8, .count = 3, .data = bytes}};
    for (int d = 1; d < 8; d++)
        levels[d] = (memra_gguf_value){.type = MEMRA_GGUF_ARRAY,
                                       .v.arr = {.elem_type = MEMRA_GGUF_ARRAY, .count = 1, .items = &levels[d - 1]}};
    TRY(memra_gguf_writer_set(w, "deep", &levels[7], &err));
    memra_gguf_value strs[2] = {{.type = MEMRA_GGUF_STRING, .v.str = {"ab", 2}},
                                {.type = MEMRA_GGUF_STRING, .v.str = {"c", 1}}};
    memra_gguf_value sa = {.type = MEMRA_GGUF_ARRAY,
                           .v.arr = {.elem_type = MEMRA_GGUF_STRING, .count = 2, .items = strs}};
    memra_gguf_value ssa = {.type = MEMRA_GGUF_ARRAY,
                            .v.arr = {.elem_type = MEMRA_GGUF_ARRAY, .count = 1, .items = &sa}};
    TRY(memra_gguf_writer_set(w, "strings", &ssa, &err));
    if (write_seed(w, dir, "nested.gguf"))
        return 1;
    return 0;
}
