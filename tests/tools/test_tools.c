/* test_tools.c: the memra command as a user meets it: exit codes (0 ok, 2 usage, 3 error), the
 * messages of usage errors, --help of every subcommand, --version, inspect of a generated file,
 * run's token stream and --dump-logits files, bench's JSON line, plugins' table. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_files.h"
#include "tool_run.h"

static void expect_impl(const tool_result *r, int code, const char *which, const char *text, const char *needle) {
    cr_assert_eq(r->code, code, "exit %d, expected %d; stderr: %s", r->code, code, r->err);
    if (needle)
        cr_assert_not_null(strstr(text, needle), "%s lacks '%s':\n%s", which, needle, text);
}
#define EXPECT(r, want_code, stream, needle) expect_impl(&(r), (want_code), #stream, (r).stream, (needle))

/* The cpu backend is always built in this tree: its absence is a failure, never a skip. */
static void require_cpu_backend(void) { tool_require_manifest("cpu.backend.manifest"); }

Test(tools, no_command_is_usage) {
    tool_result r = tool_run("memra", NULL);
    EXPECT(r, 2, err, "usage: memra COMMAND");
    tool_result_free(&r);
    r = tool_run("memra", "frobnicate", NULL);
    EXPECT(r, 2, err, "memra: unknown command 'frobnicate'");
    tool_result_free(&r);
    r = tool_run("memra", "--frobnicate", NULL);
    EXPECT(r, 2, err, "unknown option '--frobnicate'");
    tool_result_free(&r);
}

Test(tools, help_and_version) {
    tool_result r = tool_run("memra", "--help", NULL);
    EXPECT(r, 0, out, "usage: memra COMMAND");
    tool_result_free(&r);
    r = tool_run("memra", "--version", NULL);
    EXPECT(r, 0, out, "memra 0.1.0 (commit ");
    tool_result_free(&r);
    const char *subs[] = {"plugins", "inspect", "mkmodel", "run", "bench"};
    for (size_t i = 0; i < 5; i++) {
        char want[64];
        snprintf(want, sizeof want, "usage: memra %s", subs[i]);
        r = tool_run("memra", subs[i], "--help", NULL);
        EXPECT(r, 0, out, want);
        cr_assert_eq(r.err[0], '\0', "memra %s --help wrote to stderr: %s", subs[i], r.err);
        tool_result_free(&r);
        r = tool_run("memra", subs[i], "-h", NULL);
        EXPECT(r, 0, out, want);
        tool_result_free(&r);
    }
}

Test(tools, unknown_flags_are_usage_errors_naming_the_flag) {
    const char *subs[] = {"plugins", "inspect", "mkmodel", "run", "bench"};
    for (size_t i = 0; i < 5; i++) {
        char want[96];
        snprintf(want, sizeof want, "memra %s: unknown option '--no-such-flag'", subs[i]);
        tool_result r = tool_run("memra", subs[i], "--no-such-flag", NULL);
        EXPECT(r, 2, err, want);
        tool_result_free(&r);
    }
}

Test(tools, bad_values_are_usage_errors) {
    tool_result r = tool_run("memra", "run", "--model", NULL);
    EXPECT(r, 2, err, "memra run: option '--model' needs a value");
    tool_result_free(&r);
    r = tool_run("memra", "run", "-n", "abc", NULL);
    EXPECT(r, 2, err, "memra run: -n 'abc': expected an integer");
    tool_result_free(&r);
    r = tool_run("memra", "run", "--preset", "huge", NULL);
    EXPECT(r, 2, err, "memra run: --preset 'huge': expected tiny");
    tool_result_free(&r);
    r = tool_run("memra", "run", "--dtype", "q2_k", NULL);
    EXPECT(r, 2, err, "--dtype 'q2_k'");
    tool_result_free(&r);
    r = tool_run("memra", "run", "--top-k", "5", NULL);
    EXPECT(r, 2, err, "--top-k samples: it needs --temp T");
    tool_result_free(&r);
    r = tool_run("memra", "run", "--model", "x.gguf", "--preset", "tiny", NULL);
    EXPECT(r, 2, err, "--model and --preset exclude each other");
    tool_result_free(&r);
    r = tool_run("memra", "run", "--tokens", "1,,2", NULL);
    EXPECT(r, 2, err, "--tokens '1,,2'");
    tool_result_free(&r);
    r = tool_run("memra", "run", "-n", "4", "-n", "5", NULL);
    EXPECT(r, 2, err, "option '--n-gen' is given twice");
    tool_result_free(&r);
    r = tool_run("memra", "bench", "--reps", "0", NULL);
    EXPECT(r, 2, err, "memra bench: --reps '0'");
    tool_result_free(&r);
    r = tool_run("memra", "mkmodel", "--preset", "tiny", NULL);
    EXPECT(r, 2, err, "memra mkmodel: no output file");
    tool_result_free(&r);
    r = tool_run("memra", "mkmodel", "--preset", "huge", "-o", "/tmp/never-written.gguf", NULL);
    EXPECT(r, 2, err, "unknown preset 'huge'");
    tool_result_free(&r);
    r = tool_run("memra", "inspect", NULL);
    EXPECT(r, 2, err, "memra inspect: no file given");
    tool_result_free(&r);
    r = tool_run("memra", "inspect", "a.gguf", "b.gguf", NULL);
    EXPECT(r, 2, err, "unexpected argument 'b.gguf'");
    tool_result_free(&r);
}

