/* gate_setup.c: what memra-gate loads and opens before its phases run: the prompt ids, and the
 * two arms on the one model load (with no arms given, the pair it picks). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gate.h"
#include "memra/fileio.h"
#include "memra/op.h"
#include "memra/tokenizer.h"

int gate_exit_for(memra_status st) { return st == MEMRA_E_INVALID ? GATE_EXIT_USAGE : GATE_EXIT_RUNTIME; }

/* ------------------------------------------------------------------------------------------ */
/* Prompt                                                                                      */

/* The bytes a prompt file may hold: GATE_MAX_STEPS ids of up to 16 digits and a separator each,
 * with room to spare. A file that goes on beyond (a file still growing, a stream that never
 * ends) is refused, naming it. */
#define GATE_PROMPT_MAX_BYTES (64ull << 20)

/* The next byte, EOF at the end, or EOF with *over set beyond GATE_PROMPT_MAX_BYTES. */
static int next_byte(FILE *f, uint64_t *bytes, bool *over) {
    if (*bytes >= GATE_PROMPT_MAX_BYTES) {
        *over = true;
        return EOF;
    }
    int c = fgetc(f);
    *bytes += c != EOF;
    return c;
}

static memra_status read_prompt(const char *path, uint32_t n_vocab, uint32_t **ids, uint32_t *n, memra_error *err) {
    /* A FIFO, a device or a directory is refused before anything blocks on it. */
    memra_error check = {0};
    if (memra_check_regular_input(path, "prompt ids file", &check) != MEMRA_OK)
        return memra_fail(err, MEMRA_E_INVALID, "--prompt-ids: %s", check.msg);
    FILE *f = fopen(path, "r");
    if (!f)
        return memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s: cannot open: %s", path, strerror(errno));
    uint64_t bytes = 0;
    bool over = false;
    uint32_t cap = 256, count = 0;
    uint32_t *v = malloc(cap * sizeof *v);
    memra_status st = v ? MEMRA_OK : memra_fail(err, MEMRA_E_NOMEM, "out of memory for prompt ids");
    char word[64];
    int c = 0;
    while (st == MEMRA_OK && c != EOF) {
        size_t len = 0;
        while ((c = next_byte(f, &bytes, &over)) != EOF && (isspace(c) || c == ','))
            ;
        while (c != EOF && !isspace(c) && c != ',') {
            if (len + 1 < sizeof word)
                word[len++] = (char)c;
            else
                len = sizeof word; /* too long: reported below */
            c = next_byte(f, &bytes, &over);
        }
        if (over) {
            st = memra_fail(err, MEMRA_E_INVALID,
                            "--prompt-ids %s: more than %llu bytes (%u ids read): not a prompt ids file, or one "
                            "that does not end",
                            path, (unsigned long long)GATE_PROMPT_MAX_BYTES, count);
            break;
        }
        if (len == 0)
            break;
        if (len >= sizeof word) {
            st = memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s: id %u is too long", path, count);
            break;
        }
        if (memchr(word, '\0', len)) {
            st = memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s: id %u holds a NUL byte", path, count);
            break;
        }
        word[len] = '\0';
        char *end = NULL;
        errno = 0;
        unsigned long long id = isdigit((unsigned char)word[0]) ? strtoull(word, &end, 10) : 0;
        if (!end || end != word + len || errno || id >= n_vocab) {
            st = memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s: id %u '%s' is not a token id below n_vocab %u",
                            path, count, word, n_vocab);
            break;
        }
        if (count == cap) {
            uint32_t *grown = cap < GATE_MAX_STEPS ? realloc(v, 2 * (size_t)cap * sizeof *v) : NULL;
            if (!grown) {
                st = memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s: more than %u ids", path, cap);
                break;
            }
            v = grown;
            cap *= 2;
        }
        v[count++] = (uint32_t)id;
    }
    if (st == MEMRA_OK && ferror(f))
        st = memra_fail(err, MEMRA_E_IO, "--prompt-ids %s: read error", path);
    if (st == MEMRA_OK && count == 0)
        st = memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s: no token ids in the file", path);
    fclose(f);
    if (st != MEMRA_OK) {
        free(v);
        return st;
    }
    *ids = v;
    *n = count;
    return MEMRA_OK;
}

