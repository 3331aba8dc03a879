/* kernel_bench.cu: times each kernel of the cuda backend alone with CUDA events, on the shapes of
 * a preset (llama-8b, llama-1b, gemma3-270m: head size 256, 4 q heads on 1 kv head, q and k
 * norms, or smollm2-135m: 576 wide, 9 q heads on 3 kv heads of 64, ffn 1536), against the bytes it must read, to say kernel by kernel where
 * a token's time goes. Weights are random (never zeros) and rotated over enough copies that no
 * matrix is served from L2. Prints one row per kernel and the per-token sum.
 *
 *   memra_cuda_kernel_bench [8b|1b|270m|smollm2] [bf16|q8_0|f16|f32|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k] [position]
 *                           [key=value ...]
 *
 * The keys are the cuda backend's arm keys that choose kernels or launches (pdl, trigger, gemv,
 * q8, attention, qdot, qblock; cuda_ext.h), e.g. `memra_cuda_kernel_bench 8b q8_0 576 trigger=19 q8=float`; and
 * only=attention times the decode attention alone (its row, no layer sequence). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.cuh"
#include "cuda_kernels.h"
#include "gemv_quant.h"
#include "memra/gguf.h"
#include "memra/quant.h"

/* Small-magnitude random values for each encoding: exponent bits kept near 1. */
static void fill_type(void *p, size_t bytes, uint32_t type, uint32_t seed) {
    if (type == MEMRA_TYPE_F32)
        mc_bench_fill(p, bytes, seed, 0x807fffffu, 0x3c000000u);
    else if (type == MEMRA_TYPE_BF16)
        mc_bench_fill(p, bytes, seed, 0x807f807fu, 0x3c003c00u);
    else if (type == MEMRA_TYPE_F16)
        mc_bench_fill(p, bytes, seed, 0x83ff83ffu, 0x20002000u);
    else
        mc_bench_fill(p, bytes, seed, 0xffffffffu, 0);
}

typedef struct kb_mat {
    mc_matrix m[8];
    int n;
} kb_mat;

static void kb_alloc(kb_mat *k, uint32_t type, uint32_t rows, uint32_t cols, int copies) {
    k->n = copies;
    for (int i = 0; i < copies; i++) {
        mc_matrix *m = &k->m[i];
        m->type = type;
        m->rows = rows;
        m->cols = cols;
        m->scales = NULL;
        m->aux = NULL;
        m->aux_stride = 0;
        uint64_t dr = 0, ar = 0;
        if (mc_qlayout_legacy(type, cols, &dr, &ar) || mc_qlayout_kquant(type, cols, &dr, &ar)) {
            /* gemv_quant.h's families: random bits, the aux plane's f16 scales (and any other
             * fields) drawn small and finite */
            m->stride = (uint32_t)dr;
            m->aux_stride = (uint32_t)ar;
            MC_BENCH_CHECK(cudaMalloc(&m->data, (size_t)rows * dr));
            mc_bench_fill(m->data, (size_t)rows * dr, 17 + i, 0xffffffffu, 0);
            if (ar) {
                MC_BENCH_CHECK(cudaMalloc(&m->aux, (size_t)rows * ar));
                mc_bench_fill(m->aux, (size_t)rows * ar, 99 + i, 0x03ff03ffu, 0x20002000u);
            }
            continue;
        }
        uint32_t eb = mc_type_elem_bytes(type);
        m->stride = (uint32_t)((cols * eb + 15) / 16 * 16 / eb);
        size_t qb = (size_t)rows * m->stride * eb;
        MC_BENCH_CHECK(cudaMalloc(&m->data, qb));
        fill_type(m->data, qb, type, 17 + i);
        if (type == MEMRA_TYPE_Q8_0) {
            size_t sb = (size_t)rows * (cols / 32) * 2;
            MC_BENCH_CHECK(cudaMalloc((void **)&m->scales, (sb + 3) / 4 * 4));
            mc_bench_fill(m->scales, (sb + 3) / 4 * 4, 99 + i, 0x03ff03ffu, 0x20002000u);
        }
    }
}

