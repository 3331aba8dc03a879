/* memra/fileio.h: the file handling every tool shares, so none reports success it did not have.
 *   - record lines appended whole or not at all, safe against a second process appending to the
 *     same file at once (an exclusive lock around one write; a short write is undone);
 *   - output files written privately and renamed into place only when complete, so an
 *     interrupted or failed write leaves nothing beside stale metadata;
 *   - streams closed with every error seen (a full disk at the final flush, a closed stdout);
 *   - inputs checked to be regular files before anything blocks on them, and outputs checked not
 *     to be one of the inputs;
 *   - the memory a run may still spend, cgroup limit included.
 * Every function returns a status with a message naming the file and the errno's text. */
#ifndef MEMRA_FILEIO_H
#define MEMRA_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Appends `line` (n bytes, ending in '\n') to the file open on fd (opened O_WRONLY | O_APPEND,
 * named `path` in messages) whole or not at all: under an exclusive flock of the file, written
 * with one write loop; if the write fails part way, the file is truncated back to the size it had
 * before this append (still under the lock) and MEMRA_E_IO names path and errno. */
memra_status memra_append_line(int fd, const char *path, const char *line, size_t n, memra_error *err);

/* A file written under a private name in the same folder and renamed onto `path` on commit. */
typedef struct memra_atomic_file memra_atomic_file;
/* Creates "<path>.tmp.<pid>.<n>" (O_EXCL, mode 0644 less the umask) and returns a stream on it. */
memra_status memra_atomic_open(const char *path, memra_atomic_file **out, FILE **stream, memra_error *err);
/* Flushes, checks the stream's error flag, closes, then renames onto path. Any failure removes the
 * private file and is MEMRA_E_IO naming path. Frees af either way. */
memra_status memra_atomic_commit(memra_atomic_file *af, memra_error *err);
/* Closes and removes the private file; frees af. NULL is a no-op. */
void memra_atomic_abort(memra_atomic_file *af);
/* The private file's name, for a signal handler that must unlink it (unlink is async-signal-safe):
 * the string lives as long as af. */
const char *memra_atomic_temp_path(const memra_atomic_file *af);

/* fflush, ferror and fclose of `f`, named `name` in the message ("stdout", a path): MEMRA_E_IO with
 * the errno's text when any of them failed, including an error flagged on an earlier write. Closes
 * f either way. For stdout the caller passes stdout. */
memra_status memra_close_stream(FILE *f, const char *name, memra_error *err);

/* MEMRA_E_IO naming `what` and path unless path names a regular file (a FIFO, a device, a socket
 * or a directory is refused before anything opens it for reading). A missing file is MEMRA_E_IO
 * "cannot open: No such file or directory". `what` is e.g. "prompt ids file". */
memra_status memra_check_regular_input(const char *path, const char *what, memra_error *err);

/* A whole text file (a prompt): checked to be a regular file as above, at most max_bytes (a larger
 * one, or one that grows while read, is refused naming it), no NUL byte. *out is malloc'd and
 * NUL-terminated, *len its length without the NUL. Usage faults are MEMRA_E_INVALID, I/O ones
 * MEMRA_E_IO. */
memra_status memra_read_text_input(const char *path, const char *what, size_t max_bytes, char **out, size_t *len,
                                   memra_error *err);

/* What a stat's st_mode names, for messages: "a regular file", "a directory", "a FIFO", "a
 * character device", "a block device", "a socket", or "not a regular file". */
const char *memra_file_type_name(uint32_t st_mode);

/* *same = true when both paths exist and name one file (same device and inode, links and
 * different spellings included); false when either does not exist. */
memra_status memra_same_file(const char *a, const char *b, bool *same, memra_error *err);

/* Bytes this process may still allocate without being killed for memory: the smaller of the
 * machine's MemAvailable and the cgroup's limit less its usage (cgroup v2 memory.max and
 * memory.current, or v1 memory.limit_in_bytes and memory.usage_in_bytes), and of RLIMIT_AS less the
 * address space in use when it is set. `how` (may be NULL) says which bound won, for messages. */
memra_status memra_memory_available(uint64_t *bytes, char *how, size_t how_size, memra_error *err);

#ifdef __cplusplus
}
#endif
#endif
