/* quant.c: row dequantization over the block layouts of memra/quant.h. */
#include "memra/quant.h"

#include "memra/gguf.h"

int memra_dequantize_row(uint32_t type, const void *src, uint64_t n, float *dst) {
    const uint8_t *p = src;
    switch (type) {
    case MEMRA_TYPE_F32: memcpy(dst, p, (size_t)n * sizeof(float)); return 1;
    case MEMRA_TYPE_F16:
    case MEMRA_TYPE_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = type == MEMRA_TYPE_F16 ? memra_f16_to_f32(h) : memra_bf16_to_f32(h);
        }
        return 1;
    default: break;
    }
    uint32_t qk = memra_quant_block_elems(type), bytes = memra_quant_block_bytes(type);
    if (qk == 0 || n % qk != 0)
        return 0;
    for (uint64_t b = 0; b < n / qk; b++)
        memra_dequantize_block(type, p + b * bytes, dst + b * qk);
    return 1;
}
