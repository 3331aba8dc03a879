/* faulty.c: TEST-ONLY backend plugin "faulty" for memra-gate's negative controls. It wraps the
 * `cpu` backend (found through the host table) and forwards every call; on request through its
 * arm keys it corrupts exactly one thing, so the tests can prove the gate catches each fault at
 * the right place with exit 1:
 *
 *   flip_logit_step=K   the step at position K hands back its logits with the lowest bit of one
 *                       logit flipped (index flip_logit_index, default 0). Its LOGITS digest is
 *                       altered too, as a backend whose readback was corrupted would show it,
 *                       and so is the logits site of its tapped step (memra.ops, wrapped from the
 *                       cpu's): the bisect names the head's last op.
 *   nan_logit_step=K    the step at position K hands back a NaN at logit index flip_logit_index
 *                       (the gate must call any NaN or infinity a failure of its own).
 *   corrupt_cache_step=K  one element of the KV cache slot written at position K is corrupted.
 *                       The cpu backend does not expose its cache for writing (and plugin.h has
 *                       no such hook, rightly), so this is emulated where the gate can see the
 *                       cache: the CACHE digest of every state that holds position K (position
 *                       > K, restored copies included) has one bit flipped. Logits and tokens
 *                       are untouched, so only the gate's cache comparison can catch it: the
 *                       control proves that comparison is live.
 *   digest_fail_step=K  the CACHE digest of the state that holds position K (position K + 1) is
 *                       computed as if OpenSSL had failed: through the host table's sha256_final
 *                       on a NULL context, what the cpu backend does when sha256_new fails. With
 *                       the key on both arms the two digests both fail at the same step: the gate
 *                       must not call them equal.
 *   corrupt_row=R       the pass after this backend's R-th state_restore (counting from 0: a gate
 *                       copies the prefix once, then restores once per row) reports one wrong sampled token,
 *                       token number corrupt_row_token (default 1) of the row: (t + 1) mod n_vocab.
 *
 *   max_steps=K         the backend runs K steps in all (every state counted), then refuses each
 *                       step (MEMRA_E_RANGE): how many steps a gate spends on an arm is testable.
 *   carry_off=1         a step whose token is MEMRA_TOKEN_FROM_DEVICE is fed the carried token
 *                       (what the state's previous step sampled) + 1 mod n_vocab instead, as a
 *                       backend whose device-side carry is off by one would: the correctness
 *                       passes (explicit tokens) cannot see it, only a pass that carries tokens
 *                       on the device can. The carried token is known at step_end, so a step
 *                       from the device begun while another is in flight is refused (use
 *                       window=1 with this key).
 *
 *   force_token=T       every step samples T (the cpu's choice is overridden, and a step that
 *                       takes its token from the device gets T): a stream that loops, or one
 *                       that meets EOS when T is the model's eos id (the rows become ineligible).
 *   census=1            offer the "memra.census" extension (rows "host": the state's steps, and
 *                       "host:max_in_flight": the most steps it ever had begun and not ended),
 *                       so the gate's census record, and its pipelining, can be tested on cpu;
 *                       its dump_graphs writes one tiny DOT file per state, faulty-pos<P>.dot
 *                       (P the state's position), so --dump-graphs is exercised without a GPU.
 *                       census=2 offers the extension without dump_graphs (NULL).
 *   dump_fail=1         dump_graphs fails (MEMRA_E_IO) without writing: the gate must stop with
 *                       an error naming the directory.
 *
 *   fake_device_mib=W   report device memory as a GPU backend would: W MiB of weights, and a
 *                       process-wide "device in use" that each open grows by W + 2 MiB (its own
 *                       upload and scratch), or by 2 MiB only with fake_share=1 when an earlier
 *                       fake_device backend is open (a shared upload): the gate's shared-upload
 *                       evidence is tested without a GPU.
 *   taps=0|1|2          memra.ops: 0 (default) offers the cpu's tapped step with the logit faults
 *                       above applied to the logits site; 1 offers no taps (a bisect says it
 *                       cannot run); 2 offers them and every tapped step fails (a bisect that
 *                       stops part way must leave the verdict alone); 3 hands over only the
 *                       sites the cuda backend taps (q, k, v, attention, attn_res, ffn_act,
 *                       ffn_res, logits), as a backend that fuses ops would.
 *   no_device=1         device_count reports no device (MEMRA_E_DEVICE), as the cuda backend does on
 *                       a machine without a GPU: the tools must say so before they load the model.
 *   fake_capture=1      the state's counters read as a graph backend's would: one capture at the
 *                       state's first step, one replay per step (restores copy no counters).
 *
 * corrupt_row counts every state_restore of this backend, rows or not. In a gate, restore 0 is
 * the gate's copy of the arm's correctness run at the end of its prime (the prefix the rows start
 * from), so the first timing row is restore 1; in a --profile run (no rows) restore 1 is the arm's
 * warm-up and restore 2 its profile window, so corrupt_row=2 alters one token inside the profile
 * window only.
 *
 * Every other key is the cpu backend's (its specs are copied at init, so its --help and key
 * checks stay true) and passes through, as do the placement's keys. Never install this plugin: it exists to make the gate fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/ext.h"
#include "memra/plugin.h"

#define FAULTY_NONE UINT32_MAX
#define FAULTY_MAX_INFLIGHT 64

static const memra_option_spec faulty_options[] = {
    {.key = "flip_logit_step",
     .default_value = "none",
     .help = "TEST: flip the lowest bit of one logit of the step at this position"},
    {.key = "nan_logit_step",
     .default_value = "none",
     .help = "TEST: one logit of the step at this position reads back as NaN"},
    {.key = "flip_logit_index", .default_value = "0", .help = "TEST: which logit flip_logit_step flips"},
    {.key = "corrupt_cache_step",
     .default_value = "none",
     .help = "TEST: corrupt (the digest of) the KV slot written at this position"},
    {.key = "digest_fail_step",
     .default_value = "none",
     .help = "TEST: the cache digest of the state holding this position fails (as OpenSSL would)"},
    {.key = "corrupt_row",
     .default_value = "none",
     .help = "TEST: corrupt one sampled token of this timing row (0 = first restore)"},
    {.key = "corrupt_row_token", .default_value = "1", .help = "TEST: which token of the row corrupt_row alters"},
    {.key = "max_steps",
     .default_value = "none",
     .help = "TEST: the backend runs this many steps in all (every state), then refuses each step"},
    {.key = "carry_off",
     .default_value = "0",
     .help = "TEST: 1 feeds the carried token + 1 (mod n_vocab) to a step taking its token from the device"},
    {.key = "force_token",
     .default_value = "none",
     .help = "TEST: every step samples this token (a looping stream, or EOS)"},
    {.key = "census",
     .default_value = "0",
     .help = "TEST: 1 offers the memra.census extension (steps, max steps in flight) with dump_graphs "
             "(a tiny DOT file); 2 without dump_graphs"},
    {.key = "dump_fail", .default_value = "0", .help = "TEST: 1 makes dump_graphs fail without writing"},
    {.key = "fake_device_mib",
     .default_value = "none",
     .help = "TEST: report W MiB of weights and a fake device-in-use that each open grows"},
    {.key = "fake_capture",
     .default_value = "0",
     .help = "TEST: 1 counts a graph capture at a state's first step and a replay per step"},
    {.key = "fake_share",
     .default_value = "0",
     .help = "TEST: with fake_device_mib, 1 shares an earlier open's fake upload"},
    {.key = "no_device",
     .default_value = "0",
     .help = "TEST: 1 makes device_count report no device (MEMRA_E_DEVICE), as a GPU backend without a GPU"},
    {.key = "taps",
     .default_value = "0",
     .help = "TEST: 0 offers memra.ops (the cpu's taps, logit faults applied); 1 offers none; 2 offers it and "
             "every tapped step fails; 3 hands over only the sites the cuda backend has"},
};
#define FAULTY_N_OWN (sizeof faulty_options / sizeof faulty_options[0])
#define FAULTY_MAX_KEYS 64

/* faulty's keys and then the cpu backend's (found at init, so a key cpu adds passes through
 * without a change here). */
