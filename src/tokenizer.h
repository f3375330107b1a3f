/* tokenizer.h - byte-level BPE read from a Hugging Face tokenizer.json, and
 * SentencePiece-style BPE with byte fallback (Gemma 3; see tokenizer.c).
 * Prefix: tok_.
 *
 * encode: NFC normalize, split out added/special tokens first (longest match),
 * run the pre-tokenizer regex from the file (PCRE2) on the rest, map bytes to
 * the GPT-2 alphabet, merge by rank. Ids equal HF tokenizers' exactly.
 * decode: byte-level; tok_decode() never emits half a UTF-8 character, it
 * holds incomplete trailing bytes in the tok_decoder until they complete.
 * A loaded tokenizer is read-only: tok_encode()/tok_decode() may run on
 * several threads at once (each with its own tok_decoder). */
#ifndef DFL_TOKENIZER_H
#define DFL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tok_tokenizer tok_tokenizer;

/* Reads DIR/tokenizer.json and, if present, DIR/tokenizer_config.json and
 * DIR/chat_template.jinja (the template, when there, over the config's, as
 * transformers reads them; gpt-oss ships its template that way).
 * NULL + dfl_seterr() on a missing or malformed file. */
tok_tokenizer *tok_load(const char *dir);
void tok_free(tok_tokenizer *t);
/* The same from a tokenizer.json object built elsewhere (GGUF metadata):
 * chat template (or NULL) and eos id (or -1) given directly; PATH names the
 * source in messages. */
struct cJSON;
tok_tokenizer *tok_from_json(const struct cJSON *root, const char *chat_template, int eos_id, const char *path);

/* 1 + the largest token id (vocab + added tokens). */
int tok_n_vocab(const tok_tokenizer *t);

/* Id of a token given by its exact text (an added token such as "<|im_end|>",
 * or a vocab entry as the file writes it: byte-level form, or for Gemma
 * "\u2581the", "<0x0A>"); -1 if there is none. */
int tok_lookup(const tok_tokenizer *t, const char *token);

/* Encode text[0..len). On success *ids is malloc'd, *n set, returns 0.
 * Invalid UTF-8: returns -1 with an error naming the byte offset. */
int tok_encode(const tok_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n);

/* tok_encode of a plain prompt, as HF's tokenizer(text) does by default:
 * with the special tokens the post_processor puts around a single
 * sequence (TemplateProcessing "single"; Gemma's tokenizer.json: <bos>
 * before the text; Qwen3's ByteLevel and gpt-oss's: none). A chat prompt
 * is not one: the template writes its own (tok_encode). -1 + error naming
 * the type for a post_processor other than TemplateProcessing / ByteLevel
 * (alone or in a Sequence). */
int tok_encode_prompt(const tok_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n);

/* The special tokens a tokenizer.json's post_processor object PP (NULL,
 * ByteLevel: none) puts before (ids[0..*n_pre)) and after
 * (ids[*n_pre..*n_pre+*n_post)) a plain prompt, ids checked against
 * n_vocab: what tok_encode_prompt adds (dflash convert writes them as GGUF's
 * add_bos_token / add_eos_token). -1 + error naming PATH for a malformed
 * one or a type tok_encode_prompt refuses. */
int tok_json_prompt_specials(const struct cJSON *pp, int n_vocab, const char *path, int32_t ids[16], int *n_pre,
                             int *n_post);

/* Streaming decode state; zero-initialise. */
typedef struct {
    unsigned char pend[4];
    int npend;
} tok_decoder;

/* Largest number of bytes one tok_decode() call can write. */
size_t tok_max_piece(const tok_tokenizer *t);

/* Append token id's bytes to out (cap >= tok_max_piece()), holding back an
 * incomplete UTF-8 tail; returns the number of bytes written. Invalid
 * sequences come out as U+FFFD, as HF decode(errors="replace") does.
 * Special/added tokens decode to their text. Out-of-range ids write nothing. */
size_t tok_decode(const tok_tokenizer *t, tok_decoder *d, int32_t id, char *out, size_t cap);
/* The raw bytes of token id (*len of them; not NUL-terminated, possibly
 * part of a UTF-8 character), or NULL for an out-of-range id. */
const char *tok_piece(const tok_tokenizer *t, int32_t id, size_t *len);
/* End of stream: any held-back bytes come out as U+FFFD. */
size_t tok_decode_flush(tok_decoder *d, char *out, size_t cap);

/* The chat template (chat_template.jinja or tokenizer_config.json's), or NULL. */
const char *tok_chat_template(const tok_tokenizer *t);
/* eos_token from tokenizer_config.json as an id, or -1. */
int tok_eos_id(const tok_tokenizer *t);

#endif
