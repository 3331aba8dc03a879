/* gate.h: the parts of memra-gate and what they share.
 *
 *   gate_cli.c    the command line: options, arm defaults, --help
 *   gate_run.c    the reference on arm A, the replay on arm B, the timing rows
 *   gate_profile.c  --profile: one verified, unscored window per arm, in NVTX ranges
 *   gate_dump.c   --dump-graphs: the census record's graph dumps into a directory
 *   gate_main.c   main: model load, arms, records, verdict, the summary table
 *   gate_stats.c  comparisons, loop rule, schedule, bootstrap
 *   gate_json.c   the JSON-line writer */
#ifndef MEMRA_GATE_H
#define MEMRA_GATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gate_json.h"
#include "gate_stats.h"
#include "memra/memra.h"

enum { GATE_EXIT_PASS = 0, GATE_EXIT_FAIL = 1, GATE_EXIT_USAGE = 2, GATE_EXIT_RUNTIME = 3 };

#define GATE_DEFAULT_PRIME 256u
#define GATE_DEFAULT_GEN 256u
#define GATE_DEFAULT_ROWS 20u
#define GATE_MAX_STEPS (1u << 20)
#define GATE_MAX_WINDOW 64u
#define GATE_BOOTSTRAP_RESAMPLES 2000u
#define GATE_BOOTSTRAP_SEED 0x6d656d7261u /* "memra" */
#define GATE_MISMATCH_RECORDS 16u         /* mismatch records written at most (the count is exact) */
#define GATE_PROFILE_STEPS 32u            /* steps of each --profile window */

/* What a timing row's clock covers (the protocol and measure records say it in these words). */
#define GATE_TIMING_SCOPE                                                                                     \
    "per row: the N steps after the prefix restore, from the first step_begin to the last step_end "        \
    "(forward, sampling on the backend, the sampled token carried on the device to the next step, and "     \
    "each step_end's wait and host readback of its sampled token, which the gate stores; up to the arm's "  \
    "window of steps in flight); "                                                                           \
    "logits not read back; the restore, digests and verification are outside the clock"

/* The gate-level arm key, handled by the gate and passed to memra_arm_open as a caller key. */
extern const memra_option_spec gate_caller_keys[];
extern const uint32_t gate_caller_key_count;

typedef struct gate_config {
    const char *arm_a, *arm_b; /* NULL until chosen */
    bool auto_arms;            /* neither --a nor --b was given: the gate picked */
    char auto_reason[256];

    const char *model_path; /* --model */
    const char *preset;     /* --preset; NULL: tiny */
    const char *dtype_name; /* --dtype, for presets */
    uint32_t dtype;

    uint32_t prime, gen;
    bool prime_given;
    const char *prompt_ids_path;

    bool sampled; /* false: greedy */
    memra_sample_cfg sample;

    uint32_t rows;
    bool baab;

    bool nmse;         /* --compare nmse:X */
    double nmse_tol;
    char compare_text[64]; /* "exact" or "nmse:X" as given */

    const char *jsonl_path; /* NULL: stdout */
    const char *dump_dir;   /* --dump-graphs; NULL: none */
    bool profile;           /* --profile: profile windows instead of timing rows */
    bool rows_given;
    bool quiet;
    bool help;
} gate_config;

/* Parses argv into cfg (defaults first). MEMRA_E_INVALID with a message on any usage error. */
memra_status gate_cli_parse(int argc, char **argv, gate_config *cfg, memra_error *err);
/* Writes --help: every option, then every arm key (core, placement, each backend found, window). */
void gate_cli_help(FILE *f, memra_registry *r);

/* One opened arm. */
typedef struct gate_arm {
    const char *name; /* "a" or "b" */
    memra_arm *arm;
    const memra_backend_vtable *vt;
    memra_backend *be;
    uint32_t window; /* steps kept in flight */
    memra_backend_memory mem_open; /* read right after this arm opened (before B, for A) */
    bool have_mem_open;
    bool dump_told; /* "has no graphs to dump" said once */
} gate_arm;

/* One arm's correctness run: per step what it produced. Digests are taken only when no step is
 * in flight (every step for a window of 1; the ends of the prime and generated phases for a
 * pipelined arm); has_digest says where. */
typedef struct gate_trace {
    uint32_t steps, n_vocab;
    float *logits; /* steps * n_vocab, the reference only (NULL on B) */
    int64_t *inputs;
    int64_t *tokens; /* sampled at each step */
    uint8_t (*logits_sha)[32]; /* SHA-256 of each step's logits as read back */
    uint8_t (*digest_logits)[32], (*digest_cache)[32], (*digest_hidden)[32]; /* the backend's */
    bool *has_digest;
} gate_trace;

/* The first mismatch, as the report and the mismatch record give it. */
typedef struct gate_mismatch {
    uint32_t step;
    bool logits, nonfinite, cache, hidden, token, digest_logits, nmse_over;
    gate_logit_diff diff;
    int64_t token_ref, token_got;
} gate_mismatch;

typedef struct gate_timing_row {
    uint32_t row;
    int arm; /* 0: A, 1: B */
    uint64_t wall_ns;
    double tok_s;
    bool verified, eligible;
    char reason[256]; /* why not verified or not eligible */
} gate_timing_row;

