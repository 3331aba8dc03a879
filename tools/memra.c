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
    "usage: memra COMMAND [options]        (memra COMMAND --help, or memra help COMMAND, for its options)\n"
    "\n"
    "commands:\n"
    "  plugins              list the plugins found, whether they load, and the folders searched\n"
    "  inspect FILE.gguf    a GGUF file's summary and model description (--tensors: every tensor)\n"
    "  mkmodel              write a synthetic model (deterministic pseudo-random weights)\n"
    "  run                  decode tokens with an arm and print them (token ids or text)\n"
    "  bench                decode speed of one or more arms (tok/s, ms/token, GB/s), as one table\n"
    "  tokenize TEXT        the token ids and pieces of a text under a model file's tokenizer\n"
    "  report FILE.jsonl    one self-contained HTML page of gate and bench records\n"
    "  bench-collective     a device all-reduce's time, algbw, busbw and #wrong per size (as nccl-tests)\n"
    "  help COMMAND         the options of COMMAND (as memra COMMAND --help)\n"
    "\n"
    "  --version            print the version, commit and plugin ABI, and exit\n"
    "  --help               print this help and exit\n"
    "\n"
    "The gate itself is its own tool: memra-gate --a ARM --b ARM proves two arms of one model load\n"
    "give the same bits at every step, then times them (memra-gate --help).\n"
    "\n"
    "Exit codes: 0 ok, 2 usage error, 3 runtime error. Plugins are searched in $MEMRA_PLUGIN_PATH,\n"
    "then the install prefix, then the build tree.\n";

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
} commands[] = {
    {"plugins", cmd_plugins}, {"inspect", cmd_inspect},
    {"mkmodel", cmd_mkmodel}, {"run", cmd_run},
    {"bench", cmd_bench},     {"tokenize", cmd_tokenize},
    {"report", cmd_report},   {"bench-collective", cmd_bench_collective},
};

static int find_command(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(name, commands[i].name) == 0)
            return (int)i;
    return -1;
}

static int unknown_command(const char *cmd) {
    const char *names[sizeof commands / sizeof commands[0] + 1];
    size_t n = 0;
    for (; n < sizeof commands / sizeof commands[0]; n++)
        names[n] = commands[n].name;
    names[n++] = "help";
    const char *near = cli_closest(cmd, names, n);
    if (near)
        fprintf(stderr, "memra: unknown command '%s': did you mean %s? (see memra --help)\n", cmd, near);
    else
        fprintf(stderr,
                "memra: unknown command '%s' (expected plugins, inspect, mkmodel, run, bench, tokenize, report, "
                "bench-collective or help; memra-gate is a tool of its own)\n",
                cmd);
    return CLI_EXIT_USAGE;
}

int main(int argc, char **argv) {
    cli_process_setup();
    if (argc < 2) {
        fputs(usage_text, stderr);
        return CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "help") == 0 && argc > 2) { /* memra help CMD: CMD --help */
        if (argc > 3) {
            fprintf(stderr, "memra help: give one command (see memra --help)\n");
            return CLI_EXIT_USAGE;
        }
        int i = find_command(argv[2]);
        if (i < 0)
            return unknown_command(argv[2]);
        char *sub[] = {argv[2], "--help", NULL};
        return cli_finish(commands[i].name, commands[i].fn(2, sub));
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return cli_finish(NULL, CLI_EXIT_OK);
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0 || strcmp(cmd, "version") == 0 ||
        (argc == 3 && find_command(cmd) >= 0 && strcmp(argv[2], "--version") == 0)) {
        cli_print_version(stdout, "memra", MEMRA_GIT_COMMIT);
        return cli_finish(NULL, CLI_EXIT_OK);
    }
    int i = find_command(cmd);
    if (i >= 0) /* every write to stdout is checked when it closes */
        return cli_finish(commands[i].name, commands[i].fn(argc - 1, argv + 1));
    if (cmd[0] == '-') {
        fprintf(stderr, "memra: unknown option '%s' (expected a command first; see memra --help)\n", cmd);
        return CLI_EXIT_USAGE;
    }
    return unknown_command(cmd);
}
