/* gate_stop.c: the bottom of the gate, what every other gate file may call (and which calls none
 * of them): the stop state (the signal that asked the run to stop, the check made between steps),
 * the progress display and its ETA, a step's phase name, and whether this build has NVTX. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gate.h"

/* SIGINT, SIGTERM or SIGHUP received: the handler sets it and does nothing else; the step loops
 * check it between steps (gate_check_stop) and main writes the interrupted record. */
volatile sig_atomic_t gate_signal = 0;

static void on_signal(int sig) {
    if (!gate_signal)
        gate_signal = sig;
}

/* SA_RESETHAND: a second signal of the same kind takes its default action, so a run stuck inside
 * one step can still be stopped at once. A file size limit is an error of the write, not a
 * signal that kills the gate before it can say so. */
void gate_stop_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    signal(SIGXFSZ, SIG_IGN);
    signal(SIGPIPE, SIG_IGN); /* a closed pipe is EPIPE on the write: exit 3 naming it */
}

const char *gate_signal_name(int sig) {
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
    }
}

memra_status gate_check_stop(const gate_ctx *ctx, memra_error *err) {
    if (gate_signal)
        return memra_fail(err, MEMRA_E_IO, "interrupted by %s", gate_signal_name(gate_signal));
    if (ctx->json.failed)
        return memra_fail(err, MEMRA_E_IO, "records: %s", ctx->json.failure);
    return MEMRA_OK;
}

bool gate_have_nvtx(void) {
#ifdef MEMRA_HAVE_NVTX
    return true;
#else
    return false;
#endif
}

const char *gate_phase_name(const gate_config *cfg, uint32_t step) { return step < cfg->prime ? "prime" : "gen"; }

uint32_t gate_phase_index(const gate_config *cfg, uint32_t step) {
    return step < cfg->prime ? step : step - cfg->prime;
}

static double gate_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Steps of the whole run done when the current phase has done `done` of its units. */
static uint64_t work_done(const gate_ctx *ctx, uint32_t done) {
    const uint64_t P = ctx->cfg->prime, N = ctx->cfg->gen;
    const char *ph = ctx->phase ? ctx->phase : "";
    if (strcmp(ph, "reference") == 0)
        return done;
    if (strcmp(ph, "replay") == 0)
        return P + N + done;
    if (strcmp(ph, "timing") == 0)
        return 2 * (P + N) + 2 * P + (uint64_t)done * N; /* a row is N steps, after both prefixes */
    return 0;
}

static const char *duration(double s, char *buf, size_t size) {
    if (!(s >= 0) || s > 1e7)
        snprintf(buf, size, "?");
    else if (s < 60)
        snprintf(buf, size, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, size, "%um%02us", (unsigned)(s / 60), (unsigned)s % 60);
    else
        snprintf(buf, size, "%uh%02um", (unsigned)(s / 3600), (unsigned)(s / 60) % 60);
    return buf;
}

void gate_announce(gate_ctx *ctx) {
    const gate_config *cfg = ctx->cfg;
    const uint64_t P = cfg->prime, N = cfg->gen, R = cfg->rows;
    uint64_t rows = R ? 2 * P + R * N : (cfg->profile ? 0 : 2 * (P + N)); /* prefixes + rows, or the carry check */
    ctx->work_total = 2 * (P + N) + rows;
    ctx->t_start = gate_now();
    ctx->last_log = ctx->t_start;
    if (cfg->quiet || ctx->work_total < GATE_ANNOUNCE_STEPS)
        return;
    if (R)
        fprintf(stderr,
                "memra-gate: %llu steps to run: 2 x %llu correctness steps (%llu prime + %llu gen, arm a then "
                "b), then %llu timing rows x %llu steps (after a %llu-step prefix on each arm); progress shows "
                "an ETA%s\n",
                (unsigned long long)ctx->work_total, (unsigned long long)(P + N), (unsigned long long)P,
                (unsigned long long)N, (unsigned long long)R, (unsigned long long)N, (unsigned long long)P,
                ctx->progress ? "" : " at the end of each phase and once a minute");
    else
        fprintf(stderr, "memra-gate: %llu steps to run: 2 x %llu correctness steps (%llu prime + %llu gen)%s\n",
                (unsigned long long)ctx->work_total, (unsigned long long)(P + N), (unsigned long long)P,
                (unsigned long long)N, cfg->profile ? ", then the profile windows" : ", then the carry check");
}

void gate_progress(gate_ctx *ctx, const char *what, uint32_t done, uint32_t total) {
    if ((!ctx->progress && !ctx->progress_log) || total == 0)
        return;
    char eta[32] = "", el[32];
    double now = gate_now(), elapsed = now - ctx->t_start;
    uint64_t wd = work_done(ctx, done);
    if (wd > 0 && ctx->work_total > wd && elapsed > 0.5)
        snprintf(eta, sizeof eta, ", ETA %s",
                 duration(elapsed / (double)wd * (double)(ctx->work_total - wd), el, sizeof el));
    if (ctx->progress_log) { /* a log: one line a minute, and one at the end of each phase of a long run */
        bool phase_end = done == total && ctx->work_total >= GATE_ANNOUNCE_STEPS;
        if (now - ctx->last_log < GATE_PROGRESS_LOG_S && !phase_end)
            return;
        ctx->last_log = now;
        char e2[32];
        fprintf(stderr, "memra-gate: %s %u/%u, elapsed %s%s\n", what, done, total, duration(elapsed, e2, sizeof e2),
                eta);
        fflush(stderr);
        return;
    }
    uint32_t every = total / 50 ? total / 50 : 1;
    if (done != total && done % every != 0)
        return;
    const int width = 30;
    int fill = (int)((uint64_t)done * width / total);
    fprintf(stderr, "\r  %-28s [%.*s%*s] %u/%u%-16s", what, fill, "##############################", width - fill, "",
            done, total, eta);
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}
