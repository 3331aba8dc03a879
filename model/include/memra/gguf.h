/* memra/gguf.h: reading GGUF v2/v3 files, and writing them.
 *
 * The reader takes the file's bytes into private memory once (not a mapping of the file: a file
 * truncated while mapped would kill the process with SIGBUS), then validates the whole header,
 * metadata and tensor-info sections: every count, length, size and offset is computed
 * overflow-safe and checked against the file size before use, so that after a successful open
 * every pointer below lies inside "the mapping" (those bytes). The data section must hold the
 * tensors and nothing else: padding is zero and shorter than the alignment everywhere, so a file
 * whose n_tensors, offsets or alignment were edited is refused instead of read as another
 * model. Only regular files are opened (a FIFO or a device is refused before anything blocks).
 * memra_gguf_open_streamed validates the same way while reading only the metadata, the padding
 * and the vectors: the matrices stay in the file, read through memra/source.h (issue 27).
 *
 * The writer builds metadata and tensor infos in memory; tensor data comes either from a buffer
 * or from a callback that fills rows in chunks, so a model larger than memory can be streamed
 * to disk. */
#ifndef MEMRA_GGUF_H
#define MEMRA_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "memra/source.h"
#include "memra/status.h"
#include "memra/tensor_type.h" /* the tensor types (core: part of the plugin ABI) */

