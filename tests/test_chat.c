/* test_chat.c - chat_render() against jinja2 renderings of the real templates.
 *
 * tests/fixtures/chat/cases.json comes from tools/reference/chat_ref.py
 * (jinja2 with the transformers settings). Files are found relative to the
 * repository root: $DFLASH_ROOT, else the current directory. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat.h"
#include "check.h"
#include "tokenizer.h"
#include "util.h"

static char ROOT[4000];
static cJSON *CASES; /* the fixture's "cases" array */
static cJSON *DOC;

/* Print where two strings first differ, with some context. */
static void show_diff(const char *got, const char *want) {
    size_t i = 0;
    while (got[i] && got[i] == want[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "    first difference at byte %zu\n    got:  \"%.80s\"\n    want: \"%.80s\"\n", i,
            got + from, want + from);
}

TEST(fixture_cases) {
    CHECK(cJSON_GetArraySize(CASES) >= 15, "only %d fixture cases", cJSON_GetArraySize(CASES));
    int n_harmony = 0, n_gemma = 0, n_gemma4 = 0, n_gemma4e = 0, n_tools = 0, n_raises = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, CASES) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *fmt = cJSON_GetObjectItem(c, "format")->valuestring;
        const cJSON *msgs = cJSON_GetObjectItem(c, "messages");
        const cJSON *think = cJSON_GetObjectItem(c, "enable_thinking");
        int n = cJSON_GetArraySize(msgs);
        chat_message *m = dfl_calloc((size_t)n, sizeof *m);
        chat_tool_call calls[8][4];
        for (int i = 0; i < n; i++) {
            const cJSON *x = cJSON_GetArrayItem(msgs, i);
            const cJSON *rc = cJSON_GetObjectItem(x, "reasoning_content");
            const cJSON *tc = cJSON_GetObjectItem(x, "tool_calls");
            m[i].role = cJSON_GetObjectItem(x, "role")->valuestring;
            m[i].content = cJSON_GetObjectItem(x, "content")->valuestring;
            m[i].reasoning_content = cJSON_IsString(rc) ? rc->valuestring : NULL; /* null = absent */
            CHECK(!tc || (i < 8 && cJSON_GetArraySize(tc) <= 4), "%s: the test holds 4 calls in 8 messages", name);
            if (tc && i < 8 && cJSON_GetArraySize(tc) <= 4) {
                const cJSON *c1;
                cJSON_ArrayForEach(c1, tc) {
                    const cJSON *fn = cJSON_GetObjectItem(c1, "function");
                    calls[i][m[i].n_tool_calls++] = (chat_tool_call){
                        .name = cJSON_GetObjectItem(fn, "name")->valuestring,
                        .arguments = cJSON_GetObjectItem(fn, "arguments")->valuestring};
                }
                m[i].tool_calls = calls[i];
            }
        }
        /* tools_json: Python's own text of the tools (its numbers as written: 1.0 is no 1) */
        const cJSON *tools = cJSON_GetObjectItem(c, "tools"), *tools_text = cJSON_GetObjectItem(c, "tools_json");
        char *tools_json = cJSON_IsString(tools_text) ? dfl_strdup(tools_text->valuestring)
                           : tools                    ? cJSON_PrintUnformatted(tools)
                                                      : NULL;
        n_tools += tools && cJSON_GetArraySize(tools) > 0;
        chat_think th = !think ? CHAT_THINK_UNSET : cJSON_IsTrue(think) ? CHAT_THINK_ON : CHAT_THINK_OFF;
        chat_format f = !strcmp(fmt, "llama3") ? CHAT_LLAMA3 : !strcmp(fmt, "harmony") ? CHAT_HARMONY
                       : !strcmp(fmt, "gemma") ? CHAT_GEMMA : !strcmp(fmt, "gemma4") ? CHAT_GEMMA4
                       : !strcmp(fmt, "gemma4_early") ? CHAT_GEMMA4_EARLY : CHAT_QWEN3;
        CHECK(f != CHAT_QWEN3 || !strcmp(fmt, "qwen3"), "%s: unknown format \"%s\"", name, fmt);
        n_gemma += f == CHAT_GEMMA;
        n_gemma4 += f == CHAT_GEMMA4;
        n_gemma4e += f == CHAT_GEMMA4_EARLY;
        int agp = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
        const cJSON *expected = cJSON_GetObjectItem(c, "expected"), *raises = cJSON_GetObjectItem(c, "raises");
        const char *want = cJSON_IsString(expected) ? expected->valuestring : NULL;
        char *got;
        if (f == CHAT_HARMONY) { /* the case's date and template kwargs */
            const cJSON *date = cJSON_GetObjectItem(c, "date"), *eff = cJSON_GetObjectItem(c, "reasoning_effort"),
                        *ident = cJSON_GetObjectItem(c, "model_identity");
            chat_harmony_opts ho = {.date = cJSON_IsString(date) ? date->valuestring : NULL,
                                    .reasoning_effort = cJSON_IsString(eff) ? eff->valuestring : NULL,
                                    .model_identity = cJSON_IsString(ident) ? ident->valuestring : NULL};
            CHECK(ho.date != NULL, "%s: harmony case without a date", name);
            got = chat_render_harmony(m, n, tools_json, &ho, agp);
            n_harmony++;
        } else {
            got = chat_render_tools(f, m, n, tools_json, agp, th);
        }
        free(tools_json);
        if (raises) { /* jinja2 raised: refused here too */
            n_raises++;
            CHECK(!got, "%s: rendered, but jinja2 raises (%s)", name, raises->valuestring);
            free(got);
            free(m);
            continue;
        }
        CHECK(got != NULL, "%s: %s", name, dfl_lasterr());
        if (got && want) {
            int same = strcmp(got, want) == 0;
            CHECK(same, "%s", name);
            if (!same) show_diff(got, want);
        }
        free(got);
        free(m);
    }
    CHECK(n_harmony >= 15, "only %d harmony cases", n_harmony);
    CHECK(n_gemma >= 10, "only %d gemma cases", n_gemma);
    CHECK(n_gemma4 >= 45 && n_gemma4e >= 45, "only %d gemma4 and %d gemma4_early cases", n_gemma4, n_gemma4e);
    CHECK(n_tools >= 45, "only %d cases with tools", n_tools);
    printf("  (%d fixture cases: %d harmony, %d gemma4, %d gemma4_early, %d with tools, %d that jinja2 refuses)\n",
           cJSON_GetArraySize(CASES), n_harmony, n_gemma4, n_gemma4e, n_tools, n_raises);
}

