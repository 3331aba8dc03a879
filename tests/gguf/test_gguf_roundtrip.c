/* test_gguf_roundtrip.c: the writer and the reader agree on every metadata type (scalars, arrays
 * of each scalar type, arrays of strings, arrays of arrays), on tensors of F32/F16/BF16/Q8_0 and
 * a Q4_K one, for GGUF v2 and v3, through write_memory, write_file and the fill callback; plus
 * the type tables, the typed getters and the writer's own refusals. */
#include <glob.h>

#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memra/gguf.h"
#include "test_files.h"
#include "test_status.h"

/* ---- the content every round trip writes ---- */

static const uint8_t u8s[] = {0, 1, 255};
static const int8_t i8s[] = {-128, 0, 127};
static const uint16_t u16s[] = {0, 1234, 65535};
static const int16_t i16s[] = {-32768, -1, 32767};
static const uint32_t u32s[] = {0, 7, 4000000000u};
static const int32_t i32s[] = {INT32_MIN, -5, INT32_MAX};
static const float f32s[] = {-1.5f, 0.0f, 3.25e10f};
static const uint8_t bools[] = {1, 0, 1};
static const uint64_t u64s[] = {0, 1, UINT64_MAX};
static const int64_t i64s[] = {INT64_MIN, -1, INT64_MAX};
static const double f64s[] = {3.141592653589793, -0.0, 1e300};
static const char *const strs[] = {"alpha", "", "γάμμα", "with space"};

typedef struct scalar_array {
    const char *key;
    memra_gguf_type type;
    const void *data;
    size_t elem_size;
} scalar_array;

static const scalar_array arrays[] = {
    {"arr.uint8", MEMRA_GGUF_UINT8, u8s, 1},      {"arr.int8", MEMRA_GGUF_INT8, i8s, 1},
    {"arr.uint16", MEMRA_GGUF_UINT16, u16s, 2},   {"arr.int16", MEMRA_GGUF_INT16, i16s, 2},
    {"arr.uint32", MEMRA_GGUF_UINT32, u32s, 4},   {"arr.int32", MEMRA_GGUF_INT32, i32s, 4},
    {"arr.float32", MEMRA_GGUF_FLOAT32, f32s, 4}, {"arr.bool", MEMRA_GGUF_BOOL, bools, 1},
    {"arr.uint64", MEMRA_GGUF_UINT64, u64s, 8},   {"arr.int64", MEMRA_GGUF_INT64, i64s, 8},
    {"arr.float64", MEMRA_GGUF_FLOAT64, f64s, 8},
};
#define N_ARRAYS (sizeof arrays / sizeof arrays[0])

/* Tensors: name, type, shape, bytes. */
typedef struct test_tensor {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[4];
    uint64_t n_bytes;
} test_tensor;

static const test_tensor tensors[] = {
    {"t.f32", MEMRA_TYPE_F32, 2, {8, 3, 1, 1}, 8 * 3 * 4},
    {"t.f16", MEMRA_TYPE_F16, 3, {32, 2, 2, 1}, 32 * 2 * 2 * 2},
    {"t.bf16", MEMRA_TYPE_BF16, 1, {16, 1, 1, 1}, 16 * 2},
    {"t.q8_0", MEMRA_TYPE_Q8_0, 2, {64, 3, 1, 1}, 2 * 34 * 3},
    {"t.q4_k", MEMRA_TYPE_Q4_K, 4, {512, 1, 2, 1}, 2 * 144 * 2},
};
#define N_TENSORS (sizeof tensors / sizeof tensors[0])

static uint8_t tensor_byte(size_t t, uint64_t i) { return (uint8_t)(i * 31 + t * 7 + 1); }

static void *tensor_bytes(size_t t) {
    uint8_t *p = malloc(tensors[t].n_bytes);
    for (uint64_t i = 0; i < tensors[t].n_bytes; i++)
        p[i] = tensor_byte(t, i);
    return p;
}

/* The fill callback writes the same bytes as tensor_bytes, row by row. */
typedef struct fill_log {
    uint64_t calls;
    uint64_t rows;
} fill_log;

static memra_status fill_tensor(void *user, uint64_t index, uint64_t row0, uint64_t n_rows, void *dst,
                                memra_error *err) {
    (void)err;
    fill_log *log = user;
    uint64_t row_bytes = tensors[index].n_bytes / (tensors[index].ne[1] * tensors[index].ne[2] * tensors[index].ne[3]);
    uint8_t *p = dst;
    for (uint64_t i = 0; i < n_rows * row_bytes; i++)
        p[i] = tensor_byte(index, row0 * row_bytes + i);
    log[index].calls++;
    log[index].rows += n_rows;
    return MEMRA_OK;
}

static memra_gguf_value nested_int_array(const int32_t *data, uint64_t n) {
    memra_gguf_value v = {.type = MEMRA_GGUF_ARRAY};
    v.v.arr.elem_type = MEMRA_GGUF_INT32;
    v.v.arr.count = n;
    v.v.arr.data = data;
    return v;
}

