/* test_gguf_streamed.c: a GGUF file opened streamed (memra_gguf_open_streamed, issue 27): the same
 * metadata, tensors and model description as the file read whole, with only the metadata,
 * padding and vectors in memory; every matrix's bytes read through the source equal the whole
 * file's; the digest of a streamed load equals the whole one's; every prefix of a valid file is
 * refused as the whole reader refuses it (the metadata is read in growing pieces); and a file
 * that shrinks after it was opened is an error at the next read, not a crash. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memra/gguf.h"
#include "memra/model.h"
#include "memra/runtime.h"
#include "memra/source.h"
#include "memra/synth.h"
#include "test_files.h"

static void model_file(char *path, size_t n, const char *preset, uint32_t type) {
    tmp_file_path(path, n, "streamed.gguf");
    memra_synth_spec spec = {.preset = preset, .type = type, .seed = 3};
    memra_error err = {0};
    cr_assert_eq(memra_synth_write_file(&spec, path, &err), MEMRA_OK, "%s", err.msg);
}

Test(gguf_streamed, same_file_less_memory) {
    char path[4096];
    model_file(path, sizeof path, "small", MEMRA_TYPE_F32);
    memra_gguf *w = NULL, *s = NULL;
    memra_error e = {0};
    cr_assert_eq(memra_gguf_open(path, &w, &e), MEMRA_OK, "%s", e.msg);
    cr_assert_eq(memra_gguf_open_streamed(path, &s, &e), MEMRA_OK, "%s", e.msg);
    cr_assert_not(memra_gguf_streamed(w));
    cr_assert(memra_gguf_streamed(s));
    cr_assert(memra_source_is_file(memra_gguf_source(s)));
    cr_assert_not(memra_source_is_file(memra_gguf_source(w)));
    const uint64_t size = memra_gguf_file_size(w);
    cr_assert_eq(memra_gguf_file_size(s), size);
    cr_assert_eq(memra_gguf_resident_bytes(w), size);
    cr_assert_lt(memra_gguf_resident_bytes(s), size / 4, "streamed keeps %llu of %llu bytes",
                 (unsigned long long)memra_gguf_resident_bytes(s), (unsigned long long)size);
    cr_assert_eq(memra_gguf_kv_count(s), memra_gguf_kv_count(w));
    cr_assert_eq(memra_gguf_tensor_count(s), memra_gguf_tensor_count(w));
    uint64_t streamed_matrices = 0;
    for (uint64_t i = 0; i < memra_gguf_tensor_count(w); i++) {
        const memra_gguf_tensor *a = memra_gguf_tensor_at(w, i), *b = memra_gguf_tensor_at(s, i);
        cr_assert_str_eq(a->name, b->name);
        cr_assert_eq(a->offset, b->offset);
        cr_assert_eq(a->n_bytes, b->n_bytes);
        uint64_t off = 0;
        cr_assert(memra_source_offset_of(memra_gguf_source(s), b->data, b->n_bytes, &off));
        cr_assert_eq(off, memra_gguf_data_offset(s) + b->offset);
        uint8_t *buf = malloc(b->n_bytes);
        cr_assert_not_null(buf);
        cr_assert_eq(memra_source_read(memra_gguf_source(s), off, b->n_bytes, buf, &e), MEMRA_OK, "%s", e.msg);
        cr_assert_eq(memcmp(buf, a->data, a->n_bytes), 0, "tensor '%s' read through the source differs", a->name);
        if (memra_gguf_tensor_resident(s, b))
            cr_assert_eq(memcmp(b->data, a->data, a->n_bytes), 0, "resident '%s' differs", a->name);
        else
            streamed_matrices++;
        free(buf);
    }
    cr_assert_gt(streamed_matrices, 0);
    /* The description binds the same tensors at the same offsets; vectors are readable. */
    memra_model *mw = NULL, *ms = NULL;
    cr_assert_eq(memra_model_describe(w, &mw, &e), MEMRA_OK, "%s", e.msg);
    cr_assert_eq(memra_model_describe(s, &ms, &e), MEMRA_OK, "%s", e.msg);
    cr_assert(ms->streamed && !mw->streamed);
    cr_assert_eq(ms->n_layer, mw->n_layer);
    cr_assert_eq(ms->weight_bytes, mw->weight_bytes);
    cr_assert_eq(memcmp(ms->layers[0].attn_norm.data, mw->layers[0].attn_norm.data, ms->layers[0].attn_norm.n_bytes), 0);
    memra_model_free(mw);
    memra_model_free(ms);
    memra_gguf_close(w);
    memra_gguf_close(s);
    unlink(path);
}

