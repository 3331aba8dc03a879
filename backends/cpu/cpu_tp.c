/* cpu_tp.c: tensor parallelism's plumbing in the cpu backend: the collective plugin and one
 * communicator per stage with several ranks, the all-reduce of the ranks' partials, the status
 * words read before the commit, and the memra.tp extension (refusal cells, epochs). The maths of
 * a rank's share of a layer is cpu_forward.c's.
 *
 * The collective (`collective=`, default local) is loaded only when a stage has more than one
 * rank (with none, a given collective= is checked, plugin and keys, then refused: it would change
 * nothing); one communicator per such stage; the position and the status words it publishes are in
 * host memory (one word per rank per block of the stage, cleared at the start of each step).
 * Transaction: every layer runs; then every status word of the step is read, before the head and
 * before anything is committed; a nonzero one fails the step (MEMRA_E_REFUSED for a refusal
 * word), commits nothing and quarantines the state. The K and V rows of the new position are
 * written into each rank's cache slot at the uncommitted position, which the cache digest and a
 * restore do not cover and the next step at that position overwrites. Refusal cells (memra.tp)
 * are kept here and handed to the collective just before the step that reaches their position,
 * so clear_refusals can drop the ones not yet handed over. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "memra/gguf.h"

/* Loads the collective the arm names and creates one communicator per stage with more than one
 * rank. The collective reads only its own keys of the arm. */
memra_status cpu_open_collective(memra_backend *b, const memra_plan *plan, const cpu_config *cfg,
                                 const memra_options *opts, memra_error *err) {
    bool any = false;
    for (uint32_t s = 0; s < b->n_stages; s++)
        any = any || b->stages[s].n_ranks > 1;
    /* collective=NAME, NAME:MODE (mode=MODE) or NAME:KEY=VALUE (one of the collective's keys) */
    char name[MEMRA_OPT_VALUE_MAX];
    memra_options own = {0};
    memra_status st = memra_collective_value_parse(cfg->collective, name, sizeof name, &own, err);
    if (st != MEMRA_OK) {
        memra_error_prefix(err, "cpu");
        return st;
    }
    const char *given = memra_options_get(opts, "collective");
    if (!any && !given)
        return MEMRA_OK;
    if (!any) {
        /* tp=1: the value is checked as it would be with ranks (the plugin, its keys), then
         * refused, since it changes nothing: two arms that differ only by it compute alike. */
        const memra_plugin *p = NULL;
        if ((st = b->host->find_plugin(name, MEMRA_PLUGIN_COLLECTIVE, &p, err)) != MEMRA_OK) {
            memra_error_prefix(err, "cpu: collective=%.100s", given);
            return st;
        }
        const memra_collective_vtable *vt = p ? p->collective : NULL;
        if (vt && own.n) {
            const memra_option_spec *lists[1] = {vt->options};
            const uint32_t counts[1] = {vt->options ? vt->n_options : 0};
            if ((st = memra_options_check(&own, lists, counts, 1, given, err)) != MEMRA_OK) {
                memra_error_prefix(err, "cpu: collective=%.100s: the collective '%.60s'", given, name);
                return st;
            }
        }
        return memra_fail(err, MEMRA_E_INVALID,
                          "cpu: collective=%.100s has no effect: no stage of this arm has more than one rank (tp=1); "
                          "drop it, or give tp=N",
                          given);
    }
    snprintf(b->collective_name, sizeof b->collective_name, "%s", name);
    const memra_plugin *p = NULL;
    st = b->host->find_plugin(name, MEMRA_PLUGIN_COLLECTIVE, &p, err);
    if (st != MEMRA_OK) {
        memra_error_prefix(err, "cpu: tensor parallelism (tp=%u) needs the collective '%.60s' (collective=)",
                           b->stages[0].n_ranks, cfg->collective);
        return st;
    }
    const memra_collective_vtable *vt = p ? p->collective : NULL;
    if (!MEMRA_HAS_MEMBER(vt, memra_collective_vtable, abort) || !vt->create || !vt->destroy || !vt->all_reduce_sum_f32)
        return memra_fail(err, MEMRA_E_PLUGIN, "cpu: the collective '%.60s' has no usable all-reduce", cfg->collective);
    for (uint32_t i = 0; opts && i < opts->n; i++)
        for (uint32_t k = 0; vt->options && k < vt->n_options; k++)
            if (strcmp(opts->items[i].key, vt->options[k].key) == 0 &&
                (st = memra_options_set(&own, opts->items[i].key, opts->items[i].value, err)) != MEMRA_OK)
                return st;
    b->coll = vt;
    for (uint32_t s = 0; s < b->n_stages; s++) {
        cpu_stage *sg = &b->stages[s];
        if (sg->n_ranks < 2)
            continue;
        int32_t devices[MEMRA_MAX_RANKS];
        for (uint32_t r = 0; r < sg->n_ranks; r++)
            devices[r] = plan->stages[s].ranks[r].device;
        st = vt->create(b->host, sg->n_ranks, devices, &own, &sg->comm, err);
        if (st != MEMRA_OK) {
            sg->comm = NULL;
            memra_error_prefix(err, "cpu: the collective '%.60s' for the %u ranks of stage %u", cfg->collective,
                               sg->n_ranks, s);
            return st;
        }
    }
    return MEMRA_OK;
}