static memra_gguf_writer *build_writer(uint32_t version, uint32_t alignment, bool use_fill, fill_log *log) {
    memra_gguf_writer *w = NULL;
    OK(memra_gguf_writer_new(version, alignment, &w, err));
    memra_gguf_value v;
    v = (memra_gguf_value){.type = MEMRA_GGUF_UINT8, .v.u64 = 200};
    OK(memra_gguf_writer_set(w, "s.uint8", &v, err));
    v = (memra_gguf_value){.type = MEMRA_GGUF_INT8, .v.i64 = -100};
    OK(memra_gguf_writer_set(w, "s.int8", &v, err));
    v = (memra_gguf_value){.type = MEMRA_GGUF_UINT16, .v.u64 = 60000};
    OK(memra_gguf_writer_set(w, "s.uint16", &v, err));
    v = (memra_gguf_value){.type = MEMRA_GGUF_INT16, .v.i64 = -30000};
    OK(memra_gguf_writer_set(w, "s.int16", &v, err));
    OK(memra_gguf_writer_set_u32(w, "s.uint32", 4000000000u, err));
    OK(memra_gguf_writer_set_i32(w, "s.int32", -2000000000, err));
    OK(memra_gguf_writer_set_f32(w, "s.float32", 1.5f, err));
    OK(memra_gguf_writer_set_bool(w, "s.bool", true, err));
    OK(memra_gguf_writer_set_str(w, "s.string", "héllo, world", err));
    v = (memra_gguf_value){.type = MEMRA_GGUF_UINT64, .v.u64 = (1ull << 63) + 5};
    OK(memra_gguf_writer_set(w, "s.uint64", &v, err));
    v = (memra_gguf_value){.type = MEMRA_GGUF_INT64, .v.i64 = -(1ll << 62)};
    OK(memra_gguf_writer_set(w, "s.int64", &v, err));
    v = (memra_gguf_value){.type = MEMRA_GGUF_FLOAT64, .v.f64 = 2.718281828459045};
    OK(memra_gguf_writer_set(w, "s.float64", &v, err));
    for (size_t i = 0; i < N_ARRAYS; i++)
        OK(memra_gguf_writer_set_array(w, arrays[i].key, arrays[i].type, 3, arrays[i].data, err));
    OK(memra_gguf_writer_set_array(w, "arr.empty", MEMRA_GGUF_FLOAT32, 0, NULL, err));
    OK(memra_gguf_writer_set_str_array(w, "arr.string", strs, 4, err));

    /* arr.nested: [[1, 2], [], [3]] of int32; arr.deep: [[["x", "yz"]], []] */
    static const int32_t a12[] = {1, 2}, a3[] = {3};
    memra_gguf_value inner[3] = {nested_int_array(a12, 2), nested_int_array(NULL, 0), nested_int_array(a3, 1)};
    v = (memra_gguf_value){.type = MEMRA_GGUF_ARRAY};
    v.v.arr.elem_type = MEMRA_GGUF_ARRAY;
    v.v.arr.count = 3;
    v.v.arr.items = inner;
    OK(memra_gguf_writer_set(w, "arr.nested", &v, err));
    memra_gguf_value s2[2] = {{.type = MEMRA_GGUF_STRING, .v.str = {"x", 1}},
                              {.type = MEMRA_GGUF_STRING, .v.str = {"yz", 2}}};
    memra_gguf_value mid = {.type = MEMRA_GGUF_ARRAY,
                            .v.arr = {.elem_type = MEMRA_GGUF_STRING, .count = 2, .items = s2}};
    memra_gguf_value outer[2] = {
        {.type = MEMRA_GGUF_ARRAY, .v.arr = {.elem_type = MEMRA_GGUF_ARRAY, .count = 1, .items = &mid}},
        {.type = MEMRA_GGUF_ARRAY, .v.arr = {.elem_type = MEMRA_GGUF_ARRAY, .count = 0}}};
    v = (memra_gguf_value){.type = MEMRA_GGUF_ARRAY,
                           .v.arr = {.elem_type = MEMRA_GGUF_ARRAY, .count = 2, .items = outer}};
    OK(memra_gguf_writer_set(w, "arr.deep", &v, err));

    for (size_t t = 0; t < N_TENSORS; t++) {
        if (use_fill) {
            OK(memra_gguf_writer_add_tensor_fill(w, tensors[t].name, tensors[t].type, tensors[t].n_dims, tensors[t].ne,
                                                 fill_tensor, log, err));
        } else {
            void *data = tensor_bytes(t);
            OK(memra_gguf_writer_add_tensor(w, tensors[t].name, tensors[t].type, tensors[t].n_dims, tensors[t].ne, data,
                                            err));
            free(data);
        }
    }
    return w;
}

static const memra_gguf_value *find(const memra_gguf *g, const char *key) {
    const memra_gguf_value *v = memra_gguf_find(g, key);
    cr_assert_not_null(v, "key '%s' is missing", key);
    return v;
}