Test(tools, missing_files_are_errors) {
    tool_result r = tool_run("memra", "inspect", "/nonexistent/model.gguf", NULL);
    EXPECT(r, 3, err, "/nonexistent/model.gguf");
    tool_result_free(&r);
    r = tool_run("memra", "run", "--model", "/nonexistent/model.gguf", NULL);
    EXPECT(r, 3, err, "/nonexistent/model.gguf");
    tool_result_free(&r);
    char path[512];
    tmp_file_path(path, sizeof path, "garbage.gguf");
    file_write_text(path, "this is not a gguf file at all, not even close");
    r = tool_run("memra", "inspect", path, NULL);
    EXPECT(r, 3, err, path);
    tool_result_free(&r);
    unlink(path);
    r = tool_run("memra", "mkmodel", "-o", "/nonexistent/dir/m.gguf", NULL);
    EXPECT(r, 3, err, "/nonexistent/dir/m.gguf");
    tool_result_free(&r);
}

/* mkmodel says which types its matrices got, and when a plain --dtype could not be kept (a
 * K-quant matrix whose columns are not a multiple of 256 is written as Q8_0: every matrix of the
 * tiny presets), so a test "on q4_k" of such a file is not mistaken for one of K-quant kernels. */
Test(tools, mkmodel_says_the_types_it_wrote) {
    char path[512];
    tmp_file_path(path, sizeof path, "kq.gguf");
    tool_result r = tool_run("memra", "mkmodel", "--preset", "qwen2-tiny", "--dtype", "q4_k", "-o", path, NULL);
    EXPECT(r, 0, err, "memra mkmodel: matrices: Q8_0 30");
    cr_assert(strstr(r.err, "note: 30 of 30 matrices are not Q4_K"), "%s", r.err);
    tool_result_free(&r);
    r = tool_run("memra", "mkmodel", "--preset", "small", "--dtype", "q4_k", "-o", path, NULL);
    EXPECT(r, 0, err, "memra mkmodel: matrices: Q4_K 43");
    cr_assert(!strstr(r.err, "note:"), "every matrix of small is Q4_K: %s", r.err);
    tool_result_free(&r);
    r = tool_run("memra", "mkmodel", "--preset", "small", "--dtype", "q4_k_m", "-o", path, NULL);
    EXPECT(r, 0, err, "memra mkmodel: matrices: Q6_K 5, Q4_K 38");
    cr_assert(!strstr(r.err, "note:"), "a mix has no single type to keep: %s", r.err);
    tool_result_free(&r);
    /* smollm2-135m's tied head is Q8_0 as in the published Q4_1 file (llama.cpp's head rule) */
    r = tool_run("memra", "mkmodel", "--preset", "smollm2-135m", "--dtype", "q4_1", "-o", path, NULL);
    EXPECT(r, 0, err, "memra mkmodel: matrices: Q8_0 1, Q4_1 210");
    cr_assert(strstr(r.err, "note: 1 of 211 matrices are not Q4_1"), "%s", r.err);
    tool_result_free(&r);
    unlink(path);
}

