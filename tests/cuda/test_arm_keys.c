/* test_arm_keys.c: the cuda and cuda-graph backends' arm keys, checked on the host (no GPU
 * needed): every key is in the option specs with its default; the resolved options of an arm
 * name every key with the value the backend will use (the protocol record's text); a bad value
 * is refused naming the key and the values it takes; and the kernels' configuration parser
 * (mc_config_choice, which the kernel bench uses too) agrees with the specs. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cuda_kernels.h"
#include "memra/op.h"
#include "memra/options.h"
#include "memra/plugin.h"

static const memra_backend_vtable *cuda_vt(void) {
    void *h = dlopen(MEMRA_CUDA_PLUGIN_FILE, RTLD_NOW | RTLD_LOCAL);
    cr_assert(h, "dlopen %s: %s", MEMRA_CUDA_PLUGIN_FILE, dlerror());
    const memra_plugin *p = (const memra_plugin *)dlsym(h, MEMRA_PLUGIN_SYMBOL);
    cr_assert(p && p->backend);
    cr_assert(MEMRA_HAS_MEMBER(p->backend, memra_backend_vtable, resolve_options));
    cr_assert(p->backend->resolve_options);
    return p->backend;
}

/* The resolved arm text of `arm`, or the error message (returns the status). */
static memra_status resolve(const char *arm, char *out, size_t n) {
    const memra_backend_vtable *vt = cuda_vt();
    char be[MEMRA_BACKEND_NAME_MAX];
    memra_options o = {0}, r = {0};
    memra_error err = {0};
    cr_assert_eq(memra_arm_parse(arm, be, &o, &err), MEMRA_OK, "%s", err.msg);
    memra_status st = vt->resolve_options(NULL, &o, &r, &err);
    if (st)
        snprintf(out, n, "%.400s", err.msg);
    else
        memra_arm_format(be, &r, out, n);
    return st;
}

Test(cuda_arm_keys, specs_list_every_key_with_its_default) {
    const memra_backend_vtable *vt = cuda_vt();
    static const char *const want[][2] = {
        {"pdl", "1"},
        {"trigger", "115"},
        {"gemv", "auto"},
        {"q8", "auto"},
        {"qdot", "auto"}, /* issue 26: the quantized GEMVs */
        {"attention", "auto"},
        {"kv", "f32"},            /* issue 28.3: the KV cache's storage */
        {"norm", "fused"},        /* issue 30: the built-in op, unfused */
        {"moe_fuse", "2935"},     /* issue 29: the mixture-of-experts folds */
        {"postnorm", "prologue"}, /* issue 27: gemma3's post norms in their readers */
        {"chunk", "mma"},         /* issue 28: the Q8_0 prefill GEMV on tensor cores */
        {"qblock", "16r"},        /* issue 27: the quantized GEMVs' blocks (16r: the rows split on narrow matrices) */
        {"qgrid", "auto"},        /* issue 26: their grid (auto: filled on wide matrices) */
        {"experts", "int-gu"},    /* issue 29: the Q8_0 experts' dots */
        {"mmachunk", "auto"},     /* issue 28: gemv=mma's chunk GEMV (wgmma on sm_90) */
        {"attchunk", "phased"},   /* issue 28: a chunk's attention kernel */
        {"attfold", "span"},      /* issue 28: attention=mma's fold of its spans */
        {"attdec", "block"},      /* issue 28: who reduces attention=mma's decode spans */
        {"qkvparts", "merged"},   /* issue 27: q/k/v parts of two types in one launch */
        {"wait", "ring"},         /* issue 27: how the host learns a step ended */
        {"commit", "head"},       /* issue 26: where a step's position advances */
        {"collective", "oneshot"},
        {"step_timeout_ms", "30000"},
        {"stall_us", "0"},
        /* op plugins (issue 30) */
        {"op.rmsnorm", "builtin"},
        {"op.gemv.f32", "builtin"},
        {"op.gemv.f16", "builtin"},
        {"op.gemv.bf16", "builtin"}};
    cr_assert_eq(vt->n_options, 28);
    for (int i = 0; i < 28; i++) {
        cr_assert_str_eq(vt->options[i].key, want[i][0]);
        cr_assert_str_eq(vt->options[i].default_value, want[i][1]);
        cr_assert(vt->options[i].help && *vt->options[i].help);
    }
}

