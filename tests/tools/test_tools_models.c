/* test_tools_models.c: `memra inspect --check` on the two real models of issue 17 (SmolLM2-135M-
 * Instruct Q4_1, Gemma 3 270M Q4_K_M) from the model cache: nothing stops a run on the cpu backend,
 * and the "can it run?" section names what each file holds and whether the cuda backend runs it
 * (SmolLM2's Q4_1 since issue 26; Gemma 3's architecture not yet). When a file is absent its test is skipped with the reason printed. */
#include <string.h>

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
                              "cuda, cuda-graph: cannot: architecture gemma3",
                              "verdict:          runs on the cpu backend: token ids, --prompt and --chat\n", NULL});
}