/* Gemma 4: both templates told apart by their think switch (project-written
 * lines with the markers of the files fixtures/chat/gemma4/README names; the
 * fixture records those files' sha256), a later revision refused by name, stop
 * tokens, the next turn, refusals naming the format */
TEST(gemma4) {
    const char *later = "{{- bos_token -}}{%- if enable_thinking -%}{{- '<|turn>system\\n' -}}{{- '<|think|>\\n' -}}"
                        "{%- endif -%}{{- '<|turn>' + role -}}{{- '<turn|>\\n' -}}",
               *early = "{{- bos_token -}}{%- if enable_thinking -%}{{- '<|turn>system\\n' -}}{{- '<|think|>' -}}"
                        "{%- endif -%}{{- '<|turn>' + role -}}{{- '<turn|>\\n' -}}";
    CHECK(chat_detect(later) == CHAT_GEMMA4, "detect the later template: %s", dfl_lasterr());
    CHECK(chat_detect(early) == CHAT_GEMMA4_EARLY, "detect the early template: %s", dfl_lasterr());
    const cJSON *sha = cJSON_GetObjectItem(DOC, "gemma4_template_sha256");
    CHECK(cJSON_IsString(sha) && strlen(sha->valuestring) == 64, "fixture records the template's sha256");
    const char *const *st = chat_stop_tokens(later);
    CHECK(st && !strcmp(st[0], "<turn|>") && !strcmp(st[1], "<eos>") && !strcmp(st[2], "<|tool_response>") && !st[3],
          "gemma4 stop tokens: the end of turn and of text, and the token after tool calls");
    st = chat_stop_tokens(early);
    CHECK(st && !strcmp(st[0], "<turn|>"), "gemma4 early stop tokens");
    /* the 2026-07-09 rewrite (other rules) is refused, naming what marks it */
    CHECK(chat_detect("{{ '<|turn>' }}{{ '<|think|>\\n' }}{%- set preserve_thinking = x -%}<turn|>") == -1 &&
              strstr(dfl_lasterr(), "preserve_thinking") && strstr(dfl_lasterr(), "Gemma 4"),
          "a later revision: %s", dfl_lasterr());
    CHECK(chat_detect("{{ '<|turn>' + role }}<turn|>") == -1 && strstr(dfl_lasterr(), "Gemma 4"),
          "no think switch: %s", dfl_lasterr());

    chat_message m[] = {{.role = "system", .content = "Be brief."}, {.role = "user", .content = "What is 2+2?"},
                        {.role = "assistant", .content = "4."}, {.role = "user", .content = " And 3+3? "}};
    for (int v = 0; v < 2; v++) {
        chat_format f = v ? CHAT_GEMMA4_EARLY : CHAT_GEMMA4;
        char *s = chat_render(f, m + 1, 1, 1, CHAT_THINK_UNSET);
        CHECK(s && !strcmp(s, "<bos><|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"),
              "one turn, thinking unset = off: %s", s ? s : dfl_lasterr());
        free(s);
        /* prompt + answer + next turn = the full render with the earlier answer's empty
         * thought channel (which the full render drops) kept */
        for (int th = 0; th < 2; th++) {
            chat_think t = th ? CHAT_THINK_ON : CHAT_THINK_OFF;
            const char *ans = th ? "<|channel>thought\nAdd.<channel|>4." : "4.";
            char *p1 = chat_render(f, m, 2, 1, t), *nt = chat_next_turn(f, " And 3+3? ", t);
            char *full = chat_render(f, m, 4, 1, t);
            CHECK(p1 && nt && full, "render: %s", dfl_lasterr());
            if (p1 && nt && full) {
                dfl_buf got = {0}, exp = {0};
                dfl_buf_str(&got, p1), dfl_buf_str(&got, ans), dfl_buf_str(&got, nt);
                const char *a = strstr(full, "<|turn>model\n4.");
                CHECK(a != NULL, "full render has the earlier answer");
                if (a) {
                    a += strlen("<|turn>model\n");
                    dfl_buf_add(&exp, full, (size_t)(a - full));
                    dfl_buf_str(&exp, th ? "<|channel>thought\nAdd.<channel|>" : "<|channel>thought\n<channel|>");
                    dfl_buf_str(&exp, a);
                    CHECK(!strcmp(got.s, exp.s), "gemma4 next turn (think %d):\n%s\n---\n%s", th, got.s, exp.s);
                }
                dfl_buf_free(&got), dfl_buf_free(&exp);
            }
            free(p1), free(nt), free(full);
        }
        /* tools (the fixture checks them against jinja2); refusals name what and why */
        s = chat_render_tools(f, m + 1, 1, "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", 1,
                              CHAT_THINK_UNSET);
        CHECK(s && strstr(s, "<|turn>system\n<|tool>declaration:f{description:<|\"|><|\"|>}<tool|><turn|>\n"),
              "a bare tool: %s", s ? s : dfl_lasterr());
        free(s);
        s = chat_render_tools(f, m + 1, 1, "[]", 1, CHAT_THINK_UNSET);
        CHECK(s != NULL && !strstr(s, "system"), "no tools is fine: %s", s ? s : dfl_lasterr());
        free(s);
        CHECK(!chat_render_tools(f, m + 1, 1, "{}", 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "array"),
              "tools not an array: %s", dfl_lasterr());
        CHECK(!chat_render_tools(f, m + 1, 1, "[{\"type\": \"function\"}]", 1, CHAT_THINK_UNSET) &&
                  strstr(dfl_lasterr(), "function"),
              "a tool without a function: %s", dfl_lasterr());
        CHECK(!chat_render_tools(f, m + 1, 1, "[{\"function\": {\"name\": \"f\", \"name\": \"g\"}}]", 1,
                                 CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "twice"),
              "a key twice: %s", dfl_lasterr());
        CHECK(!chat_render_tools(f, m + 1, 1, "[{\"function\": {\"name\": \"f\", \"x\": NaN}}]", 1,
                                 CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "NaN"),
              "NaN: %s", dfl_lasterr());
        /* dictsort of keys that differ first in a letter beyond ASCII: not sorted here; in a caseless script: fine */
        const char *umlaut = "[{\"function\": {\"name\": \"f\", \"parameters\": {\"properties\": "
                             "{\"\u00c4x\": {\"type\": \"string\"}, \"\u00e4y\": {\"type\": \"string\"}}}}}]";
        CHECK(!chat_render_tools(f, m + 1, 1, umlaut, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "lower"),
              "keys ordered by lower() beyond ASCII: %s", dfl_lasterr());
        const char *kanji = "[{\"function\": {\"name\": \"f\", \"parameters\": {\"properties\": "
                            "{\"\u540d\": {\"type\": \"string\"}, \"B\": {\"type\": \"string\"}, "
                            "\"a\": {\"type\": \"string\"}}}}}]";
        s = chat_render_tools(f, m + 1, 1, kanji, 1, CHAT_THINK_UNSET);
        CHECK(s && strstr(s, "properties:{a:{type:<|\"|>STRING<|\"|>},B:{type:<|\"|>STRING<|\"|>},\xe5\x90\x8d:{"),
              "caseless keys sort by code point: %s", s ? s : dfl_lasterr());
        free(s);
        /* a call; its results fold into its turn; a result with no call to answer is refused */
        chat_tool_call call = {.name = "f", .arguments = "{\"b\": 1, \"A\": \"x\"}"};
        chat_message calls[] = {{.role = "user", .content = "q"},
                                {.role = "assistant", .content = "", .tool_calls = &call, .n_tool_calls = 1},
                                {.role = "tool", .content = "{\"ok\": true}"},
                                {.role = "tool", .content = "extra"}};
        s = chat_render(f, calls, 3, 1, CHAT_THINK_OFF);
        CHECK(s && strstr(s, "<|turn>model\n<|tool_call>call:f{A:<|\"|>x<|\"|>,b:1}<tool_call|><|tool_response>"
                             "response:f{ok:true}<tool_response|><|channel>thought\n<channel|>") &&
                  !strcmp(s + strlen(s) - strlen("<tool_response|><|channel>thought\n<channel|>"),
                          "<tool_response|><|channel>thought\n<channel|>"),
              "a call and its result: %s", s ? s : dfl_lasterr());
        free(s);
        CHECK(!chat_render(f, calls, 4, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "message 3") &&
                  strstr(dfl_lasterr(), "beyond"),
              "more results than calls: %s", dfl_lasterr());
        chat_message tool[] = {{.role = "user", .content = "q"}, {.role = "tool", .content = "r"}};
        CHECK(!chat_render(f, tool, 2, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "message 1") &&
                  strstr(dfl_lasterr(), "Gemma 4"),
              "a tool message without a call: %s", dfl_lasterr());
        chat_message bogus[] = {{.role = "user", .content = "q"}, {.role = "narrator", .content = "r"}};
        CHECK(!chat_render(f, bogus, 2, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "narrator"),
              "unknown role: %s", dfl_lasterr());
    }
}

