/* cmd_bench_collective.c: `memra bench-collective`: a device collective's in-place float32 sum
 * all-reduce, timed in the manner of nccl-tests. Sizes double from --min-bytes to --max-bytes;
 * at each size every rank's buffer is filled with values whose sums are exact in any order
 * (small integers times a power of two, distinct per rank and element), one operation is run and
 * every element of every rank compared bit for bit with the sum computed here (#wrong), and then
 * the operation is timed: eagerly (the n calls of one operation per iteration; per iteration the
 * slowest rank's time between events on its stream; median over iterations after warm-up) and
 * captured into a CUDA graph (BC_GRAPH_OPS operations per graph, the other ranks' streams
 * forked from and joined to rank 0's through events; per replay the time on rank 0's stream
 * divided by BC_GRAPH_OPS; median over replays). A graph of one operation is replayed on fresh
 * inputs and checked as the eager one. At the end every rank's epoch of block 0 must equal the
 * operations made (graph replays included). The CUDA runtime is opened at run time
 * (bench_collective_cuda.c), so the command exists, and says why it cannot run, without CUDA. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_collective_cuda.h"
#include "memra/collective.h"
#include "cli.h"
#include "memra_commit.h"

#define BC_GRAPH_OPS 10
#define BC_BATCH 256 /* iterations timed between two host waits */

static const char help_text[] =
    "usage: memra bench-collective --collective NAME[:mode|key=value,...] --ranks N [--devices D0,D1,...]\n"
    "                              [--min-bytes B] [--max-bytes B] [--iters N] [--warmup N]\n"
    "                              [--eager] [--graph] [--jsonl FILE] [--timeout-ms N]\n"
    "\n"
    "Times a device collective's in-place float32 sum all-reduce over N ranks, as nccl-tests does:\n"
    "sizes double from --min-bytes to --max-bytes; per size the time of one operation (median), the\n"
    "algorithm bandwidth (bytes / time) and the bus bandwidth (algbw * 2(n-1)/n), and #wrong: the\n"
    "elements, over every rank, whose bits differ from the sum computed on the host (the inputs are\n"
    "small integers times powers of two, so every partial sum is exact in any order).\n"
    "\n"
    "  --collective NAME[:...]  the collective plugin and its options: nccl, nccl:allgather\n"
    "                       (a bare word is mode=WORD), nccl:mode=sum,timeout_ms=5000. `local`\n"
    "                       reduces host memory and is refused.\n"
    "  --ranks N            ranks, 1..8\n"
    "  --devices LIST       the CUDA device of each rank, N entries (default: rank r on device\n"
    "                       r mod the number of devices)\n"
    "  --min-bytes B        the first size (default 4K); B is bytes, or with K, M or G (binary)\n"
    "  --max-bytes B        the last size (default 64M); sizes are multiples of 4\n"
    "  --iters N            timed iterations (eager) and graph replays (default 20)\n"
    "  --warmup N           untimed ones first (default 5)\n"
    "  --eager, --graph     time only eager calls, or only graph replays (default: both). A graph\n"
    "                       holds 10 operations; each size is first run eagerly (the check, and\n"
    "                       the collective's buffers grown outside capture)\n"
    "  --jsonl FILE         append one JSON line per size: command, collective, ranks, devices,\n"
    "                       size, times, bandwidths, #wrong (whole lines, under a lock)\n"
    "  --timeout-ms N       bound of every wait for the devices (default 10000), passed to the\n"
    "                       collective as its timeout_ms option; on expiry the collective is\n"
    "                       aborted and the command fails (exit 3)\n"
    "\n"
    "Exit: 0 all sums exact; 1 a wrong element, a nonzero status or an epoch off; 2 usage; 3 error\n"
    "(no CUDA device, a collective that fails).\n";

typedef struct bc_args {
    char coll_name[64];
    memra_options coll_opts;
    const char *coll_text;
    uint32_t ranks;
    int32_t devices[MEMRA_MAX_RANKS];
    bool devices_given;
    uint64_t min_bytes, max_bytes;
    uint32_t iters, warmup;
    bool eager, graph;
    const char *jsonl;
    uint32_t timeout_ms;
    bool timeout_given;
    int argc;
    char **argv;
} bc_args;

/* One size's figures: [0] eager, [1] graph. */
typedef struct bc_row {
    uint64_t bytes, count;
    bool have[2];
    double us[2], algbw[2], busbw[2];
    uint64_t wrong[2];
} bc_row;

typedef struct bc_run {
    const char *cmd;
    const bc_args *a;
    bc_cuda cu;
    memra_coll *c; /* the collective and its communicator (memra/collective.h) */
    bc_stream stream[MEMRA_MAX_RANKS];
    float *buf[MEMRA_MAX_RANKS];
    int32_t *pos[MEMRA_MAX_RANKS];
    int32_t *status[MEMRA_MAX_RANKS];
    bc_event *ev; /* 2 * n * BC_BATCH events (on each rank's device) */
    bc_event fork, join[MEMRA_MAX_RANKS];
    float *host_in, *host_expect, *host_out;
    uint64_t ops; /* operations made (each of the n ranks once) */
    double *samples;
    bool failed_check; /* a status or epoch off: exit 1 */
} bc_run;

