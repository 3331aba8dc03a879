/* test_gate_nvtx.c: in a build with NVTX (the CUDA toolkit was found), memra-gate --profile
 * opens exactly the documented ranges, balanced, one pair per arm window, and a scored run
 * opens none. An injection library (nvtx_probe.c) records the calls; no GPU is needed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate_harness.h"

/* Runs the gate with the probe injected; returns what the probe logged ("" when NVTX was never
 * initialised, i.e. no NVTX call was made). */
static char *probed_run(const char *const *args, int expect_exit) {
    char log[] = "/tmp/memra-gate-nvtx-XXXXXX";
    int fd = mkstemp(log);
    cr_assert(fd >= 0);
    close(fd);
    unlink(log); /* the probe creates it at NVTX's first call */
    setenv("NVTX_INJECTION64_PATH", NVTX_PROBE_PATH, 1);
    setenv("MEMRA_NVTX_PROBE_LOG", log, 1);
    gate_result r = gate_run(args, false);
    unsetenv("NVTX_INJECTION64_PATH");
    cr_assert_eq(r.exit, expect_exit, "exit %d: %s", r.exit, r.err);
    cr_assert_null(strstr(r.err, "no NVTX ranges are emitted"), "this build has NVTX: %s", r.err);
    gate_result_free(&r);
    char *text = calloc(1, 8192);
    FILE *f = fopen(log, "r");
    if (f) {
        size_t n = fread(text, 1, 8191, f);
        text[n] = '\0';
        fclose(f);
        unlink(log);
    }
    return text;
}

Test(gate_nvtx, profile_opens_one_balanced_range_pair_per_window) {
    const char *args[] = {"--a",   "cpu", "--b",       "cpu:stages=2", "--prime", "16",
                          "--gen", "16",  "--profile", "--quiet",      NULL};
    char *log = probed_run(args, 0);
    const char *want = "push memra-gate:profile\n"
                       "push memra-gate:profile arm a (cpu) positions 16..48\n"
                       "pop\n"
                       "pop\n"
                       "push memra-gate:profile\n"
                       "push memra-gate:profile arm b (cpu:stages=2) positions 16..48\n"
                       "pop\n"
                       "pop\n";
    cr_assert_str_eq(log, want);
    free(log);
}

Test(gate_nvtx, scored_run_opens_no_range) {
    const char *args[] = {"--a", "cpu", "--b", "cpu:stages=2", GATE_SMALL, NULL};
    char *log = probed_run(args, 0);
    cr_assert_str_eq(log, "", "a scored run must not open NVTX ranges: %s", log);
    free(log);
}
