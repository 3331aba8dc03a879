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
 * A prefill chunk (step_chunk, cpu_step.c) runs nr consecutive positions through the same code
 * with nr rows of activations (the rank's buffers hold b->chunk rows): each matrix-vector product
 * walks its weight rows in tiles of about 16 KiB and dots each tile's rows with all nr inputs
 * while the tile is hot in cache, so a chunk reads its weights once, not nr times. Every output
 * element is still one call of the single-token kernel on the same row and the same input
 * (cpu_matvec_rows over a row range: the same dot, in the same order), norms and activations are
 * per row, RoPE uses the row's own position's tables, and attention runs row by row in position
 * order, each row writing its K/V rows and then attending over [0, its position] (causal in the
 * chunk). The all-reduces run per row, at the row's position, with the statuses checked after
 * each. So a chunk gives exactly the bits of nr single steps (chunk invariance, plugin.h).
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
#include "memra/numeric.h"
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

/* Weight bytes a tile of rows may span while it is dotted with every input of a chunk. */
#define MATVEC_TILE_BYTES 16384u

/* Up to three matrix-vector products sharing one input, run as one task over their rows; with
 * nr > 1 inputs (a chunk: x holds nr rows of x_stride floats, y[i] nr rows of y_stride[i]), the
 * rows of each tile of weights are dotted with every input before the next tile. */
typedef struct matvec_task {
    const memra_backend *b;
    const cpu_matrix *w[3];
    float *y[3];
    size_t y_stride[3];
    memra_op_ctx ctx[3];
    const float *x;
    size_t x_stride;
    uint32_t n, nr;
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
        uint32_t tile = t->nr == 1 ? rows : (uint32_t)(MATVEC_TILE_BYTES / (w->row_bytes ? w->row_bytes : 1));
        if (tile == 0)
            tile = 1;
        for (uint32_t r0 = lo; end > base && r0 < hi; r0 += tile) {
            uint32_t r1 = hi - r0 < tile ? hi : r0 + tile;
            if (!op && t->nr == 1)
                cpu_matvec_rows(w, t->x, t->y[i], r0, r1);
            else if (!op)
                cpu_matvec_rows_multi(w, t->x, t->x_stride, t->nr, t->y[i], t->y_stride[i], r0, r1);
            for (uint32_t j = 0; op && j < t->nr; j++) {
                memra_op_ctx c = t->ctx[i];
                c.position += j; /* the row's own position */
                op->vt->cpu_gemv(op->op, &c, w->type, w->data, w->row_bytes, w->cols, t->x + j * t->x_stride,
                                 t->y[i] + j * t->y_stride[i], r0, r1);
            }
        }
        base += rows;
    }
}

/* c: the context of each product (its site); n of them, over nr rows of input (x: x_stride
 * floats apart; y_i: the product's output width apart). */
static void matvec_nr(memra_backend *b, const memra_op_ctx *c, const float *x, size_t x_stride, uint32_t nr, uint32_t n,
                      const cpu_matrix *w0, float *y0, const cpu_matrix *w1, float *y1, const cpu_matrix *w2,
                      float *y2) {
    matvec_task t = {.b = b, .w = {w0, w1, w2}, .y = {y0, y1, y2}, .x = x, .x_stride = x_stride, .n = n, .nr = nr};
    for (uint32_t i = 0; i < n; i++) {
        t.ctx[i] = c[i];
        t.y_stride[i] = t.w[i]->rows;
    }
    uint32_t rows = 0;
    for (uint32_t i = 0; i < n; i++)
        rows += t.w[i]->rows;
    cpu_pool_run(b->pool, rows, (uint64_t)w0->cols * nr, matvec_run, &t);
}

