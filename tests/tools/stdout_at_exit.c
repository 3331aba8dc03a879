/* stdout_at_exit.c: preloaded (LD_PRELOAD) into a memra command by test_tools_io. It does what the
 * CUDA driver was seen to do: it keeps the address of the stream memra made stdout during the run
 * (memra's setup hands that stream to setvbuf, which this library wraps), and after main has
 * returned it writes to it and flushes it from an exit handler. memra must leave that stream alive
 * (a freed one made it abort at exit: glibc's "invalid stdio handle"). It says so on stderr. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>

static FILE *seen;

__attribute__((visibility("default"))) int setvbuf(FILE *f, char *buf, int mode, size_t size) {
    int (*real)(FILE *, char *, int, size_t) = (int (*)(FILE *, char *, int, size_t))dlsym(RTLD_NEXT, "setvbuf");
    if (f != stderr)
        seen = f;
    return real ? real(f, buf, mode, size) : -1;
}

__attribute__((destructor)) static void touch_stdout(void) {
    if (!seen)
        return;
    fputs("written at exit\n", seen);
    fflush(seen);
    fputs("stdout-at-exit: written and flushed\n", stderr);
}
