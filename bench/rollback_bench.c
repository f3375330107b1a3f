/* rollback_bench.c - what the exact rollback of recurrent state costs
 * (Qwen3.5's Gated DeltaNet, deltanet.h) on the CPU backend. Built and run
 * by `make bench-rollback ROLLBACK_MODEL=DIR`.
 *
 *   rollback_bench MODEL_DIR [THREADS]
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
#include "deltanet.h"
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
    be_options o = {argc > 2 ? atoi(argv[2]) : 0, 0};
    void *be = be_cpu.open(&o);
    if (mdl_load(&m, argv[1]) != 0 || be_cpu.prepare(be, &m) != 0) {
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
    void *st = be_cpu.create(be, &m, DEPTH + W + 8);
    for (int r = 0; r < DEPTH; r += 64) {
        be_batch b = {64, tok + r, 0, NULL, 0, NULL, 0};
        if (be_cpu.forward(st, &b) != 0) {
            fprintf(stderr, "%s\n", dfl_lasterr());
            return 1;
        }
    }
    double t1[REPS], tv[REPS], tr[4][REPS];
    int keeps[4] = {1, 4, 8, 16};
    for (int rep = 0; rep < REPS; rep++) {
        be_batch b1 = {1, tok + DEPTH, 0, NULL, 0, NULL, 1};
        double a = dfl_now();
        be_cpu.forward(st, &b1);
        t1[rep] = dfl_now() - a;
        be_cpu.truncate(st, DEPTH);
        for (int k = 0; k < 4; k++) {
            be_batch bv = {W, tok + DEPTH, 0, NULL, 0, NULL, 1};
            a = dfl_now();
            be_cpu.forward(st, &bv);
            tv[rep] = dfl_now() - a;
            a = dfl_now();
            int kept = be_cpu.truncate(st, DEPTH + keeps[k]);
            tr[k][rep] = dfl_now() - a;
            if (kept != DEPTH + keeps[k]) {
                fprintf(stderr, "rollback kept %d rows, not %d\n", kept, DEPTH + keeps[k]);
                return 1;
            }
            be_cpu.truncate(st, DEPTH); /* back to the verify's own start: restore, no replay */
        }
    }
    double s1 = median(t1), sv = median(tv);
    size_t state = (size_t)c->n_linear_layers *
                   ((size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim +
                    (size_t)(c->lin_conv - 1) * (2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim)) *
                   sizeof(float);
    printf("%s: %d linear layers, recurrent state %.1f MB per sequence, depth %d, %d threads\n", argv[1],
           c->n_linear_layers, state / 1e6, DEPTH, be_cpu.n_threads(be));
    printf("decode step (T=1, takes the snapshot): %.2f ms | verify forward T=%d: %.2f ms\n", s1 * 1e3, W, sv * 1e3);
    printf("rollback into the verify (restore + replay of the kept rows):\n  keep   ms     %% of the verify\n");
    for (int k = 0; k < 4; k++) {
        double r = median(tr[k]);
        printf("  %-4d %6.3f  %5.1f%%\n", keeps[k], r * 1e3, 100 * r / sv);
    }
    be_cpu.destroy(st);
    free(tok);
    mdl_free(&m);
    be_cpu.close(be);
    return 0;
}
