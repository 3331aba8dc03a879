/* cuda_stages.cu: the pipeline between the `cuda` backend's stages: peer access between the
 * devices of consecutive stages (and of a stage's ranks), and each rank's input hidden of a step:
 * stage 0 embeds the token (times the model's embedding scale: gemma3's sqrt(n_embd), 1 elsewhere;
 * with ranks: once, on rank 0, copied by every rank); a later stage waits
 * for the stage before, copies its hidden (and, in a checked arm, its verdict) and records
 * `consumed`, after which the stage before may overwrite its hidden with the next step's. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_ext.h"
#include "cuda_kernels.h"
#include "cuda_backend.h"
#include "memra/ext.h"
#include "memra/gguf.h"
#include "memra/model.h"
#include "memra/numeric.h"
#include "memra/options.h"
#include "memra/plugin.h"
#include "memra/status.h"

/* Peer access from device `to` to memory of device `from`, where the two differ and the pair can. */
memra_status mc_enable_peer(int to, int from, memra_error *err) {
    int can = 0;
    if (to == from || cudaDeviceCanAccessPeer(&can, to, from) != cudaSuccess || !can)
        return MEMRA_OK;
    cudaError_t e = cudaSetDevice(to);
    if (e != cudaSuccess)
        return mc_cuda_fail(err, e, "cudaSetDevice (peer access)");
    e = cudaDeviceEnablePeerAccess(from, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled)
        cudaGetLastError();
    else if (e != cudaSuccess)
        return mc_cuda_fail(err, e, "cudaDeviceEnablePeerAccess");
    return MEMRA_OK;
}

/* One stage's part of the body before its layers: every rank's input hidden (mc_stage_body). */
memra_status mc_stage_input(memra_backend *b, memra_state *s, uint32_t i, bool capture, memra_error *err) {
    const memra_model *m = b->m;
    const uint32_t R = mc_ranks(s, i);
    const bool last = i == s->n_stages - 1, tp = R > 1;
    const bool own_trigger = b->cfg.trigger != MC_TRIGGER_DEFAULT;
    mc_stage_state *r0 = &s->st[i][0];
    /* Every rank's input hidden. */
    for (uint32_t r = 0; r < R; r++) {
        mc_stage_state *ss = &s->st[i][r];
        cudaStream_t q = ss->stream;
        MC_RET(cudaSetDevice(ss->device), "cudaSetDevice");
        /* Rank 0's hidden is read by the next stage's ranks' copies of the previous step: wait. */
        if (!capture && !last && r == 0)
            for (uint32_t k = 0; k < mc_ranks(s, i + 1); k++)
                MC_RET(cudaStreamWaitEvent(q, s->st[i + 1][k].consumed, 0), "cudaStreamWaitEvent (hidden consumed)");
        if (i == 0 && r == 0) {
            if (tp && !capture) /* xin is read by the other ranks' copies of the previous step */
                for (uint32_t k = 1; k < R; k++)
                    MC_RET(cudaStreamWaitEvent(q, s->st[0][k].consumed, 0), "cudaStreamWaitEvent (embedding consumed)");
            if (own_trigger)
                MC_RET(mc_trigger_enqueue(b->cfg.trigger, q), "enqueueing the arm's trigger mask");
            const float scale = mc_embd_scale(m); /* as the cpu backend */
            if (mc_embed_in_sampler(b, s))        /* xe holds the input: mc_prepare or the last sampler */
                continue;
            MC_RET(mc_embed(&b->w->stages[0][0].embd, ss->in_token, scale, tp ? ss->xin : ss->x, q),
                   "launch of the embedding kernel");
            if (tp) {
                MC_RET(cudaEventRecord(ss->ready, q), "cudaEventRecord (embedding ready)");
                MC_RET(cudaMemcpyAsync(ss->x, ss->xin, (size_t)m->n_embd * 4, cudaMemcpyDeviceToDevice, q),
                       "cudaMemcpyAsync (embedding)");
            }
            continue;
        }
        /* Wait for the source first (in a capture, that joins this stream to it), then copy. */
        const mc_stage_state *src = i == 0 ? r0 : &s->st[i - 1][0];
        MC_RET(cudaStreamWaitEvent(q, i == 0 ? r0->ready : src->done, 0), "cudaStreamWaitEvent (hidden ready)");
        if (own_trigger)
            MC_RET(mc_trigger_enqueue(b->cfg.trigger, q), "enqueueing the arm's trigger mask");
        /* Same device: a device copy; across devices: a peer copy through unified addressing
         * (cudaMemcpyPeerAsync cannot be captured into a graph). */
        MC_RET(cudaMemcpyAsync(ss->x, i == 0 ? src->xin : src->x, (size_t)m->n_embd * 4, cudaMemcpyDefault, q),
               "cudaMemcpyAsync (hidden hand-off)");
        /* The previous stage's verdict of this step travels with its hidden: once `consumed` is
         * recorded that stage may run (and judge) the next step. */
        if (i > 0 && b->tp)
            MC_RET(cudaMemcpyAsync(ss->vin, src->verdict, 4, cudaMemcpyDefault, q),
                   "cudaMemcpyAsync (verdict hand-off)");
        MC_RET(cudaEventRecord(ss->consumed, q), "cudaEventRecord (hidden consumed)");
        if (i > 0 && b->stall_us) /* fault injection (stall_us=): the stage before runs ahead */
            MC_RET(mc_stall(b->stall_us, q), "launch of the stall kernel (stall_us=)");
    }
    return MEMRA_OK;
}
