/* gate.h: the parts of memra-gate and what they share. Every arm is reached through the core's
 * arm layer (memra/arm.h), never through a backend vtable.
 *
 *   gate_main.c     main: parse, load, open, run the phases, judge, exit
 *   gate_cli.c      the command line: argv to a gate_config, and --help
 *   gate_setup.c    what main loads and opens: the prompt ids, the arms (and the automatic pair)
 *   gate_run.c      the correctness passes (reference on A, replay on B), the timing rows, the
 *                   carry check, the census of a state
 *   gate_pass.c     the pass from a prefix: an arm's prefix snapshot, restored into a work state,
 *                   N generated steps with tokens carried on the device, verified against the
 *                   arm's correctness run (serves the timing rows, the carry check, --profile)
 *   gate_profile.c  --profile: one verified, unscored window per arm, in NVTX ranges
 *   gate_dump.c     --dump-graphs: a state's graph dumps into a directory, and what was written
 *   gate_judge.c    the verdict from what the run found, and the summary table on stderr
 *   gate_records.c  every JSON-line record (documented in gates/RECORDS.md)
 *   gate_tp.c       tensor-parallel arms: the epoch census of the correctness passes, the
 *                   refusal cells, and the arms-differ-by-design check
 *   gate_bisect.c   after a replay mismatch: the failing step again on both arms with taps after
 *                   every op (memra.ops), and the first site where they part
 *   gate_stats.c    comparisons, loop rule, schedule, bootstrap
 *   gate_stop.c     the stop state (signals, the check between steps), progress, phase names
 *   gate_json.c     the JSON-line writer (a record is written whole or not at all)
 *
 * Layers, top to bottom; a file calls only files of a lower layer (or of its own layer that never
 * call it back), never up; what they share travels in gate_ctx, or lives in the bottom layer:
 *   0 main (the phases)  1 cli, setup, html  2 the passes: run (reference, replay, timing, carry,
 *   census), profile, tp (epochs, refusal cells), bisect  3 pass (from a prefix), dump  4 judge
 *   5 records  6 stop, stats, json (the bottom: they call no other gate file).
 * gates/layers.sh checks it on the object files (test_gate_layers). */
#ifndef MEMRA_GATE_H
#define MEMRA_GATE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gate_json.h"
#include "gate_stats.h"
#include "memra/gguf.h"
#include "memra/memra.h"
#include "memra/model.h"
#include "memra/runtime.h"
#include "memra/synth.h"

enum { GATE_EXIT_PASS = 0, GATE_EXIT_FAIL = 1, GATE_EXIT_USAGE = 2, GATE_EXIT_RUNTIME = 3 };
enum { GATE_CELLS_NONE = 0, GATE_CELLS_SOME = 1, GATE_CELLS_ALL = 2 };

#define GATE_DEFAULT_PRIME 256u
#define GATE_DEFAULT_GEN 256u
#define GATE_DEFAULT_ROWS 20u
#define GATE_MAX_STEPS (1u << 20)
#define GATE_BOOTSTRAP_RESAMPLES 2000u
#define GATE_BOOTSTRAP_SEED 0x6d656d7261u /* "memra" */
#define GATE_MISMATCH_RECORDS 16u         /* replay mismatch records written at most (the count is exact) */
#define GATE_PROFILE_STEPS 32u            /* steps of each --profile window */
#define GATE_CENSUS_ROWS 128u             /* census rows read at most */
#define GATE_TP_MAX_CELLS 4096u           /* refusal cells of one arm at most */