/* A text prompt file: far beyond any context length, short of what a tokenizer could not hold. */
#define GATE_PROMPT_TEXT_MAX_BYTES ((size_t)64 << 20)

/* --prompt or --prompt-file: the text's tokens under the tokenizer of the loaded model (the copy
 * that was read and hashed once: the file is not opened again), bos as the file says, special
 * tokens written in the text plain text; each below n_vocab. */
static memra_status text_prompt(gate_config *cfg, const memra_loaded_model *lm, uint32_t **out, uint32_t *n_out,
                                memra_error *err) {
    *out = NULL;
    *n_out = 0;
    const char *flag = cfg->prompt_text ? "--prompt" : "--prompt-file";
    uint32_t n_vocab = lm->model->n_vocab;
    char *file_text = NULL;
    size_t len = 0;
    const char *text = cfg->prompt_text;
    memra_status st = MEMRA_OK;
    if (!text) {
        st =
            memra_read_text_input(cfg->prompt_file, "--prompt-file", GATE_PROMPT_TEXT_MAX_BYTES, &file_text, &len, err);
        if (st != MEMRA_OK)
            return st;
        if (len && file_text[len - 1] == '\n') /* the file's last newline */
            file_text[--len] = '\0';
        cfg->prompt_file_bytes = len;
        text = file_text;
        if (len == 0) {
            free(file_text);
            return memra_fail(err, MEMRA_E_INVALID, "--prompt-file %s: empty text", cfg->prompt_file);
        }
    } else {
        len = strlen(text);
    }
    memra_tokenizer *t = NULL;
    st = memra_tokenizer_new(lm->gguf, &t, err);
    if (st != MEMRA_OK) {
        free(file_text);
        memra_error_prefix(err, "%s", flag);
        return st;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    st = memra_tokenizer_encode(t, text, len, MEMRA_TOKENIZE_ADD_BOS, &ids, &n, err);
    memra_tokenizer_free(t);
    free(file_text);
    if (st != MEMRA_OK)
        return st;
    if (n == 0 || n > GATE_MAX_STEPS) {
        free(ids);
        return memra_fail(err, MEMRA_E_INVALID, "%s: %zu tokens: the prompt must have 1 to %u", flag, n,
                          (unsigned)GATE_MAX_STEPS);
    }
    uint32_t *v = malloc(n * sizeof *v);
    if (!v) {
        free(ids);
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory for %zu prompt ids", n);
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= n_vocab) {
            memra_fail(err, MEMRA_E_FORMAT, "%s: token %zu is id %d, not below the model's n_vocab %u", flag, i,
                       (int)ids[i], n_vocab);
            free(ids);
            free(v);
            return MEMRA_E_FORMAT;
        }
        v[i] = (uint32_t)ids[i];
    }
    free(ids);
    *out = v;
    *n_out = (uint32_t)n;
    return MEMRA_OK;
}

void gate_eog_set(gate_ctx *ctx, const memra_loaded_model *lm) {
    ctx->n_eog = 0;
    memra_tokenizer *t = NULL;
    if (memra_gguf_find(lm->gguf, "tokenizer.ggml.model") && memra_tokenizer_new(lm->gguf, &t, NULL) == MEMRA_OK) {
        const int32_t *ids = NULL;
        uint32_t n = memra_tokenizer_eog(t, &ids);
        for (uint32_t i = 0; i < n && ctx->n_eog < sizeof ctx->eog / sizeof ctx->eog[0]; i++)
            ctx->eog[ctx->n_eog++] = ids[i];
        memra_tokenizer_free(t);
    } else if (lm->model->eos_id >= 0) {
        ctx->eog[ctx->n_eog++] = (int32_t)lm->model->eos_id;
    }
}

