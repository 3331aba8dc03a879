/* cli.h: what the subcommands of the memra command share: option parsing, exit codes, model
 * selection (--model F | --preset P [--dtype D] [--model-seed S]), and small printing helpers.
 *
 * Exit codes: 0 ok, 2 usage (a bad or unknown option, a bad value), 3 error (a file that cannot
 * be read, a backend that fails). Every message goes to stderr as "memra CMD: what went wrong". */
#ifndef MEMRA_TOOLS_CLI_H
#define MEMRA_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "memra/fileio.h"
#include "memra/gguf.h"
#include "memra/memra.h"
#include "memra/model.h"
#include "memra/runtime.h"
#include "memra/synth.h"

#define CLI_EXIT_OK 0
#define CLI_EXIT_USAGE 2
#define CLI_EXIT_ERROR 3

/* One option a subcommand accepts. `name` is the long form ("--model"), `alt` other spellings
 * ("-o", or several separated by '|': "-n|--gen") or NULL; `value` says whether it takes one. After parsing, `given` holds the value (or
 * "" for a flag) when the option was on the command line, else NULL. An option given twice is a
 * usage error. */
typedef struct cli_opt {
    const char *name;
    const char *alt;
    bool value;
    const char *given;
} cli_opt;

/* The closest of `names` (n of them, NULLs skipped) to `typed` by edit distance, when close enough
 * to be a typo (at most 2 edits, or a third of its length); NULL otherwise. For "did you mean". */
const char *cli_closest(const char *typed, const char *const *names, size_t n);

/* Parses argv[first..argc): options of `opts` ("--name value", "--name=value", "-n value") and up
 * to max_pos positional arguments (into pos). "--help" and "-h" are always accepted: they set
 * *help, and help_text is printed to stdout once the rest parsed (the caller then returns
 * CLI_EXIT_OK). Returns CLI_EXIT_OK, or CLI_EXIT_USAGE after printing why. */
int cli_parse(const char *cmd, int argc, char **argv, int first, cli_opt *opts, size_t n_opts, const char **pos,
              size_t max_pos, size_t *n_pos, const char *help_text, bool *help);

/* The given value of option `name`, or NULL. */
const char *cli_get(const cli_opt *opts, size_t n_opts, const char *name);

/* Typed values: print a usage message naming the option and return false when malformed or out
 * of range. */
bool cli_u32(const char *cmd, const char *opt, const char *text, uint32_t min, uint32_t max, uint32_t *out);
bool cli_u64(const char *cmd, const char *opt, const char *text, uint64_t *out);
bool cli_float(const char *cmd, const char *opt, const char *text, double min, double max, float *out);

/* Prints "memra CMD: message" to stderr. */
void cli_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Prints err's message for cmd and returns the exit code of its status (usage for INVALID). */
int cli_fail(const char *cmd, const memra_error *err);

/* Model selection shared by run and bench. */
typedef struct cli_model_sel {
    const char *path;
    const char *preset;
    uint32_t type;
    uint64_t seed;
} cli_model_sel;

#define CLI_MODEL_OPTS                                                                                                 \
    {"--model", NULL, true, NULL}, {"--preset", NULL, true, NULL}, {"--dtype", NULL, true, NULL}, {                    \
        "--model-seed", NULL, true, NULL                                                                               \
    }
#define CLI_MODEL_HELP                                                                                                 \
    "  --model F.gguf       the model file\n"                                                                          \
    "  --preset P           or a synthetic model built in memory: tiny (the default when neither is\n"                 \
    "                       given), small, qwen3-tiny, qwen2-tiny, gemma3-tiny, gemma3-270m,\n"                        \
    "                       llama-1b, llama-8b, smollm2-135m, moe-tiny, qwen2moe-tiny,\n"                             \
    "                       granitemoe-tiny, granite-moe-1b, qwen3moe-30b (mixtures of experts)\n"                    \
    "  --dtype D            matrix type of the preset: f32 (default), f16, bf16, q8_0, q4_0, q4_1,\n"                  \
    "                       q5_0, q5_1, q4_k, q5_k, q6_k, or llama.cpp's mixes q4_k_m, q5_k_m\n"                       \
    "  --model-seed S       weight seed of the preset (default 1)\n"
#define CLI_DEFAULT_MODEL_SEED 1

/* Reads the model options; false after printing a usage message. */
bool cli_model_sel_parse(const char *cmd, const cli_opt *opts, size_t n_opts, cli_model_sel *sel);

/* Size with a binary unit ("1.5 GiB") into buf. */
const char *cli_bytes(uint64_t n, char *buf, size_t size);
/* Writes s as a JSON string (quotes included) that is valid JSON and valid UTF-8 whatever bytes s
 * holds: quotes, backslashes and control bytes (DEL included) escaped, every byte that does not
 * start a complete, shortest-form UTF-8 sequence of a scalar value written as \ufffd (so a
 * string cut mid-character never yields half a character). */
void cli_json_str(FILE *f, const char *s);
/* Writes v with printf format fmt, or null when v is not finite (JSON has no inf or nan). */
void cli_json_num(FILE *f, const char *fmt, double v);
/* Seconds of a monotonic clock. */
double cli_now(void);
/* Peak resident set size of this process in bytes (getrusage). */
uint64_t cli_peak_rss(void);