/* What a timing row's clock covers (the protocol and measure records say it in these words). */
#define GATE_TIMING_SCOPE                                                                                              \
    "per row: the N steps after the prefix restore, from the first step_begin to the last step_end "                   \
    "(forward, sampling on the backend, the sampled token carried on the device to the next step, and "                \
    "each step_end's wait and host readback of its sampled token, which the gate stores; up to the arm's "             \
    "window of steps in flight); "                                                                                     \
    "logits not read back; the restore, digests and verification are outside the clock"

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
    const char *prompt_text;    /* --prompt: the prime steps are its tokens (the model file's tokenizer) */
    const char *prompt_file;    /* --prompt-file: the same, from a file's text */
    uint64_t prompt_file_bytes; /* with --prompt-file: the text's length (final newline dropped) */
    uint32_t prompt_tokens;     /* with --prompt or --prompt-file: how many tokens it has (P) */
    bool past_context;          /* --allow-past-context: P + N may exceed the model's context length */

    bool sampled; /* false: greedy */
    memra_sample_cfg sample;

    uint32_t rows;
    bool baab;

    bool nmse; /* --compare nmse:X */
    double nmse_tol;
    char compare_text[64]; /* "exact" or "nmse:X" as given */

    const char *jsonl_path; /* NULL: stdout */
    const char *dump_dir;   /* --dump-graphs; NULL: none */
    const char *html_path;  /* --html: the report page of this run's records; NULL: none */
    bool profile;           /* --profile: profile windows instead of timing rows */
    int cells;              /* --cells: GATE_CELLS_NONE, _SOME (default) or _ALL */
    bool rows_given;
    bool quiet;
    bool help;
    bool version; /* --version */
} gate_config;

/* Parses argv into cfg (defaults first). MEMRA_E_INVALID with a message on any usage error. */
memra_status gate_cli_parse(int argc, char **argv, gate_config *cfg, memra_error *err);
/* Writes --help: every option, then every arm key (core, placement, each backend found). */
void gate_cli_help(FILE *f, memra_registry *r);

/* A tensor-parallel arm (its backend offers memra.tp): its collective, and the epoch census of its
 * correctness pass. Off (on = false) for every other arm: then nothing of gate_tp.c runs. */
typedef struct gate_tp {
    bool on;       /* memra_arm_collective answered: the arm has a tensor-parallel stage */
    bool refusals; /* its collective has refusal cells */
    char collective[64];
    uint32_t n_stages, n_layer, n_blocks; /* n_blocks = 2 * n_layer */
    uint32_t ranks[MEMRA_MAX_STAGES];
    uint64_t *last;     /* [(stage * MEMRA_MAX_RANKS + rank) * n_blocks + block]: epochs at the last check */
    uint64_t *start;    /* the same at the start of the pass */
    uint64_t *expected; /* the advance expected since the start */
    uint32_t pending;   /* steps ended since the last check */
    uint32_t checks;    /* checks made (drains) */
    uint32_t steps;     /* steps counted */
    bool counting;      /* a census pass is running */
    uint32_t failures;
    char failure[400];
} gate_tp;

/* One opened arm. */
typedef struct gate_arm {
    const char *name; /* "a" or "b" */
    memra_arm *arm;
    uint32_t window;               /* steps kept in flight (memra_arm_window) */
    memra_backend_memory mem_open; /* read right after this arm opened (before B, for A) */
    bool have_mem_open;
    double open_s;  /* seconds memra_arm_open took (the weights' upload, unless shared) */
    bool dump_told; /* "has no graphs to dump" said once */
    gate_tp tp;
    /* A copy of the correctness run's state right after its P prime steps (position P, the last
     * prime step's token carried): the first gate_prefix_open of the arm takes it instead of
     * priming P steps again; NULL once taken, or when the copy could not be made. */
    memra_arm_state *prefix;
} gate_arm;

/* One arm's correctness run: per step what it produced. Digests are taken only when no step is
 * in flight (every step for a window of 1; the ends of the prime and generated phases for a
 * pipelined arm); has_digest says where. */
