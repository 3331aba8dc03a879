/* test_source.c: a model's source (memra/source.h) and its chunked reader, on their own. Jobs of
 * several spans read on several threads land byte for byte; the staging the reader holds is its
 * buffers, not the file (counted allocations, and the process's peak RSS while a 192 MiB file is
 * streamed, with a negative control that keeps a whole copy and fails the same bound); and each
 * fault of a file that changes under the reader is an error naming it, with the fault injected
 * between two chunks through the pread hook: the file shrunk, rewritten in place (same size, the
 * same size with its mtime put back, a different size), a short read (EOF early), a file replaced
 * by a rename; short but progressing reads are not a fault. The control of every fault is the
 * same run without it, which passes (source_reads_jobs_exactly). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memra/source.h"
#include "test_files.h"

/* Byte i of a test file. */
static uint8_t pattern(uint64_t i) { return (uint8_t)((i * 2654435761u) >> 13); }

static char g_path[4096];

static void write_pattern(const char *path, uint64_t size) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    uint8_t buf[1 << 16];
    for (uint64_t at = 0; at < size;) {
        size_t n = size - at < sizeof buf ? (size_t)(size - at) : sizeof buf;
        for (size_t i = 0; i < n; i++)
            buf[i] = pattern(at + i);
        cr_assert_eq(fwrite(buf, 1, n, f), n);
        at += n;
    }
    cr_assert_eq(fclose(f), 0);
}

static void make_file(const char *tag, uint64_t size) {
    char dir[2048];
    tmp_dir_make(dir, sizeof dir, NULL, tag);
    snprintf(g_path, sizeof g_path, "%s/model.bin", dir);
    write_pattern(g_path, size);
}

/* Jobs over [0, size): each of three spans of `span` bytes, taken from far-apart places. */
static memra_read_job *make_jobs(uint64_t size, uint64_t span, uint64_t *n_jobs) {
    uint64_t n = size / (3 * span);
    memra_read_job *jobs = calloc(n, sizeof *jobs);
    cr_assert_not_null(jobs);
    for (uint64_t j = 0; j < n; j++) {
        jobs[j].n_spans = 3;
        for (uint32_t k = 0; k < 3; k++)
            jobs[j].spans[k] = (memra_read_span){(k * n + j) * span, span};
    }
    *n_jobs = n;
    return jobs;
}

typedef struct check_ctx {
    atomic_uint_fast64_t bytes, bad, allocated, live, peak;
    uint8_t *copy; /* the negative control of the memory bound: a whole copy kept */
} check_ctx;

static memra_status check_consume(void *ctx, uint32_t t, uint32_t slot, const memra_read_job *job, void *buf,
                                  memra_error *err) {
    (void)t, (void)slot, (void)err;
    check_ctx *c = ctx;
    const uint8_t *p = buf;
    for (uint32_t k = 0; k < job->n_spans; k++) {
        for (uint64_t i = 0; i < job->spans[k].n_bytes; i++)
            if (p[i] != pattern(job->spans[k].offset + i))
                atomic_fetch_add(&c->bad, 1);
        if (c->copy)
            memcpy(c->copy + job->spans[k].offset, p, job->spans[k].n_bytes);
        atomic_fetch_add(&c->bytes, job->spans[k].n_bytes);
        p += job->spans[k].n_bytes;
    }
    return MEMRA_OK;
}

static void *check_alloc(void *ctx, uint32_t t, uint32_t slot, size_t n) {
    (void)t, (void)slot;
    check_ctx *c = ctx;
    atomic_fetch_add(&c->allocated, n);
    uint64_t live = atomic_fetch_add(&c->live, n) + n, peak = atomic_load(&c->peak);
    while (live > peak && !atomic_compare_exchange_weak(&c->peak, &peak, live))
        ;
    void *p = malloc(n);
    if (p)
        memset(p, 0, n); /* touched: it counts in the RSS like a pinned buffer */
    return p;
}

