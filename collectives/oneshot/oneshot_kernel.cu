/* oneshot_kernel.cu: the one-shot all-reduce kernel of the `oneshot` collective.
 *
 * An operation launches G = ceil(count / target) blocks (at most max_grid; the same G on every
 * rank, the ranks' counts being equal); block b of every rank owns chunk b of the vector and its
 * own region of each rank's peer-visible buffer, so blocks of one index talk only to each other.
 * Per operation, block b of rank r:
 *   1. takes the operation's number e = seq + 1 (seq: the rank's operations so far, in device
 *      memory, advanced by the operation's last block as it ends, so replays advance it by
 *      themselves; the next operation's kernel starts only after this one ended);
 *   2. ends at once when the communicator is broken (FAILED); else resolves its refusal cell
 *      (device memory, fired once: tagged with e); block 0 also reads the host-mapped abort flag
 *      (used in 4: when it is up, block 0 publishes nothing and ends ABORTED, so every rank does);
 *   3. copies its chunk of buf into data[r][e & 1][b] (double buffered by parity), and block 0
 *      writes the rank's refusal word and count into every rank's words area;
 *   4. fences (system scope) and stores e into start[p][e & 1][b][r] on every rank p;
 *   5. waits until start[r][e & 1][b][p] == e for every peer p (bounded: timeout_ns on
 *      %globaltimer, and the host-mapped abort flag polled). The flags are double buffered by
 *      parity as the data are: a peer one operation ahead writes the other slot, and a peer that
 *      skipped this operation (absent) never writes e here, so its later operations cannot
 *      release this one;
 *   6. sums its chunk in rank order from rank 0's value in float32 (s = d0; s += d1; ... with
 *      __fadd_rn, nothing to contract) into buf: every rank computes the same bits.
 * Reuse is safe without an end barrier: a rank overwrites data[.][e & 1] at e + 2 only after
 * passing a start barrier of e + 1, which every peer enters only after its whole kernel of e
 * ended (stream order), every read of e done.
 * Each block writes its count, tagged with e, next to its flag on every rank; after the wait it
 * compares every peer's count of its chunk with its own and writes nothing on a difference
 * (FAILED: the buffers stay untouched), and while waiting it reads the peer's block 0 count
 * (every grid has a block 0), so a block that has no partner on a rank of a smaller count (a
 * smaller grid) ends FAILED instead of timing out.
 * The last block of the rank to finish (an integer counter) writes the status: a peer's timeout,
 * else the first failed block's outcome (aborted, absent, broken, counts), else FAILED when the
 * ranks' counts differ, else the lowest refusing rank's word, else 0; a timeout also marks the
 * communicator broken (every later operation of every rank then ends at once with
 * MEMRA_COLLECTIVE_FAILED). No float atomics; no order depends on timing. */
#include <cuda_runtime.h>

#include "oneshot_kernel.h"

