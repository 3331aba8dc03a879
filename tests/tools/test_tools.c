/* test_tools.c: the memra command as a user meets it: exit codes (0 ok, 2 usage, 3 error), the
 * messages of usage errors, --help of every subcommand, --version, inspect of a generated file,
 * run's token stream and --dump-logits files, bench's JSON line, plugins' table. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct result {
    int code;
    char *out;
    char *err;
} result;

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static const char *bin_dir(void) {
    const char *d = getenv("MEMRA_BIN_DIR");
    cr_assert(d && *d, "MEMRA_BIN_DIR is not set (run through ctest)");
    return d;
}

static void tmp_path(char *buf, size_t size, const char *name) {
    const char *dir = getenv("MEMRA_BUILD_DIR");
    snprintf(buf, size, "%s/test_tools_%d_%s", dir && *dir ? dir : "/tmp", (int)getpid(), name);
}

/* Runs memra with the given arguments (NULL-terminated), capturing stdout, stderr and the exit
 * code. */
static result run(const char *arg, ...) {
    const char *argv[64];
    char exe[1024];
    snprintf(exe, sizeof exe, "%s/memra", bin_dir());
    int n = 0;
    argv[n++] = exe;
    va_list ap;
    va_start(ap, arg);
    for (const char *a = arg; a && n < 63; a = va_arg(ap, const char *))
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    char out_path[512], err_path[512];
    tmp_path(out_path, sizeof out_path, "stdout");
    tmp_path(err_path, sizeof err_path, "stderr");
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    result r = {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out_path), slurp(err_path)};
    unlink(out_path);
    unlink(err_path);
    return r;
}

static void done(result *r) {
    free(r->out);
    free(r->err);
}

static void expect_impl(const result *r, int code, const char *which, const char *text, const char *needle) {
    cr_assert_eq(r->code, code, "exit %d, expected %d; stderr: %s", r->code, code, r->err);
    if (needle)
        cr_assert_not_null(strstr(text, needle), "%s lacks '%s':\n%s", which, needle, text);
}
#define EXPECT(r, want_code, stream, needle) expect_impl(&(r), (want_code), #stream, (r).stream, (needle))

/* The cpu backend is always built in this tree: its absence is a failure, never a skip. */
static void require_cpu_backend(void) {
    const char *dir = getenv("MEMRA_BUILD_DIR");
    cr_assert_not_null(dir, "MEMRA_BUILD_DIR is not set (ctest sets it): cannot find the build's plugins");
    char path[1024];
    snprintf(path, sizeof path, "%s/plugins.d/cpu.backend.manifest", dir);
    cr_assert_eq(access(path, R_OK), 0, "%s is missing: the cpu backend was not built", path);
}

Test(tools, no_command_is_usage) {
    result r = run(NULL);
    EXPECT(r, 2, err, "usage: memra COMMAND");
    done(&r);
    r = run("frobnicate", NULL);
    EXPECT(r, 2, err, "memra: unknown command 'frobnicate'");
    done(&r);
    r = run("--frobnicate", NULL);
    EXPECT(r, 2, err, "unknown option '--frobnicate'");
    done(&r);
}

Test(tools, help_and_version) {
    result r = run("--help", NULL);
    EXPECT(r, 0, out, "usage: memra COMMAND");
    done(&r);
    r = run("--version", NULL);
    EXPECT(r, 0, out, "memra 0.1.0 (commit ");
    done(&r);
    const char *subs[] = {"plugins", "inspect", "mkmodel", "run", "bench"};
    for (size_t i = 0; i < 5; i++) {
        char want[64];
        snprintf(want, sizeof want, "usage: memra %s", subs[i]);
        r = run(subs[i], "--help", NULL);
        EXPECT(r, 0, out, want);
        cr_assert_eq(r.err[0], '\0', "memra %s --help wrote to stderr: %s", subs[i], r.err);
        done(&r);
        r = run(subs[i], "-h", NULL);
        EXPECT(r, 0, out, want);
        done(&r);
    }
}

Test(tools, unknown_flags_are_usage_errors_naming_the_flag) {
    const char *subs[] = {"plugins", "inspect", "mkmodel", "run", "bench"};
    for (size_t i = 0; i < 5; i++) {
        char want[96];
        snprintf(want, sizeof want, "memra %s: unknown option '--no-such-flag'", subs[i]);
        result r = run(subs[i], "--no-such-flag", NULL);
        EXPECT(r, 2, err, want);
        done(&r);
    }
}

