/* gate_cli.c: memra-gate's command line: options, their checks, and --help (which lists every
 * arm key the plugins found declare, so the help never drifts from the code). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gate.h"
#include "memra/sampling.h"

static memra_status parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out,
                              memra_error *err) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = (s && *s >= '0' && *s <= '9') ? strtoull(s, &end, 10) : 0;
    if (!s || !end || errno || *end || v < min || v > max)
        return memra_fail(err, MEMRA_E_INVALID, "%s %s: expected an integer from %llu to %llu", opt, s ? s : "(none)",
                          (unsigned long long)min, (unsigned long long)max);
    *out = v;
    return MEMRA_OK;
}

static memra_status parse_u32(const char *opt, const char *s, uint32_t min, uint32_t max, uint32_t *out,
                              memra_error *err) {
    uint64_t v = 0;
    memra_status st = parse_u64(opt, s, min, max, &v, err);
    if (st == MEMRA_OK)
        *out = (uint32_t)v;
    return st;
}

/* A finite double in [min, max] (min excluded when open_min). */
static memra_status parse_double(const char *opt, const char *s, double min, bool open_min, double max, double *out,
                                 memra_error *err) {
    char *end = NULL;
    errno = 0;
    double v = s && *s ? strtod(s, &end) : NAN;
    bool ok = s && end && !*end && !errno && isfinite(v) && (open_min ? v > min : v >= min) && v <= max;
    if (!ok)
        return memra_fail(err, MEMRA_E_INVALID, "%s %s: expected a number %s %g and <= %g", opt, s ? s : "(none)",
                          open_min ? ">" : ">=", min, max);
    *out = v;
    return MEMRA_OK;
}

/* The value of an option: "--opt=value" or the next argument. */
static memra_status take_value(int argc, char **argv, int *i, const char *eq, const char *opt, const char **out,
                               memra_error *err) {
    if (eq) {
        *out = eq + 1;
        return MEMRA_OK;
    }
    if (*i + 1 >= argc || strncmp(argv[*i + 1], "--", 2) == 0)
        return memra_fail(err, MEMRA_E_INVALID, "%s needs a value%s (see --help)", opt,
                          *i + 1 >= argc ? ", and it is the last argument" : "");
    *out = argv[++*i];
    return MEMRA_OK;
}

static memra_status parse_compare(const char *s, gate_config *cfg, memra_error *err) {
    if (strcmp(s, "nmse") == 0 || strcmp(s, "nmse:") == 0)
        return memra_fail(err, MEMRA_E_INVALID,
                          "--compare %s needs a tolerance: nmse:X, e.g. --compare nmse:1e-4 (the tolerance the "
                          "project uses for cpu against cuda)",
                          s);
    if (strcmp(s, "exact") == 0) {
        cfg->nmse = false;
    } else if (strncmp(s, "nmse:", 5) == 0) {
        memra_status st = parse_double("--compare nmse:X", s + 5, 0.0, false, 1e30, &cfg->nmse_tol, err);
        if (st != MEMRA_OK)
            return st;
        cfg->nmse = true;
    } else {
        return memra_fail(err, MEMRA_E_INVALID, "--compare %s: expected 'exact' or 'nmse:X' (X a tolerance >= 0)", s);
    }
    snprintf(cfg->compare_text, sizeof cfg->compare_text, "%s", s);
    return MEMRA_OK;
}

/* Which sampling options were given, for the checks of their combinations. */
typedef struct given {
    bool greedy, temp, topk, topp, seed;
} given;

static bool is_flag(const char *opt) {
    return strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0 || strcmp(opt, "--quiet") == 0 ||
           strcmp(opt, "--greedy") == 0 || strcmp(opt, "--profile") == 0 || strcmp(opt, "--version") == 0 ||
           strcmp(opt, "--allow-past-context") == 0;
}

