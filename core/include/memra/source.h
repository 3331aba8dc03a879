/* memra/source.h: where a model's bytes are read from, and the chunked reader that streams them.
 *
 * A source is either a file, held open by its descriptor with the identity it had when opened
 * (device, inode, size, mtime, ctime), or bytes in memory (a file read whole, a preset built in
 * memory). Reads of a memory source copy from memory: a file changed on disk afterwards changes
 * nothing. Reads of a file source are pread()s that must return every byte asked for, and after
 * each the descriptor's identity is compared with the one recorded at open: a file that shrinks,
 * grows or is written to while it is read is MEMRA_E_IO naming it and what changed, never a
 * crash (nothing is mapped) or bytes of another version. memra_source_check also tests that the
 * path still names the same file (a file replaced by a rename during a load is refused).
 *
 * The chunked reader (memra_source_read_jobs) runs jobs of up to MEMRA_READ_SPANS byte ranges on
 * several threads, each into one of its own staging buffers (allocated by the caller's hooks:
 * pinned memory for a GPU upload), and hands each filled buffer to the caller's consume hook on
 * the thread that read it; a buffer is reused only after slot_wait says the consumer is done
 * with it (an asynchronous copy finished). The host memory it holds is n_threads * n_slots *
 * slot_bytes, whatever the size of the file. The identity is checked before the first read,
 * after every range, and after the last (path included). */
#ifndef MEMRA_SOURCE_H
#define MEMRA_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a file was when it was opened. Any write changes ctime (a user cannot set it back), so a
 * file rewritten to the same size with its mtime restored still differs. */
typedef struct memra_file_identity {
    uint64_t dev, ino, size;
    int64_t mtime_sec, mtime_nsec;
    int64_t ctime_sec, ctime_nsec;
} memra_file_identity;

typedef struct memra_source memra_source;

/* Opens `path` for reading (a regular file only: anything else is refused before a byte is read)
 * and records its identity. */
memra_status memra_source_open_file(const char *path, memra_source **out, memra_error *err);
/* A source over `size` bytes at `data` (which must outlive it), named `name` in messages. */
memra_status memra_source_open_memory(const void *data, uint64_t size, const char *name, memra_source **out,
                                      memra_error *err);
void memra_source_close(memra_source *s);

const char *memra_source_name(const memra_source *s);
uint64_t memra_source_size(const memra_source *s);
/* true: a file read on demand; false: bytes in memory. */
bool memra_source_is_file(const memra_source *s);
/* The identity recorded at open (zeroed for a memory source). */
memra_file_identity memra_source_identity(const memra_source *s);

/* The address that stands for offset 0 in the caller's pointers (a memory source: its bytes; a
 * file source: whatever the owner set, e.g. a reservation its data pointers point into), and the
 * offset of the n bytes at p: false when they do not lie inside [base, base + size). */
void memra_source_set_base(memra_source *s, const void *base);
const void *memra_source_base(const memra_source *s);
bool memra_source_offset_of(const memra_source *s, const void *p, uint64_t n, uint64_t *offset);

/* Copies bytes [offset, offset + n) into dst. Out of range is MEMRA_E_RANGE; a short read, a
 * failed read or a changed identity is MEMRA_E_IO naming the file. Safe from several threads. */
memra_status memra_source_read(const memra_source *s, uint64_t offset, uint64_t n, void *dst, memra_error *err);
/* MEMRA_E_IO naming the file unless its descriptor still has the identity recorded at open and
 * the path still names it. Always MEMRA_OK for a memory source. */
memra_status memra_source_check(const memra_source *s, memra_error *err);

/* Fault injection for tests: every pread of a file source goes through fn (NULL: pread). */
typedef long (*memra_source_pread_fn)(int fd, void *buf, size_t n, int64_t offset);
void memra_source_set_pread(memra_source *s, memra_source_pread_fn fn);

/* ---- the chunked reader ---- */

#define MEMRA_READ_SPANS 4

typedef struct memra_read_span {
    uint64_t offset, n_bytes;
} memra_read_span;

/* One job: its spans, read back to back into one staging buffer (span k right after span k-1). */
typedef struct memra_read_job {
    uint32_t n_spans;
    memra_read_span spans[MEMRA_READ_SPANS];
    void *user; /* the caller's, handed back to consume */
} memra_read_job;

/* The caller's hooks. `thread` is 0..n_threads-1, `slot` 0..n_slots-1 (a thread's buffers are
 * used in turn). Every hook but consume may be NULL. */
typedef struct memra_reader_cfg {
    uint32_t n_threads; /* 1..64 */
    uint32_t n_slots;   /* staging buffers per thread, 1..8 */
    size_t slot_bytes;  /* each; no job may need more */
    void *ctx;
    /* On the thread, before its first job (cudaSetDevice, a stream). */
    memra_status (*thread_begin)(void *ctx, uint32_t thread, memra_error *err);
    /* On the thread, after its last (always called when thread_begin succeeded). */
    void (*thread_end)(void *ctx, uint32_t thread);
    /* A staging buffer of `bytes` (NULL: out of memory); NULL hook: malloc. */
    void *(*slot_alloc)(void *ctx, uint32_t thread, uint32_t slot, size_t bytes);
    void (*slot_free)(void *ctx, uint32_t thread, uint32_t slot, void *p);
    /* Returns once what consume started on the slot's buffer is finished (before the buffer is
     * read into again, and once more for every used slot before the thread ends). */
    memra_status (*slot_wait)(void *ctx, uint32_t thread, uint32_t slot, memra_error *err);
    /* The job's bytes are in buf. Never NULL. */
    memra_status (*consume)(void *ctx, uint32_t thread, uint32_t slot, const memra_read_job *job, void *buf,
                            memra_error *err);
} memra_reader_cfg;

typedef struct memra_reader_stats {
    uint64_t jobs, bytes_read;
    uint64_t buffer_bytes; /* staging held at most (n_threads * n_slots * slot_bytes, or less) */
    double seconds;
} memra_reader_stats;

/* Runs every job (each span inside the source; its spans' bytes at most slot_bytes) and returns
 * the first failure (the others stop at their next job). stats may be NULL. */
memra_status memra_source_read_jobs(const memra_source *s, const memra_read_job *jobs, uint64_t n_jobs,
                                    const memra_reader_cfg *cfg, memra_reader_stats *stats, memra_error *err);

#ifdef __cplusplus
}
#endif
#endif
