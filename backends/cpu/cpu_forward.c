/* cpu_forward.c: the maths of the `cpu` backend plugin, memra's reference: one token through the
 * layers of llama, qwen2, qwen3 and gemma3 on the host, weights read in place from the mapped
 * file. gemma3 adds: the embedding times sqrtf(n_embd), the post-attention and post-FFN RMS
 * norms (applied to the all-reduced sum, before the residual add), GELU (tanh) in place of SiLU,
 * the file's attention scale, and on its local layers a sliding window (the last sliding_window
 * positions) with their own RoPE tables (base 10000, no position scaling).
 *
 * Stages run in order on virtual devices: each stage has its own activations and its own KV
 * cache for its layers, and hands the hidden state to the next stage by an exact copy, so any
 * split gives the same bits as one stage. Work is split over output rows (attention: over heads)
 * by a persistent thread pool; each output element is computed by one thread in a fixed order
 * (cpu_kernels.h), so any thread count gives the same bits.
 *
 * Per token the backend reads every weight matrix once (the mapped file's weight bytes, the
 * embedding row only), and per layer reads K and V rows [0, pos] and writes one K and one V row.
 *
 * RoPE angles: theta_i = (pos / linear_factor) * freq_i computed in double from the float
 * freq_i of memra_model_rope_freq; cos and sin are taken in double (libm) and rounded once to
 * float. The rotation itself is float.
 *
 * Tensor parallelism (tp=N): each stage has the plan's ranks (memra_rank_plan); with one rank the
 * slices are whole and the step is exactly the one-rank computation above. Rank r holds views of
 * its slices only, read in place from the mapping: the rows of wq/wk/wv (and the bq/bk/bv entries)
 * of its heads and kv heads, the rows of w_gate/w_up of its ffn rows (column-parallel), the
 * columns of wo of its heads and of w_down of its ffn rows (row-parallel; the models memra reads
 * have no bias on these, so nothing is added once per stage); its own KV cache of its kv heads
 * and its own activations, the whole hidden state included (every rank holds the same bits of
 * it). Per layer: each rank's attention partial (n_embd floats), one in-place sum all-reduce of
 * the partials through the stage's communicator (block layer*2), the residual added on every
 * rank; the same for the FFN (block layer*2+1). Norms run on every rank's whole vector; the
 * embedding is copied to every rank of stage 0; the final norm and the head run once, on rank 0
 * of the last stage. Each rank's compute runs in rank order on the calling thread, its rows split
 * over the pool as above; the n calls of one all-reduce run as one pool task of n items (one per
 * rank, on whichever thread; threads=1 makes all n in turn), joined before any status or buffer is
 * read. So the result does not depend on the thread count; it does differ from tp=1 in summation
 * order (a partial per rank, summed in rank order by the collective).
 *
 * Taps (memra.ops, cpu_taps.c): after each op, `if (b->taps)` hands its output to the taps; NULL
 * (every step but a bisect's) costs that branch alone.
 * Op plugins (memra/op.h): where the arm binds one (op.rmsnorm=NAME, op.gemv.q8_0=NAME, ...), each
 * call of that op runs the plugin's cpu entry point in place of the built-in kernel, with a
 * context naming its site, layer, head, position, stage and rank (the sites of OPS.md), from the
 * same threads and over the same rows as the built-in.
 *
 * The collective, its status words and the refusal cells are cpu_tp.c's; the step's
 * transaction is cpu_step.c's; the plumbing of the plugin is cpu_plugin.c's. */
#include <math.h>
#include <string.h>

#include "cpu_backend.h"
#include "memra/gguf.h"

/* The context of one op call: its site (OPS.md), layer, stage and rank, at the step's position. */
static memra_op_ctx op_ctx(const memra_backend *b, const cpu_stage *sg, uint32_t r, uint32_t il, const char *site) {
    return (memra_op_ctx){.struct_size = sizeof(memra_op_ctx),
                          .site = site,
                          .tensor = site,
                          .layer = il,
                          .position = b->op_position,
                          .rank = r,
                          .stage = sg ? (uint32_t)(sg - b->stages) : b->n_stages - 1};
}

