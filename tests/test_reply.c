/* test_reply.c - a reply split into reasoning, content and tool calls
 * (src/reply.c): valid calls, several calls, malformed JSON, an unterminated
 * block, tags and JSON cut across pieces at every byte and at every pair of
 * cut points; the result never depends on how the text is split; a
 * streamed call's arguments come out as they arrive (held back: only what
 * may start "</tool_call>"); the call limit (parallel_tool_calls: false);
 * gpt-oss's harmony and Gemma 4's thinking channel and tool calls; the
 * splitter each chat format gets (rp_new_for). */
#include <cJSON.h>

#include "chat.h"
#include "check.h"
#include "reply.h"
#include "tokenizer.h"
#include "util.h"

/* What a splitter emitted: content and reasoning concatenated, the calls
 * as "name|arguments" lines, and the order of kinds as letters (c, r, t;
 * consecutive text pieces of one kind count once). */
typedef struct {
    char content[8192], reasoning[8192], calls[8192], order[64];
    size_t nc, nr, nt, no;
    int n_calls, bad_index, in_call;
} sink;

static void add(char *dst, size_t *n, size_t cap, const char *s, size_t len) {
    if (*n + len < cap) memcpy(dst + *n, s, len), *n += len;
    dst[*n] = 0;
}

static void on_event(void *ud, const rp_event *ev) {
    sink *k = ud;
    char letter = ev->kind == RP_CONTENT ? 'c' : ev->kind == RP_REASONING ? 'r' : 't';
    if (ev->kind == RP_CALL_BEGIN || (ev->kind < RP_CALL_BEGIN && (k->no == 0 || k->order[k->no - 1] != letter)))
        add(k->order, &k->no, sizeof k->order, &letter, 1);
    /* BEGIN, ARGS..., END of one index at a time, indices 0, 1, ... */
    if (k->in_call != (ev->kind == RP_CALL_ARGS || ev->kind == RP_CALL_END)) k->bad_index = 1;
    if (ev->kind >= RP_CALL_BEGIN && ev->index != k->n_calls - (ev->kind != RP_CALL_BEGIN)) k->bad_index = 1;
    if (ev->kind == RP_CONTENT) add(k->content, &k->nc, sizeof k->content, ev->text, ev->len);
    if (ev->kind == RP_REASONING) add(k->reasoning, &k->nr, sizeof k->reasoning, ev->text, ev->len);
    if (ev->kind == RP_CALL_BEGIN) {
        k->n_calls++;
        k->in_call = 1;
        add(k->calls, &k->nt, sizeof k->calls, ev->name, strlen(ev->name));
        add(k->calls, &k->nt, sizeof k->calls, "|", 1);
    }
    if (ev->kind == RP_CALL_ARGS) add(k->calls, &k->nt, sizeof k->calls, ev->text, ev->len);
    if (ev->kind == RP_CALL_END) {
        k->in_call = 0;
        add(k->calls, &k->nt, sizeof k->calls, "\n", 1);
    }
    if ((ev->kind == RP_CONTENT || ev->kind == RP_REASONING || ev->kind == RP_CALL_ARGS) && ev->len == 0)
        k->bad_index = 1; /* no empty pieces */
}

/* text fed in pieces of `step` bytes (0: all at once) */
static int max_calls; /* rp_max_calls of the splitters split() makes */
static int harmony;   /* split() and split_at() make rp_new_harmony() splitters */
static int gemma4;    /* ... or rp_new_gemma4(tools) ones */

static rp_splitter *new_splitter(int reasoning, int tools) {
    return harmony ? rp_new_harmony() : gemma4 ? rp_new_gemma4(tools) : rp_new(reasoning, tools);
}

static void split(const char *text, int reasoning, int tools, size_t step, sink *k) {
    memset(k, 0, sizeof *k);
    rp_splitter *p = new_splitter(reasoning, tools);
    rp_max_calls(p, max_calls);
    size_t n = strlen(text);
    if (!step) step = n ? n : 1;
    for (size_t i = 0; i < n; i += step) rp_feed(p, text + i, i + step <= n ? step : n - i, on_event, k);
    rp_finish(p, on_event, k);
    CHECK(rp_n_calls(p) == k->n_calls, "rp_n_calls %d, events %d", rp_n_calls(p), k->n_calls);
    CHECK(!k->in_call, "every call ended");
    if (gemma4) /* (the tests' texts hold these tags nowhere else than where they end the reply) */
        CHECK(rp_done(p) == (strstr(text, "<turn|>") || (tools && strstr(text, "<|tool_response>")) ||
                             (max_calls > 0 && k->n_calls >= max_calls)),
              "rp_done: <turn|>, with tools <|tool_response>, or the call limit");
    else CHECK(rp_done(p) == (max_calls > 0 && k->n_calls >= max_calls), "rp_done");
    rp_free(p);
}

