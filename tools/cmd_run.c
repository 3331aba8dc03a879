/* cmd_run.c: `memra run`: feeds a prompt (token ids, or text through the file's tokenizer, or a
 * chat message in the file's chat format) through an arm, generates tokens, prints their ids (or
 * streams their text), and on stderr the speed and the peak memory of the process.
 * --dump-logits writes every step's logits for other tools to compare. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "memra/chat.h"
#include "memra/sampling.h"
#include "memra/tokenizer.h"

static const char help_text[] =
    "usage: memra run [--model F.gguf | --preset P [--dtype D] [--model-seed S]] [--arm ARM]\n"
    "                 [--tokens 1,2,3 | --prompt-ids FILE | --prompt TEXT | --prompt-file FILE |\n"
    "                  --chat MESSAGE] [--parse-specials] [-n N] [--allow-past-context]\n"
    "                 [--temp T [--top-k K] [--top-p P] [--seed S]]\n"
    "                 [--dump-logits FILE]\n"
    "\n"
    "Feeds the prompt tokens (in the arm's prefill chunks: see prefill= in memra-gate --help),\n"
    "then generates N tokens and prints their ids (space-separated) on stdout; on stderr: decode\n"
    "tok/s, ms/token and the peak resident memory of the process.\n"
    "With --prompt or --chat the generated text is streamed to stdout instead, token by token,\n"
    "and generation stops early at the model's end-of-generation tokens.\n"
    "\n" CLI_MODEL_HELP "  --arm ARM            the arm: BACKEND[:key=value,...] (default cpu), e.g. cpu:threads=2\n"
    "                       (--backend ARM: the same)\n"
    "  --tokens LIST        prompt token ids, comma-separated (default: the model's bos token,\n"
    "                       or 0 when it names none)\n"
    "  --prompt-ids FILE    or the prompt token ids from a file (a regular file, at most 1000000\n"
    "                       ids, separated by white space or commas: memra-gate's format)\n"
    "  --prompt TEXT        or a text prompt, tokenized with the file's tokenizer (bos added when\n"
    "                       the file says add_bos_token; special tokens in TEXT are plain text)\n"
    "  --prompt-file FILE   or the text prompt of a file (a regular file, at most 64 MiB, no NUL\n"
    "                       byte; one final newline is dropped), tokenized as --prompt\n"
    "  --chat MESSAGE       or one user message in the file's chat format (ChatML, Llama 3 or\n"
    "                       Gemma: from tokenizer.chat_template, or the architecture when the file\n"
    "                       has none), with the template's default system message if it has one\n"
    "                       and the generation prompt. The template's markers are control tokens;\n"
    "                       the message is plain text: a \"<|im_end|>\" or \"<end_of_turn>\" typed in\n"
    "                       it stays text and cannot close or open a turn\n"
    "                       Exactly one of --tokens, --prompt-ids, --prompt, --prompt-file, --chat.\n"
    "  --parse-specials     read special tokens written in the text of --prompt, --prompt-file or\n"
    "                       --chat as tokens (\"<|im_start|>system\" opens a turn): off by default,\n"
    "                       only for text you wrote yourself\n"
    "  -n, --gen N          tokens to generate (default 64; 0 runs the prompt only; --n-gen too). The\n"
    "                       prompt and N together must fit the model's context length\n"
    "                       (<arch>.context_length)\n"
    "  --allow-past-context run past the model's context length anyway (positions it was not\n"
    "                       trained for: the output is the model's, its quality is not)\n"
    "  --temp T             sample at temperature T, 0 < T <= 1000 (default: greedy, the argmax)\n"
    "  --top-k K            with --temp: keep the K most likely tokens (0: all)\n"
    "  --top-p P            with --temp: nucleus cut, 0 < P <= 1 (1: none)\n"
    "  --seed S             with --temp: the sampling seed (default 1); draws are keyed by\n"
    "                       (seed, position). The weights' seed of a preset is --model-seed.\n"
    "  --dump-logits FILE   write every step's logits: little-endian float32, steps x n_vocab,\n"
    "                       row-major; FILE.json holds {\"n_vocab\", \"steps\", \"tokens\"}, the\n"
    "                       input token of each step. Both are written under private names and\n"
    "                       renamed into place when complete; an interrupted run leaves neither.\n"
    "\n"
    "An output that is one of the input files (--model, --prompt-ids) is refused. A failed write\n"
    "(stdout or a dump: a full disk, a file size limit, a closed stdout) is an error (exit 3).\n";

#define RUN_MAX_TOKENS 1000000u
/* A prompt file longer than this is refused before it is read further: 1000000 ids of up to
 * 20 digits with separators fit, an endless stream does not. */