static void check_free(void *ctx, uint32_t t, uint32_t slot, void *p) {
    (void)t, (void)slot;
    free(p);
    (void)ctx;
}

static memra_reader_cfg check_cfg(check_ctx *c, size_t slot_bytes) {
    return (memra_reader_cfg){.n_threads = 4,
                              .n_slots = 2,
                              .slot_bytes = slot_bytes,
                              .ctx = c,
                              .slot_alloc = check_alloc,
                              .slot_free = check_free,
                              .consume = check_consume};
}

static void remove_file(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", g_path);
    *strrchr(dir, '/') = '\0';
    tmp_dir_remove(dir);
}

Test(source, reads_jobs_exactly) {
    make_file("src", 3 << 20);
    memra_source *s = NULL;
    memra_error e = {0};
    cr_assert_eq(memra_source_open_file(g_path, &s, &e), MEMRA_OK, "%s", e.msg);
    cr_assert(memra_source_is_file(s));
    cr_assert_eq(memra_source_size(s), 3u << 20);
    uint64_t n = 0;
    memra_read_job *jobs = make_jobs(3 << 20, 4096, &n);
    check_ctx c = {0};
    memra_reader_cfg cfg = check_cfg(&c, 3 * 4096);
    memra_reader_stats st = {0};
    cr_assert_eq(memra_source_read_jobs(s, jobs, n, &cfg, &st, &e), MEMRA_OK, "%s", e.msg);
    cr_assert_eq(atomic_load(&c.bad), 0);
    cr_assert_eq(atomic_load(&c.bytes), n * 3 * 4096);
    cr_assert_eq(st.bytes_read, n * 3 * 4096);
    cr_assert_eq(st.jobs, n);
    cr_assert_leq(atomic_load(&c.allocated), 4 * 2 * 3 * 4096, "the reader allocates its slots and nothing else");
    /* A job larger than a slot is refused before anything is read. */
    cfg.slot_bytes = 4096;
    cr_assert_eq(memra_source_read_jobs(s, jobs, n, &cfg, NULL, &e), MEMRA_E_INVALID);
    memra_source_close(s);
    free(jobs);
    remove_file();
}

/* The same reads from memory copy what is in memory: the file's later changes change nothing. */
Test(source, memory_source_ignores_the_file) {
    uint8_t *mem = malloc(1 << 20);
    cr_assert_not_null(mem);
    for (uint32_t i = 0; i < 1u << 20; i++)
        mem[i] = pattern(i);
    memra_source *s = NULL;
    memra_error e = {0};
    cr_assert_eq(memra_source_open_memory(mem, 1 << 20, "mem", &s, &e), MEMRA_OK);
    cr_assert_not(memra_source_is_file(s));
    uint64_t off = 0;
    cr_assert(memra_source_offset_of(s, mem + 100, 10, &off));
    cr_assert_eq(off, 100);
    cr_assert_not(memra_source_offset_of(s, mem + (1 << 20) - 5, 10, &off), "past the end");
    uint64_t n = 0;
    memra_read_job *jobs = make_jobs(1 << 20, 1024, &n);
    check_ctx c = {0};
    memra_reader_cfg cfg = check_cfg(&c, 3 * 1024);
    cr_assert_eq(memra_source_read_jobs(s, jobs, n, &cfg, NULL, &e), MEMRA_OK, "%s", e.msg);
    cr_assert_eq(atomic_load(&c.bad), 0);
    memra_source_close(s);
    free(jobs);
    free(mem);
}

/* ---- the memory bound ---- */

static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

#define BIG_FILE ((uint64_t)192 << 20)

/* Streams BIG_FILE bytes through 4 threads x 2 slots of 1 MiB; keep_copy: the consumer keeps a
 * whole copy (the negative control). Returns the growth of the peak RSS in MiB. */
