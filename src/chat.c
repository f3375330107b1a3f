/* chat.c - chat templates written out in C (see chat.h).
 *
 * CHAT_QWEN3 follows the Qwen3 template in models/qwen3-tokenizer/
 * tokenizer_config.json (the version Qwen3 was released with) as jinja2
 * renders it with trim_blocks and lstrip_blocks, the way transformers does:
 *   - a first "system" message opens the prompt; later ones are ordinary turns;
 *   - last_query_index: the last "user" message whose content is not wrapped
 *     in <tool_response>...</tool_response> (n - 1 if there is none);
 *   - an assistant message takes its reasoning from reasoning_content when
 *     given, else from a "<think>...</think>" prefix of its content;
 *   - assistant turns after last_query_index carry a think block (empty if
 *     there is no reasoning) when they are the last message or have
 *     reasoning; earlier ones keep only the answer;
 *   - consecutive "tool" messages share one user turn of <tool_response> blocks;
 *   - the generation prompt is "<|im_start|>assistant\n", followed by an empty
 *     think block only when thinking is switched off (CHAT_THINK_OFF).
 *   - with tools, the system turn holds the "# Tools" section: the first
 *     system message's content and a blank line, then one tojson line per
 *     tool inside <tools></tools> and the <tool_call> instructions;
 *   - an assistant message's tool_calls follow its content as
 *     <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call> blocks,
 *     separated by a newline (and from the content, when there is some).
 * Roles other than system/user/assistant/tool are an error here (the
 * template silently drops them).
 *
 * CHAT_LLAMA3 is the Llama-3 Instruct template: <|begin_of_text|>, then per
 * message "<|start_header_id|>ROLE<|end_header_id|>\n\n" + content with
 * white space trimmed (Python str.strip()) + "<|eot_id|>", and the generation
 * prompt "<|start_header_id|>assistant<|end_header_id|>\n\n". The Llama-3.1
 * template's date/tools system preamble is not reproduced.
 *
 * CHAT_GEMMA is the Gemma 3 template of models/gemma3-tokenizer/tokenizer_config.json
 * (chat.h describes it); its pieces are literals of that template.
 *
 * CHAT_GEMMA4 and CHAT_GEMMA4_EARLY are Gemma 4's two templates named in
 * tests/fixtures/chat/gemma4/README (chat.h describes them; the README says
 * where they come from); their pieces are the literals those templates write.
 *
 * CHAT_HARMONY is gpt-oss's chat_template.jinja (models/gptoss-tokenizer/,
 * upstream 2025-08-08) for messages without tools, as chat.h describes it;
 * every piece below is a literal of that template. */
#include "chat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cJSON.h>

#include "util.h"

/* A piece of a string: s[0..n). */
typedef struct {
    const char *s;
    size_t n;
} span;

static span whole(const char *s) { return (span){s, strlen(s)}; }
static void put_span(dfl_buf *b, span x) { dfl_buf_add(b, x.s, x.n); }

/* Python's s.lstrip('\n'), s.rstrip('\n'), s.strip('\n') */
static span lstrip_nl(span x) {
    while (x.n && x.s[0] == '\n') x.s++, x.n--;
    return x;
}
static span rstrip_nl(span x) {
    while (x.n && x.s[x.n - 1] == '\n') x.n--;
    return x;
}
static span strip_nl(span x) { return rstrip_nl(lstrip_nl(x)); }

/* Offset of the first / last occurrence of needle in x, or -1. */
static long find_first(span x, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= x.n; i++)
        if (memcmp(x.s + i, needle, k) == 0) return (long)i;
    return -1;
}
static long find_last(span x, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = x.n >= k ? x.n - k + 1 : 0; i-- > 0;)
        if (memcmp(x.s + i, needle, k) == 0) return (long)i;
    return -1;
}

