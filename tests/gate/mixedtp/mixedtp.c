/* mixedtp.c: TEST-ONLY placement plugin "mixedtp" (never install it). Two stages, the layers
 * split in halves; stage `tp_stage` (0 or 1) has `tp` tensor-parallel ranks (rank r on device
 * r, wrapping over the devices the backend offers), the other stage one rank on device 0. The
 * default placement gives every stage the same rank count, so a plan that mixes a stage with
 * ranks and a plain one (which a backend must take: plugin.h allows it) needs this plugin to be
 * tested: a step refused on one stage must commit nothing on the other (issue 24, item 3). */
#include <string.h>

#include "memra/options.h"
#include "memra/plugin.h"

static const memra_option_spec mixed_options[] = {
    {.key = "tp", .default_value = "2", .help = "TEST: tensor-parallel ranks of the stage that has them"},
    {.key = "tp_stage", .default_value = "0", .help = "TEST: which of the two stages has the ranks (0 or 1)"},
};

static memra_status mixed_plan(const memra_model *m, const memra_options *opts, uint32_t n_devices, memra_plan *out,
                               memra_error *err) {
    uint32_t tp = 2, which = 0;
    memra_status st = memra_options_u32(opts, "tp", 2, 2, MEMRA_MAX_RANKS, &tp, err);
    if (st == MEMRA_OK)
        st = memra_options_u32(opts, "tp_stage", 0, 0, 1, &which, err);
    if (st != MEMRA_OK)
        return st;
    if (m->n_layer < 2)
        return memra_fail(err, MEMRA_E_INVALID, "placement mixedtp: the model has %u layer(s), 2 needed", m->n_layer);
    if (m->n_head % tp || m->n_head_kv % tp || m->n_ff % tp)
        return memra_fail(err, MEMRA_E_INVALID, "placement mixedtp: tp=%u does not divide the heads and ffn rows", tp);
    if (n_devices == 0)
        return memra_fail(err, MEMRA_E_INVALID, "placement mixedtp: the backend offers no device");
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->n_stages = 2;
    const uint32_t cut = m->n_layer / 2;
    for (uint32_t s = 0; s < 2; s++) {
        memra_stage_plan *sp = &out->stages[s];
        sp->layer_begin = s ? cut : 0;
        sp->layer_end = s ? m->n_layer : cut;
        sp->n_ranks = s == which ? tp : 1;
        for (uint32_t r = 0; r < sp->n_ranks; r++) {
            memra_rank_plan *rp = &sp->ranks[r];
            const uint32_t R = sp->n_ranks;
            rp->device = (int32_t)(r % n_devices);
            rp->head_begin = m->n_head / R * r;
            rp->head_end = m->n_head / R * (r + 1);
            rp->kv_head_begin = m->n_head_kv / R * r;
            rp->kv_head_end = m->n_head_kv / R * (r + 1);
            rp->ff_begin = m->n_ff / R * r;
            rp->ff_end = m->n_ff / R * (r + 1);
        }
        sp->device = sp->ranks[0].device;
    }
    return MEMRA_OK;
}

static const memra_placement_vtable mixed_vtable = {
    .struct_size = sizeof(memra_placement_vtable),
    .options = mixed_options,
    .n_options = sizeof mixed_options / sizeof mixed_options[0],
    .plan = mixed_plan,
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "mixedtp",
    .kind = MEMRA_PLUGIN_PLACEMENT,
    .version = "0.1.0",
    .description = "TEST ONLY: two stages, one with tensor-parallel ranks",
    .placement = &mixed_vtable,
};
