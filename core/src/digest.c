/* digest.c: SHA-256 through OpenSSL's EVP interface.
 *
 * A digest that OpenSSL fails to compute (an allocation failure inside it, or a context that
 * could not be made) must never compare equal to another: two failing arms would otherwise both
 * read 32 zero bytes and agree. Each failure writes a digest of its own (a marker and a
 * process-wide failure number) and is counted; memra_sha256_failures() tells the caller that a
 * comparison cannot be trusted. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "memra/digest.h"

static atomic_uint_fast64_t memra_digest_failures;

/* The digest of the n-th failure (from 1): "memra:digest-failed" then n, big-endian. */
static void failed_digest(uint8_t out[32]) {
    static const char mark[] = "memra:digest-failed";
    const uint64_t n = (uint64_t)atomic_fetch_add(&memra_digest_failures, 1) + 1;
    memset(out, 0, 32);
    memcpy(out, mark, sizeof mark - 1);
    for (int i = 0; i < 8; i++)
        out[31 - i] = (uint8_t)(n >> (8 * i));
}

uint64_t memra_sha256_failures(void) { return (uint64_t)atomic_load(&memra_digest_failures); }

void memra_sha256(const void *data, size_t n, uint8_t out[32]) {
    unsigned int len = 32;
    if (!EVP_Digest(data, n, out, &len, EVP_sha256(), NULL))
        failed_digest(out); /* only on allocation failure inside OpenSSL */
}

memra_sha256_ctx *memra_sha256_new(void) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx && !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(ctx);
        return NULL;
    }
    return (memra_sha256_ctx *)ctx;
}

void memra_sha256_update(memra_sha256_ctx *ctx, const void *data, size_t n) {
    /* a lost update leaves a wrong digest that final cannot see: count it here */
    if (ctx && n && !EVP_DigestUpdate((EVP_MD_CTX *)ctx, data, n))
        atomic_fetch_add(&memra_digest_failures, 1);
}

void memra_sha256_final(memra_sha256_ctx *ctx, uint8_t out[32]) {
    unsigned int len = 32;
    if (!ctx || !EVP_DigestFinal_ex((EVP_MD_CTX *)ctx, out, &len))
        failed_digest(out); /* no context (sha256_new failed), or OpenSSL failed */
    EVP_MD_CTX_free((EVP_MD_CTX *)ctx);
}

void memra_sha256_hex(const uint8_t digest[32], char out[MEMRA_SHA256_HEX]) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[digest[i] >> 4];
        out[2 * i + 1] = hex[digest[i] & 15];
    }
    out[64] = '\0';
}

void memra_sha256_tokens(const uint32_t *tokens, size_t n, uint8_t out[32]) {
    memra_sha256_ctx *ctx = memra_sha256_new();
    for (size_t i = 0; i < n; i++) {
        uint8_t le[4] = {(uint8_t)tokens[i], (uint8_t)(tokens[i] >> 8), (uint8_t)(tokens[i] >> 16),
                         (uint8_t)(tokens[i] >> 24)};
        memra_sha256_update(ctx, le, 4);
    }
    memra_sha256_final(ctx, out);
}

memra_status memra_sha256_file(const char *path, uint8_t out[32], memra_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return memra_fail(err, MEMRA_E_IO, "%s: cannot open: %s", path, strerror(errno));
    memra_sha256_ctx *ctx = memra_sha256_new();
    size_t cap = 1u << 22;
    unsigned char *buf = malloc(cap);
    if (!ctx || !buf) {
        fclose(f);
        free(buf);
        memra_sha256_final(ctx, out);
        return memra_fail(err, MEMRA_E_NOMEM, "%s: out of memory for the file digest", path);
    }
    size_t got;
    while ((got = fread(buf, 1, cap, f)) > 0)
        memra_sha256_update(ctx, buf, got);
    int failed = ferror(f);
    fclose(f);
    free(buf);
    memra_sha256_final(ctx, out);
    if (failed)
        return memra_fail(err, MEMRA_E_IO, "%s: read error while computing the digest", path);
    return MEMRA_OK;
}
