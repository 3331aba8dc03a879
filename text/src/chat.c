/* chat.c: chat format detection and rendering of one user message (memra/chat.h). */
#include "memra/chat.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static bool str_contains(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; k <= n && i + k <= n; i++)
        if (memcmp(s + i, needle, k) == 0)
            return true;
    return false;
}

static const char *str_find(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; k <= n && i + k <= n; i++)
        if (memcmp(s + i, needle, k) == 0)
            return s + i;
    return NULL;
}

/* The default system message of a ChatML template: the literal text written between
 * "<|im_start|>system" plus a newline (a real one or the escape \n) and "<|im_end|>", when the
 * template writes one as a plain string (no expression inside it). */
static memra_status chatml_default_system(const char *tpl, size_t n, char **out, memra_error *err) {
    *out = NULL;
    const char *at = str_find(tpl, n, "<|im_start|>system");
    if (!at)
        return MEMRA_OK;
    const char *p = at + strlen("<|im_start|>system"), *end = tpl + n;
    if (p < end && *p == '\n')
        p++;
    else if (end - p >= 2 && p[0] == '\\' && p[1] == 'n')
        p += 2;
    else
        return MEMRA_OK;
    const char *stop = str_find(p, (size_t)(end - p), "<|im_end|>");
    if (!stop || stop == p)
        return MEMRA_OK;
    for (const char *q = p; q < stop; q++)
        if (*q == '\'' || *q == '"' || *q == '{' || *q == '}' || *q == '+' || *q == '\\')
            return MEMRA_OK; /* an expression, not a literal message */
    size_t len = (size_t)(stop - p);
    char *s = malloc(len + 1);
    if (!s)
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory for the chat template's system message");
    memcpy(s, p, len);
    s[len] = '\0';
    *out = s;
    return MEMRA_OK;
}

static bool vocab_has(const memra_tokenizer *t, const char *text) {
    if (!t)
        return false;
    size_t want = strlen(text);
    uint32_t n = memra_tokenizer_n_tokens(t);
    for (uint32_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *s = memra_tokenizer_text(t, (int32_t)i, &len);
        if (s && len == want && memcmp(s, text, len) == 0)
            return true;
    }
    return false;
}

memra_status memra_chat_detect(const memra_gguf *g, const memra_tokenizer *t, memra_chat_format *fmt,
                               const char **source, char **system, memra_error *err) {
    if (system)
        *system = NULL;
    if (source)
        *source = NULL;
    if (!g || !fmt)
        return memra_fail(err, MEMRA_E_INVALID, "memra_chat_detect: no file or no output");
    const char *path = memra_gguf_path(g);
    const memra_gguf_value *v = memra_gguf_find(g, "tokenizer.chat_template");
    if (v) {
        if (v->type != MEMRA_GGUF_STRING)
            return memra_fail(err, MEMRA_E_FORMAT, "%s: tokenizer.chat_template is not a string", path);
        const char *tpl = v->v.str.ptr;
        size_t n = (size_t)v->v.str.len;
        if (str_contains(tpl, n, "<|im_start|>")) {
            *fmt = MEMRA_CHAT_CHATML;
            if (source)
                *source = "the file's chat template (ChatML: <|im_start|>)";
            return system ? chatml_default_system(tpl, n, system, err) : MEMRA_OK;
        }
        if (str_contains(tpl, n, "<|start_header_id|>")) {
            *fmt = MEMRA_CHAT_LLAMA3;
            if (source)
                *source = "the file's chat template (Llama 3: <|start_header_id|>)";
            return MEMRA_OK;
        }
        if (str_contains(tpl, n, "<start_of_turn>")) {
            *fmt = MEMRA_CHAT_GEMMA;
            if (source)
                *source = "the file's chat template (Gemma: <start_of_turn>)";
            return MEMRA_OK;
        }
        /* Quote the start of the template, printable ASCII only, so the message names it. */
        char head[81];
        size_t k = 0;
        for (size_t i = 0; i < n && k + 1 < sizeof head; i++) {
            unsigned char c = (unsigned char)tpl[i];
            head[k++] = (c >= 0x20 && c < 0x7f) ? (char)c : ' ';
        }
        head[k] = '\0';
        return memra_fail(
            err, MEMRA_E_UNSUPPORTED,
            "%s: chat template not supported (key tokenizer.chat_template; memra knows ChatML, Llama 3 and "
            "Gemma): \"%s\"%s",
            path, head, n > k ? "..." : "");
    }
    memra_gguf_str arch = {0};
    const memra_gguf_value *a = memra_gguf_find(g, "general.architecture");
    if (a && a->type == MEMRA_GGUF_STRING)
        arch = a->v.str;
    if ((arch.len == 6 && memcmp(arch.ptr, "gemma3", 6) == 0) ||
        (arch.len == 6 && memcmp(arch.ptr, "gemma2", 6) == 0) || (arch.len == 5 && memcmp(arch.ptr, "gemma", 5) == 0)) {
        *fmt = MEMRA_CHAT_GEMMA;
        if (source)
            *source = "the architecture gemma (the file carries no chat template)";
        return MEMRA_OK;
    }
    if (arch.len == 5 && memcmp(arch.ptr, "llama", 5) == 0 && vocab_has(t, "<|im_start|>") &&
        vocab_has(t, "<|im_end|>")) {
        *fmt = MEMRA_CHAT_CHATML;
        if (source)
            *source = "the architecture llama with ChatML tokens in the vocabulary (the file carries no chat template)";
        return MEMRA_OK;
    }
    return memra_fail(err, MEMRA_E_UNSUPPORTED,
                      "%s: no chat template (tokenizer.chat_template) and no chat format known for the architecture "
                      "'%.*s'%s: use --prompt",
                      path, (int)(arch.len > 64 ? 64 : arch.len), arch.ptr ? arch.ptr : "",
                      arch.len == 5 && memcmp(arch.ptr, "llama", 5) == 0 ? " without ChatML tokens" : "");
}

