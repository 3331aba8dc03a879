/* gguf_write.c: the GGUF v2/v3 writer.
 *
 * Metadata and tensor infos are kept in memory (deep copies), in the order they were set. Tensor
 * data comes from a copied buffer or from a fill callback called in chunks of whole rows (about
 * 8 MiB a chunk), so a model larger than memory can be streamed to disk. The writer refuses what
 * the reader would refuse (duplicate keys or names, bad shapes, unknown types), so every file it
 * writes opens. Files are written to PATH.tmp and renamed, so a reader never sees half a file. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memra/fileio.h"
#include "memra/gguf.h"

#define WRITER_CHUNK_BYTES (8u << 20)
#define WRITER_MAX_DEPTH 8u /* as the reader: an array at the top level is depth 1 */

typedef struct writer_kv {
    char *key;
    memra_gguf_value value; /* strings and arrays owned */
} writer_kv;

typedef struct writer_tensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[MEMRA_GGUF_MAX_DIMS];
    uint64_t row_bytes;
    uint64_t n_rows;
    uint64_t n_bytes;
    uint64_t offset; /* in the data section, set at write time */
    void *data;      /* owned copy, or NULL when filled */
    memra_gguf_fill_fn fill;
    void *user;
} writer_tensor;

struct memra_gguf_writer {
    uint32_t version;
    uint32_t alignment;
    writer_kv *kvs;
    uint64_t n_kv, cap_kv;
    writer_tensor *tensors;
    uint64_t n_tensors, cap_tensors;
};

/* ---- values ---- */

static void value_free(memra_gguf_value *v) {
    if (v->type == MEMRA_GGUF_STRING) {
        free((char *)v->v.str.ptr);
    } else if (v->type == MEMRA_GGUF_ARRAY) {
        free((void *)v->v.arr.data);
        memra_gguf_value *items = (memra_gguf_value *)v->v.arr.items;
        for (uint64_t i = 0; items && i < v->v.arr.count; i++)
            value_free(&items[i]);
        free(items);
    }
    v->type = MEMRA_GGUF_UINT8;
}

/* A scalar value must fit its declared type (the writer does not truncate silently). */
static memra_status check_scalar(const char *key, const memra_gguf_value *v, memra_error *err) {
    uint64_t umax = 0;
    int64_t imin = 0, imax = 0;
    switch (v->type) {
    case MEMRA_GGUF_UINT8: umax = UINT8_MAX; break;
    case MEMRA_GGUF_UINT16: umax = UINT16_MAX; break;
    case MEMRA_GGUF_UINT32: umax = UINT32_MAX; break;
    case MEMRA_GGUF_UINT64: umax = UINT64_MAX; break;
    case MEMRA_GGUF_BOOL: umax = 1; break;
    case MEMRA_GGUF_INT8: imin = INT8_MIN, imax = INT8_MAX; break;
    case MEMRA_GGUF_INT16: imin = INT16_MIN, imax = INT16_MAX; break;
    case MEMRA_GGUF_INT32: imin = INT32_MIN, imax = INT32_MAX; break;
    case MEMRA_GGUF_INT64: imin = INT64_MIN, imax = INT64_MAX; break;
    default: return MEMRA_OK; /* floats */
    }
    if (umax && v->v.u64 > umax)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s': value %" PRIu64 " does not fit in %s", key,
                          v->v.u64, memra_gguf_type_name(v->type));
    if (imax && (v->v.i64 < imin || v->v.i64 > imax))
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s': value %" PRId64 " does not fit in %s", key,
                          v->v.i64, memra_gguf_type_name(v->type));
    return MEMRA_OK;
}

static memra_status copy_bytes(const char *key, const void *src, uint64_t n, const void **dst, memra_error *err) {
    *dst = NULL;
    if (n == 0)
        return MEMRA_OK;
    if (!src)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s': %" PRIu64 " bytes from a NULL pointer", key, n);
    void *p = n <= SIZE_MAX ? malloc((size_t)n) : NULL;
    if (!p)
        return memra_fail(err, MEMRA_E_NOMEM, "gguf writer: key '%s': out of memory for %" PRIu64 " bytes", key, n);
    memcpy(p, src, (size_t)n);
    *dst = p;
    return MEMRA_OK;
}

