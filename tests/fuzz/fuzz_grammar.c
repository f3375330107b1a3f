/* fuzz_grammar.c - the GBNF parser and the matcher (src/grammar.c) on
 * arbitrary input. The input is a grammar text, then optionally a 0xFF byte
 * and bytes to match. Oracle: no crash, hang or sanitizer report; a
 * refused grammar has a message starting "grammar: "; the text fed whole
 * and fed one byte at a time give the same verdict (live, complete, done),
 * a dead state stays dead, and gr_next_bytes agrees with feeding each byte. */
#include "fuzz_common.h"
#include "grammar.h"
#include "util.h"

static void verdict(gr_state *s, int r, int *out) {
    out[0] = r;
    out[1] = r == 1 ? gr_can_end(s) : 0;
    out[2] = r == 1 ? gr_is_done(s) : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *sep = memchr(data, 0xFF, size);
    size_t glen = sep ? (size_t)(sep - data) : size;
    const uint8_t *text = sep ? sep + 1 : NULL;
    size_t tlen = sep ? size - glen - 1 : 0;
    gr_grammar *g = gr_parse((const char *)data, glen);
    if (!g) {
        if (strncmp(dfl_lasterr(), "grammar: ", 9)) abort();
        return 0;
    }
    gr_state *a = gr_state_new(g), *b = gr_state_new(g), *t = gr_state_new(g);
    if (a && b && t) {
        int ra = gr_feed(a, text, tlen), rb = 1;
        for (size_t i = 0; i < tlen && rb == 1; i++) rb = gr_feed(b, text + i, 1);
        int va[3], vb[3];
        verdict(a, ra, va);
        verdict(b, rb, vb);
        if (ra >= 0 && rb >= 0 && memcmp(va, vb, sizeof va)) abort();
        if (ra == 0 && gr_feed(a, "a", 1) != 0) abort(); /* dead stays dead */
        if (rb == 1) {
            uint8_t allowed[256];
            if (gr_next_bytes(b, t, allowed) == 0)
                for (int x = 0; x < 256; x += 17) {
                    gr_state_copy(t, b);
                    uint8_t c = (uint8_t)x;
                    int r = gr_feed(t, &c, 1);
                    if (r >= 0 && r != allowed[x]) abort();
                }
            if (gr_is_done(b) && !gr_can_end(b)) abort();
        }
    }
    gr_state_free(a);
    gr_state_free(b);
    gr_state_free(t);
    gr_free(g);
    return 0;
}
