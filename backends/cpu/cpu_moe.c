/* cpu_moe.c: the mixture-of-experts FFN of the cpu backend (qwen2moe, qwen3moe, granitemoe,
 * Mixtral), as memra/model_types.h defines it:
 *
 *   logits = gate_inp . xn (the router, whole on every rank: the same bits everywhere)
 *   p = softmax(logits) in float (max subtracted, exps summed in increasing expert order)
 *   top k of p, ties toward the lower expert index, in decreasing p: the slot order
 *   w_j = p[sel_j], divided by sum_j w_j (summed in slot order) when the file renormalises
 *   slot j: expert sel_j's SwiGLU FFN (gate and up rows of that expert, down) into its slice of the
 *   slots buffer (k x n_embd, then the shared expert's output when the model has one)
 *   out = sum_j w_j * slot_j (slot order, from 0.0f) [+ sigmoid(gate_inp_shexp . xn) * shared]
 *
 * Only the chosen experts' rows are read per token (plus the router, and the shared expert).
 *
 * Ranks: a rank computes the chosen experts it holds ([e0, e1): all of them without ep) over its
 * rows of each ([f0, f1) under tp, the whole expert under ep) and writes zeros into the other
 * slots; the stage's all-reduce of the slots buffer (cpu_tp.c, the layer's second block: the
 * expert all-reduce) then gives every rank every slot, and every rank combines them in slot order.
 * With ep each slot has one non-zero contributor, so the sum is exact and ep=N gives the bits of
 * ep=1; with tp a slot is the sum of the ranks' partials (another order than tp=1, by design). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "memra/gguf.h"

memra_status cpu_moe_bind_layer(const memra_model *m, uint32_t il, cpu_layer *L, memra_error *err) {
    const memra_layer_moe *src = &m->moe[il];
    uint64_t ne = m->n_expert, ff = m->n_ff, E = m->n_embd;
    memra_status st;
    if ((st = cpu_bind_matrix(&src->gate_inp, ne, E, &L->gate_inp, err)) != MEMRA_OK ||
        (st = cpu_bind_matrix(&src->gate_exps, ne * ff, E, &L->gate_exps, err)) != MEMRA_OK ||
        (st = cpu_bind_matrix(&src->up_exps, ne * ff, E, &L->up_exps, err)) != MEMRA_OK ||
        (st = cpu_bind_matrix(&src->down_exps, ne * E, ff, &L->down_exps, err)) != MEMRA_OK)
        return st;
    if (m->n_ff_shexp == 0)
        return MEMRA_OK;
    if ((st = cpu_bind_matrix(&src->gate_shexp, m->n_ff_shexp, E, &L->gate_shexp, err)) != MEMRA_OK ||
        (st = cpu_bind_matrix(&src->up_shexp, m->n_ff_shexp, E, &L->up_shexp, err)) != MEMRA_OK ||
        (st = cpu_bind_matrix(&src->down_shexp, E, m->n_ff_shexp, &L->down_shexp, err)) != MEMRA_OK ||
        (st = cpu_bind_vector(&src->gate_inp_shexp, E, false, &L->gate_inp_shexp, err)) != MEMRA_OK)
        return st;
    return MEMRA_OK;
}

/* Rank r's experts, its rows of each and of the shared expert, and its buffers. */
memra_status cpu_moe_open_rank(memra_backend *b, cpu_stage *sg, uint32_t r, memra_error *err) {
    const memra_model *m = b->m;
    cpu_rank *rk = &sg->ranks[r];
    /* ep=N (the placement's key, read here too): rank r holds experts [r n/N, (r+1) n/N), whole */
    uint32_t ep = 1;
    memra_status st0 = memra_options_u32(b->opts, "ep", 1, 1, MEMRA_MAX_RANKS, &ep, err);
    if (st0 != MEMRA_OK)
        return st0;
    if (ep > 1 && (sg->n_ranks != ep || m->n_expert % ep != 0))
        return memra_fail(err, MEMRA_E_INVALID, "cpu: ep=%u, but the stage has %u ranks (for %u experts)", ep,
                          sg->n_ranks, m->n_expert);
    rk->e0 = ep > 1 ? m->n_expert / ep * r : 0;
    rk->e1 = ep > 1 ? m->n_expert / ep * (r + 1) : m->n_expert;
    rk->x0 = ep > 1 ? 0 : rk->f0;
    rk->x1 = ep > 1 ? m->n_ff : rk->f1;
    /* the shared expert's rows in proportion to the rank's ffn rows, on whole rows */
    uint64_t sh = m->n_ff_shexp;
    if (sh && ((uint64_t)rk->f0 * sh % m->n_ff != 0 || (uint64_t)rk->f1 * sh % m->n_ff != 0))
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cpu: rank %u holds expert rows [%u, %u) of %u, which do not cut the shared expert's %u "
                          "rows evenly; choose a tp that does",
                          r, rk->f0, rk->f1, m->n_ff, m->n_ff_shexp);
    rk->s0 = (uint32_t)(rk->f0 * sh / m->n_ff);
    rk->s1 = (uint32_t)(rk->f1 * sh / m->n_ff);
    for (uint32_t il = sg->layer_begin; il < sg->layer_end; il++) {
        cpu_layer *L = &rk->layers[il - sg->layer_begin];
        memra_status st = cpu_cols_of(&L->down_exps, rk->x0, rk->x1, "expert down", il, &L->down_exps, err);
        if (st == MEMRA_OK && sh) {
            L->gate_shexp = cpu_rows_of(&L->gate_shexp, rk->s0, rk->s1);
            L->up_shexp = cpu_rows_of(&L->up_shexp, rk->s0, rk->s1);
            st = cpu_cols_of(&L->down_shexp, rk->s0, rk->s1, "shared expert down", il, &L->down_shexp, err);
        }
        if (st != MEMRA_OK)
            return st;
    }
    uint32_t width = rk->s1 - rk->s0 > rk->x1 - rk->x0 ? rk->s1 - rk->s0 : rk->x1 - rk->x0;
    free(rk->gate);
    free(rk->up);
    rk->gate = cpu_alloc_floats(b, width);
    rk->up = cpu_alloc_floats(b, width);
    rk->n_slots = m->n_expert_used + (sh ? 1 : 0);
    rk->router = cpu_alloc_floats(b, m->n_expert);
    rk->slots = cpu_alloc_floats(b, (size_t)rk->n_slots * m->n_embd);
    if (!rk->gate || !rk->up || !rk->router || !rk->slots)
        return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for the experts' activations");
    return MEMRA_OK;
}

