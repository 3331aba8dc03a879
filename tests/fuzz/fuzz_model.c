/* fuzz_model.c: libFuzzer target for the model description (memra_model_describe): a small valid
 * model of one of the synthetic presets, rewritten with the mutations the input lists.
 *
 * fuzz_gguf covers the reader, whose checks stop most mutated bytes; this target mutates at the
 * level the description reads instead, so that its own checks (hyperparameters, tensor names,
 * shapes and types, their products) see the inputs. Byte 0 picks the preset (those whose name
 * holds "tiny", Q8_0); then every 4 bytes are one mutation (op, index, two value bytes):
 *   0  an integer key set to a value from the two bytes (small, or a wild 32- or 64-bit one)
 *   1  a key dropped
 *   2  a float key set to 0, -1, NaN, an infinity, a denormal or 1e30
 *   3  a key's value replaced by a string
 *   4  a tensor's dimension d set to a value from the bytes (or a neighbour of it)
 *   5  a tensor's type changed (a valid one, as the writer must accept the shape)
 *   6  a tensor dropped
 *   7  a tensor renamed to another tensor's name with a suffix, or to a layer out of range
 * Keys and tensors are indexed modulo their counts. The mutated file is written in memory (data
 * zeroed; at most 8 MB) and opened, which must succeed (the writer's own output), then described.
 * A refusal must carry a message, and a model comes back exactly when the status says so; ASan
 * and UBSan watch everything else. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/gguf.h"
#include "memra/model.h"
#include "memra/synth.h"
#include "memra/tensor_type.h"

#include "fuzz_check.h"

#define FM_MAX_PRESETS 8u
#define FM_MAX_OPS 24u

typedef struct fm_base {
    void *data;
    size_t size;
    memra_gguf *g;
} fm_base;

static fm_base bases[FM_MAX_PRESETS];
static uint32_t n_bases;

static void fm_init(void) {
    if (n_bases)
        return;
    const char *const *names = memra_synth_presets();
    for (uint32_t i = 0; names[i] && n_bases < FM_MAX_PRESETS; i++) {
        if (!strstr(names[i], "tiny"))
            continue;
        memra_synth_spec spec = {names[i], MEMRA_TYPE_Q8_0, 1};
        memra_error err;
        fm_base *b = &bases[n_bases];
        if (memra_synth_build_memory(&spec, &b->data, &b->size, &err) != MEMRA_OK)
            continue; /* a preset Q8_0 does not fit */
        CHECK(memra_gguf_open_memory(b->data, b->size, names[i], &b->g, &err) == MEMRA_OK);
        n_bases++;
    }
    CHECK(n_bases > 0);
}

static memra_status fm_zero(void *user, uint64_t index, uint64_t row0, uint64_t n_rows, void *dst, memra_error *err) {
    (void)index, (void)row0, (void)err;
    memset(dst, 0, (size_t)(*(const uint64_t *)user * n_rows));
    return MEMRA_OK;
}

typedef struct fm_tensor {
    char name[96];
    uint32_t type, n_dims;
    uint64_t ne[MEMRA_GGUF_MAX_DIMS];
    uint64_t row_bytes;
    bool dropped;
} fm_tensor;

