/* test_cuda.c: the cuda backends through the plugin ABI (label "gpu"): the device sampler against
 * the cpu sampler on ties and near-ties; cpu vs cuda within a declared NMSE with greedy tokens in
 * agreement; cuda vs cuda-graph and vs pipelined stages bit for bit, with equal digests and equal
 * repeats; and a negative control (a perturbed input token must be caught). Each test skips, with
 * the reason printed, where no CUDA device is present. */
#include <criterion/criterion.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_checks.h"
#include "memra/tensor_type.h"

static void need_device(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        char why[256];
        snprintf(why, sizeof why, "no CUDA device (%s): cuda tests skipped",
                 e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
        fprintf(stderr, "SKIP: %s\n", why);
        cr_skip_test("%s", why);
    }
}

static check_arms_cfg arms(const char *a, const char *b, const char *preset) {
    check_arms_cfg c;
    memset(&c, 0, sizeof c);
    c.a = a;
    c.b = b;
    c.preset = preset;
    c.prime = 32;
    c.gen = 32;
    c.window = 1;
    c.exact = true;
    c.sample = (memra_sample_cfg){1.0f, 0, 1.0f, 42};
    c.perturb_step = -1;
    return c;
}

Test(cuda, sampler_matches_cpu_on_ties) {
    need_device();
    int checked = 0;
    int bad = memra_cuda_check_sampler(stderr, &checked);
    cr_assert_eq(bad, 0, "%d of %d draws disagree with the cpu sampler", bad, checked);
    cr_assert_gt(checked, 2000);
}

Test(cuda, cpu_vs_cuda_within_nmse) {
    need_device();
    check_arms_cfg c = arms("cpu", "cuda", "tiny");
    c.exact = false;
    c.nmse_tol = 1e-5;
    c.prime = 1;
    c.gen = 127;
    check_arms_result r;
    cr_assert_eq(memra_cuda_check_arms(&c, &r), 0, "%s", r.msg);
    cr_assert_eq(r.token_agree, r.steps, "%s", r.msg);
}

Test(cuda, cuda_vs_cuda_graph_exact_sampled) {
    need_device();
    check_arms_cfg c = arms("cuda", "cuda-graph", "tiny");
    c.sampled = true;
    check_arms_result r;
    cr_assert_eq(memra_cuda_check_arms(&c, &r), 0, "%s", r.msg);
}

Test(cuda, stages_pipelined_exact) {
    need_device();
    check_arms_cfg c = arms("cuda", "cuda:stages=4", "small");
    c.window = 3;
    c.sampled = true;
    c.sample = (memra_sample_cfg){0.8f, 40, 0.9f, 3};
    check_arms_result r;
    cr_assert_eq(memra_cuda_check_arms(&c, &r), 0, "%s", r.msg);
}

Test(cuda, perturbed_token_is_caught) {
    need_device();
    check_arms_cfg c = arms("cuda", "cuda-graph", "tiny");
    c.perturb_step = 40;
    check_arms_result r;
    cr_assert_eq(memra_cuda_check_arms(&c, &r), 1, "the negative control passed: %s", r.msg);
    cr_assert_eq(r.first_bad, 40u, "%s", r.msg);
}

/* gemma3 (issue 26): gemma3-tiny's layers 0-4 attend through a window of 8 positions with their
 * own RoPE base, layer 5 to every position; 16 prime and 48 generated steps run far past the
 * window and across the unfused path's 32-position chunks. */
static check_arms_cfg gemma3(const char *a, const char *b) {
    check_arms_cfg c = arms(a, b, "gemma3-tiny");
    c.prime = 16;
    c.gen = 48;
    return c;
}