#ifdef __cplusplus
extern "C" {
#endif

#define MEMRA_GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define MEMRA_GGUF_DEFAULT_ALIGNMENT 32u
#define MEMRA_GGUF_MAX_DIMS 4u

/* Metadata value types, numbered as in the GGUF specification. */
typedef enum memra_gguf_type {
    MEMRA_GGUF_UINT8 = 0,
    MEMRA_GGUF_INT8 = 1,
    MEMRA_GGUF_UINT16 = 2,
    MEMRA_GGUF_INT16 = 3,
    MEMRA_GGUF_UINT32 = 4,
    MEMRA_GGUF_INT32 = 5,
    MEMRA_GGUF_FLOAT32 = 6,
    MEMRA_GGUF_BOOL = 7,
    MEMRA_GGUF_STRING = 8,
    MEMRA_GGUF_ARRAY = 9,
    MEMRA_GGUF_UINT64 = 10,
    MEMRA_GGUF_INT64 = 11,
    MEMRA_GGUF_FLOAT64 = 12,
    MEMRA_GGUF_TYPE_COUNT = 13
} memra_gguf_type;

/* Name of a metadata value type ("uint32", "array"); "unknown" otherwise. */
const char *memra_gguf_type_name(uint32_t type);
/* Bytes of one element of a fixed-size metadata value type (1, 2, 4 or 8); 0 for string, array
 * and unknown types. */
uint64_t memra_gguf_scalar_size(uint32_t type);
/* A string that lives in the mapping or the writer: not NUL-terminated. */
typedef struct memra_gguf_str {
    const char *ptr;
    uint64_t len;
} memra_gguf_str;

typedef struct memra_gguf_value memra_gguf_value;

/* An array: elements of one type. For scalar element types `data` points at `count` packed
 * little-endian elements (in the mapping, possibly unaligned: read with memcpy); for STRING and
 * ARRAY elements `items` holds `count` parsed values. */
typedef struct memra_gguf_array {
    memra_gguf_type elem_type;
    uint64_t count;
    const void *data;
    const memra_gguf_value *items;
} memra_gguf_array;

struct memra_gguf_value {
    memra_gguf_type type;
    union {
        uint64_t u64; /* UINT8/16/32/64, BOOL (0 or 1) */
        int64_t i64;  /* INT8/16/32/64 */
        double f64;   /* FLOAT32/64 */
        memra_gguf_str str;
        memra_gguf_array arr;
    } v;
};

typedef struct memra_gguf_kv {
    const char *key; /* NUL-terminated copy */
    memra_gguf_value value;
} memra_gguf_kv;

typedef struct memra_gguf_tensor {
    const char *name; /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[MEMRA_GGUF_MAX_DIMS]; /* ne[0] is the contiguous (innermost) dimension; unused = 1 */
    uint32_t type;                    /* memra_tensor_type number, possibly unknown to memra */
    uint64_t offset;                  /* relative to the data section */
    uint64_t n_elems;
    uint64_t n_bytes;
    const void *data; /* inside the mapping */
} memra_gguf_tensor;

typedef struct memra_gguf memra_gguf;

/* Opens and validates a GGUF file; *out is NULL on failure. Messages start with the path. */
memra_status memra_gguf_open(const char *path, memra_gguf **out, memra_error *err);
/* The same over a caller's buffer, which must outlive the handle (`name` is used in messages).
 * Used for models built in memory and by the fuzzer. */
memra_status memra_gguf_open_memory(const void *data, size_t size, const char *name, memra_gguf **out,
                                    memra_error *err);
/* Opens and validates a GGUF file without reading its tensor data: the handle keeps the file
 * open (memra/source.h: its identity is checked at every read) and reserves address space of the
 * file's size, into which it reads only the metadata, the padding it validates and the resident
 * tensors (memra_gguf_tensor_resident: vectors, small tensors). Every data pointer still lies
 * inside "the mapping" (memra_gguf_file_data), but the bytes of a tensor that is not resident are
 * not there (the pages are inaccessible): read them through memra_gguf_source. For a backend that
 * uploads its weights to a device in chunks, so the file never sits whole in host memory. */
memra_status memra_gguf_open_streamed(const char *path, memra_gguf **out, memra_error *err);
void memra_gguf_close(memra_gguf *g);

/* A streamed handle keeps in memory the tensors of at most MEMRA_GGUF_STREAM_SMALL bytes and the
 * vectors (ne[1..3] all 1) of at most MEMRA_GGUF_STREAM_VECTOR. */
#define MEMRA_GGUF_STREAM_SMALL ((uint64_t)64 << 10)
#define MEMRA_GGUF_STREAM_VECTOR ((uint64_t)64 << 20)
bool memra_gguf_streamed(const memra_gguf *g);
/* Whether t's bytes are in memory at t->data (always, unless streamed). */
bool memra_gguf_tensor_resident(const memra_gguf *g, const memra_gguf_tensor *t);
/* Bytes of the file held in memory (the file size unless streamed). */
uint64_t memra_gguf_resident_bytes(const memra_gguf *g);
/* Where the file's bytes are read from: the file (streamed) or the bytes in memory; its base is
 * memra_gguf_file_data, so memra_source_offset_of(tensor data) is the tensor's file offset. */
const struct memra_source *memra_gguf_source(const memra_gguf *g);

const char *memra_gguf_path(const memra_gguf *g);
uint32_t memra_gguf_version(const memra_gguf *g);
uint32_t memra_gguf_alignment(const memra_gguf *g);
uint64_t memra_gguf_file_size(const memra_gguf *g);
const void *memra_gguf_file_data(const memra_gguf *g); /* the whole mapping (streamed: partly readable) */
uint64_t memra_gguf_data_offset(const memra_gguf *g);  /* start of the data section in the file */

uint64_t memra_gguf_kv_count(const memra_gguf *g);
const memra_gguf_kv *memra_gguf_kv_at(const memra_gguf *g, uint64_t i);
const memra_gguf_value *memra_gguf_find(const memra_gguf *g, const char *key); /* NULL if absent */

uint64_t memra_gguf_tensor_count(const memra_gguf *g);
const memra_gguf_tensor *memra_gguf_tensor_at(const memra_gguf *g, uint64_t i);
const memra_gguf_tensor *memra_gguf_find_tensor(const memra_gguf *g, const char *name);

/* Typed look-ups: MEMRA_E_FORMAT with a message naming the key when it is absent ("missing key
 * 'llama.block_count'") or of a type that cannot be converted without loss ("key
 * 'general.alignment' has type string, expected an unsigned integer"). Integer getters accept
 * every integer type whose value fits; float getters accept FLOAT32/64. */
memra_status memra_gguf_get_u64(const memra_gguf *g, const char *key, uint64_t *out, memra_error *err);
memra_status memra_gguf_get_u32(const memra_gguf *g, const char *key, uint32_t *out, memra_error *err);
memra_status memra_gguf_get_f32(const memra_gguf *g, const char *key, float *out, memra_error *err);
memra_status memra_gguf_get_str(const memra_gguf *g, const char *key, memra_gguf_str *out, memra_error *err);
/* An array whose elements have exactly elem_type (an array of int32 is not an array of uint32);
 * *out points into the handle. */
memra_status memra_gguf_get_array(const memra_gguf *g, const char *key, memra_gguf_type elem_type,
                                  const memra_gguf_array **out, memra_error *err);

/* ---- writer ---- */

typedef struct memra_gguf_writer memra_gguf_writer;

/* Fills rows [row0, row0 + n_rows) of tensor `index` (rows of ne[0] elements, encoded in the
 * tensor's type) into dst, which holds exactly that many rows' bytes. */
typedef memra_status (*memra_gguf_fill_fn)(void *user, uint64_t index, uint64_t row0, uint64_t n_rows, void *dst,
                                           memra_error *err);

/* alignment: 0 means MEMRA_GGUF_DEFAULT_ALIGNMENT; otherwise a power of two. version: 2 or 3. */
memra_status memra_gguf_writer_new(uint32_t version, uint32_t alignment, memra_gguf_writer **out, memra_error *err);
void memra_gguf_writer_free(memra_gguf_writer *w);

/* Metadata, in the order set. A key set twice is an error. Strings and arrays are copied. */
memra_status memra_gguf_writer_set(memra_gguf_writer *w, const char *key, const memra_gguf_value *value,
                                   memra_error *err);
memra_status memra_gguf_writer_set_u32(memra_gguf_writer *w, const char *key, uint32_t v, memra_error *err);
memra_status memra_gguf_writer_set_i32(memra_gguf_writer *w, const char *key, int32_t v, memra_error *err);
memra_status memra_gguf_writer_set_f32(memra_gguf_writer *w, const char *key, float v, memra_error *err);
memra_status memra_gguf_writer_set_bool(memra_gguf_writer *w, const char *key, bool v, memra_error *err);
memra_status memra_gguf_writer_set_str(memra_gguf_writer *w, const char *key, const char *v, memra_error *err);
/* An array of scalars: count packed little-endian elements of elem_type at data. */
memra_status memra_gguf_writer_set_array(memra_gguf_writer *w, const char *key, memra_gguf_type elem_type,
                                         uint64_t count, const void *data, memra_error *err);
memra_status memra_gguf_writer_set_str_array(memra_gguf_writer *w, const char *key, const char *const *strs,
                                             uint64_t count, memra_error *err);

/* A tensor with its bytes copied from data (n_bytes must match the shape and type)... */
memra_status memra_gguf_writer_add_tensor(memra_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                          const uint64_t *ne, const void *data, memra_error *err);
/* ...or filled by a callback at write time, in chunks of whole rows (fill's index is the order
 * of addition, counting every tensor). */
memra_status memra_gguf_writer_add_tensor_fill(memra_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                               const uint64_t *ne, memra_gguf_fill_fn fill, void *user,
                                               memra_error *err);

/* Writes the file (to path.tmp, then renamed). */
memra_status memra_gguf_writer_write_file(memra_gguf_writer *w, const char *path, memra_error *err);
/* Writes the file to a stream the caller opened (and closes: a private file it renames into
 * place, say), named `name` in messages; flushed, not closed. */
memra_status memra_gguf_writer_write_stream(memra_gguf_writer *w, FILE *f, const char *name, memra_error *err);
/* Writes into a malloc'd buffer the caller frees with free(). */
memra_status memra_gguf_writer_write_memory(memra_gguf_writer *w, void **data, size_t *size, memra_error *err);

#ifdef __cplusplus
}
#endif
#endif