/* Deep-copies src into dst (dst zeroed by the caller), checking what the reader will check. */
static memra_status value_copy(const char *key, const memra_gguf_value *src, memra_gguf_value *dst, unsigned depth,
                               memra_error *err) {
    if ((uint32_t)src->type >= MEMRA_GGUF_TYPE_COUNT)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s': unknown value type %u", key,
                          (unsigned)src->type);
    if (src->type == MEMRA_GGUF_STRING) {
        dst->type = MEMRA_GGUF_STRING;
        dst->v.str.len = src->v.str.len;
        return copy_bytes(key, src->v.str.ptr, src->v.str.len, (const void **)&dst->v.str.ptr, err);
    }
    if (src->type != MEMRA_GGUF_ARRAY) {
        *dst = *src;
        return check_scalar(key, src, err);
    }
    const memra_gguf_array *a = &src->v.arr;
    if ((uint32_t)a->elem_type >= MEMRA_GGUF_TYPE_COUNT)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s': array of unknown element type %u", key,
                          (unsigned)a->elem_type);
    if (depth + 1 > WRITER_MAX_DEPTH)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s': arrays nest deeper than %u levels", key,
                          WRITER_MAX_DEPTH);
    dst->type = MEMRA_GGUF_ARRAY;
    dst->v.arr.elem_type = a->elem_type;
    dst->v.arr.count = 0;
    uint64_t size = memra_gguf_scalar_size(a->elem_type);
    if (size) {
        uint64_t n;
        if (__builtin_mul_overflow(a->count, size, &n))
            return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s': array of %" PRIu64 " elements overflows",
                              key, a->count);
        if (a->elem_type == MEMRA_GGUF_BOOL)
            for (uint64_t i = 0; i < a->count; i++)
                if (((const uint8_t *)a->data)[i] > 1)
                    return memra_fail(err, MEMRA_E_INVALID,
                                      "gguf writer: key '%s': bool element %" PRIu64 " is not 0 or 1", key, i);
        dst->v.arr.count = a->count;
        return copy_bytes(key, a->data, n, &dst->v.arr.data, err);
    }
    if (a->count == 0)
        return MEMRA_OK;
    if (!a->items)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s': array of %s without items", key,
                          memra_gguf_type_name(a->elem_type));
    if (a->count > SIZE_MAX / sizeof(memra_gguf_value))
        return memra_fail(err, MEMRA_E_NOMEM, "gguf writer: key '%s': array of %" PRIu64 " elements is too large", key,
                          a->count);
    memra_gguf_value *items = calloc((size_t)a->count, sizeof *items);
    if (!items)
        return memra_fail(err, MEMRA_E_NOMEM, "gguf writer: key '%s': out of memory for %" PRIu64 " elements", key,
                          a->count);
    dst->v.arr.items = items;
    dst->v.arr.count = a->count;
    for (uint64_t i = 0; i < a->count; i++) {
        if (a->items[i].type != a->elem_type)
            return memra_fail(err, MEMRA_E_INVALID,
                              "gguf writer: key '%s': element %" PRIu64 " has type %s in an array of %s", key, i,
                              memra_gguf_type_name(a->items[i].type), memra_gguf_type_name(a->elem_type));
        memra_status st = value_copy(key, &a->items[i], &items[i], depth + 1, err);
        if (st != MEMRA_OK)
            return st;
    }
    return MEMRA_OK;
}

/* Bytes the value takes in the file after its type field; values are bounded by memory, so the
 * sums cannot overflow. */
static uint64_t value_file_size(const memra_gguf_value *v) {
    if (v->type == MEMRA_GGUF_STRING)
        return 8 + v->v.str.len;
    if (v->type != MEMRA_GGUF_ARRAY)
        return memra_gguf_scalar_size(v->type);
    uint64_t n = 12, size = memra_gguf_scalar_size(v->v.arr.elem_type);
    if (size)
        return n + v->v.arr.count * size;
    for (uint64_t i = 0; i < v->v.arr.count; i++)
        n += value_file_size(&v->v.arr.items[i]);
    return n;
}

/* ---- writer lifecycle and metadata ---- */

