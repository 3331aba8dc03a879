/* test_cpu_placement.c: the `default` placement plugin: one stage, even splits, explicit cuts,
 * devices, tensor-parallel ranks, and a clear error naming the option for each impossible plan. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "cpu_test_util.h"
#include "memra/options.h"

/* Only the hyperparameters a placement reads. */
static memra_model fake_model(uint32_t n_layer) {
    memra_model m;
    memset(&m, 0, sizeof m);
    m.n_layer = n_layer;
    m.n_head = 32;
    m.n_head_kv = 8;
    m.n_ff = 1024;
    m.n_embd = 512;
    return m;
}

static memra_status plan(const memra_model *m, const char *opts_text, uint32_t n_devices, memra_plan *out,
                         memra_error *err) {
    const memra_plugin *p = NULL;
    cr_assert_eq(memra_registry_load(ct_registry(), "default", MEMRA_PLUGIN_PLACEMENT, &p, err), MEMRA_OK, "%s",
                 err->msg);
    char text[256], backend[MEMRA_BACKEND_NAME_MAX];
    snprintf(text, sizeof text, "cpu%s%s", *opts_text ? ":" : "", opts_text);
    memra_options opts;
    cr_assert_eq(memra_arm_parse(text, backend, &opts, err), MEMRA_OK, "%s", err->msg);
    return p->placement->plan(m, &opts, n_devices, out, err);
}

static void expect_cuts(const char *opts, uint32_t n_layer, const uint32_t *cuts, uint32_t n_stages) {
    memra_model m = fake_model(n_layer);
    memra_plan p;
    memra_error err = {0};
    cr_assert_eq(plan(&m, opts, 8, &p, &err), MEMRA_OK, "%s: %s", opts, err.msg);
    cr_assert_eq(p.struct_size, sizeof p);
    cr_assert_eq(p.n_stages, n_stages, "%s: %u stages", opts, p.n_stages);
    for (uint32_t s = 0; s < n_stages; s++) {
        cr_assert_eq(p.stages[s].layer_begin, cuts[s], "%s: stage %u begins at %u", opts, s, p.stages[s].layer_begin);
        cr_assert_eq(p.stages[s].layer_end, cuts[s + 1], "%s: stage %u ends at %u", opts, s, p.stages[s].layer_end);
        cr_assert_eq(p.stages[s].n_ranks, 1);
    }
}

static void expect_error(const char *opts, uint32_t n_layer, uint32_t n_devices, const char *needle) {
    memra_model m = fake_model(n_layer);
    memra_plan p;
    memra_error err = {0};
    cr_assert_eq(plan(&m, opts, n_devices, &p, &err), MEMRA_E_INVALID, "%s should be refused", opts);
    cr_assert(strstr(err.msg, needle) != NULL, "%s: message '%s' does not say '%s'", opts, err.msg, needle);
}

Test(cpu_placement, stages_and_cuts) {
    expect_cuts("", 8, (uint32_t[]){0, 8}, 1);
    expect_cuts("stages=2", 8, (uint32_t[]){0, 4, 8}, 2);
    expect_cuts("stages=3", 8, (uint32_t[]){0, 2, 5, 8}, 3);
    expect_cuts("stages=8", 8, (uint32_t[]){0, 1, 2, 3, 4, 5, 6, 7, 8}, 8);
    expect_cuts("splits=1,3", 4, (uint32_t[]){0, 1, 3, 4}, 3);
    expect_cuts("stages=3,splits=1,3", 4, (uint32_t[]){0, 1, 3, 4}, 3);
}

Test(cpu_placement, devices_and_ranks) {
    memra_model m = fake_model(4);
    memra_plan p;
    memra_error err = {0};
    cr_assert_eq(plan(&m, "stages=2,devices=3,1", 4, &p, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(p.stages[0].device, 3);
    cr_assert_eq(p.stages[1].device, 1);
    cr_assert_eq(plan(&m, "stages=2,tp=4", 8, &p, &err), MEMRA_OK, "%s", err.msg);
    for (uint32_t s = 0; s < 2; s++) {
        cr_assert_eq(p.stages[s].n_ranks, 4);
        for (uint32_t r = 0; r < 4; r++) {
            const memra_rank_plan *rp = &p.stages[s].ranks[r];
            cr_assert_eq(rp->head_begin, 8 * r);
            cr_assert_eq(rp->head_end, 8 * r + 8);
            cr_assert_eq(rp->kv_head_begin, 2 * r);
            cr_assert_eq(rp->kv_head_end, 2 * r + 2);
            cr_assert_eq(rp->ff_begin, 256 * r);
            cr_assert_eq(rp->ff_end, 256 * r + 256);
            cr_assert_eq(rp->device, (int32_t)r); /* absent devices=: rank r on device r */
        }
    }
    /* With fewer devices than ranks the default wraps. */
    cr_assert_eq(plan(&m, "tp=4", 3, &p, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(p.stages[0].ranks[3].device, 0);
    cr_assert_eq(p.stages[0].ranks[2].device, 2);
    /* One device per rank, stage-major. */
    cr_assert_eq(plan(&m, "stages=2,tp=2,devices=0,1,2,3", 4, &p, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(p.stages[0].ranks[1].device, 1);
    cr_assert_eq(p.stages[1].ranks[0].device, 2);
    cr_assert_eq(p.stages[1].device, 2);
}

Test(cpu_placement, impossible_plans_are_clear_errors) {
    expect_error("stages=5", 4, 8, "stages=5: more stages than the model's 4 layers");
    expect_error("stages=0", 4, 8, "stages=0");
    expect_error("splits=3,1", 4, 8, "splits=3,1: cuts must be strictly increasing");
    expect_error("splits=1,1", 4, 8, "strictly increasing");
    expect_error("splits=0,2", 4, 8, "splits=0,2: cut 0 is out of range");
    expect_error("splits=4", 4, 8, "cut 4 is out of range");
    expect_error("splits=x", 4, 8, "splits=x");
    expect_error("stages=2,splits=1,2", 4, 8, "stages=2 and splits=1,2 disagree");
    expect_error("tp=3", 4, 8, "tp=3: n_head 32 is not divisible by 3 ranks");
    expect_error("tp=16", 4, 8, "tp=16");
    expect_error("stages=2,devices=0", 4, 8, "devices=0: 1 devices given, expected 2");
    expect_error("devices=9", 4, 8, "devices=9: device 9 does not exist (the backend offers 8)");
}

Test(cpu_placement, n_head_kv_and_n_ff_divisibility) {
    memra_model m = fake_model(4);
    memra_plan p;
    memra_error err = {0};
    m.n_head_kv = 2;
    cr_assert_eq(plan(&m, "tp=4", 8, &p, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "tp=4: n_head_kv 2 is not divisible by 4 ranks"), "%s", err.msg);
    m.n_head_kv = 8;
    m.n_ff = 1001;
    cr_assert_eq(plan(&m, "tp=2", 8, &p, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "tp=2: n_ff 1001 is not divisible by 2 ranks"), "%s", err.msg);
}

Test(cpu_placement, publishes_its_options) {
    const memra_plugin *p = NULL;
    memra_error err = {0};
    cr_assert_eq(memra_registry_load(ct_registry(), "default", MEMRA_PLUGIN_PLACEMENT, &p, &err), MEMRA_OK);
    const char *want[] = {"stages", "splits", "devices", "tp", "ep"};
    cr_assert_eq(p->placement->n_options, 5);
    for (int i = 0; i < 5; i++)
        cr_assert_str_eq(p->placement->options[i].key, want[i]);
}
