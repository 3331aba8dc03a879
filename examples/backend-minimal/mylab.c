/* mylab.c: a minimal backend plugin, "mylab", to copy. It fills in every member of
 * memra_backend_vtable (core/include/memra/plugin.h: `grep -n "memra_backend_vtable" plugin.h`
 * shows the type, each member's contract is the comment above it there) and, so that it runs
 * from the first build, computes by handing each call to memra's own `cpu` backend, found through
 * the host table (host->find_plugin), as one plugin builds on another. A real backend replaces
 * each body below with its own code: the comment above each function says what it must do.
 *
 * Since it computes what cpu computes, `memra-gate --a cpu --b mylab` passes bit for bit: a
 * backend of your own is then gated against cpu with `--compare nmse:1e-4` (another order of
 * sums, other bits), and against itself (e.g. `--a mylab --b mylab:window=2`) exactly.
 *
 * Rules every plugin follows (plugin.h): never exit, abort or print; return a memra_status and
 * write the message with host->fail; log through host->log. */
#include <stdlib.h>

#include "memra/plugin.h"

/* One model loaded on one plan. Yours holds its weights (uploaded from the memra_model the
 * core hands to open) and whatever its devices need. */
struct memra_backend {
    const memra_host *host;
    const memra_backend_vtable *cpu; /* the backend this example hands its work to */
    memra_backend *inner;
};

/* One decode session: yours holds the KV cache, the position and the last step's results. */
struct memra_state {
    memra_state *inner;
};

/* The arm keys this backend reads (`mylab:key=value`), besides the placement's (stages,
 * splits, ...) and the core's (placement=, window=). memra plugins and --help list them; an arm
 * with a key no one takes is refused before open. This example takes the cpu backend's keys
 * (copied at init), since it hands them on. */
static memra_option_spec mylab_keys[32];

static memra_status find_cpu(const memra_host *host, const memra_backend_vtable **out, memra_error *err) {
    const memra_plugin *p = NULL;
    *out = NULL;
    memra_status st = host->find_plugin("cpu", MEMRA_PLUGIN_BACKEND, &p, err);
    if (st != MEMRA_OK)
        return st;
    if (!p || !p->backend)
        return host->fail(err, MEMRA_E_PLUGIN, "mylab: plugin 'cpu' has no backend vtable");
    *out = p->backend;
    return MEMRA_OK;
}

/* How many devices stages and ranks may be placed on; MEMRA_E_DEVICE with a message when
 * there is none. */
static memra_status mylab_device_count(const memra_host *host, const memra_options *opts, uint32_t *out,
                                       memra_error *err) {
    const memra_backend_vtable *cpu = NULL;
    memra_status st = find_cpu(host, &cpu, err);
    return st != MEMRA_OK ? st : cpu->device_count(host, opts, out, err);
}

/* Loads the weights the plan gives each rank (m->tensors, m->n_layer, ...: memra/model.h).
 * A model it cannot run (an architecture or a weight type it lacks) is MEMRA_E_UNSUPPORTED,
 * naming what. */
static memra_status mylab_open(const memra_host *host, const memra_model *m, const memra_plan *plan,
                               const memra_options *opts, memra_backend **out, memra_error *err) {
    memra_backend *b = calloc(1, sizeof *b);
    if (!b)
        return host->fail(err, MEMRA_E_NOMEM, "mylab: out of memory");
    b->host = host;
    memra_status st = find_cpu(host, &b->cpu, err);
    if (st == MEMRA_OK)
        st = b->cpu->open(host, m, plan, opts, &b->inner, err);
    if (st != MEMRA_OK) {
        free(b);
        return st;
    }
    *out = b;
    return MEMRA_OK;
}

/* Frees everything open made (b may be NULL). */
static void mylab_close(memra_backend *b) {
    if (!b)
        return;
    b->cpu->close(b->inner);
    free(b);
}

/* A state at position 0 with room for `capacity` positions and up to `max_inflight` steps begun
 * and not yet ended. */
static memra_status mylab_state_new(memra_backend *b, uint32_t capacity, uint32_t max_inflight, memra_state **out,
                                    memra_error *err) {
    memra_state *s = calloc(1, sizeof *s);
    if (!s)
        return b->host->fail(err, MEMRA_E_NOMEM, "mylab: out of memory");
    memra_status st = b->cpu->state_new(b->inner, capacity, max_inflight, &s->inner, err);
    if (st != MEMRA_OK) {
        free(s);
        return st;
    }
    *out = s;
    return MEMRA_OK;
}

static void mylab_state_free(memra_backend *b, memra_state *s) {
    if (!s)
        return;
    b->cpu->state_free(b->inner, s->inner);
    free(s);
}