#define RUN_MAX_PROMPT_BYTES (32ull << 20)
/* A text prompt file: far beyond any context length, short of what a tokenizer could not hold. */
#define RUN_MAX_TEXT_BYTES ((size_t)64 << 20)

/* Reads the prompt ids of a file (memra-gate's format: decimal ids separated by white space or
 * commas), bounded in ids and bytes. The file must be regular: it is checked before it is opened
 * and opened without blocking (a FIFO swapped in between is refused too). */
static int read_prompt_file(const char *cmd, const char *path, int64_t **out, uint32_t *n_out) {
    *out = NULL;
    *n_out = 0;
    memra_error err = {0};
    if (memra_check_regular_input(path, "--prompt-ids", &err) != MEMRA_OK)
        return cli_fail(cmd, &err);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        cli_error(cmd, "--prompt-ids %s: %s", path, fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return CLI_EXIT_ERROR;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "r");
    if (!f) {
        cli_error(cmd, "--prompt-ids %s: %s", path, strerror(errno));
        close(fd);
        return CLI_EXIT_ERROR;
    }
    uint32_t cap = 256, count = 0;
    int64_t *v = malloc(cap * sizeof *v);
    int rc = v ? CLI_EXIT_OK : CLI_EXIT_ERROR;
    if (!v)
        cli_error(cmd, "--prompt-ids %s: out of memory", path);
    uint64_t bytes = 0;
    int c = 0;
    char word[32];
    while (rc == CLI_EXIT_OK) {
        size_t len = 0;
        while ((c = getc(f)) != EOF && (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ','))
            bytes++;
        while (c != EOF && !(c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',')) {
            bytes++;
            if (len < sizeof word)
                word[len] = (char)c;
            len++;
            c = getc(f);
        }
        if (bytes > RUN_MAX_PROMPT_BYTES) {
            cli_error(cmd, "--prompt-ids %s: more than %llu bytes: not a prompt (at most %u ids)", path,
                      RUN_MAX_PROMPT_BYTES, RUN_MAX_TOKENS);
            rc = CLI_EXIT_USAGE;
            break;
        }
        if (len == 0)
            break;
        bool digits = len < sizeof word;
        for (size_t i = 0; digits && i < len; i++)
            digits = word[i] >= '0' && word[i] <= '9';
        unsigned long long id = 0;
        if (digits) {
            word[len] = '\0';
            errno = 0;
            id = strtoull(word, NULL, 10);
        }
        if (!digits || errno || id > INT64_MAX) {
            cli_error(cmd, "--prompt-ids %s: id %u is not a token id (an integer >= 0)", path, count);
            rc = CLI_EXIT_USAGE;
            break;
        }
        if (count == RUN_MAX_TOKENS) {
            cli_error(cmd, "--prompt-ids %s: more than %u ids", path, RUN_MAX_TOKENS);
            rc = CLI_EXIT_USAGE;
            break;
        }
        if (count == cap) {
            int64_t *grown = realloc(v, 2 * (size_t)cap * sizeof *v);
            if (!grown) {
                cli_error(cmd, "--prompt-ids %s: out of memory for %u ids", path, 2 * cap);
                rc = CLI_EXIT_ERROR;
                break;
            }
            v = grown;
            cap *= 2;
        }
        v[count++] = (int64_t)id;
    }
    if (rc == CLI_EXIT_OK && ferror(f)) {
        cli_error(cmd, "--prompt-ids %s: read failed: %s", path, strerror(errno));
        rc = CLI_EXIT_ERROR;
    }
    if (rc == CLI_EXIT_OK && count == 0) {
        cli_error(cmd, "--prompt-ids %s: no token ids in the file", path);
        rc = CLI_EXIT_USAGE;
    }
    fclose(f);
    if (rc != CLI_EXIT_OK) {
        free(v);
        return rc;
    }
    *out = v;
    *n_out = count;
    return CLI_EXIT_OK;
}

