/* test_cpu_fenv.c: the cpu backend's bits do not depend on the caller's floating-point
 * environment. A host program that switched the rounding mode (or flush-to-zero) before a step
 * must get the same logits as one that did not, for any thread count: worker threads keep the
 * environment they were created with, the calling thread has the caller's, and a step pins the
 * default one in both. */
#include <fenv.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cpu_test_util.h"
#include "memra/gguf.h"

#define STEPS 8

/* Logits of STEPS steps of tiny on `opts`, the rounding mode set to `round` around each step. */
static void run(const ct_model *cm, const char *opts, int round, float *logits) {
    ct_arm a;
    ct_arm_open(cm->model, opts, &a);
    memra_state *s = ct_state_new(&a, 64, 1);
    for (int i = 0; i < STEPS; i++) {
        cr_assert_eq(fesetround(round), 0);
        ct_step(&a, s, 100 + 7 * i, NULL, logits + (size_t)i * cm->model->n_vocab);
        fesetround(FE_TONEAREST);
    }
    a.cpu->state_free(a.b, s);
    ct_arm_close(&a);
}

Test(cpu_fenv, caller_rounding_mode_changes_no_bit) {
    ct_model cm;
    ct_model_build("tiny", MEMRA_TYPE_F32, &cm);
    size_t n = (size_t)STEPS * cm.model->n_vocab;
    float *ref = calloc(n, sizeof *ref), *down1 = calloc(n, sizeof *down1), *up2 = calloc(n, sizeof *up2);
    cr_assert(ref && down1 && up2);
    run(&cm, "threads=1", FE_TONEAREST, ref);
    run(&cm, "threads=1", FE_DOWNWARD, down1);
    run(&cm, "threads=2,grain=0", FE_UPWARD, up2);
    cr_expect_eq(memcmp(ref, down1, n * sizeof *ref), 0, "threads=1 under FE_DOWNWARD changed the logits");
    cr_expect_eq(memcmp(ref, up2, n * sizeof *ref), 0, "threads=2 under FE_UPWARD changed the logits");
    free(ref);
    free(down1);
    free(up2);
    ct_model_free(&cm);
}
