/* test_gguf_malformed.c: the reader refuses malformed GGUF files, each with its own message, and
 * never reads outside the file (each file is copied into a buffer of exactly its size, so ASan
 * catches a read one byte past the end), never allocates by a count it has not bounded, and
 * never crashes on any prefix or any byte flip of a valid file. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_bytes.h"
#include "memra/gguf.h"
#include "memra/synth.h"
#include "test_files.h"

static const uint64_t ne_32x2[2] = {32, 2};

/* Opens b (copied into an exactly sized buffer) and expects MEMRA_E_FORMAT with `want` in the
 * message, which starts with the name. `label` names the case in a failure. */
static void expect_reject_as(const char *label, const gb_bytes *b, const char *want) {
    uint8_t *copy = malloc(b->n ? b->n : 1);
    if (b->n)
        memcpy(copy, b->p, b->n);
    memra_gguf *g = (memra_gguf *)1;
    memra_error e = {0};
    memra_status st = memra_gguf_open_memory(copy, b->n, "bad.gguf", &g, &e);
    cr_assert_eq(st, MEMRA_E_FORMAT, "%sstatus %s, message '%s'", label, memra_status_name(st), e.msg);
    cr_assert_null(g, "%sa handle on failure", label);
    cr_assert(strncmp(e.msg, "bad.gguf: ", 10) == 0, "%smessage '%s' does not start with the name", label, e.msg);
    cr_assert(strstr(e.msg, want), "%smessage '%s' lacks '%s'", label, e.msg, want);
    free(copy);
}

static void expect_reject(const gb_bytes *b, const char *want) { expect_reject_as("", b, want); }

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Opens b and expects success. */
static memra_gguf *expect_open(const gb_bytes *b) {
    memra_gguf *g = NULL;
    memra_error e = {0};
    cr_assert_eq(memra_gguf_open_memory(b->p, b->n, "good.gguf", &g, &e), MEMRA_OK, "%s", e.msg);
    return g;
}

/* A file with one tensor whose info the caller supplies, then padding and `data` bytes. */
static void one_tensor(gb_bytes *b, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset, size_t data) {
    gb_header(b, 3, 1, 0);
    gb_tensor_info(b, "t", n_dims, ne, type, offset);
    gb_pad(b, 32);
    gb_zeros(b, data);
}

/* ---- header ---- */

/* The header of a file of `version` with no tensors and no keys, cut to `cut` bytes. */
#define WHOLE SIZE_MAX
static const struct header_case {
    const char *name;
    uint32_t version;
    size_t cut; /* WHOLE: not cut */
    const char *want;
} header_cases[] = {
    {"an empty file", 3, 0, "truncated in the header (magic): need 4 bytes at offset 0, only 0 left"},
    {"a cut magic", 3, 2, "truncated in the header (magic)"},
    {"a cut version", 3, 5, "truncated in the header (version): need 4 bytes at offset 4, only 1 left"},
    {"a cut n_tensors", 3, 12, "truncated in the header (n_tensors): need 8 bytes at offset 8, only 4 left"},
    {"a cut n_kv", 2, 20, "truncated in the header (n_kv): need 8 bytes at offset 16, only 4 left"},
    {"version 1", 1, WHOLE, "GGUF version 1 (32-bit counts, 2023) is not supported, expected version 2 or 3"},
    {"version 4", 4, WHOLE, "header at offset 4: GGUF version 4, expected 2 or 3"},
    {"big-endian", 0x03000000u, WHOLE, "big-endian GGUF (version field 03000000) is not supported"},
};

Test(gguf_malformed, header_cut_or_of_a_version_refused) {
    for (size_t i = 0; i < N_OF(header_cases); i++) {
        const struct header_case *c = &header_cases[i];
        char label[64];
        snprintf(label, sizeof label, "%s: ", c->name);
        gb_bytes b = {0};
        gb_header(&b, c->version, 0, 0);
        if (c->cut != WHOLE)
            b.n = c->cut;
        expect_reject_as(label, &b, c->want);
        gb_free(&b);
    }
}

/* ---- metadata values ---- */

