/* cpu_stages.c: the plan's stages and their ranks. Stages run in order on virtual devices, each
 * with its own layers, activations and KV cache; a stage's ranks partition its heads (in whole kv
 * groups) and its ffn rows. Here the plan is checked and each rank gets its slices of the stage's
 * layers (views into the mapping: rows of the column-parallel matrices, columns of the
 * row-parallel ones) and its activations. */
#include <stdlib.h>

#include "cpu_backend.h"
#include "memra/gguf.h"
#include "memra/quant.h"

/* A stage's ranks must partition the heads (whole kv groups each: kv heads = heads / group) and
 * the ffn rows, in rank order. */
static memra_status check_ranks(const memra_model *m, const memra_stage_plan *sp, uint32_t s, uint32_t n_vdevices,
                                memra_error *err) {
    if (sp->n_ranks == 0 || sp->n_ranks > MEMRA_MAX_RANKS)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: stage %u has %u ranks (expected 1..%u)", s, sp->n_ranks,
                          (unsigned)MEMRA_MAX_RANKS);
    uint32_t group = m->n_head / m->n_head_kv, h = 0, f = 0;
    for (uint32_t r = 0; r < sp->n_ranks; r++) {
        const memra_rank_plan *rp = &sp->ranks[r];
        /* a rank may hold no heads and no ffn rows (ep alone: ranks past 0 hold experts only) */
        bool empty = rp->head_end == rp->head_begin && rp->ff_end == rp->ff_begin && r > 0 && m->n_expert > 0;
        if (rp->head_begin != h || (rp->head_end <= rp->head_begin && !empty) || rp->head_end > m->n_head ||
            rp->head_begin % group != 0 || rp->head_end % group != 0 || rp->kv_head_begin != rp->head_begin / group ||
            rp->kv_head_end != rp->head_end / group)
            return memra_fail(err, MEMRA_E_INVALID,
                              "cpu: rank %u of stage %u holds heads [%u, %u) and kv heads [%u, %u); expected heads "
                              "from %u in whole groups of %u (of %u) and their kv heads",
                              r, s, rp->head_begin, rp->head_end, rp->kv_head_begin, rp->kv_head_end, h, group,
                              m->n_head);
        if (rp->ff_begin != f || (rp->ff_end <= rp->ff_begin && !empty) || rp->ff_end > m->n_ff)
            return memra_fail(err, MEMRA_E_INVALID,
                              "cpu: rank %u of stage %u holds ffn rows [%u, %u); expected rows from %u (of %u)", r, s,
                              rp->ff_begin, rp->ff_end, f, m->n_ff);
        if (sp->n_ranks > 1 && (rp->device < 0 || (uint32_t)rp->device >= n_vdevices))
            return memra_fail(err, MEMRA_E_INVALID,
                              "cpu: rank %u of stage %u is on device %d; the cpu backend offers %u virtual devices "
                              "(vdevices=)",
                              r, s, rp->device, n_vdevices);
        h = rp->head_end;
        f = rp->ff_end;
    }
    if (h != m->n_head || f != m->n_ff)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: the ranks of stage %u hold %u of %u heads and %u of %u ffn rows",
                          s, h, m->n_head, f, m->n_ff);
    return MEMRA_OK;
}

memra_status cpu_check_plan(const memra_model *m, const memra_plan *plan, uint32_t n_vdevices, memra_error *err) {
    if (plan->n_stages == 0 || plan->n_stages > MEMRA_MAX_STAGES)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: the plan has %u stages", plan->n_stages);
    uint32_t next = 0;
    for (uint32_t s = 0; s < plan->n_stages; s++) {
        const memra_stage_plan *sp = &plan->stages[s];
        if (sp->layer_begin != next || sp->layer_end <= sp->layer_begin || sp->layer_end > m->n_layer)
            return memra_fail(err, MEMRA_E_INVALID,
                              "cpu: stage %u covers layers [%u, %u), expected to start at %u "
                              "and end after it, within %u layers",
                              s, sp->layer_begin, sp->layer_end, next, m->n_layer);
        next = sp->layer_end;
        memra_status st = check_ranks(m, sp, s, n_vdevices, err);
        if (st != MEMRA_OK)
            return st;
        if (sp->device < 0 || (uint32_t)sp->device >= n_vdevices)
            return memra_fail(err, MEMRA_E_INVALID,
                              "cpu: stage %u is on device %d; the cpu backend offers %u "
                              "virtual devices (vdevices=)",
                              s, sp->device, n_vdevices);
    }
    if (next != m->n_layer)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: the plan's stages end at layer %u of %u", next, m->n_layer);
    return MEMRA_OK;
}

