/* check_tp_fault.c: faults of a tensor-parallel cuda arm on the GPU, through the arm layer as the
 * gate drives it: a rank that never arrives at one all-reduce (the collective's injected
 * absence, armed through memra.tp) ends that step with an error naming the missing rank within
 * the collective's timeout; the state is quarantined (a later step and a restore from it fail)
 * and its committed position and digests are as before the step; the process lives on and a new
 * state of the same arm decodes the same tokens as before. For cuda and cuda-graph.
 *
 *   memra_cuda_check_tp_fault [--devices D0,D1]   (default: the placement's, rank r on device r)
 *
 * Also the backend's watchdog: with a collective that would wait ten minutes, step_timeout_ms
 * aborts it and fails the step in time.
 *
 * Exit 0 pass, 1 a check failed, 3 could not run, 77 no CUDA device. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "memra/arm.h"
#include "check_program.h"
#include "memra/plugin.h"
#include "memra/registry.h"
#include "memra/runtime.h"

static int failures;

#define STEPS 8
#define AT 5

/* expect: a phrase the failed step's message must hold (NULL: the collective's own timeout,
 * naming rank 1); limit: the seconds the failed step may take. */
static int check_arm(memra_registry *reg, const memra_model *m, const char *text, const char *expect, double limit) {
    memra_error err = {0};
    memra_arm *a = NULL;
    printf("arm %s\n", text);
    if (memra_arm_open(reg, m, text, "a", NULL, 0, &a, &err)) {
        printf("  could not open: %s\n", err.msg);
        return 3;
    }
    int64_t in[STEPS];
    for (int i = 0; i < STEPS; i++)
        in[i] = (100 + 7 * i) % (int64_t)m->n_vocab;
    memra_sample_cfg greedy = {0};
    int64_t want[STEPS] = {0}, got[STEPS] = {0};
    /* the reference: the same steps without a fault */
    memra_arm_state *ref = NULL;
    CHECK(memra_arm_state_new(a, 64, &ref, &err) == MEMRA_OK, "state: %s", err.msg);
    for (int i = 0; ref && i < STEPS; i++) {
        memra_step_args args = {sizeof args, in[i], &greedy, false};
        memra_step_result res = {sizeof res, -1, 0};
        CHECK(memra_arm_step_begin(ref, &args, &err) == MEMRA_OK &&
                  memra_arm_step_end(ref, NULL, &res, &err) == MEMRA_OK,
              "reference step %d: %s", i, err.msg);
        want[i] = res.token;
    }
    memra_arm_state_free(ref);
    /* the fault: rank 1 never arrives at the all-reduce after attention of layer 1 at position AT */
    memra_arm_state *s = NULL;
    CHECK(memra_arm_state_new(a, 64, &s, &err) == MEMRA_OK, "state: %s", err.msg);
    if (!s)
        return 1;
    for (int i = 0; i < AT; i++) {
        memra_step_args args = {sizeof args, in[i], &greedy, false};
        CHECK(memra_arm_step_begin(s, &args, &err) == MEMRA_OK && memra_arm_step_end(s, NULL, NULL, &err) == MEMRA_OK,
              "step %d: %s", i, err.msg);
    }
    uint8_t before[3][32], after[3][32];
    CHECK(memra_arm_digests(s, before[0], before[1], before[2], &err) == MEMRA_OK, "digests: %s", err.msg);
    CHECK(memra_arm_arm_refusal(a, 0, 1, 1, 0, AT, MEMRA_COLLECTIVE_ABSENT, &err) == MEMRA_OK, "arming: %s", err.msg);
    double t0 = check_now_s();
    memra_step_args args = {sizeof args, in[AT], &greedy, false};
    memra_status st = memra_arm_step_begin(s, &args, &err);
    if (st == MEMRA_OK)
        st = memra_arm_step_end(s, NULL, NULL, &err);
    double dt = check_now_s() - t0;
    printf("  the step with an absent rank: %s after %.3f s: %s\n", st ? "failed" : "passed", dt, err.msg);
    CHECK(st == MEMRA_E_DEVICE, "status %d (expected MEMRA_E_DEVICE)", (int)st);
    /* the waiting rank's timeout names rank 1; should the missing rank's own later wait time out
     * first (breaking the communicator), its absence names it */
    if (expect)
        CHECK(strstr(err.msg, expect) != NULL, "the message does not say '%s': %s", expect, err.msg);
    else
        CHECK(strstr(err.msg, "timed out waiting for rank 1") != NULL || strstr(err.msg, "never saw rank 1 arrive"),
              "the message does not name rank 1: %s", err.msg);
    CHECK(dt < limit, "the failed step took %.3f s (at most %.1f s expected)", dt, limit);
    CHECK(memra_arm_state_quarantined(s), "the state is not quarantined");
    CHECK(memra_arm_state_position(s) == AT, "position %u after the failed step (expected %d)",
          memra_arm_state_position(s), AT);
    CHECK(memra_arm_digests(s, after[0], after[1], after[2], &err) == MEMRA_OK, "digests after: %s", err.msg);
    CHECK(memcmp(before, after, sizeof before) == 0, "a digest changed across the failed step");
    memra_error e2 = {0};
    CHECK(memra_arm_step_begin(s, &args, &e2) == MEMRA_E_QUARANTINED, "a later step was not refused: %s", e2.msg);
    memra_arm_state *t = NULL;
    CHECK(memra_arm_state_new(a, 64, &t, &err) == MEMRA_OK, "state: %s", err.msg);
    CHECK(t && memra_arm_state_restore(t, s, &e2) == MEMRA_E_QUARANTINED, "a restore from it was not refused");
    memra_arm_clear_refusals(a, &err);
    /* the process and the arm live on: a fresh state decodes as the reference did */
    for (int i = 0; t && i < STEPS; i++) {
        memra_step_args a2 = {sizeof a2, in[i], &greedy, false};
        memra_step_result res = {sizeof res, -1, 0};
        CHECK(memra_arm_step_begin(t, &a2, &err) == MEMRA_OK && memra_arm_step_end(t, NULL, &res, &err) == MEMRA_OK,
              "fresh step %d: %s", i, err.msg);
        got[i] = res.token;
    }
    CHECK(memcmp(want, got, sizeof want) == 0, "a fresh state after the fault decodes other tokens");
    memra_arm_state_free(t);
    memra_arm_state_free(s);
    memra_arm_close(a);
    return 0;
}