/* gpt-oss (harmony): the prompt spelled out; defaults; next turn; refusals */
static const char HARMONY_SYS[] =
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: 2026-12-04\n\nReasoning: medium\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>";

TEST(harmony) {
    chat_message one[] = {{.role = "user", .content = "Hello"}};
    chat_harmony_opts ho = {.date = "2026-12-04"};
    char *s = chat_render_harmony(one, 1, NULL, &ho, 1);
    char want[1024];
    snprintf(want, sizeof want, "%s<|start|>user<|message|>Hello<|end|><|start|>assistant", HARMONY_SYS);
    CHECK(s && !strcmp(s, want), "one user message: %s", s ? s : dfl_lasterr());
    free(s);
    /* chat_render's defaults: today's date in local time */
    char today[16];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(today, sizeof today, "%Y-%m-%d", &tm);
    s = chat_render(CHAT_HARMONY, one, 1, 1, CHAT_THINK_UNSET);
    char line[64];
    snprintf(line, sizeof line, "\nCurrent date: %s\n\nReasoning: medium\n", today);
    CHECK(s && strstr(s, line) && strstr(s, "trained by OpenAI.\n"), "defaults: %s", s ? s : dfl_lasterr());
    free(s);
    /* the options: checked, written where the template writes them, refused by other formats */
    chat_harmony_opts hi = {.reasoning_effort = "low", .date = "2000-02-29", .model_identity = "You are tiny."};
    s = chat_render_opts(CHAT_HARMONY, one, 1, NULL, 1, CHAT_THINK_UNSET, &hi);
    static const char head[] = "<|start|>system<|message|>You are tiny.\nKnowledge cutoff: 2024-06\nCurrent date: "
                               "2000-02-29\n\nReasoning: low\n\n";
    CHECK(s && !strncmp(s, head, sizeof head - 1), "options: %s", s ? s : dfl_lasterr());
    free(s);
    static const struct {
        chat_harmony_opts o;
        const char *err;
    } bad[] = {{{.reasoning_effort = "max"}, "reasoning_effort must be"},
               {{.reasoning_effort = ""}, "reasoning_effort must be"},
               {{.date = "2026-12-7"}, "date must be YYYY-MM-DD"},
               {{.date = "2026-00-10"}, "date must be YYYY-MM-DD"},
               {{.date = "2026-12-32"}, "date must be YYYY-MM-DD"},
               {{.date = "2026/12/07"}, "date must be YYYY-MM-DD"},
               {{.model_identity = "x<|end|>"}, "model_identity holds"},
               {{.model_identity = "\xff"}, "not valid UTF-8"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        s = chat_render_opts(CHAT_HARMONY, one, 1, NULL, 1, CHAT_THINK_UNSET, &bad[i].o);
        CHECK(!s && strstr(dfl_lasterr(), bad[i].err), "bad option %zu: %s", i, s ? s : dfl_lasterr());
        free(s);
    }
    static const chat_format others[] = {CHAT_QWEN3, CHAT_LLAMA3, CHAT_GEMMA, CHAT_GEMMA4, CHAT_GEMMA4_EARLY};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        s = chat_render_opts(others[i], one, 1, NULL, 1, CHAT_THINK_UNSET, &(chat_harmony_opts){.date = "2026-12-07"});
        CHECK(!s && strstr(dfl_lasterr(), "date is an option of gpt-oss's harmony template"), "format %d: %s",
              (int)others[i], s ? s : dfl_lasterr());
        free(s);
        s = chat_render_opts(others[i], one, 1, NULL, 1, CHAT_THINK_UNSET, &(chat_harmony_opts){0});
        CHECK(s != NULL, "format %d, no options: %s", (int)others[i], dfl_lasterr());
        free(s);
    }
    /* prompt + answer (both channels, as generated) + next turn = the full render, but for
     * the analysis message, which the full render drops from the earlier answer */
    chat_message m[] = {{.role = "system", .content = "Be brief."}, {.role = "user", .content = "What is 2+2?"},
                        {.role = "assistant", .content = "4."}, {.role = "user", .content = "And 3+3?"}};
    const char *answer = "<|channel|>analysis<|message|>Add.<|end|><|start|>assistant<|channel|>final<|message|>4.";
    char *p1 = chat_render_harmony(m, 2, NULL, &ho, 1), *nt = chat_next_turn(CHAT_HARMONY, "And 3+3?", CHAT_THINK_OFF);
    char *full = chat_render_harmony(m, 4, NULL, &ho, 1);
    CHECK(p1 && nt && full, "render: %s", dfl_lasterr());
    if (p1 && nt && full) {
        dfl_buf got = {0}, exp = {0};
        dfl_buf_str(&got, p1), dfl_buf_str(&got, answer), dfl_buf_str(&got, nt);
        const char *a = strstr(full, "<|start|>assistant<|channel|>final");
        CHECK(a != NULL, "full render has the earlier answer");
        if (a) {
            dfl_buf_add(&exp, full, (size_t)(a - full));
            dfl_buf_str(&exp, "<|start|>assistant<|channel|>analysis<|message|>Add.<|end|>");
            dfl_buf_str(&exp, a);
            CHECK(!strcmp(got.s, exp.s), "harmony next turn:\n%s\n---\n%s", got.s, exp.s);
        }
        dfl_buf_free(&got), dfl_buf_free(&exp);
    }
    free(p1), free(nt), free(full);
    /* refused, naming the culprit */
    chat_message late_sys[] = {{.role = "user", .content = "a"}, {.role = "system", .content = "b"}};
    CHECK(!chat_render(CHAT_HARMONY, late_sys, 2, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "message 1"),
          "a later system message: %s", dfl_lasterr());
    chat_message tool[] = {{.role = "user", .content = "a"}, {.role = "tool", .content = "b"}};
    chat_message bogus[] = {{.role = "narrator", .content = "a"}};
    CHECK(!chat_render(CHAT_HARMONY, bogus, 1, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "narrator"),
          "unknown role: %s", dfl_lasterr());
    chat_message tagged[] = {{.role = "user", .content = "q"},
                             {.role = "assistant", .content = "x<|channel|>final<|message|>y"}};
    CHECK(!chat_render(CHAT_HARMONY, tagged, 2, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "<|channel|>final"),
          "channel tags in content: %s", dfl_lasterr());
    tagged[1] = (chat_message){.role = "assistant", .content = "y", .reasoning_content = "<|channel|>analysis<|message|>"};
    CHECK(!chat_render(CHAT_HARMONY, tagged, 2, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "reasoning_content"),
          "channel tags in reasoning: %s", dfl_lasterr());
    /* tools: refusals name the culprit (the fixture checks what is rendered) */
    CHECK(!chat_render_tools(CHAT_HARMONY, one, 1, "[{\"type\": \"function\"}]", 1, CHAT_THINK_UNSET) &&
              strstr(dfl_lasterr(), "description"),
          "a tool without a function (the template raises on its description): %s", dfl_lasterr());
    CHECK(!chat_render_tools(CHAT_HARMONY, one, 1, "[{\"function\": {\"name\": \"f\", \"description\": \"d\", "
                             "\"parameters\": {\"properties\": {\"p\": {}}, \"required\": 5}}}]", 1, CHAT_THINK_UNSET) &&
              strstr(dfl_lasterr(), "required"),
          "required a number (Python's `in` raises): %s", dfl_lasterr());
    s = chat_render_tools(CHAT_HARMONY, one, 1, "[]", 1, CHAT_THINK_UNSET);
    CHECK(s != NULL && !strstr(s, "developer"), "no tools is fine: %s", dfl_lasterr());
    free(s);
    chat_tool_call call = {.name = "f", .arguments = "{}"}, two[2] = {call, call};
    chat_message calls[] = {{.role = "user", .content = "q"},
                            {.role = "assistant", .content = "", .tool_calls = two, .n_tool_calls = 2}};
    CHECK(!chat_render(CHAT_HARMONY, calls, 2, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "2 tool calls"),
          "two calls in one message: %s", dfl_lasterr());
    calls[1] = (chat_message){.role = "assistant", .content = "a", .reasoning_content = "r", .tool_calls = &call,
                              .n_tool_calls = 1};
    CHECK(!chat_render(CHAT_HARMONY, calls, 2, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "reasoning_content"),
          "content and reasoning beside a call: %s", dfl_lasterr());
    chat_message answered[] = {{.role = "user", .content = "q"},
                               {.role = "assistant", .content = "", .tool_calls = &call, .n_tool_calls = 1},
                               {.role = "tool", .content = "r"},
                               {.role = "assistant", .content = "done"},
                               {.role = "tool", .content = "late"}};
    s = chat_render(CHAT_HARMONY, answered, 3, 1, CHAT_THINK_UNSET);
    CHECK(s && strstr(s, "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>"
                         "<|start|>functions.f to=assistant<|channel|>commentary<|message|>\"r\"<|end|><|start|>assistant"),
          "a call and its result: %s", s ? s : dfl_lasterr());
    free(s);
    CHECK(!chat_render(CHAT_HARMONY, answered, 5, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "message 4"),
          "a tool message after an answer (no call to answer): %s", dfl_lasterr());
    CHECK(!chat_render(CHAT_HARMONY, tool, 2, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "message 1"),
          "a tool message with no call before it: %s", dfl_lasterr());
}

