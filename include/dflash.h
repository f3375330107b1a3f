/* dflash.h - the public C API of libdflash.
 *
 * Load a target model (Hugging Face directory: config.json, safetensors,
 * tokenizer.json, ...) and optionally a DFlash draft; tokenize, render chat
 * prompts, and generate text - plain or speculative, with the same output.
 *
 *   dflash_params p = dflash_default_params();
 *   dflash_model *m = dflash_load("models/demo/target", "models/demo/draft", &p);
 *   if (!m) { fprintf(stderr, "%s\n", dflash_error()); ... }
 *   dflash_gen g = dflash_default_gen();
 *   dflash_generate_text(m, "Hello", &g, on_text, NULL, &stats);
 *   dflash_free(m);
 *
 * A model holds one sequence (its KV caches); more come from dflash_seq_new
 * (below), each generating on its own thread while the model batches their
 * target forwards. Calls on one model (or one sequence) must not overlap,
 * except that dflash_tokenize, dflash_detokenize, dflash_token_piece,
 * dflash_chat_prompt and dflash_get_info only read the loaded model and may
 * run on any number of threads at once, also while a generation runs. Different models are
 * independent: they may be loaded, used and freed on different threads at
 * the same time, each with its own worker threads (dflash_params.n_threads).
 * Errors: functions return NULL or -1 and dflash_error() says why
 * (thread-local, one line). */
#ifndef DFLASH_H
#define DFLASH_H

#include <stddef.h>
#include <stdint.h>

/* The version of this header; dflash_version() is the library's, and
 * `dflash --version` prints the same string. */
#define DFLASH_VERSION_MAJOR 0
#define DFLASH_VERSION_MINOR 1
#define DFLASH_VERSION_PATCH 0
#define DFLASH_VERSION_STRING "0.1.0"
/* For #if tests: DFLASH_VERSION_NUMBER >= DFLASH_MAKE_VERSION(0, 1, 0). */
#define DFLASH_MAKE_VERSION(major, minor, patch) ((major) * 10000 + (minor) * 100 + (patch))
#define DFLASH_VERSION_NUMBER DFLASH_MAKE_VERSION(DFLASH_VERSION_MAJOR, DFLASH_VERSION_MINOR, DFLASH_VERSION_PATCH)

/* The library's exported functions (libdflash.so hides everything else). */
#if defined(__GNUC__)
#define DFLASH_API __attribute__((visibility("default")))
#else
#define DFLASH_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dflash_model dflash_model;

typedef struct {
    int n_threads;     /* 0: number of physical cores */
    int n_ctx;         /* context positions; 0: min(max_position_embeddings, 4096) */
    const char *quant; /* NULL: weights as stored; "bf16", "q8", "q4": convert at load */
    int quant_group;   /* group size for q8/q4 at load (default 64) */
    const char *draft_quant; /* the draft's weights: "keep" (as stored), "bf16",
                                "q8", "q4"; NULL = auto: as quant when that is
                                set, else q8 for a float draft when the kernels
                                run int8 activations (a draft only proposes, so
                                this changes speed and acceptance, never the
                                output) */
    const char *backend; /* "cpu", "cuda", or NULL / "auto": CUDA when built in
                            (make CUDA=1) and a device is present, else CPU */
    const char *tokenizer; /* NULL: the target's own (tokenizer.json beside it,
                              or a GGUF file's tokenizer.ggml.*); else a
                              directory with tokenizer.json or a GGUF file to
                              take the tokenizer and chat template from (a
                              GGUF converted without one, a newer tokenizer
                              file); prompt ids beyond the target's
                              vocab_size fail at generation, as for any
                              tokenizer */
    int draft_window; /* > 0: every draft layer attends to the last
                         draft_window context positions only (a sliding
                         window over the draft's context: cheaper draft
                         blocks at long contexts, the output unchanged);
                         0: as the draft's config.json (layer_types /
                         sliding_window, full attention without them) */
    int step_tokens;  /* continuous batching: while other generations run, a
                         prompt is prefilled in chunks of at most this many
                         rows less the rows the others' rounds put in a step
                         (at least 16), so each step carries a slice of a long
                         prompt beside the others' decode rows instead of
                         holding them for a whole chunk of 256; 0: 64. Alone a
                         prompt runs 256 rows a forward. The output is the same
                         whatever the chunks. */
    int kv_budget_mib; /* > 0: the target KV cache all sequences of the model
                          (its own and dflash_seq_new's) may hold together, in
                          MiB; a sequence takes pages of 16 positions as it
                          fills its context and gives them back when it is
                          reset, freed or evicted, and a generation starts
                          only once the positions it may use fit (it waits
                          for running ones to end: dflash_kv_stats below);
                          0: no limit (each sequence may fill its context). The CPU backend;
                          refused by the CUDA backend, whose caches are
                          allocated whole. */
} dflash_params;