/* ---- Arguments ------------------------------------------------------------------------- */

static bool parse_bytes(const char *cmd, const char *opt, const char *text, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    if (!text[0] || text[0] == '-' || text[0] == '+') {
        cli_error(cmd, "%s '%s': expected a size in bytes, e.g. 4096, 4K, 64M", opt, text);
        return false;
    }
    unsigned long long v = strtoull(text, &end, 10);
    uint64_t mul = 1;
    if (end == text || errno) {
        cli_error(cmd, "%s '%s': expected a size in bytes, e.g. 4096, 4K, 64M", opt, text);
        return false;
    }
    if (*end == 'K' || *end == 'k')
        mul = 1ull << 10, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1ull << 20, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1ull << 30, end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v > (1ull << 40) / mul) {
        cli_error(cmd, "%s '%s': expected a size in bytes, e.g. 4096, 4K, 64M (at most 1T)", opt, text);
        return false;
    }
    *out = (uint64_t)v * mul;
    return true;
}

/* NAME[:item,...] where an item is key=value or a bare word (mode=word): memra/options.h. */
static bool parse_collective(const char *cmd, const char *text, bc_args *a) {
    a->coll_text = text;
    memset(&a->coll_opts, 0, sizeof a->coll_opts);
    memra_error err = {0};
    if (memra_collective_value_parse(text, a->coll_name, sizeof a->coll_name, &a->coll_opts, &err) != MEMRA_OK) {
        /* the core says "collective=TEXT: why"; the flag is named as it was typed */
        const char *why = err.msg;
        const size_t lead = strlen("collective=") + strlen(text);
        if (strncmp(why, "collective=", 11) == 0 && strlen(why) > lead + 1 &&
            strncmp(why + 11, text, strlen(text)) == 0)
            why += lead + 2;
        cli_error(cmd, "--collective '%s': %s", text, why);
        return false;
    }
    return true;
}

static bool parse_devices(const char *cmd, const char *text, bc_args *a) {
    uint32_t n = 0;
    const char *p = text;
    for (;;) {
        char *end = NULL;
        errno = 0;
        if (*p < '0' || *p > '9') {
            cli_error(cmd, "--devices '%s': expected device numbers separated by commas, e.g. 0,1", text);
            return false;
        }
        unsigned long v = strtoul(p, &end, 10);
        if (errno || v > 1023 || n == MEMRA_MAX_RANKS) {
            cli_error(cmd, "--devices '%s': expected at most %d devices, each 0..1023", text, MEMRA_MAX_RANKS);
            return false;
        }
        a->devices[n++] = (int32_t)v;
        if (*end == '\0')
            break;
        if (*end != ',') {
            cli_error(cmd, "--devices '%s': expected device numbers separated by commas, e.g. 0,1", text);
            return false;
        }
        p = end + 1;
    }
    if (n != a->ranks) {
        cli_error(cmd, "--devices '%s' names %u device(s) for %u rank(s): give one per rank", text, n, a->ranks);
        return false;
    }
    a->devices_given = true;
    return true;
}