static memra_option_spec faulty_keys[FAULTY_MAX_KEYS];

typedef struct faulty_cfg {
    uint32_t flip_step, nan_step, flip_index, cache_step, row, row_token, force_token, census, dump_fail;
    uint32_t fake_mib, fake_share, fake_capture, carry_off, digest_fail_step, taps, max_steps;
} faulty_cfg;

struct memra_backend {
    const memra_host *host;
    const memra_backend_vtable *cpu;
    memra_backend *inner;
    faulty_cfg cfg;
    uint32_t n_vocab;
    uint32_t restores; /* state_restore calls so far */
    uint32_t steps;    /* step_begin calls so far, every state */
};

/* fake_device_mib: the fake device's bytes in use, and the fake backends open. */
static uint64_t faulty_fake_in_use;
static uint32_t faulty_fake_open;

struct memra_state {
    memra_state *inner;
    uint32_t begin_pos[FAULTY_MAX_INFLIGHT]; /* position of each step in flight, oldest first */
    uint32_t head, count, max_inflight;
    uint32_t next_pos;      /* the position the next step begins at */
    uint32_t max_in_flight; /* the most steps ever begun and not ended at once */
    int64_t row;            /* the timing row this state is running (restore index), or -1 */
    uint32_t row_steps;     /* steps ended since the restore */
    bool last_flipped;      /* the last ended step had its logits flipped */
    int64_t carried;        /* what the last ended step sampled (the inner backend's choice), or -1 */
};

