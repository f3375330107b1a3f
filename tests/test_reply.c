/* test_reply.c - a reply split into reasoning, content and tool calls
 * (src/reply.c): valid calls, several calls, malformed JSON, an unterminated
 * block, tags and JSON cut across pieces at every byte; the result never
 * depends on how the text is split. */
#include "check.h"
#include "reply.h"

/* What a splitter emitted: content and reasoning concatenated, the calls
 * as "name|arguments" lines, and the order of kinds as letters (c, r, t;
 * consecutive text pieces of one kind count once). */
typedef struct {
    char content[4096], reasoning[4096], calls[4096], order[64];
    size_t nc, nr, nt, no;
    int n_calls, bad_index;
} sink;

static void add(char *dst, size_t *n, size_t cap, const char *s, size_t len) {
    if (*n + len < cap) memcpy(dst + *n, s, len), *n += len;
    dst[*n] = 0;
}

static void on_event(void *ud, const rp_event *ev) {
    sink *k = ud;
    char letter = ev->kind == RP_CONTENT ? 'c' : ev->kind == RP_REASONING ? 'r' : 't';
    if (ev->kind == RP_TOOL_CALL || k->no == 0 || k->order[k->no - 1] != letter)
        add(k->order, &k->no, sizeof k->order, &letter, 1);
    if (ev->kind == RP_CONTENT) add(k->content, &k->nc, sizeof k->content, ev->text, ev->len);
    if (ev->kind == RP_REASONING) add(k->reasoning, &k->nr, sizeof k->reasoning, ev->text, ev->len);
    if (ev->kind == RP_TOOL_CALL) {
        if (ev->index != k->n_calls) k->bad_index = 1;
        k->n_calls++;
        add(k->calls, &k->nt, sizeof k->calls, ev->name, strlen(ev->name));
        add(k->calls, &k->nt, sizeof k->calls, "|", 1);
        add(k->calls, &k->nt, sizeof k->calls, ev->arguments, ev->args_len);
        add(k->calls, &k->nt, sizeof k->calls, "\n", 1);
    }
    if (ev->kind != RP_TOOL_CALL && ev->len == 0) k->bad_index = 1; /* no empty pieces */
}

/* text fed in pieces of `step` bytes (0: all at once) */
static void split(const char *text, int reasoning, int tools, size_t step, sink *k) {
    memset(k, 0, sizeof *k);
    rp_splitter *p = rp_new(reasoning, tools);
    size_t n = strlen(text);
    if (!step) step = n ? n : 1;
    for (size_t i = 0; i < n; i += step) rp_feed(p, text + i, i + step <= n ? step : n - i, on_event, k);
    rp_finish(p, on_event, k);
    CHECK(rp_n_calls(p) == k->n_calls, "rp_n_calls %d, events %d", rp_n_calls(p), k->n_calls);
    rp_free(p);
}

/* The whole text and every piece size from 1 to 12 give the expected result. */
static void expect(const char *text, int reasoning, int tools, const char *content, const char *reason,
                   const char *calls, const char *order) {
    for (size_t step = 0; step <= 12; step++) {
        sink k;
        split(text, reasoning, tools, step, &k);
        CHECK(!strcmp(k.content, content), "step %zu: content '%s', want '%s'", step, k.content, content);
        CHECK(!strcmp(k.reasoning, reason), "step %zu: reasoning '%s', want '%s'", step, k.reasoning, reason);
        CHECK(!strcmp(k.calls, calls), "step %zu: calls '%s', want '%s'", step, k.calls, calls);
        if (order) CHECK(!strcmp(k.order, order), "step %zu: order '%s', want '%s'", step, k.order, order);
        CHECK(!k.bad_index, "step %zu: call indices 0, 1, ... and no empty pieces", step);
    }
}

TEST(plain_text_passes_through) {
    const char *t = "Hello <tool_call> world\n\n";
    expect(t, 0, 0, t, "", "", "c");
    expect("<think>\nx\n</think>\n\nHi", 0, 0, "<think>\nx\n</think>\n\nHi", "", "", "c");
    expect("", 0, 1, "", "", "", "");
    expect("Hi there.\n", 0, 1, "Hi there.\n", "", "", "c"); /* no call: trailing white space kept */
    expect("a <tool_ b", 0, 1, "a <tool_ b", "", "", "c");
    expect("ends with <tool_", 0, 1, "ends with <tool_", "", "", "c");
}

