/* test_gate_bisect.c: issue 30 item 1. On a replay mismatch the gate re-runs the failing step on
 * both arms with taps after every op (memra.ops) and names the first site that differs; the bisect
 * record, the summary line, and the controls: a passing gate runs none, a bisect that cannot run
 * or stops part way leaves the verdict alone. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate_harness.h"

static double num(const char *line, const char *key) {
    double v = -12345;
    cr_assert(gate_field_num(line, key, &v), "no '%s' in %s", key, line ? line : "(null)");
    return v;
}

static gate_result expect_exit(const char *const *args, int code) {
    gate_result r = gate_run(args, false);
    cr_assert_eq(r.exit, code, "exit %d, stderr:\n%s\nrecords:\n%.4000s", r.exit, r.err, r.jsonl);
    return r;
}

/* The object member `key` of a record line ("\"a\":{...}"), copied (free it). */
static char *member_obj(const char *line, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":{", key);
    const char *p = strstr(line, pat);
    cr_assert(p, "no object '%s' in %s", key, line);
    p += strlen(pat) - 1;
    int depth = 0;
    const char *q = p;
    for (; *q; q++) {
        if (*q == '{')
            depth++;
        else if (*q == '}' && --depth == 0)
            break;
    }
    return strndup(p, (size_t)(q - p + 1));
}

/* cpu against cpu:tp=2 in exact mode fails (the ranks sum in another order): the bisect names layer
 * 0 and attn_out, the first site after the first all-reduce, and says why. */
Test(gate_bisect, tp_rank_sum_names_layer_0_attn_out) {
    const char *args[] = {"--a",       "cpu:prefill=1",
                          "--b",       "cpu:prefill=1,tp=2",
                          "--compare", "exact",
                          "--prime",   "8",
                          "--gen",     "8",
                          "--rows",    "0",
                          NULL};
    gate_result r = expect_exit(args, 1);
    cr_assert_eq(gate_count_records(r.jsonl, "bisect"), 1, "%s", r.jsonl);
    char *b = gate_record(r.jsonl, "bisect", 0);
    cr_assert_eq(num(b, "step"), 0, "%s", b);
    cr_assert(strstr(b, "\"found\":true"), "%s", b);
    cr_assert_eq(num(b, "layer"), 0, "%s", b);
    char site[32] = "", tensor[32] = "", cause[400] = "";
    cr_assert(gate_field_str(b, "site", site, sizeof site) && strcmp(site, "attn_out") == 0, "%s", b);
    cr_assert(gate_field_str(b, "tensor", tensor, sizeof tensor) && strcmp(tensor, "attn_out") == 0, "%s", b);
    cr_assert(gate_field_str(b, "cause", cause, sizeof cause), "%s", b);
    cr_assert(strstr(cause, "sums across ranks in another order"), "%s", b);
    /* the sites before it agree: attn_norm, q, k, v, rope (q, k), attention */
    cr_assert_geq(num(b, "agreed"), 7, "%s", b);
    cr_assert(num(b, "ulp") >= 1 && num(b, "nmse") > 0, "%s", b);
    char *a = member_obj(b, "a"), *bb = member_obj(b, "b");
    cr_assert(strstr(a, "\"reproduced\":true") && strstr(bb, "\"reproduced\":true"), "%s", b);
    cr_assert_eq(num(a, "ranks"), 1, "%s", a);
    cr_assert_eq(num(bb, "ranks"), 2, "%s", bb);
    cr_assert(strstr(bb, "\"rank\":null"), "after the all-reduce every rank holds it: %s", bb);
    /* the two values differ and are the tensor's first differing element */
    char *va = member_obj(a, "value"), *vb = member_obj(bb, "value");
    char bits_a[16], bits_b[16];
    cr_assert(gate_field_str(va, "bits", bits_a, sizeof bits_a) && gate_field_str(vb, "bits", bits_b, sizeof bits_b));
    cr_assert_str_neq(bits_a, bits_b);
    cr_assert(strstr(r.err, "bisect       step 0, layer 0 attn_out["), "summary:\n%s", r.err);
    cr_assert(strstr(r.err, "sums across ranks in another order"), "%s", r.err);
    free(va), free(vb), free(a), free(bb), free(b);
    gate_result_free(&r);
}