/* Rows [r0, r1) of w: a view. */
cpu_matrix cpu_rows_of(const cpu_matrix *w, uint32_t r0, uint32_t r1) {
    cpu_matrix out = *w;
    out.data = w->data + (size_t)r0 * w->row_bytes;
    out.rows = r1 - r0;
    return out;
}

/* Columns [c0, c1) of every row of w: a view with the same row stride. */
memra_status cpu_cols_of(const cpu_matrix *w, uint32_t c0, uint32_t c1, const char *what, uint32_t il,
                            cpu_matrix *out, memra_error *err) {
    size_t offset = 0;
    switch (w->type) {
    case MEMRA_TYPE_F32: offset = (size_t)c0 * 4; break;
    case MEMRA_TYPE_F16:
    case MEMRA_TYPE_BF16: offset = (size_t)c0 * 2; break;
    case MEMRA_TYPE_Q8_0:
    case MEMRA_TYPE_Q4_0:
    case MEMRA_TYPE_Q4_1:
    case MEMRA_TYPE_Q5_0:
    case MEMRA_TYPE_Q5_1:
    case MEMRA_TYPE_Q4_K:
    case MEMRA_TYPE_Q5_K:
    case MEMRA_TYPE_Q6_K: {
        uint32_t qk = memra_quant_block_elems(w->type);
        if (c0 % qk != 0 || c1 % qk != 0)
            return memra_fail(err, MEMRA_E_UNSUPPORTED,
                              "cpu: layer %u: the %s columns [%u, %u) of a rank do not fall on %s blocks of %u; "
                              "choose a tp that does",
                              il, what, c0, c1, memra_tensor_type_name(w->type), qk);
        offset = (size_t)(c0 / qk) * memra_quant_block_bytes(w->type);
        break;
    }
    default: return memra_fail(err, MEMRA_E_INTERNAL, "cpu: layer %u: %s has an unexpected type", il, what);
    }
    *out = *w;
    out->data = w->data + offset;
    out->cols = c1 - c0;
    return MEMRA_OK;
}

/* A rank's slices of layer il (whole with one rank). */
static memra_status slice_layer(const memra_backend *b, const cpu_rank *rk, uint32_t il, cpu_layer *out,
                                memra_error *err) {
    const memra_model *m = b->m;
    const cpu_layer *L = &b->layers[il];
    *out = *L;
    if (m->n_expert > 0) { /* the experts are cut per token (cpu_moe.c); the FFN has no dense matrices */
        out->wq = cpu_rows_of(&L->wq, rk->h0 * m->head_dim, rk->h1 * m->head_dim);
        out->wk = cpu_rows_of(&L->wk, rk->g0 * m->head_dim, rk->g1 * m->head_dim);
        out->wv = cpu_rows_of(&L->wv, rk->g0 * m->head_dim_v, rk->g1 * m->head_dim_v);
        out->bq = L->bq ? L->bq + (size_t)rk->h0 * m->head_dim : NULL;
        out->bk = L->bk ? L->bk + (size_t)rk->g0 * m->head_dim : NULL;
        out->bv = L->bv ? L->bv + (size_t)rk->g0 * m->head_dim_v : NULL;
        return cpu_cols_of(&L->wo, rk->h0 * m->head_dim_v, rk->h1 * m->head_dim_v, "attention output", il, &out->wo,
                           err);
    }
    out->wq = cpu_rows_of(&L->wq, rk->h0 * m->head_dim, rk->h1 * m->head_dim);
    out->wk = cpu_rows_of(&L->wk, rk->g0 * m->head_dim, rk->g1 * m->head_dim);
    out->wv = cpu_rows_of(&L->wv, rk->g0 * m->head_dim_v, rk->g1 * m->head_dim_v);
    out->w_gate = cpu_rows_of(&L->w_gate, rk->f0, rk->f1);
    out->w_up = cpu_rows_of(&L->w_up, rk->f0, rk->f1);
    out->bq = L->bq ? L->bq + (size_t)rk->h0 * m->head_dim : NULL;
    out->bk = L->bk ? L->bk + (size_t)rk->g0 * m->head_dim : NULL;
    out->bv = L->bv ? L->bv + (size_t)rk->g0 * m->head_dim_v : NULL;
    memra_status st =
        cpu_cols_of(&L->wo, rk->h0 * m->head_dim_v, rk->h1 * m->head_dim_v, "attention output", il, &out->wo, err);
    if (st == MEMRA_OK)
        st = cpu_cols_of(&L->w_down, rk->f0, rk->f1, "ffn down", il, &out->w_down, err);
    return st;
}

