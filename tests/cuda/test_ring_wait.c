/* test_ring_wait.c: the rule by which the cuda backend hands back a sampled step's result from its
 * host ring (backends/cuda/ring_wait.h, the header mc_step_end includes), checked on the host: no
 * GPU needed, so it runs in CI.
 *
 * The device sampler writes the entry's tag (the step's position) last; the host polls it and asks
 * the step's event only while it is not there. Each scenario below scripts the tag's writes
 * against the host's polls of the event, and states the one right answer: the entry is the step's
 * exactly when its tag is the step's position, also when the tag lands between the host's last
 * read and its query of a completed event; a step whose event completed without the tag, or with
 * an earlier step's tag left in the entry, is a missing result; a failed query is a fault.
 *
 * The negative controls: the same scenarios catch the rule the backend had before (the loop ends
 * on the event and the entry is trusted: a missing tag hands back a stale result), and a rule that
 * checks the tag without reading it again after the event (a tag that came in between is called
 * missing: a good step fails). */
#include <criterion/criterion.h>
#include <stdint.h>

#include "ring_wait.h"

#define WANT 41
#define STALE 38 /* an earlier step's entry at the same ring index */

/* One scenario: the event completes (or fails) at poll `done_at`; the tag becomes `tag_to` when
 * poll `tag_at` is asked (before it answers), never if tag_at is 0. */
typedef struct scenario {
    const char *name;
    int32_t tag0;    /* the entry's tag before the wait */
    int tag_at;      /* the poll that writes the tag (1-based); 0: none */
    int32_t tag_to;  /* what it writes */
    int done_at;     /* the poll that answers complete */
    int fails;       /* that poll answers an error instead */
    mc_ring_end want;
} scenario;

static const scenario scenarios[] = {
    {"tag there at once", WANT, 0, 0, 1, 0, MC_RING_FINAL},
    {"tag after three polls", -1, 3, WANT, 9, 0, MC_RING_FINAL},
    {"tag lands between the read and the completed event", -1, 4, WANT, 4, 0, MC_RING_FINAL},
    {"event complete, tag never written", -1, 0, 0, 5, 0, MC_RING_MISSING},
    {"event complete at once, tag never written", -1, 0, 0, 1, 0, MC_RING_MISSING},
    {"an earlier step's tag left in the entry", STALE, 0, 0, 2, 0, MC_RING_MISSING},
    {"the tag of another position written", -1, 2, WANT + 3, 3, 0, MC_RING_MISSING},
    {"the query fails", -1, 0, 0, 2, 1, MC_RING_FAULT},
};

typedef struct run {
    const scenario *sc;
    volatile int32_t tag;
    int polls;
} run;

static int poll_script(void *arg) {
    run *r = arg;
    const int n = ++r->polls;
    if (r->sc->tag_at && n == r->sc->tag_at)
        r->tag = r->sc->tag_to;
    if (n >= r->sc->done_at)
        return r->sc->fails ? -1 : 1;
    return 0;
}

typedef mc_ring_end (*rule_fn)(const volatile int32_t *tag, int32_t want, mc_ring_poll_fn poll, void *arg,
                               int32_t *seen);

static mc_ring_end rule_backend(const volatile int32_t *tag, int32_t want, mc_ring_poll_fn poll, void *arg,
                                int32_t *seen) {
    return mc_ring_wait(tag, want, poll, arg, seen);
}

/* Before the fix: the loop ends on the event, the caller hands back the entry as it is. */
static mc_ring_end rule_trusts_event(const volatile int32_t *tag, int32_t want, mc_ring_poll_fn poll, void *arg,
                                     int32_t *seen) {
    int p = 0;
    while (*tag != want)
        if ((p = poll(arg)) != 0)
            break;
    *seen = *tag;
    return p < 0 ? MC_RING_FAULT : MC_RING_FINAL;
}

/* Checks the tag, but with the value read before the event's answer. */
static mc_ring_end rule_no_reread(const volatile int32_t *tag, int32_t want, mc_ring_poll_fn poll, void *arg,
                                  int32_t *seen) {
    int32_t t;
    while ((t = *tag) != want) {
        const int p = poll(arg);
        if (p < 0)
            return MC_RING_FAULT;
        if (p > 0)
            break;
    }
    *seen = t;
    return t == want ? MC_RING_FINAL : MC_RING_MISSING;
}

/* The scenarios the rule gets wrong; each one is printed. */
static int wrong_answers(rule_fn rule, const char *who) {
    int wrong = 0;
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
        run r = {&scenarios[i], scenarios[i].tag0, 0};
        int32_t seen = 12345;
        const mc_ring_end got = rule(&r.tag, WANT, poll_script, &r, &seen);
        if (got != scenarios[i].want) {
            wrong++;
            cr_log_info("%s: '%s': %d, want %d", who, scenarios[i].name, (int)got, (int)scenarios[i].want);
        }
        if (rule == rule_backend && got == MC_RING_MISSING)
            cr_expect_eq(seen, r.tag, "'%s': the tag reported is %d, the entry holds %d", scenarios[i].name,
                         (int)seen, (int)r.tag);
    }
    return wrong;
}

Test(ring_wait, the_backends_rule_answers_every_scenario) {
    cr_expect_eq(wrong_answers(rule_backend, "backend"), 0);
}

Test(ring_wait, the_tag_there_asks_no_event) {
    run r = {&scenarios[0], WANT, 0};
    int32_t seen = 0;
    cr_expect_eq(mc_ring_wait(&r.tag, WANT, poll_script, &r, &seen), MC_RING_FINAL);
    cr_expect_eq(r.polls, 0, "the event was asked %d times", r.polls);
    cr_expect_eq(seen, WANT);
}

Test(ring_wait, negative_control_the_rule_that_trusts_the_event_is_caught) {
    cr_expect_eq(wrong_answers(rule_trusts_event, "trusts the event"), 4,
                 "the pre-fix rule hands back the four entries whose tag never came");
}

Test(ring_wait, negative_control_the_rule_without_a_second_read_is_caught) {
    cr_expect_eq(wrong_answers(rule_no_reread, "no second read"), 1,
                 "the rule without the second read fails the step whose tag came with its event");
}