static void check_reader(const memra_gguf *g, uint32_t version, uint32_t alignment) {
    cr_assert_eq(memra_gguf_version(g), version);
    cr_assert_eq(memra_gguf_alignment(g), alignment);
    /* 12 scalars + 11 scalar arrays + empty + strings + nested + deep (+ general.alignment) */
    uint64_t n_kv = 12 + N_ARRAYS + 4 + (alignment != 32);
    cr_assert_eq(memra_gguf_kv_count(g), n_kv);
    cr_assert_eq(memra_gguf_data_offset(g) % alignment, 0);

    cr_assert_eq(find(g, "s.uint8")->type, MEMRA_GGUF_UINT8);
    cr_assert_eq(find(g, "s.uint8")->v.u64, 200);
    cr_assert_eq(find(g, "s.int8")->v.i64, -100);
    cr_assert_eq(find(g, "s.uint16")->v.u64, 60000);
    cr_assert_eq(find(g, "s.int16")->v.i64, -30000);
    cr_assert_eq(find(g, "s.uint32")->v.u64, 4000000000u);
    cr_assert_eq(find(g, "s.int32")->v.i64, -2000000000);
    cr_assert_eq(find(g, "s.float32")->v.f64, 1.5);
    cr_assert_eq(find(g, "s.bool")->type, MEMRA_GGUF_BOOL);
    cr_assert_eq(find(g, "s.bool")->v.u64, 1);
    cr_assert_eq(find(g, "s.uint64")->v.u64, (1ull << 63) + 5);
    cr_assert_eq(find(g, "s.int64")->v.i64, -(1ll << 62));
    cr_assert_eq(find(g, "s.float64")->v.f64, 2.718281828459045);
    const memra_gguf_value *s = find(g, "s.string");
    cr_assert_eq(s->type, MEMRA_GGUF_STRING);
    cr_assert_eq(s->v.str.len, strlen("héllo, world"));
    cr_assert(memcmp(s->v.str.ptr, "héllo, world", s->v.str.len) == 0);
    /* Every key in the order set. */
    cr_assert_str_eq(memra_gguf_kv_at(g, 0)->key, alignment != 32 ? "general.alignment" : "s.uint8");
    cr_assert_null(memra_gguf_kv_at(g, n_kv));

    for (size_t i = 0; i < N_ARRAYS; i++) {
        const memra_gguf_value *a = find(g, arrays[i].key);
        cr_assert_eq(a->type, MEMRA_GGUF_ARRAY);
        cr_assert_eq(a->v.arr.elem_type, arrays[i].type, "%s", arrays[i].key);
        cr_assert_eq(a->v.arr.count, 3);
        cr_assert(memcmp(a->v.arr.data, arrays[i].data, 3 * arrays[i].elem_size) == 0, "%s", arrays[i].key);
        const memra_gguf_array *arr = NULL;
        OK(memra_gguf_get_array(g, arrays[i].key, arrays[i].type, &arr, err));
        cr_assert_eq(arr, &a->v.arr);
    }
    cr_assert_eq(find(g, "arr.empty")->v.arr.count, 0);
    cr_assert_eq(find(g, "arr.empty")->v.arr.elem_type, MEMRA_GGUF_FLOAT32);

    const memra_gguf_value *sa = find(g, "arr.string");
    cr_assert_eq(sa->v.arr.elem_type, MEMRA_GGUF_STRING);
    cr_assert_eq(sa->v.arr.count, 4);
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(sa->v.arr.items[i].type, MEMRA_GGUF_STRING);
        cr_assert_eq(sa->v.arr.items[i].v.str.len, strlen(strs[i]));
        cr_assert(memcmp(sa->v.arr.items[i].v.str.ptr, strs[i], strlen(strs[i])) == 0);
    }

    const memra_gguf_value *n = find(g, "arr.nested");
    cr_assert_eq(n->v.arr.elem_type, MEMRA_GGUF_ARRAY);
    cr_assert_eq(n->v.arr.count, 3);
    const memra_gguf_value *it = n->v.arr.items;
    cr_assert_eq(it[0].v.arr.elem_type, MEMRA_GGUF_INT32);
    cr_assert_eq(it[0].v.arr.count, 2);
    int32_t x[2];
    memcpy(x, it[0].v.arr.data, sizeof x);
    cr_assert(x[0] == 1 && x[1] == 2);
    cr_assert_eq(it[1].v.arr.count, 0);
    memcpy(x, it[2].v.arr.data, 4);
    cr_assert(it[2].v.arr.count == 1 && x[0] == 3);

    const memra_gguf_value *d = find(g, "arr.deep");
    cr_assert_eq(d->v.arr.count, 2);
    const memra_gguf_value *d0 = &d->v.arr.items[0];
    cr_assert(d0->type == MEMRA_GGUF_ARRAY && d0->v.arr.elem_type == MEMRA_GGUF_ARRAY && d0->v.arr.count == 1);
    const memra_gguf_value *leaf = &d0->v.arr.items[0];
    cr_assert(leaf->v.arr.elem_type == MEMRA_GGUF_STRING && leaf->v.arr.count == 2);
    cr_assert(leaf->v.arr.items[1].v.str.len == 2 && memcmp(leaf->v.arr.items[1].v.str.ptr, "yz", 2) == 0);
    cr_assert(d->v.arr.items[1].v.arr.elem_type == MEMRA_GGUF_ARRAY && d->v.arr.items[1].v.arr.count == 0);

    cr_assert_eq(memra_gguf_tensor_count(g), N_TENSORS);
    const uint8_t *file = memra_gguf_file_data(g);
    for (size_t t = 0; t < N_TENSORS; t++) {
        const memra_gguf_tensor *ti = memra_gguf_tensor_at(g, t);
        cr_assert_str_eq(ti->name, tensors[t].name);
        cr_assert_eq(memra_gguf_find_tensor(g, tensors[t].name), ti);
        cr_assert_eq(ti->type, tensors[t].type);
        cr_assert_eq(ti->n_dims, tensors[t].n_dims);
        for (int k = 0; k < 4; k++)
            cr_assert_eq(ti->ne[k], tensors[t].ne[k], "%s ne[%d]", ti->name, k);
        cr_assert_eq(ti->n_elems, tensors[t].ne[0] * tensors[t].ne[1] * tensors[t].ne[2] * tensors[t].ne[3]);
        cr_assert_eq(ti->n_bytes, tensors[t].n_bytes, "%s: %" PRIu64 " bytes", ti->name, ti->n_bytes);
        cr_assert_eq(ti->offset % alignment, 0);
        cr_assert_eq((const uint8_t *)ti->data, file + memra_gguf_data_offset(g) + ti->offset);
        void *want = tensor_bytes(t);
        cr_assert(memcmp(ti->data, want, ti->n_bytes) == 0, "%s: data differs", ti->name);
        free(want);
    }
    cr_assert_null(memra_gguf_tensor_at(g, N_TENSORS));
    cr_assert_null(memra_gguf_find_tensor(g, "absent"));
    cr_assert_null(memra_gguf_find(g, "absent"));
    /* The Q4_K tensor is readable and sized (and memra computes with it: tests/quant). */
    cr_assert(memra_tensor_type_supported(memra_gguf_find_tensor(g, "t.q4_k")->type));
}

