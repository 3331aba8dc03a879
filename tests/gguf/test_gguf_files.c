/* test_gguf_files.c: GGUF files the reader refuses or survives beyond their bytes' shapes
 * (test_gguf_malformed.c has those): files on disk (cut, missing, empty, a FIFO, cut after they
 * were opened), every prefix and every byte flip of a valid file, and memory checked before it is
 * spent. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_bytes.h"
#include "memra/gguf.h"
#include "memra/synth.h"
#include "test_files.h"

/* ---- files on disk ---- */

Test(gguf_malformed, truncated_file_on_disk) {
    gb_bytes b = {0};
    valid_one_tensor(&b);
    char path[4096];
    tmp_file_path(path, sizeof path, "malformed.gguf");
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fwrite(b.p, 1, b.n - 100, f);
    fclose(f);
    memra_gguf *g = NULL;
    memra_error e = {0};
    cr_assert_eq(memra_gguf_open(path, &g, &e), MEMRA_E_FORMAT);
    cr_assert_null(g);
    cr_assert(strncmp(e.msg, path, strlen(path)) == 0 && strstr(e.msg, ": tensor 't': data [0, +256)"), "%s", e.msg);
    unlink(path);
    gb_free(&b);
}

Test(gguf_malformed, missing_and_empty_files) {
    memra_gguf *g = NULL;
    memra_error e = {0};
    cr_assert_eq(memra_gguf_open("/nonexistent/model.gguf", &g, &e), MEMRA_E_IO);
    cr_assert(strstr(e.msg, "/nonexistent/model.gguf: cannot open: No such file or directory"), "%s", e.msg);
    cr_assert_eq(memra_gguf_open("/tmp", &g, &e), MEMRA_E_IO);
    cr_assert(strstr(e.msg, "/tmp: not a regular file"), "%s", e.msg);
    char path[4096];
    tmp_file_path(path, sizeof path, "empty.gguf");
    fclose(fopen(path, "wb"));
    cr_assert_eq(memra_gguf_open(path, &g, &e), MEMRA_E_FORMAT);
    cr_assert(strstr(e.msg, "truncated in the header (magic): the file is empty"), "%s", e.msg);
    unlink(path);
}

/* A FIFO is refused before anything blocks on it: opening one for reading waits for a writer
 * unless the reader asks not to, and no writer ever comes here (the test's timeout would fail). */
Test(gguf_malformed, fifo_refused_without_blocking, .timeout = 10) {
    char path[4096];
    tmp_file_path(path, sizeof path, "fifo");
    unlink(path);
    cr_assert_eq(mkfifo(path, 0600), 0);
    memra_gguf *g = NULL;
    memra_error e = {0};
    memra_status st = memra_gguf_open(path, &g, &e);
    unlink(path);
    cr_assert_eq(st, MEMRA_E_IO, "%s", e.msg);
    cr_assert(strstr(e.msg, "not a regular file (a FIFO)"), "%s", e.msg);
    cr_assert_eq(memra_gguf_open("/dev/zero", &g, &e), MEMRA_E_IO);
    cr_assert(strstr(e.msg, "/dev/zero: not a regular file (a character device)"), "%s", e.msg);
}

/* A model file truncated after it was opened: every tensor byte stays readable with the values
 * it had at open (a mapping of the file would kill the process with SIGBUS at the first lost
 * page, which Criterion reports as a crash). */
Test(gguf_malformed, truncated_after_open_stays_readable) {
    gb_bytes b = {0};
    gb_header(&b, 3, 1, 0);
    uint64_t ne[2] = {1024, 64}; /* 256 KiB: many pages */
    gb_tensor_info(&b, "t", 2, ne, MEMRA_TYPE_F32, 0);
    gb_pad(&b, 32);
    for (uint32_t i = 0; i < 1024 * 64; i++) {
        float v = (float)i;
        gb_put(&b, &v, 4);
    }
    char path[4096];
    tmp_file_path(path, sizeof path, "shrink.gguf");
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(b.p, 1, b.n, f), b.n);
    cr_assert_eq(fclose(f), 0);
    memra_gguf *g = NULL;
    memra_error e = {0};
    cr_assert_eq(memra_gguf_open(path, &g, &e), MEMRA_OK, "%s", e.msg);
    cr_assert_eq(truncate(path, 64), 0);
    unlink(path);
    const memra_gguf_tensor *t = memra_gguf_tensor_at(g, 0);
    const float *x = (const float *)t->data;
    double sum = 0;
    for (uint32_t i = 0; i < 1024 * 64; i++)
        sum += x[i];
    cr_assert_eq(sum, 1024.0 * 64 * (1024 * 64 - 1) / 2);
    memra_gguf_close(g);
    gb_free(&b);
}

