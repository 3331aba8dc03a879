/* test_oneshot.c: the `oneshot` collective's host side, where there is no GPU (CI) as where there
 * is: it loads through the registry and lists its keys; every argument check answers before any
 * device is touched (unknown or malformed keys, rank counts, a missing device list, a NULL
 * communicator, reserved refusal words); and create without a CUDA device is a clear
 * MEMRA_E_DEVICE, not a crash. Its device side is checked by tests/cuda/check_collective.c. */
#include <criterion/criterion.h>
#include <string.h>

#include "memra/options.h"
#include "memra/plugin.h"
#include "memra/registry.h"

static memra_registry *g_reg;
static const memra_collective_vtable *g_vt;
static const memra_host *g_host;

static void setup(void) {
    memra_error err = {0};
    const char *dirs[1] = {COLLTEST_BUILD_PLUGIN_DIR};
    cr_assert_eq(memra_registry_open_dirs(dirs, 1, &g_reg, &err), MEMRA_OK, "%s", err.msg);
    const memra_plugin *p = NULL;
    cr_assert_eq(memra_registry_load(g_reg, "oneshot", MEMRA_PLUGIN_COLLECTIVE, &p, &err), MEMRA_OK, "%s", err.msg);
    g_vt = p->collective;
    g_host = memra_registry_host(g_reg);
}

static void teardown(void) { memra_registry_close(g_reg); }

TestSuite(collective_oneshot, .init = setup, .fini = teardown, .timeout = 60);

Test(collective_oneshot, keys_and_appended_members) {
    const char *want[] = {"timeout_ms", "max_count", "blocks", "chunk", "sync", "pdl"};
    cr_assert_eq(g_vt->n_options, 6);
    for (int i = 0; i < 6; i++)
        cr_assert_str_eq(g_vt->options[i].key, want[i]);
    cr_assert(MEMRA_HAS_MEMBER(g_vt, memra_collective_vtable, clear_refusals));
    cr_assert_not_null(g_vt->clear_refusals);
    cr_assert_not_null(g_vt->arm_refusal);
    cr_assert_not_null(g_vt->abort);
    cr_assert_null(g_vt->create_rank); /* one process only */
}

/* create's refusals, each checked for its status and the words of its message (a check that
 * answered late, after a device call, would read "no CUDA device" here instead). */
Test(collective_oneshot, create_refuses_bad_arguments_before_any_device) {
    const int32_t devs[2] = {0, 1};
    static const struct {
        const char *key, *value, *msg;
    } bad[] = {
        {"order", "rank", "unknown option 'order'"},
        {"timeout_ms", "0", "timeout_ms=0"},
        {"timeout_ms", "x", "timeout_ms=x"},
        {"blocks", "129", "blocks=129"},
        {"max_count", "0", "max_count=0"},
        {"chunk", "8", "chunk=8"},
        {"sync", "lock", "sync=lock: expected fence or acqrel"},
        {"pdl", "2", "pdl=2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memra_options o = {0};
        memra_error err = {0};
        cr_assert_eq(memra_options_set(&o, bad[i].key, bad[i].value, &err), MEMRA_OK);
        memra_collective *c = (memra_collective *)1;
        cr_assert_eq(g_vt->create(g_host, 2, devs, &o, &c, &err), MEMRA_E_INVALID, "%s=%s", bad[i].key,
                     bad[i].value);
        cr_assert(strstr(err.msg, bad[i].msg), "%s=%s: '%s'", bad[i].key, bad[i].value, err.msg);
        cr_assert_null(c);
    }
    memra_error err = {0};
    memra_collective *c = NULL;
    cr_assert_eq(g_vt->create(g_host, 0, devs, NULL, &c, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "0 ranks"), "%s", err.msg);
    cr_assert_eq(g_vt->create(g_host, 9, devs, NULL, &c, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "9 ranks"), "%s", err.msg);
    cr_assert_eq(g_vt->create(g_host, 2, NULL, NULL, &c, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "one device per rank"), "%s", err.msg);
}

Test(collective_oneshot, null_communicator_and_reserved_words) {
    memra_error err = {0};
    float x = 1.0f;
    int32_t st = 0, pos = 0;
    cr_assert_eq(g_vt->all_reduce_sum_f32(NULL, 0, &x, 1, (void *)1, 0, &pos, &st, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "communicator is NULL"), "%s", err.msg);
    cr_assert_eq(g_vt->arm_refusal(NULL, 0, 0, 0, 7, &err), MEMRA_E_INVALID);
    cr_assert_eq(g_vt->epochs(NULL, 0, NULL, 0, &err), MEMRA_E_INVALID);
    cr_assert_eq(g_vt->clear_refusals(NULL, &err), MEMRA_E_INVALID);
    g_vt->abort(NULL);   /* no crash */
    g_vt->destroy(NULL); /* no crash */
    cr_assert(MEMRA_COLLECTIVE_RESERVED(MEMRA_COLLECTIVE_TIMEOUT(7)));
    cr_assert(MEMRA_COLLECTIVE_RESERVED(MEMRA_COLLECTIVE_ABSENT));
    cr_assert(!MEMRA_COLLECTIVE_RESERVED(0x6d650000));
}

/* Where the machine has no CUDA device (CI), create says so; where it has one, it creates. */
Test(collective_oneshot, create_without_a_device_is_a_clear_error) {
    const int32_t devs[2] = {0, 0};
    memra_error err = {0};
    memra_collective *c = NULL;
    memra_status st = g_vt->create(g_host, 2, devs, NULL, &c, &err);
    if (st == MEMRA_OK) {
        cr_log_info("a CUDA device is present: create succeeded (the device side is check_collective's)");
        g_vt->destroy(c);
        return;
    }
    cr_assert_eq(st, MEMRA_E_DEVICE, "%s", err.msg);
    cr_assert(strstr(err.msg, "no CUDA device"), "%s", err.msg);
    cr_assert_null(c);
}
