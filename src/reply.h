/* reply.h - a model's reply split into reasoning, content and tool calls,
 * as text arrives (streaming) or all at once. Prefix: rp_.
 *
 * The format is Qwen3's (the chat template in models/demo/target):
 *   - with reasoning on, a reply that starts with "<think>" is reasoning up
 *     to "</think>" (newlines next to the tags dropped, as the template's
 *     strip('\n') does); one that never closes it is all reasoning;
 *   - with tools on, each "<tool_call>JSON</tool_call>" block whose JSON is
 *     an object with a string "name" (not empty) and an object "arguments"
 *     is a tool call; white space between such blocks, and before and after
 *     them, is dropped;
 *   - everything else is content, exactly as generated: a block that is not
 *     valid tool-call JSON, or is never closed, is content too (its tags
 *     included).
 * Feeding the same text in any pieces gives the same events, concatenated
 * per kind (tests/test_reply.c and tests/fuzz/fuzz_reply.c check that), so
 * a streamed reply reassembles to the whole one. */
#ifndef DFL_REPLY_H
#define DFL_REPLY_H

#include <stddef.h>

typedef enum { RP_CONTENT = 0, RP_REASONING, RP_TOOL_CALL } rp_kind;

typedef struct {
    rp_kind kind;
    const char *text; /* RP_CONTENT, RP_REASONING: a piece, len bytes */
    size_t len;
    int index;             /* RP_TOOL_CALL: 0 for the reply's first call, 1, ... */
    const char *name;      /* RP_TOOL_CALL: the function name (NUL-terminated, JSON unescaped) */
    const char *arguments; /* RP_TOOL_CALL: the arguments object's JSON text as the model wrote it */
    size_t args_len;
} rp_event;

/* Called for each piece; the event's pointers live until it returns. */
typedef void (*rp_emit_fn)(void *ud, const rp_event *ev);

typedef struct rp_splitter rp_splitter;

/* reasoning: split "<think>...</think>" off the start; tools: parse
 * <tool_call> blocks. With neither, content is the text as fed. */
rp_splitter *rp_new(int reasoning, int tools);
void rp_feed(rp_splitter *p, const char *text, size_t len, rp_emit_fn emit, void *ud);
/* The end of the reply: whatever was held back goes out. */
void rp_finish(rp_splitter *p, rp_emit_fn emit, void *ud);
/* How many tool calls were emitted so far. */
int rp_n_calls(const rp_splitter *p);
void rp_free(rp_splitter *p);

/* One block's inside (the text between <tool_call> and </tool_call>):
 * 0 with *name malloc'd and the arguments' span in s, -1 if it is not a
 * tool call. */
int rp_parse_call(const char *s, size_t n, char **name, size_t *args_off, size_t *args_len);

#endif
