/* cuda_tp.cu: the `cuda` backend's tensor parallelism: the collective loaded and checked at open,
 * a state's communicators and verdict rings, the all-reduce of a stage's ranks (the n calls in
 * rank order), the refusal cells handed to the communicators, the verdicts of a checked commit
 * read at step end (and a refused step named), and the "memra.tp" extension (cuda_backend.h has
 * the design: commit, verdict and poison). */
#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_ext.h"
#include "cuda_kernels.h"
#include "cuda_backend.h"
#include "memra/ext.h"
#include "memra/gguf.h"
#include "memra/model.h"
#include "memra/numeric.h"
#include "memra/options.h"
#include "memra/plugin.h"
#include "memra/status.h"

/* The block an all-reduce follows, for a message: attention, the FFN, or a mixture of experts'. */
static const char *mc_block_name(const memra_backend *b, uint32_t which) {
    return !which ? "attention" : b->m->n_expert ? "experts (the ffn block)" : "ffn";
}

/* Tensor parallelism: the ranks' slices (whole kv groups, in order), the collective loaded. */
memra_status mc_open_tp(memra_backend *b, const memra_options *opts, uint32_t n_dev, memra_error *err) {
    const memra_model *m = b->m;
    for (uint32_t s = 0; s < b->plan.n_stages; s++) {
        const memra_stage_plan *sp = &b->plan.stages[s];
        if (sp->n_ranks == 0 || sp->n_ranks > MEMRA_MAX_RANKS)
            return memra_fail(err, MEMRA_E_INVALID, "cuda: stage %u has %u ranks (expected 1..%u)", s, sp->n_ranks,
                              (unsigned)MEMRA_MAX_RANKS);
        if (sp->n_ranks == 1)
            continue;
        b->tp = true;
        uint32_t h = 0, k = 0, f = 0;
        for (uint32_t r = 0; r < sp->n_ranks; r++) {
            const memra_rank_plan *rp = &sp->ranks[r];
            if (rp->device < 0 || (uint32_t)rp->device >= n_dev)
                return memra_fail(err, MEMRA_E_INVALID,
                                  "cuda: rank %u of stage %u is on device %d, but there are %u "
                                  "devices",
                                  r, s, rp->device, n_dev);
            const uint32_t nh = rp->head_end - rp->head_begin, nk = rp->kv_head_end - rp->kv_head_begin;
            /* ep alone (tp=1): rank 0 holds every head and ffn row, the expert ranks none */
            if (b->ep > 1 && r > 0 && nh == 0 && nk == 0 && rp->ff_end == rp->ff_begin && h == m->n_head &&
                k == m->n_head_kv && f == m->n_ff && rp->head_begin == h && rp->kv_head_begin == k && rp->ff_begin == f)
                continue;
            if (rp->head_begin != h || rp->kv_head_begin != k || rp->ff_begin != f || nh == 0 || nk == 0 ||
                nh * m->n_head_kv != nk * m->n_head || rp->ff_end <= rp->ff_begin)
                return memra_fail(err, MEMRA_E_INVALID,
                                  "cuda: rank %u of stage %u holds heads [%u, %u), kv heads [%u, %u) and ffn rows "
                                  "[%u, %u); expected whole kv groups and rows in rank order",
                                  r, s, rp->head_begin, rp->head_end, rp->kv_head_begin, rp->kv_head_end, rp->ff_begin,
                                  rp->ff_end);
            h = rp->head_end;
            k = rp->kv_head_end;
            f = rp->ff_end;
        }
        if (h != m->n_head || k != m->n_head_kv || f != m->n_ff)
            return memra_fail(err, MEMRA_E_INVALID,
                              "cuda: the ranks of stage %u hold %u of %u heads and %u of %u ffn "
                              "rows",
                              s, h, m->n_head, f, m->n_ff);
    }
    if (!b->tp)
        return MEMRA_OK;
    const char *coll = memra_options_get(opts, "collective");
    memra_status st =
        memra_collective_value_parse(coll ? coll : "oneshot", b->coll_name, sizeof b->coll_name, &b->coll_opts, err);
    if (st)
        return st;
    if ((st = memra_options_u32(opts, "step_timeout_ms", 30000, 100, 3600000, &b->step_timeout_ms, err)))
        return st;
    const memra_plugin *p = NULL;
    if ((st = b->host->find_plugin(b->coll_name, MEMRA_PLUGIN_COLLECTIVE, &p, err))) {
        memra_error_prefix(err, "cuda: tensor parallelism needs the collective '%.60s' (collective=)", b->coll_name);
        return st;
    }
    const memra_collective_vtable *vt = p ? p->collective : NULL;
    if (!MEMRA_HAS_MEMBER(vt, memra_collective_vtable, abort) || !vt->create || !vt->destroy || !vt->all_reduce_sum_f32)
        return memra_fail(err, MEMRA_E_PLUGIN, "cuda: the collective '%.60s' has no usable all-reduce", b->coll_name);
    b->coll = vt;
    /* Buffers sized for this model's vectors up front (the collective's own keys, where it has
     * them: oneshot's max_count, nccl's prealloc_count), so nothing grows inside a capture: n_embd,
     * or a mixture of experts' slots (k, and the shared expert's, x n_embd: the expert all-reduce). */
    const uint64_t slots = m->n_expert ? (uint64_t)(m->n_expert_used + (m->n_ff_shexp ? 1 : 0)) * m->n_embd : 0;
    const uint64_t most = slots > m->n_embd ? slots : m->n_embd;
    for (uint32_t i = 0; i < vt->n_options; i++)
        if (vt->options &&
            (strcmp(vt->options[i].key, "max_count") == 0 || strcmp(vt->options[i].key, "prealloc_count") == 0)) {
            char buf[24];
            snprintf(buf, sizeof buf, "%llu", (unsigned long long)most);
            if ((st = memra_options_set(&b->coll_opts, vt->options[i].key, buf, err)))
                return st;
        }
    const size_t n = (size_t)b->plan.n_stages * MEMRA_MAX_RANKS * 2 * m->n_layer;
    b->retired = (uint64_t *)calloc(n, sizeof *b->retired);
    if (!b->retired)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
    return MEMRA_OK;
}

