/* check_moe.h: what the two files of the check_moe program share (check_moe.c: the helpers, the
 * reference checks and main; check_moe_fused.c: the fused kernels against the unfused ones). */
#ifndef MEMRA_CHECK_MOE_H
#define MEMRA_CHECK_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_kernels.h"

extern int failures; /* check_program.h's CHECK counts here */
/* The configuration the FFN-level checks (3 to 5) run under: the default with experts=float, the kernels
 * they were written for, unless main sets it to the default itself for its Q8_0 runs. */
extern mc_config mcfg;

float uni(void);                         /* a pseudo-random float in [-1, 1) */
void *dev_copy(const void *h, size_t n); /* a device copy of n host bytes */

/* A stack of `rows` rows of `cols` in the upload layout (cuda_weights.cu: rows padded to 16 bytes;
 * Q8_0 split into int8 quants and f16 scales), and its decoded values. */
typedef struct stack {
    mc_matrix m;
    float *deq; /* rows x cols */
} stack;
void stack_make(stack *s, uint32_t type, uint32_t rows, uint32_t cols);
void stack_free(stack *s);
const char *tname(uint32_t t);

/* check_moe_fused.c */
void check_router(uint32_t type, uint32_t n, uint32_t cols, uint32_t k, int norm, int shexp, int po, int corrupt);
void check_down_combine(uint32_t type, uint32_t held, uint32_t e0, uint32_t rows_e, uint32_t cols, uint32_t k,
                        const int32_t *sel, int shexp, float scale, int corrupt);
void check_fused_refusals(void);
void check_ffn_fused(uint32_t type, uint32_t ne, uint32_t k, uint32_t E, uint32_t F);
void check_routed(uint32_t rtype, uint32_t gtype, uint32_t n, uint32_t E, uint32_t F, uint32_t k, int norm, int po,
                  int corrupt);

#endif
