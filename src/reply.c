/* reply.c - reasoning / content / tool-call splitting of a reply (see reply.h).
 * Qwen3's format first; gpt-oss's harmony messages (rp_new_harmony) and Gemma 4's
 * thinking channel (rp_new_gemma4) at the end.
 *
 * The splitter keeps the text it cannot decide yet in `hold`: the start of a
 * tag that may be "<think>", "</think>", "<tool_call>" or "</tool_call>",
 * the inside of an open <tool_call> block until its head is known (a
 * streamed call's, ST_ARGS) or until it closes (any other block), newlines
 * that may precede "</think>", and white space that is dropped if a tool
 * call follows (`ws`). Everything decided goes out at once, so a stream lags
 * the model only by such pieces: a streamed call's arguments by nothing but
 * a possible start of "</tool_call>". Every decision is a function of the
 * text so far, never of where the pieces were cut. */
#include "reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "chat.h"
#include "util.h"

/* ST_CALL: in a block, its head undecided (or not a streamed call: the
 * whole block is parsed at its end); ST_ARGS: a streamed call's arguments;
 * ST_TAIL: after them, up to the end tag (dropped); ST_DONE: the call
 * limit was reached, everything is dropped. */
enum { ST_PROBE, ST_REASON, ST_CONTENT, ST_CALL, ST_ARGS, ST_TAIL, ST_DONE, ST_H_HEAD, ST_H_BODY,
       ST_G_CONTENT, ST_G_HEAD, ST_G_REASON, ST_G_CALL, ST_G_ARGS };

/* A streamed call's head must lie in its block's first HEAD_MAX bytes (it
 * bounds the rescans of an undecided head). */
enum { HEAD_MAX = 4096 };

static const char TAG_THINK[] = "<think>", TAG_THINK_END[] = "</think>";
static const char TAG_CALL[] = "<tool_call>", TAG_CALL_END[] = "</tool_call>";

struct rp_splitter {
    int tools;
    int state;
    int at_start;     /* ST_REASON / ST_CONTENT: nothing emitted yet, leading newlines go */
    int after_call;   /* the last thing decided was a tool call */
    int n_calls;      /* calls begun */
    int max_calls;    /* 0: no limit */
    int whole_block;  /* ST_CALL: the head cannot be a streamed call's: parse the block at its end */
    int depth, in_str, esc; /* ST_ARGS: the arguments' nesting so far */
    int harmony;      /* rp_new_harmony: ST_H_HEAD / ST_H_BODY, h_kind the body's */
    int gemma4;       /* rp_new_gemma4: ST_G_CONTENT / ST_G_HEAD / ST_G_REASON / ST_G_CALL / ST_G_ARGS */
    /* ST_G_ARGS: Gemma 4's call arguments being turned into JSON: the open
     * containers ('{' or '['), whether each has a member yet, where in it
     * the text is (G_*), a key or bare word so far */
    char g_stack[64];
    char g_any[64];
    int g_depth, g_mode;
    dfl_buf g_tok;
    rp_kind h_kind;
    int h_unframed;   /* ST_H_BODY entered on text that is no header: its first byte is text,
                       * even where it starts "<|start|>" (else that tag would end an empty
                       * body and reopen the same head forever) */
    dfl_buf hold;     /* undecided text, oldest first */
    dfl_buf ws;       /* ST_CONTENT: white space held back (dropped before a tool call) */
};

/* Out of memory in the splitter's buffers is fatal, as in dfl_realloc. */
static void buf_put(dfl_buf *b, const char *s, size_t n) {
    if (dfl_buf_add(b, s, n) != 0) {
        fprintf(stderr, "dflash: %s\n", dfl_lasterr());
        abort();
    }
}

static void buf_drop(dfl_buf *b, size_t n) { /* the first n bytes */
    memmove(b->s, b->s + n, b->n - n);
    b->n -= n;
    b->s[b->n] = 0;
}

static void drop_newlines(dfl_buf *b) { /* the newlines a section starts with */
    size_t i = 0;
    while (i < b->n && b->s[i] == '\n') i++;
    buf_drop(b, i);
}

static long find(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, needle, k) == 0) return (long)i;
    return -1;
}

