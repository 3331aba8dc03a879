/* gate_bisect.c: after a replay mismatch, where inside the failing step the two arms part.
 *
 * From the last state they agreed on: the replay's first mismatch is at step S, so both arms
 * agreed on every step before it that was compared (logits, and cache and hidden digests where
 * compared; a chunked prime compares at its chunk boundaries only); each arm gets a fresh state
 * fed the reference's inputs 0..S-1 as it ran them (its prime in its own chunks, the rest step by
 * step; untapped, not sampled: sampling changes no state but the carried token, which an
 * explicit input replaces), then step S with taps on (memra_arm_step_tapped, the backend's memra.ops): the logical tensor
 * after every op of every layer and of the head, in the op vocabulary's order. Arm a's tensors
 * are kept; arm b's are compared with them as they come (only the sites both arms hand over: a
 * backend that fuses a norm into a GEMV has no tensor between them), by bits (--compare exact) or by NMSE
 * over the tolerance (--compare nmse:X). The first site that differs is named: layer, site,
 * tensor, the first differing element, both values, their ulp distance, the tensor's NMSE, and
 * on each arm the stage and the rank that hold that element. Each arm's tapped logits are checked
 * against its correctness run at S ("reproduced"), so a bisect that did not see the mismatch
 * again says so.
 *
 * It runs only after the verdict is already FAIL (a replay mismatch), changes nothing the verdict
 * reads, and writes one bisect record; a gate that passes never gets here. A bisect that cannot
 * run (an arm without taps, memory, a failing step) says why in its record and the run goes on. */
#include <stdlib.h>
#include <string.h>

#include "gate.h"
#include "memra/digest.h"

/* One site of arm a, kept. */
typedef struct kept_site {
    int32_t layer;
    char site[24], tensor[16];
    memra_op_site info;
    float *data;
} kept_site;

typedef struct bisect_taps {
    gate_ctx *ctx;
    gate_bisect *out;
    kept_site *sites; /* arm a's */
    uint32_t n, cap;
    uint32_t seen;      /* arm b: sites handed over so far */
    uint32_t cursor;    /* arm b: the next of a's sites to match */
    uint32_t compared;  /* sites both arms have, compared */
    int32_t last_layer; /* the last site that agreed */
    char last_site[24];
    bool b_side;
    bool stop_compare; /* b: the first difference is found (or the arms' sites part) */
    uint8_t logits_sha[32];
    bool have_logits;
} bisect_taps;

/* The rank that holds element i (-1: every rank of the stage holds it). */
static int32_t holder(const memra_op_site *s, int64_t i) {
    uint32_t n = s->n_ranks < MEMRA_MAX_RANKS ? s->n_ranks : MEMRA_MAX_RANKS, holders = 0;
    int32_t first = -1;
    for (uint32_t r = 0; r < n; r++)
        if (i >= (int64_t)s->begin[r] && i < (int64_t)s->end[r]) {
            holders++;
            if (first < 0)
                first = (int32_t)r;
        }
    return n > 1 && holders == n ? -1 : first;
}

static void site_name(char *buf, size_t size, int32_t layer, const char *site, const char *tensor) {
    char l[24];
    if (layer < 0)
        snprintf(l, sizeof l, "head");
    else
        snprintf(l, sizeof l, "layer %d", (int)layer);
    if (strcmp(site, tensor) == 0)
        snprintf(buf, size, "%s %s", l, site);
    else
        snprintf(buf, size, "%s %s.%s", l, site, tensor);
}

static memra_status keep_a(bisect_taps *t, const memra_op_site *s, const float *data, memra_error *err) {
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 64;
        kept_site *sites = realloc(t->sites, (size_t)cap * sizeof *sites);
        if (!sites)
            return memra_fail(err, MEMRA_E_NOMEM, "out of memory for the bisect's sites");
        t->sites = sites;
        t->cap = cap;
    }
    kept_site *k = &t->sites[t->n];
    *k = (kept_site){.layer = s->layer, .info = *s};
    snprintf(k->site, sizeof k->site, "%s", s->site ? s->site : "?");
    snprintf(k->tensor, sizeof k->tensor, "%s", s->tensor ? s->tensor : "?");
    k->info.site = k->info.tensor = NULL;
    if (!(k->data = malloc((size_t)s->n * sizeof(float) + 1)))
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory for the bisect's copy of %s (%u floats)", k->site, s->n);
    memcpy(k->data, data, (size_t)s->n * sizeof(float));
    t->n++;
    return MEMRA_OK;
}

/* Why the arms part at this site, where the gate can tell: a sum across ranks in another order.
 * The site follows an all-reduce when it is one (attn_out, ffn_down), or when it is the residual
 * just after one (attn_res, ffn_res) and that reduce's own site was not compared (a backend that
 * adds the residual inside the reduced GEMV hands over no attn_out). */
