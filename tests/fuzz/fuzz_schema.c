/* fuzz_schema.c - JSON Schema to GBNF (src/grammar_schema.c) on arbitrary
 * input. Oracle: no crash, hang or sanitizer report; a refusal's message
 * starts "json_schema"; an accepted schema's GBNF parses (gr_parse), and
 * its matcher starts (a grammar the converter returns is always usable). */
#include "fuzz_common.h"
#include "grammar.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = gr_from_json_schema((const char *)data, size);
    if (!s) {
        if (strncmp(dfl_lasterr(), "json_schema", 11)) abort();
        return 0;
    }
    gr_grammar *g = gr_parse(s, strlen(s));
    if (!g) abort();
    gr_state *st = gr_state_new(g);
    if (st) gr_feed(st, "{\"a\": [1, \"x\"]}", 15);
    gr_state_free(st);
    gr_free(g);
    free(s);
    return 0;
}