/* "0.1.0": the version the library was built as (DFLASH_VERSION_STRING of
 * its header). */
DFLASH_API const char *dflash_version(void);

DFLASH_API dflash_params dflash_default_params(void);

/* draft_dir may be NULL. */
DFLASH_API dflash_model *dflash_load(const char *target_dir, const char *draft_dir, const dflash_params *p);
DFLASH_API void dflash_free(dflash_model *m);
DFLASH_API const char *dflash_error(void);

/* Only the tokenizer (for `dflash tokenize`): no weights are read. */
DFLASH_API dflash_model *dflash_load_tokenizer(const char *dir);

typedef struct {
    const char *arch;     /* "Qwen3ForCausalLM", ... */
    int n_layers, hidden, n_heads, n_kv_heads, head_dim, vocab, n_ctx;
    const char *weight_format; /* "bf16", "q4 (MLX, group 64)", ... */
    size_t weight_bytes;
    double load_s;
    int has_draft, draft_layers, block_size;
    const char *backend; /* "cpu", "cuda" */
    const char *kernels; /* the backend's line: kernel variant, device */
    int n_threads;
    const char *draft_weight_format; /* as weight_format, for the draft ("" without one) */
    /* the weight bytes one T=1 decode step reads: weight_bytes, less the
     * unrouted experts of every expert layer (E - k of E) and all but one
     * row of an input embedding that is not the lm_head (untied; Gemma-4's
     * per-layer table too); = weight_bytes for a dense tied model - what
     * bandwidth figures divide by */
    size_t token_bytes;
    /* the bytes of the KV caches one sequence holds (the model's own, each
     * dflash_seq_new's): the target's K and V in float32 for n_ctx positions
     * (a sliding layer: its ring), the draft's likewise, when the context
     * is full. On the CPU the target's full-attention part is taken in
     * pages of 16 positions as they are used and given back on reset, free
     * or eviction (dflash_kv_stats); the rings, the draft's and the CUDA
     * backend's caches are allocated in full when the sequence is made; the
     * sequence's working buffers come on top */
    size_t seq_kv_bytes;
} dflash_info;

DFLASH_API void dflash_get_info(const dflash_model *m, dflash_info *info);

/* Tokenize (no special handling beyond the tokenizer's own added tokens).
 * *ids is malloc'd. -1 on invalid UTF-8 (message names the offset). */
DFLASH_API int dflash_tokenize(const dflash_model *m, const char *text, size_t len, int32_t **ids, size_t *n);

/* Tokenize a plain prompt (not a chat prompt, whose template writes its own
 * special tokens): dflash_tokenize's ids with the special tokens the
 * tokenizer's post_processor puts around a single text, as Hugging Face's
 * tokenizer(text) does (Gemma: <bos> first; Qwen3, gpt-oss: none). -1 and
 * an error naming it for a post_processor type other than TemplateProcessing
 * or ByteLevel. `dflash generate` without --chat uses it. */
DFLASH_API int dflash_tokenize_prompt(const dflash_model *m, const char *text, size_t len, int32_t **ids, size_t *n);

/* The bytes of one token, as the tokenizer stores them (byte-level BPE:
 * a token can hold part of a UTF-8 character, so pieces are bytes, not
 * always text - for text use dflash_detokenize, or the streaming callback of
 * dflash_generate, which never splits a character). Writes min(length,
 * size) bytes to buf, and a NUL after them when size > length; returns the
 * piece's length (so a return >= size means buf was too small), or -1 if
 * id is outside the vocabulary. Special tokens give their text. */
