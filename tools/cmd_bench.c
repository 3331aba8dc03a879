/* cmd_bench.c: `memra bench`: decode speed of one arm or a grid of them, as llama-bench does: for
 * every arm of --arm A,B,..., every prefix of --prime P1,P2,... and every length of -n N1,N2,...
 * (arms outermost), on one load of the model. A prefix state is primed once per cell with P
 * tokens; each repetition restores it and generates N tokens greedily (the token stays on the
 * device: MEMRA_TOKEN_FROM_DEVICE), with up to the arm's window (window=W) of steps in flight. One
 * markdown table, a row a cell as it is measured: tok/s (mean and standard deviation over
 * repetitions, warm-up excluded), ms/token, GB/s of bytes read per token (weights plus the f32 KV
 * cache up to the position) and the share of the backend's measured ceiling when it offers one;
 * then each arm's device, ceiling and memory. With --jsonl, one record a cell. Every repetition
 * must generate the same tokens: a backend that does not is an error, not a figure. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "memra_commit.h"

static const char help_text[] =
    "usage: memra bench [--arm ARM[,ARM...]] [--model F.gguf | --preset P [--dtype D] [--model-seed S]]\n"
    "                   [--prime P[,P...]] [-n N[,N...]] [--reps R] [--warmup W] [--jsonl FILE]\n"
    "                   [--abba] [--allow-past-context]\n"
    "\n"
    "For every arm, prefix length P and generated length N given (a grid, arms outermost, on one\n"
    "load of the model): primes a prefix of P tokens, then runs W warm-up and R timed repetitions,\n"
    "each restoring the prefix and generating N tokens greedily, with up to the arm's window of steps\n"
    "in flight (window=W, default 1: each step ends before the next begins; window=2 lets the device\n"
    "start a step while the host ends the one before). Prints one markdown table, a row a\n"
    "cell: tok/s (mean and standard deviation), ms/token, GB/s (weights + f32 KV cache read per\n"
    "token) and the share of the backend's measured ceiling where it offers one; then each arm's\n"
    "device, ceiling and memory in use. pp tok/s: the P prompt tokens into a fresh state through\n"
    "the arm's prefill chunks and the logits of the last one read back, nothing sampled (llama-bench's\n"
    "pp: with --prime 512, its pp512).\n"
    "\n" CLI_MODEL_HELP "  --arm ARM[,ARM...]   the arms: BACKEND[:key=value,...] (default cpu); in a list, a new arm\n"
    "                       starts at each item that is a backend name (with or without :keys),\n"
    "                       so --arm cpu:stages=2,splits=1,cuda is two arms (--backend: the same)\n"
    "  --prime P[,P...]     prefix tokens (default 512): bos, then fixed pseudo-random ids\n"
    "  -n, --gen N[,N...]   tokens generated per repetition (default 128; --n-gen too)\n"
    "  --reps R             timed repetitions (default 5)\n"
    "  --warmup W           untimed repetitions first (default 1)\n"
    "  --abba               run the arms forward, then backward (A, B, then B, A; one arm: twice),\n"
    "                       every cell of the grid measured twice on the one load, so the drift of\n"
    "                       the machine between the passes shows and averages out; the second\n"
    "                       pass's rows end in #2 and its records say \"pass\": 2\n"
    "  --allow-past-context let P + N go past the model's context length (<arch>.context_length),\n"
    "                       refused otherwise; the record then says \"past_context\": true\n"
    "  --jsonl FILE         append one JSON line a cell with the figures, commit, device and\n"
    "                       options: whole or not at all, under a lock against other writers of\n"
    "                       FILE; FILE must not be the model. A failed append is an error (exit 3).\n";

#define BENCH_MAX_LIST 64u    /* items of one list (--arm, --prime, -n) */
#define BENCH_MAX_CELLS 4096u /* cells of the grid */

typedef struct bench_args {
    cli_model_sel sel;
    const char *arm;
    uint32_t prime, n_gen, reps, warmup;
    uint32_t pass; /* 1, or 2 for the backward pass of --abba */
    bool past_context; /* --allow-past-context */
    const char *jsonl;
} bench_args;

typedef struct bench_result {
    double *tok_s; /* per timed repetition */
    double *pp_s;  /* prompt tokens per second, per timed repetition */
    double pp_mean, pp_sd;
    uint32_t prefill; /* the arm's prefill chunk */
    double mean, sd, ms_per_token, bytes_per_token, gb_s;
    char device[128];
    double ceiling; /* bytes/s; 0 when not offered */
    char ceiling_how[256];
    memra_backend_memory mem;
    bool have_mem;
} bench_result;

