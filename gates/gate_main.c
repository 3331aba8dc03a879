/* gate_main.c: memra-gate, the heart of memra. Loads a model once, opens two arms on it, runs
 * the reference on A and the replay on B, compares every bit of every step, times both arms in
 * an interleaved schedule, and says pass or fail through JSON-line records, a summary table and
 * the exit code (0 pass, 1 mismatch or ineligible comparison, 2 usage, 3 runtime error). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate.h"
#include "memra/fileio.h"
#include "memra_commit.h"

/* The phases after the arms are open: correctness, then (only on a clean correctness phase)
 * the profile windows, the carry check or the timing rows. *exit_code on failure. */
static memra_status run_phases(gate_ctx *ctx, int *exit_code, memra_error *err) {
    const gate_config *cfg = ctx->cfg;
    gate_outcome *o = &ctx->out;
    const uint32_t steps = cfg->prime + cfg->gen, n_vocab = ctx->lm->model->n_vocab;
    memra_status st;
    *exit_code = GATE_EXIT_RUNTIME;
    /* Everything proportional to steps x vocabulary is sized against the memory available before
     * any of it is allocated. */
    if ((st = gate_memory_check(ctx, err)) != MEMRA_OK)
        return st;
    if ((st = gate_trace_alloc(&ctx->ref, steps, n_vocab, true, err)) != MEMRA_OK ||
        (st = gate_trace_alloc(&ctx->rep, steps, n_vocab, false, err)) != MEMRA_OK)
        return st;
    if ((st = gate_tp_open(ctx, &ctx->a, err)) != MEMRA_OK || (st = gate_tp_open(ctx, &ctx->b, err)) != MEMRA_OK)
        return st;
    gate_rec_protocol(ctx);
    if ((st = gate_check_stop(ctx, err)) != MEMRA_OK)
        return st;
    gate_announce(ctx);
    ctx->phase = "reference";
    if ((st = gate_reference(ctx, err)) != MEMRA_OK)
        return st;
    ctx->phase = "replay";
    if ((st = gate_replay(ctx, err)) != MEMRA_OK || (st = gate_check_stop(ctx, err)) != MEMRA_OK)
        return st;
    /* Time only what was verified: no timing after a mismatch, and in nmse mode only when both
     * arms produce the same stream (otherwise the rows would time different work). */
    if (o->bad_steps || o->epoch_failures) {
        /* A replay mismatch: where inside the failing step the arms part (the verdict is FAIL
         * already; the bisect only explains it). */
        ctx->phase = "bisect";
        gate_prefix_drop(ctx); /* nothing will be timed: their memory goes to the bisect */
        return gate_bisect_run(ctx, err);
    }
    /* The refusal cells of tensor-parallel arms, before anything is timed. */
    ctx->phase = "refusal_cells";
    if ((st = gate_tp_cells(ctx, err)) != MEMRA_OK || (st = gate_check_stop(ctx, err)) != MEMRA_OK)
        return st;
    if (o->cells_failed)
        return MEMRA_OK;
    ctx->phase = "profile";
    if (cfg->profile && ((st = gate_profile(ctx, err)) != MEMRA_OK || (st = gate_check_stop(ctx, err)) != MEMRA_OK))
        return st;
    /* Without timing rows no pass would take its tokens from the device: the carry check does. */
    if (cfg->rows == 0) {
        ctx->phase = "carry_check";
        st = gate_carry_check(ctx, err);
        return st == MEMRA_OK ? gate_check_stop(ctx, err) : st;
    }
    if (cfg->nmse && o->token_agree != o->token_total) {
        snprintf(o->ineligible, sizeof o->ineligible,
                 "the arms' generated tokens agree at %u of %u steps: their rows would time different work",
                 o->token_agree, o->token_total);
        return MEMRA_OK;
    }
    ctx->phase = "timing";
    st = gate_timing(ctx, err);
    return st == MEMRA_OK ? gate_check_stop(ctx, err) : st;
}

/* What main holds and frees. */
typedef struct gate_session {
    memra_registry *reg;
    memra_loaded_model *lm;
    uint32_t *prompt;
} gate_session;