/* Length of the longest proper suffix of s[0..n) that starts `tag`. */
static size_t partial_tag(const char *s, size_t n, const char *tag) {
    size_t k = strlen(tag);
    for (size_t l = k - 1 < n ? k - 1 : n; l > 0; l--)
        if (memcmp(s + n - l, tag, l) == 0) return l;
    return 0;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

rp_splitter *rp_new(int reasoning, int tools) {
    rp_splitter *p = dfl_calloc(1, sizeof *p);
    p->tools = tools;
    p->state = reasoning ? ST_PROBE : ST_CONTENT;
    buf_put(&p->hold, "", 0);
    buf_put(&p->ws, "", 0);
    return p;
}

void rp_free(rp_splitter *p) {
    if (!p) return;
    dfl_buf_free(&p->g_tok);
    dfl_buf_free(&p->hold);
    dfl_buf_free(&p->ws);
    free(p);
}

int rp_n_calls(const rp_splitter *p) { return p->n_calls; }

void rp_max_calls(rp_splitter *p, int n) { p->max_calls = n > 0 ? n : 0; }

int rp_done(const rp_splitter *p) { return p->state == ST_DONE; }

static void emit_text(rp_kind k, const char *s, size_t n, rp_emit_fn emit, void *ud) {
    if (!n) return;
    rp_event ev = {.kind = k, .text = s, .len = n};
    emit(ud, &ev);
}

/* Content s[0..n): the held white space goes out first. */
static void content(rp_splitter *p, const char *s, size_t n, rp_emit_fn emit, void *ud) {
    if (!n) return;
    emit_text(RP_CONTENT, p->ws.s, p->ws.n, emit, ud);
    dfl_buf_reset(&p->ws);
    emit_text(RP_CONTENT, s, n, emit, ud);
    p->after_call = 0;
}

/* Content text that is decided: with tools on, its trailing white space is
 * held (a tool call may follow). */
static void content_run(rp_splitter *p, const char *s, size_t n, rp_emit_fn emit, void *ud) {
    if (!p->tools) {
        emit_text(RP_CONTENT, s, n, emit, ud);
        return;
    }
    size_t t = n;
    while (t > 0 && is_ws(s[t - 1])) t--;
    if (t) content(p, s, t, emit, ud);
    buf_put(&p->ws, s + t, n - t);
}

/* ---- one <tool_call> block ------------------------------------------------ */

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && is_ws(s[i])) i++;
    return i;
}

/* End of the JSON string starting at s[i] == '"' (one past its closing quote). */
static size_t skip_string(const char *s, size_t n, size_t i) {
    for (i++; i < n && s[i] != '"'; i++)
        if (s[i] == '\\') i++;
    return i < n ? i + 1 : n;
}

/* End of the JSON value at s[i] (the text is valid JSON: cJSON said so). */
static size_t skip_value(const char *s, size_t n, size_t i) {
    if (s[i] == '"') return skip_string(s, n, i);
    if (s[i] == '{' || s[i] == '[') {
        int depth = 0;
        while (i < n) {
            char c = s[i];
            if (c == '"') {
                i = skip_string(s, n, i);
                continue;
            }
            if (c == '{' || c == '[') depth++;
            if (c == '}' || c == ']') depth--;
            i++;
            if (depth == 0) break;
        }
        return i;
    }
    while (i < n && !is_ws(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']') i++;
    return i;
}

/* Control bytes: JSON allows none inside strings, and only \t \n \r between
 * tokens (cJSON is laxer: it skips any byte up to a space, NUL included). */
static int has_bad_control(const char *s, size_t n) {
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 && (in_str || !is_ws((char)c))) return 1;
        if (in_str && c == '\\') i++;
        else if (c == '"') in_str = !in_str;
    }
    return 0;
}

int rp_parse_call(const char *s, size_t n, char **name, size_t *args_off, size_t *args_len) {
    *name = NULL;
    if (has_bad_control(s, n)) return -1;
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (!o) return -1;
    size_t rest = (size_t)(end - s);
    cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
    cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    int ok = cJSON_IsObject(o) && skip_ws(s, n, rest) == n && cJSON_IsString(nm) && nm->valuestring[0] &&
             cJSON_IsObject(args);
    if (ok) { /* the span of the first "arguments" member, as cJSON takes the first */
        ok = 0;
        size_t i = skip_ws(s, n, 0) + 1; /* past '{' */
        while (i < n) {
            i = skip_ws(s, n, i);
            if (i >= n || s[i] != '"') break;
            size_t k = i, ke = skip_string(s, n, i);
            i = skip_ws(s, n, ke);
            if (i >= n || s[i] != ':') break;
            i = skip_ws(s, n, i + 1);
            size_t v = i;
            i = skip_value(s, n, i);
            if (ke - k == 11 && !memcmp(s + k, "\"arguments\"", 11)) {
                *args_off = v;
                *args_len = i - v;
                ok = 1;
                break;
            }
            i = skip_ws(s, n, i);
            if (i < n && s[i] == ',') i++;
        }
    }
    if (ok) *name = dfl_strdup(nm->valuestring);
    cJSON_Delete(o);
    return ok ? 0 : -1;
}

static void call_begin(rp_splitter *p, const char *name, rp_emit_fn emit, void *ud) {
    dfl_buf_reset(&p->ws); /* white space before a tool call is dropped */
    rp_event ev = {.kind = RP_CALL_BEGIN, .index = p->n_calls++, .name = name};
    emit(ud, &ev);
}

static void call_args(rp_splitter *p, const char *s, size_t n, rp_emit_fn emit, void *ud) {
    if (!n) return;
    rp_event ev = {.kind = RP_CALL_ARGS, .index = p->n_calls - 1, .text = s, .len = n};
    emit(ud, &ev);
}

/* The call's END; the state after it. */
static void call_end(rp_splitter *p, rp_emit_fn emit, void *ud) {
    rp_event ev = {.kind = RP_CALL_END, .index = p->n_calls - 1};
    emit(ud, &ev);
    p->after_call = 1;
    p->state = p->max_calls && p->n_calls >= p->max_calls ? ST_DONE : ST_CONTENT;
}