memra_status memra_gguf_writer_new(uint32_t version, uint32_t alignment, memra_gguf_writer **out, memra_error *err) {
    if (!out)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: out is NULL");
    *out = NULL;
    if (version != 2 && version != 3)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: version %" PRIu32 ", expected 2 or 3", version);
    if (alignment & (alignment - 1))
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: alignment %" PRIu32 " is not a power of two", alignment);
    memra_gguf_writer *w = calloc(1, sizeof *w);
    if (!w)
        return memra_fail(err, MEMRA_E_NOMEM, "gguf writer: out of memory");
    w->version = version;
    w->alignment = alignment ? alignment : MEMRA_GGUF_DEFAULT_ALIGNMENT;
    if (w->alignment != MEMRA_GGUF_DEFAULT_ALIGNMENT) {
        memra_status st = memra_gguf_writer_set_u32(w, "general.alignment", w->alignment, err);
        if (st != MEMRA_OK) {
            memra_gguf_writer_free(w);
            return st;
        }
    }
    *out = w;
    return MEMRA_OK;
}

void memra_gguf_writer_free(memra_gguf_writer *w) {
    if (!w)
        return;
    for (uint64_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        value_free(&w->kvs[i].value);
    }
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->kvs);
    free(w->tensors);
    free(w);
}

static memra_status check_name(const char *what, const char *name, memra_error *err) {
    if (!name || !name[0])
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: %s is %s, expected a nonempty name", what,
                          name ? "empty" : "NULL");
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        if (*c < 0x20 || *c == 0x7f) /* the reader refuses these */
            return memra_fail(err, MEMRA_E_INVALID, "gguf writer: %s has the control byte 0x%02x", what, *c);
    return MEMRA_OK;
}

memra_status memra_gguf_writer_set(memra_gguf_writer *w, const char *key, const memra_gguf_value *value,
                                   memra_error *err) {
    memra_status st = check_name("a metadata key", key, err);
    if (st != MEMRA_OK)
        return st;
    if (!w || !value)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s': writer or value is NULL", key);
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kvs[i].key, key) == 0)
            return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s' is already set", key);
    bool is_alignment = strcmp(key, "general.alignment") == 0;
    if (is_alignment && (value->type != MEMRA_GGUF_UINT32 || value->v.u64 == 0 || value->v.u64 > UINT32_MAX ||
                         (value->v.u64 & (value->v.u64 - 1))))
        return memra_fail(err, MEMRA_E_INVALID,
                          "gguf writer: key 'general.alignment' must be a uint32 nonzero power of two");
    if (w->n_kv == w->cap_kv) {
        uint64_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        writer_kv *kvs = realloc(w->kvs, cap * sizeof *kvs);
        if (!kvs)
            return memra_fail(err, MEMRA_E_NOMEM, "gguf writer: key '%s': out of memory", key);
        w->kvs = kvs;
        w->cap_kv = cap;
    }
    writer_kv kv = {.key = strdup(key)};
    if (!kv.key)
        return memra_fail(err, MEMRA_E_NOMEM, "gguf writer: key '%s': out of memory", key);
    st = value_copy(key, value, &kv.value, 0, err);
    if (st != MEMRA_OK) {
        free(kv.key);
        value_free(&kv.value);
        return st;
    }
    w->kvs[w->n_kv++] = kv;
    if (is_alignment)
        w->alignment = (uint32_t)value->v.u64;
    return MEMRA_OK;
}

memra_status memra_gguf_writer_set_u32(memra_gguf_writer *w, const char *key, uint32_t v, memra_error *err) {
    memra_gguf_value value = {.type = MEMRA_GGUF_UINT32, .v.u64 = v};
    return memra_gguf_writer_set(w, key, &value, err);
}

memra_status memra_gguf_writer_set_i32(memra_gguf_writer *w, const char *key, int32_t v, memra_error *err) {
    memra_gguf_value value = {.type = MEMRA_GGUF_INT32, .v.i64 = v};
    return memra_gguf_writer_set(w, key, &value, err);
}

memra_status memra_gguf_writer_set_f32(memra_gguf_writer *w, const char *key, float v, memra_error *err) {
    memra_gguf_value value = {.type = MEMRA_GGUF_FLOAT32, .v.f64 = v};
    return memra_gguf_writer_set(w, key, &value, err);
}