/* the real gpt-oss template is detected; its prompt tokenizes to the harmony ids */
TEST(harmony_tokenize) {
    char *dir = dfl_path_join(ROOT, "models/gptoss-tokenizer");
    tok_tokenizer *t = tok_load(dir);
    free(dir);
    CHECK(t != NULL, "tok_load: %s", dfl_lasterr());
    if (!t) return;
    CHECK(chat_detect(tok_chat_template(t)) == CHAT_HARMONY, "detect the gpt-oss template");
    chat_message one[] = {{.role = "user", .content = "Hello"}};
    char *s = chat_render(CHAT_HARMONY, one, 1, 1, CHAT_THINK_UNSET);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(s && tok_encode(t, s, strlen(s), &ids, &n) == 0, "encode");
    /* <|start|> system <|message|> ... <|end|> <|start|> user <|message|> Hello <|end|> <|start|> assistant */
    static const int32_t tail[] = {200007, 200006, 1428, 200008, 13225, 200007, 200006, 173781};
    CHECK(n > 20 && ids[0] == 200006 && ids[1] == 17360 && ids[2] == 200008 &&
              !memcmp(ids + n - 8, tail, sizeof tail),
          "ids (%zu)", n);
    free(ids);
    free(s);
    tok_free(t);
}

/* Gemma 3: the real template is detected, its stop tokens, refusals, next
 * turn, and the prompt tokenizes to the turn ids */