DFLASH_API int dflash_token_piece(const dflash_model *m, int32_t id, char *buf, size_t size);

/* Text of token ids (special tokens as their text; an invalid UTF-8
 * sequence becomes U+FFFD). Returns a malloc'd NUL-terminated string, its
 * length in *len if len is not NULL; NULL if an id is outside the
 * tokenizer's vocabulary. */
DFLASH_API char *dflash_detokenize(const dflash_model *m, const int32_t *ids, size_t n, size_t *len);

typedef struct {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
} dflash_message;

/* think: -1 = template default, 0 = thinking off (empty think block), 1 = on
 * (Qwen3; the gpt-oss harmony template has no such switch: it always asks
 * for reasoning, with its default effort "medium" and today's date).
 * Returns a malloc'd prompt string. */
DFLASH_API char *dflash_chat_prompt(const dflash_model *m, const dflash_message *msgs, int n,
                                    int add_generation_prompt, int think);

/* The chat template's text as the model carries it (chat_template.jinja, else
 * tokenizer_config.json's chat_template; a GGUF's tokenizer.chat_template); NULL without one. Lives
 * as long as the model. */
DFLASH_API const char *dflash_chat_template(const dflash_model *m);

/* An assistant message's call of a tool (OpenAI's tool_calls[].function). */
typedef struct {
    const char *name;
    const char *arguments; /* JSON text (Qwen3: put into the prompt as it is; harmony, Gemma 4: a JSON
                            * object is written as their templates write it, other text as it is) */
} dflash_tool_call;

/* A message with everything the template renders (dflash_message is this
 * with role and content only). */
typedef struct {
    const char *role;              /* "system", "user", "assistant", "tool" */
    const char *content;           /* NULL: "" */
    const char *reasoning_content; /* assistant: its thinking; NULL: none given */
    const dflash_tool_call *tool_calls; /* assistant: the calls it made */
    int n_tool_calls;
} dflash_chat_message;

/* dflash_chat_prompt with reasoning, tool calls and the functions the model
 * may call: tools_json is a JSON array of OpenAI tool objects ({"type":
 * "function", "function": {"name", "description", "parameters"}}), NULL for
 * none, read as Python's json.loads reads it (numbers keep their form: 1.0
 * is written 1.0). Each template writes them as its jinja2 original does:
 * Qwen3 (ChatML) into the system prompt as its tojson (Python's
 * json.dumps), gpt-oss (harmony) as the developer message's namespace of
 * TypeScript-like types, Gemma 4 as <|tool>declaration:...<tool|> lines in
 * the system turn; Gemma 4 folds "tool" messages into the assistant message
 * whose calls they answer, as its template reads them. What the template
 * raises on, or what could not be written back the same (NaN, a key twice,
 * ...), is an error naming it, as are tools with Llama-3 or Gemma 3. */
DFLASH_API char *dflash_chat_prompt_tools(const dflash_model *m, const dflash_chat_message *msgs, int n,
                                          const char *tools_json, int add_generation_prompt, int think);

/* What a chat template takes beyond messages, tools and the think switch:
 * gpt-oss's harmony template's kwargs reasoning_effort and model_identity,
 * and the date its strftime_now("%Y-%m-%d") writes into the system message.
 * NULL fields are the template's defaults. With any other template a field
 * that is set is an error naming it (no other template reads them). */
typedef struct {
    const char *reasoning_effort; /* "low", "medium" or "high"; NULL: "medium" */
    const char *date;             /* "Current date: ", YYYY-MM-DD; NULL: today in local time (a fixed date
                                   * keeps a prompt's tokens, and so its output, the same from day to day) */
    const char *model_identity;   /* the system message's first line (no "<|" in it); NULL: the template's
                                   * "You are ChatGPT, a large language model trained by OpenAI." */
} dflash_chat_opts;

/* dflash_chat_prompt_tools with the options above (opts NULL: none). An
 * invalid option (an effort other than the three, a date not YYYY-MM-DD) is
 * an error naming it. */
DFLASH_API char *dflash_chat_prompt_opts(const dflash_model *m, const dflash_chat_message *msgs, int n,
                                         const char *tools_json, int add_generation_prompt, int think,
                                         const dflash_chat_opts *opts);