/* The block hold[0..k) is complete (its end tag follows) and not a streamed
 * call. */
static void call_block(rp_splitter *p, size_t k, rp_emit_fn emit, void *ud) {
    char *name;
    size_t off, len;
    p->state = ST_CONTENT;
    if (rp_parse_call(p->hold.s, k, &name, &off, &len) == 0) {
        call_begin(p, name, emit, ud);
        call_args(p, p->hold.s + off, len, emit, ud);
        call_end(p, emit, ud);
        free(name);
    } else { /* not a tool call: the block is content, tags and all */
        content(p, TAG_CALL, strlen(TAG_CALL), emit, ud);
        emit_text(RP_CONTENT, p->hold.s, k, emit, ud);
        emit_text(RP_CONTENT, TAG_CALL_END, strlen(TAG_CALL_END), emit, ud);
    }
}

enum { HEAD_NO, HEAD_PART, HEAD_YES };

/* Is s[0..n), a block's text so far, the head of a streamed call,
 *     ws { ws "name" ws : ws STRING ws , ws "arguments" ws : ws {
 * (HEAD_YES: *args_at is the offset of the arguments' "{", *name the
 * unescaped name, malloc'd), a prefix of one (HEAD_PART), or neither? The
 * answer for a text never contradicts the one for a prefix of it. */
static int head(const char *s, size_t n, size_t *args_at, char **name) {
    static const char *const lit[] = {"{", "\"name\"", ":", NULL, ",", "\"arguments\"", ":", "{"};
    size_t i = 0, ns = 0, ne = 0;
    for (int t = 0; t < 8; t++) {
        i = skip_ws(s, n, i);
        if (i >= n) return n > HEAD_MAX ? HEAD_NO : HEAD_PART;
        if (!lit[t]) { /* the name: a JSON string with no control bytes */
            if (s[i] != '"') return HEAD_NO;
            ns = i;
            for (i++; i < n && s[i] != '"'; i++) {
                if ((unsigned char)s[i] < 0x20) return HEAD_NO;
                if (s[i] == '\\') i++;
            }
            if (i >= n) return n > HEAD_MAX ? HEAD_NO : HEAD_PART;
            ne = ++i;
            continue;
        }
        for (const char *c = lit[t]; *c; c++, i++) {
            if (i >= n) return n > HEAD_MAX ? HEAD_NO : HEAD_PART;
            if (s[i] != *c) return HEAD_NO;
        }
    }
    if (i > HEAD_MAX) return HEAD_NO; /* i: one past the arguments' "{" */
    cJSON *v = cJSON_ParseWithLength(s + ns, ne - ns);
    int ok = cJSON_IsString(v) && v->valuestring[0];
    if (ok) *name = dfl_strdup(v->valuestring);
    cJSON_Delete(v);
    if (!ok) return HEAD_NO;
    *args_at = i - 1;
    return HEAD_YES;
}

/* ---- the state machine ------------------------------------------------------ */