Test(tools, bad_values_are_usage_errors) {
    result r = run("run", "--model", NULL);
    EXPECT(r, 2, err, "memra run: option '--model' needs a value");
    done(&r);
    r = run("run", "-n", "abc", NULL);
    EXPECT(r, 2, err, "memra run: -n 'abc': expected an integer");
    done(&r);
    r = run("run", "--preset", "huge", NULL);
    EXPECT(r, 2, err, "memra run: --preset 'huge': expected tiny");
    done(&r);
    r = run("run", "--dtype", "q2_k", NULL);
    EXPECT(r, 2, err, "--dtype 'q2_k'");
    done(&r);
    r = run("run", "--top-k", "5", NULL);
    EXPECT(r, 2, err, "--top-k samples: it needs --temp T");
    done(&r);
    r = run("run", "--model", "x.gguf", "--preset", "tiny", NULL);
    EXPECT(r, 2, err, "--model and --preset exclude each other");
    done(&r);
    r = run("run", "--tokens", "1,,2", NULL);
    EXPECT(r, 2, err, "--tokens '1,,2'");
    done(&r);
    r = run("run", "-n", "4", "-n", "5", NULL);
    EXPECT(r, 2, err, "option '--n-gen' is given twice");
    done(&r);
    r = run("bench", "--reps", "0", NULL);
    EXPECT(r, 2, err, "memra bench: --reps '0'");
    done(&r);
    r = run("mkmodel", "--preset", "tiny", NULL);
    EXPECT(r, 2, err, "memra mkmodel: no output file");
    done(&r);
    r = run("mkmodel", "--preset", "huge", "-o", "/tmp/never-written.gguf", NULL);
    EXPECT(r, 2, err, "unknown preset 'huge'");
    done(&r);
    r = run("inspect", NULL);
    EXPECT(r, 2, err, "memra inspect: no file given");
    done(&r);
    r = run("inspect", "a.gguf", "b.gguf", NULL);
    EXPECT(r, 2, err, "unexpected argument 'b.gguf'");
    done(&r);
}

Test(tools, missing_files_are_errors) {
    result r = run("inspect", "/nonexistent/model.gguf", NULL);
    EXPECT(r, 3, err, "/nonexistent/model.gguf");
    done(&r);
    r = run("run", "--model", "/nonexistent/model.gguf", NULL);
    EXPECT(r, 3, err, "/nonexistent/model.gguf");
    done(&r);
    char path[512];
    tmp_path(path, sizeof path, "garbage.gguf");
    FILE *f = fopen(path, "wb");
    fputs("this is not a gguf file at all, not even close", f);
    fclose(f);
    r = run("inspect", path, NULL);
    EXPECT(r, 3, err, path);
    done(&r);
    unlink(path);
    r = run("mkmodel", "-o", "/nonexistent/dir/m.gguf", NULL);
    EXPECT(r, 3, err, "/nonexistent/dir/m.gguf");
    done(&r);
}

Test(tools, mkmodel_then_inspect) {
    char path[512];
    tmp_path(path, sizeof path, "qwen3.gguf");
    result r = run("mkmodel", "--preset", "qwen3-tiny", "--dtype", "q8_0", "--seed", "3", "-o", path, NULL);
    EXPECT(r, 0, err, "memra mkmodel: wrote");
    done(&r);
    r = run("inspect", path, NULL);
    EXPECT(r, 0, out, "general.architecture");
    const char *needles[] = {"\"qwen3\"",
                             "tokenizer.ggml.tokens",
                             "string[512]",
                             "\"<unk>\", \"<s>\", \"</s>\"",
                             "... 504 more",
                             "blk.3.attn_k_norm.weight",
                             "Q8_0",
                             "total tensor bytes",
                             "architecture:     qwen3",
                             "head_dim (k, v):  32, 32",
                             "neox pairing",
                             "per-head q/k norm",
                             "tied to token_embd.weight",
                             "all supported"};
    for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
        cr_assert_not_null(strstr(r.out, needles[i]), "inspect output lacks '%s':\n%s", needles[i], r.out);
    done(&r);
    r = run("inspect", "--arrays", "2", path, NULL);
    EXPECT(r, 0, out, "\"<unk>\", \"<s>\", ... 510 more");
    done(&r);
    unlink(path);
}

Test(tools, plugins_lists_the_cpu_backend) {
    require_cpu_backend();
    result r = run("plugins", NULL);
    EXPECT(r, 0, out, "folders searched");
    cr_assert(strstr(r.out, "cpu ") && strstr(r.out, "backend"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "libmemra-backend-cpu.so"), "%s", r.out);
    done(&r);
}

/* Counts whitespace-separated words. */
static size_t count_words(const char *s) {
    size_t n = 0;
    for (bool in = false; *s; s++) {
        bool space = *s == ' ' || *s == '\n';
        n += !space && !in;
        in = !space;
    }
    return n;
}