static void progress(uint32_t done, uint32_t total, const char *what) {
    const int width = 30;
    int filled = total ? (int)((uint64_t)done * width / total) : width;
    fprintf(stderr, "\r[%.*s%*s] %u/%u %s   ", filled, "##############################", width - filled, "", done,
            total, what);
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

/* The prefix: bos (or 0), then ids drawn from a fixed counter so every run primes the same. */
static int64_t prime_token(const memra_model *m, uint32_t i) {
    if (i == 0)
        return m->bos_id >= 0 ? m->bos_id : 0;
    return (int64_t)(memra_mix64(0x6d656d7261ull + i) % m->n_vocab);
}

/* pp's timed work: the prompt's P tokens into a fresh state through the arm's prefill chunks (with
 * prefill=1, or a backend without chunks, P single steps), the logits of the last position read
 * into `logits`, nothing sampled: what llama-bench's pp times. Its KV cache is the prefix's
 * (checked after). */
static memra_status pp_prompt(memra_arm_state *s, const int64_t *prompt, uint32_t P, float *logits, memra_error *err) {
    return memra_arm_prefill_run(s, prompt, 0, P, logits, NULL, NULL, err);
}

/* The prompt's P tokens into a state at position 0, as a gate primes: 0..P-2 in the arm's
 * prefill chunks (memra_arm_prefill_run), then the last as one greedy step, whose token the
 * generated steps carry on the device. */
static memra_status prime(memra_arm_state *s, const int64_t *prompt, uint32_t P, memra_error *err) {
    const memra_sample_cfg greedy = {0};
    memra_status st = P > 1 ? memra_arm_prefill_run(s, prompt, 0, P - 1, NULL, NULL, NULL, err) : MEMRA_OK;
    if (st != MEMRA_OK)
        return st;
    memra_step_result res;
    st = cli_step(s, prompt[P - 1], &greedy, NULL, &res, err);
    if (st != MEMRA_OK)
        memra_error_prefix(err, "priming, step %u", P - 1);
    return st;
}

/* memra_arm_run's callback for the generated steps: repetition 1 records the tokens, every later
 * one must generate the same. */
typedef struct gen_check {
    int64_t *first;
    bool record;
    uint32_t rep, prime;
    bool mismatch;
    int64_t got, want;
    uint32_t at;
} gen_check;

static memra_status gen_step(void *user, uint32_t step, const float *logits, const memra_step_result *res,
                             bool drained, memra_error *err) {
    (void)logits;
    (void)drained;
    gen_check *g = user;
    if (g->record) {
        g->first[step] = res->token;
        return MEMRA_OK;
    }
    if (res->token == g->first[step])
        return MEMRA_OK;
    g->mismatch = true;
    g->got = res->token;
    g->want = g->first[step];
    g->at = g->prime + step + 1;
    return memra_fail(err, MEMRA_E_INVALID, "repetition %u is not deterministic", g->rep);
}

static int bench_measure(const char *cmd, cli_session *ss, const bench_args *ba, bench_result *br) {
    const memra_model *m = ss->lm->model;
    const memra_sample_cfg greedy = {0};
    bool tty = isatty(STDERR_FILENO);
    uint32_t capacity = ba->prime + ba->n_gen;
    uint32_t total_reps = ba->warmup + ba->reps;
    memra_arm_state *prefix = NULL, *work = NULL, *pp = NULL;
    int64_t *first = malloc(ba->n_gen * sizeof *first);
    int64_t *prompt = malloc(ba->prime * sizeof *prompt);
    float *pp_logits = malloc((size_t)m->n_vocab * sizeof *pp_logits);
    memra_error err = {0};
    int rc = CLI_EXIT_ERROR;
    if (!first || !prompt || !pp_logits) {
        free(first);
        free(prompt);
        free(pp_logits);
        cli_error(cmd, "out of memory");
        return rc;
    }
    for (uint32_t i = 0; i < ba->prime; i++)
        prompt[i] = prime_token(m, i);
    br->prefill = memra_arm_prefill(ss->arm);
    if (memra_arm_state_new(ss->arm, capacity, &prefix, &err) != MEMRA_OK ||
        memra_arm_state_new(ss->arm, capacity, &work, &err) != MEMRA_OK)
        goto fail;
    if (tty)
        progress(0, ba->prime, "priming");
    if (prime(prefix, prompt, ba->prime, &err) != MEMRA_OK)
        goto fail;
    for (uint32_t r = 0; r < total_reps; r++) {
        /* pp: the prompt again into a fresh state (made before the clock starts), in the arm's
         * prefill chunks with the last position's logits read back (pp_prompt), timed; it must
         * end with the prefix's KV cache */
        memra_arm_state_free(pp);
        pp = NULL;
        if (memra_arm_state_new(ss->arm, ba->prime, &pp, &err) != MEMRA_OK)
            goto fail;
        double p0 = cli_now();
        if (pp_prompt(pp, prompt, ba->prime, pp_logits, &err) != MEMRA_OK) {
            memra_error_prefix(&err, "repetition %u: the prompt", r + 1);
            goto fail;
        }
        double pdt = cli_now() - p0;
        if (r >= ba->warmup)
            br->pp_s[r - ba->warmup] = ba->prime / pdt;
        uint8_t d_pp[32], d_prefix[32];
        if (memra_arm_digest(pp, MEMRA_DIGEST_CACHE, d_pp, &err) != MEMRA_OK ||
            memra_arm_digest(prefix, MEMRA_DIGEST_CACHE, d_prefix, &err) != MEMRA_OK)
            goto fail;
        if (memcmp(d_pp, d_prefix, 32) != 0) {
            cli_error(cmd,
                      "repetition %u primed a KV cache other than the prefix's: the arm '%s' is not "
                      "deterministic, so its timing means nothing",
                      r + 1, ba->arm);
            goto out;
        }
        if (memra_arm_state_restore(work, prefix, &err) != MEMRA_OK) {
            memra_error_prefix(&err, "repetition %u: restoring the prefix", r + 1);
            goto fail;
        }
        /* the generated steps in one windowed pass: with the arm's window=W (default 1) up to W
         * steps are in flight, each reading the token its predecessor sampled on the device */
        gen_check gc = {.first = first, .record = r == 0, .rep = r + 1, .prime = ba->prime};
        double t0 = cli_now();
        if (memra_arm_run(work, NULL, 0, ba->n_gen, &greedy, NULL, gen_step, &gc, &err) != MEMRA_OK) {
            if (gc.mismatch) {
                cli_error(cmd,
                          "repetition %u generated token %lld at position %u, repetition 1 generated %lld: the "
                          "arm '%s' is not deterministic, so its timing means nothing",
                          r + 1, (long long)gc.got, gc.at, (long long)gc.want, ba->arm);
                goto out;
            }
            /* memra_arm_run names the step (0 = the first generated one, at position --prime) */
            memra_error_prefix(&err, "repetition %u, generating positions %u..%u", r + 1, ba->prime,
                               ba->prime + ba->n_gen - 1);
            goto fail;
        }
        double dt = cli_now() - t0;
        if (r >= ba->warmup)
            br->tok_s[r - ba->warmup] = ba->n_gen / dt;
        if (tty)
            progress(r + 1, total_reps, r < ba->warmup ? "warm-up" : "timed");
    }
    /* Memory while both states are live: what a decode at this capacity holds. */
    if (memra_arm_memory(ss->arm, &br->mem, &br->have_mem, &err) != MEMRA_OK)
        br->have_mem = false;
    rc = CLI_EXIT_OK;
    goto out;
fail:
    rc = cli_fail(cmd, &err);
out:
    memra_arm_state_free(pp);
    memra_arm_state_free(work);
    memra_arm_state_free(prefix);
    free(first);
    free(prompt);
    free(pp_logits);
    return rc;
}

static void bench_describe_device(cli_session *ss, bench_result *br) {
    snprintf(br->device, sizeof br->device, "%s", memra_arm_backend_name(ss->arm));
    memra_error err = {0};
    memra_status st = memra_arm_device_name(ss->arm, br->device, sizeof br->device, &err);
    if (st != MEMRA_OK && st != MEMRA_E_UNSUPPORTED)
        snprintf(br->device, sizeof br->device, "%s (device name failed: %.60s)", memra_arm_backend_name(ss->arm),
                 err.msg);
    else if (st != MEMRA_OK)
        snprintf(br->device, sizeof br->device, "%s", memra_arm_backend_name(ss->arm));
    st = memra_arm_measure_ceiling(ss->arm, &br->ceiling, br->ceiling_how, sizeof br->ceiling_how, &err);
    if (st != MEMRA_OK) {
        br->ceiling = 0;
        if (st == MEMRA_E_UNSUPPORTED)
            br->ceiling_how[0] = '\0';
        else
            snprintf(br->ceiling_how, sizeof br->ceiling_how, "measurement failed: %.200s", err.msg);
    }
}

/* Eighths of a byte one stored KV value of the arm takes: its resolved kv key (f16, bf16: 16; q8:
 * 9, a 4-byte scale a block of 32 included) where the backend stores that type; the cpu backend
 * rounds to it but keeps f32 memory (README "KV cache type"), so it reads 32, as every arm
 * without the key. */
static uint32_t bench_kv_eighths(cli_session *ss) {
    const memra_options *o = memra_arm_resolved(ss->arm);
    const char *kv = o ? memra_options_get(o, "kv") : NULL;
    if (!kv || strcmp(memra_arm_backend_name(ss->arm), "cpu") == 0)
        return 32;
    return strcmp(kv, "f16") == 0 || strcmp(kv, "bf16") == 0 ? 16 : strcmp(kv, "q8") == 0 ? 9 : 32;
}

static void bench_stats(cli_session *ss, const memra_model *m, const bench_args *ba, bench_result *br) {
    double sum = 0, sq = 0;
    for (uint32_t i = 0; i < ba->reps; i++)
        sum += br->tok_s[i];
    br->mean = sum / ba->reps;
    for (uint32_t i = 0; i < ba->reps; i++)
        sq += (br->tok_s[i] - br->mean) * (br->tok_s[i] - br->mean);
    br->sd = ba->reps > 1 ? sqrt(sq / (ba->reps - 1)) : 0.0;
    sum = sq = 0;
    for (uint32_t i = 0; i < ba->reps; i++)
        sum += br->pp_s[i];
    br->pp_mean = sum / ba->reps;
    for (uint32_t i = 0; i < ba->reps; i++)
        sq += (br->pp_s[i] - br->pp_mean) * (br->pp_s[i] - br->pp_mean);
    br->pp_sd = ba->reps > 1 ? sqrt(sq / (ba->reps - 1)) : 0.0;
    br->ms_per_token = 1e3 / br->mean;
    double bytes = 0;
    const uint32_t kv8 = bench_kv_eighths(ss);
    for (uint32_t k = 0; k < ba->n_gen; k++) /* the step at position prime+k reads positions [0, prime+k] */
        bytes += (double)cli_step_bytes(m, (uint64_t)ba->prime + k, kv8);
    br->bytes_per_token = bytes / ba->n_gen;
    br->gb_s = br->bytes_per_token * br->mean / 1e9;
}

/* The record is built in memory, then appended whole or not at all (memra_append_line: under an
 * exclusive lock of the file, a failed write truncated back), so two benches appending to one
 * file never interleave and a full disk never leaves half a line. */
static int bench_jsonl(const char *cmd, cli_session *ss, const bench_args *ba, const bench_result *br) {
    char *line = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&line, &len);
    if (!f) {
        cli_error(cmd, "--jsonl %s: cannot build the record: %s", ba->jsonl, strerror(errno));
        return CLI_EXIT_ERROR;
    }
    fprintf(f, "{\"record\": \"bench\", \"commit\": ");
    cli_json_str(f, MEMRA_GIT_COMMIT);
    fprintf(f, ", \"version\": ");
    cli_json_str(f, memra_version());
    fprintf(f, ", \"device\": ");
    cli_json_str(f, br->device);
    fprintf(f, ", \"arm\": ");
    cli_json_str(f, memra_arm_text(ss->arm));
    fprintf(f, ", \"options\": {");
    const memra_options *o = memra_arm_resolved(ss->arm);
    for (uint32_t i = 0; i < o->n; i++) {
        fprintf(f, "%s", i ? ", " : "");
        cli_json_str(f, o->items[i].key);
        fprintf(f, ": ");
        cli_json_str(f, o->items[i].value);
    }
    fprintf(f, "}, \"model\": ");
    cli_json_str(f, ss->lm->label);
    fprintf(f, ", \"weight_bytes\": %" PRIu64 ", \"prime\": %u, \"n\": %u, \"reps\": %u, \"warmup\": %u, \"pass\": %u",
            ss->lm->model->weight_bytes, ba->prime, ba->n_gen, ba->reps, ba->warmup, ba->pass);
    fprintf(f, ", \"context_length\": %u, \"past_context\": %s", ss->lm->model->n_ctx_train,
            (uint64_t)ba->prime + ba->n_gen > ss->lm->model->n_ctx_train ? "true" : "false");
    fprintf(f, ", \"load_mode\": \"%s\", \"load_s\": ", ss->lm->streamed ? "streamed" : "whole");
    cli_json_num(f, "%.4f", ss->lm->open_s + ss->arm_s);
    fprintf(f, ", \"model_open_s\": ");
    cli_json_num(f, "%.4f", ss->lm->open_s);
    fprintf(f, ", \"arm_open_s\": ");
    cli_json_num(f, "%.4f", ss->arm_s);
    fprintf(f, ", \"tok_s\": [");
    for (uint32_t i = 0; i < ba->reps; i++) {
        fprintf(f, "%s", i ? ", " : "");
        cli_json_num(f, "%.4f", br->tok_s[i]);
    }
    fprintf(f, "], \"prefill\": %u, \"pp_tok_s\": [", br->prefill);
    for (uint32_t i = 0; i < ba->reps; i++) {
        fprintf(f, "%s", i ? ", " : "");
        cli_json_num(f, "%.4f", br->pp_s[i]);
    }
    fprintf(f, "], \"pp_tok_s_mean\": ");
    cli_json_num(f, "%.4f", br->pp_mean);
    fprintf(f, ", \"pp_tok_s_sd\": ");
    cli_json_num(f, "%.4f", br->pp_sd);
    fprintf(f, ", \"tok_s_mean\": ");
    cli_json_num(f, "%.4f", br->mean);
    fprintf(f, ", \"tok_s_sd\": ");
    cli_json_num(f, "%.4f", br->sd);
    fprintf(f, ", \"ms_per_token\": ");
    cli_json_num(f, "%.6f", br->ms_per_token);
    fprintf(f, ", \"bytes_per_token\": %.0f, \"gb_s\": ", br->bytes_per_token);
    cli_json_num(f, "%.4f", br->gb_s);
    if (br->ceiling > 0) {
        fprintf(f, ", \"ceiling_gb_s\": ");
        cli_json_num(f, "%.4f", br->ceiling / 1e9);
        fprintf(f, ", \"ceiling_pct\": ");
        cli_json_num(f, "%.2f", 100.0 * br->gb_s * 1e9 / br->ceiling);
    } else
        fprintf(f, ", \"ceiling_gb_s\": null, \"ceiling_pct\": null");
    if (br->have_mem)
        fprintf(f,
                ", \"memory\": {\"weight_bytes\": %" PRIu64 ", \"cache_bytes\": %" PRIu64
                ", \"scratch_bytes\": %" PRIu64 ", \"device_in_use\": %" PRIu64 "}",
                br->mem.weight_bytes, br->mem.cache_bytes, br->mem.scratch_bytes, br->mem.device_in_use);
    fprintf(f, ", \"peak_rss\": %" PRIu64 "}\n", cli_peak_rss());
    bool built = !ferror(f);
    if (fclose(f) != 0 || !built || !line) {
        cli_error(cmd, "--jsonl %s: cannot build the record: out of memory", ba->jsonl);
        free(line);
        return CLI_EXIT_ERROR;
    }
    /* O_NONBLOCK: a FIFO without a reader is an error (ENXIO), never a wait. */
    int fd = open(ba->jsonl, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd < 0) {
        cli_error(cmd, "--jsonl %s: cannot append: %s", ba->jsonl, strerror(errno));
        free(line);
        return CLI_EXIT_ERROR;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    memra_error err = {0};
    int rc = CLI_EXIT_OK;
    if (memra_append_line(fd, ba->jsonl, line, len, &err) != MEMRA_OK)
        rc = cli_fail(cmd, &err);
    if (close(fd) != 0 && rc == CLI_EXIT_OK) {
        cli_error(cmd, "--jsonl %s: write failed at close: %s", ba->jsonl, strerror(errno));
        rc = CLI_EXIT_ERROR;
    }
    free(line);
    return rc;
}

/* Splits an --arm list into arms: a new arm starts at each comma-separated item whose part
 * before its first ':' has no '=' and starts with a letter (a backend name); every other item
 * (key=value, or a list value's element such as the 1 of devices=0,1) continues the arm before
 * it. arms[] point into buf (a copy of text). */
static bool split_arms(const char *cmd, const char *text, char *buf, size_t size, const char **arms, uint32_t *n) {
    *n = 0;
    if (snprintf(buf, size, "%s", text) >= (int)size) {
        cli_error(cmd, "--arm: the list is too long");
        return false;
    }
    char *start = buf;
    for (char *p = buf;; p++) {
        if (*p != ',' && *p != '\0')
            continue;
        char *next = *p ? p + 1 : NULL;
        bool new_arm = false;
        if (next) {
            const char *colon = strchr(next, ':'), *comma = strchr(next, ',');
            size_t head = colon && (!comma || colon < comma) ? (size_t)(colon - next)
                                                             : (comma ? (size_t)(comma - next) : strlen(next));
            new_arm =
                ((next[0] >= 'a' && next[0] <= 'z') || (next[0] >= 'A' && next[0] <= 'Z')) && !memchr(next, '=', head);
        }
        if (!next || new_arm) {
            if (*n == BENCH_MAX_LIST) {
                cli_error(cmd, "--arm: more than %u arms", BENCH_MAX_LIST);
                return false;
            }
            if (next)
                *p = '\0';
            if (!*start) {
                cli_error(cmd, "--arm '%s': an empty arm", text);
                return false;
            }
            arms[(*n)++] = start;
            if (!next)
                break;
            start = next;
        }
    }
    return true;
}

/* A comma list of integers in [min, max]. */
static bool parse_list(const char *cmd, const char *opt, const char *text, uint32_t min, uint32_t max, uint32_t *out,
                       uint32_t *n) {
    *n = 0;
    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (*n == BENCH_MAX_LIST || len >= sizeof item) {
            cli_error(cmd, "%s '%s': %s", opt, text,
                      *n == BENCH_MAX_LIST ? "more than 64 values" : "expected integers separated by commas");
            return false;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (!cli_u32(cmd, opt, item, min, max, &out[*n]))
            return false;
        (*n)++;
        if (!comma)
            return true;
        p = comma + 1;
    }
}

/* The table's header, once, before its first row. */
static void table_header(const char *model) {
    printf("model: %s\n\n", model);
    printf("| %-28s | %6s | %12s | %6s | %12s | %10s | %9s | %8s | %10s |\n", "arm", "prime", "pp tok/s", "n", "tok/s",
           "sd", "ms/token", "GB/s", "% ceiling");
    printf(
        "| %.28s | -----: | -----------: | -----: | -----------: | ---------: | --------: | -------: | ---------: |\n",
        "----------------------------");
}

static void table_row(const char *arm, const bench_args *ba, const bench_result *br) {
    char pct[32] = "n/a";
    if (br->ceiling > 0)
        snprintf(pct, sizeof pct, "%.1f", 100.0 * br->gb_s * 1e9 / br->ceiling);
    printf("| %-28s | %6u | %12.2f | %6u | %12.2f | %10.2f | %9.3f | %8.2f | %10s |\n", arm, ba->prime, br->pp_mean,
           ba->n_gen, br->mean, br->sd, br->ms_per_token, br->gb_s, pct);
    fflush(stdout);
}

/* What the table leaves out, per arm: device, ceiling, memory (of its last cell). */
typedef struct bench_arm_note {
    char arm[256], device[128], ceiling_how[256];
    double ceiling;
    memra_backend_memory mem;
    bool have_mem;
    char load[200];
} bench_arm_note;

static void print_notes(const bench_arm_note *notes, uint32_t n, const bench_args *ba) {
    char b1[32], b2[32], b3[32], b4[32];
    printf("\n%u repetitions (+%u warm-up) a cell; GB/s: weights + f32 KV cache read per token\n", ba->reps,
           ba->warmup);
    for (uint32_t i = 0; i < n; i++) {
        const bench_arm_note *a = &notes[i];
        if (n > 1)
            printf("arm %s:\n", a->arm);
        printf("device:       %s\n", a->device);
        if (a->ceiling > 0)
            printf("ceiling:      %.2f GB/s measured (%s)\n", a->ceiling / 1e9, a->ceiling_how);
        else
            printf("ceiling:      %s\n", a->ceiling_how[0] ? a->ceiling_how : "not offered by this backend");
        if (a->have_mem)
            printf("memory:       weights %s, KV caches %s (prefix + working state), scratch %s, device in use %s\n",
                   cli_bytes(a->mem.weight_bytes, b1, sizeof b1), cli_bytes(a->mem.cache_bytes, b2, sizeof b2),
                   cli_bytes(a->mem.scratch_bytes, b3, sizeof b3),
                   a->mem.device_in_use ? cli_bytes(a->mem.device_in_use, b4, sizeof b4) : "n/a");
        else
            printf("memory:       not reported by this backend\n");
        printf("load:         %s\n", a->load);
    }
    printf("peak RSS:     %s\n", cli_bytes(cli_peak_rss(), b1, sizeof b1));
}

/* Every arm's syntax, before the model is loaded or anything is measured: a typo in the last arm
 * of a grid is a usage error at once, not after the first arms ran. */
static bool precheck_arms(const char *cmd, const char *const *arms, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        char backend[MEMRA_BACKEND_NAME_MAX];
        memra_options o;
        memra_error err = {0};
        if (memra_arm_parse(arms[i], backend, &o, &err) != MEMRA_OK) {
            cli_fail(cmd, &err);
            return false;
        }
        for (uint32_t k = 0; k < i; k++)
            if (strcmp(arms[k], arms[i]) == 0) {
                cli_error(cmd, "--arm: '%s' is given twice", arms[i]);
                return false;
            }
    }
    return true;
}

