/* options.c: parsing arm strings (BACKEND[:key=value,...]) and reading their options. */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/options.h"

const char *memra_options_get(const memra_options *opts, const char *key) {
    for (uint32_t i = 0; opts && i < opts->n; i++)
        if (strcmp(opts->items[i].key, key) == 0)
            return opts->items[i].value;
    return NULL;
}

memra_status memra_options_set(memra_options *opts, const char *key, const char *value, memra_error *err) {
    if (strlen(key) >= MEMRA_OPT_KEY_MAX || strlen(key) == 0)
        return memra_fail(err, MEMRA_E_INVALID, "option key '%s' is empty or longer than %d characters", key,
                          MEMRA_OPT_KEY_MAX - 1);
    if (strlen(value) >= MEMRA_OPT_VALUE_MAX)
        return memra_fail(err, MEMRA_E_INVALID, "value of option '%s' is longer than %d characters", key,
                          MEMRA_OPT_VALUE_MAX - 1);
    uint32_t i = 0;
    while (i < opts->n && strcmp(opts->items[i].key, key) != 0)
        i++;
    if (i == opts->n) {
        if (opts->n == MEMRA_OPT_MAX)
            return memra_fail(err, MEMRA_E_INVALID, "too many options (at most %d)", MEMRA_OPT_MAX);
        opts->n++;
        snprintf(opts->items[i].key, MEMRA_OPT_KEY_MAX, "%s", key);
    }
    snprintf(opts->items[i].value, MEMRA_OPT_VALUE_MAX, "%s", value);
    return MEMRA_OK;
}

static int valid_key_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.'; }

memra_status memra_arm_parse(const char *arm, char backend[MEMRA_BACKEND_NAME_MAX], memra_options *opts,
                             memra_error *err) {
    memset(opts, 0, sizeof *opts);
    backend[0] = '\0';
    if (!arm || !*arm)
        return memra_fail(err, MEMRA_E_INVALID, "empty arm: expected BACKEND[:key=value,...]");
    const char *colon = strchr(arm, ':');
    size_t blen = colon ? (size_t)(colon - arm) : strlen(arm);
    if (blen == 0)
        return memra_fail(err, MEMRA_E_INVALID, "arm '%s': no backend name before ':'", arm);
    if (blen >= MEMRA_BACKEND_NAME_MAX)
        return memra_fail(err, MEMRA_E_INVALID, "arm '%s': backend name longer than %d characters", arm,
                          MEMRA_BACKEND_NAME_MAX - 1);
    for (size_t i = 0; i < blen; i++)
        if (!valid_key_char(arm[i]))
            return memra_fail(err, MEMRA_E_INVALID, "arm '%s': backend name has the character '%c'", arm, arm[i]);
    memcpy(backend, arm, blen);
    backend[blen] = '\0';
    if (!colon)
        return MEMRA_OK;
    const char *p = colon + 1;
    if (!*p)
        return memra_fail(err, MEMRA_E_INVALID, "arm '%s': nothing after ':'", arm);
    int cur = -1; /* the option a bare item continues (devices=0,1) */
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (len == 0)
            return memra_fail(err, MEMRA_E_INVALID, "arm '%s': empty item between commas", arm);
        if (eq) {
            size_t klen = (size_t)(eq - p);
            if (klen == 0)
                return memra_fail(err, MEMRA_E_INVALID, "arm '%s': an item has '=' but no key", arm);
            if (klen >= MEMRA_OPT_KEY_MAX)
                return memra_fail(err, MEMRA_E_INVALID, "arm '%s': key '%.*s' is too long", arm, (int)klen, p);
            char key[MEMRA_OPT_KEY_MAX];
            memcpy(key, p, klen);
            key[klen] = '\0';
            for (size_t i = 0; i < klen; i++)
                if (!valid_key_char(key[i]))
                    return memra_fail(err, MEMRA_E_INVALID, "arm '%s': key '%s' has the character '%c'", arm, key,
                                      key[i]);
            if (memra_options_get(opts, key))
                return memra_fail(err, MEMRA_E_INVALID, "arm '%s': key '%s' is given twice", arm, key);
            size_t vlen = len - klen - 1;
            if (vlen == 0)
                return memra_fail(err, MEMRA_E_INVALID, "arm '%s': key '%s' has an empty value", arm, key);
            if (vlen >= MEMRA_OPT_VALUE_MAX)
                return memra_fail(err, MEMRA_E_INVALID, "arm '%s': value of '%s' is too long", arm, key);
            char value[MEMRA_OPT_VALUE_MAX];
            memcpy(value, eq + 1, vlen);
            value[vlen] = '\0';
            memra_status st = memra_options_set(opts, key, value, err);
            if (st != MEMRA_OK)
                return st;
            cur = (int)opts->n - 1;
        } else {
            if (cur < 0)
                return memra_fail(err, MEMRA_E_INVALID, "arm '%s': item '%.*s' is not key=value", arm, (int)len, p);
            memra_option *o = &opts->items[cur];
            size_t have = strlen(o->value);
            if (have + 1 + len >= MEMRA_OPT_VALUE_MAX)
                return memra_fail(err, MEMRA_E_INVALID, "arm '%s': value of '%s' is too long", arm, o->key);
            o->value[have] = ',';
            memcpy(o->value + have + 1, p, len);
            o->value[have + 1 + len] = '\0';
        }
        if (!end)
            break;
        p = end + 1;
        if (!*p)
            return memra_fail(err, MEMRA_E_INVALID, "arm '%s': trailing ','", arm);
    }
    return MEMRA_OK;
}