static memra_status set_flag(const char *opt, gate_config *cfg, given *g) {
    if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0)
        cfg->help = true;
    else if (strcmp(opt, "--version") == 0)
        cfg->version = true;
    else if (strcmp(opt, "--quiet") == 0)
        cfg->quiet = true;
    else if (strcmp(opt, "--greedy") == 0)
        g->greedy = true;
    else if (strcmp(opt, "--allow-past-context") == 0)
        cfg->past_context = true;
    else
        cfg->profile = true;
    return MEMRA_OK;
}

/* A non-empty value of a path-like option. */
static memra_status set_path(const char *opt, const char *v, const char **out, memra_error *err) {
    *out = v;
    return *v ? MEMRA_OK
              : memra_fail(err, MEMRA_E_INVALID, "%s: empty %s name", opt,
                           strcmp(opt, "--dump-graphs") == 0 ? "directory" : "file");
}

/* The sampling options: the core's one rule for every tool (memra/sampling.h). */
static memra_status set_sampling(const char *opt, const char *v, gate_config *cfg, given *g, memra_error *err) {
    if (strcmp(opt, "--temp") == 0)
        g->temp = true;
    else if (strcmp(opt, "--top-p") == 0)
        g->topp = true;
    else if (strcmp(opt, "--top-k") == 0)
        g->topk = true;
    else
        g->seed = true;
    return memra_sample_option(opt, v, &cfg->sample, err);
}

/* One option that takes a value. */
static memra_status set_option(const char *opt, const char *v, gate_config *cfg, given *g, memra_error *err) {
    if (strcmp(opt, "--a") == 0) {
        cfg->arm_a = v;
    } else if (strcmp(opt, "--b") == 0) {
        cfg->arm_b = v;
    } else if (strcmp(opt, "--model") == 0) {
        cfg->model_path = v;
    } else if (strcmp(opt, "--preset") == 0) {
        cfg->preset = v;
    } else if (strcmp(opt, "--dtype") == 0) {
        cfg->dtype_name = v;
        if (memra_synth_parse_dtype(v, &cfg->dtype, err) != MEMRA_OK)
            return memra_fail(err, MEMRA_E_INVALID, "--dtype %s: expected " MEMRA_SYNTH_DTYPES, v);
    } else if (strcmp(opt, "--prime") == 0) {
        cfg->prime_given = true;
        return parse_u32(opt, v, 1, GATE_MAX_STEPS, &cfg->prime, err);
    } else if (strcmp(opt, "--gen") == 0) {
        return parse_u32(opt, v, 1, GATE_MAX_STEPS, &cfg->gen, err);
    } else if (strcmp(opt, "--prompt-ids") == 0) {
        cfg->prompt_ids_path = v;
    } else if (strcmp(opt, "--prompt") == 0) {
        if (!*v)
            return memra_fail(err, MEMRA_E_INVALID, "--prompt: empty text");
        cfg->prompt_text = v;
    } else if (strcmp(opt, "--prompt-file") == 0) {
        if (!*v)
            return memra_fail(err, MEMRA_E_INVALID, "--prompt-file: empty file name");
        cfg->prompt_file = v;
    } else if (strcmp(opt, "--temp") == 0 || strcmp(opt, "--top-k") == 0 || strcmp(opt, "--top-p") == 0 ||
               strcmp(opt, "--seed") == 0) {
        return set_sampling(opt, v, cfg, g, err);
    } else if (strcmp(opt, "--rows") == 0) {
        cfg->rows_given = true;
        memra_status st = parse_u32(opt, v, 0, 100000, &cfg->rows, err);
        if (st == MEMRA_OK && cfg->rows == 1)
            return memra_fail(err, MEMRA_E_INVALID,
                              "--rows 1: timing needs at least 2 rows (one per arm), or 0 for none");
        return st;
    } else if (strcmp(opt, "--schedule") == 0) {
        if (strcmp(v, "ABBA") != 0 && strcmp(v, "BAAB") != 0)
            return memra_fail(err, MEMRA_E_INVALID, "--schedule %s: expected ABBA or BAAB", v);
        cfg->baab = v[0] == 'B';
    } else if (strcmp(opt, "--compare") == 0) {
        return parse_compare(v, cfg, err);
    } else if (strcmp(opt, "--jsonl") == 0) {
        return set_path(opt, v, &cfg->jsonl_path, err);
    } else if (strcmp(opt, "--dump-graphs") == 0) {
        return set_path(opt, v, &cfg->dump_dir, err);
    } else if (strcmp(opt, "--html") == 0) {
        return set_path(opt, v, &cfg->html_path, err);
    } else if (strcmp(opt, "--cells") == 0) {
        if (strcmp(v, "none") == 0)
            cfg->cells = GATE_CELLS_NONE;
        else if (strcmp(v, "some") == 0)
            cfg->cells = GATE_CELLS_SOME;
        else if (strcmp(v, "all") == 0)
            cfg->cells = GATE_CELLS_ALL;
        else
            return memra_fail(err, MEMRA_E_INVALID, "--cells %s: expected none, some or all", v);
    } else {
        return memra_fail(err, MEMRA_E_INVALID, "unknown option '%s' (see --help)", opt);
    }
    return MEMRA_OK;
}