/* text cut at the given points (sorted, n_cuts of them) */
static void split_at(const char *text, int reasoning, int tools, const size_t *cuts, int n_cuts, sink *k) {
    memset(k, 0, sizeof *k);
    rp_splitter *p = new_splitter(reasoning, tools);
    rp_max_calls(p, max_calls);
    size_t n = strlen(text), at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : n;
        rp_feed(p, text + at, to - at, on_event, k);
        at = to;
    }
    rp_finish(p, on_event, k);
    CHECK(!k->in_call, "every call ended");
    rp_free(p);
}

static int same_sink(const sink *a, const sink *b) {
    return !strcmp(a->content, b->content) && !strcmp(a->reasoning, b->reasoning) && !strcmp(a->calls, b->calls) &&
           !strcmp(a->order, b->order) && a->n_calls == b->n_calls && !b->bad_index;
}

/* Every way of cutting the text at one or two points gives what the whole
 * text gives. */
static void every_cut(const char *text, int reasoning, int tools) {
    sink whole, k;
    split(text, reasoning, tools, 0, &whole);
    size_t n = strlen(text);
    int bad = 0;
    for (size_t a = 0; a <= n && !bad; a++)
        for (size_t b = a; b <= n && !bad; b++) {
            size_t cuts[2] = {a, b};
            split_at(text, reasoning, tools, cuts, 2, &k);
            if (!same_sink(&whole, &k)) {
                bad = 1;
                CHECK(0, "cut at %zu, %zu: calls '%s' content '%s', whole: '%s' '%s'", a, b, k.calls, k.content,
                      whole.calls, whole.content);
            }
        }
    CHECK(!bad, "every cut of '%.40s...' gives the whole text's events", text);
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
    /* blocks that do not start as a streamed call's head and are not whole calls */
    const char *bad[] = {
        "<tool_call>{\"name\": \"f\"}</tool_call>",                              /* no arguments */
        "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",             /* empty name */
        "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",                /* name not a string */
        "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",        /* arguments not an object */
        "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",           /* an array */
        "<tool_call>[1, 2]</tool_call>",                                          /* not an object */
        "<tool_call></tool_call>",
        "<tool_call>{\"name\": \"f\",\x01\"arguments\": {}}</tool_call>",               /* a control byte between */
        "<tool_call>{\"name\": \"a\tb\", \"arguments\": {}}</tool_call>",                /* a raw tab in the name */
        "<tool_call>{\"name\": \"a\\q\", \"arguments\": {}}</tool_call>",               /* a bad escape */
        "<tool_call>{\"arguments\": {}, \"name\": \"f\"} extra</tool_call>",            /* text after the JSON */
        "<tool_call>{\"name\": \"a</tool_call>\", \"arguments\": {}}</tool_call>",       /* the tag ends the block */
        "<tool_call>{\"arguments\": {\"x\": }, \"name\": \"f\"}</tool_call>",           /* not JSON */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        expect(bad[i], 0, 1, bad[i], "", "", "c");
        every_cut(bad[i], 0, 1);
    }
    /* a bad block between good ones: it and the white space beside it are content */
    expect("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>oops</tool_call>\n"
           "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
           0, 1, "\n<tool_call>oops</tool_call>", "", "a|{}\nb|{}\n", "tct");
    /* a block too long to be a streamed call's head is parsed whole */
    char big[6000];
    int n = snprintf(big, sizeof big, "<tool_call>{%4200s\"name\": \"f\", \"arguments\": {\"k\": 1}}</tool_call>", "");
    CHECK(n > 0 && (size_t)n < sizeof big, "big");
    expect(big, 0, 1, "", "", "f|{\"k\": 1}\n", "t");
    big[n - 12] = 'x'; /* "}}x/tool_call>": never closed: content */
    expect(big, 0, 1, big, "", "", "c");
}

