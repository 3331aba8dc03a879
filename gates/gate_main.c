/* gate_main.c: memra-gate, the heart of memra. Loads a model once, opens two arms on it, runs
 * the reference on A and the replay on B, compares every bit of every step, times both arms in
 * an interleaved schedule, and says pass or fail through JSON-line records, a summary table and
 * the exit code (0 pass, 1 mismatch or ineligible comparison, 2 usage, 3 runtime error). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate.h"

/* The phases after the arms are open: correctness, then (only on a clean correctness phase)
 * the profile windows, the carry check or the timing rows. *exit_code on failure. */
static memra_status run_phases(gate_ctx *ctx, int *exit_code, memra_error *err) {
    const gate_config *cfg = ctx->cfg;
    gate_outcome *o = &ctx->out;
    const uint32_t steps = cfg->prime + cfg->gen, n_vocab = ctx->lm->model->n_vocab;
    memra_status st;
    *exit_code = GATE_EXIT_RUNTIME;
    if ((st = gate_trace_alloc(&ctx->ref, steps, n_vocab, true, err)) != MEMRA_OK ||
        (st = gate_trace_alloc(&ctx->rep, steps, n_vocab, false, err)) != MEMRA_OK)
        return st;
    gate_rec_protocol(ctx);
    if ((st = gate_reference(ctx, err)) != MEMRA_OK || (st = gate_replay(ctx, err)) != MEMRA_OK)
        return st;
    /* Time only what was verified: no timing after a mismatch, and in nmse mode only when both
     * arms produce the same stream (otherwise the rows would time different work). */
    if (o->bad_steps)
        return MEMRA_OK;
    if (cfg->profile && (st = gate_profile(ctx, err)) != MEMRA_OK)
        return st;
    /* Without timing rows no pass would take its tokens from the device: the carry check does. */
    if (cfg->rows == 0)
        return gate_carry_check(ctx, err);
    if (cfg->nmse && o->token_agree != o->token_total) {
        snprintf(o->ineligible, sizeof o->ineligible,
                 "the arms' generated tokens agree at %u of %u steps: their rows would time different work",
                 o->token_agree, o->token_total);
        return MEMRA_OK;
    }
    return gate_timing(ctx, err);
}

/* What main holds and frees. */
typedef struct gate_session {
    memra_registry *reg;
    memra_loaded_model *lm;
    uint32_t *prompt;
} gate_session;

/* Where the records go (stdout or --jsonl), the progress display, and what must fail before a
 * model is loaded: a dump directory that cannot be written. */
static memra_status open_outputs(gate_ctx *ctx, int *exit_code, memra_error *err) {
    const gate_config *cfg = ctx->cfg;
    if (cfg->jsonl_path && !(ctx->json.f = fopen(cfg->jsonl_path, "w"))) {
        *exit_code = GATE_EXIT_RUNTIME;
        return memra_fail(err, MEMRA_E_IO, "--jsonl %s: cannot open for writing: %s", cfg->jsonl_path, strerror(errno));
    }
    ctx->progress = !cfg->quiet && isatty(STDERR_FILENO);
    memra_status st = cfg->dump_dir ? gate_dump_prepare(cfg->dump_dir, err) : MEMRA_OK;
    if (st != MEMRA_OK) {
        *exit_code = gate_exit_for(st);
        return st;
    }
    if (cfg->profile && !gate_have_nvtx())
        fprintf(stderr, "memra-gate: --profile: this build has no NVTX (the CUDA toolkit was not found when it was "
                        "built): the profile windows run and are verified, but no NVTX ranges are emitted\n");
    return MEMRA_OK;
}

/* The plugin registry, the arms' syntax (before any weights are read), the model, its digest
 * and the prompt. */
