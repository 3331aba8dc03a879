/* cpu_open.c: opening and closing the cpu backend: the model checked, its weights bound in place
 * (views into the mapped file, checked for shape, type and alignment), the RoPE frequencies and
 * head buffers allocated, then the plan's stages (cpu_stages.c), the collective (cpu_tp.c) and the
 * thread pool. */
#include <stdio.h>
#include <stdlib.h>

#include "cpu_backend.h"
#include "memra/gguf.h"
#include "memra/quant.h"

/* ------------------------------------------------------------------------------------------ */
/* Open: bind weights in place, check the plan, allocate each stage's activations.             */

memra_status cpu_bind_matrix(const memra_weight *w, uint64_t rows, uint64_t cols, cpu_matrix *out,
                                memra_error *err) {
    if (!w->data)
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: a required matrix is absent");
    if (w->rows != rows || w->cols != cols)
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: tensor '%s' is %llux%llu, expected %llux%llu", w->name,
                          (unsigned long long)w->rows, (unsigned long long)w->cols, (unsigned long long)rows,
                          (unsigned long long)cols);
    size_t align = 1;
    switch (w->type) {
    case MEMRA_TYPE_F32: align = 4; break;
    case MEMRA_TYPE_F16:
    case MEMRA_TYPE_BF16: align = 2; break;
    case MEMRA_TYPE_Q8_0:
    case MEMRA_TYPE_Q4_0:
    case MEMRA_TYPE_Q4_1:
    case MEMRA_TYPE_Q5_0:
    case MEMRA_TYPE_Q5_1:
    case MEMRA_TYPE_Q4_K:
    case MEMRA_TYPE_Q5_K:
    case MEMRA_TYPE_Q6_K:
        /* blocks are read by memcpy: any alignment */
        if (cols % memra_quant_block_elems(w->type) != 0)
            return memra_fail(err, MEMRA_E_FORMAT, "cpu: tensor '%s' is %s with %llu columns, not a multiple of %u",
                              w->name, memra_tensor_type_name(w->type), (unsigned long long)cols,
                              memra_quant_block_elems(w->type));
        break;
    default:
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: tensor '%s' has type %s, which memra does not support yet",
                          w->name, memra_tensor_type_name(w->type));
    }
    if ((uintptr_t)w->data % align != 0)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: tensor '%s' (%s) is not %zu-byte aligned in the file",
                          w->name, memra_tensor_type_name(w->type), align);
    uint64_t row_bytes = 0;
    memra_status st = memra_tensor_row_bytes(w->type, cols, &row_bytes, err);
    if (st != MEMRA_OK)
        return st;
    if (rows > UINT32_MAX || cols > UINT32_MAX || row_bytes * rows > w->n_bytes)
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: tensor '%s' holds %llu bytes, too few for its shape", w->name,
                          (unsigned long long)w->n_bytes);
    out->data = w->data;
    out->type = w->type;
    out->rows = (uint32_t)rows;
    out->cols = (uint32_t)cols;
    out->row_bytes = (size_t)row_bytes;
    return MEMRA_OK;
}

/* A vector (norm weight, bias) of n F32 values, or NULL when absent and optional. */
memra_status cpu_bind_vector(const memra_weight *w, uint64_t n, bool optional, const float **out, memra_error *err) {
    *out = NULL;
    if (!w->data) {
        if (optional)
            return MEMRA_OK;
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: a required vector is absent");
    }
    if (w->type != MEMRA_TYPE_F32)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: vector '%s' has type %s; the cpu backend reads F32 vectors",
                          w->name, memra_tensor_type_name(w->type));
    if (w->rows * w->cols != n || w->n_bytes < n * sizeof(float))
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: vector '%s' has %llu elements, expected %llu", w->name,
                          (unsigned long long)(w->rows * w->cols), (unsigned long long)n);
    if ((uintptr_t)w->data % 4 != 0)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: vector '%s' is not 4-byte aligned in the file", w->name);
    *out = w->data;
    return MEMRA_OK;
}