typedef struct gate_trace {
    uint32_t steps, n_vocab;
    float *logits; /* steps * n_vocab, the reference only (NULL on B) */
    int64_t *inputs;
    int64_t *tokens;           /* sampled at each step */
    uint8_t (*logits_sha)[32]; /* SHA-256 of each step's logits as read back */
    uint8_t (*digest_logits)[32], (*digest_cache)[32], (*digest_hidden)[32]; /* the backend's */
    bool *has_digest;
    bool *has_logits; /* the step's logits were read back (a prefill chunk's inner steps have none) */
} gate_trace;

/* A mismatch, wherever the gate found it: one shape for the mismatch record (RECORDS.md). */
typedef struct gate_mismatch {
    const char *where;   /* "replay", "timing", "carry" or "profile" */
    const char *arm;     /* the arm found wrong: "a" or "b" (b in the replay: it is compared with a) */
    const char *against; /* "a": arm a (the reference, or arm a's profile window); "correctness": the
                          * same arm's correctness run */
    int64_t row;         /* the timing row; -1 elsewhere */
    int64_t step;        /* the step (position) of the first difference; -1 when no step is named */
    int64_t input;       /* that step's input token in the correctness run; -1 when unknown */
    /* what differs */
    bool logits, nmse_over, nonfinite, token, cache, hidden, digest_logits, position, warmup;
    bool have_diff; /* logits were compared element by element (the replay) */
    gate_logit_diff diff;
    int64_t token_ref, token_got; /* -1: not known */
    bool have_digests;            /* the four digests below were compared */
    uint8_t cache_ref[32], cache_got[32], hidden_ref[32], hidden_got[32];
    char reason[400];
    bool first; /* the first mismatch of its `where` */
} gate_mismatch;

typedef struct gate_timing_row {
    uint32_t row;
    int arm; /* 0: A, 1: B */
    uint64_t wall_ns;
    double tok_s;
    bool verified, eligible;
    char reason[256]; /* why not verified or not eligible */
} gate_timing_row;

/* The bisect of a replay mismatch (gate_bisect.c): where the arms first part inside the step. */
typedef struct gate_bisect_arm {
    bool reproduced;  /* its tapped logits are the bits its correctness run had at the step */
    uint32_t sites;   /* sites it handed over */
    uint32_t stage;   /* the stage holding the first differing site */
    uint32_t n_ranks; /* that stage's ranks */
    int32_t rank;     /* the rank holding the first differing element; -1: every rank holds it */
    uint8_t sha[32];  /* the digest of the first differing site's tensor */
} gate_bisect_arm;
typedef struct gate_bisect {
    bool ran;            /* a bisect was tried (a replay mismatch named a step) */
    bool available;      /* both arms offer taps (memra.ops) */
    int64_t step, input; /* the failing step and its input token */
    bool done;           /* the tapped steps ran to the end on both arms */
    bool found;          /* a site differs */
    uint32_t agreed;     /* sites that agreed before it */
    int32_t layer;       /* -1: the head */
    char site[24], tensor[16];
    char prev[48];          /* the last site that agreed ("layer 0 attn_norm"), "" when none */
    uint32_t n;             /* elements of the tensor */
    gate_logit_diff diff;   /* the tensor's comparison (a against b) */
    uint64_t ulp;           /* ulp distance of the first differing element */
    gate_bisect_arm arm[2]; /* a, b */
    char cause[300];        /* why they part, where the gate can say ("" when it cannot) */
    char note[400];         /* why no site was named, or the error that stopped the bisect */
} gate_bisect;

/* Everything a gate run found. */
typedef struct gate_outcome {
    uint32_t steps_compared, bad_steps;
    uint32_t logit_steps; /* of those, steps whose logits both arms read back (all but chunked primes') */
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
    /* the carry check (no timing rows): one untimed pass per arm from its prefix */
    bool carry_done;
    uint32_t carry_failures;
    char carry_failure[400];
    /* replay steps whose cache and hidden digests were compared (a pipelined arm: drains only) */
    uint32_t digest_steps;
    /* the epoch census of tensor-parallel arms (both passes) */
    uint32_t epoch_failures;
    char epoch_failure[400];
    /* the refusal cells */
    bool cells_done;
    uint32_t cells_run, cells_failed;
    char cell_failure[600];
    /* the bisect of the first replay mismatch */
    gate_bisect bisect;
    /* the speed verdict in one sentence (gate_speed_sentence), set by main before the summary
     * record says it */
    char speed[400];
} gate_outcome;