/* The text that closes a generated answer's turn and opens the next, with
 * the user message and the generation prompt (think as above): a chat that
 * appends its tokens to the prompt + answer tokens it already has reuses
 * the whole cached conversation. It keeps the (empty, with thinking off)
 * think block of earlier answers, which the template's full render drops.
 * malloc'd; NULL + error when the model has no template we know. */
DFLASH_API char *dflash_chat_next_turn(const dflash_model *m, const char *user, int think);

/* One token's log-probability at a generated position (dflash_gen.on_logprob). */
enum { DFLASH_MAX_TOP_LOGPROBS = 20 };

typedef struct {
    int32_t id;
    float logprob;
} dflash_token_logprob;

typedef struct {
    int32_t id;          /* the token emitted at this position */
    float logprob;       /* its log-probability */
    int n_top;           /* = dflash_gen.top_logprobs */
    dflash_token_logprob top[DFLASH_MAX_TOP_LOGPROBS]; /* the most likely tokens, most likely first
                                                         (ties: lower id first) */
} dflash_logprob;

/* Called for each emitted token just before dflash_on_token reports it, with
 * the ud given to dflash_generate. The distribution is the target's, at the
 * position, from the target's logits (never the draft's): log-softmax of the
 * logits after logit_bias and the penalties, before temperature, top-k,
 * top-p and min-p - with none of those set, the model's own log-softmax;
 * with a grammar (dflash_gen.grammar), of that row with the tokens the
 * grammar refuses at -inf (they never appear among top unless fewer than
 * n_top tokens are allowed, then with logprob -inf).
 * Identical bit for bit with and without the draft. Return non-zero to stop. */
typedef int (*dflash_on_logprob)(void *ud, const dflash_logprob *lp);

typedef struct {
    int32_t id;
    float bias;          /* added to the token's logit; -100..100 (OpenAI's range) */
} dflash_logit_bias;

typedef struct {
    int n_predict;     /* new tokens at most (default 256) */
    float temp;        /* 0 = greedy (default) */
    int top_k;         /* 0 = off */
    float top_p;       /* 1 = off */
    uint64_t seed;
    int use_draft;     /* DFlash if a draft is loaded (default 1) */
    int block_size;    /* 0 = the draft's block_size */
    int draft_max;     /* most drafts per round; -1 = auto (default) */
    int draft_vocab;   /* the draft scores token ids 0..N-1 plus the stop tokens;
                          0 = auto (32768 when the vocabulary is larger than
                          65536), -1 = the whole vocabulary. Changes speed
                          only: every token is still the target's choice.
                          With draft_vocab_rank: the N most frequent ids of
                          the ranking (0 = every id it lists). */
    const char *draft_vocab_rank; /* NULL = ids by number (above); else a rank
                          file (dflash_vocab_rank_write; format in src/vocab.h)
                          for this model's vocabulary: the draft's LM head is
                          computed over the chosen ids only (CPU backend). */
    int ignore_eos;
    /* Logit controls, applied to the target's logits at every position (in
     * this order: logit_bias, repeat_penalty, frequency/presence), with the
     * history plain decoding has there (prompt + tokens generated before
     * it), so DFlash output still equals plain output, greedy or sampled. */
    float min_p;       /* 0 = off; keep tokens with p >= min_p * p(most likely), 0..1,
                          after top-k and top-p (sampling only) */
    float repeat_penalty;   /* 1 = off (default); > 0: a token in the last repeat_last_n
                               of the history: logit > 0 ? logit / r : logit * r (llama.cpp) */
    int repeat_last_n;      /* the penalties' window: 64 (default, llama.cpp's), -1 = the
                               whole history, 0 = penalties off */
    float frequency_penalty; /* 0 = off; logit -= f * times the token is in the window */
    float presence_penalty;  /* 0 = off; logit -= p if the token is in the window */
    const dflash_logit_bias *logit_bias; /* NULL = none; ids in the vocabulary (repeats add up) */
    int n_logit_bias;
    dflash_on_logprob on_logprob; /* NULL = off; else called per emitted token */
    int top_logprobs;       /* 0..DFLASH_MAX_TOP_LOGPROBS most likely tokens per position */
    /* Constrained decoding: NULL = off; else a GBNF grammar (llama.cpp's
     * format, start rule `root`; dflash_json_schema_grammar() makes one
     * from a JSON Schema), checked before anything runs (an error names
     * the rule and line). Every emitted token's bytes continue a string of
     * the grammar: at each position the target's choice is made among the
     * tokens the grammar allows after the tokens before it (greedy: the
     * allowed token with the highest logit; sampling: a draw from the
     * row, kept if allowed, else a second draw, with its own random number,
     * from the row with the disallowed tokens at -inf - together exactly
     * the masked distribution when top-k, top-p and min-p are off). Stop
     * tokens are allowed only where the grammar can end (with ignore_eos:
     * only where nothing else can follow); where the grammar is complete
     * and nothing else can follow, generation ends. Log-probabilities are
     * those of the masked row. DFlash output still equals plain output. */
    const char *grammar;
    /* Tree verification (DFlash): 0 = the chain (default); 2..64 = verify a
     * token tree of at most this many rows (the anchor included), built
     * best-first from the draft's top candidates per slot; output is still
     * plain decoding's. Full-attention targets on the CPU and CUDA backends;
     * not with a grammar, logit controls or logprobs (refused). -1 = auto:
     * each round the chain or a tree of 8/16/32 rows, whichever has the
     * best measured tokens per second (the chain where trees are refused). */
    int tree;
    /* NULL = none; else another thread may store a nonzero value there
     * (__atomic_store_n or a C11 atomic store) to end the call: one waiting
     * for its KV reservation (dflash_params.kv_budget_mib) returns -1 at
     * once, "cancelled" in its error, having computed nothing; one
     * generating stops at its next token, as if on_token had returned
     * nonzero. */
    const int *cancel;
} dflash_gen;