static void cause(bisect_taps *t, const kept_site *a, const memra_op_site *b) {
    gate_bisect *o = t->out;
    o->cause[0] = '\0';
    bool reduce = strcmp(a->site, "attn_out") == 0 || strcmp(a->site, "ffn_down") == 0;
    bool res = strcmp(a->site, "attn_res") == 0 || strcmp(a->site, "ffn_res") == 0;
    const char *own = strcmp(a->site, "attn_res") == 0 ? "attn_out" : "ffn_down";
    bool folded = res && !(t->last_layer == a->layer && strcmp(t->last_site, own) == 0);
    if ((reduce || folded) && a->info.n_ranks != b->n_ranks)
        snprintf(o->cause, sizeof o->cause,
                 "sums across ranks in another order: the first differing site follows an all-reduce, and the arms "
                 "sum it over %u and %u rank(s) (a partial per rank, added in rank order)",
                 a->info.n_ranks, b->n_ranks);
    else if (t->ctx->by_design[0])
        snprintf(o->cause, sizeof o->cause, "the arms differ by design: %.250s", t->ctx->by_design);
}

/* Arm a's site of the same layer, site and tensor, from the cursor on (sites an arm does not hand
 * over, e.g. a norm fused into a GEMV, are passed over: only sites both arms have are compared). */
static const kept_site *find_a(bisect_taps *t, const memra_op_site *s) {
    for (uint32_t j = t->cursor; j < t->n; j++) {
        const kept_site *a = &t->sites[j];
        if (a->layer == s->layer && strcmp(a->site, s->site ? s->site : "") == 0 &&
            strcmp(a->tensor, s->tensor ? s->tensor : "") == 0) {
            t->cursor = j + 1;
            return a;
        }
    }
    return NULL;
}

static memra_status compare_b(bisect_taps *t, const memra_op_site *s, const float *data, memra_error *err) {
    (void)err;
    gate_bisect *o = t->out;
    t->seen++;
    if (t->stop_compare)
        return MEMRA_OK;
    const kept_site *a = find_a(t, s);
    if (!a)
        return MEMRA_OK; /* arm a has no such site (or not after the last one compared) */
    if (a->info.n != s->n) {
        char an[64];
        site_name(an, sizeof an, a->layer, a->site, a->tensor);
        snprintf(o->note, sizeof o->note, "the arms' tensors of %s differ in size (a %u, b %u elements)", an, a->info.n,
                 s->n);
        t->stop_compare = true;
        return MEMRA_OK;
    }
    t->compared++;
    gate_logit_diff d;
    gate_compare_logits(a->data, data, s->n, &d);
    bool differs =
        t->ctx->cfg->nmse ? !(d.nmse <= t->ctx->cfg->nmse_tol) || d.n_nonfinite_got != d.n_nonfinite_ref : d.n_diff > 0;
    if (!differs) {
        o->agreed++;
        site_name(o->prev, sizeof o->prev, a->layer, a->site, a->tensor);
        t->last_layer = a->layer;
        snprintf(t->last_site, sizeof t->last_site, "%s", a->site);
        return MEMRA_OK;
    }
    t->stop_compare = true;
    o->found = true;
    o->layer = a->layer;
    snprintf(o->site, sizeof o->site, "%s", a->site);
    snprintf(o->tensor, sizeof o->tensor, "%s", a->tensor);
    o->n = s->n;
    o->diff = d;
    int64_t at = d.first_index >= 0 ? d.first_index : 0;
    o->ulp = d.first_index >= 0 ? gate_ulp_distance(d.first_ref, d.first_got) : 0;
    o->arm[0].stage = a->info.stage;
    o->arm[0].n_ranks = a->info.n_ranks;
    o->arm[0].rank = holder(&a->info, at);
    o->arm[1].stage = s->stage;
    o->arm[1].n_ranks = s->n_ranks;
    o->arm[1].rank = holder(s, at);
    memra_sha256(a->data, (size_t)s->n * sizeof(float), o->arm[0].sha);
    memra_sha256(data, (size_t)s->n * sizeof(float), o->arm[1].sha);
    cause(t, a, s);
    return MEMRA_OK;
}

static memra_status on_site(void *user, const memra_op_site *s, const float *data, memra_error *err) {
    bisect_taps *t = user;
    if (!s || !data || !MEMRA_HAS_MEMBER(s, memra_op_site, end))
        return memra_fail(err, MEMRA_E_PLUGIN, "the backend handed the bisect a site without its tensor");
    if (s->site && strcmp(s->site, "logits") == 0 && s->layer < 0) {
        memra_sha256(data, (size_t)s->n * sizeof(float), t->logits_sha);
        t->have_logits = true;
    }
    t->out->arm[t->b_side].sites++;
    return t->b_side ? compare_b(t, s, data, err) : keep_a(t, s, data, err);
}