/* RMSNorm through the arm's op plugin, or the built-in. */
static void rmsnorm(const memra_backend *b, const memra_op_ctx *c, const float *x, const float *w, uint32_t n,
                    float *out) {
    const memra_op_binding *op = b->op_rmsnorm;
    if (op)
        op->vt->cpu_rmsnorm(op->op, c, x, w, n, b->m->rms_eps, out);
    else
        cpu_rmsnorm(x, w, n, b->m->rms_eps, out);
}

/* Up to three matrix-vector products sharing one input, run as one task over their rows. */
typedef struct matvec_task {
    const memra_backend *b;
    const cpu_matrix *w[3];
    float *y[3];
    memra_op_ctx ctx[3];
    const float *x;
    uint32_t n;
} matvec_task;

static void matvec_run(void *ctx, uint32_t begin, uint32_t end) {
    const matvec_task *t = ctx;
    uint32_t base = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        const cpu_matrix *w = t->w[i];
        uint32_t rows = w->rows;
        uint32_t lo = begin > base ? begin - base : 0;
        uint32_t hi = end - base < rows ? end - base : rows;
        const memra_op_binding *op = w->type < 64 ? t->b->op_gemv[w->type] : NULL;
        if (end > base && lo < hi && op)
            op->vt->cpu_gemv(op->op, &t->ctx[i], w->type, w->data, w->row_bytes, w->cols, t->x, t->y[i], lo, hi);
        else if (end > base && lo < hi)
            cpu_matvec_rows(w, t->x, t->y[i], lo, hi);
        base += rows;
    }
}

/* c: the context of each product (its site); n of them. */
static void matvec(memra_backend *b, const memra_op_ctx *c, const float *x, uint32_t n, const cpu_matrix *w0, float *y0,
                   const cpu_matrix *w1, float *y1, const cpu_matrix *w2, float *y2) {
    matvec_task t = {.b = b, .w = {w0, w1, w2}, .y = {y0, y1, y2}, .x = x, .n = n};
    for (uint32_t i = 0; i < n; i++)
        t.ctx[i] = c[i];
    uint32_t rows = 0;
    for (uint32_t i = 0; i < n; i++)
        rows += t.w[i]->rows;
    cpu_pool_run(b->pool, rows, w0->cols, matvec_run, &t);
}

typedef struct attention_task {
    const memra_backend *b;
    const cpu_rank *rk;
    memra_op_ctx ctx;
    const float *q, *k_cache, *v_cache;
    float *scores, *out;
    uint32_t n_pos, capacity;
    float scale;
} attention_task;

/* Heads [begin, end) of the rank (local indices); its kv heads are local too. */
static void attention_run(void *ctx, uint32_t begin, uint32_t end) {
    const attention_task *t = ctx;
    const memra_model *m = t->b->m;
    const cpu_rank *rk = t->rk;
    uint32_t group = m->n_head / m->n_head_kv;
    for (uint32_t hl = begin; hl < end; hl++) {
        uint32_t h = rk->h0 + hl, gl = h / group - rk->g0;
        const float *q = t->q + (size_t)hl * m->head_dim, *k = t->k_cache + (size_t)gl * m->head_dim;
        const float *v = t->v_cache + (size_t)gl * m->head_dim_v;
        float *scores = t->scores + (size_t)h * t->capacity, *out = t->out + (size_t)hl * m->head_dim_v;
        const memra_op_binding *op = t->b->op_attention;
        if (op) {
            memra_op_ctx c = t->ctx;
            c.head = h;
            op->vt->cpu_attention(op->op, &c, q, k, rk->kv_dim, v, rk->v_dim, m->head_dim, m->head_dim_v, t->n_pos,
                                  t->scale, scores, out);
        } else {
            cpu_attention_head(q, k, rk->kv_dim, v, rk->v_dim, m->head_dim, m->head_dim_v, t->n_pos, t->scale, scores,
                               out);
        }
    }
}

static void add_bias(float *y, const float *bias, uint32_t n) {
    if (bias)
        for (uint32_t i = 0; i < n; i++)
            y[i] += bias[i];
}