Test(tools, run_prints_tokens_and_dumps_logits) {
    require_cpu_backend();
    char path[512], json_path[600];
    tmp_path(path, sizeof path, "logits.f32");
    snprintf(json_path, sizeof json_path, "%s.json", path);
    result r = run("run", "--preset", "tiny", "--tokens", "1,5,9", "-n", "8", "--dump-logits", path, NULL);
    EXPECT(r, 0, err, "tok/s");
    cr_assert_not_null(strstr(r.err, "peak RSS"), "%s", r.err);
    cr_assert_eq(count_words(r.out), 8, "expected 8 token ids, got: %s", r.out);
    /* 3 prompt steps + 7 steps feeding generated tokens: 10 rows of 512 floats. */
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_size, 10 * 512 * 4, "logits file has %lld bytes", (long long)st.st_size);
    char *json = slurp(json_path);
    cr_assert_not_null(strstr(json, "\"n_vocab\": 512"), "%s", json);
    cr_assert_not_null(strstr(json, "\"steps\": 10"), "%s", json);
    /* The inputs: the prompt, then the first 7 generated tokens. */
    char want[512];
    int k = snprintf(want, sizeof want, "\"tokens\": [1, 5, 9");
    const char *p = r.out;
    for (int i = 0; i < 7; i++) {
        long t = strtol(p, (char **)&p, 10);
        k += snprintf(want + k, sizeof want - (size_t)k, ", %ld", t);
    }
    snprintf(want + k, sizeof want - (size_t)k, "]");
    cr_assert_not_null(strstr(json, want), "JSON %s lacks %s", json, want);
    free(json);

    /* Greedy decoding: the same tokens again, and the same logits. */
    char *logits = slurp(path);
    result r2 = run("run", "--preset", "tiny", "--tokens", "1,5,9", "-n", "8", "--dump-logits", path, NULL);
    EXPECT(r2, 0, err, NULL);
    cr_assert_str_eq(r2.out, r.out);
    char *logits2 = slurp(path);
    cr_assert(memcmp(logits, logits2, 10 * 512 * 4) == 0, "two greedy runs dumped different logits");
    free(logits);
    free(logits2);
    done(&r2);
    done(&r);
    unlink(path);
    unlink(json_path);
}

Test(tools, run_refuses_bad_tokens_and_arms) {
    require_cpu_backend();
    result r = run("run", "--tokens", "512", NULL);
    EXPECT(r, 2, err, "token 512 is not below n_vocab 512");
    done(&r);
    r = run("run", "--backend", "cpu:no_such_key=1", NULL);
    EXPECT(r, 2, err, "no_such_key");
    done(&r);
    r = run("run", "--backend", "nosuchbackend", NULL); /* a usage error naming it (issue 14) */
    EXPECT(r, 2, err, "nosuchbackend");
    done(&r);
}

Test(tools, run_samples_with_a_seed) {
    require_cpu_backend();
    result a = run("run", "-n", "16", "--temp", "1", "--top-k", "40", "--seed", "7", NULL);
    result b = run("run", "-n", "16", "--temp", "1", "--top-k", "40", "--seed", "7", NULL);
    result c = run("run", "-n", "16", "--temp", "1", "--top-k", "40", "--seed", "8", NULL);
    EXPECT(a, 0, err, NULL);
    EXPECT(c, 0, err, NULL);
    cr_assert_str_eq(a.out, b.out, "the same seed sampled different tokens");
    cr_assert_str_neq(a.out, c.out, "seeds 7 and 8 sampled the same 16 tokens");
    done(&a);
    done(&b);
    done(&c);
}

Test(tools, bench_writes_a_json_line) {
    require_cpu_backend();
    char path[512];
    tmp_path(path, sizeof path, "bench.jsonl");
    unlink(path);
    result r = run("bench", "--preset", "tiny", "--prime", "16", "-n", "8", "--reps", "3", "--jsonl", path, NULL);
    EXPECT(r, 0, out, "tok/s");
    cr_assert_not_null(strstr(r.out, "GB/s"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "device:       cpu"), "%s", r.out);
    char *line = slurp(path);
    const char *needles[] = {"\"record\": \"bench\"", "\"commit\": \"",   "\"device\": \"cpu",
                             "\"arm\": \"cpu\"",      "\"prime\": 16",    "\"n\": 8",
                             "\"reps\": 3",           "\"tok_s_mean\": ", "\"gb_s\": ",
                             "\"bytes_per_token\": ", "\"options\": {"};
    for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
        cr_assert_not_null(strstr(line, needles[i]), "JSON line lacks '%s': %s", needles[i], line);
    cr_assert_eq(line[strlen(line) - 1], '\n');
    cr_assert_eq(strchr(line, '\n'), line + strlen(line) - 1, "one line expected: %s", line);
    free(line);
    done(&r);
    unlink(path);
}

/* The gate's loop rule: the last 64 tokens periodic with some period <= 16. */
static int loop_period(const long *t, size_t n) {
    if (n < 64)
        return 0;
    const long *w = t + n - 64;
    for (int p = 1; p <= 16; p++) {
        int i = 0;
        while (i + p < 64 && w[i] == w[i + p])
            i++;
        if (i + p == 64)
            return p;
    }
    return 0;
}

