/* placement_default.c: the `default` placement plugin: model + arm options + device count ->
 * plan. One stage; N stages split evenly; explicit cuts; a device per stage; tensor-parallel
 * ranks per stage (the plan only: which heads and ffn rows each rank holds).
 *
 * Keys: stages=N, splits=c1,...,cN-1 (the layer where each later stage begins), devices=d0,...
 * (one per stage, or one per rank of every stage when tp > 1: stage-major), tp=R. */
#include <stdio.h>
#include <string.h>

#include "memra/options.h"
#include "memra/plugin.h"

static const memra_option_spec placement_options[] = {
    {.key = "stages",
     .default_value = "1",
     .help = "pipeline stages: contiguous layer ranges, split evenly unless splits= is given"},
    {.key = "splits",
     .default_value = "",
     .help = "explicit cuts c1,...,cN-1: the layer index where each later stage begins"},
    {.key = "devices",
     .default_value = "0",
     .help = "device of each stage (or of each rank, stage-major, when tp > 1); default: stages on 0, rank r on device "
             "r (wrapping)"},
    {.key = "tp",
     .default_value = "1",
     .help = "tensor-parallel ranks per stage (n_head, n_head_kv and n_ff must be divisible)"},
    {.key = "ep",
     .default_value = "1",
     .help = "expert-parallel ranks per stage (mixture-of-experts models; expert_count divisible; tp=1 or tp=ep): "
             "rank r holds the r-th share of the experts; with tp=1 rank 0 alone runs attention and the rest"},
};

/* Layer cuts: cuts[0] = 0 < cuts[1] < ... < cuts[n_stages] = n_layer. */
static memra_status plan_cuts(const memra_model *m, const memra_options *opts, uint32_t *n_stages,
                              uint32_t cuts[MEMRA_MAX_STAGES + 1], memra_error *err) {
    uint32_t n_layer = m->n_layer;
    uint32_t stages = 0;
    const char *stages_text = memra_options_get(opts, "stages");
    memra_status st = memra_options_u32(opts, "stages", 1, 1, MEMRA_MAX_STAGES, &stages, err);
    if (st != MEMRA_OK)
        return st;
    uint32_t splits[MEMRA_MAX_STAGES];
    uint32_t n_splits = 0;
    st = memra_options_u32_list(opts, "splits", splits, MEMRA_MAX_STAGES - 1, &n_splits, err);
    if (st != MEMRA_OK)
        return st;
    if (n_splits > 0) {
        if (stages_text && stages != n_splits + 1)
            return memra_fail(err, MEMRA_E_INVALID, "stages=%u and splits=%s disagree: %u cuts make %u stages", stages,
                              memra_options_get(opts, "splits"), n_splits, n_splits + 1);
        stages = n_splits + 1;
        for (uint32_t i = 0; i < n_splits; i++) {
            if (splits[i] == 0 || splits[i] >= n_layer)
                return memra_fail(err, MEMRA_E_INVALID,
                                  "splits=%s: cut %u is out of range (cuts lie strictly between 0 and "
                                  "n_layer %u)",
                                  memra_options_get(opts, "splits"), splits[i], n_layer);
            if (i > 0 && splits[i] <= splits[i - 1])
                return memra_fail(err, MEMRA_E_INVALID, "splits=%s: cuts must be strictly increasing (%u follows %u)",
                                  memra_options_get(opts, "splits"), splits[i], splits[i - 1]);
        }
    }
    if (stages > n_layer)
        return memra_fail(err, MEMRA_E_INVALID, "stages=%u: more stages than the model's %u layers", stages, n_layer);
    cuts[0] = 0;
    for (uint32_t s = 1; s < stages; s++) /* even split: the first n_layer % stages stages get one more */
        cuts[s] = n_splits ? splits[s - 1] : (uint32_t)(((uint64_t)n_layer * s) / stages);
    cuts[stages] = n_layer;
    *n_stages = stages;
    return MEMRA_OK;
}

static memra_status check_divisible(const char *what, uint32_t value, uint32_t tp, memra_error *err) {
    if (value % tp != 0)
        return memra_fail(err, MEMRA_E_INVALID, "tp=%u: %s %u is not divisible by %u ranks", tp, what, value, tp);
    return MEMRA_OK;
}