/* The stage's ranks: slices and activations. */
memra_status cpu_open_ranks(memra_backend *b, const memra_stage_plan *sp, cpu_stage *sg, memra_error *err) {
    const memra_model *m = b->m;
    sg->n_ranks = sp->n_ranks;
    uint32_t n_layers = sg->layer_end - sg->layer_begin;
    for (uint32_t r = 0; r < sg->n_ranks; r++) {
        const memra_rank_plan *rp = &sp->ranks[r];
        cpu_rank *rk = &sg->ranks[r];
        rk->h0 = rp->head_begin, rk->h1 = rp->head_end;
        rk->g0 = rp->kv_head_begin, rk->g1 = rp->kv_head_end;
        rk->f0 = rp->ff_begin, rk->f1 = rp->ff_end;
        rk->q_dim = (rk->h1 - rk->h0) * m->head_dim;
        rk->kv_dim = (rk->g1 - rk->g0) * m->head_dim;
        rk->v_dim = (rk->g1 - rk->g0) * m->head_dim_v;
        rk->att_dim = (rk->h1 - rk->h0) * m->head_dim_v;
        rk->n_ff = rk->f1 - rk->f0;
        rk->layers = calloc(n_layers, sizeof *rk->layers);
        const size_t rows = b->chunk; /* a prefill chunk's rows (cpu_forward.c) */
        rk->x = cpu_alloc_floats(b, rows * m->n_embd);
        rk->xn = cpu_alloc_floats(b, rows * m->n_embd);
        rk->q = cpu_alloc_floats(b, rows * rk->q_dim);
        rk->k = cpu_alloc_floats(b, rows * rk->kv_dim);
        rk->v = cpu_alloc_floats(b, rows * rk->v_dim);
        rk->att = cpu_alloc_floats(b, rows * rk->att_dim);
        rk->gate = cpu_alloc_floats(b, rows * rk->n_ff);
        rk->up = cpu_alloc_floats(b, rows * rk->n_ff);
        if (!rk->layers || !rk->x || !rk->xn || !rk->q || !rk->k || !rk->v || !rk->att || !rk->gate || !rk->up)
            return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for the model's activations");
        for (uint32_t il = sg->layer_begin; il < sg->layer_end; il++) {
            memra_status st = slice_layer(b, rk, il, &rk->layers[il - sg->layer_begin], err);
            if (st != MEMRA_OK)
                return st;
        }
        if (m->n_expert > 0) {
            memra_status st = cpu_moe_open_rank(b, sg, r, err);
            if (st != MEMRA_OK)
                return st;
        }
    }
    if (sg->n_ranks == 1)
        return MEMRA_OK;
    sg->status = calloc((size_t)n_layers * 2 * sg->n_ranks, sizeof *sg->status);
    if (!sg->status)
        return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for the collective's status words");
    return MEMRA_OK;
}
