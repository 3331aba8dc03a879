/* cuda_graph.cu: the `cuda-graph` backend plugin. Per state, the first step captures one full
 * token (embedding, every stage, head, device sampler) into a CUDA graph; every step, the first
 * included, launches it. A prefill chunk's graph is captured per state and count; a freed state's
 * executable chunk graphs are kept (cg_spare) and updated to the next state's capture, which then
 * skips their instantiation. Token and position live in device memory and the commit happens inside
 * the graph, so a replay at any position needs no recapture and no parameter update. Restoring a
 * prefix copies device buffers in place, so the capture stays valid.
 *
 * Everything else (weights, states, kernels, digests, restore) is the `cuda` plugin's, reached
 * through the host table and its "memra.cuda.graph" extension: with --a cuda --b cuda-graph both
 * arms use one upload of the weights. A change of sampling configuration is a new capture (the
 * configuration is a kernel argument), counted as such. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ext.h"
#include "cuda_graph.h"
#include "memra/ext.h"
#include "memra/plugin.h"
#include "memra/status.h"

/* A captured prefill chunk body of one count. */
typedef struct cg_chunk_graph {
    uint32_t count; /* 0: empty */
    uint64_t used;  /* the state's chunk counter at its last replay (the older one is replaced) */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
} cg_chunk_graph;
#define CG_CHUNK_GRAPHS 2u /* the full chunk and the tail: at most two graphs of chunks per state */

/* An executable chunk graph a freed state left (its count and device): the next state that
 * captures a chunk of that count updates it to its own capture (cudaGraphExecUpdate: the same
 * kernels and copies, the new state's buffers) instead of instantiating one. */
typedef struct cg_spare {
    uint32_t count; /* 0: empty */
    int device;
    cudaGraphExec_t exec;
} cg_spare;
#define CG_SPARES 4u

struct memra_backend {
    const memra_host *host;
    const memra_backend_vtable *cv; /* the cuda plugin's vtable */
    memra_backend *inner;
    const memra_cuda_graph_ext_v1 *ext;
    pthread_mutex_t lock; /* spare */
    cg_spare spare[CG_SPARES];
    uint64_t reused; /* chunk graphs updated from a spare instead of instantiated */
};

struct memra_state {
    memra_state *inner;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cg_chunk_graph chunk[CG_CHUNK_GRAPHS];
    uint64_t chunks;
    bool sampled; /* the captured configuration */
    memra_sample_cfg cfg;
    uint64_t captures, replays;
    uint32_t dumps;
    bool failed; /* a device call of the state failed (its graphs are not kept as spares) */
};

static memra_status cg_cuda(const memra_host *host, const memra_backend_vtable **out, memra_error *err) {
    const memra_plugin *p = NULL;
    memra_status st = host->find_plugin("cuda", MEMRA_PLUGIN_BACKEND, &p, err);
    if (st) {
        memra_error_prefix(err, "cuda-graph builds on the cuda plugin");
        return st;
    }
    if (!MEMRA_HAS_MEMBER(p->backend, memra_backend_vtable, extension))
        return memra_fail(err, MEMRA_E_PLUGIN, "cuda-graph: the cuda plugin's backend table is too old");
    *out = p->backend;
    return MEMRA_OK;
}

/* The cuda plugin resolves the keys both take (MEMRA_CUDA_OPTION_SPECS). */
memra_status cg_resolve_options(const memra_host *host, const memra_options *opts, memra_options *resolved,
                                memra_error *err) {
    const memra_backend_vtable *cv;
    memra_status st = cg_cuda(host, &cv, err);
    if (st)
        return st;
    if (MEMRA_HAS_MEMBER(cv, memra_backend_vtable, resolve_options) && cv->resolve_options)
        return cv->resolve_options(host, opts, resolved, err);
    *resolved = *opts;
    return MEMRA_OK;
}

memra_status cg_device_count(const memra_host *host, const memra_options *opts, uint32_t *out, memra_error *err) {
    const memra_backend_vtable *cv;
    memra_status st = cg_cuda(host, &cv, err);
    return st ? st : cv->device_count(host, opts, out, err);
}

