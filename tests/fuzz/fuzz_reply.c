/* fuzz_reply.c - the reply splitter (src/reply.c) on arbitrary model text.
 * Byte 0: bit 0 reasoning, bit 1 tools, bit 2 at most one call
 * (rp_max_calls 1), bit 7 gpt-oss's harmony splitter (rp_new_harmony; bit
 * 1 then does nothing, and a call's arguments are its message body, which
 * may be empty or not start with "{"), or with bits 7 and 0 both set Gemma 4's
 * (rp_new_gemma4(bit 1): without tools no calls and rp_done exactly when the
 * reply holds "<turn|>"; with tools every call's arguments are a JSON object,
 * made from the reply, not a piece of it, and rp_done only when the reply
 * holds "<turn|>" or "<|tool_response>" or the limit was reached),
 * bits 3-6 seed the piece sizes; the rest is the reply. Oracle: no crash or sanitizer report; the reply fed whole and fed
 * in pieces gives the same content, reasoning and tool calls; events come
 * as BEGIN, ARGS..., END per call, indices 0, 1, ..., nothing else inside a
 * call, no empty pieces; every call has a name and its arguments are a
 * piece of the reply that starts with "{" (as written, not made up; Gemma 4:
 * a JSON object), and
 * with the limit there is at most one call; content + reasoning never hold
 * more bytes than the reply; with neither switch on, content is the reply
 * byte for byte. */
#include <cJSON.h>

#include "fuzz_common.h"
#include "reply.h"
#include "util.h"

typedef struct {
    char *s;
    size_t n;
} fz_buf;

typedef struct {
    fz_buf content, reasoning, calls, args;
    int n_calls, in_call;
    const char *reply;
    size_t reply_n;
    int harmony;
} fz_sink;

/* rp_new_gemma4 instead of rp_new_harmony */
static int gemma4;

static void fz_put(fz_buf *b, const char *s, size_t n) {
    b->s = dfl_realloc(b->s, b->n + n + 1);
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static int has_piece(const char *s, size_t n, const char *p, size_t k) {
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, p, k)) return 1;
    return 0;
}

static void on_event(void *ud, const rp_event *ev) {
    fz_sink *k = ud;
    int text = ev->kind == RP_CONTENT || ev->kind == RP_REASONING || ev->kind == RP_CALL_ARGS;
    if (text && !ev->len) abort();
    if (k->in_call != (ev->kind == RP_CALL_ARGS || ev->kind == RP_CALL_END)) abort();
    if (ev->kind == RP_CONTENT) fz_put(&k->content, ev->text, ev->len);
    else if (ev->kind == RP_REASONING) fz_put(&k->reasoning, ev->text, ev->len);
    else if (ev->kind == RP_CALL_BEGIN) {
        if (ev->index != k->n_calls++ || !ev->name[0]) abort();
        k->in_call = 1;
        k->args.n = 0;
        fz_put(&k->calls, ev->name, strlen(ev->name));
        fz_put(&k->calls, "\x01", 1);
    } else if (ev->kind == RP_CALL_ARGS) {
        if (ev->index != k->n_calls - 1) abort();
        fz_put(&k->args, ev->text, ev->len);
        fz_put(&k->calls, ev->text, ev->len);
    } else {
        if (ev->index != k->n_calls - 1) abort();
        k->in_call = 0;
        if (gemma4) { /* converted from the template's notation: always a JSON object */
            cJSON *o = cJSON_ParseWithLength(k->args.s ? k->args.s : "", k->args.n);
            int obj = cJSON_IsObject(o);
            cJSON_Delete(o);
            if (!obj) abort();
        } else if (k->harmony ? k->args.n && !has_piece(k->reply, k->reply_n, k->args.s, k->args.n)
                              : !k->args.n || k->args.s[0] != '{' || !has_piece(k->reply, k->reply_n, k->args.s, k->args.n))
            abort();
        fz_put(&k->calls, "\x02", 1);
    }
}

static void run(const char *s, size_t n, int reasoning, int tools, int one_call, int harmony, unsigned seed,
                fz_sink *k) {
    memset(k, 0, sizeof *k);
    k->reply = s;
    k->reply_n = n;
    k->harmony = harmony;
    rp_splitter *p = gemma4 ? rp_new_gemma4(tools) : harmony ? rp_new_harmony() : rp_new(reasoning, tools);
    rp_max_calls(p, one_call);
    for (size_t i = 0; i < n;) {
        size_t step = seed ? 1 + (seed = seed * 1103515245u + 12345u) % 7 : n;
        if (step > n - i) step = n - i;
        rp_feed(p, s + i, step, on_event, k);
        i += step;
    }
    rp_finish(p, on_event, k);
    if (rp_n_calls(p) != k->n_calls || k->in_call || (one_call && k->n_calls > 1)) abort();
    int turn_end = has_piece(s, n, "<turn|>", 7), results = has_piece(s, n, "<|tool_response>", 16);
    if (gemma4 && !tools ? k->n_calls || rp_done(p) != turn_end
        : gemma4         ? rp_done(p) && !turn_end && !results && !(one_call && k->n_calls == 1)
                         : rp_done(p) != (one_call && k->n_calls == 1))
        abort();
    rp_free(p);
}

static int same(const fz_buf *a, const fz_buf *b) { return a->n == b->n && (!a->n || !memcmp(a->s, b->s, a->n)); }

static void fz_free(fz_sink *k) {
    free(k->content.s);
    free(k->reasoning.s);
    free(k->calls.s);
    free(k->args.s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int reasoning = data[0] & 1, tools = (data[0] >> 1) & 1, one_call = (data[0] >> 2) & 1;
    int harmony = data[0] >> 7;
    gemma4 = harmony && (data[0] & 1);
    unsigned seed = ((data[0] >> 3) & 15) | 1u;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    fz_sink whole, pieces;
    run(s, n, reasoning, tools, one_call, harmony, 0, &whole);
    run(s, n, reasoning, tools, one_call, harmony, seed, &pieces);
    if (!same(&whole.content, &pieces.content) || !same(&whole.reasoning, &pieces.reasoning) ||
        !same(&whole.calls, &pieces.calls) || whole.n_calls != pieces.n_calls)
        abort();
    if (!harmony && !reasoning && !tools && (whole.content.n != n || (n && memcmp(whole.content.s, s, n)))) abort();
    if (whole.content.n + whole.reasoning.n > n) abort(); /* nothing is made up */
    fz_free(&whole);
    fz_free(&pieces);
    return 0;
}
