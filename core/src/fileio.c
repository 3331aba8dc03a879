/* fileio.c: the file handling every tool shares, so none reports success it did not have.
 *
 * Record files: a line is appended under an exclusive flock with one write loop on an O_APPEND
 * descriptor; a write that fails part way is undone by truncating the file back to the size it
 * had before (still under the lock), so the next writer never glues onto half a line. Output
 * files: written under a private name beside the target and renamed into place on commit.
 * Memory: the machine's MemAvailable, the cgroup's limit less its usage (v2 walked up to the
 * root, or v1), and RLIMIT_AS less the address space in use; the smallest wins. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "memra/fileio.h"

/* ---- appending a line whole ---------------------------------------------------------------- */

static int flock_retry(int fd, int op) {
    int rc;
    do
        rc = flock(fd, op);
    while (rc != 0 && errno == EINTR);
    return rc;
}

memra_status memra_append_line(int fd, const char *path, const char *line, size_t n, memra_error *err) {
    const char *name = path ? path : "(record file)";
    if (fd < 0 || (!line && n > 0))
        return memra_fail(err, MEMRA_E_INVALID, "%s: append: invalid arguments", name);
    if (n == 0)
        return MEMRA_OK;
    if (line[n - 1] != '\n')
        return memra_fail(err, MEMRA_E_INVALID, "%s: append: a record line must end in a newline", name);
    int fl = fcntl(fd, F_GETFL);
    if (fl == -1)
        return memra_fail(err, MEMRA_E_IO, "%s: cannot append: %s", name, strerror(errno));
    if (!(fl & O_APPEND))
        /* Without O_APPEND a second writer's lines are overwritten, lock or not. */
        return memra_fail(err, MEMRA_E_INVALID, "%s: append: the file is not open with O_APPEND", name);
    if (flock_retry(fd, LOCK_EX) != 0)
        return memra_fail(err, MEMRA_E_IO, "%s: cannot lock for appending: %s", name, strerror(errno));
    memra_status st = MEMRA_OK;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = memra_fail(err, MEMRA_E_IO, "%s: cannot stat: %s", name, strerror(errno));
        goto unlock;
    }
    /* Under the lock, every cooperating writer appends at the end, so the end now is where this
     * line starts, and the size to return to if the write fails part way. */
    off_t before = sb.st_size;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, line + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            int undo = 0;
            if (S_ISREG(sb.st_mode)) {
                do
                    undo = ftruncate(fd, before);
                while (undo != 0 && errno == EINTR);
            } else if (done > 0) {
                undo = -1; /* a pipe or a device cannot take back what it was given */
                errno = ESPIPE;
            }
            if (undo != 0)
                st =
                    memra_fail(err, MEMRA_E_IO,
                               "%s: append failed after %zu of %zu bytes: %s; removing the partial line failed too: %s",
                               name, done, n, strerror(e), strerror(errno));
            else
                st = memra_fail(err, MEMRA_E_IO, "%s: cannot append a record line (%zu bytes): %s", name, n,
                                strerror(e));
            goto unlock;
        }
        done += (size_t)w;
    }
unlock:
    if (flock_retry(fd, LOCK_UN) != 0 && st == MEMRA_OK)
        st = memra_fail(err, MEMRA_E_IO, "%s: cannot unlock: %s", name, strerror(errno));
    return st;
}

/* ---- private file renamed into place ------------------------------------------------------- */

struct memra_atomic_file {
    FILE *stream;
    char *path;
    char *temp;
};

static atomic_uint g_atomic_counter;