static int starts_with(span x, const char *p) {
    size_t k = strlen(p);
    return x.n >= k && memcmp(x.s, p, k) == 0;
}
static int ends_with(span x, const char *p) {
    size_t k = strlen(p);
    return x.n >= k && memcmp(x.s + x.n - k, p, k) == 0;
}

/* ---- Python's json.dumps(x, ensure_ascii=False): the template's tojson ---- */

static void py_json_str(dfl_buf *b, const char *s) {
    dfl_buf_char(b, '"');
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
        char e[8];
        switch (*u) {
        case '"': dfl_buf_str(b, "\\\""); break;
        case '\\': dfl_buf_str(b, "\\\\"); break;
        case '\n': dfl_buf_str(b, "\\n"); break;
        case '\r': dfl_buf_str(b, "\\r"); break;
        case '\t': dfl_buf_str(b, "\\t"); break;
        case '\b': dfl_buf_str(b, "\\b"); break;
        case '\f': dfl_buf_str(b, "\\f"); break;
        default:
            if (*u < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", *u);
                dfl_buf_str(b, e);
            } else {
                dfl_buf_add(b, (const char *)u, 1);
            }
        }
    }
    dfl_buf_char(b, '"');
}

static void py_json_num(dfl_buf *b, double v) {
    char t[40];
    if (v == floor(v) && fabs(v) < 9007199254740992.0) { /* an integer (cJSON cannot tell 1 from 1.0) */
        snprintf(t, sizeof t, "%.0f", v);
    } else if (!isfinite(v)) {
        snprintf(t, sizeof t, "%s", isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
    } else { /* Python's repr: the shortest form that reads back the same */
        for (int p = 1; p <= 17; p++) {
            snprintf(t, sizeof t, "%.*g", p, v);
            if (strtod(t, NULL) == v) break;
        }
    }
    dfl_buf_str(b, t);
}

static void py_json(dfl_buf *b, const cJSON *x) {
    if (cJSON_IsNull(x)) dfl_buf_str(b, "null");
    else if (cJSON_IsTrue(x)) dfl_buf_str(b, "true");
    else if (cJSON_IsFalse(x)) dfl_buf_str(b, "false");
    else if (cJSON_IsNumber(x)) py_json_num(b, x->valuedouble);
    else if (cJSON_IsString(x)) py_json_str(b, x->valuestring);
    else if (cJSON_IsArray(x) || cJSON_IsObject(x)) {
        int obj = cJSON_IsObject(x);
        dfl_buf_str(b, obj ? "{" : "[");
        for (const cJSON *c = x->child; c; c = c->next) {
            if (c != x->child) dfl_buf_str(b, ", ");
            if (obj) {
                py_json_str(b, c->string ? c->string : "");
                dfl_buf_str(b, ": ");
            }
            py_json(b, c);
        }
        dfl_buf_str(b, obj ? "}" : "]");
    }
}

static int is_harmony(const char *t) {
    return t && strstr(t, "<|start|>") && strstr(t, "<|channel|>") && strstr(t, "<|message|>");
}

static int is_gemma(const char *t) { return t && strstr(t, "<start_of_turn>") && strstr(t, "<end_of_turn>"); }

static int is_gemma4(const char *t) { return t && strstr(t, "<|turn>") && strstr(t, "<turn|>"); }

const char *const *chat_stop_tokens(const char *template_text) {
    static const char *const harmony[CHAT_MAX_STOP + 1] = {"<|return|>", "<|call|>", NULL};
    static const char *const gemma[CHAT_MAX_STOP + 1] = {"<end_of_turn>", "<eos>", NULL};
    static const char *const gemma4[CHAT_MAX_STOP + 1] = {"<turn|>", "<eos>", NULL};
    return is_harmony(template_text) ? harmony
           : is_gemma4(template_text) ? gemma4
           : is_gemma(template_text)  ? gemma
                                      : NULL;
}

/* Which of Gemma 4's templates t is (is_gemma4(t) holds): the think switch's
 * literal tells the two we render apart; the 2026-07-09 rewrite's own
 * names mark a revision whose rules differ (merged model turns,
 * preserve_thinking). */
static int gemma4_revision(const char *t) {
    static const char *const later_marks[] = {"preserve_thinking", "continue_same_model_turn", "Canonical Chat Template"};
    for (int i = 0; i < 3; i++)
        if (strstr(t, later_marks[i])) {
            dfl_seterr("chat_detect: this Gemma 4 chat template is a revision dflash does not render yet (it has "
                       "\"%s\"; known: the release template, \"<|think|>\", and the later one, \"<|think|>\\n\")",
                       later_marks[i]);
            return -1;
        }
    if (strstr(t, "'<|think|>\\n'")) return CHAT_GEMMA4;
    if (strstr(t, "'<|think|>'")) return CHAT_GEMMA4_EARLY;
    dfl_seterr("chat_detect: a Gemma 4 chat template (\"<|turn>\"/\"<turn|>\") without the think switch "
               "'<|think|>' of the known revisions: not supported");
    return -1;
}

int chat_detect(const char *template_text) {
    if (!template_text) {
        dfl_seterr("chat_detect: the model has no chat template");
        return -1;
    }
    if (is_harmony(template_text)) return CHAT_HARMONY;
    if (is_gemma4(template_text)) return gemma4_revision(template_text);
    if (is_gemma(template_text)) return CHAT_GEMMA;
    if (strstr(template_text, "<|im_start|>")) return CHAT_QWEN3;
    if (strstr(template_text, "<|start_header_id|>")) return CHAT_LLAMA3;
    dfl_seterr("chat_detect: unknown chat template (not ChatML \"<|im_start|>\", Llama-3 "
               "\"<|start_header_id|>\", harmony \"<|start|>\"/\"<|channel|>\", Gemma 3 "
               "\"<start_of_turn>\"/\"<end_of_turn>\" or Gemma 4 \"<|turn>\"/\"<turn|>\")");
    return -1;
}

static int check_messages(const chat_message *m, int n, int qwen) {
    if (n < 1 || !m) {
        dfl_seterr("chat_render: no messages");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (!m[i].role || !m[i].role[0]) {
            dfl_seterr("chat_render: message %d has no role", i);
            return -1;
        }
        if (!m[i].content) {
            dfl_seterr("chat_render: message %d (%s) has no content", i, m[i].role);
            return -1;
        }
        const char *r = m[i].role;
        if (qwen && strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") &&
            strcmp(r, "tool")) {
            dfl_seterr("chat_render: message %d: unknown role \"%s\"", i, r);
            return -1;
        }
        if (m[i].n_tool_calls < 0 || (m[i].n_tool_calls > 0 && (!m[i].tool_calls || strcmp(r, "assistant")))) {
            dfl_seterr("chat_render: message %d (%s): tool_calls only on assistant messages", i, r);
            return -1;
        }
        for (int k = 0; k < m[i].n_tool_calls; k++)
            if (!m[i].tool_calls[k].name || !m[i].tool_calls[k].arguments) {
                dfl_seterr("chat_render: message %d: tool call %d has no name or arguments", i, k);
                return -1;
            }
    }
    return 0;
}

static int is_role(const chat_message *m, const char *role) { return strcmp(m->role, role) == 0; }

static char *render_qwen3(const chat_message *m, int n, const cJSON *tools, int add_generation_prompt,
                          chat_think think) {
    dfl_buf b = {0};
    if (tools && tools->child) {
        dfl_buf_str(&b, "<|im_start|>system\n");
        if (is_role(&m[0], "system")) {
            dfl_buf_str(&b, m[0].content);
            dfl_buf_str(&b, "\n\n");
        }
        dfl_buf_str(&b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
                  "provided with function signatures within <tools></tools> XML tags:\n<tools>");
        for (const cJSON *t = tools->child; t; t = t->next) {
            dfl_buf_str(&b, "\n");
            py_json(&b, t);
        }
        dfl_buf_str(&b, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                  "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                  "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (is_role(&m[0], "system")) {
        dfl_buf_str(&b, "<|im_start|>system\n");
        dfl_buf_str(&b, m[0].content);
        dfl_buf_str(&b, "<|im_end|>\n");
    }
    /* the last real user query; a user turn that only carries tool output does not count */
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        span c = whole(m[i].content);
        if (is_role(&m[i], "user") && !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        const chat_message *msg = &m[i];
        int last = i == n - 1;
        if (is_role(msg, "user") || (is_role(msg, "system") && i > 0)) {
            dfl_buf_str(&b, "<|im_start|>");
            dfl_buf_str(&b, msg->role);
            dfl_buf_str(&b, "\n");
            dfl_buf_str(&b, msg->content);
            dfl_buf_str(&b, "<|im_end|>\n");
        } else if (is_role(msg, "assistant")) {
            span content = whole(msg->content), reasoning = {"", 0};
            if (msg->reasoning_content) {
                reasoning = whole(msg->reasoning_content);
            } else if (find_first(content, "</think>") >= 0) {
                /* content.split('</think>')[-1].lstrip('\n') */
                long e = find_last(content, "</think>");
                span after = {content.s + e + 8, content.n - (size_t)e - 8};
                /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                span before = rstrip_nl((span){content.s, (size_t)find_first(content, "</think>")});
                long t = find_last(before, "<think>");
                if (t >= 0) before = (span){before.s + t + 7, before.n - (size_t)t - 7};
                reasoning = lstrip_nl(before);
                content = lstrip_nl(after);
            }
            dfl_buf_str(&b, "<|im_start|>assistant\n");
            if (i > last_query && (last || reasoning.n > 0)) {
                dfl_buf_str(&b, "<think>\n");
                put_span(&b, strip_nl(reasoning));
                dfl_buf_str(&b, "\n</think>\n\n");
                put_span(&b, lstrip_nl(content));
            } else {
                put_span(&b, content);
            }
            for (int k = 0; k < msg->n_tool_calls; k++) {
                if (k > 0 || content.n > 0) dfl_buf_str(&b, "\n");
                dfl_buf_str(&b, "<tool_call>\n{\"name\": \"");
                dfl_buf_str(&b, msg->tool_calls[k].name);
                dfl_buf_str(&b, "\", \"arguments\": ");
                dfl_buf_str(&b, msg->tool_calls[k].arguments);
                dfl_buf_str(&b, "}\n</tool_call>");
            }
            dfl_buf_str(&b, "<|im_end|>\n");
        } else if (is_role(msg, "tool")) {
            if (i == 0 || !is_role(&m[i - 1], "tool")) dfl_buf_str(&b, "<|im_start|>user");
            dfl_buf_str(&b, "\n<tool_response>\n");
            dfl_buf_str(&b, msg->content);
            dfl_buf_str(&b, "\n</tool_response>");
            if (last || !is_role(&m[i + 1], "tool")) dfl_buf_str(&b, "<|im_end|>\n");
        } /* else: the first system message, written above */
    }
    if (add_generation_prompt) {
        dfl_buf_str(&b, "<|im_start|>assistant\n");
        if (think == CHAT_THINK_OFF) dfl_buf_str(&b, "<think>\n\n</think>\n\n");
    }
    return dfl_buf_take(&b);
}

/* Length of the UTF-8 white-space character at s (Python str.isspace), or 0. */
static size_t py_space(const unsigned char *s, size_t n) {
    if (n >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x20))) return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n >= 3 && s[0] == 0xe1 && s[1] == 0x9a && s[2] == 0x80) return 3; /* U+1680 */
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x80 && /* U+2000-200A, U+2028, U+2029, U+202F */
        ((s[2] >= 0x80 && s[2] <= 0x8a) || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf))
        return 3;
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) return 3; /* U+205F */
    if (n >= 3 && s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80) return 3; /* U+3000 */
    return 0;
}