int cmd_bench(int argc, char **argv) {
    const char *cmd = "bench";
    cli_opt opts[] = {CLI_MODEL_OPTS,
                      {"--arm", "--backend", true, NULL},
                      {"--prime", NULL, true, NULL},
                      {"--n-gen", "-n|--gen", true, NULL},
                      {"--reps", NULL, true, NULL},
                      {"--warmup", NULL, true, NULL},
                      {"--jsonl", NULL, true, NULL},
                      {"--abba", NULL, false, NULL},
                      {"--allow-past-context", NULL, false, NULL}};
    size_t n_opts = sizeof opts / sizeof opts[0], n_pos;
    bool help;
    int rc = cli_parse(cmd, argc, argv, 1, opts, n_opts, NULL, 0, &n_pos, help_text, &help);
    if (rc != CLI_EXIT_OK || help)
        return rc;
    bench_args ba = {.arm = "cpu", .prime = 512, .n_gen = 128, .reps = 5, .warmup = 1, .pass = 1};
    if (!cli_model_sel_parse(cmd, opts, n_opts, &ba.sel))
        return CLI_EXIT_USAGE;
    static char arm_buf[8192];
    const char *arms[BENCH_MAX_LIST];
    uint32_t primes[BENCH_MAX_LIST] = {512}, gens[BENCH_MAX_LIST] = {128}, n_arms = 1, n_primes = 1, n_gens = 1;
    arms[0] = "cpu";
    const char *v;
    if ((v = cli_get(opts, n_opts, "--arm")) && !split_arms(cmd, v, arm_buf, sizeof arm_buf, arms, &n_arms))
        return CLI_EXIT_USAGE;
    if (((v = cli_get(opts, n_opts, "--prime")) && !parse_list(cmd, "--prime", v, 1, 1000000, primes, &n_primes)) ||
        ((v = cli_get(opts, n_opts, "--n-gen")) && !parse_list(cmd, "-n", v, 1, 1000000, gens, &n_gens)) ||
        ((v = cli_get(opts, n_opts, "--reps")) && !cli_u32(cmd, "--reps", v, 1, 100000, &ba.reps)) ||
        ((v = cli_get(opts, n_opts, "--warmup")) && !cli_u32(cmd, "--warmup", v, 0, 100000, &ba.warmup)))
        return CLI_EXIT_USAGE;
    ba.past_context = cli_get(opts, n_opts, "--allow-past-context") != NULL;
    const uint32_t passes = cli_get(opts, n_opts, "--abba") ? 2 : 1;
    if ((uint64_t)passes * n_arms * n_primes * n_gens > BENCH_MAX_CELLS) {
        cli_error(cmd, "%u arms x %u prefixes x %u lengths%s is more than %u cells", n_arms, n_primes, n_gens,
                  passes > 1 ? " x 2 passes (--abba)" : "", BENCH_MAX_CELLS);
        return CLI_EXIT_USAGE;
    }
    if (!precheck_arms(cmd, arms, n_arms))
        return CLI_EXIT_USAGE;
    ba.jsonl = cli_get(opts, n_opts, "--jsonl");
    if (ba.jsonl && !*ba.jsonl) {
        cli_error(cmd, "--jsonl: empty file name");
        return CLI_EXIT_USAGE;
    }
    /* The record file must not be the model: refused before anything is opened for writing. */
    if ((rc = cli_refuse_same_file(cmd, "--jsonl", ba.jsonl, "--model", ba.sel.path)) != CLI_EXIT_OK)
        return rc;
    bench_result br = {0};
    bench_arm_note *notes = calloc(n_arms, sizeof *notes);
    br.tok_s = calloc(ba.reps, sizeof *br.tok_s);
    br.pp_s = calloc(ba.reps, sizeof *br.pp_s);
    if (!br.tok_s || !br.pp_s || !notes) {
        cli_error(cmd, "out of memory");
        free(br.tok_s);
        free(br.pp_s);
        free(notes);
        return CLI_EXIT_ERROR;
    }
    cli_session ss;
    rc = cli_session_open(cmd, &ba.sel, (const char *const *)arms, n_arms, &ss);
    /* A plugin no manifest declares, in any arm of the grid: a usage error before anything runs. */
    for (uint32_t a = 1; a < n_arms && rc == CLI_EXIT_OK; a++)
        if (cli_arm_names_unknown_plugin(ss.reg, arms[a]))
            rc = cli_session_rearm(cmd, &ss, arms[a]); /* fails, saying which plugin and what was found */
    if (rc == CLI_EXIT_OK) {
        /* Every cell of the grid within the model's context length, before anything runs. */
        const memra_model *m = ss.lm->model;
        uint32_t max_p = 0, max_g = 0;
        for (uint32_t p = 0; p < n_primes; p++)
            max_p = primes[p] > max_p ? primes[p] : max_p;
        for (uint32_t g = 0; g < n_gens; g++)
            max_g = gens[g] > max_g ? gens[g] : max_g;
        uint64_t positions = (uint64_t)max_p + max_g;
        if (m->n_ctx_train && positions > m->n_ctx_train && !ba.past_context) {
            cli_error(cmd,
                      "--prime %u and -n %u make %llu positions, beyond the model's context length %u "
                      "(%s.context_length): lower them, or pass --allow-past-context",
                      max_p, max_g, (unsigned long long)positions, m->n_ctx_train, m->arch_name);
            rc = CLI_EXIT_USAGE;
        }
    }
    bool header = false;
    uint32_t noted = 0;
    /* The arms in order (--abba: then in reverse); an arm runs on from its previous position
     * without a new open only where it repeats at once (the turn of A, B, B, A). */
    for (uint32_t k = 0; k < passes * n_arms && rc == CLI_EXIT_OK; k++) {
        const uint32_t a = k < n_arms ? k : 2 * n_arms - 1 - k, prev = k == 0 ? 0 : k - 1 < n_arms ? k - 1 : 2 * n_arms - k;
        if (k > 0 && a != prev && (rc = cli_session_rearm(cmd, &ss, arms[a])) != CLI_EXIT_OK)
            break;
        ba.arm = arms[a];
        ba.pass = k < n_arms ? 1 : 2;
        bench_arm_note *note = ba.pass == 1 ? &notes[noted++] : &notes[a]; /* the second pass: the same note */
        if (ba.pass == 1) {
            snprintf(note->arm, sizeof note->arm, "%s", memra_arm_text(ss.arm));
            cli_session_load_text(&ss, note->load, sizeof note->load);
        }
        for (uint32_t p = 0; p < n_primes && rc == CLI_EXIT_OK; p++)
            for (uint32_t g = 0; g < n_gens && rc == CLI_EXIT_OK; g++) {
                ba.prime = primes[p];
                ba.n_gen = gens[g];
                memset(br.tok_s, 0, ba.reps * sizeof *br.tok_s);
                if ((rc = bench_measure(cmd, &ss, &ba, &br)) != CLI_EXIT_OK)
                    break;
                if (p == 0 && g == 0) /* the device and its ceiling: once an arm */
                    bench_describe_device(&ss, &br);
                bench_stats(&ss, ss.lm->model, &ba, &br);
                if (!header) {
                    table_header(ss.lm->label);
                    header = true;
                }
                char label[300];
                snprintf(label, sizeof label, "%s%s", memra_arm_text(ss.arm), ba.pass == 2 ? " #2" : "");
                table_row(label, &ba, &br);
                snprintf(note->device, sizeof note->device, "%s", br.device);
                snprintf(note->ceiling_how, sizeof note->ceiling_how, "%s", br.ceiling_how);
                note->ceiling = br.ceiling;
                note->mem = br.mem;
                note->have_mem = br.have_mem;
                /* The row must have reached stdout before the record says the run happened. */
                if (!cli_stdout_ok(cmd))
                    rc = CLI_EXIT_ERROR;
                else if (ba.jsonl)
                    rc = bench_jsonl(cmd, &ss, &ba, &br);
            }
    }
    if (rc == CLI_EXIT_OK) {
        print_notes(notes, noted, &ba);
        if (!cli_stdout_ok(cmd))
            rc = CLI_EXIT_ERROR;
    }
    if (ss.lm)
        cli_session_close(&ss);
    free(br.tok_s);
    free(br.pp_s);
    free(notes);
    return rc;
}
