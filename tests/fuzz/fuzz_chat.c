/* fuzz_chat.c - the chat templates (chat_render, chat_detect) on arbitrary
 * messages. Byte 0 picks the format (bit 7: harmony, or Gemma 3 with bit 6,
 * or Gemma 4 with bits 6 and 0, its early template with bit 5 too; else
 * bit 0 Llama-3 or Qwen3), the generation prompt and thinking, and (bit 4)
 * a fixed tools list; the rest is records separated by 0x1E, each starting
 * with a role byte; an 0x1F inside a record starts its reasoning_content,
 * an 0x1D a tool call (an assistant's): its name, then after an 0x1C its
 * arguments. The whole input is also given to chat_detect as template text
 * and to chat_render_tools as the tools JSON (Qwen3, harmony, Gemma 4).
 * Oracle: no crash or sanitizer report; an unknown role is refused (Qwen3);
 * with valid UTF-8 messages the output is valid UTF-8 and (Qwen3 and
 * harmony, which do not trim; the others do) holds every user message;
 * harmony refuses a later system message and a tool message with no call
 * since the last answer; Gemma starts with <bos>, ends with the generation
 * prompt when asked, and refuses turns that do not alternate; Gemma 4
 * starts with <bos>, ends with its generation prompt (the empty thought
 * channel unless thinking is on) when asked, refuses unknown roles and
 * renders every other list that is not empty and has no tool messages or
 * calls. */
