/* test_registry_op.c: op plugins (kind op, issue 30) through the registry: one loads with its keys
 * and says what it serves; the refusals of an op vtable (too small, gemv types without a gemv,
 * no create, a descriptor that ends before `op`); the op.KIND keys and their values parsed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "memra/op.h"
#include "memra/options.h"
#include "memra/registry.h"
#include "memra/tensor_type.h"
#include "registry_test.h"

Test(registry, loads_an_op_plugin_with_its_keys_and_what_it_serves) {
    char *dir = tmp_path("d", true);
    manifest(dir, "opgood", "op", "opgood");
    memra_registry *r = open_one(dir);
    const memra_registry_entry *e = memra_registry_entry_at(r, 0);
    cr_assert_eq(e->kind, MEMRA_PLUGIN_OP);
    const memra_plugin *p = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_load(r, "opgood", MEMRA_PLUGIN_OP, &p, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_str_eq(memra_plugin_kind_name(p->kind), "op");
    const memra_option_spec *specs = NULL;
    cr_assert_eq(memra_plugin_option_specs(p, &specs), 1);
    cr_assert_str_eq(specs[0].key, "block");
    cr_assert(memra_op_serves(p->op, "cpu", MEMRA_OP_RMSNORM, 0));
    cr_assert(memra_op_serves(p->op, "cpu", MEMRA_OP_GEMV, MEMRA_TYPE_F32));
    cr_assert(!memra_op_serves(p->op, "cpu", MEMRA_OP_GEMV, MEMRA_TYPE_F16));
    cr_assert(!memra_op_serves(p->op, "cuda", MEMRA_OP_RMSNORM, 0));
    cr_assert(!memra_op_serves(p->op, "cpu", MEMRA_OP_ROPE, 0));
    cr_assert(!memra_op_serves(p->op, "cpu", MEMRA_OP_TOPK, 0));
    char served[128];
    memra_op_served(p->op, served, sizeof served);
    cr_assert_str_eq(served, "cpu rmsnorm, cpu gemv.f32");
    /* the provenance covers it like any plugin */
    cr_assert_not_null(memra_registry_provenance(r, p));
    memra_registry_close(r);
}

Test(registry, refuses_op_vtable_too_small) {
    char *dir = tmp_path("d", true);
    manifest(dir, "opsmall", "op", "opsmall");
    char want[128];
    snprintf(want, sizeof want, "op vtable is 8 bytes, ABI 1 needs at least %zu",
             MEMRA_STRUCT_END(memra_op_vtable, cuda_gemv));
    expect_refusal(dir, "opsmall", MEMRA_PLUGIN_OP, MEMRA_E_PLUGIN, "struct too small", want, NULL);
}

Test(registry, refuses_gemv_types_without_a_gemv) {
    char *dir = tmp_path("d", true);
    manifest(dir, "optypes", "op", "optypes");
    expect_refusal(dir, "optypes", MEMRA_PLUGIN_OP, MEMRA_E_PLUGIN,
                   "a gemv entry point and its weight types must be set together", NULL);
}

Test(registry, refuses_op_vtable_without_create) {
    char *dir = tmp_path("d", true);
    manifest(dir, "opnocreate", "op", "opnocreate");
    expect_refusal(dir, "opnocreate", MEMRA_PLUGIN_OP, MEMRA_E_PLUGIN, "leaves 'create' NULL", NULL);
}

Test(registry, refuses_op_kind_with_a_descriptor_that_ends_before_op) {
    char *dir = tmp_path("d", true);
    manifest(dir, "opold", "op", "opold");
    expect_refusal(dir, "opold", MEMRA_PLUGIN_OP, MEMRA_E_PLUGIN, "has no op vtable", NULL);
}

Test(registry, op_keys_and_values_parse) {
    memra_op_kind k = 0;
    uint32_t t = 99;
    cr_assert(memra_op_key_parse("op.rmsnorm", &k, &t) && k == MEMRA_OP_RMSNORM && t == 0);
    cr_assert(memra_op_key_parse("op.gemv.q8_0", &k, &t) && k == MEMRA_OP_GEMV && t == MEMRA_TYPE_Q8_0);
    cr_assert(memra_op_key_parse("op.gemv.bf16", &k, &t) && t == MEMRA_TYPE_BF16);
    cr_assert(!memra_op_key_parse("op.gemv.Q8_0", NULL, NULL), "type names are lower case");
    cr_assert(!memra_op_key_parse("op.gemv", NULL, NULL));
    cr_assert(memra_op_key_parse("op.topk", &k, &t) && k == MEMRA_OP_TOPK);
    cr_assert(!memra_op_key_parse("op.softmax", NULL, NULL));
    cr_assert(!memra_op_key_parse("rmsnorm", NULL, NULL));
    char name[64];
    memra_options o = {0};
    memra_error err;
    cr_assert_eq(memra_op_value_parse("op.rmsnorm", "lab:site=q:layer=1,pos=2", name, sizeof name, &o, &err), MEMRA_OK,
                 "%s", err.msg);
    cr_assert_str_eq(name, "lab");
    cr_assert_eq(o.n, 3);
    cr_assert_str_eq(memra_options_get(&o, "layer"), "1");
    cr_assert_str_eq(memra_options_get(&o, "pos"), "2");
    const char *bad[] = {"", ":x=1", "lab:", "lab:word", "lab:=1", "lab:k=", "lab:k=1:k=2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memra_options b = {0};
        cr_assert_eq(memra_op_value_parse("op.rope", bad[i], name, sizeof name, &b, &err), MEMRA_E_INVALID, "'%s'",
                     bad[i]);
        cr_assert(strstr(err.msg, "op.rope="), "%s", err.msg);
    }
}

Test(registry, an_op_vtable_of_the_first_shape_loads_without_its_appended_members) {
    char *dir = tmp_path("d", true);
    manifest(dir, "opfirst", "op", "opfirst");
    memra_registry *r = open_one(dir);
    const memra_plugin *p = NULL;
    memra_error err;
    cr_assert_eq(memra_registry_load(r, "opfirst", MEMRA_PLUGIN_OP, &p, &err), MEMRA_OK, "%s", err.msg);
    cr_assert(memra_op_serves(p->op, "cpu", MEMRA_OP_RMSNORM, 0));
    /* cpu_topk lies past the struct_size it declared: not its own, never called */
    cr_assert(!memra_op_serves(p->op, "cpu", MEMRA_OP_TOPK, 0));
    memra_registry_close(r);
}