/* *out is set on every path (NULL on failure): at -O3 gcc cannot see that the callers read it
 * only after MEMRA_OK, and -Werror=maybe-uninitialized would stop the release build. */
static memra_status find_cpu(const memra_host *host, const memra_backend_vtable **out, memra_error *err) {
    const memra_plugin *p = NULL;
    *out = NULL;
    memra_status st = host->find_plugin("cpu", MEMRA_PLUGIN_BACKEND, &p, err);
    if (st != MEMRA_OK)
        return st;
    if (!p || !p->backend)
        return host->fail(err, MEMRA_E_PLUGIN, "faulty: plugin 'cpu' has no backend vtable");
    *out = p->backend;
    return MEMRA_OK;
}

static bool own_key(const char *key) {
    for (uint32_t i = 0; i < FAULTY_N_OWN; i++)
        if (strcmp(faulty_options[i].key, key) == 0)
            return true;
    return false;
}

/* The options without faulty's own keys: what the cpu backend gets. */
static void strip(const memra_options *in, memra_options *out) {
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < in->n; i++)
        if (!own_key(in->items[i].key))
            out->items[out->n++] = in->items[i];
}

static memra_status opt_u32(const memra_host *host, const memra_options *opts, const char *key, uint32_t dflt,
                            uint32_t *out, memra_error *err) {
    *out = dflt;
    for (uint32_t i = 0; i < opts->n; i++) {
        if (strcmp(opts->items[i].key, key) != 0)
            continue;
        const char *v = opts->items[i].value;
        char *end = NULL;
        unsigned long x = (*v >= '0' && *v <= '9') ? strtoul(v, &end, 10) : 0;
        if (!end || *end || x >= FAULTY_NONE)
            return host->fail(err, MEMRA_E_INVALID, "faulty: %s=%s: expected a non-negative integer", key, v);
        *out = (uint32_t)x;
    }
    return MEMRA_OK;
}

