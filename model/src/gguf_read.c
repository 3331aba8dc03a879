/* gguf_read.c: the GGUF v2/v3 reader over a file read into memory (or a caller's buffer), type tables and getters.
 *
 * Everything in the file is untrusted. The parser walks it with a cursor that checks every read
 * against the file size; every count is bounded by the bytes left before anything is allocated
 * for it (so n_kv = 2^62 fails at once instead of asking malloc for exabytes); every size and
 * offset is computed with overflow checks. After a successful open every pointer handed out lies
 * inside the mapping. Messages start with the path and name the section, the field, what was
 * expected and the file offset. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memra/fileio.h"
#include "memra/gguf.h"
#include "memra/source.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "memra reads GGUF (little-endian) by plain loads: a big-endian host needs byte swaps here"
#endif

/* Arrays nest at most this deep (an array at the top level is depth 1): bounds the recursion. */
#define GGUF_MAX_DEPTH 8u

/* Least bytes a key-value pair, a tensor info, a string and an array header can take in a file:
 * the bounds that let a count be checked against the bytes left before it is allocated. */
#define GGUF_MIN_KV_BYTES 14u     /* key length 8 + one key byte + type 4 + one value byte */
#define GGUF_MIN_TENSOR_BYTES 33u /* name length 8 + one name byte + n_dims 4 + ne 8 + type 4 + offset 8 */
#define GGUF_MIN_STRING_BYTES 8u
#define GGUF_MIN_ARRAY_BYTES 12u

/* ---- the handle ---- */

/* Open-addressing table from a name to index + 1 (0 = empty slot). */
typedef struct name_table {
    uint64_t *slots;
    uint64_t mask;
} name_table;

struct memra_gguf {
    char *path;
    const uint8_t *base;
    uint64_t size;
    bool mapped; /* base is our anonymous mapping holding the file's bytes, to munmap at close */
    /* Streamed (memra_gguf_open_streamed): base is a reservation of the file's size, readable only
     * where populate() read the file's bytes into it (the metadata, vectors, padding); the rest
     * is PROT_NONE and read through `source`. */
    bool streamed;
    uint64_t prefix;         /* streamed: bytes [0, prefix) are populated (the metadata, growing) */
    uint64_t resident_bytes; /* streamed: bytes read into the reservation */
    memra_source *source;    /* the file (streamed) or the bytes in memory */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    memra_gguf_kv *kvs;
    uint64_t n_tensors;
    memra_gguf_tensor *tensors;
    name_table kv_index;
    name_table tensor_index;
};

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static bool name_table_init(name_table *t, uint64_t n) {
    uint64_t cap = 8;
    while (cap < 2 * n)
        cap *= 2; /* n is bounded by the file size, so this cannot overflow */
    t->slots = calloc(cap, sizeof *t->slots);
    t->mask = cap - 1;
    return t->slots != NULL;
}

/* Finds name; name_at(ctx, i) gives the name of entry i. Returns index + 1, or 0 (with *slot the
 * free slot where it would go). */
static uint64_t name_table_find(const name_table *t, const char *name, const char *(*name_at)(const void *, uint64_t),
                                const void *ctx, uint64_t *slot) {
    if (!t->slots)
        return 0;
    uint64_t i = name_hash(name) & t->mask;
    while (t->slots[i]) {
        if (strcmp(name_at(ctx, t->slots[i] - 1), name) == 0)
            return t->slots[i];
        i = (i + 1) & t->mask;
    }
    if (slot)
        *slot = i;
    return 0;
}

static const char *kv_name_at(const void *ctx, uint64_t i) { return ((const memra_gguf *)ctx)->kvs[i].key; }
static const char *tensor_name_at(const void *ctx, uint64_t i) { return ((const memra_gguf *)ctx)->tensors[i].name; }

static void value_free(memra_gguf_value *v) {
    if (v->type != MEMRA_GGUF_ARRAY || !v->v.arr.items)
        return;
    memra_gguf_value *items = (memra_gguf_value *)v->v.arr.items;
    if (v->v.arr.elem_type == MEMRA_GGUF_ARRAY)
        for (uint64_t i = 0; i < v->v.arr.count; i++)
            value_free(&items[i]);
    free(items);
}

void memra_gguf_close(memra_gguf *g) {
    if (!g)
        return;
    for (uint64_t i = 0; g->kvs && i < g->n_kv; i++) {
        free((char *)g->kvs[i].key);
        value_free(&g->kvs[i].value);
    }
    for (uint64_t i = 0; g->tensors && i < g->n_tensors; i++)
        free((char *)g->tensors[i].name);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    if (g->mapped)
        munmap((void *)g->base, g->size);
    memra_source_close(g->source);
    free(g->path);
    free(g);
}

/* ---- the cursor ---- */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *path;
    memra_error *err;
    memra_gguf *g;       /* streamed: the handle whose reservation the cursor populates */
    memra_status status; /* of the last failure, for callers that pass no memra_error */
    /* What the parse allocates, counted against what memory allows (UINT64_MAX: no bound known):
     * the metadata costs more in memory than in the file (an array of short strings: 8 bytes a
     * string in the file, a parsed value of several times that in memory). */
    uint64_t budget, spent;
    bool budget_known; /* asked once the metadata passes GGUF_BUDGET_FREE: small files never ask */
    char budget_how[160];
} cursor;

/* Metadata allocations below this need no look at the memory available (a fuzzer parses millions
 * of small files; /proc is read once a file's metadata grows past it). */