/* ---- Output that never reports success it did not have (memra/fileio.h) ------------------ */

/* Called first by main: a closed descriptor 0, 1 or 2 is taken by /dev/null opened read-only, so
 * no file the tool opens lands on it (a later write to a closed stdout then fails with EBADF
 * instead of going into that file); SIGXFSZ is ignored, so a write past a file size limit fails
 * with EFBIG and is reported instead of killing the process; stdout becomes a stream that
 * remembers the errno of its first failed write, for the message at the end. */
void cli_process_setup(void);
/* Flushes stdout and reports a write that failed (naming it and the errno's text): false then. */
bool cli_stdout_ok(const char *cmd);
/* The exit code of the command: flushes and closes stdout (memra_close_stream); when that fails,
 * prints why and returns CLI_EXIT_ERROR (or rc when rc already says a failure). cmd may be NULL. */
int cli_finish(const char *cmd, int rc);

/* An output file written privately and renamed into place (memra_atomic_open/commit). While it
 * is open, SIGINT, SIGTERM and SIGHUP remove the private file and end the process by the same
 * signal (exit status 128+signal in a shell). `scan` also removes, on such a signal, every file
 * of the folder whose name starts with the private file's name and ".tmp." (the temporary that
 * a core writer creates beside a path it writes, as memra_synth_write_file does). */
typedef struct cli_output {
    const char *path;
    memra_atomic_file *af;
    FILE *f;  /* the stream on the private file */
    int slot; /* its place in the signal handler's table, or -1 */
} cli_output;
/* Refuses (usage) a path that exists and is not a regular file (renaming onto /dev/null or a FIFO
 * would replace it), then opens; prints the failure and returns its exit code. */
int cli_output_open(const char *cmd, const char *opt, const char *path, cli_output *o);
/* Commits the outputs in order with the signals blocked (none is cut by a signal between two).
 * On a failure the rest are aborted; returns an exit code after printing why. */
int cli_output_commit(const char *cmd, cli_output *const *outs, size_t n);
/* Removes the private file. A closed (zeroed) output is a no-op. */
void cli_output_abort(cli_output *o);

/* Usage (2) when the output path names the same file as the input (links and other spellings
 * included): checked before anything is opened for writing. in_path NULL: nothing to check.
 * Returns CLI_EXIT_OK or an exit code after printing why. */
int cli_refuse_same_file(const char *cmd, const char *out_opt, const char *out_path, const char *in_opt,
                         const char *in_path);

/* What run and bench open: a model, the registry, an arm on the model (session.c). */
typedef struct cli_session {
    memra_loaded_model *lm;
    memra_registry *reg;
    memra_arm *arm; /* every backend call goes through the arm layer (memra/arm.h) */
    double arm_s;   /* seconds the last arm took to open (its weights' upload included) */
} cli_session;

/* Loads the model and opens arms[0] (the other arms are those the session will open on the
 * same load: the file is opened streamed only when every one reads its weights from the file);
 * prints the failure and returns its exit code. */
int cli_session_open(const char *cmd, const cli_model_sel *sel, const char *const *arms, uint32_t n_arms,
                     cli_session *s);
/* "1.23 s (model opened in 0.10 s, streamed, 2.1 MiB of 16.1 GiB in memory; arm opened in 1.13 s)":
 * the load time, the model's open plus the last arm's. */
const char *cli_session_load_text(const cli_session *s, char *buf, size_t n);
void cli_session_close(cli_session *s);
/* Closes the session's arm and opens arm_text on the same model and registry (memra bench's grid
 * of arms on one load); prints the failure and returns its exit code (s->arm is then NULL). */
int cli_session_rearm(const char *cmd, cli_session *s, const char *arm_text);
/* Whether the arm names a backend, placement or collective of which the registry found no
 * manifest (a usage error: a typo). */
bool cli_arm_names_unknown_plugin(memra_registry *r, const char *arm_text);
/* One serial step through the arm layer: begin then end. token may be MEMRA_TOKEN_FROM_DEVICE;
 * sample NULL: none; logits NULL: not copied out. */
memra_status cli_step(memra_arm_state *st, int64_t token, const memra_sample_cfg *sample, float *logits,
                      memra_step_result *res, memra_error *err);
/* Bytes a decode step at position pos reads: the weights (of an untied embedding table only the
 * token's row; of a mixture of experts' stacks only the chosen experts) and a KV cache of
 * positions [0, pos] of kv_eighths / 8 bytes a value (32: f32; 16: a cuda arm's kv=f16 or
 * kv=bf16; 9: its kv=q8, scales included; the figure behind GB/s). */
uint64_t cli_step_bytes(const memra_model *m, uint64_t pos, uint32_t kv_eighths);

/* The subcommands: argv[0] is the subcommand's name. */
int cmd_plugins(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* The version line every tool prints for --version: version, commit, plugin ABI. */
void cli_print_version(FILE *f, const char *tool, const char *commit);

#endif