static uint64_t fm_value(uint8_t a, uint8_t b) {
    switch (a >> 6) {
    case 0: return b;                                         /* small */
    case 1: return (uint64_t)b << (a & 31);                   /* powers */
    case 2: return 0xFFFFFFFFull - b;                         /* near 2^32 */
    default: return ((uint64_t)a << 56) | ((uint64_t)b << 8); /* wild */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fm_init();
    if (size < 1)
        return 0;
    const fm_base *base = &bases[data[0] % n_bases];
    const memra_gguf *g = base->g;
    const uint64_t nkv = memra_gguf_kv_count(g), nt = memra_gguf_tensor_count(g);
    /* the mutations, in order; a later one on the same key or tensor wins */
    int8_t kv_op[512];
    uint64_t kv_val[512];
    CHECK(nkv <= 512);
    memset(kv_op, -1, sizeof kv_op);
    fm_tensor *ts = (fm_tensor *)calloc(nt, sizeof *ts);
    CHECK(ts != NULL);
    for (uint64_t i = 0; i < nt; i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        snprintf(ts[i].name, sizeof ts[i].name, "%s", t->name);
        ts[i].type = t->type;
        ts[i].n_dims = t->n_dims;
        memcpy(ts[i].ne, t->ne, sizeof ts[i].ne);
    }
    static const uint32_t types[] = {MEMRA_TYPE_F32,  MEMRA_TYPE_F16,  MEMRA_TYPE_BF16, MEMRA_TYPE_Q8_0,
                                     MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K, 77u /* unknown */};
    for (size_t o = 1; o + 4 <= size && o < 1 + 4 * FM_MAX_OPS; o += 4) {
        const uint8_t op = data[o] & 7, idx = data[o + 1], a = data[o + 2], b = data[o + 3];
        const uint64_t k = idx % nkv, t = idx % nt;
        switch (op) {
        case 0:
        case 1:
        case 2:
        case 3:
            kv_op[k] = (int8_t)op;
            kv_val[k] = op == 0 ? fm_value(a, b) : (uint64_t)a;
            break;
        case 4: {
            const uint32_t d = a % MEMRA_GGUF_MAX_DIMS;
            /* a neighbour (-64 .. +63 from today's), or a value of its own */
            uint64_t v = (b & 0x80) ? ts[t].ne[d] + (uint64_t)((int64_t)(b & 0x7F) - 64) : fm_value(a, b);
            ts[t].ne[d] = v ? v : 1;
            if (d >= ts[t].n_dims)
                ts[t].n_dims = d + 1;
            break;
        }
        case 5: ts[t].type = types[a % (sizeof types / sizeof types[0])]; break;
        case 6: ts[t].dropped = true; break;
        default: {
            char was[sizeof ts[t].name]; /* snprintf's source must not be its destination */
            memcpy(was, ts[t].name, sizeof was);
            const char *dot = strrchr(was, '.');
            if (a & 1)
                snprintf(ts[t].name, sizeof ts[t].name, "blk.%u.%s", (unsigned)b * 1000u + a, dot ? dot + 1 : "weight");
            else
                snprintf(ts[t].name, sizeof ts[t].name, "%.80s%s", memra_gguf_tensor_at(g, b % nt)->name,
                         (b & 2) ? ".x" : "");
            break;
        }
        }
    }

    memra_error err;
    memra_gguf_writer *w = NULL;
    CHECK(memra_gguf_writer_new(3, 0, &w, &err) == MEMRA_OK);
    bool ok = true;
    for (uint64_t i = 0; ok && i < nkv; i++) {
        const memra_gguf_kv *kv = memra_gguf_kv_at(g, i);
        memra_gguf_value v = kv->value;
        switch (kv_op[i]) {
        case 1: continue;
        case 0:
            if (v.type == MEMRA_GGUF_STRING || v.type == MEMRA_GGUF_ARRAY || v.type == MEMRA_GGUF_FLOAT32 ||
                v.type == MEMRA_GGUF_FLOAT64)
                break;
            v.type = (kv_val[i] >> 32) ? MEMRA_GGUF_UINT64 : MEMRA_GGUF_UINT32;
            v.v.u64 = kv_val[i];
            break;
        case 2: {
            static const double f[8] = {0.0, -1.0, NAN, INFINITY, -INFINITY, 1e-40, 1e30, 1.0};
            if (v.type != MEMRA_GGUF_FLOAT32 && v.type != MEMRA_GGUF_FLOAT64)
                break;
            v.type = MEMRA_GGUF_FLOAT32;
            v.v.f64 = f[kv_val[i] % 8];
            break;
        }
        case 3:
            v.type = MEMRA_GGUF_STRING;
            v.v.str.ptr = "fuzz";
            v.v.str.len = kv_val[i] % 5;
            break;
        default: break;
        }
        ok = memra_gguf_writer_set(w, kv->key, &v, &err) == MEMRA_OK;
    }
    uint64_t total = 0;
    for (uint64_t i = 0; ok && i < nt; i++) {
        if (ts[i].dropped)
            continue;
        uint64_t bs = 0, be = 0;
        if (!memra_tensor_type_block(ts[i].type, &bs, &be) || ts[i].ne[0] % bs) {
            ok = false; /* a shape the writer refuses: not this target's question */
            break;
        }
        uint64_t rows = 1;
        for (uint32_t d = 1; d < ts[i].n_dims; d++)
            rows = ts[i].ne[d] && rows <= (1ull << 40) / ts[i].ne[d] ? rows * ts[i].ne[d] : (1ull << 41);
        ts[i].row_bytes = ts[i].ne[0] / bs * be;
        if (ts[i].ne[0] > (1ull << 30) || rows > (1ull << 30) || ts[i].row_bytes * rows > (8u << 20) ||
            (total += ts[i].row_bytes * rows) > (8u << 20)) {
            ok = false;
            break;
        }
        ok = memra_gguf_writer_add_tensor_fill(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne, fm_zero,
                                               &ts[i].row_bytes, &err) == MEMRA_OK;
    }
    void *file = NULL;
    size_t file_size = 0;
    if (ok && memra_gguf_writer_write_memory(w, &file, &file_size, &err) == MEMRA_OK) {
        memra_gguf *mg = NULL;
        CHECK(memra_gguf_open_memory(file, file_size, "fuzz.gguf", &mg, &err) == MEMRA_OK);
        memra_model *m = NULL;
        const memra_status st = memra_model_describe(mg, &m, &err);
        CHECK((st == MEMRA_OK) == (m != NULL));
        if (st)
            CHECK(err.msg[0] != '\0');
        memra_model_free(m);
        memra_gguf_close(mg);
        free(file);
    }
    memra_gguf_writer_free(w);
    free(ts);
    return 0;
}