Test(cuda_arm_keys, resolved_options_name_every_key) {
    char buf[512];
    cr_assert_eq(resolve("cuda", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert_str_eq(buf, "cuda:pdl=1,trigger=115,gemv=auto,q8=auto,attention=auto,norm=fused,qdot=auto,kv=f32,moe_"
                          "fuse=2935,postnorm=prologue,chunk=mma,qblock=16r,qgrid=auto,experts=int-gu,mmachunk=auto,"
                          "attchunk=phased,attfold=span,attdec=block,qkvparts=merged,wait=ring,commit=head");
    cr_assert_eq(resolve("cuda:gemv=rowgroup,attention=unfused,trigger=19,q8=float,pdl=0", buf, sizeof buf), MEMRA_OK,
                 "%s", buf);
    cr_assert_str_eq(buf, "cuda:gemv=rowgroup,attention=unfused,trigger=19,q8=float,pdl=0,norm=fused,qdot=auto,kv=f32,"
                          "moe_fuse=2935,postnorm=prologue,chunk=mma,qblock=16r,qgrid=auto,experts=int-gu,mmachunk="
                          "auto,attchunk=phased,attfold=span,attdec=block,qkvparts=merged,wait=ring,commit=head");
    /* the collective is resolved only where there are ranks to sum */
    cr_assert_eq(resolve("cuda:tp=2", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert_str_eq(buf, "cuda:tp=2,pdl=1,trigger=115,gemv=auto,q8=auto,attention=auto,norm=fused,qdot=auto,kv=f32,"
                          "moe_fuse=2935,postnorm=prologue,chunk=mma,qblock=16r,qgrid=auto,experts=int-gu,mmachunk="
                          "auto,attchunk=phased,attfold=span,attdec=block,qkvparts=merged,wait=ring,commit=head,"
                          "collective=oneshot,"
                          "step_timeout_ms=30000");
    cr_assert_eq(resolve("cuda:tp=2,collective=nccl:allgather", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert_str_eq(buf, "cuda:tp=2,collective=nccl:allgather,pdl=1,trigger=115,gemv=auto,q8=auto,attention=auto,"
                          "norm=fused,qdot=auto,kv=f32,moe_fuse=2935,postnorm=prologue,chunk=mma,qblock=16r,qgrid=auto,"
                          "experts=int-gu,mmachunk=auto,attchunk=phased,attfold=span,attdec=block,qkvparts=merged,wait="
                          "ring,commit=head,step_timeout_ms=30000");
}

Test(cuda_arm_keys, bad_values_name_the_key_and_the_values) {
    char buf[512];
    static const char *const bad[][2] = {
        {"cuda:gemv=v6", "gemv=v6: expected one of auto, rowgroup, persistent, mma, mma2"},
        {"cuda:q8=int", "q8=int: expected one of auto, float, rows, int-8w"},
        {"cuda:attention=v5", "attention=v5: expected one of auto, tiled, unfused, split, heads, cluster, mma"},
        {"cuda:attention=flash", "attention=flash: expected one of auto, tiled, unfused, split, heads, cluster, mma"},
        {"cuda:norm=split", "norm=split: expected one of fused, unfused"},
        {"cuda:kv=f8", "kv=f8: expected one of f32, f16, bf16, q8"},
        {"cuda:kv=F16", "kv=F16: expected one of f32, f16, bf16"},
        {"cuda:norm=fused,op.rmsnorm=example", "norm=fused: op.rmsnorm=example runs every norm site unfused"},
        {"cuda:trigger=128", "trigger=128: expected an integer from 0 to 127"},
        {"cuda:pdl=2", "pdl=2: expected an integer from 0 to 1"},
        {"cuda:moe_fuse=4096", "moe_fuse=4096: expected an integer from 0 to 4095"},
        {"cuda:postnorm=unfused", "postnorm=unfused: expected one of fused, launch, prologue"},
        {"cuda:chunk=dp4a", "chunk=dp4a: expected one of mma, fma, mma-kq, mma-q8, mma-opt"},
        {"cuda:collective=:sum", "collective=:sum: expected a collective plugin's name"},
        {"cuda:step_timeout_ms=50", "step_timeout_ms=50: expected an integer from 100 to 3600000"},
        {"cuda:stall_us=2000000", "stall_us=2000000: expected an integer from 0 to 1000000"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(resolve(bad[i][0], buf, sizeof buf), MEMRA_E_INVALID, "%s", bad[i][0]);
        cr_assert(strstr(buf, bad[i][1]), "%s: got '%s'", bad[i][0], buf);
    }
}

/* Issue 27 item 2: q8=auto serves every Q8_0 matrix on the integer kernel, the down projection
 * (rows < cols / 2) included, and so does the prefill chunk (mc_gemv_chunk takes the same rule);
 * q8=rows keeps the rule before (the float path there), q8=float the float path everywhere. */
Test(cuda_arm_keys, q8_integer_kernel_serves_every_q8_0_matrix_under_auto) {
    static const struct {
        uint32_t type, rows, cols;
        int want_auto, want_rows;
    } cases[] = {
        {MEMRA_TYPE_Q8_0, 4096, 14336, 1, 0},  /* llama-8b's down projection */
        {MEMRA_TYPE_Q8_0, 2048, 8192, 1, 0},   /* llama-1b's */
        {MEMRA_TYPE_Q8_0, 640, 2048, 1, 0},    /* gemma3-270m's */
        {MEMRA_TYPE_Q8_0, 7168, 14336, 1, 1},  /* rows = cols / 2: both rules */
        {MEMRA_TYPE_Q8_0, 6144, 4096, 1, 1},   /* qkv */
        {MEMRA_TYPE_Q8_0, 28672, 4096, 1, 1},  /* gate/up */
        {MEMRA_TYPE_Q8_0, 4096, 30240, 1, 0},  /* the widest x that fits in shared memory */
        {MEMRA_TYPE_Q8_0, 16384, 30272, 0, 0}, /* one chunk wider: the float path */
        {MEMRA_TYPE_Q8_0, 4096, 4112, 0, 0},   /* columns no multiple of 32 */
        {MEMRA_TYPE_BF16, 4096, 14336, 0, 0},
        {MEMRA_TYPE_Q4_K, 4096, 14336, 0, 0},
    };
    mc_config c = mc_config_default, rows = mc_config_default, fl = mc_config_default, w8 = mc_config_default;
    cr_assert_null(mc_config_choice(&rows, "q8", "rows"));
    cr_assert_null(mc_config_choice(&fl, "q8", "float"));
    cr_assert_null(mc_config_choice(&w8, "q8", "int-8w"));
    cr_assert_eq(c.q8, MC_Q8_AUTO);
    cr_assert_eq(rows.q8, MC_Q8_ROWS);
    cr_assert_eq(w8.q8, MC_Q8_INT8W);
    cr_assert_str_eq(mc_config_choice_name(&w8, "q8"), "int-8w");
    mc_config mm = mc_config_default;
    cr_assert_null(mc_config_choice(&mm, "q8", "mma"));
    cr_assert_eq(mm.q8, MC_Q8_MMA);
    cr_assert_str_eq(mc_config_choice_name(&mm, "q8"), "mma");
    cr_assert_not_null(mc_config_choice(&mm, "q8", "mma2"), "q8 refuses a value it does not have");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mc_matrix w;
        memset(&w, 0, sizeof w);
        w.type = cases[i].type;
        w.rows = cases[i].rows;
        w.cols = cases[i].cols;
        cr_assert_eq(mc_gemv_q8_serves(&c, &w), cases[i].want_auto, "auto, %ux%u type %u", w.rows, w.cols, w.type);
        cr_assert_eq(mc_gemv_q8_serves(&w8, &w), cases[i].want_auto, "int-8w, %ux%u", w.rows, w.cols);
        cr_assert_eq(mc_gemv_q8_serves(&rows, &w), cases[i].want_rows, "rows, %ux%u", w.rows, w.cols);
        cr_assert_eq(mc_gemv_q8_serves(&fl, &w), 0, "float, %ux%u", w.rows, w.cols);
        /* q8=mma: gemv_mma.cu's chain for every Q8_0 matrix (columns a multiple of 32), never the
         * integer kernel; gemv=mma alone leaves Q8_0 to q8's kernels */
        cr_assert_eq(mc_gemv_q8_serves(&mm, &w), 0, "q8=mma, %ux%u", w.rows, w.cols);
        cr_assert_eq(mc_gemv_mma_serves(&mm, &w), w.type == MEMRA_TYPE_Q8_0 && w.cols % 32 == 0, "q8=mma, %ux%u type %u",
                     w.rows, w.cols, w.type);
        cr_assert_eq(mc_gemv_mma_serves(&c, &w), 0, "auto, %ux%u type %u", w.rows, w.cols, w.type);
    }
}

/* Issue 28: qdot=mma serves Q4_K, Q5_K and Q6_K matrices in their whole-row upload layout (a
 * tensor-parallel column slice keeps a longer stride: not served, so its decode and chunk keep
 * qdot=auto's kernels together) whose staging (x', x and S, 196 bytes a k-block with a norm) fits
 * 96 KB; never Q4_0 .. Q5_1, Q8_0 or BF16 (their keys decide), and nothing under qdot=auto. */
Test(cuda_arm_keys, qdot_mma_serves_the_k_quants_in_their_layout) {
    static const struct {
        uint32_t type, rows, cols, stride_extra;
        int want;
    } cases[] = {
        {MEMRA_TYPE_Q4_K, 6144, 4096, 0, 1},   {MEMRA_TYPE_Q5_K, 28672, 4096, 0, 1}, {MEMRA_TYPE_Q6_K, 4096, 14336, 0, 1},
        {MEMRA_TYPE_Q4_K, 64, 256, 0, 1},      {MEMRA_TYPE_Q6_K, 128256, 4096, 0, 1}, /* the head */
        {MEMRA_TYPE_Q4_K, 4096, 15872, 0, 1},  /* the widest whose staging fits */
        {MEMRA_TYPE_Q4_K, 4096, 16128, 0, 0},  /* one super-block wider */
        {MEMRA_TYPE_Q4_K, 4096, 7168, 128, 0}, /* a column slice: the row's stride is longer */
        {MEMRA_TYPE_Q4_K, 4096, 4000, 0, 0},   /* columns no multiple of 256 */
        {MEMRA_TYPE_Q4_0, 4096, 4096, 0, 0},   {MEMRA_TYPE_Q8_0, 4096, 4096, 0, 0}, {MEMRA_TYPE_BF16, 4096, 4096, 0, 0},
    };
    mc_config mm = mc_config_default, au = mc_config_default;
    cr_assert_null(mc_config_choice(&mm, "qdot", "mma"));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mc_matrix w;
        memset(&w, 0, sizeof w);
        w.type = cases[i].type;
        w.rows = cases[i].rows;
        w.cols = cases[i].cols;
        const uint64_t nb = w.cols / 256;
        w.stride = (uint32_t)(w.type == MEMRA_TYPE_Q4_K ? 128 * nb : w.type == MEMRA_TYPE_Q5_K ? 160 * nb
                                                                    : w.type == MEMRA_TYPE_Q6_K ? 192 * nb
                                                                                                : w.cols) +
                   cases[i].stride_extra;
        w.aux_stride = (uint32_t)(w.type == MEMRA_TYPE_Q6_K ? (18 * nb + 15) / 16 * 16 : 16 * nb);
        w.aux = &w; /* any non-NULL: serves reads no memory */
        cr_assert_eq(mc_gemv_mma_serves(&mm, &w), cases[i].want, "qdot=mma, %ux%u type %u stride %u", w.rows, w.cols,
                     w.type, w.stride);
        cr_assert_eq(mc_gemv_mma_serves(&au, &w), 0, "qdot=auto, %ux%u type %u", w.rows, w.cols, w.type);
    }
}

Test(cuda_arm_keys, kernel_configuration_parser) {
    mc_config c = mc_config_default;
    cr_assert_eq(c.pdl, 1);
    cr_assert_eq(c.trigger, MC_TRIGGER_DEFAULT);
    cr_assert_eq(c.gemv, MC_GEMV_AUTO);
    cr_assert_eq(c.q8, MC_Q8_AUTO);
    cr_assert_eq(c.attention, MC_ATT_AUTO);
    cr_assert_eq(c.norm, MC_NORM_FUSED);
    cr_assert_eq(c.moe_fuse,
                 MC_MOE_FUSE_DEFAULT); /* issue 29: the measured variants (1, 2, 4, 16, 32, 64, 256, 512, 2048) */
    cr_assert_eq(MC_MOE_FUSE_DEFAULT, 2935u);
    cr_assert_null(mc_config_choice(&c, "norm", "unfused"));
    cr_assert_eq(c.norm, MC_NORM_UNFUSED);
    cr_assert_str_eq(mc_config_choice_name(&c, "norm"), "unfused");
    cr_assert_str_eq(mc_config_choice(&c, "norm", "x"), "fused, unfused");
    cr_assert_null(mc_config_choice(&c, "gemv", "persistent"));
    cr_assert_eq(c.gemv, MC_GEMV_PERSISTENT);
    cr_assert_null(mc_config_choice(&c, "attention", "tiled"));
    cr_assert_eq(c.attention, MC_ATT_TILED);
    cr_assert_null(mc_config_choice(&c, "q8", "float"));
    cr_assert_eq(c.q8, MC_Q8_FLOAT);
    cr_assert_str_eq(mc_config_choice_name(&c, "attention"), "tiled");
    cr_assert_str_eq(mc_config_choice(&c, "q8", "x"), "auto, float, rows, int-8w, mma");
    cr_assert_null(mc_config_choice(&c, "qdot", "mma")); /* issue 28: Q4_K on gemv=mma's chain */
    cr_assert_eq(c.qdot, MC_QDOT_MMA);
    cr_assert_str_eq(mc_config_choice_name(&c, "qdot"), "mma");
    cr_assert_str_eq(mc_config_choice(&c, "qdot", "sb"), "auto, float, mma");
    cr_assert_str_eq(mc_config_choice(&c, "pdl", "1"), ""); /* not a choice key */
    cr_assert_eq(c.q8, MC_Q8_FLOAT);                        /* a refused value changes nothing */
    cr_assert_eq(c.chunk, MC_CHUNK_MMA); /* issue 28: the tensor-core chunk GEMV by default */
    cr_assert_null(mc_config_choice(&c, "chunk", "fma"));
    cr_assert_eq(c.chunk, MC_CHUNK_FMA);
    cr_assert_str_eq(mc_config_choice_name(&c, "chunk"), "fma");
    cr_assert_null(mc_config_choice(&c, "chunk", "mma-kq")); /* mma's old name */
    cr_assert_eq(c.chunk, MC_CHUNK_MMA_KQ);
    cr_assert_str_eq(mc_config_choice_name(&c, "chunk"), "mma-kq");
    cr_assert_null(mc_config_choice(&c, "chunk", "mma-q8")); /* the K-quant layers as single steps */
    cr_assert_eq(c.chunk, MC_CHUNK_MMA_Q8);
    cr_assert_str_eq(mc_config_choice_name(&c, "chunk"), "mma-q8");
    cr_assert_null(mc_config_choice(&c, "chunk", "mma-opt")); /* the kernels' forms of fewer stalls */
    cr_assert_eq(c.chunk, MC_CHUNK_MMA_OPT);
    cr_assert_str_eq(mc_config_choice_name(&c, "chunk"), "mma-opt");
    cr_assert_str_eq(mc_config_choice(&c, "chunk", "fault"), "mma, fma, mma-kq, mma-q8, mma-opt"); /* the checks' fault: no key */
    c.chunk = MC_CHUNK_MMA_FAULT;
    cr_assert_null(mc_config_choice_name(&c, "chunk"));
}

/* gemv=mma and mma2 (issue 28): the values parse and name themselves, and the column parts of the
 * MMA chain are a function of the shape alone, with the values the device check and the recorded
 * figures were taken with (llama-8b's and llama-1b's matrices). */
Test(cuda_arm_keys, gemv_mma_values_and_parts) {
    mc_config c = mc_config_default;
    cr_assert_null(mc_config_choice(&c, "gemv", "mma"));
    cr_assert_eq(c.gemv, MC_GEMV_MMA);
    cr_assert_str_eq(mc_config_choice_name(&c, "gemv"), "mma");
    cr_assert_null(mc_config_choice(&c, "gemv", "mma2"));
    cr_assert_eq(c.gemv, MC_GEMV_MMA2);
    cr_assert_str_eq(mc_config_choice_name(&c, "gemv"), "mma2");
    cr_assert_str_eq(mc_config_choice(&c, "gemv", "mma3"), "auto, rowgroup, persistent, mma, mma2");
    static const uint32_t parts[][3] = {
        {6144, 4096, 4},  {4096, 4096, 8}, {28672, 4096, 1}, {4096, 14336, 8}, {128256, 4096, 1}, /* 8B */
        {3072, 2048, 8},  {2048, 2048, 8}, {16384, 2048, 2}, {2048, 8192, 8},  {128256, 2048, 1}, /* 1b */
        {37, 264, 2},     {64, 72, 1},     {40000, 256, 1},  {1, 8, 1},                           /* edges */
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        cr_assert_eq(mc_gemv_mma_ksplit(parts[i][0], parts[i][1]), parts[i][2], "%u x %u", parts[i][0], parts[i][1]);
}

/* Issue 30: norm=unfused (the built-in standalone RMSNorm, the path an op.rmsnorm plugin takes)
 * is taken and resolved; an op.rmsnorm plugin implies it, and the record says so; the built-in
 * by name (op.rmsnorm=builtin) leaves the default. */
Test(cuda_arm_keys, norm_key_resolves_and_op_rmsnorm_implies_unfused) {
    char buf[512];
    cr_assert_eq(resolve("cuda:norm=unfused", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert_str_eq(buf, "cuda:norm=unfused,pdl=1,trigger=115,gemv=auto,q8=auto,attention=auto,qdot=auto,kv=f32,moe_"
                          "fuse=2935,postnorm=prologue,chunk=mma,qblock=16r,qgrid=auto,experts=int-gu,mmachunk=auto,"
                          "attchunk=phased,attfold=span,attdec=block,qkvparts=merged,wait=ring,commit=head");
    cr_assert_eq(resolve("cuda:norm=fused", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert_str_eq(buf, "cuda:norm=fused,pdl=1,trigger=115,gemv=auto,q8=auto,attention=auto,qdot=auto,kv=f32,moe_"
                          "fuse=2935,postnorm=prologue,chunk=mma,qblock=16r,qgrid=auto,experts=int-gu,mmachunk=auto,"
                          "attchunk=phased,attfold=span,attdec=block,qkvparts=merged,wait=ring,commit=head");
    cr_assert_eq(resolve("cuda:op.rmsnorm=example", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert_str_eq(buf,
                     "cuda:op.rmsnorm=example,pdl=1,trigger=115,gemv=auto,q8=auto,attention=auto,norm=unfused,qdot="
                     "auto,kv=f32,moe_fuse=2935,postnorm=prologue,chunk=mma,qblock=16r,qgrid=auto,experts=int-gu,"
                     "mmachunk=auto,attchunk=phased,attfold=span,attdec=block,qkvparts=merged,wait=ring,commit=head");
    cr_assert_eq(resolve("cuda:norm=unfused,op.rmsnorm=example:eps=1", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert_str_eq(
        buf, "cuda:norm=unfused,op.rmsnorm=example:eps=1,pdl=1,trigger=115,gemv=auto,q8=auto,"
             "attention=auto,qdot=auto,kv=f32,moe_fuse=2935,postnorm=prologue,chunk=mma,qblock=16r,qgrid=auto,experts="
             "int-gu,mmachunk=auto,attchunk=phased,attfold=span,attdec=block,qkvparts=merged,wait=ring,commit=head");
    cr_assert_eq(resolve("cuda:op.rmsnorm=builtin", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert_str_eq(buf,
                     "cuda:op.rmsnorm=builtin,pdl=1,trigger=115,gemv=auto,q8=auto,attention=auto,norm=fused,qdot=auto,"
                     "kv=f32,moe_fuse=2935,postnorm=prologue,chunk=mma,qblock=16r,qgrid=auto,experts=int-gu,mmachunk="
                     "auto,attchunk=phased,attfold=span,attdec=block,qkvparts=merged,wait=ring,commit=head");
    /* an op.gemv plugin alone leaves the norm sites' key as given (its own sites run unfused) */
    cr_assert_eq(resolve("cuda:op.gemv.f32=example", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert(strstr(buf, "norm=fused"), "%s", buf);
}

/* Issue 28.3: kv=f32|f16|bf16 is taken, named in the resolved arm (f32 where not given: the
 * protocol record says which cache an arm ran), and sets the configuration the kernels and the
 * cache's allocation read (2 bytes a value for f16 and bf16). */
Test(cuda_arm_keys, kv_key_resolves_and_sets_the_storage) {
    char buf[512];
    cr_assert_eq(resolve("cuda:kv=f16", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert_str_eq(buf, "cuda:kv=f16,pdl=1,trigger=115,gemv=auto,q8=auto,attention=auto,norm=fused,qdot=auto,moe_"
                          "fuse=2935,postnorm=prologue,chunk=mma,qblock=16r,qgrid=auto,experts=int-gu,mmachunk=auto,"
                          "attchunk=phased,attfold=span,attdec=block,qkvparts=merged,wait=ring,commit=head");
    cr_assert_eq(resolve("cuda:kv=bf16,attention=unfused", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert_str_eq(buf, "cuda:kv=bf16,attention=unfused,pdl=1,trigger=115,gemv=auto,q8=auto,norm=fused,qdot=auto,moe_"
                          "fuse=2935,postnorm=prologue,chunk=mma,qblock=16r,qgrid=auto,experts=int-gu,mmachunk=auto,"
                          "attchunk=phased,attfold=span,attdec=block,qkvparts=merged,wait=ring,commit=head");
    cr_assert_eq(resolve("cuda:kv=f32", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert(strstr(buf, "kv=f32"), "%s", buf);
    mc_config c = mc_config_default;
    cr_assert_eq(c.kv, MC_KV_F32);
    cr_assert_str_eq(mc_config_choice_name(&c, "kv"), "f32");
    cr_assert_eq(mc_kv_bytes(c.kv), 4);
    cr_assert_null(mc_config_choice(&c, "kv", "f16"));
    cr_assert_eq(c.kv, MC_KV_F16);
    cr_assert_eq(mc_kv_bytes(c.kv), 2);
    cr_assert_null(mc_config_choice(&c, "kv", "bf16"));
    cr_assert_eq(c.kv, MC_KV_BF16);
    cr_assert_eq(mc_kv_bytes(c.kv), 2);
    cr_assert_str_eq(mc_config_choice_name(&c, "kv"), "bf16");
    cr_assert_str_eq(mc_config_choice(&c, "kv", "fp16"), "f32, f16, bf16, q8");
    cr_assert_eq(c.kv, MC_KV_BF16); /* a refused value changes nothing */
    /* rows: 4 and 2 bytes a value; q8 the hd / 32 blocks' f32 scales, then hd quants */
    cr_assert_eq(mc_kv_row_bytes(MC_KV_F32, 64), 256);
    cr_assert_eq(mc_kv_row_bytes(MC_KV_BF16, 64), 128);
    cr_assert_null(mc_config_choice(&c, "kv", "q8"));
    cr_assert_eq(c.kv, MC_KV_Q8);
    cr_assert_str_eq(mc_config_choice_name(&c, "kv"), "q8");
    cr_assert_eq(mc_kv_row_bytes(c.kv, 32), 36);
    cr_assert_eq(mc_kv_row_bytes(c.kv, 64), 72);
    cr_assert_eq(mc_kv_row_bytes(c.kv, 128), 144);
    cr_assert_eq(resolve("cuda:kv=q8,attention=mma", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert(strstr(buf, "kv=q8") && strstr(buf, "attention=mma"), "%s", buf);
    c.attention = MC_ATT_MMA; /* q8 is attention=mma's: its path is chosen by the attention key alone */
    cr_assert_eq(mc_attention_path(&c, 32, 8, 64, 64), MC_ATT_PATH_MMA);
}

/* The attention path with a 2-byte cache: the cluster kernel serves the same shapes; the tiled
 * kernel needs 16-byte rows of 2-byte values (head sizes a multiple of 8), else unfused. */
Test(cuda_arm_keys, attention_path_with_a_2_byte_cache) {
    mc_config c = mc_config_default;
    cr_assert_eq(mc_attention_path(&c, 32, 8, 36, 36), MC_ATT_PATH_TILED); /* f32: 16-byte rows of 4 floats */
    cr_assert_eq(mc_attention_path(&c, 32, 8, 80, 80), MC_ATT_PATH_TILED);
    for (uint32_t kv = MC_KV_F16; kv <= MC_KV_BF16; kv++) {
        c.kv = kv;
        cr_assert_eq(mc_attention_path(&c, 32, 8, 64, 64), MC_ATT_PATH_CLUSTER);
        cr_assert_eq(mc_attention_path(&c, 32, 8, 128, 128), MC_ATT_PATH_CLUSTER);
        cr_assert_eq(mc_attention_path(&c, 4, 1, 256, 256), MC_ATT_PATH_CLUSTER); /* gemma3-270m */
        cr_assert_eq(mc_attention_path(&c, 32, 8, 80, 80), MC_ATT_PATH_TILED);
        cr_assert_eq(mc_attention_path(&c, 32, 8, 36, 36), MC_ATT_PATH_UNFUSED);
        cr_assert_eq(mc_attention_path(&c, 32, 8, 80, 36), MC_ATT_PATH_UNFUSED);
    }
}

/* The attention path is a function of the shapes and the key alone. Head size 256 (gemma3-270m:
 * 4 q heads, 1 kv head) takes the cluster kernel by default (32-lane groups), the tiled kernel
 * when the key asks for it; so does G 3 up to hd 128 (smollm2-135m: 9 q heads on 3 kv heads of
 * 64; the tiled kernel before issue 27's small-model work, attention=tiled keeps it). */
Test(cuda_arm_keys, attention_path_follows_the_key) {
    mc_config c = mc_config_default;
    cr_assert_eq(mc_attention_path(&c, 32, 8, 128, 128), MC_ATT_PATH_CLUSTER); /* llama-8b */
    cr_assert_eq(mc_attention_path(&c, 32, 8, 64, 64), MC_ATT_PATH_CLUSTER);   /* llama-1b */
    cr_assert_eq(mc_attention_path(&c, 4, 1, 256, 256), MC_ATT_PATH_CLUSTER);  /* gemma3-270m */
    cr_assert_eq(mc_attention_path(&c, 8, 1, 256, 256), MC_ATT_PATH_CLUSTER);  /* G 8 */
    cr_assert_eq(mc_attention_path(&c, 32, 8, 80, 80), MC_ATT_PATH_TILED);     /* hd 80: tiled */
    cr_assert_eq(mc_attention_path(&c, 32, 2, 256, 256), MC_ATT_PATH_TILED);   /* G 16: tiled */
    cr_assert_eq(mc_attention_path(&c, 9, 3, 64, 64), MC_ATT_PATH_CLUSTER);    /* smollm2-135m: G 3 */
    cr_assert_eq(mc_attention_path(&c, 6, 2, 128, 128), MC_ATT_PATH_CLUSTER);  /* G 3 at hd 128 */
    cr_assert_eq(mc_attention_path(&c, 3, 1, 32, 32), MC_ATT_PATH_CLUSTER);    /* G 3 at hd 32 */
    cr_assert_eq(mc_attention_path(&c, 3, 1, 256, 256), MC_ATT_PATH_TILED);    /* G 3 at hd 256: tiled */
    cr_assert_eq(mc_attention_path(&c, 12, 2, 64, 64), MC_ATT_PATH_TILED);     /* G 6: tiled */
    c.attention = MC_ATT_TILED;
    cr_assert_eq(mc_attention_path(&c, 32, 8, 128, 128), MC_ATT_PATH_TILED);
    cr_assert_eq(mc_attention_path(&c, 4, 1, 256, 256), MC_ATT_PATH_TILED);
    cr_assert_eq(mc_attention_path(&c, 9, 3, 64, 64), MC_ATT_PATH_TILED); /* smollm2-135m's old path */
    c.attention = MC_ATT_UNFUSED;
    cr_assert_eq(mc_attention_path(&c, 32, 8, 128, 128), MC_ATT_PATH_UNFUSED);
}

/* Issue 28.3 (flash-decoding): attention=split is a value of the attention key, resolved in the
 * arm's text, parsed by the kernels' configuration, and takes the split path on the cluster
 * kernel's shapes (head sizes 32, 64, 128 with hd == hdv, 1, 2, 3, 4 or 8 q heads a kv head, every kv
 * type); elsewhere auto's path, as the key's description says. */
Test(cuda_arm_keys, attention_split_is_a_value_of_the_key) {
    char buf[512];
    cr_assert_eq(resolve("cuda:attention=split", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert_str_eq(buf, "cuda:attention=split,pdl=1,trigger=115,gemv=auto,q8=auto,norm=fused,qdot=auto,kv=f32,"
                          "moe_fuse=2935,postnorm=prologue,chunk=mma,qblock=16r,qgrid=auto,experts=int-gu,mmachunk="
                          "auto,attchunk=phased,attfold=span,attdec=block,qkvparts=merged,wait=ring,commit=head");
    cr_assert_eq(resolve("cuda:kv=f16,attention=split", buf, sizeof buf), MEMRA_OK, "%s", buf);
    mc_config c = mc_config_default;
    cr_assert_null(mc_config_choice(&c, "attention", "split"));
    cr_assert_eq(c.attention, MC_ATT_SPANS);
    cr_assert_str_eq(mc_config_choice_name(&c, "attention"), "split");
    cr_assert_str_eq(mc_config_choice(&c, "attention", "flash"), "auto, tiled, unfused, split, heads, cluster, mma");
    cr_assert_eq(c.attention, MC_ATT_SPANS); /* a refused value changes nothing */
    const memra_backend_vtable *vt = cuda_vt();
    bool described = false;
    for (uint32_t i = 0; i < vt->n_options; i++)
        described = described || (strcmp(vt->options[i].key, "attention") == 0 && strstr(vt->options[i].help, "split"));
    cr_assert(described, "the attention key's description names split");
    for (uint32_t kv = MC_KV_F32; kv <= MC_KV_BF16; kv++) {
        c.kv = kv;
        cr_assert_eq(mc_attention_path(&c, 32, 8, 64, 64), MC_ATT_PATH_SPLIT);   /* llama-1b */
        cr_assert_eq(mc_attention_path(&c, 32, 8, 128, 128), MC_ATT_PATH_SPLIT); /* llama-8b */
        cr_assert_eq(mc_attention_path(&c, 8, 4, 32, 32), MC_ATT_PATH_SPLIT);    /* small */
        cr_assert_eq(mc_attention_path(&c, 4, 2, 32, 32), MC_ATT_PATH_SPLIT);    /* gemma3-tiny */
        cr_assert_eq(mc_attention_path(&c, 8, 8, 64, 64), MC_ATT_PATH_SPLIT);    /* G 1 */
        cr_assert_eq(mc_attention_path(&c, 9, 3, 64, 64), MC_ATT_PATH_SPLIT);    /* G 3: smollm2-135m */
        cr_assert_eq(mc_attention_path(&c, 4, 1, 256, 256), MC_ATT_PATH_CLUSTER); /* gemma3-270m: auto's path */
        cr_assert_eq(mc_attention_path(&c, 32, 8, 80, 80), MC_ATT_PATH_TILED);
        cr_assert_eq(mc_attention_path(&c, 48, 4, 64, 64), MC_ATT_PATH_TILED); /* G 12 */
    }
    c.kv = MC_KV_F16;
    cr_assert_eq(mc_attention_path(&c, 32, 8, 36, 36), MC_ATT_PATH_UNFUSED); /* auto's too */
}

/* The split path's span arithmetic (cuda_kernels.h; the kernels call the same functions): spans
 * of MC_ATT_SPAN positions at fixed absolute positions, the window's first position, the spans a
 * query reads, the decode grid (by the capacity alone) and the partials, which the state's
 * att_partial (sized for the unfused path) holds. */
Test(cuda_arm_keys, attention_split_span_arithmetic) {
    uint32_t lo, hi;
    cr_assert_eq(MC_ATT_SPAN, 128);
    cr_assert_eq(mc_att_spans(1), 1);
    cr_assert_eq(mc_att_spans(128), 1);
    cr_assert_eq(mc_att_spans(129), 2);
    cr_assert_eq(mc_att_spans(8192), 64);
    cr_assert_eq(mc_att_split_blocks(8320), 65);
    cr_assert_eq(mc_att_split_blocks(131072), MC_ATT_SPLIT_BLOCKS);
    cr_assert_eq(mc_att_split_blocks(100), 1);
    cr_assert_eq(mc_att_first_position(0, 7899), 0);
    cr_assert_eq(mc_att_first_position(8, 7), 0); /* inside the window */
    cr_assert_eq(mc_att_first_position(8, 8), 1); /* [1, 8]: 8 positions */
    cr_assert_eq(mc_att_first_position(512, 7899), 7388);
    mc_att_span_range(0, 0, &lo, &hi);
    cr_assert(lo == 0 && hi == 0);
    mc_att_span_range(0, 127, &lo, &hi);
    cr_assert(lo == 0 && hi == 0);
    mc_att_span_range(0, 128, &lo, &hi);
    cr_assert(lo == 0 && hi == 1);
    mc_att_span_range(0, 7899, &lo, &hi);
    cr_assert(lo == 0 && hi == 61, "%u %u", lo, hi);
    mc_att_span_range(8, 130, &lo, &hi); /* [123, 130]: across the boundary at 128 */
    cr_assert(lo == 0 && hi == 1, "%u %u", lo, hi);
    mc_att_span_range(8, 200, &lo, &hi); /* [193, 200] */
    cr_assert(lo == 1 && hi == 1, "%u %u", lo, hi);
    mc_att_span_range(512, 7899, &lo, &hi); /* [7388, 7899] */
    cr_assert(lo == 57 && hi == 61, "%u %u", lo, hi);
    /* the same spans whatever the capacity: only the grid and the partials' stride follow it */
    for (uint32_t cap = 1; cap <= 20000; cap += 97) {
        const uint32_t n_head = 32, hd = 64;
        cr_assert_leq(mc_att_split_partial_floats(n_head, hd, cap), mc_att_partial_floats(n_head, hd, cap), "%u", cap);
        cr_assert_geq(mc_att_spans(cap) * MC_ATT_SPAN, cap);
        cr_assert_lt((mc_att_spans(cap) - 1) * MC_ATT_SPAN, cap);
    }
}

/* Issue 31.7: on a machine without a GPU (or whose driver is not loaded), asking the cuda backend
 * for its devices says so first, before CUDA's own error text. Where a device is present, the
 * count is positive and there is nothing to check. */
Test(cuda_arm_keys, no_gpu_is_said_in_words) {
    const memra_backend_vtable *vt = cuda_vt();
    cr_assert(vt->device_count);
    memra_options o = {0};
    memra_error err = {0};
    uint32_t n = 0;
    memra_status st = vt->device_count(NULL, &o, &n, &err);
    if (st == MEMRA_OK) {
        cr_assert_gt(n, 0);
        cr_skip_test("a CUDA device is present: the no-GPU message cannot be seen here");
    }
    cr_assert_eq(st, MEMRA_E_DEVICE, "%s", err.msg);
    cr_assert(strncmp(err.msg, "no NVIDIA GPU found (or its driver is not loaded): ", 51) == 0, "%s", err.msg);
}

/* Issue 29: moe_fuse (the mixture-of-experts launches folded together, bits 0 to 1023, never the
 * bits of the result) is taken, resolved where given and where not (55), and refused out of range. */
Test(cuda_arm_keys, moe_fuse_key_resolves) {
    char buf[512];
    cr_assert_eq(resolve("cuda:moe_fuse=0", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert_str_eq(buf, "cuda:moe_fuse=0,pdl=1,trigger=115,gemv=auto,q8=auto,attention=auto,norm=fused,qdot=auto,"
                          "kv=f32,postnorm=prologue,chunk=mma,qblock=16r,qgrid=auto,experts=int-gu,mmachunk=auto,"
                          "attchunk=phased,attfold=span,attdec=block,qkvparts=merged,wait=ring,commit=head");
    cr_assert_eq(resolve("cuda:moe_fuse=5,pdl=0", buf, sizeof buf), MEMRA_OK, "%s", buf);
    cr_assert(strstr(buf, "moe_fuse=5"), "%s", buf);
    cr_assert_eq(resolve("cuda:moe_fuse=-1", buf, sizeof buf), MEMRA_E_INVALID, "%s", buf);
    cr_assert(strstr(buf, "moe_fuse=-1"), "%s", buf);
    cr_assert_eq(resolve("cuda:moe_fuse=4095", buf, sizeof buf), MEMRA_OK, "%s", buf); /* 256 .. 1024: the router's */
    cr_assert(strstr(buf, "moe_fuse=4095"), "%s", buf);
    cr_assert_eq(MC_MOE_FUSE_ALL, 4095u);
}

/* Every choice key of the cuda arms, in one table (issues 26 to 28): the key, its default, the
 * values it takes in the order the refusal names them, a value it refuses, and the keys an arm
 * needs beside it to resolve. For each row: every value resolves and is named first in the arm's
 * text; an arm without the key resolves it to the default; the bad value is refused naming the
 * key and every value; the kernels' parser (mc_config_choice, which the kernel bench uses too)
 * takes every value and names it back, and a refused value changes nothing. A choice key the
 * backend knows but the table lacks fails the test, so a new key (or value) is listed here. */
static const struct {
    const char *key, *dflt, *values, *bad, *with;
} choice_keys[] = {
    {"gemv", "auto", "auto, rowgroup, persistent, mma, mma2", "v6", ""},
    {"q8", "auto", "auto, float, rows, int-8w, mma", "int", ""},
    {"attention", "auto", "auto, tiled, unfused, split, heads, cluster, mma", "flash", ""},
    {"norm", "fused", "fused, unfused", "split", ""},
    {"qdot", "auto", "auto, float, mma", "sb", ""},
    {"kv", "f32", "f32, f16, bf16, q8", "f8", ""},
    {"postnorm", "prologue", "fused, launch, prologue", "LAUNCH", ""},
    {"chunk", "mma", "mma, fma, mma-kq, mma-q8, mma-opt", "dp4a", ""},
    {"qblock", "16r", "auto, 16, 4, 16x, 16r, 16xr", "8", ""},
    {"qgrid", "auto", "auto, need, fill", "full", ""},
    {"experts", "int-gu", "float, int, int-gu", "fp8", ""},
    {"mmachunk", "auto", "auto, sync, wgmma", "fast", "gemv=mma,"},
    {"attchunk", "phased", "phased, rows", "tiles", ""},
    {"attfold", "span", "span, tier", "tiers", "attention=mma,"},
    {"attdec", "block", "block, warp", "warps", "attention=mma,"},
    {"qkvparts", "merged", "merged, apart", "fused", ""},
    {"wait", "ring", "ring, event, word", "spin", ""},
    {"commit", "head", "launch, sampler, handoff, head", "embed", ""},
};

Test(cuda_arm_keys, every_choice_key_resolves_refuses_and_parses) {
    char buf[512], arm[160], want[200], dflt[512];
    cr_assert_eq(resolve("cuda", dflt, sizeof dflt - 1), MEMRA_OK, "%s", dflt);
    strcat(dflt, ","); /* every key=value of the default arm now ends in a comma */
    for (size_t k = 0; k < sizeof choice_keys / sizeof choice_keys[0]; k++) {
        const char *key = choice_keys[k].key;
        mc_config c = mc_config_default;
        cr_assert_str_eq(mc_config_choice_name(&c, key), choice_keys[k].dflt, "%s's default", key);
        snprintf(want, sizeof want, ",%s=%s,", key, choice_keys[k].dflt);
        cr_assert(strstr(dflt, want) || strncmp(dflt + strlen("cuda:"), want + 1, strlen(want + 1)) == 0,
                  "%s: '%s' lacks %s", key, dflt, want);
        char vals[160];
        snprintf(vals, sizeof vals, "%s", choice_keys[k].values);
        uint32_t n = 0;
        for (char *v = strtok(vals, ", "); v; v = strtok(NULL, ", "), n++) {
            for (int graph = 0; graph < 2; graph++) { /* both backends of the plugin take it */
                const char *be = graph ? "cuda-graph" : "cuda";
                snprintf(arm, sizeof arm, "%s:%s%s=%s", be, choice_keys[k].with, key, v);
                cr_assert_eq(resolve(arm, buf, sizeof buf), MEMRA_OK, "%s: %s", arm, buf);
                snprintf(want, sizeof want, "%s,", arm);
                cr_assert(strncmp(buf, want, strlen(want)) == 0, "%s resolved to '%s'", arm, buf);
            }
            cr_assert_null(mc_config_choice(&c, key, v), "%s=%s", key, v);
            cr_assert_str_eq(mc_config_choice_name(&c, key), v);
        }
        cr_assert_geq(n, 2, "%s has one value", key);
        snprintf(arm, sizeof arm, "cuda:%s%s=%s", choice_keys[k].with, key, choice_keys[k].bad);
        cr_assert_eq(resolve(arm, buf, sizeof buf), MEMRA_E_INVALID, "%s resolved: %s", arm, buf);
        snprintf(want, sizeof want, "%s=%s: expected one of %s", key, choice_keys[k].bad, choice_keys[k].values);
        cr_assert(strstr(buf, want), "%s: got '%s', want '%s'", arm, buf, want);
        const char *last = mc_config_choice_name(&c, key);
        cr_assert_str_eq(mc_config_choice(&c, key, choice_keys[k].bad), choice_keys[k].values);
        cr_assert_str_eq(mc_config_choice_name(&c, key), last, "a refused %s changed the configuration", key);
    }
    /* the other way: every key the backend's parser takes as a choice is a row above */
    const memra_backend_vtable *vt = cuda_vt();
    uint32_t found = 0;
    for (uint32_t i = 0; i < vt->n_options; i++) {
        mc_config c = mc_config_default;
        if (!*mc_config_choice(&c, vt->options[i].key, "\x01")) /* "": not a choice key */
            continue;
        bool listed = false;
        for (size_t k = 0; k < sizeof choice_keys / sizeof choice_keys[0]; k++)
            listed = listed || strcmp(choice_keys[k].key, vt->options[i].key) == 0;
        cr_assert(listed, "the choice key %s is not in choice_keys", vt->options[i].key);
        found++;
    }
    cr_assert_eq(found, sizeof choice_keys / sizeof choice_keys[0]);
}

/* What some choice keys mean beyond their names. postnorm's description names its values. */
Test(cuda_arm_keys, postnorm_is_described) {
    const memra_backend_vtable *vt = cuda_vt();
    bool described = false;
    for (uint32_t i = 0; i < vt->n_options; i++)
        described = described || (strcmp(vt->options[i].key, "postnorm") == 0 && strstr(vt->options[i].help, "launch") &&
                                  strstr(vt->options[i].help, "prologue"));
    cr_assert(described, "the postnorm key's description names its values");
}

/* Issue 26: qgrid=auto fills the grid on Q4_0..Q5_1 matrices wider than MC_QBLOCK_COLS only, and
 * on Q4_K..Q6_K matrices of any width (fortieth session); need and fill as they say, both families. */
Test(cuda_arm_keys, qgrid_auto_fills_wide_and_kquant_matrices) {
    mc_config c = mc_config_default;
    for (int kq = 0; kq < 2; kq++) {
        cr_assert(mc_qgrid_fills(c.qgrid, 4096, kq)); /* llama-8b's q/k/v, wo, gate/up, down */
        cr_assert(mc_qgrid_fills(c.qgrid, 14336, kq));
    }
    cr_assert(!mc_qgrid_fills(c.qgrid, 2048, 0)); /* llama-1b, gemma3-270m, SmolLM2 Q4_0..Q5_1: the grid before */
    cr_assert(!mc_qgrid_fills(c.qgrid, 576, 0));
    cr_assert(mc_qgrid_fills(c.qgrid, 2048, 1)); /* gemma3-270m's Q4_K and Q6_K wo and down */
    cr_assert(mc_qgrid_fills(c.qgrid, 1024, 1));
    cr_assert_null(mc_config_choice(&c, "qgrid", "need"));
    for (int kq = 0; kq < 2; kq++) {
        cr_assert(!mc_qgrid_fills(c.qgrid, 4096, kq));
        cr_assert(!mc_qgrid_fills(c.qgrid, 1024, kq));
    }
    cr_assert_null(mc_config_choice(&c, "qgrid", "fill"));
    for (int kq = 0; kq < 2; kq++)
        cr_assert(mc_qgrid_fills(c.qgrid, 576, kq));
}

/* Issue 29: mc_experts_int takes only Q8_0 stacks of whole blocks, and only under experts=int (both
 * projections) or int-gu (the gate/up alone: the default), never under float. */
Test(cuda_arm_keys, experts_int_takes_q8_0_stacks_only) {
    mc_config c = mc_config_default;
    mc_matrix w;
    memset(&w, 0, sizeof w);
    w.type = MEMRA_TYPE_Q8_0, w.rows = 64, w.cols = 2048;
    cr_assert(mc_experts_int(&c, &w, MC_GLU_SILU)); /* the default, int-gu */
    cr_assert_not(mc_experts_int(&c, &w, MC_GLU_NONE));
    cr_assert_null(mc_config_choice(&c, "experts", "float"));
    cr_assert_not(mc_experts_int(&c, &w, MC_GLU_SILU));
    cr_assert_not(mc_experts_int(&c, &w, MC_GLU_NONE));
    cr_assert_null(mc_config_choice(&c, "experts", "int"));
    cr_assert(mc_experts_int(&c, &w, MC_GLU_SILU));
    cr_assert(mc_experts_int(&c, &w, MC_GLU_NONE));
    cr_assert_null(mc_config_choice(&c, "experts", "int-gu"));
    cr_assert(mc_experts_int(&c, &w, MC_GLU_SILU));
    cr_assert_not(mc_experts_int(&c, &w, MC_GLU_NONE)); /* the down keeps the float kernel (and the combine) */
    w.type = MEMRA_TYPE_BF16;
    cr_assert_not(mc_experts_int(&c, &w, MC_GLU_SILU)); /* other types keep their kernels */
    w.type = MEMRA_TYPE_Q8_0, w.cols = 40;
    cr_assert_not(mc_experts_int(&c, &w, MC_GLU_SILU)); /* not whole Q8_0 blocks */
}

/* Issue 28: attdec=warp serves attention=mma's decode except kv=q8 at head size 128 (the backend
 * refuses that arm: tests/cuda/test_cuda_refusals.c). */
Test(cuda_arm_keys, attdec_warp_serves) {
    cr_assert(mc_attention_mma_wd_serves(64, MC_KV_Q8) && mc_attention_mma_wd_serves(32, MC_KV_Q8));
    cr_assert(mc_attention_mma_wd_serves(128, MC_KV_BF16) && mc_attention_mma_wd_serves(128, MC_KV_F32));
    cr_assert(!mc_attention_mma_wd_serves(128, MC_KV_Q8));
}

/* An arm's resolved options hold every key it knows except the op plugins' (memra_arm's resolve):
 * the backend's, the core's three (placement, window, prefill) and the default placement's five
 * (stages, splits, devices, tp, ep), at most MEMRA_OPT_MAX in all. A cuda key past that limit
 * makes every cuda arm fail to open, and only on a machine with a GPU (the backend is asked for
 * a device first): this host test is where it is caught. A new choice is a value of an existing
 * key (commit=handoff) until the limit, part of the plugin ABI, grows. */
Test(cuda_arm_keys, resolved_keys_fit_the_options_list) {
    const memra_backend_vtable *vt = cuda_vt();
    uint32_t own = 0;
    for (uint32_t i = 0; i < vt->n_options; i++)
        own += strncmp(vt->options[i].key, MEMRA_OP_KEY_PREFIX, strlen(MEMRA_OP_KEY_PREFIX)) != 0;
    cr_assert_leq(own + 3 + 5, MEMRA_OPT_MAX, "%u cuda keys + 8 arm keys > %d", own, MEMRA_OPT_MAX);
}