memra_status gate_load_prompt(gate_config *cfg, const memra_loaded_model *lm, uint32_t **prompt, uint8_t sha[32],
                              int *exit_code, memra_error *err) {
    uint32_t n_vocab = lm->model->n_vocab;
    uint32_t *ids = NULL, n = 0;
    memra_status st = MEMRA_OK;
    *prompt = NULL;
    if (cfg->prompt_text || cfg->prompt_file) {
        const char *flag = cfg->prompt_text ? "--prompt" : "--prompt-file";
        if ((st = text_prompt(cfg, lm, &ids, &n, err)) != MEMRA_OK) {
            *exit_code = gate_exit_for(st);
            return st;
        }
        cfg->prompt_tokens = n;
        if (cfg->prime_given && cfg->prime != n)
            st = memra_fail(err, MEMRA_E_INVALID, "%s has %u token%s, but --prime is %u: give no --prime, or %u", flag,
                            n, n == 1 ? "" : "s", cfg->prime, n);
        else if ((uint64_t)n + cfg->gen > GATE_MAX_STEPS)
            st = memra_fail(err, MEMRA_E_INVALID, "%s has %u tokens: plus --gen %u is more than %u steps", flag, n,
                            cfg->gen, GATE_MAX_STEPS);
        cfg->prime = n;
        if (st != MEMRA_OK) {
            free(ids);
            *exit_code = GATE_EXIT_USAGE;
            return st;
        }
    } else if (cfg->prompt_ids_path) {
        if ((st = read_prompt(cfg->prompt_ids_path, n_vocab, &ids, &n, err)) != MEMRA_OK) {
            *exit_code = gate_exit_for(st);
            return st;
        }
        if (!cfg->prime_given)
            cfg->prime = n;
        if (n < cfg->prime)
            st = memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s holds %u ids, fewer than --prime %u",
                            cfg->prompt_ids_path, n, cfg->prime);
        /* The file may have set prime after the command line's step limit was checked. */
        else if ((uint64_t)cfg->prime + cfg->gen > GATE_MAX_STEPS)
            st =
                memra_fail(err, MEMRA_E_INVALID, "--prompt-ids %s sets --prime %u: plus --gen %u is more than %u steps",
                           cfg->prompt_ids_path, cfg->prime, cfg->gen, GATE_MAX_STEPS);
        if (st != MEMRA_OK) {
            free(ids);
            *exit_code = GATE_EXIT_USAGE;
            return st;
        }
    } else {
        ids = malloc((size_t)cfg->prime * sizeof *ids);
        if (!ids) {
            *exit_code = GATE_EXIT_RUNTIME;
            return memra_fail(err, MEMRA_E_NOMEM, "out of memory for %u prompt ids", cfg->prime);
        }
        for (uint32_t i = 0; i < cfg->prime; i++)
            ids[i] = (uint32_t)((100u + (7ull * i) % 900u) % n_vocab);
    }
    memra_sha256_tokens(ids, cfg->prime, sha);
    *prompt = ids;
    return MEMRA_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Arms                                                                                        */

static bool registry_has(memra_registry *r, const char *name, memra_plugin_kind kind) {
    for (uint32_t i = 0; i < memra_registry_count(r); i++) {
        const memra_registry_entry *e = memra_registry_entry_at(r, i);
        if (e->kind == (uint32_t)kind && e->name && strcmp(e->name, name) == 0)
            return true;
    }
    return false;
}

/* The plugins an arm string names: its backend, and the placement, collective and op plugins of its keys, each
 * one the registry found (an unknown name is a usage error naming the flag, the name and the
 * names there are). */
static memra_status known_plugin(memra_registry *r, const char *flag, const char *text, const char *name,
                                 memra_plugin_kind kind, memra_error *err) {
    if (!r || registry_has(r, name, kind))
        return MEMRA_OK;
    char names[512] = "";
    size_t used = 0;
    for (uint32_t i = 0; i < memra_registry_count(r) && used + 1 < sizeof names; i++) {
        const memra_registry_entry *e = memra_registry_entry_at(r, i);
        if (e->kind == (uint32_t)kind && e->name && *e->name && e->state != MEMRA_ENTRY_SHADOWED)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", e->name);
    }
    return memra_fail(err, MEMRA_E_INVALID, "--%s %s: unknown %s '%s' (found: %s)", flag, text,
                      memra_plugin_kind_name(kind), name, names[0] ? names : "none");
}