/* A usage error when `out` (an output, named by `opt`) is the same file as the input `in` (named
 * by `in_opt`): refused before anything is opened for writing. */
static memra_status not_an_input(const char *opt, const char *out, const char *in_opt, const char *in,
                                 memra_error *err) {
    bool same = false;
    if (!out || !in)
        return MEMRA_OK;
    memra_error e = {0};
    if (memra_same_file(out, in, &same, &e) != MEMRA_OK)
        return MEMRA_OK; /* either cannot be looked at: opening it says why */
    return same ? memra_fail(err, MEMRA_E_INVALID, "%s %s is the same file as %s %s: it would be overwritten", opt, out,
                             in_opt, in)
                : MEMRA_OK;
}

/* The outputs against the inputs of the command line as given (also after a usage error, where
 * the config may be incomplete: every --model, --prompt-ids and --prompt-file of argv is checked). */
static memra_status outputs_not_inputs(const gate_config *cfg, int argc, char **argv, memra_error *err) {
    memra_status st = MEMRA_OK;
    for (int i = 1; i < argc && st == MEMRA_OK; i++) {
        const char *in_opt = NULL, *in = NULL;
        for (int k = 0; k < 3 && !in_opt; k++) {
            const char *name = k == 0 ? "--model" : k == 1 ? "--prompt-ids" : "--prompt-file";
            size_t n = strlen(name);
            if (strncmp(argv[i], name, n) == 0 && argv[i][n] == '=')
                in_opt = name, in = argv[i] + n + 1;
            else if (strcmp(argv[i], name) == 0)
                in_opt = name, in = i + 1 < argc ? argv[i + 1] : NULL;
        }
        if (in_opt && (st = not_an_input("--jsonl", cfg->jsonl_path, in_opt, in, err)) == MEMRA_OK &&
            (st = not_an_input("--dump-graphs", cfg->dump_dir, in_opt, in, err)) == MEMRA_OK)
            st = not_an_input("--html", cfg->html_path, in_opt, in, err);
    }
    return st;
}

/* Opens --jsonl for appending (created when missing, never truncated: records of several runs, or
 * of gates running at once, are appended whole, each line under a lock). */
static memra_status open_jsonl(gate_ctx *ctx, const char *path, memra_error *err) {
    ctx->json.f = NULL;
    ctx->json.name = path;
    ctx->json.fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0644);
    if (ctx->json.fd < 0)
        return memra_fail(err, MEMRA_E_IO, "--jsonl %s: cannot open for writing: %s", path, strerror(errno));
    return MEMRA_OK;
}

/* Where the records go (--jsonl FILE, --jsonl - for stdout, or nowhere), the progress display, and what must fail before a
 * model is loaded: an output that is an input, a dump directory that cannot be written. */
static memra_status open_outputs(gate_ctx *ctx, int argc, char **argv, int *exit_code, memra_error *err) {
    const gate_config *cfg = ctx->cfg;
    memra_status st = outputs_not_inputs(cfg, argc, argv, err);
    if (st != MEMRA_OK) {
        *exit_code = GATE_EXIT_USAGE;
        ctx->json.f = NULL; /* the output is an input: nothing is written to it */
        return st;
    }
    if (cfg->jsonl_path && strcmp(cfg->jsonl_path, "-") == 0) {
        ctx->json.f = stdout; /* --jsonl -: the records on stdout, asked for */
        ctx->json.name = "stdout";
    } else if (cfg->jsonl_path && (st = open_jsonl(ctx, cfg->jsonl_path, err)) != MEMRA_OK) {
        *exit_code = GATE_EXIT_RUNTIME;
        return st;
    }
    ctx->progress = !cfg->quiet && isatty(STDERR_FILENO);
    ctx->progress_log = !cfg->quiet && !ctx->progress;
    st = cfg->dump_dir ? gate_dump_prepare(cfg->dump_dir, err) : MEMRA_OK;
    if (st != MEMRA_OK) {
        *exit_code = gate_exit_for(st);
        return st;
    }
    if (cfg->profile && !gate_have_nvtx())
        fprintf(stderr, "memra-gate: --profile: this build has no NVTX (the CUDA toolkit was not found when it was "
                        "built): the profile windows run and are verified, but no NVTX ranges are emitted\n");
    return MEMRA_OK;
}

