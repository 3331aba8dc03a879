/* fuzz_gguf.c: libFuzzer target for the GGUF reader (and, differentially, the writer).
 *
 * Each input is opened with memra_gguf_open_memory. A refusal must carry a message that starts
 * with the name. An accepted file is walked completely (every key, every array element, every
 * tensor's first and last byte) under ASan, every typed getter is called on every key, and the
 * file is copied through the writer and read back: the writer must accept what the reader
 * accepted, and the copy must read back equal. The same bytes are then opened streamed (through a
 * memfd: memra_gguf_open_streamed reads the metadata in pieces and leaves the tensor data out),
 * which must accept and refuse exactly what the memory open does, with the same status, and
 * describe the same keys, values and tensors, the resident tensors' bytes included. Any broken
 * invariant traps. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "memra/gguf.h"

#include "fuzz_check.h"

static volatile uint64_t sink_sum;

/* Reads every byte a value exposes, checking it lies inside [lo, hi). */
static void touch_value(const memra_gguf_value *v, const uint8_t *lo, const uint8_t *hi, int depth) {
    CHECK(depth <= 8);
    uint64_t sum = 0;
    if (v->type == MEMRA_GGUF_STRING) {
        const uint8_t *p = (const uint8_t *)v->v.str.ptr;
        CHECK(v->v.str.len == 0 || (p >= lo && p + v->v.str.len <= hi));
        for (uint64_t i = 0; i < v->v.str.len; i++)
            sum += p[i];
    } else if (v->type == MEMRA_GGUF_ARRAY) {
        uint64_t size = memra_gguf_scalar_size(v->v.arr.elem_type);
        if (size) {
            const uint8_t *p = v->v.arr.data;
            CHECK(v->v.arr.count == 0 || (p >= lo && p + v->v.arr.count * size <= hi));
            for (uint64_t i = 0; i < v->v.arr.count * size; i++)
                sum += p[i];
        } else {
            for (uint64_t i = 0; i < v->v.arr.count; i++) {
                CHECK(v->v.arr.items[i].type == v->v.arr.elem_type);
                touch_value(&v->v.arr.items[i], lo, hi, depth + 1);
            }
        }
    } else {
        CHECK((uint32_t)v->type < MEMRA_GGUF_TYPE_COUNT);
        sum = v->v.u64;
    }
    sink_sum += sum;
}

static bool same_float(double a, double b) { return a == b || (isnan(a) && isnan(b)) || memcmp(&a, &b, 8) == 0; }

static bool same_value(const memra_gguf_value *a, const memra_gguf_value *b) {
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case MEMRA_GGUF_STRING:
        return a->v.str.len == b->v.str.len && memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len) == 0;
    case MEMRA_GGUF_FLOAT32:
    case MEMRA_GGUF_FLOAT64: return same_float(a->v.f64, b->v.f64);
    case MEMRA_GGUF_ARRAY: break;
    default: return a->v.u64 == b->v.u64;
    }
    if (a->v.arr.elem_type != b->v.arr.elem_type || a->v.arr.count != b->v.arr.count)
        return false;
    uint64_t size = memra_gguf_scalar_size(a->v.arr.elem_type);
    if (size)
        return a->v.arr.count == 0 || memcmp(a->v.arr.data, b->v.arr.data, a->v.arr.count * size) == 0 ||
               a->v.arr.elem_type == MEMRA_GGUF_FLOAT32; /* NaN payloads may change through double */
    for (uint64_t i = 0; i < a->v.arr.count; i++)
        if (!same_value(&a->v.arr.items[i], &b->v.arr.items[i]))
            return false;
    return true;
}

static void call_getters(const memra_gguf *g, const char *key) {
    memra_error err;
    uint64_t u64;
    uint32_t u32;
    float f;
    memra_gguf_str s;
    const memra_gguf_array *a;
    memra_gguf_get_u64(g, key, &u64, &err);
    memra_gguf_get_u32(g, key, &u32, &err);
    memra_gguf_get_f32(g, key, &f, &err);
    memra_gguf_get_str(g, key, &s, &err);
    for (uint32_t t = 0; t < MEMRA_GGUF_TYPE_COUNT; t++) {
        if (memra_gguf_get_array(g, key, (memra_gguf_type)t, &a, &err) == MEMRA_OK)
            CHECK(a->elem_type == t);
    }
}

/* Copies g through the writer and reads the copy back; both must agree. */
static void rewrite(const memra_gguf *g) {
    memra_error err;
    memra_gguf_writer *w = NULL;
    CHECK(memra_gguf_writer_new(memra_gguf_version(g), 0, &w, &err) == MEMRA_OK);
    for (uint64_t i = 0; i < memra_gguf_kv_count(g); i++) {
        const memra_gguf_kv *kv = memra_gguf_kv_at(g, i);
        CHECK(memra_gguf_writer_set(w, kv->key, &kv->value, &err) == MEMRA_OK);
    }
    for (uint64_t i = 0; i < memra_gguf_tensor_count(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        CHECK(memra_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &err) == MEMRA_OK);
    }
    void *buf = NULL;
    size_t size = 0;
    CHECK(memra_gguf_writer_write_memory(w, &buf, &size, &err) == MEMRA_OK);
    memra_gguf *c = NULL;
    CHECK(memra_gguf_open_memory(buf, size, "copy", &c, &err) == MEMRA_OK);
    CHECK(memra_gguf_kv_count(c) == memra_gguf_kv_count(g));
    CHECK(memra_gguf_tensor_count(c) == memra_gguf_tensor_count(g));
    CHECK(memra_gguf_alignment(c) == memra_gguf_alignment(g));
    for (uint64_t i = 0; i < memra_gguf_kv_count(g); i++) {
        CHECK(strcmp(memra_gguf_kv_at(c, i)->key, memra_gguf_kv_at(g, i)->key) == 0);
        CHECK(same_value(&memra_gguf_kv_at(c, i)->value, &memra_gguf_kv_at(g, i)->value));
    }
    for (uint64_t i = 0; i < memra_gguf_tensor_count(g); i++) {
        const memra_gguf_tensor *a = memra_gguf_tensor_at(g, i), *b = memra_gguf_tensor_at(c, i);
        CHECK(strcmp(a->name, b->name) == 0 && a->type == b->type && a->n_bytes == b->n_bytes);
        CHECK(memcmp(a->ne, b->ne, sizeof a->ne) == 0 && memcmp(a->data, b->data, a->n_bytes) == 0);
    }
    memra_gguf_close(c);
    free(buf);
    memra_gguf_writer_free(w);
}