static memra_status precheck_arm(const char *name, const char *text, memra_registry *r, memra_error *err) {
    char backend[MEMRA_BACKEND_NAME_MAX];
    memra_options opts;
    memra_status st = memra_arm_parse(text, backend, &opts, err);
    if (st != MEMRA_OK) {
        memra_error_prefix(err, "--%s", name);
        return st;
    }
    if ((st = known_plugin(r, name, text, backend, MEMRA_PLUGIN_BACKEND, err)) != MEMRA_OK)
        return st;
    for (uint32_t i = 0; i < opts.n && i < MEMRA_OPT_MAX; i++) {
        const char *key = opts.items[i].key, *value = opts.items[i].value;
        if (strcmp(key, MEMRA_ARM_KEY_PLACEMENT) == 0)
            st = known_plugin(r, name, text, value, MEMRA_PLUGIN_PLACEMENT, err);
        else if (strcmp(key, "collective") == 0) {
            char coll[MEMRA_OPT_VALUE_MAX]; /* NAME[:MODE | :KEY=VALUE]: the plugin is NAME */
            if (!memra_collective_value_name(value, coll, sizeof coll))
                st = memra_fail(err, MEMRA_E_INVALID, "--%s %s: collective=%s names no plugin", name, text, value);
            else
                st = known_plugin(r, name, text, coll, MEMRA_PLUGIN_COLLECTIVE, err);
        } else if (strncmp(key, MEMRA_OP_KEY_PREFIX, strlen(MEMRA_OP_KEY_PREFIX)) == 0) {
            char op[MEMRA_OP_NAME_MAX]; /* op.KIND=NAME[:KEY=VALUE...]: the plugin is NAME */
            size_t n = strcspn(value, ":,");
            if (n > 0 && n < sizeof op && strcmp(value, MEMRA_OP_BUILTIN) != 0) {
                memcpy(op, value, n);
                op[n] = '\0';
                st = known_plugin(r, name, text, op, MEMRA_PLUGIN_OP, err);
            } /* else the backend says what is malformed */
        }
        if (st != MEMRA_OK)
            return st;
    }
    return MEMRA_OK; /* keys and values (window included): memra_arm_precheck, next in load() */
}

memra_status gate_precheck_arms(const gate_config *cfg, memra_registry *r, memra_error *err) {
    if (!cfg->arm_a)
        return MEMRA_OK; /* the gate picks them */
    memra_status st = precheck_arm("a", cfg->arm_a, r, err);
    return st == MEMRA_OK ? precheck_arm("b", cfg->arm_b, r, err) : st;
}