/* The registry's warnings about the plugin search ($MEMRA_PLUGIN_PATH folders, shadowed plugins),
 * on stderr whatever --quiet says (the protocol record lists them too). */
static void registry_warnings(memra_registry *r) {
    for (uint32_t i = 0; r && i < memra_registry_warning_count(r); i++)
        fprintf(stderr, "memra-gate: warning: %s\n", memra_registry_warning_at(r, i));
}

/* The plugin registry, the arms' syntax (before any weights are read), the model, its digest
 * and the prompt. */
static memra_status load(gate_ctx *ctx, gate_config *cfg, gate_session *s, int *exit_code, memra_error *err) {
    memra_status st = memra_registry_open(&s->reg, err);
    *exit_code = GATE_EXIT_RUNTIME;
    if (st != MEMRA_OK)
        return st;
    ctx->reg = s->reg;
    registry_warnings(s->reg);
    if ((st = gate_precheck_arms(cfg, s->reg, err)) != MEMRA_OK) {
        *exit_code = GATE_EXIT_USAGE;
        return st;
    }
    ctx->phase = "load";
    /* What each arm's open would refuse without the model (its keys; a backend without a device:
     * no GPU, no driver) is said now, not after the weights were read or built (minutes for 8B) */
    const char *names[2] = {"a", "b"}, *arms[2] = {cfg->arm_a, cfg->arm_b};
    for (int i = 0; i < 2 && cfg->arm_a; i++)
        if ((st = memra_arm_precheck(s->reg, arms[i], names[i], err)) != MEMRA_OK) {
            *exit_code = gate_exit_for(st);
            memra_error_prefix(err, "--%s", names[i]);
            return st;
        }
    /* The file is opened streamed when both arms read their matrices from it (GPU backends that
     * upload in chunks); with arms the gate picks (cpu possible) or a cpu arm, it is read whole. */
    bool stream = cfg->model_path && cfg->arm_a && cfg->arm_b;
    if (stream && (st = memra_arm_streams_weights(s->reg, cfg->arm_a, &stream, err)) != MEMRA_OK)
        return st;
    if (stream && (st = memra_arm_streams_weights(s->reg, cfg->arm_b, &stream, err)) != MEMRA_OK)
        return st;
    st = memra_model_load_mode(cfg->model_path, cfg->model_path ? NULL : cfg->preset, cfg->dtype, 1,
                               stream ? MEMRA_LOAD_STREAMED : MEMRA_LOAD_WHOLE, &s->lm, err);
    if (st != MEMRA_OK) {
        *exit_code = gate_exit_for(st);
        return st;
    }
    ctx->lm = s->lm;
    if ((st = gate_check_stop(ctx, err)) != MEMRA_OK ||
        (st = memra_model_digest(s->lm, ctx->model_sha, err)) != MEMRA_OK)
        return st;
    /* The prompt's tokenizer is built from this load: the bytes hashed above, never the file again. */
    st = gate_load_prompt(cfg, s->lm, &s->prompt, ctx->prompt_sha, exit_code, err);
    ctx->prompt = s->prompt;
    if (st != MEMRA_OK)
        return st;
    gate_eog_set(ctx, s->lm);
    /* P + N positions must fit the model's context length, unless the user asked to go past it. */
    const memra_model *m = s->lm->model;
    uint64_t positions = (uint64_t)cfg->prime + cfg->gen;
    if (m->n_ctx_train && positions > m->n_ctx_train && !cfg->past_context) {
        *exit_code = GATE_EXIT_USAGE;
        return memra_fail(err, MEMRA_E_INVALID,
                          "--prime %u and --gen %u make %llu positions, beyond the model's context length %u "
                          "(%s.context_length): lower them, or pass --allow-past-context",
                          cfg->prime, cfg->gen, (unsigned long long)positions, m->n_ctx_train, m->arch_name);
    }
    return gate_check_stop(ctx, err);
}

