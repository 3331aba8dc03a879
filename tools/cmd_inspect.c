/* cmd_inspect.c: `memra inspect FILE.gguf`: the header, what would stop `memra run` on the file
 * (architecture, tensor types, model, tokenizer, chat format, backends), the metadata (long arrays
 * abbreviated), the tensor table and the model description of a GGUF file, or why there is none. */
#include <inttypes.h>
#include <string.h>

#include "cli.h"
#include "memra/chat.h"
#include "memra/tokenizer.h"

static const char help_text[] =
    "usage: memra inspect FILE.gguf [--tensors] [--arrays N] [--check]\n"
    "\n"
    "Prints the GGUF header; then, under \"can it run?\", everything that would stop `memra run`\n"
    "on the file, one concern a line: the architecture, the tensor types memra lacks (how many\n"
    "tensors of each, the first names), the model description, the tokenizer kind and\n"
    "pre-tokenizer (needed by --prompt and --chat), the chat format (needed by --chat: detected,\n"
    "none, or a template memra refuses), and which backends could run it (no plugin is loaded).\n"
    "Then every metadata key (arrays show their first N elements, default 8), the tensor count\n"
    "and total tensor bytes (with --tensors: every tensor with its type, shape, size and offset),\n"
    "and the model description (architecture and hyperparameters), or the reason there is none.\n"
    "\n"
    "Exits 3 when the file cannot be read as GGUF, else 0: inspect reports, it does not refuse.\n"
    "  --tensors  list every tensor (the default is a summary: their count and total bytes)\n"
    "  --arrays N show the first N elements of an array (default 8)\n"
    "  --check    also exit 3, with one line on stderr naming the first reason, when the cpu\n"
    "             backend could not run the file: an architecture, model or tensor type memra\n"
    "             lacks, or a tokenizer it cannot build (the chat format is reported only)\n";

#define STR_SHOW_MAX 80

/* A model string, quoted: valid UTF-8 passes through, every other byte (a control byte, a byte
 * of no valid sequence) reads \xNN, and the cut at STR_SHOW_MAX bytes never splits a character. */
static void print_str(memra_gguf_str s) {
    putchar('"');
    const unsigned char *p = (const unsigned char *)s.ptr;
    uint64_t i = 0;
    while (i < s.len && i < STR_SHOW_MAX) {
        unsigned char c = p[i];
        size_t len = memra_utf8_len(p + i, (size_t)(s.len - i < 4 ? s.len - i : 4));
        if (c == '"' || c == '\\') {
            printf("\\%c", c);
            i++;
        } else if (c < 0x20 || c == 0x7f || len == 0) {
            printf("\\x%02x", c);
            i++;
        } else if (i + len > STR_SHOW_MAX) {
            break; /* the next character would cross the cut: shown whole or not at all */
        } else {
            fwrite(p + i, 1, len, stdout);
            i += len;
        }
    }
    putchar('"');
    if (s.len > i)
        printf("... (%" PRIu64 " bytes)", s.len);
}

/* One packed little-endian scalar of an array. */
static void print_packed(memra_gguf_type t, const unsigned char *p) {
    uint64_t u = 0;
    size_t n = memra_gguf_scalar_size(t);
    for (size_t i = 0; i < n; i++)
        u |= (uint64_t)p[i] << (8 * i);
    switch (t) {
    case MEMRA_GGUF_INT8: printf("%d", (int8_t)u); break;
    case MEMRA_GGUF_INT16: printf("%d", (int16_t)u); break;
    case MEMRA_GGUF_INT32: printf("%" PRId32, (int32_t)u); break;
    case MEMRA_GGUF_INT64: printf("%" PRId64, (int64_t)u); break;
    case MEMRA_GGUF_BOOL: printf("%s", u ? "true" : "false"); break;
    case MEMRA_GGUF_FLOAT32: {
        uint32_t b = (uint32_t)u;
        printf("%g", (double)memra_bits_to_f32(b));
        break;
    }
    case MEMRA_GGUF_FLOAT64: {
        double d;
        memcpy(&d, &u, sizeof d);
        printf("%g", d);
        break;
    }
    default: printf("%" PRIu64, u); break;
    }
}

