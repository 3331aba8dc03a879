/* test_gate_ops.c: op plugins (issue 30, items 2 and 3) through memra-gate on the tiny preset.
 * The test-only `faultyop` computes RMSNorm and the F32 GEMV in the cpu built-ins' order and
 * flips one bit of one output at one (site, layer, position) when its keys say so: unarmed, the
 * arm with it is exact against cpu (the plugin is called at every site, in the built-in's place);
 * armed, the gate fails with exit 1 at exactly that position's step, never earlier. The protocol
 * record lists the op plugin with its file and digest; an unknown op kind, a plugin that does not
 * serve the backend or the op, and an unknown key of the plugin are usage errors naming them. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate_harness.h"
#include "memra/digest.h"
#include "test_files.h"

static double num(const char *line, const char *key) {
    double v = -12345;
    cr_assert(gate_field_num(line, key, &v), "no '%s' in %s", key, line ? line : "(null)");
    return v;
}

static void expect_pass(const char *const *args) {
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d, stderr:\n%s\nrecords:\n%.3000s", r.exit, r.err, r.jsonl);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(v && strstr(v, "\"pass\":true"), "%s", v ? v : "(no verdict)");
    free(v);
    gate_result_free(&r);
}

/* Exit 1, and the first mismatch at `step`, every step before it good. */
static void expect_fail_at(const char *const *args, int step) {
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 1, "exit %d, stderr:\n%s\nrecords:\n%.3000s", r.exit, r.err, r.jsonl);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert(m, "no mismatch record: %.3000s", r.jsonl);
    cr_assert_eq(num(m, "step"), step, "%s", m);
    for (int s = 0; s < step; s++) {
        char *line = gate_record(r.jsonl, "step", s);
        cr_assert(line && strstr(line, "\"ok\":true"), "step %d: %s", s, line ? line : "(none)");
        free(line);
    }
    free(m);
    gate_result_free(&r);
}

