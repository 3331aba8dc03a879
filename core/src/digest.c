/* digest.c: SHA-256 through OpenSSL's EVP interface. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "memra/digest.h"

void memra_sha256(const void *data, size_t n, uint8_t out[32]) {
    unsigned int len = 32;
    if (!EVP_Digest(data, n, out, &len, EVP_sha256(), NULL))
        memset(out, 0, 32); /* only on allocation failure inside OpenSSL */
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
    if (ctx && n)
        EVP_DigestUpdate((EVP_MD_CTX *)ctx, data, n);
}

void memra_sha256_final(memra_sha256_ctx *ctx, uint8_t out[32]) {
    unsigned int len = 32;
    if (!ctx || !EVP_DigestFinal_ex((EVP_MD_CTX *)ctx, out, &len))
        memset(out, 0, 32);
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