static void print_value(const memra_gguf_value *v, uint64_t max_items) {
    switch (v->type) {
    case MEMRA_GGUF_STRING: print_str(v->v.str); break;
    case MEMRA_GGUF_BOOL: printf("%s", v->v.u64 ? "true" : "false"); break;
    case MEMRA_GGUF_INT8:
    case MEMRA_GGUF_INT16:
    case MEMRA_GGUF_INT32:
    case MEMRA_GGUF_INT64: printf("%" PRId64, v->v.i64); break;
    case MEMRA_GGUF_FLOAT32:
    case MEMRA_GGUF_FLOAT64: printf("%g", v->v.f64); break;
    case MEMRA_GGUF_ARRAY: {
        const memra_gguf_array *a = &v->v.arr;
        uint64_t n = a->count < max_items ? a->count : max_items;
        printf("[");
        for (uint64_t i = 0; i < n; i++) {
            if (i)
                printf(", ");
            if (a->items)
                print_value(&a->items[i], max_items);
            else
                print_packed(a->elem_type, (const unsigned char *)a->data + i * memra_gguf_scalar_size(a->elem_type));
        }
        if (a->count > n)
            printf("%s... %" PRIu64 " more", n ? ", " : "", a->count - n);
        printf("]");
        break;
    }
    default: printf("%" PRIu64, v->v.u64); break;
    }
}

static void print_metadata(const memra_gguf *g, uint64_t max_items) {
    uint64_t n = memra_gguf_kv_count(g);
    printf("\nmetadata (%" PRIu64 " keys):\n", n);
    for (uint64_t i = 0; i < n; i++) {
        const memra_gguf_kv *kv = memra_gguf_kv_at(g, i);
        char type[48];
        if (kv->value.type == MEMRA_GGUF_ARRAY)
            snprintf(type, sizeof type, "%s[%" PRIu64 "]", memra_gguf_type_name(kv->value.v.arr.elem_type),
                     kv->value.v.arr.count);
        else
            snprintf(type, sizeof type, "%s", memra_gguf_type_name(kv->value.type));
        printf("  %-44s %-14s ", kv->key, type);
        print_value(&kv->value, max_items);
        putchar('\n');
    }
}

static void print_tensors(const memra_gguf *g, bool list) {
    uint64_t n = memra_gguf_tensor_count(g), total = 0;
    if (!list) {
        for (uint64_t i = 0; i < n; i++)
            total += memra_gguf_tensor_at(g, i)->n_bytes;
        char b[32];
        printf("\ntensors (%" PRIu64 "): total tensor bytes: %" PRIu64 " (%s); --tensors lists them\n", n, total,
               cli_bytes(total, b, sizeof b));
        return;
    }
    printf("\ntensors (%" PRIu64 "):\n", n);
    printf("  %-5s %-32s %-6s %-22s %12s %14s\n", "#", "NAME", "TYPE", "SHAPE", "BYTES", "OFFSET");
    for (uint64_t i = 0; i < n; i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        char shape[96];
        int k = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims && k > 0 && (size_t)k < sizeof shape; d++)
            k += snprintf(shape + k, sizeof shape - (size_t)k, d ? ", %" PRIu64 : "%" PRIu64, t->ne[d]);
        if (k > 0 && (size_t)k < sizeof shape)
            snprintf(shape + k, sizeof shape - (size_t)k, "]");
        printf("  %-5" PRIu64 " %-32s %-6s %-22s %12" PRIu64 " %14" PRIu64 "\n", i, t->name,
               memra_tensor_type_name(t->type), shape, t->n_bytes, t->offset);
        total += t->n_bytes;
    }
    char buf[32];
    printf("  total tensor bytes: %" PRIu64 " (%s)\n", total, cli_bytes(total, buf, sizeof buf));
}

