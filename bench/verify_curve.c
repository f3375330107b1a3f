/* verify_curve.c - a backend's verify cost curve, chain and tree (issue 23
 * item 4's input): at context depth D, for T = 1..64 rows, the median time
 * of one greedy verify - the target forward keeping its T rows (with the
 * draft's taps when a draft is given) and the argmax of every row - as a
 * chain and as a tree of the shape tree rounds build most (the draft's own
 * chain with a side branch below half of its nodes), and the tree_commit of
 * a path that moves rows.
 *
 *   make bench-verify [VERIFY_ARGS="TARGET DRAFT BACKEND DEPTH REPS"]
 *   verify_curve TARGET [DRAFT|-] [cpu|cuda|auto] [depth] [reps]
 *
 * Every timed span ends in a call that returns data (argmax ids, one row of
 * taps), so an asynchronous backend has finished the work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "util.h"

enum { MAXT = 64, MAXREPS = 64 };

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp);
    return t[n / 2];
}

/* The tree of T rows: rows 0..c-1 the draft's chain (c = ceil(T / 2)), row
 * c + k a sibling of chain row k + 1 (its parent k). path: chain rows 0..h
 * (h = c / 2), then row c + h, a sibling moved into place by tree_commit
 * when T > 2. Returns the path's length. */
static int comb(int T, int *parent, int *path) {
    int c = (T + 1) / 2, h = c / 2, n = 0;
    for (int t = 0; t < c; t++) parent[t] = t - 1;
    for (int k = 0; c + k < T; k++) parent[c + k] = k;
    for (int i = 0; i <= h; i++) path[n++] = i;
    if (c + h < T) path[n++] = c + h;
    return n;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: verify_curve TARGET [DRAFT|-] [cpu|cuda|auto] [depth] [reps]\n");
        return 2;
    }
    const char *draft = argc > 2 && strcmp(argv[2], "-") ? argv[2] : NULL;
    int depth = argc > 4 ? atoi(argv[4]) : 256, reps = argc > 5 ? atoi(argv[5]) : 10;
    if (reps < 1 || reps > MAXREPS || depth < 1) {
        fprintf(stderr, "reps 1..%d, depth >= 1\n", MAXREPS);
        return 2;
    }
    const be_ops *B = be_select(argc > 3 ? argv[3] : "auto");
    be_options o = {.n_threads = 0};
    void *be = B ? B->open(&o) : NULL;
    mdl_model m, dm;
    if (!be || mdl_load(&m, argv[1]) != 0 || B->prepare(be, &m) != 0) {
        fprintf(stderr, "%s\n", dfl_lasterr());
        return 1;
    }
    int n_taps = 0, tap_layers[CFG_MAX_TAPS];
    if (draft) { /* only its tap layers: the verify keeps those rows for draft_feed */
        if (mdl_load(&dm, draft) != 0) {
            fprintf(stderr, "%s\n", dfl_lasterr());
            return 1;
        }
        n_taps = dm.cfg.n_taps;
        memcpy(tap_layers, dm.cfg.tap_layers, sizeof(int) * (size_t)n_taps);
        mdl_free(&dm);
    }
    const cfg_model *c = &m.cfg;
    int n_ctx = depth + MAXT + 8;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_ctx), ids[MAXT];
    for (int i = 0; i < n_ctx; i++) tok[i] = (int32_t)((i * 7919 + 13) % c->vocab);
    void *st = B->create(be, &m, n_ctx);
    if (!st) {
        fprintf(stderr, "%s\n", dfl_lasterr());
        return 1;
    }
    for (int r = 0; r < depth; r += BE_MAX_ROWS) {
        be_batch b = {.T = depth - r < BE_MAX_ROWS ? depth - r : BE_MAX_ROWS, .tokens = tok + r};
        if (B->forward(st, &b) != 0) {
            fprintf(stderr, "%s\n", dfl_lasterr());
            return 1;
        }
    }
    float *tap = malloc(sizeof(float) * (size_t)(n_taps ? n_taps : 1) * c->hidden);
    printf("verify cost, %s, %s backend (%s), depth %d, median of %d after a warm-up%s\n", argv[1], B->name,
           B->describe(be), depth, reps, n_taps ? ", with the draft's taps" : "");
    printf("  T   chain ms  x T=1   tree ms  x T=1   commit ms\n");
    double base = 0;
    int tree_ok = 1;
    for (int T = 1; T <= MAXT; T++) {
        double tc[MAXREPS], tt[MAXREPS], tm[MAXREPS];
        int parent[MAXT], path[MAXT], np = comb(T, parent, path);
        for (int rep = -1; rep < reps; rep++) {
            be_batch b = {.T = T, .tokens = tok + depth, .keep_rows = 1, .n_taps = n_taps, .tap_layers = tap_layers};
            double a = dfl_now();
            if (B->forward(st, &b) != 0 || B->argmax(st, 0, T, ids) != 0) {
                fprintf(stderr, "chain T=%d: %s\n", T, dfl_lasterr());
                return 1;
            }
            if (rep >= 0) tc[rep] = dfl_now() - a;
            B->truncate(st, depth);
            if (!tree_ok || !B->tree_commit) continue;
            b.tree_parent = parent;
            a = dfl_now();
            if (B->forward(st, &b) != 0 || B->argmax(st, 0, T, ids) != 0) {
                fprintf(stderr, "tree T=%d: %s (trees not timed)\n", T, dfl_lasterr());
                tree_ok = 0;
                B->truncate(st, depth);
                continue;
            }
            double a2 = dfl_now();
            if (B->tree_commit(st, path, np) != 0 || (n_taps && B->taps(st, 0, 1, tap) != 0)) {
                fprintf(stderr, "tree_commit T=%d: %s\n", T, dfl_lasterr());
                return 1;
            }
            if (rep >= 0) tt[rep] = a2 - a, tm[rep] = dfl_now() - a2;
            B->truncate(st, depth);
        }
        double mc = median(tc, reps);
        if (T == 1) base = mc;
        if (tree_ok && B->tree_commit) {
            double mt = median(tt, reps), mm = median(tm, reps);
            printf("  %-3d %8.3f %6.2f %9.3f %6.2f %9.3f\n", T, 1e3 * mc, mc / base, 1e3 * mt, mt / base, 1e3 * mm);
        } else {
            printf("  %-3d %8.3f %6.2f %9s %6s %9s\n", T, 1e3 * mc, mc / base, "-", "-", "-");
        }
        fflush(stdout);
    }
    B->destroy(st);
    B->release(be, &m);
    mdl_free(&m);
    B->close(be);
    free(tok);
    free(tap);
    return 0;
}
