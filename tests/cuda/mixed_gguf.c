/* mixed_gguf.c: writes a synthetic model whose fused matrices mix types, as Q4_K_M files do
 * (attn_v in another type than attn_q and attn_k; ffn_up in another than ffn_gate): the preset in
 * the base type, with every attn_v and ffn_up decoded to F32 (exact: the same function). The cuda
 * backend uploads q and k fused and v apart, gate and up apart (cuda_weights.cu, mc_put_fused).
 *
 *   memra_cuda_mixed_gguf PRESET DTYPE OUT.gguf
 *
 * Built twice: a plain program for the device machine, and into tests/cuda's Criterion test with
 * MEMRA_CHECK_NO_MAIN (memra_check_write_mixed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_checks.h"
#include "memra/gguf.h"
#include "memra/quant.h"
#include "memra/synth.h"

static int mixed_name(const char *n) {
    const size_t k = strlen(n);
    return (k > 14 && strcmp(n + k - 14, ".attn_v.weight") == 0) || (k > 14 && strcmp(n + k - 14, ".ffn_up.weight") == 0);
}

int memra_check_write_mixed(const char *preset, uint32_t type, const char *path, char *msg, size_t size) {
    memra_error err;
    memset(&err, 0, sizeof err);
    memra_synth_spec spec = {preset, type, 1};
    void *data = NULL;
    size_t bytes = 0;
    memra_gguf *g = NULL;
    memra_gguf_writer *w = NULL;
    int rc = 1, changed = 0;
    if (memra_synth_build_memory(&spec, &data, &bytes, &err) || memra_gguf_open_memory(data, bytes, preset, &g, &err) ||
        memra_gguf_writer_new(3, 0, &w, &err))
        goto done;
    for (uint64_t i = 0; i < memra_gguf_kv_count(g); i++) {
        const memra_gguf_kv *kv = memra_gguf_kv_at(g, i);
        if (memra_gguf_writer_set(w, kv->key, &kv->value, &err))
            goto done;
    }
    for (uint64_t i = 0; i < memra_gguf_tensor_count(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        if (!mixed_name(t->name) || t->type == MEMRA_TYPE_F32) {
            if (memra_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &err))
                goto done;
            continue;
        }
        float *f = (float *)malloc(t->n_elems * sizeof(float));
        if (!f || !memra_dequantize_row(t->type, t->data, t->n_elems, f)) {
            free(f);
            snprintf(err.msg, sizeof err.msg, "cannot decode %s", t->name);
            goto done;
        }
        const memra_status st = memra_gguf_writer_add_tensor(w, t->name, MEMRA_TYPE_F32, t->n_dims, t->ne, f, &err);
        free(f);
        if (st)
            goto done;
        changed++;
    }
    if (changed == 0) {
        snprintf(err.msg, sizeof err.msg, "no attn_v or ffn_up of another type than F32");
        goto done;
    }
    if (memra_gguf_writer_write_file(w, path, &err))
        goto done;
    rc = 0;
done:
    if (rc && msg)
        snprintf(msg, size, "mixed_gguf %s: %s", preset, err.msg);
    if (w)
        memra_gguf_writer_free(w);
    if (g)
        memra_gguf_close(g);
    free(data);
    return rc;
}

#ifndef MEMRA_CHECK_NO_MAIN
int main(int argc, char **argv) {
    uint32_t type = 0;
    memra_error err;
    if (argc != 4 || memra_synth_parse_dtype(argv[2], &type, &err)) {
        fprintf(stderr, "usage: memra_cuda_mixed_gguf PRESET DTYPE OUT.gguf\n");
        return 2;
    }
    char msg[1200];
    if (memra_check_write_mixed(argv[1], type, argv[3], msg, sizeof msg)) {
        fprintf(stderr, "%s\n", msg);
        return 3;
    }
    return 0;
}
#endif
