/* gguf_get.c: the GGUF reader's metadata type tables and its typed getters (gguf_read.c opens and
 * validates the file; these read what it parsed). */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "memra/gguf.h"

/* ---- metadata type tables (the tensor types are core/src/tensor_type.c) ---- */

const char *memra_gguf_type_name(uint32_t type) {
    static const char *const names[MEMRA_GGUF_TYPE_COUNT] = {
        "uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
        "bool",  "string", "array",  "uint64", "int64",  "float64",
    };
    return type < MEMRA_GGUF_TYPE_COUNT ? names[type] : "unknown";
}

uint64_t memra_gguf_scalar_size(uint32_t type) {
    switch (type) {
    case MEMRA_GGUF_UINT8:
    case MEMRA_GGUF_INT8:
    case MEMRA_GGUF_BOOL: return 1;
    case MEMRA_GGUF_UINT16:
    case MEMRA_GGUF_INT16: return 2;
    case MEMRA_GGUF_UINT32:
    case MEMRA_GGUF_INT32:
    case MEMRA_GGUF_FLOAT32: return 4;
    case MEMRA_GGUF_UINT64:
    case MEMRA_GGUF_INT64:
    case MEMRA_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* ---- typed getters ---- */

/* Describes a value's type for messages: "uint32", "array of string". */
static void describe_type(const memra_gguf_value *v, char *buf, size_t n) {
    if (v->type == MEMRA_GGUF_ARRAY)
        snprintf(buf, n, "array of %s", memra_gguf_type_name(v->v.arr.elem_type));
    else
        snprintf(buf, n, "%s", memra_gguf_type_name(v->type));
}

static memra_status find_key(const memra_gguf *g, const char *key, const memra_gguf_value **v, memra_error *err) {
    *v = memra_gguf_find(g, key);
    if (!*v)
        return memra_fail(err, MEMRA_E_FORMAT, "%s: missing key '%s'", g ? memra_gguf_path(g) : "<null>", key ? key : "<null>");
    return MEMRA_OK;
}

static memra_status wrong_type(const memra_gguf *g, const char *key, const memra_gguf_value *v, const char *expected,
                               memra_error *err) {
    char got[64];
    describe_type(v, got, sizeof got);
    return memra_fail(err, MEMRA_E_FORMAT, "%s: key '%s' has type %s, expected %s", memra_gguf_path(g), key, got, expected);
}

memra_status memra_gguf_get_u64(const memra_gguf *g, const char *key, uint64_t *out, memra_error *err) {
    const memra_gguf_value *v;
    memra_status st = find_key(g, key, &v, err);
    if (st != MEMRA_OK)
        return st;
    switch (v->type) {
    case MEMRA_GGUF_UINT8:
    case MEMRA_GGUF_UINT16:
    case MEMRA_GGUF_UINT32:
    case MEMRA_GGUF_UINT64: *out = v->v.u64; return MEMRA_OK;
    case MEMRA_GGUF_INT8:
    case MEMRA_GGUF_INT16:
    case MEMRA_GGUF_INT32:
    case MEMRA_GGUF_INT64:
        if (v->v.i64 < 0)
            return memra_fail(err, MEMRA_E_FORMAT, "%s: key '%s' is %" PRId64 ", expected a nonnegative integer",
                              memra_gguf_path(g), key, v->v.i64);
        *out = (uint64_t)v->v.i64;
        return MEMRA_OK;
    default: return wrong_type(g, key, v, "an unsigned integer", err);
    }
}

memra_status memra_gguf_get_u32(const memra_gguf *g, const char *key, uint32_t *out, memra_error *err) {
    uint64_t x;
    memra_status st = memra_gguf_get_u64(g, key, &x, err);
    if (st != MEMRA_OK)
        return st;
    if (x > UINT32_MAX)
        return memra_fail(err, MEMRA_E_FORMAT, "%s: key '%s' is %" PRIu64 ", which does not fit in 32 bits", memra_gguf_path(g),
                          key, x);
    *out = (uint32_t)x;
    return MEMRA_OK;
}

memra_status memra_gguf_get_f32(const memra_gguf *g, const char *key, float *out, memra_error *err) {
    const memra_gguf_value *v;
    memra_status st = find_key(g, key, &v, err);
    if (st != MEMRA_OK)
        return st;
    if (v->type != MEMRA_GGUF_FLOAT32 && v->type != MEMRA_GGUF_FLOAT64)
        return wrong_type(g, key, v, "float32 or float64", err);
    if (v->v.f64 > FLT_MAX || v->v.f64 < -FLT_MAX) /* infinities pass; a finite value out of range would be UB */
        if (v->v.f64 != INFINITY && v->v.f64 != -INFINITY)
            return memra_fail(err, MEMRA_E_FORMAT, "%s: key '%s' is %g, which does not fit in float32", memra_gguf_path(g), key,
                              v->v.f64);
    *out = (float)v->v.f64;
    return MEMRA_OK;
}

memra_status memra_gguf_get_str(const memra_gguf *g, const char *key, memra_gguf_str *out, memra_error *err) {
    const memra_gguf_value *v;
    memra_status st = find_key(g, key, &v, err);
    if (st != MEMRA_OK)
        return st;
    if (v->type != MEMRA_GGUF_STRING)
        return wrong_type(g, key, v, "string", err);
    *out = v->v.str;
    return MEMRA_OK;
}

memra_status memra_gguf_get_array(const memra_gguf *g, const char *key, memra_gguf_type elem_type,
                                  const memra_gguf_array **out, memra_error *err) {
    const memra_gguf_value *v;
    memra_status st = find_key(g, key, &v, err);
    if (st != MEMRA_OK)
        return st;
    if (v->type != MEMRA_GGUF_ARRAY || v->v.arr.elem_type != elem_type) {
        char expected[64];
        snprintf(expected, sizeof expected, "array of %s", memra_gguf_type_name(elem_type));
        return wrong_type(g, key, v, expected, err);
    }
    *out = &v->v.arr;
    return MEMRA_OK;
}
