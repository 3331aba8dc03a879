/* gguf_bytes.h: a byte builder for hand-assembling GGUF files (valid or not) in tests. */
#ifndef MEMRA_TEST_GGUF_BYTES_H
#define MEMRA_TEST_GGUF_BYTES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct gb_bytes {
    uint8_t *p;
    size_t n, cap;
} gb_bytes;

static inline void gb_put(gb_bytes *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, data, n);
    b->n += n;
}
static inline void gb_u8(gb_bytes *b, uint8_t v) { gb_put(b, &v, 1); }
static inline void gb_u32(gb_bytes *b, uint32_t v) { gb_put(b, &v, 4); }
static inline void gb_u64(gb_bytes *b, uint64_t v) { gb_put(b, &v, 8); }
static inline void gb_str(gb_bytes *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_put(b, s, strlen(s));
}
static inline void gb_zeros(gb_bytes *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        gb_u8(b, 0);
}
static inline void gb_pad(gb_bytes *b, size_t align) { gb_zeros(b, (align - b->n % align) % align); }
static inline void gb_header(gb_bytes *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_u32(b, 0x46554747u);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
/* A key and its value type; the caller appends the value. */
static inline void gb_key(gb_bytes *b, const char *key, uint32_t type) {
    gb_str(b, key);
    gb_u32(b, type);
}
static inline void gb_tensor_info(gb_bytes *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                                  uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        gb_u64(b, ne[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}
static inline void gb_free(gb_bytes *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

#endif
