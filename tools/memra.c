/* memra.c: the memra command: plugins, inspect, mkmodel, run, bench, tokenize, report and
 * bench-collective. Dispatches to the subcommands (cmd_*.c) and answers --help and --version. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "memra_commit.h"

int cmd_tokenize(int argc, char **argv);         /* cmd_tokenize.c */
int cmd_report(int argc, char **argv);           /* cmd_report.c */
int cmd_bench_collective(int argc, char **argv); /* cmd_bench_collective.c */

static const char usage_text[] =
    "usage: memra COMMAND [options]        (memra COMMAND --help for its options)\n"
    "\n"
    "commands:\n"
    "  plugins              list the plugins found, whether they load, and the folders searched\n"
    "  inspect FILE.gguf    metadata, tensors and the model description of a GGUF file\n"
    "  mkmodel              write a synthetic model (deterministic pseudo-random weights)\n"
    "  run                  decode tokens with a backend and print them\n"
    "  bench                measure decode speed of a backend (tok/s, ms/token, GB/s)\n"
    "  tokenize TEXT        the token ids and pieces of a text under a model file's tokenizer\n"
    "\n"
    "  --version            print the version and exit\n"
    "  --help               print this help and exit\n"
    "\n"
    "Exit codes: 0 ok, 2 usage error, 3 runtime error. Plugins are searched in $MEMRA_PLUGIN_PATH,\n"
    "then the install prefix, then the build tree.\n";

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
} commands[] = {
    {"plugins", cmd_plugins}, {"inspect", cmd_inspect}, {"mkmodel", cmd_mkmodel},
    {"run", cmd_run},         {"bench", cmd_bench},     {"tokenize", cmd_tokenize},
    {"report", cmd_report},   {"bench-collective", cmd_bench_collective},
};

int main(int argc, char **argv) {
    cli_process_setup();
    if (argc < 2) {
        fputs(usage_text, stderr);
        return CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return cli_finish(NULL, CLI_EXIT_OK);
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("memra %s (commit %s, library %s)\n", MEMRA_VERSION_STRING, MEMRA_GIT_COMMIT, memra_version());
        return cli_finish(NULL, CLI_EXIT_OK);
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(cmd, commands[i].name) == 0) /* every write to stdout is checked when it closes */
            return cli_finish(commands[i].name, commands[i].fn(argc - 1, argv + 1));
    if (cmd[0] == '-')
        fprintf(stderr, "memra: unknown option '%s' (expected a command first; see memra --help)\n", cmd);
    else
        fprintf(stderr, "memra: unknown command '%s' (expected plugins, inspect, mkmodel, run, bench, tokenize, report or bench-collective)\n",
                cmd);
    return CLI_EXIT_USAGE;
}
