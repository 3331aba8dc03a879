/* kquant_bench.cu: times the Q4_K, Q5_K and Q6_K GEMVs of the cuda backend (gemv_kquant.cu) alone,
 * with CUDA events, on the GEMV shapes of llama-8b, against the bytes they must read (the matrix
 * in its upload layout: the file's bytes), for qdot=auto and qdot=float; then the GEMVs of a whole
 * token in stream order (32 layers of qkv + norm, wo + residual, gate/up + norm + SiLU, down +
 * residual, then the head + norm; no attention, no sampler) as a share of the ceiling. Weights are
 * random bytes (finite scales), rotated over copies enough that no matrix is served from L2.
 *
 *   memra_cuda_kquant_bench [q4_k,q5_k,q6_k] [auto,float] [key=value ...] [once]   (pdl, trigger,
 *   wstream, ...; qdot is the second argument's; `once`: one eager launch a shape, nothing timed, for
 *   Nsight Compute). Every figure
 *   is of a CUDA graph of the launches (as the cuda-graph arm runs them: host launch costs out),
 *   the token's also of eager launches. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.cuh"
#include "gemv_quant.h"
#include "memra/quant.h"

typedef struct kb_mat {
    mc_matrix m[64];
    int n;
    double bytes; /* one copy's weight bytes */
} kb_mat;

static void kb_alloc(kb_mat *k, uint32_t type, uint32_t rows, uint32_t cols) {
    uint64_t dr, ar;
    if (!mc_qlayout_kquant(type, cols, &dr, &ar)) {
        fprintf(stderr, "kquant_bench: no layout\n");
        exit(3);
    }
    k->bytes = (double)rows * (dr + ar);
    k->n = (int)(400e6 / k->bytes) + 1;
    if (k->n > 64)
        k->n = 64;
    if (k->n < 1)
        k->n = 1;
    for (int i = 0; i < k->n; i++) {
        mc_matrix *m = &k->m[i];
        memset(m, 0, sizeof *m);
        m->type = type, m->rows = rows, m->cols = cols, m->stride = (uint32_t)dr, m->aux_stride = (uint32_t)ar;
        MC_BENCH_CHECK(cudaMalloc(&m->data, rows * dr));
        MC_BENCH_CHECK(cudaMalloc(&m->aux, rows * ar));
        mc_bench_fill(m->data, rows * dr, 17 + i, 0xffffffffu, 0);
        /* f16 fields with exponents well inside the finite range */
        mc_bench_fill(m->aux, rows * ar, 99 + i, 0x33ff33ffu, 0x08000800u);
    }
}
static void kb_free(kb_mat *k) {
    for (int i = 0; i < k->n; i++) {
        cudaFree(k->m[i].data);
        cudaFree(k->m[i].aux);
    }
}

