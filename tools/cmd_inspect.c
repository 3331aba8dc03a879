/* cmd_inspect.c: `memra inspect FILE.gguf`: the header, the metadata (long arrays abbreviated),
 * the tensor table and the model description of a GGUF file, or why there is none. */
#include <inttypes.h>
#include <string.h>

#include "cli.h"

static const char help_text[] =
    "usage: memra inspect FILE.gguf [--arrays N]\n"
    "\n"
    "Prints the GGUF header, every metadata key (arrays show their first N elements, default 8),\n"
    "the tensors with their types, shapes, sizes and offsets, the total tensor bytes, and the\n"
    "model description memra reads from the file (architecture and hyperparameters), or the\n"
    "reason it cannot describe one. Exits 3 when the file cannot be read as GGUF.\n";

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

static void print_tensors(const memra_gguf *g) {
    uint64_t n = memra_gguf_tensor_count(g), total = 0;
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

/* Every matrix of the model that memra cannot compute with, by the message memra gives on use. */
static void print_type_support(const memra_model *m) {
    memra_error err = {0};
    uint32_t unsupported = 0;
    const memra_weight *first = NULL;
    const memra_weight *global[] = {&m->tok_embd, &m->output};
    for (size_t i = 0; i < 2; i++)
        if (memra_weight_check_type(global[i], &err) != MEMRA_OK && !unsupported++)
            first = global[i];
    for (uint32_t l = 0; l < m->n_layer; l++) {
        const memra_layer *ly = &m->layers[l];
        const memra_weight *ws[] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (memra_weight_check_type(ws[i], &err) != MEMRA_OK && !unsupported++)
                first = ws[i];
    }
    if (!unsupported) {
        printf("  weight types:     all supported (F32, F16, BF16, Q8_0)\n");
        return;
    }
    memra_weight_check_type(first, &err);
    printf("  weight types:     %u matri%s memra cannot compute with, e.g. %s\n", unsupported,
           unsupported == 1 ? "x" : "ces", err.msg);
}

static void print_model(const memra_gguf *g) {
    memra_error err = {0};
    memra_model *m;
    printf("\nmodel:\n");
    if (memra_model_describe(g, &m, &err) != MEMRA_OK) {
        printf("  no model description: %s\n", err.msg);
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
    print_type_support(m);
    memra_model_free(m);
}

int cmd_inspect(int argc, char **argv) {
    const char *cmd = "inspect";
    cli_opt opts[] = {{"--arrays", NULL, true, NULL}};
    const char *pos[1];
    size_t n_pos;
    bool help;
    int rc = cli_parse(cmd, argc, argv, 1, opts, 1, pos, 1, &n_pos, help_text, &help);
    if (rc != CLI_EXIT_OK || help)
        return rc;
    if (n_pos != 1) {
        cli_error(cmd, "no file given: memra inspect FILE.gguf");
        return CLI_EXIT_USAGE;
    }
    uint32_t max_items = 8;
    const char *arrays = cli_get(opts, 1, "--arrays");
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
    print_metadata(g, max_items);
    print_tensors(g);
    print_model(g);
    memra_gguf_close(g);
    return CLI_EXIT_OK;
}