Test(tools, mkmodel_then_inspect) {
    char path[512];
    tmp_file_path(path, sizeof path, "qwen3.gguf");
    tool_result r =
        tool_run("memra", "mkmodel", "--preset", "qwen3-tiny", "--dtype", "q8_0", "--seed", "3", "-o", path, NULL);
    EXPECT(r, 0, err, "memra mkmodel: wrote");
    tool_result_free(&r);
    r = tool_run("memra", "inspect", "--tensors", path, NULL); /* the list: --tensors (issue 31.9) */
    EXPECT(r, 0, out, "general.architecture");
    const char *needles[] = {"\"qwen3\"",
                             "tokenizer.ggml.tokens",
                             "string[512]",
                             "\"<unk>\", \"<s>\", \"</s>\"",
                             "... 504 more",
                             "blk.3.attn_k_norm.weight",
                             "Q8_0",
                             "total tensor bytes",
                             "architecture:     qwen3",
                             "head_dim (k, v):  32, 32",
                             "neox pairing",
                             "per-head q/k norm",
                             "tied to token_embd.weight",
                             "can it run?",
                             "architecture:     ok: qwen3",
                             "tensor types:     ok: 46 tensors: F32 17, Q8_0 29",
                             "tokenizer:        ok: llama, pre-tokenizer sentencepiece, 512 tokens",
                             "chat format:      STOP for --chat (none): no chat template (tokenizer.chat_template)",
                             "cpu: runs it",
                             "verdict:          runs on the cpu backend: token ids, --prompt (not --chat)"};
    for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
        cr_assert_not_null(strstr(r.out, needles[i]), "inspect output lacks '%s':\n%s", needles[i], r.out);
    tool_result_free(&r);
    r = tool_run("memra", "inspect", "--arrays", "2", path, NULL);
    EXPECT(r, 0, out, "\"<unk>\", \"<s>\", ... 510 more");
    tool_result_free(&r);
    unlink(path);
}

/* Issue 29: a mixture-of-experts file runs on the cpu backend and on the cuda backends (on ranks
 * too: ep=N, tp=N), its experts in any type the dense GEMVs run: Q4_0 experts too since the
 * session of 2026-12-03, thirteenth (inspect said "cannot: expert tensor ... is Q4_0" before; a
 * type no cuda kernel takes is refused by name: test_cuda_refusals' moe_types). */
Test(tools, inspect_says_what_cuda_runs_of_moe) {
    char path[512];
    tmp_file_path(path, sizeof path, "moe.gguf");
    tool_result r = tool_run("memra", "mkmodel", "--preset", "moe-tiny", "-o", path, NULL);
    EXPECT(r, 0, err, "memra mkmodel: wrote");
    tool_result_free(&r);
    r = tool_run("memra", "inspect", path, NULL);
    EXPECT(r, 0, out, "cpu: runs it");
    cr_assert(strstr(r.out, "cuda, cuda-graph: runs it (where built, on a GPU; its experts on ranks too: ep=N, tp=N)"),
              "%s", r.out);
    tool_result_free(&r);
    r = tool_run("memra", "mkmodel", "--preset", "moe-tiny", "--dtype", "q4_0", "-o", path, NULL);
    EXPECT(r, 0, err, "memra mkmodel: wrote");
    tool_result_free(&r);
    r = tool_run("memra", "inspect", path, NULL);
    EXPECT(r, 0, out, "cpu: runs it");
    cr_assert(strstr(r.out, "cuda, cuda-graph: runs it (where built, on a GPU; its experts on ranks too: ep=N, tp=N)"),
              "%s", r.out);
    tool_result_free(&r);
    unlink(path);
}

/* llama.cpp's Q4_K_M mix on small (6 layers, tied, 256 columns): Q6_K for the tied token_embd and
 * for attn_v and ffn_down on layers 2 and 5 (use_more_bits), Q4_K elsewhere: 1 + 2 + 2 Q6_K and
 * 30 + 4 + 4 Q4_K, as worked out by hand from the rule; file type 15 (MOSTLY_Q4_K_M). inspect
 * shows the mix, and the cpu backend runs it: a short gate, cpu against cpu:stages=2. */