/* Parses "1,2,3" into a malloc'd array. */
static bool parse_tokens(const char *cmd, const char *text, int64_t **out, uint32_t *n) {
    *out = NULL;
    *n = 0;
    uint32_t cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    int64_t *t = malloc(cap * sizeof *t);
    if (!t) {
        cli_error(cmd, "out of memory for %u tokens", cap);
        return false;
    }
    const char *p = text;
    for (uint32_t i = 0; i < cap; i++) {
        char *end;
        errno = 0;
        long long v = (*p >= '0' && *p <= '9') ? strtoll(p, &end, 10) : -1;
        if (v < 0 || errno || (*end != ',' && *end != '\0')) {
            cli_error(cmd, "--tokens '%s': expected token ids (integers >= 0) separated by commas", text);
            free(t);
            return false;
        }
        t[i] = v;
        p = end + (*end == ',');
    }
    *out = t;
    *n = cap;
    return true;
}

static bool parse_sampling(const char *cmd, const cli_opt *opts, size_t n_opts, memra_sample_cfg *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->top_p = 1.0f;
    cfg->seed = 1;
    const char *temp = cli_get(opts, n_opts, "--temp"), *top_k = cli_get(opts, n_opts, "--top-k");
    const char *top_p = cli_get(opts, n_opts, "--top-p"), *seed = cli_get(opts, n_opts, "--seed");
    if (!temp && (top_k || top_p || seed)) {
        cli_error(cmd, "%s samples: it needs --temp T", top_k ? "--top-k" : top_p ? "--top-p" : "--seed");
        return false;
    }
    /* memra-gate's ranges: one rule in the core (memra/sampling.h). */
    const char *names[] = {"--temp", "--top-k", "--top-p", "--seed"}, *values[] = {temp, top_k, top_p, seed};
    for (size_t i = 0; i < 4; i++) {
        memra_error err = {0};
        if (values[i] && memra_sample_option(names[i], values[i], cfg, &err) != MEMRA_OK) {
            cli_fail(cmd, &err);
            return false;
        }
    }
    return true;
}

/* Writes n floats little-endian. */
static bool write_f32_le(FILE *f, const float *x, size_t n) {
    unsigned char buf[4096];
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = memra_f32_to_bits(x[i]);
        for (int k = 0; k < 4; k++)
            buf[at++] = (unsigned char)(u >> (8 * k));
        if (at == sizeof buf || i + 1 == n) {
            if (fwrite(buf, 1, at, f) != at)
                return false;
            at = 0;
        }
    }
    return true;
}

/* The dump's metadata into its private file (committed with the logits). */
static bool write_dump_json(const char *cmd, const char *json_path, FILE *f, uint32_t n_vocab, const int64_t *inputs,
                            uint32_t steps) {
    bool ok = fprintf(f, "{\"n_vocab\": %u, \"steps\": %u, \"tokens\": [", n_vocab, steps) > 0;
    for (uint32_t i = 0; ok && i < steps; i++)
        ok = fprintf(f, "%s%lld", i ? ", " : "", (long long)inputs[i]) > 0;
    ok = ok && fprintf(f, "]}\n") > 0;
    if (!ok)
        cli_error(cmd, "cannot write %s: %s", json_path, strerror(errno));
    return ok;
}