/* stderr could not be written (the progress display, a warning, the summary table): the run
 * does not pass, and its verdict record says why. */
static void check_stderr(gate_verdict *v, const char *table_error) {
    if (!table_error && fflush(stderr) == 0 && !ferror(stderr))
        return;
    if (v->exit == GATE_EXIT_PASS || v->exit == GATE_EXIT_FAIL) {
        v->exit = GATE_EXIT_RUNTIME;
        snprintf(v->reason, sizeof v->reason, "stderr: %s",
                 table_error ? table_error : "write error (the progress display, a message or the summary table)");
    }
}

/* A run whose records are incomplete does not pass, nor fail as a comparison: exit 3. */
static void check_records(gate_ctx *ctx, gate_verdict *v) {
    if (!ctx->json.failed || v->exit == GATE_EXIT_USAGE || v->exit == GATE_EXIT_RUNTIME)
        return;
    v->exit = GATE_EXIT_RUNTIME;
    snprintf(v->reason, sizeof v->reason, "records: %s", ctx->json.failure);
}

/* The summary record, the verdict, the summary table, and the verdict's record last (so it says
 * whether the table could be written). --quiet never hides why a run failed. */
static void finish(gate_ctx *ctx, gate_verdict *v) {
    gate_speed_sentence(ctx, ctx->out.speed, sizeof ctx->out.speed);
    gate_rec_summary(ctx);
    gate_judge(ctx, v);
    check_records(ctx, v);
    if (v->exit != GATE_EXIT_PASS && (ctx->cfg->quiet || v->exit == GATE_EXIT_RUNTIME))
        fprintf(stderr, "memra-gate: %s (exit %d): %s\n", v->exit == GATE_EXIT_RUNTIME ? "error" : "FAIL", v->exit,
                v->reason);
    char table_error[256] = "";
    if (!ctx->cfg->quiet)
        gate_summary_table(ctx, v, table_error, sizeof table_error);
    check_stderr(v, table_error[0] ? table_error : NULL);
    gate_rec_verdict(&ctx->json, ctx->cfg, v);
}

/* A run that stopped: the message on stderr and in the verdict record. */
static void stopped(gate_ctx *ctx, gate_verdict *v, memra_status st, const memra_error *err) {
    snprintf(v->reason, sizeof v->reason, "%s", err->msg[0] ? err->msg : memra_status_name(st));
    fprintf(stderr, "memra-gate: %s: %s\n", v->exit == GATE_EXIT_USAGE ? "usage error" : "error", v->reason);
    if (v->exit == GATE_EXIT_USAGE)
        fprintf(stderr, "memra-gate: see memra-gate --help\n");
    check_stderr(v, NULL);
    /* A usage error is no run: it writes no record anywhere (a lone verdict in a shared record
     * file would read as a failed gate). */
    if (v->exit != GATE_EXIT_USAGE)
        gate_rec_verdict(&ctx->json, ctx->cfg, v);
}

/* A run stopped by a signal: the interrupted record (the last), exit 128 + the signal. */
static void interrupted(gate_ctx *ctx, gate_verdict *v) {
    const int sig = gate_signal;
    v->exit = 128 + sig;
    snprintf(v->reason, sizeof v->reason, "interrupted by %s during %s", gate_signal_name(sig),
             ctx->phase ? ctx->phase : "setup");
    fprintf(stderr, "memra-gate: %s (exit %d)\n", v->reason, v->exit);
    gate_rec_interrupted(ctx, sig, v);
}

/* The record output's final close (a --jsonl file descriptor, or stdout when records or the help
 * went there): a failure is exit 3 naming the file. */
