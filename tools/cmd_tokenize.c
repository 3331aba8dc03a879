/* cmd_tokenize.c: `memra tokenize --model F [--specials] [--ids] [--no-bos] TEXT`: the token ids of
 * a text under the tokenizer the GGUF file describes, one per line with the piece each stands for. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "memra/tokenizer.h"

int cmd_tokenize(int argc, char **argv);

static const char help_text[] =
    "usage: memra tokenize --model F.gguf [--specials] [--ids] [--no-bos] TEXT|-\n"
    "\n"
    "Tokenizes TEXT with the tokenizer of the model file (tokenizer.ggml.*: gpt2 byte-level BPE or\n"
    "llama SentencePiece-style) and prints one line per token: the id, a tab, and the bytes the\n"
    "token stands for as a quoted string (\\n, \\t, \\r, \\\", \\\\ and \\xNN for control bytes and\n"
    "bytes of no valid UTF-8 sequence).\n"
    "  --model F.gguf    the model file\n"
    "  --specials        match control tokens written in the text (\"<|im_start|>\"); user-defined\n"
    "                    tokens are always matched\n"
    "  --ids             print the ids only, one per line\n"
    "  --no-bos          do not prepend the bos token the file asks for (add_bos_token)\n"
    "TEXT '-' reads the text from stdin: every byte of it, a final newline included (at most\n"
    "64 MiB).\n"
    "Exit codes: 0 ok, 2 usage, 3 a file that cannot be read or whose tokenizer memra lacks.\n";

#define TOKENIZE_STDIN_MAX (64u << 20)

/* All of stdin into *out (NUL-terminated, *len bytes without it); CLI_EXIT_ERROR after saying why. */
static int read_stdin(const char *cmd, char **out, size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            cli_error(cmd, "stdin: out of memory");
            return CLI_EXIT_ERROR;
        }
        if (n + 1 >= cap) {
            if (cap > TOKENIZE_STDIN_MAX) {
                cli_error(cmd, "stdin: more than %u MiB of text: give a shorter text", TOKENIZE_STDIN_MAX >> 20);
                free(buf);
                return CLI_EXIT_ERROR;
            }
            char *grown = realloc(buf, cap * 2);
            if (!grown)
                free(buf);
            buf = grown;
            cap *= 2;
            continue;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, stdin);
        n += got;
        if (n > TOKENIZE_STDIN_MAX)
            break; /* refused below, without reading the rest */
        if (got == 0) {
            if (ferror(stdin)) {
                cli_error(cmd, "stdin: read failed: %s", strerror(errno));
                free(buf);
                return CLI_EXIT_ERROR;
            }
            break;
        }
    }
    if (n > TOKENIZE_STDIN_MAX) {
        cli_error(cmd, "stdin: more than %u MiB of text: give a shorter text", TOKENIZE_STDIN_MAX >> 20);
        free(buf);
        return CLI_EXIT_ERROR;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return CLI_EXIT_OK;
}

static void print_piece(const char *s, size_t n) {
    putchar('"');
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t len = memra_utf8_len(p + i, n - i < 4 ? n - i : 4);
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c < 0x20 || c == 0x7f || len == 0)
            printf("\\x%02x", c);
        else {
            fwrite(p + i, 1, len, stdout);
            i += len;
            continue;
        }
        i++;
    }
    putchar('"');
}

int cmd_tokenize(int argc, char **argv) {
    const char *cmd = "tokenize";
    cli_opt opts[] = {{"--model", NULL, true, NULL},
                      {"--specials", NULL, false, NULL},
                      {"--ids", NULL, false, NULL},
                      {"--no-bos", NULL, false, NULL}};
    const size_t n_opts = sizeof opts / sizeof opts[0];
    const char *pos[1];
    size_t n_pos;
    bool help;
    int rc = cli_parse(cmd, argc, argv, 1, opts, n_opts, pos, 1, &n_pos, help_text, &help);
    if (rc != CLI_EXIT_OK || help)
        return rc;
    const char *model = cli_get(opts, n_opts, "--model");
    if (!model) {
        cli_error(cmd, "no model given: memra tokenize --model F.gguf TEXT");
        return CLI_EXIT_USAGE;
    }
    if (n_pos != 1) {
        cli_error(cmd, "no text given: memra tokenize --model F.gguf TEXT");
        return CLI_EXIT_USAGE;
    }
    unsigned flags = 0;
    if (cli_get(opts, n_opts, "--specials"))
        flags |= MEMRA_TOKENIZE_SPECIALS;
    if (!cli_get(opts, n_opts, "--no-bos"))
        flags |= MEMRA_TOKENIZE_ADD_BOS;
    bool ids_only = cli_get(opts, n_opts, "--ids") != NULL;

    memra_error err = {0};
    memra_gguf *g = NULL;
    memra_tokenizer *t = NULL;
    if (memra_check_regular_input(model, "model file", &err) != MEMRA_OK)
        return cli_fail(cmd, &err);
    if (memra_gguf_open(model, &g, &err) != MEMRA_OK)
        return cli_fail(cmd, &err);
    memra_status st = memra_tokenizer_new(g, &t, &err);
    memra_gguf_close(g);
    if (st != MEMRA_OK)
        return cli_fail(cmd, &err);
    int32_t *ids = NULL;
    size_t n = 0, text_len = strlen(pos[0]);
    char *text_in = NULL; /* TEXT '-': stdin's bytes */
    if (strcmp(pos[0], "-") == 0 && (rc = read_stdin(cmd, &text_in, &text_len)) != CLI_EXIT_OK) {
        memra_tokenizer_free(t);
        return rc;
    }
    st = memra_tokenizer_encode(t, text_in ? text_in : pos[0], text_len, flags, &ids, &n, &err);
    free(text_in);
    if (st != MEMRA_OK) {
        memra_tokenizer_free(t);
        return cli_fail(cmd, &err);
    }
    char *piece = NULL;
    size_t cap = 0;
    rc = CLI_EXIT_OK;
    for (size_t i = 0; i < n && rc == CLI_EXIT_OK; i++) {
        if (ids_only) {
            printf("%" PRId32 "\n", ids[i]);
            continue;
        }
        size_t len = 0;
        st = memra_tokenizer_decode(t, ids[i], true, piece, cap, &len, &err);
        if (st == MEMRA_E_RANGE && len > cap) {
            char *p = realloc(piece, len);
            if (!p) {
                cli_error(cmd, "out of memory");
                rc = CLI_EXIT_ERROR;
                break;
            }
            piece = p;
            cap = len;
            st = memra_tokenizer_decode(t, ids[i], true, piece, cap, &len, &err);
        }
        if (st != MEMRA_OK) {
            rc = cli_fail(cmd, &err);
            break;
        }
        printf("%" PRId32 "\t", ids[i]);
        print_piece(piece, len);
        putchar('\n');
    }
    free(piece);
    free(ids);
    memra_tokenizer_free(t);
    return rc;
}