static double stream_big(bool keep_copy) {
    make_file("rss", BIG_FILE);
    memra_source *s = NULL;
    memra_error e = {0};
    cr_assert_eq(memra_source_open_file(g_path, &s, &e), MEMRA_OK, "%s", e.msg);
    uint64_t n = 0;
    memra_read_job *jobs = make_jobs(BIG_FILE, (1 << 20) / 3 / 4096 * 4096, &n);
    check_ctx c = {0};
    double before = peak_rss_mib();
    if (keep_copy) {
        c.copy = malloc(BIG_FILE);
        cr_assert_not_null(c.copy);
    }
    memra_reader_cfg cfg = check_cfg(&c, 1 << 20);
    cr_assert_eq(memra_source_read_jobs(s, jobs, n, &cfg, NULL, &e), MEMRA_OK, "%s", e.msg);
    cr_assert_eq(atomic_load(&c.bad), 0);
    cr_assert_geq(atomic_load(&c.bytes), BIG_FILE * 9 / 10);
    cr_assert_leq(atomic_load(&c.peak), 8u << 20, "at most 4 threads x 2 slots of 1 MiB live");
    double grew = peak_rss_mib() - before;
    free(c.copy);
    memra_source_close(s);
    free(jobs);
    remove_file();
    return grew;
}

Test(source, streaming_holds_its_buffers_not_the_file, .timeout = 120) {
    double grew = stream_big(false);
    cr_assert_lt(grew, 48.0, "peak RSS grew by %.1f MiB streaming a %llu MiB file", grew,
                 (unsigned long long)(BIG_FILE >> 20));
}

/* Negative control: a consumer that keeps the whole file fails the same bound. */
Test(source, whole_copy_fails_the_bound, .timeout = 120) {
    double grew = stream_big(true);
    cr_assert_geq(grew, 48.0, "the bound cannot see a whole copy (grew %.1f MiB)", grew);
}

/* ---- faults between chunks ---- */

typedef enum fault { F_SHRINK, F_REWRITE, F_REWRITE_KEEP_MTIME, F_GROW, F_SHORT, F_REPLACE, F_SHORT_PROGRESS } fault;
static fault g_fault;
static atomic_int g_calls;

static long faulty_pread(int fd, void *buf, size_t n, int64_t off) {
    int call = atomic_fetch_add(&g_calls, 1);
    if (g_fault == F_SHORT_PROGRESS) /* every read returns at most 100 bytes: the reader loops */
        return (long)pread(fd, buf, n < 100 ? n : 100, (off_t)off);
    if (call != 5)
        return (long)pread(fd, buf, n, (off_t)off);
    switch (g_fault) {
    case F_SHRINK: cr_assert_eq(truncate(g_path, 4096), 0); break;
    case F_GROW: {
        int w = open(g_path, O_WRONLY | O_APPEND);
        cr_assert_geq(w, 0);
        cr_assert_eq(write(w, "x", 1), 1);
        close(w);
        break;
    }
    case F_REWRITE:
    case F_REWRITE_KEEP_MTIME: {
        struct stat sb;
        cr_assert_eq(stat(g_path, &sb), 0);
        usleep(20000); /* past the file system's timestamp granularity */
        int w = open(g_path, O_WRONLY);
        cr_assert_geq(w, 0);
        uint8_t junk[4096];
        memset(junk, 0xAB, sizeof junk);
        cr_assert_eq(pwrite(w, junk, sizeof junk, (off_t)off), (ssize_t)sizeof junk);
        if (g_fault == F_REWRITE_KEEP_MTIME) { /* `touch -r` the old times back: only ctime tells */
            struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
            cr_assert_eq(futimens(w, ts), 0);
        }
        close(w);
        break;
    }
    case F_SHORT: return 0; /* EOF early, the file itself unchanged */
    case F_REPLACE: {
        char other[sizeof g_path + 8];
        snprintf(other, sizeof other, "%s.new", g_path);
        write_pattern(other, 3 << 20); /* the same bytes, another file */
        cr_assert_eq(rename(other, g_path), 0);
        break;
    }
    default: break;
    }
    return (long)pread(fd, buf, n, (off_t)off);
}