static void close_outputs(gate_ctx *ctx, bool used_stdout, gate_verdict *v) {
    char why[1100] = "";
    if (ctx->json.fd >= 0 && close(ctx->json.fd) != 0)
        snprintf(why, sizeof why, "%s: cannot close: %s", ctx->json.name, strerror(errno));
    ctx->json.fd = -1;
    memra_error e = {0};
    if (used_stdout && memra_close_stream(stdout, "stdout", &e) != MEMRA_OK && !why[0])
        snprintf(why, sizeof why, "%s", e.msg);
    if (!why[0])
        return;
    fprintf(stderr, "memra-gate: error: %s\n", why);
    if (v->exit == GATE_EXIT_PASS || v->exit == GATE_EXIT_FAIL)
        v->exit = GATE_EXIT_RUNTIME;
}

/* A standard descriptor closed when the gate starts is held by /dev/null opened read-only: no file
 * the gate opens later can take its number, and every write to it fails (EBADF), as a write to the
 * closed descriptor would. */
static void hold_closed_std_fds(void) {
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int held = open("/dev/null", O_RDONLY);
            if (held >= 0 && held != fd) {
                dup2(held, fd);
                close(held);
            }
        }
}

int main(int argc, char **argv) {
    gate_config cfg;
    gate_ctx ctx = {.cfg = &cfg, .json = {.f = NULL, .fd = -1, .name = "(none)"}};
    gate_verdict v = {.exit = GATE_EXIT_PASS, .arms_identical = -1};
    gate_session s = {0};
    gate_html html = {.fd = -1};
    memra_error err = {0};
    hold_closed_std_fds();
    /* stdout fully buffered with room for the whole --help (17 KB and growing with the plugins'
     * keys): a failed write then happens at the final flush, where its errno is still known, and
     * the error names it (ENOSPC, EBADF) rather than "an earlier write failed". */
    static char stdout_buf[1 << 16];
    setvbuf(stdout, stdout_buf, _IOFBF, sizeof stdout_buf);
    gate_stop_install();
    bool finished = false;
    memra_status st = gate_cli_parse(argc, argv, &cfg, &err);
    if (st != MEMRA_OK) {
        v.exit = GATE_EXIT_USAGE; /* nothing is opened: a usage error writes no record */
    } else if (cfg.version) {
        printf("memra-gate %s (commit %s, library %s, plugin ABI %u)\n", MEMRA_VERSION_STRING, MEMRA_GIT_COMMIT,
               memra_version(), (unsigned)MEMRA_ABI_VERSION);
    } else if (cfg.help) {
        if (memra_registry_open(&s.reg, &err) != MEMRA_OK)
            s.reg = NULL; /* the help then lists no plugin keys */
        registry_warnings(s.reg);
        gate_cli_help(stdout, s.reg);
    } else if ((st = open_outputs(&ctx, argc, argv, &v.exit, &err)) == MEMRA_OK &&
               (st = gate_html_begin(&ctx, &html, &v.exit, &err)) == MEMRA_OK &&
               (st = load(&ctx, &cfg, &s, &v.exit, &err)) == MEMRA_OK &&
               (st = gate_open_arms(&ctx, s.reg, &cfg, &v.exit, &err)) == MEMRA_OK &&
               (st = gate_check_stop(&ctx, &err)) == MEMRA_OK) {
        v.arms_identical = ctx.arms_identical;
        if ((st = run_phases(&ctx, &v.exit, &err)) == MEMRA_OK && !gate_signal) {
            finish(&ctx, &v);
            finished = true;
        }
    }
    if (gate_signal && !cfg.help && !cfg.version && !finished)
        interrupted(&ctx, &v);
    else if (st != MEMRA_OK) {
        if (ctx.json.failed && v.exit != GATE_EXIT_USAGE)
            v.exit = GATE_EXIT_RUNTIME;
        stopped(&ctx, &v, st, &err);
    }

    gate_trace_free(&ctx.ref);
    gate_trace_free(&ctx.rep);
    free(ctx.out.rows);
    gate_close_arms(&ctx);
    free(s.prompt);
    if (s.lm)
        memra_model_unload(s.lm);
    if (s.reg)
        memra_registry_close(s.reg);
    gate_html_end(&ctx, &html, &v); /* --html: the page of this run's records */
    close_outputs(&ctx, cfg.help || cfg.version || ctx.json.f == stdout, &v);
    gj_free(&ctx.json);
    return v.exit;
}