/* One step as a transaction: the token (args->token, or the one this state sampled last when
 * it is MEMRA_TOKEN_FROM_DEVICE) through every layer at the state's position, the KV slot and
 * the position committed only if all of it succeeded, then the head and, if args->sample, the
 * sample (memra/sampling.h's algorithm, bit for bit). On failure nothing is committed and the
 * state is quarantined; a position at capacity is MEMRA_E_RANGE. */
static memra_status mylab_step_begin(memra_backend *b, memra_state *s, const memra_step_args *args,
                                     memra_error *err) {
    return b->cpu->step_begin(b->inner, s->inner, args, err);
}

/* Waits for the oldest step begun and not ended: its logits (n_vocab floats, when logits is not
 * NULL) and its result (token, position). */
static memra_status mylab_step_end(memra_backend *b, memra_state *s, float *logits, memra_step_result *out,
                                   memra_error *err) {
    return b->cpu->step_end(b->inner, s->inner, logits, out, err);
}

/* SHA-256 of the last logits, of the KV cache over [0, position) in canonical order, or of the
 * last hidden state (memra_digest_kind): what memra-gate compares step by step. */
static memra_status mylab_digest(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32],
                                 memra_error *err) {
    return b->cpu->digest(b->inner, s->inner, kind, out, err);
}

/* dst becomes an exact copy of src (position, cache, hidden, logits, carried token). */
static memra_status mylab_state_restore(memra_backend *b, memra_state *dst, const memra_state *src,
                                        memra_error *err) {
    return b->cpu->state_restore(b->inner, dst->inner, src->inner, err);
}

/* Tokens committed so far. */
static uint32_t mylab_state_position(memra_backend *b, const memra_state *s) {
    return b->cpu->state_position(b->inner, s->inner);
}

/* Every key of the arm as this backend will use it, defaults computed (threads=(auto) -> the
 * number it picks): what the gate's protocol record shows. Optional (NULL: the core lists the
 * keys given and the specs' defaults). */
static memra_status mylab_resolve_options(const memra_host *host, const memra_options *opts, memra_options *resolved,
                                          memra_error *err) {
    const memra_backend_vtable *cpu = NULL;
    memra_status st = find_cpu(host, &cpu, err);
    if (st != MEMRA_OK)
        return st;
    if (!cpu->resolve_options) {
        *resolved = *opts;
        return MEMRA_OK;
    }
    return cpu->resolve_options(host, opts, resolved, err);
}

/* The vtable: struct_size first, members only appended (plugin.h, "Rules of evolution"). The
 * members left out here (state_stats, memory, extension) are optional: NULL means "not
 * offered". Not const: init copies the cpu's keys into mylab_keys. */
static memra_backend_vtable mylab_vtable = {
    .struct_size = sizeof(memra_backend_vtable),
    .options = mylab_keys,
    .n_options = 0,
    .device_count = mylab_device_count,
    .open = mylab_open,
    .close = mylab_close,
    .state_new = mylab_state_new,
    .state_free = mylab_state_free,
    .step_begin = mylab_step_begin,
    .step_end = mylab_step_end,
    .digest = mylab_digest,
    .state_restore = mylab_state_restore,
    .state_position = mylab_state_position,
    .resolve_options = mylab_resolve_options,
};

/* Called once after the plugin is loaded, before any vtable call (may be NULL). */
static memra_status mylab_init(const memra_host *host, memra_error *err) {
    const memra_backend_vtable *cpu = NULL;
    memra_status st = find_cpu(host, &cpu, err);
    if (st != MEMRA_OK)
        return st;
    uint32_t n = 0;
    for (uint32_t i = 0; i < cpu->n_options && n < sizeof mylab_keys / sizeof mylab_keys[0]; i++)
        mylab_keys[n++] = cpu->options[i];
    mylab_vtable.n_options = n;
    host->log(MEMRA_LOG_INFO, "mylab", "ready");
    return MEMRA_OK;
}

/* The one symbol memra looks for. Its name carries the ABI version; name and kind must match
 * the manifest (memra_add_plugin writes it from the same NAME and KIND). */
MEMRA_EXPORT const memra_plugin memra_plugin_v1 = {
    .abi_version = MEMRA_ABI_VERSION,
    .struct_size = sizeof(memra_plugin),
    .name = "mylab",
    .kind = MEMRA_PLUGIN_BACKEND,
    .version = "0.1.0",
    .description = "example backend (examples/backend-minimal): hands its work to cpu",
    .init = mylab_init,
    .backend = &mylab_vtable,
};