/* Where a rank's heads of q or k sit in the logical tensor, for the taps (memra.ops). */
typedef struct head_tap {
    cpu_stage *sg;
    uint32_t r, il, h0, h1; /* the rank's first and end head */
    cpu_site norm_site, rope_site;
} head_tap;

static void tap_head(memra_backend *b, const head_tap *t, cpu_site site, uint32_t h, const float *head) {
    uint32_t d = b->m->head_dim;
    cpu_tap_rank(b, t->sg, t->r, site, t->il, head, d, (t->h0 + h) * d, t->h0 * d, t->h1 * d);
}

/* Per-head RMSNorm (qwen3, gemma3) and RoPE of n_heads heads of q or k, the first being head h0
 * of the model (c: the call's context, tensor "q" or "k"); swa: the tables of the sliding-window
 * layers; tap: where the heads sit, for the taps. */
static void norm_and_rope(memra_backend *b, memra_op_ctx c, float *x, uint32_t h0, uint32_t n_heads,
                          const float *norm, bool swa, const head_tap *tap) {
    const memra_model *m = b->m;
    const int neox = m->rope_pairing == MEMRA_ROPE_NEOX;
    const float *cos_t = swa ? b->rope_cos_swa : b->rope_cos, *sin_t = swa ? b->rope_sin_swa : b->rope_sin;
    for (uint32_t h = 0; h < n_heads; h++) {
        float *head = x + (size_t)h * m->head_dim;
        c.head = h0 + h;
        c.site = "qk_norm";
        if (norm)
            rmsnorm(b, &c, head, norm, m->head_dim, head);
        if (norm && b->taps)
            tap_head(b, tap, tap->norm_site, h, head);
        c.site = "rope";
        if (b->op_rope)
            b->op_rope->vt->cpu_rope(b->op_rope->op, &c, head, m->head_dim, neox, cos_t, sin_t);
        else
            cpu_rope_head(head, m->head_dim, neox, cos_t, sin_t);
        if (b->taps)
            tap_head(b, tap, tap->rope_site, h, head);
    }
}

/* Rank r's attention partial of layer il at position pos into rk->xn (n_embd): reads its slices
 * once and its K/V rows [0, pos], writes its K and V rows of pos (past the committed prefix until
 * the step commits). With one rank this is the whole attention output. */