TEST(streamed_call_commits_at_its_head) {
    /* once '{"name": "f", "arguments": {' is there it is a call, whatever follows:
     * the arguments as written, as OpenAI's may be (not checked as JSON) */
    expect("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>", 0, 1, "", "", "f|{\"x\": }\n", "t");
    expect("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"x\ty\"}}</tool_call>", 0, 1, "", "",
           "f|{\"a\": \"x\ty\"}\n", "t");
    /* after the arguments' object, the rest of the block is dropped */
    expect("<tool_call>{\"name\": \"f\", \"arguments\": {}} extra</tool_call>", 0, 1, "", "", "f|{}\n", "t");
    expect("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": \"}]\\\"\"}]}, \"id\": 7}</tool_call>!", 0,
           1, "!", "", "f|{\"a\": [1, {\"b\": \"}]\\\"\"}]}\n", "tc");
    /* never closed (the reply was cut): the arguments so far */
    const char *cut = "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}";
    expect(cut, 0, 1, "Sure.", "", "f|{\"x\": 1}\n", "ct");
    expect("<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"abc", 0, 1, "", "", "f|{\"q\": \"abc\n", "t");
    /* the object not closed by the end tag: the arguments end there */
    expect("<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"a</tool_call> b", 0, 1, " b", "",
           "f|{\"q\": \"a\n", "tc");
    /* the head not complete when the reply ends: content */
    expect("<tool_call>{\"name\": \"f\", \"argu", 0, 1, "<tool_call>{\"name\": \"f\", \"argu", "", "", "c");
    expect("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"na", 0, 1,
           "\n<tool_call>{\"na", "", "a|{}\n", "tc");
    /* escapes in the name are unescaped */
    expect("<tool_call>{\"name\": \"s\\u00e9\\\"q\", \"arguments\": {}}</tool_call>", 0, 1, "", "",
           "s\xc3\xa9\"q|{}\n", "t");
    /* JSON white space anywhere in the head, none needed */
    expect("<tool_call>\r\n\t{ \"name\"\n:\t\"f\" ,\n\"arguments\" :\n{\"k\":1}\n}\n</tool_call>", 0, 1, "", "",
           "f|{\"k\":1}\n", "t");
    expect("<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>", 0, 1, "", "", "f|{}\n", "t");
}

/* What a splitter fed byte by byte has emitted of the first call's
 * arguments after each byte: everything written of them but a possible
 * start of "</tool_call>". */
static void one_by_one(const char *text, const char *args_want) {
    rp_splitter *p = rp_new(0, 1);
    sink k;
    memset(&k, 0, sizeof k);
    size_t n = strlen(text);
    const char *a = strstr(text, "\"arguments\": {") + 13; /* the arguments' "{" */
    size_t a0 = (size_t)(a - text), alen = strlen(args_want);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        rp_feed(p, text + i, 1, on_event, &k);
        size_t have = i + 1 > a0 ? i + 1 - a0 : 0; /* bytes of the arguments region fed */
        if (have > alen) have = alen;
        /* the held back part: a start of "</tool_call>" just fed */
        size_t held = 0;
        for (size_t l = 1; l < 12 && l <= i + 1; l++)
            if (!memcmp(text + i + 1 - l, "</tool_call>", l)) held = l;
        size_t want = i + 1 >= a0 + alen ? alen : have >= held ? have - held : 0;
        const char *bar = strchr(k.calls, '|');
        size_t got = bar ? strlen(bar + 1) : 0;
        if (got && bar[got] == '\n') got--; /* the call ended */
        if (i + 1 > a0 && (got != want || memcmp(bar + 1, args_want, got))) {
            bad = 1;
            CHECK(0, "after byte %zu: %zu bytes of the arguments out, want %zu ('%s')", i, got, want, k.calls);
            break;
        }
    }
    rp_finish(p, on_event, &k);
    rp_free(p);
    CHECK(!bad, "'%.30s...': the arguments stream byte by byte", text);
}

TEST(arguments_stream_as_written) {
    one_by_one("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n"
               "</tool_call>",
               "{\"city\": \"Paris\", \"days\": [1, 2]}");
    /* "<" and "</" inside the arguments are held only while they may start the end tag */
    one_by_one("<tool_call>{\"name\": \"f\", \"arguments\": {\"html\": \"<b></b></tool\"}}</tool_call>",
               "{\"html\": \"<b></b></tool\"}");
    /* several calls, several pieces: every cut */
    const char *t = "Checking.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"}<\"}}\n</tool_call>\n"
                    "<tool_call>\n{\"arguments\": {\"y\": 2}, \"name\": \"b\"}\n</tool_call>\n"
                    "<tool_call>\n{\"name\": \"c\", \"arguments\": {\"z\": [3]}}\n</tool_call>";
    expect(t, 0, 1, "Checking.", "", "a|{\"x\": \"}<\"}\nb|{\"y\": 2}\nc|{\"z\": [3]}\n", "cttt");
    every_cut(t, 0, 1);
    every_cut("<think>\nhm </think>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"a\\\\\"}}\n</tool_call>\n",
              1, 1);
    every_cut("<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"a</tool_call> b <tool_call>{\"x\"", 0, 1);
}

