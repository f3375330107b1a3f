/* test_constrained.c - constrained decoding (dflash_gen.grammar) end to end
 * on the shipped demo pair: DFlash output equals plain output token for
 * token with a grammar, greedy and temperature 0.8, at block sizes 2, 4, 8,
 * 16 and auto, with and without logprobs (entries identical too); the
 * output's bytes are a prefix of the grammar's language, a whole string of
 * it when generation stopped on a stop token, and valid JSON with the
 * schema's required keys for JSON Schema grammars; greedy picks the allowed
 * token with the highest logit (checked against the target's logits read
 * from the CPU backend); a bad grammar fails before anything runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "check.h"
#include "demo_pair.h"
#include "grammar.h"

/* chat-templated; DFLASH_FAST: the first only */
static const char *const prompt_text[] = {"Solve for x: 3x + 5 = 20.", "Give me a JSON object describing a cat."};

/* The output's text is in the language (whole when it stopped on a stop
 * token); for JSON (want_json) it parses and has the keys in need[]. */
static int output_ok(dflash_model *m, const char *gbnf, const int32_t *out, size_t n, const char *stop_reason,
                     int want_json, const char *const *need, const char *what) {
    size_t len;
    char *text = dflash_detokenize(m, out, n, &len);
    gr_grammar *g = gr_parse(gbnf, strlen(gbnf));
    gr_state *st = g ? gr_state_new(g) : NULL;
    int live = st ? gr_feed(st, text, len) : -1, complete = st && gr_can_end(st);
    int stopped = !strcmp(stop_reason, "stop token");
    int ok = live == 1 && (!stopped || complete);
    if (!ok) fprintf(stderr, "  %s: output not in the language (live %d, complete %d, %s): %s\n", what, live, complete, stop_reason, text);
    if (ok && want_json && stopped) {
        cJSON *j = cJSON_Parse(text);
        ok = j != NULL;
        for (int k = 0; need && need[k] && ok; k++) ok = cJSON_GetObjectItemCaseSensitive(j, need[k]) != NULL;
        if (!ok) fprintf(stderr, "  %s: not JSON with the required keys: %s\n", what, text);
        cJSON_Delete(j);
    }
    gr_state_free(st);
    gr_free(g);
    free(text);
    return ok;
}

/* Plain vs DFlash (blocks 2, 4, 8, 16 and auto) with base's settings; the
 * number of runs that differ or whose output breaks the grammar. */
static int lossless(dflash_model *m, const dflash_gen *base, const char *what, int want_json, const char *const *need,
                    int *n_complete) {
    int bad = 0;
    lp_log *ref_lp = calloc(1, sizeof *ref_lp), *got_lp = calloc(1, sizeof *got_lp);
    for (int i = 0; i < n_prompts; i++) {
        dflash_gen g = *base;
        g.seed = 99 + (uint64_t)i;
        g.use_draft = 0;
        int32_t *ref;
        size_t nref;
        dflash_stats st;
        if (gen(m, i, &g, &ref, &nref, ref_lp, &st)) {
            bad++;
            continue;
        }
        bad += !output_ok(m, g.grammar, ref, nref, st.stop_reason, want_json, need, what);
        *n_complete += !strcmp(st.stop_reason, "stop token");
        bad += dflash_runs(m, i, g, ref, nref, ref_lp, got_lp, what);
        free(ref);
    }
    free(ref_lp);
    free(got_lp);
    fprintf(stderr, "  %s: %d prompts x 5 DFlash settings, %d bad\n", what, n_prompts, bad);
    return bad;
}

static const char *schema_text =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
    "\"color\":{\"enum\":[\"black\",\"white\",\"ginger\"]},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
    "\"maxItems\":2},\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\",\"color\"]}";

TEST(lossless_with_grammar) {
    dflash_model *m = demo;
    if (!m) return;
    char *schema = dflash_json_schema_grammar(schema_text), *object = dflash_json_schema_grammar(NULL);
    CHECK(schema && object, "schema: %s", dflash_error());
    if (!schema || !object) return;
    static const char *const need[] = {"name", "age", "color", NULL};
    const struct {
        const char *name, *gbnf;
        int json;
        const char *const *need;
    } cases[] = {
        {"digits", "root ::= \"x = \" [0-9]{1,3} \".\"", 0, NULL},
        {"words", "root ::= ([a-z]+ \" \"){2,6} [a-z]+ \".\"", 0, NULL},
        {"unicode", "root ::= [\\u00e0-\\u00ff\\u4e00-\\u9fff ]{1,12} \"!\"", 0, NULL},
        {"json schema", schema, 1, need},
        {"json object", object, 1, NULL},
    };
    int complete = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int s = 0; s < 3; s++) {
            if (s == 2 && (c == 1 || c == 2)) continue; /* logprobs: digits and the JSON grammars */
            dflash_gen g = dflash_default_gen();
            g.n_predict = 40;
            g.grammar = cases[c].gbnf;
            g.temp = s == 1 ? 0.8f : 0;
            if (s == 2) { /* logprobs of the masked row, with sampling */
                g.temp = 0.8f;
                g.top_p = 0.95f;
                g.on_logprob = on_lp;
                g.top_logprobs = 3;
            }
            char what[96];
            snprintf(what, sizeof what, "%s, %s", cases[c].name, s == 0 ? "greedy" : s == 1 ? "temp 0.8" : "temp 0.8 + logprobs");
            int bad = lossless(m, &g, what, cases[c].json, cases[c].need, &complete);
            CHECK(bad == 0, "%s: %d runs bad", what, bad);
        }
    /* some runs reached the grammar's end (the checks of whole strings ran) */
    CHECK(complete >= (fast ? 2 : 5), "only %d plain runs ended on a stop token", complete);
    free(schema);
    free(object);
}

