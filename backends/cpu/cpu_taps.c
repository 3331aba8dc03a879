/* cpu_taps.c: the cpu backend's per-op taps (the memra.ops extension): one step run with taps on,
 * handing the caller the logical tensor after every op (the sites of memra_ext_ops_v1, in order).
 *
 * Off, the taps cost the step one branch on b->taps per op (NULL). On, cpu_forward.c reports each
 * op's output as it is made: a rank's share of a sharded tensor (q, k, v, qk_norm, rope, attention,
 * ffn_gate, ffn_up, ffn_act) is copied into the site's gather buffer at its logical offset, and
 * the buffers are handed over in site order once every rank of the stage has run its part (the
 * ranks run one after another, so a rank's buffers would otherwise be overwritten). A tensor every
 * rank holds whole is rank 0's: the norms (every rank computes the same bits), the all-reduced sums
 * and the residual stream (the same bits on every rank by construction). Taps only read: the
 * step's bits are the untapped step's. */
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"

struct cpu_taps {
    memra_op_tap_fn fn;
    void *user;
    memra_status st; /* the first failure of fn */
    memra_error err;
    float *buf[CPU_SITE_COUNT]; /* gather buffers of the sharded sites (and the replicated norms) */
    bool have[CPU_SITE_COUNT];
    memra_op_site info[CPU_SITE_COUNT];
};

static const char *const site_names[CPU_SITE_COUNT] = {
    [CPU_SITE_ATTN_NORM] = "attn_norm",
    [CPU_SITE_Q] = "q",
    [CPU_SITE_K] = "k",
    [CPU_SITE_V] = "v",
    [CPU_SITE_QK_NORM_Q] = "qk_norm",
    [CPU_SITE_QK_NORM_K] = "qk_norm",
    [CPU_SITE_ROPE_Q] = "rope",
    [CPU_SITE_ROPE_K] = "rope",
    [CPU_SITE_ATTENTION] = "attention",
    [CPU_SITE_ATTN_OUT] = "attn_out",
    [CPU_SITE_ATTN_RES] = "attn_res",
    [CPU_SITE_FFN_NORM] = "ffn_norm",
    [CPU_SITE_FFN_GATE] = "ffn_gate",
    [CPU_SITE_FFN_UP] = "ffn_up",
    [CPU_SITE_FFN_ACT] = "ffn_act",
    [CPU_SITE_FFN_DOWN] = "ffn_down",
    [CPU_SITE_FFN_RES] = "ffn_res",
    [CPU_SITE_OUTPUT_NORM] = "output_norm",
    [CPU_SITE_LOGITS] = "logits",
};

static const char *tensor_name(cpu_site site) {
    switch (site) {
    case CPU_SITE_QK_NORM_Q:
    case CPU_SITE_ROPE_Q: return "q";
    case CPU_SITE_QK_NORM_K:
    case CPU_SITE_ROPE_K: return "k";
    default: return site_names[site];
    }
}

/* The logical length of a sharded site's tensor. */
static uint32_t site_total(const memra_model *m, cpu_site site) {
    switch (site) {
    case CPU_SITE_Q:
    case CPU_SITE_QK_NORM_Q:
    case CPU_SITE_ROPE_Q: return m->n_head * m->head_dim;
    case CPU_SITE_K:
    case CPU_SITE_QK_NORM_K:
    case CPU_SITE_ROPE_K: return m->n_head_kv * m->head_dim;
    case CPU_SITE_V: return m->n_head_kv * m->head_dim_v;
    case CPU_SITE_ATTENTION: return m->n_head * m->head_dim_v;
    case CPU_SITE_FFN_GATE:
    case CPU_SITE_FFN_UP:
    case CPU_SITE_FFN_ACT: return m->n_ff;
    default: return m->n_embd;
    }
}