/* Attention as the backend launches it under c: the fused kernel of its path, or the unfused
 * rope/kv append and attention pair. */
static cudaError_t kb_attention(const mc_config *c, bool fused, const mc_rope_args *ra, float *qkv, float *kc,
                                float *vc, float *part, float *att, const int32_t *pos, cudaStream_t st) {
    if (fused)
        return mc_attention_fused(c, ra, qkv, kc, vc, att, pos, st);
    cudaError_t e = mc_rope_kv(ra, qkv, kc, vc, pos, st);
    if (e != cudaSuccess)
        return e;
    return mc_attention(qkv, kc, vc, part, att, ra->n_head, ra->n_kv, ra->hd, ra->hdv, ra->capacity, pos, ra->window,
                        ra->scale, ra->kv, st);
}

static double kb_bytes(const mc_matrix *m) { return (double)mc_matrix_bytes(m->type, m->rows, m->cols); }

/* The arm keys of the command line into c (only=attention: *att_only); exits 2 on a bad one. */
static void kb_config(int argc, char **argv, int first, mc_config *c, bool *att_only) {
    *c = mc_config_default;
    *att_only = false;
    for (int i = first; i < argc; i++) {
        char key[32];
        const char *eq = strchr(argv[i], '=');
        if (!eq || (size_t)(eq - argv[i]) >= sizeof key) {
            fprintf(stderr, "kernel_bench: '%s' is not key=value\n", argv[i]);
            exit(2);
        }
        memcpy(key, argv[i], (size_t)(eq - argv[i]));
        key[eq - argv[i]] = 0;
        const char *v = eq + 1, *allowed = NULL;
        char *end = NULL;
        if (!strcmp(key, "only")) {
            if (strcmp(v, "attention")) {
                fprintf(stderr, "kernel_bench: only=%s: expected attention\n", v);
                exit(2);
            }
            *att_only = true;
        } else if (!strcmp(key, "pdl") || !strcmp(key, "trigger")) {
            const unsigned long n = strtoul(v, &end, 10);
            const unsigned long max = !strcmp(key, "pdl") ? 1 : MC_TRIGGER_ALL;
            if (!*v || *end || n > max) {
                fprintf(stderr, "kernel_bench: %s=%s: expected an integer from 0 to %lu\n", key, v, max);
                exit(2);
            }
            *(!strcmp(key, "pdl") ? &c->pdl : &c->trigger) = (uint32_t)n;
        } else if ((allowed = mc_config_choice(c, key, v)) != NULL) {
            if (*allowed)
                fprintf(stderr, "kernel_bench: %s=%s: expected one of %s\n", key, v, allowed);
            else
                fprintf(stderr,
                        "kernel_bench: unknown key '%s' (pdl, trigger, gemv, q8, attention, norm, qdot, qblock)\n",
                        key);
            exit(2);
        }
    }
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "8b";
    const char *dt = argc > 2 ? argv[2] : "bf16";
    const uint32_t pos = argc > 3 ? (uint32_t)atoi(argv[3]) : 576;
    mc_config cfg;
    bool att_only;
    kb_config(argc, argv, 4, &cfg, &att_only);
    const mc_config *c = &cfg;
    static const struct {
        const char *name;
        uint32_t type;
    } dts[] = {{"q8_0", MEMRA_TYPE_Q8_0}, {"f16", MEMRA_TYPE_F16},   {"f32", MEMRA_TYPE_F32},
               {"q4_0", MEMRA_TYPE_Q4_0}, {"q4_1", MEMRA_TYPE_Q4_1}, {"q5_0", MEMRA_TYPE_Q5_0},
               {"q5_1", MEMRA_TYPE_Q5_1}, {"q4_k", MEMRA_TYPE_Q4_K}, {"q5_k", MEMRA_TYPE_Q5_K},
               {"q6_k", MEMRA_TYPE_Q6_K}};
    uint32_t type = MEMRA_TYPE_BF16;
    bool known = !strcmp(dt, "bf16");
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++)
        if (!strcmp(dt, dts[i].name))
            type = dts[i].type, known = true;
    if (!known) {
        fprintf(stderr,
                "kernel_bench: unknown dtype '%s' (bf16, q8_0, f16, f32, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k)\n",
                dt);
        return 2;
    }
    if (strcmp(which, "8b") && strcmp(which, "1b") && strcmp(which, "270m") && strcmp(which, "smollm2")) {
        fprintf(stderr, "kernel_bench: unknown shape '%s' (8b, 1b, 270m, smollm2)\n", which);
        return 2;
    }
    uint32_t n_embd = 4096, n_ff = 14336, n_layer = 32, n_head = 32, n_kv = 8, hd = 128, V = 128256;
    if (!strcmp(which, "1b"))
        n_embd = 2048, n_ff = 8192, n_layer = 16, n_head = 32, n_kv = 8, hd = 64;
    const bool g270m = !strcmp(which, "270m"); /* gemma3-270m (GELU there; the GEMVs here are llama's) */
    if (g270m)
        n_embd = 640, n_ff = 2048, n_layer = 18, n_head = 4, n_kv = 1, hd = 256, V = 262144;
    if (!strcmp(which, "smollm2")) /* SmolLM2-135M */
        n_embd = 576, n_ff = 1536, n_layer = 30, n_head = 9, n_kv = 3, hd = 64, V = 49152;
    /* the file's block of the type must divide every matrix's columns (n_embd, n_head hd, n_ff):
     * gemma3-270m's 640 is no multiple of the K-quants' 256, so its file holds those matrices in
     * Q5_0 / Q8_0 (mkmodel's q4_k_m rule) */
    const uint32_t blk = memra_quant_block_elems(type); /* the GGUF type numbers */
    if (blk > 1 && (n_embd % blk || (n_head * hd) % blk || n_ff % blk)) {
        fprintf(stderr, "kernel_bench: %s's matrices have %u, %u and %u columns: not multiples of %s's block of %u\n",
                which, n_embd, n_head * hd, n_ff, dt, blk);
        return 2;
    }
    const uint32_t cap = pos + 1 > 1024 ? pos + 1 : 1024; /* room for the position (long contexts: attention=split) */
    cudaStream_t st;
    MC_BENCH_CHECK(cudaStreamCreate(&st));
    MC_BENCH_CHECK(mc_gemv_prepare());     /* as the backend does at open */
    if (cfg.trigger != MC_TRIGGER_DEFAULT) /* every launch below reads the chosen mask */
        MC_BENCH_CHECK(mc_trigger_enqueue(cfg.trigger, st));
    kb_mat qkv, wo, gu, down, head;
    kb_alloc(&qkv, type, (n_head + 2 * n_kv) * hd, n_embd, 4);
    kb_alloc(&wo, type, n_embd, n_head * hd, 4);
    kb_alloc(&gu, type, 2 * n_ff, n_embd, 2);
    kb_alloc(&down, type, n_embd, n_ff, 2);
    kb_alloc(&head, type, V, n_embd, 1);
    float *x, *y, *w, *qkvb, *kc, *vc, *part, *att, *logits, *freqs;
    int32_t *dpos, *tok;
    mc_sample_result *res;
    MC_BENCH_CHECK(cudaMalloc(&x, 4 * 65536));
    MC_BENCH_CHECK(cudaMalloc(&y, 4 * 65536));
    MC_BENCH_CHECK(cudaMalloc(&w, 4 * 65536));
    MC_BENCH_CHECK(cudaMalloc(&qkvb, 4 * 65536));
    MC_BENCH_CHECK(cudaMalloc(&att, 4 * 65536));
    MC_BENCH_CHECK(cudaMalloc(&freqs, 4 * 1024));
    MC_BENCH_CHECK(cudaMalloc(&kc, (size_t)n_kv * cap * hd * 4));
    MC_BENCH_CHECK(cudaMalloc(&vc, (size_t)n_kv * cap * hd * 4));
    MC_BENCH_CHECK(cudaMalloc(&part, mc_att_partial_floats(n_head, hd, cap) * 4));
    uint32_t *ticket; /* attention=split: the kv heads' tickets, zero before the first launch */
    MC_BENCH_CHECK(cudaMalloc(&ticket, 4 * 256));
    MC_BENCH_CHECK(cudaMemset(ticket, 0, 4 * 256));
    MC_BENCH_CHECK(cudaMalloc(&logits, (size_t)V * 4));
    MC_BENCH_CHECK(cudaMalloc(&dpos, 16));
    MC_BENCH_CHECK(cudaMalloc(&tok, 16));
    MC_BENCH_CHECK(cudaMalloc(&res, sizeof *res));
    mc_bench_fill(x, 4 * 65536, 1, 0x807fffffu, 0x3e000000u);
    mc_bench_fill(w, 4 * 65536, 2, 0x807fffffu, 0x3e000000u);
    mc_bench_fill(qkvb, 4 * 65536, 3, 0x807fffffu, 0x3e000000u);
    mc_bench_fill(att, 4 * 65536, 4, 0x807fffffu, 0x3e000000u);
    mc_bench_fill(freqs, 4 * 1024, 5, 0x007fffffu, 0x3c000000u);
    mc_bench_fill(kc, (size_t)n_kv * cap * hd * 4, 6, 0x807fffffu, 0x3e000000u);
    mc_bench_fill(vc, (size_t)n_kv * cap * hd * 4, 7, 0x807fffffu, 0x3e000000u);
    void *sscr;
    MC_BENCH_CHECK(cudaMalloc(&sscr, mc_sampler_scratch_bytes(V)));
    MC_BENCH_CHECK(cudaMemset(sscr, 0, mc_sampler_scratch_bytes(V))); /* the argmax's ticket starts at 0 */
    mc_sampler_scratch ss;
    mc_sampler_scratch_init(&ss, sscr, V);
    int32_t p = (int32_t)pos;
    MC_BENCH_CHECK(cudaMemcpy(dpos, &p, 4, cudaMemcpyHostToDevice));
    MC_BENCH_CHECK(cudaDeviceSynchronize());

    const double ceiling = mc_bench_copy_ceiling(st);
    cudaEvent_t e0, e1;
    MC_BENCH_CHECK(cudaEventCreate(&e0));
    MC_BENCH_CHECK(cudaEventCreate(&e1));

    mc_rope_args ra = {n_head, n_kv, hd, hd, cap, 1, 1.0f, freqs, NULL, NULL, 1e-5f};
    if (g270m) { /* gemma3's q and k norms (random weights), its scale 256^-1/2 */
        ra.q_norm = w;
        ra.k_norm = w + hd;
        ra.scale = 0.0625f;
    }
    ra.partial = part; /* the split path's scratch, as the backend's state holds it */
    ra.ticket = ticket;
    const bool fused = mc_attention_path(c, n_head, n_kv, hd, hd) != MC_ATT_PATH_UNFUSED;
    if (fused)
        MC_BENCH_CHECK(mc_attention_fused_prepare(c, n_head, n_kv, hd, hd));
    memra_sample_cfg greedy = {0.0f, 0, 1.0f, 0};
    struct {
        const char *name;
        int per_token; /* calls per token */
        double bytes;  /* bytes it must read (and write) per call */
        int in_sum;    /* counted in the per-token sum (the unfused pair is shown for reference) */
    } rows[] = {
        {"gemv qkv +norm", (int)n_layer, kb_bytes(&qkv.m[0]), 1},
        {"rope_kv (unfused)", (int)n_layer, ((n_head + 2 * n_kv) * hd) * 8.0, 0},
        {"attention (unfused)", (int)n_layer, 2.0 * n_kv * (pos + 1) * hd * 4, 0},
        {"gemv wo +res", (int)n_layer, kb_bytes(&wo.m[0]), 1},
        {"gemv gate/up +norm", (int)n_layer, kb_bytes(&gu.m[0]), 1},
        {"gemv down +res", (int)n_layer, kb_bytes(&down.m[0]), 1},
        {"gemv head +norm", 1, kb_bytes(&head.m[0]), 1},
        {"sampler greedy", 1, (double)V * 4, 1},
        {fused ? "attention fused" : "attention unfused pair", (int)n_layer, 2.0 * n_kv * (pos + 1) * hd * 4, 1},
    };
    const int nrows = sizeof rows / sizeof rows[0];
    const int reps = 40;
    double total_ms = 0, total_bytes = 0;
    printf("kernel_bench: %s %s pos %u, ceiling %.1f GB/s (1 GiB D2D copy, read+write)\n", which, dt, pos,
           ceiling / 1e9);
    printf("%-22s %6s %10s %10s %9s %8s %10s\n", "kernel", "calls", "us/call", "MB/call", "GB/s", "%ceil", "us/token");
    for (int r = att_only ? nrows - 1 : 0; r < nrows; r++) {
        for (int pass = 0; pass < 2; pass++) { /* pass 0 warms up */
            MC_BENCH_CHECK(cudaEventRecord(e0, st));
            for (int i = 0; i < reps; i++) {
                switch (r) {
                case 0: MC_BENCH_CHECK(mc_gemv(c, &qkv.m[i % qkv.n], x, w, 1e-5f, NULL, NULL, qkvb, st)); break;
                case 1: MC_BENCH_CHECK(mc_rope_kv(&ra, qkvb, kc, vc, dpos, st)); break;
                case 2:
                    MC_BENCH_CHECK(
                        mc_attention(qkvb, kc, vc, part, att, n_head, n_kv, hd, hd, cap, dpos, 0, 0.0f, MC_KV_F32, st));
                    break;
                case 3: MC_BENCH_CHECK(mc_gemv(c, &wo.m[i % wo.n], att, NULL, 0.0f, NULL, y, y, st)); break;
                case 4: MC_BENCH_CHECK(mc_gemv_swiglu(c, &gu.m[i % gu.n], x, w, 1e-5f, att, st)); break;
                case 5: MC_BENCH_CHECK(mc_gemv(c, &down.m[i % down.n], att, NULL, 0.0f, NULL, y, y, st)); break;
                case 6: MC_BENCH_CHECK(mc_gemv(c, &head.m[0], x, w, 1e-5f, NULL, NULL, logits, st)); break;
                case 7:
                    MC_BENCH_CHECK(
                        mc_sample(logits, &ss, &greedy, dpos, tok, res, NULL, 0, c->pdl != 0, false, false, NULL, st));
                    break;
                default: MC_BENCH_CHECK(kb_attention(c, fused, &ra, qkvb, kc, vc, part, att, dpos, st)); break;
                }
            }
            MC_BENCH_CHECK(cudaEventRecord(e1, st));
            MC_BENCH_CHECK(cudaEventSynchronize(e1));
        }
        float ms;
        MC_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        double us = ms * 1e3 / reps;
        double gbs = rows[r].bytes / (us * 1e-6) / 1e9;
        if (rows[r].in_sum) {
            total_ms += us * rows[r].per_token / 1e3;
            total_bytes += rows[r].bytes * rows[r].per_token;
        }
        printf("%-22s %6d %10.2f %10.3f %9.1f %7.1f%% %10.1f\n", rows[r].name, rows[r].per_token, us,
               rows[r].bytes / 1e6, gbs, 100.0 * gbs * 1e9 / ceiling, us * rows[r].per_token);
    }
    printf("%-22s %6s %10s %10.1f %9.1f %7.1f%% %10.1f  -> %.1f tok/s if launches were free\n", "per token", "", "",
           total_bytes / 1e6, total_bytes / (total_ms * 1e-3) / 1e9, 100.0 * total_bytes / (total_ms * 1e-3) / ceiling,
           total_ms * 1e3, 1e3 / total_ms);
    printf("floor: %.1f MB/token / %.1f GB/s = %.3f ms/token = %.1f tok/s\n", total_bytes / 1e6, ceiling / 1e9,
           total_bytes / ceiling * 1e3, ceiling / total_bytes);

    /* The layer sequence as the backend launches it (qkv, attention, wo, gate/up, down; stream
     * order, the same programmatic launches), n_layer layers on rotating weight copies, then the
     * same sequence without one kind: what a kernel costs in sequence, next to its neighbours,
     * against what it costs alone (above). Each kernel reads a fixed input (x, qkv, att, sw), so
     * values stay bounded; the launches still wait on each other as in a token. */
    if (att_only)
        return 0;
    float *sw;
    MC_BENCH_CHECK(cudaMalloc(&sw, 4 * 65536));
    MC_BENCH_CHECK(cudaMemcpy(sw, att, 4 * 65536, cudaMemcpyDeviceToDevice));
    static const char *const kinds[] = {"all", "qkv", "attention", "wo", "gate/up", "down"};
    double seq_all = 0;
    printf("sequence of %u layers at pos %u: us per layer, and without one kind (its cost in sequence)\n", n_layer,
           pos);
    for (int mode = 0; mode < 2; mode++) { /* 0: stream launches (host-bound on small shapes), 1: a CUDA graph */
        if (mode == 1)
            printf("the same sequences captured in a CUDA graph (as cuda-graph replays a token), best of 5 replays:\n");
        for (int drop = 0; drop < 6; drop++) {
            float ms = 0;
            cudaGraphExec_t gx = NULL;
            if (mode == 1) {
                MC_BENCH_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            }
            for (int pass = 0; pass < (mode ? 1 : 3); pass++) { /* pass 0 warms up; the best of two */
                if (!mode)
                    MC_BENCH_CHECK(cudaEventRecord(e0, st));
                for (uint32_t L = 0; L < n_layer; L++) {
                    if (drop != 1)
                        MC_BENCH_CHECK(mc_gemv(c, &qkv.m[L % qkv.n], x, w, 1e-5f, NULL, NULL, qkvb, st));
                    if (drop != 2)
                        MC_BENCH_CHECK(kb_attention(c, fused, &ra, qkvb, kc, vc, part, att, dpos, st));
                    if (drop != 3)
                        MC_BENCH_CHECK(mc_gemv(c, &wo.m[L % wo.n], att, NULL, 0.0f, NULL, x, y, st));
                    if (drop != 4)
                        MC_BENCH_CHECK(mc_gemv_swiglu(c, &gu.m[L % gu.n], x, w, 1e-5f, sw, st));
                    if (drop != 5)
                        MC_BENCH_CHECK(mc_gemv(c, &down.m[L % down.n], sw, NULL, 0.0f, NULL, x, y, st));
                }
                if (mode)
                    break;
                MC_BENCH_CHECK(cudaEventRecord(e1, st));
                MC_BENCH_CHECK(cudaEventSynchronize(e1));
                float m = 0;
                MC_BENCH_CHECK(cudaEventElapsedTime(&m, e0, e1));
                if (pass == 1 || (pass == 2 && m < ms))
                    ms = m;
            }
            if (mode) {
                cudaGraph_t g;
                MC_BENCH_CHECK(cudaStreamEndCapture(st, &g));
                MC_BENCH_CHECK(cudaGraphInstantiate(&gx, g, 0));
                MC_BENCH_CHECK(cudaGraphDestroy(g));
                for (int rep = 0; rep < 6; rep++) { /* replay 0 warms up; the best of five */
                    MC_BENCH_CHECK(cudaEventRecord(e0, st));
                    MC_BENCH_CHECK(cudaGraphLaunch(gx, st));
                    MC_BENCH_CHECK(cudaEventRecord(e1, st));
                    MC_BENCH_CHECK(cudaEventSynchronize(e1));
                    float m = 0;
                    MC_BENCH_CHECK(cudaEventElapsedTime(&m, e0, e1));
                    if (rep == 1 || (rep > 1 && m < ms))
                        ms = m;
                }
                MC_BENCH_CHECK(cudaGraphExecDestroy(gx));
            }
            const double per = ms * 1e3 / n_layer;
            if (drop == 0) {
                seq_all = per;
                printf("seq %-12s %8.2f us/layer (%.1f us per token of layers)\n", kinds[drop], per, per * n_layer);
            } else {
                printf("seq -%-11s %8.2f us/layer: %s costs %.2f us in sequence\n", kinds[drop], per, kinds[drop],
                       seq_all - per);
            }
        }
    }
    return 0;
}