static memra_status default_plan(const memra_model *m, const memra_options *opts, uint32_t n_devices, memra_plan *out,
                                 memra_error *err) {
    if (!m || !opts || !out)
        return memra_fail(err, MEMRA_E_INVALID, "placement default: NULL argument");
    if (m->n_layer == 0)
        return memra_fail(err, MEMRA_E_INVALID, "placement default: the model has no layers");
    uint32_t cuts[MEMRA_MAX_STAGES + 1];
    uint32_t n_stages = 0;
    memra_status st = plan_cuts(m, opts, &n_stages, cuts, err);
    if (st != MEMRA_OK)
        return st;

    uint32_t tp = 1;
    st = memra_options_u32(opts, "tp", 1, 1, MEMRA_MAX_RANKS, &tp, err);
    if (st != MEMRA_OK)
        return st;
    if ((st = check_divisible("n_head", m->n_head, tp, err)) != MEMRA_OK ||
        (st = check_divisible("n_head_kv", m->n_head_kv, tp, err)) != MEMRA_OK ||
        (st = check_divisible("n_ff", m->n_ff, tp, err)) != MEMRA_OK)
        return st;

    /* ep: the ranks share the experts (the backend cuts them by the same key); with tp=1 rank 0
     * holds every head and ffn row and the other ranks none (they add zeros to its sums: exact). */
    uint32_t ep = 1;
    if ((st = memra_options_u32(opts, "ep", 1, 1, MEMRA_MAX_RANKS, &ep, err)) != MEMRA_OK)
        return st;
    if (ep > 1 && m->n_expert == 0)
        return memra_fail(err, MEMRA_E_INVALID, "ep=%u: the model (%s) has no experts", ep,
                          m->arch_name ? m->arch_name : "?");
    if (ep > 1 && m->n_expert % ep != 0)
        return memra_fail(err, MEMRA_E_INVALID, "ep=%u: expert_count %u is not divisible by %u ranks", ep, m->n_expert,
                          ep);
    if (ep > 1 && tp > 1 && tp != ep)
        return memra_fail(err, MEMRA_E_INVALID, "ep=%u with tp=%u: expected tp=1 or tp=ep (the same ranks)", ep, tp);
    uint32_t n_ranks = ep > tp ? ep : tp;

    /* devices: absent = all 0; one per stage; or one per rank (stage-major) when tp > 1. */
    uint32_t n_slots = n_stages * n_ranks;
    uint32_t devices[MEMRA_MAX_STAGES * MEMRA_MAX_RANKS];
    uint32_t n_dev_given = 0;
    st = memra_options_u32_list(opts, "devices", devices, MEMRA_MAX_STAGES * MEMRA_MAX_RANKS, &n_dev_given, err);
    if (st != MEMRA_OK)
        return st;
    const char *dev_text = memra_options_get(opts, "devices");
    if (n_dev_given != 0 && n_dev_given != n_stages && n_dev_given != n_slots)
        return memra_fail(err, MEMRA_E_INVALID, "devices=%s: %u devices given, expected %u (one per stage)%s", dev_text,
                          n_dev_given, n_stages, n_ranks > 1 ? " or one per rank" : "");
    for (uint32_t i = 0; i < n_dev_given; i++)
        if (devices[i] >= n_devices)
            return memra_fail(err, MEMRA_E_INVALID, "devices=%s: device %u does not exist (the backend offers %u)",
                              dev_text, devices[i], n_devices);
    if (n_dev_given == 0 && n_devices == 0)
        return memra_fail(err, MEMRA_E_INVALID, "placement default: the backend offers no device");

    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->n_stages = n_stages;
    for (uint32_t s = 0; s < n_stages; s++) {
        memra_stage_plan *sp = &out->stages[s];
        sp->layer_begin = cuts[s];
        sp->layer_end = cuts[s + 1];
        sp->n_ranks = n_ranks;
        for (uint32_t r = 0; r < n_ranks; r++) {
            memra_rank_plan *rp = &sp->ranks[r];
            /* absent: every stage on device 0, its ranks on devices 0, 1, ... (wrapping) */
            uint32_t dev = n_devices ? r % n_devices : 0;
            if (n_dev_given == n_slots)
                dev = devices[s * n_ranks + r];
            else if (n_dev_given == n_stages)
                dev = devices[s];
            rp->device = (int32_t)dev;
            rp->head_begin = m->n_head / tp * r;
            rp->head_end = m->n_head / tp * (r + 1);
            rp->kv_head_begin = m->n_head_kv / tp * r;
            rp->kv_head_end = m->n_head_kv / tp * (r + 1);
            rp->ff_begin = m->n_ff / tp * r;
            rp->ff_end = m->n_ff / tp * (r + 1);
            if (tp == 1 && r > 0) { /* ep alone: nothing but its experts */
                rp->head_begin = rp->head_end = m->n_head;
                rp->kv_head_begin = rp->kv_head_end = m->n_head_kv;
                rp->ff_begin = rp->ff_end = m->n_ff;
            } else if (tp == 1) {
                rp->head_end = m->n_head;
                rp->kv_head_end = m->n_head_kv;
                rp->ff_end = m->n_ff;
            }
        }
        sp->device = sp->ranks[0].device;
    }
    return MEMRA_OK;
}

static const memra_placement_vtable placement_vtable = {
    .struct_size = sizeof(memra_placement_vtable),
    .options = placement_options,
    .n_options = sizeof placement_options / sizeof placement_options[0],
    .plan = default_plan,
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "default",
    .kind = MEMRA_PLUGIN_PLACEMENT,
    .version = "0.1.0",
    .description = "one stage, even or explicit stage cuts, a device per stage, tensor-parallel ranks",
    .placement = &placement_vtable,
};