static void roundtrip_memory(uint32_t version, uint32_t alignment) {
    memra_gguf_writer *w = build_writer(version, alignment, false, NULL);
    void *buf = NULL;
    size_t size = 0;
    OK(memra_gguf_writer_write_memory(w, &buf, &size, err));
    memra_gguf *g = NULL;
    OK(memra_gguf_open_memory(buf, size, "roundtrip.gguf", &g, err));
    cr_assert_str_eq(memra_gguf_path(g), "roundtrip.gguf");
    cr_assert_eq(memra_gguf_file_size(g), size);
    check_reader(g, version, alignment ? alignment : 32);
    memra_gguf_close(g);
    free(buf);
    memra_gguf_writer_free(w);
}

Test(gguf_roundtrip, memory_v3) { roundtrip_memory(3, 0); }
Test(gguf_roundtrip, memory_v2) { roundtrip_memory(2, 0); }
Test(gguf_roundtrip, memory_v3_alignment_64) { roundtrip_memory(3, 64); }
Test(gguf_roundtrip, memory_v2_alignment_1) { roundtrip_memory(2, 1); }

/* A file name of this test process in the build tree (malloc'd). */
static char *temp_path(const char *name) {
    char *path = malloc(4096);
    cr_assert_not_null(path);
    tmp_file_path(path, 4096, name);
    return path;
}

/* No temporary (path.tmp.XXXXXX, the writer's mkstemp name) is left beside path. */
static void expect_no_temporary(const char *path) {
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "%s.tmp*", path);
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    cr_assert_eq(rc, GLOB_NOMATCH, "a temporary was left behind: %s", rc == 0 ? g.gl_pathv[0] : pattern);
    if (rc == 0)
        globfree(&g);
}

static void roundtrip_file(uint32_t version, bool use_fill) {
    fill_log log[N_TENSORS] = {{0}};
    memra_gguf_writer *w = build_writer(version, 0, use_fill, log);
    char *path = temp_path(use_fill ? "fill.gguf" : "file.gguf");
    OK(memra_gguf_writer_write_file(w, path, err));
    expect_no_temporary(path);
    memra_gguf *g = NULL;
    OK(memra_gguf_open(path, &g, err));
    cr_assert_str_eq(memra_gguf_path(g), path);
    check_reader(g, version, 32);
    memra_gguf_close(g);

    /* write_file and write_memory produce the same bytes. */
    void *mem = NULL;
    size_t mem_size = 0, file_size = 0;
    OK(memra_gguf_writer_write_memory(w, &mem, &mem_size, err));
    void *file = file_slurp(path, &file_size);
    cr_assert_eq(file_size, mem_size);
    cr_assert(memcmp(file, mem, mem_size) == 0);
    if (use_fill) {
        for (size_t t = 0; t < N_TENSORS; t++) /* two writes, every row once each */
            cr_assert_eq(log[t].rows, 2 * tensors[t].ne[1] * tensors[t].ne[2] * tensors[t].ne[3]);
    }
    free(file);
    free(mem);
    unlink(path);
    free(path);
    memra_gguf_writer_free(w);
}

Test(gguf_roundtrip, file_v3) { roundtrip_file(3, false); }
Test(gguf_roundtrip, file_v2) { roundtrip_file(2, false); }
Test(gguf_roundtrip, file_fill_v3) { roundtrip_file(3, true); }
Test(gguf_roundtrip, file_fill_v2) { roundtrip_file(2, true); }

/* ---- large tensors stream through fill in chunks of whole rows of about 8 MiB ---- */

typedef struct chunk_log {
    uint64_t row_bytes, n_rows, next_row, calls, max_chunk_bytes;
    bool fail_at_second;
} chunk_log;

