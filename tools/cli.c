/* cli.c: option parsing and the helpers the memra subcommands share (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

void cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "memra %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_fail(const char *cmd, const memra_error *err) {
    cli_error(cmd, "%s", err->msg[0] ? err->msg : memra_status_name(err->status));
    return err->status == MEMRA_E_INVALID ? CLI_EXIT_USAGE : CLI_EXIT_ERROR;
}

static cli_opt *find_opt(cli_opt *opts, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(opts[i].name, name) == 0 || (opts[i].alt && strcmp(opts[i].alt, name) == 0))
            return &opts[i];
    return NULL;
}

int cli_parse(const char *cmd, int argc, char **argv, int first, cli_opt *opts, size_t n_opts, const char **pos,
              size_t max_pos, size_t *n_pos, const char *help_text, bool *help) {
    *n_pos = 0;
    *help = false;
    bool only_positional = false;
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        if (only_positional || arg[0] != '-' || strcmp(arg, "-") == 0) {
            if (*n_pos == max_pos) {
                cli_error(cmd, "unexpected argument '%s' (see memra %s --help)", arg, cmd);
                return CLI_EXIT_USAGE;
            }
            pos[(*n_pos)++] = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            only_positional = true;
            continue;
        }
        char name[64];
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len >= sizeof name) {
            cli_error(cmd, "unknown option '%.40s...' (see memra %s --help)", arg, cmd);
            return CLI_EXIT_USAGE;
        }
        memcpy(name, arg, len);
        name[len] = '\0';
        if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
            *help = true;
            continue;
        }
        cli_opt *o = find_opt(opts, n_opts, name);
        if (!o) {
            cli_error(cmd, "unknown option '%s' (see memra %s --help)", name, cmd);
            return CLI_EXIT_USAGE;
        }
        if (o->given) {
            cli_error(cmd, "option '%s' is given twice", o->name);
            return CLI_EXIT_USAGE;
        }
        if (!o->value) {
            if (eq) {
                cli_error(cmd, "option '%s' takes no value", o->name);
                return CLI_EXIT_USAGE;
            }
            o->given = "";
            continue;
        }
        if (eq) {
            o->given = eq + 1;
        } else if (i + 1 < argc) {
            o->given = argv[++i];
        } else {
            cli_error(cmd, "option '%s' needs a value", name);
            return CLI_EXIT_USAGE;
        }
    }
    if (*help)
        fputs(help_text, stdout);
    return CLI_EXIT_OK;
}

const char *cli_get(const cli_opt *opts, size_t n_opts, const char *name) {
    for (size_t i = 0; i < n_opts; i++)
        if (strcmp(opts[i].name, name) == 0)
            return opts[i].given;
    return NULL;
}

static bool parse_u64_text(const char *text, uint64_t *out) {
    if (!text || !*text || text[0] == '-' || text[0] == '+' || text[0] == ' ')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

bool cli_u32(const char *cmd, const char *opt, const char *text, uint32_t min, uint32_t max, uint32_t *out) {
    uint64_t v;
    if (!parse_u64_text(text, &v) || v < min || v > max) {
        cli_error(cmd, "%s '%s': expected an integer from %u to %u", opt, text, min, max);
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

bool cli_u64(const char *cmd, const char *opt, const char *text, uint64_t *out) {
    if (!parse_u64_text(text, out)) {
        cli_error(cmd, "%s '%s': expected an unsigned 64-bit integer", opt, text);
        return false;
    }
    return true;
}

bool cli_float(const char *cmd, const char *opt, const char *text, double min, double max, float *out) {
    char *end;
    errno = 0;
    double v = text && *text ? strtod(text, &end) : NAN;
    if (!text || !*text || errno || *end || !isfinite(v) || v < min || v > max) {
        cli_error(cmd, "%s '%s': expected a number from %g to %g", opt, text ? text : "", min, max);
        return false;
    }
    /* The value as the 32-bit float the caller gets: a value other than 0 must stay a normal
     * float (--temp 1e-46 would become 0, greedy), and a value strictly inside the range must
     * not round onto a bound (--top-p 0.99999999 would become 1, which turns the cut off). */
    float f = (float)v;
    if (v != 0.0 && !(fabsf(f) >= FLT_MIN)) {
        cli_error(cmd, "%s '%s': becomes %g as a 32-bit float, below the smallest normal float %g", opt, text,
                  (double)f, (double)FLT_MIN);
        return false;
    }
    if ((v > min && !((double)f > min)) || (v < max && !((double)f < max))) {
        cli_error(cmd,
                  "%s '%s': rounds to %.9g as a 32-bit float, onto the bound of %g to %g: give the bound "
                  "itself or a value farther inside",
                  opt, text, (double)f, min, max);
        return false;
    }
    *out = f;
    return true;
}

bool cli_model_sel_parse(const char *cmd, const cli_opt *opts, size_t n_opts, cli_model_sel *sel) {
    memset(sel, 0, sizeof *sel);
    sel->path = cli_get(opts, n_opts, "--model");
    sel->preset = cli_get(opts, n_opts, "--preset");
    sel->seed = CLI_DEFAULT_MODEL_SEED;
    sel->type = MEMRA_TYPE_F32;
    const char *dtype = cli_get(opts, n_opts, "--dtype");
    const char *seed = cli_get(opts, n_opts, "--model-seed");
    if (sel->path && sel->preset) {
        cli_error(cmd, "--model and --preset exclude each other: give one");
        return false;
    }
    if (sel->path && (dtype || seed)) {
        cli_error(cmd, "%s applies to presets only (the file %s has its own weights)",
                  dtype ? "--dtype" : "--model-seed", sel->path);
        return false;
    }
    if (sel->preset) {
        bool known = false;
        for (const char *const *p = memra_synth_presets(); *p && !known; p++)
            known = strcmp(*p, sel->preset) == 0;
        if (!known) {
            cli_error(cmd, "--preset '%s': expected tiny, small, qwen3-tiny, qwen2-tiny, llama-1b or llama-8b",
                      sel->preset);
            return false;
        }
    }
    memra_error err = {0};
    if (dtype && memra_synth_parse_dtype(dtype, &sel->type, &err) != MEMRA_OK) {
        cli_error(cmd, "--dtype '%s': expected f32, f16, bf16 or q8_0", dtype);
        return false;
    }
    if (seed && !cli_u64(cmd, "--model-seed", seed, &sel->seed))
        return false;
    if (!sel->path && !sel->preset)
        sel->preset = "tiny";
    return true;
}

const char *cli_bytes(uint64_t n, char *buf, size_t size) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, size, "%.1f %s", v, units[u]);
    return buf;
}

void cli_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t cli_peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
}