memra_status memra_gguf_writer_set_bool(memra_gguf_writer *w, const char *key, bool v, memra_error *err) {
    memra_gguf_value value = {.type = MEMRA_GGUF_BOOL, .v.u64 = v ? 1 : 0};
    return memra_gguf_writer_set(w, key, &value, err);
}

memra_status memra_gguf_writer_set_str(memra_gguf_writer *w, const char *key, const char *v, memra_error *err) {
    if (!v)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s': string is NULL", key ? key : "<null>");
    memra_gguf_value value = {.type = MEMRA_GGUF_STRING, .v.str = {v, strlen(v)}};
    return memra_gguf_writer_set(w, key, &value, err);
}

memra_status memra_gguf_writer_set_array(memra_gguf_writer *w, const char *key, memra_gguf_type elem_type,
                                         uint64_t count, const void *data, memra_error *err) {
    if (memra_gguf_scalar_size(elem_type) == 0)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s': set_array takes scalar elements, not %s",
                          key ? key : "<null>", memra_gguf_type_name(elem_type));
    memra_gguf_value value = {.type = MEMRA_GGUF_ARRAY,
                              .v.arr = {.elem_type = elem_type, .count = count, .data = data}};
    return memra_gguf_writer_set(w, key, &value, err);
}

memra_status memra_gguf_writer_set_str_array(memra_gguf_writer *w, const char *key, const char *const *strs,
                                             uint64_t count, memra_error *err) {
    if (count > 0 && !strs)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s': strings are NULL", key ? key : "<null>");
    if (count > SIZE_MAX / sizeof(memra_gguf_value))
        return memra_fail(err, MEMRA_E_NOMEM, "gguf writer: key '%s': %" PRIu64 " strings are too many",
                          key ? key : "<null>", count);
    memra_gguf_value *items = count ? calloc((size_t)count, sizeof *items) : NULL;
    if (count && !items)
        return memra_fail(err, MEMRA_E_NOMEM, "gguf writer: key '%s': out of memory", key ? key : "<null>");
    for (uint64_t i = 0; i < count; i++) {
        if (!strs[i]) {
            free(items);
            return memra_fail(err, MEMRA_E_INVALID, "gguf writer: key '%s': string %" PRIu64 " is NULL",
                              key ? key : "<null>", i);
        }
        items[i].type = MEMRA_GGUF_STRING;
        items[i].v.str.ptr = strs[i];
        items[i].v.str.len = strlen(strs[i]);
    }
    memra_gguf_value value = {.type = MEMRA_GGUF_ARRAY,
                              .v.arr = {.elem_type = MEMRA_GGUF_STRING, .count = count, .items = items}};
    memra_status st = memra_gguf_writer_set(w, key, &value, err);
    free(items);
    return st;
}

/* ---- tensors ---- */