/* One key of `type` whose value is the n raw bytes given (a file of one key and no tensors). */
static const struct value_case {
    const char *key;
    uint32_t type;
    const char *bytes;
    size_t n;
    const char *want;
} value_cases[] = {
    {"k", 13, "\0\0\0\0\0\0\0\0", 8, "metadata key 'k': unknown value type 13 at offset 33, expected 0..12"},
    /* the n_kv bound passes: 1 pair needs 14 bytes, and there are 9 + 4 + 3 = 16 */
    {"k", MEMRA_GGUF_UINT64, "\1\2\3", 3,
     "truncated in the uint64 value of 'k': need 8 bytes at offset 37, only 3 left"},
    {"rope.freq_base", MEMRA_GGUF_FLOAT64, "\0\0\0\0", 4,
     "truncated in the float64 value of 'rope.freq_base': need 8 bytes"},
    /* length 2^40, then 3 bytes */
    {"name", MEMRA_GGUF_STRING, "\0\0\0\0\0\1\0\0abc", 11,
     "the string value of 'name': string length 1099511627776 at offset 40 runs past the end of the file (3 bytes "
     "left)"},
    {"name", MEMRA_GGUF_STRING, "\3\0\0\0", 4,
     "truncated in the string value of 'name': need 8 bytes at offset 40, only 4 left"},
    {"flag", MEMRA_GGUF_BOOL, "\2", 1, "bool value of 'flag' at offset 40 is 2, expected 0 or 1"},
};

Test(gguf_malformed, value_of_an_unknown_type_cut_or_out_of_range) {
    for (size_t i = 0; i < N_OF(value_cases); i++) {
        const struct value_case *c = &value_cases[i];
        char label[96];
        snprintf(label, sizeof label, "key '%s' of type %u: ", c->key, c->type);
        gb_bytes b = {0};
        gb_header(&b, 3, 0, 1);
        gb_key(&b, c->key, c->type);
        gb_put(&b, c->bytes, c->n);
        expect_reject_as(label, &b, c->want);
        gb_free(&b);
    }
}

/* ---- arrays ---- */

static void nested_arrays(gb_bytes *b, unsigned depth) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "deep", MEMRA_GGUF_ARRAY);
    for (unsigned d = 1; d < depth; d++) { /* depth - 1 arrays of one array */
        gb_u32(b, MEMRA_GGUF_ARRAY);
        gb_u64(b, 1);
    }
    gb_u32(b, MEMRA_GGUF_UINT8); /* the innermost: [42] */
    gb_u64(b, 1);
    gb_u8(b, 42);
}

Test(gguf_malformed, arrays_nested_too_deep) {
    gb_bytes b = {0};
    nested_arrays(&b, 8);
    memra_gguf *g = expect_open(&b); /* 8 levels are fine */
    const memra_gguf_value *v = memra_gguf_find(g, "deep");
    for (int d = 1; d < 8; d++)
        v = &v->v.arr.items[0];
    cr_assert(v->v.arr.elem_type == MEMRA_GGUF_UINT8 && ((const uint8_t *)v->v.arr.data)[0] == 42);
    memra_gguf_close(g);
    gb_free(&b);
    nested_arrays(&b, 9);
    expect_reject(&b, "arrays of 'deep' nest deeper than 8 levels at offset 124");
    gb_free(&b);
    /* 100000 levels would exhaust the stack of a parser that recursed without a bound. */
    nested_arrays(&b, 100000);
    expect_reject(&b, "nest deeper than 8 levels");
    gb_free(&b);
}

/* ---- general.alignment ---- */

static void alignment_file(gb_bytes *b, uint32_t type, uint64_t value, size_t value_bytes) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "general.alignment", type);
    gb_put(b, &value, value_bytes);
}

static const struct alignment_case {
    const char *name;
    uint32_t type;
    uint64_t value;
    size_t value_bytes;
    const char *want;
} alignment_cases[] = {
    {"uint64", MEMRA_GGUF_UINT64, 32, 8, "metadata 'general.alignment' has type uint64, expected uint32"},
    {"zero", MEMRA_GGUF_UINT32, 0, 4, "metadata 'general.alignment' is 0, expected a nonzero power of two"},
    {"48", MEMRA_GGUF_UINT32, 48, 4, "metadata 'general.alignment' is 48, expected a nonzero power of two"},
};

Test(gguf_malformed, alignment_of_a_wrong_type_or_value) {
    for (size_t i = 0; i < N_OF(alignment_cases); i++) {
        const struct alignment_case *c = &alignment_cases[i];
        char label[64];
        snprintf(label, sizeof label, "alignment %s: ", c->name);
        gb_bytes b = {0};
        alignment_file(&b, c->type, c->value, c->value_bytes);
        expect_reject_as(label, &b, c->want);
        gb_free(&b);
    }
}

/* ---- tensor infos ---- */

