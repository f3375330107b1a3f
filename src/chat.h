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
    const chat_tool_call *tool_calls; /* assistant: n_tool_calls of them */
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
 * <eos>), for Gemma 4 {"<turn|>", "<eos>", "<|tool_response>", NULL} (its
 * end of turn, end of text, and the token after its tool calls, where the
 * caller's results go: llama.cpp ends generation on it too), for the
 * others NULL (their eos_token says it). At most CHAT_MAX_STOP of them. */
#define CHAT_MAX_STOP 3
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
 * when thinking is on, there are tools, or the first message is "system" or
 * "developer" (its content trimmed), opened with "<|think|>" when thinking
 * is on (CHAT_GEMMA4: "<|think|>\n"), closed by the tool declarations
 * (chat_render_tools); then each message "<|turn>ROLE\n" + content +
 * "<turn|>\n", ROLE "model" for assistant and the role as given for system
 * / developer / user; a user's (system's) content trimmed (Python
 * str.strip()), an assistant's with every thinking-channel span taken out
 * as the template's strip_thinking does (each piece between "<channel|>"
 * tags is cut at its first "<|channel>"), then trimmed; reasoning_content
 * is not written (but see tool calls). The generation prompt is
 * "<|turn>model\n" (not after tool results: the model's turn goes on),
 * followed, unless thinking is on (CHAT_THINK_ON; unset is off, as the
 * template's default), by the empty thought channel "<|channel>thought\n<channel|>".
 * Tool calls: the templates take a tool's results from a field of the
 * assistant message that made the calls (tool_responses), not from "tool"
 * messages, so the "tool" messages right after an assistant message with
 * tool_calls are folded into it, the k-th answering its k-th call (named
 * after it; more results than calls is an error), and an assistant message
 * without calls that follows them with content becomes the content of that
 * same turn (the model's answer after reading the results); the calling
 * message's own content is then dropped (the template writes a turn's
 * text after its calls and results, where the model never wrote it). A
 * "tool" message anywhere else is an error, as is any other role. A turn
 * with calls is "<|tool_call>call:NAME{ARGS}<tool_call|>" per call (ARGS:
 * the arguments object's members sorted by key, case-insensitively, as
 * key:value in the template's own notation, strings between <|"|>; text
 * that is not a JSON object as it is), then "<|tool_response>response:NAME{...}
 * <tool_response|>" per result (an object result's members, any other JSON
 * value as {value:...}, text that is not JSON as a string), then the
 * content, and "<turn|>\n" unless it ends with results and has no
 * content. CHAT_GEMMA4 also writes a call turn's reasoning_content, when
 * it comes after the last user message, as "<|channel>thought\n...<channel|>"
 * before the calls, and does not open a new model turn for calls that
 * follow results. Values are written as the templates write the Python
 * values json.loads gives (numbers as Python prints them: 1 and 1.0
 * differ); refused with an error: JSON that Python reads but that would not
 * come back the same (NaN, Infinity, a key twice, U+0000 or a lone
 * surrogate in a string), and what the template does with Python's repr()
 * of strings beyond printable ASCII or str.lower()/upper() of letters
 * beyond ASCII where it matters (dictsort's order, "type" names). */
char *chat_render(chat_format f, const chat_message *m, int n, int add_generation_prompt,
                  chat_think think);

/* CHAT_HARMONY with its system message fields (o NULL: all defaults) and
 * tools (tools_json as for chat_render_tools; chat_render_tools of
 * CHAT_HARMONY is this with o NULL). Renders as gpt-oss's chat_template.jinja
 * does: the system message (identity, "Knowledge cutoff: 2024-06", the date,
 * "Reasoning: EFFORT", the valid channels and, with tools, "Calls to these
 * tools must go to the commentary channel: 'functions'."), the developer
 * message when a first "system" or "developer" message has content
 * ("# Instructions") or there are tools ("# Tools": the namespace
 * functions { ... } of one TypeScript-like type per function, from its
 * JSON schema as the template's render_typescript_type writes it, its
 * whitespace included), user turns, earlier assistant turns as their final
 * channel only (reasoning dropped), a last assistant turn without the
 * generation prompt with its reasoning_content as the analysis channel and
 * <|return|>; the generation prompt is "<|start|>assistant". An assistant
 * message with a tool call is "<|start|>assistant to=functions.NAME<|channel|>commentary
 * json<|message|>ARGS<|call|>" (ARGS: the arguments object as Python's
 * json.dumps writes it, text that is not a JSON object as a JSON string),
 * preceded, unless an assistant message without calls comes later, by its
 * content or else its reasoning_content as the analysis channel; a "tool"
 * message is "<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>"
 * + its content as a JSON string + "<|end|>", NAME the last call's.
 * Refused (NULL + error): a later system/developer message (the template
 * drops it silently), two or more calls in one message (the template writes
 * the first only), a "tool" message with no call before it since the last
 * answer, a call message with both content and reasoning_content, content
 * holding "<|channel|>analysis<|message|>" or "<|channel|>final<|message|>"
 * (these three the template raises on), and tools the template cannot
 * write (a function without a string description, a schema nested deeper
 * than 64, JSON as chat_render_tools refuses it). The think switch does not
 * apply. */
char *chat_render_harmony(const chat_message *m, int n, const char *tools_json, const chat_harmony_opts *o,
                          int add_generation_prompt);

/* chat_render with the functions the model may call: tools_json is a JSON
 * array of OpenAI tool objects ({"type": "function", "function": {...}}),
 * NULL or "[]" for none, read as Python's json.loads reads it (a number
 * keeps its literal: 1 and 1.0 are written as Python writes an int and a
 * float; NaN, Infinity, a key twice in an object, U+0000 or a lone
 * surrogate in a string and nesting deeper than 64 are refused). Qwen3
 * writes each into the system prompt as its template's tojson does
 * (Python's json.dumps: ", " and ": ", keys in the given order, non-ASCII
 * as is). Harmony and Gemma 4 write them as their templates do (see
 * above). Llama-3 and Gemma 3: tools are an error. The objects are not
 * checked here beyond what the template needs (the server checks them). */
char *chat_render_tools(chat_format f, const chat_message *m, int n, const char *tools_json,
                        int add_generation_prompt, chat_think think);

/* chat_render_tools with the harmony template's options (ho NULL: its
 * defaults). ho's fields apply to CHAT_HARMONY only: any of them set with
 * another format is an error naming it (no other template reads them), as is
 * a reasoning_effort other than "low", "medium" or "high" (gpt-oss's three),
 * a date not of the form YYYY-MM-DD, and a model_identity holding "<|" (it
 * would open a harmony token in the system message). */
char *chat_render_opts(chat_format f, const chat_message *m, int n, const char *tools_json,
                       int add_generation_prompt, chat_think think, const chat_harmony_opts *ho);

/* NULL when ho is valid for a harmony render, else the message (static) of
 * chat_render_opts's checks above. */
const char *chat_harmony_check(const chat_harmony_opts *ho);

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