static memra_status add_tensor(memra_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                               const uint64_t *ne, writer_tensor **out, memra_error *err) {
    memra_status st = check_name("a tensor name", name, err);
    if (st != MEMRA_OK)
        return st;
    if (!w || !ne)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: tensor '%s': writer or shape is NULL", name);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return memra_fail(err, MEMRA_E_INVALID, "gguf writer: tensor '%s' is already added", name);
    if (n_dims < 1 || n_dims > MEMRA_GGUF_MAX_DIMS)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: tensor '%s': n_dims %" PRIu32 ", expected 1..%u", name,
                          n_dims, MEMRA_GGUF_MAX_DIMS);
    writer_tensor t = {.type = type, .n_dims = n_dims, .n_rows = 1};
    for (uint32_t d = 0; d < MEMRA_GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] == 0 || t.ne[d] > (uint64_t)INT64_MAX)
            return memra_fail(err, MEMRA_E_INVALID,
                              "gguf writer: tensor '%s': dimension %" PRIu32 " is %" PRIu64 ", expected 1..2^63-1",
                              name, d, t.ne[d]);
        if (d > 0 && __builtin_mul_overflow(t.n_rows, t.ne[d], &t.n_rows))
            return memra_fail(err, MEMRA_E_INVALID, "gguf writer: tensor '%s': the product of its dimensions overflows",
                              name);
    }
    st = memra_tensor_row_bytes(type, t.ne[0], &t.row_bytes, err);
    if (st != MEMRA_OK) {
        memra_error_prefix(err, "gguf writer: tensor '%s'", name);
        if (err)
            err->status = MEMRA_E_INVALID; /* a bad argument here, not a bad file */
        return MEMRA_E_INVALID;
    }
    uint64_t n_elems;
    if (__builtin_mul_overflow(t.n_rows, t.ne[0], &n_elems) ||
        __builtin_mul_overflow(t.n_rows, t.row_bytes, &t.n_bytes))
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: tensor '%s': its size overflows 64 bits", name);
    if (w->n_tensors == w->cap_tensors) {
        uint64_t cap = w->cap_tensors ? 2 * w->cap_tensors : 16;
        writer_tensor *ts = realloc(w->tensors, cap * sizeof *ts);
        if (!ts)
            return memra_fail(err, MEMRA_E_NOMEM, "gguf writer: tensor '%s': out of memory", name);
        w->tensors = ts;
        w->cap_tensors = cap;
    }
    t.name = strdup(name);
    if (!t.name)
        return memra_fail(err, MEMRA_E_NOMEM, "gguf writer: tensor '%s': out of memory", name);
    w->tensors[w->n_tensors] = t;
    *out = &w->tensors[w->n_tensors];
    return MEMRA_OK;
}

memra_status memra_gguf_writer_add_tensor(memra_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                          const uint64_t *ne, const void *data, memra_error *err) {
    writer_tensor *t;
    memra_status st = add_tensor(w, name, type, n_dims, ne, &t, err);
    if (st != MEMRA_OK)
        return st;
    if (!data || t->n_bytes > SIZE_MAX || !(t->data = malloc((size_t)t->n_bytes))) {
        free(t->name);
        if (!data)
            return memra_fail(err, MEMRA_E_INVALID, "gguf writer: tensor '%s': data is NULL", name);
        return memra_fail(err, MEMRA_E_NOMEM, "gguf writer: tensor '%s': out of memory for %" PRIu64 " bytes", name,
                          t->n_bytes);
    }
    memcpy(t->data, data, (size_t)t->n_bytes);
    w->n_tensors++;
    return MEMRA_OK;
}

memra_status memra_gguf_writer_add_tensor_fill(memra_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                               const uint64_t *ne, memra_gguf_fill_fn fill, void *user,
                                               memra_error *err) {
    if (!fill)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: tensor '%s': fill callback is NULL",
                          name ? name : "<null>");
    writer_tensor *t;
    memra_status st = add_tensor(w, name, type, n_dims, ne, &t, err);
    if (st != MEMRA_OK)
        return st;
    t->fill = fill;
    t->user = user;
    w->n_tensors++;
    return MEMRA_OK;
}

/* ---- output ---- */

/* Where bytes go: a FILE or a buffer sized in advance. */
typedef struct sink {
    FILE *file;
    uint8_t *buf;
    uint64_t pos;
    const char *name;
    memra_error *err;
} sink;

static memra_status sink_put(sink *s, const void *data, uint64_t n) {
    if (n == 0)
        return MEMRA_OK;
    if (s->buf) {
        memcpy(s->buf + s->pos, data, (size_t)n);
    } else if (fwrite(data, 1, (size_t)n, s->file) != n) {
        return memra_fail(s->err, MEMRA_E_IO, "%s: write failed at offset %" PRIu64 ": %s", s->name, s->pos,
                          strerror(errno));
    }
    s->pos += n;
    return MEMRA_OK;
}

static memra_status sink_u32(sink *s, uint32_t v) { return sink_put(s, &v, 4); }
static memra_status sink_u64(sink *s, uint64_t v) { return sink_put(s, &v, 8); }

static memra_status sink_str(sink *s, const char *p, uint64_t len) {
    memra_status st = sink_u64(s, len);
    return st != MEMRA_OK ? st : sink_put(s, p, len);
}

static memra_status sink_pad(sink *s, uint64_t align) {
    static const uint8_t zeros[256];
    uint64_t pad = (align - s->pos % align) % align;
    memra_status st = MEMRA_OK;
    while (pad > 0 && st == MEMRA_OK) {
        uint64_t n = pad < sizeof zeros ? pad : sizeof zeros;
        st = sink_put(s, zeros, n);
        pad -= n;
    }
    return st;
}