/* The step's position, as the collective reads it, and every status word of the step cleared. */
void cpu_collective_step_begin(memra_backend *b, uint32_t pos) {
    b->position_word = (int32_t)pos;
    for (uint32_t i = 0; i < b->n_stages; i++) {
        cpu_stage *sg = &b->stages[i];
        if (sg->status)
            memset(sg->status, 0, (size_t)(sg->layer_end - sg->layer_begin) * 2 * sg->n_ranks * sizeof *sg->status);
    }
}

/* The n calls of one all-reduce, one pool item per rank. */
typedef struct reduce_task {
    memra_backend *b;
    cpu_stage *sg;
    uint32_t block, local; /* the collective's block; the stage's (layer - layer_begin) * 2 + which */
    size_t offset;         /* the row's offset in each rank's xn */
    bool moe;              /* the expert all-reduce: the slots buffer, n_slots x n_embd (cpu_moe.c) */
    memra_status st[MEMRA_MAX_RANKS];
    memra_error err[MEMRA_MAX_RANKS];
} reduce_task;

static void reduce_run(void *ctx, uint32_t begin, uint32_t end) {
    reduce_task *t = ctx;
    for (uint32_t r = begin; r < end; r++)
        t->st[r] = t->b->coll->all_reduce_sum_f32(
            t->sg->comm, r, t->moe ? t->sg->ranks[r].slots : t->sg->ranks[r].xn + t->offset,
            t->moe ? t->sg->ranks[r].n_slots * t->b->m->n_embd : t->b->m->n_embd, NULL, t->block, &t->b->position_word,
            &t->sg->status[(size_t)t->local * t->sg->n_ranks + r], &t->err[r]);
}

/* The all-reduce of the ranks' partials (in rk->xn) of block il * 2 + which, its n calls as one
 * pool task. A call that fails (not a refusal: that is a status word, read before the commit)
 * fails the step. */
memra_status cpu_all_reduce(memra_backend *b, cpu_stage *sg, uint32_t il, uint32_t which, uint32_t row,
                            memra_error *err) {
    reduce_task t = {.b = b,
                     .sg = sg,
                     .block = il * 2 + which,
                     .local = (il - sg->layer_begin) * 2 + which,
                     .offset = (size_t)row * b->m->n_embd,
                     .moe = which == 1 && b->m->n_expert > 0};
    /* A cost past any grain: the calls run on the pool's threads whenever it has several. */
    cpu_pool_run(b->pool, sg->n_ranks, UINT32_MAX, reduce_run, &t);
    for (uint32_t r = 0; r < sg->n_ranks; r++)
        if (t.st[r] != MEMRA_OK) {
            if (err)
                *err = t.err[r];
            memra_error_prefix(err, "cpu: the all-reduce after %s of layer %u failed on rank %u",
                               which ? (t.moe ? "experts" : "ffn") : "attention", il, r);
            return t.st[r];
        }
    return MEMRA_OK;
}