DFLASH_API dflash_gen dflash_default_gen(void);

typedef struct {
    int n_prompt;        /* prompt tokens */
    int n_reused;        /* prompt tokens whose KV was reused: the previous call's, or rows
                            dflash_copy_prefix brought from another sequence */
    int n_tokens;        /* tokens generated */
    double prompt_s;     /* prefill time */
    double decode_s;     /* time from the first generated token to the end */
    int rounds;          /* DFlash rounds that drafted */
    int plain_steps;     /* single-token steps */
    double tau;          /* mean tokens committed per drafting round, bonus included */
    int n_pos;           /* entries in accept_per_pos */
    double accept_per_pos[64];
    double draft_s, verify_s, other_s;
    const char *stop_reason; /* "budget", "stop token", "context full", "callback"; "error" when the
                                call failed */
    int n_drafted;       /* tokens the draft proposed (k summed over drafting rounds) */
    int n_accepted;      /* ... and the target accepted (tokens committed in rounds - rounds) */
    int accepted_at_pos[64]; /* drafts accepted at position i (accept_per_pos is the rate) */
    int accept_hist[64]; /* drafting rounds that accepted exactly a drafts (a = 0..63):
                            sums to rounds; sum of (a + 1) * accept_hist[a] = tau * rounds */
    int n_verified;      /* target rows verified in drafting rounds (chain: anchor + drafts;
                            tree: nodes), anchors included */
    int n_tree_rounds;   /* drafting rounds that verified a tree */
} dflash_stats;

/* Called with each piece of text as it is decoded (never half a UTF-8
 * character) and the id that completed it; return non-zero to stop. */
typedef int (*dflash_on_token)(void *ud, int32_t id, const char *text, size_t len);

/* Generate after prompt ids. The KV cache of a previous call is reused for
 * the longest common prefix. Generated ids are appended to *out if out is
 * not NULL (malloc'd, *n_out set). */
DFLASH_API int dflash_generate(dflash_model *m, const int32_t *prompt, size_t n_prompt, const dflash_gen *g,
                               dflash_on_token cb, void *ud, int32_t **out, size_t *n_out, dflash_stats *st);

/* GBNF text (malloc'd) for a JSON Schema given as JSON text (the
 * supported keywords: src/grammar.h); schema NULL = any JSON object
 * (OpenAI's response_format json_object). NULL + dflash_error() naming an
 * unsupported keyword or a malformed schema. */
DFLASH_API char *dflash_json_schema_grammar(const char *schema);