int main(int argc, char **argv) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    memra_error err = {0};
    memra_loaded_model *lm = NULL;
    memra_registry *reg = NULL;
    if (memra_model_load(NULL, "tiny", 0, 1, &lm, &err) || memra_registry_open(&reg, &err)) {
        printf("could not load: %s\n", err.msg);
        return 3;
    }
    /* the collective's own timeout (oneshot: 1 s), eager and graph; then the backend's watchdog
     * (step_timeout_ms) over a collective that would wait 10 minutes: the abort ends it */
    static const struct {
        const char *arm, *expect;
        double limit;
    } cases[] = {
        {"cuda:tp=2", NULL, 3.0},
        {"cuda-graph:tp=2", NULL, 3.0},
        {"cuda:tp=2,collective=oneshot:timeout_ms=600000,step_timeout_ms=1500", "step_timeout_ms=1500", 6.0},
        {"cuda-graph:tp=2,collective=oneshot:timeout_ms=600000,step_timeout_ms=1500", "step_timeout_ms=1500", 6.0},
    };
    int rc = 0;
    char text[300];
    const char *devices = argc > 2 && strcmp(argv[1], "--devices") == 0 ? argv[2] : NULL;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(text, sizeof text, "%s%s%s", cases[i].arm, devices ? ",devices=" : "", devices ? devices : "");
        rc |= check_arm(reg, lm->model, text, cases[i].expect, cases[i].limit);
    }
    printf("%s: %d failure(s)\n", failures || rc ? "FAIL" : "PASS", failures);
    memra_registry_close(reg);
    memra_model_unload(lm);
    return rc ? rc : failures ? 1 : 0;
}
