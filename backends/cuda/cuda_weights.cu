/* cuda_weights.cu: the `cuda` backend's weights: checked, laid out per stage and rank (a rank's
 * rows of wq/wk/wv, columns of wo, rows of gate/up, columns of down, its vocabulary rows of the
 * head), uploaded once per (model, plan) into one device arena per stage and rank, and shared by
 * every cuda-family backend on that load (counted references). */
#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_ext.h"
#include "cuda_kernels.h"
#include "cuda_backend.h"
#include "gemv_quant.h"
#include "legacy_layout.h"
#include "memra/ext.h"
#include "memra/gguf.h"
#include "memra/model.h"
#include "memra/numeric.h"
#include "memra/options.h"
#include "memra/plugin.h"
#include "memra/quant.h"
#include "memra/source.h"
#include "memra/status.h"

static pthread_mutex_t mc_weights_lock = PTHREAD_MUTEX_INITIALIZER;
static mc_weights *mc_weights_list;

/* The quantized types beyond Q8_0 (gemv_quant.h's families: blocks of 32 or 256). */
static bool mc_type_family(uint32_t t) {
    return t == MEMRA_TYPE_Q4_0 || t == MEMRA_TYPE_Q4_1 || t == MEMRA_TYPE_Q5_0 || t == MEMRA_TYPE_Q5_1 ||
           t == MEMRA_TYPE_Q4_K || t == MEMRA_TYPE_Q5_K || t == MEMRA_TYPE_Q6_K;
}

static bool mc_type_ok(uint32_t t) {
    return t == MEMRA_TYPE_F32 || t == MEMRA_TYPE_F16 || t == MEMRA_TYPE_BF16 || t == MEMRA_TYPE_Q8_0 ||
           mc_type_family(t);
}

/* Bytes per stored row of data and aux of a family type (false: the family cannot lay it out). */
static bool mc_qlayout(uint32_t t, uint64_t cols, uint64_t *data_row, uint64_t *aux_row) {
    return mc_qlayout_legacy(t, cols, data_row, aux_row) || mc_qlayout_kquant(t, cols, data_row, aux_row);
}

static memra_status mc_check_matrix(const memra_weight *w, memra_error *err) {
    if (!w->data)
        return memra_fail(err, MEMRA_E_FORMAT, "cuda: a required tensor is missing");
    if (!mc_type_ok(w->type))
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cuda: tensor '%s' has type %s, for which the cuda backend has no kernel (F32, F16, BF16, "
                          "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K only)",
                          w->name ? w->name : "?", memra_tensor_type_name(w->type));
    if (w->type == MEMRA_TYPE_Q8_0 && w->cols % MEMRA_Q8_0_BLOCK != 0)
        return memra_fail(err, MEMRA_E_FORMAT, "cuda: tensor '%s' is Q8_0 with %llu columns, not a multiple of 32",
                          w->name ? w->name : "?", (unsigned long long)w->cols);
    if (mc_type_family(w->type)) {
        const uint32_t blk = memra_quant_block_elems(w->type);
        uint64_t dr, ar;
        if (w->cols == 0 || w->cols % blk != 0)
            return memra_fail(err, MEMRA_E_FORMAT, "cuda: tensor '%s' is %s with %llu columns, not a multiple of %u",
                              w->name ? w->name : "?", memra_tensor_type_name(w->type), (unsigned long long)w->cols,
                              blk);
        if (mc_ll_is(w->type) && w->cols > MC_LL_COLS_MAX)
            return memra_fail(err, MEMRA_E_UNSUPPORTED,
                              "cuda: tensor '%s' is %s with %llu columns; its GEMV takes at most %u",
                              w->name ? w->name : "?", memra_tensor_type_name(w->type), (unsigned long long)w->cols,
                              MC_LL_COLS_MAX);
        if (!mc_qlayout(w->type, w->cols, &dr, &ar))
            return memra_fail(err, MEMRA_E_UNSUPPORTED,
                              "cuda: tensor '%s' has type %s, for which this build of the cuda backend has no kernel",
                              w->name ? w->name : "?", memra_tensor_type_name(w->type));
    }
    if (w->rows > 0xffffffffull / 2 || w->cols > 0x7fffffffull)
        return memra_fail(err, MEMRA_E_RANGE, "cuda: tensor '%s' is too large (%llu x %llu)", w->name ? w->name : "?",
                          (unsigned long long)w->rows, (unsigned long long)w->cols);
    return MEMRA_OK;
}

/* One element of a host weight, decoded (vectors: norms and biases; a quantized one block by
 * block as memra/quant.h decodes it). */
static float mc_host_elem(const memra_weight *w, uint64_t i) {
    const uint8_t *p = (const uint8_t *)w->data;
    uint16_t h;
    switch (w->type) {
    case MEMRA_TYPE_F32: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    case MEMRA_TYPE_F16: memcpy(&h, p + 2 * i, 2); return memra_f16_to_f32(h);
    case MEMRA_TYPE_BF16: memcpy(&h, p + 2 * i, 2); return memra_bf16_to_f32(h);
    default: {
        float blk[MEMRA_QK_K];
        const uint32_t be = memra_quant_block_elems(w->type), bb = memra_quant_block_bytes(w->type);
        if (!be || !memra_dequantize_block(w->type, p + (i / be) * bb, blk))
            return 0.0f; /* unreachable: mc_put_vector admits these types only */
        return blk[i % be];
    }
    }
}

/* ---- the chunked upload ----
 * The real layout pass queues every matrix (mc_upload: its output rows, where each comes from in
 * the model's source, its device planes); mc_upload_run cuts them into jobs of whole output rows
 * (at most MC_LOAD_CHUNK bytes read and staged each, unless one row needs more) and hands them to
 * memra_source_read_jobs: reader threads pread (or copy, for a model in memory) each job's source
 * rows into a pinned buffer, lay them out (Q8_0 split in quants and scales, the legacy and
 * K-quant repacks of gemv_quant.h, a tensor-parallel rank's columns) into a second pinned buffer
 * where needed, and cudaMemcpyAsync them on the thread's stream while the next job is read. Host
 * memory: MC_LOAD_THREADS x MC_LOAD_SLOTS x (read + staged buffer), whatever the model's size. */
#define MC_LOAD_CHUNK ((uint64_t)8 << 20)
#define MC_LOAD_SLOTS 2u
#define MC_LOAD_THREADS_MAX 8u