/* Python str.strip(): white space off both ends. */
static span py_strip(span x) {
    const unsigned char *u = (const unsigned char *)x.s;
    size_t a = 0, b = x.n, k;
    while (a < b && (k = py_space(u + a, b - a)) > 0) a += k;
    for (;;) { /* from the end: try the 1-, 2- and 3-byte forms ending at b */
        size_t got = 0;
        for (size_t l = 1; l <= 3 && l <= b - a && !got; l++)
            if (py_space(u + b - l, l) == l) got = l;
        if (!got) break;
        b -= got;
    }
    return (span){x.s + a, b - a};
}

static char *render_llama3(const chat_message *m, int n, int add_generation_prompt) {
    dfl_buf b = {0};
    dfl_buf_str(&b, "<|begin_of_text|>");
    for (int i = 0; i < n; i++) {
        dfl_buf_str(&b, "<|start_header_id|>");
        dfl_buf_str(&b, m[i].role);
        dfl_buf_str(&b, "<|end_header_id|>\n\n");
        put_span(&b, py_strip(whole(m[i].content)));
        dfl_buf_str(&b, "<|eot_id|>");
    }
    if (add_generation_prompt) dfl_buf_str(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return dfl_buf_take(&b);
}

/* Gemma 3's template (chat.h). */
static char *render_gemma(const chat_message *m, int n, int add_generation_prompt) {
    int first = is_role(&m[0], "system");
    for (int i = 0; i < n; i++)
        if (m[i].n_tool_calls > 0) {
            dfl_seterr("chat_render: message %d: tool_calls are not supported with the Gemma template (it has "
                       "no tool calls)", i);
            return NULL;
        }
    for (int i = first; i < n; i++)
        if (is_role(&m[i], "user") != ((i - first) % 2 == 0)) {
            dfl_seterr("chat_render: message %d (%s): Conversation roles must alternate "
                       "user/assistant/user/assistant/... (the Gemma template raises)", i, m[i].role);
            return NULL;
        }
    dfl_buf b = {0};
    dfl_buf_str(&b, "<bos>");
    for (int i = first; i < n; i++) {
        dfl_buf_str(&b, "<start_of_turn>");
        dfl_buf_str(&b, is_role(&m[i], "assistant") ? "model" : m[i].role);
        dfl_buf_str(&b, "\n");
        if (first && i == first) { /* the system prompt opens the first turn */
            dfl_buf_str(&b, m[0].content);
            dfl_buf_str(&b, "\n\n");
        }
        put_span(&b, py_strip(whole(m[i].content)));
        dfl_buf_str(&b, "<end_of_turn>\n");
    }
    if (add_generation_prompt) dfl_buf_str(&b, "<start_of_turn>model\n");
    return dfl_buf_take(&b);
}

/* Gemma 4's strip_thinking macro: the pieces between "<channel|>" tags,
 * each cut at its first "<|channel>", joined, then trimmed. */
static void gemma4_strip_thinking(dfl_buf *b, const char *text) {
    static const char OPEN[] = "<|channel>", CLOSE[] = "<channel|>";
    dfl_buf t = {0};
    dfl_buf_str(&t, "");
    span rest = whole(text);
    for (;;) {
        long c = find_first(rest, CLOSE);
        span part = {rest.s, c >= 0 ? (size_t)c : rest.n};
        long o = find_first(part, OPEN);
        dfl_buf_add(&t, part.s, o >= 0 ? (size_t)o : part.n);
        if (c < 0) break;
        rest = (span){rest.s + c + strlen(CLOSE), rest.n - (size_t)c - strlen(CLOSE)};
    }
    if (t.s) put_span(b, py_strip((span){t.s, t.n}));
    dfl_buf_free(&t);
}

static const char *gemma4_name(chat_format f) { return f == CHAT_GEMMA4 ? "Gemma 4" : "Gemma 4 (early)"; }

/* Gemma 4's templates (chat.h). */
static char *render_gemma4(chat_format f, const chat_message *m, int n, int add_generation_prompt,
                           chat_think think) {
    for (int i = 0; i < n; i++) {
        if (m[i].n_tool_calls > 0 || is_role(&m[i], "tool")) {
            dfl_seterr("chat_render: message %d (%s): tool calls and tool messages are not supported yet with the "
                       "%s template", i, m[i].role, gemma4_name(f));
            return NULL;
        }
        if (!is_role(&m[i], "system") && !is_role(&m[i], "developer") && !is_role(&m[i], "user") &&
            !is_role(&m[i], "assistant")) {
            dfl_seterr("chat_render: message %d: unknown role \"%s\" (the %s template takes system, developer, user "
                       "and assistant)", i, m[i].role, gemma4_name(f));
            return NULL;
        }
    }
    int first = is_role(&m[0], "system") || is_role(&m[0], "developer");
    dfl_buf b = {0};
    dfl_buf_str(&b, "<bos>");
    if (think == CHAT_THINK_ON || first) {
        dfl_buf_str(&b, "<|turn>system\n");
        if (think == CHAT_THINK_ON) dfl_buf_str(&b, f == CHAT_GEMMA4 ? "<|think|>\n" : "<|think|>");
        if (first) put_span(&b, py_strip(whole(m[0].content)));
        dfl_buf_str(&b, "<turn|>\n");
    }
    for (int i = first; i < n; i++) {
        int model = is_role(&m[i], "assistant");
        dfl_buf_str(&b, "<|turn>");
        dfl_buf_str(&b, model ? "model" : m[i].role);
        dfl_buf_str(&b, "\n");
        if (model) gemma4_strip_thinking(&b, m[i].content);
        else put_span(&b, py_strip(whole(m[i].content)));
        dfl_buf_str(&b, "<turn|>\n");
    }
    if (add_generation_prompt) {
        dfl_buf_str(&b, "<|turn>model\n");
        if (think != CHAT_THINK_ON) dfl_buf_str(&b, "<|channel>thought\n<channel|>");
    }
    return dfl_buf_take(&b);
}

static const char HARMONY_IDENTITY[] = "You are ChatGPT, a large language model trained by OpenAI.";

char *chat_render_harmony(const chat_message *m, int n, const chat_harmony_opts *o, int add_generation_prompt) {
    if (check_messages(m, n, 0) != 0) return NULL;
    chat_harmony_opts none = {0};
    if (!o) o = &none;
    char today[32];
    const char *date = o->date;
    if (!date) { /* strftime_now("%Y-%m-%d"): transformers' datetime.now(), local time */
        time_t now = time(NULL);
        struct tm tm;
        if (!localtime_r(&now, &tm) || !strftime(today, sizeof today, "%Y-%m-%d", &tm)) {
            dfl_seterr("chat_render: cannot read today's date");
            return NULL;
        }
        date = today;
    }
    int first = is_role(&m[0], "system") || is_role(&m[0], "developer");
    for (int i = 0; i < n; i++) {
        const char *r = m[i].role;
        if (m[i].n_tool_calls > 0 || is_role(&m[i], "tool")) {
            dfl_seterr("chat_render: message %d (%s): tool calls and tool messages are not supported yet with the "
                       "harmony (gpt-oss) template", i, r);
            return NULL;
        }
        if (i >= first && (is_role(&m[i], "system") || is_role(&m[i], "developer"))) {
            dfl_seterr("chat_render: message %d: a %s message after the first message (the harmony template "
                       "would drop it)", i, r);
            return NULL;
        }
        if (!is_role(&m[i], "system") && !is_role(&m[i], "developer") && !is_role(&m[i], "user") &&
            !is_role(&m[i], "assistant")) {
            dfl_seterr("chat_render: message %d: unknown role \"%s\"", i, r);
            return NULL;
        }
        if (is_role(&m[i], "assistant")) {
            static const char *const tags[] = {"<|channel|>analysis<|message|>", "<|channel|>final<|message|>"};
            for (int k = 0; k < 2; k++) {
                if (strstr(m[i].content, tags[k]) ||
                    (m[i].reasoning_content && strstr(m[i].reasoning_content, tags[k]))) {
                    dfl_seterr("chat_render: message %d (assistant): its %s holds \"%s\"; give the analysis as "
                               "reasoning_content and the final answer as content", i,
                               strstr(m[i].content, tags[k]) ? "content" : "reasoning_content", tags[k]);
                    return NULL;
                }
            }
        }
    }
    dfl_buf b = {0};
    dfl_buf_str(&b, "<|start|>system<|message|>");
    dfl_buf_str(&b, o->model_identity ? o->model_identity : HARMONY_IDENTITY);
    dfl_buf_str(&b, "\nKnowledge cutoff: 2024-06\nCurrent date: ");
    dfl_buf_str(&b, date);
    dfl_buf_str(&b, "\n\nReasoning: ");
    dfl_buf_str(&b, o->reasoning_effort ? o->reasoning_effort : "medium");
    dfl_buf_str(&b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
                    "message.<|end|>");
    if (first && m[0].content[0]) {
        dfl_buf_str(&b, "<|start|>developer<|message|># Instructions\n\n");
        dfl_buf_str(&b, m[0].content);
        dfl_buf_str(&b, "\n\n<|end|>");
    }
    for (int i = first; i < n; i++) {
        if (is_role(&m[i], "user")) {
            dfl_buf_str(&b, "<|start|>user<|message|>");
            dfl_buf_str(&b, m[i].content);
            dfl_buf_str(&b, "<|end|>");
        } else if (i == n - 1 && !add_generation_prompt) { /* a training turn: its reasoning, <|return|> */
            if (m[i].reasoning_content) {
                dfl_buf_str(&b, "<|start|>assistant<|channel|>analysis<|message|>");
                dfl_buf_str(&b, m[i].reasoning_content);
                dfl_buf_str(&b, "<|end|>");
            }
            dfl_buf_str(&b, "<|start|>assistant<|channel|>final<|message|>");
            dfl_buf_str(&b, m[i].content);
            dfl_buf_str(&b, "<|return|>");
        } else { /* an earlier answer: the final channel only */
            dfl_buf_str(&b, "<|start|>assistant<|channel|>final<|message|>");
            dfl_buf_str(&b, m[i].content);
            dfl_buf_str(&b, "<|end|>");
        }
    }
    if (add_generation_prompt) dfl_buf_str(&b, "<|start|>assistant");
    return dfl_buf_take(&b);
}

/* For a format without tools: 0 when tools_json is NULL or an empty array,
 * else -1 + "tools are WHY" (or, not an array, that it must be one). */
static int no_tools(const char *tools_json, const char *why) {
    if (!tools_json) return 0;
    cJSON *tools = cJSON_Parse(tools_json);
    int ok = cJSON_IsArray(tools), any = ok && tools->child;
    cJSON_Delete(tools);
    if (ok && !any) return 0;
    if (ok) dfl_seterr("chat_render: tools are %s", why);
    else dfl_seterr("chat_render: tools must be a JSON array");
    return -1;
}

char *chat_render_tools(chat_format f, const chat_message *m, int n, const char *tools_json,
                        int add_generation_prompt, chat_think think) {
    if (f == CHAT_HARMONY) {
        if (no_tools(tools_json, "not supported yet with the harmony (gpt-oss) template") != 0) return NULL;
        return chat_render_harmony(m, n, NULL, add_generation_prompt);
    }
    if (f == CHAT_GEMMA) {
        if (check_messages(m, n, 0) != 0) return NULL;
        if (no_tools(tools_json, "not supported with the Gemma template (it has none)") != 0) return NULL;
        return render_gemma(m, n, add_generation_prompt);
    }
    if (f == CHAT_GEMMA4 || f == CHAT_GEMMA4_EARLY) {
        if (check_messages(m, n, 0) != 0) return NULL;
        if (no_tools(tools_json, f == CHAT_GEMMA4 ? "not supported yet with the Gemma 4 template"
                                                  : "not supported yet with the Gemma 4 (early) template") != 0)
            return NULL;
        return render_gemma4(f, m, n, add_generation_prompt, think);
    }
    if (f != CHAT_QWEN3 && f != CHAT_LLAMA3) {
        dfl_seterr("chat_render: unknown chat format %d", (int)f);
        return NULL;
    }
    if (check_messages(m, n, f == CHAT_QWEN3) != 0) return NULL;
    cJSON *tools = NULL;
    if (tools_json) {
        tools = cJSON_Parse(tools_json);
        if (!cJSON_IsArray(tools)) {
            cJSON_Delete(tools);
            dfl_seterr("chat_render: tools must be a JSON array");
            return NULL;
        }
    }
    if (f == CHAT_LLAMA3) {
        int calls = 0;
        for (int i = 0; i < n; i++) calls |= m[i].n_tool_calls > 0;
        if ((tools && tools->child) || calls) {
            cJSON_Delete(tools);
            dfl_seterr("chat_render: tools and tool_calls need the Qwen3 (ChatML) template; this model's is Llama-3");
            return NULL;
        }
    }
    char *s = f == CHAT_QWEN3 ? render_qwen3(m, n, tools, add_generation_prompt, think)
                              : render_llama3(m, n, add_generation_prompt);
    cJSON_Delete(tools);
    return s;
}

char *chat_render(chat_format f, const chat_message *m, int n, int add_generation_prompt,
                  chat_think think) {
    return chat_render_tools(f, m, n, NULL, add_generation_prompt, think);
}

char *chat_next_turn(chat_format f, const char *user, chat_think think) {
    dfl_buf b = {0};
    if (f == CHAT_QWEN3) {
        dfl_buf_str(&b, "<|im_end|>\n<|im_start|>user\n");
        dfl_buf_str(&b, user);
        dfl_buf_str(&b, "<|im_end|>\n<|im_start|>assistant\n");
        if (think == CHAT_THINK_OFF) dfl_buf_str(&b, "<think>\n\n</think>\n\n");
    } else if (f == CHAT_HARMONY) {
        dfl_buf_str(&b, "<|end|><|start|>user<|message|>");
        dfl_buf_str(&b, user);
        dfl_buf_str(&b, "<|end|><|start|>assistant");
    } else if (f == CHAT_GEMMA) {
        dfl_buf_str(&b, "<end_of_turn>\n<start_of_turn>user\n");
        put_span(&b, py_strip(whole(user)));
        dfl_buf_str(&b, "<end_of_turn>\n<start_of_turn>model\n");
    } else if (f == CHAT_GEMMA4 || f == CHAT_GEMMA4_EARLY) {
        dfl_buf_str(&b, "<turn|>\n<|turn>user\n");
        put_span(&b, py_strip(whole(user)));
        dfl_buf_str(&b, "<turn|>\n<|turn>model\n");
        if (think != CHAT_THINK_ON) dfl_buf_str(&b, "<|channel>thought\n<channel|>");
    } else if (f == CHAT_LLAMA3) {
        dfl_buf_str(&b, "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n");
        put_span(&b, py_strip(whole(user)));
        dfl_buf_str(&b, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    } else {
        dfl_buf_free(&b);
        dfl_seterr("chat_next_turn: unknown chat format %d", (int)f);
        return NULL;
    }
    return dfl_buf_take(&b);
}
