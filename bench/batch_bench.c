/* batch_bench.c - the batched target forward against one forward per
 * sequence, on the backend directly (no server, no threads): S sequences of
 * the demo target (or MODEL) each at a context of 64 tokens; one step = a
 * forward of T rows per sequence keeping its rows, then the argmax of each
 * row. "alone": S forward() + S argmax(); "batched": one forward_multi + one
 * predict_multi (argmaxes). The two alternate within each repetition (the median of
 * REPS is printed), so a busy machine weighs on both alike; each step is
 * rolled back, so every repetition runs at the same depth.
 * Then the draft blocks (with DRAFT, default the demo draft, quantized to q8
 * as dflash_load does when the kernels run int8 activations): S draft states
 * each over a context of 64 rows, one block of the draft's block_size (all
 * slots, ids < 32768: the default draft vocabulary); "alone": S
 * draft_block(), "batched": one draft_block_multi.
 * make bench-batch [BATCH_MODEL=DIR] [BATCH_DRAFT=DIR];
 * build/batch_bench TARGET DRAFT draft: the draft blocks only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "quant.h"
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
        if (argc <= 3 && be_cpu.forward(st[s], &b) != 0) return 1;
    }
    int draft_only = argc > 3 && !strcmp(argv[3], "draft");
    if (!draft_only)
        printf("| sequences | rows each | alone ms / step | batched ms / step | alone / batched |\n| --- | --- | --- | --- | --- |\n");
    static const int Ss[] = {1, 4, 8, 16}, Ts[] = {1, 16};
    for (int ti = 0; ti < 2 && !draft_only; ti++)
        for (int si = 0; si < 4; si++) {
            int S = Ss[si], T = Ts[ti];
            double ta[REPS], tb[REPS];
            be_batch bs[MAXS];
            int row[MAXS], n[MAXS];
            int32_t ids[MAXS][16], *out[MAXS];
            float *nolog[MAXS] = {0}; /* argmaxes only */
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
                if (be_cpu.forward_multi(st, bs, S) != 0 || be_cpu.predict_multi(st, row, n, out, nolog, S) != 0) return 1;
                tb[r] = dfl_now() - t0;
                for (int s = 0; s < S; s++) be_cpu.truncate(st[s], DEPTH);
            }
            qsort(ta, REPS, sizeof(double), cmp);
            qsort(tb, REPS, sizeof(double), cmp);
            printf("| %d | %d | %.2f | %.2f | %.2fx |\n", S, T, 1e3 * ta[REPS / 2], 1e3 * tb[REPS / 2],
                   ta[REPS / 2] / tb[REPS / 2]);
        }
    const char *ddir = argc > 2 ? argv[2] : "models/demo/draft";
    mdl_model d;
    if (mdl_load(&d, ddir) != 0) {
        fprintf(stderr, "batch_bench: %s: %s\n", ddir, dfl_lasterr());
        return 1;
    }
    wt_dtype dt = d.layers[0].wq.dtype; /* a float draft becomes q8, as dflash_load makes it */
    int fl = dt == WT_BF16 || dt == WT_F16 || dt == WT_F32;
    if ((fl && be_cpu.draft_q8(bi) && qt_model(&d, QT_Q8, 64) != 0) || be_cpu.prepare(bi, &d) != 0) {
        fprintf(stderr, "batch_bench: %s: %s\n", ddir, dfl_lasterr());
        return 1;
    }
    void *ds[MAXS];
    size_t F = (size_t)d.cfg.n_taps * d.cfg.hidden;
    float *feats = dfl_malloc(sizeof(float) * F * DEPTH);
    for (size_t i = 0; i < F * DEPTH; i++) feats[i] = (float)((int)((i * 2654435761u) >> 20 & 1023) - 512) / 256.0f;
    for (int s = 0; s < MAXS; s++) {
        ds[s] = be_cpu.draft_create(bi, &d, &m, 1024);
        if (be_cpu.draft_ctx_append(ds[s], feats, DEPTH) != 0) return 1;
    }
    int B = d.cfg.block_size;
    printf("\n| draft blocks | rows each | alone ms | batched ms | alone / batched |\n| --- | --- | --- | --- | --- |\n");
    static const int Sd[] = {1, 2, 4, 8};
    for (int si = 0; si < 4; si++) {
        int S = Sd[si];
        double ta[REPS], tb[REPS];
        be_draft_block q[MAXS];
        int32_t blk[MAXS][64], out[MAXS][64];
        for (int s = 0; s < S; s++) {
            blk[s][0] = tok[s][DEPTH];
            for (int i = 1; i < B; i++) blk[s][i] = d.cfg.mask_token_id;
            q[s] = (be_draft_block){.B = B, .tokens = blk[s], .n_vocab = 32768, .out = out[s]};
        }
        for (int r = 0; r < REPS; r++) {
            double t0 = dfl_now();
            for (int s = 0; s < S; s++)
                if (be_cpu.draft_block(ds[s], &q[s]) != 0) return 1;
            ta[r] = dfl_now() - t0;
            t0 = dfl_now();
            if (be_cpu.draft_block_multi(ds, q, S) != 0) return 1;
            tb[r] = dfl_now() - t0;
        }
        qsort(ta, REPS, sizeof(double), cmp);
        qsort(tb, REPS, sizeof(double), cmp);
        printf("| %d | %d | %.2f | %.2f | %.2fx |\n", S, B, 1e3 * ta[REPS / 2], 1e3 * tb[REPS / 2],
               ta[REPS / 2] / tb[REPS / 2]);
    }
    for (int s = 0; s < MAXS; s++) be_cpu.draft_destroy(ds[s]);
    free(feats);
    be_cpu.release(bi, &d);
    mdl_free(&d);
    for (int s = 0; s < MAXS; s++) be_cpu.destroy(st[s]);
    be_cpu.release(bi, &m);
    be_cpu.close(bi);
    mdl_free(&m);
    return 0;
}