/* Every attention path (cluster, tiled, unfused) against the cpu reference, at F32, BF16, Q8_0. */
Test(cuda, gemma3_cpu_vs_cuda_within_nmse) {
    need_device();
    static const char *const arm_b[] = {"cuda", "cuda:attention=tiled", "cuda:attention=unfused"};
    static const uint32_t types[] = {MEMRA_TYPE_F32, MEMRA_TYPE_BF16, MEMRA_TYPE_Q8_0};
    for (int t = 0; t < 3; t++)
        for (int k = 0; k < 3; k++) {
            check_arms_cfg c = gemma3("cpu", arm_b[k]);
            c.exact = false;
            c.nmse_tol = 1e-5;
            c.dtype = types[t];
            check_arms_result r;
            cr_assert_eq(memra_cuda_check_arms(&c, &r), 0, "%s, type %u: %s", arm_b[k], types[t], r.msg);
            cr_assert_eq(r.token_agree, r.steps, "%s, type %u: %s", arm_b[k], types[t], r.msg);
        }
}

Test(cuda, gemma3_cuda_vs_cuda_graph_exact) {
    need_device();
    static const char *const arm[][2] = {{"cuda", "cuda-graph"},
                                         {"cuda:attention=tiled", "cuda-graph:attention=tiled"},
                                         {"cuda:attention=unfused", "cuda-graph:attention=unfused"}};
    for (int k = 0; k < 3; k++) {
        check_arms_cfg c = gemma3(arm[k][0], arm[k][1]);
        c.sampled = k != 1;
        c.dtype = k == 2 ? MEMRA_TYPE_Q8_0 : MEMRA_TYPE_F32;
        check_arms_result r;
        cr_assert_eq(memra_cuda_check_arms(&c, &r), 0, "%s: %s", arm[k][0], r.msg);
    }
}

Test(cuda, quant_gemv_matches_host_reference) {
    need_device();
    int checked = 0;
    int bad = memra_cuda_check_quant_gemv(stderr, &checked);
    cr_assert_eq(bad, 0, "%d failures in %d quantized GEMV and embedding cases", bad, checked);
    cr_assert_gt(checked, 50);
}

/* Issue 27 item 1 (postnorm=fused): the GEMV that folds gemma3's post norm gives the bits of the
 * GEMV then the post norm's launch, every type and kernel (check_post_norm.c). */
Test(cuda, post_norm_fold_matches_the_launches) {
    need_device();
    int checked = 0;
    int bad = memra_cuda_check_post_norm(stderr, &checked);
    cr_assert_eq(bad, 0, "%d failures in %d fused post-norm cases", bad, checked);
    cr_assert_gt(checked, 100);
}

/* The legacy quantized types end to end: cpu against cuda (greedy tokens agree, NMSE within the
 * project's 1e-4) and cuda against cuda-graph bit for bit, on both qdot paths. */
Test(cuda, legacy_quant_types_cpu_vs_cuda_and_graph) {
    need_device();
    static const uint32_t types[] = {MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q4_1, MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q5_1};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        check_arms_cfg c = arms("cpu", "cuda", "tiny");
        c.dtype = types[i];
        c.exact = false;
        c.nmse_tol = 1e-4;
        c.prime = 1;
        c.gen = 63;
        check_arms_result r;
        cr_assert_eq(memra_cuda_check_arms(&c, &r), 0, "%s", r.msg);
        const char *graph[2] = {"cuda-graph:qdot=auto", "cuda-graph:qdot=float"};
        const char *eager[2] = {"cuda:qdot=auto", "cuda:qdot=float"};
        for (int k = 0; k < 2; k++) {
            check_arms_cfg g = arms(eager[k], graph[k], "tiny");
            g.dtype = types[i];
            g.sampled = true;
            cr_assert_eq(memra_cuda_check_arms(&g, &r), 0, "%s", r.msg);
        }
    }
}

/* Fused matrices of mixed types (attn_v and ffn_up in F32 beside Q4_0 q, k and gate, as Q4_K_M
 * files mix Q6_K into Q4_K): q and k run fused and v apart, gate and up apart with the GLU after.
 * Before issue 26 the weights refused the file ("fused on upload but differ in type"). */