#define GGUF_BUDGET_FREE (16ull << 20)

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void
cur_fail(cursor *c, memra_status status, const char *fmt, ...) {
    char msg[MEMRA_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->status = memra_fail(c->err, status, "%s", msg);
}

static uint64_t cur_left(const cursor *c) { return c->size - c->pos; }

/* Streamed: reads file bytes [at, at + n), rounded out to pages, into the reservation, which is
 * readable there from then on (and only there). */
static memra_status populate(memra_gguf *g, uint64_t at, uint64_t n, memra_error *err) {
    if (!g->streamed || n == 0)
        return MEMRA_OK;
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t a = at / page * page, b = (at + n + page - 1) / page * page; /* at + n <= size < 2^63 */
    if (b > g->size)
        b = g->size;
    uint8_t *p = (uint8_t *)g->base + a;
    uint64_t len = b - a;
    if (mprotect(p, (size_t)len, PROT_READ | PROT_WRITE) != 0)
        return memra_fail(err, MEMRA_E_NOMEM, "%s: cannot make room for %" PRIu64 " bytes of the file: %s", g->path,
                          len, strerror(errno));
    memra_status st = memra_source_read(g->source, a, len, p, err);
    mprotect(p, (size_t)len, PROT_READ); /* read-only from here; failure changes nothing */
    g->resident_bytes += len;
    return st;
}

/* Streamed: bytes [0, end) of the metadata are in memory (the prefix grows by doubling). */
static bool cur_have(cursor *c, uint64_t end) {
    memra_gguf *g = c->g;
    if (!g || !g->streamed || end <= g->prefix)
        return true;
    uint64_t want = g->prefix * 2 > end ? g->prefix * 2 : end;
    if (want < ((uint64_t)64 << 10))
        want = (uint64_t)64 << 10;
    if (want > g->size)
        want = g->size;
    memra_status st = populate(g, g->prefix, want - g->prefix, c->err);
    if (st != MEMRA_OK) {
        c->status = st;
        return false;
    }
    g->prefix = want;
    return true;
}

/* Fails unless n bytes are left; `what` names the field being read. */
static bool cur_need(cursor *c, uint64_t n, const char *what) {
    if (n <= cur_left(c))
        return cur_have(c, c->pos + n);
    cur_fail(c, MEMRA_E_FORMAT,
             "%s: truncated in %s: need %" PRIu64 " bytes at offset %" PRIu64 ", only %" PRIu64
             " left (file size %" PRIu64 ")",
             c->path, what, n, c->pos, cur_left(c), c->size);
    return false;
}

static bool cur_u32(cursor *c, uint32_t *out, const char *what) {
    if (!cur_need(c, 4, what))
        return false;
    memcpy(out, c->base + c->pos, 4);
    c->pos += 4;
    return true;
}

static bool cur_u64(cursor *c, uint64_t *out, const char *what) {
    if (!cur_need(c, 8, what))
        return false;
    memcpy(out, c->base + c->pos, 8);
    c->pos += 8;
    return true;
}

/* A GGUF string: u64 length and bytes, left in the mapping. */
static bool cur_str(cursor *c, memra_gguf_str *out, const char *what) {
    uint64_t at = c->pos, len;
    if (!cur_u64(c, &len, what))
        return false;
    if (len > cur_left(c)) {
        cur_fail(c, MEMRA_E_FORMAT,
                 "%s: %s: string length %" PRIu64 " at offset %" PRIu64 " runs past the end of the file (%" PRIu64
                 " bytes left)",
                 c->path, what, len, at, cur_left(c));
        return false;
    }
    if (!cur_have(c, c->pos + len))
        return false;
    out->ptr = (const char *)c->base + c->pos;
    out->len = len;
    c->pos += len;
    return true;
}

/* Counts `bytes` the parse is about to allocate for `what`; refuses (MEMRA_E_NOMEM, naming the
 * need and what is available) before the allocation when they do not fit. */
static bool cur_spend(cursor *c, uint64_t bytes, const char *what) {
    if (!c->budget_known && (bytes > GGUF_BUDGET_FREE || c->spent > GGUF_BUDGET_FREE - bytes)) {
        /* The file's bytes are in memory already: the metadata's own allocations must fit in what
         * is left. */
        c->budget_known = true;
        if (memra_memory_available(&c->budget, c->budget_how, sizeof c->budget_how, NULL) != MEMRA_OK)
            c->budget = UINT64_MAX;
        else /* what is spent so far is in use already, so no longer counted as available */
            c->budget = c->budget > UINT64_MAX - c->spent ? UINT64_MAX - 1 : c->budget + c->spent;
    }
    if (!c->budget_known || c->budget == UINT64_MAX || (bytes <= c->budget && c->spent <= c->budget - bytes)) {
        c->spent += bytes;
        return true;
    }
    uint64_t need = c->spent + bytes < c->spent ? UINT64_MAX : c->spent + bytes;
    cur_fail(c, MEMRA_E_NOMEM,
             "%s: the file needs more memory than is available: its metadata takes %.2f MiB in memory (%s: %.2f "
             "MiB), on top of the %.2f MiB of the file itself, more than the %.2f MiB available (%s)",
             c->path, need / 1048576.0, what, bytes / 1048576.0, c->size / 1048576.0, c->budget / 1048576.0,
             c->budget_how);
    return false;
}

/* A key or tensor name: nonempty, no NUL or other control byte inside, copied NUL-terminated. */
static char *cur_name(cursor *c, const char *what) {
    uint64_t at = c->pos;
    memra_gguf_str s;
    if (!cur_str(c, &s, what))
        return NULL;
    if (s.len == 0) {
        cur_fail(c, MEMRA_E_FORMAT, "%s: %s at offset %" PRIu64 " is empty, expected a nonempty name", c->path, what,
                 at);
        return NULL;
    }
    if (memchr(s.ptr, '\0', s.len)) {
        cur_fail(c, MEMRA_E_FORMAT, "%s: %s at offset %" PRIu64 " contains a NUL byte", c->path, what, at);
        return NULL;
    }
    /* Names end up in messages and on terminals: a control byte (an escape sequence) is refused. */
    for (uint64_t i = 0; i < s.len; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        if (ch < 0x20 || ch == 0x7f) {
            cur_fail(c, MEMRA_E_FORMAT,
                     "%s: %s at offset %" PRIu64 " contains the control byte 0x%02x at index %" PRIu64, c->path, what,
                     at, ch, i);
            return NULL;
        }
    }
    if (!cur_spend(c, s.len + 1, what))
        return NULL;
    char *copy = malloc(s.len + 1);
    if (!copy) {
        cur_fail(c, MEMRA_E_NOMEM, "%s: %s: out of memory for %" PRIu64 " bytes", c->path, what, s.len + 1);
        return NULL;
    }
    memcpy(copy, s.ptr, s.len);
    copy[s.len] = '\0';
    return copy;
}

/* ---- metadata values ---- */

static bool read_value(cursor *c, uint32_t type, memra_gguf_value *out, const char *key, unsigned depth);

static bool read_scalar(cursor *c, uint32_t type, memra_gguf_value *out, const char *key) {
    uint64_t size = memra_gguf_scalar_size(type), at = c->pos;
    char what[160];
    snprintf(what, sizeof what, "the %s value of '%s'", memra_gguf_type_name(type), key);
    if (!cur_need(c, size, what))
        return false;
    const uint8_t *p = c->base + c->pos;
    c->pos += size;
    out->type = (memra_gguf_type)type;
    switch (type) {
    case MEMRA_GGUF_UINT8: out->v.u64 = p[0]; break;
    case MEMRA_GGUF_INT8: out->v.i64 = (int8_t)p[0]; break;
    case MEMRA_GGUF_UINT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        out->v.u64 = x;
        break;
    }
    case MEMRA_GGUF_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        out->v.i64 = x;
        break;
    }
    case MEMRA_GGUF_UINT32: {
        uint32_t x;
        memcpy(&x, p, 4);
        out->v.u64 = x;
        break;
    }
    case MEMRA_GGUF_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        out->v.i64 = x;
        break;
    }
    case MEMRA_GGUF_UINT64: memcpy(&out->v.u64, p, 8); break;
    case MEMRA_GGUF_INT64: memcpy(&out->v.i64, p, 8); break;
    case MEMRA_GGUF_FLOAT32: {
        float x;
        memcpy(&x, p, 4);
        out->v.f64 = x;
        break;
    }
    case MEMRA_GGUF_FLOAT64: memcpy(&out->v.f64, p, 8); break;
    case MEMRA_GGUF_BOOL:
        if (p[0] > 1) {
            cur_fail(c, MEMRA_E_FORMAT, "%s: bool value of '%s' at offset %" PRIu64 " is %u, expected 0 or 1", c->path,
                     key, at, p[0]);
            return false;
        }
        out->v.u64 = p[0];
        break;
    }
    return true;
}

