/* cuda_step_end.cu: the end of a `cuda` step (mc_step_end): its wait, bounded with ranks (the
 * watchdog, mc_wait_step), by the result ring's tag without (wait=ring) or by its event; then the
 * checks and the readback. A sampled step without ranks hands back its ring entry only when the
 * entry's tag is the step's position (ring_wait.h); a step that ended without writing it fails
 * and quarantines its state instead of handing back an earlier step's result. */
#include <cuda_runtime.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "cuda_backend.h"
#include "cuda_kernels.h"
#include "memra/status.h"
#include "ring_wait.h"

static double mc_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* A tensor-parallel step's wait, bounded: past step_timeout_ms the state's communicators are
 * aborted (a collective spinning for a rank that never arrives gives up at once; NCCL's kernels
 * end with ncclCommAbort), the step fails naming the timeout and the state is quarantined. If the
 * device still does not finish within a further 10 s the step fails all the same (the state must
 * then not be used; freeing it waits for its streams). */
static memra_status mc_wait_step(memra_backend *b, memra_state *s, mc_slot *slot, memra_error *err) {
    const double t0 = mc_now_s(), limit = b->step_timeout_ms / 1000.0;
    cudaError_t e;
    while ((e = cudaEventQuery(slot->pending)) == cudaErrorNotReady) {
        if (mc_now_s() - t0 > limit)
            break;
        sched_yield();
    }
    if (e == cudaSuccess)
        return MEMRA_OK;
    if (e != cudaErrorNotReady) {
        memra_status st = mc_cuda_fail(err, e, "the step (cudaEventQuery)");
        mc_quarantine_fail(s, err);
        return st;
    }
    if (s->on_abort) /* cuda-graph: its graph destroyed first (it may hold the communicators) */
        s->on_abort(s->on_abort_arg);
    for (uint32_t i = 0; i < s->n_stages; i++)
        if (s->comm[i] && b->coll->abort)
            b->coll->abort(s->comm[i]);
    const double t1 = mc_now_s();
    while ((e = cudaEventQuery(slot->pending)) == cudaErrorNotReady && mc_now_s() - t1 < 10.0)
        sched_yield();
    memra_status st =
        memra_fail(err, MEMRA_E_DEVICE,
                   "cuda: the step at position %u did not finish within step_timeout_ms=%u (a collective of "
                   "'%s' waited too long); the state's communicators were aborted%s",
                   slot->position - 1, b->step_timeout_ms, b->coll_name,
                   e == cudaSuccess ? "" : ", and the device had still not finished 10 s later");
    mc_quarantine(b, s, err ? err->msg : "a step timed out");
    s->position = slot->position - 1;
    return st;
}

/* ---- the ring entry of a sampled step without ranks (ring_wait.h) ------------------------------ */

typedef struct mc_event_poll {
    cudaEvent_t ev;
    cudaError_t e; /* the query's error, when it failed */
} mc_event_poll;

static int mc_poll_event(void *arg) {
    mc_event_poll *p = (mc_event_poll *)arg;
    const cudaError_t e = cudaEventQuery(p->ev);
    if (e == cudaErrorNotReady)
        return 0;
    p->e = e;
    return e == cudaSuccess ? 1 : -1;
}

/* The step's event has completed already (wait=event). */
static int mc_poll_done(void *arg) {
    (void)arg;
    return 1;
}

/* The slot's entry final, or the step failed and the state quarantined. A fault (the query's
 * error) comes only from mc_poll_event, whose arg holds it; mc_poll_done never fails. */
static memra_status mc_ring_final(memra_state *s, mc_slot *slot, mc_ring_poll_fn poll, void *arg, memra_error *err) {
    int32_t seen = 0;
    const mc_ring_end r =
        mc_ring_wait(&((const volatile mc_sample_result *)slot->res)->seq, (int32_t)slot->position, poll, arg, &seen);
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the entry after its tag */
    if (r == MC_RING_FINAL)
        return MEMRA_OK;
    memra_status st;
    if (r == MC_RING_FAULT)
        st = mc_cuda_fail(err, ((mc_event_poll *)arg)->e, "the step (cudaEventQuery)");
    else
        st = memra_fail(err, MEMRA_E_DEVICE,
                        "cuda: the step at position %u ended without its sampler's result (its entry of the host's "
                        "result ring carries tag %d, not %u); the state is quarantined",
                        slot->position - 1, (int)seen, slot->position);
    mc_quarantine_fail(s, err);
    return st;
}

memra_status mc_step_end(memra_backend *b, memra_state *s, float *logits, memra_step_result *out, memra_error *err) {
    memra_status st = MEMRA_OK;
    if (s->inflight == 0)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: step_end with no step in flight");
    mc_slot *slot = &s->slots[s->head];
    s->head = (s->head + 1) % s->max_inflight;
    s->inflight--;
    if (b->tp) {
        if ((st = mc_wait_step(b, s, slot, err)))
            return st;
    } else if (b->cfg.wait != MC_WAIT_EVENT && slot->sampled && !slot->want_logits && s->n_stages == 1) {
        /* wait=ring or word: the step ended when its sampler's last write, the entry's tag, is visible
         * here (what is left of the step is that kernel's exit); the event answers for a step
         * that never writes it, which then fails (ring_wait.h) */
        mc_event_poll ep = {slot->pending, cudaSuccess};
        if ((st = mc_ring_final(s, slot, mc_poll_event, &ep, err)))
            return st;
    } else {
        MC_TRY(cudaEventSynchronize(slot->pending), "the step (cudaEventSynchronize)");
        /* the same rule after the event: a sampled step's entry is its own only with its tag */
        if (!b->tp && slot->sampled && (st = mc_ring_final(s, slot, mc_poll_done, NULL, err)))
            return st;
    }
    if (s->quarantined)
        return memra_fail(err, MEMRA_E_QUARANTINED, "cuda: the state failed earlier (%s); free it", s->why);
    if (b->tp && (st = mc_check_verdicts(b, s, slot->position - 1, err))) {
        mc_quarantine(b, s, err ? err->msg : "a collective failed");
        s->position = slot->position - 1; /* the step did not commit; later ones are void */
        return st;
    }
    if (slot->sampled && slot->res->bad_index >= 0) {
        float f;
        memcpy(&f, &slot->res->bad_bits, 4);
        st = memra_fail(err, MEMRA_E_RANGE, "cuda: logit %d is %s", slot->res->bad_index,
                        f != f ? "nan" : (f > 0 ? "+inf" : "-inf"));
        mc_quarantine(b, s, err ? err->msg : "non-finite logits");
        return st;
    }
    if (logits && slot->want_logits)
        memcpy(logits, slot->host_logits, (size_t)b->m->n_vocab * 4);
    if (out) {
        out->token = slot->sampled ? slot->res->token : -1;
        out->position = slot->position;
    }
    s->stats.steps++;
    return MEMRA_OK;
fail:
    mc_quarantine_fail(s, err);
    return st;
}
