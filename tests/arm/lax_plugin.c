/* lax_plugin.c: TEST-ONLY backend plugins "lax" and "laxnull" for the arm layer's tests. They wrap
 * the cpu backend (found through the host table) and are deliberately lax where the arm layer is
 * strict, so that only the layer can refuse, and a test proves the layer is what refused:
 *   - a token outside the vocabulary is taken modulo n_vocab; MEMRA_TOKEN_FROM_DEVICE with no
 *     sampled step before it becomes token 0;
 *   - the cpu state gets 8 positions more than the capacity asked and 4 times the steps in
 *     flight, so neither a full state nor a window overrun is refused here;
 *   - a failure injected with fail_step=K (step_begin at position K returns MEMRA_E_DEVICE)
 *     quarantines nothing here: later steps would run;
 *   - bad_sample=K: the step at position K reports the sampled token n_vocab + 7;
 *   - ext_small=1: the "memra.census" extension table declares a struct_size of 4 bytes;
 *   - bad_chunk=K: a prefill chunk (step_chunk, forwarded to the cpu's) that holds position K runs
 *     the token after K's there instead: a wrong chunk implementation, whose KV cache, hidden
 *     state and logits part from single steps at that chunk's boundary (the negative control of
 *     the chunk-boundary comparison). lax's prefill_chunk is 16.
 *   - taps=1: offers memra.ops, the cpu's tapped step forwarded (with bad_chunk, a bisect of the
 *     chunk-boundary mismatch can then replay the chunk that made it).
 * Extension "lax.calls" v1 counts the step_begin and step_chunk calls that reached this plugin
 * (in the process).
 * "laxold" (built with LAX_OLD) declares the vtable size of ABI 1's first shape (the end of
 * resolve_options) but has prefill_chunk and step_chunk filled in past it, as traps: the core
 * must never read them (prefill_chunk would say 999; step_chunk fails), so its `prefill=auto` is
 * 1 and its `prefill=M` runs as single steps.
 * "laxnull" (built with LAX_NULL) leaves every optional vtable member NULL (state_stats, memory,
 * extension, resolve_options). Never installed. */
#include <stdlib.h>
#include <string.h>

#include "memra/ext.h"
#include "memra/plugin.h"

#ifndef LAX_NAME
#define LAX_NAME "lax"
#endif
#define LAX_NONE UINT32_MAX

/* "lax.calls" v1 */
typedef struct lax_calls_v1 {
    uint32_t struct_size;
    uint64_t (*step_begins)(void); /* in this process, over every lax backend */
    uint64_t (*step_chunks)(void); /* step_chunk calls (and, for laxold, prefill_chunk calls) */
} lax_calls_v1;

static const memra_option_spec lax_options[] = {
    {"fail_step", "none", "TEST: step_begin at this position fails (MEMRA_E_DEVICE) without quarantining"},
    {"bad_sample", "none", "TEST: the step at this position reports a sampled token outside the vocabulary"},
    {"ext_small", "0", "TEST: 1 makes the memra.census table declare a struct_size of 4"},
    {"bad_chunk", "none", "TEST: the prefill chunk holding this position runs the next token there"},
    {"taps", "0", "TEST: 1 offers memra.ops (the cpu's tapped step, forwarded)"},
    {"threads", "", "cpu threads (passed on)"},
};
#define LAX_N_OPTIONS (sizeof lax_options / sizeof lax_options[0])

static const memra_host *lax_host;
static uint64_t lax_step_begin_calls;
#ifndef LAX_NULL
static uint64_t lax_step_chunk_calls;
#endif

struct memra_backend {
    const memra_backend_vtable *cpu;
    memra_backend *inner;
    uint32_t n_vocab;
    uint32_t fail_step, bad_sample, ext_small, bad_chunk, taps;
};

struct memra_state {
    memra_state *inner;
    uint32_t next_pos;
    bool carry;
};

static memra_status find_cpu(const memra_backend_vtable **out, memra_error *err) {
    const memra_plugin *p = NULL;
    memra_status st = lax_host->find_plugin("cpu", MEMRA_PLUGIN_BACKEND, &p, err);
    if (st == MEMRA_OK)
        *out = p->backend;
    return st;
}

static bool own_key(const char *key) {
    return strcmp(key, "fail_step") == 0 || strcmp(key, "bad_sample") == 0 || strcmp(key, "ext_small") == 0 ||
           strcmp(key, "bad_chunk") == 0 || strcmp(key, "taps") == 0;
}

static void strip(const memra_options *in, memra_options *out) {
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < in->n; i++)
        if (!own_key(in->items[i].key))
            out->items[out->n++] = in->items[i];
}

static uint32_t opt(const memra_options *opts, const char *key, uint32_t dflt) {
    for (uint32_t i = 0; i < opts->n; i++)
        if (strcmp(opts->items[i].key, key) == 0)
            return (uint32_t)strtoul(opts->items[i].value, NULL, 10);
    return dflt;
}