static bool read_array(cursor *c, memra_gguf_value *out, const char *key, unsigned depth) {
    uint64_t at = c->pos, count;
    uint32_t elem_type;
    char what[160];
    snprintf(what, sizeof what, "the array header of '%s'", key);
    if (!cur_u32(c, &elem_type, what) || !cur_u64(c, &count, what))
        return false;
    if (elem_type >= MEMRA_GGUF_TYPE_COUNT) {
        cur_fail(c, MEMRA_E_FORMAT,
                 "%s: array of '%s' at offset %" PRIu64 " has unknown element type %" PRIu32 ", expected 0..12",
                 c->path, key, at, elem_type);
        return false;
    }
    if (elem_type == MEMRA_GGUF_ARRAY && depth + 1 > GGUF_MAX_DEPTH) {
        cur_fail(c, MEMRA_E_FORMAT, "%s: arrays of '%s' nest deeper than %u levels at offset %" PRIu64, c->path, key,
                 GGUF_MAX_DEPTH, at);
        return false;
    }
    uint64_t min_elem = memra_gguf_scalar_size(elem_type);
    if (elem_type == MEMRA_GGUF_STRING)
        min_elem = GGUF_MIN_STRING_BYTES;
    else if (elem_type == MEMRA_GGUF_ARRAY)
        min_elem = GGUF_MIN_ARRAY_BYTES;
    if (count > cur_left(c) / min_elem) {
        cur_fail(c, MEMRA_E_FORMAT,
                 "%s: array of '%s' at offset %" PRIu64 ": count %" PRIu64
                 " of %s runs past the end of the file (%" PRIu64 " bytes left, at least %" PRIu64 " per element)",
                 c->path, key, at, count, memra_gguf_type_name(elem_type), cur_left(c), min_elem);
        return false;
    }
    out->type = MEMRA_GGUF_ARRAY;
    out->v.arr.elem_type = (memra_gguf_type)elem_type;
    out->v.arr.count = count;
    out->v.arr.data = NULL;
    out->v.arr.items = NULL;
    if (elem_type != MEMRA_GGUF_STRING && elem_type != MEMRA_GGUF_ARRAY) {
        if (!cur_have(c, c->pos + count * min_elem))
            return false;
        const uint8_t *p = c->base + c->pos;
        if (elem_type == MEMRA_GGUF_BOOL) {
            for (uint64_t i = 0; i < count; i++) {
                if (p[i] > 1) {
                    cur_fail(c, MEMRA_E_FORMAT,
                             "%s: bool element %" PRIu64 " of '%s' at offset %" PRIu64 " is %u, expected 0 or 1",
                             c->path, i, key, c->pos + i, p[i]);
                    return false;
                }
            }
        }
        out->v.arr.data = p;
        c->pos += count * min_elem; /* checked above */
        return true;
    }
    if (count == 0)
        return true;
    char need_what[200];
    snprintf(need_what, sizeof need_what, "the %" PRIu64 " %s elements of '%.60s', %zu bytes each", count,
             memra_gguf_type_name(elem_type), key, sizeof(memra_gguf_value));
    if (!cur_spend(c, count * (uint64_t)sizeof(memra_gguf_value), need_what)) /* count is bounded by the file */
        return false;
    memra_gguf_value *items = calloc(count, sizeof *items);
    if (!items) {
        cur_fail(c, MEMRA_E_NOMEM, "%s: out of memory for %" PRIu64 " elements of '%s'", c->path, count, key);
        return false;
    }
    out->v.arr.items = items;
    for (uint64_t i = 0; i < count; i++) {
        if (elem_type == MEMRA_GGUF_STRING) {
            snprintf(what, sizeof what, "string element %" PRIu64 " of '%s'", i, key);
            items[i].type = MEMRA_GGUF_STRING;
            if (!cur_str(c, &items[i].v.str, what))
                return false;
        } else {
            /* Elements not yet read are zeroed (type UINT8), so value_free skips them. */
            if (!read_array(c, &items[i], key, depth + 1))
                return false;
        }
    }
    return true;
}

