/* cli.c: option parsing and the helpers the memra subcommands share (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

/* Whether name is one of the '|'-separated spellings of alts. */
static bool alt_has(const char *alts, const char *name) {
    size_t len = strlen(name);
    for (const char *p = alts; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && strncmp(p, name, n) == 0)
            return true;
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

static cli_opt *find_opt(cli_opt *opts, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(opts[i].name, name) == 0 || alt_has(opts[i].alt, name))
            return &opts[i];
    return NULL;
}

const char *cli_closest(const char *typed, const char *const *names, size_t n) {
    return memra_closest_name(typed, names, n);
}

/* "unknown option '--x'", with the closest spelling the command takes. */
static void unknown_option(const char *cmd, const char *name, const cli_opt *opts, size_t n) {
    const char *names[128];
    char alts[64][64];
    size_t k = 0, n_alts = 0;
    for (size_t i = 0; i < n && k + 2 < sizeof names / sizeof names[0]; i++) {
        names[k++] = opts[i].name;
        for (const char *p = opts[i].alt; p && *p && n_alts < 64 && k + 2 < sizeof names / sizeof names[0];) {
            const char *bar = strchr(p, '|');
            size_t len = bar ? (size_t)(bar - p) : strlen(p);
            if (len > 2) { /* a long spelling ("--backend"); a letter ("-n") is never a typo's target */
                snprintf(alts[n_alts], sizeof alts[n_alts], "%.*s", (int)len, p);
                names[k++] = alts[n_alts++];
            }
            p = bar ? bar + 1 : NULL;
        }
    }
    names[k++] = "--help";
    const char *near = cli_closest(name, names, k);
    if (near)
        cli_error(cmd, "unknown option '%s': did you mean %s? (see memra %s --help)", name, near, cmd);
    else
        cli_error(cmd, "unknown option '%s' (see memra %s --help)", name, cmd);
}

void cli_print_version(FILE *f, const char *tool, const char *commit) {
    fprintf(f, "%s %s (commit %s, library %s, plugin ABI %u)\n", tool, MEMRA_VERSION_STRING, commit, memra_version(),
            (unsigned)MEMRA_ABI_VERSION);
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
            unknown_option(cmd, name, opts, n_opts);
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
            cli_error(cmd,
                      "--preset '%s': expected tiny, small, qwen3-tiny, qwen2-tiny, gemma3-tiny, gemma3-270m, "
                      "llama-1b, llama-8b, smollm2-135m, moe-tiny, qwen2moe-tiny, granitemoe-tiny, granite-moe-1b or "
                      "qwen3moe-30b",
                      sel->preset);
            return false;
        }
    }
    memra_error err = {0};
    if (dtype && memra_synth_parse_dtype(dtype, &sel->type, &err) != MEMRA_OK) {
        cli_error(cmd, "--dtype '%s': expected " MEMRA_SYNTH_DTYPES, dtype);
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
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
            i++;
        } else if (c == '\n') {
            fputs("\\n", f);
            i++;
        } else if (c == '\t') {
            fputs("\\t", f);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(f, "\\u%04x", c);
            i++;
        } else if (c < 0x80) {
            fputc(c, f);
            i++;
        } else {
            size_t len = memra_utf8_len(p + i, n - i);
            if (len == 0) {
                fputs("\\ufffd", f); /* one replacement a byte that starts no valid sequence */
                i++;
            } else {
                fwrite(p + i, 1, len, f);
                i += len;
            }
        }
    }
    fputc('"', f);
}

void cli_json_num(FILE *f, const char *fmt, double v) {
    if (!isfinite(v)) {
        fputs("null", f);
        return;
    }
    fprintf(f, fmt, v);
}

/* ---- stdout ------------------------------------------------------------------------------ */

static int stdout_errno;     /* of the first write to stdout that failed */
static bool stdout_checked; /* stdout is the checked stream of cli_process_setup */
static bool stdout_reported; /* cli_stdout_ok said so already */

static ssize_t stdout_write(void *cookie, const char *buf, size_t n) {
    (void)cookie;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(STDOUT_FILENO, buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            if (!stdout_errno)
                stdout_errno = errno;
            return done ? (ssize_t)done : -1;
        }
        done += (size_t)w;
    }
    return (ssize_t)n;
}