/* Decide what hold allows; at the end (final) everything. */
static void run(rp_splitter *p, int final, rp_emit_fn emit, void *ud) {
    for (;;) {
        dfl_buf *h = &p->hold;
        if (p->state == ST_PROBE) {
            size_t k = strlen(TAG_THINK);
            if (h->n >= k && !memcmp(h->s, TAG_THINK, k)) {
                buf_drop(h, k);
                p->state = ST_REASON;
                p->at_start = 1;
                continue;
            }
            if (!final && h->n < k && !memcmp(h->s, TAG_THINK, h->n)) return; /* may still become "<think>" */
            p->state = ST_CONTENT;
            continue;
        }
        if (p->state == ST_REASON) {
            if (p->at_start) {
                drop_newlines(h);
                if (!h->n) return;
                p->at_start = 0;
            }
            long e = find(h->s, h->n, TAG_THINK_END);
            if (e >= 0) {
                size_t t = (size_t)e;
                while (t > 0 && h->s[t - 1] == '\n') t--;
                emit_text(RP_REASONING, h->s, t, emit, ud);
                buf_drop(h, (size_t)e + strlen(TAG_THINK_END));
                p->state = ST_CONTENT;
                p->at_start = 1;
                continue;
            }
            if (final) {
                emit_text(RP_REASONING, h->s, h->n, emit, ud);
                h->n = 0;
                return;
            }
            size_t t = h->n - partial_tag(h->s, h->n, TAG_THINK_END);
            while (t > 0 && h->s[t - 1] == '\n') t--; /* they may precede "</think>" */
            emit_text(RP_REASONING, h->s, t, emit, ud);
            buf_drop(h, t);
            return;
        }
        if (p->state == ST_CONTENT) {
            if (p->at_start) {
                drop_newlines(h);
                if (!h->n && !final) return;
                p->at_start = 0;
            }
            long c = p->tools ? find(h->s, h->n, TAG_CALL) : -1;
            if (c >= 0) {
                content_run(p, h->s, (size_t)c, emit, ud);
                buf_drop(h, (size_t)c + strlen(TAG_CALL));
                p->state = ST_CALL;
                continue;
            }
            if (final) {
                content_run(p, h->s, h->n, emit, ud);
                h->n = 0;
                if (!p->after_call) emit_text(RP_CONTENT, p->ws.s, p->ws.n, emit, ud); /* the reply's end */
                dfl_buf_reset(&p->ws); /* after the last tool call: dropped */
                return;
            }
            size_t t = h->n - (p->tools ? partial_tag(h->s, h->n, TAG_CALL) : 0);
            content_run(p, h->s, t, emit, ud);
            buf_drop(h, t);
            return;
        }
        if (p->state == ST_CALL) {
            long e = find(h->s, h->n, TAG_CALL_END);
            size_t at;
            char *name;
            int hs = p->whole_block ? HEAD_NO : head(h->s, e >= 0 ? (size_t)e : h->n, &at, &name);
            if (hs == HEAD_YES) {
                call_begin(p, name, emit, ud);
                free(name);
                buf_drop(h, at);
                p->state = ST_ARGS;
                p->depth = p->in_str = p->esc = 0;
                continue;
            }
            if (hs == HEAD_NO) p->whole_block = 1;
            if (e >= 0) {
                call_block(p, (size_t)e, emit, ud);
                buf_drop(h, (size_t)e + strlen(TAG_CALL_END));
                p->whole_block = 0;
                continue;
            }
            if (final) { /* never closed: content */
                content(p, TAG_CALL, strlen(TAG_CALL), emit, ud);
                emit_text(RP_CONTENT, h->s, h->n, emit, ud);
                h->n = 0;
                p->whole_block = 0;
                p->state = ST_CONTENT;
            }
            return;
        }
        if (p->state == ST_ARGS) { /* hold starts inside the arguments (at their "{" first) */
            long e = find(h->s, h->n, TAG_CALL_END);
            size_t lim = e >= 0 ? (size_t)e : final ? h->n : h->n - partial_tag(h->s, h->n, TAG_CALL_END);
            size_t i = 0;
            int closed = 0;
            while (i < lim && !closed) {
                char c = h->s[i++];
                if (p->esc) p->esc = 0;
                else if (p->in_str) {
                    if (c == '\\') p->esc = 1;
                    else if (c == '"') p->in_str = 0;
                } else if (c == '"') p->in_str = 1;
                else if (c == '{' || c == '[') p->depth++;
                else if ((c == '}' || c == ']') && --p->depth == 0) closed = 1;
            }
            call_args(p, h->s, i, emit, ud);
            buf_drop(h, i);
            if (closed) {
                p->state = ST_TAIL;
                continue;
            }
            if (e >= 0 || final) { /* never closed: the arguments end at the tag or the reply's end */
                buf_drop(h, e >= 0 ? strlen(TAG_CALL_END) : h->n);
                call_end(p, emit, ud);
                continue;
            }
            return;
        }
        if (p->state == ST_TAIL) { /* after the arguments: dropped up to the end tag */
            long e = find(h->s, h->n, TAG_CALL_END);
            if (e >= 0 || final) {
                buf_drop(h, e >= 0 ? (size_t)e + strlen(TAG_CALL_END) : h->n);
                call_end(p, emit, ud);
                continue;
            }
            buf_drop(h, h->n - partial_tag(h->s, h->n, TAG_CALL_END));
            return;
        }
        /* ST_DONE */
        dfl_buf_reset(h);
        dfl_buf_reset(&p->ws);
        return;
    }
}

/* ---- harmony (gpt-oss) ------------------------------------------------------ */

rp_splitter *rp_new_harmony(void) {
    rp_splitter *p = rp_new(0, 0);
    p->harmony = 1;
    p->state = ST_H_HEAD;
    return p;
}

static const char H_MESSAGE[] = "<|message|>", H_CHANNEL[] = "<|channel|>", H_START[] = "<|start|>";
/* what ends a message's body: <|start|> too, for a model that skips <|end|> */
static const char *const H_ENDS[] = {"<|end|>", "<|return|>", "<|call|>", "<|start|>"};
enum { H_HEAD_MAX = 512 };

/* Could s[0..n) begin a header ("<|start|>ROLE", "<|channel|>", " to=", "<|message|>")? */
static int h_header_start(const char *s, size_t n) {
    static const char *const st[] = {"<|", " to="};
    for (int i = 0; i < 2; i++) {
        size_t k = strlen(st[i]);
        if (!memcmp(s, st[i], n < k ? n : k)) return 1;
    }
    return 0;
}

/* The word after `key` in the header h[0..n) (up to a space or '<'), or NULL. */
static char *h_field(const char *h, size_t n, const char *key) {
    long at = find(h, n, key);
    if (at < 0) return NULL;
    size_t a = (size_t)at + strlen(key), b = a;
    while (b < n && h[b] != ' ' && h[b] != '<') b++;
    char *w = dfl_malloc(b - a + 1);
    memcpy(w, h + a, b - a);
    w[b - a] = 0;
    return w;
}

