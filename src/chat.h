/* chat.h - chat templates. Prefix: chat_.
 *
 * The Qwen3 ChatML, Llama-3, gpt-oss harmony, Gemma 3 and Gemma 4 templates are implemented
 * directly in C (no Jinja engine); tests compare their output with jinja2
 * rendering the real templates for many message lists. */
#ifndef DFL_CHAT_H
#define DFL_CHAT_H

/* A call an assistant message made (OpenAI's tool_calls[].function). */
typedef struct {
    const char *name;
    const char *arguments; /* JSON text, written into the prompt as it is */
} chat_tool_call;

typedef struct {
    const char *role;              /* "system", "user", "assistant", "tool" */
    const char *content;           /* never NULL */
    const char *reasoning_content; /* NULL when absent */
    const chat_tool_call *tool_calls; /* assistant: n_tool_calls of them (Qwen3 only) */
    int n_tool_calls;
} chat_message;

typedef enum { CHAT_THINK_UNSET = -1, CHAT_THINK_OFF = 0, CHAT_THINK_ON = 1 } chat_think;

typedef enum { CHAT_QWEN3 = 0, CHAT_LLAMA3, CHAT_HARMONY, CHAT_GEMMA, CHAT_GEMMA4, CHAT_GEMMA4_EARLY } chat_format;

/* CHAT_HARMONY (gpt-oss): the fields of the system message its template
 * writes (the template's kwargs); NULL = the template's default. */
typedef struct {
    const char *date;             /* "Current date: "; NULL = today in local time (strftime_now("%Y-%m-%d")) */
    const char *reasoning_effort; /* "Reasoning: "; NULL = "medium" */
    const char *model_identity;   /* NULL = "You are ChatGPT, a large language model trained by OpenAI." */
} chat_harmony_opts;

/* The texts of the tokens that end a reply in the format of template_text
 * (NULL or any template: no error is set): for harmony {"<|return|>",
 * "<|call|>", NULL}, for Gemma 3 {"<end_of_turn>", "<eos>", NULL} (the -it
 * models' generation_config stops on both; a base model's eos_token is
 * <eos>), for Gemma 4 {"<turn|>", "<eos>", NULL} (its end of turn and
 * end of text), for the others NULL (their eos_token says it). At most
 * CHAT_MAX_STOP of them. */
#define CHAT_MAX_STOP 2
const char *const *chat_stop_tokens(const char *template_text);

/* Which format a model's template text is; -1 + error if none we know.
 * Gemma 4 ("<|turn>" / "<turn|>"): CHAT_GEMMA4_EARLY for the template the
 * models were released with (its think switch writes "<|think|>"),
 * CHAT_GEMMA4 for the later one (llama.cpp's google-gemma-4-31B-it-
 * interleaved.jinja: "<|think|>" and a newline); a revision with other
 * rules (Google's 2026-07-09 "canonical" rewrite, which merges
 * consecutive model turns and has a preserve_thinking switch) is -1 with
 * an error naming it, not rendered by guess. */
int chat_detect(const char *template_text);

