/* fuzz_reply.c - the reply splitter (src/reply.c) on arbitrary model text.
 * Byte 0: bit 0 reasoning, bit 1 tools, the other bits seed the piece
 * sizes; the rest is the reply. Oracle: no crash or sanitizer report; the
 * reply fed whole and fed in pieces gives the same content, reasoning and
 * tool calls; every call's name and arguments parse back (rp_parse_call of
 * {"name": ..., "arguments": ...} with the arguments as given is a call);
 * content + reasoning + calls never hold more bytes than the reply (+ the
 * tags a malformed block keeps); with neither switch on, content is the
 * reply byte for byte. */
#include "fuzz_common.h"
#include "reply.h"
#include "util.h"

typedef struct {
    char *s;
    size_t n;
} fz_buf;

typedef struct {
    fz_buf content, reasoning, calls;
    int n_calls;
} fz_sink;

static void fz_put(fz_buf *b, const char *s, size_t n) {
    b->s = dfl_realloc(b->s, b->n + n + 1);
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void on_event(void *ud, const rp_event *ev) {
    fz_sink *k = ud;
    if (ev->kind == RP_CONTENT) fz_put(&k->content, ev->text, ev->len);
    else if (ev->kind == RP_REASONING) fz_put(&k->reasoning, ev->text, ev->len);
    else {
        if (ev->index != k->n_calls++) abort();
        /* the call must read back as one */
        fz_buf j = {0};
        fz_put(&j, "{\"name\": \"x\", \"arguments\": ", 27);
        fz_put(&j, ev->arguments, ev->args_len);
        fz_put(&j, "}", 1);
        char *name;
        size_t off, len;
        if (rp_parse_call(j.s, j.n, &name, &off, &len) != 0 || len != ev->args_len) abort();
        free(name);
        free(j.s);
        if (!ev->name[0]) abort();
        fz_put(&k->calls, ev->name, strlen(ev->name));
        fz_put(&k->calls, "\x01", 1);
        fz_put(&k->calls, ev->arguments, ev->args_len);
        fz_put(&k->calls, "\x02", 1);
    }
}

static void run(const char *s, size_t n, int reasoning, int tools, unsigned seed, fz_sink *k) {
    memset(k, 0, sizeof *k);
    rp_splitter *p = rp_new(reasoning, tools);
    for (size_t i = 0; i < n;) {
        size_t step = seed ? 1 + (seed = seed * 1103515245u + 12345u) % 7 : n;
        if (step > n - i) step = n - i;
        rp_feed(p, s + i, step, on_event, k);
        i += step;
    }
    rp_finish(p, on_event, k);
    if (rp_n_calls(p) != k->n_calls) abort();
    rp_free(p);
}

static int same(const fz_buf *a, const fz_buf *b) { return a->n == b->n && (!a->n || !memcmp(a->s, b->s, a->n)); }

static void fz_free(fz_sink *k) {
    free(k->content.s);
    free(k->reasoning.s);
    free(k->calls.s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int reasoning = data[0] & 1, tools = (data[0] >> 1) & 1;
    unsigned seed = (data[0] >> 2) | 1u;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    fz_sink whole, pieces;
    run(s, n, reasoning, tools, 0, &whole);
    run(s, n, reasoning, tools, seed, &pieces);
    if (!same(&whole.content, &pieces.content) || !same(&whole.reasoning, &pieces.reasoning) ||
        !same(&whole.calls, &pieces.calls) || whole.n_calls != pieces.n_calls)
        abort();
    if (!reasoning && !tools && (whole.content.n != n || (n && memcmp(whole.content.s, s, n)))) abort();
    if (whole.content.n + whole.reasoning.n > n) abort(); /* nothing is made up */
    fz_free(&whole);
    fz_free(&pieces);
    return 0;
}
