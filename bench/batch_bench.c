/* batch_bench.c - the batched target forward against one forward per
 * sequence, on the backend directly (no server, no threads): S sequences of
 * the demo target (or MODEL) each at a context of 64 tokens; one step = a
 * forward of T rows per sequence keeping its rows, then the argmax of each
 * row. "alone": S forward() + S argmax(); "batched": one forward_multi + one
 * argmax_multi. The two alternate within each repetition (the median of
 * REPS is printed), so a busy machine weighs on both alike; each step is
 * rolled back, so every repetition runs at the same depth.
 * make bench-batch [BATCH_MODEL=DIR] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "util.h"

enum { DEPTH = 64, REPS = 31, MAXS = 16 };

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "models/demo/target";
    mdl_model m;
    if (mdl_load(&m, dir) != 0) {
        fprintf(stderr, "batch_bench: %s\n", dfl_lasterr());
        return 1;
    }
    be_options bo = {.n_threads = 0};
    void *bi = be_cpu.open(&bo);
    if (!bi || be_cpu.prepare(bi, &m) != 0) {
        fprintf(stderr, "batch_bench: %s\n", dfl_lasterr());
        return 1;
    }
    void *st[MAXS];
    int32_t tok[MAXS][DEPTH + 16];
    for (int s = 0; s < MAXS; s++) {
        st[s] = be_cpu.create(bi, &m, 1024);
        for (int i = 0; i < DEPTH + 16; i++) tok[s][i] = (int32_t)((997u * (unsigned)(s + 1) * (unsigned)(i + 7)) % (unsigned)m.cfg.vocab);
        be_batch b = {.T = DEPTH, .tokens = tok[s]};
        if (be_cpu.forward(st[s], &b) != 0) return 1;
    }
    printf("| sequences | rows each | alone ms / step | batched ms / step | alone / batched |\n| --- | --- | --- | --- | --- |\n");
    static const int Ss[] = {1, 4, 8, 16}, Ts[] = {1, 16};
    for (int ti = 0; ti < 2; ti++)
        for (int si = 0; si < 4; si++) {
            int S = Ss[si], T = Ts[ti];
            double ta[REPS], tb[REPS];
            be_batch bs[MAXS];
            int row[MAXS], n[MAXS];
            int32_t ids[MAXS][16], *out[MAXS];
            for (int s = 0; s < S; s++) {
                bs[s] = (be_batch){.T = T, .tokens = tok[s] + DEPTH, .keep_rows = 1};
                row[s] = 0, n[s] = T, out[s] = ids[s];
            }
            for (int r = 0; r < REPS; r++) {
                double t0 = dfl_now();
                for (int s = 0; s < S; s++)
                    if (be_cpu.forward(st[s], &bs[s]) != 0 || be_cpu.argmax(st[s], 0, T, ids[s]) != 0) return 1;
                ta[r] = dfl_now() - t0;
                for (int s = 0; s < S; s++) be_cpu.truncate(st[s], DEPTH);
                t0 = dfl_now();
                if (be_cpu.forward_multi(st, bs, S) != 0 || be_cpu.argmax_multi(st, row, n, out, S) != 0) return 1;
                tb[r] = dfl_now() - t0;
                for (int s = 0; s < S; s++) be_cpu.truncate(st[s], DEPTH);
            }
            qsort(ta, REPS, sizeof(double), cmp);
            qsort(tb, REPS, sizeof(double), cmp);
            printf("| %d | %d | %.2f | %.2f | %.2fx |\n", S, T, 1e3 * ta[REPS / 2], 1e3 * tb[REPS / 2],
                   ta[REPS / 2] / tb[REPS / 2]);
        }
    for (int s = 0; s < MAXS; s++) be_cpu.destroy(st[s]);
    be_cpu.release(bi, &m);
    be_cpu.close(bi);
    mdl_free(&m);
    return 0;
}
