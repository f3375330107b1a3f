/* prefill_bench.c - prompt processing: our batch-invariant GEMM (kn_matmul on
 * the weights as the engine loads them) against OpenBLAS sgemm on float32
 * copies of the same weights, for the matmuls of one forward of a model.
 * Built and run by `make bench-prefill` (needs libopenblas-dev).
 *
 *   prefill_bench MODEL_DIR [THREADS]
 *
 * For each row count T (the engine's prefill runs 32-row chunks) it times
 * every distinct matmul of layer 0 plus the LM head, scales layer 0 by the
 * layer count, and prints matmul-only prompt tok/s for both: attention,
 * norms and RoPE are the same code either way and are left out. Each
 * figure is the best of 5 rounds. OpenBLAS runs with the same thread
 * count (openblas_set_num_threads). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_backend.h"
#include "cpu/kernels.h"
#include "model.h"
#include "cpu/threads.h"
#include "util.h"

/* The pool the timed calls run on (NULL: the calling thread only). */
static tp_pool *pool;
static void bench_threads(int n) {
    tp_destroy(pool);
    pool = n == 1 ? NULL : tp_create(n);
}

void openblas_set_num_threads(int n);

typedef struct {
    const char *name;
    const wt_weight *w;
    float *f32; /* [rows][cols] dequantized copy */
    int per_model; /* how many per forward */
} mat;

static double best_of(int rounds, int reps, void (*fn)(const mat *, int, float *, float *), const mat *m, int T,
                      float *x, float *y) {
    double best = 1e30;
    fn(m, T, x, y); /* warm-up */
    for (int r = 0; r < rounds; r++) {
        double t0 = dfl_now();
        for (int i = 0; i < reps; i++) fn(m, T, x, y);
        double dt = (dfl_now() - t0) / reps;
        if (dt < best) best = dt;
    }
    return best;
}

static void run_ours(const mat *m, int T, float *x, float *y) { kn_matmul(pool, y, x, m->w, T); }

static void run_blas(const mat *m, int T, float *x, float *y) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, m->w->rows, m->w->cols, 1.0f, x, m->w->cols, m->f32,
                m->w->cols, 0.0f, y, m->w->rows);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: prefill_bench MODEL_DIR [THREADS]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 0;
    kn_init();
    mdl_model md;
    if (mdl_load(&md, argv[1]) != 0 || cb_pack(&md) != 0) {
        fprintf(stderr, "prefill_bench: %s\n", dfl_lasterr());
        return 1;
    }
    bench_threads(threads);
    openblas_set_num_threads(tp_threads(pool));
    const mdl_layer *L = &md.layers[0];
    mat ms[] = {{"q", &L->wq, NULL, md.cfg.n_layers}, {"k", &L->wk, NULL, md.cfg.n_layers},
                {"v", &L->wv, NULL, md.cfg.n_layers}, {"o", &L->wo, NULL, md.cfg.n_layers},
                {"gate", &L->wg, NULL, md.cfg.n_layers}, {"up", &L->wu, NULL, md.cfg.n_layers},
                {"down", &L->wd, NULL, md.cfg.n_layers}, {"lm_head", &md.lm_head, NULL, 1}};
    int nm = (int)(sizeof ms / sizeof ms[0]);
    size_t maxc = 0, maxr = 0;
    for (int i = 0; i < nm; i++) {
        const wt_weight *w = ms[i].w;
        ms[i].f32 = dfl_malloc64(sizeof(float) * (size_t)w->rows * w->cols);
        for (int r = 0; r < w->rows; r++) wt_get_row(ms[i].f32 + (size_t)r * w->cols, w, r);
        if ((size_t)w->cols > maxc) maxc = (size_t)w->cols;
        if ((size_t)w->rows > maxr) maxr = (size_t)w->rows;
    }
    int Ts[] = {32, 64, 128, 256};
    float *x = dfl_malloc64(sizeof(float) * 256 * maxc), *y = dfl_malloc64(sizeof(float) * 256 * maxr);
    for (size_t i = 0; i < 256 * maxc; i++) x[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
    printf("prefill matmuls of %s: %d layers, hidden %d, weights %s; %d threads, kernels %s%s\n", argv[1],
           md.cfg.n_layers, md.cfg.hidden, wt_dtype_name(L->wq.dtype), tp_threads(pool), kn_variant(),
           kn_act_quant() ? "+int8-act" : "");
    printf("(layer 0 timed, x the layer count; no LM head: a prompt needs logits for its last row only)\n\n");
    printf("| T rows | ours ms/forward | OpenBLAS sgemm ms | ours tok/s | OpenBLAS tok/s | ours GMAC/s | OpenBLAS GMAC/s |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (int ti = 0; ti < 4; ti++) {
        int T = Ts[ti];
        double ours = 0, blas = 0, macs = 0;
        for (int i = 0; i < nm; i++) {
            if (i == nm - 1) continue; /* body only: a prompt needs one row of logits */
            int reps = 2;
            ours += ms[i].per_model * best_of(5, reps, run_ours, &ms[i], T, x, y);
            blas += ms[i].per_model * best_of(5, reps, run_blas, &ms[i], T, x, y);
            macs += (double)ms[i].per_model * T * ms[i].w->rows * ms[i].w->cols;
        }
        printf("| %d | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f |\n", T, ours * 1e3, blas * 1e3, T / ours, T / blas,
               macs / ours / 1e9, macs / blas / 1e9);
    }
    return 0;
}