static void print_model(const memra_model *m, const memra_error *err) {
    printf("\nmodel:\n");
    if (!m) {
        printf("  no model description: %s\n", err->msg);
        return;
    }
    char buf[32];
    printf("  architecture:     %s%s%s\n", m->arch_name, *m->name ? ", name " : "", m->name);
    printf("  n_vocab:          %" PRIu32 "\n", m->n_vocab);
    printf("  n_embd:           %" PRIu32 "\n", m->n_embd);
    printf("  n_layer:          %" PRIu32 "\n", m->n_layer);
    printf("  n_ff:             %" PRIu32 "\n", m->n_ff);
    printf("  heads (q, kv):    %" PRIu32 ", %" PRIu32 "\n", m->n_head, m->n_head_kv);
    printf("  head_dim (k, v):  %" PRIu32 ", %" PRIu32 "\n", m->head_dim, m->head_dim_v);
    printf("  n_ctx_train:      %" PRIu32 "\n", m->n_ctx_train);
    printf("  rms_eps:          %g\n", (double)m->rms_eps);
    printf("  rope:             %s pairing, base %g, linear factor %g, %s\n",
           m->rope_pairing == MEMRA_ROPE_NEOX ? "neox" : "normal", (double)m->rope_freq_base,
           (double)m->rope_linear_factor,
           m->rope_freqs ? "per-dimension factors (rope_freqs.weight)" : "no rope_freqs");
    printf("  extras:           %s%s\n", m->n_layer && m->layers[0].bq.data ? "q/k/v biases" : "no biases",
           m->n_layer && m->layers[0].q_norm.data ? ", per-head q/k norm" : "");
    printf("  output:           %s\n", m->tied_output ? "tied to token_embd.weight" : "output.weight");
    printf("  bos, eos:         %" PRId64 ", %" PRId64 "\n", m->bos_id, m->eos_id);
    printf("  weight bytes:     %" PRIu64 " (%s)\n", m->weight_bytes, cli_bytes(m->weight_bytes, buf, sizeof buf));
    uint64_t kv_per_pos = 4ull * m->n_layer * m->n_head_kv * ((uint64_t)m->head_dim + m->head_dim_v);
    printf("  f32 KV cache:     %" PRIu64 " bytes per position (%s at n_ctx_train)\n", kv_per_pos,
           cli_bytes(kv_per_pos * m->n_ctx_train, buf, sizeof buf));
}

/* ---- can it run? ----
 * What `memra run` would refuse, concern by concern, found by asking the library the questions a
 * run asks (memra_model_describe, memra_tensor_type_supported, memra_tokenizer_new,
 * memra_chat_detect), in the order a run asks them. No backend plugin is loaded: the backends'
 * own rules are stated below from their code. */

#define SHOW_NAMES 3      /* tensor names shown per type */
#define MAX_TYPE_USES 64u /* distinct tensor types of one file: the reader knows fewer */

/* The tensors of one type. */
typedef struct type_use {
    uint32_t type;
    uint64_t count;
    const char *names[SHOW_NAMES];
} type_use;

typedef struct run_check {
    const memra_gguf *g;
    const char *path;
    type_use uses[MAX_TYPE_USES]; /* by type number */
    size_t n_uses;
    uint64_t n_tensors, n_unsupported;
    const memra_gguf_tensor *first_unsupported; /* in file order */
    memra_model *model;                         /* NULL when it cannot be described */
    memra_error model_err;
    bool arch_failed; /* the description failed on general.architecture */
    memra_tokenizer *tok;
    memra_error tok_err;
    bool has_template; /* the file has tokenizer.chat_template */
    memra_chat_format chat;
    const char *chat_source;
    memra_error chat_err;
} run_check;

/* The cuda backend's rules (backends/cuda/cuda_weights.cu: mc_type_ok, mc_check_matrix;
 * cuda_state.cu: mc_open; cuda-graph opens it): tensors of F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, Q4_K, Q5_K or Q6_K, a quantized one with whole blocks a row (32 columns; 256 for the
 * K-quants) and a legacy one (Q4_0 .. Q5_1) with at most CUDA_LEGACY_COLS_MAX columns
 * (backends/cuda/legacy_layout.h: MC_LL_COLS_MAX), the llama, qwen2 and qwen3 architectures, an
 * even head_dim of at most 1024 and n_head a multiple of n_head_kv. The cpu backend
 * (backends/cpu/cpu_open.c: bind_matrix, cpu_open) takes every architecture memra describes and
 * every type memra_tensor_type_supported accepts. */