/* With no stage of more than one rank, the tensor-parallel keys change nothing: a collective=
 * given is checked as it would be with ranks (its value, the plugin, the plugin's own keys),
 * then refused, as step_timeout_ms= is, so two arms that differ only by such a key never look
 * like two configurations. */
memra_status mc_check_idle_tp_keys(const memra_host *host, const memra_plan *plan, const memra_options *opts,
                                   memra_error *err) {
    for (uint32_t s = 0; s < plan->n_stages; s++)
        if (plan->stages[s].n_ranks > 1)
            return MEMRA_OK;
    const char *coll = memra_options_get(opts, "collective");
    if (coll) {
        char name[MEMRA_OPT_VALUE_MAX];
        memra_options own = {};
        memra_status st = memra_collective_value_parse(coll, name, sizeof name, &own, err);
        if (st) {
            memra_error_prefix(err, "cuda");
            return st;
        }
        const memra_plugin *p = NULL;
        if ((st = host->find_plugin(name, MEMRA_PLUGIN_COLLECTIVE, &p, err))) {
            memra_error_prefix(err, "cuda: collective=%.100s", coll);
            return st;
        }
        const memra_collective_vtable *vt = p ? p->collective : NULL;
        if (vt && own.n) {
            const memra_option_spec *lists[1] = {vt->options};
            const uint32_t counts[1] = {vt->options ? vt->n_options : 0};
            if ((st = memra_options_check(&own, lists, counts, 1, coll, err))) {
                memra_error_prefix(err, "cuda: collective=%.100s: the collective '%.60s'", coll, name);
                return st;
            }
        }
    }
    const char *key = coll ? "collective" : memra_options_get(opts, "step_timeout_ms") ? "step_timeout_ms" : NULL;
    if (!key)
        return MEMRA_OK;
    return memra_fail(err, MEMRA_E_INVALID,
                      "cuda: %s=%.100s has no effect: no stage of this arm has more than one rank (tp=1); drop it, or "
                      "give tp=N",
                      key, memra_options_get(opts, key));
}
/* The state's communicators (one per stage with ranks) and verdict rings. */
memra_status mc_state_tp(memra_backend *b, memra_state *s, memra_error *err) {
    memra_status st = MEMRA_OK;
    size_t n_rings = 0;
    for (uint32_t i = 0; i < s->n_stages; i++)
        if (mc_ranks(s, i) > 1)
            n_rings += mc_ranks(s, i);
    if (!n_rings)
        return MEMRA_OK;
    MC_TRY(cudaHostAlloc(&s->rings, n_rings * MC_VERDICT_RING * sizeof(mc_verdict),
                         cudaHostAllocMapped | cudaHostAllocPortable),
           "cudaHostAlloc of the commit verdicts");
    memset(s->rings, 0xff, n_rings * MC_VERDICT_RING * sizeof(mc_verdict)); /* position -1: none yet */
    {
        mc_verdict *ring = (mc_verdict *)s->rings;
        for (uint32_t i = 0; i < s->n_stages; i++) {
            if (mc_ranks(s, i) < 2)
                continue;
            int32_t devices[MEMRA_MAX_RANKS];
            for (uint32_t r = 0; r < mc_ranks(s, i); r++) {
                s->st[i][r].ring = ring;
                ring += MC_VERDICT_RING;
                devices[r] = s->st[i][r].device;
            }
            st = b->coll->create(b->host, mc_ranks(s, i), devices, &b->coll_opts, &s->comm[i], err);
            if (st) {
                s->comm[i] = NULL;
                memra_error_prefix(err, "cuda: the collective '%.60s' for the %u ranks of stage %u", b->coll_name,
                                   mc_ranks(s, i), i);
                return st;
            }
        }
    }
    return MEMRA_OK;
fail:
    return st;
}