TEST(call_limit) {
    const char *t = "Hi.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
                    "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call> more";
    max_calls = 1; /* after the first call everything is dropped */
    expect(t, 0, 1, "Hi.", "", "a|{\"x\": 1}\n", "ct");
    every_cut(t, 0, 1);
    /* a block that is not a call does not count */
    expect("<tool_call>oops</tool_call>\n<tool_call>{\"arguments\": {}, \"name\": \"b\"}</tool_call>x", 0, 1,
           "<tool_call>oops</tool_call>", "", "b|{}\n", "ct");
    max_calls = 2;
    expect(t, 0, 1, "Hi.", "", "a|{\"x\": 1}\nb|{}\n", "ctt");
    max_calls = 0;
    expect(t, 0, 1, "Hi. more", "", "a|{\"x\": 1}\nb|{}\n", "cttc");
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

/* A reply as the model's tokens bring it: the real Qwen3 tokenizer's pieces,
 * one feed per token. The events equal the whole text's, and the first
 * call's arguments come out over many tokens, not at the end. */
static int args_feeds; /* feeds that released arguments */
static int args_seen;
static void count_args(void *ud, const rp_event *ev) {
    if (ev->kind == RP_CALL_ARGS && ev->index == 0) args_seen = 1;
    on_event(ud, ev);
}

TEST(real_token_pieces) {
    const char *env = getenv("DFLASH_ROOT");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/qwen3-tokenizer", env ? env : ".");
    tok_tokenizer *t = tok_load(dir);
    CHECK(t != NULL, "tok_load %s: %s", dir, dfl_lasterr());
    if (!t) return;
    const char *texts[] = {
        "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"S\xc3\xa3o Paulo\", \"unit\": \"celsius\", \"days\": [1, 2, 3], \"note\": \"a \\\"quoted\\\" <b>\"}}\n"
        "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"America/Sao_Paulo\"}}\n"
        "</tool_call>",
        "Let me check.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"C11 threads vs pthreads\", "
        "\"limit\": 5}}\n</tool_call>",
    };
    for (size_t c = 0; c < sizeof texts / sizeof *texts; c++) {
        int32_t *ids;
        size_t n;
        CHECK(tok_encode(t, texts[c], strlen(texts[c]), &ids, &n) == 0, "encode");
        sink whole, k;
        split(texts[c], 1, 1, 0, &whole);
        memset(&k, 0, sizeof k);
        rp_splitter *p = rp_new(1, 1);
        size_t cap = tok_max_piece(t);
        char *buf = dfl_malloc(cap + 1);
        tok_decoder d = {0};
        args_feeds = 0;
        for (size_t i = 0; i <= n; i++) {
            size_t w = i < n ? tok_decode(t, &d, ids[i], buf, cap) : tok_decode_flush(&d, buf, cap);
            args_seen = 0;
            rp_feed(p, buf, w, count_args, &k);
            args_feeds += args_seen;
        }
        rp_finish(p, on_event, &k);
        rp_free(p);
        free(buf);
        free(ids);
        CHECK(same_sink(&whole, &k), "text %zu: token pieces: calls '%s' content '%s' reasoning '%s'; whole '%s'", c,
              k.calls, k.content, k.reasoning, whole.calls);
        CHECK(args_feeds >= 12, "text %zu: the first call's arguments came out in %d tokens' feeds (of %zu tokens)", c,
              args_feeds, n);
        CHECK(whole.n_calls == (c == 0 ? 2 : 1), "text %zu: %d calls", c, whole.n_calls);
    }
    tok_free(t);
}

/* gpt-oss's harmony messages (rp_new_harmony): the final channel is content,
 * analysis and commentary reasoning, a message with a recipient a tool call */
#define A_ "<|channel|>analysis<|message|>"
#define F_ "<|start|>assistant<|channel|>final<|message|>"
TEST(harmony_channels) {
    harmony = 1;
    const char *t1 = A_ "The user greets.<|end|>" F_ "Hello! How can I help?";
    expect(t1, 0, 0, "Hello! How can I help?", "The user greets.", "", "rc");
    every_cut(t1, 0, 0);
    /* the stop token in the text (ignore_eos), white space kept as written, no final yet */
    expect(A_ "x\n<|end|>" F_ "\n y <|return|>", 0, 0, "\n y ", "x\n", "", "rc");
    expect(A_ "only thinking, cut", 0, 0, "", "only thinking, cut", "", "r");
    expect(A_ "a<|end|><|start|>assistant", 0, 0, "", "a", "", "r"); /* a turn opened, then the end */
    expect(A_ "a<|end|><|start|>assistant<|channel|>fin", 0, 0, "", "a", "", "r");
    expect("<|channel|>final<|message|>direct", 0, 0, "direct", "", "", "c");
    expect("<|channel|>commentary<|message|>I will look it up.<|end|>" F_ "done", 0, 0, "done",
           "I will look it up.", "", "rc");
    /* a model that skips <|end|> before the next <|start|> */
    expect(A_ "a" F_ "b", 0, 0, "b", "a", "", "rc");
    /* text outside the format is content, up to an end tag */
    const char *plain = "Plain answer <| not a tag |> with 1 < 2";
    expect(plain, 0, 0, plain, "", "", "c");
    every_cut(plain, 0, 0);
    expect("Plain<|end|>" F_ "more", 0, 0, "Plainmore", "", "", "c");
    /* a header that never reaches <|message|> within 512 bytes is content */
    char big[700] = "<|channel|>";
    memset(big + 11, 'x', 600);
    big[611] = 0;
    expect(big, 0, 0, big, "", "", "c");
    /* the same after "<|start|>": the tag is text too (the splitter once looped forever
     * here, taking the tag for the end of an empty body; found by fuzz_reply) */
    char big2[720] = "<|start|>";
    memset(big2 + 9, 'x', 600);
    big2[609] = 0;
    expect(big2, 0, 0, big2, "", "", "c");
    every_cut(big2, 0, 0);
    char big3[sizeof big2 + 64], want3[sizeof big2 + 64];
    snprintf(big3, sizeof big3, "%s<|end|>" F_ "ok", big2);
    snprintf(want3, sizeof want3, "%sok", big2);
    expect(big3, 0, 0, want3, "", "", "c");
    /* "<|message|>" inside a final answer is text */
    expect(F_ "use <|message|> here", 0, 0, "use <|message|> here", "", "", "c");
    harmony = 0;
}

TEST(harmony_tool_calls) {
    harmony = 1;
    const char *t = A_ "Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
                    "<|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
    expect(t, 0, 0, "", "Need the weather.", "get_weather|{\"city\": \"Paris\"}\n", "rt");
    every_cut(t, 0, 0);
    /* the recipient in the role part, the call's stop token not in the text */
    expect(" to=functions.lookup<|channel|>commentary json<|message|>{}", 0, 0, "", "", "lookup|{}\n", "t");
    /* a built-in tool keeps its whole name; two calls; the limit */
    const char *two = "<|channel|>analysis to=browser.search<|message|>{\"q\": 1}<|call|>"
                      "<|start|>assistant to=functions.f<|channel|>commentary<|message|>[]<|call|>" F_ "ok";
    expect(two, 0, 0, "ok", "", "browser.search|{\"q\": 1}\nf|[]\n", "ttc");
    every_cut(two, 0, 0);
    max_calls = 1;
    expect(two, 0, 0, "", "", "browser.search|{\"q\": 1}\n", "t");
    max_calls = 0;
    harmony = 0;
}

/* the real gpt-oss tokens, one decode at a time, give the whole text's events */
TEST(harmony_token_pieces) {
    const char *env = getenv("DFLASH_ROOT");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/gptoss-tokenizer", env ? env : ".");
    tok_tokenizer *t = tok_load(dir);
    CHECK(t != NULL, "tok_load %s: %s", dir, dfl_lasterr());
    if (!t) return;
    harmony = 1;
    const char *text = A_ "User asks: S\xc3\xa3o Paulo weather. \xf0\x9f\x8c\xa6 Use the tool.<|end|>"
                       "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                       "{\"city\": \"S\xc3\xa3o Paulo\"}<|call|>" F_ "It is 21 \xc2\xb0" "C in S\xc3\xa3o Paulo.";
    int32_t *ids;
    size_t n;
    CHECK(tok_encode(t, text, strlen(text), &ids, &n) == 0, "encode");
    sink whole, k;
    split(text, 0, 0, 0, &whole);
    memset(&k, 0, sizeof k);
    rp_splitter *p = rp_new_harmony();
    size_t cap = tok_max_piece(t);
    char *buf = dfl_malloc(cap + 1);
    tok_decoder d = {0};
    for (size_t i = 0; i <= n; i++) {
        size_t w = i < n ? tok_decode(t, &d, ids[i], buf, cap) : tok_decode_flush(&d, buf, cap);
        rp_feed(p, buf, w, on_event, &k);
    }
    rp_finish(p, on_event, &k);
    rp_free(p);
    free(buf);
    free(ids);
    CHECK(same_sink(&whole, &k), "token pieces: calls '%s' content '%s' reasoning '%s'", k.calls, k.content,
          k.reasoning);
    CHECK(!strcmp(whole.content, "It is 21 \xc2\xb0" "C in S\xc3\xa3o Paulo.") &&
              !strcmp(whole.calls, "get_weather|{\"city\": \"S\xc3\xa3o Paulo\"}\n") && !strcmp(whole.order, "rtc"),
          "content '%s' calls '%s' order '%s'", whole.content, whole.calls, whole.order);
    harmony = 0;
    tok_free(t);
}

/* Gemma 4 (rp_new_gemma4): a thinking channel is reasoning, its name
 * dropped, the rest content as written; <turn|> ends the reply */
#define T_ "<|channel>thought\n"
TEST(gemma4_channels) {
    gemma4 = 1;
    const char *t1 = T_ "The user greets.<channel|>Hello! How can I help?";
    expect(t1, 0, 0, "Hello! How can I help?", "The user greets.", "", "rc");
    every_cut(t1, 0, 0);
    expect("Hello!\n", 0, 0, "Hello!\n", "", "", "c"); /* thinking off: all content, as written */
    expect(T_ "<channel|>answer", 0, 0, "answer", "", "", "c"); /* the empty channel of the prompt */
    const char *end = T_ "r<channel|> answer <turn|>ignored<|channel>x";
    expect(end, 0, 0, " answer ", "r", "", "rc");
    every_cut(end, 0, 0);
    expect(T_ "only thinking, cut", 0, 0, "", "only thinking, cut", "", "r");
    expect(T_ "r<turn|>x<channel|>y", 0, 0, "", "r", "", "r"); /* <turn|> inside the channel */
    expect("<|channel>no name<channel|>x", 0, 0, "x", "no name", "", "rc");
    expect("<|channel>thou", 0, 0, "", "thou", "", "r"); /* a name cut by the reply's end */
    expect("<|channel>thought x<channel|>", 0, 0, "", "thought x", "", "r");
    expect("a<channel|>b", 0, 0, "ab", "", "", "c"); /* a stray close tag is dropped */
    const char *two = T_ "a<channel|>b" T_ "c<channel|>d";
    expect(two, 0, 0, "bd", "ac", "", "rcrc");
    every_cut(two, 0, 0);
    expect("<|channel>a<|channel>b<channel|>c", 0, 0, "c", "a<|channel>b", "", "rc");
    const char *look = "1 <| 2 <channel 3 <turn 4 <|channel 5 thought\n <channel| <turn|";
    expect(look, 0, 0, look, "", "", "c");
    every_cut(look, 0, 0);
    expect("", 0, 0, "", "", "", "");
    expect("<turn|>", 0, 0, "", "", "", "");
    gemma4 = 0;
}

/* Gemma 4's tool calls (rp_new_gemma4(1)): "<|tool_call>call:NAME{...}<tool_call|>"
 * with the arguments in the template's notation, given as JSON */
#define Q_ "<|\"|>"
#define C_ "<|tool_call>call:"
#define E_ "<tool_call|>"
/* each call's arguments (the text after "|" up to the newline) parse as a JSON object */
static int args_are_objects(const char *calls) {
    int ok = 1;
    for (const char *l = calls; *l;) {
        const char *bar = strchr(l, '|'), *nl = strchr(l, '\n');
        if (!bar || !nl || bar > nl) return 0;
        cJSON *o = cJSON_ParseWithLength(bar + 1, (size_t)(nl - bar - 1));
        ok &= cJSON_IsObject(o);
        cJSON_Delete(o);
        l = nl + 1;
    }
    return ok;
}

TEST(gemma4_tool_calls) {
    gemma4 = 1;
    const char *one = C_ "get_weather{city:" Q_ "Paris" Q_ "}" E_;
    expect(one, 0, 1, "", "", "get_weather|{\"city\":\"Paris\"}\n", "t");
    every_cut(one, 0, 1);
    /* thinking, text, a call; the white space before it dropped; <|tool_response> ends the reply */
    const char *full = T_ "Need the weather.<channel|>Let me check.\n" C_ "get_weather{city:" Q_ "Paris" Q_ ",unit:" Q_
                       "celsius" Q_ "}" E_ "<|tool_response>response:get_weather{temp:21}";
    expect(full, 0, 1, "Let me check.", "Need the weather.", "get_weather|{\"city\":\"Paris\",\"unit\":\"celsius\"}\n",
           "rct");
    every_cut(full, 0, 1);
    /* two calls, white space between and after them dropped; the limit stops after the first */
    const char *two = C_ "f{}" E_ "\n " C_ "g{a:1}" E_ "\n";
    expect(two, 0, 1, "", "", "f|{}\ng|{\"a\":1}\n", "tt");
    every_cut(two, 0, 1);
    max_calls = 1;
    expect(two, 0, 1, "", "", "f|{}\n", "t");
    max_calls = 0;
    /* every kind of value: numbers and literals as such (Python's True / False / None too),
     * other bare words as strings, nesting, escapes, a quoted key */
    const char *values = C_ "s{a:1,b:-2.5e3,c:true,d:None,e:False,f:[1," Q_ "x" Q_ ",{g:null}],h:{i:" Q_ "q\"\\\n\t" Q_
                         "},j:word,k:01, l : 2 ," Q_ "my key" Q_ ":[ ],m:" Q_ "x <|\" y" Q_ "}" E_;
    const char *want = "s|{\"a\":1,\"b\":-2.5e3,\"c\":true,\"d\":null,\"e\":false,\"f\":[1,\"x\",{\"g\":null}],"
                       "\"h\":{\"i\":\"q\\\"\\\\\\n\\t\"},\"j\":\"word\",\"k\":\"01\",\"l\":2,\"my key\":[],"
                       "\"m\":\"x <|\\\" y\"}\n";
    expect(values, 0, 1, "", "", want, "t");
    every_cut(values, 0, 1);
    /* malformed: a missing value is null, a key without ":" dropped, a missing comma
     * supplied, what is open at the end closed, text after the arguments dropped */
    expect(C_ "m{a:,b:1,:2,c}" E_, 0, 1, "", "", "m|{\"a\":null,\"b\":1,\"\":2}\n", "t");
    expect(C_ "m{a:1 b:[1 2,,3]}" E_, 0, 1, "", "", "m|{\"a\":1,\"b\":[1,2,3]}\n", "t");
    const char *cut = C_ "m{a:{b:[" Q_ "unfinished";
    expect(cut, 0, 1, "", "", "m|{\"a\":{\"b\":[\"unfinished\"]}}\n", "t");
    every_cut(cut, 0, 1);
    expect(C_ "m{a:1} extra" E_ "after", 0, 1, "after", "", "m|{\"a\":1}\n", "tc");
    expect(C_ "m{a:1,b" E_, 0, 1, "", "", "m|{\"a\":1}\n", "t");
    expect(C_ "m{a]b:1}" E_, 0, 1, "", "", "m|{}\n", "t"); /* ']' closes the object; the rest is dropped */
    /* not a call's head: content, tags and all */
    const char *notcall = "<|tool_call>hello" E_ " and " C_ "{}" E_ " and " C_ "na me{}";
    expect(notcall, 0, 1, notcall, "", "", "c");
    every_cut(notcall, 0, 1);
    expect("<|tool_call>call:f", 0, 1, "<|tool_call>call:f", "", "", "c"); /* cut in the head */
    /* tools off: all of it content */
    expect(one, 0, 0, one, "", "", "c");
    expect("a<|tool_response>b", 0, 0, "a<|tool_response>b", "", "", "c");
    /* whatever is written, the arguments are a JSON object */
    const char *wild[] = {C_ "w{" E_, C_ "w{{{[[[" E_, C_ "w{a:" Q_ E_, C_ "w{\x01:\x02,\"\\:" Q_ "\x7f" Q_ "}" E_,
                          C_ "w{a:[}" E_, C_ "w{a:}}}" E_, C_ "w{:::,,,}" E_};
    for (size_t i = 0; i < sizeof wild / sizeof wild[0]; i++) {
        sink k;
        split(wild[i], 0, 1, 0, &k);
        CHECK(k.n_calls == 1 && args_are_objects(k.calls), "'%s': arguments %s", wild[i], k.calls);
        every_cut(wild[i], 0, 1);
    }
    char deep[400] = C_ "d{a:";
    for (int i = 0; i < 80; i++) strcat(deep, "[");
    strcat(deep, E_);
    sink k;
    split(deep, 0, 1, 0, &k);
    CHECK(k.n_calls == 1 && args_are_objects(k.calls), "80 levels: %s", k.calls);
    gemma4 = 0;
}

static void feed_all(rp_splitter *p, const char *text, sink *k) {
    memset(k, 0, sizeof *k);
    rp_feed(p, text, strlen(text), on_event, k);
    rp_finish(p, on_event, k);
    rp_free(p);
}

/* rp_new_for: each chat format's splitter. Regression: the server once took
 * any template with extra stop tokens for harmony, so Gemma 3 replies went
 * through the harmony splitter. */
TEST(splitter_for_format) {
    const char *env = getenv("DFLASH_ROOT");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/gemma3-tokenizer", env ? env : ".");
    tok_tokenizer *t = tok_load(dir);
    CHECK(t != NULL, "tok_load %s: %s", dir, dfl_lasterr());
    if (t) {
        const char *g3 = tok_chat_template(t);
        CHECK(chat_stop_tokens(g3) != NULL, "Gemma 3's template has extra stop tokens");
        for (int th = 0; th < 2; th++)
            CHECK(rp_new_for(chat_detect(g3), th, 0) == NULL, "Gemma 3 (think %d): no splitter, all content", th);
        tok_free(t);
    }
    sink k;
    rp_splitter *p = rp_new_for(CHAT_HARMONY, 0, 0);
    CHECK(p != NULL, "harmony always splits");
    if (p) {
        feed_all(p, A_ "x<|end|>" F_ "y", &k);
        CHECK(!strcmp(k.content, "y") && !strcmp(k.reasoning, "x"), "harmony: '%s' '%s'", k.content, k.reasoning);
    }
    for (int v = 0; v < 4; v++) {
        p = rp_new_for(v & 1 ? CHAT_GEMMA4_EARLY : CHAT_GEMMA4, 0, v >> 1);
        CHECK(p != NULL, "Gemma 4 always splits");
        if (p) {
            feed_all(p, T_ "x<channel|>y" C_ "f{}" E_, &k);
            CHECK(!strcmp(k.content, v >> 1 ? "y" : "y" C_ "f{}" E_) && !strcmp(k.reasoning, "x") &&
                      !strcmp(k.calls, v >> 1 ? "f|{}\n" : ""),
                  "gemma4 (tools %d): '%s' '%s' '%s'", v >> 1, k.content, k.reasoning, k.calls);
        }
    }
    CHECK(rp_new_for(CHAT_QWEN3, 0, 0) == NULL && rp_new_for(CHAT_LLAMA3, 0, 0) == NULL && rp_new_for(-1, 0, 0) == NULL,
          "Qwen3 / Llama-3 / unknown without reasoning or tools: no splitter");
    p = rp_new_for(CHAT_QWEN3, 1, 0);
    CHECK(p != NULL, "Qwen3 with reasoning");
    if (p) {
        feed_all(p, "<think>\nr\n</think>\n\nc", &k);
        CHECK(!strcmp(k.content, "c") && !strcmp(k.reasoning, "r"), "qwen3: '%s' '%s'", k.content, k.reasoning);
    }
    p = rp_new_for(CHAT_QWEN3, 0, 1);
    CHECK(p != NULL, "Qwen3 with tools");
    if (p) {
        feed_all(p, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", &k);
        CHECK(!strcmp(k.calls, "f|{}\n"), "qwen3 call: '%s'", k.calls);
    }
}

int main(void) {
    RUN(plain_text_passes_through);
    RUN(one_call);
    RUN(several_calls);
    RUN(malformed_is_content);
    RUN(streamed_call_commits_at_its_head);
    RUN(arguments_stream_as_written);
    RUN(call_limit);
    RUN(real_token_pieces);
    RUN(reasoning);
    RUN(parse_call_direct);
    RUN(harmony_channels);
    RUN(harmony_tool_calls);
    RUN(harmony_token_pieces);
    RUN(gemma4_channels);
    RUN(gemma4_tool_calls);
    RUN(splitter_for_format);
    CHECK_DONE("test_reply");
}