Test(tools, mkmodel_q4_k_m_mix_inspect_and_gate) {
    require_cpu_backend();
    char path[512];
    tmp_file_path(path, sizeof path, "small-q4km.gguf");
    tool_result r = tool_run("memra", "mkmodel", "--preset", "small", "--dtype", "q4_k_m", "-o", path, NULL);
    EXPECT(r, 0, err, "preset small, Q4_K_M, seed 1");
    tool_result_free(&r);
    r = tool_run("memra", "inspect", "--tensors", path, NULL);
    const char *needles[] = {"tensor types:     ok: 57 tensors: F32 14, Q4_K 38, Q6_K 5",
                             "general.file_type                            uint32         15",
                             "token_embd.weight                Q6_K",
                             "blk.1.attn_v.weight              Q4_K",
                             "blk.2.attn_v.weight              Q6_K",
                             "blk.2.ffn_down.weight            Q6_K",
                             "blk.4.ffn_down.weight            Q4_K",
                             "blk.5.ffn_down.weight            Q6_K",
                             "blk.5.attn_q.weight              Q4_K"};
    EXPECT(r, 0, out, NULL);
    for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
        cr_assert_not_null(strstr(r.out, needles[i]), "inspect output lacks '%s':\n%s", needles[i], r.out);
    tool_result_free(&r);
    r = tool_run("memra-gate", "--model", path, "--a", "cpu", "--b", "cpu:stages=2", "--prime", "8", "-n", "8",
                 "--rows", "0", NULL);
    EXPECT(r, 0, err, "PASS (exit 0)");
    tool_result_free(&r);
    unlink(path);
}

Test(tools, plugins_lists_the_cpu_backend) {
    require_cpu_backend();
    tool_result r = tool_run("memra", "plugins", NULL);
    EXPECT(r, 0, out, "folders searched");
    cr_assert(strstr(r.out, "cpu ") && strstr(r.out, "backend"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "libmemra-backend-cpu.so"), "%s", r.out);
    tool_result_free(&r);
}

/* Counts whitespace-separated words. */
static size_t count_words(const char *s) {
    size_t n = 0;
    for (bool in = false; *s; s++) {
        bool space = *s == ' ' || *s == '\n';
        n += !space && !in;
        in = !space;
    }
    return n;
}

Test(tools, run_prints_tokens_and_dumps_logits) {
    require_cpu_backend();
    char path[512], json_path[600];
    tmp_file_path(path, sizeof path, "logits.f32");
    snprintf(json_path, sizeof json_path, "%s.json", path);
    tool_result r =
        tool_run("memra", "run", "--preset", "tiny", "--tokens", "1,5,9", "-n", "8", "--dump-logits", path, NULL);
    EXPECT(r, 0, err, "tok/s");
    cr_assert_not_null(strstr(r.err, "peak RSS"), "%s", r.err);
    cr_assert_eq(count_words(r.out), 8, "expected 8 token ids, got: %s", r.out);
    /* 3 prompt steps + 7 steps feeding generated tokens: 10 rows of 512 floats. */
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_size, 10 * 512 * 4, "logits file has %lld bytes", (long long)st.st_size);
    char *json = file_slurp(json_path, NULL);
    cr_assert_not_null(strstr(json, "\"n_vocab\": 512"), "%s", json);
    cr_assert_not_null(strstr(json, "\"steps\": 10"), "%s", json);
    /* The inputs: the prompt, then the first 7 generated tokens. */
    char want[512];
    int k = snprintf(want, sizeof want, "\"tokens\": [1, 5, 9");
    const char *p = r.out;
    for (int i = 0; i < 7; i++) {
        long t = strtol(p, (char **)&p, 10);
        k += snprintf(want + k, sizeof want - (size_t)k, ", %ld", t);
    }
    snprintf(want + k, sizeof want - (size_t)k, "]");
    cr_assert_not_null(strstr(json, want), "JSON %s lacks %s", json, want);
    free(json);

    /* Greedy decoding: the same tokens again, and the same logits. */
    char *logits = file_slurp(path, NULL);
    tool_result r2 =
        tool_run("memra", "run", "--preset", "tiny", "--tokens", "1,5,9", "-n", "8", "--dump-logits", path, NULL);
    EXPECT(r2, 0, err, NULL);
    cr_assert_str_eq(r2.out, r.out);
    char *logits2 = file_slurp(path, NULL);
    cr_assert(memcmp(logits, logits2, 10 * 512 * 4) == 0, "two greedy runs dumped different logits");
    free(logits);
    free(logits2);
    tool_result_free(&r2);
    tool_result_free(&r);
    unlink(path);
    unlink(json_path);
}

Test(tools, run_refuses_bad_tokens_and_arms) {
    require_cpu_backend();
    tool_result r = tool_run("memra", "run", "--tokens", "512", NULL);
    EXPECT(r, 2, err, "token 512 is not below n_vocab 512");
    tool_result_free(&r);
    r = tool_run("memra", "run", "--backend", "cpu:no_such_key=1", NULL);
    EXPECT(r, 2, err, "no_such_key");
    tool_result_free(&r);
    r = tool_run("memra", "run", "--backend", "nosuchbackend", NULL); /* a usage error naming it (issue 14) */
    EXPECT(r, 2, err, "nosuchbackend");
    tool_result_free(&r);
}