typedef struct mc_upload {
    uint32_t n; /* sources, stacked in order (interleave: rows alternate between two) */
    bool interleave, fam;
    uint32_t type;
    uint64_t r0[3], nr[3], src_off[3]; /* rows of each source; its row 0's offset in the source */
    uint64_t rows, cols;               /* output rows, and columns of each */
    uint64_t src_row_bytes, col_off;   /* a source row's bytes; the columns' first byte in it */
    uint64_t stride, aux_row;          /* bytes an output row takes in the data and aux planes */
    char *d_data, *d_aux;
    const char *name;
} mc_upload;

struct mc_uploads {
    const memra_source *src;
    mc_upload *v;
    uint64_t n, cap;
};

static memra_status mc_uploads_push(mc_uploads *up, const mc_upload *u, memra_error *err) {
    if (up->n == up->cap) {
        uint64_t cap = up->cap ? up->cap * 2 : 64;
        mc_upload *v = (mc_upload *)realloc(up->v, cap * sizeof *v);
        if (!v)
            return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory queueing the upload");
        up->v = v;
        up->cap = cap;
    }
    up->v[up->n++] = *u;
    return MEMRA_OK;
}

/* Output rows [i0, i1) of upload `task`. */
typedef struct mc_job {
    uint64_t task, i0, i1;
} mc_job;

/* Whether an upload's source rows are its device rows byte for byte (F32/F16/BF16, whole rows,
 * unpadded, not interleaved): then the read buffer is copied as it is. */
static bool mc_upload_plain(const mc_upload *u) {
    return !u->fam && u->type != MEMRA_TYPE_Q8_0 && !u->interleave && u->col_off == 0 &&
           u->stride == u->src_row_bytes;
}

/* The job's spans: each source's rows among output rows [i0, i1), whole source rows. */
static void mc_job_spans(const mc_upload *u, uint64_t i0, uint64_t i1, memra_read_job *job) {
    job->n_spans = 0;
    if (u->interleave) { /* i0, i1 even: rows r0 + i0/2 .. r0 + i1/2 of both */
        for (uint32_t k = 0; k < 2; k++)
            job->spans[job->n_spans++] = {u->src_off[k] + (u->r0[k] + i0 / 2) * u->src_row_bytes,
                                          (i1 - i0) / 2 * u->src_row_bytes};
        return;
    }
    uint64_t base = 0;
    for (uint32_t k = 0; k < u->n; base += u->nr[k], k++) {
        uint64_t lo = i0 > base ? i0 : base, hi = i1 < base + u->nr[k] ? i1 : base + u->nr[k];
        if (lo < hi)
            job->spans[job->n_spans++] = {u->src_off[k] + (u->r0[k] + lo - base) * u->src_row_bytes,
                                          (hi - lo) * u->src_row_bytes};
    }
}

typedef struct mc_loader_thread {
    cudaStream_t stream;
    cudaEvent_t ev[MC_LOAD_SLOTS];
    uint8_t *stage[MC_LOAD_SLOTS];
} mc_loader_thread;

typedef struct mc_loader {
    int32_t device;
    const mc_uploads *up;
    const mc_job *jobs;
    size_t stage_bytes;
    mc_loader_thread th[MC_LOAD_THREADS_MAX];
} mc_loader;

static memra_status mc_load_begin(void *ctx, uint32_t t, memra_error *err) {
    mc_loader *L = (mc_loader *)ctx;
    mc_loader_thread *th = &L->th[t];
    cudaError_t e = cudaSetDevice(L->device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&th->stream, cudaStreamNonBlocking);
    for (uint32_t i = 0; i < MC_LOAD_SLOTS && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&th->ev[i], cudaEventDisableTiming);
    return e == cudaSuccess ? MEMRA_OK : mc_cuda_fail(err, e, "a stream of the weight upload");
}

static void mc_load_end(void *ctx, uint32_t t) {
    mc_loader *L = (mc_loader *)ctx;
    mc_loader_thread *th = &L->th[t];
    if (th->stream)
        cudaStreamSynchronize(th->stream);
    for (uint32_t i = 0; i < MC_LOAD_SLOTS; i++) {
        if (th->ev[i])
            cudaEventDestroy(th->ev[i]);
        if (th->stage[i])
            cudaFreeHost(th->stage[i]);
    }
    if (th->stream)
        cudaStreamDestroy(th->stream);
}

static void *mc_load_alloc(void *ctx, uint32_t t, uint32_t slot, size_t bytes) {
    (void)ctx, (void)t, (void)slot;
    void *p = NULL;
    return cudaHostAlloc(&p, bytes, cudaHostAllocDefault) == cudaSuccess ? p : NULL;
}

static void mc_load_free(void *ctx, uint32_t t, uint32_t slot, void *p) {
    (void)ctx, (void)t, (void)slot;
    cudaFreeHost(p);
}

static memra_status mc_load_wait(void *ctx, uint32_t t, uint32_t slot, memra_error *err) {
    cudaError_t e = cudaEventSynchronize(((mc_loader *)ctx)->th[t].ev[slot]);
    return e == cudaSuccess ? MEMRA_OK : mc_cuda_fail(err, e, "uploading weights (cudaMemcpyAsync)");
}

/* Lays out output rows [i0, i1) from the source rows in `raw` into the data plane at dp and the
 * aux plane at ap (Q8_0's scales, a family's aux), as the kernels read them. */
static void mc_lay_rows(const mc_upload *u, uint64_t i0, uint64_t i1, const uint8_t *raw, uint8_t *dp, uint8_t *ap) {
    const uint64_t nb = i1 - i0, half = nb / 2;
    for (uint64_t j = 0; j < nb; j++) {
        const uint64_t at = u->interleave ? ((j & 1) * half + j / 2) : j; /* the source row's place in raw */
        const uint8_t *sp = raw + at * u->src_row_bytes + u->col_off;
        uint8_t *d = dp + j * u->stride, *a = ap + j * u->aux_row;
        if (u->fam) {
            if (mc_ll_is(u->type))
                mc_qrepack_legacy(u->type, sp, u->cols, d, a);
            else
                mc_qrepack_kquant(u->type, sp, u->cols, d, u->aux_row ? a : NULL);
        } else if (u->type != MEMRA_TYPE_Q8_0) {
            memcpy(d, sp, u->cols * mc_type_elem_bytes(u->type));
        } else {
            for (uint64_t bk = 0; bk < u->cols / 32; bk++) {
                const uint8_t *b = sp + bk * MEMRA_Q8_0_BLOCK_BYTES;
                memcpy(a + bk * 2, b, 2);
                memcpy(d + bk * 32, b + 2, 32);
            }
        }
    }
}

