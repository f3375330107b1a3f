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
#include <unistd.h>

#include <cJSON.h>

#include "backend.h"
#include "check.h"
#include "dflash.h"
#include "grammar.h"
#include "model.h"
#include "util.h"

static const char *root = ".";
static int fast;

static char *rpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", root, name);
    return buf[k];
}

enum { N_PROMPTS = 3 };
static int32_t *prompt[N_PROMPTS];
static size_t prompt_len[N_PROMPTS];
static int n_prompts;
static dflash_model *demo;

static void make_prompts(dflash_model *m) {
    static const char *text[N_PROMPTS] = {"Solve for x: 3x + 5 = 20.", "Give me a JSON object describing a cat.",
                                          "Write a Python function that reverses a string."};
    n_prompts = fast ? 1 : N_PROMPTS - 1;
    for (int i = 0; i < n_prompts; i++) {
        dflash_message msg = {"user", text[i]};
        char *chat = dflash_chat_prompt(m, &msg, 1, 1, 0);
        CHECK(chat && dflash_tokenize(m, chat, strlen(chat), &prompt[i], &prompt_len[i]) == 0, "tokenize: %s",
              dflash_error());
        free(chat);
    }
}

typedef struct {
    dflash_logprob v[256];
    int n;
} lp_log;

static int on_lp(void *ud, const dflash_logprob *lp) {
    lp_log *l = ud;
    if (l->n < 256) l->v[l->n++] = *lp;
    return 0;
}

static int gen(dflash_model *m, int i, const dflash_gen *g, int32_t **out, size_t *n, lp_log *lps, dflash_stats *st) {
    dflash_reset(m);
    if (lps) lps->n = 0;
    int rc = dflash_generate(m, prompt[i], prompt_len[i], g, NULL, lps, out, n, st);
    if (rc != 0) fprintf(stderr, "  generate: %s\n", dflash_error());
    return rc;
}

static int same_lps(const lp_log *a, const lp_log *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++) {
        const dflash_logprob *x = &a->v[i], *y = &b->v[i];
        if (x->id != y->id || memcmp(&x->logprob, &y->logprob, sizeof(float)) || x->n_top != y->n_top ||
            memcmp(x->top, y->top, sizeof(x->top[0]) * (size_t)x->n_top))
            return 0;
    }
    return 1;
}

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
    static const int blocks[] = {2, 4, 8, 16, 16}, maxes[] = {1, 3, 7, 15, -1};
    int bad = 0;
    lp_log *ref_lp = calloc(1, sizeof *ref_lp), *got_lp = calloc(1, sizeof *got_lp);
    for (int i = 0; i < n_prompts; i++) {
        dflash_gen g = *base;
        g.seed = 99 + (uint64_t)i;
        g.use_draft = 0;
        int32_t *ref, *out;
        size_t nref, nout;
        dflash_stats st;
        if (gen(m, i, &g, &ref, &nref, ref_lp, &st)) {
            bad++;
            continue;
        }
        bad += !output_ok(m, g.grammar, ref, nref, st.stop_reason, want_json, need, what);
        *n_complete += !strcmp(st.stop_reason, "stop token");
        g.use_draft = 1;
        for (int b = 0; b < 5; b++) {
            g.block_size = blocks[b];
            g.draft_max = maxes[b];
            if (gen(m, i, &g, &out, &nout, got_lp, &st)) {
                bad++;
                continue;
            }
            int diff = nout != nref || (nref && memcmp(out, ref, sizeof(int32_t) * nref));
            if (g.on_logprob) diff |= !same_lps(ref_lp, got_lp) || got_lp->n != (int)nout;
            if (diff)
                fprintf(stderr, "  %s: prompt %d block %d draft_max %d: DFlash differs from plain\n", what, i, blocks[b],
                        maxes[b]);
            bad += diff;
            free(out);
        }
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
    mdl_model tm;
    if (mdl_load(&tm, rpath("models/demo/target")) != 0) {
        CHECK(0, "mdl_load: %s", dfl_lasterr());
        return;
    }
    be_options bo = {.n_threads = 0};
    void *bi = be_cpu.open(&bo);
    CHECK(bi && be_cpu.prepare(bi, &tm) == 0, "backend: %s", dfl_lasterr());
    void *seq = be_cpu.create(bi, &tm, 1024);
    int V = tm.cfg.vocab;
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
        size_t n = prompt_len[i] + nout;
        int32_t *all = malloc(sizeof(int32_t) * n);
        memcpy(all, prompt[i], sizeof(int32_t) * prompt_len[i]);
        memcpy(all + prompt_len[i], out, sizeof(int32_t) * nout);
        float *lg = malloc(sizeof(float) * (size_t)V * nout);
        be_cpu.truncate(seq, 0);
        be_batch b = {.T = (int)n - 1, .tokens = all, .n_logits = (int)nout, .logits = lg};
        CHECK(be_cpu.forward(seq, &b) == 0, "forward: %s", dfl_lasterr());
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
    be_cpu.destroy(seq);
    be_cpu.release(bi, &tm);
    be_cpu.close(bi);
    mdl_free(&tm);
}

/* A bad grammar: an error naming it, nothing generated; a schema's
 * unsupported keyword is named with its path. */
TEST(bad_grammar) {
    dflash_model *m = demo;
    if (!m) return;
    const char *bad[] = {"root ::= item", "root ::= \"a", "root ::= root \"x\" | \"y\"", ""};
    const char *needle[] = {"rule 'item' is used but not defined", "unterminated string", "left-recursive", "empty"};
    for (int i = 0; i < 4; i++) {
        int32_t *out = NULL;
        size_t n = 0;
        dflash_gen g = dflash_default_gen();
        g.grammar = bad[i];
        int called = 0;
        dflash_reset(m);
        int rc = dflash_generate(m, prompt[0], prompt_len[0], &g, NULL, &called, &out, &n, NULL);
        CHECK(rc != 0 && strstr(dflash_error(), needle[i]) && !out, "grammar '%s': rc %d, '%s'", bad[i], rc, dflash_error());
        free(out);
    }
    char *s = dflash_json_schema_grammar("{\"type\":\"string\",\"pattern\":\"^a+$\"}");
    CHECK(!s && strstr(dflash_error(), "unsupported keyword 'pattern' at #"), "pattern: %s", s ? s : dflash_error());
    free(s);
}

static dflash_model *load_demo(void) {
    if (access(rpath("models/demo/draft/config.json"), R_OK) != 0) {
        CHECK(0, "demo pair missing (models/demo)");
        return NULL;
    }
    dflash_params pp = dflash_default_params();
    pp.n_ctx = 1024;
    dflash_model *m = dflash_load(rpath("models/demo/target"), rpath("models/demo/draft"), &pp);
    CHECK(m != NULL, "load: %s", dflash_error());
    return m;
}

int main(void) {
    const char *r = getenv("DFLASH_ROOT");
    if (r) root = r;
    fast = getenv("DFLASH_FAST") != NULL;
#if defined(__SANITIZE_ADDRESS__)
    fast = 1;
#endif
    demo = load_demo();
    if (demo) make_prompts(demo);
    RUN(bad_grammar);
    RUN(lossless_with_grammar);
    RUN(greedy_is_masked_argmax);
    for (int i = 0; i < n_prompts; i++) free(prompt[i]);
    if (demo) dflash_free(demo);
    CHECK_DONE("test_constrained");
}