Test(tools, run_samples_with_a_seed) {
    require_cpu_backend();
    tool_result a = tool_run("memra", "run", "-n", "16", "--temp", "1", "--top-k", "40", "--seed", "7", NULL);
    tool_result b = tool_run("memra", "run", "-n", "16", "--temp", "1", "--top-k", "40", "--seed", "7", NULL);
    tool_result c = tool_run("memra", "run", "-n", "16", "--temp", "1", "--top-k", "40", "--seed", "8", NULL);
    EXPECT(a, 0, err, NULL);
    EXPECT(c, 0, err, NULL);
    cr_assert_str_eq(a.out, b.out, "the same seed sampled different tokens");
    cr_assert_str_neq(a.out, c.out, "seeds 7 and 8 sampled the same 16 tokens");
    tool_result_free(&a);
    tool_result_free(&b);
    tool_result_free(&c);
}

/* Issue 28: run feeds the prompt's unsampled steps in the arm's prefill chunks (cpu: 64), with
 * the tokens of one step at a time (prefill=1) and of an odd chunk (7); a prompt one token apart
 * samples otherwise (the comparison sees a changed prefix). */
Test(tools, run_prefill_chunks_give_the_tokens_of_single_steps) {
    require_cpu_backend();
    char toks[400] = "", other[400];
    for (int i = 0; i < 40; i++)
        snprintf(toks + strlen(toks), sizeof toks - strlen(toks), "%s%d", i ? "," : "", 100 + 7 * i);
    memcpy(other, toks, sizeof toks);
    other[0] = '2'; /* 100 -> 200 */
    const char *arms[] = {"cpu:prefill=1", "cpu", "cpu:prefill=7"};
    tool_result r[3];
    for (int i = 0; i < 3; i++) {
        r[i] = tool_run("memra", "run", "--preset", "small", "--arm", arms[i], "--tokens", toks, "-n", "24", "--temp",
                        "1", "--seed", "5", NULL);
        EXPECT(r[i], 0, err, NULL);
    }
    cr_assert_str_eq(r[0].out, r[1].out, "prefill=64 sampled other tokens than prefill=1");
    cr_assert_str_eq(r[0].out, r[2].out, "prefill=7 sampled other tokens than prefill=1");
    tool_result o = tool_run("memra", "run", "--preset", "small", "--tokens", other, "-n", "24", "--temp", "1", "--seed",
                             "5", NULL);
    EXPECT(o, 0, err, NULL);
    cr_assert_str_neq(r[0].out, o.out, "a prompt one token apart sampled the same 24 tokens");
    for (int i = 0; i < 3; i++)
        tool_result_free(&r[i]);
    tool_result_free(&o);
}

/* Issue 23 item 9: run and the gate take the same sampling ranges (one rule in the core): what
 * one refuses the other refuses, with exit 2; what one takes the other takes. */