static memra_status mc_load_consume(void *ctx, uint32_t t, uint32_t slot, const memra_read_job *job, void *buf,
                                    memra_error *err) {
    mc_loader *L = (mc_loader *)ctx;
    mc_loader_thread *th = &L->th[t];
    const mc_job *jb = (const mc_job *)job->user;
    const mc_upload *u = &L->up->v[jb->task];
    const uint64_t nb = jb->i1 - jb->i0;
    cudaError_t e;
    if (mc_upload_plain(u)) {
        e = cudaMemcpyAsync(u->d_data + jb->i0 * u->stride, buf, nb * u->stride, cudaMemcpyHostToDevice, th->stream);
    } else {
        if (!th->stage[slot]) {
            void *p = NULL;
            if (cudaHostAlloc(&p, L->stage_bytes, cudaHostAllocDefault) != cudaSuccess)
                return memra_fail(err, MEMRA_E_NOMEM, "cuda: no pinned host memory for a %.1f MiB upload buffer",
                                  L->stage_bytes / 1048576.0);
            th->stage[slot] = (uint8_t *)p;
        }
        uint8_t *dp = th->stage[slot], *ap = dp + nb * u->stride;
        /* Whatever a layout leaves unwritten (rows padded to 16 bytes) uploads as zeros, as before. */
        memset(dp, 0, nb * (u->stride + u->aux_row));
        mc_lay_rows(u, jb->i0, jb->i1, (const uint8_t *)buf, dp, ap);
        e = cudaMemcpyAsync(u->d_data + jb->i0 * u->stride, dp, nb * u->stride, cudaMemcpyHostToDevice, th->stream);
        if (e == cudaSuccess && u->aux_row && u->d_aux)
            e = cudaMemcpyAsync(u->d_aux + jb->i0 * u->aux_row, ap, nb * u->aux_row, cudaMemcpyHostToDevice,
                                th->stream);
    }
    if (e == cudaSuccess)
        e = cudaEventRecord(th->ev[slot], th->stream);
    if (e != cudaSuccess) {
        char what[200];
        snprintf(what, sizeof what, "uploading weight matrix '%s' (cudaMemcpyAsync)", u->name ? u->name : "?");
        return mc_cuda_fail(err, e, what);
    }
    return MEMRA_OK;
}