/* Hands the collective the refusal cells armed for position pos (before the step's forward). */
memra_status cpu_hand_cells(memra_backend *b, uint32_t pos, memra_error *err) {
    for (uint32_t i = 0; i < b->n_cells; i++) {
        cpu_cell *c = &b->cells[i];
        if (c->handed || c->position != pos)
            continue;
        cpu_stage *sg = &b->stages[c->stage];
        memra_status st = b->coll->arm_refusal(sg->comm, c->rank, c->layer * 2 + c->which, pos, c->word, err);
        if (st != MEMRA_OK) {
            memra_error_prefix(err, "cpu: arming the refusal cell of layer %u (%s) on rank %u at position %u", c->layer,
                               c->which ? "ffn" : "attention", c->rank, pos);
            return st;
        }
        c->handed = true;
    }
    return MEMRA_OK;
}

/* Drops the cells handed over for the step that just ran (the collective fired them: the step
 * made every operation of its position once). */
void cpu_drop_handed_cells(memra_backend *b) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->n_cells; i++)
        if (!b->cells[i].handed)
            b->cells[n++] = b->cells[i];
    b->n_cells = n;
}

/* The collective check: every rank's status of every all-reduce of the step, in (stage, layer,
 * block, rank) order; the first nonzero one fails the step. The refusing rank is the one whose
 * cell fired there, if this backend handed one over; else the first rank reading the word. */
memra_status cpu_check_statuses(memra_backend *b, uint32_t pos, memra_error *err) {
    for (uint32_t i = 0; i < b->n_stages; i++) {
        const cpu_stage *sg = &b->stages[i];
        if (!sg->status)
            continue;
        for (uint32_t il = sg->layer_begin; il < sg->layer_end; il++)
            for (uint32_t which = 0; which < 2; which++) {
                const int32_t *w = &sg->status[(size_t)((il - sg->layer_begin) * 2 + which) * sg->n_ranks];
                uint32_t r = 0;
                while (r < sg->n_ranks && w[r] == 0)
                    r++;
                if (r == sg->n_ranks)
                    continue;
                int32_t word = w[r];
                const char *block = which ? (b->m->n_expert ? "experts (the ffn block)" : "ffn") : "attention";
                if (word == MEMRA_COLLECTIVE_PENDING || word == MEMRA_COLLECTIVE_FAILED)
                    return memra_fail(err, MEMRA_E_INTERNAL,
                                      "cpu: the all-reduce after %s of layer %u %s on rank %u at position %u (word "
                                      "0x%08x)",
                                      block, il, word == MEMRA_COLLECTIVE_PENDING ? "never completed" : "failed", r,
                                      pos, (unsigned)word);
                for (uint32_t c = 0; c < b->n_cells; c++) {
                    const cpu_cell *k = &b->cells[c];
                    if (k->handed && k->stage == i && k->layer == il && k->which == which && k->word == word) {
                        r = k->rank;
                        break;
                    }
                }
                return memra_fail(err, MEMRA_E_REFUSED,
                                  "cpu: the all-reduce after %s of layer %u refused on rank %u at position %u (word "
                                  "0x%08x)",
                                  block, il, r, pos, (unsigned)word);
            }
    }
    return MEMRA_OK;
}

/* ---- memra.tp ---- */

static memra_status tp_collective(memra_backend *b, char *name, size_t name_size, bool *refusals, memra_error *err) {
    if (!b->coll)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: no stage has more than one rank (tp=1): no collective");
    if (name && name_size)
        snprintf(name, name_size, "%s", b->collective_name);
    if (refusals)
        *refusals = b->coll->arm_refusal != NULL;
    return MEMRA_OK;
}

/* The stage and rank of a site, checked against the plan. */
static memra_status tp_site(memra_backend *b, uint32_t stage, uint32_t rank, const char *what, memra_error *err) {
    if (!b->coll)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: no stage has more than one rank (tp=1): no collective");
    if (stage >= b->n_stages)
        return memra_fail(err, MEMRA_E_RANGE, "cpu: %s of stage %u: the plan has %u stages", what, stage, b->n_stages);
    const cpu_stage *sg = &b->stages[stage];
    if (!sg->comm)
        return memra_fail(err, MEMRA_E_RANGE, "cpu: %s of stage %u: the stage has one rank and no collective", what,
                          stage);
    if (rank >= sg->n_ranks)
        return memra_fail(err, MEMRA_E_RANGE, "cpu: %s of rank %u of stage %u: the stage has %u ranks", what, rank,
                          stage, sg->n_ranks);
    return MEMRA_OK;
}

