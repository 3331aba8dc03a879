/* memra/tensor_type.h: the tensor types a weight may have, numbered as ggml numbers them, with
 * their names and block sizes. Part of the plugin ABI (memra_weight.type is one), so it is core's;
 * memra/gguf.h (the reader, in libmemra-model) includes it. */
#ifndef MEMRA_TENSOR_TYPE_H
#define MEMRA_TENSOR_TYPE_H

#include <stdbool.h>
#include <stdint.h>

#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tensor types, numbered as ggml numbers them. memra computes with F32, F16, BF16 and Q8_0; the
 * reader knows the block sizes of the others so it can size and name them, and a tensor of any
 * other type is refused by name where it is used (memra_tensor_type_supported). */
typedef enum memra_tensor_type {
    MEMRA_TYPE_F32 = 0,
    MEMRA_TYPE_F16 = 1,
    MEMRA_TYPE_Q4_0 = 2,
    MEMRA_TYPE_Q4_1 = 3,
    MEMRA_TYPE_Q5_0 = 6,
    MEMRA_TYPE_Q5_1 = 7,
    MEMRA_TYPE_Q8_0 = 8,
    MEMRA_TYPE_Q8_1 = 9,
    MEMRA_TYPE_Q2_K = 10,
    MEMRA_TYPE_Q3_K = 11,
    MEMRA_TYPE_Q4_K = 12,
    MEMRA_TYPE_Q5_K = 13,
    MEMRA_TYPE_Q6_K = 14,
    MEMRA_TYPE_Q8_K = 15,
    MEMRA_TYPE_I8 = 24,
    MEMRA_TYPE_I16 = 25,
    MEMRA_TYPE_I32 = 26,
    MEMRA_TYPE_I64 = 27,
    MEMRA_TYPE_F64 = 28,
    MEMRA_TYPE_BF16 = 30
} memra_tensor_type;

#define MEMRA_Q8_0_BLOCK 32u       /* elements per Q8_0 block */
#define MEMRA_Q8_0_BLOCK_BYTES 34u /* f16 scale + 32 int8 */

/* Name of a tensor type as ggml spells it ("F32", "Q4_K"); "type N" for unknown numbers
 * (written into a static buffer per call site: use at once). */
const char *memra_tensor_type_name(uint32_t type);
/* Elements per block and bytes per block of a tensor type; false for an unknown type. */
bool memra_tensor_type_block(uint32_t type, uint64_t *block_elems, uint64_t *block_bytes);
/* True for the types memra computes with: F32, F16, BF16, Q8_0. */
bool memra_tensor_type_supported(uint32_t type);
/* Bytes of a row of n elements of type; fails on an unknown type, n not a multiple of the block,
 * or overflow. */
memra_status memra_tensor_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes, memra_error *err);

#ifdef __cplusplus
}
#endif
#endif
