/* test_cpu_rss.c: the cpu backend reads weights in place from the mapped file: the peak RSS of a
 * decode run stays near the file size plus the KV cache. A dequantized F32 copy of a Q8_0 model
 * would add 3.8 times the file size and fail the bound.
 *
 * The model file is written by a child process, so the writer's memory never counts here; this
 * process then maps it, opens the backend and decodes CPU_RSS_STEPS tokens. The default run uses
 * `small` (6 MiB); the slow one (CPU_RSS_PRESET=llama-1b, 1.3 GB) gives the figure that matters. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu_test_util.h"
#include "memra/synth.h"

#ifndef CPU_RSS_PRESET
#define CPU_RSS_PRESET "small"
#define CPU_RSS_STEPS 64
#endif

static void write_model(const char *path, const char *preset, uint32_t type) {
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        memra_synth_spec spec = {.preset = preset, .type = type, .seed = 1};
        memra_error err = {0};
        _exit(memra_synth_write_file(&spec, path, &err) == MEMRA_OK ? 0 : 1);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writing %s failed", path);
}

static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

Test(cpu_rss, peak_rss_near_file_size, .timeout = 600) {
    const char *dir = getenv("MEMRA_BUILD_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/cpu-rss-%s-q8_0.gguf", dir && *dir ? dir : "/tmp", CPU_RSS_PRESET);
    write_model(path, CPU_RSS_PRESET, MEMRA_TYPE_Q8_0);
    double before = peak_rss_mib();

    memra_error err = {0};
    memra_gguf *g = NULL;
    memra_model *m = NULL;
    cr_assert_eq(memra_gguf_open(path, &g, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_eq(memra_model_describe(g, &m, &err), MEMRA_OK, "%s", err.msg);
    double file_mib = memra_gguf_file_size(g) / 1048576.0;
    ct_arm arm;
    ct_arm_open(m, "threads=2", &arm);
    const uint32_t capacity = 256;
    memra_state *s = ct_state_new(&arm, capacity, 1);
    memra_backend_memory mem = {.struct_size = sizeof mem};
    cr_assert_eq(arm.cpu->memory(arm.b, &mem, &err), MEMRA_OK);
    memra_sample_cfg greedy = {.temperature = 0};
    int64_t token = 1;
    for (int i = 0; i < CPU_RSS_STEPS; i++)
        token = ct_step(&arm, s, token, &greedy, NULL);
    double peak = peak_rss_mib();
    double cache_mib = mem.cache_bytes / 1048576.0, scratch_mib = mem.scratch_bytes / 1048576.0;
    double grown = peak - before;
    fprintf(stderr,
            "cpu rss: file %.1f MiB (%s, q8_0), kv cache %.2f MiB, scratch %.2f MiB; peak RSS %.1f MiB "
            "(%.1f MiB before mapping, +%.1f MiB for the run)\n",
            file_mib, CPU_RSS_PRESET, cache_mib, scratch_mib, peak, before, grown);
    /* Mapped pages touched (<= the file), the cache, the scratch and 4 MiB of slack for the
     * allocator, the F16 table and thread stacks. */
    double bound = file_mib + cache_mib + scratch_mib + 4.0;
    cr_assert(grown <= bound, "peak RSS grew by %.1f MiB, more than %.1f MiB (file + cache + scratch + 4)", grown,
              bound);
    arm.cpu->state_free(arm.b, s);
    ct_arm_close(&arm);
    memra_model_free(m);
    memra_gguf_close(g);
    unlink(path);
}