#define CUDA_LEGACY_COLS_MAX 51200u
static bool cuda_type_legacy(uint32_t t) {
    return t == MEMRA_TYPE_Q4_0 || t == MEMRA_TYPE_Q4_1 || t == MEMRA_TYPE_Q5_0 || t == MEMRA_TYPE_Q5_1;
}
static bool cuda_type_kquant(uint32_t t) {
    return t == MEMRA_TYPE_Q4_K || t == MEMRA_TYPE_Q5_K || t == MEMRA_TYPE_Q6_K;
}
static bool cuda_type_ok(uint32_t t) {
    return t == MEMRA_TYPE_F32 || t == MEMRA_TYPE_F16 || t == MEMRA_TYPE_BF16 || t == MEMRA_TYPE_Q8_0 ||
           cuda_type_legacy(t) || cuda_type_kquant(t);
}

/* A tensor of a type the cuda backend runs whose row it cannot lay out: into buf, true. */
static bool cuda_shape_refuses(const memra_gguf *g, char *buf, size_t size) {
    for (uint64_t i = 0; i < memra_gguf_tensor_count(g); i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        const uint64_t block = t->type == MEMRA_TYPE_Q8_0 || cuda_type_legacy(t->type) ? 32
                               : cuda_type_kquant(t->type)                            ? 256
                                                                                      : 0;
        if (block && t->ne[0] % block != 0) {
            snprintf(buf, size, "tensor %s is %s with %" PRIu64 " columns, not a multiple of %" PRIu64, t->name,
                     memra_tensor_type_name(t->type), t->ne[0], block);
            return true;
        }
        if (cuda_type_legacy(t->type) && t->ne[0] > CUDA_LEGACY_COLS_MAX) {
            snprintf(buf, size, "tensor %s is %s with %" PRIu64 " columns (its GEMV takes at most %u)", t->name,
                     memra_tensor_type_name(t->type), t->ne[0], CUDA_LEGACY_COLS_MAX);
            return true;
        }
    }
    return false;
}

static bool cuda_arch_ok(memra_arch a) {
    return a == MEMRA_ARCH_LLAMA || a == MEMRA_ARCH_QWEN2 || a == MEMRA_ARCH_QWEN3 || a == MEMRA_ARCH_GEMMA3 ||
           a == MEMRA_ARCH_QWEN2MOE || a == MEMRA_ARCH_QWEN3MOE || a == MEMRA_ARCH_GRANITEMOE;
}

