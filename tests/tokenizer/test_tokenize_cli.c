/* test_tokenize_cli.c: `memra tokenize`: ids and pieces, --ids, --specials, --no-bos, and the exit
 * codes (2 usage, 3 a file that cannot be read or whose tokenizer memra lacks), on small files
 * written with the core's GGUF writer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memra/gguf.h"
#include "test_files.h"
#include "tool_run.h"

/* A gpt2 vocabulary: a b ab Ġ Ġb, newline (Ċ), a control <|c|> (bos, add_bos true). */
static void write_model(const char *path, const char *kind) {
    memra_error err = {0};
    memra_gguf_writer *w;
    cr_assert_eq(memra_gguf_writer_new(3, 0, &w, &err), MEMRA_OK);
    const char *toks[] = {"a",        "b",     "ab", "\xc4\xa0", "\xc4\xa0\x62", /* "\u0120b" (0x62 is 'b') */
                          "\xc4\x8a", "<|c|>", "<",  "|",        ">",
                          "c"};
    int32_t types[] = {1, 1, 1, 1, 1, 1, 3, 1, 1, 1, 1};
    const char *merges[] = {"a b", "\xc4\xa0 b"};
    cr_assert_eq(memra_gguf_writer_set_str(w, "tokenizer.ggml.model", kind, &err), MEMRA_OK);
    cr_assert_eq(memra_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", toks, 11, &err), MEMRA_OK);
    cr_assert_eq(memra_gguf_writer_set_array(w, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32, 11, types, &err),
                 MEMRA_OK);
    cr_assert_eq(memra_gguf_writer_set_str_array(w, "tokenizer.ggml.merges", merges, 2, &err), MEMRA_OK);
    cr_assert_eq(memra_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 6, &err), MEMRA_OK);
    cr_assert_eq(memra_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true, &err), MEMRA_OK);
    cr_assert_eq(memra_gguf_writer_write_file(w, path, &err), MEMRA_OK, "%s", err.msg);
    memra_gguf_writer_free(w);
}

Test(tokenize_cli, ids_and_pieces) {
    char path[512];
    tmp_file_path(path, sizeof path, "vocab.gguf");
    write_model(path, "gpt2");
    tool_result r = tool_run("memra", "tokenize", "--model", path, "ab b\n", NULL);
    cr_assert_eq(r.code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "6\t\"<|c|>\"\n2\t\"ab\"\n4\t\" b\"\n5\t\"\\n\"\n");
    tool_result_free(&r);
    r = tool_run("memra", "tokenize", "--model", path, "--ids", "--no-bos", "ab b", NULL);
    cr_assert_eq(r.code, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "2\n4\n");
    tool_result_free(&r);
    r = tool_run("memra", "tokenize", "--model", path, "--ids", "--no-bos", "--specials", "<|c|>a", NULL);
    cr_assert_str_eq(r.out, "6\n0\n");
    tool_result_free(&r);
    r = tool_run("memra", "tokenize", "--model", path, "--ids", "--no-bos", "<|c|>a",
                 NULL); /* the control: plain text */
    cr_assert_str_eq(r.out, "7\n8\n10\n8\n9\n0\n");
    tool_result_free(&r);
    unlink(path);
}

Test(tokenize_cli, exit_codes) {
    char path[512];
    tmp_file_path(path, sizeof path, "bert.gguf");
    tool_result r = tool_run("memra", "tokenize", "text", NULL);
    cr_assert_eq(r.code, 2, "no --model is a usage error");
    cr_assert(strstr(r.err, "memra tokenize: no model given"), "%s", r.err);
    tool_result_free(&r);
    r = tool_run("memra", "tokenize", "--model", path, NULL);
    cr_assert_eq(r.code, 2, "no text is a usage error");
    tool_result_free(&r);
    r = tool_run("memra", "tokenize", "--model", path, "--bogus", "x", NULL);
    cr_assert_eq(r.code, 2);
    tool_result_free(&r);
    r = tool_run("memra", "tokenize", "--model", "/nonexistent/x.gguf", "x", NULL);
    cr_assert_eq(r.code, 3);
    tool_result_free(&r);
    write_model(path, "bert");
    r = tool_run("memra", "tokenize", "--model", path, "x", NULL);
    cr_assert_eq(r.code, 3);
    cr_assert(strstr(r.err, "tokenizer kind 'bert'") && strstr(r.err, "bert.gguf"), "%s", r.err);
    cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "one line: %s", r.err);
    tool_result_free(&r);
    unlink(path);
    r = tool_run("memra", "tokenize", "--help", NULL);
    cr_assert_eq(r.code, 0);
    cr_assert(strstr(r.out, "usage: memra tokenize"));
    tool_result_free(&r);
}