static memra_status tp_arm_refusal(memra_backend *b, uint32_t stage, uint32_t rank, uint32_t layer, uint32_t which,
                                   uint32_t position, int32_t word, memra_error *err) {
    memra_status st = tp_site(b, stage, rank, "a refusal cell", err);
    if (st != MEMRA_OK)
        return st;
    if (!b->coll->arm_refusal)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: the collective '%s' has no refusal cells",
                          b->collective_name);
    const cpu_stage *sg = &b->stages[stage];
    if (layer < sg->layer_begin || layer >= sg->layer_end || which > 1)
        return memra_fail(err, MEMRA_E_RANGE,
                          "cpu: a refusal cell at layer %u, block %u: stage %u holds layers [%u, %u), blocks are 0 "
                          "(attention) and 1 (ffn)",
                          layer, which, stage, sg->layer_begin, sg->layer_end);
    if (word == 0 || word == MEMRA_COLLECTIVE_PENDING || word == MEMRA_COLLECTIVE_FAILED)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: a refusal word may not be 0 nor a MEMRA_COLLECTIVE_ word (%d)",
                          (int)word);
    for (uint32_t i = 0; i < b->n_cells; i++) {
        cpu_cell *c = &b->cells[i];
        if (c->stage == stage && c->rank == rank && c->layer == layer && c->which == which && c->position == position) {
            c->word = word; /* as the collective does: arming it again replaces the word */
            return MEMRA_OK;
        }
    }
    if (b->n_cells == b->cap_cells) {
        uint32_t cap = b->cap_cells ? b->cap_cells * 2 : 16;
        cpu_cell *cells = cap > b->cap_cells ? realloc(b->cells, (size_t)cap * sizeof *cells) : NULL;
        if (!cells)
            return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for refusal cells");
        b->cells = cells;
        b->cap_cells = cap;
    }
    b->cells[b->n_cells++] =
        (cpu_cell){.stage = stage, .rank = rank, .layer = layer, .which = which, .position = position, .word = word};
    return MEMRA_OK;
}

static memra_status tp_clear_refusals(memra_backend *b, memra_error *err) {
    if (!b->coll)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: no stage has more than one rank (tp=1): no collective");
    b->n_cells = 0; /* none is handed over between steps */
    return MEMRA_OK;
}

static memra_status tp_epochs(memra_backend *b, uint32_t stage, uint32_t rank, uint64_t *out, uint32_t n_blocks,
                              memra_error *err) {
    memra_status st = tp_site(b, stage, rank, "epochs", err);
    if (st != MEMRA_OK)
        return st;
    uint32_t want = b->m->n_layer * 2;
    if (!out || n_blocks != want)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: epochs into %u blocks (%s); the model has %u (2 per layer)",
                          n_blocks, out ? "given" : "out is NULL", want);
    if (!b->coll->epochs)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: the collective '%s' keeps no epochs", b->collective_name);
    const cpu_stage *sg = &b->stages[stage];
    st = b->coll->epochs(sg->comm, rank, out, n_blocks, err);
    if (st != MEMRA_OK) {
        memra_error_prefix(err, "cpu: epochs of rank %u of stage %u", rank, stage);
        return st;
    }
    for (uint32_t k = 0; k < n_blocks; k++)
        if (k < sg->layer_begin * 2 || k >= sg->layer_end * 2)
            out[k] = 0;
    return MEMRA_OK;
}

const memra_ext_tp_v1 cpu_tp_ext = {
    .struct_size = sizeof(memra_ext_tp_v1),
    .collective = tp_collective,
    .arm_refusal = tp_arm_refusal,
    .clear_refusals = tp_clear_refusals,
    .epochs = tp_epochs,
};