/* The header h[0..n) is complete (<|message|> follows): the body's kind. */
static void h_header(rp_splitter *p, const char *h, size_t n, rp_emit_fn emit, void *ud) {
    char *to = h_field(h, n, "to="), *ch = h_field(h, n, H_CHANNEL);
    if (to && to[0]) {
        const char *name = strncmp(to, "functions.", 10) == 0 && to[10] ? to + 10 : to;
        p->h_kind = RP_CALL_ARGS;
        call_begin(p, name, emit, ud);
    } else {
        p->h_kind = !ch || !ch[0] || !strcmp(ch, "final") ? RP_CONTENT : RP_REASONING;
    }
    free(to);
    free(ch);
}

static void h_body_text(rp_splitter *p, const char *s, size_t n, rp_emit_fn emit, void *ud) {
    if (p->h_kind == RP_CALL_ARGS) call_args(p, s, n, emit, ud);
    else emit_text(p->h_kind, s, n, emit, ud);
}

static void h_body_end(rp_splitter *p, rp_emit_fn emit, void *ud) {
    if (p->h_kind == RP_CALL_ARGS) {
        call_end(p, emit, ud);
        if (p->state == ST_DONE) return;
    }
    p->state = ST_H_HEAD;
}

static void run_harmony(rp_splitter *p, int final, rp_emit_fn emit, void *ud) {
    dfl_buf *h = &p->hold;
    while (h->n || (final && p->state == ST_H_BODY)) {
        if (p->state == ST_DONE) {
            dfl_buf_reset(h);
            return;
        }
        if (p->state == ST_H_HEAD) {
            int stray = 0; /* an end tag where a header should be (after another one): nothing */
            for (int i = 0; i < 3 && !stray; i++)
                if (h->n >= strlen(H_ENDS[i]) && !memcmp(h->s, H_ENDS[i], strlen(H_ENDS[i])))
                    buf_drop(h, strlen(H_ENDS[i])), stray = 1;
            if (stray) continue;
            /* <|message|> counts within the first H_HEAD_MAX bytes only */
            size_t head_n = h->n < H_HEAD_MAX + strlen(H_MESSAGE) ? h->n : H_HEAD_MAX + strlen(H_MESSAGE);
            long k = h_header_start(h->s, h->n) ? find(h->s, head_n, H_MESSAGE) : -1;
            if (k >= 0 && (size_t)k <= H_HEAD_MAX) {
                h_header(p, h->s, (size_t)k, emit, ud);
                buf_drop(h, (size_t)k + strlen(H_MESSAGE));
                p->state = ST_H_BODY;
                continue;
            }
            if (h_header_start(h->s, h->n) && h->n <= H_HEAD_MAX + strlen(H_MESSAGE)) {
                if (!final) return; /* the header is still coming */
                /* the reply ends inside a header: an opened turn ("<|start|>assistant",
                 * "<|channel|>final") says nothing; any other text is content */
                int opened = !memcmp(h->s, H_START, h->n < 9 ? h->n : 9) ||
                             !memcmp(h->s, H_CHANNEL, h->n < 11 ? h->n : 11);
                if (!opened) emit_text(RP_CONTENT, h->s, h->n, emit, ud);
                dfl_buf_reset(h);
                return;
            }
            /* not a header: text outside harmony's frame is content up to a message end */
            p->h_kind = RP_CONTENT;
            p->state = ST_H_BODY;
            p->h_unframed = 1;
            continue;
        }
        /* ST_H_BODY */
        size_t from = p->h_unframed && h->n ? 1 : 0; /* an unframed body's first byte is text */
        p->h_unframed = 0;
        long end = -1;
        int which = -1;
        for (int i = 0; i < 4; i++) {
            long k = find(h->s + from, h->n - from, H_ENDS[i]);
            if (k >= 0 && (end < 0 || k + (long)from < end)) end = k + (long)from, which = i;
        }
        if (end >= 0) {
            h_body_text(p, h->s, (size_t)end, emit, ud);
            buf_drop(h, (size_t)end + (which == 3 ? 0 : strlen(H_ENDS[which]))); /* <|start|> opens the next */
            h_body_end(p, emit, ud);
            continue;
        }
        size_t keep = 0;
        if (!final)
            for (int i = 0; i < 4; i++) {
                size_t l = partial_tag(h->s, h->n, H_ENDS[i]);
                if (l > keep) keep = l;
            }
        h_body_text(p, h->s, h->n - keep, emit, ud);
        buf_drop(h, h->n - keep);
        if (final) {
            h_body_end(p, emit, ud);
            return;
        }
        return;
    }
}

/* ---- Gemma 4 ------------------------------------------------------------------- */

rp_splitter *rp_new_gemma4(int tools) {
    rp_splitter *p = rp_new(0, tools);
    p->gemma4 = 1;
    p->state = ST_G_CONTENT;
    buf_put(&p->g_tok, "", 0);
    return p;
}

static const char G_OPEN[] = "<|channel>", G_CLOSE[] = "<channel|>", G_END[] = "<turn|>", G_NAME[] = "thought\n";
static const char G_CALL[] = "<|tool_call>", G_CALL_END[] = "<tool_call|>", G_RESULT[] = "<|tool_response>",
                  G_QUOTE[] = "<|\"|>", G_CALL_HEAD[] = "call:";