static memra_status load(gate_ctx *ctx, gate_config *cfg, gate_session *s, int *exit_code, memra_error *err) {
    memra_status st = memra_registry_open(&s->reg, err);
    *exit_code = GATE_EXIT_RUNTIME;
    if (st != MEMRA_OK)
        return st;
    if ((st = gate_precheck_arms(cfg, err)) != MEMRA_OK) {
        *exit_code = GATE_EXIT_USAGE;
        return st;
    }
    st = memra_model_load(cfg->model_path, cfg->model_path ? NULL : cfg->preset, cfg->dtype, 1, &s->lm, err);
    if (st != MEMRA_OK) {
        *exit_code = gate_exit_for(st);
        return st;
    }
    ctx->lm = s->lm;
    if ((st = memra_model_digest(s->lm, ctx->model_sha, err)) != MEMRA_OK)
        return st;
    st = gate_load_prompt(cfg, s->lm->model->n_vocab, &s->prompt, ctx->prompt_sha, exit_code, err);
    ctx->prompt = s->prompt;
    return st;
}

/* The summary record, the verdict and its record, the summary table. */
static void finish(gate_ctx *ctx, gate_verdict *v) {
    gate_rec_summary(ctx);
    gate_judge(ctx, v);
    gate_rec_verdict(&ctx->json, ctx->cfg, v);
    if (ctx->json.failed && v->exit == GATE_EXIT_PASS) { /* a run whose records are incomplete does not pass */
        v->exit = GATE_EXIT_RUNTIME;
        snprintf(v->reason, sizeof v->reason, "records: %s", ctx->json.failure);
        fprintf(stderr, "memra-gate: error: %s\n", v->reason);
    }
    if (!ctx->cfg->quiet)
        gate_summary_table(ctx, v);
}

/* A run that stopped: the message on stderr and in the verdict record. */
static void stopped(gate_ctx *ctx, gate_verdict *v, memra_status st, const memra_error *err) {
    snprintf(v->reason, sizeof v->reason, "%s", err->msg[0] ? err->msg : memra_status_name(st));
    fprintf(stderr, "memra-gate: %s: %s\n", v->exit == GATE_EXIT_USAGE ? "usage error" : "error", v->reason);
    if (v->exit == GATE_EXIT_USAGE)
        fprintf(stderr, "memra-gate: see memra-gate --help\n");
    gate_rec_verdict(&ctx->json, ctx->cfg, v);
}

int main(int argc, char **argv) {
    gate_config cfg;
    gate_ctx ctx = {.cfg = &cfg, .json.f = stdout};
    gate_verdict v = {.exit = GATE_EXIT_PASS, .arms_identical = -1};
    gate_session s = {0};
    memra_error err = {0};
    memra_status st = gate_cli_parse(argc, argv, &cfg, &err);
    if (st != MEMRA_OK) {
        v.exit = GATE_EXIT_USAGE;
        ctx.json.f = cfg.jsonl_path ? fopen(cfg.jsonl_path, "w") : stdout; /* the verdict goes where asked */
    } else if (cfg.help) {
        if (memra_registry_open(&s.reg, &err) != MEMRA_OK)
            s.reg = NULL; /* the help then lists no plugin keys */
        gate_cli_help(stdout, s.reg);
    } else if ((st = open_outputs(&ctx, &v.exit, &err)) == MEMRA_OK &&
               (st = load(&ctx, &cfg, &s, &v.exit, &err)) == MEMRA_OK &&
               (st = gate_open_arms(&ctx, s.reg, &cfg, &v.exit, &err)) == MEMRA_OK) {
        v.arms_identical = ctx.arms_identical;
        if ((st = run_phases(&ctx, &v.exit, &err)) == MEMRA_OK)
            finish(&ctx, &v);
    }
    if (st != MEMRA_OK)
        stopped(&ctx, &v, st, &err);

    gate_trace_free(&ctx.ref);
    gate_trace_free(&ctx.rep);
    free(ctx.out.rows);
    gate_close_arms(&ctx);
    free(s.prompt);
    if (s.lm)
        memra_model_unload(s.lm);
    if (s.reg)
        memra_registry_close(s.reg);
    if (ctx.json.f && ctx.json.f != stdout)
        fclose(ctx.json.f);
    gj_free(&ctx.json);
    return v.exit;
}
