/* test_gate_moe.c: the gate on mixture-of-experts cpu arms (issue 29, items 4 and 5, cpu side).
 * ep=N is bit-identical to ep=1: cpu against cpu:ep=2 (and ep=4, and qwen2moe-tiny's shared expert,
 * sampled) passes in exact mode with the epoch census of both all-reduces of every layer (the
 * attention's and the experts') and six refusal cells on the expert ranks; so does an expert
 * all-reduce that sums in reverse rank order (one contributor per slot: any order is exact), where
 * the same collective fails tp=4. ep=2 against ep=2,tp=2 differs by design (the attention and the
 * shared expert sum two partials) and passes in nmse mode; tp=2 against tp=2,ep=2 too (experts split
 * by rows against whole). Negative controls: an expert block whose epoch does not advance, and a
 * refusal on an expert rank that commits, are each caught with exit 1. ep on a dense model, an ep
 * that does not divide the experts, and ep with another tp are usage errors. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate_harness.h"

#define MOE_SHORT "--prime", "8", "--gen", "8", "--rows", "2", "--quiet"

static gate_result run_expect(const char *const *args, int code, const char *why) {
    gate_result r = gate_run(args, false);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert_eq(r.exit, code, "exit %d (want %d), verdict %s\nstderr:\n%s", r.exit, code, v ? v : "(none)", r.err);
    if (why && code == 2)
        cr_assert(strstr(r.err, why), "stderr does not say '%s': %s", why, r.err);
    else if (why)
        cr_assert(v && strstr(v, why), "verdict does not say '%s': %s", why, v ? v : "(none)");
    free(v);
    return r;
}

static int refusals_pass(const gate_result *r) {
    int n = gate_count_records(r->jsonl, "refusal");
    for (int i = 0; i < n; i++) {
        char *line = gate_record(r->jsonl, "refusal", i);
        bool pass = false;
        cr_assert(gate_field_bool(line, "pass", &pass) && pass, "%s", line);
        free(line);
    }
    return n;
}

/* Census records with epochs and no failure: how many (one per arm with ranks). */
static int epochs_clean(const gate_result *r) {
    int n = gate_count_records(r->jsonl, "census"), with = 0;
    for (int i = 0; i < n; i++) {
        char *line = gate_record(r->jsonl, "census", i);
        const char *e = strstr(line, "\"epochs\":{");
        if (e) {
            double failures = -1;
            cr_assert(gate_field_num(e, "failures", &failures) && failures == 0, "%s", line);
            with++;
        }
        free(line);
    }
    return with;
}

static bool by_design_null(const gate_result *r) {
    char *p = gate_record(r->jsonl, "protocol", 0);
    bool null = p && strstr(p, "\"differ_by_design\":null");
    free(p);
    return null;
}

Test(gate_moe, cpu_against_ep2_is_exact_with_census_and_cells, .timeout = 180) {
    const char *args[] = {"--preset", "moe-tiny", "--a", "cpu", "--b", "cpu:ep=2", MOE_SHORT, NULL};
    gate_result r = run_expect(args, 0, NULL);
    cr_assert(by_design_null(&r), "ep=2 must be held to the bits of ep=1: %s", r.jsonl);
    cr_assert_eq(refusals_pass(&r), 6, "arm b's six cells (two ranks x first, middle, last)");
    cr_assert_eq(epochs_clean(&r), 1, "%s", r.jsonl);
    /* the cells include the expert block (block 1 of a layer) */
    cr_assert(strstr(r.jsonl, "\"which\":\"ffn\"") || strstr(r.jsonl, "\"block\":1"), "%s", r.jsonl);
    gate_result_free(&r);
}

Test(gate_moe, ep4_and_qwen2moe_shared_expert_sampled_are_exact, .timeout = 180) {
    const char *four[] = {"--preset", "moe-tiny", "--a", "cpu:threads=1", "--b", "cpu:ep=4", MOE_SHORT, NULL};
    gate_result r = run_expect(four, 0, NULL);
    cr_assert(by_design_null(&r));
    gate_result_free(&r);
    const char *q2[] = {"--preset", "qwen2moe-tiny", "--a",   "cpu",  "--b", "cpu:ep=2,threads=1",
                        "--temp",   "0.8",           "--seed", "7",   MOE_SHORT, NULL};
    r = run_expect(q2, 0, NULL);
    cr_assert_eq(refusals_pass(&r), 6);
    gate_result_free(&r);
}