static memra_status read_cfg(const memra_host *host, const memra_options *opts, faulty_cfg *c, memra_error *err) {
    memra_status st = opt_u32(host, opts, "flip_logit_step", FAULTY_NONE, &c->flip_step, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "nan_logit_step", FAULTY_NONE, &c->nan_step, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "flip_logit_index", 0, &c->flip_index, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "corrupt_cache_step", FAULTY_NONE, &c->cache_step, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "corrupt_row", FAULTY_NONE, &c->row, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "corrupt_row_token", 1, &c->row_token, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "max_steps", FAULTY_NONE, &c->max_steps, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "force_token", FAULTY_NONE, &c->force_token, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "census", 0, &c->census, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "dump_fail", 0, &c->dump_fail, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "fake_device_mib", FAULTY_NONE, &c->fake_mib, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "fake_share", 0, &c->fake_share, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "fake_capture", 0, &c->fake_capture, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "carry_off", 0, &c->carry_off, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "digest_fail_step", FAULTY_NONE, &c->digest_fail_step, err);
    if (st == MEMRA_OK)
        st = opt_u32(host, opts, "taps", 0, &c->taps, err);
    return st;
}

static memra_status faulty_device_count(const memra_host *host, const memra_options *opts, uint32_t *out,
                                        memra_error *err) {
    const memra_backend_vtable *cpu = NULL;
    memra_status st = find_cpu(host, &cpu, err);
    if (st != MEMRA_OK)
        return st;
    uint32_t no_device = 0;
    if ((st = opt_u32(host, opts, "no_device", 0, &no_device, err)) != MEMRA_OK)
        return st;
    if (no_device)
        return host->fail(err, MEMRA_E_DEVICE, "faulty: no device (no_device=1)");
    memra_options fwd;
    strip(opts, &fwd);
    return cpu->device_count(host, &fwd, out, err);
}

static memra_status faulty_resolve(const memra_host *host, const memra_options *opts, memra_options *resolved,
                                   memra_error *err) {
    const memra_backend_vtable *cpu = NULL;
    faulty_cfg c;
    memra_status st = find_cpu(host, &cpu, err);
    if (st == MEMRA_OK)
        st = read_cfg(host, opts, &c, err);
    if (st != MEMRA_OK)
        return st;
    memra_options fwd;
    strip(opts, &fwd);
    if (cpu->resolve_options)
        st = cpu->resolve_options(host, &fwd, resolved, err);
    else
        *resolved = fwd;
    /* faulty's own keys as given (the core adds defaults for the absent ones) */
    for (uint32_t i = 0; st == MEMRA_OK && i < opts->n; i++)
        if (own_key(opts->items[i].key) && resolved->n < MEMRA_OPT_MAX)
            resolved->items[resolved->n++] = opts->items[i];
    return st;
}

static memra_status faulty_open(const memra_host *host, const memra_model *m, const memra_plan *plan,
                                const memra_options *opts, memra_backend **out, memra_error *err) {
    memra_backend *b = calloc(1, sizeof *b);
    if (!b)
        return host->fail(err, MEMRA_E_NOMEM, "faulty: out of memory");
    b->host = host;
    b->n_vocab = m->n_vocab;
    memra_status st = read_cfg(host, opts, &b->cfg, err);
    if (st == MEMRA_OK && b->cfg.force_token != FAULTY_NONE && b->cfg.force_token >= m->n_vocab)
        st = host->fail(err, MEMRA_E_INVALID, "faulty: force_token=%u is outside the vocabulary (%u)",
                        b->cfg.force_token, m->n_vocab);
    if (st == MEMRA_OK)
        st = find_cpu(host, &b->cpu, err);
    if (st == MEMRA_OK) {
        memra_options fwd;
        strip(opts, &fwd);
        st = b->cpu->open(host, m, plan, &fwd, &b->inner, err);
    }
    if (st != MEMRA_OK) {
        free(b);
        return st;
    }
    if (b->cfg.fake_mib != FAULTY_NONE) {
        bool shared = b->cfg.fake_share && faulty_fake_open > 0;
        faulty_fake_in_use += ((shared ? 0 : (uint64_t)b->cfg.fake_mib) + 2) << 20;
        faulty_fake_open++;
    }
    *out = b;
    return MEMRA_OK;
}