static int stdout_close(void *cookie) {
    (void)cookie;
    if (close(STDOUT_FILENO) != 0 && errno != EINTR) {
        if (!stdout_errno)
            stdout_errno = errno;
        return -1;
    }
    return 0;
}

void cli_process_setup(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF)
            continue;
        int n = open("/dev/null", O_RDONLY); /* the lowest free descriptor: fd itself */
        if (n >= 0 && n != fd) {
            dup2(n, fd);
            close(n);
        }
    }
    signal(SIGXFSZ, SIG_IGN);
    cookie_io_functions_t io = {.read = NULL, .write = stdout_write, .seek = NULL, .close = stdout_close};
    FILE *f = fopencookie(NULL, "w", io);
    if (f) {
        setvbuf(f, NULL, isatty(STDOUT_FILENO) ? _IOLBF : _IOFBF, BUFSIZ);
        stdout = f;
        stdout_checked = true;
    }
}

bool cli_stdout_ok(const char *cmd) {
    errno = 0;
    int flushed = fflush(stdout) == 0;
    int e = errno;
    if (flushed && !ferror(stdout))
        return true;
    e = stdout_errno ? stdout_errno : e;
    stdout_reported = true;
    if (e)
        cli_error(cmd, "stdout: write failed: %s", strerror(e));
    else
        cli_error(cmd, "stdout: write failed");
    return false;
}

/* The end of stdout: flushed, its descriptor closed (a close can report a deferred write error,
 * as fclose would) and /dev/null put in its place. The checked stream itself is never closed nor
 * freed: a library may hold its address from the run (the CUDA driver does, and flushes it from an
 * exit handler after main returned: a freed stream made memra abort at exit on the H200). */
static memra_status stdout_finish(memra_error *err) {
    if (!stdout_checked)
        return memra_close_stream(stdout, "stdout", err);
    errno = 0;
    const int flush_failed = fflush(stdout) != 0;
    int e = flush_failed ? errno : 0;
    const int had_error = ferror(stdout);
    errno = 0;
    const int close_failed = close(STDOUT_FILENO) != 0 && errno != EINTR;
    if (close_failed && e == 0)
        e = errno;
    const int n = open("/dev/null", O_WRONLY | O_CLOEXEC); /* the lowest descriptor: 1 unless 0 is closed */
    if (n >= 0 && n != STDOUT_FILENO) {
        dup2(n, STDOUT_FILENO);
        close(n);
    }
    if (!flush_failed && !had_error && !close_failed)
        return MEMRA_OK;
    if (e == 0 && had_error)
        return memra_fail(err, MEMRA_E_IO, "stdout: write failed: an earlier write to it failed");
    return memra_fail(err, MEMRA_E_IO, "stdout: write failed: %s", strerror(e ? e : EIO));
}

int cli_finish(const char *cmd, int rc) {
    memra_error err = {0};
    if (stdout_finish(&err) == MEMRA_OK)
        return rc;
    if (stdout_reported && rc != CLI_EXIT_OK)
        return rc;
    char msg[MEMRA_ERROR_MSG_MAX + 64];
    if (stdout_errno)
        snprintf(msg, sizeof msg, "stdout: write failed: %s", strerror(stdout_errno));
    else
        snprintf(msg, sizeof msg, "%s", err.msg);
    if (cmd)
        cli_error(cmd, "%s", msg);
    else
        fprintf(stderr, "memra: %s\n", msg);
    return rc == CLI_EXIT_OK ? CLI_EXIT_ERROR : rc;
}

/* ---- outputs renamed into place, and the signals that remove them ------------------------ */

#define CLI_CLEAN_SLOTS 4

/* What the handler removes. A slot is filled and emptied with the three signals blocked, so the
 * handler never sees one half written. */
static struct { const char *volatile path; /* the private file */ } clean[CLI_CLEAN_SLOTS];
static bool handlers_installed;
static const int clean_signals[] = {SIGINT, SIGTERM, SIGHUP};