enum { G_NAME_MAX = 256 };

/* The first of the n tags in s[0..len): its offset (-1: none) and *which. */
static long g_first(const char *s, size_t len, const char *const *tags, int n, int *which) {
    long at = -1;
    for (int i = 0; i < n; i++) {
        long k = find(s, len, tags[i]);
        if (k >= 0 && (at < 0 || k < at)) at = k, *which = i;
    }
    return at;
}

static int g_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

/* After "<|tool_call>": is s[0..n) "call:NAME{" (HEAD_YES, *name malloc'd,
 * *brace the offset of "{"), a prefix of one (HEAD_PART) or neither? */
static int g_head(const char *s, size_t n, char **name, size_t *brace) {
    size_t k = strlen(G_CALL_HEAD);
    if (memcmp(s, G_CALL_HEAD, n < k ? n : k)) return HEAD_NO;
    if (n < k) return HEAD_PART;
    size_t i = k;
    while (i < n && i - k < G_NAME_MAX && g_name_char(s[i])) i++;
    if (i == n) return i - k < G_NAME_MAX ? HEAD_PART : HEAD_NO;
    if (s[i] != '{' || i == k) return HEAD_NO;
    *name = dfl_malloc(i - k + 1);
    memcpy(*name, s + k, i - k);
    (*name)[i - k] = 0;
    *brace = i;
    return HEAD_YES;
}

/* ---- Gemma 4's call arguments to JSON -----------------------------------------
 * The model writes them as the template does: {key:value,...} with keys bare,
 * strings between <|"|>, numbers, true / false, null (or Python's None,
 * True, False, which the template writes for None and Python booleans),
 * nested {...} and [...]. They go out as JSON as they arrive: a key when its
 * ":" comes (keys without one are dropped), a string's text escaped as it
 * comes, a bare word when it ends (a JSON number or literal as such, any
 * other word as a string); a missing value is null; whatever is still open
 * at <tool_call|> (or the reply's end) is closed. So the arguments are
 * always a JSON object, and the one the model meant when it wrote the
 * format. */
enum { G_KEY, G_IN_KEY, G_IN_QKEY, G_AFTER_QKEY, G_VALUE, G_IN_STR, G_IN_BARE, G_AFTER, G_TOP_DONE };

static void json_escaped(dfl_buf *o, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"') buf_put(o, "\\\"", 2);
        else if (c == '\\') buf_put(o, "\\\\", 2);
        else if (c == '\n') buf_put(o, "\\n", 2);
        else if (c == '\r') buf_put(o, "\\r", 2);
        else if (c == '\t') buf_put(o, "\\t", 2);
        else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            buf_put(o, e, 6);
        } else buf_put(o, (const char *)&c, 1);
    }
}

static int json_number(const char *s, size_t n) { /* -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)? */
    size_t i = 0, d;
    if (i < n && s[i] == '-') i++;
    if (i < n && s[i] == '0') i++;
    else {
        for (d = i; i < n && s[i] >= '0' && s[i] <= '9'; i++) {}
        if (i == d || s[d] == '0') return 0;
    }
    if (i < n && s[i] == '.') {
        for (d = ++i; i < n && s[i] >= '0' && s[i] <= '9'; i++) {}
        if (i == d) return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        if (++i < n && (s[i] == '+' || s[i] == '-')) i++;
        for (d = i; i < n && s[i] >= '0' && s[i] <= '9'; i++) {}
        if (i == d) return 0;
    }
    return i == n;
}

/* a value starts in the container on top: the comma before an array's later items */
static void g_value_begins(rp_splitter *p, dfl_buf *o) {
    int top = p->g_depth - 1;
    if (p->g_stack[top] == '[' && p->g_any[top]) buf_put(o, ",", 1);
    p->g_any[top] = 1;
}

static void g_push(rp_splitter *p, dfl_buf *o, char c) {
    buf_put(o, &c, 1);
    p->g_stack[p->g_depth] = c;
    p->g_any[p->g_depth++] = 0;
    p->g_mode = c == '{' ? G_KEY : G_VALUE;
}

static void g_close(rp_splitter *p, dfl_buf *o) {
    buf_put(o, p->g_stack[p->g_depth - 1] == '{' ? "}" : "]", 1);
    p->g_mode = --p->g_depth ? G_AFTER : G_TOP_DONE;
}

static void g_bare_done(rp_splitter *p, dfl_buf *o) {
    static const char *const words[][2] = {{"true", "true"},   {"false", "false"}, {"null", "null"},
                                           {"True", "true"},   {"False", "false"}, {"None", "null"}};
    const char *w = p->g_tok.s;
    size_t n = p->g_tok.n;
    int done = 0;
    for (int k = 0; k < 6 && !done; k++)
        if (n == strlen(words[k][0]) && !memcmp(w, words[k][0], n)) buf_put(o, words[k][1], strlen(words[k][1])), done = 1;
    if (!done && json_number(w, n)) buf_put(o, w, n), done = 1;
    if (!done) buf_put(o, "\"", 1), json_escaped(o, w, n), buf_put(o, "\"", 1);
    dfl_buf_reset(&p->g_tok);
    p->g_mode = G_AFTER;
}

