/* gate_judge.c: the verdict of a gate run from what it found (exit 0 pass, 1 a mismatch, a
 * failed row, carry check or profile window, or an ineligible comparison; 3 when a digest could
 * not be computed), and the readable summary table on stderr. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate.h"

void gate_mismatch_what(const gate_mismatch *m, char *buf, size_t size) {
    const char *names[] = {"logits",   "nmse over tolerance", "non-finite logits", "sampled token", "warm-up token",
                           "position", "cache digest",        "hidden digest",     "logits digest"};
    bool on[] = {m->logits,   m->nmse_over, m->nonfinite, m->token,        m->warmup,
                 m->position, m->cache,     m->hidden,    m->digest_logits};
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof on / sizeof on[0] && used < size; i++)
        if (on[i])
            used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", names[i]);
}

/* Appends to v->reason (printf-style), bounded. */
static void add(gate_verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(gate_verdict *v, const char *fmt, ...) {
    size_t n = strlen(v->reason);
    if (n + 1 >= sizeof v->reason)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->reason + n, sizeof v->reason - n, fmt, ap);
    va_end(ap);
}

static void judge_bad_steps(const gate_ctx *ctx, gate_verdict *v) {
    const gate_outcome *o = &ctx->out;
    const gate_mismatch *m = &o->first;
    const uint32_t step = (uint32_t)m->step;
    char what[256];
    gate_mismatch_what(m, what, sizeof what);
    add(v, "%u of %u steps differ; first at step %u (%s %u): %s", o->bad_steps, o->steps_compared, step,
        gate_phase_name(ctx->cfg, step), gate_phase_index(ctx->cfg, step), what);
    if (m->diff.first_index >= 0)
        add(v, "; index %" PRId64 " ref %.9g got %.9g, max %" PRIu64 " ulp, nmse %.3g, argmax %s", m->diff.first_index,
            m->diff.first_ref, m->diff.first_got, m->diff.max_ulp, m->diff.nmse,
            m->diff.argmax_ref != m->diff.argmax_got ? "differs" : "same");
}

/* "N steps (P prime + G gen)", or with a chunked prime, whose inner steps read back no logits,
 * "P prime + G gen steps (N compared)". */
static const char *steps_phrase(const gate_outcome *o, const gate_config *cfg, char *buf, size_t n) {
    if ((uint64_t)o->steps_compared == (uint64_t)cfg->prime + cfg->gen)
        snprintf(buf, n, "%u steps (%u prime + %u gen)", o->steps_compared, cfg->prime, cfg->gen);
    else
        snprintf(buf, n, "%u prime + %u gen steps (%u compared)", cfg->prime, cfg->gen, o->steps_compared);
    return buf;
}

static void judge_pass(const gate_ctx *ctx, gate_verdict *v) {
    const gate_outcome *o = &ctx->out;
    const gate_config *cfg = ctx->cfg;
    const gate_arm *a = &ctx->a, *b = &ctx->b;
    char steps[96];
    steps_phrase(o, cfg, steps, sizeof steps);
    if (cfg->nmse) {
        add(v, "%s within NMSE tolerance", steps);
    } else if (a->window == 1 && b->window == 1) {
        add(v, "%s bit-identical in logits, cache and hidden", steps);
    } else { /* a pipelined arm is digested only where it drains: say so */
        bool both = a->window > 1 && b->window > 1;
        char who[96];
        if (both)
            snprintf(who, sizeof who, "arms a and b, windows %u and %u", a->window, b->window);
        else
            snprintf(who, sizeof who, "arm %s, window %u", a->window > 1 ? "a" : "b",
                     a->window > 1 ? a->window : b->window);
        add(v,
            "%s bit-identical in logits and sampled tokens at every step; cache "
            "and hidden digests compared at %u of them, only where %s pipeline drains (%s: the ends of "
            "the prime and generated phases)",
            steps, o->digest_steps, both ? "either arm's" : "its", who);
    }
    /* a backend without step_chunk primes token by token whatever its prefill says */
    const uint32_t pa = memra_arm_prefill_native(a->arm) ? memra_arm_prefill(a->arm) : 1;
    const uint32_t pb = memra_arm_prefill_native(b->arm) ? memra_arm_prefill(b->arm) : 1;
    const gate_arm *arms[2] = {a, b};
    for (int i = 0; i < 2; i++) /* said, never silent: the core ran the chunks as single steps */
        if (memra_arm_prefill(arms[i]->arm) > 1 && !memra_arm_prefill_native(arms[i]->arm))
            add(v, "; arm %s's backend (%s) has no chunked step: its prefill=%u primed token by token", arms[i]->name,
                memra_arm_backend_name(arms[i]->arm), memra_arm_prefill(arms[i]->arm));
    if ((pa > 1 || pb > 1) && cfg->prime > 1)
        add(v,
            "; primed in chunks (prefill a=%u, b=%u): of the %u prime steps, the logits compared at the %u that "
            "both arms read back (the chunk boundaries and the last prime step), digests there",
            pa, pb, cfg->prime, o->logit_steps > cfg->gen ? o->logit_steps - cfg->gen : 0);
    if (cfg->nmse)
        add(v, " (max %.3g <= %g; tokens agree %u/%u)", o->max_nmse, cfg->nmse_tol, o->token_agree, o->token_total);
    if (cfg->profile)
        add(v, "; profile windows (positions %u..%u, unscored) identical on both arms", o->profile_start,
            o->profile_end);
    if (o->carry_done)
        add(v, "; device-carried tokens verified (one untimed pass per arm from its prefix snapshot)");
    if (ctx->a.tp.on || ctx->b.tp.on)
        add(v, "; tensor-parallel epochs advanced by one per block and step");
    if (o->cells_done)
        add(v, "; %u refusal cell(s) failed cleanly (nothing committed, state quarantined)", o->cells_run);
}

