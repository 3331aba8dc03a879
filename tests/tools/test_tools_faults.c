/* test_tools_faults.c: files memra cannot run (issue 17, item 6). Each fault (a tensor type memra
 * lacks, a tensor type number no GGUF reader knows, a tokenizer kind or pre-tokenizer memra lacks,
 * an architecture it lacks, a chat template it refuses or none) gets from `memra run` exactly one
 * line on stderr naming what and where (the tensor, the key) and exit 3; `memra inspect` reports
 * it under "can it run?" with exit 0, and `memra inspect --check` exits 3 with one line when the
 * cpu backend could not run the file. Every fault is a copy of a synthetic preset with one thing
 * changed, and the unchanged copy is the negative control of every check. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/gguf.h"
#include "memra/synth.h"
#include "test_files.h"
#include "tool_run.h"

static char g_tmp[256];

static void setup(void) { tmp_dir_make(g_tmp, sizeof g_tmp, NULL, "faults"); }

static void teardown(void) { tmp_dir_remove(g_tmp); }

TestSuite(faults, .init = setup, .fini = teardown);

/* One change to a metadata key: a string value, or (value NULL) the key left out. */
typedef struct key_change {
    const char *key;
    const char *value;
} key_change;

/* One change of tensor type: every tensor named `name`, or ending in name + 1 when it starts with
 * '*'; its bytes are zeros of the new type's size. */
typedef struct type_change {
    const char *name;
    uint32_t type;
} type_change;

static bool name_matches(const char *pattern, const char *name) {
    if (pattern[0] != '*')
        return strcmp(pattern, name) == 0;
    size_t n = strlen(name), k = strlen(pattern + 1);
    return n >= k && strcmp(name + n - k, pattern + 1) == 0;
}