/* Runs the queued uploads of one stage and rank onto `device`. */
static memra_status mc_upload_run(const mc_uploads *up, int32_t device, mc_weights *w, memra_error *err) {
    uint64_t n_jobs = 0, slot_bytes = 1, stage_bytes = 0;
    for (uint64_t k = 0; k < up->n; k++) { /* how many jobs, and the largest buffers they need */
        const mc_upload *u = &up->v[k];
        const uint64_t g = u->interleave ? 2 : 1, per = u->src_row_bytes > u->stride + u->aux_row
                                                            ? u->src_row_bytes
                                                            : u->stride + u->aux_row;
        uint64_t nb = MC_LOAD_CHUNK / per / g * g;
        if (nb < g)
            nb = g;
        n_jobs += (u->rows + nb - 1) / nb;
        const uint64_t rows = nb < u->rows ? nb : u->rows;
        if (rows * u->src_row_bytes > slot_bytes)
            slot_bytes = rows * u->src_row_bytes;
        if (!mc_upload_plain(u) && rows * (u->stride + u->aux_row) > stage_bytes)
            stage_bytes = rows * (u->stride + u->aux_row);
    }
    mc_job *jobs = (mc_job *)calloc(n_jobs ? n_jobs : 1, sizeof *jobs);
    memra_read_job *rj = (memra_read_job *)calloc(n_jobs ? n_jobs : 1, sizeof *rj);
    if (!jobs || !rj) {
        free(jobs);
        free(rj);
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory planning the upload");
    }
    uint64_t j = 0;
    for (uint64_t k = 0; k < up->n; k++) {
        const mc_upload *u = &up->v[k];
        const uint64_t g = u->interleave ? 2 : 1, per = u->src_row_bytes > u->stride + u->aux_row
                                                            ? u->src_row_bytes
                                                            : u->stride + u->aux_row;
        uint64_t nb = MC_LOAD_CHUNK / per / g * g;
        if (nb < g)
            nb = g;
        for (uint64_t i0 = 0; i0 < u->rows; i0 += nb, j++) {
            jobs[j] = {k, i0, i0 + nb < u->rows ? i0 + nb : u->rows};
            mc_job_spans(u, jobs[j].i0, jobs[j].i1, &rj[j]);
            rj[j].user = &jobs[j];
        }
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t threads = cpus < 2 ? 2u : cpus > (long)MC_LOAD_THREADS_MAX ? MC_LOAD_THREADS_MAX : (uint32_t)cpus;
    mc_loader *L = (mc_loader *)calloc(1, sizeof *L);
    if (!L) {
        free(jobs);
        free(rj);
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory planning the upload");
    }
    L->device = device;
    L->up = up;
    L->jobs = jobs;
    L->stage_bytes = (size_t)stage_bytes;
    memra_reader_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_threads = threads;
    cfg.n_slots = MC_LOAD_SLOTS;
    cfg.slot_bytes = (size_t)slot_bytes;
    cfg.ctx = L;
    cfg.thread_begin = mc_load_begin;
    cfg.thread_end = mc_load_end;
    cfg.slot_alloc = mc_load_alloc;
    cfg.slot_free = mc_load_free;
    cfg.slot_wait = mc_load_wait;
    cfg.consume = mc_load_consume;
    memra_reader_stats stats;
    memset(&stats, 0, sizeof stats);
    memra_status st = memra_source_read_jobs(up->src, rj, n_jobs, &cfg, &stats, err);
    if (st == MEMRA_OK) {
        w->load_bytes += stats.bytes_read;
        w->load_s += stats.seconds;
        uint64_t held = stats.buffer_bytes + (uint64_t)threads * MC_LOAD_SLOTS * stage_bytes;
        if (held > w->load_staging)
            w->load_staging = held;
    }
    free(L);
    free(jobs);
    free(rj);
    return st;
}

/* A source of an upload: rows [r0, r0 + nr) of a weight (nr 0: every row). */
typedef struct mc_src {
    const memra_weight *w;
    uint64_t r0, nr;
} mc_src;

/* Lays out the rows of `n` sources stacked (in order; interleave: rows alternate between the two
 * sources), columns [c0, c0 + nc) of each (nc 0: every column; a tensor-parallel rank's slice), in
 * the upload layout, and copies them to the device; `groups` times (1: once), group g taking each
 * source's rows from r0 + g gstride (a tensor-parallel rank's rows of every expert of a stack: one
 * matrix, the groups one after another). With a sizing bump (base NULL) only counts. */
static memra_status mc_put_matrix_g(mc_bump *bump, const mc_src *srcs, uint32_t n, uint64_t c0, uint64_t nc,
                                    bool interleave, uint64_t groups, uint64_t gstride, mc_matrix *out,
                                    memra_error *err) {
    const memra_weight *src[3];
    uint64_t r0[3], nr[3];
    if (n > 3)
        return memra_fail(err, MEMRA_E_INTERNAL, "cuda: %u matrices fused", n);
    if (groups == 0 || (groups > 1 && gstride == 0))
        return memra_fail(err, MEMRA_E_INTERNAL, "cuda: %llu groups of rows, %llu apart", (unsigned long long)groups,
                          (unsigned long long)gstride);
    for (uint32_t i = 0; i < n; i++) {
        src[i] = srcs[i].w;
        memra_status st = mc_check_matrix(src[i], err);
        if (st)
            return st;
        r0[i] = srcs[i].r0;
        nr[i] = srcs[i].nr ? srcs[i].nr : src[i]->rows - r0[i];
        /* the last group's rows end in the source (every product below it is smaller) */
        const uint64_t span = groups == 1                                 ? 0
                              : (groups - 1) > src[i]->rows / gstride + 1 ? UINT64_MAX
                                                                          : (groups - 1) * gstride;
        if (r0[i] > src[i]->rows || nr[i] > src[i]->rows - r0[i] || span > src[i]->rows - r0[i] - nr[i])
            return memra_fail(err, MEMRA_E_INTERNAL, "cuda: rows [%llu, +%llu) (%llu groups) of '%s' out of range",
                              (unsigned long long)r0[i], (unsigned long long)nr[i], (unsigned long long)groups,
                              src[i]->name);
    }
    uint32_t type = src[0]->type;
    const uint64_t full_cols = src[0]->cols;
    if (nc == 0)
        nc = full_cols - c0;
    if (c0 > full_cols || nc > full_cols - c0)
        return memra_fail(err, MEMRA_E_INTERNAL, "cuda: columns [%llu, +%llu) of '%s' out of range",
                          (unsigned long long)c0, (unsigned long long)nc, src[0]->name);
    const uint32_t blk = memra_quant_block_elems(type); /* 0 for F32, F16, BF16 */
    if (blk && (c0 % blk || nc % blk))
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cuda: '%s' is %s and a rank's columns [%llu, %llu) do not fall on blocks of %u; choose a "
                          "tp that does",
                          src[0]->name, memra_tensor_type_name(type), (unsigned long long)c0,
                          (unsigned long long)(c0 + nc), blk);
    const uint64_t cols = nc;
    uint64_t rows_g = 0; /* one group's */
    for (uint32_t i = 0; i < n; i++) {
        if (src[i]->type != type || src[i]->cols != full_cols)
            return memra_fail(err, MEMRA_E_UNSUPPORTED,
                              "cuda: tensors '%s' and '%s' are fused on upload but differ in type or columns",
                              src[0]->name, src[i]->name);
        rows_g += nr[i];
    }
    if (rows_g && groups > 0xffffffffull / rows_g)
        return memra_fail(err, MEMRA_E_RANGE, "cuda: %llu groups of %llu rows of '%s': too many",
                          (unsigned long long)groups, (unsigned long long)rows_g, src[0]->name);
    const uint64_t rows = rows_g * groups;
    if (interleave && (n != 2 || nr[0] != nr[1]))
        return memra_fail(err, MEMRA_E_INTERNAL, "cuda: gate/up interleave needs two equal matrices");
    /* A family type (gemv_quant.h): its data and aux planes, `stride` in bytes. */
    const bool fam = mc_type_family(type);
    uint64_t data_row = 0, aux_row = 0;
    if (fam && !mc_qlayout(type, cols, &data_row, &aux_row))
        return memra_fail(err, MEMRA_E_INTERNAL, "cuda: no layout for '%s' (%s, %llu columns)", src[0]->name,
                          memra_tensor_type_name(type), (unsigned long long)cols);
    const uint32_t eb = fam ? 1 : mc_type_elem_bytes(type);
    const uint64_t stride =
        fam ? data_row : mc_matrix_bytes(type, 1, cols) - (type == MEMRA_TYPE_Q8_0 ? cols / 32 * 2 : 0);
    const uint64_t stride_elems = stride / eb;
    const uint64_t q_bytes = rows * stride,
                   s_bytes = type == MEMRA_TYPE_Q8_0 ? rows * (cols / 32) * 2 : fam ? rows * aux_row : 0;
    out->type = type;
    out->rows = (uint32_t)rows;
    out->cols = (uint32_t)cols;
    out->stride = (uint32_t)stride_elems;
    out->data = mc_take(bump, q_bytes);
    out->scales = NULL;
    out->aux = NULL;
    out->aux_stride = fam ? (uint32_t)aux_row : 0;
    if (type == MEMRA_TYPE_Q8_0)
        out->scales = (uint16_t *)mc_take(bump, s_bytes);
    else if (fam && s_bytes)
        out->aux = mc_take(bump, s_bytes);
    void *const s_dev = type == MEMRA_TYPE_Q8_0 ? (void *)out->scales : out->aux;
    if (!bump->base)
        return MEMRA_OK;
    /* Queued: mc_upload_run reads the source rows in chunks and lays them out on the way. */
    mc_upload u;
    memset(&u, 0, sizeof u);
    u.n = n;
    u.interleave = interleave;
    u.fam = fam;
    u.type = type;
    u.cols = cols;
    u.src_row_bytes = blk ? full_cols / blk * memra_quant_block_bytes(type) : full_cols * eb;
    u.col_off = blk ? c0 / blk * memra_quant_block_bytes(type) : c0 * eb;
    u.stride = stride;
    u.aux_row = type == MEMRA_TYPE_Q8_0 ? cols / 32 * 2 : fam ? aux_row : 0;
    u.name = src[0]->name;
    u.rows = rows_g;
    for (uint32_t i = 0; i < n; i++) {
        u.nr[i] = nr[i];
        if (!bump->up || !bump->up->src ||
            !memra_source_offset_of(bump->up->src, src[i]->data, src[i]->n_bytes, &u.src_off[i]))
            return memra_fail(err, MEMRA_E_INTERNAL, "cuda: tensor '%s' does not lie in the model's bytes",
                              src[i]->name);
    }
    for (uint64_t g = 0; g < groups; g++) { /* one upload a group, into its rows of the matrix */
        for (uint32_t i = 0; i < n; i++)
            u.r0[i] = r0[i] + g * gstride;
        u.d_data = (char *)out->data + g * rows_g * stride;
        u.d_aux = s_dev ? (char *)s_dev + g * rows_g * u.aux_row : NULL;
        memra_status st = mc_uploads_push(bump->up, &u, err);
        if (st)
            return st;
    }
    return MEMRA_OK;
}

