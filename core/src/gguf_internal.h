/* gguf_internal.h: what the GGUF reader and writer share inside libmemra (not installed). */
#ifndef MEMRA_GGUF_INTERNAL_H
#define MEMRA_GGUF_INTERNAL_H

#include <stdint.h>

/* Bytes of one scalar element of a metadata type; 0 for STRING, ARRAY and unknown types. */
uint64_t memra_gguf_scalar_size(uint32_t type);

#endif