static memra_status bind_layer(const memra_model *m, uint32_t il, cpu_layer *L, memra_error *err) {
    const memra_layer *src = &m->layers[il];
    uint32_t q_dim = m->n_head * m->head_dim, kv_dim = m->n_head_kv * m->head_dim;
    uint32_t v_dim = m->n_head_kv * m->head_dim_v, att_dim = m->n_head * m->head_dim_v;
    memra_status st;
    if ((st = cpu_bind_matrix(&src->wq, q_dim, m->n_embd, &L->wq, err)) != MEMRA_OK ||
        (st = cpu_bind_matrix(&src->wk, kv_dim, m->n_embd, &L->wk, err)) != MEMRA_OK ||
        (st = cpu_bind_matrix(&src->wv, v_dim, m->n_embd, &L->wv, err)) != MEMRA_OK ||
        (st = cpu_bind_matrix(&src->wo, m->n_embd, att_dim, &L->wo, err)) != MEMRA_OK ||
        (m->n_expert > 0 && (st = cpu_moe_bind_layer(m, il, L, err)) != MEMRA_OK) ||
        (m->n_expert == 0 && (st = cpu_bind_matrix(&src->w_gate, m->n_ff, m->n_embd, &L->w_gate, err)) != MEMRA_OK) ||
        (m->n_expert == 0 && (st = cpu_bind_matrix(&src->w_up, m->n_ff, m->n_embd, &L->w_up, err)) != MEMRA_OK) ||
        (m->n_expert == 0 && (st = cpu_bind_matrix(&src->w_down, m->n_embd, m->n_ff, &L->w_down, err)) != MEMRA_OK) ||
        (st = cpu_bind_vector(&src->attn_norm, m->n_embd, false, &L->attn_norm, err)) != MEMRA_OK ||
        (st = cpu_bind_vector(&src->ffn_norm, m->n_embd, false, &L->ffn_norm, err)) != MEMRA_OK ||
        (st = cpu_bind_vector(&src->bq, q_dim, true, &L->bq, err)) != MEMRA_OK ||
        (st = cpu_bind_vector(&src->bk, kv_dim, true, &L->bk, err)) != MEMRA_OK ||
        (st = cpu_bind_vector(&src->bv, v_dim, true, &L->bv, err)) != MEMRA_OK ||
        (st = cpu_bind_vector(&src->q_norm, m->head_dim, true, &L->q_norm, err)) != MEMRA_OK ||
        (st = cpu_bind_vector(&src->k_norm, m->head_dim, true, &L->k_norm, err)) != MEMRA_OK ||
        (st = cpu_bind_vector(&src->post_attn_norm, m->n_embd, true, &L->post_attn_norm, err)) != MEMRA_OK ||
        (st = cpu_bind_vector(&src->post_ffn_norm, m->n_embd, true, &L->post_ffn_norm, err)) != MEMRA_OK) {
        memra_error_prefix(err, "layer %u", il);
        return st;
    }
    return MEMRA_OK;
}

