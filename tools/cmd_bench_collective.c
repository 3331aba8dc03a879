/* cmd_bench_collective.c: memra bench-collective (not written yet). */
#include <stdio.h>

#include "cli.h"

int cmd_bench_collective(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fputs("memra bench-collective: not implemented yet\n", stderr);
    return CLI_EXIT_ERROR;
}