static void faulty_close(memra_backend *b) {
    if (!b)
        return;
    b->cpu->close(b->inner);
    free(b);
}

static memra_status faulty_state_new(memra_backend *b, uint32_t capacity, uint32_t max_inflight, memra_state **out,
                                     memra_error *err) {
    if (max_inflight == 0 || max_inflight > FAULTY_MAX_INFLIGHT)
        return b->host->fail(err, MEMRA_E_INVALID, "faulty: max_inflight %u out of 1..%u", max_inflight,
                             FAULTY_MAX_INFLIGHT);
    memra_state *s = calloc(1, sizeof *s);
    if (!s)
        return b->host->fail(err, MEMRA_E_NOMEM, "faulty: out of memory");
    memra_status st = b->cpu->state_new(b->inner, capacity, max_inflight, &s->inner, err);
    if (st != MEMRA_OK) {
        free(s);
        return st;
    }
    s->max_inflight = max_inflight;
    s->row = -1;
    s->carried = -1;
    *out = s;
    return MEMRA_OK;
}

static void faulty_state_free(memra_backend *b, memra_state *s) {
    if (!s)
        return;
    b->cpu->state_free(b->inner, s->inner);
    free(s);
}

static memra_status faulty_step_begin(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err) {
    uint32_t pos = s->next_pos;
    memra_step_args forced;
    if (b->cfg.force_token != FAULTY_NONE && args && args->token == MEMRA_TOKEN_FROM_DEVICE) {
        forced = *args; /* the device would carry the cpu's own choice: carry the forced one */
        forced.token = b->cfg.force_token;
        args = &forced;
    } else if (b->cfg.carry_off && args && args->token == MEMRA_TOKEN_FROM_DEVICE) {
        if (s->count || s->carried < 0)
            return b->host->fail(err, MEMRA_E_UNSUPPORTED,
                                 "faulty: carry_off=1: a step from the device at position %u, but %s (use window=1)",
                                 pos, s->count ? "a step is still in flight" : "no step sampled a token yet");
        forced = *args;
        forced.token = (s->carried + 1) % (int64_t)b->n_vocab;
        args = &forced;
    }
    if (b->cfg.max_steps != FAULTY_NONE && b->steps >= b->cfg.max_steps)
        return b->host->fail(err, MEMRA_E_RANGE, "faulty: max_steps=%u: this backend has run all its steps",
                             b->cfg.max_steps);
    memra_status st = b->cpu->step_begin(b->inner, s->inner, args, err);
    if (st != MEMRA_OK)
        return st;
    b->steps++;
    s->next_pos++;
    if (s->count < FAULTY_MAX_INFLIGHT)
        s->begin_pos[(s->head + s->count++) % FAULTY_MAX_INFLIGHT] = pos;
    if (s->count > s->max_in_flight)
        s->max_in_flight = s->count;
    return MEMRA_OK;
}