/* What the phases share. */
typedef struct gate_ctx {
    const gate_config *cfg;
    const memra_loaded_model *lm;
    gate_arm a, b;
    const uint32_t *prompt; /* prime ids */
    uint8_t model_sha[32], prompt_sha[32];
    /* The end-of-generation ids (the tokenizer's set, as llama.cpp's: eos, eot, <|endoftext|> ...;
     * the model's eos alone when the file has no tokenizer memra builds), ascending. */
    int32_t eog[32];
    uint32_t n_eog;
    gate_json json;
    bool progress;            /* stderr is a terminal and not --quiet */
    bool progress_log;        /* stderr is not a terminal and not --quiet: a progress line a minute */
    double t_start, last_log; /* when the phases began, when the last progress line was written */
    uint64_t work_total;      /* steps the phases run (correctness, prefixes, rows), for the ETA */
    gate_trace ref, rep;
    gate_outcome out;
    bool arms_identical; /* both arms resolve to the same configuration (ignoring window) */
    const char *phase;   /* what the run is doing, for the interrupted record */
    memra_registry *reg; /* the plugin registry: provenance and warnings for the protocol record */
    char by_design[400]; /* why the arms differ by design (an exact comparison is expected to fail), "" */
} gate_ctx;

/* ---- gate_stop.c: the bottom, callable from every layer ------------------------------------ */

/* The signal (SIGINT, SIGTERM, SIGHUP) that asked the run to stop, 0 while none did: set by the
 * handler only. */
extern volatile sig_atomic_t gate_signal;
/* Installs the handler of those signals (and ignores SIGXFSZ and SIGPIPE: a failed write says why). */
void gate_stop_install(void);
const char *gate_signal_name(int sig);
/* Checked between steps: MEMRA_E_IO when a signal asked the run to stop, or when a record could
 * not be written (a run that cannot keep its records stops). */
memra_status gate_check_stop(const gate_ctx *ctx, memra_error *err);
/* Progress on stderr, with an ETA over the whole run: a bar on a terminal, otherwise (a log) a
 * line a minute and, in a long run, one at the end of each phase; nothing with --quiet. */
void gate_progress(gate_ctx *ctx, const char *what, uint32_t done, uint32_t total);
/* Before the first step: the work the run will do (steps x rows), said on stderr for a long run
 * (GATE_ANNOUNCE_STEPS steps or more) unless --quiet; starts the clock of the ETA. */
void gate_announce(gate_ctx *ctx);
#define GATE_ANNOUNCE_STEPS 1000u
#define GATE_PROGRESS_LOG_S 60.0 /* seconds between two progress lines in a log */
/* "prime" or "gen", and the index within it. */
const char *gate_phase_name(const gate_config *cfg, uint32_t step);
uint32_t gate_phase_index(const gate_config *cfg, uint32_t step);
/* Whether this build emits NVTX ranges. */
bool gate_have_nvtx(void);

/* ---- gate_setup.c ------------------------------------------------------------------------- */

/* The exit code of a failed setup call: 2 for a usage error, else 3. */
int gate_exit_for(memra_status st);
/* The prompt's P ids: from --prompt-ids (which may set P), from --prompt's text tokenized with the
 * model file's tokenizer (which sets P; a --prime other than its token count is refused), or the
 * default formula; their digest into ctx->prompt_sha. *exit_code on failure. */