/* The gate's model digest: the same for a streamed load as for the whole one (read through the
 * descriptor), and a file changed since the streamed open is refused instead of hashed. */
Test(gguf_streamed, digest_matches_and_refuses_a_changed_file) {
    char path[4096];
    model_file(path, sizeof path, "tiny", MEMRA_TYPE_Q8_0);
    memra_loaded_model *w = NULL, *s = NULL;
    memra_error e = {0};
    cr_assert_eq(memra_model_load_mode(path, NULL, 0, 1, MEMRA_LOAD_WHOLE, &w, &e), MEMRA_OK, "%s", e.msg);
    cr_assert_eq(memra_model_load_mode(path, NULL, 0, 1, MEMRA_LOAD_STREAMED, &s, &e), MEMRA_OK, "%s", e.msg);
    uint8_t dw[32], ds[32];
    cr_assert_eq(memra_model_digest(w, dw, &e), MEMRA_OK, "%s", e.msg);
    cr_assert_eq(memra_model_digest(s, ds, &e), MEMRA_OK, "%s", e.msg);
    cr_assert_eq(memcmp(dw, ds, 32), 0);
    cr_assert_eq(truncate(path, (off_t)memra_gguf_file_size(s->gguf) - 1), 0);
    cr_assert_eq(memra_model_digest(s, ds, &e), MEMRA_E_IO);
    cr_assert(strstr(e.msg, "streamed.gguf") && (strstr(e.msg, "shrank") || strstr(e.msg, "changed")), "%s", e.msg);
    cr_assert_eq(memra_model_digest(w, ds, &e), MEMRA_OK, "the whole load never looks at the file again");
    cr_assert_eq(memcmp(dw, ds, 32), 0);
    memra_model_unload(w);
    memra_model_unload(s);
    unlink(path);
}

/* Every prefix of a valid model file, opened streamed, is refused cleanly (the metadata is read
 * in growing pieces: a cut anywhere must read as the whole reader reads it), and so is a file
 * cut to 64 bytes after it was opened, at the next read of a matrix. */
Test(gguf_streamed, every_prefix_refused_and_a_cut_after_open, .timeout = 120) {
    char path[4096], cut[4096];
    model_file(path, sizeof path, "small", MEMRA_TYPE_Q8_0); /* metadata past the first 64 KiB read */
    size_t len = 0;
    char *bytes = file_slurp(path, &len);
    memra_gguf *g = NULL;
    memra_error e = {0};
    cr_assert_eq(memra_gguf_open_streamed(path, &g, &e), MEMRA_OK, "%s", e.msg);
    const uint64_t meta = memra_gguf_data_offset(g);
    cr_assert_gt(meta, 64u << 10, "the metadata must outgrow the first piece read");
    memra_gguf_close(g);
    tmp_file_path(cut, sizeof cut, "cut.gguf");
    for (size_t n = 0; n < meta + 64; n += n < 256 ? 1 : 997) {
        FILE *f = fopen(cut, "wb");
        cr_assert_not_null(f);
        cr_assert_eq(fwrite(bytes, 1, n, f), n);
        cr_assert_eq(fclose(f), 0);
        memra_gguf *w = NULL, *s = NULL;
        memra_error ew = {0}, es = {0};
        memra_status sw = memra_gguf_open(cut, &w, &ew), ss = memra_gguf_open_streamed(cut, &s, &es);
        cr_assert_neq(ss, MEMRA_OK, "a %zu-byte prefix opened streamed", n);
        cr_assert_eq(ss, sw, "prefix %zu: streamed %d, whole %d: %s / %s", n, ss, sw, es.msg, ew.msg);
        cr_assert_str_eq(es.msg, ew.msg, "prefix %zu", n);
    }
    unlink(cut);
    cr_assert_eq(memra_gguf_open_streamed(path, &g, &e), MEMRA_OK, "%s", e.msg);
    cr_assert_eq(truncate(path, 64), 0);
    const memra_gguf_tensor *t = memra_gguf_find_tensor(g, "token_embd.weight");
    cr_assert_not_null(t);
    uint64_t off = 0;
    cr_assert(memra_source_offset_of(memra_gguf_source(g), t->data, t->n_bytes, &off));
    void *buf = malloc(t->n_bytes);
    cr_assert_eq(memra_source_read(memra_gguf_source(g), off, t->n_bytes, buf, &e), MEMRA_E_IO);
    cr_assert(strstr(e.msg, "streamed.gguf: the file ended at byte"), "%s", e.msg);
    free(buf);
    memra_gguf_close(g);
    free(bytes);
    unlink(path);
}
