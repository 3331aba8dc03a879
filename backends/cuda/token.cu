/* token.cu: the small kernels of a step: the embedding of the input token, the commit of the
 * position, and the token hand-over between steps. */
#include "cuda_common.cuh"
#include "embed_elem.cuh"
#include "gemv_quant.h"

MC_DYNAMIC_SMEM_ANCHOR(mc_smem_anchor_token)

/* The embedding's checks before a launch: a quantized table's rows must have the layout the
 * weights' loader gives them (legacy_layout.h, kquant_layout.h), as mc_embed_elem reads them. */
static bool mc_embed_ok(const mc_matrix *emb) {
    uint64_t dr, ar;
    if (emb->rows == 0 || emb->cols == 0)
        return false;
    switch (emb->type) {
    case MEMRA_TYPE_F32:
    case MEMRA_TYPE_F16:
    case MEMRA_TYPE_BF16: return emb->data != NULL;
    case MEMRA_TYPE_Q8_0: return emb->data && emb->scales && emb->cols % MEMRA_Q8_0_BLOCK == 0;
    case MEMRA_TYPE_Q4_K:
    case MEMRA_TYPE_Q5_K:
    case MEMRA_TYPE_Q6_K:
        return mc_kq_layout(emb->type, emb->cols, &dr, &ar) && emb->stride == dr && emb->aux_stride == ar && emb->aux;
    default: return mc_ll_is(emb->type) && emb->cols % 32 == 0 && emb->aux;
    }
}

/* Per token: reads *token and one embedding row (its data, and a quantized type's scales or aux
 * bytes); writes x (cols floats): element c is mc_embed_elem's (embed_elem.cuh), the one expression
 * per type that commit=handoff's fold in the sampler also uses: the row dequantized as memra/quant.h
 * does, times scale (gemma3's sqrt(n_embd); 1 elsewhere, which leaves every value's bits). */
__global__ void embed_row(const mc_matrix emb, const int32_t *token, float scale, float *x) {
    /* the first layer's GEMV may launch now (its wait is for this kernel's end) */
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    int32_t t = *token;
    if (t < 0 || (uint32_t)t >= emb.rows)
        t = 0;
    for (uint32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < emb.cols; c += gridDim.x * blockDim.x)
        x[c] = mc_embed_elem(emb, t, c, scale);
}

cudaError_t mc_embed(const mc_matrix *emb, const int32_t *token, float scale, float *x, cudaStream_t st) {
    if (!mc_embed_ok(emb))
        return cudaErrorInvalidValue;
    embed_row<<<(emb->cols + 255) / 256, 256, 0, st>>>(*emb, token, scale, x);
    return cudaGetLastError();
}

/* A prefill chunk's embeddings: row j of x (ld floats apart) is embed_row's of tokens[j], element
 * for element the same expression (grid: (column blocks, rows)). */
__global__ void embed_rows(const mc_matrix emb, const int32_t *tokens, float scale, float *x, uint32_t ld) {
    int32_t t = tokens[blockIdx.y];
    if (t < 0 || (uint32_t)t >= emb.rows)
        t = 0;
    x += (size_t)blockIdx.y * ld;
    for (uint32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < emb.cols; c += gridDim.x * blockDim.x)
        x[c] = mc_embed_elem(emb, t, c, scale);
}

cudaError_t mc_embed_rows(const mc_matrix *emb, const int32_t *tokens, uint32_t M, float scale, float *x, uint32_t ld,
                          cudaStream_t st) {
    if (M == 0)
        return cudaSuccess;
    if (M > 65535 || !mc_embed_ok(emb))
        return cudaErrorInvalidValue;
    embed_rows<<<dim3((emb->cols + 255) / 256, M), 256, 0, st>>>(*emb, tokens, scale, x, ld);
    return cudaGetLastError();
}

/* Per stage and token: *pos += 1 (the commit). Launched programmatically (pdl=1), it first lets
 * its dependent (the head) launch, whose own wait then waits for this kernel's end, so for the
 * down projection's before it too; without a programmatic launch both instructions are no-ops. */
__global__ void position_commit(int32_t *pos) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    *pos += 1;
}
/* *dst = *src: the sampled token handed to the next step's embedding where the stages run on
 * several streams (with one stage the sampler writes it in place: mc_stage_body). */
__global__ void token_copy(int32_t *dst, const int32_t *src) { *dst = *src; }

cudaError_t mc_commit(int32_t *pos, bool pdl, cudaStream_t st) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1);
    cfg.blockDim = dim3(1);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    mc_launch_attrs_pdl(&cfg, attr, 0, pdl);
    return cudaLaunchKernelEx(&cfg, position_commit, pos);
}