static memra_status faulty_step_end(memra_backend *b, memra_state *s, float *logits, memra_step_result *out,
                                    memra_error *err) {
    memra_status st = b->cpu->step_end(b->inner, s->inner, logits, out, err);
    if (st != MEMRA_OK)
        return st;
    uint32_t pos = s->count ? s->begin_pos[s->head] : FAULTY_NONE;
    if (s->count) {
        s->head = (s->head + 1) % FAULTY_MAX_INFLIGHT;
        s->count--;
    }
    if (out)
        s->carried = out->token;
    s->last_flipped = pos == b->cfg.flip_step;
    if (s->last_flipped && logits && b->cfg.flip_index < b->n_vocab) {
        uint32_t bits;
        memcpy(&bits, &logits[b->cfg.flip_index], sizeof bits);
        bits ^= 1u;
        memcpy(&logits[b->cfg.flip_index], &bits, sizeof bits);
    }
    if (pos == b->cfg.nan_step && logits && b->cfg.flip_index < b->n_vocab)
        logits[b->cfg.flip_index] = NAN;
    if (b->cfg.force_token != FAULTY_NONE && out && out->token >= 0)
        out->token = b->cfg.force_token;
    if (s->row >= 0 && s->row_steps++ == b->cfg.row_token && out && out->token >= 0)
        out->token = (out->token + 1) % (int64_t)b->n_vocab;
    return MEMRA_OK;
}

static memra_status faulty_digest(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32],
                                  memra_error *err) {
    memra_status st = b->cpu->digest(b->inner, s->inner, kind, out, err);
    if (st != MEMRA_OK)
        return st;
    uint32_t pos = b->cpu->state_position(b->inner, s->inner);
    if (kind == MEMRA_DIGEST_CACHE && b->cfg.cache_step != FAULTY_NONE && pos > b->cfg.cache_step)
        out[31] ^= 1u;
    if (kind == MEMRA_DIGEST_LOGITS && s->last_flipped)
        out[31] ^= 1u;
    if (kind == MEMRA_DIGEST_CACHE && b->cfg.digest_fail_step != FAULTY_NONE && pos == b->cfg.digest_fail_step + 1)
        b->host->sha256_final(NULL, out);
    return MEMRA_OK;
}

static memra_status faulty_state_restore(memra_backend *b, memra_state *dst, const memra_state *src, memra_error *err) {
    memra_status st = b->cpu->state_restore(b->inner, dst->inner, src->inner, err);
    if (st != MEMRA_OK)
        return st;
    dst->last_flipped = src->last_flipped;
    dst->carried = src->carried;
    dst->head = dst->count = 0;
    dst->next_pos = src->next_pos;
    dst->row_steps = 0;
    dst->row = b->restores == b->cfg.row ? (int64_t)b->restores : -1;
    b->restores++;
    return MEMRA_OK;
}

static uint32_t faulty_state_position(memra_backend *b, const memra_state *s) {
    return b->cpu->state_position(b->inner, s->inner);
}

static memra_status faulty_state_stats(memra_backend *b, const memra_state *s, memra_state_stats *out,
                                       memra_error *err) {
    memra_status st = MEMRA_OK;
    if (!b->cpu->state_stats) {
        memset(out, 0, sizeof *out);
        out->struct_size = sizeof *out;
    } else {
        st = b->cpu->state_stats(b->inner, s->inner, out, err);
    }
    if (st == MEMRA_OK && b->cfg.fake_capture) {
        out->captures = out->steps ? 1 : 0;
        out->replays = out->steps;
    }
    return st;
}

static memra_status faulty_memory(memra_backend *b, memra_backend_memory *out, memra_error *err) {
    if (!b->cpu->memory)
        return b->host->fail(err, MEMRA_E_UNSUPPORTED, "faulty: cpu reports no memory");
    memra_status st = b->cpu->memory(b->inner, out, err);
    if (st == MEMRA_OK && b->cfg.fake_mib != FAULTY_NONE) {
        out->weight_bytes = (uint64_t)b->cfg.fake_mib << 20;
        out->device_in_use = faulty_fake_in_use;
    }
    return st;
}

