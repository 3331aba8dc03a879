/* gguf_bytes.h: a byte builder for hand-assembling GGUF files (valid or not) in tests, and what the
 * gguf tests share: a valid one-tensor file, and a cap on the address space. */
#ifndef MEMRA_TEST_GGUF_BYTES_H
#define MEMRA_TEST_GGUF_BYTES_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "memra/gguf.h"

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

/* ---- shared by the gguf tests ---- */

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* A valid file with one tensor 't' F32 [32, 2] at offset 0 and one kv 'k' uint32 = 7. */
static inline void valid_one_tensor(gb_bytes *b) {
    gb_header(b, 3, 1, 1);
    gb_key(b, "k", MEMRA_GGUF_UINT32);
    gb_u32(b, 7);
    gb_tensor_info(b, "t", 2, (const uint64_t[2]){32, 2}, MEMRA_TYPE_F32, 0);
    gb_pad(b, 32);
    gb_zeros(b, 32 * 2 * 4);
}

/* Caps the address space near its current size, so an allocation by an unbounded count fails
 * (returns NOMEM instead of the FORMAT expected). ASan reserves terabytes of shadow up front,
 * so there the cap is skipped; ASan's allocator then aborts on absurd sizes instead. */
static inline void cap_memory(void) {
#ifndef UNDER_ASAN
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    cr_assert(f && fscanf(f, "%lu", &pages) == 1);
    fclose(f);
    rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (256u << 20);
    struct rlimit r = {cap, cap};
    cr_assert_eq(setrlimit(RLIMIT_AS, &r), 0);
    void *volatile probe = malloc(512u << 20); /* the cap works: half a gigabyte is refused */
    cr_assert_null(probe);
#endif
}

#endif