/* Everything a gate run found. */
typedef struct gate_outcome {
    uint32_t steps_compared, bad_steps;
    bool have_first;
    gate_mismatch first;
    double max_nmse;
    uint32_t token_agree, token_total; /* generated steps whose sampled tokens agree */
    uint32_t nonfinite_steps;
    gate_timing_row *rows;
    uint32_t n_rows;
    bool timing_done;
    uint32_t row_failures, rows_ineligible;
    char row_failure[400];
    char ineligible[400];
    double median[2], min[2], max[2];
    uint32_t eligible[2];
    double ratio, ratio_lo, ratio_hi;
    bool have_ratio;
    /* the scored state of each arm at its first row: counters before and after that row */
    bool first_row_seen[2];
    memra_state_stats first_row_before[2], first_row_after[2];
    /* --profile */
    bool profile_done, profile_identical;
    uint32_t profile_start, profile_end;
    char profile_failure[400];
    /* --dump-graphs: files written */
    uint32_t dumped_files;
    /* the carry check (no timing rows): one untimed row-like pass per arm */
    bool carry_done;
    uint32_t carry_failures;
    char carry_failure[400];
    /* replay steps whose cache and hidden digests were compared (a pipelined arm: drains only) */
    uint32_t digest_steps;
} gate_outcome;

/* What gate_run.c needs from main. */
typedef struct gate_ctx {
    const gate_config *cfg;
    const memra_loaded_model *lm;
    gate_arm a, b;
    const uint32_t *prompt; /* prime ids */
    gate_json json;
    bool progress; /* stderr is a terminal and not --quiet */
    gate_trace ref, rep;
    gate_outcome out;
    bool arms_identical; /* both arms resolve to the same configuration (ignoring window) */
} gate_ctx;

memra_status gate_trace_alloc(gate_trace *t, uint32_t steps, uint32_t n_vocab, bool keep_logits, memra_error *err);
void gate_trace_free(gate_trace *t);

/* Runs the reference on A into ctx->ref. */
memra_status gate_reference(gate_ctx *ctx, memra_error *err);
/* Replays the reference's inputs on B into ctx->rep, comparing and writing step and mismatch
 * records. */
memra_status gate_replay(gate_ctx *ctx, memra_error *err);
/* The timing rows, with measure records; fills ctx->out's timing members. */
memra_status gate_timing(gate_ctx *ctx, memra_error *err);
/* The census record of an arm's state, where the backend offers the extension; with
 * --dump-graphs also the state's graphs, written into DIR/<arm>-<scope>/ and listed in the
 * record ("dumped"). A backend without dump_graphs is said once on stderr (not an error); a
 * failed dump is an error naming the directory. */
memra_status gate_census(gate_ctx *ctx, gate_arm *arm, const memra_state *s, const char *scope, memra_error *err);

/* The carry check, for a run without timing rows (the rows are otherwise the only passes that
 * take tokens from the device): on each arm, from its prefix snapshot, the N generated steps
 * with tokens carried on the device, exactly as a timing row runs them but untimed, verified as
 * a row is (token stream, final position, final logits, cache and hidden digests against the
 * arm's correctness run). carry_check records; a failure is a mismatch record ("where":"carry")
 * and ctx->out's carry members. */
memra_status gate_carry_check(gate_ctx *ctx, memra_error *err);

/* The profile windows (--profile): on each arm, from its prefix snapshot, a warm-up step (so a
 * graph capture falls outside the window), a restore, then GATE_PROFILE_STEPS steps inside NVTX
 * ranges (where the build has NVTX). Profile records; ctx->out's profile members. */
memra_status gate_profile(gate_ctx *ctx, memra_error *err);
/* Whether this build emits NVTX ranges. */
bool gate_have_nvtx(void);

/* --dump-graphs DIR: creates DIR (and missing parents); MEMRA_E_IO naming DIR when it cannot
 * be made or written into. */
memra_status gate_dump_prepare(const char *dir, memra_error *err);
/* Dumps one state's graphs into DIR/<arm>-<scope>/ and writes the "dumped" member (the files
 * new or changed by the call) into the open record. */
memra_status gate_dump_state(gate_ctx *ctx, gate_arm *arm, const memra_state *s, const char *scope,
                             memra_status (*dump)(memra_backend *, const memra_state *, const char *, memra_error *),
                             memra_error *err);

/* Shared by the passes (gate_run.c). */
typedef memra_status (*gate_step_fn)(gate_ctx *ctx, void *user, uint32_t step, const float *logits,
                                     const memra_step_result *res, bool drained, memra_error *err);
memra_status gate_run_steps(gate_ctx *ctx, const gate_arm *arm, memra_state *s, const int64_t *inputs,
                            uint32_t first, uint32_t count, float *logits, gate_step_fn fn, void *user,
                            memra_error *err);
memra_status gate_new_state(const gate_ctx *ctx, const gate_arm *arm, uint32_t capacity, memra_state **out,
                            memra_error *err);
memra_status gate_take_digests(const gate_arm *arm, memra_state *s, uint8_t logits[32], uint8_t cache[32],
                               uint8_t hidden[32], memra_error *err);
/* The prefix snapshot: P prime steps from the trace's inputs, checked against the trace. */
memra_status gate_make_prefix(gate_ctx *ctx, const gate_arm *arm, const gate_trace *trace, memra_state **prefix,
                              memra_error *err);
/* A row's step callback: user is a gate_row_run; generated tokens land in tokens[step - P]. */
typedef struct gate_row_run {
    uint32_t *tokens;
    int64_t prefix_token;
} gate_row_run;
memra_status gate_row_step(gate_ctx *ctx, void *user, uint32_t step, const float *logits,
                           const memra_step_result *res, bool drained, memra_error *err);
/* The arm's state counters (zeros when the backend keeps none). */
memra_state_stats gate_stats(const gate_arm *arm, const memra_state *s);

/* Progress on stderr (a terminal only). */
void gate_progress(gate_ctx *ctx, const char *what, uint32_t done, uint32_t total);

#endif