memra_status memra_options_check(const memra_options *opts, const memra_option_spec *const *specs,
                                 const uint32_t *n_specs, uint32_t n_lists, const char *arm, memra_error *err) {
    for (uint32_t i = 0; i < opts->n; i++) {
        int known = 0;
        for (uint32_t l = 0; l < n_lists && !known; l++)
            for (uint32_t k = 0; k < n_specs[l] && !known; k++)
                known = strcmp(specs[l][k].key, opts->items[i].key) == 0;
        if (known)
            continue;
        char list[512] = "";
        size_t used = 0;
        for (uint32_t l = 0; l < n_lists; l++)
            for (uint32_t k = 0; k < n_specs[l]; k++) {
                int dup = 0; /* a key may be in two lists (placement and backend) */
                for (uint32_t l2 = 0; l2 < l && !dup; l2++)
                    for (uint32_t k2 = 0; k2 < n_specs[l2] && !dup; k2++)
                        dup = strcmp(specs[l2][k2].key, specs[l][k].key) == 0;
                if (dup || used >= sizeof list)
                    continue;
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", specs[l][k].key);
            }
        return memra_fail(err, MEMRA_E_INVALID, "arm '%s': unknown key '%s'; known keys: %s", arm, opts->items[i].key,
                          list[0] ? list : "(none)");
    }
    return MEMRA_OK;
}

static memra_status parse_u32(const char *key, const char *s, uint32_t min, uint32_t max, uint32_t *out,
                              memra_error *err) {
    if (!*s || !isdigit((unsigned char)*s))
        return memra_fail(err, MEMRA_E_INVALID, "%s=%s: expected an integer from %u to %u", key, s, min, max);
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return memra_fail(err, MEMRA_E_INVALID, "%s=%s: expected an integer from %u to %u", key, s, min, max);
    *out = (uint32_t)v;
    return MEMRA_OK;
}

memra_status memra_options_u32(const memra_options *opts, const char *key, uint32_t dflt, uint32_t min, uint32_t max,
                               uint32_t *out, memra_error *err) {
    const char *v = memra_options_get(opts, key);
    if (!v) {
        *out = dflt;
        return MEMRA_OK;
    }
    return parse_u32(key, v, min, max, out, err);
}

memra_status memra_options_u32_list(const memra_options *opts, const char *key, uint32_t *out, uint32_t max_n,
                                    uint32_t *n, memra_error *err) {
    *n = 0;
    const char *v = memra_options_get(opts, key);
    if (!v)
        return MEMRA_OK;
    char buf[MEMRA_OPT_VALUE_MAX];
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == max_n)
            return memra_fail(err, MEMRA_E_INVALID, "%s=%s: more than %u values", key, v, max_n);
        memra_status st = parse_u32(key, tok, 0, UINT32_MAX, &out[*n], err);
        if (st != MEMRA_OK)
            return memra_fail(err, st, "%s=%s: '%s' is not an unsigned integer", key, v, tok);
        (*n)++;
    }
    if (*n == 0)
        return memra_fail(err, MEMRA_E_INVALID, "%s=%s: expected a comma-separated list of integers", key, v);
    return MEMRA_OK;
}

bool memra_arm_format(const char *backend, const memra_options *opts, char *buf, size_t size) {
    if (size == 0)
        return false;
    size_t used = (size_t)snprintf(buf, size, "%s", backend);
    for (uint32_t i = 0; opts && i < opts->n && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%c%s=%s", i ? ',' : ':', opts->items[i].key,
                                 opts->items[i].value);
    return used < size;
}

bool memra_collective_value_name(const char *value, char *name, size_t size) {
    if (!value || !name || size == 0)
        return false;
    const char *colon = strchr(value, ':');
    const size_t n = colon ? (size_t)(colon - value) : strlen(value);
    if (n == 0 || n >= size) {
        name[0] = 0;
        return false;
    }
    memcpy(name, value, n);
    name[n] = 0;
    return true;
}

memra_status memra_collective_value_parse(const char *value, char *name, size_t size, memra_options *opts,
                                          memra_error *err) {
    if (!memra_collective_value_name(value, name, size))
        return memra_fail(err, MEMRA_E_INVALID, "collective=%.100s: expected NAME, NAME:MODE or NAME:KEY=VALUE",
                          value ? value : "(null)");
    const char *p = strchr(value, ':');
    if (!p)
        return MEMRA_OK;
    p++;
    if (!*p)
        return memra_fail(err, MEMRA_E_INVALID, "collective=%.100s: nothing after ':' (expected a mode or KEY=VALUE)",
                          value);
    for (;;) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        const size_t klen = eq ? (size_t)(eq - p) : 4;
        const size_t vlen = eq ? len - klen - 1 : len;
        char key[MEMRA_OPT_KEY_MAX], val[MEMRA_OPT_VALUE_MAX];
        if (len == 0 || klen == 0 || klen >= sizeof key || vlen == 0 || vlen >= sizeof val)
            return memra_fail(err, MEMRA_E_INVALID,
                              "collective=%.100s: expected NAME:ITEM[,ITEM...], each item KEY=VALUE or a mode", value);
        memcpy(key, eq ? p : "mode", klen);
        key[klen] = '\0';
        memcpy(val, eq ? eq + 1 : p, vlen);
        val[vlen] = '\0';
        memra_status st = memra_options_set(opts, key, val, err);
        if (st != MEMRA_OK)
            return st;
        if (!comma)
            return MEMRA_OK;
        p = comma + 1;
    }
}

/* Levenshtein distance of two short strings (longer ones are never close). */
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return SIZE_MAX;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *memra_closest_name(const char *typed, const char *const *names, size_t n) {
    const char *best = NULL;
    size_t best_d = SIZE_MAX, len = strlen(typed);
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    for (size_t i = 0; i < n; i++) {
        if (!names[i])
            continue;
        size_t d = edit_distance(typed, names[i]);
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    return best_d <= limit ? best : NULL;
}