/* msg without the "PATH: " the library puts in front (the file: line above names it once). */
static const char *no_path(const char *msg, const char *path) {
    size_t n = strlen(path);
    if (strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
        return msg + n + 2;
    return msg;
}

static void count_types(const memra_gguf *g, run_check *rc) {
    rc->n_tensors = memra_gguf_tensor_count(g);
    for (uint64_t i = 0; i < rc->n_tensors; i++) {
        const memra_gguf_tensor *t = memra_gguf_tensor_at(g, i);
        size_t k = 0;
        while (k < rc->n_uses && rc->uses[k].type < t->type)
            k++;
        if (k == rc->n_uses || rc->uses[k].type != t->type) {
            if (rc->n_uses == MAX_TYPE_USES)
                continue; /* never: the reader refuses types it does not know */
            memmove(&rc->uses[k + 1], &rc->uses[k], (rc->n_uses - k) * sizeof rc->uses[0]);
            memset(&rc->uses[k], 0, sizeof rc->uses[k]);
            rc->uses[k].type = t->type;
            rc->n_uses++;
        }
        type_use *u = &rc->uses[k];
        if (u->count < SHOW_NAMES)
            u->names[u->count] = t->name;
        u->count++;
        if (!memra_tensor_type_supported(t->type) && !rc->n_unsupported++)
            rc->first_unsupported = t;
    }
}

static void run_check_gather(const memra_gguf *g, run_check *rc) {
    memset(rc, 0, sizeof *rc);
    rc->g = g;
    rc->path = memra_gguf_path(g);
    count_types(g, rc);
    if (memra_model_describe(g, &rc->model, &rc->model_err) != MEMRA_OK) {
        rc->model = NULL;
        const memra_gguf_value *a = memra_gguf_find(g, "general.architecture");
        rc->arch_failed = !a || a->type != MEMRA_GGUF_STRING || strstr(rc->model_err.msg, "general.architecture");
    }
    if (memra_tokenizer_new(g, &rc->tok, &rc->tok_err) != MEMRA_OK)
        rc->tok = NULL;
    rc->has_template = memra_gguf_find(g, "tokenizer.chat_template") != NULL;
    if (rc->tok && memra_chat_detect(g, rc->tok, &rc->chat, &rc->chat_source, NULL, &rc->chat_err) != MEMRA_OK)
        rc->chat = 0;
}

static void run_check_free(run_check *rc) {
    memra_model_free(rc->model);
    memra_tokenizer_free(rc->tok);
}

/* Whether the cpu backend can open the file: described, and every tensor of a supported type. */
static bool cpu_runs(const run_check *rc) { return rc->model && rc->n_unsupported == 0; }

/* Why the cuda backend would refuse the file, into buf; false when it would not. */
static bool cuda_refuses(const run_check *rc, char *buf, size_t size) {
    if (!rc->model) {
        snprintf(buf, size, "the file has no model memra can describe");
        return true;
    }
    const memra_model *m = rc->model;
    if (!cuda_arch_ok(m->arch)) {
        snprintf(buf, size, "architecture %s (it runs llama, qwen2, qwen3, gemma3, qwen2moe, qwen3moe and granitemoe)",
                 m->arch_name);
        return true;
    }
    /* a mixture of experts: its expert stacks through the expert GEMV (F32, F16, BF16, Q8_0, Q4_0 ..
     * Q6_K; gate and up of one type; backends/cuda/cuda_state.cu, mc_check_moe) */
    for (uint32_t il = 0; m->n_expert > 0 && m->moe && il < m->n_layer; il++) {
        const memra_weight *w[3] = {&m->moe[il].gate_exps, &m->moe[il].up_exps, &m->moe[il].down_exps};
        for (int k = 0; k < 3; k++)
            if (!cuda_type_ok(w[k]->type)) {
                snprintf(buf, size,
                         "expert tensor %s is %s (its expert GEMV runs F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                         "Q5_1, Q4_K, Q5_K and Q6_K experts)",
                         w[k]->name ? w[k]->name : "?", memra_tensor_type_name(w[k]->type));
                return true;
            }
        if (w[0]->type != w[1]->type) {
            snprintf(buf, size, "expert tensors %s (%s) and %s (%s) differ in type", w[0]->name ? w[0]->name : "?",
                     memra_tensor_type_name(w[0]->type), w[1]->name ? w[1]->name : "?",
                     memra_tensor_type_name(w[1]->type));
            return true;
        }
    }
    if (m->n_expert > 0 && m->n_ff % 4 != 0) {
        snprintf(buf, size, "experts of width %u (its expert GEMV needs a multiple of 4)", m->n_ff);
        return true;
    }
    for (size_t k = 0; k < rc->n_uses; k++)
        if (!cuda_type_ok(rc->uses[k].type)) {
            snprintf(buf, size,
                     "%" PRIu64 " tensor%s of type %s, e.g. %s (it computes with F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
                     "Q5_0, Q5_1, Q4_K, Q5_K and Q6_K)",
                     rc->uses[k].count, rc->uses[k].count == 1 ? "" : "s", memra_tensor_type_name(rc->uses[k].type),
                     rc->uses[k].names[0]);
            return true;
        }
    if (cuda_shape_refuses(rc->g, buf, size))
        return true;
    if (m->head_dim % 2 || m->head_dim > 1024 || m->n_head % m->n_head_kv) {
        snprintf(buf, size, "head_dim %" PRIu32 " with %" PRIu32 " heads and %" PRIu32 " kv heads", m->head_dim,
                 m->n_head, m->n_head_kv);
        return true;
    }
    return false;
}