/* Writes the value's bytes after its type field. */
static memra_status sink_value(sink *s, const memra_gguf_value *v) {
    uint8_t b[8];
    switch (v->type) {
    case MEMRA_GGUF_STRING: return sink_str(s, v->v.str.ptr, v->v.str.len);
    case MEMRA_GGUF_UINT8:
    case MEMRA_GGUF_BOOL: b[0] = (uint8_t)v->v.u64; return sink_put(s, b, 1);
    case MEMRA_GGUF_INT8: b[0] = (uint8_t)(int8_t)v->v.i64; return sink_put(s, b, 1);
    case MEMRA_GGUF_UINT16: {
        uint16_t x = (uint16_t)v->v.u64;
        return sink_put(s, &x, 2);
    }
    case MEMRA_GGUF_INT16: {
        int16_t x = (int16_t)v->v.i64;
        return sink_put(s, &x, 2);
    }
    case MEMRA_GGUF_UINT32: return sink_u32(s, (uint32_t)v->v.u64);
    case MEMRA_GGUF_INT32: {
        int32_t x = (int32_t)v->v.i64;
        return sink_put(s, &x, 4);
    }
    case MEMRA_GGUF_UINT64: return sink_u64(s, v->v.u64);
    case MEMRA_GGUF_INT64: return sink_put(s, &v->v.i64, 8);
    case MEMRA_GGUF_FLOAT32: {
        float x = (float)v->v.f64;
        return sink_put(s, &x, 4);
    }
    case MEMRA_GGUF_FLOAT64: return sink_put(s, &v->v.f64, 8);
    case MEMRA_GGUF_ARRAY: break;
    default: return memra_fail(s->err, MEMRA_E_INTERNAL, "%s: value of unknown type %u", s->name, (unsigned)v->type);
    }
    const memra_gguf_array *a = &v->v.arr;
    memra_status st = sink_u32(s, a->elem_type);
    if (st == MEMRA_OK)
        st = sink_u64(s, a->count);
    uint64_t size = memra_gguf_scalar_size(a->elem_type);
    if (size)
        return st == MEMRA_OK ? sink_put(s, a->data, a->count * size) : st;
    for (uint64_t i = 0; i < a->count && st == MEMRA_OK; i++)
        st = sink_value(s, &a->items[i]);
    return st;
}

/* Lays out the file: assigns each tensor's offset in the data section; returns the data
 * section's start and the total size, overflow-checked (a filled tensor may be huge). */
static memra_status writer_layout(memra_gguf_writer *w, const char *name, uint64_t *data_start, uint64_t *total,
                                  memra_error *err) {
    uint64_t pos = 24, align = w->alignment;
    for (uint64_t i = 0; i < w->n_kv; i++)
        pos += 8 + strlen(w->kvs[i].key) + 4 + value_file_size(&w->kvs[i].value);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        pos += 8 + strlen(w->tensors[i].name) + 4 + 8 * (uint64_t)w->tensors[i].n_dims + 4 + 8;
    pos += (align - pos % align) % align;
    *data_start = pos;
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        w->tensors[i].offset = off;
        uint64_t padded = w->tensors[i].n_bytes + (align - w->tensors[i].n_bytes % align) % align;
        if (padded < w->tensors[i].n_bytes || __builtin_add_overflow(off, padded, &off))
            return memra_fail(err, MEMRA_E_RANGE, "%s: the data section overflows 64 bits at tensor '%s'", name,
                              w->tensors[i].name);
    }
    if (__builtin_add_overflow(pos, off, total))
        return memra_fail(err, MEMRA_E_RANGE, "%s: the file size overflows 64 bits", name);
    return MEMRA_OK;
}