/* One tensor info, then padding and `data` zero bytes (one_tensor). */
static const struct tensor_case {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[5];
    uint32_t type;
    size_t data;
    const char *want;
} tensor_cases[] = {
    {"n_dims 0", 0, {32, 2}, MEMRA_TYPE_F32, 256, "tensor 't': n_dims 0 at offset 33, expected 1..4"},
    {"n_dims 5", 5, {32, 1, 1, 1, 1}, MEMRA_TYPE_F32, 128, "tensor 't': n_dims 5 at offset 33, expected 1..4"},
    {"a zero dimension",
     2,
     {32, 0},
     MEMRA_TYPE_F32,
     0,
     "tensor 't': dimension 1 is 0 at offset 45, expected 1..2^63-1"},
    {"a dimension above int64",
     1,
     {1ull << 63},
     MEMRA_TYPE_I8,
     0,
     "tensor 't': dimension 0 is 9223372036854775808 at offset 37, expected 1..2^63-1"},
    /* 2^32 * 2^32 = 2^64: a product that wraps to zero. */
    {"dimensions whose product overflows",
     2,
     {1ull << 32, 1ull << 32},
     MEMRA_TYPE_I8,
     0,
     "tensor 't': the product of its dimensions overflows 64 bits (at dimension 1, offset 45)"},
    /* 2^62 F32 elements: 2^64 bytes, which a naive n * 4 makes 0 (and so "fits" any file). */
    {"a byte size that wraps to zero",
     1,
     {1ull << 62},
     MEMRA_TYPE_F32,
     0,
     "tensor 't': its size in bytes (4611686018427387904 elements of F32) overflows 64 bits"},
    {"tensor type 4", 2, {32, 2}, 4, 256, "tensor 't': unknown tensor type 4 at offset 53"},
    {"tensor type 0xdeadbeef", 2, {32, 2}, 0xdeadbeef, 256, "unknown tensor type 3735928559"},
    {"columns not a multiple of the block",
     2,
     {33, 2},
     MEMRA_TYPE_Q8_0,
     256,
     "tensor 't': 33 columns are not a multiple of the Q8_0 block of 32"},
};

Test(gguf_malformed, tensor_info_of_a_bad_shape_or_type) {
    for (size_t i = 0; i < N_OF(tensor_cases); i++) {
        const struct tensor_case *c = &tensor_cases[i];
        char label[64];
        snprintf(label, sizeof label, "%s: ", c->name);
        gb_bytes b = {0};
        one_tensor(&b, c->n_dims, c->ne, c->type, 0, c->data);
        expect_reject_as(label, &b, c->want);
        gb_free(&b);
    }
}

/* ---- one table: how each malformed file is made, and what the reader must say ---- */

/* Each builder makes the whole file of one case into b; a later case of the same name starts from
 * the file of the one before it and cuts or changes it. */
static void build_wrong_magic(gb_bytes *b) {
    gb_put(b, "GGML", 4);
    gb_u32(b, 3);
    gb_u64(b, 0);
    gb_u64(b, 0);
}

static void build_n_kv_2_pow_62_without_allocating(gb_bytes *b) {
    gb_header(b, 3, 0, 1ull << 62);
    gb_key(b, "k", MEMRA_GGUF_UINT8);
    gb_u8(b, 1);
}

static void build_n_kv_2_pow_24_under_memory_cap(gb_bytes *b) {
    gb_header(b, 3, 0, 1ull << 24);
    gb_zeros(b, 1000);
}

static void build_n_tensors_2_pow_62_without_allocating(gb_bytes *b) {
    gb_header(b, 3, 1ull << 62, 0);
    gb_zeros(b, 64);
}

static void build_n_tensors_2_pow_24_under_memory_cap(gb_bytes *b) {
    gb_header(b, 3, 1ull << 24, 1);
    gb_key(b, "k", MEMRA_GGUF_UINT32);
    gb_u32(b, 1);
    gb_zeros(b, 4096);
}

static void build_string_array_count_2_pow_24_under_memory_cap(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "tokens", MEMRA_GGUF_ARRAY);
    gb_u32(b, MEMRA_GGUF_STRING);
    gb_u64(b, 1ull << 24);
    gb_str(b, "a");
}

static void build_array_of_arrays_count_2_pow_62(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "a", MEMRA_GGUF_ARRAY);
    gb_u32(b, MEMRA_GGUF_ARRAY);
    gb_u64(b, 1ull << 62);
    gb_zeros(b, 24);
}