void gate_judge(const gate_ctx *ctx, gate_verdict *v) {
    const gate_outcome *o = &ctx->out;
    const gate_config *cfg = ctx->cfg;
    const uint64_t lost = memra_sha256_failures();
    v->reason[0] = '\0';
    v->exit = GATE_EXIT_FAIL;
    if (lost) { /* before any comparison's result: none of them can be trusted */
        add(v,
            "%" PRIu64 " SHA-256 digest(s) could not be computed (OpenSSL failed, or a digest context could not "
            "be made): no comparison of this run can be trusted",
            lost);
        v->exit = GATE_EXIT_RUNTIME;
    } else if (o->bad_steps) {
        judge_bad_steps(ctx, v);
        if (ctx->by_design[0] && !cfg->nmse)
            add(v,
                " (expected: %s: these arms differ by design; compare them with --compare nmse:1e-4, the "
                "tolerance the project uses for cpu against cuda)",
                ctx->by_design);
    } else if (o->epoch_failures) {
        add(v, "%u epoch census failure(s); first: %s", o->epoch_failures, o->epoch_failure);
    } else if (o->cells_failed) {
        add(v, "%u of %u refusal cell(s) failed; first: %s", o->cells_failed, o->cells_run, o->cell_failure);
    } else if (cfg->profile && !o->profile_identical) {
        add(v, "profile window failed verification: %.1300s",
            o->profile_failure[0] ? o->profile_failure : "the profile windows did not run");
    } else if (o->carry_failures) {
        add(v,
            "device-carried token check failed (the untimed pass from the prefix snapshot, tokens carried on "
            "the device): %s",
            o->carry_failure);
    } else if (o->row_failures) {
        add(v, "%u timing row(s) failed verification; first: %s", o->row_failures, o->row_failure);
    } else if (o->ineligible[0] && cfg->rows) {
        add(v, "ineligible comparison: %s", o->ineligible);
    } else if (cfg->rows && (!o->timing_done || !o->eligible[0] || !o->eligible[1])) {
        add(v, "ineligible comparison: an arm has no eligible timing row");
    } else {
        judge_pass(ctx, v);
        v->exit = GATE_EXIT_PASS;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The summary table                                                                           */

static void table_first_bad(FILE *f, const gate_ctx *ctx) {
    const gate_mismatch *m = &ctx->out.first;
    const uint32_t step = (uint32_t)m->step;
    char what[256];
    gate_mismatch_what(m, what, sizeof what);
    fprintf(f, "  first bad    step %u (%s %u): %s\n", step, gate_phase_name(ctx->cfg, step),
            gate_phase_index(ctx->cfg, step), what);
    if (m->diff.first_index >= 0)
        fprintf(f,
                "               index %" PRId64 " ref %.9g got %.9g; %u logits differ, max %" PRIu64
                " ulp, nmse %.3g, argmax %s\n",
                m->diff.first_index, m->diff.first_ref, m->diff.first_got, m->diff.n_diff, m->diff.max_ulp,
                m->diff.nmse, m->diff.argmax_ref != m->diff.argmax_got ? "differs" : "same");
    if (m->token)
        fprintf(f, "               sampled token ref %" PRId64 " got %" PRId64 "\n", m->token_ref, m->token_got);
}

/* The schedule of the rows run, as they ran: "ABBA" (or "BAAB") only where the rows make it
 * (a multiple of 4), else the letters themselves ("AB" for 2 rows). */
static const char *schedule_label(const gate_config *cfg, char *buf, size_t size) {
    if (cfg->rows >= 4 && cfg->rows % 4 == 0) {
        snprintf(buf, size, "%s", cfg->baab ? "BAAB" : "ABBA");
        return buf;
    }
    size_t n = 0;
    for (uint32_t r = 0; r < cfg->rows && n + 4 < size; r++)
        buf[n++] = gate_schedule_arm(r, cfg->rows, cfg->baab) ? 'B' : 'A';
    if (n < cfg->rows)
        buf[n++] = '.', buf[n++] = '.', buf[n++] = '.';
    buf[n] = '\0';
    return buf;
}

static void holder_words(char *buf, size_t size, const gate_bisect_arm *a) {
    if (a->n_ranks <= 1)
        snprintf(buf, size, "stage %u", a->stage);
    else if (a->rank < 0)
        snprintf(buf, size, "stage %u, every rank of %u", a->stage, a->n_ranks);
    else
        snprintf(buf, size, "stage %u, rank %d of %u", a->stage, (int)a->rank, a->n_ranks);
}

void gate_bisect_sentence(const gate_bisect *b, char *buf, size_t size) {
    if (!b->ran) {
        snprintf(buf, size, "not run");
        return;
    }
    if (!b->found) {
        snprintf(buf, size, "step %lld: %s", (long long)b->step, b->note[0] ? b->note : "no site named");
        return;
    }
    char layer[24], ha[64], hb[64], idx[32] = "";
    if (b->layer < 0)
        snprintf(layer, sizeof layer, "head");
    else
        snprintf(layer, sizeof layer, "layer %d", (int)b->layer);
    holder_words(ha, sizeof ha, &b->arm[0]);
    holder_words(hb, sizeof hb, &b->arm[1]);
    if (b->diff.first_index >= 0)
        snprintf(idx, sizeof idx, "[%lld]", (long long)b->diff.first_index);
    bool one = strcmp(b->site, b->tensor) == 0;
    snprintf(buf, size,
             "step %lld, %s %s%s%s%s: a %.9g (0x%08x) b %.9g (0x%08x), %llu ulp; %u of %u elements differ, NMSE %.3g; "
             "a: %s; b: %s%s%s",
             (long long)b->step, layer, b->site, one ? "" : " tensor ", one ? "" : b->tensor, idx,
             (double)b->diff.first_ref, memra_f32_to_bits(b->diff.first_ref), (double)b->diff.first_got,
             memra_f32_to_bits(b->diff.first_got), (unsigned long long)b->ulp, b->diff.n_diff, b->n, b->diff.nmse, ha,
             hb, b->cause[0] ? "; " : "", b->cause);
}

static void table(FILE *f, const gate_ctx *ctx, const gate_verdict *v) {
    const gate_outcome *o = &ctx->out;
    const gate_config *cfg = ctx->cfg;
    char hex[MEMRA_SHA256_HEX];
    memra_sha256_hex(ctx->model_sha, hex);
    fprintf(f, "\nmemra-gate summary\n");
    fprintf(f, "  model        %s (sha256 %.16s)\n", ctx->lm->label, hex);
    fprintf(f, "  arm a        %s (window %u)\n", memra_arm_text(ctx->a.arm), ctx->a.window);
    fprintf(f, "  arm b        %s (window %u)\n", memra_arm_text(ctx->b.arm), ctx->b.window);
    fprintf(f, "  compare      %s; %s\n", cfg->compare_text, cfg->sampled ? "sampled" : "greedy");
    fprintf(f, "  steps        %u compared (%u prime + %u gen), %u bad\n", o->steps_compared, cfg->prime, cfg->gen,
            o->bad_steps);
    if (o->have_first)
        table_first_bad(f, ctx);
    if (o->bisect.ran) {
        char words[1200];
        gate_bisect_sentence(&o->bisect, words, sizeof words);
        fprintf(f, "  bisect       %s\n", words);
    }
    fprintf(f, "  tokens       %u/%u generated tokens agree; max NMSE %.3g\n", o->token_agree, o->token_total,
            o->max_nmse);
    if (o->timing_done) {
        char sched[80];
        fprintf(f, "  rows         %u run (%s), %u failed verification, %u ineligible\n", o->n_rows,
                schedule_label(cfg, sched, sizeof sched), o->row_failures, o->rows_ineligible);
        for (int i = 0; i < 2; i++)
            fprintf(f, "  tok/s %s      %.1f median (min %.1f .. max %.1f), %u eligible row(s)\n", i ? "b" : "a",
                    o->median[i], o->min[i], o->max[i], o->eligible[i]);
        if (o->have_ratio)
            fprintf(f, "  ratio b/a    %.4f (95%% CI %.4f .. %.4f)\n", o->ratio, o->ratio_lo, o->ratio_hi);
        else
            fprintf(f, "  ratio b/a    %.4f (no interval: too few rows)\n", o->ratio);
    } else if (cfg->rows) {
        fprintf(f, "  timing       not run (correctness failed first)\n");
    }
    if (cfg->profile && o->profile_done)
        fprintf(f, "  profile      2 windows of %u steps at positions %u..%u (unscored, NVTX %s): %s\n",
                GATE_PROFILE_STEPS, o->profile_start, o->profile_end, gate_have_nvtx() ? "ranges" : "not built in",
                o->profile_identical ? "identical" : o->profile_failure);
    else if (cfg->profile)
        fprintf(f, "  profile      not run (correctness failed first)\n");
    if (o->carry_done)
        fprintf(f, "  carry check  one untimed pass per arm, tokens carried on the device: %s\n",
                o->carry_failures ? o->carry_failure : "verified");
    if (ctx->a.tp.on || ctx->b.tp.on)
        fprintf(f, "  epochs       %s\n", o->epoch_failures ? o->epoch_failure : "one per block and step, every rank");
    if (o->cells_done)
        fprintf(f, "  refusals     %u cell(s), %u failed%s%s\n", o->cells_run, o->cells_failed,
                o->cells_failed ? ": " : "", o->cells_failed ? o->cell_failure : "");
    if (ctx->by_design[0])
        fprintf(f, "  by design    %s\n", ctx->by_design);
    if (cfg->dump_dir)
        fprintf(f, "  graphs       %u file(s) dumped under %s\n", o->dumped_files, cfg->dump_dir);
    fprintf(f, "  verdict      %s (exit %d): %s\n", v->exit == 0 ? "PASS" : "FAIL", v->exit, v->reason);
    char speed[400];
    fprintf(f, "  speed        %s\n\n", gate_speed_sentence(ctx, speed, sizeof speed));
}

const char *gate_speed_sentence(const gate_ctx *ctx, char *buf, size_t size) {
    const gate_outcome *o = &ctx->out;
    const gate_config *cfg = ctx->cfg;
    if (!cfg->rows)
        snprintf(buf, size, "not timed (%s)", cfg->profile ? "--profile" : "--rows 0");
    else if (!o->timing_done)
        snprintf(buf, size, "not timed (correctness failed first)");
    else if (!o->eligible[0] || !o->eligible[1])
        snprintf(buf, size, "no comparison: an arm has no eligible timing row");
    else if (!o->have_ratio)
        snprintf(buf, size,
                 "too few rows for an interval (%u and %u eligible row(s) on a and b; at least 2 each, --rows 8 "
                 "or more, give one): b/a %.4f, no verdict on speed",
                 o->eligible[0], o->eligible[1], o->ratio);
    else {
        double pct = (o->ratio - 1.0) * 100.0, lo = (o->ratio_lo - 1.0) * 100.0, hi = (o->ratio_hi - 1.0) * 100.0;
        bool significant = o->ratio_lo > 1.0 || o->ratio_hi < 1.0;
        if (significant)
            snprintf(buf, size, "b is %.1f%% %s than a (median tok/s), 95%% CI [%+.1f%%, %+.1f%%]: significant",
                     pct >= 0 ? pct : -pct, pct >= 0 ? "faster" : "slower", lo, hi);
        else
            snprintf(buf, size,
                     "no significant difference: b/a %+.1f%% (median tok/s), 95%% CI [%+.1f%%, %+.1f%%] includes 0",
                     pct, lo, hi);
    }
    return buf;
}

/* Built in memory and written with write(2), so a failure keeps its errno. */
void gate_summary_table(const gate_ctx *ctx, const gate_verdict *v, char *error, size_t error_size) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    error[0] = '\0';
    if (!f) {
        snprintf(error, error_size, "out of memory for the summary table");
        return;
    }
    table(f, ctx, v);
    if (fclose(f) != 0 || !buf) {
        snprintf(error, error_size, "out of memory for the summary table");
        free(buf);
        return;
    }
    fflush(stderr);
    for (size_t done = 0; done < len;) {
        ssize_t n = write(STDERR_FILENO, buf + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(error, error_size, "the summary table could not be written: %s",
                     n < 0 ? strerror(errno) : "nothing written");
            break;
        }
        done += (size_t)n;
    }
    free(buf);
}