memra_status cg_open(const memra_host *host, const memra_model *m, const memra_plan *plan, const memra_options *opts,
                     memra_backend **out, memra_error *err) {
    const memra_backend_vtable *cv;
    memra_status st = cg_cuda(host, &cv, err);
    if (st)
        return st;
    memra_backend *b = (memra_backend *)calloc(1, sizeof *b);
    if (!b)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda-graph: out of host memory");
    b->host = host;
    b->cv = cv;
    pthread_mutex_init(&b->lock, NULL);
    if ((st = cv->open(host, m, plan, opts, &b->inner, err))) {
        pthread_mutex_destroy(&b->lock);
        free(b);
        return st;
    }
    b->ext = cv->extension ? (const memra_cuda_graph_ext_v1 *)cv->extension(b->inner, MEMRA_EXT_CUDA_GRAPH, 1) : NULL;
    if (!MEMRA_HAS_MEMBER(b->ext, memra_cuda_graph_ext_v1, kernel_family)) {
        cv->close(b->inner);
        pthread_mutex_destroy(&b->lock);
        free(b);
        return memra_fail(err, MEMRA_E_PLUGIN, "cuda-graph: the cuda plugin offers no '%s' v1 extension",
                          MEMRA_EXT_CUDA_GRAPH);
    }
    *out = b;
    return MEMRA_OK;
}