TEST(one_call) {
    expect("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", 0, 1, "", "",
           "get_weather|{\"city\": \"Paris\"}\n", "t");
    /* text before it; the newline before the tag is dropped (the template puts it back) */
    expect("Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n", 0, 1, "Let me look.", "",
           "f|{}\n", "ct");
    /* arguments exactly as written: nesting, strings holding braces and quotes, other members */
    expect("<tool_call>{\"arguments\": {\"q\": \"a}\\\"{[\", \"n\": [1, {\"x\": null}]}, \"name\": \"s\\u00e9arch\", "
           "\"id\": 3}</tool_call>",
           0, 1, "", "", "s\xc3\xa9" "arch|{\"q\": \"a}\\\"{[\", \"n\": [1, {\"x\": null}]}\n", "t");
}

TEST(several_calls) {
    expect("<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
           "\"arguments\": {\"y\": 2}}\n</tool_call>",
           0, 1, "", "", "a|{\"x\": 1}\nb|{\"y\": 2}\n", "tt");
    /* text between calls is content, in order */
    expect("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> and then <tool_call>{\"name\": \"b\", "
           "\"arguments\": {}}</tool_call> done",
           0, 1, " and then done", "", "a|{}\nb|{}\n", "tctc");
}

TEST(malformed_is_content) {
    const char *bad[] = {
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>", /* not JSON */
        "<tool_call>{\"name\": \"f\"}</tool_call>",                              /* no arguments */
        "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",             /* empty name */
        "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",                /* name not a string */
        "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",        /* arguments not an object */
        "<tool_call>[1, 2]</tool_call>",                                          /* not an object */
        "<tool_call>{\"name\": \"f\", \"arguments\": {}} extra</tool_call>",      /* text after the JSON */
        "<tool_call></tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"x\ty\"}}</tool_call>", /* a raw tab in a string */
        "<tool_call>{\"name\": \"f\",\x01\"arguments\": {}}</tool_call>",               /* a control byte between */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) expect(bad[i], 0, 1, bad[i], "", "", "c");
    /* a bad block between good ones: it and the white space beside it are content */
    expect("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>oops</tool_call>\n"
           "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
           0, 1, "\n<tool_call>oops</tool_call>", "", "a|{}\nb|{}\n", "tct");
}

TEST(unterminated_block_is_content) {
    const char *t = "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}";
    expect(t, 0, 1, t, "", "", "c");
    expect("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"na", 0, 1,
           "\n<tool_call>{\"na", "", "a|{}\n", "tc");
}

TEST(reasoning) {
    expect("<think>\nI should say hi.\n</think>\n\nHello!", 1, 0, "Hello!", "I should say hi.", "", "rc");
    expect("<think>\n\n</think>\n\nHello!", 1, 0, "Hello!", "", "", "c");
    expect("<think>\nstill thinking when cut", 1, 0, "", "still thinking when cut", "", "r");
    expect("No think block.", 1, 0, "No think block.", "", "", "c");
    expect("<thin", 1, 0, "<thin", "", "", "c");
    expect("<think", 1, 0, "<think", "", "", "c");
    expect(" <think>x</think>", 1, 0, " <think>x</think>", "", "", "c"); /* only at the very start */
    /* newlines inside the reasoning are kept, those beside the tags go */
    expect("<think>\n\na\n\nb\n\n</think>\n\n\nc\n", 1, 0, "c\n", "a\n\nb", "", "rc");
    /* reasoning, then a tool call; <tool_call> inside the reasoning is reasoning */
    expect("<think>\nuse <tool_call>?\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"b\"}}\n"
           "</tool_call>",
           1, 1, "", "use <tool_call>?", "f|{\"a\": \"b\"}\n", "rt");
}

TEST(parse_call_direct) {
    char *name;
    size_t off = 0, len = 0;
    const char *s = " {\"name\": \"x\", \"arguments\": {\"k\": [1, 2]}} ";
    CHECK(rp_parse_call(s, strlen(s), &name, &off, &len) == 0, "valid");
    CHECK(name && !strcmp(name, "x"), "name");
    CHECK(len == strlen("{\"k\": [1, 2]}") && !memcmp(s + off, "{\"k\": [1, 2]}", len), "arguments span");
    free(name);
    CHECK(rp_parse_call(s, 5, &name, &off, &len) == -1 && !name, "cut short");
    CHECK(rp_parse_call("", 0, &name, &off, &len) == -1, "empty");
}

int main(void) {
    RUN(plain_text_passes_through);
    RUN(one_call);
    RUN(several_calls);
    RUN(malformed_is_content);
    RUN(unterminated_block_is_content);
    RUN(reasoning);
    RUN(parse_call_direct);
    CHECK_DONE("test_reply");
}