/* The options --help lists, for "did you mean". */
static const char *const known_options[] = {
    "--a",        "--b",       "--model",  "--preset",      "--dtype",       "--prime",
    "--gen",      "--n-gen",   "--prompt", "--prompt-ids",  "--prompt-file", "--allow-past-context",
    "--greedy",   "--temp",    "--top-k",  "--top-p",       "--seed",        "--rows",
    "--schedule", "--compare", "--cells",  "--dump-graphs", "--jsonl",       "--html",
    "--quiet",    "--profile", "--help",   "--version"};

/* An unknown option: MEMRA_E_INVALID naming it, with the closest option the gate takes. */
static memra_status unknown_option(const char *opt, memra_error *err) {
    const char *best = memra_closest_name(opt, known_options, sizeof known_options / sizeof known_options[0]);
    if (best)
        return memra_fail(err, MEMRA_E_INVALID, "unknown option '%s': did you mean %s? (see --help)", opt, best);
    return memra_fail(err, MEMRA_E_INVALID, "unknown option '%s' (see --help)", opt);
}

/* Whether set_option knows opt (asked on a scratch configuration, so an option added there is
 * known here without a second list). */
static bool known_value_option(const char *opt) {
    gate_config scratch = {0};
    given g = {0};
    memra_error e = {0};
    return set_option(opt, "", &scratch, &g, &e) == MEMRA_OK || strncmp(e.msg, "unknown option", 14) != 0;
}

/* One spelling of each option: -n and --n-gen (memra run's and bench's) are --gen. */
static const char *canonical_option(const char *opt) {
    return strcmp(opt, "-n") == 0 || strcmp(opt, "--n-gen") == 0 ? "--gen" : opt;
}