static void g_key_done(rp_splitter *p, dfl_buf *o) {
    size_t a = 0, b = p->g_tok.n;
    while (a < b && is_ws(p->g_tok.s[a])) a++;
    while (b > a && is_ws(p->g_tok.s[b - 1])) b--;
    int top = p->g_depth - 1;
    if (p->g_any[top]) buf_put(o, ",", 1);
    p->g_any[top] = 1;
    buf_put(o, "\"", 1);
    json_escaped(o, p->g_tok.s + a, b - a);
    buf_put(o, "\":", 2);
    dfl_buf_reset(&p->g_tok);
    p->g_mode = G_VALUE;
}

/* The call ends here: close what is open. */
static void g_args_end(rp_splitter *p, dfl_buf *o) {
    if (p->g_mode == G_IN_STR) buf_put(o, "\"", 1), p->g_mode = G_AFTER;
    if (p->g_mode == G_IN_BARE) g_bare_done(p, o);
    if (p->g_mode == G_VALUE && p->g_depth && p->g_stack[p->g_depth - 1] == '{') buf_put(o, "null", 4);
    dfl_buf_reset(&p->g_tok); /* a key without its ":" */
    while (p->g_depth) g_close(p, o);
}

/* Turn hold's text into argument JSON as far as it is decided; 1 when the
 * call ended (at <tool_call|>, dropped, or at the reply's end). */
static int g_args(rp_splitter *p, int final, rp_emit_fn emit, void *ud) {
    dfl_buf *h = &p->hold, o = {0};
    size_t i = 0, kq = strlen(G_QUOTE), ke = strlen(G_CALL_END);
    int ended = 0;
    buf_put(&o, "", 0);
    while (i < h->n) {
        const char *s = h->s + i;
        size_t left = h->n - i;
        if (left >= ke && !memcmp(s, G_CALL_END, ke)) {
            i += ke;
            ended = 1;
            break;
        }
        if (!final && ((left < ke && !memcmp(s, G_CALL_END, left)) || (left < kq && !memcmp(s, G_QUOTE, left))))
            break; /* may be a tag */
        int quote = left >= kq && !memcmp(s, G_QUOTE, kq);
        char c = *s;
        int top = p->g_depth - 1;
        switch (p->g_mode) {
        case G_TOP_DONE: /* after the arguments: dropped up to the end tag */
            i++;
            break;
        case G_IN_STR:
            if (quote) buf_put(&o, "\"", 1), i += kq, p->g_mode = G_AFTER;
            else json_escaped(&o, s, 1), i++;
            break;
        case G_KEY:
            if (quote) i += kq, p->g_mode = G_IN_QKEY;
            else if (c == '}' || c == ']') g_close(p, &o), i++;
            else if (is_ws(c) || c == ',') i++;
            else p->g_mode = G_IN_KEY;
            break;
        case G_IN_KEY:
            if (c == ':') g_key_done(p, &o), i++;
            else if (c == ',' || c == '}' || c == ']') dfl_buf_reset(&p->g_tok), p->g_mode = G_KEY; /* no ":": dropped */
            else buf_put(&p->g_tok, s, 1), i++;
            break;
        case G_IN_QKEY:
            if (quote) i += kq, p->g_mode = G_AFTER_QKEY;
            else buf_put(&p->g_tok, s, 1), i++;
            break;
        case G_AFTER_QKEY:
            if (c == ':') g_key_done(p, &o), i++;
            else if (is_ws(c)) i++;
            else dfl_buf_reset(&p->g_tok), p->g_mode = G_KEY;
            break;
        case G_VALUE:
            if (is_ws(c)) {
                i++;
            } else if (quote) {
                g_value_begins(p, &o);
                buf_put(&o, "\"", 1);
                i += kq;
                p->g_mode = G_IN_STR;
            } else if ((c == '{' || c == '[') && p->g_depth < (int)sizeof p->g_stack) {
                g_value_begins(p, &o);
                g_push(p, &o, c);
                i++;
            } else if (c == ',' || c == '}' || c == ']') {
                if (p->g_stack[top] == '{') buf_put(&o, "null", 4), p->g_mode = G_AFTER; /* key: nothing */
                else if (c == ',') i++; /* an empty array item: none */
                else g_close(p, &o), i++;
            } else {
                g_value_begins(p, &o);
                p->g_mode = G_IN_BARE;
            }
            break;
        case G_IN_BARE:
            if (quote || is_ws(c) || c == ',' || c == '}' || c == ']') g_bare_done(p, &o);
            else buf_put(&p->g_tok, s, 1), i++;
            break;
        default: /* G_AFTER */
            if (is_ws(c)) i++;
            else if (c == ',') i++, p->g_mode = p->g_stack[top] == '{' ? G_KEY : G_VALUE;
            else if (c == '}' || c == ']') g_close(p, &o), i++;
            else p->g_mode = p->g_stack[top] == '{' ? G_KEY : G_VALUE; /* a missing comma */
        }
    }
    if (ended || final) g_args_end(p, &o);
    call_args(p, o.s, o.n, emit, ud);
    dfl_buf_free(&o);
    buf_drop(h, final && !ended ? h->n : i);
    return ended || final;
}

