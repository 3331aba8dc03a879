/* synth_encode.h: inside libmemra-model only: a row of n floats encoded in a tensor type (F32,
 * F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; n a multiple of the type's block) into
 * dst (synth_encode.c). */
#ifndef MEMRA_SYNTH_ENCODE_H
#define MEMRA_SYNTH_ENCODE_H

#include <stdint.h>

void synth_encode_row(uint32_t type, const float *x, uint64_t n, unsigned char *dst);

#endif