static void build_scalar_array_bytes_overflow(gb_bytes *b) {
    /* 2^62 uint64 elements: 2^65 bytes, which wraps a naive count * 8 to zero. */
    gb_header(b, 3, 0, 1);
    gb_key(b, "a", MEMRA_GGUF_ARRAY);
    gb_u32(b, MEMRA_GGUF_UINT64);
    gb_u64(b, 1ull << 62);
}

static void build_truncated_key_length_1(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_zeros(b, 14); /* room for n_kv, then cut the key length */
    b->n = 24 + 5;
}

static void build_truncated_key_length_2(gb_bytes *b) {
    build_truncated_key_length_1(b);
    b->n = 24 + 14;
    memset(b->p + 24, 0xff, 8); /* key length 2^64-1: pos + len would wrap */
}

static void build_truncated_in_second_key(gb_bytes *b) {
    gb_header(b, 3, 0, 2);
    gb_key(b, "first", MEMRA_GGUF_UINT8);
    gb_u8(b, 1);
    gb_u64(b, 6); /* key #1 length, then only part of it */
    gb_put(b, "sec", 3);
    gb_zeros(b, 11 - 3); /* keep n_kv plausible: the file is cut inside the key bytes */
    b->n -= 8;
}

static void build_key_length_past_end(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_u64(b, 1000);
    gb_put(b, "key", 3);
    gb_zeros(b, 20);
}

static void build_empty_key(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "", MEMRA_GGUF_UINT32);
    gb_u32(b, 1);
    gb_zeros(b, 2);
}

static void build_key_with_nul(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_u64(b, 3);
    gb_put(b, "a\0b", 3);
    gb_u32(b, MEMRA_GGUF_UINT32);
    gb_u32(b, 1);
}

static void build_key_with_escape_sequence(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_u64(b, 4);
    gb_put(b, "a\x1b[2J", 4); /* an ANSI "clear screen" would reach the terminal */
    gb_u32(b, MEMRA_GGUF_UINT32);
    gb_u32(b, 1);
}

static void build_tensor_name_with_delete_byte(gb_bytes *b) {
    one_tensor(b, 2, ne_32x2, MEMRA_TYPE_F32, 0, 256);
    b->p[32] = 0x7f;
}

static void build_duplicate_key(gb_bytes *b) {
    gb_header(b, 3, 0, 3);
    gb_key(b, "general.name", MEMRA_GGUF_STRING);
    gb_str(b, "x");
    gb_key(b, "other", MEMRA_GGUF_UINT8);
    gb_u8(b, 1);
    gb_key(b, "general.name", MEMRA_GGUF_STRING);
    gb_str(b, "y");
}

static void build_truncated_value_type(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "general.architecture");
    gb_zeros(b, 2);
}

static void build_truncated_array_header(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "a", MEMRA_GGUF_ARRAY);
    gb_u32(b, MEMRA_GGUF_INT32);
    gb_u32(b, 0);
}

static void build_array_unknown_element_type(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "a", MEMRA_GGUF_ARRAY);
    gb_u32(b, 99);
    gb_u64(b, 1);
    gb_u32(b, 0);
}

static void build_array_count_past_end(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "a", MEMRA_GGUF_ARRAY);
    gb_u32(b, MEMRA_GGUF_UINT32);
    gb_u64(b, 1000);
    gb_zeros(b, 8);
}

static void build_array_bool_element_not_0_or_1(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "a", MEMRA_GGUF_ARRAY);
    gb_u32(b, MEMRA_GGUF_BOOL);
    gb_u64(b, 3);
    gb_put(b, "\1\0\7", 3);
}

static void build_string_element_past_end(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "tokenizer.ggml.tokens", MEMRA_GGUF_ARRAY);
    gb_u32(b, MEMRA_GGUF_STRING);
    gb_u64(b, 2);
    gb_str(b, "ok");
    gb_u64(b, 50);
    gb_put(b, "short", 5);
}

static void build_truncated_inner_array(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "a", MEMRA_GGUF_ARRAY);
    gb_u32(b, MEMRA_GGUF_ARRAY);
    gb_u64(b, 2);
    gb_u32(b, MEMRA_GGUF_UINT8); /* inner #0: 10 bytes, so two inner arrays pass the count bound */
    gb_u64(b, 10);
    gb_zeros(b, 10);
    gb_u32(b, MEMRA_GGUF_UINT8); /* inner #1: cut in its count */
    gb_u32(b, 1);
}

static void build_alignment_string(gb_bytes *b) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "general.alignment", MEMRA_GGUF_STRING);
    gb_str(b, "32");
}