/* Fills ctx->eog from the loaded model's tokenizer (or its eos id alone). */
void gate_eog_set(gate_ctx *ctx, const memra_loaded_model *lm);
memra_status gate_load_prompt(gate_config *cfg, const memra_loaded_model *lm, uint32_t **prompt, uint8_t sha[32],
                              int *exit_code, memra_error *err);
/* Checks both arm strings (syntax, and that the backend, placement, collective and op plugins
 * they name are plugins the registry found, listing those found) before a model is loaded; their
 * keys and values are memra_arm_precheck's. */
memra_status gate_precheck_arms(const gate_config *cfg, memra_registry *r, memra_error *err);
/* Opens arms a and b on the loaded model (with no arms given, picks the pair: cuda against
 * cuda-graph where both open, otherwise cpu against cpu:stages=2) and compares their resolved
 * configurations. *exit_code on failure. */
memra_status gate_open_arms(gate_ctx *ctx, memra_registry *r, gate_config *cfg, int *exit_code, memra_error *err);
void gate_close_arms(gate_ctx *ctx);

/* ---- gate_run.c --------------------------------------------------------------------------- */

/* Sizes every allocation proportional to steps x vocabulary (the reference trace above all) and
 * the host KV caches of the states the run makes against memra_memory_available: MEMRA_E_NOMEM
 * with the need, what is available and what to lower when it does not fit. */
memra_status gate_memory_check(const gate_ctx *ctx, memra_error *err);
memra_status gate_trace_alloc(gate_trace *t, uint32_t steps, uint32_t n_vocab, bool keep_logits, memra_error *err);
/* The prime steps 0..P-1 of `inputs` on state s, as the arm primes: with prefill=1 one step at a
 * time (fn after each), as with a backend without step_chunk; with prefill=M the steps 0..P-2
 * in chunks of M (fn after each chunk, with
 * its last step, the logits of its last position and token -1), then step P-1 as a single step
 * that samples (so the first generated input is sampled as with prefill=1). */
typedef memra_status (*gate_inner_fn)(void *user, uint32_t step, memra_error *err);
/* trace (may be NULL) gets token -1 at a chunk's inner steps; inner (may be NULL) is called for
 * each inner step, before fn for the chunk's last. */
memra_status gate_prime(gate_ctx *ctx, gate_arm *arm, gate_trace *trace, memra_arm_state *s, const int64_t *inputs,
                        const memra_sample_cfg *sample, float *logits, memra_arm_step_fn fn, gate_inner_fn inner,
                        void *user, memra_error *err);
void gate_trace_free(gate_trace *t);

/* Runs the reference on A into ctx->ref. */
memra_status gate_reference(gate_ctx *ctx, memra_error *err);
/* Replays the reference's inputs on B into ctx->rep, comparing and writing step and mismatch
 * records. */
memra_status gate_replay(gate_ctx *ctx, memra_error *err);
/* The timing rows, with measure records; fills ctx->out's timing members. */
memra_status gate_timing(gate_ctx *ctx, memra_error *err);
/* The carry check, for a run without timing rows (the rows are otherwise the only passes that
 * take tokens from the device): on each arm one untimed pass from its prefix (gate_pass_run).
 * carry_check records; a failure is a mismatch record ("where":"carry") and ctx->out's carry
 * members. */
memra_status gate_carry_check(gate_ctx *ctx, memra_error *err);
/* The census record of an arm's state, where the backend offers the memra.census extension;
 * with --dump-graphs also the state's graphs, written into DIR/<arm>-<scope>/ and listed in the
 * record ("dumped"). A backend without dump_graphs is said once on stderr (not an error); a
 * failed dump is an error naming the directory. */
memra_status gate_census(gate_ctx *ctx, gate_arm *arm, memra_arm_state *s, const char *scope, memra_error *err);

/* ---- gate_pass.c: the pass from a prefix --------------------------------------------------- */

/* An arm's prefix: its snapshot after the P prime steps (the last one sampled the first
 * generated token, which stays in the state as its carried token) and a work state, fresh until
 * the first pass, to restore it into. */