static bool read_value(cursor *c, uint32_t type, memra_gguf_value *out, const char *key, unsigned depth) {
    if (type == MEMRA_GGUF_ARRAY)
        return read_array(c, out, key, depth + 1);
    if (type == MEMRA_GGUF_STRING) {
        char what[160];
        snprintf(what, sizeof what, "the string value of '%s'", key);
        out->type = MEMRA_GGUF_STRING;
        return cur_str(c, &out->v.str, what);
    }
    return read_scalar(c, type, out, key);
}

/* ---- sections ---- */

static memra_status parse_header(cursor *c, memra_gguf *g) {
    uint32_t magic;
    if (!cur_u32(c, &magic, "the header (magic)"))
        return MEMRA_E_FORMAT;
    if (magic != MEMRA_GGUF_MAGIC) {
        const uint8_t *m = c->base;
        return memra_fail(
            c->err, MEMRA_E_FORMAT,
            "%s: not a GGUF file: magic at offset 0 is %02x %02x %02x %02x, expected \"GGUF\" (47 47 55 46)", c->path,
            m[0], m[1], m[2], m[3]);
    }
    if (!cur_u32(c, &g->version, "the header (version)"))
        return MEMRA_E_FORMAT;
    if (g->version == 1)
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: GGUF version 1 (32-bit counts, 2023) is not supported, expected version 2 or 3; convert "
                          "the file with a current llama.cpp",
                          c->path);
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: big-endian GGUF (version field %08" PRIx32 ") is not supported",
                          c->path, g->version);
    if (g->version != 2 && g->version != 3)
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: header at offset 4: GGUF version %" PRIu32 ", expected 2 or 3",
                          c->path, g->version);
    uint64_t n_tensors, n_kv;
    if (!cur_u64(c, &n_tensors, "the header (n_tensors)") || !cur_u64(c, &n_kv, "the header (n_kv)"))
        return MEMRA_E_FORMAT;
    /* n_tensors is bounded once the metadata is read, before the tensor infos are allocated. */
    uint64_t left = cur_left(c);
    if (n_kv > left / GGUF_MIN_KV_BYTES)
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: header at offset 16: n_kv %" PRIu64 " key-value pairs cannot fit in the %" PRIu64
                          " bytes left (at least %u bytes each)",
                          c->path, n_kv, left, GGUF_MIN_KV_BYTES);
    g->n_kv = n_kv;
    g->n_tensors = n_tensors;
    return MEMRA_OK;
}

static memra_status parse_kvs(cursor *c, memra_gguf *g) {
    uint64_t n = g->n_kv;
    g->n_kv = 0; /* counts the pairs read so far, for close() */
    if (n == 0)
        return MEMRA_OK;
    if (!cur_spend(c, n * (uint64_t)(sizeof *g->kvs + 4 * sizeof(uint64_t)), "the key-value pairs"))
        return c->status;
    g->kvs = calloc(n, sizeof *g->kvs);
    if (!g->kvs || !name_table_init(&g->kv_index, n))
        return memra_fail(c->err, MEMRA_E_NOMEM, "%s: out of memory for %" PRIu64 " key-value pairs", c->path, n);
    for (uint64_t i = 0; i < n; i++) {
        char what[160];
        uint64_t at = c->pos;
        snprintf(what, sizeof what, "metadata key #%" PRIu64, i);
        char *key = cur_name(c, what);
        if (!key)
            return c->status;
        memra_gguf_kv *kv = &g->kvs[g->n_kv++];
        kv->key = key;
        uint64_t slot = 0, dup = name_table_find(&g->kv_index, key, kv_name_at, g, &slot);
        if (dup)
            return memra_fail(c->err, MEMRA_E_FORMAT,
                              "%s: metadata key #%" PRIu64 " '%s' at offset %" PRIu64 " duplicates key #%" PRIu64,
                              c->path, i, key, at, dup - 1);
        g->kv_index.slots[slot] = i + 1;
        uint32_t type;
        at = c->pos;
        snprintf(what, sizeof what, "the value type of metadata key '%.40s'", key);
        if (!cur_u32(c, &type, what))
            return MEMRA_E_FORMAT;
        if (type >= MEMRA_GGUF_TYPE_COUNT)
            return memra_fail(c->err, MEMRA_E_FORMAT,
                              "%s: metadata key '%s': unknown value type %" PRIu32 " at offset %" PRIu64
                              ", expected 0..12",
                              c->path, key, type, at);
        if (!read_value(c, type, &kv->value, key, 0))
            return c->status;
    }
    return MEMRA_OK;
}

