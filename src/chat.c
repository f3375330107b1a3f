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
 * Not implemented: the template's `tools` list (system prompt with function
 * signatures) and assistant `tool_calls`; callers wanting them must pass the
 * rendered text in the content. Roles other than system/user/assistant/tool
 * are an error here (the template silently drops them).
 *
 * CHAT_LLAMA3 is the Llama-3 Instruct template: <|begin_of_text|>, then per
 * message "<|start_header_id|>ROLE<|end_header_id|>\n\n" + content with
 * white space trimmed (Python str.strip()) + "<|eot_id|>", and the generation
 * prompt "<|start_header_id|>assistant<|end_header_id|>\n\n". The Llama-3.1
 * template's date/tools system preamble is not reproduced. */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

/* growing output string, always NUL-terminated once anything is put */
typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) b->s = dfl_realloc(b->s, b->cap = (b->n + n + 1) * 2 + 256);
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* A piece of a string: s[0..n). */
typedef struct {
    const char *s;
    size_t n;
} span;

static span whole(const char *s) { return (span){s, strlen(s)}; }
static void put_span(sbuf *b, span x) { put(b, x.s, x.n); }

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

int chat_detect(const char *template_text) {
    if (!template_text) {
        dfl_seterr("chat_detect: the model has no chat template");
        return -1;
    }
    if (strstr(template_text, "<|im_start|>")) return CHAT_QWEN3;
    if (strstr(template_text, "<|start_header_id|>")) return CHAT_LLAMA3;
    dfl_seterr("chat_detect: unknown chat template (neither ChatML \"<|im_start|>\" nor Llama-3 "
               "\"<|start_header_id|>\")");
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
    }
    return 0;
}

static int is_role(const chat_message *m, const char *role) { return strcmp(m->role, role) == 0; }

static char *render_qwen3(const chat_message *m, int n, int add_generation_prompt, chat_think think) {
    sbuf b = {0};
    puts_(&b, "");
    if (is_role(&m[0], "system")) {
        puts_(&b, "<|im_start|>system\n");
        puts_(&b, m[0].content);
        puts_(&b, "<|im_end|>\n");
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
            puts_(&b, "<|im_start|>");
            puts_(&b, msg->role);
            puts_(&b, "\n");
            puts_(&b, msg->content);
            puts_(&b, "<|im_end|>\n");
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
            puts_(&b, "<|im_start|>assistant\n");
            if (i > last_query && (last || reasoning.n > 0)) {
                puts_(&b, "<think>\n");
                put_span(&b, strip_nl(reasoning));
                puts_(&b, "\n</think>\n\n");
                put_span(&b, lstrip_nl(content));
            } else {
                put_span(&b, content);
            }
            puts_(&b, "<|im_end|>\n");
        } else if (is_role(msg, "tool")) {
            if (i == 0 || !is_role(&m[i - 1], "tool")) puts_(&b, "<|im_start|>user");
            puts_(&b, "\n<tool_response>\n");
            puts_(&b, msg->content);
            puts_(&b, "\n</tool_response>");
            if (last || !is_role(&m[i + 1], "tool")) puts_(&b, "<|im_end|>\n");
        } /* else: the first system message, written above */
    }
    if (add_generation_prompt) {
        puts_(&b, "<|im_start|>assistant\n");
        if (think == CHAT_THINK_OFF) puts_(&b, "<think>\n\n</think>\n\n");
    }
    return b.s;
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
    sbuf b = {0};
    puts_(&b, "<|begin_of_text|>");
    for (int i = 0; i < n; i++) {
        puts_(&b, "<|start_header_id|>");
        puts_(&b, m[i].role);
        puts_(&b, "<|end_header_id|>\n\n");
        put_span(&b, py_strip(whole(m[i].content)));
        puts_(&b, "<|eot_id|>");
    }
    if (add_generation_prompt) puts_(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return b.s;
}

char *chat_render(chat_format f, const chat_message *m, int n, int add_generation_prompt,
                  chat_think think) {
    if (f != CHAT_QWEN3 && f != CHAT_LLAMA3) {
        dfl_seterr("chat_render: unknown chat format %d", (int)f);
        return NULL;
    }
    if (check_messages(m, n, f == CHAT_QWEN3) != 0) return NULL;
    return f == CHAT_QWEN3 ? render_qwen3(m, n, add_generation_prompt, think)
                           : render_llama3(m, n, add_generation_prompt);
}

char *chat_next_turn(chat_format f, const char *user, chat_think think) {
    sbuf b = {0};
    puts_(&b, "");
    if (f == CHAT_QWEN3) {
        puts_(&b, "<|im_end|>\n<|im_start|>user\n");
        puts_(&b, user);
        puts_(&b, "<|im_end|>\n<|im_start|>assistant\n");
        if (think == CHAT_THINK_OFF) puts_(&b, "<think>\n\n</think>\n\n");
    } else if (f == CHAT_LLAMA3) {
        puts_(&b, "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n");
        put_span(&b, py_strip(whole(user)));
        puts_(&b, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    } else {
        free(b.s);
        dfl_seterr("chat_next_turn: unknown chat format %d", (int)f);
        return NULL;
    }
    return b.s;
}