const char *memra_chat_format_name(memra_chat_format fmt) {
    switch (fmt) {
    case MEMRA_CHAT_CHATML: return "chatml";
    case MEMRA_CHAT_LLAMA3: return "llama3";
    case MEMRA_CHAT_GEMMA: return "gemma";
    }
    return "unknown";
}

/* The parts of one conversation turn in format fmt: the template's own text (markers matched as
 * control tokens) and the messages (specials matched only when the caller asks). Up to 9 parts. */
static size_t chat_parts(memra_chat_format fmt, const char *system, const char *user, bool user_specials,
                         memra_text_part *p) {
    size_t n = 0;
#define TPL(s) (p[n++] = (memra_text_part){s, strlen(s), true})
#define MSG(s) (p[n++] = (memra_text_part){s, strlen(s), user_specials})
    switch (fmt) {
    case MEMRA_CHAT_CHATML:
        if (system) {
            TPL("<|im_start|>system\n");
            MSG(system);
            TPL("<|im_end|>\n");
        }
        TPL("<|im_start|>user\n");
        MSG(user);
        TPL("<|im_end|>\n<|im_start|>assistant\n");
        break;
    case MEMRA_CHAT_LLAMA3:
        if (system) {
            TPL("<|start_header_id|>system<|end_header_id|>\n\n");
            MSG(system);
            TPL("<|eot_id|>");
        }
        TPL("<|start_header_id|>user<|end_header_id|>\n\n");
        MSG(user);
        TPL("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case MEMRA_CHAT_GEMMA:
        TPL("<start_of_turn>user\n");
        if (system) {
            MSG(system);
            TPL("\n\n");
        }
        MSG(user);
        TPL("<end_of_turn>\n<start_of_turn>model\n");
        break;
    }
#undef TPL
#undef MSG
    return n;
}

memra_status memra_chat_render(memra_chat_format fmt, const memra_tokenizer *t, const char *system, const char *user,
                               char **out, memra_error *err) {
    (void)t;
    if (!out || !user)
        return memra_fail(err, MEMRA_E_INVALID, "memra_chat_render: no message or no output");
    *out = NULL;
    memra_text_part parts[9];
    size_t n = chat_parts(fmt, system, user, false, parts);
    if (n == 0)
        return memra_fail(err, MEMRA_E_INVALID, "memra_chat_render: unknown chat format %d", (int)fmt);
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += parts[i].len;
    char *s = malloc(len + 1);
    if (!s)
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory rendering the chat message");
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(s + at, parts[i].text, parts[i].len);
        at += parts[i].len;
    }
    s[len] = '\0';
    *out = s;
    return MEMRA_OK;
}

memra_status memra_chat_encode(memra_chat_format fmt, const memra_tokenizer *t, const char *system, const char *user,
                               unsigned flags, int32_t **ids, size_t *n_ids, memra_error *err) {
    if (ids)
        *ids = NULL;
    if (n_ids)
        *n_ids = 0;
    if (!t || !user || !ids || !n_ids)
        return memra_fail(err, MEMRA_E_INVALID, "memra_chat_encode: a NULL argument");
    if (flags & ~(MEMRA_TOKENIZE_ADD_BOS | MEMRA_TOKENIZE_SPECIALS))
        return memra_fail(err, MEMRA_E_INVALID, "memra_chat_encode: unknown flags 0x%x", flags);
    memra_text_part parts[9];
    size_t n = chat_parts(fmt, system, user, (flags & MEMRA_TOKENIZE_SPECIALS) != 0, parts);
    if (n == 0)
        return memra_fail(err, MEMRA_E_INVALID, "memra_chat_encode: unknown chat format %d", (int)fmt);
    return memra_tokenizer_encode_parts(t, parts, n, flags & MEMRA_TOKENIZE_ADD_BOS, ids, n_ids, err);
}