typedef struct run_args {
    cli_model_sel sel;
    const char *arm;
    int64_t *prompt;
    uint32_t n_prompt, n_gen;
    memra_sample_cfg sample;
    const char *dump_path;
    char *json_path;         /* dump_path + ".json" */
    const char *prompt_path; /* --prompt-ids */
    const char *text;        /* --prompt, --prompt-file or --chat: the text */
    size_t text_len;
    const char *text_flag; /* which of them */
    char *text_owned;      /* --prompt-file: the file's text */
    bool chat;             /* --chat */
    bool parse_specials;   /* --parse-specials */
    bool past_context;     /* --allow-past-context */
    memra_tokenizer *tok;  /* with text: the file's tokenizer */
} run_args;

/* Text prompts: builds the tokenizer of the session's file and encodes the prompt (--prompt) or
 * the rendered chat message (--chat) into ra->prompt. */
static int text_prompt(const char *cmd, cli_session *ss, run_args *ra) {
    memra_error err = {0};
    if (memra_tokenizer_new(ss->lm->gguf, &ra->tok, &err) != MEMRA_OK)
        return cli_fail(cmd, &err);
    unsigned flags = MEMRA_TOKENIZE_ADD_BOS | (ra->parse_specials ? MEMRA_TOKENIZE_SPECIALS : 0);
    int32_t *ids = NULL;
    size_t n = 0;
    memra_status st;
    if (ra->chat) {
        memra_chat_format fmt;
        const char *source = NULL;
        char *system = NULL;
        st = memra_chat_detect(ss->lm->gguf, ra->tok, &fmt, &source, &system, &err);
        if (st == MEMRA_OK) {
            fprintf(stderr, "memra run: chat format %s, from %s%s%s\n", memra_chat_format_name(fmt), source,
                    system ? ", with its default system message" : "",
                    ra->parse_specials ? "; special tokens in the message are read (--parse-specials)" : "");
            /* The template's markers are control tokens; the message stays text. */
            st = memra_chat_encode(fmt, ra->tok, system, ra->text, flags, &ids, &n, &err);
        }
        free(system);
    } else {
        st = memra_tokenizer_encode(ra->tok, ra->text, ra->text_len, flags, &ids, &n, &err);
    }
    if (st != MEMRA_OK)
        return cli_fail(cmd, &err);
    if (n == 0 || n > RUN_MAX_TOKENS) {
        cli_error(cmd, "%s: %zu tokens: the prompt must have 1 to %u", ra->text_flag, n, RUN_MAX_TOKENS);
        free(ids);
        return CLI_EXIT_USAGE;
    }
    if (!(ra->prompt = malloc(n * sizeof *ra->prompt))) {
        free(ids);
        cli_error(cmd, "out of memory");
        return CLI_EXIT_ERROR;
    }
    for (size_t i = 0; i < n; i++)
        ra->prompt[i] = ids[i];
    ra->n_prompt = (uint32_t)n;
    free(ids);
    return CLI_EXIT_OK;
}

/* Writes n bytes of generated text to stdout and flushes it (the text streams). */
static bool stream_out(const char *cmd, const char *p, size_t n) {
    if (n && fwrite(p, 1, n, stdout) != n) {
        (void)cli_stdout_ok(cmd);
        return false;
    }
    return cli_stdout_ok(cmd);
}