/* One contributor per slot: a collective that sums in reverse rank order changes no bit of ep=4,
 * while it changes tp=4's (test_gate_tp's a_collective_summing_in_another_order_is_caught). */
Test(gate_moe, expert_slots_are_exact_in_any_rank_order, .timeout = 180) {
    const char *args[] = {"--preset", "moe-tiny", "--a", "cpu", "--b", "cpu:ep=4,collective=faultycoll_order",
                          MOE_SHORT,  NULL};
    gate_result r = run_expect(args, 0, NULL);
    gate_result_free(&r);
}

Test(gate_moe, ep2_against_ep2_tp2_differs_by_design_and_passes_nmse, .timeout = 180) {
    const char *exact[] = {"--preset", "qwen2moe-tiny", "--a", "cpu:ep=2", "--b", "cpu:ep=2,tp=2",
                           "--prime",  "8",             "--gen", "8",       "--rows", "0",  NULL};
    gate_result r = run_expect(exact, 1, "split layer 0 over 1 and 2 tensor-parallel ranks");
    gate_result_free(&r);
    const char *nmse[] = {"--preset",  "qwen2moe-tiny", "--a", "cpu:ep=2", "--b", "cpu:ep=2,tp=2",
                          "--compare", "nmse:1e-9",     MOE_SHORT,  NULL};
    r = run_expect(nmse, 0, NULL);
    cr_assert_eq(refusals_pass(&r), 12);
    cr_assert_eq(epochs_clean(&r), 2);
    gate_result_free(&r);
    const char *rows[] = {"--preset", "moe-tiny", "--a", "cpu:tp=2", "--b", "cpu:tp=2,ep=2",
                          "--prime",  "8",        "--gen", "8",     "--rows", "0",  NULL};
    r = run_expect(rows, 1, "split the experts differently");
    gate_result_free(&r);
}

Test(gate_moe, an_expert_epoch_that_does_not_advance_is_caught, .timeout = 120) {
    /* faultycoll_epoch: block 1 (layer 0's second all-reduce: the experts') of the last rank */
    /* prefill=1: the census checks every step (a chunked prime checks at chunk ends, expecting M) */
    const char *args[] = {
        "--preset", "moe-tiny", "--a", "cpu:ep=2,prefill=1", "--b", "cpu:ep=2,prefill=1,collective=faultycoll_epoch",
        MOE_SHORT,  NULL};
    gate_result r = run_expect(args, 1, "epoch census");
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert(strstr(v, "rank 1 block 1") && strstr(v, "advanced by 0, expected 1"), "%s", v);
    free(v);
    gate_result_free(&r);
}

Test(gate_moe, a_refusal_on_an_expert_rank_that_commits_is_caught, .timeout = 120) {
    const char *args[] = {"--preset", "moe-tiny", "--a", "cpu:ep=2", "--b", "cpu:ep=2,collective=faultycoll_commit",
                          MOE_SHORT,  NULL};
    gate_result r = run_expect(args, 1, "refusal cell");
    gate_result_free(&r);
}

GATE_USAGE(gate_moe, ep_on_a_dense_model, "ep=2: the model (llama) has no experts", "--a", "cpu", "--b", "cpu:ep=2")
GATE_USAGE(gate_moe, ep_must_divide_the_experts, "ep=3: expert_count 8 is not divisible by 3 ranks", "--preset",
           "moe-tiny", "--a", "cpu", "--b", "cpu:ep=3")
GATE_USAGE(gate_moe, ep_with_another_tp, "ep=4 with tp=2: expected tp=1 or tp=ep", "--preset", "moe-tiny", "--a", "cpu",
           "--b", "cpu:ep=4,tp=2")
