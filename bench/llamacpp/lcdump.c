/* lcdump: llama.cpp's logits for token ids, one position at a time (a decode step each, as memra's
 * run does), written as little-endian float32, steps x n_vocab. Usage: lcdump MODEL IDS OUT */
#include <stdio.h>
#include <stdlib.h>
#include "llama.h"
int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: lcdump MODEL IDS OUT\n"); return 2; }
    FILE *fi = fopen(argv[2], "r");
    if (!fi) { perror(argv[2]); return 2; }
    int ids[4096], n = 0;
    int extra;
    while (n < 4096 && fscanf(fi, "%d", &ids[n]) == 1) n++;
    if (n == 4096 && fscanf(fi, "%d", &extra) == 1) { fprintf(stderr, "%s: more than 4096 ids\n", argv[2]); return 2; }
    fclose(fi);
    if (n == 0) { fprintf(stderr, "%s: no token ids\n", argv[2]); return 2; }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) { fprintf(stderr, "load failed\n"); return 3; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512; cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32; cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED; cp.n_batch = 512; cp.n_threads = 1; cp.n_threads_batch = 1;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 3; }
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(m));
    FILE *fo = fopen(argv[3], "wb");
    if (!fo) { perror(argv[3]); return 3; }
    for (int i = 0; i < n; i++) {
        struct llama_batch b = llama_batch_get_one(&ids[i], 1);
        if (llama_decode(ctx, b) != 0) { fprintf(stderr, "decode failed at %d\n", i); return 3; }
        float *lg = llama_get_logits_ith(ctx, -1);
        if (fwrite(lg, sizeof(float), (size_t)nv, fo) != (size_t)nv) { fprintf(stderr, "write failed\n"); return 3; }
    }
    if (fclose(fo) != 0) { fprintf(stderr, "close failed\n"); return 3; }
    fprintf(stderr, "lcdump: %d steps x %d logits\n", n, nv);
    return 0;
}