/* One arm: a fresh state, inputs 0..S-1, then step S tapped. */
/* The inputs 0..step-1 on s as the arm ran them: where it primes in chunks (gate_prime: steps
 * 0..P-2, chunks from step 0), those steps in its chunks (the last one cut at step - 1), every
 * other step single. So a divergence that only the arm's chunked path makes, in a chunk before
 * the failing step, is in the state the tapped step reads; replayed token by token it would not
 * be, and the bisect would find no site. */
static memra_status replay_prefix(gate_ctx *ctx, gate_arm *arm, memra_arm_state *s, uint32_t step, memra_error *err) {
    const uint32_t P = ctx->cfg->prime;
    uint32_t chunked = 0;
    if (memra_arm_prefill(arm->arm) > 1 && memra_arm_prefill_native(arm->arm) && P >= 2)
        chunked = step < P - 1 ? step : P - 1;
    memra_status st = MEMRA_OK;
    if (chunked > 0)
        st = memra_arm_prefill_run(s, ctx->ref.inputs, 0, chunked, NULL, NULL, NULL, err);
    if (st == MEMRA_OK && step > chunked)
        st = memra_arm_run(s, ctx->ref.inputs, chunked, step - chunked, NULL, NULL, NULL, NULL, err);
    return st;
}

static memra_status tap_arm(bisect_taps *t, gate_arm *arm, uint32_t step, memra_error *err) {
    gate_ctx *ctx = t->ctx;
    memra_arm_state *s = NULL;
    memra_status st = gate_new_state(arm, step + 1, &s, err);
    if (st == MEMRA_OK && step > 0)
        st = replay_prefix(ctx, arm, s, step, err);
    t->have_logits = false;
    if (st == MEMRA_OK)
        st = memra_arm_step_tapped(s, ctx->ref.inputs[step], on_site, t, err);
    memra_arm_state_free(s);
    if (st != MEMRA_OK)
        return st;
    const gate_trace *trace = t->b_side ? &ctx->rep : &ctx->ref;
    t->out->arm[t->b_side].reproduced = t->have_logits && memcmp(t->logits_sha, trace->logits_sha[step], 32) == 0;
    return gate_check_stop(ctx, err);
}

memra_status gate_bisect_run(gate_ctx *ctx, memra_error *err) {
    gate_bisect *o = &ctx->out.bisect;
    const gate_mismatch *m = &ctx->out.first;
    *o = (gate_bisect){.step = -1, .input = -1, .layer = -1};
    if (!ctx->out.have_first || strcmp(m->where, "replay") != 0 || m->step < 0 || (uint64_t)m->step >= ctx->ref.steps)
        return MEMRA_OK;
    o->ran = true;
    o->step = m->step;
    o->input = ctx->ref.inputs[m->step];
    o->available = memra_arm_has_taps(ctx->a.arm) && memra_arm_has_taps(ctx->b.arm);
    if (!o->available) {
        snprintf(o->note, sizeof o->note, "no bisect: %s offers no per-op taps (memra.ops)",
                 !memra_arm_has_taps(ctx->a.arm)   ? "arm a's backend"
                 : !memra_arm_has_taps(ctx->b.arm) ? "arm b's backend"
                                                   : "neither backend");
        gate_rec_bisect(ctx, o);
        return gate_check_stop(ctx, err);
    }
    bisect_taps t = {.ctx = ctx, .out = o, .last_layer = -2};
    memra_error e = {0};
    memra_status st = tap_arm(&t, &ctx->a, (uint32_t)m->step, &e);
    if (st == MEMRA_OK) {
        t.b_side = true;
        st = tap_arm(&t, &ctx->b, (uint32_t)m->step, &e);
    }
    if (st == MEMRA_OK) {
        o->done = true;
        if (!o->found && !t.stop_compare && t.compared == 0)
            snprintf(o->note, sizeof o->note, "the arms have no site in common (a %u, b %u sites)", t.n, t.seen);
        else if (!o->found && !o->note[0])
            snprintf(o->note, sizeof o->note,
                     "no site differs: every op's tensor of step %lld agrees on both arms (%u sites); the difference "
                     "is outside them (a readback, a digest, the sampler)%s",
                     (long long)o->step, o->agreed,
                     o->arm[0].reproduced && o->arm[1].reproduced ? "" : ", or the tapped step did not reproduce it");
    } else if (gate_signal || st == MEMRA_E_IO) {
        for (uint32_t i = 0; i < t.n; i++)
            free(t.sites[i].data);
        free(t.sites);
        if (err)
            *err = e;
        return st;
    } else {
        snprintf(o->note, sizeof o->note, "the bisect stopped: %.370s", e.msg[0] ? e.msg : memra_status_name(st));
    }
    for (uint32_t i = 0; i < t.n; i++)
        free(t.sites[i].data);
    free(t.sites);
    gate_rec_bisect(ctx, o);
    return gate_check_stop(ctx, err);
}