static memra_status check_model(const memra_model *m, memra_error *err) {
    if (m->arch != MEMRA_ARCH_LLAMA && m->arch != MEMRA_ARCH_QWEN2 && m->arch != MEMRA_ARCH_QWEN3 &&
        m->arch != MEMRA_ARCH_GEMMA3 && m->arch != MEMRA_ARCH_QWEN2MOE && m->arch != MEMRA_ARCH_QWEN3MOE &&
        m->arch != MEMRA_ARCH_GRANITEMOE)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cpu: architecture '%s' is not supported",
                          m->arch_name ? m->arch_name : "?");
    if (m->n_layer == 0 || m->n_embd == 0 || m->n_vocab == 0 || m->n_head == 0 || m->n_head_kv == 0 ||
        m->head_dim == 0 || m->head_dim_v == 0 || m->n_ff == 0)
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: the model has a zero dimension");
    if (m->n_head % m->n_head_kv != 0)
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: n_head %u is not a multiple of n_head_kv %u", m->n_head,
                          m->n_head_kv);
    if (m->head_dim % 2 != 0)
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: head_dim %u is odd; RoPE rotates pairs", m->head_dim);
    if (m->arch == MEMRA_ARCH_GEMMA3 &&
        (!(m->embd_scale > 0.0f) || !(m->attn_scale > 0.0f) || m->sliding_window == 0 || m->swa_period == 0))
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: gemma3 model without embedding scale, attention scale or window");
    if ((m->n_expert > 0) != (m->arch == MEMRA_ARCH_QWEN2MOE || m->arch == MEMRA_ARCH_QWEN3MOE ||
                              m->arch == MEMRA_ARCH_GRANITEMOE || (m->arch == MEMRA_ARCH_LLAMA && m->n_expert > 0)) ||
        m->n_expert > MEMRA_MAX_EXPERTS || (m->n_expert_used == 0 && m->n_expert > 0) ||
        m->n_expert_used > MEMRA_MAX_EXPERTS_USED || m->n_expert_used > m->n_expert)
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: %s model with %u experts of which %u used",
                          m->arch_name ? m->arch_name : "?", m->n_expert, m->n_expert_used);
    if (!(m->rope_linear_factor > 0.0f))
        return memra_fail(err, MEMRA_E_FORMAT, "cpu: rope linear factor %g is not positive",
                          (double)m->rope_linear_factor);
    return MEMRA_OK;
}

void *cpu_alloc_floats(memra_backend *b, size_t n) {
    void *p = calloc(n ? n : 1, sizeof(float));
    if (p)
        b->scratch_bytes += n * sizeof(float);
    return p;
}

void cpu_close(memra_backend *b) {
    if (!b)
        return;
    cpu_pool_free(b->pool);
    memra_op_set_close(&b->ops);
    for (uint32_t s = 0; b->stages && s < b->n_stages; s++) {
        cpu_stage *sg = &b->stages[s];
        if (sg->comm && b->coll)
            b->coll->destroy(sg->comm);
        free(sg->status);
        for (uint32_t r = 0; r < sg->n_ranks; r++) {
            cpu_rank *rk = &sg->ranks[r];
            free(rk->layers);
            free(rk->x);
            free(rk->xn);
            free(rk->q);
            free(rk->k);
            free(rk->v);
            free(rk->att);
            free(rk->gate);
            free(rk->up);
            cpu_moe_free_rank(rk);
        }
    }
    free(b->stages);
    free(b->layers);
    free(b->cells);
    free(b->head_in);
    free(b->head_out);
    free(b->rope_freq);
    free(b->rope_cos);
    free(b->rope_sin);
    free(b->rope_freq_swa);
    free(b->rope_cos_swa);
    free(b->rope_sin_swa);
    free(b);
}