/* Streams a 3 MiB file with `f` injected at the sixth read; returns the status, message in e. */
static memra_status stream_with(fault f, memra_error *e, uint64_t *bad) {
    make_file("fault", 3 << 20);
    memra_source *s = NULL;
    cr_assert_eq(memra_source_open_file(g_path, &s, e), MEMRA_OK, "%s", e->msg);
    g_fault = f;
    atomic_store(&g_calls, 0);
    memra_source_set_pread(s, faulty_pread);
    uint64_t n = 0;
    memra_read_job *jobs = make_jobs(3 << 20, 8192, &n);
    check_ctx c = {0};
    memra_reader_cfg cfg = check_cfg(&c, 3 * 8192);
    cfg.n_threads = 1; /* the fault lands between two reads of one thread: one outcome */
    memra_status st = memra_source_read_jobs(s, jobs, n, &cfg, NULL, e);
    *bad = atomic_load(&c.bad);
    memra_source_close(s);
    free(jobs);
    remove_file();
    return st;
}

#define EXPECT_FAULT(f, needle)                                                                                        \
    do {                                                                                                               \
        memra_error e = {0};                                                                                           \
        uint64_t bad = 0;                                                                                              \
        cr_assert_eq(stream_with(f, &e, &bad), MEMRA_E_IO, "fault %d not caught", (int)(f));                           \
        cr_assert(strstr(e.msg, "model.bin"), "the message names the file: %s", e.msg);                                \
        cr_assert(strstr(e.msg, needle), "expected '%s' in: %s", needle, e.msg);                                       \
    } while (0)

Test(source_fault, file_shrunk_between_chunks) { EXPECT_FAULT(F_SHRINK, "shrank during the load"); }
Test(source_fault, file_rewritten_in_place) { EXPECT_FAULT(F_REWRITE, "changed while it was loaded (modified"); }
Test(source_fault, file_rewritten_mtime_restored) { EXPECT_FAULT(F_REWRITE_KEEP_MTIME, "ctime changed"); }
Test(source_fault, file_grown) { EXPECT_FAULT(F_GROW, "size 3145728 -> 3145729"); }
Test(source_fault, short_read) { EXPECT_FAULT(F_SHORT, "the file ended at byte"); }
Test(source_fault, file_replaced) { EXPECT_FAULT(F_REPLACE, "was replaced"); }

/* Control: reads that come back short but keep coming are not a fault, and land exactly. */
Test(source_fault, short_but_progressing_reads_pass) {
    memra_error e = {0};
    uint64_t bad = 1;
    cr_assert_eq(stream_with(F_SHORT_PROGRESS, &e, &bad), MEMRA_OK, "%s", e.msg);
    cr_assert_eq(bad, 0);
}

/* A file that changed between open and the first read is refused before a byte is consumed. */
Test(source_fault, changed_before_the_load) {
    make_file("pre", 1 << 20);
    memra_source *s = NULL;
    memra_error e = {0};
    cr_assert_eq(memra_source_open_file(g_path, &s, &e), MEMRA_OK, "%s", e.msg);
    cr_assert_eq(truncate(g_path, 1000), 0);
    uint64_t n = 0;
    memra_read_job *jobs = make_jobs(1 << 20, 4096, &n);
    check_ctx c = {0};
    memra_reader_cfg cfg = check_cfg(&c, 3 * 4096);
    cr_assert_eq(memra_source_read_jobs(s, jobs, n, &cfg, NULL, &e), MEMRA_E_IO);
    cr_assert(strstr(e.msg, "size 1048576 -> 1000 bytes"), "%s", e.msg);
    cr_assert_eq(atomic_load(&c.bytes), 0);
    memra_source_close(s);
    free(jobs);
    remove_file();
}