/* Greedy streams of the synthetic models neither loop nor stop at EOS within 256 tokens, after
 * the default prompt (bos) and after the gate's default 256-token prompt, so every gate row on
 * them is eligible. */
Test(tools, synthetic_greedy_streams_do_not_loop, .timeout = 240) {
    require_cpu_backend();
    const char *presets[] = {"tiny", "small", "qwen3-tiny", "qwen2-tiny"};
    for (size_t p = 0; p < 4; p++) {
        long n_vocab = strcmp(presets[p], "small") == 0 ? 4096 : 512;
        static char prompt[4096];
        int k = 0;
        for (int i = 0; i < 256; i++) /* memra-gate's default prompt ids */
            k += snprintf(prompt + k, sizeof prompt - (size_t)k, "%s%ld", i ? "," : "", (100 + 7L * i % 900) % n_vocab);
        for (int with_prompt = 0; with_prompt < 2; with_prompt++) {
            result r = with_prompt ? run("run", "--preset", presets[p], "--tokens", prompt, "-n", "256", NULL)
                                   : run("run", "--preset", presets[p], "-n", "256", NULL);
            EXPECT(r, 0, err, NULL);
            long t[256];
            size_t n = 0;
            for (char *s = r.out, *end; n < 256; s = end) {
                t[n] = strtol(s, &end, 10);
                if (end == s)
                    break;
                n++;
            }
            cr_assert_eq(n, 256, "%s: %zu tokens", presets[p], n);
            for (size_t len = 64; len <= n; len++) {
                int period = loop_period(t, len);
                cr_assert_eq(period, 0, "%s%s: the stream loops with period %d after %zu tokens", presets[p],
                             with_prompt ? " (gate prompt)" : "", period, len);
            }
            for (size_t i = 0; i < n; i++)
                cr_assert_neq(t[i], 2, "%s%s: EOS at generated token %zu", presets[p],
                              with_prompt ? " (gate prompt)" : "", i);
            done(&r);
        }
    }
}

/* Bench times only a deterministic arm: the gate's test-only `faulty` backend reports one wrong
 * token in the third repetition (the third restore), and bench must refuse the figures. */
Test(tools, bench_refuses_an_arm_whose_repetitions_differ) {
    require_cpu_backend(); /* and the test-only faulty backend beside it (tests/gate/faulty) */
    char manifest[1024];
    snprintf(manifest, sizeof manifest, "%s/plugins.d/faulty.backend.manifest", getenv("MEMRA_BUILD_DIR"));
    cr_assert_eq(access(manifest, R_OK), 0, "%s is missing: tests/gate/faulty was not built", manifest);
    result r = run("bench", "--preset", "tiny", "--backend", "faulty:corrupt_row=2", "--prime", "16", "-n", "8",
                   "--reps", "3", NULL);
    EXPECT(r, 3, err, "memra bench: repetition 3 generated token");
    cr_assert_not_null(strstr(r.err, "is not deterministic"), "%s", r.err);
    cr_assert_null(strstr(r.out, "tok/s"), "bench printed figures for a nondeterministic arm:\n%s", r.out);
    done(&r);
    r = run("bench", "--preset", "tiny", "--backend", "faulty", "--prime", "16", "-n", "8", "--reps", "3", NULL);
    EXPECT(r, 0, out, "tok/s");
    done(&r);
}

/* The cuda backend's arm options are checked before any device is asked for, so a bad value is a
 * usage error naming the key on a machine without a GPU too (and cuda-graph takes the same keys).
 * Needs the cuda plugins built (MEMRA_CUDA); skipped with the reason where they are not. */
Test(tools, cuda_arm_options_are_checked_before_the_device) {
    const char *dir = getenv("MEMRA_BUILD_DIR");
    cr_assert_not_null(dir, "MEMRA_BUILD_DIR is not set (ctest sets it): cannot find the build's plugins");
    char path[1024];
    snprintf(path, sizeof path, "%s/plugins.d/cuda.backend.manifest", dir);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "SKIP: %s is missing (configured without MEMRA_CUDA)\n", path);
        cr_skip_test("the cuda plugins are not built");
    }
    result r = run("run", "--backend", "cuda:pdl=2", NULL);
    EXPECT(r, 2, err, "pdl=2: expected an integer from 0 to 1");
    done(&r);
    r = run("run", "--backend", "cuda-graph:pdl=x", NULL);
    EXPECT(r, 2, err, "pdl=x: expected an integer from 0 to 1");
    done(&r);
    r = run("run", "--backend", "cuda:pdl0", NULL);
    EXPECT(r, 2, err, "pdl0");
    done(&r);
}
