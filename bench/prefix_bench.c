/* prefix_bench.c - time to the first token of a prompt whose long prefix
 * another sequence holds (issue 24, prompt-prefix reuse across slots):
 * make bench-prefix [PREFIX_ARGS="TARGET DRAFT SHARED REPS"].
 *
 * A donor sequence has generated after prompt a = shared + tail a (SHARED
 * tokens, default 500, then 20 of its own). Prompt b = shared + tail b runs
 * on another sequence, fresh each time, with one token generated:
 *   before  b prefilled from row 0 (what a request landing on another slot
 *           paid until now)
 *   after   dflash_copy_prefix from the donor, then b prefilled from there
 * interleaved, REPS times each (default 7), plain and with the draft; the
 * medians are printed (and the copy's own time). Both replies are checked
 * to be the same token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dflash.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

int main(int argc, char **argv) {
    const char *target = argc > 1 ? argv[1] : "models/demo/target", *draft = argc > 2 ? argv[2] : "models/demo/draft";
    int shared = argc > 3 ? atoi(argv[3]) : 500, reps = argc > 4 ? atoi(argv[4]) : 7;
    if (shared < 1 || reps < 1 || reps > 64) {
        fprintf(stderr, "usage: prefix_bench [TARGET DRAFT SHARED REPS<=64]\n");
        return 2;
    }
    dflash_params p = dflash_default_params();
    p.n_ctx = shared + 64 < 1024 ? 1024 : shared + 64;
    dflash_model *m = dflash_load(target, draft, &p);
    if (!m) {
        fprintf(stderr, "prefix_bench: %s\n", dflash_error());
        return 1;
    }
    /* text tokens for the shared part (a sentence over and over), then two tails */
    const char *sent = "Rule: answer in plain words, keep every number exact and show each step of the working. ";
    int32_t *s_ids = NULL;
    size_t s_n = 0;
    if (dflash_tokenize(m, sent, strlen(sent), &s_ids, &s_n) != 0 || !s_n) {
        fprintf(stderr, "prefix_bench: %s\n", dflash_error());
        return 1;
    }
    int n = shared + 20;
    int32_t *a = malloc(sizeof(int32_t) * (size_t)n), *b = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < shared; i++) a[i] = b[i] = s_ids[i % (int)s_n];
    for (int i = shared; i < n; i++) a[i] = s_ids[(i * 3) % (int)s_n], b[i] = s_ids[(i * 5 + 1) % (int)s_n];
    b[shared] = a[shared] + 1; /* the tails differ from their first token */
    dflash_seq *donor = dflash_seq_new(m), *dst = dflash_seq_new(m);
    if (!donor || !dst) {
        fprintf(stderr, "prefix_bench: %s\n", dflash_error());
        return 1;
    }
    dflash_info in;
    dflash_get_info(m, &in);
    printf("prefix_bench: %s, prompt b %d tokens (%d shared with the donor's), %d reps, %d threads\n", target, n,
           shared, reps, in.n_threads);
    for (int drafting = 0; drafting <= 1; drafting++) {
        dflash_gen g = dflash_default_gen();
        g.n_predict = 1;
        g.use_draft = drafting;
        dflash_seq_reset(donor);
        if (dflash_seq_generate(donor, a, (size_t)n, &g, NULL, NULL, NULL, NULL, NULL) != 0) {
            fprintf(stderr, "prefix_bench: donor: %s\n", dflash_error());
            return 1;
        }
        double before[64], after[64], copy[64];
        int32_t tok[2] = {-1, -2};
        int reused = 0, bad = 0;
        for (int r = 0; r <= reps; r++) { /* r = 0: warm-up */
            for (int k = 0; k < 2; k++) {
                dflash_seq_reset(dst);
                int32_t *out = NULL;
                size_t no = 0;
                dflash_stats st;
                double t0 = now(), t1 = t0;
                if (k == 1 && dflash_copy_prefix(m, dst, &donor, 1, b, (size_t)n, NULL) < 0) {
                    fprintf(stderr, "prefix_bench: copy: %s\n", dflash_error());
                    return 1;
                }
                t1 = now();
                if (dflash_seq_generate(dst, b, (size_t)n, &g, NULL, NULL, &out, &no, &st) != 0 || no != 1) {
                    fprintf(stderr, "prefix_bench: b: %s\n", dflash_error());
                    return 1;
                }
                double t2 = now();
                tok[k] = out[0];
                free(out);
                if (r == 0) continue;
                if (k == 0) before[r - 1] = t2 - t0;
                else after[r - 1] = t2 - t0, copy[r - 1] = t1 - t0, reused = st.n_reused;
            }
            bad |= tok[0] != tok[1];
        }
        double mb = median(before, reps), ma = median(after, reps), mc = median(copy, reps);
        printf("  %-10s first token: before %.1f ms, after %.1f ms (copy %.2f ms, %d prompt tokens reused): "
               "%.1fx%s\n",
               drafting ? "DFlash" : "plain", 1e3 * mb, 1e3 * ma, 1e3 * mc, reused, mb / ma,
               bad ? "  TOKENS DIFFER" : "");
    }
    free(a);
    free(b);
    free(s_ids);
    dflash_seq_free(donor);
    dflash_seq_free(dst);
    dflash_free(m);
    return 0;
}