int main(int argc, char **argv) {
    const char *types_arg = argc > 1 ? argv[1] : "q4_k,q5_k,q6_k";
    const char *qdot_arg = argc > 2 ? argv[2] : "auto,float";
    mc_config cfg = mc_config_default;
    int once = 0; /* `once`: one eager launch per shape and nothing else (for a profiler) */
    for (int i = 3; i < argc; i++) {
        unsigned v = 0;
        if (!strcmp(argv[i], "once"))
            once = 1;
        else if (sscanf(argv[i], "pdl=%u", &v) == 1)
            cfg.pdl = v;
        else if (sscanf(argv[i], "trigger=%u", &v) == 1 && v <= MC_TRIGGER_ALL)
            cfg.trigger = v;
        else if (strchr(argv[i], '=')) { /* a choice key (wstream=regs, ...) */
            char key[32];
            const char *eq = strchr(argv[i], '=');
            const size_t kn = (size_t)(eq - argv[i]);
            if (kn >= sizeof key) {
                fprintf(stderr, "kquant_bench: unknown argument '%s'\n", argv[i]);
                return 2;
            }
            memcpy(key, argv[i], kn);
            key[kn] = 0;
            const char *allowed = mc_config_choice(&cfg, key, eq + 1);
            if (allowed) {
                fprintf(stderr, "kquant_bench: %s: expected one of %s\n", argv[i], *allowed ? allowed : "(not a key)");
                return 2;
            }
        } else {
            fprintf(stderr, "kquant_bench: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    cudaStream_t st;
    MC_BENCH_CHECK(cudaStreamCreate(&st));
    MC_BENCH_CHECK(mc_gemv_prepare());
    if (cfg.trigger != MC_TRIGGER_DEFAULT)
        MC_BENCH_CHECK(mc_trigger_enqueue(cfg.trigger, st));
    float *x, *w, *y, *y2, *logits;
    MC_BENCH_CHECK(cudaMalloc(&x, 4 * 65536));
    MC_BENCH_CHECK(cudaMalloc(&w, 4 * 65536));
    MC_BENCH_CHECK(cudaMalloc(&y, 4 * 65536));
    MC_BENCH_CHECK(cudaMalloc(&y2, 4 * 65536));
    MC_BENCH_CHECK(cudaMalloc(&logits, 4 * 128256));
    mc_bench_fill(x, 4 * 65536, 1, 0x807fffffu, 0x3e000000u);
    mc_bench_fill(w, 4 * 65536, 2, 0x007fffffu, 0x3f000000u);
    mc_bench_fill(y, 4 * 65536, 3, 0x807fffffu, 0x3e000000u);

    const double ceiling = mc_bench_copy_ceiling(st);
    cudaEvent_t e0, e1;
    MC_BENCH_CHECK(cudaEventCreate(&e0));
    MC_BENCH_CHECK(cudaEventCreate(&e1));
    printf("kquant_bench: ceiling %.1f GB/s (1 GiB D2D copy)\n", ceiling / 1e9);

    static const struct {
        const char *name;
        uint32_t rows, cols;
        int glu, norm, res;
    } shapes[] = {
        {"qkv 6144x4096 +norm", 6144, 4096, 0, 1, 0},   {"q 4096x4096 +norm", 4096, 4096, 0, 1, 0},
        {"k,v 1024x4096 +norm", 1024, 4096, 0, 1, 0},   {"wo 4096x4096 +res", 4096, 4096, 0, 0, 1},
        {"gate/up 28672x4096 silu", 28672, 4096, 1, 1, 0}, {"down 4096x14336 +res", 4096, 14336, 0, 0, 1},
        {"head 128256x4096 +norm", 128256, 4096, 0, 1, 0},
    };
    const int nshapes = sizeof shapes / sizeof shapes[0];
    static const struct {
        const char *name;
        uint32_t type;
    } types[] = {{"q4_k", MEMRA_TYPE_Q4_K}, {"q5_k", MEMRA_TYPE_Q5_K}, {"q6_k", MEMRA_TYPE_Q6_K}};
    char summary[4096];
    int sn = 0;
    summary[0] = 0;
    for (int t = 0; t < 3; t++) {
        if (!strstr(types_arg, types[t].name))
            continue;
        kb_mat mats[7];
        for (int s = 0; s < nshapes; s++)
            kb_alloc(&mats[s], types[t].type, shapes[s].rows, shapes[s].cols);
        for (int q = 0; q < 2; q++) {
            if (!strstr(qdot_arg, q ? "float" : "auto"))
                continue;
            mc_config c = cfg;
            c.qdot = q ? MC_QDOT_FLOAT : MC_QDOT_AUTO;
            sn += snprintf(summary + sn, sizeof summary - sn, "%s %-5s", types[t].name, q ? "float" : "auto");
            for (int s = 0; s < nshapes; s++) {
                const int reps = 60;
                float ms = 0;
                cudaGraph_t g;
                cudaGraphExec_t ge;
                MC_BENCH_CHECK(mc_gemv_kquant(&c, shapes[s].glu ? 1 : 0, &mats[s].m[0], x, shapes[s].norm ? w : NULL,
                                              1e-5f, NULL, shapes[s].res ? y : NULL, s == 6 ? logits : y2,
                                              st)); /* outside capture */
                if (once) {
                    MC_BENCH_CHECK(cudaStreamSynchronize(st));
                    continue;
                }
                MC_BENCH_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                for (int i = 0; i < reps; i++) {
                    const mc_matrix *m = &mats[s].m[i % mats[s].n];
                    MC_BENCH_CHECK(mc_gemv_kquant(&c, shapes[s].glu ? 1 : 0, m, x, shapes[s].norm ? w : NULL, 1e-5f,
                                                  NULL, shapes[s].res ? y : NULL, s == 6 ? logits : y2, st));
                }
                MC_BENCH_CHECK(cudaStreamEndCapture(st, &g));
                MC_BENCH_CHECK(cudaGraphInstantiate(&ge, g, 0));
                for (int pass = 0; pass < 2; pass++) {
                    MC_BENCH_CHECK(cudaEventRecord(e0, st));
                    MC_BENCH_CHECK(cudaGraphLaunch(ge, st));
                    MC_BENCH_CHECK(cudaEventRecord(e1, st));
                    MC_BENCH_CHECK(cudaEventSynchronize(e1));
                }
                MC_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
                cudaGraphExecDestroy(ge);
                cudaGraphDestroy(g);
                const double us = ms * 1e3 / reps, gbs = mats[s].bytes / (us * 1e-6) / 1e9;
                printf("%s %-5s %-26s %3d copies %9.2f us %8.2f MB %8.1f GB/s %6.1f%%\n", types[t].name,
                       q ? "float" : "auto", shapes[s].name, mats[s].n, us, mats[s].bytes / 1e6, gbs,
                       100.0 * gbs * 1e9 / ceiling);
                sn += snprintf(summary + sn, sizeof summary - sn, " %5.1f", 100.0 * gbs * 1e9 / ceiling);
            }
            if (once)
                continue;
            /* a token's GEMVs in stream order: 32 layers (qkv, wo, gate/up, down) and the head */
            float best = 1e30f, eager = 1e30f;
            double bytes = 32.0 * (mats[0].bytes + mats[3].bytes + mats[4].bytes + mats[5].bytes) + mats[6].bytes;
            cudaGraph_t g;
            cudaGraphExec_t ge = NULL;
            for (int pass = 0; pass < 6; pass++) { /* 0-2 eager (0 warms up), 3 captures, 4-5 the graph */
                if (pass == 3)
                    MC_BENCH_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                else
                    MC_BENCH_CHECK(cudaEventRecord(e0, st));
                if (pass > 3) {
                    MC_BENCH_CHECK(cudaGraphLaunch(ge, st));
                } else for (int L = 0; L < 32; L++) {
                        MC_BENCH_CHECK(
                            mc_gemv_kquant(&c, 0, &mats[0].m[L % mats[0].n], x, w, 1e-5f, NULL, NULL, y2, st));
                        MC_BENCH_CHECK(mc_gemv_kquant(&c, 0, &mats[3].m[L % mats[3].n], y2, NULL, 0, NULL, x, y, st));
                        MC_BENCH_CHECK(
                            mc_gemv_kquant(&c, 1, &mats[4].m[L % mats[4].n], x, w, 1e-5f, NULL, NULL, y2, st));
                        MC_BENCH_CHECK(mc_gemv_kquant(&c, 0, &mats[5].m[L % mats[5].n], y2, NULL, 0, NULL, x, y, st));
                }
                if (pass <= 3)
                    MC_BENCH_CHECK(mc_gemv_kquant(&c, 0, &mats[6].m[0], x, w, 1e-5f, NULL, NULL, logits, st));
                if (pass == 3) {
                    MC_BENCH_CHECK(cudaStreamEndCapture(st, &g));
                    MC_BENCH_CHECK(cudaGraphInstantiate(&ge, g, 0));
                    continue;
                }
                MC_BENCH_CHECK(cudaEventRecord(e1, st));
                MC_BENCH_CHECK(cudaEventSynchronize(e1));
                float m;
                MC_BENCH_CHECK(cudaEventElapsedTime(&m, e0, e1));
                if (pass > 3 && m < best)
                    best = m;
                if (pass > 0 && pass < 3 && m < eager)
                    eager = m;
            }
            cudaGraphExecDestroy(ge);
            cudaGraphDestroy(g);
            printf("%s %-5s token GEMVs: %.1f MB in %.1f us (graph; eager %.1f us): %.1f GB/s, %.1f%% of the ceiling "
                   "(%.0f tok/s)\n",
                   types[t].name, q ? "float" : "auto", bytes / 1e6, best * 1e3, eager * 1e3,
                   bytes / (best * 1e-3) / 1e9, 100.0 * bytes / (best * 1e-3) / ceiling, 1e3 / best);
            sn += snprintf(summary + sn, sizeof summary - sn, " | token %5.1f\n", 100.0 * bytes / (best * 1e-3) / ceiling);
        }
        for (int s = 0; s < nshapes; s++)
            kb_free(&mats[s]);
    }
    printf("%% of ceiling:   qkv     q   k,v    wo gt/up  down  head | token\n%s", summary);
    return 0;
}