/* Streams a filled tensor's rows through fill in chunks of whole rows. */
static memra_status sink_fill(sink *s, memra_gguf_writer *w, uint64_t index, uint8_t *chunk, uint64_t chunk_rows) {
    const writer_tensor *t = &w->tensors[index];
    for (uint64_t row0 = 0; row0 < t->n_rows; row0 += chunk_rows) {
        uint64_t n_rows = t->n_rows - row0 < chunk_rows ? t->n_rows - row0 : chunk_rows;
        uint8_t *dst = s->buf ? s->buf + s->pos : chunk;
        memra_status st = t->fill(t->user, index, row0, n_rows, dst, s->err);
        if (st != MEMRA_OK) {
            memra_error_prefix(s->err, "%s: tensor '%s' rows %" PRIu64 "..%" PRIu64, s->name, t->name, row0,
                               row0 + n_rows);
            return st;
        }
        if (s->buf)
            s->pos += n_rows * t->row_bytes;
        else if ((st = sink_put(s, chunk, n_rows * t->row_bytes)) != MEMRA_OK)
            return st;
    }
    return MEMRA_OK;
}

static uint64_t chunk_rows_of(const writer_tensor *t) {
    uint64_t rows = WRITER_CHUNK_BYTES / t->row_bytes;
    if (rows == 0)
        rows = 1;
    return rows < t->n_rows ? rows : t->n_rows;
}

static memra_status writer_emit(memra_gguf_writer *w, sink *s) {
    memra_status st = sink_u32(s, MEMRA_GGUF_MAGIC);
    if (st == MEMRA_OK)
        st = sink_u32(s, w->version);
    if (st == MEMRA_OK)
        st = sink_u64(s, w->n_tensors);
    if (st == MEMRA_OK)
        st = sink_u64(s, w->n_kv);
    for (uint64_t i = 0; i < w->n_kv && st == MEMRA_OK; i++) {
        const writer_kv *kv = &w->kvs[i];
        st = sink_str(s, kv->key, strlen(kv->key));
        if (st == MEMRA_OK)
            st = sink_u32(s, kv->value.type);
        if (st == MEMRA_OK)
            st = sink_value(s, &kv->value);
    }
    for (uint64_t i = 0; i < w->n_tensors && st == MEMRA_OK; i++) {
        const writer_tensor *t = &w->tensors[i];
        st = sink_str(s, t->name, strlen(t->name));
        if (st == MEMRA_OK)
            st = sink_u32(s, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && st == MEMRA_OK; d++)
            st = sink_u64(s, t->ne[d]);
        if (st == MEMRA_OK)
            st = sink_u32(s, t->type);
        if (st == MEMRA_OK)
            st = sink_u64(s, t->offset);
    }
    if (st == MEMRA_OK)
        st = sink_pad(s, w->alignment);
    if (st != MEMRA_OK)
        return st;

    /* One chunk buffer, sized for the largest chunk, serves every filled tensor of a file. */
    uint8_t *chunk = NULL;
    if (!s->buf) {
        uint64_t max_chunk = 0;
        for (uint64_t i = 0; i < w->n_tensors; i++)
            if (w->tensors[i].fill && chunk_rows_of(&w->tensors[i]) * w->tensors[i].row_bytes > max_chunk)
                max_chunk = chunk_rows_of(&w->tensors[i]) * w->tensors[i].row_bytes;
        if (max_chunk && (max_chunk > SIZE_MAX || !(chunk = malloc((size_t)max_chunk))))
            return memra_fail(s->err, MEMRA_E_NOMEM, "%s: out of memory for a chunk of %" PRIu64 " bytes", s->name,
                              max_chunk);
    }
    for (uint64_t i = 0; i < w->n_tensors && st == MEMRA_OK; i++) {
        const writer_tensor *t = &w->tensors[i];
        if (t->fill)
            st = sink_fill(s, w, i, chunk, chunk_rows_of(t));
        else
            st = sink_put(s, t->data, t->n_bytes);
        if (st == MEMRA_OK)
            st = sink_pad(s, w->alignment);
    }
    free(chunk);
    return st;
}

