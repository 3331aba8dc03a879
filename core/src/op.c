/* op.c: memra/op.h, the arm's op.KIND keys bound to op plugins for a backend. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "memra/op.h"
#include "memra/options.h"
#include "memra/tensor_type.h"

static const char *const op_kind_names[] = {[MEMRA_OP_RMSNORM] = "rmsnorm",
                                            [MEMRA_OP_ROPE] = "rope",
                                            [MEMRA_OP_ATTENTION] = "attention",
                                            [MEMRA_OP_GEMV] = "gemv",
                                            [MEMRA_OP_TOPK] = "topk"};
#define OP_KIND_LAST MEMRA_OP_TOPK

const char *memra_op_kind_name(uint32_t kind) {
    return kind >= MEMRA_OP_RMSNORM && kind <= OP_KIND_LAST ? op_kind_names[kind] : "unknown";
}

/* The GGUF type whose name, in lower case, is `word` ("q8_0" -> MEMRA_TYPE_Q8_0). */
static bool type_parse(const char *word, uint32_t *type) {
    for (uint32_t t = 0; t < 64; t++) {
        const char *name = memra_tensor_type_name(t);
        size_t n = strlen(name);
        if (n != strlen(word) || strncmp(name, "type ", 5) == 0)
            continue;
        size_t i = 0;
        while (i < n && tolower((unsigned char)name[i]) == word[i])
            i++;
        if (i == n) {
            *type = t;
            return true;
        }
    }
    return false;
}

bool memra_op_key_parse(const char *key, memra_op_kind *kind, uint32_t *type) {
    const size_t plen = strlen(MEMRA_OP_KEY_PREFIX);
    if (!key || strncmp(key, MEMRA_OP_KEY_PREFIX, plen) != 0)
        return false;
    const char *k = key + plen;
    uint32_t t = 0;
    for (uint32_t i = MEMRA_OP_RMSNORM; i <= OP_KIND_LAST; i++) {
        if (i == MEMRA_OP_GEMV) {
            if (strncmp(k, "gemv.", 5) != 0 || !type_parse(k + 5, &t))
                continue;
        } else if (strcmp(k, op_kind_names[i]) != 0) {
            continue;
        }
        if (kind)
            *kind = (memra_op_kind)i;
        if (type)
            *type = t;
        return true;
    }
    return false;
}

memra_status memra_op_value_parse(const char *key, const char *value, char *name, size_t size, memra_options *opts,
                                  memra_error *err) {
    const char *v = value ? value : "";
    size_t n = strcspn(v, ":,");
    if (n == 0 || n >= size)
        return memra_fail(err, MEMRA_E_INVALID, "%s=%.100s: expected NAME[:KEY=VALUE...] (NAME an op plugin)", key, v);
    memcpy(name, v, n);
    name[n] = '\0';
    const char *p = v + n;
    while (*p) {
        p++; /* the separator */
        size_t len = strcspn(p, ":,");
        const char *eq = memchr(p, '=', len);
        size_t klen = eq ? (size_t)(eq - p) : 0;
        size_t vlen = eq ? len - klen - 1 : 0;
        char k[MEMRA_OPT_KEY_MAX], val[MEMRA_OPT_VALUE_MAX];
        if (!eq || klen == 0 || klen >= sizeof k || vlen == 0 || vlen >= sizeof val)
            return memra_fail(err, MEMRA_E_INVALID,
                              "%s=%.100s: expected NAME[:KEY=VALUE...], each item after the name KEY=VALUE", key, v);
        memcpy(k, p, klen);
        k[klen] = '\0';
        memcpy(val, eq + 1, vlen);
        val[vlen] = '\0';
        if (memra_options_get(opts, k))
            return memra_fail(err, MEMRA_E_INVALID, "%s=%.100s: the plugin's key '%s' is given twice", key, v, k);
        memra_status st = memra_options_set(opts, k, val, err);
        if (st != MEMRA_OK)
            return st;
        p += len;
    }
    return MEMRA_OK;
}

bool memra_op_serves(const memra_op_vtable *vt, const char *family, memra_op_kind kind, uint32_t type) {
    if (!vt || !family)
        return false;
    const uint64_t bit = type < 64 ? (uint64_t)1 << type : 0;
    if (strcmp(family, "cpu") == 0) {
        switch (kind) {
        case MEMRA_OP_RMSNORM: return vt->cpu_rmsnorm != NULL;
        case MEMRA_OP_ROPE: return vt->cpu_rope != NULL;
        case MEMRA_OP_ATTENTION: return vt->cpu_attention != NULL;
        case MEMRA_OP_GEMV: return vt->cpu_gemv != NULL && (vt->cpu_gemv_types & bit);
        case MEMRA_OP_TOPK: return MEMRA_HAS_MEMBER(vt, memra_op_vtable, cpu_topk) && vt->cpu_topk != NULL;
        }
    } else if (strcmp(family, "cuda") == 0) {
        switch (kind) {
        case MEMRA_OP_RMSNORM: return vt->cuda_rmsnorm != NULL;
        case MEMRA_OP_GEMV: return vt->cuda_gemv != NULL && (vt->cuda_gemv_types & bit);
        default: return false;
        }
    }
    return false;
}

static void served_append(char *buf, size_t size, size_t *used, const char *family, const char *what,
                          const char *type) {
    if (*used >= size)
        return;
    int n = snprintf(buf + *used, size - *used, "%s%s %s%s%s", *used ? ", " : "", family, what, type ? "." : "",
                     type ? type : "");
    if (n > 0)
        *used += (size_t)n;
}