/* Writes preset (its matrices of type `type`, seed 1) to dir/file with the changes; the path. */
static char *craft(const char *file, const char *preset, uint32_t type, const key_change *keys, size_t n_keys,
                   const type_change *types, size_t n_types) {
    memra_error err = {0};
    memra_synth_spec spec = {.preset = preset, .type = type, .seed = 1};
    void *data = NULL;
    size_t size = 0;
    cr_assert_eq(memra_synth_build_memory(&spec, &data, &size, &err), MEMRA_OK, "%s", err.msg);
    memra_gguf *g = NULL;
    cr_assert_eq(memra_gguf_open_memory(data, size, preset, &g, &err), MEMRA_OK, "%s", err.msg);
    memra_gguf_writer *w = NULL;
    cr_assert_eq(memra_gguf_writer_new(3, 0, &w, &err), MEMRA_OK, "%s", err.msg);
    bool used[8] = {false};
    cr_assert_leq(n_keys, 8);
    for (uint64_t i = 0; i < memra_gguf_kv_count(g); i++) {
        const memra_gguf_kv *kv = memra_gguf_kv_at(g, i);
        size_t k = 0;
        while (k < n_keys && strcmp(keys[k].key, kv->key) != 0)
            k++;
        if (k == n_keys)
            cr_assert_eq(memra_gguf_writer_set(w, kv->key, &kv->value, &err), MEMRA_OK, "%s", err.msg);
        else if (keys[k].value)
            cr_assert_eq(memra_gguf_writer_set_str(w, kv->key, keys[k].value, &err), MEMRA_OK, "%s", err.msg);
        if (k < n_keys)
            used[k] = true;
    }
    for (size_t k = 0; k < n_keys; k++)
        if (!used[k] && keys[k].value)
            cr_assert_eq(memra_gguf_writer_set_str(w, keys[k].key, keys[k].value, &err), MEMRA_OK, "%s", err.msg);
    for (uint64_t i = 0; i < memra_gguf_tensor_count(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        uint32_t ty = t->type;
        void *zeros = NULL;
        for (size_t k = 0; k < n_types; k++)
            if (name_matches(types[k].name, t->name))
                ty = types[k].type;
        if (ty != t->type) {
            uint64_t block_elems, block_bytes;
            cr_assert(memra_tensor_type_block(ty, &block_elems, &block_bytes), "type %u", ty);
            cr_assert_eq(t->n_elems % block_elems, 0, "%s: %s blocks do not fit", t->name, memra_tensor_type_name(ty));
            zeros = calloc(1, t->n_elems / block_elems * block_bytes);
            cr_assert_not_null(zeros);
        }
        cr_assert_eq(memra_gguf_writer_add_tensor(w, t->name, ty, t->n_dims, t->ne, zeros ? zeros : t->data, &err),
                     MEMRA_OK, "%s", err.msg);
        free(zeros);
    }
    char *path = tmp_dir_path(g_tmp, file);
    cr_assert_eq(memra_gguf_writer_write_file(w, path, &err), MEMRA_OK, "%s", err.msg);
    memra_gguf_writer_free(w);
    memra_gguf_close(g);
    free(data);
    return path;
}

/* The unchanged tiny preset (F32), the control of every check below. */
static char *craft_tiny(const char *file, const key_change *keys, size_t n_keys) {
    return craft(file, "tiny", MEMRA_TYPE_F32, keys, n_keys, NULL, 0);
}

/* stderr is exactly one line holding every needle (NULL-terminated), and the exit code is 3. */
static void expect_one_line(const tool_result *r, const char *what, const char *const *needles) {
    cr_assert_eq(r->code, 3, "%s: exit %d, expected 3; stderr: %s", what, r->code, r->err);
    size_t n = strlen(r->err);
    cr_assert(n > 0 && r->err[n - 1] == '\n' && strchr(r->err, '\n') == r->err + n - 1,
              "%s: stderr is not exactly one line:\n%s", what, r->err);
    for (size_t i = 0; needles[i]; i++)
        cr_assert_not_null(strstr(r->err, needles[i]), "%s: stderr lacks '%s': %s", what, needles[i], r->err);
}

/* memra run on path (token ids, --prompt or --chat) fails with one line holding the needles. */
static void expect_run_fails(const char *path, const char *mode, const char *const *needles) {
    tool_result r = mode ? tool_run("memra", "run", "--model", path, mode, "hi", "-n", "2", NULL)
                         : tool_run("memra", "run", "--model", path, "-n", "2", NULL);
    char what[64];
    snprintf(what, sizeof what, "memra run %s", mode ? mode : "(token ids)");
    expect_one_line(&r, what, needles);
    cr_assert_str_eq(r.out, "", "%s printed output:\n%s", what, r.out);
    tool_result_free(&r);
}

static void expect_run_ok(const char *path, const char *mode) {
    tool_result r = mode ? tool_run("memra", "run", "--model", path, mode, "hi", "-n", "2", NULL)
                         : tool_run("memra", "run", "--model", path, "-n", "2", NULL);
    cr_assert_eq(r.code, 0, "memra run %s: exit %d: %s", mode ? mode : "(token ids)", r.code, r.err);
    tool_result_free(&r);
}

/* memra inspect path: exit 0, nothing on stderr, and the section holds every needle; then
 * --check: exit 3 with one line holding check_needles, or (check_needles NULL) exit 0. The
 * section's text is returned (free it). */
static char *expect_inspect(const char *path, const char *const *needles, const char *const *check_needles) {
    tool_result r = tool_run("memra", "inspect", path, NULL);
    cr_assert_eq(r.code, 0, "memra inspect: exit %d: %s", r.code, r.err);
    cr_assert_str_eq(r.err, "", "memra inspect wrote to stderr");
    const char *start = strstr(r.out, "\ncan it run?"), *end = strstr(r.out, "\nmetadata (");
    cr_assert(start && end && start < end, "no 'can it run?' section before the metadata:\n%s", r.out);
    char *section = strndup(start + 1, (size_t)(end - start - 1));
    for (size_t i = 0; needles[i]; i++)
        cr_assert_not_null(strstr(section, needles[i]), "the section lacks '%s':\n%s", needles[i], section);
    tool_result_free(&r);
    r = tool_run("memra", "inspect", "--check", path, NULL);
    if (check_needles) {
        expect_one_line(&r, "memra inspect --check", check_needles);
        cr_assert_not_null(strstr(r.err, "memra inspect: "), "%s", r.err);
        cr_assert_not_null(strstr(r.err, path), "the line does not name the file: %s", r.err);
    } else {
        cr_assert_eq(r.code, 0, "memra inspect --check: exit %d: %s", r.code, r.err);
        cr_assert_str_eq(r.err, "");
    }
    cr_assert_not_null(strstr(r.out, section), "--check printed another section:\n%s", r.out);
    tool_result_free(&r);
    return section;
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(faults, control_the_unchanged_preset_runs_and_inspects_clean) {
    tool_require_manifest("cpu.backend.manifest");
    char *path = craft_tiny("tiny.gguf", NULL, 0);
    expect_run_ok(path, NULL);
    expect_run_ok(path, "--prompt");
    char *s = expect_inspect(path,
                             NEEDLES("architecture:     ok: llama",
                                     "model:            ok:", "tensor types:     ok: 39 tensors: F32 39",
                                     "tokenizer:        ok: llama", "cpu: runs it", "cuda, cuda-graph: runs it",
                                     "verdict:          runs on the cpu backend: token ids, --prompt (not --chat)"),
                             NULL);
    cr_assert_null(strstr(s, "STOP: "), "%s", s);
    free(s);
}

Test(faults, tensor_types_memra_lacks) {
    tool_require_manifest("cpu.backend.manifest");
    /* small: n_embd 256 and n_ff 768, so K-quant blocks of 256 fit every matrix. */
    const type_change bad[] = {{"*ffn_down.weight", MEMRA_TYPE_Q2_K},
                               {"blk.0.attn_q.weight", MEMRA_TYPE_Q3_K},
                               {"blk.1.attn_k.weight", 16 /* IQ2_XXS */}};
    char *path = craft("types.gguf", "small", MEMRA_TYPE_Q8_0, NULL, 0, bad, 3);
    /* A run binds layer 0's attn_q first. */
    const char *const *line = NEEDLES("memra run: ", "tensor 'blk.0.attn_q.weight'", "Q3_K");
    expect_run_fails(path, NULL, line);
    expect_run_fails(path, "--prompt", line);
    char *s = expect_inspect(
        path,
        NEEDLES("tensor types:     STOP: 8 of 57 tensors have types memra lacks:\n",
                "Q2_K: 6 tensors: blk.0.ffn_down.weight, blk.1.ffn_down.weight, blk.2.ffn_down.weight, ... 3 more\n",
                "Q3_K: 1 tensor: blk.0.attn_q.weight\n", "IQ2_XXS: 1 tensor: blk.1.attn_k.weight\n",
                "architecture:     ok: llama", "cpu: cannot: tensor types",
                "cuda, cuda-graph: cannot: 6 tensors of type Q2_K",
                "verdict:          memra run stops: tensor types\n"),
        NEEDLES("memra run would stop: tensor 'blk.0.attn_q.weight' has type Q3_K",
                "8 of 57 tensors have types memra lacks"));
    cr_assert_null(strstr(s, "Q8_0:"), "a supported type is listed as lacking:\n%s", s);
    free(s);
    /* The control: the same preset and types, unchanged, runs. */
    char *good = craft("types_ok.gguf", "small", MEMRA_TYPE_Q8_0, NULL, 0, NULL, 0);
    expect_run_ok(good, NULL);
    free(expect_inspect(good, NEEDLES("tensor types:     ok: 57 tensors: F32 14, Q8_0 43", "cpu: runs it"), NULL));
}

/* The quantized types the cuda backend runs (issue 26): a Q4_0 file and a Q4_K file with Q6_K
 * attn_v (a Q4_K_M-like mix) run there. Before the cuda backend took these types, inspect said
 * "cannot: 43 tensors of type Q4_0". (A K-quant row of a partial block, which inspect refuses as
 * the cuda weights do, is no GGUF file: the writer and reader refuse it.) */
Test(faults, quantized_types_the_gpu_runs) {
    tool_require_manifest("cpu.backend.manifest");
    char *q4 = craft("q4_0.gguf", "small", MEMRA_TYPE_Q4_0, NULL, 0, NULL, 0);
    free(expect_inspect(q4, NEEDLES("tensor types:     ok: 57 tensors: F32 14, Q4_0 43", "cpu: runs it",
                                    "cuda, cuda-graph: runs it"),
                        NULL));
    const type_change v6[] = {{"*attn_v.weight", MEMRA_TYPE_Q6_K}};
    char *km = craft("q4_k_m.gguf", "small", MEMRA_TYPE_Q4_K, NULL, 0, v6, 1);
    free(expect_inspect(km, NEEDLES("cpu: runs it", "cuda, cuda-graph: runs it"), NULL));
}

/* A type number no reader knows: the file is not readable GGUF, for run and inspect alike. */
Test(faults, tensor_type_number_unknown_to_gguf) {
    char *path = craft_tiny("type99.gguf", NULL, 0);
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    const char name[] = "blk.0.attn_q.weight";
    char key[8 + sizeof name - 1];
    uint64_t len = sizeof name - 1;
    memcpy(key, &len, 8);
    memcpy(key + 8, name, len);
    char *at = memmem(buf, n, key, sizeof key);
    cr_assert_not_null(at, "no tensor info for %s in the first %zu bytes", name, n);
    long type_at = (long)(at - buf) + (long)sizeof key + 4 + 2 * 8; /* n_dims, then ne[0], ne[1] */
    uint32_t old = 0, type = 99;
    memcpy(&old, buf + type_at, 4);
    cr_assert_eq(old, MEMRA_TYPE_F32);
    cr_assert_eq(fseek(f, type_at, SEEK_SET), 0);
    cr_assert_eq(fwrite(&type, 4, 1, f), 1);
    cr_assert_eq(fclose(f), 0);
    const char *const *line = NEEDLES("tensor 'blk.0.attn_q.weight': unknown tensor type 99", path);
    expect_run_fails(path, NULL, line);
    tool_result r = tool_run("memra", "inspect", path, NULL);
    expect_one_line(&r, "memra inspect", line);
    tool_result_free(&r);
}

Test(faults, tokenizer_kind_memra_lacks) {
    tool_require_manifest("cpu.backend.manifest");
    const key_change bert[] = {{"tokenizer.ggml.model", "bert"}};
    char *path = craft_tiny("bert.gguf", bert, 1);
    const char *const *line = NEEDLES("memra run: ", "tokenizer kind 'bert' (tokenizer.ggml.model)", "bert.gguf");
    expect_run_fails(path, "--prompt", line);
    expect_run_fails(path, "--chat", line);
    expect_run_ok(path, NULL); /* token ids need no tokenizer */
    free(expect_inspect(path,
                        NEEDLES("tokenizer:        STOP for --prompt and --chat (token ids still run): tokenizer "
                                "kind 'bert' (tokenizer.ggml.model) is not supported",
                                "chat format:      STOP for --chat: no tokenizer", "cpu: runs it",
                                "verdict:          runs on the cpu backend with token ids only"),
                        NEEDLES("memra run --prompt would stop: tokenizer kind 'bert' (tokenizer.ggml.model)")));
}

Test(faults, no_tokenizer) {
    const key_change none[] = {{"tokenizer.ggml.model", NULL}};
    char *path = craft_tiny("notok.gguf", none, 1);
    expect_run_fails(path, "--prompt", NEEDLES("missing key 'tokenizer.ggml.model'", "notok.gguf"));
    free(expect_inspect(path, NEEDLES("tokenizer:        STOP for --prompt and --chat", "'tokenizer.ggml.model'"),
                        NEEDLES("memra run --prompt would stop: no tokenizer (missing key 'tokenizer.ggml.model')")));
}

Test(faults, pre_tokenizer_memra_lacks) {
    tool_require_manifest("cpu.backend.manifest");
    const key_change ds[] = {{"tokenizer.ggml.model", "gpt2"}, {"tokenizer.ggml.pre", "deepseek-llm"}};
    char *path = craft_tiny("deepseek.gguf", ds, 2);
    const char *const *line = NEEDLES("memra run: ", "pre-tokenizer 'deepseek-llm' (tokenizer.ggml.pre)", path);
    expect_run_fails(path, "--prompt", line);
    expect_run_fails(path, "--chat", line);
    expect_run_ok(path, NULL);
    free(expect_inspect(
        path, NEEDLES("tokenizer:        STOP for --prompt and --chat", "'deepseek-llm' (tokenizer.ggml.pre)"),
        NEEDLES("memra run --prompt would stop: pre-tokenizer 'deepseek-llm' (tokenizer.ggml.pre) is not supported")));
}

Test(faults, architecture_memra_lacks) {
    const key_change mamba[] = {{"general.architecture", "mamba"}};
    char *path = craft_tiny("mamba.gguf", mamba, 1);
    const char *const *line = NEEDLES("memra run: ", "architecture 'mamba' (general.architecture)", path);
    expect_run_fails(path, NULL, line);
    expect_run_fails(path, "--prompt", line);
    free(expect_inspect(path,
                        NEEDLES("architecture:     STOP: architecture 'mamba' (general.architecture) is not supported",
                                "model:            not described", "tensor types:     ok:", "cpu: cannot",
                                "verdict:          memra run stops: architecture\n"),
                        NEEDLES("memra run would stop: architecture 'mamba' (general.architecture) is not supported")));
}

/* A template memra does not know is refused by --chat only: --prompt runs, and --check passes
 * (it reports the chat format, it does not refuse on it). */
Test(faults, chat_template_memra_refuses) {
    tool_require_manifest("cpu.backend.manifest");
    const key_change tpl[] = {{"tokenizer.chat_template", "{{ bos_token }}{% for message in messages %}[INST] "
                                                          "{{ message['content'] }} [/INST]{% endfor %}"}};
    char *path = craft_tiny("mistral.gguf", tpl, 1);
    expect_run_fails(path, "--chat",
                     NEEDLES("memra run: ", "chat template not supported (key tokenizer.chat_template", "[INST]"));
    expect_run_ok(path, "--prompt");
    free(expect_inspect(path,
                        NEEDLES("chat format:      STOP for --chat (refused): chat template not supported (key "
                                "tokenizer.chat_template",
                                "verdict:          runs on the cpu backend: token ids, --prompt (not --chat)"),
                        NULL));
}

Test(faults, no_chat_format) {
    char *path = craft_tiny("nochat.gguf", NULL, 0);
    expect_run_fails(path, "--chat", NEEDLES("memra run: ", "no chat template (tokenizer.chat_template)", "'llama'"));
    free(expect_inspect(path, NEEDLES("chat format:      STOP for --chat (none): no chat template"), NULL));
    /* A ChatML template over a vocabulary without its markers (the tiny preset's) disagrees with
     * the tokenizer: refused at load (issue 23 item 3); the ChatML detection itself is test_text's. */
    const key_change chatml[] = {{"tokenizer.chat_template", "{{'<|im_start|>' + message['role'] }}"}};
    path = craft_tiny("chatml.gguf", chatml, 1);
    free(expect_inspect(
        path,
        NEEDLES("chat format:      ok: chatml, from the file's chat template",
                "model:            STOP: key 'tokenizer.chat_template' writes the marker <|im_start|>"),
        NEEDLES("memra run would stop: key 'tokenizer.chat_template'", "not a token of the vocabulary")));
}

/* Not one of issue 17's faults, but the same rule: a file whose model cannot be described. */
Test(faults, model_description_fails) {
    const key_change no_count[] = {{"llama.block_count", NULL}};
    char *path = craft_tiny("nocount.gguf", no_count, 1);
    expect_run_fails(path, NULL, NEEDLES("memra run: ", "missing key 'llama.block_count'", path));
    free(expect_inspect(path,
                        NEEDLES("architecture:     ok: llama\n",
                                "model:            STOP: missing key 'llama.block_count'",
                                "verdict:          memra run stops: model\n"),
                        NEEDLES("memra run would stop: missing key 'llama.block_count'")));
    const key_change no_arch[] = {{"general.architecture", NULL}};
    path = craft_tiny("noarch.gguf", no_arch, 1);
    expect_run_fails(path, NULL, NEEDLES("memra run: ", "missing key 'general.architecture'", path));
    free(expect_inspect(path,
                        NEEDLES("architecture:     STOP: missing key 'general.architecture'",
                                "verdict:          memra run stops: architecture\n"),
                        NEEDLES("memra run would stop: missing key 'general.architecture'")));
}