/* With logprobs on, every top entry is an allowed token (the masked row);
 * greedy's token is the allowed one with the highest logit: against the
 * target's own logits (CPU backend) and the matcher run by the test. */
TEST(greedy_is_masked_argmax) {
    dflash_model *m = demo;
    if (!m) return;
    const char *gbnf = "root ::= \"The answer: \" ([a-z]+ \" \")+ [0-9]+";
    demo_target tg;
    if (target_open(&tg) != 0) return;
    int V = tg.V;
    gr_grammar *g = gr_parse(gbnf, strlen(gbnf));
    gr_state *st = gr_state_new(g), *t = gr_state_new(g);
    lp_log *lps = calloc(1, sizeof *lps);
    int wrong = 0, not_allowed = 0, checked = 0;
    for (int i = 0; i < n_prompts; i++) {
        dflash_gen gg = dflash_default_gen();
        gg.n_predict = 24;
        gg.grammar = gbnf;
        gg.on_logprob = on_lp;
        gg.top_logprobs = 5;
        int32_t *out;
        size_t nout;
        dflash_stats ds;
        if (gen(m, i, &gg, &out, &nout, lps, &ds) != 0) {
            CHECK(0, "generate");
            continue;
        }
        int32_t *all;
        float *lg = target_logits(&tg, i, out, nout, &all);
        gr_state *cur = gr_state_new(g);
        for (size_t j = 0; j < nout; j++) {
            /* the best allowed token by the test's own scan of the vocabulary */
            int best = -1;
            for (int k = 0; k < V; k++) {
                char piece[256];
                int len = dflash_token_piece(m, k, piece, sizeof piece);
                if (len <= 0 || len >= (int)sizeof piece) continue;
                gr_state_copy(t, cur);
                if (gr_feed(t, piece, (size_t)len) != 1) continue;
                if (best < 0 || lg[j * (size_t)V + k] > lg[j * (size_t)V + best]) best = k;
            }
            wrong += best != out[j];
            for (int k = 0; k < lps->v[j].n_top; k++) {
                if (lps->v[j].top[k].logprob == -INFINITY) continue; /* fewer allowed than asked for */
                char piece[256];
                int len = dflash_token_piece(m, lps->v[j].top[k].id, piece, sizeof piece);
                gr_state_copy(t, cur);
                not_allowed += len <= 0 || len >= (int)sizeof piece || gr_feed(t, piece, (size_t)len) != 1;
            }
            char piece[256];
            int len = dflash_token_piece(m, out[j], piece, sizeof piece);
            CHECK(len > 0 && gr_feed(cur, piece, (size_t)len) == 1, "emitted token %d rejected", out[j]);
            checked++;
        }
        gr_state_free(cur);
        free(lg);
        free(all);
        free(out);
    }
    fprintf(stderr, "  masked argmax: %d positions, %d wrong, %d top entries not allowed\n", checked, wrong, not_allowed);
    CHECK(checked > 20 && wrong == 0 && not_allowed == 0, "%d wrong picks, %d disallowed top entries", wrong, not_allowed);
    free(lps);
    gr_state_free(st);
    gr_state_free(t);
    gr_free(g);
    target_close(&tg);
}

/* A bad grammar: an error naming it, nothing generated; a schema's
 * unsupported keyword is named with its path. */
TEST(bad_grammar) {
    dflash_model *m = demo;
    if (!m) return;
    const char *bad[] = {"root ::= item", "root ::= \"a", "root ::= root \"x\" | \"y\"", ""};
    const char *needle[] = {"rule 'item' is used but not defined", "unterminated string", "left-recursive", "empty"};
    for (int i = 0; i < 4; i++) {
        dflash_gen g = dflash_default_gen();
        g.grammar = bad[i];
        CHECK(refused(m, &g, needle[i]), "grammar '%s': '%s'", bad[i], dflash_error());
    }
    char *s = dflash_json_schema_grammar("{\"type\":\"string\",\"pattern\":\"^a+$\"}");
    CHECK(!s && strstr(dflash_error(), "unsupported keyword 'pattern' at #"), "pattern: %s", s ? s : dflash_error());
    free(s);
}

int main(void) {
    demo_begin();
    if (demo) make_prompts(demo, prompt_text, fast ? 1 : 2, 2);
    RUN(bad_grammar);
    RUN(lossless_with_grammar);
    RUN(greedy_is_masked_argmax);
    demo_end();
    CHECK_DONE("test_constrained");
}