/* The decode loop proper: returns an exit code. */
static int run_decode(const char *cmd, cli_session *ss, const run_args *ra) {
    const memra_model *m = ss->lm->model;
    for (uint32_t i = 0; i < ra->n_prompt; i++) {
        if (ra->prompt[i] >= (int64_t)m->n_vocab) {
            if (ra->prompt_path)
                cli_error(cmd, "--prompt-ids %s: id %u, token %lld, is not below n_vocab %u", ra->prompt_path, i,
                          (long long)ra->prompt[i], m->n_vocab);
            else
                cli_error(cmd, "--tokens: token %lld is not below n_vocab %u", (long long)ra->prompt[i], m->n_vocab);
            return CLI_EXIT_USAGE;
        }
    }
    /* The prompt and the generation must fit the positions the model was trained for. */
    uint64_t positions = (uint64_t)ra->n_prompt + ra->n_gen;
    if (m->n_ctx_train && positions > m->n_ctx_train && !ra->past_context) {
        cli_error(cmd,
                  "the prompt's %u tokens and -n %u make %llu positions, beyond the model's context length %u "
                  "(%s.context_length): shorten them, or pass --allow-past-context",
                  ra->n_prompt, ra->n_gen, (unsigned long long)positions, m->n_ctx_train, m->arch_name);
        return CLI_EXIT_USAGE;
    }
    if (m->n_ctx_train && positions > m->n_ctx_train)
        fprintf(stderr,
                "memra run: warning: %llu positions, past the model's context length %u (--allow-past-context)\n",
                (unsigned long long)positions, m->n_ctx_train);
    uint32_t steps = ra->n_prompt + (ra->n_gen ? ra->n_gen - 1 : 0); /* the last token is not fed back */
    int64_t *seq = malloc(((size_t)ra->n_prompt + ra->n_gen) * sizeof *seq);
    float *logits = ra->dump_path ? malloc((size_t)m->n_vocab * sizeof *logits) : NULL;
    cli_output dump = {.slot = -1}, meta = {.slot = -1};
    memra_arm_state *st = NULL;
    memra_detok_stream *ds = NULL;
    memra_error err = {0};
    int rc = CLI_EXIT_ERROR;
    uint32_t n_out = ra->n_gen; /* tokens generated (fewer when an end-of-generation token came) */
    bool stopped = false;       /* an end-of-generation token came */
    if (!seq || (ra->dump_path && !logits)) {
        cli_error(cmd, "out of memory");
        goto out;
    }
    memcpy(seq, ra->prompt, ra->n_prompt * sizeof *seq);
    if (ra->dump_path && (rc = cli_output_open(cmd, "--dump-logits", ra->dump_path, &dump)) != CLI_EXIT_OK)
        goto out;
    if (ra->dump_path && (rc = cli_output_open(cmd, "--dump-logits (its .json)", ra->json_path, &meta)) != CLI_EXIT_OK)
        goto out;
    rc = CLI_EXIT_ERROR;
    if (memra_arm_state_new(ss->arm, steps + 1, &st, &err) != MEMRA_OK ||
        (ra->tok && memra_detok_stream_new(ra->tok, false, &ds, &err) != MEMRA_OK)) {
        rc = cli_fail(cmd, &err);
        goto out;
    }
    double t0 = cli_now(), t_prompt = t0;
    /* The prompt's unsampled steps go in the arm's prefill chunks (the bits of one step at a
     * time: chunk invariance, which memra-gate proves for a pair prefill=1 / prefill=M); with
     * --dump-logits every step's logits are written, so the prompt steps one at a time, as it does
     * on a backend without a chunked step (where a chunk would be single steps anyway). */
    uint32_t k0 = 0;
    const uint32_t unsampled = ra->n_gen > 0 ? ra->n_prompt - 1 : ra->n_prompt;
    if (!dump.f && unsampled > 1 && memra_arm_prefill(ss->arm) > 1 && memra_arm_prefill_native(ss->arm)) {
        if (memra_arm_prefill_run(st, seq, 0, unsampled, NULL, NULL, NULL, &err) != MEMRA_OK) {
            memra_error_prefix(&err, "prompt steps 0..%u", unsampled - 1);
            rc = cli_fail(cmd, &err);
            goto out;
        }
        k0 = unsampled;
        if (k0 == ra->n_prompt)
            t_prompt = cli_now();
    }
    for (uint32_t k = k0; k < steps; k++) {
        memra_step_result res;
        bool sample = k + 1 >= ra->n_prompt && ra->n_gen > 0;
        if (cli_step(st, seq[k], sample ? &ra->sample : NULL, logits, &res, &err) != MEMRA_OK) {
            memra_error_prefix(&err, "step %u (position %u)", k, k);
            rc = cli_fail(cmd, &err);
            goto out;
        }
        if (sample)
            seq[k + 1] = res.token;
        if (k + 1 == ra->n_prompt)
            t_prompt = cli_now();
        if (dump.f && !write_f32_le(dump.f, logits, m->n_vocab)) {
            cli_error(cmd, "cannot write %s: %s", ra->dump_path, strerror(errno));
            goto out;
        }
        if (sample && ds) { /* text: stream the token, or stop at the end of generation */
            if (memra_tokenizer_is_eog(ra->tok, (int32_t)res.token)) {
                n_out = k + 2 - ra->n_prompt; /* the end token counts as generated, is not printed */
                stopped = true;
                steps = k + 1;
                break;
            }
            const char *piece;
            size_t len;
            if (memra_detok_stream_push(ds, (int32_t)res.token, &piece, &len, &err) != MEMRA_OK) {
                rc = cli_fail(cmd, &err);
                goto out;
            }
            if (!stream_out(cmd, piece, len))
                goto out;
        }
    }
    double t_end = cli_now();
    if (ds) {
        const char *piece;
        size_t len;
        memra_detok_stream_flush(ds, &piece, &len);
        if (!stream_out(cmd, piece, len))
            goto out;
        printf("\n");
    } else {
        for (uint32_t i = 0; i < ra->n_gen; i++)
            printf("%s%lld", i ? " " : "", (long long)seq[ra->n_prompt + i]);
        printf("\n");
    }
    /* The tokens must have reached stdout before the dump is put in place: a run whose output was
     * lost leaves no dump either. */
    if (!cli_stdout_ok(cmd))
        goto out;
    if (dump.f) {
        if (!write_dump_json(cmd, ra->json_path, meta.f, m->n_vocab, seq, steps))
            goto out;
        cli_output *both[] = {&dump, &meta}; /* the logits, then their metadata */
        if ((rc = cli_output_commit(cmd, both, 2)) != CLI_EXIT_OK) {
            unlink(ra->json_path); /* never a stale .json beside a new or missing dump */
            goto out;
        }
        rc = CLI_EXIT_ERROR;
    }

    char b1[32], b2[32], b3[32];
    uint64_t cache = 4ull * m->n_layer * m->n_head_kv * ((uint64_t)m->head_dim + m->head_dim_v) * (steps + 1);
    memra_backend_memory mem;
    bool have_mem = false;
    if (memra_arm_memory(ss->arm, &mem, &have_mem, &err) == MEMRA_OK && have_mem && mem.cache_bytes)
        cache = mem.cache_bytes;
    uint32_t decode_steps = steps - ra->n_prompt;
    double dt = t_end - t_prompt;
    fprintf(stderr, "memra run: %s on %s: prompt %u token%s in %.2f ms", ss->lm->label, memra_arm_text(ss->arm),
            ra->n_prompt, ra->n_prompt == 1 ? "" : "s", (t_prompt - t0) * 1e3);
    if (decode_steps > 0)
        fprintf(stderr, "; decode %u steps in %.2f ms: %.1f tok/s, %.3f ms/token", decode_steps, dt * 1e3,
                decode_steps / dt, dt * 1e3 / decode_steps);
    if (stopped)
        fprintf(stderr, "; stopped by end-of-generation token %lld after %u token%s",
                (long long)seq[ra->n_prompt + n_out - 1], n_out, n_out == 1 ? "" : "s");
    char load[200];
    fprintf(stderr, "\nmemra run: load %s\n", cli_session_load_text(ss, load, sizeof load));
    fprintf(stderr, "memra run: peak RSS %s (model in memory %s + KV cache %s)\n",
            cli_bytes(cli_peak_rss(), b1, sizeof b1),
            cli_bytes(memra_gguf_resident_bytes(ss->lm->gguf), b2, sizeof b2), cli_bytes(cache, b3, sizeof b3));
    rc = CLI_EXIT_OK;
out:
    cli_output_abort(&dump);
    cli_output_abort(&meta);
    memra_detok_stream_free(ds);
    memra_arm_state_free(st);
    free(seq);
    free(logits);
    return rc;
}