Test(tools, run_and_gate_share_sampling_ranges) {
    require_cpu_backend();
    const char *bad[][4] = {{"--temp", "0", NULL, NULL},       {"--temp", "1001", NULL, NULL},
                            {"--temp", "1e-46", NULL, NULL},   {"--temp", "1", "--top-p", "0"},
                            {"--temp", "1", "--top-p", "1.5"}, {"--temp", "1", "--top-p", "0.99999999"},
                            {"--temp", "1", "--top-k", "-1"},  {"--temp", "1", "--seed", "x"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tool_result r = tool_run("memra", "run", "-n", "2", bad[i][0], bad[i][1], bad[i][2], bad[i][3], NULL);
        cr_assert_eq(r.code, 2, "run %s %s %s %s: exit %d: %s", bad[i][0], bad[i][1], bad[i][2] ? bad[i][2] : "",
                     bad[i][3] ? bad[i][3] : "", r.code, r.err);
        tool_result g = tool_run("memra-gate", "--a", "cpu", "--b", "cpu", "--prime", "2", "--gen", "2", "--rows", "0",
                                 bad[i][0], bad[i][1], bad[i][2], bad[i][3], NULL);
        cr_assert_eq(g.code, 2, "gate %s %s: exit %d: %s", bad[i][0], bad[i][1], g.code, g.err);
        tool_result_free(&r);
        tool_result_free(&g);
    }
    /* negative control: values inside the ranges run in both */
    tool_result r = tool_run("memra", "run", "-n", "2", "--temp", "0.5", "--top-p", "0.9", "--top-k", "5", NULL);
    cr_assert_eq(r.code, 0, "%s", r.err);
    tool_result g = tool_run("memra-gate", "--a", "cpu", "--b", "cpu", "--prime", "2", "--gen", "2", "--rows", "0",
                             "--temp", "0.5", "--top-p", "0.9", "--top-k", "5", "--quiet", NULL);
    cr_assert_eq(g.code, 0, "%s", g.err);
    tool_result_free(&r);
    tool_result_free(&g);
}

/* Issue 23 item 4: bench refuses --prime + -n beyond the model's context length (the tiny preset's
 * 2048) with both numbers; --allow-past-context runs it and the record says so. */
Test(tools, bench_context_length_is_a_limit) {
    require_cpu_backend();
    char path[512];
    tmp_file_path(path, sizeof path, "bench_ctx.jsonl");
    unlink(path);
    tool_result r = tool_run("memra", "bench", "--preset", "tiny", "--prime", "2040", "-n", "10", "--reps", "1",
                             "--warmup", "0", "--jsonl", path, NULL);
    EXPECT(r, 2, err, "2050");
    cr_assert(strstr(r.err, "2048") && strstr(r.err, "--allow-past-context"), "%s", r.err);
    cr_assert_eq(access(path, F_OK), -1, "a refused run wrote a record");
    tool_result_free(&r);
    r = tool_run("memra", "bench", "--preset", "tiny", "--prime", "2040", "-n", "10", "--reps", "1", "--warmup", "0",
                 "--allow-past-context", "--jsonl", path, NULL);
    EXPECT(r, 0, out, "tok/s");
    tool_result_free(&r);
    r = tool_run("memra", "bench", "--preset", "tiny", "--prime", "16", "-n", "8", "--reps", "1", "--warmup", "0",
                 "--jsonl", path, NULL); /* negative control: within the limit */
    EXPECT(r, 0, out, "tok/s");
    tool_result_free(&r);
    char *lines = file_slurp(path, NULL);
    char *second = strchr(lines, '\n');
    cr_assert(second, "%s", lines);
    *second++ = '\0';
    cr_assert(strstr(lines, "\"context_length\": 2048, \"past_context\": true"), "%s", lines);
    cr_assert(strstr(second, "\"context_length\": 2048, \"past_context\": false"), "%s", second);
    free(lines);
    unlink(path);
}

Test(tools, bench_writes_a_json_line) {
    require_cpu_backend();
    char path[512];
    tmp_file_path(path, sizeof path, "bench.jsonl");
    unlink(path);
    tool_result r = tool_run("memra", "bench", "--preset", "tiny", "--prime", "16", "-n", "8", "--reps", "3", "--jsonl",
                             path, NULL);
    EXPECT(r, 0, out, "tok/s");
    cr_assert_not_null(strstr(r.out, "GB/s"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "device:       cpu"), "%s", r.out);
    char *line = file_slurp(path, NULL);
    const char *needles[] = {"\"record\": \"bench\"", "\"commit\": \"",   "\"device\": \"cpu",
                             "\"arm\": \"cpu\"",      "\"prime\": 16",    "\"n\": 8",
                             "\"reps\": 3",           "\"tok_s_mean\": ", "\"gb_s\": ",
                             "\"bytes_per_token\": ", "\"options\": {"};
    for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
        cr_assert_not_null(strstr(line, needles[i]), "JSON line lacks '%s': %s", needles[i], line);
    cr_assert_eq(line[strlen(line) - 1], '\n');
    cr_assert_eq(strchr(line, '\n'), line + strlen(line) - 1, "one line expected: %s", line);
    free(line);
    tool_result_free(&r);
    unlink(path);
}

/* Issue 29: a mixture of experts' step reads only the chosen experts. moe-tiny (F32): 2,108,672
 * weight bytes, of which the expert stacks are 4 layers x 3 x 8 experts x 64 x 64 x 4 = 1,572,864;
 * 2 of 8 experts are read: 1,179,648 fewer. The KV cache: 2,048 bytes a position, positions 17 to
 * 24 on average 20.5: 41,984. So 2,108,672 - 1,179,648 + 41,984 = 971,008 (all experts: 2,150,656). */
Test(tools, bench_counts_only_the_chosen_experts) {
    require_cpu_backend();
    char path[512];
    tmp_file_path(path, sizeof path, "bench_moe.jsonl");
    unlink(path);
    tool_result r = tool_run("memra", "bench", "--preset", "moe-tiny", "--prime", "16", "-n", "8", "--reps", "1",
                             "--jsonl", path, NULL);
    EXPECT(r, 0, out, "tok/s");
    char *line = file_slurp(path, NULL);
    cr_assert(strstr(line, "\"weight_bytes\": 2108672") && strstr(line, "\"bytes_per_token\": 971008"), "%s", line);
    free(line);
    tool_result_free(&r);
    unlink(path);
}

/* The gate's loop rule: the last 64 tokens periodic with some period <= 16. */
static int loop_period(const long *t, size_t n) {
    if (n < 64)
        return 0;
    const long *w = t + n - 64;
    for (int p = 1; p <= 16; p++) {
        int i = 0;
        while (i + p < 64 && w[i] == w[i + p])
            i++;
        if (i + p == 64)
            return p;
    }
    return 0;
}

/* Greedy streams of the synthetic models neither loop nor stop at EOS within 256 tokens, after
 * the default prompt (bos) and after the gate's default 256-token prompt, so every gate row on
 * them is eligible. */
Test(tools, synthetic_greedy_streams_do_not_loop, .timeout = 240) {
    require_cpu_backend();
    const char *presets[] = {"tiny", "small", "qwen3-tiny", "qwen2-tiny"};
    for (size_t p = 0; p < 4; p++) {
        long n_vocab = strcmp(presets[p], "small") == 0 ? 4096 : 512;
        static char prompt[4096];
        int k = 0;
        for (int i = 0; i < 256; i++) /* memra-gate's default prompt ids */
            k += snprintf(prompt + k, sizeof prompt - (size_t)k, "%s%ld", i ? "," : "", (100 + 7L * i % 900) % n_vocab);
        for (int with_prompt = 0; with_prompt < 2; with_prompt++) {
            tool_result r =
                with_prompt ? tool_run("memra", "run", "--preset", presets[p], "--tokens", prompt, "-n", "256", NULL)
                            : tool_run("memra", "run", "--preset", presets[p], "-n", "256", NULL);
            EXPECT(r, 0, err, NULL);
            long t[256];
            size_t n = 0;
            for (char *s = r.out, *end; n < 256; s = end) {
                t[n] = strtol(s, &end, 10);
                if (end == s)
                    break;
                n++;
            }
            cr_assert_eq(n, 256, "%s: %zu tokens", presets[p], n);
            for (size_t len = 64; len <= n; len++) {
                int period = loop_period(t, len);
                cr_assert_eq(period, 0, "%s%s: the stream loops with period %d after %zu tokens", presets[p],
                             with_prompt ? " (gate prompt)" : "", period, len);
            }
            for (size_t i = 0; i < n; i++)
                cr_assert_neq(t[i], 2, "%s%s: EOS at generated token %zu", presets[p],
                              with_prompt ? " (gate prompt)" : "", i);
            tool_result_free(&r);
        }
    }
}

/* An arm whose backend has no device (the cuda backend on a machine without a GPU), or with a key
 * no plugin takes, is named before the model is read or built: run and bench report it on a file
 * they could not even parse. The same file with a good arm (the control) fails on the file. */
Test(tools, no_device_is_said_before_the_model_is_loaded) {
    require_cpu_backend();
    tool_require_test_manifest("faulty.backend.manifest"); /* built by tests/gate/faulty */
    char path[512];
    tmp_file_path(path, sizeof path, "nodev.gguf");
    file_write_text(path, "this is not a gguf file");
    const char *cmds[2] = {"run", "bench"};
    for (int i = 0; i < 2; i++) {
        tool_result r = tool_run("memra", cmds[i], "--model", path, "--backend", "faulty:no_device=1", "-n", "2", NULL);
        EXPECT(r, 3, err, "faulty: no device (no_device=1)");
        cr_assert_not_null(strstr(r.err, "arm 'faulty:no_device=1'"), "%s: the arm is named: %s", cmds[i], r.err);
        cr_assert_null(strstr(r.err, path), "%s read the file before it asked for a device: %s", cmds[i], r.err);
        tool_result_free(&r);
        r = tool_run("memra", cmds[i], "--model", path, "--backend", "faulty:no_such_key=1", "-n", "2", NULL);
        EXPECT(r, 2, err, "no_such_key"); /* a usage error of the arm, before the file too */
        cr_assert_null(strstr(r.err, path), "%s read the file before it checked the arm's keys: %s", cmds[i], r.err);
        tool_result_free(&r);
        r = tool_run("memra", cmds[i], "--model", path, "--backend", "faulty", "-n", "2", NULL);
        EXPECT(r, 3, err, path); /* the control: with a device, the file is what fails */
        cr_assert_null(strstr(r.err, "no device"), "%s: %s", cmds[i], r.err);
        tool_result_free(&r);
    }
    unlink(path);
}

/* Bench times only a deterministic arm: the gate's test-only `faulty` backend reports one wrong
 * token in the third repetition (the third restore), and bench must refuse the figures. */
Test(tools, bench_refuses_an_arm_whose_repetitions_differ) {
    require_cpu_backend(); /* and the test-only faulty backend beside it (tests/gate/faulty) */
    tool_require_test_manifest("faulty.backend.manifest"); /* built by tests/gate/faulty */
    tool_result r = tool_run("memra", "bench", "--preset", "tiny", "--backend", "faulty:corrupt_row=2", "--prime", "16",
                             "-n", "8", "--reps", "3", NULL);
    EXPECT(r, 3, err, "memra bench: repetition 3 generated token");
    cr_assert_not_null(strstr(r.err, "is not deterministic"), "%s", r.err);
    cr_assert_null(strstr(r.out, "tok/s"), "bench printed figures for a nondeterministic arm:\n%s", r.out);
    tool_result_free(&r);
    /* the same with two steps in flight (the windowed pass bench runs the generated steps in) */
    r = tool_run("memra", "bench", "--preset", "tiny", "--backend", "faulty:corrupt_row=2,window=2", "--prime", "16",
                 "-n", "8", "--reps", "3", NULL);
    EXPECT(r, 3, err, "memra bench: repetition 3 generated token");
    cr_assert_null(strstr(r.out, "tok/s"), "bench printed figures for a nondeterministic arm:\n%s", r.out);
    tool_result_free(&r);
    r = tool_run("memra", "bench", "--preset", "tiny", "--backend", "faulty", "--prime", "16", "-n", "8", "--reps", "3",
                 NULL);
    EXPECT(r, 0, out, "tok/s");
    tool_result_free(&r);
    r = tool_run("memra", "bench", "--preset", "tiny", "--backend", "faulty:window=2", "--prime", "16", "-n", "8",
                 "--reps", "3", NULL);
    EXPECT(r, 0, out, "tok/s");
    tool_result_free(&r);
    /* a generated step that fails is named with the repetition and its positions (the backend
     * refuses its 37th step: the prefix's 16, the prompt's 16, then generated step 4) */
    r = tool_run("memra", "bench", "--preset", "tiny", "--backend", "faulty:max_steps=36", "--prime", "16", "-n", "8",
                 "--reps", "1", "--warmup", "0", NULL);
    EXPECT(r, 3, err, "memra bench: repetition 1, generating positions 16..23");
    cr_assert_not_null(strstr(r.err, "step 4 begin"), "%s", r.err);
    tool_result_free(&r);
}

/* The cuda backend's arm options are checked before any device is asked for, so a bad value is a
 * usage error naming the key on a machine without a GPU too (and cuda-graph takes the same keys).
 * Needs the cuda plugins built (MEMRA_CUDA); skipped with the reason where they are not. */
Test(tools, cuda_arm_options_are_checked_before_the_device) {
    const char *dir = getenv("MEMRA_BUILD_DIR");
    cr_assert_not_null(dir, "MEMRA_BUILD_DIR is not set (ctest sets it): cannot find the build's plugins");
    char path[1024];
    snprintf(path, sizeof path, "%s/plugins.d/cuda.backend.manifest", dir);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "SKIP: %s is missing (configured without MEMRA_CUDA)\n", path);
        cr_skip_test("the cuda plugins are not built");
    }
    tool_result r = tool_run("memra", "run", "--backend", "cuda:pdl=2", NULL);
    EXPECT(r, 2, err, "pdl=2: expected an integer from 0 to 1");
    tool_result_free(&r);
    r = tool_run("memra", "run", "--backend", "cuda-graph:pdl=x", NULL);
    EXPECT(r, 2, err, "pdl=x: expected an integer from 0 to 1");
    tool_result_free(&r);
    r = tool_run("memra", "run", "--backend", "cuda:pdl0", NULL);
    EXPECT(r, 2, err, "pdl0");
    tool_result_free(&r);
}