/* Render messages; malloc'd NUL-terminated string, NULL + error on bad input
 * (unknown role, for example).
 * CHAT_GEMMA is Gemma 3's template (models/gemma3-tokenizer/): "<bos>", a
 * first system message's content + "\n\n" at the start of the first turn
 * (not trimmed), each turn "<start_of_turn>" ROLE "\n" + content with white
 * space trimmed (Python str.strip()) + "<end_of_turn>\n", ROLE "model" for
 * assistant and the role as given otherwise; the generation prompt
 * "<start_of_turn>model\n". As the template does, the turns after the
 * system message must go user, non-user, user, ... ("Conversation roles
 * must alternate", an error here); reasoning_content is not written; tools
 * and tool_calls are refused (the template has none). The think switch
 * does not apply.
 * CHAT_GEMMA4 / CHAT_GEMMA4_EARLY are Gemma 4's templates (tests/fixtures/
 * chat/gemma4/README): "<bos>"; a system turn "<|turn>system\n" ... "<turn|>\n"
 * when thinking is on or the first message is "system" or "developer"
 * (its content trimmed), opened with "<|think|>" when thinking is on
 * (CHAT_GEMMA4: "<|think|>\n"); then each message "<|turn>ROLE\n" +
 * content + "<turn|>\n", ROLE "model" for assistant and the role as given
 * for system / developer / user; a user's (system's) content trimmed
 * (Python str.strip()), an assistant's with every thinking-channel span
 * taken out as the template's strip_thinking does (each piece between
 * "<channel|>" tags is cut at its first "<|channel>"), then trimmed;
 * reasoning_content is not written. The generation prompt is
 * "<|turn>model\n", followed, unless thinking is on (CHAT_THINK_ON; unset
 * is off, as the template's default), by the empty thought channel
 * "<|channel>thought\n<channel|>". Refused with an error naming the
 * format: tools, tool_calls and "tool" messages (the template's tool
 * declarations are not rendered here), and any other role. */
char *chat_render(chat_format f, const chat_message *m, int n, int add_generation_prompt,
                  chat_think think);

/* CHAT_HARMONY with its system message fields (o NULL: all defaults; chat_render
 * of CHAT_HARMONY is this with NULL). Renders as gpt-oss's chat_template.jinja
 * does: the system message (identity, "Knowledge cutoff: 2024-06", the date,
 * "Reasoning: EFFORT", the valid channels), a first "system" or "developer"
 * message as the developer message ("# Instructions"), user turns, earlier
 * assistant turns as their final channel only (reasoning dropped), a last
 * assistant turn without the generation prompt with its reasoning_content as
 * the analysis channel and <|return|>; the generation prompt is
 * "<|start|>assistant". Refused (NULL + error): a later system/developer
 * message (the template drops it silently), "tool" messages, tool_calls and
 * tools (not implemented yet), and content holding
 * "<|channel|>analysis<|message|>" or "<|channel|>final<|message|>" (the
 * template raises). The think switch does not apply. */
char *chat_render_harmony(const chat_message *m, int n, const chat_harmony_opts *o, int add_generation_prompt);

/* chat_render with the functions the model may call: tools_json is a JSON
 * array of OpenAI tool objects ({"type": "function", "function": {...}}),
 * NULL or "[]" for none. Qwen3 writes each into the system prompt as its
 * template's tojson does (Python's json.dumps: ", " and ": ", keys in the
 * given order, non-ASCII as is; a number as its shortest round-trip form,
 * an integral one without ".0"). Llama-3: tools are an error. The objects
 * are not checked here beyond being JSON (the server checks them). */
char *chat_render_tools(chat_format f, const chat_message *m, int n, const char *tools_json,
                        int add_generation_prompt, chat_think think);

/* The text that follows a generated answer (its tokens as generated, the
 * stop token not included) to close that assistant turn and open the next:
 * the end of the turn, the user message `user` as a user turn, and the
 * generation prompt (CHAT_QWEN3 with CHAT_THINK_OFF: the empty think block;
 * CHAT_HARMONY: "<|end|>", the user turn, "<|start|>assistant": the answer
 * keeps its analysis message, which a full render drops).
 * prompt + answer + chat_next_turn() is chat_render() of the longer
 * conversation, except that Qwen3's template drops the think block of
 * earlier answers while this keeps what the model read and wrote (with
 * thinking off: the empty block). So a chat can extend its cached tokens
 * instead of re-rendering, and reuse all of them. CHAT_GEMMA4(_EARLY):
 * "<turn|>\n", the user turn (trimmed), "<|turn>model\n" and, unless
 * thinking is on, the empty thought channel; the full render drops the
 * earlier answer's thought channel, which this keeps as generated.
 * malloc'd; NULL + error on an unknown format. */
char *chat_next_turn(chat_format f, const char *user, chat_think think);

#endif
