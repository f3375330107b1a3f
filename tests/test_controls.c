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

#include "check.h"
#include "demo_pair.h"

/* chat-templated prompts of each domain, one raw */
static const char *const prompt_text[DEMO_MAX_PROMPTS] = {
    "Solve for x: 3x + 5 = 20.", "Write a Python function that reverses a string.",
    "Tell me about the history of the bicycle.", "Once upon a time"};

/* Plain decoding vs DFlash at blocks 2, 4, 8, 16 (fixed) and 16 auto, with
 * the controls of base; returns the number of differing runs. With
 * logprobs, the entries must be identical too. plain[i], nplain[i] (may be
 * NULL) get the plain output of prompt i. */
static int lossless(dflash_model *m, const dflash_gen *base, const char *what, int32_t **plain, size_t *nplain) {
    int bad = 0;
    lp_log *ref_lp = calloc(1, sizeof *ref_lp), *got_lp = calloc(1, sizeof *got_lp);
    for (int i = 0; i < n_prompts; i++) {
        dflash_gen g = *base;
        g.seed = 1234 + (uint64_t)i;
        g.use_draft = 0;
        int32_t *ref;
        size_t nref;
        if (gen(m, i, &g, &ref, &nref, ref_lp, NULL)) {
            bad++;
            continue;
        }
        bad += dflash_runs(m, i, g, ref, nref, ref_lp, got_lp, what);
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

/* Each control on its own and all together, greedy and temp 0.8: DFlash =
 * plain; and the control changes plain output against the control off. */
TEST(controls_lossless) {
    dflash_model *m = demo;
    if (!m) return;
    int32_t *off_out[2][DEMO_MAX_PROMPTS], *on_out[DEMO_MAX_PROMPTS];
    size_t off_n[2][DEMO_MAX_PROMPTS], on_n[DEMO_MAX_PROMPTS];
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
    CHECK(gen(m, 0, &g, &o, &no, NULL, NULL) == 0 && same_tokens(o, no, off_out[0][0], off_n[0][0]),
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
    demo_target tg;
    if (target_open(&tg) != 0) return;
    int V = tg.V;
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
            if (gen(m, i, &g, &out, &nout, lps, NULL) != 0) {
                CHECK(0, "generate");
                continue;
            }
            CHECK(lps->n == (int)nout, "%s: %d entries for %zu tokens", what, lps->n, nout);
            /* the target on prompt + out: row j of the last nout = position n_prompt + j */
            int32_t *all;
            float *lg = target_logits(&tg, i, out, nout, &all);
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
    target_close(&tg);
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
    for (int i = 0; i < 8; i++)
        CHECK(refused(m, &cases[i].g, cases[i].needle), "case %d: error '%s', want '%s'", i, dflash_error(),
              cases[i].needle);
}

int main(void) {
    demo_begin();
    if (demo) make_prompts(demo, prompt_text, fast ? 2 : DEMO_MAX_PROMPTS, 3);
    RUN(bad_settings);
    RUN(controls_lossless);
    RUN(logprobs_exact);
    demo_end();
    CHECK_DONE("test_controls");
}