int cmd_run(int argc, char **argv) {
    const char *cmd = "run";
    cli_opt opts[] = {CLI_MODEL_OPTS,
                      {"--arm", "--backend", true, NULL},
                      {"--tokens", NULL, true, NULL},
                      {"--prompt-ids", NULL, true, NULL},
                      {"--prompt", NULL, true, NULL},
                      {"--chat", NULL, true, NULL},
                      {"--prompt-file", NULL, true, NULL},
                      {"--parse-specials", NULL, false, NULL},
                      {"--allow-past-context", NULL, false, NULL},
                      {"--n-gen", "-n|--gen", true, NULL},
                      {"--temp", NULL, true, NULL},
                      {"--top-k", NULL, true, NULL},
                      {"--top-p", NULL, true, NULL},
                      {"--seed", NULL, true, NULL},
                      {"--dump-logits", NULL, true, NULL}};
    size_t n_opts = sizeof opts / sizeof opts[0], n_pos;
    bool help;
    int rc = cli_parse(cmd, argc, argv, 1, opts, n_opts, NULL, 0, &n_pos, help_text, &help);
    if (rc != CLI_EXIT_OK || help)
        return rc;
    run_args ra = {.arm = "cpu", .n_gen = 64};
    if (!cli_model_sel_parse(cmd, opts, n_opts, &ra.sel) || !parse_sampling(cmd, opts, n_opts, &ra.sample))
        return CLI_EXIT_USAGE;
    const char *v;
    if ((v = cli_get(opts, n_opts, "--arm")))
        ra.arm = v;
    if ((v = cli_get(opts, n_opts, "--n-gen")) && !cli_u32(cmd, "-n", v, 0, RUN_MAX_TOKENS, &ra.n_gen))
        return CLI_EXIT_USAGE;
    {
        const char *sources[] = {"--tokens", "--prompt-ids", "--prompt", "--chat", "--prompt-file"};
        const char *first = NULL;
        for (size_t i = 0; i < 5; i++) {
            if (!cli_get(opts, n_opts, sources[i]))
                continue;
            if (first) {
                cli_error(cmd, "%s and %s exclude each other: give one prompt source", first, sources[i]);
                return CLI_EXIT_USAGE;
            }
            first = sources[i];
        }
    }
    ra.parse_specials = cli_get(opts, n_opts, "--parse-specials") != NULL;
    ra.past_context = cli_get(opts, n_opts, "--allow-past-context") != NULL;
    if ((ra.text = cli_get(opts, n_opts, "--prompt")))
        ra.text_flag = "--prompt";
    if ((v = cli_get(opts, n_opts, "--chat"))) {
        ra.text = v;
        ra.text_flag = "--chat";
        ra.chat = true;
    }
    const char *text_path = cli_get(opts, n_opts, "--prompt-file");
    if (text_path && !*text_path) {
        cli_error(cmd, "--prompt-file: empty file name");
        return CLI_EXIT_USAGE;
    }
    if (ra.parse_specials && !ra.text && !text_path) {
        cli_error(cmd, "--parse-specials reads text: it needs --prompt, --prompt-file or --chat");
        return CLI_EXIT_USAGE;
    }
    if (ra.text)
        ra.text_len = strlen(ra.text);
    if (ra.text && !*ra.text) {
        cli_error(cmd, "%s: empty text", ra.text_flag);
        return CLI_EXIT_USAGE;
    }
    if ((v = cli_get(opts, n_opts, "--tokens")) && !parse_tokens(cmd, v, &ra.prompt, &ra.n_prompt))
        return CLI_EXIT_USAGE;
    if (ra.n_prompt > RUN_MAX_TOKENS) {
        cli_error(cmd, "--tokens: %u tokens, at most %u", ra.n_prompt, RUN_MAX_TOKENS);
        free(ra.prompt);
        return CLI_EXIT_USAGE;
    }
    ra.prompt_path = cli_get(opts, n_opts, "--prompt-ids");
    if (ra.prompt_path && ra.prompt) {
        cli_error(cmd, "--tokens and --prompt-ids exclude each other: give one");
        free(ra.prompt);
        return CLI_EXIT_USAGE;
    }
    ra.dump_path = cli_get(opts, n_opts, "--dump-logits");
    if ((ra.dump_path && !*ra.dump_path) || (ra.prompt_path && !*ra.prompt_path)) {
        cli_error(cmd, "%s: empty file name", ra.prompt_path && !*ra.prompt_path ? "--prompt-ids" : "--dump-logits");
        free(ra.prompt);
        return CLI_EXIT_USAGE;
    }
    if (ra.dump_path) {
        size_t len = strlen(ra.dump_path);
        if (!(ra.json_path = malloc(len + 6))) {
            cli_error(cmd, "out of memory");
            free(ra.prompt);
            return CLI_EXIT_ERROR;
        }
        memcpy(ra.json_path, ra.dump_path, len);
        memcpy(ra.json_path + len, ".json", 6);
    }
    /* Outputs that are inputs are refused before anything is opened for writing. */
    const char *outs[][2] = {{"--dump-logits", ra.dump_path}, {"--dump-logits (its .json)", ra.json_path}};
    const char *ins[][2] = {{"--model", ra.sel.path}, {"--prompt-ids", ra.prompt_path}, {"--prompt-file", text_path}};
    for (size_t o = 0; o < 2 && rc == CLI_EXIT_OK; o++)
        for (size_t i = 0; i < 3 && rc == CLI_EXIT_OK; i++)
            rc = cli_refuse_same_file(cmd, outs[o][0], outs[o][1], ins[i][0], ins[i][1]);
    if (rc == CLI_EXIT_OK && ra.prompt_path)
        rc = read_prompt_file(cmd, ra.prompt_path, &ra.prompt, &ra.n_prompt);
    if (rc == CLI_EXIT_OK && text_path) {
        memra_error err = {0};
        memra_status st =
            memra_read_text_input(text_path, "--prompt-file", RUN_MAX_TEXT_BYTES, &ra.text_owned, &ra.text_len, &err);
        if (st != MEMRA_OK) {
            rc = cli_fail(cmd, &err);
        } else {
            if (ra.text_len && ra.text_owned[ra.text_len - 1] == '\n') /* the file's last newline */
                ra.text_owned[--ra.text_len] = '\0';
            ra.text = ra.text_owned;
            ra.text_flag = "--prompt-file";
            if (ra.text_len == 0) {
                cli_error(cmd, "--prompt-file %s: empty text", text_path);
                rc = CLI_EXIT_USAGE;
            }
        }
    }
    if (rc != CLI_EXIT_OK) {
        free(ra.prompt);
        free(ra.json_path);
        free(ra.text_owned);
        return rc;
    }
    cli_session ss;
    rc = cli_session_open(cmd, &ra.sel, &ra.arm, 1, &ss);
    if (rc == CLI_EXIT_OK && ra.text)
        rc = text_prompt(cmd, &ss, &ra);
    else if (rc == CLI_EXIT_OK) {
        if (!ra.prompt) { /* the default prompt: bos */
            ra.prompt = malloc(sizeof *ra.prompt);
            if (ra.prompt) {
                ra.prompt[0] = ss.lm->model->bos_id >= 0 ? ss.lm->model->bos_id : 0;
                ra.n_prompt = 1;
            }
        }
        rc = ra.prompt ? CLI_EXIT_OK : CLI_EXIT_ERROR;
    }
    if (rc == CLI_EXIT_OK)
        rc = run_decode(cmd, &ss, &ra);
    if (ss.lm || ss.arm || ss.reg)
        cli_session_close(&ss);
    memra_tokenizer_free(ra.tok);
    free(ra.prompt);
    free(ra.json_path);
    free(ra.text_owned);
    return rc;
}
