/* test_tools_models.c: `memra inspect --check` on the two real models of issue 17 (SmolLM2-135M-
 * Instruct Q4_1, Gemma 3 270M Q4_K_M) from the model cache: nothing stops a run on the cpu backend,
 * and the "can it run?" section names what each file holds and whether the cuda backend runs it
 * (both since issue 26); the gemma3-270m preset with --dtype q4_k_m has the real file's tensors, type
 * for type and shape for shape. When a file is absent its test is skipped with the reason printed. */
#include <string.h>

#include "memra/gguf.h"
#include "memra/synth.h"
#include "model_cache.h"
#include "tool_run.h"

static void expect_section(const char *file, const char *const *needles) {
    char path[4200];
    if (!model_cache_require(file, path, sizeof path))
        return;
    tool_result r = tool_run("memra", "inspect", "--check", path, NULL);
    cr_assert_eq(r.code, 0, "memra inspect --check %s: exit %d: %s", file, r.code, r.err);
    cr_assert_str_eq(r.err, "");
    const char *start = strstr(r.out, "\ncan it run?"), *end = strstr(r.out, "\nmetadata (");
    cr_assert(start && end && start < end, "no 'can it run?' section before the metadata:\n%s", r.out);
    for (size_t i = 0; needles[i]; i++) {
        const char *at = strstr(start, needles[i]);
        cr_assert(at && at < end, "the section lacks '%s':\n%.*s", needles[i], (int)(end - start), start);
    }
    tool_result_free(&r);
}

Test(inspect_models, smollm2) {
    expect_section(MODEL_SMOLLM2,
                   (const char *const[]){
                       "architecture:     ok: llama\n", "tensor types:     ok: 272 tensors: F32 61, Q4_1 210, Q8_0 1\n",
                       "tokenizer:        ok: gpt2, pre-tokenizer smollm, 49152 tokens\n",
                       "chat format:      ok: chatml, from the file's chat template", "cpu: runs it\n",
                       "cuda, cuda-graph: runs it",
                       "verdict:          runs on the cpu backend: token ids, --prompt and --chat\n", NULL});
}

Test(inspect_models, gemma3) {
    expect_section(
        MODEL_GEMMA3,
        (const char *const[]){"architecture:     ok: gemma3\n",
                              "tensor types:     ok: 236 tensors: F32 109, Q5_0 81, Q8_0 10, Q4_K 27, Q6_K 9\n",
                              "tokenizer:        ok: llama, pre-tokenizer sentencepiece, 262144 tokens\n",
                              "chat format:      ok: gemma, from the architecture gemma", "cpu: runs it\n",
                              "cuda, cuda-graph: runs it",
                              "verdict:          runs on the cpu backend: token ids, --prompt and --chat\n", NULL});
}

/* `memra mkmodel --preset smollm2-135m --dtype q4_1` lists the real SmolLM2-135M-Instruct.Q4_1
 * file's 272 tensors by name, each in the file's type (Q4_1, the tied token_embd Q8_0, the norms
 * F32) and shape. */
Test(inspect_models, smollm2_135m_preset_has_the_real_files_types) {
    char path[4200];
    if (!model_cache_require(MODEL_SMOLLM2, path, sizeof path))
        return;
    memra_error err = {0};
    memra_gguf *g;
    cr_assert_eq(memra_gguf_open(path, &g, &err), MEMRA_OK, "%s", err.msg);
    memra_synth_spec spec = {"smollm2-135m", MEMRA_TYPE_Q4_1, 1};
    memra_synth_tensor_info *ts;
    uint32_t n;
    cr_assert_eq(memra_synth_list_tensors(&spec, &ts, &n, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(n, memra_gguf_tensor_count(g), "the preset has %u tensors, the file %llu", n,
                 (unsigned long long)memra_gguf_tensor_count(g));
    for (uint32_t i = 0; i < n; i++) {
        const memra_gguf_tensor *t = memra_gguf_find_tensor(g, ts[i].name);
        cr_assert_not_null(t, "the real file has no %s", ts[i].name);
        cr_assert_eq(t->type, ts[i].type, "%s: the preset writes %s, the real file has %s", ts[i].name,
                     memra_tensor_type_name(ts[i].type), memra_tensor_type_name(t->type));
        uint64_t rows = t->n_dims == 1 ? 1 : t->ne[1];
        cr_assert(t->ne[0] == ts[i].cols && rows == ts[i].rows, "%s: the preset is [%llu, %llu], the file [%llu, %llu]",
                  ts[i].name, (unsigned long long)ts[i].cols, (unsigned long long)ts[i].rows,
                  (unsigned long long)t->ne[0], (unsigned long long)rows);
    }
    free(ts);
    memra_gguf_close(g);
}

/* `memra mkmodel --preset gemma3-270m --dtype q4_k_m` lists the real file's 236 tensors by name,
 * each in the real file's type and shape (llama.cpp's Q4_K_M rule, synth.c's mix_type, gives
 * every one: the fallbacks for 640 columns, use_more_bits on attn_v and ffn_down, a tied
 * token_embd in Q8_0). Only the order in the file differs (llama.cpp sorts by name within a layer). */
Test(inspect_models, gemma3_270m_preset_has_the_real_files_types) {
    char path[4200];
    if (!model_cache_require(MODEL_GEMMA3, path, sizeof path))
        return;
    memra_error err = {0};
    memra_gguf *g;
    cr_assert_eq(memra_gguf_open(path, &g, &err), MEMRA_OK, "%s", err.msg);
    memra_synth_spec spec = {"gemma3-270m", MEMRA_SYNTH_Q4_K_M, 1};
    memra_synth_tensor_info *ts;
    uint32_t n;
    cr_assert_eq(memra_synth_list_tensors(&spec, &ts, &n, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(n, memra_gguf_tensor_count(g), "the preset has %u tensors, the file %llu", n,
                 (unsigned long long)memra_gguf_tensor_count(g));
    for (uint32_t i = 0; i < n; i++) {
        const memra_gguf_tensor *t = memra_gguf_find_tensor(g, ts[i].name);
        cr_assert_not_null(t, "the real file has no %s", ts[i].name);
        cr_assert_eq(t->type, ts[i].type, "%s: the preset writes %s, the real file has %s", ts[i].name,
                     memra_tensor_type_name(ts[i].type), memra_tensor_type_name(t->type));
        uint64_t rows = t->n_dims == 1 ? 1 : t->ne[1];
        cr_assert(t->ne[0] == ts[i].cols && rows == ts[i].rows, "%s: the preset is [%llu, %llu], the file [%llu, %llu]",
                  ts[i].name, (unsigned long long)ts[i].cols, (unsigned long long)ts[i].rows,
                  (unsigned long long)t->ne[0], (unsigned long long)rows);
    }
    free(ts);
    memra_gguf_close(g);
}