static memra_status parse_alignment(cursor *c, memra_gguf *g) {
    g->alignment = MEMRA_GGUF_DEFAULT_ALIGNMENT;
    const memra_gguf_value *v = memra_gguf_find(g, "general.alignment");
    if (!v)
        return MEMRA_OK;
    if (v->type != MEMRA_GGUF_UINT32)
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: metadata 'general.alignment' has type %s, expected uint32",
                          c->path, memra_gguf_type_name(v->type));
    if (v->v.u64 == 0 || (v->v.u64 & (v->v.u64 - 1)) != 0)
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: metadata 'general.alignment' is %" PRIu64 ", expected a nonzero power of two", c->path,
                          v->v.u64);
    g->alignment = (uint32_t)v->v.u64;
    return MEMRA_OK;
}

static memra_status parse_tensor_info(cursor *c, memra_gguf *g, uint64_t i) {
    memra_gguf_tensor *t = &g->tensors[i];
    char what[160];
    uint64_t at = c->pos;
    snprintf(what, sizeof what, "the name of tensor info #%" PRIu64, i);
    char *name = cur_name(c, what);
    if (!name)
        return c->status;
    t->name = name;
    g->n_tensors = i + 1; /* counts the names owned, for close() */
    uint64_t slot = 0, dup = name_table_find(&g->tensor_index, name, tensor_name_at, g, &slot);
    if (dup)
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: tensor info #%" PRIu64 " at offset %" PRIu64
                          ": duplicate tensor name '%s' (also tensor info #%" PRIu64 ")",
                          c->path, i, at, name, dup - 1);
    g->tensor_index.slots[slot] = i + 1;
    snprintf(what, sizeof what, "tensor info '%.48s'", name);
    at = c->pos;
    if (!cur_u32(c, &t->n_dims, what))
        return MEMRA_E_FORMAT;
    if (t->n_dims < 1 || t->n_dims > MEMRA_GGUF_MAX_DIMS)
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: tensor '%s': n_dims %" PRIu32 " at offset %" PRIu64 ", expected 1..%u", c->path, name,
                          t->n_dims, at, MEMRA_GGUF_MAX_DIMS);
    t->n_elems = 1;
    for (uint32_t d = 0; d < MEMRA_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        at = c->pos;
        if (!cur_u64(c, &t->ne[d], what))
            return MEMRA_E_FORMAT;
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX)
            return memra_fail(c->err, MEMRA_E_FORMAT,
                              "%s: tensor '%s': dimension %" PRIu32 " is %" PRIu64 " at offset %" PRIu64
                              ", expected 1..2^63-1",
                              c->path, name, d, t->ne[d], at);
        if (__builtin_mul_overflow(t->n_elems, t->ne[d], &t->n_elems))
            return memra_fail(c->err, MEMRA_E_FORMAT,
                              "%s: tensor '%s': the product of its dimensions overflows 64 bits (at dimension %" PRIu32
                              ", offset %" PRIu64 ")",
                              c->path, name, d, at);
    }
    at = c->pos;
    if (!cur_u32(c, &t->type, what))
        return MEMRA_E_FORMAT;
    uint64_t block_elems, block_bytes;
    if (!memra_tensor_type_block(t->type, &block_elems, &block_bytes))
        return memra_fail(c->err, MEMRA_E_FORMAT, "%s: tensor '%s': unknown tensor type %" PRIu32 " at offset %" PRIu64,
                          c->path, name, t->type, at);
    if (t->ne[0] % block_elems != 0)
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: tensor '%s': %" PRIu64 " columns are not a multiple of the %s block of %" PRIu64,
                          c->path, name, t->ne[0], memra_tensor_type_name(t->type), block_elems);
    /* n_elems did not overflow and block_elems divides ne[0], so only the byte count can. */
    if (__builtin_mul_overflow(t->n_elems / block_elems, block_bytes, &t->n_bytes))
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: tensor '%s': its size in bytes (%" PRIu64 " elements of %s) overflows 64 bits", c->path,
                          name, t->n_elems, memra_tensor_type_name(t->type));
    at = c->pos;
    if (!cur_u64(c, &t->offset, what))
        return MEMRA_E_FORMAT;
    return MEMRA_OK;
}

