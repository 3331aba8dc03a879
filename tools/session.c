/* session.c: what memra run and memra bench share: load a model (memra/runtime.h), open an arm on
 * it and take serial steps (memra/arm.h). */
#include <string.h>

#include "cli.h"

int cli_session_open(const char *cmd, const cli_model_sel *sel, const char *arm_text, cli_session *s) {
    memset(s, 0, sizeof *s);
    memra_error err = {0};
    int rc;
    if (memra_model_load(sel->path, sel->path ? NULL : sel->preset, sel->type, sel->seed, &s->lm, &err) != MEMRA_OK)
        goto fail;
    if (memra_registry_open(&s->reg, &err) != MEMRA_OK)
        goto fail;
    if (memra_arm_open(s->reg, s->lm->model, arm_text, NULL, NULL, 0, &s->arm, &err) != MEMRA_OK)
        goto fail;
    return CLI_EXIT_OK;
fail:
    rc = cli_fail(cmd, &err);
    cli_session_close(s);
    return rc;
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

uint64_t cli_step_bytes(const memra_model *m, uint64_t pos) {
    uint64_t kv_per_pos = 4ull * m->n_layer * m->n_head_kv * ((uint64_t)m->head_dim + m->head_dim_v);
    uint64_t weights = m->weight_bytes;
    if (!m->tied_output && m->tok_embd.rows > 0) /* untied: the embedding gives one row a token */
        weights -= m->tok_embd.n_bytes - m->tok_embd.n_bytes / m->tok_embd.rows;
    return weights + kv_per_pos * (pos + 1);
}