static void run_gemma4(rp_splitter *p, int final, rp_emit_fn emit, void *ud) {
    static const char *const in_content[] = {G_OPEN, G_CLOSE, G_END, G_CALL, G_RESULT},
                             *const in_reason[] = {G_CLOSE, G_END};
    dfl_buf *h = &p->hold;
    for (;;) {
        if (p->state == ST_DONE) { /* after <turn|> (or the last call allowed): nothing */
            dfl_buf_reset(h);
            dfl_buf_reset(&p->ws);
            return;
        }
        if (p->state == ST_G_HEAD) { /* just after <|channel>: its name "thought\n" is dropped */
            size_t k = strlen(G_NAME);
            if (h->n >= k && !memcmp(h->s, G_NAME, k)) buf_drop(h, k);
            else if (!final && h->n < k && !memcmp(h->s, G_NAME, h->n)) return; /* may still become it */
            p->state = ST_G_REASON;
            continue;
        }
        if (p->state == ST_G_CALL) { /* just after <|tool_call>: "call:NAME{" starts a call */
            char *name = NULL;
            size_t brace = 0;
            int hs = h->n ? g_head(h->s, h->n, &name, &brace) : HEAD_PART;
            if (hs == HEAD_PART && !final) return;
            if (hs == HEAD_YES) {
                call_begin(p, name, emit, ud);
                free(name);
                buf_drop(h, brace);
                p->g_depth = 0;
                p->g_mode = G_VALUE;
                dfl_buf_reset(&p->g_tok);
                p->state = ST_G_ARGS;
                p->g_stack[0] = 0;
                continue;
            }
            content(p, G_CALL, strlen(G_CALL), emit, ud); /* not a call: the tag is content, the rest goes on as such */
            p->state = ST_G_CONTENT;
            continue;
        }
        if (p->state == ST_G_ARGS) {
            if (p->g_depth == 0 && p->g_mode == G_VALUE) { /* the arguments' "{" (the head ends with it) */
                dfl_buf o = {0};
                g_push(p, &o, '{');
                buf_drop(h, 1);
                call_args(p, o.s, o.n, emit, ud);
                dfl_buf_free(&o);
            }
            if (!g_args(p, final, emit, ud)) return;
            call_end(p, emit, ud);
            if (p->state != ST_DONE) p->state = ST_G_CONTENT;
            continue;
        }
        int reason = p->state == ST_G_REASON, which = 0;
        const char *const *tags = reason ? in_reason : in_content;
        int nt = reason ? 2 : p->tools ? 5 : 3; /* with tools on: calls, and the results' tag ends the reply */
        long at = g_first(h->s, h->n, tags, nt, &which);
        if (at >= 0) {
            if (reason) emit_text(RP_REASONING, h->s, (size_t)at, emit, ud);
            else content_run(p, h->s, (size_t)at, emit, ud);
            buf_drop(h, (size_t)at + strlen(tags[which]));
            const char *t = tags[which];
            p->state = t == G_END || t == G_RESULT ? ST_DONE
                       : t == G_OPEN               ? ST_G_HEAD
                       : t == G_CALL               ? ST_G_CALL
                                                   : ST_G_CONTENT; /* a stray <channel|>: dropped */
            continue;
        }
        size_t keep = 0;
        if (!final)
            for (int i = 0; i < nt; i++) {
                size_t l = partial_tag(h->s, h->n, tags[i]);
                if (l > keep) keep = l;
            }
        if (reason) emit_text(RP_REASONING, h->s, h->n - keep, emit, ud);
        else content_run(p, h->s, h->n - keep, emit, ud);
        buf_drop(h, h->n - keep);
        if (final && !p->after_call) emit_text(RP_CONTENT, p->ws.s, p->ws.n, emit, ud); /* the reply's end */
        if (final) dfl_buf_reset(&p->ws); /* after the last tool call: dropped */
        return;
    }
}

rp_splitter *rp_new_for(int format, int reasoning, int tools) {
    if (format == CHAT_HARMONY) return rp_new_harmony();
    if (format == CHAT_GEMMA4 || format == CHAT_GEMMA4_EARLY) return rp_new_gemma4(tools);
    if (format == CHAT_GEMMA) return NULL; /* Gemma 3 writes no reasoning and no tool calls */
    return reasoning || tools ? rp_new(reasoning, tools) : NULL;
}

void rp_feed(rp_splitter *p, const char *text, size_t len, rp_emit_fn emit, void *ud) {
    buf_put(&p->hold, text, len);
    if (p->harmony) run_harmony(p, 0, emit, ud);
    else if (p->gemma4) run_gemma4(p, 0, emit, ud);
    else run(p, 0, emit, ud);
}

void rp_finish(rp_splitter *p, rp_emit_fn emit, void *ud) {
    if (p->harmony) run_harmony(p, 1, emit, ud);
    else if (p->gemma4) run_gemma4(p, 1, emit, ud);
    else run(p, 1, emit, ud);
}