__global__ void stall_kernel(uint32_t us) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < (unsigned long long)us * 1000ull);
}

cudaError_t mc_stall(uint32_t us, cudaStream_t st) {
    stall_kernel<<<1, 1, 0, st>>>(us);
    return cudaGetLastError();
}

/* A checked commit (cuda_kernels.h): *pos += 1 only when the state is not poisoned, the previous
 * stage's verdict handed over with the hidden (if any) is 0 and every collective status of the
 * step is 0; the verdict goes to *verdict and, if ring, to ring[pos % MC_VERDICT_RING]
 * (host-mapped) either way; a failed one poisons the state. */
__global__ void position_commit_checked(int32_t *pos, const int32_t *status, uint32_t n, const int32_t *peers,
                                        uint32_t n_peers, uint32_t self, const int32_t *prev, int32_t *verdict,
                                        int32_t *poison, mc_verdict *ring) {
    const int32_t p = *pos;
    mc_verdict v = {p, -1, 0, 0};
    const int32_t poisoned = *(volatile int32_t *)poison;
    if (poisoned != 0) {
        v.index = -3; /* an earlier step of this state failed */
        v.word = poisoned;
    } else if (prev && *(const volatile int32_t *)prev != 0) {
        v.index = -2; /* an earlier stage failed this step */
        v.word = *(const volatile int32_t *)prev;
    }
    for (uint32_t i = 0; i < n && v.index == -1; i++)
        if (status[i] != 0) {
            v.index = (int32_t)i;
            v.word = status[i];
        }
    for (uint32_t q = 0; q < n_peers && v.index == -1; q++) /* another rank's last all-reduce failed */
        if (q != self && peers[q] != 0) {
            v.index = (int32_t)n - 1;
            v.word = peers[q];
        }
    if (v.index == -1)
        *pos = p + 1;
    const int32_t word = v.index == -1 ? 0 : (v.word ? v.word : -1);
    *verdict = word;
    if (word != 0 && poisoned == 0)
        *(volatile int32_t *)poison = word;
    /* A poisoned step leaves the ring alone: it runs at the refused step's position (which did
     * not advance), whose verdict the host has yet to read there. */
    if (!ring || poisoned != 0)
        return;
    volatile mc_verdict *slot = ring + ((uint32_t)p % MC_VERDICT_RING);
    slot->index = v.index;
    slot->word = v.word;
    __threadfence_system();
    slot->position = v.position;
}

cudaError_t mc_commit_checked(int32_t *pos, const int32_t *status, uint32_t n, const int32_t *peers, uint32_t n_peers,
                              uint32_t self, const int32_t *prev, int32_t *verdict, int32_t *poison, mc_verdict *ring,
                              cudaStream_t st) {
    position_commit_checked<<<1, 1, 0, st>>>(pos, status, n, peers, n_peers, self, prev, verdict, poison, ring);
    return cudaGetLastError();
}

/* A tensor-parallel step's outputs, published only when its verdict is 0: the hidden state and
 * the logits a refused step computed stay out of the state's committed copies. */
__global__ void tp_publish(const int32_t *verdict, const float *x, float *xc, uint32_t n_embd, const float *lg,
                           float *logits, uint32_t n_vocab) {
    if (*verdict != 0)
        return;
    const uint32_t stride = gridDim.x * blockDim.x;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n_vocab; i += stride)
        logits[i] = lg[i];
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n_embd; i += stride)
        xc[i] = x[i];
}

cudaError_t mc_tp_publish(const int32_t *verdict, const float *x, float *xc, uint32_t n_embd, const float *lg,
                          float *logits, uint32_t n_vocab, cudaStream_t st) {
    tp_publish<<<64, 256, 0, st>>>(verdict, x, xc, n_embd, lg, logits, n_vocab);
    return cudaGetLastError();
}

cudaError_t mc_copy_token(int32_t *dst, const int32_t *src, cudaStream_t st) {
    token_copy<<<1, 1, 0, st>>>(dst, src);
    return cudaGetLastError();
}

const char *mc_token_family(const void *f) {
    static const mc_family_row table[] = {
        {(const void *)embed_row, "embed"},        {(const void *)embed_rows, "embed"},
        {(const void *)position_commit, "commit"}, {(const void *)position_commit_checked, "commit"},
        {(const void *)tp_publish, "commit"},      {(const void *)token_copy, "token"},
    };
    return mc_family_find(table, sizeof table / sizeof table[0], f);
}
