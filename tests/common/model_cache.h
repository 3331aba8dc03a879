/* model_cache.h: the real model files some tests use, from the model cache ($MEMRA_MODEL_CACHE,
 * else ~/.cache/memra/models; scripts/fetch-models.sh puts them there). A test whose file is
 * absent is skipped with the reason printed ("SKIP: ...", which ctest's SKIP_REGULAR_EXPRESSION
 * reports as skipped, never as a silent pass). */
#ifndef MEMRA_TEST_MODEL_CACHE_H
#define MEMRA_TEST_MODEL_CACHE_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define MODEL_SMOLLM2 "SmolLM2-135M-Instruct.Q4_1.gguf"
#define MODEL_GEMMA3 "gemma-3-270m-q4_k_m.gguf"

/* The cached file's path into buf; false with the reason in why when it is not a regular file. */
static inline bool model_cache_path(const char *file, char *buf, size_t size, char *why, size_t why_size) {
    const char *cache = getenv("MEMRA_MODEL_CACHE");
    char dflt[4096];
    if (!cache || !*cache) {
        const char *home = getenv("HOME");
        snprintf(dflt, sizeof dflt, "%s/.cache/memra/models", home ? home : "");
        cache = dflt;
    }
    snprintf(buf, size, "%s/%s", cache, file);
    struct stat sb;
    if (stat(buf, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(why, why_size, "%s not found (run scripts/fetch-models.sh, or set MEMRA_MODEL_CACHE)", buf);
        return false;
    }
    return true;
}

/* The cached file's path into buf, or the test is skipped (the reason printed) and false. */
static inline bool model_cache_require(const char *file, char *buf, size_t size) {
    char why[4400];
    if (model_cache_path(file, buf, size, why, sizeof why))
        return true;
    fprintf(stderr, "SKIP: %s\n", why); /* printed whether or not Criterion runs verbose */
    cr_skip_test("%s", why);
    return false;
}

#endif