memra_status memra_atomic_open(const char *path, memra_atomic_file **out, FILE **stream, memra_error *err) {
    if (out)
        *out = NULL;
    if (stream)
        *stream = NULL;
    if (!path || !*path || !out || !stream)
        return memra_fail(err, MEMRA_E_INVALID, "atomic open: invalid arguments");
    memra_atomic_file *af = calloc(1, sizeof *af);
    size_t plen = strlen(path);
    size_t tlen = plen + 64;
    if (af) {
        af->path = malloc(plen + 1);
        af->temp = malloc(tlen);
    }
    if (!af || !af->path || !af->temp) {
        if (af) {
            free(af->path);
            free(af->temp);
        }
        free(af);
        return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory", path);
    }
    memcpy(af->path, path, plen + 1);
    int fd = -1;
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned n = atomic_fetch_add(&g_atomic_counter, 1u);
        snprintf(af->temp, tlen, "%s.tmp.%ld.%u", path, (long)getpid(), n);
        do
            fd = open(af->temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        while (fd < 0 && errno == EINTR);
        if (fd >= 0 || errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int e = errno;
        memra_status st = memra_fail(err, MEMRA_E_IO, "%s: cannot create %s: %s", path, af->temp, strerror(e));
        free(af->path);
        free(af->temp);
        free(af);
        return st;
    }
    af->stream = fdopen(fd, "w");
    if (!af->stream) {
        int e = errno;
        close(fd);
        unlink(af->temp);
        memra_status st =
            memra_fail(err, MEMRA_E_IO, "%s: cannot open a stream on %s: %s", path, af->temp, strerror(e));
        free(af->path);
        free(af->temp);
        free(af);
        return st;
    }
    *out = af;
    *stream = af->stream;
    return MEMRA_OK;
}

static void atomic_free(memra_atomic_file *af) {
    free(af->path);
    free(af->temp);
    free(af);
}

memra_status memra_atomic_commit(memra_atomic_file *af, memra_error *err) {
    if (!af)
        return memra_fail(err, MEMRA_E_INVALID, "atomic commit: no file");
    memra_status st = MEMRA_OK;
    errno = 0;
    int flush_failed = fflush(af->stream) != 0;
    int e = errno;
    int had_error = ferror(af->stream);
    if (!flush_failed && !had_error) {
        /* The data reaches the disk before the name does: a crash never leaves a complete-looking
         * name over an empty file. */
        int fd = fileno(af->stream);
        if (fd >= 0 && fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
            flush_failed = 1;
            e = errno;
        }
    }
    errno = 0;
    int close_failed = fclose(af->stream) != 0;
    if (close_failed && !flush_failed)
        e = errno;
    af->stream = NULL;
    if (flush_failed || had_error || close_failed) {
        unlink(af->temp);
        if (e == 0)
            st = memra_fail(err, MEMRA_E_IO, "%s: write failed (an earlier write to the file failed)", af->path);
        else
            st = memra_fail(err, MEMRA_E_IO, "%s: write failed: %s", af->path, strerror(e));
        atomic_free(af);
        return st;
    }
    if (rename(af->temp, af->path) != 0) {
        e = errno;
        unlink(af->temp);
        st = memra_fail(err, MEMRA_E_IO, "%s: cannot rename %s into place: %s", af->path, af->temp, strerror(e));
    }
    atomic_free(af);
    return st;
}

void memra_atomic_abort(memra_atomic_file *af) {
    if (!af)
        return;
    if (af->stream)
        fclose(af->stream);
    unlink(af->temp);
    atomic_free(af);
}

const char *memra_atomic_temp_path(const memra_atomic_file *af) { return af ? af->temp : NULL; }

/* ---- closing a stream with every error seen -------------------------------------------------- */

memra_status memra_close_stream(FILE *f, const char *name, memra_error *err) {
    const char *nm = name ? name : "(stream)";
    if (!f)
        return memra_fail(err, MEMRA_E_INVALID, "%s: no stream to close", nm);
    errno = 0;
    int flush_failed = fflush(f) != 0;
    int e = flush_failed ? errno : 0;
    int had_error = ferror(f);
    errno = 0;
    int close_failed = fclose(f) != 0;
    if (close_failed && e == 0)
        e = errno;
    if (!flush_failed && !had_error && !close_failed)
        return MEMRA_OK;
    if (e == 0 && had_error)
        /* The flag was set by an earlier write whose errno is gone; writing through a stream that
         * failed once is most often a full disk or a closed descriptor. */
        return memra_fail(err, MEMRA_E_IO, "%s: write failed: an earlier write to it failed", nm);
    return memra_fail(err, MEMRA_E_IO, "%s: write failed: %s", nm, strerror(e ? e : EIO));
}

/* ---- inputs that are regular files ------------------------------------------------------------ */

const char *memra_file_type_name(uint32_t st_mode) {
    mode_t m = (mode_t)st_mode;
    if (S_ISREG(m))
        return "a regular file";
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a regular file";
}

memra_status memra_check_regular_input(const char *path, const char *what, memra_error *err) {
    const char *w = what ? what : "input";
    if (!path || !*path)
        return memra_fail(err, MEMRA_E_INVALID, "%s: no path given", w);
    struct stat sb;
    /* stat never opens the file, so a FIFO with no writer cannot block here. */
    if (stat(path, &sb) != 0)
        return memra_fail(err, MEMRA_E_IO, "%s %s: cannot open: %s", w, path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return memra_fail(err, MEMRA_E_IO, "%s %s: is %s, not a regular file", w, path,
                          memra_file_type_name(sb.st_mode));
    return MEMRA_OK;
}

memra_status memra_read_text_input(const char *path, const char *what, size_t max_bytes, char **out, size_t *len,
                                   memra_error *err) {
    const char *w = what ? what : "input";
    if (out)
        *out = NULL;
    if (len)
        *len = 0;
    if (!out || !len)
        return memra_fail(err, MEMRA_E_INVALID, "%s: no output", w);
    memra_status st = memra_check_regular_input(path, w, err);
    if (st != MEMRA_OK)
        return st;
    /* O_NONBLOCK: a FIFO swapped in since the check is refused below, not waited on. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return memra_fail(err, MEMRA_E_IO, "%s %s: cannot open: %s", w, path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return memra_fail(err, MEMRA_E_IO, "%s %s: not a regular file", w, path);
    }
    if ((uint64_t)sb.st_size > max_bytes) {
        close(fd);
        return memra_fail(err, MEMRA_E_INVALID, "%s %s: %lld bytes, more than the %zu a text input may have", w, path,
                          (long long)sb.st_size, max_bytes);
    }
    size_t cap = (size_t)sb.st_size + 1, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return memra_fail(err, MEMRA_E_NOMEM, "%s %s: out of memory for %zu bytes", w, path, cap);
    }
    for (;;) { /* up to one byte past the size seen: a file that grew meanwhile is refused */
        ssize_t k = read(fd, buf + n, cap - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            st = memra_fail(err, MEMRA_E_IO, "%s %s: read failed: %s", w, path, strerror(errno));
            break;
        }
        if (k == 0)
            break;
        n += (size_t)k;
        if (n == cap) {
            st = memra_fail(err, MEMRA_E_IO, "%s %s: the file grew while it was read", w, path);
            break;
        }
    }
    close(fd);
    if (st == MEMRA_OK && memchr(buf, '\0', n))
        st = memra_fail(err, MEMRA_E_INVALID, "%s %s: holds a NUL byte at offset %zu: not a text", w, path,
                        (size_t)((char *)memchr(buf, '\0', n) - buf));
    if (st != MEMRA_OK) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return MEMRA_OK;
}

memra_status memra_same_file(const char *a, const char *b, bool *same, memra_error *err) {
    if (!same || !a || !b)
        return memra_fail(err, MEMRA_E_INVALID, "same file: invalid arguments");
    *same = false;
    struct stat sa, sb;
    if (stat(a, &sa) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return MEMRA_OK;
        return memra_fail(err, MEMRA_E_IO, "%s: cannot stat: %s", a, strerror(errno));
    }
    if (stat(b, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return MEMRA_OK;
        return memra_fail(err, MEMRA_E_IO, "%s: cannot stat: %s", b, strerror(errno));
    }
    *same = sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return MEMRA_OK;
}

/* ---- memory available ------------------------------------------------------------------------- */

/* Reads a small text file whole into buf (NUL-terminated). Returns bytes read, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t size) {
    int fd;
    do
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got + 1 < size) {
        ssize_t r = read(fd, buf + got, size - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    return (ssize_t)got;
}

/* A cgroup control file holding one number or "max". 1 and *v on a number, 0 on "max", -1 when
 * the file cannot be read or parsed. */
static int read_cg_value(const char *path, uint64_t *v) {
    char buf[64];
    if (read_small(path, buf, sizeof buf) <= 0)
        return -1;
    if (strncmp(buf, "max", 3) == 0)
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(buf, &end, 10);
    if (errno != 0 || end == buf)
        return -1;
    *v = (uint64_t)x;
    return 1;
}

static void take_min(uint64_t *best, bool *have, uint64_t v, char *how, size_t how_size, const char *fmt,
                     const char *arg) {
    if (!*have || v < *best) {
        *best = v;
        *have = true;
        if (how && how_size)
            snprintf(how, how_size, fmt, arg ? arg : "");
    }
}

/* cgroup v2: the unified hierarchy's line "0::/path" of /proc/self/cgroup; each folder from the
 * process's cgroup up to the root may set memory.max. */
static void cgroup_v2(uint64_t *best, bool *have, char *how, size_t how_size) {
    char buf[4096];
    if (read_small("/proc/self/cgroup", buf, sizeof buf) <= 0)
        return;
    char *rel = NULL;
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (strncmp(line, "0::", 3) == 0) {
            rel = line + 3;
            break;
        }
        line = nl ? nl + 1 : NULL;
    }
    if (!rel)
        return;
    char dir[PATH_MAX];
    int k = snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", rel);
    if (k < 0 || (size_t)k >= sizeof dir)
        return;
    /* Inside a cgroup namespace the path may read "/" while limits sit on /sys/fs/cgroup itself;
     * walking up from the given folder to /sys/fs/cgroup covers both. */
    for (;;) {
        size_t len = strlen(dir);
        while (len > 1 && dir[len - 1] == '/')
            dir[--len] = '\0';
        char f[PATH_MAX + 32];
        uint64_t max = 0, cur = 0;
        snprintf(f, sizeof f, "%s/memory.max", dir);
        if (read_cg_value(f, &max) == 1) {
            snprintf(f, sizeof f, "%s/memory.current", dir);
            if (read_cg_value(f, &cur) != 1)
                cur = 0;
            uint64_t room = max > cur ? max - cur : 0;
            take_min(best, have, room, how, how_size, "cgroup v2 %s memory.max less memory.current", dir);
        }
        if (strcmp(dir, "/sys/fs/cgroup") == 0 || len <= strlen("/sys/fs/cgroup"))
            break;
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
            break;
        *slash = '\0';
    }
}

/* cgroup v1: the memory controller's line "N:...memory...:/path". */
static void cgroup_v1(uint64_t *best, bool *have, char *how, size_t how_size) {
    char buf[4096];
    if (read_small("/proc/self/cgroup", buf, sizeof buf) <= 0)
        return;
    char *rel = NULL;
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c1 && c2) {
            *c2 = '\0';
            const char *ctl = c1 + 1;
            bool memory = false;
            for (const char *p = ctl; *p;) {
                size_t l = strcspn(p, ",");
                if (l == 6 && strncmp(p, "memory", 6) == 0)
                    memory = true;
                p += l;
                if (*p == ',')
                    p++;
            }
            *c2 = ':';
            if (memory) {
                rel = c2 + 1;
                break;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    if (!rel)
        return;
    /* The controller's mount: "memory" alone, or joined with others ("memory,cpu"...). */
    const char *roots[2] = {"/sys/fs/cgroup/memory", "/sys/fs/cgroup/memory,cpu"};
    for (int i = 0; i < 2; i++) {
        struct stat sb;
        if (stat(roots[i], &sb) != 0 || !S_ISDIR(sb.st_mode))
            continue;
        size_t root_len = strlen(roots[i]);
        char dir[PATH_MAX];
        int k = snprintf(dir, sizeof dir, "%s%s", roots[i], rel);
        if (k < 0 || (size_t)k >= sizeof dir)
            return;
        /* From the process's folder up to the mount: a parent's limit holds its children too. In
         * a cgroup namespace the process's folder is the mount itself, and the walk starts there
         * once the deeper folders are not found. */
        for (;;) {
            size_t len = strlen(dir);
            while (len > root_len && dir[len - 1] == '/')
                dir[--len] = '\0';
            char f[PATH_MAX + 32];
            uint64_t lim = 0, use = 0;
            snprintf(f, sizeof f, "%s/memory.limit_in_bytes", dir);
            if (read_cg_value(f, &lim) == 1) {
                /* v1 says "no limit" with a huge page-rounded number: it loses every comparison. */
                snprintf(f, sizeof f, "%s/memory.usage_in_bytes", dir);
                if (read_cg_value(f, &use) != 1)
                    use = 0;
                take_min(best, have, lim > use ? lim - use : 0, how, how_size,
                         "cgroup v1 %s memory.limit_in_bytes less memory.usage_in_bytes", dir);
            }
            if (len <= root_len)
                break;
            char *slash = strrchr(dir, '/');
            if (!slash || (size_t)(slash - dir) < root_len)
                break;
            *slash = '\0';
        }
        return;
    }
}

/* Address space in use: VmSize of /proc/self/status, in bytes; 0 when unknown. */
static uint64_t address_space_in_use(void) {
    char buf[8192];
    if (read_small("/proc/self/status", buf, sizeof buf) <= 0)
        return 0;
    const char *p = strstr(buf, "\nVmSize:");
    if (!p)
        return 0;
    p += strlen("\nVmSize:");
    unsigned long long kb = strtoull(p, NULL, 10);
    return (uint64_t)kb * 1024u;
}

memra_status memra_memory_available(uint64_t *bytes, char *how, size_t how_size, memra_error *err) {
    if (!bytes)
        return memra_fail(err, MEMRA_E_INVALID, "memory available: invalid arguments");
    *bytes = 0;
    if (how && how_size)
        how[0] = '\0';
    uint64_t best = 0;
    bool have = false;

    char buf[8192];
    if (read_small("/proc/meminfo", buf, sizeof buf) > 0) {
        const char *p = strstr(buf, "MemAvailable:");
        if (p) {
            unsigned long long kb = strtoull(p + strlen("MemAvailable:"), NULL, 10);
            take_min(&best, &have, (uint64_t)kb * 1024u, how, how_size, "MemAvailable of /proc/meminfo%s", NULL);
        }
    }
    if (!have) {
        long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psz > 0)
            take_min(&best, &have, (uint64_t)pages * (uint64_t)psz, how, how_size, "free physical pages%s", NULL);
    }

    /* Both: a hybrid machine has v1's memory controller beside a v2 hierarchy without it; each
     * finds nothing where its hierarchy does not limit memory. */
    struct stat sb;
    if (stat("/sys/fs/cgroup/cgroup.controllers", &sb) == 0)
        cgroup_v2(&best, &have, how, how_size);
    cgroup_v1(&best, &have, how, how_size);

    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        uint64_t lim = (uint64_t)rl.rlim_cur, used = address_space_in_use();
        take_min(&best, &have, lim > used ? lim - used : 0, how, how_size, "RLIMIT_AS less the address space in use%s",
                 NULL);
    }
    if (!have)
        return memra_fail(err, MEMRA_E_IO,
                          "cannot tell the memory available: /proc/meminfo unreadable and no limit found");
    *bytes = best;
    return MEMRA_OK;
}
