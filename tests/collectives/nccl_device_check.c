/* nccl_device_check.c: the `nccl` collective on a GPU (ctest label gpu; a plain program, so it
 * also runs where Criterion is not installed: nccl_device_check PLUGIN_DIR). Exit 0 pass, 1 a
 * check failed (each says which), 77 skipped (no GPU or no libnccl.so.2).
 * With one GPU it checks what one device can show: two ranks on one device refused; one rank in
 * both modes: the sum's bits, the status, the epochs (eager and graph replays), a refusal cell
 * fired at its position only (summed buffer, the word on the status, disarmed after), a cell
 * armed after capture seen by a replay, a NULL position never matching, clear_refusals, growth
 * refused under capture, abort (REFUSED after, ABORTED status), bootstrap_id + create_rank. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "check_program.h"
#include "memra/plugin.h"
#include "memra/registry.h"

static int failures;
static const memra_collective_vtable *g_vt;
static memra_registry *g_reg;

typedef struct dev {
    float *buf;
    int32_t *pos, *status;
    cudaStream_t s;
} dev;

static memra_options opts1(const char *k, const char *v) {
    memra_options o;
    memset(&o, 0, sizeof o);
    if (k) {
        snprintf(o.items[0].key, sizeof o.items[0].key, "%s", k);
        snprintf(o.items[0].value, sizeof o.items[0].value, "%s", v);
        o.n = 1;
    }
    return o;
}

static int32_t read_status(const dev *d) {
    int32_t s = 0;
    CHECK_CUDA(cudaStreamSynchronize(d->s));
    CHECK_CUDA(cudaMemcpy(&s, d->status, sizeof s, cudaMemcpyDeviceToHost));
    return s;
}

static uint64_t epoch(memra_collective *c, uint32_t block) {
    uint64_t e[8] = {0};
    memra_error err = {0};
    CHECK(g_vt->epochs(c, 0, e, 8, &err) == MEMRA_OK, "epochs: %s", err.msg);
    return e[block];
}

static memra_status op(memra_collective *c, const dev *d, size_t count, uint32_t block, bool with_pos,
                       memra_error *err) {
    return g_vt->all_reduce_sum_f32(c, 0, d->buf, count, d->s, block, with_pos ? d->pos : NULL, d->status, err);
}

static void set_pos(const dev *d, int32_t p) { CHECK_CUDA(cudaMemcpy(d->pos, &p, sizeof p, cudaMemcpyHostToDevice)); }

static void one_rank(const char *mode) {
    printf("-- one rank, mode=%s\n", mode);
    memra_options o = opts1("mode", mode);
    memra_error err = {0};
    memra_collective *c = NULL;
    int32_t dev0 = 0;
    if (g_vt->create(memra_registry_host(g_reg), 1, &dev0, &o, &c, &err) != MEMRA_OK) {
        CHECK(0, "create: %s", err.msg);
        return;
    }
    const size_t count = 4099;
    dev d;
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaStreamCreateWithFlags(&d.s, cudaStreamNonBlocking));
    CHECK_CUDA(cudaMalloc((void **)&d.buf, count * sizeof(float)));
    CHECK_CUDA(cudaMalloc((void **)&d.pos, sizeof(int32_t)));
    CHECK_CUDA(cudaMalloc((void **)&d.status, sizeof(int32_t)));
    float *in = malloc(count * sizeof *in), *out = malloc(count * sizeof *out);
    for (size_t i = 0; i < count; i++)
        in[i] = ldexpf((float)((int)(i % 37) - 18), (int)(i % 7) - 3) + (i == 5 ? 1e-30f : 0.0f);
    CHECK_CUDA(cudaMemcpy(d.buf, in, count * sizeof(float), cudaMemcpyHostToDevice));
    set_pos(&d, 5);
    int32_t junk = 999;
    CHECK_CUDA(cudaMemcpy(d.status, &junk, sizeof junk, cudaMemcpyHostToDevice));

    /* Plain op: identity for one rank, status 0, epoch 1. */
    CHECK(op(c, &d, count, 3, true, &err) == MEMRA_OK, "op: %s", err.msg);
    CHECK(read_status(&d) == 0, "status after a plain op: %d", read_status(&d));
    CHECK_CUDA(cudaMemcpy(out, d.buf, count * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(memcmp(in, out, count * sizeof(float)) == 0, "one rank's sum is not its own bits");
    CHECK(epoch(c, 3) == 1 && epoch(c, 2) == 0, "epochs after one op of block 3: %llu, block 2: %llu",
          (unsigned long long)epoch(c, 3), (unsigned long long)epoch(c, 2));

    /* A refusal cell: fires at its position only, negative word with high bits, then disarmed. */
    const int32_t word = -123456789;
    CHECK(g_vt->arm_refusal(c, 0, 3, 6, word, &err) == MEMRA_OK, "arm: %s", err.msg);
    CHECK(op(c, &d, count, 3, true, &err) == MEMRA_OK, "op: %s", err.msg); /* position 5: no */
    CHECK(read_status(&d) == 0, "a cell at position 6 fired at position 5");
    set_pos(&d, 6);
    CHECK(op(c, &d, count, 2, true, &err) == MEMRA_OK, "op: %s", err.msg); /* block 2: no */
    CHECK(read_status(&d) == 0, "a cell of block 3 fired at block 2");
    CHECK(op(c, &d, count, 3, false, &err) == MEMRA_OK, "op: %s", err.msg); /* NULL position: no */
    CHECK(read_status(&d) == 0, "a cell fired with a NULL position");
    CHECK(op(c, &d, count, 3, true, &err) == MEMRA_OK, "op: %s", err.msg);
    CHECK(read_status(&d) == word, "refused status %d, expected %d", read_status(&d), word);
    CHECK_CUDA(cudaMemcpy(out, d.buf, count * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(memcmp(in, out, count * sizeof(float)) == 0, "a refused op did not leave the sum");
    CHECK(op(c, &d, count, 3, true, &err) == MEMRA_OK, "op: %s", err.msg);
    CHECK(read_status(&d) == 0, "the cell did not disarm: %d", read_status(&d));
    CHECK(epoch(c, 3) == 5 && epoch(c, 2) == 1, "epochs: block 3 %llu (want 5), block 2 %llu (want 1)",
          (unsigned long long)epoch(c, 3), (unsigned long long)epoch(c, 2));

    /* clear_refusals disarms. */
    if (MEMRA_HAS_MEMBER(g_vt, memra_collective_vtable, clear_refusals) && g_vt->clear_refusals) {
        CHECK(g_vt->arm_refusal(c, 0, 3, 6, 77, &err) == MEMRA_OK, "arm: %s", err.msg);
        CHECK(g_vt->clear_refusals(c, &err) == MEMRA_OK, "clear: %s", err.msg);
        CHECK(op(c, &d, count, 3, true, &err) == MEMRA_OK, "op: %s", err.msg);
        CHECK(read_status(&d) == 0, "a cleared cell fired");
    }
    uint64_t e0 = epoch(c, 3);

    /* Graph: two ops captured; replays advance epochs and see a cell armed after capture. */
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    CHECK_CUDA(cudaStreamBeginCapture(d.s, cudaStreamCaptureModeThreadLocal));
    memra_status s1 = op(c, &d, count, 3, true, &err);
    memra_status s2 = op(c, &d, count, 3, true, &err);
    CHECK_CUDA(cudaStreamEndCapture(d.s, &g));
    CHECK(s1 == MEMRA_OK && s2 == MEMRA_OK, "captured ops: %s", err.msg);
    CHECK_CUDA(cudaGraphInstantiateWithFlags(&x, g, 0));
    CHECK_CUDA(cudaGraphLaunch(x, d.s));
    CHECK(read_status(&d) == 0, "replay status %d", read_status(&d));
    CHECK(epoch(c, 3) == e0 + 2, "epoch after one replay of 2 ops: %llu, want %llu", (unsigned long long)epoch(c, 3),
          (unsigned long long)(e0 + 2));
    set_pos(&d, 9);
    CHECK(g_vt->arm_refusal(c, 0, 3, 9, 4242, &err) == MEMRA_OK, "arm: %s", err.msg);
    CHECK_CUDA(cudaGraphLaunch(x, d.s));
    /* The first op of the replay fires (and disarms) the cell; the second reads 0 again. */
    CHECK(read_status(&d) == 0, "second op of the replay: status %d", read_status(&d));
    CHECK_CUDA(cudaGraphLaunch(x, d.s));
    CHECK_CUDA(cudaStreamSynchronize(d.s)); /* epochs is called with nothing in flight */
    CHECK(epoch(c, 3) == e0 + 6, "epoch after three replays: %llu, want %llu", (unsigned long long)epoch(c, 3),
          (unsigned long long)(e0 + 6));
    /* One op a replay, to see the word itself. */
    cudaGraph_t g1 = NULL;
    cudaGraphExec_t x1 = NULL;
    CHECK_CUDA(cudaStreamBeginCapture(d.s, cudaStreamCaptureModeThreadLocal));
    s1 = op(c, &d, count, 3, true, &err);
    CHECK_CUDA(cudaStreamEndCapture(d.s, &g1));
    CHECK(s1 == MEMRA_OK, "captured op: %s", err.msg);
    CHECK_CUDA(cudaGraphInstantiateWithFlags(&x1, g1, 0));
    CHECK(g_vt->arm_refusal(c, 0, 3, 9, 5151, &err) == MEMRA_OK, "arm: %s", err.msg);
    CHECK_CUDA(cudaGraphLaunch(x1, d.s));
    CHECK(read_status(&d) == 5151, "a cell armed after capture: replay status %d, want 5151", read_status(&d));
    CHECK_CUDA(cudaGraphLaunch(x1, d.s));
    CHECK(read_status(&d) == 0, "the replayed cell did not disarm");
    CHECK_CUDA(cudaMemcpy(out, d.buf, count * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(memcmp(in, out, count * sizeof(float)) == 0, "replays changed one rank's bits");

    /* Growth under capture is refused with a message saying how to avoid it. */
    float *big = NULL;
    CHECK_CUDA(cudaMalloc((void **)&big, (size_t)1 << 24));
    cudaGraph_t g2 = NULL;
    CHECK_CUDA(cudaStreamBeginCapture(d.s, cudaStreamCaptureModeThreadLocal));
    memra_status sg = g_vt->all_reduce_sum_f32(c, 0, big, ((size_t)1 << 24) / 4, d.s, 3, d.pos, d.status, &err);
    (void)cudaStreamEndCapture(d.s, &g2);
    (void)cudaGetLastError();
    CHECK(sg == MEMRA_E_UNSUPPORTED && strstr(err.msg, "eagerly"), "growth under capture: %d %s", (int)sg, err.msg);
    if (g2)
        cudaGraphDestroy(g2);
    /* Eagerly it grows. */
    memset(&err, 0, sizeof err);
    CHECK(g_vt->all_reduce_sum_f32(c, 0, big, ((size_t)1 << 24) / 4, d.s, 3, d.pos, d.status, &err) == MEMRA_OK,
          "eager growth: %s", err.msg);
    CHECK(read_status(&d) == 0, "status after growth");

    /* Rank order and argument checks. */
    CHECK(g_vt->all_reduce_sum_f32(c, 1, d.buf, count, d.s, 3, d.pos, d.status, &err) == MEMRA_E_RANGE,
          "rank 1 of 1 accepted");
    CHECK(g_vt->all_reduce_sum_f32(c, 0, d.buf, count, NULL, 3, d.pos, d.status, &err) == MEMRA_E_INVALID,
          "a NULL stream accepted");
    CHECK(g_vt->all_reduce_sum_f32(c, 0, d.buf, count, d.s, 4096, d.pos, d.status, &err) == MEMRA_E_RANGE,
          "block 4096 accepted (max_blocks 4096)");

    /* Abort: later calls refused, status ABORTED, epochs still answer. */
    g_vt->abort(c);
    CHECK(op(c, &d, count, 3, true, &err) == MEMRA_E_REFUSED, "an op after abort was accepted");
    CHECK(strstr(err.msg, "aborted"), "after abort: %s", err.msg);
    CHECK(read_status(&d) == MEMRA_COLLECTIVE_ABORTED, "status after abort %d", read_status(&d));
    CHECK(g_vt->arm_refusal(c, 0, 3, 1, 5, &err) == MEMRA_E_REFUSED, "arm after abort accepted");
    (void)epoch(c, 3);
    g_vt->destroy(c);
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    cudaGraphExecDestroy(x1);
    cudaGraphDestroy(g1);
    cudaFree(big);
    cudaFree(d.buf);
    cudaFree(d.pos);
    cudaFree(d.status);
    cudaStreamDestroy(d.s);
    free(in);
    free(out);
}

static void bootstrap(void) {
    printf("-- bootstrap_id + create_rank, one rank\n");
    memra_collective_bootstrap boot = {.struct_size = sizeof boot, .n_ranks = 1, .rank = 0, .device = 0};
    memra_error err = {0};
    if (g_vt->bootstrap_id(memra_registry_host(g_reg), boot.id, sizeof boot.id, &err) != MEMRA_OK) {
        CHECK(0, "bootstrap_id: %s", err.msg);
        return;
    }
    memra_collective *c = NULL;
    if (g_vt->create_rank(memra_registry_host(g_reg), &boot, NULL, &c, &err) != MEMRA_OK) {
        CHECK(0, "create_rank: %s", err.msg);
        return;
    }
    dev d;
    CHECK_CUDA(cudaStreamCreateWithFlags(&d.s, cudaStreamNonBlocking));
    CHECK_CUDA(cudaMalloc((void **)&d.buf, 64 * sizeof(float)));
    CHECK_CUDA(cudaMalloc((void **)&d.pos, sizeof(int32_t)));
    CHECK_CUDA(cudaMalloc((void **)&d.status, sizeof(int32_t)));
    float in[64], out[64];
    for (int i = 0; i < 64; i++)
        in[i] = (float)i - 20.5f;
    CHECK_CUDA(cudaMemcpy(d.buf, in, sizeof in, cudaMemcpyHostToDevice));
    set_pos(&d, 0);
    CHECK(op(c, &d, 64, 0, true, &err) == MEMRA_OK, "op: %s", err.msg);
    CHECK(read_status(&d) == 0, "status");
    CHECK_CUDA(cudaMemcpy(out, d.buf, sizeof out, cudaMemcpyDeviceToHost));
    CHECK(memcmp(in, out, sizeof in) == 0, "create_rank's op changed one rank's bits");
    g_vt->destroy(c);
    cudaFree(d.buf);
    cudaFree(d.pos);
    cudaFree(d.status);
    cudaStreamDestroy(d.s);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] :
#ifdef COLLTEST_BUILD_PLUGIN_DIR
                               COLLTEST_BUILD_PLUGIN_DIR;
#else
                               NULL;
#endif
    if (!dir) {
        fprintf(stderr, "usage: nccl_device_check PLUGIN_DIR\n");
        return 2;
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    if (!dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL)) {
        printf("SKIP: no libnccl.so.2\n");
        return 77;
    }
    memra_error err = {0};
    const memra_plugin *p = NULL;
    if (memra_registry_open_dirs(&dir, 1, &g_reg, &err) != MEMRA_OK ||
        memra_registry_load(g_reg, "nccl", MEMRA_PLUGIN_COLLECTIVE, &p, &err) != MEMRA_OK) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return 1;
    }
    g_vt = p->collective;
    printf("-- two ranks on device 0\n");
    int32_t same[2] = {0, 0};
    memra_collective *c = NULL;
    CHECK(g_vt->create(memra_registry_host(g_reg), 2, same, NULL, &c, &err) == MEMRA_E_INVALID &&
              strstr(err.msg, "ranks 0 and 1 are both on device 0; NCCL needs one device per rank"),
          "two ranks on one device: %s", err.msg);
    one_rank("sum");
    one_rank("allgather");
    bootstrap();
    memra_registry_close(g_reg);
    printf("%s: %d check(s) failed\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
