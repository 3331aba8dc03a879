/* tensor_type.c: the tensor types a weight may have (ggml's numbering): names, block sizes, and
 * which ones memra computes with. Part of the plugin ABI (a memra_weight carries one), so core,
 * not the GGUF reader, owns the table. */
#include <inttypes.h>
#include <stdio.h>

#include "memra/tensor_type.h"

typedef struct tensor_type_info {
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
} tensor_type_info;

/* Indexed by ggml type number; a NULL name is a number ggml does not use (or no longer uses). */
static const tensor_type_info tensor_types[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},      [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},      [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 36},
    [10] = {"Q2_K", 256, 84},    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},   [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},   [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},        [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},   [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},
};

static const tensor_type_info *tensor_type_lookup(uint32_t type) {
    if (type >= sizeof tensor_types / sizeof tensor_types[0] || !tensor_types[type].name)
        return NULL;
    return &tensor_types[type];
}

const char *memra_tensor_type_name(uint32_t type) {
    static _Thread_local char unknown[32];
    const tensor_type_info *info = tensor_type_lookup(type);
    if (info)
        return info->name;
    snprintf(unknown, sizeof unknown, "type %" PRIu32, type);
    return unknown;
}

bool memra_tensor_type_block(uint32_t type, uint64_t *block_elems, uint64_t *block_bytes) {
    const tensor_type_info *info = tensor_type_lookup(type);
    if (!info)
        return false;
    if (block_elems)
        *block_elems = info->block_elems;
    if (block_bytes)
        *block_bytes = info->block_bytes;
    return true;
}

bool memra_tensor_type_supported(uint32_t type) {
    switch (type) {
    case MEMRA_TYPE_F32:
    case MEMRA_TYPE_F16:
    case MEMRA_TYPE_BF16:
    case MEMRA_TYPE_Q4_0:
    case MEMRA_TYPE_Q4_1:
    case MEMRA_TYPE_Q5_0:
    case MEMRA_TYPE_Q5_1:
    case MEMRA_TYPE_Q8_0:
    case MEMRA_TYPE_Q4_K:
    case MEMRA_TYPE_Q5_K:
    case MEMRA_TYPE_Q6_K: return true;
    default: return false;
    }
}

memra_status memra_tensor_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes, memra_error *err) {
    uint64_t block_elems, block_bytes;
    if (!memra_tensor_type_block(type, &block_elems, &block_bytes))
        return memra_fail(err, MEMRA_E_FORMAT, "unknown tensor type %" PRIu32, type);
    if (n % block_elems != 0)
        return memra_fail(err, MEMRA_E_FORMAT,
                          "a row of %" PRIu64 " elements of type %s is not a multiple of its block of %" PRIu64, n,
                          memra_tensor_type_name(type), block_elems);
    uint64_t total;
    if (__builtin_mul_overflow(n / block_elems, block_bytes, &total))
        return memra_fail(err, MEMRA_E_FORMAT, "a row of %" PRIu64 " elements of type %s overflows 64 bits", n,
                          memra_tensor_type_name(type));
    if (bytes)
        *bytes = total;
    return MEMRA_OK;
}