/* One logit flipped (no internal change): the head's last op. */
Test(gate_bisect, flipped_logit_names_the_head_logits) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:flip_logit_step=5,flip_logit_index=7", GATE_SMALL,
                          NULL};
    gate_result r = expect_exit(args, 1);
    char *b = gate_record(r.jsonl, "bisect", 0);
    cr_assert(b, "no bisect record:\n%s", r.jsonl);
    cr_assert_eq(num(b, "step"), 5, "%s", b);
    char layer[16] = "", site[32] = "";
    cr_assert(gate_field_str(b, "layer", layer, sizeof layer) && strcmp(layer, "head") == 0, "%s", b);
    cr_assert(gate_field_str(b, "site", site, sizeof site) && strcmp(site, "logits") == 0, "%s", b);
    cr_assert_eq(num(b, "index"), 7, "%s", b);
    cr_assert_eq(num(b, "differing"), 1, "%s", b);
    cr_assert_eq(num(b, "ulp"), 1, "%s", b);
    char last[64] = "";
    cr_assert(gate_field_str(b, "last_agreed", last, sizeof last) && strcmp(last, "head output_norm") == 0, "%s", b);
    cr_assert(strstr(b, "\"cause\":null"), "%s", b);
    free(b);
    gate_result_free(&r);
}

/* The negative control: a passing gate writes no bisect record, runs no bisect (its tapped steps
 * would fail here, and say so in a record), and its summary has no bisect line. */
Test(gate_bisect, passing_gate_runs_no_bisect) {
    const char *args[] = {"--a", "cpu:prefill=1", "--b", "faulty:taps=2", "--prime", "8", "--gen", "8", "--rows", "0",
                          NULL};
    gate_result r = expect_exit(args, 0);
    cr_assert_eq(gate_count_records(r.jsonl, "bisect"), 0, "%s", r.jsonl);
    cr_assert_null(strstr(r.err, "bisect"), "%s", r.err);
    gate_result_free(&r);
}

/* A bisect that stops part way, or cannot run, says why and leaves the verdict (exit 1) alone. */
Test(gate_bisect, failing_or_absent_taps_leave_the_verdict) {
    const char *fail[] = {"--a", "cpu:prefill=1", "--b", "faulty:flip_logit_step=3,taps=2", GATE_SMALL, NULL};
    gate_result r = expect_exit(fail, 1);
    char *b = gate_record(r.jsonl, "bisect", 0);
    cr_assert(b && strstr(b, "\"found\":false") && strstr(b, "\"done\":false"), "%s", b);
    cr_assert(strstr(b, "the bisect stopped") && strstr(b, "taps=2"), "%s", b);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert_eq(num(v, "exit"), 1, "%s", v);
    free(v), free(b);
    gate_result_free(&r);

    const char *none[] = {"--a", "cpu:prefill=1", "--b", "faulty:flip_logit_step=3,taps=1", GATE_SMALL, NULL};
    r = expect_exit(none, 1);
    b = gate_record(r.jsonl, "bisect", 0);
    cr_assert(b && strstr(b, "\"available\":false") && strstr(b, "arm b's backend offers no per-op taps"), "%s", b);
    free(b);
    gate_result_free(&r);
}

/* A backend that fuses ops hands over fewer sites (faulty:taps=3, the cuda backend's set): only the
 * sites both arms have are compared, and a residual that is an all-reduce's output (cuda adds the
 * residual inside the reduced GEMV) is named on rank-sum grounds. */
Test(gate_bisect, fused_sites_compare_the_common_ones) {
    const char *args[] = {"--a",       "cpu:prefill=1",
                          "--b",       "faulty:tp=2,taps=3",
                          "--compare", "exact",
                          "--prime",   "4",
                          "--gen",     "4",
                          "--rows",    "0",
                          "--quiet",   NULL};
    gate_result r = expect_exit(args, 1);
    char *b = gate_record(r.jsonl, "bisect", 0);
    cr_assert(b && strstr(b, "\"found\":true"), "%s", r.jsonl);
    char site[32] = "", last[64] = "", cause[400] = "";
    cr_assert_eq(num(b, "layer"), 0, "%s", b);
    cr_assert(gate_field_str(b, "site", site, sizeof site) && strcmp(site, "attn_res") == 0, "%s", b);
    cr_assert(gate_field_str(b, "last_agreed", last, sizeof last) && strcmp(last, "layer 0 attention") == 0, "%s", b);
    cr_assert(gate_field_str(b, "cause", cause, sizeof cause) && strstr(cause, "sums across ranks"), "%s", b);
    cr_assert_eq(num(b, "agreed"), 4, "q, k, v, attention: %s", b);
    free(b);
    gate_result_free(&r);
}