static memra_status fill_chunks(void *user, uint64_t index, uint64_t row0, uint64_t n_rows, void *dst,
                                memra_error *err) {
    (void)index;
    chunk_log *log = user;
    cr_assert_eq(row0, log->next_row, "rows must come in order, without gaps");
    cr_assert(n_rows >= 1 && row0 + n_rows <= log->n_rows);
    if (n_rows * log->row_bytes > log->max_chunk_bytes)
        log->max_chunk_bytes = n_rows * log->row_bytes;
    log->calls++;
    if (log->fail_at_second && log->calls == 2)
        return memra_fail(err, MEMRA_E_IO, "source went away");
    float *f = dst;
    for (uint64_t i = 0; i < n_rows * log->row_bytes / 4; i++)
        f[i] = (float)(row0 * (log->row_bytes / 4) + i);
    log->next_row = row0 + n_rows;
    return MEMRA_OK;
}

static void streamed(bool to_file) {
    /* 3 MiB rows: 2 rows a chunk (6 MiB <= 8 MiB), 7 rows -> 4 calls. */
    uint64_t ne[2] = {3u << 18, 7};
    chunk_log log = {.row_bytes = 3u << 20, .n_rows = 7};
    memra_gguf_writer *w = NULL;
    OK(memra_gguf_writer_new(3, 0, &w, err));
    OK(memra_gguf_writer_add_tensor_fill(w, "big", MEMRA_TYPE_F32, 2, ne, fill_chunks, &log, err));
    void *buf = NULL;
    size_t size = 0;
    char *path = temp_path("big.gguf");
    if (to_file) {
        OK(memra_gguf_writer_write_file(w, path, err));
        buf = file_slurp(path, &size);
        unlink(path);
    } else {
        OK(memra_gguf_writer_write_memory(w, &buf, &size, err));
    }
    cr_assert_eq(log.calls, 4);
    cr_assert_eq(log.next_row, 7);
    cr_assert_eq(log.max_chunk_bytes, 6u << 20);
    memra_gguf *g = NULL;
    OK(memra_gguf_open_memory(buf, size, "big.gguf", &g, err));
    const memra_gguf_tensor *t = memra_gguf_find_tensor(g, "big");
    cr_assert_eq(t->n_bytes, 21u << 20);
    const float *f = t->data;
    for (uint64_t i = 0; i < t->n_elems; i += 4099)
        cr_assert_eq(f[i], (float)i);
    cr_assert_eq(f[t->n_elems - 1], (float)(t->n_elems - 1));
    memra_gguf_close(g);
    free(buf);
    free(path);
    memra_gguf_writer_free(w);
}

Test(gguf_roundtrip, fill_streams_whole_rows_to_memory) { streamed(false); }
Test(gguf_roundtrip, fill_streams_whole_rows_to_file) { streamed(true); }

Test(gguf_roundtrip, fill_row_larger_than_a_chunk_comes_alone) {
    /* 9 MiB rows exceed the 8 MiB chunk: one whole row a call, never part of one. */
    uint64_t ne[2] = {9u << 18, 2};
    chunk_log log = {.row_bytes = 9u << 20, .n_rows = 2};
    memra_gguf_writer *w = NULL;
    OK(memra_gguf_writer_new(3, 0, &w, err));
    OK(memra_gguf_writer_add_tensor_fill(w, "wide", MEMRA_TYPE_F32, 2, ne, fill_chunks, &log, err));
    char *path = temp_path("wide.gguf");
    OK(memra_gguf_writer_write_file(w, path, err));
    cr_assert_eq(log.calls, 2);
    cr_assert_eq(log.max_chunk_bytes, 9u << 20);
    memra_gguf *g = NULL;
    OK(memra_gguf_open(path, &g, err));
    const memra_gguf_tensor *t = memra_gguf_find_tensor(g, "wide");
    cr_assert_eq(((const float *)t->data)[t->n_elems - 1], (float)(t->n_elems - 1));
    memra_gguf_close(g);
    unlink(path);
    free(path);
    memra_gguf_writer_free(w);
}

Test(gguf_roundtrip, fill_failure_leaves_no_file) {
    uint64_t ne[2] = {3u << 18, 7};
    chunk_log log = {.row_bytes = 3u << 20, .n_rows = 7, .fail_at_second = true};
    memra_gguf_writer *w = NULL;
    OK(memra_gguf_writer_new(3, 0, &w, err));
    OK(memra_gguf_writer_add_tensor_fill(w, "big", MEMRA_TYPE_F32, 2, ne, fill_chunks, &log, err));
    char *path = temp_path("failed.gguf");
    memra_error e = {0};
    cr_assert_eq(memra_gguf_writer_write_file(w, path, &e), MEMRA_E_IO);
    cr_assert(strstr(e.msg, "tensor 'big' rows 2..4") && strstr(e.msg, "source went away"), "%s", e.msg);
    cr_assert_neq(access(path, F_OK), 0);
    expect_no_temporary(path);
    free(path);
    memra_gguf_writer_free(w);
}

Test(gguf_roundtrip, write_file_into_missing_dir_fails) {
    memra_gguf_writer *w = NULL;
    OK(memra_gguf_writer_new(3, 0, &w, err));
    memra_error e = {0};
    cr_assert_eq(memra_gguf_writer_write_file(w, "/nonexistent-dir/x.gguf", &e), MEMRA_E_IO);
    cr_assert(strstr(e.msg, "/nonexistent-dir/x.gguf: cannot create a temporary file beside it"), "%s", e.msg);
    memra_gguf_writer_free(w);
}