Test(gate_ops, an_op_plugin_in_the_builtins_order_is_exact) {
    const char *norm[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,op.rmsnorm=faultyop", GATE_SMALL, NULL};
    expect_pass(norm);
    const char *gemv[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,op.gemv.f32=faultyop", GATE_SMALL, NULL};
    expect_pass(gemv);
    const char *topk[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,op.topk=faultyop", "--temp", "0.8", "--top-k",
                          "5",   GATE_SMALL,      NULL};
    expect_pass(topk);
    const char *topp[] = {"--a", "cpu:prefill=1", "--b", "cpu:prefill=1,op.topk=faultyop", "--temp", "0.8", "--top-p",
                          "0.9", GATE_SMALL,      NULL};
    expect_pass(topp);
}

/* The sort swaps the two largest at the step of position 20: with top-k 1 that step samples the
 * second largest logit, and the gate says so there (the sampled token differs, its logits not). */
Test(gate_ops, a_swapped_pair_in_the_samplers_sort_fails_at_that_step) {
    const char *args[] = {"--a",      "cpu:prefill=1",
                          "--b",      "cpu:prefill=1,op.topk=faultyop:site=topk:layer=head:pos=20:index=0",
                          "--temp",   "0.8",
                          "--top-k",  "1",
                          GATE_SMALL, NULL};
    expect_fail_at(args, 20);
    gate_result r = gate_run(args, false);
    char *m = gate_record(r.jsonl, "mismatch", 0);
    cr_assert(m && strstr(m, "\"what\":[\"token\"]") && strstr(m, "\"differing_logits\":0"), "%s", m ? m : "-");
    free(m);
    gate_result_free(&r);
}

Test(gate_ops, with_ranks_and_stages_too) {
    const char *args[] = {"--a",      "cpu:prefill=1,tp=2",
                          "--b",      "cpu:prefill=1,tp=2,stages=2,op.rmsnorm=faultyop,op.gemv.f32=faultyop",
                          GATE_SMALL, NULL};
    expect_pass(args);
}

Test(gate_ops, a_flipped_bit_in_one_norm_fails_at_that_step) {
    const char *args[] = {"--a",      "cpu:prefill=1",
                          "--b",      "cpu:prefill=1,op.rmsnorm=faultyop:site=ffn_norm:layer=1:pos=5:index=3",
                          GATE_SMALL, NULL};
    expect_fail_at(args, 5);
}

Test(gate_ops, a_flipped_bit_in_one_gemv_fails_at_that_step) {
    const char *args[] = {"--a",      "cpu:prefill=1",
                          "--b",      "cpu:prefill=1,op.gemv.f32=faultyop:site=ffn_up:layer=0:pos=20:index=7",
                          GATE_SMALL, NULL};
    expect_fail_at(args, 20);
}

Test(gate_ops, a_flipped_bit_in_the_heads_norm_fails_at_that_step) {
    const char *args[] = {"--a",      "cpu:prefill=1",
                          "--b",      "cpu:prefill=1,op.rmsnorm=faultyop:site=output_norm:layer=head:pos=9:index=0",
                          GATE_SMALL, NULL};
    expect_fail_at(args, 9);
}

Test(gate_ops, the_protocol_names_the_op_plugin_file_and_digest) {
    const char *args[] = {
        "--a", "cpu:prefill=1", "--b", "cpu:prefill=1,op.rmsnorm=faultyop", "--prime", "4", "--gen", "4", "--rows",
        "2",   "--quiet",       NULL};
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, 0, "exit %d: %s", r.exit, r.err);
    char *p = gate_record(r.jsonl, "protocol", 0);
    const char *e = p ? strstr(p, "{\"name\":\"faultyop\",\"kind\":\"op\"") : NULL;
    cr_assert(e, "faultyop not listed: %s", p ? p : "(no protocol)");
    char path[4096], sha[80], hex[MEMRA_SHA256_HEX];
    cr_assert(gate_field_str(e, "path", path, sizeof path) && gate_field_str(e, "sha256", sha, sizeof sha), "%s", e);
    cr_assert(path[0] == '/' && strstr(path, "libmemra-op-faultyop.so") && access(path, R_OK) == 0, "path %s", path);
    size_t size;
    char *data = file_slurp(path, &size);
    uint8_t d[32];
    memra_sha256(data, size, d);
    memra_sha256_hex(d, hex);
    cr_assert_str_eq(sha, hex, "%s: the listed digest is the file's", path);
    free(data);
    free(p);
    gate_result_free(&r);
}

GATE_USAGE(gate_ops, an_unknown_op_kind_names_it_and_the_plugin, "unknown op kind 'softmax'", "--a", "cpu:prefill=1",
           "--b", "cpu:prefill=1,op.softmax=faultyop")
GATE_USAGE(gate_ops, an_unknown_gemv_type_names_it, "unknown op kind 'gemv.q9_9'", "--a", "cpu:prefill=1", "--b",
           "cpu:prefill=1,op.gemv.q9_9=faultyop")
GATE_USAGE(gate_ops, a_plugin_that_does_not_serve_the_op_names_both,
           "op.rope=faultyop: the op plugin 'faultyop' does not serve rope on cpu (it serves: cpu rmsnorm, cpu "
           "gemv.f32, cpu topk",
           "--a", "cpu:prefill=1", "--b", "cpu:prefill=1,op.rope=faultyop")
GATE_USAGE(gate_ops, a_plugin_that_does_not_serve_the_type_names_both,
           "the op plugin 'faultyop' does not serve gemv.f16 on cpu", "--a", "cpu:prefill=1", "--b",
           "cpu:prefill=1,op.gemv.f16=faultyop")
GATE_USAGE(gate_ops, an_unknown_key_of_the_plugin_is_named, "unknown key 'colour'", "--a", "cpu:prefill=1", "--b",
           "cpu:prefill=1,op.rmsnorm=faultyop:colour=red")
GATE_USAGE(gate_ops, a_bad_value_of_the_plugin_is_named, "bit=40", "--a", "cpu:prefill=1", "--b",
           "cpu:prefill=1,op.rmsnorm=faultyop:site=q:bit=40")
GATE_USAGE(gate_ops, an_item_without_a_key_is_refused, "expected NAME[:KEY=VALUE...]", "--a", "cpu:prefill=1", "--b",
           "cpu:prefill=1,op.rmsnorm=faultyop:red")
GATE_USAGE(gate_ops, a_missing_op_plugin_is_named, "unknown op 'nosuch' (found: faultyop)", "--a", "cpu:prefill=1",
           "--b", "cpu:prefill=1,op.rmsnorm=nosuch")

/* Where the build has the cuda plugin: its op kinds are checked before any device is asked for, so
 * these need no GPU. */
static bool have_cuda_plugin(void) {
    const char *dir = getenv("MEMRA_BUILD_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/plugins.d/cuda.backend.manifest", dir ? dir : ".");
    return access(path, R_OK) == 0;
}

Test(gate_ops, cuda_takes_rmsnorm_and_the_float_gemvs_only) {
    if (!have_cuda_plugin())
        cr_skip_test("this build has no cuda plugin");
    const char *rope[] = {
        "--a", "cpu:prefill=1", "--b", "cuda:op.rope=faultyop", "--prime", "4", "--gen", "4", "--rows", "0", NULL};
    gate_expect_usage(rope,
                      "unsupported op kind 'rope'; the cuda backend takes: rmsnorm, gemv.f32, gemv.f16, gemv.bf16");
    const char *q8[] = {
        "--a", "cpu:prefill=1", "--b", "cuda-graph:op.gemv.q8_0=faultyop", "--prime", "4", "--gen", "4", "--rows", "0",
        NULL};
    gate_expect_usage(q8, "unsupported op kind 'gemv.q8_0'; the cuda-graph backend takes: rmsnorm");
}
