/* source.c: a model's bytes, from a file held open or from memory, and the chunked reader that
 * streams them into a caller's staging buffers from several threads (memra/source.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "memra/fileio.h"
#include "memra/source.h"

struct memra_source {
    char *name;
    int fd; /* -1: memory */
    const uint8_t *mem;
    const void *base;
    uint64_t size;
    memra_file_identity id;
    memra_source_pread_fn pread_fn;
};

static memra_file_identity identity_of(const struct stat *sb) {
    return (memra_file_identity){.dev = (uint64_t)sb->st_dev,
                                 .ino = (uint64_t)sb->st_ino,
                                 .size = (uint64_t)sb->st_size,
                                 .mtime_sec = (int64_t)sb->st_mtim.tv_sec,
                                 .mtime_nsec = (int64_t)sb->st_mtim.tv_nsec,
                                 .ctime_sec = (int64_t)sb->st_ctim.tv_sec,
                                 .ctime_nsec = (int64_t)sb->st_ctim.tv_nsec};
}

static memra_source *source_new(const char *name) {
    memra_source *s = calloc(1, sizeof *s);
    if (s)
        s->name = strdup(name ? name : "<memory>");
    if (s && !s->name) {
        free(s);
        return NULL;
    }
    if (s)
        s->fd = -1;
    return s;
}