static memra_status lax_init(const memra_host *host, memra_error *err) {
    (void)err;
    lax_host = host;
    return MEMRA_OK;
}

static memra_status lax_device_count(const memra_host *host, const memra_options *opts, uint32_t *out,
                                     memra_error *err) {
    const memra_backend_vtable *cpu;
    memra_status st = find_cpu(&cpu, err);
    if (st != MEMRA_OK)
        return st;
    memra_options fwd;
    strip(opts, &fwd);
    return cpu->device_count(host, &fwd, out, err);
}

static memra_status lax_open(const memra_host *host, const memra_model *m, const memra_plan *plan,
                             const memra_options *opts, memra_backend **out, memra_error *err) {
    memra_backend *b = calloc(1, sizeof *b);
    if (!b)
        return host->fail(err, MEMRA_E_NOMEM, "lax: out of memory");
    b->n_vocab = m->n_vocab;
    b->fail_step = opt(opts, "fail_step", LAX_NONE);
    b->bad_sample = opt(opts, "bad_sample", LAX_NONE);
    b->ext_small = opt(opts, "ext_small", 0);
    b->bad_chunk = opt(opts, "bad_chunk", LAX_NONE);
    b->taps = opt(opts, "taps", 0);
    memra_status st = find_cpu(&b->cpu, err);
    if (st == MEMRA_OK) {
        memra_options fwd;
        strip(opts, &fwd);
        st = b->cpu->open(host, m, plan, &fwd, &b->inner, err);
    }
    if (st != MEMRA_OK) {
        free(b);
        return st;
    }
    *out = b;
    return MEMRA_OK;
}

static void lax_close(memra_backend *b) {
    b->cpu->close(b->inner);
    free(b);
}

static memra_status lax_state_new(memra_backend *b, uint32_t capacity, uint32_t max_inflight, memra_state **out,
                                  memra_error *err) {
    memra_state *s = calloc(1, sizeof *s);
    if (!s)
        return lax_host->fail(err, MEMRA_E_NOMEM, "lax: out of memory");
    memra_status st = b->cpu->state_new(b->inner, capacity + 8, max_inflight * 4, &s->inner, err);
    if (st != MEMRA_OK) {
        free(s);
        return st;
    }
    *out = s;
    return MEMRA_OK;
}

static void lax_state_free(memra_backend *b, memra_state *s) {
    b->cpu->state_free(b->inner, s->inner);
    free(s);
}

static memra_status lax_step_begin(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err) {
    lax_step_begin_calls++;
    if (s->next_pos == b->fail_step)
        return lax_host->fail(err, MEMRA_E_DEVICE, "lax: injected failure at position %u", s->next_pos);
    memra_step_args a = *args;
    if (a.token == MEMRA_TOKEN_FROM_DEVICE && !s->carry)
        a.token = 0;
    else if (a.token != MEMRA_TOKEN_FROM_DEVICE && (a.token < 0 || a.token >= (int64_t)b->n_vocab))
        a.token = ((a.token % (int64_t)b->n_vocab) + b->n_vocab) % b->n_vocab;
    memra_status st = b->cpu->step_begin(b->inner, s->inner, &a, err);
    if (st != MEMRA_OK)
        return st;
    s->next_pos++;
    s->carry = args->sample != NULL;
    return MEMRA_OK;
}

static memra_status lax_step_end(memra_backend *b, memra_state *s, float *logits, memra_step_result *out,
                                 memra_error *err) {
    memra_status st = b->cpu->step_end(b->inner, s->inner, logits, out, err);
    if (st == MEMRA_OK && out && out->token >= 0 && out->position == b->bad_sample + 1)
        out->token = (int64_t)b->n_vocab + 7;
    return st;
}

#ifndef LAX_NULL
static uint32_t lax_prefill_chunk(const memra_host *host, const memra_options *opts) {
    (void)host, (void)opts;
#ifdef LAX_OLD
    lax_step_chunk_calls++;
    return 999;
#else
    return 16;
#endif
}

static memra_status lax_step_chunk(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t count,
                                   float *logits, memra_error *err) {
    lax_step_chunk_calls++;
#ifdef LAX_OLD
    (void)b, (void)s, (void)tokens, (void)count, (void)logits;
    return lax_host->fail(err, MEMRA_E_INTERNAL, "laxold: step_chunk read past the vtable's declared size");
#else
    int64_t t[4096];
    if (count > 4096)
        return lax_host->fail(err, MEMRA_E_INVALID, "lax: a chunk of %u", count);
    memcpy(t, tokens, count * sizeof *t);
    if (b->bad_chunk >= s->next_pos && b->bad_chunk - s->next_pos < count)
        t[b->bad_chunk - s->next_pos] = (t[b->bad_chunk - s->next_pos] + 1) % (int64_t)b->n_vocab;
    memra_status st = b->cpu->step_chunk(b->inner, s->inner, t, count, logits, err);
    if (st == MEMRA_OK) {
        s->next_pos += count;
        s->carry = false;
    }
    return st;
#endif
}
#endif