/* The first thing that stops a run on the cpu backend (a --prompt run included), into buf;
 * false when nothing does. */
static bool run_check_stop(const run_check *rc, char *buf, size_t size) {
    if (!rc->model)
        snprintf(buf, size, "memra run would stop: %.900s", no_path(rc->model_err.msg, rc->path));
    else if (rc->first_unsupported)
        snprintf(buf, size,
                 "memra run would stop: tensor '%s' has type %s, which memra does not support (%" PRIu64 " of %" PRIu64
                 " tensors have types memra lacks)",
                 rc->first_unsupported->name, memra_tensor_type_name(rc->first_unsupported->type), rc->n_unsupported,
                 rc->n_tensors);
    else if (!rc->tok)
        snprintf(buf, size, "memra run --prompt would stop: %.900s", no_path(rc->tok_err.msg, rc->path));
    else
        return false;
    return true;
}

#define ROW "  %-18s"

static void print_types(const run_check *rc) {
    if (rc->n_unsupported == 0) {
        printf(ROW "ok: %" PRIu64 " tensor%s:", "tensor types:", rc->n_tensors, rc->n_tensors == 1 ? "" : "s");
        for (size_t k = 0; k < rc->n_uses; k++)
            printf("%s %s %" PRIu64, k ? "," : "", memra_tensor_type_name(rc->uses[k].type), rc->uses[k].count);
        putchar('\n');
        return;
    }
    printf(ROW "STOP: %" PRIu64 " of %" PRIu64 " tensors have types memra lacks:\n", "tensor types:", rc->n_unsupported,
           rc->n_tensors);
    for (size_t k = 0; k < rc->n_uses; k++) {
        const type_use *u = &rc->uses[k];
        if (memra_tensor_type_supported(u->type))
            continue;
        printf(ROW "  %s: %" PRIu64 " tensor%s: ", "", memra_tensor_type_name(u->type), u->count,
               u->count == 1 ? "" : "s");
        uint64_t shown = u->count < SHOW_NAMES ? u->count : SHOW_NAMES;
        for (uint64_t i = 0; i < shown; i++)
            printf("%s%s", i ? ", " : "", u->names[i]);
        if (u->count > shown)
            printf(", ... %" PRIu64 " more", u->count - shown);
        putchar('\n');
    }
}

static void print_can_it_run(const run_check *rc) {
    printf("\ncan it run? (what memra run would refuse; no backend is loaded)\n");
    if (rc->model)
        printf(ROW "ok: %s\n", "architecture:", rc->model->arch_name);
    else if (rc->arch_failed)
        printf(ROW "STOP: %s\n", "architecture:", no_path(rc->model_err.msg, rc->path));
    else { /* a known name: the description failed on something else (model, below) */
        const memra_gguf_value *a = memra_gguf_find(rc->g, "general.architecture");
        printf(ROW "ok: %.*s\n", "architecture:", (int)(a->v.str.len > 64 ? 64 : a->v.str.len), a->v.str.ptr);
    }
    if (rc->model)
        printf(ROW "ok: the hyperparameters read and every tensor bound in its shape\n", "model:");
    else if (rc->arch_failed)
        printf(ROW "not described (its architecture, above)\n", "model:");
    else
        printf(ROW "STOP: %s\n", "model:", no_path(rc->model_err.msg, rc->path));
    print_types(rc);
    if (rc->tok)
        printf(ROW "ok: %s, pre-tokenizer %s, %" PRIu32 " tokens\n", "tokenizer:", memra_tokenizer_kind(rc->tok),
               memra_tokenizer_pre(rc->tok), memra_tokenizer_n_tokens(rc->tok));
    else
        printf(ROW "STOP for --prompt and --chat (token ids still run): %s\n",
               "tokenizer:", no_path(rc->tok_err.msg, rc->path));
    if (!rc->tok)
        printf(ROW "STOP for --chat: no tokenizer (above)\n", "chat format:");
    else if (rc->chat)
        printf(ROW "ok: %s, from %s\n", "chat format:", memra_chat_format_name(rc->chat), rc->chat_source);
    else
        printf(ROW "STOP for --chat (%s): %s\n", "chat format:", rc->has_template ? "refused" : "none",
               no_path(rc->chat_err.msg, rc->path));
    char why[512];
    if (cpu_runs(rc))
        printf(ROW "cpu: runs it\n", "backends:");
    else
        printf(ROW "cpu: cannot: %s\n", "backends:", rc->model ? "tensor types (above)" : "no model (above)");
    if (cuda_refuses(rc, why, sizeof why))
        printf(ROW "cuda, cuda-graph: cannot: %s\n", "", why);
    else if (rc->model && rc->model->n_expert > 0)
        printf(ROW "cuda, cuda-graph: runs it (where built, on a GPU; its experts on ranks too: ep=N, tp=N)\n", "");
    else
        printf(ROW "cuda, cuda-graph: runs it (where built, on a GPU)\n", "");
    if (!cpu_runs(rc)) {
        printf(ROW "memra run stops:", "verdict:");
        const char *sep = " ";
        if (!rc->model) {
            printf("%s%s", sep, rc->arch_failed ? "architecture" : "model");
            sep = ", ";
        }
        if (rc->n_unsupported) {
            printf("%stensor types", sep);
            sep = ", ";
        }
        if (!rc->tok)
            printf("%stokenizer", sep);
        putchar('\n');
    } else if (!rc->tok)
        printf(ROW "runs on the cpu backend with token ids only (--tokens, --prompt-ids); --prompt and --chat stop\n",
               "verdict:");
    else
        printf(ROW "runs on the cpu backend: token ids, --prompt%s\n",
               "verdict:", rc->chat ? " and --chat" : " (not --chat)");
}

