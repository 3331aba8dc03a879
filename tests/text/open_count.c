/* open_count.c: a test-only LD_PRELOAD library that counts how often a process opens one file.
 * $MEMRA_TEST_OPEN_WATCH names the file (as the tool is given it); every open of that path (open,
 * openat, fopen and their 64-bit and fortified forms) appends one line to $MEMRA_TEST_OPEN_LOG.
 * Issue 23 item 2: memra-gate must read its model once. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static void note(const char *path) {
    const char *watch = getenv("MEMRA_TEST_OPEN_WATCH"), *log = getenv("MEMRA_TEST_OPEN_LOG");
    if (!path || !watch || !log || strcmp(path, watch) != 0)
        return;
    int (*real_open)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    int fd = real_open ? real_open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : -1;
    if (fd >= 0) {
        ssize_t k = write(fd, "open\n", 5);
        (void)k;
        close(fd);
    }
}

#define MODE_ARG(flags)                                                                                                \
    mode_t mode = 0;                                                                                                   \
    if ((flags) & (O_CREAT | O_TMPFILE)) {                                                                             \
        va_list ap;                                                                                                    \
        va_start(ap, flags);                                                                                           \
        mode = (mode_t)va_arg(ap, int);                                                                                \
        va_end(ap);                                                                                                    \
    }

#define WRAP_OPEN(name)                                                                                                \
    EXPORT int name(const char *path, int flags, ...) {                                                                \
        MODE_ARG(flags)                                                                                                \
        note(path);                                                                                                    \
        int (*real)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name);                \
        return real(path, flags, mode);                                                                                \
    }
#define WRAP_OPENAT(name)                                                                                              \
    EXPORT int name(int dir, const char *path, int flags, ...) {                                                       \
        MODE_ARG(flags)                                                                                                \
        note(path);                                                                                                    \
        int (*real)(int, const char *, int, ...) = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, #name);      \
        return real(dir, path, flags, mode);                                                                           \
    }
#define WRAP_FORTIFIED(name, target)                                                                                   \
    EXPORT int name(const char *path, int flags) {                                                                     \
        note(path);                                                                                                    \
        int (*real)(const char *, int) = (int (*)(const char *, int))dlsym(RTLD_NEXT, #name);                          \
        return real(path, flags);                                                                                      \
    }
#define WRAP_FOPEN(name)                                                                                               \
    EXPORT FILE *name(const char *path, const char *how) {                                                             \
        note(path);                                                                                                    \
        FILE *(*real)(const char *, const char *) = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, #name);  \
        return real(path, how);                                                                                        \
    }

WRAP_OPEN(open)
WRAP_OPEN(open64)
WRAP_OPENAT(openat)
WRAP_OPENAT(openat64)
WRAP_FORTIFIED(__open_2, open)
WRAP_FORTIFIED(__open64_2, open64)
WRAP_FOPEN(fopen)
WRAP_FOPEN(fopen64)