static int cmp_by_offset(const void *a, const void *b) {
    const memra_gguf_tensor *x = *(const memra_gguf_tensor *const *)a, *y = *(const memra_gguf_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x < y ? -1 : (x > y);
}

/* Padding must be zero: a non-zero byte where the format puts padding is data that no tensor or
 * key accounts for. */
static memra_status zero_bytes(cursor *c, uint64_t at, uint64_t n, const char *what) {
    if (c->g && c->g->streamed && at + n > c->g->prefix) {
        memra_status st = populate(c->g, at, n, c->err);
        if (st != MEMRA_OK)
            return st;
    }
    for (uint64_t i = 0; i < n; i++)
        if (c->base[at + i] != 0)
            return memra_fail(c->err, MEMRA_E_FORMAT,
                              "%s: %s: byte at offset %" PRIu64 " is 0x%02x, expected 0 (the file holds data that "
                              "no key or tensor accounts for)",
                              c->path, what, at + i, c->base[at + i]);
    return MEMRA_OK;
}

/* Places every tensor in the data section: aligned, inside the file, no two overlapping, and
 * nothing else in it but zero padding shorter than the alignment. */
static memra_status place_tensors(cursor *c, memra_gguf *g) {
    uint64_t align = g->alignment, pad = (align - c->pos % align) % align;
    if (g->n_tensors == 0) {
        /* No data to find: a file that ends without the padding is accepted; one with more bytes
         * than the padding holds something no tensor accounts for. */
        g->data_offset = pad <= cur_left(c) ? c->pos + pad : c->size;
        if (cur_left(c) > pad)
            return memra_fail(c->err, MEMRA_E_FORMAT,
                              "%s: %" PRIu64 " bytes after the metadata at offset %" PRIu64
                              " that no tensor accounts for (the file has no tensors)",
                              c->path, cur_left(c), c->pos);
        return zero_bytes(c, c->pos, c->size - c->pos, "the padding after the metadata");
    }
    if (pad > cur_left(c))
        return memra_fail(c->err, MEMRA_E_FORMAT,
                          "%s: truncated in the padding before the data section: need %" PRIu64
                          " bytes at offset %" PRIu64 " to reach alignment %" PRIu64 ", only %" PRIu64 " left",
                          c->path, pad, c->pos, align, cur_left(c));
    memra_status pst = zero_bytes(c, c->pos, pad, "the padding before the data section");
    if (pst != MEMRA_OK)
        return pst;
    g->data_offset = c->pos + pad;
    uint64_t data_size = c->size - g->data_offset;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        memra_gguf_tensor *t = &g->tensors[i];
        if (t->offset % align != 0)
            return memra_fail(c->err, MEMRA_E_FORMAT,
                              "%s: tensor '%s': data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                              c->path, t->name, t->offset, align);
        if (t->offset > data_size || t->n_bytes > data_size - t->offset)
            return memra_fail(c->err, MEMRA_E_FORMAT,
                              "%s: tensor '%s': data [%" PRIu64 ", +%" PRIu64 ") at data offset %" PRIu64
                              " runs past the end of the file (data section has %" PRIu64
                              " bytes from file offset %" PRIu64 ")",
                              c->path, t->name, t->offset, t->n_bytes, t->offset, data_size, g->data_offset);
        t->data = c->base + g->data_offset + t->offset;
    }
    const memra_gguf_tensor **order = malloc(g->n_tensors * sizeof *order);
    if (!order)
        return memra_fail(c->err, MEMRA_E_NOMEM, "%s: out of memory", c->path);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof *order, cmp_by_offset);
    memra_status st = MEMRA_OK;
    for (uint64_t i = 1; i < g->n_tensors && st == MEMRA_OK; i++) {
        const memra_gguf_tensor *a = order[i - 1], *b = order[i];
        if (a->offset + a->n_bytes > b->offset) /* both ends lie inside the file: no overflow */
            st = memra_fail(
                c->err, MEMRA_E_FORMAT,
                "%s: tensors '%s' (data [%" PRIu64 ", %" PRIu64 ")) and '%s' (data [%" PRIu64 ", %" PRIu64 ")) overlap",
                c->path, a->name, a->offset, a->offset + a->n_bytes, b->name, b->offset, b->offset + b->n_bytes);
    }
    /* The data section holds the tensors and nothing else: every gap (before the first tensor,
     * between two, after the last) is padding, shorter than the alignment and zero. A file whose
     * n_tensors, offsets or general.alignment were edited leaves a gap that decodes silently as
     * another model otherwise. */
    uint64_t end = 0;
    for (uint64_t i = 0; i <= g->n_tensors && st == MEMRA_OK; i++) {
        uint64_t next = i < g->n_tensors ? order[i]->offset : data_size;
        if (next - end >= align)
            st = memra_fail(c->err, MEMRA_E_FORMAT,
                            "%s: %" PRIu64 " bytes of the data section at file offset %" PRIu64 " %s%s%s: at least the "
                            "alignment %" PRIu64 " (n_tensors, a tensor offset or general.alignment is wrong)",
                            c->path, next - end, g->data_offset + end,
                            i < g->n_tensors ? "lie before tensor '" : "follow the last tensor",
                            i < g->n_tensors ? order[i]->name : "",
                            i < g->n_tensors ? "' that no tensor accounts for" : "", align);
        else
            st = zero_bytes(c, g->data_offset + end, next - end, "padding in the data section");
        if (i < g->n_tensors)
            end = order[i]->offset + order[i]->n_bytes;
    }
    free(order);
    return st;
}

