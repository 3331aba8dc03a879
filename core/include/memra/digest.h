/* memra/digest.h: SHA-256 (OpenSSL libcrypto, EVP) for logits, caches, hidden states and token
 * streams, and their hex form. */
#ifndef MEMRA_DIGEST_H
#define MEMRA_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "memra/plugin.h" /* memra_sha256_ctx */

#ifdef __cplusplus
extern "C" {
#endif

#define MEMRA_SHA256_HEX 65 /* 64 hex digits and NUL */

void memra_sha256(const void *data, size_t n, uint8_t out[32]);
memra_sha256_ctx *memra_sha256_new(void); /* NULL when out of memory */
void memra_sha256_update(memra_sha256_ctx *ctx, const void *data, size_t n);
void memra_sha256_final(memra_sha256_ctx *ctx, uint8_t out[32]); /* frees ctx */
void memra_sha256_hex(const uint8_t digest[32], char out[MEMRA_SHA256_HEX]);

/* Digests that could not be computed in this process so far (OpenSSL failures, or a final on a
 * NULL context). Each such digest is unique (a marker and the failure's number, never a real
 * SHA-256 in practice) so it equals no other; a caller comparing digests checks this count
 * before it trusts an equality. */
uint64_t memra_sha256_failures(void);

/* Token stream digest: each token as little-endian uint32, in order. */
void memra_sha256_tokens(const uint32_t *tokens, size_t n, uint8_t out[32]);
/* Digest of a file's bytes (the model digest). */
memra_status memra_sha256_file(const char *path, uint8_t out[32], memra_error *err);

#ifdef __cplusplus
}
#endif
#endif