static void build_truncated_tensor_name_1(gb_bytes *b) {
    gb_header(b, 3, 1, 0);
    gb_u64(b, 40); /* a 40-byte name, cut after 10 */
    gb_put(b, "blk.0.attn", 10);
    gb_zeros(b, 23);
}

static void build_truncated_tensor_name_2(gb_bytes *b) {
    build_truncated_tensor_name_1(b);
    b->n = 24 + 4; /* cut in the name length: fewer bytes than any tensor info */
}

static void build_tensor_name_empty(gb_bytes *b) {
    one_tensor(b, 2, ne_32x2, MEMRA_TYPE_F32, 0, 256);
    memset(b->p + 24, 0, 8); /* name length 0; the old name byte becomes part of n_dims */
}

static void build_tensor_name_with_nul(gb_bytes *b) {
    one_tensor(b, 2, ne_32x2, MEMRA_TYPE_F32, 0, 256);
    b->p[32] = '\0';
}

static void build_truncated_in_dims(gb_bytes *b) {
    gb_header(b, 3, 1, 0);
    gb_str(b, "t");
    gb_u32(b, 4);
    gb_u64(b, 32);
    gb_u64(b, 2);
    gb_u32(b, 0);
}

static void build_truncated_in_type_and_offset_1(gb_bytes *b) {
    /* Four dimensions: the info is long enough that a cut in its type or offset passes the
     * count bound and is found by the field read. Type at 69, offset at 73, end at 81. */
    uint64_t ne[4] = {32, 1, 1, 1};
    gb_header(b, 3, 1, 0);
    gb_tensor_info(b, "t", 4, ne, MEMRA_TYPE_F32, 0);
    b->n = 71;
}

static void build_truncated_in_type_and_offset_2(gb_bytes *b) {
    build_truncated_in_type_and_offset_1(b);
    b->n = 78;
}

static void build_duplicate_tensor_name(gb_bytes *b) {
    gb_header(b, 3, 2, 0);
    gb_tensor_info(b, "blk.0.attn_q.weight", 2, ne_32x2, MEMRA_TYPE_F32, 0);
    gb_tensor_info(b, "blk.0.attn_q.weight", 2, ne_32x2, MEMRA_TYPE_F32, 256);
    gb_pad(b, 32);
    gb_zeros(b, 512);
}

static void build_truncated_padding(gb_bytes *b) {
    gb_header(b, 3, 1, 0);
    gb_tensor_info(b, "t", 2, ne_32x2, MEMRA_TYPE_F32, 0); /* ends at 65: 31 bytes of padding to 96 */
    gb_zeros(b, 10);
}

static void build_truncated_data(gb_bytes *b) {
    valid_one_tensor(b);
    b->n -= 1;
}

static void build_misaligned_tensor_data(gb_bytes *b) { one_tensor(b, 2, ne_32x2, MEMRA_TYPE_F32, 4, 512); }

static void build_misaligned_under_custom_alignment(gb_bytes *b) {
    gb_header(b, 3, 1, 1);
    gb_key(b, "general.alignment", MEMRA_GGUF_UINT32);
    gb_u32(b, 256);
    gb_tensor_info(b, "t", 2, ne_32x2, MEMRA_TYPE_F32, 32);
    gb_pad(b, 256);
    gb_zeros(b, 512);
}

static void build_offset_overflows(gb_bytes *b) {
    /* offset 2^64 - 32: aligned, and offset + size wraps around to a small number. */
    one_tensor(b, 2, ne_32x2, MEMRA_TYPE_F32, UINT64_MAX - 31, 256);
}

static void build_overlapping_tensors(gb_bytes *b) {
    gb_header(b, 3, 2, 0);
    gb_tensor_info(b, "a", 2, ne_32x2, MEMRA_TYPE_F32, 0);
    gb_tensor_info(b, "b", 2, ne_32x2, MEMRA_TYPE_F32, 128);
    gb_pad(b, 32);
    gb_zeros(b, 512);
}

/* [0,32) [32,64) [64,320): disjoint, then the same three tensors overlapping in another order */
static void build_overlap_found_whatever_the_info_order_1(gb_bytes *b) {
    uint64_t ne1[1] = {8};
    gb_header(b, 3, 3, 0);
    gb_tensor_info(b, "c", 1, ne1, MEMRA_TYPE_F32, 32);
    gb_tensor_info(b, "a", 2, ne_32x2, MEMRA_TYPE_F32, 64);
    gb_tensor_info(b, "b", 1, ne1, MEMRA_TYPE_F32, 0);
    gb_pad(b, 32);
    gb_zeros(b, 320);
}