/* The options' combinations, once all are read. */
static memra_status check_config(gate_config *cfg, const given *g, memra_error *err) {
    if (cfg->model_path && cfg->preset)
        return memra_fail(err, MEMRA_E_INVALID, "--model and --preset exclude each other: give one");
    if (cfg->prompt_text && cfg->prompt_ids_path)
        return memra_fail(err, MEMRA_E_INVALID, "--prompt and --prompt-ids exclude each other: give one");
    if (cfg->prompt_file && (cfg->prompt_text || cfg->prompt_ids_path))
        return memra_fail(err, MEMRA_E_INVALID, "--prompt-file and %s exclude each other: give one",
                          cfg->prompt_text ? "--prompt" : "--prompt-ids");
    if ((cfg->prompt_text || cfg->prompt_file) && !cfg->model_path)
        return memra_fail(err, MEMRA_E_INVALID,
                          "%s needs --model FILE: its text is tokenized with the file's tokenizer",
                          cfg->prompt_text ? "--prompt" : "--prompt-file");
    if (cfg->model_path && cfg->dtype_name)
        return memra_fail(err, MEMRA_E_INVALID, "--dtype applies to presets only (the file %s has its own types)",
                          cfg->model_path);
    if (g->greedy && (g->temp || g->topk || g->topp || g->seed))
        return memra_fail(err, MEMRA_E_INVALID, "--greedy excludes --temp, --top-k, --top-p and --seed");
    if (!g->temp && (g->topk || g->topp || g->seed))
        return memra_fail(err, MEMRA_E_INVALID, "--top-k, --top-p and --seed sample: they need --temp T");
    cfg->sampled = g->temp;
    if (!cfg->sampled)
        memset(&cfg->sample, 0, sizeof cfg->sample); /* temperature 0: greedy */
    if ((cfg->arm_a == NULL) != (cfg->arm_b == NULL))
        return memra_fail(err, MEMRA_E_INVALID, "give both --a and --b, or neither (the gate then picks a pair)");
    if (cfg->profile && cfg->rows_given && cfg->rows)
        return memra_fail(err, MEMRA_E_INVALID,
                          "--profile excludes --rows %u: a profile run has no timing rows (run the scored gate "
                          "separately, without a profiler)",
                          cfg->rows);
    if (cfg->profile)
        cfg->rows = 0;
    if ((uint64_t)cfg->prime + cfg->gen > GATE_MAX_STEPS)
        return memra_fail(err, MEMRA_E_INVALID, "--prime %u plus --gen %u is more than %u steps", cfg->prime, cfg->gen,
                          GATE_MAX_STEPS);
    return MEMRA_OK;
}

/* An option that takes one value is given once: a second --prime (or --jsonl, --a ...) is refused
 * rather than silently overriding the first. */
static memra_status once(const char *opt, char seen[][24], uint32_t *n_seen, memra_error *err) {
    for (uint32_t k = 0; k < *n_seen; k++)
        if (strcmp(seen[k], opt) == 0)
            return memra_fail(err, MEMRA_E_INVALID, "%s is given twice: give it once", opt);
    if (*n_seen < 32 && strlen(opt) < 24)
        snprintf(seen[(*n_seen)++], 24, "%s", opt);
    return MEMRA_OK;
}

memra_status gate_cli_parse(int argc, char **argv, gate_config *cfg, memra_error *err) {
    *cfg = (gate_config){.prime = GATE_DEFAULT_PRIME,
                         .gen = GATE_DEFAULT_GEN,
                         .rows = GATE_DEFAULT_ROWS,
                         .sample = {.top_p = 1.0f, .seed = 1},
                         .cells = GATE_CELLS_SOME,
                         .compare_text = "exact"};
    given g = {0};
    memra_status st = MEMRA_OK;
    char seen[32][24]; /* the options that take a value, as given so far: each once */
    uint32_t n_seen = 0;
    for (int i = 1; i < argc && st == MEMRA_OK; i++) {
        const char *arg = argv[i], *eq = strchr(arg, '='), *v = NULL;
        char opt[64];
        size_t olen = eq ? (size_t)(eq - arg) : strlen(arg);
        if (olen >= sizeof opt || arg[0] != '-')
            return memra_fail(err, MEMRA_E_INVALID, "unexpected argument '%s' (options start with --; see --help)",
                              arg);
        memcpy(opt, arg, olen);
        opt[olen] = '\0';
        if (canonical_option(opt) != opt)
            snprintf(opt, sizeof opt, "%s", canonical_option(opt));
        if (is_flag(opt))
            st = eq ? memra_fail(err, MEMRA_E_INVALID, "%s takes no value", opt) : set_flag(opt, cfg, &g);
        else if (!known_value_option(opt))
            st = unknown_option(opt, err); /* before its value: an unknown option never "needs a value" */
        else if ((st = take_value(argc, argv, &i, eq, opt, &v, err)) == MEMRA_OK &&
                 (st = once(opt, seen, &n_seen, err)) == MEMRA_OK)
            st = set_option(opt, v, cfg, &g, err);
    }
    if (st != MEMRA_OK || cfg->help || cfg->version)
        return st;
    return check_config(cfg, &g, err);
}