static memra_status gguf_parse(memra_gguf *g, memra_error *err) {
    cursor c = {.base = g->base, .size = g->size, .pos = 0, .path = g->path, .err = err, .g = g, .budget = UINT64_MAX};
    memra_status st = parse_header(&c, g);
    if (st != MEMRA_OK)
        return st;
    uint64_t n_tensors = g->n_tensors;
    g->n_tensors = 0;
    if ((st = parse_kvs(&c, g)) != MEMRA_OK)
        return st;
    if ((st = parse_alignment(&c, g)) != MEMRA_OK)
        return st;
    if (n_tensors > 0) {
        /* Re-check against the bytes actually left now that the metadata is read. */
        if (n_tensors > cur_left(&c) / GGUF_MIN_TENSOR_BYTES)
            return memra_fail(err, MEMRA_E_FORMAT,
                              "%s: header at offset 8: n_tensors %" PRIu64 " tensor infos cannot fit in the %" PRIu64
                              " bytes left at offset %" PRIu64 " (at least %u bytes each)",
                              g->path, n_tensors, cur_left(&c), c.pos, GGUF_MIN_TENSOR_BYTES);
        if (!cur_spend(&c, n_tensors * (uint64_t)(sizeof *g->tensors + 5 * sizeof(uint64_t)), "the tensor infos"))
            return c.status;
        g->tensors = calloc(n_tensors, sizeof *g->tensors);
        if (!g->tensors || !name_table_init(&g->tensor_index, n_tensors))
            return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory for %" PRIu64 " tensor infos", g->path, n_tensors);
    }
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((st = parse_tensor_info(&c, g, i)) != MEMRA_OK)
            return st;
    if ((st = place_tensors(&c, g)) != MEMRA_OK)
        return st;
    /* Streamed: the vectors (norms, biases, rope factors) are read now; the matrices stay in the
     * file for a backend to read through the source. */
    for (uint64_t i = 0; g->streamed && i < g->n_tensors; i++)
        if (memra_gguf_tensor_resident(g, &g->tensors[i]) &&
            (st = populate(g, g->data_offset + g->tensors[i].offset, g->tensors[i].n_bytes, err)) != MEMRA_OK)
            return st;
    return MEMRA_OK;
}

bool memra_gguf_tensor_resident(const memra_gguf *g, const memra_gguf_tensor *t) {
    if (!g->streamed)
        return true;
    bool vector = t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1;
    return t->n_bytes <= MEMRA_GGUF_STREAM_SMALL || (vector && t->n_bytes <= MEMRA_GGUF_STREAM_VECTOR);
}

static memra_status gguf_new(const char *name, memra_gguf **out, memra_error *err) {
    memra_gguf *g = calloc(1, sizeof *g);
    if (g)
        g->path = strdup(name ? name : "<memory>");
    if (!g || !g->path) {
        free(g);
        return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory", name ? name : "<memory>");
    }
    *out = g;
    return MEMRA_OK;
}

