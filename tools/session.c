/* session.c: what memra run and memra bench share: load a model (memra/runtime.h), open an arm on
 * it and take serial steps (memra/arm.h). */
#include <string.h>
#include <time.h>

#include "cli.h"

static bool registry_has(memra_registry *r, const char *name, memra_plugin_kind kind) {
    for (uint32_t i = 0; i < memra_registry_count(r); i++) {
        const memra_registry_entry *e = memra_registry_entry_at(r, i);
        if (e->kind == (uint32_t)kind && e->name && strcmp(e->name, name) == 0)
            return true;
    }
    return false;
}

/* Whether the arm names a backend, placement or collective plugin of which no manifest was found. */
bool cli_arm_names_unknown_plugin(memra_registry *r, const char *arm_text) {
    char backend[MEMRA_BACKEND_NAME_MAX];
    memra_options opts;
    if (memra_arm_parse(arm_text, backend, &opts, NULL) != MEMRA_OK)
        return false;
    if (!registry_has(r, backend, MEMRA_PLUGIN_BACKEND))
        return true;
    const char *placement = memra_options_get(&opts, MEMRA_ARM_KEY_PLACEMENT);
    if (placement && !registry_has(r, placement, MEMRA_PLUGIN_PLACEMENT))
        return true;
    const char *collective = memra_options_get(&opts, "collective");
    char coll[MEMRA_OPT_VALUE_MAX]; /* NAME[:MODE | :KEY=VALUE]: the plugin is NAME */
    return collective && (!memra_collective_value_name(collective, coll, sizeof coll) ||
                          !registry_has(r, coll, MEMRA_PLUGIN_COLLECTIVE));
}

static double session_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

int cli_session_open(const char *cmd, const cli_model_sel *sel, const char *const *arms, uint32_t n_arms,
                     cli_session *s) {
    memset(s, 0, sizeof *s);
    memra_error err = {0};
    int rc;
    /* A FIFO or a device given as the model is refused before anything blocks on it. */
    if (sel->path && memra_check_regular_input(sel->path, "--model", &err) != MEMRA_OK)
        goto fail;
    if (memra_registry_open(&s->reg, &err) != MEMRA_OK)
        goto fail;
    /* What each arm's open would refuse without the model (its keys; a backend without a device:
     * no GPU, no driver) is said now, not after the weights were read or built */
    for (uint32_t i = 0; i < n_arms; i++)
        if (memra_arm_precheck(s->reg, arms[i], NULL, &err) != MEMRA_OK)
            goto fail;
    /* A file is opened streamed when every arm's backend reads its matrices from the file itself
     * (a GPU backend uploading in chunks); otherwise it is read whole into memory. */
    bool stream = sel->path != NULL && n_arms > 0;
    for (uint32_t i = 0; i < n_arms && stream; i++)
        if (memra_arm_streams_weights(s->reg, arms[i], &stream, &err) != MEMRA_OK)
            goto fail;
    if (memra_model_load_mode(sel->path, sel->path ? NULL : sel->preset, sel->type, sel->seed,
                              stream ? MEMRA_LOAD_STREAMED : MEMRA_LOAD_WHOLE, &s->lm, &err) != MEMRA_OK)
        goto fail;
    if ((rc = cli_session_rearm(cmd, s, arms[0])) != CLI_EXIT_OK) {
        cli_session_close(s);
        return rc;
    }
    return CLI_EXIT_OK;
fail:
    rc = cli_fail(cmd, &err);
    cli_session_close(s);
    return rc;
}

int cli_session_rearm(const char *cmd, cli_session *s, const char *arm_text) {
    memra_error err = {0};
    memra_arm_close(s->arm);
    s->arm = NULL;
    const double t0 = session_now();
    if (memra_arm_open(s->reg, s->lm->model, arm_text, NULL, NULL, 0, &s->arm, &err) != MEMRA_OK) {
        s->arm = NULL;
        int rc = cli_fail(cmd, &err);
        /* A plugin the arm names that no manifest declares is a usage error (a typo in --arm,
         * placement= or collective=); one that exists but fails to load stays a runtime error. */
        if (err.status == MEMRA_E_PLUGIN && cli_arm_names_unknown_plugin(s->reg, arm_text))
            rc = CLI_EXIT_USAGE;
        return rc;
    }
    s->arm_s = session_now() - t0;
    return CLI_EXIT_OK;
}

const char *cli_session_load_text(const cli_session *s, char *buf, size_t n) {
    char b1[32], b2[32];
    const memra_loaded_model *lm = s->lm;
    snprintf(buf, n, "%.2f s (model opened in %.2f s, %s, %s of %s in memory; arm opened in %.2f s)",
             lm->open_s + s->arm_s, lm->open_s, lm->streamed ? "streamed" : "read whole",
             cli_bytes(memra_gguf_resident_bytes(lm->gguf), b1, sizeof b1),
             cli_bytes(memra_gguf_file_size(lm->gguf), b2, sizeof b2), s->arm_s);
    return buf;
}

void cli_session_close(cli_session *s) {
    memra_arm_close(s->arm);
    if (s->reg)
        memra_registry_close(s->reg);
    memra_model_unload(s->lm);
    memset(s, 0, sizeof *s);
}

memra_status cli_step(memra_arm_state *st, int64_t token, const memra_sample_cfg *sample, float *logits,
                      memra_step_result *res, memra_error *err) {
    memra_step_args args = {
        .struct_size = sizeof args, .token = token, .sample = sample, .want_logits = logits != NULL};
    memra_status rc = memra_arm_step_begin(st, &args, err);
    if (rc != MEMRA_OK)
        return rc;
    memset(res, 0, sizeof *res);
    res->struct_size = sizeof *res;
    return memra_arm_step_end(st, logits, res, err);
}

uint64_t cli_step_bytes(const memra_model *m, uint64_t pos, uint32_t kv_eighths) {
    uint64_t kv_per_pos =
        (uint64_t)kv_eighths * m->n_layer * m->n_head_kv * ((uint64_t)m->head_dim + m->head_dim_v) / 8;
    uint64_t weights = m->weight_bytes;
    if (!m->tied_output && m->tok_embd.rows > 0) /* untied: the embedding gives one row a token */
        weights -= m->tok_embd.n_bytes - m->tok_embd.n_bytes / m->tok_embd.rows;
    /* mixture of experts: of each layer's expert stacks only the expert_used_count chosen experts */
    for (uint32_t il = 0; m->n_expert > 0 && il < m->n_layer; il++) {
        const memra_layer_moe *L = &m->moe[il];
        uint64_t stacks = L->gate_exps.n_bytes + L->up_exps.n_bytes + L->down_exps.n_bytes;
        weights -= stacks - stacks / m->n_expert * m->n_expert_used;
    }
    return weights + kv_per_pos * (pos + 1);
}