/* Hands the state's communicators the refusal cells armed for the steps at positions
 * [position, position + max_inflight): handed before the first step of a window that can reach
 * them (arming needs no operation in flight), so the steps before a cell's may still be in flight
 * when it fires. A cell fires only at its position. */
memra_status mc_hand_cells(memra_backend *b, memra_state *s, uint32_t position, memra_error *err) {
    memra_status st = MEMRA_OK;
    pthread_mutex_lock(&b->lock);
    bool any = false;
    for (uint32_t k = 0; k < b->n_cells; k++)
        any = any || (!b->cells[k].handed && b->cells[k].position >= position &&
                      b->cells[k].position - position < s->max_inflight);
    if (any && (st = mc_sync_all(s, err)) == MEMRA_OK) { /* no operation in flight while arming */
        for (uint32_t k = 0; k < b->n_cells && !st; k++) {
            mc_tp_cell *c = &b->cells[k];
            if (c->handed || c->position < position || c->position - position >= s->max_inflight || !s->comm[c->stage])
                continue;
            st = b->coll->arm_refusal(s->comm[c->stage], c->rank, c->layer * 2 + c->which, c->position, c->word, err);
            if (st)
                memra_error_prefix(err, "cuda: arming the refusal cell of layer %u (%s) on rank %u at position %u",
                                   c->layer, mc_block_name(b, c->which), c->rank, c->position);
            c->handed = true;
        }
    }
    pthread_mutex_unlock(&b->lock);
    return st;
}

/* One all-reduce of a stage's ranks: the n calls back to back, in rank order (plugin.h). */
memra_status mc_all_reduce(memra_backend *b, memra_state *s, uint32_t i, uint32_t l, uint32_t which, mc_reduce_buf what,
                           memra_error *err) {
    const uint32_t layer = b->plan.stages[i].layer_begin + l;
    const memra_model *m = b->m;
    const size_t count =
        what == MC_REDUCE_SLOTS ? (size_t)(m->n_expert_used + (m->n_ff_shexp ? 1 : 0)) * m->n_embd : m->n_embd;
    for (uint32_t r = 0; r < mc_ranks(s, i); r++) {
        mc_stage_state *ss = &s->st[i][r];
        MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
        float *buf = what == MC_REDUCE_SLOTS ? ss->moe_slots : what == MC_REDUCE_PO ? ss->po : ss->x;
        memra_status st = b->coll->all_reduce_sum_f32(s->comm[i], r, buf, count, (void *)ss->stream, layer * 2 + which,
                                                      ss->pos, &ss->status[l * 2 + which], err);
        if (st) {
            memra_error_prefix(err, "cuda: the all-reduce after %s of layer %u on rank %u", mc_block_name(b, which),
                               layer, r);
            return st;
        }
    }
    return MEMRA_OK;
}

/* What a collective status word says on rank r, for a message. */
static void mc_word_text(int32_t word, uint32_t r, char *buf, size_t n) {
    if (word == MEMRA_COLLECTIVE_PENDING)
        snprintf(buf, n, "did not complete on rank %u", r);
    else if (word == MEMRA_COLLECTIVE_FAILED)
        snprintf(buf, n, "failed on rank %u (the communicator is broken, or the ranks' counts differ)", r);
    else if (word == MEMRA_COLLECTIVE_ABORTED)
        snprintf(buf, n, "was aborted on rank %u", r);
    else if (word == MEMRA_COLLECTIVE_ABSENT)
        snprintf(buf, n, "never saw rank %u arrive (an injected absence: rank %u skipped it)", r, r);
    else if (word >= MEMRA_COLLECTIVE_TIMEOUT(0) && word < MEMRA_COLLECTIVE_TIMEOUT(MEMRA_MAX_RANKS))
        snprintf(buf, n, "timed out waiting for rank %d on rank %u", (int)(word - MEMRA_COLLECTIVE_TIMEOUT(0)), r);
    else
        snprintf(buf, n, "refused on rank %u", r);
}

