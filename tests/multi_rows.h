/* multi_rows.h - a backend's forward_multi and predict_multi against its
 * forward, logits and argmax, bit for bit (tests/test_batch.c on the CPU,
 * tests/cuda/test_cuda.c on the GPU): included by a test file after
 * check.h and backend.h. */
#ifndef DFL_TEST_MULTI_ROWS_H
#define DFL_TEST_MULTI_ROWS_H

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "util.h"

/* The backend, its instance and a model prepared on it. */
typedef struct {
    const be_ops *be;
    void *bi;
    const mdl_model *tm;
    int V;    /* the vocabulary */
    int fast; /* fewer steps (DFLASH_FAST, sanitizers) */
} mr_target;


enum { NSEQ = 4, NTAPS = 3, NSTEPS = 9, NSTEPS_FAST = 3 };

typedef struct {
    void *st;
    float *logits, *taps;
    int32_t ids[64];
} fw_out;

/* forward of tok[0..T) on each sequence: alone (multi 0) or in one
 * forward_multi; logits of every row (a prefill: n_logits = T) or kept rows
 * (keep: logits() and argmax() afterwards), taps of every row at taps[NTAPS]. */
static int run_step(const mr_target *t, fw_out *o, const int32_t *const *tok, const int *T, int keep, int multi,
                    const int *taps) {
    be_batch bs[NSEQ];
    void *sts[NSEQ];
    size_t V = (size_t)t->V, H = (size_t)t->tm->cfg.hidden;
    for (int i = 0; i < NSEQ; i++) {
        free(o[i].logits);
        free(o[i].taps);
        o[i].logits = malloc(sizeof(float) * V * (size_t)T[i]);
        o[i].taps = malloc(sizeof(float) * H * NTAPS * (size_t)T[i]);
        bs[i] = (be_batch){.T = T[i], .tokens = tok[i], .n_logits = keep ? 0 : T[i], .logits = o[i].logits,
                           .n_taps = NTAPS, .tap_layers = taps, .keep_rows = keep};
        sts[i] = o[i].st;
    }
    if (multi) {
        if (t->be->forward_multi(sts, bs, NSEQ) != 0) return -1;
    } else {
        for (int i = 0; i < NSEQ; i++)
            if (t->be->forward(sts[i], &bs[i]) != 0) return -1;
    }
    int row[NSEQ] = {0};
    int32_t *ids[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        ids[i] = o[i].ids;
        if (t->be->taps(sts[i], 0, T[i], o[i].taps) != 0) return -1;
        if (keep && !multi && t->be->logits(sts[i], 0, T[i], o[i].logits) != 0) return -1;
        if (keep && !multi && t->be->argmax(sts[i], 0, T[i], o[i].ids) != 0) return -1;
    }
    /* the argmaxes and logits of all sequences' kept rows, each pass over
     * the lm_head for both kinds: even sequences' logits with odd ones'
     * argmaxes, then the other way round */
    for (int pass = 0; keep && multi && pass < 2; pass++) {
        float *lg[NSEQ];
        for (int i = 0; i < NSEQ; i++) lg[i] = (i + pass) % 2 ? NULL : o[i].logits;
        if (t->be->predict_multi(sts, row, T, ids, lg, NSEQ) != 0) return -1;
    }
    return 0;
}

/* forward_multi against forward on t's model (name: for the messages):
 * four sequences with prefills of 5, 45 (more than one 32-row pass; 90 for a
 * vocabulary up to 64K: three passes, past a 72-row sliding ring), 17 and 3
 * tokens, then NSTEPS steps of verify-sized batches, each rolled back by
 * half its rows as a rejected draft is (NSTEPS_FAST with DFLASH_FAST);
 * every sequence's logits, taps, argmax and length as alone. refusals: then
 * a tree batch and a sequence given twice are refused with nothing run. */