static __device__ __forceinline__ unsigned long long os_now(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* sync=acqrel: the flag published with a release store and read with acquire loads at system
 * scope (cumulative over the block's writes the barrier ordered before it), instead of full
 * system fences around relaxed (volatile) accesses. */
static __device__ __forceinline__ void os_st_release(unsigned long long *p, unsigned long long v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
static __device__ __forceinline__ unsigned long long os_ld_acquire(const unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__global__ void __launch_bounds__(OS_THREADS) os_kernel(os_rank_view v, float *buf, uint32_t count, uint32_t site,
                                                        const int32_t *position_dev, int32_t *status_dev) {
    __shared__ unsigned long long s_epoch;
    __shared__ int32_t s_word, s_outcome;
    __shared__ bool s_last;
    if (v.pdl) /* everything below reads what the kernels before it wrote */
        asm volatile("griddepcontrol.wait;" ::: "memory");
    const uint32_t b = blockIdx.x, g = gridDim.x, n = v.n_ranks, r = v.rank;
    const uint32_t per = (count + g - 1) / g;
    const uint32_t lo = min(count, b * per), hi = min(count, lo + per);
    /* Aborted before this kernel started (issue 24.5): block 0 does not publish its flag and ends
     * ABORTED, so no peer's block 0 passes its wait and every rank reads ABORTED (a waiting peer
     * sees the same flag in its poll). Without it a rank launched before the abort but started
     * after it found its peers' flags set, summed and reported success while they reported
     * ABORTED. One thread of block 0 reads the host-mapped flag, the load issued here and used
     * only before the flag is published, so its trip over the bus overlaps the copy (a read by
     * every block cost about 2 us a block: the reads of one host word are served one by one). */
    int32_t aborted = 0;
    if (b == 0 && threadIdx.x == 0)
        aborted = v.ctl->abort;
    if (threadIdx.x == 0) {
        s_outcome = 0;
        s_word = 0;
        const unsigned long long e = *(volatile unsigned long long *)v.seq + 1;
        s_epoch = e;
        if (b == 0 && site < OS_MAX_SITES)
            v.census[site]++;
        if (*(volatile int32_t *)(v.words[r] + 4 * n))
            s_outcome = MEMRA_COLLECTIVE_FAILED; /* broken by an earlier timeout */
        else {
            const int32_t pos = position_dev ? *position_dev : -1;
            for (uint32_t k = 0; k < OS_MAX_CELLS; k++) {
                os_cell *c = &v.cells[k];
                if (!c->armed || c->site != site || c->position != pos)
                    continue;
                unsigned long long prev = atomicCAS(&c->fired, 0ull, e);
                if (prev == 0ull || prev == e) {
                    s_word = c->word;
                    break;
                }
            }
            if (s_word == MEMRA_COLLECTIVE_ABSENT)
                s_outcome = MEMRA_COLLECTIVE_ABSENT; /* injected: this rank never arrives */
        }
    }
    __syncthreads();
    const unsigned long long e = s_epoch;
    const uint32_t par = (uint32_t)(e & 1);
    if (s_outcome == 0) {
        float *mine = v.data[r] + ((size_t)par * v.max_grid + b) * v.region;
        for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
            mine[i - lo] = buf[i];
        if (b == 0 && threadIdx.x < n) {
            int32_t *w = v.words[threadIdx.x];
            w[par * n + r] = s_word;
            w[2 * n + par * n + r] = (int32_t)count;
        }
        __syncthreads(); /* the block's writes, then thread 0's fence: cumulative (as a grid sync) */
        if (threadIdx.x == 0) {
            const size_t slot = ((size_t)par * v.max_grid + b) * n;
            /* this block's count, tagged with the operation, next to its flag on every rank
             * (before the fence or the release that publishes the flag) */
            const unsigned long long tagged = ((e & 0xffffffffull) << 32) | count;
            if (aborted) /* read as the kernel started: publish nothing (block 0 only) */
                s_outcome = MEMRA_COLLECTIVE_ABORTED;
            for (uint32_t p = 0; p < n && !aborted; p++)
                *(volatile unsigned long long *)&v.cnt[p][slot + r] = tagged;
            if (aborted) {
            } else if (v.acqrel) {
                for (uint32_t p = 0; p < n; p++)
                    os_st_release(&v.start[p][slot + r], e);
            } else {
                __threadfence_system();
                for (uint32_t p = 0; p < n; p++)
                    *(volatile unsigned long long *)&v.start[p][slot + r] = e;
            }
            const unsigned long long t0 = os_now();
            unsigned long long *flags = v.start[r] + slot;
            for (uint32_t p = 0; p < n && s_outcome == 0; p++) {
                uint32_t spins = 0;
                while ((v.acqrel ? os_ld_acquire(&flags[p]) : *(volatile unsigned long long *)&flags[p]) != e) {
                    if ((++spins & 255u) == 0) {
                        if (v.ctl->abort) {
                            s_outcome = MEMRA_COLLECTIVE_ABORTED;
                            break;
                        }
                        if (*(volatile int32_t *)(v.words[r] + 4 * n)) {
                            s_outcome = MEMRA_COLLECTIVE_FAILED;
                            break;
                        }
                        /* the peer's block 0 (which every grid has) says its count for this
                         * operation: another count may mean this block has no partner there */
                        const unsigned long long c0 =
                            *(volatile unsigned long long *)&v.cnt[r][(size_t)par * v.max_grid * n + p];
                        if ((c0 >> 32) == (e & 0xffffffffull) && (uint32_t)c0 != count) {
                            s_outcome = MEMRA_COLLECTIVE_FAILED;
                            break;
                        }
                        if (os_now() - t0 > v.timeout_ns) {
                            s_outcome = MEMRA_COLLECTIVE_TIMEOUT(p);
                            for (uint32_t q = 0; q < n; q++) /* broken, on every rank */
                                *(volatile int32_t *)(v.words[q] + 4 * n) = 1;
                            __threadfence_system();
                            break;
                        }
                    }
                }
            }
            if (!v.acqrel)
                __threadfence_system();
            /* A peer that timed out waiting for this rank marked the communicator broken before
             * this rank arrived: its step fails, so this one must not succeed either (re-checked
             * after the wait; the flag lives in this rank's own memory). */
            if (s_outcome == 0 && *(volatile int32_t *)(v.words[r] + 4 * n))
                s_outcome = MEMRA_COLLECTIVE_FAILED;
            /* every peer's block b reduced as many floats: otherwise nothing is written (plugin.h:
             * FAILED leaves the buffers untouched) */
            for (uint32_t p = 0; p < n && s_outcome == 0; p++)
                if ((uint32_t) * (volatile unsigned long long *)&v.cnt[r][slot + p] != count)
                    s_outcome = MEMRA_COLLECTIVE_FAILED;
        }
        __syncthreads();
        if (s_outcome == 0) {
            const size_t off = ((size_t)par * v.max_grid + b) * v.region;
            for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
                float s = __ldcv(v.data[0] + off + (i - lo));
                for (uint32_t p = 1; p < n; p++)
                    s = __fadd_rn(s, __ldcv(v.data[p] + off + (i - lo)));
                buf[i] = s;
            }
        }
    }
    /* The rank's status: written by the last block to finish. */
    if (threadIdx.x == 0) {
        v.outcome[b] = s_outcome;
        __threadfence();
        s_last = atomicAdd(v.done, 1u) == g - 1;
    }
    __syncthreads();
    if (!s_last || threadIdx.x != 0)
        return;
    __threadfence();
    /* A peer's timeout names the cause; then abort, absence, failure; then counts; then refusals. */
    int32_t st = 0;
    for (uint32_t k = 0; k < g; k++) {
        const int32_t o = *(volatile int32_t *)&v.outcome[k];
        if (o >= MEMRA_COLLECTIVE_TIMEOUT(0) && o < MEMRA_COLLECTIVE_TIMEOUT(MEMRA_MAX_RANKS)) {
            st = o;
            break;
        }
        if (st == 0)
            st = o;
    }
    if (st == 0) { /* every block passed its barrier, block 0's included: the words are in */
        const volatile int32_t *cnt = v.words[r] + 2 * n + par * n;
        for (uint32_t p = 0; p < n; p++)
            if ((uint32_t)cnt[p] != count)
                st = MEMRA_COLLECTIVE_FAILED;
    }
    if (st == 0) {
        const volatile int32_t *w = v.words[r] + par * n;
        for (uint32_t p = 0; p < n && st == 0; p++)
            st = w[p];
    }
    *v.done = 0;
    if (status_dev)
        *status_dev = st;
    *v.seq = s_epoch; /* the operation is over: the next one is e + 1 */
}

extern "C" int os_launch(const os_rank_view *v, float *buf, uint32_t count, uint32_t site, const int32_t *position_dev,
                         int32_t *status_dev, void *stream) {
    uint32_t g = (count + v->target - 1) / v->target;
    g = g < 1 ? 1 : g > v->max_grid ? v->max_grid : g;
    if (!v->pdl) {
        os_kernel<<<g, OS_THREADS, 0, (cudaStream_t)stream>>>(*v, buf, count, site, position_dev, status_dev);
        return (int)cudaGetLastError();
    }
    /* pdl=1: launched while the kernel before it drains; it waits for it (griddepcontrol.wait) first */
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(g);
    cfg.blockDim = dim3(OS_THREADS);
    cfg.stream = (cudaStream_t)stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return (int)cudaLaunchKernelEx(&cfg, os_kernel, *v, buf, count, site, position_dev, status_dev);
}