static void hand_over(memra_backend *b, memra_op_site *info, const float *data) {
    cpu_taps *t = b->taps;
    if (t->st != MEMRA_OK)
        return;
    memra_error e = {0};
    memra_status st = t->fn(t->user, info, data, &e);
    if (st != MEMRA_OK) {
        t->st = st;
        t->err = e;
    }
}

static void site_info(memra_backend *b, const cpu_stage *sg, cpu_site site, int32_t layer, uint32_t n,
                      memra_op_site *info) {
    *info = (memra_op_site){.struct_size = sizeof *info,
                            .layer = layer,
                            .site = site_names[site],
                            .tensor = tensor_name(site),
                            .n = n,
                            .stage = (uint32_t)(sg - b->stages),
                            .n_ranks = sg->n_ranks};
}

void cpu_tap_rank(memra_backend *b, const cpu_stage *sg, uint32_t r, cpu_site site, uint32_t il, const float *x,
                  uint32_t n, uint32_t at, uint32_t shard_begin, uint32_t shard_end) {
    cpu_taps *t = b->taps;
    uint32_t total = site_total(b->m, site);
    if (!t->have[site]) {
        site_info(b, sg, site, (int32_t)il, total, &t->info[site]);
        t->have[site] = true;
    }
    t->info[site].begin[r] = shard_begin;
    t->info[site].end[r] = shard_end;
    bool whole = shard_begin == 0 && shard_end == total;
    if ((!whole || r == 0) && at <= total && n <= total - at) /* a tensor every rank holds: rank 0's */
        memcpy(t->buf[site] + at, x, (size_t)n * sizeof(float));
}

void cpu_tap_flush(memra_backend *b) {
    cpu_taps *t = b->taps;
    for (int s = 0; s < CPU_SITE_COUNT; s++)
        if (t->have[s]) {
            hand_over(b, &t->info[s], t->buf[s]);
            t->have[s] = false;
        }
}

void cpu_tap_whole(memra_backend *b, const cpu_stage *sg, cpu_site site, int32_t layer, const float *x, uint32_t n,
                   bool one_rank) {
    memra_op_site info;
    site_info(b, sg, site, layer, n, &info);
    for (uint32_t r = 0; r < sg->n_ranks; r++) {
        info.begin[r] = 0;
        info.end[r] = one_rank && r > 0 ? 0 : n;
    }
    hand_over(b, &info, x);
}

static void taps_free(cpu_taps *t) {
    for (int s = 0; t && s < CPU_SITE_COUNT; s++)
        free(t->buf[s]);
    free(t);
}

/* memra.ops step_tapped: the ordinary step (cpu_step_begin, cpu_step_end) with b->taps set. */
memra_status cpu_step_tapped(memra_backend *b, memra_state *s, const memra_step_args *args, memra_op_tap_fn fn,
                             void *user, memra_error *err) {
    if (!fn)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: a tapped step needs a tap");
    if (s->ring_count)
        return memra_fail(err, MEMRA_E_INVALID, "cpu: a tapped step with %u steps in flight", s->ring_count);
    cpu_taps *t = calloc(1, sizeof *t);
    bool ok = t != NULL;
    for (int i = 0; ok && i < CPU_SITE_COUNT; i++)
        ok = (t->buf[i] = calloc(site_total(b->m, (cpu_site)i), sizeof(float))) != NULL;
    if (!ok) {
        taps_free(t);
        return memra_fail(err, MEMRA_E_NOMEM, "cpu: out of memory for the taps of a step");
    }
    t->fn = fn;
    t->user = user;
    b->taps = t;
    memra_status st = cpu_step_begin(b, s, args, err);
    b->taps = NULL;
    if (st == MEMRA_OK)
        st = cpu_step_end(b, s, NULL, NULL, err);
    if (st == MEMRA_OK && t->st != MEMRA_OK) {
        if (err)
            *err = t->err;
        st = t->st;
    }
    taps_free(t);
    return st;
}