static memra_status open_arm(memra_registry *r, const memra_loaded_model *lm, const char *name, const char *text,
                             gate_arm *out, int *exit_code, memra_error *err) {
    out->name = name;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memra_status st = memra_arm_open(r, lm->model, text, name, NULL, 0, &out->arm, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out->open_s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (st != MEMRA_OK) {
        char backend[MEMRA_BACKEND_NAME_MAX];
        memra_options opts;
        bool unknown = st == MEMRA_E_PLUGIN && memra_arm_parse(text, backend, &opts, NULL) == MEMRA_OK &&
                       !registry_has(r, backend, MEMRA_PLUGIN_BACKEND);
        *exit_code = unknown ? GATE_EXIT_USAGE : gate_exit_for(st);
        memra_error_prefix(err, "--%s", name);
        return st;
    }
    out->window = memra_arm_window(out->arm);
    out->have_mem_open = false;
    if (memra_arm_memory(out->arm, &out->mem_open, &out->have_mem_open, NULL) != MEMRA_OK)
        out->have_mem_open = false;
    return MEMRA_OK;
}

/* No arms given: cuda against cuda-graph where both plugins are present and both arms open (a
 * CUDA device), otherwise cpu against cpu:stages=2. The arms layer has no device count of a
 * backend without opening it, so the pair is tried by opening it. */
static memra_status pick_and_open(gate_ctx *ctx, memra_registry *r, gate_config *cfg, int *exit_code,
                                  memra_error *err) {
    cfg->auto_arms = true;
    const char *why = NULL;
    memra_error tried = {0};
    int tried_exit = 0;
    if (!registry_has(r, "cuda", MEMRA_PLUGIN_BACKEND))
        why = "no 'cuda' backend plugin";
    else if (!registry_has(r, "cuda-graph", MEMRA_PLUGIN_BACKEND))
        why = "no 'cuda-graph' backend plugin";
    else if (open_arm(r, ctx->lm, "a", "cuda", &ctx->a, &tried_exit, &tried) != MEMRA_OK ||
             open_arm(r, ctx->lm, "b", "cuda-graph", &ctx->b, &tried_exit, &tried) != MEMRA_OK)
        why = tried.msg[0] ? tried.msg : "the cuda arms did not open";
    if (!why) {
        cfg->arm_a = "cuda";
        cfg->arm_b = "cuda-graph";
        snprintf(cfg->auto_reason, sizeof cfg->auto_reason,
                 "a CUDA device and the cuda and cuda-graph plugins are present");
    } else {
        gate_close_arms(ctx);
        cfg->arm_a = "cpu";
        cfg->arm_b = "cpu:stages=2";
        snprintf(cfg->auto_reason, sizeof cfg->auto_reason, "cuda against cuda-graph unavailable (%.200s)", why);
    }
    if (!cfg->quiet)
        fprintf(stderr, "memra-gate: no arms given: --a %s --b %s (%s)\n", cfg->arm_a, cfg->arm_b, cfg->auto_reason);
    if (why) {
        memra_status st = open_arm(r, ctx->lm, "a", cfg->arm_a, &ctx->a, exit_code, err);
        return st == MEMRA_OK ? open_arm(r, ctx->lm, "b", cfg->arm_b, &ctx->b, exit_code, err) : st;
    }
    return MEMRA_OK;
}

/* An arm's resolved configuration as text, without the window key (how many steps are kept in
 * flight changes how the arm is driven, not what it computes). */
static void resolved_without_window(const gate_arm *a, char *buf, size_t size) {
    const memra_options *o = memra_arm_resolved(a->arm);
    memra_options kept = {0};
    for (uint32_t i = 0; o && i < o->n && i < MEMRA_OPT_MAX; i++)
        if (strcmp(o->items[i].key, MEMRA_ARM_KEY_WINDOW) != 0)
            kept.items[kept.n++] = o->items[i];
    memra_arm_format(memra_arm_backend_name(a->arm), &kept, buf, size);
}

memra_status gate_open_arms(gate_ctx *ctx, memra_registry *r, gate_config *cfg, int *exit_code, memra_error *err) {
    memra_status st;
    if (!cfg->arm_a)
        st = pick_and_open(ctx, r, cfg, exit_code, err);
    else if ((st = open_arm(r, ctx->lm, "a", cfg->arm_a, &ctx->a, exit_code, err)) == MEMRA_OK)
        st = open_arm(r, ctx->lm, "b", cfg->arm_b, &ctx->b, exit_code, err);
    if (st != MEMRA_OK)
        return st;
    /* Both arms resolve to the same configuration (window aside): their comparison then proves
     * determinism, not the equivalence of two configurations. */
    char ta[MEMRA_ARM_TEXT_MAX], tb[MEMRA_ARM_TEXT_MAX]; /* whole texts, so a key at the end still counts */
    resolved_without_window(&ctx->a, ta, sizeof ta);
    resolved_without_window(&ctx->b, tb, sizeof tb);
    ctx->arms_identical = strcmp(ta, tb) == 0;
    if (ctx->arms_identical && !cfg->quiet) /* --quiet: the records say it ("arms_identical") */
        fprintf(stderr,
                "memra-gate: warning: arms a and b resolve to the same configuration: the comparison proves "
                "determinism only (%s)\n",
                memra_arm_text(ctx->a.arm));
    /* Arms that differ by design (other device families, other ranks per layer) sum in other
     * orders: asked for an exact comparison, the gate says so (and the verdict repeats it). */
    gate_tp_by_design(ctx);
    if (ctx->by_design[0] && !cfg->nmse && !cfg->quiet)
        fprintf(stderr,
                "memra-gate: warning: %s, so an exact comparison is expected to fail: compare them with --compare "
                "nmse:1e-4 (the tolerance the project uses for cpu against cuda)\n",
                ctx->by_design);
    return MEMRA_OK;
}

void gate_close_arms(gate_ctx *ctx) {
    gate_prefix_drop(ctx);
    gate_tp_close(&ctx->b);
    gate_tp_close(&ctx->a);
    memra_arm_close(ctx->b.arm);
    memra_arm_close(ctx->a.arm);
    ctx->a.arm = ctx->b.arm = NULL;
}