TEST(gemma) {
    char *dir = dfl_path_join(ROOT, "models/gemma3-tokenizer");
    tok_tokenizer *t = tok_load(dir);
    free(dir);
    CHECK(t != NULL, "tok_load: %s", dfl_lasterr());
    if (!t) return;
    CHECK(chat_detect(tok_chat_template(t)) == CHAT_GEMMA, "detect the Gemma 3 template");
    const char *const *st = chat_stop_tokens(tok_chat_template(t));
    CHECK(st && !strcmp(st[0], "<end_of_turn>") && !strcmp(st[1], "<eos>") && !st[2], "gemma stop tokens");
    CHECK(st && tok_lookup(t, st[0]) == 106 && tok_lookup(t, st[1]) == 1, "stop ids");
    chat_message m[] = {{.role = "system", .content = "Be brief."}, {.role = "user", .content = "What is 2+2?"},
                        {.role = "assistant", .content = "4."}, {.role = "user", .content = " And 3+3? "}};
    char *s = chat_render(CHAT_GEMMA, m + 1, 1, 1, CHAT_THINK_UNSET);
    CHECK(s && !strcmp(s, "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"), "one turn: %s",
          s ? s : dfl_lasterr());
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(s && tok_encode(t, s, strlen(s), &ids, &n) == 0, "encode");
    static const int32_t head[] = {2, 105, 2364, 107}, tail[] = {106, 107, 105, 4368, 107};
    CHECK(n > 9 && !memcmp(ids, head, sizeof head) && !memcmp(ids + n - 5, tail, sizeof tail), "ids (%zu)", n);
    free(ids);
    free(s);
    /* prompt + answer + next turn = the full render */
    char *p1 = chat_render(CHAT_GEMMA, m, 2, 1, CHAT_THINK_UNSET), *nt = chat_next_turn(CHAT_GEMMA, " And 3+3? ", CHAT_THINK_OFF);
    char *full = chat_render(CHAT_GEMMA, m, 4, 1, CHAT_THINK_UNSET);
    CHECK(p1 && nt && full, "render: %s", dfl_lasterr());
    if (p1 && nt && full) {
        dfl_buf got = {0};
        dfl_buf_str(&got, p1), dfl_buf_str(&got, "4."), dfl_buf_str(&got, nt);
        CHECK(!strcmp(got.s, full), "gemma next turn:\n%s\n---\n%s", got.s, full);
        dfl_buf_free(&got);
    }
    free(p1), free(nt), free(full);
    /* refused as the template refuses, or naming what it lacks */
    chat_message two_users[] = {{.role = "user", .content = "a"}, {.role = "user", .content = "b"}};
    CHECK(!chat_render(CHAT_GEMMA, two_users, 2, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "message 1") &&
              strstr(dfl_lasterr(), "alternate"),
          "roles not alternating: %s", dfl_lasterr());
    chat_message model_first[] = {{.role = "system", .content = "s"}, {.role = "assistant", .content = "a"}};
    CHECK(!chat_render(CHAT_GEMMA, model_first, 2, 1, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "alternate"),
          "assistant first: %s", dfl_lasterr());
    CHECK(!chat_render_tools(CHAT_GEMMA, m + 1, 1, "[{\"type\": \"function\"}]", 1, CHAT_THINK_UNSET) &&
              strstr(dfl_lasterr(), "tools"),
          "tools: %s", dfl_lasterr());
    chat_tool_call call = {.name = "f", .arguments = "{}"};
    chat_message calls[] = {{.role = "user", .content = "q"},
                            {.role = "assistant", .content = "", .tool_calls = &call, .n_tool_calls = 1}};
    CHECK(!chat_render(CHAT_GEMMA, calls, 2, 0, CHAT_THINK_UNSET) && strstr(dfl_lasterr(), "tool_calls"),
          "tool_calls: %s", dfl_lasterr());
    tok_free(t);
}

