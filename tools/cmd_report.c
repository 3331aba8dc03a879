/* cmd_report.c: memra report (not written yet). */
#include <stdio.h>

#include "cli.h"

int cmd_report(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fputs("memra report: not implemented yet\n", stderr);
    return CLI_EXIT_ERROR;
}