/* How much a word says about the cause (the ranks of one failed operation may read different
 * words: the waiting rank a timeout, the missing one its absence, a third the broken state). */
static int mc_word_rank(int32_t word) {
    if (word >= MEMRA_COLLECTIVE_TIMEOUT(0) && word < MEMRA_COLLECTIVE_TIMEOUT(MEMRA_MAX_RANKS))
        return 5;
    if (word == MEMRA_COLLECTIVE_ABSENT)
        return 4;
    if (!MEMRA_COLLECTIVE_RESERVED(word))
        return 3; /* a refusal: every rank reads it */
    if (word == MEMRA_COLLECTIVE_ABORTED)
        return 2;
    return 1;
}

/* The collective check of a finished step: every tp rank's commit verdict for position p. Per
 * stage, the first failed all-reduce of the step (the lowest site index over the ranks) is
 * reported with the word that says most about it; a refusal names the rank whose handed cell
 * fired there. */
memra_status mc_check_verdicts(memra_backend *b, memra_state *s, uint32_t p, memra_error *err) {
    bool uncommitted = false; /* some rank did not commit because an earlier stage failed */
    uint32_t u_stage = 0, u_rank = 0;
    for (uint32_t i = 0; i < s->n_stages; i++) {
        if (mc_ranks(s, i) < 2)
            continue;
        int32_t best_index = -1, word = 0;
        uint32_t who = 0;
        for (uint32_t r = 0; r < mc_ranks(s, i); r++) {
            const volatile mc_verdict *v = &s->st[i][r].ring[p % MC_VERDICT_RING];
            if (v->position != (int32_t)p)
                return memra_fail(err, MEMRA_E_DEVICE,
                                  "cuda: rank %u of stage %u has no commit verdict for position %u (its step did not "
                                  "run to the end)",
                                  r, i, p);
            const int32_t idx = v->index, w = v->word;
            if (idx < -1 && !uncommitted) { /* an earlier stage failed: it must say so below */
                uncommitted = true;
                u_stage = i;
                u_rank = r;
            }
            if (idx < 0) /* committed, or an earlier stage failed (reported there) */
                continue;
            if (best_index < 0 || idx < best_index || (idx == best_index && mc_word_rank(w) > mc_word_rank(word))) {
                best_index = idx;
                word = w;
                who = r;
            }
        }
        if (best_index < 0)
            continue;
        const uint32_t layer = b->plan.stages[i].layer_begin + (uint32_t)best_index / 2, which = best_index % 2;
        pthread_mutex_lock(&b->lock);
        for (uint32_t k = 0; k < b->n_cells; k++) {
            const mc_tp_cell *c = &b->cells[k];
            if (c->handed && c->stage == i && c->layer == layer && c->which == which && c->position == p &&
                c->word == word)
                who = c->rank;
        }
        pthread_mutex_unlock(&b->lock);
        char text[160];
        mc_word_text(word, who, text, sizeof text);
        const bool refused = !MEMRA_COLLECTIVE_RESERVED(word);
        return memra_fail(err, refused ? MEMRA_E_REFUSED : MEMRA_E_DEVICE,
                          "cuda: the all-reduce (%s) after %s of layer %u %s at position %u (stage %u, block %u, "
                          "word %d = 0x%08x); nothing was committed",
                          b->coll_name, mc_block_name(b, which), layer, text, p, i, layer * 2 + which, (int)word,
                          (unsigned)word);
    }
    /* Never a success that some rank did not commit. */
    if (uncommitted)
        return memra_fail(err, MEMRA_E_DEVICE,
                          "cuda: rank %u of stage %u did not commit the step at position %u (its verdict says an "
                          "earlier stage failed it), but no stage reports a failed all-reduce; nothing is trusted",
                          u_rank, u_stage, p);
    return MEMRA_OK;
}

/* ---- memra.tp ------------------------------------------------------------------------------- */

bool mc_is_tp(memra_backend *b) { return b->tp; }

