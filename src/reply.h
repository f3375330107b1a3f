/* reply.h - a model's reply split into reasoning, content and tool calls,
 * as text arrives (streaming) or all at once. Prefix: rp_.
 *
 * The format is Qwen3's (the chat template in models/demo/target):
 *   - with reasoning on, a reply that starts with "<think>" is reasoning up
 *     to "</think>" (newlines next to the tags dropped, as the template's
 *     strip('\n') does); one that never closes it is all reasoning;
 *   - with tools on, "<tool_call>" opens a block that ends at the first
 *     "</tool_call>" (or the reply's end). A block whose text starts as the
 *     template writes calls,
 *         {"name": "NAME", "arguments": {
 *     (any JSON white space between the tokens, NAME a JSON string that is
 *     not empty, all of it in the block's first 4096 bytes) is a tool call
 *     from that point on, and streams: its arguments are the text of that
 *     object as the model writes it, from its "{" to the matching "}"
 *     (strings and nesting followed, the JSON not checked), or to the end
 *     tag / the reply's end when the model never closes it; what follows
 *     the object inside the block (the wrapper's "}") is dropped. Such a
 *     call's arguments are valid JSON when the model wrote valid JSON, as
 *     OpenAI's are;
 *   - any other block is a tool call if its whole text is an object with a
 *     string "name" (not empty) and an object "arguments" (its arguments
 *     come in one piece when the block closes), and content otherwise;
 *   - white space between tool calls, and before and after them, is
 *     dropped; everything else is content, exactly as generated (a block
 *     that is not a call, or is never closed, tags included).
 * Feeding the same text in any pieces gives the same events, concatenated
 * per kind and call (tests/test_reply.c and tests/fuzz/fuzz_reply.c check
 * that), so a streamed reply reassembles to the whole one. */
#ifndef DFL_REPLY_H
#define DFL_REPLY_H

#include <stddef.h>

/* A tool call is RP_CALL_BEGIN, then RP_CALL_ARGS pieces (none for an
 * arguments text of 0 bytes: never, it starts with "{"), then RP_CALL_END;
 * calls do not overlap, and nothing else comes between a BEGIN and its END. */
typedef enum { RP_CONTENT = 0, RP_REASONING, RP_CALL_BEGIN, RP_CALL_ARGS, RP_CALL_END } rp_kind;

typedef struct {
    rp_kind kind;
    const char *text; /* RP_CONTENT, RP_REASONING, RP_CALL_ARGS: a piece, len > 0 bytes */
    size_t len;
    int index;        /* RP_CALL_*: 0 for the reply's first call, 1, ... */
    const char *name; /* RP_CALL_BEGIN: the function name (NUL-terminated, JSON unescaped) */
} rp_event;

/* Called for each piece; the event's pointers live until it returns. */
typedef void (*rp_emit_fn)(void *ud, const rp_event *ev);

typedef struct rp_splitter rp_splitter;

/* reasoning: split "<think>...</think>" off the start; tools: parse
 * <tool_call> blocks. With neither, content is the text as fed. */
rp_splitter *rp_new(int reasoning, int tools);
/* gpt-oss's harmony format instead (chat.h's CHAT_HARMONY). The reply follows
 * the prompt's "<|start|>assistant" and is a sequence of messages, each a
 * header, "<|message|>", a body, and an end: "<|end|>", "<|return|>",
 * "<|call|>" or the next "<|start|>" (the stop tokens <|return|> and
 * <|call|> are normally not in the text). A header is "<|start|>ROLE"
 * (not on the first message, whose role the prompt gave), then
 * "<|channel|>NAME", optionally " to=RECIPIENT" (in the role part or after
 * the channel) and "<|constrain|>TYPE". The body of
 *   - a message with a recipient is a tool call: RP_CALL_BEGIN with the
 *     recipient's name ("functions." dropped), its body as RP_CALL_ARGS;
 *   - channel "final" (or no channel) is RP_CONTENT;
 *   - any other channel ("analysis", "commentary") is RP_REASONING.
 * Text where a header should be that cannot start one (a model that ignores
 * the format) is content up to the next end; a reply that stops inside a
 * header drops it when it only opened a turn ("<|start|>...", "<|channel|>...")
 * and gives it as content otherwise; an end tag where a header should be is
 * dropped. Headers longer than 512 bytes are content. rp_max_calls applies. */
rp_splitter *rp_new_harmony(void);
/* Gemma 4's format instead (chat.h's CHAT_GEMMA4 / CHAT_GEMMA4_EARLY). The
 * reply follows the prompt's "<|turn>model\n" (and, with thinking off, an
 * empty thought channel). "<|channel>" opens a thinking channel: its name
 * "thought\n", when the channel starts with it, is dropped, and the text up
 * to "<channel|>" is RP_REASONING (to the reply's end if it never closes);
 * everything else is RP_CONTENT as generated, but for a "<channel|>" with no
 * channel open, which is dropped (the template's strip_thinking drops such
 * tags too). "<turn|>" (normally a stop token, not in the text) ends the
 * reply: the rest is dropped and rp_done says 1. Applies whatever the
 * think switch, as the model may open a channel on its own.
 * With tools on, "<|tool_call>call:NAME{" (NAME: letters, digits, _ - .,
 * at most 256) starts a tool call named NAME whose arguments are the
 * template's notation up to "<tool_call|>" (or the reply's end), given as
 * JSON as they arrive: {key:value,...} with bare keys, strings between
 * <|"|>, numbers, true / false / null (also Python's True / False / None),
 * nested {...} and [...] become {"key":value,...}; a key without ":" is
 * dropped, a missing value is null, a bare word that is no number or
 * literal is a string, what is open at the end is closed, text after the
 * arguments' "}" is dropped: the arguments are always a JSON object. A
 * "<|tool_call>" not followed by such a head is content (the tag too).
 * White space between calls and around them is dropped, as for Qwen3;
 * "<|tool_response>" (where the caller's results go; a stop token) ends the
 * reply like "<turn|>". rp_max_calls applies. With tools off, those tags
 * are content. */
rp_splitter *rp_new_gemma4(int tools);
/* The splitter a reply in chat format `format` (chat.h's chat_format, or -1)
 * needs with the given reasoning / tools switches, or NULL when its text is
 * all content: harmony and Gemma 4 always split (rp_new_harmony,
 * rp_new_gemma4(tools)); Gemma 3 never (its template has neither); Qwen3,
 * Llama-3 and an unknown format: rp_new(reasoning, tools) when either is on. */
rp_splitter *rp_new_for(int format, int reasoning, int tools);
void rp_feed(rp_splitter *p, const char *text, size_t len, rp_emit_fn emit, void *ud);
/* The end of the reply: whatever was held back goes out. */
void rp_finish(rp_splitter *p, rp_emit_fn emit, void *ud);
/* How many tool calls were begun so far. */
int rp_n_calls(const rp_splitter *p);
/* At most n tool calls (n >= 1; 0: no limit, the default): after the n-th
 * call's END the rest of the reply is dropped and rp_done says 1, so the
 * caller may stop generating (parallel_tool_calls: false is n = 1). */
void rp_max_calls(rp_splitter *p, int n);
int rp_done(const rp_splitter *p);
void rp_free(rp_splitter *p);

/* One block's inside (the text between <tool_call> and </tool_call>):
 * 0 with *name malloc'd and the arguments' span in s, -1 if it is not a
 * tool call. */
int rp_parse_call(const char *s, size_t n, char **name, size_t *args_off, size_t *args_len);

#endif