static void rank_attention(memra_backend *b, cpu_stage *sg, uint32_t r, memra_state *s, uint32_t il, uint32_t pos) {
    const memra_model *m = b->m;
    cpu_rank *rk = &sg->ranks[r];
    const cpu_layer *L = &rk->layers[il - sg->layer_begin];
    float *k_cache = s->k_cache[(size_t)il * MEMRA_MAX_RANKS + r];
    float *v_cache = s->v_cache[(size_t)il * MEMRA_MAX_RANKS + r];
    const memra_op_ctx norm_c = op_ctx(b, sg, r, il, "attn_norm");
    rmsnorm(b, &norm_c, rk->x, L->attn_norm, m->n_embd, rk->xn);
    if (b->taps)
        cpu_tap_rank(b, sg, r, CPU_SITE_ATTN_NORM, il, rk->xn, m->n_embd, 0, 0, m->n_embd);
    const memra_op_ctx qkv_c[3] = {op_ctx(b, sg, r, il, "q"), op_ctx(b, sg, r, il, "k"), op_ctx(b, sg, r, il, "v")};
    matvec(b, qkv_c, rk->xn, 3, &L->wq, rk->q, &L->wk, rk->k, &L->wv, rk->v);
    add_bias(rk->q, L->bq, rk->q_dim);
    add_bias(rk->k, L->bk, rk->kv_dim);
    add_bias(rk->v, L->bv, rk->v_dim);
    if (b->taps) {
        uint32_t hd = m->head_dim, hv = m->head_dim_v;
        cpu_tap_rank(b, sg, r, CPU_SITE_Q, il, rk->q, rk->q_dim, rk->h0 * hd, rk->h0 * hd, rk->h1 * hd);
        cpu_tap_rank(b, sg, r, CPU_SITE_K, il, rk->k, rk->kv_dim, rk->g0 * hd, rk->g0 * hd, rk->g1 * hd);
        cpu_tap_rank(b, sg, r, CPU_SITE_V, il, rk->v, rk->v_dim, rk->g0 * hv, rk->g0 * hv, rk->g1 * hv);
    }
    bool swa = memra_model_layer_is_swa(m, il);
    head_tap tq = {sg, r, il, rk->h0, rk->h1, CPU_SITE_QK_NORM_Q, CPU_SITE_ROPE_Q};
    head_tap tk = {sg, r, il, rk->g0, rk->g1, CPU_SITE_QK_NORM_K, CPU_SITE_ROPE_K};
    memra_op_ctx head_c = op_ctx(b, sg, r, il, "rope");
    head_c.tensor = "q";
    norm_and_rope(b, head_c, rk->q, rk->h0, rk->h1 - rk->h0, L->q_norm, swa, &tq);
    head_c.tensor = "k";
    norm_and_rope(b, head_c, rk->k, rk->g0, rk->g1 - rk->g0, L->k_norm, swa, &tk);
    memcpy(k_cache + (size_t)pos * rk->kv_dim, rk->k, (size_t)rk->kv_dim * sizeof(float));
    memcpy(v_cache + (size_t)pos * rk->v_dim, rk->v, (size_t)rk->v_dim * sizeof(float));

    /* A sliding-window layer attends to positions t with pos - t < sliding_window (llama.cpp's
     * LLAMA_SWA_TYPE_STANDARD masks p1 - p0 >= n_swa). */
    uint32_t t0 = swa && pos + 1 > m->sliding_window ? pos + 1 - m->sliding_window : 0;
    attention_task at = {.b = b,
                         .rk = rk,
                         .ctx = op_ctx(b, sg, r, il, "attention"),
                         .q = rk->q,
                         .k_cache = k_cache + (size_t)t0 * rk->kv_dim,
                         .v_cache = v_cache + (size_t)t0 * rk->v_dim,
                         .scores = s->scores,
                         .out = rk->att,
                         .n_pos = pos + 1 - t0,
                         .capacity = s->capacity,
                         /* a description from elsewhere may leave it 0: the usual scale then */
                         .scale = m->attn_scale > 0.0f ? m->attn_scale : 1.0f / sqrtf((float)m->head_dim)};
    cpu_pool_run(b->pool, rk->h1 - rk->h0, (uint64_t)(pos + 1 - t0) * (m->head_dim + m->head_dim_v), attention_run,
                 &at);
    if (b->taps)
        cpu_tap_rank(b, sg, r, CPU_SITE_ATTENTION, il, rk->att, rk->att_dim, rk->h0 * m->head_dim_v,
                     rk->h0 * m->head_dim_v, rk->h1 * m->head_dim_v);
    const memra_op_ctx out_c = op_ctx(b, sg, r, il, "attn_out");
    matvec(b, &out_c, rk->att, 1, &L->wo, rk->xn, NULL, NULL, NULL, NULL);
}