/* the Qwen3 prompt format the engine relies on, spelled out */
TEST(known_prompts) {
    chat_message one[] = {{.role = "user", .content = "Hello", .reasoning_content = NULL}};
    char *s = chat_render(CHAT_QWEN3, one, 1, 1, CHAT_THINK_OFF);
    CHECK(s && strcmp(s, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n") == 0,
          "no-think prompt");
    free(s);
    s = chat_render(CHAT_QWEN3, one, 1, 1, CHAT_THINK_UNSET);
    CHECK(s && strcmp(s, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n") == 0, "think prompt");
    free(s);
    chat_message two[] = {{.role = "user", .content = "Hello", .reasoning_content = NULL}, {.role = "assistant", .content = "Hi there", .reasoning_content = NULL}};
    s = chat_render(CHAT_QWEN3, two, 2, 0, CHAT_THINK_UNSET);
    CHECK(s && strcmp(s, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                         "Hi there<|im_end|>\n") == 0,
          "training turn");
    free(s);
}

/* prompt + answer + chat_next_turn() is the full render of the longer
 * conversation, but for the empty think block Qwen3's render drops from the
 * earlier answer (Llama 3: exactly the full render) */
static char *cat3(const char *a, const char *b, const char *c) {
    size_t na = strlen(a), nb = strlen(b), nc = strlen(c);
    char *s = malloc(na + nb + nc + 1);
    memcpy(s, a, na);
    memcpy(s + na, b, nb);
    memcpy(s + na + nb, c, nc + 1);
    return s;
}

TEST(next_turn) {
    chat_message m[] = {{.role = "system", .content = "Be brief.", .reasoning_content = NULL}, {.role = "user", .content = "What is 2+2?", .reasoning_content = NULL}, {.role = "assistant", .content = "4.", .reasoning_content = NULL},
                        {.role = "user", .content = "And 3+3?", .reasoning_content = NULL}};
    char *p1 = chat_render(CHAT_QWEN3, m, 2, 1, CHAT_THINK_OFF), *nt = chat_next_turn(CHAT_QWEN3, "And 3+3?", CHAT_THINK_OFF);
    char *full = chat_render(CHAT_QWEN3, m, 4, 1, CHAT_THINK_OFF);
    CHECK(p1 && nt && full, "render: %s", dfl_lasterr());
    if (p1 && nt && full) {
        char *got = cat3(p1, "4.", nt);
        const char *a = strstr(full, "<|im_start|>assistant\n") + strlen("<|im_start|>assistant\n");
        char *want = malloc(strlen(full) + 32);
        memcpy(want, full, (size_t)(a - full));
        strcpy(want + (a - full), "<think>\n\n</think>\n\n");
        strcat(want, a);
        CHECK(!strcmp(got, want), "qwen3 next turn:\n%s\n---\n%s", got, want);
        free(got);
        free(want);
    }
    free(p1), free(nt), free(full);
    p1 = chat_render(CHAT_LLAMA3, m, 2, 1, CHAT_THINK_UNSET);
    nt = chat_next_turn(CHAT_LLAMA3, " And 3+3?\n", CHAT_THINK_UNSET);
    full = chat_render(CHAT_LLAMA3, m, 4, 1, CHAT_THINK_UNSET);
    char *got = p1 && nt ? cat3(p1, "4.", nt) : NULL;
    CHECK(got && full && !strcmp(got, full), "llama3 next turn");
    free(got), free(p1), free(nt), free(full);
    CHECK(chat_next_turn((chat_format)7, "x", CHAT_THINK_OFF) == NULL, "unknown format refused");
}

/* the rendered no-think prompt tokenizes to the ids other tokenizers give */
TEST(render_then_tokenize) {
    char *dir = dfl_path_join(ROOT, "models/qwen3-tokenizer");
    tok_tokenizer *t = tok_load(dir);
    free(dir);
    CHECK(t != NULL, "tok_load: %s", dfl_lasterr());
    if (!t) return;
    CHECK(chat_detect(tok_chat_template(t)) == CHAT_QWEN3, "detect the shipped template");
    chat_message one[] = {{.role = "user", .content = "Hello", .reasoning_content = NULL}};
    char *s = chat_render(CHAT_QWEN3, one, 1, 1, CHAT_THINK_OFF);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(s && tok_encode(t, s, strlen(s), &ids, &n) == 0, "encode");
    static const int32_t want[] = {151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271};
    CHECK(n == 13 && ids && memcmp(ids, want, sizeof want) == 0, "ids (%zu)", n);
    free(ids);
    free(s);
    tok_free(t);
}

TEST(detect) {
    CHECK(chat_detect("{{ '<|im_start|>' + message.role }}") == CHAT_QWEN3, "chatml");
    CHECK(chat_detect("{{ '<|start_header_id|>' + message['role'] }}") == CHAT_LLAMA3, "llama3");
    CHECK(chat_detect("{{ messages }}") == -1 && strstr(dfl_lasterr(), "unknown chat template"), "unknown");
    CHECK(chat_detect("{{- '<|start|>' + role + '<|channel|>final<|message|>' }}") == CHAT_HARMONY, "harmony");
    /* the tokens that end a harmony reply (the engine adds them to the stop ids) */
    const char *const *st = chat_stop_tokens("<|start|><|channel|><|message|>");
    CHECK(st && !strcmp(st[0], "<|return|>") && !strcmp(st[1], "<|call|>") && !st[2], "harmony stop tokens");
    CHECK(!chat_stop_tokens("{{ '<|im_start|>' }}") && !chat_stop_tokens(NULL), "no extra stop tokens for ChatML");
    CHECK(chat_detect(NULL) == -1, "no template");
}

TEST(bad_input) {
    chat_message bad_role[] = {{.role = "user", .content = "a", .reasoning_content = NULL}, {.role = "narrator", .content = "b", .reasoning_content = NULL}};
    CHECK(chat_render(CHAT_QWEN3, bad_role, 2, 1, CHAT_THINK_UNSET) == NULL &&
              strstr(dfl_lasterr(), "narrator"),
          "unknown role: %s", dfl_lasterr());
    CHECK(chat_render(CHAT_QWEN3, bad_role, 0, 1, CHAT_THINK_UNSET) == NULL, "no messages");
    chat_message no_content[] = {{.role = "user", .content = NULL, .reasoning_content = NULL}};
    CHECK(chat_render(CHAT_QWEN3, no_content, 1, 1, CHAT_THINK_UNSET) == NULL, "NULL content");
    chat_message no_role[] = {{.role = NULL, .content = "x", .reasoning_content = NULL}};
    CHECK(chat_render(CHAT_LLAMA3, no_role, 1, 1, CHAT_THINK_UNSET) == NULL, "NULL role");
    CHECK(chat_render((chat_format)7, bad_role, 1, 1, CHAT_THINK_UNSET) == NULL, "bad format");
    chat_message user[] = {{.role = "user", .content = "x", .reasoning_content = NULL}};
    CHECK(chat_render_tools(CHAT_QWEN3, user, 1, "{\"a\": 1}", 1, CHAT_THINK_OFF) == NULL &&
              strstr(dfl_lasterr(), "array"),
          "tools not an array: %s", dfl_lasterr());
    CHECK(chat_render_tools(CHAT_QWEN3, user, 1, "[{", 1, CHAT_THINK_OFF) == NULL, "tools not JSON");
    CHECK(chat_render_tools(CHAT_LLAMA3, user, 1, "[{\"type\": \"function\"}]", 1, CHAT_THINK_OFF) == NULL &&
              strstr(dfl_lasterr(), "Qwen3"),
          "tools with Llama-3: %s", dfl_lasterr());
    char *s = chat_render_tools(CHAT_LLAMA3, user, 1, "[]", 1, CHAT_THINK_OFF);
    CHECK(s != NULL, "no tools with Llama-3 is fine: %s", dfl_lasterr());
    free(s);
    chat_tool_call call = {.name = "f", .arguments = NULL};
    chat_message no_args[] = {{.role = "assistant", .content = "", .tool_calls = &call, .n_tool_calls = 1}};
    CHECK(chat_render(CHAT_QWEN3, no_args, 1, 0, CHAT_THINK_UNSET) == NULL, "a call without arguments");
    call.arguments = "{}";
    chat_message user_call[] = {{.role = "user", .content = "", .tool_calls = &call, .n_tool_calls = 1}};
    CHECK(chat_render(CHAT_QWEN3, user_call, 1, 0, CHAT_THINK_UNSET) == NULL, "tool_calls on a user message");
}

/* dfl_buf (util.h), the buffer the renderers write into: appends of each
 * kind, a printf longer than its stack buffer, reset, take; out of memory
 * (a size that cannot be allocated) sets the error, and the buffer then
 * ignores appends until take gives NULL. */
TEST(growable_buffer) {
    dfl_buf b = {0};
    char *e = dfl_buf_take(&b);
    CHECK(e && !strcmp(e, "") && !b.s && !b.n, "take of an empty buffer: \"\"");
    free(e);
    CHECK(dfl_buf_add(&b, "ab\0c", 4) == 0 && b.n == 4 && !memcmp(b.s, "ab\0c", 5), "add with a NUL byte");
    CHECK(dfl_buf_char(&b, 'd') == 0 && dfl_buf_str(&b, "ef") == 0 && b.n == 7 && !strcmp(b.s + 3, "cdef"), "char, str");
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK(dfl_buf_printf(&b, "<%d:%s>", 42, big) == 0 && b.n == 7 + 4 + 1999 + 1 && !strncmp(b.s + 7, "<42:xx", 6) &&
              !strcmp(b.s + b.n - 2, "x>") && b.n < b.cap,
          "a long printf: n %zu", b.n);
    dfl_buf_reset(&b);
    CHECK(b.n == 0 && b.s && !b.s[0] && dfl_buf_printf(&b, "%s-%03d", "k", 7) == 0 && !strcmp(b.s, "k-007"), "reset");
    dfl_seterr("none");
    CHECK(dfl_buf_add(&b, big, (size_t)-1 / 2) == -1 && b.failed && strstr(dfl_lasterr(), "out of memory"),
          "too large an add: %s", dfl_lasterr());
    CHECK(dfl_buf_str(&b, "more") == -1 && dfl_buf_printf(&b, "%d", 1) == -1 && !strcmp(b.s, "k-007"),
          "appends after a failure are ignored");
    CHECK(dfl_buf_take(&b) == NULL && !b.s && !b.failed, "take after a failure: NULL, the buffer empty");
    dfl_buf c = {0};
    dfl_buf_str(&c, "x");
    CHECK(dfl_buf_add(&c, big, (size_t)-1) == -1 && c.failed && !strcmp(c.s, "x"), "an add of SIZE_MAX bytes fails");
    dfl_buf_free(&c);
    dfl_buf_str(&b, "again");
    CHECK(b.s && !strcmp(b.s, "again"), "reusable after take");
    dfl_buf_free(&b);
    CHECK(!b.s && !b.n && !b.cap, "free");
}

int main(void) {
    const char *env = getenv("DFLASH_ROOT");
    snprintf(ROOT, sizeof ROOT, "%s", env && *env ? env : ".");
    char *path = dfl_path_join(ROOT, "tests/fixtures/chat/cases.json");
    char *txt = dfl_read_file(path, NULL);
    DOC = txt ? cJSON_Parse(txt) : NULL;
    CASES = cJSON_GetObjectItem(DOC, "cases");
    free(txt);
    if (!cJSON_IsArray(CASES)) {
        fprintf(stderr, "cannot read %s (run from the repo root or set DFLASH_ROOT)\n", path);
        free(path);
        printf("test_chat: 0 passed, 1 failed\n");
        return 1;
    }
    free(path);
    RUN(fixture_cases);
    RUN(known_prompts);
    RUN(render_then_tokenize);
    RUN(next_turn);
    RUN(harmony);
    RUN(harmony_tokenize);
    RUN(gemma);
    RUN(gemma4);
    RUN(detect);
    RUN(bad_input);
    RUN(growable_buffer);
    cJSON_Delete(DOC);
    CHECK_DONE("test_chat");
}