static int parse_args(const char *cmd, int argc, char **argv, bc_args *a, bool *help) {
    cli_opt opts[] = {
        {"--collective", NULL, true, NULL}, {"--ranks", NULL, true, NULL},     {"--devices", NULL, true, NULL},
        {"--min-bytes", NULL, true, NULL},  {"--max-bytes", NULL, true, NULL}, {"--iters", NULL, true, NULL},
        {"--warmup", NULL, true, NULL},     {"--eager", NULL, false, NULL},    {"--graph", NULL, false, NULL},
        {"--jsonl", NULL, true, NULL},      {"--timeout-ms", NULL, true, NULL}};
    size_t n_opts = sizeof opts / sizeof opts[0], n_pos;
    int rc = cli_parse(cmd, argc, argv, 1, opts, n_opts, NULL, 0, &n_pos, help_text, help);
    if (rc != CLI_EXIT_OK || *help)
        return rc;
    memset(a, 0, sizeof *a);
    a->argc = argc;
    a->argv = argv;
    a->min_bytes = 4096;
    a->max_bytes = 64ull << 20;
    a->iters = 20;
    a->warmup = 5;
    a->timeout_ms = 10000;
    const char *v;
    if (!(v = cli_get(opts, n_opts, "--collective"))) {
        cli_error(cmd, "--collective NAME is required (e.g. --collective nccl)");
        return CLI_EXIT_USAGE;
    }
    if (!parse_collective(cmd, v, a))
        return CLI_EXIT_USAGE;
    if (strcmp(a->coll_name, "local") == 0) {
        cli_error(cmd, "--collective local: local reduces host memory; bench-collective measures device collectives "
                       "(e.g. nccl)");
        return CLI_EXIT_USAGE;
    }
    if (!(v = cli_get(opts, n_opts, "--ranks"))) {
        cli_error(cmd, "--ranks N is required (1..%d)", MEMRA_MAX_RANKS);
        return CLI_EXIT_USAGE;
    }
    if (!cli_u32(cmd, "--ranks", v, 1, MEMRA_MAX_RANKS, &a->ranks))
        return CLI_EXIT_USAGE;
    if ((v = cli_get(opts, n_opts, "--devices")) && !parse_devices(cmd, v, a))
        return CLI_EXIT_USAGE;
    if (((v = cli_get(opts, n_opts, "--min-bytes")) && !parse_bytes(cmd, "--min-bytes", v, &a->min_bytes)) ||
        ((v = cli_get(opts, n_opts, "--max-bytes")) && !parse_bytes(cmd, "--max-bytes", v, &a->max_bytes)))
        return CLI_EXIT_USAGE;
    if (a->min_bytes < 4 || a->min_bytes % 4 || a->max_bytes % 4) {
        cli_error(cmd,
                  "--min-bytes %" PRIu64 ", --max-bytes %" PRIu64 ": sizes are whole float32s (multiples of 4, "
                  "at least 4)",
                  a->min_bytes, a->max_bytes);
        return CLI_EXIT_USAGE;
    }
    if (a->max_bytes < a->min_bytes) {
        cli_error(cmd, "--max-bytes %" PRIu64 " is less than --min-bytes %" PRIu64, a->max_bytes, a->min_bytes);
        return CLI_EXIT_USAGE;
    }
    if (((v = cli_get(opts, n_opts, "--iters")) && !cli_u32(cmd, "--iters", v, 1, 100000, &a->iters)) ||
        ((v = cli_get(opts, n_opts, "--warmup")) && !cli_u32(cmd, "--warmup", v, 0, 100000, &a->warmup)))
        return CLI_EXIT_USAGE;
    if ((v = cli_get(opts, n_opts, "--timeout-ms"))) {
        if (!cli_u32(cmd, "--timeout-ms", v, 1, 86400000, &a->timeout_ms))
            return CLI_EXIT_USAGE;
        a->timeout_given = true;
    }
    a->eager = cli_get(opts, n_opts, "--eager") != NULL;
    a->graph = cli_get(opts, n_opts, "--graph") != NULL;
    if (!a->eager && !a->graph)
        a->eager = a->graph = true;
    a->jsonl = cli_get(opts, n_opts, "--jsonl");
    if (a->jsonl && !*a->jsonl) {
        cli_error(cmd, "--jsonl: empty file name");
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

/* ---- Device work ----------------------------------------------------------------------- */

/* Exact in any order: integers -16..15 times 2^-(rank mod 4); |sum| <= 128 in steps of 1/8. */
static float input_value(uint32_t rank, uint64_t i) {
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (rank * 0x9e3779b9u) ^ 0x5bd1e995u;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    return ldexpf((float)((int)(h >> 27) - 16), -(int)(rank % 4));
}

static bool cu_ok(bc_run *b, bc_cuda_err e, const char *what) {
    if (e == BC_CUDA_SUCCESS)
        return true;
    cli_error(b->cmd, "%s: %s (CUDA error %d)", what, bc_cuda_text(&b->cu, e), e);
    return false;
}

/* Waits for every rank's stream, at most timeout_ms; on expiry aborts the collective. */
static bool sync_all(bc_run *b, const char *what) {
    double start = cli_now();
    for (uint32_t r = 0; r < b->a->ranks; r++) {
        for (;;) {
            bc_cuda_err e = b->cu.StreamQuery(b->stream[r]);
            if (e == BC_CUDA_SUCCESS)
                break;
            if (e != BC_CUDA_NOT_READY) {
                cli_error(b->cmd, "%s: rank %u's stream: %s (CUDA error %d)", what, r, bc_cuda_text(&b->cu, e), e);
                return false;
            }
            if ((cli_now() - start) * 1e3 > b->a->timeout_ms) {
                memra_coll_abort(b->c);
                cli_error(b->cmd, "%s: rank %u's stream did not finish within %u ms; the collective was aborted", what,
                          r, b->a->timeout_ms);
                return false;
            }
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
    return true;
}

/* One operation: the n calls, back to back in rank order. */
static bool one_op(bc_run *b, uint64_t count) {
    for (uint32_t r = 0; r < b->a->ranks; r++) {
        memra_error err = {0};
        if (memra_coll_all_reduce(b->c, r, b->buf[r], (size_t)count, b->stream[r], 0, b->pos[r], b->status[r], &err) !=
            MEMRA_OK) {
            cli_fail(b->cmd, &err);
            return false;
        }
    }
    b->ops++;
    return true;
}

static bool upload_inputs(bc_run *b, uint64_t count) {
    for (uint32_t r = 0; r < b->a->ranks; r++) {
        for (uint64_t i = 0; i < count; i++)
            b->host_in[i] = input_value(r, i);
        if (!cu_ok(b, b->cu.SetDevice(b->a->devices[r]), "cudaSetDevice") ||
            !cu_ok(b, b->cu.Memcpy(b->buf[r], b->host_in, count * sizeof(float), BC_MEMCPY_H2D),
                   "uploading the inputs"))
            return false;
    }
    for (uint64_t i = 0; i < count; i++) {
        float s = input_value(0, i);
        for (uint32_t r = 1; r < b->a->ranks; r++)
            s += input_value(r, i);
        b->host_expect[i] = s;
    }
    return true;
}

/* Compares every rank's buffer with the expected sums and checks the statuses read 0. */
static bool check(bc_run *b, uint64_t count, const char *mode, uint64_t *wrong) {
    *wrong = 0;
    for (uint32_t r = 0; r < b->a->ranks; r++) {
        int32_t status = 0;
        if (!cu_ok(b, b->cu.SetDevice(b->a->devices[r]), "cudaSetDevice") ||
            !cu_ok(b, b->cu.Memcpy(b->host_out, b->buf[r], count * sizeof(float), BC_MEMCPY_D2H),
                   "reading the result") ||
            !cu_ok(b, b->cu.Memcpy(&status, b->status[r], sizeof status, BC_MEMCPY_D2H), "reading the status"))
            return false;
        uint64_t bad = 0, first = 0;
        for (uint64_t i = 0; i < count; i++) {
            if (memcmp(&b->host_out[i], &b->host_expect[i], sizeof(float)) != 0) {
                if (!bad)
                    first = i;
                bad++;
            }
        }
        if (bad)
            cli_error(b->cmd,
                      "%s, %" PRIu64 " floats: rank %u has %" PRIu64 " wrong element(s), the first at %" PRIu64
                      ": %a, expected %a",
                      mode, count, r, bad, first, (double)b->host_out[first], (double)b->host_expect[first]);
        if (status != 0) {
            cli_error(b->cmd, "%s, %" PRIu64 " floats: rank %u's status reads %d, expected 0", mode, count, r,
                      (int)status);
            b->failed_check = true;
        }
        *wrong += bad;
    }
    return true;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, uint32_t n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Eager: warm-up, then iters timed iterations in batches; per iteration the slowest rank's
 * time between its events. */
static bool time_eager(bc_run *b, uint64_t count, double *us) {
    const uint32_t n = b->a->ranks;
    for (uint32_t i = 0; i < b->a->warmup; i++)
        if (!one_op(b, count))
            return false;
    if (!sync_all(b, "eager warm-up"))
        return false;
    uint32_t done = 0;
    while (done < b->a->iters) {
        uint32_t batch = b->a->iters - done < BC_BATCH ? b->a->iters - done : BC_BATCH;
        for (uint32_t i = 0; i < batch; i++) {
            for (uint32_t r = 0; r < n; r++)
                if (!cu_ok(b, b->cu.SetDevice(b->a->devices[r]), "cudaSetDevice") ||
                    !cu_ok(b, b->cu.EventRecord(b->ev[(i * n + r) * 2], b->stream[r]), "cudaEventRecord"))
                    return false;
            if (!one_op(b, count))
                return false;
            for (uint32_t r = 0; r < n; r++)
                if (!cu_ok(b, b->cu.SetDevice(b->a->devices[r]), "cudaSetDevice") ||
                    !cu_ok(b, b->cu.EventRecord(b->ev[(i * n + r) * 2 + 1], b->stream[r]), "cudaEventRecord"))
                    return false;
        }
        if (!sync_all(b, "eager iterations"))
            return false;
        for (uint32_t i = 0; i < batch; i++) {
            double worst = 0;
            for (uint32_t r = 0; r < n; r++) {
                float ms = 0;
                if (!cu_ok(b, b->cu.EventElapsedTime(&ms, b->ev[(i * n + r) * 2], b->ev[(i * n + r) * 2 + 1]),
                           "cudaEventElapsedTime"))
                    return false;
                if (ms > worst)
                    worst = ms;
            }
            b->samples[done + i] = worst * 1e3;
        }
        done += batch;
    }
    *us = median(b->samples, b->a->iters);
    return true;
}

/* Captures `ops` operations into a graph on rank 0's stream, the others forked and joined. */
static bool capture(bc_run *b, uint64_t count, uint32_t ops, bc_graph_exec *out) {
    const uint32_t n = b->a->ranks;
    bc_graph g = NULL;
    *out = NULL;
    if (!cu_ok(b, b->cu.SetDevice(b->a->devices[0]), "cudaSetDevice") ||
        !cu_ok(b, b->cu.StreamBeginCapture(b->stream[0], BC_CAPTURE_THREAD_LOCAL), "cudaStreamBeginCapture"))
        return false;
    bool ok = cu_ok(b, b->cu.EventRecord(b->fork, b->stream[0]), "cudaEventRecord (fork)");
    for (uint32_t r = 1; r < n && ok; r++)
        ok = cu_ok(b, b->cu.SetDevice(b->a->devices[r]), "cudaSetDevice") &&
             cu_ok(b, b->cu.StreamWaitEvent(b->stream[r], b->fork, 0), "cudaStreamWaitEvent (fork)");
    for (uint32_t k = 0; k < ops && ok; k++)
        ok = one_op(b, count);
    for (uint32_t r = 1; r < n && ok; r++)
        ok = cu_ok(b, b->cu.SetDevice(b->a->devices[r]), "cudaSetDevice") &&
             cu_ok(b, b->cu.EventRecord(b->join[r], b->stream[r]), "cudaEventRecord (join)") &&
             cu_ok(b, b->cu.SetDevice(b->a->devices[0]), "cudaSetDevice") &&
             cu_ok(b, b->cu.StreamWaitEvent(b->stream[0], b->join[r], 0), "cudaStreamWaitEvent (join)");
    (void)b->cu.SetDevice(b->a->devices[0]);
    bc_cuda_err e = b->cu.StreamEndCapture(b->stream[0], &g);
    if (ok)
        ok = cu_ok(b, e, "cudaStreamEndCapture");
    /* The operations captured were not run: they count at each replay. */
    b->ops -= ops < b->ops ? ops : b->ops;
    if (ok)
        ok = cu_ok(b, b->cu.GraphInstantiateWithFlags(out, g, 0), "cudaGraphInstantiateWithFlags");
    if (g)
        b->cu.GraphDestroy(g);
    return ok;
}

static bool time_graph(bc_run *b, uint64_t count, double *us, uint64_t *wrong) {
    bc_graph_exec x = NULL;
    /* The check: one operation in a graph, replayed on fresh inputs. */
    if (!upload_inputs(b, count) || !capture(b, count, 1, &x))
        goto fail;
    if (!cu_ok(b, b->cu.GraphLaunch(x, b->stream[0]), "cudaGraphLaunch"))
        goto fail;
    b->ops++;
    if (!sync_all(b, "graph check") || !check(b, count, "graph", wrong))
        goto fail;
    b->cu.GraphExecDestroy(x);
    if (!capture(b, count, BC_GRAPH_OPS, &x))
        goto fail;
    for (uint32_t i = 0; i < b->a->warmup; i++) {
        if (!cu_ok(b, b->cu.GraphLaunch(x, b->stream[0]), "cudaGraphLaunch"))
            goto fail;
        b->ops += BC_GRAPH_OPS;
    }
    if (!sync_all(b, "graph warm-up"))
        goto fail;
    uint32_t done = 0;
    while (done < b->a->iters) {
        uint32_t batch = b->a->iters - done < BC_BATCH ? b->a->iters - done : BC_BATCH;
        for (uint32_t i = 0; i < batch; i++) {
            bc_event *ev0 = &b->ev[(size_t)i * b->a->ranks * 2]; /* rank 0's pair of iteration i */
            if (!cu_ok(b, b->cu.EventRecord(ev0[0], b->stream[0]), "cudaEventRecord") ||
                !cu_ok(b, b->cu.GraphLaunch(x, b->stream[0]), "cudaGraphLaunch") ||
                !cu_ok(b, b->cu.EventRecord(ev0[1], b->stream[0]), "cudaEventRecord"))
                goto fail;
            b->ops += BC_GRAPH_OPS;
        }
        if (!sync_all(b, "graph replays"))
            goto fail;
        for (uint32_t i = 0; i < batch; i++) {
            float ms = 0;
            bc_event *ev0 = &b->ev[(size_t)i * b->a->ranks * 2];
            if (!cu_ok(b, b->cu.EventElapsedTime(&ms, ev0[0], ev0[1]), "cudaEventElapsedTime"))
                goto fail;
            b->samples[done + i] = ms * 1e3 / BC_GRAPH_OPS;
        }
        done += batch;
    }
    *us = median(b->samples, b->a->iters);
    b->cu.GraphExecDestroy(x);
    return true;
fail:
    if (x)
        b->cu.GraphExecDestroy(x);
    return false;
}

/* ---- Output ---------------------------------------------------------------------------- */

static void print_header(const bc_run *b, const char *runtime) {
    const bc_args *a = b->a;
    printf("# memra bench-collective: %s, %u rank(s) on device(s) ", a->coll_text, a->ranks);
    for (uint32_t r = 0; r < a->ranks; r++)
        printf("%s%d", r ? "," : "", (int)a->devices[r]);
    printf("; in place, float32 sum; %u iteration(s) after %u warm-up; graph: %d operations a replay; %s\n", a->iters,
           a->warmup, BC_GRAPH_OPS, runtime);
    printf("# %12s %12s %6s   %10s %12s %12s %8s   %10s %12s %12s %8s\n", "", "", "", "eager", "", "", "", "graph", "",
           "", "");
    printf("# %12s %12s %6s   %10s %12s %12s %8s   %10s %12s %12s %8s\n", "size(B)", "count", "type", "time(us)",
           "algbw(GB/s)", "busbw(GB/s)", "#wrong", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
}

static void print_row(const bc_row *row) {
    printf("  %12" PRIu64 " %12" PRIu64 " %6s", row->bytes, row->count, "float");
    for (int m = 0; m < 2; m++) {
        if (row->have[m])
            printf("   %10.2f %12.2f %12.2f %8" PRIu64, row->us[m], row->algbw[m], row->busbw[m], row->wrong[m]);
        else
            printf("   %10s %12s %12s %8s", "-", "-", "-", "-");
    }
    printf("\n");
    fflush(stdout);
}

static int append_jsonl(const bc_run *b, const bc_row *row) {
    const bc_args *a = b->a;
    char *line = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&line, &len);
    if (!f) {
        cli_error(b->cmd, "--jsonl %s: cannot build the record: %s", a->jsonl, strerror(errno));
        return CLI_EXIT_ERROR;
    }
    fprintf(f, "{\"record\": \"bench-collective\", \"commit\": ");
    cli_json_str(f, MEMRA_GIT_COMMIT);
    fprintf(f, ", \"version\": ");
    cli_json_str(f, memra_version());
    fprintf(f, ", \"command\": ");
    {
        char *cmdline = NULL;
        size_t cl = 0;
        FILE *g = open_memstream(&cmdline, &cl);
        if (g) {
            fputs("memra", g);
            for (int i = 0; i < a->argc; i++)
                fprintf(g, " %s", a->argv[i]);
            fclose(g);
        }
        cli_json_str(f, cmdline ? cmdline : "memra bench-collective");
        free(cmdline);
    }
    fprintf(f, ", \"collective\": ");
    cli_json_str(f, a->coll_name);
    fprintf(f, ", \"collective_options\": {");
    for (uint32_t i = 0; i < a->coll_opts.n; i++) {
        fprintf(f, "%s", i ? ", " : "");
        cli_json_str(f, a->coll_opts.items[i].key);
        fprintf(f, ": ");
        cli_json_str(f, a->coll_opts.items[i].value);
    }
    fprintf(f, "}, \"ranks\": %u, \"devices\": [", a->ranks);
    for (uint32_t r = 0; r < a->ranks; r++)
        fprintf(f, "%s%d", r ? ", " : "", (int)a->devices[r]);
    fprintf(f, "], \"size_bytes\": %" PRIu64 ", \"count\": %" PRIu64 ", \"type\": \"float32\", \"op\": \"sum\"",
            row->bytes, row->count);
    fprintf(f, ", \"in_place\": true, \"iters\": %u, \"warmup\": %u, \"graph_ops\": %d", a->iters, a->warmup,
            BC_GRAPH_OPS);
    const char *names[2] = {"eager", "graph"};
    for (int m = 0; m < 2; m++) {
        fprintf(f, ", \"%s\": ", names[m]);
        if (!row->have[m]) {
            fprintf(f, "null");
            continue;
        }
        fprintf(f, "{\"time_us\": ");
        cli_json_num(f, "%.3f", row->us[m]);
        fprintf(f, ", \"algbw_gb_s\": ");
        cli_json_num(f, "%.4f", row->algbw[m]);
        fprintf(f, ", \"busbw_gb_s\": ");
        cli_json_num(f, "%.4f", row->busbw[m]);
        fprintf(f, ", \"wrong\": %" PRIu64 "}", row->wrong[m]);
    }
    fprintf(f, "}\n");
    bool built = !ferror(f);
    if (fclose(f) != 0 || !built || !line) {
        cli_error(b->cmd, "--jsonl %s: cannot build the record: out of memory", a->jsonl);
        free(line);
        return CLI_EXIT_ERROR;
    }
    int fd = open(a->jsonl, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd < 0) {
        cli_error(b->cmd, "--jsonl %s: cannot append: %s", a->jsonl, strerror(errno));
        free(line);
        return CLI_EXIT_ERROR;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    memra_error err = {0};
    int rc = CLI_EXIT_OK;
    if (memra_append_line(fd, a->jsonl, line, len, &err) != MEMRA_OK)
        rc = cli_fail(b->cmd, &err);
    if (close(fd) != 0 && rc == CLI_EXIT_OK) {
        cli_error(b->cmd, "--jsonl %s: write failed at close: %s", a->jsonl, strerror(errno));
        rc = CLI_EXIT_ERROR;
    }
    free(line);
    return rc;
}

/* ---- The command ----------------------------------------------------------------------- */

static bool registry_has_collective(memra_registry *reg, const char *name) {
    for (uint32_t i = 0; i < memra_registry_count(reg); i++) {
        const memra_registry_entry *e = memra_registry_entry_at(reg, i);
        if (e->kind == MEMRA_PLUGIN_COLLECTIVE && e->name && strcmp(e->name, name) == 0)
            return true;
    }
    return false;
}

static bool allocate(bc_run *b) {
    const bc_args *a = b->a;
    size_t max_count = (size_t)(a->max_bytes / 4);
    b->host_in = malloc(max_count * sizeof(float));
    b->host_expect = malloc(max_count * sizeof(float));
    b->host_out = malloc(max_count * sizeof(float));
    b->samples = malloc((size_t)a->iters * sizeof(double));
    b->ev = calloc((size_t)2 * a->ranks * BC_BATCH, sizeof *b->ev);
    if (!b->host_in || !b->host_expect || !b->host_out || !b->samples || !b->ev) {
        cli_error(b->cmd, "out of memory (host buffers of %" PRIu64 " bytes)", a->max_bytes);
        return false;
    }
    for (uint32_t r = 0; r < a->ranks; r++) {
        char what[96];
        snprintf(what, sizeof what, "rank %u (device %d): allocating", r, (int)a->devices[r]);
        if (!cu_ok(b, b->cu.SetDevice(a->devices[r]), what) ||
            !cu_ok(b, b->cu.StreamCreateWithFlags(&b->stream[r], BC_STREAM_NON_BLOCKING), what) ||
            !cu_ok(b, b->cu.Malloc((void **)&b->buf[r], max_count * sizeof(float)), what) ||
            !cu_ok(b, b->cu.Malloc((void **)&b->pos[r], sizeof(int32_t)), what) ||
            !cu_ok(b, b->cu.Malloc((void **)&b->status[r], sizeof(int32_t)), what) ||
            !cu_ok(b, b->cu.Memset(b->pos[r], 0, sizeof(int32_t)), what) ||
            !cu_ok(b, b->cu.Memset(b->status[r], 0, sizeof(int32_t)), what) ||
            (r > 0 && !cu_ok(b, b->cu.EventCreateWithFlags(&b->join[r], 0), what)))
            return false;
        /* Rank r's events of the eager batches; rank 0's also time the graph replays. */
        for (uint32_t i = 0; i < BC_BATCH; i++)
            for (int k = 0; k < 2; k++)
                if (!cu_ok(b, b->cu.EventCreateWithFlags(&b->ev[(i * a->ranks + r) * 2 + k], 0), what))
                    return false;
    }
    if (!cu_ok(b, b->cu.SetDevice(a->devices[0]), "cudaSetDevice"))
        return false;
    return cu_ok(b, b->cu.EventCreateWithFlags(&b->fork, 0), "cudaEventCreate (fork)");
}

static void release(bc_run *b) {
    const bc_args *a = b->a;
    if (b->cu.lib) {
        for (uint32_t r = 0; r < a->ranks; r++) {
            if (b->cu.SetDevice(a->devices[r]) != BC_CUDA_SUCCESS)
                continue;
            if (b->ev)
                for (uint32_t i = 0; i < BC_BATCH; i++)
                    for (int k = 0; k < 2; k++)
                        if (b->ev[(i * a->ranks + r) * 2 + k])
                            b->cu.EventDestroy(b->ev[(i * a->ranks + r) * 2 + k]);
            if (b->join[r])
                b->cu.EventDestroy(b->join[r]);
            if (r == 0 && b->fork)
                b->cu.EventDestroy(b->fork);
            if (b->buf[r])
                b->cu.Free(b->buf[r]);
            if (b->pos[r])
                b->cu.Free(b->pos[r]);
            if (b->status[r])
                b->cu.Free(b->status[r]);
            if (b->stream[r])
                b->cu.StreamDestroy(b->stream[r]);
        }
    }
    free(b->host_in);
    free(b->host_expect);
    free(b->host_out);
    free(b->samples);
    free(b->ev);
}

static int run_sizes(bc_run *b, bool *any_wrong) {
    const bc_args *a = b->a;
    const uint32_t n = a->ranks;
    for (uint64_t bytes = a->min_bytes; bytes <= a->max_bytes; bytes *= 2) {
        bc_row row = {.bytes = bytes, .count = bytes / 4};
        uint64_t wrong = 0;
        /* The eager check, also how the collective grows its buffers outside any capture. */
        if (!upload_inputs(b, row.count) || !one_op(b, row.count) || !sync_all(b, "eager check") ||
            !check(b, row.count, "eager", &wrong))
            return CLI_EXIT_ERROR;
        if (a->eager) {
            row.have[0] = true;
            row.wrong[0] = wrong;
            if (!time_eager(b, row.count, &row.us[0]))
                return CLI_EXIT_ERROR;
        } else if (wrong) {
            row.wrong[1] = wrong; /* the eager check's, counted with the graph's */
        }
        if (a->graph) {
            uint64_t gw = 0;
            row.have[1] = true;
            if (!time_graph(b, row.count, &row.us[1], &gw))
                return CLI_EXIT_ERROR;
            row.wrong[1] += gw;
        }
        for (int m = 0; m < 2; m++) {
            if (!row.have[m])
                continue;
            row.algbw[m] = row.us[m] > 0 ? (double)bytes / (row.us[m] * 1e-6) / 1e9 : 0;
            row.busbw[m] = row.algbw[m] * 2.0 * (n - 1) / n;
            if (row.wrong[m])
                *any_wrong = true;
        }
        print_row(&row);
        if (a->jsonl) {
            int rc = append_jsonl(b, &row);
            if (rc != CLI_EXIT_OK)
                return rc;
        }
        if (bytes > UINT64_MAX / 2)
            break;
    }
    return CLI_EXIT_OK;
}

/* Every rank's epoch of block 0 must equal the operations made (graph replays included). */
static void check_epochs(bc_run *b) {
    for (uint32_t r = 0; r < b->a->ranks; r++) {
        uint64_t e = 0;
        memra_error err = {0};
        memra_status st = memra_coll_epochs(b->c, r, &e, 1, &err);
        if (st == MEMRA_E_UNSUPPORTED)
            return; /* a collective that counts no epochs */
        if (st != MEMRA_OK) {
            cli_fail(b->cmd, &err);
            b->failed_check = true;
            return;
        }
        if (e != b->ops) {
            cli_error(b->cmd, "rank %u's epoch of block 0 reads %" PRIu64 " after %" PRIu64 " operations", r, e,
                      b->ops);
            b->failed_check = true;
        }
    }
}

int cmd_bench_collective(int argc, char **argv) {
    const char *cmd = "bench-collective";
    bc_args a;
    bool help = false;
    int rc = parse_args(cmd, argc, argv, &a, &help);
    if (rc != CLI_EXIT_OK || help)
        return rc;
    bc_run b = {.cmd = cmd, .a = &a};
    memra_registry *reg = NULL;
    memra_error err = {0};
    if (memra_registry_open(&reg, &err) != MEMRA_OK)
        return cli_fail(cmd, &err);
    for (uint32_t i = 0; i < memra_registry_warning_count(reg); i++)
        fprintf(stderr, "memra %s: warning: %s\n", cmd, memra_registry_warning_at(reg, i));
    if (!registry_has_collective(reg, a.coll_name)) {
        cli_error(cmd, "--collective %s: no collective plugin of that name (see memra plugins)%s", a.coll_name,
                  bc_cuda_built() ? "" : "; this memra was built without CUDA, so no GPU collective was built");
        memra_registry_close(reg);
        return CLI_EXIT_USAGE;
    }
    char why[768];
    if (!bc_cuda_open(&b.cu, why, sizeof why)) {
        cli_error(cmd, "no CUDA device: %s", why);
        memra_registry_close(reg);
        return CLI_EXIT_ERROR;
    }
    int n_dev = 0;
    bc_cuda_err e = b.cu.GetDeviceCount(&n_dev);
    if (e != BC_CUDA_SUCCESS || n_dev < 1) {
        cli_error(cmd, "no CUDA device: cudaGetDeviceCount: %s",
                  e != BC_CUDA_SUCCESS ? bc_cuda_text(&b.cu, e) : "0 devices");
        memra_registry_close(reg);
        return CLI_EXIT_ERROR;
    }
    for (uint32_t r = 0; r < a.ranks; r++) {
        if (!a.devices_given)
            a.devices[r] = (int32_t)(r % (uint32_t)n_dev);
        else if (a.devices[r] >= n_dev) {
            cli_error(cmd, "--devices: rank %u's device %d does not exist (%d CUDA device(s))", r, (int)a.devices[r],
                      n_dev);
            memra_registry_close(reg);
            return CLI_EXIT_USAGE;
        }
    }
    if (memra_coll_open(reg, a.coll_name, &b.c, &err) != MEMRA_OK) {
        rc = cli_fail(cmd, &err);
        memra_registry_close(reg);
        return rc == CLI_EXIT_USAGE ? CLI_EXIT_ERROR : rc;
    }
    memra_options opts = a.coll_opts;
    char timeout[16];
    snprintf(timeout, sizeof timeout, "%u", a.timeout_ms);
    if (a.timeout_given && !memra_options_get(&opts, "timeout_ms") &&
        memra_options_set(&opts, "timeout_ms", timeout, &err) != MEMRA_OK) {
        cli_error(cmd, "--collective: %s", err.msg);
        memra_coll_close(b.c);
        memra_registry_close(reg);
        return CLI_EXIT_USAGE;
    }
    if (memra_coll_create(b.c, a.ranks, a.devices, &opts, &err) != MEMRA_OK) {
        rc = cli_fail(cmd, &err);
        memra_coll_close(b.c);
        memra_registry_close(reg);
        return rc;
    }
    int runtime = 0;
    char runtime_text[64] = "CUDA runtime";
    if (b.cu.RuntimeGetVersion(&runtime) == BC_CUDA_SUCCESS)
        snprintf(runtime_text, sizeof runtime_text, "CUDA runtime %d.%d", runtime / 1000, (runtime % 1000) / 10);
    bool any_wrong = false;
    rc = CLI_EXIT_ERROR;
    if (allocate(&b)) {
        print_header(&b, runtime_text);
        rc = run_sizes(&b, &any_wrong);
        if (rc == CLI_EXIT_OK && sync_all(&b, "the end"))
            check_epochs(&b);
        else if (rc == CLI_EXIT_OK)
            rc = CLI_EXIT_ERROR;
    }
    if (rc == CLI_EXIT_OK && (any_wrong || b.failed_check)) {
        cli_error(cmd, "%s", any_wrong ? "some sums were wrong (#wrong > 0)" : "a status or an epoch was off");
        rc = 1;
    }
    memra_coll_close(b.c);
    release(&b);
    bc_cuda_close(&b.cu);
    memra_registry_close(reg);
    if (rc == CLI_EXIT_OK && !cli_stdout_ok(cmd))
        rc = CLI_EXIT_ERROR;
    return rc;
}