memra_status cpu_open(const memra_host *host, const memra_model *m, const memra_plan *plan, const memra_options *opts,
                      memra_backend **out, memra_error *err) {
    *out = NULL;
    cpu_kernels_init();
    memra_backend *b = calloc(1, sizeof *b);
    if (!b)
        return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory");
    b->host = host;
    b->m = m;
    b->opts = opts;
    cpu_config cfg;
    memra_status st = cpu_read_options(opts, &cfg, err);
    if (st != MEMRA_OK)
        goto fail;
    b->n_threads = cfg.threads;
    b->n_vdevices = cfg.vdevices;
    b->grain = cfg.grain;
    b->chunk = cfg.prefill;
    b->kv = cfg.kv;
    if ((st = check_model(m, err)) != MEMRA_OK || (st = cpu_check_plan(m, plan, b->n_vdevices, err)) != MEMRA_OK)
        goto fail;
    if (b->kv == CPU_KV_Q8 && (m->head_dim % 32 || m->head_dim_v % 32)) {
        st = memra_fail(err, MEMRA_E_UNSUPPORTED,
                        "cpu: kv=q8 stores a row's blocks of 32 values; this model's head size is %u (v %u), not a "
                        "multiple of 32 (use kv=f32, f16 or bf16)",
                        m->head_dim, m->head_dim_v);
        goto fail;
    }
    b->q_dim = m->n_head * m->head_dim;
    b->kv_dim = m->n_head_kv * m->head_dim;
    b->v_dim = m->n_head_kv * m->head_dim_v;
    b->att_dim = m->n_head * m->head_dim_v;

    st = MEMRA_E_NOMEM;
    b->layers = calloc(m->n_layer, sizeof *b->layers);
    if (!b->layers)
        goto fail_nomem;
    for (uint32_t il = 0; il < m->n_layer; il++)
        if ((st = bind_layer(m, il, &b->layers[il], err)) != MEMRA_OK)
            goto fail;
    if ((st = cpu_bind_matrix(&m->tok_embd, m->n_vocab, m->n_embd, &b->tok_embd, err)) != MEMRA_OK ||
        (st = cpu_bind_matrix(&m->output, m->n_vocab, m->n_embd, &b->output, err)) != MEMRA_OK ||
        (st = cpu_bind_vector(&m->output_norm, m->n_embd, false, &b->output_norm, err)) != MEMRA_OK)
        goto fail;

    uint32_t half = m->head_dim / 2;
    b->rope_freq = cpu_alloc_floats(b, half);
    b->rope_cos = cpu_alloc_floats(b, half);
    b->rope_sin = cpu_alloc_floats(b, half);
    b->rope_freq_swa = cpu_alloc_floats(b, half);
    b->rope_cos_swa = cpu_alloc_floats(b, half);
    b->rope_sin_swa = cpu_alloc_floats(b, half);
    b->head_in = cpu_alloc_floats(b, m->n_embd);
    b->head_out = cpu_alloc_floats(b, m->n_vocab);
    if (!b->rope_freq || !b->rope_cos || !b->rope_sin || !b->rope_freq_swa || !b->rope_cos_swa || !b->rope_sin_swa ||
        !b->head_in || !b->head_out)
        goto fail_nomem;
    for (uint32_t i = 0; i < half; i++)
        b->rope_freq[i] = memra_model_rope_freq(m, i);
    /* the local layers' frequencies: the first layer that is one (any: they are all alike) */
    for (uint32_t i = 0; i < half; i++)
        b->rope_freq_swa[i] = m->sliding_window ? memra_model_layer_rope_freq(m, 0, i) : b->rope_freq[i];

    b->n_stages = plan->n_stages;
    b->stages = calloc(plan->n_stages, sizeof *b->stages);
    if (!b->stages)
        goto fail_nomem;
    for (uint32_t s = 0; s < plan->n_stages; s++) {
        cpu_stage *sg = &b->stages[s];
        sg->layer_begin = plan->stages[s].layer_begin;
        sg->layer_end = plan->stages[s].layer_end;
        sg->device = plan->stages[s].device;
        if ((st = cpu_open_ranks(b, &plan->stages[s], sg, err)) != MEMRA_OK)
            goto fail;
    }
    if ((st = cpu_open_collective(b, plan, &cfg, opts, err)) != MEMRA_OK)
        goto fail;
    if ((st = cpu_pool_new(b->n_threads, b->grain, &b->pool, err)) != MEMRA_OK)
        goto fail;
    if ((st = memra_op_set_open(host, "cpu", opts, &b->ops, err)) != MEMRA_OK) {
        memra_error_prefix(err, "cpu");
        goto fail;
    }
    b->op_rmsnorm = memra_op_set_find(&b->ops, MEMRA_OP_RMSNORM, 0);
    b->op_rope = memra_op_set_find(&b->ops, MEMRA_OP_ROPE, 0);
    b->op_attention = memra_op_set_find(&b->ops, MEMRA_OP_ATTENTION, 0);
    b->op_topk = memra_op_set_find(&b->ops, MEMRA_OP_TOPK, 0);
    for (uint32_t t = 0; t < 64; t++)
        b->op_gemv[t] = memra_op_set_find(&b->ops, MEMRA_OP_GEMV, t);
    b->opts = NULL;
    *out = b;
    return MEMRA_OK;

fail_nomem:
    st = memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for the model's activations");
fail:
    cpu_close(b);
    return st;
}