static void build_overlap_found_whatever_the_info_order_2(gb_bytes *b) {
    uint64_t ne1[1] = {8};
    gb_header(b, 3, 3, 0);
    gb_tensor_info(b, "c", 1, ne1, MEMRA_TYPE_F32, 256);
    gb_tensor_info(b, "a", 2, ne_32x2, MEMRA_TYPE_F32, 0);
    gb_tensor_info(b, "b", 1, ne1, MEMRA_TYPE_F32, 32);
    gb_pad(b, 32);
    gb_zeros(b, 512);
}

/* the control: the same file with zero padding opens */
static void build_nonzero_padding_before_data_1(gb_bytes *b) { valid_one_tensor(b); }

static void build_nonzero_padding_before_data_2(gb_bytes *b) {
    build_nonzero_padding_before_data_1(b);
    size_t at = 8 + 8 + 8 + (8 + 1 + 4 + 4) + (8 + 1 + 4 + 2 * 8 + 4 + 8); /* header, kv, tensor info */
    cr_assert(at < b->n - 32 * 2 * 4 && at % 32 != 0, "the padding starts at %zu", at);
    b->p[at] = 0x5a;
}

static void build_slack_after_the_last_tensor_1(gb_bytes *b) {
    valid_one_tensor(b);
    gb_zeros(b, 31); /* less than the alignment: padding a writer may leave */
}

static void build_slack_after_the_last_tensor_2(gb_bytes *b) {
    build_slack_after_the_last_tensor_1(b);
    gb_zeros(b, 1); /* now a whole alignment unit that no tensor accounts for */
}

static void build_slack_after_the_last_tensor_3(gb_bytes *b) { build_slack_after_the_last_tensor_2(b); }

static void build_n_tensors_edited_down(gb_bytes *b) {
    /* Two tensors, then n_tensors edited to 1 and the second info dropped: the second tensor's
     * data is left in the file, and read as one tensor the file would decode as another model. */
    gb_header(b, 3, 1, 0);
    gb_tensor_info(b, "a", 2, ne_32x2, MEMRA_TYPE_F32, 0);
    gb_pad(b, 32);
    gb_zeros(b, 256 + 256);
}

static void build_gap_between_tensors(gb_bytes *b) {
    uint64_t ne1[1] = {8};
    gb_header(b, 3, 2, 0);
    gb_tensor_info(b, "a", 1, ne1, MEMRA_TYPE_F32, 0);
    gb_tensor_info(b, "b", 1, ne1, MEMRA_TYPE_F32, 64);
    gb_pad(b, 32);
    gb_zeros(b, 96);
}

static void build_nonzero_padding_between_tensors_1(gb_bytes *b) {
    uint64_t ne1[1] = {4}; /* 16 bytes, padded to 32 */
    gb_header(b, 3, 2, 0);
    gb_tensor_info(b, "a", 1, ne1, MEMRA_TYPE_F32, 0);
    gb_tensor_info(b, "b", 1, ne1, MEMRA_TYPE_F32, 32);
    gb_pad(b, 32);
    gb_zeros(b, 48); /* the data section: its last 48 bytes */
}

static void build_nonzero_padding_between_tensors_2(gb_bytes *b) {
    build_nonzero_padding_between_tensors_1(b);
    b->p[b->n - 48 + 20] = 1;
}

static void build_nonzero_padding_between_tensors_3(gb_bytes *b) {
    build_nonzero_padding_between_tensors_2(b);
    b->p[b->n - 48 + 20] = 0;
    b->p[b->n - 48 + 10] = 1; /* inside tensor 'a': data, not padding */
}

/* A case: its builder, whether it runs under the memory cap (an allocation by an unbounded count
 * would fail as NOMEM, not the FORMAT expected), and the fragment its message must hold; a NULL
 * fragment: the control, a file that must open. */
typedef struct malformed_case {
    const char *name;
    void (*build)(gb_bytes *b);
    bool cap;
    const char *want;
} malformed_case;