void cg_close(memra_backend *b) {
    if (!b)
        return;
    for (uint32_t k = 0; k < CG_SPARES; k++)
        if (b->spare[k].exec && cudaSetDevice(b->spare[k].device) == cudaSuccess)
            cudaGraphExecDestroy(b->spare[k].exec);
    b->cv->close(b->inner);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

/* A freed state's chunk graph: its exec kept as a spare (the oldest spare of its count, or the
 * first slot, destroyed), its graph destroyed. The state's stream has finished. */
static void cg_keep_spare(memra_backend *b, cg_chunk_graph *g, int device) {
    if (g->exec && g->count) {
        pthread_mutex_lock(&b->lock);
        cg_spare *to = &b->spare[0];
        for (uint32_t k = 0; k < CG_SPARES; k++)
            if (!b->spare[k].exec || (b->spare[k].count == g->count && b->spare[k].device == device)) {
                to = &b->spare[k];
                break;
            }
        if (to->exec && cudaSetDevice(to->device) == cudaSuccess)
            cudaGraphExecDestroy(to->exec);
        to->exec = g->exec;
        to->count = g->count;
        to->device = device;
        g->exec = NULL;
        pthread_mutex_unlock(&b->lock);
    }
    if (g->graph)
        cudaGraphDestroy(g->graph);
    memset(g, 0, sizeof *g);
}

/* A spare exec of `count` rows on `device` updated to `graph` (NULL when none is kept or the
 * update is refused: the caller instantiates; a refused spare is destroyed). */
static cudaGraphExec_t cg_take_spare(memra_backend *b, uint32_t count, int device, cudaGraph_t graph) {
    cudaGraphExec_t x = NULL;
    pthread_mutex_lock(&b->lock);
    for (uint32_t k = 0; k < CG_SPARES; k++)
        if (b->spare[k].exec && b->spare[k].count == count && b->spare[k].device == device) {
            x = b->spare[k].exec;
            memset(&b->spare[k], 0, sizeof b->spare[k]);
            break;
        }
    pthread_mutex_unlock(&b->lock);
    if (!x)
        return NULL;
    cudaGraphExecUpdateResultInfo info;
    if (cudaGraphExecUpdate(x, graph, &info) != cudaSuccess) {
        (void)cudaGetLastError(); /* the refusal is not the stream's error */
        cudaGraphExecDestroy(x);
        return NULL;
    }
    pthread_mutex_lock(&b->lock);
    b->reused++;
    pthread_mutex_unlock(&b->lock);
    return x;
}

static void cg_drop_chunk(cg_chunk_graph *g) {
    if (g->exec)
        cudaGraphExecDestroy(g->exec);
    if (g->graph)
        cudaGraphDestroy(g->graph);
    memset(g, 0, sizeof *g);
}

static void cg_drop_graph(memra_state *s) {
    if (s->exec)
        cudaGraphExecDestroy(s->exec);
    if (s->graph)
        cudaGraphDestroy(s->graph);
    s->exec = NULL;
    s->graph = NULL;
}

/* Before the cuda plugin's watchdog aborts the state's communicators: the graph goes first (a
 * captured NCCL operation keeps its communicator until the graph is destroyed, and NCCL's abort
 * waits for that; an exec still running is freed when it ends, which the abort then brings). */
static void cg_before_abort(void *arg) {
    memra_state *s = (memra_state *)arg;
    cg_drop_graph(s);
    for (uint32_t k = 0; k < CG_CHUNK_GRAPHS; k++)
        cg_drop_chunk(&s->chunk[k]);
}

memra_status cg_state_new(memra_backend *b, uint32_t capacity, uint32_t max_inflight, memra_state **out,
                          memra_error *err) {
    memra_state *s = (memra_state *)calloc(1, sizeof *s);
    if (!s)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda-graph: out of host memory");
    memra_status st = b->cv->state_new(b->inner, capacity, max_inflight, &s->inner, err);
    if (st) {
        free(s);
        return st;
    }
    if (MEMRA_HAS_MEMBER(b->ext, memra_cuda_graph_ext_v1, on_abort) && b->ext->on_abort)
        b->ext->on_abort(b->inner, s->inner, cg_before_abort, s);
    *out = s;
    return MEMRA_OK;
}

/* The graph is destroyed before the inner state (whose communicators a captured NCCL operation
 * holds until then: NCCL's finalize would wait its timeout out, then its abort forever), after
 * stage 0's stream, where every replay runs, has finished. */
void cg_state_free(memra_backend *b, memra_state *s) {
    if (!s)
        return;
    const int device = b->ext->device(b->inner, s->inner);
    bool idle = false;
    if ((s->exec || s->chunk[0].exec || s->chunk[1].exec) && cudaSetDevice(device) == cudaSuccess)
        idle = cudaStreamSynchronize((cudaStream_t)b->ext->stream(b->inner, s->inner)) == cudaSuccess;
    cg_drop_graph(s);
    for (uint32_t k = 0; k < CG_CHUNK_GRAPHS; k++) /* kept for the next state where all went well */
        if (idle && !s->failed)
            cg_keep_spare(b, &s->chunk[k], device);
        else
            cg_drop_chunk(&s->chunk[k]);
    b->cv->state_free(b->inner, s->inner); /* synchronises its streams first */
    free(s);
}

static bool cg_same_cfg(const memra_state *s, const memra_sample_cfg *c) {
    if (!s->exec || s->sampled != (c != NULL))
        return false;
    return !c || (s->cfg.temperature == c->temperature && s->cfg.top_k == c->top_k && s->cfg.top_p == c->top_p &&
                  s->cfg.seed == c->seed);
}

static memra_status cg_cuda_fail(memra_backend *b, memra_state *s, memra_error *err, cudaError_t e, const char *what) {
    memra_status st = memra_fail(err, MEMRA_E_DEVICE, "cuda-graph: %s failed: %s (%s)", what, cudaGetErrorString(e),
                                 cudaGetErrorName(e));
    b->ext->quarantine(b->inner, s->inner, err ? err->msg : what);
    s->failed = true;
    return st;
}

/* Captures the body into a graph on stage 0's stream. */
static memra_status cg_capture(memra_backend *b, memra_state *s, const memra_sample_cfg *sample, memra_error *err) {
    cudaStream_t q = (cudaStream_t)b->ext->stream(b->inner, s->inner);
    cg_drop_graph(s);
    cudaError_t e = cudaSetDevice(b->ext->device(b->inner, s->inner));
    if (e == cudaSuccess)
        e = cudaStreamBeginCapture(q, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess)
        return cg_cuda_fail(b, s, err, e, "cudaStreamBeginCapture");
    memra_status st = b->ext->body(b->inner, s->inner, sample, true, err);
    cudaGraph_t g = NULL;
    e = cudaStreamEndCapture(q, &g); /* always ends the capture, also after a failed body */
    if (st) {
        if (g)
            cudaGraphDestroy(g);
        return st;
    }
    if (e != cudaSuccess)
        return cg_cuda_fail(b, s, err, e, "cudaStreamEndCapture");
    s->graph = g;
    if ((e = cudaGraphInstantiate(&s->exec, g, 0)) != cudaSuccess) {
        s->exec = NULL;
        return cg_cuda_fail(b, s, err, e, "cudaGraphInstantiate");
    }
    s->sampled = sample != NULL;
    if (sample)
        s->cfg = *sample;
    s->captures++;
    return MEMRA_OK;
}

memra_status cg_step_begin(memra_backend *b, memra_state *s, const memra_step_args *args, memra_error *err) {
    if (!MEMRA_HAS_MEMBER(args, memra_step_args, want_logits))
        return memra_fail(err, MEMRA_E_INVALID, "cuda-graph: step args missing or too small");
    memra_status st = b->ext->prepare(b->inner, s->inner, args, err);
    if (st)
        return st;
    if (!cg_same_cfg(s, args->sample) && (st = cg_capture(b, s, args->sample, err)))
        return st;
    cudaError_t e = cudaGraphLaunch(s->exec, (cudaStream_t)b->ext->stream(b->inner, s->inner));
    if (e != cudaSuccess)
        return cg_cuda_fail(b, s, err, e, "cudaGraphLaunch");
    s->replays++;
    return b->ext->finish(b->inner, s->inner, args, true, err);
}

memra_status cg_step_end(memra_backend *b, memra_state *s, float *logits, memra_step_result *out, memra_error *err) {
    return b->cv->step_end(b->inner, s->inner, logits, out, err);
}

/* ---- prefill chunks ------------------------------------------------------------------------- */

/* The cuda plugin's best chunk for the arm's keys (1 where it has no chunks). */
uint32_t cg_prefill_chunk(const memra_host *host, const memra_options *opts) {
    const memra_backend_vtable *cv;
    memra_error err;
    if (cg_cuda(host, &cv, &err) || !MEMRA_HAS_MEMBER(cv, memra_backend_vtable, prefill_chunk) || !cv->prefill_chunk)
        return 1;
    return cv->prefill_chunk(host, opts);
}

/* The graph of a chunk of `count` rows: the one captured for it, or a capture into the slot used
 * least recently (so a state holds at most CG_CHUNK_GRAPHS, the full chunk and the latest tail). */
static memra_status cg_chunk_exec(memra_backend *b, memra_state *s, uint32_t count, cg_chunk_graph **out,
                                  memra_error *err) {
    cg_chunk_graph *g = NULL;
    for (uint32_t k = 0; k < CG_CHUNK_GRAPHS; k++)
        if (s->chunk[k].count == count && s->chunk[k].exec)
            g = &s->chunk[k];
    if (!g) {
        g = &s->chunk[0];
        for (uint32_t k = 1; k < CG_CHUNK_GRAPHS; k++)
            if (s->chunk[k].used < g->used)
                g = &s->chunk[k];
        cg_drop_chunk(g);
        cudaStream_t q = (cudaStream_t)b->ext->stream(b->inner, s->inner);
        cudaError_t e = cudaStreamBeginCapture(q, cudaStreamCaptureModeThreadLocal);
        if (e != cudaSuccess)
            return cg_cuda_fail(b, s, err, e, "cudaStreamBeginCapture (prefill chunk)");
        memra_status st = b->ext->chunk_body(b->inner, s->inner, count, err);
        cudaGraph_t graph = NULL;
        e = cudaStreamEndCapture(q, &graph); /* always ends the capture, also after a failed body */
        if (st) {
            s->failed = true;
            if (graph)
                cudaGraphDestroy(graph);
            return st;
        }
        if (e != cudaSuccess)
            return cg_cuda_fail(b, s, err, e, "cudaStreamEndCapture (prefill chunk)");
        g->graph = graph;
        g->exec = cg_take_spare(b, count, b->ext->device(b->inner, s->inner), graph);
        if (!g->exec && (e = cudaGraphInstantiate(&g->exec, graph, 0)) != cudaSuccess) {
            g->exec = NULL;
            cg_drop_chunk(g);
            return cg_cuda_fail(b, s, err, e, "cudaGraphInstantiate (prefill chunk)");
        }
        g->count = count;
        s->captures++;
    }
    g->used = ++s->chunks;
    *out = g;
    return MEMRA_OK;
}

/* A chunk: through a captured graph of its count where the cuda plugin's chunk kernels serve the
 * state, else as single graph steps (unsampled, the last one's logits). */
memra_status cg_step_chunk(memra_backend *b, memra_state *s, const int64_t *tokens, uint32_t count, float *logits,
                           memra_error *err) {
    const memra_cuda_graph_ext_v1 *x = b->ext;
    if (!MEMRA_HAS_MEMBER(x, memra_cuda_graph_ext_v1, chunk_finish) || !x->chunk_native(b->inner, s->inner)) {
        if (!tokens || count == 0)
            return memra_fail(err, MEMRA_E_INVALID, "cuda-graph: a prefill chunk of %u positions, with tokens", count);
        for (uint32_t j = 0; j < count; j++) {
            memra_step_args a;
            memset(&a, 0, sizeof a);
            a.struct_size = sizeof a;
            a.token = tokens[j];
            a.want_logits = logits != NULL && j + 1 == count;
            memra_status st = cg_step_begin(b, s, &a, err);
            if (!st)
                st = cg_step_end(b, s, a.want_logits ? logits : NULL, NULL, err);
            if (st) {
                x->quarantine(b->inner, s->inner, err ? err->msg : "a step of a prefill chunk failed");
                s->failed = true;
                return st;
            }
        }
        return MEMRA_OK;
    }
    memra_status st = x->chunk_prepare(b->inner, s->inner, tokens, count, err);
    if (st)
        return st;
    cg_chunk_graph *g = NULL;
    if ((st = cg_chunk_exec(b, s, count, &g, err)))
        return st;
    cudaError_t e = cudaGraphLaunch(g->exec, (cudaStream_t)x->stream(b->inner, s->inner));
    if (e != cudaSuccess)
        return cg_cuda_fail(b, s, err, e, "cudaGraphLaunch (prefill chunk)");
    s->replays++;
    return x->chunk_finish(b->inner, s->inner, count, logits, err);
}

memra_status cg_digest(memra_backend *b, memra_state *s, memra_digest_kind kind, uint8_t out[32], memra_error *err) {
    return b->cv->digest(b->inner, s->inner, kind, out, err);
}

memra_status cg_state_restore(memra_backend *b, memra_state *dst, const memra_state *src, memra_error *err) {
    return b->cv->state_restore(b->inner, dst->inner, src->inner, err);
}

uint32_t cg_state_position(memra_backend *b, const memra_state *s) { return b->cv->state_position(b->inner, s->inner); }

memra_status cg_state_stats(memra_backend *b, const memra_state *s, memra_state_stats *out, memra_error *err) {
    memra_state_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    memra_status rc = b->cv->state_stats ? b->cv->state_stats(b->inner, s->inner, &st, err) : MEMRA_OK;
    if (rc)
        return rc;
    st.captures = s->captures;
    st.replays = s->replays;
    uint32_t size = out->struct_size && out->struct_size < sizeof st ? out->struct_size : sizeof st;
    memcpy(out, &st, size);
    out->struct_size = size;
    return MEMRA_OK;
}

memra_status cg_memory(memra_backend *b, memra_backend_memory *out, memra_error *err) {
    if (!b->cv->memory)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda-graph: the cuda plugin reports no memory");
    return b->cv->memory(b->inner, out, err);
}

/* ---- census --------------------------------------------------------------------------------- */

static void cg_count(memra_census_row *rows, uint32_t max_rows, uint32_t *n, const char *kind) {
    for (uint32_t i = 0; i < *n; i++)
        if (strcmp(rows[i].kind, kind) == 0) {
            rows[i].count++;
            return;
        }
    if (*n >= max_rows)
        return;
    snprintf(rows[*n].kind, sizeof rows[*n].kind, "%s", kind);
    rows[*n].count = 1;
    (*n)++;
}

memra_status cg_census(memra_backend *b, const memra_state *s, memra_census_row *rows, uint32_t max_rows,
                       uint32_t *n_rows, memra_error *err) {
    *n_rows = 0;
    if (!s->graph)
        return MEMRA_OK;
    size_t n = 0;
    cudaError_t e = cudaGraphGetNodes(s->graph, NULL, &n);
    cudaGraphNode_t *nodes = (cudaGraphNode_t *)calloc(n ? n : 1, sizeof *nodes);
    if (!nodes)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda-graph: out of host memory");
    if (e == cudaSuccess)
        e = cudaGraphGetNodes(s->graph, nodes, &n);
    for (size_t i = 0; i < n && e == cudaSuccess; i++) {
        cudaGraphNodeType t;
        char kind[32];
        if ((e = cudaGraphNodeGetType(nodes[i], &t)) != cudaSuccess)
            break;
        switch (t) {
        case cudaGraphNodeTypeKernel: {
            cudaKernelNodeParams p;
            if ((e = cudaGraphKernelNodeGetParams(nodes[i], &p)) != cudaSuccess)
                break;
            const char *fam = b->ext->kernel_family(p.func);
            const char *fname = NULL;
            if (!fam && cudaFuncGetName(&fname, p.func) == cudaSuccess && fname &&
                (strstr(fname, "nccl") || strstr(fname, "os_kernel")))
                fam = "collective"; /* the collective plugins' kernels (nccl, oneshot) */
            snprintf(kind, sizeof kind, fam ? "kernel:%s" : "unexpected:kernel", fam);
            break;
        }
        case cudaGraphNodeTypeMemcpy: snprintf(kind, sizeof kind, "memcpy"); break;
        case cudaGraphNodeTypeMemset: snprintf(kind, sizeof kind, "memset"); break;
        case cudaGraphNodeTypeHost: snprintf(kind, sizeof kind, "host"); break;
        case cudaGraphNodeTypeEmpty: snprintf(kind, sizeof kind, "empty"); break;
        case cudaGraphNodeTypeWaitEvent:
        case cudaGraphNodeTypeEventRecord: snprintf(kind, sizeof kind, "event"); break;
        default: snprintf(kind, sizeof kind, "unexpected:type%d", (int)t); break;
        }
        if (e == cudaSuccess)
            cg_count(rows, max_rows, n_rows, kind);
    }
    free(nodes);
    if (e != cudaSuccess)
        return memra_fail(err, MEMRA_E_DEVICE, "cuda-graph: census of the captured graph: %s", cudaGetErrorString(e));
    return MEMRA_OK;
}

memra_status cg_dump_graphs(memra_backend *b, const memra_state *s, const char *dir, memra_error *err) {
    if (!s->graph)
        return MEMRA_OK;
    char path[4096];
    snprintf(path, sizeof path, "%s/cuda-graph-state-%p-capture-%llu.dot", dir, (const void *)s,
             (unsigned long long)s->captures);
    cudaError_t e = cudaGraphDebugDotPrint(s->graph, path, cudaGraphDebugDotFlagsVerbose);
    if (e != cudaSuccess)
        return memra_fail(err, MEMRA_E_IO, "cuda-graph: writing %s: %s", path, cudaGetErrorString(e));
    return MEMRA_OK;
}

/* The cuda plugin's memra.bench and memra.tp, called on the inner backend (their functions take
 * the backend they were asked on: this plugin's, which they must not see). */
static const memra_ext_bench_v1 *cg_inner_bench(memra_backend *b) {
    return b->cv->extension ? (const memra_ext_bench_v1 *)b->cv->extension(b->inner, MEMRA_EXT_BENCH, 1) : NULL;
}
static const memra_ext_tp_v1 *cg_inner_tp(memra_backend *b) {
    return b->cv->extension ? (const memra_ext_tp_v1 *)b->cv->extension(b->inner, MEMRA_EXT_TP, 1) : NULL;
}
static memra_status cg_device_name(memra_backend *b, char *buf, size_t size, memra_error *err) {
    return cg_inner_bench(b)->device_name(b->inner, buf, size, err);
}
static memra_status cg_measure_ceiling(memra_backend *b, double *bps, char *how, size_t how_size, memra_error *err) {
    const memra_ext_bench_v1 *x = cg_inner_bench(b);
    if (!x->measure_ceiling)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda-graph: the cuda plugin measures no ceiling");
    return x->measure_ceiling(b->inner, bps, how, how_size, err);
}
static memra_status cg_tp_collective(memra_backend *b, char *name, size_t name_size, bool *refusals, memra_error *err) {
    return cg_inner_tp(b)->collective(b->inner, name, name_size, refusals, err);
}
static memra_status cg_tp_arm_refusal(memra_backend *b, uint32_t stage, uint32_t rank, uint32_t layer, uint32_t which,
                                      uint32_t position, int32_t word, memra_error *err) {
    return cg_inner_tp(b)->arm_refusal(b->inner, stage, rank, layer, which, position, word, err);
}
static memra_status cg_tp_clear_refusals(memra_backend *b, memra_error *err) {
    return cg_inner_tp(b)->clear_refusals(b->inner, err);
}
static memra_status cg_tp_epochs(memra_backend *b, uint32_t stage, uint32_t rank, uint64_t *out, uint32_t n_blocks,
                                 memra_error *err) {
    return cg_inner_tp(b)->epochs(b->inner, stage, rank, out, n_blocks, err);
}
/* memra.ops: an uncaptured run of the same token on the inner cuda backend (the graph's body is
 * that backend's eager body, captured: the same kernels, the same bits), with its taps. */
static const memra_ext_ops_v1 *cg_inner_ops(memra_backend *b) {
    return b->cv->extension ? (const memra_ext_ops_v1 *)b->cv->extension(b->inner, MEMRA_EXT_OPS, 1) : NULL;
}
static memra_status cg_step_tapped(memra_backend *b, memra_state *s, const memra_step_args *args, memra_op_tap_fn fn,
                                   void *user, memra_error *err) {
    return cg_inner_ops(b)->step_tapped(b->inner, s->inner, args, fn, user, err);
}
static const memra_ext_ops_v1 cg_ops_ext = {sizeof(memra_ext_ops_v1), cg_step_tapped};
static const memra_ext_bench_v1 cg_bench_ext = {sizeof(memra_ext_bench_v1), cg_device_name, cg_measure_ceiling};
static const memra_ext_tp_v1 cg_tp_ext = {sizeof(memra_ext_tp_v1), cg_tp_collective, cg_tp_arm_refusal,
                                          cg_tp_clear_refusals, cg_tp_epochs};

/* Every other extension of the cuda plugin, wrapped to reach the inner backend (an extension not
 * wrapped here is not offered: its functions would be handed this plugin's backend). */
const void *cg_inner_extension(memra_backend *b, const char *name, uint32_t version) {
    if (strcmp(name, MEMRA_EXT_BENCH) == 0 && version == 1) {
        const memra_ext_bench_v1 *x = cg_inner_bench(b);
        return MEMRA_HAS_MEMBER(x, memra_ext_bench_v1, device_name) && x->device_name ? &cg_bench_ext : NULL;
    }
    if (strcmp(name, MEMRA_EXT_TP) == 0 && version == 1) {
        const memra_ext_tp_v1 *x = cg_inner_tp(b);
        return MEMRA_HAS_MEMBER(x, memra_ext_tp_v1, epochs) && x->collective && x->arm_refusal && x->clear_refusals &&
                       x->epochs
                   ? &cg_tp_ext
                   : NULL;
    }
    if (strcmp(name, MEMRA_EXT_OPS) == 0 && version == 1) {
        const memra_ext_ops_v1 *x = cg_inner_ops(b);
        return MEMRA_HAS_MEMBER(x, memra_ext_ops_v1, step_tapped) && x->step_tapped ? &cg_ops_ext : NULL;
    }
    return NULL;
}