static memra_status lax_digest(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32],
                               memra_error *err) {
    return b->cpu->digest(b->inner, s->inner, kind, out, err);
}

static memra_status lax_state_restore(memra_backend *b, memra_state *dst, const memra_state *src, memra_error *err) {
    memra_status st = b->cpu->state_restore(b->inner, dst->inner, src->inner, err);
    if (st == MEMRA_OK) {
        dst->next_pos = src->next_pos;
        dst->carry = src->carry;
    }
    return st;
}

static uint32_t lax_state_position(memra_backend *b, const memra_state *s) {
    return b->cpu->state_position(b->inner, s->inner);
}

#ifndef LAX_NULL
static memra_status lax_state_stats(memra_backend *b, const memra_state *s, memra_state_stats *out, memra_error *err) {
    return b->cpu->state_stats(b->inner, s->inner, out, err);
}

static memra_status lax_memory(memra_backend *b, memra_backend_memory *out, memra_error *err) {
    return b->cpu->memory(b->inner, out, err);
}

static memra_status lax_census(memra_backend *b, const memra_state *s, memra_census_row *rows, uint32_t max_rows,
                               uint32_t *n_rows, memra_error *err) {
    (void)err;
    *n_rows = 0;
    if (max_rows > 0) {
        memset(&rows[0], 0, sizeof rows[0]);
        strcpy(rows[0].kind, "host");
        rows[0].count = b->cpu->state_position(b->inner, s->inner);
        *n_rows = 1;
    }
    return MEMRA_OK;
}

static uint64_t lax_step_begins(void) { return lax_step_begin_calls; }
static uint64_t lax_step_chunks(void) { return lax_step_chunk_calls; }

static const memra_ext_census_v1 lax_census_table = {.struct_size = sizeof lax_census_table, .census = lax_census};
static const memra_ext_census_v1 lax_census_small = {.struct_size = 4, .census = lax_census};
static const lax_calls_v1 lax_calls_table = {
    .struct_size = sizeof lax_calls_table, .step_begins = lax_step_begins, .step_chunks = lax_step_chunks};

static memra_status lax_step_tapped(memra_backend *b, memra_state *s, const memra_step_args *args, memra_op_tap_fn fn,
                                    void *user, memra_error *err) {
    const memra_ext_ops_v1 *ops = b->cpu->extension ? b->cpu->extension(b->inner, MEMRA_EXT_OPS, 1) : NULL;
    if (!ops || !ops->step_tapped)
        return lax_host->fail(err, MEMRA_E_UNSUPPORTED, "lax: the cpu backend offers no memra.ops");
    memra_status st = ops->step_tapped(b->inner, s->inner, args, fn, user, err);
    if (st == MEMRA_OK) {
        s->next_pos++;
        s->carry = args->sample != NULL;
    }
    return st;
}

static const memra_ext_ops_v1 lax_ops_table = {.struct_size = sizeof lax_ops_table, .step_tapped = lax_step_tapped};

static const void *lax_extension(memra_backend *b, const char *name, uint32_t version) {
    if (version == 1 && b->taps && strcmp(name, MEMRA_EXT_OPS) == 0)
        return &lax_ops_table;
    if (version == 1 && strcmp(name, MEMRA_EXT_CENSUS) == 0)
        return b->ext_small ? (const void *)&lax_census_small : (const void *)&lax_census_table;
    if (version == 1 && strcmp(name, "lax.calls") == 0)
        return &lax_calls_table;
    return NULL;
}
#endif

static const memra_backend_vtable lax_vtable = {
#ifdef LAX_OLD
    .struct_size = MEMRA_STRUCT_END(memra_backend_vtable, resolve_options), /* ABI 1's first shape */
#else
    .struct_size = sizeof(memra_backend_vtable),
#endif
    .options = lax_options,
    .n_options = LAX_N_OPTIONS,
    .device_count = lax_device_count,
    .open = lax_open,
    .close = lax_close,
    .state_new = lax_state_new,
    .state_free = lax_state_free,
    .step_begin = lax_step_begin,
    .step_end = lax_step_end,
    .digest = lax_digest,
    .state_restore = lax_state_restore,
    .state_position = lax_state_position,
#ifndef LAX_NULL
    .state_stats = lax_state_stats,
    .memory = lax_memory,
    .extension = lax_extension,
#endif
#ifndef LAX_NULL
    .prefill_chunk = lax_prefill_chunk,
    .step_chunk = lax_step_chunk,
#endif
};

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = LAX_NAME,
    .kind = MEMRA_PLUGIN_BACKEND,
    .version = "0.1.0",
    .description = "TEST: a cpu backend that refuses nothing the arm layer checks",
    .init = lax_init,
    .backend = &lax_vtable,
};