/* ------------------------------------------------------------------------------------------ */

static void help_keys(FILE *f, const char *title, const memra_option_spec *specs, uint32_t n) {
    fprintf(f, "  %s:\n", title);
    if (n == 0)
        fprintf(f, "    (no keys)\n");
    for (uint32_t i = 0; i < n; i++) {
        const char *d = specs[i].default_value;
        fprintf(f, "    %-12s %s (default: %s)\n", specs[i].key, specs[i].help ? specs[i].help : "",
                d && *d ? d : "computed");
    }
}

static const char help_text[] =
    "memra-gate: prove that two arms of one model load produce the same bits at every step, then\n"
    "time them in an interleaved schedule.\n"
    "\n"
    "usage: memra-gate --a ARM --b ARM [--model F.gguf | --preset NAME [--dtype D]] [--prime P] [-n N]\n"
    "                  [--prompt-ids FILE | --prompt TEXT | --prompt-file FILE] [--allow-past-context]\n"
    "                  [--greedy | --temp T [--top-k K] [--top-p P] [--seed S]]\n"
    "                  [--rows R | --profile] [--schedule ABBA|BAAB] [--compare exact|nmse:X] [--version]\n"
    "                  [--cells none|some|all] [--dump-graphs DIR] [--jsonl FILE] [--html FILE] [--quiet]\n"
    "       memra-gate            (no arms: cuda against cuda-graph where a GPU and both plugins are\n"
    "                              present, otherwise cpu against cpu:stages=2, on the embedded model)\n"
    "\n"
    "What it does: loads the model once; runs P prime and N generated steps on arm A recording\n"
    "every step's logits, cache and hidden digests and sampled token; replays the identical inputs\n"
    "on arm B and compares every bit; then R timing rows (AAAAA BBBBB BBBBB AAAAA for 20), each\n"
    "restoring the prefix snapshot, generating N tokens, and verifying the token stream and the\n"
    "final state before its time counts. A row whose stream loops (its last min(64, N) tokens repeat\n"
    "with a period p <= 16, at least twice) or meets EOS early is ineligible. A row's clock covers\n"
    "its N steps (forward, sampling on the backend, each step's wait and sampled-token readback),\n"
    "not the restore or the verification; each arm's scored state is fresh at its first row, so a\n"
    "graph backend's capture is inside that row (the protocol record says both).\n"
    "\n"
    "options:\n"
    "  --a ARM, --b ARM     the two arms, BACKEND[:key=value,...] (keys below); A is the reference\n"
    "  --model FILE         a GGUF model file\n"
    "  --preset NAME        a synthetic model built in memory: tiny (default), small, qwen3-tiny,\n"
    "                       qwen2-tiny, gemma3-tiny, gemma3-270m, llama-1b, llama-8b, smollm2-135m,\n"
    "                       moe-tiny,\n"
    "                       qwen2moe-tiny, granitemoe-tiny, granite-moe-1b, qwen3moe-30b\n"
    "  --dtype D            tensor type of a preset: f32 (default), f16, bf16, q8_0, q4_0, q4_1,\n"
    "                       q5_0, q5_1, q4_k, q5_k, q6_k, or llama.cpp's mixes q4_k_m, q5_k_m\n"
    "                       (memra mkmodel --help says what each gives)\n"
    "  --prime P            prompt steps (default 256; the prompt file's length when --prompt-ids\n"
    "                       is given without --prime)\n"
    "  -n, --gen N          generated steps (default 256; --n-gen too, as memra run and bench)\n"
    "  --prompt-ids FILE    prompt token ids, separated by spaces, newlines or commas (at least P);\n"
    "                       default: id i = (100 + 7i mod 900) mod n_vocab\n"
    "  --prompt TEXT        or a text prompt (needs --model): the prime steps are its tokens under\n"
    "                       the file's tokenizer (bos as the file says), P their count (a --prime\n"
    "                       other than that count is refused)\n"
    "  --prompt-file FILE   or the text prompt of a file (a regular file, at most 64 MiB, no NUL\n"
    "                       byte; one final newline dropped), tokenized as --prompt\n"
    "  --allow-past-context let P + N go past the model's context length (<arch>.context_length),\n"
    "                       refused otherwise (exit 2); the protocol record says past_context\n"
    "  --greedy             argmax sampling (the default)\n"
    "  --temp T             sample at temperature 0 < T <= 1000 with position-keyed draws (T must\n"
    "                       stay a normal 32-bit float; memra run takes the same ranges)\n"
    "  --top-k K            keep the K most likely tokens (0: all; default 0)\n"
    "  --top-p P            nucleus cut, 0 < P <= 1 (default 1: none); a P below 1 must stay\n"
    "                       below 1 as a 32-bit float (0.99999994 at most)\n"
    "  --seed S             the draws' seed (default 1)\n"
    "  --rows R             timing rows (default 20; 0: no timing; at least 2 otherwise). With 0,\n"
    "                       one untimed pass per arm from its prefix snapshot with tokens carried on\n"
    "                       the device, verified as a row is (the carry check), or exit 1\n"
    "  --schedule S         ABBA (default: AAAAA BBBBB BBBBB AAAAA) or BAAB (the mirror)\n"
    "  --compare M          exact (default: every bit of logits, cache and hidden digests, tokens)\n"
    "                       or nmse:X (pairs of different families: per-step NMSE of the logits\n"
    "                       <= X, token agreement reported; digests not compared). Arms that differ\n"
    "                       by design (cpu against cuda; layers split over other tp rank counts, such\n"
    "                       as cpu against cpu:tp=2) sum in other orders: the gate says so, and an\n"
    "                       exact comparison of them is expected to fail\n"
    "  --cells C            refusal cells of a tensor-parallel arm whose collective has them (after\n"
    "                       the correctness passes, each on a state restored from the prefix: a\n"
    "                       refusal armed at (rank, layer, attention|ffn, position) must fail that\n"
    "                       step with nothing committed and quarantine the state, or exit 1):\n"
    "                       none, some (default: six cells, rank 0 and the last rank, first, middle\n"
    "                       and last layer and position) or all (every rank x first, middle, last\n"
    "                       layer x attention, ffn x first, middle, last position after the prefix)\n"
    "  --profile            a profile-only run, for a profiler such as nsys: no timing rows and no\n"
    "                       ratio; after the correctness passes, one window of 32 steps per arm (A,\n"
    "                       then B), each from the prefix snapshot at position P after a warm-up\n"
    "                       step (so graph captures fall outside it), inside NVTX ranges\n"
    "                       'memra-gate:profile' and 'memra-gate:profile arm X (ARM) positions\n"
    "                       P..P+32' (where the build found the CUDA toolkit; otherwise said on\n"
    "                       stderr). The windows are verified: tokens (and, in exact mode, final\n"
    "                       digests) identical between the arms and with the correctness run, or\n"
    "                       exit 1. Excludes --rows R > 0\n"
    "  --dump-graphs DIR    create DIR and write there the graphs of each arm whose backend offers\n"
    "                       them (the memra.census extension's dump_graphs): the correctness state\n"
    "                       into DIR/a-correctness and DIR/b-correctness, the scored timing state\n"
    "                       (after the rows) into DIR/a-timing and DIR/b-timing; the census record\n"
    "                       lists the files (\"dumped\"). An arm without graphs is said on stderr\n"
    "  --jsonl FILE         append the JSON-line records there (- for stdout; without --jsonl no\n"
    "                       record is written: the terminal gets progress and the summary): each\n"
    "                       line whole, under a lock, so gates sharing one file never interleave;\n"
    "                       never one of the inputs. A usage error writes no record\n"
    "  --html FILE          at the end, write the report of this run's records (as memra report\n"
    "                       makes it) to FILE: one self-contained HTML page, written privately and\n"
    "                       renamed into place; also for a failing run, and marked interrupted for\n"
    "                       a run a signal stopped (none after a usage error). A page that cannot\n"
    "                       be written is exit 3; never one of the inputs nor the --jsonl file\n"
    "  --quiet              no progress display and no summary table on stderr (why a run failed,\n"
    "                       and warnings about the plugins found, are still said)\n"
    "  --help, -h           this text\n"
    "  --version            the version, commit and plugin ABI\n"
    "\n"
    "A tensor-parallel arm's epochs are checked after every step of the correctness passes (each\n"
    "block of every rank advanced by exactly one per step; a pipelined arm where it drains), or exit 1.\n"
    "records (one JSON object a line, field \"record\"; only with --jsonl): protocol, step, mismatch,\n"
    "census, refusal, measure (timing rows), carry_check (--rows 0), profile (--profile windows),\n"
    "summary, verdict, and interrupted (last, in place of the verdict, when a signal stopped the run);\n"
    "every field is documented in gates/RECORDS.md. Arms that\n"
    "resolve to the same configuration (window aside) are flagged \"arms_identical\" and warned of:\n"
    "their comparison proves determinism only.\n"
    "exit codes: 0 pass, 1 mismatch (a step, a timing row, the carry check or a profile window) or\n"
    "ineligible comparison, 2 usage error (an unknown option, backend, placement or collective, an\n"
    "option given twice, an output that is one of the inputs), 3 runtime error (records, stdout or\n"
    "stderr that could not be written, a --dump-graphs DIR that cannot be written, a trace that does\n"
    "not fit in the memory available, a SHA-256 digest that could not be computed, included),\n"
    "128 + N when signal N (SIGINT, SIGTERM, SIGHUP) stopped the run (its last record says so).\n"
    "\n";