typedef struct gate_prefix {
    gate_arm *arm;
    const gate_trace *trace; /* the arm's correctness run */
    memra_arm_state *snapshot, *work;
} gate_prefix;

/* Makes the snapshot and a work state of `capacity` positions. The snapshot is the arm's kept
 * copy of its correctness run at position P (arm->prefix, taken: the first call of an arm), or
 * else P prime steps from the trace's inputs, checked against the trace (position P, the same
 * last token). */
memra_status gate_prefix_open(gate_ctx *ctx, gate_arm *arm, const gate_trace *trace, uint32_t capacity, gate_prefix *p,
                              memra_error *err);
void gate_prefix_close(gate_prefix *p);
/* Keeps a copy of `s` (a correctness run's state after its P prime steps) in arm->prefix. A copy
 * that cannot be made (no memory for a state) is no error: the prefix is then primed again. */
void gate_prefix_keep(gate_arm *arm, memra_arm_state *s, uint32_t capacity);
/* Frees both arms' kept prefixes (before the arms close, or to give their memory back). */
void gate_prefix_drop(gate_ctx *ctx);

/* One pass: restore the snapshot into the work state, run `steps` generated steps with tokens
 * carried on the device (timed: from the first step_begin to the last step_end; hook(user,
 * true/false) right inside the clock), then verify: the tokens against the correctness run
 * where it reaches (min(steps, N)), the final position P + steps, and, when the pass ends where
 * the correctness run ended (steps == N), the final logits, cache and hidden digests. */
typedef struct gate_pass {
    uint32_t steps;                       /* in */
    uint32_t *tokens;                     /* in: room for `steps` tokens; out: what was sampled */
    void (*hook)(void *user, bool begin); /* in, may be NULL */
    void *hook_user;
    uint64_t wall_ns; /* out */
    double tok_s;
    memra_state_stats before, after; /* the work state's counters after the restore, after the steps */
    uint32_t end;                    /* the work state's position after the steps */
    uint8_t final[3][32];            /* logits, cache, hidden digests after the steps */
    uint32_t compared;               /* tokens compared with the correctness run */
    bool verified;
    gate_mismatch miss; /* when not verified: what differs first (where, arm, row: the caller's) */
} gate_pass;
memra_status gate_pass_run(gate_ctx *ctx, gate_prefix *p, gate_pass *pass, memra_error *err);
/* A state of `capacity` positions on an arm. */
memra_status gate_new_state(gate_arm *arm, uint32_t capacity, memra_arm_state **out, memra_error *err);

/* ---- gate_tp.c: tensor-parallel arms ------------------------------------------------------ */

/* Asks the arm for its collective (memra_arm_collective); leaves arm->tp off for an arm without
 * a tensor-parallel stage. */
memra_status gate_tp_open(gate_ctx *ctx, gate_arm *arm, memra_error *err);
void gate_tp_close(gate_arm *arm);
/* The epoch census of one pass: begin reads every (stage, rank)'s epochs; step counts one ended
 * step and, where the arm drained, checks that every block of the stage's layers advanced by
 * the steps since the last check (two all-reduces a layer a step: blocks layer*2 and layer*2+1)
 * and every other block not at all. A difference is a failure of the run (ctx->out), not an
 * error. No-ops for an arm without tp. */
memra_status gate_tp_epochs_begin(gate_ctx *ctx, gate_arm *arm, memra_error *err);
memra_status gate_tp_epochs_step(gate_ctx *ctx, gate_arm *arm, uint32_t step, bool drained, memra_error *err);
void gate_tp_epochs_end(gate_arm *arm);
/* The refusal cells (--cells) of each arm whose collective has refusals, each from the arm's
 * prefix snapshot: refusal records, ctx->out's cell members. */