Test(cuda, mixed_types_in_fused_matrices) {
    need_device();
    char path[512], msg[1200];
    snprintf(path, sizeof path, "/tmp/memra-test_%d_mixed.gguf", (int)getpid());
    cr_assert_eq(memra_check_write_mixed("tiny", MEMRA_TYPE_Q4_0, path, msg, sizeof msg), 0, "%s", msg);
    check_arms_cfg c = arms("cpu", "cuda", NULL);
    c.model = path;
    c.exact = false;
    c.nmse_tol = 1e-4;
    check_arms_result r;
    const int nm = memra_cuda_check_arms(&c, &r);
    check_arms_cfg g = arms("cuda", "cuda-graph", NULL);
    g.model = path;
    g.sampled = true;
    check_arms_result rg;
    const int ex = memra_cuda_check_arms(&g, &rg);
    remove(path);
    cr_assert_eq(nm, 0, "%s", r.msg);
    cr_assert_eq(ex, 0, "%s", rg.msg);
}

/* Issue 28: a prefill chunk against token by token, with the gate (exit 0 pass, 1 mismatch): its
 * exit code, or -1 when it could not run. */
static int gate_rc(const char *args) {
    const char *bin = getenv("MEMRA_BIN_DIR");
    char cmd[1536];
    snprintf(cmd, sizeof cmd, "'%s/memra-gate' %s --rows 0 --quiet > /dev/null 2>&1", bin ? bin : ".", args);
    const int rc = system(cmd);
    return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Chunks of 7 (an odd count that ends mid-split) and 16 on the chunk kernels (F32/F16/BF16 float
 * GEMVs, the Q8_0 integer and float paths, chunk attention on the cluster path, the decode
 * attention row by row on the tiled and unfused paths), eager and graph, greedy and sampled, are
 * bit-identical to prefill=1 at every chunk boundary; the negative control: q8=float on one arm
 * (other bits) is caught. */
Test(cuda, prefill_chunks_exact) {
    need_device();
    static const char *const pairs[] = {
        "--preset qwen3-tiny --dtype bf16 --a cuda:prefill=1 --b cuda:prefill=7",
        "--preset qwen3-tiny --dtype f16 --a cuda:prefill=1 --b cuda-graph:prefill=16 --temp 0.9 --seed 3",
        "--preset small --dtype q8_0 --a cuda-graph:prefill=1 --b cuda-graph:prefill=7",
        /* the q/k/v biases on the Q8_0 integer path (its 1/rms product fused with the bias once) */
        "--preset qwen2-tiny --dtype q8_0 --a cuda:prefill=1 --b cuda:prefill=7",
        "--preset qwen2-tiny --dtype q4_k --a cuda:prefill=1 --b cuda-graph:prefill=7",
        "--preset tiny --dtype f32 --a cuda:attention=unfused,prefill=1 --b cuda:attention=unfused,prefill=7",
        "--preset gemma3-tiny --dtype bf16 --a cuda:prefill=1 --b cuda-graph:prefill=7",
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "%s --prime 70 -n 16", pairs[i]);
        cr_expect_eq(gate_rc(args), 0, "memra-gate %s", args);
    }
    cr_assert_eq(gate_rc("--preset small --dtype q8_0 --a cuda:prefill=1 --b cuda:prefill=7,q8=float --prime 30 -n 4"),
                 1, "a chunked arm with other bits (q8=float) was not caught");
}

/* The cache digest is the state's whatever its capacity: memra bench primes its pp state with
 * room for the prompt alone and compares its cache digest with the prefix state's (room for the
 * generated steps too); before, the cuda digest hashed every chunk of the capacity, and bench
 * refused every cuda arm as "not deterministic". */
Test(cuda, cache_digest_independent_of_capacity) {
    need_device();
    const char *bin = getenv("MEMRA_BIN_DIR");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "'%s/memra' bench --preset tiny --arm cuda,cuda-graph,cuda:prefill=1 --prime 100 -n 40 --reps 1 "
             "> /dev/null 2>&1",
             bin ? bin : ".");
    const int rc = system(cmd);
    cr_assert(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "memra bench failed: %s", cmd);
}