/* 0 if gbnf is a valid grammar for dflash_gen.grammar, else -1 and
 * dflash_error() names the problem (rule, line). */
DFLASH_API int dflash_grammar_check(const char *gbnf);

/* Tokenize text and generate. */
DFLASH_API int dflash_generate_text(dflash_model *m, const char *prompt, const dflash_gen *g, dflash_on_token cb,
                                    void *ud, dflash_stats *st);

/* Forget the cached sequence (next call prefills from scratch). */
DFLASH_API void dflash_reset(dflash_model *m);

/* ---- sequences: several generations of one model at once ----------------
 *
 * A sequence has its own KV caches (dflash_info.seq_kv_bytes, allocated by
 * dflash_seq_new), draft context, sampler, stop rules, grammar state and
 * prompt cache; it shares the model's weights, tokenizer and worker threads.
 * dflash_seq_generate is dflash_generate on the sequence. Different
 * sequences of one model (and the model's own dflash_generate) may generate
 * on different threads at the same time: their target forwards are batched
 * (continuous batching: while k generations run, each step is one forward
 * over the rows of all k, the weights read once for them; a generation joins
 * at the next step and leaves when it ends). Each reply is exactly the one
 * the same call gets alone, token for token and bit for bit in its
 * logprobs: a row is computed the same whatever rows are beside it. A step
 * waits for every running generation's next forward, so a slow dflash_on_token
 * callback holds the others back. Greedy argmaxes and draft blocks are
 * batched the same way (the CPU: one pass of the draft over every drafting
 * sequence's block, each over its own draft context); sampling (logits to
 * the host) still runs per sequence, one at a time on the model's threads.
 * draft_max auto picks each sequence's draft length from its own acceptance
 * and the measured cost of the batch's steps (the most tokens per second for
 * all running sequences together), and a prompt beside other generations is
 * prefilled in chunks of dflash_params.step_tokens rows a step.
 * Model families the backend cannot batch (the CPU: recurrent Gated
 * DeltaNet layers; tree batches; the CUDA backend for now) run their
 * sequences' forwards (and drafts) one at a time, with the same results.
 * dflash_time_forward / dflash_time_draft wait for the backend and run alone.
 * Free every sequence before its model. */
typedef struct dflash_seq dflash_seq;

/* NULL + error for a tokenizer-only model or out of memory. */
DFLASH_API dflash_seq *dflash_seq_new(dflash_model *m);
DFLASH_API void dflash_seq_free(dflash_seq *s);
DFLASH_API int dflash_seq_generate(dflash_seq *s, const int32_t *prompt, size_t n_prompt, const dflash_gen *g,
                                   dflash_on_token cb, void *ud, int32_t **out, size_t *n_out, dflash_stats *st);
DFLASH_API void dflash_seq_reset(dflash_seq *s);

/* The target KV cache of a model and its sequences (dflash_params.kv_budget_mib).
 * On the CPU a sequence's full-attention K/V live in pages of 16 positions,
 * taken as it fills its context and given back when it is reset, freed or
 * evicted. Under a budget a generation starts only with a reservation of
 * the positions it may use (prompt + n_predict + a verify block of 64, at
 * most the context; n_predict <= 0: the whole context; dflash_kv_reserve
 * says how many bytes), so a running generation never runs out of cache:
 * before its prefill idle sequences give back pages past their length,
 * then idle caches are dropped, least recently used first (their next
 * request prefills in full); a running generation's cache is never
 * dropped. If the reservation still does not fit beside the running
 * generations' reservations, the call waits inside dflash_generate (in
 * arrival order) until enough of them end; one that does not fit even
 * alone fails at once with an error naming the budget. A
 * dflash_seq_reset gives its pages back. */
typedef struct {
    int paged;      /* 1: the backend pages the cache (CPU); 0: allocated whole per sequence */
    size_t used;    /* bytes the model's sequences hold now (paged only) */
    size_t budget;  /* kv_budget_mib in bytes (0: no limit) */
    size_t peak;    /* the most held at once */
    long evictions; /* idle caches dropped to make room */
    int waiting;    /* generations waiting for their reservation now */
    long waits;     /* generations that had to wait, so far */
} dflash_kv_info;
DFLASH_API void dflash_kv_stats(const dflash_model *m, dflash_kv_info *out);
/* The bytes of target KV cache a generation of n_prompt prompt tokens and
 * n_predict more (<= 0: until the context is full) reserves under a
 * budget; 0 where the cache is not paged or the prompt does not fit the
 * context. */