Test(gguf_roundtrip, empty_file_without_tensors) {
    memra_gguf_writer *w = NULL;
    OK(memra_gguf_writer_new(2, 0, &w, err));
    void *buf = NULL;
    size_t size = 0;
    OK(memra_gguf_writer_write_memory(w, &buf, &size, err));
    cr_assert_eq(size, 32); /* 24-byte header, padded */
    memra_gguf *g = NULL;
    OK(memra_gguf_open_memory(buf, size, "empty", &g, err));
    cr_assert_eq(memra_gguf_kv_count(g), 0);
    cr_assert_eq(memra_gguf_tensor_count(g), 0);
    memra_gguf_close(g);
    /* A reader accepts the same file without the padding (there is no data to align). */
    OK(memra_gguf_open_memory(buf, 24, "empty", &g, err));
    memra_gguf_close(g);
    free(buf);
    memra_gguf_writer_free(w);
}

/* ---- typed getters ---- */

static memra_gguf *getters_file(void **buf) {
    memra_gguf_writer *w = NULL;
    OK(memra_gguf_writer_new(3, 0, &w, err));
    memra_gguf_value v = {.type = MEMRA_GGUF_UINT64, .v.u64 = 1ull << 40};
    OK(memra_gguf_writer_set(w, "big", &v, err));
    v = (memra_gguf_value){.type = MEMRA_GGUF_INT16, .v.i64 = 12};
    OK(memra_gguf_writer_set(w, "small", &v, err));
    v = (memra_gguf_value){.type = MEMRA_GGUF_INT64, .v.i64 = -3};
    OK(memra_gguf_writer_set(w, "negative", &v, err));
    v = (memra_gguf_value){.type = MEMRA_GGUF_FLOAT64, .v.f64 = 0.25};
    OK(memra_gguf_writer_set(w, "f64", &v, err));
    v = (memra_gguf_value){.type = MEMRA_GGUF_FLOAT64, .v.f64 = 1e300};
    OK(memra_gguf_writer_set(w, "f64.huge", &v, err));
    OK(memra_gguf_writer_set_f32(w, "f32", -2.5f, err));
    OK(memra_gguf_writer_set_str(w, "name", "llama", err));
    OK(memra_gguf_writer_set_bool(w, "flag", false, err));
    int32_t ints[2] = {1, 2};
    OK(memra_gguf_writer_set_array(w, "ints", MEMRA_GGUF_INT32, 2, ints, err));
    size_t size = 0;
    OK(memra_gguf_writer_write_memory(w, buf, &size, err));
    memra_gguf_writer_free(w);
    memra_gguf *g = NULL;
    OK(memra_gguf_open_memory(*buf, size, "getters.gguf", &g, err));
    return g;
}

Test(gguf_getters, integers_floats_strings) {
    void *buf;
    memra_gguf *g = getters_file(&buf);
    uint64_t u64;
    uint32_t u32;
    float f;
    memra_gguf_str s;
    OK(memra_gguf_get_u64(g, "big", &u64, err));
    cr_assert_eq(u64, 1ull << 40);
    OK(memra_gguf_get_u32(g, "small", &u32, err));
    cr_assert_eq(u32, 12);
    OK(memra_gguf_get_f32(g, "f64", &f, err));
    cr_assert_eq(f, 0.25f);
    OK(memra_gguf_get_f32(g, "f32", &f, err));
    cr_assert_eq(f, -2.5f);
    OK(memra_gguf_get_str(g, "name", &s, err));
    cr_assert(s.len == 5 && memcmp(s.ptr, "llama", 5) == 0);
    memra_gguf_close(g);
    free(buf);
}

static void expect_getter_error(memra_status st, const memra_error *e, const char *want) {
    cr_assert_eq(st, MEMRA_E_FORMAT, "status %d", st);
    cr_assert(strncmp(e->msg, "getters.gguf: ", 14) == 0, "'%s'", e->msg);
    cr_assert(strstr(e->msg, want), "message '%s' lacks '%s'", e->msg, want);
}

Test(gguf_getters, refusals) {
    void *buf;
    memra_gguf *g = getters_file(&buf);
    memra_error e = {0};
    uint64_t u64;
    uint32_t u32;
    float f;
    memra_gguf_str s;
    const memra_gguf_array *a;
    expect_getter_error(memra_gguf_get_u32(g, "llama.block_count", &u32, &e), &e, "missing key 'llama.block_count'");
    expect_getter_error(memra_gguf_get_u32(g, "big", &u32, &e), &e,
                        "key 'big' is 1099511627776, which does not fit in 32 bits");
    expect_getter_error(memra_gguf_get_u64(g, "negative", &u64, &e), &e,
                        "key 'negative' is -3, expected a nonnegative integer");
    expect_getter_error(memra_gguf_get_u64(g, "name", &u64, &e), &e,
                        "key 'name' has type string, expected an unsigned integer");
    expect_getter_error(memra_gguf_get_u32(g, "flag", &u32, &e), &e,
                        "key 'flag' has type bool, expected an unsigned integer");
    expect_getter_error(memra_gguf_get_u32(g, "f32", &u32, &e), &e,
                        "key 'f32' has type float32, expected an unsigned integer");
    expect_getter_error(memra_gguf_get_f32(g, "small", &f, &e), &e,
                        "key 'small' has type int16, expected float32 or float64");
    expect_getter_error(memra_gguf_get_f32(g, "f64.huge", &f, &e), &e, "does not fit in float32");
    expect_getter_error(memra_gguf_get_str(g, "big", &s, &e), &e, "key 'big' has type uint64, expected string");
    /* A typed array read as another element type. */
    expect_getter_error(memra_gguf_get_array(g, "ints", MEMRA_GGUF_UINT32, &a, &e), &e,
                        "key 'ints' has type array of int32, expected array of uint32");
    expect_getter_error(memra_gguf_get_array(g, "ints", MEMRA_GGUF_STRING, &a, &e), &e, "expected array of string");
    expect_getter_error(memra_gguf_get_u32(g, "ints", &u32, &e), &e,
                        "key 'ints' has type array of int32, expected an unsigned integer");
    expect_getter_error(memra_gguf_get_array(g, "small", MEMRA_GGUF_INT16, &a, &e), &e,
                        "key 'small' has type int16, expected array of int16");
    memra_gguf_close(g);
    free(buf);
}

