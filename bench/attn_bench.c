/* attn_bench.c - at_run timings per variant, context length, T and thread
 * count, on the Qwen3-0.6B attention shape (16 query heads, 8 kv heads, hd
 * 128, 28 layers). Built and run by `make bench-attn`.
 *
 *   attn_bench [threads]   (default 1 and 2)
 *
 * One call = one layer: T causal query rows over na = ctx cached keys plus
 * their own T keys, the cache laid out as the CPU backend's ([nkv][n_ctx][hd]
 * f32 K and V). Calls walk the 28 layers' caches in turn, so a long context
 * reads its keys from DRAM as in decoding. Each figure is the best of ROUNDS
 * rounds of the mean time per call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/attention.h"
#include "cpu/kernels.h"
#include "cpu/threads.h"
#include "util.h"

enum { NH = 16, NKV = 8, HD = 128, LAYERS = 28, ROUNDS = 5 };
#define ROUND_SECONDS 0.1

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint32_t rng = 2463534242u;
static float rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}

/* seconds per call (one layer) */
static double time_case(tp_pool *tp, float *const *K, float *const *V, const float *q, float *out, int ctx, int T) {
    int n_ctx = ctx + T;
    double best = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        int calls = 0;
        double t0 = now(), t;
        do {
            int l = calls % LAYERS;
            at_job J = {.out = out, .q = q, .Ka = K[l], .Va = V[l], .na = ctx, .causal = 1, .nh = NH, .nkv = NKV,
                        .hd = HD, .a_head = (size_t)n_ctx * HD, .a_row = HD};
            at_run(tp, &J, T);
            calls++;
        } while ((t = now() - t0) < ROUND_SECONDS || calls < LAYERS);
        if (t / calls < best) best = t / calls;
    }
    return best;
}

int main(int argc, char **argv) {
    int ths[2] = {1, 2}, nth = 2;
    if (argc > 1) {
        ths[0] = atoi(argv[1]);
        nth = 1;
        if (ths[0] < 1) {
            fprintf(stderr, "usage: attn_bench [threads]\n");
            return 2;
        }
    }
    int ctxs[] = {512, 4096}, Ts[] = {1, 16};
    int maxctx = 4096 + 16;
    size_t cache = (size_t)NKV * maxctx * HD;
    float *K[LAYERS], *V[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        K[l] = dfl_malloc64(sizeof(float) * cache);
        V[l] = dfl_malloc64(sizeof(float) * cache);
        for (size_t i = 0; i < cache; i++) {
            K[l][i] = rnd();
            V[l][i] = rnd();
        }
    }
    float *q = dfl_malloc64(sizeof(float) * 16 * NH * HD), *out = dfl_malloc64(sizeof(float) * 16 * NH * HD);
    for (int i = 0; i < 16 * NH * HD; i++) q[i] = rnd() * 2;
    printf("at_run, Qwen3-0.6B shape (nh %d, nkv %d, hd %d), us per layer (x%d = per token step in ms)\n", NH, NKV,
           HD, LAYERS);
    printf("%-11s %3s %5s %3s %10s %10s %8s\n", "variant", "th", "ctx", "T", "us/layer", "ms/step", "T16/T1");
    for (int v = 0; v < kn_variant_count(); v++) {
        const char *name = kn_variant_name(v);
        if (strcmp(name, "avx512vnni") == 0 || kn_force_variant(name) != 0) continue; /* vnni: avx512's loops */
        for (int ti = 0; ti < nth; ti++) {
            tp_pool *tp = ths[ti] > 1 ? tp_create(ths[ti]) : NULL;
            for (int c = 0; c < 2; c++) {
                double t1 = 0;
                for (int k = 0; k < 2; k++) {
                    double s = time_case(tp, K, V, q, out, ctxs[c], Ts[k]);
                    if (k == 0) t1 = s;
                    printf("%-11s %3d %5d %3d %10.1f %10.2f", name, ths[ti], ctxs[c], Ts[k], s * 1e6, s * LAYERS * 1e3);
                    if (k == 1) printf(" %8.2f", s / t1);
                    printf("\n");
                    fflush(stdout);
                }
            }
            tp_destroy(tp);
        }
    }
    for (int l = 0; l < LAYERS; l++) {
        free(K[l]);
        free(V[l]);
    }
    free(q);
    free(out);
    return 0;
}
