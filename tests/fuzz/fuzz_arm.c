/* fuzz_arm.c: libFuzzer target for arm strings and option values (core/src/options.c), the text a
 * command line hands every tool: BACKEND[:key=value,...] and the typed reads of its values.
 *
 * The input, up to its first NUL, is an arm string. memra_arm_parse either refuses it
 * (MEMRA_E_INVALID with a message) or returns a backend name and options within memra_options'
 * limits: a name and keys of key characters only, distinct keys, non-empty values. Whether it is
 * refused, and what it returns, must agree with a reference parser written here another way (the
 * text split at every ',' first, then each item read): a key given twice, an empty item, a
 * trailing ',' or a value past its limit is refused by both. A parsed arm is
 * formatted (memra_arm_format must say the text is whole in MEMRA_ARM_TEXT_MAX bytes), parsed
 * again to the same name and options, and formatted again to the same text: the arm text the
 * gate's records carry is the whole configuration. Every value is then read as an integer, an
 * integer list and a collective value, and the name looked up among known ones; each read either
 * succeeds within its bounds or fails with a message. ASan and UBSan watch everything else. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/options.h"
#include "memra/status.h"

#include "fuzz_check.h"

#define FA_MAX_INPUT 8192u

static int key_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

static void check_name(const char *s, size_t max) {
    const size_t n = strlen(s);
    CHECK(n > 0 && n < max);
    for (size_t i = 0; i < n; i++)
        CHECK(key_char(s[i]));
}

static void check_options(const memra_options *o) {
    CHECK(o->n <= MEMRA_OPT_MAX);
    for (uint32_t i = 0; i < o->n; i++) {
        check_name(o->items[i].key, MEMRA_OPT_KEY_MAX);
        const size_t vl = strlen(o->items[i].value);
        CHECK(vl > 0 && vl < MEMRA_OPT_VALUE_MAX);
        for (uint32_t j = 0; j < i; j++)
            CHECK(strcmp(o->items[i].key, o->items[j].key) != 0);
    }
}

static void check_same(const char *b1, const memra_options *o1, const char *b2, const memra_options *o2) {
    CHECK(strcmp(b1, b2) == 0);
    CHECK(o1->n == o2->n);
    for (uint32_t i = 0; i < o1->n; i++) {
        CHECK(strcmp(o1->items[i].key, o2->items[i].key) == 0);
        CHECK(strcmp(o1->items[i].value, o2->items[i].value) == 0);
    }
}

/* The grammar of options.h read another way: split at every ',', then each item is KEY=VALUE (a
 * new option) or a bare WORD continuing the option before it with ",WORD". Returns whether the
 * text is accepted. */
static int ref_parse(const char *text, char *backend, memra_options *o) {
    memset(o, 0, sizeof *o);
    const char *colon = strchr(text, ':');
    const size_t bl = colon ? (size_t)(colon - text) : strlen(text);
    if (bl == 0 || bl >= MEMRA_BACKEND_NAME_MAX)
        return 0;
    for (size_t i = 0; i < bl; i++)
        if (!key_char(text[i]))
            return 0;
    memcpy(backend, text, bl);
    backend[bl] = '\0';
    if (!colon)
        return 1;
    const char *rest = colon + 1;
    if (*rest == '\0')
        return 0;
    int cur = -1;
    for (const char *p = rest;;) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0)
            return 0; /* an empty item: ",," or a trailing ',' */
        size_t k = 0;
        while (k < len && p[k] != '=')
            k++;
        if (k < len) { /* KEY=VALUE */
            const size_t vl = len - k - 1;
            if (k == 0 || k >= MEMRA_OPT_KEY_MAX || vl == 0 || vl >= MEMRA_OPT_VALUE_MAX || o->n == MEMRA_OPT_MAX)
                return 0;
            for (size_t i = 0; i < k; i++)
                if (!key_char(p[i]))
                    return 0;
            for (uint32_t j = 0; j < o->n; j++)
                if (strlen(o->items[j].key) == k && memcmp(o->items[j].key, p, k) == 0)
                    return 0; /* given twice */
            memcpy(o->items[o->n].key, p, k);
            memcpy(o->items[o->n].value, p + k + 1, vl);
            cur = (int)o->n++;
        } else { /* a bare word continues the option before it */
            if (cur < 0)
                return 0;
            char *v = o->items[cur].value;
            const size_t have = strlen(v);
            if (have + 1 + len >= MEMRA_OPT_VALUE_MAX)
                return 0;
            v[have] = ',';
            memcpy(v + have + 1, p, len);
        }
        if (!comma)
            return 1;
        p = comma + 1;
    }
}