/* ---- type tables ---- */

Test(gguf_types, names_blocks_and_support) {
    struct {
        uint32_t type;
        const char *name;
        uint64_t elems, bytes;
        bool supported;
    } want[] = {
        {MEMRA_TYPE_F32, "F32", 1, 4, true},
        {MEMRA_TYPE_F16, "F16", 1, 2, true},
        {MEMRA_TYPE_BF16, "BF16", 1, 2, true},
        {MEMRA_TYPE_Q8_0, "Q8_0", 32, 34, true},
        {MEMRA_TYPE_Q4_0, "Q4_0", 32, 18, true},
        {MEMRA_TYPE_Q4_1, "Q4_1", 32, 20, true},
        {MEMRA_TYPE_Q5_0, "Q5_0", 32, 22, true},
        {MEMRA_TYPE_Q5_1, "Q5_1", 32, 24, true},
        {MEMRA_TYPE_Q8_1, "Q8_1", 32, 36, false},
        {MEMRA_TYPE_Q2_K, "Q2_K", 256, 84, false},
        {MEMRA_TYPE_Q3_K, "Q3_K", 256, 110, false},
        {MEMRA_TYPE_Q4_K, "Q4_K", 256, 144, true},
        {MEMRA_TYPE_Q5_K, "Q5_K", 256, 176, true},
        {MEMRA_TYPE_Q6_K, "Q6_K", 256, 210, true},
        {MEMRA_TYPE_Q8_K, "Q8_K", 256, 292, false},
        {MEMRA_TYPE_I8, "I8", 1, 1, false},
        {MEMRA_TYPE_I16, "I16", 1, 2, false},
        {MEMRA_TYPE_I32, "I32", 1, 4, false},
        {MEMRA_TYPE_I64, "I64", 1, 8, false},
        {MEMRA_TYPE_F64, "F64", 1, 8, false},
        {23, "IQ4_XS", 256, 136, false},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        uint64_t e = 0, b = 0;
        cr_assert_str_eq(memra_tensor_type_name(want[i].type), want[i].name);
        cr_assert(memra_tensor_type_block(want[i].type, &e, &b), "%s", want[i].name);
        cr_assert(e == want[i].elems && b == want[i].bytes, "%s: %" PRIu64 "/%" PRIu64, want[i].name, e, b);
        cr_assert_eq(memra_tensor_type_supported(want[i].type), want[i].supported, "%s", want[i].name);
    }
    uint32_t unknown[] = {4, 5, 31, 36, 40, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "type %" PRIu32, unknown[i]);
        cr_assert_str_eq(memra_tensor_type_name(unknown[i]), name);
        cr_assert_not(memra_tensor_type_block(unknown[i], NULL, NULL));
        cr_assert_not(memra_tensor_type_supported(unknown[i]));
    }
    const char *gnames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                            "bool",  "string", "array",  "uint64", "int64",  "float64"};
    for (uint32_t t = 0; t < MEMRA_GGUF_TYPE_COUNT; t++)
        cr_assert_str_eq(memra_gguf_type_name(t), gnames[t]);
    cr_assert_str_eq(memra_gguf_type_name(13), "unknown");
}

Test(gguf_types, row_bytes) {
    uint64_t n = 0;
    OK(memra_tensor_row_bytes(MEMRA_TYPE_Q8_0, 4096, &n, err));
    cr_assert_eq(n, 4096 / 32 * 34);
    OK(memra_tensor_row_bytes(MEMRA_TYPE_Q4_K, 4096, &n, err));
    cr_assert_eq(n, 16 * 144);
    memra_error e = {0};
    cr_assert_eq(memra_tensor_row_bytes(MEMRA_TYPE_Q8_0, 33, &n, &e), MEMRA_E_FORMAT);
    cr_assert(strstr(e.msg, "33 elements of type Q8_0 is not a multiple of its block of 32"), "%s", e.msg);
    cr_assert_eq(memra_tensor_row_bytes(77, 32, &n, &e), MEMRA_E_FORMAT);
    cr_assert(strstr(e.msg, "unknown tensor type 77"), "%s", e.msg);
    cr_assert_eq(memra_tensor_row_bytes(MEMRA_TYPE_F64, UINT64_MAX / 4, &n, &e), MEMRA_E_FORMAT);
    cr_assert(strstr(e.msg, "overflows"), "%s", e.msg);
}

/* ---- the writer refuses what the reader would refuse ---- */

