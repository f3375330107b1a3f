/* rollback_bench.c - what the exact rollback of recurrent state costs
 * (Qwen3.5's Gated DeltaNet, deltanet.h) on a backend. Built and run by
 * `make bench-rollback ROLLBACK_MODEL=DIR [ROLLBACK_BACKEND=cuda]`.
 *
 *   rollback_bench MODEL_DIR [THREADS] [cpu|cuda]
 *
 * At depth 256 it times (median of 9): a decode step (T = 1; its forward
 * takes the snapshot), a 16-row verify forward, and truncate() back into
 * that verify keeping 1, 4, 8 and 16 rows (restore the snapshot + replay the
 * kept rows through the conv and the delta rule). It prints the state's
 * size and each rollback as a share of the verify it follows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/deltanet.h"
#include "model.h"
#include "util.h"

enum { DEPTH = 256, W = 16, REPS = 9 };

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t) {
    qsort(t, REPS, sizeof *t, cmp);
    return t[REPS / 2];
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: rollback_bench MODEL_DIR [THREADS]\n");
        return 2;
    }
    mdl_model m;
    be_options o = {.n_threads = argc > 2 ? atoi(argv[2]) : 0};
    const be_ops *B = be_select(argc > 3 ? argv[3] : "cpu");
    void *be = B ? B->open(&o) : NULL;
    if (!be || mdl_load(&m, argv[1]) != 0 || B->prepare(be, &m) != 0) {
        fprintf(stderr, "%s\n", dfl_lasterr());
        return 1;
    }
    const cfg_model *c = &m.cfg;
    if (!c->n_linear_layers) {
        fprintf(stderr, "%s has no recurrent layers: truncate only moves a length\n", argv[1]);
        return 1;
    }
    int32_t *tok = malloc(sizeof(int32_t) * (DEPTH + W + 1));
    for (int i = 0; i < DEPTH + W + 1; i++) tok[i] = (int32_t)((i * 7919 + 13) % c->vocab);
    void *st = B->create(be, &m, DEPTH + W + 8);
    for (int r = 0; r < DEPTH; r += 64) {
        be_batch b = {.T = 64, .tokens = tok + r};
        if (B->forward(st, &b) != 0) {
            fprintf(stderr, "%s\n", dfl_lasterr());
            return 1;
        }
    }
    /* every timed span ends in a call that returns data (argmax ids or one
     * row's logits), so an asynchronous backend has finished the work; a
     * rollback is (truncate + logits of one kept row) - (logits alone) */
    double t1[REPS], tv[REPS], tl[REPS], tr[4][REPS];
    int keeps[4] = {1, 4, 8, 16};
    int32_t ids[W];
    float *row = malloc(sizeof(float) * (size_t)c->vocab);
    for (int rep = 0; rep < REPS; rep++) {
        be_batch b1 = {.T = 1, .tokens = tok + DEPTH, .keep_rows = 1};
        double a = dfl_now();
        B->forward(st, &b1);
        B->argmax(st, 0, 1, ids);
        t1[rep] = dfl_now() - a;
        B->truncate(st, DEPTH);
        for (int k = 0; k < 4; k++) {
            be_batch bv = {.T = W, .tokens = tok + DEPTH, .keep_rows = 1};
            a = dfl_now();
            B->forward(st, &bv);
            B->argmax(st, 0, W, ids);
            tv[rep] = dfl_now() - a;
            a = dfl_now();
            B->logits(st, 0, 1, row);
            tl[rep] = dfl_now() - a;
            a = dfl_now();
            int kept = B->truncate(st, DEPTH + keeps[k]);
            B->logits(st, 0, 1, row);
            tr[k][rep] = dfl_now() - a;
            if (kept != DEPTH + keeps[k]) {
                fprintf(stderr, "rollback kept %d rows, not %d\n", kept, DEPTH + keeps[k]);
                return 1;
            }
            B->truncate(st, DEPTH); /* back to the verify's own start: restore, no replay */
        }
    }
    free(row);
    double lbase = median(tl);
    double s1 = median(t1), sv = median(tv);
    size_t state = (size_t)c->n_linear_layers *
                   ((size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim +
                    (size_t)(c->lin_conv - 1) * (2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim)) *
                   sizeof(float);
    printf("%s: %d linear layers, recurrent state %.1f MB per sequence, depth %d, backend %s (%s)\n", argv[1],
           c->n_linear_layers, state / 1e6, DEPTH, B->name, B->describe(be));
    printf("decode step (T=1, takes the snapshot; + argmax): %.2f ms | verify forward T=%d (+ argmax): %.2f ms\n",
           s1 * 1e3, W, sv * 1e3);
    printf("rollback into the verify (restore + replay of the kept rows):\n  keep   ms     %% of the verify\n");
    for (int k = 0; k < 4; k++) {
        double r = median(tr[k]) - lbase;
        if (r < 0) r = 0; /* within the noise of the subtraction (keep 16: nothing to roll back) */
        printf("  %-4d %6.3f  %5.1f%%\n", keeps[k], r * 1e3, 100 * r / sv);
    }
    B->destroy(st);
    free(tok);
    B->release(be, &m);
    mdl_free(&m);
    B->close(be);
    return 0;
}