/* ---- every prefix and every byte flip of a valid file ---- */

static void *rich_file(size_t *size) {
    memra_gguf_writer *w = NULL;
    memra_error e = {0};
    cr_assert_eq(memra_gguf_writer_new(3, 0, &w, &e), MEMRA_OK);
    memra_gguf_writer_set_str(w, "general.architecture", "llama", &e);
    memra_gguf_writer_set_u32(w, "llama.block_count", 2, &e);
    memra_gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f, &e);
    memra_gguf_writer_set_bool(w, "flag", true, &e);
    const char *toks[] = {"<s>", "</s>", "a"};
    memra_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", toks, 3, &e);
    int32_t types[] = {1, 2, 3};
    memra_gguf_writer_set_array(w, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32, 3, types, &e);
    memra_gguf_value inner = {.type = MEMRA_GGUF_ARRAY,
                              .v.arr = {.elem_type = MEMRA_GGUF_INT32, .count = 3, .data = types}};
    memra_gguf_value outer = {.type = MEMRA_GGUF_ARRAY,
                              .v.arr = {.elem_type = MEMRA_GGUF_ARRAY, .count = 1, .items = &inner}};
    memra_gguf_writer_set(w, "nested", &outer, &e);
    uint8_t data[256] = {0};
    uint64_t ne_q[2] = {32, 2};
    memra_gguf_writer_add_tensor(w, "t.f32", MEMRA_TYPE_F32, 2, ne_q, data, &e);
    memra_gguf_writer_add_tensor(w, "t.q8", MEMRA_TYPE_Q8_0, 2, ne_q, data, &e);
    cr_assert_eq(e.status, MEMRA_OK, "%s", e.msg);
    void *buf = NULL;
    cr_assert_eq(memra_gguf_writer_write_memory(w, &buf, size, &e), MEMRA_OK, "%s", e.msg);
    memra_gguf_writer_free(w);
    return buf;
}

/* Touches everything an opened file exposes, so ASan sees any pointer outside the buffer. */
static uint64_t walk(const memra_gguf *g) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < memra_gguf_kv_count(g); i++) {
        const memra_gguf_value *v = &memra_gguf_kv_at(g, i)->value;
        sum += strlen(memra_gguf_kv_at(g, i)->key);
        if (v->type == MEMRA_GGUF_STRING && v->v.str.len)
            sum += (uint8_t)v->v.str.ptr[v->v.str.len - 1];
        if (v->type == MEMRA_GGUF_ARRAY && v->v.arr.data && v->v.arr.count)
            sum += ((const uint8_t *)v->v.arr.data)[0];
    }
    for (uint64_t i = 0; i < memra_gguf_tensor_count(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        sum += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->n_bytes - 1];
    }
    return sum;
}

