/* runtime.c: loading a model (file or in-memory preset), the one path that memra run, memra bench
 * and memra-gate share. Opening an arm on it is arm.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memra/digest.h"
#include "memra/runtime.h"
#include "memra/synth.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

memra_status memra_model_load(const char *path, const char *preset, uint32_t type, uint64_t seed,
                              memra_loaded_model **out, memra_error *err) {
    return memra_model_load_mode(path, preset, type, seed, MEMRA_LOAD_WHOLE, out, err);
}

memra_status memra_model_load_mode(const char *path, const char *preset, uint32_t type, uint64_t seed,
                                   memra_load_mode mode, memra_loaded_model **out, memra_error *err) {
    const double t0 = now_s();
    if (!out)
        return memra_fail(err, MEMRA_E_INVALID, "memra_model_load: out is NULL");
    *out = NULL;
    memra_loaded_model *lm = calloc(1, sizeof *lm);
    if (!lm)
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory loading a model");
    memra_status st;
    if (path) {
        snprintf(lm->path, sizeof lm->path, "%s", path);
        snprintf(lm->label, sizeof lm->label, "%s", path);
        lm->streamed = mode == MEMRA_LOAD_STREAMED;
        st = lm->streamed ? memra_gguf_open_streamed(path, &lm->gguf, err) : memra_gguf_open(path, &lm->gguf, err);
    } else {
        memra_synth_spec spec = {.preset = preset ? preset : "tiny", .type = type, .seed = seed};
        size_t size = 0;
        st = memra_synth_build_memory(&spec, &lm->buffer, &size, err);
        if (st == MEMRA_OK) {
            snprintf(lm->label, sizeof lm->label, "preset %s (%s, seed %llu, built in memory)", spec.preset,
                     memra_synth_dtype_name(type), (unsigned long long)seed);
            st = memra_gguf_open_memory(lm->buffer, size, lm->label, &lm->gguf, err);
        }
    }
    if (st == MEMRA_OK)
        st = memra_model_describe(lm->gguf, &lm->model, err);
    if (st != MEMRA_OK) {
        memra_model_unload(lm);
        return st;
    }
    lm->open_s = now_s() - t0;
    *out = lm;
    return MEMRA_OK;
}

void memra_model_unload(memra_loaded_model *lm) {
    if (!lm)
        return;
    memra_model_free(lm->model);
    memra_gguf_close(lm->gguf);
    free(lm->buffer);
    free(lm);
}

memra_status memra_model_digest(const memra_loaded_model *lm, uint8_t out[32], memra_error *err) {
    /* The bytes in use (the mapping), not the path: a file replaced since it was opened must not
     * lend its digest to the run. Streamed: the file through its descriptor, whose identity every
     * read checks, so the bytes hashed are the bytes the backends upload. */
    if (!memra_gguf_streamed(lm->gguf)) {
        memra_sha256(memra_gguf_file_data(lm->gguf), (size_t)memra_gguf_file_size(lm->gguf), out);
        return MEMRA_OK;
    }
    const memra_source *src = memra_gguf_source(lm->gguf);
    const uint64_t size = memra_source_size(src), chunk = (uint64_t)16 << 20;
    void *buf = malloc((size_t)chunk);
    memra_sha256_ctx *ctx = memra_sha256_new();
    if (!buf || !ctx) {
        free(buf);
        memra_sha256_final(ctx, out);
        return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory to hash the file", memra_source_name(src));
    }
    memra_status st = MEMRA_OK;
    for (uint64_t at = 0; at < size && st == MEMRA_OK; at += chunk) {
        uint64_t n = size - at < chunk ? size - at : chunk;
        if ((st = memra_source_read(src, at, n, buf, err)) == MEMRA_OK)
            memra_sha256_update(ctx, buf, (size_t)n);
    }
    memra_sha256_final(ctx, out);
    free(buf);
    return st;
}