#include "chat.h"
#include "fuzz_common.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *txt = dfl_malloc(size + 1);
    memcpy(txt, data, size);
    txt[size] = 0;
    chat_detect(txt);
    /* the whole input as the tools array (any JSON goes through the tojson writer, harmony's
     * TypeScript types and Gemma 4's declarations) */
    chat_message one = {.role = "user", .content = "q"};
    static const chat_format with[] = {CHAT_QWEN3, CHAT_HARMONY, CHAT_GEMMA4, CHAT_GEMMA4_EARLY};
    static const char *const user_turn[] = {"<|im_start|>user\nq<|im_end|>", "<|start|>user<|message|>q<|end|>",
                                            "<|turn>user\nq<turn|>", "<|turn>user\nq<turn|>"};
    for (int k = 0; k < 4; k++) {
        char *with_tools = chat_render_tools(with[k], &one, 1, txt, 1, CHAT_THINK_OFF);
        if (with_tools && !strstr(with_tools, user_turn[k])) abort();
        free(with_tools);
    }
    /* the whole input as harmony's options: accepted only as the check says, and then
     * written into the system message as given */
    chat_harmony_opts ho[] = {{.reasoning_effort = txt}, {.date = txt}, {.model_identity = txt}};
    for (int k = 0; k < 3; k++) {
        const char *bad = chat_harmony_check(&ho[k]);
        char *r = chat_render_opts(CHAT_HARMONY, &one, 1, NULL, 1, CHAT_THINK_UNSET, &ho[k]);
        if (r && (bad || !strstr(r, txt))) abort();
        if (k == 1 && !bad && strlen(txt) != 10) abort();
        free(r);
        r = chat_render_opts(CHAT_QWEN3, &one, 1, NULL, 1, CHAT_THINK_UNSET, &ho[k]);
        if (r) abort(); /* no other template takes them */
    }
    free(txt);
    static const char *roles[] = {"system", "user", "assistant", "tool", "bogus"};
    chat_format f = data[0] >> 7 ? ((data[0] >> 6) & 1 ? (data[0] & 1 ? ((data[0] >> 5) & 1 ? CHAT_GEMMA4_EARLY : CHAT_GEMMA4)
                                                                   : CHAT_GEMMA)
                                                    : CHAT_HARMONY)
                    : data[0] & 1 ? CHAT_LLAMA3 : CHAT_QWEN3;
    int gen = (data[0] >> 1) & 1;
    chat_think think = (chat_think)((int)((data[0] >> 2) % 3) - 1);
    char *buf = dfl_malloc(size + 1);
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0;
    chat_message msgs[64];
    chat_tool_call calls[64];
    int n = 0, bad_role = 0, tool_role = 0, any_call = 0;
    for (char *p = buf, *end = buf + size - 1; p < end && n < 64;) {
        char *e = memchr(p, 0x1e, (size_t)(end - p));
        if (!e) e = end;
        *e = 0;
        int r = e > p ? (unsigned char)*p % 5 : 1;
        char *content = e > p ? p + 1 : p, *call = strchr(content, 0x1d), *reason;
        if (call) *call++ = 0;
        reason = strchr(content, 0x1f);
        if (reason) *reason++ = 0;
        bad_role |= r == 4;
        tool_role |= r == 3;
        msgs[n] = (chat_message){.role = roles[r], .content = content, .reasoning_content = reason};
        if (call && r == 2) {
            char *args = strchr(call, 0x1c);
            if (args) *args++ = 0;
            calls[n] = (chat_tool_call){.name = call, .arguments = args ? args : "{}"};
            msgs[n].tool_calls = &calls[n];
            msgs[n].n_tool_calls = 1;
            any_call = 1;
        }
        n++;
        p = e + 1;
    }
    static const char WEATHER[] = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
                                  "\"Weather.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
                                  "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}]";
    int fixed_tools = (data[0] >> 4) & 1;
    char *out = chat_render_tools(f, msgs, n, fixed_tools && f != CHAT_LLAMA3 && f != CHAT_GEMMA ? WEATHER : NULL, gen,
                                  think);
    /* Llama-3 renders any role name, Gemma any at a non-user turn, as their templates do */
    if (bad_role && out && f != CHAT_LLAMA3 && f != CHAT_GEMMA) abort();
    if (out && f == CHAT_HARMONY) { /* harmony: system only first, the system message first, results after a call */
        int call = 0;
        for (int i = 0; i < n; i++) {
            if ((!strcmp(msgs[i].role, "tool") && !call) || (i > 0 && !strcmp(msgs[i].role, "system")) ||
                strncmp(out, "<|start|>system<|message|>", 26))
                abort();
            if (!strcmp(msgs[i].role, "assistant")) call = msgs[i].n_tool_calls > 0;
        }
    }
    if (out && f == CHAT_GEMMA) { /* <bos>, the generation prompt, roles alternating after a system message */
        size_t L = strlen(out);
        if (strncmp(out, "<bos>", 5) || (gen && (L < 21 || strcmp(out + L - 21, "<start_of_turn>model\n"))))
            abort();
        int first = !strcmp(msgs[0].role, "system");
        for (int i = first; i < n; i++)
            if (!strcmp(msgs[i].role, "user") != ((i - first) % 2 == 0)) abort();
    }
    if (f == CHAT_GEMMA4 || f == CHAT_GEMMA4_EARLY) {
        if (out && (n == 0 || bad_role)) abort();
        if (!out && !(n == 0 || bad_role || tool_role || any_call || fixed_tools)) abort(); /* plain lists render */
        /* the generation prompt; after tool results (folded into the last model turn) the
         * template opens no new turn: then only the thought channel, when thinking is off */
        const char *gp = think == CHAT_THINK_ON ? "<|turn>model\n" : "<|turn>model\n<|channel>thought\n<channel|>";
        size_t L = out ? strlen(out) : 0, G = strlen(gp);
        if (out && (strncmp(out, "<bos>", 5) || (gen && !tool_role && (L < G || strcmp(out + L - G, gp))))) abort();
        static const char thought[] = "<|channel>thought\n<channel|>";
        if (out && gen && think != CHAT_THINK_ON && (L < sizeof thought - 1 || strcmp(out + L - (sizeof thought - 1), thought)))
            abort();
    }
    if (out) {
        int utf8 = 1;
        for (int i = 0; i < n; i++)
            utf8 &= dfl_utf8_invalid_at(msgs[i].content, strlen(msgs[i].content)) < 0 &&
                    (!msgs[i].reasoning_content ||
                     dfl_utf8_invalid_at(msgs[i].reasoning_content, strlen(msgs[i].reasoning_content)) < 0) &&
                    (!msgs[i].n_tool_calls ||
                     (dfl_utf8_invalid_at(calls[i].name, strlen(calls[i].name)) < 0 &&
                      dfl_utf8_invalid_at(calls[i].arguments, strlen(calls[i].arguments)) < 0));
        if (utf8 && dfl_utf8_invalid_at(out, strlen(out)) >= 0) abort();
        for (int i = 0; i < n; i++)
            if ((f == CHAT_QWEN3 || f == CHAT_HARMONY) && !strcmp(msgs[i].role, "user") && !strstr(out, msgs[i].content))
                abort();
        free(out);
    }
    free(buf);
    return 0;
}
