/* demo_pair.h - what the end-to-end tests on the shipped demo pair
 * (models/demo/target + draft) share: test_controls.c, test_constrained.c.
 * Include after check.h; main() calls demo_begin() (DFLASH_ROOT, DFLASH_FAST,
 * the pair loaded into demo or a failed CHECK), then make_prompts() with its
 * own texts, and demo_end() before CHECK_DONE.
 *
 *   gen()          one generation of prompt i, the log-probabilities collected
 *   dflash_runs()  DFlash at blocks 2, 4, 8, 16 and 16 auto against a plain
 *                  run's output (and entries, with logprobs): how many differ
 *   refused()      bad settings fail before anything is generated
 *   demo_target    the target on the CPU backend directly, for the logits
 *                  the tests check the engine against */
#ifndef DFL_DEMO_PAIR_H
#define DFL_DEMO_PAIR_H

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
static int fast; /* DFLASH_FAST (and the sanitizers' build): fewer prompts */
static dflash_model *demo;

/* root/name; four results live at a time */
static char *rpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", root, name);
    return buf[k];
}

enum { DEMO_MAX_PROMPTS = 4 };
static int32_t *prompt[DEMO_MAX_PROMPTS];
static size_t prompt_len[DEMO_MAX_PROMPTS];
static int n_prompts;

/* prompt[0..n) from text[0..n): the first n_chat chat-templated, the rest raw */
static void make_prompts(dflash_model *m, const char *const *text, int n, int n_chat) {
    n_prompts = n;
    for (int i = 0; i < n; i++) {
        dflash_message msg = {"user", text[i]};
        char *chat = i < n_chat ? dflash_chat_prompt(m, &msg, 1, 1, 0) : NULL;
        const char *t = chat ? chat : text[i];
        CHECK((chat || i >= n_chat) && dflash_tokenize(m, t, strlen(t), &prompt[i], &prompt_len[i]) == 0,
              "tokenize: %s", dflash_error());
        free(chat);
    }
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

static void demo_begin(void) {
    const char *r = getenv("DFLASH_ROOT");
    if (r) root = r;
    fast = getenv("DFLASH_FAST") != NULL;
#if defined(__SANITIZE_ADDRESS__)
    fast = 1; /* the sanitizers' build is several times slower */
#endif
    demo = load_demo();
}

static void demo_end(void) {
    for (int i = 0; i < n_prompts; i++) free(prompt[i]);
    if (demo) dflash_free(demo);
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

/* Prompt i from a fresh state; lps (may be NULL) collects the entries when
 * g->on_logprob is on_lp, st (may be NULL) gets the stats. */
static int gen(dflash_model *m, int i, const dflash_gen *g, int32_t **out, size_t *n, lp_log *lps, dflash_stats *st) {
    dflash_stats own;
    dflash_reset(m);
    if (lps) lps->n = 0;
    int rc = dflash_generate(m, prompt[i], prompt_len[i], g, NULL, lps, out, n, st ? st : &own);
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

/* DFlash on prompt i with g's settings (seed included) at blocks 2, 4, 8, 16
 * (fixed) and 16 auto against ref[0..nref), the plain output (ref_lp its
 * entries, with g->on_logprob; got_lp scratch); the number of the 5 runs
 * that failed or differ. */
static int dflash_runs(dflash_model *m, int i, dflash_gen g, const int32_t *ref, size_t nref, const lp_log *ref_lp,
                       lp_log *got_lp, const char *what) {
    static const int blocks[] = {2, 4, 8, 16, 16}, maxes[] = {1, 3, 7, 15, -1};
    int bad = 0;
    g.use_draft = 1;
    for (int b = 0; b < 5; b++) {
        int32_t *out;
        size_t nout;
        g.block_size = blocks[b];
        g.draft_max = maxes[b];
        if (gen(m, i, &g, &out, &nout, got_lp, NULL)) {
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
    return bad;
}

/* 1 if generating prompt 0 with g fails before anything is generated, the
 * error containing needle (dflash_error() has it). */
static int refused(dflash_model *m, const dflash_gen *g, const char *needle) {
    int32_t *out = NULL;
    size_t n = 0;
    dflash_reset(m);
    int rc = dflash_generate(m, prompt[0], prompt_len[0], g, NULL, NULL, &out, &n, NULL);
    int ok = rc != 0 && strstr(dflash_error(), needle) && !out;
    free(out);
    return ok;
}

/* ---- the target's own logits (CPU backend) -------------------------------- */

typedef struct {
    mdl_model tm;
    void *bi, *seq;
    int V; /* the vocabulary */
} demo_target;

/* 0, or -1 after a failed CHECK */
static int target_open(demo_target *t) {
    if (mdl_load(&t->tm, rpath("models/demo/target")) != 0) {
        CHECK(0, "mdl_load: %s", dfl_lasterr());
        return -1;
    }
    be_options bo = {.n_threads = 0};
    t->bi = be_cpu.open(&bo);
    CHECK(t->bi && be_cpu.prepare(t->bi, &t->tm) == 0, "backend: %s", dfl_lasterr());
    t->seq = be_cpu.create(t->bi, &t->tm, 1024);
    t->V = t->tm.cfg.vocab;
    return 0;
}

static void target_close(demo_target *t) {
    be_cpu.destroy(t->seq);
    be_cpu.release(t->bi, &t->tm);
    be_cpu.close(t->bi);
    mdl_free(&t->tm);
}

/* One forward of prompt i + out[0..nout): *all (malloc'd) gets that
 * sequence; returns (malloc'd) nout rows of V logits, row j the target's
 * logits at position prompt_len[i] + j (the row that chose out[j]). */
static float *target_logits(demo_target *t, int i, const int32_t *out, size_t nout, int32_t **all) {
    size_t n = prompt_len[i] + nout;
    int32_t *a = malloc(sizeof(int32_t) * n);
    memcpy(a, prompt[i], sizeof(int32_t) * prompt_len[i]);
    memcpy(a + prompt_len[i], out, sizeof(int32_t) * nout);
    float *lg = malloc(sizeof(float) * (size_t)t->V * nout);
    be_cpu.truncate(t->seq, 0);
    be_batch b = {.T = (int)n - 1, .tokens = a, .n_logits = (int)nout, .logits = lg};
    CHECK(n - 1 <= BE_MAX_ROWS && be_cpu.forward(t->seq, &b) == 0, "forward: %s", dfl_lasterr());
    *all = a;
    return lg;
}

#endif