/* Rank r's FFN partial of layer il into rk->xn. */
static void rank_ffn(memra_backend *b, cpu_stage *sg, uint32_t r, uint32_t il) {
    const memra_model *m = b->m;
    cpu_rank *rk = &sg->ranks[r];
    const cpu_layer *L = &rk->layers[il - sg->layer_begin];
    const memra_op_ctx norm_c = op_ctx(b, sg, r, il, "ffn_norm");
    rmsnorm(b, &norm_c, rk->x, L->ffn_norm, m->n_embd, rk->xn);
    if (b->taps)
        cpu_tap_rank(b, sg, r, CPU_SITE_FFN_NORM, il, rk->xn, m->n_embd, 0, 0, m->n_embd);
    if (m->n_expert > 0) { /* experts into the rank's slots (cpu_moe.c); combined after the all-reduce */
        cpu_moe_rank(b, sg, r, il);
        return;
    }
    const memra_op_ctx gate_up_c[2] = {op_ctx(b, sg, r, il, "ffn_gate"), op_ctx(b, sg, r, il, "ffn_up")};
    matvec(b, gate_up_c, rk->xn, 2, &L->w_gate, rk->gate, &L->w_up, rk->up, NULL, NULL);
    if (b->taps) {
        cpu_tap_rank(b, sg, r, CPU_SITE_FFN_GATE, il, rk->gate, rk->n_ff, rk->f0, rk->f0, rk->f1);
        cpu_tap_rank(b, sg, r, CPU_SITE_FFN_UP, il, rk->up, rk->n_ff, rk->f0, rk->f0, rk->f1);
    }
    if (m->ffn_act == MEMRA_FFN_GELU_TANH) {
        for (uint32_t i = 0; i < rk->n_ff; i++) {
            float g = rk->gate[i];
            rk->gate[i] = 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * rk->up[i];
        }
    } else {
        for (uint32_t i = 0; i < rk->n_ff; i++) {
            float g = rk->gate[i];
            rk->gate[i] = g / (1.0f + expf(-g)) * rk->up[i];
        }
    }
    if (b->taps)
        cpu_tap_rank(b, sg, r, CPU_SITE_FFN_ACT, il, rk->gate, rk->n_ff, rk->f0, rk->f0, rk->f1);
    const memra_op_ctx down_c = op_ctx(b, sg, r, il, "ffn_down");
    matvec(b, &down_c, rk->gate, 1, &L->w_down, rk->xn, NULL, NULL, NULL, NULL);
}

/* Sums the ranks' partials (in rk->xn) through the collective (cpu_all_reduce), then (gemma3)
 * RMS-normalises the sum with the layer's post-attention or post-FFN norm and adds it to every
 * rank's residual stream. */
static memra_status reduce_and_add(memra_backend *b, cpu_stage *sg, uint32_t il, uint32_t which, memra_error *err) {
    const memra_model *m = b->m;
    if (sg->n_ranks > 1) {
        memra_status st = cpu_all_reduce(b, sg, il, which, err);
        if (st != MEMRA_OK)
            return st;
    }
    if (which && m->n_expert > 0)
        cpu_moe_combine(b, sg, il);
    if (b->taps)
        cpu_tap_whole(b, sg, which ? CPU_SITE_FFN_DOWN : CPU_SITE_ATTN_OUT, (int32_t)il, sg->ranks[0].xn, m->n_embd,
                      false);
    for (uint32_t r = 0; r < sg->n_ranks; r++) {
        cpu_rank *rk = &sg->ranks[r];
        const cpu_layer *L = &rk->layers[il - sg->layer_begin];
        const float *post = which ? L->post_ffn_norm : L->post_attn_norm;
        if (post) {
            const memra_op_ctx c = op_ctx(b, sg, r, il, which ? "post_ffn_norm" : "post_attn_norm");
            rmsnorm(b, &c, rk->xn, post, m->n_embd, rk->xn);
        }
        if (m->residual_scale > 0.0f && m->residual_scale != 1.0f) /* granitemoe (0: a description from elsewhere) */
            for (uint32_t i = 0; i < m->n_embd; i++)
                rk->xn[i] *= m->residual_scale;
        for (uint32_t i = 0; i < m->n_embd; i++)
            rk->x[i] += rk->xn[i];
    }
    if (b->taps)
        cpu_tap_whole(b, sg, which ? CPU_SITE_FFN_RES : CPU_SITE_ATTN_RES, (int32_t)il, sg->ranks[0].x, m->n_embd,
                      false);
    return MEMRA_OK;
}

/* One layer at position pos on every rank of the stage. */
static memra_status layer_forward(memra_backend *b, cpu_stage *sg, memra_state *s, uint32_t il, uint32_t pos,
                                  memra_error *err) {
    for (uint32_t r = 0; r < sg->n_ranks; r++)
        rank_attention(b, sg, r, s, il, pos);
    if (b->taps)
        cpu_tap_flush(b);
    memra_status st = reduce_and_add(b, sg, il, 0, err);
    if (st != MEMRA_OK)
        return st;
    for (uint32_t r = 0; r < sg->n_ranks; r++)
        rank_ffn(b, sg, r, il);
    if (b->taps)
        cpu_tap_flush(b);
    return reduce_and_add(b, sg, il, 1, err);
}

