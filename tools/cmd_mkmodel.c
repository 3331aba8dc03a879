/* cmd_mkmodel.c: `memra mkmodel`: writes a synthetic model to a GGUF file, streamed (every preset,
 * llama-8b included, is written without holding the model in memory). */
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "memra/gguf.h"
#include "memra/tensor_type.h"

static const char help_text[] =
    "usage: memra mkmodel [--preset P] [--dtype D] [--seed S] -o FILE.gguf\n"
    "\n"
    "Writes a synthetic llama-family model with deterministic pseudo-random weights: the same\n"
    "preset, dtype and seed give the same bytes.\n"
    "\n"
    "  --preset P           tiny (default), small, qwen3-tiny, qwen2-tiny, gemma3-tiny,\n"
    "                       gemma3-270m (shapes of Gemma 3 270M), llama-1b (Llama-3.2-1B),\n"
    "                       llama-8b (Llama-3.1-8B), smollm2-135m (SmolLM2-135M; a quantized\n"
    "                       --dtype gives its head Q8_0, as the published Q4_1 file has it);\n"
    "                       mixtures of experts: moe-tiny (qwen3moe,\n"
    "                       8 experts, top 2), qwen2moe-tiny (and a shared expert), granitemoe-tiny\n"
    "                       (granite's four scales), granite-moe-1b\n"
    "                       (granite-3.x-1b-a400m: 32 experts, top 8), qwen3moe-30b (Qwen3-30B-A3B:\n"
    "                       128 experts, top 8)\n"
    "  --dtype D            matrix type: f32 (default), f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,\n"
    "                       q4_k, q5_k, q6_k (norms stay f32). Quantized types are written by\n"
    "                       round-to-nearest per block, the block's largest magnitude (or range)\n"
    "                       setting its scale; a K-quant matrix whose rows are not a multiple of\n"
    "                       256 (all of tiny's) is written as q8_0 (mkmodel then prints a note;\n"
    "                       it always prints the matrices' types).\n"
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

/* The written file's matrices (tensors of two or more dimensions) by type, as "Q4_K 154, Q6_K 23,
 * F32 ..." into buf, and how many of them are not of the asked type `want` (a plain --dtype) in
 * *other: a K-quant matrix whose columns are not a multiple of 256 is written as Q8_0 (all of
 * tiny's), and a test on such a file runs no K-quant kernel. false when the file cannot be read
 * back (then nothing is said). */
static bool matrix_types(const char *path, uint32_t want, char *buf, size_t size, uint64_t *n_mat, uint64_t *other) {
    memra_gguf *g = NULL;
    memra_error err = {0};
    if (memra_gguf_open_streamed(path, &g, &err) != MEMRA_OK)
        return false;
    uint32_t types[32];
    uint64_t counts[32];
    size_t n = 0;
    *n_mat = *other = 0;
    for (uint64_t i = 0; i < memra_gguf_tensor_count(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        if (!t || t->n_dims < 2)
            continue;
        (*n_mat)++;
        if (want < MEMRA_SYNTH_MIX && t->type != want)
            (*other)++;
        size_t k = 0;
        while (k < n && types[k] != t->type)
            k++;
        if (k == n && n < 32) {
            types[n] = t->type;
            counts[n++] = 0;
        }
        if (k < n)
            counts[k]++;
    }
    memra_gguf_close(g);
    size_t used = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < n && used < size; k++) {
        int w = snprintf(buf + used, size - used, "%s%s %llu", k ? ", " : "", memra_tensor_type_name(types[k]),
                         (unsigned long long)counts[k]);
        used += w > 0 ? (size_t)w : 0;
    }
    return true;
}

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
                  "llama-1b, llama-8b, smollm2-135m, moe-tiny, qwen2moe-tiny, granitemoe-tiny, granite-moe-1b or "
                  "qwen3moe-30b",
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
    char types[512];
    uint64_t n_mat = 0, other = 0;
    if (matrix_types(out, spec.type, types, sizeof types, &n_mat, &other)) {
        fprintf(stderr, "memra mkmodel: matrices: %s\n", types);
        if (other > 0)
            fprintf(stderr,
                    "memra mkmodel: note: %llu of %llu matrices are not %s: their columns are not a multiple of "
                    "its block, or the preset gives its head the published file's type, so they were written "
                    "as the types above (see --help)\n",
                    (unsigned long long)other, (unsigned long long)n_mat, memra_synth_dtype_name(spec.type));
    }
    return CLI_EXIT_OK;
}