static memra_status mc_put_matrix(mc_bump *bump, const mc_src *srcs, uint32_t n, uint64_t c0, uint64_t nc,
                                  bool interleave, mc_matrix *out, memra_error *err) {
    return mc_put_matrix_g(bump, srcs, n, c0, nc, interleave, 1, 0, out, err);
}

/* Matrices fused on upload (q, k, v stacked; gate and up interleaved): one upload when they share
 * a type, else one per run of equal type (q and k in Q4_K, v in Q6_K: two; gate and up differing:
 * two, not interleaved). */
static memra_status mc_put_fused(mc_bump *bump, const mc_src *srcs, uint32_t n, bool interleave, mc_matrix *parts,
                                 uint32_t *n_parts, memra_error *err) {
    uint32_t np = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t j = i + 1;
        while (j < n && srcs[j].w->type == srcs[i].w->type)
            j++;
        if (i == 0 && j == n) {
            *n_parts = 1;
            return mc_put_matrix(bump, srcs, n, 0, 0, interleave, &parts[0], err);
        }
        memra_status st = mc_put_matrix(bump, srcs + i, j - i, 0, 0, false, &parts[np++], err);
        if (st)
            return st;
        i = j;
    }
    *n_parts = np;
    return MEMRA_OK;
}

/* Decodes vectors (norms, biases) to f32, stacked, and copies them to the device: elements
 * [r0, r0 + nr) of each (nr 0: all). NULL entries are skipped; all NULL gives NULL. */
static memra_status mc_put_vector(mc_bump *bump, const mc_src *srcs, uint32_t n, float **out, memra_error *err) {
    uint64_t len = 0;
    for (uint32_t i = 0; i < n; i++)
        if (srcs[i].w && srcs[i].w->data) {
            const memra_weight *w = srcs[i].w;
            if (!mc_type_ok(w->type))
                return memra_fail(err, MEMRA_E_UNSUPPORTED, "cuda: tensor '%s' has type %s, which has no kernel",
                                  w->name, memra_tensor_type_name(w->type));
            const uint32_t be = memra_quant_block_elems(w->type);
            if (be && (w->rows * w->cols) % be != 0)
                return memra_fail(err, MEMRA_E_FORMAT, "cuda: vector '%s' is %s with %llu elements, not whole blocks",
                                  w->name, memra_tensor_type_name(w->type), (unsigned long long)(w->rows * w->cols));
            const uint64_t all = w->rows * w->cols, k = srcs[i].nr ? srcs[i].nr : all - srcs[i].r0;
            if (srcs[i].r0 > all || k > all - srcs[i].r0)
                return memra_fail(err, MEMRA_E_INTERNAL, "cuda: elements of '%s' out of range", w->name);
            len += k;
        }
    *out = NULL;
    if (len == 0)
        return MEMRA_OK;
    *out = (float *)mc_take(bump, len * 4);
    if (!bump->base)
        return MEMRA_OK;
    float *host = (float *)malloc(len * 4);
    if (!host)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: no host memory for a vector");
    uint64_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (srcs[i].w && srcs[i].w->data) {
            const uint64_t all = srcs[i].w->rows * srcs[i].w->cols;
            const uint64_t end = srcs[i].nr ? srcs[i].r0 + srcs[i].nr : all;
            for (uint64_t j = srcs[i].r0; j < end; j++)
                host[k++] = mc_host_elem(srcs[i].w, j);
        }
    cudaError_t e = cudaMemcpy(*out, host, len * 4, cudaMemcpyHostToDevice);
    free(host);
    return e == cudaSuccess ? MEMRA_OK : mc_cuda_fail(err, e, "uploading a vector (cudaMemcpy)");
}

/* gemma3's post-attention and post-FFN norms of one layer, whole on every rank (NULL where the
 * model has none: llama, qwen; gemma3 files need both, model.c checks it). */
static memra_status mc_put_post_norms(mc_bump *bump, const memra_layer *L, mc_layer *dl, memra_error *err) {
    mc_src v = {&L->post_attn_norm, 0, 0};
    memra_status st = mc_put_vector(bump, &v, 1, &dl->post_attn_norm, err);
    if (st)
        return st;
    v = (mc_src){&L->post_ffn_norm, 0, 0};
    return mc_put_vector(bump, &v, 1, &dl->post_ffn_norm, err);
}

/* The head_dim/2 RoPE frequencies of the global layers (swa false: memra_model_rope_freq) or of
 * the sliding-window ones (gemma3: memra_model_layer_rope_freq of the first such layer, any:
 * they are all alike), as the cpu backend takes them. */
static memra_status mc_put_freqs(mc_bump *bump, const memra_model *m, bool swa, float **out, memra_error *err) {
    const uint32_t half = m->head_dim / 2;
    *out = (float *)mc_take(bump, (uint64_t)half * 4);
    if (!bump->base)
        return MEMRA_OK;
    float *f = (float *)malloc((size_t)half * 4 + 4);
    if (!f)
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: no host memory for rope frequencies");
    uint32_t il = 0;
    while (swa && il < m->n_layer && !memra_model_layer_is_swa(m, il))
        il++;
    for (uint32_t i = 0; i < half; i++)
        f[i] = swa ? memra_model_layer_rope_freq(m, il, i) : memra_model_rope_freq(m, i);
    cudaError_t e = cudaMemcpy(*out, f, (size_t)half * 4, cudaMemcpyHostToDevice);
    free(f);
    return e == cudaSuccess ? MEMRA_OK : mc_cuda_fail(err, e, "uploading rope frequencies");
}

