/* test_controls.c - the logit controls (min_p, repeat / frequency / presence
 * penalties, logit_bias) and log-probabilities end to end on the shipped
 * demo pair (models/demo/target + draft): DFlash output equals plain output
 * with each control on, greedy and temperature 0.8, at block sizes 2, 4, 8,
 * 16 and auto; each control changes the output against it off; the
 * log-probabilities with the draft equal those without it bit for bit, and
 * match a log-softmax the test computes itself from the target's logits
 * (read from the CPU backend directly, the controls applied by the test's
 * own code); bad settings are refused naming the field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "dflash.h"
#include "model.h"
#include "util.h"

static const char *root = ".";
static int fast; /* DFLASH_FAST: fewer prompts */

static char *rpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", root, name);
    return buf[k];
}

enum { N_PROMPTS = 4 };
static int32_t *prompt[N_PROMPTS];
static size_t prompt_len[N_PROMPTS];
static int n_prompts;

/* chat-templated prompts of each domain, one raw */
static void make_prompts(dflash_model *m) {
    static const char *text[N_PROMPTS] = {"Solve for x: 3x + 5 = 20.", "Write a Python function that reverses a string.",
                                          "Tell me about the history of the bicycle.", "Once upon a time"};
    n_prompts = fast ? 2 : N_PROMPTS;
    for (int i = 0; i < n_prompts; i++) {
        dflash_message msg = {"user", text[i]};
        char *chat = i == 3 ? NULL : dflash_chat_prompt(m, &msg, 1, 1, 0);
        const char *t = chat ? chat : text[i];
        CHECK(dflash_tokenize(m, t, strlen(t), &prompt[i], &prompt_len[i]) == 0, "tokenize: %s", dflash_error());
        free(chat);
    }
}

/* ---- collecting log-probabilities ---------------------------------------- */

typedef struct {
    dflash_logprob v[256];
    int n;
} lp_log;

static int on_lp(void *ud, const dflash_logprob *lp) {
    lp_log *l = ud;
    if (l->n < 256) l->v[l->n++] = *lp;
    return 0;
}