int cmd_inspect(int argc, char **argv) {
    const char *cmd = "inspect";
    cli_opt opts[] = {{"--arrays", NULL, true, NULL}, {"--check", NULL, false, NULL}, {"--tensors", NULL, false, NULL}};
    const char *pos[1];
    size_t n_pos;
    bool help;
    int rc = cli_parse(cmd, argc, argv, 1, opts, 3, pos, 1, &n_pos, help_text, &help);
    if (rc != CLI_EXIT_OK || help)
        return rc;
    if (n_pos != 1) {
        cli_error(cmd, "no file given: memra inspect FILE.gguf");
        return CLI_EXIT_USAGE;
    }
    uint32_t max_items = 8;
    const char *arrays = cli_get(opts, 2, "--arrays");
    if (arrays && !cli_u32(cmd, "--arrays", arrays, 0, 1000000, &max_items))
        return CLI_EXIT_USAGE;
    memra_error err = {0};
    memra_gguf *g;
    if (memra_check_regular_input(pos[0], "model file", &err) != MEMRA_OK) /* a FIFO never blocks */
        return cli_fail(cmd, &err);
    if (memra_gguf_open(pos[0], &g, &err) != MEMRA_OK)
        return cli_fail(cmd, &err);
    char buf[32];
    printf("file:        %s\n", memra_gguf_path(g));
    printf("gguf:        version %" PRIu32 ", alignment %" PRIu32 ", %s (%" PRIu64 " bytes), data at offset %" PRIu64
           "\n",
           memra_gguf_version(g), memra_gguf_alignment(g), cli_bytes(memra_gguf_file_size(g), buf, sizeof buf),
           memra_gguf_file_size(g), memra_gguf_data_offset(g));
    run_check check;
    run_check_gather(g, &check);
    print_can_it_run(&check);
    print_metadata(g, max_items);
    print_tensors(g, cli_get(opts, 3, "--tensors") != NULL);
    print_model(check.model, &check.model_err);
    rc = CLI_EXIT_OK;
    char why[MEMRA_ERROR_MSG_MAX];
    if (cli_get(opts, 2, "--check") && run_check_stop(&check, why, sizeof why)) {
        fflush(stdout);
        cli_error(cmd, "%s: %s", memra_gguf_path(g), why);
        rc = CLI_EXIT_ERROR;
    }
    run_check_free(&check);
    memra_gguf_close(g);
    return rc;
}
