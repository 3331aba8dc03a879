/* fuzz_check.h: what the fuzz targets share. CHECK traps on a broken invariant, so libFuzzer
 * keeps the input that broke it. */
#ifndef MEMRA_FUZZ_CHECK_H
#define MEMRA_FUZZ_CHECK_H

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            __builtin_trap();                                                                                          \
    } while (0)

#endif