memra_status mc_moe_ranges(const memra_model *m, const memra_stage_plan *sp, uint32_t r, uint32_t ep, mc_moe_range *out,
                           memra_error *err) {
    const bool whole = sp->n_ranks <= 1;
    const uint32_t ff = m->n_ff, ne = m->n_expert;
    const uint32_t f0 = whole ? 0 : sp->ranks[r].ff_begin, f1 = whole ? ff : sp->ranks[r].ff_end;
    if (ep > 1 && (whole || sp->n_ranks != ep || ne % ep != 0))
        return memra_fail(err, MEMRA_E_INVALID, "cuda: ep=%u, but the stage has %u ranks (for %u experts)", ep,
                          whole ? 1 : sp->n_ranks, ne);
    if (f0 > f1 || f1 > ff)
        return memra_fail(err, MEMRA_E_INVALID, "cuda: rank %u holds ffn rows [%u, %u) of %u", r, f0, f1, ff);
    out->e0 = ep > 1 ? ne / ep * r : 0;
    out->e1 = ep > 1 ? ne / ep * (r + 1) : ne;
    out->x0 = ep > 1 ? 0 : f0;
    out->x1 = ep > 1 ? ff : f1;
    /* the shared expert's rows in proportion to the rank's ffn rows, on whole rows (cpu_moe.c) */
    const uint64_t sh = m->n_ff_shexp;
    if (sh && ((uint64_t)f0 * sh % ff != 0 || (uint64_t)f1 * sh % ff != 0))
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cuda: rank %u holds expert rows [%u, %u) of %u, which do not cut the shared expert's %u "
                          "rows evenly; choose a tp that does",
                          r, f0, f1, ff, m->n_ff_shexp);
    out->s0 = (uint32_t)(f0 * sh / ff);
    out->s1 = (uint32_t)(f1 * sh / ff);
    if ((out->x1 - out->x0) % 4 != 0)
        return memra_fail(err, MEMRA_E_UNSUPPORTED,
                          "cuda: rank %u holds %u rows of each expert; the cuda backend's expert GEMV needs a multiple "
                          "of 4 (choose a tp that makes n_ff %u / tp one)",
                          r, out->x1 - out->x0, ff);
    /* columns of the down stacks on whole quant blocks (mc_put_matrix would refuse it at upload) */
    for (uint32_t il = sp->layer_begin; m->moe && il < sp->layer_end; il++) {
        const memra_weight *d[2] = {&m->moe[il].down_exps, &m->moe[il].down_shexp};
        const uint32_t c0[2] = {out->x0, out->s0}, c1[2] = {out->x1, out->s1};
        for (int k = 0; k < 2; k++) {
            const uint32_t full = k ? m->n_ff_shexp : ff; /* a slice: whole columns are mc_check_matrix's */
            const uint32_t blk = d[k]->data || k == 0 ? memra_quant_block_elems(d[k]->type) : 0;
            if (blk && c1[k] > c0[k] && (c0[k] != 0 || c1[k] != full) && (c0[k] % blk || c1[k] % blk))
                return memra_fail(err, MEMRA_E_UNSUPPORTED,
                                  "cuda: '%s' is %s and rank %u's columns [%u, %u) do not fall on blocks of %u; choose "
                                  "a tp that does",
                                  d[k]->name ? d[k]->name : "?", memra_tensor_type_name(d[k]->type), r, c0[k], c1[k],
                                  blk);
        }
    }
    return MEMRA_OK;
}

/* A mixture-of-experts layer's FFN on one rank (rg: its experts and rows, mc_moe_ranges): the
 * router whole; the gate and up stacks of its experts' rows interleaved into one (a row pair per
 * row, so expert e's rows are one contiguous run from row 2 (e - e0) (x1 - x0): gemv_experts reads
 * them from its id; with tp alone each expert's rows [x0, x1) are one group of the upload), queued,
 * like every matrix, for the chunked upload (a stack is read from the file in chunks of whole row
 * pairs, never whole); the down stack's rows of its experts, columns [x0, x1); qwen2moe's shared
 * expert's rows [s0, s1) as a dense FFN (wgu or wg/wu, wdown; none where the rank holds none) and
 * its gate, whole, as one F32 row. */
static memra_status mc_put_experts(const memra_model *m, uint32_t il, const mc_moe_range *rg, mc_bump *bump,
                                   mc_layer *dl, memra_error *err) {
    const memra_layer_moe *x = &m->moe[il];
    memra_status st;
    dl->moe = true;
    mc_src v = {&x->gate_inp, 0, 0};
    if ((st = mc_put_matrix(bump, &v, 1, 0, 0, false, &dl->router, err)))
        return st;
    const uint64_t ff = m->n_ff, E = m->n_embd, ne = rg->e1 - rg->e0, w = rg->x1 - rg->x0;
    if (w == ff) { /* whole experts: one run of rows */
        const mc_src gu[2] = {{&x->gate_exps, rg->e0 * ff, ne * ff}, {&x->up_exps, rg->e0 * ff, ne * ff}};
        if ((st = mc_put_matrix(bump, gu, 2, 0, 0, true, &dl->gu_exps, err)))
            return st;
    } else { /* rows [x0, x1) of each expert: one group an expert */
        const mc_src gu[2] = {{&x->gate_exps, rg->e0 * ff + rg->x0, w}, {&x->up_exps, rg->e0 * ff + rg->x0, w}};
        if ((st = mc_put_matrix_g(bump, gu, 2, 0, 0, true, ne, ff, &dl->gu_exps, err)))
            return st;
    }
    v = (mc_src){&x->down_exps, rg->e0 * E, ne * E};
    if ((st = mc_put_matrix(bump, &v, 1, rg->x0, w, false, &dl->down_exps, err)))
        return st;
    if (m->n_ff_shexp == 0)
        return MEMRA_OK;
    if (rg->s1 > rg->s0) {
        const mc_src sh[2] = {{&x->gate_shexp, rg->s0, rg->s1 - rg->s0}, {&x->up_shexp, rg->s0, rg->s1 - rg->s0}};
        mc_matrix parts[3];
        uint32_t n_parts = 0;
        if ((st = mc_put_fused(bump, sh, 2, true, parts, &n_parts, err)))
            return st;
        dl->gu_split = n_parts > 1;
        dl->wgu = parts[0];
        if (dl->gu_split) {
            dl->wg = parts[0];
            dl->wu = parts[1];
        }
        v = (mc_src){&x->down_shexp, 0, 0};
        if ((st = mc_put_matrix(bump, &v, 1, rg->s0, rg->s1 - rg->s0, false, &dl->wdown, err)))
            return st;
    }
    float *g = NULL;
    v = (mc_src){&x->gate_inp_shexp, 0, 0};
    if ((st = mc_put_vector(bump, &v, 1, &g, err)))
        return st;
    /* one F32 row of n_embd (mc_put_vector decoded it): its 16-byte chunks, then a tail */
    dl->sh_gate = (mc_matrix){MEMRA_TYPE_F32, 1, m->n_embd, (m->n_embd + 3) / 4 * 4, g, NULL, NULL, 0};
    return MEMRA_OK;
}

