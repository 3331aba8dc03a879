/* test_gate_tp_slow.c (label "slow"): full-length tensor-parallel gates (P = N = 256): tp=2 with its
 * default cells, and every refusal cell of 4-rank arms of the small preset at that length. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate_harness.h"

/* Each run gets most of its test's timeout: every cell of 4-rank arms at full length takes about
 * two minutes on 2 cores, past the harness's default of 120 s. */
static void expect_cells(const char *const *args, int cells, int timeout_s) {
    gate_how how = {.timeout_s = timeout_s};
    gate_result r = gate_run_ex(args, &how);
    char *v = gate_record(r.jsonl, "verdict", 0);
    cr_assert_eq(r.exit, 0, "exit %d, verdict %s\n%s", r.exit, v ? v : "(none)", r.err);
    free(v);
    int n = gate_count_records(r.jsonl, "refusal");
    cr_assert_eq(n, cells, "%d refusal records", n);
    for (int i = 0; i < n; i++) {
        char *line = gate_record(r.jsonl, "refusal", i);
        bool pass = false, q = false;
        cr_assert(gate_field_bool(line, "pass", &pass) && pass, "%s", line);
        cr_assert(gate_field_bool(line, "quarantine_observed", &q) && q, "%s", line);
        free(line);
    }
    gate_result_free(&r);
}

Test(gate_tp_slow, full_length_tp2_gate_with_its_cells, .timeout = 600) {
    const char *args[] = {"--a", "cpu:tp=2", "--b", "cpu:tp=2,threads=1", "--rows", "4", "--quiet", NULL};
    expect_cells(args, 12, 540);
}

Test(gate_tp_slow, full_length_every_cell_of_four_rank_arms, .timeout = 900) {
    const char *args[] = {"--preset", "small", "--a",    "cpu:tp=4", "--b",     "cpu:tp=4,stages=2",
                          "--cells",  "all",   "--rows", "2",        "--quiet", NULL};
    expect_cells(args, 144, 840);
}