/* A read that failed says so; one that succeeded returned MEMRA_OK. */
static void check_status(memra_status st, const memra_error *err) {
    CHECK(st == MEMRA_OK || st == MEMRA_E_INVALID);
    if (st != MEMRA_OK)
        CHECK(err->status == st && err->msg[0] != '\0');
}

static void read_values(const memra_options *o) {
    static const char *const known[] = {"cpu", "cuda", "cuda-graph", "local", "oneshot", "nccl", NULL, "default"};
    for (uint32_t i = 0; i < o->n; i++) {
        const char *key = o->items[i].key;
        memra_error err = {0};
        uint32_t v = 7;
        memra_status st = memra_options_u32(o, key, 3, 2, 1000, &v, &err);
        check_status(st, &err);
        CHECK(st != MEMRA_OK || (v >= 2 && v <= 1000));
        uint32_t list[8], n = 99;
        memra_error err2 = {0};
        st = memra_options_u32_list(o, key, list, 8, &n, &err2);
        check_status(st, &err2);
        CHECK(st != MEMRA_OK || (n >= 1 && n <= 8));
        char name[16];
        memra_options co = {0};
        memra_error err3 = {0};
        st = memra_collective_value_parse(o->items[i].value, name, sizeof name, &co, &err3);
        check_status(st, &err3);
        if (st == MEMRA_OK) {
            CHECK(name[0] != '\0' && strlen(name) < sizeof name);
            CHECK(co.n <= MEMRA_OPT_MAX);
        }
        const char *near = memra_closest_name(o->items[i].value, known, sizeof known / sizeof known[0]);
        CHECK(!near || strlen(near) > 0);
    }
    /* an absent key reads as its default */
    uint32_t d = 0, n = 5;
    memra_error err = {0};
    if (!memra_options_get(o, "fuzz-absent")) {
        CHECK(memra_options_u32(o, "fuzz-absent", 42, 0, 100, &d, &err) == MEMRA_OK && d == 42);
        CHECK(memra_options_u32_list(o, "fuzz-absent", &d, 1, &n, &err) == MEMRA_OK && n == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FA_MAX_INPUT)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0'; /* up to the first NUL */
    char backend[MEMRA_BACKEND_NAME_MAX];
    memra_options o;
    memra_error err = {0};
    const memra_status st = memra_arm_parse(text, backend, &o, &err);
    check_status(st, &err);
    char ref_backend[MEMRA_BACKEND_NAME_MAX];
    static memra_options ref;
    const int ref_ok = ref_parse(text, ref_backend, &ref);
    CHECK(ref_ok == (st == MEMRA_OK));
    if (st == MEMRA_OK) {
        check_same(backend, &o, ref_backend, &ref);
        check_name(backend, MEMRA_BACKEND_NAME_MAX);
        check_options(&o);
        static char once[MEMRA_ARM_TEXT_MAX], twice[MEMRA_ARM_TEXT_MAX];
        CHECK(memra_arm_format(backend, &o, once, sizeof once));
        char backend2[MEMRA_BACKEND_NAME_MAX];
        memra_options o2;
        memra_error err2 = {0};
        CHECK(memra_arm_parse(once, backend2, &o2, &err2) == MEMRA_OK);
        check_same(backend, &o, backend2, &o2);
        CHECK(memra_arm_format(backend2, &o2, twice, sizeof twice));
        CHECK(strcmp(once, twice) == 0);
        read_values(&o);
    }
    free(text);
    return 0;
}