void cpu_moe_free_rank(cpu_rank *rk) {
    free(rk->router);
    free(rk->slots);
    rk->router = rk->slots = NULL;
}

/* Up to two products sharing one input, as one pool task over their rows (the op plugins of
 * memra.ops are not offered the experts' products: their sites are cpu_forward.c's). */
typedef struct moe_matvec {
    const cpu_matrix *w[2];
    float *y[2];
    const float *x;
    uint32_t n;
} moe_matvec;

static void moe_matvec_run(void *ctx, uint32_t begin, uint32_t end) {
    const moe_matvec *t = ctx;
    uint32_t base = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        uint32_t rows = t->w[i]->rows;
        uint32_t lo = begin > base ? begin - base : 0;
        uint32_t hi = end - base < rows ? end - base : rows;
        if (end > base && lo < hi)
            cpu_matvec_rows(t->w[i], t->x, t->y[i], lo, hi);
        base += rows;
    }
}

static void moe_matvec2(memra_backend *b, const float *x, const cpu_matrix *w0, float *y0, const cpu_matrix *w1,
                        float *y1) {
    moe_matvec t = {.w = {w0, w1}, .y = {y0, y1}, .x = x, .n = w1 ? 2 : 1};
    uint32_t rows = w0->rows + (w1 ? w1->rows : 0);
    if (rows)
        cpu_pool_run(b->pool, rows, w0->cols, moe_matvec_run, &t);
}

/* One SwiGLU FFN of n rows (gate, up: n rows; down: n_embd rows of n columns) into out. */
static void swiglu(memra_backend *b, cpu_rank *rk, const cpu_matrix *gate, const cpu_matrix *up,
                   const cpu_matrix *down, float *out) {
    moe_matvec2(b, rk->xn, gate, rk->gate, up, rk->up);
    for (uint32_t i = 0; i < gate->rows; i++) {
        float g = rk->gate[i];
        rk->gate[i] = g / (1.0f + expf(-g)) * rk->up[i];
    }
    moe_matvec2(b, rk->gate, down, out, NULL, NULL);
}