memra_status memra_source_open_file(const char *path, memra_source **out, memra_error *err) {
    if (!out || !path)
        return memra_fail(err, MEMRA_E_INVALID, "memra_source_open_file: path or out is NULL");
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; the type is checked before a read. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return memra_fail(err, MEMRA_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return memra_fail(err, MEMRA_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return memra_fail(err, MEMRA_E_IO, "%s: not a regular file (%s): a model must be a GGUF file", path,
                          memra_file_type_name(sb.st_mode));
    }
    memra_source *s = source_new(path);
    if (!s) {
        close(fd);
        return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory", path);
    }
    s->fd = fd;
    s->id = identity_of(&sb);
    s->size = s->id.size;
    *out = s;
    return MEMRA_OK;
}

memra_status memra_source_open_memory(const void *data, uint64_t size, const char *name, memra_source **out,
                                      memra_error *err) {
    if (!out || (!data && size > 0))
        return memra_fail(err, MEMRA_E_INVALID, "memra_source_open_memory: data or out is NULL");
    memra_source *s = source_new(name);
    if (!s)
        return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory", name ? name : "<memory>");
    s->mem = data;
    s->base = data;
    s->size = size;
    *out = s;
    return MEMRA_OK;
}

void memra_source_close(memra_source *s) {
    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    free(s->name);
    free(s);
}

const char *memra_source_name(const memra_source *s) { return s->name; }
uint64_t memra_source_size(const memra_source *s) { return s->size; }
bool memra_source_is_file(const memra_source *s) { return s && s->fd >= 0; }
memra_file_identity memra_source_identity(const memra_source *s) { return s->id; }
void memra_source_set_base(memra_source *s, const void *base) { s->base = base; }
const void *memra_source_base(const memra_source *s) { return s->base; }
void memra_source_set_pread(memra_source *s, memra_source_pread_fn fn) { s->pread_fn = fn; }

bool memra_source_offset_of(const memra_source *s, const void *p, uint64_t n, uint64_t *offset) {
    if (!s || !s->base || !p)
        return false;
    uintptr_t b = (uintptr_t)s->base, q = (uintptr_t)p;
    if (q < b || q - b > s->size || n > s->size - (q - b))
        return false;
    *offset = q - b;
    return true;
}

/* What differs between two identities, for a message ("size 100 -> 60, modified"). */
static void describe_change(const memra_file_identity *a, const memra_file_identity *b, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    if (a->dev != b->dev || a->ino != b->ino)
        k += (size_t)snprintf(buf + k, n - k, "%sanother file (inode %" PRIu64 " -> %" PRIu64 ")", k ? ", " : "",
                              a->ino, b->ino);
    if (k < n && a->size != b->size)
        k += (size_t)snprintf(buf + k, n - k, "%ssize %" PRIu64 " -> %" PRIu64 " bytes", k ? ", " : "", a->size,
                              b->size);
    if (k < n && (a->mtime_sec != b->mtime_sec || a->mtime_nsec != b->mtime_nsec))
        k += (size_t)snprintf(buf + k, n - k, "%smodified (mtime changed)", k ? ", " : "");
    if (k < n && (a->ctime_sec != b->ctime_sec || a->ctime_nsec != b->ctime_nsec) && k == 0)
        k += (size_t)snprintf(buf + k, n - k, "written or its status changed (ctime changed)");
}

static memra_status check_fd(const memra_source *s, memra_error *err) {
    struct stat sb;
    if (fstat(s->fd, &sb) != 0)
        return memra_fail(err, MEMRA_E_IO, "%s: cannot stat while loading: %s", s->name, strerror(errno));
    memra_file_identity now = identity_of(&sb);
    if (memcmp(&now, &s->id, sizeof now) == 0)
        return MEMRA_OK;
    if (sb.st_nlink == 0) /* its last name went: unlinked, or a rename put another file there */
        return memra_fail(err, MEMRA_E_IO,
                          "%s: the file was replaced or removed while it was loaded (the file read has no name any "
                          "more)",
                          s->name);
    char what[256];
    describe_change(&s->id, &now, what, sizeof what);
    return memra_fail(err, MEMRA_E_IO,
                      "%s: the file changed while it was loaded (%s): it must stay as it was until the load ends",
                      s->name, what);
}

memra_status memra_source_check(const memra_source *s, memra_error *err) {
    if (!memra_source_is_file(s))
        return MEMRA_OK;
    memra_status st = check_fd(s, err);
    if (st != MEMRA_OK)
        return st;
    struct stat sb;
    if (stat(s->name, &sb) != 0)
        return memra_fail(err, MEMRA_E_IO, "%s: the file was removed or renamed while it was loaded (%s)", s->name,
                          strerror(errno));
    if ((uint64_t)sb.st_dev != s->id.dev || (uint64_t)sb.st_ino != s->id.ino)
        return memra_fail(err, MEMRA_E_IO,
                          "%s: the file was replaced while it was loaded (the path now names inode %" PRIu64
                          ", the load read inode %" PRIu64 ")",
                          s->name, (uint64_t)sb.st_ino, s->id.ino);
    return MEMRA_OK;
}

memra_status memra_source_read(const memra_source *s, uint64_t offset, uint64_t n, void *dst, memra_error *err) {
    if (offset > s->size || n > s->size - offset)
        return memra_fail(err, MEMRA_E_RANGE,
                          "%s: bytes [%" PRIu64 ", +%" PRIu64 ") lie outside the file's %" PRIu64 " bytes", s->name,
                          offset, n, s->size);
    if (n == 0)
        return MEMRA_OK;
    if (!memra_source_is_file(s)) {
        memcpy(dst, s->mem + offset, (size_t)n);
        return MEMRA_OK;
    }
    uint64_t done = 0;
    while (done < n) {
        size_t chunk = n - done < ((uint64_t)1 << 30) ? (size_t)(n - done) : ((size_t)1 << 30);
        long got = s->pread_fn ? s->pread_fn(s->fd, (char *)dst + done, chunk, (int64_t)(offset + done))
                               : (long)pread(s->fd, (char *)dst + done, chunk, (off_t)(offset + done));
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return memra_fail(err, MEMRA_E_IO, "%s: read failed at offset %" PRIu64 ": %s", s->name, offset + done,
                              strerror(errno));
        if (got == 0)
            return memra_fail(err, MEMRA_E_IO,
                              "%s: the file ended at byte %" PRIu64 " while bytes [%" PRIu64 ", %" PRIu64
                              ") were read (it had %" PRIu64 " bytes when opened): it shrank during the load",
                              s->name, offset + done, offset, offset + n, s->size);
        done += (uint64_t)got;
    }
    /* The bytes just read belong to the identity recorded at open only if it still holds now: a
     * write that raced the read changed mtime and ctime before its data landed. */
    return check_fd(s, err);
}

/* ---- the chunked reader ---- */

typedef struct reader {
    const memra_source *src;
    const memra_read_job *jobs;
    uint64_t n_jobs;
    const memra_reader_cfg *cfg;
    atomic_uint_fast64_t next;
    atomic_bool failed;
    atomic_uint_fast64_t bytes_read, buffer_bytes;
    pthread_mutex_t lock;
    memra_error first; /* the first failure */
    memra_status first_st;
} reader;

typedef struct reader_thread {
    reader *r;
    uint32_t index;
    pthread_t tid;
    bool started;
} reader_thread;

static void reader_fail(reader *r, memra_status st, const memra_error *e) {
    pthread_mutex_lock(&r->lock);
    if (r->first_st == MEMRA_OK) {
        r->first_st = st;
        r->first = *e;
    }
    pthread_mutex_unlock(&r->lock);
    atomic_store(&r->failed, true);
}

static void *reader_main(void *arg) {
    reader_thread *t = arg;
    reader *r = t->r;
    const memra_reader_cfg *cfg = r->cfg;
    memra_error e = {0};
    memra_status st = MEMRA_OK;
    void *bufs[8] = {0};
    bool used[8] = {0};
    if (cfg->thread_begin && (st = cfg->thread_begin(cfg->ctx, t->index, &e)) != MEMRA_OK) {
        reader_fail(r, st, &e);
        return NULL;
    }
    for (uint64_t k = 0; !atomic_load(&r->failed); k++) {
        uint64_t j = atomic_fetch_add(&r->next, 1);
        if (j >= r->n_jobs)
            break;
        uint32_t slot = (uint32_t)(k % cfg->n_slots);
        if (used[slot] && cfg->slot_wait && (st = cfg->slot_wait(cfg->ctx, t->index, slot, &e)) != MEMRA_OK)
            break;
        used[slot] = false;
        if (!bufs[slot]) {
            bufs[slot] = cfg->slot_alloc ? cfg->slot_alloc(cfg->ctx, t->index, slot, cfg->slot_bytes)
                                         : malloc(cfg->slot_bytes ? cfg->slot_bytes : 1);
            if (!bufs[slot]) {
                st = memra_fail(&e, MEMRA_E_NOMEM, "%s: no memory for a %.1f MiB staging buffer of the load",
                                memra_source_name(r->src), cfg->slot_bytes / 1048576.0);
                break;
            }
            atomic_fetch_add(&r->buffer_bytes, cfg->slot_bytes);
        }
        const memra_read_job *job = &r->jobs[j];
        uint64_t at = 0;
        for (uint32_t i = 0; i < job->n_spans && st == MEMRA_OK; i++) {
            st = memra_source_read(r->src, job->spans[i].offset, job->spans[i].n_bytes, (char *)bufs[slot] + at, &e);
            at += job->spans[i].n_bytes;
        }
        if (st != MEMRA_OK)
            break;
        atomic_fetch_add(&r->bytes_read, at);
        used[slot] = true;
        if ((st = cfg->consume(cfg->ctx, t->index, slot, job, bufs[slot], &e)) != MEMRA_OK)
            break;
    }
    /* Every slot's consumer finishes before its buffer goes (a failure keeps the first message). */
    for (uint32_t i = 0; i < cfg->n_slots; i++) {
        memra_error e2 = {0};
        memra_status s2 = used[i] && cfg->slot_wait ? cfg->slot_wait(cfg->ctx, t->index, i, &e2) : MEMRA_OK;
        if (st == MEMRA_OK && s2 != MEMRA_OK) {
            st = s2;
            e = e2;
        }
    }
    for (uint32_t i = 0; i < cfg->n_slots; i++)
        if (bufs[i]) {
            if (cfg->slot_free)
                cfg->slot_free(cfg->ctx, t->index, i, bufs[i]);
            else if (!cfg->slot_alloc)
                free(bufs[i]);
        }
    if (cfg->thread_end)
        cfg->thread_end(cfg->ctx, t->index);
    if (st != MEMRA_OK)
        reader_fail(r, st, &e);
    return NULL;
}

memra_status memra_source_read_jobs(const memra_source *s, const memra_read_job *jobs, uint64_t n_jobs,
                                    const memra_reader_cfg *cfg, memra_reader_stats *stats, memra_error *err) {
    if (!s || (!jobs && n_jobs) || !cfg || !cfg->consume || cfg->n_threads < 1 || cfg->n_threads > 64 ||
        cfg->n_slots < 1 || cfg->n_slots > 8)
        return memra_fail(err, MEMRA_E_INVALID, "memra_source_read_jobs: invalid arguments");
    for (uint64_t j = 0; j < n_jobs; j++) {
        uint64_t total = 0;
        if (jobs[j].n_spans > MEMRA_READ_SPANS)
            return memra_fail(err, MEMRA_E_INVALID, "%s: job %" PRIu64 " has %u spans (at most %d)", s->name, j,
                              jobs[j].n_spans, MEMRA_READ_SPANS);
        for (uint32_t i = 0; i < jobs[j].n_spans; i++) {
            const memra_read_span *sp = &jobs[j].spans[i];
            if (sp->offset > s->size || sp->n_bytes > s->size - sp->offset)
                return memra_fail(err, MEMRA_E_RANGE,
                                  "%s: job %" PRIu64 " reads [%" PRIu64 ", +%" PRIu64 ") past the file's %" PRIu64
                                  " bytes",
                                  s->name, j, sp->offset, sp->n_bytes, s->size);
            total += sp->n_bytes;
        }
        if (total > cfg->slot_bytes)
            return memra_fail(err, MEMRA_E_INVALID,
                              "%s: job %" PRIu64 " needs %" PRIu64 " bytes, more than a staging buffer's %zu",
                              s->name, j, total, cfg->slot_bytes);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memra_status st = memra_source_check(s, err);
    if (st != MEMRA_OK)
        return st;
    reader r = {.src = s, .jobs = jobs, .n_jobs = n_jobs, .cfg = cfg};
    atomic_init(&r.next, 0);
    atomic_init(&r.failed, false);
    atomic_init(&r.bytes_read, 0);
    atomic_init(&r.buffer_bytes, 0);
    pthread_mutex_init(&r.lock, NULL);
    uint32_t n = cfg->n_threads;
    if (n_jobs < n)
        n = n_jobs ? (uint32_t)n_jobs : 1;
    reader_thread th[64];
    for (uint32_t i = 0; i < n; i++) {
        th[i] = (reader_thread){.r = &r, .index = i};
        th[i].started = pthread_create(&th[i].tid, NULL, reader_main, &th[i]) == 0;
        if (!th[i].started) {
            memra_error e = {0};
            reader_fail(&r, memra_fail(&e, MEMRA_E_NOMEM, "%s: cannot start reader thread %u", s->name, i), &e);
        }
    }
    for (uint32_t i = 0; i < n; i++)
        if (th[i].started)
            pthread_join(th[i].tid, NULL);
    pthread_mutex_destroy(&r.lock);
    if (r.first_st != MEMRA_OK) {
        if (err)
            *err = r.first;
        return r.first_st;
    }
    if ((st = memra_source_check(s, err)) != MEMRA_OK)
        return st;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (stats) {
        stats->jobs = n_jobs;
        stats->bytes_read = atomic_load(&r.bytes_read);
        stats->buffer_bytes = atomic_load(&r.buffer_bytes);
        stats->seconds = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    }
    return MEMRA_OK;
}