/* Issue 28.3: kv=f16 and kv=bf16 (a cache of 2-byte values, each rounded as it is written).
 * cpu:kv=T against cuda:kv=T within NMSE on every attention path (the cpu rounds with the same
 * function and keeps the values in f32), on tiny and on gemma3-tiny (a sliding window over the
 * 2-byte cache); cuda:kv=T against cuda-graph:kv=T bit for bit, sampled; a prefill chunk of 7
 * (the chunk append and chunk attention on 2-byte rows) against token by token, bit for bit;
 * and the negative control: kv=f16 against f32 (other bits) is caught in exact mode. */
Test(cuda, kv_f16_bf16_pairs) {
    need_device();
    static const char *const kv[] = {"f16", "bf16"};
    static const char *const path[] = {"", ",attention=tiled", ",attention=unfused"};
    char a[96], b[96], g[96];
    check_arms_result r;
    for (int t = 0; t < 2; t++) {
        for (int p = 0; p < 3; p++) {
            snprintf(a, sizeof a, "cpu:kv=%s", kv[t]);
            snprintf(b, sizeof b, "cuda:kv=%s%s", kv[t], path[p]);
            snprintf(g, sizeof g, "cuda-graph:kv=%s%s", kv[t], path[p]);
            check_arms_cfg c = arms(a, b, "tiny");
            c.exact = false;
            c.nmse_tol = 1e-5;
            cr_expect_eq(memra_cuda_check_arms(&c, &r), 0, "%s / %s: %s", a, b, r.msg);
            check_arms_cfg e = arms(b, g, "tiny");
            e.sampled = true;
            cr_expect_eq(memra_cuda_check_arms(&e, &r), 0, "%s / %s: %s", b, g, r.msg);
        }
        snprintf(b, sizeof b, "cuda:kv=%s", kv[t]);
        check_arms_cfg c = arms(a, b, "gemma3-tiny");
        c.exact = false;
        c.nmse_tol = 1e-5;
        cr_expect_eq(memra_cuda_check_arms(&c, &r), 0, "gemma3-tiny %s / %s: %s", a, b, r.msg);
        char args[256];
        snprintf(args, sizeof args,
                 "--preset qwen3-tiny --dtype bf16 --a cuda:kv=%s,prefill=1 --b cuda-graph:kv=%s,prefill=7 --prime 70 "
                 "-n 16",
                 kv[t], kv[t]);
        cr_expect_eq(gate_rc(args), 0, "memra-gate %s", args);
    }
    check_arms_cfg n = arms("cuda", "cuda:kv=f16", "tiny");
    cr_assert_eq(memra_cuda_check_arms(&n, &r), 1, "the negative control passed: kv=f16 gave f32's bits: %s", r.msg);
}

/* Issue 29 item 4 on cuda: expert ranks (ep=2: two ranks on one device, oneshot). ep=2 against
 * one rank and cuda against cuda-graph at ep=2, at tp=2 and at ep=2,tp=2 are bit-identical
 * (every refusal cell on the expert all-reduce too); cpu against cuda at tp=2 and ep=2,tp=2 within
 * nmse (cpu_moe.c cuts the experts alike). The negative control: tp=2 against ep=2 (each expert's
 * rows split against whole experts: partial sums in another order) is caught in exact mode. */
