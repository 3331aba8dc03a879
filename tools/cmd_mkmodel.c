/* cmd_mkmodel.c: `memra mkmodel`: writes a synthetic model to a GGUF file, streamed (every preset,
 * llama-8b included, is written without holding the model in memory). */
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char help_text[] =
    "usage: memra mkmodel [--preset P] [--dtype D] [--seed S] -o FILE.gguf\n"
    "\n"
    "Writes a synthetic llama-family model with deterministic pseudo-random weights: the same\n"
    "preset, dtype and seed give the same bytes.\n"
    "\n"
    "  --preset P           tiny (default), small, qwen3-tiny, qwen2-tiny, gemma3-tiny,\n"
    "                       gemma3-270m (shapes of Gemma 3 270M), llama-1b (Llama-3.2-1B),\n"
    "                       llama-8b (Llama-3.1-8B); mixtures of experts: moe-tiny (qwen3moe,\n"
    "                       8 experts, top 2), qwen2moe-tiny (and a shared expert), granitemoe-tiny\n"
    "                       (granite's four scales), granite-moe-1b\n"
    "                       (granite-3.x-1b-a400m: 32 experts, top 8), qwen3moe-30b (Qwen3-30B-A3B:\n"
    "                       128 experts, top 8)\n"
    "  --dtype D            matrix type: f32 (default), f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,\n"
    "                       q4_k, q5_k, q6_k (norms stay f32). Quantized types are written by\n"
    "                       round-to-nearest per block, the block's largest magnitude (or range)\n"
    "                       setting its scale; a K-quant matrix whose rows are not a multiple of\n"
    "                       256 (all of tiny's) is written as q8_0.\n"
    "                       q4_k_m, q5_k_m: the per-tensor mix llama.cpp's quantizer gives those\n"
    "                       file types (src/llama-quant.cpp, llama_tensor_get_type): Q4_K (Q5_K)\n"
    "                       matrices; Q6_K for the output head and a tied token_embd (Q8_0 when\n"
    "                       their columns are not a multiple of 256), and for attn_v and ffn_down\n"
    "                       on the first and last eighth of the layers and every third between;\n"
    "                       then, where the columns are not a multiple of 256, Q4_K becomes Q5_0,\n"
    "                       Q5_K Q5_1 and Q6_K Q8_0, as llama.cpp falls back (general.file_type\n"
    "                       15 and 17). `memra inspect --tensors` shows the mix\n"
    "  --seed S             weight seed (default 1; --model-seed is the same option, the name run\n"
    "                       and bench use)\n"
    "  -o, --output FILE    the file to write: written under a private name beside it and renamed\n"
    "                       into place when complete; a failed or interrupted (SIGINT, SIGTERM,\n"
    "                       SIGHUP) write leaves no file and no private file\n";

int cmd_mkmodel(int argc, char **argv) {
    const char *cmd = "mkmodel";
    cli_opt opts[] = {{"--preset", NULL, true, NULL},
                      {"--dtype", NULL, true, NULL},
                      {"--seed", "--model-seed", true, NULL},
                      {"--output", "-o", true, NULL}};
    size_t n_opts = sizeof opts / sizeof opts[0], n_pos;
    bool help;
    int rc = cli_parse(cmd, argc, argv, 1, opts, n_opts, NULL, 0, &n_pos, help_text, &help);
    if (rc != CLI_EXIT_OK || help)
        return rc;
    const char *out = cli_get(opts, n_opts, "--output");
    if (!out || !*out) {
        cli_error(cmd, "no output file: give -o FILE.gguf");
        return CLI_EXIT_USAGE;
    }
    memra_synth_spec spec = {
        .preset = cli_get(opts, n_opts, "--preset"), .type = MEMRA_TYPE_F32, .seed = CLI_DEFAULT_MODEL_SEED};
    if (!spec.preset)
        spec.preset = "tiny";
    const char *dtype = cli_get(opts, n_opts, "--dtype");
    const char *seed = cli_get(opts, n_opts, "--seed");
    memra_error err = {0};
    if (dtype && memra_synth_parse_dtype(dtype, &spec.type, &err) != MEMRA_OK) {
        cli_error(cmd, "--dtype '%s': expected " MEMRA_SYNTH_DTYPES, dtype);
        return CLI_EXIT_USAGE;
    }
    if (seed && !cli_u64(cmd, "--seed", seed, &spec.seed))
        return CLI_EXIT_USAGE;
    bool known = false;
    for (const char *const *p = memra_synth_presets(); *p && !known; p++)
        known = strcmp(*p, spec.preset) == 0;
    if (!known) { /* before anything is created */
        cli_error(cmd,
                  "unknown preset '%s': expected tiny, small, qwen3-tiny, qwen2-tiny, gemma3-tiny, gemma3-270m, "
                  "llama-1b, llama-8b, moe-tiny, qwen2moe-tiny, granitemoe-tiny, granite-moe-1b or qwen3moe-30b",
                  spec.preset);
        return CLI_EXIT_USAGE;
    }
    double t0 = cli_now();
    /* The model goes to the private file, then into place; a signal removes the private file. */
    cli_output o;
    if ((rc = cli_output_open(cmd, "-o", out, &o)) != CLI_EXIT_OK)
        return rc;
    if (memra_synth_write_stream(&spec, o.f, out, &err) != MEMRA_OK) {
        cli_output_abort(&o);
        return cli_fail(cmd, &err);
    }
    long long size = ftello(o.f);
    cli_output *outs[] = {&o};
    if ((rc = cli_output_commit(cmd, outs, 1)) != CLI_EXIT_OK)
        return rc;
    double dt = cli_now() - t0;
    char buf[32];
    fprintf(stderr, "memra mkmodel: wrote %s: preset %s, %s, seed %llu, %s in %.2f s\n", out, spec.preset,
            memra_synth_dtype_name(spec.type), (unsigned long long)spec.seed,
            size >= 0 ? cli_bytes((uint64_t)size, buf, sizeof buf) : "? bytes", dt);
    return CLI_EXIT_OK;
}