/* The router's top k (memra/model_types.h): p[0..n) probabilities; sel, w: k slots. */
static void route(const memra_model *m, float *p, uint32_t *sel, float *w) {
    uint32_t n = m->n_expert, k = m->n_expert_used;
    float max = p[0];
    for (uint32_t e = 1; e < n; e++)
        if (p[e] > max)
            max = p[e];
    float sum = 0.0f;
    for (uint32_t e = 0; e < n; e++) {
        p[e] = expf(p[e] - max);
        sum += p[e];
    }
    for (uint32_t e = 0; e < n; e++)
        p[e] /= sum;
    uint64_t taken[MEMRA_MAX_EXPERTS / 64] = {0};
    for (uint32_t j = 0; j < k; j++) {
        uint32_t best = n;
        for (uint32_t e = 0; e < n; e++) /* strict >: a tie keeps the lower index */
            if (!(taken[e / 64] >> (e % 64) & 1) && (best == n || p[e] > p[best]))
                best = e;
        taken[best / 64] |= 1ull << (best % 64);
        sel[j] = best;
        w[j] = p[best];
    }
    if (!m->expert_weights_norm)
        return;
    float total = 0.0f;
    for (uint32_t j = 0; j < k; j++)
        total += w[j];
    for (uint32_t j = 0; j < k; j++)
        w[j] /= total;
}

void cpu_moe_rank(memra_backend *b, cpu_stage *sg, uint32_t r, uint32_t il) {
    const memra_model *m = b->m;
    cpu_rank *rk = &sg->ranks[r];
    const cpu_layer *L = &rk->layers[il - sg->layer_begin];
    uint32_t E = m->n_embd, ff = m->n_ff, k = m->n_expert_used;
    moe_matvec2(b, rk->xn, &L->gate_inp, rk->router, NULL, NULL);
    route(m, rk->router, rk->sel, rk->sel_w);
    for (uint32_t j = 0; j < k; j++) {
        uint32_t e = rk->sel[j];
        float *out = rk->slots + (size_t)j * E;
        if (e < rk->e0 || e >= rk->e1) {
            memset(out, 0, (size_t)E * sizeof(float));
            continue;
        }
        cpu_matrix gate = cpu_rows_of(&L->gate_exps, e * ff + rk->x0, e * ff + rk->x1);
        cpu_matrix up = cpu_rows_of(&L->up_exps, e * ff + rk->x0, e * ff + rk->x1);
        cpu_matrix down = cpu_rows_of(&L->down_exps, e * E, (e + 1) * E);
        swiglu(b, rk, &gate, &up, &down, out);
    }
    if (m->n_ff_shexp) {
        float *out = rk->slots + (size_t)k * E;
        if (rk->s1 > rk->s0)
            swiglu(b, rk, &L->gate_shexp, &L->up_shexp, &L->down_shexp, out);
        else
            memset(out, 0, (size_t)E * sizeof(float));
        rk->sh_gate = cpu_dot_f32(L->gate_inp_shexp, rk->xn, E);
    }
}

void cpu_moe_combine(memra_backend *b, cpu_stage *sg, uint32_t il) {
    (void)il;
    const memra_model *m = b->m;
    uint32_t E = m->n_embd, k = m->n_expert_used;
    for (uint32_t r = 0; r < sg->n_ranks; r++) {
        cpu_rank *rk = &sg->ranks[r];
        for (uint32_t i = 0; i < E; i++) {
            float acc = 0.0f;
            for (uint32_t j = 0; j < k; j++)
                acc += rk->sel_w[j] * rk->slots[(size_t)j * E + i];
            rk->xn[i] = acc;
        }
        if (m->n_ff_shexp) {
            float g = 1.0f / (1.0f + expf(-rk->sh_gate));
            const float *sh = rk->slots + (size_t)k * E;
            for (uint32_t i = 0; i < E; i++)
                rk->xn[i] += g * sh[i];
        }
    }
}