Test(gguf_malformed, every_prefix_is_refused) {
    size_t size = 0;
    uint8_t *full = rich_file(&size);
    memra_gguf *g = NULL;
    memra_error e = {0};
    cr_assert_eq(memra_gguf_open_memory(full, size, "full", &g, &e), MEMRA_OK, "%s", e.msg);
    uint64_t end = 0;
    for (uint64_t i = 0; i < memra_gguf_tensor_count(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        if (memra_gguf_data_offset(g) + t->offset + t->n_bytes > end)
            end = memra_gguf_data_offset(g) + t->offset + t->n_bytes;
    }
    memra_gguf_close(g);
    for (size_t n = 0; n < size; n++) {
        uint8_t *prefix = malloc(n ? n : 1);
        memcpy(prefix, full, n);
        memra_status st = memra_gguf_open_memory(prefix, n, "prefix", &g, &e);
        if (n < end) {
            cr_assert_eq(st, MEMRA_E_FORMAT, "prefix of %zu bytes: %s", n, e.msg);
            cr_assert(strstr(e.msg, "truncated in") || strstr(e.msg, "runs past the end") ||
                          strstr(e.msg, "cannot fit"),
                      "prefix of %zu bytes: %s", n, e.msg);
        } else {
            cr_assert_eq(st, MEMRA_OK, "prefix of %zu bytes holds all data: %s", n, e.msg);
            walk(g);
            memra_gguf_close(g);
        }
        free(prefix);
    }
    free(full);
}

Test(gguf_malformed, every_byte_flip_is_safe) {
    size_t size = 0;
    uint8_t *full = rich_file(&size);
    const uint8_t flips[] = {0x01, 0x80, 0xff};
    unsigned opened = 0, refused = 0;
    for (size_t i = 0; i < size; i++) {
        for (size_t f = 0; f < sizeof flips; f++) {
            uint8_t *copy = malloc(size);
            memcpy(copy, full, size);
            copy[i] ^= flips[f];
            memra_gguf *g = NULL;
            memra_error e = {0};
            memra_status st = memra_gguf_open_memory(copy, size, "flipped", &g, &e);
            if (st == MEMRA_OK) {
                opened++;
                walk(g);
                memra_gguf_close(g);
            } else {
                refused++;
                cr_assert(st == MEMRA_E_FORMAT && strncmp(e.msg, "flipped: ", 9) == 0, "byte %zu: %d %s", i, st, e.msg);
            }
            free(copy);
        }
    }
    cr_assert_gt(refused, 0);
    cr_assert_gt(opened, 0); /* flips inside the data and padding are harmless */
    free(full);
}

/* ---- memory is checked before it is spent ---- */

/* A model built in memory larger than what may still be allocated is refused up front with the
 * need and what to lower (an overcommitted malloc would be killed for memory while written). */
Test(gguf_malformed, preset_in_memory_beyond_available_memory) {
#ifndef UNDER_ASAN
    cap_memory(); /* 256 MiB above what this process uses now */
    memra_synth_spec spec = {.preset = "llama-1b", .type = MEMRA_TYPE_F32, .seed = 1}; /* ~5 GB */
    void *data = NULL;
    size_t size = 0;
    memra_error e = {0};
    cr_assert_eq(memra_synth_build_memory(&spec, &data, &size, &e), MEMRA_E_NOMEM, "%s", e.msg);
    cr_assert(strstr(e.msg, "GiB built in memory needs more than the"), "%s", e.msg);
    cr_assert(strstr(e.msg, "choose a smaller preset or dtype"), "%s", e.msg);
    cr_assert_null(data);
#endif
}

/* A model file larger than what may still be allocated is refused before it is read, naming it. */
Test(gguf_malformed, file_beyond_available_memory) {
#ifndef UNDER_ASAN
    char path[4096];
    tmp_file_path(path, sizeof path, "big.gguf");
    gb_bytes b = {0};
    valid_one_tensor(&b);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(b.p, 1, b.n, f), b.n);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(truncate(path, (off_t)1 << 30), 0); /* 1 GiB, sparse: the reader must not try */
    cap_memory();
    memra_gguf *g = NULL;
    memra_error e = {0};
    memra_status st = memra_gguf_open(path, &g, &e);
    unlink(path);
    gb_free(&b);
    cr_assert_eq(st, MEMRA_E_NOMEM, "%s", e.msg);
    cr_assert(strstr(e.msg, "are read into memory, more than the"), "%s", e.msg);
#endif
}

/* ---- memory: what the metadata needs, not only the file's size ---- */

/* A file of one key: an array of n empty strings (8 bytes each in the file, a parsed value of
 * several times that in memory). */
static void many_strings(gb_bytes *b, uint64_t n) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "tokenizer.ggml.tokens", MEMRA_GGUF_ARRAY);
    gb_u32(b, MEMRA_GGUF_STRING);
    gb_u64(b, n);
    gb_zeros(b, (size_t)n * 8);
}

/* Issue 23 item 9: the reader counts what the metadata costs in memory against what is available
 * and refuses up front, naming the key and both sizes: 4M strings are 32 MiB of file and 4M parsed
 * values in memory, more than the 96 MiB left under the cap. */
Test(gguf_malformed, metadata_larger_in_memory_than_available_refused) {
#ifdef UNDER_ASAN
    cr_skip_test("AddressSanitizer's shadow memory does not fit under an address space limit");
#endif
    gb_bytes big = {0}, fits = {0};
    many_strings(&big, 4000000);
    many_strings(&fits, 1000000);
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    cr_assert(f && fscanf(f, "%lu", &pages) == 1);
    fclose(f);
    rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (96u << 20);
    struct rlimit r = {cap, cap};
    cr_assert_eq(setrlimit(RLIMIT_AS, &r), 0);
    memra_gguf *g = NULL;
    memra_error err = {0};
    cr_assert_eq(memra_gguf_open_memory(big.p, big.n, "strings.gguf", &g, &err), MEMRA_E_NOMEM);
    cr_assert(strstr(err.msg, "strings.gguf") && strstr(err.msg, "needs more memory than is available") &&
                  strstr(err.msg, "4000000") && strstr(err.msg, "tokenizer.ggml.tokens") &&
                  strstr(err.msg, "MiB available"),
              "%s", err.msg);
    /* negative control: a quarter of it fits and opens */
    cr_assert_eq(memra_gguf_open_memory(fits.p, fits.n, "fits.gguf", &g, &err), MEMRA_OK, "%s", err.msg);
    memra_gguf_close(g);
    gb_free(&big);
    gb_free(&fits);
}
