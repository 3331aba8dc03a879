/* memra/chat.h: the chat formats memra can wrap one user message in.
 *
 * The format is detected from the file's tokenizer.chat_template: "<|im_start|>" is ChatML,
 * "<|start_header_id|>" Llama 3, "<start_of_turn>" Gemma; any other template is refused with
 * MEMRA_E_UNSUPPORTED and a message that quotes its start. A file without a template gets the
 * format of its architecture (general.architecture "gemma3" or "gemma2": Gemma; "llama" whose
 * vocabulary holds the token "<|im_start|>": ChatML), else MEMRA_E_UNSUPPORTED.
 *
 * memra_chat_encode gives the ids: the template's markers as control tokens, the messages as plain
 * text (a "<|im_end|>" or "<|im_start|>system" typed in a message stays text and cannot open or
 * close a turn). memra_chat_render gives the same conversation as one text, for display only:
 * encoding it with MEMRA_TOKENIZE_SPECIALS would read markers out of the messages. */
#ifndef MEMRA_CHAT_H
#define MEMRA_CHAT_H

#include <stddef.h>

#include "memra/gguf.h"
#include "memra/status.h"
#include "memra/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum memra_chat_format { MEMRA_CHAT_CHATML = 1, MEMRA_CHAT_LLAMA3 = 2, MEMRA_CHAT_GEMMA = 3 } memra_chat_format;

/* The chat format of the file. *source (may be NULL) is set to a static phrase saying where it
 * came from ("the file's chat template", "the architecture gemma3 (no chat template)", ...).
 * When the ChatML template carries a default system message (given when the conversation has
 * none: SmolLM2's), it is copied into *system (malloc'd, NUL-terminated; the caller frees it),
 * else *system is NULL. system may be NULL. */
memra_status memra_chat_detect(const memra_gguf *g, const memra_tokenizer *t, memra_chat_format *fmt,
                               const char **source, char **system, memra_error *err);

/* "chatml", "llama3" or "gemma". */
const char *memra_chat_format_name(memra_chat_format fmt);

/* Renders one user message (and the system message when not NULL; Gemma has no system role and
 * puts it at the top of the user turn) followed by the generation prompt. *out is malloc'd and
 * NUL-terminated; the caller frees it. No bos token is written: encode with MEMRA_TOKENIZE_ADD_BOS
 * and the tokenizer adds it as the file says. t may be NULL (it is not used today). */
memra_status memra_chat_render(memra_chat_format fmt, const memra_tokenizer *t, const char *system, const char *user,
                               char **out, memra_error *err);

/* The ids of one user message (and the system message when not NULL) in format fmt, followed by the
 * generation prompt: the template's markers are matched as control tokens, the messages' text is
 * encoded without specials (flags MEMRA_TOKENIZE_SPECIALS: matched in the messages too, the
 * caller's explicit choice), and bos is prepended with MEMRA_TOKENIZE_ADD_BOS as the file says.
 * *ids is malloc'd (the caller frees it). */
memra_status memra_chat_encode(memra_chat_format fmt, const memra_tokenizer *t, const char *system, const char *user,
                               unsigned flags, int32_t **ids, size_t *n_ids, memra_error *err);

#ifdef __cplusplus
}
#endif
#endif