void gate_cli_help(FILE *f, memra_registry *r) {
    fputs(help_text, f);
    fputs("arm keys (ARM = BACKEND[:key=value,...]; a list value such as devices=0,1 keeps its commas):\n", f);
    help_keys(f, "core", memra_core_arm_keys, memra_core_arm_key_count);
    if (!r) {
        fputs("  (no plugin registry: placement and backend keys unavailable)\n", f);
        return;
    }
    memra_error err;
    const memra_plugin *p = NULL;
    const memra_option_spec *specs = NULL;
    if (memra_registry_load(r, "default", MEMRA_PLUGIN_PLACEMENT, &p, &err) == MEMRA_OK) {
        uint32_t n = memra_plugin_option_specs(p, &specs);
        help_keys(f, "placement 'default'", specs, n);
    } else
        fprintf(f, "  placement 'default': unavailable (%s)\n", err.msg);
    for (uint32_t i = 0; i < memra_registry_count(r); i++) {
        const memra_registry_entry *e = memra_registry_entry_at(r, i);
        if (e->kind != MEMRA_PLUGIN_BACKEND || e->state == MEMRA_ENTRY_SHADOWED || !e->name || !*e->name)
            continue;
        char title[256];
        if (memra_registry_load(r, e->name, MEMRA_PLUGIN_BACKEND, &p, &err) != MEMRA_OK) {
            fprintf(f, "  backend '%s': cannot load (%s)\n", e->name, err.msg);
            continue;
        }
        snprintf(title, sizeof title, "backend '%s' (%s)", e->name, p->description ? p->description : "");
        uint32_t n = memra_plugin_option_specs(p, &specs);
        help_keys(f, title, specs, n);
    }
}