memra_status memra_gguf_writer_write_memory(memra_gguf_writer *w, void **data, size_t *size, memra_error *err) {
    if (!w || !data || !size)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: write_memory: writer, data or size is NULL");
    *data = NULL;
    *size = 0;
    uint64_t data_start, total;
    memra_status st = writer_layout(w, "<memory>", &data_start, &total, err);
    if (st != MEMRA_OK)
        return st;
    /* Checked before it is spent: a malloc the kernel overcommits would be killed for memory only
     * when the bytes are written, with no message. */
    uint64_t avail = 0;
    char how[160] = "";
    if (memra_memory_available(&avail, how, sizeof how, NULL) == MEMRA_OK && total > avail)
        return memra_fail(err, MEMRA_E_NOMEM,
                          "<memory>: a GGUF of %.2f GiB built in memory needs more than the %.2f GiB available (%s): "
                          "choose a smaller preset or dtype, or write it to a file (memra mkmodel) and pass --model",
                          total / 1073741824.0, avail / 1073741824.0, how);
    uint8_t *buf = total <= SIZE_MAX ? malloc((size_t)total) : NULL;
    if (!buf)
        return memra_fail(err, MEMRA_E_NOMEM, "<memory>: out of memory for a GGUF of %" PRIu64 " bytes", total);
    sink s = {.buf = buf, .name = "<memory>", .err = err};
    st = writer_emit(w, &s);
    if (st == MEMRA_OK && s.pos != total)
        st = memra_fail(err, MEMRA_E_INTERNAL, "<memory>: wrote %" PRIu64 " bytes, laid out %" PRIu64, s.pos, total);
    if (st != MEMRA_OK) {
        free(buf);
        return st;
    }
    *data = buf;
    *size = (size_t)total;
    return MEMRA_OK;
}

memra_status memra_gguf_writer_write_stream(memra_gguf_writer *w, FILE *f, const char *name, memra_error *err) {
    if (!w || !f || !name)
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: write_stream: writer, stream or name is NULL");
    uint64_t data_start, total;
    memra_status st = writer_layout(w, name, &data_start, &total, err);
    if (st != MEMRA_OK)
        return st;
    sink s = {.file = f, .name = name, .err = err};
    st = writer_emit(w, &s);
    if (st == MEMRA_OK && s.pos != total)
        st = memra_fail(err, MEMRA_E_INTERNAL, "%s: wrote %" PRIu64 " bytes, laid out %" PRIu64, name, s.pos, total);
    if (st == MEMRA_OK && fflush(f) != 0)
        st = memra_fail(err, MEMRA_E_IO, "%s: flush failed: %s", name, strerror(errno));
    return st;
}

memra_status memra_gguf_writer_write_file(memra_gguf_writer *w, const char *path, memra_error *err) {
    if (!w || !path || !path[0])
        return memra_fail(err, MEMRA_E_INVALID, "gguf writer: write_file: writer or path is NULL or empty");
    uint64_t data_start, total;
    memra_status st = writer_layout(w, path, &data_start, &total, err);
    if (st != MEMRA_OK)
        return st;
    /* A fresh temporary beside the target (mkstemp: never an existing file or a symlink's
     * target), renamed over it once complete. */
    size_t len = strlen(path);
    char *tmp = malloc(len + 12);
    if (!tmp)
        return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory", path);
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        st = memra_fail(err, MEMRA_E_IO, "%s: cannot create a temporary file beside it: %s", path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        goto err_free_tmp;
    }
    if (fchmod(fd, 0644) != 0) { /* mkstemp creates 0600; a model file is for everyone to read */
        st = memra_fail(err, MEMRA_E_IO, "%s: chmod failed: %s", tmp, strerror(errno));
        fclose(f);
        unlink(tmp);
        goto err_free_tmp;
    }
    sink s = {.file = f, .name = tmp, .err = err};
    st = writer_emit(w, &s);
    if (st == MEMRA_OK && s.pos != total)
        st = memra_fail(err, MEMRA_E_INTERNAL, "%s: wrote %" PRIu64 " bytes, laid out %" PRIu64, tmp, s.pos, total);
    if (st == MEMRA_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        st = memra_fail(err, MEMRA_E_IO, "%s: flush failed: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && st == MEMRA_OK)
        st = memra_fail(err, MEMRA_E_IO, "%s: close failed: %s", tmp, strerror(errno));
    if (st == MEMRA_OK && rename(tmp, path) != 0)
        st = memra_fail(err, MEMRA_E_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    if (st != MEMRA_OK)
        unlink(tmp);
err_free_tmp:
    free(tmp);
    return st;
}