void memra_op_served(const memra_op_vtable *vt, char *buf, size_t size) {
    static const char *const families[] = {"cpu", "cuda"};
    size_t used = 0;
    if (size == 0)
        return;
    buf[0] = '\0';
    for (size_t f = 0; f < 2; f++)
        for (uint32_t k = MEMRA_OP_RMSNORM; k <= OP_KIND_LAST; k++) {
            if (k != MEMRA_OP_GEMV) {
                if (memra_op_serves(vt, families[f], (memra_op_kind)k, 0))
                    served_append(buf, size, &used, families[f], op_kind_names[k], NULL);
                continue;
            }
            for (uint32_t t = 0; t < 64; t++) {
                if (!memra_op_serves(vt, families[f], MEMRA_OP_GEMV, t))
                    continue;
                char lower[16];
                snprintf(lower, sizeof lower, "%s", memra_tensor_type_name(t));
                for (char *c = lower; *c; c++)
                    *c = (char)tolower((unsigned char)*c);
                served_append(buf, size, &used, families[f], "gemv", lower);
            }
        }
    if (!buf[0])
        snprintf(buf, size, "nothing");
}

static memra_status bind_one(const memra_host *host, const char *family, const memra_option *o, memra_op_binding *b,
                             memra_error *err) {
    memra_options own = {0};
    memra_status st = memra_op_value_parse(o->key, o->value, b->name, sizeof b->name, &own, err);
    if (st != MEMRA_OK)
        return st;
    if (!memra_op_key_parse(o->key, &b->kind, &b->type))
        return memra_fail(err, MEMRA_E_INVALID,
                          "%s=%.100s: unknown op kind '%s' (op kinds: rmsnorm, rope, attention, gemv.TYPE, topk)",
                          o->key, o->value, o->key + strlen(MEMRA_OP_KEY_PREFIX));
    snprintf(b->key, sizeof b->key, "%s", o->key);
    const memra_plugin *p = NULL;
    if ((st = host->find_plugin(b->name, MEMRA_PLUGIN_OP, &p, err)) != MEMRA_OK) {
        memra_error_prefix(err, "%s=%.100s", o->key, o->value);
        return st;
    }
    const memra_op_vtable *vt = p && MEMRA_HAS_MEMBER(p, memra_plugin, op) ? p->op : NULL;
    if (!memra_op_serves(vt, family, b->kind, b->type)) {
        char served[256];
        memra_op_served(vt, served, sizeof served);
        return memra_fail(err, MEMRA_E_INVALID, "%s=%.100s: the op plugin '%s' does not serve %s on %s (it serves: %s)",
                          o->key, o->value, b->name, o->key + strlen(MEMRA_OP_KEY_PREFIX), family, served);
    }
    const memra_option_spec *lists[1] = {vt->options};
    const uint32_t counts[1] = {vt->options ? vt->n_options : 0};
    if ((st = memra_options_check(&own, lists, counts, 1, o->value, err)) != MEMRA_OK) {
        memra_error_prefix(err, "%s: the op plugin '%s'", o->key, b->name);
        return st;
    }
    if ((st = vt->create(host, family, b->kind, b->type, &own, &b->op, err)) != MEMRA_OK) {
        memra_error_prefix(err, "%s=%.100s: the op plugin '%s'", o->key, o->value, b->name);
        return st;
    }
    b->vt = vt;
    return MEMRA_OK;
}

memra_status memra_op_set_open(const memra_host *host, const char *family, const memra_options *arm, memra_op_set *set,
                               memra_error *err) {
    if (!host || !family || !set)
        return memra_fail(err, MEMRA_E_INVALID, "memra_op_set_open: a NULL argument");
    memset(set, 0, sizeof *set);
    for (uint32_t i = 0; arm && i < arm->n; i++) {
        const memra_option *o = &arm->items[i];
        if (strncmp(o->key, MEMRA_OP_KEY_PREFIX, strlen(MEMRA_OP_KEY_PREFIX)) != 0)
            continue;
        if (strcmp(o->value, MEMRA_OP_BUILTIN) == 0) {
            if (!memra_op_key_parse(o->key, NULL, NULL)) {
                memra_op_set_close(set);
                return memra_fail(err, MEMRA_E_INVALID,
                                  "%s=%s: unknown op kind '%s' (op kinds: rmsnorm, rope, attention, gemv.TYPE, topk)",
                                  o->key, o->value, o->key + strlen(MEMRA_OP_KEY_PREFIX));
            }
            continue;
        }
        if (set->n == MEMRA_OP_SET_MAX) {
            memra_op_set_close(set);
            return memra_fail(err, MEMRA_E_INVALID, "more than %u op plugins on one arm", MEMRA_OP_SET_MAX);
        }
        memra_status st = bind_one(host, family, o, &set->items[set->n], err);
        if (st != MEMRA_OK) {
            memra_op_set_close(set);
            return st;
        }
        set->n++;
    }
    return MEMRA_OK;
}

void memra_op_set_close(memra_op_set *set) {
    if (!set)
        return;
    for (uint32_t i = 0; i < set->n; i++)
        if (set->items[i].vt && set->items[i].op)
            set->items[i].vt->destroy(set->items[i].op);
    memset(set, 0, sizeof *set);
}

const memra_op_binding *memra_op_set_find(const memra_op_set *set, memra_op_kind kind, uint32_t type) {
    for (uint32_t i = 0; set && i < set->n; i++)
        if (set->items[i].kind == kind && (kind != MEMRA_OP_GEMV || set->items[i].type == type))
            return &set->items[i];
    return NULL;
}