DFLASH_API size_t dflash_kv_reserve(const dflash_model *m, size_t n_prompt, int n_predict);

/* Prompt prefixes across sequences (dflash serve --parallel: which slot a
 * request goes to, and copying a shared prefix into it).
 *
 * dflash_cached_prefix / dflash_seq_cached_prefix: how many leading tokens
 * of ids[0..n) the model's own sequence / s holds in its KV cache (the
 * next generation on it prefills from there; it may recompute a few more:
 * always the prompt's last token, and the draft's context may be shorter).
 * They read only the sequence's token record, so they may run while other
 * sequences generate, but not beside a generation or copy on the same
 * sequence.
 *
 * dflash_copy_prefix: before a generation of prompt ids[0..n) on dst (NULL:
 * the model's own sequence), copies into it the longest prefix of ids that
 * one of the sources src[0..n_src) holds (NULL entries: the model's own
 * sequence), if it is longer than dst's own: its target K/V rows, the
 * draft's context rows as far as the source's go, and the token record, so
 * the generation prefills from there. A source may be generating on
 * another thread meanwhile (then what it holds is its prompt as far as it
 * has been prefilled); dst must not be, and must not be a source. The copy
 * holds the backend for its memcpy (every layer's rows), as a step does.
 * The rows are what a prefill computes, bit for bit (a position's K/V
 * depend only on the tokens up to it), so the reply is the one the same
 * call gets on a fresh sequence. Returns the prefix dst now holds (> 0)
 * with *from (may be NULL) the source's index; 0 if no source holds more
 * than dst (nothing changed, *from = -1); -1 and dflash_error() when the
 * copy is not possible, dst unchanged: the backend has none (CUDA for now),
 * the model has recurrent (Qwen3.5 / Qwen3-Next Gated DeltaNet) layers or
 * sliding-window ring caches (gpt-oss, Gemma-4 with a context longer than
 * the window + 64), a source is dst or of another model. */
DFLASH_API size_t dflash_cached_prefix(const dflash_model *m, const int32_t *ids, size_t n);
DFLASH_API size_t dflash_seq_cached_prefix(const dflash_seq *s, const int32_t *ids, size_t n);
DFLASH_API int dflash_copy_prefix(dflash_model *m, dflash_seq *dst, dflash_seq *const *src, int n_src,
                                  const int32_t *ids, size_t n, int *from);

/* The model's batching counters since it was loaded. */
typedef struct {
    int active;      /* generations running now (the model's and its sequences') */
    long steps;      /* target forwards run (one per step) */
    long seq_steps;  /* sequences' forwards in them: seq_steps / steps = the mean batch */
    long rows;       /* token rows in them */
    int last_batch;  /* sequences in the last step */
    int max_batch;   /* the most in one step */
    int max_rows;    /* the most token rows in one step */
    long draft_steps;     /* draft steps run: each one pass of the draft over its blocks */
    long draft_seq_steps; /* draft blocks in them: draft_seq_steps / draft_steps = the mean */
    int max_draft_batch;  /* the most draft blocks in one step */
    long unbatched_steps; /* steps (forward, argmax or draft) of several sequences that ran one
                             sequence at a time, the backend unable to batch them (the CUDA
                             backend, recurrent layers): the same results, nothing shared */
    long argmax_steps;    /* predict steps: one pass over the LM head for the rows of all (greedy
                             argmaxes and sampling sequences' logits) */
    long argmax_rows;     /* rows in them */
    /* seconds on the wall clock: in forward, draft and argmax steps, with
     * the backend held for one sequence's other calls (rollback, draft
     * feed, logits for sampling), and while at least one generation ran;
     * active_s less the rest is time the backend was not used (each
     * generation's own work between its calls, the hand-offs between the
     * generations' threads) */
    double forward_s, draft_s, argmax_s, lock_s, active_s;
} dflash_batch_info;

DFLASH_API void dflash_batch_stats(const dflash_model *m, dflash_batch_info *out);