static void matvec(memra_backend *b, const memra_op_ctx *c, const float *x, uint32_t n, const cpu_matrix *w0, float *y0,
                   const cpu_matrix *w1, float *y1, const cpu_matrix *w2, float *y2) {
    matvec_nr(b, c, x, 0, 1, n, w0, y0, w1, y1, w2, y2);
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
static void norm_and_rope(memra_backend *b, memra_op_ctx c, float *x, uint32_t h0, uint32_t n_heads, const float *norm,
                          bool swa, const head_tap *tap) {
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

static void rope_tables(memra_backend *b, uint32_t pos) {
    const memra_model *m = b->m;
    b->rope_pos = pos;
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

static void attention_row(memra_backend *b, cpu_stage *sg, uint32_t r, memra_state *s, uint32_t il, uint32_t pos,
                          uint32_t j, float *k_cache, float *v_cache);

/* The arm's kv type: each value of a K or V row rounded (to nearest even) to it as it is written,
 * element by element, so the rounding is the same whatever the ranks' slices; q8: each block of
 * 32 values (a rank's rows are whole heads of a multiple of 32 values, so the blocks are the
 * heads' whatever the slices) to memra_kv_q8_*'s quants and back: the GPU stores the same quants
 * and scales, but attention=mma then rounds each value (quant x scale) to bf16 for its tiles, as it
 * rounds every cache type's values; the cpu keeps the f32 product (cpu against cuda is an nmse pair). */
static void round_kv(uint32_t kv, float *x, uint32_t n) {
    if (kv == CPU_KV_Q8)
        for (uint32_t b0 = 0; b0 < n; b0 += 32) {
            float a = 0.0f;
            for (uint32_t i = 0; i < 32; i++)
                a = memra_kv_q8_amax(a, x[b0 + i]);
            const float d = memra_kv_q8_scale(a);
            for (uint32_t i = 0; i < 32; i++)
                x[b0 + i] = memra_kv_q8_value(memra_kv_q8_quant(x[b0 + i], d), d);
        }
    else if (kv == CPU_KV_F16)
        for (uint32_t i = 0; i < n; i++)
            x[i] = memra_f16_to_f32(memra_f32_to_f16(x[i]));
    else if (kv == CPU_KV_BF16)
        for (uint32_t i = 0; i < n; i++)
            x[i] = memra_bf16_to_f32(memra_f32_to_bf16(x[i]));
}

/* Rank r's attention partial of layer il at positions pos0 .. pos0+nr-1 (row j of each buffer:
 * position pos0+j) into rk->xn (n_embd a row): reads its slices once and its K/V rows
 * [0, position], writes its K and V rows of each position (past the committed prefix until the
 * step commits). With one rank this is the whole attention output. */
static void rank_attention(memra_backend *b, cpu_stage *sg, uint32_t r, memra_state *s, uint32_t il, uint32_t pos0,
                           uint32_t nr) {
    const memra_model *m = b->m;
    cpu_rank *rk = &sg->ranks[r];
    const cpu_layer *L = &rk->layers[il - sg->layer_begin];
    float *k_cache = s->k_cache[(size_t)il * MEMRA_MAX_RANKS + r];
    float *v_cache = s->v_cache[(size_t)il * MEMRA_MAX_RANKS + r];
    const size_t E = m->n_embd;
    b->op_position = pos0;
    const memra_op_ctx norm_c = op_ctx(b, sg, r, il, "attn_norm");
    for (uint32_t j = 0; j < nr; j++) {
        memra_op_ctx c = norm_c;
        c.position = pos0 + j;
        rmsnorm(b, &c, rk->x + j * E, L->attn_norm, m->n_embd, rk->xn + j * E);
    }
    if (b->taps)
        cpu_tap_rank(b, sg, r, CPU_SITE_ATTN_NORM, il, rk->xn, m->n_embd, 0, 0, m->n_embd);
    const memra_op_ctx qkv_c[3] = {op_ctx(b, sg, r, il, "q"), op_ctx(b, sg, r, il, "k"), op_ctx(b, sg, r, il, "v")};
    matvec_nr(b, qkv_c, rk->xn, E, nr, 3, &L->wq, rk->q, &L->wk, rk->k, &L->wv, rk->v);
    for (uint32_t j = 0; j < nr; j++)
        attention_row(b, sg, r, s, il, pos0 + j, j, k_cache, v_cache);
    b->op_position = pos0;
    const memra_op_ctx out_c = op_ctx(b, sg, r, il, "attn_out");
    matvec_nr(b, &out_c, rk->att, rk->att_dim, nr, 1, &L->wo, rk->xn, NULL, NULL, NULL, NULL);
}

/* Row j of a chunk (position pos) of rank r's attention, from its q, k and v rows to its att row:
 * biases, q/k norms, RoPE at pos, the K/V rows of pos written, then attention over [0, pos]. */
static void attention_row(memra_backend *b, cpu_stage *sg, uint32_t r, memra_state *s, uint32_t il, uint32_t pos,
                          uint32_t j, float *k_cache, float *v_cache) {
    const memra_model *m = b->m;
    cpu_rank *rk = &sg->ranks[r];
    const cpu_layer *L = &rk->layers[il - sg->layer_begin];
    float *q = rk->q + (size_t)j * rk->q_dim, *k = rk->k + (size_t)j * rk->kv_dim, *v = rk->v + (size_t)j * rk->v_dim;
    float *att = rk->att + (size_t)j * rk->att_dim;
    if (b->rope_pos != pos) /* a chunk's row: its own position's tables */
        rope_tables(b, pos);
    b->op_position = pos;
    add_bias(q, L->bq, rk->q_dim);
    add_bias(k, L->bk, rk->kv_dim);
    add_bias(v, L->bv, rk->v_dim);
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
    norm_and_rope(b, head_c, q, rk->h0, rk->h1 - rk->h0, L->q_norm, swa, &tq);
    head_c.tensor = "k";
    norm_and_rope(b, head_c, k, rk->g0, rk->g1 - rk->g0, L->k_norm, swa, &tk);
    round_kv(b->kv, k, rk->kv_dim);
    round_kv(b->kv, v, rk->v_dim);
    memcpy(k_cache + (size_t)pos * rk->kv_dim, k, (size_t)rk->kv_dim * sizeof(float));
    memcpy(v_cache + (size_t)pos * rk->v_dim, v, (size_t)rk->v_dim * sizeof(float));

    /* A sliding-window layer attends to positions t with pos - t < sliding_window (llama.cpp's
     * LLAMA_SWA_TYPE_STANDARD masks p1 - p0 >= n_swa). */
    uint32_t t0 = swa && pos + 1 > m->sliding_window ? pos + 1 - m->sliding_window : 0;
    attention_task at = {.b = b,
                         .rk = rk,
                         .ctx = op_ctx(b, sg, r, il, "attention"),
                         .q = q,
                         .k_cache = k_cache + (size_t)t0 * rk->kv_dim,
                         .v_cache = v_cache + (size_t)t0 * rk->v_dim,
                         .scores = s->scores,
                         .out = att,
                         .n_pos = pos + 1 - t0,
                         .capacity = s->capacity,
                         /* a description from elsewhere may leave it 0: the usual scale then */
                         .scale = m->attn_scale > 0.0f ? m->attn_scale : 1.0f / sqrtf((float)m->head_dim)};
    cpu_pool_run(b->pool, rk->h1 - rk->h0, (uint64_t)(pos + 1 - t0) * (m->head_dim + m->head_dim_v), attention_run,
                 &at);
    if (b->taps)
        cpu_tap_rank(b, sg, r, CPU_SITE_ATTENTION, il, rk->att, rk->att_dim, rk->h0 * m->head_dim_v,
                     rk->h0 * m->head_dim_v, rk->h1 * m->head_dim_v);
}

/* Rank r's FFN partial of layer il into rk->xn, for nr rows (positions pos0 ..). */
static void rank_ffn(memra_backend *b, cpu_stage *sg, uint32_t r, uint32_t il, uint32_t pos0, uint32_t nr) {
    const memra_model *m = b->m;
    cpu_rank *rk = &sg->ranks[r];
    const cpu_layer *L = &rk->layers[il - sg->layer_begin];
    const size_t E = m->n_embd;
    b->op_position = pos0;
    const memra_op_ctx norm_c = op_ctx(b, sg, r, il, "ffn_norm");
    for (uint32_t j = 0; j < nr; j++) {
        memra_op_ctx c = norm_c;
        c.position = pos0 + j;
        rmsnorm(b, &c, rk->x + j * E, L->ffn_norm, m->n_embd, rk->xn + j * E);
    }
    if (b->taps)
        cpu_tap_rank(b, sg, r, CPU_SITE_FFN_NORM, il, rk->xn, m->n_embd, 0, 0, m->n_embd);
    if (m->n_expert > 0) {          /* experts into the rank's slots (cpu_moe.c); combined after the all-reduce */
        cpu_moe_rank(b, sg, r, il); /* one row: a chunk runs a MoE FFN row by row (layer_forward) */
        return;
    }
    const memra_op_ctx gate_up_c[2] = {op_ctx(b, sg, r, il, "ffn_gate"), op_ctx(b, sg, r, il, "ffn_up")};
    matvec_nr(b, gate_up_c, rk->xn, E, nr, 2, &L->w_gate, rk->gate, &L->w_up, rk->up, NULL, NULL);
    if (b->taps) {
        cpu_tap_rank(b, sg, r, CPU_SITE_FFN_GATE, il, rk->gate, rk->n_ff, rk->f0, rk->f0, rk->f1);
        cpu_tap_rank(b, sg, r, CPU_SITE_FFN_UP, il, rk->up, rk->n_ff, rk->f0, rk->f0, rk->f1);
    }
    const size_t n_act = (size_t)rk->n_ff * nr; /* every row's: gate and up hold nr rows of n_ff */
    if (m->ffn_act == MEMRA_FFN_GELU_TANH) {
        for (size_t i = 0; i < n_act; i++) {
            float g = rk->gate[i];
            rk->gate[i] = 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * rk->up[i];
        }
    } else {
        for (size_t i = 0; i < n_act; i++) {
            float g = rk->gate[i];
            rk->gate[i] = g / (1.0f + expf(-g)) * rk->up[i];
        }
    }
    if (b->taps)
        cpu_tap_rank(b, sg, r, CPU_SITE_FFN_ACT, il, rk->gate, rk->n_ff, rk->f0, rk->f0, rk->f1);
    const memra_op_ctx down_c = op_ctx(b, sg, r, il, "ffn_down");
    matvec_nr(b, &down_c, rk->gate, rk->n_ff, nr, 1, &L->w_down, rk->xn, NULL, NULL, NULL, NULL);
}

/* Sums the ranks' partials (in rk->xn) through the collective (cpu_all_reduce), then (gemma3)
 * RMS-normalises the sum with the layer's post-attention or post-FFN norm and adds it to every
 * rank's residual stream. */
static memra_status reduce_and_add(memra_backend *b, cpu_stage *sg, uint32_t il, uint32_t which, uint32_t pos0,
                                   uint32_t nr, memra_error *err) {
    const memra_model *m = b->m;
    const size_t E = m->n_embd;
    for (uint32_t j = 0; sg->n_ranks > 1 && j < nr; j++) {
        /* one all-reduce a row, at the row's position (epochs and refusal cells as single
         * steps have them); in a chunk each is checked at once, since the next overwrites its
         * status words */
        b->position_word = (int32_t)(pos0 + j);
        memra_status st = cpu_all_reduce(b, sg, il, which, j, err);
        if (st == MEMRA_OK && nr > 1)
            st = cpu_check_statuses(b, pos0 + j, err);
        if (st != MEMRA_OK)
            return st;
    }
    if (which && m->n_expert > 0)
        cpu_moe_combine(b, sg, il); /* one row (layer_forward) */
    if (b->taps)
        cpu_tap_whole(b, sg, which ? CPU_SITE_FFN_DOWN : CPU_SITE_ATTN_OUT, (int32_t)il, sg->ranks[0].xn, m->n_embd,
                      false);
    for (uint32_t r = 0; r < sg->n_ranks; r++) {
        cpu_rank *rk = &sg->ranks[r];
        const cpu_layer *L = &rk->layers[il - sg->layer_begin];
        const float *post = which ? L->post_ffn_norm : L->post_attn_norm;
        for (uint32_t j = 0; post && j < nr; j++) {
            memra_op_ctx c = op_ctx(b, sg, r, il, which ? "post_ffn_norm" : "post_attn_norm");
            c.position = pos0 + j;
            rmsnorm(b, &c, rk->xn + j * E, post, m->n_embd, rk->xn + j * E);
        }
        if (m->residual_scale > 0.0f && m->residual_scale != 1.0f) /* granitemoe (0: a description from elsewhere) */
            for (size_t i = 0; i < E * nr; i++)
                rk->xn[i] *= m->residual_scale;
        for (size_t i = 0; i < E * nr; i++)
            rk->x[i] += rk->xn[i];
    }
    if (b->taps)
        cpu_tap_whole(b, sg, which ? CPU_SITE_FFN_RES : CPU_SITE_ATTN_RES, (int32_t)il, sg->ranks[0].x, m->n_embd,
                      false);
    return MEMRA_OK;
}

/* A chunk's mixture-of-experts FFN, row by row: each rank's x and xn point at row j while the
 * single-row FFN, its expert all-reduce (checked at once) and the residual add run, so each row is
 * exactly a step's (the experts' buffers hold one row). */
static memra_status moe_rows(memra_backend *b, cpu_stage *sg, uint32_t il, uint32_t pos0, uint32_t nr,
                             memra_error *err) {
    const size_t E = b->m->n_embd;
    float *x[MEMRA_MAX_RANKS], *xn[MEMRA_MAX_RANKS];
    for (uint32_t r = 0; r < sg->n_ranks; r++)
        x[r] = sg->ranks[r].x, xn[r] = sg->ranks[r].xn;
    memra_status st = MEMRA_OK;
    for (uint32_t j = 0; j < nr && st == MEMRA_OK; j++) {
        for (uint32_t r = 0; r < sg->n_ranks; r++)
            sg->ranks[r].x = x[r] + j * E, sg->ranks[r].xn = xn[r] + j * E;
        for (uint32_t r = 0; r < sg->n_ranks; r++)
            rank_ffn(b, sg, r, il, pos0 + j, 1);
        st = reduce_and_add(b, sg, il, 1, pos0 + j, 1, err);
        if (st == MEMRA_OK && sg->n_ranks > 1)
            st = cpu_check_statuses(b, pos0 + j, err);
    }
    for (uint32_t r = 0; r < sg->n_ranks; r++)
        sg->ranks[r].x = x[r], sg->ranks[r].xn = xn[r];
    return st;
}

/* One layer at positions pos0 .. pos0+nr-1 on every rank of the stage. */
static memra_status layer_forward(memra_backend *b, cpu_stage *sg, memra_state *s, uint32_t il, uint32_t pos0,
                                  uint32_t nr, memra_error *err) {
    for (uint32_t r = 0; r < sg->n_ranks; r++)
        rank_attention(b, sg, r, s, il, pos0, nr);
    if (b->taps)
        cpu_tap_flush(b);
    memra_status st = reduce_and_add(b, sg, il, 0, pos0, nr, err);
    if (st != MEMRA_OK)
        return st;
    if (b->m->n_expert > 0 && nr > 1)
        return moe_rows(b, sg, il, pos0, nr, err);
    for (uint32_t r = 0; r < sg->n_ranks; r++)
        rank_ffn(b, sg, r, il, pos0, nr);
    if (b->taps)
        cpu_tap_flush(b);
    return reduce_and_add(b, sg, il, 1, pos0, nr, err);
}

/* Embedding, then every stage in order, each handing its hidden state to every rank of the next
 * by a copy. The final norm and the head are separate (cpu_head_forward): they run after the
 * collective check. */
memra_status cpu_forward(memra_backend *b, memra_state *s, uint32_t token, uint32_t pos, memra_error *err) {
    const int64_t t = token;
    return cpu_forward_rows(b, s, &t, 1, pos, err);
}

/* The chunk's rows (1 <= nr <= b->chunk), row j the token tokens[j] at position pos0 + j. */
memra_status cpu_forward_rows(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t nr, uint32_t pos0,
                              memra_error *err) {
    const memra_model *m = b->m;
    const size_t E = m->n_embd;
    rope_tables(b, pos0);
    b->op_position = pos0;
    b->last_row = nr - 1;
    cpu_collective_step_begin(b, pos0);
    float *x0 = b->stages[0].ranks[0].x;
    for (uint32_t j = 0; j < nr; j++) {
        cpu_matrix_row(&b->tok_embd, (uint32_t)tokens[j], x0 + j * E);
        if (m->embd_scale > 0.0f && m->embd_scale != 1.0f) /* gemma3, granitemoe */
            for (uint32_t i = 0; i < m->n_embd; i++)
                x0[j * E + i] *= m->embd_scale;
    }
    for (uint32_t i = 0; i < b->n_stages; i++) {
        cpu_stage *sg = &b->stages[i];
        const float *in = i > 0 ? b->stages[i - 1].ranks[0].x : b->stages[0].ranks[0].x;
        for (uint32_t r = 0; r < sg->n_ranks; r++)
            if (sg->ranks[r].x != in)
                memcpy(sg->ranks[r].x, in, E * nr * sizeof(float));
        for (uint32_t il = sg->layer_begin; il < sg->layer_end; il++) {
            memra_status st = layer_forward(b, sg, s, il, pos0, nr, err);
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
