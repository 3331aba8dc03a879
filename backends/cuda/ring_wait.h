/* ring_wait.h: how the host decides that a sampled step's entry of its result ring is final
 * (mc_step_end, cuda_step_end.cu), shared with a host test (C, tests/cuda/test_ring_wait.c) so the
 * test checks the rule the backend runs.
 *
 * Without ranks the device sampler writes the step's result straight into a ring in pinned host
 * memory, its tag (`seq`, the position the entry is for) last, after a system fence. The host
 * clears the tag before the step. With wait=ring the host polls the tag and asks the step's event
 * only while the tag is not there yet; with wait=event it waits for the event, then reads.
 *
 * The rule, whichever wait: the entry is final only when its tag is the step's position.
 * - The tag seen: final.
 * - The event complete and the tag not seen: the tag is read once more, since the sampler may
 *   have written it between the host's last read and its query of the event (then it is final).
 *   If it is still not there the step ended without writing its result (a fault: a kernel that
 *   returned early, a wrong ring index, an entry cleared after its write). The entry is not
 *   handed back, ever: the step fails and the state is quarantined.
 * - The event failed: the device's error.
 * Before this rule the loop ended on the event and trusted the entry, so a missing tag handed back
 * whatever an earlier step had left there. */
#ifndef MEMRA_RING_WAIT_H
#define MEMRA_RING_WAIT_H

#include <stdint.h>

typedef enum mc_ring_end {
    MC_RING_FINAL = 0,   /* the tag is the step's position: the entry is the step's */
    MC_RING_MISSING = 1, /* the step's event completed and the tag never came */
    MC_RING_FAULT = 2    /* asking the event failed */
} mc_ring_end;

/* Asks whether the step is over: 0 not yet, 1 complete, -1 an error (the caller keeps it). */
typedef int (*mc_ring_poll_fn)(void *arg);

/* Waits for the entry whose tag is *tag to be the step at `want`; *seen is the last tag read.
 * poll is asked only while the tag is not there. */
static inline mc_ring_end mc_ring_wait(const volatile int32_t *tag, int32_t want, mc_ring_poll_fn poll, void *arg,
                                       int32_t *seen) {
    int32_t t;
    while ((t = *tag) != want) {
        const int p = poll(arg);
        if (p == 0)
            continue;
        if (p < 0) {
            *seen = t;
            return MC_RING_FAULT;
        }
        t = *tag; /* the step is over: every write it made is visible, the tag's too if it came */
        break;
    }
    *seen = t;
    return t == want ? MC_RING_FINAL : MC_RING_MISSING;
}

#endif