memra_status memra_gguf_open_memory(const void *data, size_t size, const char *name, memra_gguf **out,
                                    memra_error *err) {
    if (!out)
        return memra_fail(err, MEMRA_E_INVALID, "memra_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size > 0)
        return memra_fail(err, MEMRA_E_INVALID, "%s: data is NULL", name ? name : "<memory>");
    memra_gguf *g = NULL;
    memra_status st = gguf_new(name, &g, err);
    if (st != MEMRA_OK)
        return st;
    g->base = data;
    g->size = size;
    if ((st = memra_source_open_memory(data, size, g->path, &g->source, err)) != MEMRA_OK ||
        (st = gguf_parse(g, err)) != MEMRA_OK) {
        memra_gguf_close(g);
        return st;
    }
    *out = g;
    return MEMRA_OK;
}

/* The file's bytes, read into private memory. Not a mapping of the file: a file truncated while
 * mapped kills the reader with SIGBUS at its next touch of a lost page, and the model is the
 * untrusted input a gate must survive. Once read, the bytes in use are the bytes that were checked
 * and hashed, whatever happens to the file. A file whose size changes while it is read is an
 * error naming it. */
static memra_status read_file(int fd, const char *path, uint64_t size, void **out, memra_error *err) {
    if (size > (uint64_t)SIZE_MAX)
        return memra_fail(err, MEMRA_E_NOMEM, "%s: %" PRIu64 " bytes do not fit in this process's address space", path,
                          size);
    uint64_t avail = 0;
    char how[160] = "";
    if (memra_memory_available(&avail, how, sizeof how, NULL) == MEMRA_OK && size > avail)
        return memra_fail(err, MEMRA_E_NOMEM,
                          "%s: the file's %.2f GiB are read into memory, more than the %.2f GiB available (%s)", path,
                          size / 1073741824.0, avail / 1073741824.0, how);
    void *buf = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return memra_fail(err, MEMRA_E_NOMEM, "%s: cannot allocate %" PRIu64 " bytes to read the file into: %s", path,
                          size, strerror(errno));
    uint64_t done = 0;
    while (done < size) {
        size_t chunk = size - done < ((size_t)1 << 26) ? (size_t)(size - done) : ((size_t)1 << 26);
        ssize_t n = pread(fd, (char *)buf + done, chunk, (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            memra_status st =
                n < 0 ? memra_fail(err, MEMRA_E_IO, "%s: read failed at offset %" PRIu64 ": %s", path, done,
                                   strerror(errno))
                      : memra_fail(err, MEMRA_E_IO,
                                   "%s: the file ended at %" PRIu64 " bytes while it was read (it had %" PRIu64
                                   "): it was truncated or replaced while opening",
                                   path, done, size);
            munmap(buf, (size_t)size);
            return st;
        }
        done += (uint64_t)n;
    }
    struct stat after;
    if (fstat(fd, &after) != 0 || (uint64_t)after.st_size != size) {
        munmap(buf, (size_t)size);
        return memra_fail(err, MEMRA_E_IO, "%s: the file changed size while it was read (%" PRIu64 " bytes, now %lld)",
                          path, size, (long long)after.st_size);
    }
    mprotect(buf, (size_t)size, PROT_READ); /* the model is read-only from here; failure changes nothing */
    *out = buf;
    return MEMRA_OK;
}

memra_status memra_gguf_open(const char *path, memra_gguf **out, memra_error *err) {
    if (!out || !path)
        return memra_fail(err, MEMRA_E_INVALID, "memra_gguf_open: path or out is NULL");
    *out = NULL;
    memra_gguf *g = NULL;
    memra_status st = gguf_new(path, &g, err);
    if (st != MEMRA_OK)
        return st;
    /* O_NONBLOCK: opening a FIFO for reading must not wait for a writer; the type is checked
     * before a byte is read. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        st = memra_fail(err, MEMRA_E_IO, "%s: cannot open: %s", path, strerror(errno));
        goto err_free;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = memra_fail(err, MEMRA_E_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto err_close;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = memra_fail(err, MEMRA_E_IO, "%s: not a regular file (%s): a model must be a GGUF file", path,
                        memra_file_type_name(sb.st_mode));
        goto err_close;
    }
    if (sb.st_size == 0) {
        st = memra_fail(err, MEMRA_E_FORMAT, "%s: truncated in the header (magic): the file is empty", path);
        goto err_close;
    }
    void *data = NULL;
    st = read_file(fd, path, (uint64_t)sb.st_size, &data, err);
    if (st != MEMRA_OK)
        goto err_close;
    close(fd);
    g->base = data;
    g->size = (uint64_t)sb.st_size;
    g->mapped = true;
    if ((st = memra_source_open_memory(data, g->size, path, &g->source, err)) != MEMRA_OK ||
        (st = gguf_parse(g, err)) != MEMRA_OK)
        goto err_free;
    *out = g;
    return MEMRA_OK;

err_close:
    close(fd);
err_free:
    memra_gguf_close(g);
    return st;
}

memra_status memra_gguf_open_streamed(const char *path, memra_gguf **out, memra_error *err) {
    if (!out || !path)
        return memra_fail(err, MEMRA_E_INVALID, "memra_gguf_open_streamed: path or out is NULL");
    *out = NULL;
    memra_gguf *g = NULL;
    memra_status st = gguf_new(path, &g, err);
    if (st != MEMRA_OK)
        return st;
    if ((st = memra_source_open_file(path, &g->source, err)) != MEMRA_OK)
        goto err_free;
    g->size = memra_source_size(g->source);
    if (g->size == 0) {
        st = memra_fail(err, MEMRA_E_FORMAT, "%s: truncated in the header (magic): the file is empty", path);
        goto err_free;
    }
    if (g->size > (uint64_t)SIZE_MAX / 2) {
        st = memra_fail(err, MEMRA_E_NOMEM, "%s: %" PRIu64 " bytes do not fit in this process's address space", path,
                        g->size);
        goto err_free;
    }
    /* Address space only: no page of it is backed until populate() reads the file into it. */
    void *res = mmap(NULL, (size_t)g->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED) {
        st = memra_fail(err, MEMRA_E_NOMEM, "%s: cannot reserve %" PRIu64 " bytes of address space: %s", path, g->size,
                        strerror(errno));
        goto err_free;
    }
    g->base = res;
    g->mapped = true;
    g->streamed = true;
    memra_source_set_base(g->source, res);
    if ((st = gguf_parse(g, err)) != MEMRA_OK || (st = memra_source_check(g->source, err)) != MEMRA_OK)
        goto err_free;
    *out = g;
    return MEMRA_OK;

err_free:
    memra_gguf_close(g);
    return st;
}

/* ---- accessors ---- */

bool memra_gguf_streamed(const memra_gguf *g) { return g->streamed; }
uint64_t memra_gguf_resident_bytes(const memra_gguf *g) { return g->streamed ? g->resident_bytes : g->size; }
const memra_source *memra_gguf_source(const memra_gguf *g) { return g->source; }

const char *memra_gguf_path(const memra_gguf *g) { return g->path; }
uint32_t memra_gguf_version(const memra_gguf *g) { return g->version; }
uint32_t memra_gguf_alignment(const memra_gguf *g) { return g->alignment; }
uint64_t memra_gguf_file_size(const memra_gguf *g) { return g->size; }
const void *memra_gguf_file_data(const memra_gguf *g) { return g->base; }
uint64_t memra_gguf_data_offset(const memra_gguf *g) { return g->data_offset; }
uint64_t memra_gguf_kv_count(const memra_gguf *g) { return g->n_kv; }
uint64_t memra_gguf_tensor_count(const memra_gguf *g) { return g->n_tensors; }

const memra_gguf_kv *memra_gguf_kv_at(const memra_gguf *g, uint64_t i) { return i < g->n_kv ? &g->kvs[i] : NULL; }

const memra_gguf_tensor *memra_gguf_tensor_at(const memra_gguf *g, uint64_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const memra_gguf_value *memra_gguf_find(const memra_gguf *g, const char *key) {
    if (!g || !key)
        return NULL;
    uint64_t i = name_table_find(&g->kv_index, key, kv_name_at, g, NULL);
    return i ? &g->kvs[i - 1].value : NULL;
}

const memra_gguf_tensor *memra_gguf_find_tensor(const memra_gguf *g, const char *name) {
    if (!g || !name)
        return NULL;
    uint64_t i = name_table_find(&g->tensor_index, name, tensor_name_at, g, NULL);
    return i ? &g->tensors[i - 1] : NULL;
}