static void rope_tables(memra_backend *b, uint32_t pos) {
    const memra_model *m = b->m;
    double p = (double)pos / (double)m->rope_linear_factor;
    for (uint32_t i = 0; i < m->head_dim / 2; i++) {
        double theta = p * (double)b->rope_freq[i];
        b->rope_cos[i] = (float)cos(theta);
        b->rope_sin[i] = (float)sin(theta);
    }
    if (!m->sliding_window)
        return;
    double p_swa = (double)pos / (double)memra_model_layer_rope_linear_factor(m, 0);
    for (uint32_t i = 0; i < m->head_dim / 2; i++) {
        double theta = p_swa * (double)b->rope_freq_swa[i];
        b->rope_cos_swa[i] = (float)cos(theta);
        b->rope_sin_swa[i] = (float)sin(theta);
    }
}

/* Embedding, then every stage in order, each handing its hidden state to every rank of the next
 * by a copy. The final norm and the head are separate (cpu_head_forward): they run after the
 * collective check. */
memra_status cpu_forward(memra_backend *b, memra_state *s, uint32_t token, uint32_t pos, memra_error *err) {
    const memra_model *m = b->m;
    rope_tables(b, pos);
    b->op_position = pos;
    cpu_collective_step_begin(b, pos);
    cpu_matrix_row(&b->tok_embd, token, b->stages[0].ranks[0].x);
    if (m->embd_scale > 0.0f && m->embd_scale != 1.0f) /* gemma3, granitemoe */
        for (uint32_t i = 0; i < m->n_embd; i++)
            b->stages[0].ranks[0].x[i] *= m->embd_scale;
    for (uint32_t i = 0; i < b->n_stages; i++) {
        cpu_stage *sg = &b->stages[i];
        const float *in = i > 0 ? b->stages[i - 1].ranks[0].x : b->stages[0].ranks[0].x;
        for (uint32_t r = 0; r < sg->n_ranks; r++)
            if (sg->ranks[r].x != in)
                memcpy(sg->ranks[r].x, in, (size_t)m->n_embd * sizeof(float));
        for (uint32_t il = sg->layer_begin; il < sg->layer_end; il++) {
            memra_status st = layer_forward(b, sg, s, il, pos, err);
            if (st != MEMRA_OK)
                return st;
        }
    }
    return MEMRA_OK;
}

void cpu_head_forward(memra_backend *b) {
    const memra_model *m = b->m;
    const cpu_stage *last = &b->stages[b->n_stages - 1];
    memra_op_ctx c = op_ctx(b, NULL, 0, MEMRA_OP_LAYER_HEAD, "output_norm");
    rmsnorm(b, &c, cpu_last_hidden(b), b->output_norm, m->n_embd, b->head_in);
    if (b->taps)
        cpu_tap_whole(b, last, CPU_SITE_OUTPUT_NORM, -1, b->head_in, m->n_embd, true);
    c.site = c.tensor = "logits";
    matvec(b, &c, b->head_in, 1, &b->output, b->head_out, NULL, NULL, NULL, NULL);
    if (m->logit_scale > 0.0f && m->logit_scale != 1.0f) { /* granitemoe: logits times 1 / logit_scale, as llama.cpp */
        const float inv = 1.0f / m->logit_scale;
        for (uint32_t i = 0; i < m->n_vocab; i++)
            b->head_out[i] *= inv;
    }
    if (b->taps)
        cpu_tap_whole(b, last, CPU_SITE_LOGITS, -1, b->head_out, m->n_vocab, true);
}

void cpu_op_topk(void *user, const float *logits, uint32_t n_vocab, uint32_t k, uint32_t *seq) {
    const memra_backend *b = user;
    const memra_op_ctx c = op_ctx(b, NULL, 0, MEMRA_OP_LAYER_HEAD, "topk");
    b->op_topk->vt->cpu_topk(b->op_topk->op, &c, logits, n_vocab, k, seq);
}