/* ---- benchmarking (dflash bench) ----------------------------------------- */

/* Median seconds of one greedy step of T tokens at context depth `depth`:
 * the target forward keeping its T rows plus the argmax of each (what a
 * decode step or a greedy verify of T rows costs, no logits copied out; the
 * cache is filled to depth first and rolled back after each run), over
 * `reps` runs after one warm-up. The prompt cache keeps the depth rows (a
 * later call at the same depth reuses them); T <= 64. */
DFLASH_API int dflash_time_forward(dflash_model *m, int T, int depth, int reps, double *median_s);

/* Median seconds of one draft block at the draft's block_size (all slots
 * proposed, ids returned) over a context of `depth` target rows. Resets the
 * prompt cache. */
DFLASH_API int dflash_time_draft(dflash_model *m, int depth, int reps, double *median_s);
/* The same with the draft vocabulary g asks for (draft_vocab,
 * draft_vocab_rank; NULL = the default), checked as dflash_generate checks it. */
DFLASH_API int dflash_time_draft_gen(dflash_model *m, const dflash_gen *g, int depth, int reps, double *median_s);

/* ---- the draft's vocabulary (--draft-vocab freq:N) ----------------------- */

/* Write a rank file: the ids with counts[id] > 0, most frequent first
 * (ties: smaller id first), for a model of `vocab` ids (its config's
 * vocab_size). Through a temporary file. 0, or -1 + dflash_error(). */
DFLASH_API int dflash_vocab_rank_write(const char *path, const int64_t *counts, int vocab);
/* Check a rank file (vocab > 0: made for that many ids); *n_ids = the ids
 * it lists. 0, or -1 + dflash_error() naming the line and the culprit. */
DFLASH_API int dflash_vocab_rank_check(const char *path, int vocab, int *n_ids);

/* Write a random-weight checkpoint with a real model's shapes to out_dir:
 * shape "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-30b-a3b",
 * "qwen3.5-0.8b", "qwen3.5-4b", "qwen3.5-9b", "qwen3.5-35b-a3b", or the small
 * "tiny", "tiny-moe", "tiny-qwen35", "tiny-qwen35moe"; draft != 0 writes
 * the matching DFlash draft instead (5 layers; 2 for the small shapes; a
 * Qwen3 draft for Qwen3.5 and Qwen3.5-MoE);
 * bits 0 (bf16), 4 or 8 (MLX, group 64). tokenizer_dir (may be NULL) gets symlinked into a target; it must hold
 * tokenizer.json. Written all or nothing, as dflash_quantize. */
DFLASH_API int dflash_synth(const char *shape, int draft, int bits, const char *tokenizer_dir, const char *out_dir);

/* Convert a BF16/F16/F32 checkpoint directory to the MLX affine layout
 * (bits 4 or 8, group 32/64/128), loadable by dflash and MLX. A GGUF file is
 * refused. The input is loaded, checked and read before anything is written;
 * the files are written in a staging directory and renamed into place at the
 * end, so on failure out_dir is as it was (a new one does not appear). */
DFLASH_API int dflash_quantize(const char *in_dir, const char *out_dir, int bits, int group);

/* Write a Hugging Face / MLX target or DFlash draft directory as a GGUF file
 * (llama.cpp's names and keys, tokenizer inside: from tok_dir, NULL = in_dir;
 * a draft takes its target's); type "f16" or "q8_0". Through a temporary
 * file; OUT must not be the input. */
int dflash_convert(const char *in_dir, const char *out_path, const char *type, const char *tok_dir);
/* 1 if PATH is a GGUF file (dflash_load takes it in place of a directory). */
int dflash_is_gguf(const char *path);

/* Bandwidth in GB/s of the memory the model's weights stream from, measured
 * now by its backend: CPU, a parallel read of a 512 MiB buffer with the
 * worker threads (best of a few passes); CUDA, a device-to-device copy
 * (read + write bytes). -1 without a model (tokenizer only). */
DFLASH_API double dflash_bandwidth(dflash_model *m);

/* The CPU's read bandwidth in GB/s, as dflash_bandwidth measures it for the
 * CPU backend, whatever backend is in use. */
DFLASH_API double dflash_read_bandwidth(void);

#ifdef __cplusplus
}
#endif
#endif