/* ---- with the test-only op plugin faultyop (issue 30 item 2, helper h11): one bit flipped in
 * layer L's op O at step S; the bisect must name exactly L and O at S (and with tp=2 the rank). ---- */

/* Whether the test plugin folder holds faultyop (tests/gate/faultyop, built with the tests). */
static bool have_faultyop(void) {
    const char *dir = getenv("MEMRA_TEST_PLUGIN_DIR");
    DIR *d = dir ? opendir(dir) : NULL;
    bool found = false;
    for (struct dirent *e; d && !found && (e = readdir(d)) != NULL;)
        found = strstr(e->d_name, "faultyop") != NULL;
    if (d)
        closedir(d);
    return found;
}

static void expect_named(const char *arm_b, const char *arm_a, double step, const char *layer, const char *site,
                         double index, int rank, double ranks) {
    cr_assert(have_faultyop(),
              "the test op plugin faultyop is not in %s: it is built with the tests (tests/gate/faultyop)",
              getenv("MEMRA_TEST_PLUGIN_DIR"));
    const char *args[] = {"--a", arm_a, "--b", arm_b, "--compare", "exact", GATE_SMALL, NULL};
    gate_result r = expect_exit(args, 1);
    char *b = gate_record(r.jsonl, "bisect", 0);
    cr_assert(b && strstr(b, "\"found\":true"), "%s\n%s", r.err, r.jsonl);
    char got_layer[16] = "", got_site[32] = "";
    double l = -1;
    if (gate_field_num(b, "layer", &l))
        snprintf(got_layer, sizeof got_layer, "%.0f", l);
    else
        gate_field_str(b, "layer", got_layer, sizeof got_layer);
    gate_field_str(b, "site", got_site, sizeof got_site);
    cr_assert_eq(num(b, "step"), step, "%s", b);
    cr_assert_str_eq(got_layer, layer, "%s", b);
    cr_assert_str_eq(got_site, site, "%s", b);
    cr_assert_eq(num(b, "index"), index, "%s", b);
    cr_assert(strstr(b, "\"cause\":null"), "a fault is no design difference: %s", b);
    cr_assert_eq(num(b, "differing"), ranks, "one flipped element per rank's call: %s", b);
    char *bb = member_obj(b, "b");
    cr_assert_eq(num(bb, "ranks"), ranks, "%s", bb);
    if (rank >= 0)
        cr_assert_eq(num(bb, "rank"), rank, "%s", bb);
    free(bb);
    free(b);
    gate_result_free(&r);
}

Test(gate_bisect, fault_op_rmsnorm_names_layer_and_site) {
    expect_named("cpu:prefill=1,op.rmsnorm=faultyop:site=ffn_norm:layer=1:pos=5:index=3", "cpu:prefill=1", 5, "1",
                 "ffn_norm", 3, 0, 1);
}
Test(gate_bisect, fault_op_gemv_names_layer_and_site) {
    expect_named("cpu:prefill=1,op.gemv.f32=faultyop:site=ffn_up:layer=0:pos=20:index=7", "cpu:prefill=1", 20, "0",
                 "ffn_up", 7, 0, 1);
}
Test(gate_bisect, fault_op_head_names_output_norm) {
    expect_named("cpu:prefill=1,op.rmsnorm=faultyop:site=output_norm:layer=head:pos=9:index=0", "cpu:prefill=1", 9,
                 "head", "output_norm", 0, 0, 1);
}
/* tp=2: each rank runs its own q GEMV (tiny: 4 heads of 16, so 32 rows a rank), and faultyop flips
 * row 5 of every call at that site, layer and position: logical elements 5 (rank 0's shard) and
 * 37 (rank 1's). The first is named, on rank 0 of 2; both show in the gathered tensor. */
Test(gate_bisect, fault_op_tp2_names_the_rank) {
    expect_named("cpu:prefill=1,tp=2,op.gemv.f32=faultyop:site=q:layer=1:pos=3:index=5", "cpu:prefill=1,tp=2", 3, "1",
                 "q", 5, 0, 2);
}