memra_status gate_tp_cells(gate_ctx *ctx, memra_error *err);
/* Why arms a and b differ by design (other device families, other ranks per layer): into
 * ctx->by_design, "" when they do not. */
void gate_tp_by_design(gate_ctx *ctx);

/* One refusal cell, as its record says it. */
typedef struct gate_cell {
    uint32_t index, stage, rank, layer, which, block, position;
    int32_t word;
    char expected[256];          /* what the failing step's message must name */
    memra_status status;         /* the failing step's status */
    char message[1024];          /* its message */
    bool names_cell, names_word; /* the message names rank, layer, block and position; the word */
    uint32_t start_position;     /* after the restore */
    uint32_t position_before, position_after;
    uint8_t before[3][32], after[3][32]; /* logits, cache, hidden digests before and after the failing step */
    bool have_before, have_after;
    bool digests_unchanged;
    bool quarantined;                /* memra_arm_state_quarantined after the failure */
    memra_status next_step, restore; /* the step and the restore tried after it */
    bool quarantine_observed;        /* quarantined, and both tried calls failed with MEMRA_E_QUARANTINED */
    bool pass;
    char reason[512]; /* why not */
} gate_cell;

/* ---- gate_bisect.c ------------------------------------------------------------------------ */

/* After a replay mismatch at step S (ctx->out.first): on each arm a fresh state fed the
 * reference's inputs 0..S-1 (the stream both arms verified up to S), then step S with taps on
 * (memra_arm_step_tapped), each site's tensor kept for a and compared as b hands it over, by bits
 * (exact) or by NMSE over the tolerance (nmse). Fills ctx->out.bisect and writes the bisect record.
 * Never changes the verdict: a bisect that cannot run (no taps, out of memory, a failing step)
 * says why in its record. Only a signal or a record that cannot be written stops the run. */
memra_status gate_bisect_run(gate_ctx *ctx, memra_error *err);

/* ---- gate_profile.c ----------------------------------------------------------------------- */

/* The profile windows (--profile): on each arm, from its prefix, a warm-up pass of one step (so
 * a graph capture falls outside the window), then a pass of GATE_PROFILE_STEPS steps inside
 * NVTX ranges (where the build has NVTX). Profile records; ctx->out's profile members. */
memra_status gate_profile(gate_ctx *ctx, memra_error *err);

/* ---- gate_dump.c -------------------------------------------------------------------------- */

/* --dump-graphs DIR: creates DIR (and missing parents); MEMRA_E_IO naming DIR when it cannot
 * be made or written into. */
memra_status gate_dump_prepare(const char *dir, memra_error *err);
/* What one dump wrote. */
typedef struct gate_dump_result {
    char dir[4096]; /* DIR/<arm>-<scope> */
    char **files;   /* the files new or changed by the dump, as paths under dir */
    uint32_t n_files;
    bool failed; /* error: the message (also in *err) */
    char error[1024];
} gate_dump_result;
/* Dumps one state's graphs into DIR/<arm>-<scope>/. */
memra_status gate_dump_state(gate_ctx *ctx, gate_arm *arm, memra_arm_state *s, const char *scope, gate_dump_result *out,
                             memra_error *err);
void gate_dump_result_free(gate_dump_result *d);

/* ---- gate_judge.c ------------------------------------------------------------------------- */

typedef struct gate_verdict {
    int exit;
    char reason[1400];
    int arms_identical; /* 1 or 0 once both arms are open; -1 before */
} gate_verdict;

/* The verdict from what the run found. */
void gate_judge(const gate_ctx *ctx, gate_verdict *v);
/* The readable summary on stderr; when it cannot be written, why (naming stderr's errno) in
 * error. */
void gate_summary_table(const gate_ctx *ctx, const gate_verdict *v, char *error, size_t error_size);
/* The speed verdict in one sentence ("b is 2.3% slower than a ..., 95% CI [...]: significant",
 * "no significant difference ...", "too few rows for an interval ..."), into buf. */