/* The streamed open of the same bytes agrees with the memory open (mem: its handle, NULL when it
 * refused with status want). */
static void streamed_agrees(const uint8_t *data, size_t size, memra_status want, const memra_gguf *mem) {
    int fd = memfd_create("fuzz", 0);
    if (fd < 0)
        return;
    for (size_t off = 0; off < size;) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) {
            close(fd);
            return;
        }
        off += (size_t)n;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    memra_gguf *g = NULL;
    memra_error err;
    memra_error_clear(&err);
    memra_status st = memra_gguf_open_streamed(path, &g, &err);
    CHECK(st == want);
    if (st != MEMRA_OK) {
        CHECK(g == NULL && strncmp(err.msg, path, strlen(path)) == 0);
        close(fd);
        return;
    }
    CHECK(memra_gguf_streamed(g) && memra_gguf_file_size(g) == size);
    CHECK(memra_gguf_data_offset(g) == memra_gguf_data_offset(mem) &&
          memra_gguf_alignment(g) == memra_gguf_alignment(mem));
    CHECK(memra_gguf_kv_count(g) == memra_gguf_kv_count(mem));
    for (uint64_t i = 0; i < memra_gguf_kv_count(g); i++) {
        const memra_gguf_kv *a = memra_gguf_kv_at(g, i), *b = memra_gguf_kv_at(mem, i);
        CHECK(strcmp(a->key, b->key) == 0 && same_value(&a->value, &b->value));
    }
    CHECK(memra_gguf_tensor_count(g) == memra_gguf_tensor_count(mem));
    for (uint64_t i = 0; i < memra_gguf_tensor_count(g); i++) {
        const memra_gguf_tensor *a = memra_gguf_tensor_at(g, i), *b = memra_gguf_tensor_at(mem, i);
        CHECK(strcmp(a->name, b->name) == 0 && a->type == b->type && a->offset == b->offset &&
              a->n_bytes == b->n_bytes && a->n_dims == b->n_dims);
        if (memra_gguf_tensor_resident(g, a))
            CHECK(memcmp(a->data, b->data, a->n_bytes) == 0);
    }
    memra_gguf_close(g);
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    memra_gguf *g = NULL;
    memra_error err;
    memra_error_clear(&err);
    if (memra_gguf_open_memory(data, size, "fuzz", &g, &err) != MEMRA_OK) {
        CHECK(g == NULL && err.status != MEMRA_OK && strncmp(err.msg, "fuzz: ", 6) == 0);
        streamed_agrees(data, size, err.status, NULL);
        return 0;
    }
    streamed_agrees(data, size, MEMRA_OK, g);
    const uint8_t *lo = memra_gguf_file_data(g), *hi = lo + memra_gguf_file_size(g);
    CHECK(lo == data && memra_gguf_file_size(g) == size);
    CHECK(memra_gguf_data_offset(g) <= size);
    uint32_t align = memra_gguf_alignment(g);
    CHECK(align != 0 && (align & (align - 1)) == 0);
    for (uint64_t i = 0; i < memra_gguf_kv_count(g); i++) {
        const memra_gguf_kv *kv = memra_gguf_kv_at(g, i);
        CHECK(kv->key[0] != '\0');
        CHECK(memra_gguf_find(g, kv->key) == &kv->value);
        touch_value(&kv->value, lo, hi, 0);
        call_getters(g, kv->key);
    }
    CHECK(memra_gguf_kv_at(g, memra_gguf_kv_count(g)) == NULL);
    for (uint64_t i = 0; i < memra_gguf_tensor_count(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        const uint8_t *p = t->data;
        CHECK(memra_gguf_find_tensor(g, t->name) == t);
        CHECK(t->n_dims >= 1 && t->n_dims <= MEMRA_GGUF_MAX_DIMS && t->n_bytes > 0);
        CHECK(p >= lo + memra_gguf_data_offset(g) && p + t->n_bytes <= hi && t->offset % align == 0);
        uint64_t row = 0;
        CHECK(memra_tensor_row_bytes(t->type, t->ne[0], &row, &err) == MEMRA_OK);
        CHECK(row * t->ne[1] * t->ne[2] * t->ne[3] == t->n_bytes);
        sink_sum += p[0] + p[t->n_bytes - 1];
        (void)memra_tensor_type_name(t->type);
        (void)memra_tensor_type_supported(t->type);
    }
    rewrite(g);
    memra_gguf_close(g);
    return 0;
}