/* A layer's norms, whole on every rank (attention, ffn, q/k, and gemma3's post norms). */
static memra_status mc_put_norms(mc_bump *bump, const memra_layer *L, mc_layer *dl, memra_error *err) {
    float **const outs[4] = {&dl->attn_norm, &dl->ffn_norm, &dl->q_norm, &dl->k_norm};
    const memra_weight *const ws[4] = {&L->attn_norm, &L->ffn_norm, &L->q_norm, &L->k_norm};
    for (int k = 0; k < 4; k++) {
        mc_src v = {ws[k], 0, 0};
        memra_status st = mc_put_vector(bump, &v, 1, outs[k], err);
        if (st)
            return st;
    }
    return mc_put_post_norms(bump, L, dl, err);
}

/* Rows [v0, v1) of the vocabulary that rank r of R holds of the head. */
void mc_vocab_range(uint32_t V, uint32_t R, uint32_t r, uint32_t *v0, uint32_t *v1) {
    *v0 = (uint32_t)((uint64_t)V * r / R);
    *v1 = (uint32_t)((uint64_t)V * (r + 1) / R);
}

void mc_rank_vocab(const memra_model *m, const memra_stage_plan *sp, uint32_t r, uint32_t *v0, uint32_t *v1) {
    uint32_t dense = 0; /* the ranks that hold heads: every one under tp, rank 0 alone under ep alone */
    for (uint32_t k = 0; sp->n_ranks > 1 && k < sp->n_ranks; k++)
        dense += sp->ranks[k].head_end > sp->ranks[k].head_begin;
    if (sp->n_ranks <= 1 || dense == 0)
        dense = 1;
    if (r >= dense) {
        *v0 = *v1 = m->n_vocab;
        return;
    }
    mc_vocab_range(m->n_vocab, dense, r, v0, v1);
}

/* Lays out (or, with a real arena, uploads) one rank's weights of one stage: the heads
 * [head_begin, head_end) of q (rows of wq and its bias, columns of wo), kv heads [kv_head_begin,
 * kv_head_end) of k and v, ffn rows [ff_begin, ff_end) of gate and up (columns of down); norms
 * whole. Rank 0 of stage 0 holds the embedding; every rank of the last stage the final norm and
 * its rows of the head. With one rank every slice is whole. */
static memra_status mc_stage_layout(const memra_model *m, const memra_plan *plan, uint32_t ep, uint32_t si, uint32_t ri,
                                    mc_bump *bump, mc_stage_weights *sw, memra_error *err) {
    const memra_stage_plan *sp = &plan->stages[si];
    const memra_rank_plan *rp = &sp->ranks[ri];
    const bool whole = sp->n_ranks <= 1;
    const uint64_t hd = m->head_dim, hdv = m->head_dim_v;
    const uint64_t hb = whole ? 0 : rp->head_begin, he = whole ? m->n_head : rp->head_end;
    const uint64_t kb = whole ? 0 : rp->kv_head_begin, ke = whole ? m->n_head_kv : rp->kv_head_end;
    const uint64_t fb = whole ? 0 : rp->ff_begin, fe = whole ? m->n_ff : rp->ff_end;
    memra_status st;
    const uint32_t nl = sp->layer_end - sp->layer_begin;
    if (m->n_expert > 0 && (st = mc_moe_ranges(m, sp, ri, ep, &sw->moe, err)))
        return st;
    for (uint32_t i = 0; i < nl; i++) {
        const memra_layer *L = &m->layers[sp->layer_begin + i];
        mc_layer *dl = &sw->layers[i];
        const mc_src qkv[3] = {
            {&L->wq, hb * hd, (he - hb) * hd}, {&L->wk, kb * hd, (ke - kb) * hd}, {&L->wv, kb * hdv, (ke - kb) * hdv}};
        const mc_src bias[3] = {
            {&L->bq, hb * hd, (he - hb) * hd}, {&L->bk, kb * hd, (ke - kb) * hd}, {&L->bv, kb * hdv, (ke - kb) * hdv}};
        const mc_src gu[2] = {{&L->w_gate, fb, fe - fb}, {&L->w_up, fb, fe - fb}};
        if (he > hb) { /* (an expert rank of ep alone holds no heads: no attention) */
            if ((st = mc_put_fused(bump, qkv, 3, false, dl->qkv_part, &dl->qkv_parts, err)))
                return st;
            dl->wqkv = dl->qkv_part[0];
            if (dl->qkv_parts == 1)
                dl->qkv_parts = 0;
            const bool any_bias = L->bq.data || L->bk.data || L->bv.data;
            for (int k = 0; k < 3 && any_bias; k++)
                if (!bias[k].w->data || bias[k].w->rows * bias[k].w->cols != qkv[k].w->rows)
                    return memra_fail(err, MEMRA_E_FORMAT,
                                      "cuda: layer %u: q, k and v biases must be all present with one value per row "
                                      "('%s' is %s)",
                                      sp->layer_begin + i, qkv[k].w->name ? qkv[k].w->name : "?",
                                      bias[k].w->data ? "of the wrong length" : "missing its bias");
            if ((st = mc_put_vector(bump, bias, 3, &dl->bqkv, err)))
                return st;
            mc_src v1 = {&L->wo, 0, 0};
            if ((st = mc_put_matrix(bump, &v1, 1, hb * hdv, (he - hb) * hdv, false, &dl->wo, err)))
                return st;
        }
        if (m->n_expert > 0) {
            if ((st = mc_put_experts(m, sp->layer_begin + i, &sw->moe, bump, dl, err)))
                return st;
        } else {
            mc_matrix gu_parts[3];
            uint32_t n_gu = 0;
            if ((st = mc_put_fused(bump, gu, 2, true, gu_parts, &n_gu, err)))
                return st;
            dl->gu_split = n_gu > 1;
            dl->wgu = gu_parts[0];
            if (dl->gu_split) {
                dl->wg = gu_parts[0];
                dl->wu = gu_parts[1];
            }
            mc_src v1 = {&L->w_down, 0, 0};
            if ((st = mc_put_matrix(bump, &v1, 1, fb, fe - fb, false, &dl->wdown, err)))
                return st;
        }
        if ((st = mc_put_norms(bump, L, dl, err)))
            return st;
    }
    mc_src v1 = {&m->tok_embd, 0, 0};
    if (si == 0 && ri == 0 && (st = mc_put_matrix(bump, &v1, 1, 0, 0, false, &sw->embd, err)))
        return st;
    /* The head: whole on rank 0 with one rank (and under ep alone); with several, split by
     * vocabulary (rank r holds rows [v0, v1); each computes its logits, and rank 0 gathers them). */
    uint32_t v0 = 0, v1r = 0;
    mc_rank_vocab(m, sp, ri, &v0, &v1r);
    if (si == plan->n_stages - 1 && v1r > v0) {
        v1 = (mc_src){&m->output_norm, 0, 0};
        if ((st = mc_put_vector(bump, &v1, 1, &sw->out_norm, err)))
            return st;
        if (m->tied_output && si == 0 && ri == 0) {
            sw->head = sw->embd; /* one upload serves both: rank 0's rows are its first */
            sw->head.rows = v1r - v0;
        } else {
            v1 = (mc_src){m->tied_output ? &m->tok_embd : &m->output, v0, v1r - v0};
            if ((st = mc_put_matrix(bump, &v1, 1, 0, 0, false, &sw->head, err)))
                return st;
        }
    }
    if ((st = mc_put_freqs(bump, m, false, &sw->freqs, err)))
        return st;
    sw->freqs_swa = sw->freqs;
    if (m->sliding_window && (st = mc_put_freqs(bump, m, true, &sw->freqs_swa, err)))
        return st;
    return MEMRA_OK;
}