Test(cuda, moe_expert_ranks) {
    need_device();
    static const char *const pairs[] = {
        "--preset moe-tiny --dtype bf16 --a cuda --b cuda:ep=2",
        "--preset qwen2moe-tiny --dtype q8_0 --a cuda-graph --b cuda-graph:ep=2 --temp 0.9 --seed 3",
        "--preset granitemoe-tiny --dtype bf16 --a cuda:ep=2 --b cuda-graph:ep=2 --cells all",
        "--preset qwen2moe-tiny --dtype q8_0 --a cuda:tp=2 --b cuda-graph:tp=2 --cells all",
        "--preset granitemoe-tiny --dtype q8_0 --a cuda:ep=2,tp=2 --b cuda-graph:ep=2,tp=2 --temp 0.9 --seed 3",
        "--preset qwen2moe-tiny --dtype bf16 --a cpu:tp=2 --b cuda:tp=2 --compare nmse:1e-5",
        "--preset moe-tiny --dtype q8_0 --a cpu:ep=2,tp=2 --b cuda:ep=2,tp=2 --compare nmse:1e-5",
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "%s --prime 24 -n 24 --rows 0", pairs[i]);
        cr_expect_eq(gate_rc(args), 0, "memra-gate %s", args);
    }
    cr_assert_eq(gate_rc("--preset moe-tiny --dtype bf16 --a cuda:ep=2 --b cuda:tp=2 --prime 16 -n 8 --rows 0"), 1,
                 "tp=2 gave ep=2's bits: the negative control passed");
}

/* Issue 28.3, flash-decoding: attention=split (fixed spans of MC_ATT_SPAN = 128 positions over
 * many blocks, folded in span order). Prefixes of up to 333 positions cross two span boundaries.
 * cpu against cuda:attention=split within NMSE on small (f32 at 1e-5, kv=f16 at 1e-3), qwen3-tiny (q/k norms)
 * and gemma3-tiny (sliding windows across span boundaries); cuda against cuda-graph bit for bit,
 * sampled; prefill=1 against prefill=7 (the chunk's rows fold the spans in one block, decode in
 * many) bit for bit, eager and graph, f32 and f16; and the negative control: split against the
 * default path (other bits past one span) is caught in exact mode. */
Test(cuda, attention_split_pairs) {
    need_device();
    static const char *const nmse[][3] = {{"small", "cpu", "cuda:attention=split"},
                                          {"small", "cpu:kv=f16", "cuda-graph:attention=split,kv=f16"},
                                          {"qwen3-tiny", "cpu", "cuda:attention=split"},
                                          {"gemma3-tiny", "cpu", "cuda-graph:attention=split"}};
    check_arms_result r;
    for (size_t i = 0; i < sizeof nmse / sizeof nmse[0]; i++) {
        check_arms_cfg c = arms(nmse[i][1], nmse[i][2], nmse[i][0]);
        c.exact = false;
        c.nmse_tol = i == 1 ? 1e-3 : 1e-5; /* kv=f16: bench/gpu/kv.sh says why 1e-3 */
        c.prime = 300;
        c.gen = 33;
        cr_expect_eq(memra_cuda_check_arms(&c, &r), 0, "%s %s / %s: %s", nmse[i][0], nmse[i][1], nmse[i][2], r.msg);
    }
    check_arms_cfg e = arms("cuda:attention=split", "cuda-graph:attention=split", "small");
    e.sampled = true;
    e.prime = 300;
    e.gen = 33;
    cr_expect_eq(memra_cuda_check_arms(&e, &r), 0, "split eager / graph: %s", r.msg);
    static const char *const pairs[] = {
        "--preset qwen3-tiny --dtype bf16 --a cuda:attention=split,prefill=1 --b cuda:attention=split,prefill=7",
        "--preset small --dtype f32 --a cuda:attention=split,prefill=1 --b cuda-graph:attention=split,prefill=64 "
        "--temp 0.9 --seed 5",
        "--preset small --dtype bf16 --a cuda-graph:attention=split,kv=f16,prefill=1 --b "
        "cuda:attention=split,kv=f16,prefill=7",
        "--preset gemma3-tiny --dtype f32 --a cuda:attention=split,prefill=1 --b cuda-graph:attention=split,prefill=7",
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "%s --prime 300 -n 16", pairs[i]);
        cr_expect_eq(gate_rc(args), 0, "memra-gate %s", args);
    }
    cr_assert_eq(gate_rc("--preset small --dtype f32 --a cuda --b cuda:attention=split --prime 200 -n 4"), 1,
                 "the negative control passed: attention=split gave the cluster path's bits past one span");
}