static memra_status faulty_census(memra_backend *b, const memra_state *s, memra_census_row *rows, uint32_t max_rows,
                                  uint32_t *n_rows, memra_error *err) {
    memra_state_stats stats = {.struct_size = sizeof stats};
    memra_status st = faulty_state_stats(b, s, &stats, err);
    if (st != MEMRA_OK)
        return st;
    *n_rows = 0;
    if (max_rows < 2)
        return MEMRA_OK;
    memset(rows, 0, 2 * sizeof rows[0]);
    snprintf(rows[0].kind, sizeof rows[0].kind, "host");
    rows[0].count = stats.steps;
    snprintf(rows[1].kind, sizeof rows[1].kind, "host:max_in_flight");
    rows[1].count = s->max_in_flight;
    *n_rows = 2;
    return MEMRA_OK;
}

/* One DOT file for the state: its position and steps, as a graph of one node. */
static memra_status faulty_dump_graphs(memra_backend *b, const memra_state *s, const char *dir, memra_error *err) {
    if (b->cfg.dump_fail)
        return b->host->fail(err, MEMRA_E_IO, "faulty: dump_fail=1: refusing to write into %s", dir);
    memra_state_stats stats = {.struct_size = sizeof stats};
    memra_status st = faulty_state_stats(b, s, &stats, err);
    if (st != MEMRA_OK)
        return st;
    uint32_t pos = b->cpu->state_position(b->inner, s->inner);
    char path[4200];
    int n = snprintf(path, sizeof path, "%s/faulty-pos%u.dot", dir, pos);
    if (n < 0 || (size_t)n >= sizeof path)
        return b->host->fail(err, MEMRA_E_INVALID, "faulty: dump path under %s is too long", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return b->host->fail(err, MEMRA_E_IO, "faulty: cannot create %s", path);
    fprintf(f, "digraph faulty_state {\n  state [label=\"position %u, %llu steps, max %u in flight\"];\n}\n", pos,
            (unsigned long long)stats.steps, s->max_in_flight);
    if (fclose(f) != 0)
        return b->host->fail(err, MEMRA_E_IO, "faulty: cannot write %s", path);
    return MEMRA_OK;
}

static const memra_ext_census_v1 faulty_census_ext = {
    .struct_size = sizeof(memra_ext_census_v1),
    .census = faulty_census,
    .dump_graphs = faulty_dump_graphs,
};

static const memra_ext_census_v1 faulty_census_only_ext = {
    .struct_size = sizeof(memra_ext_census_v1),
    .census = faulty_census,
    .dump_graphs = NULL,
};

/* memra.ops: the cpu's tapped step, with this backend's logit faults applied to the logits site
 * (the head's last op), as they are to the logits it hands back: a bisect names the head. */
typedef struct faulty_taps {
    memra_backend *b;
    memra_op_tap_fn fn;
    void *user;
    bool flip, nan;
} faulty_taps;

static memra_status faulty_tap(void *user, const memra_op_site *site, const float *data, memra_error *err) {
    faulty_taps *t = user;
    memra_backend *b = t->b;
    if (b->cfg.taps == 3 && site && site->site) {
        static const char *const fused[] = {"q", "k", "v", "attention", "attn_res", "ffn_act", "ffn_res", "logits"};
        bool kept = false;
        for (size_t i = 0; i < sizeof fused / sizeof fused[0]; i++)
            kept = kept || (strcmp(site->site, fused[i]) == 0 && strcmp(site->tensor, fused[i]) == 0);
        if (!kept)
            return MEMRA_OK;
    }
    bool logits = site && site->layer < 0 && site->site && strcmp(site->site, "logits") == 0;
    if (!logits || (!t->flip && !t->nan) || b->cfg.flip_index >= site->n)
        return t->fn(t->user, site, data, err);
    float *copy = malloc((size_t)site->n * sizeof *copy);
    if (!copy)
        return b->host->fail(err, MEMRA_E_NOMEM, "faulty: out of memory for a tapped logits copy");
    memcpy(copy, data, (size_t)site->n * sizeof *copy);
    if (t->flip) {
        uint32_t bits;
        memcpy(&bits, &copy[b->cfg.flip_index], sizeof bits);
        bits ^= 1u;
        memcpy(&copy[b->cfg.flip_index], &bits, sizeof bits);
    }
    if (t->nan)
        copy[b->cfg.flip_index] = NAN;
    memra_status st = t->fn(t->user, site, copy, err);
    free(copy);
    return st;
}

static memra_status faulty_step_tapped(memra_backend *b, memra_state *s, const memra_step_args *args,
                                       memra_op_tap_fn fn, void *user, memra_error *err) {
    const memra_ext_ops_v1 *ops = b->cpu->extension ? b->cpu->extension(b->inner, MEMRA_EXT_OPS, 1) : NULL;
    if (!ops || !ops->step_tapped)
        return b->host->fail(err, MEMRA_E_UNSUPPORTED, "faulty: the cpu backend offers no memra.ops");
    if (b->cfg.taps == 2)
        return b->host->fail(err, MEMRA_E_INTERNAL, "faulty: taps=2: the tapped step fails");
    uint32_t pos = s->next_pos;
    faulty_taps t = {.b = b, .fn = fn, .user = user, .flip = pos == b->cfg.flip_step, .nan = pos == b->cfg.nan_step};
    memra_status st = ops->step_tapped(b->inner, s->inner, args, faulty_tap, &t, err);
    if (st != MEMRA_OK)
        return st;
    s->next_pos++;
    s->last_flipped = t.flip;
    s->carried = -1;
    return MEMRA_OK;
}

static const memra_ext_ops_v1 faulty_ops_ext = {
    .struct_size = sizeof(memra_ext_ops_v1),
    .step_tapped = faulty_step_tapped,
};

/* The cpu's own extension tables take the cpu's backend pointer: they are not forwarded (memra.ops
 * is wrapped). */
static const void *faulty_extension(memra_backend *b, const char *name, uint32_t version) {
    if (b->cfg.census && strcmp(name, MEMRA_EXT_CENSUS) == 0 && version == 1)
        return b->cfg.census == 2 ? &faulty_census_only_ext : &faulty_census_ext;
    if (b->cfg.taps != 1 && strcmp(name, MEMRA_EXT_OPS) == 0 && version == 1)
        return &faulty_ops_ext;
    return NULL;
}

/* Not const: init fills in the option list (own keys, then cpu's). */
static memra_backend_vtable faulty_vtable = {
    .struct_size = sizeof(memra_backend_vtable),
    .options = faulty_options,
    .n_options = FAULTY_N_OWN,
    .device_count = faulty_device_count,
    .open = faulty_open,
    .close = faulty_close,
    .state_new = faulty_state_new,
    .state_free = faulty_state_free,
    .step_begin = faulty_step_begin,
    .step_end = faulty_step_end,
    .digest = faulty_digest,
    .state_restore = faulty_state_restore,
    .state_position = faulty_state_position,
    .state_stats = faulty_state_stats,
    .memory = faulty_memory,
    .extension = faulty_extension,
    .resolve_options = faulty_resolve,
};

static memra_status faulty_init(const memra_host *host, memra_error *err) {
    const memra_backend_vtable *cpu = NULL;
    memra_status st = find_cpu(host, &cpu, err);
    if (st != MEMRA_OK)
        return st;
    uint32_t n = 0;
    for (uint32_t i = 0; i < FAULTY_N_OWN; i++)
        faulty_keys[n++] = faulty_options[i];
    for (uint32_t i = 0; i < cpu->n_options && n < FAULTY_MAX_KEYS; i++)
        if (!own_key(cpu->options[i].key))
            faulty_keys[n++] = cpu->options[i];
    faulty_vtable.options = faulty_keys;
    faulty_vtable.n_options = n;
    return MEMRA_OK;
}

MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "faulty",
    .kind = MEMRA_PLUGIN_BACKEND,
    .version = "0.1.0",
    .description = "TEST ONLY: wraps cpu and corrupts one logit, cache slot or row token on request",
    .init = faulty_init,
    .backend = &faulty_vtable,
};
