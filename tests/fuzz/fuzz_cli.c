/* fuzz_cli.c: libFuzzer target for the command lines of memra-gate (gate_cli_parse) and of the
 * memra subcommands (cli_parse and the typed reads cli_u32, cli_u64, cli_float).
 *
 * The input is an argument vector: its arguments separated by '\n' (at most 48, each cut at 512
 * bytes). Byte 0 picks what reads it: even, the gate; odd, a subcommand's table shaped like
 * memra run's (options with and without values, spellings, positionals). A parse either fails
 * (the gate: MEMRA_E_INVALID with a message; a subcommand: the usage exit code) or returns a
 * configuration that keeps the rules the gate's help states: both arms or neither, --model and
 * --preset not both, prime + gen within GATE_MAX_STEPS, never one timing row, a profile without
 * rows, sampling values in their ranges (zero when greedy), an nmse tolerance finite and not
 * negative, a known cells value. A subcommand's parse holds at most its positionals, and a value
 * only where the option takes one. ASan and UBSan watch everything else. Run with
 * -close_fd_mask=3: the parsers say what is wrong on stderr (and --help on stdout). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gate.h"
#include "memra/sampling.h"

#include "fuzz_check.h"

#define FC_MAX_ARGS 48
#define FC_MAX_ARG 512

static void check_gate(int argc, char **argv) {
    gate_config cfg;
    memra_error err = {0};
    const memra_status st = gate_cli_parse(argc, argv, &cfg, &err);
    CHECK(st == MEMRA_OK || st == MEMRA_E_INVALID);
    if (st != MEMRA_OK) {
        CHECK(err.status == st && err.msg[0] != '\0');
        return;
    }
    CHECK(memchr(cfg.compare_text, 0, sizeof cfg.compare_text) != NULL);
    if (cfg.help || cfg.version)
        return;
    CHECK((cfg.arm_a == NULL) == (cfg.arm_b == NULL));
    CHECK(!(cfg.model_path && cfg.preset));
    CHECK(cfg.prime >= 1 && cfg.gen >= 1 && (uint64_t)cfg.prime + cfg.gen <= GATE_MAX_STEPS);
    CHECK(cfg.rows != 1);
    CHECK(!cfg.profile || cfg.rows == 0);
    CHECK(cfg.cells == GATE_CELLS_NONE || cfg.cells == GATE_CELLS_SOME || cfg.cells == GATE_CELLS_ALL);
    if (cfg.sampled) {
        CHECK(isfinite(cfg.sample.temperature) && cfg.sample.temperature > 0.0f &&
              cfg.sample.temperature <= MEMRA_SAMPLE_MAX_TEMP);
        CHECK(cfg.sample.top_p > 0.0f && cfg.sample.top_p <= 1.0f);
    } else {
        CHECK(cfg.sample.temperature == 0.0f);
    }
    if (cfg.nmse)
        CHECK(isfinite(cfg.nmse_tol) && cfg.nmse_tol >= 0.0);
    CHECK(!cfg.prompt_text || cfg.model_path);
}

static void check_subcommand(int argc, char **argv) {
    cli_opt opts[] = {CLI_MODEL_OPTS,
                      {"--backend", NULL, true, NULL},
                      {"--gen", "-n|--n-gen", true, NULL},
                      {"--temp", NULL, true, NULL},
                      {"--top-p", NULL, true, NULL},
                      {"--seed", NULL, true, NULL},
                      {"--output", "-o", true, NULL},
                      {"--chat", NULL, false, NULL},
                      {"--quiet", "-q", false, NULL}};
    const size_t n_opts = sizeof opts / sizeof opts[0];
    const char *pos[2] = {NULL, NULL};
    size_t n_pos = 99;
    bool help = true;
    const int rc = cli_parse("fuzz", argc, argv, 1, opts, n_opts, pos, 2, &n_pos, "fuzz help\n", &help);
    CHECK(rc == CLI_EXIT_OK || rc == CLI_EXIT_USAGE);
    CHECK(n_pos <= 2);
    if (rc != CLI_EXIT_OK)
        return;
    for (size_t i = 0; i < n_pos; i++)
        CHECK(pos[i] != NULL);
    for (size_t i = 0; i < n_opts; i++)
        if (opts[i].given && !opts[i].value)
            CHECK(opts[i].given[0] == '\0');
    const char *g = cli_get(opts, n_opts, "--gen");
    uint32_t u = 0;
    if (g && cli_u32("fuzz", "--gen", g, 1, 1000, &u))
        CHECK(u >= 1 && u <= 1000);
    uint64_t s = 0;
    if ((g = cli_get(opts, n_opts, "--seed")))
        (void)cli_u64("fuzz", "--seed", g, &s);
    float f = 0.0f;
    if ((g = cli_get(opts, n_opts, "--top-p")) && cli_float("fuzz", "--top-p", g, 0.0, 1.0, &f))
        CHECK(isfinite(f) && f >= 0.0f && f <= 1.0f);
    cli_model_sel sel;
    (void)cli_model_sel_parse("fuzz", opts, n_opts, &sel);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0)
        return 0;
    const int gate = (data[0] & 1) == 0;
    static char args[FC_MAX_ARGS][FC_MAX_ARG + 1];
    char *argv[FC_MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = (char *)(gate ? "memra-gate" : "memra");
    size_t at = 1;
    while (at < size && argc < FC_MAX_ARGS + 1) {
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        const size_t len = nl ? (size_t)(nl - (data + at)) : size - at;
        char *a = args[argc - 1];
        const size_t keep = len < FC_MAX_ARG ? len : FC_MAX_ARG;
        memcpy(a, data + at, keep);
        a[keep] = '\0'; /* an argument ends at its first NUL, as argv's do */
        argv[argc++] = a;
        at += len + 1;
    }
    argv[argc] = NULL;
    if (gate)
        check_gate(argc, argv);
    else
        check_subcommand(argc, argv);
    return 0;
}