static void mc_weights_free(mc_weights *w) {
    for (uint32_t s = 0; s < w->plan.n_stages; s++)
        for (uint32_t r = 0; r < MEMRA_MAX_RANKS; r++) {
            mc_stage_weights *sw = &w->stages[s][r];
            if (sw->arena) {
                cudaSetDevice(sw->device);
                cudaFree(sw->arena);
            }
            free(sw->layers);
        }
    free(w);
}

const char *mc_device_label(int32_t dev, char *buf, size_t n) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) == cudaSuccess)
        snprintf(buf, n, "device %d (%s)", dev, p.name);
    else
        snprintf(buf, n, "device %d", dev);
    return buf;
}

/* The weights of (model, plan): shared when another backend of this family already uploaded
 * them, else sized, checked against free device memory, and uploaded stage by stage. */
memra_status mc_weights_acquire(const memra_model *m, const memra_plan *plan, uint32_t ep, mc_weights **out,
                                memra_error *err) {
    memra_status st = MEMRA_OK;
    pthread_mutex_lock(&mc_weights_lock);
    for (mc_weights *w = mc_weights_list; w; w = w->next)
        if (w->model == m && w->ep == ep && memcmp(&w->plan, plan, sizeof *plan) == 0) {
            w->refs++;
            *out = w;
            pthread_mutex_unlock(&mc_weights_lock);
            return MEMRA_OK;
        }
    mc_weights *w = (mc_weights *)calloc(1, sizeof *w);
    if (!w) {
        pthread_mutex_unlock(&mc_weights_lock);
        return memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
    }
    w->model = m;
    w->plan = *plan;
    w->ep = ep;
    w->refs = 1;
    for (uint32_t si = 0; si < plan->n_stages * MEMRA_MAX_RANKS && !st; si++) {
        const uint32_t s = si / MEMRA_MAX_RANKS, r = si % MEMRA_MAX_RANKS;
        const memra_stage_plan *sp = &plan->stages[s];
        if (r >= (sp->n_ranks ? sp->n_ranks : 1))
            continue;
        mc_stage_weights *sw = &w->stages[s][r];
        sw->device = sp->n_ranks > 1 ? sp->ranks[r].device : sp->device;
        sw->layer_begin = sp->layer_begin;
        sw->layer_end = sp->layer_end;
        sw->layers = (mc_layer *)calloc(sp->layer_end - sp->layer_begin + 1, sizeof(mc_layer));
        if (!sw->layers) {
            st = memra_fail(err, MEMRA_E_NOMEM, "cuda: out of host memory");
            break;
        }
        mc_bump size = {NULL, 0, 0, NULL};
        if ((st = mc_stage_layout(m, plan, ep, s, r, &size, sw, err)))
            break;
        cudaError_t e = cudaSetDevice(sw->device);
        size_t free_b = 0, total_b = 0;
        if (e == cudaSuccess)
            e = cudaMemGetInfo(&free_b, &total_b);
        if (e != cudaSuccess) {
            st = mc_cuda_fail(err, e, "cudaSetDevice/cudaMemGetInfo before the weight upload");
            break;
        }
        char label[300];
        if (size.used > free_b) {
            st = memra_fail(err, MEMRA_E_NOMEM,
                            "cuda: stage %u rank %u's weights need %.1f MiB on %s, but only %.1f MiB of %.1f MiB are "
                            "free",
                            s, r, size.used / 1048576.0, mc_device_label(sw->device, label, sizeof label),
                            free_b / 1048576.0, total_b / 1048576.0);
            break;
        }
        if ((e = cudaMalloc(&sw->arena, size.used)) != cudaSuccess) {
            st = memra_fail(err, MEMRA_E_NOMEM, "cuda: cudaMalloc of %.1f MiB for stage %u's weights on %s: %s",
                            size.used / 1048576.0, s, mc_device_label(sw->device, label, sizeof label),
                            cudaGetErrorString(e));
            sw->arena = NULL;
            break;
        }
        mc_uploads up = {m->source, NULL, 0, 0};
        mc_bump real = {(char *)sw->arena, 0, size.used, &up};
        if (!m->source)
            st = memra_fail(err, MEMRA_E_INVALID, "cuda: the model has no source of its bytes (memra_model.source)");
        if (!st)
            st = mc_stage_layout(m, plan, ep, s, r, &real, sw, err);
        if (!st)
            st = mc_upload_run(&up, sw->device, w, err);
        free(up.v);
        if (st)
            break;
        /* cudaMemcpy from pageable memory may return before its DMA lands, and the states'
         * non-blocking streams do not wait for the legacy stream: finish the upload here. */
        if ((e = cudaDeviceSynchronize()) != cudaSuccess) {
            st = mc_cuda_fail(err, e, "cudaDeviceSynchronize after the weight upload");
            break;
        }
        sw->bytes = size.used;
        w->bytes += size.used;
    }
    if (st) {
        mc_weights_free(w);
        pthread_mutex_unlock(&mc_weights_lock);
        return st;
    }
    w->next = mc_weights_list;
    mc_weights_list = w;
    *out = w;
    pthread_mutex_unlock(&mc_weights_lock);
    return MEMRA_OK;
}

bool mc_streams_weights(const memra_host *host, const memra_options *opts) {
    (void)host, (void)opts;
    return true;
}

void mc_weights_release(mc_weights *w) {
    pthread_mutex_lock(&mc_weights_lock);
    if (--w->refs == 0) {
        for (mc_weights **pp = &mc_weights_list; *pp; pp = &(*pp)->next)
            if (*pp == w) {
                *pp = w->next;
                break;
            }
        mc_weights_free(w);
    }
    pthread_mutex_unlock(&mc_weights_lock);
}