static int gen(dflash_model *m, int i, const dflash_gen *g, int32_t **out, size_t *n, lp_log *lps) {
    dflash_reset(m);
    if (lps) lps->n = 0;
    dflash_stats st;
    int rc = dflash_generate(m, prompt[i], prompt_len[i], g, NULL, lps, out, n, &st);
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

/* Plain decoding vs DFlash at blocks 2, 4, 8, 16 (fixed) and 16 auto, with
 * the controls of base; returns the number of differing runs. With
 * logprobs, the entries must be identical too. plain[i], nplain[i] (may be
 * NULL) get the plain output of prompt i. */
static int lossless(dflash_model *m, const dflash_gen *base, const char *what, int32_t **plain, size_t *nplain) {
    static const int blocks[] = {2, 4, 8, 16, 16}, maxes[] = {1, 3, 7, 15, -1};
    int bad = 0;
    lp_log *ref_lp = calloc(1, sizeof *ref_lp), *got_lp = calloc(1, sizeof *got_lp);
    for (int i = 0; i < n_prompts; i++) {
        dflash_gen g = *base;
        g.seed = 1234 + (uint64_t)i;
        g.use_draft = 0;
        int32_t *ref, *out;
        size_t nref, nout;
        if (gen(m, i, &g, &ref, &nref, ref_lp)) {
            bad++;
            continue;
        }
        g.use_draft = 1;
        for (int b = 0; b < 5; b++) {
            g.block_size = blocks[b];
            g.draft_max = maxes[b];
            if (gen(m, i, &g, &out, &nout, got_lp)) {
                bad++;
                continue;
            }
            int diff = nout != nref || (nref && memcmp(out, ref, sizeof(int32_t) * nref));
            if (g.on_logprob) diff |= !same_lps(ref_lp, got_lp) || got_lp->n != (int)nout;
            if (diff) fprintf(stderr, "  %s: prompt %d block %d draft_max %d: DFlash differs from plain\n", what, i,
                              blocks[b], maxes[b]);
            bad += diff;
            free(out);
        }
        if (plain) {
            plain[i] = ref;
            nplain[i] = nref;
        } else {
            free(ref);
        }
    }
    free(ref_lp);
    free(got_lp);
    fprintf(stderr, "  %s: %d prompts x 5 DFlash settings, %d differ\n", what, n_prompts, bad);
    return bad;
}

static int same_tokens(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (!na || !memcmp(a, b, sizeof(int32_t) * na));
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

static dflash_model *demo;

/* Each control on its own and all together, greedy and temp 0.8: DFlash =
 * plain; and the control changes plain output against the control off. */
TEST(controls_lossless) {
    dflash_model *m = demo;
    if (!m) return;
    int32_t *off_out[2][N_PROMPTS], *on_out[N_PROMPTS];
    size_t off_n[2][N_PROMPTS], on_n[N_PROMPTS];
    for (int s = 0; s < 2; s++) { /* the outputs with every control off */
        dflash_gen g = dflash_default_gen();
        g.n_predict = 32;
        g.temp = s ? 0.8f : 0;
        g.top_p = s ? 0.95f : 1.0f;
        CHECK(lossless(m, &g, s ? "controls off, temp 0.8" : "controls off, greedy", off_out[s], off_n[s]) == 0,
              "off: DFlash differs from plain");
    }
    /* a token greedy emits (its first), banned by logit_bias; another favoured */
    dflash_logit_bias bias[2] = {{.id = off_out[0][0][0], .bias = -100}, {.id = 13, .bias = 4.0f}};
    /* negative penalties reward repeats: a row that missed the drafts before
     * it in its history picks differently at once (positive ones seldom show it) */
    static const struct {
        const char *name;
        float repeat, frequency, presence, min_p;
        int bias, last_n;
    } ctl[] = {
        {.name = "repeat_penalty 1.5", .repeat = 1.5f, .last_n = 64},
        {.name = "repeat_penalty 0.7", .repeat = 0.7f, .last_n = 64},
        {.name = "frequency_penalty 1", .repeat = 1, .frequency = 1.0f, .last_n = 64},
        {.name = "frequency_penalty -1", .repeat = 1, .frequency = -1.0f, .last_n = 64},
        {.name = "presence_penalty 1.5", .repeat = 1, .presence = 1.5f, .last_n = 64},
        {.name = "presence_penalty -1", .repeat = 1, .presence = -1.0f, .last_n = 64},
        {.name = "logit_bias", .repeat = 1, .bias = 1, .last_n = 64},
        {.name = "min_p 0.2", .repeat = 1, .min_p = 0.2f, .last_n = 64},
        {.name = "all together, whole history", .repeat = 1.2f, .frequency = -0.5f, .presence = 0.5f, .min_p = 0.05f,
         .bias = 1, .last_n = -1},
    };
    for (size_t c = 0; c < sizeof ctl / sizeof ctl[0]; c++)
        for (int s = 0; s < 2; s++) {
            if (ctl[c].min_p > 0 && ctl[c].bias == 0 && s == 0) continue; /* min_p alone: sampling only */
            dflash_gen g = dflash_default_gen();
            g.n_predict = 32;
            g.temp = s ? 0.8f : 0;
            g.top_p = s && ctl[c].min_p == 0 ? 0.95f : 1.0f;
            g.repeat_penalty = ctl[c].repeat;
            g.frequency_penalty = ctl[c].frequency;
            g.presence_penalty = ctl[c].presence;
            g.min_p = ctl[c].min_p;
            g.repeat_last_n = ctl[c].last_n;
            if (ctl[c].bias) {
                g.logit_bias = bias;
                g.n_logit_bias = 2;
            }
            char what[96];
            snprintf(what, sizeof what, "%s, %s", ctl[c].name, s ? "temp 0.8" : "greedy");
            int bad = lossless(m, &g, what, on_out, on_n);
            CHECK(bad == 0, "%s: %d DFlash runs differ from plain decoding", what, bad);
            /* against off (same seeds, plain decoding): some prompt's output changed */
            int changed = 0, seen = 0;
            for (int i = 0; i < n_prompts; i++) {
                changed += !same_tokens(on_out[i], on_n[i], off_out[s][i], off_n[s][i]);
                for (size_t k = 0; k < on_n[i] && ctl[c].bias; k++) seen |= on_out[i][k] == bias[0].id;
                free(on_out[i]);
            }
            CHECK(changed > 0, "%s: the output equals the output without it on all %d prompts", what, n_prompts);
            CHECK(!seen, "%s: the token biased by -100 was still emitted", what);
        }
    /* min_p 1 at temp 0.8 keeps only the most likely token: greedy's output */
    dflash_gen g = dflash_default_gen();
    g.n_predict = 32;
    g.temp = 0.8f;
    g.min_p = 1.0f;
    g.use_draft = 0;
    int32_t *o;
    size_t no;
    CHECK(gen(m, 0, &g, &o, &no, NULL) == 0 && same_tokens(o, no, off_out[0][0], off_n[0][0]),
          "min_p 1 with sampling differs from greedy");
    free(o);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < n_prompts; i++) free(off_out[s][i]);
}

/* ---- the independent log-softmax --------------------------------------------- */

/* The test's own reading of the controls: per id its count among the last
 * last_n tokens of hist, then bias, repeat, frequency, presence, in double. */
static void controls_ref(const dflash_gen *g, const float *l, double *z, int V, const int32_t *hist, int n_hist) {
    for (int i = 0; i < V; i++) z[i] = l[i];
    for (int i = 0; i < g->n_logit_bias; i++) z[g->logit_bias[i].id] += g->logit_bias[i].bias;
    int from = g->repeat_last_n < 0 || g->repeat_last_n > n_hist ? 0 : n_hist - g->repeat_last_n;
    for (int h = from; h < n_hist; h++) {
        int id = hist[h], c = 0, first = 1;
        for (int k = from; k < h; k++) first &= hist[k] != id;
        if (!first) continue;
        for (int k = from; k < n_hist; k++) c += hist[k] == id;
        if (g->repeat_penalty != 1.0f) z[id] = z[id] > 0 ? z[id] / g->repeat_penalty : z[id] * g->repeat_penalty;
        z[id] -= c * (double)g->frequency_penalty + g->presence_penalty;
    }
}

/* Log-probabilities: DFlash = plain bit for bit (lossless() checks the
 * entries), and each entry against the test's log-softmax of the target's
 * logits for prompt + the tokens before it, from one CPU forward of the
 * whole sequence. */
TEST(logprobs_exact) {
    dflash_model *m = demo;
    if (!m) return;
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
    dflash_logit_bias bias[1] = {{.id = 13, .bias = 2.5f}};
    double *z = malloc(sizeof(double) * (size_t)V);
    lp_log *lps = calloc(1, sizeof *lps);
    for (int s = 0; s < 3; s++) {
        dflash_gen g = dflash_default_gen();
        g.n_predict = 24;
        g.on_logprob = on_lp;
        g.top_logprobs = s == 0 ? 0 : s == 1 ? 5 : DFLASH_MAX_TOP_LOGPROBS;
        if (s) {
            g.repeat_penalty = 1.3f;
            g.frequency_penalty = 0.4f;
            g.presence_penalty = 0.2f;
            g.repeat_last_n = s == 1 ? 16 : -1;
            g.logit_bias = bias;
            g.n_logit_bias = 1;
        }
        if (s == 2) g.temp = 0.8f;
        char what[64];
        snprintf(what, sizeof what, "logprobs, %s", s == 0 ? "greedy" : s == 1 ? "greedy + controls" : "temp 0.8 + controls");
        CHECK(lossless(m, &g, what, NULL, NULL) == 0, "%s: DFlash tokens or logprobs differ from plain", what);
        double worst = 0;
        int top_bad = 0, id_bad = 0, sum_bad = 0;
        for (int i = 0; i < n_prompts; i++) {
            int32_t *out;
            size_t nout;
            g.seed = 1234 + (uint64_t)i;
            g.use_draft = 1;
            if (gen(m, i, &g, &out, &nout, lps) != 0) {
                CHECK(0, "generate");
                continue;
            }
            CHECK(lps->n == (int)nout, "%s: %d entries for %zu tokens", what, lps->n, nout);
            /* the target on prompt + out: row j of the last nout = position n_prompt + j */
            size_t n = prompt_len[i] + nout;
            int32_t *all = malloc(sizeof(int32_t) * n);
            memcpy(all, prompt[i], sizeof(int32_t) * prompt_len[i]);
            memcpy(all + prompt_len[i], out, sizeof(int32_t) * nout);
            float *lg = malloc(sizeof(float) * (size_t)V * nout);
            be_cpu.truncate(seq, 0);
            be_batch b = {.T = (int)n - 1, .tokens = all, .n_logits = (int)nout, .logits = lg};
            CHECK(n - 1 <= BE_MAX_ROWS && be_cpu.forward(seq, &b) == 0, "forward: %s", dfl_lasterr());
            for (size_t j = 0; j < nout && j < (size_t)lps->n; j++) {
                const dflash_logprob *e = &lps->v[j];
                controls_ref(&g, lg + j * (size_t)V, z, V, all, (int)(prompt_len[i] + j));
                double mx = -INFINITY, sum = 0;
                for (int k = 0; k < V; k++) mx = z[k] > mx ? z[k] : mx;
                for (int k = 0; k < V; k++) sum += exp(z[k] - mx);
                double lse = mx + log(sum), d = fabs(e->logprob - (z[out[j]] - lse));
                worst = d > worst ? d : worst;
                id_bad += e->id != out[j];
                /* the top list: descending, each its own log-softmax, none better left out */
                double mass = 0;
                for (int k = 0; k < e->n_top; k++) {
                    const dflash_token_logprob *t = &e->top[k];
                    double want = z[t->id] - lse;
                    top_bad += fabs(t->logprob - want) > 1e-4 || (k && t->logprob > e->top[k - 1].logprob);
                    mass += exp(want);
                }
                if (e->n_top) {
                    int better = 0;
                    double last = z[e->top[e->n_top - 1].id];
                    for (int k = 0; k < V; k++) better += z[k] > last + 1e-4;
                    top_bad += better >= e->n_top;
                }
                sum_bad += mass > 1 + 1e-4;
            }
            free(lg);
            free(all);
            free(out);
        }
        fprintf(stderr, "  %s: largest |logprob - reference| %.2g\n", what, worst);
        CHECK(worst < 1e-4 && id_bad == 0 && top_bad == 0 && sum_bad == 0,
              "%s: logprobs off by %g, %d ids, %d top entries, %d sums wrong", what, worst, id_bad, top_bad, sum_bad);
        if (s == 0) { /* the greedy token is the most likely one */
            int bad = 0;
            for (int j = 0; j < lps->n; j++) bad += lps->v[j].n_top != 0 || lps->v[j].logprob > 0;
            CHECK(bad == 0, "greedy entries: %d bad", bad);
        }
    }
    free(lps);
    free(z);
    be_cpu.destroy(seq);
    be_cpu.release(bi, &tm);
    be_cpu.close(bi);
    mdl_free(&tm);
}

/* Bad settings: an error naming the field, nothing generated. */
TEST(bad_settings) {
    dflash_model *m = demo;
    if (!m) return;
    struct {
        const char *needle;
        dflash_gen g;
    } cases[8];
    for (int i = 0; i < 8; i++) cases[i].g = dflash_default_gen();
    dflash_logit_bias far = {.id = 1 << 30, .bias = 1}, big = {.id = 5, .bias = 101}, nan = {.id = 5, .bias = NAN};
    cases[0].needle = "min_p", cases[0].g.min_p = 1.5f;
    cases[1].needle = "repeat_penalty", cases[1].g.repeat_penalty = 0;
    cases[2].needle = "repeat_last_n", cases[2].g.repeat_last_n = -2;
    cases[3].needle = "frequency_penalty", cases[3].g.frequency_penalty = INFINITY;
    cases[4].needle = "logit_bias[0]: token id 1073741824 is outside the vocabulary", cases[4].g.logit_bias = &far;
    cases[4].g.n_logit_bias = 1;
    cases[5].needle = "logit_bias[0]: bias 101", cases[5].g.logit_bias = &big, cases[5].g.n_logit_bias = 1;
    cases[6].needle = "logit_bias[0]: bias nan", cases[6].g.logit_bias = &nan, cases[6].g.n_logit_bias = 1;
    cases[7].needle = "top_logprobs 21", cases[7].g.top_logprobs = 21;
    for (int i = 0; i < 8; i++) {
        int32_t *out = NULL;
        size_t n = 0;
        dflash_reset(m);
        int rc = dflash_generate(m, prompt[0], prompt_len[0], &cases[i].g, NULL, NULL, &out, &n, NULL);
        CHECK(rc != 0 && strstr(dflash_error(), cases[i].needle), "case %d: rc %d, error '%s', want '%s'", i, rc,
              dflash_error(), cases[i].needle);
        free(out);
    }
}

int main(void) {
    const char *r = getenv("DFLASH_ROOT");
    if (r) root = r;
    fast = getenv("DFLASH_FAST") != NULL;
#if defined(__SANITIZE_ADDRESS__)
    fast = 1; /* the sanitizers' build is several times slower */
#endif
    demo = load_demo();
    if (demo) make_prompts(demo);
    RUN(bad_settings);
    RUN(controls_lossless);
    RUN(logprobs_exact);
    for (int i = 0; i < n_prompts; i++) free(prompt[i]);
    if (demo) dflash_free(demo);
    CHECK_DONE("test_controls");
}