static void multi_rows(const mr_target *t, const char *name, int refusals) {
    const cfg_model *c = &t->tm->cfg;
    const int taps[NTAPS] = {0, c->n_layers / 2, c->n_layers - 1};
    size_t V = (size_t)t->V, H = (size_t)c->hidden;
    fw_out alone[NSEQ] = {{0}}, multi[NSEQ] = {{0}};
    for (int i = 0; i < NSEQ; i++) {
        alone[i].st = t->be->create(t->bi, t->tm, 1024);
        multi[i].st = t->be->create(t->bi, t->tm, 1024);
    }
    const int pre[NSEQ] = {5, t->V > 65536 ? 45 : 90, 17, 3};
    static const int steps[3][NSEQ] = {{1, 4, 16, 2}, {8, 1, 1, 1}, {3, 16, 5, 1}};
    int32_t tok[NSEQ][96];
    const int32_t *tp[NSEQ];
    int bad = 0;
    int nsteps = t->fast ? NSTEPS_FAST : NSTEPS;
    for (int s = -1; s < nsteps && !bad; s++) {
        int T[NSEQ];
        for (int i = 0; i < NSEQ; i++) {
            T[i] = s < 0 ? pre[i] : steps[s % 3][i];
            for (int r = 0; r < T[i]; r++)
                tok[i][r] = (int32_t)((1000u + 7919u * (unsigned)((i + 1) * (r + 3 + 11 * (s + 1)))) % (unsigned)t->V);
            tp[i] = tok[i];
        }
        int keep = s >= 0;
        int ra = run_step(t, alone, tp, T, keep, 0, taps), rm = run_step(t, multi, tp, T, keep, 1, taps);
        CHECK(ra == 0 && rm == 0, "%s step %d: forward %d, forward_multi %d: %s", name, s, ra, rm, dfl_lasterr());
        if (ra || rm) break;
        for (int i = 0; i < NSEQ; i++) {
            int la = t->be->length(alone[i].st), lm = t->be->length(multi[i].st);
            int same = la == lm && !memcmp(alone[i].logits, multi[i].logits, sizeof(float) * V * (size_t)T[i]) &&
                       !memcmp(alone[i].taps, multi[i].taps, sizeof(float) * H * NTAPS * (size_t)T[i]) &&
                       (!keep || !memcmp(alone[i].ids, multi[i].ids, sizeof(int32_t) * (size_t)T[i]));
            CHECK(same, "%s step %d seq %d (length %d vs %d alone): logits, taps or argmax differ from the forward alone",
                  name, s, i, lm, la);
            bad |= !same;
        }
        /* roll back part of the verify, as a rejected draft does */
        for (int i = 0; keep && i < NSEQ; i++) {
            int len = t->be->length(alone[i].st) - T[i] / 2;
            t->be->truncate(alone[i].st, len);
            t->be->truncate(multi[i].st, len);
        }
    }
    if (refusals) { /* nothing runs */
        int32_t one = 42;
        int parent = -1;
        void *sts[2] = {multi[0].st, multi[1].st};
        be_batch bs[2] = {{.T = 1, .tokens = &one}, {.T = 1, .tokens = &one, .tree_parent = &parent}};
        int len0 = t->be->length(sts[0]);
        CHECK(t->be->forward_multi(sts, bs, 2) != 0 && strstr(dfl_lasterr(), "tree"), "a tree batch: %s",
              dfl_lasterr());
        sts[1] = sts[0];
        bs[1].tree_parent = NULL;
        CHECK(t->be->forward_multi(sts, bs, 2) != 0 && strstr(dfl_lasterr(), "twice"), "the same sequence twice: %s",
              dfl_lasterr());
        CHECK(t->be->length(sts[0]) == len0, "a refused forward_multi moved the length %d -> %d", len0,
              t->be->length(sts[0]));
    }
    for (int i = 0; i < NSEQ; i++) {
        t->be->destroy(alone[i].st);
        t->be->destroy(multi[i].st);
        free(alone[i].logits);
        free(alone[i].taps);
        free(multi[i].logits);
        free(multi[i].taps);
    }
}

#endif
