/* cpu_test_util.h: helpers of the cpu tests: build a synthetic model in memory, open the cpu
 * backend on a plan of the default placement (as memra_arm_open does), step it. These suites test
 * the cpu plugin's own vtable contract (its exactness, its refusals, its quarantine), so they call
 * the plugin's vtable as the registry hands it over (memra_registry_load), not through the arm
 * layer of memra/arm.h; everything that is not about the plugin's own contract goes through the
 * layer (see opens_through_the_arm_layer). Every helper asserts through Criterion, so a test
 * reads as its checks. */
#ifndef MEMRA_CPU_TEST_UTIL_H
#define MEMRA_CPU_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memra/gguf.h"
#include "memra/model.h"
#include "memra/plugin.h"
#include "memra/registry.h"

typedef struct ct_model {
    void *buffer;
    size_t size;
    memra_gguf *gguf;
    memra_model *model;
} ct_model;

/* Builds preset with matrices of tensor type `type` (seed 1) in memory and describes it. */
void ct_model_build(const char *preset, uint32_t type, ct_model *out);
void ct_model_free(ct_model *cm);

/* The registry of the build tree's plugins (opened once per process). */
memra_registry *ct_registry(void);

typedef struct ct_arm {
    const memra_backend_vtable *cpu; /* the cpu plugin's vtable, from the registry */
    memra_backend *b;
    memra_plan plan;
} ct_arm;

/* Plans with the default placement and opens the cpu backend with the options in `opts_text`
 * ("stages=2,threads=3"; "" for none). Returns the status (err holds the message) so tests can
 * check failures; on success *out is ready. */
memra_status ct_arm_try_open(const memra_model *m, const char *opts_text, ct_arm *out, memra_error *err);
/* The same, asserting success. */
void ct_arm_open(const memra_model *m, const char *opts_text, ct_arm *out);
void ct_arm_close(ct_arm *a);

memra_state *ct_state_new(ct_arm *a, uint32_t capacity, uint32_t max_inflight);

/* One step (begin + end) with token, optional sampling, logits into `logits` (may be NULL);
 * returns the sampled token (-1 when not sampled), asserting success. */
int64_t ct_step(ct_arm *a, memra_state *s, int64_t token, const memra_sample_cfg *sample, float *logits);

/* Index of the largest value, lowest on ties. */
uint32_t ct_argmax(const float *x, uint32_t n);

/* The three digests of a state into out[3][32] (logits, cache, hidden). */
void ct_digests(ct_arm *a, memra_state *s, uint8_t out[3][32]);

#endif