static const malformed_case malformed_cases[] = {
    {"wrong_magic", build_wrong_magic, false, "not a GGUF file: magic at offset 0 is 47 47 4d 4c, expected \"GGUF\""},
    {"n_kv_2_pow_62_without_allocating", build_n_kv_2_pow_62_without_allocating, false,
     "header at offset 16: n_kv 4611686018427387904 key-value pairs cannot fit in the 14 bytes left"},
    {"n_kv_2_pow_24_under_memory_cap", build_n_kv_2_pow_24_under_memory_cap, true,
     "n_kv 16777216 key-value pairs cannot fit in the 1000 bytes left (at least 14 bytes each)"},
    {"n_tensors_2_pow_62_without_allocating", build_n_tensors_2_pow_62_without_allocating, false,
     "header at offset 8: n_tensors 4611686018427387904 tensor infos cannot fit in the 64 bytes left at offset 24"},
    {"n_tensors_2_pow_24_under_memory_cap", build_n_tensors_2_pow_24_under_memory_cap, true,
     "n_tensors 16777216 tensor infos cannot fit in the 4096 bytes left at offset 41"},
    {"string_array_count_2_pow_24_under_memory_cap", build_string_array_count_2_pow_24_under_memory_cap, true,
     "array of 'tokens' at offset 42: count 16777216 of string runs past the end of the file (9 bytes "
     "left, at least 8 per element)"},
    {"array_of_arrays_count_2_pow_62", build_array_of_arrays_count_2_pow_62, false,
     "count 4611686018427387904 of array runs past the end of the file (24 bytes left, at least 12 per element)"},
    {"scalar_array_bytes_overflow", build_scalar_array_bytes_overflow, false,
     "count 4611686018427387904 of uint64 runs past the end of the file (0 bytes left"},
    {"truncated_key_length (1)", build_truncated_key_length_1, false,
     "n_kv 1 key-value pairs cannot fit in the 5 bytes left"},
    {"truncated_key_length (2)", build_truncated_key_length_2, false,
     "metadata key #0: string length 18446744073709551615 at offset 24 runs past the end of the file "
     "(6 bytes left)"},
    {"truncated_in_second_key", build_truncated_in_second_key, false,
     "metadata key #1: string length 6 at offset 42 runs past the end of the file (3 bytes left)"},
    {"key_length_past_end", build_key_length_past_end, false,
     "metadata key #0: string length 1000 at offset 24 runs past the end of the file (23 bytes left)"},
    {"empty_key", build_empty_key, false, "metadata key #0 at offset 24 is empty, expected a nonempty name"},
    {"key_with_nul", build_key_with_nul, false, "metadata key #0 at offset 24 contains a NUL byte"},
    {"key_with_escape_sequence", build_key_with_escape_sequence, false,
     "metadata key #0 at offset 24 contains the control byte 0x1b at index 1"},
    {"tensor_name_with_delete_byte", build_tensor_name_with_delete_byte, false,
     "the name of tensor info #0 at offset 24 contains the control byte 0x7f at index 0"},
    {"duplicate_key", build_duplicate_key, false, "metadata key #2 'general.name' at offset 75 duplicates key #0"},
    {"truncated_value_type", build_truncated_value_type, false,
     "truncated in the value type of metadata key 'general.architecture': need 4 bytes at offset 52, only 2 left"},
    {"truncated_array_header", build_truncated_array_header, false,
     "truncated in the array header of 'a': need 8 bytes at offset 41, only 4 left"},
    {"array_unknown_element_type", build_array_unknown_element_type, false,
     "array of 'a' at offset 37 has unknown element type 99, expected 0..12"},
    {"array_count_past_end", build_array_count_past_end, false,
     "array of 'a' at offset 37: count 1000 of uint32 runs past the end of the file (8 bytes left, at "
     "least 4 per element)"},
    {"array_bool_element_not_0_or_1", build_array_bool_element_not_0_or_1, false,
     "bool element 2 of 'a' at offset 51 is 7, expected 0 or 1"},
    {"string_element_past_end", build_string_element_past_end, false,
     "string element 1 of 'tokenizer.ggml.tokens': string length 50 at offset 79 runs past the end of "
     "the file (5 bytes left)"},
    {"truncated_inner_array", build_truncated_inner_array, false,
     "truncated in the array header of 'a': need 8 bytes at offset 75, only 4 left"},
    {"alignment_string", build_alignment_string, false,
     "metadata 'general.alignment' has type string, expected uint32"},
    {"truncated_tensor_name (1)", build_truncated_tensor_name_1, false,
     "the name of tensor info #0: string length 40 at offset 24 runs past the end of the file (33 bytes left)"},
    {"truncated_tensor_name (2)", build_truncated_tensor_name_2, false,
     "n_tensors 1 tensor infos cannot fit in the 4 bytes left at offset 24"},
    {"tensor_name_empty", build_tensor_name_empty, false,
     "the name of tensor info #0 at offset 24 is empty, expected a nonempty name"},
    {"tensor_name_with_nul", build_tensor_name_with_nul, false,
     "the name of tensor info #0 at offset 24 contains a NUL byte"},
    {"truncated_in_dims", build_truncated_in_dims, false,
     "truncated in tensor info 't': need 8 bytes at offset 53, only 4 left"},
    {"truncated_in_type_and_offset (1)", build_truncated_in_type_and_offset_1, false,
     "truncated in tensor info 't': need 4 bytes at offset 69, only 2 left"},
    {"truncated_in_type_and_offset (2)", build_truncated_in_type_and_offset_2, false,
     "truncated in tensor info 't': need 8 bytes at offset 73, only 5 left"},
    {"duplicate_tensor_name", build_duplicate_tensor_name, false,
     "tensor info #1 at offset 83: duplicate tensor name 'blk.0.attn_q.weight' (also tensor info #0)"},
    {"truncated_padding", build_truncated_padding, false,
     "truncated in the padding before the data section: need 31 bytes at offset 65 to reach alignment "
     "32, only 10 left"},
    {"truncated_data", build_truncated_data, false,
     "tensor 't': data [0, +256) at data offset 0 runs past the end of the file (data section has 255 "
     "bytes from file offset 96)"},
    {"misaligned_tensor_data", build_misaligned_tensor_data, false,
     "tensor 't': data offset 4 is not a multiple of the alignment 32"},
    {"misaligned_under_custom_alignment", build_misaligned_under_custom_alignment, false,
     "tensor 't': data offset 32 is not a multiple of the alignment 256"},
    {"offset_overflows", build_offset_overflows, false,
     "tensor 't': data [18446744073709551584, +256) at data offset 18446744073709551584 runs past the "
     "end of the file"},
    {"overlapping_tensors", build_overlapping_tensors, false,
     "tensors 'a' (data [0, 256)) and 'b' (data [128, 384)) overlap"},
    {"overlap_found_whatever_the_info_order (1)", build_overlap_found_whatever_the_info_order_1, false, NULL},
    {"overlap_found_whatever_the_info_order (2)", build_overlap_found_whatever_the_info_order_2, false,
     "tensors 'a' (data [0, 256)) and 'b' (data [32, 64)) overlap"},
    {"nonzero_padding_before_data (1)", build_nonzero_padding_before_data_1, false, NULL},
    {"nonzero_padding_before_data (2)", build_nonzero_padding_before_data_2, false,
     "the padding before the data section: byte at offset"},
    {"slack_after_the_last_tensor (1)", build_slack_after_the_last_tensor_1, false, NULL},
    {"slack_after_the_last_tensor (2)", build_slack_after_the_last_tensor_2, false,
     "32 bytes of the data section at file offset"},
    {"slack_after_the_last_tensor (3)", build_slack_after_the_last_tensor_3, false, "follow the last tensor"},
    {"n_tensors_edited_down", build_n_tensors_edited_down, false, "256 bytes of the data section"},
    {"gap_between_tensors", build_gap_between_tensors, false, "lie before tensor 'b' that no tensor accounts for"},
    {"nonzero_padding_between_tensors (1)", build_nonzero_padding_between_tensors_1, false, NULL},
    {"nonzero_padding_between_tensors (2)", build_nonzero_padding_between_tensors_2, false,
     "padding in the data section: byte at offset"},
    {"nonzero_padding_between_tensors (3)", build_nonzero_padding_between_tensors_3, false, NULL},
};

/* One process a case (Criterion runs each parameter in its own), so a case's memory cap stays
 * its own. The parameter is the case's index: Criterion copies it into a process of its own,
 * where the pointers of this one's table mean nothing. */
ParameterizedTestParameters(gguf_malformed, refused_with_its_message) {
    static size_t index[N_OF(malformed_cases)];
    for (size_t i = 0; i < N_OF(malformed_cases); i++)
        index[i] = i;
    return cr_make_param_array(size_t, index, N_OF(malformed_cases));
}

ParameterizedTest(const size_t *i, gguf_malformed, refused_with_its_message) {
    cr_assert_lt(*i, N_OF(malformed_cases));
    const malformed_case *c = &malformed_cases[*i];
    if (c->cap)
        cap_memory();
    char label[96];
    snprintf(label, sizeof label, "%s: ", c->name);
    gb_bytes b = {0};
    c->build(&b);
    if (c->want)
        expect_reject_as(label, &b, c->want);
    else
        memra_gguf_close(expect_open(&b));
    gb_free(&b);
}
