/* stdout_at_exit.c: preloaded (LD_PRELOAD) into a memra command by test_tools_io. After main has
 * returned, as an exit handler of a library may (the CUDA runtime's did, on a freed stream), it
 * writes and flushes stdout, and says on stderr whether stdout was still the stream the process
 * started with: memra closes its checked stdout stream in main, and must leave a live one behind. */
#include <stdio.h>

static FILE *at_start;

__attribute__((constructor)) static void remember_stdout(void) { at_start = stdout; }

__attribute__((destructor)) static void touch_stdout(void) {
    const int same = stdout == at_start;
    fputs(same ? "stdout-at-exit: the starting stream\n" : "stdout-at-exit: another stream\n", stderr);
    if (same) {
        fputs("written at exit\n", stdout);
        fflush(stdout);
    }
}