static void expect_writer_error(memra_status st, const memra_error *e, const char *want) {
    cr_assert_neq(st, MEMRA_OK);
    cr_assert(strstr(e->msg, want), "message '%s' lacks '%s'", e->msg, want);
}

Test(gguf_writer, refusals) {
    memra_error e = {0};
    memra_gguf_writer *w = NULL;
    expect_writer_error(memra_gguf_writer_new(1, 0, &w, &e), &e, "version 1, expected 2 or 3");
    expect_writer_error(memra_gguf_writer_new(3, 48, &w, &e), &e, "alignment 48 is not a power of two");
    OK(memra_gguf_writer_new(3, 0, &w, err));
    OK(memra_gguf_writer_set_u32(w, "k", 1, err));
    expect_writer_error(memra_gguf_writer_set_u32(w, "k", 2, &e), &e, "key 'k' is already set");
    expect_writer_error(memra_gguf_writer_set_u32(w, "", 2, &e), &e, "a metadata key is empty");
    expect_writer_error(memra_gguf_writer_set_str(w, "general.alignment", "8", &e), &e,
                        "'general.alignment' must be a uint32 nonzero power of two");
    expect_writer_error(memra_gguf_writer_set_u32(w, "general.alignment", 24, &e), &e, "power of two");
    memra_gguf_value v = {.type = MEMRA_GGUF_UINT8, .v.u64 = 256};
    expect_writer_error(memra_gguf_writer_set(w, "u8", &v, &e), &e, "value 256 does not fit in uint8");
    v = (memra_gguf_value){.type = (memra_gguf_type)13};
    expect_writer_error(memra_gguf_writer_set(w, "bad", &v, &e), &e, "unknown value type 13");
    uint8_t bad_bools[] = {0, 2};
    expect_writer_error(memra_gguf_writer_set_array(w, "bools", MEMRA_GGUF_BOOL, 2, bad_bools, &e), &e,
                        "bool element 1 is not 0 or 1");
    expect_writer_error(memra_gguf_writer_set_array(w, "strs", MEMRA_GGUF_STRING, 1, bad_bools, &e), &e,
                        "set_array takes scalar elements, not string");
    uint64_t ne[2] = {32, 2};
    float data[64] = {0};
    OK(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 2, ne, data, err));
    expect_writer_error(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 2, ne, data, &e), &e,
                        "tensor 't' is already added");
    expect_writer_error(memra_gguf_writer_add_tensor(w, "u", MEMRA_TYPE_F32, 0, ne, data, &e), &e, "n_dims 0");
    expect_writer_error(memra_gguf_writer_add_tensor(w, "u", MEMRA_TYPE_F32, 5, ne, data, &e), &e, "n_dims 5");
    expect_writer_error(memra_gguf_writer_add_tensor(w, "u", 4, 2, ne, data, &e), &e, "unknown tensor type 4");
    uint64_t odd[2] = {33, 1};
    expect_writer_error(memra_gguf_writer_add_tensor(w, "u", MEMRA_TYPE_Q8_0, 2, odd, data, &e), &e,
                        "not a multiple of its block of 32");
    uint64_t zero[2] = {32, 0};
    expect_writer_error(memra_gguf_writer_add_tensor(w, "u", MEMRA_TYPE_F32, 2, zero, data, &e), &e,
                        "dimension 1 is 0");
    uint64_t huge[3] = {1u << 20, 1ull << 40, 1ull << 40};
    expect_writer_error(memra_gguf_writer_add_tensor_fill(w, "u", MEMRA_TYPE_F32, 3, huge, fill_chunks, NULL, &e), &e,
                        "overflows");
    /* The writer is still usable and writes a valid file after the refusals. */
    void *buf = NULL;
    size_t size = 0;
    OK(memra_gguf_writer_write_memory(w, &buf, &size, err));
    memra_gguf *g = NULL;
    OK(memra_gguf_open_memory(buf, size, "after-refusals", &g, err));
    cr_assert_eq(memra_gguf_kv_count(g), 1);
    cr_assert_eq(memra_gguf_tensor_count(g), 1);
    memra_gguf_close(g);
    free(buf);
    memra_gguf_writer_free(w);
}

Test(gguf_writer, alignment_key_sets_alignment) {
    memra_gguf_writer *w = NULL;
    OK(memra_gguf_writer_new(3, 0, &w, err));
    OK(memra_gguf_writer_set_u32(w, "general.alignment", 128, err));
    uint64_t ne[1] = {3};
    float data[3] = {1, 2, 3};
    OK(memra_gguf_writer_add_tensor(w, "a", MEMRA_TYPE_F32, 1, ne, data, err));
    OK(memra_gguf_writer_add_tensor(w, "b", MEMRA_TYPE_F32, 1, ne, data, err));
    void *buf = NULL;
    size_t size = 0;
    OK(memra_gguf_writer_write_memory(w, &buf, &size, err));
    memra_gguf *g = NULL;
    OK(memra_gguf_open_memory(buf, size, "aligned", &g, err));
    cr_assert_eq(memra_gguf_alignment(g), 128);
    cr_assert_eq(memra_gguf_find_tensor(g, "b")->offset, 128);
    cr_assert_eq(memra_gguf_data_offset(g) % 128, 0);
    memra_gguf_close(g);
    free(buf);
    memra_gguf_writer_free(w);
}