static void on_signal(int sig) {
    int saved = errno;
    for (int i = 0; i < CLI_CLEAN_SLOTS; i++)
        if (clean[i].path)
            unlink(clean[i].path); /* async-signal-safe */
    /* End by the same signal: the default action once this handler returns (it is blocked here). */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
    raise(sig);
    errno = saved;
}

static void block_signals(sigset_t *old) {
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof clean_signals / sizeof clean_signals[0]; i++)
        sigaddset(&set, clean_signals[i]);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

static void restore_signals(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

/* Installs the handler once (signals blocked by the caller); a signal the process ignores (nohup,
 * a background job) stays ignored. */
static void install_handlers(void) {
    if (handlers_installed)
        return;
    handlers_installed = true;
    for (size_t i = 0; i < sizeof clean_signals / sizeof clean_signals[0]; i++) {
        struct sigaction old, sa;
        if (sigaction(clean_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        for (size_t k = 0; k < sizeof clean_signals / sizeof clean_signals[0]; k++)
            sigaddset(&sa.sa_mask, clean_signals[k]);
        sigaction(clean_signals[i], &sa, NULL);
    }
}

static void slot_release(cli_output *o) {
    if (o->slot >= 0) {
        clean[o->slot].path = NULL;
        o->slot = -1;
    }
}

int cli_output_open(const char *cmd, const char *opt, const char *path, cli_output *o) {
    memset(o, 0, sizeof *o);
    o->slot = -1;
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        cli_error(cmd,
                  "%s %s: not a regular file: writing it whole means renaming a new file onto it, which would "
                  "replace it; give a file path",
                  opt, path);
        return CLI_EXIT_USAGE;
    }
    memra_error err = {0};
    sigset_t old;
    block_signals(&old);
    install_handlers();
    if (memra_atomic_open(path, &o->af, &o->f, &err) != MEMRA_OK) {
        restore_signals(&old);
        memset(o, 0, sizeof *o);
        o->slot = -1;
        return cli_fail(cmd, &err);
    }
    o->path = path;
    const char *temp = memra_atomic_temp_path(o->af);
    for (int i = 0; i < CLI_CLEAN_SLOTS && o->slot < 0; i++)
        if (!clean[i].path)
            o->slot = i;
    if (o->slot < 0) { /* never with the tools' few outputs */
        memra_atomic_abort(o->af);
        restore_signals(&old);
        memset(o, 0, sizeof *o);
        cli_error(cmd, "%s %s: too many outputs open at once", opt, path);
        return CLI_EXIT_ERROR;
    }
    clean[o->slot].path = temp;
    restore_signals(&old);
    return CLI_EXIT_OK;
}

void cli_output_abort(cli_output *o) {
    if (!o->af)
        return;
    sigset_t old;
    block_signals(&old);
    slot_release(o);
    memra_atomic_abort(o->af);
    o->af = NULL;
    o->f = NULL;
    restore_signals(&old);
}

int cli_output_commit(const char *cmd, cli_output *const *outs, size_t n) {
    sigset_t old;
    block_signals(&old);
    int rc = CLI_EXIT_OK;
    memra_error err = {0};
    for (size_t i = 0; i < n; i++) {
        cli_output *o = outs[i];
        if (!o->af)
            continue;
        if (rc != CLI_EXIT_OK) {
            slot_release(o);
            memra_atomic_abort(o->af);
        } else {
            memra_status st = memra_atomic_commit(o->af, &err); /* frees af, removes the private file on failure */
            slot_release(o);
            if (st != MEMRA_OK)
                rc = cli_fail(cmd, &err);
        }
        o->af = NULL;
        o->f = NULL;
    }
    restore_signals(&old);
    return rc;
}

int cli_refuse_same_file(const char *cmd, const char *out_opt, const char *out_path, const char *in_opt,
                         const char *in_path) {
    if (!out_path || !in_path)
        return CLI_EXIT_OK;
    bool same = false;
    memra_error err = {0};
    if (memra_same_file(out_path, in_path, &same, &err) != MEMRA_OK)
        return cli_fail(cmd, &err);
    if (!same)
        return CLI_EXIT_OK;
    cli_error(cmd, "%s %s is the same file as %s %s: refusing to write over an input", out_opt, out_path, in_opt,
              in_path);
    return CLI_EXIT_USAGE;
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