const char *gate_speed_sentence(const gate_ctx *ctx, char *buf, size_t size);
/* The bisect in words, for the summary table and the record ("layer 0 attn_out[3]: a 0.1 (0x...)
 * b 0.1000001 (0x...), 1 ulp, NMSE 1e-14; a: stage 0, every rank; b: stage 0, every rank"). */
void gate_bisect_sentence(const gate_bisect *b, char *buf, size_t size);
/* "logits, cache digest" etc.: what differed at a mismatch. */
void gate_mismatch_what(const gate_mismatch *m, char *buf, size_t size);

/* ---- gate_records.c: every record (RECORDS.md) --------------------------------------------- */

void gate_rec_protocol(gate_ctx *ctx);
void gate_rec_step(gate_ctx *ctx, uint32_t step, const gate_logit_diff *d, bool ok, bool digests_compared);
void gate_rec_mismatch(gate_ctx *ctx, const gate_mismatch *m);
/* census: rows (NULL when the backend has no census; error: the census call's message), the
 * state's counters, and the dump (NULL without --dump-graphs or dump_graphs). */
void gate_rec_census(gate_ctx *ctx, const gate_arm *arm, const char *scope, const memra_census_row *rows,
                     uint32_t n_rows, const char *error, const memra_state_stats *stats, const gate_dump_result *dump);
void gate_rec_measure(gate_ctx *ctx, const gate_arm *arm, const gate_timing_row *row, const gate_pass *pass,
                      const gate_trace *trace, bool first_row);
void gate_rec_carry_check(gate_ctx *ctx, const gate_arm *arm, const gate_pass *pass, const gate_trace *trace);
/* identical: the arms' windows agree (tokens, and digests in exact mode); verified: that, and
 * every other check of the windows passed. warmup: the one-step pass before the window. */
void gate_rec_profile(gate_ctx *ctx, const gate_arm *arm, const gate_pass *warmup, const gate_pass *window,
                      const char *range, bool tokens_same, bool digests_same, bool identical, bool verified);
void gate_rec_summary(gate_ctx *ctx);
void gate_rec_refusal(gate_ctx *ctx, const gate_arm *arm, const gate_cell *cell);
void gate_rec_bisect(gate_ctx *ctx, const gate_bisect *b);
/* Written with no output open is a no-op; written even after a failed record (the final one). */
void gate_rec_verdict(gate_json *j, const gate_config *cfg, const gate_verdict *v);
/* A run stopped by a signal: the last record, in place of the verdict. */
void gate_rec_interrupted(gate_ctx *ctx, int sig, const gate_verdict *v);

/* ---- gate_html.c: --html FILE ------------------------------------------------------------- */

/* While on, the gate's record stream passes each line on to the real output (fd or f, named
 * name) and keeps a copy of each line written, for the page. */
typedef struct gate_html {
    bool on;
    FILE *stream; /* the record stream the gate writes while on */
    int fd;       /* the real output: a --jsonl file (O_APPEND), or -1 */
    FILE *f;      /* or stdout */
    const char *name;
    char *line, *all; /* the line being written; every line written */
    size_t line_len, line_cap, all_len, all_cap;
    bool oom;
    char why[1024]; /* the last failed append's message */
} gate_html;

/* With --html: refuses (usage) a path that is not a regular file or is the --jsonl file, then
 * puts the record stream in place. A no-op without --html. *exit_code on failure. */
memra_status gate_html_begin(gate_ctx *ctx, gate_html *t, int *exit_code, memra_error *err);
/* Puts the real record output back, then renders the page of the lines kept and writes it
 * privately, renamed into place (signals blocked meanwhile). A page that could not be made or
 * written is said on stderr and turns exit 0 or 1 into 3 (false). Frees what t holds. */
bool gate_html_end(gate_ctx *ctx, gate_html *t, gate_verdict *v);

#endif