memra_status mc_tp_collective(memra_backend *b, char *name, size_t name_size, bool *refusals, memra_error *err) {
    if (!b->tp)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: no stage has more than one rank");
    snprintf(name, name_size, "%s", b->coll_name);
    if (refusals)
        *refusals = b->coll->arm_refusal != NULL;
    return MEMRA_OK;
}

memra_status mc_tp_arm_refusal(memra_backend *b, uint32_t stage, uint32_t rank, uint32_t layer, uint32_t which,
                               uint32_t position, int32_t word, memra_error *err) {
    if (!b->tp)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: no stage has more than one rank");
    if (!b->coll->arm_refusal)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: the collective '%s' has no refusal cells", b->coll_name);
    if (stage >= b->plan.n_stages || b->plan.stages[stage].n_ranks < 2 || rank >= b->plan.stages[stage].n_ranks ||
        layer < b->plan.stages[stage].layer_begin || layer >= b->plan.stages[stage].layer_end || which > 1)
        return memra_fail(err, MEMRA_E_RANGE, "cuda: no collective site at stage %u, rank %u, layer %u, which %u",
                          stage, rank, layer, which);
    if (word == 0 || (MEMRA_COLLECTIVE_RESERVED(word) && word != MEMRA_COLLECTIVE_ABSENT))
        return memra_fail(err, MEMRA_E_INVALID, "cuda: refusal word %d is reserved", (int)word);
    pthread_mutex_lock(&b->lock);
    memra_status st = MEMRA_OK;
    if (b->n_cells == b->cap_cells) {
        uint32_t cap = b->cap_cells ? b->cap_cells * 2 : 8;
        mc_tp_cell *c = (mc_tp_cell *)realloc(b->cells, cap * sizeof *c);
        if (!c)
            st = memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
        else {
            b->cells = c;
            b->cap_cells = cap;
        }
    }
    if (!st)
        b->cells[b->n_cells++] = (mc_tp_cell){stage, rank, layer, which, position, word, false};
    pthread_mutex_unlock(&b->lock);
    return st;
}

memra_status mc_tp_clear_refusals(memra_backend *b, memra_error *err) {
    memra_status st = MEMRA_OK;
    pthread_mutex_lock(&b->lock);
    bool handed = false;
    for (uint32_t k = 0; k < b->n_cells; k++)
        handed = handed || b->cells[k].handed;
    b->n_cells = 0;
    if (handed && b->coll && MEMRA_HAS_MEMBER(b->coll, memra_collective_vtable, clear_refusals) &&
        b->coll->clear_refusals)
        for (memra_state *s = b->states; s && !st; s = s->next) {
            memra_error e = {};
            if (mc_sync_all(s, &e))
                continue; /* a quarantined state steps no more */
            for (uint32_t i = 0; i < s->n_stages && !st; i++)
                if (s->comm[i])
                    st = b->coll->clear_refusals(s->comm[i], err);
        }
    pthread_mutex_unlock(&b->lock);
    return st;
}

memra_status mc_tp_epochs(memra_backend *b, uint32_t stage, uint32_t rank, uint64_t *out, uint32_t n_blocks,
                          memra_error *err) {
    if (!b->tp)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: no stage has more than one rank");
    if (stage >= b->plan.n_stages || rank >= (b->plan.stages[stage].n_ranks ? b->plan.stages[stage].n_ranks : 1))
        return memra_fail(err, MEMRA_E_RANGE, "cuda: no rank %u in stage %u", rank, stage);
    const uint32_t nb = 2 * b->m->n_layer;
    memset(out, 0, (size_t)n_blocks * sizeof *out);
    if (b->plan.stages[stage].n_ranks < 2 || !b->coll->epochs)
        return MEMRA_OK;
    uint64_t *tmp = (uint64_t *)calloc(nb, sizeof *tmp);
    if (!tmp)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
    memra_status st = MEMRA_OK;
    pthread_mutex_lock(&b->lock);
    for (uint32_t k = 0; k < n_blocks && k < nb; k++)
        out[k] = b->retired[((size_t)stage * MEMRA_MAX_RANKS + rank) * nb + k];
    for (memra_state *s = b->states; s && !st; s = s->next) {
        if (!s->comm[stage])
            continue;
        memra_error e = {};
        memset(tmp, 0, (size_t)nb * sizeof *tmp);
        if (mc_sync_all(s, &e) == MEMRA_OK)
            st = b->coll->epochs(s->comm[stage], rank, tmp, nb, err);
        for (uint32_t k = 0; k < n_blocks && k < nb && !st; k++)
            out[k] += tmp[k];
    }
    pthread_mutex_unlock(&b->lock);
    free(tmp);
    return st;
}
